/*
 * fp8_vbmi.h - FP8 (e4m3) codes to bf16 words by byte tables (AVX-512
 * VBMI), shared by the canonical FP8 kernels (matmul_avx512.c) and the
 * fast mode's FP8 GEMV on AMX tiles (matmul_fp8amx_avx512.c). Include
 * after matmul_impl.h and <immintrin.h>, in a file built with the AVX-512
 * flags; the functions carry VBMI as their own target.
 */
#ifndef DSR1_FP8_VBMI_H
#define DSR1_FP8_VBMI_H

/* ---- FP8 by byte tables (AVX-512 VBMI) ----
 * 64 codes per step instead of 32: the bf16 word of code b is
 * hi[b & 0x7f] << 8 | lo[b & 0x7f], with b's sign bit OR-ed into hi - two
 * vpermi2b (128-byte tables in two registers each: the instruction reads 7
 * index bits and ignores the sign), one ternlogic, then unpacklo/hi_epi8
 * pair the bytes into words. The tables are dsr1_mm_fp8_bf16's own bits
 * (fp8_btab_init), so every code - subnormals and the NaN codes included -
 * gives the same word as the shift/add path and the portable kernel (the
 * kernel tests cover all 256 codes on both paths). The unpacks work inside
 * 128-bit lanes, so a vpermb first puts the codes in the order that makes
 * the two word vectors columns 0..31 and 32..63 exactly as fp8x32_bf16
 * gives them: the same dot products in the same lanes, the canonical order
 * unchanged. About 6 instructions per 64 weights where the shift/add path
 * takes about 14. */

#define VBMI static __attribute__((target("avx512vbmi")))
#define VBMI_INLINE static inline __attribute__((always_inline, target("avx512vbmi")))

/* Built from dsr1_mm_fp8_bf16 (128 scalar calls) per task, or once a call
 * for the tile GEMV (matmul_prep.c): no global state. */
typedef struct fp8_btab {
    _Alignas(64) uint8_t lo[128];
    _Alignas(64) uint8_t hi[128];
    _Alignas(64) uint8_t perm[64];
} fp8_btab;

static inline void fp8_btab_init(fp8_btab *t)
{
    for (int b = 0; b < 128; b++) {
        uint16_t v = dsr1_mm_fp8_bf16((uint8_t)b);
        t->hi[b] = (uint8_t)(v >> 8);
        t->lo[b] = (uint8_t)v;
    }
    /* Byte 16q+i of the permuted codes (128-bit lane q) is code 8q+i for
     * i < 8 (unpacklo: word 8q+i of the first vector) and code 32+8q+(i-8)
     * for i >= 8 (unpackhi: word 8q+i-8 of the second). */
    for (int q = 0; q < 4; q++)
        for (int i = 0; i < 8; i++) {
            t->perm[16 * q + i] = (uint8_t)(8 * q + i);
            t->perm[16 * q + 8 + i] = (uint8_t)(32 + 8 * q + i);
        }
}

typedef struct fp8_bregs {
    __m512i lo0, lo1, hi0, hi1, perm;
} fp8_bregs;

VBMI_INLINE fp8_bregs fp8_bregs_load(const fp8_btab *t)
{
    return (fp8_bregs){_mm512_load_si512(t->lo), _mm512_load_si512(t->lo + 64),
                       _mm512_load_si512(t->hi), _mm512_load_si512(t->hi + 64),
                       _mm512_load_si512(t->perm)};
}

/* 64 codes -> their bf16 words in the unpacks' own order: word 8q + i of
 * *w0 is code 16q + i and of *w1 code 16q + 8 + i (q the 128-bit lane,
 * i < 8). For a consumer that orders its other operand to match
 * (matmul_fp8amx_avx512.c): one shuffle less per 64 codes. */
VBMI_INLINE void fp8x64_words_lanes(__m512i c, fp8_bregs t, __m512i *w0, __m512i *w1)
{
    __m512i lo = _mm512_permutex2var_epi8(t.lo0, c, t.lo1);
    __m512i hi = _mm512_permutex2var_epi8(t.hi0, c, t.hi1);
    hi = _mm512_ternarylogic_epi32(hi, c, _mm512_set1_epi8((char)0x80), 0xf8); /* hi | (c & 0x80) */
    *w0 = _mm512_unpacklo_epi8(lo, hi);
    *w1 = _mm512_unpackhi_epi8(lo, hi);
}

/* 64 codes (as loaded) -> the bf16 words of columns 0..31 (*w0) and
 * 32..63 (*w1), the same bits as fp8x32_bf16 on each half: the perm
 * first makes the unpacks' order the columns' own. */
VBMI_INLINE void fp8x64_words(__m512i raw, fp8_bregs t, __m512i *w0, __m512i *w1)
{
    fp8x64_words_lanes(_mm512_permutexvar_epi8(t.perm, raw), t, w0, w1);
}

/* Codes p[0 .. m) (m < 64 at the end of a span), the rest read as 0. */
VBMI_INLINE __m512i fp8_load64(const uint8_t *p, int64_t m)
{
    if (m >= 64) return _mm512_loadu_si512(p);
    return _mm512_maskz_loadu_epi8(((__mmask64)1 << m) - 1, p);
}

#endif
