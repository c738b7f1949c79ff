/*
 * chat_save.c - the /save file of `dsr1 chat` (format in chat_save.h).
 *
 * Written with zstd's streaming API straight to the file in 1 MiB pieces,
 * so saving a large KV cache needs no second full-size buffer; written to
 * "<path>.tmp" and renamed, so an interrupted save never destroys an
 * earlier one. Read back with the streaming decompressor, every buffer
 * bounded by the caller's limits (the model's context) before it grows.
 */
#include "chat_save.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

static const char magic[] = "DSR1CHAT 1\n";

typedef struct zwriter {
    FILE *f;
    ZSTD_CCtx *c;
    char *buf;
    size_t cap;
} zwriter;

static int zw_put(zwriter *w, const void *p, size_t n, ZSTD_EndDirective end)
{
    ZSTD_inBuffer in = {p, n, 0};
    for (;;) {
        ZSTD_outBuffer out = {w->buf, w->cap, 0};
        size_t left = ZSTD_compressStream2(w->c, &out, &in, end);
        if (ZSTD_isError(left)) return -1;
        if (out.pos && fwrite(w->buf, 1, out.pos, w->f) != out.pos) return -1;
        if (end == ZSTD_e_end ? left == 0 : in.pos == in.size) return 0;
    }
}

static int write_body(zwriter *w, const char *head, const void *kv, size_t kv_len)
{
    if (zw_put(w, magic, sizeof magic - 1, ZSTD_e_continue) ||
        zw_put(w, head, strlen(head), ZSTD_e_continue) || zw_put(w, "\n", 1, ZSTD_e_continue))
        return -1;
    const char *p = kv;
    for (size_t off = 0; off < kv_len; off += 1u << 20) {
        size_t n = kv_len - off < (1u << 20) ? kv_len - off : 1u << 20;
        if (zw_put(w, p + off, n, ZSTD_e_continue)) return -1;
    }
    return zw_put(w, NULL, 0, ZSTD_e_end);
}

int dsr1_chat_save_write(const char *path, const cJSON *header, const void *kv, size_t kv_len,
                         dsr1_error *err)
{
    cJSON *h = cJSON_Duplicate(header, 1);
    if (!h || !cJSON_AddNumberToObject(h, "kv_bytes", (double)kv_len)) {
        cJSON_Delete(h);
        return dsr1_errorf(err, DSR1_ENOMEM, "%s: out of memory", path);
    }
    char *head = cJSON_PrintUnformatted(h);
    cJSON_Delete(h);
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    zwriter w = {fopen(tmp, "wb"), ZSTD_createCCtx(), malloc(ZSTD_CStreamOutSize()),
                 ZSTD_CStreamOutSize()};
    int rc = 0;
    if (!w.f) {
        rc = dsr1_errorf(err, DSR1_EIO, "%s: %s", tmp, strerror(errno));
    } else if (!head || !w.c || !w.buf) {
        rc = dsr1_errorf(err, DSR1_ENOMEM, "%s: out of memory", path);
    } else {
        ZSTD_CCtx_setParameter(w.c, ZSTD_c_compressionLevel, 3);
        ZSTD_CCtx_setParameter(w.c, ZSTD_c_checksumFlag, 1);
        if (write_body(&w, head, kv, kv_len) || fflush(w.f))
            rc = dsr1_errorf(err, DSR1_EIO, "%s: write failed: %s", tmp, strerror(errno));
    }
    if (w.f && fclose(w.f) && !rc) rc = dsr1_errorf(err, DSR1_EIO, "%s: %s", tmp, strerror(errno));
    if (!rc && rename(tmp, path))
        rc = dsr1_errorf(err, DSR1_EIO, "%s: %s", path, strerror(errno));
    if (rc && w.f) remove(tmp);
    ZSTD_freeCCtx(w.c);
    free(w.buf);
    free(head);
    return rc;
}

