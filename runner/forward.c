/* forward.c - gemma4-architecture.md §3, step by step.
 * Activations are fp32 row-major [N, width], the N tokens of all items of a
 * step one after the other; weights stay in their stored form
 * (kernels/kernels.h). Constants √H, H^-½, √P and 2^-½ are exact fp32. */
#include "runner/forward.h"

#include <malloc.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- setup ---- */

int kv_opts_validate(const struct kv_opts *o, struct err *e)
{
    if (o->bits != 0 && o->bits != 4 && o->bits != 8)
        return err_set(e, ERR_USAGE, "--kv-bits %d: accepted values are 4 and 8", o->bits);
    if (o->group_size != 32 && o->group_size != 64 && o->group_size != 128)
        return err_set(e, ERR_USAGE, "--kv-group-size %d: accepted values are 32, 64 and 128", o->group_size);
    if (o->start < 0)
        return err_set(e, ERR_USAGE, "--kv-start %lld: expected a non-negative position", (long long)o->start);
    return ERR_OK;
}

static double *rope_table(const struct cfg_rope *rp, int64_t d)
{
    double *f = calloc((size_t)(d / 2), sizeof *f);
    if (!f)
        return NULL;
    /* default: every pair rotates; proportional: the first ⌊partial·d/2⌋ pairs,
     * exponent over the FULL head dim, divided by `factor` (§3.1.4) */
    int64_t rotated = rp->kind == ROPE_PROPORTIONAL ? (int64_t)floor(rp->partial * (double)d / 2.0) : d / 2;
    double factor = rp->kind == ROPE_PROPORTIONAL ? rp->factor : 1.0;
    for (int64_t i = 0; i < rotated && i < d / 2; i++)
        f[i] = pow(rp->theta, -2.0 * (double)i / (double)d) / factor;
    return f;
}

/* Entry format of layer i's cache under the runner's KV options. */
static void layer_fmt(const struct runner *r, int64_t i, struct kv_fmt *f)
{
    const struct cfg_layer *ly = &r->m->cfg.layers[i];
    int bits = (int)i == r->kv_float_layer ? 0 : r->kv.bits;
    int gs = r->kv.group_size < ly->head_dim ? r->kv.group_size : (int)ly->head_dim; /* groups stay within a head */
    kv_fmt_init(f, ly->kv_heads, ly->head_dim, bits, gs, r->kv.start);
}

static int init(struct runner *r, const struct model *m, int threads, enum kern_level level, const struct kv_opts *kv,
                int n_seq, struct err *e)
{
    memset(r, 0, sizeof *r);
    mallopt(M_MMAP_THRESHOLD, 32 << 20); /* glibc's largest; buffers above it are still mapped per use */
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
    r->m = m;
    r->threads = threads < 1 ? 1 : threads;
    r->kv = kv ? *kv : (struct kv_opts){.group_size = 64};
    kern_init(&r->kt, level);
    const struct gp_config *c = &m->cfg;
    int rc = kv_opts_validate(&r->kv, e);
    if (rc != ERR_OK)
        return rc;
    r->kv_float_layer = -1;
    for (int64_t i = 0; r->kv.skip_last_full && r->kv.bits && i < c->first_shared; i++)
        if (c->layers[i].type == LT_FULL)
            r->kv_float_layer = (int)i; /* the source of every KV-shared full-attention layer */
    for (int64_t i = 0; r->kv.bits && i < c->first_shared; i++) {
        int64_t d = c->layers[i].head_dim, gs = r->kv.group_size < d ? r->kv.group_size : d;
        if ((gs != 32 && gs != 64 && gs != 128) || d % gs)
            return err_set(e, ERR_UNSUPPORTED, "--kv-group-size %d: layer %lld's head dim %lld has no MLX group size "
                                               "(32, 64, 128) that divides it",
                           r->kv.group_size, (long long)i, (long long)d);
    }
    r->seq = calloc((size_t)(n_seq > 0 ? n_seq : 1), sizeof *r->seq);
    if (!r->seq)
        return err_set(e, ERR_NOMEM, "cannot allocate %d sequences", n_seq);
    r->n_seq = n_seq;
    for (int s = 0; s < n_seq; s++) {
        r->seq[s].cache = calloc((size_t)c->n_layers, sizeof *r->seq[s].cache);
        if (!r->seq[s].cache)
            return err_set(e, ERR_NOMEM, "cannot allocate caches");
        for (int64_t i = 0; i < c->n_layers; i++) {
            if (c->layers[i].shared)
                continue;
            struct kv_fmt f;
            layer_fmt(r, i, &f);
            rc = kv_cache_init(&r->seq[s].cache[i], &f, c->layers[i].type == LT_SLIDING, c->sliding_window, e);
            if (rc != ERR_OK)
                return rc;
        }
    }
    for (int t = 0; t < 2; t++) {
        int64_t d = 0;
        for (int64_t i = 0; i < c->n_layers; i++)
            if ((int)c->layers[i].type == t)
                d = c->layers[i].head_dim;
        if (d && !(r->inv_freq[t] = rope_table(&c->rope[t], d)))
            return err_set(e, ERR_NOMEM, "cannot allocate RoPE tables");
        r->rope_dim[t] = d;
    }
    return ERR_OK;
}

