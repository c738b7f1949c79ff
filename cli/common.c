/*
 * common.c - the shared CLI helpers declared in common.h: model selection,
 * the stderr status line, colour, model loading with progress, and JSONL
 * readers/writers over plain or zstd files.
 *
 * Not here: anything about requests, chat or batching (run*.c, chat*.c).
 *
 * Invariants: records go out with one write(2) each and nothing is buffered
 * between records, so an interrupted run loses at most the record being
 * written, and dsr1_common_read_back can always find where to continue.
 */
#include "common.h"

#include "cli.h"
#include "convert/hub.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zstd.h>

/* ---- model selection -------------------------------------------------- */

void dsr1_common_data_dir(char *out, size_t cap)
{
    const char *x = getenv("XDG_DATA_HOME"), *home = getenv("HOME");
    if (x && *x)
        snprintf(out, cap, "%s/dsr1", x);
    else
        snprintf(out, cap, "%s/.local/share/dsr1", home && *home ? home : ".");
}

/* A path given by the user (flag or env): must be a file, and a checkpoint
 * directory gets the conversion command instead of a bare "not a file". */
static int check_model_file(const char *p, const char *source, dsr1_error *err)
{
    struct stat st;
    if (stat(p, &st) != 0)
        return dsr1_errorf(err, DSR1_ENOTFOUND, "%s: %s (from %s)", p, strerror(errno), source);
    if (S_ISDIR(st.st_mode)) {
        char cfg[4096];
        snprintf(cfg, sizeof cfg, "%s/config.json", p);
        if (access(cfg, R_OK) == 0)
            return dsr1_errorf(err, DSR1_EINVAL,
                               "%s: a checkpoint directory, not a .dsr1 file; convert it once "
                               "with: dsr1 convert %s -o model.dsr1 --default",
                               p, p);
        return dsr1_errorf(err, DSR1_EINVAL, "%s: a directory, expected a .dsr1 file", p);
    }
    return 0;
}

static void trim(char *s)
{
    size_t n = strlen(s);
    while (n && (s[n - 1] == '\n' || s[n - 1] == '\r' || s[n - 1] == ' ' || s[n - 1] == '\t'))
        s[--n] = 0;
}

/* The `default` file of the data directory, if any. 1 found, 0 not. */
static int read_default(const char *dir, char *out, size_t cap)
{
    char p[4096], line[4096];
    snprintf(p, sizeof p, "%s/default", dir);
    FILE *f = fopen(p, "r");
    if (!f) return 0;
    int ok = fgets(line, sizeof line, f) != NULL;
    fclose(f);
    if (!ok) return 0;
    trim(line);
    if (!line[0]) return 0;
    if (line[0] == '/')
        snprintf(out, cap, "%s", line);
    else
        snprintf(out, cap, "%s/%s", dir, line);
    return 1;
}

/* The *.dsr1 files in dir: count, the first name into out, all into list. */
static int scan_models(const char *dir, char *out, size_t cap, char *list, size_t lcap)
{
    DIR *d = opendir(dir);
    if (!d) return 0;
    int n = 0;
    struct dirent *e;
    list[0] = 0;
    while ((e = readdir(d))) {
        size_t l = strlen(e->d_name);
        if (l <= 5 || strcmp(e->d_name + l - 5, ".dsr1")) continue;
        if (n++ == 0) snprintf(out, cap, "%s/%s", dir, e->d_name);
        size_t used = strlen(list);
        snprintf(list + used, lcap - used, "%s%s", used ? ", " : "", e->d_name);
    }
    closedir(d);
    return n;
}

/* A name that is a file's, never a repository's: "models/r1.dsr1" missing
 * should say "no such file", not suggest `dsr1 pull models/r1.dsr1`. */
static int file_like(const char *s)
{
    static const char *const ext[] = {".dsr1", ".json", ".safetensors", ".jsonl", ".zst", ".txt"};
    size_t n = strlen(s);
    for (size_t i = 0; i < sizeof ext / sizeof *ext; i++) {
        size_t e = strlen(ext[i]);
        if (n > e && !strcmp(s + n - e, ext[i])) return 1;
    }
    return 0;
}

