/*
 * be_util.h - running tests against a backend chosen at run time:
 * $DSR1_TEST_BACKEND (cpu, cuda, hip; default cpu), so the golden,
 * invariance, engine and speculative-decoding tests run unchanged against
 * any backend present, and skip with the registry's reason when it is not.
 * Plus small helpers to drive a backend's ops directly (test_backend_ops.c).
 */
#ifndef DSR1_TEST_BE_UTIL_H
#define DSR1_TEST_BE_UTIL_H

#include "backends/backend.h"

/* The backend name the suite runs against. */
const char *dsr1_test_backend(void);
/* 1 when backend `name` can run here; else 0 with the reason in why. */
int dsr1_test_backend_usable(const char *name, char *why, size_t n);

/* Skip the calling test when the suite's backend cannot run here. */
#define DSR1_TEST_NEED_BACKEND() do { char why_[256]; \
    if (!dsr1_test_backend_usable(dsr1_test_backend(), why_, sizeof why_)) \
        DSR1_SKIP("backend %s: %s", dsr1_test_backend(), why_); } while (0)

/* A backend device with a workspace and the buffers made through it. */
typedef struct tbe {
    const dsr1_backend_ops *be;
    void *dev, *ws;
    dsr1_bbuf *bufs[64];
    int n_bufs;
} tbe;

/* Open backend `name` with `threads` and a workspace of sizes s, in the
 * deterministic mode (the invariance checks). */
int tbe_open(tbe *b, const char *name, int threads, const dsr1_ws_sizes *s, dsr1_error *err);
/* The same with the caller's options (the fast mode: deterministic 0). */
int tbe_open_opts(tbe *b, const char *name, const dsr1_backend_options *o, const dsr1_ws_sizes *s,
                  dsr1_error *err);
void tbe_close(tbe *b);
/* Load count matrices like m (stride bytes apart) with a role. NULL on failure. */
dsr1_bweight *tbe_load(tbe *b, const dsr1_wmat *m, int64_t count, size_t stride,
                       size_t scale_stride, dsr1_wrole role);
/* A buffer of n floats as a view of rows of ld; write host rows into it. */
dsr1_view tbe_buf(tbe *b, size_t n, int64_t ld);
/* One-op steps: begin (no cache) and end. */
int tbe_begin(tbe *b, int n, const int32_t *ids, const int32_t *pos);
int tbe_end(tbe *b);

#endif
