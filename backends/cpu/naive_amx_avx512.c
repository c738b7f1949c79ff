/*
 * naive_amx_avx512.c - the naive MLA form's two products (naive_avx512.c
 * says what they are) on AMX tiles, for CPUs with AMX-BF16 in the fast
 * mode:
 *
 *   scores  s[t][p] = sum_d q[t][d] k[p][d]
 *   values  o[t][d] = sum_p s[t][p] v[p][d]
 *
 * Precision. bf16 alone is too coarse for attention (cpu_attention.c: a
 * 2^-9 relative error in q moves the probabilities by percents), so each
 * float32 operand is split as x = hi + lo, hi = bf16(x), lo = bf16(x - hi),
 * and a product is taken as hi.hi + hi.lo + lo.hi: three bf16 products
 * with float32 sums, which leaves out lo.lo and the rounding of lo, about
 * 2^-16 of each term (test_mla_naive.c bounds it at 5e-5 of the terms'
 * magnitudes against double sums, and measures 9e-6; the float32
 * products are held to 1e-5; with one of the three dropped, 2e-3).
 * The three products are one tile loop over three segments of the
 * contraction: A's rows hold [hi | lo] of each token, B holds the hi and
 * the lo of every key or value, and the segments pair A's hi with B's hi
 * and lo, A's lo with B's hi.
 *
 * Layouts. tdpbf16ps takes A as 16 rows of 32 bf16 and B as 16 rows of
 * 16 bf16 pairs: B row i, column n holds the operands of contraction
 * indices 2i and 2i+1 of output column n. So the keys are stored once per
 * head as [hi, lo][qk / 2 pairs][positions] (a key row's bf16 is already
 * its pairs: it is transposed as 32-bit words), the values as [hi, lo][
 * positions / 2][value columns], each position pair interleaved. A's rows
 * are built per block of 32 tokens. Positions, value columns and the
 * contraction are padded to 32 with zeros: a padded output is computed and
 * not stored.
 *
 * Tiles: C 0-3 (tokens 0-15 / 16-31 x columns 0-15 / 16-31), A 4, 5, B 6,
 * 7, all 16 x 64 bytes. Why: on a 2-core Emerald Rapids Xeon a 512-token
 * FP8 prefill of the R1-shape file spent 13% of its samples in the
 * float32 products (naive_avx512.c), and with the products skipped (a
 * mutant) it ran 1.18x faster; their share grows with the prompt. What
 * the tiles gave: cpu_mla_naive.c, naive_head_amx.
 */
#include "amx_tiles.h"
#include "matmul_impl.h"

#include <immintrin.h>
#include <string.h>

#define INLINE static inline __attribute__((always_inline))

static int64_t up32(int64_t n) { return (n + 31) & ~(int64_t)31; }

/* Key columns: P rounded up to 32, off multiples of 1 KiB (a B tile's 16
 * rows would share L1 sets). */
static int64_t key_ld(int P)
{
    const int64_t ld = up32(P);
    return ld % 256 ? ld : ld + 16;
}

/* A's row stride (bf16) for a contraction of k: [hi | lo], off 4 KiB
 * multiples. */
static int64_t a_ld(int64_t k) { return 2 * up32(k) + 32; }

size_t dsr1_naive_tiles_bytes(int P, int qk, int vd)
{
    const int64_t qkp = up32(qk), kb = qkp / 2 * key_ld(P) * 4 * 2; /* pairs x 4 bytes, hi and lo */
    const int64_t vb = up32(P) / 2 * up32(vd) * 4 * 2;
    const int64_t ka = 32 * a_ld(qk) * 2, va = 32 * a_ld(P) * 2;
    return (size_t)(kb + vb + (ka > va ? ka : va) + 3 * 64);
}

static char *align64(char *p) { return (char *)(((uintptr_t)p + 63) & ~(uintptr_t)63); }

void dsr1_naive_tiles_place(dsr1_naive_tiles *t, void *mem, int P, int qk, int vd)
{
    char *m = align64(mem);
    t->P = P;
    t->qkp = (int)up32(qk);
    t->vdp = (int)up32(vd);
    t->ldkb = key_ld(P);
    t->kb = (uint32_t *)m;
    m = align64(m + (size_t)t->qkp * (size_t)t->ldkb * 2 * 2);
    t->vb = (uint32_t *)m;
    m = align64(m + (size_t)up32(P) * (size_t)t->vdp * 2 * 2);
    t->a = (uint16_t *)m;
}

