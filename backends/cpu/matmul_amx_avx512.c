/*
 * matmul_amx_avx512.c - W8A8 on AMX tiles (Sapphire Rapids and later):
 * the exact integer dots of the rows-in-lanes kernels (matmul_lanes_avx512.c)
 * done by the tile unit, 16 tokens x 16 rows x 64 columns per instruction,
 * then the same float steps, so the results are those kernels' bits (and
 * so the portable kernels': matmul_impl.h's order). Two entries, chosen by
 * dsr1_mm_rows_avx512 when the job has amx set (dsr1_pool_amx: cpuid, XCR0
 * and Linux's permission) and at least DSR1_MM_AMX_MIN_N tokens:
 *
 *   dsr1_mm_rows_int8_amx   INT8 weights with one scale per row
 *   dsr1_mm_rows_int8g_amx  FP8 as W8A8 (a scale per row and 128 columns)
 *
 * and, by the same driver, W4A8 (dsr1_mm_rows_w4a8_amx, INT4 with scales
 * per 128 columns) and BF16 weights in the fast mode
 * (dsr1_mm_rows_bf16_amx, from DSR1_MM_B16L_MIN_N tokens): tdpbf16ps with
 * x's bf16 rows as A and the BF16 rows-in-lanes panel (a bf16 pair of 16
 * rows per 64 bytes, exactly the B layout the instruction wants) as B.
 * BF16 alone does not give another kernel's bits (below).
 *
 * Layout. A tile multiply C += A B takes A as 16 rows of 64 bytes and B as
 * 16 rows of 64 bytes, each B row holding 4 consecutive columns of 16
 * output rows. A is x itself (16 tokens' int8 rows, read in place at the
 * stride ldxq); B is exactly the code panel dsr1_mm_i8l_panel builds for
 * the VNNI kernel (4 columns of 16 rows per 64 bytes, weights + 128), read
 * at the stride of its two halves. So tdpbsud (signed x, unsigned
 * weights) gives sum x (w + 128), the very integer the VNNI kernel's
 * vpdpbusd chain holds, and C's rows [token][16 rows] are its
 * accumulators' layout. Four C tiles cover 32 tokens x 32 rows; per 64
 * columns two x tiles and two panel tiles feed four multiplies.
 *
 * What AMX does not take: stripes of fewer than 32 rows go to the VNNI
 * kernels (same bits), so any shape works. The last n mod 32 tokens run on
 * tiles of fewer rows (cfg_tokens): in a prefill's MoE every expert has
 * such a tail (what they cost on the VNNI kernel was not measured apart).
 *
 * Order. A task builds the code panels of DSR1_MM_AMX_STRIPES stripes of
 * 32 rows for a chunk of AMX_KC columns (64 KB, L2), then takes x 32
 * tokens at a time and runs that block (16 KB of x) against every stripe
 * before the next block, so x comes from L2 or L3 once and from L1 for
 * the other stripes. The accumulators of all stripes and AMX_TB tokens
 * live in the task's memory between chunks (dsr1_mm_amx_task_bytes).
 * Why: with one stripe at a time the loads of x were the kernel's stall
 * (its samples sat on the x tile loads, and with x kept in L1 as an
 * experiment the kernel ran ~1.5x); alternated in one process (Emerald
 * Rapids, 2 threads, 512 tokens, the fastest of 12 calls) four stripes
 * ran 1.22-1.43x one stripe on 2048x7168 in INT8, 1.27-1.30x in FP8, and
 * 1.00-1.07x on 7168x2048; two 1.19-1.21x, eight no better than four.
 *
 * The tile instructions are written as inline asm with memory clobbers,
 * not GCC's intrinsics: those are asm statements that do not tell the
 * compiler they read or write memory. The full tile configuration lives
 * in read-only data (GCC 12 dropped the stores that filled one built on
 * the stack for the intrinsic); a short block's (cfg_tokens) is built on
 * the stack and given to ldtilecfg as the asm's memory operand, which
 * orders the stores before it. Nothing needs -mamx-*: only the
 * assembler sees these instructions, and they run only behind the check.
 */
