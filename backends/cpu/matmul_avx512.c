/*
 * matmul_avx512.c - the AVX-512 matmul kernels (F/BW/VL/DQ, BF16, VNNI).
 * Entered only through dsr1_mm_rows_avx512 after dsr1_mm_avx512_usable().
 *
 * Shape of the work (one call = output rows [r0, r1), all n tokens):
 *   F32/BF16 modes: a panel of up to 16 rows (BF16 mode with more than 4
 *   tokens: DSR1_MM_BIG_PANEL = 64 rows in the task's scratch, so each
 *   token tile of x serves 16 row tiles) is dequantised one column chunk
 *   at a time (DSR1_MM_KC_*) - f32 or bf16, in the order the microkernel
 *   reads; BF16 weights are copied, not converted - and then every token
 *   tile (up to 6 tokens) x row tile (up to 4 rows) runs a register-blocked
 *   microkernel over the chunk. Each weight byte is read from memory once
 *   per call whatever n is; the dequantised panel stays in L2 for all
 *   tokens. Whole 4-row bf16 tiles reduce their accumulators four to a
 *   register (hsum16x4) and add into y one vector per token. BF16
 *   weights in BF16 mode skip the panels up to FUSED_BF_N tokens: the
 *   register GEMV, 6 tokens at a time over each 4-row tile; one token,
 *   rows a multiple of 32 wide (decode): eight rows side by side, the
 *   weights loaded as the dot product's operand (bf16_gemv).
 *   INT8 mode (W8A8): vpdpbusd straight from the packed weights, lanes as
 *   columns (up to 4 tokens in registers, more through 16-row panels;
 *   rows of at most 256 columns four at a time: gemv_i8_short4);
 *   with one scale per row and columns a multiple of 64: tokens in lanes
 *   from 16 to 95 tokens (matmul.c's want_xt), rows in lanes from 96
 *   (from I8L_MIN_N where the tokens-in-lanes x is not made),
 *   matmul_lanes_avx512.c.
 *   INT4 weights in INT8 mode (W4A8): rows in lanes - the packed codes of
 *   16 rows transposed as 32-bit elements and split into nibbles, vpdpbusd
 *   against 4 bytes of x broadcast, so each lane ends a scale group with
 *   its row's exact dot (the -8 offset folded into the start) and the
 *   group's convert and fma serve 16 rows; many tokens read a 32-row code
 *   panel (L1), one token has a lanes-as-columns kernel
 *   (matmul_lanes_avx512.c).
 *   FP8 in BF16 mode has its own path (matmul_impl.h): the e4m3 bytes become
 *   exact bf16 - with AVX-512 VBMI by two byte tables, 64 codes in about 6
 *   instructions (vpermb, 2 vpermi2b, ternlogic, 2 unpacks), else by
 *   shift/add plus a 5-bit table for the subnormals, 32 codes in about 7;
 *   both give dsr1_mm_fp8_bf16's bits - the block scale goes into x'
 *   (prepared per 128-row block in the task's scratch, token by token);
 *   n <= 4 decodes in registers row by row, prefetching in the order the
 *   4-row tiles read (tile_prefetch), more through decoded 64-row panels
 *   (16 without the task's scratch).
 *   The activations' preparation (bf16 rounding, W8A8 quantisation) has
 *   vector versions in prep_avx512.c, called by matmul.c with the same
 *   results.
 *   INT4 GEMV in BF16 mode has a dedicated kernel too (per-group code table,
 *   scale pointers advanced per group: no division in the loop).
 *
 * Invariant: the arithmetic is exactly the canonical order of
 * matmul_impl.h (same lanes, same fused multiply-adds, same reduction tree),
 * so results equal the portable kernels bit for bit, whatever the tiling.
 * Dequantised values equal dsr1_wmat_dequant_span's: FP8 goes through f16
 * (e4m3 bits b -> f16 bits sign | (b & 0x7f) << 7, i.e. value / 256, exact
 * including subnormals) and the x256 is folded into the block scale, so
 * value * scale is still rounded once.
 */
#include "matmul_impl.h"

#include <immintrin.h>

#include "../../core/numeric.h"

#define MR 4   /* microkernel rows */
/* BF16 weights in BF16 mode take the register GEMV (mk_fused) up to this
 * many tokens, in groups of NR: the first group streams a 4-row tile's
 * chunk from DRAM, the others find it in L1. The panels (a copy, then the
 * tiles) had left DRAM idle while they computed: 18432x7168, 2 threads,
 * Zen 4, `bench kernels`, panels -> groups: n = 5 16.8 -> 8.2-8.4 ms, 6
 * 17.7 -> 8.3-8.7, 8 18.6 -> 9.3-11.4, 12 20.6 -> 11.1-12.0, 16 22.9 ->
 * 15.2-16.0, 24 27 -> 20.7-21.5, 32 31.6-33.1 against 29.2-35.4 (even:
 * the panels from 25). */
#define FUSED_BF_N 24
#define I8L_MIN_N 24 /* W8A8 with one scale per row: rows in lanes from here (rows_int8) */
#define NR 6   /* microkernel tokens */
#define PANEL 16
#ifndef DSR1_MM_PREFETCH
#define DSR1_MM_PREFETCH 4096
#endif
#define PREFETCH DSR1_MM_PREFETCH /* bytes ahead in a weight row */

#define INLINE static inline __attribute__((always_inline))

/* ---- horizontal sums --------------------------------------------------------- */

/* dsr1_mm_hsum16's tree: lanes i + i+8, then i + i+4, i + i+2, 0 + 1. */
INLINE float hsum16(__m512 v)
{
    __m256 a = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    __m128 c = _mm_add_ps(b, _mm_movehl_ps(b, b));
    __m128 d = _mm_add_ss(c, _mm_movehdup_ps(c));
    return _mm_cvtss_f32(d);
}

/* hsum16 of four vectors at once, lane a of the result the sum of v[a]:
 * every add pairs the same two values as hsum16's tree does (a + b and
 * b + a are the same float), only packed four vectors to a register. */
INLINE __m128 hsum16x4(__m512 v0, __m512 v1, __m512 v2, __m512 v3)
{
    /* lanes i + i+8: blocks 0,1 of a vector plus its blocks 2,3 */
    __m512 a = _mm512_add_ps(_mm512_shuffle_f32x4(v0, v1, _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_f32x4(v0, v1, _MM_SHUFFLE(3, 2, 3, 2)));
    __m512 b = _mm512_add_ps(_mm512_shuffle_f32x4(v2, v3, _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_f32x4(v2, v3, _MM_SHUFFLE(3, 2, 3, 2)));
    /* i + i+4: block k of c holds vector k's four partial sums */
    __m512 c = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(2, 0, 2, 0)),
                             _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(3, 1, 3, 1)));
    /* i + i+2, then 0 + 1, inside each block */
    c = _mm512_add_ps(c, _mm512_shuffle_ps(c, c, _MM_SHUFFLE(1, 0, 3, 2)));
    c = _mm512_add_ps(c, _mm512_shuffle_ps(c, c, _MM_SHUFFLE(2, 3, 0, 1)));
    const __m512i idx = _mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
    return _mm512_castps512_ps128(_mm512_permutexvar_ps(idx, c));
}

/* ---- dequantisation of one row span -------------------------------------------- */

/* Write 32 dequantised values (two vectors of 16) as f32 or as bf16. */
INLINE void emit32(void *out, int64_t k, __m512 lo, __m512 hi, int bf)
{
    if (bf) {
        _mm512_store_si512((uint16_t *)out + k, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
    } else {
        _mm512_store_ps((float *)out + k, lo);
        _mm512_store_ps((float *)out + k + 16, hi);
    }
}

/* Scalar dequantisation of [k, end) (at most 32 values: a ragged end),
 * zero padded to 32: the same values the vector code produces. */
static void emit_tail(const dsr1_wmat *w, int64_t r, int64_t c0, int64_t k, int64_t end,
                      void *out, int bf)
{
    _Alignas(64) float tmp[32] = {0};
    DSR1_ASSERT(end - k <= 32);
    dsr1_wmat_dequant_span(w, r, c0 + k, end - k, tmp);
    emit32(out, k, _mm512_load_ps(tmp), _mm512_load_ps(tmp + 16), bf);
}

INLINE void fp8x32(const uint8_t *p, __m512 s, __m512 *lo, __m512 *hi)
{
    __m512i v = _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)p));
    /* sign-extended b << 7 has b7 in bits 15 and 14: clear 14 to get f16 */
    __m512i h = _mm512_and_si512(_mm512_slli_epi16(v, 7), _mm512_set1_epi16((short)0xbfff));
    *lo = _mm512_mul_ps(_mm512_cvtph_ps(_mm512_castsi512_si256(h)), s);
    *hi = _mm512_mul_ps(_mm512_cvtph_ps(_mm512_extracti64x4_epi64(h, 1)), s);
}

INLINE void int8x32(const int8_t *p, __m512 s, __m512 *lo, __m512 *hi)
{
    *lo = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)p))), s);
    *hi = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(p + 16)))), s);
}

/* 16 bytes = 32 nibbles: low nibble is the even column. */
INLINE void int4x32(const uint8_t *p, __m512 s, __m512 *lo, __m512 *hi)
{
    __m128i b = _mm_loadu_si128((const __m128i *)p), m = _mm_set1_epi8(15), e = _mm_set1_epi8(8);
    __m128i l = _mm_and_si128(b, m), h = _mm_and_si128(_mm_srli_epi16(b, 4), m);
    __m128i a0 = _mm_sub_epi8(_mm_unpacklo_epi8(l, h), e), a1 = _mm_sub_epi8(_mm_unpackhi_epi8(l, h), e);
    *lo = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(a0)), s);
    *hi = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(a1)), s);
}

INLINE void plain32(const dsr1_wmat *w, const void *p, __m512 *lo, __m512 *hi)
{
    if (w->type == DSR1_T_F32) {
        *lo = _mm512_loadu_ps(p);
        *hi = _mm512_loadu_ps((const float *)p + 16);
    } else if (w->type == DSR1_T_F16) {
        *lo = _mm512_cvtph_ps(_mm256_loadu_si256(p));
        *hi = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p + 1));
    } else {
        *lo = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(p)), 16));
        *hi = _mm512_castsi512_ps(
            _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p + 1)), 16));
    }
}

static int64_t type_bits(dsr1_type t)
{
    switch (t) {
    case DSR1_T_F32: return 32;
    case DSR1_T_F16:
    case DSR1_T_BF16: return 16;
    case DSR1_T_INT4: return 4;
    default: return 8;
    }
}

/* Dequantise the values of one scale group [k, end) of the span with
 * scale s (end - k a multiple of 32 except at the span's end). */
static int64_t deq_group(const dsr1_wmat *w, int64_t r, int64_t c0, int64_t k, int64_t end,
                         float s, void *out, int bf)
{
    const uint8_t *base = w->data;
    const int64_t bits = type_bits(w->type);
    __m512 vs = _mm512_set1_ps(s), lo, hi;
    for (; k + 32 <= end; k += 32) {
        int64_t c = c0 + k;
        /* Decode streams each row once in short runs (one chunk of a few
         * rows at a time), too short for the hardware prefetcher to ramp
         * up: ask for the bytes PREFETCH ahead in this row explicitly. */
        _mm_prefetch((const char *)base + ((r * w->cols + c) * bits >> 3) + PREFETCH, _MM_HINT_T0);
        switch (w->type) {
        case DSR1_T_FP8_E4M3: fp8x32(base + r * w->cols + c, vs, &lo, &hi); break;
        case DSR1_T_INT8: int8x32((const int8_t *)base + r * w->cols + c, vs, &lo, &hi); break;
        case DSR1_T_INT4: int4x32(base + r * (w->cols / 2) + c / 2, vs, &lo, &hi); break;
        case DSR1_T_F32: plain32(w, (const float *)base + r * w->cols + c, &lo, &hi); break;
        default: plain32(w, (const uint16_t *)base + r * w->cols + c, &lo, &hi); break;
        }
        emit32(out, k, lo, hi, bf);
    }
    return k;
}

/* dsr1_wmat_scale for the grouped types, without its per-call switch. */
static float group_scale(const dsr1_wmat *w, int64_t r, int64_t c)
{
    int64_t g = w->group;
    if (w->scale_type == DSR1_T_F32 && w->type == DSR1_T_FP8_E4M3)
        return ((const float *)w->scale)[(r / g) * ((w->cols + g - 1) / g) + c / g];
    if (w->scale_type == DSR1_T_F32 && w->type == DSR1_T_INT8)
        return ((const float *)w->scale)[r * (w->cols / g) + c / g];
    if (w->type != DSR1_T_INT4) return dsr1_wmat_scale(w, r, c); /* unusual scale type */
    uint16_t h = ((const uint16_t *)w->scale)[r * (w->cols / g) + c / g];
    return w->scale_type == DSR1_T_F16 ? _cvtsh_ss(h) : dsr1_bf16_to_f32(h);
}

/* BF16 weights to bf16 (deq_span's bf16 case): what bf16 -> f32 ->
 * vcvtne2ps2bf16 gives, without the round trip: a copy, except that
 * denormals become signed zero and NaNs get the quiet bit (0x40). */
static void bf16_copy(const uint16_t *src, int64_t len, uint16_t *out)
{
    const __m512i expo = _mm512_set1_epi16(0x7f80), mag = _mm512_set1_epi16(0x7fff);
    for (int64_t k = 0; k < len; k += 32) {
        __mmask32 m = len - k >= 32 ? 0xffffffffu : (__mmask32)((1u << (len - k)) - 1);
        _mm_prefetch((const char *)(src + k) + PREFETCH, _MM_HINT_T0);
        __m512i v = _mm512_maskz_loadu_epi16(m, src + k);
        __mmask32 den = _mm512_testn_epi16_mask(v, expo);
        __mmask32 nan = _mm512_cmpgt_epu16_mask(_mm512_and_si512(v, mag), expo);
        v = _mm512_mask_mov_epi16(v, den, _mm512_and_si512(v, _mm512_set1_epi16((short)0x8000)));
        v = _mm512_mask_mov_epi16(v, nan, _mm512_or_si512(v, _mm512_set1_epi16(0x40)));
        _mm512_store_si512(out + k, v);
    }
}

/* Dequantise w[r][c0, c0+len) into out (f32 or bf16, 64-byte aligned),
 * zero padded to a multiple of 32 values. */
static void deq_span(const dsr1_wmat *w, int64_t r, int64_t c0, int64_t len, void *out, int bf)
{
    if (bf && w->type == DSR1_T_BF16) {
        bf16_copy((const uint16_t *)w->data + r * w->cols + c0, len, out);
        return;
    }
    int64_t g = 0; /* scale group width along the columns; 0 = one scale */
    float s = 1.0f;
    if (w->type == DSR1_T_FP8_E4M3 || w->type == DSR1_T_INT4 ||
        (w->type == DSR1_T_INT8 && w->group > 0))
        g = w->group;
    if (g % 32 != 0 || (w->type == DSR1_T_INT4 && (w->cols & 1))) {
        g = -1; /* unusual layout: all scalar below */
    }
    /* FP8's f16 route yields value / 256: fold 256 into the scale (exact). */
    float mul = w->type == DSR1_T_FP8_E4M3 ? 256.0f : 1.0f;
    if (w->type == DSR1_T_INT8 && g == 0) s = dsr1_wmat_scale(w, r, 0);
    int64_t k = 0;
    if (g == 0) {
        k = deq_group(w, r, c0, 0, len, s, out, bf);
    } else if (g > 0) {
        while (k < len) {
            int64_t c = c0 + k, end = (c / g + 1) * g - c0;
            if (end > len) end = len;
            int64_t done = deq_group(w, r, c0, k, end, group_scale(w, r, c) * mul, out, bf);
            k = done;
            if (done < end) break; /* a ragged group */
        }
    }
    for (; k < len; k += 32) emit_tail(w, r, c0, k, k + 32 < len ? k + 32 : len, out, bf);
}

