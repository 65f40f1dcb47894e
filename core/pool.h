/* pool.h - running tasks on persistent worker threads.
 *
 * pool_run(threads, n, fn, arg) calls fn(arg, task, worker) for every task
 * in [0, n) on pool_workers(threads, n) threads and returns when all are
 * done; `worker` (0 for the caller) indexes per-thread scratch. Which thread
 * runs a task never changes a result: callers split work into tasks fixed
 * by the problem, not by the thread count. */
#ifndef GP_POOL_H
#define GP_POOL_H

#include <stdint.h>

#define POOL_MAX_THREADS 64

void pool_run(int threads, int64_t n_tasks, void (*fn)(void *arg, int64_t task, int worker), void *arg);

/* The threads pool_run uses: threads clamped to [1, min(n_tasks, POOL_MAX_THREADS)]. */
int pool_workers(int threads, int64_t n_tasks);

/* The CPUs this process may run on (its affinity mask on Linux, else the
 * online CPUs), clamped to [1, POOL_MAX_THREADS]: every command's default
 * --threads (results never depend on the count). */
int pool_default_threads(void);

#endif
