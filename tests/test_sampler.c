/*
 * test_sampler.c - core/sampler.c against exact properties: greedy is the
 * argmax, the top-k / top-p / min-p kept sets on small hand-computed vectors,
 * the repetition penalty, seed reproducibility, sample == draw(probs), a
 * naive full-sort reference on a real-sized vocabulary (the fast path
 * gathers above a floor; this proves the floor never changes the answer),
 * and a chi-square test that draw frequencies follow the probabilities.
 */
#include <math.h>
#include <stdlib.h>

#include "core/sampler.h"
#include "test.h"

static dsr1_sampling plain(float temperature)
{
    dsr1_sampling s;
    dsr1_sampling_default(&s);
    s.temperature = temperature;
    s.top_p = 1.0f;
    return s;
}

/* Logits whose softmax at temperature 1 is exactly p (up to rounding). */
static void logits_of(const double *p, int n, float *out)
{
    for (int i = 0; i < n; i++) out[i] = p[i] > 0 ? (float)log(p[i]) : -INFINITY;
}

static void probs_of(const float *logits, int n, const dsr1_sampling *s, float *probs)
{
    void *scratch = malloc(dsr1_sampler_scratch_size(n));
    dsr1_sampler_probs(logits, n, s, NULL, 0, probs, scratch);
    free(scratch);
}

DSR1_TEST(sampler_defaults_are_r1)
{
    dsr1_sampling s;
    dsr1_sampling_default(&s);
    CHECK_NEAR(s.temperature, 0.6, 1e-7);
    CHECK_NEAR(s.top_p, 0.95, 1e-7);
    CHECK_EQ_INT(s.top_k, 0);
    CHECK_NEAR(s.repetition_penalty, 1.0, 0);
}

DSR1_TEST(sampler_greedy_is_argmax)
{
    float l[6] = {0.5f, 3.0f, -1.0f, 3.0f, NAN, 2.9f};
    dsr1_sampling s = plain(0);
    float scratch[6 * 3]; /* 12 bytes per token */
    dsr1_rng r, r0;
    dsr1_rng_seed(&r, 7);
    r0 = r;
    CHECK_EQ_INT(dsr1_sampler_sample(l, 6, &s, NULL, 0, &r, scratch), 1); /* tie: lowest id */
    CHECK(!memcmp(&r, &r0, sizeof r)); /* greedy never touches the RNG */
    float p[6];
    probs_of(l, 6, &s, p);
    for (int i = 0; i < 6; i++) CHECK_NEAR(p[i], i == 1 ? 1.0 : 0.0, 0);
    /* All -inf: still a valid one-hot distribution. */
    float m[3] = {-INFINITY, -INFINITY, -INFINITY};
    dsr1_sampling s1 = plain(1);
    float q[3];
    probs_of(m, 3, &s1, q);
    CHECK_NEAR(q[0] + q[1] + q[2], 1.0, 0);
}

/* Greedy over rows long enough for argmax's 16-lane pass: the lowest id
 * of the largest value, whichever lane and block its copies fall in,
 * against a one-pass scan; zero maxima of both signs (-0 == +0: the first
 * zero wins), NaN (never chosen), all -inf (id 0), ragged lengths. */
DSR1_TEST(sampler_greedy_argmax_long_rows)
{
    enum { V = 1000 };
    float *l = malloc(V * sizeof *l), *scratch = malloc(3 * V * sizeof *scratch);
    dsr1_sampling s = plain(0);
    dsr1_rng r;
    dsr1_rng_seed(&r, 3);
    uint64_t g = 99;
    for (int trial = 0; trial < 200; trial++) {
        int n = 1 + trial * 7 % V, bad = 0;
        for (int i = 0; i < n; i++) {
            g = g * 6364136223846793005ull + 1442695040888963407ull;
            l[i] = (float)((g >> 33) % 64) - 40.0f; /* many ties */
        }
        if (trial % 5 == 1)
            for (int i = 0; i < n; i++) l[i] = l[i] > 0 ? (i % 2 ? -0.0f : 0.0f) : l[i] - 1; /* max 0 */
        if (trial % 5 == 2) l[(trial * 13) % n] = NAN;
        if (trial % 5 == 3)
            for (int i = 0; i < n; i++) l[i] = -INFINITY;
        int want = -1;
        for (int i = 0; i < n; i++)
            if (!isnan(l[i]) && (want < 0 || l[i] > l[want])) want = i;
        if (want < 0) want = 0;
        int got = dsr1_sampler_sample(l, n, &s, NULL, 0, &r, scratch);
        bad = got != want;
        CHECKF(!bad, "trial %d (n %d): greedy took %d, the lowest id of the largest is %d", trial, n, got, want);
        if (bad) break;
    }
    free(l);
    free(scratch);
}

