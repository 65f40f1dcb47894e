/* simd.c - AVX2 and AVX-512 fused dequantize + dot products.
 *
 * Each output is Σ_groups (scale·Σ x·q + bias·Σ x) for MLX affine weights
 * (the form MLX's own kernels use), or Σ x·w for bf16, accumulated per row in
 * a fixed order. Compiled with per-function target attributes and chosen at
 * run time, so the build needs no -march flag. Tested against
 * kern_matmul_ref on odd sizes (tests/test_kernels.c). */
#include <immintrin.h>
#include <string.h>

#include "core/dtype.h"
#include "kernels/kernels.h"

bool kern_cpu_has_avx2(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

bool kern_cpu_has_avx512(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && kern_cpu_has_avx2();
}

static inline float scale_at(const struct wmat *w, const uint8_t *p, int64_t g)
{
    float f;
    dtype_to_f32(w->dtype, p + (size_t)g * (dtype_table[w->dtype].bits / 8), &f, 1);
    return f;
}

/* ---- AVX2 ---- */

__attribute__((target("avx2,fma"))) static inline float hsum256(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* 8 consecutive 4-bit codes of one little-endian word, as floats. */
__attribute__((target("avx2,fma"))) static inline __m256 q4x8(uint32_t word)
{
    const __m256i shifts = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
    __m256i v = _mm256_srlv_epi32(_mm256_set1_epi32((int)word), shifts);
    return _mm256_cvtepi32_ps(_mm256_and_si256(v, _mm256_set1_epi32(15)));
}

__attribute__((target("avx2,fma"))) void kern_matvec_q4_avx2(const struct wmat *w, const float *x, int64_t n, float *y,
                                                             int64_t row0, int64_t row1)
{
    int64_t ng = w->cols / w->gs;
    for (int64_t t = 0; t < n; t++) {
        const float *xt = x + t * w->cols;
        for (int64_t r = row0; r < row1; r++) {
            const uint8_t *codes = w->w + (size_t)r * w->row_stride;
            const uint8_t *sr = w->s + (size_t)r * w->srow_bytes, *br = w->b + (size_t)r * w->srow_bytes;
            float acc = 0.0f;
            for (int64_t g = 0; g < ng; g++) {
                __m256 aq = _mm256_setzero_ps(), ax = _mm256_setzero_ps();
                for (int64_t j = g * w->gs; j < (g + 1) * w->gs; j += 8) {
                    uint32_t word;
                    memcpy(&word, codes + j / 2, 4);
                    __m256 xv = _mm256_loadu_ps(xt + j);
                    aq = _mm256_fmadd_ps(xv, q4x8(word), aq);
                    ax = _mm256_add_ps(ax, xv);
                }
                acc += scale_at(w, sr, g) * hsum256(aq) + scale_at(w, br, g) * hsum256(ax);
            }
            y[t * w->rows + r] = acc;
        }
    }
}

__attribute__((target("avx2,fma"))) void kern_matvec_q8_avx2(const struct wmat *w, const float *x, int64_t n, float *y,
                                                             int64_t row0, int64_t row1)
{
    int64_t ng = w->cols / w->gs;
    for (int64_t t = 0; t < n; t++) {
        const float *xt = x + t * w->cols;
        for (int64_t r = row0; r < row1; r++) {
            const uint8_t *codes = w->w + (size_t)r * w->row_stride;
            const uint8_t *sr = w->s + (size_t)r * w->srow_bytes, *br = w->b + (size_t)r * w->srow_bytes;
            float acc = 0.0f;
            for (int64_t g = 0; g < ng; g++) {
                __m256 aq = _mm256_setzero_ps(), ax = _mm256_setzero_ps();
                for (int64_t j = g * w->gs; j < (g + 1) * w->gs; j += 8) {
                    __m128i b8 = _mm_loadl_epi64((const __m128i *)(const void *)(codes + j));
                    __m256 q = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(b8));
                    __m256 xv = _mm256_loadu_ps(xt + j);
                    aq = _mm256_fmadd_ps(xv, q, aq);
                    ax = _mm256_add_ps(ax, xv);
                }
                acc += scale_at(w, sr, g) * hsum256(aq) + scale_at(w, br, g) * hsum256(ax);
            }
            y[t * w->rows + r] = acc;
        }
    }
}

__attribute__((target("avx2,fma"))) void kern_matvec_bf16_avx2(const struct wmat *w, const float *x, int64_t n,
                                                               float *y, int64_t row0, int64_t row1)
{
    int64_t c8 = w->cols & ~(int64_t)7;
    for (int64_t t = 0; t < n; t++) {
        const float *xt = x + t * w->cols;
        for (int64_t r = row0; r < row1; r++) {
            const uint8_t *row = w->w + (size_t)r * w->row_stride;
            __m256 acc = _mm256_setzero_ps();
            for (int64_t j = 0; j < c8; j += 8) {
                __m128i h = _mm_loadu_si128((const __m128i *)(const void *)(row + 2 * j));
                __m256 wv = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
                acc = _mm256_fmadd_ps(_mm256_loadu_ps(xt + j), wv, acc);
            }
            float s = hsum256(acc);
            for (int64_t j = c8; j < w->cols; j++)
                s += xt[j] * bf16_to_f32((uint16_t)(row[2 * j] | row[2 * j + 1] << 8));
            y[t * w->rows + r] = s;
        }
    }
}

/* ---- AVX-512 ---- */

__attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma"))) static inline __m512 q4x16(uint64_t pair)
{
    const __m512i shifts = _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 0, 4, 8, 12, 16, 20, 24, 28);
    __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi32((int)(uint32_t)pair)),
                                   _mm256_set1_epi32((int)(uint32_t)(pair >> 32)), 1);
    v = _mm512_srlv_epi32(v, shifts);
    return _mm512_cvtepi32_ps(_mm512_and_si512(v, _mm512_set1_epi32(15)));
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma"))) void
kern_matvec_q4_avx512(const struct wmat *w, const float *x, int64_t n, float *y, int64_t row0, int64_t row1)
{
    int64_t ng = w->cols / w->gs;
    for (int64_t t = 0; t < n; t++) {
        const float *xt = x + t * w->cols;
        for (int64_t r = row0; r < row1; r++) {
            const uint8_t *codes = w->w + (size_t)r * w->row_stride;
            const uint8_t *sr = w->s + (size_t)r * w->srow_bytes, *br = w->b + (size_t)r * w->srow_bytes;
            float acc = 0.0f;
            for (int64_t g = 0; g < ng; g++) {
                __m512 aq = _mm512_setzero_ps(), ax = _mm512_setzero_ps();
                for (int64_t j = g * w->gs; j < (g + 1) * w->gs; j += 16) {
                    uint64_t pair;
                    memcpy(&pair, codes + j / 2, 8);
                    __m512 xv = _mm512_loadu_ps(xt + j);
                    aq = _mm512_fmadd_ps(xv, q4x16(pair), aq);
                    ax = _mm512_add_ps(ax, xv);
                }
                acc += scale_at(w, sr, g) * _mm512_reduce_add_ps(aq) + scale_at(w, br, g) * _mm512_reduce_add_ps(ax);
            }
            y[t * w->rows + r] = acc;
        }
    }
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma"))) void
kern_matvec_q8_avx512(const struct wmat *w, const float *x, int64_t n, float *y, int64_t row0, int64_t row1)
{
    int64_t ng = w->cols / w->gs;
    for (int64_t t = 0; t < n; t++) {
        const float *xt = x + t * w->cols;
        for (int64_t r = row0; r < row1; r++) {
            const uint8_t *codes = w->w + (size_t)r * w->row_stride;
            const uint8_t *sr = w->s + (size_t)r * w->srow_bytes, *br = w->b + (size_t)r * w->srow_bytes;
            float acc = 0.0f;
            for (int64_t g = 0; g < ng; g++) {
                __m512 aq = _mm512_setzero_ps(), ax = _mm512_setzero_ps();
                for (int64_t j = g * w->gs; j < (g + 1) * w->gs; j += 16) {
                    __m128i b16 = _mm_loadu_si128((const __m128i *)(const void *)(codes + j));
                    __m512 q = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(b16));
                    __m512 xv = _mm512_loadu_ps(xt + j);
                    aq = _mm512_fmadd_ps(xv, q, aq);
                    ax = _mm512_add_ps(ax, xv);
                }
                acc += scale_at(w, sr, g) * _mm512_reduce_add_ps(aq) + scale_at(w, br, g) * _mm512_reduce_add_ps(ax);
            }
            y[t * w->rows + r] = acc;
        }
    }
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma"))) void
kern_matvec_bf16_avx512(const struct wmat *w, const float *x, int64_t n, float *y, int64_t row0, int64_t row1)
{
    int64_t c16 = w->cols & ~(int64_t)15;
    for (int64_t t = 0; t < n; t++) {
        const float *xt = x + t * w->cols;
        for (int64_t r = row0; r < row1; r++) {
            const uint8_t *row = w->w + (size_t)r * w->row_stride;
            __m512 acc = _mm512_setzero_ps();
            for (int64_t j = 0; j < c16; j += 16) {
                __m256i h = _mm256_loadu_si256((const __m256i *)(const void *)(row + 2 * j));
                __m512 wv = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
                acc = _mm512_fmadd_ps(_mm512_loadu_ps(xt + j), wv, acc);
            }
            float s = _mm512_reduce_add_ps(acc);
            for (int64_t j = c16; j < w->cols; j++)
                s += xt[j] * bf16_to_f32((uint16_t)(row[2 * j] | row[2 * j + 1] << 8));
            y[t * w->rows + r] = s;
        }
    }
}
