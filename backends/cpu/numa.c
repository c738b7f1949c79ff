/*
 * numa.c - NUMA topology, partitions, page placement and the node team of
 * the CPU backend (numa.h is the interface).
 *
 * Design: EXPERT PARALLEL across nodes. Each routed expert of a layer is
 * given to one node (balanced by bytes, dsr1_numa_partition); its pages are
 * moved to that node at load; the MoE runs every node's active experts on
 * that node's own thread pool, all nodes at once (cpu_moe.c). Everything
 * else (attention, dense and shared FFN, router, norms) runs on the whole
 * pool as before.
 *
 * Why not split every matrix by rows across nodes (tensor parallel, what
 * SGLang's Xeon backend does)? Both read each weight byte from local memory
 * only. Rows split gives perfect balance at batch 1, but costs a cross-node
 * barrier per matmul (three per expert, eight experts, 58 layers: ~1400 per
 * token) and needs every expert's FP8 128-row blocks split at block
 * boundaries; expert parallel costs one barrier per MoE layer, keeps a
 * matrix with one pool (the kernels' scratch and task split unchanged), and
 * moves whole expert ranges. Its cost is balance at small batch: a token's
 * eight experts fall unevenly on the nodes (at batch 1 on two nodes the
 * busier node has 5 of 8 on average, so the MoE runs at ~80% of a perfect
 * split); with a batch, each node has many tokens' experts and the
 * imbalance fades. Routed experts are ~90% of R1's bytes read per token,
 * which is where NUMA locality pays.
 *
 * Results do not change: an expert's output rows depend only on its matmul
 * kernels, which promise the same bits for any thread count (kernels.h),
 * and the MoE combines per token in routing order as before. So a run on N
 * (real or virtual) nodes gives the same bits as on one.
 *
 * The KV cache and workspaces: attention reads a sequence's latent rows
 * from every head's thread (MLA shares the latent across heads), so there
 * is no node the cache is local to; it is interleaved over the real nodes
 * (both nodes' bandwidth, no hot node). Each node's MoE buffers are
 * allocated for it and first touched by its own threads.
 *
 * Virtual nodes (--numa virtual:N) split this process's CPUs into N
 * contiguous groups on whatever real node they are: every code path of the
 * split runs (partition, per-node pools and pinning, the team), only page
 * moves are skipped when all groups share one real node.
 *
 * Does not: balance experts by observed routing frequency, steal work
 * across nodes, or place non-expert weights (read by every node).
 */
#include "numa.h"

#include <errno.h>
#include <numa.h>
#include <numaif.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- topology --------------------------------------------------------------- */

static int allowed_cpus(int *cpus, int cap)
{
    cpu_set_t set;
    int n = 0;
    if (sched_getaffinity(0, sizeof set, &set) == 0)
        for (int c = 0; c < CPU_SETSIZE && n < cap; c++)
            if (CPU_ISSET(c, &set)) cpus[n++] = c;
    if (n == 0) cpus[n++] = 0;
    return n;
}

static int node_of_cpu(int cpu)
{
    if (numa_available() < 0) return 0;
    int n = numa_node_of_cpu(cpu);
    return n < 0 ? 0 : n;
}

static void count_phys(dsr1_numa_topo *t)
{
    t->n_phys = 0;
    for (int k = 0; k < t->n_nodes; k++) {
        int seen = 0;
        for (int j = 0; j < k; j++) seen |= t->phys[j] == t->phys[k];
        t->n_phys += !seen;
    }
}

/* The machine's nodes: allowed CPUs grouped by their node, nodes in id order. */
static void real_nodes(dsr1_numa_topo *t, const int *cpus, int n)
{
    int node[DSR1_NUMA_MAX_CPUS], m = 0;
    for (int i = 0; i < n; i++) node[i] = node_of_cpu(cpus[i]);
    t->n_nodes = 0;
    for (int id = 0; m < n && t->n_nodes < DSR1_NUMA_MAX_NODES; id++) {
        int any = 0;
        for (int i = 0; i < n; i++)
            if (node[i] == id) {
                if (!any) t->first[t->n_nodes] = m;
                t->cpus[m++] = cpus[i];
                any = 1;
            }
        if (any) t->phys[t->n_nodes++] = id;
        if (id > 4096) break; /* node ids are small; guard a broken libnuma */
    }
    if (m < n || t->n_nodes < 1) { /* could not group: one node */
        memcpy(t->cpus, cpus, (size_t)n * sizeof *cpus);
        t->n_nodes = 1;
        t->phys[0] = node[0];
    }
    t->first[t->n_nodes] = n;
}

