/* quant_avx512.c - AVX-512 twins of quant.c's definitions: the quantizer,
 * dequantization and float widening, bit-identical (tests/test_quant.c).
 * Compiled with per-function target attributes, chosen at run time. */
#include <immintrin.h>
#include <math.h>

#include "core/dtype.h"
#include "quant/quant.h"

#define AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma")))

/* n F32/F16/BF16 values as float32, 16 at a time (the last 16 through a
 * masked load); other dtypes through dtype_to_f32. */
AVX512 void quant_to_f32_avx512(enum dtype t, const uint8_t *src, float *dst, int64_t n)
{
    if (t != DT_BF16 && t != DT_F16 && t != DT_F32) {
        dtype_to_f32(t, src, dst, (size_t)n);
        return;
    }
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 v;
        if (t == DT_F32)
            v = _mm512_loadu_ps(src + 4 * i);
        else if (t == DT_F16)
            v = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(src + 2 * i)));
        else
            v = _mm512_castsi512_ps(_mm512_slli_epi32(
                _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(const void *)(src + 2 * i))), 16));
        _mm512_storeu_ps(dst + i, v);
    }
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        __m512 v;
        if (t == DT_F32)
            v = _mm512_maskz_loadu_ps(m, src + 4 * i);
        else if (t == DT_F16)
            v = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, src + 2 * i));
        else
            v = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, src + 2 * i)), 16));
        _mm512_mask_storeu_ps(dst + i, m, v);
    }
}

/* dequant_affine_row, 16 values a step. 2-, 4- and 8-bit codes (a word holds
 * whole codes): the step's words are spread to the lanes (lane l takes word
 * l / per_word), shifted by (l % per_word)·bits and masked. 3-, 5- and 6-bit
 * codes cross bytes: the step's 2·bits bytes are loaded once into every
 * 128-bit lane, lane l takes bytes o and o + 1 of bit offset l·bits = 8·o + r
 * (a byte shuffle), shifted by r and masked. Then converted, and scale·q +
 * bias with a separate multiply and add, exactly as the scalar definition
 * rounds. k is a multiple of gs (>= 32). */
AVX512 void quant_dequant_row_avx512(const uint8_t *row, const void *scales, const void *biases, enum dtype sdt,
                                     int64_t k, int gs, int bits, float *out)
{
    const bool whole = 32 % bits == 0;
    const int per_word = 32 / bits;
    const size_t ssz = dtype_table[sdt].bits / 8;
    int32_t wi[16], sh[16];
    for (int l = 0; l < 16; l++) {
        const int o = l * bits / 8; /* bytes o, o + 1 (< 2·bits <= 12) into the low half of dword l */
        wi[l] = whole ? l / per_word : (int32_t)(0x80800000u | (uint32_t)(o + 1) << 8 | (uint32_t)o);
        sh[l] = whole ? (l % per_word) * bits : l * bits % 8;
    }
    const __m512i widx = _mm512_loadu_si512(wi), shift = _mm512_loadu_si512(sh);
    const __m512i mask = _mm512_set1_epi32((int)((1u << bits) - 1));
    const __mmask16 wmask = (__mmask16)((1u << (16 / per_word)) - 1); /* the words of 16 codes */
    const __mmask16 bmask = (__mmask16)((1u << (2 * bits)) - 1);       /* the bytes of 16 codes */
    for (int64_t g = 0; g < k / gs; g++) {
        float sc, bi;
        dtype_to_f32(sdt, (const uint8_t *)scales + (size_t)g * ssz, &sc, 1);
        dtype_to_f32(sdt, (const uint8_t *)biases + (size_t)g * ssz, &bi, 1);
        const __m512 sv = _mm512_set1_ps(sc), bv = _mm512_set1_ps(bi);
        for (int64_t i = g * gs; i < (g + 1) * gs; i += 16) {
            __m512i v = whole ? _mm512_permutexvar_epi32(widx, _mm512_maskz_loadu_epi32(wmask, row + i * bits / 8))
                              : _mm512_shuffle_epi8(_mm512_broadcast_i32x4(_mm_maskz_loadu_epi8(bmask, row + i * bits / 8)),
                                                    widx);
            __m512i q = _mm512_and_si512(_mm512_srlv_epi32(v, shift), mask);
            _mm512_storeu_ps(out + i, _mm512_add_ps(_mm512_mul_ps(sv, _mm512_cvtepi32_ps(q)), bv));
        }
    }
}

