/*
 * pftune.h - choosing, while decoding, whether the INT8, INT4 and BF16 row GEMVs
 * (matmul_avx512.c, matmul_lanes_avx512.c) ask for their weight lines
 * ahead (software prefetch) or leave the stream to the hardware
 * prefetcher, and whether the INT8 GEMV reads its rows one at a time or
 * four side by side. Which is faster depends on the CPU (four rows won on
 * an Emerald Rapids Xeon, one on Zen 5: PERFORMANCE.md) and on how loaded the machine's
 * memory is, and on the VMs here that changes by the minute (README,
 * Performance: "What changed for decode (1f171c5)"): so the decoder
 * measures both, step against step, and keeps the faster for a while, then
 * measures again.
 *
 * Pure bookkeeping over step times, no clock and no threads: the CPU
 * backend times each one-token step (step_begin to step_end) and asks
 * which variant the next runs. Results do not depend on it (a prefetch
 * never changes a value).
 */
#ifndef DSR1_PFTUNE_H
#define DSR1_PFTUNE_H

/* Steps of each variant per trial (in turn), and steps the winner then
 * runs before the next trial. */
#define DSR1_PFTUNE_TRIAL 6
#define DSR1_PFTUNE_KEEP 96

/* The variants: two bits (kernels.h, DSR1_GEMV_*): bit 0 leaves the row
 * GEMVs' stream to the hardware prefetcher, bit 1 runs the INT8 GEMV four
 * rows side by side at any width (matmul_avx512.c, GEMV_LONG). */
#define DSR1_PFTUNE_ARMS 4

typedef struct dsr1_pftune {
    int arms;        /* variants tried: 2 where no INT8 GEMV runs (bit 1
                        would change nothing), else 0 or DSR1_PFTUNE_ARMS */
    int at;          /* steps into the current trial + keep cycle */
    int choice;      /* the variant kept */
    double sum[DSR1_PFTUNE_ARMS]; /* this trial's step seconds per variant */
    int trials;      /* trials finished (the tests count them) */
} dsr1_pftune;

/* The variant the next one-token step runs (0 .. DSR1_PFTUNE_ARMS - 1). */
int dsr1_pftune_next(const dsr1_pftune *t);
/* That step took `seconds` (it ran dsr1_pftune_next's variant). */
void dsr1_pftune_done(dsr1_pftune *t, double seconds);

#endif
