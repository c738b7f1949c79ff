/*
 * test_amx.c - W8A8 on AMX tiles (backends/cpu/matmul_amx_avx512.c) gives
 * the VNNI kernels' bits and so the portable kernel's (BF16 on the tiles,
 * the fast mode's, is held to a rounding bound instead: below): INT8 weights with
 * one scale per row (DSR1_ACT_INT8), FP8 as W8A8 (DSR1_ACT_INT8_FAST) and
 * INT4 as W4A8 with groups of 128 (DSR1_ACT_INT8),
 * on shapes that leave a stripe under 32 rows to the VNNI kernels, with
 * calls of 16 (not FP8: its GEMV on tiles takes them) and 20 tokens
 * (DSR1_MM_AMX_MIN_N: one short block) and
 * token tails of 1, 8, 20 and 31 on short tiles (n = 33, 200, 52, 63), one
 * and several 512-column chunks, a last 128-column
 * group of 64, more than one 256-token block, tasks of 2 to 4 stripes
 * run together and a group of 4 followed by a shorter one (520 rows: one
 * thread's tasks are 144 rows of INT8, 160 of FP8 requantised 128 then
 * 32); pools of 1 and 3 threads; every 11th INT8 and INT4 token alone
 * equals itself in the batch; the tiles ran (the pool's count) wherever a
 * task holds 32 rows and the call 16 tokens. FP8 GEMVs of the fast mode
 * (1 to 32 tokens) and BF16 on the tiles (2 to 16) are held to a
 * rounding bound, as BF16 from 25.
 * On a CPU without AMX every test skips and says so: there is nothing to
 * compare.
 */
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/hw.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/matmul_impl.h"
#include "core/numeric.h"
#include "mat_util.h"
#include "test.h"

static float *make_x(int n, int64_t ldx, uint64_t seed)
{
    rng g = {seed};
    float *x = malloc((size_t)n * (size_t)ldx * sizeof *x);
    for (int64_t i = 0; i < n * ldx; i++) x[i] = dsr1_test_frand(&g, -2, 2);
    return x;
}

/* NULL when the pools of this machine run AMX tiles, else why not. */
static const char *no_amx(void)
{
    dsr1_hw hw;
    dsr1_hw_detect(&hw);
    if (!hw.amx_int8 || !hw.amx_tile) return "this CPU has no AMX-INT8 (cpuid)";
    if (!hw.os_amx) return "the kernel does not grant AMX tile state";
    return NULL;
}

static void amx_matches(dsr1_test_ctx *t, dsr1_type type, int variant, dsr1_act act, uint64_t seed)
{
    static const int64_t shapes[][2] = {{32, 64}, {64, 576}, {77, 2048}, {96, 1216}, {520, 640}};
    static const int ns[] = {16, 20, 32, 33, 52, 63, 64, 200, 416};
    static const int threads[] = {1, 3};
    const int NMAX = 416;
    for (int pi = 0; pi < 2; pi++) {
        dsr1_pool *pool = NULL;
        dsr1_error err = {0};
        CHECK_OK(dsr1_pool_create(&pool, threads[pi], &err), &err);
        if (!pool) return;
        CHECKF(dsr1_pool_amx(pool), "the CPU has AMX but the pool does not use it");
        for (int si = 0; si < 5; si++) {
            int64_t rows = shapes[si][0], cols = shapes[si][1], ldx = cols + 7;
            tmat m = dsr1_test_mat(type, rows, cols, variant, seed + (uint64_t)si);
            float *x = make_x(NMAX, ldx, seed + 100 + (uint64_t)si);
            size_t yb = (size_t)NMAX * (size_t)rows * 4;
            float *amx = malloc(yb), *vnni = malloc(yb), *port = malloc(yb), *one = malloc((size_t)rows * 4);
            for (size_t ni = 0; ni < sizeof ns / sizeof *ns; ni++) {
                int n = ns[ni];
                if (type == DSR1_T_FP8_E4M3 && act == DSR1_ACT_INT8_FAST && n <= DSR1_MM_FP8_AMX_MAX_N)
                    continue; /* FP8's few-token GEMV on tiles, not W8A8: gemv_on_tiles */
                size_t bytes = (size_t)n * (size_t)rows * 4;
                memset(amx, 0xff, yb); /* NaN: an output AMX forgot stays visible */
                const uint64_t runs = dsr1_pool_amx_runs(pool);
                dsr1_matmul(pool, &m.w, x, ldx, amx, rows, n, act);
                if (rows >= 32 * 4 * threads[pi]) /* tasks of 32 rows or more (matmul.c's task_rows) */
                    CHECKF(dsr1_pool_amx_runs(pool) > runs, "%s %lldx%lld n=%d, %d threads: the tiles never ran",
                           m.what, (long long)rows, (long long)cols, n, threads[pi]);
                dsr1_matmul_noamx(pool, &m.w, x, ldx, vnni, rows, n, act);
                dsr1_matmul_with(NULL, &m.w, x, ldx, port, rows, n, act, DSR1_MM_PORTABLE);
                CHECKF(!memcmp(amx, vnni, bytes), "%s %lldx%lld n=%d, %d threads: AMX differs from VNNI",
                       m.what, (long long)rows, (long long)cols, n, threads[pi]);
                CHECKF(!memcmp(amx, port, bytes), "%s %lldx%lld n=%d, %d threads: AMX differs from portable",
                       m.what, (long long)rows, (long long)cols, n, threads[pi]);
                int bad = 0; /* FP8 alone runs bf16: W8A8 starts at DSR1_MM_RQ_MIN_N */
                for (int tok = 0; tok < n && type != DSR1_T_FP8_E4M3; tok += 11) {
                    dsr1_matmul_with(NULL, &m.w, x + tok * ldx, ldx, one, rows, 1, act, DSR1_MM_PORTABLE);
                    bad += memcmp(one, amx + (size_t)tok * (size_t)rows, (size_t)rows * 4) != 0;
                }
                CHECKF(!bad, "%s %lldx%lld n=%d: %d tokens alone differ from in the batch", m.what,
                       (long long)rows, (long long)cols, n, bad);
            }
            free(amx);
            free(vnni);
            free(port);
            free(one);
            free(x);
            dsr1_test_mat_free(&m);
        }
        dsr1_pool_free(pool);
    }
}