int dsr1_common_resolve_path(const char *arg, char *out, size_t cap, dsr1_error *err)
{
    struct stat st;
    snprintf(out, cap, "%s", arg);
    if (stat(arg, &st) == 0 || !dsr1_hub_is_repo_id(arg) || file_like(arg)) return 0;
    char snap[4096], list[1024];
    DSR1_TRY(dsr1_hub_resolve(arg, NULL, snap, sizeof snap, err));
    if (scan_models(snap, out, cap, list, sizeof list) != 1) snprintf(out, cap, "%s", snap);
    return 0;
}

int dsr1_common_model_path(const char *flag, char *out, size_t cap, dsr1_error *err)
{
    if (flag) {
        DSR1_TRY(dsr1_common_resolve_path(flag, out, cap, err));
        return check_model_file(out, "-m", err);
    }
    const char *env = getenv("DSR1_MODEL");
    if (env && *env) {
        DSR1_TRY(dsr1_common_resolve_path(env, out, cap, err));
        return check_model_file(out, "DSR1_MODEL", err);
    }
    char dir[4096], list[1024];
    dsr1_common_data_dir(dir, sizeof dir);
    if (read_default(dir, out, cap)) return check_model_file(out, "the default file", err);
    int n = scan_models(dir, out, cap, list, sizeof list);
    if (n == 1) return 0;
    if (n > 1)
        return dsr1_errorf(err, DSR1_ENOTFOUND,
                           "%s: several models (%s) and no default; pick one with -m FILE "
                           "or write its name into %s/default",
                           dir, list, dir);
    return dsr1_errorf(err, DSR1_ENOTFOUND,
                       "no model: give -m FILE or set DSR1_MODEL, or convert a Hugging Face "
                       "checkpoint once with: dsr1 convert CHECKPOINT_DIR --default (it goes "
                       "into %s)",
                       dir);
}

/* ---- options ------------------------------------------------------------ */

int dsr1_common_opt_num(const char *cmd, const char *flag, const char *val, double lo, double hi,
                        int integer, double *out)
{
    char *end;
    errno = 0;
    double v = val ? strtod(val, &end) : 0;
    if (!val || end == val || *end || errno || v < lo || v > hi || (integer && v != (long long)v))
        return dsr1_cli_usage(cmd, "%s %s: expected %s in [%g, %g]", flag, val ? val : "",
                              integer ? "an integer" : "a number", lo, hi);
    *out = v;
    return 0;
}

/* ---- settings: one spelling each ----------------------------------------- */

/* Canonical names are OpenAI's JSON names; the flag is the same with
 * dashes; aliases are what llama.cpp, vLLM and older dsr1 spell. `dsr1 run`
 * request lines, the run/chat flags and chat's /set all read this table. */
static const dsr1_setting settings[] = {
    {"max_tokens", "--max-tokens", "max_completion_tokens n_predict predict", 1, 1 << 30, 1},
    {"temperature", "--temperature", "temp", 0, 100, 0},
    {"top_p", "--top-p", "", 0, 1, 0},
    {"top_k", "--top-k", "", 0, 1 << 30, 1},
    {"min_p", "--min-p", "", 0, 1, 0},
    {"repetition_penalty", "--repetition-penalty", "repeat_penalty", 0.001, 100, 0},
    {"presence_penalty", "--presence-penalty", "", -2, 2, 0},
    {"frequency_penalty", "--frequency-penalty", "", -2, 2, 0},
    {"seed", "--seed", "", 0, 9007199254740992.0, 1},
};

const dsr1_setting *dsr1_common_settings(size_t *n)
{
    *n = sizeof settings / sizeof settings[0];
    return settings;
}

/* a == b with '-' and '_' the same. */
static int same_name(const char *a, const char *b, size_t bn)
{
    size_t i = 0;
    for (; i < bn && a[i]; i++)
        if (a[i] != b[i] && !((a[i] == '-' || a[i] == '_') && (b[i] == '-' || b[i] == '_')))
            return 0;
    return i == bn && !a[i];
}

