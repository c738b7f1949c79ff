/*
 * eval.c - `dsr1 eval`: how far the fast compute path (bf16 / int8
 * activations) is from the float32 path on the same model file. Both paths
 * see the same token sequences, teacher-forced (one forward over the whole
 * sequence, logits at every position), and we report:
 *   top-1 agreement, at all positions and where the f32 top-1 leads the
 *   runner-up by more than 1.0 (a clear choice that rounding should not flip);
 *   cosine similarity of the logit vectors (mean, min);
 *   KL(f32 || fast) of the softmax distributions in nats (mean, max).
 *
 * Sequences: --ids 1,2,3 | --prompts FILE (JSONL with "prompt" or "text",
 * or plain lines; tokenized with the model's tokenizer) | by default four
 * random sequences. Each is cut to --n tokens.
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "common.h"
#include "core/dsr1.h"

#define MAX_SEQS 1024

typedef struct seqs {
    int32_t *ids[MAX_SEQS]; /* each malloc'd */
    size_t len[MAX_SEQS];
    int n;
} seqs;

typedef struct stats {
    long pos, agree, clear, clear_agree;
    double cos_sum, cos_min, kl_sum, kl_max;
} stats;

/* Routing: the experts each MoE layer chose, f32 path vs fast path. */
typedef struct routing {
    long token_layers, differ;  /* (position, MoE layer) pairs; with another expert set */
    long flipped;               /* positions with a different set in some layer */
    stats same, flip;           /* the logit metrics split by that */
} routing;

static int usage(FILE *f)
{
    fprintf(f, "usage: dsr1 eval [-m MODEL] [--prompts FILE | --ids ID,ID,...] [--n N]\n"
               "                 [--ref FILE] [--kv-type bf16|fp8] [--threads N] [--json]\n"
               "                 [--deterministic] [--fp8-prefill w8a8|bf16]\n"
               "Compares the fast compute path with the float32 path (teacher-forced):\n"
               "top-1 agreement, logit cosine, KL(f32 || fast). --ref FILE takes the float32\n"
               "path of another file with the same shapes instead (the cost of a weight type,\n"
               "e.g. an INT8 LM head against a BF16 one). --deterministic: the fast path with\n"
               "only batch-invariant kernels (no oneDNN, no naive-form attention). --fp8-prefill\n"
               "bf16: the fast path with FP8 prefill in bf16 instead of W8A8 (the default),\n"
               "to measure W8A8's cost. See dsr1-eval(1).\n");
    return f == stdout ? 0 : 2;
}

static void seqs_free(seqs *s)
{
    for (int i = 0; i < s->n; i++) free(s->ids[i]);
    s->n = 0;
}

static int add_seq(seqs *s, int32_t *ids, size_t n, size_t cap, dsr1_error *err)
{
    if (n == 0) {
        free(ids);
        return 0;
    }
    if (s->n == MAX_SEQS) {
        free(ids);
        return dsr1_errorf(err, DSR1_ERANGE, "eval: more than %d sequences", MAX_SEQS);
    }
    s->ids[s->n] = ids;
    s->len[s->n++] = n < cap ? n : cap;
    return 0;
}

static int parse_ids(const char *arg, seqs *s, size_t cap, dsr1_error *err)
{
    size_t n = 0, max = strlen(arg) / 2 + 1;
    int32_t *ids = malloc(max * sizeof *ids);
    if (!ids) return dsr1_errorf(err, DSR1_ENOMEM, "eval: out of memory");
    for (const char *p = arg; *p;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 0 || v > INT32_MAX || (*end && *end != ',')) {
            free(ids);
            return dsr1_errorf(err, DSR1_EINVAL, "eval: --ids: expected comma-separated token ids, found '%s'", p);
        }
        ids[n++] = (int32_t)v;
        p = *end ? end + 1 : end;
    }
    return add_seq(s, ids, n, cap, err);
}

/* One prompt per line: a JSON object's "prompt" or "text", else the line. */
static int read_prompts(const char *path, const dsr1_tokenizer *tk, seqs *s, size_t cap,
                        dsr1_error *err)
{
    if (!tk) return dsr1_errorf(err, DSR1_EUNSUPPORTED, "eval: the model has no tokenizer: give --ids");
    dsr1_linereader *r = NULL;
    DSR1_TRY(dsr1_common_reader_open(&r, path, err));
    int rc = 0;
    for (long lineno = 1; !rc; lineno++) {
        char *line;
        size_t len;
        if ((rc = dsr1_common_reader_next(r, &line, &len, err)) || !line) break;
        cJSON *o = len && line[0] == '{' ? cJSON_ParseWithLength(line, len) : NULL;
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(o, "prompt");
        if (!cJSON_IsString(t)) t = cJSON_GetObjectItemCaseSensitive(o, "text");
        const char *text = cJSON_IsString(t) ? t->valuestring : line;
        size_t tlen = cJSON_IsString(t) ? strlen(text) : len;
        int32_t *ids = NULL;
        size_t n = 0;
        rc = dsr1_tokenizer_encode(tk, text, tlen, &ids, &n, err);
        if (rc) dsr1_error_wrap(err, "%s:%ld", path, lineno);
        else rc = add_seq(s, ids, n, cap, err);
        cJSON_Delete(o);
    }
    dsr1_common_reader_close(r);
    return rc;
}

