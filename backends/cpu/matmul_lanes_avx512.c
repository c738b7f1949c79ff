/*
 * matmul_lanes_avx512.c - the AVX-512 integer kernels with rows or tokens
 * in lanes: W4A8 (INT4 weights, int8 activations), W8A8 with one scale per
 * row (rows in lanes from 96 tokens, tokens in lanes from 16 to 95) and
 * FP8 as W8A8 (tokens in lanes; rows in lanes for AMX's leftovers).
 * Entered from matmul_avx512.c's dispatch (and matmul_amx_avx512.c's).
 *
 * Rows in lanes: 16 rows' bytes transposed as 32-bit elements (tr16) into
 * a code panel, so that one vpdpbusd against 4 bytes of a token's x
 * broadcast from memory adds 4 columns of 16 rows and each lane ends with
 * its row's exact dot: no horizontal sums. Tokens in lanes: x transposed
 * instead, once per call, and the weights' 4 bytes broadcast from the
 * matrix as stored. The invariant of matmul_avx512.c holds here: the exact
 * integer dots and then the canonical float steps of matmul_impl.h, so
 * results equal the portable kernels bit for bit.
 */
#include "matmul_impl.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

#define INLINE static inline __attribute__((always_inline))

/* ---- INT4 x INT8 (W4A8) ---------------------------------------------------------- */

/* Lanes are rows: a vector holds 4 codes of each of 16 rows, so one
 * vpdpbusd against 4 bytes of a token's x (broadcast from memory) adds 4
 * columns of 16 rows, and after a group's steps each lane holds its row's
 * exact group dot: the canonical order (matmul_impl.h) then costs one
 * convert and one fma per group for 16 rows, amortised over 32 vpdpbusd
 * (groups of 128) or 8 (groups of 32), where lanes-as-columns spent them
 * per row. The packed rows are turned into that layout 128 columns at a
 * time (w4_block): 16 rows x 64 bytes transposed as 32-bit elements (each
 * lane then holds 8 codes of its row), split into low and high nibbles
 * (columns 0,2,4,6 and 1,3,5,7 of each 8); x comes reordered the same way
 * (xp, dsr1_mm_w4_prep_avx512). The accumulators start from xg (-8 * the
 * token's sum of xq over the group), so they hold sum (q - 8) * xq.
 * One token: w4_gemv1 (lanes as columns, a reduction per group instead of
 * the transpose). 2 to 8 tokens (W4_GV_N): a 16-row block streams its
 * rows 128 columns at a time through registers. More tokens go by blocks of W4_TB
 * tokens and chunks of W4_KC columns: a 32-row chunk is laid out once per
 * block in a code panel (16 KB, L1) with its scales as float vectors,
 * every tile of W4_NT tokens x 32 rows (12 int32 and 12 float
 * accumulators) reads it, and the float accumulators stay in memory
 * between chunks. Why: with lanes as columns (the kernel before, same
 * dots, a 16-lane convert and fma per group, row and token) 512 tokens
 * took 2.0-2.1x this kernel's time on R1's shapes (Zen 4, 2 threads;
 * 2.2-3.0x in one thread's CPU time); W4A8 is now 1.2-1.3x faster than
 * W8A8 there, and vpdpbusd is most of its profile (PERFORMANCE.md). */
/* W4_TB (and I8L_TB below): 512 tokens, so that a prefill chunk of 512
 * builds each code panel once instead of three times (at 192, the value
 * before); the accumulators of a block (64 KB) then live in L2, read and
 * written once per tile and chunk. One process alternating the two builds
 * (prefill 512, R1-shape files, Zen 4, 2 threads, 4 rounds each, both
 * orders for FP8): INT4 174.2-179.8 -> 180.5-185.2 tok/s, INT8 188.6-190.8
 * -> 190.7-194.6, FP8 (W8A8) 155.3-172.1 -> 167.2-175.6, ahead in 8 of 8.
 * (Tried on Zen 5 earlier for W8A8 alone: within that machine's noise.) */
#define W4_NT 6
#define W4_TB 512
#define W4_KC 512                   /* a multiple of 128 */
#define W4_GV_N 8                   /* most tokens w4_gemv takes; the code panel above */

/* 16x16 transpose of 32-bit elements: afterwards lane i of v[k] is what
 * lane k of v[i] was. */
INLINE void tr16(__m512i v[16])
{
    __m512i t[16], u[16];
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_epi32(v[2 * i], v[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_epi32(v[2 * i], v[2 * i + 1]);
    }
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        u[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
        u[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
        u[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
        u[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
    }
    /* u[4i + m], 128-bit block j: element 4j + m of rows 4i .. 4i+3 */
#pragma GCC unroll 4
    for (int m = 0; m < 4; m++) {
        __m512i a = _mm512_shuffle_i32x4(u[m], u[4 + m], 0x44), b = _mm512_shuffle_i32x4(u[m], u[4 + m], 0xee);
        __m512i c = _mm512_shuffle_i32x4(u[8 + m], u[12 + m], 0x44), d = _mm512_shuffle_i32x4(u[8 + m], u[12 + m], 0xee);
        v[m] = _mm512_shuffle_i32x4(a, c, 0x88);
        v[4 + m] = _mm512_shuffle_i32x4(a, c, 0xdd);
        v[8 + m] = _mm512_shuffle_i32x4(b, d, 0x88);
        v[12 + m] = _mm512_shuffle_i32x4(b, d, 0xdd);
    }
}

/* Rows [r, r + pr) (pr <= 16), columns [c, c + 128): v[k] lane i holds the
 * packed bytes 4k .. 4k+3 of row r + i there (columns c + 8k .. c + 8k + 7);
 * missing rows and the columns past the row's end are zero. */
INLINE void w4_block(const dsr1_wmat *w, int64_t r, int pr, int64_t c, __m512i v[16])
{
    const int64_t ld = w->cols / 2, left = (w->cols - c) / 2;
    const uint8_t *p = (const uint8_t *)w->data + r * ld + c / 2;
    const __mmask64 m = left >= 64 ? ~(__mmask64)0 : ((__mmask64)1 << left) - 1;
    if (pr == 16 && left >= 64) {
#pragma GCC unroll 16
        for (int i = 0; i < 16; i++) v[i] = _mm512_loadu_si512(p + i * ld);
    } else {
#pragma GCC unroll 16
        for (int i = 0; i < 16; i++)
            v[i] = i < pr ? _mm512_maskz_loadu_epi8(m, p + i * ld) : _mm512_setzero_si512();
    }
    tr16(v);
}

/* Low and high nibbles of the packed bytes: codes 0..15 as bytes. */
INLINE __m512i w4_lo(__m512i v) { return _mm512_and_si512(v, _mm512_set1_epi8(0x0f)); }
INLINE __m512i w4_hi(__m512i v) { return _mm512_and_si512(_mm512_srli_epi32(v, 4), _mm512_set1_epi8(0x0f)); }

/* 4 bytes of x broadcast to every lane (vpdpbusd's memory operand). */
INLINE __m512i w4_x4(const int8_t *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

/* acc + vpdpbusd(w, the 4 bytes at p in every lane), the bytes read by
 * the instruction itself ({1to16}). gcc 12 gives the intrinsic's
 * accumulator a copy per call (a register move per vpdpbusd, and no
 * folded broadcast): a tied asm operand avoids both. */
INLINE __m512i w4_dp(__m512i acc, __m512i w, const int8_t *p)
{
#if defined(__GNUC__) && !defined(__clang__)
    __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*(const int32_t *)p));
    return acc;
#else
    return _mm512_dpbusd_epi32(acc, w, w4_x4(p));
#endif
}

/* acc + vdpbf16ps(w, the pair at p in every lane), broadcast by the
 * instruction (w4_dp's asm, for gcc's accumulator copies). */
INLINE __m512 b16_dp(__m512 acc, __m512i w, const uint16_t *p)
{
#if defined(__GNUC__) && !defined(__clang__)
    __asm__("vdpbf16ps %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*(const int32_t *)p));
    return acc;
#else
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_dpbf16_ps(acc, (__m512bh)w, (__m512bh)_mm512_set1_epi32(v));
#endif
}

/* w4_dp on 8 lanes (ymm, {1to8}): a token vector's first 8 tokens. On Zen
 * 4 a 512-bit vpdpbusd is two 256-bit halves, so 8 tokens cost half of 16. */
INLINE __m256i w4_dp8(__m256i acc, __m256i w, const int8_t *p)
{
#if defined(__GNUC__) && !defined(__clang__)
    __asm__("vpdpbusd %2%{1to8%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*(const int32_t *)p));
    return acc;
#else
    return _mm256_dpbusd_epi32(acc, w, _mm512_castsi512_si256(w4_x4(p)));
#endif
}

/* Scales of rows [r, r + pr) (pr <= 16), groups [g0, g0 + ngr), as floats
 * (the values of dsr1_wmat_scale): out[gi * ld + i] for row r + i, zero
 * for missing rows. */
static void w4_scales(const dsr1_wmat *w, int64_t r, int pr, int64_t g0, int64_t ngr, int f16,
                      float *out, int64_t ld)
{
    const int64_t ng = w->cols / w->group;
    const uint16_t *s = (const uint16_t *)w->scale + r * ng + g0;
    for (int64_t gb = 0; gb < ngr; gb += 16) {
        int cnt = ngr - gb < 16 ? (int)(ngr - gb) : 16;
        __mmask16 m = (__mmask16)((1u << cnt) - 1);
        __m512i v[16];
        for (int i = 0; i < 16; i++) {
            __m256i h = i < pr ? _mm256_maskz_loadu_epi16(m, s + i * ng + gb) : _mm256_setzero_si256();
            v[i] = f16 ? _mm512_castps_si512(_mm512_cvtph_ps(h))
                       : _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16);
        }
        tr16(v);
        for (int k = 0; k < cnt; k++) _mm512_store_si512(out + (gb + k) * ld, v[k]);
    }
}

/* y[b][r + i] = lanes i < pr of acc * s_x (token b). */
INLINE void w4_store(float *y, int pr, __m512 acc, float xs)
{
    __mmask16 m = pr >= 16 ? 0xffff : (__mmask16)((1u << pr) - 1);
    _mm512_mask_storeu_ps(y, m, _mm512_mul_ps(acc, _mm512_set1_ps(xs)));
}

/* While the 16-row block at r is read 128 columns (1 KB) at a time:
 * the next block's same share of bytes (the blocks are contiguous) into
 * L2, so it is there in whole when its turn comes. Measured against
 * per-row prefetch 1 KB ahead and none (Zen 4, one thread): 10-35%
 * faster at n = 1, 2 and 4 on weights streamed from DRAM (18432x7168),
 * within noise from L3. */
INLINE void w4_prefetch(const dsr1_wmat *w, int64_t r, int64_t c)
{
    const char *pf = (const char *)w->data + (r + 16) * (w->cols / 2) + c * 8;
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++) _mm_prefetch(pf + i * 64, _MM_HINT_T1);
    /* and the same share of the next block's scales (16 rows x ng
     * halves, contiguous: 4096 / group bytes per 128 columns; first and
     * last byte, as the share need not start a line). Without it each
     * block's w4_scales waited on DRAM: 5% of an INT4 decode's samples,
     * 72% of them on its loads; with it 3.2%, 29% (perf, Zen 4). */
    const int64_t share = 4096 / w->group;
    const char *ps = (const char *)w->scale + ((r + 16) * (w->cols / w->group) + c / 128 * share / 2) * 2;
    for (int64_t o = 0; o < share; o += 64) _mm_prefetch(ps + o, _MM_HINT_T1);
    _mm_prefetch(ps + share - 1, _MM_HINT_T1);
}

/* 2 to 8 tokens: 16-row blocks, each streamed 128 columns at a time
 * through registers (w4_block) while the next is prefetched; the scales
 * of 16 groups at a time go to sct. g32: groups of 32, else 128. Up to 8
 * tokens since the code panel below builds and reads its panel for
 * ragged 6-token tiles, which at 5-8 tokens cost more than the transpose
 * here: the gemv harness (1 GB of R1-shape matrices, 2 threads, Zen 4,
 * the two alternated), 2048x7168 and 7168x2048, from DRAM 17.0-17.3 ->
 * 23.8-27.6 GB/s at n = 5, 14.8-15.6 -> 22.4-24.1 at 6, 13.1-13.4 ->
 * 17.2-19.0 at 8; from L3 20.6 -> 26.5-27.1, 14.0-19.2 -> 27.2-27.9,
 * 13.4-15.4 -> 18.9-19.2. Batch-8 decode of the INT4 file: 55.6-60.5 ->
 * 65.0-70.6 tok/s (4 rounds each, alternated). */
INLINE void w4_gemv(const int nt, const int g32, const dsr1_mm_job *j, int64_t r0, int64_t r1)
{
    const dsr1_wmat *w = j->w;
    const int64_t g = g32 ? 32 : 128, ng = w->cols / g;
    const int f16 = w->scale_type == DSR1_T_F16;
    _Alignas(64) float sct[16 * 16];
    for (int64_t r = r0; r < r1; r += 16) {
        const int pr = (int)(r1 - r < 16 ? r1 - r : 16);
        __m512 acc[W4_GV_N];
#pragma GCC unroll 8
        for (int b = 0; b < nt; b++) acc[b] = _mm512_setzero_ps();
        for (int64_t c = 0; c < w->cols; c += 128) {
            const int64_t gi0 = c / g;
            if (gi0 % 16 == 0 && c % g == 0)
                w4_scales(w, r, pr, gi0, ng - gi0 < 16 ? ng - gi0 : 16, f16, sct, 16);
            w4_prefetch(w, r, c);
            __m512i v[16];
            w4_block(w, r, pr, c, v);
            const int ngr = g32 ? (w->cols - c >= 128 ? 4 : (int)((w->cols - c) / 32)) : 1;
            const int nk = g32 ? 4 : 16; /* packed 32-bit elements per group */
#pragma GCC unroll 4
            for (int q = 0; q < ngr; q++) {
                const int64_t gi = gi0 + q;
                __m512i d[W4_GV_N];
#pragma GCC unroll 8
                for (int b = 0; b < nt; b++) d[b] = _mm512_set1_epi32(j->xg[b * j->ldxg + gi]);
#pragma GCC unroll 16
                for (int kk = 0; kk < nk; kk++) {
                    const int k = (g32 ? 4 * q : 0) + kk;
                    const __m512i lo = w4_lo(v[k]), hi = w4_hi(v[k]);
#pragma GCC unroll 8
                    for (int b = 0; b < nt; b++) {
                        const int8_t *x = j->xp + b * j->ldxp + c + 8 * k;
                        d[b] = w4_dp(d[b], lo, x);
                        d[b] = w4_dp(d[b], hi, x + 4);
                    }
                }
                const __m512 sv = _mm512_load_ps(sct + (gi % 16) * 16);
#pragma GCC unroll 8
                for (int b = 0; b < nt; b++) acc[b] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d[b]), sv, acc[b]);
            }
        }
#pragma GCC unroll 8
        for (int b = 0; b < nt; b++) w4_store(j->y + b * j->ldy + r, pr, acc[b], j->xs[b]);
    }
}

/* The 16 vectors d[i] of 32-bit partial sums gathered into lanes: lane i
 * of q4[q] is the sum of d[i]'s 128-bit block q (its four lanes), so
 * q4[0] + q4[1] + q4[2] + q4[3] holds each d[i]'s whole sum in lane i.
 * Two levels of pairwise adds and a 4x4 transpose of the blocks: the one
 * reduction both one-token W4A8 kernels use (exact integers). */
INLINE void w4_gather16(const __m512i d[16], __m512i q4[4])
{
    __m512i a[8], b[4];
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++)
        a[i] = _mm512_add_epi32(_mm512_unpacklo_epi32(d[2 * i], d[2 * i + 1]),
                                _mm512_unpackhi_epi32(d[2 * i], d[2 * i + 1]));
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++)
        b[i] = _mm512_add_epi32(_mm512_unpacklo_epi64(a[2 * i], a[2 * i + 1]),
                                _mm512_unpackhi_epi64(a[2 * i], a[2 * i + 1]));
    /* b[i], block q: the sums of d[4i .. 4i+3] over that block */
    const __m512i e0 = _mm512_shuffle_i32x4(b[0], b[1], 0x44), e1 = _mm512_shuffle_i32x4(b[0], b[1], 0xee);
    const __m512i e2 = _mm512_shuffle_i32x4(b[2], b[3], 0x44), e3 = _mm512_shuffle_i32x4(b[2], b[3], 0xee);
    q4[0] = _mm512_shuffle_i32x4(e0, e2, 0x88);
    q4[1] = _mm512_shuffle_i32x4(e0, e2, 0xdd);
    q4[2] = _mm512_shuffle_i32x4(e1, e3, 0x88);
    q4[3] = _mm512_shuffle_i32x4(e1, e3, 0xdd);
}

