/*
 * matmul_prep.c - a matmul call's activations in the form its mode's
 * kernels read (matmul.c sets the call up, then dsr1_mm_prep places the
 * arrays in its scratch and dsr1_mm_fill_all fills them): bf16 copies,
 * int8 codes with per-token or per-128-column scales and sums, INT4's
 * reordered x, the tokens-in-lanes xt, the FP8 requantisation tables.
 * Split from matmul.c, whose dispatch needs only the three functions.
 */
#include "kernels.h"
#include "matmul_impl.h"

#include <math.h>

/* ---- preparing the activations -------------------------------------------- */

/* len values of x to int8 with one scale: amax/127, q = rint(x * (127/amax))
 * clamped to +-127 (NaN and an all-zero span give 0), and the sum of q. */
static void quant_span(const float *x, int64_t len, int8_t *o, float *scale, int32_t *sum)
{
    float amax = 0.0f;
    for (int64_t c = 0; c < len; c++) amax = fmaxf(amax, fabsf(x[c]));
    float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
    int32_t s = 0;
    for (int64_t c = 0; c < len; c++) {
        float q = nearbyintf(x[c] * inv);
        q = q > 127.0f ? 127.0f : q < -127.0f ? -127.0f : q;
        /* NaN to 0 by name: converting it is undefined behaviour in C (gcc
         * on x86 happened to give 0, the vector kernels' bits; clang did
         * not, and tests/test_kernels_avx2.c's special values caught it) */
        o[c] = q == q ? (int8_t)q : 0;
        s += o[c];
    }
    *scale = amax / 127.0f;
    *sum = s;
}

/* Bytes of x's int8 form: xq, xs, xsum (64-aligned), then INT4's xp, xg. */
static size_t int8_head_bytes(const dsr1_mm_job *j)
{
    size_t b = (size_t)j->n * ((size_t)j->ldxq + 2 * sizeof(float));
    return (b + 63) & ~(size_t)63;
}

/* Where an rq job's tables start: after x's codes, scales and sums. */
static size_t rq_tab_offset(const dsr1_mm_job *j)
{
    return (int8_head_bytes(j) + (size_t)j->n * (size_t)j->ldg * 8 + 63) & ~(size_t)63;
}

/* W8A8 with tokens in lanes where the AVX-512 kernels run and AMX does
 * not: the FP8 rq jobs' dsr1_mm_rows_int8g_xl_avx512 always (from
 * DSR1_MM_RQ_MIN_N, kernels.h, 9 tokens), INT8 weights'
 * dsr1_mm_rows_int8_xl_avx512 from XL_MIN_N to XL_INT8_MAX_N tokens.
 * One process alternating the builds, INT8 2048x7168 from
 * 1 GB of copies, Zen 4, 2 threads, 4 rounds, against the kernels before
 * (the panel below 24 tokens, rows in lanes from 24): 12 tokens 0.99x, 16
 * 1.11x, 20 1.03x, 24 1.03x, 28 1.00x, 32 1.12x, 48 1.08x, 64 1.04x, 128
 * 1.01x, 512 1.00x; but the R1-shape INT8 file's 512-token prefill with it
 * at every count ran 0.97x (6 rounds, each behind), even with the cap. */
#define XL_MIN_N 16
#define XL_INT8_MAX_N 96
static int want_xt(const dsr1_mm_job *j, int avx)
{
    if (!avx || j->amx || j->w->cols % 64) return 0;
    return j->rq || (j->act == DSR1_ACT_INT8 && j->w->type == DSR1_T_INT8 && j->w->group == 0 &&
                     j->n >= XL_MIN_N && j->n < XL_INT8_MAX_N);
}

/* Bytes of xt: whole 16-token vectors. */
static size_t xt_bytes(const dsr1_mm_job *j)
{
    return (size_t)((j->n + 15) / 16) * (size_t)j->ldxq * 16;
}

size_t dsr1_mm_prep_bytes(const dsr1_mm_job *j, int avx)
{
    if (j->fp8amx) return dsr1_mm_fp8_amx_prep_bytes(j->n, j->w->cols);
    if (j->act == DSR1_ACT_BF16 && j->w->type == DSR1_T_FP8_E4M3) return 0; /* x' per task */
    if (j->act == DSR1_ACT_BF16) /* bf16(x), or for the tiles its pairs interleaved by token */
        return (size_t)j->n * (size_t)j->ldxb * 2;
    if (j->rq)
        return rq_tab_offset(j) + sizeof(dsr1_mm_rq_tab) +
               (want_xt(j, avx) ? xt_bytes(j) + (size_t)j->ldg * (size_t)((j->n + 15) & ~15) * sizeof(float) : 0);
    if (j->act == DSR1_ACT_INT8)
        return int8_head_bytes(j) +
               (j->w->type == DSR1_T_INT4 ? (size_t)j->n * ((size_t)j->ldxp + 4 * (size_t)j->ldxg) : 0) +
               (want_xt(j, avx) ? xt_bytes(j) : 0);
    return 0;
}

