/* test_config.c - Gemma 4 config.json parsing (MODEL.md §1.1-1.5,
 * INPUTS.md §3).
 *
 * The four official variants are embedded below, written from the §1.2 table,
 * and their derived per-layer quantities are checked against the §1.3
 * "Concrete" table. The two real-layout configs of the external goldens are
 * parsed when that folder exists. Invalid configs form a table; every entry
 * must give ERR_CONFIG and a message line naming the field. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>

#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "model/config.h"
#include "core/err.h"
#include "quant/quant.h"

/* ------------------------------------------------------------ the configs */

#define S "\"sliding_attention\""
#define F "\"full_attention\""
#define P5 S "," S "," S "," S "," F             /* E2B: (S,S,S,S,F) */
#define P6 S "," S "," S "," S "," S "," F       /* others: (S x5, F) */
#define ROPE                                                                                      \
    "\"rope_parameters\":{\"sliding_attention\":{\"rope_type\":\"default\",\"rope_theta\":10000.0}," \
    "\"full_attention\":{\"rope_type\":\"proportional\",\"partial_rotary_factor\":0.25,"          \
    "\"rope_theta\":1000000.0}}"
#define COMMON_TEXT "\"model_type\":\"gemma4_text\"," TEXT_FIELDS
#define TEXT_FIELDS                                                                                  \
    "\"head_dim\":256,\"global_head_dim\":512,\"vocab_size\":262144,"                               \
    "\"final_logit_softcapping\":30.0,\"tie_word_embeddings\":true,\"rms_norm_eps\":1e-06,"        \
    "\"hidden_activation\":\"gelu_pytorch_tanh\",\"attention_bias\":false,\"pad_token_id\":0,"     \
    "\"bos_token_id\":2,\"eos_token_id\":1," ROPE
#define MM_TAIL                                                                                      \
    "\"image_token_id\":258880,\"audio_token_id\":258881,\"video_token_id\":258884,"               \
    "\"boi_token_id\":255999,\"eoi_token_id\":258882,\"tie_word_embeddings\":true,\"eos_token_id\":[1,106]"

static const char cfg_e2b[] =
    "{\"architectures\":[\"Gemma4ForConditionalGeneration\"],\"model_type\":\"gemma4\",\"text_config\":{"
    "\"hidden_size\":1536,\"num_hidden_layers\":35,\"intermediate_size\":6144,\"num_attention_heads\":8,"
    "\"num_key_value_heads\":1,\"num_global_key_value_heads\":null,\"attention_k_eq_v\":false,"
    "\"num_kv_shared_layers\":20,\"hidden_size_per_layer_input\":256,\"vocab_size_per_layer_input\":262144,"
    "\"layer_types\":[" P5 "," P5 "," P5 "," P5 "," P5 "," P5 "," P5 "],\"sliding_window\":512,"
    "\"use_double_wide_mlp\":true,\"enable_moe_block\":false,\"max_position_embeddings\":131072,"
    "\"use_bidirectional_attention\":null," COMMON_TEXT "},"
    "\"vision_config\":{\"model_type\":\"gemma4_vision\",\"hidden_size\":768,\"num_hidden_layers\":16},"
    "\"audio_config\":{\"model_type\":\"gemma4_audio\",\"hidden_size\":1024}," MM_TAIL "}";

static const char cfg_e4b[] =
    "{\"architectures\":[\"Gemma4ForConditionalGeneration\"],\"model_type\":\"gemma4\",\"text_config\":{"
    "\"hidden_size\":2560,\"num_hidden_layers\":42,\"intermediate_size\":10240,\"num_attention_heads\":8,"
    "\"num_key_value_heads\":2,\"num_global_key_value_heads\":null,\"attention_k_eq_v\":false,"
    "\"num_kv_shared_layers\":18,\"hidden_size_per_layer_input\":256,\"vocab_size_per_layer_input\":262144,"
    "\"layer_types\":[" P6 "," P6 "," P6 "," P6 "," P6 "," P6 "," P6 "],\"sliding_window\":512,"
    "\"use_double_wide_mlp\":false,\"enable_moe_block\":false,\"max_position_embeddings\":131072,"
    "\"use_bidirectional_attention\":null," COMMON_TEXT "},"
    "\"vision_config\":{\"model_type\":\"gemma4_vision\",\"hidden_size\":768,\"num_hidden_layers\":16},"
    "\"audio_config\":{\"model_type\":\"gemma4_audio\",\"hidden_size\":1024}," MM_TAIL "}";

static const char cfg_26b[] =
    "{\"architectures\":[\"Gemma4ForConditionalGeneration\"],\"model_type\":\"gemma4\",\"text_config\":{"
    "\"hidden_size\":2816,\"num_hidden_layers\":30,\"intermediate_size\":2112,\"num_attention_heads\":16,"
    "\"num_key_value_heads\":8,\"num_global_key_value_heads\":2,\"attention_k_eq_v\":true,"
    "\"num_kv_shared_layers\":0,\"hidden_size_per_layer_input\":0,\"vocab_size_per_layer_input\":262144,"
    "\"layer_types\":[" P6 "," P6 "," P6 "," P6 "," P6 "],\"sliding_window\":1024,"
    "\"use_double_wide_mlp\":false,\"enable_moe_block\":true,\"num_experts\":128,\"top_k_experts\":8,"
    "\"moe_intermediate_size\":704,\"max_position_embeddings\":262144,"
    "\"use_bidirectional_attention\":\"vision\"," COMMON_TEXT "},"
    "\"vision_config\":{\"model_type\":\"gemma4_vision\",\"hidden_size\":1152,\"num_hidden_layers\":27},"
    "\"image_token_id\":258880,\"tie_word_embeddings\":true,\"eos_token_id\":[1,106]}";

/* 31B as a text-only checkpoint: gemma4_text, fields at the top level. */
static const char cfg_31b[] =
    "{\"architectures\":[\"Gemma4ForCausalLM\"],"
    "\"hidden_size\":5376,\"num_hidden_layers\":60,\"intermediate_size\":21504,\"num_attention_heads\":32,"
    "\"num_key_value_heads\":16,\"num_global_key_value_heads\":4,\"attention_k_eq_v\":true,"
    "\"num_kv_shared_layers\":0,\"hidden_size_per_layer_input\":0,"
    "\"layer_types\":[" P6 "," P6 "," P6 "," P6 "," P6 "," P6 "," P6 "," P6 "," P6 "," P6 "],"
    "\"sliding_window\":1024,\"use_double_wide_mlp\":false,\"enable_moe_block\":false,"
    "\"max_position_embeddings\":262144,\"use_bidirectional_attention\":\"vision\"," COMMON_TEXT "}";

