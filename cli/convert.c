/*
 * convert.c - `dsr1 convert SRC_DIR -o OUT.dsr1 [options]`: options, signals,
 * progress and the summary; the work is convert/convert.c.
 *
 * --default: the output also becomes the user's default model, i.e. its
 * absolute path goes into <data dir>/default, the file
 * dsr1_common_model_path reads (data dir: $XDG_DATA_HOME/dsr1, else
 * ~/.local/share/dsr1). Without -o the model itself goes into the data dir
 * as <checkpoint basename>.dsr1. The data dir is created before converting
 * (a failure there costs no conversion time), and `default` is replaced
 * atomically (temp file + rename) only after the model is written and
 * verified, so a reader never sees a half-written or dangling default.
 *
 * SIGINT/SIGTERM only set a flag that the library polls, so an interrupted
 * run unwinds through the library's normal error path, which removes the
 * temp file. SIGXFSZ is ignored so a file-size limit (ulimit -f) shows up as
 * a write error (EFBIG) with a message instead of killing the process
 * before cleanup.
 */
#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "common.h"
#include "convert/convert.h"
#include "convert/hub.h"

static volatile sig_atomic_t cancelled;

static void on_signal(int sig)
{
    (void)sig;
    cancelled = 1;
}

static void install_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGXFSZ, SIG_IGN);
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: dsr1 convert SRC_DIR (-o OUT.dsr1 | --default) [options]\n"
            "\n"
            "Pack a Hugging Face DeepSeek checkpoint directory into one .dsr1 file.\n"
            "\n"
            "  -o, --out FILE          output file (written as FILE.tmp-PID, renamed at the end)\n"
            "  --default               make the output the default model (dsr1 chat/run without\n"
            "                          -m); without -o, write it to the data directory\n"
            "                          ($XDG_DATA_HOME/dsr1 or ~/.local/share/dsr1) as\n"
            "                          <SRC_DIR name>.dsr1\n"
            "  --type T                linear weights as fp8 | int8 | int4 | bf16\n"
            "                          (default: keep the checkpoint's types)\n"
            "  --type-for PATTERN=T    glob on output tensor names; later flags win;\n"
            "                          T also f16 | f32 (e.g. 'lm_head.weight=int8')\n"
            "  --threads N             quantiser threads (default: one per core, at most 32)\n"
            "  --no-verify             skip re-reading the output to check its hashes\n"
            "  --quiet                 no progress, no summary\n"
            "\n"
            "What each type costs: bytes per weight including its scales, and the RMS error\n"
            "of the dequantised weights relative to their RMS (measured on Gaussian weights\n"
            "and, in brackets, on `gen_ckpt --preset small`; FP8 and BF16 sources):\n"
            "  fp8   1.0002 B  F32 scale per 128x128 block.  FP8 source: exact (bytes and\n"
            "                  scales copied).  BF16 source: 2.7%% (2.6%%).\n"
            "  int8  1.0006 B  F32 scale per output row (in = 7168).  0.9%% (0.4%%);\n"
            "                  near-lossless.\n"
            "  int4  0.516 B   F16 scale per 128 columns (0.5625 B with groups of 32, used\n"
            "                  when in %% 128 != 0).  12%% (7-8%%): the smallest file, with\n"
            "                  an accuracy cost to check on your prompts (dsr1-logits(1)).\n"
            "  bf16  2 B       BF16 source: exact.  FP8 source: 0.17%%.\n"
            "Norms, the router and its bias stay F32; embeddings and LM heads keep their type.\n"
            "See dsr1-convert(1) for whole-model sizes.\n");
}

typedef struct cli_opts {
    dsr1_convert_opts o;
    dsr1_convert_rule rules[64];
    int quiet, make_default;
    char data_dir[PATH_MAX];  /* with --default */
    char out_buf[PATH_MAX];   /* the output path when --default chose it */
    char src_buf[PATH_MAX];   /* SRC_DIR, or the cache snapshot of a repo id */
    const char *src_given;    /* SRC_DIR as typed (names the model) */
} cli_opts;

