/* simd.c - AVX2 and AVX-512 fused dequantize + dot products.
 *
 * For MLX affine weights each output is Σ_groups (scale·Σx·q + bias·Σx), the
 * form MLX's own kernels use; for bf16 weights Σ x·w. A weight row is decoded
 * once for up to TB tokens, but every token goes through exactly the same
 * operations in the same order as when it is alone, so a prompt gives
 * bitwise the same logits whether it is run at once, in chunks, or token by
 * token. Compiled with per-function target attributes and chosen at run
 * time, so the build needs no -march flag. Tested against kern_matmul_ref on
 * odd sizes (tests/test_kernels.c). */
#include <immintrin.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "kernels/kernels.h"

#define TB 4 /* tokens sharing one decode of a weight row */

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

/* Scales or biases of one row as float (n groups). */
static void row_params(const struct wmat *w, const uint8_t *p, int64_t n, float *out)
{
    dtype_to_f32(w->dtype, p, out, (size_t)n);
}

/* ---- AVX2 ---- */

__attribute__((target("avx2,fma"))) static inline float hsum256(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* xsum[t·ng + g] = Σ of token t's inputs over group g (8 lanes, then reduced). */
__attribute__((target("avx2,fma"))) static void xsums256(const float *x, int64_t n, int64_t cols, int64_t gs,
                                                         float *xsum)
{
    int64_t ng = cols / gs;
    for (int64_t t = 0; t < n; t++)
        for (int64_t g = 0; g < ng; g++) {
            __m256 ax = _mm256_setzero_ps();
            for (int64_t j = g * gs; j < (g + 1) * gs; j += 8)
                ax = _mm256_add_ps(ax, _mm256_loadu_ps(x + t * cols + j));
            xsum[t * ng + g] = hsum256(ax);
        }
}

/* 8 codes starting at element j of a packed row, as floats. */
__attribute__((target("avx2,fma"))) static inline __m256 codes8(const uint8_t *row, int64_t j, int bits)
{
    if (bits == 4) {
        uint32_t word;
        memcpy(&word, row + j / 2, 4);
        const __m256i shifts = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
        __m256i v = _mm256_srlv_epi32(_mm256_set1_epi32((int)word), shifts);
        return _mm256_cvtepi32_ps(_mm256_and_si256(v, _mm256_set1_epi32(15)));
    }
    __m128i b8 = _mm_loadl_epi64((const __m128i *)(const void *)(row + j));
    return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(b8));
}

__attribute__((target("avx2,fma"))) static void qdot_avx2(const struct wmat *w, const float *x, int64_t n, float *y,
                                                          int64_t row0, int64_t row1)
{
    int64_t ng = w->cols / w->gs, cols = w->cols;
    float *xsum = malloc((size_t)(n * ng + 2 * ng) * sizeof *xsum), *sc = xsum + n * ng, *bi = sc + ng;
    if (!xsum) {
        kern_matmul_ref(w, x, n, y, row0, row1);
        return;
    }
    xsums256(x, n, cols, w->gs, xsum);
    for (int64_t r = row0; r < row1; r++) {
        const uint8_t *codes = w->w + (size_t)r * w->row_stride;
        row_params(w, w->s + (size_t)r * w->srow_bytes, ng, sc);
        row_params(w, w->b + (size_t)r * w->srow_bytes, ng, bi);
        for (int64_t t0 = 0; t0 < n; t0 += TB) {
            int64_t tb = n - t0 < TB ? n - t0 : TB;
            float acc[TB] = {0};
            for (int64_t g = 0; g < ng; g++) {
                __m256 aq[TB];
                for (int64_t u = 0; u < tb; u++)
                    aq[u] = _mm256_setzero_ps();
                for (int64_t j = g * w->gs; j < (g + 1) * w->gs; j += 8) {
                    __m256 q = codes8(codes, j, w->bits);
                    for (int64_t u = 0; u < tb; u++)
                        aq[u] = _mm256_fmadd_ps(_mm256_loadu_ps(x + (t0 + u) * cols + j), q, aq[u]);
                }
                for (int64_t u = 0; u < tb; u++)
                    acc[u] += sc[g] * hsum256(aq[u]) + bi[g] * xsum[(t0 + u) * ng + g];
            }
            for (int64_t u = 0; u < tb; u++)
                y[(t0 + u) * w->rows + r] = acc[u];
        }
    }
    free(xsum);
}

void kern_matvec_q4_avx2(const struct wmat *w, const float *x, int64_t n, float *y, int64_t row0, int64_t row1)
{
    qdot_avx2(w, x, n, y, row0, row1);
}

void kern_matvec_q8_avx2(const struct wmat *w, const float *x, int64_t n, float *y, int64_t row0, int64_t row1)
{
    qdot_avx2(w, x, n, y, row0, row1);
}

__attribute__((target("avx2,fma"))) void kern_matvec_bf16_avx2(const struct wmat *w, const float *x, int64_t n,
                                                               float *y, int64_t row0, int64_t row1)
{
    int64_t c8 = w->cols & ~(int64_t)7, cols = w->cols;
    for (int64_t r = row0; r < row1; r++) {
        const uint8_t *row = w->w + (size_t)r * w->row_stride;
        for (int64_t t0 = 0; t0 < n; t0 += TB) {
            int64_t tb = n - t0 < TB ? n - t0 : TB;
            __m256 acc[TB];
            for (int64_t u = 0; u < tb; u++)
                acc[u] = _mm256_setzero_ps();
            for (int64_t j = 0; j < c8; j += 8) {
                __m128i h = _mm_loadu_si128((const __m128i *)(const void *)(row + 2 * j));
                __m256 wv = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
                for (int64_t u = 0; u < tb; u++)
                    acc[u] = _mm256_fmadd_ps(_mm256_loadu_ps(x + (t0 + u) * cols + j), wv, acc[u]);
            }
            for (int64_t u = 0; u < tb; u++) {
                float s = hsum256(acc[u]);
                for (int64_t j = c8; j < cols; j++)
                    s += x[(t0 + u) * cols + j] * bf16_to_f32((uint16_t)(row[2 * j] | row[2 * j + 1] << 8));
                y[(t0 + u) * w->rows + r] = s;
            }
        }
    }
}

