/* attention.c - causal attention over keys and values a caller provides
 * (kernels.h). Built from the table's dots and axpy, whose every level gives
 * the same bits: with the scalar table this is the reference.
 *
 * Two ways, the same bits (a (row, head)'s arithmetic is the same in both,
 * whatever the tasks; tests/test_kernels.c):
 * - by rows: a task is one query row and up to ATTN_HEADS heads of a KV
 *   head, its scores, softmax and values (a prefill's many rows);
 * - split, for steps of up to ATTN_SPLIT_ROWS rows that would give the
 *   threads fewer tasks than there are threads (a decode step on many
 *   cores): three passes over the pool for all the rows together,
 *   1. scores: tasks over (KV head, ATTN_CHUNK positions): each key, fetched
 *      once, scored against every row and head of its group;
 *   2. softmax: tasks over (row, head);
 *   3. values: tasks over (KV head, ATTN_DCOLS columns of d): each row's and
 *      head's output columns summed over its keys in position order.
 * The way depends on the thread count; the bits do not. Decode of an
 * E2B-shaped 4-bit pack after a 4096-token prompt on a 16-core Xeon, % of
 * the bound, exact / q8, by rows → split: 36.9 / 40.5 → 47.8 / 60.2 % on 16
 * threads, 65.7 / 79.8 → 70.1 / 92.0 % on 4 (docs/PERFORMANCE.md); on 2
 * threads (a decode step of E2B: split, since its 8 heads are one task) the
 * two were within 3 % alone.
 *
 * In a step of at most ATTN_SPLIT_ROWS rows (decode), a block's keys and
 * values are prefetched, every line they lie on, before they are used: the
 * kernels read a key's d floats in a burst too short for the hardware's
 * prefetchers, so that without this a decode step at depth waits on each
 * line (runner/kvcache.c stores the K and V rows as two planes for the same
 * reason). A prefill's many rows find the keys in the cache already. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "core/pool.h"
#include "kernels/kernels.h"

#define ATTN_HEADS 8       /* by rows: query heads per task (each key and value read once for them) */
#define ATTN_KEYS 16       /* keys scored with one dots call, or added with one axpy call */
#define ATTN_SPLIT_ROWS 4  /* split: at most this many rows */
#define ATTN_CHUNK 64      /* split: positions per scores task */
#define ATTN_DCOLS 128     /* split: output columns per values task */

size_t kern_attn_scratch(int64_t N, int64_t Nq, int64_t keys, int64_t d, int threads)
{
    int64_t rows = (int64_t)threads * (ATTN_HEADS * keys + ATTN_KEYS * d);
    int64_t split = (N < ATTN_SPLIT_ROWS ? N : ATTN_SPLIT_ROWS) * Nq * keys + (int64_t)threads * ATTN_KEYS * d;
    return (size_t)(rows > split ? rows : split);
}

/* Every 64-byte line holding part of x[0 .. n) requested into the cache, in
 * a step of few rows. */
static void prefetch_floats(const struct kern_attn *a, const float *x, int64_t n)
{
    const uintptr_t end = (uintptr_t)(x + n);
    for (uintptr_t p = (uintptr_t)x & ~(uintptr_t)63; a->N <= ATTN_SPLIT_ROWS && p < end; p += 64)
        __builtin_prefetch((const void *)p);
}

/* The first position query row `row` sees (its last is pos[row]). */
static int64_t first_key(const struct kern_attn *a, int64_t row)
{
    const int64_t P = a->pos[row];
    return a->window && P - a->window + 1 > 0 ? P - a->window + 1 : 0;
}

/* Scores su[n] to weights: the max subtracted (fmaxf's: a NaN score is
 * passed over), exp (a hidden key's −inf: 0), the sum in order, one
 * division each. */
static void softmax_keys(float *su, int64_t n)
{
    float m = -INFINITY, sum = 0.0f;
    for (int64_t p = 0; p < n; p++)
        m = su[p] > m ? su[p] : m;
    for (int64_t p = 0; p < n; p++) {
        su[p] = su[p] == -INFINITY ? 0.0f : kern_exp(su[p] - m);
        sum += su[p];
    }
    for (int64_t p = 0; p < n; p++)
        su[p] /= sum;
}

/* Row `row`'s keys p0 .. p1 (a block of at most ATTN_KEYS it may see) of
 * KV head g scored against heads q[nh, d], each key fetched once for all:
 * s[u·keys + p − p0] for head u, −inf for a key its mask hides. */
