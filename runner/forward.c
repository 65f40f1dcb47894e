/* forward.c - the forward pass of docs/MODEL.md, step by step (the runner
 * it runs on: runner.c).
 * Activations are fp32 row-major [N, width], the N tokens of all items of a
 * step one after the other; weights stay in their stored form
 * (kernels/kernels.h). Constants √H, H^-½, √P and 2^-½ are exact fp32. */
#include "runner/forward.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* ---- attention (MODEL.md §5) ---- */

/* Head g's key (which 0) or value (1) at position p as query `row` sees it:
 * the source layer's cache before the chunk, the chunk's pending entries
 * from it; NULL for a key the item's mask hides. */
struct kv_view {
    const struct runner *r;
    int src;                     /* the layer whose entries are read */
};

static const float *kv_entry(const void *ctx, int64_t row, int64_t p, int64_t g, int which, float *buf)
{
    const struct kv_view *kv = ctx;
    const struct run_state *s = &kv->r->rs;
    const struct step_item *it = &s->items[s->item_of[row]];
    int64_t t = row - it->off;
    if (it->key_mask && !it->key_mask[t * (it->p0 + it->n) + p])
        return NULL;
    const struct kv_cache *c = &it->s->cache[kv->src];
    if (p < it->p0)
        return kv_rows_head(&c->fmt, &c->rows, kv_cache_slot(c, p), p, g, which, buf);
    return kv_rows_head(&c->fmt, &s->pending[kv->src], it->off + p - it->p0, p, g, which, buf);
}

/* ---- per-token passes ----
 * Work done token by token runs over the threads, ROW_TASK tokens a task;
 * a token's operations are the same on any thread. */
#define ROW_TASK 8

struct rows_job {
    const struct runner *r;
    void (*row)(const struct rows_job *j, int64_t t, int worker);
    int64_t n, i;                /* tokens; the layer (qkv_row, ple_gate_row) */
    float *out, *res;            /* norm_row: out[t] = RMSNorm_w(in[t]), then res[t] += out[t] when res is set */
    const float *in, *w;
};

static void rows_task(void *arg, int64_t task, int worker)
{
    const struct rows_job *j = arg;
    for (int64_t t = task * ROW_TASK; t < (task + 1) * ROW_TASK && t < j->n; t++)
        j->row(j, t, worker);
}

static void over_rows(struct rows_job *j)
{
    pool_run(j->r->o.threads, (j->n + ROW_TASK - 1) / ROW_TASK, rows_task, j);
}

static void norm_row(const struct rows_job *j, int64_t t, int worker)
{
    (void)worker;
    const int64_t H = j->r->m->cfg.hidden_size;
    kern_rmsnorm(j->r->kt.dot, j->out + t * H, j->in + t * H, j->w, H, (float)j->r->m->cfg.rms_eps);
    for (int64_t k = 0; j->res && k < H; k++)
        j->res[t * H + k] += j->out[t * H + k];
}

/* out[n, H] = RMSNorm_w(in) row by row; then res += out unless res is NULL. */
static void norm_rows(const struct runner *r, int64_t n, float *out, const float *in, const float *w, float *res)
{
    over_rows(&(struct rows_job){.r = r, .row = norm_row, .n = n, .out = out, .res = res, .in = in, .w = w});
}

/* Per-head RMSNorm (weighted or not) and optional RoPE of one token's x[heads, d]. */
static void heads_norm_rope(const struct runner *r, float *x, int64_t heads, int64_t d, const float *w,
                            const double *inv_freq, const float *cs)
{
    for (int64_t h = 0; h < heads; h++) {
        kern_rmsnorm(r->kt.dot, x + h * d, x + h * d, w, d, (float)r->m->cfg.rms_eps);
        if (inv_freq)
            kern_rope(x + h * d, d, inv_freq, cs);
    }
}

/* Token t's projections in layer i: q_norm and RoPE; a layer with its own
 * cache also k_norm and RoPE, v_norm, and the chunk's entries as stored. */