/* One token: lanes are columns instead (a row's 128 columns in one load,
 * its nibbles against x' as vectors: lane l of xl and xh the x' of packed
 * element l's low and high nibbles), then the 16 rows' exact dots
 * gathered into lanes by two levels of pairwise adds (each 128-bit block
 * then holds 4 rows' sums over one group of 32) and a 4x4 transpose of
 * the blocks: fewer shuffles than transposing the codes when no second
 * token shares them. Then the same per-group float steps. */
INLINE void w4_gemv1(const int g32, const dsr1_mm_job *j, int64_t r0, int64_t r1)
{
    const dsr1_wmat *w = j->w;
    const int64_t g = g32 ? 32 : 128, ng = w->cols / g, ld = w->cols / 2;
    const int f16 = w->scale_type == DSR1_T_F16;
    const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i od = _mm512_add_epi32(ev, _mm512_set1_epi32(1));
    _Alignas(64) float sct[16 * 16];
    for (int64_t r = r0; r < r1; r += 16) {
        const int pr = (int)(r1 - r < 16 ? r1 - r : 16);
        const uint8_t *p = (const uint8_t *)w->data + r * ld;
        __m512 acc = _mm512_setzero_ps();
        for (int64_t c = 0; c < w->cols; c += 128) {
            const int64_t gi0 = c / g, left = (w->cols - c) / 2;
            if (gi0 % 16 == 0) w4_scales(w, r, pr, gi0, ng - gi0 < 16 ? ng - gi0 : 16, f16, sct, 16);
            w4_prefetch(w, r, c);
            const __m512i x0 = _mm512_load_si512(j->xp + c), x1 = _mm512_load_si512(j->xp + c + 64);
            const __m512i xl = _mm512_permutex2var_epi32(x0, ev, x1), xh = _mm512_permutex2var_epi32(x0, od, x1);
            const __mmask64 m = left >= 64 ? ~(__mmask64)0 : ((__mmask64)1 << left) - 1;
            __m512i d[16];
            if (pr == 16 && left >= 64) {
#pragma GCC unroll 16
                for (int i = 0; i < 16; i++) {
                    const __m512i v = _mm512_loadu_si512(p + i * ld + c / 2);
                    d[i] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), w4_lo(v), xl), w4_hi(v), xh);
                }
            } else {
#pragma GCC unroll 16
                for (int i = 0; i < 16; i++) {
                    const __m512i v = i < pr ? _mm512_maskz_loadu_epi8(m, p + i * ld + c / 2) : _mm512_setzero_si512();
                    d[i] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), w4_lo(v), xl), w4_hi(v), xh);
                }
            }
            __m512i q4[4];
            w4_gather16(d, q4);
            if (g32) {
                const int ngr = left >= 64 ? 4 : (int)(left / 16);
#pragma GCC unroll 4
                for (int q = 0; q < ngr; q++) {
                    const __m512i dq = _mm512_add_epi32(q4[q], _mm512_set1_epi32(j->xg[gi0 + q]));
                    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dq), _mm512_load_ps(sct + ((gi0 + q) % 16) * 16), acc);
                }
            } else {
                __m512i dq = _mm512_add_epi32(_mm512_add_epi32(q4[0], q4[1]), _mm512_add_epi32(q4[2], q4[3]));
                dq = _mm512_add_epi32(dq, _mm512_set1_epi32(j->xg[gi0]));
                acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dq), _mm512_load_ps(sct + (gi0 % 16) * 16), acc);
            }
        }
        w4_store(j->y + r, pr, acc, j->xs[0]);
    }
}

/* One token, groups of 128: w4_gemv1 reads 16 rows side by side (16
 * streams 3.5 KB apart at R1's 7168 columns), and these machines'
 * prefetchers follow one stream better than many (as for the INT8 row
 * GEMV, matmul_avx512.c). Here rows are read one after another, front to
 * back, 16 groups (1 KB) at a time: each group's 64 bytes against x' as
 * vectors (lanes as columns, as w4_gemv1), the 16 groups' exact dots
 * gathered into lanes by w4_gather16 (lane q: group q) and xg added. The
 * dots of 16 rows wait as int32 in dots[row][group]; then the block's
 * dots and scales are transposed (rows in lanes) and the 16 rows'
 * canonical float steps run side by side, acc = fma(dot, s, acc) group by
 * group in order in each lane: per row the operations every W4A8 kernel
 * does (the same bits), with one 4-cycle fma chain per 16 rows. x' (xl,
 * xh of every 128 columns) is laid out once per task.
 * Why: done per row in a scalar loop (the kernel before, 2026-11-29) the
 * chain of 56 fmas took most of the kernel's time on Zen 4 (57% of its
 * samples), and one thread read 29 GB/s of codes from L3 against the
 * INT8 GEMV's 65. Measured (Zen 4, 2 threads, dsr1_matmul at n = 1 in a
 * /tmp harness, both kernels in one process): from L3 (2048x7168, the
 * new kernel first in every round) 176-181 -> 227-233 GFLOP/s; from 1 GB
 * of copies (DRAM; each round starting with the next kernel) 7168x2048
 * 87-107 -> 122-132, 2048x7168 105-136 -> 118-132; the INT4 file's decode, the two builds alternated in one
 * process, 12 rounds: ahead in 10, geometric mean 1.08x (+14-27% in the
 * machine's fast memory spell, 0.92-1.08x in its slow one). An earlier
 * try of this layout (Zen 5) streamed slower from DRAM: it kept the 2 KiB
 * prefetch distance, too short once the chain no longer paces the loop
 * (here 2 and 4 KiB: behind or even; 8 and 16 KiB: ahead), and read each
 * block's scales cold at its end; the next block's scales now go to L2
 * while its rows stream. pf = 0 (j->hwpf, the decoder's measured choice,
 * pftune.h) leaves the codes to the hardware prefetcher. */
#define W4R_MAXC 32768 /* x' on the stack: wider rows go 16 side by side */
#define W4R_PF 8192 /* each line asked for this far ahead, into L2 */
INLINE void w4_row(const int pf, const dsr1_mm_job *j, int64_t r0, int64_t r1)
{
    const dsr1_wmat *w = j->w;
    const int64_t ng = w->cols / 128, ld = w->cols / 2, ngp = (ng + 15) & ~(int64_t)15;
    const int f16 = w->scale_type == DSR1_T_F16;
    const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i od = _mm512_add_epi32(ev, _mm512_set1_epi32(1));
    _Alignas(64) int8_t xlh[W4R_MAXC]; /* group q: xl at 128 q, xh at 128 q + 64 */
    _Alignas(64) int32_t dots[16 * (W4R_MAXC / 128)]; /* [row][group], row stride ngp */
    _Alignas(64) float st[(W4R_MAXC / 128) * 16];     /* [group][row] */
    for (int64_t q = 0; q < ng; q++) {
        const __m512i x0 = _mm512_load_si512(j->xp + 128 * q), x1 = _mm512_load_si512(j->xp + 128 * q + 64);
        _mm512_store_si512(xlh + 128 * q, _mm512_permutex2var_epi32(x0, ev, x1));
        _mm512_store_si512(xlh + 128 * q + 64, _mm512_permutex2var_epi32(x0, od, x1));
    }
    for (int64_t rb = r0; rb < r1; rb += 16) {
        const int pr = r1 - rb < 16 ? (int)(r1 - rb) : 16;
        /* the next block's scales (16 rows x ng halves, contiguous), wanted
         * at its end: into L2 now, while this block's rows stream */
        if (rb + 16 < w->rows) {
            const char *sn = (const char *)((const uint16_t *)w->scale + (rb + 16) * ng);
            for (int64_t b = 0; b < 32 * ng; b += 64) _mm_prefetch(sn + b, _MM_HINT_T1);
        }
        for (int i = 0; i < pr; i++) {
            const uint8_t *p = (const uint8_t *)w->data + (rb + i) * ld;
            for (int64_t gb = 0; gb < ng; gb += 16) {
                const int cnt = ng - gb < 16 ? (int)(ng - gb) : 16;
                __m512i d[16];
#pragma GCC unroll 16
                for (int k = 0; k < 16; k++) {
                    if (k < cnt) {
                        const char *pk = (const char *)p + (gb + k) * 64;
                        if (pf) _mm_prefetch(pk + W4R_PF, _MM_HINT_T1);
                        const __m512i v = _mm512_loadu_si512(pk);
                        const int8_t *x = xlh + 128 * (gb + k);
                        d[k] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), w4_lo(v),
                                                                       _mm512_load_si512(x)),
                                                   w4_hi(v), _mm512_load_si512(x + 64));
                    } else {
                        d[k] = _mm512_setzero_si512();
                    }
                }
                __m512i q4[4];
                w4_gather16(d, q4);
                __m512i dq = _mm512_add_epi32(_mm512_add_epi32(q4[0], q4[1]), _mm512_add_epi32(q4[2], q4[3]));
                const __mmask16 m = (__mmask16)((1u << cnt) - 1);
                dq = _mm512_add_epi32(dq, _mm512_maskz_loadu_epi32(m, j->xg + gb));
                _mm512_store_si512(dots + i * ngp + gb, dq);
            }
        }
        w4_scales(w, rb, pr, 0, ng, f16, st, 16);
        __m512 acc = _mm512_setzero_ps();
        for (int64_t gb = 0; gb < ng; gb += 16) {
            const int cnt = ng - gb < 16 ? (int)(ng - gb) : 16;
            __m512i v[16];
#pragma GCC unroll 16
            for (int i = 0; i < 16; i++) v[i] = i < pr ? _mm512_load_si512(dots + i * ngp + gb) : _mm512_setzero_si512();
            tr16(v);
            for (int k = 0; k < cnt; k++)
                acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(v[k]), _mm512_load_ps(st + (gb + k) * 16), acc);
        }
        w4_store(j->y + rb, pr, acc, j->xs[0]);
    }
}

