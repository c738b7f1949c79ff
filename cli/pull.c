/*
 * pull.c - `dsr1 pull ORG/NAME[@REV]`: fetch a model repository from the
 * Hugging Face Hub into the Hugging Face cache (convert/hub*.c does the
 * work), optionally convert it to a .dsr1 file right after.
 *
 * Owns: flags, the free-space check against the plan (the conversion's
 * output counted too when it goes to the same filesystem), the progress
 * line (dsr1_status: redrawn on a terminal, plain lines otherwise), retry
 * notes, the summary, and --convert/--delete-source (which run `dsr1
 * convert` through its own entry point, so its flags and output are the
 * same as typed by hand).
 *
 * Stdout carries only the snapshot directory (the payload: usable as
 * `dsr1 convert "$(dsr1 pull ORG/NAME)" ...`); everything else is stderr.
 * SIGINT/SIGTERM set a flag the library polls: partial files stay, and the
 * same command resumes. SIGXFSZ is ignored so a file-size limit is a write
 * error with a message, like a full disk.
 */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "cli.h"
#include "common.h"
#include "convert/hub.h"

static volatile sig_atomic_t cancelled;

static void on_signal(int sig)
{
    (void)sig;
    cancelled = 1;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: dsr1 pull ORG/NAME[@REVISION] [options]\n"
            "\n"
            "Download a model from the Hugging Face Hub into the Hugging Face cache\n"
            "($HF_HUB_CACHE, default ~/.cache/huggingface/hub), resumable and verified.\n"
            "Prints the snapshot directory on stdout. Every command that takes a model\n"
            "or checkpoint path also takes ORG/NAME[@REVISION] and finds it there.\n"
            "\n"
            "  --include GLOB          only files matching GLOB (repeatable; e.g. '*.json')\n"
            "  --dir DIR               the cache directory to use instead of the default\n"
            "  --jobs N                files downloaded at once (default 4, at most 64)\n"
            "  --retries N             tries in a row without progress before a file\n"
            "                          fails (default 8)\n"
            "  --timeout SECONDS       retry a connection silent this long (default 60)\n"
            "  --quiet                 no progress, no summary\n"
            "  --convert               convert after downloading (dsr1 convert); needs -o\n"
            "  -o, --out FILE          the .dsr1 file --convert writes\n"
            "  --type T                --convert's weight type: fp8 | int8 | int4 | bf16\n"
            "  --delete-source         after a successful --convert, delete the\n"
            "                          .safetensors blobs this pull fetched (only those)\n"
            "\n"
            "Environment: HF_TOKEN (or the token file $HF_TOKEN_PATH, else $HF_HOME/token)\n"
            "for gated or private models; HF_ENDPOINT for a mirror; HF_HUB_CACHE or HF_HOME;\n"
            "https_proxy, http_proxy, no_proxy. See dsr1-pull(1).\n");
}

typedef struct args {
    dsr1_hub_opts o;
    const char *spec, *out, *type;
    const char *include[64];
    char repo[256];
    int quiet, convert, delete_source;
} args;

static int parse_num(const char *flag, const char *v, double lo, double hi, double *out)
{
    return dsr1_common_opt_num("pull", flag, v, lo, hi, 1, out);
}