/* ---- reading --------------------------------------------------------------
 *
 * A save is read as a stream with every allocation bounded before it is
 * made: the header line may be at most max_json bytes, and the KV bytes it
 * declares at most max_kv (what the engine's context can hold); the KV
 * buffer then grows with the data that actually arrives, never past the
 * declared size, so a small crafted file cannot make us allocate gigabytes
 * (a zstd frame of zeros compresses ~30000:1).
 */

typedef struct zreader {
    FILE *f;
    ZSTD_DCtx *d;
    char *in;
    size_t icap;
    ZSTD_inBuffer ib;
    size_t last; /* the decoder's last hint: 0 when a frame just ended */
} zreader;

/* Up to want bytes into dst; fewer only at the end of the file. -1 on a
 * zstd error (message in err). */
static long long zr_read(zreader *z, const char *path, void *dst, size_t want, dsr1_error *err)
{
    ZSTD_outBuffer ob = {dst, want, 0};
    while (ob.pos < ob.size) {
        size_t before = ob.pos, used = z->ib.pos;
        size_t r = ZSTD_decompressStream(z->d, &ob, &z->ib);
        if (ZSTD_isError(r)) {
            dsr1_errorf(err, DSR1_EFORMAT, "%s: not a dsr1 chat save (zstd: %s)", path,
                        ZSTD_getErrorName(r));
            return -1;
        }
        /* A call that moved nothing (no input left after a finished frame)
         * answers with the next frame's header hint: not a torn frame. */
        if (ob.pos > before || z->ib.pos > used) {
            z->last = r;
            continue;
        }
        size_t got = fread(z->in, 1, z->icap, z->f);
        if (!got) break;
        z->ib = (ZSTD_inBuffer){z->in, got, 0};
    }
    return (long long)ob.pos;
}

/* The magic and header line: *buf holds [0, *n) with the newline at *nl. */
static int read_head(zreader *z, const char *path, size_t max_json, char **buf, size_t *n,
                     size_t *nl, dsr1_error *err)
{
    size_t m = sizeof magic - 1, limit = m + max_json + 1, cap = 0;
    *buf = NULL;
    *n = 0;
    for (;;) {
        if (*n == cap) {
            size_t nc = cap ? cap * 2 : 1 << 16;
            if (nc > limit) nc = limit;
            if (nc == cap)
                return dsr1_errorf(err, DSR1_EFORMAT, "%s: header longer than %zu bytes (the most "
                                   "a conversation of this context takes)", path, max_json);
            char *b = realloc(*buf, nc);
            if (!b) return dsr1_errorf(err, DSR1_ENOMEM, "%s: out of memory", path);
            *buf = b;
            cap = nc;
        }
        long long got = zr_read(z, path, *buf + *n, cap - *n, err);
        if (got < 0) return DSR1_EFORMAT;
        size_t from = *n > m ? *n : m;
        *n += (size_t)got;
        if (*n >= m && memcmp(*buf, magic, m))
            return dsr1_errorf(err, DSR1_EFORMAT, "%s: not a dsr1 chat save", path);
        char *p = *n > from ? memchr(*buf + from, '\n', *n - from) : NULL;
        if (p) {
            *nl = (size_t)(p - *buf);
            return 0;
        }
        if (*n < cap)
            return dsr1_errorf(err, DSR1_EFORMAT, "%s: not a dsr1 chat save (truncated)", path);
    }
}

/* The header's kv_bytes, checked against the limit. */
static int kv_size(const cJSON *h, const char *path, size_t max_kv, size_t *out, dsr1_error *err)
{
    const cJSON *kb = cJSON_GetObjectItemCaseSensitive(h, "kv_bytes");
    /* range first: converting inf or 1e300 to an integer is undefined */
    if (!cJSON_IsObject(h) || !cJSON_IsNumber(kb) || !(kb->valuedouble >= 0) ||
        kb->valuedouble > 1e18 || kb->valuedouble != (double)(uint64_t)kb->valuedouble)
        return dsr1_errorf(err, DSR1_EFORMAT, "%s: not a dsr1 chat save (header)", path);
    if (kb->valuedouble > (double)max_kv)
        return dsr1_errorf(err, DSR1_ERANGE, "%s: %.0f KV bytes, more than this context can hold "
                           "(%zu bytes)", path, kb->valuedouble, max_kv);
    *out = (size_t)kb->valuedouble;
    return 0;
}

