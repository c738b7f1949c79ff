/*
 * common.h - helpers every subcommand may share: which model file to load,
 * a status line on stderr, colour, loading a model with progress, and JSONL
 * streams that are plain or zstd-compressed.
 *
 * Only cli/ uses this (it prints). Nothing here knows about chat or batches.
 */
#ifndef DSR1_CLI_COMMON_H
#define DSR1_CLI_COMMON_H

#include <stddef.h>
#include <getopt.h>
#include <stdio.h>

#include "core/dsr1.h"
#include "core/error.h"

/* ---- model selection -------------------------------------------------- */

/*
 * The model file to load: `flag` (-m/--model) when non-NULL, else
 * $DSR1_MODEL, else the data directory ($XDG_DATA_HOME/dsr1, default
 * ~/.local/share/dsr1): the file named by its `default` file (a path,
 * relative ones taken from the directory), else its only *.dsr1 file.
 * Fills out (cap bytes). DSR1_ENOTFOUND with a message saying how to get a
 * model (dsr1 convert ... --default) when there is none; DSR1_EINVAL when
 * the path is a checkpoint directory, with the convert command to run.
 */
int dsr1_common_model_path(const char *flag, char *out, size_t cap, dsr1_error *err);

/*
 * A model or checkpoint path as the user typed it: arg itself when such a
 * path exists (or arg does not read as a repo id); else, for ORG/NAME[@REV],
 * its snapshot directory in the Hugging Face cache (where `dsr1 pull` and
 * the official tools put it), or the one .dsr1 file in that snapshot.
 * DSR1_ENOTFOUND with the `dsr1 pull` command to run when it is not there.
 */
int dsr1_common_resolve_path(const char *arg, char *out, size_t cap, dsr1_error *err);

/* The data directory ($XDG_DATA_HOME/dsr1 or ~/.local/share/dsr1). */
void dsr1_common_data_dir(char *out, size_t cap);

/* ---- options ------------------------------------------------------------ */

/* A numeric option value in [lo, hi] (an integer when `integer`). Returns
 * 0, or prints the usage error for `dsr1 <cmd>` and returns 2. */
int dsr1_common_opt_num(const char *cmd, const char *flag, const char *val, double lo, double hi,
                        int integer, double *out);

/*
 * The sampling settings, one canonical spelling each, shared by `run`
 * request fields, the `run`/`chat` flags and chat's /set: name is the JSON
 * and /set name (OpenAI's: "repetition_penalty"), flag the command-line
 * spelling ("--repetition-penalty"); aliases (space separated) are still
 * accepted ("repeat_penalty"). lo/hi: the allowed range.
 */
typedef struct dsr1_setting {
    const char *name, *flag, *aliases;
    double lo, hi;
    int integer;
} dsr1_setting;
/* The table and its length. */
const dsr1_setting *dsr1_common_settings(size_t *n);
/* The setting a name or alias means ('-' and '_' alike, leading dashes
 * ignored), or NULL. */
const dsr1_setting *dsr1_common_setting(const char *name);

/* Edit distance with a swap of neighbours counting 1 (names up to 64 bytes). */
size_t dsr1_common_edit_distance(const char *a, const char *b);
/* The candidate that word is most likely a typo of, or NULL when none is
 * close (at most 2 edits and under a third of the word). */
const char *dsr1_common_suggest(const char *word, const char *const *cands, size_t n);

/* ---- terminal ----------------------------------------------------------- */

/* Whether to colour output written to fd: a terminal, no NO_COLOR in the
 * environment (any value, per no-color.org), and not disabled by a flag. */
int dsr1_common_use_color(int fd, int no_color_flag);

/* Seconds on a monotonic clock. */
double dsr1_common_now(void);

/*
 * A one-line status on stderr. On a terminal the line is redrawn in place
 * (at most 10 times a second); otherwise each update is printed as its own
 * line, at most once every `plain_interval` seconds, so logs stay short.
 * quiet suppresses everything.
 */
