/*
 * spec.c - speculative decoding arithmetic (see spec.h): the adaptive
 * drafting policy, draft confidence, lossless acceptance and the
 * expected-tokens model.
 *
 * Why the acceptance is lossless (Leviathan et al. 2023, Chen et al. 2023):
 * a draft x ~ q kept with probability min(1, p(x)/q(x)), and on rejection a
 * token drawn from norm(max(0, p - q)), is distributed exactly as p. The
 * engine applies it draft by draft, each against the target distribution of
 * its own position (the verify logits after the accepted prefix), so the
 * sequence is distributed as plain sampling from the main model.
 *
 * The policy (EAGLE-2 prunes its draft tree the same way, by the draft's own
 * confidence): a draft is worth making when the chance that it and all
 * drafts before it are accepted exceeds what it costs, relative to a decode
 * step: its MTP forward and its verify row (dsr1_spec_costs). On a
 * memory-bound CPU an extra verify row of an MoE model reads the weights of
 * its own experts: for R1 (8 of 256 experts per token) each extra row adds
 * about half a decode step of weight reads, the MTP draft ~7% (one layer of
 * 62 and the vocabulary head). On a small model the vocabulary head is
 * most of a step, so a draft (which runs the head again) costs nearly a
 * decode step and cannot pay at any acceptance: measured on models/tiny-r1,
 * fixed drafts decode at 0.8x plain. For the same reason there are no tree
 * drafts: every branch is another verify row with its own experts.
 */
#include "spec.h"

#include <math.h>

/* Prior acceptance a fresh sequence starts from: optimistic enough that it
 * drafts at once, as published MTP acceptance for R1 is 0.8-0.9. */
#define PRIOR 0.7f
/* Weight of one observation in the moving average. */
#define ALPHA 0.25f
/* Drift towards the prior per step without drafts. */
#define DRIFT 0.05f
/* Longest sit-out after failed attempts: a sequence whose drafts never work
 * still probes every 32 steps, at 1/32 of a draft head's cost per step. */
#define MAX_BACKOFF 32
_Static_assert(MAX_BACKOFF <= DSR1_SPEC_MAX_LAG, "a whole sit-out must fit the MTP lag ring");

void dsr1_spec_track_init(dsr1_spec_track *t)
{
    t->ema = PRIOR;
    t->backoff = t->wait = 0;
}

/* A failed attempt: sit out twice as long as last time. */
static void back_off(dsr1_spec_track *t)
{
    t->backoff = t->backoff ? t->backoff * 2 : 1;
    if (t->backoff > MAX_BACKOFF) t->backoff = MAX_BACKOFF;
    t->wait = t->backoff;
}

void dsr1_spec_track_update(dsr1_spec_track *t, int drafted, int accepted)
{
    if (drafted <= 0) {
        t->ema += DRIFT * (PRIOR - t->ema);
        return;
    }
    for (int i = 0; i < accepted; i++) t->ema += ALPHA * (1.0f - t->ema);
    if (accepted < drafted) t->ema -= ALPHA * t->ema;
    /* One rejected first draft is normal at any acceptance rate; only a run
     * of them (the average fallen below half the prior) is a failure. */
    if (accepted > 0) t->backoff = t->wait = 0;
    else if (t->ema < PRIOR / 2) back_off(t);
}

void dsr1_spec_track_declined(dsr1_spec_track *t) { back_off(t); }

int dsr1_spec_try(dsr1_spec_track *t, const dsr1_spec_costs *c)
{
    if (t->wait > 0) {
        t->wait--;
        return 0;
    }
    return t->ema >= c->row + c->draft;
}

int dsr1_spec_never(const dsr1_spec_costs *c) { return !(PRIOR >= c->row + c->draft); }

float dsr1_spec_confidence(const float *logits, int vocab)
{
    float mx = -INFINITY;
    for (int i = 0; i < vocab; i++)
        if (logits[i] > mx) mx = logits[i]; /* NaN compares false: skipped */
    if (mx == -INFINITY) return 0;
    double sum = 0;
    for (int i = 0; i < vocab; i++)
        if (logits[i] > -INFINITY) sum += exp((double)logits[i] - mx);
    return (float)(1.0 / sum);
}

int dsr1_spec_keep(const dsr1_spec_track *t, float conf, float *chain, const dsr1_spec_costs *c)
{
    float est = sqrtf(fmaxf(conf, 0) * fmaxf(t->ema, 0));
    *chain *= est;
    return *chain >= c->row;
}

int dsr1_spec_more(const dsr1_spec_track *t, float chain, const dsr1_spec_costs *c)
{
    return chain * t->ema >= c->row + c->draft;
}

int dsr1_spec_accept(const float *p, const float *q, int32_t x, dsr1_rng *rng)
{
    float px = p[x], qx = q ? q[x] : 1.0f;
    if (!(px > 0)) return 0;
    if (px >= qx) return 1;
    /* u < p/q, written as u * q < p so no division by a tiny q. */
    return dsr1_rng_uniform(rng) * (double)qx < (double)px;
}

int32_t dsr1_spec_residual(float *p, const float *q, int32_t x, int vocab, dsr1_rng *rng)
{
    double total = 0;
    for (int i = 0; i < vocab; i++) {
        float qi = q ? q[i] : (i == x ? 1.0f : 0.0f);
        if (p[i] > qi) total += (double)p[i] - qi;
    }
    /* An empty residual means p <= q everywhere, i.e. p == q: then x was
     * accepted with probability 1 in exact arithmetic and only rounding
     * rejected it; drawing from p keeps the output distribution p. */
    if (!(total > 1e-12)) return dsr1_sampler_draw(p, vocab, rng);
    for (int i = 0; i < vocab; i++) {
        float qi = q ? q[i] : (i == x ? 1.0f : 0.0f);
        p[i] = p[i] > qi ? p[i] - qi : 0.0f;
    }
    return dsr1_sampler_draw(p, vocab, rng);
}

double dsr1_spec_expected_tokens(double a, int k)
{
    if (k <= 0) return 1.0;
    if (a >= 1.0) return k + 1.0;
    return (1.0 - pow(a, k + 1)) / (1.0 - a);
}