/* A tile: rv (1 or 2) x 16 rows of the code panel p (step s of half h at
 * p + (s * rv + h) * 64; a step is 4 columns) x nt tokens (xp, ldxp, xg,
 * ldxg from the chunk's start) over ngr groups of gs steps; scales
 * sc[(gi * rv + h) * 16 + i]; the float accumulators facc[b * 32 + h * 16]. */
INLINE void mk_w4(const int rv, const int nt, const int gs, const uint8_t *p, const float *sc,
                  int64_t ngr, const int8_t *xp, int64_t ldxp, const int32_t *xg, int64_t ldxg,
                  float *facc)
{
    __m512 acc[2][W4_NT];
#pragma GCC unroll 2
    for (int h = 0; h < rv; h++)
#pragma GCC unroll 6
        for (int b = 0; b < nt; b++) acc[h][b] = _mm512_load_ps(facc + b * 32 + h * 16);
    for (int64_t gi = 0; gi < ngr; gi++) {
        __m512i d[2][W4_NT];
#pragma GCC unroll 6
        for (int b = 0; b < nt; b++) {
            const __m512i c = _mm512_set1_epi32(xg[b * ldxg + gi]);
#pragma GCC unroll 2
            for (int h = 0; h < rv; h++) d[h][b] = c;
        }
        const uint8_t *pg = p + gi * gs * rv * 64;
        const int8_t *xgp = xp + gi * gs * 4;
#pragma GCC unroll 8
        for (int s = 0; s < gs; s++) {
#pragma GCC unroll 2
            for (int h = 0; h < rv; h++) {
                const __m512i wv = _mm512_load_si512(pg + (s * rv + h) * 64);
#pragma GCC unroll 6
                for (int b = 0; b < nt; b++)
                    d[h][b] = w4_dp(d[h][b], wv, xgp + b * ldxp + 4 * s);
            }
        }
#pragma GCC unroll 2
        for (int h = 0; h < rv; h++) {
            const __m512 sv = _mm512_load_ps(sc + (gi * rv + h) * 16);
#pragma GCC unroll 6
            for (int b = 0; b < nt; b++)
                acc[h][b] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d[h][b]), sv, acc[h][b]);
        }
    }
#pragma GCC unroll 2
    for (int h = 0; h < rv; h++)
#pragma GCC unroll 6
        for (int b = 0; b < nt; b++) _mm512_store_ps(facc + b * 32 + h * 16, acc[h][b]);
}

#define W4_TILE(rv_, g32_)                                                                     \
    switch (nt) {                                                                              \
    case 1: mk_w4(rv_, 1, (g32_) ? 8 : 32, p, sc, ngr, xp, ldxp, xg, ldxg, facc); break;       \
    case 2: mk_w4(rv_, 2, (g32_) ? 8 : 32, p, sc, ngr, xp, ldxp, xg, ldxg, facc); break;       \
    case 3: mk_w4(rv_, 3, (g32_) ? 8 : 32, p, sc, ngr, xp, ldxp, xg, ldxg, facc); break;       \
    case 4: mk_w4(rv_, 4, (g32_) ? 8 : 32, p, sc, ngr, xp, ldxp, xg, ldxg, facc); break;       \
    case 5: mk_w4(rv_, 5, (g32_) ? 8 : 32, p, sc, ngr, xp, ldxp, xg, ldxg, facc); break;       \
    case 6: mk_w4(rv_, 6, (g32_) ? 8 : 32, p, sc, ngr, xp, ldxp, xg, ldxg, facc); break;       \
    default: DSR1_ASSERT(!"w4a8 tile shape");                                                  \
    }

static void tile_w4(int rv, int nt, int g32, const uint8_t *p, const float *sc, int64_t ngr,
                    const int8_t *xp, int64_t ldxp, const int32_t *xg, int64_t ldxg, float *facc)
{
    if (rv == 2 && g32) {
        W4_TILE(2, 1)
    } else if (rv == 2) {
        W4_TILE(2, 0)
    } else if (g32) {
        W4_TILE(1, 1)
    } else {
        W4_TILE(1, 0)
    }
}

/* Rows [r, r + pr) (pr <= 32, rv = 1 or 2 halves of 16), columns
 * [c0, c0 + len) into the code panel (mk_w4's layout) and their scales
 * into sc. */
static void w4_panel(const dsr1_wmat *w, int64_t r, int pr, int rv, int64_t c0, int64_t len,
                     int f16, uint8_t *p, float *sc)
{
    /* the lines the next panel reads here into L2, as i8l_panel does
     * (bench kernels --type int4, 18432x7168, 2 threads: n = 5 5.7 -> 3.6
     * ms, 8 7.2 -> 4.8, 16 9.8 -> 7.3, 24 12.4 -> 9.8, 64 25.8 -> 22.8,
     * 512 unchanged; batch-8 decode of the r1-shape INT4 file 46 -> 51
     * tok/s) */
    const int64_t ld = w->cols / 2;
    const char *nx = (const char *)w->data + (c0 + len < w->cols ? r * ld + (c0 + len) / 2 : (r + 32) * ld);
    for (int h = 0; h < rv; h++) {
        int ph = pr - 16 * h < 16 ? pr - 16 * h : 16;
        for (int64_t k0 = 0; k0 < len; k0 += 128) {
            __m512i v[16];
#pragma GCC unroll 16
            for (int i = 0; i < 16; i++) _mm_prefetch(nx + (16 * h + i) * ld + k0 / 2, _MM_HINT_T1);
            w4_block(w, r + 16 * h, ph, c0 + k0, v);
            uint8_t *o = p + (k0 / 4 * rv + h) * 64;
#pragma GCC unroll 16
            for (int k = 0; k < 16; k++) {
                _mm512_store_si512(o + (2 * k * rv) * 64, w4_lo(v[k]));
                _mm512_store_si512(o + ((2 * k + 1) * rv) * 64, w4_hi(v[k]));
            }
        }
        w4_scales(w, r + 16 * h, ph, c0 / w->group, len / w->group, f16, sc + 16 * h, 16 * rv);
    }
}

static void w4_gemv_any(const dsr1_mm_job *j, int64_t r0, int64_t r1, int g32)
{
    switch (j->n * 2 + g32) {
    case 2:
        if (j->w->cols <= W4R_MAXC && j->w->cols % 128 == 0) {
            if (j->hwpf) w4_row(0, j, r0, r1);
            else w4_row(1, j, r0, r1);
        } else {
            w4_gemv1(0, j, r0, r1);
        }
        break;
    case 3: w4_gemv1(1, j, r0, r1); break;
    case 4: w4_gemv(2, 0, j, r0, r1); break;
    case 5: w4_gemv(2, 1, j, r0, r1); break;
    case 6: w4_gemv(3, 0, j, r0, r1); break;
    case 7: w4_gemv(3, 1, j, r0, r1); break;
    case 8: w4_gemv(4, 0, j, r0, r1); break;
    case 9: w4_gemv(4, 1, j, r0, r1); break;
    case 10: w4_gemv(5, 0, j, r0, r1); break;
    case 11: w4_gemv(5, 1, j, r0, r1); break;
    case 12: w4_gemv(6, 0, j, r0, r1); break;
    case 13: w4_gemv(6, 1, j, r0, r1); break;
    case 14: w4_gemv(7, 0, j, r0, r1); break;
    case 15: w4_gemv(7, 1, j, r0, r1); break;
    case 16: w4_gemv(8, 0, j, r0, r1); break;
    case 17: w4_gemv(8, 1, j, r0, r1); break;
    default: DSR1_ASSERT(!"w4a8 gemv tokens");
    }
}

void dsr1_mm_w4_panel(const dsr1_wmat *w, int64_t r, int pr, int rv, int64_t c0, int64_t len, uint8_t *p,
                      float *sc)
{
    w4_panel(w, r, pr, rv, c0, len, w->scale_type == DSR1_T_F16, p, sc);
}

/* W4A8 rows [r0, r1), all tokens (see above). Groups other than the
 * format's 32 and 128, or F32 scales, go to the portable rows (same bits);
 * groups of 128 from DSR1_MM_AMX_MIN_N tokens to the AMX tiles where the
 * job has them (matmul_amx_avx512.c, the same bits). */
void dsr1_mm_rows_w4a8_avx512(const dsr1_mm_job *j, int64_t r0, int64_t r1)
{
    const dsr1_wmat *w = j->w;
    const int64_t g = w->group;
    if ((g != 32 && g != 128) || (w->scale_type != DSR1_T_F16 && w->scale_type != DSR1_T_BF16) ||
        !j->xp) {
        dsr1_mm_rows_portable(j, r0, r1);
        return;
    }
    if (j->n <= W4_GV_N) {
        w4_gemv_any(j, r0, r1, g == 32);
        return;
    }
    if (g == 128 && j->amx_mem && j->n >= DSR1_MM_AMX_MIN_N) {
        dsr1_mm_rows_w4a8_amx(j, r0, r1);
        return;
    }
    dsr1_mm_rows_w4a8_lanes_avx512(j, r0, r1);
}

/* The code-panel kernel above for any n (what the AMX tiles leave it). */
void dsr1_mm_rows_w4a8_lanes_avx512(const dsr1_mm_job *j, int64_t r0, int64_t r1)
{
    const dsr1_wmat *w = j->w;
    const int64_t g = w->group;
    const int g32 = g == 32, f16 = w->scale_type == DSR1_T_F16;
    _Alignas(64) uint8_t codes[32 * W4_KC];       /* the chunk's code panel */
    _Alignas(64) float sc[W4_KC / 32 * 32];       /* its scales, [group][row] */
    _Alignas(64) float facc[W4_TB * 32];          /* [token of the block][row] */
    for (int64_t r = r0; r < r1; r += 32) {
        const int pr = (int)(r1 - r < 32 ? r1 - r : 32), rv = pr > 16 ? 2 : 1;
        for (int t0 = 0; t0 < j->n; t0 += W4_TB) {
            const int nb = j->n - t0 < W4_TB ? j->n - t0 : W4_TB;
            memset(facc, 0, (size_t)nb * 32 * sizeof *facc);
            for (int64_t c0 = 0; c0 < w->cols; c0 += W4_KC) {
                const int64_t len = w->cols - c0 < W4_KC ? w->cols - c0 : W4_KC;
                w4_panel(w, r, pr, rv, c0, len, f16, codes, sc);
                for (int b0 = 0; b0 < nb; b0 += W4_NT) {
                    const int nt = nb - b0 < W4_NT ? nb - b0 : W4_NT;
                    tile_w4(rv, nt, g32, codes, sc, len / g, j->xp + (t0 + b0) * j->ldxp + c0,
                            j->ldxp, j->xg + (t0 + b0) * j->ldxg + c0 / g, j->ldxg,
                            facc + b0 * 32);
                }
            }
            for (int b = 0; b < nb; b++)
                for (int h = 0; h < rv; h++)
                    w4_store(j->y + (t0 + b) * j->ldy + r + 16 * h, pr - 16 * h,
                             _mm512_load_ps(facc + b * 32 + h * 16), j->xs[t0 + b]);
        }
    }
}

/* ---- W8A8 with rows in lanes ---------------------------------------------------- */

/* W8A8, one scale per row, many tokens, rows in lanes (as W4A8 above):
 * a 32-row x I8L_KC-column chunk of W is transposed once per token block
 * into a code panel, where a vector holds 4 columns of 16 rows (already
 * w + 128, the unsigned operand of vpdpbusd); a tile of up to 6 tokens x 32
 * rows then adds 4 columns per vpdpbusd with the token's 4 bytes of x read
 * by the instruction itself, into 12 int32 accumulators that are each
 * 16 rows' dots, so no horizontal sums are left at the end (lanes as
 * columns, rows_int8_panel, spends ~10 instructions reducing each row x
 * token dot per chunk). The dots are the same exact integers and the
 * float steps the same, so results are bit-identical to the other paths.
 * Columns a multiple of 64 (R1's shapes) and from I8L_MIN_N tokens
 * (matmul_avx512.c); others take rows_int8_panel. */
#define I8L_NT 6
#define I8L_TB 512
#define I8L_KC 512

/* The transpose both lanes panels share (bytes: W8A8's 4 columns or
 * BF16's 2 per 32-bit lane): rows [r, r + pr) (rv halves of 16) of a
 * matrix with rows of ld bytes, bytes [b0, b0 + len) of each (len a
 * multiple of 64) into p, step s (bytes b0 + 4s .. 4s + 3) of half h at
 * p + (s * rv + h) * 64, lane i = row r + 16h + i, each byte xor flip;
 * missing rows zero. The lines the next panel reads in this place (the
 * next chunk of these rows, after the last one the first chunk of the
 * next 32 rows) go into L2: 32 rows are 32 streams of 512 bytes, more
 * than the hardware prefetcher follows (past the matrix: prefetches do
 * not fault). */