void dsr1_mm_deq_bf16_avx512(const dsr1_wmat *w, int64_t r, int64_t c0, int64_t len, uint16_t *out)
{
    deq_span(w, r, c0, len, out, 1);
}

/* ---- microkernels ------------------------------------------------------------ */

/* out[a][b] = canonical chunk sum of row a of wb with token b of x (f32). */
INLINE void mk_f32(const int rt, const int nt, const float *wb, int64_t ldw, const float *x,
                   int64_t ldx, int64_t len, float out[MR][NR])
{
    __m512 acc[MR][NR];
#pragma GCC unroll 4
    for (int a = 0; a < rt; a++)
#pragma GCC unroll 6
        for (int b = 0; b < nt; b++) acc[a][b] = _mm512_setzero_ps();
    int64_t k = 0;
    for (; k < len; k += 16) {
        /* x is not padded: the last step masks it (w is zero padded). */
        __mmask16 m = len - k >= 16 ? 0xffff : (__mmask16)((1u << (len - k)) - 1);
        __m512 wv[MR];
#pragma GCC unroll 4
        for (int a = 0; a < rt; a++) wv[a] = _mm512_load_ps(wb + a * ldw + k);
#pragma GCC unroll 6
        for (int b = 0; b < nt; b++) {
            __m512 xv = m == 0xffff ? _mm512_loadu_ps(x + b * ldx + k)
                                    : _mm512_maskz_loadu_ps(m, x + b * ldx + k);
#pragma GCC unroll 4
            for (int a = 0; a < rt; a++) acc[a][b] = _mm512_fmadd_ps(wv[a], xv, acc[a][b]);
        }
    }
#pragma GCC unroll 4
    for (int a = 0; a < rt; a++)
#pragma GCC unroll 6
        for (int b = 0; b < nt; b++) out[a][b] = hsum16(acc[a][b]);
}

/* Same with bf16 pairs (len a multiple of 32; both sides zero padded). */
INLINE void mk_bf16(const int rt, const int nt, const uint16_t *wb, int64_t ldw,
                    const uint16_t *xb, int64_t ldx, int64_t len, float out[MR][NR])
{
    __m512 acc[MR][NR];
#pragma GCC unroll 4
    for (int a = 0; a < rt; a++)
#pragma GCC unroll 6
        for (int b = 0; b < nt; b++) acc[a][b] = _mm512_setzero_ps();
    for (int64_t k = 0; k < len; k += 32) {
        __m512bh wv[MR];
#pragma GCC unroll 4
        for (int a = 0; a < rt; a++) wv[a] = (__m512bh)_mm512_load_si512(wb + a * ldw + k);
#pragma GCC unroll 6
        for (int b = 0; b < nt; b++) {
            __m512bh xv = (__m512bh)_mm512_loadu_si512(xb + b * ldx + k);
#pragma GCC unroll 4
            for (int a = 0; a < rt; a++) acc[a][b] = _mm512_dpbf16_ps(acc[a][b], wv[a], xv);
        }
    }
#pragma GCC unroll 4
    for (int a = 0; a < rt; a++)
#pragma GCC unroll 6
        for (int b = 0; b < nt; b++) out[a][b] = hsum16(acc[a][b]);
}

/* mk_bf16 for a whole 4-row tile, the chunk sums added straight into y
 * (y[b * ldy + a] for token b, row a; assigned when `first`): the same
 * sums and the same chunk order as tile_bf16 + add_chunk, one vector
 * read-modify-write per token instead of four scalar ones. */
INLINE void mk_bf16_y(const int nt, const uint16_t *wb, int64_t ldw, const uint16_t *xb,
                      int64_t ldx, int64_t len, float *y, int64_t ldy, int first)
{
    __m512 acc[MR][NR];
#pragma GCC unroll 4
    for (int a = 0; a < MR; a++)
#pragma GCC unroll 6
        for (int b = 0; b < nt; b++) acc[a][b] = _mm512_setzero_ps();
    for (int64_t k = 0; k < len; k += 32) {
        __m512bh wv[MR];
#pragma GCC unroll 4
        for (int a = 0; a < MR; a++) wv[a] = (__m512bh)_mm512_load_si512(wb + a * ldw + k);
#pragma GCC unroll 6
        for (int b = 0; b < nt; b++) {
            __m512bh xv = (__m512bh)_mm512_loadu_si512(xb + b * ldx + k);
#pragma GCC unroll 4
            for (int a = 0; a < MR; a++) acc[a][b] = _mm512_dpbf16_ps(acc[a][b], wv[a], xv);
        }
    }
#pragma GCC unroll 6
    for (int b = 0; b < nt; b++) {
        __m128 s = hsum16x4(acc[0][b], acc[1][b], acc[2][b], acc[3][b]);
        float *yb = y + b * ldy;
        _mm_storeu_ps(yb, first ? s : _mm_add_ps(_mm_loadu_ps(yb), s));
    }
}

/* Exact integer dots of rows w[a] (stride ldw) with xq[b] over [0, len):
 * vpdpbusd takes unsigned x signed, so the weights go in as w + 128 (xor
 * 0x80) and the caller subtracts 128 * sum(xq). */
INLINE void mk_i8(const int rt, const int nt, const int8_t *w, int64_t ldw, const int8_t *xq,
                  int64_t ldx, int64_t len, int32_t out[MR][NR])
{
    __m512i acc[MR][NR];
    const __m512i flip = _mm512_set1_epi8((char)0x80);
#pragma GCC unroll 4
    for (int a = 0; a < rt; a++)
#pragma GCC unroll 6
        for (int b = 0; b < nt; b++) acc[a][b] = _mm512_setzero_si512();
    /* Full steps unmasked (masked byte loads cost more), then the tail. */
    int64_t k = 0;
    for (; k + 64 <= len; k += 64) {
        __m512i wv[MR];
#pragma GCC unroll 4
        for (int a = 0; a < rt; a++) {
            /* the next tile's line, T1 (W8A8 GEMV of 18432x7168, 2
             * threads, Zen 4: 4 KiB along the row into L1 21.8-29.5 GB/s,
             * this 34.7-38.9, interleaved); the FP8 GEMV's tile_prefetch,
             * better on Zen 5, was not tried here */
            _mm_prefetch((const char *)(w + (a + MR) * ldw + k), _MM_HINT_T1);
            wv[a] = _mm512_xor_si512(_mm512_loadu_si512(w + a * ldw + k), flip);
        }
#pragma GCC unroll 6
        for (int b = 0; b < nt; b++) {
            __m512i xv = _mm512_loadu_si512(xq + b * ldx + k);
#pragma GCC unroll 4
            for (int a = 0; a < rt; a++) acc[a][b] = _mm512_dpbusd_epi32(acc[a][b], wv[a], xv);
        }
    }
    if (k < len) {
        __mmask64 m = ((__mmask64)1 << (len - k)) - 1;
        __m512i wv[MR];
#pragma GCC unroll 4
        for (int a = 0; a < rt; a++)
            wv[a] = _mm512_xor_si512(_mm512_maskz_loadu_epi8(m, w + a * ldw + k), flip);
#pragma GCC unroll 6
        for (int b = 0; b < nt; b++) {
            __m512i xv = _mm512_maskz_loadu_epi8(m, xq + b * ldx + k);
#pragma GCC unroll 4
            for (int a = 0; a < rt; a++) acc[a][b] = _mm512_dpbusd_epi32(acc[a][b], wv[a], xv);
        }
    }
#pragma GCC unroll 4
    for (int a = 0; a < rt; a++)
#pragma GCC unroll 6
        for (int b = 0; b < nt; b++) out[a][b] = _mm512_reduce_add_epi32(acc[a][b]);
}

/* Instantiate each microkernel for every (rows, tokens) tile shape. */
#define MK_CASES(fn, ...)                                                          \
    switch (rt * 8 + nt) {                                                         \
    case 8 + 1: fn(1, 1, __VA_ARGS__); break;  case 8 + 2: fn(1, 2, __VA_ARGS__); break; \
    case 8 + 3: fn(1, 3, __VA_ARGS__); break;  case 8 + 4: fn(1, 4, __VA_ARGS__); break; \
    case 8 + 5: fn(1, 5, __VA_ARGS__); break;  case 8 + 6: fn(1, 6, __VA_ARGS__); break; \
    case 16 + 1: fn(2, 1, __VA_ARGS__); break; case 16 + 2: fn(2, 2, __VA_ARGS__); break; \
    case 16 + 3: fn(2, 3, __VA_ARGS__); break; case 16 + 4: fn(2, 4, __VA_ARGS__); break; \
    case 16 + 5: fn(2, 5, __VA_ARGS__); break; case 16 + 6: fn(2, 6, __VA_ARGS__); break; \
    case 24 + 1: fn(3, 1, __VA_ARGS__); break; case 24 + 2: fn(3, 2, __VA_ARGS__); break; \
    case 24 + 3: fn(3, 3, __VA_ARGS__); break; case 24 + 4: fn(3, 4, __VA_ARGS__); break; \
    case 24 + 5: fn(3, 5, __VA_ARGS__); break; case 24 + 6: fn(3, 6, __VA_ARGS__); break; \
    case 32 + 1: fn(4, 1, __VA_ARGS__); break; case 32 + 2: fn(4, 2, __VA_ARGS__); break; \
    case 32 + 3: fn(4, 3, __VA_ARGS__); break; case 32 + 4: fn(4, 4, __VA_ARGS__); break; \
    case 32 + 5: fn(4, 5, __VA_ARGS__); break; case 32 + 6: fn(4, 6, __VA_ARGS__); break; \
    default: DSR1_ASSERT(!"matmul tile shape");                                    \
    }

static void tile_f32(int rt, int nt, const float *wb, int64_t ldw, const float *x, int64_t ldx,
                     int64_t len, float out[MR][NR])
{
    MK_CASES(mk_f32, wb, ldw, x, ldx, len, out)
}

static void tile_bf16(int rt, int nt, const uint16_t *wb, int64_t ldw, const uint16_t *xb,
                      int64_t ldx, int64_t len, float out[MR][NR])
{
    MK_CASES(mk_bf16, wb, ldw, xb, ldx, len, out)
}

/* A 4-row tile of nt tokens into y (mk_bf16_y). */
static void tile_bf16_y(int nt, const uint16_t *wb, int64_t ldw, const uint16_t *xb, int64_t ldx,
                        int64_t len, float *y, int64_t ldy, int first)
{
    switch (nt) {
    case 1: mk_bf16_y(1, wb, ldw, xb, ldx, len, y, ldy, first); break;
    case 2: mk_bf16_y(2, wb, ldw, xb, ldx, len, y, ldy, first); break;
    case 3: mk_bf16_y(3, wb, ldw, xb, ldx, len, y, ldy, first); break;
    case 4: mk_bf16_y(4, wb, ldw, xb, ldx, len, y, ldy, first); break;
    case 5: mk_bf16_y(5, wb, ldw, xb, ldx, len, y, ldy, first); break;
    default: mk_bf16_y(6, wb, ldw, xb, ldx, len, y, ldy, first); break;
    }
}

static void tile_i8(int rt, int nt, const int8_t *w, int64_t ldw, const int8_t *xq, int64_t ldx,
                    int64_t len, int32_t out[MR][NR])
{
    MK_CASES(mk_i8, w, ldw, xq, ldx, len, out)
}

/* ---- fused GEMV: dequantise in registers (n <= 4) ---------------------------------- */

/* Row-major base of row r and the scale of (r, c), inlined for the types
 * the fused kernel handles (the generic dsr1_wmat_scale divides). */
INLINE const uint8_t *row_base(const int type, const dsr1_wmat *w, int64_t r)
{
    const uint8_t *d = w->data;
    if (type == DSR1_T_INT4) return d + r * (w->cols / 2);
    if (type == DSR1_T_BF16) return d + r * w->cols * 2;
    return d + r * w->cols;
}

INLINE float fast_scale(const int type, const dsr1_wmat *w, int64_t r, int64_t c)
{
    if (type == DSR1_T_FP8_E4M3) /* x256: see the file comment */
        return ((const float *)w->scale)[(r / w->group) * ((w->cols + w->group - 1) / w->group) +
                                         c / w->group] * 256.0f;
    if (type == DSR1_T_INT8)
        return ((const float *)w->scale)[w->group ? r * (w->cols / w->group) + c / w->group : r];
    if (type == DSR1_T_INT4) {
        uint16_t h = ((const uint16_t *)w->scale)[r * (w->cols / w->group) + c / w->group];
        return w->scale_type == DSR1_T_F16 ? _cvtsh_ss(h) : dsr1_bf16_to_f32(h);
    }
    return 1.0f;
}

INLINE void load32(const int type, const uint8_t *row, int64_t c, __m512 vs, __m512 *lo, __m512 *hi)
{
    if (type == DSR1_T_FP8_E4M3) {
        fp8x32(row + c, vs, lo, hi);
    } else if (type == DSR1_T_INT8) {
        int8x32((const int8_t *)row + c, vs, lo, hi);
    } else if (type == DSR1_T_INT4) {
        int4x32(row + c / 2, vs, lo, hi);
    } else { /* BF16 */
        const __m256i *p = (const __m256i *)(row + 2 * c);
        *lo = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(p)), 16));
        *hi = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(p + 1)), 16));
    }
}

/* INT4 through a table: the 16 codes of a scale group dequantised once,
 * (q - 8) * s in f32 - the same single rounding as everywhere - and as bf16.
 * A byte's two nibbles then become weights by permutes alone. */
typedef struct int4_tab {
    __m512 f;    /* f32 value of code i in lane i */
    __m512i b;   /* bf16 value of code i in words i and i + 16 */
} int4_tab;

INLINE int4_tab int4_table(float s)
{
    const __m512 codes = _mm512_setr_ps(-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7);
    int4_tab t;
    t.f = _mm512_mul_ps(codes, _mm512_set1_ps(s));
    __m256i h = (__m256i)_mm512_cvtneps_pbh(t.f);
    t.b = _mm512_inserti64x4(_mm512_castsi256_si512(h), h, 1);
    return t;
}

/* 32 nibbles -> 32 bf16 pairs in vdpbf16ps order: dword i holds byte i;
 * d | d << 12 puts the low nibble in word 2i's low bits (bit 4 is garbage,
 * hence the table twice) and the high nibble in word 2i+1. */
INLINE __m512bh int4x32_bf16(const uint8_t *p, const int4_tab *t)
{
    __m512i d = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p));
    __m512i idx = _mm512_or_si512(d, _mm512_slli_epi32(d, 12));
    return (__m512bh)_mm512_permutexvar_epi16(idx, t->b);
}

