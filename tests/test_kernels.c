/*
 * test_kernels.c - the CPU matmul kernels against the scalar reference
 * (dsr1_matmul_ref): every weight type x every activation mode x odd shapes
 * (rows and cols off every vector and block size, partial FP8 blocks,
 * several column chunks), with tolerances derived from each mode's rounding;
 * and the determinism contract of kernels.h (a token's output bit-identical
 * alone or in a batch, with 1 or 2 threads, portable or AVX-512 kernel).
 */
#include <stdint.h>
#include <stdlib.h>

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
    x[0] = 0.0f; /* an exact zero and a large value in every test */
    if (n * ldx > 5) x[5] = 37.0f;
    return x;
}

/* ---- accuracy against the reference ------------------------------------- */

/* Largest |y - ref| / bound over all outputs, where bound is what the mode's
 * rounding allows for that output (> 1 fails). */
static double worst_ratio(const tmat *m, const float *x, int64_t ldx, const float *y,
                          const float *ref, int n, dsr1_act act)
{
    const dsr1_wmat *w = &m->w;
    float *row = malloc((size_t)w->cols * sizeof *row);
    double worst = 0;
    for (int64_t r = 0; r < w->rows; r++) {
        dsr1_wmat_dequant_row(w, r, row);
        for (int t = 0; t < n; t++) {
            double s = 0, sw = 0, amax = 0;
            for (int64_t c = 0; c < w->cols; c++) {
                s += fabs((double)row[c] * x[t * ldx + c]);
                sw += fabs(row[c]);
                amax = fmax(amax, fabs(x[t * ldx + c]));
            }
            /* F32: float32 accumulation of cols/16 terms per lane and a few
             * more; BF16: x and w each rounded to 8 significant bits (2^-9
             * relative) so each product moves by < 2^-8; INT8 (W8A8 on INT8,
             * W4A8 on INT4 weights): x moves by at most half a quantisation
             * step (amax/254) per element. */
            int a8 = w->type == DSR1_T_INT8 || w->type == DSR1_T_INT4;
            double bound = 1e-5 * s + 1e-30;
            if (act == DSR1_ACT_BF16 || (act == DSR1_ACT_INT8 && !a8))
                bound = 4.0e-3 * s + 1e-30;
            else if (act == DSR1_ACT_INT8)
                bound = sw * amax / 254.0 * 1.01 + 1e-5 * s + 1e-30;
            double e = fabs((double)y[t * w->rows + r] - ref[t * w->rows + r]);
            if (e / bound > worst) worst = e / bound;
        }
    }
    free(row);
    return worst;
}

static const dsr1_type all_types[] = {DSR1_T_F32, DSR1_T_F16, DSR1_T_BF16,
                                      DSR1_T_FP8_E4M3, DSR1_T_INT8, DSR1_T_INT4};
static const char *act_name[] = {"f32", "bf16", "int8"};

/* cols that exercise: tails inside a vector, partial 128-blocks, several
 * F32 (1024) and BF16 (2048) chunks. int4 needs cols % group == 0. */
static int64_t test_cols(dsr1_type type, int variant, int which)
{
    if (type == DSR1_T_INT4) return which ? 2176 + (variant ? 0 : 32) : (variant ? 384 : 160);
    if (type == DSR1_T_INT8 && variant) return which ? 2240 : 192;
    return which ? 2100 : 301;
}

static void check_accuracy(dsr1_test_ctx *t, dsr1_pool *pool, dsr1_type type, int variant)
{
    static const int ns[] = {1, 3, 17};
    for (int which = 0; which < 2; which++) {
        int64_t rows = which ? 37 : 131, cols = test_cols(type, variant, which);
        tmat m = dsr1_test_mat(type, rows, cols, variant, 1000 + (uint64_t)type * 10 + (uint64_t)which);
        for (int ni = 0; ni < 3; ni++) {
            int n = ns[ni];
            float *x = make_x(n, cols, 77 + (uint64_t)n);
            float *ref = malloc((size_t)(n * rows) * 4), *y = malloc((size_t)(n * rows) * 4);
            dsr1_matmul_ref(&m.w, x, cols, ref, rows, n);
            for (int act = 0; act < 3; act++) {
                dsr1_matmul(pool, &m.w, x, cols, y, rows, n, (dsr1_act)act);
                double wr = worst_ratio(&m, x, cols, y, ref, n, (dsr1_act)act);
                CHECKF(wr <= 1.0, "%s %lldx%lld n=%d act=%s: error %.3g x the bound", m.what,
                       (long long)rows, (long long)cols, n, act_name[act], wr);
            }
            free(x);
            free(ref);
            free(y);
        }
        dsr1_test_mat_free(&m);
    }
}

DSR1_TEST(kernels_matmul_accuracy)
{
    dsr1_pool *pool = NULL;
    dsr1_error err = {0};
    CHECK_OK(dsr1_pool_create(&pool, 2, &err), &err);
    for (size_t i = 0; i < sizeof all_types / sizeof *all_types; i++) {
        check_accuracy(t, pool, all_types[i], 0);
        if (all_types[i] == DSR1_T_INT8 || all_types[i] == DSR1_T_INT4)
            check_accuracy(t, pool, all_types[i], 1);
    }
    dsr1_pool_free(pool);
}

/* ---- determinism ---------------------------------------------------------- */

static void check_determinism(dsr1_test_ctx *t, dsr1_pool *pool, dsr1_type type, int variant)
{
    int64_t rows = 45, cols = test_cols(type, variant, 1);
    int n = 7;
    tmat m = dsr1_test_mat(type, rows, cols, variant, 5 + (uint64_t)type);
    float *x = make_x(n, cols + 3, 9);
    float *batch = malloc((size_t)(n * rows) * 4), *one = malloc((size_t)rows * 4);
    float *port = malloc((size_t)(n * rows) * 4);
    for (int act = 0; act < 3; act++) {
        dsr1_matmul(pool, &m.w, x, cols + 3, batch, rows, n, (dsr1_act)act);
        dsr1_matmul_with(NULL, &m.w, x, cols + 3, port, rows, n, (dsr1_act)act,
                         DSR1_MM_PORTABLE);
        int diff_port = memcmp(batch, port, (size_t)(n * rows) * 4) != 0;
        CHECKF(!diff_port, "%s act=%s: portable and vector kernels differ", m.what, act_name[act]);
        /* The GEMV kernels (n <= 4) against the same portable rows. */
        dsr1_matmul(pool, &m.w, x, cols + 3, batch, rows, 3, (dsr1_act)act);
        CHECKF(!memcmp(batch, port, (size_t)(3 * rows) * 4), "%s act=%s: n=3 differs from portable",
               m.what, act_name[act]);
        dsr1_matmul(pool, &m.w, x, cols + 3, batch, rows, n, (dsr1_act)act);
        for (int tok = 0; tok < n; tok++) {
            dsr1_matmul(NULL, &m.w, x + tok * (cols + 3), cols + 3, one, rows, 1, (dsr1_act)act);
            CHECKF(!memcmp(one, batch + tok * rows, (size_t)rows * 4),
                   "%s act=%s: token %d alone (1 thread) differs from in a batch of %d (2 threads)",
                   m.what, act_name[act], tok, n);
        }
    }
    free(x);
    free(batch);
    free(one);
    free(port);
    dsr1_test_mat_free(&m);
}

DSR1_TEST(kernels_matmul_deterministic)
{
    dsr1_pool *pool = NULL;
    dsr1_error err = {0};
    CHECK_OK(dsr1_pool_create(&pool, 2, &err), &err);
    for (size_t i = 0; i < sizeof all_types / sizeof *all_types; i++) {
        check_determinism(t, pool, all_types[i], 0);
        if (all_types[i] == DSR1_T_INT8 || all_types[i] == DSR1_T_INT4)
            check_determinism(t, pool, all_types[i], 1);
    }
    dsr1_pool_free(pool);
}