INLINE void lanes_panel(const uint8_t *data, int64_t ld, int64_t r, int pr, int rv, int64_t b0,
                        int64_t len, __m512i flip, uint8_t *p)
{
    const uint8_t *q = data + r * ld + b0;
    const uint8_t *nx = b0 + len < ld ? q + len : q - b0 + 32 * ld;
    for (int h = 0; h < rv; h++) {
        const int ph = pr - 16 * h < 16 ? pr - 16 * h : 16;
        for (int64_t k0 = 0; k0 < len; k0 += 64) {
            __m512i v[16];
#pragma GCC unroll 16
            for (int i = 0; i < 16; i++) {
                _mm_prefetch((const char *)(nx + (16 * h + i) * ld + k0), _MM_HINT_T1);
                v[i] = i < ph ? _mm512_xor_si512(_mm512_loadu_si512(q + (16 * h + i) * ld + k0), flip)
                              : _mm512_setzero_si512();
            }
            tr16(v);
            uint8_t *o = p + (k0 / 4 * rv + h) * 64;
#pragma GCC unroll 16
            for (int k = 0; k < 16; k++) _mm512_store_si512(o + k * rv * 64, v[k]);
        }
    }
}

/* Rows [r, r + pr) (pr <= 32, rv halves of 16), columns [c0, c0 + len)
 * (len a multiple of 64) into the panel: step s (columns c0 + 4s .. 4s+3)
 * of half h at p + (s * rv + h) * 64, lane i = row r + 16h + i, bytes
 * w + 128; missing rows are zero (their lanes are not stored). */
void dsr1_mm_i8l_panel(const dsr1_wmat *w, int64_t r, int pr, int rv, int64_t c0, int64_t len,
                       uint8_t *p)
{
    lanes_panel(w->data, w->cols, r, pr, rv, c0, len, _mm512_set1_epi8((char)0x80), p);
}

void dsr1_mm_b16l_panel(const dsr1_wmat *w, int64_t r, int pr, int rv, int64_t c0, int64_t len,
                        uint8_t *p)
{
    lanes_panel(w->data, w->cols * 2, r, pr, rv, c0 * 2, len * 2, _mm512_setzero_si512(), p);
}

/* A tile: rv x 16 rows of the panel x nt tokens over `steps` steps of 4
 * bytes of x, broadcast by the instruction: W8A8's 4 int8 columns into
 * int32 by vpdpbusd, or (bf) a bf16 pair into float by vdpbf16ps. The
 * accumulators acc[b * 32 + h * 16 + i] (int32 or float bits) are kept
 * across chunks; ldx is in bytes. */
INLINE void mk_lanes(const int bf, const int rv, const int nt, int64_t steps, const uint8_t *p,
                     const uint8_t *x, int64_t ldx, void *accm)
{
    __m512i acc[2][I8L_NT], *am = accm;
#pragma GCC unroll 2
    for (int h = 0; h < rv; h++)
#pragma GCC unroll 6
        for (int b = 0; b < nt; b++) acc[h][b] = _mm512_load_si512(am + b * 2 + h);
    for (int64_t s = 0; s < steps; s++) {
#pragma GCC unroll 2
        for (int h = 0; h < rv; h++) {
            const __m512i wv = _mm512_load_si512(p + (s * rv + h) * 64);
#pragma GCC unroll 6
            for (int b = 0; b < nt; b++) {
                const uint8_t *xs = x + b * ldx + 4 * s;
                acc[h][b] = bf ? _mm512_castps_si512(b16_dp(_mm512_castsi512_ps(acc[h][b]), wv,
                                                            (const uint16_t *)xs))
                               : w4_dp(acc[h][b], wv, (const int8_t *)xs);
            }
        }
    }
#pragma GCC unroll 2
    for (int h = 0; h < rv; h++)
#pragma GCC unroll 6
        for (int b = 0; b < nt; b++) _mm512_store_si512(am + b * 2 + h, acc[h][b]);
}

#define LANES_NTS(bf_, rv_)                                                               \
    switch (nt) {                                                                         \
    case 1: mk_lanes(bf_, rv_, 1, steps, p, x, ldx, acc); break;                          \
    case 2: mk_lanes(bf_, rv_, 2, steps, p, x, ldx, acc); break;                          \
    case 3: mk_lanes(bf_, rv_, 3, steps, p, x, ldx, acc); break;                          \
    case 4: mk_lanes(bf_, rv_, 4, steps, p, x, ldx, acc); break;                          \
    case 5: mk_lanes(bf_, rv_, 5, steps, p, x, ldx, acc); break;                          \
    default: mk_lanes(bf_, rv_, 6, steps, p, x, ldx, acc); break;                         \
    }

static void tile_lanes(int bf, int rv, int nt, int64_t steps, const uint8_t *p, const uint8_t *x,
                       int64_t ldx, void *acc)
{
    if (bf && rv == 2) {
        LANES_NTS(1, 2)
    } else if (bf) {
        LANES_NTS(1, 1)
    } else if (rv == 2) {
        LANES_NTS(0, 2)
    } else {
        LANES_NTS(0, 1)
    }
}

/* The driver of both kernels with rows in lanes, W8A8 (bf = 0) and BF16
 * (bf = 1, below): per 32-row block and block of I8L_TB tokens, each
 * chunk of I8L_KC bytes of the rows (512 int8 or 256 bf16 columns) is
 * transposed once into the panel and every token tile runs over it, the
 * accumulators kept in acc between chunks; then y from them (W8A8: the
 * float steps of rows_int8_panel; BF16: the sums as they are). */
INLINE void rows_lanes(const int bf, const dsr1_mm_job *j, int64_t r0, int64_t r1)
{
    const dsr1_wmat *w = j->w;
    const int64_t es = bf ? 2 : 1, kc = I8L_KC / es; /* bytes a weight; columns a chunk */
    _Alignas(64) uint8_t panel[32 * I8L_KC]; /* the chunk's panel, 16 KB */
    _Alignas(64) int32_t acc[I8L_TB * 32];   /* [token of the block][row]: int32 or float bits */
    const float *fa = (const float *)acc, *sw = (const float *)w->scale; /* W8A8: one per row */
    const uint8_t *x = bf ? (const uint8_t *)j->xb : (const uint8_t *)j->xq;
    const int64_t ldx = bf ? 2 * j->ldxb : j->ldxq; /* bytes */
    const __m512i flip = bf ? _mm512_setzero_si512() : _mm512_set1_epi8((char)0x80);
    for (int64_t r = r0; r < r1; r += 32) {
        const int pr = (int)(r1 - r < 32 ? r1 - r : 32), rv = pr > 16 ? 2 : 1;
        for (int t0 = 0; t0 < j->n; t0 += I8L_TB) {
            const int nb = j->n - t0 < I8L_TB ? j->n - t0 : I8L_TB;
            memset(acc, 0, (size_t)nb * 32 * sizeof *acc);
            for (int64_t c0 = 0; c0 < w->cols; c0 += kc) {
                const int64_t len = w->cols - c0 < kc ? w->cols - c0 : kc;
                lanes_panel(w->data, w->cols * es, r, pr, rv, c0 * es, len * es, flip, panel);
                for (int b0 = 0; b0 < nb; b0 += I8L_NT) {
                    const int nt = nb - b0 < I8L_NT ? nb - b0 : I8L_NT;
                    tile_lanes(bf, rv, nt, len * es / 4, panel, x + (t0 + b0) * ldx + c0 * es, ldx,
                               acc + b0 * 32);
                }
            }
            for (int b = 0; b < nb; b++)
                for (int h = 0; h < rv; h++) {
                    const int ph = pr - 16 * h < 16 ? pr - 16 * h : 16;
                    const __mmask16 m = ph >= 16 ? 0xffff : (__mmask16)((1u << ph) - 1);
                    float *y = j->y + (t0 + b) * j->ldy + r + 16 * h;
                    if (bf) {
                        _mm512_mask_storeu_ps(y, m, _mm512_load_ps(fa + b * 32 + h * 16));
                        continue;
                    }
                    /* y = (dot - 128 sum x) * s_x * s_w, the order of rows_int8_panel */
                    const __m512i d = _mm512_sub_epi32(_mm512_load_si512(acc + b * 32 + h * 16),
                                                       _mm512_set1_epi32(128 * j->xsum[t0 + b]));
                    const __m512 v = _mm512_mul_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(d),
                                                                 _mm512_set1_ps(j->xs[t0 + b])),
                                                   _mm512_maskz_loadu_ps(m, sw + r + 16 * h));
                    _mm512_mask_storeu_ps(y, m, v);
                }
        }
    }
}

void dsr1_mm_rows_int8_lanes_avx512(const dsr1_mm_job *j, int64_t r0, int64_t r1)
{
    rows_lanes(0, j, r0, r1);
}

/* BF16 weights, many tokens, in the fast mode: the layout of W8A8's rows
 * in lanes with a bf16 pair where INT8 has 4 bytes (rows_lanes above). A
 * 32-row x 256-column chunk is transposed once per token block into a
 * panel where a vector holds columns 2s, 2s + 1 of 16 rows; a tile of up
 * to 6 tokens x 32 rows then adds 2 columns of 16 rows per vdpbf16ps with
 * the token's pair of x read by the instruction itself ({1to16}), into float
 * accumulators that are each 16 rows' dots and stay in memory between
 * chunks. So each row's dot is one sequence of vdpbf16ps steps over its
 * columns in order (for any n, tiling or thread count), with no
 * horizontal sums; the canonical order (matmul_impl.h) instead sums 16
 * lanes per 2048-column chunk by a fixed tree, which cost the 4x6-tile
 * kernel ~6% of a 512-token matmul in reductions and its panel copy
 * another 3-6%. Not the canonical order, so only in the fast mode
 * (matmul.c: BF16 weights with DSR1_ACT_INT8_FAST, from DSR1_MM_B16L_MIN_N
 * tokens, columns a multiple of 32). vdpbf16ps flushes denormal inputs and
 * quiets NaNs itself, which the canonical kernels' copy did by hand. */
void dsr1_mm_rows_bf16_lanes_avx512(const dsr1_mm_job *j, int64_t r0, int64_t r1)
{
    rows_lanes(1, j, r0, r1);
}

/* FP8 as W8A8 (matmul_impl.h's order): the same panels and tiles, but W
 * has a scale per row and DSR1_MM_XG columns (its block) and x one per token
 * and DSR1_MM_XG columns, so each group's int32 accumulators start at -128
 * x the group's sum of xq (j->xgc; the exact dot at the group's end) and go into
 * float accumulators: one multiply of the rows' scales by the token's, one
 * convert and one fma per 32 vpdpbusd. The float accumulators stay in
 * memory between chunks (I8L_KC is whole groups); ws holds the chunk's
 * weight scales as [group][32 rows]. */
INLINE void mk_i8g(const int rv, const int nt, int64_t len, const uint8_t *p, const float *ws,
                   const int8_t *xq, int64_t ldx, const float *xs, const int32_t *xc, int64_t ldg,
                   float *facc)
{
    __m512 fa[2][I8L_NT];
#pragma GCC unroll 2
    for (int h = 0; h < rv; h++)
#pragma GCC unroll 6
        for (int b = 0; b < nt; b++) fa[h][b] = _mm512_load_ps(facc + b * 32 + h * 16);
    for (int64_t g0 = 0, gi = 0; g0 < len; g0 += DSR1_MM_XG, gi++) {
        const int64_t s1 = (len - g0 < DSR1_MM_XG ? len : g0 + DSR1_MM_XG) / 4;
        __m512i acc[2][I8L_NT];
#pragma GCC unroll 6
        for (int b = 0; b < nt; b++) {
            acc[0][b] = _mm512_set1_epi32(xc[b * ldg + gi]);
            acc[1][b] = acc[0][b];
        }
        for (int64_t s = g0 / 4; s < s1; s++) {
#pragma GCC unroll 2
            for (int h = 0; h < rv; h++) {
                const __m512i wv = _mm512_load_si512(p + (s * rv + h) * 64);
#pragma GCC unroll 6
                for (int b = 0; b < nt; b++) acc[h][b] = w4_dp(acc[h][b], wv, xq + b * ldx + 4 * s);
            }
        }
#pragma GCC unroll 2
        for (int h = 0; h < rv; h++) {
            const __m512 wsv = _mm512_load_ps(ws + gi * 32 + h * 16);
#pragma GCC unroll 6
            for (int b = 0; b < nt; b++)
                fa[h][b] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[h][b]),
                                           _mm512_mul_ps(wsv, _mm512_set1_ps(xs[b * ldg + gi])), fa[h][b]);
        }
    }
#pragma GCC unroll 2
    for (int h = 0; h < rv; h++)
#pragma GCC unroll 6
        for (int b = 0; b < nt; b++) _mm512_store_ps(facc + b * 32 + h * 16, fa[h][b]);
}