static int random_seqs(seqs *s, int vocab, size_t n, dsr1_error *err)
{
    uint64_t x = 0xe7a1;
    for (int k = 0; k < 4; k++) {
        int32_t *ids = malloc(n * sizeof *ids);
        if (!ids) return dsr1_errorf(err, DSR1_ENOMEM, "eval: out of memory");
        for (size_t i = 0; i < n; i++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            ids[i] = (int32_t)((x >> 33) % (uint64_t)vocab);
        }
        DSR1_TRY(add_seq(s, ids, n, n, err));
    }
    return 0;
}

/* ---- metrics ----------------------------------------------------------------- */

static void log_softmax(const float *z, int v, double *out)
{
    double mx = -INFINITY, sum = 0;
    for (int i = 0; i < v; i++) mx = fmax(mx, z[i]);
    for (int i = 0; i < v; i++) sum += exp((double)z[i] - mx);
    double lse = mx + log(sum);
    for (int i = 0; i < v; i++) out[i] = (double)z[i] - lse;
}

static int argmax(const float *z, int v, double *margin)
{
    int b = 0;
    for (int i = 1; i < v; i++)
        if (z[i] > z[b]) b = i;
    double second = -INFINITY;
    for (int i = 0; i < v; i++)
        if (i != b && z[i] > second) second = z[i];
    if (margin) *margin = z[b] - second;
    return b;
}

/* Fold one position's logits (ref = f32, f = fast) into st; tmp holds 2v doubles. */
static void compare(const float *ref, const float *f, int v, double *tmp, stats *st)
{
    double margin, dot = 0, nr = 0, nf = 0, kl = 0;
    int top = argmax(ref, v, &margin), ftop = argmax(f, v, NULL);
    st->pos++;
    st->agree += top == ftop;
    if (margin > 1.0) {
        st->clear++;
        st->clear_agree += top == ftop;
    }
    for (int i = 0; i < v; i++) {
        dot += (double)ref[i] * f[i];
        nr += (double)ref[i] * ref[i];
        nf += (double)f[i] * f[i];
    }
    double cs = nr > 0 && nf > 0 ? dot / sqrt(nr * nf) : (nr == nf ? 1.0 : 0.0);
    log_softmax(ref, v, tmp);
    log_softmax(f, v, tmp + v);
    for (int i = 0; i < v; i++) kl += exp(tmp[i]) * (tmp[i] - tmp[v + i]);
    st->cos_sum += cs;
    st->cos_min = fmin(st->cos_min, cs);
    st->kl_sum += kl;
    st->kl_max = fmax(st->kl_max, kl);
}

/* Whether a and b (k experts each) hold the same set. */
static int same_set(const int32_t *a, const int32_t *b, int k)
{
    for (int i = 0; i < k; i++) {
        int found = 0;
        for (int j = 0; j < k && !found; j++) found = a[i] == b[j];
        if (!found) return 0;
    }
    return 1;
}

/* Fold position i of an n-token sequence: routing of every MoE layer
 * (experts [layers][n][k], -1 on dense layers), then the logit metrics
 * into the all / same-routing / flipped-routing groups. */
static void fold(const float *lr, const float *lf, int v, double *tmp, const int32_t *er,
                 const int32_t *ef, int layers, size_t n, int k, size_t i, stats *st, routing *ro)
{
    int differs = 0;
    for (int l = 0; l < layers; l++) {
        const int32_t *a = er + ((size_t)l * n + i) * (size_t)k, *b = ef + ((size_t)l * n + i) * (size_t)k;
        if (a[0] < 0) continue; /* dense layer */
        ro->token_layers++;
        if (!same_set(a, b, k)) {
            ro->differ++;
            differs = 1;
        }
    }
    ro->flipped += differs;
    compare(lr, lf, v, tmp, st);
    compare(lr, lf, v, tmp, differs ? &ro->flip : &ro->same);
}

