/*
 * forward.h - the DeepSeek forward pass over a batch of tokens (internal to
 * core/: the engine, dsr1_model_forward and the speculative decoder use it).
 *
 * A batch is any mix of sequences at any positions: each token names its KV
 * slot and position, and attends to positions 0..pos of its slot (its own
 * row included, written by this call), so prefill chunks, single-token
 * decodes and MTP drafts all go through the same code. Tokens of one slot
 * must appear in increasing position order, and their slot must already
 * cover pos + 1 (dsr1_kvcache_reserve).
 *
 * Outputs are produced only for the requested rows (the last token of each
 * prefill chunk, every decode), so the LM head runs once per wanted row.
 */
#ifndef DSR1_FORWARD_H
#define DSR1_FORWARD_H

#include "kvcache.h"
#include "model.h"

typedef struct dsr1_fwd_batch {
    int n;
    const int32_t *ids;      /* [n] token ids */
    const int32_t *pos;      /* [n] position of each token in its slot */
    const int32_t *seq;      /* [n] KV slot of each token */
    int n_out;
    const int32_t *out_rows; /* [n_out] indices into the batch, outputs in this order */
} dsr1_fwd_batch;

/* Activation buffers (the backend's) for up to max_tokens tokens per
 * call, allocated once. */
typedef struct dsr1_fwd {
    dsr1_model *m;
    dsr1_kvcache *kv;        /* not owned */
    void *ws;                /* backend workspace, owned */
    int max_tokens;
    dsr1_act act;
    dsr1_bbuf *x, *xn, *tmp; /* [max_tokens][hidden] residual, normed, stage output */
    dsr1_bbuf *qa;           /* [max_tokens][q_lora_rank] */
    dsr1_bbuf *q;            /* [max_tokens][n_heads * qk_head_dim] */
    dsr1_bbuf *kva;          /* [max_tokens][kv_lora_rank + rope] */
    dsr1_bbuf *attn;         /* [max_tokens][n_heads * v_head_dim] */
    dsr1_bbuf *cat;          /* [max_tokens][2 * hidden] MTP input */
    dsr1_bbuf *rows;         /* [max_tokens][hidden] wanted rows, normed */
    dsr1_bbuf *logits;       /* [min(max_tokens, 128)][vocab] LM head output */
    /* Optional routing record (dsr1_forward_routes): when set, each main
     * MoE layer l writes the experts of batch token t at
     * routes[(l * routes_n + routes_at + t) * topk]. Not owned. */
    int32_t *routes;
    int routes_n, routes_at;
    /* Rows the last block's FFN ran on, summed over calls (forward.c's
     * block: the output rows only; tests read it). */
    uint64_t last_ffn_rows;
} dsr1_fwd;

/* The whole of a buffer as rows of ld floats. */
static inline dsr1_view dsr1_fwd_view(dsr1_bbuf *b, int64_t ld)
{
    return (dsr1_view){b, 0, ld};
}

int dsr1_fwd_create(dsr1_fwd **out, dsr1_model *m, dsr1_kvcache *kv, int max_tokens,
                    dsr1_error *err);
void dsr1_fwd_free(dsr1_fwd *f); /* NULL is a no-op */
/* Threads used by this context's ops (0 = the model's); results do not
 * depend on it. */
void dsr1_fwd_threads(dsr1_fwd *f, int threads);

/* Main model over the batch: KV rows of every main layer are written; for
 * the wanted rows, logits [n_out][vocab] and/or final-normed hidden states
 * [n_out][hidden] (either pointer may be NULL). DSR1_EINVAL for an id out
 * of the vocabulary or a position the slot does not cover. */
int dsr1_forward(dsr1_fwd *f, const dsr1_fwd_batch *b, float *logits, float *hidden,
                 dsr1_error *err);

/* The LM head on rows already final-normed by dsr1_forward (its `hidden`
 * output, rows of hidden_size): logits[i] = lm_head(hidden[rows[i]]), for
 * i < n <= max_tokens. Bit-identical to asking dsr1_forward for those
 * logits; for callers that need every row's hidden state but only a few
 * rows' logits (speculative decoding: the MTP layer reads every position). */
int dsr1_forward_head(dsr1_fwd *f, const float *hidden, const int32_t *rows, int n,
                      float *logits, dsr1_error *err);

/* MTP (NextN) layer: token t combines ids[t] (the next token) with h[t]
 * (the main model's final-normed hidden state at pos[t], row stride ldh)
 * at RoPE position pos[t], writing the MTP layer's KV row at pos[t]:
 *   x = eh_proj(concat(enorm(embed(ids)), hnorm(h))); decoder block;
 *   shared_head.norm; shared_head.head.
 * Outputs for wanted rows: draft logits and/or the normed hidden state.
 * DSR1_EUNSUPPORTED when the model has no MTP layer. */
int dsr1_forward_mtp(dsr1_fwd *f, const dsr1_fwd_batch *b, const float *h, int64_t ldh,
                     float *logits, float *hidden, dsr1_error *err);

/* MLA for one layer (attention.c): xn [n][hidden] -> out [n][hidden]
 * (o_proj applied), writing the layer's KV rows. Inside a step. */
void dsr1_attention_forward(dsr1_fwd *f, const dsr1_layer_weights *L, int layer,
                            const dsr1_fwd_batch *b, dsr1_view xn, dsr1_view out);

/* The naive (non-absorbed) MLA over the same cache, double accumulation:
 * keys and values expanded through kv_b per head. A test reference for the
 * absorbed form: dims, scale and layer from a; q on the host as in
 * dsr1_mla_args ([n][n_heads][qk], rope applied); token t of slot seq[t]
 * at pos[t]; wk_t, wv the per-head stacks; out [n][n_heads * v_head_dim]. */
void dsr1_attention_naive(const dsr1_mla_args *a, const float *q, const int32_t *seq,
                          const int32_t *pos, const dsr1_kvcache *kv, const dsr1_wdesc *wk_t,
                          const dsr1_wdesc *wv, float *out);

#endif
