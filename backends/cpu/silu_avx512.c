/*
 * silu_avx512.c - SwiGLU's g = silu(g) * u = g / (1 + expf(-g)) * u, 16
 * values at a time, with the bits of the scalar loop (dsr1_silu_mul_ref).
 *
 * Why: the scalar loop calls libm's expf once per value and divides; in
 * a 512-token INT8 prefill of the R1-shape file (18432 + 8 x 2048 values
 * per token and MoE layer) that loop and expf were ~2.5% of the samples
 * (perf, Zen 4, 2 threads). Per value, one thread, 64K values in L2 (Zen
 * 4): scalar 3.52 ns, silu_avx2.c 0.88, this 0.65.
 *
 * Same bits, not merely close: the value must not depend on which kernel
 * path (AVX-512, AVX2, portable, oneDNN's prefill) or batch produced it,
 * and the deterministic mode promises that. So exp16 below is glibc's
 * expf (2.28 and later; the FMA build every AVX-512 machine runs) step for
 * step in double lanes: x / ln2 * 32 = k + r, 2^(k/32) from a 32-entry
 * table with k's high bits added to its exponent, a degree-3 polynomial
 * in r, one rounding to float at the end. The constants are that
 * algorithm's (its data table, read from Debian 12's libm: silu_exp.h). Lanes where
 * glibc leaves that path (|x| >= 88 as glibc's top12 test puts it: huge
 * arguments, infinities, NaN) make the whole vector take the scalar loop,
 * which calls expf itself. test_kernels compares the two bit for bit on
 * a sweep of every 97th float bit pattern plus the edges.
 */
#include "matmul_impl.h"
#include "silu_exp.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

typedef struct exp_consts {
    __m512d invln2n, shift, c0, c1, c2, one;
    __m512i t0, t1, t2, t3; /* the table, 8 entries each */
} exp_consts;

static inline __m512d pd_bits(uint64_t b) { return _mm512_castsi512_pd(_mm512_set1_epi64((long long)b)); }

static inline exp_consts exp_consts_load(void)
{
    return (exp_consts){.invln2n = pd_bits(DSR1_EXP_INVLN2N), .shift = pd_bits(DSR1_EXP_SHIFT),
                        .c0 = pd_bits(DSR1_EXP_C0), .c1 = pd_bits(DSR1_EXP_C1), .c2 = pd_bits(DSR1_EXP_C2),
                        .one = _mm512_set1_pd(1.0),
                        .t0 = _mm512_loadu_si512(dsr1_exp_tab), .t1 = _mm512_loadu_si512(dsr1_exp_tab + 8),
                        .t2 = _mm512_loadu_si512(dsr1_exp_tab + 16), .t3 = _mm512_loadu_si512(dsr1_exp_tab + 24)};
}

/* expf of 8 floats given as doubles (exact), on glibc's main path. The
 * operations and their fusing are those of glibc's __expf_fma: kd + shift
 * in one fma, r = x invln2n - kd in one (x invln2n is not rounded alone). */
static inline __m256 exp8(__m512d xd, const exp_consts *c)
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

/* Whether any of the lanes m of x leaves glibc's main path: top12 of |x|
 * above 0x42a (|x| >= 2^7 * 1.375 = 88, infinities and NaN included). */
static inline int off_path(__m512 x, __mmask16 m)
{
    const __m512i top = _mm512_and_si512(_mm512_srli_epi32(_mm512_castps_si512(x), 20), _mm512_set1_epi32(0x7ff));
    return _mm512_mask_cmpgt_epi32_mask(m, top, _mm512_set1_epi32(DSR1_EXP_TOP_MAX)) != 0;
}

void dsr1_silu_mul_avx512(float *g, const float *u, int64_t n)
{
    const exp_consts c = exp_consts_load();
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
        const __m512 gv = _mm512_maskz_loadu_ps(m, g + i);
        const __m512 x = _mm512_xor_ps(gv, _mm512_set1_ps(-0.0f)); /* -g, exact */
        if (off_path(x, m)) {
            dsr1_silu_mul_ref(g + i, u + i, n - i < 16 ? n - i : 16);
            continue;
        }
        const __m256 e0 = exp8(_mm512_cvtps_pd(_mm512_castps512_ps256(x)), &c);
        const __m256 e1 = exp8(_mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1))), &c);
        const __m512 e = _mm512_insertf32x8(_mm512_castps256_ps512(e0), e1, 1);
        const __m512 s = _mm512_div_ps(gv, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
        _mm512_mask_storeu_ps(g + i, m, _mm512_mul_ps(s, _mm512_maskz_loadu_ps(m, u + i)));
    }
}