/* Same in f32, columns in order: even and odd columns by table lookup
 * (vpermps reads only the low 4 index bits), then interleaved. */
INLINE void int4x32_tab(const uint8_t *p, const int4_tab *t, __m512 *lo, __m512 *hi)
{
    __m512i d = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p));
    __m512 ev = _mm512_permutexvar_ps(d, t->f), od = _mm512_permutexvar_ps(_mm512_srli_epi32(d, 4), t->f);
    const __m512i i0 = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
    const __m512i i1 = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
    *lo = _mm512_permutex2var_ps(ev, i0, od);
    *hi = _mm512_permutex2var_ps(ev, i1, od);
}

INLINE int64_t type_group(const int type, const dsr1_wmat *w)
{
    if (type == DSR1_T_FP8_E4M3 || type == DSR1_T_INT4) return w->group;
    if (type == DSR1_T_INT8) return w->group; /* 0: one scale per row */
    return 0;
}

/* One 32-column step of the canonical order: bf16 mode, weights as pairs. */
INLINE void step32_bf(const int nt, const __m512bh *wv, const dsr1_mm_job *j, int t0, int64_t c,
                      __m512 acc[MR][NR])
{
#pragma GCC unroll 6
    for (int b = 0; b < nt; b++) {
        __m512bh xv = (__m512bh)_mm512_loadu_si512(j->xb + (t0 + b) * j->ldxb + c);
#pragma GCC unroll 4
        for (int a = 0; a < MR; a++) acc[a][b] = _mm512_dpbf16_ps(acc[a][b], wv[a], xv);
    }
}

/* f32 mode: two 16-column steps (the second only when `second`). */
INLINE void step32_f32(const int nt, const __m512 *lo, const __m512 *hi, const dsr1_mm_job *j,
                       int t0, int64_t c, __mmask16 m0, __mmask16 m1, int second,
                       __m512 acc[MR][NR])
{
#pragma GCC unroll 4
    for (int b = 0; b < nt; b++) {
        const float *x = j->x + (t0 + b) * j->ldx + c;
        __m512 x0 = _mm512_maskz_loadu_ps(m0, x);
#pragma GCC unroll 4
        for (int a = 0; a < MR; a++) acc[a][b] = _mm512_fmadd_ps(lo[a], x0, acc[a][b]);
        if (second) {
            __m512 x1 = _mm512_maskz_loadu_ps(m1, x + 16);
#pragma GCC unroll 4
            for (int a = 0; a < MR; a++) acc[a][b] = _mm512_fmadd_ps(hi[a], x1, acc[a][b]);
        }
    }
}

/* The ragged end [k, len) of a chunk (< 32 columns, or a group that is not
 * a multiple of 32): scalar dequantisation, same arithmetic. */
INLINE void fused_tail(const int nt, const int bf, const dsr1_mm_job *j, int64_t r, int t0,
                       int64_t c0, int64_t k, int64_t len, __m512 acc[MR][NR])
{
    for (; k < len; k += 32) {
        int64_t m = len - k < 32 ? len - k : 32;
        __m512 lo[MR], hi[MR];
        for (int a = 0; a < MR; a++) {
            _Alignas(64) float tmp[32] = {0};
            dsr1_wmat_dequant_span(j->w, r + a, c0 + k, m, tmp);
            lo[a] = _mm512_load_ps(tmp);
            hi[a] = _mm512_load_ps(tmp + 16);
        }
        __mmask16 m0 = m >= 16 ? 0xffff : (__mmask16)((1u << m) - 1);
        __mmask16 m1 = m >= 32 ? 0xffff : m > 16 ? (__mmask16)((1u << (m - 16)) - 1) : 0;
        if (bf) {
            __m512bh wv[MR];
            for (int a = 0; a < MR; a++) wv[a] = _mm512_cvtne2ps_pbh(hi[a], lo[a]);
            step32_bf(nt, wv, j, t0, c0 + k, acc); /* xb is zero padded */
        } else {
            step32_f32(nt, lo, hi, j, t0, c0 + k, m0, m1, m > 16, acc);
        }
    }
}

/* The GEMV's software prefetch, in the order the tiles read: a tile reads
 * its rows side by side, so the line it needs TILE_PF bytes of row later
 * is TILE_PF further along the same row - or, past the row's end, in the
 * same row of the next tile, (rt - 1) rows further. Rows shorter than
 * TILE_PF: whole tiles ahead, at least TILE_PF bytes of row. That keeps
 * rt * TILE_PF bytes in flight (8 KiB for 4-row tiles). Before, the same
 * line one tile further on - 28 KiB ahead for rows of 7168 bytes (why
 * that lost on Zen 5 was not measured apart).
 * dsr1_matmul at n = 1 over 1 GB of 2048x7168 FP8 matrices, 2 threads,
 * AMD EPYC Zen 5, the two alternated (two runs, two rounds each; a round of
 * the old build while the read loop fell to 32 GB/s left out): 37.8-38.9
 * -> 47.1-51.1 GB/s, 0.55-0.58 -> 0.67-0.77 of a read loop run after each
 * (per row 512 bytes ahead:
 * 0.60-0.63, 1024: 0.61-0.75, 3072-6144: 0.67-0.70; all into L1, hint T0;
 * T1: 0.68-0.69).
 * The same loop reading the codes and nothing else ran at 0.51-0.64 the
 * old way, so it was the access pattern, not the decode. Short rows, one
 * thread as the per-head calls run, 200 MB of matrices, 3 alternated
 * rounds: 512x128 even (11.6-19.2 against 12.3-19.4 GB/s), 128x512
 * 19.1-22.4 against 13.2-18.5. Past the last
 * row it touches other rows or no mapping: prefetches do not fault.
 * Hint T1 (into L2), not T0: on Zen 4 lines asked into L1 held its few
 * miss buffers, and one core streamed FP8 at half the INT8 row GEMV's
 * rate. `bench kernels --type fp8 --shape 18432x7168 --n 1` (Zen 4,
 * family 25 model 17, alternated, two rounds, three at two threads): one
 * thread 16.0-17.0 GB/s
 * with T0, 25.4-25.8 with T1 (no prefetch 13.2; T0 4 KiB ahead 15.7-16.8,
 * 1 KiB 17.4-17.9; T1 4 KiB 24.8-26.6); two threads 32.2-35.1 -> 40.7-44.8.
 * The other tiles that use it moved the same way (INT8 7168x18432 35.6-36.0
 * -> 39.3-41.3, BF16 18432x7168 31.0-33.0 -> 35.9-36.5, two threads), and
 * FP8 decode of the R1-shape file, builds alternated (`dsr1 bench --prompt
 * 1 --gen 32`, 3 rounds): 9.64 / 10.16 / 11.70 -> 15.80 / 12.18 / 17.50
 * tok/s. On Zen 5, T1 had measured even with T0 (above). */
#define TILE_PF 2048
typedef struct tile_pf {
    int64_t ahead; /* bytes from the line read to the one asked for */
    int64_t left;  /* bytes of the row from the chunk's start */
    int64_t wrap;  /* added once ahead runs past the row's end */
} tile_pf;

/* rt rows of ldw bytes, the chunk starting done bytes into each row. */
INLINE tile_pf tile_pf_make(int rt, int64_t ldw, int64_t done)
{
    if (ldw >= TILE_PF) return (tile_pf){TILE_PF, ldw - done, (rt - 1) * ldw};
    return (tile_pf){(TILE_PF + ldw - 1) / ldw * rt * ldw, INT64_MAX, 0};
}

/* p: the line row a reads now, k bytes into the chunk. */
INLINE void tile_prefetch(const uint8_t *p, int64_t k, tile_pf f)
{
    _mm_prefetch((const char *)p + f.ahead + (k + f.ahead >= f.left ? f.wrap : 0), _MM_HINT_T1);
}

/* Rows r..r+3, tokens t0..t0+nt-1, one column chunk [c0, c0+len): the
 * weights are dequantised in registers, read from memory exactly once. */
INLINE void mk_fused(const int type, const int nt, const int bf, const dsr1_mm_job *j,
                     int64_t r, int t0, int64_t c0, int64_t len, float out[MR][NR])
{
    const dsr1_wmat *w = j->w;
    const int64_t g = type_group(type, w);
    /* bytes per row; prefetched as the FP8 GEMV does (tile_prefetch). On
     * Zen 4 the next tile's line into L2 had beaten 4 KiB along the row
     * into L1 (BF16 LM head 129280x7168, n = 1, 2 threads: 30.9 against
     * 27.5 GB/s); on Zen 5 tile_prefetch beat the next tile's line:
     * dsr1_matmul over 1.5 GB of 4096x7168 BF16 matrices, n = 1, 2
     * threads, alternated, 44-56 against 32-50 GB/s, 0.78-0.86 of a read
     * loop against 0.65-0.75 (rounds where both met the read loop's speed
     * left out). */
    const int64_t ldb = (w->cols * type_bits(type)) >> 3;
    const tile_pf pf = tile_pf_make(MR, ldb, (c0 * type_bits(type)) >> 3);
    const uint8_t *row[MR];
    __m512 acc[MR][NR];
#pragma GCC unroll 4
    for (int a = 0; a < MR; a++) {
        row[a] = row_base(type, w, r + a);
#pragma GCC unroll 6
        for (int b = 0; b < nt; b++) acc[a][b] = _mm512_setzero_ps();
    }
    int64_t k = 0;
    while (k + 32 <= len) {
        int64_t c = c0 + k, end = g ? (c / g + 1) * g - c0 : len;
        if (end > len) end = len;
        __m512 vs[MR];
        int4_tab tab[MR];
#pragma GCC unroll 4
        for (int a = 0; a < MR; a++) {
            float sa = fast_scale(type, w, r + a, c);
            vs[a] = _mm512_set1_ps(sa);
            if (type == DSR1_T_INT4) tab[a] = int4_table(sa);
        }
        for (; k + 32 <= end; k += 32) {
            __m512 lo[MR], hi[MR];
            __m512bh wv[MR];
#pragma GCC unroll 4
            for (int a = 0; a < MR; a++) {
                tile_prefetch(row[a] + ((c0 + k) * type_bits(type) >> 3),
                              (k * type_bits(type)) >> 3, pf);
                if (type == DSR1_T_INT4 && bf) {
                    wv[a] = int4x32_bf16(row[a] + (c0 + k) / 2, &tab[a]);
                } else if (type == DSR1_T_INT4) {
                    int4x32_tab(row[a] + (c0 + k) / 2, &tab[a], &lo[a], &hi[a]);
                } else {
                    load32(type, row[a], c0 + k, vs[a], &lo[a], &hi[a]);
                    if (bf) wv[a] = _mm512_cvtne2ps_pbh(hi[a], lo[a]);
                }
            }
            if (bf)
                step32_bf(nt, wv, j, t0, c0 + k, acc);
            else
                step32_f32(nt, lo, hi, j, t0, c0 + k, 0xffff, 0xffff, 1, acc);
        }
        if (k < end) break; /* a ragged group: the rest goes scalar */
    }
    fused_tail(nt, bf, j, r, t0, c0, k, len, acc);
#pragma GCC unroll 4
    for (int a = 0; a < MR; a++)
#pragma GCC unroll 6
        for (int b = 0; b < nt; b++) out[a][b] = hsum16(acc[a][b]);
}

#define FUSED_NT(type, bf)                                                              \
    switch (nt) {                                                                       \
    case 1: mk_fused(type, 1, bf, j, r, t0, c0, len, out); break;                       \
    case 2: mk_fused(type, 2, bf, j, r, t0, c0, len, out); break;                       \
    case 3: mk_fused(type, 3, bf, j, r, t0, c0, len, out); break;                       \
    case 4: mk_fused(type, 4, bf, j, r, t0, c0, len, out); break;                       \
    /* 5 and 6: BF16 mode only (f32 mode never gets more than 4, rows_float) */ \
    case 5:                                                                             \
        if (bf) mk_fused(type, 5, bf, j, r, t0, c0, len, out);                          \
        else DSR1_ASSERT(!"fused f32 tile of 5 tokens");                                \
        break;                                                                          \
    default:                                                                            \
        if (bf && nt == 6) mk_fused(type, 6, bf, j, r, t0, c0, len, out);               \
        else DSR1_ASSERT(!"fused tile of more than 6 tokens, or f32 of more than 4");   \
        break;                                                                          \
    }

#define FUSED_TYPE(name, type)                                                          \
    static void name(int nt, int bf, const dsr1_mm_job *j, int64_t r, int t0, int64_t c0, \
                     int64_t len, float out[MR][NR])                                    \
    {                                                                                   \
        if (bf) {                                                                       \
            FUSED_NT(type, 1)                                                           \
        } else {                                                                        \
            FUSED_NT(type, 0)                                                           \
        }                                                                               \
    }
FUSED_TYPE(fused_fp8, DSR1_T_FP8_E4M3)
FUSED_TYPE(fused_int8, DSR1_T_INT8)
FUSED_TYPE(fused_int4, DSR1_T_INT4)
FUSED_TYPE(fused_bf16, DSR1_T_BF16)

typedef void (*fused_fn)(int, int, const dsr1_mm_job *, int64_t, int, int64_t, int64_t,
                         float[MR][NR]);

/* The fused kernel for this matrix, or NULL (other types, odd layouts). */
static fused_fn fused_for(const dsr1_wmat *w)
{
    switch (w->type) {
    case DSR1_T_FP8_E4M3: return w->group > 0 && w->scale_type == DSR1_T_F32 ? fused_fp8 : NULL;
    case DSR1_T_INT8: return w->scale_type == DSR1_T_F32 ? fused_int8 : NULL;
    case DSR1_T_INT4:
        return (w->scale_type == DSR1_T_F16 || w->scale_type == DSR1_T_BF16) && w->group > 0
                   ? fused_int4 : NULL;
    case DSR1_T_BF16: return fused_bf16;
    default: return NULL;
    }
}

/* ---- drivers ------------------------------------------------------------------- */

/* y += a chunk's sums (the first chunk assigns): the canonical chunk order. */
static void add_chunk(const dsr1_mm_job *j, int64_t r, int t0, int rt, int nt, int64_t c0,
                      float out[MR][NR])
{
    for (int a = 0; a < rt; a++)
        for (int b = 0; b < nt; b++) {
            float *y = j->y + (t0 + b) * j->ldy + r + a;
            *y = c0 == 0 ? out[a][b] : *y + out[a][b];
        }
}

/* ---- FP8 in BF16 mode: exact codes, scale folded into x ----------------------- */

/* Two decoders give the same bf16 words: the shift/add one below (any
 * AVX-512 BF16 CPU) and the byte-table one after it (VBMI: Ice Lake and
 * later, Zen 4; job.vbmi). The GEMV and the panels pick per job. */

/* bf16 bits of the e4m3 subnormals m * 2^-9 (dsr1_mm_fp8_bf16), twice:
 * vpermw reads 5 index bits. */
static const uint16_t fp8_sub[32] = {
    0x0000, 0x3b00, 0x3b80, 0x3bc0, 0x3c00, 0x3c20, 0x3c40, 0x3c60,
    0x0000, 0x3b00, 0x3b80, 0x3bc0, 0x3c00, 0x3c20, 0x3c40, 0x3c60,
    0x0000, 0x3b00, 0x3b80, 0x3bc0, 0x3c00, 0x3c20, 0x3c40, 0x3c60,
    0x0000, 0x3b00, 0x3b80, 0x3bc0, 0x3c00, 0x3c20, 0x3c40, 0x3c60,
};