static void qkv_row(const struct rows_job *j, int64_t t, int worker)
{
    (void)worker;
    const struct runner *r = j->r;
    const struct cfg_layer *ly = &r->m->cfg.layers[j->i];
    const struct layer_weights *L = &r->m->layers[j->i];
    const struct run_state *s = &r->rs;
    const int64_t Nq = r->m->cfg.n_heads, d = ly->head_dim, G = ly->kv_heads;
    const double *rope = r->inv_freq[ly->type];
    const float *cs = s->rope_cs[ly->type] + t * d;
    float *q = s->q + t * Nq * d, *k = s->k + t * G * d, *v = s->v + t * G * d; /* [Nq, d], [G, d], [G, d] */
    heads_norm_rope(r, q, Nq, d, L->q_norm, rope, cs);                   /* q_norm, RoPE */
    if (ly->shared)
        return;
    if (ly->k_eq_v)
        memcpy(v, k, (size_t)(G * d) * sizeof *v);                        /* V_raw = K_raw (k_eq_v) */
    heads_norm_rope(r, k, G, d, L->k_norm, rope, cs);                     /* k_norm, RoPE */
    heads_norm_rope(r, v, G, d, NULL, NULL, NULL);                        /* v_norm (no weight, no RoPE) */
    kv_rows_put(&s->items[0].s->cache[j->i].fmt, &s->pending[j->i], t, s->pos[t], k, v); /* as stored */
}

/* a[N, H] -> attention output [N, H] (in place). */
static void attention(struct runner *r, int n_items, int64_t N, int64_t i, float *a)
{
    const struct gp_config *c = &r->m->cfg;
    const struct cfg_layer *ly = &c->layers[i];
    const struct layer_weights *L = &r->m->layers[i];
    struct run_state *s = &r->rs;
    int64_t Nq = c->n_heads, d = ly->head_dim, G = ly->kv_heads;
    const struct wmat *w[3] = {&L->q, &L->k, &L->v};
    float *y[3] = {s->q, s->k, s->v};                                     /* [N, Nq, d], [N, G, d], [N, G, d] */
    kern_matmul_many(&r->kt, ly->shared ? 1 : ly->k_eq_v ? 2 : 3, w, y, a, N, r->o.threads); /* a·W{q,k,v}ᵀ */
    over_rows(&(struct rows_job){.r = r, .row = qkv_row, .n = N, .i = i}); /* norms, RoPE, the chunk's entries */
    int64_t keys = 0;                                                     /* most keys a query sees */
    for (int b = 0; b < n_items; b++)
        keys = s->items[b].p0 + s->items[b].n > keys ? s->items[b].p0 + s->items[b].n : keys;
    struct kv_view view = {r, ly->kv_src};
    struct kern_attn job = {.q = s->q, .out = s->o, .pos = s->pos, .N = N, .Nq = Nq, .G = G, .d = d,
                            .window = ly->type == LT_SLIDING ? c->sliding_window : 0, .kv = kv_entry, .ctx = &view,
                            .keys = keys, .scratch = s->scores};
    kern_attention(&r->kt, &job, r->o.threads);                           /* softmax(Q·Kᵀ)·V per head */
    kern_matmul(&r->kt, &L->o, s->o, N, a, r->o.threads);                  /* a = O·Woᵀ */
}

/* ---- feed-forward (MODEL.md §6) ---- */

/* Element-wise passes in tasks of EW_TASK elements: a decode step's MLP
 * GELU is one task, while its 262,144 soft-capped logits (and a prefill's
 * millions of elements) are spread over the threads. */
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

static void elementwise(const struct runner *r, struct ew_job *j)
{
    pool_run(r->o.threads, (j->n + EW_TASK - 1) / EW_TASK, ew_task, j);
}

