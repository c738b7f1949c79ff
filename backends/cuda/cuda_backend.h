/*
 * cuda_backend.h - private to backends/cuda: the device context, weight
 * handles, buffers, KV page storage and workspace of the CUDA/HIP backend,
 * shared by cuda_backend.cu (lifetime, loading, steps, graphs, the table)
 * and cuda_ops.cu (the ops of a step).
 *
 * Ownership: the device context owns every weight upload (freed by
 * destroy); buffers and KV storage are freed by their own calls; the
 * workspace owns its scratch, its pinned staging arena and its graphs.
 *
 * Errors inside a step are sticky: the first failing op records its code
 * and message in the workspace, later ops of the step become no-ops, and
 * step_end reports it (the seam's rule for asynchronous devices).
 */
#ifndef DSR1_CUDA_BACKEND_H
#define DSR1_CUDA_BACKEND_H

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>

#include "cuda_kernels.h"

extern "C" {
#include "backends/backend.h"
}

/* ---- handles the seam leaves to the backend ------------------------------------ */

struct dsr1_bweight {
    cu_wmat m;               /* device copy (count matrices, mat_bytes apart) */
    dsr1_wrole role;
    void *d_data, *d_scale;  /* owned device allocations */
    dsr1_bweight *next;      /* the device's list, freed at destroy */
};

struct dsr1_bbuf {
    float *d;                /* device memory, n floats */
    size_t n;
};

struct dsr1_bkv {
    dsr1_kv_layout l;
    size_t elem;             /* bytes per element */
    void *d_data;            /* [n_pages][n_layers][block][row] */
    float *d_scale;          /* FP8: [n_pages][n_layers][block], else NULL */
};

typedef struct cu_dev {
    int device;
    dsr1_gpuDeviceProp prop;
    dsr1_gpuStream stream;
    int graphs;              /* capture decode steps as graphs (default on) */
    dsr1_bweight *weights;   /* every upload, freed at destroy */
    size_t weight_bytes;
    char desc[256];
} cu_dev;

/* A read whose bytes land in the host after step_end. */
typedef struct cu_pending {
    const void *src;         /* in the pinned arena */
    void *dst;
    size_t row_bytes;
    int64_t ld_bytes;        /* destination row stride */
    int rows;
} cu_pending;

#define CU_GRAPH_SLOTS 16
#define CU_GRAPH_MAX_N 64    /* steps of up to this many tokens are captured */

typedef struct cu_graph {
    uint64_t sig;
    dsr1_gpuGraphExec exec;
} cu_graph;

typedef struct cu_ws {
    cu_dev *dev;
    dsr1_ws_sizes s;
    dsr1_gpuStream st;
    /* the step */
    int n, max_pos, active;
    int moe_k;               /* topk of the last moe call (moe_choice's row) */
    int32_t *d_ids, *d_pos, *d_seq, *d_table;
    size_t table_cap;        /* int32 entries d_table holds */
    dsr1_step step;          /* a copy: the caller's struct may be its stack (core/forward.c) */
    cu_kv kv;
    int has_kv;
    /* pinned staging: host arena, device mirror at the same offsets */
    char *h_arena, *d_arena;
    size_t arena_cap, arena_used;
    cu_pending *pend;
    int n_pend, pend_cap;
    /* scratch */
    float *qcat, *olat, *h, *hu, *hk, *hku, *slots, *logits, *wgt, *sh, *route;
    int32_t *idx, *first, *order, *xrow, *active_e, *n_active;
    void *mla, *xq;
    size_t mla_bytes;
    /* graphs */
    int capturing;
    uint64_t sig;
    cu_graph graph[CU_GRAPH_SLOTS];
    int n_graphs;
    /* the first failure of the step */
    int err_code;
    char err_msg[512];
} cu_ws;

/* ---- helpers (cuda_backend.cu) ----------------------------------------------------- */

/* Fill err like dsr1_errorf (the library cannot call into the binary). */
int cu_errorf(dsr1_error *err, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Record the step's first failure (later ones are dropped). */
void cu_fail(cu_ws *w, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Check the last launch; records a failure naming `what`. Returns 0 ok. */
int cu_check(cu_ws *w, const char *what);
/* Mix values into the step's graph signature. */
void cu_sig(cu_ws *w, const void *p, size_t n);
/* Copy host bytes into the pinned arena and on to its device mirror
 * (asynchronously, in stream order); returns the device address or NULL
 * (failure recorded). */
void *cu_stage(cu_ws *w, const void *src, size_t bytes);
/* A slot of the arena for a device -> host copy; NULL when full. */
void *cu_arena_take(cu_ws *w, size_t bytes, void **dev_mirror);
int cu_pending_add(cu_ws *w, const void *src, void *dst, size_t row_bytes, int64_t ld_bytes, int rows);

static inline float *cu_view(dsr1_view v) { return v.buf->d + v.off; }

/* ---- the ops (cuda_ops.cu) ---------------------------------------------------------- */

void cu_op_write(void *ws, const float *src, int64_t lds, int n, int cols, dsr1_view dst);
void cu_op_read(void *ws, dsr1_view src, int n, int cols, float *dst, int64_t ldd);
void cu_op_gather(void *ws, dsr1_view src, const int32_t *rows, int n, int cols, dsr1_view dst);
void cu_op_scatter(void *ws, dsr1_view src, const int32_t *rows, int n, int cols, dsr1_view dst);
void cu_op_add(void *ws, dsr1_view y, dsr1_view x, int n, int cols);
void cu_op_embed(void *ws, const dsr1_bweight *table, dsr1_view out);
void cu_op_rmsnorm(void *ws, dsr1_view x, const dsr1_bweight *w, int dim, float eps, int n,
                   dsr1_view y);
void cu_op_matmul(void *ws, const dsr1_bweight *w, dsr1_view x, dsr1_view y, int n, dsr1_act act);
void cu_op_rope(void *ws, dsr1_view x, int heads, int64_t hstride, int rope_dim,
                const dsr1_bweight *freqs);
void cu_op_kv_store(void *ws, int layer, dsr1_view latent, dsr1_view pe);
void cu_op_mla_attention(void *ws, const dsr1_mla_args *a, dsr1_act act);
void cu_op_ffn(void *ws, const dsr1_bweight *gate, const dsr1_bweight *up, const dsr1_bweight *down,
               dsr1_view x, int n, dsr1_view y, dsr1_act act);
void cu_op_moe(void *ws, const dsr1_moe_weights *mw, const dsr1_moe_params *p, dsr1_view x, int n,
               dsr1_view y, dsr1_act act);
void cu_op_moe_choice(void *ws, int32_t *idx, int n);

#endif