/* A one-token matmul on a pool splits into many small tasks (MM_SPLIT_GEMV
 * a thread, the last one ragged; FP8 in whole 128-row scale blocks once
 * there are 2 x threads of them): every row is written, with the bits of
 * the same matmul on the caller's thread alone. Rows 1037 (not a multiple
 * of 16 or 128); y starts as NaN so a row no task wrote shows. */
DSR1_TEST(kernels_gemv_split_matches_one_thread)
{
    const int64_t rows = 1037;
    for (int th = 2; th <= 3; th++) {
        dsr1_pool *pool = NULL;
        dsr1_error err = {0};
        CHECK_OK(dsr1_pool_create(&pool, th, &err), &err);
        REQUIRE(pool);
        for (size_t i = 0; i < sizeof all_types / sizeof *all_types; i++) {
            int64_t cols = test_cols(all_types[i], 0, 0);
            tmat m = dsr1_test_mat(all_types[i], rows, cols, 0, 40 + (uint64_t)i);
            float *x = make_x(1, cols, 11), *one = malloc((size_t)rows * 4), *split = malloc((size_t)rows * 4);
            for (int act = 0; act < 3; act++) {
                memset(split, 0xff, (size_t)rows * 4);
                dsr1_matmul(NULL, &m.w, x, cols, one, rows, 1, (dsr1_act)act);
                dsr1_matmul(pool, &m.w, x, cols, split, rows, 1, (dsr1_act)act);
                CHECKF(!memcmp(one, split, (size_t)rows * 4), "%s act=%s, %d threads: split differs",
                       m.what, act_name[act], th);
            }
            free(x);
            free(one);
            free(split);
            dsr1_test_mat_free(&m);
        }
        dsr1_pool_free(pool);
    }
}

/* Strided x and y (ldx > cols, ldy > rows) and untouched padding. */
DSR1_TEST(kernels_matmul_strides)
{
    tmat m = dsr1_test_mat(DSR1_T_FP8_E4M3, 20, 200, 0, 3);
    int n = 3;
    float *x = make_x(n, 256, 4), y[3 * 32], ref[3 * 20];
    for (int i = 0; i < 3 * 32; i++) y[i] = -7.0f;
    dsr1_matmul(NULL, &m.w, x, 256, y, 32, n, DSR1_ACT_F32);
    dsr1_matmul_ref(&m.w, x, 256, ref, 20, n);
    for (int tok = 0; tok < n; tok++)
        for (int r = 0; r < 32; r++) {
            if (r < 20)
                CHECK_NEAR(y[tok * 32 + r], ref[tok * 20 + r], 1e-4);
            else
                CHECK(y[tok * 32 + r] == -7.0f);
        }
    free(x);
    dsr1_test_mat_free(&m);
}

/* ---- weights of a tensor ---------------------------------------------------- */

DSR1_TEST(kernels_wmat_of_stack)
{
    /* Three fp8 experts [3, 130, 260]: scales [3, 2, 3]. */
    int64_t rows = 130, cols = 260, e = 3;
    size_t per = (size_t)(rows * cols), nsc = 2 * 3;
    uint8_t *data = malloc(per * 3);
    float *scale = malloc(nsc * 3 * 4);
    for (size_t i = 0; i < per * 3; i++) data[i] = (uint8_t)(i % 7 + 0x30 + (i / per) * 8);
    for (size_t i = 0; i < nsc * 3; i++) scale[i] = (float)(i + 1);
    dsr1_tensor ten = {.name = "experts", .type = DSR1_T_FP8_E4M3, .ndim = 3,
                       .dims = {e, rows, cols}, .data = data, .size = per * 3,
                       .scale = scale, .scale_size = nsc * 3 * 4,
                       .scale_type = DSR1_T_F32, .group = 128};
    dsr1_wmat w = dsr1_wmat_of(&ten, 2);
    CHECK_EQ_INT(w.rows, rows);
    CHECK_EQ_INT(w.cols, cols);
    CHECK(w.data == data + 2 * per);
    CHECK(w.scale == scale + 2 * nsc);
    float row[260];
    dsr1_wmat_dequant_row(&w, 129, row); /* last row: second row block */
    CHECK(row[259] == dsr1_fp8e4m3_to_f32(data[2 * per + 129 * 260 + 259]) * scale[2 * nsc + 5]);
    CHECK(row[0] == dsr1_fp8e4m3_to_f32(data[2 * per + 129 * 260]) * scale[2 * nsc + 3]);
    dsr1_tensor t2 = ten;
    t2.ndim = 2;
    t2.dims[0] = rows;
    t2.dims[1] = cols;
    t2.dims[2] = 0;
    dsr1_wmat w2 = dsr1_wmat_of(&t2, 0);
    CHECK(w2.data == data && w2.scale == scale && w2.rows == rows && w2.cols == cols);
    free(data);
    free(scale);
}

/* Every e4m3 byte and every int4 nibble dequantises as numeric.h says. */
DSR1_TEST(kernels_dequant_all_codes)
{
    uint8_t fp8[256];
    float sc = 0.5f;
    for (int i = 0; i < 256; i++) fp8[i] = (uint8_t)i;
    dsr1_wmat w = {.type = DSR1_T_FP8_E4M3, .rows = 1, .cols = 256, .data = fp8,
                   .scale = &sc, .scale_type = DSR1_T_F32, .group = 256};
    float out[256];
    dsr1_wmat_dequant_row(&w, 0, out);
    int bad = 0;
    for (int i = 0; i < 256; i++)
        if ((i & 0x7f) != 0x7f && out[i] != dsr1_fp8e4m3_to_f32((uint8_t)i) * 0.5f) bad++;
    CHECK_EQ_INT(bad, 0);
    uint8_t q4[16];
    uint16_t s4 = dsr1_f32_to_f16(2.0f);
    for (int i = 0; i < 16; i++) q4[i] = (uint8_t)(i | ((15 - i) << 4));
    dsr1_wmat w4 = {.type = DSR1_T_INT4, .rows = 1, .cols = 32, .data = q4, .scale = &s4,
                    .scale_type = DSR1_T_F16, .group = 32};
    dsr1_wmat_dequant_row(&w4, 0, out);
    for (int i = 0; i < 16; i++) {
        CHECK(out[2 * i] == (float)(i - 8) * 2.0f);
        CHECK(out[2 * i + 1] == (float)(7 - i) * 2.0f);
    }
}

/* The kernels the FP8 BF16-mode tests compare: the portable one, the
 * AVX-512 one as dsr1_matmul picks it (VBMI byte tables where the CPU has
 * them) and the AVX-512 shift/add fallback (CPUs without VBMI). */
static const dsr1_mm_kernel fp8_kernels[] = {DSR1_MM_PORTABLE, DSR1_MM_AVX512, DSR1_MM_AVX512_NOVBMI};
static const char *fp8_kernel_name[] = {"portable", "avx512", "avx512-novbmi"};

/* FP8 in BF16 mode keeps every e4m3 code's value exact (scale on x): with
 * one-hot x every output is one weight times the scale, exactly, in every
 * kernel, GEMV (n <= 4) and panel paths alike. All 256 codes, NaN codes
 * included (dsr1_mm_fp8_bf16 reads them as +-480, the table decode must
 * too), each twice: at column c and at 256 + (c - 7) mod 256, so at two
 * positions of a 64-code step and under two scales. */
