/*
 * pftune.h - choosing, while decoding, whether the INT8, INT4 and BF16 row GEMVs
 * (matmul_avx512.c, matmul_lanes_avx512.c) ask for their weight lines
 * ahead (software prefetch) or leave the stream to the hardware
 * prefetcher, and whether the INT8 GEMV reads its rows one at a time or
 * four side by side. Which is faster depends on the CPU (four rows won on
 * an Emerald Rapids Xeon, one on Zen 5: PERFORMANCE.md) and on how loaded the machine's
 * memory is, and on the VMs here that changes by the minute (README,
 * Performance: "What changed for decode (1f171c5)"): so the decoder
 * measures the variants against each other and keeps the fastest for a
 * while, then measures again.
 *
 * A trial's steps interleave the variants call by call: the matmuls of
 * one step take the variants in turn, and the next step shifts the turn
 * by one, so over `arms` trial steps every matmul of the step ran every
 * variant once, and the variants' summed call times compare the same
 * work done in the same few hundred milliseconds.
 *
 * Pure bookkeeping, no clock and no threads: the CPU backend marks the
 * one-token steps (step_begin to step_end); during a trial step the
 * matmuls run on the workspace's pool ask for their variant and report
 * their time (matmul.c). Results do not depend on it (a prefetch never
 * changes a value).
 */
#ifndef DSR1_PFTUNE_H
#define DSR1_PFTUNE_H

/* Trial steps per variant (each a mix of all of them, above), and steps
 * the winner then runs before the next trial. */
#define DSR1_PFTUNE_ROUNDS 2
#define DSR1_PFTUNE_KEEP 96

/* The variants: two bits (kernels.h, DSR1_GEMV_*): bit 0 leaves the row
 * GEMVs' stream to the hardware prefetcher, bit 1 runs the INT8 GEMV four
 * rows side by side at any width (matmul_avx512.c, GEMV_LONG). */
#define DSR1_PFTUNE_ARMS 4

typedef struct dsr1_pftune {
    int arms;        /* variants tried: 2 where no INT8 GEMV runs (bit 1
                        would change nothing), else 0 or DSR1_PFTUNE_ARMS */
    int at;          /* one-token steps into the current trial + keep cycle */
    int call;        /* matmuls into the current trial step */
    int choice;      /* the variant kept */
    double sum[DSR1_PFTUNE_ARMS]; /* this trial's call seconds per variant */
    int trials;      /* trials finished (the tests count them) */
} dsr1_pftune;

/* Whether the next one-token step is a trial step (its matmuls then ask
 * dsr1_pftune_call); the variant every other matmul runs is t->choice. */
int dsr1_pftune_trial(const dsr1_pftune *t);
/* In a trial step: the variant the step's next matmul runs. */
int dsr1_pftune_call(dsr1_pftune *t);
/* That matmul (of variant v) took `seconds`. */
void dsr1_pftune_call_done(dsr1_pftune *t, int v, double seconds);
/* A one-token step ended (trial or not). */
void dsr1_pftune_step_done(dsr1_pftune *t);

#endif
