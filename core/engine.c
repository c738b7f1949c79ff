/*
 * engine.c - continuous batching over the paged latent KV cache: the
 * dsr1_engine_* scheduler of dsr1.h (create, submit, step, pending).
 *
 * One step builds one forward batch out of every running sequence: first
 * one token for each decoding sequence, then prefill chunks (at most
 * prefill_chunk prompt tokens per step in total, split over the sequences
 * in admission order), runs dsr1_forward once, and samples a token for each
 * sequence whose known tokens were all fed. Queued requests are admitted
 * into free KV slots first (FIFO); when a request waits and no slot is
 * free, the least recently finished kept sequence loses its KV.
 *
 * A sequence that cannot get KV pages mid-run finishes alone (ERROR with
 * the cache's message) while the rest of the batch goes on; reaching the
 * context finishes it with LENGTH. Everything is sized at create; a step
 * allocates nothing.
 *
 * Speculative decoding (when the model has an MTP layer and spec_draft is
 * not 0): a decoding sequence feeds its last token plus the drafts made at
 * the end of the previous step; the verify logits of every row decide, in
 * verify(), the longest accepted prefix plus one token of the main model,
 * and the KV cache is rolled back to what was accepted. Because the kernels
 * are deterministic per token whatever the batch, a verify row's logits
 * equal the plain decode's bit for bit, so greedy output is identical with
 * and without speculation. Then dsr1_engine_draft (engine_spec.c) feeds the
 * MTP layer and makes the next drafts.
 *
 * Prefix cache (engine_prefix.c, on unless o.prefix_cache is 0): before a
 * step's batch is built, prefilling sequences take the KV pages of their
 * longest cached prompt prefix; after it, the pages they computed are
 * published to the tree.
 *
 * (Cancel, release, stats, export and import: engine_seq.c.)
 */
#include "engine.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

double dsr1_engine_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void dsr1_engine_options_default(dsr1_engine_options *o)
{
    memset(o, 0, sizeof *o);
    o->max_seqs = 16;
    o->ctx = 0;
    o->kv_bytes = 0;
    o->kv_type = DSR1_KV_BF16;
    o->prefill_chunk = 0;
    o->spec_draft = -1;
    o->spec_row_cost = o->spec_draft_cost = -1;
    o->prefix_cache = 1;
}

int dsr1_engine_default_chunk(const dsr1_config *cfg)
{
    if (cfg->n_routed_experts <= 0 || cfg->num_experts_per_tok <= 0) return 512;
    long long want = 64LL * cfg->n_routed_experts / cfg->num_experts_per_tok;
    want = (want + 255) / 256 * 256;
    return want < 512 ? 512 : want > 2048 ? 2048 : (int)want;
}

/* ---- create / free --------------------------------------------------------- */

/* Context and KV budget: ctx defaults to the model's maximum, the budget to
 * ctx * max_seqs tokens, both capped so the cache takes at most a quarter
 * of physical memory (it must still hold one full context). */
void dsr1_engine_size_cache(int max_pos, dsr1_engine_options *o, uint64_t tok_bytes)
{
    uint64_t phys = (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE);
    uint64_t cap = phys / 4;
    if (o->ctx <= 0) {
        uint64_t fit = cap / tok_bytes;
        o->ctx = max_pos;
        if ((uint64_t)o->ctx > fit) o->ctx = (int)(fit > 64 ? fit : 64);
    }
    if (!o->kv_bytes) {
        /* Whole pages (the cache's default of 64 tokens) per context: a
         * context shorter than a page still takes a page. */
        uint64_t ctx_b = ((uint64_t)o->ctx + 63) / 64 * 64 * tok_bytes;
        uint64_t want = ctx_b * (uint64_t)o->max_seqs;
        uint64_t floor_b = ctx_b;
        o->kv_bytes = want < cap ? want : cap > floor_b ? cap : floor_b;
    }
}