DSR1_TEST(sampler_temperature_softmax)
{
    float l[4] = {1.0f, 2.0f, 0.0f, -1.0f};
    dsr1_sampling s = plain(0.5f);
    float p[4];
    probs_of(l, 4, &s, p);
    double z = 0;
    for (int i = 0; i < 4; i++) z += exp(l[i] / 0.5);
    for (int i = 0; i < 4; i++) CHECK_NEAR(p[i], exp(l[i] / 0.5) / z, 1e-6);
}

DSR1_TEST(sampler_top_k_exact)
{
    float l[5] = {1.0f, 3.0f, 2.0f, 3.0f, 0.0f};
    dsr1_sampling s = plain(1);
    s.top_k = 2;
    float p[5];
    probs_of(l, 5, &s, p);
    float want[5] = {0, 0.5f, 0, 0.5f, 0};
    for (int i = 0; i < 5; i++) CHECK_NEAR(p[i], want[i], 1e-6);
    /* A tie at the boundary keeps the lower id: 3.0 twice, k = 1. */
    s.top_k = 1;
    probs_of(l, 5, &s, p);
    CHECK_NEAR(p[1], 1.0, 0);
    CHECK_NEAR(p[3], 0.0, 0);
    /* k larger than the vocabulary is the full softmax. */
    s.top_k = 99;
    probs_of(l, 5, &s, p);
    double sum = 0;
    for (int i = 0; i < 5; i++) {
        sum += p[i];
        CHECK(p[i] > 0);
    }
    CHECK_NEAR(sum, 1.0, 1e-6);
}

DSR1_TEST(sampler_top_p_exact)
{
    double d[5] = {0.05, 0.5, 0.1, 0.2, 0.15};
    float l[5], p[5];
    logits_of(d, 5, l);
    dsr1_sampling s = plain(1);
    s.top_p = 0.8f; /* sorted 0.5, 0.2, 0.15 -> cum 0.85 >= 0.8 */
    probs_of(l, 5, &s, p);
    double want[5] = {0, 0.5 / 0.85, 0, 0.2 / 0.85, 0.15 / 0.85};
    for (int i = 0; i < 5; i++) CHECK_NEAR(p[i], want[i], 1e-6);
    s.top_p = 0.3f; /* the top token alone already reaches it */
    probs_of(l, 5, &s, p);
    CHECK_NEAR(p[1], 1.0, 1e-7);
    s.top_p = 0.0f; /* keeps exactly the argmax */
    probs_of(l, 5, &s, p);
    CHECK_NEAR(p[1], 1.0, 1e-7);
}

DSR1_TEST(sampler_top_k_then_top_p_renormalised)
{
    /* top-k 3 keeps 0.5, 0.2, 0.15 (mass 0.85); top-p 0.8 over that set
     * renormalised: 0.588, 0.824 -> keep two. Without renormalisation it
     * would keep three, so this pins the order of the steps. */
    double d[5] = {0.05, 0.5, 0.1, 0.2, 0.15};
    float l[5], p[5];
    logits_of(d, 5, l);
    dsr1_sampling s = plain(1);
    s.top_k = 3;
    s.top_p = 0.8f;
    probs_of(l, 5, &s, p);
    double want[5] = {0, 0.5 / 0.7, 0, 0.2 / 0.7, 0};
    for (int i = 0; i < 5; i++) CHECK_NEAR(p[i], want[i], 1e-6);
}

DSR1_TEST(sampler_min_p_exact)
{
    double d[5] = {0.05, 0.5, 0.1, 0.2, 0.15};
    float l[5], p[5];
    logits_of(d, 5, l);
    dsr1_sampling s = plain(1);
    s.min_p = 0.25f; /* floor 0.125: keeps 0.5, 0.2, 0.15 */
    probs_of(l, 5, &s, p);
    double want[5] = {0, 0.5 / 0.85, 0, 0.2 / 0.85, 0.15 / 0.85};
    for (int i = 0; i < 5; i++) CHECK_NEAR(p[i], want[i], 1e-6);
    /* The same through the sorted path (top-k on but not binding). */
    s.top_k = 5;
    probs_of(l, 5, &s, p);
    for (int i = 0; i < 5; i++) CHECK_NEAR(p[i], want[i], 1e-6);
}