/* --ref: the two files must describe the same network. */
static int same_shapes(const dsr1_model *a, const dsr1_model *b, const char *bpath, dsr1_error *err)
{
    const dsr1_config *x = dsr1_model_config(a), *y = dsr1_model_config(b);
    if (x->vocab_size != y->vocab_size || x->hidden_size != y->hidden_size ||
        x->num_hidden_layers != y->num_hidden_layers || x->n_routed_experts != y->n_routed_experts)
        return dsr1_errorf(err, DSR1_EINVAL, "%s: --ref: expected the model's shapes (vocab %d, hidden %d, "
                           "%d layers, %d experts), found vocab %d, hidden %d, %d layers, %d experts",
                           bpath, x->vocab_size, x->hidden_size, x->num_hidden_layers, x->n_routed_experts,
                           y->vocab_size, y->hidden_size, y->num_hidden_layers, y->n_routed_experts);
    return 0;
}

static int run_eval(dsr1_model *fast, dsr1_model *ref, const seqs *s, stats *st, routing *ro,
                    dsr1_error *err)
{
    const dsr1_config *c = dsr1_model_config(ref);
    int v = c->vocab_size, L = c->num_hidden_layers, K = c->num_experts_per_tok > 0 ? c->num_experts_per_tok : 1;
    size_t maxn = 0;
    for (int k = 0; k < s->n; k++) maxn = s->len[k] > maxn ? s->len[k] : maxn;
    float *lr = malloc(maxn * (size_t)v * sizeof *lr), *lf = malloc(maxn * (size_t)v * sizeof *lf);
    double *tmp = malloc(2 * (size_t)v * sizeof *tmp);
    size_t ne = (size_t)L * maxn * (size_t)K + 1;
    int32_t *er = malloc(ne * sizeof *er), *ef = malloc(ne * sizeof *ef);
    int rc = lr && lf && tmp && er && ef ? 0 : dsr1_errorf(err, DSR1_ENOMEM, "eval: out of memory");
    for (int k = 0; k < s->n && !rc; k++) {
        size_t n = s->len[k];
        for (size_t i = 0; i < n && !rc; i++)
            if (s->ids[k][i] >= v)
                rc = dsr1_errorf(err, DSR1_EINVAL, "eval: sequence %d: token id %d >= vocab %d", k + 1,
                                 s->ids[k][i], v);
        if (!rc) rc = dsr1_forward_routes(ref, s->ids[k], n, lr, er, err);
        if (!rc) rc = dsr1_forward_routes(fast, s->ids[k], n, lf, ef, err);
        for (size_t i = 0; i < n && !rc; i++)
            fold(lr + i * (size_t)v, lf + i * (size_t)v, v, tmp, er, ef, L, n, K, i, st, ro);
    }
    free(lr);
    free(lf);
    free(tmp);
    free(er);
    free(ef);
    return rc;
}

static void print_group(const char *what, const stats *g)
{
    if (!g->pos) {
        printf("  %-22s none\n", what);
        return;
    }
    printf("  %-22s %ld positions, top-1 %.2f%%, cosine mean %.6f min %.6f, KL mean %.3g max %.3g\n",
           what, g->pos, 100.0 * g->agree / g->pos, g->cos_sum / g->pos, g->cos_min,
           g->kl_sum / g->pos, g->kl_max);
}

static void report(const char *path, const char *refpath, const dsr1_model *fast, const seqs *s,
                   const stats *st, const routing *ro, int json, int kv_fp8)
{
    double pa = st->pos ? 100.0 * st->agree / st->pos : 0;
    double pc = st->clear ? 100.0 * st->clear_agree / st->clear : 100.0;
    const stats *same = &ro->same;
    if (json) {
        printf("{\"model\":\"%s\",\"ref\":\"%s\",\"sequences\":%d,\"positions\":%ld,\"top1_agree\":%.6f,"
               "\"clear_positions\":%ld,\"clear_top1_agree\":%.6f,\"cos_mean\":%.8f,\"cos_min\":%.8f,"
               "\"kl_mean\":%.8g,\"kl_max\":%.8g,\"route_token_layers\":%ld,\"route_differ\":%ld,"
               "\"route_flipped_positions\":%ld,\"same_route_cos_min\":%.8f,\"same_route_kl_max\":%.8g}\n",
               path, refpath, s->n, st->pos, pa / 100, st->clear, pc / 100, st->cos_sum / st->pos, st->cos_min,
               st->kl_sum / st->pos, st->kl_max, ro->token_layers, ro->differ, ro->flipped,
               same->pos ? same->cos_min : 1.0, same->kl_max);
        return;
    }
    printf("eval: %s\n  fast path: %s, %s KV cache\n  %d sequences, %ld positions (teacher-forced)\n",
           path, dsr1_model_describe(fast), kv_fp8 ? "fp8" : "bf16", s->n, st->pos);
    printf("  reference: float32 path of %s\n", refpath);
    printf("  top-1 agreement:      %6.2f%% (%ld/%ld)\n", pa, st->agree, st->pos);
    printf("  where f32 margin > 1: %6.2f%% (%ld/%ld)\n", pc, st->clear_agree, st->clear);
    printf("  logit cosine:         mean %.6f  min %.6f\n", st->cos_sum / st->pos, st->cos_min);
    printf("  KL(f32 || fast):      mean %.3g  max %.3g nats\n", st->kl_sum / st->pos, st->kl_max);
    if (!ro->token_layers) return;
    printf("  routing differs at %ld of %ld token-layers (%ld of %ld positions)\n", ro->differ,
           ro->token_layers, ro->flipped, st->pos);
    print_group("same routing:", &ro->same);
    print_group("routing flipped:", &ro->flip);
}

