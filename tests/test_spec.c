/*
 * test_spec.c - speculative decoding with the MTP layer (core/spec.c,
 * core/engine_spec.c, verify in core/engine.c); the arithmetic and the
 * sampled distribution are in test_spec_sampling.c.
 *
 * What is checked, and against what:
 *  - greedy output is token for token the same with speculation off, fixed
 *    draft lengths and the adaptive mode, on the tiny fixture (both compute
 *    paths) and on generated checkpoints (other seeds, BF16 weights; a V2
 *    model without MTP runs without speculating);
 *  - with forced drafts (the engine's override hook feeding a recorded
 *    greedy trajectory with mismatches at chosen positions) acceptance goes
 *    from 0% to 100%, three sequences with different patterns in one engine
 *    give what each gives alone, and the stats count what happened;
 *  - after steps with rejections every verify logit of an accepted position
 *    equals the plain one-shot forward's bit for bit, and the KV cache (main
 *    layers and the MTP layer) equals a reference cache filled by plain
 *    forwards over the accepted tokens;
 *  - the adaptive mode's back-off runs no MTP rows while it sits out, and
 *    the lagged MTP rows, caught up in one batch, equal the reference;
 *  - limits: max_tokens, stop ids inside accepted drafts, the context end,
 *    bad spec_draft values, export/import of the MTP rows.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/engine.h"
#include "core/spec.h"
#include "be_util.h"
#include "test.h"

const char *dsr1_test_tiny_model(void);
/* Shared with test_spec_sampling.c. */
dsr1_model *dsr1_test_spec_open(dsr1_test_ctx *t, const char *path, dsr1_compute c);
const char *dsr1_test_gen_model(const char *name, const char *args);
dsr1_engine *dsr1_test_spec_engine(dsr1_test_ctx *t, dsr1_model *m, int spec, int max_seqs,
                                   int ctx);

static const int32_t p0[8] = {572, 1474, 524, 2028, 913, 980, 1034, 1194};
static const int32_t p1[5] = {1935, 1281, 1402, 1837, 1185};
static const int32_t p2[11] = {1589, 1707, 463, 116, 616, 585, 1789, 1869, 13, 1025, 1682};

#define MAXTOK 160

typedef struct out_seq {
    int32_t tok[MAXTOK];
    int n;
    dsr1_finish finish;
    dsr1_seq_stats st;
} out_seq;

/* ---- models ---------------------------------------------------------------- */

dsr1_model *dsr1_test_spec_open(dsr1_test_ctx *t, const char *path, dsr1_compute c)
{
    if (!path) {
        dsr1_test_skip(t, "model could not be built");
        return NULL;
    }
    char why[256];
    if (!dsr1_test_backend_usable(dsr1_test_backend(), why, sizeof why)) {
        dsr1_test_skip(t, "backend %s: %s", dsr1_test_backend(), why);
        return NULL;
    }
    dsr1_model *m = NULL;
    dsr1_error err;
    dsr1_model_options o = {.compute = c, .threads = 2, .backend = dsr1_test_backend(),
                            .deterministic = 1}; /* bit-exact batch invariance */
    CHECK_OK(dsr1_model_open(&m, path, &o, &err), &err);
    return m;
}

/* gen_ckpt ARGS, converted to TMPDIR/NAME.dsr1 once per run; NULL on failure. */
const char *dsr1_test_gen_model(const char *name, const char *args)
{
    static char paths[8][1024], names[8][64];
    static int n;
    for (int i = 0; i < n; i++)
        if (!strcmp(names[i], name)) return paths[i][0] ? paths[i] : NULL;
    if (n == 8) return NULL;
    const char *b = getenv("BUILD");
    char out[2048], *p = paths[n];
    snprintf(names[n++], sizeof names[0], "%s", name);
    snprintf(p, sizeof paths[0], "%s/%s.dsr1", dsr1_test_tmpdir(), name);
    int rc = dsr1_test_sh(out, sizeof out,
                          "'%s/gen_ckpt' --out '%s/%s.ck' %s && '%s' convert '%s/%s.ck' -o '%s' "
                          "&& rm -rf '%s/%s.ck'",
                          b ? b : "build", dsr1_test_tmpdir(), name, args, dsr1_test_binary(),
                          dsr1_test_tmpdir(), name, p, dsr1_test_tmpdir(), name);
    if (rc != 0) {
        fprintf(stderr, "  (%s: %.300s)\n", name, out);
        p[0] = 0;
        return NULL;
    }
    return p;
}

