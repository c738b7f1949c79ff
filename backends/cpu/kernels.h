/*
 * kernels.h - the CPU compute kernels the CPU backend is built from: a
 * thread pool, and matrix multiplication on every packed weight type with
 * the dequantisation fused in.
 *
 * Shapes: a weight matrix W is [rows = out, cols = in], row-major, in one of
 * the .dsr1 packed types (core/dsr1file.h). matmul computes
 *     y[t][r] = sum_c x[t][c] * W[r][c]      for t < n tokens, r < rows
 * with x and y float32 (row strides ldx, ldy in elements).
 *
 * Determinism (the engine's tests rely on it): every y[t][r] is computed by
 * one thread with one fixed summation order that depends only on cols and
 * the weight type, never on n, on t, or on the thread count. So a token's
 * output is bit-identical alone or in a batch, with 1 or 16 threads.
 *
 * Activation modes: DSR1_ACT_F32 multiplies in float32 (the exact path);
 * DSR1_ACT_BF16 rounds x to bf16 and uses bf16 dot products; DSR1_ACT_INT8
 * quantises each token's x dynamically (per token scale = amax/127) and uses
 * int8 dot products against INT8 weights (W8A8) and against the 4-bit codes
 * of INT4 weights (W4A8: exact integer dots per scale group, then the group
 * scale in float32); for other weight types it behaves like BF16. The fast
 * modes stay deterministic in the same sense.
 * In BF16 mode the weights too are rounded to bf16 after dequantisation
 * (value * scale, rounded to nearest even): a relative error of at most
 * 2^-9 per weight, like x's. FP8 is the exception: its e4m3 values are
 * bf16 numbers already, so they stay exact and the 128x128 block scale is
 * applied to x instead (bf16(x * scale), the same 2^-9) - the decode
 * kernels then spend a table lookup per weight, not a multiply. Every mode gives the same bits on every
 * AVX-512 machine and in the portable kernels (backends/cpu/matmul_impl.h
 * spells out the summation order; the tests compare them bit for bit).
 * dsr1_matmul never calls oneDNN: its GEMM is not deterministic across n.
 * The fast mode's prefill path (dsr1_dnnl_matmul below, matmul_dnnl.c) is a
 * separate call the backend makes only when not in deterministic mode.
 */
#ifndef DSR1_CPU_KERNELS_H
#define DSR1_CPU_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "../../core/error.h"
#include "../backend.h" /* dsr1_wmat, dsr1_act: the seam's weight description */

/* ---- thread pool ------------------------------------------------------- */

typedef struct dsr1_pool dsr1_pool;

/* nthreads <= 0: one per available core. Threads are pinned to cores
 * (and NUMA nodes) when the affinity call is allowed. */
int dsr1_pool_create(dsr1_pool **out, int nthreads, dsr1_error *err);
/* The same on a given CPU list (a NUMA node's): worker i is pinned to
 * cpus[i] when nthreads <= ncpus, the caller is expected on cpus[0]. */
int dsr1_pool_create_on(dsr1_pool **out, int nthreads, const int *cpus, int ncpus,
                        dsr1_error *err);
void dsr1_pool_free(dsr1_pool *p); /* NULL is a no-op */
int dsr1_pool_size(const dsr1_pool *p);
/* Call fn(ctx, task, ntasks) for task = 0..ntasks-1 spread over the pool's
 * threads (the caller's thread takes part); returns when all are done.
 * p may be NULL: then everything runs on the caller's thread. */
void dsr1_pool_run(dsr1_pool *p, void (*fn)(void *ctx, int task, int ntasks),
                   void *ctx, int ntasks);
/* Make sure the pool's scratch (where dsr1_matmul puts the bf16 or int8
 * copy of x: about n * cols * 2 bytes) holds `bytes`, so later calls do not
 * allocate. Optional; NULL pool is a no-op. DSR1_ENOMEM on failure. */
int dsr1_pool_reserve(dsr1_pool *p, size_t bytes, dsr1_error *err);
/* Write one byte of every 4 KiB page of mem, so its page faults happen
 * now (a workspace's creation) rather than in its first request: in a VM
 * a fault can cost tens of microseconds, and a fresh R1 workspace's
 * first 512-token prefill touched ~200 MB (PERFORMANCE.md). The
 * reserve above touches what it reserves. */
void dsr1_touch(void *mem, size_t bytes);

/* ---- matmul -------------------------------------------------------------- */

