/*
 * test_touch.c - a CPU workspace takes the page faults of its token-sized
 * buffers when it is created (dsr1_touch in cpu_backend.c), not in the
 * first step that writes them: in a VM a fault can cost tens of
 * microseconds, and a fresh R1 workspace's first 512-token prefill used
 * to take ~50,000 of them (PERFORMANCE.md). Measured as the growth
 * of the process's resident set across ws_create, which holds with 4 KiB
 * pages and transparent huge pages alike: untouched malloc'd memory is
 * not resident. malloc_trim first: the workspace may reuse blocks that
 * earlier tests freed, which stay resident until given back. Under the
 * sanitizers (their own allocator) it skips.
 */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "be_util.h"
#include "test.h"

/* Resident bytes of this process (/proc/self/statm); -1 if unreadable. */
static long long resident(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    long long size = 0, res = -1;
    if (!f) return -1;
    if (fscanf(f, "%lld %lld", &size, &res) != 2) res = -1;
    fclose(f);
    return res < 0 ? -1 : res * (long long)sysconf(_SC_PAGESIZE);
}

DSR1_TEST(touch_cpu_workspace_faults_at_creation)
{
    if (resident() < 0) DSR1_SKIP("no /proc/self/statm: resident size unknown");
    if (getenv("DSR1_SANITIZED")) DSR1_SKIP("the sanitizers' allocator: %s", "malloc_trim does not reach it");
    /* earlier tests' freed blocks back to the kernel (malloc_trim gives
     * free pages inside the heap back too), so the workspace's are not
     * resident until touched */
    malloc_trim(0);
    /* MoE slots alone: 256 tokens x 8 x 4096 floats = 32 MiB */
    enum { T = 256, D = 4096, K = 8, I = 1024 };
    dsr1_ws_sizes s = {.max_tokens = T, .hidden = D, .inter = I, .moe_inter = I, .n_experts = 16,
                       .topk = K, .shared_inter = I, .max_in = D, .n_heads = 8,
                       .kv_lora_rank = 128, .rope_dim = 64, .max_ctx = 64, .kv_type = DSR1_KV_F32};
    /* what cpu_ws_create touches of its own: ha, hb, xg, yg, slots, sh */
    long long want = (2LL * T * I + 3LL * T * D + (long long)T * K * D) * 4;
    tbe b;
    dsr1_error err = {0};
    long long before = resident();
    CHECK_OK(tbe_open(&b, "cpu", 2, &s, &err), &err);
    long long grown = resident() - before;
    CHECKF(grown >= want * 9 / 10, "the workspace's buffers grew the resident set by %lld bytes, want >= %lld",
           grown, want * 9 / 10);
    tbe_close(&b);
}
