/*
 * matmul_avx2.c - the matmul kernels for x86-64 CPUs with AVX2, FMA and
 * F16C but without AVX-512 BF16/VNNI (AMD Zen 2 and Zen 3, Intel Haswell
 * to Ice Lake client parts, many cloud VMs). Entered only through
 * dsr1_mm_rows_avx2 and the two preparations below, after
 * dsr1_mm_avx2_usable().
 *
 * Every kernel here gives the portable kernels' bits (matmul_impl.h's
 * canonical order); the tests compare them on every AVX2 machine, AVX-512
 * ones included (DSR1_MM_AVX2 forces these kernels there).
 *
 *   W8A8 (INT8 weights, INT8 mode): vpmaddubsw on |w| and x with w's
 *   sign moved onto x (vpsignb), then vpmaddwd by ones: each pair of
 *   products is at most 2 x 128 x 127 = 32512, so the 16-bit sums never
 *   saturate and the dots are exact; integer dots make the columns' order
 *   free, so 2 rows x up to 4 tokens share each load (the 4-token loop in
 *   assembly: gcc 12 spills the intrinsics' form).
 *   FP8 as W8A8 (the fast mode's prefill) and W4A8 from 5 tokens: rows in
 *   lanes - 8 rows interleaved 4 columns at a time, x's 4 columns
 *   broadcast - so each lane ends a scale group holding its row's exact
 *   dot: no reduction per 128-column group. W4A8's codes are unsigned, so
 *   vpmaddubsw takes them as they are against x (|code x q| <= 15 x 127);
 *   the -8 offset is the group's -8 x sum(q), added to the exact dot.
 *   W4A8 below 5 tokens reads the packed codes (a broadcast and a shift of
 *   16 bytes give 32 codes) against x reordered to match
 *   (dsr1_mm_w4_prep_avx2).
 *   FP8 in BF16 mode (decode): the e4m3 byte's bits moved into a
 *   float32's (sign, exponent and mantissa fields: value x 2^-120, exact
 *   for every code, the subnormals as float32 denormals) by integer shifts
 *   and masks, and one fused multiply-add per product with x' x 2^120.
 *   The canonical order multiplies and adds separately, flushing denormal
 *   sums; the two agree whenever each product is exact (an e4m3 value
 *   times a bf16 has at most 12 significant bits) and no sum can be
 *   denormal, which x' >= 2^-100 ensures (rows_fp8). The task clears
 *   MXCSR's flags first and reads them after: on underflow, overflow or
 *   an invalid operation (or an x' outside the bounds) it recomputes its
 *   rows with the portable kernel.
 *   BF16 weights in BF16 mode: the canonical multiply-then-add, with the
 *   same MXCSR check for the denormal sums it would flush.
 *   F32 mode: the canonical 16 lanes as two ymm accumulators, the same
 *   fused multiply-adds and hsum16's tree (the naive MLA form's score and
 *   value products take this path).
 *   Other cases (BF16 mode on F16/F32/INT weights, ragged shapes the
 *   vector loops do not cover) go to the portable kernels.
 */
#include "matmul_impl.h"

#include <immintrin.h>
#include <math.h>

#include "../../core/numeric.h"

#define INLINE static inline __attribute__((always_inline))
/* The GEMVs' software prefetch: each row's read position plus PF_AHEAD
 * bytes, or past the row's end the same place in the row the next tile
 * reads (R rows further), asked for at every step (every 32 bytes of FP8
 * and INT8, 16 of INT4; the repeats cost little, and every step beat one
 * per 64-byte line). A tile reads its 2-4 rows side by side, in runs of
 * 2-7 KiB: too short for Zen 3's hardware prefetcher to ramp up. Measured
 * with `dsr1 bench -m` (R1-shape 3 layers, prompt 16, decode 64, 2 threads,
 * AMD EPYC Zen 3, builds alternated, two rounds), decode tok/s without ->
 * with 1024 bytes ahead: FP8 5.59/5.32 -> 6.02/6.27, INT8 6.04/6.41 ->
 * 8.25/7.34, INT4 6.95/6.91 -> 9.37/9.12 (2048 ahead: 7.22/5.93,
 * 6.72/8.22, 9.07/8.59; one per line: 5.52/5.49, 6.51/6.08, 8.75/7.55).
 * Prefetches past the matrix's end do not fault. */
#define PF_AHEAD 1024
#define I8_RB 16   /* W8A8 rows per block from 5 tokens: L2-resident, reused per token tile */

/* ---- horizontal sums ----------------------------------------------------------- */

INLINE int32_t hsum8i(__m256i v)
{
    __m128i a = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    a = _mm_add_epi32(a, _mm_shuffle_epi32(a, 0x4e));
    a = _mm_add_epi32(a, _mm_shuffle_epi32(a, 0xb1));
    return _mm_cvtsi128_si32(a);
}

/* dsr1_mm_hsum16 of the 16 lanes lo (0-7), hi (8-15): the same tree. */
INLINE float hsum16(__m256 lo, __m256 hi)
{
    __m256 a = _mm256_add_ps(lo, hi);
    __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    __m128 c = _mm_add_ps(b, _mm_movehl_ps(b, b));
    __m128 d = _mm_add_ss(c, _mm_movehdup_ps(c));
    return _mm_cvtss_f32(d);
}

/* ---- W8A8 activations ------------------------------------------------------------- */

/* Mask of the first `left` (clamped to 0..8) float lanes. */
INLINE __m256i lanes_mask(int64_t left)
{
    int l = left < 0 ? 0 : left > 8 ? 8 : (int)left;
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(l), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* matmul.c's quant_span (and prep_avx512.c's) over len values, zero up to
 * padded (a multiple of 8): the same products, rounding to nearest even,
 * clamping (NaN kept, it converts to 0 as the scalar cast does on x86: the
 * low byte of 0x80000000), scale and sum. */
