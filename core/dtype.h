/* dtype.h - safetensors element types, their sizes, and float conversions. */
#ifndef GP_DTYPE_H
#define GP_DTYPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "core/err.h"

/* Every dtype string of the safetensors format (INPUTS.md §1.2). */
enum dtype {
    DT_BOOL, DT_U8, DT_I8, DT_F8_E5M2, DT_F8_E4M3, DT_F8_E8M0, DT_F8_E4M3FNUZ, DT_F8_E5M2FNUZ,
    DT_F4, DT_F6_E2M3, DT_F6_E3M2, DT_I16, DT_U16, DT_F16, DT_BF16,
    DT_I32, DT_U32, DT_F32, DT_F64, DT_I64, DT_U64, DT_C64,
    DT_COUNT
};

struct dtype_info {
    const char *name; /* exact, case-sensitive safetensors string */
    unsigned bits;    /* bits per element (4 and 6 for packed sub-byte types) */
};

extern const struct dtype_info dtype_table[DT_COUNT];

static inline const char *dtype_name(enum dtype t) { return dtype_table[t].name; }

/* Looks up a dtype string of length len (need not be NUL-terminated). */
bool dtype_from_name(const char *s, size_t len, enum dtype *out);

/* True for F32, F16, BF16: the float types weights and activations use. */
bool dtype_is_weight_float(enum dtype t);

/* The index of the first of n values of float dtype t (F32, F16 or BF16;
 * raw little-endian bytes, any alignment) that is NaN or infinite, or -1. */
int64_t dtype_first_nonfinite(enum dtype t, const uint8_t *p, uint64_t n);

/* Number of bytes of a tensor of this dtype and shape; checked for overflow
 * and for a whole number of bytes. Returns ERR_OK or ERR_RANGE (message names
 * the problem; the caller prefixes the tensor name). */
int dtype_nbytes(enum dtype t, const uint64_t *shape, int rank, uint64_t *nbytes, struct err *e);

/* "[512, 128]" into buf (truncated to len). Returns buf. */
char *shape_format(char *buf, size_t len, const uint64_t *shape, int rank);

/* Number of elements (product of dims), checked. */
bool shape_numel(const uint64_t *shape, int rank, uint64_t *numel);

static inline float bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
uint16_t f32_to_bf16(float f); /* round to nearest even; NaN -> 0x7FC0 */
float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);  /* round to nearest even */

/* Converts n elements of F32/F16/BF16 at src (little-endian, any alignment)
 * to f32. t must satisfy dtype_is_weight_float. */
void dtype_to_f32(enum dtype t, const void *src, float *dst, size_t n);

/* Converts n f32 values to F32/F16/BF16 little-endian bytes at dst. */
void dtype_from_f32(enum dtype t, const float *src, void *dst, size_t n);

#endif
