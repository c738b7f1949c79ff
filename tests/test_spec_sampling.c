/*
 * test_spec_sampling.c - speculative decoding's arithmetic (core/spec.c)
 * and its promise under sampling: the tokens are distributed as plain
 * sampling from the main model.
 *
 *  - the expected-tokens model, the draft confidence and the adaptive
 *    policy's reactions;
 *  - rejection sampling on a fixed p and q (and one-hot and equal q) gives
 *    exactly p (chi-square over 200k draws) with acceptance sum min(p, q);
 *  - through the engine, on a 16-token vocabulary model with an MTP layer:
 *    the first three tokens over many seeds against the exact joint
 *    distribution computed by enumeration with one-shot forwards
 *    (chi-square of the (t1, t2) and (t2, t3) pairs, 0.1% level, fixed
 *    seeds so the result is repeatable), plain sampling as a control, and
 *    the test's power: the distribution of a decoder that accepted every
 *    draft is rejected by a wide margin.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/engine.h"
#include "core/spec.h"
#include "test.h"

dsr1_model *dsr1_test_spec_open(dsr1_test_ctx *t, const char *path, dsr1_compute c);
const char *dsr1_test_gen_model(const char *name, const char *args);
dsr1_engine *dsr1_test_spec_engine(dsr1_test_ctx *t, dsr1_model *m, int spec, int max_seqs,
                                   int ctx);

/* ---- the arithmetic ------------------------------------------------------------- */

DSR1_TEST(spec_expected_tokens)
{
    CHECK_NEAR(dsr1_spec_expected_tokens(0.5, 1), 1.5, 1e-12);
    CHECK_NEAR(dsr1_spec_expected_tokens(0.8, 3), 1 + 0.8 + 0.64 + 0.512, 1e-12);
    CHECK_NEAR(dsr1_spec_expected_tokens(0.0, 4), 1.0, 1e-12);
    CHECK_NEAR(dsr1_spec_expected_tokens(1.0, 4), 5.0, 1e-12);
    CHECK_NEAR(dsr1_spec_expected_tokens(0.9, 0), 1.0, 1e-12);
}

DSR1_TEST(spec_confidence_and_policy)
{
    float l[4] = {0, 0, 0, 0};
    CHECK_NEAR(dsr1_spec_confidence(l, 4), 0.25, 1e-6);
    float l2[3] = {-INFINITY, 2.0f, NAN};
    CHECK_NEAR(dsr1_spec_confidence(l2, 3), 1.0, 1e-6);
    float l3[2] = {-INFINITY, -INFINITY};
    CHECK_NEAR(dsr1_spec_confidence(l3, 2), 0.0, 0);
    dsr1_spec_track tr;
    dsr1_spec_track_init(&tr);
    dsr1_spec_costs c = {.row = 0.55f, .draft = 0.05f}; /* about R1's */
    float chain = 1;
    CHECK(dsr1_spec_keep(&tr, 0.99f, &chain, &c));    /* confident draft, good record */
    CHECK(!dsr1_spec_keep(&tr, 0.05f, &chain, &c));   /* unsure: stop */
    for (int i = 0; i < 20; i++) dsr1_spec_track_update(&tr, 3, 0);
    CHECK(tr.ema < 0.01f);
    chain = 1;
    CHECK(!dsr1_spec_keep(&tr, 0.99f, &chain, &c));   /* drafts keep failing: stop */
    float low = tr.ema;
    for (int i = 0; i < 40; i++) dsr1_spec_track_update(&tr, 0, 0);
    CHECK(tr.ema > low + 0.3f);                  /* without drafts it recovers */
    for (int i = 0; i < 20; i++) dsr1_spec_track_update(&tr, 2, 2);
    CHECK(tr.ema > 0.99f);
}

/* The costs in the policy: a draft is made only when its expected
 * acceptance pays for its MTP forward and its verify row. */
