/* quant.h - MLX affine quantization (formats.md §2): the scalar definition.
 *
 * A row of K weights is cut into groups of `gs` consecutive elements; each
 * group has a float scale and bias and b-bit codes q with w = scale*q + bias.
 * Codes of a row form one LSB-first bitstream over little-endian uint32 words
 * (element i occupies bits [i*b, i*b+b)), K*b/32 words per row.
 * The quantizer is MLX's CPU algorithm (formats.md §2.2), bit-exact on the
 * test vectors of formats.md §2.7. */
#ifndef GP_QUANT_H
#define GP_QUANT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/dtype.h"

enum qmode { QM_AFFINE, QM_MXFP4, QM_NVFP4, QM_MXFP8 };

/* "affine", "mxfp4", ... ; false for an unknown string. */
bool qmode_from_name(const char *s, enum qmode *out);
const char *qmode_name(enum qmode m);

/* Mode defaults (formats.md §2.1): affine 64/4, mxfp4 32/4, nvfp4 16/4, mxfp8 32/8. */
void qmode_defaults(enum qmode m, int *group_size, int *bits);

/* True when (bits, group_size) is allowed for the mode:
 * affine: bits in {2,3,4,5,6,8}, gs in {32,64,128}; fp modes: their one pair. */
bool quant_params_valid(enum qmode m, int bits, int group_size);

/* Number of uint32 words holding k codes of `bits` bits (k*bits/32; callers
 * guarantee k is a multiple of the group size, so this is exact). */
static inline size_t quant_row_words(size_t k, int bits) { return k * (size_t)bits / 32; }

/* Packs n codes (each < 2^bits) into the LSB-first bitstream `words`
 * (n*bits/32 words, zero-initialised by this function). */
void quant_pack_codes(const uint8_t *codes, size_t n, int bits, uint32_t *words);

/* Extracts code i of a packed row. `words` is raw little-endian bytes of the
 * row (any alignment). */
uint32_t quant_code_at(const uint8_t *row_bytes, size_t i, int bits);

/* Scale and bias of a group from its minimum and maximum (NaN never taken
 * by either), before rounding to the storage dtype. */
void quant_params_from_range(float wmin, float wmax, int bits, float *scale, float *bias);

/* Quantizes one group of gs float32 values with the MLX CPU algorithm.
 * Writes gs codes, and the float32 scale and bias (before rounding to the
 * storage dtype; codes are computed with these unrounded values). */
void quant_affine_group(const float *w, int gs, int bits, uint8_t *codes, float *scale, float *bias);

#define QUANT_MAX_GROUP 128

/* Quantizes a row of k values (k a multiple of gs, gs 32, 64 or 128): packed words
 * (k*bits/32), and k/gs scales and biases stored in `sdt` (F32/F16/BF16) as
 * little-endian bytes. */
void quant_affine_row(const float *w, size_t k, int gs, int bits, enum dtype sdt,
                      uint32_t *words, void *scales, void *biases);

/* Dequantizes a row: k values from packed row bytes and scales/biases of
 * dtype sdt (raw little-endian bytes, any alignment). */
void dequant_affine_row(const uint8_t *row_bytes, const void *scales, const void *biases,
                        enum dtype sdt, size_t k, int gs, int bits, float *out);

#endif
