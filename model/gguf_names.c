#include "model/gguf_names.h"

#include <stdio.h>
#include <string.h>

/* {GGUF, text model}: per layer ("blk.N." ↔ "layers.N."), then global. */
static const char *const layer_names[][2] = {
    {"attn_norm.weight", "input_layernorm.weight"},
    {"attn_q.weight", "self_attn.q_proj.weight"},
    {"attn_k.weight", "self_attn.k_proj.weight"},
    {"attn_v.weight", "self_attn.v_proj.weight"},
    {"attn_output.weight", "self_attn.o_proj.weight"},
    {"attn_q_norm.weight", "self_attn.q_norm.weight"},
    {"attn_k_norm.weight", "self_attn.k_norm.weight"},
    {"post_attention_norm.weight", "post_attention_layernorm.weight"},
    {"ffn_norm.weight", "pre_feedforward_layernorm.weight"},
    {"ffn_gate.weight", "mlp.gate_proj.weight"},
    {"ffn_up.weight", "mlp.up_proj.weight"},
    {"ffn_down.weight", "mlp.down_proj.weight"},
    {"post_ffw_norm.weight", "post_feedforward_layernorm.weight"},
    {"pre_ffw_norm_2.weight", "pre_feedforward_layernorm_2.weight"},
    {"post_ffw_norm_1.weight", "post_feedforward_layernorm_1.weight"},
    {"post_ffw_norm_2.weight", "post_feedforward_layernorm_2.weight"},
    {"ffn_gate_inp.weight", "router.proj.weight"},
    {"ffn_gate_inp.scale", "router.scale"},
    {"ffn_down_exps.scale", "router.per_expert_scale"},
    {"ffn_gate_up_exps.weight", "experts.gate_up_proj"},
    {"ffn_gate_exps.weight", "experts.switch_glu.gate_proj.weight"},
    {"ffn_up_exps.weight", "experts.switch_glu.up_proj.weight"},
    {"ffn_down_exps.weight", "experts.down_proj"},
    {"layer_output_scale.weight", "layer_scalar"},
    {"inp_gate.weight", "per_layer_input_gate.weight"},
    {"proj.weight", "per_layer_projection.weight"},
    {"post_norm.weight", "post_per_layer_input_norm.weight"},
};
static const char *const global_names[][2] = {
    {"token_embd.weight", "embed_tokens.weight"},
    {"output.weight", "lm_head.weight"},
    {"output_norm.weight", "norm.weight"},
    {"per_layer_token_embd.weight", "embed_tokens_per_layer.weight"},
    {"per_layer_model_proj.weight", "per_layer_model_projection.weight"},
    {"per_layer_proj_norm.weight", "per_layer_projection_norm.weight"},
};

#define N(a) (sizeof a / sizeof a[0])

/* `from` with prefix `pre` + "%d." + a table entry of column `col` → `to_pre` + the other column. */
static bool map(const char *name, int col, const char *pre, const char *to_pre, char *out, size_t len)
{
    for (size_t i = 0; i < N(global_names); i++)
        if (!strcmp(name, global_names[i][col]))
            return snprintf(out, len, "%s", global_names[i][!col]) < (int)len;
    int layer, n = 0;
    size_t pl = strlen(pre);
    if (strncmp(name, pre, pl) || name[pl] < '0' || name[pl] > '9' || sscanf(name + pl, "%d.%n", &layer, &n) != 1 || n == 0 || layer < 0)
        return false;
    for (size_t i = 0; i < N(layer_names); i++)
        if (!strcmp(name + pl + n, layer_names[i][col]))
            return snprintf(out, len, "%s%d.%s", to_pre, layer, layer_names[i][!col]) < (int)len;
    return false;
}

bool gguf_name_to_text(const char *gguf, char *out, size_t len)
{
    return map(gguf, 0, "blk.", "layers.", out, len);
}

bool gguf_name_from_text(const char *text, char *out, size_t len)
{
    return map(text, 1, "layers.", "blk.", out, len);
}