#include "amx_tiles.h"
#include "matmul_impl.h"

#include <immintrin.h>
#include <string.h>

/* The panel geometry the VNNI kernels use (matmul_lanes_avx512.c). */
#define AMX_TB 256     /* tokens per block: a multiple of 32 */
#define AMX_KC 512     /* columns per panel chunk */
#define AMX_SG DSR1_MM_AMX_STRIPES

/* The task memory: code panels [stripe][32 x AMX_KC], accumulators
 * [stripe][AMX_TB tokens][32 rows] (int32 or float), FP8's chunk scales
 * [stripe][group][32 rows] and two groups' tile sums. */
#define AMX_CODES_BYTES ((size_t)AMX_SG * 32 * AMX_KC)
#define AMX_ACC_BYTES ((size_t)AMX_SG * AMX_TB * 32 * 4)
#define AMX_WS_BYTES ((size_t)AMX_SG * (AMX_KC / DSR1_MM_XG) * 32 * 4)
#define AMX_CB_BYTES ((size_t)2 * 32 * 32 * 4)

size_t dsr1_mm_amx_task_bytes(void)
{
    return AMX_CODES_BYTES + AMX_ACC_BYTES + AMX_WS_BYTES + AMX_CB_BYTES;
}

#define INLINE static inline __attribute__((always_inline))

/* Tiles: C 0 (tokens 0-15, rows 0-15), 1 (tokens 0-15, rows 16-31),
 * 2 (tokens 16-31, rows 0-15), 3 (tokens 16-31, rows 16-31); x 4, 5
 * (tokens 0-15, 16-31); panel 6, 7 (rows 0-15, 16-31). */

/* 64 columns: x at xq (stride ldx bytes) for 32 tokens, the panel's step
 * block at p (its two halves 64 bytes apart, steps 128 apart). */
INLINE void dp_step(const int bf, const int8_t *xq, int64_t ldx, const uint8_t *p)
{
    T_LOAD(4, xq, ldx);
    T_LOAD(5, xq + 16 * ldx, ldx);
    T_LOAD(6, p, 128);
    T_LOAD(7, p + 64, 128);
    if (bf) {
        T_DPBF(0, 4, 6);
        T_DPBF(1, 4, 7);
        T_DPBF(2, 5, 6);
        T_DPBF(3, 5, 7);
    } else {
        T_DP(0, 4, 6);
        T_DP(1, 4, 7);
        T_DP(2, 5, 6);
        T_DP(3, 5, 7);
    }
}

/* The same for a block of at most 16 tokens: tiles 2, 3 and 5 are off. */
INLINE void dp_step16(const int bf, const int8_t *xq, int64_t ldx, const uint8_t *p)
{
    T_LOAD(4, xq, ldx);
    T_LOAD(6, p, 128);
    T_LOAD(7, p + 64, 128);
    if (bf) {
        T_DPBF(0, 4, 6);
        T_DPBF(1, 4, 7);
    } else {
        T_DP(0, 4, 6);
        T_DP(1, 4, 7);
    }
}

/* C tiles to/from acc ([token][32 rows] int32, 128-byte rows); hi: the
 * tiles of tokens 16-31 are on. */
static inline void c_store(int32_t *acc, int hi)
{
    T_STORE(0, acc, 128);
    T_STORE(1, acc + 16, 128);
    if (!hi) return;
    T_STORE(2, acc + 16 * 32, 128);
    T_STORE(3, acc + 16 * 32 + 16, 128);
}

static inline void c_load(const int32_t *acc, int hi)
{
    T_LOAD(0, acc, 128);
    T_LOAD(1, acc + 16, 128);
    if (!hi) return;
    T_LOAD(2, acc + 16 * 32, 128);
    T_LOAD(3, acc + 16 * 32 + 16, 128);
}

static inline void c_zero(int hi)
{
    T_ZERO(0);
    T_ZERO(1);
    if (!hi) return;
    T_ZERO(2);
    T_ZERO(3);
}