DSR1_TEST(kernels_fp8_bf16_exact_codes)
{
    enum { COLS = 256 };
    uint8_t codes[2 * COLS];
    float scale[4] = {0.125f, 3.0f, 1024.0f, 0x1p-20f}; /* [1 row block][4 column blocks] */
    for (int i = 0; i < COLS; i++) {
        codes[i] = (uint8_t)i;
        codes[COLS + i] = (uint8_t)(i + 7);
    }
    dsr1_wmat w = {.type = DSR1_T_FP8_E4M3, .rows = 1, .cols = 2 * COLS, .data = codes,
                   .scale = scale, .scale_type = DSR1_T_F32, .group = 128};
    float *x = calloc((size_t)2 * COLS * 2 * COLS, sizeof *x), y[2 * COLS];
    for (int i = 0; i < 2 * COLS; i++) x[i * 2 * COLS + i] = 1.0f;
    static const int ns[] = {1, 3, 4, 5, 64};
    for (int k = 0; k < 3; k++)
        for (int ni = 0; ni < 5; ni++) {
            int bad = 0;
            for (int tok0 = 0; tok0 < 2 * COLS; tok0 += ns[ni]) {
                int n = 2 * COLS - tok0 < ns[ni] ? 2 * COLS - tok0 : ns[ni];
                dsr1_matmul_with(NULL, &w, x + tok0 * 2 * COLS, 2 * COLS, y + tok0, 1, n,
                                 DSR1_ACT_BF16, fp8_kernels[k]);
            }
            for (int i = 0; i < 2 * COLS; i++) {
                uint8_t c = codes[i];
                float want = dsr1_bf16_to_f32(dsr1_mm_fp8_bf16(c)) * scale[i / 128];
                if ((c & 0x7f) != 0x7f) CHECK(want == dsr1_fp8e4m3_to_f32(c) * scale[i / 128]);
                bad += memcmp(&want, &y[i], 4) != 0 && !(want == 0 && y[i] == 0);
            }
            CHECKF(bad == 0, "%s n=%d: %d of %d fp8 codes not exact", fp8_kernel_name[k],
                   ns[ni], bad, 2 * COLS);
        }
    free(x);
}

/* The VBMI byte-table decode and the shift/add fallback against the
 * portable kernel, bit for bit, on random codes (every byte, NaN codes
 * too): column counts whose last step is whole, 32 codes, under 32 and
 * between 32 and 64 (the 64-code steps' ragged ends), ragged 4-row
 * tiles, GEMV (1-8: two passes of 4 tokens from 5) and panel token
 * counts, 1 and 2 threads. */
DSR1_TEST(kernels_fp8_vbmi_matches_fallback)
{
    if (!dsr1_mm_avx512_usable())
        DSR1_SKIP("no AVX-512 BF16/VNNI kernels on this CPU: %s", "neither FP8 vector path runs");
    static const int64_t colss[] = {2112, 2080, 2069, 2100, 301, 64};
    static const int ns[] = {1, 2, 4, 5, 6, 7, 8, 9};
    dsr1_pool *pool = NULL;
    dsr1_error err = {0};
    CHECK_OK(dsr1_pool_create(&pool, 2, &err), &err);
    for (size_t ci = 0; ci < sizeof colss / sizeof *colss; ci++) {
        int64_t rows = 133, cols = colss[ci];
        tmat m = dsr1_test_mat(DSR1_T_FP8_E4M3, rows, cols, 0, 40 + ci);
        rng g = {41 + ci};
        uint8_t *codes = m.data;
        for (int64_t i = 0; i < rows * cols; i++)
            if (dsr1_test_rnd(&g) % 4 == 0) codes[i] = (uint8_t)dsr1_test_rnd(&g);
        for (int ni = 0; ni < (int)(sizeof ns / sizeof *ns); ni++) {
            int n = ns[ni];
            float *x = make_x(n, cols + 3, 42 + (uint64_t)n);
            size_t bytes = (size_t)(n * rows) * 4;
            float *y[3];
            for (int k = 0; k < 3; k++) {
                y[k] = malloc(bytes);
                dsr1_matmul_with(k ? pool : NULL, &m.w, x, cols + 3, y[k], rows, n, DSR1_ACT_BF16,
                                 fp8_kernels[k]);
            }
            for (int k = 1; k < 3; k++)
                CHECKF(!memcmp(y[k], y[0], bytes), "%s %lldx%lld n=%d: differs from portable",
                       fp8_kernel_name[k], (long long)rows, (long long)cols, n);
            for (int k = 0; k < 3; k++) free(y[k]);
            free(x);
        }
        dsr1_test_mat_free(&m);
    }
    dsr1_pool_free(pool);
}

/* FP8 block scales of 64 and 96 columns and rows: groups that do not
 * divide the 2048-column chunks, so a chunk starts inside a group and the
 * GEMV's x' preparation (fp8_prep_x) walks the row's scales from there;
 * every kernel must still give the portable bits. */
DSR1_TEST(kernels_fp8_odd_groups_match_portable)
{
    if (!dsr1_mm_avx512_usable() && !dsr1_mm_avx2_usable())
        DSR1_SKIP("no AVX-512 BF16/VNNI kernels on this CPU: %s", "neither FP8 vector path runs");
    static const int groups[] = {64, 96};
    static const int ns[] = {1, 2, 5};
    const int64_t rows = 133, cols = 4200;
    dsr1_pool *pool = NULL;
    dsr1_error err = {0};
    CHECK_OK(dsr1_pool_create(&pool, 2, &err), &err);
    for (int gi = 0; gi < 2; gi++) {
        const int g = groups[gi];
        tmat m = dsr1_test_mat(DSR1_T_FP8_E4M3, rows, cols, 0, 90 + (uint64_t)gi);
        size_t nscale = (size_t)(((rows + g - 1) / g) * ((cols + g - 1) / g));
        float *sc = malloc(nscale * 4);
        rng r = {91 + (uint64_t)gi};
        for (size_t i = 0; i < nscale; i++) sc[i] = dsr1_test_frand(&r, 0.001f, 0.02f);
        dsr1_wmat w = m.w;
        w.group = g;
        w.scale = sc;
        for (int ni = 0; ni < 3; ni++) {
            int n = ns[ni];
            float *x = make_x(n, cols, 92 + (uint64_t)n);
            size_t bytes = (size_t)(n * rows) * 4;
            float *y[3];
            for (int k = 0; k < 3; k++) {
                y[k] = malloc(bytes);
                dsr1_matmul_with(k ? pool : NULL, &w, x, cols, y[k], rows, n, DSR1_ACT_BF16,
                                 fp8_kernels[k]);
            }
            for (int k = 1; k < 3; k++)
                CHECKF(!memcmp(y[k], y[0], bytes), "%s group %d n=%d: differs from portable",
                       fp8_kernel_name[k], g, n);
            for (int k = 0; k < 3; k++) free(y[k]);
            free(x);
        }
        free(sc);
        dsr1_test_mat_free(&m);
    }
    dsr1_pool_free(pool);
}

