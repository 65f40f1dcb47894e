/* pool.c - pool_run on persistent worker threads.
 *
 * Decode runs hundreds of small matrix products per token; starting threads
 * for each one cost more than the product itself. Workers are started on
 * first use (up to the largest thread count asked for), wait for a new
 * generation of work by polling (plain loads, then sched_yield) and then
 * sleeping on a condition variable, and are stopped and joined at exit.
 * The mutex and the condition variables are touched only when a side goes
 * to sleep (a flag tells the other side to wake it): a job's hand-off and
 * its end are a few plain stores and loads, where locking the mutex on both
 * sides moved cache lines between the cores several times a job (a job of
 * two empty tasks: 1.8 -> 0.9 us on the 2-vCPU VM; commit 90cf5e7).
 *
 * Each participant of a job (the caller is participant 0) owns an equal,
 * contiguous share of the tasks and takes them from its front; when its
 * share is done it takes the last tasks of the others' shares. So a thread
 * runs consecutive tasks (a matrix product's tiles are consecutive rows: the
 * hardware prefetchers keep streaming across tiles, where threads taking
 * alternate tiles from one counter restarted every stream at every tile) and
 * the threads still finish together.
 *
 * The spinning hand-off pays: against a plain mutex/condvar pool (workers
 * asleep between jobs) decode ran 18-36 % faster (docs/PERFORMANCE.md at a8ff33e).
 *
 * One pool_run runs on the pool at a time; a call that finds it busy
 * (another thread, or a task calling pool_run) runs its tasks itself.
 * Which thread runs a task never changes a result. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <unistd.h>
#include <stdlib.h>

#include "core/pool.h"

#define POLLS 100000 /* plain loads of a flag before yielding (the next job comes within microseconds in a
                        decode; a yield here is a system call of ~1.2 us) */
#define SPINS 4000    /* then sched_yield polls before sleeping: ~0.1-1 ms */

static struct {
    pthread_mutex_t busy;           /* held by the pool_run using the pool */
    pthread_mutex_t mu;             /* guards the sleeps below */
    pthread_cond_t wake, done;
    pthread_t tid[POOL_MAX_THREADS];
    int started;                    /* workers 1..started exist */
    uint_fast64_t start_gen;        /* the generation before the job new workers are started for */
    bool stop;
    /* The job, written by pool_run before it publishes gen: one cache
     * line, which a helper fetches once per job. */
    _Alignas(64) atomic_uint_fast64_t gen; /* job number << 8 | its helper count: read in one load, a
                                              worker sees a job's participants with the job */
    void (*fn)(void *, int64_t, int);
    void *arg;
    int64_t base;                   /* the job's tasks are base + [0, 2^32) */
    int parts;                      /* participants: helpers + 1 */
    atomic_int sleepers;            /* workers asleep on `wake` or about to be (under mu) */
    /* Written by the helpers as they finish. */
    _Alignas(64) atomic_int pending; /* helpers still working on the job */
    atomic_bool waiting;            /* pool_run asleep on `done` or about to be (under mu) */
} pool = {.busy = PTHREAD_MUTEX_INITIALIZER, .mu = PTHREAD_MUTEX_INITIALIZER,
          .wake = PTHREAD_COND_INITIALIZER, .done = PTHREAD_COND_INITIALIZER};

/* Participant p's share of the job's tasks: [front, back) as front << 32 | back,
 * one cache line each. */
static struct {
    _Alignas(64) atomic_uint_fast64_t fb;
} share[POOL_MAX_THREADS];

/* Takes the first (first) or the last task left in share p. */
static bool take(int p, bool first, int64_t *task)
{
    uint_fast64_t fb = atomic_load(&share[p].fb);
    for (;;) {
        uint_fast64_t f = fb >> 32, b = fb & 0xFFFFFFFFu;
        if (f >= b)
            return false;
        if (atomic_compare_exchange_weak(&share[p].fb, &fb, first ? (f + 1) << 32 | b : f << 32 | (b - 1))) {
            *task = pool.base + (int64_t)(first ? f : b - 1);
            return true;
        }
    }
}

/* Participant p's own share from the front, then the others' from their backs. */
static void run_tasks(int p)
{
    int64_t t;
    while (take(p, true, &t))
        pool.fn(pool.arg, t, p);
    for (int k = 1; k < pool.parts; k++)
        while (take((p + k) % pool.parts, false, &t))
            pool.fn(pool.arg, t, p);
}