static void score_keys(const struct kern_table *t, const struct kern_attn *a, int64_t row, int64_t g, const float *q,
                       int nh, int64_t p0, int64_t p1, float *s, float *buf)
{
    const float *kv[ATTN_KEYS];
    int at[ATTN_KEYS], live = 0;
    for (int64_t p = p0; p <= p1; p++) {
        kv[live] = a->kv(a->ctx, row, p, g, 0, buf + (p - p0) * a->d);
        at[live] = (int)(p - p0);
        live += kv[live] != NULL;
    }
    for (int l = 0; l < live; l++)
        prefetch_floats(a, kv[l], a->d);
    t->dots(q, nh, kv, live, a->d, s, a->keys);                               /* q·k, scale 1.0 */
    for (int u = 0; live < p1 - p0 + 1 && u < nh; u++) {                      /* hidden keys: −inf */
        float *su = s + u * a->keys;
        for (int l = live - 1, p = (int)(p1 - p0); p >= 0; p--)
            su[p] = l >= 0 && at[l] == p ? su[l--] : -INFINITY;
    }
}

/* The same block's values into heads' outputs o[nh, d] (from column c, nc
 * columns): o += w·v key by key, w = s[u·keys + p − p0], each value fetched
 * once for all the heads; a value no head adds (KERN_WEIGHT_MIN) is not
 * fetched. */
static void add_values(const struct kern_table *t, const struct kern_attn *a, int64_t row, int64_t g, int nh,
                       int64_t p0, int64_t p1, const float *s, float *o, int64_t c, int64_t nc, float *buf)
{
    const float *x[ATTN_KEYS];
    for (int64_t p = p0; p <= p1; p++) {
        bool used = false;
        for (int u = 0; u < nh; u++)
            used |= !(s[u * a->keys + p - p0] < KERN_WEIGHT_MIN);
        const float *v = used ? a->kv(a->ctx, row, p, g, 1, buf + (p - p0) * a->d) : NULL;
        x[p - p0] = v ? v + c : NULL;                        /* NULL: hidden (a weight of NaN scores) */
        if (v)
            prefetch_floats(a, v + c, nc);
    }
    t->axpy(o, a->d, nh, s, a->keys, x, (int)(p1 - p0 + 1), nc);
}

struct rows_job {
    const struct kern_table *t;
    const struct kern_attn *a;
    int64_t blocks;              /* head blocks per KV head: ceil(group / ATTN_HEADS) */
};

/* One query row and a block of heads sharing a KV head: softmax(q·K) · V
 * over the visible keys, in position order, for each head; keys and values
 * in blocks of ATTN_KEYS. */
static void row_task(void *arg, int64_t task, int worker)
{
    const struct rows_job *j = arg;
    const struct kern_attn *a = j->a;
    const int64_t group = a->Nq / a->G, d = a->d, per_row = a->G * j->blocks; /* tasks of one query row */
    const int64_t row = task / per_row, g = task % per_row / j->blocks;
    const int64_t h0 = g * group + task % j->blocks * ATTN_HEADS, h1 = (g + 1) * group; /* g's heads end at h1 */
    const int nh = (int)(h1 - h0 < ATTN_HEADS ? h1 - h0 : ATTN_HEADS);
    const int64_t k0 = first_key(a, row), P = a->pos[row], n = P - k0 + 1; /* keys k0 .. P */
    const float *q = a->q + (row * a->Nq + h0) * d;                         /* [nh, d] */
    float *o = a->out + (row * a->Nq + h0) * d;                             /* [nh, d] */
    float *s = a->scratch + (size_t)worker * (ATTN_HEADS * a->keys + ATTN_KEYS * d); /* [nh, keys] scores, weights */
    float *buf = s + ATTN_HEADS * a->keys;                                 /* [ATTN_KEYS, d] decoded keys or values */
    for (int64_t b = k0; b <= P; b += ATTN_KEYS)
        score_keys(j->t, a, row, g, q, nh, b, b + ATTN_KEYS - 1 < P ? b + ATTN_KEYS - 1 : P, s + b - k0, buf);
    for (int u = 0; u < nh; u++)
        softmax_keys(s + u * a->keys, n);
    memset(o, 0, (size_t)(nh * d) * sizeof *o);
    for (int64_t b = k0; b <= P; b += ATTN_KEYS)
        add_values(j->t, a, row, g, nh, b, b + ATTN_KEYS - 1 < P ? b + ATTN_KEYS - 1 : P, s + b - k0, o, 0, d, buf);
}

struct split_job {
    const struct kern_table *t;
    const struct kern_attn *a;
    int64_t lo, hi;           /* positions any of the step's rows sees: lo .. hi */
    int64_t chunks, dchunks;  /* scores tasks, values tasks per KV head */
    float *s;                 /* [N, Nq, keys]: row r's head h scores of its keys k0(r) + i, then weights */
    float *buf;               /* [workers, ATTN_KEYS, d] decoded keys or values */
};

