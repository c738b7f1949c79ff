/*
 * moe.c - MoE routing (moe.h), mirroring DeepSeek's own code:
 *
 *  V3 (inference/model.py Gate, topk_method noaux_tc, sigmoid):
 *    scores = sigmoid(logits); choice = scores + bias (selection only);
 *    groups ranked by the sum of their top-2 choices; keep topk_group
 *    groups (the others are -inf); top-k experts on choice; weights =
 *    the unbiased scores, divided by their sum (norm_topk_prob), then
 *    times routed_scaling_factor (normalise first, then scale).
 *  V2 (Hugging Face modeling_deepseek.py, softmax): group_limited_greedy
 *    ranks groups by their max score; greedy takes the top-k of all; then
 *    if top_k > 1 and norm_topk_prob the weights are divided by
 *    (sum + 1e-20) and NOT scaled, else they are scaled.
 *
 * Ties go to the lower index everywhere, so routing is a pure function of
 * the logits. The expert computation itself lives in the backend.
 */
#include "moe.h"

#include <math.h>

void dsr1_moe_params_of(const dsr1_config *c, dsr1_moe_params *p)
{
    p->n_experts = c->n_routed_experts;
    p->topk = c->num_experts_per_tok;
    p->n_group = c->n_group > 0 ? c->n_group : 1;
    p->topk_group = c->topk_group > 0 ? c->topk_group : 1;
    p->scoring = c->scoring_func;
    p->method = c->topk_method;
    p->family = c->family;
    p->norm_topk_prob = c->norm_topk_prob;
    p->routed_scaling_factor = c->routed_scaling_factor;
}

/* Index of the largest v[i] over i < n with mask[i] unset (lowest on ties),
 * or -1. NaN is never chosen. */
static int argmax_unmasked(const float *v, const unsigned char *mask, int n)
{
    int best = -1;
    for (int i = 0; i < n; i++) {
        if (mask && mask[i]) continue;
        if (v[i] != v[i]) continue;
        if (best < 0 || v[i] > v[best]) best = i;
    }
    return best;
}

/* Score of each group: top-2 sum (bias-corrected V3) or max (V2). */
static float group_score(const float *choice, int per, int with_bias)
{
    if (!with_bias) {
        float m = -INFINITY;
        for (int i = 0; i < per; i++) m = fmaxf(m, choice[i]);
        return m;
    }
    float a = -INFINITY, b = -INFINITY;
    for (int i = 0; i < per; i++) {
        if (choice[i] > a) { b = a; a = choice[i]; }
        else if (choice[i] > b) b = choice[i];
    }
    return per > 1 ? a + b : a;
}

/* Mark the experts of groups not among the best topk_group as excluded. */
static void limit_groups(const dsr1_moe_params *p, const float *choice, int with_bias,
                         unsigned char *excl, float *gscore)
{
    int per = p->n_experts / p->n_group;
    unsigned char gmask[256] = {0}, keep[256] = {0};
    DSR1_ASSERT(p->n_group <= 256);
    for (int g = 0; g < p->n_group; g++)
        gscore[g] = group_score(choice + g * per, per, with_bias);
    for (int k = 0; k < p->topk_group && k < p->n_group; k++) {
        int g = argmax_unmasked(gscore, gmask, p->n_group);
        if (g < 0) break;
        gmask[g] = 1;
        keep[g] = 1;
    }
    for (int e = 0; e < p->n_experts; e++) excl[e] = !keep[e / per];
}

int dsr1_moe_route(const dsr1_moe_params *p, const float *logits, const float *bias,
                   int32_t *idx, float *w, float *scratch)
{
    int n = p->n_experts;
    for (int e = 0; e < n; e++)
        if (!isfinite(logits[e]) || (bias && !isfinite(bias[e]))) {
            for (int k = 0; k < p->topk; k++) {
                idx[k] = -1;
                w[k] = NAN;
            }
            return DSR1_ERANGE;
        }
    float *scores = scratch, *choice = scratch + n, *gscore = scratch + 2 * n;
    if (p->scoring == DSR1_SCORE_SIGMOID) {
        for (int e = 0; e < n; e++) scores[e] = 1.0f / (1.0f + expf(-logits[e]));
    } else {
        float m = -INFINITY;
        double sum = 0;
        for (int e = 0; e < n; e++) m = fmaxf(m, logits[e]);
        for (int e = 0; e < n; e++) sum += scores[e] = expf(logits[e] - m);
        for (int e = 0; e < n; e++) scores[e] = (float)(scores[e] / sum);
    }
    int with_bias = bias && p->method == DSR1_TOPK_NOAUX_TC;
    for (int e = 0; e < n; e++) choice[e] = with_bias ? scores[e] + bias[e] : scores[e];
    unsigned char excl[1024] = {0}; /* experts out of the running */
    DSR1_ASSERT(n <= 1024);
    if (p->n_group > 1 && p->method != DSR1_TOPK_GREEDY)
        limit_groups(p, choice, with_bias, excl, gscore);
    double sum = 0;
    for (int k = 0; k < p->topk; k++) {
        int e = argmax_unmasked(choice, excl, n);
        if (e < 0) { /* only NaN choices left (a NaN made inside the scores) */
            for (int i = 0; i < p->topk; i++) {
                idx[i] = -1;
                w[i] = NAN;
            }
            return DSR1_ERANGE;
        }
        excl[e] = 1;
        idx[k] = e;
        w[k] = scores[e];
        sum += w[k];
    }
    float scale = p->routed_scaling_factor;
    if (p->family == DSR1_FAMILY_V3) {
        if (p->norm_topk_prob)
            for (int k = 0; k < p->topk; k++) w[k] = (float)(w[k] / sum);
        for (int k = 0; k < p->topk; k++) w[k] *= scale;
    } else if (p->topk > 1 && p->norm_topk_prob) {
        for (int k = 0; k < p->topk; k++) w[k] = (float)(w[k] / (sum + 1e-20));
    } else {
        for (int k = 0; k < p->topk; k++) w[k] *= scale;
    }
    return 0;
}
