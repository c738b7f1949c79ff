/*
 * test_kvcache.c - the paged latent KV cache: page accounting, exact and
 * cheap rollback, limits (context, pages, slots) refused with a message,
 * and the storage types' round trips (F32 exact, BF16 = round to nearest
 * even, FP8 within half a step of its per-row scale).
 */
#include <stdlib.h>

#include "core/kvcache.h"
#include "core/numeric.h"
#include "be_util.h"
#include "test.h"

/* The cache's pages live in a backend: the suite's (DSR1_TEST_BACKEND). */
typedef struct pages {
    const dsr1_backend_ops *be;
    void *dev;
} pages;

static void pages_close(pages *p)
{
    if (p->dev) p->be->destroy(p->dev);
}

static dsr1_kvcache *make(dsr1_test_ctx *t, pages *pg, dsr1_kv_type type, int seqs, int ctx,
                          uint64_t bytes)
{
    dsr1_error err;
    dsr1_backend_options bo = {.threads = 1, .deterministic = 1};
    pg->dev = NULL;
    CHECK_OK(dsr1_backend_find(dsr1_test_backend(), &pg->be, NULL, 0, &err), &err);
    if (!pg->be) return NULL;
    CHECK_OK(pg->be->create(&bo, &pg->dev, &err), &err);
    if (!pg->dev) return NULL;
    dsr1_kvcache_options o = {.type = type, .n_layers = 3, .kv_lora_rank = 8, .rope_dim = 4,
                              .block = 4, .max_seqs = seqs, .ctx = ctx, .bytes = bytes,
                              .be = pg->be, .dev = pg->dev};
    dsr1_kvcache *kv = NULL;
    CHECK_OK(dsr1_kvcache_create(&kv, &o, &err), &err);
    return kv;
}

static void row_of(int seq, int layer, int pos, float *lat, float *pe)
{
    for (int i = 0; i < 8; i++) lat[i] = (float)(seq * 1000 + layer * 100 + pos) + 0.25f * i;
    for (int i = 0; i < 4; i++) pe[i] = -(float)pos - 0.5f * i;
}

DSR1_TEST(kvcache_pages_and_rollback)
{
    DSR1_TEST_NEED_BACKEND();
    pages pg = {0};
    dsr1_kvcache *kv = make(t, &pg, DSR1_KV_F32, 2, 16, 0);
    REQUIRE(kv);
    CHECK_EQ_INT(kv->n_pages, 8); /* 2 slots x ceil(16 / 4) */
    dsr1_error err;
    int a, b;
    CHECK_OK(dsr1_kvcache_seq_alloc(kv, &a, &err), &err);
    CHECK_OK(dsr1_kvcache_seq_alloc(kv, &b, &err), &err);
    CHECK(dsr1_kvcache_seq_alloc(kv, &b, &err) == DSR1_ERANGE);
    CHECK_OK(dsr1_kvcache_reserve(kv, a, 10, &err), &err);
    CHECK_EQ_INT(kv->n_held[a], 3);
    CHECK_EQ_INT(kv->n_free, 5);
    float lat[8], pe[4], row[12];
    for (int l = 0; l < 3; l++)
        for (int p = 0; p < 10; p++) {
            row_of(a, l, p, lat, pe);
            dsr1_kvcache_write(kv, a, l, p, lat, pe);
        }
    /* Roll back to 5 (frees page 2 of 3), grow again: rows 0..4 unchanged. */
    dsr1_kvcache_truncate(kv, a, 5);
    CHECK_EQ_INT(kv->len[a], 5);
    CHECK_EQ_INT(kv->n_held[a], 2);
    CHECK_EQ_INT(kv->n_free, 6);
    CHECK_OK(dsr1_kvcache_reserve(kv, a, 12, &err), &err);
    int bad = 0;
    for (int l = 0; l < 3; l++)
        for (int p = 0; p < 5; p++) {
            row_of(a, l, p, lat, pe);
            dsr1_kvcache_read(kv, a, l, p, row);
            for (int i = 0; i < 8; i++) bad += row[i] != lat[i];
            for (int i = 0; i < 4; i++) bad += row[8 + i] != pe[i];
        }
    CHECK_EQ_INT(bad, 0);
    /* Truncating to the same length or longer changes nothing. */
    dsr1_kvcache_truncate(kv, a, 12);
    CHECK_EQ_INT(kv->n_held[a], 3);
    dsr1_kvcache_seq_free(kv, a);
    CHECK_EQ_INT(kv->n_free, 8);
    dsr1_kvcache_free(kv);
    pages_close(&pg);
}