/* The 12B as released (MODEL.md §1.1): gemma4_unified, the text config of the
 * unified class with the per-layer-input and MoE keys the HF export still
 * writes (0, and a stale vocab_size_per_layer_input). */
#define P6x8 P6 "," P6 "," P6 "," P6 "," P6 "," P6 "," P6 "," P6
#define TEXT_12B                                                                                                  \
    "\"hidden_size\":3840,\"num_hidden_layers\":48,\"intermediate_size\":15360,\"num_attention_heads\":16,"    \
    "\"num_key_value_heads\":8,\"num_global_key_value_heads\":1,\"attention_k_eq_v\":true,"                     \
    "\"num_kv_shared_layers\":0,\"layer_types\":[" P6x8 "],\"sliding_window\":1024,"                           \
    "\"use_double_wide_mlp\":false,\"max_position_embeddings\":262144,\"use_bidirectional_attention\":\"vision\","
static const char cfg_12b[] =
    "{\"architectures\":[\"Gemma4UnifiedForConditionalGeneration\"],\"model_type\":\"gemma4_unified\","
    "\"text_config\":{" TEXT_12B "\"hidden_size_per_layer_input\":0,\"vocab_size_per_layer_input\":262144,"
    "\"enable_moe_block\":false,\"num_experts\":null,\"top_k_experts\":null,\"moe_intermediate_size\":null,"
    "\"model_type\":\"gemma4_unified_text\"," TEXT_FIELDS "},"
    "\"vision_config\":{\"model_type\":\"gemma4_unified_vision\"},\"audio_config\":{\"model_type\":"
    "\"gemma4_unified_audio\"}," MM_TAIL "}";

/* Its text-only export: gemma4_unified_text at the top level, without the
 * keys its class does not declare (they mean no PLE and no MoE). */
static const char cfg_12b_text[] =
    "{\"architectures\":[\"Gemma4UnifiedForCausalLM\"]," TEXT_12B "\"model_type\":\"gemma4_unified_text\"," TEXT_FIELDS "}";

/* §1.3 Concrete table. */
struct variant {
    const char *name;
    const char *json;
    const char *model_type;
    bool nested;
    int64_t H, L, P;
    int full[10];
    int n_full;
    int F0;
    int own_sliding, own_full;
    int src_sliding, src_full; /* -1: no shared layers */
    int64_t I_low, I_shared;   /* I_i below F0, at and above F0 */
    int64_t Nq, d_slide, G_slide, d_full, G_full;
    bool keqv;
    bool moe;
    int64_t E, K, M;
    int64_t window;
};

static const struct variant variants[] = {
    {"E2B", cfg_e2b, "gemma4", true, 1536, 35, 256, {4, 9, 14, 19, 24, 29, 34}, 7, 15, 12, 3, 13, 14, 6144, 12288, 8, 256, 1,
     512, 1, false, false, 0, 0, 0, 512},
    {"E4B", cfg_e4b, "gemma4", true, 2560, 42, 256, {5, 11, 17, 23, 29, 35, 41}, 7, 24, 20, 4, 22, 23, 10240, 10240, 8, 256, 2,
     512, 2, false, false, 0, 0, 0, 512},
    {"26B-A4B", cfg_26b, "gemma4", true, 2816, 30, 0, {5, 11, 17, 23, 29}, 5, 30, 25, 5, -1, -1, 2112, 2112, 16, 256, 8, 512,
     2, true, true, 128, 8, 704, 1024},
    {"31B", cfg_31b, "gemma4_text", false, 5376, 60, 0, {5, 11, 17, 23, 29, 35, 41, 47, 53, 59}, 10, 60, 50, 10,
     -1, -1, 21504, 21504, 32, 256, 16, 512, 4, true, false, 0, 0, 0, 1024},
    {"12B", cfg_12b, "gemma4_unified", true, 3840, 48, 0, {5, 11, 17, 23, 29, 35, 41, 47}, 8, 48, 40, 8, -1, -1,
     15360, 15360, 16, 256, 8, 512, 1, true, false, 0, 0, 0, 1024},
    {"12B text-only", cfg_12b_text, "gemma4_unified_text", false, 3840, 48, 0, {5, 11, 17, 23, 29, 35, 41, 47}, 8,
     48, 40, 8, -1, -1, 15360, 15360, 16, 256, 8, 512, 1, true, false, 0, 0, 0, 1024},
};

static bool is_full(const struct variant *v, int i)
{
    for (int k = 0; k < v->n_full; k++)
        if (v->full[k] == i)
            return true;
    return false;
}

static int parse_str(struct gp_config *c, const char *json, struct err *e)
{
    return cfg_parse(c, json, strlen(json), "config.json", e);
}

