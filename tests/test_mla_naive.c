/*
 * test_mla_naive.c - the CPU backend's naive MLA form (backends/cpu/
 * cpu_mla_naive.c): which runs take it, and that they get the attention
 * the reference (core's dsr1_attention_naive, double precision) gets.
 *
 * One call holds three runs: a decode token of sequence B, a prefill run
 * of sequence A (150 tokens: three score tiles, the last partial), and B's
 * next token. In the fast mode the long run is naive and the two B tokens
 * absorbed (the absorb and unabsorb projections then skip A's tokens);
 * float32 and --deterministic never take the naive form; a short run does
 * not. kv_b_proj in every weight type, split into head groups (FP8 groups
 * on a 128-row block boundary), keys and values checked against the
 * reference within the fast mode's attention tolerance: 1e-2 of the largest
 * output (these reach 5-8; test_backend_ops.c's mla allows 2e-2 on values
 * of order 1), 2e-5 in float32.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_backend.h"
#include "be_util.h"
#include "core/forward.h"
#include "core/kvcache.h"
#include "backends/cpu/matmul_impl.h" /* dsr1_mm_avx512_usable */
#include "mat_util.h"
#include "test.h"

enum { H = 4, R = 64, NOPE = 16, ROPE = 16, V = 16, QK = NOPE + ROPE, HW = NOPE + V,
       CTX = 160, NA = 150, N = NA + 2 };

typedef struct fixture {
    tbe b;
    dsr1_kvcache *kv;
    int sa, sb;
    tmat kvb;
    float *wk_t, *wv;        /* float32 copies of kvb's key rows (transposed) and value rows */
    dsr1_wdesc wkd, wvd;
    dsr1_bweight *kh, *vh, *kvbh;
    float *q;
    dsr1_view qv, ov;
} fixture;

static float frand1(unsigned *s)
{
    *s = *s * 1664525u + 1013904223u;
    return (float)(*s >> 8) / (float)(1 << 24) * 2 - 1;
}

