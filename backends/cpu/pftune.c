/*
 * pftune.c - the decode-time prefetch choice (pftune.h).
 *
 * A cycle is a trial of 2 * DSR1_PFTUNE_TRIAL steps, the two variants
 * alternating (a slow second of the machine then costs both alike), then
 * DSR1_PFTUNE_KEEP steps of the variant whose trial steps were faster on
 * average. Steps of a decode differ little from one to the next (one more
 * cached position), so neighbours compare fairly. At most a trial's
 * losing half is spent on the slower variant: 6 of 108 steps.
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

int dsr1_pftune_next(const dsr1_pftune *t)
{
    return t->at < 2 * DSR1_PFTUNE_TRIAL ? t->at & 1 : t->choice;
}

void dsr1_pftune_done(dsr1_pftune *t, double seconds)
{
    if (t->at < 2 * DSR1_PFTUNE_TRIAL) {
        int v = t->at & 1;
        t->sum[v] += seconds;
        if (t->at == 2 * DSR1_PFTUNE_TRIAL - 1) {
            t->choice = t->sum[1] < t->sum[0]; /* as many steps each */
            t->sum[0] = t->sum[1] = 0;
            t->trials++;
        }
    }
    if (++t->at == 2 * DSR1_PFTUNE_TRIAL + DSR1_PFTUNE_KEEP) t->at = 0;
}
