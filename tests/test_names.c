/* test_names.c - checkpoint key classification (MODEL.md §2.1
 * prefix families, §2.6 tensors to drop and the tower-collision hazard);
 * llama.cpp's names. */
#include <criterion/criterion.h>

#include <string.h>

#include "model/gguf_names.h"
#include "model/names.h"

struct name_case {
    const char *key;
    enum name_class cls;
    enum name_family fam;
    const char *rel; /* expected text-relative name, NULL when none */
    int layer;
};

/* Text keys of the three families (§2.1). */
static const struct name_case text_cases[] = {
    /* HF multimodal: model.language_model. */
    {"model.language_model.layers.3.self_attn.q_proj.weight", NC_TEXT, NF_HF, "layers.3.self_attn.q_proj.weight", 3},
    {"model.language_model.layers.15.self_attn.k_proj.weight", NC_TEXT, NF_HF, "layers.15.self_attn.k_proj.weight",
     15},
    {"model.language_model.layers.34.mlp.down_proj.weight", NC_TEXT, NF_HF, "layers.34.mlp.down_proj.weight", 34},
    {"model.language_model.layers.0.layer_scalar", NC_TEXT, NF_HF, "layers.0.layer_scalar", 0},
    {"model.language_model.embed_tokens.weight", NC_TEXT, NF_HF, "embed_tokens.weight", -1},
    {"model.language_model.embed_tokens_per_layer.weight", NC_TEXT, NF_HF, "embed_tokens_per_layer.weight", -1},
    {"model.language_model.norm.weight", NC_TEXT, NF_HF, "norm.weight", -1},
    {"model.language_model.layers.5.experts.gate_up_proj", NC_TEXT, NF_HF, "layers.5.experts.gate_up_proj", 5},
    /* MLX gemma4 / mlx-vlm: language_model.model. */
    {"language_model.model.layers.12.mlp.down_proj.scales", NC_TEXT, NF_MLX, "layers.12.mlp.down_proj.scales", 12},
    {"language_model.model.layers.7.router.proj.biases", NC_TEXT, NF_MLX, "layers.7.router.proj.biases", 7},
    {"language_model.model.layers.2.experts.switch_glu.gate_proj.weight", NC_TEXT, NF_MLX,
     "layers.2.experts.switch_glu.gate_proj.weight", 2},
    {"language_model.model.embed_tokens.weight", NC_TEXT, NF_MLX, "embed_tokens.weight", -1},
    {"language_model.model.per_layer_model_projection.weight", NC_TEXT, NF_MLX, "per_layer_model_projection.weight",
     -1},
    /* text-only (HF CausalLM, MLX gemma4_text): model. */
    {"model.layers.0.input_layernorm.weight", NC_TEXT, NF_TEXT, "layers.0.input_layernorm.weight", 0},
    {"model.layers.59.self_attn.o_proj.weight", NC_TEXT, NF_TEXT, "layers.59.self_attn.o_proj.weight", 59},
    {"model.layers.10.self_attn.k_norm.weight", NC_TEXT, NF_TEXT, "layers.10.self_attn.k_norm.weight", 10},
    {"model.norm.weight", NC_TEXT, NF_TEXT, "norm.weight", -1},
    {"model.per_layer_projection_norm.weight", NC_TEXT, NF_TEXT, "per_layer_projection_norm.weight", -1},
};

