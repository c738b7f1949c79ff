/*
 * matmul_impl.h - private to backends/cpu: the contract between the matmul
 * dispatcher (matmul.c), the portable kernels (matmul.c) and the AVX-512
 * kernels (matmul_avx512.c). Nothing outside backends/cpu and its tests
 * includes this.
 *
 * The canonical summation order (what makes results bit-identical for any
 * n, any thread count, and between the portable and the AVX-512 kernels):
 *
 *   DSR1_ACT_F32   w = dequantised float32 (dsr1_wmat_dequant_span). The
 *                  columns are cut into chunks of DSR1_MM_KC_F32. In a chunk,
 *                  16 lanes: lane l accumulates columns 16k+l for k = 0,1,..
 *                  with a fused multiply-add (zeros pad the last step); the
 *                  lanes are summed by dsr1_mm_hsum16's tree; y is the
 *                  chunk sums added in chunk order (the first one assigned).
 *   DSR1_ACT_BF16  same, chunks of DSR1_MM_KC_BF16, but w and x are rounded
 *                  to bf16 (round to nearest even, denormals to zero) and
 *                  lane l at step k takes columns 32k+2l and 32k+2l+1 the way
 *                  vdpbf16ps does: acc += w[odd]*x[odd]; acc += w[even]*x[even],
 *                  each a float32 rounding, denormals flushed.
 *                  FP8 weights enter as their exact e4m3 values (every finite
 *                  e4m3 is a bf16: dsr1_mm_fp8_bf16) and the block scale goes
 *                  to x instead: for row r, x'[c] = bf16(x[c] * s[r/g][c/g])
 *                  (float32 product, then rounded as above). One weight byte
 *                  then costs a table lookup, not a multiply and two
 *                  conversions, and x' is shared by the g rows of a block.
 *   DSR1_ACT_INT8  (INT8 weights only) x quantised per token: s = amax/127,
 *                  q = rint(x * (127/amax)). Integer dot products are exact,
 *                  so order does not matter; then
 *                  group 0:  y = (float)dot * s_x * s_w[r]
 *                  group g:  acc = fma((float)dot_g, s_w[r][g], acc) over g, y = acc * s_x
 *                  INT4 weights (W4A8, group g > 0): x quantised as above;
 *                  the grouped order above with the codes: for each group
 *                  in order the exact dot d = sum (q - 8) * xq over its
 *                  columns, acc = fma((float)d, s_w[r][g], acc) from acc = 0,
 *                  y = acc * s_x. (Exact integer dots make the columns'
 *                  order inside a group free: the AVX-512 kernel puts rows
 *                  in lanes and reorders columns, matmul_avx512.c.)
 *   FP8 as W8A8    (the fast INT8 mode's rq jobs, DSR1_ACT_INT8_FAST) the rows
 *                  requantised to INT8 with one scale s_w[r] per row
 *                  (dsr1_mm_fp8_requant_row), x quantised per token and
 *                  DSR1_MM_XG columns (the last group may be shorter):
 *                  s_x[t][g] = amax/127, q = rint(x * (127/amax)) as above;
 *                  for each group in order the exact dot d of the codes,
 *                  acc = fma((float)d, s_x[t][g], acc) from acc = 0,
 *                  y = acc * s_w[r].
 */
#ifndef DSR1_CPU_MATMUL_IMPL_H
#define DSR1_CPU_MATMUL_IMPL_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"

#define DSR1_MM_KC_F32 1024
#define DSR1_MM_KC_BF16 2048

