/*
 * test_pool.c - the CPU thread pool: every task runs exactly once, for any
 * task count and pool size, many runs in a row (the spin/sleep handover),
 * a NULL pool runs everything on the caller's thread, and an idle pool's
 * workers stop spinning. The bandwidth probe's read patterns, and its
 * table on a pool.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#include "backends/cpu/hw.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/matmul_impl.h"
#include "backends/cpu/pftune.h"
#include "test.h"

typedef struct count_ctx {
    atomic_int *hits;
    int ntasks_seen;
    atomic_int bad_ntasks;
} count_ctx;

static void count_task(void *ctx, int task, int ntasks)
{
    count_ctx *c = ctx;
    atomic_fetch_add(&c->hits[task], 1);
    if (ntasks != c->ntasks_seen) atomic_fetch_add(&c->bad_ntasks, 1);
}

static void run_and_check(dsr1_test_ctx *t, dsr1_pool *p, int ntasks)
{
    atomic_int *hits = calloc((size_t)(ntasks > 0 ? ntasks : 1), sizeof *hits);
    count_ctx c = {.hits = hits, .ntasks_seen = ntasks};
    dsr1_pool_run(p, count_task, &c, ntasks);
    int wrong = 0;
    for (int i = 0; i < ntasks; i++) wrong += atomic_load(&hits[i]) != 1;
    CHECKF(wrong == 0, "pool of %d, %d tasks: %d tasks not run exactly once",
           dsr1_pool_size(p), ntasks, wrong);
    CHECK_EQ_INT(atomic_load(&c.bad_ntasks), 0);
    free(hits);
}

DSR1_TEST(pool_tasks_run_once)
{
    static const int sizes[] = {1, 2, 3, 8};
    static const int counts[] = {0, 1, 2, 5, 1000};
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
        dsr1_pool *p = NULL;
        dsr1_error err = {0};
        CHECK_OK(dsr1_pool_create(&p, sizes[s], &err), &err);
        if (!p) continue;
        CHECK_EQ_INT(dsr1_pool_size(p), sizes[s]);
        for (size_t c = 0; c < sizeof counts / sizeof *counts; c++) run_and_check(t, p, counts[c]);
        dsr1_pool_free(p);
    }
}

DSR1_TEST(pool_many_runs)
{
    dsr1_pool *p = NULL;
    dsr1_error err = {0};
    CHECK_OK(dsr1_pool_create(&p, 3, &err), &err);
    REQUIRE(p != NULL);
    for (int i = 0; i < 3000; i++) run_and_check(t, p, 1 + i % 9);
    dsr1_pool_free(p);
}

static void record_thread(void *ctx, int task, int ntasks)
{
    (void)ntasks;
    pthread_t *who = ctx;
    who[task] = pthread_self();
}

DSR1_TEST(pool_null_runs_inline)
{
    pthread_t who[4];
    CHECK_EQ_INT(dsr1_pool_size(NULL), 1);
    dsr1_pool_run(NULL, record_thread, who, 4);
    for (int i = 0; i < 4; i++) CHECK(pthread_equal(who[i], pthread_self()));
    run_and_check(t, NULL, 7);
    dsr1_pool_free(NULL); /* no-op */
    CHECK_EQ_INT(dsr1_pool_reserve(NULL, 1 << 20, NULL), 0);
}

DSR1_TEST(pool_default_size_and_limits)
{
    dsr1_pool *p = NULL;
    dsr1_error err = {0};
    CHECK_OK(dsr1_pool_create(&p, 0, &err), &err);
    CHECK(p != NULL && dsr1_pool_size(p) >= 1);
    CHECK_OK(dsr1_pool_reserve(p, 1 << 16, &err), &err);
    dsr1_pool_free(p);
    p = NULL;
    CHECK_EQ_INT(dsr1_pool_create(&p, 100000, &err), DSR1_EINVAL);
    CHECK(p == NULL);
    CHECK(strstr(err.msg, "100000") != NULL);
}