DSR1_TEST(amx_int8_matches_vnni_and_portable)
{
    const char *why = no_amx();
    if (why) DSR1_SKIP("%s: no AMX kernels to compare", why);
    amx_matches(t, DSR1_T_INT8, 0, DSR1_ACT_INT8, 900);
}

DSR1_TEST(amx_fp8_w8a8_matches_vnni_and_portable)
{
    const char *why = no_amx();
    if (why) DSR1_SKIP("%s: no AMX kernels to compare", why);
    amx_matches(t, DSR1_T_FP8_E4M3, 0, DSR1_ACT_INT8_FAST, 950);
}

/* INT4 with groups of 128, bf16 and f16 scales (W4A8 on the tiles; the
 * shapes whose columns are not whole groups run bf16 on every side). */
DSR1_TEST(amx_int4_w4a8_matches_lanes_and_portable)
{
    const char *why = no_amx();
    if (why) DSR1_SKIP("%s: no AMX kernels to compare", why);
    amx_matches(t, DSR1_T_INT4, 1, DSR1_ACT_INT8, 970);
    amx_matches(t, DSR1_T_INT4, 2, DSR1_ACT_INT8, 990);
}

/* BF16 weights in the fast mode on the tiles (dsr1_mm_rows_bf16_amx):
 * tdpbf16ps adds each pair its own way, so no other kernel's bits; every
 * output within float32 rounding of the exact dot of the bf16 values
 * (double sums; the bound: one rounding of the running sum a column
 * pair); and each output one computation: the
 * same bits with 1 and 3 threads and for the first tokens of a longer
 * call (a tail of 1 on a short tile against a full tile). */
static double bf16_of(float v) { return dsr1_bf16_to_f32(dsr1_mm_to_bf16(v)); }

/* BF16 weights, or FP8 (the e4m3 value, x' = bf16(x * the block scale)):
 * how many outputs lie outside that bound. */
static int dots_within(const tmat *m, const float *x, int64_t ldx, const float *y, int n, const char **what)
{
    const int64_t rows = m->w.rows, cols = m->w.cols, ng = (cols + 127) / 128;
    const int fp8 = m->w.type == DSR1_T_FP8_E4M3;
    const float *sc = m->w.scale;
    int bad = 0;
    for (int tok = 0; tok < n; tok++)
        for (int64_t r = 0; r < rows; r++) {
            double dot = 0, mag = 0;
            for (int64_t c = 0; c < cols; c++) {
                const float xv = x[tok * ldx + c];
                double p = fp8 ? (double)dsr1_bf16_to_f32(dsr1_mm_fp8_bf16(((const uint8_t *)m->data)[r * cols + c])) *
                                     bf16_of(xv * sc[(r / 128) * ng + c / 128])
                               : (double)dsr1_bf16_to_f32(((const uint16_t *)m->data)[r * cols + c]) * bf16_of(xv);
                dot += p;
                mag += p < 0 ? -p : p;
            }
            double err = y[(int64_t)tok * rows + r] - dot;
            if (err < 0) err = -err;
            if (!(err <= (double)(cols / 2 + 1) * 0x1p-24 * mag + 1e-30)) bad++;
        }
    *what = bad ? "outside float32 rounding of the exact dot" : "";
    return bad;
}