static int open_fx(dsr1_test_ctx *t, fixture *f, dsr1_type ty, int deterministic)
{
    memset(f, 0, sizeof *f);
    dsr1_ws_sizes s = {.max_tokens = N, .hidden = 96, .inter = 224, .moe_inter = 96,
                       .n_experts = 8, .topk = 3, .shared_inter = 96, .max_in = 400,
                       .n_heads = H, .kv_lora_rank = R, .rope_dim = ROPE, .max_ctx = CTX,
                       .kv_type = DSR1_KV_BF16};
    dsr1_backend_options o = {.threads = 2, .deterministic = deterministic};
    dsr1_error err;
    CHECK_OK(tbe_open_opts(&f->b, "cpu", &o, &s, &err), &err);
    if (!f->b.ws) return -1;
    f->kvb = dsr1_test_mat(ty, H * HW, R, 0, 41 + (uint64_t)ty);
    /* weights of order 1 in every type (dsr1_test_mat's FP8 reach 9, its
     * INT8 2.5): attention this peaked is not what the tolerance is for */
    if (ty == DSR1_T_FP8_E4M3 || ty == DSR1_T_INT8) {
        size_t ns = ty == DSR1_T_INT8 ? (size_t)H * HW : (size_t)((H * HW + 127) / 128) * ((R + 127) / 128);
        for (size_t i = 0; i < ns; i++) ((float *)f->kvb.scale)[i] /= ty == DSR1_T_INT8 ? 2.5f : 20.0f;
    }
    f->wk_t = malloc((size_t)H * R * NOPE * 4);
    f->wv = malloc((size_t)H * V * R * 4);
    float row[R];
    for (int h = 0; h < H; h++)
        for (int d = 0; d < HW; d++) {
            dsr1_wmat_dequant_row(&f->kvb.w, (int64_t)h * HW + d, row);
            for (int i = 0; i < R; i++) {
                if (d < NOPE) f->wk_t[((size_t)h * R + i) * NOPE + d] = row[i];
                else f->wv[((size_t)h * V + d - NOPE) * R + i] = row[i];
            }
        }
    f->wkd = (dsr1_wdesc){.mat = {.type = DSR1_T_F32, .rows = R, .cols = NOPE, .data = f->wk_t},
                          .count = H, .stride = (size_t)R * NOPE * 4};
    f->wvd = (dsr1_wdesc){.mat = {.type = DSR1_T_F32, .rows = V, .cols = R, .data = f->wv},
                          .count = H, .stride = (size_t)V * R * 4};
    f->kh = tbe_load(&f->b, &f->wkd.mat, H, f->wkd.stride, 0, DSR1_W_MATRIX);
    f->vh = tbe_load(&f->b, &f->wvd.mat, H, f->wvd.stride, 0, DSR1_W_MATRIX);
    f->kvbh = tbe_load(&f->b, &f->kvb.w, 1, 0, 0, DSR1_W_MATRIX);
    if (!f->kh || !f->vh || !f->kvbh) return -1;
    dsr1_kvcache_options ko = {.type = DSR1_KV_BF16, .n_layers = 1, .kv_lora_rank = R,
                               .rope_dim = ROPE, .block = 16, .max_seqs = 2, .ctx = CTX,
                               .be = f->b.be, .dev = f->b.dev};
    CHECK_OK(dsr1_kvcache_create(&f->kv, &ko, &err), &err);
    if (!f->kv) return -1;
    dsr1_kvcache_seq_alloc(f->kv, &f->sa, &err);
    dsr1_kvcache_seq_alloc(f->kv, &f->sb, &err);
    dsr1_kvcache_reserve(f->kv, f->sa, CTX, &err);
    dsr1_kvcache_reserve(f->kv, f->sb, 16, &err);
    unsigned sd = 43;
    float lat[R], pe[ROPE];
    for (int p = 0; p < CTX; p++)
        for (int q = 0; q < 2; q++) {
            if (q && p >= 16) continue;
            for (int i = 0; i < R; i++) lat[i] = frand1(&sd);
            for (int i = 0; i < ROPE; i++) pe[i] = frand1(&sd);
            dsr1_kvcache_write(f->kv, q ? f->sb : f->sa, 0, p, lat, pe);
        }
    f->q = malloc((size_t)N * H * QK * 4);
    for (int i = 0; i < N * H * QK; i++) f->q[i] = frand1(&sd);
    f->qv = tbe_buf(&f->b, (size_t)N * H * QK, H * QK);
    f->ov = tbe_buf(&f->b, (size_t)N * H * V, H * V);
    return 0;
}

static void close_fx(fixture *f)
{
    free(f->q), free(f->wk_t), free(f->wv);
    dsr1_test_mat_free(&f->kvb);
    dsr1_kvcache_free(f->kv);
    tbe_close(&f->b);
}

/* One call of n tokens (seq, pos); the backend's result in got, the
 * reference in want; returns how many outputs are off by more than tol
 * times the largest |want| (at least 1). */
static int attend(dsr1_test_ctx *t, fixture *f, int n, const int32_t *seq, const int32_t *pos,
                  dsr1_act act, double tol, float *got, float *want)
{
    dsr1_mla_args a = {.n = n, .n_heads = H, .qk_nope = NOPE, .rope_dim = ROPE, .v_dim = V,
                       .kv_lora_rank = R, .scale = 0.3f, .q = f->qv, .layer = 0, .wk_t = f->kh,
                       .wv = f->vh, .out = f->ov, .wkv_b = f->kvbh};
    dsr1_error err;
    dsr1_attention_naive(&a, f->q, seq, pos, f->kv, &f->wkd, &f->wvd, want);
    dsr1_step st = {.n = n, .pos = pos, .seq = seq};
    dsr1_kvcache_step(f->kv, &st);
    CHECK_OK(f->b.be->step_begin(f->b.ws, &st, &err), &err);
    f->b.be->write(f->b.ws, f->q, H * QK, n, H * QK, f->qv);
    f->b.be->mla_attention(f->b.ws, &a, act);
    f->b.be->read(f->b.ws, f->ov, n, H * V, got, H * V);
    CHECK_OK(f->b.be->step_end(f->b.ws, &err), &err);
    int bad = 0;
    double top = 1; /* the outputs' scale */
    for (int i = 0; i < n * H * V; i++) top = fabs(want[i]) > top ? fabs(want[i]) : top;
    for (int i = 0; i < n * H * V; i++) bad += !(fabs(got[i] - want[i]) <= tol * top);
    return bad;
}