/* The KV bytes: `have` of them already read (at pre), then exactly want in
 * total, then the end of the stream. */
static int read_kv(zreader *z, const char *path, const char *pre, size_t have, size_t want,
                   void **kv, dsr1_error *err)
{
    if (have > want)
        return dsr1_errorf(err, DSR1_EFORMAT, "%s: more data than the header declares", path);
    size_t cap = want < (1u << 20) ? want : 1u << 20, n = have;
    char *b = want ? malloc(cap > have ? cap : have) : NULL;
    if (want && !b) return dsr1_errorf(err, DSR1_ENOMEM, "%s: out of memory", path);
    if (have) memcpy(b, pre, have);
    if (cap < have) cap = have;
    int rc = 0;
    while (!rc && n < want) {
        if (n == cap) {
            size_t nc = cap * 2 < want ? cap * 2 : want;
            char *nb = realloc(b, nc);
            if (!nb) rc = dsr1_errorf(err, DSR1_ENOMEM, "%s: out of memory", path);
            else b = nb, cap = nc;
            if (rc) break;
        }
        long long got = zr_read(z, path, b + n, cap - n, err);
        if (got < 0) rc = DSR1_EFORMAT;
        else if (got == 0) rc = dsr1_errorf(err, DSR1_EFORMAT, "%s: truncated", path);
        else n += (size_t)got;
    }
    char extra;
    long long more = rc ? 0 : zr_read(z, path, &extra, 1, err);
    if (!rc && more < 0) rc = DSR1_EFORMAT;
    else if (!rc && more > 0)
        rc = dsr1_errorf(err, DSR1_EFORMAT, "%s: more data than the header declares", path);
    else if (!rc && z->last != 0) rc = dsr1_errorf(err, DSR1_EFORMAT, "%s: truncated", path);
    if (rc) {
        free(b);
        return rc;
    }
    *kv = b;
    return 0;
}

int dsr1_chat_save_read(const char *path, size_t max_json, size_t max_kv, cJSON **header,
                        void **kv, size_t *kv_len, dsr1_error *err)
{
    *header = NULL;
    *kv = NULL;
    *kv_len = 0;
    zreader z = {fopen(path, "rb"), ZSTD_createDCtx(), malloc(ZSTD_DStreamInSize()),
                 ZSTD_DStreamInSize(), {NULL, 0, 0}, 1};
    char *buf = NULL;
    size_t n = 0, nl = 0, want = 0, m = sizeof magic - 1;
    cJSON *h = NULL;
    int rc = 0;
    if (!z.f) rc = dsr1_errorf(err, DSR1_EIO, "%s: %s", path, strerror(errno));
    else if (!z.d || !z.in) rc = dsr1_errorf(err, DSR1_ENOMEM, "%s: out of memory", path);
    /* zstd's default window limit (128 MiB) bounds the decoder itself. */
    if (!rc) rc = read_head(&z, path, max_json, &buf, &n, &nl, err);
    if (!rc && !(h = cJSON_ParseWithLength(buf + m, nl - m)))
        rc = dsr1_errorf(err, DSR1_EFORMAT, "%s: not a dsr1 chat save (header is not JSON)", path);
    if (!rc) rc = kv_size(h, path, max_kv, &want, err);
    if (!rc) rc = read_kv(&z, path, buf + nl + 1, n - nl - 1, want, kv, err);
    if (z.f) fclose(z.f);
    ZSTD_freeDCtx(z.d);
    free(z.in);
    free(buf);
    if (rc) {
        cJSON_Delete(h);
        return rc;
    }
    *header = h;
    *kv_len = want;
    return 0;
}
