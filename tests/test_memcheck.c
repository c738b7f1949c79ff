/*
 * test_memcheck.c - core/memcheck.c: the memory estimate before loading
 * (KV cache sized as the engine sizes it, for the tiny fixture's config),
 * the verdict's thresholds, the largest context that fits, and preload
 * (reads the whole file; mlock failure is a message, not a crash).
 */
#include <stdlib.h>
#include <sys/resource.h>

#include "core/memcheck.h"
#include "test.h"

static int tiny_config(dsr1_config *c)
{
    char *json = dsr1_test_slurp(dsr1_test_fixture("tiny/ckpt/config.json"), NULL);
    dsr1_error e = {0};
    int rc = json ? dsr1_config_parse_hf(c, json, "config.json", &e) : -1;
    free(json);
    return rc;
}

DSR1_TEST(memcheck_estimate)
{
    dsr1_config c;
    REQUIRE(tiny_config(&c) == 0);
    dsr1_engine_options o;
    dsr1_engine_options_default(&o);
    o.max_seqs = 2;
    o.ctx = 1000;
    dsr1_mem_estimate e;
    /* 4 layers + MTP, rank 64 + rope 16, BF16: 800 bytes a token; 1000
     * tokens take 16 pages of 64 tokens per sequence. */
    dsr1_mem_estimate_config(&c, 5, DSR1_COMPUTE_FAST, &o, &e);
    CHECK_EQ_INT(e.kv_token_bytes, 800);
    CHECK_EQ_INT(e.ctx, 1000);
    CHECK_EQ_INT(e.kv, 2 * 16 * 64 * 800);
    CHECK(e.buffers > 0);
    uint64_t b2 = e.buffers;
    dsr1_mem_estimate_config(&c, 5, DSR1_COMPUTE_F32, &o, &e); /* the exact path keeps F32 */
    CHECK_EQ_INT(e.kv, 2 * 16 * 64 * 1600);
    o.kv_type = DSR1_KV_FP8;
    dsr1_mem_estimate_config(&c, 4, DSR1_COMPUTE_FAST, &o, &e); /* no MTP layer */
    CHECK_EQ_INT(e.kv_token_bytes, 4 * (80 + 4));
    o.kv_type = DSR1_KV_BF16;
    o.max_seqs = 8;
    dsr1_mem_estimate_config(&c, 5, DSR1_COMPUTE_FAST, &o, &e);
    CHECK_EQ_INT(e.kv, 8 * 16 * 64 * 800);
    CHECK(e.buffers > b2);
    /* prefill_chunk 0 is the model's chunk (buffers grow with it), not none */
    {
        dsr1_engine_options oc = o;
        oc.prefill_chunk = dsr1_engine_default_chunk(&c);
        dsr1_mem_estimate ec;
        dsr1_mem_estimate_config(&c, 5, DSR1_COMPUTE_FAST, &oc, &ec);
        CHECK_EQ_INT(ec.buffers, e.buffers);
        oc.prefill_chunk = 1;
        dsr1_mem_estimate_config(&c, 5, DSR1_COMPUTE_FAST, &oc, &ec);
        CHECK(ec.buffers < e.buffers);
        dsr1_config r1 = c; /* many experts: a larger chunk, more buffers */
        r1.n_routed_experts = 256;
        r1.num_experts_per_tok = 8;
        dsr1_mem_estimate_config(&r1, 5, DSR1_COMPUTE_FAST, &o, &ec);
        oc.prefill_chunk = 2048;
        dsr1_mem_estimate e2048;
        dsr1_mem_estimate_config(&r1, 5, DSR1_COMPUTE_FAST, &oc, &e2048);
        CHECK_EQ_INT(ec.buffers, e2048.buffers);
        CHECK(ec.buffers > e.buffers);
    }
    o.ctx = 0; /* the model's own context */
    dsr1_mem_estimate_config(&c, 5, DSR1_COMPUTE_FAST, &o, &e);
    CHECK_EQ_INT(e.ctx, 5120);
    CHECK_EQ_INT(e.kv, 8ull * 5120 * 800);
    o.ctx = 1 << 30; /* a huge context: the engine must hold one full one */
    o.max_seqs = 1;
    dsr1_mem_estimate_config(&c, 5, DSR1_COMPUTE_FAST, &o, &e);
    CHECK_EQ_INT(e.kv, (uint64_t)(1 << 30) * 800);
}

