/*
 * test_kernels_avx2.c - the AVX2 kernels (matmul_avx2.c) against the
 * portable ones, bit for bit: every weight type and mode they take, GEMV
 * and panel token counts, 1 and 2 threads, the activations' special values
 * and the FP8 decode's fallback cases. DSR1_MM_AVX2 forces these kernels,
 * so they are tested on AVX-512 machines too (where dsr1_matmul takes the
 * AVX-512 ones); skipped only on a CPU without AVX2, FMA and F16C.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/kernels.h"
#include "backends/cpu/matmul_impl.h"
#include "mat_util.h"
#include "test.h"

#define SKIP_NO_AVX2()                                                                            \
    do {                                                                                          \
        if (!dsr1_mm_avx2_usable())                                                               \
            DSR1_SKIP("no AVX2/FMA/F16C on this CPU: %s", "the kernels under test cannot run"); \
    } while (0)

static float *rand_x(int n, int64_t ldx, uint64_t seed, float lo, float hi)
{
    rng g = {seed};
    float *x = malloc((size_t)n * (size_t)ldx * sizeof *x);
    for (int64_t i = 0; i < n * ldx; i++) x[i] = dsr1_test_frand(&g, lo, hi);
    return x;
}

/* y of the AVX2 kernels (the pool's threads, and one thread) against the
 * portable kernel's for n tokens of x; returns the failures' count. */
static int same_as_portable(dsr1_test_ctx *t, dsr1_pool *pool, const tmat *m, const float *x, int64_t ldx,
                            int n, dsr1_act act, const char *what)
{
    const int64_t rows = m->w.rows;
    const size_t bytes = (size_t)n * (size_t)rows * 4;
    float *port = malloc(bytes), *y = malloc(bytes), *y1 = malloc(bytes);
    memset(y, 0xa5, bytes);
    memset(y1, 0x5a, bytes);
    dsr1_matmul_with(NULL, &m->w, x, ldx, port, rows, n, act, DSR1_MM_PORTABLE);
    dsr1_matmul_with(pool, &m->w, x, ldx, y, rows, n, act, DSR1_MM_AVX2);
    dsr1_matmul_with(NULL, &m->w, x, ldx, y1, rows, n, act, DSR1_MM_AVX2);
    int bad = memcmp(y, port, bytes) != 0 || memcmp(y1, port, bytes) != 0;
    CHECKF(!bad, "%s %s %lldx%lld n=%d: AVX2 differs from portable", what, m->what, (long long)rows,
           (long long)m->w.cols, n);
    free(port);
    free(y);
    free(y1);
    return bad;
}

static const int tok_counts[] = {1, 2, 3, 4, 5, 7, 8, 13, 24, 37};
#define NTOK ((int)(sizeof tok_counts / sizeof *tok_counts))

/* W8A8 on INT8 (per row, group 64, group 128) and W4A8 on INT4 (f16
 * group 32, bf16 group 128, f16 group 128): odd row counts (a last row
 * without its pair), columns in whole 32s and ragged (portable there). */
DSR1_TEST(kernels_avx2_integer_match_portable)
{
    SKIP_NO_AVX2();
    dsr1_pool *pool = NULL;
    dsr1_error err = {0};
    CHECK_OK(dsr1_pool_create(&pool, 2, &err), &err);
    static const int64_t i8_cols[] = {256, 2240, 7168, 301};
    for (int variant = 0; variant < 3; variant++)
        for (int ci = 0; ci < 4; ci++) {
            int64_t cols = i8_cols[ci];
            if (variant && cols % (variant == 1 ? 64 : 128)) cols = 2304;
            tmat m = dsr1_test_mat(DSR1_T_INT8, 45, cols, variant, 500 + (uint64_t)(variant * 10 + ci));
            float *x = rand_x(37, cols + 3, 7 + (uint64_t)ci, -2, 2);
            for (int ni = 0; ni < NTOK; ni++)
                same_as_portable(t, pool, &m, x, cols + 3, tok_counts[ni], DSR1_ACT_INT8, "w8a8");
            free(x);
            dsr1_test_mat_free(&m);
        }
    static const int64_t i4_cols[] = {128, 2176, 7168};
    for (int variant = 0; variant < 3; variant++)
        for (int ci = 0; ci < 3; ci++) {
            const int64_t cols = i4_cols[ci];
            tmat m = dsr1_test_mat(DSR1_T_INT4, 45, cols, variant, 600 + (uint64_t)(variant * 10 + ci));
            float *x = rand_x(37, cols + 5, 9 + (uint64_t)ci, -3, 3);
            for (int ni = 0; ni < NTOK; ni++)
                same_as_portable(t, pool, &m, x, cols + 5, tok_counts[ni], DSR1_ACT_INT8, "w4a8");
            free(x);
            dsr1_test_mat_free(&m);
        }
    dsr1_pool_free(pool);
}

