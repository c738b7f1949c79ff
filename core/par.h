/*
 * par.h - a minimal parallel-for for core's load-time work (the derived
 * attention parts of every layer), so core needs no backend's thread pool
 * before a backend is chosen. Not for the decode loop: it starts threads
 * on every call.
 */
#ifndef DSR1_PAR_H
#define DSR1_PAR_H

/* fn(ctx, task, ntasks) for task = 0..ntasks-1, one thread per task (the
 * caller's thread runs task 0). A thread that cannot start runs its task
 * on the caller's thread instead, so this never fails. */
void dsr1_par_run(void (*fn)(void *ctx, int task, int ntasks), void *ctx, int ntasks);

/* Worker count for `threads` (0 or less: the CPUs this process may use). */
int dsr1_par_threads(int threads);

#endif
