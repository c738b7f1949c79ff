/*
 * pool.c - the CPU thread pool: a fixed set of worker threads that run the
 * tasks of one dsr1_pool_run call together with the caller's thread, plus
 * the scratch memory the matmul dispatcher reuses between calls.
 *
 * Does not: queue work (one run at a time, the caller blocks), balance by
 * cost (tasks are claimed one by one from a shared counter, so uneven tasks
 * balance themselves), or decide what a task computes.
 *
 * Invariants: which thread runs a task never changes a result (kernels give
 * each task a fixed set of outputs). A run's fields (fn, ctx, ntasks) are
 * written before `gen` is bumped under the mutex and not touched again until
 * every worker has decremented `busy`. Waiters (workers between runs, the
 * caller for the last task) spin before they sleep on a condition variable,
 * for up to POOL_SPIN_NS: a decode step issues about a hundred runs with
 * short gaps between them, and a futex wake per run costs more than the work
 * of a small matmul; a pool left idle (chat waiting for the user) sleeps
 * after that long.
 */
#include "kernels.h"
#include "matmul_impl.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

/* How long a waiter spins before it sleeps. Not only the wake-up's cost:
 * on the (virtual) machines here a CPU that goes idle between runs - a
 * futex sleep, the vCPU halted - costs memory bandwidth in the runs after,
 * as if the host slowed it down. Decode at batch 1 (INT8 R1-shape file,
 * AMD EPYC Zen 4 VM, 2 threads, 8 interleaved rounds each, one run):
 * with only the 2000 pauses before (tens of us) ~2000 context switches in
 * a 64-token run, 10.3-13.2 tok/s, median 11.7; spinning up to 10 ms ~300
 * (the load's and the bandwidth probe's pauses), 11.0-16.0, median 14.5,
 * at 15-16 tok/s (45 GB/s) in 4 of 8 rounds, where the short spin's best
 * in about 40 rounds that session was 13.2. After POOL_SPIN pure pauses
 * the spin yields the CPU between checks, so when threads outnumber free
 * cores a spinning waiter does not keep the thread it waits for from
 * running. */
#define POOL_SPIN 2000
#define POOL_SPIN_NS 10000000

struct dsr1_pool {
    int n;                   /* threads including the caller */
    pthread_t *threads;      /* [n - 1] workers, owned */
    pthread_mutex_t mu;
    pthread_cond_t wake, done;
    atomic_uint gen;         /* bumped once per run */
    atomic_int next;         /* next task index to claim */
    atomic_int busy;         /* workers not yet finished with this run */
    int stop;                /* under mu: workers exit */
    atomic_int quit;         /* the same, for spinning workers */
    void (*fn)(void *, int, int);
    void *ctx;
    int ntasks;
    void *scratch;           /* 64-aligned, scratch_cap bytes, owned */
    size_t scratch_cap;
    int avx512;              /* dsr1_mm_avx512_usable() at creation */
    int amx;                 /* dsr1_mm_amx_usable() at creation */
    uint64_t amx_runs;       /* AMX kernel calls that ran tiles (__atomic; tests check the path ran) */
    int hwpf;                /* DSR1_GEMV_* (dsr1_pool_set_hwpf: the decode-time choice,
                                pftune.h) */
    struct dsr1_pftune *tune; /* a decode trial step's tuner, else NULL (dsr1_pool_set_tune) */
};

typedef struct worker_arg {
    dsr1_pool *p;
    int cpu;                 /* CPU to pin to, or -1 */
} worker_arg;

static void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static void claim_tasks(dsr1_pool *p)
{
    for (;;) {
        int t = atomic_fetch_add(&p->next, 1);
        if (t >= p->ntasks) return;
        p->fn(p->ctx, t, p->ntasks);
    }
}

static int64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Spin until gen != seen (gen given) or busy == 0 (else), for at most
 * POOL_SPIN_NS; 1 when that happened, 0 when the caller should sleep. */
static int spin_until(dsr1_pool *p, const atomic_uint *gen, unsigned seen)
{
#define POOL_DONE() (gen ? atomic_load(gen) != seen || atomic_load(&p->quit) : atomic_load(&p->busy) == 0)
    for (int i = 0; i < POOL_SPIN; i++) {
        if (POOL_DONE()) return 1;
        cpu_relax();
    }
    int64_t end = mono_ns() + POOL_SPIN_NS;
    do {
        for (int i = 0; i < 64; i++) {
            if (POOL_DONE()) return 1;
            cpu_relax();
        }
        sched_yield();
    } while (mono_ns() < end);
    return POOL_DONE();
#undef POOL_DONE
}

/* Wait until gen differs from seen (or stop); returns 0 on stop. */
static int wait_for_run(dsr1_pool *p, unsigned seen)
{
    if (spin_until(p, &p->gen, seen)) return !atomic_load(&p->quit);
    pthread_mutex_lock(&p->mu);
    while (atomic_load(&p->gen) == seen && !p->stop) pthread_cond_wait(&p->wake, &p->mu);
    int stop = p->stop;
    pthread_mutex_unlock(&p->mu);
    return !stop;
}

static void *worker_main(void *arg)
{
    worker_arg wa = *(worker_arg *)arg;
    dsr1_pool *p = wa.p;
    free(arg);
    if (wa.cpu >= 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(wa.cpu, &set);
        (void)pthread_setaffinity_np(pthread_self(), sizeof set, &set); /* best effort */
    }
    unsigned seen = 0;
    while (wait_for_run(p, seen)) {
        seen = atomic_load(&p->gen);
        claim_tasks(p);
        if (atomic_fetch_sub(&p->busy, 1) == 1) {
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&p->done);
            pthread_mutex_unlock(&p->mu);
        }
    }
    return NULL;
}