int runner_init(struct runner *r, const struct model *m, int threads, enum kern_level level,
                const struct kv_opts *kv, int n_seq, struct err *e)
{
    int rc = init(r, m, threads, level, kv, n_seq, e);
    return rc == ERR_OK ? rc : err_prefix(e, "%s", model_name(m));
}

void runner_reset(struct runner *r, int seq)
{
    r->seq[seq].pos = 0;
}

void runner_free(struct runner *r)
{
    if (!r)
        return;
    for (int s = 0; r->seq && s < r->n_seq; s++) {
        for (int64_t i = 0; r->seq[s].cache && i < r->m->cfg.n_layers; i++)
            kv_cache_free(&r->seq[s].cache[i]);
        free(r->seq[s].cache);
    }
    free(r->seq);
    free(r->inv_freq[0]);
    free(r->inv_freq[1]);
    kern_free(&r->kt);
    memset(r, 0, sizeof *r);
}

size_t runner_cache_bytes(const struct runner *r, int seq)
{
    size_t b = 0;
    for (int64_t i = 0; i < r->m->cfg.n_layers; i++)
        if (!r->m->cfg.layers[i].shared)
            b += kv_cache_bytes(&r->seq[seq].cache[i]);
    return b;
}

/* ---- one step ---- */

/* A step: the items' tokens are rows off..off+n-1 of every activation. */
struct step_item {
    struct seq_state *s;
    int64_t off, n, p0;
    const uint8_t *key_mask;
    struct kv_rows *pending;     /* [L]: this chunk's entries of each KV-owning layer */
};

struct fwd {
    struct runner *r;
    struct step_item *it;
    int n_items;
    int64_t N;                   /* tokens in the step */
    float *rope_cs[2];           /* per layer type with RoPE: [N, d/2, 2] each token's cos, sin */
};

/* ---- the next matrix job's weights ---- */

/* A job names the matrices of the next matrix job, so that a thread left
 * without tasks warms its share of them (kern_parallel_next). Planned for
 * the step's n tokens: the tied head runs on fewer rows in a prompt, where
 * the plan is only roughly its split (a hint; no result depends on it). */
static const struct kern_ahead *ahead(const struct runner *r, int count, const struct wmat *const w[], int64_t n,
                                      struct kern_ahead *plan)
{
    kern_matmul_ahead(&r->kt, count, w, n, r->threads, plan);
    return plan;
}

/* Layer i's first matrices: q, then k and v unless the layer reads another's
 * cache (k alone when V = K). */
static int qkv_weights(const struct runner *r, int64_t i, const struct wmat *w[3])
{
    const struct cfg_layer *ly = &r->m->cfg.layers[i];
    const struct layer_weights *L = &r->m->layers[i];
    w[0] = &L->q;
    w[1] = &L->k;
    w[2] = &L->v;
    return ly->shared ? 1 : ly->k_eq_v ? 2 : 3;
}

/* The plan of layer i's first job, or of the tied head's when i is past the last layer. */
static const struct kern_ahead *layer_ahead(const struct runner *r, int64_t i, int64_t n, struct kern_ahead *plan)
{
    const struct wmat *w[3] = {&r->m->embed};
    int count = i < r->m->cfg.n_layers ? qkv_weights(r, i, w) : 1;
    return ahead(r, count, w, n, plan);
}

/* ---- attention ---- */

/* Keys and values one item's queries of a layer see: the source layer's
 * cache (positions < p0) and its entries of the current chunk. */
struct attn_job {
    const struct fwd *f;
    const float *q;              /* [N, Nq, d] after norm and RoPE */
    float *out;                  /* [N, Nq, d] */
    int src;                     /* the layer whose entries are read */
    int64_t Nq, d, group, window; /* window 0: full attention */
    int64_t blocks;              /* head blocks per KV head: ceil(group / ATTN_HEADS) */
    float *scratch;              /* per worker: stride floats (ATTN_HEADS score rows of `keys`, a decoded key or value) */
    int64_t keys, stride;
};

/* Query heads of one KV head handled by one task: each key and value row is
 * read once for all of them. Every head's arithmetic is the same as alone. */
#define ATTN_HEADS 4

/* Entries ahead of the one in use whose key and value are prefetched: the
 * cache's entries come from RAM (the weights streamed since evicted them),
 * and without it a task waited on each one in turn (E2B 8-bit decode, ~46
 * keys: 24-28 -> 12-16 us a task; 2, 4 and 8 ahead the same). */
#define ATTN_AHEAD 4

/* The rows holding position p as item `it` sees it, and its slot there: the
 * source layer's cache before p0, the chunk's pending entries from p0. */
static const struct kv_rows *kv_where(const struct step_item *it, const struct kv_cache *cache,
                                      const struct kv_rows *pend, int64_t p, int64_t *slot)
{
    *slot = p < it->p0 ? kv_cache_slot(cache, p) : p - it->p0;
    return p < it->p0 ? &cache->rows : pend;
}

