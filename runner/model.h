/* model.h - a Gemma 4 text model ready to run: config + weight views.
 *
 * Opened through ingest_open from a .gpk pack (mapped read-only, validated)
 * or a checkpoint (checked, normalized in memory, never requantized). Matrices are
 * views into the mapped file in their stored form (F32/F16/BF16 or MLX affine
 * codes + scales + biases), or into model_load_weights' copy of them; only
 * vectors (norm weights, scalars) are converted to float. Shapes are checked against the config before anything runs. */
#ifndef GP_MODEL_H
#define GP_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "model/config.h"
#include "core/err.h"
#include "ingest/ingest.h"
#include "kernels/kernels.h"

/* Bound from model/layout's rows of the canonical form (runner/model.c bind_at). */
struct layer_weights {
    float *ln_in;                 /* [H] input_layernorm */
    struct wmat q;                /* [Nq·d, H] */
    float *q_norm;                /* [d] */
    struct wmat k, v;             /* [G·d, H]; k.w NULL on KV-shared layers, v.w NULL when k_eq_v */
    float *k_norm;                /* [d] (owning layers) */
    struct wmat o;                /* [H, Nq·d] */
    float *ln_post_attn;          /* [H] post_attention_layernorm */
    float *ln_pre_ff;             /* [H] pre_feedforward_layernorm */
    struct wmat gate, up;         /* [I_i, H] */
    struct wmat down;             /* [H, I_i] */
    float *ln_post_ff;            /* [H] post_feedforward_layernorm */
    /* MoE (26B-A4B) */
    float *ln_post_ff1;           /* [H] post-norm of the dense branch */
    struct wmat router;           /* [E, H] */
    float *router_scale;          /* [H] */
    float *per_expert_scale;      /* [E] */
    float *ln_pre_ff2;            /* [H] pre-norm of the experts */
    struct wmat ex_gate, ex_up;   /* [E, M, H] (expert stride set) */
    struct wmat ex_down;          /* [E, H, M] */
    float *ln_post_ff2;           /* [H] post-norm of the expert branch */
    /* per-layer inputs (P > 0) */
    struct wmat ple_gate;         /* [P, H] per_layer_input_gate */
    struct wmat ple_proj;         /* [H, P] per_layer_projection */
    float *ln_post_ple;           /* [H] post_per_layer_input_norm */
    float *layer_scalar;          /* [1] */
};

struct model {
    struct gp_config cfg;
    struct ingested src;          /* the pack or checkpoint: its tensors by name (ingest/ingest.h) */
    bool *used;                   /* [src.n_parts]: bound to a weight (of a pack, every one must be) */
    struct wmat embed;            /* [V, H] embed_tokens (also the tied head) */
    struct wmat ple_embed;        /* [V_ple, L·P] embed_tokens_per_layer */
    struct wmat ple_model_proj;   /* [L·P, H] per_layer_model_projection */
    float *ple_proj_norm;         /* [P] per_layer_projection_norm */
    float *final_norm;            /* [H] norm */
    struct layer_weights *layers; /* [L] */
    float **owned;                /* float copies to free */
    size_t n_owned, cap_owned;
    uint64_t weight_bytes;        /* matrix bytes one decode step reads (the PLE table, of which it
                                     reads one row, excluded; embed_tokens counted once, as the head;
                                     of the routed experts, the top-k a token takes) */
    uint8_t *arena;               /* model_load_weights: the matrices' copy (NULL: read in place) */
    size_t arena_size;
    char fingerprint[65];         /* pack: SHA-256 of the manifest, which holds every tensor's CRC, so it
                                     identifies the weights; directory: SHA-256 of the safetensors headers,
                                     which identifies the layout only */
};

/* `gempack verify`: every CRC of the pack at path and its padding
 * (pack_verify), and its tensors exactly those its config uses (model_open).
 * ERR_OK intact, *verdict false for a mismatch (e names it), an error code
 * for a file that cannot be judged (unreadable, a newer version or feature). */
int model_verify(const char *path, bool *verdict, size_t *n_tensors, struct err *e);

/* The pack's path or the directory: what messages about the model name. */
const char *model_name(const struct model *m);

/* Opens a .gpk file or a checkpoint directory. *m must be model_close'd. */
int model_open(struct model *m, const char *path, struct err *e);
void model_close(struct model *m);

/* Copies every matrix a step reads whole (all but the PLE table) into one
 * read-only anonymous mapping advised for transparent huge pages, and points
 * the views there; the file stays mapped for the rest. Same bytes, same
 * results: only faster to stream. File-backed mappings come in 4 KiB pages,
 * and on a 2-vCPU VM decode ran about 1.5× as fast from huge pages (commit
 * ab41c5f). Costs a memory copy of those matrices, made on
 * `threads` threads. Every matrix kern_blockable takes is laid out in
 * blocks of rows (kern_block_rows): every kernel gives the same bits on it,
 * and the exact and int8 kernels read it faster than rows. */
int model_load_weights(struct model *m, int threads, struct err *e);

#endif
