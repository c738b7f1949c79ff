/*
 * run_batch.h - `dsr1 run --in ... --out ...`: a JSONL batch through the
 * engine's continuous batching, written in input order (or as finished),
 * resumable. The option parsing and the single-prompt mode are in run.c.
 */
#ifndef DSR1_CLI_RUN_BATCH_H
#define DSR1_CLI_RUN_BATCH_H

#include <signal.h>

#include "core/dsr1.h"
#include "run_gen.h"
#include "run_req.h"

typedef enum { DSR1_FORMAT_AUTO = 0, DSR1_FORMAT_FLAT, DSR1_FORMAT_OPENAI } dsr1_run_format;

typedef struct dsr1_run_opts {
    const char *in, *out;  /* paths or "-" */
    const char *in_text;   /* instead of in: this one request line (prompt mode with --out) */
    int parallel;          /* sequences in flight */
    int unordered, resume, quiet, overwrite;
    dsr1_run_format format;/* auto: the first request line decides (custom_id/body: openai) */
    size_t max_line_bytes; /* longer input lines get an error record (0: no limit) */
    const char *model_name;/* "model" in OpenAI records when a request names none */
    dsr1_run_defaults defaults;
    dsr1_prompt_opts prompt;
} dsr1_run_opts;

/* What is known before the model loads (run_check.c). */
typedef struct dsr1_run_plan {
    long total;            /* request lines, or 0 when the input streams */
    dsr1_run_idset done;   /* ids already in --out (--resume) */
    char note[600];        /* what reading --out back cut, or "" */
} dsr1_run_plan;

/*
 * Check every argument and file before anything loads or is written:
 * --in readable and not a directory, not the same file as --out; --out's
 * directory exists; an existing non-empty --out needs --resume or
 * --overwrite; --resume needs --out FILE. Prints the usage error and
 * returns 2, or 0.
 */
int dsr1_run_check_files(const dsr1_run_opts *o);

/*
 * Read ahead what can be known without the model: for a regular --in file,
 * the request count and duplicate ids (refused, naming the lines: --resume
 * finds requests by id); with --resume, the ids already in --out (a torn
 * last record is cut, anything else unexpected is refused). Input that is
 * not a regular file (a pipe, a FIFO, /dev/stdin) is not read here: it is
 * streamed once. Returns 0 or an error (message in err).
 */
int dsr1_run_plan_make(dsr1_run_plan *p, const dsr1_run_opts *o, dsr1_error *err);
void dsr1_run_plan_free(dsr1_run_plan *p);

/*
 * Run the batch. Returns 0 when the run went through (even if some
 * requests failed: *n_failed counts their records), DSR1_EINTR when *stop
 * was raised (what finished is written; rerun with --resume), or another
 * code when the engine or the output failed.
 */
int dsr1_run_batch(dsr1_model *m, dsr1_engine *e, const dsr1_run_opts *o,
                   dsr1_run_plan *plan, volatile sig_atomic_t *stop, long *n_failed,
                   dsr1_error *err);

#endif