static void quant_span_avx2(const float *src, int64_t len, int64_t padded, int8_t *o, float *scale,
                            int32_t *sum_out)
{
    const __m256 absm = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    __m256 am = _mm256_setzero_ps();
    for (int64_t c = 0; c < len; c += 8) {
        __m256 v = _mm256_maskload_ps(src + c, lanes_mask(len - c));
        am = _mm256_max_ps(_mm256_and_ps(v, absm), am); /* NaN: am kept, as fmaxf */
    }
    float a8[8], amax = 0.0f;
    _mm256_storeu_ps(a8, am);
    for (int i = 0; i < 8; i++) amax = a8[i] > amax ? a8[i] : amax;
    float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
    const __m256 vinv = _mm256_set1_ps(inv), lim = _mm256_set1_ps(127.0f), nlim = _mm256_set1_ps(-127.0f);
    const __m256i pick = _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
                                          0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
    __m256i sum = _mm256_setzero_si256();
    for (int64_t c = 0; c < padded; c += 8) {
        __m256 v = _mm256_maskload_ps(src + c, lanes_mask(len - c));
        __m256 q = _mm256_round_ps(_mm256_mul_ps(v, vinv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        q = _mm256_blendv_ps(q, lim, _mm256_cmp_ps(q, lim, _CMP_GT_OQ));
        q = _mm256_blendv_ps(q, nlim, _mm256_cmp_ps(q, nlim, _CMP_LT_OQ));
        __m256i b = _mm256_shuffle_epi8(_mm256_cvttps_epi32(q), pick); /* low bytes */
        int32_t lo = _mm256_cvtsi256_si32(b), hi = _mm_cvtsi128_si32(_mm256_extracti128_si256(b, 1));
        memcpy(o + c, &lo, 4);
        memcpy(o + c + 4, &hi, 4);
        __m128i bytes = _mm_unpacklo_epi32(_mm_cvtsi32_si128(lo), _mm_cvtsi32_si128(hi));
        sum = _mm256_add_epi32(sum, _mm256_cvtepi8_epi32(bytes));
    }
    *scale = amax / 127.0f;
    *sum_out = hsum8i(sum);
}

void dsr1_mm_int8_rows_avx2(const float *x, int64_t ldx, int n, int64_t cols, int8_t *xq, int64_t ldxq,
                            float *xs, int32_t *xsum)
{
    for (int t = 0; t < n; t++) quant_span_avx2(x + t * ldx, cols, ldxq, xq + t * ldxq, xs + t, xsum + t);
}

void dsr1_mm_int8_groups_avx2(const float *x, int64_t ldx, int n, int64_t cols, int8_t *xq,
                              int64_t ldxq, float *xs, int32_t *xsum, int64_t ldg)
{
    for (int t = 0; t < n; t++)
        for (int64_t g = 0; g < ldg; g++) {
            const int64_t c = g * DSR1_MM_XG, len = cols - c < DSR1_MM_XG ? cols - c : DSR1_MM_XG;
            quant_span_avx2(x + t * ldx + c, len, g == ldg - 1 ? ldxq - c : DSR1_MM_XG, xq + t * ldxq + c,
                            xs + t * ldg + g, xsum + t * ldg + g);
        }
}

void dsr1_mm_w4_prep_avx2(const int8_t *xq, int64_t ldxq, int n, int64_t cols, int64_t group,
                          int8_t *xp, int64_t ldxp, int32_t *xg, int64_t ldxg)
{
    for (int t = 0; t < n; t++) {
        const int8_t *s = xq + t * ldxq;
        int8_t *d = xp + t * ldxp;
        for (int64_t c = 0; c < ldxp; c += 32)
            for (int i = 0; i < 16; i++) {
                d[c + i] = c + 2 * i < ldxq ? s[c + 2 * i] : 0;
                d[c + 16 + i] = c + 2 * i + 1 < ldxq ? s[c + 2 * i + 1] : 0;
            }
        for (int64_t g = 0; g * group < cols && g < ldxg; g++) {
            int32_t sum = 0;
            for (int64_t c = g * group; c < (g + 1) * group; c++) sum += s[c];
            xg[t * ldxg + g] = -8 * sum;
        }
    }
}

/* Scale i of w (core/wmat.c's scale_at, inline: the grouped tiles read
 * one per row and group). */
INLINE float scale_at(const dsr1_wmat *w, int64_t i)
{
    if (w->scale_type == DSR1_T_F16) {
        /* F16C's conversion is exact and dsr1_f16_to_f32's but for NaN
         * (it sets the quiet bit): those go the scalar way */
        const uint16_t h = ((const uint16_t *)w->scale)[i];
        return (h & 0x7c00) == 0x7c00 ? dsr1_f16_to_f32(h) : _cvtsh_ss(h);
    }
    if (w->scale_type == DSR1_T_BF16) return dsr1_bf16_to_f32(((const uint16_t *)w->scale)[i]);
    return ((const float *)w->scale)[i];
}

/* matmul.c's dsr1_mm_fp8_requant_row through the per-call table (the
 * same bytes and scales): a block's largest magnitude code by vector
 * maxima, then one lookup per weight. The lookup of a 7-bit magnitude in
 * the block's 128-byte table is 8 vpshufb (one per 16 entries, on the low
 * 4 bits) and a tree of 7 vpblendvb on bits 4, 5 and 6 (each shifted to
 * its byte's top bit, which is what vpblendvb reads): depth 3 instead of
 * a chain of 7, and no compares. Per 32 weights, Zen 3: the chain with
 * its compares, not unrolled by gcc, and a scalar pass for each block's
 * maximum took half of a 24-token W8A8 call (perf); see
 * tests/test_kernels_avx2.c for the bytes. */
INLINE int top_u8(__m256i mx)
{
    __m128i h = _mm_max_epu8(_mm256_castsi256_si128(mx), _mm256_extracti128_si256(mx, 1));
    h = _mm_max_epu8(h, _mm_srli_si128(h, 8));
    h = _mm_max_epu8(h, _mm_srli_si128(h, 4));
    h = _mm_max_epu8(h, _mm_srli_si128(h, 2));
    h = _mm_max_epu8(h, _mm_srli_si128(h, 1));
    return _mm_cvtsi128_si32(h) & 0xff;
}

void dsr1_mm_fp8_requant_row_avx2(const dsr1_wmat *w, int64_t r, int8_t *q, float *s,
                                  const dsr1_mm_rq_tab *t)
{
    const uint8_t *row = (const uint8_t *)w->data + r * w->cols;
    const int64_t g = w->group, ng = (w->cols + g - 1) / g, sb = (r / g) * ng; /* wmat.c's FP8 scale index */
    const __m256i m7 = _mm256_set1_epi8(0x7f), one = _mm256_set1_epi8(1);
    /* blocks RQ_PIECE at a time: first their maxima and scales (no block
     * waits on another's reduction and division), then the lookups */
    enum { RQ_PIECE = 64 };
    uint8_t top[RQ_PIECE];
    for (int64_t k0 = 0; k0 < ng; k0 += RQ_PIECE) {
        const int64_t k1 = k0 + RQ_PIECE < ng ? k0 + RQ_PIECE : ng;
        for (int64_t k = k0; k < k1; k++) {
            const int64_t c0 = k * g, c1 = c0 + g < w->cols ? c0 + g : w->cols;
            __m256i mx = _mm256_setzero_si256();
            int64_t c = c0;
            for (; c + 32 <= c1; c += 32)
                mx = _mm256_max_epu8(mx, _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(row + c)), m7));
            int m = top_u8(mx);
            for (; c < c1; c++) m = (row[c] & 0x7f) > m ? row[c] & 0x7f : m;
            top[k - k0] = (uint8_t)m;
            s[k] = fmaxf(0.0f, t->value[m] * fabsf(scale_at(w, sb + k))) / 127.0f;
        }
        for (int64_t k = k0; k < k1; k++) {
            const int64_t c0 = k * g, c1 = c0 + g < w->cols ? c0 + g : w->cols;
            if (!(s[k] > 0)) {
                memset(q + c0, 0, (size_t)(c1 - c0));
                continue;
            }
            const int8_t *code = t->code[top[k - k0]];
            const unsigned neg = scale_at(w, sb + k) < 0 ? 0x80u : 0u;
            const __m256i negv = _mm256_set1_epi8((char)neg);
            int64_t c = c0;
            for (; c + 32 <= c1; c += 32) {
                const __m256i b = _mm256_loadu_si256((const __m256i *)(row + c));
                const __m256i idx = _mm256_and_si256(b, m7); /* bit 7 clear: vpshufb reads bits 0-3 */
                const __m256i b4 = _mm256_slli_epi16(b, 3), b5 = _mm256_slli_epi16(b, 2),
                              b6 = _mm256_slli_epi16(b, 1);
                __m256i l[4];
#pragma GCC unroll 4
                for (int h = 0; h < 4; h++) {
                    const __m128i *e = (const __m128i *)(code + 32 * h); /* entries 32h .. 32h+31 */
                    const __m256i lo = _mm256_broadcastsi128_si256(_mm_loadu_si128(e)),
                                  hi = _mm256_broadcastsi128_si256(_mm_loadu_si128(e + 1));
                    l[h] = _mm256_blendv_epi8(_mm256_shuffle_epi8(lo, idx), _mm256_shuffle_epi8(hi, idx), b4);
                }
                const __m256i v = _mm256_blendv_epi8(_mm256_blendv_epi8(l[0], l[1], b5), _mm256_blendv_epi8(l[2], l[3], b5), b6);
                /* the sign: vpsignb by +-1 (the byte's sign xor the scale's) */
                const __m256i sg = _mm256_or_si256(_mm256_xor_si256(b, negv), one);
                _mm256_storeu_si256((__m256i *)(q + c), _mm256_sign_epi8(v, sg));
            }
            for (; c < c1; c++) {
                const int8_t v = code[row[c] & 0x7f];
                q[c] = (int8_t)(((row[c] ^ neg) & 0x80u) ? -v : v);
            }
        }
    }
}

/* ---- W8A8 and W4A8 ------------------------------------------------------------------------ */

/* The 8 dots of a 2-row x 4-token tile from its accumulators (a: row 0,
 * b: row 1, one per token, 8 partial sums each) as one vector: lanes
 * 0-3 row 0's tokens, 4-7 row 1's. Integer sums: any order is exact. */
INLINE __m256i tile_sums(__m256i a0, __m256i a1, __m256i a2, __m256i a3, __m256i b0, __m256i b1,
                         __m256i b2, __m256i b3)
{
    __m256i g1 = _mm256_hadd_epi32(_mm256_hadd_epi32(a0, a1), _mm256_hadd_epi32(a2, a3));
    __m256i g2 = _mm256_hadd_epi32(_mm256_hadd_epi32(b0, b1), _mm256_hadd_epi32(b2, b3));
    return _mm256_add_epi32(_mm256_permute2x128_si256(g1, g2, 0x20), _mm256_permute2x128_si256(g1, g2, 0x31));
}

/* Pieces of the assembly loops below (operand names shared by all four):
 * the 8 accumulators a0-a3, b0-b3 cleared, and W8A8's step for one token
 * whose 32 x bytes are in xv - sign moved from each row's w (v0, v1) onto
 * x, |w| (u0, u1) times it in pairs, pairs summed by vpmaddwd with ones,
 * added into accumulators A and B. */
#define ASM_ZERO8                                                                                  \
    "vpxor %[a0], %[a0], %[a0]\n\tvpxor %[a1], %[a1], %[a1]\n\t"                                   \
    "vpxor %[a2], %[a2], %[a2]\n\tvpxor %[a3], %[a3], %[a3]\n\t"                                   \
    "vpxor %[b0], %[b0], %[b0]\n\tvpxor %[b1], %[b1], %[b1]\n\t"                                   \
    "vpxor %[b2], %[b2], %[b2]\n\tvpxor %[b3], %[b3], %[b3]\n\t"
#define ASM_I8_MAC(A, B)                                                                           \
    "vpsignb %[v0], %[xv], %[t0]\n\tvpsignb %[v1], %[xv], %[t1]\n\t"                               \
    "vpmaddubsw %[t0], %[u0], %[t0]\n\tvpmaddubsw %[t1], %[u1], %[t1]\n\t"                         \
    "vpmaddwd %[one], %[t0], %[t0]\n\tvpmaddwd %[one], %[t1], %[t1]\n\t"                           \
    "vpaddd %[t0], %[" A "], %[" A "]\n\tvpaddd %[t1], %[" B "], %[" B "]\n\t"

/* What the two rows-in-lanes loops (rq_dots, w4l_dots) share: a step of
 * 4 columns to len, their accumulators a[0-3], b[0-3] as outputs, and the
 * panels p0, p1, token rows x0-x3 and len as inputs. */
#define ASM_LANES_NEXT "add $4, %[k]\n\tcmp %[len], %[k]\n\tjl 1b\n\t"
#define ASM_LANES_ACC                                                                                    \
    [a0] "=&x"(a[0]), [a1] "=&x"(a[1]), [a2] "=&x"(a[2]), [a3] "=&x"(a[3]), [b0] "=&x"(b[0]), [b1] "=&x"(b[1]), \
        [b2] "=&x"(b[2]), [b3] "=&x"(b[3])
#define ASM_LANES_IN                                                                                   \
    [one] "x"(one), [p0] "r"(p0), [p1] "r"(p1), [x0] "r"(x0), [x1] "r"(x1), [x2] "r"(x2), [x3] "r"(x3), \
        [len] "r"(len)

/* The 2-row x 4-token W8A8 loop (len a positive multiple of 32; the
 * accumulators start at zero), all 16
 * ymm registers named: the same instructions the intrinsics below give,
 * but gcc 12 keeps moving the accumulators between registers and spilling
 * two of them (18 live vectors by its count). One thread, 2048x1024 from
 * L1/L2, Zen 3: 38-40 GMAC/s in the intrinsics' form; this loop alone
 * 50-59 GMAC/s. */
