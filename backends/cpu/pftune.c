/*
 * pftune.c - the decode-time GEMV choice: prefetch and INT8 row layout (pftune.h).
 *
 * A cycle is a trial of DSR1_PFTUNE_ROUNDS * arms one-token steps, whose
 * matmuls on the workspace's pool take the variants in turn call by call
 * (call i of trial step s runs variant (i + s) mod arms), then
 * DSR1_PFTUNE_KEEP steps of the variant whose calls took least time in
 * all. Over `arms` steps every call of a step ran every variant once, so
 * the sums compare the same work; and as the variants alternate every few
 * milliseconds, a slow spell of the machine's memory costs all of them
 * alike. A model with no INT8 matrix tries two variants (arms): bit 1
 * only changes the INT8 GEMV.
 *
 * (Until 2026-11-30 a trial ran whole steps of each variant in turn, 6
 * each: 24 of bench-peer's 32 decode steps on an INT8 file were trial
 * steps, 18 of them of the variants not kept, and step times on these VMs
 * swing by 10% from one step to the next. Measured against it, the builds
 * alternated, `dsr1 bench --prompt 1 --gen 32`, R1-shape files, 2-core
 * Emerald Rapids Xeon, 8 pairs each, either build first in 4: INT8 median
 * 10.88 against 10.28 tok/s, the median pair ratio 1.07, ahead in 5 of
 * 8; BF16 (two variants) 5.72 against 5.71, level. On BF16 its trials
 * there kept variant 1 every time, the calls of variant 0 summing to
 * 2.5-22% more time.)
 *
 * Why: AMD EPYC Zen 5 VM, 2 threads, INT8 R1-shape file, one process
 * alternating the two variants step by step (256 steps): with the
 * machine's read loop at ~63 GB/s hardware-only steps were 5.6-7.8%
 * faster (4 of 5 runs; 0 in the fifth), with it at 31-35 GB/s (other
 * tenants) 1.4-3.6% slower (6 runs); the bandwidth probe's read loop
 * shows the same turn (prefetch 0 best when idle, 2-8 KiB ahead best when
 * loaded). A fixed choice loses one of the two.
 */
#include "pftune.h"

/* The variants a trial runs (pftune.h, arms). */
static int arms(const dsr1_pftune *t)
{
    return t->arms > 0 && t->arms < DSR1_PFTUNE_ARMS ? t->arms : DSR1_PFTUNE_ARMS;
}

int dsr1_pftune_trial(const dsr1_pftune *t) { return t->at < arms(t) * DSR1_PFTUNE_ROUNDS; }

int dsr1_pftune_call(dsr1_pftune *t)
{
    /* call i of trial step s: variant (i + s) mod arms */
    return (t->call++ + t->at) % arms(t);
}

void dsr1_pftune_call_done(dsr1_pftune *t, int v, double seconds)
{
    if (v >= 0 && v < DSR1_PFTUNE_ARMS && seconds > 0) t->sum[v] += seconds;
}

void dsr1_pftune_step_done(dsr1_pftune *t)
{
    const int na = arms(t), trial = na * DSR1_PFTUNE_ROUNDS;
    t->call = 0;
    if (t->at == trial - 1) {
        int best = 0; /* the lower variant on a tie (a trial with no calls keeps 0) */
        for (int v = 1; v < na; v++)
            if (t->sum[v] < t->sum[best]) best = v;
        t->choice = best;
        for (int v = 0; v < DSR1_PFTUNE_ARMS; v++) t->sum[v] = 0;
        t->trials++;
    }
    if (++t->at == trial + DSR1_PFTUNE_KEEP) t->at = 0;
}
