/* mx.c - MLX's microscaling modes (INPUTS.md §2.7): the E2M1, E4M3 and E8M0
 * encodings, quantization as MLX's CPU path computes it (ml-explore/mlx
 * 846d176, mlx/ops.cpp fp_quantize's fallback; mlx/backend/cpu/unary_ops.h
 * ToFP8 / FromFP8), and the exact dequantization. */
#include "quant/quant.h"

#include <math.h>
#include <string.h>

static const float e2m1[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                               -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

static float from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint32_t to_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

float mx_e2m1_value(unsigned code)
{
    return e2m1[code & 15];
}

float mx_e4m3_value(uint8_t b)
{
    float v = from_bits((uint32_t)(b & 0x7F) << 20) * 0x1p120f; /* exact: 0x7F is 480, no NaN */
    return b & 0x80 ? -v : v;
}

uint8_t mx_e4m3_encode(float x)
{
    uint32_t u = to_bits(x), sign = u & 0x80000000u, r;
    u ^= sign;
    if (u >= 0x43E00000u) /* >= 448, inf and NaN: the largest finite code (MLX has no NaN) */
        r = 0x7E;
    else if (u < 0x3C800000u) /* below 2^-6: subnormal, rounded to 2^-9 steps by one float add */
        r = (uint8_t)(to_bits(from_bits(u) + 16384.0f) - (141u << 23));
    else /* round to nearest even at 3 mantissa bits */
        r = (uint8_t)((u + 0xC4000000u + 0x7FFFFu + ((u >> 20) & 1)) >> 20);
    return (uint8_t)(r | sign >> 24);
}

float mx_scale_value(enum qmode m, uint8_t b)
{
    if (m == QM_NVFP4)
        return mx_e4m3_value(b);
    return b ? from_bits((uint32_t)b << 23) : 0x1p-127f; /* E8M0: 2^(b-127); 255 is +inf */
}

float mx_code_value(enum qmode m, unsigned code)
{
    return m == QM_MXFP8 ? mx_e4m3_value((uint8_t)code) : mx_e2m1_value(code);
}

/* v rounded to the input dtype t (MLX computes each op in float32 and
 * stores it in the array's type). */
static float in_t(enum dtype t, float v)
{
    if (t == DT_BF16)
        return bf16_to_f32(f32_to_bf16(v));
    if (t == DT_F16)
        return f16_to_f32(f32_to_f16(v));
    return v;
}

/* The E2M1 code MLX's argmin gives q: the first of the 16 values whose
 * distance |q − value|, rounded to t, is least (ties toward +0, smaller
 * magnitudes first). */
static unsigned e2m1_argmin(enum dtype t, float q)
{
    unsigned best = 0;
    float bd = fabsf(in_t(t, q - e2m1[0]));
    for (unsigned k = 1; k < 16; k++) {
        float d = fabsf(in_t(t, q - e2m1[k]));
        if (d < bd) {
            bd = d;
            best = k;
        }
    }
    return best;
}

/* The same by thresholds: equal to the argmin where |q| < 512 (every bf16
 * and f16 q, tested exhaustively) and below 2^27 in float32 (sampled), where
 * the rounded distances cannot tie differently. */
static unsigned e2m1_code(enum dtype t, float q)
{
    float a = fabsf(q);
    if (!(a < (t == DT_F32 ? 0x1p27f : 512.0f)))
        return e2m1_argmin(t, q);
    unsigned m = a <= 0.25f ? 0 : a <= 0.75f ? 1 : a <= 1.25f ? 2 : a <= 1.75f ? 3 : a <= 2.5f ? 4 : a <= 3.5f ? 5 : a <= 5.0f ? 6 : 7;
    return m | (q < 0 && m ? 8u : 0u);
}

unsigned mx_e2m1_argmin(enum dtype t, float q)
{
    return e2m1_argmin(t, q);
}

unsigned mx_e2m1_code(enum dtype t, float q)
{
    return e2m1_code(t, q);
}

/* One group of mxfp4 / mxfp8: the E8M0 exponent e = rint(log2(amax/M)),
 * both steps rounded to t, then each element divided by 2^e in t. */
static bool mx_group(enum qmode m, enum dtype t, const float *w, int gs, uint8_t *codes, uint8_t *scale)
{
    float amax = 0.0f;
    for (int i = 0; i < gs; i++) {
        if (!isfinite(w[i]))
            return false; /* NaN or inf: MLX's exponent is undefined */
        float a = fabsf(w[i]);
        amax = a > amax ? a : amax;
    }
    float s = in_t(t, amax / (m == QM_MXFP4 ? 6.0f : 448.0f));
    int e = s == 0.0f ? 0 : (int)rintf(in_t(t, log2f(s)));
    if (e < -127 || e > 127)
        return false; /* its byte e + 127 would not fit: MLX's conversion is undefined */
    float p = in_t(t, ldexpf(1.0f, e));
    if (p == 0.0f || p == INFINITY)
        return false; /* 2^e outside t (F16) */
    *scale = (uint8_t)(e + 127);
    for (int i = 0; i < gs; i++) {
        float q = in_t(t, w[i] / p);
        codes[i] = (uint8_t)(m == QM_MXFP4 ? e2m1_code(t, q) : mx_e4m3_encode(q));
    }
    return true;
}

/* One group of nvfp4: the E4M3 scale of amax/6 (rounded to t first), each
 * element divided by the decoded scale in t, the code by float32 distances. */
static void nv_group(enum dtype t, const float *w, int gs, uint8_t *codes, uint8_t *scale)
{
    float amax = 0.0f;
    for (int i = 0; i < gs; i++) {
        float a = fabsf(w[i]);
        amax = a > amax || a != a ? a : amax; /* NaN propagates, as MLX's max */
    }
    *scale = mx_e4m3_encode(in_t(t, amax / 6.0f));
    float sd = in_t(t, mx_e4m3_value(*scale));
    for (int i = 0; i < gs; i++)
        codes[i] = (uint8_t)e2m1_code(DT_F32, in_t(t, w[i] / sd));
}

int64_t quant_mx_row(enum qmode m, enum dtype t, const float *w, size_t k, uint32_t *words, uint8_t *scales)
{
    int gs, bits;
    qmode_defaults(m, &gs, &bits);
    uint8_t codes[32];
    memset(words, 0, quant_row_words(k, bits) * 4);
    for (size_t g = 0; g * (size_t)gs < k; g++) {
        if (m == QM_NVFP4)
            nv_group(t, w + g * (size_t)gs, gs, codes, &scales[g]);
        else if (!mx_group(m, t, w + g * (size_t)gs, gs, codes, &scales[g]))
            return (int64_t)g;
        for (int i = 0; i < gs; i++) {
            size_t j = g * (size_t)gs + (size_t)i;
            words[j * (size_t)bits / 32] |= (uint32_t)codes[i] << (j * (size_t)bits % 32);
        }
    }
    return -1;
}

void dequant_mx_row(enum qmode m, const uint8_t *row_bytes, const uint8_t *scales, size_t k, float *out)
{
    int gs, bits;
    qmode_defaults(m, &gs, &bits);
    for (size_t i = 0; i < k; i++)
        out[i] = mx_code_value(m, quant_code_at(row_bytes, i, bits)) * mx_scale_value(m, scales[i / (size_t)gs]);
}