/* Tokens [t0, t1) of x in the mode's form, into the arrays prep set up
 * (the same bytes, scales and sums whichever range a call covers, so the
 * ranges may run on different threads). */
static void fill_rows(const dsr1_mm_job *j, int t0, int t1, int avx, int avx2)
{
    const int64_t cols = j->w->cols;
    const float *x = j->x + t0 * j->ldx;
    const int n = t1 - t0;
    if (j->act == DSR1_ACT_BF16) {
        uint16_t *xb = (uint16_t *)j->xb + t0 * j->ldxb;
        if (avx) {
            dsr1_mm_bf16_rows_avx512(x, j->ldx, n, cols, xb, j->ldxb);
            return;
        }
        for (int t = 0; t < n; t++) {
            for (int64_t c = 0; c < cols; c++) xb[t * j->ldxb + c] = dsr1_mm_to_bf16(x[t * j->ldx + c]);
            for (int64_t c = cols; c < j->ldxb; c++) xb[t * j->ldxb + c] = 0;
        }
        return;
    }
    int8_t *xq = (int8_t *)j->xq + t0 * j->ldxq;
    if (j->rq) { /* per DSR1_MM_XG columns (FP8 as W8A8, matmul_impl.h) */
        float *xs = (float *)j->xgs + t0 * j->ldg;
        int32_t *xsum = (int32_t *)j->xgc + t0 * j->ldg;
        if (avx) {
            dsr1_mm_int8_groups_avx512(x, j->ldx, n, cols, xq, j->ldxq, xs, xsum, j->ldg);
        } else if (avx2) {
            dsr1_mm_int8_groups_avx2(x, j->ldx, n, cols, xq, j->ldxq, xs, xsum, j->ldg);
        } else {
            for (int t = 0; t < n; t++) {
                for (int64_t g = 0; g < j->ldg; g++) {
                    const int64_t c = g * DSR1_MM_XG, len = cols - c < DSR1_MM_XG ? cols - c : DSR1_MM_XG;
                    quant_span(x + t * j->ldx + c, len, xq + t * j->ldxq + c, xs + t * j->ldg + g,
                               xsum + t * j->ldg + g);
                }
                for (int64_t c = cols; c < j->ldxq; c++) xq[t * j->ldxq + c] = 0;
            }
        }
        for (int64_t i = 0; i < (int64_t)n * j->ldg; i++) xsum[i] *= -128;
        if (j->xt) { /* tokens in lanes: t0 is a multiple of 16 (fill_all) */
            dsr1_mm_xt_fill_avx512(xq, j->ldxq, n, (uint8_t *)j->xt + t0 / 16 * j->ldxt, j->ldxt);
            float *xst = (float *)j->xst;
            const int pad = t1 == j->n ? (int)j->ldxst - t1 : 0;
            for (int64_t g = 0; g < j->ldg; g++) {
                for (int t = 0; t < n; t++) xst[g * j->ldxst + t0 + t] = xs[t * j->ldg + g];
                for (int t = 0; t < pad; t++) xst[g * j->ldxst + t1 + t] = 0.0f;
            }
        }
        return;
    }
    float *xs = (float *)j->xs + t0;
    int32_t *xsum = (int32_t *)j->xsum + t0;
    if (avx) {
        dsr1_mm_int8_rows_avx512(x, j->ldx, n, cols, xq, j->ldxq, xs, xsum);
    } else if (avx2) {
        dsr1_mm_int8_rows_avx2(x, j->ldx, n, cols, xq, j->ldxq, xs, xsum);
    } else {
        for (int t = 0; t < n; t++) {
            quant_span(x + t * j->ldx, cols, xq + t * j->ldxq, xs + t, xsum + t);
            for (int64_t c = cols; c < j->ldxq; c++) xq[t * j->ldxq + c] = 0;
        }
    }
    if (j->xt) /* tokens in lanes: t0 is a multiple of 16 (fill_all) */
        dsr1_mm_xt_fill_avx512(xq, j->ldxq, n, (uint8_t *)j->xt + t0 / 16 * j->ldxt, j->ldxt);
    if (j->xp && avx) /* W4A8's reordered x, from the codes just made */
        dsr1_mm_w4_prep_avx512(xq, j->ldxq, n, j->w->group, (int8_t *)j->xp + t0 * j->ldxp, j->ldxp,
                               (int32_t *)j->xg + t0 * j->ldxg, j->ldxg);
    else if (j->xp)
        dsr1_mm_w4_prep_avx2(xq, j->ldxq, n, cols, j->w->group, (int8_t *)j->xp + t0 * j->ldxp, j->ldxp,
                             (int32_t *)j->xg + t0 * j->ldxg, j->ldxg);
}

/* Point the mode's activation arrays into mem (prep_bytes(j) bytes) and
 * make what is per call (the rq tables); fill_rows then fills them. avx:
 * the AVX-512 kernels may be used; avx2: the AVX2 ones. 0 when x needs no
 * preparation. */
