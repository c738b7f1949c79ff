/*
 * dsr1file.c - reading .dsr1 files, and the type size rules both the reader
 * and the writer (dsr1file_write.c) use. man/dsr1.5 is the normative format.
 *
 * The reader maps the whole file read-only and trusts nothing: header,
 * sizes, checksum of metadata+directory, and every directory record (type,
 * shape, sizes implied by the shape, alignment, region inside the data area,
 * no two regions overlapping, names unique) are checked before a tensor is
 * handed out, so engine code may index payloads by their dims without
 * further bounds checks. Payload hashes are checked only by
 * dsr1_file_verify, because that reads the whole (maybe 700 GB) file.
 *
 * Memory: O(number of tensors), never O(payload). Not here: what tensors a
 * model needs (core/), how values are decoded (quant.c).
 */
#include "dsr1file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

struct dsr1_file {
    char *path;
    int fd;
    const uint8_t *map;      /* whole file, read-only */
    uint64_t map_size;
    dsr1_file_header hdr;
    char *meta;              /* NUL-terminated copy */
    dsr1_tensor *tensors;    /* [n], directory order */
    size_t *by_name;         /* [n] indices sorted by name, for find */
    char *names;             /* NUL-separated name storage */
    size_t n;
};

/* ---- type rules ------------------------------------------------------- */

static const char *const type_names[DSR1_T_COUNT] = {
    "f32", "f16", "bf16", "fp8", "int8", "int4", "blob"};

const char *dsr1_type_name(dsr1_type t)
{
    return (unsigned)t < DSR1_T_COUNT ? type_names[t] : "?";
}

int dsr1_type_from_name(const char *s, dsr1_type *t)
{
    for (int i = 0; i < DSR1_T_COUNT; i++)
        if (s && !strcmp(s, type_names[i])) {
            *t = (dsr1_type)i;
            return 0;
        }
    return DSR1_EINVAL;
}

/* a*b, or 0 on overflow (every valid size is non-zero). */
static uint64_t mul_ok(uint64_t a, uint64_t b)
{
    if (a && b > UINT64_MAX / a) return 0;
    return a * b;
}

static int is_matrix_type(dsr1_type t)
{
    return t == DSR1_T_FP8_E4M3 || t == DSR1_T_INT8 || t == DSR1_T_INT4;
}

/* Element count, or 0 when ndim or a dim is out of range. */
static uint64_t elements(int ndim, const int64_t *dims)
{
    if (ndim < 1 || ndim > DSR1_MAX_DIMS) return 0;
    uint64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        if (dims[i] <= 0) return 0;
        n = mul_ok(n, (uint64_t)dims[i]);
    }
    return n;
}

uint64_t dsr1_type_payload_size(dsr1_type type, int ndim, const int64_t *dims)
{
    uint64_t n = elements(ndim, dims);
    if (!n) return 0;
    if (is_matrix_type(type) && ndim != 2 && ndim != 3) return 0;
    switch (type) {
    case DSR1_T_F32: return mul_ok(n, 4);
    case DSR1_T_F16:
    case DSR1_T_BF16: return mul_ok(n, 2);
    case DSR1_T_FP8_E4M3:
    case DSR1_T_INT8: return n;
    case DSR1_T_INT4: return dims[ndim - 1] % 2 ? 0 : n / 2;
    case DSR1_T_BLOB: return ndim == 1 ? n : 0;
    default: return 0;
    }
}

uint64_t dsr1_type_scale_size(dsr1_type type, dsr1_type scale_type, int group,
                              int ndim, const int64_t *dims)
{
    if (!is_matrix_type(type) || !dsr1_type_payload_size(type, ndim, dims)) return 0;
    uint64_t E = ndim == 3 ? (uint64_t)dims[0] : 1;
    uint64_t out = (uint64_t)dims[ndim - 2], in = (uint64_t)dims[ndim - 1];
    if (group < 0) return 0;
    uint64_t g = (uint64_t)group;
    switch (type) {
    case DSR1_T_FP8_E4M3:
        if (scale_type != DSR1_T_F32 || g == 0) return 0;
        return mul_ok(mul_ok(E, (out + g - 1) / g), mul_ok((in + g - 1) / g, 4));
    case DSR1_T_INT8:
        if (scale_type != DSR1_T_F32) return 0;
        if (g == 0) return mul_ok(mul_ok(E, out), 4);
        if (in % g) return 0;
        return mul_ok(mul_ok(E, out), mul_ok(in / g, 4));
    case DSR1_T_INT4:
        if (scale_type != DSR1_T_F16 && scale_type != DSR1_T_BF16) return 0;
        if ((g != 32 && g != 128) || in % g) return 0;
        return mul_ok(mul_ok(E, out), mul_ok(in / g, 2));
    default: return 0;
    }
}