const dsr1_setting *dsr1_common_setting(const char *name)
{
    while (*name == '-') name++;
    for (size_t i = 0; i < sizeof settings / sizeof settings[0]; i++) {
        const dsr1_setting *t = &settings[i];
        if (same_name(name, t->name, strlen(t->name))) return t;
        for (const char *a = t->aliases; *a;) {
            size_t l = strcspn(a, " ");
            if (same_name(name, a, l)) return t;
            a += l;
            while (*a == ' ') a++;
        }
    }
    return NULL;
}

size_t dsr1_common_edit_distance(const char *a, const char *b)
{
    /* Optimal string alignment distance (Damerau-Levenshtein without
     * repeated edits of a substring): a swap of neighbours costs 1, the
     * usual typo. Three rows; names are short, longer input is cut. */
    enum { L = 64 };
    size_t n = strlen(a), m = strlen(b);
    if (n > L) n = L;
    if (m > L) m = L;
    size_t r0[L + 1], r1[L + 1], r2[L + 1];
    size_t *pp = r0, *p = r1, *c = r2;
    for (size_t j = 0; j <= m; j++) p[j] = j;
    for (size_t i = 1; i <= n; i++) {
        c[0] = i;
        for (size_t j = 1; j <= m; j++) {
            size_t cost = a[i - 1] != b[j - 1];
            size_t v = p[j] + 1;
            if (c[j - 1] + 1 < v) v = c[j - 1] + 1;
            if (p[j - 1] + cost < v) v = p[j - 1] + cost;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
                pp[j - 2] + 1 < v)
                v = pp[j - 2] + 1;
            c[j] = v;
        }
        size_t *t = pp;
        pp = p;
        p = c;
        c = t;
    }
    return p[m];
}

const char *dsr1_common_suggest(const char *word, const char *const *cands, size_t n)
{
    const char *best = NULL;
    size_t bd = (size_t)-1, wl = strlen(word);
    /* Close enough to be a typo: at most 2 edits, and fewer than a third
     * of the word (so "ab" does not suggest "cd"). */
    size_t limit = wl / 3 < 2 ? wl / 3 : 2;
    if (limit == 0 && wl >= 2) limit = 1;
    for (size_t i = 0; i < n; i++) {
        size_t d = dsr1_common_edit_distance(word, cands[i]);
        if (d < bd) bd = d, best = cands[i];
    }
    return best && bd > 0 && bd <= limit ? best : NULL;
}

/* ---- terminal ----------------------------------------------------------- */

int dsr1_common_use_color(int fd, int no_color_flag)
{
    if (no_color_flag) return 0;
    const char *nc = getenv("NO_COLOR");
    if (nc && *nc) return 0;
    const char *term = getenv("TERM");
    if (term && !strcmp(term, "dumb")) return 0;
    return isatty(fd);
}

double dsr1_common_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void dsr1_common_status_init(dsr1_status *s, int quiet)
{
    s->tty = isatty(2);
    s->quiet = quiet;
    s->shown = 0;
    s->last = -1e9;
    s->plain_interval = 5.0;
}

void dsr1_common_status(dsr1_status *s, int force, const char *fmt, ...)
{
    if (s->quiet) return;
    double now = dsr1_common_now();
    double gap = s->tty ? 0.1 : s->plain_interval;
    if (!force && now - s->last < gap) return;
    s->last = now;
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (s->tty) {
        fprintf(stderr, "\r\033[K%s", line);
        s->shown = 1;
    } else {
        fprintf(stderr, "%s\n", line);
    }
    fflush(stderr);
}

void dsr1_common_status_clear(dsr1_status *s)
{
    if (s->tty && s->shown && !s->quiet) {
        fputs("\r\033[K", stderr);
        fflush(stderr);
    }
    s->shown = 0;
}

const char *dsr1_common_bytes(double bytes, char *buf, size_t cap)
{
    const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (bytes >= 1024 && u < 4) bytes /= 1024, u++;
    snprintf(buf, cap, u ? "%.1f %s" : "%.0f %s", bytes, unit[u]);
    return buf;
}

typedef struct load_ctx {
    dsr1_status *st;
    const char *name;
} load_ctx;

static void load_progress(double frac, const char *what, void *ctx)
{
    load_ctx *c = ctx;
    dsr1_common_status(c->st, frac >= 1.0, "loading %s %3.0f%% %s", c->name, frac * 100,
                       what ? what : "");
}

