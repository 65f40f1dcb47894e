/* config.h - Gemma 4 config.json: parsing, validation, derived quantities.
 *
 * Text fields are read from `text_config` when model_type is "gemma4" (or
 * "gemma4_unified"), from the top level when it is "gemma4_text" (or
 * "gemma4_unified_text"). An `architectures` entry gempack does not run
 * is refused. Every
 * architecture-defining field is required: HF and MLX defaults disagree
 * (MODEL.md §1.2), so a default would silently pick a model.
 * Only fields whose HF default is semantically safe may be absent. */
#ifndef GP_CONFIG_H
#define GP_CONFIG_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/err.h"
#include "quant/format.h"

#define CFG_MAX_LAYERS 1024
#define CFG_MAX_BYTES (16u << 20) /* config.json read whole, at most this */

enum layer_type { LT_SLIDING = 0, LT_FULL = 1 };
enum rope_kind { ROPE_DEFAULT, ROPE_PROPORTIONAL };

struct cfg_rope {
    enum rope_kind kind;
    double theta;
    double partial;   /* partial_rotary_factor (proportional only; 1 for default) */
    double factor;    /* divides every inverse frequency (default 1) */
};

/* Derived per-layer quantities (MODEL.md §1.3). */
struct cfg_layer {
    enum layer_type type;
    int64_t head_dim;   /* d_i */
    int64_t kv_heads;   /* G_i */
    bool k_eq_v;        /* keqv(i): no v_proj, V from raw K */
    bool shared;        /* i >= F0: reads K/V of kv_src */
    int kv_src;         /* i for owning layers */
    int64_t mlp_width;  /* I_i */
};

/* Quantization of one module (MLX semantics, INPUTS.md §3). */
struct cfg_qspec {
    bool quantized;
    enum qmode mode;
    int bits, group_size;
};

struct cfg_qoverride {
    char *path;               /* MLX module path as written, e.g. language_model.model.layers.0.router.proj */
    struct cfg_qspec spec;    /* resolved with the mode-default rule; quantized=false for `false` */
};

struct cfg_quant {
    bool mlx;                 /* a `quantization` (or MLX-style quantization_config) block */
    bool qat_unquantized;     /* quantization_config without quant_method: QAT export, unquantized */
    char hf_method[48];       /* quant_method of an HF quantizer block ("" if none) */
    struct cfg_qspec global;
    struct cfg_qoverride *ov;
    size_t n_ov;
};

struct gp_config {
    char model_type[32];      /* top-level model_type */
    bool nested;              /* text fields under text_config */
    bool unified;             /* the 12B's classes: gemma4_unified / gemma4_unified_text */
    int64_t vocab_size, hidden_size, n_layers, intermediate_size;
    int64_t n_heads, n_kv_heads, n_global_kv_heads; /* n_global_kv_heads: 0 when null */
    int64_t head_dim, global_head_dim;              /* global_head_dim: 0 when null */
    int64_t n_kv_shared, first_shared;              /* F0 = L - n_kv_shared */
    int64_t ple_dim, ple_vocab;                     /* P (0: no PLE), vocab_size_per_layer_input */
    int64_t sliding_window;
    int64_t n_experts, top_k, moe_intermediate;     /* MoE only */
    bool k_eq_v, moe, double_wide, tie_embeddings;
    bool has_softcap;
    double softcap, rms_eps;
    struct cfg_rope rope[2];                        /* indexed by enum layer_type */
    struct cfg_layer *layers;                       /* n_layers entries */
    struct cfg_quant quant;
    struct json_object *text_json;                  /* the text config object (reference held) */
    struct json_object *root_json;                  /* the whole config (reference held) */
};

/* Parses config.json text. On ERR_CONFIG the message lists every problem
 * found, one per line ("text_config.hidden_size: missing ..."), so a user
 * sees them all at once; ERR_NOT_TARGET, in the same form, names the
 * architectures gempack does not run (another model's config, refused for
 * that alone); other codes mean the file is not JSON at all.
 * `path` is used in messages. *c must be cfg_free'd in every case. */
int cfg_parse(struct gp_config *c, const char *text, size_t len, const char *path, struct err *e);

/* Reads and parses DIR/config.json (or a file path). */
int cfg_load(struct gp_config *c, const char *path, struct err *e);

void cfg_free(struct gp_config *c);

/* Quantization of the module at `module_path` (an MLX module path; the
 * alias without a leading "language_model." is also tried). *explicit_entry
 * tells whether an override named it. Without an entry: the global spec. */
struct cfg_qspec cfg_quant_lookup(const struct cfg_quant *q, const char *module_path, bool *explicit_entry);

/* Index of the last full-attention layer, -1 if none. */
int cfg_last_full_layer(const struct gp_config *c);

static inline const char *layer_type_name(enum layer_type t)
{
    return t == LT_FULL ? "full_attention" : "sliding_attention";
}

#endif
