/*
 * cpu_numa.c - the CPU backend's NUMA state (the design and its reasons are
 * in numa.c): at create, the node topology, one thread pool per node
 * (pinned to the node's CPUs) and the team of node drivers; at load, each
 * routed expert's node (dsr1_numa_partition over the stack) and, with more
 * than one real node, its pages moved there; per workspace, each node's
 * MoE buffers and its pool's scratch.
 *
 * Does not: run anything (cpu_moe.c runs the experts by node), or fail a
 * load because pages would not move (other processes may map them, a
 * container may forbid move_pages): the first such failure is kept in
 * numa_note and shown by describe; results do not depend on placement.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_backend.h"

int dsr1_cpu_numa_create(cpu_dev *d, int want, dsr1_error *err)
{
    dsr1_numa_topo t;
    DSR1_TRY(dsr1_numa_topo_init(&t, want, err));
    if (t.n_nodes < 2) return 0;
    d->topo = malloc(sizeof t);
    if (!d->topo) return dsr1_errorf(err, DSR1_ENOMEM, "cpu backend: out of memory");
    *d->topo = t;
    int per[DSR1_NUMA_MAX_NODES];
    dsr1_numa_threads(&t, dsr1_pool_size(d->pool), per);
    for (int k = 0; k < t.n_nodes; k++)
        DSR1_TRY(dsr1_pool_create_on(&d->npool[k], per[k], t.cpus + t.first[k],
                                     t.first[k + 1] - t.first[k], err));
    return dsr1_numa_team_create(&d->team, d->topo, err);
}

void dsr1_cpu_numa_destroy(cpu_dev *d)
{
    dsr1_numa_team_free(d->team);
    for (int k = 0; k < DSR1_NUMA_MAX_NODES; k++) dsr1_pool_free(d->npool[k]);
    free(d->topo);
}

int dsr1_cpu_numa_nodes(const cpu_dev *d) { return d->topo ? d->topo->n_nodes : 1; }

/* Move matrix i's bytes (values and scales) to its node's real node. */
static void place_expert(cpu_dev *d, const dsr1_wdesc *desc, int64_t i, int node)
{
    dsr1_wmat m = dsr1_wdesc_mat(desc, i);
    const void *r[2] = {m.data, m.scale};
    size_t len[2] = {desc->stride, m.scale ? desc->scale_stride : 0};
    for (int j = 0; j < 2; j++) {
        size_t on = 0, pages = 0;
        dsr1_error e;
        if (!len[j]) continue;
        if (dsr1_numa_place(r[j], len[j], d->topo->phys[node], &on, &pages, &e)) {
            if (!d->numa_note[0]) snprintf(d->numa_note, sizeof d->numa_note, "%s: %s", desc->name, e.msg);
            continue;
        }
        d->placed += on;
        d->pages += pages;
    }
}

int dsr1_cpu_numa_load(cpu_dev *d, const dsr1_wdesc *desc, struct dsr1_bweight *w, dsr1_error *err)
{
    if (!d->topo || desc->role != DSR1_W_EXPERTS || desc->count < 2) return 0;
    int n = (int)desc->count;
    uint64_t *bytes = calloc((size_t)n, sizeof *bytes);
    int *node = malloc((size_t)n * sizeof *node);
    w->node = malloc((size_t)n * sizeof *w->node);
    if (!bytes || !node || !w->node) {
        free(bytes);
        free(node);
        return dsr1_errorf(err, DSR1_ENOMEM, "cpu backend: out of memory");
    }
    for (int i = 0; i < n; i++) bytes[i] = desc->stride + (desc->mat.scale ? desc->scale_stride : 0);
    dsr1_numa_partition(bytes, n, d->topo->n_nodes, node, NULL);
    for (int i = 0; i < n; i++) {
        w->node[i] = node[i];
        /* one real node (a virtual split): the pages are where they must be */
        if (d->topo->n_phys > 1) place_expert(d, desc, i, node[i]);
    }
    free(bytes);
    free(node);
    return 0;
}

void dsr1_cpu_numa_describe(const cpu_dev *d, char *buf, size_t n)
{
    if (!d->topo) {
        snprintf(buf, n, "numa off");
        return;
    }
    char t[96];
    dsr1_numa_describe(d->topo, t, sizeof t);
    int k = snprintf(buf, n, "numa %s", t);
    if (k > 0 && (size_t)k < n && d->pages)
        k += snprintf(buf + k, n - (size_t)k, ", %.1f%% of expert pages on their node",
                      100.0 * (double)d->placed / (double)d->pages);
    if (k > 0 && (size_t)k < n && d->numa_note[0])
        snprintf(buf + k, n - (size_t)k, ", placement failed: %s", d->numa_note);
}

/* ---- workspaces ---------------------------------------------------------------- */

void dsr1_cpu_numa_ws_free(cpu_ws *w)
{
    dsr1_cpu_lanes_free(w->lane, w->n_lanes);
    w->lane = NULL;
    w->n_lanes = 0;
}

/* Bytes of scratch an expert's matmuls take from a node pool: x as bf16 or
 * int8 (padded), gate+up's kept up half, per-task kernel blocks. */
static size_t lane_need(const cpu_ws *w, const dsr1_pool *p)
{
    size_t T = (size_t)w->s.max_tokens, I = (size_t)w->s.moe_inter, D = (size_t)w->s.hidden;
    size_t in = I > D ? I : D;
    return T * (2 * in + 128) + 128 + T * I * 4 + 64 + (size_t)dsr1_pool_size(p) * ((size_t)2 << 20);
}

int dsr1_cpu_numa_ws(cpu_ws *w)
{
    cpu_dev *d = w->dev;
    if (!d->topo || w->s.n_experts < 2 || w->s.moe_inter < 1) return 0;
    int N = d->topo->n_nodes;
    size_t T = (size_t)w->s.max_tokens, D = (size_t)w->s.hidden, I = (size_t)w->s.moe_inter;
    w->lane = calloc((size_t)N, sizeof *w->lane);
    if (!w->lane) return DSR1_ENOMEM;
    w->n_lanes = N;
    for (int k = 0; k < N; k++) {
        cpu_lane *l = &w->lane[k];
        l->xg = malloc(T * D * 4);
        l->yg = malloc(T * D * 4);
        l->ha = malloc(T * I * 4);
        l->hb = malloc(T * I * 4);
        if (!l->xg || !l->yg || !l->ha || !l->hb || dsr1_pool_reserve(d->npool[k], lane_need(w, d->npool[k]), NULL))
            return DSR1_ENOMEM;
        if (d->topo->n_phys > 1) { /* node-local buffers; best effort */
            void *b[4] = {l->xg, l->yg, l->ha, l->hb};
            size_t n[4] = {T * D * 4, T * D * 4, T * I * 4, T * I * 4}, on, pg;
            dsr1_error e;
            for (int j = 0; j < 4; j++) (void)dsr1_numa_place(b[j], n[j], d->topo->phys[k], &on, &pg, &e);
        }
    }
    return 0;
}
