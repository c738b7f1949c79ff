/*
 * hub_fetch.c - the downloads of a pull (dsr1_hub_fetch, see hub.h).
 *
 * Owns: a pool of worker threads, each with its own libcurl easy handle
 * (kept across files, so connections are reused), taking the next file of
 * the plan; one file's download with resume, retry and verification.
 *
 * A file goes to blobs/<name>.incomplete. Whatever is there from before is
 * hashed first and the rest asked for with "Range: bytes=N-"; a 206 from N
 * appends, a 200 starts over (the server ignored the range). Bytes are
 * hashed as they are written, so the digest always covers exactly the
 * partial's bytes; only a verified file is renamed to blobs/<name> (after
 * fdatasync), and only then linked under snapshots/. So a crash, a kill or
 * a full disk leaves at worst a partial that the next run resumes, never a
 * wrong blob. A digest mismatch deletes the partial: its bytes cannot be
 * trusted to resume from.
 *
 * Failures: HTTP 401/403/404 and write errors (disk full, file too large)
 * stop the whole pull (every file would fail the same way); cancellation
 * too. Timeouts, dropped connections, 429, 408 and 5xx are retried with a
 * doubling wait (Retry-After when the server gives one), the count of tries
 * reset whenever a try made progress. Anything else fails its file only.
 *
 * The progress callback runs on the calling thread, which only waits.
 */
#include "hub.h"

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MAX_NOTES 16

typedef struct shared {
    dsr1_hub_plan *p;
    const dsr1_hub_opts *o;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    size_t next;             /* next file index to take (mu) */
    size_t files_done;       /* (mu) */
    int active;              /* workers still running (mu) */
    int stop;                /* a fatal error: take no more files (mu; read racily by
                                the transfer callback, which only polls it) */
    int fatal_rc;            /* (mu) */
    dsr1_error fatal;        /* (mu) */
    char notes[MAX_NOTES][320]; /* waiting for the progress callback (mu) */
    int n_notes;
    _Atomic uint64_t done;   /* bytes in partials and fetched blobs */
} shared;

/* One try of one file. */
typedef struct xfer {
    shared *s;
    dsr1_hub_file *f;
    int fd;
    EVP_MD_CTX *md;
    uint64_t offset;         /* bytes in the partial, all hashed */
    long status;             /* of the response being received */
    int body_ok;             /* the response's body goes to the file */
    int werr;                /* errno of a failed write */
    int too_long, bad_range, restarted;
    uint64_t range_start;    /* Content-Range start of a 206 */
    double retry_after;      /* seconds, 0 if none */
    char error_code[64];     /* X-Error-Code */
} xfer;

