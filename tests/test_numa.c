/*
 * test_numa.c - the CPU backend's NUMA split (backends/cpu/numa.c,
 * cpu_numa.c, cpu_moe.c): the partition of experts (balanced by bytes,
 * deterministic) and of threads, the virtual topology, page placement and
 * the page-node query (on node 0: this machine may have one node), the
 * node team (every node's function runs on that node's CPUs), and the MoE
 * and whole-model logits with 2 virtual nodes bit-identical to one node.
 */
#include <math.h>
#include <numa.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/numa.h"
#include "be_util.h"
#include "core/dsr1.h"
#include "core/moe.h"
#include "test.h"

const char *dsr1_test_tiny_model(void);

static int ncpus(void)
{
    cpu_set_t s;
    return sched_getaffinity(0, sizeof s, &s) == 0 ? CPU_COUNT(&s) : 1;
}

/* ---- partitions ------------------------------------------------------------------ */

DSR1_TEST(numa_partition_balanced)
{
    /* a hand-checked case: largest first to the least loaded node */
    uint64_t b5[5] = {5, 4, 3, 3, 3}, load[4];
    int node[64], again[64];
    dsr1_numa_partition(b5, 5, 2, node, load);
    int want5[5] = {0, 1, 1, 0, 1};
    CHECK(!memcmp(node, want5, sizeof want5));
    CHECK(load[0] == 8 && load[1] == 10);
    /* uneven sizes on 2..4 nodes: every item placed, loads add up, the
     * spread is at most the largest item, the same answer twice */
    uint64_t b[12] = {100, 5, 90, 80, 5, 70, 60, 50, 40, 30, 20, 10};
    for (int N = 2; N <= 4; N++) {
        dsr1_numa_partition(b, 12, N, node, load);
        dsr1_numa_partition(b, 12, N, again, NULL);
        CHECK(!memcmp(node, again, 12 * sizeof *node));
        uint64_t sum[4] = {0}, lo = UINT64_MAX, hi = 0;
        int ok = 1;
        for (int i = 0; i < 12; i++) {
            ok &= node[i] >= 0 && node[i] < N;
            if (ok) sum[node[i]] += b[i];
        }
        CHECK(ok);
        for (int k = 0; k < N; k++) {
            CHECK(sum[k] == load[k]);
            lo = sum[k] < lo ? sum[k] : lo;
            hi = sum[k] > hi ? sum[k] : hi;
        }
        CHECKF(hi - lo <= 100, "%d nodes: loads spread %llu", N, (unsigned long long)(hi - lo));
    }
    /* a V3 layer: 256 equal experts on 2 nodes alternate, 128 each */
    uint64_t eq[256];
    for (int i = 0; i < 256; i++) eq[i] = 3 * 7168 * 2048;
    int n256[256], c0 = 0, alt = 1;
    dsr1_numa_partition(eq, 256, 2, n256, NULL);
    for (int i = 0; i < 256; i++) c0 += n256[i] == 0, alt &= n256[i] == i % 2;
    CHECK(c0 == 128 && alt);
}

DSR1_TEST(numa_threads_split)
{
    dsr1_numa_topo tp = {.n_nodes = 3, .n_cpus = 8, .first = {0, 4, 6, 8}};
    int p[3];
    dsr1_numa_threads(&tp, 8, p);
    CHECK(p[0] == 4 && p[1] == 2 && p[2] == 2);
    dsr1_numa_threads(&tp, 16, p);
    CHECK(p[0] == 8 && p[1] == 4 && p[2] == 4);
    dsr1_numa_threads(&tp, 5, p); /* 2.5, 1.25, 1.25: the remainder to node 0 */
    CHECK(p[0] == 3 && p[1] == 1 && p[2] == 1);
    dsr1_numa_threads(&tp, 4, p); /* 2, 1, 1 */
    CHECK(p[0] == 2 && p[1] == 1 && p[2] == 1);
    dsr1_numa_threads(&tp, 2, p); /* fewer threads than nodes: one each */
    CHECK(p[0] == 1 && p[1] == 1 && p[2] == 1);
}

