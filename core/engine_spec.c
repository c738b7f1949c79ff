/*
 * engine_spec.c - the drafting half of speculative decoding with the
 * model's own MTP (NextN) layer, run at the end of every engine step
 * (dsr1_engine_draft); the verify half is verify() in engine.c, the
 * arithmetic is spec.c.
 *
 * MTP row i combines the main model's final-normed hidden state h[i] with
 * the embedding of token t[i+1] at RoPE position i and predicts t[i+2]; it
 * writes the MTP layer's KV row i. So after a step that fed positions
 * [a, n_done) of a sequence, rows [a, n_done) are computable at once (every
 * t[i+1] is known by then: a prompt token or a token just accepted), and
 * they are: the MTP cache follows the main cache over the prompt and over
 * every accepted token. Except in the adaptive mode's sit-outs: a sequence
 * that will not draft this step keeps the hidden states of what it fed in
 * a ring (engine.h) and its MTP rows wait, to be computed in one batch
 * when it tries again; the MTP layer is ~1/(layers + 1) of a step's work,
 * which a sequence whose drafts are never accepted would otherwise pay
 * every step for nothing. The last of those rows (position n_done - 1, with
 * the token just sampled) gives the first draft. Further drafts chain: the
 * MTP runs on its own previous row's post-shared_head.norm state and its
 * own draft token (SGLang's chaining; the pre-norm state loses acceptance),
 * at positions n_done, n_done + 1, ...; those rows are speculative and are
 * overwritten by the next step's catch-up before anything reads them.
 *
 * Each draft position is one batched MTP forward over every sequence still
 * drafting, so the cost per step is (longest draft) MTP forwards, not one
 * per sequence. Nothing here allocates.
 */
#include "engine.h"

#include <string.h>

double dsr1_engine_draft_seconds(const dsr1_engine *e) { return e->t_draft; }

void dsr1_engine_set_draft_override(dsr1_engine *e, dsr1_draft_fn fn, void *ctx)
{
    e->override = fn;
    e->override_ctx = ctx;
}

/* Drafts s may make now: at most kmax, none past the context or past what
 * max_tokens still allows (a verify step yields drafts + 1 tokens), and
 * only as many as the KV cache has pages for (rows up to the last verify
 * position). Reserves those pages. */
static int draft_limit(dsr1_engine *e, eseq *s)
{
    if (s->state != SEQ_RUNNING || s->n_generated == 0) return 0;
    int k = e->kmax, room = e->o.ctx - s->n_tokens, left = s->max_tokens - s->n_generated - 1;
    if (k > room) k = room;
    if (k > left) k = left;
    while (k > 0 && dsr1_kvcache_reserve(e->kv, s->slot, s->n_done + k + 1, NULL) != 0) k--;
    return k;
}

/* Row p % DSR1_SPEC_MAX_LAG of slot's hidden-state ring. */
static float *lag_row(dsr1_engine *e, int slot, int p)
{
    size_t D = (size_t)e->m->cfg.hidden_size;
    return e->lag_h + ((size_t)slot * DSR1_SPEC_MAX_LAG + (size_t)(p % DSR1_SPEC_MAX_LAG)) * D;
}

/* Adaptive mode: s sits out this step; when its MTP rows may lag through
 * it (the ring holds every position from n_mtp to n_done), keep the hidden
 * states of the positions it fed and return 1. A finished sequence catches
 * up, so kept sequences have their MTP rows for reuse and export. */
static int defer(dsr1_engine *e, eseq *s, int fed)
{
    if (s->state != SEQ_RUNNING || s->n_done - s->n_mtp > DSR1_SPEC_MAX_LAG) return 0;
    size_t D = (size_t)e->m->cfg.hidden_size;
    for (int p = fed; p < s->n_done; p++)
        memcpy(lag_row(e, s->slot, p), e->hid + (size_t)(s->b_row + p - fed) * D,
               D * sizeof(float));
    s->h_lag = 1;
    return 1;
}

/* The catch-up batch: for each sequence fed this step, MTP rows
 * [n_mtp, n_done) with the main hidden states of those positions (from the
 * lag ring for the ones fed in earlier steps); the last row of each
 * sequence that may draft is an output. A sequence whose MTP rows lag
 * behind what was fed without the hidden states (imported without them)
 * never drafts. In the adaptive mode a sequence that sits out this step
 * may skip the catch-up (defer). Returns the batch size; *n_out outputs,
 * owners in m_owner. */
static int catchup_batch(dsr1_engine *e, int *n_out)
{
    size_t D = (size_t)e->m->cfg.hidden_size;
    int nb = 0;
    *n_out = 0;
    for (int i = 0; i < e->n_seqs; i++) {
        eseq *s = &e->seqs[i];
        s->k_limit = 0;
        if (s->b_len <= 0 || s->slot < 0 || s->n_done <= s->n_mtp) continue; /* fed, kept */
        int fed = e->b_pos[s->b_row];
        if (s->n_mtp != fed && !(s->h_lag && s->n_mtp < fed)) continue;
        int want = e->o.spec_draft >= 0 || dsr1_spec_try(&s->track, &e->costs);
        if (!want && defer(e, s, fed)) continue;
        for (int p = s->n_mtp; p < s->n_done; p++, nb++) {
            e->m_ids[nb] = s->tokens[p + 1];
            e->m_pos[nb] = p;
            e->m_seq[nb] = s->slot;
            const float *h = p < fed ? lag_row(e, s->slot, p)
                                     : e->hid + (size_t)(s->b_row + p - fed) * D;
            memcpy(e->mtp_h + (size_t)nb * D, h, D * sizeof(float));
        }
        s->n_mtp = s->n_done;
        s->h_lag = 0;
        s->k_limit = want ? draft_limit(e, s) : 0;
        s->chain = 1.0f;
        if (s->k_limit > 0) {
            e->m_out[*n_out] = nb - 1;
            e->m_owner[(*n_out)++] = i;
        }
    }
    return nb;
}