/* Head g's key (which 0) or value (1) at position p. */
static const float *kv_at(const struct step_item *it, const struct kv_cache *cache, const struct kv_rows *pend,
                          int64_t p, int64_t g, int which, float *buf)
{
    int64_t slot;
    const struct kv_rows *rows = kv_where(it, cache, pend, p, &slot);
    return kv_rows_head(&cache->fmt, rows, slot, p, g, which, buf);
}

/* kv_at's bytes of key and value, asked for ahead of use. */
static void kv_ahead(const struct step_item *it, const struct kv_cache *cache, const struct kv_rows *pend, int64_t p,
                     int64_t g)
{
    int64_t slot;
    const struct kv_rows *rows = kv_where(it, cache, pend, p, &slot);
    for (int which = 0; which < 2; which++)
        kv_rows_prefetch(&cache->fmt, rows, slot, p, g, which);
}

/* One token and a block of heads sharing a KV head: softmax(q·K) · V over
 * the visible keys, in position order, for each head. */
static void attn_task(void *arg, int64_t task, int worker)
{
    const struct attn_job *j = arg;
    const struct fwd *f = j->f;
    const dot_fn dot = f->r->kt.dot;
    const axpy_fn axpy = f->r->kt.axpy;
    int64_t per_row = j->Nq / j->group * j->blocks; /* tasks of one token: KV heads × head blocks */
    int64_t row = task / per_row, g = task % per_row / j->blocks, d = j->d;
    int64_t h0 = g * j->group + task % j->blocks * ATTN_HEADS, h1 = (g + 1) * j->group; /* g's heads end at h1 */
    int nh = (int)(h1 - h0 < ATTN_HEADS ? h1 - h0 : ATTN_HEADS);
    const struct step_item *it = f->it;
    while (row >= it->off + it->n)
        it++;
    int64_t t = row - it->off, P = it->p0 + t;
    int64_t k0 = j->window ? (P - j->window + 1 > 0 ? P - j->window + 1 : 0) : 0;
    const struct kv_cache *cache = &it->s->cache[j->src];
    const struct kv_rows *pend = &it->pending[j->src];
    const float *q = j->q + (row * j->Nq + h0) * d;          /* [nh, d] */
    float *o = j->out + (row * j->Nq + h0) * d;              /* [nh, d] */
    float *s = j->scratch + worker * j->stride;              /* [nh, keys] scores */
    float *buf = s + ATTN_HEADS * j->keys;                   /* [d] a decoded key or value */
    float m[ATTN_HEADS], sum[ATTN_HEADS];
    for (int u = 0; u < nh; u++)
        m[u] = -INFINITY;
    for (int64_t p = k0; p <= P && p < k0 + ATTN_AHEAD; p++)
        kv_ahead(it, cache, pend, p, g);
    for (int64_t p = k0; p <= P; p++) {
        if (p + ATTN_AHEAD <= P)
            kv_ahead(it, cache, pend, p + ATTN_AHEAD, g); /* the values are read in the last loop below */
        if (it->key_mask && !it->key_mask[t * (it->p0 + it->n) + p]) {
            for (int u = 0; u < nh; u++)
                s[u * j->keys + p - k0] = -INFINITY;
            continue;
        }
        const float *k = kv_at(it, cache, pend, p, g, 0, buf);
        for (int u = 0; u < nh; u++) {
            float x = dot(q + u * d, k, d); /* q·k, scale 1.0 (§3.5) */
            s[u * j->keys + p - k0] = x;
            m[u] = fmaxf(m[u], x);
        }
    }
    for (int u = 0; u < nh; u++) {
        float *su = s + u * j->keys;
        sum[u] = 0.0f;
        for (int64_t p = k0; p <= P; p++) {
            su[p - k0] = su[p - k0] == -INFINITY ? 0.0f : expf(su[p - k0] - m[u]);
            sum[u] += su[p - k0];
        }
    }
    memset(o, 0, (size_t)(nh * d) * sizeof *o);
    for (int64_t p = k0; p <= P; p++) {
        const float *v = NULL;
        for (int u = 0; u < nh; u++) {
            float w = s[u * j->keys + p - k0] / sum[u];
            if (w < 0x1p-100f) /* adds at most 2^-100·|v| per key; its w·v would be subnormal (slow) */
                continue;
            if (!v)
                v = kv_at(it, cache, pend, p, g, 1, buf);
            axpy(o + u * d, w, v, d); /* o += w·v */
        }
    }
}

/* Per-head RMSNorm (weighted or not) and optional RoPE of x[N, heads, d]. */
static void heads_norm_rope(const struct fwd *f, float *x, int64_t heads, int64_t d, const float *w, float eps,
                            const double *inv_freq, const float *cs)
{
    for (int64_t t = 0; t < f->N; t++)
        for (int64_t h = 0; h < heads; h++) {
            float *v = x + (t * heads + h) * d;
            kern_rmsnorm(f->r->kt.dot, v, v, w, d, eps);
            if (inv_freq)
                kern_rope(v, d, inv_freq, cs + t * d);
        }
}

