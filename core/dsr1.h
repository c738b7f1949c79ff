/*
 * dsr1.h - the engine's public API: what cli/ (chat, run, bench, eval,
 * logits) uses. Models and engines are opaque; the CLI never reaches into
 * tensors. Every function returns 0 or a DSR1_E* code with a message in err.
 *
 * A dsr1_model is the mmap'd .dsr1 file, its tokenizer and the chosen
 * backend. A dsr1_engine runs many sequences at once (continuous batching
 * over a paged latent KV cache), with speculative decoding through the MTP
 * layer when the model has one. One engine is used from one thread at a
 * time; it parallelises internally.
 */
#ifndef DSR1_H
#define DSR1_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "error.h"
#include "sampler.h"
#include "tokenizer.h"

typedef struct dsr1_model dsr1_model;
typedef struct dsr1_engine dsr1_engine;

/* ---- model ------------------------------------------------------------ */

typedef enum {
    DSR1_COMPUTE_FAST = 0, /* BF16/INT8 activations where the backend has them */
    DSR1_COMPUTE_F32 = 1,  /* float32 activations everywhere: the exact path */
} dsr1_compute;

typedef struct dsr1_model_options {
    const char *backend;   /* "auto" (NULL), "cpu", "cuda", "hip" */
    int threads;           /* 0 = one per physical core */
    dsr1_compute compute;
    /* Called while loading with a fraction in [0,1]; may be NULL. */
    void (*progress)(double frac, const char *what, void *ctx);
    void *progress_ctx;
    /* Non-zero: hash every tensor's payload against the directory before
     * loading (reads the whole file once; see dsr1(5), "What is checked"). */
    int verify;
    /* Non-zero: only batch-invariant kernels, so a token's logits are the
     * same bits alone or in any batch (what speculative decoding's
     * exactness and the prefix cache's equality rest on). Zero: the fast
     * mode (the CPU runs large prefill matmuls through oneDNN; results
     * then differ by bf16 rounding between batch shapes). */
    int deterministic;
    /* The fast mode runs FP8 weights in matmuls of 9 tokens or more
     * (prefill) as W8A8: each row requantised to INT8 on the fly with a
     * scale per 128-column block, x quantised per token and 128 columns
     * (DeepSeek's FP8 granularity), 1.7x the bf16 FP8 prefill on an AVX-512
     * CPU without AMX, at an INT8 file's distance from float32 (dsr1(1)).
     * Non-zero: keep them bf16 (--fp8-prefill bf16). --deterministic
     * always does. */
    int fp8_bf16;
    /* Non-zero: the fast mode's KV cache in FP8 e4m3 with a scale per row
     * (half of BF16's bytes) for the model's own forwards (dsr1 eval);
     * engines take theirs from dsr1_engine_options.kv_type. */
    int kv_fp8;
    /* CPU backend NUMA split: 0 = the machine's nodes, 1 = off, N > 1 =
     * N virtual nodes (dsr1_backend_options.numa_nodes). Same logits. */
    int numa_nodes;
} dsr1_model_options;

int dsr1_model_open(dsr1_model **out, const char *path, const dsr1_model_options *opt,
                    dsr1_error *err);
void dsr1_model_close(dsr1_model *m); /* NULL is a no-op */

const dsr1_config *dsr1_model_config(const dsr1_model *m);
/* NULL when the file carries no tokenizer (e.g. the tiny fixture). */
const dsr1_tokenizer *dsr1_model_tokenizer(const dsr1_model *m);
/* The chat_template string of the source tokenizer_config.json, or NULL. */
const char *dsr1_model_chat_template(const dsr1_model *m);
/* Human-readable: "cpu (avx512-bf16, 2 threads, fp8 weights)". */
const char *dsr1_model_describe(const dsr1_model *m);
/* The backend running the model: "cpu", "cuda", "hip". */
const char *dsr1_model_backend_name(const dsr1_model *m);
/* How the backend was chosen, for the start-up line: "cpu (asked for)",
 * "auto: cpu (cuda: libdsr1-cuda.so not found ...; hip: ...)". */
const char *dsr1_model_backend_choice(const dsr1_model *m);
/* 1 when the file has an MTP (NextN) layer the engine can draft with. */
int dsr1_model_has_mtp(const dsr1_model *m);

/* Every backend dsr1 knows, in the order `auto` tries them, with whether it
 * can run here and, if not, why (dsr1 info --hw). Returns the count. */
