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
#define PARAMS_MAX 256 /* scales and biases of a row converted at once */
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

/* ---- AVX-512 ---- */

#define AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma")))

/* A row's scales or biases as float32 (bf16 widened 16 at a time). */
AVX512 INLINE void params512(enum dtype t, const uint8_t *src, float *dst, int64_t n)
{
    int64_t i = 0;
    if (t == DT_BF16)
        for (; i + 16 <= n; i += 16) {
            __m256i h = _mm256_loadu_si256((const __m256i *)(const void *)(src + 2 * i));
            _mm512_storeu_ps(dst + i, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)));
        }
    dtype_to_f32(t, src + (size_t)i * (dtype_table[t].bits / 8), dst + i, (size_t)(n - i));
}

/* 32 4-bit codes (16 bytes at c): low nibbles (even elements) into chain k,
 * high nibbles (odd elements) into chain k+1, for each token; x points at
 * token t0's de-interleaved inputs of the same 32 elements. */
AVX512 INLINE void q4_step512(const uint8_t *c, const float *x, int64_t cols, int tb, __m512 (*aq)[4], int k)
{
    __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(const void *)c));
    __m512 lo = _mm512_cvtepi32_ps(_mm512_and_si512(v, _mm512_set1_epi32(15)));
    __m512 hi = _mm512_cvtepi32_ps(_mm512_srli_epi32(v, 4));
    for (int u = 0; u < tb; u++) {
        aq[u][k] = _mm512_fmadd_ps(_mm512_loadu_ps(x + u * cols), lo, aq[u][k]);
        aq[u][k + 1] = _mm512_fmadd_ps(_mm512_loadu_ps(x + u * cols + 16), hi, aq[u][k + 1]);
    }
}

/* 16 8-bit codes at c into chain k, for each token. */
AVX512 INLINE void q8_step512(const uint8_t *c, const float *x, int64_t cols, int tb, __m512 (*aq)[4], int k)
{
    __m512 q = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(const void *)c)));
    for (int u = 0; u < tb; u++)
        aq[u][k] = _mm512_fmadd_ps(_mm512_loadu_ps(x + u * cols), q, aq[u][k]);
}

/* Group g of a row into accumulator a (a constant), for each token. */
AVX512 INLINE void qgroup512(const uint8_t *codes, const float *xd, int64_t cols, int64_t t0, const int tb, const int gs,
                          const int bits, int64_t g, float scale, __m512 (*acc)[4], const int a)
{
    const uint8_t *cg = codes + (size_t)(g * gs * bits / 8);
    const float *xg = xd + t0 * cols + g * gs;
    __m512 aq[TB][4]; /* four independent chains per token, summed pairwise */
    for (int u = 0; u < tb; u++)
        aq[u][0] = aq[u][1] = aq[u][2] = aq[u][3] = _mm512_setzero_ps();
    if (bits == 4)
        for (int k = 0; k < gs / 32; k++)
            q4_step512(cg + 16 * k, xg + 32 * k, cols, tb, aq, (k & 1) * 2);
    else
        for (int k = 0; k < gs / 16; k++)
            q8_step512(cg + 16 * k, xg + 16 * k, cols, tb, aq, k & 3);
    __m512 s = _mm512_set1_ps(scale);
    for (int u = 0; u < tb; u++)
        acc[u][a] = _mm512_fmadd_ps(s, _mm512_add_ps(_mm512_add_ps(aq[u][0], aq[u][1]), _mm512_add_ps(aq[u][2], aq[u][3])), acc[u][a]);
}

/* Rows [row0, row1) for tokens t0..t0+tb-1; tb, gs and bits are constants
 * after inlining, so every loop over a group unrolls. */
