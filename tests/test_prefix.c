/*
 * test_prefix.c - the prefix cache (core/prefix.c, core/engine_prefix.c):
 * the radix tree over a real KV cache (match, shared pages by reference,
 * LRU eviction of pages no slot holds, copy on write of a shared partial
 * page), and through the engine on the tiny fixture: a prompt whose prefix
 * is cached gives the same first-token logits, bit for bit, and the same
 * greedy tokens as with the cache off (with and without speculation), and
 * reports the cached tokens; requests submitted together share; a small KV
 * budget evicts instead of failing.
 */
#include <stdlib.h>
#include <string.h>

#include "core/engine.h"
#include "be_util.h"
#include "core/prefix.h"
#include "test.h"

const char *dsr1_test_tiny_model(void);

/* A cache of `pages` pages (4 tokens, 2 layers, rows of 6 floats) whose
 * storage is the test backend's device *dev (destroy it after). */
static dsr1_kvcache *small_cache(int pages, const dsr1_backend_ops **be, void **dev)
{
    dsr1_backend_options bo = {.threads = 1, .deterministic = 1};
    *dev = NULL;
    if (dsr1_backend_find(dsr1_test_backend(), be, NULL, 0, NULL) || !*be ||
        (*be)->create(&bo, dev, NULL))
        return NULL;
    dsr1_kvcache_options o = {.type = DSR1_KV_F32, .n_layers = 2, .kv_lora_rank = 4,
                              .rope_dim = 2, .block = 4, .max_seqs = 4, .ctx = 64,
                              .bytes = (uint64_t)pages * 4 * 2 * 6 * 4, .be = *be, .dev = *dev};
    dsr1_kvcache *kv = NULL;
    return dsr1_kvcache_create(&kv, &o, NULL) ? NULL : kv;
}

static void fill(dsr1_kvcache *kv, int seq, int from, int to, float base)
{
    float lat[4], pe[2];
    for (int p = from; p < to; p++)
        for (int l = 0; l < 2; l++) {
            for (int i = 0; i < 4; i++) lat[i] = base + (float)(p * 10 + l * 100 + i);
            pe[0] = pe[1] = base - (float)p;
            dsr1_kvcache_write(kv, seq, l, p, lat, pe);
        }
}

