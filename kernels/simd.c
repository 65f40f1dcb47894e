/* simd.c - AVX2 and AVX-512 fused dequantize + dot products.
 *
 * MLX affine weights: each output is Σ_g scale_g·(Σ x·q)_g + Σ_g bias_g·(Σx)_g,
 * the form MLX's own kernels use. The q·x products of a group accumulate in a
 * vector, the scaled group results accumulate in a second vector across the
 * row, and one reduction ends the row; the bias terms use per-group input
 * sums computed once per call. 4-bit rows are read 16 bytes (32 codes) at a
 * time: low nibbles are the even elements, high nibbles the odd ones, so the
 * input is de-interleaved once per call to match.
 *
 * bf16 weights: Σ x·w with the same vector accumulation.
 *
 * A weight row is decoded once for up to TB tokens, and every token goes
 * through exactly the same operations as when it is alone, so prefill,
 * chunked and decode runs give bitwise-identical logits. Compiled with
 * per-function target attributes and chosen at run time (no -march flag).
 * Tested against kern_matmul_ref on odd sizes (tests/test_kernels.c). */
#include <immintrin.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "core/err.h"
#include "kernels/kernels.h"

#define TB 4 /* tokens sharing one decode of a weight row */
#define INLINE static inline __attribute__((always_inline))

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

int kern_qinput_prepare(const struct wmat *w, const float *x, int64_t n, int blk, struct kern_qinput *in)
{
    int64_t ng = w->cols / w->gs, cols = w->cols;
    float *buf = malloc((size_t)(n * ng + (w->bits == 4 ? n * cols : 0)) * sizeof *buf);
    in->buf = buf;
    if (!buf)
        return ERR_NOMEM;
    for (int64_t t = 0; t < n; t++)
        for (int64_t g = 0; g < ng; g++) {
            float s = 0.0f;
            for (int64_t j = g * w->gs; j < (g + 1) * w->gs; j++)
                s += x[t * cols + j];
            buf[t * ng + g] = s;
        }
    in->xsum = buf;
    in->xd = x;
    if (w->bits == 4) {
        float *xd = buf + n * ng;
        for (int64_t t = 0; t < n; t++)
            for (int64_t b = 0; b < cols; b += blk)
                for (int64_t k = 0; k < blk / 2; k++) {
                    xd[t * cols + b + k] = x[t * cols + b + 2 * k];
                    xd[t * cols + b + blk / 2 + k] = x[t * cols + b + 2 * k + 1];
                }
        in->xd = xd;
    }
    return ERR_OK;
}

void kern_qinput_free(struct kern_qinput *in)
{
    free(in->buf);
    in->buf = NULL;
}

/* Scale or bias g of a row, as float. */
static inline float param(enum dtype t, const uint8_t *row, int64_t g)
{
    uint16_t h;
    float f;
    switch (t) {
    case DT_BF16:
        memcpy(&h, row + 2 * g, 2);
        return bf16_to_f32(h);
    case DT_F16:
        memcpy(&h, row + 2 * g, 2);
        return f16_to_f32(h);
    default:
        memcpy(&f, row + 4 * g, 4);
        return f;
    }
}

/* ---- AVX-512 ---- */

#define AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma")))

/* 32 4-bit codes at element j: low nibbles (even elements) into chain c,
 * high nibbles (odd elements) into chain c+1, for each token. */
AVX512 INLINE void q4_step512(const uint8_t *codes, const float *xd, int64_t cols, int64_t t0, int tb, int64_t j,
                              __m512 (*aq)[4], int c)
{
    __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(const void *)(codes + j / 2)));
    __m512 lo = _mm512_cvtepi32_ps(_mm512_and_si512(v, _mm512_set1_epi32(15)));
    __m512 hi = _mm512_cvtepi32_ps(_mm512_srli_epi32(v, 4));
    for (int u = 0; u < tb; u++) {
        const float *xt = xd + (t0 + u) * cols + j;
        aq[u][c] = _mm512_fmadd_ps(_mm512_loadu_ps(xt), lo, aq[u][c]);
        aq[u][c + 1] = _mm512_fmadd_ps(_mm512_loadu_ps(xt + 16), hi, aq[u][c + 1]);
    }
}

/* 16 8-bit codes at element j into chain c, for each token. */
AVX512 INLINE void q8_step512(const uint8_t *codes, const float *xd, int64_t cols, int64_t t0, int tb, int64_t j,
                              __m512 (*aq)[4], int c)
{
    __m512 q = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(const void *)(codes + j))));
    for (int u = 0; u < tb; u++)
        aq[u][c] = _mm512_fmadd_ps(_mm512_loadu_ps(xd + (t0 + u) * cols + j), q, aq[u][c]);
}