/* The i-th CPU this process may run on, or -1. */
static int allowed_cpu(int i, int *count)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) != 0) {
        *count = 0;
        return -1;
    }
    *count = CPU_COUNT(&set);
    for (int c = 0, k = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &set) && k++ == i) return c;
    return -1;
}

int dsr1_pool_create(dsr1_pool **out, int nthreads, dsr1_error *err)
{
    return dsr1_pool_create_on(out, nthreads, NULL, 0, err);
}

int dsr1_pool_create_on(dsr1_pool **out, int nthreads, const int *cpus, int ncpus, dsr1_error *err)
{
    *out = NULL;
    int ncpu = 0;
    (void)allowed_cpu(0, &ncpu);
    if (cpus) ncpu = ncpus;
    if (nthreads <= 0) nthreads = ncpu > 0 ? ncpu : 1;
    if (nthreads > 1024)
        return dsr1_errorf(err, DSR1_EINVAL, "thread pool: %d threads requested, at most 1024", nthreads);
    dsr1_pool *p = calloc(1, sizeof *p);
    if (!p) return dsr1_errorf(err, DSR1_ENOMEM, "thread pool: out of memory");
    p->n = nthreads;
    p->avx512 = dsr1_mm_avx512_usable();
    p->amx = dsr1_mm_amx_usable();
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->done, NULL);
    p->threads = calloc((size_t)nthreads, sizeof *p->threads);
    if (!p->threads) {
        dsr1_pool_free(p);
        return dsr1_errorf(err, DSR1_ENOMEM, "thread pool: out of memory");
    }
    /* Workers take CPUs 1..n-1 of the allowed set, or of `cpus` (the caller
     * is usually on the first); pinning only when every thread gets its own
     * CPU. */
    int pin = nthreads <= ncpu;
    for (int i = 1; i < nthreads; i++) {
        worker_arg *wa = malloc(sizeof *wa);
        int dummy;
        if (wa) {
            wa->p = p;
            wa->cpu = !pin ? -1 : cpus ? cpus[i] : allowed_cpu(i, &dummy);
        }
        if (!wa || pthread_create(&p->threads[i - 1], NULL, worker_main, wa) != 0) {
            free(wa);
            p->n = i; /* only i - 1 workers exist */
            dsr1_pool_free(p);
            return dsr1_errorf(err, DSR1_ENOMEM, "thread pool: cannot start thread %d of %d", i, nthreads);
        }
    }
    *out = p;
    return 0;
}

void dsr1_pool_free(dsr1_pool *p)
{
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    atomic_store(&p->quit, 1);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i < p->n && p->threads; i++) pthread_join(p->threads[i - 1], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->wake);
    pthread_cond_destroy(&p->done);
    free(p->threads);
    free(p->scratch);
    free(p);
}

int dsr1_pool_size(const dsr1_pool *p) { return p ? p->n : 1; }

void dsr1_pool_run(dsr1_pool *p, void (*fn)(void *ctx, int task, int ntasks), void *ctx,
                   int ntasks)
{
    if (ntasks <= 0) return;
    if (!p || p->n == 1 || ntasks == 1) {
        for (int t = 0; t < ntasks; t++) fn(ctx, t, ntasks);
        return;
    }
    p->fn = fn;
    p->ctx = ctx;
    p->ntasks = ntasks;
    atomic_store(&p->next, 0);
    atomic_store(&p->busy, p->n - 1);
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add(&p->gen, 1);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    claim_tasks(p);
    (void)spin_until(p, NULL, 0);
    pthread_mutex_lock(&p->mu);
    while (atomic_load(&p->busy) != 0) pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}

/* ---- scratch -------------------------------------------------------------- */

void *dsr1_pool_scratch(dsr1_pool *p, size_t bytes)
{
    if (bytes <= p->scratch_cap) return p->scratch;
    size_t cap = bytes + bytes / 4;
    cap = (cap + 63) & ~(size_t)63;
    void *s = aligned_alloc(64, cap);
    if (!s) return NULL;
    free(p->scratch);
    p->scratch = s;
    p->scratch_cap = cap;
    return s;
}

void dsr1_touch(void *mem, size_t bytes)
{
    volatile char *c = mem;
    for (size_t i = 0; c && i < bytes; i += 4096) c[i] = 0;
}

int dsr1_pool_reserve(dsr1_pool *p, size_t bytes, dsr1_error *err)
{
    if (!p) return 0;
    void *s = dsr1_pool_scratch(p, bytes);
    if (!s) return dsr1_errorf(err, DSR1_ENOMEM, "thread pool: cannot reserve %zu bytes of scratch", bytes);
    dsr1_touch(s, p->scratch_cap);
    return 0;
}

int dsr1_pool_avx512(const dsr1_pool *p) { return p->avx512; }
int dsr1_pool_amx(const dsr1_pool *p) { return p->amx; }
uint64_t *dsr1_pool_amx_counter(dsr1_pool *p) { return p ? &p->amx_runs : NULL; }
uint64_t dsr1_pool_amx_runs(dsr1_pool *p) { return p ? __atomic_load_n(&p->amx_runs, __ATOMIC_RELAXED) : 0; }

void dsr1_pool_set_hwpf(dsr1_pool *p, int variant)
{
    if (p) p->hwpf = variant;
}

int dsr1_pool_hwpf(const dsr1_pool *p) { return p ? p->hwpf : 0; }

void dsr1_pool_set_tune(dsr1_pool *p, struct dsr1_pftune *t)
{
    if (p) p->tune = t;
}

struct dsr1_pftune *dsr1_pool_tune(const dsr1_pool *p) { return p ? p->tune : NULL; }