static void note(shared *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note(shared *s, const char *fmt, ...)
{
    pthread_mutex_lock(&s->mu);
    if (s->n_notes < MAX_NOTES) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(s->notes[s->n_notes++], sizeof s->notes[0], fmt, ap);
        va_end(ap);
    }
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

static int stopping(const shared *s)
{
    return (s->o->cancel && *s->o->cancel) || __atomic_load_n(&s->stop, __ATOMIC_RELAXED);
}

/* ---- hashing the partial -------------------------------------------------------- */

static void md_reset(xfer *x)
{
    EVP_DigestInit_ex(x->md, x->f->lfs ? EVP_sha256() : EVP_sha1(), NULL);
    if (!x->f->lfs) { /* git's blob id: sha1("blob <size>\0" + content) */
        char head[40];
        int n = snprintf(head, sizeof head, "blob %llu", (unsigned long long)x->f->size) + 1;
        EVP_DigestUpdate(x->md, head, (size_t)n);
    }
}

/* Start over: empty the partial and the digest. */
static int restart(xfer *x)
{
    atomic_fetch_sub(&x->s->done, x->offset);
    x->offset = 0;
    md_reset(x);
    x->restarted = 1;
    return ftruncate(x->fd, 0);
}

/* Hash the first n bytes already in the partial. */
static int hash_prefix(xfer *x, uint64_t n, dsr1_error *err, const char *part)
{
    static const size_t cap = 1 << 20;
    unsigned char *buf = malloc(cap);
    if (!buf) return dsr1_errorf(err, DSR1_ENOMEM, "out of memory");
    uint64_t at = 0;
    while (at < n) {
        size_t want = n - at < cap ? (size_t)(n - at) : cap;
        ssize_t r = pread(x->fd, buf, want, (off_t)at);
        if (r <= 0) {
            free(buf);
            return dsr1_errorf(err, DSR1_EIO, "%s: read: %s", part, r ? strerror(errno) : "short");
        }
        EVP_DigestUpdate(x->md, buf, (size_t)r);
        at += (uint64_t)r;
    }
    free(buf);
    return 0;
}

/* ---- libcurl callbacks ----------------------------------------------------------- */

static size_t on_header(char *h, size_t size, size_t n, void *ud)
{
    xfer *x = ud;
    size_t len = size * n;
    char line[512];
    snprintf(line, sizeof line, "%.*s", (int)(len < sizeof line - 1 ? len : sizeof line - 1), h);
    line[strcspn(line, "\r\n")] = 0;
    unsigned long long a;
    if (!strncmp(line, "HTTP/", 5)) { /* a new response (each redirect hop has one) */
        const char *sp = strchr(line, ' ');
        x->status = sp ? strtol(sp + 1, NULL, 10) : 0;
        x->body_ok = 0;
        x->retry_after = 0;
        x->range_start = 0;
        x->error_code[0] = 0;
    } else if (!strncasecmp(line, "retry-after:", 12)) {
        x->retry_after = strtod(line + 12, NULL); /* an HTTP date is not parsed: backoff then */
    } else if (!strncasecmp(line, "content-range:", 14) &&
               sscanf(line + 14, " bytes %llu-", &a) == 1) {
        x->range_start = a;
    } else if (!strncasecmp(line, "x-error-code:", 13)) {
        snprintf(x->error_code, sizeof x->error_code, "%s", line + 13 + (line[13] == ' '));
    }
    return len;
}

/* The first body bytes of a response: decide whether they go to the file. */
static int accept_body(xfer *x)
{
    if (x->status == 206 && x->range_start == x->offset) return 1;
    if (x->status == 206) {
        x->bad_range = 1;
        return 0;
    }
    if (x->status == 200) return x->offset == 0 || restart(x) == 0 ? 1 : (x->werr = errno, 0);
    return -1; /* an error page: read and drop it */
}

static size_t on_data(char *ptr, size_t size, size_t n, void *ud)
{
    xfer *x = ud;
    size_t len = size * n;
    if (!x->body_ok) {
        int a = accept_body(x);
        if (a < 0) return len;
        if (a == 0) return 0;
        x->body_ok = 1;
    }
    if (x->offset + len > x->f->size) {
        x->too_long = 1;
        return 0;
    }
    for (size_t w = 0; w < len;) {
        ssize_t r = pwrite(x->fd, ptr + w, len - w, (off_t)(x->offset + w));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            x->werr = r < 0 ? errno : ENOSPC;
            /* what did land is a correct prefix, but is not hashed: cut it */
            if (ftruncate(x->fd, (off_t)x->offset) != 0) x->werr = errno;
            return 0;
        }
        w += (size_t)r;
    }
    EVP_DigestUpdate(x->md, ptr, len);
    x->offset += len;
    atomic_fetch_add(&x->s->done, len);
    return len;
}

static int on_xfer(void *ud, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un)
{
    (void)dt, (void)dn, (void)ut, (void)un;
    return stopping(((xfer *)ud)->s);
}

/* ---- one file ---------------------------------------------------------------------- */

enum { TRY_DONE, TRY_AGAIN, TRY_FAIL, TRY_FATAL };