typedef struct dsr1_status {
    int tty, quiet, shown;
    double last, plain_interval;
} dsr1_status;

void dsr1_common_status_init(dsr1_status *s, int quiet);
/* force: print even if the rate limit says not yet (e.g. the final 100%). */
void dsr1_common_status(dsr1_status *s, int force, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Erase the line (terminal) so normal output can follow. */
void dsr1_common_status_clear(dsr1_status *s);

/* "1.2 GiB", "340 MiB", "12 KiB" into buf. */
const char *dsr1_common_bytes(double bytes, char *buf, size_t cap);

/*
 * Open a model with a progress status line ("loading r1.dsr1 43% experts")
 * and then one line "model: <path>: <describe>" on stderr unless quiet.
 * backend/threads may be NULL/0 for the defaults.
 */
int dsr1_common_open_model(dsr1_model **m, const char *path, const char *backend,
                           int threads, int quiet, dsr1_error *err);

/* ---- JSONL streams -------------------------------------------------------- */

/*
 * Line reader over a file or "-" (stdin). zstd input is recognised by its
 * magic number, not the name, so `zstd -c x | dsr1 run --in -` works;
 * concatenated frames are read through. Lines are returned without the
 * newline; a last line without one is returned too.
 */
typedef struct dsr1_linereader dsr1_linereader;
int dsr1_common_reader_open(dsr1_linereader **r, const char *path, dsr1_error *err);
/* *line points into the reader's buffer (valid until the next call), *len
 * its length; *line is NULL at the end. Returns 0 or DSR1_EIO/EFORMAT. */
int dsr1_common_reader_next(dsr1_linereader *r, char **line, size_t *len, dsr1_error *err);
void dsr1_common_reader_close(dsr1_linereader *r); /* NULL is a no-op */
/* Lines longer than max_line bytes (0: no limit, the default) are not kept:
 * the reader skips to their end holding at most max_line bytes, returns an
 * empty line for them and dsr1_common_reader_too_long says their length. */
void dsr1_common_reader_set_max_line(dsr1_linereader *r, size_t max_line);
/* The length of the line just returned when it was over the limit, else 0. */
size_t dsr1_common_reader_too_long(const dsr1_linereader *r);

/*
 * Record writer to a file or "-" (stdout). A name ending in .zst writes
 * zstd: one frame per record, so the file is valid after every record and a
 * torn last frame is detectable. Each record is written with one write(2)
 * (and nothing is buffered in between), so a kill leaves at most one torn
 * record at the end. append: keep what is there (resume).
 */
typedef struct dsr1_recwriter dsr1_recwriter;
int dsr1_common_writer_open(dsr1_recwriter **w, const char *path, int append,
                            dsr1_error *err);
/* Write rec (len bytes) plus a newline. */
int dsr1_common_writer_put(dsr1_recwriter *w, const char *rec, size_t len, dsr1_error *err);
void dsr1_common_writer_close(dsr1_recwriter *w); /* NULL is a no-op */

/*
 * Read back an output file for --resume: call fn(ctx, line, len) for each
 * complete record, and truncate the file after the last complete one (a
 * torn line, a record that is not a JSON object, or a torn zstd frame is cut
 * away; a message about it goes into *note, empty when nothing was cut).
 * A missing file is not an error (nothing to resume).
 */
int dsr1_common_read_back(const char *path, void (*fn)(void *ctx, const char *line, size_t len),
                          void *ctx, char *note, size_t note_cap, dsr1_error *err);

/* Whether a path names zstd output (ends in ".zst"). */
int dsr1_common_is_zst(const char *path);

/* Read a whole file (or "-") into a malloc'd NUL-terminated buffer. */
int dsr1_common_read_all(const char *path, char **buf, size_t *len, dsr1_error *err);

/* ---- generation flags shared by chat and run ----------------------------- */

/* The numeric flags both `chat` and `run` take. Option codes start at
 * DSR1_GEN_OPT_BASE so a command's own codes (256..) never collide. */
enum {
    DSR1_GEN_OPT_BASE = 1000,
    DSR1_GEN_MAXTOK = DSR1_GEN_OPT_BASE, DSR1_GEN_TEMP, DSR1_GEN_TOPP, DSR1_GEN_TOPK,
    DSR1_GEN_MINP, DSR1_GEN_REP, DSR1_GEN_SEED, DSR1_GEN_CTX, DSR1_GEN_THREADS,
    DSR1_GEN_SPEC, DSR1_GEN_PRES, DSR1_GEN_FREQ, DSR1_GEN_VERIFY,
    DSR1_GEN_MLOCK, DSR1_GEN_PRELOAD, DSR1_GEN_NOPRELOAD, /* memory: no value */
    DSR1_GEN_NOPREFIX, DSR1_GEN_DETERMINISTIC,            /* no value */
    DSR1_GEN_KVTYPE,                                      /* bf16 | fp8 */
    DSR1_GEN_FP8PREFILL,                                  /* w8a8 | bf16 */
    DSR1_GEN_NUMA,
    DSR1_GEN_CHUNK,                                       /* --prefill-chunk N */
    DSR1_GEN_OPT_END
};
/* getopt_long entries for the flags above, to splice into a command's table. */
#define DSR1_GEN_LONGOPTS                                                               \
    {"max-tokens", required_argument, 0, DSR1_GEN_MAXTOK},                            \
    {"temperature", required_argument, 0, DSR1_GEN_TEMP},                             \
    {"top-p", required_argument, 0, DSR1_GEN_TOPP},                                   \
    {"top-k", required_argument, 0, DSR1_GEN_TOPK},                                   \
    {"min-p", required_argument, 0, DSR1_GEN_MINP},                                   \
    {"repetition-penalty", required_argument, 0, DSR1_GEN_REP},                       \
    {"repeat-penalty", required_argument, 0, DSR1_GEN_REP},                           \
    {"presence-penalty", required_argument, 0, DSR1_GEN_PRES},                        \
    {"frequency-penalty", required_argument, 0, DSR1_GEN_FREQ},                       \
    {"temp", required_argument, 0, DSR1_GEN_TEMP},                                    \
    {"n-predict", required_argument, 0, DSR1_GEN_MAXTOK},                             \
    {"predict", required_argument, 0, DSR1_GEN_MAXTOK},                               \
    {"ctx-size", required_argument, 0, DSR1_GEN_CTX},                                 \
    {"seed", required_argument, 0, DSR1_GEN_SEED},                                    \
    {"ctx", required_argument, 0, DSR1_GEN_CTX},                                      \
    {"threads", required_argument, 0, DSR1_GEN_THREADS},                              \
    {"spec-draft", required_argument, 0, DSR1_GEN_SPEC},                              \
    {"prefill-chunk", required_argument, 0, DSR1_GEN_CHUNK},                          \
    {"verify", no_argument, 0, DSR1_GEN_VERIFY},                                      \
    {"mlock", no_argument, 0, DSR1_GEN_MLOCK},                                        \
    {"preload", no_argument, 0, DSR1_GEN_PRELOAD},                                    \
    {"no-preload", no_argument, 0, DSR1_GEN_NOPRELOAD},                               \
    {"no-prefix-cache", no_argument, 0, DSR1_GEN_NOPREFIX},                           \
    {"kv-type", required_argument, 0, DSR1_GEN_KVTYPE},                               \
    {"numa", required_argument, 0, DSR1_GEN_NUMA},                                    \
    {"deterministic", no_argument, 0, DSR1_GEN_DETERMINISTIC},                        \
    {"fp8-prefill", required_argument, 0, DSR1_GEN_FP8PREFILL}

typedef struct dsr1_gen_flags {
    dsr1_sampling *sampling; /* where the sampling flags go (caller's struct) */
    int *max_tokens;         /* where --max-tokens goes */
    int ctx, threads;        /* 0 = default */
    int spec_draft;          /* -1 adaptive (default), 0 off, 1..8 */
    int prefill_chunk;       /* --prefill-chunk: prompt tokens per step, 0 = the model's */
    int preload;             /* 0 auto (terminal, file not cached), 1 --preload, -1 --no-preload */
    int mlock;               /* --mlock: preload and lock the weights in memory */
    int no_prefix_cache;     /* --no-prefix-cache: every prompt computed in full */
    int kv_fp8;              /* --kv-type fp8 (default bf16) */
} dsr1_gen_flags;

/* --numa auto|off|virtual:N: the CPU backend's NUMA split
 * (dsr1_model_options.numa_nodes: 0, 1, N) into *out; 0, or 2 after a
 * usage error naming cmd. Also a generation flag (DSR1_GEN_NUMA), which
 * applies to every later dsr1_common_open_model. */
int dsr1_common_numa_arg(const char *cmd, const char *v, int *out);

/* --fp8-prefill w8a8|bf16 into *bf16 (dsr1_model_options.fp8_bf16: 0, 1);
 * 0, or 2 after a usage error naming cmd. Also a generation flag
 * (DSR1_GEN_FP8PREFILL), which applies to every later open. */
int dsr1_common_fp8_prefill_arg(const char *cmd, const char *v, int *bf16);

/* --verify (no value) makes every later dsr1_common_open_model hash the
 * whole file against its directory before loading (dsr1 verify's check). */
/* If c is one of the DSR1_GEN_* codes, parse v into f and return 0 (or 2
 * after printing a usage error naming cmd and the flag); -1 when c is not
 * one of them. */
int dsr1_common_gen_flag(const char *cmd, dsr1_gen_flags *f, int c, const char *v);

/*
 * Open a model for an engine of max_seqs sequences with the flags g
 * (common_mem.c): first the memory check (before anything is loaded:
 * DSR1_ENOMEM with the numbers and what to change when the KV cache and
 * buffers cannot fit; a warning on stderr when only the weights would not
 * stay cached), then the preload (--preload, --mlock, or by default on a
 * terminal for a file less than 90% in the page cache), then
 * dsr1_common_open_model. par: the command's flag for max_seqs
 * ("--parallel"), named in the advice; NULL when it has none.
 */
int dsr1_common_open_checked(dsr1_model **m, const char *path, const char *backend,
                             const dsr1_gen_flags *g, int max_seqs, const char *par, int quiet,
                             dsr1_error *err);


/* run's and chat's --help lines on the compute modes (one text for both) */
#define DSR1_HELP_COMPUTE_MODES                                                                    \
    "      --deterministic     only batch-invariant kernels: a token's result is the same bits\n" \
    "                          in any batch (default: fast mode, FP8 prefill matmuls as W8A8,\n" \
    "                          naive-form attention for prompt runs of 32+): a 512-token\n"      \
    "                          prefill at 0.5x of fast for FP8, 0.6-0.9x for INT8 and INT4 on\n" \
    "                          Zen 4, decode unchanged; see dsr1(1) FAST AND DETERMINISTIC MODE\n" \
    "      --fp8-prefill M     FP8 files, fast mode: w8a8 (default) runs matmuls of 9+ tokens\n" \
    "                          (prefill, and steps of 9+ sequences or verify rows) in int8\n" \
    "                          with a scale per 128 columns, DeepSeek's FP8\n" \
    "                          granularity: prefill 1.7x bf16's on Zen 4 without AMX, KL from\n" \
    "                          f32 an INT8 file's (4.1e-3 against 7.3e-4 on tiny-r1); bf16 keeps\n" \
    "                          bf16. Steps of up to 8 tokens stay bf16; --deterministic\n" \
    "                          is always bf16\n"

#endif