/* Set by --verify, --numa, --deterministic and --fp8-prefill
 * (dsr1_common_gen_flag); read when a model is opened. */
static int verify_on_load, numa_on_load, deterministic_on_load, fp8_bf16_on_load;

int dsr1_common_fp8_prefill_arg(const char *cmd, const char *v, int *bf16)
{
    if (v && (!strcmp(v, "w8a8") || !strcmp(v, "bf16"))) {
        *bf16 = !strcmp(v, "bf16");
        return 0;
    }
    return dsr1_cli_usage(cmd, "--fp8-prefill wants w8a8 or bf16, got '%s'", v ? v : "");
}

int dsr1_common_numa_arg(const char *cmd, const char *v, int *out)
{
    char *end = NULL;
    long n = 0;
    if (v && !strcmp(v, "auto")) *out = 0;
    else if (v && !strcmp(v, "off")) *out = 1;
    else if (v && !strncmp(v, "virtual:", 8) && (n = strtol(v + 8, &end, 10)) >= 1 && n <= 64 &&
             end != v + 8 && !*end)
        *out = (int)n;
    else
        return dsr1_cli_usage(cmd, "--numa wants auto, off or virtual:N (N 1..64), got '%s'",
                              v ? v : "");
    return 0;
}

int dsr1_common_open_model(dsr1_model **m, const char *path, const char *backend,
                           int threads, int quiet, dsr1_error *err)
{
    dsr1_status st;
    dsr1_common_status_init(&st, quiet);
    st.plain_interval = 30; /* a log gets a line every 30 s of a long load */
    const char *slash = strrchr(path, '/');
    load_ctx c = {&st, slash ? slash + 1 : path};
    dsr1_model_options o = {0};
    o.backend = backend;
    o.threads = threads;
    o.progress = load_progress;
    o.progress_ctx = &c;
    o.verify = verify_on_load;
    o.numa_nodes = numa_on_load;
    o.deterministic = deterministic_on_load;
    o.fp8_bf16 = fp8_bf16_on_load;
    double t0 = dsr1_common_now();
    int rc = dsr1_model_open(m, path, &o, err);
    dsr1_common_status_clear(&st);
    if (rc) return rc;
    if (!quiet) {
        struct stat sb;
        char sz[32], act[32];
        dsr1_common_bytes(stat(path, &sb) == 0 ? (double)sb.st_size : 0, sz, sizeof sz);
        dsr1_common_bytes((double)dsr1_model_active_weight_bytes(*m), act, sizeof act);
        fprintf(stderr, "dsr1: model %s (%s mapped, %s read per token) on %s, loaded in %.1f s\n",
                path, sz, act, dsr1_model_describe(*m), dsr1_common_now() - t0);
        fprintf(stderr, "dsr1: backend %s\n", dsr1_model_backend_choice(*m));
    }
    return 0;
}

/* ---- reading -------------------------------------------------------------- */

/* The zstd frame magic (ZSTD_isFrame is in the static-only API). */
static int zstd_magic(const void *p, size_t n)
{
    const unsigned char *b = p;
    return n >= 4 && b[0] == 0x28 && b[1] == 0xb5 && b[2] == 0x2f && b[3] == 0xfd;
}

struct dsr1_linereader {
    int fd, own, zst; /* zst: -1 until the first bytes are seen */
    int eof, frame_open, out_pending; /* out_pending: the decoder filled
                                         its output and may hold more */
    ZSTD_DCtx *dctx;
    char *in;         /* raw bytes read, [in_pos, in_len) not yet decoded */
    size_t in_len, in_pos;
    char *buf;        /* decoded text, [pos, len) not yet returned */
    size_t len, pos, cap;
    size_t max_line;  /* 0: no limit */
    size_t skipped;   /* bytes of an over-long line dropped so far */
    size_t too_long;  /* the line just returned was over max_line: its length */
    int skipping;
    char name[512];
};

#define CHUNK (1u << 16)

