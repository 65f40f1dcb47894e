/* normalize.h - one canonical form for every checkpoint layout (MODEL.md §2.7).
 *
 * Text keys lose exactly one prefix (model.language_model., language_model.model.
 * or model.); towers, projectors, clip bounds and rotary tables are set aside;
 * K/V tensors of KV-shared layers are pruned (decided by the config, after
 * prefix classification, so a vision tower's layers.15.self_attn.k_proj is
 * never touched); HF fused experts.gate_up_proj is split into gate and up;
 * MLX experts.switch_glu.* lose the switch_glu level; lm_head.weight is
 * accepted only when it equals the tied embedding. Every dropped or
 * transformed tensor goes into the normalization log with its reason. */
#ifndef GP_NORMALIZE_H
#define GP_NORMALIZE_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>

#include "core/checkpoint.h"
#include "model/config.h"
#include "core/err.h"
#include "model/layout.h"
#include "model/names.h"

#define NORM_NAME_MAX 192

/* A canonical tensor and where its bytes come from. */
struct norm_tensor {
    char name[NORM_NAME_MAX];      /* canonical, e.g. layers.3.experts.gate_proj.weight */
    char module[NORM_NAME_MAX];    /* canonical module path when quantizable, else "" */
    int layer;                     /* -1 for global tensors */
    bool router;                   /* the MoE router projection */
    int rank;
    uint64_t shape[3];             /* logical shape [.., out, in] */
    const struct ckpt_tensor *w;   /* float weight, or U32 codes when quantized */
    const struct ckpt_tensor *s, *b; /* scales / biases of an MLX-quantized source, else NULL */
    struct cfg_qspec q;            /* source quantization (q.quantized false for float) */
    int split;                     /* 1 gate half, 2 up half of a fused [E, 2M, H] source */
};

/* A key that is not carried into the canonical text model, or one that is
 * transformed on the way. */
struct norm_log {
    char tensor[256];              /* the source key */
    const char *action;            /* "dropped", "pruned", "split", "renamed", "checked" */
    char reason[160];
};

struct normalized {
    enum name_family family;       /* text prefix of the source */
    struct norm_tensor *t;         /* execution order */
    size_t n;
    struct norm_log *log;
    size_t n_log, cap_log;
    const struct ckpt_tensor **towers; /* tower/projector keys, for the MLX export */
    size_t n_towers;
};

/* Builds the canonical tensor list of a checkpoint that `gempack check`
 * accepts. The checkpoint must be opened with data (not header-only) when
 * lm_head.weight is present, since it is compared with the embedding. */
int normalize(const struct ckpt *ck, const struct gp_config *c, struct normalized *out, struct err *e);

void normalize_free(struct normalized *n);

/* The normalization log as a JSON array of {tensor, action, reason}. */
struct json_object *normalize_log_json(const struct normalized *n);

#endif
