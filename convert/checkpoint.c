/*
 * checkpoint.c - a Hugging Face checkpoint directory: config.json, the
 * shard index (or one model.safetensors), the shards, the side files.
 *
 * Owns: the open shards (convert/safetensors.c validates each), one table of
 * all tensors with a hash index by name, the text of config.json and the
 * tokenizer files. Does not: read payloads or convert anything.
 * Shape checks against the config live in checkpoint_shapes.c.
 *
 * Sized for R1 (163 shards, ~92k tensors): names are found through an
 * open-addressing hash table and shard names through a sorted list, so
 * opening is O(tensors log shards) plus one header parse per shard.
 *
 * Invariants once open: every tensor of the index is in the shard the index
 * names, every tensor of a shard is in the index, no name appears twice,
 * the config passed dsr1_config_validate.
 */
#include "checkpoint.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint_internal.h"
#include "safetensors.h"

/* Side files kept as text; dsr1_checkpoint_file_text looks them up. */
static const char *const side_files[N_SIDE_FILES] = {
    "config.json", "tokenizer.json", "tokenizer_config.json", "generation_config.json",
};

/* ---- small helpers ---------------------------------------------------------- */

static char *join(const char *dir, const char *name)
{
    size_t a = strlen(dir), b = strlen(name);
    char *p = malloc(a + b + 2);
    if (!p) return NULL;
    memcpy(p, dir, a);
    p[a] = '/';
    memcpy(p + a + 1, name, b + 1);
    return p;
}