int dsr1_common_reader_open(dsr1_linereader **out, const char *path, dsr1_error *err)
{
    dsr1_linereader *r = calloc(1, sizeof *r);
    if (!r) return dsr1_errorf(err, DSR1_ENOMEM, "%s: out of memory", path);
    int std = !strcmp(path, "-");
    snprintf(r->name, sizeof r->name, "%s", std ? "<stdin>" : path);
    r->fd = std ? 0 : open(path, O_RDONLY | O_CLOEXEC);
    r->own = !std;
    r->zst = -1;
    r->in = malloc(CHUNK);
    r->cap = CHUNK;
    r->buf = malloc(r->cap);
    if (r->fd < 0 || !r->in || !r->buf) {
        int e = errno;
        dsr1_common_reader_close(r);
        return dsr1_errorf(err, DSR1_EIO, "%s: %s", path, strerror(e));
    }
    *out = r;
    return 0;
}

static int ensure_space(dsr1_linereader *r, size_t want, dsr1_error *err)
{
    if (r->cap - r->len >= want) return 0;
    size_t cap = r->cap;
    while (cap - r->len < want) cap *= 2;
    char *b = realloc(r->buf, cap);
    if (!b) return dsr1_errorf(err, DSR1_ENOMEM, "%s: line too long for memory", r->name);
    r->buf = b;
    r->cap = cap;
    return 0;
}

/* Read raw bytes; sets eof at the end of input. */
static int read_raw(dsr1_linereader *r, dsr1_error *err)
{
    ssize_t n;
    do n = read(r->fd, r->in + r->in_len, CHUNK - r->in_len);
    while (n < 0 && errno == EINTR);
    if (n < 0) return dsr1_errorf(err, DSR1_EIO, "%s: %s", r->name, strerror(errno));
    if (n == 0) r->eof = 1;
    r->in_len += (size_t)n;
    return 0;
}

/* Make more decoded text available in buf (or set eof). */
static int fill(dsr1_linereader *r, dsr1_error *err)
{
    if (r->in_pos == r->in_len) r->in_pos = r->in_len = 0;
    if (r->zst < 0) { /* sniff the zstd magic 28 b5 2f fd */
        while (r->in_len < 4 && !r->eof) DSR1_TRY(read_raw(r, err));
        r->zst = r->in_len >= 4 && zstd_magic(r->in, r->in_len);
        if (r->zst && !(r->dctx = ZSTD_createDCtx()))
            return dsr1_errorf(err, DSR1_ENOMEM, "%s: out of memory", r->name);
    } else if (r->in_pos == r->in_len && !r->eof && !r->out_pending) {
        DSR1_TRY(read_raw(r, err));
    }
    DSR1_TRY(ensure_space(r, CHUNK, err));
    if (!r->zst) {
        memcpy(r->buf + r->len, r->in + r->in_pos, r->in_len - r->in_pos);
        r->len += r->in_len - r->in_pos;
        r->in_pos = r->in_len;
        return 0;
    }
    /* No new input and nothing pending: calling the decoder now would ask
     * for the next frame's header and look like a frame left open. */
    if (r->in_pos == r->in_len && !r->out_pending) return 0;
    ZSTD_inBuffer ib = {r->in, r->in_len, r->in_pos};
    ZSTD_outBuffer ob = {r->buf + r->len, r->cap - r->len, 0};
    size_t rc = ZSTD_decompressStream(r->dctx, &ob, &ib);
    if (ZSTD_isError(rc))
        return dsr1_errorf(err, DSR1_EFORMAT, "%s: zstd: %s", r->name, ZSTD_getErrorName(rc));
    r->frame_open = rc != 0;
    r->in_pos = ib.pos;
    r->len += ob.pos;
    r->out_pending = ob.pos == ob.size;
    return 0;
}

void dsr1_common_reader_set_max_line(dsr1_linereader *r, size_t max_line)
{
    r->max_line = max_line;
}

size_t dsr1_common_reader_too_long(const dsr1_linereader *r) { return r->too_long; }

/* Return the line [start, start + n) (NUL-terminated at start + n), or an
 * empty one with too_long set when it was over the limit. */
