/*
 * pftune.c - the decode-time GEMV choice: prefetch and INT8 row layout (pftune.h).
 *
 * A cycle is a trial of DSR1_PFTUNE_ARMS * DSR1_PFTUNE_TRIAL steps, the
 * variants in turn (a slow second of the machine then costs all alike),
 * then DSR1_PFTUNE_KEEP steps of the variant whose trial steps were
 * fastest on average. Steps of a decode differ little from one to the
 * next (one more cached position), so neighbours compare fairly. At most
 * the trial's losing variants' steps are spent slower: 18 of 120.
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

#define TRIAL_STEPS (DSR1_PFTUNE_ARMS * DSR1_PFTUNE_TRIAL)

int dsr1_pftune_next(const dsr1_pftune *t)
{
    return t->at < TRIAL_STEPS ? t->at % DSR1_PFTUNE_ARMS : t->choice;
}

void dsr1_pftune_done(dsr1_pftune *t, double seconds)
{
    if (t->at < TRIAL_STEPS) {
        t->sum[t->at % DSR1_PFTUNE_ARMS] += seconds;
        if (t->at == TRIAL_STEPS - 1) {
            int best = 0; /* as many steps each; the lower variant on a tie */
            for (int v = 1; v < DSR1_PFTUNE_ARMS; v++)
                if (t->sum[v] < t->sum[best]) best = v;
            t->choice = best;
            for (int v = 0; v < DSR1_PFTUNE_ARMS; v++) t->sum[v] = 0;
            t->trials++;
        }
    }
    if (++t->at == TRIAL_STEPS + DSR1_PFTUNE_KEEP) t->at = 0;
}
