/*
 * prep_avx512.c - the AVX-512 halves of two small jobs matmul.c does around
 * the kernels: activations in the compute mode's form (bf16 rows, W8A8
 * codes per token or per group, each the portable code's bits exactly)
 * and the compute-peak probes behind `dsr1 bench kernels`' %peak column.
 * Apart from matmul_avx512.c (the kernels) because none of it touches a
 * weight.
 */
#include "matmul_impl.h"

#include <immintrin.h>

void dsr1_mm_bf16_rows_avx512(const float *x, int64_t ldx, int n, int64_t cols, uint16_t *xb,
                              int64_t ldxb)
{
    for (int t = 0; t < n; t++) {
        const float *src = x + t * ldx;
        uint16_t *o = xb + t * ldxb;
        for (int64_t c = 0; c < ldxb; c += 32) {
            int64_t m = cols - c;
            __mmask16 m0 = m >= 16 ? 0xffff : m > 0 ? (__mmask16)((1u << m) - 1) : 0;
            __mmask16 m1 = m >= 32 ? 0xffff : m > 16 ? (__mmask16)((1u << (m - 16)) - 1) : 0;
            __m512 lo = _mm512_maskz_loadu_ps(m0, src + c), hi = _mm512_maskz_loadu_ps(m1, src + c + 16);
            _mm512_storeu_si512(o + c, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
        }
    }
}

/* len values of src (zero from len up to padded, a multiple of 16) as int8
 * with one scale: amax of |x| (NaN ignored, as fmaxf does: vmaxps returns
 * its second operand when either is NaN), then q = clamp(rint(x * (127 /
 * amax)), -127, 127) and the sum of q. The products and the rounding (to
 * nearest even) are matmul.c's quant_span exactly. */
static void quant_span_avx512(const float *src, int64_t len, int64_t padded, int8_t *o, float *scale,
                              int32_t *sum_out)
{
    const __m512 lim = _mm512_set1_ps(127.0f), nlim = _mm512_set1_ps(-127.0f);
    __m512 am = _mm512_setzero_ps();
    for (int64_t c = 0; c < len; c += 16) {
        __mmask16 m = len - c >= 16 ? 0xffff : (__mmask16)((1u << (len - c)) - 1);
        am = _mm512_max_ps(_mm512_abs_ps(_mm512_maskz_loadu_ps(m, src + c)), am);
    }
    float amax = _mm512_reduce_max_ps(am);
    float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
    __m512 vinv = _mm512_set1_ps(inv);
    __m512i sum = _mm512_setzero_si512();
    for (int64_t c = 0; c < padded; c += 16) {
        int64_t left = len - c;
        __mmask16 m = left >= 16 ? 0xffff : left > 0 ? (__mmask16)((1u << left) - 1) : 0;
        __m512 q = _mm512_roundscale_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(m, src + c), vinv),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        /* q > 127 ? 127 : q < -127 ? -127 : q, NaN kept (converts to 0
         * below, as the scalar cast does on x86) */
        q = _mm512_mask_mov_ps(q, _mm512_cmp_ps_mask(q, lim, _CMP_GT_OQ), lim);
        q = _mm512_mask_mov_ps(q, _mm512_cmp_ps_mask(q, nlim, _CMP_LT_OQ), nlim);
        __m512i qi = _mm512_cvttps_epi32(q);
        _mm_storeu_si128((__m128i *)(o + c), _mm512_cvtepi32_epi8(qi));
        sum = _mm512_add_epi32(sum, _mm512_cvtepi8_epi32(_mm512_cvtepi32_epi8(qi)));
    }
    *scale = amax / 127.0f;
    *sum_out = _mm512_reduce_add_epi32(sum);
}

/* W8A8 activations, token by token (quant_span_avx512 over the row). */
void dsr1_mm_int8_rows_avx512(const float *x, int64_t ldx, int n, int64_t cols, int8_t *xq,
                              int64_t ldxq, float *xs, int32_t *xsum)
{
    for (int t = 0; t < n; t++) quant_span_avx512(x + t * ldx, cols, ldxq, xq + t * ldxq, xs + t, xsum + t);
}

