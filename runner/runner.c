/* runner.c - a runner: its options, KV caches and the run state of its
 * steps, all allocated by runner_init (forward.h). */
#include "runner/forward.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int kv_opts_validate(const struct kv_opts *o, struct err *e)
{
    if (o->bits != 0 && o->bits != 4 && o->bits != 8)
        return err_set(e, ERR_USAGE, "'kv_bits' %d: accepted values are 4 and 8", o->bits);
    if (o->group_size != 32 && o->group_size != 64 && o->group_size != 128)
        return err_set(e, ERR_USAGE, "'kv_group_size' %d: accepted values are 32, 64 and 128", o->group_size);
    if (o->start < 0)
        return err_set(e, ERR_USAGE, "'kv_start' %lld: expected a non-negative position", (long long)o->start);
    return ERR_OK;
}

static double *rope_table(const struct cfg_rope *rp, int64_t d)
{
    double *f = calloc((size_t)(d / 2), sizeof *f);
    if (!f)
        return NULL;
    /* default: every pair rotates; proportional: the first ⌊partial·d/2⌋ pairs,
     * exponent over the FULL head dim, divided by `factor` (MODEL.md §4) */
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
    int bits = (int)i == r->kv_float_layer ? 0 : r->o.kv.bits;
    int gs = r->o.kv.group_size < ly->head_dim ? r->o.kv.group_size : (int)ly->head_dim; /* groups stay within a head */
    kv_fmt_init(f, ly->kv_heads, ly->head_dim, bits, gs, r->o.kv.start);
}

/* The next `count` elements of `size` bytes from *at, 64-byte aligned; with
 * a NULL base, only the running total. */
static void *carve(uint8_t *base, size_t *at, size_t count, size_t size)
{
    void *p = base ? base + *at : NULL;
    *at += (count * size + 63) / 64 * 64;
    return p;
}

/* Carves the run state from base (NULL: sizes it) and returns its bytes. */
static size_t run_state_layout(struct runner *r, uint8_t *base)
{
    const struct gp_config *c = &r->m->cfg;
    struct run_state *s = &r->rs;
    size_t N = (size_t)r->o.max_step, H = (size_t)c->hidden_size, L = (size_t)c->n_layers, P = (size_t)c->ple_dim;
    size_t E = (size_t)c->n_experts, K = (size_t)c->top_k, d = 0, G = 0, I = (size_t)c->moe_intermediate, at = 0;
    for (int64_t i = 0; i < c->n_layers; i++) {
        d = (size_t)c->layers[i].head_dim > d ? (size_t)c->layers[i].head_dim : d;
        G = (size_t)c->layers[i].kv_heads > G ? (size_t)c->layers[i].kv_heads : G;
        I = (size_t)c->layers[i].mlp_width > I ? (size_t)c->layers[i].mlp_width : I;
    }
    s->tokens = carve(base, &at, N, sizeof *s->tokens);
    s->pos = carve(base, &at, N, sizeof *s->pos);
    s->item_of = carve(base, &at, N, sizeof *s->item_of);
    s->x = carve(base, &at, N * H, sizeof(float));
    s->a = carve(base, &at, N * H, sizeof(float));
    s->z = carve(base, &at, N * H, sizeof(float));
    s->q = carve(base, &at, N * (size_t)c->n_heads * d, sizeof(float));
    s->o = carve(base, &at, N * (size_t)c->n_heads * d, sizeof(float));
    s->k = carve(base, &at, N * G * d, sizeof(float));
    s->v = carve(base, &at, N * G * d, sizeof(float));
    s->gate = carve(base, &at, N * I, sizeof(float));
    s->up = carve(base, &at, N * I, sizeof(float));
    s->ple = carve(base, &at, N * L * P, sizeof(float));
    s->pg = carve(base, &at, N * P, sizeof(float));
    s->ple_tok = carve(base, &at, (size_t)r->o.threads * L * P, sizeof(float));
    s->bad = carve(base, &at, N, sizeof *s->bad);
    for (int t = 0; t < 2; t++)
        s->rope_cs[t] = carve(base, &at, N * (size_t)r->rope_dim[t], sizeof(float));
    s->scores = carve(base, &at, kern_attn_scratch((int64_t)N, c->n_heads, r->o.max_context, (int64_t)d, r->o.threads),
                      sizeof(float));
    size_t B = !E ? 0 : N < MOE_BLOCK ? N : MOE_BLOCK;                 /* routed experts: tokens, a piece's rows */
    size_t MP = (size_t)moe_piece(r->kt.blas, (int64_t)B);
    s->moe = carve(base, &at, H + E, sizeof(float));
    s->taken = carve(base, &at, E, sizeof *s->taken);
    s->moe_top = carve(base, &at, B * K, sizeof *s->moe_top);
    s->moe_w = carve(base, &at, B * K, sizeof(float));
    s->moe_row = carve(base, &at, MP, sizeof *s->moe_row);
    s->moe_in = carve(base, &at, MP * H, sizeof(float));
    s->moe_out = carve(base, &at, MP * H, sizeof(float));
    s->moe_eo = carve(base, &at, B * K * H, sizeof(float));
    s->moe_sum = carve(base, &at, B * H, sizeof(float));
    s->items = carve(base, &at, (size_t)r->o.n_seq, sizeof *s->items);
    return at;
}