/* out[n, H] = (gelu(z·Wgᵀ) ⊙ z·Wuᵀ)·Wdᵀ */
static void mlp(struct runner *r, const struct wmat *wg, const struct wmat *wu, const struct wmat *wd, const float *z,
                int64_t n, float *out)
{
    struct run_state *s = &r->rs;
    const struct wmat *w[2] = {wg, wu};
    float *y[2] = {s->gate, s->up};
    kern_matmul_many(&r->kt, 2, w, y, z, n, r->o.threads);                /* g[n, I] = z·Wgᵀ, u[n, I] = z·Wuᵀ */
    elementwise(r, &(struct ew_job){.gelu_mul = r->kt.gelu_mul, .x = s->gate, .u = s->up, .n = n * wg->rows});
    kern_matmul(&r->kt, wd, s->gate, n, out, r->o.threads);                /* out = g·Wdᵀ */
}

/* The router of one token: its K experts top[K] and their weights w[K]
 * (renormalized, × per_expert_scale), from its post-attention residual. */
static void route(struct runner *r, const struct layer_weights *L, const float *resid, int64_t *top, float *w)
{
    const struct gp_config *c = &r->m->cfg;
    int64_t H = c->hidden_size, E = c->n_experts, K = c->top_k;
    struct run_state *s = &r->rs;
    float *z = s->moe, *logit = z + H, sum = 0.0f;                         /* [H], [E] */
    kern_rmsnorm(r->kt.dot, z, resid, NULL, H, (float)c->rms_eps);         /* router: unweighted RMSNorm */
    float hs = (float)(1.0 / sqrt((double)H));
    for (int64_t k = 0; k < H; k++)
        z[k] = z[k] * L->router_scale[k] * hs;                             /* × scale × H^-½ */
    kern_matmul(&r->kt, &L->router, z, 1, logit, 1);                        /* logits */
    kern_softmax(logit, E);                                                /* over all experts */
    memset(s->taken, 0, (size_t)E);
    for (int64_t k = 0; k < K; k++) {                                      /* top-k (ties: lower index) */
        int64_t best = -1;
        for (int64_t x = 0; x < E; x++)
            if (!s->taken[x] && (best < 0 || logit[x] > logit[best]))
                best = x;
        s->taken[best] = 1;
        top[k] = best;
        w[k] = logit[best];
        sum += w[k];
    }
    for (int64_t k = 0; k < K; k++)
        w[k] = w[k] / sum * L->per_expert_scale[top[k]];                   /* renormalized, × per_expert_scale */
}

/* Routed experts of n <= MOE_BLOCK tokens: out[n, H], token t's Σ_k w_k ·
 * expert_{e_k}(y_t) summed in k's order, from the post-attention residual
 * resid[n, H] and the normed inputs y[n, H]. Each expert runs once on all
 * the tokens routed to it, in pieces of moe_piece rows (a token's expert
 * output is then the same bits in any batch, so the sum is whatever the
 * chunking; sgemm is never used here). */
static void moe_block(struct runner *r, const struct layer_weights *L, const float *resid, const float *y, int64_t n,
                      float *out)
{
    const struct gp_config *c = &r->m->cfg;
    int64_t H = c->hidden_size, E = c->n_experts, K = c->top_k;
    struct run_state *s = &r->rs;
    int64_t *top = s->moe_top, *row = s->moe_row;                          /* [n, K] experts; a piece's (t, k) */
    float *w = s->moe_w, *in = s->moe_in, *eo = s->moe_eo;                  /* [n, K], [piece, H], [n, K, H] */
    for (int64_t t = 0; t < n; t++)
        route(r, L, resid + t * H, top + t * K, w + t * K);                 /* router, per token */
    for (int64_t e = 0; e < E; e++) {
        struct wmat g = kern_wmat_expert(&L->ex_gate, e), u = kern_wmat_expert(&L->ex_up, e),
                    dn = kern_wmat_expert(&L->ex_down, e);
        int64_t m = 0;
        for (int64_t tk = 0; tk <= n * K; tk++) {
            if (tk < n * K && top[tk] == e) {
                row[m] = tk;                                               /* gather expert e's tokens */
                memcpy(in + m++ * H, y + tk / K * H, (size_t)H * sizeof *in);
            }
            if (m == moe_piece(r->kt.blas, n) || (m && tk == n * K)) {
                mlp(r, &g, &u, &dn, in, m, s->moe_out);                     /* expert_e(y) of the piece */
                for (int64_t i = 0; i < m; i++)                            /* to each (t, k) */
                    memcpy(eo + row[i] * H, s->moe_out + i * H, (size_t)H * sizeof *eo);
                m = 0;
            }
        }
    }
    memset(out, 0, (size_t)(n * H) * sizeof *out);
    for (int64_t t = 0; t < n; t++)
        for (int64_t k = 0; k < K; k++)
            for (int64_t x = 0; x < H; x++)
                out[t * H + x] += w[t * K + k] * eo[(t * K + k) * H + x];  /* Σ_k w_k · expert output */
}

