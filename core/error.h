/*
 * error.h - dsr1's one error convention.
 *
 * Every fallible function returns 0 on success or a DSR1_E* code, and fills
 * the caller's dsr1_error with a one-line message of the form
 *   "<file or object>: <what was expected, what was found>"
 * (the CLI prefixes "dsr1: "). Library code never prints and never exits.
 * A NULL dsr1_error pointer is allowed: the message is then dropped.
 */
#ifndef DSR1_ERROR_H
#define DSR1_ERROR_H

#include <stddef.h>

enum {
    DSR1_OK = 0,
    DSR1_EINVAL = 1,      /* bad argument or bad input data */
    DSR1_EIO = 2,         /* a read, write, open or mmap failed */
    DSR1_EFORMAT = 3,     /* a file is malformed, truncated or inconsistent */
    DSR1_ENOMEM = 4,      /* an allocation failed */
    DSR1_EUNSUPPORTED = 5,/* valid input we do not handle (architecture, dtype) */
    DSR1_ERANGE = 6,      /* a limit was exceeded (context, KV cache, batch) */
    DSR1_ENOTFOUND = 7,   /* a named thing (tensor, key, file) is missing */
    DSR1_EINTR = 8,       /* interrupted by the caller (cancel flag, signal) */
};

typedef struct dsr1_error {
    int code;
    char msg[512];
} dsr1_error;

/* Fill err (if non-NULL) with code and a printf-style message; returns code,
 * so callers can write `return dsr1_errorf(err, DSR1_EIO, "%s: %s", ...)`. */
int dsr1_errorf(dsr1_error *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Prefix an existing message with "<context>: " (used when a lower layer's
 * message lacks the file name the caller knows). Returns err->code. */
int dsr1_error_wrap(dsr1_error *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Make s (NUL-terminated, changed in place) safe to print on a terminal:
 * each control character (C0, DEL, C1), and each byte of broken UTF-8,
 * becomes '?'. Valid printable UTF-8 is kept. Returns the new length. Every
 * dsr1_errorf message goes through it; so must any text from a file that
 * the CLI prints (model metadata, names). */
size_t dsr1_text_sanitize(char *s);

/* Short name of a code ("io error", ...). */
const char *dsr1_strerror(int code);

/* Forward a non-zero return code unchanged (the message is already set). */
#define DSR1_TRY(expr)                                                        \
    do {                                                                      \
        int dsr1_try_rc_ = (expr);                                            \
        if (dsr1_try_rc_ != 0) return dsr1_try_rc_;                           \
    } while (0)

/* Runtime check that stays on in release builds. It aborts with file:line:
 * use it for internal invariants only, never for input validation. */
void dsr1_panic(const char *file, int line, const char *what)
    __attribute__((noreturn));
#define DSR1_ASSERT(cond)                                                     \
    do {                                                                      \
        if (!(cond)) dsr1_panic(__FILE__, __LINE__, #cond);                   \
    } while (0)

#endif
