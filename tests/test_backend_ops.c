/*
 * test_backend_ops.c - the conformance test every backend must pass (the
 * pattern of ggml's test-backend-ops): each op of backends/backend.h, on
 * every weight type, in both compute modes (F32 exact; the fast mode, BF16,
 * W8A8 on INT8 weights and W4A8 on INT4 on the CPU), on odd shapes (n = 1, 2, 7, 64, 300; rows and
 * columns that are not multiples of 64 or 128), against one scalar
 * reference per op, with the tolerance stated per op below. Then batch
 * invariance: a row alone and inside batches of several sizes and orders
 * gives identical bits.
 *
 * Each (op group, backend) pair is its own test, so an absent backend
 * (cuda, hip without their libraries or devices) is a skip with the
 * registry's reason, never a pass.
 *
 * Tolerances (S = sum over the dot product of |w x|, the scale of the
 * rounding errors; values below are per output element):
 *   write, read, gather, scatter, add, embed, kv_store, kv read/write/copy:
 *                    exact (bits)
 *   rmsnorm          2e-6 |ref| + 1e-7
 *   rope             2e-6 (|x0| + |x1|)
 *   matmul  F32      1e-5 S + 1e-6
 *           BF16     2^-7 S + 1e-6      (x and w each rounded to bf16: 2^-9)
 *           W8A8     2^-7 S + sum|w| amax(x) / 127 (x quantised per token;
 *                    also INT4 weights in the fast mode: W4A8 on the CPU)
 *   ffn     F32      1e-4 (S_down + 1);  fast: 3e-2 (S_down + 1)
 *   mla     F32      2e-5;               fast: 2e-2 (values of order 1)
 *   moe     F32      1e-4 (S + 1);       fast: 3e-2 (S + 1); same experts
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/kernels.h" /* dsr1_matmul_ref: the scalar reference */
#include "be_util.h"
#include "core/forward.h"
#include "core/kvcache.h"
#include "core/moe.h"
#include "core/numeric.h"
#include "test.h"

static const int ns[] = {1, 2, 7, 64, 300};
#define N_NS ((int)(sizeof ns / sizeof *ns))
#define MAXN 300

static float frand(unsigned *s)
{
    *s = *s * 1664525u + 1013904223u;
    return (float)((*s >> 8) & 0xffff) / 32768.0f - 1.0f;
}

/* ---- packed weights of every type ---------------------------------------------- */

typedef struct tw {
    dsr1_wmat m;
    void *data, *scale;
    const char *what;
} tw;

static const dsr1_type wtypes[] = {DSR1_T_F32, DSR1_T_F16, DSR1_T_BF16,
                                   DSR1_T_FP8_E4M3, DSR1_T_INT8, DSR1_T_INT4};
#define N_TYPES ((int)(sizeof wtypes / sizeof *wtypes))

/* A random [rows, cols] matrix of type ty (values of order 0.1); INT4 in
 * groups of 128 where cols allows, as dsr1 convert makes them, else 32. */
static tw make_w(dsr1_type ty, int64_t rows, int64_t cols, unsigned seed)
{
    tw w = {.m = {.type = ty, .rows = rows, .cols = cols}, .what = dsr1_type_name(ty)};
    size_t n = (size_t)(rows * cols);
    unsigned s = seed;
    if (ty == DSR1_T_F32) {
        float *d = malloc(n * 4);
        for (size_t i = 0; i < n; i++) d[i] = frand(&s) * 0.2f;
        w.data = d;
    } else if (ty == DSR1_T_F16 || ty == DSR1_T_BF16) {
        uint16_t *d = malloc(n * 2);
        for (size_t i = 0; i < n; i++)
            d[i] = ty == DSR1_T_F16 ? dsr1_f32_to_f16(frand(&s) * 0.2f) : dsr1_f32_to_bf16(frand(&s) * 0.2f);
        w.data = d;
    } else if (ty == DSR1_T_FP8_E4M3) {
        uint8_t *d = malloc(n);
        for (size_t i = 0; i < n; i++) {
            d[i] = (uint8_t)(frand(&s) * 127 + 128);
            if ((d[i] & 0x7f) == 0x7f) d[i] ^= 1; /* no NaN codes */
        }
        int64_t rb = (rows + 127) / 128, cb = (cols + 127) / 128;
        float *sc = malloc((size_t)(rb * cb) * 4);
        for (int64_t i = 0; i < rb * cb; i++) sc[i] = 0.0005f * (float)(i % 7 + 1);
        w.data = d, w.scale = sc, w.m.scale_type = DSR1_T_F32, w.m.group = 128;
    } else if (ty == DSR1_T_INT8) {
        int8_t *d = malloc(n);
        for (size_t i = 0; i < n; i++) d[i] = (int8_t)(frand(&s) * 127);
        float *sc = malloc((size_t)rows * 4);
        for (int64_t r = 0; r < rows; r++) sc[r] = 0.001f * (float)(r % 5 + 1);
        w.data = d, w.scale = sc, w.m.scale_type = DSR1_T_F32, w.m.group = 0;
    } else {
        uint8_t *d = malloc(n / 2);
        for (size_t i = 0; i < n / 2; i++) d[i] = (uint8_t)(s = s * 1664525u + 1013904223u, s >> 24);
        int g = cols % 128 == 0 ? 128 : 32;
        uint16_t *sc = malloc((size_t)(rows * cols / g) * 2);
        for (int64_t i = 0; i < rows * cols / g; i++)
            sc[i] = dsr1_f32_to_bf16(0.01f * (float)(i % 3 + 1));
        w.data = d, w.scale = sc, w.m.scale_type = DSR1_T_BF16, w.m.group = g;
    }
    w.m.data = w.data;
    w.m.scale = w.scale;
    return w;
}

static void free_w(tw *w)
{
    free(w->data);
    free(w->scale);
}

static float *rand_rows(int n, int64_t cols, unsigned seed, float amp)
{
    float *x = malloc((size_t)n * (size_t)cols * 4 + 4);
    unsigned s = seed;
    for (int64_t i = 0; i < n * cols; i++) x[i] = frand(&s) * amp;
    return x;
}

/* ---- opening a backend (skip when absent) ----------------------------------------- */