/* f[n, H] from the post-attention residual x[n, H], then x += f. */
static void feed_forward(struct runner *r, int64_t i, float *x, int64_t n, float *f)
{
    const struct gp_config *c = &r->m->cfg;
    const struct layer_weights *L = &r->m->layers[i];
    int64_t H = c->hidden_size;
    float *z = r->rs.z, *f2 = r->rs.moe_sum;                                   /* [n, H], [MOE_BLOCK, H] */
    norm_rows(r, n, z, x, L->ln_pre_ff, NULL);                                 /* pre_feedforward_layernorm */
    mlp(r, &L->gate, &L->up, &L->down, z, n, f);                               /* dense MLP */
    for (int64_t t0 = 0; c->moe && t0 < n; t0 += MOE_BLOCK) {
        int64_t nb = n - t0 < MOE_BLOCK ? n - t0 : MOE_BLOCK;
        norm_rows(r, nb, f + t0 * H, f + t0 * H, L->ln_post_ff1, NULL);        /* dense branch post-norm */
        norm_rows(r, nb, z + t0 * H, x + t0 * H, L->ln_pre_ff2, NULL);         /* experts' pre-norm */
        moe_block(r, L, x + t0 * H, z + t0 * H, nb, f2);                       /* routed experts */
        norm_rows(r, nb, f2, f2, L->ln_post_ff2, f + t0 * H);                  /* expert branch post-norm, f += it */
    }
    norm_rows(r, n, f, f, L->ln_post_ff, x);                                   /* post_feedforward_layernorm, x += f */
}

/* ---- per-layer inputs (MODEL.md §3) ---- */

/* Token t's per-layer inputs from their context part ple[t]: each slice
 * normed, the token's row of the table added (scratch: the worker's [L, P]). */
static void ple_row(const struct rows_job *j, int64_t t, int worker)
{
    const struct model *m = j->r->m;
    const struct gp_config *c = &m->cfg;
    const int64_t L = c->n_layers, P = c->ple_dim, H = c->hidden_size;
    float *tok = j->r->rs.ple_tok + worker * L * P;                          /* [L, P] */
    float hs = (float)(1.0 / sqrt((double)H)), sp = sqrtf((float)P), r2 = (float)(1.0 / sqrt(2.0));
    kern_row_f32(&m->ple_embed, j->r->rs.tokens[t], tok);                    /* token part */
    for (int64_t l = 0; l < L; l++) {
        float *s = j->out + (t * L + l) * P;
        for (int64_t k = 0; k < P; k++)
            s[k] *= hs;
        kern_rmsnorm(j->r->kt.dot, s, s, m->ple_proj_norm, P, (float)c->rms_eps);
        for (int64_t k = 0; k < P; k++)
            s[k] = (s[k] + tok[l * P + k] * sp) * r2;
    }
}

/* ple[n, L, P] = (RMSNorm_w(h0·Wᵀ · H^-½ per slice) + E_ple[t]·√P) · 2^-½ */
static void per_layer_inputs(struct runner *r, const float *h0, int64_t n, float *ple)
{
    kern_matmul(&r->kt, &r->m->ple_model_proj, h0, n, ple, r->o.threads);       /* context part [n, L·P] */
    over_rows(&(struct rows_job){.r = r, .row = ple_row, .n = n, .out = ple}); /* the rest, token by token */
}