static void give_line(dsr1_linereader *r, char **line, size_t *len, size_t start, size_t n)
{
    if (r->max_line && n > r->max_line) r->skipping = 1; /* whole in the buffer, still too long */
    if (r->skipping) {
        r->too_long = r->skipped + n;
        r->skipping = 0;
        r->skipped = 0;
        n = 0;
    }
    *line = r->buf + start;
    *len = n;
}

int dsr1_common_reader_next(dsr1_linereader *r, char **line, size_t *len, dsr1_error *err)
{
    r->too_long = 0;
    for (;;) {
        char *nl = memchr(r->buf + r->pos, '\n', r->len - r->pos);
        if (nl) {
            size_t start = r->pos, n = (size_t)(nl - (r->buf + start));
            if (n && nl[-1] == '\r') n--;
            r->buf[start + n] = 0;
            r->pos = (size_t)(nl - r->buf) + 1;
            give_line(r, line, len, start, n);
            return 0;
        }
        if (r->pos) { /* compact: the partial line moves to the front */
            memmove(r->buf, r->buf + r->pos, r->len - r->pos);
            r->len -= r->pos;
            r->pos = 0;
        }
        if (r->max_line && r->len > r->max_line) {
            /* Over the limit: drop what is buffered and keep counting, so
             * memory stays bounded by the limit, not the line. */
            r->skipping = 1;
            r->skipped += r->len;
            r->len = 0;
        }
        if (r->eof && r->in_pos == r->in_len && !r->out_pending) {
            if (r->zst == 1 && r->frame_open)
                return dsr1_errorf(err, DSR1_EFORMAT, "%s: truncated zstd frame", r->name);
            DSR1_TRY(ensure_space(r, 1, err));
            r->buf[r->len] = 0;
            int any = r->len || r->skipping;
            give_line(r, line, len, 0, r->len);
            if (!any) *line = NULL;
            r->pos = r->len;
            return 0;
        }
        DSR1_TRY(fill(r, err));
    }
}

void dsr1_common_reader_close(dsr1_linereader *r)
{
    if (!r) return;
    if (r->own && r->fd >= 0) close(r->fd);
    ZSTD_freeDCtx(r->dctx);
    free(r->in);
    free(r->buf);
    free(r);
}

int dsr1_common_read_all(const char *path, char **buf, size_t *len, dsr1_error *err)
{
    int std = !strcmp(path, "-");
    int fd = std ? 0 : open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return dsr1_errorf(err, DSR1_EIO, "%s: %s", path, strerror(errno));
    size_t cap = 1 << 16, n = 0;
    char *b = malloc(cap);
    for (;;) {
        if (!b) break;
        if (cap - n < 4096) {
            char *nb = realloc(b, cap *= 2);
            if (!nb) { free(b); b = NULL; break; }
            b = nb;
        }
        ssize_t r = read(fd, b + n, cap - n - 1);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            int e = errno;
            free(b);
            if (!std) close(fd);
            return dsr1_errorf(err, DSR1_EIO, "%s: %s", path, strerror(e));
        }
        if (r == 0) break;
        n += (size_t)r;
    }
    if (!std) close(fd);
    if (!b) return dsr1_errorf(err, DSR1_ENOMEM, "%s: out of memory", path);
    b[n] = 0;
    *buf = b;
    *len = n;
    return 0;
}

/* ---- writing -------------------------------------------------------------- */

struct dsr1_recwriter {
    int fd, own;
    ZSTD_CCtx *cctx; /* NULL for plain output */
    char *tmp, *z;   /* record + newline; its compressed frame */
    size_t tcap, zcap;
    char name[512];
};

int dsr1_common_is_zst(const char *path)
{
    size_t n = strlen(path);
    return n > 4 && !strcmp(path + n - 4, ".zst");
}

