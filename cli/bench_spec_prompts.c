/*
 * bench_spec_prompts.c - `dsr1 bench --spec --prompts FILE [--batch N]`:
 * speculative decoding on real prompts, with the model's own drafts.
 *
 * bench_spec.c measures the machinery with forced drafts, because random
 * weights draft nothing useful. On a trained model (models/tiny-r1, or R1
 * itself) what matters is the acceptance the MTP layer really reaches on
 * the prompts a user runs, and what the default (adaptive) mode makes of
 * it. So: every prompt of FILE, greedy, through one engine of N sequences
 * (a new prompt starts as one finishes), once per mode: off (spec_draft 0),
 * adaptive (-1) and fixed 1..K drafts, the modes interleaved in each of
 * R rounds (a burst of load elsewhere hits every mode alike). Printed: the
 * median tokens/s of each mode and its ratio to off's median, end to end
 * (prefill included, the same in every mode),
 * the acceptance per mode and per prompt tag, and whether every mode
 * produced the off mode's tokens (greedy speculation is exact).
 *
 * FILE is JSONL: {"prompt": "text, chat template already applied",
 * "tag": "a group name"} per line (tag optional; special tokens written in
 * the text are recognised). tools/train/evaluate.py --prompts-out writes
 * one for the tiny-r1 task families.
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_spec.h"
#include "cli.h"
#include "common.h"
#include "core/dsr1.h"
#include "core/spec.h"

#define MAX_TAGS 32
#define MAX_MODES (2 + DSR1_SPEC_MAX_DRAFT)
#define MAX_ROUNDS 15

typedef struct bprompt {
    int32_t *ids;
    size_t n;
    int tag;
    int32_t *out; /* the off mode's tokens */
    int n_out;
} bprompt;

typedef struct bset {
    bprompt *p;
    int n, n_tags, max_len;
    char tags[MAX_TAGS][32];
} bset;

typedef struct bmode {
    int spec;
    double seconds;            /* the last run's */
    double tps[MAX_ROUNDS];    /* tokens/s of each round */
    long tokens, drafted[MAX_TAGS], accepted[MAX_TAGS], steps;
    int differ; /* prompts whose tokens differ from the off mode's */
} bmode;

static void set_free(bset *s)
{
    for (int i = 0; i < s->n; i++) {
        free(s->p[i].ids);
        free(s->p[i].out);
    }
    free(s->p);
}

static int tag_index(bset *s, const char *name)
{
    for (int i = 0; i < s->n_tags; i++)
        if (!strcmp(s->tags[i], name)) return i;
    if (s->n_tags == MAX_TAGS) return MAX_TAGS - 1; /* the rest share the last */
    snprintf(s->tags[s->n_tags], sizeof s->tags[0], "%s", name);
    return s->n_tags++;
}

int dsr1_bench_prompt_parse(const char *text, size_t len, const char *path, long line,
                            char **prompt, char **tag, dsr1_error *err)
{
    *prompt = *tag = NULL;
    cJSON *j = cJSON_ParseWithLength(text, len);
    const cJSON *pr = j ? cJSON_GetObjectItemCaseSensitive(j, "prompt") : NULL;
    const cJSON *tg = j ? cJSON_GetObjectItemCaseSensitive(j, "tag") : NULL;
    int rc = 0;
    if (!cJSON_IsString(pr) || (tg && !cJSON_IsString(tg)))
        rc = dsr1_errorf(err, DSR1_EINVAL, "%s: line %ld: expected {\"prompt\": string, \"tag\": "
                         "string}", path, line);
    else if (!pr->valuestring[0])
        rc = dsr1_errorf(err, DSR1_EINVAL, "%s: line %ld: empty prompt", path, line);
    else if (!(*prompt = strdup(pr->valuestring)) || (tg && !(*tag = strdup(tg->valuestring)))) {
        free(*prompt);
        *prompt = NULL;
        rc = dsr1_errorf(err, DSR1_ENOMEM, "bench: out of memory");
    }
    cJSON_Delete(j);
    return rc;
}

/* One line of FILE into s (line counts from 1, for messages). */
static int add_line(bset *s, const dsr1_tokenizer *tk, const char *path, long line, const char *text,
                    size_t len, dsr1_error *err)
{
    char *pr, *tg;
    DSR1_TRY(dsr1_bench_prompt_parse(text, len, path, line, &pr, &tg, err));
    int rc = 0;
    bprompt *np = realloc(s->p, (size_t)(s->n + 1) * sizeof *np);
    if (!np) {
        rc = dsr1_errorf(err, DSR1_ENOMEM, "bench: out of memory");
    } else {
        s->p = np;
        bprompt *p = &s->p[s->n];
        memset(p, 0, sizeof *p);
        rc = dsr1_tokenizer_encode(tk, pr, strlen(pr), &p->ids, &p->n, err);
        if (!rc && p->n == 0) {
            free(p->ids);
            rc = dsr1_errorf(err, DSR1_EINVAL, "%s: line %ld: empty prompt", path, line);
        }
        if (!rc) {
            p->tag = tag_index(s, tg ? tg : "all");
            if ((int)p->n > s->max_len) s->max_len = (int)p->n;
            s->n++;
        }
    }
    free(pr);
    free(tg);
    return rc;
}