/* The speculation buffers (kmax > 0); returns 1 when all were allocated. */
static int alloc_spec(dsr1_engine *e)
{
    size_t B = (size_t)e->max_batch, S = (size_t)e->o.max_seqs, V = (size_t)e->m->cfg.vocab_size;
    size_t D = (size_t)e->m->cfg.hidden_size, K = (size_t)e->kmax;
    e->hid = malloc(B * D * sizeof(float));
    e->mtp_h = malloc(B * D * sizeof(float));
    e->mtp_hout = malloc(S * D * sizeof(float));
    e->mtp_logits = malloc(S * V * sizeof(float));
    e->q = malloc(S * K * V * sizeof(float));
    e->m_ids = malloc(B * sizeof(int32_t));
    e->m_pos = malloc(B * sizeof(int32_t));
    e->m_seq = malloc(B * sizeof(int32_t));
    e->m_out = malloc(B * sizeof(int32_t));
    e->m_owner = malloc(B * sizeof(int));
    if (e->o.spec_draft < 0) e->lag_h = malloc(S * DSR1_SPEC_MAX_LAG * D * sizeof(float));
    return e->hid && e->mtp_h && e->mtp_hout && e->mtp_logits && e->q && e->m_ids && e->m_pos &&
           e->m_seq && e->m_out && e->m_owner && (e->o.spec_draft >= 0 || e->lag_h);
}

static int alloc_buffers(dsr1_engine *e, dsr1_error *err)
{
    size_t B = (size_t)e->max_batch, S = (size_t)e->o.max_seqs, V = (size_t)e->m->cfg.vocab_size;
    size_t R = S * (size_t)(e->kmax + 1); /* logits rows: every verify row */
    e->seqs = calloc((size_t)e->n_seqs, sizeof *e->seqs);
    e->b_ids = malloc(B * sizeof(int32_t));
    e->b_pos = malloc(B * sizeof(int32_t));
    e->b_seq = malloc(B * sizeof(int32_t));
    e->b_out = malloc(B * sizeof(int32_t));
    e->b_all = malloc(B * sizeof(int32_t));
    e->out_seq = malloc(S * sizeof(int));
    e->logits = malloc(R * V * sizeof(float));
    e->sampler_scratch = malloc(dsr1_sampler_scratch_size((int)V));
    e->probs = malloc(V * sizeof(float));
    if (!e->seqs || !e->b_ids || !e->b_pos || !e->b_seq || !e->b_out || !e->b_all ||
        !e->out_seq || !e->logits || !e->sampler_scratch || !e->probs ||
        (e->kmax && !alloc_spec(e)))
        return dsr1_errorf(err, DSR1_ENOMEM, "engine: out of memory");
    for (size_t i = 0; i < B; i++) e->b_all[i] = (int32_t)i;
    return 0;
}

static int check_options(const dsr1_engine_options *o, dsr1_error *err)
{
    if (o->max_seqs < 1 || o->max_seqs > 4096)
        return dsr1_errorf(err, DSR1_EINVAL, "engine: max_seqs %d (expected 1..4096)", o->max_seqs);
    if (o->prefill_chunk < 0)
        return dsr1_errorf(err, DSR1_EINVAL, "engine: prefill_chunk %d", o->prefill_chunk);
    if (o->ctx < 0) return dsr1_errorf(err, DSR1_EINVAL, "engine: ctx %d", o->ctx);
    if (o->spec_draft < -1 || o->spec_draft > DSR1_SPEC_MAX_DRAFT)
        return dsr1_errorf(err, DSR1_EINVAL, "engine: spec_draft %d (expected -1 adaptive, 0 off "
                           "or 1..%d)", o->spec_draft, DSR1_SPEC_MAX_DRAFT);
    return 0;
}

/* Drafts per sequence per step: 0 without an MTP layer or with spec_draft 0. */
static int draft_max(const dsr1_model *m, int spec_draft)
{
    if (!m->n_mtp || spec_draft == 0) return 0;
    return spec_draft < 0 ? DSR1_SPEC_ADAPTIVE_MAX : spec_draft;
}