typedef struct fp8_lut {
    __m512i sub;
} fp8_lut;

INLINE fp8_lut fp8_lut_load(void) { return (fp8_lut){_mm512_loadu_si512(fp8_sub)}; }

/* 32 sign-extended codes -> bf16: normals by shift and add (exponent bias
 * 127 - 7), the exponent-0 codes replaced from the table (their low 5
 * bits are the mantissa), then the sign. */
INLINE __m512i fp8_words(__m512i v, fp8_lut l)
{
    __m512i lin = _mm512_add_epi16(_mm512_and_si512(_mm512_slli_epi16(v, 4), _mm512_set1_epi16(0x07f0)),
                                   _mm512_set1_epi16(0x3c00));
    __mmask32 sub = _mm512_testn_epi16_mask(v, _mm512_set1_epi16(0x78));
    __m512i m = _mm512_mask_permutexvar_epi16(lin, sub, v, l.sub);
    /* m | (v & 0x8000) */
    return _mm512_ternarylogic_epi32(m, v, _mm512_set1_epi16((short)0x8000), 0xf8);
}

INLINE __m512bh fp8x32_bf16(const uint8_t *p, fp8_lut l)
{
    return (__m512bh)fp8_words(_mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)p)), l);
}

/* The last, partial step: codes past `m` read as 0 (value 0). */
INLINE __m512bh fp8x32_bf16_mask(const uint8_t *p, int64_t m, fp8_lut l)
{
    __mmask32 k = m >= 32 ? 0xffffffffu : (__mmask32)((1u << m) - 1);
    return (__m512bh)fp8_words(_mm512_cvtepi8_epi16(_mm256_maskz_loadu_epi8(k, p)), l);
}

#include "fp8_vbmi.h"

/* The block scale of row r at column c (any scale type). */
INLINE float fp8_scale(const dsr1_wmat *w, int64_t r, int64_t c)
{
    if (w->scale_type != DSR1_T_F32) return dsr1_wmat_scale(w, r, c);
    int64_t g = w->group;
    return ((const float *)w->scale)[(r / g) * ((w->cols + g - 1) / g) + c / g];
}

/* xp[b][k] = bf16(x[t0 + b][c0 + k] * scale(r, c0 + k)) for k < len, zero
 * up to the next multiple of 32: x' of matmul_impl.h for row r's block.
 * Token by token (each x row read as one sequential run: x rows are often
 * a multiple of 4 KiB apart, and a step across 128 of them would touch
 * 128 pages and one cache set), the step scales looked up once. */
