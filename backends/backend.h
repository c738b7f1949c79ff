/*
 * backend.h - the seam between the model and the hardware: one versioned
 * table of operations every device implements (cpu/ today; cuda/ and hip/
 * as shared libraries loaded at run time). core/forward.c owns the layer
 * order and calls only this table; a backend knows shapes, never models
 * (no layer loop, no config, no file format in here).
 *
 * ---- For the author of the next backend (one page) -----------------------
 *
 * What a backend owns, and core does not touch:
 *   - its device context (`create`, with dsr1_backend_options: threads for
 *     the CPU, a device index for a GPU);
 *   - WEIGHTS: core describes each weight once at model load with a
 *     dsr1_wdesc (type, shape, block scales, expert stacks; the bytes are
 *     host memory, usually the read-only mmap of the .dsr1 file) and a
 *     placement hint. `load` uploads, repacks or keeps the pointer (the CPU
 *     keeps it) and returns the backend's own dsr1_bweight handle. Ops only
 *     ever see handles. Handles live until `destroy`.
 *   - ACTIVATIONS: float32 matrices in backend buffers (`buf_create`). Ops
 *     address them with a dsr1_view (buffer, offset, row stride, in float
 *     elements). Everything between the embedding and the logits stays in
 *     the backend: residual add, row gather and scatter are ops. Host memory
 *     is touched only by `write` (host -> buffer) and `read` (buffer ->
 *     host), plus moe_choice (diagnostics).
 *   - KV PAGE STORAGE: `kv_create` allocates n_pages pages of the latent
 *     cache (layout in dsr1_kv_layout) where the backend likes. core keeps
 *     the page tables, slot accounting and rollback (core/kvcache.c) and
 *     hands the tables over at step_begin; it moves bytes only through
 *     kv_read / kv_write (export, import, tests) and kv_copy (copy on
 *     write). Rolling a sequence back is page-table work in core: rows past
 *     a sequence's length are never read before they are written again.
 *   - WORKSPACES (`ws_create`): per-forward-context scratch sized once for
 *     the largest call (dsr1_ws_sizes), so nothing allocates while decoding.
 *
 * A forward is one STEP:  step_begin(ws, step) ... ops ... step_end(ws).
 * step_begin carries the batch description once (token ids, positions, KV
 * slot of each token, which rows are wanted, the page tables); ops then
 * refer to it (embed reads the ids, rope the positions, kv_store and
 * mla_attention the slots and tables). Ops are enqueued in order and
 * return void: a synchronous backend (the CPU) runs them at once, an
 * asynchronous one may queue them, capture the whole step as one graph,
 * and replay it. The first failure of any op is reported by step_end,
 * which returns 0 or a DSR1_E* code with its message; results written by
 * `read` and moe_choice are valid on the host only after step_end returned
 * 0, and host memory given to `write` must stay unchanged until then.
 *
 * Contracts every backend must keep (tests/test_backend_ops.c checks them
 * for each backend present; the engine's tests rely on them):
 *   - Determinism: with dsr1_backend_options.deterministic set, the result
 *     for one token never depends on the other tokens of the step, on their
 *     number or order, or on the thread count. A backend that cannot
 *     promise this must refuse at create. Without it (the fast mode) a
 *     backend may trade this for speed, never the tolerance below.
 *   - Accuracy: each op matches its scalar reference within the tolerance
 *     tests/test_backend_ops.c states for it; DSR1_ACT_F32 is the exact
 *     path (dequantise, multiply in float32).
 *   - No silent fallback: a backend implements the whole table or refuses
 *     at create with a message; core never switches backend or precision.
 *
 * Shipping one: build a shared library libdsr1-<name>.so exporting
 *     const dsr1_backend_ops *dsr1_backend_entry(int version);
 * returning NULL when `version` is not the one it was built for. The
 * registry (backends/backend.c) looks next to the dsr1 binary, then in the
 * install's lib directory, checks version and table size, then calls
 * `probe` to ask whether a device is usable (and why not).
 * ---------------------------------------------------------------------------
 */
