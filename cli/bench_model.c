/*
 * bench_model.c - `dsr1 bench -m MODEL`: prefill and decode through the
 * engine, one table row per run, next to the memory-bandwidth bound.
 *
 *   dsr1 bench -m MODEL [--prompt N,N..] [--gen N] [--batch N,N..]
 *                       [--threads N] [--backend B] [--f32]
 *
 * Runs: every prompt length at batch 1 (defaults 64 and 512: a short
 * prompt and llama.cpp's pp512), then every other batch size with the
 * first prompt length (default 8). Each run submits `batch` prompts of
 * random ids, generates `gen` tokens each (greedy, no speculation) and
 * reports time to first token, prefill tokens/s, time per output token and
 * decode tokens/s (means), and the median time of a pure decode step (all
 * sequences past their first token): on a shared machine the median shrugs
 * off the moments another process takes the cores or the memory bus.
 * Batch-1 rows add the bandwidth view: the weights one decoded token reads
 * (dsr1_model_active_weight_bytes), the bandwidth that implies (bytes /
 * median step), and that as a percentage of the bound the machine's
 * streaming read bandwidth sets (same threads; measured before and after
 * the runs, the better one): bound tokens/s = membw / bytes per token.
 * The table is printed when every run is done.
 *
 * Only timing and printing live here; the engine is used through dsr1.h.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/hw.h"
#include "backends/cpu/kernels.h"
#include "bench_model.h"
#include "cli.h"
#include "common.h"
#include "core/dsr1.h"

#define MAX_LIST 8

typedef struct model_opts {
    const char *model, *backend;
    int prompts[MAX_LIST], n_prompts;
    int batches[MAX_LIST], n_batches;
    int gen, threads, f32, no_warmup, numa, deterministic, fp8_bf16;
    int chunk;                    /* --prefill-chunk, 0 = the model's */
} model_opts;

typedef struct model_result {
    int prompt, batch;
    double t_prefill, t_decode;   /* seconds: submit -> last first token, then -> end */
    double ttft, tpot;            /* mean over sequences */
    double step_med;              /* median seconds of a pure decode step */
    long prompt_tokens, gen_tokens, decode_tokens;
} model_result;

/* "64,512" into list (values lo..hi); 0, or 2 with the usage printed. */
static int parse_list(const char *flag, const char *arg, int lo, int hi, int *list, int *n)
{
    *n = 0;
    for (const char *p = arg; *p;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < lo || v > hi || *n == MAX_LIST || (*end && *end != ','))
            return dsr1_cli_usage("bench", "%s wants up to %d numbers %d..%d like 64,512, got '%s'",
                                  flag, MAX_LIST, lo, hi, arg);
        list[(*n)++] = (int)v;
        p = *end ? end + 1 : end;
    }
    return *n ? 0 : dsr1_cli_usage("bench", "%s needs a value", flag);
}

static int parse_opts(int argc, char **argv, model_opts *o)
{
    *o = (model_opts){.prompts = {64, 512}, .n_prompts = 2, .batches = {1, 8}, .n_batches = 2,
                      .gen = 32};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int has = i + 1 < argc, rc = 0;
        double v;
        if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && has) o->model = argv[++i];
        else if (!strcmp(a, "--backend") && has) o->backend = argv[++i];
        else if (!strcmp(a, "--f32")) o->f32 = 1;
        else if (!strcmp(a, "--no-warmup")) o->no_warmup = 1;
        else if (!strcmp(a, "--deterministic")) o->deterministic = 1;
        else if (!strcmp(a, "--fp8-prefill") && has)
            rc = dsr1_common_fp8_prefill_arg("bench", argv[++i], &o->fp8_bf16);
        else if (!strcmp(a, "--prompt") && has)
            rc = parse_list(a, argv[++i], 1, 1 << 20, o->prompts, &o->n_prompts);
        else if (!strcmp(a, "--batch") && has)
            rc = parse_list(a, argv[++i], 1, 4096, o->batches, &o->n_batches);
        else if (!strcmp(a, "--gen") && has) {
            if (!(rc = dsr1_common_opt_num("bench", a, argv[++i], 1, 1 << 20, 1, &v))) o->gen = (int)v;
        } else if (!strcmp(a, "--numa") && has) {
            rc = dsr1_common_numa_arg("bench", argv[++i], &o->numa);
        } else if (!strcmp(a, "--prefill-chunk") && has) {
            if (!(rc = dsr1_common_opt_num("bench", a, argv[++i], 1, 65536, 1, &v))) o->chunk = (int)v;
        } else if (!strcmp(a, "--threads") && has) {
            if (!(rc = dsr1_common_opt_num("bench", a, argv[++i], 1, 1024, 1, &v))) o->threads = (int)v;
        } else
            return dsr1_cli_usage("bench", "unknown option '%s'", a);
        if (rc) return rc;
    }
    return 0;
}