/* Towers and projectors (§2.6): classified by prefix whatever the layer. */
static const struct name_case tower_cases[] = {
    {"model.vision_tower.encoder.layers.15.self_attn.k_proj.linear.weight", NC_VISION, NF_NONE, NULL, -1},
    {"vision_tower.encoder.layers.15.self_attn.k_proj.linear.weight", NC_VISION, NF_NONE, NULL, -1},
    {"model.vision_tower.encoder.layers.15.self_attn.k_norm.weight", NC_VISION, NF_NONE, NULL, -1},
    {"vision_tower.encoder.layers.0.self_attn.q_proj.input_max", NC_VISION, NF_NONE, NULL, -1},
    {"model.vision_tower.patch_embedder.position_embedding_table", NC_VISION, NF_NONE, NULL, -1},
    {"vision_tower.std_bias", NC_VISION, NF_NONE, NULL, -1},
    {"model.vision_embedder.input_proj.weight", NC_VISION, NF_NONE, NULL, -1},
    {"vision_embedder.input_proj.weight", NC_VISION, NF_NONE, NULL, -1},
    {"model.audio_tower.layers.3.self_attn.k_proj.linear.weight", NC_AUDIO, NF_NONE, NULL, -1},
    {"audio_tower.layers.3.self_attn.k_proj.linear.weight", NC_AUDIO, NF_NONE, NULL, -1},
    {"model.audio_tower.layers.3.feed_forward1.ffw_layer_1.linear.output_min", NC_AUDIO, NF_NONE, NULL, -1},
    {"model.audio_tower.output_proj.bias", NC_AUDIO, NF_NONE, NULL, -1},
    {"model.embed_vision.embedding_projection.weight", NC_PROJECTOR, NF_NONE, NULL, -1},
    {"embed_vision.embedding_projection.weight", NC_PROJECTOR, NF_NONE, NULL, -1},
    {"model.embed_audio.embedding_projection.weight", NC_PROJECTOR, NF_NONE, NULL, -1},
    {"embed_audio.embedding_projection.weight", NC_PROJECTOR, NF_NONE, NULL, -1},
    {"multi_modal_projector.linear.weight", NC_PROJECTOR, NF_NONE, NULL, -1},
    {"model.multi_modal_projector.linear.weight", NC_PROJECTOR, NF_NONE, NULL, -1},
};

/* Clip scalars, rotary tables, lm_head, junk. */
static const struct name_case other_cases[] = {
    {"model.language_model.layers.2.self_attn.q_proj.input_min", NC_CLIP, NF_HF, NULL, -2},
    {"model.language_model.layers.2.self_attn.q_proj.input_max", NC_CLIP, NF_HF, NULL, -2},
    {"language_model.model.layers.4.mlp.down_proj.output_min", NC_CLIP, NF_MLX, NULL, -2},
    {"model.layers.4.mlp.up_proj.output_max", NC_CLIP, NF_TEXT, NULL, -2},
    {"model.language_model.rotary_emb.inv_freq", NC_ROTARY, NF_HF, NULL, -2},
    {"language_model.model.layers.0.self_attn.rotary_emb.inv_freq", NC_ROTARY, NF_MLX, NULL, -2},
    {"model.rotary_emb.inv_freq", NC_ROTARY, NF_TEXT, NULL, -2},
    {"lm_head.weight", NC_LM_HEAD, NF_NONE, NULL, -1},
    {"language_model.lm_head.weight", NC_LM_HEAD, NF_NONE, NULL, -1},
    {"", NC_UNKNOWN, NF_NONE, NULL, -1},
    {"foo.bar", NC_UNKNOWN, NF_NONE, NULL, -1},
    {"layers.0.mlp.down_proj.weight", NC_UNKNOWN, NF_NONE, NULL, -1},
    {"modelx.layers.0.mlp.down_proj.weight", NC_UNKNOWN, NF_NONE, NULL, -1},
    {"Model.layers.0.mlp.down_proj.weight", NC_UNKNOWN, NF_NONE, NULL, -1},
    {"model", NC_UNKNOWN, NF_NONE, NULL, -1},
    {"language_model.layers.0.mlp.down_proj.weight", NC_UNKNOWN, NF_NONE, NULL, -1},
    {"text_model.layers.0.mlp.down_proj.weight", NC_UNKNOWN, NF_NONE, NULL, -1},
    {"vision_towerx.encoder.layers.0.weight", NC_UNKNOWN, NF_NONE, NULL, -1},
    {"lm_head.bias", NC_UNKNOWN, NF_NONE, NULL, -1},
};