/* quant_affine_row with the per-weight work 16 lanes at a time: the group's
 * minimum and maximum with the same comparisons as the scalar loop, then
 * (w − bias) / scale, round to nearest even, clamp (NaN to 0) — the same
 * IEEE operations in the same order, so codes, scales and biases are
 * bit-identical to the scalar quantizer (tests/test_kernels.c). */
AVX512 void quant_affine_row_avx512(const float *w, size_t k, int gs, int bits, enum dtype sdt, uint32_t *words,
                             void *scales, void *biases)
{
    const size_t ssz = dtype_table[sdt].bits / 8, ng = k / (size_t)gs, gwords = (size_t)gs * (size_t)bits / 32;
    const __m512 n_bins = _mm512_set1_ps((float)((1 << bits) - 1));
    uint8_t codes[QUANT_MAX_GROUP];
    for (size_t g = 0; g < ng; g++) {
        const float *wg = w + g * (size_t)gs;
        __m512 mx = _mm512_set1_ps(-INFINITY), mn = _mm512_set1_ps(INFINITY);
        for (int j = 0; j < gs; j += 16) {
            __m512 x = _mm512_loadu_ps(wg + j);
            mx = _mm512_max_ps(x, mx); /* x > mx ? x : mx: a NaN x is skipped, as in the scalar loop */
            mn = _mm512_min_ps(x, mn);
        }
        float scale, bias;
        quant_params_from_range(_mm512_reduce_min_ps(mn), _mm512_reduce_max_ps(mx), bits, &scale, &bias);
        const __m512 s = _mm512_set1_ps(scale), b = _mm512_set1_ps(bias);
        uint8_t *out = (uint8_t *)(words + g * gwords);
        for (int j = 0; j < gs; j += 16) {
            __m512 q = _mm512_div_ps(_mm512_sub_ps(_mm512_loadu_ps(wg + j), b), s);
            q = _mm512_roundscale_ps(q, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
            q = _mm512_min_ps(_mm512_max_ps(q, _mm512_setzero_ps()), n_bins); /* max(NaN, 0) is 0 */
            __m128i c = _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(q)); /* 16 codes, one per byte */
            if (bits == 8) {
                _mm_storeu_si128((__m128i *)(void *)(out + j), c);
            } else if (bits == 4) { /* byte i = c[2i] | c[2i+1] << 4: the LSB-first stream */
                c = _mm_packus_epi16(_mm_maddubs_epi16(c, _mm_set1_epi16(16 << 8 | 1)), _mm_setzero_si128());
                _mm_storel_epi64((__m128i *)(void *)(out + j / 2), c);
            } else if (bits == 2) { /* pairs into nibbles, then nibble pairs into bytes */
                c = _mm_packus_epi16(_mm_maddubs_epi16(c, _mm_set1_epi16(4 << 8 | 1)), _mm_setzero_si128());
                c = _mm_packus_epi16(_mm_maddubs_epi16(c, _mm_set1_epi16(16 << 8 | 1)), _mm_setzero_si128());
                _mm_storeu_si32(out + j / 4, c);
            } else {
                _mm_storeu_si128((__m128i *)(void *)(codes + j), c);
            }
        }
        if (bits != 8 && bits != 4 && bits != 2)
            quant_pack_codes(codes, (size_t)gs, bits, words + g * gwords);
        dtype_from_f32(sdt, &scale, (uint8_t *)scales + g * ssz, 1);
        dtype_from_f32(sdt, &bias, (uint8_t *)biases + g * ssz, 1);
    }
}