/* ---- engine helpers ------------------------------------------------------------ */

dsr1_engine *dsr1_test_spec_engine(dsr1_test_ctx *t, dsr1_model *m, int spec, int max_seqs, int ctx)
{
    dsr1_engine_options o;
    dsr1_engine_options_default(&o);
    o.max_seqs = max_seqs;
    o.ctx = ctx;
    o.prefill_chunk = 64;
    o.spec_draft = spec;
    /* The adaptive policy at R1's costs (a verify row about half a step,
     * drafts nearly free): on this tiny model's own, vocabulary-head
     * dominated costs it would never draft (spec_adaptive_costs). */
    o.spec_row_cost = 0.55f;
    o.spec_draft_cost = 0;
    dsr1_engine *e = NULL;
    dsr1_error err;
    CHECK_OK(dsr1_engine_create(&e, m, &o, &err), &err);
    return e;
}

static int submit(dsr1_engine *e, const int32_t *p, size_t n, int max_tokens, float temp,
                  uint64_t seed)
{
    dsr1_request r = {.prompt = p, .n_prompt = n, .max_tokens = max_tokens, .reuse_seq = -1};
    r.sampling.temperature = temp;
    r.sampling.top_p = 1;
    r.sampling.repetition_penalty = 1;
    r.sampling.seed = seed;
    int seq = -1;
    dsr1_error err;
    return dsr1_engine_submit(e, &r, &seq, &err) ? -1 : seq;
}

/* Step until nothing is pending, collecting tokens and final stats. */
static void drain(dsr1_test_ctx *t, dsr1_engine *e, out_seq *o, int n_o)
{
    dsr1_event *ev = calloc(dsr1_engine_max_events(e), sizeof *ev);
    dsr1_error err;
    for (int guard = 0; ev && dsr1_engine_pending(e) > 0 && guard < 2000; guard++) {
        size_t n;
        if (dsr1_engine_step(e, ev, &n, &err)) {
            dsr1_test_fail(t, __FILE__, __LINE__, "step: %s", err.msg);
            break;
        }
        CHECK(n <= dsr1_engine_max_events(e));
        for (size_t i = 0; i < n; i++) {
            if (ev[i].seq < 0 || ev[i].seq >= n_o) continue;
            out_seq *s = &o[ev[i].seq];
            if (ev[i].token >= 0 && s->n < MAXTOK) s->tok[s->n++] = ev[i].token;
            if (ev[i].finish) {
                s->finish = ev[i].finish;
                dsr1_engine_seq_stats(e, ev[i].seq, &s->st);
            }
        }
    }
    free(ev);
}

static void run_alone(dsr1_test_ctx *t, dsr1_model *m, int spec, const int32_t *p, size_t n,
                      int max, out_seq *o)
{
    memset(o, 0, sizeof *o);
    dsr1_engine *e = dsr1_test_spec_engine(t, m, spec, 2, 96);
    if (!e) return;
    out_seq all[16];
    memset(all, 0, sizeof all);
    int s = submit(e, p, n, max, 0, 0);
    drain(t, e, all, 16);
    if (s >= 0) *o = all[s];
    dsr1_engine_free(e);
}

static int same(const out_seq *a, const out_seq *b)
{
    return a->n == b->n && a->finish == b->finish &&
           !memcmp(a->tok, b->tok, (size_t)a->n * sizeof *a->tok);
}

/* ---- greedy: identical tokens ---------------------------------------------------- */

