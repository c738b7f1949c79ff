/*
 * bench_spec.c - `dsr1 bench --spec -m MODEL [--k N] [--prompt N] [--gen N]
 * [--accept A] [--threads N] [--f32]`: what speculative decoding with the
 * model's MTP layer buys at batch 1 on this machine.
 *
 * Random weights make the MTP's drafts almost always wrong, so the bench
 * measures the machinery instead of trusting the drafts:
 *   1. plain greedy decoding (spec_draft 0): the time of one decode step;
 *   2. for each draft length k, decoding with every draft forced wrong
 *      (the engine's draft override): each step then yields one token and
 *      costs exactly a verify of k + 1 tokens plus the k MTP draft
 *      forwards, both timed;
 *   3. from those, tokens/s for per-token acceptance a = 0.5 .. 0.95:
 *      (1 - a^(k+1)) / (1 - a) tokens per step over the step time;
 *   4. a check of that model: decoding with drafts taken from the plain
 *      run's own trajectory, each right with probability --accept, measured
 *      end to end; and the model's own drafts (adaptive mode) for what they
 *      are worth on this checkpoint.
 * The draft override hook is a test/bench hook of the engine (core/dsr1.h): this
 * bench and the tests are its only users.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_spec.h"
#include "cli.h"
#include "common.h"
#include "core/dsr1.h"
#include "core/spec.h"

typedef struct spec_opts {
    const char *model, *backend, *prompts;
    int threads, k, prompt, gen, f32, batch, gen_set, rounds, deterministic;
    double accept;
} spec_opts;

static int usage(FILE *f)
{
    fprintf(f, "usage: dsr1 bench --spec [-m MODEL] [--k 1..%d] [--prompt N] [--gen N]\n"
               "                  [--accept A] [--threads N] [--backend NAME] [--f32] [--deterministic]\n"
               "       dsr1 bench --spec -m MODEL --prompts FILE.jsonl [--batch N] [--gen N] [--k K]\n"
               "                  [--rounds R]\n"
               "See dsr1-bench(1).\n", DSR1_SPEC_MAX_DRAFT);
    return f == stdout ? 0 : 2;
}

static int num(int argc, char **argv, int *i, double lo, double hi, int integer, double *v)
{
    if (*i + 1 >= argc) return dsr1_cli_usage("bench", "%s needs a value", argv[*i]);
    const char *flag = argv[*i];
    return dsr1_common_opt_num("bench", flag, argv[++*i], lo, hi, integer, v);
}

/* argv is bench's own (argv[0] "bench" or "--spec"); "--spec" is skipped.
 * Returns 0, 2 (usage error printed) or -1 (help printed). */
static int parse(int argc, char **argv, spec_opts *o)
{
    *o = (spec_opts){.prompt = 64, .gen = 32, .accept = 0.8, .batch = 1, .rounds = 3};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        double v = 0;
        int rc = 0;
        if (!strcmp(a, "--spec")) continue;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return -1;
        }
        if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && i + 1 < argc) {
            o->model = argv[++i];
        } else if (!strcmp(a, "--backend") && i + 1 < argc) {
            o->backend = argv[++i];
        } else if (!strcmp(a, "--f32")) {
            o->f32 = 1;
        } else if (!strcmp(a, "--deterministic")) {
            o->deterministic = 1;
        } else if (!strcmp(a, "--prompts") && i + 1 < argc) {
            o->prompts = argv[++i];
        } else if (!strcmp(a, "--rounds")) {
            if (!(rc = num(argc, argv, &i, 1, 15, 1, &v))) o->rounds = (int)v;
        } else if (!strcmp(a, "--batch")) {
            if (!(rc = num(argc, argv, &i, 1, 256, 1, &v))) o->batch = (int)v;
        } else if (!strcmp(a, "--k")) {
            if (!(rc = num(argc, argv, &i, 1, DSR1_SPEC_MAX_DRAFT, 1, &v))) o->k = (int)v;
        } else if (!strcmp(a, "--prompt")) {
            if (!(rc = num(argc, argv, &i, 1, 65536, 1, &v))) o->prompt = (int)v;
        } else if (!strcmp(a, "--gen")) {
            if (!(rc = num(argc, argv, &i, 2, 65536, 1, &v))) o->gen = (int)v, o->gen_set = 1;
        } else if (!strcmp(a, "--threads")) {
            if (!(rc = num(argc, argv, &i, 0, 4096, 1, &v))) o->threads = (int)v;
        } else if (!strcmp(a, "--accept")) {
            if (!(rc = num(argc, argv, &i, 0, 1, 0, &v))) o->accept = v;
        } else {
            return dsr1_cli_usage("bench", "--spec: unknown option %s", a);
        }
        if (rc) return rc;
    }
    return 0;
}