/* ---- opening ---------------------------------------------------------- */

static int fail_io(dsr1_error *err, const char *path, const char *what)
{
    return dsr1_errorf(err, DSR1_EIO, "%s: %s: %s", path, what, strerror(errno));
}

static int map_file(dsr1_file *f, dsr1_error *err)
{
    /* O_NONBLOCK: a FIFO in place of the file must not block the open. */
    f->fd = open(f->path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (f->fd < 0) return fail_io(err, f->path, "cannot open");
    struct stat st;
    if (fstat(f->fd, &st) != 0) return fail_io(err, f->path, "cannot stat");
    if (!S_ISREG(st.st_mode))
        return dsr1_errorf(err, DSR1_EINVAL, "%s: not a regular file", f->path);
    f->map_size = (uint64_t)st.st_size;
    if (f->map_size < DSR1_FILE_HEADER_SIZE)
        return dsr1_errorf(err, DSR1_EFORMAT, "%s: %llu bytes, shorter than the %d-byte header",
                           f->path, (unsigned long long)f->map_size, DSR1_FILE_HEADER_SIZE);
    void *m = mmap(NULL, f->map_size, PROT_READ, MAP_SHARED, f->fd, 0);
    if (m == MAP_FAILED) return fail_io(err, f->path, "cannot mmap");
    /* Ask for 2 MiB folios when pages are read in (where the filesystem
     * has large folios: ext4 from Linux 6.16, xfs): the mapping then uses
     * 2 MiB pages and a weight stream needs no page walk per 4 KiB. A
     * hint; where the kernel cannot, nothing changes. */
    (void)madvise(m, f->map_size, MADV_HUGEPAGE);
    f->map = m;
    return 0;
}

/* [off, off+size) inside [lo, hi)? Written to avoid overflow. */
static int inside(uint64_t off, uint64_t size, uint64_t lo, uint64_t hi)
{
    return off >= lo && off <= hi && size <= hi - off;
}

static int check_header(dsr1_file *f, dsr1_error *err)
{
    const dsr1_file_header *h = &f->hdr;
    const char *p = f->path;
    memcpy(&f->hdr, f->map, sizeof f->hdr);
    if (memcmp(h->magic, DSR1_FILE_MAGIC, 8))
        return dsr1_errorf(err, DSR1_EFORMAT, "%s: not a .dsr1 file (bad magic)", p);
    if (h->version != DSR1_FILE_VERSION)
        return dsr1_errorf(err, DSR1_EUNSUPPORTED, "%s: format version %u, this dsr1 reads %d",
                           p, h->version, DSR1_FILE_VERSION);
    if (h->alignment != DSR1_FILE_ALIGN)
        return dsr1_errorf(err, DSR1_EFORMAT, "%s: alignment %u, expected %d", p,
                           h->alignment, DSR1_FILE_ALIGN);
    if (h->file_size != f->map_size)
        return dsr1_errorf(err, DSR1_EFORMAT, "%s: header says %llu bytes, file has %llu "
                           "(truncated or appended to)", p, (unsigned long long)h->file_size,
                           (unsigned long long)f->map_size);
    if (!inside(h->meta_offset, h->meta_size, DSR1_FILE_HEADER_SIZE, h->file_size) ||
        !inside(h->dir_offset, h->dir_size, h->meta_offset + h->meta_size, h->file_size))
        return dsr1_errorf(err, DSR1_EFORMAT, "%s: metadata/directory regions out of bounds", p);
    if (h->n_tensors > h->dir_size / sizeof(dsr1_dir_record))
        return dsr1_errorf(err, DSR1_EFORMAT, "%s: %llu tensors cannot fit a %llu-byte directory",
                           p, (unsigned long long)h->n_tensors, (unsigned long long)h->dir_size);
    for (size_t i = 0; i < sizeof h->reserved; i++)
        if (h->reserved[i])
            return dsr1_errorf(err, DSR1_EFORMAT, "%s: reserved header bytes are not zero", p);
    dsr1_hash64_state s;
    dsr1_hash64_init(&s, DSR1_HASH_SEED);
    dsr1_hash64_update(&s, f->map + h->meta_offset, h->meta_size);
    dsr1_hash64_update(&s, f->map + h->dir_offset, h->dir_size);
    uint64_t sum = dsr1_hash64_final(&s);
    if (sum != h->checksum)
        return dsr1_errorf(err, DSR1_EFORMAT, "%s: metadata/directory checksum %016llx, header "
                           "says %016llx (corrupt)", p, (unsigned long long)sum,
                           (unsigned long long)h->checksum);
    return 0;
}

/* Type-specific rules for one record (sizes, scales, group). */
static int check_record_type(const dsr1_file *f, const dsr1_dir_record *r, const char *name,
                             const int64_t *dims, dsr1_error *err)
{
    const char *p = f->path;
    if (r->type >= DSR1_T_COUNT)
        return dsr1_errorf(err, DSR1_EFORMAT, "%s: tensor %s: unknown type %u", p, name, r->type);
    uint64_t want = dsr1_type_payload_size(r->type, r->ndim, dims);
    if (!want || want != r->size)
        return dsr1_errorf(err, DSR1_EFORMAT, "%s: tensor %s: %s with this shape needs %llu "
                           "payload bytes, record says %llu", p, name, dsr1_type_name(r->type),
                           (unsigned long long)want, (unsigned long long)r->size);
    if (is_matrix_type(r->type)) {
        uint64_t ws = dsr1_type_scale_size(r->type, r->scale_type, (int)r->group, r->ndim, dims);
        if (!ws || r->group > INT32_MAX || ws != r->scale_size)
            return dsr1_errorf(err, DSR1_EFORMAT, "%s: tensor %s: scale (type %s, group %u) "
                               "needs %llu bytes, record says %llu", p, name,
                               dsr1_type_name(r->scale_type), r->group, (unsigned long long)ws,
                               (unsigned long long)r->scale_size);
    } else if (r->scale_size || r->scale_offset || r->group || r->scale_type) {
        return dsr1_errorf(err, DSR1_EFORMAT, "%s: tensor %s: %s takes no scale", p, name,
                           dsr1_type_name(r->type));
    }
    return 0;
}

/* Offsets: aligned, inside [4096, meta_offset). */
static int check_record_regions(const dsr1_file *f, const dsr1_dir_record *r, const char *name,
                                dsr1_error *err)
{
    uint64_t lo = DSR1_FILE_HEADER_SIZE, hi = f->hdr.meta_offset, a = f->hdr.alignment;
    if (r->offset % a || !inside(r->offset, r->size, lo, hi))
        return dsr1_errorf(err, DSR1_EFORMAT, "%s: tensor %s: payload [%llu, +%llu) is unaligned "
                           "or outside the data area [%llu, %llu)", f->path, name,
                           (unsigned long long)r->offset, (unsigned long long)r->size,
                           (unsigned long long)lo, (unsigned long long)hi);
    if (r->scale_size && (r->scale_offset % a || !inside(r->scale_offset, r->scale_size, lo, hi)))
        return dsr1_errorf(err, DSR1_EFORMAT, "%s: tensor %s: scale region is unaligned or "
                           "outside the data area", f->path, name);
    return 0;
}

/* Decode record i at *pos of the directory into f->tensors[i]. */
static int read_record(dsr1_file *f, size_t i, uint64_t *pos, char **name_out, dsr1_error *err)
{
    const dsr1_file_header *h = &f->hdr;
    dsr1_dir_record r;
    if (h->dir_size - *pos < sizeof r)
        return dsr1_errorf(err, DSR1_EFORMAT, "%s: directory ends inside record %zu", f->path, i);
    memcpy(&r, f->map + h->dir_offset + *pos, sizeof r);
    uint64_t padded = ((uint64_t)r.name_len + 7) & ~7ull;
    if (r.name_len == 0 || h->dir_size - *pos - sizeof r < padded)
        return dsr1_errorf(err, DSR1_EFORMAT, "%s: directory record %zu: bad name length %u",
                           f->path, i, r.name_len);
    char *name = *name_out;
    memcpy(name, f->map + h->dir_offset + *pos + sizeof r, r.name_len);
    name[r.name_len] = 0;
    *name_out += r.name_len + 1;
    *pos += sizeof r + padded;
    if (strlen(name) != r.name_len)
        return dsr1_errorf(err, DSR1_EFORMAT, "%s: directory record %zu: NUL inside name", f->path, i);
    if (r.reserved8[0] || r.reserved8[1] || r.reserved8[2] || r.reserved32)
        return dsr1_errorf(err, DSR1_EFORMAT, "%s: tensor %s: reserved record bytes are not zero",
                           f->path, name);
    if (r.ndim < 1 || r.ndim > DSR1_MAX_DIMS)
        return dsr1_errorf(err, DSR1_EFORMAT, "%s: tensor %s: ndim %u not in 1..%d", f->path,
                           name, r.ndim, DSR1_MAX_DIMS);
    dsr1_tensor *t = &f->tensors[i];
    for (int d = 0; d < DSR1_MAX_DIMS; d++) {
        int used = d < r.ndim;
        if ((used && (r.dims[d] == 0 || r.dims[d] > INT64_MAX)) || (!used && r.dims[d]))
            return dsr1_errorf(err, DSR1_EFORMAT, "%s: tensor %s: bad dim %d = %llu", f->path,
                               name, d, (unsigned long long)r.dims[d]);
        t->dims[d] = (int64_t)r.dims[d];
    }
    DSR1_TRY(check_record_type(f, &r, name, t->dims, err));
    DSR1_TRY(check_record_regions(f, &r, name, err));
    t->name = name;
    t->type = (dsr1_type)r.type;
    t->ndim = r.ndim;
    t->data = f->map + r.offset;
    t->size = r.size;
    t->scale = r.scale_size ? f->map + r.scale_offset : NULL;
    t->scale_size = r.scale_size;
    t->scale_type = (dsr1_type)r.scale_type;
    t->group = (int)r.group;
    t->hash = r.hash;
    return 0;
}

/* qsort comparators reach the file through this pair (no globals). */
typedef struct { uint64_t off, size; size_t tensor; } region;

static int cmp_region(const void *a, const void *b)
{
    const region *x = a, *y = b;
    return x->off < y->off ? -1 : x->off > y->off;
}

/* No two payload/scale regions may share a byte. */
static int check_overlaps(const dsr1_file *f, dsr1_error *err)
{
    region *rg = malloc(2 * f->n * sizeof *rg + 1);
    if (!rg) return dsr1_errorf(err, DSR1_ENOMEM, "%s: out of memory", f->path);
    size_t k = 0;
    for (size_t i = 0; i < f->n; i++) {
        const dsr1_tensor *t = &f->tensors[i];
        rg[k++] = (region){(uint64_t)((const uint8_t *)t->data - f->map), t->size, i};
        if (t->scale_size)
            rg[k++] = (region){(uint64_t)((const uint8_t *)t->scale - f->map), t->scale_size, i};
    }
    qsort(rg, k, sizeof *rg, cmp_region);
    int rc = 0;
    for (size_t i = 1; i < k && !rc; i++)
        if (rg[i - 1].off + rg[i - 1].size > rg[i].off)
            rc = dsr1_errorf(err, DSR1_EFORMAT, "%s: tensor %s overlaps tensor %s", f->path,
                             f->tensors[rg[i].tensor].name, f->tensors[rg[i - 1].tensor].name);
    free(rg);
    return rc;
}

/* Sorting indices by name needs the tensor array: use a pointer table. */
static int cmp_name_ptr(const void *a, const void *b)
{
    const dsr1_tensor *x = *(const dsr1_tensor *const *)a, *y = *(const dsr1_tensor *const *)b;
    return strcmp(x->name, y->name);
}

static int build_name_index(dsr1_file *f, dsr1_error *err)
{
    const dsr1_tensor **p = malloc(f->n * sizeof *p + 1);
    if (!p) return dsr1_errorf(err, DSR1_ENOMEM, "%s: out of memory", f->path);
    for (size_t i = 0; i < f->n; i++) p[i] = &f->tensors[i];
    qsort(p, f->n, sizeof *p, cmp_name_ptr);
    int rc = 0;
    for (size_t i = 0; i < f->n; i++) {
        f->by_name[i] = (size_t)(p[i] - f->tensors);
        if (i && !strcmp(p[i]->name, p[i - 1]->name) && !rc)
            rc = dsr1_errorf(err, DSR1_EFORMAT, "%s: tensor %s appears twice", f->path, p[i]->name);
    }
    free(p);
    return rc;
}

static int read_directory(dsr1_file *f, dsr1_error *err)
{
    const dsr1_file_header *h = &f->hdr;
    f->n = (size_t)h->n_tensors;
    f->tensors = calloc(f->n + 1, sizeof *f->tensors);
    f->by_name = calloc(f->n + 1, sizeof *f->by_name);
    f->names = malloc(h->dir_size + 1); /* names are shorter than their records */
    f->meta = malloc(h->meta_size + 1);
    if (!f->tensors || !f->by_name || !f->names || !f->meta)
        return dsr1_errorf(err, DSR1_ENOMEM, "%s: out of memory for the directory", f->path);
    memcpy(f->meta, f->map + h->meta_offset, h->meta_size);
    f->meta[h->meta_size] = 0;
    uint64_t pos = 0;
    char *names = f->names;
    for (size_t i = 0; i < f->n; i++) DSR1_TRY(read_record(f, i, &pos, &names, err));
    if (pos != h->dir_size)
        return dsr1_errorf(err, DSR1_EFORMAT, "%s: %llu stray bytes after the last directory record",
                           f->path, (unsigned long long)(h->dir_size - pos));
    DSR1_TRY(check_overlaps(f, err));
    return build_name_index(f, err);
}

int dsr1_file_open(dsr1_file **out, const char *path, dsr1_error *err)
{
    *out = NULL;
    dsr1_file *f = calloc(1, sizeof *f);
    if (!f || !(f->path = strdup(path))) {
        free(f);
        return dsr1_errorf(err, DSR1_ENOMEM, "%s: out of memory", path);
    }
    f->fd = -1;
    int rc = map_file(f, err);
    if (!rc) rc = check_header(f, err);
    if (!rc) rc = read_directory(f, err);
    if (rc) {
        dsr1_file_close(f);
        return rc;
    }
    *out = f;
    return 0;
}

void dsr1_file_close(dsr1_file *f)
{
    if (!f) return;
    if (f->map) munmap((void *)f->map, f->map_size);
    if (f->fd >= 0) close(f->fd);
    free(f->tensors);
    free(f->by_name);
    free(f->names);
    free(f->meta);
    free(f->path);
    free(f);
}

/* ---- accessors -------------------------------------------------------- */

const char *dsr1_file_path(const dsr1_file *f) { return f->path; }

int dsr1_file_contains(const dsr1_file *f, const void *p, uint64_t n)
{
    const uint8_t *b = p;
    if (!p) return n == 0;
    return b >= f->map && (uint64_t)(b - f->map) <= f->map_size &&
           n <= f->map_size - (uint64_t)(b - f->map);
}
const dsr1_file_header *dsr1_file_header_of(const dsr1_file *f) { return &f->hdr; }
const char *dsr1_file_metadata(const dsr1_file *f) { return f->meta; }
size_t dsr1_file_n_tensors(const dsr1_file *f) { return f->n; }

const dsr1_tensor *dsr1_file_tensor(const dsr1_file *f, size_t i)
{
    return i < f->n ? &f->tensors[i] : NULL;
}

const dsr1_tensor *dsr1_file_find(const dsr1_file *f, const char *name)
{
    size_t lo = 0, hi = f->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const dsr1_tensor *t = &f->tensors[f->by_name[mid]];
        int c = strcmp(name, t->name);
        if (!c) return t;
        if (c < 0) hi = mid;
        else lo = mid + 1;
    }
    return NULL;
}