AVX512 INLINE void qrows512(const struct wmat *w, const float *xd, const float *xsum, int64_t t0, const int tb,
                            float *y, int64_t row0, int64_t row1, const int gs, const int bits)
{
    const int64_t cols = w->cols, ng = cols / gs;
    const size_t psize = dtype_table[w->dtype].bits / 8;
    float sc[PARAMS_MAX], bi[PARAMS_MAX];
    for (int64_t r = row0; r < row1; r++) {
        const uint8_t *codes = w->w + (size_t)r * w->row_stride;
        const uint8_t *sr = w->s + (size_t)r * w->srow_bytes, *br = w->b + (size_t)r * w->srow_bytes;
        /* four accumulators per token (group g goes to g mod 4): a single chain would
         * serialize on the FMA latency from one group to the next */
        __m512 acc[TB][4];
        float bsum[TB][4];
        for (int u = 0; u < tb; u++)
            for (int a = 0; a < 4; a++) {
                acc[u][a] = _mm512_setzero_ps();
                bsum[u][a] = 0.0f;
            }
        for (int64_t g0 = 0; g0 < ng; g0 += PARAMS_MAX) {
            int64_t nb = ng - g0 < PARAMS_MAX ? ng - g0 : PARAMS_MAX;
            params512(w->dtype, sr + (size_t)g0 * psize, sc, nb);
            params512(w->dtype, br + (size_t)g0 * psize, bi, nb);
            int64_t gl = 0;
            for (; gl + 4 <= nb; gl += 4) {
                qgroup512(codes, xd, cols, t0, tb, gs, bits, g0 + gl + 0, sc[gl + 0], acc, 0);
                qgroup512(codes, xd, cols, t0, tb, gs, bits, g0 + gl + 1, sc[gl + 1], acc, 1);
                qgroup512(codes, xd, cols, t0, tb, gs, bits, g0 + gl + 2, sc[gl + 2], acc, 2);
                qgroup512(codes, xd, cols, t0, tb, gs, bits, g0 + gl + 3, sc[gl + 3], acc, 3);
            }
            for (; gl < nb; gl++)
                qgroup512(codes, xd, cols, t0, tb, gs, bits, g0 + gl, sc[gl], acc, 0);
            for (int u = 0; u < tb; u++) { /* the bias terms Σ_g bias_g · Σx_g, in four partial sums */
                const float *xs = xsum + (t0 + u) * ng + g0;
                int64_t k = 0;
                for (; k + 4 <= nb; k += 4) {
                    bsum[u][0] += bi[k] * xs[k];
                    bsum[u][1] += bi[k + 1] * xs[k + 1];
                    bsum[u][2] += bi[k + 2] * xs[k + 2];
                    bsum[u][3] += bi[k + 3] * xs[k + 3];
                }
                for (; k < nb; k++)
                    bsum[u][0] += bi[k] * xs[k];
            }
        }
        for (int u = 0; u < tb; u++)
            y[(t0 + u) * w->rows + r] =
                _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(acc[u][0], acc[u][1]), _mm512_add_ps(acc[u][2], acc[u][3]))) +
                ((bsum[u][0] + bsum[u][1]) + (bsum[u][2] + bsum[u][3]));
    }
}

/* One instantiation per (group size, bits) for a constant tb. */
#define QROWS_DISPATCH(fn, tb)                                                                                         \
    switch (w->gs * 16 + w->bits) {                                                                                  \
    case 32 * 16 + 4: fn(w, in->xd, in->xsum, t0, tb, y, row0, row1, 32, 4); break;                                \
    case 64 * 16 + 4: fn(w, in->xd, in->xsum, t0, tb, y, row0, row1, 64, 4); break;                                \
    case 128 * 16 + 4: fn(w, in->xd, in->xsum, t0, tb, y, row0, row1, 128, 4); break;                              \
    case 32 * 16 + 8: fn(w, in->xd, in->xsum, t0, tb, y, row0, row1, 32, 8); break;                                \
    case 64 * 16 + 8: fn(w, in->xd, in->xsum, t0, tb, y, row0, row1, 64, 8); break;                                \
    default: fn(w, in->xd, in->xsum, t0, tb, y, row0, row1, 128, 8); break;                                        \
    }

AVX512 void kern_qdot_avx512(const struct wmat *w, const struct kern_qinput *in, int64_t n, float *y, int64_t row0,
                             int64_t row1)
{
    for (int64_t t0 = 0; t0 < n; t0 += TB) {
        switch (n - t0 < TB ? n - t0 : TB) {
        case 1: QROWS_DISPATCH(qrows512, 1); break;
        case 2: QROWS_DISPATCH(qrows512, 2); break;
        case 3: QROWS_DISPATCH(qrows512, 3); break;
        default: QROWS_DISPATCH(qrows512, 4); break;
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

/* 16 4-bit codes (8 bytes at c): low nibbles into chain k, high into k+1. */
AVX2 INLINE void q4_step256(const uint8_t *c, const float *x, int64_t cols, int tb, __m256 (*aq)[4], int k)
{
    __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)c));
    __m256 lo = _mm256_cvtepi32_ps(_mm256_and_si256(v, _mm256_set1_epi32(15)));
    __m256 hi = _mm256_cvtepi32_ps(_mm256_srli_epi32(v, 4));
    for (int u = 0; u < tb; u++) {
        aq[u][k] = _mm256_fmadd_ps(_mm256_loadu_ps(x + u * cols), lo, aq[u][k]);
        aq[u][k + 1] = _mm256_fmadd_ps(_mm256_loadu_ps(x + u * cols + 8), hi, aq[u][k + 1]);
    }
}

/* 8 8-bit codes at c into chain k. */
AVX2 INLINE void q8_step256(const uint8_t *c, const float *x, int64_t cols, int tb, __m256 (*aq)[4], int k)
{
    __m256 q = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)c)));
    for (int u = 0; u < tb; u++)
        aq[u][k] = _mm256_fmadd_ps(_mm256_loadu_ps(x + u * cols), q, aq[u][k]);
}