/* Per DSR1_MM_XG columns; the last group also zeroes the padding. */
void dsr1_mm_int8_groups_avx512(const float *x, int64_t ldx, int n, int64_t cols, int8_t *xq,
                                int64_t ldxq, float *xs, int32_t *xsum, int64_t ldg)
{
    for (int t = 0; t < n; t++)
        for (int64_t g = 0; g < ldg; g++) {
            const int64_t c = g * DSR1_MM_XG, len = cols - c < DSR1_MM_XG ? cols - c : DSR1_MM_XG;
            quant_span_avx512(x + t * ldx + c, len, g == ldg - 1 ? ldxq - c : DSR1_MM_XG,
                              xq + t * ldxq + c, xs + t * ldg + g, xsum + t * ldg + g);
        }
}

/* ---- peak ------------------------------------------------------------------------ */

/* 24 accumulators: enough independent chains to cover the latency of any
 * of the three instructions; one function per instruction so only its own
 * 24 vectors are live (two sets would not fit in 32 registers). */
#define PEAK_CHAINS 24
static float peak_f32(int64_t iters, int bf)
{
    __m512 f[PEAK_CHAINS];
    for (int i = 0; i < PEAK_CHAINS; i++) f[i] = _mm512_set1_ps((float)i * 1e-3f);
    volatile float one = 1.0f, tiny = 1e-7f; /* opaque: nothing is folded */
    __m512 a = _mm512_set1_ps(one), b = _mm512_set1_ps(tiny);
    for (int64_t it = 0; it < iters; it++) {
        if (bf) {
#pragma GCC unroll 24
            for (int i = 0; i < PEAK_CHAINS; i++)
                f[i] = _mm512_dpbf16_ps(f[i], (__m512bh)_mm512_castps_si512(a),
                                        (__m512bh)_mm512_castps_si512(b));
        } else {
#pragma GCC unroll 24
            for (int i = 0; i < PEAK_CHAINS; i++) f[i] = _mm512_fmadd_ps(a, b, f[i]);
        }
    }
    __m512 s = f[0];
    for (int i = 1; i < PEAK_CHAINS; i++) s = _mm512_add_ps(s, f[i]);
    return _mm512_reduce_add_ps(s);
}

/* 16 chains for vpdpbusd: with 24, gcc 12 spills and copies them (its
 * pattern for the instruction); 16 still cover 2 per cycle x latency. */
#define PEAK_I8_CHAINS 16
static int32_t peak_i8(int64_t iters)
{
    __m512i q[PEAK_I8_CHAINS];
    for (int i = 0; i < PEAK_I8_CHAINS; i++) q[i] = _mm512_set1_epi32(i);
    /* Operands read through volatile: opaque to the compiler without an
     * asm in the loop (which makes gcc 12 copy every accumulator). */
    volatile char one = 1, two = 2;
    __m512i a = _mm512_set1_epi8(one), b = _mm512_set1_epi8(two);
    for (int64_t it = 0; it < iters; it++) {
#pragma GCC unroll 16
        for (int i = 0; i < PEAK_I8_CHAINS; i++) q[i] = _mm512_dpbusd_epi32(q[i], a, b);
    }
    __m512i s = q[0];
    for (int i = 1; i < PEAK_I8_CHAINS; i++) s = _mm512_add_epi32(s, q[i]);
    return _mm512_reduce_add_epi32(s);
}

uint64_t dsr1_mm_peak_avx512(dsr1_act act, int64_t iters)
{
    volatile float sink = act == DSR1_ACT_INT8 ? (float)peak_i8(iters)
                                               : peak_f32(iters, act == DSR1_ACT_BF16);
    (void)sink;
    if (act == DSR1_ACT_INT8) return (uint64_t)iters * PEAK_I8_CHAINS * 64;
    return (uint64_t)iters * PEAK_CHAINS * (act == DSR1_ACT_F32 ? 16u : 32u);
}