/* Layer i's per-layer input gate of token t: pg[t] = gelu(pg[t])·ple[t, i]. */
static void ple_gate_row(const struct rows_job *j, int64_t t, int worker)
{
    (void)worker;
    const struct run_state *s = &j->r->rs;
    const int64_t L = j->r->m->cfg.n_layers, P = j->r->m->cfg.ple_dim;
    j->r->kt.gelu_mul(s->pg + t * P, s->ple + (t * L + j->i) * P, P);
}

/* ---- the step ---- */

/* Checks the items against the runner and lays them out in the run state:
 * each item's rows, tokens, positions and RoPE angles. Returns the token count. */
static int setup_items(struct runner *r, const struct runner_item *items, int n_items, int64_t *N_out, struct err *e)
{
    const struct gp_config *c = &r->m->cfg;
    struct run_state *s = &r->rs;
    int64_t N = 0, limit = c->ple_dim && c->ple_vocab < c->vocab_size ? c->ple_vocab : c->vocab_size;
    if (n_items < 1 || n_items > r->o.n_seq)
        return err_set(e, ERR_USAGE, "a step of %d items for a runner of %d sequences", n_items, r->o.n_seq);
    for (int b = 0; b < n_items; b++) {
        const struct runner_item *in = &items[b];
        if (in->seq < 0 || in->seq >= r->o.n_seq || in->n <= 0)
            return err_set(e, ERR_USAGE, "batch item %d: sequence %d of %d, %lld tokens", b, in->seq, r->o.n_seq,
                           (long long)in->n);
        for (int q = 0; q < b; q++)
            if (items[q].seq == in->seq)
                return err_set(e, ERR_USAGE, "batch items %d and %d continue the same sequence %d", q, b, in->seq);
        int64_t p0 = r->seq[in->seq].pos;
        if (N + in->n > r->o.max_step || p0 + in->n > r->o.max_context)
            return err_set(e, ERR_RANGE, "a step of %lld tokens up to position %lld is beyond this runner's steps of "
                                         "%lld tokens and contexts of %lld positions",
                           (long long)(N + in->n), (long long)(p0 + in->n), (long long)r->o.max_step,
                           (long long)r->o.max_context);
        for (int64_t t = 0; t < in->n; t++)
            if (in->tokens[t] < 0 || in->tokens[t] >= limit)
                return err_set(e, ERR_RANGE, "token %d at index %lld is outside [0, %lld) (vocab_size %lld%s)",
                               in->tokens[t], (long long)t, (long long)limit, (long long)c->vocab_size,
                               limit < c->vocab_size ? ", and the per-layer-input table is smaller" : "");
        s->items[b] = (struct step_item){&r->seq[in->seq], N, in->n, p0, in->key_mask};
        for (int64_t t = 0; t < in->n; t++) {
            s->tokens[N + t] = in->tokens[t];
            s->pos[N + t] = p0 + t;
            s->item_of[N + t] = b;
            for (int ty = 0; ty < 2; ty++)                                   /* RoPE angles of every token */
                if (r->inv_freq[ty])
                    kern_rope_cs(s->rope_cs[ty] + (N + t) * r->rope_dim[ty], r->rope_dim[ty], r->inv_freq[ty], p0 + t);
        }
        N += in->n;
    }
    *N_out = N;
    return ERR_OK;
}

struct commit_job {
    struct runner *r;
    int n_items;
};

/* Layer i's entries of every item, in order (a ring's slot may take several). */
static void commit_layer(void *arg, int64_t i, int worker)
{
    (void)worker;
    const struct commit_job *j = arg;
    const struct run_state *s = &j->r->rs;
    for (int b = 0; !j->r->m->cfg.layers[i].shared && b < j->n_items; b++) {
        const struct step_item *it = &s->items[b];
        struct kv_cache *kc = &it->s->cache[i];
        for (int64_t t = 0; t < it->n; t++)
            kv_rows_copy(&kc->fmt, &kc->rows, kv_cache_slot(kc, it->p0 + t), &s->pending[i], it->off + t, it->p0 + t);
    }
}