/* Pass 1, task (g, c): positions lo + c·ATTN_CHUNK .. (+ATTN_CHUNK − 1), in
 * blocks of ATTN_KEYS; each row's visible ones against each head of group g. */
static void scores_task(void *arg, int64_t task, int worker)
{
    const struct split_job *j = arg;
    const struct kern_attn *a = j->a;
    const int64_t group = a->Nq / a->G, d = a->d, g = task / j->chunks;
    const int64_t c0 = j->lo + task % j->chunks * ATTN_CHUNK;
    const int64_t c1 = c0 + ATTN_CHUNK - 1 < j->hi ? c0 + ATTN_CHUNK - 1 : j->hi;
    float *buf = j->buf + (size_t)worker * ATTN_KEYS * d;                    /* [ATTN_KEYS, d] */
    for (int64_t b = c0; b <= c1; b += ATTN_KEYS)
        for (int64_t row = 0; row < a->N; row++) {
            const int64_t k0 = first_key(a, row), P = a->pos[row] < c1 ? a->pos[row] : c1;
            const int64_t p0 = b > k0 ? b : k0, p1 = b + ATTN_KEYS - 1 < P ? b + ATTN_KEYS - 1 : P;
            if (p0 <= p1)
                score_keys(j->t, a, row, g, a->q + (row * a->Nq + g * group) * d, (int)group, p0, p1,
                           j->s + (row * a->Nq + g * group) * a->keys + p0 - k0, buf);
        }
}

/* Pass 2, task (r, h): softmax over row r's keys for head h. */
static void softmax_task(void *arg, int64_t task, int worker)
{
    (void)worker;
    const struct split_job *j = arg;
    const struct kern_attn *a = j->a;
    const int64_t row = task / a->Nq, n = a->pos[row] - first_key(a, row) + 1;
    softmax_keys(j->s + task * a->keys, n);
}

/* Pass 3, task (g, c): columns c·ATTN_DCOLS .. of every row's outputs for
 * the heads of group g, over the keys in position order. */
static void values_task(void *arg, int64_t task, int worker)
{
    const struct split_job *j = arg;
    const struct kern_attn *a = j->a;
    const int64_t group = a->Nq / a->G, d = a->d, g = task / j->dchunks, c = task % j->dchunks * ATTN_DCOLS;
    const int64_t nc = d - c < ATTN_DCOLS ? d - c : ATTN_DCOLS;
    float *buf = j->buf + (size_t)worker * ATTN_KEYS * d;                    /* [ATTN_KEYS, d] */
    for (int64_t row = 0; row < a->N; row++)
        for (int64_t u = 0; u < group; u++)
            memset(a->out + (row * a->Nq + g * group + u) * d + c, 0, (size_t)nc * sizeof(float));
    for (int64_t b = j->lo; b <= j->hi; b += ATTN_KEYS)
        for (int64_t row = 0; row < a->N; row++) {
            const int64_t k0 = first_key(a, row), P = a->pos[row];
            const int64_t p0 = b > k0 ? b : k0, p1 = b + ATTN_KEYS - 1 < P ? b + ATTN_KEYS - 1 : P;
            if (p0 <= p1)
                add_values(j->t, a, row, g, (int)group, p0, p1, j->s + (row * a->Nq + g * group) * a->keys + p0 - k0,
                           a->out + (row * a->Nq + g * group) * d + c, c, nc, buf);
        }
}

void kern_attention(const struct kern_table *t, const struct kern_attn *a, int threads)
{
    const int64_t group = a->Nq / a->G, blocks = (group + ATTN_HEADS - 1) / ATTN_HEADS;
    if (a->N > ATTN_SPLIT_ROWS || a->N * a->G * blocks >= threads) {
        struct rows_job j = {t, a, blocks};
        pool_run(threads, a->N * a->G * blocks, row_task, &j);
        return;
    }
    struct split_job j = {.t = t, .a = a, .lo = INT64_MAX, .hi = -1, .s = a->scratch,
                          .buf = a->scratch + a->N * a->Nq * a->keys, .dchunks = (a->d + ATTN_DCOLS - 1) / ATTN_DCOLS};
    for (int64_t row = 0; row < a->N; row++) {
        j.lo = first_key(a, row) < j.lo ? first_key(a, row) : j.lo;
        j.hi = a->pos[row] > j.hi ? a->pos[row] : j.hi;
    }
    j.chunks = (j.hi - j.lo + ATTN_CHUNK) / ATTN_CHUNK;
    pool_run(threads, a->G * j.chunks, scores_task, &j);
    pool_run(threads, a->N * a->Nq, softmax_task, &j);
    pool_run(threads, a->G * j.dchunks, values_task, &j);
}