INLINE void i8_dots4(const int8_t *w0, const int8_t *w1, const int8_t *x, int64_t ldx, int64_t len,
                     __m256i *a0, __m256i *a1, __m256i *a2, __m256i *a3, __m256i *b0, __m256i *b1,
                     __m256i *b2, __m256i *b3)
{
    const __m256i one = _mm256_set1_epi16(1);
    __m256i v0, v1, u0, u1, xv, t0, t1;
    const int8_t *x1 = x + ldx, *x2 = x1 + ldx, *x3 = x2 + ldx;
    int64_t c = 0;
#define I8A_TOK(xp, A, B)                                                                           \
    "vmovdqu (%[" xp "],%[c]), %[xv]\n\t"                                                          \
    ASM_I8_MAC(A, B)
    __asm__(ASM_ZERO8
            "1:\n\t"
            "vmovdqu (%[w0],%[c]), %[v0]\n\t"
            "vmovdqu (%[w1],%[c]), %[v1]\n\t"
            "vpabsb %[v0], %[u0]\n\t"
            "vpabsb %[v1], %[u1]\n\t"
            I8A_TOK("x0", "a0", "b0") I8A_TOK("x1", "a1", "b1") I8A_TOK("x2", "a2", "b2") I8A_TOK("x3", "a3", "b3")
            "add $32, %[c]\n\t"
            "cmp %[len], %[c]\n\t"
            "jl 1b\n\t"
            : [a0] "=&x"(*a0), [a1] "=&x"(*a1), [a2] "=&x"(*a2), [a3] "=&x"(*a3), [b0] "=&x"(*b0),
              [b1] "=&x"(*b1), [b2] "=&x"(*b2), [b3] "=&x"(*b3), [v0] "=&x"(v0), [v1] "=&x"(v1), [u0] "=&x"(u0), [u1] "=&x"(u1),
              [xv] "=&x"(xv), [t0] "=&x"(t0), [t1] "=&x"(t1), [c] "+r"(c)
            : [one] "x"(one), [w0] "r"(w0), [w1] "r"(w1), [x0] "r"(x), [x1] "r"(x1), [x2] "r"(x2), [x3] "r"(x3),
              [len] "r"(len)
            : "cc", "memory");
#undef I8A_TOK
}

/* Exact dots of INT8 rows w0, w1 with nt (1-4) token rows of x over len
 * columns (a multiple of 32), as tile_sums lays them out (tokens past nt
 * give 0). */
INLINE __m256i i8_dots(const int8_t *w0, const int8_t *w1, const int8_t *x, int64_t ldx, int nt,
                       int64_t len, int64_t rem, int64_t ldw)
{
    const __m256i one = _mm256_set1_epi16(1);
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0, b3 = a0;
#define I8_STEP(acc_a, acc_b, t)                                                                       \
    do {                                                                                               \
        __m256i xv = _mm256_loadu_si256((const __m256i *)(x + (t) * ldx + c));                        \
        acc_a = _mm256_add_epi32(acc_a, _mm256_madd_epi16(_mm256_maddubs_epi16(u0, _mm256_sign_epi8(xv, v0)), one)); \
        acc_b = _mm256_add_epi32(acc_b, _mm256_madd_epi16(_mm256_maddubs_epi16(u1, _mm256_sign_epi8(xv, v1)), one)); \
    } while (0)
    if (nt == 4 && len > 0) { /* the panel's case: i8_dots4 */
        i8_dots4(w0, w1, x, ldx, len, &a0, &a1, &a2, &a3, &b0, &b1, &b2, &b3);
        return tile_sums(a0, a1, a2, a3, b0, b1, b2, b3);
    }
    for (int64_t c = 0; c < len; c += 32) {
        if (nt == 1) { /* the GEMV (PF_AHEAD); the panels are in L2 */
            const int64_t pf = c + PF_AHEAD + (c + PF_AHEAD >= rem ? ldw : 0);
            _mm_prefetch((const char *)(w0 + pf), _MM_HINT_T0);
            _mm_prefetch((const char *)(w1 + pf), _MM_HINT_T0);
        }
        __m256i v0 = _mm256_loadu_si256((const __m256i *)(w0 + c)), v1 = _mm256_loadu_si256((const __m256i *)(w1 + c));
        __m256i u0 = _mm256_abs_epi8(v0), u1 = _mm256_abs_epi8(v1);
        I8_STEP(a0, b0, 0);
        if (nt > 1) I8_STEP(a1, b1, 1);
        if (nt > 2) I8_STEP(a2, b2, 2);
        if (nt > 3) I8_STEP(a3, b3, 3);
    }
#undef I8_STEP
    return tile_sums(a0, a1, a2, a3, b0, b1, b2, b3);
}

/* w4_dots' 2-row x 4-token loop over len columns (a positive multiple of
 * 32), in assembly for i8_dots4's reason; h steps the code bytes, x is
 * read at twice h. */
INLINE __m256i w4_dots4(const uint8_t *p0, const uint8_t *p1, const int8_t *x, int64_t ldx, int64_t len)
{
    const __m256i one = _mm256_set1_epi16(1), lo4 = _mm256_set1_epi8(0x0f);
    const __m256i sh = _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4);
    __m256i a0, a1, a2, a3, b0, b1, b2, b3, u0, u1, xv, t0, t1;
    const int8_t *x1 = x + ldx, *x2 = x1 + ldx, *x3 = x2 + ldx;
    int64_t h = 0;
    const int64_t hend = len / 2;
#define W4A_TOK(xp, A, B)                                                                   \
    "vmovdqu (%[" xp "],%[h],2), %[xv]\n\t"                                                \
    "vpmaddubsw %[xv], %[u0], %[t0]\n\tvpmaddubsw %[xv], %[u1], %[t1]\n\t"                 \
    "vpmaddwd %[one], %[t0], %[t0]\n\tvpmaddwd %[one], %[t1], %[t1]\n\t"                   \
    "vpaddd %[t0], %[" A "], %[" A "]\n\tvpaddd %[t1], %[" B "], %[" B "]\n\t"
    __asm__(ASM_ZERO8
            "1:\n\t"
            "vbroadcasti128 (%[p0],%[h]), %[u0]\n\t"
            "vbroadcasti128 (%[p1],%[h]), %[u1]\n\t"
            "vpsrlvd %[sh], %[u0], %[u0]\n\tvpsrlvd %[sh], %[u1], %[u1]\n\t"
            "vpand %[lo4], %[u0], %[u0]\n\tvpand %[lo4], %[u1], %[u1]\n\t"
            W4A_TOK("x0", "a0", "b0") W4A_TOK("x1", "a1", "b1") W4A_TOK("x2", "a2", "b2") W4A_TOK("x3", "a3", "b3")
            "add $16, %[h]\n\t"
            "cmp %[hend], %[h]\n\t"
            "jl 1b\n\t"
            : [a0] "=&x"(a0), [a1] "=&x"(a1), [a2] "=&x"(a2), [a3] "=&x"(a3), [b0] "=&x"(b0), [b1] "=&x"(b1),
              [b2] "=&x"(b2), [b3] "=&x"(b3), [u0] "=&x"(u0), [u1] "=&x"(u1), [xv] "=&x"(xv), [t0] "=&x"(t0),
              [t1] "=&x"(t1), [h] "+r"(h)
            : [one] "x"(one), [lo4] "x"(lo4), [sh] "x"(sh), [p0] "r"(p0), [p1] "r"(p1), [x0] "r"(x), [x1] "r"(x1),
              [x2] "r"(x2), [x3] "r"(x3), [hend] "r"(hend)
            : "cc", "memory");
#undef W4A_TOK
    return tile_sums(a0, a1, a2, a3, b0, b1, b2, b3);
}

/* The same for 4-bit codes (0..15, packed, even column in the low
 * nibble) against xp (dsr1_mm_w4_prep_avx2's order): without the -8. */
INLINE __m256i w4_dots(const uint8_t *p0, const uint8_t *p1, const int8_t *xp, int64_t ldx, int nt,
                       int64_t len)
{
    const __m256i one = _mm256_set1_epi16(1), lo4 = _mm256_set1_epi8(0x0f);
    const __m256i sh = _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4);
    if (nt == 4 && len > 0) return w4_dots4(p0, p1, xp, ldx, len);
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0, b3 = a0;
#define W4_STEP(acc_a, acc_b, t)                                                                  \
    do {                                                                                          \
        __m256i xv = _mm256_loadu_si256((const __m256i *)(xp + (t) * ldx + c));                  \
        acc_a = _mm256_add_epi32(acc_a, _mm256_madd_epi16(_mm256_maddubs_epi16(u0, xv), one));   \
        acc_b = _mm256_add_epi32(acc_b, _mm256_madd_epi16(_mm256_maddubs_epi16(u1, xv), one));   \
    } while (0)
    for (int64_t c = 0; c < len; c += 32) {
        /* 16 code bytes in both halves; the upper half shifted by 4: low
         * nibbles (even columns) in bytes 0-15, high ones in 16-31 */
        __m256i u0 = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(p0 + c / 2)));
        __m256i u1 = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(p1 + c / 2)));
        u0 = _mm256_and_si256(_mm256_srlv_epi32(u0, sh), lo4);
        u1 = _mm256_and_si256(_mm256_srlv_epi32(u1, sh), lo4);
        W4_STEP(a0, b0, 0);
        if (nt > 1) W4_STEP(a1, b1, 1);
        if (nt > 2) W4_STEP(a2, b2, 2);
        if (nt > 3) W4_STEP(a3, b3, 3);
    }
#undef W4_STEP
    return tile_sums(a0, a1, a2, a3, b0, b1, b2, b3);
}

/* A tile's per-lane factor from a value per row (lanes 0-3: r0, 4-7: r1)
 * and one per token (both halves). */
INLINE __m256 per_row(float r0, float r1)
{
    return _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_set1_ps(r0)), _mm_set1_ps(r1), 1);
}
INLINE __m256 per_tok(const float *v, int64_t stride, int nt)
{
    float t[4];
    for (int b = 0; b < 4; b++) t[b] = b < nt ? v[b * stride] : 0.0f;
    return _mm256_setr_ps(t[0], t[1], t[2], t[3], t[0], t[1], t[2], t[3]);
}

INLINE __m256i per_tok_i(const int32_t *v, int64_t stride, int nt)
{
    int32_t t[4];
    for (int b = 0; b < 4; b++) t[b] = b < nt ? v[b * stride] : 0;
    return _mm256_setr_epi32(t[0], t[1], t[2], t[3], t[0], t[1], t[2], t[3]);
}

/* Write a tile's 8 results (rows r, r+1 if two; nt tokens). */
INLINE void tile_store(__m256 v, float *y, int64_t ldy, int two, int nt)
{
    float o[8];
    _mm256_storeu_ps(o, v);
    for (int b = 0; b < nt; b++) {
        y[b * ldy] = o[b];
        if (two) y[b * ldy + 1] = o[4 + b];
    }
}

enum { W_INT8, W_INT8_GROUPS, W_RQ, W_INT4 };