/* ---- AVX-512 ---- */

#define AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma")))

AVX512 static void xsums512(const float *x, int64_t n, int64_t cols, int64_t gs, float *xsum)
{
    int64_t ng = cols / gs;
    for (int64_t t = 0; t < n; t++)
        for (int64_t g = 0; g < ng; g++) {
            __m512 ax = _mm512_setzero_ps();
            for (int64_t j = g * gs; j < (g + 1) * gs; j += 16)
                ax = _mm512_add_ps(ax, _mm512_loadu_ps(x + t * cols + j));
            xsum[t * ng + g] = _mm512_reduce_add_ps(ax);
        }
}

AVX512 static inline __m512 codes16(const uint8_t *row, int64_t j, int bits)
{
    if (bits == 4) {
        uint64_t pair;
        memcpy(&pair, row + j / 2, 8);
        const __m512i shifts = _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 0, 4, 8, 12, 16, 20, 24, 28);
        __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi32((int)(uint32_t)pair)),
                                       _mm256_set1_epi32((int)(uint32_t)(pair >> 32)), 1);
        return _mm512_cvtepi32_ps(_mm512_and_si512(_mm512_srlv_epi32(v, shifts), _mm512_set1_epi32(15)));
    }
    __m128i b16 = _mm_loadu_si128((const __m128i *)(const void *)(row + j));
    return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(b16));
}

AVX512 static void qdot_avx512(const struct wmat *w, const float *x, int64_t n, float *y, int64_t row0, int64_t row1)
{
    int64_t ng = w->cols / w->gs, cols = w->cols;
    float *xsum = malloc((size_t)(n * ng + 2 * ng) * sizeof *xsum), *sc = xsum + n * ng, *bi = sc + ng;
    if (!xsum) {
        kern_matmul_ref(w, x, n, y, row0, row1);
        return;
    }
    xsums512(x, n, cols, w->gs, xsum);
    for (int64_t r = row0; r < row1; r++) {
        const uint8_t *codes = w->w + (size_t)r * w->row_stride;
        row_params(w, w->s + (size_t)r * w->srow_bytes, ng, sc);
        row_params(w, w->b + (size_t)r * w->srow_bytes, ng, bi);
        for (int64_t t0 = 0; t0 < n; t0 += TB) {
            int64_t tb = n - t0 < TB ? n - t0 : TB;
            float acc[TB] = {0};
            for (int64_t g = 0; g < ng; g++) {
                __m512 aq[TB];
                for (int64_t u = 0; u < tb; u++)
                    aq[u] = _mm512_setzero_ps();
                for (int64_t j = g * w->gs; j < (g + 1) * w->gs; j += 16) {
                    __m512 q = codes16(codes, j, w->bits);
                    for (int64_t u = 0; u < tb; u++)
                        aq[u] = _mm512_fmadd_ps(_mm512_loadu_ps(x + (t0 + u) * cols + j), q, aq[u]);
                }
                for (int64_t u = 0; u < tb; u++)
                    acc[u] += sc[g] * _mm512_reduce_add_ps(aq[u]) + bi[g] * xsum[(t0 + u) * ng + g];
            }
            for (int64_t u = 0; u < tb; u++)
                y[(t0 + u) * w->rows + r] = acc[u];
        }
    }
    free(xsum);
}

void kern_matvec_q4_avx512(const struct wmat *w, const float *x, int64_t n, float *y, int64_t row0, int64_t row1)
{
    qdot_avx512(w, x, n, y, row0, row1);
}

void kern_matvec_q8_avx512(const struct wmat *w, const float *x, int64_t n, float *y, int64_t row0, int64_t row1)
{
    qdot_avx512(w, x, n, y, row0, row1);
}

AVX512 void kern_matvec_bf16_avx512(const struct wmat *w, const float *x, int64_t n, float *y, int64_t row0,
                                    int64_t row1)
{
    int64_t c16 = w->cols & ~(int64_t)15, cols = w->cols;
    for (int64_t r = row0; r < row1; r++) {
        const uint8_t *row = w->w + (size_t)r * w->row_stride;
        for (int64_t t0 = 0; t0 < n; t0 += TB) {
            int64_t tb = n - t0 < TB ? n - t0 : TB;
            __m512 acc[TB];
            for (int64_t u = 0; u < tb; u++)
                acc[u] = _mm512_setzero_ps();
            for (int64_t j = 0; j < c16; j += 16) {
                __m256i h = _mm256_loadu_si256((const __m256i *)(const void *)(row + 2 * j));
                __m512 wv = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
                for (int64_t u = 0; u < tb; u++)
                    acc[u] = _mm512_fmadd_ps(_mm512_loadu_ps(x + (t0 + u) * cols + j), wv, acc[u]);
            }
            for (int64_t u = 0; u < tb; u++) {
                float s = _mm512_reduce_add_ps(acc[u]);
                for (int64_t j = c16; j < cols; j++)
                    s += x[(t0 + u) * cols + j] * bf16_to_f32((uint16_t)(row[2 * j] | row[2 * j + 1] << 8));
                y[(t0 + u) * w->rows + r] = s;
            }
        }
    }
}