int dsr1_common_writer_open(dsr1_recwriter **out, const char *path, int append,
                            dsr1_error *err)
{
    dsr1_recwriter *w = calloc(1, sizeof *w);
    if (!w) return dsr1_errorf(err, DSR1_ENOMEM, "%s: out of memory", path);
    int std = !strcmp(path, "-");
    snprintf(w->name, sizeof w->name, "%s", std ? "<stdout>" : path);
    int flags = O_WRONLY | O_CREAT | O_CLOEXEC | (append ? O_APPEND : O_TRUNC);
    w->fd = std ? 1 : open(path, flags, 0644);
    w->own = !std;
    if (w->fd < 0) {
        int e = errno;
        free(w);
        return dsr1_errorf(err, DSR1_EIO, "%s: %s", path, strerror(e));
    }
    if (!std && dsr1_common_is_zst(path)) {
        w->cctx = ZSTD_createCCtx();
        if (!w->cctx) {
            dsr1_common_writer_close(w);
            return dsr1_errorf(err, DSR1_ENOMEM, "%s: out of memory", path);
        }
        ZSTD_CCtx_setParameter(w->cctx, ZSTD_c_compressionLevel, 3);
        ZSTD_CCtx_setParameter(w->cctx, ZSTD_c_checksumFlag, 1);
    }
    *out = w;
    return 0;
}

static int grow(char **p, size_t *cap, size_t want)
{
    if (*cap >= want) return 0;
    size_t c = *cap ? *cap : 4096;
    while (c < want && c <= SIZE_MAX / 2) c *= 2;
    if (c < want) return -1; /* no doubling reaches it: refuse, never loop */
    char *n = realloc(*p, c);
    if (!n) return -1;
    *p = n;
    *cap = c;
    return 0;
}