/* Appends each item's chunk entries to its sequence's caches (MODEL.md §7). */
static void commit(struct runner *r, int n_items)
{
    pool_run(r->o.threads, r->m->cfg.n_layers, commit_layer, &(struct commit_job){r, n_items});
    for (int b = 0; b < n_items; b++)
        r->rs.items[b].s->pos = r->rs.items[b].p0 + r->rs.items[b].n;
}

/* Index of the first value of x[0 .. n) that is NaN or infinite, or -1. */
static int64_t first_nonfinite(const float *x, int64_t n)
{
    for (int64_t k = 0; k < n; k++)
        if (!isfinite(x[k]))
            return k;
    return -1;
}

/* x[t] = E[token t]·√H (out = x). */
static void embed_row(const struct rows_job *j, int64_t t, int worker)
{
    (void)worker;
    const int64_t H = j->r->m->cfg.hidden_size;
    float s_e = sqrtf((float)H);                                                 /* embedding scale √H */
    kern_row_f32(&j->r->m->embed, j->r->rs.tokens[t], j->out + t * H);
    for (int64_t k = 0; k < H; k++)
        j->out[t * H + k] *= s_e;
}

/* out[t] *= w[0] (layer_scalar). */
static void scale_row(const struct rows_job *j, int64_t t, int worker)
{
    (void)worker;
    const int64_t H = j->r->m->cfg.hidden_size;
    for (int64_t k = 0; k < H; k++)
        j->out[t * H + k] *= *j->w;
}

static void finite_row(const struct rows_job *j, int64_t t, int worker)
{
    (void)worker;
    const int64_t H = j->r->m->cfg.hidden_size;
    j->r->rs.bad[t] = first_nonfinite(j->in + t * H, H) >= 0;
}

/* Whether any value of x[n, H] is NaN or infinite. */
static bool any_nonfinite(const struct runner *r, int64_t n, const float *x)
{
    over_rows(&(struct rows_job){.r = r, .row = finite_row, .n = n, .in = x});
    for (int64_t t = 0; t < n; t++)
        if (r->rs.bad[t])
            return true;
    return false;
}