#ifndef DSR1_BACKEND_H
#define DSR1_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "../core/config.h"
#include "../core/dsr1.h"     /* dsr1_kv_type */
#include "../core/dsr1file.h" /* dsr1_type: the packed weight types */
#include "../core/error.h"

/* Version 2: weights loaded as handles, backend buffers and views,
 * step_begin/step_end, backend-owned KV pages, options at create. */
#define DSR1_BACKEND_VERSION 5

/* ---- weights ------------------------------------------------------------- */

/* One matrix: W is [rows = out, cols = in], row-major, in a packed .dsr1
 * type (core/dsr1file.h says what data and scale hold for each). A matmul
 * computes y[t][r] = sum_c x[t][c] * W[r][c]. A vector (norm weights, RoPE
 * frequencies, router bias) is one row of F32. */
typedef struct dsr1_wmat {
    dsr1_type type;        /* F32, F16, BF16, FP8_E4M3, INT8, INT4 */
    int64_t rows, cols;    /* out, in */
    const void *data;      /* packed values of this one matrix */
    const void *scale;     /* this matrix's scales or NULL */
    dsr1_type scale_type;  /* F32 (fp8, int8) or F16/BF16 (int4) */
    int group;             /* fp8: block (128); int8: 0 = per row, else group; int4: group */
} dsr1_wmat;

/* What a weight is for: lets a backend place it (a GPU short of memory may
 * keep routed experts on the host) and choose a layout. */
typedef enum dsr1_wrole {
    DSR1_W_MATRIX = 0,     /* a projection: matmul, ffn, attention parts */
    DSR1_W_EXPERTS,        /* a stack of routed experts (count > 1) */
    DSR1_W_EMBED,          /* an embedding table: rows gathered by token id */
    DSR1_W_VECTOR,         /* F32 [1, cols]: norms, RoPE frequencies, router bias */
} dsr1_wrole;

typedef enum dsr1_placement {
    DSR1_PLACE_AUTO = 0,   /* the backend decides */
    DSR1_PLACE_DEVICE,     /* in the device's memory */
    DSR1_PLACE_HOST,       /* leave it in host memory (the mmap) */
} dsr1_placement;

/* A weight as core describes it at load: `count` matrices of the same shape
 * and type (1, or the experts of a stack, or the heads of a per-head
 * attention part), matrix i at mat.data + i * stride and mat.scale + i *
 * scale_stride (bytes). The bytes are host memory that stays valid and
 * unchanged until the model is closed. */
typedef struct dsr1_wdesc {
    const char *name;      /* tensor name, for messages */
    dsr1_wrole role;
    dsr1_wmat mat;         /* matrix 0 */
    int64_t count;         /* >= 1 */
    size_t stride, scale_stride;
} dsr1_wdesc;

/* Matrix i of a description. */
static inline dsr1_wmat dsr1_wdesc_mat(const dsr1_wdesc *d, int64_t i)
{
    dsr1_wmat m = d->mat;
    m.data = (const uint8_t *)m.data + (size_t)i * d->stride;
    if (m.scale) m.scale = (const uint8_t *)m.scale + (size_t)i * d->scale_stride;
    return m;
}

/* The backend's own handle for a loaded weight (each backend defines it). */
typedef struct dsr1_bweight dsr1_bweight;

/* Scalar helpers over host descriptions (core/wmat.c), for loaders,
 * references and tests; backends may use them too. */
/* Matrix `index` of a .dsr1 tensor (0 for 2-D; expert e of a 3-D stack). */
dsr1_wmat dsr1_wmat_of(const dsr1_tensor *t, int64_t index);
/* The whole tensor as a description (count = experts of a 3-D stack). */
dsr1_wdesc dsr1_wdesc_of(const dsr1_tensor *t, dsr1_wrole role);
/* Row r of W dequantised into out[cols] (float32): the scalar reference
 * (one rounding of value * scale). */
