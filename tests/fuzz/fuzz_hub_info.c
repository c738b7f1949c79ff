/*
 * fuzz_hub_info.c - the Hugging Face Hub's model info response as `dsr1
 * pull` reads it (dsr1_hub_parse_info: sha, siblings[] with rfilename,
 * size, blobId, lfs.sha256), with no --include and with two globs. What
 * it accepts must hold what the downloader relies on: a 40-hex commit, at
 * least one file, safe relative paths, lower-case blob names of 40 or 64
 * hex digits, dup links pointing back to an earlier file with that blob,
 * and bytes_total the sum of the sizes.
 */
#include <stdlib.h>
#include <string.h>

#include "convert/hub.h"
#include "fuzz.h"

static void check(const dsr1_hub_plan *p)
{
    if (strlen(p->commit) != 40 || !p->n_files) abort();
    uint64_t total = 0;
    for (size_t i = 0; i < p->n_files; i++) {
        const dsr1_hub_file *f = &p->files[i];
        size_t bl = strlen(f->blob);
        if (!f->path || !*f->path || f->path[0] == '/' || strstr(f->path, "//")) abort();
        if (!strcmp(f->path, "..") || !strncmp(f->path, "../", 3) || strstr(f->path, "/../"))
            abort();
        if (bl != (f->lfs ? 64u : 40u) || strspn(f->blob, "0123456789abcdef") != bl) abort();
        if (f->dup && (f->dup > i || strcmp(p->files[f->dup - 1].blob, f->blob))) abort();
        total += f->size;
    }
    if (total != p->bytes_total) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* an exact-size copy, so a read past the end is caught by ASan */
    char *text = malloc(size ? size : 1);
    if (!text) return 0;
    memcpy(text, data, size);
    static const char *const globs[] = {"*.safetensors", "config.json"};
    for (int pass = 0; pass < 2; pass++) {
        dsr1_hub_opts o = {.repo = "org/name"};
        if (pass) o.include = globs, o.n_include = 2;
        dsr1_hub_plan p;
        memset(&p, 0, sizeof p);
        snprintf(p.repo, sizeof p.repo, "org/name");
        snprintf(p.revision, sizeof p.revision, "main");
        snprintf(p.endpoint, sizeof p.endpoint, "http://hub.invalid");
        dsr1_error err = {0};
        if (dsr1_hub_parse_info(&p, &o, text, size, &err) == 0) check(&p);
        dsr1_hub_plan_free(&p);
    }
    free(text);
    return 0;
}
