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

/* Run expert e on its tokens, writing their slots. */
static void run_expert(cpu_ws *w, const dsr1_moe_weights *mw, int e, const float *x, int K,
                       dsr1_act act)
{
    int D = w->s.hidden, cnt = w->first[e + 1] - w->first[e];
    const int32_t *ord = w->order + w->first[e];
    for (int i = 0; i < cnt; i++)
        memcpy(w->xg + (size_t)i * D, x + (size_t)(ord[i] / K) * D, (size_t)D * sizeof(float));
    dsr1_cpu_gated_mlp(w, dsr1_cpu_mat(mw->gate, e), dsr1_cpu_mat(mw->up, e),
                       dsr1_cpu_mat(mw->down, e), w->xg, D, cnt, w->yg, D, act);
    for (int i = 0; i < cnt; i++)
        memcpy(w->slots + (size_t)ord[i] * D, w->yg + (size_t)i * D, (size_t)D * sizeof(float));
}

void dsr1_cpu_moe(void *wsp, const dsr1_moe_weights *mw, const dsr1_moe_params *p, dsr1_view xv,
                  int n, dsr1_view yv, dsr1_act act)
{
    cpu_ws *w = wsp;
    int D = w->s.hidden, E = p->n_experts, K = p->topk;
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
    for (int e = 0; e < E; e++)
        if (w->first[e + 1] > w->first[e]) run_expert(w, mw, e, x, K, act);
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
