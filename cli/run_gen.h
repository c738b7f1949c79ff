/*
 * run_gen.h - the text side of one generating sequence, shared by `dsr1 run`
 * and `dsr1 chat`: token ids in, decoded UTF-8 split into reasoning and
 * answer (core/reasoning.h), stop strings matched on the answer, counts,
 * and an optional sink that sees every piece as it arrives (streaming).
 *
 * Not here: the engine, sampling, templates, output formats.
 *
 * Invariants: `answer` never contains a matched stop string or anything
 * after it, and neither does what the sink is given (it gets the answer up
 * to longest-stop - 1 bytes late); the EOS token's text is never part of
 * either buffer.
 */
#ifndef DSR1_CLI_RUN_GEN_H
#define DSR1_CLI_RUN_GEN_H

#include <stddef.h>
#include <stdint.h>

#include "core/reasoning.h"
#include "core/template.h"
#include "core/tokenizer.h"

typedef enum {
    DSR1_GEN_REASONING = 0, /* a piece of reasoning text */
    DSR1_GEN_ANSWER = 1,    /* a piece of answer text */
    DSR1_GEN_THINK_END = 2, /* the reasoning block closed (text empty) */
} dsr1_gen_kind;

typedef void (*dsr1_gen_sink)(void *ctx, dsr1_gen_kind kind, const char *text, size_t len);

typedef struct dsr1_gen_buf {
    char *p;
    size_t n, cap;
} dsr1_gen_buf;

typedef struct dsr1_gen {
    const dsr1_tokenizer *tk;
    int32_t eos;
    dsr1_detok detok;
    dsr1_reasoning *split;
    dsr1_gen_buf reasoning, answer;
    char *const *stop;      /* borrowed stop strings */
    size_t n_stop, max_stop;
    int stopped;            /* a stop string matched; answer is cut there */
    int closed;             /* saw the end of the reasoning block */
    int n_tokens, n_reasoning_tokens;
    double t_think_end;     /* when the block closed (dsr1_common_now), or 0 */
    dsr1_gen_sink sink;
    void *sink_ctx;
    size_t streamed;        /* answer bytes already given to the sink */
} dsr1_gen;

/* forced_open: the prompt left a <think> block open (reasoning.h). stop
 * strings are borrowed and must outlive the gen. */
int dsr1_gen_init(dsr1_gen *g, const dsr1_tokenizer *tk, int32_t eos, int forced_open,
                  char *const *stop, size_t n_stop, dsr1_gen_sink sink, void *sink_ctx,
                  dsr1_error *err);
/* One generated token. Returns 1 when a stop string matched (the caller
 * cancels the sequence; later tokens are ignored), 0, or <0 on ENOMEM. */
int dsr1_gen_push(dsr1_gen *g, int32_t token, dsr1_error *err);
/* End of stream: flush the detokenizer and the splitter's held bytes. */
int dsr1_gen_finish(dsr1_gen *g, dsr1_error *err);
dsr1_think_status dsr1_gen_think_status(const dsr1_gen *g);
void dsr1_gen_free(dsr1_gen *g);

/* The answer without surrounding whitespace and the reasoning without
 * trailing whitespace, as malloc'd strings (NULL reasoning when there was
 * no reasoning block). */
char *dsr1_gen_answer(const dsr1_gen *g);
char *dsr1_gen_reasoning(const dsr1_gen *g);

/* ---- prompts ------------------------------------------------------------ */

/* How a request becomes prompt tokens. */
typedef struct dsr1_prompt_opts {
    dsr1_template_kind kind;
    int no_think;   /* close R1's forced <think> block at once: "\n</think>\n\n" */
    int32_t bos;    /* BOS id (-1 none): its text is given to the template,
                       and raw prompts start with it */
} dsr1_prompt_opts;

struct dsr1_model;
/* Fill o for a model: the template named (NULL = the model's own, detected;
 * a warning goes to *warn, empty when none), BOS from its config. */
int dsr1_gen_prompt_opts(dsr1_prompt_opts *o, const struct dsr1_model *m, const char *name,
                         int no_think, char *warn, size_t warn_cap, dsr1_error *err);

/*
 * Render chat (or take raw text when chat is NULL) and tokenize it. *ids is
 * malloc'd. *forced_open says whether the prompt leaves a <think> block
 * open. Errors (an unknown role, invalid UTF-8) name what was wrong.
 */
int dsr1_gen_prompt(const dsr1_tokenizer *tk, const dsr1_prompt_opts *o, const dsr1_chat *chat,
                    const char *raw, int32_t **ids, size_t *n, int *forced_open,
                    dsr1_error *err);

/* ---- tool calls ------------------------------------------------------------ */

struct dsr1_toolcall_parser;
struct dsr1_run_toolcall;

/*
 * Split DeepSeek tool-call markup out of a finished answer (core/toolcall.h,
 * fed the whole answer at once; p must be fresh or reset). *content is
 * replaced by the text outside the markup; *calls (malloc'd, NULL when
 * none) point into the parser, so they live until it is reset or freed.
 * 0 or DSR1_ENOMEM.
 */
int dsr1_gen_split_tools(struct dsr1_toolcall_parser *p, char **content,
                         struct dsr1_run_toolcall **calls, size_t *n, dsr1_error *err);

#endif