#define I8G_NTS(rv_)                                                                      \
    switch (nt) {                                                                         \
    case 1: mk_i8g(rv_, 1, len, p, ws, xq, ldx, xs, xc, ldg, facc); break;              \
    case 2: mk_i8g(rv_, 2, len, p, ws, xq, ldx, xs, xc, ldg, facc); break;              \
    case 3: mk_i8g(rv_, 3, len, p, ws, xq, ldx, xs, xc, ldg, facc); break;              \
    case 4: mk_i8g(rv_, 4, len, p, ws, xq, ldx, xs, xc, ldg, facc); break;              \
    case 5: mk_i8g(rv_, 5, len, p, ws, xq, ldx, xs, xc, ldg, facc); break;              \
    default: mk_i8g(rv_, 6, len, p, ws, xq, ldx, xs, xc, ldg, facc); break;             \
    }

static void tile_i8g(int rv, int nt, int64_t len, const uint8_t *p, const float *ws, const int8_t *xq,
                     int64_t ldx, const float *xs, const int32_t *xc, int64_t ldg, float *facc)
{
    if (rv == 2) {
        I8G_NTS(2)
    } else {
        I8G_NTS(1)
    }
}

void dsr1_mm_rows_int8g_lanes_avx512(const dsr1_mm_job *j, int64_t r0, int64_t r1)
{
    const dsr1_wmat *w = j->w;
    _Alignas(64) uint8_t codes[32 * I8L_KC];              /* the chunk's code panel, 16 KB */
    _Alignas(64) float ws[I8L_KC / DSR1_MM_XG * 32];      /* its scales, [group][row] */
    _Alignas(64) float facc[I8L_TB * 32];                 /* [token of the block][row] */
    const float *sw = (const float *)w->scale;            /* [row][group] */
    _Static_assert(I8L_KC % DSR1_MM_XG == 0, "a chunk is whole groups");
    for (int64_t r = r0; r < r1; r += 32) {
        const int pr = (int)(r1 - r < 32 ? r1 - r : 32), rv = pr > 16 ? 2 : 1;
        for (int t0 = 0; t0 < j->n; t0 += I8L_TB) {
            const int nb = j->n - t0 < I8L_TB ? j->n - t0 : I8L_TB;
            memset(facc, 0, (size_t)nb * 32 * sizeof *facc);
            for (int64_t c0 = 0; c0 < w->cols; c0 += I8L_KC) {
                const int64_t len = w->cols - c0 < I8L_KC ? w->cols - c0 : I8L_KC;
                dsr1_mm_i8l_panel(w, r, pr, rv, c0, len, codes);
                for (int64_t gi = 0; gi * DSR1_MM_XG < len; gi++)
                    for (int i = 0; i < 32; i++)
                        ws[gi * 32 + i] = i < pr ? sw[(r + i) * j->ldg + c0 / DSR1_MM_XG + gi] : 0.0f;
                for (int b0 = 0; b0 < nb; b0 += I8L_NT) {
                    const int nt = nb - b0 < I8L_NT ? nb - b0 : I8L_NT;
                    const int64_t xo = (t0 + b0) * j->ldg + c0 / DSR1_MM_XG;
                    tile_i8g(rv, nt, len, codes, ws, j->xq + (t0 + b0) * j->ldxq + c0, j->ldxq,
                             j->xgs + xo, j->xgc + xo, j->ldg, facc + b0 * 32);
                }
            }
            for (int b = 0; b < nb; b++)
                for (int h = 0; h < rv; h++) {
                    const int ph = pr - 16 * h < 16 ? pr - 16 * h : 16;
                    const __mmask16 m = ph >= 16 ? 0xffff : (__mmask16)((1u << ph) - 1);
                    _mm512_mask_storeu_ps(j->y + (t0 + b) * j->ldy + r + 16 * h, m,
                                          _mm512_load_ps(facc + b * 32 + h * 16));
                }
        }
    }
}

/* ---- W8A8 with tokens in lanes ------------------------------------------------- */

/* The roles of the lanes kernel above, swapped: a vector holds 4 bytes of
 * x of each of 16 tokens (xt: xq + 128, the unsigned operand of vpdpbusd,
 * made once per call by dsr1_mm_xt_fill_avx512), and the 4 weight bytes
 * of a row are read by the instruction itself from the matrix as stored
 * (signed, broadcast). So no code panel: the lanes kernel transposes every
 * 32-row chunk of W for each block of tokens (dsr1_mm_i8l_panel, 16 KB
 * through 16 shuffle transposes), which its tiles pay back only over many
 * tokens; here the transposes are x's, once per call, rows/n times fewer
 * (11% faster at 16 and 32 tokens, even from 128: matmul.c). Each lane
 * ends with sum (xq + 128) * w of its token and row; the exact dot is
 * that minus 128 x the row's sum of w (computed per superblock of rows
 * while its lines come in), the same integer as the lanes kernel's, so
 * the float steps and the bits are the same.
 * Blocking: superblocks of XL_SR rows (their lines prefetched into L2
 * while the superblock before computes), chunks of XL_KC columns, tiles
 * of XL_TV token vectors x XL_RB rows (16 int32 accumulators, kept in
 * memory between chunks). */
#define XL_RB 8
#define XL_TV 2
#define XL_SR 32
#define XL_KC 256
#define XL_TB 512

void dsr1_mm_xt_fill_avx512(const int8_t *xq, int64_t ldxq, int n, uint8_t *xt, int64_t ldxt)
{
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    for (int v = 0; v * 16 < n; v++) {
        const int nv = n - 16 * v < 16 ? n - 16 * v : 16;
        for (int64_t c = 0; c < ldxq; c += 64) {
            __m512i x[16];
#pragma GCC unroll 16
            for (int i = 0; i < 16; i++)
                x[i] = i < nv ? _mm512_xor_si512(_mm512_loadu_si512(xq + (16 * v + i) * ldxq + c), flip)
                              : _mm512_setzero_si512();
            tr16(x);
            uint8_t *o = xt + v * ldxt + c * 16;
#pragma GCC unroll 16
            for (int k = 0; k < 16; k++) _mm512_store_si512(o + k * 64, x[k]);
        }
    }
}

/* rb rows (at w, stride ldw) x tv token vectors (xt at stride ldxt) over
 * steps 4-column steps, into acc[(v * XL_SR + r) * 16]. */
INLINE void mk_xl(const int tv, const int rb, int64_t steps, const int8_t *w, int64_t ldw,
                  const uint8_t *xt, int64_t ldxt, int32_t *acc, const char *pf, int pfr)
{
    __m512i a[XL_TV][XL_RB];
#pragma GCC unroll 2
    for (int v = 0; v < tv; v++)
#pragma GCC unroll 8
        for (int r = 0; r < rb; r++) a[v][r] = _mm512_load_si512(acc + (v * XL_SR + r) * 16);
    for (int64_t s = 0; s < steps; s++) {
        /* pf: the next superblock's pfr rows here, one line every other step */
        if (pf && !(s & 1) && s / 2 < XL_RB * (steps / 16) && s / 2 % XL_RB < pfr)
            _mm_prefetch(pf + (s / 2 % XL_RB) * ldw + s / 2 / XL_RB * 64, _MM_HINT_T1);
        __m512i xv[XL_TV];
#pragma GCC unroll 2
        for (int v = 0; v < tv; v++) xv[v] = _mm512_load_si512(xt + v * ldxt + s * 64);
#pragma GCC unroll 8
        for (int r = 0; r < rb; r++)
#pragma GCC unroll 2
            for (int v = 0; v < tv; v++)
                a[v][r] = w4_dp(a[v][r], xv[v], (const int8_t *)w + r * ldw + 4 * s);
    }
#pragma GCC unroll 2
    for (int v = 0; v < tv; v++)
#pragma GCC unroll 8
        for (int r = 0; r < rb; r++) _mm512_store_si512(acc + (v * XL_SR + r) * 16, a[v][r]);
}

#define XL_RBS(tv_)                                                                       \
    switch (rb) {                                                                         \
    case 1: mk_xl(tv_, 1, steps, w, ldw, xt, ldxt, acc, pf, pfr); break;                           \
    case 2: mk_xl(tv_, 2, steps, w, ldw, xt, ldxt, acc, pf, pfr); break;                           \
    case 3: mk_xl(tv_, 3, steps, w, ldw, xt, ldxt, acc, pf, pfr); break;                           \
    case 4: mk_xl(tv_, 4, steps, w, ldw, xt, ldxt, acc, pf, pfr); break;                           \
    case 5: mk_xl(tv_, 5, steps, w, ldw, xt, ldxt, acc, pf, pfr); break;                           \
    case 6: mk_xl(tv_, 6, steps, w, ldw, xt, ldxt, acc, pf, pfr); break;                           \
    case 7: mk_xl(tv_, 7, steps, w, ldw, xt, ldxt, acc, pf, pfr); break;                           \
    default: mk_xl(tv_, 8, steps, w, ldw, xt, ldxt, acc, pf, pfr); break;                          \
    }

static void tile_xl(int tv, int rb, int64_t steps, const int8_t *w, int64_t ldw, const uint8_t *xt,
                    int64_t ldxt, int32_t *acc, const char *pf, int pfr)
{
    if (tv == 2) {
        XL_RBS(2)
    } else {
        XL_RBS(1)
    }
}

/* A last token vector of at most 8 tokens (n % 16 in 1..8): its 8 lanes
 * alone, rb (<= 2 XL_RB) rows over steps 4-column steps into the low half
 * of acc[r * 16] (the upper lanes are no token's and are not stored).
 * Same exact dots as mk_xl's lanes, at half the cost: with 16 lanes a
 * 17-token call paid for 32. 16 rows: 16 chains for vpdpbusd's latency at
 * two 256-bit instructions a cycle. */
#define XL_RBY (2 * XL_RB)
INLINE void mk_xl_y(const int rb, int64_t steps, const int8_t *w, int64_t ldw, const uint8_t *xt,
                    int32_t *acc)
{
    __m256i a[XL_RBY];
#pragma GCC unroll 16
    for (int r = 0; r < rb; r++) a[r] = _mm256_load_si256((const __m256i *)(acc + r * 16));
    for (int64_t s = 0; s < steps; s++) {
        const __m256i xv = _mm256_load_si256((const __m256i *)(xt + s * 64));
#pragma GCC unroll 16
        for (int r = 0; r < rb; r++) a[r] = w4_dp8(a[r], xv, w + r * ldw + 4 * s);
    }
#pragma GCC unroll 16
    for (int r = 0; r < rb; r++) _mm256_store_si256((__m256i *)(acc + r * 16), a[r]);
}

static void tile_xl_y(int rb, int64_t steps, const int8_t *w, int64_t ldw, const uint8_t *xt, int32_t *acc)
{
#define XLY_C(rb_)                                                                        \
    case rb_: mk_xl_y(rb_, steps, w, ldw, xt, acc); break;
    switch (rb) {
        XLY_C(1) XLY_C(2) XLY_C(3) XLY_C(4) XLY_C(5) XLY_C(6) XLY_C(7) XLY_C(8)
        XLY_C(9) XLY_C(10) XLY_C(11) XLY_C(12) XLY_C(13) XLY_C(14) XLY_C(15)
    default: mk_xl_y(XL_RBY, steps, w, ldw, xt, acc); break;
    }
#undef XLY_C
}

/* Whether a block of nb tokens (more than 16) ends in a vector of at most
 * 8 tokens: the 256-bit tiles take that one, the 512-bit tiles the rest. */
INLINE int xl_half(int nb) { return nb > 16 && (nb - 1) % 16 < 8; }

/* The exact sums of rows [r, r + pr) of w (columns a multiple of 64). */
static void xl_row_sums(const dsr1_wmat *w, int64_t r, int pr, int32_t *sum)
{
    const __m512i ones = _mm512_set1_epi8(1);
    for (int i = 0; i < pr; i++) {
        const int8_t *q = (const int8_t *)w->data + (r + i) * w->cols;
        __m512i a = _mm512_setzero_si512(), b = _mm512_setzero_si512();
        int64_t c = 0;
        for (; c + 128 <= w->cols; c += 128) {
            a = _mm512_dpbusd_epi32(a, ones, _mm512_loadu_si512(q + c));
            b = _mm512_dpbusd_epi32(b, ones, _mm512_loadu_si512(q + c + 64));
        }
        if (c < w->cols) a = _mm512_dpbusd_epi32(a, ones, _mm512_loadu_si512(q + c));
        sum[i] = _mm512_reduce_add_epi32(_mm512_add_epi32(a, b));
    }
}

