/*
 * fuzz_ckpt_index.c - model.safetensors.index.json of a checkpoint
 * directory. The input becomes the index of a scratch directory that holds
 * the tiny fixture's config.json and (symlinked) shards, then the
 * checkpoint is opened and its shapes checked as convert and info do.
 * The directory is made once per process, under $TMPDIR or /tmp.
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "convert/checkpoint.h"
#include "fuzz.h"

#ifndef DSR1_FUZZ_FIXTURES
#define DSR1_FUZZ_FIXTURES "tests/fixtures"
#endif

static char dir[PATH_MAX];

static int setup(void)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/dsr1-fuzz-ckpt-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) return -1;
    const char *fx = getenv("DSR1_FUZZ_FIXTURES");
    static const char *const names[] = {"config.json", "model-00001-of-00002.safetensors",
                                        "model-00002-of-00002.safetensors"};
    for (int i = 0; i < 3; i++) {
        char src[PATH_MAX], rel[PATH_MAX], dst[PATH_MAX];
        snprintf(rel, sizeof rel, "%s/tiny/ckpt/%s", fx && *fx ? fx : DSR1_FUZZ_FIXTURES, names[i]);
        if (!realpath(rel, src)) return -1;
        snprintf(dst, sizeof dst, "%s/%s", dir, names[i]);
        if (symlink(src, dst) != 0) return -1;
    }
    return 0;
}

static void cleanup(void)
{
    static const char *const names[] = {"config.json", "model-00001-of-00002.safetensors",
                                        "model-00002-of-00002.safetensors",
                                        "model.safetensors.index.json"};
    char p[PATH_MAX];
    for (int i = 0; i < 4; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        unlink(p);
    }
    rmdir(dir);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int ready;
    if (!ready) {
        if (setup() != 0) {
            fprintf(stderr, "fuzz_ckpt_index: cannot build the scratch checkpoint in %s "
                    "(set DSR1_FUZZ_FIXTURES to tests/fixtures)\n", dir);
            abort();
        }
        atexit(cleanup);
        ready = 1;
    }
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    fwrite(data, 1, size, f);
    fclose(f);
    dsr1_checkpoint *ck = NULL;
    dsr1_error err = {0};
    if (dsr1_checkpoint_open(&ck, dir, &err) == 0) {
        dsr1_checkpoint_check_shapes(ck, &err);
        for (size_t i = 0; i < dsr1_checkpoint_n_tensors(ck); i++) {
            const dsr1_st_tensor *t = dsr1_checkpoint_tensor(ck, i);
            if (dsr1_checkpoint_find(ck, t->name) == NULL) abort();
        }
        dsr1_checkpoint_close(ck);
    }
    return 0;
}