int dsr1_engine_create(dsr1_engine **out, dsr1_model *m, const dsr1_engine_options *opt,
                       dsr1_error *err)
{
    *out = NULL;
    dsr1_engine_options o;
    if (opt) o = *opt;
    else dsr1_engine_options_default(&o);
    DSR1_TRY(check_options(&o, err));
    if (!o.prefill_chunk) o.prefill_chunk = dsr1_engine_default_chunk(&m->cfg);
    /* The exact path keeps the KV in float32 whatever was asked. */
    if (m->compute == DSR1_COMPUTE_F32) o.kv_type = DSR1_KV_F32;
    int row = m->cfg.kv_lora_rank + m->cfg.qk_rope_head_dim;
    dsr1_engine_size_cache(m->cfg.max_position_embeddings, &o,
                           dsr1_kvcache_token_bytes(o.kv_type, m->n_layers, row));
    dsr1_engine *e = calloc(1, sizeof *e);
    if (!e) return dsr1_errorf(err, DSR1_ENOMEM, "engine: out of memory");
    e->m = m;
    e->o = o;
    e->n_seqs = 4 * o.max_seqs + 16;
    e->kmax = draft_max(m, o.spec_draft);
    dsr1_model_spec_costs(m, &e->costs.row, &e->costs.draft);
    if (o.spec_row_cost >= 0) e->costs.row = o.spec_row_cost;
    if (o.spec_draft_cost >= 0) e->costs.draft = o.spec_draft_cost;
    if (o.spec_draft < 0 && dsr1_spec_never(&e->costs)) e->kmax = 0; /* adaptive, never drafts */
    e->max_batch = o.prefill_chunk + o.max_seqs * (e->kmax + 1);
    /* A catch-up after a sit-out adds up to DSR1_SPEC_MAX_LAG MTP rows per
     * sequence to the step's own. */
    if (e->kmax && o.spec_draft < 0) e->max_batch += o.max_seqs * DSR1_SPEC_MAX_LAG;
    dsr1_kvcache_options ko = {.type = o.kv_type, .n_layers = m->n_layers,
                               .kv_lora_rank = m->cfg.kv_lora_rank,
                               .rope_dim = m->cfg.qk_rope_head_dim, .max_seqs = o.max_seqs,
                               .ctx = o.ctx, .bytes = o.kv_bytes};
    ko.be = m->be;
    ko.dev = m->dev;
    int rc = alloc_buffers(e, err);
    /* Every entry without a slot before anything can fail: cleanup after a
     * failed cache allocation must not free slot 0 of no cache. */
    for (int i = 0; !rc && i < e->n_seqs; i++) e->seqs[i].slot = -1;
    if (!rc) rc = dsr1_kvcache_create(&e->kv, &ko, err);
    if (!rc) rc = dsr1_fwd_create(&e->fwd, m, e->kv, e->max_batch, err);
    if (!rc) rc = dsr1_engine_prefix_create(e, err);
    if (rc) {
        dsr1_engine_free(e);
        return rc;
    }
    *out = e;
    return 0;
}

void dsr1_engine_free(dsr1_engine *e)
{
    if (!e) return;
    for (int i = 0; e->seqs && i < e->n_seqs; i++) dsr1_engine_seq_clear(e, &e->seqs[i]);
    dsr1_fwd_free(e->fwd);
    dsr1_prefix_free(e->prefix); /* before the cache whose pages it holds */
    free(e->pfx_pages);
    dsr1_kvcache_free(e->kv);
    free(e->seqs);
    free(e->b_ids);
    free(e->b_pos);
    free(e->b_seq);
    free(e->b_out);
    free(e->b_all);
    free(e->out_seq);
    free(e->logits);
    free(e->sampler_scratch);
    free(e->probs);
    free(e->hid);
    free(e->mtp_h);
    free(e->mtp_hout);
    free(e->mtp_logits);
    free(e->q);
    free(e->m_ids);
    free(e->m_pos);
    free(e->m_seq);
    free(e->m_out);
    free(e->m_owner);
    free(e->lag_h);
    free(e);
}

/* One event per sequence entry, plus the extra tokens accepted drafts add. */
size_t dsr1_engine_max_events(const dsr1_engine *e)
{
    return (size_t)e->n_seqs + (size_t)e->o.max_seqs * (size_t)e->kmax;
}

int dsr1_engine_pending(const dsr1_engine *e)
{
    int n = 0;
    for (int i = 0; i < e->n_seqs; i++)
        n += e->seqs[i].state == SEQ_QUEUED || e->seqs[i].state == SEQ_RUNNING ||
             e->seqs[i].report_finish;
    return n;
}

/* ---- submit ------------------------------------------------------------------ */

