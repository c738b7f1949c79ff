/*
 * cpu_backend.h - internals shared by the CPU backend's files
 * (cpu_backend.c: table, device, weights, buffers, workspace, elementwise
 * stages, FFN; cpu_kv.c: page storage and kv_store; cpu_attention.c: MLA
 * over the pages; cpu_moe.c: routed experts).
 * Not a public header: the rest of dsr1 sees backends/backend.h only.
 */
#ifndef DSR1_CPU_BACKEND_H
#define DSR1_CPU_BACKEND_H

#include "backends/backend.h"
#include "kernels.h"
#include "numa.h"
#include "pftune.h"

/* A loaded weight: the CPU keeps the mapped bytes and multiplies them in
 * place, so a handle is the matrices' descriptions (one per expert/head). */
struct dsr1_bweight {
    struct dsr1_bweight *next; /* the device's list, freed at destroy */
    int64_t count;
    int32_t *node;             /* [count] each expert's NUMA node (an expert
                                  stack split over nodes), owned; else NULL */
    dsr1_wmat m[];
};

/* An activation buffer: host float32. */
struct dsr1_bbuf {
    size_t n;
    float data[];
};

/* KV pages in host memory: data [n_pages][n_layers][block][row] elements of
 * the cache type, scale [n_pages][n_layers][block] for FP8. */
struct dsr1_bkv {
    dsr1_kv_layout l;
    size_t elem;
    void *data;
    float *scale;
};

/* Fewest tokens a matmul needs before the fast mode sends it through
 * oneDNN (matmul_dnnl.c): below it our kernels were as fast or faster on
 * Zen 4 (`dsr1 bench kernels`, see README "Fast and deterministic mode");
 * MoE experts (about 16 tokens each in a 512-token R1 chunk) stay ours. */
#define DSR1_CPU_DNNL_MIN_N 128

typedef struct cpu_dev {
    dsr1_pool *pool;
    int deterministic;       /* --deterministic: batch-invariant kernels only */
    int fast_gemm;           /* not deterministic and oneDNN has bf16 kernels */
    int fp8_w8a8;            /* fast mode without --fp8-prefill bf16: DSR1_ACT_INT8_FAST */
    int amx;                 /* fast_gemm and oneDNN runs AMX tiles here */
    int int8_weights;        /* an INT8 matrix is loaded: pftune also tries the
                                INT8 GEMV's row layout (pftune.h, arms) */
    const char *mode;        /* the compute mode, for describe */
    struct dsr1_bweight *weights;
    char desc[192];
    /* NUMA (numa.c): all NULL / 0 with one node */
    dsr1_numa_topo *topo;    /* owned; NULL: one node */
    dsr1_numa_team *team;    /* drivers of nodes 1..n-1, owned */
    dsr1_pool *npool[DSR1_NUMA_MAX_NODES]; /* node k's threads, owned */
    size_t placed, pages;    /* expert pages on their node / moved (>1 real node) */
    char numa_note[160];     /* the first placement failure, or "" */
} cpu_dev;

/* One node's or one thread's MoE buffers (its experts run at once with
 * other nodes' or threads'). */
typedef struct cpu_lane {
    float *xg, *yg;          /* [T][D] gathered rows and expert output */
    float *ha, *hb;          /* [T][moe_inter] expert hidden */
} cpu_lane;

typedef struct cpu_ws {
    cpu_dev *dev;
    dsr1_pool *own_pool;     /* from ws_threads, or NULL: use dev->pool */
    dsr1_dnnl *dnnl;         /* fast mode: oneDNN primitives and buffers, owned; else NULL */
    dsr1_ws_sizes s;
    dsr1_step step;          /* the current step (step_begin) */
    int in_step;
    dsr1_pftune pft;         /* one-token steps: the row GEMV's prefetch (pftune.h) */
    int one_token;           /* the step under way has one token (pftune counts it) */
    /* attention (cpu_attention.c) */
    float *qcat;             /* [T][H][kv_lora + rope] absorbed queries | rope queries */
    float *olat;             /* [T][H][kv_lora] attended latents */
    void *kbuf;              /* [max_ctx][kv_lora + rope] one sequence's cache rows */
    void *vt;                /* [kv_lora][max_ctx] their latents transposed */
    size_t kelem;            /* bytes per kbuf/vt element: 2 (bf16 cache) or 4 */
    float *scores;           /* [score_cap] one tile's scores, then probabilities */
    size_t score_cap;        /* >= n_heads * max_ctx */
    size_t tile_rows;        /* most (token, head) rows per tile, >= n_heads */
    dsr1_pool **hpool;       /* [n_hpools] one-thread pools: per-task matmul scratch */
    int32_t *segs;           /* [T][2] absorbed token ranges of one call */
    float *nv;               /* the naive form's buffers (cpu_mla_naive.c), grown on use */
    size_t nv_cap;           /* floats in nv */
    size_t nv_group_cap;     /* floats of one head group's expansion; 0: the default (tests set less) */
    uint64_t naive_runs;     /* runs attended in the naive form (tests check the path ran) */
    int n_hpools;
    /* FFN and MoE (cpu_backend.c, cpu_moe.c) */
    float *ha, *hb;          /* [T][max inter] FFN hidden */
    float *router;           /* [T][E] */
    int32_t *eidx;           /* [T][K] */
    float *ew;               /* [T][K] */
    int32_t *order, *count, *first; /* expert dispatch: [T*K], [E], [E + 1] */
    float *xg, *yg;          /* [T][D] gathered rows and their expert output */
    float *slots;            /* [T*K][D] expert outputs per (token, k) */
    float *sh;               /* [T][D] shared expert output */
    float *route_scratch;    /* [3E] */
    dsr1_mm_item *items;     /* [E + 1]: a decode step's expert matmuls (cpu_moe.c) */
    uint64_t batch_runs;     /* MoE calls run that way (tests check the path ran) */
    cpu_lane *lane;          /* [n_lanes] per NUMA node, owned; NULL with one node */
    int n_lanes;
    uint64_t numa_runs;      /* MoE calls run node by node (tests check the path ran) */
    /* experts side by side (cpu_moe.c): lane k goes with hpool[k], its
     * buffers hold tl_rows tokens; NULL with one thread */
    cpu_lane *tlane;
    int n_tlanes, tl_rows;
    uint64_t ep_runs;        /* MoE calls run an expert per thread (tests check the path ran) */
} cpu_ws;

