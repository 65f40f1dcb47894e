/* plan.h - what convert does to each canonical tensor, and the byte streams
 * that carry it out.
 *
 * Default (no --bits, --mode or --quantize): every tensor keeps its source
 * representation. Quantizing is MLX's: affine, or an MX mode (mxfp4, nvfp4,
 * mxfp8); norms, layer_scalar, router.scale and router.per_expert_scale are
 * never quantized; the MoE router projection is affine 8-bit group 64 (as
 * mlx-lm's Gemma 4 predicate, in every mode). Requantizing an MLX-quantized
 * source needs --allow-requantize. */
#ifndef GP_PLAN_H
#define GP_PLAN_H

#include <regex.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "ingest/normalize.h"

struct plan_rule {
    char *pattern;        /* as given, for messages and provenance */
    regex_t re;           /* matched (unanchored) against canonical tensor names */
    enum qmode mode;      /* --quantize REGEX=BITS[:GROUP] (affine) or REGEX=MODE */
    int bits, group_size; /* 0 for --keep-dense */
};

struct plan_opts {
    enum qmode mode;      /* --mode (default affine) */
    int bits;             /* 0: no global requantization (an MX --mode implies its bits) */
    int group_size;       /* 0: the mode's default (convert_run resolves it) */
    struct plan_rule *quantize;
    size_t n_quantize;
    struct plan_rule *keep_dense;
    size_t n_keep_dense;
    bool ple_dense;       /* --ple-projection dense */
    bool skip_last_full;  /* --skip-last-full-attention */
    bool allow_requantize;
    bool qat_lattice;
    bool mlx;             /* the output is MLX safetensors: ggml blocks MLX affine holds exactly are transcoded */
};

enum plan_action {
    ACT_COPY,        /* bytes as in the source (float, or an MLX triplet) */
    ACT_QUANTIZE,    /* float -> MLX quantized */
    ACT_REQUANTIZE,  /* MLX quantized -> float32 -> MLX quantized another way */
    ACT_DEQUANTIZE,  /* MLX quantized -> F32 (a dense-kept module of a quantized source) */
    ACT_TRANSCODE,   /* ggml Q4_1 / Q5_0 / Q5_1 blocks -> MLX affine group 32, value for value (an MLX output) */
};

struct plan_item {
    const struct norm_tensor *nt;
    enum plan_action act;
    enum qmode mode;          /* output quantization (quantized outputs) */
    int bits, group_size;
    enum dtype dtype;         /* float output dtype, or the scales dtype (U8 for MX) */
    bool quantized_out;
    char why[96];             /* the rule that decided */
    uint64_t bytes;           /* output bytes (all parts) */
    bool lattice;             /* --qat-lattice: 4-bit group 32 on the QAT grid where exact */
    uint64_t lattice_groups, lattice_exact; /* groups quantized, and reproduced exactly */
    bool measured;            /* max_err known: a copy, or the tensor was streamed */
    double max_err;           /* max |output − source value| over the weights (0: bit for bit) */
    double sq_err;            /* Σ (output − source value)², for the RMS error */
};

struct plan {
    struct plan_item *items;
    size_t n;
    uint64_t bytes, params;   /* totals: output bytes, logical weights */
};

/* Parses "REGEX=BITS[:GROUP]" or "REGEX=MODE" (or "REGEX" with is_dense) into a rule. */
int plan_rule_parse(struct plan_rule *r, const char *arg, bool is_dense, struct err *e);
void plan_rule_free(struct plan_rule *r);

int plan_build(const struct normalized *n, const struct gp_config *c, const struct plan_opts *o, struct plan *p,
               struct err *e);
void plan_free(struct plan *p);

const char *plan_action_name(enum plan_action a);

/* The per-tensor plan and totals (bytes, bits per weight), for --dry-run. */
void plan_print(FILE *out, const struct plan *p);
struct json_object *plan_json(const struct plan *p);

/* ---- producing the output tensors ---- */

enum out_part { PART_WEIGHT, PART_SCALES, PART_BIASES };

/* One output tensor: a float tensor, or one part of a quantized module
 * (weight, scales, and for affine biases). */
struct out_tensor {
    struct plan_item *item;
    enum out_part part;
    char name[NORM_NAME_MAX + 16];  /* canonical name */
    enum dtype dtype;
    int rank;
    uint64_t shape[3];
    uint64_t nbytes;
};

/* The output tensors of a plan, in order (a triplet's parts are adjacent). */
int plan_outputs(const struct plan *p, struct out_tensor **out, size_t *n, struct err *e);

/* Byte sink: a pack or a safetensors writer. */
typedef int (*sink_fn)(void *ctx, const void *data, size_t len, struct err *e);

/* Streams out[i]'s bytes to the sink. Parts of a triplet must be produced in
 * order (weight, scales, biases): `state` carries scales/biases between them
 * (zero-initialise it; plan_stream_free releases it). */
struct stream_state {
    uint8_t *scales, *biases;
    size_t nbytes;
    int threads; /* quantization workers; the output does not depend on it */
};
int plan_stream(const struct ckpt *ck, struct out_tensor *t, struct stream_state *st, sink_fn sink, void *ctx,
                struct err *e);
void plan_stream_free(struct stream_state *st);

#endif
