/*
 * numa.h - NUMA support of the CPU backend (numa.c says the design and why):
 * the node topology (real, from libnuma, or a virtual split of the cores
 * for testing), the partition of routed experts and of threads over nodes,
 * page placement of mapped weights, and the node team that runs one
 * function per node on that node's threads.
 *
 * Everything here degrades to "one node": without libnuma support, on a
 * one-node machine, or with numa off, the topology has one node and the
 * backend runs exactly as before.
 */
#ifndef DSR1_CPU_NUMA_H
#define DSR1_CPU_NUMA_H

#include <stddef.h>
#include <stdint.h>

#include "../../core/error.h"

#define DSR1_NUMA_MAX_NODES 64
#define DSR1_NUMA_MAX_CPUS 1024

/* Which nodes to use (dsr1_backend_options.numa_nodes). */
enum {
    DSR1_NUMA_AUTO = 0, /* the machine's nodes (libnuma); one node: off */
    DSR1_NUMA_OFF = 1,  /* one node, whatever the machine has */
    /* N > 1: split this process's CPUs into N virtual nodes (memory stays
     * where the CPUs' real node is): tests the partitioning on one node. */
};

typedef struct dsr1_numa_topo {
    int n_nodes;                      /* nodes in use, >= 1 */
    int is_virtual;                   /* 1: a virtual split (numa_nodes > 1) */
    int n_cpus;                       /* CPUs this process may run on */
    int cpus[DSR1_NUMA_MAX_CPUS];     /* those CPUs, grouped by node */
    int first[DSR1_NUMA_MAX_NODES + 1]; /* node k: cpus[first[k] .. first[k + 1]) */
    int phys[DSR1_NUMA_MAX_NODES];    /* the real node whose memory node k uses */
    int n_phys;                       /* distinct real nodes among phys[] */
} dsr1_numa_topo;

/* Fill t for the request `want` (DSR1_NUMA_AUTO, _OFF, or N > 1 virtual
 * nodes). DSR1_EINVAL when N exceeds the CPUs to split or
 * DSR1_NUMA_MAX_NODES. Never fails for AUTO/OFF (one node at worst). */
int dsr1_numa_topo_init(dsr1_numa_topo *t, int want, dsr1_error *err);

/* "off", "2 nodes", "virtual:2 over 1 real node": for start-up lines. */
void dsr1_numa_describe(const dsr1_numa_topo *t, char *buf, size_t n);

/* Split `threads` over the nodes in proportion to their CPUs (largest
 * remainder, lowest node on ties: deterministic), every node at least one,
 * so the sum exceeds `threads` only when threads < n_nodes. */
void dsr1_numa_threads(const dsr1_numa_topo *t, int threads, int *per_node);

/* Assign n items (experts) of bytes[i] each to n_nodes nodes, balancing
 * bytes: largest item first (lowest index on ties) to the least loaded
 * node (lowest node on ties). The heaviest node then exceeds the lightest
 * by at most the largest item. node_of[i] gets the node; load[k] (may be
 * NULL) the bytes of node k. Deterministic, no allocation. */
void dsr1_numa_partition(const uint64_t *bytes, int n, int n_nodes, int *node_of, uint64_t *load);

/* Move the pages of [addr, addr + len) (touching them first, so a file
 * mapping's pages are present) to real node `node` with move_pages(2),
 * then count the pages that report that node into *on_node. Pages other
 * processes also map stay where they are (MPOL_MF_MOVE): they are counted
 * as not on the node. DSR1_EUNSUPPORTED without libnuma support, DSR1_EIO
 * when the system call fails. */
int dsr1_numa_place(const void *addr, size_t len, int node, size_t *on_node, size_t *pages,
                    dsr1_error *err);

/* Count the pages of [addr, addr + len) that report real node `node`
 * (move_pages with no target: a query). Pages not present count as not
 * on the node. Errors as dsr1_numa_place. */
int dsr1_numa_count(const void *addr, size_t len, int node, size_t *on_node, size_t *pages,
                    dsr1_error *err);

/* Pages of [addr, addr + len) not yet touched will interleave over the
 * real nodes of t (mbind MPOL_INTERLEAVE). No-op (0) with fewer than two
 * real nodes; otherwise 0 or DSR1_EIO. */
int dsr1_numa_interleave(void *addr, size_t len, const dsr1_numa_topo *t, dsr1_error *err);


/* ---- the node team --------------------------------------------------------- */

/* One driver thread per node 1..n-1, pinned to that node's first CPU; node
 * 0's driver is the caller of dsr1_numa_team_run (restricted to node 0's
 * CPUs during the run, its own affinity restored after). */
typedef struct dsr1_numa_team dsr1_numa_team;

int dsr1_numa_team_create(dsr1_numa_team **out, const dsr1_numa_topo *t, dsr1_error *err);
void dsr1_numa_team_free(dsr1_numa_team *tm); /* NULL is a no-op */
/* fn(ctx, k) for every node k, each on node k's driver, all at once;
 * returns when all have returned. One run at a time. */
void dsr1_numa_team_run(dsr1_numa_team *tm, void (*fn)(void *ctx, int node), void *ctx);

#endif