/* FP8: BF16 mode (decode's kernel, fewer than DSR1_MM_RQ_MIN_N tokens in
 * the fast INT8 mode) and W8A8 on the requantised rows (from
 * DSR1_MM_RQ_MIN_N), over block edges (rows 45 and 300, columns 7168,
 * 2112 and 320: a partial last block). */
DSR1_TEST(kernels_avx2_fp8_match_portable)
{
    SKIP_NO_AVX2();
    dsr1_pool *pool = NULL;
    dsr1_error err = {0};
    CHECK_OK(dsr1_pool_create(&pool, 2, &err), &err);
    static const int64_t shapes[][2] = {{45, 7168}, {300, 2112}, {131, 320}};
    for (int si = 0; si < 3; si++) {
        const int64_t rows = shapes[si][0], cols = shapes[si][1];
        tmat m = dsr1_test_mat(DSR1_T_FP8_E4M3, rows, cols, 0, 700 + (uint64_t)si);
        float *x = rand_x(37, cols + 1, 11 + (uint64_t)si, -4, 4);
        for (int ni = 0; ni < NTOK; ni++) {
            same_as_portable(t, pool, &m, x, cols + 1, tok_counts[ni], DSR1_ACT_BF16, "fp8 bf16");
            same_as_portable(t, pool, &m, x, cols + 1, tok_counts[ni], DSR1_ACT_INT8_FAST, "fp8 fast");
        }
        free(x);
        dsr1_test_mat_free(&m);
    }
    dsr1_pool_free(pool);
}

/* The FP8 decode kernel's exactness conditions (matmul_avx2.c, rows_fp8):
 * x' too small for its bound (nonzero below 2^-100: products and sums
 * could go denormal, which the canonical order flushes), x' too large for
 * x' x 2^120 (2^8 and up), products that overflow, NaN and infinity in
 * x. Each makes the task fall back to the portable kernel or is exact
 * anyway; the bits must match in every case. The first five scale every
 * x (the test matrix's block scales are 0.001-0.02): x' near 2^-125,
 * 2^-107 and 2^-96 (above the bound: the fast path with tiny products),
 * 2^-110 with the random weights' small codes making denormal products;
 * 2e4 and 1e4 give x' both sides of 2^8, 3e3 below it. */
DSR1_TEST(kernels_avx2_fp8_fallback_cases)
{
    SKIP_NO_AVX2();
    const int64_t rows = 40, cols = 256, ldx = cols;
    tmat m = dsr1_test_mat(DSR1_T_FP8_E4M3, rows, cols, 0, 801);
    static const float specials[] = {1e-36f, -3e-37f, 1e-30f, 1e-27f, 1e-31f, 3e38f,   -1e38f, INFINITY,
                                     NAN,    -0.0f,   1e-40f, 2e4f,   1e4f,   -3e3f};
    for (size_t si = 0; si < sizeof specials / sizeof *specials; si++)
        for (int n = 1; n <= 5; n += 4) {
            float *x = rand_x(n, ldx, 900 + si, -1, 1);
            for (int t0 = 0; t0 < n; t0++)
                for (int64_t c = (int64_t)si; c < cols; c += 37) x[t0 * ldx + c] = specials[si];
            if (si < 5) /* every x small: products near or below the normal range */
                for (int64_t i = 0; i < n * ldx; i++) x[i] *= specials[si];
            if (si >= 11) /* every x large */
                for (int64_t i = 0; i < n * ldx; i++) x[i] = x[i] * specials[si] + specials[si];
            char what[48];
            snprintf(what, sizeof what, "fp8 bf16 special %zu", si);
            const size_t bytes = (size_t)n * rows * 4;
            float *port = malloc(bytes), *y = malloc(bytes);
            dsr1_matmul_with(NULL, &m.w, x, ldx, port, rows, n, DSR1_ACT_BF16, DSR1_MM_PORTABLE);
            dsr1_matmul_with(NULL, &m.w, x, ldx, y, rows, n, DSR1_ACT_BF16, DSR1_MM_AVX2);
            /* NaN results compare by their bits too: the same kernel path
             * (the fallback) must give the same payloads */
            CHECKF(!memcmp(y, port, bytes), "%s n=%d: AVX2 differs from portable", what, n);
            free(port);
            free(y);
            free(x);
        }
    /* x' exactly +-2^-125 or +-2^-121 (x = that / the block's scale): every
     * product exact, many of them and of the first sums denormal, which
     * the canonical order flushes; no flag says so (exact: no underflow;
     * denormal operands are the FP8 kernel's subnormal weights anyway), so
     * only the x' bound keeps these on the portable kernel. */
    for (int n = 1; n <= 5; n += 4) {
        float *x = rand_x(n, ldx, 990, -1, 1);
        for (int64_t i = 0; i < n * ldx; i++) {
            const float s = ((const float *)m.scale)[(i % ldx) / 128];
            x[i] = (x[i] < 0 ? -1.0f : 1.0f) * (i % 3 ? 0x1p-125f : 0x1p-121f) / s;
        }
        const size_t bytes = (size_t)n * rows * 4;
        float *port = malloc(bytes), *y = malloc(bytes);
        dsr1_matmul_with(NULL, &m.w, x, ldx, port, rows, n, DSR1_ACT_BF16, DSR1_MM_PORTABLE);
        dsr1_matmul_with(NULL, &m.w, x, ldx, y, rows, n, DSR1_ACT_BF16, DSR1_MM_AVX2);
        CHECKF(!memcmp(y, port, bytes), "fp8 bf16 x' 2^-125 n=%d: AVX2 differs from portable", n);
        free(port);
        free(y);
        free(x);
    }
    dsr1_test_mat_free(&m);
}