int dsr1_engine_submit(dsr1_engine *e, const dsr1_request *r, int *seq, dsr1_error *err)
{
    const dsr1_config *c = &e->m->cfg;
    if (!r->prompt || r->n_prompt < 1)
        return dsr1_errorf(err, DSR1_EINVAL, "request: empty prompt");
    if (r->n_prompt >= (size_t)e->o.ctx)
        return dsr1_errorf(err, DSR1_ERANGE, "request: prompt of %zu tokens does not fit the "
                           "context of %d", r->n_prompt, e->o.ctx);
    for (size_t i = 0; i < r->n_prompt; i++)
        if (r->prompt[i] < 0 || r->prompt[i] >= c->vocab_size)
            return dsr1_errorf(err, DSR1_EINVAL, "request: token %d at %zu out of the vocabulary "
                               "(%d)", r->prompt[i], i, c->vocab_size);
    eseq *s = dsr1_engine_free_entry(e);
    if (!s) return dsr1_errorf(err, DSR1_ERANGE, "engine: %d sequences already queued or kept",
                               e->n_seqs);
    s->tokens = malloc((size_t)e->o.ctx * sizeof *s->tokens);
    s->stop_ids = r->n_stop_ids ? malloc(r->n_stop_ids * sizeof *s->stop_ids) : NULL;
    if (!s->tokens || (r->n_stop_ids && !s->stop_ids)) {
        dsr1_engine_seq_clear(e, s);
        return dsr1_errorf(err, DSR1_ENOMEM, "engine: out of memory");
    }
    memcpy(s->tokens, r->prompt, r->n_prompt * sizeof *s->tokens);
    if (r->n_stop_ids) memcpy(s->stop_ids, r->stop_ids, r->n_stop_ids * sizeof *s->stop_ids);
    s->n_stop = r->n_stop_ids;
    s->n_tokens = s->n_prompt = (int)r->n_prompt;
    s->n_done = s->n_generated = 0;
    s->max_tokens = r->max_tokens > 0 ? r->max_tokens : e->o.ctx;
    s->reuse = r->reuse_seq;
    s->sampling = r->sampling;
    s->logprobs = r->logprobs;
    s->top_logprobs = r->top_logprobs;
    dsr1_rng_seed(&s->rng, r->sampling.seed);
    s->finish = DSR1_FINISH_NONE;
    s->report_finish = 0;
    s->message[0] = 0;
    s->n_mtp = s->n_draft = s->h_lag = 0;
    dsr1_spec_track_init(&s->track);
    memset(&s->stats, 0, sizeof s->stats);
    s->stats.n_prompt = s->n_prompt;
    s->stats.t_queued = dsr1_engine_now();
    s->state = SEQ_QUEUED;
    s->order = ++e->counter;
    *seq = (int)(s - e->seqs);
    return 0;
}

/* ---- admission ------------------------------------------------------------------ */

/* Take over a kept sequence's slot, keeping the KV of the common prefix
 * (at least one prompt token is always fed again, to get logits). */
static int adopt(dsr1_engine *e, eseq *s)
{
    if (s->reuse < 0 || s->reuse >= e->n_seqs || s->reuse == (int)(s - e->seqs)) return 0;
    eseq *old = &e->seqs[s->reuse];
    if (old->state != SEQ_DONE || old->slot < 0) return 0;
    /* With speculation the MTP rows must cover the reused prefix too: the
     * hidden states that would fill them are gone. */
    int common = 0, have = e->kmax && old->n_mtp < old->n_done ? old->n_mtp : old->n_done;
    while (common < have && common < s->n_prompt - 1 && old->tokens[common] == s->tokens[common])
        common++;
    s->slot = old->slot;
    old->slot = -1;
    dsr1_kvcache_truncate(e->kv, s->slot, common);
    /* Cut back into a page the prefix cache shares: write to a copy, or
     * (no page free) keep only the whole pages. */
    if (dsr1_kvcache_own_tail(e->kv, s->slot, NULL)) {
        common -= common % e->kv->block;
        dsr1_kvcache_truncate(e->kv, s->slot, common);
    }
    dsr1_engine_seq_clear(e, old);
    s->n_done = s->n_mtp = common;
    s->h_lag = 0;
    s->stats.n_cached = common;
    return 1;
}