DSR1_TEST(amx_bf16_fast_within_rounding)
{
    const char *why = no_amx();
    if (why) DSR1_SKIP("%s: no AMX kernels to compare", why);
    static const int64_t shapes[][2] = {{32, 64}, {64, 576}, {77, 2048}, {520, 640}};
    static const int ns[] = {32, 33, 52, 63, 200, 416};
    const int NMAX = 416;
    dsr1_pool *p1 = NULL, *p3 = NULL;
    dsr1_error err = {0};
    CHECK_OK(dsr1_pool_create(&p1, 1, &err), &err);
    CHECK_OK(dsr1_pool_create(&p3, 3, &err), &err);
    if (!p1 || !p3) return;
    for (int si = 0; si < 4; si++) {
        int64_t rows = shapes[si][0], cols = shapes[si][1], ldx = cols + 7;
        tmat m = dsr1_test_mat(DSR1_T_BF16, rows, cols, 0, 1500 + (uint64_t)si);
        float *x = make_x(NMAX, ldx, 1600 + (uint64_t)si);
        size_t yb = (size_t)NMAX * (size_t)rows * 4;
        float *a1 = malloc(yb), *a3 = malloc(yb), *full = malloc(yb);
        dsr1_matmul(p3, &m.w, x, ldx, full, rows, NMAX, DSR1_ACT_INT8_FAST);
        for (int ni = 0; ni < 6; ni++) {
            int n = ns[ni];
            size_t bytes = (size_t)n * (size_t)rows * 4;
            const char *what = "";
            memset(a1, 0xff, yb); /* NaN: an output AMX forgot stays visible */
            const uint64_t runs = dsr1_pool_amx_runs(p1);
            dsr1_matmul(p1, &m.w, x, ldx, a1, rows, n, DSR1_ACT_INT8_FAST);
            CHECKF(dsr1_pool_amx_runs(p1) > runs, "bf16 %lldx%lld n=%d: the tiles never ran", (long long)rows,
                   (long long)cols, n);
            dsr1_matmul(p3, &m.w, x, ldx, a3, rows, n, DSR1_ACT_INT8_FAST);
            int bad = dots_within(&m, x, ldx, a1, n, &what);
            CHECKF(!bad, "bf16 %lldx%lld n=%d: %d AMX outputs %s", (long long)rows, (long long)cols, n, bad, what);
            CHECKF(!memcmp(a1, a3, bytes), "bf16 %lldx%lld n=%d: 1 and 3 threads differ", (long long)rows,
                   (long long)cols, n);
            CHECKF(!memcmp(a1, full, bytes), "bf16 %lldx%lld n=%d: differs from the same tokens of n=%d",
                   (long long)rows, (long long)cols, n, NMAX);
        }
        free(a1);
        free(a3);
        free(full);
        free(x);
        dsr1_test_mat_free(&m);
    }
    dsr1_pool_free(p1);
    dsr1_pool_free(p3);
}

/* The expert FFN's fused gate and up (dsr1_ffn_gate_up, one pool run):
 * both halves on the tiles (the pool's count rises twice as much as for
 * the gate alone; the up half once ran on the VNNI kernel, the same bits,
 * because its job lacked the AMX memory) and h equals two dsr1_matmul
 * calls and dsr1_silu_mul. */