DSR1_TEST(numa_topology)
{
    dsr1_numa_topo tp;
    dsr1_error err;
    int n = ncpus();
    CHECK_OK(dsr1_numa_topo_init(&tp, DSR1_NUMA_OFF, &err), &err);
    CHECK(tp.n_nodes == 1 && tp.first[1] == tp.n_cpus && tp.n_cpus == n);
    CHECK_OK(dsr1_numa_topo_init(&tp, DSR1_NUMA_AUTO, &err), &err);
    int real = numa_available() >= 0 ? numa_num_configured_nodes() : 1;
    CHECK(tp.n_nodes >= 1 && tp.n_nodes <= (real > 1 ? real : 1) && !tp.is_virtual);
    CHECK(dsr1_numa_topo_init(&tp, n + 1, &err) == DSR1_EINVAL); /* more nodes than CPUs */
    if (n < 2) {
        dsr1_test_skip(t, "one CPU: no virtual split");
        return;
    }
    CHECK_OK(dsr1_numa_topo_init(&tp, 2, &err), &err);
    CHECK(tp.n_nodes == 2 && tp.is_virtual && tp.n_phys >= 1);
    /* every allowed CPU in exactly one node, contiguous halves */
    CHECK(tp.first[0] == 0 && tp.first[1] == n / 2 && tp.first[2] == n);
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++) CHECK(tp.cpus[i] != tp.cpus[j]);
    char d[96];
    dsr1_numa_describe(&tp, d, sizeof d);
    CHECK(!strncmp(d, "virtual:2 over ", 15));
}

/* ---- pages -------------------------------------------------------------------------- */

/* A read-only shared file mapping (what the weights are) and anonymous
 * memory: moved to node 0 (the node every machine has), every page
 * reports node 0; a node that does not exist is refused with a message. */
DSR1_TEST(numa_place_node0)
{
    if (numa_available() < 0) {
        dsr1_test_skip(t, "libnuma reports no NUMA support");
        return;
    }
    size_t ps = (size_t)sysconf(_SC_PAGESIZE), len = 64 * ps, on = 0, pages = 0;
    char path[512];
    snprintf(path, sizeof path, "%s/numa_pages.bin", dsr1_test_tmpdir());
    FILE *f = fopen(path, "wb");
    REQUIRE(f);
    char *buf = calloc(1, len);
    REQUIRE(buf);
    for (size_t i = 0; i < len; i++) buf[i] = (char)i;
    CHECK(fwrite(buf, 1, len, f) == len);
    fclose(f);
    f = fopen(path, "rb");
    REQUIRE(f);
    void *map = mmap(NULL, len, PROT_READ, MAP_SHARED, fileno(f), 0);
    fclose(f);
    REQUIRE(map != MAP_FAILED);
    dsr1_error err;
    /* an unaligned range inside the mapping: its pages, first and last partial */
    CHECK_OK(dsr1_numa_place((char *)map + 100, len - 200, 0, &on, &pages, &err), &err);
    CHECKF(pages == 64 && on == 64, "file mapping: %zu of %zu pages on node 0", on, pages);
    CHECK_OK(dsr1_numa_count(map, len, 0, &on, &pages, &err), &err);
    CHECKF(pages == 64 && on == 64, "query: %zu of %zu pages on node 0", on, pages);
    CHECK_OK(dsr1_numa_place(buf, len, 0, &on, &pages, &err), &err);
    CHECK(on >= 64 && pages >= 64); /* calloc need not be page aligned: 64 or 65 pages */
    int bad = numa_max_node() + 1;
    CHECK(dsr1_numa_place(buf, len, bad, &on, &pages, &err) == DSR1_EIO && strstr(err.msg, "move_pages"));
    CHECK(dsr1_numa_place(buf, len, -1, &on, &pages, &err) == DSR1_EINVAL);
    /* one real node: interleaving is a no-op, not an error */
    dsr1_numa_topo tp;
    CHECK_OK(dsr1_numa_topo_init(&tp, DSR1_NUMA_OFF, &err), &err);
    CHECK_OK(dsr1_numa_interleave(buf, len, &tp, &err), &err);
    munmap(map, len);
    free(buf);
}