/* The tiles for a block of m tokens (1..32): the x and C tiles of tokens
 * 0-15 get min(m, 16) rows, those of tokens 16-31 the rest (a tile of no
 * rows is off: rows and bytes 0), so the last n mod 32 tokens of a call
 * run on the tiles too, their loads and stores touching only their rows.
 * Built on the stack: the asm takes it as a memory operand, so its stores
 * come first. Loading a configuration zeroes the tiles; nothing is kept
 * in them across blocks. */
static void cfg_tokens(int m)
{
    if (m == 32) {
        T_CFG(&amx_16x64);
        return;
    }
    _Alignas(64) amx_cfg c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    const uint8_t lo = (uint8_t)(m < 16 ? m : 16), hi = (uint8_t)(m > 16 ? m - 16 : 0);
    const uint8_t rows[8] = {lo, lo, hi, hi, lo, hi, 16, 16};
    for (int i = 0; i < 8; i++) {
        c.rows[i] = rows[i];
        c.colsb[i] = rows[i] ? 64 : 0;
    }
    __asm__ volatile("ldtilecfg %0" ::"m"(c) : "memory");
}

/* The job for tokens [t, n) only (what AMX leaves to the VNNI kernels). */
static dsr1_mm_job tail_job(const dsr1_mm_job *j, int t)
{
    dsr1_mm_job s = *j;
    s.n = j->n - t;
    s.xq = j->xq + t * j->ldxq;
    s.y = j->y + t * j->ldy;
    if (j->xs) s.xs = j->xs + t;
    if (j->xsum) s.xsum = j->xsum + t;
    if (j->xgs) s.xgs = j->xgs + t * j->ldg;
    if (j->xgc) s.xgc = j->xgc + t * j->ldg;
    if (j->xp) s.xp = j->xp + t * j->ldxp;
    if (j->xg) s.xg = j->xg + t * j->ldxg;
    return s;
}

/* Hand what AMX does not take to the VNNI kernel `rows`: rows [rf, r1)
 * (a stripe under 32) for all tokens, rows [r0, rf) for tokens [na, n). */
static void leftovers(const dsr1_mm_job *j, int64_t r0, int64_t rf, int64_t r1, int na,
                      void (*rows)(const dsr1_mm_job *, int64_t, int64_t))
{
    if (rf < r1) rows(j, rf, r1);
    if (na < j->n && r0 < rf) {
        dsr1_mm_job s = tail_job(j, na);
        rows(&s, r0, rf);
    }
}

/* INT8 with one scale per row (bf = 0) and BF16 (bf = 1): a chunk of
 * AMX_KC bytes of each row (512 int8 or 256 bf16 columns) per panel, x
 * read in place (xq, or xb's bf16 rows), the sums kept in the task memory
 * between chunks (int32, or float for BF16), then y: W8A8's float steps,
 * or BF16's sums as they are. */