static int parse_rule(cli_opts *c, const char *arg)
{
    const char *eq = strrchr(arg, '=');
    if (!eq || eq == arg)
        return dsr1_cli_usage("convert", "--type-for wants PATTERN=TYPE, got '%s'", arg);
    if (c->o.n_rules == sizeof c->rules / sizeof *c->rules)
        return dsr1_cli_usage("convert", "too many --type-for flags");
    dsr1_convert_rule *r = &c->rules[c->o.n_rules];
    if (dsr1_type_from_name(eq + 1, &r->type) || r->type == DSR1_T_BLOB)
        return dsr1_cli_usage("convert", "--type-for '%s': unknown type '%s' "
                              "(fp8, int8, int4, bf16, f16, f32)", arg, eq + 1);
    char *pat = strndup(arg, (size_t)(eq - arg));
    if (!pat) return dsr1_cli_usage("convert", "out of memory");
    r->pattern = pat;
    c->o.n_rules++;
    return 0;
}

static int parse_type(cli_opts *c, const char *v)
{
    if (!v || dsr1_type_from_name(v, &c->o.type) ||
        (c->o.type != DSR1_T_FP8_E4M3 && c->o.type != DSR1_T_INT8 && c->o.type != DSR1_T_INT4 &&
         c->o.type != DSR1_T_BF16))
        return dsr1_cli_usage("convert", "--type wants fp8, int8, int4 or bf16, got '%s'", v ? v : "");
    c->o.has_type = 1;
    return 0;
}

/* One quantiser thread per CPU this process may run on (cgroup/taskset
 * limits included), up to the library's cap. */
static int default_threads(void)
{
    cpu_set_t set;
    int n = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set)
                                                       : (int)sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > DSR1_CONVERT_MAX_THREADS ? DSR1_CONVERT_MAX_THREADS : n;
}

static int parse_args(cli_opts *c, int argc, char **argv)
{
    c->o.threads = default_threads();
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int rc = 0;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return -1;
        } else if (!strcmp(a, "-o") || !strcmp(a, "--out")) {
            if (!v) return dsr1_cli_usage("convert", "%s needs a file name", a);
            c->o.out_path = v;
            i++;
        } else if (!strcmp(a, "--type")) {
            rc = parse_type(c, v);
            i++;
        } else if (!strcmp(a, "--type-for")) {
            if (!v) return dsr1_cli_usage("convert", "--type-for needs PATTERN=TYPE");
            rc = parse_rule(c, v);
            i++;
        } else if (!strcmp(a, "--threads")) {
            double n;
            rc = dsr1_common_opt_num("convert", a, v, 1, DSR1_CONVERT_MAX_THREADS, 1, &n);
            c->o.threads = (int)n;
            i++;
        } else if (!strcmp(a, "--quiet") || !strcmp(a, "-q")) {
            c->quiet = 1;
        } else if (!strcmp(a, "--no-verify")) {
            c->o.no_verify = 1;
        } else if (!strcmp(a, "--default")) {
            c->make_default = 1;
        } else if (a[0] == '-' && a[1]) {
            return dsr1_cli_usage("convert", "unknown option '%s'", a);
        } else if (!c->o.src_dir) {
            c->o.src_dir = a;
        } else {
            return dsr1_cli_usage("convert", "unexpected argument '%s'", a);
        }
        if (rc) return rc;
    }
    if (!c->o.src_dir) return dsr1_cli_usage("convert", "missing SRC_DIR");
    if (!c->o.out_path && !c->make_default)
        return dsr1_cli_usage("convert", "missing -o OUT.dsr1 (or --default)");
    return 0;
}

/* ---- --default ---------------------------------------------------------- */

/* mkdir -p: every missing component of path, then check it is a directory. */
static int make_dirs(const char *path, dsr1_error *err)
{
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s", path);
    for (char *s = p + 1;; s++) {
        if (*s && *s != '/') continue;
        char was = *s;
        *s = 0;
        if (mkdir(p, 0755) != 0 && errno != EEXIST)
            return dsr1_errorf(err, DSR1_EIO, "%s: cannot create the data directory: %s", p,
                               strerror(errno));
        if (!was) break;
        *s = was;
    }
    struct stat st;
    if (stat(p, &st) != 0 || !S_ISDIR(st.st_mode))
        return dsr1_errorf(err, DSR1_EIO, "%s: not a directory (the data directory for "
                           "--default)", p);
    return 0;
}