static void check_variant(const struct variant *v, const struct gp_config *c)
{
    const char *n = v->name;
    cr_assert_eq(c->nested, v->nested, "%s nested", n);
    cr_assert_eq(c->hidden_size, v->H, "%s H", n);
    cr_assert_eq(c->n_layers, v->L, "%s L", n);
    cr_assert_eq(c->vocab_size, 262144, "%s V", n);
    cr_assert_eq(c->ple_dim, v->P, "%s P", n);
    cr_assert_eq(c->n_heads, v->Nq, "%s Nq", n);
    cr_assert_eq(c->first_shared, v->F0, "%s F0", n);
    cr_assert_eq(c->n_kv_shared, v->L - v->F0, "%s num_kv_shared_layers", n);
    cr_assert_eq(c->sliding_window, v->window, "%s W", n);
    cr_assert_eq(c->k_eq_v, v->keqv, "%s attention_k_eq_v", n);
    cr_assert_eq(c->moe, v->moe, "%s moe", n);
    if (v->moe) {
        cr_assert_eq(c->n_experts, v->E, "%s E", n);
        cr_assert_eq(c->top_k, v->K, "%s K", n);
        cr_assert_eq(c->moe_intermediate, v->M, "%s M", n);
    }
    cr_assert(c->has_softcap, "%s soft-cap", n);
    cr_assert_float_eq(c->softcap, 30.0, 0.0, "%s soft-cap value", n);
    cr_assert(c->tie_embeddings, "%s tied", n);
    cr_assert_float_eq(c->rms_eps, 1e-6, 1e-18, "%s eps", n);
    cr_assert_eq(c->rope[LT_SLIDING].kind, ROPE_DEFAULT, "%s", n);
    cr_assert_float_eq(c->rope[LT_SLIDING].theta, 10000.0, 0.0, "%s", n);
    cr_assert_eq(c->rope[LT_FULL].kind, ROPE_PROPORTIONAL, "%s", n);
    cr_assert_float_eq(c->rope[LT_FULL].theta, 1000000.0, 0.0, "%s", n);
    cr_assert_float_eq(c->rope[LT_FULL].partial, 0.25, 0.0, "%s", n);
    cr_assert_float_eq(c->rope[LT_FULL].factor, 1.0, 0.0, "%s", n);
    cr_assert_eq(cfg_last_full_layer(c), v->full[v->n_full - 1], "%s last full layer", n);
    cr_assert_eq(c->quant.mlx, false, "%s no quantization", n);
    cr_assert_eq(c->quant.global.quantized, false, "%s", n);

    int own[2] = {0, 0}, nfull = 0;
    for (int i = 0; i < v->L; i++) {
        const struct cfg_layer *ly = &c->layers[i];
        bool full = is_full(v, i);
        bool shared = i >= v->F0;
        nfull += ly->type == LT_FULL;
        cr_assert_eq(ly->type, full ? LT_FULL : LT_SLIDING, "%s layer %d type", n, i);
        cr_assert_eq(ly->shared, shared, "%s layer %d shared", n, i);
        if (!shared)
            own[ly->type]++;
        int want_src = !shared ? i : (full ? v->src_full : v->src_sliding);
        cr_assert_eq(ly->kv_src, want_src, "%s layer %d kv_src %d, expected %d", n, i, ly->kv_src, want_src);
        cr_assert_eq(ly->mlp_width, shared ? v->I_shared : v->I_low, "%s layer %d I_i %lld", n, i,
                     (long long)ly->mlp_width);
        cr_assert_eq(ly->head_dim, full ? v->d_full : v->d_slide, "%s layer %d head_dim", n, i);
        cr_assert_eq(ly->kv_heads, full ? v->G_full : v->G_slide, "%s layer %d kv heads %lld", n, i,
                     (long long)ly->kv_heads);
        cr_assert_eq(ly->k_eq_v, v->keqv && full, "%s layer %d k_eq_v (no v_proj) only on full layers", n, i);
        cr_assert_eq(c->n_heads % ly->kv_heads, 0, "%s layer %d GQA group", n, i);
    }
    cr_assert_eq(nfull, v->n_full, "%s number of full layers", n);
    cr_assert_eq(own[LT_SLIDING], v->own_sliding, "%s KV-owning sliding layers", n);
    cr_assert_eq(own[LT_FULL], v->own_full, "%s KV-owning full layers", n);
}

Test(config, cfg_official_variants)
{
    for (size_t k = 0; k < sizeof variants / sizeof variants[0]; k++) {
        struct gp_config c;
        struct err e = {0};
        int rc = parse_str(&c, variants[k].json, &e);
        cr_assert_eq(rc, ERR_OK, "%s: %s", variants[k].name, e.msg);
        cr_assert_str_eq(c.model_type, variants[k].model_type, "%s", variants[k].name);
        cr_assert_eq(c.unified, !strncmp(variants[k].model_type, "gemma4_unified", 14), "%s", variants[k].name);
        check_variant(&variants[k], &c);
        cfg_free(&c);
    }
}

Test(config, cfg_e2b_spot_checks)
{
    /* The single most error-prone rows of §1.3 / §1.3, spelled out. */
    struct gp_config c;
    struct err e = {0};
    cr_assert_eq(parse_str(&c, cfg_e2b, &e), ERR_OK, "%s", e.msg);
    cr_assert_eq(c.layers[14].mlp_width, 6144);
    cr_assert_eq(c.layers[15].mlp_width, 12288, "double-wide MLP starts at F0 = 15");
    cr_assert_eq(c.layers[34].mlp_width, 12288);
    cr_assert_eq(c.layers[15].kv_src, 13, "shared sliding reads 13, not 15 - F0");
    cr_assert_eq(c.layers[19].kv_src, 14, "shared full reads 14");
    cr_assert_eq(c.layers[34].kv_src, 14);
    cr_assert_eq(c.layers[33].kv_src, 13);
    cr_assert_eq(c.ple_vocab, 262144);
    cr_assert(c.double_wide);
    cfg_free(&c);
}

/* Serializes `root` after replacing/adding/deleting at dotted `path`
 * (value NULL = delete). Keys in the path contain no dots. */
static void mutate(struct json_object *root, const char *path, const char *value)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", path);
    struct json_object *o = root;
    char *save = NULL, *key = strtok_r(buf, ".", &save), *next;
    while ((next = strtok_r(NULL, ".", &save))) {
        struct json_object *child;
        cr_assert(json_object_object_get_ex(o, key, &child) && json_object_is_type(child, json_type_object),
                  "test setup: no object at '%s' in %s", key, path);
        o = child;
        key = next;
    }
    if (!value) {
        json_object_object_del(o, key);
        return;
    }
    struct json_object *v = json_tokener_parse(value);
    cr_assert(v || strcmp(value, "null") == 0, "test setup: bad JSON value %s", value);
    json_object_object_add(o, key, v);
}

struct mut {
    const char *path, *value;
};

/* Applies up to 4 mutations to `base` and returns malloc'ed JSON text. */
static char *mutated(const char *base, const struct mut *m, int n)
{
    struct json_object *root = json_tokener_parse(base);
    cr_assert_not_null(root, "test setup: base config is not JSON");
    for (int i = 0; i < n; i++)
        if (m[i].path)
            mutate(root, m[i].path, m[i].value);
    char *s = strdup(json_object_to_json_string_ext(root, JSON_C_TO_STRING_PLAIN));
    json_object_put(root);
    return s;
}

Test(config, cfg_nesting_text_config_vs_top_level)
{
    /* The same text model, nested under text_config (gemma4) or at the top
     * level (gemma4_text), gives identical derived quantities. */
    for (size_t k = 0; k < sizeof variants / sizeof variants[0]; k++) {
        const struct variant *v = &variants[k];
        struct json_object *root = json_tokener_parse(v->json);
        cr_assert_not_null(root);
        struct json_object *other;
        if (v->nested) {
            struct json_object *t;
            cr_assert(json_object_object_get_ex(root, "text_config", &t));
            other = json_object_get(t);
            json_object_object_add(other, "model_type", json_object_new_string("gemma4_text"));
        } else {
            other = json_object_new_object();
            json_object_object_add(other, "model_type", json_object_new_string("gemma4"));
            json_object_object_add(other, "text_config", json_object_get(root));
        }
        char *text = strdup(json_object_to_json_string(other));
        json_object_put(other);
        json_object_put(root);

        struct gp_config c;
        struct err e = {0};
        cr_assert_eq(parse_str(&c, text, &e), ERR_OK, "%s re-nested: %s", v->name, e.msg);
        struct variant flipped = *v;
        flipped.nested = !v->nested;
        check_variant(&flipped, &c);
        cr_assert_str_eq(c.model_type, v->nested ? "gemma4_text" : "gemma4");
        cr_assert_not_null(c.text_json);
        cfg_free(&c);
        free(text);
    }
}