static double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double wall_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Waiters spin for a while after a run (decode's short gaps) and then
 * sleep: a pool left idle for 400 ms must not keep its workers busy for
 * it (spinning on, 3 workers would burn about 1.2 s of CPU; the spin is 10
 * ms each). And freeing a pool whose workers still spin returns at once,
 * not after their spin (300 pools made, run and freed in well under the
 * 3 s their spins would add up to). */
DSR1_TEST(pool_idle_workers_sleep)
{
    dsr1_pool *p = NULL;
    dsr1_error err = {0};
    CHECK_OK(dsr1_pool_create(&p, 4, &err), &err);
    REQUIRE(p != NULL);
    run_and_check(t, p, 8);
    double c0 = cpu_s();
    struct timespec nap = {0, 400 * 1000 * 1000};
    nanosleep(&nap, NULL);
    double used = cpu_s() - c0;
    CHECKF(used < 0.3, "an idle pool of 4 used %.0f ms of CPU in 400 ms", used * 1e3);
    run_and_check(t, p, 8); /* sleeping workers wake for the next run */
    dsr1_pool_free(p);
    double w0 = wall_s();
    for (int i = 0; i < 300; i++) {
        p = NULL;
        CHECK_OK(dsr1_pool_create(&p, 2, &err), &err);
        if (!p) break;
        run_and_check(t, p, 3);
        dsr1_pool_free(p);
    }
    double took = wall_s() - w0;
    CHECKF(took < 1.5, "300 pools made, run and freed in %.2f s: freeing waits for spinning workers", took);
}

/* pftune (the decode-time GEMV choice): a trial's steps hand their
 * calls the variants in turn, shifted by one a step, so over `arms` steps
 * every call of the step ran every variant once; then the variant whose
 * calls took least time in all runs DSR1_PFTUNE_KEEP steps, then a new
 * trial; when the machine turns (another variant becomes faster) the next
 * trial follows it. The step below has 7 calls of unequal sizes: with the
 * variants in a fixed order per call a slow variant could hide behind
 * small calls. */
#define PFT_CALLS 7
static double pft_call_s(int call, int v, int faster)
{
    static const double size[PFT_CALLS] = {1, 40, 3, 3, 90, 0.5, 12};
    return 1e-4 * size[call] * (v == faster ? 1.0 : 1.05);
}

static void pftune_cycle(dsr1_test_ctx *t, dsr1_pftune *p, int faster, int *ran)
{
    const int na = p->arms ? p->arms : DSR1_PFTUNE_ARMS;
    int seen[PFT_CALLS][DSR1_PFTUNE_ARMS] = {{0}};
    for (int s = 0; s < na * DSR1_PFTUNE_ROUNDS; s++) {
        CHECK(dsr1_pftune_trial(p));
        for (int i = 0; i < PFT_CALLS; i++) {
            int v = dsr1_pftune_call(p);
            CHECK(v >= 0 && v < na);
            if (v < 0 || v >= na) return;
            seen[i][v]++;
            dsr1_pftune_call_done(p, v, pft_call_s(i, v, faster));
        }
        dsr1_pftune_step_done(p);
    }
    /* balanced: each call ran each variant DSR1_PFTUNE_ROUNDS times */
    for (int i = 0; i < PFT_CALLS; i++)
        for (int v = 0; v < na; v++) CHECK_EQ_INT(seen[i][v], DSR1_PFTUNE_ROUNDS);
    for (int s = 0; s < DSR1_PFTUNE_KEEP; s++) {
        CHECK(!dsr1_pftune_trial(p));
        ran[p->choice]++;
        dsr1_pftune_step_done(p);
    }
}

DSR1_TEST(pftune_keeps_the_faster_variant)
{
    dsr1_pftune p = {0};
    int ran[DSR1_PFTUNE_ARMS] = {0};
    pftune_cycle(t, &p, 1, ran);
    CHECK_EQ_INT(ran[1], DSR1_PFTUNE_KEEP);
    CHECK_EQ_INT(p.trials, 1);
    pftune_cycle(t, &p, 0, ran); /* the machine turned */
    CHECK_EQ_INT(ran[0], DSR1_PFTUNE_KEEP);
    pftune_cycle(t, &p, 0, ran);
    CHECK_EQ_INT(ran[0], 2 * DSR1_PFTUNE_KEEP);
    pftune_cycle(t, &p, DSR1_PFTUNE_ARMS - 1, ran); /* the last variant */
    CHECK_EQ_INT(ran[DSR1_PFTUNE_ARMS - 1], DSR1_PFTUNE_KEEP);
    CHECK_EQ_INT(p.trials, 4);
    /* two arms (no INT8 matrix): 2 x DSR1_PFTUNE_ROUNDS trial steps over
     * variants 0 and 1, then the faster kept */
    dsr1_pftune r = {.arms = 2};
    int ran2[DSR1_PFTUNE_ARMS] = {0};
    pftune_cycle(t, &r, 1, ran2);
    CHECK_EQ_INT(ran2[1], DSR1_PFTUNE_KEEP);
    CHECK_EQ_INT(r.trials, 1);
    pftune_cycle(t, &r, 0, ran2);
    CHECK_EQ_INT(ran2[0], DSR1_PFTUNE_KEEP);
    /* the trial sums call times: one slow call outweighs many fast ones */
    dsr1_pftune q = {.arms = 2};
    for (int s = 0; s < 2 * DSR1_PFTUNE_ROUNDS; s++) {
        for (int i = 0; i < 4; i++) {
            int v = dsr1_pftune_call(&q);
            dsr1_pftune_call_done(&q, v, v == 0 && i == 0 && s == 0 ? 0.010 : v == 0 ? 0.0009 : 0.001);
        }
        dsr1_pftune_step_done(&q);
    }
    CHECK_EQ_INT(q.choice, 1);
    /* a trial with no timed calls keeps variant 0 */
    dsr1_pftune e = {.arms = 2, .choice = 1};
    for (int s = 0; s < 2 * DSR1_PFTUNE_ROUNDS; s++) dsr1_pftune_step_done(&e);
    CHECK_EQ_INT(e.choice, 0);
    CHECK_EQ_INT(e.trials, 1);
}

/* Each read pattern of the bandwidth probe reads every 64-bit word once:
 * its XOR fold equals the plain one, on sizes with whole groups of eight
 * rows and a remainder, and below one group; with and without prefetch.
 * The portable loops everywhere, the AVX-512 ones where they run. A
 * pattern that skipped or repeated a stretch (a row tail, the last group)
 * would change the fold of this pseudo-random buffer. */
DSR1_TEST(membw_patterns_read_every_word_once)
{
    static const size_t sizes[] = {256, 14336 * 8, 14336 * 8 * 3 + 256 * 7, 14336 * 5};
    const size_t max = 14336 * 8 * 3 + 256 * 7;
    uint64_t *buf = aligned_alloc(64, max);
    REQUIRE(buf);
    for (size_t i = 0; i < max / 8; i++) buf[i] = (i + 1) * 0x9e3779b97f4a7c15ull ^ (i >> 7);
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
        uint64_t want = 0;
        for (size_t i = 0; i < sizes[s] / 8; i++) want ^= buf[i];
        for (int v = 0; v <= dsr1_mm_avx512_usable(); v++)
            for (int pf = 0; pf <= 2048 * v; pf += 2048)
                for (int split = DSR1_MEMBW_BLOCKS; split <= DSR1_MEMBW_ROWS; split++)
                    CHECKF(dsr1_hw_membw_read(buf, sizes[s], split, pf, v) == want,
                           "%zu bytes, split %d, prefetch %d, avx512 %d: fold differs", sizes[s], split, pf, v);
    }
    free(buf);
}

