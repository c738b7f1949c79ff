/*
 * verify.c - `dsr1 verify [FILE.dsr1] [--quiet]`: check every hash a .dsr1
 * file stores, reading the whole file once.
 *
 * Opening checks the header (magic, version, file size), the XXH64
 * checksum over the metadata and directory bytes, and every directory
 * record (types, shapes against sizes, byte ranges inside the data area, no
 * overlaps) - the checks every load makes. Then each tensor's payload (and
 * scales) is hashed and compared with its directory record: that is what
 * loading does not do, because it reads hundreds of GB (see dsr1(5),
 * "What is checked"). The first bad tensor is named and the exit is 1.
 *
 * Progress goes to stderr, only on a terminal; the verdict is one line
 * on stdout. The same payload check runs at load with `--verify` on
 * `dsr1 run` and `dsr1 chat`.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "common.h"
#include "convert/dsr1file.h"

typedef struct verify_ctx {
    dsr1_status st;
    const char *name;
    double t0;
} verify_ctx;

static void on_progress(uint64_t done, uint64_t total, void *ctx)
{
    verify_ctx *v = ctx;
    char a[32], b[32];
    double s = dsr1_common_now() - v->t0;
    dsr1_common_status(&v->st, done >= total, "verifying %s %3.0f%% %s / %s  %.0f MB/s", v->name,
                       total ? 100.0 * (double)done / (double)total : 100.0,
                       dsr1_common_bytes((double)done, a, sizeof a),
                       dsr1_common_bytes((double)total, b, sizeof b),
                       s > 0 ? (double)done / s / 1e6 : 0.0);
}

static void usage(FILE *f)
{
    fprintf(f, "usage: dsr1 verify [FILE.dsr1] [--quiet]\n"
               "Check a packed model against the hashes it stores: the header, the metadata\n"
               "and directory checksum, every directory record, and the XXH64 hash of every\n"
               "tensor's payload and scales (reads the whole file). Exit 1 naming the first\n"
               "bad tensor. Without FILE: the default model. See dsr1-verify(1), dsr1(5).\n"
               "  -q, --quiet   no progress line\n");
}

int dsr1_cmd_verify(int argc, char **argv)
{
    const char *path = NULL;
    int quiet = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "-q") || !strcmp(argv[i], "--quiet")) {
            quiet = 1;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            return dsr1_cli_usage("verify", "unknown option '%s'", argv[i]);
        } else if (path) {
            return dsr1_cli_usage("verify", "unexpected argument '%s'", argv[i]);
        } else {
            path = argv[i];
        }
    }
    char resolved[4096];
    dsr1_error err = {0};
    if (!path) {
        if (dsr1_common_model_path(NULL, resolved, sizeof resolved, &err))
            return dsr1_cli_fail(&err);
        path = resolved;
    }
    dsr1_file *f;
    if (dsr1_file_open(&f, path, &err)) return dsr1_cli_fail(&err);
    verify_ctx v = {.t0 = dsr1_common_now()};
    const char *slash = strrchr(path, '/');
    v.name = slash ? slash + 1 : path;
    dsr1_common_status_init(&v.st, quiet || !isatty(2)); /* progress only on a terminal */
    int rc = dsr1_file_verify(f, on_progress, &v, &err);
    dsr1_common_status_clear(&v.st);
    uint64_t bytes = 0;
    size_t n = dsr1_file_n_tensors(f);
    for (size_t i = 0; i < n; i++)
        bytes += dsr1_file_tensor(f, i)->size + dsr1_file_tensor(f, i)->scale_size;
    dsr1_file_close(f);
    if (rc) return dsr1_cli_fail(&err);
    char b[32], shown[4096];
    snprintf(shown, sizeof shown, "%s", path);
    dsr1_text_sanitize(shown);
    printf("%s: ok: header, metadata and directory checksum, %zu tensors (%s) match their "
           "hashes\n", shown, n, dsr1_common_bytes((double)bytes, b, sizeof b));
    return 0;
}