DSR1_TEST(prefix_tree_share_evict_cow)
{
    DSR1_TEST_NEED_BACKEND();
    const dsr1_backend_ops *be = NULL;
    void *dev = NULL;
    dsr1_kvcache *kv = small_cache(8, &be, &dev);
    if (!kv && dev) be->destroy(dev);
    REQUIRE(kv);
    dsr1_prefix *pf = NULL;
    dsr1_error err;
    CHECK_OK(dsr1_prefix_create(&pf, kv, &err), &err);
    int32_t toks[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
    int a, b;
    CHECK_OK(dsr1_kvcache_seq_alloc(kv, &a, &err), &err);
    CHECK_OK(dsr1_kvcache_reserve(kv, a, 10, &err), &err); /* 3 pages */
    fill(kv, a, 0, 10, 0.5f);
    dsr1_prefix_insert(pf, toks, kv->table + (size_t)a * kv->max_pages, 2); /* full pages */
    CHECK_EQ_INT(dsr1_prefix_pages(pf), 2);
    int32_t pages[4];
    CHECK_EQ_INT(dsr1_prefix_match(pf, toks, 4, pages), 2);
    int32_t other[8] = {1, 2, 3, 4, 9, 9, 9, 9};
    CHECK_EQ_INT(dsr1_prefix_match(pf, other, 2, pages), 1); /* diverges in page 2 */
    CHECK_EQ_INT(dsr1_prefix_match(pf, toks, 1, pages), 1);  /* capped */
    dsr1_kvcache_seq_free(kv, a); /* the tree keeps its 2 pages */
    CHECK_EQ_INT(kv->n_free, 6);
    /* A new slot takes them and reads the same rows. */
    CHECK_OK(dsr1_kvcache_seq_alloc(kv, &b, &err), &err);
    CHECK_EQ_INT(dsr1_prefix_match(pf, toks, 2, pages), 2);
    dsr1_kvcache_share(kv, b, pages, 2);
    CHECK_EQ_INT(kv->len[b], 8);
    float row[6];
    dsr1_kvcache_read(kv, b, 1, 6, row);
    CHECK(row[0] == 0.5f + 160 && row[4] == 0.5f - 6);
    /* Cut back into a shared page: the slot gets its own copy first. */
    dsr1_kvcache_truncate(kv, b, 6);
    int32_t shared = kv->table[(size_t)b * kv->max_pages + 1];
    CHECK_OK(dsr1_kvcache_own_tail(kv, b, &err), &err);
    CHECK(kv->table[(size_t)b * kv->max_pages + 1] != shared);
    dsr1_kvcache_read(kv, b, 1, 5, row);
    CHECK(row[0] == 0.5f + 150);
    CHECK_OK(dsr1_kvcache_reserve(kv, b, 8, &err), &err);
    fill(kv, b, 6, 8, 99.0f); /* writes the copy, not the tree's page */
    int c;
    CHECK_OK(dsr1_kvcache_seq_alloc(kv, &c, &err), &err);
    CHECK_EQ_INT(dsr1_prefix_match(pf, toks, 2, pages), 2);
    dsr1_kvcache_share(kv, c, pages, 2);
    dsr1_kvcache_read(kv, c, 0, 7, row);
    CHECK(row[0] == 0.5f + 70);
    /* Eviction: only pages no slot holds, least recently used first. */
    CHECK_EQ_INT(dsr1_prefix_evict(pf, 2), 0); /* c holds both */
    dsr1_kvcache_seq_free(kv, c);
    dsr1_kvcache_seq_free(kv, b);
    int free0 = kv->n_free;
    CHECK_EQ_INT(dsr1_prefix_evict(pf, 1), 1); /* the leaf (page 2) first */
    CHECK_EQ_INT(dsr1_prefix_match(pf, toks, 2, pages), 1);
    CHECK_EQ_INT(kv->n_free, free0 + 1);
    /* Reserve past the free pages reclaims the rest through the hook. */
    int d;
    CHECK_OK(dsr1_kvcache_seq_alloc(kv, &d, &err), &err);
    CHECK_OK(dsr1_kvcache_reserve(kv, d, 32, &err), &err); /* all 8 pages */
    CHECK_EQ_INT(dsr1_prefix_pages(pf), 0);
    dsr1_prefix_free(pf);
    dsr1_kvcache_free(kv);
    be->destroy(dev);
}

/* ---- through the engine ------------------------------------------------ */

typedef struct run_out {
    float *logits; /* [vocab] at the first token, malloc'd */
    int32_t tok[16];
    int n, cached;
} run_out;

static dsr1_engine *engine_chunk(dsr1_test_ctx *t, dsr1_model *m, int prefix, int spec, int seqs,
                                 uint64_t kv_bytes, int chunk)
{
    dsr1_engine_options o;
    dsr1_engine_options_default(&o);
    o.max_seqs = seqs;
    o.ctx = 512;
    o.prefill_chunk = chunk;
    o.spec_draft = spec;
    o.spec_row_cost = 0.55f; /* adaptive at R1's costs, as test_spec.c */
    o.spec_draft_cost = 0;
    o.prefix_cache = prefix;
    o.kv_bytes = kv_bytes;
    dsr1_engine *e = NULL;
    dsr1_error err;
    CHECK_OK(dsr1_engine_create(&e, m, &o, &err), &err);
    return e;
}

static dsr1_engine *engine(dsr1_test_ctx *t, dsr1_model *m, int prefix, int spec, int seqs,
                           uint64_t kv_bytes)
{
    return engine_chunk(t, m, prefix, spec, seqs, kv_bytes, 64);
}

/* Submit the prompts, step to the end; out[i] gets request i's first-token
 * logits, tokens and cached count. Sequences are released. */
static void run(dsr1_test_ctx *t, dsr1_engine *e, const int32_t *const *p, const int *n, int k,
                int max_tokens, run_out *out)
{
    int V = e->m->cfg.vocab_size, seq[16];
    dsr1_error err;
    for (int i = 0; i < k; i++) {
        dsr1_request r = {.prompt = p[i], .n_prompt = (size_t)n[i], .max_tokens = max_tokens,
                          .reuse_seq = -1};
        CHECK_OK(dsr1_engine_submit(e, &r, &seq[i], &err), &err);
        memset(&out[i], 0, sizeof out[i]);
        out[i].logits = calloc((size_t)V, sizeof(float));
    }
    dsr1_event *ev = calloc(dsr1_engine_max_events(e), sizeof *ev);
    for (int guard = 0; dsr1_engine_pending(e) > 0 && guard < 2000; guard++) {
        size_t nev;
        if (dsr1_engine_step(e, ev, &nev, &err)) {
            dsr1_test_fail(t, __FILE__, __LINE__, "step: %s", err.msg);
            break;
        }
        for (size_t j = 0; j < nev; j++)
            for (int i = 0; i < k; i++) {
                if (ev[j].seq != seq[i] || ev[j].token < 0) continue;
                if (out[i].n == 0)
                    memcpy(out[i].logits, e->logits + (size_t)e->seqs[seq[i]].b_out * (size_t)V,
                           (size_t)V * sizeof(float));
                if (out[i].n < 16) out[i].tok[out[i].n++] = ev[j].token;
            }
    }
    free(ev);
    for (int i = 0; i < k; i++) {
        dsr1_seq_stats st;
        CHECK_OK(dsr1_engine_seq_stats(e, seq[i], &st), &err);
        out[i].cached = st.n_cached;
        dsr1_engine_release(e, seq[i]);
    }
}

static void prompts(int32_t *sys, int n_sys, int32_t *a, int32_t *b, int n_tail, int V)
{
    uint32_t x = 12345;
    for (int i = 0; i < n_sys; i++) sys[i] = a[i] = b[i] = (int32_t)((x = x * 1103515245u + 12345u) >> 8) % V;
    for (int i = 0; i < n_tail; i++) {
        a[n_sys + i] = (int32_t)((x = x * 1103515245u + 12345u) >> 8) % V;
        b[n_sys + i] = (int32_t)((x = x * 1103515245u + 12345u) >> 8) % V;
    }
}

DSR1_TEST(prefix_engine_exact)
{
    const char *path = dsr1_test_tiny_model();
    if (!path) DSR1_SKIP("tiny fixture could not be converted");
    dsr1_model *m = NULL;
    dsr1_error err;
    dsr1_model_options mo = {.threads = 2, .deterministic = 1};
    CHECK_OK(dsr1_model_open(&m, path, &mo, &err), &err);
    if (!m) return;
    int V = dsr1_model_config(m)->vocab_size;
    enum { SYS = 150, TAIL = 20 }; /* 150 shared tokens: 2 whole pages of 64 */
    int32_t sys[SYS], a[SYS + TAIL], b[SYS + TAIL];
    prompts(sys, SYS, a, b, TAIL, V);
    const int32_t *pa[1] = {a}, *pb[1] = {b};
    int n1[1] = {SYS + TAIL};
    for (int spec = 0; spec <= 1; spec++) {
        dsr1_engine *on = engine(t, m, 1, spec ? -1 : 0, 4, 0);
        dsr1_engine *off = engine(t, m, 0, spec ? -1 : 0, 4, 0);
        if (!on || !off) break;
        run_out r0, r1, f1;
        run(t, on, pa, n1, 1, 8, &r0);  /* computes and caches the prefix */
        run(t, on, pb, n1, 1, 8, &r1);  /* takes it */
        run(t, off, pb, n1, 1, 8, &f1); /* fresh */
        CHECK_EQ_INT(r0.cached, 0);
        CHECK_EQ_INT(r1.cached, 128);
        CHECK_EQ_INT(f1.cached, 0);
        CHECKF(!memcmp(r1.logits, f1.logits, (size_t)V * sizeof(float)),
               "spec %d: first-token logits differ with a cached prefix", spec);
        CHECK_EQ_INT(r1.n, f1.n);
        CHECK(!memcmp(r1.tok, f1.tok, (size_t)f1.n * sizeof(int32_t)));
        /* The same prompt again: all but its last page from the cache. */
        run_out r2;
        run(t, on, pb, n1, 1, 8, &r2);
        CHECK_EQ_INT(r2.cached, 128);
        CHECK(!memcmp(r2.logits, f1.logits, (size_t)V * sizeof(float)));
        free(r0.logits), free(r1.logits), free(f1.logits), free(r2.logits);
        dsr1_engine_free(on);
        dsr1_engine_free(off);
    }
    dsr1_model_close(m);
}

DSR1_TEST(prefix_engine_together_and_evict)
{
    const char *path = dsr1_test_tiny_model();
    if (!path) DSR1_SKIP("tiny fixture could not be converted");
    dsr1_model *m = NULL;
    dsr1_error err;
    dsr1_model_options mo = {.threads = 2, .deterministic = 1};
    CHECK_OK(dsr1_model_open(&m, path, &mo, &err), &err);
    if (!m) return;
    int V = dsr1_model_config(m)->vocab_size;
    enum { SYS = 200, TAIL = 10, K = 4 };
    int32_t sys[SYS], ps[K][SYS + TAIL], tmp[SYS + TAIL];
    memset(tmp, 0, sizeof tmp);
    for (int i = 0; i < K; i += 2) prompts(sys, SYS, ps[i], ps[i + 1], TAIL, V);
    for (int i = 0; i < TAIL; i++) ps[2][SYS + i] = ps[0][SYS + i] ^ 1, ps[3][SYS + i] = ps[1][SYS + i] ^ 1;
    (void)tmp;
    const int32_t *pp[K] = {ps[0], ps[1], ps[2], ps[3]};
    int nn[K] = {SYS + TAIL, SYS + TAIL, SYS + TAIL, SYS + TAIL};
    /* Chunks of 150 tokens cross page boundaries: the later requests wait
     * for the page being computed instead of computing a copy. */
    dsr1_engine *on = engine_chunk(t, m, 1, 0, K, 0, 150), *off = engine(t, m, 0, 0, K, 0);
    run_out r[K], f[K];
    if (on && off) {
        run(t, on, pp, nn, K, 4, r); /* submitted together: the first computes, the rest take */
        run(t, off, pp, nn, K, 4, f);
        for (int i = 0; i < K; i++) {
            CHECK(!memcmp(r[i].logits, f[i].logits, (size_t)V * sizeof(float)));
            CHECK(r[i].n == f[i].n && !memcmp(r[i].tok, f[i].tok, sizeof r[i].tok));
            free(r[i].logits), free(f[i].logits);
        }
        CHECK_EQ_INT(r[0].cached, 0);
        for (int i = 1; i < K; i++) CHECK_EQ_INT(r[i].cached, 192); /* 3 whole pages each */
    }
    dsr1_engine_free(on);
    dsr1_engine_free(off);
    /* A budget of 6 pages (one sequence's worth): cached pages are evicted
     * for new prompts instead of a request failing. */
    uint64_t page = dsr1_kvcache_token_bytes(DSR1_KV_BF16, 5, 80) * 64;
    dsr1_engine *small = engine(t, m, 1, 0, 1, page * 6);
    for (int round = 0; small && round < 3; round++) {
        int32_t q[SYS + TAIL];
        prompts(sys, SYS, q, tmp, TAIL, V);
        for (int i = 0; i < SYS; i++) q[i] ^= round + 1; /* a new prefix each round */
        const int32_t *pq[1] = {q};
        run_out o;
        run(t, small, pq, nn, 1, 4, &o);
        CHECK_EQ_INT(o.n, 4);
        free(o.logits);
    }
    dsr1_engine_free(small);
    dsr1_model_close(m);
}
