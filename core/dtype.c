#include "core/dtype.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/bytes.h"

const struct dtype_info dtype_table[DT_COUNT] = {
    [DT_BOOL] = {"BOOL", 8},           [DT_U8] = {"U8", 8},
    [DT_I8] = {"I8", 8},               [DT_F8_E5M2] = {"F8_E5M2", 8},
    [DT_F8_E4M3] = {"F8_E4M3", 8},     [DT_F8_E8M0] = {"F8_E8M0", 8},
    [DT_F8_E4M3FNUZ] = {"F8_E4M3FNUZ", 8}, [DT_F8_E5M2FNUZ] = {"F8_E5M2FNUZ", 8},
    [DT_F4] = {"F4", 4},               [DT_F6_E2M3] = {"F6_E2M3", 6},
    [DT_F6_E3M2] = {"F6_E3M2", 6},     [DT_I16] = {"I16", 16},
    [DT_U16] = {"U16", 16},            [DT_F16] = {"F16", 16},
    [DT_BF16] = {"BF16", 16},          [DT_I32] = {"I32", 32},
    [DT_U32] = {"U32", 32},            [DT_F32] = {"F32", 32},
    [DT_F64] = {"F64", 64},            [DT_I64] = {"I64", 64},
    [DT_U64] = {"U64", 64},            [DT_C64] = {"C64", 64},
};

bool dtype_from_name(const char *s, size_t len, enum dtype *out)
{
    for (int i = 0; i < DT_COUNT; i++) {
        const char *n = dtype_table[i].name;
        if (strlen(n) == len && memcmp(n, s, len) == 0) {
            *out = (enum dtype)i;
            return true;
        }
    }
    return false;
}

bool dtype_is_weight_float(enum dtype t)
{
    return t == DT_F32 || t == DT_F16 || t == DT_BF16;
}

char *shape_format(char *buf, size_t len, const uint64_t *shape, int rank)
{
    size_t o = (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < rank && o < len; i++)
        o += (size_t)snprintf(buf + o, len - o, "%s%llu", i ? ", " : "", (unsigned long long)shape[i]);
    if (o < len)
        snprintf(buf + o, len - o, "]");
    return buf;
}

bool shape_numel(const uint64_t *shape, int rank, uint64_t *numel)
{
    uint64_t n = 1;
    for (int i = 0; i < rank; i++)
        if (!ck_mul_u64(n, shape[i], &n))
            return false;
    *numel = n;
    return true;
}

int dtype_nbytes(enum dtype t, const uint64_t *shape, int rank, uint64_t *nbytes, struct err *e)
{
    uint64_t n, bits;
    if (!shape_numel(shape, rank, &n))
        return err_set(e, ERR_RANGE, "element count overflows 64 bits");
    if (!ck_mul_u64(n, dtype_table[t].bits, &bits))
        return err_set(e, ERR_RANGE, "bit count overflows 64 bits (%llu elements of %s)",
                       (unsigned long long)n, dtype_table[t].name);
    if (bits % 8 != 0)
        return err_set(e, ERR_RANGE, "%llu elements of %s do not fill a whole number of bytes",
                       (unsigned long long)n, dtype_table[t].name);
    *nbytes = bits / 8;
    return ERR_OK;
}

uint16_t f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return 0x7fc0;
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

float f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    uint32_t u;
    if (exp == 0x1f) {
        u = sign | 0x7f800000u | (man << 13);
    } else if (exp != 0) {
        u = sign | ((exp + 112u) << 23) | (man << 13);
    } else if (man == 0) {
        u = sign;
    } else {
        /* subnormal: value = man * 2^-24, exact in f32 */
        float v = (float)man * 0x1p-24f;
        memcpy(&u, &v, 4);
        u |= sign;
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t f32_to_f16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u)
        return sign | 0x7e00;
    if (a >= 0x477ff000u) /* rounds to >= 65520: inf */
        return sign | 0x7c00;
    if (a < 0x38800000u) { /* below the smallest normal 2^-14: subnormal or zero */
        float v;
        memcpy(&v, &a, 4);
        /* man = round_even(v * 2^24); exact scaling, then nearbyint (default RNE) */
        float m = nearbyintf(v * 0x1p24f);
        return sign | (uint16_t)m;
    }
    uint32_t r = a + 0xfffu + ((a >> 13) & 1u);
    return sign | (uint16_t)((r - 0x38000000u) >> 13);
}

void dtype_to_f32(enum dtype t, const void *src, float *dst, size_t n)
{
    const uint8_t *s = src;
    switch (t) {
    case DT_F32:
        memcpy(dst, s, n * 4);
        break;
    case DT_BF16:
        for (size_t i = 0; i < n; i++)
            dst[i] = bf16_to_f32(rd_u16le(s + 2 * i));
        break;
    case DT_F16:
        for (size_t i = 0; i < n; i++)
            dst[i] = f16_to_f32(rd_u16le(s + 2 * i));
        break;
    default:
        break;
    }
}

void dtype_from_f32(enum dtype t, const float *src, void *dst, size_t n)
{
    uint8_t *d = dst;
    switch (t) {
    case DT_F32:
        memcpy(d, src, n * 4);
        break;
    case DT_BF16:
        for (size_t i = 0; i < n; i++)
            wr_u16le(d + 2 * i, f32_to_bf16(src[i]));
        break;
    case DT_F16:
        for (size_t i = 0; i < n; i++)
            wr_u16le(d + 2 * i, f32_to_f16(src[i]));
        break;
    default:
        break;
    }
}

int64_t dtype_first_nonfinite(enum dtype t, const uint8_t *p, uint64_t n)
{
    /* an all-ones exponent field: F32 bits 23..30, F16 10..14, BF16 7..14 */
    uint32_t mask = t == DT_F32 ? 0x7F800000u : t == DT_F16 ? 0x7C00u : 0x7F80u;
    size_t size = t == DT_F32 ? 4 : 2;
    for (uint64_t i = 0; i < n; i++) {
        uint32_t v = size == 4 ? rd_u32le(p + 4 * i) : rd_u16le(p + 2 * i);
        if ((v & mask) == mask)
            return (int64_t)i;
    }
    return -1;
}
