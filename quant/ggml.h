/* ggml.h - ggml's weight block types, dequantized exactly as ggml does
 * (INPUTS.md §6.3).
 *
 * One row per block type: the definitions of `dequantize_row_*` in ggml's
 * ggml-quants.c, written from the block layouts (ggml-common.h) and giving
 * the same float bits: the same float operations in the same order, ggml's
 * f16 → f32 (exact) and e8m0 conversions. Blocks are read byte by byte
 * (little-endian, any alignment). The type's name, weights and bytes per
 * block are core/gguf.c's table (ggml_type_info), the one table of ggml
 * types: the GGUF reader validates tensor sizes with it. */
#ifndef GP_QUANT_GGML_H
#define GP_QUANT_GGML_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct ggml_qtype {
    uint32_t id;                  /* ggml type id (enum ggml_type) */
    const char *name;             /* ggml's name, upper case ("Q4_K") */
    uint32_t block;               /* weights per block */
    uint32_t bytes;               /* bytes per block */
    double bpw;                   /* bits per weight: 8 * bytes / block */
    /* n weights (a multiple of block) from n / block blocks into out[n] */
    void (*dequant)(const uint8_t *blocks, float *out, size_t n);
    /* The first of n_blocks blocks whose scale fields (f16 d and dmin, an
     * e8m0 exponent) decode to NaN or infinity, or -1. */
    int64_t (*bad_scale)(const uint8_t *blocks, size_t n_blocks);
};

/* The row of a ggml type id, or false for an id without a dequantization here. */
bool ggml_qtype_find(uint32_t id, struct ggml_qtype *out);

/* The same by name, in any case ("q4_K", "Q4_K", "mxfp4"). */
bool ggml_qtype_find_name(const char *name, struct ggml_qtype *out);

/* Row i of the table (false past its end): for walking every type. */
bool ggml_qtype_at(size_t i, struct ggml_qtype *out);

/* The ggml types MLX affine group 32 holds exactly in as many bits (Q4_1:
 * 4 bits, scale d, bias m; Q5_1: 5 bits, d, m; Q5_0: 5 bits, d, −16·d;
 * docs/INPUTS.md §6.3): their bits, else 0. */
int ggml_affine_bits(uint32_t id);

/* n weights of such blocks as MLX affine group 32: codes packed as
 * quant_pack_codes does, f16 scales and biases (one per group). Returns the
 * first group whose bias f16 cannot hold (Q5_0's −16·d past 65504), or -1. */
int64_t ggml_to_affine(uint32_t id, const uint8_t *blocks, size_t n, uint32_t *words, uint8_t *scales,
                       uint8_t *biases);

/* Format data (quant/ggml_grids.c, generated from ggml-common.h by
 * tests/ggml/extract_grids.py). Grid rows are an entry's bytes, least
 * significant first. */
extern const float ggml_iq1s_delta;
extern const uint8_t ggml_kmask_iq2xs[8];
extern const uint8_t ggml_ksigns_iq2xs[128];
extern const uint8_t ggml_iq2xxs_grid[256][8];
extern const uint8_t ggml_iq2xs_grid[512][8];
extern const uint8_t ggml_iq2s_grid[1024][8];
extern const uint8_t ggml_iq3xxs_grid[256][4];
extern const uint8_t ggml_iq3s_grid[512][4];
extern const int8_t ggml_iq1s_grid[2048][8];
extern const int8_t ggml_kvalues_iq4nl[16];
extern const int8_t ggml_kvalues_mxfp4[16];   /* e2m1, doubled */

#endif