/* BF16 weights in BF16 mode (R1's BF16 checkpoints, V2-Lite, BF16 LM
 * heads): the tile shapes of 1-4 tokens, odd rows, two 2048-column
 * chunks; then denormal weights and tiny x, which the canonical order
 * flushes and the kernel hands to the portable one. */
DSR1_TEST(kernels_avx2_bf16_match_portable)
{
    SKIP_NO_AVX2();
    dsr1_pool *pool = NULL;
    dsr1_error err = {0};
    CHECK_OK(dsr1_pool_create(&pool, 2, &err), &err);
    static const int64_t cols_list[] = {256, 4160, 301};
    for (int ci = 0; ci < 3; ci++) {
        const int64_t cols = cols_list[ci];
        tmat m = dsr1_test_mat(DSR1_T_BF16, 43, cols, 0, 1100 + (uint64_t)ci);
        float *x = rand_x(37, cols + 3, 51 + (uint64_t)ci, -2, 2);
        for (int ni = 0; ni < NTOK; ni++)
            same_as_portable(t, pool, &m, x, cols + 3, tok_counts[ni], DSR1_ACT_BF16, "bf16");
        if (ci == 0) {
            uint16_t *wd = m.data;
            for (int64_t i = 0; i < 43 * cols; i += 97) wd[i] = (uint16_t)(0x0012 | (i & 1) << 15); /* denormals */
            same_as_portable(t, pool, &m, x, cols + 3, 1, DSR1_ACT_BF16, "bf16 denormal w");
            for (int64_t i = 0; i < 5 * (cols + 3); i++) x[i] *= 1e-36f;
            same_as_portable(t, pool, &m, x, cols + 3, 5, DSR1_ACT_BF16, "bf16 tiny x");
        }
        free(x);
        dsr1_test_mat_free(&m);
    }
    dsr1_pool_free(pool);
}

/* F32 mode: float32 weights read in place (the naive MLA form's products)
 * and other types dequantised, the canonical 16 lanes. */
DSR1_TEST(kernels_avx2_f32_match_portable)
{
    SKIP_NO_AVX2();
    dsr1_pool *pool = NULL;
    dsr1_error err = {0};
    CHECK_OK(dsr1_pool_create(&pool, 2, &err), &err);
    static const dsr1_type types[] = {DSR1_T_F32, DSR1_T_BF16, DSR1_T_INT8};
    static const int64_t cols_list[] = {192, 301, 2100};
    for (int ti = 0; ti < 3; ti++)
        for (int ci = 0; ci < 3; ci++) {
            tmat m = dsr1_test_mat(types[ti], 33, cols_list[ci], 0, 1000 + (uint64_t)(ti * 10 + ci));
            float *x = rand_x(9, cols_list[ci] + 2, 31 + (uint64_t)ci, -2, 2);
            for (int n = 1; n <= 9; n += 4)
                same_as_portable(t, pool, &m, x, cols_list[ci] + 2, n, DSR1_ACT_F32, "f32");
            free(x);
            dsr1_test_mat_free(&m);
        }
    dsr1_pool_free(pool);
}

/* W8A8's activation codes: ties (x.5 after the scaling), NaN, -0, a
 * denormal, values that quantise to +-127, an all-zero token. */