/* ---- forced drafts ------------------------------------------------------------- */

/* Drafts from a recorded greedy trajectory, each right with probability
 * `accept` (a fixed hash of its position decides, so runs repeat). */
typedef struct forced {
    const int32_t *traj;
    int n, vocab;
    double accept;
} forced;

static double unit_hash(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return (double)(x >> 11) * 0x1.0p-53;
}

static int forced_drafts(void *ctx, int seq, const int32_t *tokens, int n_tokens, int32_t *draft,
                         int max_draft)
{
    const forced *f = ctx;
    (void)seq;
    if (n_tokens > f->n || memcmp(tokens, f->traj, (size_t)n_tokens * sizeof *tokens)) return 0;
    int n = 0;
    for (; n < max_draft && n_tokens + n < f->n; n++) {
        int32_t x = f->traj[n_tokens + n];
        draft[n] = unit_hash((uint64_t)(n_tokens + n)) < f->accept ? x : (x + 1) % f->vocab;
    }
    return n;
}

/* ---- one decoding run ------------------------------------------------------------ */

typedef struct run_result {
    double t_decode;  /* seconds from the first token to the last */
    double t_draft;   /* of which drafting */
    int steps;        /* decode steps after the first token */
    int tokens;       /* generated */
    dsr1_seq_stats st;
} run_result;

/* Greedy decoding of `prompt` for gen tokens with spec_draft; drafts from
 * f when non-NULL. Writes the generated tokens to out when non-NULL. */
static int run(dsr1_model *m, const spec_opts *o, int spec, const forced *f, const int32_t *prompt,
               int32_t *out, run_result *r, dsr1_error *err)
{
    dsr1_engine_options eo;
    dsr1_engine_options_default(&eo);
    eo.max_seqs = 1;
    eo.ctx = ((o->prompt + o->gen + DSR1_SPEC_MAX_DRAFT + 2 + 63) / 64 + 1) * 64;
    eo.prefill_chunk = o->prompt;
    eo.spec_draft = spec;
    dsr1_engine *e = NULL;
    DSR1_TRY(dsr1_engine_create(&e, m, &eo, err));
    if (f) dsr1_engine_set_draft_override(e, forced_drafts, (void *)f);
    dsr1_request rq = {.prompt = prompt, .n_prompt = (size_t)o->prompt, .max_tokens = o->gen,
                       .reuse_seq = -1};
    dsr1_sampling_default(&rq.sampling);
    rq.sampling.temperature = 0;
    dsr1_event *ev = malloc(dsr1_engine_max_events(e) * sizeof *ev);
    int seq = -1, rc = ev ? dsr1_engine_submit(e, &rq, &seq, err)
                          : dsr1_errorf(err, DSR1_ENOMEM, "bench: out of memory");
    memset(r, 0, sizeof *r);
    double t_first = 0, draft0 = 0;
    while (!rc && dsr1_engine_pending(e) > 0) {
        size_t n = 0;
        int before = r->tokens;
        rc = dsr1_engine_step(e, ev, &n, err);
        for (size_t i = 0; i < n && !rc; i++) {
            if (ev[i].finish == DSR1_FINISH_ERROR)
                rc = dsr1_errorf(err, DSR1_EINVAL, "bench: %s", ev[i].message ? ev[i].message : "?");
            if (ev[i].token >= 0 && out && r->tokens < o->gen) out[r->tokens] = ev[i].token;
            r->tokens += ev[i].token >= 0;
        }
        if (before == 0 && r->tokens > 0) { /* the prefill step: decoding starts now */
            t_first = dsr1_common_now();
            draft0 = dsr1_engine_draft_seconds(e);
        } else if (before > 0) {
            r->steps++;
        }
    }
    r->t_decode = dsr1_common_now() - t_first;
    r->t_draft = dsr1_engine_draft_seconds(e) - draft0;
    if (!rc) dsr1_engine_seq_stats(e, seq, &r->st);
    free(ev);
    dsr1_engine_free(e);
    return rc;
}