int dsr1_mm_prep(dsr1_mm_job *j, void *mem, int avx, int avx2)
{
    char *m = mem;
    if (j->fp8amx) { /* the AMX FP8 GEMV's tables and x in its order (x' is per task) */
        j->f8x = dsr1_mm_fp8_amx_prep(mem);
        j->f8tab = mem;
        return 1;
    }
    if (j->act == DSR1_ACT_BF16 && j->w->type == DSR1_T_FP8_E4M3) return 0; /* x' per task */
    if (j->b16gv) { /* the tiles' B alone (dsr1_mm_bf16_gv_fill) */
        j->b16b = mem;
        return 1;
    }
    if (j->act == DSR1_ACT_BF16) {
        j->xb = mem;
        return 1;
    }
    if (j->act != DSR1_ACT_INT8 && !j->rq) return 0;
    j->xq = mem;
    if (j->rq) {
        float *xs = (float *)(m + int8_head_bytes(j));
        j->xgs = xs;
        j->xgc = (int32_t *)(xs + (size_t)j->n * (size_t)j->ldg);
        if (avx || avx2) {
            dsr1_mm_rq_tab *t = (dsr1_mm_rq_tab *)(m + rq_tab_offset(j));
            if (avx) dsr1_mm_fp8_rq_tab_fill_avx512(t);
            else dsr1_mm_fp8_rq_tab_fill(t);
            j->rqt = t;
        }
        if (want_xt(j, avx)) {
            uint8_t *xt = (uint8_t *)(m + rq_tab_offset(j) + sizeof(dsr1_mm_rq_tab));
            j->xt = xt;
            j->ldxt = j->ldxq * 16;
            j->xst = (const float *)(xt + xt_bytes(j));
            j->ldxst = (j->n + 15) & ~15;
        }
        return 1;
    }
    float *xs = (float *)(m + (size_t)j->n * (size_t)j->ldxq);
    j->xs = xs;
    j->xsum = (int32_t *)(xs + j->n);
    int64_t g = j->w->group;
    if (j->w->type == DSR1_T_INT4 && ((avx && (g == 32 || g == 128)) || (avx2 && g % 32 == 0))) {
        int8_t *xp = (int8_t *)(m + int8_head_bytes(j));
        j->xp = xp;
        j->xg = (int32_t *)(xp + (size_t)j->n * (size_t)j->ldxp);
    }
    if (want_xt(j, avx)) {
        j->xt = (uint8_t *)(m + int8_head_bytes(j));
        j->ldxt = j->ldxq * 16;
    }
    return 1;
}

typedef struct fill_task {
    const dsr1_mm_job *j;
    int per, avx, avx2;
} fill_task;

static void fill_task_run(void *ctx, int task, int ntasks)
{
    (void)ntasks;
    const fill_task *f = ctx;
    if (f->j->fp8amx || f->j->b16gv) { /* column steps of every token */
        const int64_t steps = f->j->w->cols / (f->j->fp8amx ? 64 : 32), s0 = (int64_t)task * f->per;
        const int64_t s1 = s0 + f->per < steps ? s0 + f->per : steps;
        if (s0 < s1 && f->j->fp8amx) dsr1_mm_fp8_amx_fill(f->j, s0, s1);
        else if (s0 < s1) dsr1_mm_bf16_gv_fill(f->j, s0, s1);
        return;
    }
    int t0 = task * f->per, t1 = t0 + f->per < f->j->n ? t0 + f->per : f->j->n;
    if (t0 < t1) fill_rows(f->j, t0, t1, f->avx, f->avx2);
}

/* fill_rows for all n tokens: on the pool's threads when there is enough
 * of x, else here. A 512-token chunk of 7168 columns is 14 MB of floats:
 * on a 16-core Xeon one thread quantising it while 15 waited held a
 * 2048x7168 W8A8 matmul on AMX tiles to half its speed (README, "AMX"). */
void dsr1_mm_fill_all(dsr1_pool *p, const dsr1_mm_job *j, int avx, int avx2)
{
    int nth = p ? dsr1_pool_size(p) : 1;
    if (nth < 2 || (int64_t)j->n * j->w->cols < (1 << 16)) {
        if (j->fp8amx) dsr1_mm_fp8_amx_fill(j, 0, j->w->cols / 64);
        else if (j->b16gv) dsr1_mm_bf16_gv_fill(j, 0, j->w->cols / 32);
        else fill_rows(j, 0, j->n, avx, avx2);
        return;
    }
    if (j->fp8amx || j->b16gv) { /* by steps: the tokens of a step share cache lines */
        const int steps = (int)(j->w->cols / (j->fp8amx ? 64 : 32)), per = (steps + nth - 1) / nth;
        fill_task f = {j, per, avx, avx2};
        dsr1_pool_run(p, fill_task_run, &f, (steps + per - 1) / per);
        return;
    }
    int per = (j->n + nth - 1) / nth;
    if (j->xt) per = (per + 15) / 16 * 16; /* whole vectors of xt */
    fill_task f = {j, per, avx, avx2};
    dsr1_pool_run(p, fill_task_run, &f, (j->n + per - 1) / per);
}