static int open_be(dsr1_test_ctx *t, tbe *b, const char *name, int threads, int max_tokens)
{
    char why[256];
    if (!dsr1_test_backend_usable(name, why, sizeof why)) {
        dsr1_test_skip(t, "backend %s: %s", name, why);
        return -1;
    }
    dsr1_ws_sizes s = {.max_tokens = max_tokens, .hidden = 96, .inter = 224, .moe_inter = 96,
                       .n_experts = 8, .topk = 3, .shared_inter = 96, .max_in = 400,
                       .n_heads = 4, .kv_lora_rank = 64, .rope_dim = 16, .max_ctx = 64,
                       .kv_type = DSR1_KV_F32};
    dsr1_error err;
    CHECK_OK(tbe_open(b, name, threads, &s, &err), &err);
    return b->ws ? 0 : -1;
}

/* ---- copies: write, read, gather, scatter, add ----------------------------------- */

static void run_copies(dsr1_test_ctx *t, const char *name)
{
    tbe b;
    if (open_be(t, &b, name, 2, MAXN)) return;
    int cols = 77;
    for (int k = 0; k < N_NS; k++) {
        int n = ns[k];
        float *x = rand_rows(n, cols, 11 + (unsigned)n, 3), *y = rand_rows(n, cols, 12, 3);
        float *got = malloc((size_t)n * cols * 4), *want = malloc((size_t)n * cols * 4);
        int32_t *rows = malloc((size_t)n * 4);
        for (int i = 0; i < n; i++) rows[i] = (int32_t)((i * 7 + 3) % n); /* a permutation when n % 7 */
        dsr1_view xv = tbe_buf(&b, (size_t)n * 80, 80), yv = tbe_buf(&b, (size_t)n * 80, 80);
        dsr1_view gv = tbe_buf(&b, (size_t)n * cols, cols);
        REQUIRE(xv.buf && yv.buf && gv.buf);
        CHECK_EQ_INT(tbe_begin(&b, n, NULL, NULL), 0);
        b.be->write(b.ws, x, cols, n, cols, xv);
        b.be->read(b.ws, xv, n, cols, got, cols);
        CHECK_EQ_INT(tbe_end(&b), 0);
        CHECKF(!memcmp(got, x, (size_t)n * cols * 4), "%s n=%d: write/read not exact", name, n);
        CHECK_EQ_INT(tbe_begin(&b, n, NULL, NULL), 0);
        b.be->write(b.ws, y, cols, n, cols, yv);
        b.be->add(b.ws, yv, xv, n, cols);
        b.be->read(b.ws, yv, n, cols, got, cols);
        CHECK_EQ_INT(tbe_end(&b), 0);
        for (int i = 0; i < n * cols; i++) want[i] = y[i] + x[i];
        CHECKF(!memcmp(got, want, (size_t)n * cols * 4), "%s n=%d: add not exact", name, n);
        int m = n > 3 ? n - 3 : n; /* gather a subset, with repeats when n % 7 == 0 */
        CHECK_EQ_INT(tbe_begin(&b, n, NULL, NULL), 0);
        b.be->gather(b.ws, xv, rows, m, cols, gv);
        b.be->read(b.ws, gv, m, cols, got, cols);
        CHECK_EQ_INT(tbe_end(&b), 0);
        int bad = 0;
        for (int i = 0; i < m; i++) bad += memcmp(got + i * cols, x + rows[i] * cols, (size_t)cols * 4) != 0;
        CHECKF(!bad, "%s n=%d: gather wrong in %d rows", name, n, bad);
        if (n % 7) { /* rows is a permutation: scatter inverts gather */
            CHECK_EQ_INT(tbe_begin(&b, n, NULL, NULL), 0);
            b.be->gather(b.ws, xv, rows, n, cols, gv);
            b.be->scatter(b.ws, gv, rows, n, cols, yv);
            b.be->read(b.ws, yv, n, cols, got, cols);
            CHECK_EQ_INT(tbe_end(&b), 0);
            CHECKF(!memcmp(got, x, (size_t)n * cols * 4), "%s n=%d: scatter(gather) != x", name, n);
        }
        tbe_close(&b);
        if (open_be(t, &b, name, 2, MAXN)) break;
        free(x), free(y), free(got), free(want), free(rows);
    }
    tbe_close(&b);
}

/* ---- embed, rmsnorm, rope ----------------------------------------------------------- */

static void run_embed(dsr1_test_ctx *t, const char *name)
{
    tbe b;
    if (open_be(t, &b, name, 2, MAXN)) return;
    int64_t V = 101, D = 224;
    for (int ti = 0; ti < N_TYPES; ti++) {
        tw w = make_w(wtypes[ti], V, D, 20 + (unsigned)ti);
        dsr1_bweight *h = tbe_load(&b, &w.m, 1, 0, 0, DSR1_W_EMBED);
        REQUIRE(h);
        for (int k = 0; k < N_NS; k++) {
            int n = ns[k];
            int32_t *ids = malloc((size_t)n * 4);
            for (int i = 0; i < n; i++) ids[i] = (int32_t)((i * 37 + 5) % V);
            float *got = malloc((size_t)(n * D) * 4), *want = malloc((size_t)(n * D) * 4);
            dsr1_view ov = tbe_buf(&b, (size_t)(n * D), D);
            REQUIRE(ov.buf);
            CHECK_EQ_INT(tbe_begin(&b, n, ids, NULL), 0);
            b.be->embed(b.ws, h, ov);
            b.be->read(b.ws, ov, n, (int)D, got, D);
            CHECK_EQ_INT(tbe_end(&b), 0);
            for (int i = 0; i < n; i++) dsr1_wmat_dequant_row(&w.m, ids[i], want + i * D);
            CHECKF(!memcmp(got, want, (size_t)(n * D) * 4), "%s %s n=%d: embed rows differ", name,
                   w.what, n);
            free(ids), free(got), free(want);
        }
        free_w(&w);
    }
    tbe_close(&b);
}