static eseq *oldest(dsr1_engine *e, seq_state st, int with_slot)
{
    eseq *best = NULL;
    for (int i = 0; i < e->n_seqs; i++) {
        eseq *s = &e->seqs[i];
        if (s->state == st && (!with_slot || s->slot >= 0) && (!best || s->order < best->order))
            best = s;
    }
    return best;
}

static void admit(dsr1_engine *e)
{
    eseq *s;
    while ((s = oldest(e, SEQ_QUEUED, 0))) {
        if (!adopt(e, s)) {
            int slot;
            if (dsr1_kvcache_seq_alloc(e->kv, &slot, NULL) != 0) {
                eseq *victim = oldest(e, SEQ_DONE, 1);
                if (!victim) return; /* every slot is running: wait */
                dsr1_engine_drop_kv(e, victim);
                if (dsr1_kvcache_seq_alloc(e->kv, &slot, NULL) != 0) return;
            }
            s->slot = slot;
        }
        s->state = SEQ_RUNNING;
    }
}

/* ---- one step ---------------------------------------------------------------- */

static void finish(eseq *s, dsr1_finish why, const char *msg)
{
    s->finish = why;
    s->state = SEQ_DONE;
    s->n_draft = 0;
    s->stats.t_done = dsr1_engine_now();
    snprintf(s->message, sizeof s->message, "%s", msg ? msg : "");
}

static void emit(dsr1_event *ev, size_t *n, const eseq *s, int seq, int32_t token)
{
    ev[*n] = (dsr1_event){.seq = seq, .token = token, .finish = s->finish,
                          .message = s->finish == DSR1_FINISH_ERROR ? s->message : NULL};
    if (token >= 0 && s->logprobs) {
        ev[*n].logprob = s->lp.logprob;
        ev[*n].n_top = s->lp.n_top;
        memcpy(ev[*n].top_ids, s->lp.top_ids, sizeof s->lp.top_ids);
        memcpy(ev[*n].top_logprobs, s->lp.top_logprobs, sizeof s->lp.top_logprobs);
    }
    (*n)++;
}

/* Rows and outputs of one step's main batch. */
typedef struct plan {
    int nb;   /* tokens */
    int nout; /* logits rows */
    int nseq; /* sequences with outputs (e->out_seq) */
} plan;

/* Add tokens [n_done, n_done + len) of s to the batch (with its drafts, a
 * decode is 1 + n_draft tokens, each wanting logits); reserve their KV. On
 * failure the sequence finishes (and is reported) without joining. */
static void add_to_batch(dsr1_engine *e, eseq *s, int len, plan *p, dsr1_event *ev, size_t *nev)
{
    dsr1_error err;
    int id = (int)(s - e->seqs);
    if (dsr1_kvcache_reserve(e->kv, s->slot, s->n_done + len, &err) != 0) {
        finish(s, s->n_done + len > e->o.ctx ? DSR1_FINISH_LENGTH : DSR1_FINISH_ERROR, err.msg);
        emit(ev, nev, s, id, -1);
        return;
    }
    s->b_row = p->nb;
    s->b_len = len;
    for (int i = 0; i < len; i++) {
        e->b_ids[p->nb] = s->tokens[s->n_done + i];
        e->b_pos[p->nb] = s->n_done + i;
        e->b_seq[p->nb] = s->slot;
        p->nb++;
    }
    int n_out = s->n_done + len == s->n_tokens + s->n_draft ? 1 + s->n_draft : 0;
    if (n_out) { /* all known tokens fed: sample (verify) after */
        s->b_out = p->nout;
        for (int i = 0; i < n_out; i++) e->b_out[p->nout++] = p->nb - n_out + i;
        e->out_seq[p->nseq++] = id;
    }
    s->n_done += len;
}