static int parse_args(args *a, int argc, char **argv)
{
    a->o.jobs = 4;
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        double n = 0;
        int has = v != NULL;
        if (!strcmp(s, "-h") || !strcmp(s, "--help")) return usage(stdout), -1;
        else if (!strcmp(s, "--quiet") || !strcmp(s, "-q")) a->quiet = 1;
        else if (!strcmp(s, "--convert")) a->convert = 1;
        else if (!strcmp(s, "--delete-source")) a->delete_source = 1;
        else if (!strcmp(s, "--include") && has) {
            if (a->o.n_include == 64) return dsr1_cli_usage("pull", "too many --include flags");
            a->include[a->o.n_include++] = argv[++i];
        } else if (!strcmp(s, "--dir") && has) a->o.cache_dir = argv[++i];
        else if ((!strcmp(s, "-o") || !strcmp(s, "--out")) && has) a->out = argv[++i];
        else if (!strcmp(s, "--type") && has) a->type = argv[++i];
        else if (!strcmp(s, "--jobs") && has) {
            if (parse_num(s, argv[++i], 1, DSR1_HUB_MAX_JOBS, &n)) return 2;
            a->o.jobs = (int)n;
        } else if (!strcmp(s, "--retries") && has) {
            if (parse_num(s, argv[++i], 1, 1000, &n)) return 2;
            a->o.max_retries = (int)n;
        } else if (!strcmp(s, "--timeout") && has) {
            if (parse_num(s, argv[++i], 1, 86400, &n)) return 2;
            a->o.stall_timeout = n;
        } else if (s[0] == '-') {
            return dsr1_cli_usage("pull", has || strncmp(s, "--", 2) ? "unknown option '%s'"
                                  : "%s needs a value", s);
        } else if (a->spec) return dsr1_cli_usage("pull", "unexpected argument '%s'", s);
        else a->spec = s;
    }
    if (!a->spec) return dsr1_cli_usage("pull", "missing ORG/NAME");
    if (!dsr1_hub_is_repo_id(a->spec))
        return dsr1_cli_usage("pull", "'%s' is not a repository id ORG/NAME[@REVISION]", a->spec);
    if ((a->out || a->type || a->delete_source) && !a->convert)
        return dsr1_cli_usage("pull", "-o, --type and --delete-source go with --convert");
    if (a->convert && !a->out) return dsr1_cli_usage("pull", "--convert needs -o OUT.dsr1");
    if (a->type && strcmp(a->type, "fp8") && strcmp(a->type, "int8") && strcmp(a->type, "int4") &&
        strcmp(a->type, "bf16"))
        return dsr1_cli_usage("pull", "--type wants fp8, int8, int4 or bf16, got '%s'", a->type);
    const char *at = strchr(a->spec, '@');
    snprintf(a->repo, sizeof a->repo, "%.*s", (int)(at ? (size_t)(at - a->spec) : strlen(a->spec)),
             a->spec);
    a->o.repo = a->repo;
    a->o.revision = at ? at + 1 : NULL;
    a->o.include = a->include;
    a->o.cancel = &cancelled;
    return 0;
}

/* ---- space ---------------------------------------------------------------------- */

/* What `dsr1 convert` would write for these safetensors: the same bytes for
 * the checkpoint's own FP8 (or int8), about half for int4, twice for bf16
 * from FP8 (a rough figure, said as "about"). */
static uint64_t convert_estimate(const dsr1_hub_plan *p, const char *type)
{
    uint64_t st = 0;
    for (size_t i = 0; i < p->n_files; i++) {
        size_t n = strlen(p->files[i].path);
        if (n > 12 && !strcmp(p->files[i].path + n - 12, ".safetensors")) st += p->files[i].size;
    }
    double f = !type ? 1.0 : !strcmp(type, "int4") ? 0.52 : !strcmp(type, "bf16") ? 2.0 : 1.0;
    return (uint64_t)((double)st * f);
}

/* The filesystem of the output's directory: 1 when it is the cache's. */
static int same_fs(const char *out, const char *cache_dir, uint64_t *free_out)
{
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", out);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = 0;
    else snprintf(dir, sizeof dir, ".");
    if (!dir[0]) snprintf(dir, sizeof dir, "/");
    struct stat a, b;
    struct statvfs v;
    *free_out = statvfs(dir, &v) == 0 ? (uint64_t)v.f_bavail * v.f_frsize : UINT64_MAX;
    return stat(dir, &a) == 0 && stat(cache_dir, &b) == 0 && a.st_dev == b.st_dev;
}

/* --convert's output directory must take the file, checked before hours of
 * download rather than after. */