/* The probe's table on a two-thread pool: every threads x split x
 * prefetch x pages configuration once, positive, best >= median, and the
 * bound is the best pass of all. */
DSR1_TEST(membw_probe_covers_every_configuration)
{
    dsr1_pool *p = NULL;
    dsr1_error err = {0};
    CHECK_OK(dsr1_pool_create(&p, 2, &err), &err);
    REQUIRE(p);
    dsr1_membw_cfg *cfg = calloc(DSR1_MEMBW_MAX_CFG, sizeof *cfg);
    int n = 0;
    double bound = 0, best = 0;
    REQUIRE(cfg);
    CHECK_OK(dsr1_hw_membw_probe(p, (size_t)4 << 20, 1, 0, cfg, &n, &bound, &err), &err);
    const int npf = dsr1_pool_avx512(p) ? 3 : 1;
    CHECK_EQ_INT(n, 2 * 3 * 2 * npf);
    int seen[2][3][3][2] = {{{{0}}}};
    for (int c = 0; c < n; c++) {
        REQUIRE(cfg[c].threads >= 1 && cfg[c].threads <= 2 && cfg[c].split >= 0 && cfg[c].split <= 2 &&
                (cfg[c].huge == 0 || cfg[c].huge == 1));
        int pf = cfg[c].prefetch == 0 ? 0 : cfg[c].prefetch == 2048 ? 1 : cfg[c].prefetch == 8192 ? 2 : -1;
        REQUIRE(pf >= 0);
        seen[cfg[c].threads - 1][cfg[c].split][pf][cfg[c].huge]++;
        CHECK(cfg[c].median > 0 && cfg[c].best >= cfg[c].median);
        if (cfg[c].best > best) best = cfg[c].best;
    }
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 3; b++)
            for (int c = 0; c < npf; c++)
                for (int d = 0; d < 2; d++) CHECK_EQ_INT(seen[a][b][c][d], 1);
    CHECK(bound == best);
    free(cfg);
    dsr1_pool_free(p);
}
