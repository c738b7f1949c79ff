/*
 * dsr1file_write.c - writing .dsr1 files (the dsr1_writer_* half of
 * dsr1file.h; the reader and the size rules are in dsr1file.c).
 *
 * Crash safety: everything goes to "<path>.tmp-<pid>" in the destination
 * directory; only a complete, fsync'd file is renamed to <path>, so a
 * failure, a full disk or a signal never leaves a half-written model under
 * the real name. abort (or a failed finish) unlinks the temp file.
 *
 * Memory: one record per tensor plus the metadata string; payloads go
 * straight from the caller's chunks to pwrite. A payload's hash is computed
 * on the fly while its bytes arrive in order (how the converter writes);
 * the scale region, which callers interleave with payload bands and which
 * is small (at most ~3% of the payload), is read back when the tensor is
 * complete, while it is still in the page cache. A payload written out of
 * order is hashed by reading it back at finish. Invariant: regions are laid out in add order,
 * each starting at a multiple of DSR1_FILE_ALIGN, never overlapping.
 */
#include "dsr1file.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct wtensor {
    dsr1_dir_record rec;
    char *name;
    dsr1_hash64_state hs;  /* running hash while payload writes arrive in order */
    uint64_t pos;          /* next in-order payload offset */
    uint64_t written[2];   /* bytes written: payload, scale (completeness check) */
    int in_order;          /* every payload write so far was at pos */
    int hashed;            /* rec.hash is final */
} wtensor;

struct dsr1_writer {
    char *path, *tmp;
    int fd;
    uint64_t next;         /* first free byte of the data area */
    wtensor *t;
    size_t n, cap;
    char *meta;
    size_t meta_len;
};

static uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