Test(config, cfg_text_fields_ignored_at_wrong_level)
{
    /* gemma4 reads ONLY text_config: a top-level hidden_size does not count. */
    struct mut m[2] = {{"text_config.hidden_size", NULL}, {"hidden_size", "1536"}};
    char *text = mutated(cfg_e2b, m, 2);
    struct gp_config c;
    struct err e = {0};
    cr_assert_eq(parse_str(&c, text, &e), ERR_CONFIG);
    cr_assert(strstr(e.msg, "text_config.hidden_size"), "%s", e.msg);
    cfg_free(&c);
    free(text);
}

Test(config, cfg_per_layer_config_instead_of_global_fields)
{
    /* Newer HF: full-layer head_dim / KV heads only in per_layer_config (§1.2 parser rule). */
    struct mut m[3] = {
        {"text_config.global_head_dim", NULL},
        {"text_config.num_global_key_value_heads", NULL},
        {"text_config.per_layer_config",
         "{\"5\":{\"head_dim\":512,\"num_key_value_heads\":2},\"11\":{\"head_dim\":512,\"num_key_value_heads\":2}}"},
    };
    char *text = mutated(cfg_26b, m, 3);
    struct gp_config c;
    struct err e = {0};
    cr_assert_eq(parse_str(&c, text, &e), ERR_OK, "%s", e.msg);
    check_variant(&variants[2], &c);
    cfg_free(&c);
    free(text);

    /* per_layer_config that is not an object does not excuse a missing global_head_dim. */
    struct mut m2[2] = {{"text_config.global_head_dim", NULL}, {"text_config.per_layer_config", "null"}};
    text = mutated(cfg_e2b, m2, 2);
    cr_assert_eq(parse_str(&c, text, &e), ERR_CONFIG, "full layers would silently use head_dim 256");
    cr_assert(strstr(e.msg, "text_config.global_head_dim"), "%s", e.msg);
    cfg_free(&c);
    free(text);
}

Test(config, cfg_nullable_fields)
{
    struct gp_config c;
    struct err e = {0};
    /* final_logit_softcapping: null = no soft-cap. */
    struct mut m1[1] = {{"text_config.final_logit_softcapping", "null"}};
    char *text = mutated(cfg_e2b, m1, 1);
    cr_assert_eq(parse_str(&c, text, &e), ERR_OK, "%s", e.msg);
    cr_assert_not(c.has_softcap);
    cfg_free(&c);
    free(text);

    /* k_eq_v with num_global_key_value_heads null: full layers use num_key_value_heads (§1.3 G_i). */
    struct mut m2[1] = {{"text_config.num_global_key_value_heads", "null"}};
    text = mutated(cfg_26b, m2, 1);
    cr_assert_eq(parse_str(&c, text, &e), ERR_OK, "%s", e.msg);
    cr_assert(c.layers[5].k_eq_v);
    cr_assert_eq(c.layers[5].kv_heads, 8);
    cr_assert_eq(c.layers[4].kv_heads, 8);
    cfg_free(&c);
    free(text);

    /* Fields whose defaults agree between HF and mlx-lm may be absent
     * (MODEL.md §1.2); use_double_wide_mlp only matters with KV-shared layers. */
    struct mut m3[3] = {{"attention_bias", NULL},
                        {"use_double_wide_mlp", NULL},
                        {"enable_moe_block", NULL}};
    text = mutated(cfg_31b, m3, 3);
    cr_assert_eq(parse_str(&c, text, &e), ERR_OK, "%s", e.msg);
    cr_assert_eq(c.n_kv_shared, 0);
    cr_assert_not(c.double_wide);
    cr_assert_not(c.moe);
    cfg_free(&c);
    free(text);

    /* ... but not num_kv_shared_layers (HF 0, mlx-lm 20), nor use_double_wide_mlp
     * beside KV-shared layers (HF false, mlx-lm true) */
    struct mut m4[1] = {{"num_kv_shared_layers", NULL}};
    text = mutated(cfg_31b, m4, 1);
    cr_assert_eq(parse_str(&c, text, &e), ERR_CONFIG);
    cr_assert(strstr(e.msg, "config.json: num_kv_shared_layers: missing"), "%s", e.msg);
    cfg_free(&c);
    free(text);
    struct mut m5[1] = {{"text_config.use_double_wide_mlp", NULL}};
    text = mutated(cfg_e4b, m5, 1);
    cr_assert_eq(parse_str(&c, text, &e), ERR_CONFIG);
    cr_assert(strstr(e.msg, "text_config.use_double_wide_mlp: missing (required with KV-shared layers"), "%s", e.msg);
    cfg_free(&c);
    free(text);
}

/* ---------------------------------------------------------- external goldens */

static char *golden_dir(const char *name)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/../shared/external-goldens/%s", GP_SOURCE_DIR, name);
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
        return NULL;
    return strdup(path);
}

Test(config, cfg_external_golden_a)
{
    char *dir = golden_dir("a");
    if (!dir)
        cr_skip_test("external goldens not present (%s/../shared/external-goldens)", GP_SOURCE_DIR);
    char path[4200];
    snprintf(path, sizeof path, "%s/config.json", dir);
    const char *paths[2] = {path, dir}; /* file, and DIR (cfg_load takes either) */
    for (int k = 0; k < 2; k++) {
        struct gp_config c;
        struct err e = {0};
        cr_assert_eq(cfg_load(&c, paths[k], &e), ERR_OK, "%s: %s", paths[k], e.msg);
        cr_assert(c.nested);
        cr_assert_eq(c.n_layers, 8);
        cr_assert_eq(c.first_shared, 5, "F0 = 8 - 3");
        cr_assert_eq(c.ple_dim, 16);
        cr_assert(c.double_wide);
        static const enum layer_type types[8] = {LT_SLIDING, LT_SLIDING, LT_SLIDING, LT_FULL,
                                                 LT_SLIDING, LT_SLIDING, LT_SLIDING, LT_FULL};
        static const int src[8] = {0, 1, 2, 3, 4, 4, 4, 3};
        for (int i = 0; i < 8; i++) {
            const struct cfg_layer *ly = &c.layers[i];
            cr_assert_eq(ly->type, types[i], "layer %d type", i);
            cr_assert_eq(ly->shared, i >= 5, "layer %d shared", i);
            cr_assert_eq(ly->kv_src, src[i], "layer %d reads K/V of %d, expected %d", i, ly->kv_src, src[i]);
            cr_assert_eq(ly->mlp_width, i >= 5 ? 512 : 256, "layer %d MLP width %lld", i, (long long)ly->mlp_width);
            cr_assert_eq(ly->head_dim, types[i] == LT_FULL ? 64 : 32, "layer %d head_dim", i);
            cr_assert_eq(ly->kv_heads, 1, "layer %d kv heads (MQA)", i);
            cr_assert_not(ly->k_eq_v);
        }
        cr_assert_eq(c.rope[LT_FULL].kind, ROPE_PROPORTIONAL);
        cr_assert_float_eq(c.rope[LT_FULL].partial, 0.25, 0.0);
        cr_assert_float_eq(c.rope[LT_FULL].theta, 1e6, 0.0);
        cr_assert_eq(c.rope[LT_SLIDING].kind, ROPE_DEFAULT);
        cr_assert_eq(c.sliding_window, 8);
        cr_assert(c.has_softcap);
        cr_assert_float_eq(c.softcap, 30.0, 0.0);
        cr_assert_not(c.moe);
        cfg_free(&c);
    }
    free(dir);
}