void dsr1_mm_rows_int8_xl_avx512(const dsr1_mm_job *j, int64_t r0, int64_t r1)
{
    const dsr1_wmat *w = j->w;
    const int64_t ldw = w->cols, ldxt = j->ldxt;
    _Alignas(64) int32_t acc[XL_TB / 16 * XL_SR * 16]; /* [token vector][row][lane] */
    _Alignas(64) float sw[XL_SR];
    int32_t sum[XL_SR];
    for (int64_t r = r0; r < r1; r += XL_SR) {
        const int pr = (int)(r1 - r < XL_SR ? r1 - r : XL_SR);
        /* the next superblock, also past this task's rows (the next task's) */
        const int64_t rn = r + XL_SR < w->rows ? r + XL_SR : w->rows;
        const int pn = (int)(w->rows - rn < XL_SR ? w->rows - rn : XL_SR);
        xl_row_sums(w, r, pr, sum);
        for (int i = 0; i < pr; i++) sw[i] = w->scale_type == DSR1_T_F32 ? ((const float *)w->scale)[r + i] : dsr1_wmat_scale(w, r + i, 0);
        for (int t0 = 0; t0 < j->n; t0 += XL_TB) {
            const int nb = j->n - t0 < XL_TB ? j->n - t0 : XL_TB, nvec = (nb + 15) / 16;
            memset(acc, 0, (size_t)nvec * XL_SR * 16 * sizeof *acc);
            const int half = xl_half(nb), nfull = nvec - half;
            for (int64_t c0 = 0; c0 < w->cols; c0 += XL_KC) {
                const int64_t len = w->cols - c0 < XL_KC ? w->cols - c0 : XL_KC;
                for (int v = 0; v < nfull; v += XL_TV) {
                    const int tv = nfull - v < XL_TV ? nfull - v : XL_TV;
                    for (int rr = 0; rr < pr; rr += XL_RB) {
                        const int rb = pr - rr < XL_RB ? pr - rr : XL_RB;
                        /* the first token tile brings the next superblock's lines of
                         * this chunk into L2, spread over its steps */
                        const char *pf = t0 == 0 && v == 0 && rr < pn
                                             ? (const char *)w->data + (rn + rr) * ldw + c0 : NULL;
                        tile_xl(tv, rb, len / 4, (const int8_t *)w->data + (r + rr) * ldw + c0, ldw,
                                j->xt + (t0 / 16 + v) * ldxt + c0 * 16, ldxt,
                                acc + (v * XL_SR + rr) * 16, pf, pn - rr < XL_RB ? pn - rr : XL_RB);
                    }
                }
                if (half) /* the chunk's rows are in L1 from the full vectors' tiles */
                    for (int rr = 0; rr < pr; rr += XL_RBY)
                        tile_xl_y(pr - rr < XL_RBY ? pr - rr : XL_RBY, len / 4,
                                  (const int8_t *)w->data + (r + rr) * ldw + c0, ldw,
                                  j->xt + (t0 / 16 + nfull) * ldxt + c0 * 16,
                                  acc + (nfull * XL_SR + rr) * 16);
            }
            /* y = (dot - 128 sum w) * s_x * s_w, the order of rows_int8_panel; 16
             * rows x 16 tokens transposed so that a token's rows go out as one store */
            for (int v = 0; v < nvec; v++) {
                const int nt = nb - 16 * v < 16 ? nb - 16 * v : 16;
                const __m512 xs = _mm512_maskz_loadu_ps(nt >= 16 ? 0xffff : (__mmask16)((1u << nt) - 1),
                                                        j->xs + t0 + 16 * v);
                for (int rg = 0; rg < pr; rg += 16) {
                    const int ph = pr - rg < 16 ? pr - rg : 16;
                    const __mmask16 m = ph >= 16 ? 0xffff : (__mmask16)((1u << ph) - 1);
                    __m512i f[16];
#pragma GCC unroll 16
                    for (int i = 0; i < 16; i++) {
                        if (i >= ph) {
                            f[i] = _mm512_setzero_si512();
                            continue;
                        }
                        const __m512i d = _mm512_sub_epi32(_mm512_load_si512(acc + (v * XL_SR + rg + i) * 16),
                                                           _mm512_set1_epi32(128 * sum[rg + i]));
                        f[i] = _mm512_castps_si512(_mm512_mul_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(d), xs),
                                                                 _mm512_set1_ps(sw[rg + i])));
                    }
                    tr16(f);
                    for (int k = 0; k < nt; k++)
                        _mm512_mask_storeu_ps(j->y + (t0 + 16 * v + k) * j->ldy + r + rg, m,
                                              _mm512_castsi512_ps(f[k]));
                }
            }
        }
    }
}

/* FP8 as W8A8 with tokens in lanes: the requantised rows of an rq job
 * (run_rows: at most DSR1_MM_RQ_ROWS, their block sums in j->wsum) against
 * xt, x's scales per group transposed (j->xst). A tile of tv token vectors x
 * rb rows runs all the columns with its float accumulators in registers:
 * per group the int32 dots start at -128 x the row's block sum (so they end
 * at the exact dot, as the lanes kernel's start at -128 x x's group sum),
 * then acc = fma(dot, s_w * s_x, acc), the order of mk_i8g (s_w * s_x and
 * s_x * s_w are one product). Below 32 tokens (R1's 256 experts give each
 * ~16 of a 512-token chunk) there is no code panel to transpose per call,
 * which cost as much as the dots there. j->pf: the next rows' FP8 bytes,
 * prefetched into L2 a few lines per group so that their requantisation
 * reads L2. */
#define XLG_RB1 12 /* rows per tile with one token vector */
#define XLG_RB2 6  /* with two */

INLINE void mk_xlg(const int tv, const int rb, int64_t cols, int64_t ng, const int8_t *w,
                   const float *ws, const int32_t *wsum, int64_t ldg, const uint8_t *xt, int64_t ldxt,
                   const float *xst, int64_t ldxst, float *out, const char *pf, int64_t pfn)
{
    __m512 f[2][XLG_RB1];
    __m512i a[2][XLG_RB1];
#pragma GCC unroll 2
    for (int v = 0; v < tv; v++)
#pragma GCC unroll 12
        for (int r = 0; r < rb; r++) f[v][r] = _mm512_setzero_ps();
    const int64_t per = (pfn + ng - 1) / ng;
    for (int64_t g = 0; g < ng; g++) {
        for (int64_t e = g * per < pfn ? g * per : pfn, k = e; k < e + per && k < pfn; k++)
            _mm_prefetch(pf + k * 64, _MM_HINT_T1);
#pragma GCC unroll 12
        for (int r = 0; r < rb; r++) {
            const __m512i c = _mm512_set1_epi32(-128 * wsum[r * ldg + g]);
#pragma GCC unroll 2
            for (int v = 0; v < tv; v++) a[v][r] = c;
        }
        const int64_t s1 = ((g + 1) * DSR1_MM_XG < cols ? (g + 1) * DSR1_MM_XG : cols) / 4;
        for (int64_t s = g * DSR1_MM_XG / 4; s < s1; s++) {
            __m512i xv[2];
#pragma GCC unroll 2
            for (int v = 0; v < tv; v++) xv[v] = _mm512_load_si512(xt + v * ldxt + s * 64);
#pragma GCC unroll 12
            for (int r = 0; r < rb; r++)
#pragma GCC unroll 2
                for (int v = 0; v < tv; v++) a[v][r] = w4_dp(a[v][r], xv[v], w + r * cols + 4 * s);
        }
        __m512 xs[2];
#pragma GCC unroll 2
        for (int v = 0; v < tv; v++) xs[v] = _mm512_load_ps(xst + g * ldxst + 16 * v);
#pragma GCC unroll 12
        for (int r = 0; r < rb; r++) {
            const __m512 wsv = _mm512_set1_ps(ws[r * ldg + g]);
#pragma GCC unroll 2
            for (int v = 0; v < tv; v++)
                f[v][r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(a[v][r]), _mm512_mul_ps(wsv, xs[v]), f[v][r]);
        }
    }
#pragma GCC unroll 2
    for (int v = 0; v < tv; v++)
#pragma GCC unroll 12
        for (int r = 0; r < rb; r++) _mm512_store_ps(out + (v * DSR1_MM_RQ_ROWS + r) * 16, f[v][r]);
}

/* mk_xlg for a last token vector of at most 8 tokens (xl_half): its 8
 * lanes alone in 256-bit registers, the same operations lane for lane (so
 * the same bits), at half the cost; out's upper lanes are left alone. */
INLINE void mk_xlg_y(const int rb, int64_t cols, int64_t ng, const int8_t *w, const float *ws,
                     const int32_t *wsum, int64_t ldg, const uint8_t *xt, const float *xst, int64_t ldxst,
                     float *out, const char *pf, int64_t pfn)
{
    __m256 f[XLG_RB1];
    __m256i a[XLG_RB1];
#pragma GCC unroll 12
    for (int r = 0; r < rb; r++) f[r] = _mm256_setzero_ps();
    const int64_t per = (pfn + ng - 1) / ng;
    for (int64_t g = 0; g < ng; g++) {
        for (int64_t e = g * per < pfn ? g * per : pfn, k = e; k < e + per && k < pfn; k++)
            _mm_prefetch(pf + k * 64, _MM_HINT_T1);
#pragma GCC unroll 12
        for (int r = 0; r < rb; r++) a[r] = _mm256_set1_epi32(-128 * wsum[r * ldg + g]);
        const int64_t s1 = ((g + 1) * DSR1_MM_XG < cols ? (g + 1) * DSR1_MM_XG : cols) / 4;
        for (int64_t s = g * DSR1_MM_XG / 4; s < s1; s++) {
            const __m256i xv = _mm256_load_si256((const __m256i *)(xt + s * 64));
#pragma GCC unroll 12
            for (int r = 0; r < rb; r++) a[r] = w4_dp8(a[r], xv, w + r * cols + 4 * s);
        }
        const __m256 xs = _mm256_loadu_ps(xst + g * ldxst);
#pragma GCC unroll 12
        for (int r = 0; r < rb; r++)
            f[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(a[r]), _mm256_mul_ps(_mm256_set1_ps(ws[r * ldg + g]), xs), f[r]);
    }
#pragma GCC unroll 12
    for (int r = 0; r < rb; r++) _mm256_store_ps(out + r * 16, f[r]);
}

static void tile_xlg_y(int rb, int64_t cols, int64_t ng, const int8_t *w, const float *ws,
                       const int32_t *wsum, int64_t ldg, const uint8_t *xt, const float *xst,
                       int64_t ldxst, float *out, const char *pf, int64_t pfn)
{
#define XLGY_C(rb_)                                                                       \
    case rb_: mk_xlg_y(rb_, cols, ng, w, ws, wsum, ldg, xt, xst, ldxst, out, pf, pfn); break;
    switch (rb) {
        XLGY_C(1) XLGY_C(2) XLGY_C(3) XLGY_C(4) XLGY_C(5) XLGY_C(6)
        XLGY_C(7) XLGY_C(8) XLGY_C(9) XLGY_C(10) XLGY_C(11)
    default: mk_xlg_y(XLG_RB1, cols, ng, w, ws, wsum, ldg, xt, xst, ldxst, out, pf, pfn); break;
    }
#undef XLGY_C
}

#define XLG_ARGS cols, ng, w, ws, wsum, ldg, xt, ldxt, xst, ldxst, out, pf, pfn
static void tile_xlg(int tv, int rb, int64_t cols, int64_t ng, const int8_t *w, const float *ws,
                     const int32_t *wsum, int64_t ldg, const uint8_t *xt, int64_t ldxt, const float *xst,
                     int64_t ldxst, float *out, const char *pf, int64_t pfn)
{
#define XLG_C(tv_, rb_)                                                                   \
    case rb_: mk_xlg(tv_, rb_, XLG_ARGS); break;
    if (tv == 2) {
        switch (rb) {
            XLG_C(2, 1) XLG_C(2, 2) XLG_C(2, 3) XLG_C(2, 4) XLG_C(2, 5)
        default: mk_xlg(2, 6, XLG_ARGS); break;
        }
        return;
    }
    switch (rb) {
        XLG_C(1, 1) XLG_C(1, 2) XLG_C(1, 3) XLG_C(1, 4) XLG_C(1, 5) XLG_C(1, 6)
        XLG_C(1, 7) XLG_C(1, 8) XLG_C(1, 9) XLG_C(1, 10) XLG_C(1, 11)
    default: mk_xlg(1, 12, XLG_ARGS); break;
    }
#undef XLG_C
}

/* 16 tokens' values of rows [0, pr) (out[(row) * 16 + lane], pr <= 32) to
 * y[t][row] for the nt <= 16 tokens there, 16 rows per transpose. */
static void xl_store(const float *out, int pr, int nt, float *y, int64_t ldy)
{
    for (int rg = 0; rg < pr; rg += 16) {
        const int ph = pr - rg < 16 ? pr - rg : 16;
        const __mmask16 m = ph >= 16 ? 0xffff : (__mmask16)((1u << ph) - 1);
        __m512i f[16];
#pragma GCC unroll 16
        for (int i = 0; i < 16; i++)
            f[i] = i < ph ? _mm512_load_si512(out + (rg + i) * 16) : _mm512_setzero_si512();
        tr16(f);
        for (int k = 0; k < nt; k++) _mm512_mask_storeu_ps(y + k * ldy + rg, m, _mm512_castsi512_ps(f[k]));
    }
}

/* The pass at token vector v: two full vectors, one, or (returning 1) the
 * last one of at most 8 tokens alone in 256-bit tiles; its tile rows. */