static void run_rmsnorm(dsr1_test_ctx *t, const char *name)
{
    tbe b;
    if (open_be(t, &b, name, 2, MAXN)) return;
    int dim = 211, ld = 230;
    float *w = rand_rows(1, dim, 31, 1);
    for (int i = 0; i < dim; i++) w[i] += 1.5f;
    dsr1_wmat wm = {.type = DSR1_T_F32, .rows = 1, .cols = dim, .data = w};
    dsr1_bweight *h = tbe_load(&b, &wm, 1, 0, 0, DSR1_W_VECTOR);
    REQUIRE(h);
    for (int k = 0; k < N_NS; k++) {
        int n = ns[k], bad = 0;
        float *x = rand_rows(n, ld, 32 + (unsigned)n, 4), *got = malloc((size_t)(n * ld) * 4);
        dsr1_view xv = tbe_buf(&b, (size_t)(n * ld), ld), yv = tbe_buf(&b, (size_t)(n * ld), ld);
        REQUIRE(xv.buf && yv.buf);
        CHECK_EQ_INT(tbe_begin(&b, n, NULL, NULL), 0);
        b.be->write(b.ws, x, ld, n, ld, xv);
        b.be->rmsnorm(b.ws, xv, h, dim, 1e-6f, n, yv);
        b.be->rmsnorm(b.ws, xv, h, dim, 1e-6f, n, xv); /* in place */
        b.be->read(b.ws, yv, n, dim, got, ld);
        CHECK_EQ_INT(tbe_end(&b), 0);
        float *inplace = malloc((size_t)(n * ld) * 4);
        CHECK_EQ_INT(tbe_begin(&b, n, NULL, NULL), 0);
        b.be->read(b.ws, xv, n, dim, inplace, ld);
        CHECK_EQ_INT(tbe_end(&b), 0);
        for (int r = 0; r < n; r++) {
            double ss = 0;
            for (int i = 0; i < dim; i++) ss += (double)x[r * ld + i] * x[r * ld + i];
            double kk = 1 / sqrt(ss / dim + 1e-6);
            for (int i = 0; i < dim; i++) {
                double ref = x[r * ld + i] * kk * w[i];
                bad += !(fabs(got[r * ld + i] - ref) <= 2e-6 * fabs(ref) + 1e-7);
                bad += memcmp(&got[r * ld + i], &inplace[r * ld + i], 4) != 0;
            }
        }
        CHECKF(!bad, "%s n=%d: %d rmsnorm values off the reference", name, n, bad);
        free(x), free(got), free(inplace);
        tbe_close(&b);
        if (open_be(t, &b, name, 2, MAXN)) break;
        h = tbe_load(&b, &wm, 1, 0, 0, DSR1_W_VECTOR);
    }
    tbe_close(&b);
    free(w);
}

/* RoPE (the op that runs: interleaved pairs, angle pos * freq as a float32
 * product) on q-like rows (several heads with a stride) and on a k-like
 * single head inside a wider row. */
static void run_rope(dsr1_test_ctx *t, const char *name)
{
    tbe b;
    if (open_be(t, &b, name, 2, MAXN)) return;
    enum { ROPE = 16, HEADS = 3, HS = 40, LD = HEADS * HS + 5 };
    float freqs[ROPE / 2];
    for (int i = 0; i < ROPE / 2; i++) freqs[i] = powf(10000.0f, -2.0f * (float)i / ROPE);
    dsr1_wmat fm = {.type = DSR1_T_F32, .rows = 1, .cols = ROPE / 2, .data = freqs};
    dsr1_bweight *fh = tbe_load(&b, &fm, 1, 0, 0, DSR1_W_VECTOR);
    REQUIRE(fh);
    for (int k = 0; k < N_NS; k++) {
        int n = ns[k], bad = 0, off = 7;
        int32_t *pos = malloc((size_t)n * 4);
        for (int i = 0; i < n; i++) pos[i] = (i * 131 + 9) % 5000;
        float *x = rand_rows(n, LD, 41 + (unsigned)n, 2), *got = malloc((size_t)(n * LD) * 4);
        dsr1_view xv = tbe_buf(&b, (size_t)(n * LD), LD);
        REQUIRE(xv.buf);
        CHECK_EQ_INT(tbe_begin(&b, n, NULL, pos), 0);
        b.be->write(b.ws, x, LD, n, LD, xv);
        b.be->rope(b.ws, dsr1_view_at(xv, off), HEADS, HS, ROPE, fh);
        b.be->read(b.ws, xv, n, LD, got, LD);
        CHECK_EQ_INT(tbe_end(&b), 0);
        for (int r = 0; r < n; r++)
            for (int c = 0; c < LD; c++) {
                int h = (c - off) / HS, j = (c - off) % HS;
                int in = c >= off && h < HEADS && j < ROPE;
                if (!in) {
                    bad += memcmp(&got[r * LD + c], &x[r * LD + c], 4) != 0; /* untouched */
                    continue;
                }
                int i = j / 2, base = r * LD + off + h * HS + 2 * i;
                double a = (double)((float)pos[r] * freqs[i]), x0 = x[base], x1 = x[base + 1];
                double ref = j % 2 ? x0 * sin(a) + x1 * cos(a) : x0 * cos(a) - x1 * sin(a);
                bad += !(fabs(got[r * LD + c] - ref) <= 2e-6 * (fabs(x0) + fabs(x1)));
            }
        CHECKF(!bad, "%s n=%d: %d rope values off the reference", name, n, bad);
        free(pos), free(x), free(got);
    }
    tbe_close(&b);
}

/* ---- matmul -------------------------------------------------------------------------- */

static const char *const act_name[] = {"f32", "bf16", "int8"};

/* Tolerance of output (t, r) in mode act (file comment). */
static double mm_tol(const dsr1_wmat *w, const float *wrow, const float *x, dsr1_act act)
{
    double S = 0, sw = 0, amax = 0;
    for (int64_t c = 0; c < w->cols; c++) {
        S += fabs((double)wrow[c] * x[c]);
        sw += fabs(wrow[c]);
        amax = fmax(amax, fabs(x[c]));
    }
    if (act == DSR1_ACT_F32) return 1e-5 * S + 1e-6;
    double tol = S / 128 + 1e-6;
    if (act == DSR1_ACT_INT8 && (w->type == DSR1_T_INT8 || w->type == DSR1_T_INT4))
        tol += sw * amax / 127;
    return tol;
}

