/*
 * cuda_host_check.cu - the part of the CUDA backend that can be checked
 * without a GPU: its number conversions, weight decoders, the activation
 * modes' rounding points and the MoE router are __host__ __device__
 * (backends/cuda/cuda_common.cuh, cuda_route.cuh), so this host program,
 * compiled by nvcc, runs the very functions the kernels run and compares
 * them bit for bit with the CPU's definitions (core/numeric.h,
 * backends/cpu/matmul_impl.h, the scalar dequantiser, core/moe.c).
 *
 * What this does not check: the kernels (launch shapes, reductions,
 * memory access), which need a device: tests/test_backend_ops.c covers
 * them on a GPU machine. Built by `make` when nvcc is found
 * (build/cuda-host-check); tests/e2e/cuda_host_check.sh runs it.
 * Prints "N checks passed" or the first failures, exit 1 on any.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cuda/cuda_route.cuh"

extern "C" {
#include "backends/cpu/matmul_impl.h"
#include "convert/quant.h"
#include "core/moe.h"
#include "core/numeric.h"
}

static long checks, failures;

static void expect(int ok, const char *what, double a, double b)
{
    checks++;
    if (ok) return;
    if (++failures <= 20) printf("FAIL %s: cuda %.9g, cpu %.9g\n", what, a, b);
}

static uint32_t fbits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* Same bits, or both NaN. */
static int same(float a, float b) { return fbits(a) == fbits(b) || (a != a && b != b); }

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 11);
}
static float frand(float lo, float hi) { return lo + (hi - lo) * (float)(rnd() % 1000003) / 1000003.0f; }

/* ---- conversions ---------------------------------------------------------------- */

static void check_conversions(void)
{
    for (uint32_t h = 0; h < 65536; h++) {
        expect(same(cu_f16_f32(h), dsr1_f16_to_f32((uint16_t)h)), "f16 decode", cu_f16_f32(h),
               dsr1_f16_to_f32((uint16_t)h));
        for (int k = 0; k < 8; k++) {
            uint32_t u = h << 16 | (k == 0 ? 0x8000u : k == 1 ? 0x7fffu : (rnd() & 0xffffu));
            float f;
            memcpy(&f, &u, 4);
            expect(cu_f32_bf16(f) == dsr1_f32_to_bf16(f), "bf16 round", f, f);
            expect(cu_f32_bf16_ftz(f) == dsr1_mm_to_bf16(f), "bf16 round (ftz)", f, f);
        }
    }
    for (uint32_t b = 0; b < 256; b++)
        expect(same(cu_fp8_f32_as<false>(b), dsr1_fp8e4m3_to_f32((uint8_t)b)), "e4m3 decode",
               cu_fp8_f32_as<false>(b), dsr1_fp8e4m3_to_f32((uint8_t)b));
    for (int i = 0; i < 200000; i++) {
        float f = i < 1000 ? ldexpf((float)(i - 500), -12) : frand(-500.0f, 500.0f) * ldexpf(1.0f, -(int)(rnd() % 14));
        expect(cu_f32_fp8_as<false>(f) == dsr1_f32_to_fp8e4m3(f), "e4m3 encode", f, f);
        /* fnuz: the stored byte read as fnuz, times the doubled scale, is
         * the fn value (the HIP upload's conversion is exact) */
        float fn = dsr1_fp8e4m3_to_f32((uint8_t)cu_f32_fp8_as<false>(f));
        float nz = cu_fp8_f32_as<true>(cu_f32_fp8_as<true>(f)) * 2.0f;
        expect(fn == nz, "e4m3fnuz encode", nz, fn);
    }
    for (uint32_t b = 0; b < 256; b++) {
        if ((b & 0x7f) == 0x7f) continue; /* fn NaN codes */
        float s = 0.0123f;
        uint32_t c = b == 0x80 ? 0 : b;
        expect(dsr1_fp8e4m3_to_f32((uint8_t)b) * s == cu_fp8_f32_as<true>(c) * (s * 2.0f),
               "fn -> fnuz upload", cu_fp8_f32_as<true>(c) * (s * 2.0f), dsr1_fp8e4m3_to_f32((uint8_t)b) * s);
    }
}

/* ---- weights and rounding points ------------------------------------------------- */

typedef struct qmat {
    dsr1_wmat w;
    void *data, *scale;
} qmat;