/* ---- the node team -------------------------------------------------------------------- */

typedef struct team_probe {
    const dsr1_numa_topo *tp;
    atomic_int calls[2], off_node;
} team_probe;

static void probe_fn(void *ctx, int k)
{
    team_probe *p = ctx;
    atomic_fetch_add(&p->calls[k], 1);
    int cpu = sched_getcpu(), on = 0;
    for (int i = p->tp->first[k]; i < p->tp->first[k + 1]; i++) on |= p->tp->cpus[i] == cpu;
    if (!on) atomic_fetch_add(&p->off_node, 1);
}

DSR1_TEST(numa_team_runs_each_node_on_its_cpus)
{
    if (ncpus() < 2) {
        dsr1_test_skip(t, "one CPU: no virtual split");
        return;
    }
    cpu_set_t saved;
    REQUIRE(sched_getaffinity(0, sizeof saved, &saved) == 0);
    dsr1_numa_topo tp;
    dsr1_error err;
    CHECK_OK(dsr1_numa_topo_init(&tp, 2, &err), &err);
    dsr1_numa_team *tm = NULL;
    CHECK_OK(dsr1_numa_team_create(&tm, &tp, &err), &err);
    REQUIRE(tm);
    team_probe p = {.tp = &tp};
    for (int r = 0; r < 200; r++) dsr1_numa_team_run(tm, probe_fn, &p);
    CHECK(atomic_load(&p.calls[0]) == 200 && atomic_load(&p.calls[1]) == 200);
    CHECKF(atomic_load(&p.off_node) == 0, "%d calls off their node's CPUs", atomic_load(&p.off_node));
    cpu_set_t now; /* the caller drove node 0 and got its own mask back */
    CHECK(sched_getaffinity(0, sizeof now, &now) == 0 && CPU_EQUAL(&now, &saved));
    dsr1_numa_team_free(tm);
    sched_setaffinity(0, sizeof saved, &saved); /* the runner's thread was pinned to node 0 */
}

/* ---- the MoE op and the whole model: same bits on 2 virtual nodes ------------------------ */

enum { MD = 64, MI = 64, ME = 8, MK = 3, MT = 800 };

static float *rnd(size_t n, uint32_t seed, float scale)
{
    float *v = malloc(n * sizeof *v);
    for (size_t i = 0; i < n && v; i++) {
        seed = seed * 1664525u + 1013904223u;
        v[i] = scale * ((float)(seed >> 8) / (float)(1 << 24) - 0.5f);
    }
    return v;
}

/* One MoE call on a CPU backend with `numa` nodes and `threads` threads;
 * writes out[n][MD], the node-by-node runs and the side-by-side runs. */
