#include "model/layout.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LQ (TR_LAYER | TR_QUANT)
#define L TR_LAYER
#define MOE(f) (TR_LAYER | TR_MOE | (f))
#define MQ(f) MOE(TR_QUANT | (f))
#define PLE(f) (TR_PLE | (f))

const struct tensor_row tensor_table[TENSOR_KINDS] = {
    [TK_EMBED] = {"embed_tokens", {TD_V, TD_H}, TR_QUANT | TR_TABLE, "token_embd.weight", 0},
    [TK_PLE_EMBED] = {"embed_tokens_per_layer", {TD_VPLE, TD_LP}, PLE(TR_QUANT | TR_TABLE), "per_layer_token_embd.weight", 0},
    [TK_PLE_MODEL_PROJ] = {"per_layer_model_projection", {TD_LP, TD_H}, PLE(TR_QUANT), "per_layer_model_proj.weight", 0},
    [TK_PLE_PROJ_NORM] = {"per_layer_projection_norm.weight", {TD_P}, PLE(0), "per_layer_proj_norm.weight", 0},
    [TK_LN_IN] = {"input_layernorm.weight", {TD_H}, L, "attn_norm.weight", 0},
    [TK_Q] = {"self_attn.q_proj", {TD_QD, TD_H}, LQ, "attn_q.weight", 0},
    [TK_Q_NORM] = {"self_attn.q_norm.weight", {TD_D}, L, "attn_q_norm.weight", 0},
    [TK_K] = {"self_attn.k_proj", {TD_KVD, TD_H}, LQ | TR_KV, "attn_k.weight", 0},
    [TK_K_NORM] = {"self_attn.k_norm.weight", {TD_D}, L | TR_KV, "attn_k_norm.weight", 0},
    [TK_V] = {"self_attn.v_proj", {TD_KVD, TD_H}, LQ | TR_KV | TR_NOT_KEQV, "attn_v.weight", 0},
    [TK_O] = {"self_attn.o_proj", {TD_H, TD_QD}, LQ, "attn_output.weight", 0},
    [TK_LN_POST_ATTN] = {"post_attention_layernorm.weight", {TD_H}, L, "post_attention_norm.weight", 0},
    [TK_LN_PRE_FF] = {"pre_feedforward_layernorm.weight", {TD_H}, L, "ffn_norm.weight", 0},
    [TK_GATE] = {"mlp.gate_proj", {TD_I, TD_H}, LQ, "ffn_gate.weight", 0},
    [TK_UP] = {"mlp.up_proj", {TD_I, TD_H}, LQ, "ffn_up.weight", 0},
    [TK_DOWN] = {"mlp.down_proj", {TD_H, TD_I}, LQ, "ffn_down.weight", 0},
    [TK_LN_POST_FF1] = {"post_feedforward_layernorm_1.weight", {TD_H}, MOE(0), "post_ffw_norm_1.weight", 0},
    [TK_ROUTER] = {"router.proj", {TD_E, TD_H}, MQ(TR_ROUTER), "ffn_gate_inp.weight", 0},
    [TK_ROUTER_SCALE] = {"router.scale", {TD_H}, MOE(0), "ffn_gate_inp.scale", 0},
    [TK_PER_EXPERT_SCALE] = {"router.per_expert_scale", {TD_E}, MOE(0), "ffn_down_exps.scale", 0},
    [TK_LN_PRE_FF2] = {"pre_feedforward_layernorm_2.weight", {TD_H}, MOE(0), "pre_ffw_norm_2.weight", 0},
    [TK_EX_GATE_UP_HF] = {"experts.gate_up_proj", {TD_E, TD_2M, TD_H}, MOE(TR_HF), "ffn_gate_up_exps.weight", TK_EX_GATE},
    [TK_EX_DOWN_HF] = {"experts.down_proj", {TD_E, TD_H, TD_M}, MOE(TR_HF), "ffn_down_exps.weight", TK_EX_DOWN},
    [TK_EX_GATE_MLX] = {"experts.switch_glu.gate_proj", {TD_E, TD_M, TD_H}, MQ(TR_MLX), "ffn_gate_exps.weight", TK_EX_GATE},
    [TK_EX_UP_MLX] = {"experts.switch_glu.up_proj", {TD_E, TD_M, TD_H}, MQ(TR_MLX), "ffn_up_exps.weight", TK_EX_UP},
    [TK_EX_DOWN_MLX] = {"experts.switch_glu.down_proj", {TD_E, TD_H, TD_M}, MQ(TR_MLX), NULL, TK_EX_DOWN},
    [TK_EX_GATE] = {"experts.gate_proj", {TD_E, TD_M, TD_H}, MQ(TR_CANON), NULL, 0},
    [TK_EX_UP] = {"experts.up_proj", {TD_E, TD_M, TD_H}, MQ(TR_CANON), NULL, 0},
    [TK_EX_DOWN] = {"experts.down_proj", {TD_E, TD_H, TD_M}, MQ(TR_CANON), NULL, 0},
    [TK_LN_POST_FF2] = {"post_feedforward_layernorm_2.weight", {TD_H}, MOE(0), "post_ffw_norm_2.weight", 0},
    [TK_LN_POST_FF] = {"post_feedforward_layernorm.weight", {TD_H}, L, "post_ffw_norm.weight", 0},
    [TK_PLE_GATE] = {"per_layer_input_gate", {TD_P, TD_H}, PLE(LQ), "inp_gate.weight", 0},
    [TK_PLE_PROJ] = {"per_layer_projection", {TD_H, TD_P}, PLE(LQ), "proj.weight", 0},
    [TK_LN_POST_PLE] = {"post_per_layer_input_norm.weight", {TD_H}, PLE(L), "post_norm.weight", 0},
    [TK_LAYER_SCALAR] = {"layer_scalar", {TD_1}, L, "layer_output_scale.weight", 0},
    [TK_NORM] = {"norm.weight", {TD_H}, 0, "output_norm.weight", 0},
};
#undef LQ
#undef L
#undef MOE
#undef MQ
#undef PLE

