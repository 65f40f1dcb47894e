/* attention.c - causal attention over keys and values a caller provides
 * (kernels.h). Built from the table's dots and axpy, whose every level gives
 * the same bits: with the scalar table this is the reference.
 *
 * A row's output for a head is its weights' sum of values taken chunk by
 * chunk: each chunk of ATTN_CHUNK positions (aligned to multiples of it) the
 * row sees summed on its own from zero, key by key in position order, and
 * the chunks' sums added to zero in position order. Two ways, the same bits
 * (a (row, head)'s arithmetic is the same in both, whatever the tasks;
 * tests/test_kernels.c):
 * - by rows: a task is one query row and up to ATTN_HEADS heads of a KV
 *   head, its scores, softmax and values (a prefill's many rows);
 * - split, for steps of up to ATTN_SPLIT_ROWS rows that would give the
 *   threads fewer tasks than there are threads (a decode step on many
 *   cores): four passes over the pool for all the rows together,
 *   1. scores: tasks over (KV head, chunk): the chunk's keys scored against
 *      every row and head of the group in one task;
 *   2. softmax: tasks over (row, head);
 *   3. values: tasks over (KV head, chunk): the chunk's values added into
 *      every row's and head's sum of the chunk in one task;
 *   4. the chunks' sums added: tasks over (row, head).
 * So a decode step reads its keys and values whole and in order, in KV heads
 * × chunks tasks. The way depends on the thread count; the bits do not. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "core/pool.h"
#include "kernels/kernels.h"

#define ATTN_HEADS 8       /* by rows: query heads per task (each key and value read once for them) */
#define ATTN_SPLIT_ROWS 4  /* split: at most this many rows */
#define ATTN_CHUNK 64      /* positions whose values are summed on their own: one dots call, one axpy call */

/* The chunks a row seeing `keys` keys spans, at most. */
static int64_t chunks_of(int64_t keys)
{
    return (keys + ATTN_CHUNK - 2) / ATTN_CHUNK + 1;
}

size_t kern_attn_scratch(int64_t N, int64_t Nq, int64_t keys, int64_t d, int threads)
{
    int64_t rows = (int64_t)threads * (ATTN_HEADS * keys + ATTN_CHUNK * d + ATTN_HEADS * d);
    int64_t n = N < ATTN_SPLIT_ROWS ? N : ATTN_SPLIT_ROWS; /* split: at most this many rows, fewer than threads */
    n = n < threads - 1 ? n : threads - 1;
    int64_t split = n * Nq * (keys + chunks_of(keys) * d) + (int64_t)threads * ATTN_CHUNK * d;
    return (size_t)(rows > split ? rows : split);
}

/* o[n] += c[n], element by element. */
static void add_floats(float *o, const float *c, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        o[i] += c[i];
}

/* The first position query row `row` sees (its last is pos[row]). */
static int64_t first_key(const struct kern_attn *a, int64_t row)
{
    const int64_t P = a->pos[row];
    return a->window && P - a->window + 1 > 0 ? P - a->window + 1 : 0;
}

/* Row `row`'s keys p0 .. p1 (the part of a chunk it sees) of KV head g
 * scored against heads q[nh, d], each key fetched once for all:
 * s[u·keys + p − p0] for head u, −inf for a key its mask hides. */
static void score_keys(const struct kern_table *t, const struct kern_attn *a, int64_t row, int64_t g, const float *q,
                       int nh, int64_t p0, int64_t p1, float *s, float *buf)
{
    const float *kv[ATTN_CHUNK];
    int at[ATTN_CHUNK], live = 0;
    for (int64_t p = p0; p <= p1; p++) {
        kv[live] = a->kv(a->ctx, row, p, g, 0, buf + (p - p0) * a->d);
        at[live] = (int)(p - p0);
        live += kv[live] != NULL;
    }
    t->dots(q, nh, kv, live, a->d, s, a->keys);                               /* q·k, scale 1.0 */
    for (int u = 0; live < p1 - p0 + 1 && u < nh; u++) {                      /* hidden keys: −inf */
        float *su = s + u * a->keys;
        for (int l = live - 1, p = (int)(p1 - p0); p >= 0; p--)
            su[p] = l >= 0 && at[l] == p ? su[l--] : -INFINITY;
    }
}