/* The name to call a checkpoint by: the last component of the path as
 * given (not resolved: a symlink named DeepSeek-R1 into a Hugging Face
 * cache snapshot should give "DeepSeek-R1", not the snapshot hash); ".",
 * ".." and "/" are resolved first. */
static int checkpoint_name(const char *src, char *out, size_t cap, dsr1_error *err)
{
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s", src);
    size_t n = strlen(p);
    while (n > 1 && p[n - 1] == '/') p[--n] = 0;
    const char *base = strrchr(p, '/') ? strrchr(p, '/') + 1 : p;
    if (!*base || !strcmp(base, ".") || !strcmp(base, "..")) {
        char abs[PATH_MAX];
        if (!realpath(src, abs)) return dsr1_errorf(err, DSR1_ENOTFOUND, "%s: %s", src, strerror(errno));
        snprintf(p, sizeof p, "%s", abs);
        base = strrchr(p, '/') + 1;
    }
    if (!*base) return dsr1_errorf(err, DSR1_EINVAL, "%s: no name to call the model by; give -o", src);
    snprintf(out, cap, "%s", base);
    return 0;
}

/* Before converting: create the data directory and, without -o, choose
 * <data dir>/<checkpoint name>.dsr1. */
static int prepare_default(cli_opts *c, dsr1_error *err)
{
    dsr1_common_data_dir(c->data_dir, sizeof c->data_dir);
    DSR1_TRY(make_dirs(c->data_dir, err));
    if (c->o.out_path) return 0;
    char name[NAME_MAX + 1];
    DSR1_TRY(checkpoint_name(c->src_given, name, sizeof name, err));
    if (dsr1_hub_is_repo_id(c->src_given)) name[strcspn(name, "@")] = 0; /* ORG/NAME@REV */
    snprintf(c->out_buf, sizeof c->out_buf, "%s/%s.dsr1", c->data_dir, name);
    c->o.out_path = c->out_buf;
    return 0;
}

/* After a verified conversion: <data dir>/default <- absolute output path,
 * through a temp file and rename(2), so readers see the old or the new
 * default, never a torn one. Fills abs with the path written. */
static int write_default(const cli_opts *c, char *abs, dsr1_error *err)
{
    char tmp[PATH_MAX + 32], dst[PATH_MAX + 16];
    if (!realpath(c->o.out_path, abs))
        return dsr1_errorf(err, DSR1_EIO, "%s: %s", c->o.out_path, strerror(errno));
    snprintf(dst, sizeof dst, "%s/default", c->data_dir);
    snprintf(tmp, sizeof tmp, "%s/default.tmp-%ld", c->data_dir, (long)getpid());
    FILE *f = fopen(tmp, "w");
    int ok = f && fprintf(f, "%s\n", abs) > 0 && fflush(f) == 0 && fsync(fileno(f)) == 0;
    int saved = errno;
    if (f && fclose(f) != 0 && ok) {
        ok = 0;
        saved = errno;
    }
    if (ok && rename(tmp, dst) != 0) {
        ok = 0;
        saved = errno;
    }
    if (ok) return 0;
    unlink(tmp);
    return dsr1_errorf(err, DSR1_EIO, "%s: cannot write: %s (the model itself is complete: %s)",
                       dst, strerror(saved), abs);
}

/* ---- progress and summary --------------------------------------------- */

typedef struct prog {
    dsr1_status st;
    double t0;
    int phase;
} prog;