/* One matmul call, prepared: the activations in the form the mode needs. */
typedef struct dsr1_mm_job {
    const dsr1_wmat *w;
    int n;
    dsr1_act act;            /* effective mode (INT8 only with INT8 weights) */
    const float *x;          /* [n][ldx] the caller's activations */
    int64_t ldx;
    const uint16_t *xb;      /* BF16: [n][ldxb] bf16(x), zero padded; scratch */
    int64_t ldxb;            /* multiple of 32 >= cols */
    const int8_t *xq;        /* INT8: [n][ldxq] quantised x, zero padded; scratch */
    int64_t ldxq;            /* multiple of 64 >= cols */
    const float *xs;         /* INT8: [n] per-token scale (amax/127) */
    const int32_t *xsum;     /* INT8: [n] sum of the token's q */
    const int8_t *xp;        /* INT8 mode, INT4 weights, AVX-512 or AVX2 kernels (else
                                NULL): [n][ldxp] xq reordered (dsr1_mm_w4_prep_avx512,
                                dsr1_mm_w4_prep_avx2: each its kernels' order) */
    int64_t ldxp;            /* multiple of 128 >= ldxq */
    const int32_t *xg;       /* with xp: [n][ldxg] -8 * xq's sum per scale group */
    int64_t ldxg;            /* ldxp / 32 */
    const float *xgs;        /* FP8 as W8A8 (rq): [n][ldg] scale of x per DSR1_MM_XG
                                columns; non-NULL selects that order (xs unused) */
    const int32_t *xgc;      /* with xgs: [n][ldg] -128 x the sum of xq over each group
                                (where the lanes kernel's +128 weights start a dot) */
    int64_t ldg;             /* with xgs: groups per token, ceil(cols / DSR1_MM_XG) */
    const uint8_t *xt;       /* W8A8, tokens in lanes (else NULL): [ceil(n / 16)][ldxt]
                                xq + 128, 16 tokens' 4 bytes per 64 (dsr1_mm_xt_fill_avx512) */
    int64_t ldxt;            /* with xt: ldxq * 16 */
    const float *xst;        /* an rq job with xt: [ldg][ldxst] xgs transposed (zero past n) */
    int64_t ldxst;           /* with xst: n rounded up to 16 */
    const int32_t *wsum;     /* an rq job's requantised rows with xt: [row][ldg] the sum of
                                each block's codes */
    const char *pf;          /* an rq job's next rows (FP8, cols bytes each; else NULL),
                                brought into L2 while these compute */
    int pf_rows;
    float *y;                /* [n][ldy] output, rows columns written */
    int64_t ldy;
    void *task_mem;          /* this task's own scratch, task_bytes (64-aligned) */
    size_t task_bytes;
    int vbmi;                /* AVX-512 VBMI usable: FP8 decodes by byte tables
                                (dsr1_mm_vbmi_usable(), off for DSR1_MM_AVX512_NOVBMI) */
    int rq;                  /* FP8 weights run as INT8 (DSR1_ACT_INT8_FAST): each task
                                requantises rq_rows rows at a time into its
                                task_mem (codes, a scale per row and block) and runs
                                them with x per 128 columns (xgs) */
    const struct dsr1_mm_rq_tab *rqt; /* rq with the AVX-512 kernels: the tables, in scratch */
    int amx;                 /* W8A8 may run on AMX tiles (dsr1_pool_amx; not for
                                DSR1_MM_AVX512_NOAMX) */
    size_t amx_bytes;        /* the AMX kernels' share of task_bytes, at its end (0: none) */
    void *amx_mem;           /* a task's AMX share (run_task; NULL: the VNNI kernels run) */
    uint64_t *amx_runs;      /* the pool's count of tile runs (dsr1_pool_amx_runs),
                                added to with __atomic builtins (this header is C++'s too) */
    int rq_rows;             /* rows an rq task requantises at a time: DSR1_MM_RQ_ROWS,
                                DSR1_MM_AMX_STRIPES times that for the AMX kernel */
    int hwpf;                /* the INT8, INT4, BF16 row GEMVs without software prefetch
                                (DSR1_GEMV_HWPF of dsr1_pool_hwpf) */
    int i8t4;                /* the INT8 GEMV four rows side by side at any width
                                (DSR1_GEMV_I8T4) */
    int b16l;                /* BF16 weights in the fast mode, AVX-512: rows in lanes
                                (dsr1_mm_rows_bf16_lanes_avx512), not the canonical
                                order */
    int fp8amx;              /* FP8 weights, DSR1_MM_FP8_AMX_MIN_N to _MAX_N tokens,
                                the fast mode: the GEMV on AMX-BF16 tiles
                                (dsr1_mm_rows_fp8_amx) */
    const void *f8tab;       /* with fp8amx: the decode's byte tables, in scratch */
    const float *f8x;        /* with fp8amx: x in the tiles' order, float32 (dsr1_mm_fp8_amx_fill) */
    int b16gv;               /* BF16 weights, DSR1_MM_B16_AMX_MIN_N to 16 tokens, the fast
                                mode: the GEMV on AMX-BF16 tiles (dsr1_mm_rows_bf16_gv_amx) */
    const uint32_t *b16b;    /* with b16gv: bf16(x) as [cols / 2][n] pairs, in scratch */
} dsr1_mm_job;