static void moe_once(dsr1_test_ctx *t, int numa, int threads, dsr1_type type, dsr1_act act, int n,
                     float *out, uint64_t run[3])
{
    const dsr1_backend_ops *be;
    void *dev = NULL, *ws = NULL;
    dsr1_error err;
    CHECK_OK(dsr1_backend_find("cpu", &be, NULL, 0, &err), &err);
    dsr1_backend_options o = {.threads = threads, .numa_nodes = numa};
    CHECK_OK(be->create(&o, &dev, &err), &err);
    if (!dev) return;
    dsr1_ws_sizes s = {.max_tokens = MT, .hidden = MD, .inter = MI, .moe_inter = MI, .n_experts = ME,
                       .topk = MK, .shared_inter = MI, .max_in = MI, .n_heads = 1, .kv_lora_rank = 16,
                       .rope_dim = 8, .max_ctx = 16, .kv_type = DSR1_KV_F32};
    float *rw = rnd(ME * MD, 1, 1), *g = rnd(ME * MI * MD, 2, 0.2f), *u = rnd(ME * MI * MD, 3, 0.2f);
    float *d = rnd(ME * MD * MI, 4, 0.2f), *x = rnd(MT * MD, 5, 2), bias[ME];
    size_t es = type == DSR1_T_BF16 ? 2 : 4, st = (size_t)MI * MD * es;
    if (type == DSR1_T_BF16) /* the same arrays read as bf16: any bits are fine weights */
        for (size_t i = 0; i < (size_t)ME * MI * MD; i++) ((uint16_t *)g)[i] = 0x3c00 + (uint16_t)(i % 251);
    for (int e = 0; e < ME; e++) bias[e] = 0.01f * (float)e;
    dsr1_wmat rm = {.type = DSR1_T_F32, .rows = ME, .cols = MD, .data = rw};
    dsr1_wmat bm = {.type = DSR1_T_F32, .rows = 1, .cols = ME, .data = bias};
    dsr1_wmat gm = {.type = type, .rows = MI, .cols = MD, .data = g};
    dsr1_wmat um = gm, dm = {.type = type, .rows = MD, .cols = MI, .data = d};
    um.data = u;
    dsr1_wdesc wd[] = {{"router", DSR1_W_MATRIX, rm, 1, 0, 0}, {"bias", DSR1_W_VECTOR, bm, 1, 0, 0},
                       {"gate", DSR1_W_EXPERTS, gm, ME, st, 0}, {"up", DSR1_W_EXPERTS, um, ME, st, 0},
                       {"down", DSR1_W_EXPERTS, dm, ME, st, 0}};
    dsr1_bweight *h[5] = {0};
    for (int i = 0; i < 5; i++) CHECK_OK(be->load(dev, &wd[i], DSR1_PLACE_AUTO, &h[i], &err), &err);
    CHECK_OK(be->ws_create(dev, &s, &ws, &err), &err);
    dsr1_bbuf *xb = NULL, *yb = NULL;
    CHECK_OK(be->buf_create(dev, MT * MD, &xb, &err), &err);
    CHECK_OK(be->buf_create(dev, MT * MD, &yb, &err), &err);
    if (ws && xb && yb && h[4]) {
        dsr1_moe_params p = {.n_experts = ME, .topk = MK, .n_group = 2, .topk_group = 1,
                             .scoring = DSR1_SCORE_SIGMOID, .method = DSR1_TOPK_NOAUX_TC,
                             .family = DSR1_FAMILY_V3, .norm_topk_prob = 1, .routed_scaling_factor = 2.5f};
        dsr1_moe_weights mw = {.router = h[0], .bias = h[1], .gate = h[2], .up = h[3], .down = h[4]};
        dsr1_step stp = {.n = n};
        dsr1_view xv = {xb, 0, MD}, yv = {yb, 0, MD};
        CHECK_OK(be->step_begin(ws, &stp, &err), &err);
        be->write(ws, x, MD, n, MD, xv);
        be->moe(ws, &mw, &p, xv, n, yv, act);
        be->read(ws, yv, n, MD, out, MD);
        CHECK_OK(be->step_end(ws, &err), &err);
        run[0] = ((cpu_ws *)ws)->numa_runs;
        run[1] = ((cpu_ws *)ws)->ep_runs;
        run[2] = ((cpu_ws *)ws)->batch_runs;
    }
    be->buf_free(dev, xb);
    be->buf_free(dev, yb);
    if (ws) be->ws_free(ws);
    be->destroy(dev);
    free(rw), free(g), free(u), free(d), free(x);
}

/* Whether a[0..n) and b[0..n) are the same bits where not NaN, and NaN in
 * the same places. The BF16 weights below are any bits, NaN among them,
 * and which NaN an operation passes on is its operand order's (IEEE 754
 * leaves it open): clang commutes a product's operands differently in
 * the kernels' copies, so the side-by-side path's NaN payloads differed
 * from one thread's (tokens 407-451 of 800, 38 values) while every
 * finite value matched. The contract is on the values. */