static void gate_up_on_tiles(dsr1_test_ctx *t, dsr1_type type, int variant, dsr1_act act, int n)
{
    const int64_t rows = 256, cols = 640;
    dsr1_pool *pool = NULL;
    dsr1_error err = {0};
    CHECK_OK(dsr1_pool_create(&pool, 2, &err), &err);
    if (!pool) return;
    tmat g = dsr1_test_mat(type, rows, cols, variant, 1200), u = dsr1_test_mat(type, rows, cols, variant, 1300);
    float *x = make_x(n, cols, 1400);
    float *h = malloc((size_t)n * rows * 4), *yg = malloc((size_t)n * rows * 4), *yu = malloc((size_t)n * rows * 4);
    uint64_t r0 = dsr1_pool_amx_runs(pool);
    dsr1_matmul(pool, &g.w, x, cols, yg, rows, n, act);
    uint64_t r1 = dsr1_pool_amx_runs(pool);
    dsr1_matmul(pool, &u.w, x, cols, yu, rows, n, act);
    uint64_t r2 = dsr1_pool_amx_runs(pool);
    dsr1_ffn_gate_up(pool, &g.w, &u.w, x, cols, h, rows, n, act);
    uint64_t r3 = dsr1_pool_amx_runs(pool);
    for (int k = 0; k < n; k++) dsr1_silu_mul(yg + (size_t)k * rows, yu + (size_t)k * rows, rows);
    CHECKF(r1 > r0 && r3 - r2 == (r1 - r0) + (r2 - r1), "%s: tile runs gate %llu, up %llu, fused %llu", g.what,
           (unsigned long long)(r1 - r0), (unsigned long long)(r2 - r1), (unsigned long long)(r3 - r2));
    CHECKF(!memcmp(h, yg, (size_t)n * rows * 4), "%s: fused gate/up differs from two matmuls", g.what);
    free(h);
    free(yg);
    free(yu);
    free(x);
    dsr1_test_mat_free(&g);
    dsr1_test_mat_free(&u);
    dsr1_pool_free(pool);
}

DSR1_TEST(amx_gate_up_both_halves_on_tiles)
{
    const char *why = no_amx();
    if (why) DSR1_SKIP("%s: no AMX kernels to compare", why);
    gate_up_on_tiles(t, DSR1_T_INT8, 0, DSR1_ACT_INT8, 77);
    gate_up_on_tiles(t, DSR1_T_FP8_E4M3, 0, DSR1_ACT_INT8_FAST, 77);
    gate_up_on_tiles(t, DSR1_T_INT4, 2, DSR1_ACT_INT8, 77);
    gate_up_on_tiles(t, DSR1_T_BF16, 0, DSR1_ACT_INT8_FAST, 77);
    gate_up_on_tiles(t, DSR1_T_FP8_E4M3, 0, DSR1_ACT_INT8_FAST, 3); /* the few-token GEMVs on tiles */
    gate_up_on_tiles(t, DSR1_T_FP8_E4M3, 0, DSR1_ACT_INT8_FAST, 20); /* past 16: the second C tile */
    gate_up_on_tiles(t, DSR1_T_BF16, 0, DSR1_ACT_INT8_FAST, 5);
}

/* Few-token GEMVs in the fast mode on the tiles - FP8
 * (dsr1_mm_rows_fp8_amx, 2 to DSR1_MM_FP8_AMX_MAX_N tokens) and BF16
 * (dsr1_mm_rows_bf16_gv_amx, 2 to 16): like BF16 above, no other kernel's
 * bits, so each output within float32 rounding of the exact dot of the
 * bf16 operands (for FP8 the e4m3 values, subnormals included: the test
 * matrices use every code but NaN, and x' = bf16(x * the block's scale))
 * and one computation: the same bits with 1 and 3 threads and for the
 * first tokens of the longest call on the tiles (for FP8 one token too:
 * a decode step and a verify batch give a token the same bits). Counts
 * under their fewest (BF16: one token) and columns the tiles do not take
 * (FP8: not a multiple of 64) stay on the canonical kernel: the fast
 * mode's bits equal the deterministic mode's there; one token more than
 * their most leaves the tiles. */