/* The most columns any matrix of the model has (a matmul's input width). */
static int64_t widest(const struct gp_config *c)
{
    int64_t w = c->hidden_size > c->n_layers * c->ple_dim ? c->hidden_size : c->n_layers * c->ple_dim;
    for (int64_t i = 0; i < c->n_layers; i++) {
        int64_t mlp = c->layers[i].mlp_width, att = c->n_heads * c->layers[i].head_dim;
        w = mlp > w ? mlp : w;
        w = att > w ? att : w;
    }
    return w;
}

static int init(struct runner *r, const struct model *m, const struct runner_opts *o, struct err *e)
{
    memset(r, 0, sizeof *r);
    r->m = m;
    r->o = *o;
    r->o.threads = o->threads < 1 ? 1 : o->threads > POOL_MAX_THREADS ? POOL_MAX_THREADS : o->threads;
    if (!r->o.kv.group_size)
        r->o.kv.group_size = 64;
    kern_init(&r->kt, o->kernels);
    const struct gp_config *c = &m->cfg;
    int rc = kv_opts_validate(&r->o.kv, e);
    if (rc != ERR_OK)
        return rc;
    if (o->n_seq < 1 || o->max_step < 1 || o->max_context < 1)
        return err_set(e, ERR_USAGE, "runner: %d sequences, steps of %lld tokens, contexts of %lld positions: each "
                                     "must be at least 1", o->n_seq, (long long)o->max_step, (long long)o->max_context);
    r->kv_float_layer = -1;
    for (int64_t i = 0; r->o.kv.skip_last_full && r->o.kv.bits && i < c->first_shared; i++)
        if (c->layers[i].type == LT_FULL)
            r->kv_float_layer = (int)i; /* the source of every KV-shared full-attention layer */
    for (int64_t i = 0; r->o.kv.bits && i < c->first_shared; i++) {
        int64_t d = c->layers[i].head_dim, gs = r->o.kv.group_size < d ? r->o.kv.group_size : d;
        if ((gs != 32 && gs != 64 && gs != 128) || d % gs)
            return err_set(e, ERR_UNSUPPORTED, "'kv_group_size' %d: layer %lld's head dim %lld has no MLX group size "
                                               "(32, 64, 128) that divides it",
                           r->o.kv.group_size, (long long)i, (long long)d);
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
    size_t bytes = run_state_layout(r, NULL);
    if (!(r->rs.block = malloc(bytes)) || !(r->seq = calloc((size_t)o->n_seq, sizeof *r->seq)) ||
        !(r->rs.pending = calloc((size_t)c->n_layers, sizeof *r->rs.pending)))
        return err_set(e, ERR_NOMEM, "cannot allocate %zu bytes for steps of %lld tokens", bytes,
                       (long long)o->max_step);
    run_state_layout(r, r->rs.block);
    if (kern_reserve(&r->kt, o->max_step, widest(c), r->o.threads) != ERR_OK)
        return err_set(e, ERR_NOMEM, "cannot allocate the kernels' input buffers for steps of %lld tokens",
                       (long long)o->max_step);
    for (int s = 0; s < o->n_seq; s++)
        if (!(r->seq[s].cache = calloc((size_t)c->n_layers, sizeof *r->seq[s].cache)))
            return err_set(e, ERR_NOMEM, "cannot allocate caches");
    for (int64_t i = 0; i < c->n_layers; i++) {
        if (c->layers[i].shared)
            continue;
        struct kv_fmt f;
        layer_fmt(r, i, &f);
        bool ring = c->layers[i].type == LT_SLIDING;
        for (int s = 0; s < o->n_seq && rc == ERR_OK; s++)
            rc = kv_cache_init(&r->seq[s].cache[i], &f, ring, ring ? c->sliding_window : o->max_context, e);
        if (rc == ERR_OK)
            rc = kv_rows_alloc(&f, &r->rs.pending[i], o->max_step, e);
        if (rc != ERR_OK)
            return rc;
    }
    return ERR_OK;
}

int runner_init(struct runner *r, const struct model *m, const struct runner_opts *o, struct err *e)
{
    int rc = init(r, m, o, e);
    return rc == ERR_OK ? rc : err_prefix(e, "%s", model_name(m));
}

void runner_reset(struct runner *r, int seq)
{
    r->seq[seq].pos = 0;
}

void runner_free(struct runner *r)
{
    if (!r || !r->m)
        return;
    for (int s = 0; r->seq && s < r->o.n_seq; s++) {
        for (int64_t i = 0; r->seq[s].cache && i < r->m->cfg.n_layers; i++)
            kv_cache_free(&r->seq[s].cache[i]);
        free(r->seq[s].cache);
    }
    for (int64_t i = 0; r->rs.pending && i < r->m->cfg.n_layers; i++)
        kv_rows_free(&r->rs.pending[i]);
    free(r->rs.pending);
    free(r->rs.block);
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