/* ---- verification ----------------------------------------------------- */

/* Hash [p, p+n) in chunks, dropping each chunk from this process's resident
 * set afterwards: verifying a 700 GB file must not make it all resident. */
static void hash_region(dsr1_hash64_state *s, const uint8_t *p, uint64_t n,
                        uint64_t *done, uint64_t total,
                        void (*progress)(uint64_t, uint64_t, void *), void *ctx)
{
    const uint64_t chunk = 64ull << 20;
    long pg = sysconf(_SC_PAGESIZE);
    while (n) {
        uint64_t c = n < chunk ? n : chunk;
        dsr1_hash64_update(s, p, (size_t)c);
        uintptr_t a = (uintptr_t)p & ~(uintptr_t)(pg - 1);
        uintptr_t b = ((uintptr_t)(p + c) + (uintptr_t)pg - 1) & ~(uintptr_t)(pg - 1);
        madvise((void *)a, b - a, MADV_DONTNEED); /* read-only mapping: pages just re-fault */
        p += c;
        n -= c;
        *done += c;
        if (progress) progress(*done, total, ctx);
    }
}

int dsr1_file_verify(const dsr1_file *f, void (*progress)(uint64_t, uint64_t, void *), void *ctx,
                     dsr1_error *err)
{
    uint64_t total = 0, done = 0;
    for (size_t i = 0; i < f->n; i++) total += f->tensors[i].size + f->tensors[i].scale_size;
    for (size_t i = 0; i < f->n; i++) {
        const dsr1_tensor *t = &f->tensors[i];
        dsr1_hash64_state s;
        dsr1_hash64_init(&s, DSR1_HASH_SEED);
        hash_region(&s, t->data, t->size, &done, total, progress, ctx);
        if (t->scale_size) hash_region(&s, t->scale, t->scale_size, &done, total, progress, ctx);
        uint64_t h = dsr1_hash64_final(&s);
        if (h != t->hash)
            return dsr1_errorf(err, DSR1_EFORMAT, "%s: tensor %s: payload hash %016llx, directory "
                               "says %016llx (corrupt)", f->path, t->name, (unsigned long long)h,
                               (unsigned long long)t->hash);
    }
    return 0;
}