/* Rows [row0, row1) for tokens t0..t0+tb-1 (tb a constant after inlining). */
AVX512 INLINE void qrows512(const struct wmat *w, const float *xd, const float *xsum, int64_t t0, int tb, float *y,
                            int64_t row0, int64_t row1)
{
    int64_t ng = w->cols / w->gs, cols = w->cols, gs = w->gs;
    for (int64_t r = row0; r < row1; r++) {
        const uint8_t *codes = w->w + (size_t)r * w->row_stride;
        const uint8_t *sr = w->s + (size_t)r * w->srow_bytes, *br = w->b + (size_t)r * w->srow_bytes;
        __m512 acc[TB];
        float bsum[TB];
        for (int u = 0; u < tb; u++) {
            acc[u] = _mm512_setzero_ps();
            bsum[u] = 0.0f;
        }
        for (int64_t g = 0; g < ng; g++) {
            __m512 aq[TB][4]; /* four independent chains per token, summed pairwise per group */
            for (int u = 0; u < tb; u++)
                aq[u][0] = aq[u][1] = aq[u][2] = aq[u][3] = _mm512_setzero_ps();
            int64_t j = g * gs, end = j + gs;
            if (w->bits == 4) {
                for (; j + 64 <= end; j += 64) {
                    q4_step512(codes, xd, cols, t0, tb, j, aq, 0);
                    q4_step512(codes, xd, cols, t0, tb, j + 32, aq, 2);
                }
                if (j < end)
                    q4_step512(codes, xd, cols, t0, tb, j, aq, 0);
            } else {
                for (; j + 64 <= end; j += 64) {
                    q8_step512(codes, xd, cols, t0, tb, j, aq, 0);
                    q8_step512(codes, xd, cols, t0, tb, j + 16, aq, 1);
                    q8_step512(codes, xd, cols, t0, tb, j + 32, aq, 2);
                    q8_step512(codes, xd, cols, t0, tb, j + 48, aq, 3);
                }
                if (j < end) {
                    q8_step512(codes, xd, cols, t0, tb, j, aq, 0);
                    q8_step512(codes, xd, cols, t0, tb, j + 16, aq, 1);
                }
            }
            __m512 s = _mm512_set1_ps(param(w->dtype, sr, g));
            float bias = param(w->dtype, br, g);
            for (int u = 0; u < tb; u++) {
                __m512 sum = _mm512_add_ps(_mm512_add_ps(aq[u][0], aq[u][1]), _mm512_add_ps(aq[u][2], aq[u][3]));
                acc[u] = _mm512_fmadd_ps(s, sum, acc[u]);
                bsum[u] += bias * xsum[(t0 + u) * ng + g];
            }
        }
        for (int u = 0; u < tb; u++)
            y[(t0 + u) * w->rows + r] = _mm512_reduce_add_ps(acc[u]) + bsum[u];
    }
}

AVX512 void kern_qdot_avx512(const struct wmat *w, const struct kern_qinput *in, int64_t n, float *y, int64_t row0,
                             int64_t row1)
{
    for (int64_t t0 = 0; t0 < n; t0 += TB) {
        switch (n - t0 < TB ? n - t0 : TB) {
        case 1: qrows512(w, in->xd, in->xsum, t0, 1, y, row0, row1); break;
        case 2: qrows512(w, in->xd, in->xsum, t0, 2, y, row0, row1); break;
        case 3: qrows512(w, in->xd, in->xsum, t0, 3, y, row0, row1); break;
        default: qrows512(w, in->xd, in->xsum, t0, 4, y, row0, row1); break;
        }
    }
}

void kern_matvec_q_avx512(const struct wmat *w, const float *x, int64_t n, float *y, int64_t row0, int64_t row1)
{
    struct kern_qinput in;
    if (kern_qinput_prepare(w, x, n, 32, &in) != ERR_OK) {
        kern_matmul_ref(w, x, n, y, row0, row1);
        return;
    }
    kern_qdot_avx512(w, &in, n, y, row0, row1);
    kern_qinput_free(&in);
}


AVX512 INLINE void bf16_step512(const uint8_t *row, const float *x, int64_t cols, int64_t t0, int tb, int64_t j,
                                __m512 (*acc)[4], int c)
{
    __m256i h = _mm256_loadu_si256((const __m256i *)(const void *)(row + 2 * j));
    __m512 wv = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    for (int u = 0; u < tb; u++)
        acc[u][c] = _mm512_fmadd_ps(_mm512_loadu_ps(x + (t0 + u) * cols + j), wv, acc[u][c]);
}