typedef struct dsr1_backend_info {
    const char *name;
    int available;
    char why[160];
} dsr1_backend_info;
int dsr1_backends(dsr1_backend_info *out, int max);
/* Bytes of weights read per decoded token at batch 1 (active params). */
uint64_t dsr1_model_active_weight_bytes(const dsr1_model *m);
/* What speculative decoding costs on this model, in decode steps, from the
 * weight bytes read: one more verify row (*row) and one MTP draft (*draft).
 * The adaptive mode's defaults (dsr1_engine_options). */
void dsr1_model_spec_costs(const dsr1_model *m, float *row, float *draft);

/* ---- engine ----------------------------------------------------------- */

typedef enum {
    DSR1_KV_BF16 = 0,
    DSR1_KV_FP8 = 1,
    DSR1_KV_F32 = 2,       /* used by the exact compute path */
} dsr1_kv_type;

typedef struct dsr1_engine_options {
    int max_seqs;          /* sequences alive at once (default 16) */
    int ctx;               /* max tokens per sequence (default: model's max, capped by memory) */
    uint64_t kv_bytes;     /* KV cache budget in bytes (0 = derive from ctx * max_seqs) */
    dsr1_kv_type kv_type;
    int prefill_chunk;     /* max prompt tokens per step; 0 (default): the model's,
                              dsr1_engine_default_chunk */
    int spec_draft;        /* -1 adaptive (default), 0 off, N fixed draft length */
    /* Adaptive mode: what one more verify row and one MTP draft cost, in
     * decode steps; negative (default) = dsr1_model_spec_costs'. */
    float spec_row_cost, spec_draft_cost;
    int prefix_cache;      /* 1 (default): share the KV of common prompt prefixes */
} dsr1_engine_options;

void dsr1_engine_options_default(dsr1_engine_options *o);
/* Prompt tokens per step when prefill_chunk is 0: 512, or for a MoE whose
 * experts would see few of them, enough that each routed expert gets about
 * 64 of a chunk's tokens on average, in steps of 256, at most 2048 (R1 and
 * V3: 256 experts, 8 per token, 2048; V2-Lite 768). An expert's matmuls on
 * 16 tokens are bound by reading its weights, on 64 by arithmetic: on the
 * R1-shape checkpoint (32 experts), chunks of 64 and 256 tokens, the same
 * experts' load as R1's at 512 and 2048, prefilled 1024 tokens at 47-53
 * and 91-98 tokens/s (FP8, Zen 4, 2 threads). */
int dsr1_engine_default_chunk(const dsr1_config *cfg);
int dsr1_engine_create(dsr1_engine **out, dsr1_model *m, const dsr1_engine_options *o,
                       dsr1_error *err);
void dsr1_engine_free(dsr1_engine *e); /* NULL is a no-op */

typedef struct dsr1_request {
    const int32_t *prompt;   /* token ids (template already applied) */
    size_t n_prompt;
    int max_tokens;          /* generated tokens at most */
    dsr1_sampling sampling;
    const int32_t *stop_ids; /* generation ends after emitting one of these */
    size_t n_stop_ids;       /* (the model's EOS is always a stop) */
    int reuse_seq;           /* -1, or a finished-but-kept sequence whose KV is
                                reused for the common prefix (chat turns) */
    int logprobs;            /* 1: events carry the token's log-probability */
    int top_logprobs;        /* and this many alternatives (0..DSR1_MAX_TOP_LOGPROBS) */
} dsr1_request;

/* Queue a request; *seq is its id. DSR1_ERANGE (and nothing queued) when the
 * prompt does not fit the context. */
int dsr1_engine_submit(dsr1_engine *e, const dsr1_request *r, int *seq, dsr1_error *err);

typedef enum {
    DSR1_FINISH_NONE = 0,  /* still generating */
    DSR1_FINISH_STOP = 1,  /* EOS or a stop id */
    DSR1_FINISH_LENGTH = 2,/* max_tokens or the context filled */
    DSR1_FINISH_ERROR = 3, /* this sequence failed (message in the event) */
    DSR1_FINISH_CANCEL = 4,
} dsr1_finish;

typedef struct dsr1_event {
    int seq;
    int32_t token;          /* -1 when the event only reports a finish */
    dsr1_finish finish;     /* set on the sequence's last event */
    const char *message;    /* for DSR1_FINISH_ERROR; valid until next step */
    /* With dsr1_request.logprobs, for a token: its log-softmax value under
     * the logits the sampler saw (after presence/frequency penalties,
     * before temperature and truncation) and the n_top most likely. */
    float logprob;
    int n_top;
    int32_t top_ids[DSR1_MAX_TOP_LOGPROBS];
    float top_logprobs[DSR1_MAX_TOP_LOGPROBS];
} dsr1_event;