/* 16 floats (lanes past m zero) as bf16 hi and lo, rounded to nearest. */
INLINE void split16(const float *x, __mmask16 m, __m256i *hi, __m256i *lo)
{
    const __m512 v = _mm512_maskz_loadu_ps(m, x);
    const __m256bh h = _mm512_cvtneps_pbh(v);
    const __m512 back = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32((__m256i)h), 16));
    *hi = (__m256i)h;
    *lo = (__m256i)_mm512_cvtneps_pbh(_mm512_sub_ps(v, back));
}

INLINE __mmask16 lanes(int64_t n) { return n >= 16 ? 0xffff : n <= 0 ? 0 : (__mmask16)((1u << n) - 1); }

/* A row: x[0, n) as hi at a[0, np) and lo at a[np, 2 np), zero past n. */
static void a_row(const float *x, int64_t n, int64_t np, uint16_t *a)
{
    for (int64_t c = 0; c < np; c += 16) {
        __m256i h, l;
        split16(x + c, lanes(n - c), &h, &l);
        _mm256_storeu_si256((__m256i *)(a + c), h);
        _mm256_storeu_si256((__m256i *)(a + np + c), l);
    }
}

/* c[t][0, nc) for t < m (<= 32; A's rows past m are zeros) = the three
 * segments' sums: A's hi (a) with B's hi (b) and lo (b + blo), A's lo (a
 * + np) with B's hi, each over np contraction indices (a multiple of 32). */
static void run_tiles(int m, int64_t nc, const uint16_t *a, int64_t lda, int64_t np, const uint32_t *b,
                      int64_t ldb, int64_t blo, float *c, int64_t ldc)
{
    _Alignas(64) float cb[32 * 32];
    const uint16_t *as[3] = {a, a, a + np};
    const uint32_t *bs[3] = {b, b + blo, b};
    for (int64_t n0 = 0; n0 < nc; n0 += 32) {
        T_ZERO(0);
        T_ZERO(1);
        T_ZERO(2);
        T_ZERO(3);
        for (int g = 0; g < 3; g++)
            for (int64_t k = 0; k < np; k += 32) {
                const uint16_t *ak = as[g] + k;
                const uint32_t *bk = bs[g] + k / 2 * ldb + n0;
                T_LOAD(4, ak, lda * 2);
                T_LOAD(5, ak + 16 * lda, lda * 2);
                T_LOAD(6, bk, ldb * 4);
                T_LOAD(7, bk + 16, ldb * 4);
                T_DPBF(0, 4, 6);
                T_DPBF(1, 4, 7);
                T_DPBF(2, 5, 6);
                T_DPBF(3, 5, 7);
            }
        T_STORE(0, cb, 128);
        T_STORE(1, cb + 16, 128);
        T_STORE(2, cb + 16 * 32, 128);
        T_STORE(3, cb + 16 * 32 + 16, 128);
        const int64_t w = nc - n0 < 32 ? nc - n0 : 32;
        for (int t = 0; t < m; t++) memcpy(c + t * ldc + n0, cb + t * 32, (size_t)w * sizeof(float));
    }
}