Test(config, cfg_external_golden_c)
{
    char *dir = golden_dir("c");
    if (!dir)
        cr_skip_test("external goldens not present (%s/../shared/external-goldens)", GP_SOURCE_DIR);
    char path[4200];
    snprintf(path, sizeof path, "%s/config.json", dir);
    struct gp_config c;
    struct err e = {0};
    cr_assert_eq(cfg_load(&c, path, &e), ERR_OK, "%s", e.msg);
    cr_assert(c.moe);
    cr_assert_eq(c.n_experts, 4);
    cr_assert_eq(c.top_k, 2);
    cr_assert_eq(c.moe_intermediate, 64);
    cr_assert_eq(c.n_layers, 6);
    cr_assert_eq(c.first_shared, 6, "no KV sharing");
    cr_assert_eq(c.ple_dim, 0);
    for (int i = 0; i < 6; i++) {
        cr_assert_not(c.layers[i].shared);
        cr_assert_eq(c.layers[i].kv_src, i);
        cr_assert_eq(c.layers[i].mlp_width, 256);
        cr_assert_eq(c.layers[i].kv_heads, 2);
        cr_assert_eq(c.layers[i].type, (i == 2 || i == 5) ? LT_FULL : LT_SLIDING, "layer %d", i);
    }
    cfg_free(&c);
    free(dir);
}

/* ------------------------------------------------------------ quantization */

/* A small valid gemma4 config; `extra` adds top-level keys. */
#define SMALL_TEXT                                                                                              \
    "\"text_config\":{\"hidden_size\":64,\"num_hidden_layers\":6,\"intermediate_size\":128,"                   \
    "\"num_attention_heads\":4,\"num_key_value_heads\":2,\"num_global_key_value_heads\":null,\"head_dim\":16," \
    "\"global_head_dim\":32,\"attention_k_eq_v\":false,\"num_kv_shared_layers\":2,"                             \
    "\"hidden_size_per_layer_input\":8,\"vocab_size_per_layer_input\":256,\"vocab_size\":256,"                  \
    "\"layer_types\":[" S "," S "," F "," S "," S "," F "],\"sliding_window\":16," ROPE ","                    \
    "\"final_logit_softcapping\":30.0,\"use_double_wide_mlp\":true,\"enable_moe_block\":false,"                 \
    "\"tie_word_embeddings\":true,\"rms_norm_eps\":1e-06}"
#define SMALL(extra) "{" extra "\"model_type\":\"gemma4\"," SMALL_TEXT "}"

static const char small_cfg[] = SMALL("");

Test(config, cfg_small_base_is_valid)
{
    struct gp_config c;
    struct err e = {0};
    cr_assert_eq(parse_str(&c, small_cfg, &e), ERR_OK, "%s", e.msg);
    cr_assert_eq(c.first_shared, 4);
    cr_assert_eq(c.layers[4].kv_src, 3);
    cr_assert_eq(c.layers[5].kv_src, 2);
    cr_assert_eq(c.layers[3].mlp_width, 128);
    cr_assert_eq(c.layers[4].mlp_width, 256);
    cr_assert_eq(c.layers[5].head_dim, 32);
    cr_assert_eq(c.layers[4].head_dim, 16);
    cr_assert_not(c.quant.mlx);
    cr_assert_not(c.quant.qat_unquantized);
    cr_assert_str_eq(c.quant.hf_method, "");
    cr_assert_eq(c.quant.n_ov, 0);
    cfg_free(&c);
}

static void assert_spec(struct cfg_qspec s, bool quantized, enum qmode mode, int gs, int bits, const char *what)
{
    cr_assert_eq(s.quantized, quantized, "%s: quantized %d", what, s.quantized);
    if (!quantized)
        return;
    cr_assert_eq(s.mode, mode, "%s: mode %s, expected %s", what, qmode_name(s.mode), qmode_name(mode));
    cr_assert_eq(s.group_size, gs, "%s: group_size %d, expected %d", what, s.group_size, gs);
    cr_assert_eq(s.bits, bits, "%s: bits %d, expected %d", what, s.bits, bits);
}

