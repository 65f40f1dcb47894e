/* layout.h - the text-model tensor set a config implies.
 *
 * Derived from config semantics alone (MODEL.md §2.2-2.5):
 * head dims by layer type, KV heads, k_eq_v (no v_proj), KV-shared layers
 * (their K/V are redundant), the double-wide MLP, PLE, MoE experts fused
 * (HF) or split (MLX). `gempack check` compares a checkpoint with it and
 * `gempack fixture` writes it, so both read the same rules. */
#ifndef GP_LAYOUT_H
#define GP_LAYOUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/config.h"
#include "core/err.h"

enum expert_form {
    EXPERTS_FUSED, /* HF: experts.gate_up_proj [E, 2M, H], experts.down_proj [E, H, M] */
    EXPERTS_SPLIT, /* MLX: experts.switch_glu.{gate,up,down}_proj.weight [E, M, H] / [E, H, M] */
};

#define LAYOUT_NAME_MAX 128

struct layout_entry {
    char name[LAYOUT_NAME_MAX];   /* text-relative tensor name, e.g. layers.3.self_attn.q_proj.weight */
    char module[LAYOUT_NAME_MAX]; /* module path if quantizable (name without ".weight"), else "" */
    int rank;
    uint64_t shape[3];            /* logical (unquantized) shape, [.., out, in] */
    int layer;                    /* -1 for global tensors */
    bool redundant;               /* K/V of a KV-shared layer: optional, never used */
    bool router;                  /* the MoE router projection (8-bit g64 by convention) */
};

/* Builds the expected entries in execution order (globals, then layer 0..L-1,
 * then the final norm). *out is malloc'ed; free() it. */
int layout_build(const struct gp_config *c, enum expert_form form, struct layout_entry **out, size_t *n,
                 struct err *e);

/* Shapes of an MLX affine triplet for a logical [.., out, in] shape:
 * weight U32 [.., out, in*bits/32], scales and biases [.., out, in/gs].
 * False when `in` is not a multiple of gs (or of 32/gcd). */
bool layout_quant_shapes(const struct layout_entry *le, int bits, int group_size, uint64_t wshape[3],
                         uint64_t sshape[3]);

#endif
