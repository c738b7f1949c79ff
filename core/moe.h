/*
 * moe.h - MoE routing: which experts a token goes to and with what weight,
 * for every variant a DeepSeek config.json can describe (the scalar
 * reference every backend's router is tested against).
 */
#ifndef DSR1_MOE_H
#define DSR1_MOE_H

#include "backends/backend.h"

/* Fill a dsr1_moe_params from the config. */
void dsr1_moe_params_of(const dsr1_config *c, dsr1_moe_params *p);

/* Route one token. logits[n_experts] are the router outputs (float32);
 * bias[n_experts] the correction bias or NULL. Writes idx[topk] (experts in
 * selection order: best first, lowest index on ties) and w[topk].
 * scratch holds 2 * n_experts + n_group floats. Returns 0, or DSR1_ERANGE
 * when a logit or bias is not finite (a NaN weight, a bad cache): then
 * idx is all -1 and w all NaN, never an abort. */
int dsr1_moe_route(const dsr1_moe_params *p, const float *logits, const float *bias,
                    int32_t *idx, float *w, float *scratch);

#endif