int dsr1_writer_open(dsr1_writer **out, const char *path, dsr1_error *err)
{
    *out = NULL;
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        return dsr1_errorf(err, DSR1_EINVAL, "%s: is a directory, expected an output file name", path);
    dsr1_writer *w = calloc(1, sizeof *w);
    size_t len = strlen(path) + 32;
    if (!w || !(w->path = strdup(path)) || !(w->tmp = malloc(len))) {
        if (w) free(w->path);
        free(w);
        return dsr1_errorf(err, DSR1_ENOMEM, "%s: out of memory", path);
    }
    snprintf(w->tmp, len, "%s.tmp-%ld", path, (long)getpid());
    w->fd = open(w->tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (w->fd < 0) {
        int e = errno;
        free(w->tmp);
        free(w->path);
        free(w);
        return dsr1_errorf(err, DSR1_EIO, "%s: cannot create output: %s", path, strerror(e));
    }
    w->next = DSR1_FILE_HEADER_SIZE;
    *out = w;
    return 0;
}

/* Validate t's description and compute its record. */
static int describe(const dsr1_tensor *t, dsr1_dir_record *r, dsr1_error *err)
{
    memset(r, 0, sizeof *r);
    size_t nl = t->name ? strlen(t->name) : 0;
    if (nl == 0 || nl > UINT16_MAX)
        return dsr1_errorf(err, DSR1_EINVAL, "dsr1 writer: tensor name empty or too long");
    if ((unsigned)t->type >= DSR1_T_COUNT || t->ndim < 1 || t->ndim > DSR1_MAX_DIMS)
        return dsr1_errorf(err, DSR1_EINVAL, "%s: bad type or ndim", t->name);
    r->name_len = (uint16_t)nl;
    r->type = (uint8_t)t->type;
    r->ndim = (uint8_t)t->ndim;
    for (int d = 0; d < t->ndim; d++) r->dims[d] = (uint64_t)t->dims[d];
    r->size = dsr1_type_payload_size(t->type, t->ndim, t->dims);
    if (!r->size)
        return dsr1_errorf(err, DSR1_EINVAL, "%s: shape invalid for type %s", t->name,
                           dsr1_type_name(t->type));
    if (t->type == DSR1_T_FP8_E4M3 || t->type == DSR1_T_INT8 || t->type == DSR1_T_INT4) {
        r->scale_type = (uint8_t)t->scale_type;
        r->group = (uint32_t)t->group;
        r->scale_size = dsr1_type_scale_size(t->type, t->scale_type, t->group, t->ndim, t->dims);
        if (!r->scale_size || t->group < 0)
            return dsr1_errorf(err, DSR1_EINVAL, "%s: scale type %s / group %d invalid for %s",
                               t->name, dsr1_type_name(t->scale_type), t->group,
                               dsr1_type_name(t->type));
    }
    return 0;
}

int dsr1_writer_add(dsr1_writer *w, const dsr1_tensor *t, size_t *index, dsr1_error *err)
{
    dsr1_dir_record r;
    DSR1_TRY(describe(t, &r, err));
    if (w->n == w->cap) {
        size_t cap = w->cap ? 2 * w->cap : 256;
        wtensor *nt = realloc(w->t, cap * sizeof *nt);
        if (!nt) return dsr1_errorf(err, DSR1_ENOMEM, "%s: out of memory", w->path);
        w->t = nt;
        w->cap = cap;
    }
    wtensor *x = &w->t[w->n];
    memset(x, 0, sizeof *x);
    if (!(x->name = strdup(t->name))) return dsr1_errorf(err, DSR1_ENOMEM, "%s: out of memory", w->path);
    r.offset = align_up(w->next, DSR1_FILE_ALIGN);
    w->next = r.offset + r.size;
    if (r.scale_size) {
        r.scale_offset = align_up(w->next, DSR1_FILE_ALIGN);
        w->next = r.scale_offset + r.scale_size;
    }
    x->rec = r;
    x->in_order = 1;
    dsr1_hash64_init(&x->hs, DSR1_HASH_SEED);
    *index = w->n++;
    return 0;
}

int dsr1_writer_reserve(dsr1_writer *w, dsr1_error *err)
{
    int e = posix_fallocate(w->fd, 0, (off_t)w->next);
    if (e == 0 || e == EOPNOTSUPP || e == EINVAL) return 0; /* a hint only where unsupported */
    return dsr1_errorf(err, DSR1_EIO, "%s: cannot reserve %.1f MB for the output: %s", w->tmp,
                       (double)w->next / 1e6, strerror(e));
}

static int hash_back(dsr1_writer *w, dsr1_hash64_state *s, uint64_t off, uint64_t n,
                     dsr1_error *err);

/* Once the payload was hashed in order and the scale is all there, fold the
 * scale in and start writeback of the tensor, so dirty pages do not pile up
 * over a 700 GB conversion. */
static int maybe_complete(dsr1_writer *w, wtensor *x, dsr1_error *err)
{
    if (x->hashed || !x->in_order || x->pos != x->rec.size || x->written[1] < x->rec.scale_size)
        return 0;
    DSR1_TRY(hash_back(w, &x->hs, x->rec.scale_offset, x->rec.scale_size, err));
    x->rec.hash = dsr1_hash64_final(&x->hs);
    x->hashed = 1;
    uint64_t end = x->rec.scale_size ? x->rec.scale_offset + x->rec.scale_size
                                     : x->rec.offset + x->rec.size;
    sync_file_range(w->fd, (off_t)x->rec.offset, (off_t)(end - x->rec.offset),
                    SYNC_FILE_RANGE_WRITE);
    return 0;
}

static int pwrite_all(dsr1_writer *w, const char *what, const void *buf, size_t n, uint64_t off,
                      dsr1_error *err)
{
    const uint8_t *p = buf;
    while (n) {
        ssize_t k = pwrite(w->fd, p, n, (off_t)off);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0)
            return dsr1_errorf(err, DSR1_EIO, "%s: writing %s at offset %llu: %s", w->tmp, what,
                               (unsigned long long)off, k < 0 ? strerror(errno) : "no progress");
        p += k;
        n -= (size_t)k;
        off += (uint64_t)k;
    }
    return 0;
}

int dsr1_writer_write(dsr1_writer *w, size_t index, int which, uint64_t off, const void *buf,
                      size_t n, dsr1_error *err)
{
    if (index >= w->n || (which != 0 && which != 1))
        return dsr1_errorf(err, DSR1_EINVAL, "%s: write to unknown tensor %zu", w->path, index);
    wtensor *x = &w->t[index];
    uint64_t base = which ? x->rec.scale_offset : x->rec.offset;
    uint64_t size = which ? x->rec.scale_size : x->rec.size;
    if (off > size || n > size - off)
        return dsr1_errorf(err, DSR1_EINVAL, "%s: %s write [%llu, +%zu) past its %llu bytes",
                           x->name, which ? "scale" : "payload", (unsigned long long)off, n,
                           (unsigned long long)size);
    DSR1_TRY(pwrite_all(w, x->name, buf, n, base + off, err));
    if (x->hashed) x->hashed = x->in_order = 0; /* rewritten after completion */
    if (which == 0 && x->in_order && off == x->pos) {
        dsr1_hash64_update(&x->hs, buf, n);
        x->pos += n;
    } else if (which == 0) {
        x->in_order = 0;
    }
    x->written[which] += n;
    return maybe_complete(w, x, err);
}

