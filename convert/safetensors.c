/*
 * safetensors.c - parse and validate one .safetensors shard (see
 * safetensors.h for the format and what is checked).
 *
 * Owns: the mapping of one file, the tensor records and their names.
 * Does not: know about checkpoints, indexes or model shapes
 * (convert/checkpoint.c does), or read payload bytes: validation looks only
 * at the header, so opening a 5 GB shard costs one header parse.
 *
 * Invariants once open: every record's [data, data + size) lies inside the
 * mapping's data area, size == numel * dtype size, records are sorted by
 * offset and pairwise disjoint, names are unique.
 */
#include "safetensors.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

struct dsr1_safetensors {
    char *path;             /* as given to open; owned */
    const uint8_t *map;     /* whole file, read-only; size bytes */
    uint64_t size;
    uint64_t data_start;    /* 8 + header length */
    dsr1_st_tensor *tensors;/* n, sorted by data offset; owned */
    size_t n;
    char *names;            /* NUL-separated names the records point into */
};

/* ---- dtypes -------------------------------------------------------------- */

static const struct { const char *name; size_t size; } dtypes[DSR1_ST_COUNT] = {
    [DSR1_ST_F32] = {"F32", 4},      [DSR1_ST_F16] = {"F16", 2},
    [DSR1_ST_BF16] = {"BF16", 2},    [DSR1_ST_F8_E4M3] = {"F8_E4M3", 1},
    [DSR1_ST_I8] = {"I8", 1},
};

/* The rest of the safetensors dtype list: real, but not in DeepSeek
 * checkpoints we read. */
static const char *const other_dtypes[] = {
    "BOOL", "U8", "I16", "U16", "I32", "U32", "I64", "U64", "F64",
    "F8_E5M2", "F8_E8M0", "F4", "F6_E2M3", "F6_E3M2", "C64",
};

const char *dsr1_st_dtype_name(dsr1_st_dtype t)
{
    return (unsigned)t < DSR1_ST_COUNT ? dtypes[t].name : "?";
}

size_t dsr1_st_dtype_size(dsr1_st_dtype t)
{
    return (unsigned)t < DSR1_ST_COUNT ? dtypes[t].size : 0;
}

int dsr1_safetensors_dtype(const char *name, dsr1_st_dtype *t)
{
    for (int i = 0; i < DSR1_ST_COUNT; i++)
        if (!strcmp(name, dtypes[i].name)) {
            *t = (dsr1_st_dtype)i;
            return 0;
        }
    for (size_t i = 0; i < sizeof other_dtypes / sizeof *other_dtypes; i++)
        if (!strcmp(name, other_dtypes[i])) return DSR1_EUNSUPPORTED;
    return DSR1_EFORMAT;
}

/* ---- header entries ------------------------------------------------------- */

/* A JSON number that is a non-negative integer exactly representable in a
 * double (offsets and dims of real files are far below 2^53). */
static int get_u64(const cJSON *v, uint64_t *out)
{
    if (!cJSON_IsNumber(v)) return -1;
    double d = v->valuedouble;
    if (!(d >= 0) || d > 9007199254740992.0 || d != floor(d)) return -1;
    *out = (uint64_t)d;
    return 0;
}

static int parse_dtype(const dsr1_safetensors *st, const cJSON *e, dsr1_st_tensor *t,
                       dsr1_error *err)
{
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    if (!cJSON_IsString(dt))
        return dsr1_errorf(err, DSR1_EFORMAT, "%s: tensor %s: dtype missing or not a string",
                           st->path, t->name);
    int rc = dsr1_safetensors_dtype(dt->valuestring, &t->dtype);
    if (rc == DSR1_EUNSUPPORTED)
        return dsr1_errorf(err, rc, "%s: tensor %s: dtype %s is not supported (expected F32, "
                           "F16, BF16, F8_E4M3 or I8)", st->path, t->name, dt->valuestring);
    if (rc)
        return dsr1_errorf(err, rc, "%s: tensor %s: unknown dtype \"%.40s\"", st->path, t->name,
                           dt->valuestring);
    return 0;
}

/* Shape into t->dims; numel via checked multiplication. */
static int parse_shape(const dsr1_safetensors *st, const cJSON *e, dsr1_st_tensor *t,
                       uint64_t *numel, dsr1_error *err)
{
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(e, "shape");
    if (!cJSON_IsArray(sh))
        return dsr1_errorf(err, DSR1_EFORMAT, "%s: tensor %s: shape missing or not an array",
                           st->path, t->name);
    int nd = cJSON_GetArraySize(sh);
    if (nd > 4)
        return dsr1_errorf(err, DSR1_EUNSUPPORTED, "%s: tensor %s: %d dims, at most 4 supported",
                           st->path, t->name, nd);
    t->ndim = nd;
    *numel = 1;
    for (int i = 0; i < nd; i++) {
        uint64_t d;
        if (get_u64(cJSON_GetArrayItem(sh, i), &d) || d > (1ull << 40))
            return dsr1_errorf(err, DSR1_EFORMAT, "%s: tensor %s: shape[%d] is not a valid "
                               "dimension", st->path, t->name, i);
        t->dims[i] = (int64_t)d;
        if (d && *numel > UINT64_MAX / d)
            return dsr1_errorf(err, DSR1_EFORMAT, "%s: tensor %s: shape overflows", st->path,
                               t->name);
        *numel *= d;
    }
    return 0;
}