static int xlg_pass(int v, int nfull, int *tv, int *rbmax)
{
    if (v >= nfull) {
        *tv = 1;
        *rbmax = XLG_RB1;
        return 1;
    }
    *tv = nfull - v >= 2 ? 2 : 1;
    *rbmax = *tv == 2 ? XLG_RB2 : XLG_RB1;
    return 0;
}

void dsr1_mm_rows_int8g_xl_avx512(const dsr1_mm_job *j, int64_t r0, int64_t r1)
{
    const dsr1_wmat *w = j->w;
    const int64_t cols = w->cols, ng = j->ldg, ldxt = j->ldxt;
    _Alignas(64) float out[2 * DSR1_MM_RQ_ROWS * 16]; /* [token vector][row][lane] */
    const int nvec = (j->n + 15) / 16, half = xl_half(j->n), nfull = nvec - half;
    for (int64_t r = r0; r < r1; r += DSR1_MM_RQ_ROWS) {
        const int pr = (int)(r1 - r < DSR1_MM_RQ_ROWS ? r1 - r : DSR1_MM_RQ_ROWS);
        /* j->pf's lines, shared out over the tiles */
        const int64_t lines = j->pf && r == r0 ? (int64_t)j->pf_rows * cols / 64 : 0;
        int ntile = 0;
        for (int v = 0, tv, rbmax; v < nvec; v += tv) {
            xlg_pass(v, nfull, &tv, &rbmax);
            ntile += (pr + rbmax - 1) / rbmax;
        }
        const int64_t share = (lines + ntile - 1) / ntile;
        int64_t l0 = 0;
        for (int v = 0, tv, rbmax; v < nvec; v += tv) {
            /* the rows in tiles as even as they go (32 = 6+6+5+5+5+5, not
             * 6x5+2: a 2-row tile has too few chains for vpdpbusd's latency) */
            const int y = xlg_pass(v, nfull, &tv, &rbmax);
            const int nrt = (pr + rbmax - 1) / rbmax;
            for (int i = 0, rr = 0; i < nrt; i++) {
                const int rb = pr / nrt + (i < pr % nrt);
                const int64_t pfn = l0 + share < lines ? share : lines > l0 ? lines - l0 : 0;
                const int8_t *wr = (const int8_t *)w->data + (r + rr) * cols;
                const float *wsr = (const float *)w->scale + (r + rr) * ng;
                const char *pf = pfn ? j->pf + l0 * 64 : NULL;
                if (y)
                    tile_xlg_y(rb, cols, ng, wr, wsr, j->wsum + (r + rr) * ng, ng, j->xt + v * ldxt,
                               j->xst + 16 * v, j->ldxst, out + rr * 16, pf, pfn);
                else
                    tile_xlg(tv, rb, cols, ng, wr, wsr, j->wsum + (r + rr) * ng, ng, j->xt + v * ldxt, ldxt,
                             j->xst + 16 * v, j->ldxst, out + rr * 16, pf, pfn);
                l0 += pfn;
                rr += rb;
            }
            for (int k = 0; k < tv; k++) {
                const int t = 16 * (v + k), nt = j->n - t < 16 ? j->n - t : 16;
                xl_store(out + k * DSR1_MM_RQ_ROWS * 16, pr, nt, j->y + t * j->ldy + r, j->ldy);
            }
        }
    }
}

/* ---- activations for W4A8 -------------------------------------------------------- */

/* W4A8's x for the kernel above: xp[t] = xq[t] with each 8 columns in the
 * order 0,2,4,6,1,3,5,7 (the low then the high nibbles of 4 packed
 * bytes), zero up to ldxp (a multiple of 128 >= ldxq); xg[t][g] = -8 * the
 * sum of xq[t] over group g (32 or 128 columns), for ldxp / group groups. */
void dsr1_mm_w4_prep_avx512(const int8_t *xq, int64_t ldxq, int n, int64_t group, int8_t *xp,
                            int64_t ldxp, int32_t *xg, int64_t ldxg)
{
    const __m512i perm = _mm512_set4_epi32(0x0f0d0b09, 0x0e0c0a08, 0x07050301, 0x06040200);
    const __m512i ones = _mm512_set1_epi8(1);
    for (int t = 0; t < n; t++) {
        const int8_t *src = xq + t * ldxq;
        int8_t *o = xp + t * ldxp;
        int32_t *s = xg + t * ldxg;
        for (int64_t c = 0; c < ldxp; c += 64) {
            __m512i v = c < ldxq ? _mm512_loadu_si512(src + c) : _mm512_setzero_si512();
            _mm512_storeu_si512(o + c, _mm512_shuffle_epi8(v, perm));
            __m512i d = _mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, v);
            if (group == 32) {
                s[c / 32] = -8 * _mm512_mask_reduce_add_epi32(0x00ff, d);
                s[c / 32 + 1] = -8 * _mm512_mask_reduce_add_epi32(0xff00, d);
            } else if (c % 128 == 0) {
                __m512i v2 = c + 64 < ldxq ? _mm512_loadu_si512(src + c + 64) : _mm512_setzero_si512();
                d = _mm512_dpbusd_epi32(d, ones, v2);
                s[c / 128] = -8 * _mm512_reduce_add_epi32(d);
            }
        }
    }
}


/* ---- FP8 requantised to INT8 (the fast mode, matmul.c's run_rows) -------------- */

/* 16 e4m3 bytes -> float32 values: dsr1_mm_fp8_bf16's bits, shifted. */
INLINE __m512 fp8_f32x16(__m128i bytes)
{
    const __m512i sub = _mm512_setr_epi32(0x0000, 0x3b00, 0x3b80, 0x3bc0, 0x3c00, 0x3c20, 0x3c40,
                                          0x3c60, 0, 0, 0, 0, 0, 0, 0, 0);
    const __m512i v = _mm512_cvtepu8_epi32(bytes);
    const __m512i m = _mm512_and_si512(v, _mm512_set1_epi32(0x7f));
    const __m512i nrm = _mm512_add_epi32(_mm512_slli_epi32(m, 4), _mm512_set1_epi32(0x3c00));
    const __mmask16 small = _mm512_cmplt_epu32_mask(m, _mm512_set1_epi32(8));
    __m512i h = _mm512_mask_permutexvar_epi32(nrm, small, m, sub);
    h = _mm512_or_si512(h, _mm512_slli_epi32(_mm512_and_si512(v, _mm512_set1_epi32(0x80)), 8));
    return _mm512_castsi512_ps(_mm512_slli_epi32(h, 16));
}

/* q[c] = +-t[|code|] for len (a multiple of 64) codes, negated where the
 * code's sign and neg differ: one vpermi2b per 64. */
static __attribute__((target("avx512vbmi"))) __m512i rq_lookup(const int8_t t[128], const uint8_t *row,
                                                                int64_t len, int neg, int8_t *q)
{
    __m512i sum = _mm512_setzero_si512();
    const __m512i t0 = _mm512_loadu_si512(t), t1 = _mm512_loadu_si512(t + 64);
    const __m512i mag = _mm512_set1_epi8(0x7f);
    const __mmask64 flip = neg ? ~(__mmask64)0 : 0;
    for (int64_t c = 0; c < len; c += 64) {
        const __m512i b = _mm512_loadu_si512(row + c);
        const __m512i v = _mm512_permutex2var_epi8(t0, _mm512_and_si512(b, mag), t1);
        const __m512i o = _mm512_mask_sub_epi8(v, _mm512_movepi8_mask(b) ^ flip, _mm512_setzero_si512(), v);
        _mm512_storeu_si512(q + c, o);
        sum = _mm512_dpbusd_epi32(sum, _mm512_set1_epi8(1), o);
    }
    return sum;
}

/* The end of block k (the last one may be partial). */
INLINE int64_t end_of(int64_t k, int64_t g, int64_t cols)
{
    return (k + 1) * g < cols ? (k + 1) * g : cols;
}

/* dsr1_mm_fp8_rq_tab_fill's bytes: rint(127 v / m) by double division, 8
 * at a time (5.1 us on Zen 4, once per matmul call). */
void dsr1_mm_fp8_rq_tab_fill_avx512(dsr1_mm_rq_tab *t)
{
    for (int i = 0; i < 8; i++)
        _mm512_storeu_ps(t->value + 16 * i,
                         fp8_f32x16(_mm_add_epi8(_mm_set1_epi8((char)(16 * i)),
                                                 _mm_setr_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15))));
    memset(t->code[0], 0, sizeof t->code[0]);
    const __m512d k127 = _mm512_set1_pd(127.0), hi = _mm512_set1_pd(127.0);
    for (int top = 1; top < 128; top++) {
        const __m512d m = _mm512_set1_pd((double)t->value[top]);
        for (int i = 0; i < 128; i += 8) {
            const __m512d v = _mm512_cvtps_pd(_mm256_loadu_ps(t->value + i));
            const __m512d qd = _mm512_min_pd(_mm512_div_pd(_mm512_mul_pd(k127, v), m), hi);
            _mm_storel_epi64((__m128i *)(t->code[top] + i), _mm512_cvtepi32_epi8(_mm512_castsi256_si512(
                                                               _mm512_cvtpd_epi32(qd))));
        }
    }
}

/* 64 codes of a block by the 16-bit permutes of AVX-512 BW (no VBMI): the
 * table as words t16[0..127], q = +-t16[|code|], negated as rq_lookup. */
INLINE __m512i rq_lookup_w(const __m512i t16[4], const uint8_t *row, int64_t len, int neg, int8_t *q)
{
    const __mmask32 flip = neg ? ~(__mmask32)0 : 0;
    __m512i sum = _mm512_setzero_si512();
    for (int64_t c = 0; c < len; c += 32) {
        const __m256i b = _mm256_loadu_si256((const __m256i *)(row + c));
        const __m512i i16 = _mm512_cvtepu8_epi16(_mm256_and_si256(b, _mm256_set1_epi8(0x7f)));
        const __m512i lo = _mm512_permutex2var_epi16(t16[0], i16, t16[1]);
        const __m512i hi = _mm512_permutex2var_epi16(t16[2], i16, t16[3]);
        const __mmask32 up = _mm512_test_epi16_mask(i16, _mm512_set1_epi16(64));
        __m256i v = _mm512_cvtepi16_epi8(_mm512_mask_blend_epi16(up, lo, hi));
        v = _mm256_mask_sub_epi8(v, _mm256_movepi8_mask(b) ^ flip, _mm256_setzero_si256(), v);
        _mm256_storeu_si256((__m256i *)(q + c), v);
        sum = _mm512_dpbusd_epi32(sum, _mm512_set1_epi8(1), _mm512_zextsi256_si512(v));
    }
    return sum;
}

/* The largest magnitude code of row[c0, c1) (a multiple of 64 long). */
INLINE int rq_top(const uint8_t *row, int64_t c0, int64_t c1)
{
    const __m512i mag = _mm512_set1_epi8(0x7f);
    __m512i m = _mm512_setzero_si512();
    for (int64_t c = c0; c < c1; c += 64) m = _mm512_max_epu8(m, _mm512_and_si512(_mm512_loadu_si512(row + c), mag));
    __m256i h = _mm256_max_epu8(_mm512_castsi512_si256(m), _mm512_extracti64x4_epi64(m, 1));
    __m128i x = _mm_max_epu8(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
    x = _mm_max_epu8(x, _mm_srli_si128(x, 8));
    x = _mm_max_epu8(x, _mm_srli_si128(x, 4));
    x = _mm_max_epu8(x, _mm_srli_si128(x, 2));
    x = _mm_max_epu8(x, _mm_srli_si128(x, 1));
    return _mm_extract_epi8(x, 0);
}

/* fmaxf(0, m * |bs|) / 127 (matmul.c's scale) without the libm call:
 * vmaxss gives its second operand, 0, where the product is NaN, as fmaxf
 * does, and m * |bs| is never -0. */
INLINE float rq_scale(float m, float bs)
{
    return _mm_cvtss_f32(_mm_max_ss(_mm_set_ss(m * fabsf(bs)), _mm_setzero_ps())) / 127.0f;
}

/* Lane i: v[i]'s 16 lanes reduced (add: int32 sums, else byte-wise max):
 * gm_hsum8's transposing tree for 16 vectors, 45 instructions for 16
 * reductions instead of 8-10 each. */
INLINE __m512i rq_tree16(const __m512i v[16], const int add)
{
#define RQ_OP(a_, b_) (add ? _mm512_add_epi32(a_, b_) : _mm512_max_epu8(a_, b_))
    __m512i y[8], z[4];
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++)
        y[i] = RQ_OP(_mm512_unpacklo_epi32(v[2 * i], v[2 * i + 1]), _mm512_unpackhi_epi32(v[2 * i], v[2 * i + 1]));
    /* y[i], each 128-bit lane: v[2i]'s partials in dwords 0 and 2, v[2i+1]'s in 1 and 3 */
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++)
        z[i] = RQ_OP(_mm512_unpacklo_epi64(y[2 * i], y[2 * i + 1]), _mm512_unpackhi_epi64(y[2 * i], y[2 * i + 1]));
    /* z[i], each 128-bit lane: v[4i .. 4i+3]'s partials in dwords 0 .. 3 */
    const __m512i u0 = RQ_OP(_mm512_shuffle_i32x4(z[0], z[1], 0x88), _mm512_shuffle_i32x4(z[0], z[1], 0xdd));
    const __m512i u1 = RQ_OP(_mm512_shuffle_i32x4(z[2], z[3], 0x88), _mm512_shuffle_i32x4(z[2], z[3], 0xdd));
    return RQ_OP(_mm512_shuffle_i32x4(u0, u1, 0x88), _mm512_shuffle_i32x4(u0, u1, 0xdd));
