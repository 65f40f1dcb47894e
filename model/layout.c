#include "model/layout.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct builder {
    struct layout_entry *v;
    size_t n, cap;
};

__attribute__((format(printf, 6, 7))) static bool add(struct builder *b, bool quantizable, int layer, int rank,
                                                      const uint64_t *shape, const char *fmt, ...)
{
    if (b->n == b->cap) {
        size_t cap = b->cap ? 2 * b->cap : 64;
        struct layout_entry *v = realloc(b->v, cap * sizeof *v);
        if (!v)
            return false;
        b->v = v;
        b->cap = cap;
    }
    struct layout_entry *le = &b->v[b->n++];
    memset(le, 0, sizeof *le);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(le->module, sizeof le->module, fmt, ap);
    va_end(ap);
    if (quantizable) {
        snprintf(le->name, sizeof le->name, "%.*s.weight", (int)sizeof le->name - 8, le->module);
    } else {
        memcpy(le->name, le->module, sizeof le->name);
        le->module[0] = 0;
    }
    le->layer = layer;
    le->rank = rank;
    memcpy(le->shape, shape, (size_t)rank * sizeof *shape);
    return true;
}

#define S1(a) ((const uint64_t[]){(uint64_t)(a)})
#define S2(a, b) ((const uint64_t[]){(uint64_t)(a), (uint64_t)(b)})
#define S3(a, b, c) ((const uint64_t[]){(uint64_t)(a), (uint64_t)(b), (uint64_t)(c)})

static bool add_layer(struct builder *b, const struct gp_config *c, int i, enum expert_form form)
{
    const struct cfg_layer *ly = &c->layers[i];
    uint64_t H = (uint64_t)c->hidden_size, d = (uint64_t)ly->head_dim, G = (uint64_t)ly->kv_heads;
    uint64_t Nq = (uint64_t)c->n_heads, I = (uint64_t)ly->mlp_width, P = (uint64_t)c->ple_dim;
    bool ok = true;
    ok &= add(b, false, i, 1, S1(H), "layers.%d.input_layernorm.weight", i);
    ok &= add(b, true, i, 2, S2(Nq * d, H), "layers.%d.self_attn.q_proj", i);
    ok &= add(b, false, i, 1, S1(d), "layers.%d.self_attn.q_norm.weight", i);
    /* K/V: owned by layers < F0; shared layers may still carry them (PTQ exports). */
    size_t kv_first = b->n;
    ok &= add(b, true, i, 2, S2(G * d, H), "layers.%d.self_attn.k_proj", i);
    ok &= add(b, false, i, 1, S1(d), "layers.%d.self_attn.k_norm.weight", i);
    if (!ly->k_eq_v)
        ok &= add(b, true, i, 2, S2(G * d, H), "layers.%d.self_attn.v_proj", i);
    if (ok && ly->shared)
        for (size_t k = kv_first; k < b->n; k++)
            b->v[k].redundant = true;
    ok &= add(b, true, i, 2, S2(H, Nq * d), "layers.%d.self_attn.o_proj", i);
    ok &= add(b, false, i, 1, S1(H), "layers.%d.post_attention_layernorm.weight", i);
    ok &= add(b, false, i, 1, S1(H), "layers.%d.pre_feedforward_layernorm.weight", i);
    ok &= add(b, true, i, 2, S2(I, H), "layers.%d.mlp.gate_proj", i);
    ok &= add(b, true, i, 2, S2(I, H), "layers.%d.mlp.up_proj", i);
    ok &= add(b, true, i, 2, S2(H, I), "layers.%d.mlp.down_proj", i);
    if (c->moe) {
        uint64_t E = (uint64_t)c->n_experts, M = (uint64_t)c->moe_intermediate;
        ok &= add(b, false, i, 1, S1(H), "layers.%d.post_feedforward_layernorm_1.weight", i);
        ok &= add(b, true, i, 2, S2(E, H), "layers.%d.router.proj", i);
        if (ok)
            b->v[b->n - 1].router = true;
        ok &= add(b, false, i, 1, S1(H), "layers.%d.router.scale", i);
        ok &= add(b, false, i, 1, S1(E), "layers.%d.router.per_expert_scale", i);
        ok &= add(b, false, i, 1, S1(H), "layers.%d.pre_feedforward_layernorm_2.weight", i);
        if (form == EXPERTS_FUSED) {
            ok &= add(b, false, i, 3, S3(E, 2 * M, H), "layers.%d.experts.gate_up_proj", i);
            ok &= add(b, false, i, 3, S3(E, H, M), "layers.%d.experts.down_proj", i);
        } else {
            ok &= add(b, true, i, 3, S3(E, M, H), "layers.%d.experts.switch_glu.gate_proj", i);
            ok &= add(b, true, i, 3, S3(E, M, H), "layers.%d.experts.switch_glu.up_proj", i);
            ok &= add(b, true, i, 3, S3(E, H, M), "layers.%d.experts.switch_glu.down_proj", i);
        }
        ok &= add(b, false, i, 1, S1(H), "layers.%d.post_feedforward_layernorm_2.weight", i);
    }
    ok &= add(b, false, i, 1, S1(H), "layers.%d.post_feedforward_layernorm.weight", i);
    if (P > 0) {
        ok &= add(b, true, i, 2, S2(P, H), "layers.%d.per_layer_input_gate", i);
        ok &= add(b, true, i, 2, S2(H, P), "layers.%d.per_layer_projection", i);
        ok &= add(b, false, i, 1, S1(H), "layers.%d.post_per_layer_input_norm.weight", i);
    }
    ok &= add(b, false, i, 1, S1(1), "layers.%d.layer_scalar", i);
    return ok;
}

int layout_build(const struct gp_config *c, enum expert_form form, struct layout_entry **out, size_t *n,
                 struct err *e)
{
    struct builder b = {0};
    uint64_t V = (uint64_t)c->vocab_size, H = (uint64_t)c->hidden_size, L = (uint64_t)c->n_layers;
    uint64_t P = (uint64_t)c->ple_dim;
    bool ok = add(&b, true, -1, 2, S2(V, H), "embed_tokens");
    if (P > 0) {
        ok &= add(&b, true, -1, 2, S2(c->ple_vocab, L * P), "embed_tokens_per_layer");
        ok &= add(&b, true, -1, 2, S2(L * P, H), "per_layer_model_projection");
        ok &= add(&b, false, -1, 1, S1(P), "per_layer_projection_norm.weight");
    }
    for (int i = 0; ok && i < (int)L; i++)
        ok &= add_layer(&b, c, i, form);
    ok &= add(&b, false, -1, 1, S1(H), "norm.weight");
    if (!ok) {
        free(b.v);
        return err_set(e, ERR_NOMEM, "cannot allocate the expected tensor list (%zu entries)", b.n);
    }
    *out = b.v;
    *n = b.n;
    return ERR_OK;
}

bool layout_quant_shapes(const struct layout_entry *le, int bits, int group_size, uint64_t wshape[3],
                         uint64_t sshape[3])
{
    int r = le->rank;
    uint64_t in = le->shape[r - 1];
    if (r < 2 || group_size <= 0 || in % (uint64_t)group_size != 0 || (in * (uint64_t)bits) % 32 != 0)
        return false;
    for (int k = 0; k < r - 1; k++)
        wshape[k] = sshape[k] = le->shape[k];
    wshape[r - 1] = in * (uint64_t)bits / 32;
    sshape[r - 1] = in / (uint64_t)group_size;
    return true;
}