static void matmul_case(dsr1_test_ctx *t, tbe *b, const char *name, dsr1_type ty, int64_t rows,
                        int64_t cols)
{
    tw w = make_w(ty, rows, cols, 50 + (unsigned)ty + (unsigned)rows);
    dsr1_bweight *h = tbe_load(b, &w.m, 1, 0, 0, DSR1_W_MATRIX);
    REQUIRE(h);
    int64_t ldx = cols + 3, ldy = rows + 1;
    float *x = rand_rows(MAXN, ldx, 60 + (unsigned)cols, 1.5f);
    float *ref = malloc((size_t)(MAXN * rows) * 4), *got = malloc((size_t)(MAXN * ldy) * 4);
    float *wrows = malloc((size_t)(rows * cols) * 4);
    for (int64_t r = 0; r < rows; r++) dsr1_wmat_dequant_row(&w.m, r, wrows + r * cols);
    dsr1_matmul_ref(&w.m, x, ldx, ref, rows, MAXN);
    dsr1_view xv = tbe_buf(b, (size_t)(MAXN * ldx), ldx), yv = tbe_buf(b, (size_t)(MAXN * ldy), ldy);
    REQUIRE(xv.buf && yv.buf);
    for (int a = 0; a < 3; a++)
        for (int k = 0; k < N_NS; k++) {
            int n = ns[k], bad = 0;
            double worst = 0;
            CHECK_EQ_INT(tbe_begin(b, n, NULL, NULL), 0);
            b->be->write(b->ws, x, ldx, n, (int)ldx, xv);
            b->be->matmul(b->ws, h, xv, yv, n, (dsr1_act)a);
            b->be->read(b->ws, yv, n, (int)rows, got, ldy);
            CHECK_EQ_INT(tbe_end(b), 0);
            for (int tt = 0; tt < n; tt++)
                for (int64_t r = 0; r < rows; r++) {
                    double d = fabs(got[tt * ldy + r] - ref[tt * rows + r]);
                    double tol = mm_tol(&w.m, wrows + r * cols, x + tt * ldx, (dsr1_act)a);
                    bad += !(d <= tol);
                    worst = fmax(worst, d / tol);
                }
            CHECKF(!bad, "%s matmul %s [%lld x %lld] act=%s n=%d: %d outputs off (worst %.2f x tol)",
                   name, w.what, (long long)rows, (long long)cols, act_name[a], n, bad, worst);
        }
    free(x), free(ref), free(got), free(wrows);
    free_w(&w);
}

static void run_matmul(dsr1_test_ctx *t, const char *name)
{
    tbe b;
    if (open_be(t, &b, name, 2, MAXN)) return;
    /* rows and cols off 64/128 multiples (INT4 needs cols % 32 == 0; the
     * last shape gives it groups of 128) */
    static const int64_t shapes[][2] = {{37, 224}, {130, 96}, {67, 352}, {45, 640}};
    for (int ti = 0; ti < N_TYPES; ti++)
        for (int si = 0; si < 4; si++) {
            matmul_case(t, &b, name, wtypes[ti], shapes[si][0], shapes[si][1]);
            tbe_close(&b); /* buffers of each case released */
            if (open_be(t, &b, name, 2, MAXN)) return;
        }
    tbe_close(&b);
}

/* ---- KV pages: kv_store and the read/write/copy hooks ---------------------------------- */

static void run_kv(dsr1_test_ctx *t, const char *name)
{
    static const dsr1_kv_type kts[] = {DSR1_KV_F32, DSR1_KV_BF16, DSR1_KV_FP8};
    enum { R = 64, ROPE = 16, ROW = R + ROPE, LAYERS = 2 };
    for (int ki = 0; ki < 3; ki++) {
        tbe b;
        if (open_be(t, &b, name, 2, MAXN)) return;
        dsr1_kvcache_options ko = {.type = kts[ki], .n_layers = LAYERS, .kv_lora_rank = R,
                                   .rope_dim = ROPE, .block = 16, .max_seqs = 3, .ctx = 320,
                                   .be = b.be, .dev = b.dev};
        dsr1_kvcache *kv = NULL;
        dsr1_error err;
        CHECK_OK(dsr1_kvcache_create(&kv, &ko, &err), &err);
        REQUIRE(kv);
        int s0, s1, s2;
        dsr1_kvcache_seq_alloc(kv, &s0, &err);
        dsr1_kvcache_seq_alloc(kv, &s1, &err);
        dsr1_kvcache_seq_alloc(kv, &s2, &err);
        CHECK_OK(dsr1_kvcache_reserve(kv, s0, 300, &err), &err);
        CHECK_OK(dsr1_kvcache_reserve(kv, s1, 7, &err), &err);
        CHECK_OK(dsr1_kvcache_reserve(kv, s2, 300, &err), &err);
        size_t eb = dsr1_kv_elem_size(kts[ki]);
        for (int k = 0; k < N_NS; k++) {
            int n = ns[k], bad = 0;
            int32_t *pos = malloc((size_t)n * 4), *seq = malloc((size_t)n * 4);
            for (int i = 0; i < n; i++) {
                seq[i] = n > 7 ? s0 : s1;
                pos[i] = n > 7 ? (i * 17) % 300 : i; /* any order */
            }
            /* distinct positions in any order: 17 is coprime to 300 */
            float *lat = rand_rows(n, ROW + 2, 70 + (unsigned)n, 3);
            dsr1_view lv = tbe_buf(&b, (size_t)(n * (ROW + 2)), ROW + 2);
            REQUIRE(lv.buf);
            dsr1_step st = {.n = n, .pos = pos, .seq = seq};
            dsr1_kvcache_step(kv, &st);
            CHECK_OK(b.be->step_begin(b.ws, &st, &err), &err);
            /* the struct is the caller's again once step_begin returns (a
             * stack one in core/forward.c); only the arrays stay put */
            memset(&st, 0, sizeof st);
            b.be->write(b.ws, lat, ROW + 2, n, ROW + 2, lv);
            b.be->kv_store(b.ws, 1, lv, dsr1_view_at(lv, R));
            CHECK_OK(b.be->step_end(b.ws, &err), &err);
            for (int i = 0; i < n; i++) {
                unsigned char want[ROW * 4], got[ROW * 4];
                float ws = 0, gs = 0;
                dsr1_kv_encode_row(kts[ki], lat + i * (ROW + 2), R, lat + i * (ROW + 2) + R, ROPE,
                                   want, &ws);
                CHECK_OK(dsr1_kvcache_get_rows(kv, seq[i], 1, pos[i], 1, got, &gs, &err), &err);
                bad += memcmp(want, got, ROW * eb) != 0 || (kts[ki] == DSR1_KV_FP8 && ws != gs);
            }
            CHECKF(!bad, "%s kv type %d n=%d: %d stored rows differ from the row codec", name,
                   (int)kts[ki], n, bad);
            free(pos), free(seq), free(lat);
        }
        /* raw round trip across a page boundary, then copy a page */
        unsigned char *raw = malloc(40 * ROW * 4), *back = malloc(40 * ROW * 4);
        float sc[40], sb[40];
        for (int i = 0; i < 40 * ROW * 4; i++) raw[i] = (unsigned char)(i * 29 + 7);
        for (int i = 0; i < 40; i++) sc[i] = 0.5f + (float)i;
        if (kts[ki] == DSR1_KV_FP8)
            for (int i = 0; i < 40 * ROW; i++)
                if ((raw[i] & 0x7f) == 0x7f) raw[i] ^= 1;
        CHECK_OK(dsr1_kvcache_put_rows(kv, s2, 0, 10, 40, raw, sc, &err), &err);
        CHECK_OK(dsr1_kvcache_get_rows(kv, s2, 0, 10, 40, back, sb, &err), &err);
        CHECK(!memcmp(raw, back, 40 * ROW * eb));
        if (kts[ki] == DSR1_KV_FP8) CHECK(!memcmp(sc, sb, sizeof sc));
        int p_src = kv->table[(size_t)s2 * (size_t)kv->max_pages + 1];
        int p_dst = kv->table[(size_t)s0 * (size_t)kv->max_pages + 1];
        CHECK_OK(b.be->kv_copy(b.dev, kv->store, p_dst, p_src, &err), &err);
        CHECK_OK(dsr1_kvcache_get_rows(kv, s0, 0, 16, 16, back, sb, &err), &err);
        CHECK(!memcmp(raw + 6 * ROW * eb, back, 16 * ROW * eb));
        CHECK(dsr1_kvcache_get_rows(kv, s1, 0, 5, 3, back, sb, &err) == DSR1_EINVAL); /* past len */
        free(raw), free(back);
        dsr1_kvcache_free(kv);
        tbe_close(&b);
    }
}