/* ---- the table ---------------------------------------------------------------------- */

static const double rates[] = {0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95};
#define N_RATES (sizeof rates / sizeof rates[0])

static void print_row(int k, const run_result *z, double t_dec)
{
    double step = z->t_decode / z->steps, draft = z->t_draft / z->steps;
    printf("%2d %10.1f %9.1f %9.2f ", k, (step - draft) * 1e3, draft * 1e3, step / t_dec);
    for (size_t i = 0; i < N_RATES; i++)
        printf(" %5.2fx", dsr1_spec_expected_tokens(rates[i], k) / step * t_dec);
    printf("\n");
}

/* The faster of two runs: timings on a shared machine are noisy, and the
 * minimum is the best estimate of what the code costs. */
static int run2(dsr1_model *m, const spec_opts *o, int spec, const forced *f,
                const int32_t *prompt, run_result *r, dsr1_error *err)
{
    run_result b;
    DSR1_TRY(run(m, o, spec, f, prompt, NULL, r, err));
    DSR1_TRY(run(m, o, spec, f, prompt, NULL, &b, err));
    if (b.steps == r->steps && b.t_decode < r->t_decode) *r = b;
    return 0;
}

/* Plain run, then for each k a zero-acceptance run (t_step[k]: seconds
 * per verify step with drafting); *best_k is the k with the most tokens/s
 * at a = 0.85. */
static int table(dsr1_model *m, const spec_opts *o, const int32_t *prompt, int32_t *traj,
                 double *t_dec, double *t_step, int *best_k, dsr1_error *err)
{
    run_result r;
    DSR1_TRY(run(m, o, 0, NULL, prompt, traj + o->prompt, &r, err)); /* warm-up, trajectory */
    DSR1_TRY(run2(m, o, 0, NULL, prompt, &r, err));
    if (r.steps < 1 || r.tokens < o->gen)
        return dsr1_errorf(err, DSR1_EINVAL, "bench: plain decoding stopped after %d tokens (EOS); "
                           "try another --prompt length", r.tokens);
    *t_dec = r.t_decode / r.steps;
    printf("plain decode: %.1f ms/token, %.2f tokens/s\n\n", *t_dec * 1e3, 1 / *t_dec);
    printf("%2s %10s %9s %9s  speed-up over plain decoding at acceptance a\n", "k", "verify_ms",
           "draft_ms", "step/dec");
    printf("%2s %10s %9s %9s ", "", "(k+1 tok)", "(k MTP)", "");
    for (size_t i = 0; i < N_RATES; i++) printf(" a=%-4.2f", rates[i]);
    printf("\n");
    forced zero = {.traj = traj, .n = o->prompt + o->gen,
                   .vocab = dsr1_model_config(m)->vocab_size, .accept = 0};
    double best = 0;
    for (int k = o->k ? o->k : 1; k <= (o->k ? o->k : 4); k++) {
        DSR1_TRY(run2(m, o, k, &zero, prompt, &r, err));
        if (r.steps < 1) return dsr1_errorf(err, DSR1_EINVAL, "bench: no decode steps");
        print_row(k, &r, *t_dec);
        t_step[k] = r.t_decode / r.steps;
        double tps = dsr1_spec_expected_tokens(0.85, k) / t_step[k];
        if (tps > best) best = tps, *best_k = k;
    }
    return 0;
}

/* The model against a real run with forced acceptance, and the MTP's own
 * drafts under the adaptive policy. */