Test(config, cfg_quant_affine_overrides)
{
#define QAFF                                                                                   \
    "{\"group_size\":32,\"bits\":4,\"mode\":\"affine\","                                      \
    "\"language_model.model.layers.0.mlp.down_proj\":{\"bits\":8},"                           \
    "\"language_model.model.layers.1.mlp.down_proj\":true,"                                   \
    "\"language_model.model.layers.2.mlp.down_proj\":false,"                                  \
    "\"language_model.model.layers.3.mlp.down_proj\":null,"                                   \
    "\"model.layers.4.router.proj\":{\"group_size\":64,\"bits\":8},"                          \
    "\"language_model.model.layers.5.mlp.gate_proj\":{\"group_size\":null,\"bits\":null},"    \
    "\"language_model.model.layers.5.mlp.up_proj\":{\"group_size\":128,\"bits\":2}}"
    static const char text[] = SMALL("\"quantization\":" QAFF ",\"quantization_config\":" QAFF ",");
    struct gp_config c;
    struct err e = {0};
    cr_assert_eq(parse_str(&c, text, &e), ERR_OK, "%s", e.msg);
    const struct cfg_quant *q = &c.quant;
    cr_assert(q->mlx);
    cr_assert_not(q->qat_unquantized);
    assert_spec(q->global, true, QM_AFFINE, 32, 4, "global");
    cr_assert_eq(q->n_ov, 7, "seven override entries");

    bool ex = false;
    /* {"bits": 8}: missing group_size takes the MODE default 64, not the top-level 32. */
    assert_spec(cfg_quant_lookup(q, "language_model.model.layers.0.mlp.down_proj", &ex), true, QM_AFFINE, 64, 8,
                "{bits:8}");
    cr_assert(ex);
    assert_spec(cfg_quant_lookup(q, "language_model.model.layers.1.mlp.down_proj", &ex), true, QM_AFFINE, 32, 4,
                "true");
    cr_assert(ex);
    assert_spec(cfg_quant_lookup(q, "language_model.model.layers.2.mlp.down_proj", &ex), false, QM_AFFINE, 0, 0,
                "false");
    cr_assert(ex);
    assert_spec(cfg_quant_lookup(q, "language_model.model.layers.3.mlp.down_proj", &ex), true, QM_AFFINE, 32, 4,
                "null");
    cr_assert(ex);
    /* nulls inside a dict also take the mode defaults (affine 64/4) */
    assert_spec(cfg_quant_lookup(q, "language_model.model.layers.5.mlp.gate_proj", &ex), true, QM_AFFINE, 64, 4,
                "{null,null}");
    cr_assert(ex);
    assert_spec(cfg_quant_lookup(q, "language_model.model.layers.5.mlp.up_proj", &ex), true, QM_AFFINE, 128, 2,
                "{128,2}");
    cr_assert(ex);
    /* the "language_model." alias: a key written without it still matches the full path */
    assert_spec(cfg_quant_lookup(q, "language_model.model.layers.4.router.proj", &ex), true, QM_AFFINE, 64, 8,
                "alias");
    cr_assert(ex, "the alias without language_model. names this module");
    assert_spec(cfg_quant_lookup(q, "model.layers.4.router.proj", &ex), true, QM_AFFINE, 64, 8, "direct");
    cr_assert(ex);
    /* no entry: the global spec */
    ex = true;
    assert_spec(cfg_quant_lookup(q, "language_model.model.layers.5.mlp.down_proj", &ex), true, QM_AFFINE, 32, 4,
                "no entry");
    cr_assert_not(ex);
    ex = true;
    assert_spec(cfg_quant_lookup(q, "language_model.model.layers.0.mlp.down", &ex), true, QM_AFFINE, 32, 4,
                "prefix of a key is not the key");
    cr_assert_not(ex);
    /* explicit_entry may be NULL */
    assert_spec(cfg_quant_lookup(q, "language_model.model.layers.2.mlp.down_proj", NULL), false, QM_AFFINE, 0, 0,
                "NULL explicit");
    cfg_free(&c);
}

Test(config, cfg_quant_mode_defaults)
{
    static const char text[] =
        SMALL("\"quantization\":{\"group_size\":32,\"bits\":4,\"mode\":\"mxfp4\","
              "\"language_model.model.layers.0.router.proj\":{\"group_size\":64,\"bits\":8},"
              "\"m.a\":{\"mode\":\"mxfp4\"},\"m.b\":{},\"m.c\":{\"mode\":\"nvfp4\"},\"m.d\":{\"mode\":\"mxfp8\"},"
              "\"m.e\":true,\"m.f\":{\"mode\":\"affine\",\"bits\":null}},");
    struct gp_config c;
    struct err e = {0};
    cr_assert_eq(parse_str(&c, text, &e), ERR_OK, "%s", e.msg);
    const struct cfg_quant *q = &c.quant;
    assert_spec(q->global, true, QM_MXFP4, 32, 4, "global mxfp4");
    bool ex;
    /* INPUTS.md §3.1: {"group_size": 64, "bits": 8} in an mxfp4 model means AFFINE 8-bit. */
    assert_spec(cfg_quant_lookup(q, "language_model.model.layers.0.router.proj", &ex), true, QM_AFFINE, 64, 8,
                "router");
    assert_spec(cfg_quant_lookup(q, "m.a", &ex), true, QM_MXFP4, 32, 4, "mxfp4 defaults");
    assert_spec(cfg_quant_lookup(q, "m.b", &ex), true, QM_AFFINE, 64, 4, "{} = affine defaults, not the top-level mode");
    assert_spec(cfg_quant_lookup(q, "m.c", &ex), true, QM_NVFP4, 16, 4, "nvfp4 defaults");
    assert_spec(cfg_quant_lookup(q, "m.d", &ex), true, QM_MXFP8, 32, 8, "mxfp8 defaults");
    assert_spec(cfg_quant_lookup(q, "m.e", &ex), true, QM_MXFP4, 32, 4, "true = top level");
    assert_spec(cfg_quant_lookup(q, "m.f", &ex), true, QM_AFFINE, 64, 4, "affine, bits null");
    assert_spec(cfg_quant_lookup(q, "m.none", &ex), true, QM_MXFP4, 32, 4, "no entry");
    cr_assert_not(ex);
    cfg_free(&c);

    /* Top-level mode absent = affine. */
    static const char t2[] = SMALL("\"quantization\":{\"group_size\":128,\"bits\":3},");
    cr_assert_eq(parse_str(&c, t2, &e), ERR_OK, "%s", e.msg);
    assert_spec(c.quant.global, true, QM_AFFINE, 128, 3, "legacy affine");
    cfg_free(&c);
}

Test(config, cfg_quantization_config_qat_unquantized)
{
    /* No quant_method, no `quantization`: Google QAT export, half-precision weights. */
    static const char top[] = SMALL("\"quantization_config\":{\"weight_bits\":4,\"group_size\":32},");
    struct gp_config c;
    struct err e = {0};
    cr_assert_eq(parse_str(&c, top, &e), ERR_OK, "%s", e.msg);
    cr_assert(c.quant.qat_unquantized);
    cr_assert_not(c.quant.mlx, "not an MLX quantized model");
    cr_assert_not(c.quant.global.quantized);
    cr_assert_eq(c.quant.n_ov, 0);
    cr_assert_str_eq(c.quant.hf_method, "");
    bool ex = true;
    cr_assert_not(cfg_quant_lookup(&c.quant, "language_model.model.layers.0.mlp.down_proj", &ex).quantized);
    cr_assert_not(ex);
    cfg_free(&c);

    /* The same block inside text_config. */
    struct mut m[1] = {{"text_config.quantization_config", "{\"group_size\":32}"}};
    char *text = mutated(small_cfg, m, 1);
    cr_assert_eq(parse_str(&c, text, &e), ERR_OK, "%s", e.msg);
    cr_assert(c.quant.qat_unquantized);
    cfg_free(&c);
    free(text);
}

Test(config, cfg_quantization_config_hf_method_rejected)
{
    static const char text[] = SMALL("\"quantization_config\":{\"quant_method\":\"compressed-tensors\","
                                     "\"format\":\"pack-quantized\"},");
    struct gp_config c;
    struct err e = {0};
    cr_assert_eq(parse_str(&c, text, &e), ERR_CONFIG);
    cr_assert(strstr(e.msg, "quantization_config.quant_method"), "%s", e.msg);
    cr_assert(strstr(e.msg, "compressed-tensors"), "%s", e.msg);
    cr_assert_str_eq(c.quant.hf_method, "compressed-tensors");
    cr_assert_not(c.quant.qat_unquantized);
    cfg_free(&c);
}