static int parse_offsets(const dsr1_safetensors *st, const cJSON *e, dsr1_st_tensor *t,
                         uint64_t numel, uint64_t *begin, dsr1_error *err)
{
    const cJSON *off = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    uint64_t b, en;
    if (!cJSON_IsArray(off) || cJSON_GetArraySize(off) != 2 ||
        get_u64(cJSON_GetArrayItem(off, 0), &b) || get_u64(cJSON_GetArrayItem(off, 1), &en))
        return dsr1_errorf(err, DSR1_EFORMAT, "%s: tensor %s: data_offsets is not a pair of "
                           "non-negative integers", st->path, t->name);
    uint64_t data_size = st->size - st->data_start;
    if (en < b)
        return dsr1_errorf(err, DSR1_EFORMAT, "%s: tensor %s: data_offsets [%llu,%llu) end "
                           "before begin", st->path, t->name, (unsigned long long)b,
                           (unsigned long long)en);
    if (en > data_size)
        return dsr1_errorf(err, DSR1_EFORMAT, "%s: tensor %s: data_offsets [%llu,%llu) end "
                           "beyond the data area (%llu bytes; file size %llu, truncated?)",
                           st->path, t->name, (unsigned long long)b, (unsigned long long)en,
                           (unsigned long long)data_size, (unsigned long long)st->size);
    uint64_t es = dsr1_st_dtype_size(t->dtype);
    if (numel > UINT64_MAX / es || en - b != numel * es)
        return dsr1_errorf(err, DSR1_EFORMAT, "%s: tensor %s: data_offsets [%llu,%llu) hold "
                           "%llu bytes, shape x %s needs %llu", st->path, t->name,
                           (unsigned long long)b, (unsigned long long)en,
                           (unsigned long long)(en - b), dsr1_st_dtype_name(t->dtype),
                           (unsigned long long)(numel * es));
    *begin = b;
    t->size = en - b;
    t->data = st->map + st->data_start + b;
    t->file_offset = st->data_start + b;
    return 0;
}

static int parse_entry(const dsr1_safetensors *st, const cJSON *e, dsr1_st_tensor *t,
                       dsr1_error *err)
{
    if (!cJSON_IsObject(e))
        return dsr1_errorf(err, DSR1_EFORMAT, "%s: tensor %s: entry is not an object", st->path,
                           t->name);
    uint64_t numel = 0, begin = 0;
    DSR1_TRY(parse_dtype(st, e, t, err));
    DSR1_TRY(parse_shape(st, e, t, &numel, err));
    return parse_offsets(st, e, t, numel, &begin, err);
}

/* ---- whole header ---------------------------------------------------------- */