/* §3.5: a[N, H] -> attention output [N, H]. */
static int attention(struct fwd *f, int64_t i, float *a, struct err *e)
{
    struct runner *r = f->r;
    const struct gp_config *c = &r->m->cfg;
    const struct cfg_layer *ly = &c->layers[i];
    const struct layer_weights *L = &r->m->layers[i];
    int64_t N = f->N, Nq = c->n_heads, d = ly->head_dim, G = ly->kv_heads;
    float eps = (float)c->rms_eps;
    const double *rope = r->inv_freq[ly->type];
    const float *cs = f->rope_cs[ly->type];
    float *q = malloc((size_t)(N * Nq * d) * sizeof *q);       /* [N, Nq, d] */
    float *o = malloc((size_t)(N * Nq * d) * sizeof *o);       /* [N, Nq, d] */
    float *k = malloc((size_t)(N * G * d) * sizeof *k);        /* [N, G, d] */
    float *v = malloc((size_t)(N * G * d) * sizeof *v);        /* [N, G, d] */
    int rc = q && o && k && v ? ERR_OK : err_set(e, ERR_NOMEM, "attention buffers");
    struct kern_ahead to_o;                                    /* the q/k/v and attention jobs are followed by o */
    const struct wmat *wo = &L->o;
    ahead(r, 1, &wo, N, &to_o);
    if (rc == ERR_OK) {
        const struct wmat *w[3];
        float *y[3] = {q, k, v};
        int count = qkv_weights(r, i, w);
        kern_matmul_many_next(&r->kt, count, w, y, a, N, r->threads, &to_o); /* Q, K_raw, V_raw = a·W{q,k,v}ᵀ */
        heads_norm_rope(f, q, Nq, d, L->q_norm, eps, rope, cs);          /* q_norm, RoPE */
    }
    if (rc == ERR_OK && !ly->shared) {
        if (ly->k_eq_v)
            memcpy(v, k, (size_t)(N * G * d) * sizeof *v);               /* V_raw = K_raw (k_eq_v) */
        heads_norm_rope(f, k, G, d, L->k_norm, eps, rope, cs);           /* k_norm, RoPE */
        heads_norm_rope(f, v, G, d, NULL, eps, NULL, NULL);              /* v_norm (no weight, no RoPE) */
        for (int b = 0; b < f->n_items && rc == ERR_OK; b++) {           /* the chunk's entries, as stored */
            struct step_item *it = &f->it[b];
            const struct kv_fmt *fmt = &it->s->cache[i].fmt;
            if ((rc = kv_rows_alloc(fmt, &it->pending[i], it->n, e)) != ERR_OK)
                break;
            for (int64_t t = 0; t < it->n; t++)
                kv_rows_put(fmt, &it->pending[i], t, it->p0 + t, k + (it->off + t) * G * d, v + (it->off + t) * G * d);
        }
    }
    int64_t keys = 0; /* most keys a query sees */
    for (int b = 0; b < f->n_items; b++)
        keys = f->it[b].p0 + f->it[b].n > keys ? f->it[b].p0 + f->it[b].n : keys;
    int64_t group = Nq / G, blocks = (group + ATTN_HEADS - 1) / ATTN_HEADS, tasks = N * G * blocks;
    int workers = kern_workers(r->threads, tasks);
    float *scratch = rc == ERR_OK ? malloc((size_t)(workers * (ATTN_HEADS * keys + d)) * sizeof *scratch) : NULL;
    if (rc == ERR_OK && !scratch)
        rc = err_set(e, ERR_NOMEM, "attention scratch for %lld keys", (long long)keys);
    if (rc == ERR_OK) {
        struct attn_job j = {.f = f, .q = q, .out = o, .src = ly->kv_src, .Nq = Nq, .d = d, .group = group,
                             .window = ly->type == LT_SLIDING ? c->sliding_window : 0, .blocks = blocks,
                             .scratch = scratch, .keys = keys, .stride = ATTN_HEADS * keys + d};
        kern_parallel_next(workers, tasks, attn_task, &j, &to_o);       /* softmax(Q·Kᵀ)·V per head */
        const struct wmat *gu[2] = {&L->gate, &L->up};
        struct kern_ahead to_mlp;
        kern_matmul_next(&r->kt, &L->o, o, N, a, r->threads, ahead(r, 2, gu, N, &to_mlp)); /* a = O·Woᵀ */
    }
    free(scratch);
    free(q);
    free(o);
    free(k);
    free(v);
    return rc;
}

/* ---- feed-forward ---- */

/* Element-wise passes in tasks of EW_TASK elements: a decode step's MLP
 * GELU is one task, while its 262,144 soft-capped logits (and a prefill's
 * millions of elements) are spread over the threads, each taking about the
 * logits its share of the head's tiles wrote (kern_parallel's shares). */
#define EW_TASK 16384