void dsr1_naive_keys_amx(const dsr1_naive_tiles *t, const float *kn, int64_t ldn, int nope, const float *kr,
                         int64_t ldr, int rope)
{
    const int64_t qkp = t->qkp, pairs = qkp / 2, ldkb = t->ldkb;
    uint32_t *hi = t->kb, *lo = t->kb + pairs * ldkb;
    _Alignas(64) uint16_t rh[16 * 512], rl[16 * 512]; /* 16 keys' rows (qk <= 512) */
    for (int p0 = 0; p0 < t->P; p0 += 16) {
        const int np = t->P - p0 < 16 ? t->P - p0 : 16;
        for (int i = 0; i < np; i++) {
            _Alignas(64) float key[512];
            memcpy(key, kn + (int64_t)(p0 + i) * ldn, (size_t)nope * sizeof(float));
            if (rope) memcpy(key + nope, kr + (int64_t)(p0 + i) * ldr, (size_t)rope * sizeof(float));
            for (int64_t c = 0; c < qkp; c += 16) {
                __m256i h, l;
                split16(key + c, lanes(nope + rope - c), &h, &l);
                _mm256_store_si256((__m256i *)(rh + i * qkp + c), h);
                _mm256_store_si256((__m256i *)(rl + i * qkp + c), l);
            }
        }
        /* a row's bf16 are its pairs: transposed as 32-bit words */
        dsr1_transpose_f32_avx512((const float *)rh, pairs, np, (int)pairs, (float *)(hi + p0), ldkb);
        dsr1_transpose_f32_avx512((const float *)rl, pairs, np, (int)pairs, (float *)(lo + p0), ldkb);
    }
    for (int64_t i = 0; i < 2 * pairs; i++)
        memset(t->kb + i * ldkb + t->P, 0, (size_t)(ldkb - t->P) * sizeof(uint32_t));
}

void dsr1_naive_vals_amx(const dsr1_naive_tiles *t, const float *v, int64_t ldv, int vd)
{
    const int64_t vdp = t->vdp, half = up32(t->P) / 2;
    uint32_t *hi = t->vb, *lo = t->vb + half * vdp;
    for (int64_t i = 0; i < half; i++) {
        const int p = (int)(2 * i);
        const int64_t n0 = p < t->P ? vd : 0, n1 = p + 1 < t->P ? vd : 0;
        for (int64_t c = 0; c < vdp; c += 16) {
            __m256i h0, l0, h1, l1;
            split16(v + (int64_t)p * ldv + c, lanes(n0 - c), &h0, &l0);
            split16(v + (int64_t)(p + 1) * ldv + c, lanes(n1 - c), &h1, &l1);
            /* column c + j: position p's bf16 low, p + 1's high */
            const __m512i ph = _mm512_or_si512(_mm512_cvtepu16_epi32(h0), _mm512_slli_epi32(_mm512_cvtepu16_epi32(h1), 16));
            const __m512i pl = _mm512_or_si512(_mm512_cvtepu16_epi32(l0), _mm512_slli_epi32(_mm512_cvtepu16_epi32(l1), 16));
            _mm512_storeu_si512(hi + i * vdp + c, ph);
            _mm512_storeu_si512(lo + i * vdp + c, pl);
        }
    }
}

/* out[t][0, nc) for t < n: x's rows (k floats each, at ldx) split into
 * A 32 tokens at a time, against B (b, ldb; its lo part at blo). */
static void product(uint16_t *abuf, const float *x, int64_t ldx, int n, int64_t k, const uint32_t *b,
                    int64_t ldb, int64_t blo, int64_t nc, float *out, int64_t ldo)
{
    const int64_t np = up32(k), lda = a_ld(k);
    T_CFG(&amx_16x64);
    for (int t0 = 0; t0 < n; t0 += 32) {
        const int m = n - t0 < 32 ? n - t0 : 32;
        for (int i = 0; i < 32; i++)
            if (i < m) a_row(x + (int64_t)(t0 + i) * ldx, k, np, abuf + i * lda);
            else memset(abuf + i * lda, 0, (size_t)(2 * np) * sizeof(uint16_t));
        run_tiles(m, nc, abuf, lda, np, b, ldb, blo, out + (int64_t)t0 * ldo, ldo);
    }
    T_RELEASE();
}

void dsr1_naive_scores_amx(const dsr1_naive_tiles *t, const float *q, int64_t ldq, int n, int qk, int pb,
                           float *s, int64_t lds)
{
    product(t->a, q, ldq, n, qk, t->kb, t->ldkb, (int64_t)t->qkp / 2 * t->ldkb, pb, s, lds);
}

void dsr1_naive_values_amx(const dsr1_naive_tiles *t, const float *s, int64_t lds, int n, int pb, int vd,
                           float *out, int64_t ldo)
{
    product(t->a, s, lds, n, pb, t->vb, t->vdp, up32(t->P) / 2 * t->vdp, vd, out, ldo);
}