static int load_prompts(bset *s, const dsr1_model *m, const char *path, dsr1_error *err)
{
    const dsr1_tokenizer *tk = dsr1_model_tokenizer(m);
    if (!tk) return dsr1_errorf(err, DSR1_EINVAL, "bench: the model has no tokenizer for --prompts");
    FILE *f = fopen(path, "rb");
    if (!f) return dsr1_errorf(err, DSR1_EIO, "%s: cannot open", path);
    char *line = NULL;
    size_t cap = 0;
    long no = 0;
    int rc = 0;
    ssize_t len;
    while (!rc && (len = getline(&line, &cap, f)) >= 0) {
        no++;
        if (strspn(line, " \t\r\n") == (size_t)len) continue;
        rc = add_line(s, tk, path, no, line, (size_t)len, err);
    }
    free(line);
    fclose(f);
    if (!rc && !s->n) rc = dsr1_errorf(err, DSR1_EINVAL, "%s: no prompts", path);
    return rc;
}

/* One finished sequence into the mode's counts; the first run (the
 * warm-up, speculation off) records the tokens, every later one compares. */
static void finish(bmode *md, bprompt *p, const dsr1_seq_stats *st, const int32_t *tok, int n)
{
    md->tokens += n;
    md->steps += st->spec_steps;
    md->drafted[p->tag] += st->spec_drafted;
    md->accepted[p->tag] += st->spec_accepted;
    if (!p->out) { /* the first (warm-up, off) run */
        p->out = malloc((size_t)(n ? n : 1) * sizeof *tok);
        if (p->out) memcpy(p->out, tok, (size_t)n * sizeof *tok);
        p->n_out = n;
    } else {
        md->differ += !p->out || p->n_out != n || memcmp(p->out, tok, (size_t)n * sizeof *tok);
    }
}

/* Every prompt through one engine of `batch` sequences in mode md->spec. */
static int run_mode(dsr1_model *m, bset *s, int batch, int gen, bmode *md, dsr1_error *err)
{
    dsr1_engine_options eo;
    dsr1_engine_options_default(&eo);
    eo.max_seqs = batch;
    eo.ctx = ((s->max_len + gen + DSR1_SPEC_MAX_DRAFT + 2 + 63) / 64 + 1) * 64;
    eo.spec_draft = md->spec;
    dsr1_engine *e = NULL;
    DSR1_TRY(dsr1_engine_create(&e, m, &eo, err));
    size_t cap = (size_t)eo.max_seqs * 4 + 64;
    dsr1_event *ev = malloc(dsr1_engine_max_events(e) * sizeof *ev);
    int *owner = malloc(cap * sizeof *owner), *ntok = calloc((size_t)s->n, sizeof *ntok);
    int32_t *tok = malloc((size_t)s->n * (size_t)gen * sizeof *tok);
    int rc = ev && owner && ntok && tok ? 0 : dsr1_errorf(err, DSR1_ENOMEM, "bench: out of memory");
    int next = 0, live = 0;
    double t0 = dsr1_common_now();
    while (!rc && (next < s->n || live > 0)) {
        while (!rc && live < batch && next < s->n) {
            dsr1_request rq = {.prompt = s->p[next].ids, .n_prompt = s->p[next].n,
                               .max_tokens = gen, .reuse_seq = -1};
            dsr1_sampling_default(&rq.sampling);
            rq.sampling.temperature = 0;
            int seq = -1;
            rc = dsr1_engine_submit(e, &rq, &seq, err);
            if (!rc && (seq < 0 || (size_t)seq >= cap))
                rc = dsr1_errorf(err, DSR1_EINVAL, "bench: sequence id %d out of range", seq);
            if (!rc) owner[seq] = next++, live++;
        }
        size_t n = 0;
        if (!rc) rc = dsr1_engine_step(e, ev, &n, err);
        for (size_t i = 0; i < n && !rc; i++) {
            int pi = owner[ev[i].seq];
            if (ev[i].finish == DSR1_FINISH_ERROR)
                rc = dsr1_errorf(err, DSR1_EINVAL, "bench: prompt %d: %s", pi + 1,
                                 ev[i].message ? ev[i].message : "failed");
            if (!rc && ev[i].token >= 0 && ntok[pi] < gen)
                tok[(size_t)pi * (size_t)gen + (size_t)ntok[pi]++] = ev[i].token;
            if (!rc && ev[i].finish) {
                dsr1_seq_stats st;
                dsr1_engine_seq_stats(e, ev[i].seq, &st);
                finish(md, &s->p[pi], &st, tok + (size_t)pi * (size_t)gen, ntok[pi]);
                dsr1_engine_release(e, ev[i].seq);
                live--;
            }
        }
    }
    md->seconds = dsr1_common_now() - t0;
    free(ev);
    free(owner);
    free(ntok);
    free(tok);
    dsr1_engine_free(e);
    return rc;
}

