/*
 * kvcache.h - the paged latent KV cache: what MLA keeps per token.
 *
 * Per token and per layer (the main layers, then the MTP layer) one row of
 * kv_lora_rank + qk_rope_head_dim values: the kv_a_layernorm'd latent, then
 * the RoPE'd shared key part. Rows live in fixed pages of `block` tokens.
 * Storage types: F32 (the exact path), BF16 (default), FP8 e4m3 with one
 * float scale per token per layer (backends/backend.h: the row codec).
 *
 * Two halves, kept apart on purpose:
 *   - the PAGE TABLE (this struct, core's): which pages each sequence slot
 *     holds, the free stack, slot lengths and use flags. Reserving,
 *     truncating (rollback) and freeing are page-table work only;
 *   - the PAGE STORAGE (`store`, the backend's): the rows' bytes, wherever
 *     the backend keeps them (host memory for the CPU, device memory for a
 *     GPU). Core reaches them only through the backend's kv_read/kv_write/
 *     kv_copy hooks (dsr1_kvcache_get_rows/put_rows below); the forward
 *     hands the tables to the backend at each step.
 *
 * Invariants: a slot's pages cover positions [0, len); truncating only
 * drops whole pages past the new length, so rolling back is O(pages
 * dropped) and leaves earlier rows bit-identical. The cache never allocates
 * after dsr1_kvcache_create.
 *
 * Prefix sharing (core/prefix.c): a page may be held by several slots and
 * by the prefix tree at once; ref[page] counts the holders and a page goes
 * back to the free stack when the last one lets go. Only full pages below a
 * slot's computed length are ever shared, and rows are written only at or
 * past a slot's length, so a shared page is never written except when a
 * slot is cut back into one (reusing a kept sequence): dsr1_kvcache_own_tail
 * then gives the slot its own copy first (copy on write). When reserve is
 * short of pages it asks the reclaim hook (the prefix tree lets go of least
 * recently used pages) before failing.
 */
#ifndef DSR1_KVCACHE_H
#define DSR1_KVCACHE_H

#include <stddef.h>
#include <stdint.h>

#include "backends/backend.h"
#include "dsr1.h"
#include "error.h"

typedef struct dsr1_kvcache {
    dsr1_kv_type type;
    int n_layers;        /* main layers + MTP layers */
    int kv_lora_rank, rope_dim, row; /* row = kv_lora_rank + rope_dim */
    int block;           /* tokens per page */
    int n_pages;
    int max_seqs;
    int max_pages;       /* per slot: ceil(ctx / block) */
    int ctx;             /* max tokens per slot */
    size_t elem;         /* bytes per element of `type` */
    const dsr1_backend_ops *be; /* the page storage's backend (not owned) */
    void *dev;
    dsr1_bkv *store;     /* owned: the pages' bytes (backend.h) */
    /* page table */
    int32_t *free_pages; /* owned stack [n_pages] of free page ids */
    int n_free;
    int32_t *table;      /* owned [max_seqs][max_pages] page ids */
    int32_t *n_held;     /* owned [max_seqs] pages held by each slot */
    int32_t *len;        /* owned [max_seqs] tokens stored */
    uint8_t *used;       /* owned [max_seqs] slot allocated */
    int32_t *ref;        /* owned [n_pages] holders of each page (slots, prefix tree) */
    /* Called by reserve when fewer than `need` pages are free: free some
     * (return how many were freed). NULL: none. */
    int (*reclaim)(void *ctx, int need);
    void *reclaim_ctx;
} dsr1_kvcache;

typedef struct dsr1_kvcache_options {
    dsr1_kv_type type;
    int n_layers, kv_lora_rank, rope_dim;
    int block;           /* 0 = 64 */
    int max_seqs;
    int ctx;             /* max tokens per slot */
    uint64_t bytes;      /* page budget; 0 = enough for max_seqs * ctx */
    const dsr1_backend_ops *be; /* where the pages live (required) */
    void *dev;
} dsr1_kvcache_options;

/* Bytes one token occupies across all layers (data + scales). */
uint64_t dsr1_kvcache_token_bytes(dsr1_kv_type type, int n_layers, int row);

/* Allocate the whole cache up front. DSR1_ERANGE when the budget holds
 * fewer than one page; DSR1_ENOMEM ("not enough memory for a KV cache of
 * N GB; lower --ctx or --parallel") when the pages or tables do not fit. */
int dsr1_kvcache_create(dsr1_kvcache **out, const dsr1_kvcache_options *o,
                        dsr1_error *err);
void dsr1_kvcache_free(dsr1_kvcache *kv); /* NULL is a no-op */

/* Take a free slot (len 0, no pages); DSR1_ERANGE when none is free. */
int dsr1_kvcache_seq_alloc(dsr1_kvcache *kv, int *seq, dsr1_error *err);
/* Return a slot and all its pages. */
void dsr1_kvcache_seq_free(dsr1_kvcache *kv, int seq);

/* Make room for positions [0, new_len) and set len = new_len (rows past the
 * old length are then written by the caller in the same step). On failure
 * nothing changes: DSR1_ERANGE when past ctx or out of pages. */
int dsr1_kvcache_reserve(dsr1_kvcache *kv, int seq, int new_len, dsr1_error *err);
/* Pages a slot would need in addition to grow to new_len. */
int dsr1_kvcache_pages_needed(const dsr1_kvcache *kv, int seq, int new_len);
/* Roll a slot back to len tokens (len <= current), freeing whole pages. */
void dsr1_kvcache_truncate(dsr1_kvcache *kv, int seq, int len);

/* Append n shared pages (full, already written) to a slot whose length is
 * a whole number of pages; its length grows by n * block. */
void dsr1_kvcache_share(dsr1_kvcache *kv, int seq, const int32_t *pages, int n);
/* One more / one less holder of a page (the prefix tree). */
void dsr1_kvcache_page_ref(dsr1_kvcache *kv, int32_t page);
void dsr1_kvcache_page_unref(dsr1_kvcache *kv, int32_t page);
/* Copy on write: make the page holding position len (when len is inside a
 * page shared with another holder) the slot's own copy. DSR1_ERANGE when no
 * page is free for the copy (nothing changes). */
int dsr1_kvcache_own_tail(dsr1_kvcache *kv, int seq, dsr1_error *err);

/* Raw rows [pos, pos + count) of (seq, layer), pos + count <= len, in the
 * backend's exchange form (backend.h: count * row elements of `type`, and
 * count scales for FP8; scale may be NULL otherwise). */
int dsr1_kvcache_get_rows(const dsr1_kvcache *kv, int seq, int layer, int pos, int count,
                          void *data, float *scale, dsr1_error *err);
int dsr1_kvcache_put_rows(dsr1_kvcache *kv, int seq, int layer, int pos, int count,
                          const void *data, const float *scale, dsr1_error *err);

/* Store one row (latent[kv_lora_rank] then pe[rope_dim]) at pos < len,
 * encoded as every backend's kv_store does (tests, references). */
void dsr1_kvcache_write(dsr1_kvcache *kv, int seq, int layer, int pos,
                        const float *latent, const float *pe);
/* Read one row back as float32 into out[row]. */
void dsr1_kvcache_read(const dsr1_kvcache *kv, int seq, int layer, int pos, float *out);

/* The batch description's page-table part for a forward over this cache. */
void dsr1_kvcache_step(const dsr1_kvcache *kv, dsr1_step *s);

#endif
