/*
 * cuda_ops.cu - the ops of a step for the CUDA/HIP backend (the second
 * half of the seam's table; cuda_backend.cu has the first): each op checks
 * the step's sticky error, mixes its arguments into the graph signature,
 * and enqueues kernels from the other .cu files on the workspace's stream.
 *
 * Host memory is touched only through the pinned arena: `write` copies the
 * caller's rows into it at once (the seam lets the caller reuse its memory
 * after step_end, we need it less long), `read` and `moe_choice` land there
 * and are copied out by step_end. Row lists of gather/scatter are staged the
 * same way, so a captured graph refreshes them from the same addresses.
 *
 * MLA and MoE are compositions: absorb (grouped matmul over heads) + q_pe
 * copy + split-KV attention + unabsorb; router matmul (float32) + route +
 * dispatch + grouped gate/up (SiLU fused) + grouped down scattered to
 * per-(token, k) slots + combine in k order with the shared experts.
 */
#include <string.h>

#include "cuda_backend.h"

enum { OP_WRITE = 1, OP_READ, OP_GATHER, OP_SCATTER, OP_ADD, OP_EMBED, OP_NORM, OP_MATMUL,
       OP_ROPE, OP_KV, OP_MLA, OP_FFN, OP_MOE, OP_CHOICE };

#define SIGV(w, v) cu_sig((w), &(v), sizeof(v))

/* Start an op: 0 when the step already failed (the op is skipped). */
static cu_ws *op_begin(void *ws, int op)
{
    cu_ws *w = (cu_ws *)ws;
    if (w->err_code) return NULL;
    SIGV(w, op);
    return w;
}

static void sig_view(cu_ws *w, dsr1_view v)
{
    SIGV(w, v.buf);
    SIGV(w, v.off);
    SIGV(w, v.ld);
}

/* ---- host <-> buffers, rows ------------------------------------------------------------ */

void cu_op_write(void *ws, const float *src, int64_t lds, int n, int cols, dsr1_view dst)
{
    cu_ws *w = op_begin(ws, OP_WRITE);
    if (!w || n <= 0 || cols <= 0) return;
    SIGV(w, n);
    SIGV(w, cols);
    sig_view(w, dst);
    void *dev;
    float *h = (float *)cu_arena_take(w, (size_t)n * (size_t)cols * 4, &dev);
    if (!h) return;
    for (int t = 0; t < n; t++) memcpy(h + (size_t)t * cols, src + t * lds, (size_t)cols * 4);
    if (dsr1_gpuMemcpy2DAsync(cu_view(dst), (size_t)dst.ld * 4, h, (size_t)cols * 4, (size_t)cols * 4,
                              (size_t)n, dsr1_gpuMemcpyHostToDevice, w->st) != dsr1_gpuSuccess)
        cu_check(w, "write");
}

void cu_op_read(void *ws, dsr1_view src, int n, int cols, float *dst, int64_t ldd)
{
    cu_ws *w = op_begin(ws, OP_READ);
    if (!w || n <= 0 || cols <= 0) return;
    SIGV(w, n);
    SIGV(w, cols);
    sig_view(w, src);
    void *dev;
    float *h = (float *)cu_arena_take(w, (size_t)n * (size_t)cols * 4, &dev);
    if (!h) return;
    if (dsr1_gpuMemcpy2DAsync(h, (size_t)cols * 4, cu_view(src), (size_t)src.ld * 4, (size_t)cols * 4,
                              (size_t)n, dsr1_gpuMemcpyDeviceToHost, w->st) != dsr1_gpuSuccess) {
        cu_check(w, "read");
        return;
    }
    cu_pending_add(w, h, dst, (size_t)cols * 4, ldd * 4, n);
}

static void rows_op(void *ws, int op, dsr1_view src, const int32_t *rows, int n, int cols, dsr1_view dst)
{
    cu_ws *w = op_begin(ws, op);
    if (!w || n <= 0) return;
    SIGV(w, n);
    SIGV(w, cols);
    sig_view(w, src);
    sig_view(w, dst);
    const int32_t *d_rows = (const int32_t *)cu_stage(w, rows, (size_t)n * 4);
    if (!d_rows) return;
    if (op == OP_GATHER)
        cu_gather_rows(w->st, cu_view(dst), dst.ld, cu_view(src), src.ld, d_rows, cols, n);
    else
        cu_scatter_rows(w->st, cu_view(dst), dst.ld, cu_view(src), src.ld, d_rows, cols, n);
    cu_check(w, op == OP_GATHER ? "gather" : "scatter");
}