struct ew_job {
    gelu_mul_fn gelu_mul;        /* x = gelu(x)·u; when NULL: */
    softcap_fn softcap;          /* x = cap·tanh(x/cap) */
    float *x;
    const float *u;
    float cap;
    int64_t n;
};

static void ew_task(void *arg, int64_t task, int worker)
{
    (void)worker;
    const struct ew_job *j = arg;
    int64_t k0 = task * EW_TASK, k1 = k0 + EW_TASK < j->n ? k0 + EW_TASK : j->n;
    if (j->gelu_mul)
        j->gelu_mul(j->x + k0, j->u + k0, k1 - k0);
    else
        j->softcap(j->x + k0, j->cap, k1 - k0);
}

static void elementwise(const struct runner *r, struct ew_job *j, const struct kern_ahead *next)
{
    kern_parallel_next(r->threads, (j->n + EW_TASK - 1) / EW_TASK, ew_task, j, next);
}

/* §3.7: out[n, H] = (gelu(z·Wgᵀ) ⊙ z·Wuᵀ)·Wdᵀ; `next`: the plan of the job after it. */
static int mlp(struct runner *r, const struct wmat *wg, const struct wmat *wu, const struct wmat *wd, const float *z,
               int64_t n, float *out, const struct kern_ahead *next, struct err *e)
{
    int64_t I = wg->rows;
    float *g = malloc((size_t)(n * I) * sizeof *g), *u = malloc((size_t)(n * I) * sizeof *u);
    if (!g || !u) {
        free(g);
        free(u);
        return err_set(e, ERR_NOMEM, "MLP buffers");
    }
    const struct wmat *w[2] = {wg, wu};
    float *y[2] = {g, u};
    struct kern_ahead to_down;
    ahead(r, 1, &wd, n, &to_down);
    kern_matmul_many_next(&r->kt, 2, w, y, z, n, r->threads, &to_down); /* g[n, I] = z·Wgᵀ, u[n, I] = z·Wuᵀ */
    struct ew_job gelu = {.gelu_mul = r->kt.gelu_mul, .x = g, .u = u, .n = n * I};
    elementwise(r, &gelu, &to_down);                                     /* g = gelu(g)·u */
    kern_matmul_next(&r->kt, wd, g, n, out, r->threads, next);           /* out = g·Wdᵀ */
    free(g);
    free(u);
    return ERR_OK;
}

/* §3.8: routed experts of one token: out[H] = Σ_k w_k · expert_{e_k}(y). */
static int moe_token(struct runner *r, const struct layer_weights *L, const float *resid, const float *y, float *out,
                     struct err *e)
{
    const struct gp_config *c = &r->m->cfg;
    int64_t H = c->hidden_size, E = c->n_experts, K = c->top_k;
    float *z = malloc((size_t)(H + E + K) * sizeof *z);     /* [H] normed input, [E] logits, [K] weights */
    int64_t *top = malloc((size_t)K * sizeof *top);          /* [K] chosen experts */
    uint8_t *taken = calloc((size_t)E, 1);                  /* [E] */
    float *eo = malloc((size_t)H * sizeof *eo);             /* [H] one expert's output */
    int rc = z && top && taken && eo ? ERR_OK : err_set(e, ERR_NOMEM, "router buffers");
    float *logit = rc == ERR_OK ? z + H : NULL, *w = rc == ERR_OK ? z + H + E : NULL, sum = 0.0f;
    if (rc == ERR_OK) {
        /* router: unweighted RMSNorm × scale × H^-½, logits, softmax over all experts */
        kern_rmsnorm(r->kt.dot, z, resid, NULL, H, (float)c->rms_eps);
        float hs = (float)(1.0 / sqrt((double)H));
        for (int64_t k = 0; k < H; k++)
            z[k] = z[k] * L->router_scale[k] * hs;
        kern_matmul(&r->kt, &L->router, z, 1, logit, 1);
        kern_softmax(logit, E);
        /* top-k by probability (ties: lower expert index), renormalized, × per_expert_scale */
        for (int64_t k = 0; k < K; k++) {
            int64_t best = -1;
            for (int64_t x = 0; x < E; x++)
                if (!taken[x] && (best < 0 || logit[x] > logit[best]))
                    best = x;
            taken[best] = 1;
            top[k] = best;
            w[k] = logit[best];
            sum += w[k];
        }
        memset(out, 0, (size_t)H * sizeof *out);
    }
    for (int64_t k = 0; k < K && rc == ERR_OK; k++) {
        float wk = w[k] / sum * L->per_expert_scale[top[k]];
        struct wmat g = kern_wmat_expert(&L->ex_gate, top[k]), u = kern_wmat_expert(&L->ex_up, top[k]),
                    dn = kern_wmat_expert(&L->ex_down, top[k]);
        rc = mlp(r, &g, &u, &dn, y, 1, eo, NULL, e);
        for (int64_t x = 0; rc == ERR_OK && x < H; x++)
            out[x] += wk * eo[x];
    }
    free(top);
    free(taken);
    free(eo);
    free(z);
    return rc;
}

