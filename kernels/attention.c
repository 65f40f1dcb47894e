/* attention.c - causal attention over keys and values a caller provides
 * (kernels.h). Built from the table's dots and axpy, whose every level gives
 * the same bits: with the scalar table this is the reference. */
#include <math.h>
#include <string.h>

#include "kernels/kernels.h"

/* Query heads per task (the heads of one KV head read each key and value
 * once for all of them; every head's arithmetic is the same as alone), and
 * keys per block (scored against a head with one dots call, its values
 * added with one axpy call). */
#define KERN_ATTN_HEADS 4
#define KERN_ATTN_KEYS 16

size_t kern_attn_scratch(int64_t keys, int64_t d)
{
    return (size_t)(KERN_ATTN_HEADS * keys + KERN_ATTN_KEYS * d);
}

struct attn_job {
    const struct kern_table *t;
    const struct kern_attn *a;
    int64_t blocks;              /* head blocks per KV head: ceil(group / KERN_ATTN_HEADS) */
};

/* One query row and a block of heads sharing a KV head: softmax(q·K) · V
 * over the visible keys, in position order, for each head; keys and values
 * in blocks of KERN_ATTN_KEYS. */
static void attn_task(void *arg, int64_t task, int worker)
{
    const struct attn_job *j = arg;
    const struct kern_attn *a = j->a;
    const int64_t group = a->Nq / a->G, d = a->d, per_row = a->G * j->blocks; /* tasks of one query row */
    const int64_t row = task / per_row, g = task % per_row / j->blocks;
    const int64_t h0 = g * group + task % j->blocks * KERN_ATTN_HEADS, h1 = (g + 1) * group; /* g's heads end at h1 */
    const int nh = (int)(h1 - h0 < KERN_ATTN_HEADS ? h1 - h0 : KERN_ATTN_HEADS);
    const int64_t P = a->pos[row], k0 = a->window && P - a->window + 1 > 0 ? P - a->window + 1 : 0;
    const int64_t n = P - k0 + 1;                                           /* keys k0 .. P */
    const float *q = a->q + (row * a->Nq + h0) * d;                         /* [nh, d] */
    float *o = a->out + (row * a->Nq + h0) * d;                             /* [nh, d] */
    float *s = a->scratch + (size_t)worker * kern_attn_scratch(a->keys, d); /* [nh, keys] scores, then weights */
    float *buf = s + KERN_ATTN_HEADS * a->keys;                             /* [KERN_ATTN_KEYS, d] decoded keys or values */
    const float *kv[KERN_ATTN_KEYS], *x[KERN_ATTN_KEYS];
    float w[KERN_ATTN_KEYS];
    int at[KERN_ATTN_KEYS];
    for (int64_t b = 0; b < n; b += KERN_ATTN_KEYS) {
        const int nb = (int)(n - b < KERN_ATTN_KEYS ? n - b : KERN_ATTN_KEYS);
        int live = 0;
        for (int i = 0; i < nb; i++) {
            kv[live] = a->kv(a->ctx, row, k0 + b + i, g, 0, buf + i * d);
            at[live] = i;
            if (kv[live])
                live++;
            else
                for (int u = 0; u < nh; u++)
                    s[u * a->keys + b + i] = -INFINITY;                     /* a hidden key: -inf */
        }
        for (int u = 0; u < nh; u++) {
            j->t->dots(q + u * d, kv, live, d, w);                          /* q·k, scale 1.0 */
            for (int l = 0; l < live; l++)
                s[u * a->keys + b + at[l]] = w[l];
        }
    }
    for (int u = 0; u < nh; u++) {
        float *su = s + u * a->keys, m = -INFINITY, sum = 0.0f;
        for (int64_t p = 0; p < n; p++)
            m = su[p] > m ? su[p] : m; /* fmaxf's max: a NaN score is passed over */
        for (int64_t p = 0; p < n; p++) {
            su[p] = su[p] == -INFINITY ? 0.0f : kern_exp(su[p] - m);
            sum += su[p];
        }
        for (int64_t p = 0; p < n; p++)
            su[p] /= sum;
    }
    memset(o, 0, (size_t)(nh * d) * sizeof *o);
    for (int64_t b = 0; b < n; b += KERN_ATTN_KEYS) {
        const int nb = (int)(n - b < KERN_ATTN_KEYS ? n - b : KERN_ATTN_KEYS);
        for (int i = 0; i < nb; i++) { /* a weight below 2^-100 adds at most 2^-100·|v|; its w·v would be subnormal (slow) */
            bool used = false;
            for (int u = 0; u < nh; u++)
                used |= !(s[u * a->keys + b + i] < 0x1p-100f);
            kv[i] = used ? a->kv(a->ctx, row, k0 + b + i, g, 1, buf + i * d) : NULL;
        }
        for (int u = 0; u < nh; u++) {
            int m = 0;
            for (int i = 0; i < nb; i++)
                if (kv[i] && !(s[u * a->keys + b + i] < 0x1p-100f)) { /* kv[i] NULL: hidden (a weight of NaN scores) */
                    w[m] = s[u * a->keys + b + i];
                    x[m++] = kv[i];
                }
            j->t->axpy(o + u * d, w, x, m, d); /* o += w·v, key by key */
        }
    }
}

void kern_attention(const struct kern_table *t, const struct kern_attn *a, int threads)
{
    const int64_t group = a->Nq / a->G;
    struct attn_job j = {t, a, (group + KERN_ATTN_HEADS - 1) / KERN_ATTN_HEADS};
    pool_run(threads, a->N * a->G * j.blocks, attn_task, &j);
}
