/*
 * backend.c - the one registry of backends (backend.h): `--backend
 * auto|cpu|cuda|hip`. The CPU backend is built in; GPU backends are shared
 * libraries found at run time, so one dsr1 binary runs everywhere:
 *
 *   $DSR1_BACKEND_PATH/libdsr1-<name>.so   (when set: tests, odd installs)
 *   <dir of the dsr1 binary>/libdsr1-<name>.so
 *   <dir of the dsr1 binary>/../lib/dsr1/libdsr1-<name>.so   (make install)
 *
 * A library must export dsr1_backend_entry, accept this build's
 * DSR1_BACKEND_VERSION and return a table of the same size; then its probe
 * says whether a device is usable. `auto` takes the first usable one in
 * priority order (cuda, hip, then cpu) and says why; a backend asked for by
 * name that cannot be used is an error with its reason, never a silent
 * fallback. Nothing is cached between calls (no global state): dlopen
 * itself keeps a loaded library once.
 */
#include "backend.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *const gpu_names[] = {"cuda", "hip"};
#define N_GPU ((int)(sizeof gpu_names / sizeof *gpu_names))

/* The directory of the running binary ("" when unknown). */
static void exe_dir(char *dir, size_t n)
{
    ssize_t k = readlink("/proc/self/exe", dir, n - 1);
    dir[k > 0 ? k : 0] = 0;
    char *slash = strrchr(dir, '/');
    if (slash) *slash = 0;
    else dir[0] = 0;
}

static int exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

/* Load libdsr1-<name>.so from the search path and check its version. 1 and
 * *ops on success; 0 with the reason in why. */
static int load_lib(const char *name, const dsr1_backend_ops **ops, char *why, size_t n)
{
    char dir[PATH_MAX], path[PATH_MAX + 64];
    const char *env = getenv("DSR1_BACKEND_PATH");
    exe_dir(dir, sizeof dir);
    const char *cand[3][2] = {{env, ""}, {dir, ""}, {dir, "/../lib/dsr1"}};
    snprintf(why, n, "libdsr1-%s.so not found (not built or not installed)", name);
    for (int i = 0; i < 3; i++) {
        if (!cand[i][0] || !cand[i][0][0]) continue;
        snprintf(path, sizeof path, "%s%s/libdsr1-%s.so", cand[i][0], cand[i][1], name);
        if (!exists(path)) continue;
        void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (!h) {
            snprintf(why, n, "%s: %s", path, dlerror());
            return 0;
        }
        dsr1_backend_entry_fn entry;
        *(void **)&entry = dlsym(h, "dsr1_backend_entry");
        const dsr1_backend_ops *o = entry ? entry(DSR1_BACKEND_VERSION) : NULL;
        if (!entry) snprintf(why, n, "%s: not a dsr1 backend (no dsr1_backend_entry)", path);
        else if (!o || o->version != DSR1_BACKEND_VERSION || o->size != sizeof(dsr1_backend_ops))
            snprintf(why, n, "%s: built for another backend interface (this dsr1 has version %d)",
                     path, DSR1_BACKEND_VERSION);
        if (!o || o->version != DSR1_BACKEND_VERSION || o->size != sizeof(dsr1_backend_ops)) {
            dlclose(h);
            return 0;
        }
        *ops = o;
        return 1;
    }
    return 0;
}

/* A GPU backend that loads and has a usable device. */
static int usable_gpu(const char *name, const dsr1_backend_ops **ops, char *why, size_t n)
{
    if (!load_lib(name, ops, why, n)) return 0;
    char pw[160] = "";
    if ((*ops)->probe && !(*ops)->probe(pw, sizeof pw)) {
        snprintf(why, n, "%s", pw[0] ? pw : "no usable device");
        return 0;
    }
    snprintf(why, n, "%s", pw[0] ? pw : "available");
    return 1;
}

int dsr1_backend_find(const char *name, const dsr1_backend_ops **ops, char *why, size_t why_n,
                      dsr1_error *err)
{
    char line[400], r[200];
    *ops = NULL;
    if (!why || !why_n) why = line, why_n = sizeof line;
    why[0] = 0;
    if (name && !strcmp(name, "cpu")) {
        *ops = dsr1_backend_cpu();
        snprintf(why, why_n, "cpu (asked for)");
        return 0;
    }
    for (int i = 0; i < N_GPU; i++)
        if (name && !strcmp(name, gpu_names[i])) {
            if (!usable_gpu(name, ops, r, sizeof r))
                return dsr1_errorf(err, DSR1_EUNSUPPORTED, "backend %s: %s", name, r);
            snprintf(why, why_n, "%s (asked for; %s)", name, r);
            return 0;
        }
    if (name && strcmp(name, "auto"))
        return dsr1_errorf(err, DSR1_EINVAL, "backend %s: unknown (expected auto, cpu, cuda or hip)",
                           name);
    size_t k = (size_t)snprintf(why, why_n, "auto: ");
    for (int i = 0; i < N_GPU; i++) {
        if (usable_gpu(gpu_names[i], ops, r, sizeof r)) {
            snprintf(why + k, why_n - k, "%s (%s)", gpu_names[i], r);
            return 0;
        }
        if (k < why_n)
            k += (size_t)snprintf(why + k, why_n - k, "%s%s: %s", i ? "; " : "cpu (", gpu_names[i], r);
    }
    if (k < why_n) snprintf(why + k, why_n - k, ")");
    *ops = dsr1_backend_cpu();
    return 0;
}

int dsr1_backend_list(dsr1_backend_status *out, int max)
{
    int n = 0;
    for (int i = 0; i < N_GPU && n < max; i++, n++) {
        const dsr1_backend_ops *ops;
        out[n].name = gpu_names[i];
        out[n].available = usable_gpu(gpu_names[i], &ops, out[n].why, sizeof out[n].why);
    }
    if (n < max) {
        const dsr1_backend_ops *cpu = dsr1_backend_cpu();
        out[n].name = cpu->name;
        out[n].available = cpu->probe(out[n].why, sizeof out[n].why);
        n++;
    }
    return n;
}