void dsr1_wmat_dequant_row(const dsr1_wmat *w, int64_t r, float *out);
/* Columns [c0, c0 + n) of row r: the same values as dequant_row. */
void dsr1_wmat_dequant_span(const dsr1_wmat *w, int64_t r, int64_t c0, int64_t n, float *out);
/* The scale that multiplies element (r, c) (1 for unscaled types). */
float dsr1_wmat_scale(const dsr1_wmat *w, int64_t r, int64_t c);
/* Rows [r0, r0 + n) of w as a matrix of its own, sharing w's bytes and
 * scales: 1, or 0 (out untouched) when the scales do not split at r0 (FP8
 * rows off a block boundary). */
int dsr1_wmat_rows(const dsr1_wmat *w, int64_t r0, int64_t n, dsr1_wmat *out);

/* ---- activations ----------------------------------------------------------- */

/* Activation arithmetic a matmul may use. F32: dequantise and multiply in
 * float32 (the exact path). BF16: x and the weights rounded to bf16, bf16
 * dot products. INT8: per-token dynamic int8 x against INT8 weights (W8A8)
 * and, on the CPU, INT4 weights (W4A8; the GPU backends run INT4 as BF16
 * for now), BF16 for every other weight type. (backends/cpu/kernels.h spells out the
 * rounding; another backend must match it within the op tolerances.) */
typedef enum { DSR1_ACT_F32 = 0, DSR1_ACT_BF16 = 1, DSR1_ACT_INT8 = 2 } dsr1_act;

/* A backend buffer of float32 values (each backend defines it). */
typedef struct dsr1_bbuf dsr1_bbuf;

/* Rows of a float32 matrix in a buffer: row t at element off + t * ld. */
typedef struct dsr1_view {
    dsr1_bbuf *buf;
    int64_t off, ld;
} dsr1_view;

static inline dsr1_view dsr1_view_at(dsr1_view v, int64_t cols_in)
{
    v.off += cols_in;
    return v;
}

/* ---- the KV cache's pages ------------------------------------------------------ */

/* Page storage of the paged latent cache (core/kvcache.h owns the tables).
 * One row per (token, layer): kv_lora_rank latent values then rope_dim
 * RoPE'd key values, in `type` (F32, BF16, or FP8 e4m3 with one float
 * scale per row: value = fp8 * scale, scale = amax(row) / 448, 1 for an
 * all-zero row). A page holds `block` tokens of every layer. The raw form
 * kv_read/kv_write exchange with the host: rows [first, first + count) of
 * (page, layer) as count * row elements of `type`, plus count floats of
 * scale for FP8. */
typedef struct dsr1_kv_layout {
    dsr1_kv_type type;
    int n_layers, kv_lora_rank, rope_dim, row; /* row = kv_lora_rank + rope_dim */
    int block;             /* tokens per page */
    int n_pages;
} dsr1_kv_layout;

typedef struct dsr1_bkv dsr1_bkv; /* a backend's page storage */

/* The row codec every backend stores with (core/kvcache.c), so a cache
 * exported from one backend imports into another bit for bit. */
size_t dsr1_kv_elem_size(dsr1_kv_type t); /* 4, 2, 1 */
/* latent[nl] then pe[np] -> dst (nl + np elements of t), *scale (FP8). */
void dsr1_kv_encode_row(dsr1_kv_type t, const float *latent, int nl, const float *pe, int np,
                        void *dst, float *scale);
/* row elements of t (with FP8 scale) -> out[row] float32. */
void dsr1_kv_decode_row(dsr1_kv_type t, const void *src, float scale, int row, float *out);

/* ---- a step ------------------------------------------------------------------- */

/* The batch of one forward, given once at step_begin. Token t of the step
 * has id ids[t], sits at position pos[t] of KV slot seq[t] and attends to
 * positions 0..pos[t] of that slot (its own row written by this step).
 * Slot s's page p (positions [p * block, (p + 1) * block)) is page
 * page_table[s * max_pages + p] of kv. All arrays are host memory owned by
 * the caller and unchanged until step_end; the struct itself is not (the
 * engine's lives on its stack): a backend copies what it keeps. */