static int build_batch(dsr1_engine *e, plan *p, dsr1_event *ev, size_t *nev)
{
    *p = (plan){0};
    for (int i = 0; i < e->n_seqs; i++) {
        e->seqs[i].b_len = 0;
        e->seqs[i].b_out = -1;
    }
    for (int i = 0; i < e->n_seqs; i++) { /* decodes first: one token (+ drafts) each */
        eseq *s = &e->seqs[i];
        if (s->state == SEQ_RUNNING && s->n_tokens - s->n_done == 1 && s->n_generated > 0)
            add_to_batch(e, s, 1 + s->n_draft, p, ev, nev);
    }
    int budget = e->o.prefill_chunk;
    while (budget > 0) { /* prefills in admission order, sharing the budget */
        eseq *s = NULL;
        for (int i = 0; i < e->n_seqs; i++) {
            eseq *c = &e->seqs[i];
            if (c->state == SEQ_RUNNING && c->n_generated == 0 && c->n_done < c->n_tokens &&
                (!s || c->order < s->order) && !dsr1_engine_prefix_wait(e, c))
                s = c;
        }
        if (!s) break;
        int len = s->n_tokens - s->n_done < budget ? s->n_tokens - s->n_done : budget;
        budget -= len;
        add_to_batch(e, s, len, p, ev, nev);
    }
    return p->nb;
}

/* The main model over the batch. With speculation every row's final-normed
 * hidden state is kept (the MTP layer reads them all, prompt rows too) and
 * the LM head runs on the output rows only. */
static int run_main(dsr1_engine *e, const plan *p, dsr1_error *err)
{
    dsr1_fwd_batch b = {.n = p->nb, .ids = e->b_ids, .pos = e->b_pos, .seq = e->b_seq,
                        .n_out = p->nout, .out_rows = e->b_out};
    if (!e->kmax) return dsr1_forward(e->fwd, &b, e->logits, NULL, err);
    b.n_out = p->nb;
    b.out_rows = e->b_all;
    DSR1_TRY(dsr1_forward(e->fwd, &b, NULL, e->hid, err));
    return dsr1_forward_head(e->fwd, e->hid, e->b_out, p->nout, e->logits, err);
}

/* The last tokens the repetition penalty sees for the next position. */
static const int32_t *recent(const eseq *s, size_t *n)
{
    int w = s->sampling.repetition_window > 0 ? s->sampling.repetition_window : 0;
    int k = s->n_tokens < w ? s->n_tokens : w;
    *n = (size_t)k;
    return s->tokens + s->n_tokens - k;
}

/* The sampler's pick; with temperature 0 it is the argmax (lowest id on
 * ties) of the logits after the repetition penalty, and uses no RNG. */
static int32_t pick(dsr1_engine *e, eseq *s, const float *logits)
{
    int V = e->m->cfg.vocab_size;
    size_t n;
    const int32_t *r = recent(s, &n);
    return dsr1_sampler_sample(logits, V, &s->sampling, r, n, &s->rng, e->sampler_scratch);
}

/* Judge draft j (waiting at tokens[n_tokens]) against this position's
 * logits: *ok when it is accepted; returns the token to append. Greedy:
 * accepted iff it is the argmax. Sampling: lossless rejection sampling
 * against the draft distribution q (one-hot for override drafts). */
static int32_t judge(dsr1_engine *e, eseq *s, const float *logits, int j, int *ok)
{
    int32_t x = s->tokens[s->n_tokens];
    if (s->sampling.temperature <= 0) {
        int32_t tok = pick(e, s, logits);
        *ok = tok == x;
        return tok;
    }
    int V = e->m->cfg.vocab_size;
    size_t n;
    const int32_t *r = recent(s, &n);
    dsr1_sampler_probs(logits, V, &s->sampling, r, n, e->probs, e->sampler_scratch);
    const float *q = s->draft_onehot ? NULL
                                     : e->q + ((size_t)s->slot * (size_t)e->kmax + (size_t)j) * (size_t)V;
    *ok = dsr1_spec_accept(e->probs, q, x, &s->rng);
    return *ok ? x : dsr1_spec_residual(e->probs, q, x, V, &s->rng);
}

static int is_stop(const dsr1_engine *e, const eseq *s, int32_t tok)
{
    if (tok == e->m->cfg.eos_token_id) return 1;
    for (size_t i = 0; i < s->n_stop; i++)
        if (s->stop_ids[i] == tok) return 1;
    return 0;
}