/* The same keys' values summed into heads' part[nh, d] from zero: w·v key
 * by key, w = s[u·keys + p − p0], each value fetched once for all the heads;
 * a value no head adds (KERN_WEIGHT_MIN) is not fetched. */
static void chunk_values(const struct kern_table *t, const struct kern_attn *a, int64_t row, int64_t g, int nh,
                         int64_t p0, int64_t p1, const float *s, float *part, float *buf)
{
    const float *x[ATTN_CHUNK];
    for (int64_t p = p0; p <= p1; p++) {
        bool used = false;
        for (int u = 0; u < nh; u++)
            used |= !(s[u * a->keys + p - p0] < KERN_WEIGHT_MIN);
        x[p - p0] = used ? a->kv(a->ctx, row, p, g, 1, buf + (p - p0) * a->d) : NULL; /* NULL: hidden */
    }
    memset(part, 0, (size_t)(nh * a->d) * sizeof *part);
    t->axpy(part, a->d, nh, s, a->keys, x, (int)(p1 - p0 + 1), a->d);
}

/* Row `row`'s keys in chunk c (positions c·ATTN_CHUNK ..): *p0 .. *p1, empty when *p0 > *p1. */
static void row_chunk(const struct kern_attn *a, int64_t row, int64_t c, int64_t *p0, int64_t *p1)
{
    const int64_t k0 = first_key(a, row), end = (c + 1) * ATTN_CHUNK - 1;
    *p0 = c * ATTN_CHUNK > k0 ? c * ATTN_CHUNK : k0;
    *p1 = end < a->pos[row] ? end : a->pos[row];
}

struct rows_job {
    const struct kern_table *t;
    const struct kern_attn *a;
    int64_t blocks;              /* head blocks per KV head: ceil(group / ATTN_HEADS) */
};

/* One query row and a block of heads sharing a KV head: softmax(q·K) · V
 * over the visible keys, chunk by chunk, for each head. */
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
    float *s = a->scratch + (size_t)worker * (ATTN_HEADS * a->keys + ATTN_CHUNK * d + ATTN_HEADS * d); /* [nh, keys] */
    float *buf = s + ATTN_HEADS * a->keys;                                 /* [ATTN_CHUNK, d] decoded keys or values */
    float *part = buf + ATTN_CHUNK * d;                                    /* [nh, d] a chunk's sums */
    int64_t p0, p1;
    for (int64_t c = k0 / ATTN_CHUNK; c <= P / ATTN_CHUNK; c++) {
        row_chunk(a, row, c, &p0, &p1);
        score_keys(j->t, a, row, g, q, nh, p0, p1, s + p0 - k0, buf);
    }
    for (int u = 0; u < nh; u++)
        j->t->softmax(s + u * a->keys, n); /* a hidden key's −inf: weight 0 */
    memset(o, 0, (size_t)(nh * d) * sizeof *o);
    for (int64_t c = k0 / ATTN_CHUNK; c <= P / ATTN_CHUNK; c++) {
        row_chunk(a, row, c, &p0, &p1);
        chunk_values(j->t, a, row, g, nh, p0, p1, s + p0 - k0, part, buf);
        add_floats(o, part, nh * d);
    }
}

struct split_job {
    const struct kern_table *t;
    const struct kern_attn *a;
    int64_t c0, chunks;       /* the chunks any of the step's rows sees: c0 .. c0 + chunks − 1 */
    int64_t nparts;           /* chunks a row spans, at most */
    float *s;                 /* [N, Nq, keys]: row r's head h scores of its keys k0(r) + i, then weights */
    float *parts;             /* [N, nparts, Nq, d]: row r's sums of its i-th chunk */
    float *buf;               /* [workers, ATTN_CHUNK, d] decoded keys or values */
};