/* A random rows x cols matrix quantised to `type` by convert/quant.h. */
static qmat make(dsr1_type type, int64_t rows, int64_t cols, int group)
{
    qmat q;
    memset(&q, 0, sizeof q);
    float *src = (float *)malloc((size_t)(rows * cols) * 4);
    for (int64_t i = 0; i < rows * cols; i++) src[i] = frand(-2.0f, 2.0f) * (i % 7 == 0 ? 30.0f : 1.0f);
    q.w.type = type;
    q.w.rows = rows;
    q.w.cols = cols;
    q.w.group = group;
    q.w.scale_type = DSR1_T_F32;
    if (type == DSR1_T_F32) {
        q.data = src;
        src = NULL;
    } else if (type == DSR1_T_BF16 || type == DSR1_T_F16) {
        q.data = malloc((size_t)(rows * cols) * 2);
        for (int64_t r = 0; r < rows; r++)
            (type == DSR1_T_BF16 ? dsr1_quant_bf16_row : dsr1_quant_f16_row)(src + r * cols, cols,
                                                                            (uint16_t *)q.data + r * cols);
    } else if (type == DSR1_T_FP8_E4M3) {
        int64_t nb = (cols + group - 1) / group;
        q.data = malloc((size_t)(rows * cols));
        q.scale = malloc((size_t)(((rows + group - 1) / group) * nb) * 4);
        for (int64_t r0 = 0; r0 < rows; r0 += group)
            dsr1_quant_fp8_band(src + r0 * cols, rows - r0 < group ? rows - r0 : group, cols, group,
                                (uint8_t *)q.data + r0 * cols, (float *)q.scale + (r0 / group) * nb);
    } else if (type == DSR1_T_INT8) {
        int64_t ns = group ? cols / group : 1;
        q.data = malloc((size_t)(rows * cols));
        q.scale = malloc((size_t)(rows * ns) * 4);
        for (int64_t r = 0; r < rows; r++)
            dsr1_quant_int8_row(src + r * cols, cols, group, (int8_t *)q.data + r * cols, (float *)q.scale + r * ns);
    } else {
        q.data = malloc((size_t)(rows * cols / 2));
        q.scale = malloc((size_t)(rows * (cols / group)) * 2);
        q.w.scale_type = DSR1_T_F16;
        for (int64_t r = 0; r < rows; r++)
            dsr1_quant_int4_row(src + r * cols, cols, group, (uint8_t *)q.data + r * (cols / 2),
                                (uint16_t *)q.scale + r * (cols / group));
    }
    free(src);
    q.w.data = q.data;
    q.w.scale = q.scale;
    return q;
}

static cu_wmat as_cu(const dsr1_wmat *w)
{
    cu_wmat c;
    memset(&c, 0, sizeof c);
    c.type = (int)w->type;
    c.rows = w->rows;
    c.cols = w->cols;
    c.data = w->data;
    c.scale = w->scale;
    c.scale_type = (int)w->scale_type;
    c.group = w->group;
    c.count = 1;
    return c;
}

/* F32 mode: the dequantised value; BF16 mode: the CPU fast path's w' and
 * x' (matmul.c row_bf16 / bf16_x). */
static void check_weights(dsr1_type type, int64_t rows, int64_t cols, int group)
{
    qmat q = make(type, rows, cols, group);
    cu_wmat c = as_cu(&q.w);
    float *ref = (float *)malloc((size_t)cols * 4);
    for (int64_t r = 0; r < rows; r++) {
        dsr1_wmat_dequant_span(&q.w, r, 0, cols, ref);
        for (int64_t k = 0; k < cols; k++) {
            float x = frand(-3.0f, 3.0f), wv, xv;
            expect(same(cu_wdeq(c, c.data, c.scale, r, k), ref[k]), "dequantised weight",
                   cu_wdeq(c, c.data, c.scale, r, k), ref[k]);
            scalar_pair<CU_ACT_F32>(c, (const uint8_t *)c.data, c.scale, r, k, x, &wv, &xv);
            expect(same(wv, ref[k]) && same(xv, x), "F32 mode pair", wv, ref[k]);
            scalar_pair<CU_ACT_BF16>(c, (const uint8_t *)c.data, c.scale, r, k, x, &wv, &xv);
            float cw, cx;
            if (type == DSR1_T_FP8_E4M3) {
                cw = dsr1_bf16_to_f32(dsr1_mm_fp8_bf16(((const uint8_t *)q.data)[r * cols + k]));
                cx = dsr1_bf16_to_f32(dsr1_mm_to_bf16(x * dsr1_wmat_scale(&q.w, r, k)));
            } else {
                cw = dsr1_bf16_to_f32(dsr1_mm_to_bf16(ref[k]));
                cx = dsr1_bf16_to_f32(dsr1_mm_to_bf16(x));
            }
            expect(same(wv, cw), "BF16 mode weight", wv, cw);
            expect(same(xv, cx), "BF16 mode x", xv, cx);
        }
    }
    free(ref);
    free(q.data);
    free(q.scale);
}

/* The vector kernel's pack decoders against the element decoder. */
template <int TYPE>
static void check_packs(int64_t rows, int64_t cols, int group)
{
    qmat q = make((dsr1_type)TYPE, rows, cols, group);
    cu_wmat c = as_cu(&q.w);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t p = 0; p < cols / 8; p++) {
            float v[8], s = cu_wscale(c, c.scale, r, 8 * p);
            const uint8_t *d = (const uint8_t *)c.data;
            for (int i = 0; i < 8; i++) v[i] = cu_wraw(c, d, r, 8 * p + i);
            float f32[8], b16[8];
            memcpy(f32, v, sizeof v);
            memcpy(b16, v, sizeof v);
            mode_weights<TYPE, CU_ACT_F32>(f32, s);
            mode_weights<TYPE, CU_ACT_BF16>(b16, s);
            for (int i = 0; i < 8; i++) {
                float wv, xv;
                scalar_pair<CU_ACT_F32>(c, d, c.scale, r, 8 * p + i, 1.0f, &wv, &xv);
                expect(same(f32[i], wv), "pack F32 weight", f32[i], wv);
                scalar_pair<CU_ACT_BF16>(c, d, c.scale, r, 8 * p + i, 1.0f, &wv, &xv);
                expect(same(b16[i], wv), "pack BF16 weight", b16[i], wv);
            }
        }
    free(q.data);
    free(q.scale);
}