void dsr1_mm_fp8_prep_x(const dsr1_mm_job *j, int64_t r, int t0, int nb, int64_t c0, int64_t len,
                       uint16_t *xp, int64_t ldp)
{
    const dsr1_wmat *w = j->w;
    const int64_t padded = (len + 31) & ~(int64_t)31;
    /* A group that is not a multiple of 32 can change scale inside a
     * step: then one scale per column. */
    const int per_col = w->group % 32 != 0;
    _Alignas(64) float sc[DSR1_MM_KC_BF16 + 32];
    if (per_col) {
        for (int64_t k = 0; k < padded; k++) sc[k] = k < len ? fp8_scale(w, r, c0 + k) : 0.0f;
    } else if (w->scale_type == DSR1_T_F32) {
        /* The row's block scales walked group by group: fp8_scale's three
         * divisions per step were 4% of an FP8 decode's samples (perf,
         * Zen 5) - most of this function's time. */
        const int64_t g = w->group;
        const float *srow = (const float *)w->scale + (r / g) * ((w->cols + g - 1) / g);
        int64_t gi = c0 / g, next = (gi + 1) * g - c0;
        for (int64_t k = 0; k < padded; k += 32) {
            if (k >= next) gi++, next += g;
            sc[k] = srow[gi];
        }
    } else {
        for (int64_t k = 0; k < padded; k += 32) sc[k] = fp8_scale(w, r, c0 + k);
    }
    for (int b = 0; b < nb; b++) {
        const float *x = j->x + (t0 + b) * j->ldx + c0;
        uint16_t *o = xp + b * ldp;
        /* Runs of 8 KiB are too short for the hardware prefetcher to
         * ramp up: ask for the lines 2 KiB ahead, into the next row. */
        const float *next = b + 1 < nb ? x + j->ldx : x;
        for (int64_t k = 0; k < padded; k += 32) {
            int64_t m = len - k;
            __mmask16 m0 = m >= 16 ? 0xffff : m > 0 ? (__mmask16)((1u << m) - 1) : 0;
            __mmask16 m1 = m >= 32 ? 0xffff : m > 16 ? (__mmask16)((1u << (m - 16)) - 1) : 0;
            const float *pf = k + 512 < padded ? x + k + 512 : next + (k + 512 - padded);
            _mm_prefetch((const char *)pf, _MM_HINT_T0);
            _mm_prefetch((const char *)pf + 64, _MM_HINT_T0);
            __m512 s0 = per_col ? _mm512_load_ps(sc + k) : _mm512_set1_ps(sc[k]);
            __m512 s1 = per_col ? _mm512_load_ps(sc + k + 16) : s0;
            __m512 lo = _mm512_mul_ps(_mm512_maskz_loadu_ps(m0, x + k), s0);
            __m512 hi = _mm512_mul_ps(_mm512_maskz_loadu_ps(m1, x + k + 16), s1);
            _mm512_store_si512(o + k, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
        }
    }
}

/* GEMV tile: rows w[a] (stride ldw bytes) x tokens xp[b], codes decoded in
 * registers, each weight byte read once for all nt tokens. */
INLINE void mk_fp8(const int rt, const int nt, const uint8_t *w, int64_t ldw, const uint16_t *xp,
                   int64_t ldp, int64_t len, float out[MR][NR], tile_pf pf)
{
    const fp8_lut l = fp8_lut_load();
    __m512 acc[MR][NR];
#pragma GCC unroll 4
    for (int a = 0; a < rt; a++)
#pragma GCC unroll 4
        for (int b = 0; b < nt; b++) acc[a][b] = _mm512_setzero_ps();
    for (int64_t k = 0; k < len; k += 32) {
        __m512bh wv[MR];
#pragma GCC unroll 4
        for (int a = 0; a < rt; a++) {
            if (k % 64 == 0) tile_prefetch(w + a * ldw + k, k, pf);
            wv[a] = len - k >= 32 ? fp8x32_bf16(w + a * ldw + k, l)
                                  : fp8x32_bf16_mask(w + a * ldw + k, len - k, l);
        }
#pragma GCC unroll 4
        for (int b = 0; b < nt; b++) {
            __m512bh xv = (__m512bh)_mm512_load_si512(xp + b * ldp + k);
#pragma GCC unroll 4
            for (int a = 0; a < rt; a++) acc[a][b] = _mm512_dpbf16_ps(acc[a][b], wv[a], xv);
        }
    }
#pragma GCC unroll 4
    for (int a = 0; a < rt; a++)
#pragma GCC unroll 4
        for (int b = 0; b < nt; b++) out[a][b] = hsum16(acc[a][b]);
}

#define FP8_CASES(fn, ...)                                                                  \
    switch (rt * 8 + nt) {                                                                 \
    case 8 + 1: fn(1, 1, __VA_ARGS__); break;  case 8 + 2: fn(1, 2, __VA_ARGS__); break;   \
    case 8 + 3: fn(1, 3, __VA_ARGS__); break;  case 8 + 4: fn(1, 4, __VA_ARGS__); break;   \
    case 32 + 1: fn(4, 1, __VA_ARGS__); break; case 32 + 2: fn(4, 2, __VA_ARGS__); break;  \
    case 32 + 3: fn(4, 3, __VA_ARGS__); break; case 32 + 4: fn(4, 4, __VA_ARGS__); break;  \
    default: DSR1_ASSERT(!"fp8 tile shape");                                               \
    }

static void tile_fp8(int rt, int nt, const uint8_t *w, int64_t ldw, const uint16_t *xp,
                     int64_t ldp, int64_t len, float out[MR][NR], tile_pf pf)
{
    FP8_CASES(mk_fp8, w, ldw, xp, ldp, len, out, pf)
}

/* One 64-column step of mk_fp8_vbmi: rows' codes decoded, then the two
 * 32-column halves, each a canonical step (the second only when `two`). */
VBMI_INLINE void fp8_step_vbmi(const int rt, const int nt, const __m512i raw[MR], fp8_bregs t,
                               const uint16_t *xp, int64_t ldp, int two, __m512 acc[MR][NR])
{
    __m512i w0[MR], w1[MR];
#pragma GCC unroll 4
    for (int a = 0; a < rt; a++) fp8x64_words(raw[a], t, &w0[a], &w1[a]);
#pragma GCC unroll 4
    for (int b = 0; b < nt; b++) {
        __m512bh xv = (__m512bh)_mm512_load_si512(xp + b * ldp);
#pragma GCC unroll 4
        for (int a = 0; a < rt; a++) acc[a][b] = _mm512_dpbf16_ps(acc[a][b], (__m512bh)w0[a], xv);
    }
    if (!two) return;
#pragma GCC unroll 4
    for (int b = 0; b < nt; b++) {
        __m512bh xv = (__m512bh)_mm512_load_si512(xp + b * ldp + 32);
#pragma GCC unroll 4
        for (int a = 0; a < rt; a++) acc[a][b] = _mm512_dpbf16_ps(acc[a][b], (__m512bh)w1[a], xv);
    }
}

/* mk_fp8 with the byte-table decode: 64 columns a step; a ragged end
 * (masked load, codes past it read as 0) runs its second 32-column half
 * only when that holds columns, as mk_fp8 would. */
VBMI_INLINE void mk_fp8_vbmi(const int rt, const int nt, const uint8_t *w, int64_t ldw,
                             const uint16_t *xp, int64_t ldp, int64_t len, float out[MR][NR],
                             const fp8_btab *tab, tile_pf pf)
{
    const fp8_bregs t = fp8_bregs_load(tab);
    __m512 acc[MR][NR];
    __m512i raw[MR];
#pragma GCC unroll 4
    for (int a = 0; a < rt; a++)
#pragma GCC unroll 4
        for (int b = 0; b < nt; b++) acc[a][b] = _mm512_setzero_ps();
    int64_t k = 0;
    for (; k + 64 <= len; k += 64) {
#pragma GCC unroll 4
        for (int a = 0; a < rt; a++) {
            tile_prefetch(w + a * ldw + k, k, pf);
            raw[a] = _mm512_loadu_si512(w + a * ldw + k);
        }
        fp8_step_vbmi(rt, nt, raw, t, xp + k, ldp, 1, acc);
    }
    if (k < len) {
        __mmask64 m = ((__mmask64)1 << (len - k)) - 1;
#pragma GCC unroll 4
        for (int a = 0; a < rt; a++) raw[a] = _mm512_maskz_loadu_epi8(m, w + a * ldw + k);
        fp8_step_vbmi(rt, nt, raw, t, xp + k, ldp, len - k > 32, acc);
    }
#pragma GCC unroll 4
    for (int a = 0; a < rt; a++)
#pragma GCC unroll 4
        for (int b = 0; b < nt; b++) out[a][b] = hsum16(acc[a][b]);
}

VBMI void tile_fp8_vbmi(int rt, int nt, const uint8_t *w, int64_t ldw, const uint16_t *xp,
                        int64_t ldp, int64_t len, float out[MR][NR], const fp8_btab *tab,
                        tile_pf pf)
{
    FP8_CASES(mk_fp8_vbmi, w, ldw, xp, ldp, len, out, tab, pf)
}

/* fp8_panel with the byte-table decode. */
VBMI void fp8_panel_vbmi(const dsr1_wmat *w, int64_t r, int pr, int64_t c0, int64_t len,
                         uint16_t *buf, int64_t kc, const fp8_btab *tab)
{
    const fp8_bregs t = fp8_bregs_load(tab);
    for (int i = 0; i < pr; i++) {
        const uint8_t *q = (const uint8_t *)w->data + (r + i) * w->cols + c0;
        uint16_t *o = buf + i * kc;
        for (int64_t k = 0; k < len; k += 64) {
            __m512i w0, w1;
            /* the next panel's line in this place, T1
             * (18432x7168, 2 threads: n = 8 13.3 -> 12.2 ms, 16 18.0 ->
             * 16.8, 64 48.4-50.2 -> 47.4-47.8; 4 KiB along the row before) */
            _mm_prefetch((const char *)q + k + pr * w->cols, _MM_HINT_T1);
            fp8x64_words(fp8_load64(q + k, len - k), t, &w0, &w1);
            _mm512_store_si512(o + k, w0);
            if (len - k > 32) _mm512_store_si512(o + k + 32, w1);
        }
    }
}

/* Codes of rows [r, r+pr), chunk [c0, c0+len) into buf[i][kc], zero padded. */
static void fp8_panel(const dsr1_wmat *w, int64_t r, int pr, int64_t c0, int64_t len,
                      uint16_t *buf, int64_t kc)
{
    const fp8_lut l = fp8_lut_load();
    for (int i = 0; i < pr; i++) {
        const uint8_t *q = (const uint8_t *)w->data + (r + i) * w->cols + c0;
        for (int64_t k = 0; k < len; k += 32) {
            _mm_prefetch((const char *)q + k + pr * w->cols, _MM_HINT_T1); /* as fp8_panel_vbmi */
            __m512bh v = len - k >= 32 ? fp8x32_bf16(q + k, l) : fp8x32_bf16_mask(q + k, len - k, l);
            _mm512_store_si512(buf + i * kc + k, (__m512i)v);
        }
    }
}

static void add_chunk(const dsr1_mm_job *j, int64_t r, int t0, int rt, int nt, int64_t c0,
                      float out[MR][NR]);
static void tile_bf16(int rt, int nt, const uint16_t *wb, int64_t ldw, const uint16_t *xb,
                      int64_t ldx, int64_t len, float out[MR][NR]);

/* Rows [rb, re) of one scale block, tokens [t0, t0+nb), one chunk, with
 * x' already in xp: decoded 16-row panels that every token tile reuses. */
static void fp8_block_chunk(const dsr1_mm_job *j, int64_t rb, int64_t re, int t0, int nb,
                            int64_t c0, int64_t len, const uint16_t *xp, uint16_t *buf, int panel,
                            const fp8_btab *tab)
{
    const dsr1_wmat *w = j->w;
    const int64_t ld = DSR1_MM_FP8_LDP, padded = (len + 31) & ~(int64_t)31;
    float out[MR][NR];
    for (int64_t p = rb; p < re; p += panel) {
        int pr = (int)(re - p < panel ? re - p : panel);
        if (tab)
            fp8_panel_vbmi(w, p, pr, c0, len, buf, ld, tab);
        else
            fp8_panel(w, p, pr, c0, len, buf, ld);
        for (int b0 = 0; b0 < nb; b0 += NR) {
            int nt = nb - b0 < NR ? nb - b0 : NR;
            for (int i = 0; i < pr; i += MR) {
                int rt = pr - i < MR ? pr - i : MR;
                if (rt == MR) {
                    tile_bf16_y(nt, buf + i * ld, ld, xp + b0 * ld, ld, padded,
                                j->y + (t0 + b0) * j->ldy + p + i, j->ldy, c0 == 0);
                    continue;
                }
                tile_bf16(rt, nt, buf + i * ld, ld, xp + b0 * ld, ld, padded, out);
                add_chunk(j, p + i, t0 + b0, rt, nt, c0, out);
            }
        }
    }
}

/* ---- INT4 GEMV in BF16 mode ------------------------------------------------------ */

/* bf16(code * s) of the 16 codes in words i and i + 16 (int4x32_bf16's
 * table): the same single rounding as int4_table, bf16 part only. */
INLINE __m512i int4_btab(float s)
{
    const __m512 codes = _mm512_setr_ps(-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7);
    __m256i h = (__m256i)_mm512_cvtneps_pbh(_mm512_mul_ps(codes, _mm512_set1_ps(s)));
    return _mm512_inserti64x4(_mm512_castsi256_si512(h), h, 1);
}

INLINE float int4_scale(const uint16_t *p, int f16)
{
    return f16 ? _cvtsh_ss(*p) : dsr1_bf16_to_f32(*p);
}

/* Rows w[a] (stride ldw bytes, from column c0) x tokens of xb over a chunk
 * of len columns, whole groups of g (a multiple of 32): one table per row
 * and group, no division in the loop (scale pointers advance by one). */
INLINE void mk_int4(const int rt, const int nt, const uint8_t *w, int64_t ldw, const uint16_t *sc,
                    int64_t lds, int f16, int64_t g, const uint16_t *xb, int64_t ldx, int64_t len,
                    float out[MR][NR])
{
    __m512 acc[MR][NR];
#pragma GCC unroll 4
    for (int a = 0; a < rt; a++)
#pragma GCC unroll 4
        for (int b = 0; b < nt; b++) acc[a][b] = _mm512_setzero_ps();
    for (int64_t k0 = 0; k0 < len; k0 += g) {
        int4_tab tab[MR];
#pragma GCC unroll 4
        for (int a = 0; a < rt; a++) tab[a].b = int4_btab(int4_scale(sc + a * lds + k0 / g, f16));
        for (int64_t k = k0; k < k0 + g; k += 32) {
            __m512bh wv[MR];
#pragma GCC unroll 4
            for (int a = 0; a < rt; a++) {
                _mm_prefetch((const char *)w + a * ldw + k / 2 + PREFETCH, _MM_HINT_T0);
                wv[a] = int4x32_bf16(w + a * ldw + k / 2, &tab[a]);
            }
#pragma GCC unroll 4
            for (int b = 0; b < nt; b++) {
                __m512bh xv = (__m512bh)_mm512_loadu_si512(xb + b * ldx + k);
#pragma GCC unroll 4
                for (int a = 0; a < rt; a++) acc[a][b] = _mm512_dpbf16_ps(acc[a][b], wv[a], xv);
            }
        }
    }
#pragma GCC unroll 4
    for (int a = 0; a < rt; a++)
#pragma GCC unroll 4
        for (int b = 0; b < nt; b++) out[a][b] = hsum16(acc[a][b]);
}

static void tile_int4(int rt, int nt, const uint8_t *w, int64_t ldw, const uint16_t *sc,
                      int64_t lds, int f16, int64_t g, const uint16_t *xb, int64_t ldx,
                      int64_t len, float out[MR][NR])
{
    FP8_CASES(mk_int4, w, ldw, sc, lds, f16, g, xb, ldx, len, out)
}

/* Whether int4_gemv takes w: groups of whole 32-column steps that tile
 * the chunks, 16-bit scales. */
static int int4_gemv_ok(const dsr1_wmat *w)
{
    return w->type == DSR1_T_INT4 && w->group > 0 && w->group % 32 == 0 &&
           DSR1_MM_KC_BF16 % w->group == 0 && w->cols % w->group == 0 &&
           (w->scale_type == DSR1_T_F16 || w->scale_type == DSR1_T_BF16);
}

/* INT4 in BF16 mode, n <= 4: each 4-row tile streams its rows whole. */
static void int4_gemv(const dsr1_mm_job *j, int64_t r0, int64_t r1)
{
    const dsr1_wmat *w = j->w;
    const int64_t kc = DSR1_MM_KC_BF16, g = w->group, ng = w->cols / g;
    const int f16 = w->scale_type == DSR1_T_F16;
    float out[MR][NR];
    for (int64_t r = r0; r < r1;) {
        int rt = r1 - r >= MR ? MR : 1;
        for (int64_t c0 = 0; c0 < w->cols; c0 += kc) {
            int64_t len = w->cols - c0 < kc ? w->cols - c0 : kc;
            tile_int4(rt, j->n, (const uint8_t *)w->data + r * (w->cols / 2) + c0 / 2, w->cols / 2,
                      (const uint16_t *)w->scale + r * ng + c0 / g, ng, f16, g, j->xb + c0,
                      j->ldxb, len, out);
            add_chunk(j, r, 0, rt, j->n, c0, out);
        }
        r += rt;
    }
}

/* GEMV (n <= DSR1_MM_FP8_GV): x' of the whole row block first, then each 4-row tile
 * streams its rows from start to end (long sequential runs, which the
 * prefetchers follow; chunk by chunk across many rows they would not).
 * Profiled with the byte-table decode (perf cpu-clock, 2048x7168, n = 1,
 * one thread, Zen 4): x' preparation about 5% of the time, add_chunk
 * about 2%, the rest the tile kernel. 5 to 8 tokens: two passes of at most
 * 4 over each tile (the second reads its rows from L1/L2), where they went
 * through the decoded panels: the gemv harness (1 GB of R1-shape matrices
 * from DRAM, 2 threads, Zen 4, alternated), 2048x7168 and 7168x2048, n = 5
 * 13.5-13.8 -> 23.3-25.9 GB/s, 6 12.1-14.0 -> 22.0-22.9, 8 10.6-12.2 ->
 * 18.5-20.2; batch-8 decode of the FP8 file 34.8-38.7 -> 44.5-47.2 tok/s. */
static void fp8_gemv(const dsr1_mm_job *j, int64_t r0, int64_t r1)
{
    const dsr1_wmat *w = j->w;
    const int64_t kc = DSR1_MM_KC_BF16, g = w->group, ldp = j->ldxb;
    uint16_t *xp = j->task_mem; /* [n][ldxb] */
    float out[MR][NR];
    fp8_btab tab;
    if (j->vbmi) fp8_btab_init(&tab);
    for (int64_t rb = r0; rb < r1;) {
        int64_t re = (rb / g + 1) * g < r1 ? (rb / g + 1) * g : r1;
        for (int64_t c0 = 0; c0 < w->cols; c0 += kc)
            dsr1_mm_fp8_prep_x(j, rb, 0, j->n, c0, w->cols - c0 < kc ? w->cols - c0 : kc, xp + c0, ldp);
        for (int64_t r = rb; r < re;) {
            int rt = re - r >= MR ? MR : 1;
            for (int t0 = 0; t0 < j->n; t0 += 4) { /* the tile's rows again from L1/L2 */
                const int nt = j->n - t0 < 4 ? j->n - t0 : 4;
                for (int64_t c0 = 0; c0 < w->cols; c0 += kc) {
                    int64_t len = w->cols - c0 < kc ? w->cols - c0 : kc;
                    const uint8_t *q = (const uint8_t *)w->data + r * w->cols + c0;
                    tile_pf pf = tile_pf_make(rt, w->cols, c0);
                    if (j->vbmi)
                        tile_fp8_vbmi(rt, nt, q, w->cols, xp + t0 * ldp + c0, ldp, len, out, &tab, pf);
                    else
                        tile_fp8(rt, nt, q, w->cols, xp + t0 * ldp + c0, ldp, len, out, pf);
                    add_chunk(j, r, t0, rt, nt, c0, out);
                }
            }
            r += rt;
        }
        rb = re;
    }
}

/* FP8 weights in BF16 mode, more than 4 tokens: per token block, scale
 * block and chunk, x' is prepared once (task_mem) and shared by the
 * block's rows, which go through decoded 16-row panels. */
static void rows_fp8_bf16(const dsr1_mm_job *j, int64_t r0, int64_t r1)
{
    if (j->n <= DSR1_MM_FP8_GV) {
        fp8_gemv(j, r0, r1);
        return;
    }
    const dsr1_wmat *w = j->w;
    const int64_t kc = DSR1_MM_KC_BF16, g = w->group;
    uint16_t *xp = j->task_mem; /* [DSR1_MM_FP8_TB][DSR1_MM_FP8_LDP] */
    _Alignas(64) uint16_t sbuf[PANEL * DSR1_MM_FP8_LDP];
    /* The big panel after x' in the task's scratch when it is there. */
    size_t xbytes = (size_t)(j->n < DSR1_MM_FP8_TB ? j->n : DSR1_MM_FP8_TB) * DSR1_MM_FP8_LDP * 2;
    int big = j->task_bytes >= xbytes + DSR1_MM_BIG_BYTES;
    uint16_t *buf = big ? (uint16_t *)((char *)j->task_mem + xbytes) : sbuf;
    int panel = big ? DSR1_MM_BIG_PANEL : PANEL;
    fp8_btab tab;
    if (j->vbmi) fp8_btab_init(&tab);
    for (int t0 = 0; t0 < j->n; t0 += DSR1_MM_FP8_TB) {
        int nb = j->n - t0 < DSR1_MM_FP8_TB ? j->n - t0 : DSR1_MM_FP8_TB;
        for (int64_t rb = r0; rb < r1;) {
            int64_t re = (rb / g + 1) * g < r1 ? (rb / g + 1) * g : r1;
            for (int64_t c0 = 0; c0 < w->cols; c0 += kc) {
                int64_t len = w->cols - c0 < kc ? w->cols - c0 : kc;
                dsr1_mm_fp8_prep_x(j, rb, t0, nb, c0, len, xp, DSR1_MM_FP8_LDP);
                fp8_block_chunk(j, rb, re, t0, nb, c0, len, xp, buf, panel, j->vbmi ? &tab : NULL);
            }
            rb = re;
        }
    }
}

/* The BF16 weights of the panel chunk after this one (`rows` rows from
 * r, `len` columns from c0; rows = 0: none), asked into L2 a slice per
 * token tile while this chunk's tiles run, so that its panel copy finds
 * them there instead of waiting on DRAM line by line (the copy had been
 * 4.5-6% of a 512-token BF16 matmul's samples, stalled on its loads).
 * R1-shape BF16 file, prefill 512, Zen 4, 2 threads, the two builds
 * alternated in one process: ahead in 7 of 8 rounds, +1 to +6%. */
typedef struct next_chunk {
    int64_t r, c0, len;
    int rows;
} next_chunk;

static void prefetch_slice(const dsr1_wmat *w, const next_chunk *nc, int t, int tiles)
{
    const int64_t lpr = (nc->len * 2 + 63) / 64, lines = lpr * nc->rows;
    const char *base = (const char *)((const uint16_t *)w->data + nc->r * w->cols + nc->c0);
    /* asm, not _mm_prefetch: a loop of nothing but prefetch builtins has
     * no side effects in gcc's eyes, and gcc 12 deletes it whole */
    for (int64_t l = lines * t / tiles; l < lines * (t + 1) / tiles; l++)
        __asm__ volatile("prefetcht1 %0" : : "m"(*(base + (l / lpr) * w->cols * 2 + (l % lpr) * 64)));
}

/* Dequantise rows [r, r+pr) of one chunk into buf (row stride ld
 * elements), then every token tile x row tile from there. */
static void panel_chunk(const dsr1_mm_job *j, int64_t r, int pr, int64_t c0, int64_t len,
                        int64_t ld, int bf, float *buf, const next_chunk *nc)
{
    for (int i = 0; i < pr; i++)
        deq_span(j->w, r + i, c0, len, bf ? (void *)((uint16_t *)buf + i * ld) : (void *)(buf + i * ld), bf);
    const int tiles = (j->n + NR - 1) / NR;
    for (int t0 = 0; t0 < j->n; t0 += NR) {
        int nt = j->n - t0 < NR ? j->n - t0 : NR;
        if (nc->rows) prefetch_slice(j->w, nc, t0 / NR, tiles);
        for (int i = 0; i < pr; i += MR) {
            int rt = pr - i < MR ? pr - i : MR;
            float out[MR][NR];
            if (bf && rt == MR) {
                tile_bf16_y(nt, (uint16_t *)buf + i * ld, ld, j->xb + t0 * j->ldxb + c0, j->ldxb,
                            (len + 31) & ~(int64_t)31, j->y + t0 * j->ldy + r + i, j->ldy, c0 == 0);
                continue;
            }
            if (bf)
                tile_bf16(rt, nt, (uint16_t *)buf + i * ld, ld, j->xb + t0 * j->ldxb + c0, j->ldxb,
                          (len + 31) & ~(int64_t)31, out);
            else
                tile_f32(rt, nt, buf + i * ld, ld, j->x + t0 * j->ldx + c0, j->ldx, len, out);
            add_chunk(j, r + i, t0, rt, nt, c0, out);
        }
    }
}

/* BF16 weights, one token, BF16 mode (batch-1 decode of a BF16 file):
 * eight rows side by side, as ik_llama.cpp's BF16 GEMV reads them, each
 * 32-column step's weights loaded as the vdpbf16ps operand directly (the
 * bits load32 gives by widening to f32 and rounding back), the lines
 * asked for into L2 by tile_prefetch (2 KiB ahead along the row). The
 * order is mk_fused's: per 2048-column chunk one accumulator a row, its lane sum
 * added to the row's total chunk by chunk, so the same bits as the
 * portable kernel (kernels_bf16_gemv_matches_portable). Measured in the
 * model, where the kernel harness had misled (the R1-shape BF16 file,
 * `dsr1 bench --prompt 1 --gen 16|32`, builds in separate processes
 * rotated, AMD EPYC Zen 4, 2 threads; runs split by the decode speed's
 * two clusters, the machine's memory spells): against the 4-row fused
 * tile, this build, 10 rounds: slow-cluster medians 5.65 -> 6.12 tok/s
 * (3 and 4 runs), fast 8.05 -> 8.41 (7 and 6), ahead in 8 of 9 rounds
 * whose two runs fell in one cluster; its prototype, 12 rounds: slow
 * 5.94 -> 6.02 (10 and 9 runs), fast 8.09 -> 8.61 (2 and 3), 7 of 9. The same
 * eight rows without the prefetch: even (6.01 and 7.99). One row at a
 * time lost (fast cluster 8.46-8.76 -> 7.98-8.44, 5 of 6 rounds), and
 * with load32's conversion kept, clearly (5.86-6.26 -> 4.87-5.69).
 *
 * pf = 0 leaves the stream to the hardware prefetcher, the decoder's
 * measured choice as for the INT8 and INT4 GEMVs (pftune.h; j->hwpf). On
 * an Emerald Rapids Xeon the software prefetch lost: a /tmp harness
 * alternating the two over 2.9 GB of BF16 matrices (the LM head, 24
 * expert shapes, three 7168x16384) in one process, 2 threads, 21 passes
 * each, two runs: medians 28.4 -> 32.6 and 26.3 -> 30.0 GB/s, fastest
 * passes 35.9 -> 36.5 and 31.3 -> 34.5. On Zen 4 it won (above).
 *
 * Rows shorter than a 4 KiB page always take the software prefetch
 * (dsr1_mm_bf16_gemv_swpf), asked for whole 8-row groups ahead
 * (tile_pf_make: the same row of a later group, never a line this group
 * is reading now), whatever the decoder chose: q_b (1536 columns, 3 KiB
 * rows) and MLA's per-head matrices (256 B and 1 KiB rows). The hardware
 * prefetcher follows 4 KiB pages, and with several short rows of one
 * page read side by side it fell behind: in one process on the Emerald
 * Rapids Xeon (2 threads, 2 MiB pages, the variants alternated pass by
 * pass), twelve 24576x1536 matrices read 1.03-1.25x as fast this way as
 * with the hardware prefetcher alone (24.1-32.1 against 23.2-27.0 GB/s,
 * six passes), where the 2 KiB-along-the-row prefetch before it read
 * 0.86-0.95x, its lines for most of a row falling in the next row of the
 * same group; 24 layers' per-head matrices (two threads, each its heads'
 * 512x128 and 128x512 calls, as the attention runs them) took 9.3-13.5 /
 * 10.8-13.5 us a call against 13.0-18.3 / 13.0-14.1 with the hardware
 * prefetcher (five passes). In the model (R1-shape BF16 file, `bench
 * --prompt 1 --gen 32`, a per-shape timing build, the builds alternated,
 * three rounds): q_b 23.1 / 25.7 / 22.8 -> 27.7 / 26.1 / 26.9 GB/s, the
 * per-head calls 15.8 / 15.2 / 17.6 -> 11.8 / 13.6 / 12.3 us (512x128)
 * and 14.3 / 12.6 / 14.9 -> 11.4 / 12.3 / 11.7 (128x512): about 2 ms of
 * a ~185 ms step. Rows of a page or more keep the decoder's choice: at
 * 7168x2048 (4 KiB rows) the hardware prefetcher read 1.02-2.3x the
 * software one (six passes). */
#define BF16_GV_ROWS 8
INLINE void bf16_gemv_rows(const int rt, const int pf, const uint16_t *w, int64_t cols,
                           const uint16_t *xb, float *y)
{
    float tot[BF16_GV_ROWS] = {0};
    for (int64_t c0 = 0; c0 < cols; c0 += DSR1_MM_KC_BF16) {
        const int64_t len = cols - c0 < DSR1_MM_KC_BF16 ? cols - c0 : DSR1_MM_KC_BF16;
        const tile_pf tp = tile_pf_make(rt, cols * 2, c0 * 2);
        __m512 acc[BF16_GV_ROWS];
#pragma GCC unroll 8
        for (int a = 0; a < rt; a++) acc[a] = _mm512_setzero_ps();
        for (int64_t k = c0; k < c0 + len; k += 32) {
            const __m512bh xv = (__m512bh)_mm512_loadu_si512(xb + k);
#pragma GCC unroll 8
            for (int a = 0; a < rt; a++) {
                const uint16_t *p = w + a * cols + k;
                if (pf) tile_prefetch((const uint8_t *)p, (k - c0) * 2, tp);
                acc[a] = _mm512_dpbf16_ps(acc[a], (__m512bh)_mm512_loadu_si512(p), xv);
            }
        }
#pragma GCC unroll 8
        for (int a = 0; a < rt; a++) {
            float o = hsum16(acc[a]);
            tot[a] = c0 == 0 ? o : tot[a] + o; /* add_chunk's order */
        }
    }
    for (int a = 0; a < rt; a++) y[a] = tot[a];
}

/* Rows [r0, r1) of a BF16 matrix with cols a multiple of 32, n = 1. */
static void bf16_gemv(const dsr1_mm_job *j, int64_t r0, int64_t r1)
{
    const uint16_t *w = j->w->data;
    const int64_t cols = j->w->cols;
    int64_t r = r0;
    if (dsr1_mm_bf16_gemv_swpf(cols, j->hwpf))
        for (; r + BF16_GV_ROWS <= r1; r += BF16_GV_ROWS)
            bf16_gemv_rows(BF16_GV_ROWS, 1, w + r * cols, cols, j->xb, j->y + r);
    else
        for (; r + BF16_GV_ROWS <= r1; r += BF16_GV_ROWS)
            bf16_gemv_rows(BF16_GV_ROWS, 0, w + r * cols, cols, j->xb, j->y + r);
    for (; r < r1; r++) bf16_gemv_rows(1, 1, w + r * cols, cols, j->xb, j->y + r);
}

/* F32 and BF16 modes (see the file comment). Up to 4 tokens, whole 4-row
 * tiles go through the fused kernel; everything else through panels: in
 * BF16 mode with the task's scratch, DSR1_MM_BIG_PANEL rows (each 6-token
 * tile of x, read from L3, then serves 64 rows instead of 16) at a row
 * stride off 4 KiB (rows 4 KiB apart would share L1 sets). */
static void rows_float(const dsr1_mm_job *j, int64_t r0, int64_t r1, int bf)
{
    const dsr1_wmat *w = j->w;
    if (bf && j->n == 1 && w->type == DSR1_T_BF16 && w->cols % 32 == 0) {
        bf16_gemv(j, r0, r1);
        return;
    }
    const int64_t kc = bf ? DSR1_MM_KC_BF16 : DSR1_MM_KC_F32;
    /* One buffer serves both: 16 rows x 1024 f32 = 16 rows x 2048 bf16. */
    _Alignas(64) float buf[PANEL * DSR1_MM_KC_F32];
    fused_fn fused = j->n <= 4 || (bf && w->type == DSR1_T_BF16 && j->n <= FUSED_BF_N) ? fused_for(w) : NULL;
    int big = bf && !fused && j->task_bytes >= DSR1_MM_BIG_BYTES;
    int64_t panel = fused ? MR : big ? DSR1_MM_BIG_PANEL : PANEL;
    int64_t ld = big ? DSR1_MM_FP8_LDP : kc;
    float *pbuf = big ? j->task_mem : buf;
    for (int64_t r = r0; r < r1; r += panel) {
        int pr = (int)(r1 - r < panel ? r1 - r : panel);
        for (int64_t c0 = 0; c0 < w->cols; c0 += kc) {
            int64_t len = w->cols - c0 < kc ? w->cols - c0 : kc;
            if (fused && pr == MR) {
                /* tokens 6 at a time: the later groups re-read the tile's
                 * rows from L1, not DRAM */
                for (int t0 = 0; t0 < j->n; t0 += NR) {
                    int nt = j->n - t0 < NR ? j->n - t0 : NR;
                    float out[MR][NR];
                    fused(nt, bf, j, r, t0, c0, len, out);
                    add_chunk(j, r, t0, MR, nt, c0, out);
                }
            } else {
                /* the next chunk: along the row, else the next panel's first */
                next_chunk nc = {r, c0 + kc, 0, 0};
                if (nc.c0 >= w->cols) nc = (next_chunk){r + panel, 0, 0, 0};
                if (bf && w->type == DSR1_T_BF16 && nc.r < r1) {
                    nc.rows = (int)(r1 - nc.r < panel ? r1 - nc.r : panel);
                    nc.len = w->cols - nc.c0 < kc ? w->cols - nc.c0 : kc;
                }
                panel_chunk(j, r, pr, c0, len, ld, bf, pbuf, &nc);
            }
        }
    }
}

/* Row r's scale of a one-scale-per-row INT8 matrix: the float32 array
 * read in place, other scale types through dsr1_wmat_scale (the same value
 * either way). Its call and switch per row cost: batch-1 decode steps
 * alternating the two in one process (R1-shape INT8 file, Zen 5, three
 * runs): LM head 129280x7168 51.4 -> 54.1, 44.3 -> 46.5, 50.5 -> 51.8
 * GB/s, MLA's per-head 512x128 4.9 -> 4.7, 8.6 -> 6.7, 6.8 -> 6.6 us a
 * call; steps +3.2, +2.8, +1.5% (a null alternation -2.1%). */
INLINE float i8_scale(const dsr1_wmat *w, int64_t r)
{
    return w->scale_type == DSR1_T_F32 ? ((const float *)w->scale)[r] : dsr1_wmat_scale(w, r, 0);
}

/* W8A8, one scale per row, many tokens: integer dots are exact, so they can
 * be cut into column chunks freely. A 16-row panel x 2048-column chunk of W
 * stays in L1/L2 while every 6-token tile of x streams past it, and each
 * x tile serves all four 4-row subtiles; dots add up in dot[][] (exact). */
#define I8_KC 2048
#define I8_TB 512 /* tokens per block of dot[][] */
static void rows_int8_panel(const dsr1_mm_job *j, int64_t r0, int64_t r1)
{
    const dsr1_wmat *w = j->w;
    const int8_t *q = w->data;
    int32_t dot[PANEL][I8_TB]; /* 32 KB of stack */
    for (int64_t r = r0; r < r1; r += PANEL) {
        int pr = (int)(r1 - r < PANEL ? r1 - r : PANEL);
        for (int tb = 0; tb < j->n; tb += I8_TB) {
            int nb = j->n - tb < I8_TB ? j->n - tb : I8_TB;
            for (int64_t c0 = 0; c0 < w->cols; c0 += I8_KC) {
                int64_t len = w->cols - c0 < I8_KC ? w->cols - c0 : I8_KC;
                for (int t0 = tb; t0 < tb + nb; t0 += NR) {
                    int nt = tb + nb - t0 < NR ? tb + nb - t0 : NR;
                    for (int i = 0; i < pr; i += MR) {
                        int rt = pr - i < MR ? pr - i : MR;
                        int32_t d[MR][NR];
                        tile_i8(rt, nt, q + (r + i) * w->cols + c0, w->cols,
                                j->xq + t0 * j->ldxq + c0, j->ldxq, len, d);
                        for (int a = 0; a < rt; a++)
                            for (int b = 0; b < nt; b++)
                                dot[i + a][t0 - tb + b] = (c0 ? dot[i + a][t0 - tb + b] : 0) + d[a][b];
                    }
                }
            }
            float sw[PANEL];
            for (int a = 0; a < pr; a++) sw[a] = i8_scale(w, r + a);
            /* Token-major, so each token's rows are one cache line of y. */
            for (int b = 0; b < nb; b++)
                for (int a = 0; a < pr; a++)
                    j->y[(tb + b) * j->ldy + r + a] =
                        (float)(dot[a][b] - 128 * j->xsum[tb + b]) * j->xs[tb + b] * sw[a];
        }
    }
}

/* acc += dots of w's unsigned bytes and x's signed ones, the accumulator
 * tied to its register ("+v"): with the intrinsic GCC 12 copied every
 * accumulator between registers each step and spilled one (perf); 512x7168
 * from L3, 2 threads, n = 8: 36-39 GB/s that way, 45 tied. */
INLINE __m512i gm_dp(__m512i acc, __m512i w, __m512i x)
{
    __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(w), "v"(x));
    return acc;
}