/* Fewest tokens W8A8 and W4A8 take AMX from (a block of the tiles holds
 * 32 tokens; a call's last n mod 32, or all of a call under 32, run on
 * tiles of fewer rows); BF16 from DSR1_MM_B16L_MIN_N, its fast kernel's.
 * 16, not 32: R1's routed experts get 16 tokens each on average in a
 * 512-token prefill. `bench kernels --shape 2048x7168` on an Emerald
 * Rapids Xeon, 2 threads, builds with 32 and with 8 alternated, two
 * rounds, GFLOP/s VNNI -> tiles: INT8 at 16 tokens 586-602 -> 678-795, at
 * 24 565-581 -> 787-1058; FP8 as W8A8 at 16 361-384 -> 347-406, at 24
 * 365-489 -> 515-580; INT4 at 16 576-593 -> 654-845, at 24 670-671 ->
 * 1008-1064; at 12 even, at 8 the VNNI kernel won (INT8 497-615 against
 * 357-365). */
#define DSR1_MM_AMX_MIN_N 16
/* Stripes of 32 rows the AMX kernels run each block of x against while it
 * is in L1 (matmul_amx_avx512.c says why), and the task memory they use. */
#define DSR1_MM_AMX_STRIPES 4
size_t dsr1_mm_amx_task_bytes(void);
uint64_t *dsr1_pool_amx_counter(dsr1_pool *p); /* pool.c */

/* Tokens per block of the FP8 BF16-mode x' buffer: task_mem holds
 * [n][ldxb] bf16 for n <= DSR1_MM_FP8_GV (the GEMV), else
 * [min(n, DSR1_MM_FP8_TB)][DSR1_MM_FP8_LDP]
 * followed by the decoded 64-row panel (DSR1_MM_BIG_BYTES).
 * The row stride is off a multiple of 4 KiB: rows 4 KiB apart share L1
 * sets, and a 6-token tile plus a 4-row weight tile would then contend
 * for one set. 128 tokens: the panel decode is shared by 22 token tiles
 * (64 tokens measured 18% slower at n = 256); a task holds 1 MiB. */
#define DSR1_MM_FP8_TB 128
#define DSR1_MM_FP8_GV 8 /* FP8 in BF16 mode: most tokens of the GEMV */
#define DSR1_MM_FP8_LDP (DSR1_MM_KC_BF16 + 32)

/* Rows of the dequantised weight panel that BF16 mode uses for more than
 * 4 tokens (weights other than FP8): task_mem holds it, DSR1_MM_BIG_BYTES,
 * [DSR1_MM_BIG_PANEL][DSR1_MM_FP8_LDP] bf16 (266 KB, L2-resident). */
#define DSR1_MM_BIG_PANEL 64
#define DSR1_MM_BIG_BYTES ((size_t)DSR1_MM_BIG_PANEL * DSR1_MM_FP8_LDP * 2)

/* DSR1_MM_AVX512_NOVBMI: the AVX-512 kernels without their VBMI paths, as a
 * CPU with AVX-512 BF16 but no VBMI (Cooper Lake) runs them; for tests. */
typedef enum {
    DSR1_MM_AUTO = 0,
    DSR1_MM_PORTABLE = 1,
    DSR1_MM_AVX512 = 2,
    DSR1_MM_AVX512_NOVBMI = 3,
    DSR1_MM_AVX512_NOAMX = 4, /* the AVX-512 kernels without AMX tiles */
    DSR1_MM_AVX2 = 5          /* the AVX2 kernels (matmul_avx2.c), also on AVX-512 CPUs */
} dsr1_mm_kernel;

/* Rows requantised at a time (the W8A8 lanes kernel's chunk). */
#define DSR1_MM_RQ_ROWS 32
/* Columns per activation scale of FP8 as W8A8: DeepSeek's FP8 inference
 * quantises activations per 128 columns too (its act_quant). One scale per
 * token instead cost 5-10x the KL against float32 on the tiny models
 * (README, FP8 prefill as W8A8). */
#define DSR1_MM_XG 128

/* FP8 row r of w as INT8 with a scale per block of w->group columns
 * (DSR1_MM_XG, the FP8 block). With top_k the block's largest magnitude
 * code (e4m3 magnitudes order as their codes; the NaN codes count as
 * +-480, dsr1_mm_fp8_bf16) and m_k its value: s[k] = max(0, m_k x
 * |scale_k|) / 127 (float32), which is amax_k / 127 of the block's
 * products, and for each weight q = +-rint(|value| x (127 / m_k)), ties
 * to even, clamped to +-127, negated where the code's sign and the
 * scale's differ; the block all 0 when s[k] is not > 0. So q x s[k] is
 * the weight within half a step, and a block's codes depend on top_k
 * alone: the AVX-512 one looks them up in one of 128 tables made once
 * per call (dsr1_mm_rq_tab), not 128 conversions per block (an R1
 * expert's rows, Zen 4, one thread, alternated with the build before:
 * 14.3-14.6 GB/s against 3.6-4.5; the table fill 5.1 us). q holds
 * w->cols bytes, s ceil(cols / group) floats. The AVX-512 one gives the
 * same bytes and scales. */