/* The fast mode's DSR1_ACT_INT8 (backend-internal: never crosses the
 * seam; the CPU backend turns the seam's INT8 into it unless told
 * --fp8-prefill bf16): the same, and FP8 weights with DSR1_MM_RQ_MIN_N
 * tokens or more are requantised on the fly to INT8 with a scale per row
 * and 128-column block (dsr1_mm_fp8_requant_row, matmul_impl.h) and run
 * W8A8 with x quantised per token and 128 columns: DeepSeek's own FP8
 * granularity, in int8 instead of e4m3. Also BF16 weights with
 * DSR1_MM_B16L_MIN_N tokens or more run on AVX-512 with rows in lanes,
 * each row's dot in column order instead of the canonical chunks
 * (dsr1_mm_rows_bf16_lanes_avx512). A token's result then depends on
 * how many tokens share the call, which only the fast mode allows. */
#define DSR1_ACT_INT8_FAST ((dsr1_act)3)
/* From here BF16 weights leave the canonical order in the fast mode;
 * fewer go through the register GEMV (matmul_avx512.c's FUSED_BF_N). */
#define DSR1_MM_B16L_MIN_N 25
/* Below this the requantisation is not paid back. From 9: below, up to 8
 * tokens, the bf16 GEMV (fp8_gemv: every weight read once per 4 tokens,
 * no requantisation) is faster; from 9 tokens the bf16 path goes through
 * decoded panels and W8A8 in tokens-in-lanes vectors (half empty at 9)
 * wins. One process alternating the builds, 2048x7168 from 1 GB of
 * copies, Zen 4, 2 threads, 6 rounds, bf16 -> W8A8 GFLOP/s: 8 tokens 294
 * -> 222 (so not there), 9 168-175 -> 216-242, 10 168-198 -> 223-280, 12
 * 215 -> 322; 7168x2048: 9 189-196 -> 247-251, 12 231-237 -> 299-320.
 * In R1's regime (256 experts, 512-token chunks: ~16 tokens an expert,
 * so about half the active experts get fewer) that is half the experts'
 * matmuls. From 16 (before: 24) since the
 * tokens-in-lanes W8A8 kernel (dsr1_mm_rows_int8g_xl_avx512: no code panel
 * per call, the next rows' FP8 bytes prefetched while these compute): one
 * process alternating the builds, 2048x7168 from 1 GB of copies, Zen 4, 2
 * threads, 6 rounds each: 16 tokens 244-248 (the bf16 kernel) -> 355-365
 * GFLOP/s, 32 369-413 -> 393-498, 64 483-533 -> 511-584 (both W8A8); the
 * R1-shape FP8 file's 64-token prefill (~16 tokens an expert, what R1's
 * 256 experts see of a 512-token chunk) 101-108 -> 109-121 tok/s, 10 of
 * 10 rounds. Before it (the rows-in-lanes grouped kernel) W8A8 paid from
 * 24: `dsr1 bench kernels --type fp8 --n 24,32,40,48`, the expert shapes,
 * W8A8 took 0.77-0.89x bf16's time at 24 tokens, 0.72-0.80x at 32,
 * 0.67-0.77x at 40, 0.65-0.71x at 48; at 16 and 20 it was as often slower
 * as faster. W8A8's distance from float32 is per token, whatever the
 * count (dsr1 eval on tiny-r1: README, FP8 prefill as W8A8). */
#define DSR1_MM_RQ_MIN_N 9
/* Fewest tokens of the fast mode's FP8 GEMV on AMX-BF16 tiles
 * (matmul_fp8amx_avx512.c; its most below): one, so a decode step takes
 * them too. In the model (R1-shape FP8 file, `bench --prompt 1 --gen 64`,
 * 2 threads, Emerald Rapids, every one-token FP8 matmul alternated call
 * by call between the canonical GEMV and the tiles in one process, each
 * shape's time weighted by its calls) the tiles took 0.929, 0.954, 0.959,
 * 0.987 and 0.920 of the canonical GEMVs' time in five runs (large shapes
 * 0.80-1.01; MLA's per-head 128x512 1.06-1.07). Their first version (x'
 * made from x's rows per row block) had taken 1.057 and 1.072. From two
 * tokens the canonical GEMV's work grows with n far faster than the
 * tiles' (/tmp harness, 1 GB of 2048x7168 and 7168x2048 matrices, 2
 * threads, medians: 2 tokens 18.1 -> 21.1 GB/s, 8 tokens 4.8 -> 14.6).
 * One token on the tiles also gives a speculative verify batch the same
 * bits as a plain step: a token's result does not depend on n there. */