static int step(struct runner *r, const struct runner_item *items, int n_items, float *logits, bool all_rows,
                struct err *e)
{
    const struct model *m = r->m;
    const struct gp_config *c = &m->cfg;
    struct run_state *s = &r->rs;
    int64_t H = c->hidden_size, V = c->vocab_size, Lc = c->n_layers, P = c->ple_dim, N;
    float eps = (float)c->rms_eps, *x = s->x, *a = s->a;                         /* [N, H] residual, branch */
    int rc = setup_items(r, items, n_items, &N, e);
    if (rc != ERR_OK)
        return rc;
    over_rows(&(struct rows_job){.r = r, .row = embed_row, .n = N, .out = x}); /* x = E[tokens]·√H */
    if (P)
        per_layer_inputs(r, x, N, s->ple);                                       /* [N, L, P] */
    int64_t broken = any_nonfinite(r, N, x) ? 0 : -1;                           /* first non-finite: 0 embedding, i+1 layer i */
    for (int64_t i = 0; i < Lc; i++) {
        const struct layer_weights *L = &m->layers[i];
        norm_rows(r, N, a, x, L->ln_in, NULL);                                  /* 1. input_layernorm */
        attention(r, n_items, N, i, a);                                           /* 2. attention */
        norm_rows(r, N, a, a, L->ln_post_attn, x);                               /* 3. post_attention_layernorm, 4. residual */
        if (r->probe && r->probe->attn)
            memcpy(r->probe->attn + i * N * H, a, (size_t)(N * H) * sizeof *a);
        feed_forward(r, i, x, N, a);                                              /* 5-6. feed-forward, 7. residual */
        if (r->probe && r->probe->mlp)
            memcpy(r->probe->mlp + i * N * H, a, (size_t)(N * H) * sizeof *a);
        if (P) {                                                                  /* 8. per-layer input gate */
            kern_matmul(&r->kt, &L->ple_gate, x, N, s->pg, r->o.threads);        /* [N, P] */
            over_rows(&(struct rows_job){.r = r, .row = ple_gate_row, .n = N, .i = i}); /* gelu(pg)·ple[:, i] */
            kern_matmul(&r->kt, &L->ple_proj, s->pg, N, a, r->o.threads);        /* [N, H] */
            norm_rows(r, N, a, a, L->ln_post_ple, x);                            /* its post-norm, residual */
        }
        over_rows(&(struct rows_job){.r = r, .row = scale_row, .n = N, .out = x, .w = L->layer_scalar}); /* 9. layer_scalar */
        if (r->probe && i < r->probe->inject_layers)
            memcpy(x, r->probe->inject + i * N * H, (size_t)(N * H) * sizeof *x);
        if (r->probe && r->probe->hidden)
            memcpy(r->probe->hidden + i * N * H, x, (size_t)(N * H) * sizeof *x);
        if (broken < 0 && any_nonfinite(r, N, x))
            broken = i + 1;
        progress_report(&r->o.progress, "layers", (uint64_t)(i + 1), (uint64_t)c->n_layers, "layers");
    }
    if (logits) {                           /* final norm, tied head, soft-cap: every row, or each item's last */
        int64_t rows = 0;
        for (int b = 0; b < n_items; b++)
            for (int64_t t = all_rows ? 0 : s->items[b].n - 1; t < s->items[b].n; t++, rows++)
                kern_rmsnorm(r->kt.dot, a + rows * H, x + (s->items[b].off + t) * H, m->final_norm, H, eps);
        kern_matmul(&r->kt, &m->embed, a, rows, logits, r->o.threads);          /* [rows, V] */
        if (c->has_softcap)
            elementwise(r, &(struct ew_job){.softcap = r->kt.softcap, .x = logits, .cap = (float)c->softcap,
                                            .n = rows * V});                      /* cap·tanh(logits/cap) */
        int64_t bad = first_nonfinite(logits, rows * V);                          /* never silent NaN logits */
        if (bad >= 0) {
            char where[96];
            if (broken < 0)
                snprintf(where, sizeof where, "every layer's output is finite: the final norm or the head is broken");
            else if (broken == 0)
                snprintf(where, sizeof where, "the embedded input is already non-finite");
            else
                snprintf(where, sizeof where, "the hidden state is first non-finite after layer %lld", (long long)broken - 1);
            return err_set(e, ERR_RANGE, "logit %lld of output row %lld is %g, not finite: %s", (long long)(bad % V),
                           (long long)(bad / V), (double)logits[bad], where);
        }
    }
    commit(r, n_items);
    return ERR_OK;
}

int runner_step(struct runner *r, const struct runner_item *items, int n_items, float *logits, bool all_rows,
                struct err *e)
{
    int rc = step(r, items, n_items, logits, all_rows, e);
    return rc == ERR_OK ? rc : err_prefix(e, "%s", model_name(r->m));
}

int runner_forward(struct runner *r, const int32_t *tokens, int64_t n, float *logits, bool all_rows,
                   const uint8_t *key_mask, struct err *e)
{
    struct runner_item it = {0, tokens, n, key_mask};
    return runner_step(r, &it, 1, logits, all_rows, e);
}

int runner_prompt(struct runner *r, const int32_t *tokens, int64_t T, int64_t chunk, float *logits, float *last,
                  struct err *e)
{
    int64_t V = r->m->cfg.vocab_size, step = chunk > 0 ? chunk : T;
    for (int64_t t = 0; t < T; t += step) {
        int64_t n = t + step <= T ? step : T - t;
        bool final = t + n == T;
        float *out = logits ? logits + t * V : final ? last : NULL;     /* a middle chunk's logits: not computed */
        int rc = runner_forward(r, tokens + t, n, out, logits != NULL, NULL, e);
        if (rc != ERR_OK)
            return rc;
        if (final && logits && last)
            memcpy(last, logits + (T - 1) * V, (size_t)V * sizeof *last);
    }
    return ERR_OK;
}
