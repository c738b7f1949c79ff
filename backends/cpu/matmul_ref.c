/*
 * matmul_ref.c - the reference matmul every fast kernel is tested against
 * (dequantise a row with core/wmat.c's scalar definition, dot product in
 * double).
 *
 * Does not: choose kernels, use threads or vector instructions. Speed is not
 * a goal here; being obviously right is.
 *
 * Invariant: dsr1_wmat_dequant_span produces, for every weight, exactly the
 * float32 the fast kernels use in DSR1_ACT_F32 mode (one rounding of
 * value * scale), so F32-mode results differ from the reference only by
 * summation order.
 */
#include "kernels.h"
#include "matmul_impl.h"

#include <stdlib.h>

#include "../../core/numeric.h"

/* ---- reference matmul --------------------------------------------------- */

void dsr1_matmul_ref(const dsr1_wmat *w, const float *x, int64_t ldx, float *y,
                     int64_t ldy, int n)
{
    float *row = malloc((size_t)w->cols * sizeof *row);
    DSR1_ASSERT(row != NULL);
    for (int64_t r = 0; r < w->rows; r++) {
        dsr1_wmat_dequant_row(w, r, row);
        for (int t = 0; t < n; t++) {
            double s = 0;
            for (int64_t c = 0; c < w->cols; c++) s += (double)row[c] * x[t * ldx + c];
            y[t * ldy + r] = (float)s;
        }
    }
    free(row);
}
