/*
 * logits.c - `dsr1 logits`: raw float32 outputs of the model for given
 * token ids, for checking dsr1 against reference implementations.
 *
 *   dsr1 logits -m MODEL --ids 5,17,42 -o out.f32
 *
 * writes logits [n, vocab] (row-major, little-endian float32): row i is the
 * distribution after ids[0..i]. --prefill N feeds the first N ids as one
 * prefill and the rest one at a time; --chunks 7,9,7 gives the chunk sizes
 * explicitly (they must sum to n); --mtp writes the MTP draft logits for
 * positions 0..n-2 instead; --hidden the final-normed hidden states
 * [n, hidden]; --f32 uses the float32 compute path. Everything goes through
 * dsr1_model_forward; this file only parses and writes.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "common.h"

typedef struct logits_args {
    const char *model, *ids, *ids_file, *out, *chunks;
    int prefill, mtp, hidden, f32, threads, numa, deterministic;
} logits_args;

static void usage(FILE *f)
{
    fprintf(f, "usage: dsr1 logits [-m MODEL] (--ids 5,17,42 | --ids-file FILE) -o OUT.f32 [options]\n"
               "  -m, --model MODEL  .dsr1 file (default: $DSR1_MODEL or the data directory)\n"
               "  --ids LIST         token ids separated by commas\n"
               "  --ids-file FILE    token ids separated by commas or whitespace\n"
               "  -o, --out FILE     output: float32 rows, row-major (- for stdout)\n"
               "  --prefill N        first N ids as one prefill, the rest one at a time\n"
               "  --chunks A,B,...   chunk sizes (must sum to the number of ids)\n"
               "  --mtp              MTP draft logits for positions 0..n-2\n"
               "  --hidden           final-normed hidden states instead of logits\n"
               "  --f32              the float32 compute path (exact)\n"
               "  --deterministic    only batch-invariant kernels (the same bits whatever the\n"
               "                     chunking; default: fast mode, oneDNN for FP8 128+ token chunks,\n"
               "                     naive-form attention for runs of 32+ tokens)\n"
               "  --threads N        worker threads (default: one per core)\n"
               "  --numa MODE        auto, off or virtual:N (CPU NUMA split; same logits)\n"
               "See dsr1-logits(1).\n");
}

/* Parse integers separated by commas and/or whitespace into a malloc'd array. */
static int parse_list(const char *s, long long **out, size_t *n, const char *what)
{
    size_t cap = 16, k = 0;
    long long *v = malloc(cap * sizeof *v);
    if (!v) return dsr1_cli_usage("logits", "out of memory");
    for (const char *p = s;;) {
        while (*p == ',' || *p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
        if (!*p) break;
        char *end;
        errno = 0;
        long long x = strtoll(p, &end, 10);
        if (end == p || errno) {
            free(v);
            return dsr1_cli_usage("logits", "%s: not a number at \"%.20s\"", what, p);
        }
        if (k == cap) {
            long long *nv = realloc(v, (cap *= 2) * sizeof *v);
            if (!nv) {
                free(v);
                return dsr1_cli_usage("logits", "out of memory");
            }
            v = nv;
        }
        v[k++] = x;
        p = end;
    }
    *out = v;
    *n = k;
    return 0;
}

static int parse_args(int argc, char **argv, logits_args *a)
{
    memset(a, 0, sizeof *a);
    a->prefill = -1;
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        int has = i + 1 < argc;
#define VAL(flag) (!strcmp(o, flag) && has ? argv[++i] : NULL)
        const char *v;
        if (!strcmp(o, "-h") || !strcmp(o, "--help")) { usage(stdout); return -1; }
        else if ((v = VAL("-m")) || (v = VAL("--model"))) a->model = v;
        else if ((v = VAL("--ids"))) a->ids = v;
        else if ((v = VAL("--ids-file"))) a->ids_file = v;
        else if ((v = VAL("-o")) || (v = VAL("--out"))) a->out = v;
        else if ((v = VAL("--chunks"))) a->chunks = v;
        else if ((v = VAL("--prefill"))) a->prefill = atoi(v);
        else if ((v = VAL("--threads"))) a->threads = atoi(v);
        else if ((v = VAL("--numa"))) {
            if (dsr1_common_numa_arg("logits", v, &a->numa)) return 2;
        }
        else if (!strcmp(o, "--mtp")) a->mtp = 1;
        else if (!strcmp(o, "--hidden")) a->hidden = 1;
        else if (!strcmp(o, "--f32")) a->f32 = 1;
        else if (!strcmp(o, "--deterministic")) a->deterministic = 1;
        else return dsr1_cli_usage("logits", "unknown or incomplete option '%s'", o);
#undef VAL
    }
    if (!a->ids == !a->ids_file) return dsr1_cli_usage("logits", "give exactly one of --ids and --ids-file");
    if (!a->out) return dsr1_cli_usage("logits", "missing -o OUT");
    if (a->mtp && a->hidden) return dsr1_cli_usage("logits", "--mtp and --hidden exclude each other");
    if (a->chunks && a->prefill >= 0) return dsr1_cli_usage("logits", "--chunks and --prefill exclude each other");
    return 0;
}