/* ---- fused stages: ffn, mla, moe ------------------------------------------------------- */

static double silu_d(double g) { return g / (1 + exp(-g)); }

/* Reference gated MLP of one row in double over dequantised weights. */
static void mlp_ref(const dsr1_wmat *g, const dsr1_wmat *u, const dsr1_wmat *d, const float *x,
                    double *y, double *S)
{
    int64_t I = g->rows, D = g->cols;
    float *row = malloc((size_t)(I > D ? I : D) * 4);
    double *h = malloc((size_t)I * 8);
    for (int64_t r = 0; r < I; r++) {
        double a = 0, c = 0;
        dsr1_wmat_dequant_row(g, r, row);
        for (int64_t k = 0; k < D; k++) a += (double)row[k] * x[k];
        dsr1_wmat_dequant_row(u, r, row);
        for (int64_t k = 0; k < D; k++) c += (double)row[k] * x[k];
        h[r] = silu_d(a) * c;
    }
    for (int64_t r = 0; r < d->rows; r++) {
        double s = 0, sa = 0;
        dsr1_wmat_dequant_row(d, r, row);
        for (int64_t k = 0; k < I; k++) s += row[k] * h[k], sa += fabs(row[k] * h[k]);
        y[r] = s;
        S[r] = sa;
    }
    free(row);
    free(h);
}

static void run_ffn(dsr1_test_ctx *t, const char *name)
{
    tbe b;
    enum { D = 96, I = 224 };
    for (int ti = 0; ti < N_TYPES; ti++) {
        if (open_be(t, &b, name, 2, MAXN)) return;
        tw g = make_w(wtypes[ti], I, D, 80), u = make_w(wtypes[ti], I, D, 81);
        tw d = make_w(wtypes[ti], D, I, 82);
        dsr1_bweight *gh = tbe_load(&b, &g.m, 1, 0, 0, DSR1_W_MATRIX);
        dsr1_bweight *uh = tbe_load(&b, &u.m, 1, 0, 0, DSR1_W_MATRIX);
        dsr1_bweight *dh = tbe_load(&b, &d.m, 1, 0, 0, DSR1_W_MATRIX);
        REQUIRE(gh && uh && dh);
        float *x = rand_rows(MAXN, D, 83, 2), *got = malloc((size_t)MAXN * D * 4);
        double *ref = malloc((size_t)MAXN * D * 8), *S = malloc((size_t)MAXN * D * 8);
        for (int i = 0; i < MAXN; i++) mlp_ref(&g.m, &u.m, &d.m, x + i * D, ref + i * D, S + i * D);
        dsr1_view xv = tbe_buf(&b, (size_t)MAXN * D, D), yv = tbe_buf(&b, (size_t)MAXN * D, D);
        for (int a = 0; a < 2; a++)
            for (int k = 0; k < N_NS; k++) {
                int n = ns[k], bad = 0;
                dsr1_act act = a ? DSR1_ACT_INT8 : DSR1_ACT_F32;
                CHECK_EQ_INT(tbe_begin(&b, n, NULL, NULL), 0);
                b.be->write(b.ws, x, D, n, D, xv);
                b.be->ffn(b.ws, gh, uh, dh, xv, n, yv, act);
                b.be->read(b.ws, yv, n, D, got, D);
                CHECK_EQ_INT(tbe_end(&b), 0);
                for (int i = 0; i < n * D; i++)
                    bad += !(fabs(got[i] - ref[i]) <= (a ? 3e-2 : 1e-4) * (S[i] + 1));
                CHECKF(!bad, "%s ffn %s act=%s n=%d: %d outputs off", name, g.what, act_name[act], n, bad);
            }
        free(x), free(got), free(ref), free(S);
        free_w(&g), free_w(&u), free_w(&d);
        tbe_close(&b);
    }
}

