#include "model/names.h"

#include <stdlib.h>
#include <string.h>

static bool starts(const char *s, const char *p)
{
    return strncmp(s, p, strlen(p)) == 0;
}

static bool ends(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

/* Tower and projector roots, matched after an optional "model." or
 * "language_model." wrapper prefix never applies to them. */
static const struct {
    const char *root;
    enum name_class cls;
} towers[] = {
    {"vision_tower.", NC_VISION},   {"vision_embedder.", NC_VISION}, {"audio_tower.", NC_AUDIO},
    {"embed_vision.", NC_PROJECTOR}, {"embed_audio.", NC_PROJECTOR}, {"multi_modal_projector.", NC_PROJECTOR},
};

static const char *const clip_suffixes[] = {".input_min", ".input_max", ".output_min", ".output_max"};

void names_classify(const char *key, struct name_info *out)
{
    out->cls = NC_UNKNOWN;
    out->fam = NF_NONE;
    out->rel = NULL;
    out->layer = -1;

    const char *k = starts(key, "model.") ? key + 6 : key;
    for (size_t i = 0; i < sizeof towers / sizeof towers[0]; i++)
        if (starts(k, towers[i].root)) {
            out->cls = towers[i].cls;
            return;
        }
    if (!strcmp(key, "lm_head.weight") || !strcmp(key, "language_model.lm_head.weight")) {
        out->cls = NC_LM_HEAD;
        return;
    }
    for (enum name_family f = NF_HF; f <= NF_TEXT && !out->rel; f++) /* "model." last: it prefixes the HF one */
        if (starts(key, name_family_prefix(f))) {
            out->fam = f;
            out->rel = key + strlen(name_family_prefix(f));
        }
    if (!out->rel)
        return; /* NC_UNKNOWN */
    out->cls = NC_TEXT;
    for (size_t i = 0; i < sizeof clip_suffixes / sizeof clip_suffixes[0]; i++)
        if (ends(out->rel, clip_suffixes[i]))
            out->cls = NC_CLIP;
    if (strstr(out->rel, "rotary_emb"))
        out->cls = NC_ROTARY;
    if (starts(out->rel, "layers.")) {
        const char *p = out->rel + 7;
        char *endp;
        long n = strtol(p, &endp, 10);
        /* Plain decimal only: strtol alone would also take "+5", " 5" or "-0". */
        if (p[0] >= '0' && p[0] <= '9' && endp != p && *endp == '.' && n >= 0 && n < 1000000 &&
            (p[0] != '0' || endp == p + 1))
            out->layer = (int)n;
    }
}

const char *name_class_name(enum name_class c)
{
    switch (c) {
    case NC_TEXT: return "text";
    case NC_VISION: return "vision_tower";
    case NC_AUDIO: return "audio_tower";
    case NC_PROJECTOR: return "projector";
    case NC_CLIP: return "clip_bound";
    case NC_ROTARY: return "rotary_table";
    case NC_LM_HEAD: return "lm_head";
    case NC_UNKNOWN: return "unknown";
    }
    return "unknown";
}

const char *name_family_name(enum name_family f)
{
    switch (f) {
    case NF_HF: return "hf";
    case NF_MLX: return "mlx";
    case NF_TEXT: return "text";
    case NF_NONE: return "none";
    }
    return "none";
}

const char *name_family_prefix(enum name_family f)
{
    switch (f) {
    case NF_HF: return "model.language_model.";
    case NF_MLX: return "language_model.model.";
    case NF_TEXT: return "model.";
    case NF_NONE: return "";
    }
    return "";
}