/* Random prompt ids (fixed seed) away from the special tokens at the ends. */
static void make_prompt(int32_t *ids, int n, int vocab, int seq)
{
    uint64_t s = 0x5eed + (uint64_t)seq;
    int lo = vocab > 1000 ? 100 : 0, span = vocab > 1000 ? vocab - 1000 : vocab;
    for (int i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        ids[i] = lo + (int32_t)((s >> 33) % (uint64_t)span);
    }
}

/* Fold the engine's per-sequence stats into res (times from t0). */
static void collect(dsr1_engine *e, const int *seqs, int batch, double t0, double t_end,
                    model_result *res)
{
    double last_first = t0;
    for (int b = 0; b < batch; b++) {
        dsr1_seq_stats st;
        if (dsr1_engine_seq_stats(e, seqs[b], &st) || st.n_generated < 1) continue;
        /* Stats use the engine's monotonic clock; so does dsr1_common_now. */
        if (st.t_first_token > last_first) last_first = st.t_first_token;
        res->ttft += (st.t_first_token - st.t_queued) / batch;
        if (st.n_generated > 1) res->tpot += (st.t_done - st.t_first_token) / (st.n_generated - 1) / batch;
        res->prompt_tokens += st.n_prompt;
        res->gen_tokens += st.n_generated;
        res->decode_tokens += st.n_generated - 1;
    }
    res->t_prefill = last_first - t0;
    res->t_decode = t_end - last_first;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Step the engine until every sequence is done. Steps after every
 * sequence has its first token are pure decode steps: their median time
 * is robust to other processes stealing the machine now and then. */
static int step_all(dsr1_engine *e, dsr1_event *ev, const int *seqs, int batch, double *steps,
                    int cap, model_result *res, dsr1_error *err)
{
    int started = 0, n_steps = 0, rc = 0;
    unsigned char *seen = calloc((size_t)batch + 1, 1);
    if (!seen) return dsr1_errorf(err, DSR1_ENOMEM, "bench: out of memory");
    while (!rc && dsr1_engine_pending(e) > 0) {
        size_t n_ev = 0;
        int decode_only = started == batch;
        double t0 = dsr1_common_now();
        rc = dsr1_engine_step(e, ev, &n_ev, err);
        if (decode_only && n_steps < cap) steps[n_steps++] = dsr1_common_now() - t0;
        for (size_t k = 0; k < n_ev && !rc; k++) {
            if (ev[k].finish == DSR1_FINISH_ERROR)
                rc = dsr1_errorf(err, DSR1_EINVAL, "bench: sequence %d failed: %s", ev[k].seq,
                                 ev[k].message ? ev[k].message : "?");
            int i = 0; /* which of this run's sequences (slots are reused across runs) */
            while (i < batch && seqs[i] != ev[k].seq) i++;
            if (ev[k].token >= 0 && i < batch && !seen[i]) seen[i] = 1, started++;
        }
    }
    free(seen);
    qsort(steps, (size_t)n_steps, sizeof *steps, cmp_double);
    res->step_med = n_steps ? steps[n_steps / 2] : 0;
    return rc;
}

/* Submit `batch` prompts of `prompt` ids (sequences salt .. salt+batch-1
 * of make_prompt), step the engine until all are done. */
static int run_engine(dsr1_engine *e, int prompt, int batch, int gen, int vocab, int salt,
                      model_result *res, dsr1_error *err)
{
    int32_t *ids = malloc((size_t)prompt * (size_t)batch * sizeof *ids);
    int *seqs = malloc((size_t)batch * sizeof *seqs);
    dsr1_event *ev = malloc(dsr1_engine_max_events(e) * sizeof *ev);
    double *steps = malloc(((size_t)gen + 1) * sizeof *steps);
    int rc = ids && seqs && ev && steps ? 0 : dsr1_errorf(err, DSR1_ENOMEM, "bench: out of memory");
    double t0 = dsr1_common_now();
    for (int b = 0; b < batch && !rc; b++) {
        int32_t *p = ids + (size_t)b * (size_t)prompt;
        dsr1_request r = {.prompt = p, .n_prompt = (size_t)prompt, .max_tokens = gen, .reuse_seq = -1};
        dsr1_sampling_default(&r.sampling);
        r.sampling.temperature = 0;
        make_prompt(p, prompt, vocab, salt + b);
        rc = dsr1_engine_submit(e, &r, &seqs[b], err);
    }
    if (!rc) rc = step_all(e, ev, seqs, batch, steps, gen + 1, res, err);
    if (!rc) collect(e, seqs, batch, t0, dsr1_common_now(), res);
    free(ids);
    free(seqs);
    free(ev);
    free(steps);
    return rc;
}

/* One run with its own engine (KV sized for it). */
static int bench_run(dsr1_model *m, const model_opts *o, int prompt, int batch, model_result *res,
                     dsr1_error *err)
{
    dsr1_engine_options eo;
    dsr1_engine_options_default(&eo);
    eo.max_seqs = batch;
    /* Whole 64-token KV pages per sequence, with room to spare. */
    eo.ctx = ((prompt + o->gen + 8 + 63) / 64 + 1) * 64;
    eo.spec_draft = 0; /* plain decoding; speculation has its own table (--spec) */
    eo.prefill_chunk = o->chunk;
    dsr1_engine *e = NULL;
    *res = (model_result){.prompt = prompt, .batch = batch};
    DSR1_TRY(dsr1_engine_create(&e, m, &eo, err));
    /* An untimed run of the same shape first, on other prompts (so the
     * prefix cache has nothing to give the timed one): the engine's
     * buffers are touched for the first time there. A 512-token prefill
     * on R1's shapes first-touches about 200 MB of them (50,000 page
     * faults, Zen 5 VM), the cost of a session's first request, not of
     * its steady state; llama-bench also warms each test's context. */
    int vocab = dsr1_model_config(m)->vocab_size;
    model_result warm = *res;
    int rc = o->no_warmup ? 0 : run_engine(e, prompt, batch, o->gen < 2 ? o->gen : 2, vocab, 1000, &warm, err);
    if (!rc) rc = run_engine(e, prompt, batch, o->gen, vocab, 0, res, err);
    dsr1_engine_free(e);
    if (!rc && res->gen_tokens < (long)o->gen * batch)
        fprintf(stderr, "dsr1: bench: note: %ld of %d tokens generated (a sequence hit EOS)\n",
                res->gen_tokens, o->gen * batch);
    return rc;
}

/* A run's row; the bandwidth columns (batch 1) use the median decode step. */
static void print_row(const model_result *r, int gen, double wbytes, double membw)
{
    printf("%7d %5d %5d %10.1f %12.1f %9.2f %11.2f %9.2f", r->prompt, r->batch, gen, r->ttft * 1e3,
           r->t_prefill > 0 ? r->prompt_tokens / r->t_prefill : 0, r->tpot * 1e3,
           r->t_decode > 0 ? r->decode_tokens / r->t_decode : 0, r->step_med * 1e3);
    if (r->batch == 1 && r->step_med > 0) {
        double gbs = wbytes / r->step_med / 1e9;
        if (membw > 0)
            printf(" %9.1f %7.0f%%\n", gbs, 100.0 * gbs / membw);
        else
            printf(" %9.1f %8s\n", gbs, "-");
    } else {
        printf(" %9s %8s\n", "-", "-");
    }
}

static int measure_membw(int threads, double *gbs, dsr1_error *err)
{
    dsr1_pool *pool = NULL;
    double bps = 0;
    DSR1_TRY(dsr1_pool_create(&pool, threads, err));
    int rc = dsr1_hw_membw(pool, (size_t)256 << 20, 3, &bps, err);
    dsr1_pool_free(pool);
    *gbs = bps / 1e9;
    return rc;
}

/* Of the mappings of path in /proc/self/smaps: the resident bytes and
 * those mapped with 2 MiB pages (FilePmdMapped). 0 when the kernel does
 * not say (the line came with Linux 4.18). */
static int mapped_pages(const char *path, double *rss, double *pmd)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    char line[4096];
    int in = 0, seen = 0;
    size_t pl = strlen(path);
    *rss = *pmd = 0;
    while (f && fgets(line, sizeof line, f)) {
        size_t n = strlen(line);
        while (n && line[n - 1] == '\n') line[--n] = 0;
        /* a mapping's header, "lo-hi perms offset dev inode path", starts
         * with a lowercase hex digit; its "Key: value" lines do not */
        if ((line[0] >= '0' && line[0] <= '9') || (line[0] >= 'a' && line[0] <= 'f'))
            in = n >= pl && !strcmp(line + n - pl, path);
        else if (in && !strncmp(line, "Rss:", 4))
            *rss += strtod(line + 4, NULL) * 1024;
        else if (in && !strncmp(line, "FilePmdMapped:", 14))
            *pmd += strtod(line + 14, NULL) * 1024, seen = 1;
    }
    if (f) fclose(f);
    return seen;
}