/* W8A8 GEMV (n <= 4 tokens, one scale per row; rows longer than GEMV_LONG
 * at 1-2 tokens: gemv_i8_tile4 below): one row at a time, front
 * to back, so a task's weights are read as one sequential stream. The
 * 4-row tiles of rows_int8 below read four rows side by side: four
 * streams, which this machine's prefetchers follow worse, the worse the
 * shorter the rows. A /tmp harness (dsr1_matmul at n = 1 over 1 GB of
 * matrices in DRAM, 2 threads, AMD EPYC Zen 4; each round as a ratio to
 * a plain read loop run right after it; the build before and this one
 * alternated, 3 rounds each, one run): 7168x2048 (an expert's down
 * projection) 0.67-0.85 tiled, 0.92-1.00 this way; 24576x1536 (q_b)
 * 0.73-0.82 and 0.88-1.02; 32768x512 0.53-0.58 and 0.98-1.04; 2048x7168
 * even (0.94-1.02 and 0.77-1.00). The dots are exact integers, so the
 * order of the sums does not matter: u accumulators per token break the
 * dependency chain. Each line is asked for GEMV_PF bytes ahead into L2
 * (a prototype without it: 0.74-0.90 on the longer shapes).
 * With 3 or 4 tokens of long rows the tiles stay: x then fills most of
 * L1 and is loaded once per row instead of once per 4 rows (2048x7168,
 * n = 3-4: 0.61-0.72 this way, 0.75-0.86 tiled); with x up to 8 KiB the
 * two are even or this one ahead (7168x2048, n = 3: 0.90-0.94 vs 0.69-0.84).
 * pf = 0 leaves the stream to the hardware prefetcher: on Zen 5 that wins
 * while memory is idle and loses while other tenants load it, so the
 * decoder measures both while decoding (pftune.h; j->hwpf). */
#define GEMV_PF 2048
INLINE void gemv_i8_row(const int nt, const int pf, const int8_t *row, int64_t cols, const int8_t *xq,
                        int64_t ldx, int32_t dot[4])
{
    enum { U = 4 };
    const int u = nt == 1 ? 4 : 2; /* accumulators per token */
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    __m512i acc[U][4];
#pragma GCC unroll 4
    for (int i = 0; i < u; i++)
#pragma GCC unroll 4
        for (int b = 0; b < nt; b++) acc[i][b] = _mm512_setzero_si512();
    int64_t k = 0;
    for (; k + 64 * u <= cols; k += 64 * u) {
#pragma GCC unroll 4
        for (int i = 0; i < u; i++) {
            if (pf) _mm_prefetch((const char *)row + k + 64 * i + GEMV_PF, _MM_HINT_T1);
            __m512i wv = _mm512_xor_si512(_mm512_loadu_si512(row + k + 64 * i), flip);
#pragma GCC unroll 4
            for (int b = 0; b < nt; b++)
                acc[i][b] = _mm512_dpbusd_epi32(acc[i][b], wv, _mm512_loadu_si512(xq + b * ldx + k + 64 * i));
        }
    }
    for (; k < cols; k += 64) { /* whole 64s, then a masked end (w is not padded) */
        __mmask64 m = cols - k >= 64 ? ~(__mmask64)0 : ((__mmask64)1 << (cols - k)) - 1;
        __m512i wv = _mm512_xor_si512(_mm512_maskz_loadu_epi8(m, row + k), flip);
#pragma GCC unroll 4
        for (int b = 0; b < nt; b++)
            acc[0][b] = _mm512_dpbusd_epi32(acc[0][b], wv, _mm512_maskz_loadu_epi8(m, xq + b * ldx + k));
    }
#pragma GCC unroll 4
    for (int b = 0; b < nt; b++) {
        __m512i s = acc[0][b];
#pragma GCC unroll 4
        for (int i = 1; i < u; i++) s = _mm512_add_epi32(s, acc[i][b]);
        dot[b] = _mm512_reduce_add_epi32(s);
    }
}

/* dot[a] = the lane sum of v_a, a = 0..3 (exact int32): lanes of the four
 * interleaved, then the four 128-bit quarters added. */
