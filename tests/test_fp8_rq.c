/*
 * test_fp8_rq.c - the fast mode's FP8 prefill as W8A8 (kernels.h,
 * DSR1_ACT_INT8_FAST): FP8 rows requantised to INT8 with a scale per row
 * and 128-column block, x quantised per token and 128 columns, integer
 * dots per group (matmul_impl.h, "FP8 as W8A8").
 *
 *   - the AVX-512 requantisation (with and without VBMI) gives the scalar
 *     one's bytes and scales, on odd codes (the NaN codes, zero rows, zero,
 *     huge and NaN block scales, a partial last block), on whole blocks 16
 *     at a time with a partial group after them (7168, 1280 columns; 2048
 *     none) and after 16 whole ones a half block (2112: the other VBMI
 *     row), and the scalar one
 *     is what matmul_impl.h says: each code within half a step of
 *     value x block scale / s, each block's largest at +-127;
 *   - dsr1_matmul in the fast INT8 mode equals, bit for bit, this file's
 *     own spelling of that order on the requantised matrix from
 *     dsr1_mm_rq_min_n tokens (portable and AVX-512 kernels, 1 and 2
 *     threads; a partial last group), and the BF16 path below that or
 *     where the shape does not fit (columns not a multiple of 64);
 *   - through the CPU backend's seam: the fast mode takes it by default,
 *     and neither --fp8-prefill bf16 nor --deterministic does (their
 *     result is the plain INT8 mode's).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/kernels.h"
#include "backends/cpu/matmul_impl.h"
#include "be_util.h"
#include "mat_util.h"
#include "test.h"

static float *make_x(int n, int64_t ldx, uint64_t seed)
{
    rng g = {seed};
    float *x = malloc((size_t)n * (size_t)ldx * sizeof *x);
    for (int64_t i = 0; i < n * ldx; i++) x[i] = dsr1_test_frand(&g, -2, 2);
    return x;
}

/* The value of an e4m3 magnitude code as the kernels decode it. */
static float mag_value(uint8_t m)
{
    uint32_t u = (uint32_t)dsr1_mm_fp8_bf16(m & 0x7f) << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* The requantised matrix (the scalar requantisation): codes [rows][cols],
 * scales [rows][ng], ng = ceil(cols / 128). */
typedef struct rqmat {
    int8_t *q;
    float *s;
    int64_t rows, cols, ng;
} rqmat;

static rqmat requant_all(const dsr1_wmat *f)
{
    rqmat r = {.rows = f->rows, .cols = f->cols, .ng = (f->cols + DSR1_MM_XG - 1) / DSR1_MM_XG};
    r.q = malloc((size_t)(f->rows * f->cols));
    r.s = malloc((size_t)(f->rows * r.ng) * 4);
    for (int64_t i = 0; i < f->rows; i++) dsr1_mm_fp8_requant_row(f, i, r.q + i * f->cols, r.s + i * r.ng);
    return r;
}

/* matmul_impl.h's "FP8 as W8A8" order, spelled out: x per token and 128
 * columns to int8 (amax / 127, rint(x * (127 / amax)) clamped), the exact
 * dot per group, acc = fma(dot, s_w * s_x, acc) in group order. */
static void w8a8_ref(const rqmat *r, const float *x, int64_t ldx, int n, float *y)
{
    int8_t *xq = malloc((size_t)r->cols);
    float *xs = malloc((size_t)r->ng * 4);
    for (int t = 0; t < n; t++) {
        for (int64_t g = 0; g < r->ng; g++) {
            int64_t c0 = g * DSR1_MM_XG, c1 = c0 + DSR1_MM_XG < r->cols ? c0 + DSR1_MM_XG : r->cols;
            float amax = 0.0f;
            for (int64_t c = c0; c < c1; c++) amax = fmaxf(amax, fabsf(x[t * ldx + c]));
            float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
            for (int64_t c = c0; c < c1; c++) {
                float q = nearbyintf(x[t * ldx + c] * inv);
                xq[c] = (int8_t)(q > 127.0f ? 127.0f : q < -127.0f ? -127.0f : q);
            }
            xs[g] = amax / 127.0f;
        }
        for (int64_t i = 0; i < r->rows; i++) {
            float acc = 0.0f;
            for (int64_t g = 0; g < r->ng; g++) {
                int64_t c0 = g * DSR1_MM_XG, c1 = c0 + DSR1_MM_XG < r->cols ? c0 + DSR1_MM_XG : r->cols;
                int32_t dot = 0;
                for (int64_t c = c0; c < c1; c++) dot += r->q[i * r->cols + c] * xq[c];
                acc = fmaf((float)dot, r->s[i * r->ng + g] * xs[g], acc);
            }
            y[t * r->rows + i] = acc;
        }
    }
    free(xq);
    free(xs);
}

DSR1_TEST(fp8_rq_avx512_matches_scalar)
{
    if (!dsr1_mm_avx512_usable())
        DSR1_SKIP("no AVX-512 BF16/VNNI kernels on this CPU: %s", "only the scalar requantisation runs");
    /* the tables: the AVX-512 fill makes the scalar one's bytes */
    dsr1_mm_rq_tab *ts = aligned_alloc(64, sizeof *ts), *ta = aligned_alloc(64, sizeof *ta);
    memset(ta, 0x55, sizeof *ta);
    dsr1_mm_fp8_rq_tab_fill(ts);
    dsr1_mm_fp8_rq_tab_fill_avx512(ta);
    CHECKF(!memcmp(ts, ta, sizeof *ts), "requantisation tables: AVX-512 fill differs from scalar");
    for (int top = 1; top < 128; top++)
        CHECKF(ts->code[top][top] == 127, "table %d: its own code gives %d, want 127", top, ts->code[top][top]);
    static const int64_t shapes[][2] = {{140, 192}, {9, 7168}, {130, 320}, {130, 1280}, {9, 2048}, {9, 2112}};
    for (int si = 0; si < (int)(sizeof shapes / sizeof *shapes); si++) {
        int64_t rows = shapes[si][0], cols = shapes[si][1], ncb = (cols + 127) / 128;
        tmat m = dsr1_test_mat(DSR1_T_FP8_E4M3, rows, cols, 0, 500 + (uint64_t)si);
        uint8_t *d = m.data;
        float *sc = m.scale;
        for (int64_t c = 0; c < cols; c += 7) d[3 * cols + c] = (uint8_t)(c & 1 ? 0xff : 0x7f);
        memset(d + 4 * cols, 0, (size_t)cols);            /* a zero row */
        memset(d + 5 * cols, 0x80, (size_t)cols);         /* all -0 */
        sc[1] = 0.0f;                                     /* block (0, 1): zero scale */
        if (ncb > 2) sc[2] = 3e38f;                       /* huge: products overflow */
        if (rows > 128) sc[ncb] = NAN;                    /* block (1, 0) */
        if (ncb > 1) sc[ncb - 1] = -sc[ncb - 1];          /* a negative scale */
        if (ncb > 20) {                                   /* the same inside the AVX-512 */
            sc[17] = NAN;                                 /* one's 16-block groups */
            sc[20] = -sc[20];
        }
        int8_t *qs = malloc((size_t)cols), *qa = malloc((size_t)cols);
        float *ss = malloc((size_t)ncb * 4), *sa = malloc((size_t)ncb * 4);
        int32_t *sums = malloc((size_t)ncb * 4);
        int bad = 0, far = 0, noedge = 0, badsum = 0;
        for (int64_t r = 0; r < rows; r++) {
            dsr1_mm_fp8_requant_row(&m.w, r, qs, ss);
            for (int vbmi = 0; vbmi <= dsr1_mm_vbmi_usable(); vbmi++) {
                memset(qa, 0x55, (size_t)cols);
                memset(sa, 0x55, (size_t)ncb * 4);
                memset(sums, 0x55, (size_t)ncb * 4);
                dsr1_mm_fp8_requant_row_avx512(&m.w, r, qa, sa, sums, ta, vbmi);
                bad += memcmp(qs, qa, (size_t)cols) != 0 || memcmp(ss, sa, (size_t)ncb * 4) != 0;
                for (int64_t k = 0; k < ncb; k++) { /* the blocks' code sums (the W8A8 kernel's corrections) */
                    int32_t want = 0;
                    for (int64_t c = k * 128; c < cols && c < (k + 1) * 128; c++) want += qs[c];
                    badsum += sums[k] != want;
                }
            }
            /* what matmul_impl.h promises, for finite products */
            for (int64_t k = 0; k < ncb; k++) {
                int top = 0;
                for (int64_t c = k * 128; c < cols && c < (k + 1) * 128; c++) {
                    float bs = sc[(r / 128) * ncb + k];
                    double v = (double)mag_value(d[r * cols + c]) * bs * (d[r * cols + c] & 0x80 ? -1 : 1);
                    if (!isfinite(v) || !isfinite(ss[k]) || !(ss[k] > 0)) continue;
                    far += fabs((double)qs[c] - v / ss[k]) > 0.5 + 1e-3 && abs(qs[c]) < 127;
                    top = abs(qs[c]) > top ? abs(qs[c]) : top;
                }
                noedge += ss[k] > 0 && isfinite(ss[k]) && top != 127;
            }
        }
        CHECKF(!bad, "%lldx%lld: %d rows differ between AVX-512 and scalar", (long long)rows,
               (long long)cols, bad);
        CHECKF(!badsum, "%lldx%lld: %d block code sums wrong", (long long)rows, (long long)cols, badsum);
        CHECKF(!far, "%lldx%lld: %d codes more than half a step off", (long long)rows, (long long)cols, far);
        CHECKF(!noedge, "%lldx%lld: %d blocks whose largest code is not 127", (long long)rows,
               (long long)cols, noedge);
        free(qs);
        free(qa);
        free(ss);
        free(sa);
        free(sums);
        dsr1_test_mat_free(&m);
    }
    free(ts);
    free(ta);
}

/* y of the fast INT8 mode on FP8 against what it must equal: W8A8 on the
 * requantised matrix (rq) or the BF16 path (the plain INT8 mode) - except
 * the calls of DSR1_MM_FP8_AMX_MIN_N to _MAX_N tokens (1 to 32) a pool
 * with AMX runs on its tiles
 * (dsr1_mm_rows_fp8_amx, not the canonical order), which
 * amx_fp8_gemv_fast_within_rounding (test_amx.c) holds to a rounding
 * bound instead. */
static void fast_matches(dsr1_test_ctx *t, dsr1_pool *pool, const tmat *m, const float *x,
                         int64_t ldx, int n, int rq)
{
    int64_t rows = m->w.rows;
    size_t bytes = (size_t)n * (size_t)rows * 4;
    float *want = malloc(bytes), *y = malloc(bytes);
    rqmat r = requant_all(&m->w);
    if (rq) w8a8_ref(&r, x, ldx, n, want);
    else dsr1_matmul(NULL, &m->w, x, ldx, want, rows, n, DSR1_ACT_INT8);
    static const dsr1_mm_kernel ks[] = {DSR1_MM_PORTABLE, DSR1_MM_AUTO, DSR1_MM_AVX512_NOVBMI};
    for (int ki = 0; ki < 3; ki++)
        for (int th = 0; th < 2; th++) {
            dsr1_matmul_with(th ? pool : NULL, &m->w, x, ldx, y, rows, n, DSR1_ACT_INT8_FAST, ks[ki]);
            const int tiles = th && ks[ki] == DSR1_MM_AUTO && dsr1_pool_amx(pool) && dsr1_mm_vbmi_usable() &&
                              n >= DSR1_MM_FP8_AMX_MIN_N && n <= DSR1_MM_FP8_AMX_MAX_N && m->w.cols % 64 == 0;
            CHECKF(tiles || !memcmp(y, want, bytes), "%lldx%lld n=%d kernel %d, %d threads: not the %s result",
                   (long long)rows, (long long)m->w.cols, n, (int)ks[ki], th + 1,
                   rq ? "requantised W8A8" : "BF16");
        }
    free(want);
    free(y);
    free(r.q);
    free(r.s);
}

DSR1_TEST(fp8_rq_matmul_is_w8a8_on_requantised)
{
    const int mn = dsr1_mm_rq_min_n(NULL); /* this machine's start of W8A8 */
    /* 17, 24, 33, 40: a last token vector of 1-8 tokens (the 256-bit
     * tiles) after one or two full ones */
    const int ns[] = {1, 5, mn - 1, mn, 17, 24, 33, 40, 64, 600};
    static const int64_t shapes[][2] = {{37, 192}, {70, 4160}, {130, 320}, {33, 301}};
    dsr1_pool *pool = NULL;
    dsr1_error err = {0};
    CHECK_OK(dsr1_pool_create(&pool, 2, &err), &err);
    for (int si = 0; si < 4; si++) {
        int64_t rows = shapes[si][0], cols = shapes[si][1], ldx = cols + 5;
        tmat m = dsr1_test_mat(DSR1_T_FP8_E4M3, rows, cols, 0, 600 + (uint64_t)si);
        float *x = make_x(600, ldx, 610 + (uint64_t)si);
        for (int ni = 0; ni < 10; ni++)
            fast_matches(t, pool, &m, x, ldx, ns[ni], ns[ni] >= mn && cols % 64 == 0);
        free(x);
        dsr1_test_mat_free(&m);
    }
    dsr1_pool_free(pool);
}

/* Through the seam: the fast mode's matmul of 64 FP8 tokens (under the
 * oneDNN threshold, so no AMX machine sends it there) is the requantised
 * W8A8; with fp8_bf16 (--fp8-prefill bf16), or with --deterministic, it
 * is the plain INT8 mode's BF16 path. */
DSR1_TEST(fp8_rq_cpu_fast_only)
{
    enum { N = 64, ROWS = 96, COLS = 256 };
    tmat m = dsr1_test_mat(DSR1_T_FP8_E4M3, ROWS, COLS, 0, 700);
    float *x = make_x(N, COLS, 701), *want = malloc(N * ROWS * 4), *got = malloc(N * ROWS * 4);
    for (int mode = 0; mode < 3; mode++) {
        int det = mode == 2, rq = mode == 0;
        tbe b;
        dsr1_error err = {0};
        dsr1_ws_sizes s = {.max_tokens = N, .hidden = COLS, .inter = ROWS, .moe_inter = 64,
                           .n_experts = 4, .topk = 2, .shared_inter = 64, .max_in = COLS,
                           .n_heads = 2, .kv_lora_rank = 64, .rope_dim = 16, .max_ctx = 64,
                           .kv_type = DSR1_KV_F32};
        dsr1_backend_options o = {.threads = 2, .deterministic = det, .fp8_bf16 = mode == 1};
        CHECK_OK(tbe_open_opts(&b, "cpu", &o, &s, &err), &err);
        dsr1_bweight *h = tbe_load(&b, &m.w, 1, 0, 0, DSR1_W_MATRIX);
        CHECK(h != NULL);
        dsr1_view xv = tbe_buf(&b, N * COLS, COLS), yv = tbe_buf(&b, N * ROWS, ROWS);
        CHECK_EQ_INT(tbe_begin(&b, N, NULL, NULL), 0);
        b.be->write(b.ws, x, COLS, N, COLS, xv);
        b.be->matmul(b.ws, h, xv, yv, N, DSR1_ACT_INT8);
        b.be->read(b.ws, yv, N, ROWS, got, ROWS);
        CHECK_EQ_INT(tbe_end(&b), 0);
        dsr1_matmul(NULL, &m.w, x, COLS, want, ROWS, N, rq ? DSR1_ACT_INT8_FAST : DSR1_ACT_INT8);
        CHECKF(!memcmp(got, want, N * ROWS * 4), "%s mode%s: the backend's FP8 matmul is not the %s result",
               det ? "deterministic" : "fast", mode == 1 ? " with fp8_bf16" : "",
               rq ? "requantised W8A8" : "BF16");
        tbe_close(&b);
    }
    /* and the two differ, so the check above tells them apart */
    dsr1_matmul(NULL, &m.w, x, COLS, want, ROWS, N, DSR1_ACT_INT8);
    dsr1_matmul(NULL, &m.w, x, COLS, got, ROWS, N, DSR1_ACT_INT8_FAST);
    CHECK(memcmp(got, want, N * ROWS * 4) != 0);
    free(x);
    free(want);
    free(got);
    dsr1_test_mat_free(&m);
}