INLINE void rows_amx(const int bf, const dsr1_mm_job *j, int64_t r0, int64_t r1)
{
    const dsr1_wmat *w = j->w;
    const int64_t es = bf ? 2 : 1, kc = AMX_KC / es; /* bytes a weight; columns a chunk */
    const int8_t *x = bf ? (const int8_t *)j->xb : j->xq;
    const int64_t ldx = bf ? 2 * j->ldxb : j->ldxq; /* bytes */
    uint8_t *codes = j->amx_mem;                                  /* [stripe][32 x AMX_KC] */
    int32_t *iacc = (int32_t *)((char *)j->amx_mem + AMX_CODES_BYTES); /* [stripe][token][row] */
    const float *sw = (const float *)w->scale; /* W8A8: one per row */
    const int na = j->amx_mem ? j->n : 0; /* no task memory: all to the VNNI kernel */
    const int64_t rf = r0 + (r1 - r0) / 32 * 32;
    int cur = 0; /* the tokens the tile configuration is for (0: none loaded) */
    if (na && rf > r0 && j->amx_runs) __atomic_fetch_add(j->amx_runs, 1, __ATOMIC_RELAXED);
    for (int64_t r = r0; r < rf && na; r += 32 * AMX_SG) {
        const int ns = (int)((rf - r) / 32 < AMX_SG ? (rf - r) / 32 : AMX_SG);
        for (int t0 = 0; t0 < na; t0 += AMX_TB) {
            const int nb = na - t0 < AMX_TB ? na - t0 : AMX_TB;
            for (int64_t c0 = 0; c0 < w->cols; c0 += kc) {
                const int64_t len = w->cols - c0 < kc ? w->cols - c0 : kc, lb = len * es;
                for (int s = 0; s < ns; s++) {
                    if (bf) dsr1_mm_b16l_panel(w, r + 32 * s, 32, 2, c0, len, codes + s * 32 * AMX_KC);
                    else dsr1_mm_i8l_panel(w, r + 32 * s, 32, 2, c0, len, codes + s * 32 * AMX_KC);
                }
                for (int b0 = 0; b0 < nb; b0 += 32) {
                    const int8_t *xc = x + (t0 + b0) * ldx + c0 * es;
                    const int m = nb - b0 < 32 ? nb - b0 : 32, hi = m > 16;
                    if (m != cur) cfg_tokens(cur = m);
                    for (int s = 0; s < ns; s++) {
                        const uint8_t *cs = codes + s * 32 * AMX_KC;
                        int32_t *acc = iacc + ((int64_t)s * AMX_TB + b0) * 32;
                        if (c0) c_load(acc, hi);
                        else c_zero(hi);
                        if (hi)
                            for (int64_t k = 0; k < lb; k += 64) dp_step(bf, xc + k, ldx, cs + k / 4 * 128);
                        else
                            for (int64_t k = 0; k < lb; k += 64) dp_step16(bf, xc + k, ldx, cs + k / 4 * 128);
                        c_store(acc, hi);
                    }
                }
            }
            for (int s = 0; s < ns; s++)
                for (int b = 0; b < nb; b++)
                    for (int h = 0; h < 2; h++) {
                        const int64_t row = r + 32 * s + 16 * h;
                        const int32_t *a = iacc + ((int64_t)s * AMX_TB + b) * 32 + h * 16;
                        float *y = j->y + (t0 + b) * j->ldy + row;
                        if (bf) {
                            _mm512_storeu_ps(y, _mm512_load_ps((const float *)a));
                            continue;
                        }
                        /* y = (dot - 128 sum x) * s_x * s_w, the VNNI kernel's steps */
                        const __m512i d = _mm512_sub_epi32(_mm512_load_si512(a),
                                                           _mm512_set1_epi32(128 * j->xsum[t0 + b]));
                        const __m512 v = _mm512_mul_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(d),
                                                                     _mm512_set1_ps(j->xs[t0 + b])),
                                                       _mm512_loadu_ps(sw + row));
                        _mm512_storeu_ps(y, v);
                    }
        }
    }
    if (cur) T_RELEASE();
    leftovers(j, r0, rf, r1, na, bf ? dsr1_mm_rows_bf16_lanes_avx512 : dsr1_mm_rows_int8_lanes_avx512);
}

void dsr1_mm_rows_int8_amx(const dsr1_mm_job *j, int64_t r0, int64_t r1)
{
    rows_amx(0, j, r0, r1);
}

/* BF16 in the fast mode (matmul_impl.h). The tile unit's sums are not a
 * sequence of float32 roundings (it is free in how it adds each pair and
 * flushes denormals), so the bits are not the lanes kernel's; each output
 * is still one fixed computation over its row and token, for any n from
 * DSR1_MM_B16L_MIN_N tokens, any tiling or thread count (test_amx.c). Why
 * ours and not oneDNN's AMX GEMM: 1.3-2.6x its GFLOP/s on R1's shapes
 * (README, "AMX"). */
void dsr1_mm_rows_bf16_amx(const dsr1_mm_job *j, int64_t r0, int64_t r1)
{
    rows_amx(1, j, r0, r1);
}

/* One 128-column group's float step for 32 tokens x 32 rows: the exact
 * dots are the tiles' sums plus xc (FP8: -128 x the token's group sum of
 * x; W4A8: -8 x it), then fa += dot x (s_w x s_x) as the VNNI kernel's
 * mk_i8g, or without xs (W4A8, whose x scale is one per token, applied
 * at the end) fa += dot x s_w as mk_w4. */