DSR1_TEST(mla_naive_cpu_long_runs)
{
    static const dsr1_type types[] = {DSR1_T_F32, DSR1_T_BF16, DSR1_T_FP8_E4M3, DSR1_T_INT8,
                                      DSR1_T_INT4};
    int32_t seq[N], pos[N];
    float *got = malloc((size_t)N * H * V * 4), *want = malloc((size_t)N * H * V * 4);
    for (size_t ti = 0; ti < sizeof types / sizeof *types; ti++) {
        fixture f;
        if (open_fx(t, &f, types[ti], 0)) {
            close_fx(&f);
            break;
        }
        const char *tn = dsr1_type_name(types[ti]);
        cpu_ws *w = f.b.ws;
        /* two heads a group (FP8: four, its 128-row block) */
        w->nv_group_cap = (size_t)CTX * HW * 2;
        seq[0] = f.sb, pos[0] = 10;
        for (int i = 0; i < NA; i++) seq[1 + i] = f.sa, pos[1 + i] = i;
        seq[N - 1] = f.sb, pos[N - 1] = 11;
        int bad = attend(t, &f, N, seq, pos, DSR1_ACT_INT8, 1e-2, got, want);
        CHECKF(!bad, "%s: fast mode, %d outputs off", tn, bad);
        CHECKF(w->naive_runs == 1, "%s: %llu naive runs, want 1", tn,
               (unsigned long long)w->naive_runs);
        bad = attend(t, &f, N, seq, pos, DSR1_ACT_F32, 2e-5, got, want);
        CHECKF(!bad && w->naive_runs == 1, "%s: float32: %d outputs off, %llu naive runs", tn,
               bad, (unsigned long long)w->naive_runs);
        /* a run below the naive form's minimum stays absorbed */
        bad = attend(t, &f, 8, seq + 1, pos + 1, DSR1_ACT_INT8, 1e-2, got, want);
        CHECKF(!bad && w->naive_runs == 1, "%s: 8 tokens: %d outputs off, %llu naive runs", tn,
               bad, (unsigned long long)w->naive_runs);
        /* a run from position 1 to 148: its tiles span 65, 129 and 149
         * positions, none a multiple of the products' 16 or 32 lanes */
        bad = attend(t, &f, NA - 2, seq + 2, pos + 2, DSR1_ACT_INT8, 1e-2, got, want);
        CHECKF(!bad && w->naive_runs == 2, "%s: %d tokens: %d outputs off, %llu naive runs", tn, NA - 2,
               bad, (unsigned long long)w->naive_runs);
        close_fx(&f);
    }
    free(got), free(want);
}

DSR1_TEST(mla_naive_cpu_not_deterministic)
{
    fixture f;
    int32_t seq[NA], pos[NA];
    float *got = malloc((size_t)N * H * V * 4), *want = malloc((size_t)N * H * V * 4);
    if (!open_fx(t, &f, DSR1_T_INT8, 1)) {
        for (int i = 0; i < NA; i++) seq[i] = f.sa, pos[i] = i;
        int bad = attend(t, &f, NA, seq, pos, DSR1_ACT_INT8, 1e-2, got, want);
        CHECKF(!bad, "deterministic: %d outputs off", bad);
        CHECK_EQ_INT(((cpu_ws *)f.b.ws)->naive_runs, 0);
    }
    close_fx(&f);
    free(got), free(want);
}

