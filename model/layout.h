/* layout.h - the tensors of Gemma 4's text model: one table row per kind,
 * and the tensor set a config implies.
 *
 * A row gives the name, the shape in config quantities (MODEL.md §1.3, §2.2-2.5:
 * head dims by layer type, KV heads, the double-wide MLP), when the tensor is
 * present (KV-owning layers, no v_proj under k_eq_v, MoE, PLE, the experts'
 * forms), its role and llama.cpp's name. `gempack check` compares a
 * checkpoint with the set, normalization maps it to the canonical form,
 * `gempack fixture` writes it, the runner binds the canonical form and GGUF
 * names are mapped through it, so all of them read these rows. */
#ifndef GP_LAYOUT_H
#define GP_LAYOUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/config.h"
#include "core/err.h"

/* The kinds, in execution order: global rows before the layers, the rows of
 * every layer, then the global rows after the layers. A row of the canonical
 * form is bound to its field by runner/model.c's bind_at. */
enum tensor_kind {
    TK_EMBED, TK_PLE_EMBED, TK_PLE_MODEL_PROJ, TK_PLE_PROJ_NORM,
    TK_LN_IN, TK_Q, TK_Q_NORM, TK_K, TK_K_NORM, TK_V, TK_O, TK_LN_POST_ATTN, TK_LN_PRE_FF, TK_GATE, TK_UP, TK_DOWN,
    TK_LN_POST_FF1, TK_ROUTER, TK_ROUTER_SCALE, TK_PER_EXPERT_SCALE, TK_LN_PRE_FF2,
    TK_EX_GATE_UP_HF, TK_EX_DOWN_HF, TK_EX_GATE_MLX, TK_EX_UP_MLX, TK_EX_DOWN_MLX, TK_EX_GATE, TK_EX_UP, TK_EX_DOWN,
    TK_LN_POST_FF2, TK_LN_POST_FF, TK_PLE_GATE, TK_PLE_PROJ, TK_LN_POST_PLE, TK_LAYER_SCALAR,
    TK_NORM,
    TENSOR_KINDS
};

/* A shape's dimensions, in config quantities (i: the row's layer). */
enum tensor_dim {
    TD_1 = 1, TD_V, TD_H, TD_P, TD_LP /* L·P */, TD_VPLE, TD_D /* d_i */, TD_QD /* Nq·d_i */, TD_KVD /* G_i·d_i */,
    TD_I /* I_i */, TD_E, TD_M, TD_2M,
};

/* How the experts are stored. The canonical form is what normalization
 * makes of either (layers.N.experts.{gate,up,down}_proj, quantizable), what
 * a pack holds and the runner binds. */
enum expert_form {
    EXPERTS_FUSED, /* HF: experts.gate_up_proj [E, 2M, H], experts.down_proj [E, H, M] */
    EXPERTS_SPLIT, /* MLX: experts.switch_glu.{gate,up,down}_proj.weight [E, M, H] / [E, H, M] */
    EXPERTS_CANON,
};

enum {
    TR_LAYER = 1 << 0,    /* one per layer (else one global) */
    TR_QUANT = 1 << 1,    /* a matrix MLX may quantize: the row's name is its module, the tensor's name.weight */
    TR_KV = 1 << 2,       /* K/V: owned by layers < F0; redundant (optional, never used) on a KV-shared layer */
    TR_NOT_KEQV = 1 << 3, /* absent when k_eq_v (V is raw K) */
    TR_MOE = 1 << 4,      /* MoE models only */
    TR_PLE = 1 << 5,      /* per-layer inputs only (P > 0) */
    TR_ROUTER = 1 << 6,   /* the MoE router projection (8-bit g64 by convention) */
    TR_TABLE = 1 << 7,    /* an embedding table */
    TR_HF = 1 << 8,       /* in the HF fused expert form only */
    TR_MLX = 1 << 9,      /* in the MLX split expert form only */
    TR_CANON = 1 << 10,   /* in the canonical expert form only */
};

struct tensor_row {
    const char *name;       /* text-relative, after "layers.N." for a layer row: "self_attn.q_proj" */
    uint8_t dim[3];         /* the logical shape [.., out, in]; rank = the dims given */
    uint16_t flags;
    const char *gguf;       /* llama.cpp's name (after "blk.N."), NULL if it has none (model/gguf_names) */
    uint8_t canon;          /* a row of the HF or MLX expert form: the canonical row it becomes */
};

extern const struct tensor_row tensor_table[TENSOR_KINDS];

#define LAYOUT_NAME_MAX 128

struct layout_entry {
    char name[LAYOUT_NAME_MAX];   /* text-relative tensor name, e.g. layers.3.self_attn.q_proj.weight */
    char module[LAYOUT_NAME_MAX]; /* module path if quantizable (name without ".weight"), else "" */
    enum tensor_kind kind;
    unsigned flags;               /* its row's */
    int rank;
    uint64_t shape[3];            /* logical (unquantized) shape, [.., out, in] */
    int layer;                    /* -1 for global tensors */
    bool redundant;               /* K/V of a KV-shared layer: optional, never used */
};

/* The entry of row `kind` at `layer` (-1 for a global row). */
void layout_entry(const struct gp_config *c, enum tensor_kind kind, int layer, struct layout_entry *le);

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