DSR1_TEST(spec_policy_costs)
{
    dsr1_spec_track tr;
    dsr1_spec_track_init(&tr); /* ema at the prior, 0.7 */
    dsr1_spec_costs r1 = {.row = 0.55f, .draft = 0.07f}, small = {.row = 0.05f, .draft = 0.9f};
    CHECK(dsr1_spec_try(&tr, &r1));
    CHECK(!dsr1_spec_try(&tr, &small)); /* a draft costing 0.95 step: never at 0.7 */
    for (int i = 0; i < 20; i++) dsr1_spec_track_update(&tr, 0, 0); /* drift holds it at 0.7 */
    CHECK(!dsr1_spec_try(&tr, &small));
    for (int i = 0; i < 20; i++) dsr1_spec_track_update(&tr, 2, 2); /* even at ~1.0 */
    CHECK(dsr1_spec_try(&tr, &small) == (tr.ema >= 0.95f));
    /* a kept draft needs only its row (its forward is paid), the next one
     * both: with the record at ~1, chains of 0.9 and 0.6 */
    float chain = 1;
    CHECK(dsr1_spec_keep(&tr, 0.81f, &chain, &r1) && chain > 0.89f && chain < 0.91f);
    CHECK(dsr1_spec_more(&tr, chain, &r1));
    CHECK(!dsr1_spec_more(&tr, 0.6f, &r1));
    CHECK(dsr1_spec_keep(&tr, 0.36f, &chain, &r1) == (chain >= 0.55f));
    /* costs above the prior: a fresh track never tries, so none ever does */
    CHECK(!dsr1_spec_never(&r1) && dsr1_spec_never(&small));
    dsr1_spec_costs edge = {.row = 0.35f, .draft = 0.35f}, nan = {.row = NAN, .draft = 0};
    CHECK(!dsr1_spec_never(&edge) && dsr1_spec_never(&nan));
}

/* Steps a track sits out before its next attempt. */
static int sits_out(dsr1_spec_track *tr)
{
    dsr1_spec_costs free_drafts = {0, 0};
    int n = 0;
    while (!dsr1_spec_try(tr, &free_drafts) && n < 100) n++;
    return n;
}

DSR1_TEST(spec_backoff)
{
    dsr1_spec_track tr;
    dsr1_spec_track_init(&tr);
    CHECK_EQ_INT(sits_out(&tr), 0);
    dsr1_spec_track_declined(&tr); /* unsure drafts: 1, 2, 4 steps out */
    CHECK_EQ_INT(sits_out(&tr), 1);
    dsr1_spec_track_declined(&tr);
    CHECK_EQ_INT(sits_out(&tr), 2);
    dsr1_spec_track_declined(&tr);
    CHECK_EQ_INT(sits_out(&tr), 4);
    dsr1_spec_track_update(&tr, 3, 1); /* an accepted draft ends it */
    CHECK_EQ_INT(sits_out(&tr), 0);
    dsr1_spec_track_update(&tr, 3, 0); /* one rejection at a good average: none */
    CHECK_EQ_INT(sits_out(&tr), 0);
    for (int i = 0; i < 20; i++) dsr1_spec_track_update(&tr, 3, 0);
    CHECK_EQ_INT(sits_out(&tr), 32); /* drafts that never work: capped */
}

/* Chi-square statistic of counts against probabilities, pooling cells
 * whose expectation is under 5; *df receives the degrees of freedom. */
static double chi2(const long *cnt, const double *p, int n, long total, int *df)
{
    double x = 0, pool_e = 0, pool_o = 0;
    int cells = 0;
    *df = 0;
    for (int i = 0; i < n; i++) {
        double e = p[i] * (double)total;
        if (e < 5) {
            pool_e += e;
            pool_o += (double)cnt[i];
            if (e == 0 && cnt[i] > 0) return INFINITY; /* an impossible outcome */
            continue;
        }
        x += (cnt[i] - e) * (cnt[i] - e) / e;
        cells++;
    }
    if (pool_e >= 5) {
        x += (pool_o - pool_e) * (pool_o - pool_e) / pool_e;
        cells++;
    } else if (pool_o > 2 * pool_e + 10) {
        return INFINITY;
    }
    *df = cells - 1;
    return x;
}