/* Which softmax rows the absorbed attention takes: the AVX-512 row in the
 * fast mode on an AVX-512 CPU (at a 2048-token context the scalar row was
 * the largest part of a decoded token's attention), the scalar row's bits
 * (libm's expf, the same bits on every machine) in the deterministic mode
 * and on the float32 path: on an AVX-512 CPU its exact vector form. */
DSR1_TEST(mla_absorbed_softmax_choice)
{
    for (int det = 0; det < 2; det++) {
        fixture f;
        if (open_fx(t, &f, DSR1_T_INT8, det)) {
            close_fx(&f);
            return;
        }
        const cpu_ws *w = f.b.ws;
        const int avx = dsr1_mm_avx512_usable();
        dsr1_cpu_softmax_fn exact = avx ? dsr1_cpu_softmax_row_exact_avx512 : dsr1_cpu_softmax_row;
        dsr1_cpu_softmax_fn fast = !det && avx ? dsr1_cpu_softmax_row_avx512 : exact;
        CHECKF(dsr1_cpu_attention_softmax(w, DSR1_ACT_INT8) == fast, "deterministic=%d: int8 act", det);
        CHECKF(dsr1_cpu_attention_softmax(w, DSR1_ACT_BF16) == fast, "deterministic=%d: bf16 act", det);
        CHECKF(dsr1_cpu_attention_softmax(w, DSR1_ACT_F32) == exact, "deterministic=%d: float32 path", det);
        close_fx(&f);
    }
}

/* The fast softmax row (AVX-512 exponentials) against the scalar one:
 * every length from 1 to 70 (tails of every width), a masked-off tail of
 * exact zeros, values within 2e-6 of the row's largest probability. */
DSR1_TEST(mla_naive_softmax_avx512)
{
    if (!dsr1_mm_avx512_usable()) DSR1_SKIP("no AVX-512 kernels on this CPU");
    float a[80], b[80];
    unsigned sd = 47;
    for (int valid = 1; valid <= 70; valid++) {
        for (int i = 0; i < valid + 5; i++) a[i] = b[i] = frand1(&sd) * 60;
        dsr1_cpu_softmax_row(a, valid, valid + 5, 0.3f);
        dsr1_cpu_softmax_row_avx512(b, valid, valid + 5, 0.3f);
        double top = 0, off = 0;
        for (int i = 0; i < valid; i++) top = a[i] > top ? a[i] : top;
        for (int i = 0; i < valid; i++) off = fabs(a[i] - b[i]) > off ? fabs(a[i] - b[i]) : off;
        int tail = 0;
        for (int i = valid; i < valid + 5; i++) tail += b[i] != 0.0f;
        CHECKF(off <= 2e-6 * top && !tail, "length %d: off by %g of %g, %d tail values not 0", valid,
               off, top, tail);
    }
}

/* The exact softmax row (softmax_avx512.c) against the scalar one, bit
 * for bit: every length from 1 to 70 and 300, scores spread so that s -
 * max reaches every part of glibc's expf (its main path, the -88..-103.28
 * stretch still on it, the 2^-149 results down to -103.97, zeros below,
 * the thresholds themselves), ties at the maximum including zeros of both
 * signs, -inf and NaN scores, rows of only -inf, a zero scale. */