/* ids and chunk sizes from the arguments; 0, or an exit code. */
static int load_ids(const logits_args *a, int32_t **ids, size_t *n, size_t **chunks, size_t *nc)
{
    char *text = NULL;
    size_t len;
    dsr1_error err = {0};
    if (a->ids_file && dsr1_common_read_all(a->ids_file, &text, &len, &err)) return dsr1_cli_fail(&err);
    long long *v;
    int rc = parse_list(a->ids ? a->ids : text, &v, n, "ids");
    free(text);
    if (rc) return rc;
    if (!*n) {
        free(v);
        return dsr1_cli_usage("logits", "no ids given");
    }
    for (size_t i = 0; i < *n; i++)
        if (v[i] < 0 || v[i] > INT32_MAX) {
            long long bad = v[i];
            free(v);
            return dsr1_cli_usage("logits", "id %lld is not a token id", bad);
        }
    *ids = malloc(*n * sizeof **ids);
    if (!*ids) {
        free(v);
        return dsr1_cli_usage("logits", "out of memory");
    }
    for (size_t i = 0; i < *n; i++) (*ids)[i] = (int32_t)v[i];
    free(v);
    *chunks = NULL;
    *nc = 0;
    if (a->chunks) {
        long long *c;
        if ((rc = parse_list(a->chunks, &c, nc, "chunks"))) return rc;
        *chunks = malloc((*nc ? *nc : 1) * sizeof **chunks);
        long long sum = 0;
        for (size_t i = 0; i < *nc; i++) {
            if (c[i] < 1) {
                long long bad = c[i];
                free(c);
                return dsr1_cli_usage("logits", "chunk size %lld", bad);
            }
            sum += c[i];
            (*chunks)[i] = (size_t)c[i];
        }
        free(c);
        if (sum != (long long)*n)
            return dsr1_cli_usage("logits", "--chunks sum to %lld, but %zu ids were given", sum, *n);
    } else if (a->prefill >= 0) {
        if (a->prefill < 1 || (size_t)a->prefill > *n)
            return dsr1_cli_usage("logits", "--prefill %d with %zu ids", a->prefill, *n);
        *nc = 1 + *n - (size_t)a->prefill;
        *chunks = malloc(*nc * sizeof **chunks);
        (*chunks)[0] = (size_t)a->prefill;
        for (size_t i = 1; i < *nc; i++) (*chunks)[i] = 1;
    }
    return 0;
}

static int write_out(const char *path, const float *v, size_t n, dsr1_error *err)
{
    FILE *f = strcmp(path, "-") ? fopen(path, "wb") : stdout;
    if (!f) return dsr1_errorf(err, DSR1_EIO, "%s: cannot write: %s", path, strerror(errno));
    size_t w = fwrite(v, sizeof *v, n, f);
    int bad = (f == stdout ? fflush(f) : fclose(f)) != 0 || w != n;
    return bad ? dsr1_errorf(err, DSR1_EIO, "%s: write failed", path) : 0;
}

/* Check that the output can be created before spending time on the model. */
static int probe_out(const char *path, dsr1_error *err)
{
    if (!strcmp(path, "-")) return 0;
    FILE *f = fopen(path, "ab");
    if (!f) return dsr1_errorf(err, DSR1_EIO, "%s: cannot write: %s", path, strerror(errno));
    fclose(f);
    return 0;
}

static int run(const logits_args *a, const int32_t *ids, size_t n, const size_t *chunks, size_t nc)
{
    dsr1_error err = {0};
    char path[4096];
    dsr1_model *m = NULL;
    if (probe_out(a->out, &err) || dsr1_common_model_path(a->model, path, sizeof path, &err))
        return dsr1_cli_fail(&err);
    dsr1_model_options o = {.threads = a->threads, .numa_nodes = a->numa,
                            .compute = a->f32 ? DSR1_COMPUTE_F32 : DSR1_COMPUTE_FAST,
                            .deterministic = a->deterministic};
    if (dsr1_model_open(&m, path, &o, &err)) return dsr1_cli_fail(&err);
    fprintf(stderr, "model: %s: %s\n", path, dsr1_model_describe(m));
    const dsr1_config *c = dsr1_model_config(m);
    dsr1_output what = a->mtp ? DSR1_OUT_MTP : a->hidden ? DSR1_OUT_HIDDEN : DSR1_OUT_LOGITS;
    size_t rows = a->mtp ? n - 1 : n, cols = (size_t)(a->hidden ? c->hidden_size : c->vocab_size);
    float *out = malloc((rows ? rows : 1) * cols * sizeof *out);
    int rc = out ? 0 : dsr1_errorf(&err, DSR1_ENOMEM, "out of memory");
    if (!rc) rc = dsr1_model_forward(m, ids, n, chunks, nc, what, out, &err);
    if (!rc) rc = write_out(a->out, out, rows * cols, &err);
    free(out);
    dsr1_model_close(m);
    return rc ? dsr1_cli_fail(&err) : 0;
}

int dsr1_cmd_logits(int argc, char **argv)
{
    logits_args a;
    int rc = parse_args(argc, argv, &a);
    if (rc) return rc < 0 ? 0 : rc;
    int32_t *ids = NULL;
    size_t n = 0, *chunks = NULL, nc = 0;
    rc = load_ids(&a, &ids, &n, &chunks, &nc);
    if (!rc) rc = run(&a, ids, n, chunks, nc);
    free(ids);
    free(chunks);
    return rc;
}
