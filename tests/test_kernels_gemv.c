/*
 * test_kernels_gemv.c - the one-token GEMVs on the shapes a model gives
 * them and test_kernels.c's odd shapes do not: BF16 weights with rows a
 * multiple of 32 wide (every BF16 matrix of DeepSeek's), which take
 * matmul_avx512.c's eight-row bf16_gemv at n = 1 in BF16 mode. Its order
 * must be the canonical one of kernels.h: the same bits as the portable
 * kernel, and as each token inside a batch (the many-token panels), with
 * one thread or two, with its software prefetch and without (the pool's
 * hwpf, the decoder's per-step choice).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/kernels.h"
#include "backends/cpu/matmul_impl.h"
#include "core/numeric.h"
#include "mat_util.h"
#include "test.h"

/* rows x cols BF16, n tokens: dsr1_matmul at n = 1 (each token alone, one
 * thread and two) against the portable kernel and against the batch. */
static void check_bf16_gemv(dsr1_test_ctx *t, dsr1_pool *pool, int64_t rows, int64_t cols)
{
    enum { N = 7 };
    const int64_t ldx = cols + 32; /* x rows apart by more than cols */
    tmat m = dsr1_test_mat(DSR1_T_BF16, rows, cols, 0, 40 + (uint64_t)cols);
    rng g = {cols};
    float *x = malloc((size_t)(N * ldx) * sizeof *x);
    for (int64_t i = 0; i < N * ldx; i++) x[i] = dsr1_test_frand(&g, -2, 2);
    x[3] = 0.0f, x[7] = -0.0f, x[11] = 1e-40f, x[13] = 37.0f; /* zero, a denormal, a large value */
    float *port = malloc((size_t)(N * rows) * sizeof *port), *batch = malloc((size_t)(N * rows) * sizeof *batch);
    float *one = malloc((size_t)(rows + 1) * sizeof *one);
    dsr1_matmul_with(NULL, &m.w, x, ldx, port, rows, N, DSR1_ACT_BF16, DSR1_MM_PORTABLE);
    dsr1_matmul(pool, &m.w, x, ldx, batch, rows, N, DSR1_ACT_BF16);
    CHECKF(!memcmp(batch, port, (size_t)(N * rows) * sizeof *port), "%lldx%lld BF16 n=%d: panels differ from portable",
           (long long)rows, (long long)cols, N);
    /* hw: the pool's hwpf, the GEMV without its software prefetch (the
     * caller's thread alone has none: a NULL pool always prefetches) */
    for (int hw = 0; hw <= 1; hw++) {
        dsr1_pool_set_hwpf(pool, hw);
        for (int tok = 0; tok < N; tok++)
            for (int threads = 1 + hw; threads <= 2; threads++) {
                one[rows] = 12345.0f; /* past the last row: must stay */
                dsr1_matmul(threads == 2 ? pool : NULL, &m.w, x + tok * ldx, ldx, one, rows, 1, DSR1_ACT_BF16);
                int bad = 0;
                for (int64_t r = 0; r < rows; r++) bad += memcmp(&one[r], &port[tok * rows + r], sizeof *one) != 0;
                CHECKF(bad == 0,
                       "%lldx%lld BF16 token %d alone (%d thread%s, hwpf %d): %d of %lld rows differ from portable",
                       (long long)rows, (long long)cols, tok, threads, threads == 2 ? "s" : "", hw, bad,
                       (long long)rows);
                CHECKF(one[rows] == 12345.0f, "%lldx%lld BF16 token %d: wrote past the last row", (long long)rows,
                       (long long)cols, tok);
            }
    }
    dsr1_pool_set_hwpf(pool, 0);
    free(x);
    free(port);
    free(batch);
    free(one);
    dsr1_test_mat_free(&m);
}

/* 45 rows: five blocks of eight and a ragged five. 4160 columns: two whole
 * 2048-column chunks and a third of 64, each summed apart (a kernel that
 * ran the row as one sum, or cut other chunks, gives other bits); 96: one
 * short chunk; 128: MLA's per-head width. */
DSR1_TEST(kernels_bf16_gemv_matches_portable)
{
    if (!dsr1_mm_avx512_usable())
        DSR1_SKIP("no AVX-512 BF16/VNNI kernels on this CPU: %s", "the eight-row BF16 GEMV under test does not run");
    dsr1_pool *pool = NULL;
    dsr1_error err = {0};
    CHECK_OK(dsr1_pool_create(&pool, 2, &err), &err);
    check_bf16_gemv(t, pool, 45, 4160);
    check_bf16_gemv(t, pool, 45, 96);
    check_bf16_gemv(t, pool, 19, 128);
    dsr1_pool_free(pool);
}

/* Which one-token BF16 GEMVs ask for their lines ahead: rows of a 4 KiB
 * page or more as the decoder chose (hwpf), shorter ones always - q_b's
 * 1536 columns and the per-head 128 and 512 - since the hardware
 * prefetcher alone read them 10-25% slower (matmul_avx512.c, bf16_gemv).
 * A prefetch changes no value, so the rule itself is what is checked. */
DSR1_TEST(kernels_bf16_gemv_short_rows_prefetch)
{
    const int64_t shorts[] = {128, 512, 1536, 2016}, longs[] = {2048, 7168, 16384};
    for (size_t i = 0; i < sizeof shorts / sizeof *shorts; i++) {
        CHECKF(dsr1_mm_bf16_gemv_swpf(shorts[i], 0), "%lld columns, hwpf 0: no prefetch", (long long)shorts[i]);
        CHECKF(dsr1_mm_bf16_gemv_swpf(shorts[i], 1), "%lld columns (rows under 4 KiB), hwpf 1: left to the hardware",
               (long long)shorts[i]);
    }
    for (size_t i = 0; i < sizeof longs / sizeof *longs; i++) {
        CHECKF(dsr1_mm_bf16_gemv_swpf(longs[i], 0), "%lld columns, hwpf 0: no prefetch", (long long)longs[i]);
        CHECKF(!dsr1_mm_bf16_gemv_swpf(longs[i], 1), "%lld columns, hwpf 1: prefetched anyway", (long long)longs[i]);
    }
}
