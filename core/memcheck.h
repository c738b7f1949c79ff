/*
 * memcheck.h - will a model fit? The memory a model and an engine would
 * take, estimated from the file before anything is loaded, compared with
 * what the machine has; and reading a model's weights into the page cache
 * ahead of time (preload, optionally locked there).
 *
 * Core never prints: the CLI words the verdict (cli/common.c) and draws the
 * preload progress it is called back with.
 */
#ifndef DSR1_MEMCHECK_H
#define DSR1_MEMCHECK_H

#include <stdint.h>

#include "config.h"
#include "dsr1.h"
#include "error.h"

typedef struct dsr1_mem_estimate {
    int ctx, max_seqs;        /* the context and sequences the engine would use */
    uint64_t kv_token_bytes;  /* KV bytes per token (all layers) */
    uint64_t weights;         /* bytes of the file (mapped, read while running) */
    uint64_t weights_cached;  /* of them in the page cache now (mincore) */
    uint64_t kv;              /* the KV cache as the engine would size it */
    uint64_t buffers;         /* per-step buffers (logits, activations), approximate */
    uint64_t available;       /* MemAvailable of /proc/meminfo; 0 when unknown */
} dsr1_mem_estimate;

typedef enum {
    DSR1_MEM_OK = 0,
    DSR1_MEM_WARN = 1,   /* KV and buffers fit, the weights will not all stay cached */
    DSR1_MEM_REFUSE = 2, /* KV and buffers alone exceed what is available */
} dsr1_mem_verdict;

/* The estimate for config cfg (n_layers main + MTP layers) with engine
 * options o (ctx 0 = the model's, capped as the engine caps it). weights,
 * weights_cached and available are left to the caller. Pure. */
void dsr1_mem_estimate_config(const dsr1_config *cfg, int n_layers, dsr1_compute compute,
                              const dsr1_engine_options *o, dsr1_mem_estimate *out);

/* The estimate for the .dsr1 file at path: reads only its header,
 * directory and metadata (nothing of the weights), the page-cache
 * residency of the file (mincore) and MemAvailable. */
int dsr1_mem_estimate_file(const char *path, dsr1_compute compute, const dsr1_engine_options *o,
                           dsr1_mem_estimate *out, dsr1_error *err);

/* Verdict on an estimate. MemAvailable already counts reclaimable page
 * cache, this file's cached pages among them, so: everything resident
 * (weights + KV + buffers) must fit in it, and the anonymous part (KV +
 * buffers, which cannot be paged back from the file) must fit at the very
 * least. Unknown availability (0) is OK. */
dsr1_mem_verdict dsr1_mem_judge(const dsr1_mem_estimate *e);

/* The largest context (tokens per sequence, whole 64-token pages) that
 * fits what is available with max_seqs sequences: with the weights
 * resident too when any context does, else the KV cache and buffers alone;
 * 0 when none fits. */
int dsr1_mem_max_ctx(const dsr1_mem_estimate *e);

/*
 * Read the file at path into the page cache by touching every page of a
 * private read-only mapping, calling progress(done, total, ctx) now and then
 * (may be NULL). With lock, the pages are also locked in memory (mlock) for
 * as long as *out lives; otherwise *out is NULL. DSR1_EIO naming the file
 * and the reason (RLIMIT_MEMLOCK for mlock) on failure.
 */
typedef struct dsr1_preload dsr1_preload;
int dsr1_mem_preload(dsr1_preload **out, const char *path, int lock,
                     void (*progress)(uint64_t done, uint64_t total, void *ctx), void *ctx,
                     dsr1_error *err);
void dsr1_mem_preload_free(dsr1_preload *p); /* unlocks and unmaps; NULL is a no-op */

#endif