typedef struct dsr1_step {
    int n;
    const int32_t *ids, *pos, *seq;      /* [n] */
    int n_out;
    const int32_t *out_rows;             /* [n_out] rows whose outputs are wanted */
    dsr1_bkv *kv;                        /* NULL: the step touches no cache */
    const int32_t *page_table;           /* [max_seqs][max_pages] */
    int max_seqs, max_pages, block;
} dsr1_step;

/* ---- fused DeepSeek stages -------------------------------------------------- */

/* How the router picks experts (all variants of config.json; core/moe.h
 * holds the scalar reference every backend's router must agree with). */
typedef struct dsr1_moe_params {
    int n_experts, topk, n_group, topk_group;
    dsr1_scoring scoring;
    dsr1_topk_method method;
    dsr1_family family;      /* V2 and V3 normalise and scale differently */
    int norm_topk_prob;
    float routed_scaling_factor;
} dsr1_moe_params;

/* One MoE layer's weights (handles). */
typedef struct dsr1_moe_weights {
    const dsr1_bweight *router;       /* [n_experts, hidden] (mlp.gate.weight) */
    const dsr1_bweight *bias;         /* vector [n_experts] e_score_correction_bias or NULL */
    const dsr1_bweight *gate, *up;    /* stacks of n_experts [inter, hidden] */
    const dsr1_bweight *down;         /* stack of n_experts [hidden, inter] */
    int has_shared;
    const dsr1_bweight *sh_gate, *sh_up, *sh_down; /* shared experts as one MLP */
} dsr1_moe_weights;

/* Absorbed MLA over the latent cache for the step's n tokens. */
typedef struct dsr1_mla_args {
    int n, n_heads, qk_nope, rope_dim, v_dim, kv_lora_rank;
    float scale;             /* softmax scale incl. YaRN mscale^2 */
    dsr1_view q;             /* [n][n_heads][qk_nope + rope_dim], rope applied */
    int layer;               /* cache layer index */
    const dsr1_bweight *wk_t;/* n_heads x [kv_lora_rank, qk_nope]: kv_b key part, transposed */
    const dsr1_bweight *wv;  /* n_heads x [v_dim, kv_lora_rank]: kv_b value part */
    dsr1_view out;           /* [n][n_heads * v_dim] */
    /* kv_b_proj whole, [n_heads (qk_nope + v_dim)][kv_lora_rank] (head h's
     * key rows, then its value rows), for the naive form; NULL unless the
     * backend asked for it (ops->mla_naive). */
    const dsr1_bweight *wkv_b;
} dsr1_mla_args;

/* Workspace sizes: the largest call the workspace must serve. */
typedef struct dsr1_ws_sizes {
    int max_tokens;
    int hidden, inter;       /* dense FFN */
    int moe_inter, n_experts, topk, shared_inter;
    int max_in;              /* widest input (cols) of any weight multiplied */
    int n_heads, kv_lora_rank, rope_dim, max_ctx;
    dsr1_kv_type kv_type;    /* the cache the attention reads */
} dsr1_ws_sizes;

typedef struct dsr1_backend_options {
    int threads;             /* CPU: worker threads, 0 = one per core */
    int device;              /* GPU: device index */
    /* CPU: NUMA nodes to split experts and threads over (backends/cpu/
     * numa.c): 0 = the machine's (libnuma; off on one node), 1 = off,
     * N > 1 = N virtual nodes carved from the cores (tests the split on
     * one node). Results never depend on it. GPUs ignore it. */
    int numa_nodes;
    /* Non-zero: only batch-invariant kernels (the determinism contract
     * above, bit for bit). Zero (the fast mode): the backend may use
     * faster kernels whose result for a token depends on the batch (the
     * CPU's oneDNN prefill GEMM), within the ops' stated tolerance. */
    int deterministic;
    /* Zero, and not deterministic: FP8 weights may run as W8A8 in matmuls
     * of many tokens (the CPU requantises each row to INT8 on the fly:
     * an INT8 file's numerics, within the ops' W8A8 tolerance). Non-zero:
     * they stay bf16. Backends without such a path ignore it. */
    int fp8_bf16;
} dsr1_backend_options;