void cu_op_gather(void *ws, dsr1_view src, const int32_t *rows, int n, int cols, dsr1_view dst)
{
    rows_op(ws, OP_GATHER, src, rows, n, cols, dst);
}

void cu_op_scatter(void *ws, dsr1_view src, const int32_t *rows, int n, int cols, dsr1_view dst)
{
    rows_op(ws, OP_SCATTER, src, rows, n, cols, dst);
}

void cu_op_add(void *ws, dsr1_view y, dsr1_view x, int n, int cols)
{
    cu_ws *w = op_begin(ws, OP_ADD);
    if (!w) return;
    SIGV(w, n);
    SIGV(w, cols);
    sig_view(w, y);
    sig_view(w, x);
    cu_add_rows(w->st, cu_view(y), y.ld, cu_view(x), x.ld, cols, n, 1);
    cu_check(w, "add");
}

/* ---- elementwise stages ------------------------------------------------------------------ */

void cu_op_embed(void *ws, const dsr1_bweight *table, dsr1_view out)
{
    cu_ws *w = op_begin(ws, OP_EMBED);
    if (!w) return;
    SIGV(w, table);
    sig_view(w, out);
    if (!w->step.ids) {
        cu_fail(w, DSR1_EINVAL, "%s embed: the step has no token ids", DSR1_GPU_NAME);
        return;
    }
    cu_embed(w->st, &table->m, w->d_ids, w->n, cu_view(out), out.ld);
    cu_check(w, "embed");
}

void cu_op_rmsnorm(void *ws, dsr1_view x, const dsr1_bweight *wt, int dim, float eps, int n, dsr1_view y)
{
    cu_ws *w = op_begin(ws, OP_NORM);
    if (!w) return;
    SIGV(w, wt);
    SIGV(w, dim);
    SIGV(w, eps);
    SIGV(w, n);
    sig_view(w, x);
    sig_view(w, y);
    if (wt->m.type != CU_T_F32 || wt->m.cols < dim) {
        cu_fail(w, DSR1_EINVAL, "%s rmsnorm: weight of %lld F32 values expected", DSR1_GPU_NAME,
                (long long)dim);
        return;
    }
    cu_rmsnorm(w->st, cu_view(x), x.ld, NULL, 0, (const float *)wt->m.data, dim, eps, n, cu_view(y), y.ld);
    cu_check(w, "rmsnorm");
}

void cu_op_rope(void *ws, dsr1_view x, int heads, int64_t hstride, int rope_dim, const dsr1_bweight *freqs)
{
    cu_ws *w = op_begin(ws, OP_ROPE);
    if (!w) return;
    SIGV(w, heads);
    SIGV(w, hstride);
    SIGV(w, rope_dim);
    SIGV(w, freqs);
    sig_view(w, x);
    if (!w->step.pos) {
        cu_fail(w, DSR1_EINVAL, "%s rope: the step has no positions", DSR1_GPU_NAME);
        return;
    }
    cu_rope(w->st, cu_view(x), x.ld, heads, hstride, rope_dim, (const float *)freqs->m.data, w->d_pos, w->n);
    cu_check(w, "rope");
}

void cu_op_kv_store(void *ws, int layer, dsr1_view latent, dsr1_view pe)
{
    cu_ws *w = op_begin(ws, OP_KV);
    if (!w) return;
    SIGV(w, layer);
    sig_view(w, latent);
    sig_view(w, pe);
    if (!w->has_kv || !w->step.pos || !w->step.seq) {
        cu_fail(w, DSR1_EINVAL, "%s kv_store: the step has no cache, positions or slots", DSR1_GPU_NAME);
        return;
    }
    cu_kv_store(w->st, &w->kv, layer, cu_view(latent), latent.ld, cu_view(pe), pe.ld, w->d_seq, w->d_pos, w->n);
    cu_check(w, "kv_store");
}

/* ---- matmul and FFN ------------------------------------------------------------------------- */

static void mm(cu_ws *w, const cu_wmat *m, const cu_wmat *up, const float *x, int64_t ldx, float *y,
               int64_t ldy, int n, int act, const cu_mm_rows *rows, const char *what)
{
    char msg[256];
    if (w->err_code) return;
    if (cu_matmul(w->st, m, up, x, ldx, y, ldy, n, act, rows, w->xq, msg, sizeof msg) != 0)
        cu_fail(w, DSR1_EIO, "%s (%s)", msg, what);
}

void cu_op_matmul(void *ws, const dsr1_bweight *wt, dsr1_view x, dsr1_view y, int n, dsr1_act act)
{
    cu_ws *w = op_begin(ws, OP_MATMUL);
    if (!w) return;
    SIGV(w, wt);
    SIGV(w, n);
    SIGV(w, act);
    sig_view(w, x);
    sig_view(w, y);
    mm(w, &wt->m, NULL, cu_view(x), x.ld, cu_view(y), y.ld, n, act, NULL, "matmul");
}

