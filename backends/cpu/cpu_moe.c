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
 *
 * Experts side by side: on one node, from EP_MIN_N tokens (a prefill
 * chunk) and with at least two active experts per thread, step 2 gives
 * each thread whole experts instead of splitting every expert's three
 * matmuls over all threads: each thread claims the next expert, the ones
 * with most tokens first, and runs it alone on its one-thread pool
 * (w->hpool[k]) and buffers (w->tlane[k]). Split, each expert cost four
 * pool runs (x quantised, gate+up, h quantised, down), each ending when
 * the slowest thread's share did, with the gather and scatter of its rows
 * on one thread while the others waited; side by side, one run per MoE
 * call. Same bits: the same kernels on a different pool. Measured (R1
 * shapes, 32 experts, Zen 5, 2 threads, the two paths alternated within
 * one process, medians of 4 each): prefill 512 FP8 +4%, INT8 +7%, INT4
 * +4%; prefill 16 INT8 +2%, FP8 +14% (PERFORMANCE.md).
 * Decode steps (fewer tokens) keep every expert's matmuls split over all
 * threads - 8 experts of one token are too few to balance thread by
 * thread - but run them all at once (by_batch): every gate+up in one pool
 * run, every down in another, instead of two runs per expert. Same bits
 * (each matmul is the one it was). Measured in one process, decode steps
 * alternating the two ways (R1-shape INT8 file, 32 experts, Zen 5, 2
 * threads): batch 1 +0.0/+0.2/+0.7% a step, batch 8 +1.6/+1.9/-0.8%; the
 * runs' tails were not what held the experts below the LM head's speed.
 */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
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

#define EP_MIN_N 16   /* fewest tokens in a call for experts side by side */
#define EP_ROWS 256   /* tokens a thread's lane holds (an expert's beyond: in parts) */

/* Run expert e on its tokens with pool p and buffers l (rows tokens),
 * writing their slots. More tokens than rows go in even parts: none
 * smaller than rows / 2, so each part takes the kernels the whole would
 * (their choice depends on the token count only below that), and every
 * token's row is the same bits (the kernels promise it per row). */
static void run_expert(cpu_ws *w, dsr1_pool *p, const cpu_lane *l, int rows,
                       const dsr1_moe_weights *mw, int e, const float *x, int K, dsr1_act act)
{
    int D = w->s.hidden, cnt = w->first[e + 1] - w->first[e], parts = (cnt + rows - 1) / rows;
    for (int k = 0; k < parts; k++) {
        int i0 = (int)((int64_t)cnt * k / parts), i1 = (int)((int64_t)cnt * (k + 1) / parts);
        const int32_t *ord = w->order + w->first[e] + i0;
        for (int i = 0; i < i1 - i0; i++)
            memcpy(l->xg + (size_t)i * D, x + (size_t)(ord[i] / K) * D, (size_t)D * sizeof(float));
        dsr1_cpu_gated_mlp_on(p, l->ha, l->hb, dsr1_cpu_mat(mw->gate, e), dsr1_cpu_mat(mw->up, e),
                              dsr1_cpu_mat(mw->down, e), l->xg, D, i1 - i0, l->yg, D, act);
        for (int i = 0; i < i1 - i0; i++)
            memcpy(w->slots + (size_t)ord[i] * D, l->yg + (size_t)i * D, (size_t)D * sizeof(float));
    }
}

/* Experts run at once, node by node or thread by thread: what each driver
 * needs (E for node by node; ord, ne, next for thread by thread). */
typedef struct moe_job {
    cpu_ws *w;
    const dsr1_moe_weights *mw;
    const float *x;
    int K, E, ne;
    dsr1_act act;
    const int32_t *ord;  /* [ne] active experts, most tokens first */
    atomic_int next;     /* the next of ord to claim */
} moe_job;

/* ---- experts side by side --------------------------------------------------------- */

void dsr1_cpu_lanes_free(cpu_lane *l, int n)
{
    for (int k = 0; k < n && l; k++) {
        free(l[k].xg);
        free(l[k].yg);
        free(l[k].ha);
        free(l[k].hb);
    }
    free(l);
}

void dsr1_cpu_moe_lanes_free(cpu_ws *w)
{
    dsr1_cpu_lanes_free(w->tlane, w->n_tlanes);
    w->tlane = NULL;
    w->n_tlanes = 0;
}

