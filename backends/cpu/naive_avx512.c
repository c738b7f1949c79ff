/*
 * naive_avx512.c - the naive MLA form's two float32 products
 * (cpu_mla_naive.c) as register tiles with positions or value columns in
 * lanes:
 *
 *   scores  s[t][p] = sum_d q[t][d] kt[d][p]   (kt: the head's keys transposed)
 *   values  o[t][d] = sum_p s[t][p] v[p][d]    (v: the expansion's rows as they are)
 *
 * A tile is 6 tokens x 32 lanes: per step two vector loads and 12 fused
 * multiply-adds against the tokens' scalars, broadcast by the instruction
 * itself, and nothing to reduce at the end. Through dsr1_matmul (lanes as
 * columns: a 16-lane tree per row and token per 1024 columns, and the
 * keys copied into its panel first) the 192-wide dot of a score paid its
 * tree for 12 multiply-adds, and the values needed the expansion
 * transposed first. The order of the sums differs from dsr1_matmul's
 * F32 order (each lane adds its terms front to back): the naive form is
 * only taken in the fast mode, which promises no bits (backend.h).
 */
#include "matmul_impl.h"

#include <immintrin.h>

#define INLINE static inline __attribute__((always_inline))
#define NT 6

/* Lanes [0, n) of a 16-lane vector (n may be <= 0 or >= 16). */
INLINE __mmask16 lanes(int64_t n) { return n >= 16 ? 0xffff : n <= 0 ? 0 : (__mmask16)((1u << n) - 1); }

/* acc[b][h] = sum over k < K of a[b][k] * w[k][h] for NT rows of a
 * (ra[b], a row's k-th element at ra[b][k]) and h < 32 (lanes masked by
 * m0, m1), w's rows at w + k * ldw; then o[b][0..32) for b < nb. */
INLINE void tile(const float *const ra[NT], int64_t K, const float *w, int64_t ldw, float *const o[NT],
                 int nb, __mmask16 m0, __mmask16 m1)
{
    __m512 acc[NT][2];
#pragma GCC unroll 6
    for (int b = 0; b < NT; b++) acc[b][0] = acc[b][1] = _mm512_setzero_ps();
    for (int64_t k = 0; k < K; k++) {
        const __m512 w0 = _mm512_maskz_loadu_ps(m0, w + k * ldw), w1 = _mm512_maskz_loadu_ps(m1, w + k * ldw + 16);
#pragma GCC unroll 6
        for (int b = 0; b < NT; b++) {
            const __m512 av = _mm512_set1_ps(ra[b][k]);
            acc[b][0] = _mm512_fmadd_ps(av, w0, acc[b][0]);
            acc[b][1] = _mm512_fmadd_ps(av, w1, acc[b][1]);
        }
    }
#pragma GCC unroll 6
    for (int b = 0; b < NT; b++)
        if (b < nb) {
            _mm512_mask_storeu_ps(o[b], m0, acc[b][0]);
            _mm512_mask_storeu_ps(o[b] + 16, m1, acc[b][1]);
        }
}

/* o[t][c] = sum_k a[t][k] * w[k][c] for t < n, k < K, c < C: a's rows
 * at stride lda, w's at ldw, o's at ldo; a ragged last token tile repeats
 * its first token (computed, not stored). Blocking w (32 columns by 128
 * rows in L1 while the token tiles pass, the sums kept in o between
 * blocks) measured no faster end to end (prefill 2048: 139-144 against
 * 144-147 tok/s, INT8 R1 shapes, Zen 4, 2 threads). */
static void gemm_nn(const float *a, int64_t lda, int n, int64_t K, const float *w, int64_t ldw,
                    int64_t C, float *o, int64_t ldo)
{
    for (int t0 = 0; t0 < n; t0 += NT) {
        const int nb = n - t0 < NT ? n - t0 : NT;
        const float *ra[NT];
        float *ro[NT];
        for (int b = 0; b < NT; b++) {
            const int t = t0 + (b < nb ? b : 0);
            ra[b] = a + t * lda;
            ro[b] = o + t * ldo;
        }
        for (int64_t c0 = 0; c0 < C; c0 += 32) {
            float *rc[NT];
            for (int b = 0; b < NT; b++) rc[b] = ro[b] + c0;
            tile(ra, K, w + c0, ldw, rc, nb, lanes(C - c0), lanes(C - c0 - 16));
        }
    }
}

void dsr1_naive_scores_avx512(const float *q, int64_t ldq, int n, const float *kt, int64_t ldkt,
                              int qk, int pb, float *s, int64_t lds)
{
    gemm_nn(q, ldq, n, qk, kt, ldkt, pb, s, lds);
}

void dsr1_naive_values_avx512(const float *s, int64_t lds, int n, const float *v, int64_t ldv, int vd,
                              int pb, float *out, int64_t ldo)
{
    gemm_nn(s, lds, n, pb, v, ldv, vd, out, ldo);
}