static int check_out_dir(const char *out)
{
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", out);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = 0;
    else snprintf(dir, sizeof dir, ".");
    if (!dir[0]) snprintf(dir, sizeof dir, "/");
    struct stat st;
    if (stat(dir, &st) == 0 && S_ISDIR(st.st_mode) && access(dir, W_OK) == 0) return 0;
    fprintf(stderr, "dsr1: %s: cannot write the --convert output there (%s); nothing was "
            "downloaded\n", dir, stat(dir, &st) != 0 ? strerror(errno) : "not a writable directory");
    return 1;
}

static int check_space(const args *a, const dsr1_hub_plan *p, uint64_t need, uint64_t conv)
{
    char b1[32], b2[32], b3[32];
    uint64_t out_free = 0;
    int same = a->convert && same_fs(a->out, p->cache_dir, &out_free);
    uint64_t want = need + (same ? conv : 0);
    if (want > p->free_bytes) {
        fprintf(stderr, "dsr1: %s: the download needs %s%s%s, only %s free there; free some "
                "space or give --dir on a bigger disk\n", p->cache_dir,
                dsr1_common_bytes((double)need, b1, sizeof b1),
                same ? " plus the conversion about " : "",
                same ? dsr1_common_bytes((double)conv, b2, sizeof b2) : "",
                dsr1_common_bytes((double)p->free_bytes, b3, sizeof b3));
        return 1;
    }
    if (a->convert && !same && conv > out_free) {
        fprintf(stderr, "dsr1: %s: the conversion writes about %s, only %s free there\n", a->out,
                dsr1_common_bytes((double)conv, b1, sizeof b1),
                dsr1_common_bytes((double)out_free, b2, sizeof b2));
        return 1;
    }
    return 0;
}

static void describe(const args *a, const dsr1_hub_plan *p, uint64_t need, uint64_t conv)
{
    char b1[32], b2[32], b3[32];
    fprintf(stderr, "dsr1 pull: %s@%s (commit %.12s): %zu files, %s", p->repo, p->revision,
            p->commit, p->n_files, dsr1_common_bytes((double)p->bytes_total, b1, sizeof b1));
    if (p->n_cached)
        fprintf(stderr, "; %zu already in the cache", p->n_cached);
    if (p->bytes_partial)
        fprintf(stderr, "; %s kept from an earlier try",
                dsr1_common_bytes((double)p->bytes_partial, b2, sizeof b2));
    fprintf(stderr, "\n  fetching %s into %s (%s free)\n", dsr1_common_bytes((double)need, b1, sizeof b1),
            p->repo_dir, dsr1_common_bytes((double)p->free_bytes, b3, sizeof b3));
    if (conv)
        fprintf(stderr, "  %s (%s types) writes about %s more%s\n",
                a->convert ? "the conversion after it" : "converting it (dsr1 convert)",
                a->type ? a->type : "the checkpoint's", dsr1_common_bytes((double)conv, b2, sizeof b2),
                a->convert && a->delete_source ? "; the fetched sources are deleted after it" : "");
}

/* ---- progress ----------------------------------------------------------------- */

typedef struct prog {
    dsr1_status st;
    double t0;
    uint64_t start;   /* bytes already there at the start (partials) */
    int have_start;
} prog;

static void on_progress(const dsr1_hub_progress *p, void *ctx)
{
    prog *g = ctx;
    if (!g->have_start) {
        g->start = p->done;
        g->have_start = 1;
    }
    if (p->note) {
        dsr1_common_status_clear(&g->st);
        fprintf(stderr, "dsr1 pull: %s\n", p->note);
        return;
    }
    double el = dsr1_common_now() - g->t0;
    double got = p->done > g->start ? (double)(p->done - g->start) : 0;
    double rate = el > 0 ? got / el : 0;
    double frac = p->total ? (double)p->done / (double)p->total : 1;
    double eta = rate > 0 ? (double)(p->total - (p->done < p->total ? p->done : p->total)) / rate : 0;
    char done[32], total[32], bar[31];
    int fill = (int)(frac * 30);
    for (int i = 0; i < 30; i++) bar[i] = i < fill ? '#' : '.';
    bar[30] = 0;
    dsr1_common_status(&g->st, 0, "pulling [%s] %3.0f%% %s / %s  %.0f MB/s  ETA %.0fs  files %zu/%zu",
                       bar, frac * 100, dsr1_common_bytes((double)p->done, done, sizeof done),
                       dsr1_common_bytes((double)p->total, total, sizeof total), rate / 1e6, eta,
                       p->files_done, p->files_total);
}