INLINE void i8_sum4(__m512i v0, __m512i v1, __m512i v2, __m512i v3, int32_t dot[4])
{
    __m512i s01 = _mm512_add_epi32(_mm512_unpacklo_epi32(v0, v1), _mm512_unpackhi_epi32(v0, v1));
    __m512i s23 = _mm512_add_epi32(_mm512_unpacklo_epi32(v2, v3), _mm512_unpackhi_epi32(v2, v3));
    __m512i s = _mm512_add_epi32(_mm512_unpacklo_epi64(s01, s23), _mm512_unpackhi_epi64(s01, s23));
    __m256i h = _mm256_add_epi32(_mm512_castsi512_si256(s), _mm512_extracti64x4_epi64(s, 1));
    __m128i q = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
    _mm_storeu_si128((__m128i *)dot, q);
}

/* Short rows (cols <= 256: MLA's per-head absorb matrices, 128 columns).
 * gemv_i8_row runs them through its masked tail, one reduction per row,
 * and on Zen 5 the hardware prefetcher did not follow those masked
 * loads. Here four rows go together with plain loads for whole 64-byte
 * steps, one transposing reduction gives their four dots (exact
 * integers: any order is the same sum), and every line is asked for
 * SHORT_PF bytes ahead into L1. dsr1_matmul over 200 MB of 512x128 INT8
 * matrices, one thread (as the per-head calls run), Zen 5, three
 * alternating rounds: 5.1-5.3 GB/s before, 16.8-21.6 this way; the
 * distance 1, 2, 4, 8, 16 KiB (alternating rounds): 4 KiB best. */
#define SHORT_PF 4096
INLINE void gemv_i8_short4(const int nt, const int8_t *w, int64_t cols, const int8_t *xq, int64_t ldx,
                           int32_t dot[4][4])
{
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    __m512i acc[4][4];
#pragma GCC unroll 4
    for (int a = 0; a < 4; a++)
#pragma GCC unroll 4
        for (int b = 0; b < nt; b++) acc[a][b] = _mm512_setzero_si512();
    for (int64_t k = 0; k < cols; k += 64) {
        __mmask64 m = cols - k >= 64 ? ~(__mmask64)0 : ((__mmask64)1 << (cols - k)) - 1;
        __m512i xv[4];
        const int whole = cols - k >= 64;
#pragma GCC unroll 4
        for (int b = 0; b < nt; b++) xv[b] = _mm512_maskz_loadu_epi8(m, xq + b * ldx + k);
#pragma GCC unroll 4
        for (int a = 0; a < 4; a++) {
            const int8_t *p = w + a * cols + k;
            _mm_prefetch((const char *)p + SHORT_PF, _MM_HINT_T0);
            __m512i wv = _mm512_xor_si512(whole ? _mm512_loadu_si512(p) : _mm512_maskz_loadu_epi8(m, p), flip);
#pragma GCC unroll 4
            for (int b = 0; b < nt; b++) acc[a][b] = _mm512_dpbusd_epi32(acc[a][b], wv, xv[b]);
        }
    }
#pragma GCC unroll 4
    for (int b = 0; b < nt; b++) i8_sum4(acc[0][b], acc[1][b], acc[2][b], acc[3][b], dot[b]);
}

/* Long rows (more than GEMV_LONG columns: R1's o_proj, 16384, and dense
 * FFN down, 18432) at 1 or 2 tokens: x's codes (16-36 KiB) no longer stay
 * in L1 beside the weight stream, so a row at a time reloads them from L2
 * for every row. Here four rows go side by side and each x vector serves
 * all four, the lines asked for ahead as the FP8 GEMV does
 * (tile_prefetch). Exact integer dots, so the same bits. Measured in the
 * model (R1-shape INT8 file, AMD EPYC Zen 5, 2 threads, batch-1 decode
 * steps alternating the two ways in one process, 7 runs): 7168x16384
 * 41.5-45.2 -> 45.8-52.7 GB/s, 7168x18432 37.6-43.1 -> 42.8-48.6 (even
 * in one run); the whole step 1.0-4.6% faster in the 5 runs that tiled
 * these shapes only. Rows of 7168 columns or fewer keep the row-at-a-time
 * stream, which stayed ahead there (2048 and 1536 columns 48-49 against
 * 41-42 GB/s tiled; the LM head 55-57 against 49-53). Without the
 * software prefetch the tiles ran even (3 runs). On an Emerald Rapids
 * Xeon it went the other way: a /tmp harness over 1.3 GB of R1 INT8
 * shapes (the LM head, 2048x7168, 7168x2048), 2 threads, three runs,
 * four rows 26.4-27.2 GB/s median against 23.2-23.3 one at a time. So
 * narrower rows take the tiles too when the decoder's pftune picks
 * DSR1_GEMV_I8T4 (j->i8t4). */
#define GEMV_LONG 8192
INLINE void gemv_i8_tile4(const int nt, const int8_t *w, int64_t cols, const int8_t *xq, int64_t ldx,
                          int32_t dot[4][4])
{
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    __m512i acc[4][2]; /* nt = 1: two chains per row over alternate steps; 2: one per token */
    const tile_pf pf = tile_pf_make(4, cols, 0);
#pragma GCC unroll 4
    for (int a = 0; a < 4; a++) acc[a][0] = acc[a][1] = _mm512_setzero_si512();
    int64_t k = 0;
    for (; k + 128 <= cols; k += 128) {
        __m512i x00 = _mm512_loadu_si512(xq + k), x01 = _mm512_loadu_si512(xq + k + 64), x10, x11;
        if (nt == 2) x10 = _mm512_loadu_si512(xq + ldx + k), x11 = _mm512_loadu_si512(xq + ldx + k + 64);
#pragma GCC unroll 4
        for (int a = 0; a < 4; a++) {
            const uint8_t *p = (const uint8_t *)w + a * cols + k;
            tile_prefetch(p, k, pf);
            tile_prefetch(p + 64, k + 64, pf);
            __m512i w0 = _mm512_xor_si512(_mm512_loadu_si512(p), flip);
            __m512i w1 = _mm512_xor_si512(_mm512_loadu_si512(p + 64), flip);
            if (nt == 1) {
                acc[a][0] = gm_dp(acc[a][0], w0, x00);
                acc[a][1] = gm_dp(acc[a][1], w1, x01);
            } else {
                acc[a][0] = gm_dp(gm_dp(acc[a][0], w0, x00), w1, x01);
                acc[a][1] = gm_dp(gm_dp(acc[a][1], w0, x10), w1, x11);
            }
        }
    }
    for (; k < cols; k += 64) { /* whole 64s, then a masked end (w is not padded) */
        __mmask64 m = cols - k >= 64 ? ~(__mmask64)0 : ((__mmask64)1 << (cols - k)) - 1;
        __m512i x0 = _mm512_maskz_loadu_epi8(m, xq + k);
        __m512i x1 = nt == 2 ? _mm512_maskz_loadu_epi8(m, xq + ldx + k) : x0;
#pragma GCC unroll 4
        for (int a = 0; a < 4; a++) {
            __m512i wv = _mm512_xor_si512(_mm512_maskz_loadu_epi8(m, w + a * cols + k), flip);
            acc[a][0] = gm_dp(acc[a][0], wv, x0);
            if (nt == 2) acc[a][1] = gm_dp(acc[a][1], wv, x1);
        }
    }
    __m512i s[2][4];
#pragma GCC unroll 4
    for (int a = 0; a < 4; a++) {
        s[0][a] = nt == 1 ? _mm512_add_epi32(acc[a][0], acc[a][1]) : acc[a][0];
        s[1][a] = acc[a][1];
    }
    for (int b = 0; b < nt; b++) i8_sum4(s[b][0], s[b][1], s[b][2], s[b][3], dot[b]); /* dot[b][a]: row a */
}

/* Rows r0..r0+3 from their exact dots (dot[b][a]: token b, row a): y =
 * (dot - 128 xsum) * xs * s, the steps and order of the row loop below,
 * four rows per vector. With 128-column rows (MLA's per-head absorb) the
 * scalar form was about half of this kernel's samples from L2 (perf, one
 * thread, Zen 5): per row and token a reload of the job's fields, an
 * imul, two multiplies and a store, for a dot of two cache lines.
 * dsr1_matmul over 4 MB of 512x128 matrices, one thread, the two builds
 * alternated 4 times: 28-37 -> 51-54 GB/s. In the model (from DRAM, two
 * threads' per-head calls) the absorb's time did not change (307-372
 * against 303-382 us a layer): memory holds it there. */
INLINE void i8_out4(const dsr1_mm_job *j, int64_t r0, int nt, int32_t dot[4][4])
{
    const dsr1_wmat *w = j->w;
    const __m128 s = w->scale_type == DSR1_T_F32
                         ? _mm_loadu_ps((const float *)w->scale + r0)
                         : _mm_setr_ps(i8_scale(w, r0), i8_scale(w, r0 + 1), i8_scale(w, r0 + 2),
                                       i8_scale(w, r0 + 3));
    float *y = j->y + r0;
    const int64_t ldy = j->ldy;
    for (int b = 0; b < nt; b++) {
        __m128i d = _mm_sub_epi32(_mm_loadu_si128((const __m128i *)dot[b]), _mm_set1_epi32(128 * j->xsum[b]));
        __m128 v = _mm_mul_ps(_mm_mul_ps(_mm_cvtepi32_ps(d), _mm_set1_ps(j->xs[b])), s);
        _mm_storeu_ps(y + b * ldy, v);
    }
}

static void gemv_int8(const dsr1_mm_job *j, int64_t r0, int64_t r1)
{
    const dsr1_wmat *w = j->w;
    const int nt = j->n;
    if (w->cols <= 256)
        for (; r0 + 4 <= r1; r0 += 4) {
            const int8_t *rows = (const int8_t *)w->data + r0 * w->cols;
            int32_t dot[4][4];
            switch (nt) {
            case 1: gemv_i8_short4(1, rows, w->cols, j->xq, j->ldxq, dot); break;
            case 2: gemv_i8_short4(2, rows, w->cols, j->xq, j->ldxq, dot); break;
            case 3: gemv_i8_short4(3, rows, w->cols, j->xq, j->ldxq, dot); break;
            default: gemv_i8_short4(4, rows, w->cols, j->xq, j->ldxq, dot); break;
            }
            i8_out4(j, r0, nt, dot);
        }
    if ((w->cols > GEMV_LONG || j->i8t4) && w->cols > 256 && nt <= 2)
        for (; r0 + 4 <= r1; r0 += 4) {
            const int8_t *rows = (const int8_t *)w->data + r0 * w->cols;
            int32_t dot[4][4];
            if (nt == 1) gemv_i8_tile4(1, rows, w->cols, j->xq, j->ldxq, dot);
            else gemv_i8_tile4(2, rows, w->cols, j->xq, j->ldxq, dot);
            i8_out4(j, r0, nt, dot);
        }
    for (int64_t r = r0; r < r1; r++) {
        const int8_t *row = (const int8_t *)w->data + r * w->cols;
        int32_t dot[4];
        switch (nt * 2 + !j->hwpf) {
        case 2: gemv_i8_row(1, 0, row, w->cols, j->xq, j->ldxq, dot); break;
        case 3: gemv_i8_row(1, 1, row, w->cols, j->xq, j->ldxq, dot); break;
        case 4: gemv_i8_row(2, 0, row, w->cols, j->xq, j->ldxq, dot); break;
        case 5: gemv_i8_row(2, 1, row, w->cols, j->xq, j->ldxq, dot); break;
        case 6: gemv_i8_row(3, 0, row, w->cols, j->xq, j->ldxq, dot); break;
        case 7: gemv_i8_row(3, 1, row, w->cols, j->xq, j->ldxq, dot); break;
        case 8: gemv_i8_row(4, 0, row, w->cols, j->xq, j->ldxq, dot); break;
        default: gemv_i8_row(4, 1, row, w->cols, j->xq, j->ldxq, dot); break;
        }
        float s = i8_scale(w, r);
        for (int b = 0; b < nt; b++) /* as rows_int8: (d * xs) * s */
            j->y[b * j->ldy + r] = (float)(dot[b] - 128 * j->xsum[b]) * j->xs[b] * s;
    }
}

/* W8A8, one scale per row, 3-8 tokens (a decode batch of 8, a verify
 * step, and the MoE's busier experts in them). rows_int8_panel's 4x6
 * tiles cost 8 tokens two passes over each 4-row tile (a 6-token and a
 * 2-token one) and a 16-vector reduction per tile and chunk:
 * compute-bound from DRAM (18432x7168, n = 8: 34 GB/s where n = 1 streams
 * 74, Zen 5). Here a pair of rows meets every token's x in one pass (16
 * accumulators, each x vector serving two rows), a GM_KC-column chunk of
 * the tokens' x stays in L1 across a 16-row panel, each pair's sums come
 * out of one transposing reduction, and the lines of the pair GM_PFD
 * pairs on are asked for into L2 while this one runs (the distance and
 * the chunk's width as measured below). Dots are exact
 * integers, so chunk, pair and lane order change nothing: the float
 * steps are rows_int8_panel's, the same bits.
 * (At 2048-column chunks and the next pair prefetched:)
 * Measured (Zen 5, 2 cores): 512x7168 from L3, one thread, n = 8: 26.8 ->
 * 31.4 GB/s; from DRAM (18432x7168, 2 threads, a loaded machine) even;
 * in the model, batch-8 decode steps alternating the two kernels in one
 * process (R1-shape INT8 file): 6.2, 8.0 and 10.0% faster (a null
 * alternation 0.5%), while whole runs of the two builds alternated came
 * out even (medians 52.1 tok/s both, the machine swinging -5 to +13%).
 * Still short of the 2 dpbusd a cycle the core issues: GCC keeps moving
 * the second row's accumulators.
 * From DRAM it ran at ~27 GB/s on Zen 4 whatever the machine's bandwidth
 * (one thread half of two: each core stalled, memory was not the limit)
 * with its prefetch one pair (4 KiB) ahead. The lines are now asked for
 * GM_PFD pairs ahead in the order the pairs are read (chunk by chunk,
 * then the next panel), 48 KiB, and the chunk is 512 columns (x of 8
 * tokens: 4 KiB of L1). One process alternating the builds, 18432x7168
 * from 1 GB of copies, 2 threads, Zen 4 (membw 35 GB/s): n = 8 400 ->
 * 535 GFLOP/s (33 GB/s), 7 372 -> 470, 6 ~325 -> 395, 5 262 -> 317; the
 * prefetch distance alone (2048-column chunks) 1, 4, 12 pairs: n = 8 414,
 * 420, 447; chunks of 1024 with 8, 16, 24, 32, 48 pairs ahead 470, 540,
 * 545, 540, 530. And 3-4 tokens of long rows come here too (they took
 * the generic 4x6 tiles): n = 4 230 -> 251, 3 185 -> 189 (7168x2048
 * +5-10%). The R1-shape INT8 file's batch-8 decode, the two builds
 * alternated 4 times each: 53.7-55.6 -> 63.9-65.2 tok/s (step 147 -> 124
 * ms; every round). */
#define GM_KC 512
#define GM_PR 16
#define GM_MIN_N 3 /* fewest tokens: 3-4 of long rows were the generic tiles' */
#define GM_PFD 48  /* pairs ahead the L2 prefetch asks for: 48 KiB at GM_KC */
#define GM_PPC (GM_PR / 2) /* pairs a chunk of a panel */
_Static_assert(GM_PR % 2 == 0 && GM_PFD % GM_PPC == 0, "gemv_int8_multi's prefetch: whole chunks ahead");