/* Upper 0.1% point of chi-square with df degrees (Wilson-Hilferty). */
static double chi2_crit(int df)
{
    double d = df > 0 ? df : 1, z = 3.09, a = 2.0 / (9.0 * d);
    return d * pow(1 - a + z * sqrt(a), 3);
}

/* Draft x ~ q, accept/residual against p: the result is distributed as p.
 * Also with a one-hot q (q NULL), and when q == p (always accepted). */
DSR1_TEST(spec_rejection_sampling_is_lossless)
{
    const double pp[5] = {0.5, 0.2, 0.15, 0.1, 0.05};
    const float p[5] = {0.5f, 0.2f, 0.15f, 0.1f, 0.05f}, q[5] = {0.05f, 0.1f, 0.15f, 0.3f, 0.4f};
    dsr1_rng rng;
    dsr1_rng_seed(&rng, 42);
    for (int mode = 0; mode < 3; mode++) {
        long cnt[5] = {0}, acc = 0, N = 200000;
        const float *qq = mode == 0 ? q : mode == 1 ? NULL : p;
        for (long i = 0; i < N; i++) {
            int32_t x = mode == 1 ? 3 : dsr1_sampler_draw(qq, 5, &rng);
            float work[5];
            memcpy(work, p, sizeof work);
            if (dsr1_spec_accept(work, qq, x, &rng)) {
                cnt[x]++;
                acc++;
            } else {
                cnt[dsr1_spec_residual(work, qq, x, 5, &rng)]++;
            }
        }
        int df;
        double x2 = chi2(cnt, pp, 5, N, &df);
        CHECKF(x2 < chi2_crit(df), "mode %d: chi2 %.1f (df %d)", mode, x2, df);
        /* acceptance = sum min(p, q): 0.05+0.1+0.15+0.1+0.05, p[3], 1 */
        double want = mode == 0 ? 0.45 : mode == 1 ? 0.1 : 1.0;
        CHECK_NEAR((double)acc / N, want, 0.01);
    }
}

/* ---- sampling: the main model's distribution -------------------------------------- */

#define SV 16                 /* vocabulary of the model */
#define NONE SV               /* "no token": the sequence ended at EOS */
#define NS_PROMPT 6

typedef struct dist {
    double p1[SV], p2[SV][SV], p3[SV][SV][SV]; /* exact conditionals */
    double q2[SV][SV];        /* the MTP draft's distribution of t2 given t1 */
} dist;

static void probs_of(const float *logits, const dsr1_sampling *sp, double *out, void *scratch)
{
    float pr[SV];
    dsr1_sampler_probs(logits, SV, sp, NULL, 0, pr, scratch);
    for (int i = 0; i < SV; i++) out[i] = pr[i];
}

/* Exact P(t1), P(t2|t1), P(t3|t1,t2) by enumeration with one-shot
 * forwards, and the draft's own q(t2|t1) (for the power check). */
static int enumerate(dsr1_model *m, const int32_t *prompt, const dsr1_sampling *sp, dist *d,
                     dsr1_error *err)
{
    int32_t ids[NS_PROMPT + 2];
    float lg[(NS_PROMPT + 2) * SV];
    void *scratch = malloc(dsr1_sampler_scratch_size(SV));
    memcpy(ids, prompt, sizeof(int32_t) * NS_PROMPT);
    int n = NS_PROMPT, rc = dsr1_model_forward(m, ids, (size_t)n, NULL, 0, DSR1_OUT_LOGITS, lg, err);
    if (!rc) probs_of(lg + (n - 1) * SV, sp, d->p1, scratch);
    for (int a = 0; a < SV && !rc; a++) {
        ids[n] = a;
        rc = dsr1_model_forward(m, ids, (size_t)n + 1, NULL, 0, DSR1_OUT_MTP, lg, err);
        if (!rc) probs_of(lg + (n - 1) * SV, sp, d->q2[a], scratch);
        for (int b = 0; b < SV && !rc; b++) {
            ids[n + 1] = b;
            rc = dsr1_model_forward(m, ids, (size_t)n + 2, NULL, 0, DSR1_OUT_LOGITS, lg, err);
            if (!rc && b == 0) probs_of(lg + n * SV, sp, d->p2[a], scratch);
            if (!rc) probs_of(lg + (n + 1) * SV, sp, d->p3[a][b], scratch);
        }
    }
    free(scratch);
    return rc;
}