int dsr1_cpu_moe_lanes(cpu_ws *w)
{
    int n = w->n_hpools;
    if (n < 2 || w->s.n_experts < 2 || w->s.moe_inter < 1 || n <= w->n_tlanes) return 0;
    size_t R = (size_t)(w->s.max_tokens < EP_ROWS ? w->s.max_tokens : EP_ROWS);
    size_t D = (size_t)w->s.hidden, I = (size_t)w->s.moe_inter, in = I > D ? I : D;
    /* a one-thread pool's scratch for R tokens: x as int8 or bf16 (padded),
     * gate+up's up half, the kernels' blocks */
    size_t need = R * (2 * in + 128) + 128 + R * I * 4 + 64 + ((size_t)2 << 20);
    cpu_lane *l = calloc((size_t)n, sizeof *l);
    int bad = !l;
    for (int k = 0; k < n && !bad; k++) {
        l[k].xg = malloc(R * D * 4);
        l[k].yg = malloc(R * D * 4);
        l[k].ha = malloc(R * I * 4);
        l[k].hb = malloc(R * I * 4);
        bad = !l[k].xg || !l[k].yg || !l[k].ha || !l[k].hb || dsr1_pool_reserve(w->hpool[k], need, NULL);
        if (bad) break;
        /* faults now, not in the first prefill (dsr1_touch) */
        dsr1_touch(l[k].xg, R * D * 4), dsr1_touch(l[k].yg, R * D * 4);
        dsr1_touch(l[k].ha, R * I * 4), dsr1_touch(l[k].hb, R * I * 4);
    }
    if (bad) {
        dsr1_cpu_lanes_free(l, n);
        return DSR1_ENOMEM;
    }
    dsr1_cpu_moe_lanes_free(w);
    w->tlane = l;
    w->n_tlanes = n;
    w->tl_rows = (int)R;
    return 0;
}


static void ep_task(void *ctx, int k, int nt)
{
    (void)nt;
    moe_job *j = ctx;
    for (int i; (i = atomic_fetch_add(&j->next, 1)) < j->ne;)
        run_expert(j->w, j->w->hpool[k], &j->w->tlane[k], j->w->tl_rows, j->mw, j->ord[i], j->x, j->K,
                   j->act);
}

/* Experts side by side when the call has the tokens and the workspace the
 * lanes for it; the active experts go into w->count (free after dispatch)
 * ordered by tokens, most first (ties by expert: the same order every run). */
static int by_thread(cpu_ws *w, const dsr1_moe_weights *mw, const float *x, int n, int K, int E,
                     dsr1_act act)
{
    int P = dsr1_pool_size(dsr1_cpu_pool(w)), ne = 0;
    if (n < EP_MIN_N || P < 2 || w->n_tlanes < P) return 0;
    int32_t *ord = w->count;
    for (int e = 0; e < E; e++) {
        int c = w->first[e + 1] - w->first[e], b = ne;
        if (!c) continue;
        for (; b > 0 && w->first[ord[b - 1] + 1] - w->first[ord[b - 1]] < c; b--) ord[b] = ord[b - 1];
        ord[b] = e;
        ne++;
    }
    if (ne < 2 * P) return 0;
    moe_job j = {.w = w, .mw = mw, .x = x, .K = K, .E = E, .ne = ne, .act = act, .ord = ord};
    atomic_init(&j.next, 0);
    dsr1_pool_run(dsr1_cpu_pool(w), ep_task, &j, P);
    w->ep_runs++;
    return 1;
}


/* ---- a decode step's experts in two runs ------------------------------------------- */

#define MB_MAX_N 16 /* most tokens a call takes this way: prefill chunks go side by side */

/* Every active expert's gate+up, and the shared expert's, in one pool run;
 * then every down in another. Split expert by expert these were two runs
 * per expert, each ending on the slower thread's last task. Each matmul
 * is the one run_expert and dsr1_cpu_gated_mlp make (same matrices,
 * tokens and kernels), so the same bits. An expert with one token reads
 * its row of x and writes its slot in place; others gather into xg and
 * scatter from yg. *shared: the shared expert ran here (it does unless
 * dsr1_cpu_gated_mlp would give it oneDNN). */
