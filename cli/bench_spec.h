/*
 * bench_spec.h - between the two halves of `dsr1 bench --spec`: the forced
 * draft table (bench_spec.c) and the real-prompt table (bench_spec_prompts.c).
 */
#ifndef DSR1_CLI_BENCH_SPEC_H
#define DSR1_CLI_BENCH_SPEC_H

#include "core/dsr1.h"

/* Every prompt of the JSONL file at `batch` sequences, in the modes off,
 * adaptive and k = 1..k (3 when 0), interleaved in `rounds` rounds (at
 * most 15), the table (medians) printed on stdout. */
int dsr1_bench_spec_prompts(dsr1_model *m, const char *path, int batch, int gen, int k,
                            int rounds, dsr1_error *err);

#endif