/* Choose draft j of s from its MTP logits: the argmax for greedy
 * sequences, else a draw from the sampler's distribution q (kept for the
 * acceptance test), with the repetition window running over the earlier
 * drafts. */
static int32_t choose(dsr1_engine *e, eseq *s, const float *logits, int j)
{
    int V = e->m->cfg.vocab_size;
    if (s->sampling.temperature <= 0) {
        int32_t b = 0;
        for (int32_t i = 1; i < V; i++)
            if (logits[i] > logits[b]) b = i;
        return b;
    }
    float *q = e->q + ((size_t)s->slot * (size_t)e->kmax + (size_t)j) * (size_t)V;
    int w = s->sampling.repetition_window > 0 ? s->sampling.repetition_window : 0;
    int end = s->n_tokens + j, k = end < w ? end : w;
    dsr1_sampler_probs(logits, V, &s->sampling, s->tokens + end - k, (size_t)k, q,
                       e->sampler_scratch);
    return dsr1_sampler_draw(q, V, &s->rng);
}

/* Take draft j for each output row; the sequences that go on drafting get
 * a row of the next chained MTP batch (their draft as the token, their MTP
 * output state as h, position n_done + j). Returns that batch's size. */
static int take_drafts(dsr1_engine *e, int n_out, int j)
{
    size_t D = (size_t)e->m->cfg.hidden_size, V = (size_t)e->m->cfg.vocab_size;
    int adaptive = e->o.spec_draft < 0, nb = 0;
    for (int r = 0; r < n_out; r++) {
        eseq *s = &e->seqs[e->m_owner[r]];
        const float *lg = e->mtp_logits + (size_t)r * V;
        int32_t x = choose(e, s, lg, j);
        if (adaptive && !dsr1_spec_keep(&s->track, dsr1_spec_confidence(lg, (int)V), &s->chain,
                                           &e->costs)) {
            if (j == 0) dsr1_spec_track_declined(&s->track);
            continue;
        }
        s->tokens[s->n_tokens + j] = x;
        s->n_draft = j + 1;
        if (j + 1 >= s->k_limit || (adaptive && !dsr1_spec_more(&s->track, s->chain, &e->costs)))
            continue;
        e->m_ids[nb] = x;
        e->m_pos[nb] = s->n_done + j;
        e->m_seq[nb] = s->slot;
        memcpy(e->mtp_h + (size_t)nb * D, e->mtp_hout + (size_t)r * D, D * sizeof(float));
        e->m_owner[nb++] = e->m_owner[r];
    }
    return nb;
}

/* The test/bench override replaces the drafts of every sequence that may
 * draft; invalid ids end its list. */
static void override_drafts(dsr1_engine *e)
{
    for (int i = 0; i < e->n_seqs; i++) {
        eseq *s = &e->seqs[i];
        if (s->k_limit <= 0) continue;
        int n = e->override(e->override_ctx, i, s->tokens, s->n_tokens, s->tokens + s->n_tokens,
                            s->k_limit);
        n = n < 0 ? 0 : n > s->k_limit ? s->k_limit : n;
        for (int j = 0; j < n; j++)
            if (s->tokens[s->n_tokens + j] < 0 || s->tokens[s->n_tokens + j] >= e->m->cfg.vocab_size)
                n = j;
        s->n_draft = n;
        s->draft_onehot = 1;
    }
}

int dsr1_engine_draft(dsr1_engine *e, dsr1_error *err)
{
    size_t D = (size_t)e->m->cfg.hidden_size;
    int n_out, nb = catchup_batch(e, &n_out);
    if (!nb) return 0;
    dsr1_fwd_batch b = {.n = nb, .ids = e->m_ids, .pos = e->m_pos, .seq = e->m_seq,
                        .n_out = n_out, .out_rows = e->m_out};
    DSR1_TRY(dsr1_forward_mtp(e->fwd, &b, e->mtp_h, (int64_t)D, e->mtp_logits, e->mtp_hout, err));
    e->mtp_rows += (uint64_t)nb;
    for (int i = 0; i < e->n_seqs; i++) {
        e->seqs[i].n_draft = 0;
        e->seqs[i].draft_onehot = 0;
    }
    for (int j = 0; n_out > 0; j++) {
        n_out = take_drafts(e, n_out, j);
        if (!n_out) break;
        b = (dsr1_fwd_batch){.n = n_out, .ids = e->m_ids, .pos = e->m_pos, .seq = e->m_seq,
                             .n_out = n_out, .out_rows = e->b_all};
        DSR1_TRY(dsr1_forward_mtp(e->fwd, &b, e->mtp_h, (int64_t)D, e->mtp_logits, e->mtp_hout,
                                  err));
        e->mtp_rows += (uint64_t)n_out;
    }
    if (e->override) override_drafts(e);
    /* Give back pages reserved for drafts that were not made. */
    for (int i = 0; i < e->n_seqs; i++) {
        eseq *s = &e->seqs[i];
        if (s->k_limit > 0) dsr1_kvcache_truncate(e->kv, s->slot, s->n_done + s->n_draft + 1);
    }
    return 0;
}