/* y = down(silu(gate x) * up x) over rows g (NULL: plain), hidden in h/hu
 * (row stride I). Fused gate/up where the modes allow it. */
static void gated_mlp(cu_ws *w, const cu_wmat *gate, const cu_wmat *up, const cu_wmat *down,
                      const float *x, int64_t ldx, int n, float *h, float *hu, int hrows, float *y,
                      int64_t ldy, int act, const cu_mm_rows *g, const cu_mm_rows *gd)
{
    int64_t I = gate->rows;
    int fuse = gate->type == up->type && gate->cols == up->cols && gate->rows == up->rows &&
               gate->group == up->group && gate->scale_type == up->scale_type &&
               cu_mm_effective_act(act, gate) != CU_ACT_INT8;
    if (fuse) {
        mm(w, gate, up, x, ldx, h, I, n, act, g, "gate/up");
    } else {
        mm(w, gate, NULL, x, ldx, h, I, n, act, g, "gate");
        mm(w, up, NULL, x, ldx, hu, I, n, act, g, "up");
        if (!w->err_code) cu_silu_mul(w->st, h, hu, (int64_t)hrows * I);
    }
    mm(w, down, NULL, h, I, y, ldy, n, act, gd, "down");
    cu_check(w, "ffn");
}

void cu_op_ffn(void *ws, const dsr1_bweight *gate, const dsr1_bweight *up, const dsr1_bweight *down,
               dsr1_view x, int n, dsr1_view y, dsr1_act act)
{
    cu_ws *w = op_begin(ws, OP_FFN);
    if (!w) return;
    SIGV(w, gate);
    SIGV(w, up);
    SIGV(w, down);
    SIGV(w, n);
    SIGV(w, act);
    sig_view(w, x);
    sig_view(w, y);
    gated_mlp(w, &gate->m, &up->m, &down->m, cu_view(x), x.ld, n, w->h, w->hu, n, cu_view(y), y.ld,
              act, NULL, NULL);
}

/* ---- MLA ------------------------------------------------------------------------------------- */

void cu_op_mla_attention(void *ws, const dsr1_mla_args *a, dsr1_act act)
{
    cu_ws *w = op_begin(ws, OP_MLA);
    if (!w) return;
    int H = a->n_heads, r = a->kv_lora_rank, qk = a->qk_nope + a->rope_dim, row = r + a->rope_dim;
    int nsplit = (w->max_pos + CU_MLA_SPLIT) / CU_MLA_SPLIT;
    int vals[] = {a->n, H, a->qk_nope, a->rope_dim, a->v_dim, r, a->layer, (int)act, nsplit};
    cu_sig(w, vals, sizeof vals);
    SIGV(w, a->scale);
    SIGV(w, a->wk_t);
    SIGV(w, a->wv);
    sig_view(w, a->q);
    sig_view(w, a->out);
    if (!w->has_kv || !w->step.pos || !w->step.seq || a->n != w->n || H > w->s.n_heads || r > w->s.kv_lora_rank ||
        a->wk_t->m.count != H || a->wv->m.count != H || row != w->kv.row) {
        cu_fail(w, DSR1_EINVAL, "%s attention: %d tokens x %d heads, rank %d: does not match the step "
                "(%d tokens), workspace or cache", DSR1_GPU_NAME, a->n, H, r, w->n);
        return;
    }
    const float *q = cu_view(a->q);
    /* 1. absorb: qcat[t][h][0..r) = wk_t[h] q_nope[t][h] */
    cu_mm_rows ga = {H, NULL, NULL, NULL, NULL, NULL, qk, row, 0};
    mm(w, &a->wk_t->m, NULL, q, a->q.ld, w->qcat, (int64_t)H * row, a->n, act, &ga, "attention absorb");
    if (w->err_code) return;
    cu_copy_heads(w->st, w->qcat + r, row, q + a->qk_nope, a->q.ld, qk, H, a->rope_dim, a->n);
    /* 2-4. scores, softmax, latent values */
    char msg[256];
    if (cu_mla_attend(w->st, &w->kv, a->layer, w->qcat, H, a->scale, w->d_seq, w->d_pos, a->n,
                      w->max_pos, w->olat, w->mla, w->mla_bytes, msg, sizeof msg) != 0) {
        cu_fail(w, DSR1_EIO, "%s", msg);
        return;
    }
    /* 5. unabsorb: out[t][h] = wv[h] olat[t][h] */
    cu_mm_rows gu = {H, NULL, NULL, NULL, NULL, NULL, r, a->v_dim, 0};
    mm(w, &a->wv->m, NULL, w->olat, (int64_t)H * r, cu_view(a->out), a->out.ld, a->n, act, &gu,
       "attention unabsorb");
}