AVX512 INLINE void bf16rows512(const struct wmat *w, const float *x, int64_t t0, int tb, float *y, int64_t row0,
                               int64_t row1)
{
    int64_t c16 = w->cols & ~(int64_t)15, cols = w->cols;
    for (int64_t r = row0; r < row1; r++) {
        const uint8_t *row = w->w + (size_t)r * w->row_stride;
        __m512 acc[TB][4]; /* four independent chains per token */
        for (int u = 0; u < tb; u++)
            acc[u][0] = acc[u][1] = acc[u][2] = acc[u][3] = _mm512_setzero_ps();
        int64_t j = 0;
        for (; j + 64 <= c16; j += 64)
            for (int c = 0; c < 4; c++)
                bf16_step512(row, x, cols, t0, tb, j + 16 * c, acc, c);
        for (int c = 0; j < c16; j += 16, c++)
            bf16_step512(row, x, cols, t0, tb, j, acc, c);
        for (int u = 0; u < tb; u++) {
            float s = _mm512_reduce_add_ps(
                _mm512_add_ps(_mm512_add_ps(acc[u][0], acc[u][1]), _mm512_add_ps(acc[u][2], acc[u][3])));
            for (int64_t k = c16; k < cols; k++)
                s += x[(t0 + u) * cols + k] * bf16_to_f32((uint16_t)(row[2 * k] | row[2 * k + 1] << 8));
            y[(t0 + u) * w->rows + r] = s;
        }
    }
}

AVX512 void kern_matvec_bf16_avx512(const struct wmat *w, const float *x, int64_t n, float *y, int64_t row0,
                                    int64_t row1)
{
    for (int64_t t0 = 0; t0 < n; t0 += TB) {
        switch (n - t0 < TB ? n - t0 : TB) {
        case 1: bf16rows512(w, x, t0, 1, y, row0, row1); break;
        case 2: bf16rows512(w, x, t0, 2, y, row0, row1); break;
        case 3: bf16rows512(w, x, t0, 3, y, row0, row1); break;
        default: bf16rows512(w, x, t0, 4, y, row0, row1); break;
        }
    }
}

/* ---- AVX2 ---- */

#define AVX2 __attribute__((target("avx2,fma")))

AVX2 INLINE float hsum256(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* 16 4-bit codes at element j: low nibbles into chain c, high into c+1. */
AVX2 INLINE void q4_step256(const uint8_t *codes, const float *xd, int64_t cols, int64_t t0, int tb, int64_t j,
                            __m256 (*aq)[4], int c)
{
    __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)(codes + j / 2)));
    __m256 lo = _mm256_cvtepi32_ps(_mm256_and_si256(v, _mm256_set1_epi32(15)));
    __m256 hi = _mm256_cvtepi32_ps(_mm256_srli_epi32(v, 4));
    for (int u = 0; u < tb; u++) {
        const float *xt = xd + (t0 + u) * cols + j;
        aq[u][c] = _mm256_fmadd_ps(_mm256_loadu_ps(xt), lo, aq[u][c]);
        aq[u][c + 1] = _mm256_fmadd_ps(_mm256_loadu_ps(xt + 8), hi, aq[u][c + 1]);
    }
}

/* 8 8-bit codes at element j into chain c. */
AVX2 INLINE void q8_step256(const uint8_t *codes, const float *xd, int64_t cols, int64_t t0, int tb, int64_t j,
                            __m256 (*aq)[4], int c)
{
    __m256 q = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)(codes + j))));
    for (int u = 0; u < tb; u++)
        aq[u][c] = _mm256_fmadd_ps(_mm256_loadu_ps(xd + (t0 + u) * cols + j), q, aq[u][c]);
}

AVX2 INLINE void qrows256(const struct wmat *w, const float *xd, const float *xsum, int64_t t0, int tb, float *y,
                          int64_t row0, int64_t row1)
{
    int64_t ng = w->cols / w->gs, cols = w->cols, gs = w->gs;
    for (int64_t r = row0; r < row1; r++) {
        const uint8_t *codes = w->w + (size_t)r * w->row_stride;
        const uint8_t *sr = w->s + (size_t)r * w->srow_bytes, *br = w->b + (size_t)r * w->srow_bytes;
        __m256 acc[TB];
        float bsum[TB];
        for (int u = 0; u < tb; u++) {
            acc[u] = _mm256_setzero_ps();
            bsum[u] = 0.0f;
        }
        for (int64_t g = 0; g < ng; g++) {
            __m256 aq[TB][4]; /* four independent chains per token, summed pairwise per group */
            for (int u = 0; u < tb; u++)
                aq[u][0] = aq[u][1] = aq[u][2] = aq[u][3] = _mm256_setzero_ps();
            int64_t j = g * gs, end = j + gs;
            if (w->bits == 4) {
                for (; j + 32 <= end; j += 32) {
                    q4_step256(codes, xd, cols, t0, tb, j, aq, 0);
                    q4_step256(codes, xd, cols, t0, tb, j + 16, aq, 2);
                }
            } else {
                for (; j + 32 <= end; j += 32) {
                    q8_step256(codes, xd, cols, t0, tb, j, aq, 0);
                    q8_step256(codes, xd, cols, t0, tb, j + 8, aq, 1);
                    q8_step256(codes, xd, cols, t0, tb, j + 16, aq, 2);
                    q8_step256(codes, xd, cols, t0, tb, j + 24, aq, 3);
                }
            }
            __m256 s = _mm256_set1_ps(param(w->dtype, sr, g));
            float bias = param(w->dtype, br, g);
            for (int u = 0; u < tb; u++) {
                __m256 sum = _mm256_add_ps(_mm256_add_ps(aq[u][0], aq[u][1]), _mm256_add_ps(aq[u][2], aq[u][3]));
                acc[u] = _mm256_fmadd_ps(s, sum, acc[u]);
                bsum[u] += bias * xsum[(t0 + u) * ng + g];
            }
        }
        for (int u = 0; u < tb; u++)
            y[(t0 + u) * w->rows + r] = hsum256(acc[u]) + bsum[u];
    }
}