static void greedy_same(dsr1_test_ctx *t, dsr1_model *m, int expect_spec)
{
    const int32_t *ps[3] = {p0, p1, p2};
    const size_t ns[3] = {8, 5, 11};
    const int V = dsr1_model_config(m)->vocab_size;
    int32_t pr[3][11];
    for (int i = 0; i < 3; i++)
        for (size_t j = 0; j < ns[i]; j++) pr[i][j] = ps[i][j] % V;
    const int specs[4] = {-1, 1, 3, 8};
    int drafted = 0;
    for (int i = 0; i < 3; i++) {
        out_seq plain, sp;
        run_alone(t, m, 0, pr[i], ns[i], 24, &plain);
        CHECK(plain.n > 0);
        CHECK_EQ_INT(plain.st.spec_steps, 0);
        for (int k = 0; k < 4; k++) {
            run_alone(t, m, specs[k], pr[i], ns[i], 24, &sp);
            CHECKF(same(&plain, &sp), "prompt %d, spec_draft %d: %d vs %d tokens", i, specs[k],
                   sp.n, plain.n);
            drafted += sp.st.spec_drafted;
            if (expect_spec) CHECK(sp.st.spec_steps > 0 || plain.n == 1);
            else CHECK_EQ_INT(sp.st.spec_steps, 0);
        }
    }
    if (expect_spec) CHECK(drafted > 0);
    /* all three at once, fixed and adaptive drafts */
    for (int k = 0; k < 2; k++) {
        dsr1_engine *e = dsr1_test_spec_engine(t, m, k ? 3 : -1, 4, 96);
        if (!e) return;
        out_seq got[16], solo;
        memset(got, 0, sizeof got);
        int s[3];
        for (int i = 0; i < 3; i++) s[i] = submit(e, pr[i], ns[i], 24, 0, 0);
        drain(t, e, got, 16);
        for (int i = 0; i < 3; i++) {
            run_alone(t, m, 0, pr[i], ns[i], 24, &solo);
            CHECKF(s[i] >= 0 && same(&got[s[i]], &solo), "batched prompt %d", i);
        }
        dsr1_engine_free(e);
    }
}

DSR1_TEST(spec_greedy_same_tokens_tiny)
{
    for (int c = 0; c < 2; c++) {
        dsr1_model *m = dsr1_test_spec_open(t, dsr1_test_tiny_model(), c ? DSR1_COMPUTE_F32 : DSR1_COMPUTE_FAST);
        if (!m) return;
        greedy_same(t, m, 1);
        dsr1_model_close(m);
    }
}