int dsr1_numa_topo_init(dsr1_numa_topo *t, int want, dsr1_error *err)
{
    memset(t, 0, sizeof *t);
    int cpus[DSR1_NUMA_MAX_CPUS];
    int n = allowed_cpus(cpus, DSR1_NUMA_MAX_CPUS);
    t->n_cpus = n;
    if (want > 1) {
        if (want > n || want > DSR1_NUMA_MAX_NODES)
            return dsr1_errorf(err, DSR1_EINVAL, "numa virtual:%d: %d CPUs to split (at most %d nodes)",
                               want, n, DSR1_NUMA_MAX_NODES);
        t->is_virtual = 1;
        t->n_nodes = want;
        memcpy(t->cpus, cpus, (size_t)n * sizeof *cpus);
        for (int k = 0; k <= want; k++) t->first[k] = (int)((int64_t)k * n / want);
        for (int k = 0; k < want; k++) t->phys[k] = node_of_cpu(t->cpus[t->first[k]]);
    } else if (want == DSR1_NUMA_AUTO && numa_available() >= 0 && numa_num_configured_nodes() > 1) {
        real_nodes(t, cpus, n);
    } else {
        t->n_nodes = 1;
        memcpy(t->cpus, cpus, (size_t)n * sizeof *cpus);
        t->first[1] = n;
        t->phys[0] = node_of_cpu(cpus[0]);
    }
    count_phys(t);
    return 0;
}

void dsr1_numa_describe(const dsr1_numa_topo *t, char *buf, size_t n)
{
    if (t->n_nodes < 2) snprintf(buf, n, "off");
    else if (t->is_virtual)
        snprintf(buf, n, "virtual:%d over %d real node%s", t->n_nodes, t->n_phys,
                 t->n_phys == 1 ? "" : "s");
    else snprintf(buf, n, "%d nodes", t->n_nodes);
}

void dsr1_numa_threads(const dsr1_numa_topo *t, int threads, int *per_node)
{
    int N = t->n_nodes, sum = 0;
    double q[DSR1_NUMA_MAX_NODES]; /* each node's exact share */
    for (int k = 0; k < N; k++) {
        q[k] = (double)threads * (t->first[k + 1] - t->first[k]) / (t->n_cpus > 0 ? t->n_cpus : 1);
        per_node[k] = q[k] < 1 ? 1 : (int)q[k];
        sum += per_node[k];
    }
    /* largest remainder first (lowest node on ties) until the sum is right */
    while (sum < threads) {
        int b = 0;
        for (int k = 1; k < N; k++)
            if (q[k] - per_node[k] > q[b] - per_node[b]) b = k;
        per_node[b]++, sum++;
    }
    while (sum > threads) { /* only when minimums of 1 overshoot */
        int b = -1;
        for (int k = 0; k < N; k++)
            if (per_node[k] > 1 && (b < 0 || q[k] - per_node[k] < q[b] - per_node[b])) b = k;
        if (b < 0) break; /* every node at 1: threads < nodes */
        per_node[b]--, sum--;
    }
}

void dsr1_numa_partition(const uint64_t *bytes, int n, int n_nodes, int *node_of, uint64_t *load)
{
    uint64_t l[DSR1_NUMA_MAX_NODES] = {0};
    if (n_nodes < 1) n_nodes = 1;
    if (n_nodes > DSR1_NUMA_MAX_NODES) n_nodes = DSR1_NUMA_MAX_NODES;
    for (int i = 0; i < n; i++) node_of[i] = -1;
    /* O(n^2) selection: n is a layer's experts (<= 1024), once at load */
    for (int round = 0; round < n; round++) {
        int best = -1;
        for (int i = 0; i < n; i++)
            if (node_of[i] < 0 && (best < 0 || bytes[i] > bytes[best])) best = i;
        int k = 0;
        for (int j = 1; j < n_nodes; j++)
            if (l[j] < l[k]) k = j;
        node_of[best] = k;
        l[k] += bytes[best];
    }
    if (load)
        for (int k = 0; k < n_nodes; k++) load[k] = l[k];
}

/* ---- pages ------------------------------------------------------------------ */

#define PAGE_BATCH 1024