static void group_step(const int32_t *cb, const float *ws, const float *xs, const int32_t *xc,
                       int64_t ldg, float *facc, int m)
{
    const __m512 w0 = _mm512_load_ps(ws), w1 = _mm512_load_ps(ws + 16);
    for (int b = 0; b < m; b++) {
        const __m512i c = _mm512_set1_epi32(xc[b * ldg]);
        float *f = facc + b * 32;
        __m512 v0 = w0, v1 = w1;
        if (xs) {
            const __m512 sx = _mm512_set1_ps(xs[b * ldg]);
            v0 = _mm512_mul_ps(w0, sx);
            v1 = _mm512_mul_ps(w1, sx);
        }
        const __m512i d0 = _mm512_add_epi32(_mm512_load_si512(cb + b * 32), c);
        const __m512i d1 = _mm512_add_epi32(_mm512_load_si512(cb + b * 32 + 16), c);
        _mm512_store_ps(f, _mm512_fmadd_ps(_mm512_cvtepi32_ps(d0), v0, _mm512_load_ps(f)));
        _mm512_store_ps(f + 16, _mm512_fmadd_ps(_mm512_cvtepi32_ps(d1), v1, _mm512_load_ps(f + 16)));
    }
}

/* A group whose tile sums wait in a buffer for their float step. */
typedef struct amx_pending {
    const int32_t *cb;
    const float *ws, *xs;
    const int32_t *xc;
    float *facc;
    int m; /* tokens */
} amx_pending;

static void pending_step(const amx_pending *q, int64_t ldg)
{
    if (q->cb) group_step(q->cb, q->ws, q->xs, q->xc, ldg, q->facc, q->m);
}

/* The float step of a group (64 conversions and FMAs with their loads and
 * stores) runs on the vector units while the tile unit multiplies the
 * next group: a group's multiplies are issued, then the previous group's
 * float step, then the new sums are stored into the other of two buffers.
 * The steps keep their order per output, so the bits do not change.
 * w4: W4A8 (x is xp, the codes 0..15 with xg = -8 x the group sums of x,
 * the panel and scales dsr1_mm_w4_panel's, y = the sums x the token's
 * scale), else FP8 as W8A8. */