DSR1_TEST(spec_greedy_same_tokens_generated)
{
    static const char *const cases[][3] = {
        {"spec_s2", "--preset tiny --seed 2", "1"},
        {"spec_s3_bf16", "--preset tiny --seed 3 --dtype bf16", "1"},
        {"spec_v2", "--preset tiny --family v2 --seed 4", "0"},
        {"spec_nomtp", "--preset tiny --no-mtp --seed 5", "0"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        dsr1_model *m = dsr1_test_spec_open(t, dsr1_test_gen_model(cases[i][0], cases[i][1]), DSR1_COMPUTE_FAST);
        if (!m) return;
        greedy_same(t, m, cases[i][2][0] == '1');
        dsr1_model_close(m);
    }
}

/* ---- forced drafts ------------------------------------------------------------- */

/* Draft patterns over a recorded greedy trajectory: the draft for token
 * index i is traj[i], or a wrong token where miss(i). */
typedef struct pattern {
    const int32_t *traj; /* prompt + greedy continuation */
    int n;
    int every;           /* miss when i % every == 0 (1: always, 0: never) */
} pattern;

typedef struct forced {
    pattern pat[16];     /* by engine sequence id */
    int vocab;
    int off_track;       /* calls whose known tokens left the trajectory */
} forced;

static int force_drafts(void *ctx, int seq, const int32_t *tokens, int n_tokens, int32_t *draft,
                        int max_draft)
{
    forced *f = ctx;
    const pattern *p = &f->pat[seq];
    if (!p->traj || n_tokens > p->n || memcmp(tokens, p->traj, (size_t)n_tokens * 4)) {
        f->off_track++;
        return 0;
    }
    int n = 0;
    for (; n < max_draft && n_tokens + n < p->n; n++) {
        int i = n_tokens + n;
        int miss = p->every == 1 || (p->every > 1 && i % p->every == 0);
        draft[n] = miss ? (p->traj[i] + 1) % f->vocab : p->traj[i];
    }
    return n;
}

/* Greedy trajectory of a prompt (prompt + max generated tokens). */
static int trajectory(dsr1_test_ctx *t, dsr1_model *m, const int32_t *p, int np, int max,
                      int32_t *traj)
{
    out_seq o;
    run_alone(t, m, 0, p, (size_t)np, max, &o);
    memcpy(traj, p, (size_t)np * 4);
    memcpy(traj + np, o.tok, (size_t)o.n * 4);
    return np + o.n;
}

/* Three sequences, all drafts right / all wrong / every third wrong, in
 * one engine with k = 3: each gives the plain tokens, and acceptance is
 * 100%, 0% and in between. Alone, each gives the same again. */
DSR1_TEST(spec_forced_drafts_batch)
{
    dsr1_model *m = dsr1_test_spec_open(t, dsr1_test_tiny_model(), DSR1_COMPUTE_FAST);
    if (!m) return;
    static int32_t tr[3][64];
    int nt[3] = {trajectory(t, m, p0, 8, 30, tr[0]), trajectory(t, m, p1, 5, 30, tr[1]),
                 trajectory(t, m, p2, 11, 30, tr[2])};
    const int every[3] = {0, 1, 3}, np[3] = {8, 5, 11};
    forced f = {.vocab = 2048};
    dsr1_engine *e = dsr1_test_spec_engine(t, m, 3, 4, 96);
    REQUIRE(e);
    dsr1_engine_set_draft_override(e, force_drafts, &f);
    out_seq got[16];
    memset(got, 0, sizeof got);
    int s[3];
    for (int i = 0; i < 3; i++) {
        s[i] = submit(e, tr[i], (size_t)np[i], 30, 0, 0);
        REQUIRE(s[i] >= 0 && s[i] < 16);
        f.pat[s[i]] = (pattern){.traj = tr[i], .n = nt[i], .every = every[i]};
    }
    drain(t, e, got, 16);
    for (int i = 0; i < 3; i++) {
        const out_seq *g = &got[s[i]];
        CHECKF(g->n == nt[i] - np[i] && !memcmp(g->tok, tr[i] + np[i], (size_t)g->n * 4),
               "sequence %d differs from its plain trajectory", i);
        CHECK(g->st.spec_drafted > 0);
    }
    CHECK_EQ_INT(f.off_track, 0);
    const dsr1_seq_stats *a = &got[s[0]].st, *b = &got[s[1]].st, *c = &got[s[2]].st;
    CHECK_EQ_INT(a->spec_accepted, a->spec_drafted);
    CHECK_EQ_INT(b->spec_accepted, 0);
    CHECK(c->spec_accepted > 0 && c->spec_accepted < c->spec_drafted);
    /* 100%: 29 tokens after the first in steps of up to 4 */
    CHECK_EQ_INT(a->spec_steps, (29 + 3) / 4);
    CHECK_EQ_INT(b->spec_steps, 29);
    CHECK_EQ_INT(c->spec_steps + c->spec_accepted, 29);
    dsr1_engine_free(e);
    /* each alone, same pattern */
    for (int i = 0; i < 3; i++) {
        e = dsr1_test_spec_engine(t, m, 3, 4, 96);
        REQUIRE(e);
        memset(&f, 0, sizeof f);
        f.vocab = 2048;
        dsr1_engine_set_draft_override(e, force_drafts, &f);
        memset(got, 0, sizeof got);
        int id = submit(e, tr[i], (size_t)np[i], 30, 0, 0);
        REQUIRE(id >= 0 && id < 16);
        f.pat[id] = (pattern){.traj = tr[i], .n = nt[i], .every = every[i]};
        drain(t, e, got, 16);
        CHECK(got[id].n == nt[i] - np[i] && !memcmp(got[id].tok, tr[i] + np[i], (size_t)got[id].n * 4));
        CHECK_EQ_INT(f.off_track, 0);
        dsr1_engine_free(e);
    }
    dsr1_model_close(m);
}

/* Reference cache for tokens[0, n): main layers by one plain forward,
 * the MTP layer by the MTP forward over (h[i], tokens[i+1]) for i < n-1. */
static int reference_cache(dsr1_model *m, dsr1_kv_type type, const int32_t *tok, int n,
                           dsr1_kvcache **kvo, dsr1_error *err)
{
    const dsr1_config *c = dsr1_model_config(m);
    dsr1_kvcache_options ko = {.type = type, .n_layers = m->n_layers,
                               .kv_lora_rank = c->kv_lora_rank,
                               .rope_dim = c->qk_rope_head_dim, .max_seqs = 1, .ctx = n,
                               .be = m->be, .dev = m->dev};
    dsr1_kvcache *kv = NULL;
    dsr1_fwd *f = NULL;
    float *h = malloc((size_t)n * (size_t)c->hidden_size * 4);
    int32_t idx[128], pos[128], seq[128] = {0};
    int slot, rc = dsr1_kvcache_create(&kv, &ko, err);
    if (!rc) rc = dsr1_kvcache_seq_alloc(kv, &slot, err);
    if (!rc) rc = dsr1_kvcache_reserve(kv, slot, n, err);
    if (!rc) rc = dsr1_fwd_create(&f, m, kv, n, err);
    for (int i = 0; i < n; i++) idx[i] = pos[i] = i;
    dsr1_fwd_batch b = {.n = n, .ids = tok, .pos = pos, .seq = seq, .n_out = n, .out_rows = idx};
    if (!rc) rc = dsr1_forward(f, &b, NULL, h, err);
    dsr1_fwd_batch bm = {.n = n - 1, .ids = tok + 1, .pos = pos, .seq = seq, .n_out = 0,
                         .out_rows = idx};
    if (!rc && n > 1) rc = dsr1_forward_mtp(f, &bm, h, c->hidden_size, NULL, NULL, err);
    dsr1_fwd_free(f);
    free(h);
    *kvo = kv;
    return rc;
}

/* Rows [0, n) of one layer of two caches, read back as float: equal bits. */
static int rows_equal(const dsr1_kvcache *a, int sa, const dsr1_kvcache *b, int sb, int layer,
                      int n)
{
    float ra[1024], rb[1024];
    if (a->row > 1024) return 0;
    for (int p = 0; p < n; p++) {
        dsr1_kvcache_read(a, sa, layer, p, ra);
        dsr1_kvcache_read(b, sb, layer, p, rb);
        if (memcmp(ra, rb, (size_t)a->row * 4)) return 0;
    }
    return 1;
}

/* After every step (with rejections: every other draft is wrong), the
 * verify logits of the accepted positions equal the one-shot forward's
 * logits bit for bit; at the end the main and MTP KV rows equal a cache
 * built by plain forwards over the accepted tokens. */
static void rollback_exact(dsr1_test_ctx *t, dsr1_compute compute)
{
    dsr1_model *m = dsr1_test_spec_open(t, dsr1_test_tiny_model(), compute);
    if (!m) return;
    int32_t tr[64];
    int nt = trajectory(t, m, p2, 11, 40, tr), V = dsr1_model_config(m)->vocab_size;
    float *ref = malloc((size_t)nt * (size_t)V * 4);
    dsr1_error err;
    CHECK_OK(dsr1_model_forward(m, tr, (size_t)nt, NULL, 0, DSR1_OUT_LOGITS, ref, &err), &err);
    forced f = {.vocab = V};
    dsr1_engine *e = dsr1_test_spec_engine(t, m, 3, 2, 96);
    REQUIRE(e && ref);
    dsr1_engine_set_draft_override(e, force_drafts, &f);
    int id = submit(e, tr, 11, 40, 0, 0);
    REQUIRE(id >= 0 && id < 16);
    f.pat[id] = (pattern){.traj = tr, .n = nt, .every = 2};
    dsr1_event ev[64];
    size_t n;
    eseq *s = &e->seqs[id];
    int bad_logits = 0, rows = 0;
    for (int step = 0; step < 8; step++) {
        CHECK_OK(dsr1_engine_step(e, ev, &n, &err), &err);
        REQUIRE(s->b_out >= 0 && n >= 1);
        /* outputs: the prefill's last row, or every row of a verify; the
         * first n (one per emitted token) were fed the right tokens */
        int n_out = step == 0 ? 1 : s->b_len;
        int first = e->b_pos[s->b_row + s->b_len - n_out];
        for (size_t j = 0; j < n; j++, rows++)
            if (memcmp(e->logits + ((size_t)s->b_out + j) * (size_t)V,
                       ref + (size_t)(first + (int)j) * (size_t)V, (size_t)V * 4))
                bad_logits++;
    }
    CHECK(rows > 8);
    CHECK_EQ_INT(bad_logits, 0);
    CHECK(s->state == SEQ_RUNNING);
    CHECK(s->stats.spec_accepted > 0 && s->stats.spec_accepted < s->stats.spec_drafted);
    CHECK_EQ_INT(s->n_done, s->n_tokens - 1);
    CHECK_EQ_INT(s->n_mtp, s->n_done);
    CHECK(!memcmp(s->tokens, tr, (size_t)s->n_tokens * 4));
    dsr1_kvcache *kv = NULL;
    CHECK_OK(reference_cache(m, e->kv->type, tr, s->n_done + 1, &kv, &err), &err);
    if (kv) {
        int L = m->cfg.num_hidden_layers, bad = 0;
        for (int l = 0; l < L; l++) bad += !rows_equal(e->kv, s->slot, kv, 0, l, s->n_done);
        CHECK_EQ_INT(bad, 0);
        CHECK(rows_equal(e->kv, s->slot, kv, 0, L, s->n_mtp));
    }
    dsr1_kvcache_free(kv);
    dsr1_engine_free(e);
    free(ref);
    dsr1_model_close(m);
}

DSR1_TEST(spec_rollback_exact_f32) { rollback_exact(t, DSR1_COMPUTE_F32); }
DSR1_TEST(spec_rollback_exact_fast) { rollback_exact(t, DSR1_COMPUTE_FAST); }

/* Adaptive mode with every draft wrong: once the policy backs off, steps
 * run no MTP rows at all (the MTP cache lags, by at most
 * DSR1_SPEC_MAX_LAG), each try catches the lag up in one batch, the tokens
 * are the plain trajectory, and the finished sequence's MTP rows equal the
 * reference cache (so the lagged rows were computed exactly). */
DSR1_TEST(spec_adaptive_backoff_skips_mtp)
{
    dsr1_model *m = dsr1_test_spec_open(t, dsr1_test_tiny_model(), DSR1_COMPUTE_F32);
    if (!m) return;
    int32_t tr[64];
    int nt = trajectory(t, m, p2, 11, 48, tr);
    forced f = {.vocab = dsr1_model_config(m)->vocab_size};
    dsr1_engine *e = dsr1_test_spec_engine(t, m, -1, 2, 96);
    REQUIRE(e);
    dsr1_engine_set_draft_override(e, force_drafts, &f);
    int id = submit(e, tr, 11, 48, 0, 0);
    REQUIRE(id >= 0 && id < 16);
    f.pat[id] = (pattern){.traj = tr, .n = nt, .every = 1};
    dsr1_event ev[64];
    dsr1_error err;
    eseq *s = &e->seqs[id];
    int idle = 0, batched = 0, max_lag = 0, steps = 0;
    out_seq got = {0};
    while ((steps == 0 || s->state == SEQ_RUNNING) && steps++ < 200) {
        uint64_t before = e->mtp_rows;
        size_t n;
        CHECK_OK(dsr1_engine_step(e, ev, &n, &err), &err);
        for (size_t j = 0; j < n; j++)
            if (ev[j].token >= 0 && got.n < MAXTOK) got.tok[got.n++] = ev[j].token;
        uint64_t rows = e->mtp_rows - before;
        int lag = s->n_done - s->n_mtp;
        if (lag > max_lag) max_lag = lag;
        idle += rows == 0 && lag > 0;
        /* a catch-up of lagging rows: more rows than fed plus the drafts */
        batched += rows > (uint64_t)(1 + DSR1_SPEC_ADAPTIVE_MAX);
    }
    CHECK(s->state == SEQ_DONE);
    CHECKF(got.n == nt - 11 && !memcmp(got.tok, tr + 11, (size_t)got.n * 4),
           "%d tokens, trajectory %d", got.n, nt - 11);
    CHECK_EQ_INT(f.off_track, 0);
    CHECK_EQ_INT(s->stats.spec_accepted, 0);
    CHECK(s->stats.spec_drafted > 0);
    CHECKF(idle >= got.n / 2, "%d of %d steps without MTP work", idle, steps);
    CHECKF(batched >= 2, "%d batched catch-ups", batched);
    CHECK(max_lag > 1 && max_lag <= DSR1_SPEC_MAX_LAG);
    /* finished: caught up; the MTP rows equal plain forwards' */
    CHECK_EQ_INT(s->n_mtp, s->n_done);
    dsr1_kvcache *kv = NULL;
    CHECK_OK(reference_cache(m, e->kv->type, tr, s->n_done + 1, &kv, &err), &err);
    if (kv) CHECK(rows_equal(e->kv, s->slot, kv, 0, m->cfg.num_hidden_layers, s->n_mtp));
    dsr1_kvcache_free(kv);
    dsr1_engine_free(e);
    dsr1_model_close(m);
}

/* The adaptive mode at the model's own costs: on the tiny model the MTP
 * layer is one of three and runs the vocabulary head again, over half a
 * decode step, and its experts are a third of a step's bytes, so a draft
 * would have to be accepted 90% of the time from the start: the mode decodes
 * plainly (same tokens, no drafts) where fixed drafts still draft. */
DSR1_TEST(spec_adaptive_costs)
{
    dsr1_model *m = dsr1_test_spec_open(t, dsr1_test_tiny_model(), DSR1_COMPUTE_FAST);
    if (!m) return;
    float row, draft;
    dsr1_model_spec_costs(m, &row, &draft);
    CHECKF(draft > 0.4f && draft < 1.5f && row >= 0.05f && row < 0.5f && row + draft > 0.7f,
           "row %.3f draft %.3f", row, draft);
    out_seq plain, ad, k2;
    run_alone(t, m, 0, p0, 8, 24, &plain);
    dsr1_engine_options o;
    dsr1_engine_options_default(&o);
    o.max_seqs = 2;
    o.ctx = 96;
    dsr1_engine *e = NULL;
    dsr1_error err;
    CHECK_OK(dsr1_engine_create(&e, m, &o, &err), &err);
    if (e) {
        out_seq all[16];
        memset(all, 0, sizeof all);
        int s = submit(e, p0, 8, 24, 0, 0);
        drain(t, e, all, 16);
        ad = all[s >= 0 && s < 16 ? s : 0];
        CHECK(same(&plain, &ad));
        /* it would never draft, so it runs no MTP layer at all: not even
         * the KV catch-up a sit-out defers */
        CHECK_EQ_INT(ad.st.spec_drafted, 0);
        CHECK_EQ_INT(ad.st.spec_steps, 0);
        CHECK(e->mtp_rows == 0);
        dsr1_engine_free(e);
    }
    run_alone(t, m, 2, p0, 8, 24, &k2);
    CHECK(same(&plain, &k2) && k2.st.spec_drafted > 0);
    dsr1_model_close(m);
}

/* ---- limits ------------------------------------------------------------------------- */

/* One sequence with all drafts right (k = 4) in an engine of context ctx:
 * tokens and finish, with optional stop id. */
static void forced_run(dsr1_test_ctx *t, dsr1_model *m, int ctx, const int32_t *tr, int nt,
                       int np, int max, const int32_t *stop, out_seq *o)
{
    memset(o, 0, sizeof *o);
    dsr1_engine *e = dsr1_test_spec_engine(t, m, 4, 2, ctx);
    if (!e) return;
    forced f = {.vocab = dsr1_model_config(m)->vocab_size};
    dsr1_engine_set_draft_override(e, force_drafts, &f);
    dsr1_request r = {.prompt = tr, .n_prompt = (size_t)np, .max_tokens = max, .reuse_seq = -1,
                      .stop_ids = stop, .n_stop_ids = stop ? 1 : 0};
    int id = -1;
    dsr1_error err;
    CHECK_OK(dsr1_engine_submit(e, &r, &id, &err), &err);
    if (id >= 0 && id < 16) {
        f.pat[id] = (pattern){.traj = tr, .n = nt, .every = 0};
        out_seq all[16];
        memset(all, 0, sizeof all);
        drain(t, e, all, 16);
        *o = all[id];
    }
    CHECK_EQ_INT(f.off_track, 0);
    dsr1_engine_free(e);
}

DSR1_TEST(spec_limits)
{
    dsr1_model *m = dsr1_test_spec_open(t, dsr1_test_tiny_model(), DSR1_COMPUTE_FAST);
    if (!m) return;
    dsr1_engine_options o;
    dsr1_engine_options_default(&o);
    dsr1_engine *e = NULL;
    dsr1_error err = {0};
    o.spec_draft = -2;
    CHECK(dsr1_engine_create(&e, m, &o, &err) == DSR1_EINVAL && strstr(err.msg, "spec_draft"));
    o.spec_draft = DSR1_SPEC_MAX_DRAFT + 1;
    CHECK(dsr1_engine_create(&e, m, &o, &err) == DSR1_EINVAL);
    int32_t tr[96];
    int nt = trajectory(t, m, p0, 8, 60, tr);
    REQUIRE(nt == 68);
    out_seq g;
    /* max_tokens 7 with 4 drafts accepted per step: exactly 7 */
    forced_run(t, m, 96, tr, nt, 8, 7, NULL, &g);
    CHECK(g.n == 7 && g.finish == DSR1_FINISH_LENGTH && !memcmp(g.tok, tr + 8, 7 * 4));
    CHECK_EQ_INT(g.st.spec_accepted, g.st.spec_drafted);
    /* a stop id inside an accepted run of drafts ends the sequence there */
    int at = 8 + 5; /* the first generated token from the 6th on not seen before */
    for (int seen = 1; seen && at < nt; at += seen) {
        seen = 0;
        for (int i = 8; i < at; i++) seen |= tr[i] == tr[at];
    }
    REQUIRE(at < nt);
    forced_run(t, m, 96, tr, nt, 8, 60, &tr[at], &g);
    CHECK(g.n == at - 8 + 1 && g.finish == DSR1_FINISH_STOP && !memcmp(g.tok, tr + 8, (size_t)g.n * 4));
    /* the context end: 20 - 8 tokens, as plain decoding */
    forced_run(t, m, 20, tr, nt, 8, 60, NULL, &g);
    CHECK(g.n == 12 && g.finish == DSR1_FINISH_LENGTH && !memcmp(g.tok, tr + 8, 12 * 4));
    dsr1_model_close(m);
}

/* A kept sequence exported from a speculating engine carries its MTP rows:
 * reused after import its prefix is not recomputed, and the continuation
 * equals a fresh run. A version-1 buffer (no MTP rows) is still read; the
 * engine then recomputes the prefix, with the same tokens. */
DSR1_TEST(spec_export_import)
{
    dsr1_model *m = dsr1_test_spec_open(t, dsr1_test_tiny_model(), DSR1_COMPUTE_F32);
    if (!m) return;
    out_seq first, fresh;
    run_alone(t, m, 2, p0, 8, 6, &first);
    int32_t turn2[32];
    memcpy(turn2, p0, sizeof p0);
    memcpy(turn2 + 8, first.tok, 6 * sizeof(int32_t));
    memcpy(turn2 + 14, p1, sizeof p1);
    run_alone(t, m, 0, turn2, 19, 8, &fresh);
    dsr1_engine *e = dsr1_test_spec_engine(t, m, 2, 2, 96);
    REQUIRE(e);
    out_seq got[16];
    memset(got, 0, sizeof got);
    int s = submit(e, p0, 8, 6, 0, 0);
    drain(t, e, got, 16);
    void *buf = NULL;
    size_t len = 0;
    dsr1_error err;
    CHECK_OK(dsr1_engine_seq_export(e, s, &buf, &len, &err), &err);
    dsr1_engine_free(e);
    REQUIRE(buf && len > 40);
    /* the same bytes as version 1: drop the n_mtp word after the header */
    unsigned char *v1 = malloc(len - 4);
    memcpy(v1, buf, 32);
    v1[8] = 1;
    memcpy(v1 + 32, (unsigned char *)buf + 36, len - 36);
    for (int k = 0; k < 2; k++) {
        e = dsr1_test_spec_engine(t, m, 2, 2, 96);
        if (!e) break;
        int si = -1, s2 = -1;
        CHECK_OK(dsr1_engine_seq_import(e, k ? (void *)v1 : buf, k ? len - 4 : len, &si, &err), &err);
        dsr1_request r = {.prompt = turn2, .n_prompt = 19, .max_tokens = 8, .reuse_seq = si};
        CHECK_OK(dsr1_engine_submit(e, &r, &s2, &err), &err);
        memset(got, 0, sizeof got);
        drain(t, e, got, 16);
        CHECKF(s2 >= 0 && same(&got[s2], &fresh), "import %s", k ? "v1" : "v2");
        CHECK_EQ_INT(got[s2].st.n_cached, k ? 0 : 13);
        CHECK(got[s2].st.spec_steps > 0);
        dsr1_engine_free(e);
    }
    free(v1);
    free(buf);
    dsr1_model_close(m);
}
