/*
 * engine.h - the inside of a dsr1_engine (opaque in dsr1.h), shared by
 * engine.c (scheduler, steps, sampling) and engine_seq.c (cancel, release,
 * stats, export/import). Not used outside core/.
 *
 * A sequence id indexes `seqs`. States: FREE -> QUEUED (submitted, waiting
 * for a KV slot) -> RUNNING (prefill chunks, then one token per step) ->
 * DONE (finished; KV kept for reuse_seq until released or evicted) -> FREE.
 * tokens[0, n_tokens) are the prompt and what was generated; the KV cache
 * holds rows for [0, n_done); a running sequence always has n_done <
 * n_tokens (the next tokens to feed).
 *
 * Speculative decoding (kmax > 0, the model has an MTP layer): the MTP
 * layer's KV rows (the cache's last layer, same slot and pages) are valid
 * for [0, n_mtp); at the end of every step n_mtp == n_done for a sequence
 * that drafts. In the adaptive mode a running sequence that sits out may
 * lag (h_lag set): the main model's final-normed hidden states of
 * positions [n_mtp, n_done) wait in lag_h (position p at row p %
 * DSR1_SPEC_MAX_LAG of its slot's ring), n_done - n_mtp <=
 * DSR1_SPEC_MAX_LAG, and the rows are caught up in one batch before it
 * drafts again or finishes. Draft tokens for the next step wait in tokens[n_tokens,
 * n_tokens + n_draft) (never counted in n_tokens); the slot's cache length
 * may run past n_done over rows the drafts will fill, and the rows past
 * n_done are never read before they are written again.
 */
#ifndef DSR1_ENGINE_H
#define DSR1_ENGINE_H

#include "dsr1.h"
#include "forward.h"
#include "kvcache.h"
#include "prefix.h"
#include "spec.h"

/* (The draft override hook, dsr1_draft_fn, is declared in dsr1.h.) */

typedef enum { SEQ_FREE = 0, SEQ_QUEUED, SEQ_RUNNING, SEQ_DONE } seq_state;

typedef struct eseq {
    seq_state state;
    int slot;                /* KV slot or -1 */
    int32_t *tokens;         /* [ctx] owned */
    int n_tokens, n_prompt, n_done, n_generated, max_tokens;
    int reuse;               /* reuse_seq of the request, -1 */
    uint64_t order;          /* submission counter: FIFO admission, LRU eviction */
    dsr1_sampling sampling;
    dsr1_rng rng;
    int logprobs, top_logprobs; /* from the request */
    dsr1_event lp;           /* the last pick's logprob fields, copied by emit */
    int32_t *stop_ids;       /* [n_stop] owned */
    size_t n_stop;
    dsr1_finish finish;
    int report_finish;       /* a finish event is owed (cancel) */
    char message[256];
    dsr1_seq_stats stats;
    /* speculative decoding */
    int n_mtp;               /* MTP KV rows valid: [0, n_mtp) */
    int n_draft;             /* drafts waiting at tokens[n_tokens..] */
    int draft_onehot;        /* drafts came from the override (q one-hot) */
    int h_lag;               /* hidden states of [n_mtp, n_done) are in lag_h */
    dsr1_spec_track track;
    /* this step only */
    int b_row, b_len;        /* its rows [b_row, b_row + b_len) of the batch */
    int b_out;               /* its first row of e->logits, or -1 */
    int k_limit;             /* drafts it may make at the end of this step */
    float chain;             /* adaptive policy: P(all drafts so far accepted) */
} eseq;