#undef RQ_OP
}

/* Blocks k0 .. k0+nj-1 (nj <= 16, whole 128-column blocks) of a row:
 * largest codes (top, 16 bytes written) and scales (s), as rq_top and
 * rq_scale give them one at a time. */
INLINE __attribute__((target("avx512vbmi"))) void rq_tops16(const uint8_t *row, int64_t k0, const int nj,
                                                             const float *bs, const dsr1_mm_rq_tab *t,
                                                             uint8_t *top, float *s)
{
    const __m512i mag = _mm512_set1_epi8(0x7f);
    const __mmask16 live = (__mmask16)((1u << nj) - 1);
    __m512i v[16];
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++) {
        const uint8_t *b = row + (k0 + i) * 128;
        v[i] = i >= nj ? _mm512_setzero_si512()
                       : _mm512_max_epu8(_mm512_and_si512(_mm512_loadu_si512(b), mag),
                                         _mm512_and_si512(_mm512_loadu_si512(b + 64), mag));
    }
    /* the tree's max is byte-wise, so dword i ends with block i's four
     * byte columns' maxima: their max is the block's */
    __m512i m = rq_tree16(v, 0);
    m = _mm512_max_epu8(m, _mm512_srli_epi32(m, 16));
    m = _mm512_max_epu8(m, _mm512_srli_epi32(m, 8));
    const __m512i idx = _mm512_and_si512(m, _mm512_set1_epi32(0xff));
    _mm_storeu_si128((__m128i *)top, _mm512_cvtepi32_epi8(idx)); /* top holds 16 */
    /* value[top]: four 32-entry permutes, two blends by bit 5, one by bit 6 */
    const __m512 p0 = _mm512_permutex2var_ps(_mm512_loadu_ps(t->value), idx, _mm512_loadu_ps(t->value + 16));
    const __m512 p1 = _mm512_permutex2var_ps(_mm512_loadu_ps(t->value + 32), idx, _mm512_loadu_ps(t->value + 48));
    const __m512 p2 = _mm512_permutex2var_ps(_mm512_loadu_ps(t->value + 64), idx, _mm512_loadu_ps(t->value + 80));
    const __m512 p3 = _mm512_permutex2var_ps(_mm512_loadu_ps(t->value + 96), idx, _mm512_loadu_ps(t->value + 112));
    const __mmask16 b5 = _mm512_test_epi32_mask(idx, _mm512_set1_epi32(32));
    const __mmask16 b6 = _mm512_test_epi32_mask(idx, _mm512_set1_epi32(64));
    const __m512 val = _mm512_mask_blend_ps(b6, _mm512_mask_blend_ps(b5, p0, p1), _mm512_mask_blend_ps(b5, p2, p3));
    const __m512 prod = _mm512_mul_ps(val, _mm512_abs_ps(_mm512_maskz_loadu_ps(live, bs + k0)));
    /* vmaxps gives its second operand, 0, where prod is NaN (rq_scale) */
    _mm512_mask_storeu_ps(s + k0, live, _mm512_div_ps(_mm512_max_ps(prod, _mm512_setzero_ps()), _mm512_set1_ps(127.0f)));
}

/* A row of whole 128-column blocks (R1's) with VBMI, 16 blocks at a time:
 * their largest codes and scales (rq_tops16), then their codes by table,
 * unrolled (no call or loop per block: with them the lookups took half of
 * the row's time), then their sums by one transposing reduction. Against
 * rq_row_vbmi (the same bytes, scales and sums; one thread, 64 rows of
 * 7168 or 8192 columns from L2, Zen 4): 3.0-3.1 -> 2.1-2.2 ns per 64
 * columns. */
static __attribute__((target("avx512vbmi"))) void rq_row_128(const uint8_t *row, int64_t ncb, const float *bs,
                                                             const dsr1_mm_rq_tab *t, int8_t *q,
                                                             float *s_out, int32_t *sum_out)
{
    const __m512i one = _mm512_set1_epi8(1);
    for (int64_t k0 = 0; k0 < ncb; k0 += 16) {
        const int nj = ncb - k0 < 16 ? (int)(ncb - k0) : 16;
        _Alignas(16) uint8_t top[16];
        if (nj == 16) rq_tops16(row, k0, 16, bs, t, top, s_out);
        else rq_tops16(row, k0, nj, bs, t, top, s_out);
        __m512i sv[16];
#pragma GCC unroll 16
        for (int i = 0; i < 16; i++) {
            const int64_t kk = k0 + i;
            if (i >= nj || !(s_out[kk] > 0)) {
                if (i < nj) memset(q + kk * 128, 0, 128);
                sv[i] = _mm512_setzero_si512();
                continue;
            }
            const __mmask64 flip = bs[kk] < 0 ? ~(__mmask64)0 : 0;
            const int8_t *tb = t->code[top[i]];
            const __m512i t0 = _mm512_loadu_si512(tb), t1 = _mm512_loadu_si512(tb + 64);
            const __m512i b0 = _mm512_loadu_si512(row + kk * 128), b1 = _mm512_loadu_si512(row + kk * 128 + 64);
            __m512i v0 = _mm512_permutex2var_epi8(t0, b0, t1), v1 = _mm512_permutex2var_epi8(t0, b1, t1);
            const __mmask64 m0 = _mm512_movepi8_mask(b0), m1 = _mm512_movepi8_mask(b1);
            v0 = _mm512_mask_sub_epi8(v0, flip ? _knot_mask64(m0) : m0, _mm512_setzero_si512(), v0);
            v1 = _mm512_mask_sub_epi8(v1, flip ? _knot_mask64(m1) : m1, _mm512_setzero_si512(), v1);
            _mm512_storeu_si512(q + kk * 128, v0);
            _mm512_storeu_si512(q + kk * 128 + 64, v1);
            sv[i] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), one, v0), one, v1);
        }
        if (!sum_out) continue;
        const __m512i r = rq_tree16(sv, 1);
        _mm512_mask_storeu_epi32(sum_out + k0, (__mmask16)((1u << nj) - 1), r);
    }
}

/* A row with VBMI: first every block's largest code and scale (no calls,
 * so the blocks' loads and reductions overlap; whole 128-column blocks 16
 * at a time through one transposing reduction), then the codes by table,
 * their sums reduced 16 blocks at a time; profiled per block, the libm
 * fmaxf call and the lookup's call held each block's chain in turn. */
static __attribute__((target("avx512vbmi"))) void rq_row_vbmi(const uint8_t *row, int64_t cols, int64_t g,
                                                              int64_t ncb, const float *bs,
                                                              const dsr1_mm_rq_tab *t, int8_t *q,
                                                              float *s_out, int32_t *sum_out)
{
    for (int64_t k0 = 0; k0 < ncb; k0 += 64) {
        const int64_t k1 = k0 + 64 < ncb ? k0 + 64 : ncb;
        _Alignas(16) uint8_t top[64];
        int64_t k = k0;
        for (; g == 128 && k + 16 <= k1 && (k + 16) * 128 <= cols; k += 16)
            rq_tops16(row, k, 16, bs, t, top + (k - k0), s_out);
        for (; k < k1; k++) {
            top[k - k0] = (uint8_t)rq_top(row, k * g, end_of(k, g, cols));
            s_out[k] = rq_scale(t->value[top[k - k0]], bs[k]);
        }
        for (int64_t j0 = k0; j0 < k1; j0 += 16) {
            __m512i sv[16];
            const int nj = k1 - j0 < 16 ? (int)(k1 - j0) : 16;
            for (int i = 0; i < nj; i++) {
                const int64_t kk = j0 + i, len = end_of(kk, g, cols) - kk * g;
                if (!(s_out[kk] > 0)) {
                    memset(q + kk * g, 0, (size_t)len);
                    sv[i] = _mm512_setzero_si512();
                    continue;
                }
                sv[i] = rq_lookup(t->code[top[kk - k0]], row + kk * g, len, bs[kk] < 0, q + kk * g);
            }
            if (!sum_out) continue;
            for (int i = nj; i < 16; i++) sv[i] = _mm512_setzero_si512();
            _Alignas(64) int32_t sums[16];
            _mm512_store_si512(sums, rq_tree16(sv, 1));
            memcpy(sum_out + j0, sums, (size_t)nj * sizeof *sums);
        }
    }
}

/* Same bytes and scales as the scalar dsr1_mm_fp8_requant_row (matmul.c),
 * t from dsr1_mm_fp8_rq_tab_fill(_avx512). A block's top code comes from
 * a byte max; its codes from t's table for that top, with VBMI one
 * vpermi2b per 64 weights, else two vpermi2w and a blend per 32. */
void dsr1_mm_fp8_requant_row_avx512(const dsr1_wmat *w, int64_t r, int8_t *q, float *s_out,
                                    int32_t *sum_out, const dsr1_mm_rq_tab *t, int vbmi)
{
    const int64_t cols = w->cols, g = w->group, ncb = (cols + g - 1) / g;
    if (g % 64 || cols % 64) {
        dsr1_mm_fp8_requant_row(w, r, q, s_out);
        for (int64_t k = 0; sum_out && k < ncb; k++) {
            int32_t sum = 0;
            for (int64_t c = k * g; c < end_of(k, g, cols); c++) sum += q[c];
            sum_out[k] = sum;
        }
        return;
    }
    const uint8_t *row = (const uint8_t *)w->data + r * cols;
    const float *bs = (const float *)w->scale + (r / g) * ncb;
    if (vbmi && g == 128 && cols % 128 == 0) {
        rq_row_128(row, ncb, bs, t, q, s_out, sum_out);
        return;
    }
    if (vbmi) {
        rq_row_vbmi(row, cols, g, ncb, bs, t, q, s_out, sum_out);
        return;
    }
    for (int64_t k = 0; k < ncb; k++) {
        const int top = rq_top(row, k * g, end_of(k, g, cols));
        const float s = rq_scale(t->value[top], bs[k]);
        s_out[k] = s;
        if (!(s > 0)) {
            memset(q + k * g, 0, (size_t)(end_of(k, g, cols) - k * g));
            if (sum_out) sum_out[k] = 0;
            continue;
        }
        const int neg = bs[k] < 0;
        const __m512i t16[4] = {_mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)t->code[top])),
                                _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)(t->code[top] + 32))),
                                _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)(t->code[top] + 64))),
                                _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)(t->code[top] + 96)))};
        const __m512i sum = rq_lookup_w(t16, row + k * g, end_of(k, g, cols) - k * g, neg, q + k * g);
        if (sum_out) sum_out[k] = _mm512_reduce_add_epi32(sum);
    }
}

/* ---- transposes (the MLA forms' keys and latents) ------------------------------ */

/* dst[c][r] = src[r][c] for es-byte elements (4: float32; 2: bf16 bits,
 * widened to 32 bits for tr16 and narrowed back): 16x16 blocks through
 * registers, the tails element by element. */
INLINE void transpose_es(const int es, const char *src, int64_t lds, int rows, int cols, char *dst,
                         int64_t ldd)
{
    int r0 = 0;
    for (; r0 + 16 <= rows; r0 += 16) {
        int c0 = 0;
        for (; c0 + 16 <= cols; c0 += 16) {
            __m512i v[16];
#pragma GCC unroll 16
            for (int i = 0; i < 16; i++) {
                const char *a = src + ((r0 + i) * lds + c0) * es;
                v[i] = es == 4 ? _mm512_loadu_si512(a) : _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)a));
            }
            tr16(v);
#pragma GCC unroll 16
            for (int i = 0; i < 16; i++) {
                char *o = dst + ((c0 + i) * ldd + r0) * es;
                if (es == 4) _mm512_storeu_si512(o, v[i]);
                else _mm256_storeu_si256((__m256i *)o, _mm512_cvtepi32_epi16(v[i]));
            }
        }
        for (; c0 < cols; c0++)
            for (int i = 0; i < 16; i++) memcpy(dst + (c0 * ldd + r0 + i) * es, src + ((r0 + i) * lds + c0) * es, es);
    }
    for (; r0 < rows; r0++)
        for (int c = 0; c < cols; c++) memcpy(dst + (c * ldd + r0) * es, src + (r0 * lds + c) * es, es);
}

void dsr1_transpose_f32_avx512(const float *src, int64_t lds, int rows, int cols, float *dst,
                               int64_t ldd)
{
    transpose_es(4, (const char *)src, lds, rows, cols, (char *)dst, ldd);
}

/* The absorbed attention's bf16 latents (cpu_attention.c). */
void dsr1_transpose_u16_avx512(const uint16_t *src, int64_t lds, int rows, int cols, uint16_t *dst,
                               int64_t ldd)
{
    transpose_es(2, (const char *)src, lds, rows, cols, (char *)dst, ldd);
}