/* Group g of a row into accumulator a (a constant), for each token. */
AVX2 INLINE void qgroup256(const uint8_t *codes, const float *xd, int64_t cols, int64_t t0, const int tb, const int gs,
                          const int bits, int64_t g, float scale, __m256 (*acc)[4], const int a)
{
    const uint8_t *cg = codes + (size_t)(g * gs * bits / 8);
    const float *xg = xd + t0 * cols + g * gs;
    __m256 aq[TB][4]; /* four independent chains per token, summed pairwise */
    for (int u = 0; u < tb; u++)
        aq[u][0] = aq[u][1] = aq[u][2] = aq[u][3] = _mm256_setzero_ps();
    if (bits == 4)
        for (int k = 0; k < gs / 16; k++)
            q4_step256(cg + 8 * k, xg + 16 * k, cols, tb, aq, (k & 1) * 2);
    else
        for (int k = 0; k < gs / 8; k++)
            q8_step256(cg + 8 * k, xg + 8 * k, cols, tb, aq, k & 3);
    __m256 s = _mm256_set1_ps(scale);
    for (int u = 0; u < tb; u++)
        acc[u][a] = _mm256_fmadd_ps(s, _mm256_add_ps(_mm256_add_ps(aq[u][0], aq[u][1]), _mm256_add_ps(aq[u][2], aq[u][3])), acc[u][a]);
}

/* Rows [row0, row1) for tokens t0..t0+tb-1; tb, gs and bits are constants
 * after inlining, so every loop over a group unrolls. */
AVX2 INLINE void qrows256(const struct wmat *w, const float *xd, const float *xsum, int64_t t0, const int tb,
                          float *y, int64_t row0, int64_t row1, const int gs, const int bits)
{
    const int64_t cols = w->cols, ng = cols / gs;
    const size_t psize = dtype_table[w->dtype].bits / 8;
    float sc[PARAMS_MAX], bi[PARAMS_MAX];
    for (int64_t r = row0; r < row1; r++) {
        const uint8_t *codes = w->w + (size_t)r * w->row_stride;
        const uint8_t *sr = w->s + (size_t)r * w->srow_bytes, *br = w->b + (size_t)r * w->srow_bytes;
        /* four accumulators per token (group g goes to g mod 4): a single chain would
         * serialize on the FMA latency from one group to the next */
        __m256 acc[TB][4];
        float bsum[TB][4];
        for (int u = 0; u < tb; u++)
            for (int a = 0; a < 4; a++) {
                acc[u][a] = _mm256_setzero_ps();
                bsum[u][a] = 0.0f;
            }
        for (int64_t g0 = 0; g0 < ng; g0 += PARAMS_MAX) {
            int64_t nb = ng - g0 < PARAMS_MAX ? ng - g0 : PARAMS_MAX;
            dtype_to_f32(w->dtype, sr + (size_t)g0 * psize, sc, (size_t)nb);
            dtype_to_f32(w->dtype, br + (size_t)g0 * psize, bi, (size_t)nb);
            int64_t gl = 0;
            for (; gl + 4 <= nb; gl += 4) {
                qgroup256(codes, xd, cols, t0, tb, gs, bits, g0 + gl + 0, sc[gl + 0], acc, 0);
                qgroup256(codes, xd, cols, t0, tb, gs, bits, g0 + gl + 1, sc[gl + 1], acc, 1);
                qgroup256(codes, xd, cols, t0, tb, gs, bits, g0 + gl + 2, sc[gl + 2], acc, 2);
                qgroup256(codes, xd, cols, t0, tb, gs, bits, g0 + gl + 3, sc[gl + 3], acc, 3);
            }
            for (; gl < nb; gl++)
                qgroup256(codes, xd, cols, t0, tb, gs, bits, g0 + gl, sc[gl], acc, 0);
            for (int u = 0; u < tb; u++) { /* the bias terms Σ_g bias_g · Σx_g, in four partial sums */
                const float *xs = xsum + (t0 + u) * ng + g0;
                int64_t k = 0;
                for (; k + 4 <= nb; k += 4) {
                    bsum[u][0] += bi[k] * xs[k];
                    bsum[u][1] += bi[k + 1] * xs[k + 1];
                    bsum[u][2] += bi[k + 2] * xs[k + 2];
                    bsum[u][3] += bi[k + 3] * xs[k + 3];
                }
                for (; k < nb; k++)
                    bsum[u][0] += bi[k] * xs[k];
            }
        }
        for (int u = 0; u < tb; u++)
            y[(t0 + u) * w->rows + r] =
                hsum256(_mm256_add_ps(_mm256_add_ps(acc[u][0], acc[u][1]), _mm256_add_ps(acc[u][2], acc[u][3]))) +
                ((bsum[u][0] + bsum[u][1]) + (bsum[u][2] + bsum[u][3]));
    }
}

AVX2 void kern_qdot_avx2(const struct wmat *w, const struct kern_qinput *in, int64_t n, float *y, int64_t row0,
                         int64_t row1)
{
    for (int64_t t0 = 0; t0 < n; t0 += TB) {
        switch (n - t0 < TB ? n - t0 : TB) {
        case 1: QROWS_DISPATCH(qrows256, 1); break;
        case 2: QROWS_DISPATCH(qrows256, 2); break;
        case 3: QROWS_DISPATCH(qrows256, 3); break;
        default: QROWS_DISPATCH(qrows256, 4); break;
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