/* ---------------------------------------------------------- invalid table */

struct bad_cfg {
    const char *what;
    struct mut m[3];
    const char *sub1, *sub2;
};

static const struct bad_cfg bad[] = {
    {"missing hidden_size", {{"text_config.hidden_size", NULL}}, "text_config.hidden_size", "missing"},
    {"hidden_size as string", {{"text_config.hidden_size", "\"64\""}}, "text_config.hidden_size", "string"},
    {"hidden_size as float", {{"text_config.hidden_size", "64.0"}}, "text_config.hidden_size", "64"},
    {"hidden_size 0", {{"text_config.hidden_size", "0"}}, "text_config.hidden_size", "0"},
    {"negative num_hidden_layers", {{"text_config.num_hidden_layers", "-6"}}, "text_config.num_hidden_layers", "-6"},
    {"missing head_dim", {{"text_config.head_dim", NULL}}, "text_config.head_dim", "missing"},
    {"missing sliding_window", {{"text_config.sliding_window", NULL}}, "text_config.sliding_window", "missing"},
    {"missing hidden_size_per_layer_input", {{"text_config.hidden_size_per_layer_input", NULL}},
     "text_config.hidden_size_per_layer_input", "missing"},
    {"missing global_head_dim", {{"text_config.global_head_dim", NULL}}, "text_config.global_head_dim", "missing"},
    {"missing layer_types", {{"text_config.layer_types", NULL}}, "text_config.layer_types", "missing"},
    {"layer_types length mismatch", {{"text_config.layer_types", "[" S "," S "," F "," S "," F "]"}},
     "text_config.layer_types", "5 entries"},
    {"unknown layer type", {{"text_config.layer_types", "[" S ",\"local_attention\"," F "," S "," S "," F "]"}},
     "text_config.layer_types[1]", "local_attention"},
    {"missing rope_parameters", {{"text_config.rope_parameters", NULL}}, "text_config.rope_parameters", "missing"},
    {"rope_parameters without full_attention", {{"text_config.rope_parameters.full_attention", NULL}},
     "text_config.rope_parameters.full_attention", "missing"},
    {"proportional rope without partial_rotary_factor",
     {{"text_config.rope_parameters.full_attention.partial_rotary_factor", NULL}},
     "text_config.rope_parameters.full_attention.partial_rotary_factor", "missing"},
    {"unknown rope_type", {{"text_config.rope_parameters.sliding_attention.rope_type", "\"yarn\""}},
     "text_config.rope_parameters.sliding_attention.rope_type", "yarn"},
    {"missing rope_theta", {{"text_config.rope_parameters.sliding_attention.rope_theta", NULL}},
     "text_config.rope_parameters.sliding_attention.rope_theta", "missing"},
    {"missing final_logit_softcapping", {{"text_config.final_logit_softcapping", NULL}},
     "text_config.final_logit_softcapping", "missing"},
    {"final_logit_softcapping as string", {{"text_config.final_logit_softcapping", "\"30\""}},
     "text_config.final_logit_softcapping", "\"30\""},
    {"num_kv_shared_layers == num_hidden_layers", {{"text_config.num_kv_shared_layers", "6"}},
     "text_config.num_kv_shared_layers", "6"},
    {"num_kv_shared_layers > num_hidden_layers", {{"text_config.num_kv_shared_layers", "9"}},
     "text_config.num_kv_shared_layers", "9"},
    {"KV-shared layer with no earlier owner of its type",
     {{"text_config.layer_types", "[" S "," S "," S "," S "," S "," F "]"}, {"text_config.num_kv_shared_layers", "1"}},
     "text_config.layer_types", "layer 5"},
    {"num_attention_heads not divisible by kv heads", {{"text_config.num_attention_heads", "3"}},
     "text_config.num_attention_heads", "3"},
    {"attention_k_eq_v without num_global_key_value_heads",
     {{"text_config.attention_k_eq_v", "true"}, {"text_config.num_global_key_value_heads", NULL}},
     "text_config.num_global_key_value_heads", "missing"},
    {"attention_k_eq_v as string", {{"text_config.attention_k_eq_v", "\"yes\""}}, "text_config.attention_k_eq_v",
     "true or false"},
    {"enable_moe_block without num_experts",
     {{"text_config.enable_moe_block", "true"}, {"text_config.top_k_experts", "2"},
      {"text_config.moe_intermediate_size", "32"}},
     "text_config.num_experts", "missing"},
    {"PLE without vocab_size_per_layer_input", {{"text_config.vocab_size_per_layer_input", NULL}},
     "text_config.vocab_size_per_layer_input", "missing"},
    {"missing num_kv_shared_layers (HF 0, mlx-lm 20)", {{"text_config.num_kv_shared_layers", NULL}},
     "text_config.num_kv_shared_layers", "missing"},
    {"missing use_double_wide_mlp beside KV-shared layers (HF false, mlx-lm true)",
     {{"text_config.use_double_wide_mlp", NULL}}, "text_config.use_double_wide_mlp", "HF defaults to false"},
    {"DiffusionGemma", {{"architectures", "[\"DiffusionGemma4ModelForBlockDiffusion\"]"}}, "architectures[0]",
     "not a Gemma 4 text model gempack runs: DiffusionGemma4ModelForBlockDiffusion"},
    {"the E-series drafter", {{"architectures", "[\"Gemma4AssistantForCausalLM\"]"}}, "architectures[0]",
     "not a Gemma 4 text model gempack runs: Gemma4AssistantForCausalLM"},
    {"the 12B drafter", {{"architectures", "[\"Gemma4UnifiedAssistantForCausalLM\"]"}}, "architectures[0]",
     "not a Gemma 4 text model gempack runs: Gemma4UnifiedAssistantForCausalLM"},
    {"the DSpark drafter", {{"architectures", "[\"Gemma4ForConditionalGeneration\", \"Gemma4DSparkModel\"]"}},
     "architectures[1]", "not a Gemma 4 text model gempack runs: Gemma4DSparkModel"},
    {"architectures not an array", {{"architectures", "\"Gemma4ForCausalLM\""}}, "architectures", "string"},
    {"a unified text model with per-layer inputs",
     {{"model_type", "\"gemma4_unified\""}},
     "text_config.hidden_size_per_layer_input", "has no per-layer inputs"},
    {"model_type llama", {{"model_type", "\"llama\""}}, "model_type", "llama"},
    {"missing model_type", {{"model_type", NULL}}, "model_type", "missing"},
    {"gemma4 without text_config", {{"text_config", NULL}}, "text_config", "missing"},
    {"text_config not an object", {{"text_config", "[]"}}, "text_config", "array"},
    {"invalid affine bits 7", {{"quantization", "{\"group_size\":64,\"bits\":7}"}}, "quantization", "bits 7"},
    {"affine group_size 16", {{"quantization", "{\"group_size\":16,\"bits\":4}"}}, "quantization", "group_size 16"},
    {"quantization without bits", {{"quantization", "{\"group_size\":64}"}}, "quantization.bits", "missing"},
    {"unknown quantization mode", {{"quantization", "{\"group_size\":64,\"bits\":4,\"mode\":\"int4\"}"}},
     "quantization.mode", "int4"},
    {"override of the wrong type", {{"quantization", "{\"group_size\":64,\"bits\":4,\"model.layers.0.mlp.up_proj\":5}"}},
     "model.layers.0.mlp.up_proj", "int"},
    {"override with bits 1", {{"quantization", "{\"group_size\":64,\"bits\":4,\"model.layers.0.mlp.up_proj\":{\"bits\":1}}"}},
     "model.layers.0.mlp.up_proj", "bits 1"},
    {"override mxfp4 with bits 8",
     {{"quantization", "{\"group_size\":64,\"bits\":4,\"model.layers.0.mlp.up_proj\":{\"mode\":\"mxfp4\",\"bits\":8}}"}},
     "model.layers.0.mlp.up_proj", "bits 8"},
    {"quantization_config with quant_method", {{"quantization_config", "{\"quant_method\":\"gptq\",\"bits\":4}"}},
     "quantization_config.quant_method", "gptq"},
};
#define N_BAD (sizeof bad / sizeof bad[0])

