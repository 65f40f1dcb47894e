/* qmode.h - the quantization modes a checkpoint's metadata can name, one
 * table entry each (INPUTS.md §2.1): what config.json and a pack manifest
 * say about a quantized module. The arithmetic of each mode lives in quant/. */
#ifndef GP_QMODE_H
#define GP_QMODE_H

#include <stdbool.h>
#include <stddef.h>

enum qmode { QM_AFFINE, QM_MXFP4, QM_NVFP4, QM_MXFP8 };

/* "affine", "mxfp4", ... ; false for an unknown string. */
bool qmode_from_name(const char *s, enum qmode *out);
const char *qmode_name(enum qmode m);

/* The mode's default group size and bits (mlx-lm's: affine 64/4, mxfp4
 * 32/4, nvfp4 16/4, mxfp8 32/8). */
/* "affine 4-bit group 64", "mxfp4": how reports name a module's quantization. */
const char *qmode_describe(enum qmode m, int bits, int group_size, char *buf, size_t len);

void qmode_defaults(enum qmode m, int *group_size, int *bits);

/* True when (bits, group_size) is allowed for the mode: affine bits in
 * {2,3,4,5,6,8} and group sizes {32,64,128}; the others their one pair. */
bool quant_params_valid(enum qmode m, int bits, int group_size);

#endif
