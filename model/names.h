/* names.h - classification of checkpoint keys (MODEL.md §2.1, §2.6).
 *
 * A key is classified by its PREFIX first (tower, projector, text model,
 * lm_head); only a text-model key is then split into a text-relative name
 * and a layer index. So "model.vision_tower.encoder.layers.15.self_attn.k_proj"
 * is a vision-tower key whatever its layer number, and can never be mistaken
 * for decoder layer 15's K projection. */
#ifndef GP_NAMES_H
#define GP_NAMES_H

#include <stdbool.h>

enum name_class {
    NC_TEXT,       /* a decoder / embedding / final-norm tensor */
    NC_VISION,     /* vision tower or vision embedder */
    NC_AUDIO,      /* audio tower */
    NC_PROJECTOR,  /* embed_vision, embed_audio, multi_modal_projector */
    NC_CLIP,       /* clip-bound scalars (input_min, ..., output_max) outside a tower */
    NC_ROTARY,     /* rotary tables (rotary_emb ...) */
    NC_LM_HEAD,    /* lm_head.weight */
    NC_UNKNOWN,    /* none of the above */
};

enum name_family {
    NF_NONE,
    NF_HF,         /* model.language_model.  (HF multimodal) */
    NF_MLX,        /* language_model.model.  (MLX gemma4 / mlx-vlm) */
    NF_TEXT,       /* model.                 (text-only: HF CausalLM, MLX gemma4_text) */
};

struct name_info {
    enum name_class cls;
    enum name_family fam;   /* for NC_TEXT (and text-scoped clip/rotary keys) */
    const char *rel;        /* text-relative name, points into the key (NC_TEXT) */
    int layer;              /* decoder layer index parsed from rel "layers.N.", else -1 */
};

void names_classify(const char *key, struct name_info *out);

const char *name_class_name(enum name_class c);
const char *name_family_name(enum name_family f);

/* The key prefix of a family ("model.language_model." ...). */
const char *name_family_prefix(enum name_family f);

#endif