static int transient_curl(CURLcode c)
{
    return c == CURLE_OPERATION_TIMEDOUT || c == CURLE_COULDNT_CONNECT || c == CURLE_RECV_ERROR ||
           c == CURLE_SEND_ERROR || c == CURLE_PARTIAL_FILE || c == CURLE_GOT_NOTHING ||
           c == CURLE_COULDNT_RESOLVE_HOST || c == CURLE_COULDNT_RESOLVE_PROXY ||
           c == CURLE_SSL_CONNECT_ERROR || c == CURLE_HTTP2 || c == CURLE_HTTP2_STREAM;
}

/* What the try that ended with cc means; the message goes into why/err. */
static int classify(xfer *x, CURLcode cc, const char *part, char *why, size_t cap, dsr1_error *err)
{
    shared *s = x->s;
    const dsr1_hub_file *f = x->f;
    char kept[32];
    snprintf(kept, sizeof kept, "%llu", (unsigned long long)x->offset);
    if (x->werr)
        return dsr1_errorf(err, DSR1_EIO, "%s: write: %s: %s of %llu bytes kept; free some space "
                           "and run the same command again to resume", part, strerror(x->werr),
                           kept, (unsigned long long)f->size), TRY_FATAL;
    if (s->o->cancel && *s->o->cancel)
        return dsr1_errorf(err, DSR1_EINTR, "interrupted; partial files are kept: run the same "
                           "command again to resume"), TRY_FATAL;
    if (cc == CURLE_ABORTED_BY_CALLBACK) return TRY_FATAL; /* another file's fatal error */
    if (x->status == 401 || x->status == 403 || x->status == 404)
        return dsr1_hub_http_error(s->p, f->path, x->status, x->error_code, err), TRY_FATAL;
    if (cc == CURLE_OK && (x->status == 200 || x->status == 206) && x->offset == f->size)
        return TRY_DONE;
    if (x->too_long) {
        restart(x);
        return dsr1_errorf(err, DSR1_EFORMAT, "%s: the server sent more than the %llu bytes the "
                           "model info gives", f->path, (unsigned long long)f->size), TRY_FAIL;
    }
    if (x->bad_range || x->status == 416) {
        restart(x);
        snprintf(why, cap, "the server did not resume at byte %s; starting over", kept);
        return TRY_AGAIN;
    }
    if (cc != CURLE_OK && transient_curl(cc)) {
        snprintf(why, cap, "%s", cc == CURLE_PARTIAL_FILE ? "the connection closed early"
                 : cc == CURLE_OPERATION_TIMEDOUT ? "no data for too long (--timeout)"
                 : curl_easy_strerror(cc));
        return TRY_AGAIN;
    }
    if (x->status == 429 || x->status == 408 || x->status >= 500) {
        snprintf(why, cap, "HTTP %ld", x->status);
        return TRY_AGAIN;
    }
    if (cc == CURLE_OK && (x->status == 200 || x->status == 206)) { /* ended early, cleanly */
        snprintf(why, cap, "the response ended at byte %s", kept);
        return TRY_AGAIN;
    }
    if (cc != CURLE_OK)
        return dsr1_errorf(err, DSR1_EIO, "%s: %s", f->path, curl_easy_strerror(cc)), TRY_FAIL;
    return dsr1_hub_http_error(s->p, f->path, x->status, x->error_code, err), TRY_FAIL;
}

/* Sleep up to sec seconds, waking early when the pull stops. */
static void wait_for(shared *s, double sec)
{
    for (double t = 0; t < sec && !stopping(s); t += 0.05) usleep(50000);
}

static void setup(CURL *c, xfer *x, const char *url, struct curl_slist *h, char *range)
{
    const dsr1_hub_opts *o = x->s->o;
    curl_easy_reset(c);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(c, CURLOPT_MAXREDIRS, 10L);
    curl_easy_setopt(c, CURLOPT_USERAGENT, "dsr1/" DSR1_VERSION " (libcurl)");
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 30L);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, (long)(o->stall_timeout > 0 ? o->stall_timeout : 60));
    curl_easy_setopt(c, CURLOPT_BUFFERSIZE, 1L << 20);
    curl_easy_setopt(c, CURLOPT_ACCEPT_ENCODING, NULL); /* identity: sizes are byte sizes */
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, x);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, x);
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_xfer);
    curl_easy_setopt(c, CURLOPT_XFERINFODATA, x);
    snprintf(range, 32, "%llu-", (unsigned long long)x->offset);
    if (x->offset) curl_easy_setopt(c, CURLOPT_RANGE, range);
}

