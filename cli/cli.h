/*
 * cli.h - the dsr1 program: one file per subcommand (cli/<name>.c), each
 * exporting `int dsr1_cmd_<name>(int argc, char **argv)` where argv[0] is
 * the subcommand name. Only cli/ prints to the terminal and picks exit
 * codes: 0 ok, 1 runtime error, 2 usage error.
 */
#ifndef DSR1_CLI_H
#define DSR1_CLI_H

#include "core/error.h"

int dsr1_cmd_convert(int argc, char **argv);
int dsr1_cmd_info(int argc, char **argv);
int dsr1_cmd_tokenize(int argc, char **argv);
int dsr1_cmd_detokenize(int argc, char **argv);
int dsr1_cmd_template(int argc, char **argv);
int dsr1_cmd_logits(int argc, char **argv);
int dsr1_cmd_eval(int argc, char **argv);
int dsr1_cmd_bench(int argc, char **argv);
int dsr1_cmd_chat(int argc, char **argv);
int dsr1_cmd_run(int argc, char **argv);
int dsr1_cmd_pull(int argc, char **argv);
int dsr1_cmd_verify(int argc, char **argv);

/* `dsr1 bench tokenize [-m MODEL] [--repeat N] FILE` (cli/bench_tokenize.c),
 * called by cli/bench.c. argv[0] is "tokenize" (or argv[0..1] are "bench",
 * "tokenize"); prints MB/s and tokens/s, returns the exit code. */
int dsr1_bench_tokenize(int argc, char **argv);

/* `dsr1 bench --spec -m MODEL [--k N] [--prompt N] [--gen N] [--accept A]
 * [--threads N] [--f32]` (cli/bench_spec.c): the cost of a verify step of
 * k + 1 tokens against a plain decode step and the resulting tokens/s as a
 * function of the draft acceptance rate. argv is bench's (the "--spec"
 * argument anywhere in it is skipped); returns the exit code. */
int dsr1_bench_spec(int argc, char **argv);

/* `dsr1 info --hw [--json]`: describe this machine (CPU features, cores,
 * NUMA, memory, GPUs); implemented in cli/info_hw.c. Returns the exit code. */
int dsr1_info_hw(int json, int numa, int threads); /* numa, threads: as --numa, --threads */

/* Print "dsr1: <msg>" to stderr and return 1 (runtime error exit code). */
int dsr1_cli_fail(const dsr1_error *err);
/* Print "dsr1 <cmd>: <fmt...>" and a hint to use --help; returns 2. */
int dsr1_cli_usage(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
