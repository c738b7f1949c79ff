/*
 * cuda_kernels.h - the device kernels of the CUDA/HIP backend as host
 * launch functions on device pointers: what cuda_backend.cu (the seam's ops
 * table) is built from. Private to backends/cuda (C++ compiled by nvcc or
 * hipcc); core/ never sees it.
 *
 * Everything here is asynchronous on the given stream and allocates
 * nothing: scratch comes from the caller (sizes are stated per function),
 * so a decode step can be captured as a graph. Counts that change per step
 * (tokens per expert, positions) are read from device memory by the
 * kernels, never baked into launch sizes beyond the bucket's maximum.
 *
 * Determinism (the seam's contract, kept on the GPU): every output element
 * is produced by one fixed reduction tree that depends only on the shape
 * (and, for attention, the token's absolute position), never on how many
 * tokens are in the call or which kernel variant ran; no atomics take part
 * in any sum. The canonical orders are spelled out in each .cu file.
 *
 * Types mirror the .dsr1 enums by value (static_asserts in cuda_backend.cu
 * keep them in step) so this header needs none of core/'s headers.
 */
#ifndef DSR1_CUDA_KERNELS_H
#define DSR1_CUDA_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "cuda_compat.h"

/* .dsr1 weight types (dsr1_type) and KV types (dsr1_kv_type), by value. */
enum { CU_T_F32 = 0, CU_T_F16 = 1, CU_T_BF16 = 2, CU_T_FP8 = 3, CU_T_INT8 = 4, CU_T_INT4 = 5 };
enum { CU_KV_BF16 = 0, CU_KV_FP8 = 1, CU_KV_F32 = 2 };
/* Activation modes (dsr1_act): F32 exact, BF16 rounding points, W8A8 (INT4
 * weights take BF16 in INT8 mode here; the CPU's W4A8 is not ported). */
enum { CU_ACT_F32 = 0, CU_ACT_BF16 = 1, CU_ACT_INT8 = 2 };

/* A weight matrix (or a stack of `count` equal matrices) in device memory,
 * in its packed .dsr1 layout (convert/quant.h): row-major [rows][cols];
 * INT4 two per byte (element 2k low nibble), FP8 e4m3 (fnuz on HIP) with
 * F32 block scales [ceil(rows/g)][ceil(cols/g)], INT8 F32 scales per row
 * (group 0) or [rows][cols/group], INT4 F16/BF16 scales [rows][cols/group].
 * Matrix e of a stack starts at data + e * mat_bytes (scale + e * scale_bytes). */
typedef struct cu_wmat {
    int type;
    int64_t rows, cols;
    const void *data;
    const void *scale;
    int scale_type;          /* CU_T_F32, CU_T_F16 or CU_T_BF16 */
    int group;
    int count;               /* matrices in the stack (1 for 2-D) */
    size_t mat_bytes, scale_bytes;
} cu_wmat;

/* What a scale stored next to FP8 bytes is multiplied by on the device (2
 * on HIP: e4m3fn bytes read as e4m3fnuz are worth half, so the conversion
 * at upload is exact: bytes kept, 0x80 -> 0x00, scales doubled). */
#define CU_FP8_SCALE_MUL (DSR1_FP8_FNUZ ? 2.0f : 1.0f)

/* ---- matmul (cuda_matmul.cu) -------------------------------------------------- */

/* Where the rows of one matmul come from and go to. Group z (expert or
 * head) multiplies matrix wsel[z] (z when wsel is NULL) of the stack.
 *   tokens of group z:  i in [first[m], first[m+1])  (first NULL: [0, n)),
 *                       m = the group's matrix (a bucket per expert)
 *   input row:   x + z * x_gstride + (xrow ? xrow[i] : i) * ldx
 *   output row:  y + z * y_gstride + (yrow ? yrow[i] : i) * ldy
 * first, xrow, yrow, wsel are device arrays (read at run time: a graph
 * replays with new routing). groups: the launch's upper bound; groups
 * beyond *ngroups (device, NULL = all) exit at once. */