int dsr1_cmd_eval(int argc, char **argv)
{
    const char *model = NULL, *prompts = NULL, *ids = NULL, *refpath = NULL;
    int threads = 0, json = 0, kv_fp8 = 0, deterministic = 0, fp8_bf16 = 0;
    double n = 64;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int has = i + 1 < argc;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) return usage(stdout);
        if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && has) model = argv[++i];
        else if (!strcmp(a, "--prompts") && has) prompts = argv[++i];
        else if (!strcmp(a, "--ids") && has) ids = argv[++i];
        else if (!strcmp(a, "--ref") && has) refpath = argv[++i];
        else if (!strcmp(a, "--json")) json = 1;
        else if (!strcmp(a, "--deterministic")) deterministic = 1;
        else if (!strcmp(a, "--fp8-prefill") && has) {
            if (dsr1_common_fp8_prefill_arg("eval", argv[++i], &fp8_bf16)) return 2;
        }
        else if (!strcmp(a, "--kv-type") && has) {
            const char *v = argv[++i];
            if (strcmp(v, "bf16") && strcmp(v, "fp8"))
                return dsr1_cli_usage("eval", "--kv-type: expected bf16 or fp8, got '%s'", v);
            kv_fp8 = !strcmp(v, "fp8");
        }
        else if (!strcmp(a, "--n") && has) {
            if (dsr1_common_opt_num("eval", "--n", argv[++i], 1, 1 << 20, 1, &n)) return 2;
        } else if (!strcmp(a, "--threads") && has) {
            double t;
            if (dsr1_common_opt_num("eval", "--threads", argv[++i], 1, 1024, 1, &t)) return 2;
            threads = (int)t;
        } else return dsr1_cli_usage("eval", "unknown option '%s'", a);
    }
    if (prompts && ids) return dsr1_cli_usage("eval", "--prompts and --ids exclude each other");
    char path[4096];
    dsr1_error err = {0};
    if (dsr1_common_model_path(model, path, sizeof path, &err)) return dsr1_cli_fail(&err);
    dsr1_model_options fo = {.threads = threads, .compute = DSR1_COMPUTE_FAST, .kv_fp8 = kv_fp8,
                             .deterministic = deterministic, .fp8_bf16 = fp8_bf16};
    dsr1_model_options ro = {.threads = threads, .compute = DSR1_COMPUTE_F32};
    dsr1_model *fast = NULL, *ref = NULL;
    static seqs s; /* large arrays: not on the stack (cli/ may keep state) */
    stats st = {.cos_min = 1.0};
    routing rt = {.same = {.cos_min = 1.0}, .flip = {.cos_min = 1.0}};
    int rc = dsr1_model_open(&ref, refpath ? refpath : path, &ro, &err);
    if (!rc) rc = dsr1_model_open(&fast, path, &fo, &err);
    if (!rc && refpath) rc = same_shapes(fast, ref, refpath, &err);
    if (!rc && ids) rc = parse_ids(ids, &s, (size_t)n, &err);
    else if (!rc && prompts) rc = read_prompts(prompts, dsr1_model_tokenizer(ref), &s, (size_t)n, &err);
    else if (!rc) rc = random_seqs(&s, dsr1_model_config(ref)->vocab_size, (size_t)n, &err);
    if (!rc && s.n == 0) rc = dsr1_errorf(&err, DSR1_EINVAL, "eval: no tokens to evaluate");
    if (!rc) rc = run_eval(fast, ref, &s, &st, &rt, &err);
    if (!rc) report(path, refpath ? refpath : path, fast, &s, &st, &rt, json, kv_fp8);
    seqs_free(&s);
    dsr1_model_close(fast);
    dsr1_model_close(ref);
    return rc ? dsr1_cli_fail(&err) : 0;
}