/* The 8 lane-sums of v[0..7] in order (int32, exact). */
INLINE __m256i gm_hsum8(const __m512i v[8])
{
    __m512i s01 = _mm512_add_epi32(_mm512_unpacklo_epi32(v[0], v[1]), _mm512_unpackhi_epi32(v[0], v[1]));
    __m512i s23 = _mm512_add_epi32(_mm512_unpacklo_epi32(v[2], v[3]), _mm512_unpackhi_epi32(v[2], v[3]));
    __m512i s45 = _mm512_add_epi32(_mm512_unpacklo_epi32(v[4], v[5]), _mm512_unpackhi_epi32(v[4], v[5]));
    __m512i s67 = _mm512_add_epi32(_mm512_unpacklo_epi32(v[6], v[7]), _mm512_unpackhi_epi32(v[6], v[7]));
    /* each 128-bit lane: partial sums of v0..v3 (t0), v4..v7 (t1) */
    __m512i t0 = _mm512_add_epi32(_mm512_unpacklo_epi64(s01, s23), _mm512_unpackhi_epi64(s01, s23));
    __m512i t1 = _mm512_add_epi32(_mm512_unpacklo_epi64(s45, s67), _mm512_unpackhi_epi64(s45, s67));
    __m512i c = _mm512_add_epi32(_mm512_shuffle_i32x4(t0, t1, _MM_SHUFFLE(2, 0, 2, 0)),
                                 _mm512_shuffle_i32x4(t0, t1, _MM_SHUFFLE(3, 1, 3, 1)));
    __m512i f = _mm512_add_epi32(_mm512_shuffle_i32x4(c, c, _MM_SHUFFLE(2, 0, 2, 0)),
                                 _mm512_shuffle_i32x4(c, c, _MM_SHUFFLE(3, 1, 3, 1)));
    return _mm512_castsi512_si256(f);
}


/* Rows w, w + ldw (rt = 2) or w alone (rt = 1) against nt tokens over len
 * columns (masked when not whole 64-byte steps: w is not padded); dot[a][b]
 * += (or = when first) their exact dots. pf: the next pair's first row at
 * the same columns. The masked end is a second call (tail = 1), so the
 * main loop's accumulators meet no second definition (merged: 33-35 GB/s
 * from L3 as above, apart 36-39). */
INLINE void gm_pair(const int rt, const int nt, const int tail, const int8_t *w, int64_t ldw,
                    const int8_t *xq, int64_t ldx, int64_t len, const int8_t *pf, int first,
                    int32_t dot[2][8])
{
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    __m512i acc0[8], acc1[8];
#pragma GCC unroll 8
    for (int b = 0; b < 8; b++) acc0[b] = acc1[b] = _mm512_setzero_si512();
    if (!tail)
        for (int64_t k = 0; k < len; k += 64) {
            __m512i wv[2];
#pragma GCC unroll 2
            for (int a = 0; a < rt; a++) {
                _mm_prefetch((const char *)(pf + a * ldw + k), _MM_HINT_T1);
                wv[a] = _mm512_xor_si512(_mm512_loadu_si512(w + a * ldw + k), flip);
            }
#pragma GCC unroll 8
            for (int b = 0; b < nt; b++) {
                __m512i xv = _mm512_loadu_si512(xq + b * ldx + k);
                acc0[b] = gm_dp(acc0[b], wv[0], xv);
                if (rt == 2) acc1[b] = gm_dp(acc1[b], wv[1], xv);
            }
        }
    else {
        __mmask64 m = ((__mmask64)1 << len) - 1; /* len < 64 */
        __m512i wv[2];
#pragma GCC unroll 2
        for (int a = 0; a < rt; a++) wv[a] = _mm512_xor_si512(_mm512_maskz_loadu_epi8(m, w + a * ldw), flip);
#pragma GCC unroll 8
        for (int b = 0; b < nt; b++) {
            __m512i xv = _mm512_maskz_loadu_epi8(m, xq + b * ldx);
            acc0[b] = gm_dp(acc0[b], wv[0], xv);
            if (rt == 2) acc1[b] = gm_dp(acc1[b], wv[1], xv);
        }
    }
#pragma GCC unroll 2
    for (int a = 0; a < rt; a++) {
        __m256i s = gm_hsum8(a ? acc1 : acc0);
        if (!first) s = _mm256_add_epi32(s, _mm256_loadu_si256((const __m256i *)dot[a]));
        _mm256_storeu_si256((__m256i *)dot[a], s);
    }
}

/* gm_pair for this (rt, nt): the whole 64-byte steps, then the end. */
INLINE void gm_pair2(const int rt, const int nt, const int8_t *w, int64_t ldw, const int8_t *xq,
                     int64_t ldx, int64_t len, const int8_t *pf, int first, int32_t dot[2][8])
{
    int64_t whole = len & ~(int64_t)63;
    if (whole) gm_pair(rt, nt, 0, w, ldw, xq, ldx, whole, pf, first, dot);
    if (whole < len) gm_pair(rt, nt, 1, w + whole, ldw, xq + whole, ldx, len - whole, pf, first && !whole, dot);
}

static void gemv_int8_multi(const dsr1_mm_job *j, int64_t r0, int64_t r1)
{
    const dsr1_wmat *w = j->w;
    const int8_t *q = w->data;
    const int64_t cols = w->cols;
    const int nt = j->n;
    for (int64_t r = r0; r < r1; r += GM_PR) {
        const int pr = (int)(r1 - r < GM_PR ? r1 - r : GM_PR);
        _Alignas(32) int32_t dot[GM_PR][8];
        for (int64_t c0 = 0; c0 < cols; c0 += GM_KC) {
            const int64_t len = cols - c0 < GM_KC ? cols - c0 : GM_KC;
            /* the pair GM_PFD pairs after each one in the order they are
             * read (pairs of a chunk, chunks of a panel, panels): GM_PFD
             * is whole chunks' pairs, so the same pair of the chunk
             * GM_PFD / GM_PPC chunks on, found once per chunk (past the
             * task or the matrix: prefetches do not fault) */
            const int64_t nck = (cols + GM_KC - 1) / GM_KC, ahead = c0 / GM_KC + GM_PFD / GM_PPC;
            const int8_t *pfc = q + (r + ahead / nck * GM_PR) * cols + ahead % nck * GM_KC;
            for (int a = 0; a < pr; a += 2) {
                const int rt = pr - a >= 2 ? 2 : 1;
                const int8_t *pf = pfc + a * cols;
                const int8_t *wr = q + (r + a) * cols + c0, *xq = j->xq + c0;
                switch (rt * 16 + nt) {
                case 16 + 3: gm_pair2(1, 3, wr, cols, xq, j->ldxq, len, pf, c0 == 0, &dot[a]); break;
                case 16 + 4: gm_pair2(1, 4, wr, cols, xq, j->ldxq, len, pf, c0 == 0, &dot[a]); break;
                case 32 + 3: gm_pair2(2, 3, wr, cols, xq, j->ldxq, len, pf, c0 == 0, &dot[a]); break;
                case 32 + 4: gm_pair2(2, 4, wr, cols, xq, j->ldxq, len, pf, c0 == 0, &dot[a]); break;
                case 16 + 5: gm_pair2(1, 5, wr, cols, xq, j->ldxq, len, pf, c0 == 0, &dot[a]); break;
                case 16 + 6: gm_pair2(1, 6, wr, cols, xq, j->ldxq, len, pf, c0 == 0, &dot[a]); break;
                case 16 + 7: gm_pair2(1, 7, wr, cols, xq, j->ldxq, len, pf, c0 == 0, &dot[a]); break;
                case 16 + 8: gm_pair2(1, 8, wr, cols, xq, j->ldxq, len, pf, c0 == 0, &dot[a]); break;
                case 32 + 5: gm_pair2(2, 5, wr, cols, xq, j->ldxq, len, pf, c0 == 0, &dot[a]); break;
                case 32 + 6: gm_pair2(2, 6, wr, cols, xq, j->ldxq, len, pf, c0 == 0, &dot[a]); break;
                case 32 + 7: gm_pair2(2, 7, wr, cols, xq, j->ldxq, len, pf, c0 == 0, &dot[a]); break;
                default: gm_pair2(2, 8, wr, cols, xq, j->ldxq, len, pf, c0 == 0, &dot[a]); break;
                }
            }
        }
        float sw[GM_PR]; /* once per row: MLA's 128-column heads make this loop count */
        for (int a = 0; a < pr; a++) sw[a] = i8_scale(w, r + a);
        for (int b = 0; b < nt; b++) /* as rows_int8_panel: (d * xs) * s */
            for (int a = 0; a < pr; a++)
                j->y[b * j->ldy + r + a] = (float)(dot[a][b] - 128 * j->xsum[b]) * j->xs[b] * sw[a];
    }
}

/* W8A8: exact integer dots per scale group, then the canonical float steps. */
static void rows_int8(const dsr1_mm_job *j, int64_t r0, int64_t r1)
{
    if (j->w->group == 0 && (j->n <= 2 || (j->n <= 4 && j->n * j->w->cols <= 8192))) {
        gemv_int8(j, r0, r1);
        return;
    }
    /* rows in lanes from I8L_MIN_N tokens: below, transposing the panel
     * costs more than the sums it saves (bench kernels, 18432x7168 from
     * DRAM, 2 threads, lanes-as-columns panel vs lanes with the next
     * panel prefetched: n = 8 4.8 vs 5.9 ms, 16 7.6-7.8 vs 7.6-7.8, 24
     * 10.6 vs 10.5, 32 13.7-14.0 vs 12.5-12.8, 48 20.2 vs 18.2) */
    if (j->w->group == 0 && j->amx && j->n >= DSR1_MM_AMX_MIN_N && j->w->cols % 64 == 0) {
        dsr1_mm_rows_int8_amx(j, r0, r1); /* matmul_amx_avx512.c */
        return;
    }
    if (j->xt) {
        dsr1_mm_rows_int8_xl_avx512(j, r0, r1); /* matmul_lanes_avx512.c */
        return;
    }
    if (j->w->group == 0 && j->n >= I8L_MIN_N && j->w->cols % 64 == 0) {
        dsr1_mm_rows_int8_lanes_avx512(j, r0, r1); /* matmul_lanes_avx512.c */
        return;
    }
    /* 5-8 tokens on rows of at most 256 columns (MLA's per-head absorb,
     * 512x128 a head, at a decode batch of 8): gemv_int8_multi's pair
     * reductions come once per 2 rows x 2 steps there, so the lanes kernel
     * (no reductions; its panel transpose is small next to them) takes
     * them. Harness (Zen 5), 512x128 from L2, one thread, n = 5-8: 9-13 ->
     * 16-21 GB/s; 512x256 at n = 8: 15 -> 18; at 512 columns and more
     * (128x512, the unabsorb) it was slower (18-20 -> 16-17), at n = 3-4
     * even. In the model (R1-shape INT8 file, batch 8, decode steps
     * alternating the two, five runs): absorb 0.58-1.08 against 0.73-1.52
     * ms a layer, 29% less in all; the whole step within the noise. */
    if (j->w->group == 0 && j->n > 4 && j->n <= 8 && j->w->cols <= 256 && j->w->cols % 64 == 0) {
        dsr1_mm_rows_int8_lanes_avx512(j, r0, r1); /* matmul_lanes_avx512.c */
        return;
    }
    if (j->w->group == 0 && j->n > GM_MIN_N - 1 && j->n <= 8) {
        gemv_int8_multi(j, r0, r1);
        return;
    }
    if (j->w->group == 0 && j->n > 4) {
        rows_int8_panel(j, r0, r1);
        return;
    }
    const dsr1_wmat *w = j->w;
    int64_t g = w->group ? w->group : w->cols;
    const int8_t *q = w->data;
    for (int64_t r = r0; r < r1; r += MR) {
        int rt = (int)(r1 - r < MR ? r1 - r : MR);
        for (int t0 = 0; t0 < j->n; t0 += NR) {
            int nt = j->n - t0 < NR ? j->n - t0 : NR;
            float acc[MR][NR] = {{0}};
            for (int64_t c0 = 0; c0 < w->cols; c0 += g) {
                int32_t dot[MR][NR];
                tile_i8(rt, nt, q + r * w->cols + c0, w->cols, j->xq + t0 * j->ldxq + c0, j->ldxq,
                        g, dot);
                for (int b = 0; b < nt; b++) {
                    int32_t corr = 0;
                    const int8_t *xq = j->xq + (t0 + b) * j->ldxq + c0;
                    if (w->group == 0)
                        corr = j->xsum[t0 + b];
                    else
                        for (int64_t c = 0; c < g; c++) corr += xq[c];
                    for (int a = 0; a < rt; a++) {
                        float d = (float)(dot[a][b] - 128 * corr);
                        if (w->group == 0)
                            acc[a][b] = d * j->xs[t0 + b] * i8_scale(w, r + a);
                        else
                            acc[a][b] = fmaf(d, dsr1_wmat_scale(w, r + a, c0), acc[a][b]);
                    }
                }
            }
            for (int a = 0; a < rt; a++)
                for (int b = 0; b < nt; b++)
                    j->y[(t0 + b) * j->ldy + r + a] =
                        w->group == 0 ? acc[a][b] : acc[a][b] * j->xs[t0 + b];
        }
    }
}

void dsr1_mm_rows_avx512(const dsr1_mm_job *j, int64_t r0, int64_t r1)
{
    if (j->xgs) { /* FP8 as W8A8: the rq jobs have the lanes kernel's shapes */
        if (j->xt)
            dsr1_mm_rows_int8g_xl_avx512(j, r0, r1); /* matmul_lanes_avx512.c */
        else if (j->amx && j->n >= DSR1_MM_AMX_MIN_N && j->w->cols % 64 == 0)
            dsr1_mm_rows_int8g_amx(j, r0, r1);
        else if (j->n >= I8L_MIN_N && j->w->cols % 64 == 0)
            dsr1_mm_rows_int8g_lanes_avx512(j, r0, r1);
        else
            dsr1_mm_rows_portable(j, r0, r1);
    } else if (j->act == DSR1_ACT_INT8 && j->w->type == DSR1_T_INT4)
        dsr1_mm_rows_w4a8_avx512(j, r0, r1); /* matmul_lanes_avx512.c */
    else if (j->act == DSR1_ACT_INT8)
        rows_int8(j, r0, r1);
    else if (j->b16gv)
        dsr1_mm_rows_bf16_gv_amx(j, r0, r1); /* matmul_bf16amx_avx512.c */
    else if (j->b16l && j->amx && j->n >= DSR1_MM_AMX_MIN_N)
        dsr1_mm_rows_bf16_amx(j, r0, r1); /* matmul_amx_avx512.c */
    else if (j->b16l)
        dsr1_mm_rows_bf16_lanes_avx512(j, r0, r1); /* matmul_lanes_avx512.c */
    else if (j->fp8amx)
        dsr1_mm_rows_fp8_amx(j, r0, r1); /* matmul_fp8amx_avx512.c */
    else if (j->act == DSR1_ACT_BF16 && j->w->type == DSR1_T_FP8_E4M3)
        rows_fp8_bf16(j, r0, r1);
    else if (j->act == DSR1_ACT_BF16 && j->n <= 4 && int4_gemv_ok(j->w))
        int4_gemv(j, r0, r1);
    else
        rows_float(j, r0, r1, j->act == DSR1_ACT_BF16);
}