static void run_mla(dsr1_test_ctx *t, const char *name)
{
    enum { H = 4, R = 64, NOPE = 16, ROPE = 16, V = 16, QK = NOPE + ROPE, CTX = 64 };
    for (int ti = 0; ti < 3; ti++) {
        /* per-head parts as float32, bf16 and (key part) FP8 stacks */
        dsr1_type ty = ti == 0 ? DSR1_T_F32 : ti == 1 ? DSR1_T_BF16 : DSR1_T_INT8;
        tbe b;
        if (open_be(t, &b, name, 2, MAXN)) return;
        tw wk = make_w(ty, H * R, NOPE, 90), wv = make_w(ty, H * V, R, 91);
        dsr1_wdesc wkd = {.mat = wk.m, .count = H}, wvd = {.mat = wv.m, .count = H};
        wkd.mat.rows = R, wvd.mat.rows = V;
        int64_t kr[2] = {R, NOPE}, vr[2] = {V, R};
        wkd.stride = dsr1_type_payload_size(ty, 2, kr);
        wvd.stride = dsr1_type_payload_size(ty, 2, vr);
        if (ty == DSR1_T_INT8) wkd.scale_stride = R * 4, wvd.scale_stride = V * 4;
        dsr1_bweight *kh = tbe_load(&b, &wkd.mat, H, wkd.stride, wkd.scale_stride, DSR1_W_MATRIX);
        dsr1_bweight *vh = tbe_load(&b, &wvd.mat, H, wvd.stride, wvd.scale_stride, DSR1_W_MATRIX);
        REQUIRE(kh && vh);
        dsr1_kvcache_options ko = {.type = DSR1_KV_F32, .n_layers = 1, .kv_lora_rank = R,
                                   .rope_dim = ROPE, .block = 16, .max_seqs = 2, .ctx = CTX,
                                   .be = b.be, .dev = b.dev};
        dsr1_kvcache *kv = NULL;
        dsr1_error err;
        CHECK_OK(dsr1_kvcache_create(&kv, &ko, &err), &err);
        REQUIRE(kv);
        int sa, sb;
        dsr1_kvcache_seq_alloc(kv, &sa, &err);
        dsr1_kvcache_seq_alloc(kv, &sb, &err);
        dsr1_kvcache_reserve(kv, sa, CTX, &err);
        dsr1_kvcache_reserve(kv, sb, 37, &err);
        unsigned s = 93;
        float lat[R], pe[ROPE];
        for (int p = 0; p < CTX; p++)
            for (int q = 0; q < 2; q++) {
                if (q && p >= 37) continue;
                for (int i = 0; i < R; i++) lat[i] = frand(&s);
                for (int i = 0; i < ROPE; i++) pe[i] = frand(&s);
                dsr1_kvcache_write(kv, q ? sb : sa, 0, p, lat, pe);
            }
        float *q = rand_rows(MAXN, H * QK, 94, 1);
        dsr1_view qv = tbe_buf(&b, (size_t)MAXN * H * QK, H * QK);
        dsr1_view ov = tbe_buf(&b, (size_t)MAXN * H * V, H * V);
        float *got = malloc((size_t)MAXN * H * V * 4), *want = malloc((size_t)MAXN * H * V * 4);
        for (int k = 0; k < N_NS; k++) {
            int n = ns[k] > 64 ? 100 : ns[k], bad = 0; /* 300 queries of 2 slots: 100 keep it quick */
            int32_t seq[100], pos[100];
            for (int i = 0; i < n; i++) { /* runs of one slot, positions in any order */
                seq[i] = i < n / 2 ? sa : sb;
                pos[i] = seq[i] == sa ? (i * 13 + 5) % CTX : (i * 7 + 1) % 37;
            }
            dsr1_mla_args a = {.n = n, .n_heads = H, .qk_nope = NOPE, .rope_dim = ROPE, .v_dim = V,
                               .kv_lora_rank = R, .scale = 0.3f, .q = qv, .layer = 0, .wk_t = kh,
                               .wv = vh, .out = ov};
            dsr1_attention_naive(&a, q, seq, pos, kv, &wkd, &wvd, want);
            for (int mode = 0; mode < 2; mode++) {
                dsr1_act act = mode ? DSR1_ACT_INT8 : DSR1_ACT_F32;
                dsr1_step st = {.n = n, .pos = pos, .seq = seq};
                dsr1_kvcache_step(kv, &st);
                CHECK_OK(b.be->step_begin(b.ws, &st, &err), &err);
                b.be->write(b.ws, q, H * QK, n, H * QK, qv);
                b.be->mla_attention(b.ws, &a, act);
                b.be->read(b.ws, ov, n, H * V, got, H * V);
                CHECK_OK(b.be->step_end(b.ws, &err), &err);
                for (int i = 0; i < n * H * V; i++)
                    bad += !(fabs(got[i] - want[i]) <= (mode ? 2e-2 : 2e-5));
                CHECKF(!bad, "%s mla parts %s act=%s n=%d: %d outputs off", name, dsr1_type_name(ty),
                       act_name[act], n, bad);
            }
        }
        free(q), free(got), free(want);
        free_w(&wk), free_w(&wv);
        dsr1_kvcache_free(kv);
        tbe_close(&b);
    }
}

/* MoE: 8 experts in 2 groups, top-3 (V3 routing with bias), shared experts,
 * every expert type; plus a token with a NaN input is routed nowhere (NaN
 * output, experts -1) and leaves the other tokens' bits unchanged. */
