/*
 * par.c - the load-time parallel-for of par.h: plain pthreads, joined
 * before returning. Owns no state between calls.
 */
#include "par.h"

#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <unistd.h>

typedef struct par_task {
    void (*fn)(void *ctx, int task, int ntasks);
    void *ctx;
    int task, ntasks;
} par_task;

static void *run_one(void *p)
{
    par_task *t = p;
    t->fn(t->ctx, t->task, t->ntasks);
    return NULL;
}

void dsr1_par_run(void (*fn)(void *ctx, int task, int ntasks), void *ctx, int ntasks)
{
    if (ntasks <= 1) {
        if (ntasks == 1) fn(ctx, 0, 1);
        return;
    }
    par_task *t = calloc((size_t)ntasks, sizeof *t);
    pthread_t *th = calloc((size_t)ntasks, sizeof *th);
    unsigned char *started = calloc((size_t)ntasks, 1);
    if (!t || !th || !started) {
        for (int k = 0; k < ntasks; k++) fn(ctx, k, ntasks);
    } else {
        for (int k = 0; k < ntasks; k++) t[k] = (par_task){fn, ctx, k, ntasks};
        for (int k = 1; k < ntasks; k++) started[k] = pthread_create(&th[k], NULL, run_one, &t[k]) == 0;
        fn(ctx, 0, ntasks);
        for (int k = 1; k < ntasks; k++) {
            if (started[k]) pthread_join(th[k], NULL);
            else fn(ctx, k, ntasks);
        }
    }
    free(t);
    free(th);
    free(started);
}

int dsr1_par_threads(int threads)
{
    if (threads > 0) return threads;
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}