/* dsr1_ffn_gate_up is exactly silu(gate) * up from two matmuls. */
DSR1_TEST(kernels_ffn_gate_up)
{
    dsr1_pool *pool = NULL;
    dsr1_error err = {0};
    CHECK_OK(dsr1_pool_create(&pool, 2, &err), &err);
    static const dsr1_type types[] = {DSR1_T_FP8_E4M3, DSR1_T_INT8, DSR1_T_INT4, DSR1_T_BF16};
    for (size_t ti = 0; ti < 4; ti++)
        for (int act = 0; act < 3; act++)
            for (int n = 1; n <= 9; n += 8) {
                int64_t rows = 70, cols = 384;
                tmat g = dsr1_test_mat(types[ti], rows, cols, 0, 11), u = dsr1_test_mat(types[ti], rows, cols, 0, 12);
                float *x = make_x(n, cols, 13), *h = malloc((size_t)(n * rows) * 4);
                float *yg = malloc((size_t)(n * rows) * 4), *yu = malloc((size_t)(n * rows) * 4);
                dsr1_ffn_gate_up(pool, &g.w, &u.w, x, cols, h, rows, n, (dsr1_act)act);
                dsr1_matmul(NULL, &g.w, x, cols, yg, rows, n, (dsr1_act)act);
                dsr1_matmul(NULL, &u.w, x, cols, yu, rows, n, (dsr1_act)act);
                int bad = 0;
                for (int64_t i = 0; i < n * rows; i++) {
                    float want = yg[i] / (1.0f + expf(-yg[i])) * yu[i];
                    bad += memcmp(&want, &h[i], 4) != 0;
                }
                CHECKF(bad == 0, "%s act=%s n=%d: %d outputs differ from silu(gate)*up", g.what,
                       act_name[act], n, bad);
                free(x);
                free(h);
                free(yg);
                free(yu);
                dsr1_test_mat_free(&g);
                dsr1_test_mat_free(&u);
            }
    dsr1_pool_free(pool);
}

/* A vector SwiGLU step (silu_avx512.c, silu_avx2.c) against the scalar
 * formula with libm's expf, bit for bit: every 97th float bit pattern as
 * g (a sweep of all signs, exponents and mantissas), then the edges of
 * glibc's main expf path (|g| near 88, the underflow thresholds near
 * -103.3 and -104, infinities, NaN, denormals, zeros) inside vectors of
 * ordinary values and at ragged lengths (the tails). All 2^32 patterns
 * were compared once for each (Debian 12's glibc 2.36): none differ. */
static void silu_matches_expf(dsr1_test_ctx *t, void (*fn)(float *, const float *, int64_t), const char *what)
{
    enum { B = 4096 };
    float *a = malloc(B * sizeof *a), *b = malloc(B * sizeof *b), *u = malloc(B * sizeof *u);
    for (int i = 0; i < B; i++) u[i] = 0.75f + (float)(i % 13) * 0.125f;
    int64_t bad = 0;
    for (uint64_t s = 0; s < ((uint64_t)1 << 32); s += (uint64_t)97 * B) {
        for (int i = 0; i < B; i++) {
            uint32_t v = (uint32_t)(s + (uint64_t)97 * (uint64_t)i);
            memcpy(&a[i], &v, 4);
        }
        memcpy(b, a, B * sizeof *a);
        dsr1_silu_mul_ref(a, u, B);
        fn(b, u, B);
        for (int i = 0; i < B; i++) bad += memcmp(&a[i], &b[i], 4) != 0 && !(isnan(a[i]) && isnan(b[i]));
    }
    CHECKF(bad == 0, "%s: %lld of the swept values differ from g / (1 + expf(-g)) * u", what, (long long)bad);
    static const float edge[] = {88.0f, -88.0f, 87.99999f, -87.99999f, 88.72283f, -88.72284f,
                                 103.27892f, 103.28f, 103.97207f, 103.98f, 150.0f, -150.0f,
                                 INFINITY, -INFINITY, NAN, 1e-40f, -1e-40f, 0.0f, -0.0f,
                                 1e-30f, 3.4e38f, -3.4e38f, 0.5f, -0.5f, 20.0f, -20.0f,
                                 /* the one float (of all 2^32) where r = x * 32 / ln 2 - k
                                  * computed unfused would change the result */
                                 -0x1.04845ep+5f};
    const int ne = (int)(sizeof edge / sizeof *edge);
    for (int len = 1; len <= 40; len++)
        for (int k = 0; k < ne; k++) {
            for (int i = 0; i < len; i++) a[i] = (float)(i % 9) * 0.37f - 1.5f;
            a[(k * 7) % len] = edge[k];
            memcpy(b, a, (size_t)len * sizeof *a);
            float *c = malloc((size_t)len * sizeof *c);
            memcpy(c, a, (size_t)len * sizeof *a);
            dsr1_silu_mul_ref(a, u, len);
            fn(b, u, len);
            dsr1_silu_mul(c, u, len);
            for (int i = 0; i < len; i++) {
                int same = (memcmp(&a[i], &b[i], 4) == 0 || (isnan(a[i]) && isnan(b[i]))) &&
                           (memcmp(&a[i], &c[i], 4) == 0 || (isnan(a[i]) && isnan(c[i])));
                if (!same) {
                    CHECKF(0, "%s: edge %g at %d of %d: %a scalar, %a vector, %a dispatched", what,
                           edge[k], i, len, a[i], b[i], c[i]);
                    k = ne, len = 41;
                    break;
                }
            }
            free(c);
        }
    free(a);
    free(b);
    free(u);
}

DSR1_TEST(kernels_silu_mul_avx512_matches_expf)
{
    if (!dsr1_mm_avx512_usable()) DSR1_SKIP("no AVX-512 on this CPU");
    silu_matches_expf(t, dsr1_silu_mul_avx512, "avx512");
}

DSR1_TEST(kernels_silu_mul_avx2_matches_expf)
{
    if (!dsr1_mm_avx2_usable()) DSR1_SKIP("no AVX2+FMA on this CPU");
    silu_matches_expf(t, dsr1_silu_mul_avx2, "avx2");
}

/* ---- BF16 mode prefill paths -------------------------------------------------- */

/* The activations' bf16 rounding (vector) equals dsr1_mm_to_bf16 (scalar)
 * on the awkward values: ties to even, denormals, infinities, NaNs. */
DSR1_TEST(kernels_bf16_rows_special_values)
{
    if (!dsr1_mm_avx512_usable())
        DSR1_SKIP("no AVX-512 BF16/VNNI kernels on this CPU: %s", "the vector rounding under test does not run");

    static const uint32_t bits[] = {
        0x00000000, 0x80000000, 0x00000001, 0x807fffff, 0x00800000, 0x3f808000, 0x3f818000,
        0x3f80ffff, 0x7f7fffff, 0xff7fffff, 0x7f800000, 0xff800000, 0x7fc00000, 0x7f800001,
        0xffa00000, 0x3effffff, 0x7f7f8000, 0xc0490fdb};
    enum { N = sizeof bits / sizeof *bits, T = 3, LD = 64 };
    float x[T][LD - 5];
    for (int t0 = 0; t0 < T; t0++)
        for (int c = 0; c < LD - 5; c++) {
            uint32_t u = bits[(c + t0) % N] ^ (uint32_t)(c * 0x10u);
            memcpy(&x[t0][c], &u, 4);
        }
    uint16_t out[T][LD];
    memset(out, 0xab, sizeof out);
    dsr1_mm_bf16_rows_avx512(&x[0][0], LD - 5, T, LD - 5, &out[0][0], LD);
    int bad = 0;
    for (int t0 = 0; t0 < T; t0++)
        for (int c = 0; c < LD; c++)
            bad += out[t0][c] != (c < LD - 5 ? dsr1_mm_to_bf16(x[t0][c]) : 0);
    CHECKF(bad == 0, "%d of %d bf16 roundings differ from dsr1_mm_to_bf16", bad, T * LD);
}

