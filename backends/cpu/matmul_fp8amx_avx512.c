/*
 * matmul_fp8amx_avx512.c - FP8 weights at DSR1_MM_FP8_AMX_MIN_N (1) to
 * DSR1_MM_FP8_AMX_MAX_N (32) tokens - a decode step, a batch's, speculative
 * decoding's verify batches, the experts a few tokens share (R1's 256
 * experts, 8 a token, get 16 tokens each on average from a 512-token
 * prefill chunk) -
 * in the fast mode on AMX-BF16 tiles: dsr1_mm_rows_fp8_amx, chosen by
 * matmul.c's call_setup (j->fp8amx) where the pool has AMX and VBMI.
 *
 * Why. The canonical FP8 GEMV (matmul_avx512.c, fp8_gemv) decodes 64
 * codes to bf16 with five shuffles and then spends two vdpbf16ps a token
 * on them; on Sapphire/Emerald Rapids every 512-bit shuffle runs on port
 * 5 and vdpbf16ps takes ports 0 and 5 too (a /tmp microbenchmark: one
 * vpermi2b every ~2.2-2.4 cycles, one vdpbf16ps a cycle), so one core decodes
 * and multiplies about 15 GB/s of codes from L2 at one token, and its work
 * grows with every token (8 tokens: 4.8 GB/s from DRAM on two cores).
 * Here the tile unit does the multiplies for all tokens at once and the
 * vector ports only decode: in one process on the Emerald Rapids Xeon,
 * one thread, 128x7168 matrices from L2, 17.6-18.5 GB/s against the
 * canonical kernel's 13.1 at one token, and a /tmp harness of the bare
 * loop read 24-26 GB/s at 1, 2, 4, 8 and 16 tokens alike. In the model
 * a decode step's FP8 GEMVs took 0.92-0.99 of the canonical kernel's time
 * (kernels.h, DSR1_MM_FP8_AMX_MIN_N).
 *
 * Layout. A tile multiply C += A B with A = 16 weight rows x 32 bf16
 * (decoded into a 2 KiB buffer, then loaded as a tile), B = 16 column
 * pairs x n tokens and C = 16 rows x n tokens (past 16 tokens a second
 * B and C pair takes the rest: amx_cfg_gemv). B is x' = bf16(x * the
 * block scale), as the canonical GEMV prepares it, made once per 128-row
 * scale block in the layout the tiles read: [64-column step][half][pair]
 * [token], 4 bytes each. The decode leaves a row's words in its unpacks'
 * order (fp8x64_words_lanes: no vpermb), and B's pairs are stored in that
 * same order, so words and x' still meet column by column. With the scale
 * in x', one C tile sums a row group's whole dot; storing C and scaling it
 * block by block instead (x made once a call) cost about a quarter of the
 * bare loop's speed (22 -> 17 GB/s). x itself is put in B's order once a
 * call, still float32 (dsr1_mm_fp8_amx_fill), so a row block's x' is one
 * pass of multiplies and roundings over it (fp8amx_b). Made from x's rows
 * per row block instead, with each token's pairs put in place by
 * vpscatterdd, x' took ~45% of the kernel's samples at 12 tokens, and the
 * tiles fell behind W8A8 past 12 (kernels.h, DSR1_MM_FP8_AMX_MAX_N).
 * Tried and not kept: two row groups sharing each B load (32 rows a step,
 * all eight tiles: slower at 2, 8 and 16 tokens, 19.8 / 17.4 / 10.2 ->
 * 17.7 / 13.0 / 8.4 GB/s, the harness of kernels.h's figures) and two C
 * tiles taking the halves (no change: 18.5 / 17.5 / 10.9 against 19.5 /
 * 18.2 / 10.4).
 *
 * Order. The tile unit sums each row's pairs in its own order, so this is
 * the fast mode's only (the deterministic mode keeps fp8_gemv): results
 * within float32 rounding of the exact dot of the bf16 operands. Each
 * token's column of C sees the same operations whatever n is, so a
 * token's result does not depend on the tokens beside it or on the thread
 * count.
 */
#include "amx_tiles.h"
#include "matmul_impl.h"

#include <immintrin.h>
#include <string.h>

#include "fp8_vbmi.h"

/* The call's scratch: the byte tables, then x in B's order (below). */
static size_t tab_bytes(void)
{
    return (sizeof(fp8_btab) + 63) & ~(size_t)63;
}

size_t dsr1_mm_fp8_amx_prep_bytes(int n, int64_t cols)
{
    return tab_bytes() + (size_t)n * (size_t)cols * sizeof(float);
}

const float *dsr1_mm_fp8_amx_prep(void *mem)
{
    fp8_btab_init(mem);
    return (const float *)((char *)mem + tab_bytes());
}