/* Tries until the partial holds the whole file, or a failure. */
static int download(CURL *c, xfer *x, const char *url, struct curl_slist *h, const char *part,
                    dsr1_error *err)
{
    const dsr1_hub_opts *o = x->s->o;
    int max = o->max_retries > 0 ? o->max_retries : 8, tries = 0;
    double base = o->retry_wait > 0 ? o->retry_wait : 1;
    char range[32], why[200], b1[32];
    while (x->offset < x->f->size || x->f->size == 0) {
        uint64_t before = x->offset;
        x->status = 0;
        x->body_ok = x->too_long = x->bad_range = x->restarted = 0;
        setup(c, x, url, h, range);
        CURLcode cc = curl_easy_perform(c);
        int r = classify(x, cc, part, why, sizeof why, err);
        if (r == TRY_DONE) return 0;
        if (r != TRY_AGAIN) return r == TRY_FATAL ? -1 : 1;
        tries = x->offset > before && !x->restarted ? 1 : tries + 1;
        if (tries >= max)
            return dsr1_errorf(err, DSR1_EIO, "%s: gave up after %d tries in a row without "
                               "progress (last: %s); run again to resume", x->f->path, tries, why), 1;
        double wait = x->retry_after > 0 ? x->retry_after : base * (double)(1u << (tries - 1));
        if (wait > 60 && x->retry_after <= 0) wait = 60;
        if (wait > 600) wait = 600;
        snprintf(b1, sizeof b1, "%llu", (unsigned long long)x->offset);
        note(x->s, "%s: %s; retrying in %.0f s (%s of %llu bytes kept)", x->f->path, why, wait,
             b1, (unsigned long long)x->f->size);
        wait_for(x->s, wait);
        if (stopping(x->s)) return classify(x, CURLE_ABORTED_BY_CALLBACK, part, why, sizeof why, err),
                            -1;
    }
    return 0;
}

/* The digest of the partial against the file's id; the partial goes on a mismatch. */
static int verify(xfer *x, const char *part, dsr1_error *err)
{
    unsigned char d[32];
    unsigned n = 0;
    char got[65];
    EVP_DigestFinal_ex(x->md, d, &n);
    for (unsigned i = 0; i < n; i++) snprintf(got + 2 * i, 3, "%02x", d[i]);
    if (!strcmp(got, x->f->blob)) return 0;
    unlink(part);
    atomic_fetch_sub(&x->s->done, x->offset);
    return dsr1_errorf(err, DSR1_EFORMAT, "%s: %s mismatch: expected %s, got %s; the download "
                       "was deleted: run again to fetch it afresh", x->f->path,
                       x->f->lfs ? "sha256" : "git blob id", x->f->blob, got);
}

