/* quant.h - the representation of stored weights: MLX quantization modes,
 * the affine definition (INPUTS.md §2), its fast twins, and the QAT
 * lattice. One place that convert, run and the KV cache all use.
 *
 * A row of K weights is cut into groups of `gs` consecutive elements; each
 * group has a float scale and bias and b-bit codes q with w = scale*q + bias.
 * Codes of a row form one LSB-first bitstream over little-endian uint32 words
 * (element i occupies bits [i*b, i*b+b)), K*b/32 words per row.
 * The quantizer is MLX's CPU algorithm (INPUTS.md §2.2), bit-exact on the
 * test vectors of INPUTS.md §2.5. Every fast twin (quant_avx512.c) gives
 * the definition's bits exactly (tests/test_quant.c). */
#ifndef GP_QUANT_H
#define GP_QUANT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/dtype.h"
#include "quant/format.h"

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

/* ---- the fast twins: the definition's bits on the fastest path this CPU has ---- */

/* quant_affine_row. */
void quant_row(const float *w, size_t k, int gs, int bits, enum dtype sdt, uint32_t *words, void *scales,
               void *biases);
/* dequant_affine_row (with AVX-512 or AVX2: every width in vectors). */
void quant_dequant_row(const uint8_t *row_bytes, const void *scales, const void *biases, enum dtype sdt, size_t k,
                       int gs, int bits, float *out);
/* dtype_to_f32 (core/dtype.h). */
void quant_to_f32(enum dtype t, const uint8_t *src, float *dst, size_t n);

void quant_affine_row_avx512(const float *w, size_t k, int gs, int bits, enum dtype sdt, uint32_t *words,
                             void *scales, void *biases);
void quant_dequant_row_avx512(const uint8_t *row, const void *scales, const void *biases, enum dtype sdt, int64_t k,
                              int gs, int bits, float *out);
void quant_to_f32_avx512(enum dtype t, const uint8_t *src, float *dst, int64_t n);
void quant_dequant_row_avx2(const uint8_t *row, const void *scales, const void *biases, enum dtype sdt, int64_t k,
                            int gs, int bits, float *out);
void quant_to_f32_avx2(enum dtype t, const uint8_t *src, float *dst, int64_t n);

/* ---- MLX microscaling modes (INPUTS.md §2.7) ----
 *
 * mxfp4 (E2M1 codes, group 32, E8M0 scales), nvfp4 (E2M1, group 16, E4M3
 * scales) and mxfp8 (E4M3 codes, group 32, E8M0 scales): codes packed as
 * affine's, one uint8 scale per group, no biases. A weight is
 * code value × scale value, exact in float32. */

float mx_e2m1_value(unsigned code);          /* ±{0, .5, 1, 1.5, 2, 3, 4, 6}; bit 3 the sign */
float mx_e4m3_value(uint8_t b);              /* MLX's FromFP8: no NaN, 0x7F is 480 */
uint8_t mx_e4m3_encode(float x);             /* MLX's ToFP8: nearest even, saturating at ±448 */
float mx_scale_value(enum qmode m, uint8_t b); /* E8M0 2^(b−127) (255: +inf), or E4M3 for nvfp4 */
float mx_code_value(enum qmode m, unsigned code);
/* The E2M1 code MLX's CPU quantizer picks for q, whose distances are
 * rounded to t: the argmin itself, and the equal threshold form. */
unsigned mx_e2m1_argmin(enum dtype t, float q);
unsigned mx_e2m1_code(enum dtype t, float q);

/* Quantizes a row of k values of dtype t (BF16, F16 or F32: the values of w
 * are exact in t) as MLX's CPU path does: words (k·bits/32) and k/gs scale
 * bytes. Returns -1, or the index of the first group MLX leaves undefined
 * (mxfp4/mxfp8 with NaN or inf, or an exponent outside −127..127), which
 * gempack refuses; the row is then incomplete. */
int64_t quant_mx_row(enum qmode m, enum dtype t, const float *w, size_t k, uint32_t *words, uint8_t *scales);

/* Dequantizes a row of k values (exact). */
void dequant_mx_row(enum qmode m, const uint8_t *row_bytes, const uint8_t *scales, size_t k, float *out);

/* ---- the QAT lattice (INPUTS.md §2.6) ---- */

/* quant_row at 4 bits, group 32, with every group first tried on the QAT
 * "q4_0" grid: a group whose values are exactly d·q, q in [-8, 7], for one
 * d that `sdt` holds exactly, is stored as codes q + 8, scale d, bias -8d
 * (bit-exact); the others as quant_row stores them. *groups and *exact
 * count the groups and those on the grid. */
void quant_lattice_row(const float *w, size_t k, enum dtype sdt, uint32_t *words, void *scales, void *biases,
                       uint64_t *groups, uint64_t *exact);

#endif
