/*
 * common_mem.c - loading a model for `run` and `chat` with the memory
 * check, --preload and --mlock (declared in common.h).
 *
 * Before the model is opened, the memory its engine would take (core's
 * dsr1_mem_estimate_file: weights, KV cache for the requested context and
 * parallelism, buffers) is compared with MemAvailable: refused when the KV
 * cache and buffers alone do not fit (with what fits and what to change),
 * a warning when only the weights would not all stay in the page cache.
 * Then, when asked or by default on a terminal for a file that is mostly
 * not cached yet, the weights are read in with a progress line, and with
 * --mlock kept locked in memory until the process ends (the handle is the
 * one piece of state here, allowed in cli/).
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "common.h"
#include "core/memcheck.h"

static dsr1_preload *held; /* --mlock: the locked mapping, for the process's life */

/* par: the command's parallelism flag ("--parallel"), NULL when it has
 * none (chat's second slot only holds a cancelled turn). */
static void say_estimate(const char *path, const dsr1_mem_estimate *e, dsr1_mem_verdict v,
                         const char *par, dsr1_error *err)
{
    char kv[32], buf[32], av[32], w[32], c[32];
    dsr1_common_bytes((double)e->kv, kv, sizeof kv);
    dsr1_common_bytes((double)e->buffers, buf, sizeof buf);
    dsr1_common_bytes((double)e->available, av, sizeof av);
    dsr1_common_bytes((double)e->weights, w, sizeof w);
    dsr1_common_bytes((double)e->weights_cached, c, sizeof c);
    if (v == DSR1_MEM_REFUSE) {
        int fit = dsr1_mem_max_ctx(e);
        char seqs[48] = "", more[64] = "";
        if (par) {
            snprintf(seqs, sizeof seqs, " x %d sequence%s", e->max_seqs, e->max_seqs == 1 ? "" : "s");
            snprintf(more, sizeof more, " or %s", par);
        }
        dsr1_errorf(err, DSR1_ENOMEM,
                    "%s: not enough memory: the KV cache for --ctx %d%s takes %s (+ %s buffers), "
                    "%s available; lower --ctx (%d tokens fit%s)%s",
                    path, e->ctx, seqs, kv, buf, av, fit,
                    par && e->max_seqs > 1 ? " at this parallelism" : "", more);
        return;
    }
    fprintf(stderr,
            "dsr1: warning: %s: weights %s + KV cache %s + buffers %s exceed the %s available "
            "(%s of the file cached): the weights will be read from disk while running; lower "
            "--ctx%s%s, or convert to a smaller --type\n",
            path, w, kv, buf, av, c, par ? " or " : "", par ? par : "");
}

typedef struct pre_ctx {
    dsr1_status st;
    const char *name;
    double t0;
} pre_ctx;

static void pre_progress(uint64_t done, uint64_t total, void *ctx)
{
    pre_ctx *p = ctx;
    char d[32], t[32];
    double dt = dsr1_common_now() - p->t0;
    dsr1_common_status(&p->st, done == total, "preloading %s %3.0f%% (%s of %s, %.0f MiB/s)",
                       p->name, 100.0 * (double)done / (double)total,
                       dsr1_common_bytes((double)done, d, sizeof d),
                       dsr1_common_bytes((double)total, t, sizeof t),
                       dt > 0 ? (double)done / dt / 1048576.0 : 0.0);
}

/* Whether to preload: asked, refused, or by default on a terminal when
 * less than 90% of the file is in the page cache (and it fits). */
static int want_preload(const dsr1_gen_flags *g, const dsr1_mem_estimate *e, dsr1_mem_verdict v)
{
    if (g->mlock || g->preload > 0) return 1;
    if (g->preload < 0 || v != DSR1_MEM_OK) return 0;
    return isatty(0) && e->weights_cached < e->weights / 10 * 9;
}

int dsr1_common_open_checked(dsr1_model **m, const char *path, const char *backend,
                             const dsr1_gen_flags *g, int max_seqs, const char *par, int quiet,
                             dsr1_error *err)
{
    dsr1_engine_options eo;
    dsr1_engine_options_default(&eo);
    eo.max_seqs = max_seqs;
    eo.ctx = g->ctx;
    eo.spec_draft = g->spec_draft;
    eo.prefill_chunk = g->prefill_chunk;
    dsr1_mem_estimate e;
    DSR1_TRY(dsr1_mem_estimate_file(path, DSR1_COMPUTE_FAST, &eo, &e, err));
    dsr1_mem_verdict v = dsr1_mem_judge(&e);
    if (v == DSR1_MEM_REFUSE) {
        say_estimate(path, &e, v, par, err);
        return DSR1_ENOMEM;
    }
    if (v == DSR1_MEM_WARN && !quiet) say_estimate(path, &e, v, par, err);
    if (want_preload(g, &e, v)) {
        const char *slash = strrchr(path, '/');
        pre_ctx p = {.name = slash ? slash + 1 : path, .t0 = dsr1_common_now()};
        dsr1_common_status_init(&p.st, quiet);
        p.st.plain_interval = 30;
        int rc = dsr1_mem_preload(&held, path, g->mlock, pre_progress, &p, err);
        dsr1_common_status_clear(&p.st);
        if (rc) return rc;
        if (!quiet)
            fprintf(stderr, "dsr1: preloaded %s in %.1f s%s\n", p.name, dsr1_common_now() - p.t0,
                    g->mlock ? ", locked in memory" : "");
    }
    return dsr1_common_open_model(m, path, backend, g->threads, quiet, err);
}