void dsr1_mm_fp8_requant_row(const dsr1_wmat *w, int64_t r, int8_t *q, float *s);
/* The requantised codes: code[top][m] = rint(127 x value[m] / value[top])
 * clamped as above (code[0] all 0), value[m] the magnitude code m's value. */
typedef struct dsr1_mm_rq_tab {
    int8_t code[128][128];
    float value[128];
} dsr1_mm_rq_tab;
void dsr1_mm_fp8_rq_tab_fill(dsr1_mm_rq_tab *t);
void dsr1_mm_fp8_rq_tab_fill_avx512(dsr1_mm_rq_tab *t);
/* sum (may be NULL): sum[k] = the sum of block k's codes. */
void dsr1_mm_fp8_requant_row_avx512(const dsr1_wmat *w, int64_t r, int8_t *q, float *s, int32_t *sum,
                                    const dsr1_mm_rq_tab *t, int vbmi);

/* matmul_prep.c: the bytes of scratch the job's activations need (avx: the
 * AVX-512 kernels may run), their arrays placed in mem (0 when x needs no
 * preparation; also makes what is per call, the rq tables), then filled
 * on the pool's threads where there is enough of x. */
size_t dsr1_mm_prep_bytes(const dsr1_mm_job *j, int avx);
int dsr1_mm_prep(dsr1_mm_job *j, void *mem, int avx, int avx2);
void dsr1_mm_fill_all(dsr1_pool *p, const dsr1_mm_job *j, int avx, int avx2);

/* Compute output rows [r0, r1) of the job, all n tokens. */
void dsr1_mm_rows_portable(const dsr1_mm_job *j, int64_t r0, int64_t r1);
void dsr1_mm_rows_avx512(const dsr1_mm_job *j, int64_t r0, int64_t r1);
/* matmul_lanes_avx512.c, called by dsr1_mm_rows_avx512: W4A8, and W8A8
 * with one scale per row and columns a multiple of 64 with rows in lanes
 * (n >= 24 where the tokens-in-lanes x is not made: from 96 tokens, or
 * beside AMX) or tokens in lanes (16 to 95 tokens). */
void dsr1_mm_rows_w4a8_avx512(const dsr1_mm_job *j, int64_t r0, int64_t r1);
void dsr1_mm_rows_int8_lanes_avx512(const dsr1_mm_job *j, int64_t r0, int64_t r1);
void dsr1_mm_rows_bf16_lanes_avx512(const dsr1_mm_job *j, int64_t r0, int64_t r1);
/* W8A8 with one scale per row, tokens in lanes (j->xt set; columns a
 * multiple of 64), the same bits. */
void dsr1_mm_rows_int8_xl_avx512(const dsr1_mm_job *j, int64_t r0, int64_t r1);
/* xt for tokens [0, n) of xq (the first a multiple of 16 in the call's
 * tokens): xt[v * ldxt + s * 64 + 4 i + b] = xq[16 v + i][4 s + b] + 128,
 * zero for tokens past n. */
void dsr1_mm_xt_fill_avx512(const int8_t *xq, int64_t ldxq, int n, uint8_t *xt, int64_t ldxt);
/* dst[c][r] = src[r][c] for rows x cols floats (strides lds, ldd): 16x16
 * blocks through registers, whole lines loaded and stored. */
void dsr1_transpose_f32_avx512(const float *src, int64_t lds, int rows, int cols, float *dst,
                               int64_t ldd);
/* The same for 16-bit elements (bf16 bits). */
void dsr1_transpose_u16_avx512(const uint16_t *src, int64_t lds, int rows, int cols, uint16_t *dst,
                               int64_t ldd);
/* naive_avx512.c, the naive MLA form's products for n tokens (any n, pb,
 * qk, vd; rows at the strides given): s[t][p] = sum_d q[t][d] kt[d][p]
 * for p < pb, and out[t][d] = sum_p s[t][p] v[p][d] for d < vd. */