/* How much of the model's resident weights is mapped with 2 MiB pages:
 * pages read in through the mapping can come as 2 MiB folios (ext4 from
 * Linux 6.16, xfs), pages left in the page cache by write(2) (a file just
 * copied) stay 4 KiB, and decode streams those 15-20% slower. Said here
 * so a slow run can be told from a cache in small pages. */
static void print_pages(const char *path)
{
    double rss, pmd;
    char a[32], b[32];
    char *real = realpath(path, NULL); /* smaps names the file, not a link to it */
    int ok = real && mapped_pages(real, &rss, &pmd) && rss > 0;
    free(real);
    if (!ok) return;
    printf("weights mapped with 2 MiB pages: %s of %s resident%s\n",
           dsr1_common_bytes(pmd, a, sizeof a), dsr1_common_bytes(rss, b, sizeof b),
           pmd < 0.5 * rss ? " (4 KiB pages stream slower: see dsr1-bench(1), PAGES)" : "");
}

static void print_table(const char *path, dsr1_model *m, const model_opts *o, double membw,
                        const model_result *res, int n)
{
    double wbytes = (double)dsr1_model_active_weight_bytes(m);
    char wb[32];
    printf("model: %s: %s\n", path, dsr1_model_describe(m));
    if (strcmp(dsr1_model_backend_name(m), "cpu")) {
        /* On a GPU the weights stream from its own memory: the host's
         * bandwidth is no bound there (an H200 run printed 330%). */
        printf("weights per decoded token (batch 1) %s; no bandwidth bound off the CPU (the host's "
               "membw does not apply); %s compute\n", dsr1_common_bytes(wbytes, wb, sizeof wb),
               o->f32 ? "f32" : "fast");
        membw = 0;
    } else {
        printf("membw %.1f GB/s; weights per decoded token (batch 1) %s -> bandwidth bound %.2f tok/s; "
               "%s compute\n", membw, dsr1_common_bytes(wbytes, wb, sizeof wb),
               wbytes > 0 ? membw * 1e9 / wbytes : 0, o->f32 ? "f32" : "fast");
    }
    print_pages(path);
    printf("%7s %5s %5s %10s %12s %9s %11s %9s %9s %8s\n", "prompt", "batch", "gen", "ttft_ms",
           "prefill_t/s", "tpot_ms", "decode_t/s", "step_ms", "eff_GB/s", "%bound");
    for (int i = 0; i < n; i++) print_row(&res[i], o->gen, wbytes, membw);
}

