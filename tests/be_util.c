/*
 * be_util.c - see be_util.h. Not a test file (no DSR1_TEST here).
 */
#include "be_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *dsr1_test_backend(void)
{
    const char *s = getenv("DSR1_TEST_BACKEND");
    return s && *s ? s : "cpu";
}

int dsr1_test_backend_usable(const char *name, char *why, size_t n)
{
    const dsr1_backend_ops *ops;
    dsr1_error err;
    if (dsr1_backend_find(name, &ops, NULL, 0, &err) == 0) return 1;
    /* the registry's message names the backend already: keep the reason */
    char pre[64];
    snprintf(pre, sizeof pre, "backend %s: ", name);
    size_t k = strlen(pre);
    snprintf(why, n, "%s", strncmp(err.msg, pre, k) ? err.msg : err.msg + k);
    return 0;
}

int tbe_open_opts(tbe *b, const char *name, const dsr1_backend_options *o, const dsr1_ws_sizes *s,
                  dsr1_error *err)
{
    memset(b, 0, sizeof *b);
    DSR1_TRY(dsr1_backend_find(name, &b->be, NULL, 0, err));
    DSR1_TRY(b->be->create(o, &b->dev, err));
    return b->be->ws_create(b->dev, s, &b->ws, err);
}

int tbe_open(tbe *b, const char *name, int threads, const dsr1_ws_sizes *s, dsr1_error *err)
{
    dsr1_backend_options o = {.threads = threads, .deterministic = 1}; /* the invariance checks */
    return tbe_open_opts(b, name, &o, s, err);
}

void tbe_close(tbe *b)
{
    if (!b->be) return;
    for (int i = 0; i < b->n_bufs; i++) b->be->buf_free(b->dev, b->bufs[i]);
    if (b->ws) b->be->ws_free(b->ws);
    if (b->dev) b->be->destroy(b->dev);
    memset(b, 0, sizeof *b);
}

dsr1_bweight *tbe_load(tbe *b, const dsr1_wmat *m, int64_t count, size_t stride,
                       size_t scale_stride, dsr1_wrole role)
{
    dsr1_wdesc d = {.name = "test weight", .role = role, .mat = *m, .count = count,
                    .stride = stride, .scale_stride = scale_stride};
    dsr1_bweight *w = NULL;
    dsr1_error err;
    return b->be->load(b->dev, &d, DSR1_PLACE_AUTO, &w, &err) ? NULL : w;
}

dsr1_view tbe_buf(tbe *b, size_t n, int64_t ld)
{
    dsr1_bbuf *buf = NULL;
    dsr1_error err;
    if (b->n_bufs < 64 && b->be->buf_create(b->dev, n, &buf, &err) == 0) b->bufs[b->n_bufs++] = buf;
    return (dsr1_view){buf, 0, ld};
}

int tbe_begin(tbe *b, int n, const int32_t *ids, const int32_t *pos)
{
    dsr1_step st = {.n = n, .ids = ids, .pos = pos};
    dsr1_error err;
    return b->be->step_begin(b->ws, &st, &err);
}

int tbe_end(tbe *b)
{
    dsr1_error err;
    return b->be->step_end(b->ws, &err);
}