void dsr1_naive_scores_avx512(const float *q, int64_t ldq, int n, const float *kt, int64_t ldkt,
                              int qk, int pb, float *s, int64_t lds);
void dsr1_naive_values_avx512(const float *s, int64_t lds, int n, const float *v, int64_t ldv, int vd,
                              int pb, float *out, int64_t ldo);
/* naive_amx_avx512.c, the same products on AMX tiles in three bf16
 * products (hi.hi + hi.lo + lo.hi, about 2^-16 of each term from float32;
 * only where dsr1_pool_amx holds). A head's keys and values are stored
 * once (dsr1_naive_keys_amx, _vals_amx) in the memory dsr1_naive_tiles_bytes
 * gives for P positions (qk <= 512), then each tile of tokens takes its
 * scores against positions [0, pb) and its values over them. */
typedef struct dsr1_naive_tiles {
    int P, qkp, vdp;   /* positions; qk and vd rounded up to 32 */
    int64_t ldkb;      /* kb's row stride (32-bit pairs) */
    uint32_t *kb;      /* keys: [hi, lo][qkp / 2][ldkb] bf16 pairs */
    uint32_t *vb;      /* values: [hi, lo][P rounded up to 32, / 2][vdp] */
    uint16_t *a;       /* a 32-token block's rows, [hi | lo] each */
} dsr1_naive_tiles;
size_t dsr1_naive_tiles_bytes(int P, int qk, int vd);
void dsr1_naive_tiles_place(dsr1_naive_tiles *t, void *mem, int P, int qk, int vd);
/* key p = [kn[p][0, nope) | kr[p][0, rope)] (rows at ldn, ldr) */
void dsr1_naive_keys_amx(const dsr1_naive_tiles *t, const float *kn, int64_t ldn, int nope, const float *kr,
                         int64_t ldr, int rope);
void dsr1_naive_vals_amx(const dsr1_naive_tiles *t, const float *v, int64_t ldv, int vd);
void dsr1_naive_scores_amx(const dsr1_naive_tiles *t, const float *q, int64_t ldq, int n, int qk, int pb,
                           float *s, int64_t lds);
void dsr1_naive_values_amx(const dsr1_naive_tiles *t, const float *s, int64_t lds, int n, int pb, int vd,
                           float *out, int64_t ldo);
/* FP8 as W8A8's order with rows in lanes (j->xgs set, n >= 24, columns a
 * multiple of 64): since the tokens-in-lanes kernel below, only AMX's
 * leftover rows come here. */
void dsr1_mm_rows_int8g_lanes_avx512(const dsr1_mm_job *j, int64_t r0, int64_t r1);
/* The same order with tokens in lanes (an rq job's rows with j->xt, xst, wsum). */
void dsr1_mm_rows_int8g_xl_avx512(const dsr1_mm_job *j, int64_t r0, int64_t r1);
/* The W8A8 code panel of rows [r, r + pr) (pr <= 32 in rv halves of 16),
 * columns [c0, c0 + len) (len a multiple of 64): 4 columns of 16 rows per
 * 64 bytes, weights + 128; step s of half h at p + (s * rv + h) * 64. */
void dsr1_mm_i8l_panel(const dsr1_wmat *w, int64_t r, int pr, int rv, int64_t c0, int64_t len,
                       uint8_t *p);
/* The BF16 panel of the rows-in-lanes kernel, the same layout with a bf16
 * pair of one row where W8A8 has 4 bytes: columns [c0, c0 + len) (len a
 * multiple of 32), step s = columns c0 + 2s, 2s + 1. */
void dsr1_mm_b16l_panel(const dsr1_wmat *w, int64_t r, int pr, int rv, int64_t c0, int64_t len,
                        uint8_t *p);
/* matmul_amx_avx512.c: the same two W8A8 kernels on AMX tiles, the same
 * bits (j->amx set, n >= DSR1_MM_AMX_MIN_N, columns a multiple of 64). */
void dsr1_mm_rows_int8_amx(const dsr1_mm_job *j, int64_t r0, int64_t r1);
void dsr1_mm_rows_int8g_amx(const dsr1_mm_job *j, int64_t r0, int64_t r1);
/* BF16 weights in the fast mode (j->b16l, j->amx, n >= DSR1_MM_AMX_MIN_N):
 * the rows-in-lanes panel as the tiles' second operand, x's bf16 rows as
 * the first (tdpbf16ps). Not the lanes kernel's order (the tile unit sums
 * each pair its own way): results within float32 rounding of the exact
 * dot, the same for any n (from DSR1_MM_B16L_MIN_N) and thread count;
 * stripes under 32 rows go to the lanes kernel. */