/* Read a whole file as NUL-terminated text. DSR1_ENOTFOUND when absent. */
static int read_text(const char *path, char **out, size_t *len, dsr1_error *err)
{
    *out = NULL;
    /* O_NONBLOCK: a FIFO in place of config.json must not hang the open;
     * it is refused as not a regular file just below. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    FILE *f = fd >= 0 ? fdopen(fd, "rb") : NULL;
    if (!f) {
        int e = errno;
        if (fd >= 0) close(fd);
        return dsr1_errorf(err, e == ENOENT ? DSR1_ENOTFOUND : DSR1_EIO, "%s: %s", path,
                           e == ENOENT ? "not found" : strerror(e));
    }
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode)) {
        fclose(f);
        return dsr1_errorf(err, DSR1_EIO, "%s: not a regular file", path);
    }
    size_t n = (size_t)sb.st_size;
    char *s = malloc(n + 1);
    if (!s) {
        fclose(f);
        return dsr1_errorf(err, DSR1_ENOMEM, "%s: out of memory (%zu bytes)", path, n);
    }
    size_t got = fread(s, 1, n, f);
    fclose(f);
    if (got != n) {
        free(s);
        return dsr1_errorf(err, DSR1_EIO, "%s: short read", path);
    }
    s[n] = 0;
    *out = s;
    *len = n;
    return 0;
}

static uint64_t hash_name(const char *s)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

/* ---- the tensor table ---------------------------------------------------------- */

static int build_table(dsr1_checkpoint *ck, dsr1_error *err)
{
    size_t n = 0;
    for (size_t s = 0; s < ck->n_shards; s++) n += dsr1_safetensors_n_tensors(ck->shards[s]);
    ck->tensors = malloc((n ? n : 1) * sizeof *ck->tensors);
    size_t cap = 16;
    while (cap < 2 * n) cap *= 2;
    ck->table = calloc(cap, sizeof *ck->table);
    if (!ck->tensors || !ck->table)
        return dsr1_errorf(err, DSR1_ENOMEM, "%s: out of memory for %zu tensors", ck->dir, n);
    ck->table_mask = cap - 1;
    for (size_t s = 0; s < ck->n_shards; s++) {
        const dsr1_safetensors *st = ck->shards[s];
        for (size_t i = 0; i < dsr1_safetensors_n_tensors(st); i++) {
            dsr1_st_tensor t = *dsr1_safetensors_tensor(st, i);
            t.shard = (int)s;
            const dsr1_st_tensor *old = dsr1_checkpoint_find(ck, t.name);
            if (old)
                return dsr1_errorf(err, DSR1_EFORMAT, "%s: tensor %s: also in %s",
                                   dsr1_safetensors_path(st), t.name,
                                   ck->shard_names[old->shard]);
            size_t slot = hash_name(t.name) & ck->table_mask;
            while (ck->table[slot]) slot = (slot + 1) & ck->table_mask;
            ck->tensors[ck->n] = t;
            ck->table[slot] = (uint32_t)++ck->n; /* index + 1; 0 = empty */
        }
    }
    return 0;
}

const dsr1_st_tensor *dsr1_checkpoint_find(const dsr1_checkpoint *ck, const char *name)
{
    for (size_t slot = hash_name(name) & ck->table_mask; ck->table[slot];
         slot = (slot + 1) & ck->table_mask) {
        const dsr1_st_tensor *t = &ck->tensors[ck->table[slot] - 1];
        if (!strcmp(t->name, name)) return t;
    }
    return NULL;
}

/* ---- shards ----------------------------------------------------------------- */

/* A shard name from the index must be a plain file in the directory. */
static int check_shard_name(const dsr1_checkpoint *ck, const char *name, dsr1_error *err)
{
    if (!*name || strchr(name, '/') || !strcmp(name, ".") || !strcmp(name, ".."))
        return dsr1_errorf(err, DSR1_EFORMAT, "%s/model.safetensors.index.json: shard name "
                           "\"%.100s\" is not a file name", ck->dir, name);
    return 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Open shards named in `names` (sorted, duplicates allowed). */
static int open_shards(dsr1_checkpoint *ck, const char **names, size_t n, dsr1_error *err)
{
    ck->shards = calloc(n ? n : 1, sizeof *ck->shards);
    ck->shard_names = calloc(n ? n : 1, sizeof *ck->shard_names);
    if (!ck->shards || !ck->shard_names)
        return dsr1_errorf(err, DSR1_ENOMEM, "%s: out of memory", ck->dir);
    for (size_t i = 0; i < n; i++) {
        if (i && !strcmp(names[i], names[i - 1])) continue;
        DSR1_TRY(check_shard_name(ck, names[i], err));
        char *path = join(ck->dir, names[i]);
        if (!path) return dsr1_errorf(err, DSR1_ENOMEM, "%s: out of memory", ck->dir);
        int rc = dsr1_safetensors_open(&ck->shards[ck->n_shards], path, err);
        free(path);
        if (rc) return rc;
        if (!(ck->shard_names[ck->n_shards++] = strdup(names[i])))
            return dsr1_errorf(err, DSR1_ENOMEM, "%s: out of memory", ck->dir);
    }
    return build_table(ck, err);
}

static size_t shard_index(const dsr1_checkpoint *ck, const char *name)
{
    const char *key = name;
    const char **hit = bsearch(&key, ck->shard_names, ck->n_shards, sizeof *ck->shard_names,
                               cmp_str);
    return hit ? (size_t)(hit - (const char **)ck->shard_names) : (size_t)-1;
}

/* Every index entry is in its shard; every shard tensor is in the index. */
static int check_index(dsr1_checkpoint *ck, const cJSON *map, dsr1_error *err)
{
    uint8_t *seen = calloc(ck->n ? ck->n : 1, 1);
    if (!seen) return dsr1_errorf(err, DSR1_ENOMEM, "%s: out of memory", ck->dir);
    int rc = 0;
    for (const cJSON *e = map->child; e && !rc; e = e->next) {
        size_t want = shard_index(ck, e->valuestring);
        const dsr1_st_tensor *t = dsr1_checkpoint_find(ck, e->string);
        if (!t)
            rc = dsr1_errorf(err, DSR1_ENOTFOUND, "%s/%s: tensor %s: listed in "
                             "model.safetensors.index.json but not in the shard", ck->dir,
                             e->valuestring, e->string);
        else if ((size_t)t->shard != want)
            rc = dsr1_errorf(err, DSR1_EFORMAT, "%s/%s: tensor %s: "
                             "model.safetensors.index.json assigns it to %s", ck->dir,
                             ck->shard_names[t->shard], e->string, e->valuestring);
        else
            seen[t - ck->tensors] = 1;
    }
    for (size_t i = 0; i < ck->n && !rc; i++)
        if (!seen[i])
            rc = dsr1_errorf(err, DSR1_EFORMAT, "%s/%s: tensor %s: not listed in "
                             "model.safetensors.index.json", ck->dir,
                             ck->shard_names[ck->tensors[i].shard], ck->tensors[i].name);
    free(seen);
    return rc;
}

static int open_indexed(dsr1_checkpoint *ck, const char *text, dsr1_error *err)
{
    cJSON *root = cJSON_Parse(text);
    const cJSON *map = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
    if (!cJSON_IsObject(map)) {
        cJSON_Delete(root);
        return dsr1_errorf(err, DSR1_EFORMAT, "%s/model.safetensors.index.json: not JSON with "
                           "a weight_map object", ck->dir);
    }
    size_t n = (size_t)cJSON_GetArraySize(map), k = 0;
    const char **names = malloc((n ? n : 1) * sizeof *names);
    int rc = names ? 0 : dsr1_errorf(err, DSR1_ENOMEM, "%s: out of memory", ck->dir);
    for (const cJSON *e = map->child; e && !rc; e = e->next) {
        if (!cJSON_IsString(e))
            rc = dsr1_errorf(err, DSR1_EFORMAT, "%s/model.safetensors.index.json: weight_map."
                             "%s: not a string", ck->dir, e->string);
        else if (!k || strcmp(names[k - 1], e->valuestring)) /* runs share a shard */
            names[k++] = e->valuestring;
    }
    if (!rc) {
        qsort(names, k, sizeof *names, cmp_str);
        rc = open_shards(ck, names, k, err);
    }
    if (!rc) rc = check_index(ck, map, err);
    free(names);
    cJSON_Delete(root);
    return rc;
}

/* ---- open / close ------------------------------------------------------------- */

static int read_side_files(dsr1_checkpoint *ck, dsr1_error *err)
{
    for (int i = 0; i < N_SIDE_FILES; i++) {
        char *path = join(ck->dir, side_files[i]);
        if (!path) return dsr1_errorf(err, DSR1_ENOMEM, "%s: out of memory", ck->dir);
        /* config.json is required; the others are optional. */
        dsr1_error local = {0};
        int rc = read_text(path, &ck->text[i], &ck->text_len[i], i ? &local : err);
        free(path);
        if (rc && i && rc != DSR1_ENOTFOUND) *err = local;
        if (rc && (rc != DSR1_ENOTFOUND || i == 0)) return rc;
    }
    return dsr1_config_parse_hf(&ck->config, ck->text[0], ck->config_path, err);
}

static int open_weights(dsr1_checkpoint *ck, dsr1_error *err)
{
    char *path = join(ck->dir, "model.safetensors.index.json");
    if (!path) return dsr1_errorf(err, DSR1_ENOMEM, "%s: out of memory", ck->dir);
    char *text;
    size_t len;
    int rc = read_text(path, &text, &len, err);
    free(path);
    if (rc == 0) {
        rc = open_indexed(ck, text, err);
        free(text);
        return rc;
    }
    if (rc != DSR1_ENOTFOUND) return rc;
    const char *single = "model.safetensors";
    rc = open_shards(ck, &single, 1, err);
    if (rc == DSR1_ENOTFOUND)
        return dsr1_errorf(err, DSR1_ENOTFOUND, "%s: no model.safetensors.index.json or "
                           "model.safetensors", ck->dir);
    return rc;
}

int dsr1_checkpoint_open(dsr1_checkpoint **out, const char *dir, dsr1_error *err)
{
    *out = NULL;
    dsr1_checkpoint *ck = calloc(1, sizeof *ck);
    if (ck && (ck->dir = strdup(dir))) {
        size_t l = strlen(ck->dir); /* "dir/" would name files "dir//x" */
        while (l > 1 && ck->dir[l - 1] == '/') ck->dir[--l] = 0;
        ck->config_path = join(ck->dir, "config.json");
    }
    if (!ck || !ck->config_path) {
        dsr1_checkpoint_close(ck);
        return dsr1_errorf(err, DSR1_ENOMEM, "%s: out of memory", dir);
    }
    int rc = read_side_files(ck, err);
    if (!rc) rc = open_weights(ck, err);
    if (rc) {
        dsr1_checkpoint_close(ck);
        return rc;
    }
    *out = ck;
    return 0;
}

void dsr1_checkpoint_close(dsr1_checkpoint *ck)
{
    if (!ck) return;
    for (size_t i = 0; i < ck->n_shards; i++) {
        dsr1_safetensors_close(ck->shards[i]);
        free(ck->shard_names[i]);
    }
    for (int i = 0; i < N_SIDE_FILES; i++) free(ck->text[i]);
    free(ck->shards);
    free(ck->shard_names);
    free(ck->tensors);
    free(ck->table);
    free(ck->config_path);
    free(ck->dir);
    free(ck);
}

/* Same file as st, by device and inode? */
static int same_file(const char *path, const struct stat *st)
{
    struct stat s;
    return stat(path, &s) == 0 && s.st_dev == st->st_dev && s.st_ino == st->st_ino;
}

const char *dsr1_checkpoint_source_of(const dsr1_checkpoint *ck, const char *path)
{
    struct stat st[2];
    int have[2] = {stat(path, &st[0]) == 0, lstat(path, &st[1]) == 0};
    const char *found = NULL;
    for (int k = 0; k < 2 && !found; k++) {
        if (!have[k]) continue;
        for (int i = -1; i < N_SIDE_FILES + (int)ck->n_shards && !found; i++) {
            const char *name = i < 0 ? "model.safetensors.index.json"
                             : i < N_SIDE_FILES ? side_files[i] : ck->shard_names[i - N_SIDE_FILES];
            char *p = join(ck->dir, name);
            if (p && same_file(p, &st[k])) found = name;
            free(p);
        }
    }
    return found;
}

/* ---- accessors ----------------------------------------------------------------- */

const dsr1_config *dsr1_checkpoint_config(const dsr1_checkpoint *ck) { return &ck->config; }
const char *dsr1_checkpoint_dir(const dsr1_checkpoint *ck) { return ck->dir; }
size_t dsr1_checkpoint_n_tensors(const dsr1_checkpoint *ck) { return ck->n; }
size_t dsr1_checkpoint_n_shards(const dsr1_checkpoint *ck) { return ck->n_shards; }

const char *dsr1_checkpoint_file_text(const dsr1_checkpoint *ck, const char *basename,
                                      size_t *len)
{
    for (int i = 0; i < N_SIDE_FILES; i++)
        if (!strcmp(basename, side_files[i]) && ck->text[i]) {
            if (len) *len = ck->text_len[i];
            return ck->text[i];
        }
    return NULL;
}

const dsr1_st_tensor *dsr1_checkpoint_tensor(const dsr1_checkpoint *ck, size_t i)
{
    return i < ck->n ? &ck->tensors[i] : NULL;
}

const char *dsr1_checkpoint_shard_name(const dsr1_checkpoint *ck, size_t i, uint64_t *size)
{
    if (i >= ck->n_shards) return NULL;
    if (size) *size = dsr1_safetensors_file_size(ck->shards[i]);
    return ck->shard_names[i];
}