AVX2 void kern_qdot_avx2(const struct wmat *w, const struct kern_qinput *in, int64_t n, float *y, int64_t row0,
                         int64_t row1)
{
    for (int64_t t0 = 0; t0 < n; t0 += TB) {
        switch (n - t0 < TB ? n - t0 : TB) {
        case 1: qrows256(w, in->xd, in->xsum, t0, 1, y, row0, row1); break;
        case 2: qrows256(w, in->xd, in->xsum, t0, 2, y, row0, row1); break;
        case 3: qrows256(w, in->xd, in->xsum, t0, 3, y, row0, row1); break;
        default: qrows256(w, in->xd, in->xsum, t0, 4, y, row0, row1); break;
        }
    }
}

void kern_matvec_q_avx2(const struct wmat *w, const float *x, int64_t n, float *y, int64_t row0, int64_t row1)
{
    struct kern_qinput in;
    if (kern_qinput_prepare(w, x, n, 16, &in) != ERR_OK) {
        kern_matmul_ref(w, x, n, y, row0, row1);
        return;
    }
    kern_qdot_avx2(w, &in, n, y, row0, row1);
    kern_qinput_free(&in);
}


AVX2 INLINE void bf16_step256(const uint8_t *row, const float *x, int64_t cols, int64_t t0, int tb, int64_t j,
                              __m256 (*acc)[4], int c)
{
    __m128i h = _mm_loadu_si128((const __m128i *)(const void *)(row + 2 * j));
    __m256 wv = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    for (int u = 0; u < tb; u++)
        acc[u][c] = _mm256_fmadd_ps(_mm256_loadu_ps(x + (t0 + u) * cols + j), wv, acc[u][c]);
}

AVX2 INLINE void bf16rows256(const struct wmat *w, const float *x, int64_t t0, int tb, float *y, int64_t row0,
                             int64_t row1)
{
    int64_t c8 = w->cols & ~(int64_t)7, cols = w->cols;
    for (int64_t r = row0; r < row1; r++) {
        const uint8_t *row = w->w + (size_t)r * w->row_stride;
        __m256 acc[TB][4]; /* four independent chains per token */
        for (int u = 0; u < tb; u++)
            acc[u][0] = acc[u][1] = acc[u][2] = acc[u][3] = _mm256_setzero_ps();
        int64_t j = 0;
        for (; j + 32 <= c8; j += 32)
            for (int c = 0; c < 4; c++)
                bf16_step256(row, x, cols, t0, tb, j + 8 * c, acc, c);
        for (int c = 0; j < c8; j += 8, c++)
            bf16_step256(row, x, cols, t0, tb, j, acc, c);
        for (int u = 0; u < tb; u++) {
            float s = hsum256(_mm256_add_ps(_mm256_add_ps(acc[u][0], acc[u][1]), _mm256_add_ps(acc[u][2], acc[u][3])));
            for (int64_t k = c8; k < cols; k++)
                s += x[(t0 + u) * cols + k] * bf16_to_f32((uint16_t)(row[2 * k] | row[2 * k + 1] << 8));
            y[(t0 + u) * w->rows + r] = s;
        }
    }
}

AVX2 void kern_matvec_bf16_avx2(const struct wmat *w, const float *x, int64_t n, float *y, int64_t row0, int64_t row1)
{
    for (int64_t t0 = 0; t0 < n; t0 += TB) {
        switch (n - t0 < TB ? n - t0 : TB) {
        case 1: bf16rows256(w, x, t0, 1, y, row0, row1); break;
        case 2: bf16rows256(w, x, t0, 2, y, row0, row1); break;
        case 3: bf16rows256(w, x, t0, 3, y, row0, row1); break;
        default: bf16rows256(w, x, t0, 4, y, row0, row1); break;
        }
    }
}