void dsr1_mm_rows_bf16_amx(const dsr1_mm_job *j, int64_t r0, int64_t r1);
/* FP8 weights (scale blocks and columns multiples of 64) at
 * DSR1_MM_FP8_AMX_MIN_N to _MAX_N tokens in the fast mode (j->fp8amx):
 * the codes decoded by byte tables (VBMI) into tiles, x' = bf16(x * block scale) of each row block
 * as the other operand (tdpbf16ps). Not the canonical order: within
 * float32 rounding of the exact dot of the bf16 operands, the same bits
 * for a token whatever n and the thread count (matmul_fp8amx_avx512.c).
 * The call's scratch (prep_bytes) holds the tables (dsr1_mm_fp8_amx_prep)
 * and x in the tiles' order (dsr1_mm_fp8_amx_fill, fill_rows), a task's
 * (task_bytes) its row block's x'. */
void dsr1_mm_rows_fp8_amx(const dsr1_mm_job *j, int64_t r0, int64_t r1);
/* BF16 weights (columns a multiple of 32) at DSR1_MM_B16_AMX_MIN_N to 16
 * tokens in the fast mode (j->b16gv): the weight rows loaded as tiles as
 * they are, j->b16b the other operand. Within float32 rounding of the
 * exact dot, the same bits for a token whatever n and the thread count
 * (matmul_bf16amx_avx512.c). */
void dsr1_mm_rows_bf16_gv_amx(const dsr1_mm_job *j, int64_t r0, int64_t r1);
void dsr1_mm_bf16_gv_fill(const dsr1_mm_job *j, int64_t k0, int64_t k1);
size_t dsr1_mm_fp8_amx_prep_bytes(int n, int64_t cols);
const float *dsr1_mm_fp8_amx_prep(void *mem);
void dsr1_mm_fp8_amx_fill(const dsr1_mm_job *j, int64_t s0, int64_t s1);
size_t dsr1_mm_fp8_amx_task_bytes(int n, int64_t cols);
/* x' of FP8 in BF16 mode (matmul_avx512.c): xp[b][k] = bf16(x[t0 + b][c0 + k]
 * * the block scale of row r at column c0 + k), k < len, zero up to the next
 * multiple of 32; len <= DSR1_MM_KC_BF16, xp 64-byte aligned, ldp a
 * multiple of 32. */
void dsr1_mm_fp8_prep_x(const dsr1_mm_job *j, int64_t r, int t0, int nb, int64_t c0, int64_t len,
                        uint16_t *xp, int64_t ldp);
/* W4A8 with groups of 128 (j->xp, j->amx_mem set), from DSR1_MM_AMX_MIN_N
 * tokens: the W4A8 code panel (dsr1_mm_w4_panel: codes 0..15, scales as
 * floats [group][32 rows]) as the tiles' unsigned operand, xp as the
 * signed one; the rest to dsr1_mm_rows_w4a8_lanes_avx512 (matmul_lanes_avx512.c,
 * the panel kernel for any n). */
void dsr1_mm_rows_w4a8_amx(const dsr1_mm_job *j, int64_t r0, int64_t r1);
void dsr1_mm_rows_w4a8_lanes_avx512(const dsr1_mm_job *j, int64_t r0, int64_t r1);
void dsr1_mm_w4_panel(const dsr1_wmat *w, int64_t r, int pr, int rv, int64_t c0, int64_t len, uint8_t *p,
                      float *sc);

/* dsr1_matmul with the kernel chosen by the caller (tests compare them).
 * DSR1_MM_AVX512 on a CPU without it falls back to AUTO. */
void dsr1_matmul_with(dsr1_pool *p, const dsr1_wmat *w, const float *x, int64_t ldx,
                      float *y, int64_t ldy, int n, dsr1_act act, dsr1_mm_kernel k);

/* xb[t][c] = dsr1_mm_to_bf16(x[t][c]) for c < cols, zero up to ldxb (a
 * multiple of 32): prep of the BF16 mode's activations, same bits. This
 * and the two W8A8 preparations below: prep_avx512.c. */
void dsr1_mm_bf16_rows_avx512(const float *x, int64_t ldx, int n, int64_t cols, uint16_t *xb,
                              int64_t ldxb);

/* W8A8 activations as matmul.c's prep_int8 makes them (same bytes,
 * scales and sums); ldxq a multiple of 16 >= cols, zero padded. */