static int same_values(const float *a, const float *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (isnan(a[i]) ? !isnan(b[i]) : memcmp(a + i, b + i, sizeof *a) != 0) return 0;
    return 1;
}

/* Both weight types and both acts at each of the ns[nn] token counts: the
 * MoE on setup a ({numa nodes, threads}) and on setup b gives the same
 * bits (NaN payloads aside: same_values), and the path under test
 * (counter `which`: 0 node-by-node runs, 1 side-by-side runs, 2 runs of
 * all experts at once) ran once on b and never on a. The thread affinity a virtual split changes is restored. */
static void moe_same_bits(dsr1_test_ctx *t, const int a[2], const int b[2], const int *ns, int nn,
                          int which)
{
    cpu_set_t saved;
    REQUIRE(sched_getaffinity(0, sizeof saved, &saved) == 0);
    static const dsr1_type types[] = {DSR1_T_F32, DSR1_T_BF16};
    static float one[MT * MD], two[MT * MD];
    for (int ti = 0; ti < 2; ti++)
        for (int ai = 0; ai < 2; ai++)
            for (int k = 0; k < nn; k++) {
                dsr1_act act = ai ? DSR1_ACT_INT8 : DSR1_ACT_F32;
                uint64_t run[2][3] = {{99, 99, 99}, {0, 0, 0}};
                memset(one, 0, sizeof one), memset(two, 0xff, sizeof two);
                moe_once(t, a[0], a[1], types[ti], act, ns[k], one, run[0]);
                moe_once(t, b[0], b[1], types[ti], act, ns[k], two, run[1]);
                CHECKF(run[0][which] == 0 && run[1][which] == 1,
                       "%s runs: %llu on %d node(s) x %d thread(s), %llu on %d x %d",
                       which == 2 ? "all-at-once" : which ? "side-by-side" : "node-by-node",
                       (unsigned long long)run[0][which], a[0], a[1], (unsigned long long)run[1][which],
                       b[0], b[1]);
                CHECKF(same_values(one, two, (size_t)ns[k] * MD), "type %d act %d n=%d: bits differ",
                       (int)types[ti], (int)act, ns[k]);
            }
    sched_setaffinity(0, sizeof saved, &saved);
}

DSR1_TEST(numa_moe_bit_identical)
{
    if (ncpus() < 2) {
        dsr1_test_skip(t, "one CPU: no virtual split");
        return;
    }
    static const int ns[] = {1, 5, 16}, one_node[2] = {1, 2}, two_nodes[2] = {2, 2};
    moe_same_bits(t, one_node, two_nodes, ns, 3, 0);
}

/* Experts side by side (cpu_moe.c: each thread whole experts, from 16
 * tokens) against one thread running them in turn: the same bits, at 16
 * tokens (each expert in one go) and 800 (300 per expert on average:
 * in parts of at most 256 tokens). Every (token, expert) pair's output is
 * compared, so a part that skipped or repeated tokens, or a lane's buffer
 * shared between threads, fails it. */
DSR1_TEST(moe_side_by_side_bit_identical)
{
    if (ncpus() < 2) {
        dsr1_test_skip(t, "one CPU: one thread runs the experts in turn either way");
        return;
    }
    static const int ns[] = {16, MT}, one_thread[2] = {1, 1}, two_threads[2] = {1, 2};
    moe_same_bits(t, one_thread, two_threads, ns, 2, 1);
}

/* A decode step's experts all at once (cpu_moe.c by_batch: every
 * gate+up in one pool run, every down in another) against node by node
 * (two virtual nodes, each running its experts in turn): the same bits at
 * 1, 5 and 8 tokens - one token per expert, some with several (gathered
 * and scattered), and the pool's tasks of many matmuls interleaved. */