/* Fetch f into blobs/ and link it. 0 ok, 1 this file failed, -1 fatal. */
static int fetch_file(shared *s, CURL *c, dsr1_hub_file *f, dsr1_error *err)
{
    dsr1_hub_plan *p = s->p;
    char part[PATH_MAX + 600], blob[PATH_MAX + 600], url[4096], auth[700];
    snprintf(blob, sizeof blob, "%s/blobs/%s", p->repo_dir, f->blob);
    snprintf(part, sizeof part, "%s.incomplete", blob);
    char *path = curl_easy_escape(c, f->path, 0);
    if (!path) return dsr1_errorf(err, DSR1_ENOMEM, "out of memory"), -1;
    for (char *q; (q = strstr(path, "%2F"));) { /* keep the path's slashes */
        *q = '/';
        memmove(q + 1, q + 3, strlen(q + 3) + 1);
    }
    snprintf(url, sizeof url, "%s/%s/resolve/%s/%s", p->endpoint, p->repo, p->commit, path);
    curl_free(path);
    xfer x = {.s = s, .f = f, .md = EVP_MD_CTX_new()};
    x.fd = open(part, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    struct stat st;
    if (x.fd >= 0 && flock(x.fd, LOCK_EX | LOCK_NB) != 0) { /* held until close */
        close(x.fd);
        EVP_MD_CTX_free(x.md);
        return dsr1_errorf(err, DSR1_EIO, "%s: another process is downloading it (a second "
                           "dsr1 pull of this repo?); run again when it is done", f->path), 1;
    }
    if (x.fd < 0 || fstat(x.fd, &st) != 0) {
        int e = errno;
        if (x.fd >= 0) close(x.fd);
        EVP_MD_CTX_free(x.md);
        return dsr1_errorf(err, DSR1_EIO, "%s: %s", part, strerror(e)), -1;
    }
    md_reset(&x);
    int rc = 0;
    uint64_t have = (uint64_t)st.st_size;
    if (have > f->size && ftruncate(x.fd, 0) == 0) have = 0;
    if (have && hash_prefix(&x, have, err, part)) rc = -1;
    x.offset = have; /* already counted in done by the plan */
    struct curl_slist *h = NULL;
    if (p->token) {
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", p->token);
        h = curl_slist_append(h, auth);
    }
    if (!rc) rc = download(c, &x, url, h, part, err);
    if (!rc && verify(&x, part, err)) rc = 1;
    curl_slist_free_all(h);
    EVP_MD_CTX_free(x.md);
    struct stat now;
    if (rc && fstat(x.fd, &now) == 0 && now.st_size == 0) unlink(part); /* nothing to resume */
    if (!rc && fdatasync(x.fd) != 0) {
        dsr1_errorf(err, DSR1_EIO, "%s: %s", part, strerror(errno));
        rc = -1;
    }
    close(x.fd);
    if (!rc && rename(part, blob) != 0) {
        dsr1_errorf(err, DSR1_EIO, "%s: cannot rename: %s", part, strerror(errno));
        rc = -1;
    }
    if (!rc && dsr1_hub_link(p, f, err)) rc = -1;
    return rc;
}

/* ---- the pool ------------------------------------------------------------------- */

static void *worker(void *arg)
{
    shared *s = arg;
    CURL *c = curl_easy_init();
    for (;;) {
        pthread_mutex_lock(&s->mu);
        while (s->next < s->p->n_files && (s->p->files[s->next].cached || s->p->files[s->next].dup))
            s->next++;
        if (!c || s->stop || s->next >= s->p->n_files || (s->o->cancel && *s->o->cancel)) {
            pthread_mutex_unlock(&s->mu);
            break;
        }
        dsr1_hub_file *f = &s->p->files[s->next++];
        pthread_mutex_unlock(&s->mu);
        dsr1_error e = {0};
        int rc = fetch_file(s, c, f, &e);
        pthread_mutex_lock(&s->mu);
        if (rc == 0) {
            f->fetched = 1;
            s->files_done++;
        } else if (rc < 0) {
            if (!s->stop && e.code) {
                s->fatal_rc = e.code;
                s->fatal = e;
            }
            if (e.code) __atomic_store_n(&s->stop, 1, __ATOMIC_RELAXED);
        } else {
            snprintf(f->error, sizeof f->error, "%s", e.msg);
            if (s->n_notes < MAX_NOTES) snprintf(s->notes[s->n_notes++], sizeof s->notes[0], "%s", e.msg);
        }
        pthread_cond_signal(&s->cv);
        pthread_mutex_unlock(&s->mu);
    }
    if (!c) {
        pthread_mutex_lock(&s->mu);
        if (!s->stop) dsr1_errorf(&s->fatal, s->fatal_rc = DSR1_ENOMEM, "libcurl: no handle");
        s->stop = 1;
        pthread_mutex_unlock(&s->mu);
    }
    curl_easy_cleanup(c);
    pthread_mutex_lock(&s->mu);
    s->active--;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* Report: notes first (one call each), then the counters. Called with mu held. */
static void report(shared *s, dsr1_hub_progress_fn fn, void *ctx)
{
    char notes[MAX_NOTES][320];
    int n = s->n_notes;
    memcpy(notes, s->notes, sizeof notes[0] * (size_t)n);
    s->n_notes = 0;
    dsr1_hub_progress pr = {atomic_load(&s->done),
                            s->p->bytes_total - s->p->bytes_cached - s->p->bytes_dup,
                            s->files_done, s->p->n_files, NULL};
    pthread_mutex_unlock(&s->mu);
    for (int i = 0; i < n && fn; i++) {
        pr.note = notes[i];
        fn(&pr, ctx);
    }
    pr.note = NULL;
    if (fn) fn(&pr, ctx);
    pthread_mutex_lock(&s->mu);
}

/* Files with the blob of an earlier one: linked once that one is there. */
static void link_dups(dsr1_hub_plan *p)
{
    for (size_t i = 0; i < p->n_files; i++) {
        dsr1_hub_file *f = &p->files[i], *o = f->dup ? &p->files[f->dup - 1] : NULL;
        if (!o || f->cached) continue;
        dsr1_error e = {0};
        if (o->error[0] || (!o->fetched && !o->cached))
            snprintf(f->error, sizeof f->error, "%s: same content as %s, which failed", f->path,
                     o->path);
        else if (dsr1_hub_link(p, f, &e))
            snprintf(f->error, sizeof f->error, "%s", e.msg);
    }
}

int dsr1_hub_fetch(dsr1_hub_plan *p, const dsr1_hub_opts *o, dsr1_hub_progress_fn fn, void *ctx,
                   dsr1_error *err)
{
    shared s = {.p = p, .o = o};
    size_t todo = 0;
    for (size_t i = 0; i < p->n_files; i++) {
        if (!p->files[i].cached) {
            todo += !p->files[i].dup;
            continue;
        }
        DSR1_TRY(dsr1_hub_link(p, &p->files[i], err)); /* fetched by another tool or run */
        s.files_done++;
    }
    atomic_store(&s.done, p->bytes_partial);
    int jobs = o->jobs < 1 ? 1 : o->jobs > DSR1_HUB_MAX_JOBS ? DSR1_HUB_MAX_JOBS : o->jobs;
    if ((size_t)jobs > todo) jobs = (int)todo;
    pthread_t th[DSR1_HUB_MAX_JOBS];
    pthread_mutex_init(&s.mu, NULL);
    pthread_cond_init(&s.cv, NULL);
    pthread_mutex_lock(&s.mu);
    for (int i = 0; i < jobs; i++)
        if (pthread_create(&th[s.active], NULL, worker, &s) == 0) s.active++;
    if (jobs && !s.active) {
        s.stop = 1;
        s.fatal_rc = dsr1_errorf(&s.fatal, DSR1_ENOMEM, "cannot start download threads");
    }
    while (s.active > 0) {
        struct timespec t;
        clock_gettime(CLOCK_REALTIME, &t);
        t.tv_nsec += 100000000;
        if (t.tv_nsec >= 1000000000) t.tv_sec++, t.tv_nsec -= 1000000000;
        pthread_cond_timedwait(&s.cv, &s.mu, &t);
        report(&s, fn, ctx);
    }
    report(&s, fn, ctx);
    pthread_mutex_unlock(&s.mu);
    for (int i = 0; i < jobs; i++) pthread_join(th[i], NULL);
    pthread_mutex_destroy(&s.mu);
    pthread_cond_destroy(&s.cv);
    if (s.fatal_rc) {
        *err = s.fatal;
        return s.fatal_rc;
    }
    link_dups(p);
    size_t failed = 0, first = 0;
    for (size_t i = p->n_files; i-- > 0;)
        if (p->files[i].error[0]) failed++, first = i;
    if (failed)
        return dsr1_errorf(err, DSR1_EIO, "%zu of %zu files failed (first: %s)", failed,
                           p->n_files, p->files[first].error);
    return dsr1_hub_write_ref(p, err);
}