static double ratio(long a, long b) { return b ? (double)a / (double)b : 0; }

static double median(const double *v, int n)
{
    double s[MAX_ROUNDS];
    memcpy(s, v, (size_t)n * sizeof *v);
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && s[j - 1] > s[j]; j--) {
            double t = s[j];
            s[j] = s[j - 1];
            s[j - 1] = t;
        }
    return n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
}

static long sum(const long *v, int n)
{
    long t = 0;
    for (int i = 0; i < n; i++) t += v[i];
    return t;
}

static void mode_name(int spec, char *buf, size_t cap)
{
    if (spec == 0) snprintf(buf, cap, "off");
    else if (spec < 0) snprintf(buf, cap, "adaptive");
    else snprintf(buf, cap, "k=%d", spec);
}

static void print_tables(const bset *s, const bmode *md, int n_modes, int rounds)
{
    double off = median(md[0].tps, rounds);
    printf("%-9s %9s %7s %8s %8s %7s %11s %7s\n", "mode", "tok/s", "x off", "drafted", "accepted",
           "accept", "tok/step", "same");
    for (int i = 0; i < n_modes; i++) {
        char name[16];
        mode_name(md[i].spec, name, sizeof name);
        long d = sum(md[i].drafted, s->n_tags), a = sum(md[i].accepted, s->n_tags);
        double tps = median(md[i].tps, rounds);
        printf("%-9s %9.2f %6.2fx %8ld %8ld %7.2f %11.2f %7s\n", name, tps, tps / off, d, a,
               ratio(a, d), md[i].steps ? (double)(md[i].steps + a) / (double)md[i].steps : 1.0,
               md[i].differ ? "NO" : "yes");
    }
    printf("\nacceptance per tag (accepted / drafted)\n%-12s", "tag");
    for (int i = 1; i < n_modes; i++) {
        char name[16];
        mode_name(md[i].spec, name, sizeof name);
        printf(" %9s", name);
    }
    printf("\n");
    for (int t = 0; t < s->n_tags; t++) {
        printf("%-12s", s->tags[t]);
        for (int i = 1; i < n_modes; i++) {
            if (md[i].drafted[t]) printf(" %9.2f", ratio(md[i].accepted[t], md[i].drafted[t]));
            else printf(" %9s", "-");
        }
        printf("\n");
    }
}

int dsr1_bench_spec_prompts(dsr1_model *m, const char *path, int batch, int gen, int k,
                            int rounds, dsr1_error *err)
{
    bset s = {0};
    int rc = load_prompts(&s, m, path, err);
    bmode md[MAX_MODES];
    int n_modes = 0;
    md[n_modes++] = (bmode){.spec = 0};
    md[n_modes++] = (bmode){.spec = -1};
    for (int j = 1; j <= (k ? k : 3); j++) md[n_modes++] = (bmode){.spec = j};
    if (!rc) {
        printf("prompts: %s: %d prompts, %d tags; batch %d, at most %d tokens each, greedy; "
               "tokens/s end to end (prefill included), median of %d interleaved rounds\n\n",
               path, s.n, s.n_tags, batch, gen, rounds);
        bmode warm = {.spec = 0};
        rc = run_mode(m, &s, batch, gen, &warm, err); /* faults the weights in; records tokens */
    }
    if (rounds > MAX_ROUNDS) rounds = MAX_ROUNDS;
    for (int r = 0; r < rounds && !rc; r++)
        for (int i = 0; i < n_modes && !rc; i++) {
            bmode one = {.spec = md[i].spec}; /* counts: the last round's (all equal) */
            rc = run_mode(m, &s, batch, gen, &one, err);
            memcpy(one.tps, md[i].tps, sizeof one.tps);
            one.tps[r] = one.tokens / one.seconds;
            md[i] = one;
        }
    if (!rc) print_tables(&s, md, n_modes, rounds);
    set_free(&s);
    return rc;
}
