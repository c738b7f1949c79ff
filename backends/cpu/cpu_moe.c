/*
 * cpu_moe.c - the MoE op of backends/backend.h on the CPU:
 *
 *   1. router logits for all tokens (float32: selection is sensitive to
 *      rounding, and the router is tiny), routing per token (core/moe.c);
 *   2. dispatch: the batch's (token, k) pairs grouped by expert, so each
 *      active expert runs its three matmuls once on all of its tokens;
 *   3. combine per token in routing order, then the shared experts.
 *
 * Expert outputs land in per-(token, k) slots and are summed per token in
 * a fixed order, so a token's result does not depend on who else is in the
 * batch (the matmul kernels already promise that per row).
 *
 * A token whose router logits are not all finite (a NaN weight, a bad
 * loaded cache) is routed nowhere: its experts are -1 and its output is
 * NaN, which reaches its logits, where the engine fails that sequence
 * alone (backend.h). The other tokens of the batch are untouched.
 *
 * NUMA (numa.c): with more than one node, step 2 runs node by node at
 * once, each node's experts on its own pool and buffers (a lane); the
 * slots each expert writes are its own, so nodes never write the same
 * bytes, and the kernels give the same bits on any pool, so the result
 * is the one-node result. A workspace given its own thread count
 * (ws_threads) runs on that pool alone, as before.
 */
#include <math.h>
#include <string.h>

#include "core/moe.h"
#include "cpu_backend.h"

/* Bucket the (token, k) pairs by expert: first[e]..first[e+1] in order. */
static void dispatch(cpu_ws *w, int n, int K, int E)
{
    memset(w->count, 0, (size_t)E * sizeof *w->count);
    for (int i = 0; i < n * K; i++)
        if (w->eidx[i] >= 0) w->count[w->eidx[i]]++;
    w->first[0] = 0;
    for (int e = 0; e < E; e++) w->first[e + 1] = w->first[e] + w->count[e];
    memset(w->count, 0, (size_t)E * sizeof *w->count);
    for (int i = 0; i < n * K; i++) {
        int e = w->eidx[i];
        if (e < 0) continue;
        w->order[w->first[e] + w->count[e]++] = i;
    }
}

/* Run expert e on its tokens with pool p and buffers l, writing their slots. */
static void run_expert(cpu_ws *w, dsr1_pool *p, const cpu_lane *l, const dsr1_moe_weights *mw,
                       int e, const float *x, int K, dsr1_act act)
{
    int D = w->s.hidden, cnt = w->first[e + 1] - w->first[e];
    const int32_t *ord = w->order + w->first[e];
    for (int i = 0; i < cnt; i++)
        memcpy(l->xg + (size_t)i * D, x + (size_t)(ord[i] / K) * D, (size_t)D * sizeof(float));
    dsr1_cpu_gated_mlp_on(p, l->ha, l->hb, dsr1_cpu_mat(mw->gate, e), dsr1_cpu_mat(mw->up, e),
                          dsr1_cpu_mat(mw->down, e), l->xg, D, cnt, l->yg, D, act);
    for (int i = 0; i < cnt; i++)
        memcpy(w->slots + (size_t)ord[i] * D, l->yg + (size_t)i * D, (size_t)D * sizeof(float));
}

typedef struct node_job {
    cpu_ws *w;
    const dsr1_moe_weights *mw;
    const float *x;
    int K, E;
    dsr1_act act;
} node_job;

/* The team's task for node k: its active experts, in expert order. */
static void run_node(void *ctx, int k)
{
    node_job *j = ctx;
    cpu_ws *w = j->w;
    const int32_t *node = j->mw->gate->node;
    for (int e = 0; e < j->E; e++)
        if (node[e] == k && w->first[e + 1] > w->first[e])
            run_expert(w, w->dev->npool[k], &w->lane[k], j->mw, e, j->x, j->K, j->act);
}

/* The nodes' lanes serve this call: one node per lane, and the experts'
 * map covers the stack (a stack loaded as a matrix has none). */
static int by_node(const cpu_ws *w, const dsr1_moe_weights *mw, int E)
{
    return w->lane && !w->own_pool && w->dev->team && mw->gate->node &&
           mw->gate->count >= E && w->n_lanes == dsr1_cpu_numa_nodes(w->dev);
}

void dsr1_cpu_moe(void *wsp, const dsr1_moe_weights *mw, const dsr1_moe_params *p, dsr1_view xv,
                  int n, dsr1_view yv, dsr1_act act)
{
    cpu_ws *w = wsp;
    int D = w->s.hidden, E = p->n_experts, K = p->topk;
    act = dsr1_cpu_act(w, act);
    DSR1_ASSERT(n <= w->s.max_tokens && E <= w->s.n_experts && K <= w->s.topk);
    /* gathered rows are read with stride D: make x dense first if needed */
    const float *x = dsr1_cpu_ptr(xv);
    float *y = dsr1_cpu_ptr(yv);
    DSR1_ASSERT(xv.ld == D && yv.ld == D);
    const float *bias = mw->bias ? dsr1_cpu_mat(mw->bias, 0)->data : NULL;
    dsr1_matmul(dsr1_cpu_pool(w), dsr1_cpu_mat(mw->router, 0), x, D, w->router, E, n, DSR1_ACT_F32);
    for (int t = 0; t < n; t++)
        (void)dsr1_moe_route(p, w->router + (size_t)t * E, bias, w->eidx + (size_t)t * K,
                             w->ew + (size_t)t * K, w->route_scratch);
    dispatch(w, n, K, E);
    if (by_node(w, mw, E)) {
        node_job j = {w, mw, x, K, E, act};
        dsr1_numa_team_run(w->dev->team, run_node, &j);
        w->numa_runs++;
    } else {
        cpu_lane l = {w->xg, w->yg, w->ha, w->hb};
        for (int e = 0; e < E; e++)
            if (w->first[e + 1] > w->first[e]) run_expert(w, dsr1_cpu_pool(w), &l, mw, e, x, K, act);
    }
    if (mw->has_shared)
        dsr1_cpu_gated_mlp(w, dsr1_cpu_mat(mw->sh_gate, 0), dsr1_cpu_mat(mw->sh_up, 0),
                           dsr1_cpu_mat(mw->sh_down, 0), x, D, n, w->sh, D, act);
    for (int t = 0; t < n; t++) {
        float *yr = y + (size_t)t * D;
        if (w->eidx[(size_t)t * K] < 0) { /* not routed: scores not finite */
            for (int i = 0; i < D; i++) yr[i] = NAN;
            continue;
        }
        memset(yr, 0, (size_t)D * sizeof(float));
        for (int k = 0; k < K; k++) {
            const float *s = w->slots + ((size_t)t * K + k) * D;
            float wk = w->ew[(size_t)t * K + k];
            for (int i = 0; i < D; i++) yr[i] += wk * s[i];
        }
        if (mw->has_shared)
            for (int i = 0; i < D; i++) yr[i] += w->sh[(size_t)t * D + i];
    }
}

void dsr1_cpu_moe_choice(void *wsp, int32_t *idx, int n)
{
    cpu_ws *w = wsp;
    DSR1_ASSERT(n <= w->s.max_tokens);
    memcpy(idx, w->eidx, (size_t)n * (size_t)w->s.topk * sizeof *idx);
}