/* Append the sampled token, decide whether the sequence ends, report it. */
static void accept(dsr1_engine *e, eseq *s, int32_t tok, dsr1_event *ev, size_t *nev)
{
    s->tokens[s->n_tokens++] = tok;
    s->n_generated++;
    s->stats.n_generated = s->n_generated;
    if (s->n_generated == 1) s->stats.t_first_token = dsr1_engine_now();
    if (is_stop(e, s, tok)) finish(s, DSR1_FINISH_STOP, NULL);
    else if (s->n_generated >= s->max_tokens || s->n_tokens >= e->o.ctx)
        finish(s, DSR1_FINISH_LENGTH, NULL);
    emit(ev, nev, s, (int)(s - e->seqs), tok);
}

static int finite_row(const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return 0;
    return 1;
}

/* A NaN or Inf reached this sequence's logits (a damaged weight, a bad
 * loaded cache: the backends route such tokens nowhere rather than
 * abort). Only this sequence fails; its cache rows are dropped so nothing
 * reuses them. */
static void fail_nonfinite(dsr1_engine *e, eseq *s, dsr1_event *ev, size_t *nev)
{
    s->n_draft = 0;
    finish(s, DSR1_FINISH_ERROR, "numerical error: non-finite logits (NaN or Inf from the "
                                 "weights or a loaded KV cache); sequence stopped");
    dsr1_engine_drop_kv(e, s);
    emit(ev, nev, s, (int)(s - e->seqs), -1);
}

/* Tokens of one sequence from its logits rows: the accepted prefix of its
 * drafts, then the main model's own token (so at least one per step). The
 * KV rows of rejected drafts are dropped: the cache keeps [0, n_done) with
 * n_done = n_tokens - 1, exactly what plain decoding would have. */
static void verify(dsr1_engine *e, eseq *s, dsr1_event *ev, size_t *nev)
{
    size_t V = (size_t)e->m->cfg.vocab_size;
    float *lg = e->logits + (size_t)s->b_out * V; /* rows are this step's: penalised in place */
    int nd = s->n_draft, taken = 0, decoding = s->n_generated > 0;
    for (int j = 0; j <= nd; j++, lg += V) {
        if (!finite_row(lg, V)) {
            fail_nonfinite(e, s, ev, nev);
            return;
        }
        int ok = 0;
        /* OpenAI's penalties see the generated tokens accepted so far
         * (drafts wait beyond n_tokens); the row is this step's own. */
        dsr1_sampler_penalize(lg, (int)V, &s->sampling, s->tokens + s->n_prompt,
                              (size_t)(s->n_tokens - s->n_prompt), e->sampler_scratch);
        int32_t tok = j < nd ? judge(e, s, lg, j, &ok) : pick(e, s, lg);
        if (s->logprobs) {
            s->lp.n_top = s->top_logprobs;
            s->lp.logprob = dsr1_sampler_logprobs(lg, (int)V, tok, s->top_logprobs,
                                                  s->lp.top_ids, s->lp.top_logprobs);
        }
        accept(e, s, tok, ev, nev);
        if (!ok || s->state != SEQ_RUNNING) break;
        taken++;
    }
    s->n_draft = 0;
    if (e->kmax && decoding) {
        s->stats.spec_steps++;
        s->stats.spec_drafted += nd;
        s->stats.spec_accepted += taken;
        dsr1_spec_track_update(&s->track, nd, taken);
    }
    s->n_done = s->n_tokens - 1;
    dsr1_kvcache_truncate(e->kv, s->slot, s->n_done);
}

int dsr1_engine_step(dsr1_engine *e, dsr1_event *ev, size_t *n_ev, dsr1_error *err)
{
    *n_ev = 0;
    for (int i = 0; i < e->n_seqs; i++) /* finishes owed by cancel */
        if (e->seqs[i].report_finish) {
            e->seqs[i].report_finish = 0;
            emit(ev, n_ev, &e->seqs[i], i, -1);
        }
    admit(e);
    dsr1_engine_prefix_attach(e);
    plan p;
    if (!build_batch(e, &p, ev, n_ev)) return 0;
    DSR1_TRY(run_main(e, &p, err));
    for (int k = 0; k < p.nseq; k++) verify(e, &e->seqs[e->out_seq[k]], ev, n_ev);
    int rc = 0;
    if (e->kmax) {
        double t0 = dsr1_engine_now();
        rc = dsr1_engine_draft(e, err);
        e->t_draft += dsr1_engine_now() - t0;
    }
    if (!rc) dsr1_engine_prefix_step_end(e);
    return rc;
}
