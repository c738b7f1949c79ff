/*
 * membw_avx512.c - the streaming read loop behind the bandwidth probe
 * (membw.c): 64-byte loads into four independent XOR chains, with or
 * without software prefetch, so the probe can tell whether prefetching
 * helps this machine the way the matmul kernels use it. Entered only after
 * dsr1_mm_avx512_usable().
 */
#include <immintrin.h>

#include "matmul_impl.h"

static inline __m512i fold4(const uint8_t *p, __m512i a[4])
{
    a[0] = _mm512_xor_si512(a[0], _mm512_loadu_si512(p));
    a[1] = _mm512_xor_si512(a[1], _mm512_loadu_si512(p + 64));
    a[2] = _mm512_xor_si512(a[2], _mm512_loadu_si512(p + 128));
    a[3] = _mm512_xor_si512(a[3], _mm512_loadu_si512(p + 192));
    return a[0];
}

uint64_t dsr1_membw_read_avx512(const void *buf, size_t bytes, int prefetch)
{
    const uint8_t *p = buf;
    __m512i a[4] = {_mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512(),
                    _mm512_setzero_si512()};
    size_t i = 0;
    if (prefetch > 0) {
        for (; i + 256 <= bytes; i += 256) {
            /* every line of the next-but-`prefetch` 256 bytes */
            for (int k = 0; k < 256; k += 64) _mm_prefetch((const char *)p + i + prefetch + k, _MM_HINT_T0);
            fold4(p + i, a);
        }
    } else {
        for (; i + 256 <= bytes; i += 256) fold4(p + i, a);
    }
    /* Fold the lanes with XOR: reduce_add_epi64 adds as signed long long,
     * which UBSan rightly flags as overflow on arbitrary data. */
    uint64_t lanes[8];
    _mm512_storeu_si512(lanes, _mm512_xor_si512(_mm512_xor_si512(a[0], a[1]), _mm512_xor_si512(a[2], a[3])));
    uint64_t s = 0;
    for (int k = 0; k < 8; k++) s ^= lanes[k];
    for (; i < bytes; i++) s += p[i];
    return s;
}
