/*
 * expf_avx512.h - glibc's expf (expf_glibc.h) in AVX-512 double lanes, for
 * the *_avx512.c files that must give libm's bits: the SwiGLU step
 * (silu_avx512.c) and the deterministic softmax row (softmax_avx512.c).
 * Static inline: include it only from files built with the AVX-512 flags.
 */
#ifndef DSR1_EXPF_AVX512_H
#define DSR1_EXPF_AVX512_H

#include <immintrin.h>

#include "expf_glibc.h"

typedef struct dsr1_exp_consts {
    __m512d invln2n, shift, c0, c1, c2, one;
    __m512i t0, t1, t2, t3; /* the table, 8 entries each */
} dsr1_exp_consts;

static inline __m512d dsr1_pd_bits(uint64_t b) { return _mm512_castsi512_pd(_mm512_set1_epi64((long long)b)); }

static inline dsr1_exp_consts dsr1_exp_consts_load(void)
{
    return (dsr1_exp_consts){
        .invln2n = dsr1_pd_bits(DSR1_EXP_INVLN2N), .shift = dsr1_pd_bits(DSR1_EXP_SHIFT),
        .c0 = dsr1_pd_bits(DSR1_EXP_C0), .c1 = dsr1_pd_bits(DSR1_EXP_C1), .c2 = dsr1_pd_bits(DSR1_EXP_C2),
        .one = _mm512_set1_pd(1.0),
        .t0 = _mm512_loadu_si512(dsr1_exp_tab), .t1 = _mm512_loadu_si512(dsr1_exp_tab + 8),
        .t2 = _mm512_loadu_si512(dsr1_exp_tab + 16), .t3 = _mm512_loadu_si512(dsr1_exp_tab + 24)};
}

/* expf of 8 floats given as doubles (exact), on glibc's main path. The
 * operations and their fusing are those of glibc's __expf_fma: kd + shift
 * in one fma, r = x invln2n - kd in one (x invln2n is not rounded alone). */
static inline __m256 dsr1_exp8(__m512d xd, const dsr1_exp_consts *c)
{
    const __m512d kds = _mm512_fmadd_pd(c->invln2n, xd, c->shift);
    const __m512i ki = _mm512_castpd_si512(kds);
    const __m512d kd = _mm512_sub_pd(kds, c->shift);
    const __m512d r = _mm512_fmsub_pd(c->invln2n, xd, kd);
    /* table entry ki mod 32: two 16-entry lookups, then bit 4 picks */
    const __m512i lo = _mm512_permutex2var_epi64(c->t0, ki, c->t1);
    const __m512i hi = _mm512_permutex2var_epi64(c->t2, ki, c->t3);
    const __mmask8 up = _mm512_test_epi64_mask(ki, _mm512_set1_epi64(16));
    const __m512i t = _mm512_add_epi64(_mm512_mask_blend_epi64(up, lo, hi), _mm512_slli_epi64(ki, 47));
    const __m512d z = _mm512_fmadd_pd(r, c->c0, c->c1);
    const __m512d r2 = _mm512_mul_pd(r, r);
    __m512d y = _mm512_fmadd_pd(r, c->c2, c->one);
    y = _mm512_fmadd_pd(z, r2, y);
    return _mm512_cvtpd_ps(_mm512_mul_pd(y, _mm512_castsi512_pd(t)));
}

/* expf of 16 floats on glibc's main path (no lane off it: the caller
 * checks), as two dsr1_exp8. */
static inline __m512 dsr1_exp16(__m512 x, const dsr1_exp_consts *c)
{
    const __m256 e0 = dsr1_exp8(_mm512_cvtps_pd(_mm512_castps512_ps256(x)), c);
    const __m256 e1 = dsr1_exp8(_mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1))), c);
    return _mm512_insertf32x8(_mm512_castps256_ps512(e0), e1, 1);
}

/* The lanes of x off glibc's main path: top12 of |x| above
 * DSR1_EXP_TOP_MAX (|x| >= 88, infinities and NaN). */
static inline __mmask16 dsr1_exp_off_path(__m512 x)
{
    const __m512i top = _mm512_and_si512(_mm512_srli_epi32(_mm512_castps_si512(x), 20), _mm512_set1_epi32(0x7ff));
    return _mm512_cmpgt_epi32_mask(top, _mm512_set1_epi32(DSR1_EXP_TOP_MAX));
}

#endif