static int by_batch(cpu_ws *w, const dsr1_moe_weights *mw, const float *x, int n, int K, int E,
                    dsr1_act act, int *shared)
{
    const int D = w->s.hidden, P = w->first[E];
    const dsr1_wmat *g0 = dsr1_cpu_mat(mw->gate, 0), *u0 = dsr1_cpu_mat(mw->up, 0);
    *shared = 0;
    if (n > MB_MAX_N || P + n > w->s.max_tokens || g0->type != u0->type) return 0;
    const int64_t I = g0->rows;
    dsr1_mm_item *it = w->items;
    int m = 0;
    for (int e = 0; e < E; e++) {
        int f = w->first[e], cnt = w->first[e + 1] - f;
        if (!cnt) continue;
        const float *xe = x + (size_t)(w->order[f] / K) * D;
        if (cnt > 1) {
            for (int i = 0; i < cnt; i++)
                memcpy(w->xg + (size_t)(f + i) * D, x + (size_t)(w->order[f + i] / K) * D,
                       (size_t)D * sizeof(float));
            xe = w->xg + (size_t)f * D;
        }
        it[m++] = (dsr1_mm_item){dsr1_cpu_mat(mw->gate, e), dsr1_cpu_mat(mw->up, e), xe, D,
                                 w->ha + (size_t)f * I, I, cnt};
    }
    const int routed = m;
    float *hs = w->ha + (size_t)P * I; /* the shared expert's hidden rows */
    if (mw->has_shared) {
        const dsr1_wmat *sg = dsr1_cpu_mat(mw->sh_gate, 0), *su = dsr1_cpu_mat(mw->sh_up, 0);
        const dsr1_wmat *sd = dsr1_cpu_mat(mw->sh_down, 0);
        *shared = sg->type == su->type && !dsr1_cpu_take_dnnl(w, sd, n, act) &&
                  !(dsr1_cpu_take_dnnl(w, sg, n, act) && dsr1_cpu_take_dnnl(w, su, n, act));
        if (*shared) it[m++] = (dsr1_mm_item){sg, su, x, D, hs, sg->rows, n};
    }
    dsr1_pool *p = dsr1_cpu_pool(w);
    dsr1_matmul_batch(p, it, m, act);
    for (int i = 0; i < routed; i++) {
        int f = (int)((it[i].y - w->ha) / I), cnt = it[i].n;
        int e = w->order[f]; /* any pair of the expert names it */
        e = w->eidx[e];
        float *ye = cnt > 1 ? w->yg + (size_t)f * D : w->slots + (size_t)w->order[f] * D;
        it[i] = (dsr1_mm_item){dsr1_cpu_mat(mw->down, e), NULL, w->ha + (size_t)f * I, I, ye, D, cnt};
    }
    if (*shared)
        it[m - 1] = (dsr1_mm_item){dsr1_cpu_mat(mw->sh_down, 0), NULL, hs, it[m - 1].w->rows, w->sh, D, n};
    dsr1_matmul_batch(p, it, m, act);
    for (int i = 0; i < routed; i++)
        if (it[i].n > 1) {
            int f = (int)((it[i].x - w->ha) / I);
            for (int k = 0; k < it[i].n; k++)
                memcpy(w->slots + (size_t)w->order[f + k] * D, w->yg + (size_t)(f + k) * D,
                       (size_t)D * sizeof(float));
        }
    w->batch_runs++;
    return 1;
}

/* The team's task for node k: its active experts, in expert order. */
static void run_node(void *ctx, int k)
{
    moe_job *j = ctx;
    cpu_ws *w = j->w;
    const int32_t *node = j->mw->gate->node;
    for (int e = 0; e < j->E; e++)
        if (node[e] == k && w->first[e + 1] > w->first[e])
            run_expert(w, w->dev->npool[k], &w->lane[k], w->s.max_tokens, j->mw, e, j->x, j->K, j->act);
}

/* The nodes' lanes serve this call: one node per lane, and the experts'
 * map covers the stack (a stack loaded as a matrix has none). */
static int by_node(const cpu_ws *w, const dsr1_moe_weights *mw, int E)
{
    return w->lane && !w->own_pool && w->dev->team && mw->gate->node &&
           mw->gate->count >= E && w->n_lanes == dsr1_cpu_numa_nodes(w->dev);
}

/* ---- combine ------------------------------------------------------------------------ */

typedef struct combine_job {
    const cpu_ws *w;
    float *y;
    int n, K, shared;
} combine_job;

/* y for tokens [t0, t1): the routed slots weighted, in routing order, then
 * the shared experts' output; each token on its own, in a fixed order,
 * whichever thread sums it. */
static void combine_rows(void *ctx, int t0, int t1)
{
    const combine_job *c = ctx;
    const cpu_ws *w = c->w;
    int D = w->s.hidden, K = c->K;
    for (int t = t0; t < t1; t++) {
        float *yr = c->y + (size_t)t * D;
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
        if (c->shared)
            for (int i = 0; i < D; i++) yr[i] += w->sh[(size_t)t * D + i];
    }
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
    int shared = 0; /* the shared expert ran with the routed ones */
    if (by_node(w, mw, E)) {
        moe_job j = {.w = w, .mw = mw, .x = x, .K = K, .E = E, .act = act};
        dsr1_numa_team_run(w->dev->team, run_node, &j);
        w->numa_runs++;
    } else if (!by_thread(w, mw, x, n, K, E, act) && !by_batch(w, mw, x, n, K, E, act, &shared)) {
        cpu_lane l = {w->xg, w->yg, w->ha, w->hb};
        for (int e = 0; e < E; e++)
            if (w->first[e + 1] > w->first[e])
                run_expert(w, dsr1_cpu_pool(w), &l, w->s.max_tokens, mw, e, x, K, act);
    }
    if (mw->has_shared && !shared)
        dsr1_cpu_gated_mlp(w, dsr1_cpu_mat(mw->sh_gate, 0), dsr1_cpu_mat(mw->sh_up, 0),
                           dsr1_cpu_mat(mw->sh_down, 0), x, D, n, w->sh, D, act);
    combine_job c = {w, y, n, K, mw->has_shared};
    dsr1_cpu_par_rows(w, n, combine_rows, &c);
}

void dsr1_cpu_moe_choice(void *wsp, int32_t *idx, int n)
{
    cpu_ws *w = wsp;
    DSR1_ASSERT(n <= w->s.max_tokens);
    memcpy(idx, w->eidx, (size_t)n * (size_t)w->s.topk * sizeof *idx);
}