/* move_pages over the range in batches: target node (or query with node < 0). */
static int pages_op(const void *addr, size_t len, int node, size_t *on_node, size_t *pages,
                    dsr1_error *err)
{
    *on_node = 0;
    if (pages) *pages = 0;
    if (numa_available() < 0)
        return dsr1_errorf(err, DSR1_EUNSUPPORTED, "numa: libnuma reports no NUMA support");
    if (!len) return 0;
    uintptr_t ps = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t a = (uintptr_t)addr & ~(ps - 1), end = (uintptr_t)addr + len;
    void *batch[PAGE_BATCH];
    int nodes[PAGE_BATCH], status[PAGE_BATCH];
    int want = node < 0 ? -node - 1 : node; /* query: node = -(node + 1) */
    while (a < end) {
        unsigned long cnt = 0;
        for (; a < end && cnt < PAGE_BATCH; a += ps, cnt++) {
            batch[cnt] = (void *)a;
            nodes[cnt] = want;
            /* present before moving: touch the page's first byte of the
             * range (the first page starts before addr when addr is not
             * page-aligned, and those bytes are not the caller's) */
            if (node >= 0) (void)*(volatile const char *)(a < (uintptr_t)addr ? (uintptr_t)addr : a);
        }
        long rc = move_pages(0, cnt, batch, node >= 0 ? nodes : NULL, status, MPOL_MF_MOVE);
        if (rc < 0)
            return dsr1_errorf(err, DSR1_EIO, "numa: move_pages of %lu pages to node %d failed: %s",
                               cnt, want, strerror(errno));
        if (node >= 0) /* statuses of a move are 0 or -errno; ask where pages are */
            if (move_pages(0, cnt, batch, NULL, status, 0) < 0)
                return dsr1_errorf(err, DSR1_EIO, "numa: move_pages query failed: %s", strerror(errno));
        for (unsigned long i = 0; i < cnt; i++) *on_node += status[i] == want;
        if (pages) *pages += cnt;
    }
    return 0;
}

int dsr1_numa_place(const void *addr, size_t len, int node, size_t *on_node, size_t *pages,
                    dsr1_error *err)
{
    if (node < 0) return dsr1_errorf(err, DSR1_EINVAL, "numa: node %d", node);
    return pages_op(addr, len, node, on_node, pages, err);
}

int dsr1_numa_count(const void *addr, size_t len, int node, size_t *on_node, size_t *pages,
                    dsr1_error *err)
{
    if (node < 0) return dsr1_errorf(err, DSR1_EINVAL, "numa: node %d", node);
    return pages_op(addr, len, -node - 1, on_node, pages, err);
}

int dsr1_numa_interleave(void *addr, size_t len, const dsr1_numa_topo *t, dsr1_error *err)
{
    if (t->n_phys < 2 || numa_available() < 0 || !len) return 0;
    unsigned long mask[64] = {0}; /* real node ids < 4096 */
    int maxnode = 0;
    for (int k = 0; k < t->n_nodes; k++) {
        int p = t->phys[k];
        if (p < 0 || p >= (int)(sizeof mask * 8)) continue;
        mask[p / (8 * sizeof *mask)] |= 1ul << (p % (8 * sizeof *mask));
        if (p + 1 > maxnode) maxnode = p + 1;
    }
    uintptr_t ps = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t a = ((uintptr_t)addr + ps - 1) & ~(ps - 1), e = ((uintptr_t)addr + len) & ~(ps - 1);
    if (e <= a) return 0; /* under a page: nothing to spread */
    if (mbind((void *)a, e - a, MPOL_INTERLEAVE, mask, (unsigned long)maxnode + 1, 0) != 0)
        return dsr1_errorf(err, DSR1_EIO, "numa: mbind interleave of %zu bytes failed: %s",
                           (size_t)(e - a), strerror(errno));
    return 0;
}

/* ---- the node team ---------------------------------------------------------- */

/* Spin before sleeping, as pool.c: a MoE layer is hundreds of microseconds. */
#define TEAM_SPIN 2000

typedef struct team_arg {
    struct dsr1_numa_team *tm;
    int node;
} team_arg;

struct dsr1_numa_team {
    int n;                       /* nodes; drivers for 1..n-1 */
    const dsr1_numa_topo *topo;  /* not owned: the device's, outlives the team */
    pthread_t *threads;          /* [n - 1] */
    team_arg *args;              /* [n - 1] */
    int started;                 /* drivers created */
    pthread_mutex_t mu;
    pthread_cond_t wake, done;
    atomic_uint gen;
    atomic_int busy;
    int stop;                    /* under mu */
    void (*fn)(void *, int);
    void *ctx;
    pthread_t caller;            /* the last caller, whose mask is below */
    int has_caller;
    cpu_set_t caller_mask;       /* its own affinity, restored after each run */
    cpu_set_t node0;             /* node 0's CPUs */
};

