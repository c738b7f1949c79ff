/*
 * spec.h - the arithmetic of speculative decoding, with no engine in it:
 * how many draft tokens a sequence should get (the adaptive policy), the
 * draft's confidence, lossless acceptance of a draft (rejection sampling
 * against the draft distribution), and the expected-tokens model the bench
 * uses. Internal to core/ (engine.c, engine_spec.c) and the tests.
 *
 * The engine owns the forwards (MTP drafts, the verify batch); this file
 * only decides. Every function is pure apart from the RNG it is handed.
 */
#ifndef DSR1_SPEC_H
#define DSR1_SPEC_H

#include <stdint.h>

#include "sampler.h"

/* Largest fixed draft length (engine option spec_draft 1..this). */
#define DSR1_SPEC_MAX_DRAFT 8
/* The adaptive mode (spec_draft -1) drafts at most this many per step. */
#define DSR1_SPEC_ADAPTIVE_MAX 4
/* Adaptive mode: most positions the MTP layer's KV may lag behind the main
 * model's while a sequence sits out (its hidden states wait in a ring of
 * this many rows). Equal to the longest sit-out, so a whole back-off is
 * caught up by one batched MTP forward when the sequence tries again. */
#define DSR1_SPEC_MAX_LAG 32

/* Per-sequence memory of how well drafts have been doing. */
typedef struct dsr1_spec_track {
    float ema;   /* per-token acceptance, exponential moving average */
    int backoff; /* steps to sit out after the next failed attempt */
    int wait;    /* steps still to sit out */
} dsr1_spec_track;

/* What drafting costs, in decode steps (dsr1_model_spec_costs estimates
 * them from the weights read): one more row in the verify batch, and one
 * MTP forward to a draft (its layer and its vocabulary head). */
typedef struct dsr1_spec_costs {
    float row, draft;
} dsr1_spec_costs;

void dsr1_spec_track_init(dsr1_spec_track *t);
/* After a verify of `drafted` drafts of which the first `accepted` were
 * taken: each accepted draft counts as a success and the first rejected one
 * as a failure (later drafts were never really tried). A step without
 * drafts lets the estimate drift back towards the prior, so a sequence that
 * stopped drafting gets to try again. */
void dsr1_spec_track_update(dsr1_spec_track *t, int drafted, int accepted);

/* Adaptive mode, once per step before drafting: whether to compute draft
 * logits at all. Only when the expected acceptance of a first draft (the
 * moving average) pays for the draft and its verify row; on a model whose
 * MTP head costs about a decode step (small models, where the vocabulary
 * head dominates) that never happens and the mode decodes plainly. An
 * attempt that gains nothing (no draft confident enough, or the first draft
 * rejected while the average acceptance is low) makes the sequence sit out
 * 1, 2, 4, .. 32 steps before the next; an accepted draft ends the
 * back-off. While a sequence sits out the engine skips the MTP layer's KV
 * catch-up and does it in one batch when the sequence tries again
 * (DSR1_SPEC_MAX_LAG). */
int dsr1_spec_try(dsr1_spec_track *t, const dsr1_spec_costs *c);
/* Whether dsr1_spec_try can never say yes at these costs: the moving
 * average starts at the prior and moves away from it only through drafts,
 * so costs above the prior mean no sequence ever drafts. The engine then
 * runs no MTP layer at all (no KV catch-up every DSR1_SPEC_MAX_LAG steps
 * for drafts that will not come). */
int dsr1_spec_never(const dsr1_spec_costs *c);
/* An attempt made no draft (the first was not confident enough). */
void dsr1_spec_track_declined(dsr1_spec_track *t);

/* The draft's confidence: the largest probability of softmax(logits) at
 * temperature 1 (NaN counts as -inf; 0 when every logit is -inf). */
float dsr1_spec_confidence(const float *logits, int vocab);

/* Adaptive policy, asked once per draft position with the draft in hand
 * (its MTP forward already paid): keep it when the estimated chance that
 * this draft and every earlier one is accepted (*chain, start it at 1;
 * updated here) pays for its verify row. The estimate of one draft is
 * sqrt(confidence * ema): both must be good. */
int dsr1_spec_keep(const dsr1_spec_track *t, float conf, float *chain, const dsr1_spec_costs *c);
/* After a kept draft: whether the next one is worth its MTP forward and
 * its verify row, expecting it accepted at the moving average. */
int dsr1_spec_more(const dsr1_spec_track *t, float chain, const dsr1_spec_costs *c);

/* Lossless acceptance of draft x, drawn from q, against the target p (both
 * dense distributions over the vocabulary): accept with probability
 * min(1, p[x] / q[x]). q NULL means q is one-hot on x (drafts that were not
 * sampled: the test override, or greedy drafts under a sampling target). */
int dsr1_spec_accept(const float *p, const float *q, int32_t x, dsr1_rng *rng);

/* After a rejection: draw from norm(max(0, p - q)). p is overwritten with
 * the residual (unnormalised). q NULL is one-hot on x. When the residual is
 * empty (p == q up to rounding, so the rejection itself was rounding), the
 * draw is from p as it was. */
int32_t dsr1_spec_residual(float *p, const float *q, int32_t x, int vocab, dsr1_rng *rng);

/* Expected tokens per verify step with per-token acceptance a and k drafts:
 * accepted drafts plus the bonus token, (1 - a^(k+1)) / (1 - a). */
double dsr1_spec_expected_tokens(double a, int k);

#endif