static void run_moe(dsr1_test_ctx *t, const char *name)
{
    enum { D = 96, I = 96, E = 8, K = 3 };
    dsr1_moe_params p = {.n_experts = E, .topk = K, .n_group = 2, .topk_group = 1,
                         .scoring = DSR1_SCORE_SIGMOID, .method = DSR1_TOPK_NOAUX_TC,
                         .family = DSR1_FAMILY_V3, .norm_topk_prob = 1,
                         .routed_scaling_factor = 2.5f};
    for (int ti = 0; ti < N_TYPES; ti++) {
        tbe b;
        if (open_be(t, &b, name, 2, MAXN)) return;
        tw rt = make_w(DSR1_T_F32, E, D, 100);
        tw eg = make_w(wtypes[ti], E * I, D, 101), eu = make_w(wtypes[ti], E * I, D, 102);
        tw ed = make_w(wtypes[ti], E * D, I, 103);
        tw sg = make_w(wtypes[ti], I, D, 104), su = make_w(wtypes[ti], I, D, 105);
        tw sd = make_w(wtypes[ti], D, I, 106);
        float bias[E];
        for (int e = 0; e < E; e++) bias[e] = 0.01f * (float)e;
        int64_t one[2] = {I, D}, oned[2] = {D, I};
        size_t gst = dsr1_type_payload_size(wtypes[ti], 2, one), dst = dsr1_type_payload_size(wtypes[ti], 2, oned);
        size_t gss = dsr1_type_scale_size(wtypes[ti], eg.m.scale_type, eg.m.group, 2, one);
        size_t dss = dsr1_type_scale_size(wtypes[ti], ed.m.scale_type, ed.m.group, 2, oned);
        if (wtypes[ti] == DSR1_T_FP8_E4M3) { /* a stack keeps one block grid per expert */
            tw *st[] = {&eg, &eu, &ed};
            for (int i = 0; i < 3; i++) {
                float *sc = malloc(E * 4);
                for (int e = 0; e < E; e++) sc[e] = 0.0005f * (float)(e % 5 + 1 + i);
                free(st[i]->scale);
                st[i]->scale = sc;
                st[i]->m.scale = sc;
            }
        }
        dsr1_wmat g0 = eg.m, u0 = eu.m, d0 = ed.m;
        g0.rows = u0.rows = I, d0.rows = D;
        dsr1_wmat bm = {.type = DSR1_T_F32, .rows = 1, .cols = E, .data = bias};
        dsr1_moe_weights mw = {.router = tbe_load(&b, &rt.m, 1, 0, 0, DSR1_W_MATRIX),
                               .bias = tbe_load(&b, &bm, 1, 0, 0, DSR1_W_VECTOR),
                               .gate = tbe_load(&b, &g0, E, gst, gss, DSR1_W_EXPERTS),
                               .up = tbe_load(&b, &u0, E, gst, gss, DSR1_W_EXPERTS),
                               .down = tbe_load(&b, &d0, E, dst, dss, DSR1_W_EXPERTS),
                               .has_shared = 1,
                               .sh_gate = tbe_load(&b, &sg.m, 1, 0, 0, DSR1_W_MATRIX),
                               .sh_up = tbe_load(&b, &su.m, 1, 0, 0, DSR1_W_MATRIX),
                               .sh_down = tbe_load(&b, &sd.m, 1, 0, 0, DSR1_W_MATRIX)};
        REQUIRE(mw.router && mw.gate && mw.up && mw.down && mw.sh_down);
        float *x = rand_rows(MAXN, D, 107, 2), *got = malloc((size_t)MAXN * D * 4);
        dsr1_view xv = tbe_buf(&b, (size_t)MAXN * D, D), yv = tbe_buf(&b, (size_t)MAXN * D, D);
        int32_t *choice = malloc((size_t)MAXN * K * 4);
        double yref[D], sref[D], ye[D], se[D];
        float lg[E], scratch[3 * E], wk[K];
        int32_t idx[K];
        for (int a = 0; a < 2; a++)
            for (int k = 0; k < N_NS; k++) {
                int n = ns[k] > 64 ? 100 : ns[k], bad = 0, badc = 0;
                dsr1_act act = a ? DSR1_ACT_INT8 : DSR1_ACT_F32;
                CHECK_EQ_INT(tbe_begin(&b, n, NULL, NULL), 0);
                b.be->write(b.ws, x, D, n, D, xv);
                b.be->moe(b.ws, &mw, &p, xv, n, yv, act);
                b.be->moe_choice(b.ws, choice, n);
                b.be->read(b.ws, yv, n, D, got, D);
                CHECK_EQ_INT(tbe_end(&b), 0);
                for (int tt = 0; tt < n; tt++) {
                    dsr1_matmul_ref(&rt.m, x + tt * D, D, lg, E, 1);
                    dsr1_moe_route(&p, lg, bias, idx, wk, scratch);
                    badc += memcmp(idx, choice + tt * K, sizeof idx) != 0;
                    mlp_ref(&sg.m, &su.m, &sd.m, x + tt * D, yref, sref);
                    for (int j = 0; j < K; j++) {
                        dsr1_wmat ge = g0, ue = u0, de = d0;
                        ge.data = (const uint8_t *)eg.m.data + (size_t)idx[j] * gst;
                        ue.data = (const uint8_t *)eu.m.data + (size_t)idx[j] * gst;
                        de.data = (const uint8_t *)ed.m.data + (size_t)idx[j] * dst;
                        if (ge.scale) {
                            ge.scale = (const uint8_t *)eg.m.scale + (size_t)idx[j] * gss;
                            ue.scale = (const uint8_t *)eu.m.scale + (size_t)idx[j] * gss;
                            de.scale = (const uint8_t *)ed.m.scale + (size_t)idx[j] * dss;
                        }
                        mlp_ref(&ge, &ue, &de, x + tt * D, ye, se);
                        for (int i = 0; i < D; i++) yref[i] += wk[j] * ye[i], sref[i] += fabs(wk[j]) * se[i];
                    }
                    for (int i = 0; i < D; i++)
                        bad += !(fabs(got[tt * D + i] - yref[i]) <= (a ? 3e-2 : 1e-4) * (sref[i] + 1));
                }
                CHECKF(!badc && !bad, "%s moe %s act=%s n=%d: %d choices, %d outputs off", name,
                       eg.what, act_name[act], n, badc, bad);
            }
        /* NaN token 2 of 5: routed nowhere, NaN out; the others' bits as before */
        float *y0 = malloc(5 * D * 4), *y1 = malloc(5 * D * 4), *xn = malloc(5 * D * 4);
        memcpy(xn, x, 5 * D * 4);
        xn[2 * D + 7] = NAN;
        for (int pass = 0; pass < 2; pass++) {
            CHECK_EQ_INT(tbe_begin(&b, 5, NULL, NULL), 0);
            b.be->write(b.ws, pass ? xn : x, D, 5, D, xv);
            b.be->moe(b.ws, &mw, &p, xv, 5, yv, DSR1_ACT_F32);
            b.be->moe_choice(b.ws, choice, 5);
            b.be->read(b.ws, yv, 5, D, pass ? y1 : y0, D);
            CHECK_EQ_INT(tbe_end(&b), 0);
        }
        for (int tt = 0; tt < 5; tt++) {
            if (tt == 2) {
                CHECK(choice[2 * K] == -1 && isnan(y1[2 * D]));
                continue;
            }
            CHECKF(!memcmp(y0 + tt * D, y1 + tt * D, D * 4), "%s: a NaN token changed token %d", name, tt);
        }
        free(y0), free(y1), free(xn);
        free(x), free(got), free(choice);
        tw *all[] = {&rt, &eg, &eu, &ed, &sg, &su, &sd};
        for (int i = 0; i < 7; i++) free_w(all[i]);
        tbe_close(&b);
    }
}