static int write_all(int fd, const char *p, size_t n, const char *name, dsr1_error *err)
{
    while (n) {
        ssize_t k = write(fd, p, n);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) return dsr1_errorf(err, DSR1_EIO, "%s: write: %s", name, strerror(errno));
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

int dsr1_common_writer_put(dsr1_recwriter *w, const char *rec, size_t len, dsr1_error *err)
{
    if (grow(&w->tmp, &w->tcap, len + 1))
        return dsr1_errorf(err, DSR1_ENOMEM, "%s: out of memory", w->name);
    memcpy(w->tmp, rec, len);
    w->tmp[len] = '\n';
    if (!w->cctx) return write_all(w->fd, w->tmp, len + 1, w->name, err);
    /* One complete frame per record (streaming API, ZSTD_e_end). */
    size_t bound = ZSTD_compressBound(len + 1);
    if (grow(&w->z, &w->zcap, bound))
        return dsr1_errorf(err, DSR1_ENOMEM, "%s: out of memory", w->name);
    ZSTD_inBuffer ib = {w->tmp, len + 1, 0};
    ZSTD_outBuffer ob = {w->z, w->zcap, 0};
    size_t rc = ZSTD_compressStream2(w->cctx, &ob, &ib, ZSTD_e_end);
    if (ZSTD_isError(rc) || rc != 0)
        return dsr1_errorf(err, DSR1_EIO, "%s: zstd: %s", w->name,
                           ZSTD_isError(rc) ? ZSTD_getErrorName(rc) : "frame did not fit");
    return write_all(w->fd, w->z, ob.pos, w->name, err);
}

void dsr1_common_writer_close(dsr1_recwriter *w)
{
    if (!w) return;
    if (w->own && w->fd >= 0) close(w->fd);
    ZSTD_freeCCtx(w->cctx);
    free(w->tmp);
    free(w->z);
    free(w);
}

/* ---- generation flags ---------------------------------------------------- */

int dsr1_common_gen_flag(const char *cmd, dsr1_gen_flags *f, int c, const char *v)
{
    static const struct { const char *flag; double lo, hi; int integer; } t[] = {
        [DSR1_GEN_MAXTOK - DSR1_GEN_OPT_BASE] = {"--max-tokens", 1, 1 << 30, 1},
        [DSR1_GEN_TEMP - DSR1_GEN_OPT_BASE] = {"--temperature", 0, 100, 0},
        [DSR1_GEN_TOPP - DSR1_GEN_OPT_BASE] = {"--top-p", 0, 1, 0},
        [DSR1_GEN_TOPK - DSR1_GEN_OPT_BASE] = {"--top-k", 0, 1 << 30, 1},
        [DSR1_GEN_MINP - DSR1_GEN_OPT_BASE] = {"--min-p", 0, 1, 0},
        [DSR1_GEN_REP - DSR1_GEN_OPT_BASE] = {"--repetition-penalty", 0.001, 100, 0},
        [DSR1_GEN_SEED - DSR1_GEN_OPT_BASE] = {"--seed", 0, 9007199254740992.0, 1},
        [DSR1_GEN_CTX - DSR1_GEN_OPT_BASE] = {"--ctx", 1, 1 << 30, 1},
        [DSR1_GEN_THREADS - DSR1_GEN_OPT_BASE] = {"--threads", 0, 4096, 1},
        /* 8: the engine's DSR1_SPEC_MAX_DRAFT */
        [DSR1_GEN_SPEC - DSR1_GEN_OPT_BASE] = {"--spec-draft", -1, 8, 1},
        [DSR1_GEN_PRES - DSR1_GEN_OPT_BASE] = {"--presence-penalty", -2, 2, 0},
        [DSR1_GEN_FREQ - DSR1_GEN_OPT_BASE] = {"--frequency-penalty", -2, 2, 0},
        [DSR1_GEN_CHUNK - DSR1_GEN_OPT_BASE] = {"--prefill-chunk", 1, 65536, 1},
    };
    if (c < DSR1_GEN_OPT_BASE || c >= DSR1_GEN_OPT_END) return -1;
    if (c == DSR1_GEN_VERIFY || c == DSR1_GEN_DETERMINISTIC) {
        *(c == DSR1_GEN_VERIFY ? &verify_on_load : &deterministic_on_load) = 1;
        return 0;
    }
    if (c == DSR1_GEN_FP8PREFILL) return dsr1_common_fp8_prefill_arg(cmd, v, &fp8_bf16_on_load);
    if (c == DSR1_GEN_NUMA) return dsr1_common_numa_arg(cmd, v, &numa_on_load);
    if (c == DSR1_GEN_MLOCK || c == DSR1_GEN_PRELOAD || c == DSR1_GEN_NOPRELOAD ||
        c == DSR1_GEN_NOPREFIX) {
        if (c == DSR1_GEN_NOPREFIX) f->no_prefix_cache = 1;
        else if (c == DSR1_GEN_MLOCK) f->mlock = 1;
        else f->preload = c == DSR1_GEN_PRELOAD ? 1 : -1;
        return 0;
    }
    if (c == DSR1_GEN_KVTYPE) {
        if (strcmp(v, "bf16") && strcmp(v, "fp8"))
            return dsr1_cli_usage(cmd, "--kv-type: expected bf16 or fp8, got '%s'", v);
        f->kv_fp8 = !strcmp(v, "fp8");
        return 0;
    }
    int i = c - DSR1_GEN_OPT_BASE;
    double x;
    if (dsr1_common_opt_num(cmd, t[i].flag, v, t[i].lo, t[i].hi, t[i].integer, &x)) return 2;
    dsr1_sampling *s = f->sampling;
    switch (c) {
    case DSR1_GEN_MAXTOK: *f->max_tokens = (int)x; break;
    case DSR1_GEN_TEMP: s->temperature = (float)x; break;
    case DSR1_GEN_TOPP: s->top_p = (float)x; break;
    case DSR1_GEN_TOPK: s->top_k = (int)x; break;
    case DSR1_GEN_MINP: s->min_p = (float)x; break;
    case DSR1_GEN_REP: s->repetition_penalty = (float)x; break;
    case DSR1_GEN_SEED: s->seed = (uint64_t)x; break;
    case DSR1_GEN_CTX: f->ctx = (int)x; break;
    case DSR1_GEN_THREADS: f->threads = (int)x; break;
    case DSR1_GEN_PRES: s->presence_penalty = (float)x; break;
    case DSR1_GEN_FREQ: s->frequency_penalty = (float)x; break;
    case DSR1_GEN_CHUNK: f->prefill_chunk = (int)x; break;
    default: f->spec_draft = (int)x; break;
    }
    return 0;
}

/* ---- messages ----------------------------------------------------------- */

int dsr1_cli_fail(const dsr1_error *err)
{
    fprintf(stderr, "dsr1: %s\n", err && err->msg[0] ? err->msg : "error");
    return 1;
}

int dsr1_cli_usage(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "dsr1 %s: ", cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, " (see dsr1 %s --help)\n", cmd);
    return 2;
}
