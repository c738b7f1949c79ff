/*
 * softmax_avx512.c - the fast mode's softmax rows with AVX-512 (the
 * naive MLA form, cpu_mla_naive.c, and the absorbed one, cpu_attention.c):
 * 16 exponentials per instruction sequence instead of one libm expf call
 * each. A 512-token R1 prefill computes 16.8 M of them per layer; libm's
 * expf and the scalar row were 4-5% of the prefill's samples (perf, INT8,
 * Zen 4).
 *
 * exp(x) = 2^n e^r with n = round(x / ln 2) and r = x - n ln 2 in two
 * parts (Cody and Waite), e^r = 1 + r + r^2 P(r) with Cephes expf's
 * degree-5 P: about 1 ulp from the true value, against libm's 0.5, which
 * the fast mode allows. The deterministic mode and the float32 path keep
 * dsr1_cpu_softmax_row's bits (scalar libm, the same on every machine):
 * the exact row at the end of this file computes them 16 at a time
 * (glibc's expf in double lanes, expf_avx512.h; the sum in the scalar
 * row's order). INT8 R1-shape file, `--deterministic`, prefill 1024, Zen
 * 4, 2 threads, alternated with the scalar row's build: 99.6 / 106.6 ->
 * 118.9 / 123.6 tok/s.
 */
#include <immintrin.h>
#include <math.h>

#include "cpu_backend.h"
#include "expf_avx512.h"

static inline __m512 exp16(__m512 x)
{
    x = _mm512_max_ps(x, _mm512_set1_ps(-104.0f)); /* e^-104 is 0 in float32 */
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    return _mm512_scalef_ps(p, n);
}

/* s[0..valid) in 16-lane steps, the last one masked. */
static inline __mmask16 lanes(int p, int valid)
{
    return valid - p >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (valid - p)) - 1);
}

void dsr1_cpu_softmax_row_avx512(float *s, int valid, int width, float scale)
{
    const __m512 vs = _mm512_set1_ps(scale);
    __m512 mx = _mm512_set1_ps(-INFINITY);
    for (int p = 0; p < valid; p += 16) {
        __mmask16 m = lanes(p, valid);
        __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, s + p), vs);
        _mm512_mask_storeu_ps(s + p, m, v);
        mx = _mm512_mask_max_ps(mx, m, mx, v);
    }
    const __m512 vmx = _mm512_set1_ps(_mm512_reduce_max_ps(mx));
    __m512d sum0 = _mm512_setzero_pd(), sum1 = _mm512_setzero_pd();
    for (int p = 0; p < valid; p += 16) {
        __mmask16 m = lanes(p, valid);
        __m512 e = _mm512_maskz_mov_ps(m, exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, s + p), vmx)));
        _mm512_mask_storeu_ps(s + p, m, e);
        sum0 = _mm512_add_pd(sum0, _mm512_cvtps_pd(_mm512_castps512_ps256(e)));
        sum1 = _mm512_add_pd(sum1, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(e), 1))));
    }
    const __m512 inv = _mm512_set1_ps((float)(1.0 / _mm512_reduce_add_pd(_mm512_add_pd(sum0, sum1))));
    for (int p = 0; p < valid; p += 16) {
        __mmask16 m = lanes(p, valid);
        _mm512_mask_storeu_ps(s + p, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, s + p), inv));
    }
    for (int p = valid; p < width; p++) s[p] = 0.0f;
}

/* ---- the deterministic row: dsr1_cpu_softmax_row's bits ------------------------- */

/* expf of 16 floats as glibc gives it: its main path (expf_avx512.h)
 * where |x| < 88 and, below that, down to its may-underflow threshold;
 * then its fixed results: 2^-149 below -0x1.9d1d9ep6 (__math_may_uflowf:
 * 0x1.4p-75f squared), 0 below -0x1.9fe368p6 (so at -inf), x + x for NaN.
 * A vector with a positive lane off the main path (x >= 88 or +inf, which
 * a softmax's s - max never is) calls libm lane by lane. */
static inline __m512 exp16_libm(__m512 x, const dsr1_exp_consts *c)
{
    const __mmask16 off = dsr1_exp_off_path(x);
    if (!off) return dsr1_exp16(x, c);
    const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    const __mmask16 neg = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_LT_OQ);
    if (off & ~nan & ~neg) {
        _Alignas(64) float v[16];
        _mm512_store_ps(v, x);
        for (int i = 0; i < 16; i++) v[i] = expf(v[i]);
        return _mm512_load_ps(v);
    }
    const __mmask16 uflow = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-0x1.9fe368p6f), _CMP_LT_OQ);
    const __mmask16 may = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-0x1.9d1d9ep6f), _CMP_LT_OQ) & ~uflow;
    /* the main path where it is taken; the other lanes computed on 0 */
    __m512 e = dsr1_exp16(_mm512_mask_mov_ps(x, nan | may | uflow, _mm512_setzero_ps()), c);
    e = _mm512_mask_mov_ps(e, may, _mm512_set1_ps(0x1p-149f));
    e = _mm512_mask_mov_ps(e, uflow, _mm512_setzero_ps());
    return _mm512_mask_add_ps(e, nan, x, x);
}

void dsr1_cpu_softmax_row_exact_avx512(float *s, int valid, int width, float scale)
{
    const dsr1_exp_consts c = dsr1_exp_consts_load();
    const __m512 vs = _mm512_set1_ps(scale);
    __m512 mv = _mm512_set1_ps(-INFINITY);
    for (int p = 0; p < valid; p += 16) {
        const __mmask16 m = lanes(p, valid);
        const __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, s + p), vs);
        _mm512_mask_storeu_ps(s + p, m, v);
        /* mx = v > mx ? v : mx, lane by lane (NaN never taken) */
        mv = _mm512_mask_mov_ps(mv, m & _mm512_cmp_ps_mask(v, mv, _CMP_GT_OQ), v);
    }
    _Alignas(64) float lane[16];
    _mm512_store_ps(lane, mv);
    float mx = -INFINITY;
    for (int i = 0; i < 16; i++) mx = lane[i] > mx ? lane[i] : mx;
    /* (a zero maximum's sign may differ from the scalar scan's: s - 0 and
     * s - (-0) are the same values, and 0 - (-0), 0 - 0, -0 - 0 all expf
     * to 1) */
    const __m512 vmx = _mm512_set1_ps(mx);
    for (int p = 0; p < valid; p += 16) {
        const __mmask16 m = lanes(p, valid);
        _mm512_mask_storeu_ps(s + p, m, exp16_libm(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, s + p), vmx), &c));
    }
    double sum = 0; /* in the scalar row's order: the same double */
    for (int p = 0; p < valid; p++) sum += s[p];
    const __m512 inv = _mm512_set1_ps((float)(1.0 / sum));
    for (int p = 0; p < valid; p += 16) {
        const __mmask16 m = lanes(p, valid);
        _mm512_mask_storeu_ps(s + p, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, s + p), inv));
    }
    for (int p = valid; p < width; p++) s[p] = 0.0f;
}