/* A task's scratch: B of one row block, [cols/64][2][16][n] pairs. */
size_t dsr1_mm_fp8_amx_task_bytes(int n, int64_t cols)
{
    return (size_t)n * (size_t)cols * 2;
}

/* B's order. Step s (columns 64s ..), half h, pair row k holds pair
 * 8 (k / 4) + 4 h + k % 4 of the step's 32 (columns 16q + 8h + 2(k % 4)
 * and the next, q = k / 4: the words fp8x64_words_lanes puts at k's place
 * in *w0 (h = 0) or *w1), the n tokens side by side. x's columns
 * go there once a call, still float32 (j->f8x: pair (s, h, k, t) at
 * ((2s + h) 16 + k) n + t, two floats each), so that each row block's B
 * is a plain pass of multiplies and roundings (fp8amx_b). Before, B was
 * made from x's rows for every row block, each token's pairs put in place
 * by two vpscatterdd per step: a perf profile at 12 tokens put ~45% of
 * the kernel's samples there. Here the scatters (of pairs) run once a
 * call, not once per 128 rows. */
void dsr1_mm_fp8_amx_fill(const dsr1_mm_job *j, int64_t s0, int64_t s1)
{
    const int64_t n = j->n;
    double *xp = (double *)j->f8x; /* a pair of floats: 8 bytes, moved as one */
    const __m512i idx = _mm512_mullo_epi64(_mm512_setr_epi64(0, 1, 2, 3, 4, 5, 6, 7), _mm512_set1_epi64(n));
    /* a step's tokens one after another: its 64 n pairs stay in L1 while
     * every token's go in (token by token, each line took 8 visits from L2) */
    for (int64_t s = s0; s < s1; s++)
        for (int t = 0; t < n; t++) {
            const float *x = j->x + (int64_t)t * j->ldx + 64 * s;
            const __m512d v0 = _mm512_castps_pd(_mm512_loadu_ps(x)),
                          v1 = _mm512_castps_pd(_mm512_loadu_ps(x + 16)),
                          v2 = _mm512_castps_pd(_mm512_loadu_ps(x + 32)),
                          v3 = _mm512_castps_pd(_mm512_loadu_ps(x + 48));
            double *d = xp + 2 * s * 16 * n + t;
            /* half 0: pairs 0-3 and 8-11 (rows k 0-7), 16-19 and 24-27 (k
             * 8-15), the low 256 bits of each 8-pair vector; half 1 the high */
            _mm512_i64scatter_pd(d, idx, _mm512_shuffle_f64x2(v0, v1, 0x44), 8);
            _mm512_i64scatter_pd(d + 8 * n, idx, _mm512_shuffle_f64x2(v2, v3, 0x44), 8);
            _mm512_i64scatter_pd(d + 16 * n, idx, _mm512_shuffle_f64x2(v0, v1, 0xee), 8);
            _mm512_i64scatter_pd(d + 24 * n, idx, _mm512_shuffle_f64x2(v2, v3, 0xee), 8);
        }
}

/* B of the row block of row r: x' = bf16(x * scale), rounded as the
 * canonical x' (dsr1_mm_fp8_prep_x), from j->f8x in B's order: a step's
 * 32 n pairs share one scale (g is a multiple of 64). */
static void fp8amx_b(const dsr1_mm_job *j, int64_t r, uint32_t *b)
{
    const dsr1_wmat *w = j->w;
    const int64_t g = w->group, cols = w->cols, ng = (cols + g - 1) / g, per = 64 * (int64_t)j->n;
    const float *sc = (const float *)w->scale + (r / g) * ng;
    for (int64_t s = 0; s < cols / 64; s++) {
        const __m512 f = _mm512_set1_ps(sc[64 * s / g]);
        const float *q = j->f8x + s * per;
        uint32_t *bs = b + s * per / 2;
        for (int64_t i = 0; i < per; i += 32)
            _mm512_store_si512(bs + i / 2, (__m512i)_mm512_cvtne2ps_pbh(_mm512_mul_ps(_mm512_load_ps(q + i + 16), f),
                                                                        _mm512_mul_ps(_mm512_load_ps(q + i), f)));
    }
}

/* Decoded rows ahead of the tile loads: a step's two halves, twice. */
typedef struct fp8amx_buf {
    _Alignas(64) uint16_t a[2][2][16 * 32];
} fp8amx_buf;

/* The software prefetch: each row's line this far ahead, past the row's
 * end the same row of the next 16 (into L2, as the canonical GEMV's
 * tile_prefetch). Alternated in one process (this kernel's first
 * version, 1 GB of 2048x7168 and 7168x2048 FP8 matrices, one token, 2
 * threads, Emerald Rapids, medians of 11 passes): none 19.2 GB/s, 1024
 * bytes 24.9, 2048 24.0, 4096 24.1. */
#define FP8AMX_PF 1024