static void rows_grouped_amx(const dsr1_mm_job *j, int64_t r0, int64_t r1, const int w4)
{
    const dsr1_wmat *w = j->w;
    char *mem = j->amx_mem;
    uint8_t *codes = (uint8_t *)mem;                                           /* [stripe][32 x AMX_KC] */
    float *facc = (float *)(mem + AMX_CODES_BYTES);                            /* [stripe][token][row] */
    float *ws = (float *)(mem + AMX_CODES_BYTES + AMX_ACC_BYTES);              /* [stripe][group][row] */
    int32_t *cb = (int32_t *)(mem + AMX_CODES_BYTES + AMX_ACC_BYTES + AMX_WS_BYTES); /* [2][32 x 32] */
    const float *sw = (const float *)w->scale;                                 /* FP8: [row][group] */
    const int64_t gpc = AMX_KC / DSR1_MM_XG;                                   /* groups a chunk */
    const int8_t *x = w4 ? j->xp : j->xq;
    const int64_t ldx = w4 ? j->ldxp : j->ldxq, ldc = w4 ? j->ldxg : j->ldg;
    _Static_assert(AMX_KC % DSR1_MM_XG == 0 && DSR1_MM_XG % 64 == 0, "whole groups of tile steps");
    const int na = mem ? j->n : 0; /* no task memory: all to the VNNI kernel */
    const int64_t rf = r0 + (r1 - r0) / 32 * 32;
    int cur = 0; /* the tokens the tile configuration is for (0: none loaded) */
    if (na && rf > r0 && j->amx_runs) __atomic_fetch_add(j->amx_runs, 1, __ATOMIC_RELAXED);
    for (int64_t r = r0; r < rf && na; r += 32 * AMX_SG) {
        const int ns = (int)((rf - r) / 32 < AMX_SG ? (rf - r) / 32 : AMX_SG);
        for (int t0 = 0; t0 < na; t0 += AMX_TB) {
            const int nb = na - t0 < AMX_TB ? na - t0 : AMX_TB;
            for (int s = 0; s < ns; s++) memset(facc + (int64_t)s * AMX_TB * 32, 0, (size_t)nb * 32 * sizeof *facc);
            for (int64_t c0 = 0; c0 < w->cols; c0 += AMX_KC) {
                const int64_t len = w->cols - c0 < AMX_KC ? w->cols - c0 : AMX_KC;
                for (int s = 0; s < ns; s++) {
                    const int64_t rs = r + 32 * s;
                    if (w4) {
                        dsr1_mm_w4_panel(w, rs, 32, 2, c0, len, codes + s * 32 * AMX_KC, ws + s * gpc * 32);
                        continue;
                    }
                    dsr1_mm_i8l_panel(w, rs, 32, 2, c0, len, codes + s * 32 * AMX_KC);
                    for (int64_t gi = 0; gi * DSR1_MM_XG < len; gi++)
                        for (int i = 0; i < 32; i++)
                            ws[(s * gpc + gi) * 32 + i] = sw[(rs + i) * j->ldg + c0 / DSR1_MM_XG + gi];
                }
                amx_pending q = {0}; /* ws is the chunk's: the pipe drains before the next */
                int nbuf = 0;
                for (int b0 = 0; b0 < nb; b0 += 32) {
                    const int8_t *xb = x + (t0 + b0) * ldx + c0;
                    const int64_t xo = (t0 + b0) * ldc + c0 / DSR1_MM_XG;
                    const int m = nb - b0 < 32 ? nb - b0 : 32, hi = m > 16;
                    if (m != cur) cfg_tokens(cur = m); /* the pending sums are in cb, not in tiles */
                    for (int s = 0; s < ns; s++) {
                        const uint8_t *cs = codes + s * 32 * AMX_KC;
                        for (int64_t g0 = 0, gi = 0; g0 < len; g0 += DSR1_MM_XG, gi++) {
                            const int64_t g1 = len - g0 < DSR1_MM_XG ? len : g0 + DSR1_MM_XG;
                            c_zero(hi);
                            if (hi)
                                for (int64_t k = g0; k < g1; k += 64) dp_step(0, xb + k, ldx, cs + k / 4 * 128);
                            else
                                for (int64_t k = g0; k < g1; k += 64) dp_step16(0, xb + k, ldx, cs + k / 4 * 128);
                            pending_step(&q, ldc);
                            int32_t *c = cb + nbuf * 32 * 32;
                            c_store(c, hi);
                            q = (amx_pending){c, ws + (s * gpc + gi) * 32, w4 ? NULL : j->xgs + xo + gi,
                                              (w4 ? j->xg : j->xgc) + xo + gi,
                                              facc + ((int64_t)s * AMX_TB + b0) * 32, m};
                            nbuf ^= 1;
                        }
                    }
                }
                pending_step(&q, ldc);
            }
            for (int s = 0; s < ns; s++)
                for (int b = 0; b < nb; b++)
                    for (int h = 0; h < 2; h++) {
                        __m512 v = _mm512_load_ps(facc + ((int64_t)s * AMX_TB + b) * 32 + h * 16);
                        if (w4) v = _mm512_mul_ps(v, _mm512_set1_ps(j->xs[t0 + b])); /* w4_store's */
                        _mm512_storeu_ps(j->y + (t0 + b) * j->ldy + r + 32 * s + 16 * h, v);
                    }
        }
    }
    if (cur) T_RELEASE();
    leftovers(j, r0, rf, r1, na, w4 ? dsr1_mm_rows_w4a8_lanes_avx512 : dsr1_mm_rows_int8g_lanes_avx512);
}

void dsr1_mm_rows_int8g_amx(const dsr1_mm_job *j, int64_t r0, int64_t r1)
{
    rows_grouped_amx(j, r0, r1, 0);
}

void dsr1_mm_rows_w4a8_amx(const dsr1_mm_job *j, int64_t r0, int64_t r1)
{
    rows_grouped_amx(j, r0, r1, 1);
}