DSR1_TEST(moe_all_at_once_bit_identical)
{
    if (ncpus() < 2) {
        dsr1_test_skip(t, "one CPU: no virtual split");
        return;
    }
    static const int ns[] = {1, 5, 8}, two_nodes[2] = {2, 2}, one_node[2] = {1, 2};
    moe_same_bits(t, two_nodes, one_node, ns, 3, 2);
}

/* The tiny R1-layout model: logits of 9 tokens (one prefill, and one token
 * at a time) on 2 virtual nodes, with 2 and 1 threads, equal the one-node
 * run bit for bit, in both compute modes. Prefill equals decode only in
 * the float32 mode: the fast one runs a 9-token FP8 matmul W8A8 and a
 * one-token one in bf16 (kernels.h, DSR1_MM_RQ_MIN_N). On the CPU backend
 * by name: with a GPU, auto would pick it (and there is no NUMA split to
 * describe). */
DSR1_TEST(numa_model_logits_bit_identical)
{
    const char *path = dsr1_test_tiny_model();
    if (!path || ncpus() < 2) {
        dsr1_test_skip(t, "%s", path ? "one CPU: no virtual split" : "tiny fixture could not be converted");
        return;
    }
    cpu_set_t saved;
    REQUIRE(sched_getaffinity(0, sizeof saved, &saved) == 0);
    int32_t ids[9] = {3, 17, 42, 99, 5, 64, 7, 128, 11};
    size_t chunks[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    for (int c = 0; c < 2; c++) {
        dsr1_compute compute = c ? DSR1_COMPUTE_F32 : DSR1_COMPUTE_FAST;
        float *ref = NULL, *ref_step = NULL;
        size_t V = 0;
        struct { int threads, numa; } runs[] = {{2, 1}, {2, 2}, {1, 2}};
        for (int r = 0; r < 3; r++) {
            dsr1_model_options o = {.backend = "cpu", .compute = compute, .threads = runs[r].threads,
                                    .numa_nodes = runs[r].numa};
            dsr1_model *m = NULL;
            dsr1_error err;
            CHECK_OK(dsr1_model_open(&m, path, &o, &err), &err);
            if (!m) break;
            if (runs[r].numa == 2)
                CHECKF(strstr(dsr1_model_describe(m), "numa virtual:2"), "describe: %s", dsr1_model_describe(m));
            V = (size_t)dsr1_model_config(m)->vocab_size;
            float *out = malloc(9 * V * 4), *step = malloc(9 * V * 4);
            CHECK_OK(dsr1_model_forward(m, ids, 9, NULL, 0, DSR1_OUT_LOGITS, out, &err), &err);
            CHECK_OK(dsr1_model_forward(m, ids, 9, chunks, 9, DSR1_OUT_LOGITS, step, &err), &err);
            if (!ref) {
                ref = out;
            } else {
                CHECKF(!memcmp(ref, out, 9 * V * 4), "compute %d, %d threads, numa %d: prefill logits differ",
                       c, runs[r].threads, runs[r].numa);
                free(out);
            }
            if (!ref_step) {
                ref_step = step;
                if (c)
                    CHECKF(!memcmp(ref, step, 9 * V * 4), "float32: decode logits differ from the prefill's");
            } else {
                CHECKF(!memcmp(ref_step, step, 9 * V * 4), "compute %d, %d threads, numa %d: decode logits differ",
                       c, runs[r].threads, runs[r].numa);
                free(step);
            }
            dsr1_model_close(m);
        }
        free(ref);
        free(ref_step);
    }
    sched_setaffinity(0, sizeof saved, &saved);
}

/* The CPU backend applies pftune's choice: each step sets the kept
 * variant on the workspace's pool and on every per-head pool; a one-token
 * step of a trial hands the workspace's pool to the tuner, whose variants
 * its one-token matmuls then take call by call (a matmul of more tokens
 * takes none), and only one-token steps are counted. With an INT8 matrix
 * loaded the trial runs all four variants, without one the two that
 * differ there (the INT8 row layout bit would change nothing). */
static void pftune_applied(dsr1_test_ctx *t, int with_int8)
{
    const dsr1_backend_ops *be;
    void *dev = NULL, *ws = NULL;
    dsr1_error err;
    CHECK_OK(dsr1_backend_find("cpu", &be, NULL, 0, &err), &err);
    dsr1_backend_options o = {.threads = 2};
    CHECK_OK(be->create(&o, &dev, &err), &err);
    if (!dev) return;
    int8_t q[64] = {1};
    float sc[2] = {1, 1};
    dsr1_wdesc d = {.name = "w", .count = 1,
                    .mat = {.type = DSR1_T_INT8, .rows = 2, .cols = 32, .data = q, .scale = sc,
                            .scale_type = DSR1_T_F32}};
    dsr1_bweight *bw = NULL;
    if (with_int8) CHECK_OK(be->load(dev, &d, DSR1_PLACE_DEVICE, &bw, &err), &err);
    dsr1_ws_sizes s = {.max_tokens = 4, .hidden = MD, .inter = MI, .moe_inter = MI, .n_experts = ME,
                       .topk = MK, .shared_inter = MI, .max_in = MI, .n_heads = 1, .kv_lora_rank = 16,
                       .rope_dim = 8, .max_ctx = 16, .kv_type = DSR1_KV_F32};
    CHECK_OK(be->ws_create(dev, &s, &ws, &err), &err);
    cpu_ws *w = ws;
    const int arms = with_int8 ? DSR1_PFTUNE_ARMS : 2, trial = arms * DSR1_PFTUNE_ROUNDS;
    float x[2 * 32] = {1}, y[2 * 2];
    for (int i = 0; w && i < trial + 2; i++) {
        int n = i == 1 || i == trial + 1 ? 3 : 1; /* a 3-token step inside the trial and after it */
        dsr1_step stp = {.n = n};
        int at = w->pft.at, want = w->pft.choice, tuned = n == 1 && at < trial;
        CHECK_OK(be->step_begin(ws, &stp, &err), &err);
        dsr1_pool *p = dsr1_cpu_pool(w);
        CHECKF(dsr1_pool_hwpf(p) == want, "step %d (n=%d): pool hwpf %d, want %d", i, n,
               dsr1_pool_hwpf(p), want);
        for (int k = 0; k < w->n_hpools; k++) {
            CHECK_EQ_INT(dsr1_pool_hwpf(w->hpool[k]), want);
            CHECK(dsr1_pool_tune(w->hpool[k]) == NULL);
        }
        CHECKF((dsr1_pool_tune(p) == &w->pft) == tuned, "step %d (n=%d): tuner %s", i, n,
               tuned ? "missing" : "set");
        if (with_int8) {
            const dsr1_wmat *m = dsr1_cpu_mat(bw, 0);
            dsr1_matmul(p, m, x, 32, y, 2, 2, DSR1_ACT_BF16); /* two tokens: not the tuner's */
            CHECK_EQ_INT(w->pft.call, 0);
            dsr1_matmul(p, m, x, 32, y, 2, 1, DSR1_ACT_BF16);
            dsr1_matmul(p, m, x, 32, y, 2, 1, DSR1_ACT_BF16);
            CHECK_EQ_INT(w->pft.call, tuned ? 2 : 0);
        }
        CHECK_OK(be->step_end(ws, &err), &err);
        CHECK(dsr1_pool_tune(p) == NULL);
        CHECK_EQ_INT(w->pft.call, 0);
        CHECK_EQ_INT(w->pft.at, n == 1 ? at + 1 : at); /* only one-token steps count */
    }
    if (w) CHECK_EQ_INT(w->pft.trials, 1);
    if (ws) be->ws_free(ws);
    be->destroy(dev);
}

DSR1_TEST(pftune_applied_per_step)
{
    pftune_applied(t, 1);
    pftune_applied(t, 0);
}
