/* test_pool.c - core/pool: every task of a job runs exactly once, on a
 * worker index in range, for thread counts going up and down, nested calls
 * and two callers at once; a participant done with its share takes the
 * others' last tasks. */
#include <criterion/criterion.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "core/pool.h"
#include "tests/helpers.h"

struct counts {
    atomic_int seen[64];
    int max_worker;     /* workers must be < this */
    atomic_int bad_worker;
    bool nest;          /* each task also runs a 3-task pool_run (inline when the pool is busy) */
};

static void inner_task(void *arg, int64_t task, int worker)
{
    (void)task;
    if (worker < 0 || worker >= pool_workers(2, 3))
        atomic_fetch_add(&((struct counts *)arg)->bad_worker, 1);
}

static void count_task(void *arg, int64_t task, int worker)
{
    struct counts *c = arg;
    atomic_fetch_add(&c->seen[task], 1);
    if (worker < 0 || worker >= c->max_worker)
        atomic_fetch_add(&c->bad_worker, 1);
    if (c->nest)
        pool_run(2, 3, inner_task, c);
}

/* One round; the number of problems: a task not run exactly once, a worker
 * index out of range (no assert here: it also runs off the test's thread). */
static int parallel_round(int threads, int64_t n, bool nest)
{
    struct counts c = {.max_worker = pool_workers(threads, n), .nest = nest};
    pool_run(threads, n, count_task, &c);
    int bad = atomic_load(&c.bad_worker);
    for (int64_t k = 0; k < 64; k++)
        bad += atomic_load(&c.seen[k]) != (k < n ? 1 : 0);
    return bad;
}

static void *parallel_rounds(void *arg)
{
    int *bad = arg;
    for (int round = 0; round < 200; round++)
        *bad += parallel_round(1 + round % 4, round % 64, false);
    return NULL;
}

/* The persistent pool: thread counts going up and down (workers that sit a
 * job out), nested calls, and two threads calling at once (one finds the
 * pool busy and runs its tasks itself). */
Test(pool, runs_every_task_once)
{
    for (int threads = 1; threads <= 5; threads++)
        for (int64_t n = 0; n <= 11; n++)
            cr_assert_eq(parallel_round(threads, n, false), 0, "threads %d, %lld tasks", threads, (long long)n);
    for (int round = 0; round < 300; round++)
        cr_assert_eq(parallel_round(1 + (round * 7) % 5, (round * 13) % 64, round % 3 == 0), 0, "round %d",
                     round);
    pthread_t other;
    int bad[2] = {0, 0};
    cr_assert_eq(pthread_create(&other, NULL, parallel_rounds, &bad[1]), 0);
    parallel_rounds(&bad[0]);
    pthread_join(other, NULL);
    cr_assert_eq(bad[0] + bad[1], 0, "two threads calling pool_run at once: %d problems", bad[0] + bad[1]);
}

struct steal {
    atomic_int ran_by[100];
};

/* Task 50, the first of the helper's share, waits until task 99, the last,
 * has run: only the caller, done with its own share, can take it from the
 * back of the helper's. A pool that does not take from others' backs never
 * ends (the test's timeout fails it); no sleep, no timing. */
static void steal_task(void *arg, int64_t task, int worker)
{
    struct steal *st = arg;
    if (task == 50 && worker == 1)
        while (!atomic_load(&st->ran_by[99]))
            continue;
    atomic_store(&st->ran_by[task], worker + 1);
}

/* Two participants, 100 tasks: every task runs once, the caller's share
 * (0-49) on the caller, and the caller takes the helper's last task. */
Test(pool, takes_from_the_back_of_other_shares, .timeout = TH_TIMEOUT(30))
{
    for (int round = 0; round < 20; round++) {
        struct steal st = {0};
        pool_run(2, 100, steal_task, &st);
        for (int t = 0; t < 100; t++)
            cr_assert(atomic_load(&st.ran_by[t]) == 1 || atomic_load(&st.ran_by[t]) == 2, "task %d not run", t);
        for (int t = 0; t < 50; t++)
            cr_assert_eq(atomic_load(&st.ran_by[t]), 1, "task %d of the caller's share ran on the helper", t);
        cr_assert_eq(atomic_load(&st.ran_by[99]), 1, "the helper's last task was not taken by the caller");
    }
}