/* §3.4 step 5-6: f[n, H] from the post-attention residual x[n, H]. */
static int feed_forward(struct runner *r, int64_t i, const float *x, int64_t n, float *f, struct err *e)
{
    const struct gp_config *c = &r->m->cfg;
    const struct layer_weights *L = &r->m->layers[i];
    int64_t H = c->hidden_size;
    float eps = (float)c->rms_eps;
    float *z = malloc((size_t)(n * H) * sizeof *z);      /* [n, H] */
    if (!z)
        return err_set(e, ERR_NOMEM, "feed-forward buffers");
    for (int64_t t = 0; t < n; t++)
        kern_rmsnorm(r->kt.dot, z + t * H, x + t * H, L->ln_pre_ff, H, eps); /* pre_feedforward_layernorm */
    struct kern_ahead after; /* after the MLP: the per-layer input gate or the next layer (the router: none) */
    const struct wmat *ple_gate = &L->ple_gate;
    const struct kern_ahead *next = c->moe ? NULL : c->ple_dim ? ahead(r, 1, &ple_gate, n, &after)
                                                               : layer_ahead(r, i + 1, n, &after);
    int rc = mlp(r, &L->gate, &L->up, &L->down, z, n, f, next, e);      /* dense MLP */
    if (rc == ERR_OK && c->moe) {
        float *f2 = malloc((size_t)H * sizeof *f2);
        for (int64_t t = 0; t < n && rc == ERR_OK; t++) {
            if (!f2) {
                rc = err_set(e, ERR_NOMEM, "MoE buffer");
                break;
            }
            kern_rmsnorm(r->kt.dot, f + t * H, f + t * H, L->ln_post_ff1, H, eps); /* dense branch post-norm */
            kern_rmsnorm(r->kt.dot, z + t * H, x + t * H, L->ln_pre_ff2, H, eps); /* experts' pre-norm */
            rc = moe_token(r, L, x + t * H, z + t * H, f2, e);            /* routed experts */
            kern_rmsnorm(r->kt.dot, f2, f2, L->ln_post_ff2, H, eps);       /* expert branch post-norm */
            for (int64_t k = 0; k < H; k++)
                f[t * H + k] += f2[k];
        }
        free(f2);
    }
    for (int64_t t = 0; t < n; t++)
        kern_rmsnorm(r->kt.dot, f + t * H, f + t * H, L->ln_post_ff, H, eps); /* post_feedforward_layernorm */
    free(z);
    return rc;
}

/* ---- per-layer inputs ---- */

/* §3.3: ple[n, L, P] = (RMSNorm_w(h0·Wᵀ · H^-½ per slice) + E_ple[t]·√P) · 2^-½ */
static int per_layer_inputs(struct runner *r, const int32_t *tokens, const float *h0, int64_t n, float *ple,
                            struct err *e)
{
    const struct model *m = r->m;
    const struct gp_config *c = &m->cfg;
    int64_t L = c->n_layers, P = c->ple_dim, H = c->hidden_size;
    float *tok = malloc((size_t)(L * P) * sizeof *tok);
    if (!tok)
        return err_set(e, ERR_NOMEM, "PLE buffer");
    struct kern_ahead next;                                              /* then layer 0 */
    kern_matmul_next(&r->kt, &m->ple_model_proj, h0, n, ple, r->threads,
                     layer_ahead(r, 0, n, &next));                       /* context part [n, L·P] */
    float hs = (float)(1.0 / sqrt((double)H)), sp = sqrtf((float)P), r2 = (float)(1.0 / sqrt(2.0));
    for (int64_t t = 0; t < n; t++) {
        kern_row_f32(&m->ple_embed, tokens[t], tok);                    /* token part */
        for (int64_t l = 0; l < L; l++) {
            float *s = ple + (t * L + l) * P;
            for (int64_t k = 0; k < P; k++)
                s[k] *= hs;
            kern_rmsnorm(r->kt.dot, s, s, m->ple_proj_norm, P, (float)c->rms_eps);
            for (int64_t k = 0; k < P; k++)
                s[k] = (s[k] + tok[l * P + k] * sp) * r2;
        }
    }
    free(tok);
    return ERR_OK;
}

/* ---- the forward pass ---- */

static int check_tokens(const struct gp_config *c, const int32_t *tokens, int64_t n, struct err *e)
{
    int64_t limit = c->ple_dim && c->ple_vocab < c->vocab_size ? c->ple_vocab : c->vocab_size;
    for (int64_t t = 0; t < n; t++)
        if (tokens[t] < 0 || tokens[t] >= limit)
            return err_set(e, ERR_RANGE, "token %d at index %lld is outside [0, %lld) (vocab_size %lld%s)", tokens[t],
                           (long long)t, (long long)limit, (long long)c->vocab_size,
                           limit < c->vocab_size ? ", and the per-layer-input table is smaller" : "");
    return ERR_OK;
}