/* ---- routing ------------------------------------------------------------------------ */

static void check_route(dsr1_moe_params p, int with_bias, int trials)
{
    int E = p.n_experts, K = p.topk, G = p.n_group > 0 ? p.n_group : 1;
    float *lg = (float *)malloc((size_t)E * 4), *bias = (float *)malloc((size_t)E * 4);
    float *scr = (float *)malloc((size_t)(2 * E + G) * 4), *scr2 = (float *)malloc((size_t)(2 * E + G) * 4);
    int32_t ia[64], ib[64];
    float wa[64], wb[64];
    cu_moe_params cp = {E, K, G, p.topk_group > 0 ? p.topk_group : 1, p.scoring == DSR1_SCORE_SIGMOID,
                        (int)p.method, p.family == DSR1_FAMILY_V3, p.norm_topk_prob, p.routed_scaling_factor};
    for (int t = 0; t < trials; t++) {
        for (int e = 0; e < E; e++) {
            lg[e] = frand(-4.0f, 4.0f);
            bias[e] = frand(-0.1f, 0.1f);
        }
        if (t % 3 == 0) lg[rnd() % E] = lg[rnd() % E]; /* ties */
        dsr1_moe_route(&p, lg, with_bias ? bias : NULL, ia, wa, scr);
        cu_route_token(cp, lg, with_bias ? bias : NULL, ib, wb, scr2);
        for (int k = 0; k < K; k++) {
            expect(ia[k] == ib[k], "routed expert", ib[k], ia[k]);
            expect(same(wa[k], wb[k]), "routing weight", wb[k], wa[k]);
        }
    }
    lg[1] = NAN;
    cu_route_token(cp, lg, NULL, ib, wb, scr2);
    expect(ib[0] == -1 && wb[0] != wb[0], "non-finite logit gives -1", ib[0], -1);
    free(lg);
    free(bias);
    free(scr);
    free(scr2);
}

static void check_routes(void)
{
    dsr1_moe_params v3 = {256, 8, 8, 4, DSR1_SCORE_SIGMOID, DSR1_TOPK_NOAUX_TC, DSR1_FAMILY_V3, 1, 2.5f};
    check_route(v3, 1, 2000);
    v3.norm_topk_prob = 0;
    check_route(v3, 1, 500);
    dsr1_moe_params small = {16, 3, 4, 2, DSR1_SCORE_SIGMOID, DSR1_TOPK_NOAUX_TC, DSR1_FAMILY_V3, 1, 1.0f};
    check_route(small, 1, 2000);
    dsr1_moe_params v2 = {160, 6, 8, 3, DSR1_SCORE_SOFTMAX, DSR1_TOPK_GROUP_LIMITED_GREEDY, DSR1_FAMILY_V2, 0, 16.0f};
    check_route(v2, 0, 1000);
    dsr1_moe_params lite = {64, 6, 1, 1, DSR1_SCORE_SOFTMAX, DSR1_TOPK_GREEDY, DSR1_FAMILY_V2, 0, 1.0f};
    check_route(lite, 0, 1000);
    lite.norm_topk_prob = 1;
    check_route(lite, 0, 1000);
    lite.topk = 1;
    check_route(lite, 0, 500);
}

int main(void)
{
    check_conversions();
    /* odd shapes: rows past a block, columns not a multiple of 64 */
    check_weights(DSR1_T_F32, 5, 40, 0);
    check_weights(DSR1_T_F16, 5, 40, 0);
    check_weights(DSR1_T_BF16, 5, 40, 0);
    check_weights(DSR1_T_FP8_E4M3, 130, 200, 128);
    check_weights(DSR1_T_INT8, 7, 96, 0);
    check_weights(DSR1_T_INT8, 7, 96, 32);
    check_weights(DSR1_T_INT4, 3, 256, 128);
    check_weights(DSR1_T_INT4, 3, 96, 32);
    check_packs<CU_T_F32>(3, 64, 0);
    check_packs<CU_T_BF16>(3, 64, 0);
    check_packs<CU_T_F16>(3, 64, 0);
    check_packs<CU_T_FP8>(130, 256, 128);
    check_packs<CU_T_INT8>(3, 96, 32);
    check_packs<CU_T_INT4>(3, 256, 128);
    check_routes();
    if (failures) {
        printf("%ld of %ld checks failed\n", failures, checks);
        return 1;
    }
    printf("%ld checks passed\n", checks);
    return 0;
}
