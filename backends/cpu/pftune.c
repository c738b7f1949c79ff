/*
 * pftune.c - the decode-time GEMV choice: prefetch and INT8 row layout (pftune.h).
 *
 * A cycle is a trial of DSR1_PFTUNE_ARMS * DSR1_PFTUNE_TRIAL steps, the
 * variants in turn (a slow second of the machine then costs all alike),
 * then DSR1_PFTUNE_KEEP steps of the variant whose trial steps were
 * fastest on average. Steps of a decode differ little from one to the
 * next (one more cached position), so neighbours compare fairly. At most
 * the trial's losing variants' steps are spent slower: 18 of 120. A
 * model with no INT8 matrix tries two variants (arms): bit 1 only
 * changes the INT8 GEMV, and on a BF16 file's 32-token decode (what
 * bench-peer times) the duplicate pair had 12 of the 24 trial steps run
 * the slower prefetch choice instead of 6 of 12. Measured there (BF16
 * R1-shape file, 2-core Emerald Rapids Xeon, `dsr1 bench --prompt 1
 * --gen 32`, the builds alternated, 12 pairs, each build first in 6):
 * the median pair ratio 1.03, ahead in 7 of 12, within that machine's
 * noise; the arithmetic above is the reason to keep it.
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

int dsr1_pftune_next(const dsr1_pftune *t)
{
    const int na = arms(t);
    return t->at < na * DSR1_PFTUNE_TRIAL ? t->at % na : t->choice;
}

void dsr1_pftune_done(dsr1_pftune *t, double seconds)
{
    const int na = arms(t), trial = na * DSR1_PFTUNE_TRIAL;
    if (t->at < trial) {
        t->sum[t->at % na] += seconds;
        if (t->at == trial - 1) {
            int best = 0; /* as many steps each; the lower variant on a tie */
            for (int v = 1; v < na; v++)
                if (t->sum[v] < t->sum[best]) best = v;
            t->choice = best;
            for (int v = 0; v < na; v++) t->sum[v] = 0;
            t->trials++;
        }
    }
    if (++t->at == trial + DSR1_PFTUNE_KEEP) t->at = 0;
}
