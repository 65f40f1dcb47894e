/* forward.c - gemma4-architecture.md §3, step by step.
 * Activations are fp32 row-major [n, width]; weights stay in their stored
 * form (kernels/kernels.h). Constants √H, H^-½, √P and 2^-½ are exact fp32. */
#include "runner/forward.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- setup ---- */

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

int runner_init(struct runner *r, const struct model *m, int threads, enum kern_level level, struct err *e)
{
    memset(r, 0, sizeof *r);
    r->m = m;
    r->threads = threads < 1 ? 1 : threads;
    kern_init(&r->kt, level);
    const struct gp_config *c = &m->cfg;
    r->cache = calloc((size_t)c->n_layers, sizeof *r->cache);
    if (!r->cache)
        return err_set(e, ERR_NOMEM, "cannot allocate caches");
    for (int64_t i = 0; i < c->n_layers; i++) {
        const struct cfg_layer *ly = &c->layers[i];
        struct kv_cache *kc = &r->cache[i];
        kc->dim = ly->kv_heads * ly->head_dim;
        kc->ring = ly->type == LT_SLIDING;
        if (!ly->shared && kc->ring) {
            kc->cap = c->sliding_window;
            kc->k = malloc((size_t)(kc->cap * kc->dim) * sizeof(float));
            kc->v = malloc((size_t)(kc->cap * kc->dim) * sizeof(float));
            if (!kc->k || !kc->v)
                return err_set(e, ERR_NOMEM, "cannot allocate the sliding cache of layer %lld", (long long)i);
        }
    }
    for (int t = 0; t < 2; t++) {
        int64_t d = 0;
        for (int64_t i = 0; i < c->n_layers; i++)
            if ((int)c->layers[i].type == t)
                d = c->layers[i].head_dim;
        if (d && !(r->inv_freq[t] = rope_table(&c->rope[t], d)))
            return err_set(e, ERR_NOMEM, "cannot allocate RoPE tables");
    }
    return ERR_OK;
}

void runner_reset(struct runner *r)
{
    r->pos = 0;
}

void runner_free(struct runner *r)
{
    if (!r)
        return;
    if (r->cache)
        for (int64_t i = 0; i < r->m->cfg.n_layers; i++) {
            free(r->cache[i].k);
            free(r->cache[i].v);
        }
    free(r->cache);
    free(r->inv_freq[0]);
    free(r->inv_freq[1]);
    memset(r, 0, sizeof *r);
}

/* Makes room for `need` positions in a full-attention cache (steps of 256). */
static int cache_reserve(struct kv_cache *kc, int64_t need, struct err *e)
{
    if (kc->ring || need <= kc->cap)
        return ERR_OK;
    int64_t cap = (need + 255) / 256 * 256;
    float *k = realloc(kc->k, (size_t)(cap * kc->dim) * sizeof *k);
    if (k)
        kc->k = k;
    float *v = k ? realloc(kc->v, (size_t)(cap * kc->dim) * sizeof *v) : NULL;
    if (!k || !v)
        return err_set(e, ERR_NOMEM, "cannot grow a KV cache to %lld positions", (long long)cap);
    kc->v = v;
    kc->cap = cap;
    return ERR_OK;
}

/* ---- attention ---- */

/* Keys and values a layer attends over: its source's cache (positions < p0)
 * and the source's keys/values of the current chunk (positions p0..p0+n-1). */
struct kv_view {
    const struct kv_cache *cache;
    const float *k_new, *v_new;  /* [n, dim] */
};

static inline const float *key_at(const struct kv_view *kv, int64_t p, int64_t p0, bool v)
{
    if (p >= p0)
        return (v ? kv->v_new : kv->k_new) + (p - p0) * kv->cache->dim;
    int64_t slot = kv->cache->ring ? p % kv->cache->cap : p;
    return (v ? kv->cache->v : kv->cache->k) + slot * kv->cache->dim;
}

struct attn_job {
    const float *q;              /* [n, Nq, d] after norm and RoPE */
    float *out;                  /* [n, Nq, d] */
    struct kv_view kv;
    int64_t n, p0, Nq, d, group, window; /* window 0: full attention */
    const uint8_t *key_mask;     /* [n, p0 + n] or NULL */
};