int dsr1_writer_set_metadata(dsr1_writer *w, const char *json, dsr1_error *err)
{
    char *m = strdup(json);
    if (!m) return dsr1_errorf(err, DSR1_ENOMEM, "%s: out of memory", w->path);
    free(w->meta);
    w->meta = m;
    w->meta_len = strlen(m);
    return 0;
}

/* Hash a region by reading it back (tensors written out of order). */
static int hash_back(dsr1_writer *w, dsr1_hash64_state *s, uint64_t off, uint64_t n, dsr1_error *err)
{
    enum { CH = 1 << 20 };
    uint8_t *buf = malloc(CH);
    if (!buf) return dsr1_errorf(err, DSR1_ENOMEM, "%s: out of memory", w->path);
    while (n) {
        size_t c = n < CH ? (size_t)n : CH;
        ssize_t k = pread(w->fd, buf, c, (off_t)off);
        if (k <= 0) {
            free(buf);
            return dsr1_errorf(err, DSR1_EIO, "%s: reading back at %llu: %s", w->tmp,
                               (unsigned long long)off, k < 0 ? strerror(errno) : "short file");
        }
        dsr1_hash64_update(s, buf, (size_t)k);
        off += (uint64_t)k;
        n -= (uint64_t)k;
    }
    free(buf);
    return 0;
}

static int cmp_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Every tensor fully written, every name unique, every hash final. */
static int finish_tensors(dsr1_writer *w, dsr1_error *err)
{
    char **names = malloc(w->n * sizeof *names + 1);
    if (!names) return dsr1_errorf(err, DSR1_ENOMEM, "%s: out of memory", w->path);
    for (size_t i = 0; i < w->n; i++) names[i] = w->t[i].name;
    qsort(names, w->n, sizeof *names, cmp_name);
    for (size_t i = 1; i < w->n; i++)
        if (!strcmp(names[i], names[i - 1])) {
            dsr1_errorf(err, DSR1_EINVAL, "%s: tensor %s added twice", w->path, names[i]);
            free(names);
            return DSR1_EINVAL;
        }
    free(names);
    for (size_t i = 0; i < w->n; i++) {
        wtensor *x = &w->t[i];
        if (x->written[0] < x->rec.size || x->written[1] < x->rec.scale_size)
            return dsr1_errorf(err, DSR1_EINVAL, "%s: tensor %s: only %llu of %llu bytes written",
                               w->path, x->name,
                               (unsigned long long)(x->written[0] + x->written[1]),
                               (unsigned long long)(x->rec.size + x->rec.scale_size));
        if (x->hashed) continue;
        dsr1_hash64_init(&x->hs, DSR1_HASH_SEED);
        DSR1_TRY(hash_back(w, &x->hs, x->rec.offset, x->rec.size, err));
        DSR1_TRY(hash_back(w, &x->hs, x->rec.scale_offset, x->rec.scale_size, err));
        x->rec.hash = dsr1_hash64_final(&x->hs);
    }
    return 0;
}

/* Serialise the directory: record, name, zero padding to 8. */
static uint8_t *build_directory(const dsr1_writer *w, uint64_t *size)
{
    uint64_t n = 0;
    for (size_t i = 0; i < w->n; i++)
        n += sizeof(dsr1_dir_record) + align_up(w->t[i].rec.name_len, 8);
    uint8_t *d = calloc(1, n + 1);
    if (!d) return NULL;
    uint64_t pos = 0;
    for (size_t i = 0; i < w->n; i++) {
        memcpy(d + pos, &w->t[i].rec, sizeof(dsr1_dir_record));
        memcpy(d + pos + sizeof(dsr1_dir_record), w->t[i].name, w->t[i].rec.name_len);
        pos += sizeof(dsr1_dir_record) + align_up(w->t[i].rec.name_len, 8);
    }
    *size = n;
    return d;
}

