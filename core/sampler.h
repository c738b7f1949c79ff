/*
 * sampler.h - turning a row of logits into the next token: repetition
 * penalty, temperature, top-k, top-p, min-p, and a seeded RNG so a run is
 * reproducible. Also the probability vector the speculative decoder needs
 * for lossless rejection sampling.
 */
#ifndef DSR1_SAMPLER_H
#define DSR1_SAMPLER_H

#include <stddef.h>
#include <stdint.h>

typedef struct dsr1_sampling {
    float temperature;        /* 0 = greedy (argmax, lowest id on ties) */
    float top_p;              /* 1 = off */
    int top_k;                /* 0 = off */
    float min_p;              /* 0 = off */
    float repetition_penalty; /* 1 = off; CTRL-style over the recent tokens */
    int repetition_window;    /* how many recent tokens the penalty sees (64) */
    float presence_penalty;   /* 0 = off; OpenAI's, over the generated tokens */
    float frequency_penalty;  /* 0 = off; OpenAI's, over the generated tokens */
    uint64_t seed;
} dsr1_sampling;

/* DeepSeek's recommendation for R1: temperature 0.6, top-p 0.95. */
void dsr1_sampling_default(dsr1_sampling *s);

/* Small fast PRNG (splitmix64 seeded xoshiro256**); state per sequence. */
typedef struct dsr1_rng { uint64_t s[4]; } dsr1_rng;
void dsr1_rng_seed(dsr1_rng *r, uint64_t seed);
uint64_t dsr1_rng_next(dsr1_rng *r);
double dsr1_rng_uniform(dsr1_rng *r); /* [0, 1) */

/* The distribution the sampler draws from after penalty, temperature and the
 * truncations: probs[vocab] (zeros outside the kept set, sums to 1). For
 * temperature 0 it is one-hot on the argmax. `recent` are the last tokens
 * of the sequence (for the repetition penalty). scratch must hold 2*vocab
 * floats + vocab ints worth of bytes: dsr1_sampler_scratch_size(vocab). */
size_t dsr1_sampler_scratch_size(int vocab);
void dsr1_sampler_probs(const float *logits, int vocab, const dsr1_sampling *s,
                        const int32_t *recent, size_t n_recent, float *probs,
                        void *scratch);

/* Draw one token: dsr1_sampler_probs then an inverse-CDF draw. Greedy when
 * temperature == 0 (no RNG use, so greedy runs never depend on the seed). */
int32_t dsr1_sampler_sample(const float *logits, int vocab, const dsr1_sampling *s,
                            const int32_t *recent, size_t n_recent, dsr1_rng *rng,
                            void *scratch);

/*
 * OpenAI's presence and frequency penalties, applied to a row of logits in
 * place before sampling: logit[j] -= frequency_penalty * c[j] +
 * presence_penalty * (c[j] > 0), where c[j] counts token j among the
 * sequence's generated tokens out[0..n_out). Negative penalties favour
 * repeats. No-op when both are 0. scratch as for dsr1_sampler_probs (it is
 * used for the counts; only the entries of out are touched, O(n_out)).
 */
void dsr1_sampler_penalize(float *logits, int vocab, const dsr1_sampling *s,
                           const int32_t *out, size_t n_out, void *scratch);

/* Most alternatives dsr1_sampler_logprobs reports (OpenAI's top_logprobs cap). */
#define DSR1_MAX_TOP_LOGPROBS 20

/*
 * Log-probabilities from a row of logits (log-softmax at temperature 1, NaN
 * as -inf): returns tok's, and writes the k most likely tokens (k <=
 * DSR1_MAX_TOP_LOGPROBS, most likely first, lower id first on ties) to
 * top_ids / top_lp. O(vocab * k) at worst, O(vocab) typically.
 */
float dsr1_sampler_logprobs(const float *logits, int vocab, int32_t tok, int k,
                            int32_t *top_ids, float *top_lp);

/* Draw from an explicit distribution (used by speculative sampling for the
 * residual max(0, p - q) normalised). */
int32_t dsr1_sampler_draw(const float *probs, int vocab, dsr1_rng *rng);

#endif