/* The mode our kernels get: in the fast mode (not with --fp8-prefill bf16)
 * the seam's INT8 becomes the fast INT8 (FP8 weights as W8A8 from
 * DSR1_MM_RQ_MIN_N tokens, kernels.h). Every seam op that passes an act
 * on starts here. */
static inline dsr1_act dsr1_cpu_act(const cpu_ws *w, dsr1_act act)
{
    return act == DSR1_ACT_INT8 && w->dev->fp8_w8a8 ? DSR1_ACT_INT8_FAST : act;
}

/* Attention (cpu_attention.c, cpu_mla_naive.c). Rows 0..P-1 of (seq,
 * layer) gathered into w->kbuf, [P][kv_lora + rope]: bf16 pages as bf16,
 * f32 and FP8 (value * scale) as f32. */
dsr1_wmat dsr1_cpu_gather_k(cpu_ws *w, int seq, int layer, int P);
/* Softmax of scale * s[0..valid) in place (max subtracted, sum in
 * double); s[valid..width) become exactly 0. */
void dsr1_cpu_softmax_row(float *s, int valid, int width, float scale);
/* The same with AVX-512 exponentials (softmax_avx512.c): about 1 ulp off
 * libm's expf, so the fast mode only (the naive and the absorbed form);
 * AVX-512 CPUs only. */
void dsr1_cpu_softmax_row_avx512(float *s, int valid, int width, float scale);
/* dsr1_cpu_softmax_row's bits with AVX-512 (glibc's expf in vector lanes,
 * the sum in the scalar row's order): softmax_avx512.c. */
void dsr1_cpu_softmax_row_exact_avx512(float *s, int valid, int width, float scale);
typedef void (*dsr1_cpu_softmax_fn)(float *s, int valid, int width, float scale);
/* The absorbed attention's softmax rows for mode act (cpu_attention.c):
 * on an AVX-512 pool the approximate AVX-512 row in the fast mode (not
 * deterministic, act not F32) and the exact one otherwise; elsewhere the
 * scalar row. */
dsr1_cpu_softmax_fn dsr1_cpu_attention_softmax(const cpu_ws *w, dsr1_act act);
/* Whether tokens [t0, t1) (one sequence's run) take the naive form: the
 * fast mode with a->wkv_b, a run long enough, and fewer multiply-adds. */
int dsr1_cpu_naive_wanted(const cpu_ws *w, const dsr1_mla_args *a, dsr1_act act, int t0, int t1);
/* The naive form for tokens [t0, t1): out rows written; 0, or -1 when its
 * buffers cannot be had (nothing written: the caller runs the absorbed form). */
int dsr1_cpu_mla_naive(cpu_ws *w, const dsr1_mla_args *a, dsr1_act act, int t0, int t1);

/* Bytes per gathered cache value: bf16 stays bf16, f32 and FP8 become f32. */
static inline size_t dsr1_cpu_kv_elem(dsr1_kv_type t) { return t == DSR1_KV_BF16 ? 2 : 4; }

static inline dsr1_pool *dsr1_cpu_pool(const cpu_ws *w)
{
    return w->own_pool ? w->own_pool : w->dev->pool;
}

/* Host address of row 0 of a view. */
static inline float *dsr1_cpu_ptr(dsr1_view v) { return v.buf->data + v.off; }

