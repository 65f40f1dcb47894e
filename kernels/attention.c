/* attention.c - causal attention over keys and values a caller provides
 * (kernels.h). Built from the table's dot and axpy, whose every level gives
 * the same bits: with the scalar table this is the reference. */
#include <math.h>
#include <string.h>

#include "kernels/kernels.h"

struct attn_job {
    const struct kern_table *t;
    const struct kern_attn *a;
    int64_t blocks;              /* head blocks per KV head: ceil(group / KERN_ATTN_HEADS) */
};

/* One query row and a block of heads sharing a KV head: softmax(q·K) · V
 * over the visible keys, in position order, for each head. */
static void attn_task(void *arg, int64_t task, int worker)
{
    const struct attn_job *j = arg;
    const struct kern_attn *a = j->a;
    const dot_fn dot = j->t->dot;
    const axpy_fn axpy = j->t->axpy;
    const int64_t group = a->Nq / a->G, d = a->d, per_row = a->G * j->blocks; /* tasks of one query row */
    const int64_t row = task / per_row, g = task % per_row / j->blocks;
    const int64_t h0 = g * group + task % j->blocks * KERN_ATTN_HEADS, h1 = (g + 1) * group; /* g's heads end at h1 */
    const int nh = (int)(h1 - h0 < KERN_ATTN_HEADS ? h1 - h0 : KERN_ATTN_HEADS);
    const int64_t P = a->pos[row], k0 = a->window && P - a->window + 1 > 0 ? P - a->window + 1 : 0;
    const float *q = a->q + (row * a->Nq + h0) * d;                         /* [nh, d] */
    float *o = a->out + (row * a->Nq + h0) * d;                             /* [nh, d] */
    float *s = a->scratch + (size_t)worker * kern_attn_scratch(a->keys, d); /* [nh, keys] scores */
    float *buf = s + KERN_ATTN_HEADS * a->keys;                             /* [d] a decoded key or value */
    float m[KERN_ATTN_HEADS], sum[KERN_ATTN_HEADS];
    for (int u = 0; u < nh; u++)
        m[u] = -INFINITY;
    for (int64_t p = k0; p <= P; p++) {
        const float *k = a->kv(a->ctx, row, p, g, 0, buf);
        for (int u = 0; u < nh; u++) {
            float x = k ? dot(q + u * d, k, d) : -INFINITY; /* q·k, scale 1.0; a hidden key: -inf */
            s[u * a->keys + p - k0] = x;
            m[u] = fmaxf(m[u], x);
        }
    }
    for (int u = 0; u < nh; u++) {
        float *su = s + u * a->keys;
        sum[u] = 0.0f;
        for (int64_t p = k0; p <= P; p++) {
            su[p - k0] = su[p - k0] == -INFINITY ? 0.0f : kern_exp(su[p - k0] - m[u]);
            sum[u] += su[p - k0];
        }
    }
    memset(o, 0, (size_t)(nh * d) * sizeof *o);
    for (int64_t p = k0; p <= P; p++) {
        const float *v = NULL;
        for (int u = 0; u < nh; u++) {
            float w = s[u * a->keys + p - k0] / sum[u];
            if (w < 0x1p-100f) /* adds at most 2^-100·|v| per key; its w·v would be subnormal (slow) */
                continue;
            if (!v)
                v = a->kv(a->ctx, row, p, g, 1, buf);
            axpy(o + u * d, w, v, d); /* o += w·v */
        }
    }
}

void kern_attention(const struct kern_table *t, const struct kern_attn *a, int threads)
{
    const int64_t group = a->Nq / a->G;
    struct attn_job j = {t, a, (group + KERN_ATTN_HEADS - 1) / KERN_ATTN_HEADS};
    pool_run(threads, a->N * a->G * j.blocks, attn_task, &j);
}
