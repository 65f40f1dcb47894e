/* bytes.h - little-endian loads/stores and overflow-checked arithmetic.
 * Header-only, no I/O. Loads and stores go byte by byte: pointers into
 * mapped files may be unaligned (MLX writes safetensors without padding). */
#ifndef GP_BYTES_H
#define GP_BYTES_H

#include <stdbool.h>
#include <stdint.h>

static inline uint16_t rd_u16le(const void *p)
{
    const uint8_t *b = p;
    return (uint16_t)(b[0] | (b[1] << 8));
}

static inline uint32_t rd_u32le(const void *p)
{
    const uint8_t *b = p;
    return (uint32_t)b[0] | ((uint32_t)b[1] << 8) | ((uint32_t)b[2] << 16) | ((uint32_t)b[3] << 24);
}

static inline uint64_t rd_u64le(const void *p)
{
    const uint8_t *b = p;
    return (uint64_t)rd_u32le(b) | ((uint64_t)rd_u32le(b + 4) << 32);
}

static inline void wr_u16le(void *p, uint16_t v)
{
    uint8_t *b = p;
    b[0] = (uint8_t)v;
    b[1] = (uint8_t)(v >> 8);
}

static inline void wr_u32le(void *p, uint32_t v)
{
    uint8_t *b = p;
    for (int i = 0; i < 4; i++)
        b[i] = (uint8_t)(v >> (8 * i));
}

static inline void wr_u64le(void *p, uint64_t v)
{
    uint8_t *b = p;
    for (int i = 0; i < 8; i++)
        b[i] = (uint8_t)(v >> (8 * i));
}

/* Checked arithmetic: return false on overflow (result then unspecified). */
static inline bool ck_mul_u64(uint64_t a, uint64_t b, uint64_t *out)
{
    return !__builtin_mul_overflow(a, b, out);
}

static inline bool ck_add_u64(uint64_t a, uint64_t b, uint64_t *out)
{
    return !__builtin_add_overflow(a, b, out);
}

/* Rounds v up to a multiple of the power of two `a`; false on overflow. */
static inline bool ck_align_u64(uint64_t v, uint64_t a, uint64_t *out)
{
    uint64_t t;
    if (!ck_add_u64(v, a - 1, &t))
        return false;
    *out = t & ~(a - 1);
    return true;
}

#endif