static void check(const struct name_case *c)
{
    struct name_info ni;
    memset(&ni, 0x5a, sizeof ni); /* every field must be set */
    names_classify(c->key, &ni);
    cr_assert_eq(ni.cls, c->cls, "'%s': class %s, expected %s", c->key, name_class_name(ni.cls),
                 name_class_name(c->cls));
    cr_assert_eq(ni.fam, c->fam, "'%s': family %s, expected %s", c->key, name_family_name(ni.fam),
                 name_family_name(c->fam));
    if (c->rel) {
        cr_assert_not_null(ni.rel, "'%s': no rel", c->key);
        cr_assert_str_eq(ni.rel, c->rel, "'%s'", c->key);
        /* rel points into the key, right after the family prefix */
        cr_assert_eq(ni.rel, c->key + strlen(name_family_prefix(c->fam)), "'%s': rel is not inside the key", c->key);
    } else if (c->cls != NC_CLIP && c->cls != NC_ROTARY) {
        cr_assert_null(ni.rel, "'%s': unexpected rel '%s'", c->key, ni.rel);
    }
    if (c->layer != -2)
        cr_assert_eq(ni.layer, c->layer, "'%s': layer %d, expected %d", c->key, ni.layer, c->layer);
}

Test(names, names_text_prefixes)
{
    for (size_t i = 0; i < sizeof text_cases / sizeof text_cases[0]; i++)
        check(&text_cases[i]);
}

Test(names, names_towers_and_projectors)
{
    for (size_t i = 0; i < sizeof tower_cases / sizeof tower_cases[0]; i++)
        check(&tower_cases[i]);
}

Test(names, names_clip_rotary_lm_head_unknown)
{
    for (size_t i = 0; i < sizeof other_cases / sizeof other_cases[0]; i++)
        check(&other_cases[i]);
}

Test(names, names_tower_collision)
{
    /* §2.6: E2B's vision layer 15 must never look like decoder layer 15 (F0 = 15). */
    struct name_info v, d;
    names_classify("model.vision_tower.encoder.layers.15.self_attn.k_proj.linear.weight", &v);
    names_classify("model.language_model.layers.15.self_attn.k_proj.weight", &d);
    cr_assert_eq(v.cls, NC_VISION);
    cr_assert_eq(v.layer, -1, "a tower key has no decoder layer");
    cr_assert_null(v.rel);
    cr_assert_eq(d.cls, NC_TEXT);
    cr_assert_eq(d.layer, 15);
}

Test(names, names_layer_index_strict)
{
    static const struct { const char *key; int layer; } t[] = {
        {"model.layers.07.mlp.down_proj.weight", -1},  /* leading zero: not layer 7 */
        {"model.layers.00.mlp.down_proj.weight", -1},
        {"model.layers.0.mlp.down_proj.weight", 0},
        {"model.layers.7.mlp.down_proj.weight", 7},
        {"model.layers.70.mlp.down_proj.weight", 70},
        {"model.layers.7x.mlp.down_proj.weight", -1},
        {"model.layers.x7.mlp.down_proj.weight", -1},
        {"model.layers..mlp.down_proj.weight", -1},
        {"model.layers.-1.mlp.down_proj.weight", -1},
        {"model.layers.+5.mlp.down_proj.weight", -1},  /* a sign is not a decimal index */
        {"model.layers. 5.mlp.down_proj.weight", -1},  /* nor is leading whitespace */
        {"model.layers.5", -1},                         /* no component after the index */
        {"model.layers.99999999999999999999999.mlp.weight", -1},
        {"model.language_model.layers.07.mlp.down_proj.weight", -1},
        {"language_model.model.layers.07.mlp.down_proj.weight", -1},
        {"model.mlp.layers.3.weight", -1},              /* "layers." must start the rel name */
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        struct name_info ni;
        names_classify(t[i].key, &ni);
        cr_assert_eq(ni.cls, NC_TEXT, "'%s' is still a text key", t[i].key);
        cr_assert_eq(ni.layer, t[i].layer, "'%s': layer %d, expected %d", t[i].key, ni.layer, t[i].layer);
    }
}

