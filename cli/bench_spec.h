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

/* One line of a --prompts file (len bytes, no terminator needed):
 * {"prompt": string, "tag": string (optional)}; *prompt and *tag (NULL
 * without one) are malloc'd. Errors name path and line. */
int dsr1_bench_prompt_parse(const char *text, size_t len, const char *path, long line,
                            char **prompt, char **tag, dsr1_error *err);

#endif