DSR1_TEST(mla_softmax_exact_avx512)
{
    if (!dsr1_mm_avx512_usable()) DSR1_SKIP("no AVX-512 kernels on this CPU");
    enum { W = 310 };
    float a[W], b[W];
    unsigned sd = 91;
    int bad = 0;
    for (int trial = 0; trial < 400 && !bad; trial++) {
        int valid = trial < 140 ? trial / 2 + 1 : 300, width = valid + trial % 7;
        float spread = (float)(trial % 5) * 40 + 1, scale = trial % 11 ? 0.7f : 0.0f;
        for (int i = 0; i < width; i++) a[i] = frand1(&sd) * spread;
        switch (trial % 9) {
        case 1: a[trial % valid] = -INFINITY; break;
        case 2: a[trial % valid] = NAN; break;
        case 3: for (int i = 0; i < valid; i++) a[i] = -INFINITY; break;
        case 4: for (int i = 0; i < valid; i += 3) a[i] = i % 2 ? -0.0f : 0.0f; break;
        case 5: /* s - max exactly at glibc's thresholds (scale 1) */
            scale = 1.0f;
            a[0] = 0.0f;
            for (int i = 1; i < valid; i++)
                a[i] = (float[]){-0x1.9d1d9ep6f, -0x1.9fe368p6f, -0x1.9d1d9cp6f, -0x1.9fe36ap6f, -88.0f,
                                 -0x1.5fffffp6f, -103.5f, -104.0f}[i % 8];
            break;
        case 6: /* the maximum and a later NaN in the same lane of the vector pass */
            if (valid > 16) a[0] = 2 * spread, a[16] = NAN;
            break;
        default: break;
        }
        memcpy(b, a, sizeof a);
        dsr1_cpu_softmax_row(a, valid, width, scale);
        dsr1_cpu_softmax_row_exact_avx512(b, valid, width, scale);
        for (int i = 0; i < width && !bad; i++)
            if (memcmp(&a[i], &b[i], 4) && !(isnan(a[i]) && isnan(b[i]))) {
                bad = 1;
                CHECKF(0, "trial %d (valid %d, width %d): position %d: %a scalar, %a vector", trial,
                       valid, width, i, a[i], b[i]);
            }
    }
}

/* The transposes (dsr1_transpose_f32_avx512: the naive form's keys;
 * dsr1_transpose_u16_avx512: the absorbed form's bf16 latents): every
 * element in its place for shapes with and without 16-wide tails, strided
 * source and destination, nothing written outside the destination's rows. */
DSR1_TEST(mla_naive_transpose_avx512)
{
    if (!dsr1_mm_avx512_usable()) DSR1_SKIP("no AVX-512 kernels on this CPU");
    static const int shapes[][2] = {{16, 16}, {150, 16}, {17, 33}, {64, 128}, {5, 3}, {1, 1}};
    for (int si = 0; si < 6; si++) {
        int rows = shapes[si][0], cols = shapes[si][1];
        int64_t lds = cols + 7, ldd = rows + 3;
        float *src = malloc((size_t)rows * (size_t)lds * sizeof *src);
        float *dst = malloc((size_t)cols * (size_t)ldd * sizeof *dst);
        for (int64_t i = 0; i < rows * lds; i++) src[i] = (float)i;
        for (int64_t i = 0; i < cols * ldd; i++) dst[i] = -1.0f;
        dsr1_transpose_f32_avx512(src, lds, rows, cols, dst, ldd);
        int bad = 0, spill = 0;
        for (int c = 0; c < cols; c++) {
            for (int r = 0; r < rows; r++) bad += dst[c * ldd + r] != src[r * lds + c];
            for (int64_t r = rows; r < ldd; r++) spill += dst[c * ldd + r] != -1.0f;
        }
        CHECKF(!bad && !spill, "%dx%d: %d misplaced, %d written past a row", rows, cols, bad, spill);
        free(src);
        free(dst);
        /* 16-bit elements (the absorbed attention's bf16 latents), each
         * value distinct in all 16 bits */
        uint16_t *s16 = malloc((size_t)rows * (size_t)lds * sizeof *s16);
        uint16_t *d16 = malloc((size_t)cols * (size_t)ldd * sizeof *d16);
        for (int64_t i = 0; i < rows * lds; i++) s16[i] = (uint16_t)(i * 40503u + 0x8001u);
        for (int64_t i = 0; i < cols * ldd; i++) d16[i] = 0x7fff;
        dsr1_transpose_u16_avx512(s16, lds, rows, cols, d16, ldd);
        bad = spill = 0;
        for (int c = 0; c < cols; c++) {
            for (int r = 0; r < rows; r++) bad += d16[c * ldd + r] != s16[r * lds + c];
            for (int64_t r = rows; r < ldd; r++) spill += d16[c * ldd + r] != 0x7fff;
        }
        CHECKF(!bad && !spill, "16-bit %dx%d: %d misplaced, %d written past a row", rows, cols, bad, spill);
        free(s16);
        free(d16);
    }
}