typedef struct cu_mm_rows {
    int groups;
    const int32_t *ngroups;
    const int32_t *first;
    const int32_t *wsel;
    const int32_t *xrow, *yrow;
    int64_t x_gstride, y_gstride;
    int x_rows;              /* INT8 mode: source rows of x to quantise (0 = n) */
} cu_mm_rows;

/* y = x W^T for n tokens (max_n: the launch bound when counts come from
 * device memory), act as in backends/cpu/kernels.h. With `up` non-NULL:
 * y = silu(x W^T) * (x Up^T) (gate and up in one pass over x).
 * xq_scratch: INT8 mode only, cu_mm_int8_scratch_bytes(max tokens, cols).
 * Returns 0, or -1 when the shape is not supported (message in msg). */
int cu_matmul(dsr1_gpuStream s, const cu_wmat *w, const cu_wmat *up, const float *x, int64_t ldx,
              float *y, int64_t ldy, int n, int act, const cu_mm_rows *rows, void *xq_scratch,
              char *msg, size_t msgsz);
size_t cu_mm_int8_scratch_bytes(int tokens, int64_t cols);
/* The mode a weight type really runs in (INT8 only for INT8 weights of at
 * most 65536 columns, else BF16), as the CPU's effective_act. */
int cu_mm_effective_act(int act, const cu_wmat *w);

/* ---- elementwise (cuda_elementwise.cu) ---------------------------------------- */

/* out[t] = dequantised row ids[t] of table (any weight type), float32. */
void cu_embed(dsr1_gpuStream s, const cu_wmat *table, const int32_t *ids, int n, float *out,
              int64_t ldo);
/* y[t] = x[t] * rsqrt(mean(x[t]^2) + eps) * w; with res non-NULL first
 * x[t] += res[t] (written back to x: the residual add fused). */
void cu_rmsnorm(dsr1_gpuStream s, float *x, int64_t ldx, const float *res, int64_t ldr,
                const float *w, int dim, float eps, int n, float *y, int64_t ldy);
/* Interleaved-pair RoPE (cpu_rope): heads vectors of rope_dim per token. */
void cu_rope(dsr1_gpuStream s, float *x, int64_t ldx, int heads, int64_t hstride, int rope_dim,
             const float *freqs, const int32_t *pos, int n);
/* y[t][i] += x[t][i] (or y = x when add is 0), i < dim. */
void cu_add_rows(dsr1_gpuStream s, float *y, int64_t ldy, const float *x, int64_t ldx, int dim,
                 int n, int add);
/* dst[i] = src[idx[i]] rows of dim floats (gather); idx NULL = identity. */
void cu_gather_rows(dsr1_gpuStream s, float *dst, int64_t ldd, const float *src, int64_t lds,
                    const int32_t *idx, int dim, int n);

/* dst[idx[i]] = src[i] rows of dim floats (scatter). */
void cu_scatter_rows(dsr1_gpuStream s, float *dst, int64_t ldd, const float *src, int64_t lds,
                     const int32_t *idx, int dim, int n);
/* For token t < n and head h < heads: dst row t * heads + h (stride ldd)
 * = dim floats at src + t * lds + h * hstride (q_pe into qcat). */
void cu_copy_heads(dsr1_gpuStream s, float *dst, int64_t ldd, const float *src, int64_t lds,
                   int64_t hstride, int heads, int dim, int n);
/* g[i] = silu(g[i]) * u[i], i < len. */
void cu_silu_mul(dsr1_gpuStream s, float *g, const float *u, int64_t len);

/* ---- KV cache (cuda_elementwise.cu) ------------------------------------------- */

/* The device copy of the paged cache (core/kvcache.h layout):
 *   data  [n_pages][n_layers][block][row], scale [n_pages][n_layers][block]
 * table [max_seqs][max_pages] page ids (uploaded by the backend when core
 * changes it). */
