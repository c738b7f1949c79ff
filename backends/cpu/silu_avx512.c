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
 * and the deterministic mode promises that. So the exponential
 * (dsr1_exp16, expf_avx512.h) is glibc's expf (2.28 and later; the FMA
 * build every AVX-512 machine runs) step for step in double lanes: x /
 * ln2 * 32 = k + r, 2^(k/32) from a 32-entry table with k's high bits
 * added to its exponent, a degree-3 polynomial in r, one rounding to float
 * at the end. The constants are that algorithm's (its data table, read
 * from Debian 12's libm: expf_glibc.h). Lanes where glibc leaves that path (|x| >= 88 as glibc's top12 test puts it: huge
 * arguments, infinities, NaN) make the whole vector take the scalar loop,
 * which calls expf itself. test_kernels compares the two bit for bit on
 * a sweep of every 97th float bit pattern plus the edges.
 */
#include "matmul_impl.h"
#include "expf_avx512.h"

#include <immintrin.h>

void dsr1_silu_mul_avx512(float *g, const float *u, int64_t n)
{
    const dsr1_exp_consts c = dsr1_exp_consts_load();
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
        const __m512 gv = _mm512_maskz_loadu_ps(m, g + i);
        const __m512 x = _mm512_xor_ps(gv, _mm512_set1_ps(-0.0f)); /* -g, exact */
        if (dsr1_exp_off_path(x) & m) {
            dsr1_silu_mul_ref(g + i, u + i, n - i < 16 ? n - i : 16);
            continue;
        }
        const __m512 e = dsr1_exp16(x, &c);
        const __m512 s = _mm512_div_ps(gv, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
        _mm512_mask_storeu_ps(g + i, m, _mm512_mul_ps(s, _mm512_maskz_loadu_ps(m, u + i)));
    }
}