void dsr1_mm_int8_rows_avx512(const float *x, int64_t ldx, int n, int64_t cols, int8_t *xq,
                              int64_t ldxq, float *xs, int32_t *xsum);

/* The same per group of DSR1_MM_XG columns: xs[t * ldg + g], xsum[t * ldg
 * + g] for g < ceil(cols / DSR1_MM_XG); matmul.c's prep_int8_groups'
 * bytes, scales and sums. */
void dsr1_mm_int8_groups_avx512(const float *x, int64_t ldx, int n, int64_t cols, int8_t *xq,
                                int64_t ldxq, float *xs, int32_t *xsum, int64_t ldg);
/* W4A8's x as the AVX-512 kernel reads it (group 32 or 128): xp = xq
 * with each 8 columns reordered 0,2,4,6,1,3,5,7, zero padded to ldxp;
 * xg[t][g] = -8 * sum of xq[t] over group g, ldxp / group of them. */
void dsr1_mm_w4_prep_avx512(const int8_t *xq, int64_t ldxq, int n, int64_t group, int8_t *xp,
                            int64_t ldxp, int32_t *xg, int64_t ldxg);

/* Row r, columns [c0, c0+len) of w as the BF16 mode's bf16 weights (FP8:
 * bf16(e4m3 * block scale)) into out (64-byte aligned, zero padded to a
 * multiple of 32): the oneDNN path's dequantisation. */
void dsr1_mm_deq_bf16_avx512(const dsr1_wmat *w, int64_t r, int64_t c0, int64_t len, uint16_t *out);

/* dsr1_silu_mul in scalar code (libm's expf), with AVX-512 and with AVX2
 * (silu_avx512.c, silu_avx2.c: the same bits; they fall back to the
 * scalar loop for arguments off glibc's main expf path). */
void dsr1_silu_mul_ref(float *g, const float *u, int64_t n);
void dsr1_silu_mul_avx512(float *g, const float *u, int64_t n);
void dsr1_silu_mul_avx2(float *g, const float *u, int64_t n);

/* Whether this CPU runs the AVX-512 kernels (F, BW, VL, DQ, BF16, VNNI and
 * the OS saving zmm state). Executes cpuid: cache the answer. */
int dsr1_mm_avx512_usable(void);
/* Whether this CPU also has AVX-512 VBMI (vpermb, vpermi2b): the FP8 byte
 * table decode. Not implied by the above (Cooper Lake lacks it). */
int dsr1_mm_vbmi_usable(void);
/* Whether this CPU runs the AMX kernels: AMX-TILE and AMX-INT8, the OS
 * saving tile state, and Linux's permission (asked for: a system call). */
int dsr1_mm_amx_usable(void);
/* Ask Linux for the tile data state; 1 when granted or already held. */
int dsr1_mm_amx_permit(void);
/* The kernel set dsr1_matmul runs here, as the start-up line names it:
 * "avx512-bf16-vnni-vbmi", "avx512-bf16-vnni" or "portable", with "-amx"
 * where W8A8 runs on AMX tiles. */
const char *dsr1_mm_kernels_name(void);

/* Read `bytes` once with 64-byte loads, software prefetch `prefetch` bytes
 * ahead (0: none); returns a value depending on every byte
 * (membw_avx512.c; AVX-512 CPUs only). */
uint64_t dsr1_membw_read_avx512(const void *buf, size_t bytes, int prefetch);
/* The same bytes read as rows of `row` bytes (a multiple of 256), eight
 * rows side by side 256 bytes at a time, a GEMV's pattern; what follows
 * the last whole group of eight rows is read straight through. For a
 * multiple of 256 bytes it returns what dsr1_membw_read_avx512 does: the
 * XOR of every 64-bit word. */
uint64_t dsr1_membw_read_rows_avx512(const void *buf, size_t bytes, size_t row, int prefetch);

/* `iters` rounds of 24 independent dot-product instructions of the mode
 * on registers (dsr1_matmul_peak_gflops; prep_avx512.c); returns the
 * multiply-adds done. */
uint64_t dsr1_mm_peak_avx512(dsr1_act act, int64_t iters);

/* Dequantise w[r][c0 .. c0+len) to float32 (the F32-mode weights). */
void dsr1_wmat_dequant_span(const dsr1_wmat *w, int64_t r, int64_t c0, int64_t len,
                            float *out);
/* The scale of weight (r, c); 1 for unscaled types. */
float dsr1_wmat_scale(const dsr1_wmat *w, int64_t r, int64_t c);