/* Step s (columns 64s ..) of rows w[0 .. m) decoded into buf->a[s & 1]. */
__attribute__((target("avx512vbmi"))) static inline void fp8amx_decode(const uint8_t *w, int m, int64_t cols,
                                                                        int64_t s, fp8_bregs t,
                                                                        fp8amx_buf *buf)
{
    const int64_t c = 64 * s, ahead = c + FP8AMX_PF < cols ? FP8AMX_PF : FP8AMX_PF + 15 * cols;
    uint16_t *a0 = buf->a[s & 1][0], *a1 = buf->a[s & 1][1];
    for (int i = 0; i < m; i++) {
        __m512i w0, w1;
        _mm_prefetch((const char *)w + i * cols + c + ahead, _MM_HINT_T1);
        fp8x64_words_lanes(_mm512_loadu_si512(w + i * cols + c), t, &w0, &w1);
        _mm512_store_si512(a0 + 32 * i, w0);
        _mm512_store_si512(a1 + 32 * i, w1);
    }
}

/* Rows w[0 .. m) (m <= 16, stride cols bytes, one row block) times B:
 * out[i * n + k] the dot of row i and token k. Software-pipelined by one
 * step: the tiles load step s - 1 after step s is decoded, so a decode's
 * stores are in L1 before a tile load reads them. wide: n > 16, tokens 16
 * and on in C 5 against B 6 and 7 (amx_cfg_gemv), the same operations for
 * each token as in C 0. */
__attribute__((target("avx512vbmi"))) static inline __attribute__((always_inline)) void
fp8amx_rows_at(const int wide, const uint8_t *w, int m, int64_t cols, const uint32_t *b, int n, fp8_bregs t,
               fp8amx_buf *buf, float *out)
{
    const long ldb = 4L * n;
    const int64_t steps = cols / 64;
    T_ZERO(0);
    if (wide) T_ZERO(5);
    for (int64_t s = 0; s <= steps; s++) {
        if (s < steps) fp8amx_decode(w, m, cols, s, t, buf);
        if (s == 0) continue;
        const uint32_t *bs = b + (s - 1) * 2 * 16 * n;
        T_LOAD(1, buf->a[(s - 1) & 1][0], 64);
        T_LOAD(2, buf->a[(s - 1) & 1][1], 64);
        T_LOAD(3, bs, ldb);
        T_LOAD(4, bs + 16 * n, ldb);
        T_DPBF(0, 1, 3);
        T_DPBF(0, 2, 4);
        if (wide) {
            T_LOAD(6, bs + 16, ldb);
            T_LOAD(7, bs + 16 * n + 16, ldb);
            T_DPBF(5, 1, 6);
            T_DPBF(5, 2, 7);
        }
    }
    T_STORE(0, out, ldb);
    if (wide) T_STORE(5, out + 16, ldb);
}

__attribute__((target("avx512vbmi"))) static void fp8amx_rows(const uint8_t *w, int m, int64_t cols,
                                                               const uint32_t *b, int n, fp8_bregs t,
                                                               fp8amx_buf *buf, float *out)
{
    if (n > 16) fp8amx_rows_at(1, w, m, cols, b, n, t, buf, out);
    else fp8amx_rows_at(0, w, m, cols, b, n, t, buf, out);
}

__attribute__((target("avx512vbmi"))) void dsr1_mm_rows_fp8_amx(const dsr1_mm_job *j, int64_t r0, int64_t r1)
{
    const dsr1_wmat *w = j->w;
    const int64_t g = w->group, cols = w->cols;
    const int n = j->n;
    const fp8_bregs t = fp8_bregs_load((const fp8_btab *)j->f8tab);
    uint32_t *b = j->task_mem;
    fp8amx_buf buf;
    _Alignas(64) float out[16 * DSR1_MM_FP8_AMX_MAX_N];
    int zeroed = 0;
    amx_cfg_gemv(n, 16); /* rows past m: the zeros of buf, never read out */
    for (int64_t r = r0; r < r1; r += 16) {
        /* a 16-row group stays in one row block: g and r0 are multiples of 16 */
        if (r == r0 || r % g == 0) fp8amx_b(j, r, b);
        const int m = r1 - r < 16 ? (int)(r1 - r) : 16;
        if (m < 16 && !zeroed) { /* rows past m are never read out: zeroed once so
                                    that the tiles load no uninitialised memory */
            memset(&buf, 0, sizeof buf);
            zeroed = 1;
        }
        fp8amx_rows((const uint8_t *)w->data + r * cols, m, cols, b, n, t, &buf, out);
        for (int i = 0; i < m; i++)
            for (int k = 0; k < n; k++) j->y[k * j->ldy + r + i] = out[i * n + k];
    }
    T_RELEASE();
    if (r1 > r0 && j->amx_runs) __atomic_fetch_add(j->amx_runs, 1, __ATOMIC_RELAXED);
}