static void on_progress(const dsr1_convert_progress *p, void *ctx)
{
    prog *g = ctx;
    if (p->phase != g->phase) { /* the verify pass gets its own rate and ETA */
        g->phase = p->phase;
        g->t0 = dsr1_common_now();
    }
    double el = dsr1_common_now() - g->t0, frac = p->total ? (double)p->done / (double)p->total : 1;
    double mbs = el > 0 ? (double)p->done / 1e6 / el : 0;
    double eta = frac > 0 && frac < 1 ? el / frac - el : 0;
    char done[32], total[32], bar[31];
    int fill = (int)(frac * 30);
    for (int i = 0; i < 30; i++) bar[i] = i < fill ? '#' : '.';
    bar[30] = 0;
    dsr1_common_status(&g->st, frac >= 1.0, "%s [%s] %3.0f%% %s / %s  %.0f MB/s  ETA %.0fs%s%s",
                       p->phase ? "verifying " : "converting", bar, frac * 100,
                       dsr1_common_bytes((double)p->done, done, sizeof done),
                       dsr1_common_bytes((double)p->total, total, sizeof total), mbs, eta,
                       p->tensor ? "  " : "", p->tensor ? p->tensor : "");

}

static void summary(const cli_opts *c, const dsr1_convert_stats *s, const char *default_path)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    char b[32];
    fprintf(stderr, "dsr1 convert: %s -> %s\n", c->o.src_dir, c->o.out_path);
    for (int t = 0; t < DSR1_T_COUNT; t++)
        if (s->count[t])
            fprintf(stderr, "  %-5s %6llu tensors %12s\n", dsr1_type_name((dsr1_type)t),
                    (unsigned long long)s->count[t], dsr1_common_bytes((double)s->bytes[t], b, sizeof b));
    if (s->n_kept)
        fprintf(stderr, "  %zu tensor(s) kept their source type: `in` is not a multiple of 32 "
                "(INT4 groups), e.g. %s\n", s->n_kept, s->first_kept);
    fprintf(stderr, "  file %s (%llu bytes), %.1f s, %.0f MB/s read, peak RSS %.0f MiB%s\n",
            dsr1_common_bytes((double)s->file_size, b, sizeof b), (unsigned long long)s->file_size,
            s->seconds, s->seconds > 0 ? (double)s->src_bytes / 1e6 / s->seconds : 0,
            (double)ru.ru_maxrss / 1024.0, c->o.no_verify ? ", not verified" : ", verified");
    if (default_path)
        fprintf(stderr, "  default model: %s (written to %s/default)\n", default_path, c->data_dir);
}

static void free_rules(cli_opts *c)
{
    for (size_t i = 0; i < c->o.n_rules; i++) free((char *)c->rules[i].pattern);
}

int dsr1_cmd_convert(int argc, char **argv)
{
    cli_opts c;
    memset(&c, 0, sizeof c);
    dsr1_error err = {0};
    int rc = parse_args(&c, argc, argv);
    if (!rc) { /* a repo id (ORG/NAME[@REV]) becomes its Hugging Face cache snapshot */
        c.src_given = c.o.src_dir;
        if (dsr1_common_resolve_path(c.o.src_dir, c.src_buf, sizeof c.src_buf, &err))
            rc = dsr1_cli_fail(&err);
        c.o.src_dir = c.src_buf;
    }
    if (!rc && c.make_default && prepare_default(&c, &err)) rc = dsr1_cli_fail(&err);
    if (rc) {
        free_rules(&c);
        return rc < 0 ? 0 : rc;
    }
    c.o.rules = c.rules;
    prog g;
    dsr1_common_status_init(&g.st, c.quiet);
    g.t0 = dsr1_common_now();
    g.phase = 0;
    c.o.progress = c.quiet ? NULL : on_progress;
    c.o.progress_ctx = &g;
    c.o.cancel = &cancelled;
    install_signals();
    dsr1_convert_stats st;
    rc = dsr1_convert(&c.o, &st, &err);
    dsr1_common_status_clear(&g.st);
    free_rules(&c);
    if (rc) {
        dsr1_cli_fail(&err);
        return st.usage_error ? 2 : 1;
    }
    char abs[PATH_MAX];
    if (c.make_default && write_default(&c, abs, &err)) return dsr1_cli_fail(&err);
    if (!c.quiet) summary(&c, &st, c.make_default ? abs : NULL);
    return 0;
}