struct dsr1_engine {
    dsr1_model *m;
    dsr1_engine_options o;
    dsr1_kvcache *kv;
    dsr1_fwd *fwd;
    int n_seqs;              /* capacity of seqs */
    eseq *seqs;              /* [n_seqs] */
    uint64_t counter;
    int max_batch;           /* tokens per step: prefill_chunk + max_seqs * (kmax + 1), plus
                              * max_seqs * DSR1_SPEC_MAX_LAG in the adaptive mode (catch-up) */
    int kmax;                /* most drafts per sequence per step; 0: no speculation */
    dsr1_spec_costs costs;   /* the adaptive policy's (options or the model's estimate) */
    /* per-step buffers, sized at create */
    int32_t *b_ids, *b_pos, *b_seq, *b_out; /* [max_batch] */
    int32_t *b_all;          /* [max_batch] 0, 1, 2, ...: every row wanted */
    int *out_seq;            /* [max_seqs] sequences with outputs, in order */
    float *logits;           /* [max_seqs * (kmax + 1)][vocab] */
    void *sampler_scratch;
    float *probs;            /* [vocab] target distribution (sampling) */
    /* speculation buffers (NULL when kmax == 0) */
    float *hid;              /* [max_batch][hidden] final-normed main rows */
    float *mtp_h;            /* [max_batch][hidden] gathered MTP input states */
    float *mtp_hout;         /* [max_seqs][hidden] MTP output states (chaining) */
    float *mtp_logits;       /* [max_seqs][vocab] draft logits */
    float *q;                /* [max_seqs (slot)][kmax][vocab] draft distributions */
    int32_t *m_ids, *m_pos, *m_seq, *m_out; /* [max_batch] the MTP batch */
    int *m_owner;            /* [max_batch] sequence of each MTP output row */
    float *lag_h;            /* adaptive: [max_seqs (slot)][DSR1_SPEC_MAX_LAG][hidden] */
    uint64_t mtp_rows;       /* MTP forward rows run so far (tests, bench) */
    dsr1_draft_fn override;  /* test/bench hook or NULL */
    void *override_ctx;
    double t_draft;          /* seconds spent drafting so far (bench --spec) */
    dsr1_prefix *prefix;     /* prefix cache (engine_prefix.c) or NULL when off */
    int32_t *pfx_pages;      /* [kv->max_pages] scratch for a match */
};

/* End of a step (engine_spec.c): MTP rows for everything the main model
 * just fed, then up to kmax drafts for each decoding sequence, chained
 * through the MTP layer as one batched forward per draft position. A
 * sequence that cannot get KV pages for drafts drafts fewer. Only the
 * engine's own failure is returned. */
int dsr1_engine_draft(dsr1_engine *e, dsr1_error *err);

double dsr1_engine_now(void);
/* Fill o->ctx (when 0: max_pos, capped so the cache takes at most a quarter
 * of physical memory) and o->kv_bytes (when 0) as engine creation does;
 * also used by the memory estimate (memcheck.c) before loading. */
void dsr1_engine_size_cache(int max_pos, dsr1_engine_options *o, uint64_t tok_bytes);
/* Put a DONE or RUNNING sequence's KV slot back (the sequence stays). */
void dsr1_engine_drop_kv(dsr1_engine *e, eseq *s);
/* Free everything of a sequence; its id becomes FREE. */
void dsr1_engine_seq_clear(dsr1_engine *e, eseq *s);
/* Prefix cache (engine_prefix.c). attach: sequences still at the start of
 * their prompt (n_done on a page boundary, their pages all from the tree)
 * take the longest cached prefix, leaving at least one prompt token to
 * feed. step_end: sequences that prefilled this step add their full pages.
 * publish: one sequence's full pages (before its slot is given back). */
int dsr1_engine_prefix_create(dsr1_engine *e, dsr1_error *err);
void dsr1_engine_prefix_attach(dsr1_engine *e);
void dsr1_engine_prefix_step_end(dsr1_engine *e);
void dsr1_engine_prefix_publish(dsr1_engine *e, const eseq *s);
/* 1 when s should sit out this step's prefill: an earlier sequence is
 * computing the very page s would compute next. */
int dsr1_engine_prefix_wait(const dsr1_engine *e, const eseq *s);
/* A FREE entry, or NULL. */
eseq *dsr1_engine_free_entry(dsr1_engine *e);

#endif