typedef struct cu_kv {
    int type, n_layers, kv_lora_rank, rope_dim, row, block, max_pages;
    void *data;
    float *scale;
    const int32_t *table;
} cu_kv;

/* Store latent[t] and pe[t] at (seq[t], layer, pos[t]) with the CPU's
 * conversions (bf16 RNE; FP8 per-row scale amax/448). */
void cu_kv_store(dsr1_gpuStream s, const cu_kv *kv, int layer, const float *latent, int64_t ldl,
                 const float *pe, int64_t ldp, const int32_t *seq, const int32_t *pos, int n);

/* ---- MLA attention (cuda_attention.cu) ---------------------------------------- */

/* Steps 2-4 of absorbed MLA (backends/cpu/cpu_attention.c): for token t
 * and head h, softmax(scale * qcat[t][h] . K[p]) over p <= pos[t] applied
 * to the latent rows. qcat [n][heads][row] (absorbed q_nope | q_pe),
 * olat [n][heads][kv_lora_rank]. scratch: cu_mla_scratch_bytes(...). */
int cu_mla_attend(dsr1_gpuStream s, const cu_kv *kv, int layer, const float *qcat, int heads,
                  float scale, const int32_t *seq, const int32_t *pos, int n, int max_pos,
                  float *olat, void *scratch, size_t scratch_bytes, char *msg, size_t msgsz);
size_t cu_mla_scratch_bytes(int heads, int kv_lora_rank, int max_ctx);
/* Raise the attention kernel's shared-memory limit once per process
 * (outside any graph capture). 0 ok, -1 refused by the device. */
int cu_mla_init(void);
/* The fixed split size (positions) of the split-KV decode (absolute). */
#define CU_MLA_SPLIT 1024

/* ---- MoE (cuda_moe.cu) ---------------------------------------------------------- */

typedef struct cu_moe_params {
    int n_experts, topk, n_group, topk_group;
    int sigmoid;             /* scoring: 1 sigmoid, 0 softmax */
    int method;              /* 0 greedy, 1 group-limited greedy, 2 noaux_tc */
    int v3;                  /* family V3 (normalise then scale) */
    int norm_topk_prob;
    float routed_scaling_factor;
} cu_moe_params;

/* Route n tokens (core/moe.c's algorithm, ties to the lower index):
 * logits [n][E] -> idx [n][K], wgt [n][K]. scratch: n * (2E + n_group) floats.
 * A token with a non-finite logit gets idx -1 and weights NaN (the seam's
 * rule: its output becomes NaN, the op does not fail). */
void cu_moe_route(dsr1_gpuStream s, const cu_moe_params *p, const float *logits,
                  const float *bias, int n, int32_t *idx, float *wgt, float *scratch);
/* Group the n*K (token, k) pairs by expert, stable (pair order within an
 * expert): first[E+1], order[n*K] (pair ids), xrow[n*K] (= order / K),
 * active[E] (experts with tokens, ascending) and *n_active. */
void cu_moe_dispatch(dsr1_gpuStream s, const int32_t *idx, int n, int K, int E, int32_t *first,
                     int32_t *order, int32_t *xrow, int32_t *active, int32_t *n_active);
/* y[t] = sum_k wgt[t][k] * slots[t*K+k] in k order (+ sh[t] when non-NULL);
 * NaN for a token whose idx[t][0] is -1. */
void cu_moe_combine(dsr1_gpuStream s, const float *slots, const float *wgt, const int32_t *idx,
                    const float *sh, int n, int K, int dim, float *y, int64_t ldy);

/* ---- FP8 prefill GEMM (cuda_gemm_lt.cu) ----------------------------------------- */

/* Whether cuBLASLt's 128x128 block-scaled FP8 GEMM can run here (CUDA
 * >= 12.9, sm_90+); 0 on HIP. A named mode (its order depends on n). */
int cu_lt_fp8_available(int sm);

#endif