DSR1_TEST(kvcache_limits)
{
    DSR1_TEST_NEED_BACKEND();
    pages pg = {0};
    /* Budget of 3 pages for 2 slots of 16 tokens. */
    uint64_t page = dsr1_kvcache_token_bytes(DSR1_KV_BF16, 3, 12) * 4;
    dsr1_kvcache *kv = make(t, &pg, DSR1_KV_BF16, 2, 16, 3 * page + page / 2);
    REQUIRE(kv);
    CHECK_EQ_INT(kv->n_pages, 3);
    dsr1_error err = {0};
    int a, b;
    CHECK_OK(dsr1_kvcache_seq_alloc(kv, &a, &err), &err);
    CHECK_OK(dsr1_kvcache_seq_alloc(kv, &b, &err), &err);
    CHECK(dsr1_kvcache_reserve(kv, a, 17, &err) == DSR1_ERANGE); /* past ctx */
    CHECK(strstr(err.msg, "context") != NULL);
    CHECK_OK(dsr1_kvcache_reserve(kv, a, 8, &err), &err);
    CHECK(dsr1_kvcache_reserve(kv, b, 8, &err) == DSR1_ERANGE); /* 2 pages, 1 free */
    CHECK(strstr(err.msg, "full") != NULL);
    CHECK_EQ_INT(kv->len[b], 0); /* failure changes nothing */
    CHECK_EQ_INT(kv->n_free, 1);
    CHECK_OK(dsr1_kvcache_reserve(kv, b, 4, &err), &err);
    dsr1_kvcache_free(kv);
    pages_close(&pg);
    dsr1_kvcache_options o = {.type = DSR1_KV_F32, .n_layers = 1, .kv_lora_rank = 8,
                              .rope_dim = 4, .max_seqs = 1, .ctx = 64, .bytes = 10};
    CHECK(dsr1_kvcache_create(&kv, &o, &err) == DSR1_ERANGE);
    CHECK(kv == NULL);
}

DSR1_TEST(kvcache_types_roundtrip)
{
    DSR1_TEST_NEED_BACKEND();
    pages pg = {0};
    dsr1_kv_type types[] = {DSR1_KV_F32, DSR1_KV_BF16, DSR1_KV_FP8};
    for (int k = 0; k < 3; k++) {
        dsr1_kvcache *kv = make(t, &pg, types[k], 1, 8, 0);
        REQUIRE(kv);
        dsr1_error err;
        int s;
        CHECK_OK(dsr1_kvcache_seq_alloc(kv, &s, &err), &err);
        CHECK_OK(dsr1_kvcache_reserve(kv, s, 3, &err), &err);
        float lat[8], pe[4], row[12];
        unsigned seed = 7;
        for (int i = 0; i < 8; i++) lat[i] = (float)((seed = seed * 1103515245u + 12345u) % 2000) / 100 - 10;
        for (int i = 0; i < 4; i++) pe[i] = (float)i * 3.3f - 5;
        dsr1_kvcache_write(kv, s, 1, 2, lat, pe);
        dsr1_kvcache_read(kv, s, 1, 2, row);
        float amax = 0;
        for (int i = 0; i < 8; i++) amax = fmaxf(amax, fabsf(lat[i]));
        for (int i = 0; i < 4; i++) amax = fmaxf(amax, fabsf(pe[i]));
        int bad = 0;
        for (int i = 0; i < 12; i++) {
            float want = i < 8 ? lat[i] : pe[i - 8];
            if (types[k] == DSR1_KV_F32) bad += row[i] != want;
            else if (types[k] == DSR1_KV_BF16) bad += row[i] != dsr1_bf16_to_f32(dsr1_f32_to_bf16(want));
            else bad += fabsf(row[i] - want) > fmaxf(fabsf(want) / 16, amax / 448 / 8) * 1.001f;
        }
        CHECKF(bad == 0, "type %d: %d values off", (int)types[k], bad);
        dsr1_kvcache_free(kv);
        pages_close(&pg);
    }
}