/* One 2-row x nt-token tile over all columns, the canonical epilogue of
 * matmul.c's row_int8 / row_int8_groups / row_int4 in each lane (the same
 * float operations in the same order, 8 (row, token) pairs at a time). */
INLINE void int_tile(const dsr1_mm_job *j, int kind, int64_t r, int two, int t0, int nt, const __m256 *tok)
{
    const dsr1_wmat *w = j->w;
    const int64_t cols = w->cols;
    if (kind == W_INT8) { /* one scale per row: y = (float)dot * s_x * s_w */
        const int8_t *q = (const int8_t *)w->data + r * cols;
        __m256 d = _mm256_cvtepi32_ps(i8_dots(q, q + two * cols, j->xq + t0 * j->ldxq, j->ldxq, nt, cols, cols, cols));
        d = _mm256_mul_ps(_mm256_mul_ps(d, per_tok(j->xs + t0, 1, nt)),
                          per_row(dsr1_wmat_scale(w, r, 0), dsr1_wmat_scale(w, r + two, 0)));
        tile_store(d, j->y + t0 * j->ldy + r, j->ldy, two, nt);
        return;
    }
    const int64_t g = kind == W_RQ ? DSR1_MM_XG : w->group;
    /* dsr1_wmat_scale's index of (row, group) for the grouped types */
    const int64_t s0 = kind == W_RQ ? r * j->ldg : r * (cols / g), s1 = kind == W_RQ ? (r + two) * j->ldg : (r + two) * (cols / g);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t c0 = 0, gi = 0; c0 < cols; c0 += g, gi++) {
        const int64_t len = cols - c0 < g ? cols - c0 : g;
        __m256i dot;
        __m256 s;
        if (kind == W_INT4) {
            const uint8_t *q = (const uint8_t *)w->data + r * (cols / 2) + c0 / 2;
            dot = w4_dots(q, q + two * (cols / 2), j->xp + t0 * j->ldxp + c0, j->ldxp, nt, len);
            dot = _mm256_add_epi32(dot, tok ? _mm256_castps_si256(tok[gi]) : per_tok_i(j->xg + t0 * j->ldxg + gi, j->ldxg, nt));
            s = per_row(scale_at(w, s0 + gi), scale_at(w, s1 + gi));
        } else {
            const int8_t *q = (const int8_t *)w->data + r * cols + c0;
            dot = i8_dots(q, q + two * cols, j->xq + t0 * j->ldxq + c0, j->ldxq, nt, len, cols - c0, cols);
            if (kind == W_RQ) { /* s_w[r][g] * s_x[t][g] */
                const float *sw = w->scale;
                s = _mm256_mul_ps(per_row(sw[s0 + gi], sw[s1 + gi]),
                                  tok ? tok[gi] : per_tok(j->xgs + t0 * j->ldg + gi, j->ldg, nt));
            } else {
                s = per_row(scale_at(w, s0 + gi), scale_at(w, s1 + gi));
            }
        }
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), s, acc);
    }
    if (kind != W_RQ) acc = _mm256_mul_ps(acc, per_tok(j->xs + t0, 1, nt));
    tile_store(acc, j->y + t0 * j->ldy + r, j->ldy, two, nt);
}

static void int_tile_n(const dsr1_mm_job *j, int kind, int64_t r, int two, int t0, int nt, const __m256 *tok)
{
    switch (nt) {
    case 1: int_tile(j, kind, r, two, t0, 1, tok); break;
    case 2: int_tile(j, kind, r, two, t0, 2, tok); break;
    case 3: int_tile(j, kind, r, two, t0, 3, tok); break;
    default: int_tile(j, kind, r, two, t0, 4, tok); break;
    }
}

/* W4A8 for one token, 4 rows at a time (decode): per scale group the 4
 * rows' dots reduced together and their fused multiply-adds as one
 * 4-lane step - the 2x4 tile's per-group epilogue would cost more than
 * the group's 4 code steps. rows r..r+3 (all present). */
static void w4_gemv4(const dsr1_mm_job *j, int64_t r)
{
    const dsr1_wmat *w = j->w;
    const int64_t cols = w->cols, g = w->group, half = cols / 2, ng = cols / g;
    const uint8_t *p0 = (const uint8_t *)w->data + r * half, *p1 = p0 + half, *p2 = p1 + half, *p3 = p2 + half;
    const __m256i one = _mm256_set1_epi16(1), lo4 = _mm256_set1_epi8(0x0f);
    const __m256i sh = _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4);
    __m128 acc = _mm_setzero_ps();
    for (int64_t c0 = 0, gi = 0; c0 < cols; c0 += g, gi++) {
        __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
        for (int64_t c = c0; c < c0 + g; c += 32) {
            const int64_t pf = c / 2 + PF_AHEAD + (c / 2 + PF_AHEAD >= half ? 3 * half : 0); /* PF_AHEAD */
            _mm_prefetch((const char *)(p0 + pf), _MM_HINT_T0);
            _mm_prefetch((const char *)(p1 + pf), _MM_HINT_T0);
            _mm_prefetch((const char *)(p2 + pf), _MM_HINT_T0);
            _mm_prefetch((const char *)(p3 + pf), _MM_HINT_T0);
            const __m256i xv = _mm256_loadu_si256((const __m256i *)(j->xp + c));
#define W4_ROW(acc_r, p)                                                                          \
    do {                                                                                          \
        __m256i u = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)((p) + c / 2))); \
        u = _mm256_and_si256(_mm256_srlv_epi32(u, sh), lo4);                                      \
        acc_r = _mm256_add_epi32(acc_r, _mm256_madd_epi16(_mm256_maddubs_epi16(u, xv), one));     \
    } while (0)
            W4_ROW(a0, p0);
            W4_ROW(a1, p1);
            W4_ROW(a2, p2);
            W4_ROW(a3, p3);
#undef W4_ROW
        }
        /* [r0 r1 r2 r3] partial sums in each half, then the halves added */
        __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(a0, a1), _mm256_hadd_epi32(a2, a3));
        __m128i d = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
        d = _mm_add_epi32(d, _mm_set1_epi32(j->xg[gi]));
        const __m128 s = _mm_setr_ps(scale_at(w, r * ng + gi), scale_at(w, (r + 1) * ng + gi),
                                     scale_at(w, (r + 2) * ng + gi), scale_at(w, (r + 3) * ng + gi));
        acc = _mm_fmadd_ps(_mm_cvtepi32_ps(d), s, acc);
    }
    float o[4];
    _mm_storeu_ps(o, _mm_mul_ps(acc, _mm_set1_ps(j->xs[0])));
    for (int a = 0; a < 4; a++) j->y[r + a] = o[a];
}

/* W8A8 / W4A8 rows [r0, r1): blocks of I8_RB rows (L2) for each 4-token
 * tile, row pairs inside (two rows' weights, each x load serving both). */
#define TOK_MAXG 256 /* groups whose per-token factors rows_int tabulates */

static void rows_int(const dsr1_mm_job *j, int kind, int64_t r0, int64_t r1)
{
    const int64_t RB = j->n <= 4 ? 2 : I8_RB;
    if (kind == W_INT4 && j->n == 1)
        for (; r0 + 4 <= r1; r0 += 4) w4_gemv4(j, r0);
    /* the grouped kinds' per-token factor of each group (FP8 as W8A8: x's
     * scales; W4A8: x's -8 x sum), once per token tile and row block
     * rather than gathered in every tile */
    const int64_t ng = kind == W_RQ ? j->ldg : kind == W_INT4 ? j->w->cols / j->w->group : 0;
    __m256 tok[TOK_MAXG];
    const int tab = ng > 0 && ng <= TOK_MAXG;
    for (int64_t rb = r0; rb < r1; rb += RB) {
        const int64_t re = rb + RB < r1 ? rb + RB : r1;
        for (int t0 = 0; t0 < j->n; t0 += 4) {
            const int nt = j->n - t0 < 4 ? j->n - t0 : 4;
            for (int64_t gi = 0; tab && gi < ng; gi++)
                tok[gi] = kind == W_RQ ? per_tok(j->xgs + t0 * j->ldg + gi, j->ldg, nt)
                                       : _mm256_castsi256_ps(per_tok_i(j->xg + t0 * j->ldxg + gi, j->ldxg, nt));
            for (int64_t r = rb; r < re; r += 2) int_tile_n(j, kind, r, r + 1 < re, t0, nt, tab ? tok : NULL);
        }
    }
}

/* ---- FP8 as W8A8, rows in lanes ----------------------------------------------------------------- */

/* The 2x4 tile above reduces 8 accumulators at the end of every scale
 * group: at FP8's 128-column groups that reduction and its epilogue cost
 * as much as a third of the group's dot steps (FP8 prefill ran at 0.57x
 * INT8's). Here the requantised rows are interleaved 8 to a vector (32
 * bytes: 4 columns of each of 8 rows), x's 4 columns broadcast, so a
 * lane ends a group holding its row's exact dot, and the epilogue is one
 * convert and one fused multiply-add per 8 rows and token - the canonical
 * acc = fma(dot, s_w * s_x, acc) of each lane. */

/* The 8 x 8 transpose of 32-bit quads (4 columns of int8 codes) through
 * which the rows-in-lanes panels are built: v[rr] holds row rr's quads
 * 0-7 of a 32-column run; o[8 k + rr] gets row rr's quad k. */