DSR1_TEST(sampler_repetition_penalty)
{
    float l[4] = {2.0f, -1.0f, 1.0f, 0.5f};
    int32_t recent[6] = {3, 0, 1, 0, 0, 99 /* out of range: ignored */};
    dsr1_sampling s = plain(1);
    s.repetition_penalty = 2.0f;
    s.repetition_window = 5; /* sees 0,1,0,0,99: token 3 is outside */
    float p[4];
    float scratch[4 * 3];
    dsr1_sampler_probs(l, 4, &s, recent, 6, p, scratch);
    /* Expected logits: 0 -> 1.0 (once, not 0.25), 1 -> -2, 2 -> 1, 3 -> 0.5. */
    double e[4] = {1.0, -2.0, 1.0, 0.5}, z = 0;
    for (int i = 0; i < 4; i++) z += exp(e[i]);
    for (int i = 0; i < 4; i++) CHECK_NEAR(p[i], exp(e[i]) / z, 1e-6);
    /* Greedy sees the penalty too: 2.0 / 3 drops below token 2's 1.0. */
    s.temperature = 0;
    s.repetition_penalty = 3.0f; /* 0 -> 0.667 < 1.0 */
    CHECK_EQ_INT(dsr1_sampler_sample(l, 4, &s, recent, 6, NULL, scratch), 2);
}

DSR1_TEST(sampler_rng_reproducible)
{
    dsr1_rng a, b, c;
    dsr1_rng_seed(&a, 42);
    dsr1_rng_seed(&b, 42);
    dsr1_rng_seed(&c, 43);
    int same_c = 0;
    for (int i = 0; i < 1000; i++) {
        uint64_t x = dsr1_rng_next(&a), y = dsr1_rng_next(&b), z = dsr1_rng_next(&c);
        CHECK(x == y);
        same_c += x == z;
    }
    CHECK_EQ_INT(same_c, 0);
    for (int i = 0; i < 100000; i++) {
        double u = dsr1_rng_uniform(&a);
        if (!(u >= 0 && u < 1)) {
            CHECKF(0, "uniform out of range: %g", u);
            break;
        }
    }
}

DSR1_TEST(sampler_sample_equals_draw_of_probs)
{
    enum { V = 300 };
    float l[V], p[V];
    dsr1_rng g;
    dsr1_rng_seed(&g, 1);
    for (int i = 0; i < V; i++) l[i] = (float)(dsr1_rng_uniform(&g) * 8 - 4);
    dsr1_sampling s = plain(0.7f);
    s.top_p = 0.9f;
    s.top_k = 50;
    s.min_p = 0.01f;
    void *scratch = malloc(dsr1_sampler_scratch_size(V));
    dsr1_sampler_probs(l, V, &s, NULL, 0, p, scratch);
    dsr1_rng r1, r2;
    dsr1_rng_seed(&r1, 9);
    dsr1_rng_seed(&r2, 9);
    for (int i = 0; i < 200; i++) {
        int32_t a = dsr1_sampler_sample(l, V, &s, NULL, 0, &r1, scratch);
        int32_t b = dsr1_sampler_draw(p, V, &r2);
        CHECK_EQ_INT(a, b);
        CHECK(p[a] > 0);
    }
    free(scratch);
}

/* Reference: full sort of the whole vocabulary, then the same rules. */
typedef struct { double p; int id; } ref_c;
static int ref_cmp(const void *a, const void *b)
{
    const ref_c *x = a, *y = b;
    if (x->p != y->p) return x->p > y->p ? -1 : 1;
    return x->id - y->id;
}