/* BF16 weights holding denormals and signed zeros, x holding denormals and
 * ties, in BF16 mode (one thread; 202 rows: a ragged 2-row tile) through
 * the register GEMV in groups of up to 6 tokens (5: one group of 5; 13:
 * 6 + 6 + 1; 24: four of 6, the most it takes) and the many-token panels
 * (25 and 40: 64-row panels whole and ragged, 6-token tiles and a ragged
 * one): bit-identical to the portable kernel, and each token the same
 * alone (the one-token GEMV). */
DSR1_TEST(kernels_bf16_panels_special_values)
{
    if (!dsr1_mm_avx512_usable() && !dsr1_mm_avx2_usable())
        DSR1_SKIP("no AVX-512 BF16/VNNI kernels on this CPU: %s", "dsr1_matmul would be the portable kernel compared with itself");
    static const int ns[] = {5, 13, 24, 25, 40};
    int64_t rows = 202, cols = 2100;
    tmat m = dsr1_test_mat(DSR1_T_BF16, rows, cols, 0, 21);
    uint16_t *wd = m.data;
    for (int64_t i = 0; i < rows * cols; i += 7) wd[i] = (uint16_t)(i % 3 == 0 ? 0x0001 : i % 3 == 1 ? 0x8042 : 0x8000);
    float *x = make_x(40, cols, 22);
    for (int64_t i = 0; i < 40 * cols; i += 5) {
        uint32_t u = i % 2 ? 0x3f808000u : 0x00000123u; /* a tie, a denormal */
        memcpy(&x[i], &u, 4);
    }
    float *y = malloc((size_t)(40 * rows) * 4), *port = malloc((size_t)(40 * rows) * 4);
    float *one = malloc((size_t)rows * 4);
    dsr1_pool *pool = NULL;
    dsr1_error err = {0};
    CHECK_OK(dsr1_pool_create(&pool, 1, &err), &err);
    for (size_t ni = 0; ni < sizeof ns / sizeof *ns; ni++) {
        int n = ns[ni];
        dsr1_matmul(pool, &m.w, x, cols, y, rows, n, DSR1_ACT_BF16);
        dsr1_matmul_with(NULL, &m.w, x, cols, port, rows, n, DSR1_ACT_BF16, DSR1_MM_PORTABLE);
        CHECKF(!memcmp(y, port, (size_t)(n * rows) * 4), "n=%d: bf16 kernels differ from portable", n);
        for (int tok = 0; tok < n; tok += 6) {
            dsr1_matmul(pool, &m.w, x + tok * cols, cols, one, rows, 1, DSR1_ACT_BF16);
            CHECKF(!memcmp(one, y + tok * rows, (size_t)rows * 4), "n=%d: token %d alone differs", n, tok);
        }
    }
    dsr1_pool_free(pool);
    free(x);
    free(y);
    free(port);
    free(one);
    dsr1_test_mat_free(&m);
}

/* FP8 in BF16 mode through whole 128-row scale blocks (one thread: tasks
 * of whole blocks, each in two 64-row panels, plus a ragged block), two
 * column chunks and a partial column block, 6-token tiles and a ragged
 * one: bit-identical to the portable kernel and to each token alone. */
DSR1_TEST(kernels_fp8_bf16_blocks)
{
    if (!dsr1_mm_avx512_usable() && !dsr1_mm_avx2_usable())
        DSR1_SKIP("no AVX-512 BF16/VNNI kernels on this CPU: %s", "dsr1_matmul would be the portable kernel compared with itself");
    int64_t rows = 272, cols = 2100;
    int n = 9;
    tmat m = dsr1_test_mat(DSR1_T_FP8_E4M3, rows, cols, 0, 31);
    float *x = make_x(n, cols + 5, 32);
    float *y = malloc((size_t)(n * rows) * 4), *port = malloc((size_t)(n * rows) * 4);
    float *one = malloc((size_t)rows * 4);
    dsr1_pool *pool = NULL;
    dsr1_error err = {0};
    CHECK_OK(dsr1_pool_create(&pool, 1, &err), &err);
    dsr1_matmul(pool, &m.w, x, cols + 5, y, rows, n, DSR1_ACT_BF16);
    dsr1_matmul_with(NULL, &m.w, x, cols + 5, port, rows, n, DSR1_ACT_BF16, DSR1_MM_PORTABLE);
    CHECKF(!memcmp(y, port, (size_t)(n * rows) * 4), "fp8 blocks differ from portable");
    for (int tok = 0; tok < n; tok += 4) {
        dsr1_matmul(pool, &m.w, x + tok * (cols + 5), cols + 5, one, rows, 1, DSR1_ACT_BF16);
        CHECKF(!memcmp(one, y + tok * rows, (size_t)rows * 4), "token %d alone differs", tok);
    }
    dsr1_pool_free(pool);
    free(x);
    free(y);
    free(port);
    free(one);
    dsr1_test_mat_free(&m);
}

/* W8A8 activations (vector preparation) on the awkward values: an all-zero
 * token, rint ties (amax 127: x * 127/amax is x itself), denormals, odd
 * cols: the same bits as the portable kernel, per-row and grouped scales. */
DSR1_TEST(kernels_int8_act_special_values)
{
    if (!dsr1_mm_avx512_usable() && !dsr1_mm_avx2_usable())
        DSR1_SKIP("no AVX-512 BF16/VNNI kernels on this CPU: %s", "dsr1_matmul would be the portable kernel compared with itself");
    static const float ties[] = {127.0f, 2.5f, -3.5f, 0.5f, -0.5f, 1.5f, -126.5f, 1e-40f, -0.0f};
    for (int variant = 0; variant < 2; variant++) {
        int64_t rows = 40, cols = variant ? 192 : 301, ldx = cols + 7;
        int n = 5;
        tmat m = dsr1_test_mat(DSR1_T_INT8, rows, cols, variant, 41);
        float *x = make_x(n, ldx, 42);
        for (int64_t c = 0; c < ldx; c++) {
            x[c] = 0.0f;
            x[ldx + c] = ties[c % (sizeof ties / sizeof *ties)];
        }
        float *y = malloc((size_t)(n * rows) * 4), *port = malloc((size_t)(n * rows) * 4);
        dsr1_matmul(NULL, &m.w, x, ldx, y, rows, n, DSR1_ACT_INT8);
        dsr1_matmul_with(NULL, &m.w, x, ldx, port, rows, n, DSR1_ACT_INT8, DSR1_MM_PORTABLE);
        CHECKF(!memcmp(y, port, (size_t)(n * rows) * 4), "%s: W8A8 differs from portable", m.what);
        free(x);
        free(y);
        free(port);
        dsr1_test_mat_free(&m);
    }
}

/* ---- INT4 x INT8 (W4A8) ------------------------------------------------------------- */

/* The integer kernels (W4A8, W8A8) against the portable kernel on m, bit
 * for bit, for each n of ns: 1 thread, the pool's threads, and every 13th
 * token alone against its row in the batch. x: 600 tokens, stride ldx. */