/* Generate t1..t3 for seeds 1..N (16 sequences at a time); counts of the
 * joint outcome [t1][t2][t3] with NONE after EOS. */
static void sample_many(dsr1_test_ctx *t, dsr1_model *m, int spec, const int32_t *prompt,
                        const dsr1_sampling *sp, int N, long *cnt, dsr1_seq_stats *tot)
{
    dsr1_engine *e = dsr1_test_spec_engine(t, m, spec, 16, 32);
    if (!e) return;
    dsr1_event *ev = calloc(dsr1_engine_max_events(e), sizeof *ev);
    int32_t got[256][3];
    int ngot[256] = {0}, next = 1, done = 0, live = 0;
    dsr1_error err;
    while (done < N) {
        while (live < 16 && next <= N) {
            dsr1_request r = {.prompt = prompt, .n_prompt = NS_PROMPT, .max_tokens = 4,
                              .reuse_seq = -1, .sampling = *sp};
            r.sampling.seed = (uint64_t)next++;
            int id;
            REQUIRE(dsr1_engine_submit(e, &r, &id, &err) == 0 && id < 256);
            ngot[id] = 0;
            live++;
        }
        size_t n;
        REQUIRE(dsr1_engine_step(e, ev, &n, &err) == 0);
        for (size_t i = 0; i < n; i++) {
            int id = ev[i].seq;
            if (ev[i].token >= 0 && ngot[id] < 3) got[id][ngot[id]++] = ev[i].token;
            if (!ev[i].finish) continue;
            dsr1_seq_stats st;
            dsr1_engine_seq_stats(e, id, &st);
            tot->spec_drafted += st.spec_drafted;
            tot->spec_accepted += st.spec_accepted;
            while (ngot[id] < 3) got[id][ngot[id]++] = NONE;
            cnt[(got[id][0] * (SV + 1) + got[id][1]) * (SV + 1) + got[id][2]]++;
            dsr1_engine_release(e, id);
            live--;
            done++;
        }
    }
    free(ev);
    dsr1_engine_free(e);
}

/* Exact joint P[t1][t2][t3] (NONE after EOS) from the conditionals; with
 * use_q the t2 conditional is the draft's instead (a decoder that accepted
 * every draft would produce that). */
static void joint(const dist *d, int eos, int use_q, double *P)
{
    const int W = SV + 1;
    memset(P, 0, sizeof(double) * W * W * W);
    for (int a = 0; a < SV; a++) {
        if (a == eos) {
            P[(a * W + NONE) * W + NONE] += d->p1[a];
            continue;
        }
        for (int b = 0; b < SV; b++) {
            double pab = d->p1[a] * (use_q ? d->q2[a][b] : d->p2[a][b]);
            if (b == eos) {
                P[(a * W + b) * W + NONE] += pab;
                continue;
            }
            for (int c = 0; c < SV; c++) P[(a * W + b) * W + c] += pab * d->p3[a][b][c];
        }
    }
}