INLINE void quad_transpose8(const __m256 v[8], float *o)
{
    __m256 t[8], u[8];
    for (int i = 0; i < 4; i++) {
        t[2 * i] = _mm256_unpacklo_ps(v[2 * i], v[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_ps(v[2 * i], v[2 * i + 1]);
    }
    for (int i = 0; i < 2; i++) {
        u[4 * i] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
        u[4 * i + 1] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0xee);
        u[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
        u[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xee);
    }
    for (int k = 0; k < 4; k++) {
        _mm256_storeu_ps(o + 8 * k, _mm256_permute2f128_ps(u[k], u[4 + k], 0x20));
        _mm256_storeu_ps(o + 8 * (k + 4), _mm256_permute2f128_ps(u[k], u[4 + k], 0x31));
    }
}

/* Octet o's panel: for quad k (columns 4k..4k+3), 32 bytes of which
 * bytes 4 rr .. 4 rr + 3 are row 8 o + rr's codes (zeros past the last
 * row); sct[(o ng + g) 8 + rr] its scale of group g. */
static void rq_panel(const dsr1_mm_job *j, int64_t r0, int64_t r1, uint8_t *pan, float *sct)
{
    const dsr1_wmat *w = j->w;
    const int64_t cols = w->cols, ng = j->ldg;
    const int8_t *q = w->data;
    const float *sw = w->scale;
    for (int64_t o = 0; 8 * o < r1 - r0; o++) {
        const int64_t rb = r0 + 8 * o;
        for (int64_t c = 0; c < cols; c += 32) { /* cols: a multiple of 64 (effective_act) */
            __m256 v[8];
            for (int rr = 0; rr < 8; rr++)
                v[rr] = rb + rr < r1 ? _mm256_loadu_ps((const float *)(q + (rb + rr) * cols + c)) : _mm256_setzero_ps();
            quad_transpose8(v, (float *)(pan + o * 8 * cols + c * 8));
        }
        for (int rr = 0; rr < 8; rr++)
            for (int64_t gi = 0; gi < ng; gi++) sct[(o * ng + gi) * 8 + rr] = rb + rr < r1 ? sw[(rb + rr) * ng + gi] : 0.0f;
    }
}

/* Exact dots of two octets (panels p0, p1 at a group's start) with 4
 * token rows of x (at the group's start) over len columns (a positive
 * multiple of 4): a[t] lane rr = row 8 o + rr of p0 with token t, b[t]
 * the same for p1. All 16 ymm registers, as i8_dots4. */
INLINE void rq_dots(const uint8_t *p0, const uint8_t *p1, const int8_t *x0, const int8_t *x1, const int8_t *x2,
                    const int8_t *x3, int64_t len, __m256i a[4], __m256i b[4])
{
    const __m256i one = _mm256_set1_epi16(1);
    __m256i v0, v1, u0, u1, xv, t0, t1;
    int64_t k = 0;
#define RQ_TOK(xp, A, B)                                                                        \
    "vpbroadcastd (%[" xp "],%[k]), %[xv]\n\t"                                                  \
    ASM_I8_MAC(A, B)
    __asm__(ASM_ZERO8
            "1:\n\t"
            "vmovdqu (%[p0],%[k],8), %[v0]\n\t"
            "vmovdqu (%[p1],%[k],8), %[v1]\n\t"
            "vpabsb %[v0], %[u0]\n\t"
            "vpabsb %[v1], %[u1]\n\t"
            RQ_TOK("x0", "a0", "b0") RQ_TOK("x1", "a1", "b1") RQ_TOK("x2", "a2", "b2") RQ_TOK("x3", "a3", "b3")
            ASM_LANES_NEXT
            : ASM_LANES_ACC, [v0] "=&x"(v0), [v1] "=&x"(v1), [u0] "=&x"(u0), [u1] "=&x"(u1), [xv] "=&x"(xv),
              [t0] "=&x"(t0), [t1] "=&x"(t1), [k] "+r"(k)
            : ASM_LANES_IN
            : "cc", "memory");
#undef RQ_TOK
}

/* A rows-in-lanes token tile from t0: its token count (at most 4), xt
 * the 4 rows of xq the loop reads (the last repeated past nt, so the
 * 4-token loop always has rows to read), fa and fb the octets' sums. */
INLINE int lanes_tokens(const dsr1_mm_job *j, int t0, const int8_t *xt[4], __m256 fa[4], __m256 fb[4])
{
    const int nt = j->n - t0 < 4 ? j->n - t0 : 4;
    for (int t = 0; t < 4; t++) {
        xt[t] = j->xq + (t0 + (t < nt ? t : nt - 1)) * j->ldxq;
        fa[t] = fb[t] = _mm256_setzero_ps();
    }
    return nt;
}

/* An rq job's requantised rows [r0, r1) (at most DSR1_MM_RQ_ROWS; the
 * task's scratch holds the panels, DSR1_MM_RQ_ROWS x cols bytes, then the
 * scales, DSR1_MM_RQ_ROWS x ldg floats). */
static void rows_rq_lanes(const dsr1_mm_job *j, int64_t r0, int64_t r1)
{
    const int64_t cols = j->w->cols, ng = j->ldg, no = (r1 - r0 + 7) / 8;
    uint8_t *pan = j->task_mem;
    float *sct = (float *)(pan + (size_t)DSR1_MM_RQ_ROWS * (size_t)cols);
    rq_panel(j, r0, r1, pan, sct);
    for (int64_t o = 0; o < no; o += 2) {
        const int64_t o1 = o + 1 < no ? o + 1 : o; /* a lone octet runs twice, once stored */
        for (int t0 = 0; t0 < j->n; t0 += 4) {
            const int8_t *xt[4];
            __m256 fa[4], fb[4];
            const int nt = lanes_tokens(j, t0, xt, fa, fb);
            for (int64_t gi = 0; gi < ng; gi++) {
                const int64_t c0 = gi * DSR1_MM_XG, len = cols - c0 < DSR1_MM_XG ? cols - c0 : DSR1_MM_XG;
                __m256i a[4], b[4];
                rq_dots(pan + o * 8 * cols + c0 * 8, pan + o1 * 8 * cols + c0 * 8, xt[0] + c0, xt[1] + c0,
                        xt[2] + c0, xt[3] + c0, len, a, b);
                const __m256 sa = _mm256_loadu_ps(sct + (o * ng + gi) * 8), sb = _mm256_loadu_ps(sct + (o1 * ng + gi) * 8);
                for (int t = 0; t < nt; t++) {
                    const __m256 sx = _mm256_set1_ps(j->xgs[(t0 + t) * ng + gi]);
                    fa[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(a[t]), _mm256_mul_ps(sa, sx), fa[t]);
                    fb[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(b[t]), _mm256_mul_ps(sb, sx), fb[t]);
                }
            }
            for (int t = 0; t < nt; t++) {
                float o8[16];
                _mm256_storeu_ps(o8, fa[t]);
                _mm256_storeu_ps(o8 + 8, fb[t]);
                float *y = j->y + (t0 + t) * j->ldy + r0;
                for (int64_t i = 0; i < 8 && 8 * o + i < r1 - r0; i++) y[8 * o + i] = o8[i];
                for (int64_t i = 0; o1 != o && i < 8 && 8 * o1 + i < r1 - r0; i++) y[8 * o1 + i] = o8[8 + i];
            }
        }
    }
}

/* ---- W4A8, rows in lanes ------------------------------------------------------------------------- */

/* The same shape for INT4 weights from 5 tokens: each 16-row block's
 * codes unpacked once into two octet panels of bytes (0..15, the
 * interleave above) in the task's scratch, then per group and token one
 * broadcast and per octet one vpmaddubsw (unsigned codes against signed
 * x: no sign step), one vpmaddwd and one add per 32 products; the -8
 * offset is the group's -8 x sum(x) (xg) added to each lane's dot, then
 * acc = fma(dot, s_w, acc) per lane and y = acc * s_x (row_int4's
 * order). */
/* 8 rows of packed codes (stride half bytes) into one octet panel: per
 * 32 columns each row's 16 bytes become 32 code bytes in column order
 * (nibbles unpacked), read as 8 quads, and the 8 x 8 quads transposed
 * (the panel's quad k holds every row's quad k). At 16 tokens the
 * byte-by-byte unpacking cost as much as the dots (prefill 16 INT4 0.57x
 * ik_llama.cpp's in a bench-peer run). */
static void w4_octet(const uint8_t *q, int64_t half, int64_t cols, uint8_t *dst)
{
    const __m128i lo4 = _mm_set1_epi8(0x0f);
    for (int64_t c = 0; c < cols; c += 32) {
        __m256 v[8];
        for (int rr = 0; rr < 8; rr++) {
            const __m128i b = _mm_loadu_si128((const __m128i *)(q + rr * half + c / 2));
            const __m128i lo = _mm_and_si128(b, lo4), hi = _mm_and_si128(_mm_srli_epi16(b, 4), lo4);
            v[rr] = _mm256_castsi256_ps(_mm256_set_m128i(_mm_unpackhi_epi8(lo, hi), _mm_unpacklo_epi8(lo, hi)));
        }
        quad_transpose8(v, (float *)(dst + c * 8));
    }
}

static void w4_panel(const dsr1_mm_job *j, int64_t r0, int64_t r1, uint8_t *pan, float *sct)
{
    const dsr1_wmat *w = j->w;
    const int64_t cols = w->cols, half = cols / 2, ng = cols / w->group;
    const uint8_t *q = w->data;
    for (int64_t o = 0; 8 * o < r1 - r0; o++) {
        if (8 * o + 8 <= r1 - r0) { /* a whole octet: 8 rows' 32 codes, transposed as 32-bit quads */
            w4_octet(q + (r0 + 8 * o) * half, half, cols, pan + o * 8 * cols);
            for (int rr = 0; rr < 8; rr++)
                for (int64_t gi = 0; gi < ng; gi++) sct[(o * ng + gi) * 8 + rr] = scale_at(w, (r0 + 8 * o + rr) * ng + gi);
            continue;
        }
        for (int rr = 0; rr < 8; rr++) {
            const int64_t r = r0 + 8 * o + rr;
            uint8_t *dst = pan + o * 8 * cols + 4 * rr;
            if (r < r1) {
                const uint8_t *src = q + r * half;
                for (int64_t k = 0; k < cols / 4; k++) {
                    const uint8_t b0 = src[2 * k], b1 = src[2 * k + 1];
                    dst[32 * k] = b0 & 15;
                    dst[32 * k + 1] = b0 >> 4;
                    dst[32 * k + 2] = b1 & 15;
                    dst[32 * k + 3] = b1 >> 4;
                }
            } else {
                for (int64_t k = 0; k < cols / 4; k++) memset(dst + 32 * k, 8, 4); /* code 8: value 0 */
            }
            for (int64_t gi = 0; gi < ng; gi++)
                sct[(o * ng + gi) * 8 + rr] = r < r1 ? scale_at(w, r * ng + gi) : 0.0f;
        }
    }
}

INLINE void w4l_dots(const uint8_t *p0, const uint8_t *p1, const int8_t *x0, const int8_t *x1, const int8_t *x2,
                     const int8_t *x3, int64_t len, __m256i a[4], __m256i b[4])
{
    const __m256i one = _mm256_set1_epi16(1);
    __m256i v0, v1, xv, t0, t1;
    int64_t k = 0;
#define W4L_TOK(xp, A, B)                                                                       \
    "vpbroadcastd (%[" xp "],%[k]), %[xv]\n\t"                                                  \
    "vpmaddubsw %[xv], %[v0], %[t0]\n\tvpmaddubsw %[xv], %[v1], %[t1]\n\t"                        \
    "vpmaddwd %[one], %[t0], %[t0]\n\tvpmaddwd %[one], %[t1], %[t1]\n\t"                          \
    "vpaddd %[t0], %[" A "], %[" A "]\n\tvpaddd %[t1], %[" B "], %[" B "]\n\t"
    __asm__(ASM_ZERO8
            "1:\n\t"
            "vmovdqu (%[p0],%[k],8), %[v0]\n\t"
            "vmovdqu (%[p1],%[k],8), %[v1]\n\t"
            W4L_TOK("x0", "a0", "b0") W4L_TOK("x1", "a1", "b1") W4L_TOK("x2", "a2", "b2") W4L_TOK("x3", "a3", "b3")
            ASM_LANES_NEXT
            : ASM_LANES_ACC, [v0] "=&x"(v0), [v1] "=&x"(v1), [xv] "=&x"(xv), [t0] "=&x"(t0), [t1] "=&x"(t1),
              [k] "+r"(k)
            : ASM_LANES_IN
            : "cc", "memory");
#undef W4L_TOK
}

/* W4A8 rows [r0, r1), 16 at a time through the task's scratch
 * (16 x cols bytes of codes, then 16 x groups floats). x is xq itself
 * (the lanes need no reordering); xg the group sums x -8. */
static void rows_w4_lanes(const dsr1_mm_job *j, int64_t r0, int64_t r1)
{
    const dsr1_wmat *w = j->w;
    const int64_t cols = w->cols, g = w->group, ng = cols / g;
    uint8_t *pan = j->task_mem;
    float *sct = (float *)(pan + 16 * (size_t)cols);
    for (int64_t rb = r0; rb < r1; rb += 16) {
        const int64_t re = rb + 16 < r1 ? rb + 16 : r1, nr = re - rb, o1 = nr > 8;
        w4_panel(j, rb, re, pan, sct);
        for (int t0 = 0; t0 < j->n; t0 += 4) {
            const int8_t *xt[4];
            __m256 fa[4], fb[4];
            const int nt = lanes_tokens(j, t0, xt, fa, fb);
            for (int64_t gi = 0; gi < ng; gi++) {
                const int64_t c0 = gi * g;
                __m256i a[4], b[4];
                w4l_dots(pan + c0 * 8, pan + o1 * 8 * cols + c0 * 8, xt[0] + c0, xt[1] + c0, xt[2] + c0,
                         xt[3] + c0, g, a, b);
                const __m256 sa = _mm256_loadu_ps(sct + gi * 8), sb = _mm256_loadu_ps(sct + (o1 * ng + gi) * 8);
                for (int t = 0; t < nt; t++) {
                    const __m256i xg = _mm256_set1_epi32(j->xg[(t0 + t) * j->ldxg + gi]);
                    fa[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_add_epi32(a[t], xg)), sa, fa[t]);
                    fb[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_add_epi32(b[t], xg)), sb, fb[t]);
                }
            }
            for (int t = 0; t < nt; t++) {
                const __m256 sx = _mm256_set1_ps(j->xs[t0 + t]);
                float o8[16];
                _mm256_storeu_ps(o8, _mm256_mul_ps(fa[t], sx));
                _mm256_storeu_ps(o8 + 8, _mm256_mul_ps(fb[t], sx));
                float *y = j->y + (t0 + t) * j->ldy + rb;
                for (int64_t i = 0; i < nr && i < 16; i++) y[i] = o8[i];
            }
        }
    }
}