/* Appends each item's chunk entries to its sequence's caches (§4). */
static int commit(struct fwd *f, struct err *e)
{
    const struct gp_config *c = &f->r->m->cfg;
    for (int b = 0; b < f->n_items; b++) {
        struct step_item *it = &f->it[b];
        for (int64_t i = 0; i < c->n_layers; i++) {
            struct kv_cache *kc = &it->s->cache[i];
            if (c->layers[i].shared)
                continue;
            int rc = kv_cache_reserve(kc, it->p0 + it->n, e);
            if (rc != ERR_OK)
                return rc;
            for (int64_t t = 0; t < it->n; t++)
                kv_rows_copy(&kc->fmt, &kc->rows, kv_cache_slot(kc, it->p0 + t), &it->pending[i], t, it->p0 + t);
        }
        it->s->pos = it->p0 + it->n;
    }
    return ERR_OK;
}

static int step(struct runner *r, const struct runner_item *items, int n_items, float *logits, bool all_rows,
                struct err *e)
{
    const struct model *m = r->m;
    const struct gp_config *c = &m->cfg;
    int64_t H = c->hidden_size, V = c->vocab_size, Lc = c->n_layers, N = 0;
    float eps = (float)c->rms_eps;
    struct fwd f = {.r = r, .it = calloc((size_t)(n_items > 0 ? n_items : 1), sizeof *f.it), .n_items = n_items};
    int32_t *tokens = NULL;
    float *x = NULL, *a = NULL, *ple = NULL, *g = NULL;
    struct kern_ahead next;                                              /* the plan of the job after the current one */
    int rc = f.it ? ERR_OK : err_set(e, ERR_NOMEM, "out of memory");
    for (int b = 0; b < n_items && rc == ERR_OK; b++) {
        const struct runner_item *in = &items[b];
        if (in->seq < 0 || in->seq >= r->n_seq || in->n <= 0)
            rc = err_set(e, ERR_USAGE, "batch item %d: sequence %d of %d, %lld tokens", b, in->seq, r->n_seq,
                         (long long)in->n);
        for (int q = 0; q < b && rc == ERR_OK; q++)
            if (items[q].seq == in->seq)
                rc = err_set(e, ERR_USAGE, "batch items %d and %d continue the same sequence %d", q, b, in->seq);
        if (rc == ERR_OK)
            rc = check_tokens(c, in->tokens, in->n, e);
        if (rc != ERR_OK)
            break; /* in->seq may be out of range: touch nothing */
        f.it[b] = (struct step_item){&r->seq[in->seq], N, in->n, r->seq[in->seq].pos, in->key_mask,
                                     calloc((size_t)Lc, sizeof(struct kv_rows))};
        if (rc == ERR_OK && !f.it[b].pending)
            rc = err_set(e, ERR_NOMEM, "out of memory");
        N += in->n;
    }
    f.N = N;
    if (rc != ERR_OK)
        goto out;
    tokens = malloc((size_t)N * sizeof *tokens);                         /* [N] */
    x = malloc((size_t)(N * H) * sizeof *x);                             /* residual stream [N, H] */
    a = malloc((size_t)(N * H) * sizeof *a);                             /* branch [N, H] */
    if (c->ple_dim) {
        ple = malloc((size_t)(N * Lc * c->ple_dim) * sizeof *ple);       /* [N, L, P] */
        g = malloc((size_t)(N * c->ple_dim) * sizeof *g);                /* [N, P] */
    }
    if (!tokens || !x || !a || (c->ple_dim && (!ple || !g))) {
        rc = err_set(e, ERR_NOMEM, "forward buffers for %lld tokens", (long long)N);
        goto out;
    }
    for (int b = 0; b < n_items; b++)
        memcpy(tokens + f.it[b].off, items[b].tokens, (size_t)items[b].n * sizeof *tokens);
    for (int ty = 0; ty < 2; ty++) {                                     /* RoPE angles of every token */
        int64_t d = r->rope_dim[ty];
        if (!r->inv_freq[ty])
            continue;
        if (!(f.rope_cs[ty] = malloc((size_t)(N * d) * sizeof *f.rope_cs[ty]))) {
            rc = err_set(e, ERR_NOMEM, "RoPE angles for %lld tokens", (long long)N);
            goto out;
        }
        for (int b = 0; b < n_items; b++)
            for (int64_t t = 0; t < f.it[b].n; t++)
                kern_rope_cs(f.rope_cs[ty] + (f.it[b].off + t) * d, d, r->inv_freq[ty], f.it[b].p0 + t);
    }

    float s_e = sqrtf((float)H);                                         /* §3.2 embedding scale √H */
    for (int64_t t = 0; t < N; t++) {
        kern_row_f32(&m->embed, tokens[t], x + t * H);
        for (int64_t k = 0; k < H; k++)
            x[t * H + k] *= s_e;
    }
    if (c->ple_dim && (rc = per_layer_inputs(r, tokens, x, N, ple, e)) != ERR_OK)
        goto out;

