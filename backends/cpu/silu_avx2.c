/*
 * silu_avx2.c - silu_avx512.c's SwiGLU step for AVX2 machines (the Zen 3
 * and Haswell-to-Skylake client cores that matmul_avx2.c serves): 8
 * values a step, glibc's expf in four double lanes twice, the same bits
 * as the scalar loop. AVX2 has no two-register permute, so the table
 * entry comes by a gather. Steps holding an argument off glibc's main path
 * (expf_glibc.h) and the last n % 8 values take the scalar loop.
 */
#include "matmul_impl.h"
#include "expf_glibc.h"

#include <immintrin.h>

static inline __m256d pd_bits(uint64_t b) { return _mm256_castsi256_pd(_mm256_set1_epi64x((long long)b)); }

/* expf of 4 floats given as doubles: silu_avx512.c's exp8, 4 lanes. */
static inline __m128 exp4(__m256d xd)
{
    const __m256d invln2n = pd_bits(DSR1_EXP_INVLN2N), shift = pd_bits(DSR1_EXP_SHIFT);
    const __m256d kds = _mm256_fmadd_pd(invln2n, xd, shift);
    const __m256i ki = _mm256_castpd_si256(kds);
    const __m256d kd = _mm256_sub_pd(kds, shift);
    const __m256d r = _mm256_fmsub_pd(invln2n, xd, kd);
    const __m256i idx = _mm256_and_si256(ki, _mm256_set1_epi64x(31));
    const __m256i t = _mm256_add_epi64(_mm256_i64gather_epi64((const long long *)dsr1_exp_tab, idx, 8),
                                       _mm256_slli_epi64(ki, 47));
    const __m256d z = _mm256_fmadd_pd(r, pd_bits(DSR1_EXP_C0), pd_bits(DSR1_EXP_C1));
    const __m256d r2 = _mm256_mul_pd(r, r);
    __m256d y = _mm256_fmadd_pd(r, pd_bits(DSR1_EXP_C2), _mm256_set1_pd(1.0));
    y = _mm256_fmadd_pd(z, r2, y);
    return _mm256_cvtpd_ps(_mm256_mul_pd(y, _mm256_castsi256_pd(t)));
}

void dsr1_silu_mul_avx2(float *g, const float *u, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 gv = _mm256_loadu_ps(g + i);
        const __m256 x = _mm256_xor_ps(gv, _mm256_set1_ps(-0.0f)); /* -g, exact */
        const __m256i top = _mm256_and_si256(_mm256_srli_epi32(_mm256_castps_si256(x), 20), _mm256_set1_epi32(0x7ff));
        if (_mm256_movemask_epi8(_mm256_cmpgt_epi32(top, _mm256_set1_epi32(DSR1_EXP_TOP_MAX)))) {
            dsr1_silu_mul_ref(g + i, u + i, 8);
            continue;
        }
        const __m128 e0 = exp4(_mm256_cvtps_pd(_mm256_castps256_ps128(x)));
        const __m128 e1 = exp4(_mm256_cvtps_pd(_mm256_extractf128_ps(x, 1)));
        const __m256 e = _mm256_insertf128_ps(_mm256_castps128_ps256(e0), e1, 1);
        const __m256 s = _mm256_div_ps(gv, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
        _mm256_storeu_ps(g + i, _mm256_mul_ps(s, _mm256_loadu_ps(u + i)));
    }
    dsr1_silu_mul_ref(g + i, u + i, n - i);
}