Test(names, names_family_prefixes)
{
    cr_assert_str_eq(name_family_prefix(NF_HF), "model.language_model.");
    cr_assert_str_eq(name_family_prefix(NF_MLX), "language_model.model.");
    cr_assert_str_eq(name_family_prefix(NF_TEXT), "model.");
    cr_assert_str_eq(name_family_prefix(NF_NONE), "");
    /* Each family's prefix classifies back to that family. */
    static const enum name_family fams[3] = {NF_HF, NF_MLX, NF_TEXT};
    for (int i = 0; i < 3; i++) {
        char key[128];
        strcpy(key, name_family_prefix(fams[i]));
        strcat(key, "layers.4.self_attn.v_proj.weight");
        struct name_info ni;
        names_classify(key, &ni);
        cr_assert_eq(ni.cls, NC_TEXT, "%s", key);
        cr_assert_eq(ni.fam, fams[i], "%s", key);
        cr_assert_str_eq(ni.rel, "layers.4.self_attn.v_proj.weight");
        cr_assert_eq(ni.layer, 4);
    }
}

Test(names, names_class_names_distinct)
{
    static const enum name_class all[] = {NC_TEXT, NC_VISION, NC_AUDIO, NC_PROJECTOR,
                                          NC_CLIP, NC_ROTARY, NC_LM_HEAD, NC_UNKNOWN};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        for (size_t j = i + 1; j < sizeof all / sizeof all[0]; j++)
            cr_assert_str_neq(name_class_name(all[i]), name_class_name(all[j]));
    cr_assert_str_eq(name_class_name(NC_TEXT), "text");
    cr_assert_str_eq(name_class_name(NC_UNKNOWN), "unknown");
}

/* llama.cpp's names (INPUTS.md §7.2), from the tensor table: both ways, the
 * experts in the forms GGUF stores them, the tied head, and names with none. */
Test(names, gguf_names_both_ways)
{
    static const char *const pairs[][2] = {
        {"blk.0.attn_q.weight", "layers.0.self_attn.q_proj.weight"},
        {"blk.12.attn_norm.weight", "layers.12.input_layernorm.weight"},
        {"blk.3.ffn_gate_inp.scale", "layers.3.router.scale"},
        {"blk.3.ffn_down_exps.scale", "layers.3.router.per_expert_scale"},
        {"blk.3.ffn_gate_up_exps.weight", "layers.3.experts.gate_up_proj"},
        {"blk.3.ffn_gate_exps.weight", "layers.3.experts.switch_glu.gate_proj.weight"},
        {"blk.3.ffn_down_exps.weight", "layers.3.experts.down_proj"},
        {"blk.7.layer_output_scale.weight", "layers.7.layer_scalar"},
        {"blk.7.proj.weight", "layers.7.per_layer_projection.weight"},
        {"token_embd.weight", "embed_tokens.weight"},
        {"per_layer_proj_norm.weight", "per_layer_projection_norm.weight"},
        {"output_norm.weight", "norm.weight"},
        {"output.weight", "lm_head.weight"},
    };
    char out[128];
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        cr_assert(gguf_name_to_text(pairs[i][0], out, sizeof out), "%s", pairs[i][0]);
        cr_assert_str_eq(out, pairs[i][1]);
        cr_assert(gguf_name_from_text(pairs[i][1], out, sizeof out), "%s", pairs[i][1]);
        cr_assert_str_eq(out, pairs[i][0]);
    }
    static const char *const none[] = {"rope_freqs.weight", "blk.x.attn_q.weight", "blk.3", "blk.1.token_embd.weight",
                                       "layers.0.experts.gate_proj.weight", "layers.0.experts.switch_glu.down_proj.weight",
                                       "layers.2.norm.weight", "attn_q.weight"};
    for (size_t i = 0; i < sizeof none / sizeof none[0]; i++)
        cr_assert(!gguf_name_to_text(none[i], out, sizeof out) && !gguf_name_from_text(none[i], out, sizeof out),
                  "%s", none[i]);
    cr_assert(!gguf_name_to_text("blk.0.attn_q.weight", out, 8), "a name longer than the buffer");
}