/* ---- --convert ------------------------------------------------------------------ */

static int convert_after(const args *a, dsr1_hub_plan *p)
{
    char *argv[8];
    int n = 0;
    argv[n++] = "convert";
    argv[n++] = p->snapshot;
    argv[n++] = "-o";
    argv[n++] = (char *)a->out;
    if (a->type) {
        argv[n++] = "--type";
        argv[n++] = (char *)a->type;
    }
    if (a->quiet) argv[n++] = "--quiet";
    argv[n] = NULL;
    int rc = dsr1_cmd_convert(n, argv);
    if (rc || !a->delete_source) return rc;
    uint64_t freed = dsr1_hub_delete_fetched(p, "*.safetensors");
    char b[32];
    if (!a->quiet)
        fprintf(stderr, "dsr1 pull: --delete-source: deleted the .safetensors this pull fetched "
                "(%s); the snapshot keeps the rest\n", dsr1_common_bytes((double)freed, b, sizeof b));
    return 0;
}

int dsr1_cmd_pull(int argc, char **argv)
{
    args a;
    memset(&a, 0, sizeof a);
    int rc = parse_args(&a, argc, argv);
    if (rc) return rc < 0 ? 0 : rc;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGXFSZ, SIG_IGN);
    dsr1_error err = {0};
    dsr1_hub_plan p;
    if (a.convert && check_out_dir(a.out)) return 1;
    if (dsr1_hub_plan_create(&p, &a.o, &err)) return dsr1_cli_fail(&err);
    uint64_t need = p.bytes_total - p.bytes_cached - p.bytes_partial - p.bytes_dup;
    uint64_t conv = convert_estimate(&p, a.type);
    if (!a.quiet) describe(&a, &p, need, conv);
    if (check_space(&a, &p, need, conv)) {
        dsr1_hub_plan_free(&p);
        return 1;
    }
    prog g = {.t0 = dsr1_common_now()};
    dsr1_common_status_init(&g.st, a.quiet);
    rc = dsr1_hub_fetch(&p, &a.o, a.quiet ? NULL : on_progress, &g, &err);
    dsr1_common_status_clear(&g.st);
    if (rc) {
        dsr1_hub_plan_free(&p);
        return dsr1_cli_fail(&err);
    }
    size_t fetched = 0, dups = 0;
    uint64_t bytes = 0;
    for (size_t i = 0; i < p.n_files; i++) {
        if (p.files[i].fetched) fetched++, bytes += p.files[i].size - p.files[i].partial;
        dups += p.files[i].dup && !p.files[i].cached;
    }
    char dup_note[64] = "";
    if (dups) snprintf(dup_note, sizeof dup_note, ", %zu the same as another", dups);
    double el = dsr1_common_now() - g.t0;
    char b[32];
    if (!a.quiet)
        fprintf(stderr, "dsr1 pull: %zu files verified (%zu fetched, %zu already cached%s): %s "
                "downloaded in %.1f s (%.0f MB/s)\n  %s\n", p.n_files, fetched, p.n_cached, dup_note,
                dsr1_common_bytes((double)bytes, b, sizeof b), el, el > 0 ? (double)bytes / 1e6 / el : 0,
                p.snapshot);
    printf("%s\n", p.snapshot);
    fflush(stdout);
    rc = a.convert ? convert_after(&a, &p) : 0;
    dsr1_hub_plan_free(&p);
    return rc;
}