/* ---- MoE --------------------------------------------------------------------------------------- */

void cu_op_moe(void *ws, const dsr1_moe_weights *mw, const dsr1_moe_params *p, dsr1_view x, int n,
               dsr1_view y, dsr1_act act)
{
    cu_ws *w = op_begin(ws, OP_MOE);
    if (!w) return;
    int E = p->n_experts, K = p->topk, D = (int)mw->router->m.cols;
    int vals[] = {E, K, p->n_group, p->topk_group, (int)p->scoring, (int)p->method, (int)p->family,
                  p->norm_topk_prob, n, (int)act, mw->has_shared};
    cu_sig(w, vals, sizeof vals);
    SIGV(w, p->routed_scaling_factor);
    const void *ptrs[] = {mw->router, mw->bias, mw->gate, mw->up, mw->down, mw->sh_gate, mw->sh_up, mw->sh_down};
    cu_sig(w, ptrs, sizeof ptrs);
    sig_view(w, x);
    sig_view(w, y);
    if (E > w->s.n_experts || K > w->s.topk || n > w->s.max_tokens || mw->gate->m.count != E) {
        cu_fail(w, DSR1_EINVAL, "%s moe: %d experts top-%d over the workspace's %d top-%d", DSR1_GPU_NAME,
                E, K, w->s.n_experts, w->s.topk);
        return;
    }
    w->moe_k = K;
    const float *xp = cu_view(x);
    /* router in float32 (selection is sensitive to rounding) */
    mm(w, &mw->router->m, NULL, xp, x.ld, w->logits, E, n, CU_ACT_F32, NULL, "router");
    if (w->err_code) return;
    cu_moe_params mp = {E, K, p->n_group > 0 ? p->n_group : 1, p->topk_group > 0 ? p->topk_group : 1,
                        p->scoring == DSR1_SCORE_SIGMOID, (int)p->method, p->family == DSR1_FAMILY_V3,
                        p->norm_topk_prob, p->routed_scaling_factor};
    cu_moe_route(w->st, &mp, w->logits, mw->bias ? (const float *)mw->bias->m.data : NULL, n, w->idx,
                 w->wgt, w->route);
    cu_moe_dispatch(w->st, w->idx, n, K, E, w->first, w->order, w->xrow, w->active_e, w->n_active);
    if (cu_check(w, "moe routing")) return;
    int groups = n * K < E ? n * K : E;
    /* each active expert once over its tokens: rows in bucket order */
    cu_mm_rows gu = {groups, w->n_active, w->first, w->active_e, w->xrow, NULL, 0, 0, n};
    cu_mm_rows gd = {groups, w->n_active, w->first, w->active_e, NULL, w->order, 0, 0, n * K};
    gated_mlp(w, &mw->gate->m, &mw->up->m, &mw->down->m, xp, x.ld, n, w->hk, w->hku, n * K, w->slots,
              D, act, &gu, &gd);
    if (mw->has_shared)
        gated_mlp(w, &mw->sh_gate->m, &mw->sh_up->m, &mw->sh_down->m, xp, x.ld, n, w->h, w->hu, n, w->sh,
                  D, act, NULL, NULL);
    if (w->err_code) return;
    cu_moe_combine(w->st, w->slots, w->wgt, w->idx, mw->has_shared ? w->sh : NULL, n, K, D, cu_view(y), y.ld);
    cu_check(w, "moe combine");
}

void cu_op_moe_choice(void *ws, int32_t *idx, int n)
{
    cu_ws *w = op_begin(ws, OP_CHOICE);
    if (!w || n <= 0) return;
    int K = w->moe_k;
    SIGV(w, n);
    SIGV(w, K);
    if (K <= 0) {
        cu_fail(w, DSR1_EINVAL, "%s moe_choice: no moe call before it", DSR1_GPU_NAME);
        return;
    }
    void *dev;
    void *h = cu_arena_take(w, (size_t)n * (size_t)K * 4, &dev);
    if (!h) return;
    if (dsr1_gpuMemcpyAsync(h, w->idx, (size_t)n * (size_t)K * 4, dsr1_gpuMemcpyDeviceToHost, w->st) !=
        dsr1_gpuSuccess) {
        cu_check(w, "moe_choice");
        return;
    }
    cu_pending_add(w, h, idx, (size_t)n * (size_t)K * 4, 0, 1);
}
