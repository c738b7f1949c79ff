/*
 * run_req.h - `dsr1 run` requests and result records as data: parsing one
 * JSONL input line (our shape or the OpenAI batch-file shape) against the
 * command-line defaults, and writing result / error records.
 *
 * Pure functions of their inputs (no model, no engine, no I/O), so they are
 * unit-tested on their own (tests/test_run.c includes this module).
 */
#ifndef DSR1_CLI_RUN_REQ_H
#define DSR1_CLI_RUN_REQ_H

#include <stddef.h>

#include "core/error.h"
#include "core/sampler.h"
#include "core/tokenizer.h"
#include "core/template.h"

/* What the command line sets; request fields override. */
typedef struct dsr1_run_defaults {
    int max_tokens;
    dsr1_sampling sampling; /* .seed is the base: a request without its own
                               seed gets base + its line number */
    const char *system;     /* added as the first message when a chat has none */
    char *const *stop;      /* --stop strings, used when a request has no "stop" */
    size_t n_stop;
    int strict;             /* unknown or unsupported fields are an error, not a warning */
} dsr1_run_defaults;

/* A field a request line had that dsr1 does not use: the field (the key for
 * reporting each only once) and the one-line warning. */
typedef struct dsr1_run_warn {
    char field[64];
    char msg[224];
} dsr1_run_warn;

#define DSR1_RUN_MAX_WARN 4
#define DSR1_RUN_MAX_N 128  /* most choices per request ("n") */

void dsr1_run_defaults_init(dsr1_run_defaults *d);

typedef struct dsr1_run_req {
    long line;            /* 1-based line number in the input */
    char *id_json;        /* the id as JSON text ("\"a\"", "7", "\"line-3\"") */
    int custom_id;        /* the line used the OpenAI batch shape */
    dsr1_chat *chat;      /* messages (+ tools), or NULL for a raw prompt */
    char *prompt;         /* raw text when chat is NULL */
    int max_tokens;
    dsr1_sampling sampling;
    char **stop;          /* stop strings (non-empty), n_stop of them */
    size_t n_stop;
    size_t max_stop_len;
    int32_t *stop_ids;    /* "stop_token_ids" (vLLM), n_stop_ids of them */
    size_t n_stop_ids;
    int n;                /* choices ("n", 1..DSR1_RUN_MAX_N) */
    int logprobs;         /* "logprobs": true */
    int top_logprobs;     /* 0..20 */
    char *model;          /* "model" as given, or NULL */
    dsr1_run_warn warn[DSR1_RUN_MAX_WARN]; /* fields ignored (not with strict) */
    int n_warn;
} dsr1_run_req;

/*
 * Parse one input line. On success fills r (free with dsr1_run_req_clear).
 * On failure returns DSR1_EINVAL with the reason in err, and r->id_json is
 * still set (the line's id, or "line-N") so an error record can be written.
 */
int dsr1_run_req_parse(dsr1_run_req *r, const char *line, size_t len, long line_no,
                       const dsr1_run_defaults *d, dsr1_error *err);
void dsr1_run_req_clear(dsr1_run_req *r);

/*
 * The id of an input line as JSON text (malloc'd) and whether it came from
 * "custom_id", without judging the rest: "line-N" when it has none or is
 * not a JSON object. NULL only when out of memory. *bad is set (the id is
 * then "line-N") when the id is there but unusable (not a string or a
 * finite number); msg (cap bytes) says why.
 */
char *dsr1_run_line_id(const char *line, size_t len, long line_no, int *custom, int *bad,
                       char *msg, size_t cap);

/* The id set of a results file, for --resume: the id of a record line as
 * JSON text (malloc'd), or NULL when the line has none. A record of the
 * OpenAI shape is known by its "custom_id" (its "id" is ours). */
char *dsr1_run_record_id(const char *line, size_t len);

/* A set of ids (JSON text) for --resume and the duplicate check: open
 * addressing, grows; each id keeps a number (the line it was first seen on). */
typedef struct dsr1_run_idset {
    char **slot;
    long *val;
    size_t cap, n;
} dsr1_run_idset;
/* Takes ownership of id (freed if already present). 0 or DSR1_ENOMEM. */
int dsr1_run_idset_add(dsr1_run_idset *s, char *id);
/* As add, with a value; when the id is already there, *old gets its value
 * (and id is freed), else *old = 0. */
int dsr1_run_idset_put(dsr1_run_idset *s, char *id, long val, long *old);
int dsr1_run_idset_has(const dsr1_run_idset *s, const char *id);
void dsr1_run_idset_free(dsr1_run_idset *s);

typedef struct dsr1_run_toolcall {
    const char *name, *arguments; /* arguments: JSON text */
} dsr1_run_toolcall;

/* One generated token's log-probabilities (dsr1_event's fields). */
typedef struct dsr1_run_logprob {
    int32_t token;
    float logprob;
    int n_top;
    int32_t top_ids[DSR1_MAX_TOP_LOGPROBS];
    float top_logprobs[DSR1_MAX_TOP_LOGPROBS];
} dsr1_run_logprob;

/* One choice of a finished request. Strings may be NULL (written as null). */
typedef struct dsr1_run_choice {
    const char *content, *reasoning;
    const dsr1_run_toolcall *tool_calls;
    size_t n_tool_calls;
    const char *finish;      /* "stop" | "length" | "tool_calls" */
    const dsr1_run_logprob *logprobs; /* n_logprobs of them when want_logprobs */
    size_t n_logprobs;
    int want_logprobs;
    int completion_tokens, reasoning_tokens;
} dsr1_run_choice;

/* One finished request. */
typedef struct dsr1_run_result {
    const char *id_json;
    int custom_id;
    long line;               /* input line: names the OpenAI ids */
    int openai;              /* write the OpenAI batch shape */
    const char *model;       /* "model" of the output (OpenAI shape) */
    long long created;       /* Unix time (OpenAI shape) */
    const dsr1_tokenizer *tk;/* token text for logprobs; NULL writes ids only */
    const dsr1_run_choice *choices;
    size_t n_choices;
    int prompt_tokens, completion_tokens, reasoning_tokens, cached_tokens; /* all choices */
    int spec_steps, spec_drafted, spec_accepted; /* written when spec_steps > 0 */
    double ttft_ms, total_ms, tokens_per_s;
} dsr1_run_result;

/* The record as one line of JSON (malloc'd, no newline), run_out.c. */
char *dsr1_run_result_json(const dsr1_run_result *r);
/*
 * A request that failed as a whole (malloc'd). Flat: {"id", "custom_id"?,
 * "error": {"code", "message"}}; OpenAI: {"id", "custom_id", "response":
 * null, "error": {"code", "message"}}. code: "invalid_request",
 * "context_length_exceeded" or "server_error".
 */
char *dsr1_run_error_json(const char *id_json, int custom_id, long line, int openai,
                          const char *code, const char *msg);

#endif