/* Matrix i of a loaded weight. */
static inline const dsr1_wmat *dsr1_cpu_mat(const dsr1_bweight *w, int64_t i)
{
    return &w->m[i];
}

/* Row index of (seq, layer, pos) in the step's pages. */
static inline size_t dsr1_cpu_kv_row(const dsr1_step *s, int seq, int layer, int pos)
{
    int32_t page = s->page_table[(size_t)seq * (size_t)s->max_pages + (size_t)(pos / s->block)];
    return ((size_t)page * (size_t)s->kv->l.n_layers + (size_t)layer) * (size_t)s->block +
           (size_t)(pos % s->block);
}

/* fn(ctx, t0, t1) over tokens [0, n): DSR1_CPU_PAR_ROWS at a time on the
 * workspace's pool when there are several such runs (a prefill chunk),
 * else here (a decode step's tokens are done before threads would wake).
 * For per-token work whose rows do not depend on which thread computes
 * them, so the bits do not change. */
#define DSR1_CPU_PAR_ROWS 16
void dsr1_cpu_par_rows(cpu_ws *w, int n, void (*fn)(void *ctx, int t0, int t1), void *ctx);

/* Whether the fast mode sends an n-token matmul of m to oneDNN. */
int dsr1_cpu_take_dnnl(const cpu_ws *w, const dsr1_wmat *m, int n, dsr1_act act);
/* y = x W^T: through oneDNN when dsr1_cpu_take_dnnl says so, else (or if
 * oneDNN refuses the shape) dsr1_matmul. */
void dsr1_cpu_matmul(cpu_ws *w, const dsr1_wmat *m, const float *x, int64_t ldx, float *y,
                     int64_t ldy, int n, dsr1_act act);
/* y = down(silu(gate x) * up x) for n rows, through the workspace's ha/hb. */
void dsr1_cpu_gated_mlp(cpu_ws *w, const dsr1_wmat *gate, const dsr1_wmat *up,
                        const dsr1_wmat *down, const float *x, int64_t ldx, int n, float *y,
                        int64_t ldy, dsr1_act act);
/* The same on pool p with hidden buffers ha, hb ([n][gate rows] each). */
void dsr1_cpu_gated_mlp_on(dsr1_pool *p, float *ha, float *hb, const dsr1_wmat *gate,
                           const dsr1_wmat *up, const dsr1_wmat *down, const float *x,
                           int64_t ldx, int n, float *y, int64_t ldy, dsr1_act act);
void dsr1_cpu_mla_attention(void *ws, const dsr1_mla_args *a, dsr1_act act);
void dsr1_cpu_moe(void *ws, const dsr1_moe_weights *w, const dsr1_moe_params *p, dsr1_view x,
                  int n, dsr1_view y, dsr1_act act);
void dsr1_cpu_moe_choice(void *ws, int32_t *idx, int n);
/* The per-thread MoE lanes, one per hpool (grown with them); 0 with one
 * thread or no experts; DSR1_ENOMEM. */
int dsr1_cpu_moe_lanes(cpu_ws *w);
void dsr1_cpu_moe_lanes_free(cpu_ws *w);
/* n lanes' buffers and the array (NULL is a no-op): the nodes' and the
 * threads' lanes alike. */
void dsr1_cpu_lanes_free(cpu_lane *l, int n);

/* cpu_numa.c: NUMA state (numa.c has the design); all no-ops with one node */
int dsr1_cpu_numa_create(cpu_dev *d, int want, dsr1_error *err);
void dsr1_cpu_numa_destroy(cpu_dev *d);
int dsr1_cpu_numa_nodes(const cpu_dev *d);
/* An expert stack: each expert's node, and its pages moved there. */
int dsr1_cpu_numa_load(cpu_dev *d, const dsr1_wdesc *desc, struct dsr1_bweight *w,
                       dsr1_error *err);
void dsr1_cpu_numa_describe(const cpu_dev *d, char *buf, size_t n);
int dsr1_cpu_numa_ws(cpu_ws *w); /* the lanes; DSR1_ENOMEM */
void dsr1_cpu_numa_ws_free(cpu_ws *w);

/* cpu_kv.c */
int dsr1_cpu_kv_create(void *dev, const dsr1_kv_layout *l, dsr1_bkv **out, dsr1_error *err);
void dsr1_cpu_kv_free(void *dev, dsr1_bkv *kv);
int dsr1_cpu_kv_read(void *dev, dsr1_bkv *kv, int page, int layer, int first, int count,
                     void *data, float *scale, dsr1_error *err);
int dsr1_cpu_kv_write(void *dev, dsr1_bkv *kv, int page, int layer, int first, int count,
                      const void *data, const float *scale, dsr1_error *err);
int dsr1_cpu_kv_copy(void *dev, dsr1_bkv *kv, int dst, int src, dsr1_error *err);
void dsr1_cpu_kv_store(void *ws, int layer, dsr1_view latent, dsr1_view pe);

#endif