/* One (token, head): softmax(q·K) · V over the visible keys, in position order. */
static void attn_task(void *arg, int64_t task)
{
    const struct attn_job *j = arg;
    int64_t t = task / j->Nq, h = task % j->Nq, P = j->p0 + t, g = h / j->group, d = j->d;
    int64_t k0 = j->window ? (P - j->window + 1 > 0 ? P - j->window + 1 : 0) : 0;
    const float *q = j->q + (t * j->Nq + h) * d;
    float *o = j->out + (t * j->Nq + h) * d;
    float *s = malloc((size_t)(P - k0 + 1) * sizeof *s);
    if (!s)
        return;
    float m = -INFINITY;
    for (int64_t p = k0; p <= P; p++) {
        float *sp = &s[p - k0];
        if (j->key_mask && !j->key_mask[t * (j->p0 + j->n) + p]) {
            *sp = -INFINITY;
            continue;
        }
        const float *k = key_at(&j->kv, p, j->p0, false) + g * d;
        float dot = 0.0f;
        for (int64_t i = 0; i < d; i++)
            dot += q[i] * k[i];
        *sp = dot; /* scale 1.0 (§3.5) */
        m = fmaxf(m, dot);
    }
    float sum = 0.0f;
    for (int64_t p = k0; p <= P; p++) {
        s[p - k0] = s[p - k0] == -INFINITY ? 0.0f : expf(s[p - k0] - m);
        sum += s[p - k0];
    }
    memset(o, 0, (size_t)d * sizeof *o);
    for (int64_t p = k0; p <= P; p++) {
        float w = s[p - k0] / sum;
        if (w == 0.0f)
            continue;
        const float *v = key_at(&j->kv, p, j->p0, true) + g * d;
        for (int64_t i = 0; i < d; i++)
            o[i] += w * v[i];
    }
    free(s);
}

/* Per-head RMSNorm (weighted or not) and optional RoPE of x[n, heads, d]. */
static void heads_norm_rope(float *x, int64_t n, int64_t heads, int64_t d, const float *w, float eps,
                            const double *inv_freq, int64_t p0)
{
    for (int64_t t = 0; t < n; t++)
        for (int64_t h = 0; h < heads; h++) {
            float *v = x + (t * heads + h) * d;
            kern_rmsnorm(v, v, w, d, eps);
            if (inv_freq)
                kern_rope(v, d, inv_freq, p0 + t);
        }
}

/* Scratch of one forward call. */
struct fwd {
    struct runner *r;
    int64_t n, p0;
    float **k_new, **v_new;      /* [L] -> [n, G·d] for KV-owning layers */
};

/* §3.5: a[n, H] -> attention output [n, H]. */
static int attention(struct fwd *f, int64_t i, float *a, const uint8_t *key_mask, struct err *e)
{
    struct runner *r = f->r;
    const struct gp_config *c = &r->m->cfg;
    const struct cfg_layer *ly = &c->layers[i];
    const struct layer_weights *L = &r->m->layers[i];
    int64_t n = f->n, Nq = c->n_heads, d = ly->head_dim, G = ly->kv_heads;
    float eps = (float)c->rms_eps;
    const double *rope = r->inv_freq[ly->type];
    float *q = malloc((size_t)(n * Nq * d) * sizeof *q);   /* [n, Nq, d] */
    float *o = malloc((size_t)(n * Nq * d) * sizeof *o);   /* [n, Nq, d] */
    if (!q || !o) {
        free(q);
        free(o);
        return err_set(e, ERR_NOMEM, "attention buffers");
    }
    kern_matmul(&r->kt, &L->q, a, n, q, r->threads);                   /* Q = a·Wqᵀ */
    heads_norm_rope(q, n, Nq, d, L->q_norm, eps, rope, f->p0);         /* q_norm, RoPE */
    if (!ly->shared) {
        float *k = f->k_new[i], *v = f->v_new[i];                       /* [n, G, d] */
        kern_matmul(&r->kt, &L->k, a, n, k, r->threads);               /* K_raw = a·Wkᵀ */
        if (ly->k_eq_v)
            memcpy(v, k, (size_t)(n * G * d) * sizeof *v);             /* V_raw = K_raw (k_eq_v) */
        else
            kern_matmul(&r->kt, &L->v, a, n, v, r->threads);           /* V_raw = a·Wvᵀ */
        heads_norm_rope(k, n, G, d, L->k_norm, eps, rope, f->p0);      /* k_norm, RoPE */
        heads_norm_rope(v, n, G, d, NULL, eps, NULL, f->p0);           /* v_norm (no weight, no RoPE) */
    }
    int src = ly->kv_src;                                              /* self, or the source layer */
    struct attn_job j = {.q = q, .out = o, .kv = {&r->cache[src], f->k_new[src], f->v_new[src]}, .n = n,
                         .p0 = f->p0, .Nq = Nq, .d = d, .group = Nq / G,
                         .window = ly->type == LT_SLIDING ? c->sliding_window : 0, .key_mask = key_mask};
    kern_parallel(r->threads, n * Nq, attn_task, &j);
    kern_matmul(&r->kt, &L->o, o, n, a, r->threads);                   /* a = O·Woᵀ */
    free(q);
    free(o);
    return ERR_OK;
}

