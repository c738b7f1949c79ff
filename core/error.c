/*
 * error.c - the error helpers declared in error.h. No state, no allocation.
 *
 * Messages often quote what a file says (a tensor name, a token, a key), and
 * they end up on a terminal: every message is passed through
 * dsr1_text_sanitize, so a crafted file cannot send escape sequences, move the
 * cursor or break the one-line rule through an error.
 */
#include "error.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int dsr1_errorf(dsr1_error *err, int code, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
        dsr1_text_sanitize(err->msg);
        err->code = code;
    }
    return code;
}

int dsr1_error_wrap(dsr1_error *err, const char *fmt, ...)
{
    if (!err) return DSR1_EINVAL;
    char prefix[256], old[sizeof err->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, err->msg, sizeof old);
    /* Truncation is fine: messages are one line and capped. */
    size_t n = strlen(prefix);
    if (n > sizeof err->msg - 3) n = sizeof err->msg - 3;
    memcpy(err->msg, prefix, n);
    memcpy(err->msg + n, ": ", 2);
    size_t rest = sizeof err->msg - n - 3;
    size_t ol = strnlen(old, rest);
    memcpy(err->msg + n + 2, old, ol);
    err->msg[n + 2 + ol] = 0;
    dsr1_text_sanitize(err->msg);
    return err->code;
}

/* Length of the valid UTF-8 sequence at s (1..4), 0 if invalid. */
static size_t utf8_len(const unsigned char *s)
{
    unsigned c = s[0];
    size_t n = c < 0x80 ? 1 : c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3
             : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
    for (size_t i = 1; i < n; i++)
        if ((s[i] & 0xC0) != 0x80) return 0;
    if (n == 3 && ((c == 0xE0 && s[1] < 0xA0) || (c == 0xED && s[1] >= 0xA0))) return 0;
    if (n == 4 && ((c == 0xF0 && s[1] < 0x90) || (c == 0xF4 && s[1] >= 0x90))) return 0;
    return n;
}

size_t dsr1_text_sanitize(char *s)
{
    unsigned char *r = (unsigned char *)s, *w = r;
    while (*r) {
        size_t n = utf8_len(r);
        /* C0 controls, DEL, C1 controls (U+0080..U+009F, which some
         * terminals obey as 8-bit ESC sequences) and broken UTF-8. */
        if (!n || *r < 0x20 || *r == 0x7F || (n == 2 && r[0] == 0xC2 && r[1] < 0xA0)) {
            *w++ = '?';
            r += n ? n : 1;
            continue;
        }
        memmove(w, r, n);
        w += n;
        r += n;
    }
    *w = 0;
    return (size_t)((char *)w - s);
}

const char *dsr1_strerror(int code)
{
    switch (code) {
    case DSR1_OK: return "ok";
    case DSR1_EINVAL: return "invalid input";
    case DSR1_EIO: return "i/o error";
    case DSR1_EFORMAT: return "malformed file";
    case DSR1_ENOMEM: return "out of memory";
    case DSR1_EUNSUPPORTED: return "unsupported";
    case DSR1_ERANGE: return "limit exceeded";
    case DSR1_ENOTFOUND: return "not found";
    case DSR1_EINTR: return "interrupted";
    }
    return "unknown error";
}

void dsr1_panic(const char *file, int line, const char *what)
{
    fprintf(stderr, "dsr1: internal error at %s:%d: %s\n", file, line, what);
    abort();
}