#define DSR1_MM_FP8_AMX_MIN_N 1
/* ... and its most: from DSR1_MM_RQ_MIN_N to here it runs where W8A8 would
 * (one decode of the codes serves every token; x' is remade per 128-row
 * block from x laid out once a call in the tiles' order; past 16 tokens
 * a second C tile takes the rest). In one process, 1 GB of 2048x7168 and
 * 7168x2048 FP8 matrices, 2 threads, Emerald Rapids, medians of 7 passes,
 * x' made from x's rows per block (the first version) / from the layout /
 * W8A8: 8 tokens 14.8 / 17.6 / 5.7 GB/s, 12 9.0 / 14.3 / 8.3, 16 8.1 /
 * 14.1 / 7.7; tiles / W8A8: 17 13.6 / 9.0, 20 10.0-10.9 / 7.2, 24 8.6-9.0
 * / 6.9, 28 6.1-6.4 / 6.0, 32 8.3 / 7.6. In the model (R1-shape FP8 file,
 * prefills of 96 to 256 tokens, every FP8 call of 17 to 32 tokens
 * alternated between the two in one process) the tiles took 0.948, 0.856
 * and 0.850 of W8A8's time in three runs. From 33 W8A8 runs (on the
 * tiles too). */
#define DSR1_MM_FP8_AMX_MAX_N 32
/* The same for BF16 weights (matmul_bf16amx_avx512.c, up to 16 tokens: one
 * tile's worth; from DSR1_MM_B16L_MIN_N the fast BF16 prefill kernels).
 * One token stays on the canonical GEMV, which reads at the memory's rate
 * already (`bench kernels --type bf16`, 18432x7168, 2 threads, Emerald
 * Rapids: 95% of `membw`); in the model (R1-shape BF16 file, `bench
 * --prompt 1 --gen 48`, every one-token BF16 matmul alternated call by
 * call between the two in one process) the tiles took 1.028, 1.003 and
 * 1.014 of its time in three runs. */
#define DSR1_MM_B16_AMX_MIN_N 2
/* On a CPU with AVX2 and no AVX-512 the float FP8 kernel is slower for its
 * width and the table requantisation cheaper for its vpshufb tree
 * (matmul_avx2.c), so W8A8 pays from fewer tokens: `dsr1 bench kernels
 * --type fp8 --n 8,12,16,20 --threads 2` on 2048x7168 and 7168x2048, AMD
 * Zen 3, two runs, W8A8 against the float kernel's time: 1.11-1.23x at 8
 * tokens, 0.86-0.97x at 12, 0.73-0.90x at 16, 0.64-0.84x at 20. */
#define DSR1_MM_RQ_MIN_N_AVX2 12

/* y = x W^T as described above, using the fastest kernel for this CPU. */
void dsr1_matmul(dsr1_pool *p, const dsr1_wmat *w, const float *x, int64_t ldx,
                 float *y, int64_t ldy, int n, dsr1_act act);

/* Independent matmuls in one pool run: y = x W^T, or with `up`
 * dsr1_ffn_gate_up's h = silu(x W^T) * (x Up^T). Each item's results are
 * the bits it gets alone (the same kernels for its token count, rows in
 * tasks of the same rows). Used by a decode step's MoE (cpu_moe.c), whose
 * 9 experts took two runs each; measured, the gain is small (0-2% a step:
 * cpu_moe.c). No item's output may overlap another item's input or
 * output, or its own input. A run holds at most 32 items and 16 MB of
 * their scratch (one item needing more runs alone); longer lists take
 * several runs, in order. */
typedef struct dsr1_mm_item {
    const dsr1_wmat *w, *up; /* up: NULL, or the gate/up pair's up matrix */
    const float *x;
    int64_t ldx;
    float *y;
    int64_t ldy;
    int n;
} dsr1_mm_item;
void dsr1_matmul_batch(dsr1_pool *p, const dsr1_mm_item *items, int count, dsr1_act act);

/* g[i] = silu(g[i]) * u[i] = g[i] / (1 + expf(-g[i])) * u[i] for i < n,
 * in float32: SwiGLU's step wherever the backend takes it. With AVX-512
 * 16 values at a time, the same bits (silu_avx512.c). */
void dsr1_silu_mul(float *g, const float *u, int64_t n);

/* The expert FFN's first half in one call: h = silu(x Wg^T) * (x Wu^T),
 * silu(g) = g / (1 + expf(-g)) in float32, h[t][r] at h + t * ldh + r.
 * gate and up must have the same shape and type. Bit-identical to two
 * dsr1_matmul calls and that formula, but one pool run, one preparation
 * of x, and no [n, rows] temporary for the caller. */
