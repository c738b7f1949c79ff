/*
 * kvcache.c - the paged latent KV cache (layout and invariants in
 * kvcache.h).
 *
 * Owns: page allocation (a free stack), per-page holder counts (pages shared
 * with the prefix cache), per-slot page tables, and the row codec every
 * backend stores with (F32 / BF16 / FP8 with a per-row scale). The rows'
 * bytes are the backend's (kv_create): this file moves them only through
 * its kv_read / kv_write / kv_copy hooks. Does not know about attention,
 * scheduling or the prefix tree: the engine decides who gets pages, the
 * tree only holds references and lets them go on reclaim.
 *
 * FP8 rows use scale = amax / 448 over the whole row (latent and rope part
 * together), so a row is one quantisation group, as the per-token-per-layer
 * scheme in the design asks; an all-zero row stores scale 1.
 */
#include "kvcache.h"

#include <stdlib.h>
#include <string.h>

#include "numeric.h"

static size_t type_elem(dsr1_kv_type t)
{
    return t == DSR1_KV_F32 ? 4 : t == DSR1_KV_BF16 ? 2 : 1;
}

size_t dsr1_kv_elem_size(dsr1_kv_type t) { return type_elem(t); }

void dsr1_kv_encode_row(dsr1_kv_type t, const float *latent, int nl, const float *pe, int np,
                        void *dst, float *scale)
{
    if (t == DSR1_KV_F32) {
        float *d = dst;
        memcpy(d, latent, (size_t)nl * 4);
        memcpy(d + nl, pe, (size_t)np * 4);
    } else if (t == DSR1_KV_BF16) {
        uint16_t *d = dst;
        for (int i = 0; i < nl; i++) d[i] = dsr1_f32_to_bf16(latent[i]);
        for (int i = 0; i < np; i++) d[nl + i] = dsr1_f32_to_bf16(pe[i]);
    } else {
        uint8_t *d = dst;
        float amax = 0;
        for (int i = 0; i < nl; i++) amax = fmaxf(amax, fabsf(latent[i]));
        for (int i = 0; i < np; i++) amax = fmaxf(amax, fabsf(pe[i]));
        float sc = amax > 0 ? amax / 448.0f : 1.0f, inv = 1.0f / sc;
        *scale = sc;
        for (int i = 0; i < nl; i++) d[i] = dsr1_f32_to_fp8e4m3(latent[i] * inv);
        for (int i = 0; i < np; i++) d[nl + i] = dsr1_f32_to_fp8e4m3(pe[i] * inv);
    }
}

void dsr1_kv_decode_row(dsr1_kv_type t, const void *src, float scale, int row, float *out)
{
    if (t == DSR1_KV_F32) {
        memcpy(out, src, (size_t)row * 4);
    } else if (t == DSR1_KV_BF16) {
        const uint16_t *d = src;
        for (int i = 0; i < row; i++) out[i] = dsr1_bf16_to_f32(d[i]);
    } else {
        const uint8_t *d = src;
        for (int i = 0; i < row; i++) out[i] = dsr1_fp8e4m3_to_f32(d[i]) * scale;
    }
}

uint64_t dsr1_kvcache_token_bytes(dsr1_kv_type type, int n_layers, int row)
{
    uint64_t per = (uint64_t)row * type_elem(type) + (type == DSR1_KV_FP8 ? 4 : 0);
    return per * (uint64_t)n_layers;
}

static int check_options(const dsr1_kvcache_options *o, dsr1_error *err)
{
    if (o->n_layers <= 0 || o->kv_lora_rank <= 0 || o->rope_dim < 0 || o->max_seqs <= 0 ||
        o->ctx <= 0 || o->block < 0)
        return dsr1_errorf(err, DSR1_EINVAL,
                           "kv cache: bad shape (layers %d, rank %d, rope %d, seqs %d, ctx %d)",
                           o->n_layers, o->kv_lora_rank, o->rope_dim, o->max_seqs, o->ctx);
    if (o->type != DSR1_KV_F32 && o->type != DSR1_KV_BF16 && o->type != DSR1_KV_FP8)
        return dsr1_errorf(err, DSR1_EINVAL, "kv cache: unknown type %d", (int)o->type);
    return 0;
}