static void *worker_main(void *p)
{
    int id = (int)(intptr_t)p;
    uint_fast64_t seen = pool.start_gen; /* not gen: the job may already have been posted */
    for (;;) {
        for (int i = 0; i < POLLS && atomic_load_explicit(&pool.gen, memory_order_relaxed) == seen; i++)
            continue;
        for (int i = 0; i < SPINS && atomic_load(&pool.gen) == seen; i++)
            sched_yield();
        if (atomic_load(&pool.gen) == seen) {
            pthread_mutex_lock(&pool.mu);
            atomic_fetch_add(&pool.sleepers, 1); /* then gen is read again: a post either sees us or we see it */
            while (atomic_load(&pool.gen) == seen && !pool.stop)
                pthread_cond_wait(&pool.wake, &pool.mu);
            atomic_fetch_sub(&pool.sleepers, 1);
            bool stop = pool.stop;
            pthread_mutex_unlock(&pool.mu);
            if (stop)
                return NULL;
        }
        seen = atomic_load(&pool.gen);
        if (id > (int)(seen & 0xFF))
            continue; /* not a helper of this job */
        run_tasks(id);
        if (atomic_fetch_sub(&pool.pending, 1) == 1 && atomic_load(&pool.waiting)) {
            pthread_mutex_lock(&pool.mu);
            pthread_cond_signal(&pool.done);
            pthread_mutex_unlock(&pool.mu);
        }
    }
}

static void pool_stop(void)
{
    pthread_mutex_lock(&pool.mu);
    pool.stop = true;
    pthread_cond_broadcast(&pool.wake);
    pthread_mutex_unlock(&pool.mu);
    for (int i = 1; i <= pool.started; i++)
        pthread_join(pool.tid[i], NULL);
    pool.started = 0;
}

/* A child of fork() has none of the workers: it starts with an empty pool. */
static void pool_forget(void)
{
    pthread_mutex_init(&pool.busy, NULL);
    pthread_mutex_init(&pool.mu, NULL);
    pthread_cond_init(&pool.wake, NULL);
    pthread_cond_init(&pool.done, NULL);
    pool.started = 0;
    atomic_store(&pool.sleepers, 0); /* the parent's sleeping workers are not here */
    atomic_store(&pool.waiting, false);
}

/* Starts workers up to `helpers`; returns how many exist. Called with busy held. */
static int pool_grow(int helpers)
{
    static bool hooked;
    if (!hooked && helpers > 0) {
        if (atexit(pool_stop) != 0 || pthread_atfork(NULL, NULL, pool_forget) != 0)
            return 0;
        hooked = true;
    }
    pool.start_gen = atomic_load(&pool.gen);
    while (pool.started < helpers &&
           pthread_create(&pool.tid[pool.started + 1], NULL, worker_main, (void *)(intptr_t)(pool.started + 1)) == 0)
        pool.started++;
    return pool.started < helpers ? pool.started : helpers;
}

#define JOB_TASKS 0xFFFFFFFFll /* most tasks of one job: a share's bounds are 32-bit */

int pool_workers(int threads, int64_t n_tasks)
{
    if (threads > POOL_MAX_THREADS)
        threads = POOL_MAX_THREADS;
    if (threads > n_tasks)
        threads = (int)n_tasks;
    return threads < 1 ? 1 : threads;
}

void pool_run(int threads, int64_t n_tasks, void (*fn)(void *arg, int64_t task, int worker), void *arg)
{
    threads = pool_workers(threads, n_tasks);
    if (threads <= 1 || pthread_mutex_trylock(&pool.busy) != 0) {
        for (int64_t t = 0; t < n_tasks; t++)
            fn(arg, t, 0);
        return;
    }
    int helpers = pool_grow(threads - 1);
    pool.fn = fn;
    pool.arg = arg;
    pool.parts = helpers + 1;
    for (pool.base = 0; pool.base < n_tasks; pool.base += JOB_TASKS) {
        int64_t n = n_tasks - pool.base < JOB_TASKS ? n_tasks - pool.base : JOB_TASKS;
        for (int p = 0; p < pool.parts; p++) /* published by the store of gen below (release) */
            atomic_store_explicit(&share[p].fb,
                                  (uint_fast64_t)(n * p / pool.parts) << 32 | (uint_fast64_t)(n * (p + 1) / pool.parts),
                                  memory_order_relaxed);
        atomic_store_explicit(&pool.pending, helpers, memory_order_relaxed);
        atomic_store(&pool.gen, ((atomic_load(&pool.gen) >> 8) + 1) << 8 | (uint_fast64_t)helpers);
        if (atomic_load(&pool.sleepers) > 0) {
            pthread_mutex_lock(&pool.mu);
            pthread_cond_broadcast(&pool.wake);
            pthread_mutex_unlock(&pool.mu);
        }
        run_tasks(0);
        for (int i = 0; i < POLLS && atomic_load_explicit(&pool.pending, memory_order_relaxed) > 0; i++)
            continue;
        for (int i = 0; i < SPINS && atomic_load(&pool.pending) > 0; i++)
            sched_yield();
        if (atomic_load(&pool.pending) > 0) {
            pthread_mutex_lock(&pool.mu);
            atomic_store(&pool.waiting, true); /* then pending is read again: the last helper sees one or the other */
            while (atomic_load(&pool.pending) > 0)
                pthread_cond_wait(&pool.done, &pool.mu);
            atomic_store(&pool.waiting, false);
            pthread_mutex_unlock(&pool.mu);
        }
    }
    pthread_mutex_unlock(&pool.busy);
}

int pool_default_threads(void)
{
    long n = 0;
#ifdef __linux__
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0)
        n = CPU_COUNT(&set);
#endif
    if (n < 1)
        n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > POOL_MAX_THREADS ? POOL_MAX_THREADS : (int)n;
}