static int check(dsr1_model *m, const spec_opts *o, const int32_t *prompt, const int32_t *traj,
                 double t_dec, double t_step, int k, dsr1_error *err)
{
    forced f = {.traj = traj, .n = o->prompt + o->gen, .vocab = dsr1_model_config(m)->vocab_size,
                .accept = o->accept};
    run_result r;
    DSR1_TRY(run(m, o, k, &f, prompt, NULL, &r, err));
    double per_step = (double)(r.tokens - 1) / (r.steps ? r.steps : 1);
    double tps = (r.tokens - 1) / r.t_decode;
    printf("\ncheck, k=%d, each draft right with p=%.2f: %.2f tokens/step (model %.2f), "
           "%.2f tokens/s measured, %.2f predicted from the step time (%.2fx plain)\n", k,
           o->accept, per_step, dsr1_spec_expected_tokens(o->accept, k), tps, per_step / t_step,
           tps * t_dec);
    DSR1_TRY(run(m, o, -1, NULL, prompt, NULL, &r, err));
    double a = r.st.spec_drafted ? (double)r.st.spec_accepted / r.st.spec_drafted : 0;
    tps = (r.tokens - 1) / r.t_decode;
    printf("the MTP's own drafts (adaptive): %d drafted in %d steps, acceptance %.2f, "
           "%.2f tokens/s (%.2fx plain)\n", r.st.spec_drafted, r.steps, a, tps, tps * t_dec);
    return 0;
}

/* Random prompt ids (fixed seed) away from the special tokens at the ends. */
static void make_prompt(int32_t *ids, int n, int vocab)
{
    uint64_t s = 0x5eed5;
    int lo = vocab > 1000 ? 100 : 0, span = vocab > 1000 ? vocab - 1000 : vocab;
    for (int i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        ids[i] = lo + (int32_t)((s >> 33) % (uint64_t)span);
    }
}

int dsr1_bench_spec(int argc, char **argv)
{
    spec_opts o;
    int rc = parse(argc, argv, &o);
    if (rc) return rc < 0 ? 0 : rc;
    char path[4096];
    dsr1_error err = {0};
    if (dsr1_common_model_path(o.model, path, sizeof path, &err)) return dsr1_cli_fail(&err);
    dsr1_model_options mo = {.backend = o.backend, .threads = o.threads,
                             .compute = o.f32 ? DSR1_COMPUTE_F32 : DSR1_COMPUTE_FAST,
                             .deterministic = o.deterministic};
    dsr1_model *m = NULL;
    if (dsr1_model_open(&m, path, &mo, &err)) return dsr1_cli_fail(&err);
    int32_t *ids = malloc((size_t)(o.prompt + o.gen) * sizeof *ids);
    if (!ids) rc = dsr1_errorf(&err, DSR1_ENOMEM, "bench: out of memory");
    else if (!dsr1_model_has_mtp(m))
        rc = dsr1_errorf(&err, DSR1_EUNSUPPORTED, "%s: no MTP layer, nothing to speculate with", path);
    double t_dec = 0, t_step[DSR1_SPEC_MAX_DRAFT + 1] = {0};
    int best_k = 1;
    if (!rc && o.prompts) {
        printf("model: %s: %s\n", path, dsr1_model_describe(m));
        rc = dsr1_bench_spec_prompts(m, o.prompts, o.batch, o.gen_set ? o.gen : 256, o.k,
                                     o.rounds, &err);
        free(ids);
        dsr1_model_close(m);
        return rc ? dsr1_cli_fail(&err) : 0;
    }
    if (!rc) {
        make_prompt(ids, o.prompt, dsr1_model_config(m)->vocab_size);
        printf("model: %s: %s\nbatch 1, prompt %d, gen %d, greedy; tokens/s and speed-up over "
               "plain decoding for per-token acceptance a\n", path, dsr1_model_describe(m),
               o.prompt, o.gen);
        rc = table(m, &o, ids, ids, &t_dec, t_step, &best_k, &err);
    }
    if (!rc) rc = check(m, &o, ids, ids, t_dec, t_step[best_k], best_k, &err);
    free(ids);
    dsr1_model_close(m);
    return rc ? dsr1_cli_fail(&err) : 0;
}