/* ---- batch invariance ---------------------------------------------------------------- */

/* A row alone vs inside batches of 2, 7, 64 and 300 rows at several places
 * and in reversed order: matmul in all three modes on every type, ffn and
 * moe in both modes, with 1 and 2 threads: identical bits. */
static void run_invariance(dsr1_test_ctx *t, const char *name)
{
    enum { D = 96 };
    for (int th = 1; th <= 2; th++)
        for (int ti = 0; ti < N_TYPES; ti++) {
            tbe b;
            if (open_be(t, &b, name, th, MAXN)) return;
            tw w = make_w(wtypes[ti], 130, 224, 120);
            dsr1_bweight *h = tbe_load(&b, &w.m, 1, 0, 0, DSR1_W_MATRIX);
            REQUIRE(h);
            float *x = rand_rows(MAXN, 224, 121, 2), *xr = malloc((size_t)MAXN * 224 * 4);
            float *alone = malloc(130 * 4), *in = malloc((size_t)MAXN * 130 * 4);
            dsr1_view xv = tbe_buf(&b, (size_t)MAXN * 224, 224), yv = tbe_buf(&b, (size_t)MAXN * 130, 130);
            for (int a = 0; a < 3; a++)
                for (int k = 1; k < N_NS; k++) {
                    int n = ns[k], bad = 0;
                    for (int i = 0; i < n; i++) memcpy(xr + i * 224, x + (n - 1 - i) * 224, 224 * 4);
                    for (int order = 0; order < 2; order++) {
                        CHECK_EQ_INT(tbe_begin(&b, n, NULL, NULL), 0);
                        b.be->write(b.ws, order ? xr : x, 224, n, 224, xv);
                        b.be->matmul(b.ws, h, xv, yv, n, (dsr1_act)a);
                        b.be->read(b.ws, yv, n, 130, in, 130);
                        CHECK_EQ_INT(tbe_end(&b), 0);
                        for (int r = 0; r < n; r += (n > 8 ? 13 : 1)) {
                            int src = order ? n - 1 - r : r;
                            CHECK_EQ_INT(tbe_begin(&b, 1, NULL, NULL), 0);
                            b.be->write(b.ws, x + src * 224, 224, 1, 224, xv);
                            b.be->matmul(b.ws, h, xv, yv, 1, (dsr1_act)a);
                            b.be->read(b.ws, yv, 1, 130, alone, 130);
                            CHECK_EQ_INT(tbe_end(&b), 0);
                            bad += memcmp(alone, in + r * 130, 130 * 4) != 0;
                        }
                    }
                    CHECKF(!bad, "%s %d threads matmul %s act=%s n=%d: %d rows differ from alone",
                           name, th, w.what, act_name[a], n, bad);
                }
            free(x), free(xr), free(alone), free(in);
            free_w(&w);
            tbe_close(&b);
        }
}

/* ---- the tests: one per (op group, backend) ------------------------------------------- */

DSR1_TEST(backend_ops_copies_cpu) { run_copies(t, "cpu"); }
DSR1_TEST(backend_ops_copies_cuda) { run_copies(t, "cuda"); }
DSR1_TEST(backend_ops_copies_hip) { run_copies(t, "hip"); }
DSR1_TEST(backend_ops_embed_cpu) { run_embed(t, "cpu"); }
DSR1_TEST(backend_ops_embed_cuda) { run_embed(t, "cuda"); }
DSR1_TEST(backend_ops_embed_hip) { run_embed(t, "hip"); }
DSR1_TEST(backend_ops_rmsnorm_cpu) { run_rmsnorm(t, "cpu"); }
DSR1_TEST(backend_ops_rmsnorm_cuda) { run_rmsnorm(t, "cuda"); }
DSR1_TEST(backend_ops_rmsnorm_hip) { run_rmsnorm(t, "hip"); }
DSR1_TEST(backend_ops_rope_cpu) { run_rope(t, "cpu"); }
DSR1_TEST(backend_ops_rope_cuda) { run_rope(t, "cuda"); }
DSR1_TEST(backend_ops_rope_hip) { run_rope(t, "hip"); }
DSR1_TEST(backend_ops_matmul_cpu) { run_matmul(t, "cpu"); }
DSR1_TEST(backend_ops_matmul_cuda) { run_matmul(t, "cuda"); }
DSR1_TEST(backend_ops_matmul_hip) { run_matmul(t, "hip"); }
DSR1_TEST(backend_ops_kv_cpu) { run_kv(t, "cpu"); }
DSR1_TEST(backend_ops_kv_cuda) { run_kv(t, "cuda"); }
DSR1_TEST(backend_ops_kv_hip) { run_kv(t, "hip"); }
DSR1_TEST(backend_ops_ffn_cpu) { run_ffn(t, "cpu"); }
DSR1_TEST(backend_ops_ffn_cuda) { run_ffn(t, "cuda"); }
DSR1_TEST(backend_ops_ffn_hip) { run_ffn(t, "hip"); }
DSR1_TEST(backend_ops_mla_cpu) { run_mla(t, "cpu"); }
DSR1_TEST(backend_ops_mla_cuda) { run_mla(t, "cuda"); }
DSR1_TEST(backend_ops_mla_hip) { run_mla(t, "hip"); }
DSR1_TEST(backend_ops_moe_cpu) { run_moe(t, "cpu"); }
DSR1_TEST(backend_ops_moe_cuda) { run_moe(t, "cuda"); }
DSR1_TEST(backend_ops_moe_hip) { run_moe(t, "hip"); }
DSR1_TEST(backend_ops_invariance_cpu) { run_invariance(t, "cpu"); }
DSR1_TEST(backend_ops_invariance_cuda) { run_invariance(t, "cuda"); }
DSR1_TEST(backend_ops_invariance_hip) { run_invariance(t, "hip"); }