static void gemv_on_tiles(dsr1_test_ctx *t, dsr1_type type, const int64_t (*shapes)[2], int nshapes, int max_n,
                          uint64_t seed)
{
    /* up to max_n (the tiles' most, which full is), then one more (off them) */
    static const int ns[] = {1, 2, 3, 5, 8, 12, 13, 16, 17, 20, 31, 32, 33};
    const int nns = (int)(sizeof ns / sizeof *ns);
    const int fp8 = type == DSR1_T_FP8_E4M3, min_n = fp8 ? DSR1_MM_FP8_AMX_MIN_N : DSR1_MM_B16_AMX_MIN_N;
    dsr1_pool *p1 = NULL, *p3 = NULL;
    dsr1_error err = {0};
    CHECK_OK(dsr1_pool_create(&p1, 1, &err), &err);
    CHECK_OK(dsr1_pool_create(&p3, 3, &err), &err);
    if (!p1 || !p3) return;
    for (int si = 0; si < nshapes; si++) {
        const int64_t rows = shapes[si][0], cols = shapes[si][1], ldx = cols + 7;
        const int wide = cols % (fp8 ? 64 : 32) == 0;
        tmat m = dsr1_test_mat(type, rows, cols, 0, seed + (uint64_t)si);
        float *x = make_x(max_n + 1, ldx, seed + 100 + (uint64_t)si);
        size_t yb = (size_t)(max_n + 1) * (size_t)rows * 4;
        float *a1 = malloc(yb), *a3 = malloc(yb), *full = malloc(yb), *canon = malloc(yb);
        dsr1_matmul(p3, &m.w, x, ldx, full, rows, max_n, DSR1_ACT_INT8_FAST);
        for (int ni = 0; ni < nns && ns[ni] <= max_n + 1; ni++) {
            const int n = ns[ni], tiles = wide && n >= min_n && n <= max_n;
            size_t bytes = (size_t)n * (size_t)rows * 4;
            const char *what = "";
            memset(a1, 0xff, yb); /* NaN: an output the tiles forgot stays visible */
            const uint64_t runs = dsr1_pool_amx_runs(p1);
            dsr1_matmul(p1, &m.w, x, ldx, a1, rows, n, DSR1_ACT_INT8_FAST);
            if (n > max_n && fp8) { /* past the tiles' most: W8A8, whose tiles and VNNI kernels
                                       give one result (amx_matches), not the GEMV's */
                dsr1_matmul_noamx(p1, &m.w, x, ldx, canon, rows, n, DSR1_ACT_INT8_FAST);
                CHECKF(!memcmp(a1, canon, bytes), "%s %lldx%lld n=%d: past the tiles' most, not W8A8's bits",
                       m.what, (long long)rows, (long long)cols, n);
                break;
            }
            CHECKF((dsr1_pool_amx_runs(p1) > runs) == tiles, "%s %lldx%lld n=%d: the tiles %s", m.what,
                   (long long)rows, (long long)cols, n, tiles ? "never ran" : "ran");
            if (n > max_n) break; /* past the tiles */
            dsr1_matmul(p3, &m.w, x, ldx, a3, rows, n, DSR1_ACT_INT8_FAST);
            int bad = dots_within(&m, x, ldx, a1, n, &what);
            CHECKF(!bad, "%s %lldx%lld n=%d: %d outputs %s", m.what, (long long)rows, (long long)cols, n, bad, what);
            CHECKF(!memcmp(a1, a3, bytes), "%s %lldx%lld n=%d: 1 and 3 threads differ", m.what, (long long)rows,
                   (long long)cols, n);
            CHECKF((!tiles && wide) || !memcmp(a1, full, bytes), /* under the fewest: canonical */
                   "%s %lldx%lld n=%d: differs from the same tokens of n=%d", m.what, (long long)rows,
                   (long long)cols, n, max_n);
            if (!tiles) {
                dsr1_matmul(p1, &m.w, x, ldx, canon, rows, n, DSR1_ACT_INT8);
                CHECKF(!memcmp(a1, canon, bytes), "%s %lldx%lld n=%d: off the tiles, not the canonical bits",
                       m.what, (long long)rows, (long long)cols, n);
            }
        }
        free(a1);
        free(a3);
        free(full);
        free(canon);
        free(x);
        dsr1_test_mat_free(&m);
    }
    dsr1_pool_free(p1);
    dsr1_pool_free(p3);
}

/* FP8 shapes: one 16-row group; a partial 64-column scale block (192
 * columns); two row blocks, the second of one group (144 rows); a last
 * group of 8 rows (200); R1's expert width; 96 columns (off the tiles). A
 * mutation that dropped the x' of the second row block, or stored B's
 * pairs in column order, fails it. */
DSR1_TEST(amx_fp8_gemv_fast_within_rounding)
{
    const char *why = no_amx();
    if (why) DSR1_SKIP("%s: no AMX kernels to compare", why);
    static const int64_t shapes[][2] = {{16, 64}, {48, 192}, {144, 1024}, {200, 2048}, {256, 7168}, {32, 96}};
    gemv_on_tiles(t, DSR1_T_FP8_E4M3, shapes, 6, DSR1_MM_FP8_AMX_MAX_N, 1700);
}

/* BF16 shapes: one group; an odd 32-column step (96 columns); a last
 * group of 13 rows on tiles of 13 (77 rows); R1's expert width; 48
 * columns (off the tiles). */
DSR1_TEST(amx_bf16_gemv_fast_within_rounding)
{
    const char *why = no_amx();
    if (why) DSR1_SKIP("%s: no AMX kernels to compare", why);
    static const int64_t shapes[][2] = {{16, 64}, {32, 96}, {77, 2048}, {256, 7168}, {16, 48}};
    gemv_on_tiles(t, DSR1_T_BF16, shapes, 5, 16, 1900);
}