static int ref_kept(const float *l, int v, const dsr1_sampling *s, unsigned char *kept)
{
    ref_c *c = malloc(sizeof *c * (size_t)v);
    double mx = -INFINITY, z = 0;
    for (int i = 0; i < v; i++) mx = l[i] > mx ? l[i] : mx;
    for (int i = 0; i < v; i++) z += c[i].p = exp((l[i] - mx) / s->temperature), c[i].id = i;
    for (int i = 0; i < v; i++) c[i].p /= z;
    qsort(c, (size_t)v, sizeof *c, ref_cmp);
    int n = s->top_k > 0 && s->top_k < v ? s->top_k : v;
    double zk = 0, cum = 0;
    for (int i = 0; i < n; i++) zk += c[i].p;
    for (int i = 0; i < n; i++) {
        cum += c[i].p;
        if (cum >= s->top_p * zk) { n = i + 1; break; }
    }
    while (n > 1 && c[n - 1].p < s->min_p * c[0].p) n--;
    memset(kept, 0, (size_t)v);
    for (int i = 0; i < n; i++) kept[c[i].id] = 1;
    free(c);
    return n;
}

DSR1_TEST(sampler_large_vocab_matches_full_sort)
{
    enum { V = 129280 };
    float *l = malloc(sizeof *l * V), *p = malloc(sizeof *p * V);
    unsigned char *kept = malloc(V);
    void *scratch = malloc(dsr1_sampler_scratch_size(V));
    dsr1_rng g;
    dsr1_rng_seed(&g, 3);
    /* Flat-ish logits make the top-p set large (the floor has to drop);
     * peaked ones make it tiny. Both must agree with the full sort. */
    const float spread[3] = {1.0f, 6.0f, 20.0f};
    const struct { float t, p; int k; float mp; } cfg[4] = {
        {0.6f, 0.95f, 0, 0}, {1.0f, 0.5f, 0, 0}, {1.0f, 1.0f, 40, 0}, {0.8f, 0.9f, 1000, 0.001f}};
    for (int si = 0; si < 3; si++) {
        for (int i = 0; i < V; i++) l[i] = (float)(dsr1_rng_uniform(&g) * spread[si]);
        for (int ci = 0; ci < 4; ci++) {
            dsr1_sampling s = plain(cfg[ci].t);
            s.top_p = cfg[ci].p;
            s.top_k = cfg[ci].k;
            s.min_p = cfg[ci].mp;
            int n = ref_kept(l, V, &s, kept);
            dsr1_sampler_probs(l, V, &s, NULL, 0, p, scratch);
            int diff = 0, cnt = 0;
            double sum = 0;
            for (int i = 0; i < V; i++) {
                diff += (p[i] > 0) != kept[i];
                cnt += p[i] > 0;
                sum += p[i];
            }
            CHECKF(diff == 0 && cnt == n, "spread %g cfg %d: %d differ, kept %d vs %d",
                   spread[si], ci, diff, cnt, n);
            CHECK_NEAR(sum, 1.0, 1e-4);
        }
    }
    free(l), free(p), free(kept), free(scratch);
}

DSR1_TEST(sampler_chi_square_frequencies)
{
    /* 8 outcomes, 200k draws through dsr1_sampler_sample at temperature 1.
     * Pearson's statistic with 7 degrees of freedom; 24.32 is the 0.999
     * quantile, so a correct sampler fails with probability 1e-3 (and with
     * the fixed seed, deterministically never). A sampler off by even 1%
     * on one outcome of mass 0.3 scores about 70. */
    double d[8] = {0.3, 0.2, 0.15, 0.1, 0.1, 0.08, 0.05, 0.02};
    float l[8];
    logits_of(d, 8, l);
    dsr1_sampling s = plain(1);
    float scratch[8 * 3];
    dsr1_rng r;
    dsr1_rng_seed(&r, 12345);
    enum { N = 200000 };
    long count[8] = {0};
    for (int i = 0; i < N; i++) count[dsr1_sampler_sample(l, 8, &s, NULL, 0, &r, scratch)]++;
    double chi = 0;
    for (int i = 0; i < 8; i++) chi += (count[i] - N * d[i]) * (count[i] - N * d[i]) / (N * d[i]);
    CHECKF(chi < 24.32, "chi-square %.2f >= 24.32 (7 dof, p = 0.001)", chi);
    /* And the truncated case: top-k 3 gives 0.3/0.65, 0.2/0.65, 0.15/0.65. */
    s.top_k = 3;
    long c3[8] = {0};
    for (int i = 0; i < N; i++) c3[dsr1_sampler_sample(l, 8, &s, NULL, 0, &r, scratch)]++;
    double chi3 = 0;
    for (int i = 0; i < 3; i++) {
        double e = N * d[i] / 0.65;
        chi3 += (c3[i] - e) * (c3[i] - e) / e;
    }
    for (int i = 3; i < 8; i++) CHECK_EQ_INT(c3[i], 0);
    CHECKF(chi3 < 13.82, "chi-square %.2f >= 13.82 (2 dof, p = 0.001)", chi3);
}