/* Chi-square of the (t2, t3) pair and of the (t1, t2) pair. */
static void pair_stats(const long *cnt, const double *P, long N, double x2[2], int df[2])
{
    const int W = SV + 1;
    long c23[W * W], c12[W * W];
    double p23[W * W], p12[W * W];
    memset(c23, 0, sizeof c23);
    memset(c12, 0, sizeof c12);
    memset(p23, 0, sizeof p23);
    memset(p12, 0, sizeof p12);
    for (int a = 0; a < W; a++)
        for (int b = 0; b < W; b++)
            for (int c = 0; c < W; c++) {
                int i = (a * W + b) * W + c;
                c23[b * W + c] += cnt[i];
                p23[b * W + c] += P[i];
                c12[a * W + b] += cnt[i];
                p12[a * W + b] += P[i];
            }
    x2[0] = chi2(c23, p23, W * W, N, &df[0]);
    x2[1] = chi2(c12, p12, W * W, N, &df[1]);
}

static void sampling_case(dsr1_test_ctx *t, dsr1_model *m, const dsr1_sampling *sp, int N,
                          int with_plain)
{
    static const int32_t prompt[NS_PROMPT] = {3, 9, 14, 5, 7, 12};
    const int W = SV + 1, eos = dsr1_model_config(m)->eos_token_id;
    dist *d = calloc(1, sizeof *d);
    double *P = calloc((size_t)W * W * W, sizeof *P), *Pq = calloc((size_t)W * W * W, sizeof *Pq);
    long *cs = calloc((size_t)W * W * W, sizeof *cs), *cp = calloc((size_t)W * W * W, sizeof *cp);
    dsr1_error err;
    REQUIRE(d && P && Pq && cs && cp);
    CHECK_OK(enumerate(m, prompt, sp, d, &err), &err);
    joint(d, eos, 0, P);
    joint(d, eos, 1, Pq);
    dsr1_seq_stats ts = {0}, tp = {0};
    sample_many(t, m, 2, prompt, sp, N, cs, &ts);
    if (with_plain) sample_many(t, m, 0, prompt, sp, N, cp, &tp);
    double xs[2], xp[2], xq[2];
    int ds[2], dp[2], dq[2];
    pair_stats(cs, P, N, xs, ds);
    pair_stats(cp, P, N, xp, dp);
    pair_stats(cs, Pq, N, xq, dq);
    for (int k = 0; k < 2; k++) {
        CHECKF(xs[k] < chi2_crit(ds[k]), "speculative, pair %d: chi2 %.1f, df %d (limit %.1f)",
               k, xs[k], ds[k], chi2_crit(ds[k]));
        CHECKF(!with_plain || xp[k] < chi2_crit(dp[k]), "plain, pair %d: chi2 %.1f, df %d", k,
               xp[k], dp[k]);
    }
    /* power: the distribution of a decoder that took every draft is
     * told apart (t2 from the draft's q instead of p) */
    CHECKF(xq[1] > 3 * chi2_crit(dq[1]), "against q: chi2 %.1f, df %d", xq[1], dq[1]);
    /* both outcomes of the acceptance test happened many times */
    CHECK(ts.spec_drafted > N && ts.spec_accepted > N / 10 &&
          ts.spec_accepted < ts.spec_drafted - N / 10);
    CHECK_EQ_INT(tp.spec_drafted, 0);
    free(d);
    free(P);
    free(Pq);
    free(cs);
    free(cp);
}

DSR1_TEST(spec_sampling_distribution)
{
    dsr1_model *m = dsr1_test_spec_open(t, dsr1_test_gen_model("spec_v16", "--preset tiny --vocab 16 --seed 7"),
                              DSR1_COMPUTE_FAST);
    if (!m) return;
    dsr1_sampling sp;
    dsr1_sampling_default(&sp);
    sp.temperature = 1.0f;
    sp.top_p = 1.0f;
    sampling_case(t, m, &sp, 1500, 1);
    sp.temperature = 0.7f;
    sp.top_k = 6;
    sp.top_p = 0.9f;
    sampling_case(t, m, &sp, 1000, 0);
    dsr1_model_close(m);
}