/* ---- FP8 in BF16 mode ---------------------------------------------------------------------- */

/* dsr1_mm_to_bf16 of 8 floats, back as floats: denormals to signed zero,
 * NaN quieted (bits | 0x40 in bf16), else round to nearest even. */
INLINE __m256 bf16_round(__m256 v)
{
    const __m256i hi16 = _mm256_set1_epi32((int)0xffff0000u);
    __m256i u = _mm256_castps_si256(v);
    __m256i den = _mm256_cmpeq_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7f800000)), _mm256_setzero_si256());
    u = _mm256_blendv_epi8(u, _mm256_and_si256(u, _mm256_set1_epi32((int)0x80000000u)), den);
    __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
                                     _mm256_set1_epi32(0x7f800000));
    __m256i nanv = _mm256_or_si256(_mm256_and_si256(u, hi16), _mm256_set1_epi32(0x00400000));
    __m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_and_si256(_mm256_add_epi32(u, _mm256_add_epi32(odd, _mm256_set1_epi32(0x7fff))), hi16);
    return _mm256_castsi256_ps(_mm256_blendv_epi8(r, nanv, nan));
}

/* x' x 2^120 for one token and one 128-row block: xo[c] = bf16(x[c] x
 * s[block][c / g]) x 2^120 as float (matmul.c's bf16_x, scaled to meet
 * fp8_decode32's weights), each 32 columns in the order fp8_decode32
 * gives the weights: columns 0, 4, .. 28, then 1, 5, .. 29, then 2, 6,
 * .. 30, then 3, 7, .. 31. Returns 0 when some nonzero x' is below 2^-100
 * (see rows_fp8) or some x' is 2^8 or more (x' x 2^120 would overflow,
 * infinity included): the caller falls back. NaN passes, as it does
 * through the portable kernel. Columns and the group are multiples of 32. */
static int fp8_prep_x(const dsr1_mm_job *j, int t, int64_t rb, float *xo)
{
    const dsr1_wmat *w = j->w;
    const float *x = j->x + t * j->ldx;
    const int64_t cols = w->cols;
    const __m256 absm = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff)), tiny = _mm256_set1_ps(0x1p-100f),
                 big = _mm256_set1_ps(0x1p8f), k120 = _mm256_set1_ps(0x1p120f), zero = _mm256_setzero_ps();
    int bad = 0;
    for (int64_t c0 = 0; c0 < cols; c0 += w->group) {
        const __m256 s = _mm256_set1_ps(dsr1_wmat_scale(w, rb, c0));
        const int64_t c1 = c0 + w->group < cols ? c0 + w->group : cols;
        for (int64_t c = c0; c < c1; c += 32) {
            __m256 v[4];
            for (int i = 0; i < 4; i++) {
                const __m256 a = bf16_round(_mm256_mul_ps(_mm256_loadu_ps(x + c + 8 * i), s)),
                             m = _mm256_and_ps(a, absm);
                bad |= _mm256_movemask_ps(_mm256_or_ps(
                    _mm256_and_ps(_mm256_cmp_ps(m, tiny, _CMP_LT_OQ), _mm256_cmp_ps(a, zero, _CMP_NEQ_UQ)),
                    _mm256_cmp_ps(m, big, _CMP_GE_OQ)));
                v[i] = _mm256_mul_ps(a, k120);
            }
            /* [0-3 | 16-19], [4-7 | 20-23], [8-11 | 24-27], [12-15 | 28-31],
             * then a 4x4 transpose in each half: [0 4 8 12 | 16 20 24 28] .. */
            const __m256 q0 = _mm256_permute2f128_ps(v[0], v[2], 0x20), q1 = _mm256_permute2f128_ps(v[0], v[2], 0x31);
            const __m256 q2 = _mm256_permute2f128_ps(v[1], v[3], 0x20), q3 = _mm256_permute2f128_ps(v[1], v[3], 0x31);
            const __m256d l01 = _mm256_castps_pd(_mm256_unpacklo_ps(q0, q1)),
                          h01 = _mm256_castps_pd(_mm256_unpackhi_ps(q0, q1)),
                          l23 = _mm256_castps_pd(_mm256_unpacklo_ps(q2, q3)),
                          h23 = _mm256_castps_pd(_mm256_unpackhi_ps(q2, q3));
            _mm256_storeu_ps(xo + c, _mm256_castpd_ps(_mm256_unpacklo_pd(l01, l23)));
            _mm256_storeu_ps(xo + c + 8, _mm256_castpd_ps(_mm256_unpackhi_pd(l01, l23)));
            _mm256_storeu_ps(xo + c + 16, _mm256_castpd_ps(_mm256_unpacklo_pd(h01, h23)));
            _mm256_storeu_ps(xo + c + 24, _mm256_castpd_ps(_mm256_unpackhi_pd(h01, h23)));
        }
    }
    return !bad;
}

/* 32 e4m3 bytes -> 4 x 8 floats, value x 2^-120, in fp8_prep_x's column
 * order. As 16 words of two bytes each, a byte shifted right by 4
 * (arithmetic, so its sign lands at bit 15) and masked is sign | (b &
 * 0x7f) << 4, and that word as a float's high half is sign | (b & 0x7f)
 * << 20: the e4m3 exponent field in float32's (bias 127 instead of 7),
 * the mantissa at its top. Exact for every code: the subnormals (exponent
 * field 0) become float32 subnormals, m x 2^-9 x 2^-120 as they should,
 * zero stays zero, and the NaN codes come out as +-480 x 2^-120, as the
 * portable kernel takes them. The word pairs' high words become floats
 * by zeroing the low ones, the low words by a shift. Integer steps only:
 * Zen 3 issues vcvtph2ps once a cycle (shifts twice), and the f16 form
 * of this needed four per 32 weights: a standalone copy of the tile ran
 * 3.6-3.9 bytes a cycle from L1 on one core, this one 5.7-7.0. */
INLINE void fp8_decode32(const uint8_t *p, __m256 *w0, __m256 *w1, __m256 *w2, __m256 *w3)
{
    const __m256i keep = _mm256_set1_epi16((short)0x87f0), zero = _mm256_setzero_si256();
    const __m256i b = _mm256_loadu_si256((const __m256i *)p);
    const __m256i e = _mm256_and_si256(_mm256_srai_epi16(_mm256_slli_epi16(b, 8), 4), keep);
    const __m256i o = _mm256_and_si256(_mm256_srai_epi16(b, 4), keep);
    /* word 2d of e is column 4d, word 2d+1 column 4d+2; o's are 4d+1, 4d+3 */
    *w0 = _mm256_castsi256_ps(_mm256_slli_epi32(e, 16));
    *w1 = _mm256_castsi256_ps(_mm256_slli_epi32(o, 16));
    *w2 = _mm256_castsi256_ps(_mm256_blend_epi16(e, zero, 0x55));
    *w3 = _mm256_castsi256_ps(_mm256_blend_epi16(o, zero, 0x55));
}