/* Pool-owned scratch of at least `bytes` (64-byte aligned), valid until the
 * next call on this pool; NULL on allocation failure. p must not be NULL. */
void *dsr1_pool_scratch(dsr1_pool *p, size_t bytes);
/* Whether the pool found the AVX-512 kernels usable when created. */
int dsr1_pool_avx512(const dsr1_pool *p);

/* matmul_avx2.c: the kernels for CPUs with AVX2, FMA and F16C but not
 * the AVX-512 set above (the same bits as the portable ones), and their
 * activations: W8A8 codes (matmul.c's prep_int8 bytes, scales and sums),
 * W4A8's x reordered (each 32 columns' even ones, then its odd ones) with
 * xg[t][g] = -8 x the sum of xq[t] over group g, and FP8's requantised
 * rows from the per-call table (dsr1_mm_fp8_requant_row's bytes). */
int dsr1_mm_avx2_usable(void);
/* Where the fast mode's FP8 W8A8 starts on this machine (p: its pool, or
 * NULL): DSR1_MM_RQ_MIN_N_AVX2 on an AVX2 CPU without AVX-512 kernels,
 * else DSR1_MM_RQ_MIN_N (kernels.h). Per machine, not per kernel set, so
 * the portable and AVX2 kernels of one machine agree on every call. */
int dsr1_mm_rq_min_n(const dsr1_pool *p);
void dsr1_mm_rows_avx2(const dsr1_mm_job *j, int64_t r0, int64_t r1);
void dsr1_mm_int8_rows_avx2(const float *x, int64_t ldx, int n, int64_t cols, int8_t *xq, int64_t ldxq,
                            float *xs, int32_t *xsum);
void dsr1_mm_int8_groups_avx2(const float *x, int64_t ldx, int n, int64_t cols, int8_t *xq,
                              int64_t ldxq, float *xs, int32_t *xsum, int64_t ldg);
void dsr1_mm_w4_prep_avx2(const int8_t *xq, int64_t ldxq, int n, int64_t cols, int64_t group,
                          int8_t *xp, int64_t ldxp, int32_t *xg, int64_t ldxg);
void dsr1_mm_fp8_requant_row_avx2(const dsr1_wmat *w, int64_t r, int8_t *q, float *s,
                                  const dsr1_mm_rq_tab *t);

/* Whether the one-token BF16 GEMV (matmul_avx512.c, bf16_gemv) asks for
 * its weight lines ahead itself: when the decoder chose so (hwpf 0), and
 * always for rows shorter than a 4 KiB page, which the hardware
 * prefetcher follows badly when several are read side by side (q_b, MLA's
 * per-head matrices; the figures are at bf16_gemv). Speed only: the same
 * bits either way. */
#define DSR1_MM_BF16_GEMV_SHORT 4096
static inline int dsr1_mm_bf16_gemv_swpf(int64_t cols, int hwpf)
{
    return !hwpf || cols * 2 < DSR1_MM_BF16_GEMV_SHORT;
}

/* ---- scalar pieces both kernels agree on ---------------------------------- */

static inline float dsr1_mm_hsum16(const float *v)
{
    float a[16];
    memcpy(a, v, sizeof a);
    for (int h = 8; h >= 1; h /= 2)
        for (int i = 0; i < h; i++) a[i] = a[i] + a[i + h];
    return a[0];
}

/* float32 -> bf16 as vcvtne2ps2bf16 does it: denormals become signed zero,
 * then round to nearest even. */
static inline uint16_t dsr1_mm_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7f800000u) == 0) u &= 0x80000000u;
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* e4m3 byte -> bf16 bits of its exact value. Magnitudes 8..127 are the
 * byte shifted into bf16's exponent and mantissa plus the exponent bias
 * difference (127 - 7) << 7; the subnormals 1..7 (m * 2^-9) are bf16
 * normals, from a table. The NaN codes 0x7f/0xff come out as +-480
 * instead of NaN (trained checkpoints do not store NaN weights). */
static inline uint16_t dsr1_mm_fp8_bf16(uint8_t b)
{
    static const uint16_t sub[8] = {0x0000, 0x3b00, 0x3b80, 0x3bc0, 0x3c00, 0x3c20, 0x3c40, 0x3c60};
    unsigned m = b & 0x7fu;
    unsigned v = m < 8 ? sub[m] : (m << 4) + 0x3c00u;
    return (uint16_t)(v | (b & 0x80u) << 8);
}

#endif