static int write_tail(dsr1_writer *w, dsr1_error *err)
{
    dsr1_file_header h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, DSR1_FILE_MAGIC, 8);
    h.version = DSR1_FILE_VERSION;
    h.alignment = DSR1_FILE_ALIGN;
    h.meta_offset = align_up(w->next, DSR1_FILE_ALIGN);
    h.meta_size = w->meta_len;
    h.dir_offset = align_up(h.meta_offset + h.meta_size, 8);
    h.n_tensors = w->n;
    uint8_t *dir = build_directory(w, &h.dir_size);
    if (!dir) return dsr1_errorf(err, DSR1_ENOMEM, "%s: out of memory", w->path);
    h.file_size = h.dir_offset + h.dir_size;
    dsr1_hash64_state s;
    dsr1_hash64_init(&s, DSR1_HASH_SEED);
    dsr1_hash64_update(&s, w->meta ? w->meta : "", w->meta_len);
    dsr1_hash64_update(&s, dir, h.dir_size);
    h.checksum = dsr1_hash64_final(&s);
    uint8_t page[DSR1_FILE_HEADER_SIZE] = {0};
    memcpy(page, &h, sizeof h);
    int rc = pwrite_all(w, "metadata", w->meta ? w->meta : "", w->meta_len, h.meta_offset, err);
    if (!rc) rc = pwrite_all(w, "directory", dir, h.dir_size, h.dir_offset, err);
    free(dir);
    /* Preallocation or a bug may have left the file longer: cut it to size. */
    if (!rc && ftruncate(w->fd, (off_t)h.file_size) != 0)
        rc = dsr1_errorf(err, DSR1_EIO, "%s: cannot set size: %s", w->tmp, strerror(errno));
    if (!rc) rc = pwrite_all(w, "header", page, sizeof page, 0, err);
    return rc;
}

/* After the rename, make the directory entry durable too (best effort). */
static void sync_parent(const char *path)
{
    char *copy = strdup(path);
    if (!copy) return;
    int fd = open(dirname(copy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
    free(copy);
}

int dsr1_writer_finish(dsr1_writer *w, dsr1_error *err)
{
    if (!w->meta_len) {
        dsr1_errorf(err, DSR1_EINVAL, "%s: no metadata set", w->path);
        dsr1_writer_abort(w);
        return DSR1_EINVAL;
    }
    int rc = finish_tensors(w, err);
    if (!rc) rc = write_tail(w, err);
    if (!rc && fsync(w->fd) != 0)
        rc = dsr1_errorf(err, DSR1_EIO, "%s: fsync: %s", w->tmp, strerror(errno));
    /* Drop the written pages from the page cache (they are on disk now).
     * Pages cached by write(2) are small folios; read back through a
     * mapping, a kernel with large folios for the filesystem (ext4 from
     * Linux 6.16, xfs) caches them in 2 MiB folios that are mapped with 2
     * MiB pages, and decode, which streams the weights once per token,
     * reads those 15-20% faster (README, Memory check and preload). Best effort. */
    if (!rc) (void)posix_fadvise(w->fd, 0, 0, POSIX_FADV_DONTNEED);
    if (!rc && rename(w->tmp, w->path) != 0)
        rc = dsr1_errorf(err, DSR1_EIO, "%s: cannot rename to %s: %s", w->tmp, w->path,
                         strerror(errno));
    if (rc) {
        dsr1_writer_abort(w);
        return rc;
    }
    sync_parent(w->path);
    close(w->fd);
    w->fd = -1;
    free(w->tmp);
    w->tmp = NULL; /* renamed: nothing left to remove */
    dsr1_writer_abort(w);
    return 0;
}

const char *dsr1_writer_temp_path(const dsr1_writer *w) { return w->tmp; }

void dsr1_writer_abort(dsr1_writer *w)
{
    if (!w) return;
    if (w->fd >= 0) close(w->fd);
    if (w->tmp) unlink(w->tmp);
    for (size_t i = 0; i < w->n; i++) free(w->t[i].name);
    free(w->t);
    free(w->meta);
    free(w->tmp);
    free(w->path);
    free(w);
}