int dsr1_kvcache_create(dsr1_kvcache **out, const dsr1_kvcache_options *o, dsr1_error *err)
{
    *out = NULL;
    DSR1_TRY(check_options(o, err));
    dsr1_kvcache *kv = calloc(1, sizeof *kv);
    if (!kv) return dsr1_errorf(err, DSR1_ENOMEM, "kv cache: out of memory");
    kv->type = o->type;
    kv->n_layers = o->n_layers;
    kv->kv_lora_rank = o->kv_lora_rank;
    kv->rope_dim = o->rope_dim;
    kv->row = o->kv_lora_rank + o->rope_dim;
    kv->block = o->block ? o->block : 64;
    kv->max_seqs = o->max_seqs;
    kv->ctx = o->ctx;
    kv->max_pages = (o->ctx + kv->block - 1) / kv->block;
    kv->elem = type_elem(o->type);
    uint64_t page_bytes =
        dsr1_kvcache_token_bytes(o->type, o->n_layers, kv->row) * (uint64_t)kv->block;
    uint64_t want = (uint64_t)kv->max_pages * (uint64_t)o->max_seqs;
    uint64_t pages = o->bytes ? o->bytes / page_bytes : want;
    if (pages > want) pages = want; /* more than every slot can use is waste */
    if (pages < 1 || pages > INT32_MAX) {
        free(kv);
        return dsr1_errorf(err, DSR1_ERANGE,
                           "kv cache: budget of %llu bytes holds no %llu-byte page",
                           (unsigned long long)o->bytes, (unsigned long long)page_bytes);
    }
    if (!o->be || !o->be->kv_create) {
        free(kv);
        return dsr1_errorf(err, DSR1_EINVAL, "kv cache: no backend for the pages");
    }
    kv->n_pages = (int)pages;
    kv->be = o->be;
    kv->dev = o->dev;
    dsr1_kv_layout l = {.type = o->type, .n_layers = o->n_layers, .kv_lora_rank = o->kv_lora_rank,
                        .rope_dim = o->rope_dim, .row = kv->row, .block = kv->block,
                        .n_pages = kv->n_pages};
    kv->free_pages = malloc(pages * sizeof(int32_t));
    kv->table = calloc((size_t)o->max_seqs * (size_t)kv->max_pages, sizeof(int32_t));
    kv->n_held = calloc((size_t)o->max_seqs, sizeof(int32_t));
    kv->len = calloc((size_t)o->max_seqs, sizeof(int32_t));
    kv->used = calloc((size_t)o->max_seqs, 1);
    kv->ref = calloc(pages, sizeof(int32_t));
    int rc = !kv->free_pages || !kv->table || !kv->n_held || !kv->len || !kv->used || !kv->ref
                 ? DSR1_ENOMEM
                 : o->be->kv_create(o->dev, &l, &kv->store, err);
    if (rc) {
        dsr1_kvcache_free(kv);
        if (rc != DSR1_ENOMEM) return rc;
        /* The one message a user can act on (issue: never a crash). */
        double gb = (double)pages * (double)page_bytes / 1e9;
        return dsr1_errorf(err, DSR1_ENOMEM, "not enough memory for a KV cache of %.*f GB; "
                           "lower --ctx or --parallel", gb < 10 ? 1 : 0, gb);
    }
    /* Stack of free pages, lowest id on top so allocation order is stable. */
    for (int i = 0; i < kv->n_pages; i++) kv->free_pages[i] = kv->n_pages - 1 - i;
    kv->n_free = kv->n_pages;
    *out = kv;
    return 0;
}

void dsr1_kvcache_free(dsr1_kvcache *kv)
{
    if (!kv) return;
    if (kv->store) kv->be->kv_free(kv->dev, kv->store);
    free(kv->free_pages);
    free(kv->table);
    free(kv->n_held);
    free(kv->len);
    free(kv->used);
    free(kv->ref);
    free(kv);
}

int dsr1_kvcache_seq_alloc(dsr1_kvcache *kv, int *seq, dsr1_error *err)
{
    for (int s = 0; s < kv->max_seqs; s++) {
        if (kv->used[s]) continue;
        kv->used[s] = 1;
        kv->len[s] = 0;
        kv->n_held[s] = 0;
        *seq = s;
        return 0;
    }
    return dsr1_errorf(err, DSR1_ERANGE, "kv cache: all %d sequence slots in use", kv->max_seqs);
}