static void int_matches_portable(dsr1_test_ctx *t, const tmat *m, const float *x, int64_t ldx,
                                 const int *ns, int nn, dsr1_pool *pool, const char *kind)
{
    int64_t rows = m->w.rows, cols = m->w.cols;
    size_t ybytes = (size_t)600 * (size_t)rows * 4;
    float *y = malloc(ybytes), *port = malloc(ybytes), *one = malloc((size_t)rows * 4);
    for (int ni = 0; ni < nn; ni++) {
        int n = ns[ni];
        dsr1_matmul_with(NULL, &m->w, x, ldx, port, rows, n, DSR1_ACT_INT8, DSR1_MM_PORTABLE);
        dsr1_matmul(NULL, &m->w, x, ldx, y, rows, n, DSR1_ACT_INT8);
        CHECKF(!memcmp(y, port, (size_t)n * (size_t)rows * 4),
               "%s %lldx%lld n=%d, 1 thread: %s differs from portable", m->what, (long long)rows,
               (long long)cols, n, kind);
        dsr1_matmul(pool, &m->w, x, ldx, y, rows, n, DSR1_ACT_INT8);
        CHECKF(!memcmp(y, port, (size_t)n * (size_t)rows * 4),
               "%s %lldx%lld n=%d: %s differs from portable", m->what, (long long)rows,
               (long long)cols, n, kind);
        int bad = 0;
        for (int tok = 0; tok < n; tok += 13) {
            dsr1_matmul(NULL, &m->w, x + tok * ldx, ldx, one, rows, 1, DSR1_ACT_INT8);
            bad += memcmp(one, y + tok * rows, (size_t)rows * 4) != 0;
        }
        CHECKF(!bad, "%s %lldx%lld n=%d: %d tokens alone differ from in the batch", m->what,
               (long long)rows, (long long)cols, n, bad);
    }
    free(y);
    free(port);
    free(one);
}

/* W4A8 on the INT4 layouts (groups of 32 with F16 scales, 128 with BF16
 * and with F16, convert's), odd rows, cols with a ragged last 128-column
 * block (g32: 32, 64 or 96 columns of it) and several 512-column chunks,
 * n = 1 (the one-token kernels: a row at a time in 16-group blocks, here
 * 5, 34 = 2 blocks + 2 and 18 groups; past W4R_MAXC columns, 257 groups,
 * 16 rows side by side), 2, 3, 4, 5, 7, 8 (the register GEMV), 9, 64, 600
 * (the code panel: ragged 6-token tiles, two token blocks) on 2 threads
 * (16-row tasks; one token also with the pool's hwpf set, the row GEMV
 * without software prefetch) and on 1 (one task: 32-row panels, a ragged
 * last one):
 * the AVX-512 kernel gives the portable kernel's bits, and every 13th
 * token alone (1 thread) gives its bits in the batch. */
DSR1_TEST(kernels_int4_w4a8_matches_portable)
{
    if (!dsr1_mm_avx512_usable() && !dsr1_mm_avx2_usable())
        DSR1_SKIP("no AVX-512 BF16/VNNI kernels on this CPU: %s", "dsr1_matmul would be the portable kernel compared with itself");
    static const int ns[] = {1, 2, 3, 4, 5, 7, 8, 9, 64, 600};
    static const int64_t shapes[][3] = {/* variant, rows, cols */
                                        {0, 37, 224}, {0, 21, 4160}, {1, 45, 640}, {1, 19, 4352},
                                        {0, 50, 1120}, {2, 23, 2304}, {2, 3, 32896}};
    dsr1_pool *pool = NULL;
    dsr1_error err = {0};
    CHECK_OK(dsr1_pool_create(&pool, 2, &err), &err);
    for (int si = 0; si < 7; si++) {
        int variant = (int)shapes[si][0];
        int64_t rows = shapes[si][1], cols = shapes[si][2], ldx = cols + 5;
        tmat m = dsr1_test_mat(DSR1_T_INT4, rows, cols, variant, 61 + (uint64_t)si);
        float *x = make_x(600, ldx, 62 + (uint64_t)si);
        int_matches_portable(t, &m, x, ldx, ns, 10, pool, "W4A8");
        /* one token without the row GEMV's software prefetch (the decoder's
         * pftune choice): the same bits */
        dsr1_pool_set_hwpf(pool, 1);
        int_matches_portable(t, &m, x, ldx, ns, 1, pool, "W4A8 (hardware prefetch)");
        dsr1_pool_set_hwpf(pool, 0);
        free(x);
        dsr1_test_mat_free(&m);
    }
    dsr1_pool_free(pool);
}

/* int_matches_portable on INT8 matrices (one scale per row) of each shape
 * {rows, cols}, x with 3 columns of padding, on a pool of 2; seeds from seed. */
static void int8_shapes_match(dsr1_test_ctx *t, const int64_t (*shapes)[2], int nshapes,
                              const int *ns, int nn, uint64_t seed, const char *kind, int hwpf)
{
    dsr1_pool *pool = NULL;
    dsr1_error err = {0};
    CHECK_OK(dsr1_pool_create(&pool, 2, &err), &err);
    dsr1_pool_set_hwpf(pool, hwpf);
    CHECK_EQ_INT(dsr1_pool_hwpf(pool), hwpf);
    for (int si = 0; si < nshapes; si++) {
        int64_t rows = shapes[si][0], cols = shapes[si][1], ldx = cols + 3;
        tmat m = dsr1_test_mat(DSR1_T_INT8, rows, cols, 0, seed + 2 * (uint64_t)si);
        float *x = make_x(600, ldx, seed + 2 * (uint64_t)si + 1);
        int_matches_portable(t, &m, x, ldx, ns, nn, pool, kind);
        free(x);
        dsr1_test_mat_free(&m);
    }
    dsr1_pool_free(pool);
}

/* W8A8 with one scale per row, more than 4 tokens: tokens in lanes (16 to
 * 95 tokens), rows in lanes (more; both matmul_lanes_avx512.c, columns a
 * multiple of 64) and the lanes-as-columns panel (fewer, and other
 * columns) against the portable kernel, bit for bit: rows that leave a
 * ragged 32-row superblock or panel, a ragged 8-row tile and a half-empty
 * 16-row half (37, 45, 21), one and several 256- and 512-column chunks
 * with a ragged last one (192, 1600, 4160) and columns no multiple of 64
 * (200); n = 5, 7 (the panel), 16 (one token vector), 23, 24 (a last
 * vector of at most 8 tokens: the 256-bit tiles; 7 and 8 of them), 33,
 * 40 (two full vectors, then 1 or 8 tokens), 64, 95 (tokens in lanes; 15
 * in the last vector: a 512-bit one), 600 (rows in
 * lanes: two 512-token blocks, a ragged 6-token tile), 1 thread (one task)
 * and 2; every 13th token alone gives its bits in the batch. */
DSR1_TEST(kernels_int8_w8a8_lanes_matches_portable)
{
    if (!dsr1_mm_avx512_usable() && !dsr1_mm_avx2_usable())
        DSR1_SKIP("no AVX-512 BF16/VNNI kernels on this CPU: %s", "dsr1_matmul would be the portable kernel compared with itself");
    static const int ns[] = {5, 7, 16, 23, 24, 33, 40, 64, 95, 600};
    static const int64_t shapes[][2] = {{37, 192}, {45, 1600}, {21, 4160}, {40, 200}};
    int8_shapes_match(t, shapes, 4, ns, 10, 81, "W8A8", 0);
}

/* W8A8 with one scale per row, 3-8 tokens (gemv_int8_multi: row pairs over
 * 512-column chunks in 16-row panels; 3-4 tokens only on rows longer than
 * x's 8 KiB) against the portable kernel, bit for bit: a last chunk ending
 * in a masked step (2248), whole steps (4160: eight full chunks and one
 * 64-byte step), a row shorter than one vector
 * (40), odd rows (a lone row ends the panel: 37, 21), ragged panels. Rows
 * of at most 256 columns in whole 64-byte steps go to the lanes kernel
 * instead (MLA's per-head absorb, 128 columns): 128, 192, 256 and 64
 * columns, with ragged 32-row panels and a half-empty 16-row half (37,
 * 45, 21, 3). 1 thread and 2, every 13th token alone gives its bits. */
