/*
 * common_resume.c - reading an output file back for `--resume`
 * (dsr1_common_read_back in common.h): which records are already there, and
 * where a torn last record must be cut.
 *
 * The rule is the same for plain and zstd files: only the torn tail of the
 * last write may be cut. Anything else that is not one of our records (a
 * line that is not a JSON object, a zstd frame that does not decompress or
 * declares an absurd size, bytes that are not a frame) is refused with the
 * byte or line where it was found, and the file is left untouched: a file
 * that is not ours, or damaged in the middle, must never be truncated.
 *
 * A torn zstd tail is told from a damaged frame by where it ends: the
 * writer puts one frame per record with one write(2), so a torn frame is a
 * prefix of the last frame (zstd says the input is too short) and no later
 * frame magic follows it. A flipped byte in an earlier frame also makes
 * zstd see "too short" when it hits a block size, but the later frames'
 * magic numbers are still there, so it is refused.
 */
#include "common.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>
#include <zstd_errors.h>

/* A frame's text is at most one record plus its newline; no record of
 * ours comes near this, and a declared size beyond it is a damaged or
 * foreign file (a size of 2^63 once made the buffer loop forever). */
#define MAX_FRAME_TEXT ((size_t)1 << 30)

static const unsigned char zstd_magic_bytes[4] = {0x28, 0xb5, 0x2f, 0xfd};

static int is_record(const char *line, size_t len)
{
    cJSON *j = cJSON_ParseWithLength(line, len);
    int ok = cJSON_IsObject(j);
    cJSON_Delete(j);
    return ok;
}

/* Walk the complete lines of text[0,n); returns the byte length of the good
 * prefix. Only the last line may be bad (torn); a bad line before it means
 * the file is not ours and the caller refuses (*bad_line set). */
static size_t good_lines(const char *text, size_t n, void (*fn)(void *, const char *, size_t),
                         void *ctx, long *bad_line)
{
    size_t pos = 0;
    long ln = 0;
    while (pos < n) {
        const char *nl = memchr(text + pos, '\n', n - pos);
        size_t l = nl ? (size_t)(nl - (text + pos)) : n - pos;
        ln++;
        if (!nl || !is_record(text + pos, l)) {
            if (nl && (size_t)(nl - text) + 1 < n) *bad_line = ln;
            return pos;
        }
        if (fn) fn(ctx, text + pos, l);
        pos += l + 1;
    }
    return pos;
}

static int refuse(dsr1_error *err, const char *path, size_t at, const char *what)
{
    return dsr1_errorf(err, DSR1_EFORMAT,
                       "%s: %s at byte %zu; not resuming into this file (it is left as it is)",
                       path, what, at);
}

/* zstd: every frame must hold whole records; only a torn last frame is cut
 * (*keep = where it starts). */
static int good_frames(const char *data, size_t n, void (*fn)(void *, const char *, size_t),
                       void *ctx, size_t *keep, const char *path, dsr1_error *err)
{
    size_t pos = 0, cap = 0;
    char *text = NULL;
    int rc = 0;
    while (!rc && pos < n) {
        size_t fsz = ZSTD_findFrameCompressedSize(data + pos, n - pos);
        if (ZSTD_isError(fsz)) {
            int torn = ZSTD_getErrorCode(fsz) == ZSTD_error_srcSize_wrong &&
                       !memmem(data + pos + 1, n - pos - 1, zstd_magic_bytes, 4);
            if (torn) break;
            rc = refuse(err, path, pos, "not a complete zstd frame");
            break;
        }
        unsigned long long csz = ZSTD_getFrameContentSize(data + pos, fsz);
        if (csz == ZSTD_CONTENTSIZE_ERROR || csz == ZSTD_CONTENTSIZE_UNKNOWN ||
            csz > MAX_FRAME_TEXT) {
            rc = refuse(err, path, pos, "a zstd frame without a usable content size");
            break;
        }
        if (cap < csz + 1) {
            char *t = realloc(text, (size_t)csz + 1);
            if (!t) {
                rc = dsr1_errorf(err, DSR1_ENOMEM, "%s: out of memory", path);
                break;
            }
            text = t;
            cap = (size_t)csz + 1;
        }
        size_t got = ZSTD_decompress(text, cap, data + pos, fsz);
        long bad = 0;
        if (ZSTD_isError(got) || got != csz) {
            rc = refuse(err, path, pos, "a zstd frame that does not decompress");
        } else if (good_lines(text, got, NULL, NULL, &bad) != got) {
            rc = refuse(err, path, pos, "a zstd frame that is not whole JSON records");
        } else {
            good_lines(text, got, fn, ctx, &bad);
            pos += fsz;
        }
    }
    free(text);
    *keep = pos;
    return rc;
}

int dsr1_common_read_back(const char *path, void (*fn)(void *ctx, const char *line, size_t len),
                          void *ctx, char *note, size_t note_cap, dsr1_error *err)
{
    note[0] = 0;
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT) return 0;
    if (fd < 0) return dsr1_errorf(err, DSR1_EIO, "%s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_size == 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return 0;
    }
    size_t n = (size_t)st.st_size, keep = 0;
    char *data = mmap(NULL, n, PROT_READ, MAP_PRIVATE, fd, 0);
    if (data == MAP_FAILED) {
        close(fd);
        return dsr1_errorf(err, DSR1_EIO, "%s: mmap: %s", path, strerror(errno));
    }
    int rc = 0;
    if (n >= 4 && !memcmp(data, zstd_magic_bytes, 4)) {
        rc = good_frames(data, n, fn, ctx, &keep, path, err);
    } else {
        long bad = 0;
        keep = good_lines(data, n, NULL, NULL, &bad);
        if (bad)
            rc = dsr1_errorf(err, DSR1_EFORMAT,
                             "%s: line %ld is not a JSON record; not resuming into this file",
                             path, bad);
        else
            good_lines(data, keep, fn, ctx, &bad);
    }
    munmap(data, n);
    if (!rc && keep < n) {
        if (ftruncate(fd, (off_t)keep) != 0)
            rc = dsr1_errorf(err, DSR1_EIO, "%s: truncate: %s", path, strerror(errno));
        else
            snprintf(note, note_cap, "%s: cut %zu bytes of an incomplete last record", path,
                     n - keep);
    }
    close(fd);
    return rc;
}