ParameterizedTestParameters(config, cfg_invalid)
{
    static int idx[N_BAD];
    for (size_t i = 0; i < N_BAD; i++)
        idx[i] = (int)i;
    return cr_make_param_array(int, idx, N_BAD);
}

ParameterizedTest(int *i, config, cfg_invalid)
{
    const struct bad_cfg *b = &bad[*i];
    char *text = mutated(small_cfg, b->m, 3);
    struct gp_config c;
    struct err e = {0};
    int rc = parse_str(&c, text, &e);
    /* another model's architecture is a refusal of its own (exit 1); every other problem ERR_CONFIG */
    const enum err_code want = strstr(b->sub2, "gempack runs:") ? ERR_NOT_TARGET : ERR_CONFIG;
    cr_assert_eq(rc, want, "[%s] code %d (%s), expected %s; message: %s", b->what, rc,
                 err_code_name((enum err_code)rc), err_code_name(want), e.msg);
    cr_assert_eq(e.code, want, "[%s]", b->what);
    /* One line of the message names the field and says what is wrong. */
    bool found = false;
    char *msg = strdup(e.msg), *save = NULL;
    for (char *line = strtok_r(msg, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        cr_assert(strncmp(line, "config.json: ", 13) == 0, "[%s] every line starts with the path: '%s'", b->what,
                  line);
        if (strstr(line, b->sub1) && strstr(line, b->sub2))
            found = true;
    }
    free(msg);
    cr_assert(found, "[%s] no line has both \"%s\" and \"%s\": %s", b->what, b->sub1, b->sub2, e.msg);
    cfg_free(&c);

    /* Without an err struct the config is still rejected. */
    rc = parse_str(&c, text, NULL);
    cr_assert_eq(rc, want, "[%s] accepted when e == NULL", b->what);
    cfg_free(&c);
    free(text);
}

Test(config, cfg_three_missing_fields_three_lines)
{
    struct mut m[3] = {
        {"text_config.hidden_size", NULL}, {"text_config.vocab_size", NULL}, {"text_config.sliding_window", NULL}};
    char *text = mutated(small_cfg, m, 3);
    struct gp_config c;
    struct err e = {0};
    cr_assert_eq(parse_str(&c, text, &e), ERR_CONFIG);
    const char *want[3] = {"text_config.hidden_size: missing", "text_config.vocab_size: missing",
                           "text_config.sliding_window: missing"};
    int lines = 0, hit[3] = {0, 0, 0};
    char *msg = strdup(e.msg), *save = NULL;
    for (char *line = strtok_r(msg, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        lines++;
        for (int k = 0; k < 3; k++)
            if (strstr(line, want[k]))
                hit[k]++;
    }
    free(msg);
    cr_assert_eq(lines, 3, "one line per problem, got %d: %s", lines, e.msg);
    for (int k = 0; k < 3; k++)
        cr_assert_eq(hit[k], 1, "\"%s\" on exactly one line: %s", want[k], e.msg);
    cfg_free(&c);
    free(text);
}

/* Another model's config (its own model_type, none of Gemma 4's fields) is
 * refused by its architecture alone, not by a list of missing fields. */
Test(config, cfg_other_architecture_refused_alone)
{
    struct gp_config c;
    struct err e = {0};
    cr_assert_eq(parse_str(&c, "{\"architectures\": [\"DiffusionGemma4ModelForBlockDiffusion\"], "
                                "\"model_type\": \"diffusion_gemma4\", \"block_size\": 32}",
                           &e),
                 ERR_NOT_TARGET);
    cr_assert_str_eq(e.msg, "config.json: architectures[0]: not a Gemma 4 text model gempack runs: "
                            "DiffusionGemma4ModelForBlockDiffusion");
    cfg_free(&c);
}

Test(config, cfg_not_json_is_format_error)
{
    static const char *const texts[] = {"model_type = gemma4", "{\"model_type\":\"gemma4\",", "",
                                        "{\"model_type\":\"gemma4\"} trailing"};
    for (size_t k = 0; k < sizeof texts / sizeof texts[0]; k++) {
        struct gp_config c;
        struct err e = {0};
        int rc = cfg_parse(&c, texts[k], strlen(texts[k]), "bad/config.json", &e);
        cr_assert_eq(rc, ERR_FORMAT, "'%s': %d (%s)", texts[k], rc, e.msg);
        cr_assert(strstr(e.msg, "bad/config.json"), "%s", e.msg);
        cr_assert(strstr(e.msg, "JSON"), "%s", e.msg);
        cfg_free(&c);
    }
    /* Valid JSON that is not an object is a config problem, not a format problem. */
    struct gp_config c;
    struct err e = {0};
    cr_assert_eq(cfg_parse(&c, "[1,2]", 5, "config.json", &e), ERR_CONFIG);
    cr_assert(strstr(e.msg, "object"), "%s", e.msg);
    cfg_free(&c);
}

Test(config, cfg_load_missing_file)
{
    struct gp_config c;
    struct err e = {0};
    int rc = cfg_load(&c, "/nonexistent-gempack-dir/config.json", &e);
    cr_assert_eq(rc, ERR_IO);
    cr_assert(strstr(e.msg, "/nonexistent-gempack-dir/config.json"), "%s", e.msg);
    cfg_free(&c);
}