/* Pass 1, task (g, c): each row's keys in chunk c0 + c against each head of group g. */
static void scores_task(void *arg, int64_t task, int worker)
{
    const struct split_job *j = arg;
    const struct kern_attn *a = j->a;
    const int64_t group = a->Nq / a->G, d = a->d, g = task / j->chunks, c = j->c0 + task % j->chunks;
    float *buf = j->buf + (size_t)worker * ATTN_CHUNK * d;                   /* [ATTN_CHUNK, d] */
    for (int64_t row = 0; row < a->N; row++) {
        int64_t p0, p1;
        row_chunk(a, row, c, &p0, &p1);
        if (p0 <= p1)
            score_keys(j->t, a, row, g, a->q + (row * a->Nq + g * group) * d, (int)group, p0, p1,
                       j->s + (row * a->Nq + g * group) * a->keys + p0 - first_key(a, row), buf);
    }
}

/* Pass 2, task (r, h): softmax over row r's keys for head h. */
static void softmax_task(void *arg, int64_t task, int worker)
{
    (void)worker;
    const struct split_job *j = arg;
    const struct kern_attn *a = j->a;
    const int64_t row = task / a->Nq, n = a->pos[row] - first_key(a, row) + 1;
    j->t->softmax(j->s + task * a->keys, n);
}

/* Pass 3, task (g, c): each row's sums of chunk c0 + c for the heads of group g. */
static void values_task(void *arg, int64_t task, int worker)
{
    const struct split_job *j = arg;
    const struct kern_attn *a = j->a;
    const int64_t group = a->Nq / a->G, d = a->d, g = task / j->chunks, c = j->c0 + task % j->chunks;
    float *buf = j->buf + (size_t)worker * ATTN_CHUNK * d;                   /* [ATTN_CHUNK, d] */
    for (int64_t row = 0; row < a->N; row++) {
        int64_t p0, p1;
        row_chunk(a, row, c, &p0, &p1);
        const int64_t k0 = first_key(a, row), i = c - k0 / ATTN_CHUNK; /* the row's i-th chunk */
        if (p0 <= p1)
            chunk_values(j->t, a, row, g, (int)group, p0, p1, j->s + (row * a->Nq + g * group) * a->keys + p0 - k0,
                         j->parts + ((row * j->nparts + i) * a->Nq + g * group) * d, buf);
    }
}

/* Pass 4, task (r, h): row r's output for head h, its chunks' sums added to zero in order. */
static void sum_task(void *arg, int64_t task, int worker)
{
    (void)worker;
    const struct split_job *j = arg;
    const struct kern_attn *a = j->a;
    const int64_t row = task / a->Nq, h = task % a->Nq, d = a->d, k0 = first_key(a, row);
    float *o = a->out + task * d;
    memset(o, 0, (size_t)d * sizeof *o);
    for (int64_t i = 0; i <= a->pos[row] / ATTN_CHUNK - k0 / ATTN_CHUNK; i++)
        add_floats(o, j->parts + ((row * j->nparts + i) * a->Nq + h) * d, d);
}

void kern_attention(const struct kern_table *t, const struct kern_attn *a, int threads)
{
    const int64_t group = a->Nq / a->G, blocks = (group + ATTN_HEADS - 1) / ATTN_HEADS;
    if (a->N > ATTN_SPLIT_ROWS || a->N * a->G * blocks >= threads) {
        struct rows_job j = {t, a, blocks};
        pool_run(threads, a->N * a->G * blocks, row_task, &j);
        return;
    }
    int64_t lo = INT64_MAX, hi = -1;
    for (int64_t row = 0; row < a->N; row++) {
        lo = first_key(a, row) < lo ? first_key(a, row) : lo;
        hi = a->pos[row] > hi ? a->pos[row] : hi;
    }
    const int64_t nparts = chunks_of(a->keys);
    struct split_job j = {.t = t, .a = a, .c0 = lo / ATTN_CHUNK, .chunks = hi / ATTN_CHUNK - lo / ATTN_CHUNK + 1,
                          .nparts = nparts, .s = a->scratch, .parts = a->scratch + a->N * a->Nq * a->keys,
                          .buf = a->scratch + a->N * a->Nq * (a->keys + nparts * a->d)};
    pool_run(threads, a->G * j.chunks, scores_task, &j);
    pool_run(threads, a->N * a->Nq, softmax_task, &j);
    pool_run(threads, a->G * j.chunks, values_task, &j);
    pool_run(threads, a->N * a->Nq, sum_task, &j);
}