/* R rows (codes p, stride cols) with nt tokens of x' (stride ldp floats)
 * over chunks of DSR1_MM_KC_BF16 columns: per chunk the canonical lanes
 * of each (row, token) (odd product, then even), hsum16, chunk sums added
 * in order. R x nt is at least 4 where there are rows for it: each pair of
 * accumulators is a chain of dependent fused multiply-adds, and fewer than
 * 8 chains leave the two FMA pipes waiting on their latency (one row at a
 * time, one token: 9.6 GB/s from DRAM where W8A8 streams 17.8). */
#define FP8_R 4

/* The float tiles' accumulators (R rows x nt tokens, lanes 0-7 and 8-15)
 * cleared for a chunk, and a chunk's sums out: hsum16 of each, assigned
 * for the first chunk, added after it (both tiles' canonical chunking). */
INLINE void tile_zero(__m256 lo[FP8_R][4], __m256 hi[FP8_R][4], int R, int nt)
{
#pragma GCC unroll 4
    for (int a = 0; a < R; a++)
#pragma GCC unroll 4
        for (int t = 0; t < nt; t++) lo[a][t] = hi[a][t] = _mm256_setzero_ps();
}

INLINE void tile_chunk_out(__m256 lo[FP8_R][4], __m256 hi[FP8_R][4], int R, int nt, float *y, int64_t ldy,
                           int first)
{
    for (int a = 0; a < R; a++)
        for (int t = 0; t < nt; t++) {
            const float s = hsum16(lo[a][t], hi[a][t]);
            float *o = y + t * ldy + a;
            *o = first ? s : *o + s;
        }
}

INLINE void fp8_tile(const uint8_t *p, int64_t cols, int R, const float *xp, int64_t ldp, int nt, float *y,
                     int64_t ldy)
{
    for (int64_t c0 = 0; c0 < cols; c0 += DSR1_MM_KC_BF16) {
        const int64_t c1 = c0 + DSR1_MM_KC_BF16 < cols ? c0 + DSR1_MM_KC_BF16 : cols;
        /* ev: the even lanes 0, 2, .. 14 (columns 4d and 4d+1), od: the
         * odd lanes (4d+2, 4d+3); the chunk's end puts them back in order */
        __m256 ev[FP8_R][4], od[FP8_R][4];
        tile_zero(ev, od, R, nt);
        for (int64_t c = c0; c < c1; c += 32) {
            const int64_t pf = PF_AHEAD + (c + PF_AHEAD >= cols ? (R - 1) * cols : 0);
#pragma GCC unroll 4
            for (int a = 0; a < R; a++) {
                __m256 w0, w1, w2, w3;
                _mm_prefetch((const char *)(p + a * cols + c + pf), _MM_HINT_T0);
                fp8_decode32(p + a * cols + c, &w0, &w1, &w2, &w3);
#pragma GCC unroll 4
                for (int t = 0; t < nt; t++) {
                    const float *xv = xp + t * ldp + c;
                    ev[a][t] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(xv + 8), ev[a][t]);
                    od[a][t] = _mm256_fmadd_ps(w3, _mm256_loadu_ps(xv + 24), od[a][t]);
                    ev[a][t] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(xv), ev[a][t]);
                    od[a][t] = _mm256_fmadd_ps(w2, _mm256_loadu_ps(xv + 16), od[a][t]);
                }
            }
        }
#pragma GCC unroll 4
        for (int a = 0; a < R; a++)
#pragma GCC unroll 4
            for (int t = 0; t < nt; t++) { /* [e0 o0 e1 o1 | e4 o4 e5 o5] = lanes 0-3 | 8-11 */
                const __m256 l = _mm256_unpacklo_ps(ev[a][t], od[a][t]), h = _mm256_unpackhi_ps(ev[a][t], od[a][t]);
                ev[a][t] = _mm256_permute2f128_ps(l, h, 0x20);
                od[a][t] = _mm256_permute2f128_ps(l, h, 0x31);
            }
        tile_chunk_out(ev, od, R, nt, y, ldy, c0 == 0);
    }
}

/* Rows [0, n_rows) in tiles of R rows x nt tokens, R as the float
 * kernels want it (4 for one token, 2 for two or three, 1 for four),
 * the rest one row at a time: TILE(a, R, NT) runs rows a..a+R-1 (R and
 * NT constants in each expansion, so each tile's loops unroll). */
#define FLOAT_TILES(nt, n_rows, TILE)                                          \
    do {                                                                       \
        int64_t a_ = 0;                                                        \
        switch (nt) {                                                          \
        case 1:                                                                \
            for (; a_ + 4 <= (n_rows); a_ += 4) TILE(a_, 4, 1);                \
            for (; a_ < (n_rows); a_++) TILE(a_, 1, 1);                        \
            break;                                                             \
        case 2:                                                                \
            for (; a_ + 2 <= (n_rows); a_ += 2) TILE(a_, 2, 2);                \
            for (; a_ < (n_rows); a_++) TILE(a_, 1, 2);                        \
            break;                                                             \
        case 3:                                                                \
            for (; a_ + 2 <= (n_rows); a_ += 2) TILE(a_, 2, 3);                \
            for (; a_ < (n_rows); a_++) TILE(a_, 1, 3);                        \
            break;                                                             \
        default:                                                               \
            for (; a_ < (n_rows); a_++) TILE(a_, 1, 4);                        \
            break;                                                             \
        }                                                                      \
    } while (0)

static void fp8_rows(const uint8_t *p, int64_t cols, int64_t n_rows, const float *xp, int64_t ldp, int nt,
                     float *y, int64_t ldy)
{
#define FP8_TILE(a, R, NT) fp8_tile(p + (a) * cols, cols, R, xp, ldp, NT, y + (a), ldy)
    FLOAT_TILES(nt, n_rows, FP8_TILE);
#undef FP8_TILE
}

/* MXCSR's flags; MXCSR_BAD: invalid, denormal operand, overflow, underflow */
enum { MXCSR_FLAGS = 0x3f, MXCSR_BAD = 0x1 | 0x2 | 0x8 | 0x10, MXCSR_DENORMAL = 0x2 };

/* FP8 in BF16 mode, rows [r0, r1): per 128-row block and 4 tokens, x'
 * into the task's scratch (4 x ldxb floats), then row by row.
 * Every product is exact (an e4m3 times a bf16 has at most 12 significant
 * bits, the 2^-120 and 2^120 cancel) and, with each nonzero |x'| at least
 * 2^-100 and each nonzero |e4m3| at least 2^-9, a multiple of 2^-116; so
 * is every float sum of them (rounding to float keeps a multiple of 2^-116
 * one), which is then zero or far above the denormals: the canonical
 * flush never acts, and the fused multiply-adds give its bits. The
 * subnormal weights are denormal operands by design, so MXCSR's denormal
 * flag is not a reason to fall back here; invalid, overflow and underflow
 * are (none can happen on the inputs fp8_prep_x lets through). */
static void rows_fp8(const dsr1_mm_job *j, int64_t r0, int64_t r1)
{
    const dsr1_wmat *w = j->w;
    const int64_t cols = w->cols, ldp = j->ldxb;
    float *xp = j->task_mem;
    const unsigned csr = _mm_getcsr();
    _mm_setcsr(csr & ~(unsigned)MXCSR_FLAGS);
    int ok = 1;
    for (int64_t rb = r0; rb < r1 && ok;) {
        const int64_t re0 = (rb / w->group + 1) * w->group, re = re0 < r1 ? re0 : r1;
        for (int t0 = 0; t0 < j->n && ok; t0 += 4) {
            const int nt = j->n - t0 < 4 ? j->n - t0 : 4;
            for (int b = 0; b < nt; b++) ok &= fp8_prep_x(j, t0 + b, rb, xp + b * ldp);
            if (ok)
                fp8_rows((const uint8_t *)w->data + rb * cols, cols, re - rb, xp, ldp, nt, j->y + t0 * j->ldy + rb,
                         j->ldy);
        }
        rb = re;
    }
    if (!ok || (_mm_getcsr() & MXCSR_BAD & ~MXCSR_DENORMAL)) dsr1_mm_rows_portable(j, r0, r1);
    _mm_setcsr(csr);
}

/* ---- BF16 weights in BF16 mode --------------------------------------------------------------- */

/* R rows of bf16 weights (stride ldw) with nt tokens of xb (bf16, stride
 * ldx) over chunks of DSR1_MM_KC_BF16 columns, the canonical order
 * exactly: a 32-bit element holds columns 2l (low half) and 2l+1 (high),
 * so the odd column's float is the element & 0xffff0000 and the even
 * one's the element << 16; per lane acc + odd product, then + even
 * product, each rounded (multiply, then add: no fused step, so inexact
 * denormal products round as vdpbf16ps's emulation does). Only the flush
 * of denormal sums is left out: rows_bf16w checks MXCSR for it. */