static int by_offset(const void *a, const void *b)
{
    const dsr1_st_tensor *x = a, *y = b;
    if (x->data != y->data) return (const uint8_t *)x->data < (const uint8_t *)y->data ? -1 : 1;
    return x->size < y->size ? -1 : x->size > y->size;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Sorted by offset, each tensor must start at or after the previous end;
 * then no name may repeat (cJSON keeps duplicate keys, JSON allows them). */
static int check_layout(dsr1_safetensors *st, dsr1_error *err)
{
    qsort(st->tensors, st->n, sizeof *st->tensors, by_offset);
    for (size_t i = 1; i < st->n; i++) {
        const dsr1_st_tensor *p = &st->tensors[i - 1], *t = &st->tensors[i];
        if ((const uint8_t *)t->data < (const uint8_t *)p->data + p->size)
            return dsr1_errorf(err, DSR1_EFORMAT, "%s: tensor %s: data_offsets overlap tensor %s",
                               st->path, t->name, p->name);
    }
    const char **names = malloc((st->n ? st->n : 1) * sizeof *names);
    if (!names) return dsr1_errorf(err, DSR1_ENOMEM, "%s: out of memory", st->path);
    for (size_t i = 0; i < st->n; i++) names[i] = st->tensors[i].name;
    qsort(names, st->n, sizeof *names, by_name);
    int rc = 0;
    for (size_t i = 1; i < st->n && !rc; i++)
        if (!strcmp(names[i], names[i - 1]))
            rc = dsr1_errorf(err, DSR1_EFORMAT, "%s: tensor %s: listed twice in the header",
                             st->path, names[i]);
    free(names);
    return rc;
}

static int parse_header(dsr1_safetensors *st, const cJSON *root, dsr1_error *err)
{
    size_t n = 0, name_bytes = 0;
    for (const cJSON *e = root->child; e; e = e->next) {
        if (!strcmp(e->string, "__metadata__")) {
            if (!cJSON_IsObject(e))
                return dsr1_errorf(err, DSR1_EFORMAT, "%s: __metadata__ is not an object",
                                   st->path);
            continue;
        }
        n++;
        name_bytes += strlen(e->string) + 1;
    }
    st->tensors = calloc(n ? n : 1, sizeof *st->tensors);
    st->names = malloc(name_bytes ? name_bytes : 1);
    if (!st->tensors || !st->names)
        return dsr1_errorf(err, DSR1_ENOMEM, "%s: out of memory for %zu tensors", st->path, n);
    char *np = st->names;
    for (const cJSON *e = root->child; e; e = e->next) {
        if (!strcmp(e->string, "__metadata__")) continue;
        dsr1_st_tensor *t = &st->tensors[st->n++];
        size_t len = strlen(e->string) + 1;
        memcpy(np, e->string, len);
        t->name = np;
        np += len;
        DSR1_TRY(parse_entry(st, e, t, err));
    }
    return check_layout(st, err);
}

/* Length prefix, then the JSON text (which need not be NUL-terminated). */
static int read_header(dsr1_safetensors *st, dsr1_error *err)
{
    if (st->size < 8)
        return dsr1_errorf(err, DSR1_EFORMAT, "%s: %llu bytes, too short for a safetensors "
                           "header (truncated?)", st->path, (unsigned long long)st->size);
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--) hl = hl << 8 | st->map[i];
    if (hl > st->size - 8)
        return dsr1_errorf(err, DSR1_EFORMAT, "%s: header length %llu beyond file size %llu "
                           "(truncated or not a safetensors file?)", st->path,
                           (unsigned long long)hl, (unsigned long long)st->size);
    if (hl > DSR1_ST_MAX_HEADER)
        return dsr1_errorf(err, DSR1_EFORMAT, "%s: header length %llu exceeds the format's "
                           "limit of %u bytes", st->path, (unsigned long long)hl,
                           DSR1_ST_MAX_HEADER);
    st->data_start = 8 + hl;
    cJSON *root = cJSON_ParseWithLength((const char *)st->map + 8, (size_t)hl);
    if (!root || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return dsr1_errorf(err, DSR1_EFORMAT, "%s: header is not a valid JSON object", st->path);
    }
    int rc = parse_header(st, root, err);
    cJSON_Delete(root);
    return rc;
}

static int map_file(dsr1_safetensors *st, dsr1_error *err)
{
    /* O_NONBLOCK: opening a FIFO put in place of a shard must not wait for
     * a writer; it is refused as not a regular file just below. */
    int fd = open(st->path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return dsr1_errorf(err, errno == ENOENT ? DSR1_ENOTFOUND : DSR1_EIO, "%s: %s", st->path,
                           errno == ENOENT ? "shard file not found" : strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return dsr1_errorf(err, DSR1_EIO, "%s: not a regular file", st->path);
    }
    st->size = (uint64_t)sb.st_size;
    if (st->size > 0) {
        void *m = mmap(NULL, (size_t)st->size, PROT_READ, MAP_SHARED, fd, 0);
        if (m == MAP_FAILED) {
            int e = errno;
            close(fd);
            return dsr1_errorf(err, DSR1_EIO, "%s: mmap: %s", st->path, strerror(e));
        }
        st->map = m;
    }
    close(fd);
    return 0;
}

int dsr1_safetensors_open(dsr1_safetensors **out, const char *path, dsr1_error *err)
{
    *out = NULL;
    dsr1_safetensors *st = calloc(1, sizeof *st);
    if (!st || !(st->path = strdup(path))) {
        free(st);
        return dsr1_errorf(err, DSR1_ENOMEM, "%s: out of memory", path);
    }
    int rc = map_file(st, err);
    if (!rc) rc = read_header(st, err);
    if (rc) {
        dsr1_safetensors_close(st);
        return rc;
    }
    *out = st;
    return 0;
}

void dsr1_safetensors_close(dsr1_safetensors *st)
{
    if (!st) return;
    if (st->map) munmap((void *)st->map, (size_t)st->size);
    free(st->tensors);
    free(st->names);
    free(st->path);
    free(st);
}

const char *dsr1_safetensors_path(const dsr1_safetensors *st) { return st->path; }
uint64_t dsr1_safetensors_file_size(const dsr1_safetensors *st) { return st->size; }
size_t dsr1_safetensors_n_tensors(const dsr1_safetensors *st) { return st->n; }

const dsr1_st_tensor *dsr1_safetensors_tensor(const dsr1_safetensors *st, size_t i)
{
    return i < st->n ? &st->tensors[i] : NULL;
}