/* Before anything is timed: one untimed run of 64 prompt tokens (with 8
 * of R1's 256 experts per token that routes to most of them) and a few
 * decode steps, so page faults of the first touch of the mapped weights
 * (reading them from disk, if they are not cached) and first-use
 * allocations are not charged to the first measured run. */
static int warm_up(dsr1_model *m, const model_opts *o, dsr1_error *err)
{
    if (o->no_warmup) return 0;
    model_opts w = *o;
    w.gen = 4;
    model_result r;
    return bench_run(m, &w, 64, 1, &r, err);
}

int dsr1_bench_model(int argc, char **argv)
{
    model_opts o;
    int rc = parse_opts(argc, argv, &o);
    if (rc) return rc;
    char path[4096];
    dsr1_error err = {0};
    if (dsr1_common_model_path(o.model, path, sizeof path, &err)) return dsr1_cli_fail(&err);
    dsr1_model_options mo = {.backend = o.backend, .threads = o.threads, .numa_nodes = o.numa,
                             .compute = o.f32 ? DSR1_COMPUTE_F32 : DSR1_COMPUTE_FAST,
                             .deterministic = o.deterministic, .fp8_bf16 = o.fp8_bf16};
    dsr1_model *m = NULL;
    double membw = 0, bw = 0;
    model_result res[2 * MAX_LIST];
    int n = 0;
    /* Bandwidth before and after the runs: other processes take some now
     * and then, so the bound uses the better of the two. */
    if (measure_membw(o.threads, &membw, &err) || dsr1_model_open(&m, path, &mo, &err)) {
        dsr1_model_close(m);
        return dsr1_cli_fail(&err);
    }
    int has1 = 0;
    for (int j = 0; j < o.n_batches; j++) has1 |= o.batches[j] == 1;
    rc = warm_up(m, &o, &err);
    for (int i = 0; i < o.n_prompts && has1 && !rc; i++)
        rc = bench_run(m, &o, o.prompts[i], 1, &res[n++], &err);
    for (int j = 0; j < o.n_batches && !rc; j++)
        if (o.batches[j] != 1) rc = bench_run(m, &o, o.prompts[0], o.batches[j], &res[n++], &err);
    if (!rc) rc = measure_membw(o.threads, &bw, &err);
    if (!rc) print_table(path, m, &o, bw > membw ? bw : membw, res, n);
    dsr1_model_close(m);
    return rc ? dsr1_cli_fail(&err) : 0;
}