/* Run one engine step over every active sequence (prefill chunks and decodes
 * together) and report the tokens produced (with speculation a sequence may
 * produce several per step). A failure of one sequence is reported as its
 * event; the return code is non-zero only when the engine itself failed.
 * ev must hold at least dsr1_engine_max_events(e) entries. */
int dsr1_engine_step(dsr1_engine *e, dsr1_event *ev, size_t *n_ev, dsr1_error *err);
size_t dsr1_engine_max_events(const dsr1_engine *e);
/* Sequences queued or running. */
int dsr1_engine_pending(const dsr1_engine *e);

/* Stop a sequence now (its KV is kept if it may be reused, see release). */
int dsr1_engine_cancel(dsr1_engine *e, int seq);
/* Free a finished sequence's slot and KV pages. Until released, a finished
 * sequence can be named in dsr1_request.reuse_seq. */
void dsr1_engine_release(dsr1_engine *e, int seq);

typedef struct dsr1_seq_stats {
    int n_prompt, n_generated, n_cached; /* n_cached: prompt tokens reused */
    double t_queued, t_first_token, t_done; /* seconds on a monotonic clock */
    int spec_steps, spec_drafted, spec_accepted;
    /* Speculation (an MTP model, spec_draft != 0): spec_steps counts decode
     * steps after the first token, spec_drafted the draft tokens verified,
     * spec_accepted those taken. Acceptance = accepted / drafted; tokens
     * per step = (steps + accepted) / steps. */
} dsr1_seq_stats;
int dsr1_engine_seq_stats(const dsr1_engine *e, int seq, dsr1_seq_stats *st);
/* Tokens of a sequence whose KV is computed (reused ones included): while
 * it prefills, its progress through the prompt. -1 for an unknown id. */
int dsr1_engine_seq_fed(const dsr1_engine *e, int seq);

/* Serialise a kept sequence (its tokens and KV cache, uncompressed) into a
 * malloc'd buffer, and bring one back as a new finished, reusable sequence. */
int dsr1_engine_seq_export(dsr1_engine *e, int seq, void **buf, size_t *len,
                           dsr1_error *err);
int dsr1_engine_seq_import(dsr1_engine *e, const void *buf, size_t len, int *seq,
                           dsr1_error *err);
/* The largest export this engine can make or import (a full context): a
 * bound for reading a saved sequence back. */
size_t dsr1_engine_seq_export_max(const dsr1_engine *e);
/* Tokens per sequence at most (the context the engine was created with). */
int dsr1_engine_ctx(const dsr1_engine *e);

/* ---- one-shot forward (logits, eval, tests) --------------------------- */

typedef enum {
    DSR1_OUT_LOGITS = 0,   /* [n, vocab] */
    DSR1_OUT_HIDDEN = 1,   /* final-normed hidden states [n, hidden] */
    DSR1_OUT_MTP = 2,      /* MTP draft logits for positions 0..n-2 [n-1, vocab] */
} dsr1_output;

/* Feed ids through a fresh sequence in the given chunks (chunk sizes sum to
 * n; NULL = one chunk) and write the requested rows for every position to
 * out (float32, row-major). */
int dsr1_model_forward(dsr1_model *m, const int32_t *ids, size_t n, const size_t *chunks,
                       size_t n_chunks, dsr1_output what, float *out, dsr1_error *err);

/* dsr1_model_forward's logits for every position (one chunk) plus the
 * experts each main layer chose: experts[l][t][topk] in selection order,
 * -1 for dense layers. For dsr1 eval, which counts routing flips between
 * compute modes. */
int dsr1_forward_routes(dsr1_model *m, const int32_t *ids, size_t n, float *logits,
                        int32_t *experts, dsr1_error *err);

/* ---- test and bench hooks of the speculative decoder ------------------- */

/* Called at the end of a step for each sequence that will verify drafts
 * next step (only in an engine that speculates), with its known tokens;
 * writes up to max_draft draft tokens (valid ids) and returns how many.
 * They replace the MTP's drafts (which are still computed, so timings stay
 * real) and are treated as one-hot drafts by the acceptance. */
typedef int (*dsr1_draft_fn)(void *ctx, int seq, const int32_t *tokens, int n_tokens,
                             int32_t *draft, int max_draft);
/* Install (or with fn NULL remove) the draft override hook. */
void dsr1_engine_set_draft_override(dsr1_engine *e, dsr1_draft_fn fn, void *ctx);
/* Seconds spent drafting so far (bench --spec). */
double dsr1_engine_draft_seconds(const dsr1_engine *e);

#endif