DSR1_TEST(kernels_avx2_int8_act_special_values)
{
    SKIP_NO_AVX2();
    static const float ties[] = {127.0f, 2.5f, -3.5f, 0.5f, -0.5f, 1.5f, -126.5f, 1e-40f, -0.0f, NAN};
    const int64_t rows = 40, cols = 256, ldx = cols + 7;
    const int n = 5;
    tmat m = dsr1_test_mat(DSR1_T_INT8, rows, cols, 0, 41);
    float *x = rand_x(n, ldx, 42, -2, 2);
    for (int64_t c = 0; c < ldx; c++) {
        x[c] = 0.0f;
        x[ldx + c] = ties[c % (sizeof ties / sizeof *ties)];
    }
    const size_t bytes = (size_t)n * rows * 4;
    float *port = malloc(bytes), *y = malloc(bytes);
    dsr1_matmul_with(NULL, &m.w, x, ldx, port, rows, n, DSR1_ACT_INT8, DSR1_MM_PORTABLE);
    dsr1_matmul_with(NULL, &m.w, x, ldx, y, rows, n, DSR1_ACT_INT8, DSR1_MM_AVX2);
    CHECKF(!memcmp(y, port, bytes), "%s: AVX2 W8A8 differs from portable", m.what);
    free(port);
    free(y);
    free(x);
    dsr1_test_mat_free(&m);
}

/* FP8 rows requantised through the table (dsr1_mm_fp8_requant_row_avx2)
 * give dsr1_mm_fp8_requant_row's bytes and scales: every code in every
 * block position, a negative and a zero block scale, a ragged last block;
 * and every block maximum (every table). */
DSR1_TEST(kernels_avx2_fp8_requant_matches)
{
    SKIP_NO_AVX2();
    const int64_t rows = 3, cols = 128 * 3 + 64;
    uint8_t *codes = malloc((size_t)(rows * cols));
    float sc[3 * 4];
    for (int64_t i = 0; i < rows * cols; i++) codes[i] = (uint8_t)(i * 37 + i / 256);
    for (int i = 0; i < 12; i++) sc[i] = (i % 3 == 1 ? -1.0f : 1.0f) * (0.001f + (float)i * 0.0137f);
    sc[2] = 0.0f;
    for (int64_t c = 128; c < 256; c++) codes[2 * cols + c] &= 0x87; /* subnormal codes only */
    dsr1_wmat w = {.type = DSR1_T_FP8_E4M3, .rows = rows, .cols = cols, .data = codes, .scale = sc,
                   .scale_type = DSR1_T_F32, .group = 128};
    dsr1_mm_rq_tab *tab = malloc(sizeof *tab);
    dsr1_mm_fp8_rq_tab_fill(tab);
    for (int64_t r = 0; r < rows; r++) {
        int8_t q0[512], q1[512];
        float s0[4], s1[4];
        dsr1_mm_fp8_requant_row(&w, r, q0, s0);
        dsr1_mm_fp8_requant_row_avx2(&w, r, q1, s1, tab);
        CHECKF(!memcmp(q0, q1, (size_t)cols) && !memcmp(s0, s1, sizeof s0),
               "row %lld: requantised codes or scales differ", (long long)r);
    }
    /* every table: row m's blocks have magnitudes 0..m (all of them in the
     * full blocks), both signs; a ragged last block of 40 (a scalar tail) */
    const int64_t c2 = 128 * 2 + 40;
    uint8_t *all = malloc((size_t)(128 * c2));
    float sa[128 * 3];
    for (int64_t m = 0; m < 128; m++)
        for (int64_t c = 0; c < c2; c++)
            all[m * c2 + c] = (uint8_t)((c * 37 + c / 128) % (m + 1) | (c % 3 == 1 ? 0x80 : 0));
    for (int i = 0; i < 128 * 3; i++) sa[i] = i % 5 == 2 ? -0.75f : 0.5f + (float)i;
    dsr1_wmat wa = {.type = DSR1_T_FP8_E4M3, .rows = 128, .cols = c2, .data = all, .scale = sa,
                    .scale_type = DSR1_T_F32, .group = 128};
    int bad = 0;
    for (int64_t r = 0; r < 128; r++) {
        int8_t q0[512], q1[512];
        float s0[3], s1[3];
        dsr1_mm_fp8_requant_row(&wa, r, q0, s0);
        dsr1_mm_fp8_requant_row_avx2(&wa, r, q1, s1, tab);
        bad += memcmp(q0, q1, (size_t)c2) != 0 || memcmp(s0, s1, sizeof s0) != 0;
    }
    CHECKF(!bad, "%d of 128 rows (largest code 0..127): requantised codes or scales differ", bad);
    free(all);
    free(tab);
    free(codes);
}
