/*
 * kvcache.c - the paged latent KV cache (layout and invariants in
 * kvcache.h).
 *
 * Owns: page allocation (a free stack), per-page holder counts (pages shared
 * with the prefix cache), per-slot page tables, row storage and its
 * conversions (F32 / BF16 / FP8 with a per-row scale). Does not know about
 * attention, scheduling or the prefix tree: the engine decides who gets
 * pages, the tree only holds references and frees them on reclaim.
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
    kv->n_pages = (int)pages;
    size_t rows = (size_t)pages * (size_t)kv->n_layers * (size_t)kv->block;
    kv->data = malloc(rows * (size_t)kv->row * kv->elem);
    kv->scale = o->type == DSR1_KV_FP8 ? malloc(rows * sizeof(float)) : NULL;
    kv->free_pages = malloc(pages * sizeof(int32_t));
    kv->table = calloc((size_t)o->max_seqs * (size_t)kv->max_pages, sizeof(int32_t));
    kv->n_held = calloc((size_t)o->max_seqs, sizeof(int32_t));
    kv->len = calloc((size_t)o->max_seqs, sizeof(int32_t));
    kv->used = calloc((size_t)o->max_seqs, 1);
    kv->ref = calloc(pages, sizeof(int32_t));
    if (!kv->data || (o->type == DSR1_KV_FP8 && !kv->scale) || !kv->free_pages ||
        !kv->table || !kv->n_held || !kv->len || !kv->used || !kv->ref) {
        dsr1_kvcache_free(kv);
        return dsr1_errorf(err, DSR1_ENOMEM, "kv cache: cannot allocate %llu pages of %llu bytes",
                           (unsigned long long)pages, (unsigned long long)page_bytes);
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
    free(kv->data);
    free(kv->scale);
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
    if (seq < 0 || seq >= kv->max_seqs || !kv->used[seq]) return;
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
    int32_t old = tab[i], p = kv->free_pages[--kv->n_free];
    /* A page of every layer is contiguous: [n_layers][block][row] rows. */
    size_t rows = (size_t)kv->n_layers * (size_t)kv->block;
    memcpy((char *)kv->data + (size_t)p * rows * (size_t)kv->row * kv->elem,
           (const char *)kv->data + (size_t)old * rows * (size_t)kv->row * kv->elem,
           rows * (size_t)kv->row * kv->elem);
    if (kv->scale) memcpy(kv->scale + (size_t)p * rows, kv->scale + (size_t)old * rows,
                          rows * sizeof(float));
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

void dsr1_kvcache_write(dsr1_kvcache *kv, int seq, int layer, int pos, const float *latent,
                        const float *pe)
{
    DSR1_ASSERT(pos >= 0 && pos < kv->len[seq] && layer >= 0 && layer < kv->n_layers);
    size_t r = dsr1_kvcache_row_index(kv, seq, layer, pos);
    int nl = kv->kv_lora_rank, n = kv->row;
    if (kv->type == DSR1_KV_F32) {
        float *d = (float *)kv->data + r * (size_t)n;
        memcpy(d, latent, (size_t)nl * 4);
        memcpy(d + nl, pe, (size_t)kv->rope_dim * 4);
    } else if (kv->type == DSR1_KV_BF16) {
        uint16_t *d = (uint16_t *)kv->data + r * (size_t)n;
        for (int i = 0; i < nl; i++) d[i] = dsr1_f32_to_bf16(latent[i]);
        for (int i = 0; i < kv->rope_dim; i++) d[nl + i] = dsr1_f32_to_bf16(pe[i]);
    } else {
        uint8_t *d = (uint8_t *)kv->data + r * (size_t)n;
        float amax = 0;
        for (int i = 0; i < nl; i++) amax = fmaxf(amax, fabsf(latent[i]));
        for (int i = 0; i < kv->rope_dim; i++) amax = fmaxf(amax, fabsf(pe[i]));
        float s = amax > 0 ? amax / 448.0f : 1.0f, inv = 1.0f / s;
        kv->scale[r] = s;
        for (int i = 0; i < nl; i++) d[i] = dsr1_f32_to_fp8e4m3(latent[i] * inv);
        for (int i = 0; i < kv->rope_dim; i++) d[nl + i] = dsr1_f32_to_fp8e4m3(pe[i] * inv);
    }
}

void dsr1_kvcache_read(const dsr1_kvcache *kv, int seq, int layer, int pos, float *out)
{
    DSR1_ASSERT(pos >= 0 && pos < kv->len[seq]);
    size_t r = dsr1_kvcache_row_index(kv, seq, layer, pos);
    int n = kv->row;
    if (kv->type == DSR1_KV_F32) {
        memcpy(out, (const float *)kv->data + r * (size_t)n, (size_t)n * 4);
    } else if (kv->type == DSR1_KV_BF16) {
        const uint16_t *d = (const uint16_t *)kv->data + r * (size_t)n;
        for (int i = 0; i < n; i++) out[i] = dsr1_bf16_to_f32(d[i]);
    } else {
        const uint8_t *d = (const uint8_t *)kv->data + r * (size_t)n;
        for (int i = 0; i < n; i++) out[i] = dsr1_fp8e4m3_to_f32(d[i]) * kv->scale[r];
    }
}
