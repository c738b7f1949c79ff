/*
 * membw_avx512.c - the streaming read loop behind the bandwidth probe
 * (membw.c): 64-byte loads into four independent XOR chains, with or
 * without software prefetch, so the probe can tell whether prefetching
 * helps this machine the way the matmul kernels use it; and the same loads
 * taken from eight rows side by side, the way the GEMVs read a matrix.
 * Entered only after dsr1_mm_avx512_usable().
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

/* The XOR of the four chains' 64-bit lanes: with the loads above, the XOR
 * of every 64-bit word read. XOR, not reduce_add_epi64: that adds as signed
 * long long, which UBSan rightly flags as overflow on arbitrary data. */
static uint64_t fold_lanes(const __m512i a[4])
{
    uint64_t lanes[8], s = 0;
    _mm512_storeu_si512(lanes, _mm512_xor_si512(_mm512_xor_si512(a[0], a[1]), _mm512_xor_si512(a[2], a[3])));
    for (int k = 0; k < 8; k++) s ^= lanes[k];
    return s;
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
    uint64_t s = fold_lanes(a);
    for (; i < bytes; i++) s ^= p[i];
    return s;
}

uint64_t dsr1_membw_read_rows_avx512(const void *buf, size_t bytes, size_t row, int prefetch)
{
    const uint8_t *p = buf;
    __m512i a[4] = {_mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512(),
                    _mm512_setzero_si512()};
    const size_t group = 8 * row;
    size_t g = 0;
    for (; g + group <= bytes; g += group)
        for (size_t k = 0; k + 256 <= row; k += 256)
            for (int r = 0; r < 8; r++) {
                const uint8_t *q = p + g + (size_t)r * row + k;
                if (prefetch > 0 && k + (size_t)prefetch < row)
                    for (int l = 0; l < 256; l += 64) _mm_prefetch((const char *)q + prefetch + l, _MM_HINT_T0);
                fold4(q, a);
            }
    uint64_t s = fold_lanes(a);
    /* what is left after the whole groups is read straight through */
    return s ^ (g < bytes ? dsr1_membw_read_avx512(p + g, bytes - g, prefetch) : 0);
}