INLINE void bf16_tile(const uint16_t *p, int64_t ldw, int R, const uint16_t *xb, int64_t ldx, int nt,
                      int64_t cols, float *y, int64_t ldy)
{
    const __m256i hi16 = _mm256_set1_epi32((int)0xffff0000u);
    for (int64_t c0 = 0; c0 < cols; c0 += DSR1_MM_KC_BF16) {
        const int64_t c1 = c0 + DSR1_MM_KC_BF16 < cols ? c0 + DSR1_MM_KC_BF16 : cols;
        __m256 lo[FP8_R][4], hi[FP8_R][4];
        tile_zero(lo, hi, R, nt);
        for (int64_t c = c0; c < c1; c += 32) {
#pragma GCC unroll 4
            for (int a = 0; a < R; a++) {
                const __m256i v0 = _mm256_loadu_si256((const __m256i *)(p + a * ldw + c));
                const __m256i v1 = _mm256_loadu_si256((const __m256i *)(p + a * ldw + c + 16));
                const __m256 ol = _mm256_castsi256_ps(_mm256_and_si256(v0, hi16));
                const __m256 el = _mm256_castsi256_ps(_mm256_slli_epi32(v0, 16));
                const __m256 oh = _mm256_castsi256_ps(_mm256_and_si256(v1, hi16));
                const __m256 eh = _mm256_castsi256_ps(_mm256_slli_epi32(v1, 16));
#pragma GCC unroll 4
                for (int t = 0; t < nt; t++) {
                    const __m256i x0 = _mm256_loadu_si256((const __m256i *)(xb + t * ldx + c));
                    const __m256i x1 = _mm256_loadu_si256((const __m256i *)(xb + t * ldx + c + 16));
                    lo[a][t] = _mm256_add_ps(lo[a][t], _mm256_mul_ps(ol, _mm256_castsi256_ps(_mm256_and_si256(x0, hi16))));
                    hi[a][t] = _mm256_add_ps(hi[a][t], _mm256_mul_ps(oh, _mm256_castsi256_ps(_mm256_and_si256(x1, hi16))));
                    lo[a][t] = _mm256_add_ps(lo[a][t], _mm256_mul_ps(el, _mm256_castsi256_ps(_mm256_slli_epi32(x0, 16))));
                    hi[a][t] = _mm256_add_ps(hi[a][t], _mm256_mul_ps(eh, _mm256_castsi256_ps(_mm256_slli_epi32(x1, 16))));
                }
            }
        }
        tile_chunk_out(lo, hi, R, nt, y, ldy, c0 == 0);
    }
}

/* BF16 weights in BF16 mode, rows [r0, r1), 4 tokens at a time: R rows
 * per tile as fp8_rows chooses them; a denormal anywhere (a sum the
 * canonical order would flush, a denormal weight it would flush first),
 * or an invalid operation, and the task's rows go to the portable kernel. */
static void rows_bf16w(const dsr1_mm_job *j, int64_t r0, int64_t r1)
{
    const dsr1_wmat *w = j->w;
    const int64_t cols = w->cols;
    const uint16_t *q = w->data;
    const unsigned csr = _mm_getcsr();
    _mm_setcsr(csr & ~(unsigned)MXCSR_FLAGS);
    for (int t0 = 0; t0 < j->n; t0 += 4) {
        const int nt = j->n - t0 < 4 ? j->n - t0 : 4;
        const uint16_t *xb = j->xb + t0 * j->ldxb;
        float *y = j->y + t0 * j->ldy;
#define BF16_TILE(a, R, NT) \
    bf16_tile(q + (r0 + (a)) * cols, cols, R, xb, j->ldxb, NT, cols, y + r0 + (a), j->ldy)
        FLOAT_TILES(nt, r1 - r0, BF16_TILE);
#undef BF16_TILE
    }
    if (_mm_getcsr() & MXCSR_BAD) dsr1_mm_rows_portable(j, r0, r1);
    _mm_setcsr(csr);
}

/* ---- F32 mode -------------------------------------------------------------------------------- */

/* Rows w0, w1 (float32, the chunk's len columns, zeros past len) with nt
 * (1-3) tokens: the canonical 16 lanes per (row, token), 12 chains in
 * flight at nt = 3 (the fused multiply-add's latency x its two pipes);
 * masked loads only in the ragged last step. */
INLINE void f32_chunk(const float *w0, const float *w1, const float *x, int64_t ldx, int nt, int64_t len,
                      float s[2][3])
{
    __m256 a0l = _mm256_setzero_ps(), a0h = a0l, a1l = a0l, a1h = a0l, a2l = a0l, a2h = a0l;
    __m256 b0l = a0l, b0h = a0l, b1l = a0l, b1h = a0l, b2l = a0l, b2h = a0l;
#define F32_STEP(LOAD_W, LOAD_X)                                     \
    do {                                                             \
        __m256 u0 = LOAD_W(w0 + k, m0), u1 = LOAD_W(w0 + k + 8, m1); \
        __m256 v0 = LOAD_W(w1 + k, m0), v1 = LOAD_W(w1 + k + 8, m1); \
        __m256 x0 = LOAD_X(x + k, m0), x1 = LOAD_X(x + k + 8, m1);   \
        a0l = _mm256_fmadd_ps(u0, x0, a0l);                          \
        a0h = _mm256_fmadd_ps(u1, x1, a0h);                          \
        b0l = _mm256_fmadd_ps(v0, x0, b0l);                          \
        b0h = _mm256_fmadd_ps(v1, x1, b0h);                          \
        if (nt > 1) {                                                \
            x0 = LOAD_X(x + ldx + k, m0);                            \
            x1 = LOAD_X(x + ldx + k + 8, m1);                        \
            a1l = _mm256_fmadd_ps(u0, x0, a1l);                      \
            a1h = _mm256_fmadd_ps(u1, x1, a1h);                      \
            b1l = _mm256_fmadd_ps(v0, x0, b1l);                      \
            b1h = _mm256_fmadd_ps(v1, x1, b1h);                      \
        }                                                            \
        if (nt > 2) {                                                \
            x0 = LOAD_X(x + 2 * ldx + k, m0);                        \
            x1 = LOAD_X(x + 2 * ldx + k + 8, m1);                    \
            a2l = _mm256_fmadd_ps(u0, x0, a2l);                      \
            a2h = _mm256_fmadd_ps(u1, x1, a2h);                      \
            b2l = _mm256_fmadd_ps(v0, x0, b2l);                      \
            b2h = _mm256_fmadd_ps(v1, x1, b2h);                      \
        }                                                            \
    } while (0)
#define LOADU(p, m) _mm256_loadu_ps(p)
#define LOADM(p, m) _mm256_maskload_ps(p, m)
    int64_t k = 0;
    {
        const __m256i m0 = _mm256_setzero_si256(), m1 = m0;
        (void)m0;
        (void)m1;
        for (; k + 16 <= len; k += 16) F32_STEP(LOADU, LOADU);
    }
    if (k < len) {
        const __m256i m0 = lanes_mask(len - k), m1 = lanes_mask(len - k - 8);
        F32_STEP(LOADM, LOADM);
    }
#undef LOADU
#undef LOADM
#undef F32_STEP
    s[0][0] = hsum16(a0l, a0h);
    s[1][0] = hsum16(b0l, b0h);
    if (nt > 1) {
        s[0][1] = hsum16(a1l, a1h);
        s[1][1] = hsum16(b1l, b1h);
    }
    if (nt > 2) {
        s[0][2] = hsum16(a2l, a2h);
        s[1][2] = hsum16(b2l, b2h);
    }
}

/* F32 mode rows [r0, r1): float32 weights read in place, other types
 * dequantised a chunk of two rows at a time (dsr1_wmat_dequant_span). */
static void rows_f32(const dsr1_mm_job *j, int64_t r0, int64_t r1)
{
    const dsr1_wmat *w = j->w;
    const int64_t cols = w->cols;
    const int direct = w->type == DSR1_T_F32;
    float buf[2][DSR1_MM_KC_F32];
    for (int64_t r = r0; r < r1; r += 2) {
        const int two = r + 1 < r1;
        for (int64_t c0 = 0; c0 < cols; c0 += DSR1_MM_KC_F32) {
            const int64_t len = cols - c0 < DSR1_MM_KC_F32 ? cols - c0 : DSR1_MM_KC_F32;
            const float *w0, *w1;
            if (direct) {
                w0 = (const float *)w->data + r * cols + c0;
                w1 = (const float *)w->data + (r + two) * cols + c0;
            } else {
                dsr1_wmat_dequant_span(w, r, c0, len, buf[0]);
                if (two) dsr1_wmat_dequant_span(w, r + 1, c0, len, buf[1]);
                w0 = buf[0];
                w1 = buf[two];
            }
            for (int t = 0; t < j->n; t += 3) {
                const int nt = j->n - t < 3 ? j->n - t : 3;
                float s[2][3];
                const float *xt = j->x + t * j->ldx + c0;
                if (nt == 3)
                    f32_chunk(w0, w1, xt, j->ldx, 3, len, s);
                else if (nt == 2)
                    f32_chunk(w0, w1, xt, j->ldx, 2, len, s);
                else
                    f32_chunk(w0, w1, xt, j->ldx, 1, len, s);
                for (int a = 0; a <= two; a++)
                    for (int b = 0; b < nt; b++) {
                        float *y = j->y + (t + b) * j->ldy + r + a;
                        *y = c0 == 0 ? s[a][b] : *y + s[a][b];
                    }
            }
        }
    }
}

/* ---- dispatch ------------------------------------------------------------------------------------- */

void dsr1_mm_rows_avx2(const dsr1_mm_job *j, int64_t r0, int64_t r1)
{
    const dsr1_wmat *w = j->w;
    if (j->act == DSR1_ACT_INT8 && w->type == DSR1_T_INT4) {
        if (j->xp && j->task_mem && j->n > 4 && w->group % 32 == 0)
            rows_w4_lanes(j, r0, r1);
        else if (j->xp && w->group % 32 == 0)
            rows_int(j, W_INT4, r0, r1);
        else
            dsr1_mm_rows_portable(j, r0, r1);
    } else if (j->xgs) {
        if (j->task_mem && r1 - r0 <= DSR1_MM_RQ_ROWS) /* run_rows' chunk, with the panels' scratch */
            rows_rq_lanes(j, r0, r1);
        else
            rows_int(j, W_RQ, r0, r1); /* the requantised rows: columns a multiple of 64 */
    } else if (j->act == DSR1_ACT_INT8 && w->cols % 32 == 0 && (w->group == 0 || w->group % 32 == 0)) {
        rows_int(j, w->group ? W_INT8_GROUPS : W_INT8, r0, r1);
    } else if (j->act == DSR1_ACT_BF16 && w->type == DSR1_T_FP8_E4M3 && j->task_mem && w->cols % 32 == 0 &&
               w->group > 0 && w->group % 32 == 0) {
        rows_fp8(j, r0, r1);
    } else if (j->act == DSR1_ACT_BF16 && w->type == DSR1_T_BF16 && j->xb && w->cols % 32 == 0) {
        rows_bf16w(j, r0, r1);
    } else if (j->act == DSR1_ACT_F32) {
        rows_f32(j, r0, r1);
    } else {
        dsr1_mm_rows_portable(j, r0, r1);
    }
}
