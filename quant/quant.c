/* quant.c - MLX affine quantization: modes, the CPU quantizer, packing and
 * dequantization (INPUTS.md §2.1-2.4). All arithmetic is float32. */
#include "quant/quant.h"

#include "core/cpu.h"

#include <math.h>
#include <string.h>

/* ---- packing: element i occupies bits [i*b, i*b+b) of an LSB-first stream */

/* ORs `code` into the stream; the target words must be zeroed beforehand. */
static void put_code(uint32_t *words, size_t i, int bits, uint32_t code)
{
    size_t p = i * (size_t)bits;
    unsigned sh = (unsigned)(p % 32);
    uint64_t v = (uint64_t)code << sh;
    words[p / 32] |= (uint32_t)v;
    if (sh + (unsigned)bits > 32) /* straddles into the next word */
        words[p / 32 + 1] |= (uint32_t)(v >> 32);
}

void quant_pack_codes(const uint8_t *codes, size_t n, int bits, uint32_t *words)
{
    memset(words, 0, quant_row_words(n, bits) * sizeof *words);
    size_t i = 0;
    if (32 % bits == 0) { /* 2, 4, 8 bits: whole words hold whole codes */
        size_t per = 32 / (size_t)bits;
        for (; i + per <= n; i += per) {
            uint32_t v = 0;
            for (size_t k = 0; k < per; k++)
                v |= (uint32_t)codes[i + k] << (k * (size_t)bits);
            words[i / per] = v;
        }
    }
    for (; i < n; i++)
        put_code(words, i, bits, codes[i]);
}

uint32_t quant_code_at(const uint8_t *row_bytes, size_t i, int bits)
{
    size_t p = i * (size_t)bits;
    const uint8_t *b = row_bytes + p / 8;
    unsigned sh = (unsigned)(p % 8);
    uint32_t v = b[0];
    if (sh + (unsigned)bits > 8) /* bits <= 8, so at most two bytes */
        v |= (uint32_t)b[1] << 8;
    return (v >> sh) & ((1u << bits) - 1u);
}

/* ---- quantization (mlx/backend/cpu/quantized.cpp `quantize`) */

void quant_params_from_range(float wmin, float wmax, int bits, float *scale, float *bias)
{
    const float n_bins = (float)((1 << bits) - 1);
    bool mask = fabsf(wmin) > fabsf(wmax);
    float s = (wmax - wmin) / n_bins;
    s = s < 1e-7f ? 1e-7f : s;
    s = mask ? s : -s;
    float edge = mask ? wmin : wmax;
    float q0 = rintf(edge / s);
    float b = 0.0f;
    if (q0 != 0.0f) {
        s = edge / q0;
        b = edge;
    }
    *scale = s;
    *bias = b;
}

/* Scale and bias of one group, before rounding to the storage dtype. */
static void group_params(const float *w, int gs, int bits, float *scale, float *bias)
{
    float wmin = INFINITY, wmax = -INFINITY;
    for (int j = 0; j < gs; j++) {
        wmax = wmax < w[j] ? w[j] : wmax; /* std::max / std::min semantics */
        wmin = w[j] < wmin ? w[j] : wmin;
    }
    quant_params_from_range(wmin, wmax, bits, scale, bias);
}

static uint32_t code_of(float w, float scale, float bias, int bits)
{
    const float n_bins = (float)((1 << bits) - 1);
    float q = rintf((w - bias) / scale);
    if (!(q >= 0.0f)) /* also maps NaN to 0 */
        q = 0.0f;
    if (q > n_bins)
        q = n_bins;
    return (uint32_t)q;
}

void quant_affine_group(const float *w, int gs, int bits, uint8_t *codes, float *scale, float *bias)
{
    float s, b; /* locals: the codes stores cannot alias them */
    group_params(w, gs, bits, &s, &b);
    for (int j = 0; j < gs; j++)
        codes[j] = (uint8_t)code_of(w[j], s, b, bits);
    *scale = s;
    *bias = b;
}

static size_t float_size(enum dtype t) { return t == DT_F32 ? 4 : 2; }

void quant_affine_row(const float *w, size_t k, int gs, int bits, enum dtype sdt,
                      uint32_t *words, void *scales, void *biases)
{
    size_t ssz = float_size(sdt), ng = k / (size_t)gs, gwords = (size_t)gs * (size_t)bits / 32;
    uint8_t codes[QUANT_MAX_GROUP];
    for (size_t g = 0; g < ng; g++) {
        const float *wg = w + g * (size_t)gs;
        float scale, bias;
        quant_affine_group(wg, gs, bits, codes, &scale, &bias);
        quant_pack_codes(codes, (size_t)gs, bits, words + g * gwords); /* gs * bits is a multiple of 32 */
        dtype_from_f32(sdt, &scale, (uint8_t *)scales + g * ssz, 1);
        dtype_from_f32(sdt, &bias, (uint8_t *)biases + g * ssz, 1);
    }
}

void dequant_affine_row(const uint8_t *row_bytes, const void *scales, const void *biases,
                        enum dtype sdt, size_t k, int gs, int bits, float *out)
{
    size_t ssz = float_size(sdt), ng = k / (size_t)gs;
    for (size_t g = 0; g < ng; g++) {
        float scale = 0.0f, bias = 0.0f;
        dtype_to_f32(sdt, (const uint8_t *)scales + g * ssz, &scale, 1);
        dtype_to_f32(sdt, (const uint8_t *)biases + g * ssz, &bias, 1);
        for (int j = 0; j < gs; j++) {
            size_t i = g * (size_t)gs + (size_t)j;
            out[i] = scale * (float)quant_code_at(row_bytes, i, bits) + bias;
        }
    }
}

/* ---- the fast twins ---- */

void quant_row(const float *w, size_t k, int gs, int bits, enum dtype sdt, uint32_t *words, void *scales,
               void *biases)
{
#if GP_X86
    if (cpu_has(CPU_AVX512)) {
        quant_affine_row_avx512(w, k, gs, bits, sdt, words, scales, biases);
        return;
    }
#endif
    quant_affine_row(w, k, gs, bits, sdt, words, scales, biases);
}

void quant_dequant_row(const uint8_t *row_bytes, const void *scales, const void *biases, enum dtype sdt, size_t k,
                       int gs, int bits, float *out)
{
#if GP_X86
    if (cpu_has(CPU_AVX512)) {
        quant_dequant_row_avx512(row_bytes, scales, biases, sdt, (int64_t)k, gs, bits, out);
        return;
    }
    if (cpu_has(CPU_AVX2)) {
        quant_dequant_row_avx2(row_bytes, scales, biases, sdt, (int64_t)k, gs, bits, out);
        return;
    }
#endif
    dequant_affine_row(row_bytes, scales, biases, sdt, k, gs, bits, out);
}

void quant_to_f32(enum dtype t, const uint8_t *src, float *dst, size_t n)
{
#if GP_X86
    if (cpu_has(CPU_AVX512)) {
        quant_to_f32_avx512(t, src, dst, (int64_t)n);
        return;
    }
    if (cpu_has(CPU_AVX2)) {
        quant_to_f32_avx2(t, src, dst, (int64_t)n);
        return;
    }
#endif
    dtype_to_f32(t, src, dst, n);
}
