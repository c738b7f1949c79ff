/*
 * cuda_route.cuh - MoE routing for one token, written once for the device
 * (cuda_moe.cu runs it, one thread per token) and the host
 * (tests/cuda_host_check.cu compares it with core/moe.c on every scoring
 * and top-k variant, so the transcription is checked without a GPU).
 * Mirrors core/moe.c: sigmoid or softmax scores (softmax sum in double),
 * the bias-corrected choice for noaux_tc, groups ranked by top-2 sum (with
 * bias) or max, greedy top-k with ties to the lower index, V3 normalise
 * then scale, V2 normalise (sum + 1e-20) or scale.
 */
#ifndef DSR1_CUDA_ROUTE_CUH
#define DSR1_CUDA_ROUTE_CUH

#include "cuda_common.cuh"

#define MOE_MAXE 1024
#define MOE_MAXG 256

CU_HD int bit_get(const uint32_t *m, int i) { return (m[i >> 5] >> (i & 31)) & 1u; }
CU_HD void bit_set(uint32_t *m, int i) { m[i >> 5] |= 1u << (i & 31); }

/* Largest v[i] not masked, lowest index on ties, NaN never; -1 if none. */
CU_HD int argmax_unmasked(const float *v, const uint32_t *mask, int n)
{
    int best = -1;
    for (int i = 0; i < n; i++) {
        if (mask && bit_get(mask, i)) continue;
        if (v[i] != v[i]) continue;
        if (best < 0 || v[i] > v[best]) best = i;
    }
    return best;
}

CU_HD float group_score(const float *choice, int per, int with_bias)
{
    if (!with_bias) {
        float m = -INFINITY;
        for (int i = 0; i < per; i++) m = fmaxf(m, choice[i]);
        return m;
    }
    float a = -INFINITY, b = -INFINITY;
    for (int i = 0; i < per; i++) {
        if (choice[i] > a) {
            b = a;
            a = choice[i];
        } else if (choice[i] > b) {
            b = choice[i];
        }
    }
    return per > 1 ? a + b : a;
}

/* Route one token (core/moe.c dsr1_moe_route, step for step): logits[E]
 * -> ix[K], w[K]; scratch holds 2E + n_group floats. A non-finite logit
 * gives ix = -1 and w = NaN for all k (the seam's rule). */
CU_HD void cu_route_token(const cu_moe_params &p, const float *lg, const float *bias, int32_t *ix,
                          float *w, float *scratch)
{
    const int E = p.n_experts, K = p.topk;
    float *scores = scratch, *choice = scores + E, *gscore = choice + E;
    for (int e = 0; e < E; e++)
        if (!isfinite(lg[e])) {
            for (int k = 0; k < K; k++) {
                ix[k] = -1;
                w[k] = cu_as_float(0x7fc00000u);
            }
            return;
        }
    if (p.sigmoid) {
        for (int e = 0; e < E; e++) scores[e] = 1.0f / (1.0f + expf(-lg[e]));
    } else {
        float m = -INFINITY;
        double sum = 0;
        for (int e = 0; e < E; e++) m = fmaxf(m, lg[e]);
        for (int e = 0; e < E; e++) sum += scores[e] = expf(lg[e] - m);
        for (int e = 0; e < E; e++) scores[e] = (float)(scores[e] / sum);
    }
    int with_bias = bias && p.method == 2;
    for (int e = 0; e < E; e++) choice[e] = with_bias ? scores[e] + bias[e] : scores[e];
    uint32_t excl[MOE_MAXE / 32] = {0};
    if (p.n_group > 1 && p.method != 0) {
        int per = E / p.n_group;
        uint32_t gmask[MOE_MAXG / 32] = {0};
        for (int g = 0; g < p.n_group; g++) gscore[g] = group_score(choice + g * per, per, with_bias);
        for (int k = 0; k < p.topk_group && k < p.n_group; k++) {
            int g = argmax_unmasked(gscore, gmask, p.n_group);
            if (g < 0) break;
            bit_set(gmask, g);
        }
        for (int e = 0; e < E; e++)
            if (!bit_get(gmask, e / per)) bit_set(excl, e);
    }
    double sum = 0;
    for (int k = 0; k < K; k++) {
        int e = argmax_unmasked(choice, excl, E);
        if (e < 0) e = 0; /* unreachable for finite logits: the CPU asserts */
        bit_set(excl, e);
        ix[k] = e;
        w[k] = scores[e];
        sum += w[k];
    }
    float scale = p.routed_scaling_factor;
    if (p.v3) {
        if (p.norm_topk_prob)
            for (int k = 0; k < K; k++) w[k] = (float)(w[k] / sum);
        for (int k = 0; k < K; k++) w[k] = cu_mul(w[k], scale);
    } else if (K > 1 && p.norm_topk_prob) {
        for (int k = 0; k < K; k++) w[k] = (float)(w[k] / (sum + 1e-20));
    } else {
        for (int k = 0; k < K; k++) w[k] = cu_mul(w[k], scale);
    }
}

#endif
