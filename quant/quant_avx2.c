/* quant_avx2.c - AVX2 twins of quant.c's dequantization and float widening,
 * bit-identical (tests/test_quant.c). Compiled with per-function target
 * attributes, chosen at run time. */
#include <immintrin.h>
#include <string.h>

#include "core/dtype.h"
#include "quant/quant.h"

#define AVX2 __attribute__((target("avx2,fma,f16c")))
#define INLINE static inline __attribute__((always_inline))

/* n F32/F16/BF16 values as float32, 8 at a time, the rest through
 * dtype_to_f32 (as are other dtypes). */
AVX2 void quant_to_f32_avx2(enum dtype t, const uint8_t *src, float *dst, int64_t n)
{
    int64_t i = 0;
    if (t == DT_BF16 || t == DT_F16 || t == DT_F32)
        for (; i + 8 <= n; i += 8) {
            __m256 v;
            if (t == DT_F32)
                v = _mm256_loadu_ps((const float *)(const void *)(src + 4 * i));
            else if (t == DT_F16)
                v = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(src + 2 * i)));
            else
                v = _mm256_castsi256_ps(_mm256_slli_epi32(
                    _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(const void *)(src + 2 * i))), 16));
            _mm256_storeu_ps(dst + i, v);
        }
    dtype_to_f32(t, src + (size_t)i * dtype_table[t].bits / 8, dst + i, (size_t)(n - i));
}

/* dequant_affine_row for one width, 8 values a step: the step's `bits` bytes
 * (8·bits bits) in both 64-bit halves of each 128-bit half, lane l takes bytes o and o + 1 of its
 * bit offset l·bits = 8·o + r (a byte shuffle), shifted by r and masked;
 * then converted, and scale·q + bias with a separate multiply and add, as the
 * scalar definition rounds. */
AVX2 INLINE void dequant_bits256(const uint8_t *row, const uint8_t *scales, const uint8_t *biases, enum dtype sdt,
                                 int64_t k, int gs, const int bits, float *out)
{
    const size_t ssz = dtype_table[sdt].bits / 8;
    int8_t idx[32];
    int32_t sh[8];
    for (int l = 0; l < 8; l++) { /* dword l: bytes o, o + 1 of its half's copy (o + 1 <= 8), then zeros */
        idx[4 * l] = (int8_t)(l * bits / 8);
        idx[4 * l + 1] = (int8_t)(l * bits / 8 + 1);
        idx[4 * l + 2] = idx[4 * l + 3] = -128;
        sh[l] = l * bits % 8;
    }
    const __m256i bidx = _mm256_loadu_si256((const __m256i *)(const void *)idx);
    const __m256i shift = _mm256_loadu_si256((const __m256i *)(const void *)sh);
    const __m256i mask = _mm256_set1_epi32((int)((1u << bits) - 1));
    for (int64_t g = 0; g < k / gs; g++) {
        float sc, bi;
        dtype_to_f32(sdt, scales + (size_t)g * ssz, &sc, 1);
        dtype_to_f32(sdt, biases + (size_t)g * ssz, &bi, 1);
        const __m256 sv = _mm256_set1_ps(sc), bv = _mm256_set1_ps(bi);
        for (int64_t i = g * gs; i < (g + 1) * gs; i += 8) {
            uint64_t b = 0; /* 8 bytes but at the row's end (a copy of `bits` through the stack stalls the load) */
            memcpy(&b, row + i * bits / 8, i * bits / 8 + 8 <= k * bits / 8 ? 8 : (size_t)bits);
            const __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi64x((long long)b), bidx);
            const __m256i q = _mm256_and_si256(_mm256_srlv_epi32(v, shift), mask);
            _mm256_storeu_ps(out + i, _mm256_add_ps(_mm256_mul_ps(sv, _mm256_cvtepi32_ps(q)), bv));
        }
    }
}

/* k is a multiple of gs (>= 32); a width MLX does not have, the definition. */
AVX2 void quant_dequant_row_avx2(const uint8_t *row, const void *scales, const void *biases, enum dtype sdt, int64_t k,
                                 int gs, int bits, float *out)
{
    switch (bits) {
    case 2: dequant_bits256(row, scales, biases, sdt, k, gs, 2, out); break;
    case 3: dequant_bits256(row, scales, biases, sdt, k, gs, 3, out); break;
    case 4: dequant_bits256(row, scales, biases, sdt, k, gs, 4, out); break;
    case 5: dequant_bits256(row, scales, biases, sdt, k, gs, 5, out); break;
    case 6: dequant_bits256(row, scales, biases, sdt, k, gs, 6, out); break;
    case 8: dequant_bits256(row, scales, biases, sdt, k, gs, 8, out); break;
    default: dequant_affine_row(row, scales, biases, sdt, (size_t)k, gs, bits, out); break;
    }
}