static uint64_t dim(const struct gp_config *c, enum tensor_dim d, int layer)
{
    const struct cfg_layer *ly = layer >= 0 ? &c->layers[layer] : NULL;
    switch (d) {
    case TD_1: return 1;
    case TD_V: return (uint64_t)c->vocab_size;
    case TD_H: return (uint64_t)c->hidden_size;
    case TD_P: return (uint64_t)c->ple_dim;
    case TD_LP: return (uint64_t)(c->n_layers * c->ple_dim);
    case TD_VPLE: return (uint64_t)c->ple_vocab;
    case TD_D: return (uint64_t)ly->head_dim;
    case TD_QD: return (uint64_t)(c->n_heads * ly->head_dim);
    case TD_KVD: return (uint64_t)(ly->kv_heads * ly->head_dim);
    case TD_I: return (uint64_t)ly->mlp_width;
    case TD_E: return (uint64_t)c->n_experts;
    case TD_M: return (uint64_t)c->moe_intermediate;
    case TD_2M: return 2 * (uint64_t)c->moe_intermediate;
    }
    return 0;
}

void layout_entry(const struct gp_config *c, enum tensor_kind kind, int layer, struct layout_entry *le)
{
    const struct tensor_row *r = &tensor_table[kind];
    memset(le, 0, sizeof *le);
    char *path = r->flags & TR_QUANT ? le->module : le->name;
    if (layer >= 0)
        snprintf(path, LAYOUT_NAME_MAX, "layers.%d.%s", layer, r->name);
    else
        snprintf(path, LAYOUT_NAME_MAX, "%s", r->name);
    if (r->flags & TR_QUANT)
        snprintf(le->name, sizeof le->name, "%.*s.weight", (int)sizeof le->name - 8, le->module);
    le->kind = kind;
    le->flags = r->flags;
    le->layer = layer;
    while (le->rank < 3 && r->dim[le->rank]) {
        le->shape[le->rank] = dim(c, (enum tensor_dim)r->dim[le->rank], layer);
        le->rank++;
    }
    le->redundant = r->flags & TR_KV && c->layers[layer].shared;
}

/* Whether row k is in the set of a config (at layer i for a per-layer row). */
static bool present(const struct gp_config *c, enum expert_form form, enum tensor_kind k, int i)
{
    static const unsigned only[] = {[EXPERTS_FUSED] = TR_HF, [EXPERTS_SPLIT] = TR_MLX, [EXPERTS_CANON] = TR_CANON};
    unsigned f = tensor_table[k].flags;
    return !(f & TR_MOE && !c->moe) && !(f & TR_PLE && !c->ple_dim) &&
           !(f & TR_NOT_KEQV && c->layers[i].k_eq_v) && !(f & (TR_HF | TR_MLX | TR_CANON) && !(f & only[form]));
}

int layout_build(const struct gp_config *c, enum expert_form form, struct layout_entry **out, size_t *n,
                 struct err *e)
{
    size_t cap = 0, k = 0;
    for (int t = 0; t < TENSOR_KINDS; t++)
        cap += tensor_table[t].flags & TR_LAYER ? (size_t)c->n_layers : 1;
    struct layout_entry *v = malloc(cap * sizeof *v);
    if (!v)
        return err_set(e, ERR_NOMEM, "cannot allocate the expected tensor list (%zu entries)", cap);
    for (int t = 0; t < TENSOR_KINDS; t++) {
        if (!(tensor_table[t].flags & TR_LAYER)) {
            if (present(c, form, (enum tensor_kind)t, 0))
                layout_entry(c, (enum tensor_kind)t, -1, &v[k++]);
            continue;
        }
        if (t > 0 && tensor_table[t - 1].flags & TR_LAYER)
            continue; /* the layer rows: written all at once at the first */
        for (int i = 0; i < c->n_layers; i++)
            for (int r = t; r < TENSOR_KINDS && tensor_table[r].flags & TR_LAYER; r++)
                if (present(c, form, (enum tensor_kind)r, i))
                    layout_entry(c, (enum tensor_kind)r, i, &v[k++]);
    }
    *out = v;
    *n = k;
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