    for (int64_t i = 0; i < Lc && rc == ERR_OK; i++) {
        const struct layer_weights *L = &m->layers[i];
        for (int64_t t = 0; t < N; t++)
            kern_rmsnorm(r->kt.dot, a + t * H, x + t * H, L->ln_in, H, eps); /* 1. input_layernorm */
        if ((rc = attention(&f, i, a, e)) != ERR_OK)                       /* 2. attention */
            break;
        for (int64_t t = 0; t < N; t++) {
            kern_rmsnorm(r->kt.dot, a + t * H, a + t * H, L->ln_post_attn, H, eps); /* 3. post_attention_layernorm */
            for (int64_t k = 0; k < H; k++)
                x[t * H + k] += a[t * H + k];                              /* 4. residual */
        }
        if ((rc = feed_forward(r, i, x, N, a, e)) != ERR_OK)               /* 5-6. feed-forward */
            break;
        for (int64_t k = 0; k < N * H; k++)
            x[k] += a[k];                                                  /* 7. residual */
        if (c->ple_dim) {                                                  /* 8. per-layer input gate */
            int64_t P = c->ple_dim;
            const struct wmat *proj = &L->ple_proj;
            kern_matmul_next(&r->kt, &L->ple_gate, x, N, g, r->threads, ahead(r, 1, &proj, N, &next));
            for (int64_t t = 0; t < N; t++)
                r->kt.gelu_mul(g + t * P, ple + (t * Lc + i) * P, P);
            kern_matmul_next(&r->kt, proj, g, N, a, r->threads, layer_ahead(r, i + 1, N, &next));
            for (int64_t t = 0; t < N; t++) {
                kern_rmsnorm(r->kt.dot, a + t * H, a + t * H, L->ln_post_ple, H, eps);
                for (int64_t k = 0; k < H; k++)
                    x[t * H + k] += a[t * H + k];
            }
        }
        for (int64_t k = 0; k < N * H; k++)
            x[k] *= L->layer_scalar;                                       /* 9. layer_scalar */
    }
    if (rc != ERR_OK)
        goto out;

    /* §3.9: final norm, tied head, soft-cap (every row, or each item's last) */
    int64_t rows = 0;
    for (int b = 0; b < n_items; b++)
        for (int64_t t = all_rows ? 0 : f.it[b].n - 1; t < f.it[b].n; t++, rows++)
            kern_rmsnorm(r->kt.dot, a + rows * H, x + (f.it[b].off + t) * H, m->final_norm, H, eps);
    const struct wmat *first = &m->ple_model_proj;                       /* a next step's first job */
    const struct kern_ahead *next_step = c->ple_dim ? ahead(r, 1, &first, N, &next) : layer_ahead(r, 0, N, &next);
    kern_matmul_next(&r->kt, &m->embed, a, rows, logits, r->threads, next_step);
    if (c->has_softcap)
        elementwise(r, &(struct ew_job){.softcap = r->kt.softcap, .x = logits, .cap = (float)c->softcap,
                                        .n = rows * V}, next_step);      /* cap·tanh(logits/cap) */
    rc = commit(&f, e);
out:
    for (int b = 0; f.it && b < n_items; b++) {
        for (int64_t i = 0; f.it[b].pending && i < Lc; i++)
            kv_rows_free(&f.it[b].pending[i]);
        free(f.it[b].pending);
    }
    free(f.it);
    free(f.rope_cs[0]);
    free(f.rope_cs[1]);
    free(tokens);
    free(x);
    free(a);
    free(ple);
    free(g);
    return rc;
}

int runner_forward(struct runner *r, const int32_t *tokens, int64_t n, float *logits, bool all_rows,
                   const uint8_t *key_mask, struct err *e)
{
    struct runner_item it = {0, tokens, n, key_mask};
    return runner_step(r, &it, 1, logits, all_rows, e);
}

int runner_step(struct runner *r, const struct runner_item *items, int n_items, float *logits, bool all_rows,
                struct err *e)
{
    int rc = step(r, items, n_items, logits, all_rows, e);
    return rc == ERR_OK ? rc : err_prefix(e, "%s", model_name(r->m));
}

int runner_prompt(struct runner *r, const int32_t *tokens, int64_t T, int64_t chunk, float *logits, float *last,
                  struct err *e)
{
    int64_t V = r->m->cfg.vocab_size, step = chunk > 0 ? chunk : T;
    for (int64_t t = 0; t < T; t += step) {
        int64_t n = t + step <= T ? step : T - t;
        bool final = t + n == T;
        float *out = logits ? logits + t * V : (final ? last : NULL);
        float *tmp = NULL;
        if (!out) {
            out = tmp = malloc((size_t)V * sizeof *tmp); /* logits of a middle chunk: not needed */
            if (!tmp)
                return err_set(e, ERR_NOMEM, "out of memory");
        }
        int rc = runner_forward(r, tokens + t, n, out, logits != NULL, NULL, e);
        free(tmp);
        if (rc != ERR_OK)
            return rc;
        if (final && logits && last)
            memcpy(last, logits + (T - 1) * V, (size_t)V * sizeof *last);
    }
    return ERR_OK;
}