typedef struct dsr1_backend_ops {
    int version;             /* DSR1_BACKEND_VERSION */
    size_t size;             /* sizeof(dsr1_backend_ops) the backend was built with */
    const char *name;        /* "cpu", "cuda", "hip" */
    int priority;            /* `auto` takes the usable backend with the highest */

    /* Is a device usable? 1 yes; 0 no, with the reason in why ("no CUDA
     * driver", "no device"). Cheap, no context created. */
    int (*probe)(char *why, size_t n);
    int (*create)(const dsr1_backend_options *o, void **dev, dsr1_error *err);
    void (*destroy)(void *dev); /* frees everything made from dev, weights included */
    /* One line for start-up messages, naming the kernel variant:
     * "cpu (avx512-bf16-vnni kernels, 2 threads)". */
    const char *(*describe)(void *dev);

    /* Weights: called once per weight at model load. */
    int (*load)(void *dev, const dsr1_wdesc *d, dsr1_placement where, dsr1_bweight **out,
                dsr1_error *err);

    /* Activation buffers of n float32 values. */
    int (*buf_create)(void *dev, size_t n, dsr1_bbuf **out, dsr1_error *err);
    void (*buf_free)(void *dev, dsr1_bbuf *b); /* NULL is a no-op */

    /* KV page storage. DSR1_ENOMEM (with the size in the message) when the
     * pages do not fit. */
    int (*kv_create)(void *dev, const dsr1_kv_layout *l, dsr1_bkv **out, dsr1_error *err);
    void (*kv_free)(void *dev, dsr1_bkv *kv); /* NULL is a no-op */
    int (*kv_read)(void *dev, dsr1_bkv *kv, int page, int layer, int first, int count,
                   void *data, float *scale, dsr1_error *err);
    int (*kv_write)(void *dev, dsr1_bkv *kv, int page, int layer, int first, int count,
                    const void *data, const float *scale, dsr1_error *err);
    /* Page dst becomes a copy of page src (every layer). */
    int (*kv_copy)(void *dev, dsr1_bkv *kv, int dst, int src, dsr1_error *err);

    /* Workspaces. */
    int (*ws_create)(void *dev, const dsr1_ws_sizes *s, void **ws, dsr1_error *err);
    void (*ws_free)(void *ws);
    /* Threads the workspace's ops may use (1..N); 0 keeps the device's
     * count. Results do not depend on it. (GPU backends ignore it.) */
    void (*ws_threads)(void *ws, int threads);

    int (*step_begin)(void *ws, const dsr1_step *s, dsr1_error *err);
    int (*step_end)(void *ws, dsr1_error *err);

    /* ---- ops (between step_begin and step_end; n <= the step's n unless
     * said otherwise, <= max_tokens always) ---- */

    /* Host -> buffer: rows of cols floats from src (row stride lds). */
    void (*write)(void *ws, const float *src, int64_t lds, int n, int cols, dsr1_view dst);
    /* Buffer -> host, valid after step_end. */
    void (*read)(void *ws, dsr1_view src, int n, int cols, float *dst, int64_t ldd);
    /* dst[i] = src[rows[i]] (gather) for i < n; rows is host memory. */
    void (*gather)(void *ws, dsr1_view src, const int32_t *rows, int n, int cols, dsr1_view dst);
    /* dst[rows[i]] = src[i] (scatter). */
    void (*scatter)(void *ws, dsr1_view src, const int32_t *rows, int n, int cols, dsr1_view dst);
    /* y[t] += x[t] (the residual add), t < n, cols values per row. */
    void (*add)(void *ws, dsr1_view y, dsr1_view x, int n, int cols);

    /* out[t] = row ids[t] of the embedding table (any packed type) as
     * float32, for the step's n tokens. */
    void (*embed)(void *ws, const dsr1_bweight *table, dsr1_view out);
    /* y[t] = x[t] / sqrt(mean(x[t]^2) + eps) * w, rows of dim (in place ok;
     * mean in double as the reference). */
    void (*rmsnorm)(void *ws, dsr1_view x, const dsr1_bweight *w, int dim, float eps, int n,
                    dsr1_view y);
    /* y[t] = W x[t] for t < n. */
    void (*matmul)(void *ws, const dsr1_bweight *w, dsr1_view x, dsr1_view y, int n, dsr1_act act);
    /* Rotate interleaved pairs (x[2i], x[2i+1]) of `heads` vectors of
     * rope_dim per token (vector h of token t at element x.off + t * x.ld
     * + h * hstride) by
     * angle pos[t] * freqs[i] (float32 product, as DeepSeek's table; freqs
     * a vector of rope_dim / 2), for the step's n tokens. */
    void (*rope)(void *ws, dsr1_view x, int heads, int64_t hstride, int rope_dim,
                 const dsr1_bweight *freqs);
    /* Write the step's n rows: latent[t] (kv_lora_rank) and pe[t]
     * (rope_dim) at (seq[t], layer, pos[t]) of the step's cache. */
    void (*kv_store)(void *ws, int layer, dsr1_view latent, dsr1_view pe);
    /* MLA over the cache: absorbed (q_nope through the key part, scores
     * over latent + rope key, softmax, weighted latent through the value
     * part), or in the fast mode with a->wkv_b the naive form for long
     * runs of one sequence (the same attention, rounded differently). a->n
     * is the step's n. */
    void (*mla_attention)(void *ws, const dsr1_mla_args *a, dsr1_act act);
    /* SiLU-gated MLP: y = down(silu(gate x) * up x). */
    void (*ffn)(void *ws, const dsr1_bweight *gate, const dsr1_bweight *up,
                const dsr1_bweight *down, dsr1_view x, int n, dsr1_view y, dsr1_act act);
    /* Routed experts (router in float32, selection by core/moe.h's rule,
     * each active expert run once on all its tokens) plus shared experts:
     * y[t] = sum_k w_k expert_k(x[t]) + shared(x[t]). A token whose router
     * scores are not finite gets y[t] = NaN (every value) and is reported by
     * moe_choice as experts -1; the op does not fail (core fails that
     * sequence, the rest of the batch goes on). */
    void (*moe)(void *ws, const dsr1_moe_weights *w, const dsr1_moe_params *p, dsr1_view x,
                int n, dsr1_view y, dsr1_act act);
    /* The experts the last moe call chose for its n tokens, idx[t][topk] in
     * selection order, host memory valid after step_end. */
    void (*moe_choice)(void *ws, int32_t *idx, int n);

    /* Non-zero: the fast mode may run long prefill chunks in the naive MLA
     * form (keys and values expanded through kv_b_proj, narrower heads), so
     * core loads kv_b_proj whole for it (dsr1_mla_args.wkv_b) unless the
     * model computes in float32. Last in the table: a table that predates
     * it is zero here. */
    int mla_naive;
} dsr1_backend_ops;

/* ---- the registry (backends/backend.c) -------------------------------------------- */

/* The backend called `name` ("cpu", "cuda", "hip"; NULL or "auto" = the
 * highest-priority one whose probe succeeds). GPU backends are loaded from
 * libdsr1-<name>.so next to the binary, then in the install's lib
 * directory. When why is not NULL it receives one line saying what was
 * chosen and why ("auto: cuda (1 device); cpu not tried"). A named backend
 * that cannot be used is an error naming the reason, never a fallback. */
int dsr1_backend_find(const char *name, const dsr1_backend_ops **ops, char *why, size_t why_n,
                      dsr1_error *err);

/* Every backend dsr1 knows, in priority order: its name, whether it is
 * usable here, and if not, why (for `dsr1 info --hw`). Returns the count
 * written (at most max). */
typedef struct dsr1_backend_status {
    const char *name;
    int available;
    char why[160];
} dsr1_backend_status;
int dsr1_backend_list(dsr1_backend_status *out, int max);

/* The CPU backend (backends/cpu/cpu_backend.c), always built in. */
const dsr1_backend_ops *dsr1_backend_cpu(void);

/* Exported by every backend shared library. */
typedef const dsr1_backend_ops *(*dsr1_backend_entry_fn)(int version);

#endif