void dsr1_ffn_gate_up(dsr1_pool *p, const dsr1_wmat *gate, const dsr1_wmat *up, const float *x,
                      int64_t ldx, float *h, int64_t ldh, int n, dsr1_act act);

/* The compute peak behind a mode's kernels, in GFLOP/s (2 per multiply-
 * add) on all of the pool's threads: a register-only loop of the mode's dot
 * product instruction (vfmadd231ps, vdpbf16ps, vpdpbusd), timed for about
 * 30 ms, best of 3. What `dsr1 bench kernels` reports GFLOP/s against.
 * 0 where the portable kernels run. */
double dsr1_matmul_peak_gflops(dsr1_pool *p, dsr1_act act);
/* Whether the pool runs W8A8 (INT8 weights, FP8 as W8A8) on AMX tiles:
 * found usable at creation (cpuid, the OS's tile state, Linux's
 * permission). dsr1_matmul_noamx is dsr1_matmul without them (the VNNI
 * kernels, the same bits): what `dsr1 bench kernels` compares with. */
int dsr1_pool_amx(const dsr1_pool *p);
/* How many times the AMX kernels ran their tiles in this pool (tests check
 * that the tile path ran, not only the VNNI kernels it leaves work to). */
uint64_t dsr1_pool_amx_runs(dsr1_pool *p);
/* How matmuls run on p read their weights in the one-token GEMVs, a mask
 * of DSR1_GEMV_*: speed only, never a value (backends/cpu/pftune.h
 * chooses while decoding; 0 is the default). */
#define DSR1_GEMV_HWPF 1 /* the INT8, INT4 and BF16 row GEMVs leave the stream to the
                            hardware prefetcher instead of asking for lines ahead */
#define DSR1_GEMV_I8T4 2 /* the INT8 GEMV reads four rows side by side at any width */
void dsr1_pool_set_hwpf(dsr1_pool *p, int variant);
int dsr1_pool_hwpf(const dsr1_pool *p);
/* During a decode trial step (pftune.h) the one-token matmuls run on p
 * take their variant from t call by call and report their time to it;
 * NULL (the default) runs dsr1_pool_hwpf's. Only the pool's caller
 * touches t: a pool runs one run at a time. */
struct dsr1_pftune;
void dsr1_pool_set_tune(dsr1_pool *p, struct dsr1_pftune *t);
struct dsr1_pftune *dsr1_pool_tune(const dsr1_pool *p);
void dsr1_matmul_noamx(dsr1_pool *p, const dsr1_wmat *w, const float *x, int64_t ldx, float *y,
                       int64_t ldy, int n, dsr1_act act);

/* Plain scalar reference (single thread, dequantise row then dot product in
 * double): what every fast kernel is tested against. */
void dsr1_matmul_ref(const dsr1_wmat *w, const float *x, int64_t ldx, float *y,
                     int64_t ldy, int n);

/* ---- oneDNN prefill GEMM (matmul_dnnl.c) ----------------------------------- */

/* Output rows per panel: each pool thread dequantises one panel of this
 * many weight rows to bf16 at a time and runs one oneDNN matmul on it. */
#define DSR1_DNNL_PANEL 256

typedef struct dsr1_dnnl dsr1_dnnl;

/* Whether oneDNN dispatches bf16 kernels of its own here (AVX-512 BF16 or
 * AMX): the fast path is pointless without them. Whether it has AMX. */
int dsr1_dnnl_usable(void);
int dsr1_dnnl_has_amx(void);
/* A context: oneDNN engine, per-shape primitive cache, per-thread streams
 * and buffers. DSR1_EUNSUPPORTED when oneDNN cannot make a CPU engine. */
int dsr1_dnnl_create(dsr1_dnnl **out, dsr1_error *err);
void dsr1_dnnl_free(dsr1_dnnl *d); /* NULL is a no-op */
/* y = x W^T (shapes as dsr1_matmul) with x and W rounded to bf16 and
 * float32 accumulation in oneDNN, on the pool's threads. Not batch
 * invariant. Returns 0, or -1 when oneDNN has no fast kernel for the
 * shape or ran out of memory: then y is unspecified and the caller runs
 * dsr1_matmul instead. Not thread-safe: one context per workspace. */
int dsr1_dnnl_matmul(dsr1_dnnl *d, dsr1_pool *p, const dsr1_wmat *w, const float *x,
                     int64_t ldx, float *y, int64_t ldy, int n);
/* oneDNN's name for the kernel it chose last ("brg:avx512_core_bf16"). */
const char *dsr1_dnnl_impl(const dsr1_dnnl *d);

#endif