DSR1_TEST(kernels_int8_w8a8_batch_matches_portable)
{
    if (!dsr1_mm_avx512_usable() && !dsr1_mm_avx2_usable())
        DSR1_SKIP("no AVX-512 BF16/VNNI kernels on this CPU: %s", "dsr1_matmul would be the portable kernel compared with itself");
    static const int ns[] = {3, 4, 5, 6, 7, 8};
    static const int64_t shapes[][2] = {{37, 2248}, {45, 192}, {21, 4160}, {16, 40},
                                        {3, 64},    {37, 128}, {21, 256}};
    int8_shapes_match(t, shapes, 7, ns, 6, 97, "W8A8 batch GEMV", 0);
}

/* W8A8 with one scale per row, 1-4 tokens: the row-by-row GEMV (n <= 2,
 * or x up to 8 KiB) and gemv_int8_multi (3-4 tokens of long rows) against
 * the portable kernel, bit for bit: columns a multiple of the 256-byte
 * step (2048), of 64 but not 256 (192, 2112), none of 64 (200, 50: a
 * masked end, a row shorter than one vector), long rows (4160: n = 3, 4
 * in row pairs), rows that leave ragged 4-row tiles and tasks (37, 45, 21); 1
 * thread and 2, and every 13th token alone gives its bits in the batch.
 * Rows of at most 256 columns go four at a time (gemv_i8_short4: MLA's
 * per-head 512x128 absorb matrices): 128 and 256 columns in whole 64-byte
 * steps, 192, 200 and 50 with masked ends, 64 and 27 rows. Rows longer
 * than GEMV_LONG (8192) at 1-2 tokens go four at a time too
 * (gemv_i8_tile4): 8256 ends in a lone 64-byte step after the 128-byte
 * ones, 8300 in a masked one; 23 and 9 rows leave rows past the last
 * whole tile to the row loop. With and
 * without the row GEMV's software prefetch, and with four rows side by
 * side at every width over 256 columns (dsr1_pool_set_hwpf's DSR1_GEMV_*:
 * the decode-time choice of pftune.h), which must never change a bit. */
DSR1_TEST(kernels_int8_w8a8_gemv_matches_portable)
{
    if (!dsr1_mm_avx512_usable() && !dsr1_mm_avx2_usable())
        DSR1_SKIP("no AVX-512 BF16/VNNI kernels on this CPU: %s", "dsr1_matmul would be the portable kernel compared with itself");
    static const int ns[] = {1, 2, 3, 4};
    static const int64_t shapes[][2] = {{37, 2048}, {45, 192}, {21, 4160}, {40, 200},
                                        {13, 50},   {29, 2112}, {64, 128},  {27, 256},
                                        {23, 8256}, {9, 8300}};
    int8_shapes_match(t, shapes, 10, ns, 4, 91, "W8A8 GEMV", 0);
    int8_shapes_match(t, shapes, 10, ns, 4, 91, "W8A8 GEMV, hardware prefetch only", DSR1_GEMV_HWPF);
    int8_shapes_match(t, shapes, 10, ns, 4, 91, "W8A8 GEMV, four rows", DSR1_GEMV_I8T4);
    int8_shapes_match(t, shapes, 10, ns, 4, 91, "W8A8 GEMV, four rows, hardware prefetch only",
                      DSR1_GEMV_I8T4 | DSR1_GEMV_HWPF);
}

/* The W4A8 order of matmul_impl.h written out here from its text: x
 * quantised per token (s = amax/127, q = rint(x * (127/amax))), per group
 * the exact dot of (code - 8) with q, acc = fmaf((float)dot, s_w, acc) in
 * group order from 0, y = acc * s. Both kernels give exactly these bits
 * on both layouts, at n = 1 and 9 (the one-token kernel, the panel), with
 * scales and values spread over binades so any other order of the group
 * steps (lanes summed apart, groups reassociated) rounds differently. */
DSR1_TEST(kernels_int4_w4a8_group_order)
{
    enum { ROWS = 19, COLS = 1152, N = 9 };
    rng gen = {404};
    uint8_t *q = malloc(ROWS * COLS / 2);
    uint16_t *sc = malloc(ROWS * COLS / 32 * sizeof *sc);
    float *x = malloc(N * COLS * sizeof *x), *y = malloc(N * ROWS * sizeof *y);
    float *want = malloc(N * ROWS * sizeof *want);
    int8_t *xq = malloc(COLS);
    for (int i = 0; i < ROWS * COLS / 2; i++) q[i] = (uint8_t)(dsr1_test_frand(&gen, 0, 256));
    for (int i = 0; i < N * COLS; i++) x[i] = dsr1_test_frand(&gen, -1, 1) * (float)(1 + i % 7);
    for (int variant = 0; variant < 2; variant++) {
        int g = variant ? 128 : 32;
        for (int i = 0; i < ROWS * COLS / g; i++) {
            float f = dsr1_test_frand(&gen, 0.001f, 0.3f) * (float)(1 << (i % 9));
            sc[i] = variant ? dsr1_f32_to_bf16(f) : dsr1_f32_to_f16(f);
        }
        dsr1_wmat w = {.type = DSR1_T_INT4, .rows = ROWS, .cols = COLS, .data = q, .scale = sc,
                       .scale_type = variant ? DSR1_T_BF16 : DSR1_T_F16, .group = g};
        for (int tk = 0; tk < N; tk++) {
            float amax = 0.0f;
            for (int c = 0; c < COLS; c++) amax = fmaxf(amax, fabsf(x[tk * COLS + c]));
            for (int c = 0; c < COLS; c++) xq[c] = (int8_t)nearbyintf(x[tk * COLS + c] * (127.0f / amax));
            for (int r = 0; r < ROWS; r++) {
                float acc = 0.0f;
                for (int c0 = 0; c0 < COLS; c0 += g) {
                    int32_t dot = 0;
                    for (int c = c0; c < c0 + g; c++) {
                        uint8_t b = q[r * COLS / 2 + c / 2];
                        dot += ((c & 1 ? b >> 4 : b & 15) - 8) * xq[c];
                    }
                    acc = fmaf((float)dot, dsr1_wmat_scale(&w, r, c0), acc);
                }
                want[tk * ROWS + r] = acc * (amax / 127.0f);
            }
        }
        for (int k = 0; k < 2; k++) {
            if (k && !dsr1_mm_avx512_usable()) break;
            for (int n = 1; n <= N; n += N - 1) {
                dsr1_matmul_with(NULL, &w, x, COLS, y, ROWS, n, DSR1_ACT_INT8,
                                 k ? DSR1_MM_AVX512 : DSR1_MM_PORTABLE);
                int bad = 0;
                for (int i = 0; i < n * ROWS; i++) bad += memcmp(&want[i], &y[i], 4) != 0;
                CHECKF(bad == 0, "%s int4/g%d n=%d: %d of %d outputs not in the W4A8 order",
                       k ? "avx512" : "portable", g, n, bad, n * ROWS);
            }
        }
    }
    free(q);
    free(sc);
    free(x);
    free(y);
    free(want);
    free(xq);
}

/* The W4A8 arithmetic itself: with a one-hot token (x = v at column c)
 * xq is 127 there and 0 elsewhere, s_x = v / 127, so by matmul_impl.h
 * y = ((float)((q - 8) * 127) * s_w) * (v / 127) exactly (one lane, one
 * fma from 0, the other lanes 0), for every code q, both scale types,
 * every column of a step; BF16 mode (x rounded to bf16) would differ, as
 * v = 1 + 2^-12 is not a bf16. Every code 0..15 appears at both nibbles. */