/* ---- feed-forward ---- */

/* §3.7: out[n, H] = (gelu(z·Wgᵀ) ⊙ z·Wuᵀ)·Wdᵀ */
static int mlp(struct runner *r, const struct wmat *wg, const struct wmat *wu, const struct wmat *wd, const float *z,
               int64_t n, float *out, struct err *e)
{
    int64_t I = wg->rows;
    float *g = malloc((size_t)(n * I) * sizeof *g), *u = malloc((size_t)(n * I) * sizeof *u);
    if (!g || !u) {
        free(g);
        free(u);
        return err_set(e, ERR_NOMEM, "MLP buffers");
    }
    kern_matmul(&r->kt, wg, z, n, g, r->threads);
    kern_matmul(&r->kt, wu, z, n, u, r->threads);
    for (int64_t k = 0; k < n * I; k++)
        g[k] = kern_gelu(g[k]) * u[k];
    kern_matmul(&r->kt, wd, g, n, out, r->threads);
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
    float *z = malloc((size_t)(H + E) * sizeof *z), *logit = z ? z + H : NULL; /* [H] normed input, [E] logits */
    if (!z)
        return err_set(e, ERR_NOMEM, "router buffers");
    /* router: unweighted RMSNorm × scale × H^-½, logits, softmax over all experts */
    kern_rmsnorm(z, resid, NULL, H, (float)c->rms_eps);
    float hs = (float)(1.0 / sqrt((double)H));
    for (int64_t k = 0; k < H; k++)
        z[k] = z[k] * L->router_scale[k] * hs;
    kern_matmul(&r->kt, &L->router, z, 1, logit, 1);
    kern_softmax(logit, E);
    /* top-k by probability (ties: lower expert index), renormalized, × per_expert_scale */
    int64_t top[64];
    float w[64], sum = 0.0f;
    for (int64_t k = 0; k < K && k < 64; k++) {
        int64_t best = -1;
        for (int64_t x = 0; x < E; x++) {
            bool taken = false;
            for (int64_t q = 0; q < k; q++)
                taken |= top[q] == x;
            if (!taken && (best < 0 || logit[x] > logit[best]))
                best = x;
        }
        top[k] = best;
        w[k] = logit[best];
        sum += w[k];
    }
    memset(out, 0, (size_t)H * sizeof *out);
    float *eo = malloc((size_t)H * sizeof *eo);
    int rc = eo ? ERR_OK : err_set(e, ERR_NOMEM, "expert buffer");
    for (int64_t k = 0; k < K && k < 64 && rc == ERR_OK; k++) {
        float wk = w[k] / sum * L->per_expert_scale[top[k]];
        struct wmat g = kern_wmat_expert(&L->ex_gate, top[k]), u = kern_wmat_expert(&L->ex_up, top[k]),
                    dn = kern_wmat_expert(&L->ex_down, top[k]);
        rc = mlp(r, &g, &u, &dn, y, 1, eo, e);
        for (int64_t x = 0; rc == ERR_OK && x < H; x++)
            out[x] += wk * eo[x];
    }
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
        kern_rmsnorm(z + t * H, x + t * H, L->ln_pre_ff, H, eps);        /* pre_feedforward_layernorm */
    int rc = mlp(r, &L->gate, &L->up, &L->down, z, n, f, e);            /* dense MLP */
    if (rc == ERR_OK && c->moe) {
        float *f2 = malloc((size_t)H * sizeof *f2);
        for (int64_t t = 0; t < n && rc == ERR_OK; t++) {
            if (!f2) {
                rc = err_set(e, ERR_NOMEM, "MoE buffer");
                break;
            }
            kern_rmsnorm(f + t * H, f + t * H, L->ln_post_ff1, H, eps);   /* dense branch post-norm */
            kern_rmsnorm(z + t * H, x + t * H, L->ln_pre_ff2, H, eps);    /* experts' pre-norm */
            rc = moe_token(r, L, x + t * H, z + t * H, f2, e);            /* routed experts */
            kern_rmsnorm(f2, f2, L->ln_post_ff2, H, eps);                 /* expert branch post-norm */
            for (int64_t k = 0; k < H; k++)
                f[t * H + k] += f2[k];
        }
        free(f2);
    }
    for (int64_t t = 0; t < n; t++)
        kern_rmsnorm(f + t * H, f + t * H, L->ln_post_ff, H, eps);       /* post_feedforward_layernorm */
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
    kern_matmul(&r->kt, &m->ple_model_proj, h0, n, ple, r->threads);  /* context part [n, L·P] */
    float hs = (float)(1.0 / sqrt((double)H)), sp = sqrtf((float)P), r2 = (float)(1.0 / sqrt(2.0));
    for (int64_t t = 0; t < n; t++) {
        kern_row_f32(&m->ple_embed, tokens[t], tok);                    /* token part */
        for (int64_t l = 0; l < L; l++) {
            float *s = ple + (t * L + l) * P;
            for (int64_t k = 0; k < P; k++)
                s[k] *= hs;
            kern_rmsnorm(s, s, m->ple_proj_norm, P, (float)c->rms_eps);
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
    for (int64_t t = 0; t < n; t++)
        if (tokens[t] < 0 || tokens[t] >= c->vocab_size || (c->ple_dim && tokens[t] >= c->ple_vocab))
            return err_set(e, ERR_RANGE, "token %d at index %lld is outside the vocabulary [0, %lld)", tokens[t],
                           (long long)t, (long long)c->vocab_size);
    return ERR_OK;
}

int runner_forward(struct runner *r, const int32_t *tokens, int64_t n, float *logits, bool all_rows,
                   const uint8_t *key_mask, struct err *e)
{
    const struct model *m = r->m;
    const struct gp_config *c = &m->cfg;
    int64_t H = c->hidden_size, V = c->vocab_size, Lc = c->n_layers, p0 = r->pos;
    float eps = (float)c->rms_eps;
    int rc = check_tokens(c, tokens, n, e);
    if (rc != ERR_OK || n <= 0)
        return rc;
    struct fwd f = {r, n, p0, calloc((size_t)Lc, sizeof(float *)), calloc((size_t)Lc, sizeof(float *))};
    float *x = malloc((size_t)(n * H) * sizeof *x);                      /* residual stream [n, H] */
    float *a = malloc((size_t)(n * H) * sizeof *a);                      /* branch [n, H] */
    float *ple = c->ple_dim ? malloc((size_t)(n * Lc * c->ple_dim) * sizeof *ple) : NULL; /* [n, L, P] */
    float *g = c->ple_dim ? malloc((size_t)(n * c->ple_dim) * sizeof *g) : NULL;          /* [n, P] */
    if (!f.k_new || !f.v_new || !x || !a || (c->ple_dim && (!ple || !g))) {
        rc = err_set(e, ERR_NOMEM, "forward buffers for %lld tokens", (long long)n);
        goto out;
    }
    for (int64_t i = 0; i < Lc && rc == ERR_OK; i++) {
        if (c->layers[i].shared)
            continue;
        int64_t dim = r->cache[i].dim;
        f.k_new[i] = malloc((size_t)(n * dim) * sizeof(float));
        f.v_new[i] = malloc((size_t)(n * dim) * sizeof(float));
        if (!f.k_new[i] || !f.v_new[i])
            rc = err_set(e, ERR_NOMEM, "chunk K/V buffers");
    }
    if (rc != ERR_OK)
        goto out;

    float s_e = sqrtf((float)H);                                         /* §3.2 embedding scale √H */
    for (int64_t t = 0; t < n; t++) {
        kern_row_f32(&m->embed, tokens[t], x + t * H);
        for (int64_t k = 0; k < H; k++)
            x[t * H + k] *= s_e;
    }
    if (c->ple_dim && (rc = per_layer_inputs(r, tokens, x, n, ple, e)) != ERR_OK)
        goto out;

    for (int64_t i = 0; i < Lc && rc == ERR_OK; i++) {
        const struct layer_weights *L = &m->layers[i];
        for (int64_t t = 0; t < n; t++)
            kern_rmsnorm(a + t * H, x + t * H, L->ln_in, H, eps);          /* 1. input_layernorm */
        if ((rc = attention(&f, i, a, key_mask, e)) != ERR_OK)            /* 2. attention */
            break;
        for (int64_t t = 0; t < n; t++) {
            kern_rmsnorm(a + t * H, a + t * H, L->ln_post_attn, H, eps);   /* 3. post_attention_layernorm */
            for (int64_t k = 0; k < H; k++)
                x[t * H + k] += a[t * H + k];                              /* 4. residual */
        }
        if ((rc = feed_forward(r, i, x, n, a, e)) != ERR_OK)               /* 5-6. feed-forward */
            break;
        for (int64_t k = 0; k < n * H; k++)
            x[k] += a[k];                                                  /* 7. residual */
        if (c->ple_dim) {                                                  /* 8. per-layer input gate */
            int64_t P = c->ple_dim;
            kern_matmul(&r->kt, &L->ple_gate, x, n, g, r->threads);
            for (int64_t t = 0; t < n; t++)
                for (int64_t k = 0; k < P; k++)
                    g[t * P + k] = kern_gelu(g[t * P + k]) * ple[(t * Lc + i) * P + k];
            kern_matmul(&r->kt, &L->ple_proj, g, n, a, r->threads);
            for (int64_t t = 0; t < n; t++) {
                kern_rmsnorm(a + t * H, a + t * H, L->ln_post_ple, H, eps);
                for (int64_t k = 0; k < H; k++)
                    x[t * H + k] += a[t * H + k];
            }
        }
        for (int64_t k = 0; k < n * H; k++)
            x[k] *= L->layer_scalar;                                       /* 9. layer_scalar */
    }
    if (rc != ERR_OK)
        goto out;

    /* §3.9: final norm, tied head, soft-cap */
    int64_t first = all_rows ? 0 : n - 1, rows = n - first;
    for (int64_t t = first; t < n; t++)
        kern_rmsnorm(a + (t - first) * H, x + t * H, m->final_norm, H, eps);
    kern_matmul(&r->kt, &m->embed, a, rows, logits, r->threads);
    if (c->has_softcap) {
        float cap = (float)c->softcap;
        for (int64_t k = 0; k < rows * V; k++)
            logits[k] = cap * tanhf(logits[k] / cap);
    }

    /* commit this chunk's keys and values to the caches (§4) */
    for (int64_t i = 0; i < Lc && rc == ERR_OK; i++) {
        struct kv_cache *kc = &r->cache[i];
        if (c->layers[i].shared || (rc = cache_reserve(kc, p0 + n, e)) != ERR_OK)
            continue;
        for (int64_t t = 0; t < n; t++) {
            int64_t slot = kc->ring ? (p0 + t) % kc->cap : p0 + t;
            memcpy(kc->k + slot * kc->dim, f.k_new[i] + t * kc->dim, (size_t)kc->dim * sizeof(float));
            memcpy(kc->v + slot * kc->dim, f.v_new[i] + t * kc->dim, (size_t)kc->dim * sizeof(float));
        }
    }
    if (rc == ERR_OK)
        r->pos = p0 + n;
out:
    for (int64_t i = 0; f.k_new && i < Lc; i++) {
        free(f.k_new[i]);
        free(f.v_new[i]);
    }
    free(f.k_new);
    free(f.v_new);
    free(x);
    free(a);
    free(ple);
    free(g);
    return rc;
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