DSR1_TEST(memcheck_verdict)
{
    dsr1_mem_estimate e = {.ctx = 1000, .max_seqs = 2, .kv_token_bytes = 800,
                           .weights = 1 << 20, .kv = 3 << 20, .buffers = 1 << 20,
                           .available = 10 << 20};
    CHECK_EQ_INT(dsr1_mem_judge(&e), DSR1_MEM_OK);
    e.weights = 7 << 20; /* 7 + 3 + 1 > 10: only the page cache is short */
    CHECK_EQ_INT(dsr1_mem_judge(&e), DSR1_MEM_WARN);
    e.available = 3 << 20; /* KV + buffers (4 MiB) alone do not fit */
    CHECK_EQ_INT(dsr1_mem_judge(&e), DSR1_MEM_REFUSE);
    e.available = 0; /* unknown */
    CHECK_EQ_INT(dsr1_mem_judge(&e), DSR1_MEM_OK);
    /* 100 MiB, no buffers: 50 MiB per sequence, 1024 pages of 51200 bytes. */
    e = (dsr1_mem_estimate){.max_seqs = 2, .kv_token_bytes = 800, .available = 100 << 20};
    CHECK_EQ_INT(dsr1_mem_max_ctx(&e), 1024 * 64);
    e.weights = 40 << 20; /* with the weights resident: 30 MiB each, 614 pages */
    CHECK_EQ_INT(dsr1_mem_max_ctx(&e), 614 * 64);
    e.weights = 200 << 20; /* the weights cannot stay anyway: KV alone */
    CHECK_EQ_INT(dsr1_mem_max_ctx(&e), 1024 * 64);
    e.buffers = 200 << 20;
    CHECK_EQ_INT(dsr1_mem_max_ctx(&e), 0);
}

static void count(uint64_t done, uint64_t total, void *ctx)
{
    uint64_t *c = ctx;
    c[0]++;
    c[1] = done;
    c[2] = total;
}

DSR1_TEST(memcheck_preload)
{
    char p[512];
    snprintf(p, sizeof p, "%s/weights.bin", dsr1_test_tmpdir());
    FILE *f = fopen(p, "wb");
    REQUIRE(f);
    for (int i = 0; i < 70 << 10; i++) fwrite("0123456789abcdef", 1, 1024 / 64, f);
    fclose(f); /* 70 * 16 KiB = 1120 KiB */
    uint64_t c[3] = {0};
    dsr1_preload *h = NULL;
    dsr1_error e = {0};
    CHECK_OK(dsr1_mem_preload(&h, p, 0, count, c, &e), &e);
    CHECK(h == NULL);
    CHECK(c[0] >= 1);
    CHECK_EQ_INT(c[1], 70u << 14);
    CHECK_EQ_INT(c[2], 70u << 14);
    struct rlimit old, lim = {0, 0};
    getrlimit(RLIMIT_MEMLOCK, &old);
    lim.rlim_max = old.rlim_max;
    /* With no lockable memory (unless privileged), --mlock says why. */
    if (setrlimit(RLIMIT_MEMLOCK, &lim) == 0) {
        int rc = dsr1_mem_preload(&h, p, 1, NULL, NULL, &e);
        if (rc) CHECKF(strstr(e.msg, "ulimit -l"), "%s", e.msg);
        else CHECK(h != NULL); /* CAP_IPC_LOCK ignores the limit */
        dsr1_mem_preload_free(h);
        setrlimit(RLIMIT_MEMLOCK, &old);
    }
    CHECK_EQ_INT(dsr1_mem_preload(&h, "/nonexistent/w", 0, NULL, NULL, &e), DSR1_EIO);
}
