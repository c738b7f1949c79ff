/*
 * matmul_bf16amx_avx512.c - BF16 weights at DSR1_MM_B16_AMX_MIN_N (2) to
 * 16 tokens in the fast mode on AMX-BF16 tiles: dsr1_mm_rows_bf16_gv_amx,
 * chosen by matmul.c's call_setup (j->b16gv) where the pool has AMX. The
 * few-token calls of a BF16 model: a batch's decode step, speculative
 * decoding's verify batches, experts that a few tokens share.
 *
 * Why. The canonical GEMV (matmul_avx512.c, mk_fused) spends one
 * vdpbf16ps per 32 weights per token, so its time grows with the tokens:
 * `bench kernels --type bf16` on the Emerald Rapids Xeon (18432x7168, 2
 * threads) 8.8 ms at one token (95% of the read rate), 12.5 at 4 and 25.1
 * at 8 (33%). A tile multiply takes 16 rows x 32 columns for all tokens
 * at once, and the weights need no decoding: the A tile is loaded straight
 * from the matrix (16 rows, the row stride as the tile's stride), so the
 * vector units do nothing per weight.
 *
 * Layout. C += A B with A = 16 weight rows x 32 bf16, B = 16 column pairs
 * x n tokens (bf16(x) interleaved by token, made once a call:
 * dsr1_mm_bf16_gv_fill, j->b16b, [cols / 2][n] pairs) and C = 16 rows x n
 * tokens.
 * A last group of m < 16 rows runs on tiles configured for m rows (a tile
 * load of 16 would read past the matrix).
 *
 * Order. The tile unit sums each row's pairs in its own order, so this is
 * the fast mode's only (the deterministic mode keeps mk_fused): results
 * within float32 rounding of the exact dot of the bf16 operands, the same
 * bits for a token whatever n and the thread count.
 */
#include "amx_tiles.h"
#include "matmul_impl.h"

#include <immintrin.h>
#include <string.h>

/* B for 32-column steps [k0, k1) of every token: pair p of token t at
 * p n + t, bf16 rounded as dsr1_mm_bf16_rows_avx512 rounds (to nearest
 * even). A step's 16 pair rows (64 n bytes) stay in L1 while every token
 * goes in, and threads split the steps, not the tokens, whose dwords
 * share cache lines; before, it was made token by token from bf16(x)'s
 * rows (each line of it visited n times from L2). */
void dsr1_mm_bf16_gv_fill(const dsr1_mm_job *j, int64_t k0, int64_t k1)
{
    const int n = j->n;
    uint32_t *b = (uint32_t *)j->b16b;
    const __m512i idx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                           _mm512_set1_epi32(n));
    for (int64_t k = k0; k < k1; k++)
        for (int t = 0; t < n; t++) {
            const float *x = j->x + (int64_t)t * j->ldx + 32 * k;
            const __m512i v = (__m512i)_mm512_cvtne2ps_pbh(_mm512_loadu_ps(x + 16), _mm512_loadu_ps(x));
            _mm512_i32scatter_epi32(b + 16 * k * n + t, idx, v, 4);
        }
}

/* Each row's line this many bytes ahead, into L2 (past the row's end: the
 * same row of the next 16). */
#define B16GV_PF 1024

/* Rows w[0 .. 16) (stride cols elements) times B: C tile 0. Two A and two B
 * tiles alternate so that a step's loads need not wait for the last
 * step's multiply to release its tiles. */
static void b16gv_rows(const uint16_t *w, int64_t cols, const uint32_t *b, int n, int m)
{
    const long lda = (long)cols * 2, ldb = 4L * n;
    const char *base = (const char *)w;
    T_ZERO(0);
    int64_t k = 0;
    for (; k + 64 <= cols; k += 64) {
        const int64_t off = 2 * k, ahead = off + B16GV_PF < lda ? B16GV_PF : B16GV_PF + 15 * lda;
        for (int i = 0; i < m; i++) {
            _mm_prefetch(base + i * lda + off + ahead, _MM_HINT_T1);
            _mm_prefetch(base + i * lda + off + 64 + ahead, _MM_HINT_T1);
        }
        T_LOAD(1, w + k, lda);
        T_LOAD(3, b + (k / 2) * n, ldb);
        T_LOAD(2, w + k + 32, lda);
        T_LOAD(4, b + (k / 2 + 16) * n, ldb);
        T_DPBF(0, 1, 3);
        T_DPBF(0, 2, 4);
    }
    if (k < cols) { /* cols is a multiple of 32 */
        T_LOAD(1, w + k, lda);
        T_LOAD(3, b + (k / 2) * n, ldb);
        T_DPBF(0, 1, 3);
    }
}

void dsr1_mm_rows_bf16_gv_amx(const dsr1_mm_job *j, int64_t r0, int64_t r1)
{
    const dsr1_wmat *w = j->w;
    const int64_t cols = w->cols;
    const int n = j->n;
    _Alignas(64) float out[16 * 16];
    int cur = 16;
    amx_cfg_gemv(n, 16);
    for (int64_t r = r0; r < r1; r += 16) {
        const int m = r1 - r < 16 ? (int)(r1 - r) : 16;
        if (m != cur) amx_cfg_gemv(n, cur = m);
        b16gv_rows((const uint16_t *)w->data + r * cols, cols, j->b16b, n, m);
        T_STORE(0, out, 4L * n);
        for (int i = 0; i < m; i++)
            for (int t = 0; t < n; t++) j->y[t * j->ldy + r + i] = out[i * n + t];
    }
    T_RELEASE();
    if (r1 > r0 && j->amx_runs) __atomic_fetch_add(j->amx_runs, 1, __ATOMIC_RELAXED);
}