void dsr1_kvcache_seq_free(dsr1_kvcache *kv, int seq)
{
    if (!kv || seq < 0 || seq >= kv->max_seqs || !kv->used[seq]) return;
    dsr1_kvcache_truncate(kv, seq, 0);
    kv->used[seq] = 0;
}

int dsr1_kvcache_pages_needed(const dsr1_kvcache *kv, int seq, int new_len)
{
    int need = (new_len + kv->block - 1) / kv->block - kv->n_held[seq];
    return need > 0 ? need : 0;
}

int dsr1_kvcache_reserve(dsr1_kvcache *kv, int seq, int new_len, dsr1_error *err)
{
    DSR1_ASSERT(seq >= 0 && seq < kv->max_seqs && kv->used[seq]);
    if (new_len > kv->ctx)
        return dsr1_errorf(err, DSR1_ERANGE, "kv cache: %d tokens exceed the context of %d",
                           new_len, kv->ctx);
    int need = dsr1_kvcache_pages_needed(kv, seq, new_len);
    if (need > kv->n_free && kv->reclaim) kv->reclaim(kv->reclaim_ctx, need - kv->n_free);
    if (need > kv->n_free)
        return dsr1_errorf(err, DSR1_ERANGE,
                           "kv cache: full (%d pages of %d tokens, %d free, %d needed)",
                           kv->n_pages, kv->block, kv->n_free, need);
    int32_t *tab = kv->table + (size_t)seq * (size_t)kv->max_pages;
    for (int i = 0; i < need; i++) {
        int32_t p = kv->free_pages[--kv->n_free];
        kv->ref[p] = 1;
        tab[kv->n_held[seq]++] = p;
    }
    if (new_len > kv->len[seq]) kv->len[seq] = new_len;
    return 0;
}

void dsr1_kvcache_page_ref(dsr1_kvcache *kv, int32_t page) { kv->ref[page]++; }

void dsr1_kvcache_page_unref(dsr1_kvcache *kv, int32_t page)
{
    DSR1_ASSERT(kv->ref[page] > 0);
    if (--kv->ref[page] == 0) kv->free_pages[kv->n_free++] = page;
}

void dsr1_kvcache_share(dsr1_kvcache *kv, int seq, const int32_t *pages, int n)
{
    DSR1_ASSERT(kv->used[seq] && kv->len[seq] == kv->n_held[seq] * kv->block &&
                (kv->n_held[seq] + n) * kv->block <= kv->ctx);
    int32_t *tab = kv->table + (size_t)seq * (size_t)kv->max_pages;
    for (int i = 0; i < n; i++) {
        kv->ref[pages[i]]++;
        tab[kv->n_held[seq]++] = pages[i];
    }
    kv->len[seq] = kv->n_held[seq] * kv->block;
}

int dsr1_kvcache_own_tail(dsr1_kvcache *kv, int seq, dsr1_error *err)
{
    int len = kv->len[seq], i = len / kv->block;
    int32_t *tab = kv->table + (size_t)seq * (size_t)kv->max_pages;
    if (len % kv->block == 0 || i >= kv->n_held[seq] || kv->ref[tab[i]] <= 1) return 0;
    if (!kv->n_free && kv->reclaim) kv->reclaim(kv->reclaim_ctx, 1);
    if (!kv->n_free)
        return dsr1_errorf(err, DSR1_ERANGE, "kv cache: full (no page for a copy)");
    int32_t old = tab[i], p = kv->free_pages[kv->n_free - 1];
    /* The whole page, every layer, inside the backend's storage. */
    DSR1_TRY(kv->be->kv_copy(kv->dev, kv->store, p, old, err));
    kv->n_free--;
    kv->ref[p] = 1;
    tab[i] = p;
    dsr1_kvcache_page_unref(kv, old);
    return 0;
}

void dsr1_kvcache_truncate(dsr1_kvcache *kv, int seq, int len)
{
    DSR1_ASSERT(seq >= 0 && seq < kv->max_seqs && len >= 0);
    if (len > kv->len[seq]) return;
    int keep = (len + kv->block - 1) / kv->block;
    int32_t *tab = kv->table + (size_t)seq * (size_t)kv->max_pages;
    /* Let go in reverse so the next allocation reuses the same pages. */
    while (kv->n_held[seq] > keep) dsr1_kvcache_page_unref(kv, tab[--kv->n_held[seq]]);
    kv->len[seq] = len;
}