/* The two products (naive_avx512.c) against double sums, both functions on
 * one shape: ragged token tiles (1, 5, 7, 64: 6-token tiles), widths with
 * and without 16- and 32-lane tails (positions 1, 17, 33, 150; value
 * columns 16, 20, 128; key widths 32 and 192), strides past the widths;
 * each output within 1e-5 of the sum of its terms' magnitudes, and nothing
 * written between rows (the output's padding keeps its -7). */
/* 1 when got is further than tol of the terms' magnitudes from the double
 * sum of a[i * sa] * b[i * sb], i < k; *worst: the largest such ratio. */
static int dot_off_tol(const float *a, int64_t sa, const float *b, int64_t sb, int k, float got,
                       double tol, double *worst)
{
    double want = 0, mag = 0;
    for (int i = 0; i < k; i++) {
        want += (double)a[i * sa] * b[i * sb];
        mag += fabs((double)a[i * sa] * b[i * sb]);
    }
    const double r = mag > 0 ? fabs(got - want) / mag : fabs(got - want);
    if (r > *worst) *worst = r;
    return !(fabs(got - want) <= tol * mag);
}

static int dot_off(const float *a, int64_t sa, const float *b, int64_t sb, int k, float got)
{
    double worst = 0;
    return dot_off_tol(a, sa, b, sb, k, got, 1e-5, &worst);
}

DSR1_TEST(mla_naive_products_avx512)
{
    if (!dsr1_mm_avx512_usable()) DSR1_SKIP("no AVX-512 kernels on this CPU");
    static const int shapes[][4] = {/* n, pb, qk, vd */
                                    {1, 1, 32, 16},  {5, 17, 32, 20},   {7, 33, 192, 128},
                                    {64, 150, 192, 128}, {6, 150, 32, 16}};
    unsigned sd = 53;
    for (int si = 0; si < 5; si++) {
        const int n = shapes[si][0], pb = shapes[si][1], qk = shapes[si][2], vd = shapes[si][3];
        const int64_t ldq = qk + 3, ldkt = pb + 5, lds = pb + 2, ldv = vd + 9, ldo = vd + 4;
        float *q = malloc((size_t)n * ldq * 4), *kt = malloc((size_t)qk * ldkt * 4);
        float *s = malloc((size_t)n * lds * 4), *v = malloc((size_t)pb * ldv * 4);
        float *o = malloc((size_t)n * ldo * 4);
        for (int64_t i = 0; i < n * ldq; i++) q[i] = frand1(&sd);
        for (int64_t i = 0; i < qk * ldkt; i++) kt[i] = frand1(&sd);
        for (int64_t i = 0; i < pb * ldv; i++) v[i] = frand1(&sd);
        for (int64_t i = 0; i < n * lds; i++) s[i] = -7.0f;
        for (int64_t i = 0; i < n * ldo; i++) o[i] = -7.0f;
        dsr1_naive_scores_avx512(q, ldq, n, kt, ldkt, qk, pb, s, lds);
        dsr1_naive_values_avx512(s, lds, n, v, ldv, vd, pb, o, ldo);
        int bad = 0, spill = 0;
        for (int tk = 0; tk < n; tk++) {
            for (int p = 0; p < pb; p++) bad += dot_off(q + tk * ldq, 1, kt + p, ldkt, qk, s[tk * lds + p]);
            for (int d = 0; d < vd; d++) bad += dot_off(s + tk * lds, 1, v + d, ldv, pb, o[tk * ldo + d]);
            for (int64_t p = pb; p < lds; p++) spill += s[tk * lds + p] != -7.0f;
            for (int64_t d = vd; d < ldo; d++) spill += o[tk * ldo + d] != -7.0f;
        }
        CHECKF(!bad && !spill, "n %d, %d positions, qk %d, vd %d: %d outputs off, %d written past a row",
               n, pb, qk, vd, bad, spill);
        free(q), free(kt), free(s), free(v), free(o);
    }
}