DSR1_TEST(kernels_int4_w4a8_one_hot)
{
    enum { COLS = 256, ROWS = 8 };
    const float v = 1.0f + 0x1p-12f;
    for (int variant = 0; variant < 2; variant++) {
        uint8_t q[ROWS * COLS / 2];
        int g = variant ? 128 : 32;
        uint16_t sc[ROWS * COLS / 32];
        for (int i = 0; i < ROWS * COLS / 2; i++) q[i] = (uint8_t)((i * 7 + i / 16) & 0xff);
        for (int i = 0; i < ROWS * COLS / g; i++) {
            float f = 0.0123f * (float)(i % 5 + 1);
            sc[i] = variant ? dsr1_f32_to_bf16(f) : dsr1_f32_to_f16(f);
        }
        dsr1_wmat w = {.type = DSR1_T_INT4, .rows = ROWS, .cols = COLS, .data = q, .scale = sc,
                       .scale_type = variant ? DSR1_T_BF16 : DSR1_T_F16, .group = g};
        float *x = calloc((size_t)COLS * COLS, sizeof *x), *y = malloc((size_t)COLS * ROWS * 4);
        for (int c = 0; c < COLS; c++) x[c * COLS + c] = v;
        for (int k = 0; k < 2; k++) {
            if (k && !dsr1_mm_avx512_usable()) break;
            dsr1_matmul_with(NULL, &w, x, COLS, y, ROWS, COLS, DSR1_ACT_INT8,
                             k ? DSR1_MM_AVX512 : DSR1_MM_PORTABLE);
            int bad = 0;
            for (int c = 0; c < COLS; c++)
                for (int r = 0; r < ROWS; r++) {
                    uint8_t b = q[r * COLS / 2 + c / 2];
                    int code = (c & 1) ? b >> 4 : b & 15;
                    float d = (float)((code - 8) * 127) * dsr1_wmat_scale(&w, r, c);
                    float want = d * (v / 127.0f);
                    bad += memcmp(&want, &y[c * ROWS + r], 4) != 0;
                }
            CHECKF(bad == 0, "%s int4/g%d: %d of %d one-hot outputs not the W4A8 value",
                   k ? "avx512" : "portable", g, bad, COLS * ROWS);
        }
        free(x);
        free(y);
    }
}

/* ---- BF16 rows in lanes (the fast mode) ------------------------------------- */

/* The order dsr1_mm_rows_bf16_lanes_avx512 promises: one vdpbf16ps sequence
 * per row over its column pairs in order (acc += w[odd] x[odd], then
 * w[even] x[even], each a float32 rounding, denormals flushed), from 0. */
static float lanes_dp_mul(float a, float b)
{
    if (fpclassify(a) == FP_SUBNORMAL) a = copysignf(0.0f, a);
    if (fpclassify(b) == FP_SUBNORMAL) b = copysignf(0.0f, b);
    return a * b;
}

static float lanes_ftz(float a) { return fpclassify(a) == FP_SUBNORMAL ? copysignf(0.0f, a) : a; }

static float lanes_row_dot(const uint16_t *w, const float *x, int64_t cols)
{
    float acc = 0.0f;
    for (int64_t c = 0; c < cols; c += 2) {
        float wo = dsr1_bf16_to_f32(w[c + 1]), xo = dsr1_bf16_to_f32(dsr1_mm_to_bf16(x[c + 1]));
        float we = dsr1_bf16_to_f32(w[c]), xe = dsr1_bf16_to_f32(dsr1_mm_to_bf16(x[c]));
        acc = lanes_ftz(lanes_ftz(acc + lanes_dp_mul(wo, xo)) + lanes_dp_mul(we, xe));
    }
    return acc;
}

/* BF16 weights in the fast mode (DSR1_ACT_INT8_FAST) from
 * DSR1_MM_B16L_MIN_N tokens: exactly that order on every row and token
 * (so the same bits for any n, tiling or thread count), for ragged 32-row
 * blocks (45, 70 rows), several 256-column chunks and a ragged one (2112),
 * one chunk (96), token blocks of 512 and a ragged 6-token tile (25, 40,
 * 600), weights holding denormals and signed zeros, 1 and 2 threads;
 * fewer tokens keep the canonical order (the deterministic mode's bits);
 * the deterministic mode (DSR1_ACT_INT8) never takes it. Where the CPU has
 * AMX the kernel runs with the tiles kept out (their BF16 kernel has its
 * own order: test_amx.c). */
DSR1_TEST(kernels_bf16_lanes_fast_order)
{
    if (!dsr1_mm_avx512_usable())
        DSR1_SKIP("no AVX-512 BF16/VNNI kernels on this CPU: %s", "the fast mode keeps the canonical kernels");
    static const int64_t shapes[][2] = {{45, 2112}, {70, 96}, {33, 4096}};
    static const int ns[] = {24, 25, 40, 600};
    for (int th = 1; th <= 2; th++) {
        dsr1_pool *pool = NULL;
        dsr1_error err = {0};
        CHECK_OK(dsr1_pool_create(&pool, th, &err), &err);
        for (int si = 0; si < 3; si++) {
            int64_t rows = shapes[si][0], cols = shapes[si][1], ldx = cols + 3;
            tmat m = dsr1_test_mat(DSR1_T_BF16, rows, cols, 0, 90 + (uint64_t)si);
            uint16_t *wd = m.data;
            for (int64_t i = 0; i < rows * cols; i += 11) wd[i] = (uint16_t)(i % 2 ? 0x0003 : 0x8000);
            float *x = make_x(600, ldx, 91 + (uint64_t)si);
            float *y = malloc((size_t)600 * (size_t)rows * 4), *canon = malloc((size_t)600 * (size_t)rows * 4);
            for (size_t ni = 0; ni < sizeof ns / sizeof *ns; ni++) {
                int n = ns[ni], bad = 0;
                /* with AMX tiles kept out: on AMX the fast mode takes
                 * them from DSR1_MM_AMX_MIN_N tokens (test_amx.c) */
                dsr1_matmul_noamx(pool, &m.w, x, ldx, y, rows, n, DSR1_ACT_INT8_FAST);
                if (n < DSR1_MM_B16L_MIN_N) {
                    dsr1_matmul(pool, &m.w, x, ldx, canon, rows, n, DSR1_ACT_BF16);
                    CHECKF(!memcmp(y, canon, (size_t)n * (size_t)rows * 4),
                           "%lldx%lld n=%d: the fast mode left the canonical order below %d tokens",
                           (long long)rows, (long long)cols, n, DSR1_MM_B16L_MIN_N);
                    continue;
                }
                for (int tok = 0; tok < n; tok++)
                    for (int64_t r = 0; r < rows; r++) {
                        float want = lanes_row_dot(wd + r * cols, x + tok * ldx, cols), got = y[tok * rows + r];
                        bad += memcmp(&want, &got, 4) != 0 && !(isnan(want) && isnan(got));
                    }
                CHECKF(bad == 0, "%d threads, %lldx%lld n=%d: %d of %lld outputs are not the rows-in-lanes order",
                       th, (long long)rows, (long long)cols, n, bad, (long long)n * rows);
                /* the deterministic mode's W8A8 request stays canonical on BF16 */
                dsr1_matmul(pool, &m.w, x, ldx, y, rows, n, DSR1_ACT_INT8);
                dsr1_matmul_with(NULL, &m.w, x, ldx, canon, rows, n, DSR1_ACT_BF16, DSR1_MM_PORTABLE);
                CHECKF(!memcmp(y, canon, (size_t)n * (size_t)rows * 4),
                       "%lldx%lld n=%d: DSR1_ACT_INT8 on BF16 weights left the canonical order",
                       (long long)rows, (long long)cols, n);
            }
            free(x);
            free(y);
            free(canon);
            dsr1_test_mat_free(&m);
        }
        dsr1_pool_free(pool);
    }
}