/* Calls fn for each page-sized run of rows [pos, pos + count) of seq. */
static int each_run(const dsr1_kvcache *kv, int seq, int layer, int pos, int count,
                    int (*fn)(const dsr1_kvcache *, int page, int layer, int first, int n,
                              size_t done, void *ctx, dsr1_error *err),
                    void *ctx, dsr1_error *err)
{
    if (seq < 0 || seq >= kv->max_seqs || !kv->used[seq] || layer < 0 || layer >= kv->n_layers ||
        pos < 0 || count < 0 || pos + count > kv->len[seq])
        return dsr1_errorf(err, DSR1_EINVAL, "kv cache: rows %d+%d of slot %d layer %d not held",
                           pos, count, seq, layer);
    const int32_t *tab = kv->table + (size_t)seq * (size_t)kv->max_pages;
    for (int done = 0; done < count;) {
        int p = pos + done, first = p % kv->block;
        int n = kv->block - first < count - done ? kv->block - first : count - done;
        DSR1_TRY(fn(kv, tab[p / kv->block], layer, first, n, (size_t)done, ctx, err));
        done += n;
    }
    return 0;
}

typedef struct rows_io {
    void *data;
    float *scale;
} rows_io;

static int get_run(const dsr1_kvcache *kv, int page, int layer, int first, int n, size_t done,
                   void *ctx, dsr1_error *err)
{
    rows_io *io = ctx;
    return kv->be->kv_read(kv->dev, kv->store, page, layer, first, n,
                           (char *)io->data + done * (size_t)kv->row * kv->elem,
                           io->scale ? io->scale + done : NULL, err);
}

static int put_run(const dsr1_kvcache *kv, int page, int layer, int first, int n, size_t done,
                   void *ctx, dsr1_error *err)
{
    rows_io *io = ctx;
    return kv->be->kv_write(kv->dev, kv->store, page, layer, first, n,
                            (const char *)io->data + done * (size_t)kv->row * kv->elem,
                            io->scale ? io->scale + done : NULL, err);
}

int dsr1_kvcache_get_rows(const dsr1_kvcache *kv, int seq, int layer, int pos, int count,
                          void *data, float *scale, dsr1_error *err)
{
    rows_io io = {data, scale};
    return each_run(kv, seq, layer, pos, count, get_run, &io, err);
}

int dsr1_kvcache_put_rows(dsr1_kvcache *kv, int seq, int layer, int pos, int count,
                          const void *data, const float *scale, dsr1_error *err)
{
    rows_io io = {(void *)(uintptr_t)data, (float *)(uintptr_t)scale};
    return each_run(kv, seq, layer, pos, count, put_run, &io, err);
}

void dsr1_kvcache_write(dsr1_kvcache *kv, int seq, int layer, int pos, const float *latent,
                        const float *pe)
{
    unsigned char row[4 * 4096];
    float scale = 1.0f;
    DSR1_ASSERT((size_t)kv->row * kv->elem <= sizeof row);
    dsr1_kv_encode_row(kv->type, latent, kv->kv_lora_rank, pe, kv->rope_dim, row, &scale);
    int rc = dsr1_kvcache_put_rows(kv, seq, layer, pos, 1, row, &scale, NULL);
    DSR1_ASSERT(rc == 0);
}

void dsr1_kvcache_read(const dsr1_kvcache *kv, int seq, int layer, int pos, float *out)
{
    unsigned char row[4 * 4096];
    float scale = 1.0f;
    DSR1_ASSERT((size_t)kv->row * kv->elem <= sizeof row);
    int rc = dsr1_kvcache_get_rows(kv, seq, layer, pos, 1, row, &scale, NULL);
    DSR1_ASSERT(rc == 0);
    dsr1_kv_decode_row(kv->type, row, scale, kv->row, out);
}

void dsr1_kvcache_step(const dsr1_kvcache *kv, dsr1_step *s)
{
    s->kv = kv->store;
    s->page_table = kv->table;
    s->max_seqs = kv->max_seqs;
    s->max_pages = kv->max_pages;
    s->block = kv->block;
}