/* The tiles' products (naive_amx_avx512.c) on the same shapes, and 1 and
 * 33 tokens against 70 positions, keys from nope + rope parts (rope 0 for
 * key widths of 32): each output within 5e-5 of its terms' magnitudes
 * from the double sum (three bf16 products leave about 2^-16 of each term;
 * with the hi.lo or lo.hi product dropped the error is about 2^-9), and
 * nothing written past a row. */
DSR1_TEST(mla_naive_products_amx)
{
    if (!dsr1_mm_amx_usable()) DSR1_SKIP("no AMX tiles on this CPU (or Linux did not grant them)");
    static const int shapes[][4] = {/* n, pb (= P), qk, vd */
                                    {1, 1, 32, 16},      {5, 17, 32, 20},  {7, 33, 192, 128},
                                    {64, 150, 192, 128}, {6, 150, 32, 16}, {1, 70, 192, 128},
                                    {33, 70, 192, 128}};
    unsigned sd = 59;
    double worst = 0;
    for (int si = 0; si < 7; si++) {
        const int n = shapes[si][0], P = shapes[si][1], qk = shapes[si][2], vd = shapes[si][3];
        const int rope = qk > 32 ? 64 : 0, nope = qk - rope;
        const int64_t ldq = qk + 3, ldk = qk + 7, lds = P + 2, ldv = vd + 9, ldo = vd + 4;
        float *q = malloc((size_t)n * ldq * 4), *k = malloc((size_t)P * ldk * 4);
        float *s = malloc((size_t)n * lds * 4), *v = malloc((size_t)P * ldv * 4);
        float *o = malloc((size_t)n * ldo * 4);
        void *mem = malloc(dsr1_naive_tiles_bytes(P, qk, vd));
        for (int64_t i = 0; i < n * ldq; i++) q[i] = frand1(&sd);
        for (int64_t i = 0; i < P * ldk; i++) k[i] = frand1(&sd);
        for (int64_t i = 0; i < P * ldv; i++) v[i] = frand1(&sd);
        for (int64_t i = 0; i < n * lds; i++) s[i] = -7.0f;
        for (int64_t i = 0; i < n * ldo; i++) o[i] = -7.0f;
        dsr1_naive_tiles tl;
        dsr1_naive_tiles_place(&tl, mem, P, qk, vd);
        dsr1_naive_keys_amx(&tl, k, ldk, nope, rope ? k + nope : NULL, ldk, rope);
        dsr1_naive_vals_amx(&tl, v, ldv, vd);
        dsr1_naive_scores_amx(&tl, q, ldq, n, qk, P, s, lds);
        dsr1_naive_values_amx(&tl, s, lds, n, P, vd, o, ldo);
        int bad = 0, spill = 0;
        for (int tk = 0; tk < n; tk++) {
            for (int p = 0; p < P; p++)
                bad += dot_off_tol(q + tk * ldq, 1, k + p * ldk, 1, qk, s[tk * lds + p], 5e-5, &worst);
            for (int d = 0; d < vd; d++)
                bad += dot_off_tol(s + tk * lds, 1, v + d, ldv, P, o[tk * ldo + d], 5e-5, &worst);
            for (int64_t p = P; p < lds; p++) spill += s[tk * lds + p] != -7.0f;
            for (int64_t d = vd; d < ldo; d++) spill += o[tk * ldo + d] != -7.0f;
        }
        CHECKF(!bad && !spill, "n %d, %d positions, qk %d, vd %d: %d outputs off, %d written past a row",
               n, P, qk, vd, bad, spill);
        free(q), free(k), free(s), free(v), free(o), free(mem);
    }
    if (getenv("DSR1_TEST_VERBOSE")) fprintf(stderr, "worst error %.2g of the terms' magnitudes\n", worst);
}