static void relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static void *driver_main(void *arg)
{
    team_arg *a = arg;
    struct dsr1_numa_team *tm = a->tm;
    const dsr1_numa_topo *t = tm->topo;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(t->cpus[t->first[a->node]], &set);
    (void)pthread_setaffinity_np(pthread_self(), sizeof set, &set); /* best effort */
    unsigned seen = 0;
    for (;;) {
        int i = 0;
        while (atomic_load(&tm->gen) == seen && i++ < TEAM_SPIN) relax();
        pthread_mutex_lock(&tm->mu);
        while (atomic_load(&tm->gen) == seen && !tm->stop) pthread_cond_wait(&tm->wake, &tm->mu);
        int stop = tm->stop;
        pthread_mutex_unlock(&tm->mu);
        if (stop) return NULL;
        seen = atomic_load(&tm->gen);
        tm->fn(tm->ctx, a->node);
        if (atomic_fetch_sub(&tm->busy, 1) == 1) {
            pthread_mutex_lock(&tm->mu);
            pthread_cond_signal(&tm->done);
            pthread_mutex_unlock(&tm->mu);
        }
    }
}

int dsr1_numa_team_create(dsr1_numa_team **out, const dsr1_numa_topo *t, dsr1_error *err)
{
    *out = NULL;
    struct dsr1_numa_team *tm = calloc(1, sizeof *tm);
    if (!tm) return dsr1_errorf(err, DSR1_ENOMEM, "numa: out of memory");
    tm->n = t->n_nodes;
    tm->topo = t;
    CPU_ZERO(&tm->node0);
    for (int i = t->first[0]; i < t->first[1]; i++) CPU_SET(t->cpus[i], &tm->node0);
    pthread_mutex_init(&tm->mu, NULL);
    pthread_cond_init(&tm->wake, NULL);
    pthread_cond_init(&tm->done, NULL);
    tm->threads = calloc((size_t)tm->n, sizeof *tm->threads);
    tm->args = calloc((size_t)tm->n, sizeof *tm->args);
    if (!tm->threads || !tm->args) {
        dsr1_numa_team_free(tm);
        return dsr1_errorf(err, DSR1_ENOMEM, "numa: out of memory");
    }
    for (int k = 1; k < tm->n; k++) {
        tm->args[k - 1] = (team_arg){tm, k};
        if (pthread_create(&tm->threads[k - 1], NULL, driver_main, &tm->args[k - 1]) != 0) {
            dsr1_numa_team_free(tm);
            return dsr1_errorf(err, DSR1_ENOMEM, "numa: cannot start the driver of node %d", k);
        }
        tm->started = k;
    }
    *out = tm;
    return 0;
}

void dsr1_numa_team_free(dsr1_numa_team *tm)
{
    if (!tm) return;
    pthread_mutex_lock(&tm->mu);
    tm->stop = 1;
    pthread_cond_broadcast(&tm->wake);
    pthread_mutex_unlock(&tm->mu);
    for (int k = 0; k < tm->started; k++) pthread_join(tm->threads[k], NULL);
    pthread_mutex_destroy(&tm->mu);
    pthread_cond_destroy(&tm->wake);
    pthread_cond_destroy(&tm->done);
    free(tm->threads);
    free(tm->args);
    free(tm);
}

void dsr1_numa_team_run(dsr1_numa_team *tm, void (*fn)(void *ctx, int node), void *ctx)
{
    /* The caller drives node 0, so it runs on node 0 for the run, and
     * gets its own mask back after: a thread left pinned would make every
     * later affinity query (pool sizes, a second model's topology) see one
     * node. Two system calls per MoE layer; no migration when the thread
     * is on node 0 already. */
    pthread_t self = pthread_self();
    if (!tm->has_caller || !pthread_equal(tm->caller, self)) {
        tm->has_caller = pthread_getaffinity_np(self, sizeof tm->caller_mask, &tm->caller_mask) == 0;
        tm->caller = self;
    }
    if (tm->has_caller) (void)pthread_setaffinity_np(self, sizeof tm->node0, &tm->node0);
    tm->fn = fn;
    tm->ctx = ctx;
    atomic_store(&tm->busy, tm->n - 1);
    pthread_mutex_lock(&tm->mu);
    atomic_fetch_add(&tm->gen, 1);
    pthread_cond_broadcast(&tm->wake);
    pthread_mutex_unlock(&tm->mu);
    fn(ctx, 0);
    for (int i = 0; i < TEAM_SPIN && atomic_load(&tm->busy) != 0; i++) relax();
    pthread_mutex_lock(&tm->mu);
    while (atomic_load(&tm->busy) != 0) pthread_cond_wait(&tm->done, &tm->mu);
    pthread_mutex_unlock(&tm->mu);
    if (tm->has_caller) (void)pthread_setaffinity_np(self, sizeof tm->caller_mask, &tm->caller_mask);
}