DSR1_TEST(sampler_presence_frequency_penalties)
{
    /* OpenAI's formula: logit[j] -= freq * count[j] + presence * (count[j] > 0). */
    float l[5] = {1.0f, 2.0f, -1.0f, 0.5f, 3.0f};
    int32_t out[6] = {1, 1, 4, 1, 7, -3}; /* 7 and -3 are out of the vocabulary */
    dsr1_sampling s = plain(1);
    s.presence_penalty = 0.5f;
    s.frequency_penalty = 0.25f;
    void *scratch = malloc(dsr1_sampler_scratch_size(5));
    memset(scratch, 0x5a, dsr1_sampler_scratch_size(5)); /* counts must not trust it */
    dsr1_sampler_penalize(l, 5, &s, out, 6, scratch);
    CHECK_NEAR(l[0], 1.0, 0);
    CHECK_NEAR(l[1], 2.0 - 0.25 * 3 - 0.5, 1e-6);
    CHECK_NEAR(l[2], -1.0, 0);
    CHECK_NEAR(l[3], 0.5, 0);
    CHECK_NEAR(l[4], 3.0 - 0.25 - 0.5, 1e-6);
    /* Negative values favour repeats; zero penalties change nothing. */
    float m[3] = {0, 0, 0};
    int32_t o2[2] = {2, 2};
    s.presence_penalty = -1;
    s.frequency_penalty = 0;
    dsr1_sampler_penalize(m, 3, &s, o2, 2, scratch);
    CHECK_NEAR(m[2], 1.0, 0);
    CHECK_NEAR(m[0], 0.0, 0);
    s.presence_penalty = 0;
    dsr1_sampler_penalize(m, 3, &s, o2, 2, scratch);
    CHECK_NEAR(m[2], 1.0, 0);
    /* Greedy after the penalty: the repeated argmax loses to the runner-up. */
    float g[3] = {2.0f, 2.5f, 0.0f};
    int32_t o3[1] = {1};
    s.presence_penalty = 1.0f;
    dsr1_sampler_penalize(g, 3, &s, o3, 1, scratch);
    dsr1_sampling gs = plain(0);
    dsr1_rng r;
    dsr1_rng_seed(&r, 1);
    CHECK_EQ_INT(dsr1_sampler_sample(g, 3, &gs, NULL, 0, &r, scratch), 0);
    free(scratch);
}

DSR1_TEST(sampler_logprobs_exact)
{
    float l[6] = {0.0f, 2.0f, NAN, 1.0f, 2.0f, -INFINITY};
    double z = exp(0.0) + exp(2.0) + exp(1.0) + exp(2.0);
    int32_t ids[DSR1_MAX_TOP_LOGPROBS];
    float lp[DSR1_MAX_TOP_LOGPROBS];
    float x = dsr1_sampler_logprobs(l, 6, 3, 3, ids, lp);
    CHECK_NEAR(x, 1.0 - log(z), 1e-6);
    CHECK_EQ_INT(ids[0], 1); /* tie 2.0 / 2.0: the lower id first */
    CHECK_EQ_INT(ids[1], 4);
    CHECK_EQ_INT(ids[2], 3);
    CHECK_NEAR(lp[0], 2.0 - log(z), 1e-6);
    CHECK_NEAR(lp[2], 1.0 - log(z), 1e-6);
    CHECK(dsr1_sampler_logprobs(l, 6, 2, 0, ids, lp) == -INFINITY); /* NaN: -inf */
    /* k is capped at 20 and at the vocabulary. */
    float big[30];
    for (int i = 0; i < 30; i++) big[i] = (float)i;
    dsr1_sampler_logprobs(big, 30, 0, 99, ids, lp);
    CHECK_EQ_INT(ids[0], 29);
    CHECK_EQ_INT(ids[19], 10);
    double sum = 0;
    for (int i = 0; i < 30; i++) sum += exp(dsr1_sampler_logprobs(big, 30, i, 0, ids, lp));
    CHECK_NEAR(sum, 1.0, 1e-5);
}
