/* avx2.c - the AVX2 twins of avx512.c's fused dequantize + dot products (the
 * scheme, and what every token is guaranteed, are described there). */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "core/bytes.h"
#include "core/dtype.h"
#include "kernels/x86/x86.h"
#include "kernels/x86/simd.h"

/* Lanes l and l + w added for w = 8, 4, 2, 1 (kern_lanes_sum16), lo holding lanes 0-7, hi 8-15. */
AVX2 INLINE float sum16_256(__m256 lo, __m256 hi)
{
    __m256 s8 = _mm256_add_ps(lo, hi);
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
}

/* 8 floats at p, or (not full) the lanes mask m admits, the rest 0 (a
 * masked load is slower than a plain one on the whole vectors). */
AVX2 INLINE __m256 load8(const float *p, bool full, __m256i m)
{
    return full ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, m);
}

/* kern_dot_ref's order for H query rows (q + u·n) against K keys side by
 * side: lo[u][k] holds lanes 0-7 of row u and key k, hi[u][k] lanes 8-15; a
 * key's vectors are loaded once for all the rows, a row's once for all the
 * keys. The tail through masked loads (0·0 added leaves a lane unchanged). */
AVX2 INLINE void dotsk256(const float *q, const int H, const float *const *b, const int K, int64_t n, float *out,
                          int64_t ld, const float *const *pf)
{
    __m256 lo[4][4], hi[4][4];
#pragma GCC unroll 4
    for (int u = 0; u < H; u++)
#pragma GCC unroll 4
        for (int k = 0; k < K; k++)
            lo[u][k] = hi[u][k] = _mm256_setzero_ps();
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    for (int64_t i = 0; i < n; i += 16) {
        const __m256i mlo = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(n - i < 16 ? n - i : 16)), lane);
        const __m256i mhi = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(n - i < 16 ? n - i : 16) - 8), lane);
        __m256 xl[4], xh[4];
#pragma GCC unroll 4
        for (int k = 0; k < K; k++) {
            xl[k] = load8(b[k] + i, n - i >= 16, mlo);
            xh[k] = load8(b[k] + i + 8, n - i >= 16, mhi);
            if (pf)
                _mm_prefetch((const char *)(pf[k] + i), _MM_HINT_T0);
        }
#pragma GCC unroll 4
        for (int u = 0; u < H; u++) {
            const __m256 al = load8(q + u * n + i, n - i >= 16, mlo), ah = load8(q + u * n + i + 8, n - i >= 16, mhi);
#pragma GCC unroll 4
            for (int k = 0; k < K; k++) {
                lo[u][k] = _mm256_fmadd_ps(al, xl[k], lo[u][k]);
                hi[u][k] = _mm256_fmadd_ps(ah, xh[k], hi[u][k]);
            }
        }
    }
#pragma GCC unroll 4
    for (int u = 0; u < H; u++)
#pragma GCC unroll 4
        for (int k = 0; k < K; k++)
            out[u * ld + k] = sum16_256(lo[u][k], hi[u][k]);
}

AVX2 float kern_dot_avx2(const float *a, const float *b, int64_t n)
{
    float out;
    dotsk256(a, 1, &b, 1, n, &out, 1, NULL);
    return out;
}

/* H heads' scores, 4/H keys at a time, the rest one by one. */
AVX2 INLINE void dots_heads256(const float *q, const int H, const float *const *b, int m, int64_t n, float *out,
                               int64_t ld)
{
    const int K = 4 / H, A = K < DOTS_AHEAD ? DOTS_AHEAD : K;
    int j = 0;
    for (; j + K <= m; j += K)
        dotsk256(q, H, b + j, K, n, out + j, ld, j + A + K <= m ? b + j + A : NULL);
    for (; j < m; j++)
        dotsk256(q, H, b + j, 1, n, out + j, ld, NULL);
}

/* Lanes 8h .. 8h + 7 of kern_dot_ref's 16 for 4 query rows (q + u·n)
 * against 3 keys b[k]: acc[3u + k], 12 chains (8 left the FMAs waiting on
 * their latency); each key's 8 floats and each row's loaded once (7 loads
 * to 12 multiply-adds), the rows addressed from one pointer by offsets (GCC
 * had stepped a pointer a row); the keys' lines fetched from pf (h 0). The
 * tail through masked loads. */
AVX2 INLINE void dots_half4x3_256(const float *q, const float *const *b, int64_t n, const int h, __m256 *acc,
                                  const float *const *pf)
{
    int64_t o1 = n * (int64_t)sizeof(float), o2 = 2 * o1, o3 = 3 * o1;
    __asm__("" : "+r"(o1), "+r"(o2), "+r"(o3));
    const int64_t o[4] = {0, o1, o2, o3};
#pragma GCC unroll 12
    for (int i = 0; i < 12; i++)
        acc[i] = _mm256_setzero_ps();
    int64_t i = 8 * h;
    for (; i + 8 <= n; i += 16) {
        __m256 x[3];
#pragma GCC unroll 3
        for (int k = 0; k < 3; k++) {
            x[k] = _mm256_loadu_ps(b[k] + i);
            if (pf)
                _mm_prefetch((const char *)(pf[k] + i), _MM_HINT_T0);
        }
        const char *qi = (const char *)(q + i);
#pragma GCC unroll 4
        for (int u = 0; u < 4; u++) {
            __m256 a = _mm256_loadu_ps((const float *)(qi + o[u]));
            __asm__("" : "+x"(a)); /* one load for the keys (GCC had folded it into each) */
#pragma GCC unroll 3
            for (int k = 0; k < 3; k++)
                acc[3 * u + k] = _mm256_fmadd_ps(a, x[k], acc[3 * u + k]);
        }
    }
    if (i < n) {
        const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        const __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(n - i)), lane);
#pragma GCC unroll 4
        for (int u = 0; u < 4; u++) {
            const __m256 a = _mm256_maskload_ps(q + u * n + i, m);
#pragma GCC unroll 3
            for (int k = 0; k < 3; k++)
                acc[3 * u + k] = _mm256_fmadd_ps(a, _mm256_maskload_ps(b[k] + i, m), acc[3 * u + k]);
        }
    }
}

/* 4 heads' scores, 3 keys at a time (their lanes 0-7, then 8-15: the keys'
 * lines in L1 for the second half), the last keys by dotsk256. */
AVX2 INLINE void dots_4heads256(const float *q, const float *const *b, int m, int64_t n, float *out, int64_t ld)
{
    int j = 0;
    for (; j + 3 <= m; j += 3) {
        __m256 lo[12], hi[12];
        dots_half4x3_256(q, b + j, n, 0, lo, j + DOTS_AHEAD + 3 <= m ? b + j + DOTS_AHEAD : NULL);
        dots_half4x3_256(q, b + j, n, 1, hi, NULL);
#pragma GCC unroll 4
        for (int u = 0; u < 4; u++)
#pragma GCC unroll 3
            for (int k = 0; k < 3; k++)
                out[u * ld + j + k] = sum16_256(lo[3 * u + k], hi[3 * u + k]);
    }
    for (; j < m; j++)
        dotsk256(q, 4, b + j, 1, n, out + j, ld, NULL);
}

/* Heads 4 at a time, then 2 and 1. */
AVX2 void kern_dots_avx2(const float *q, int nh, const float *const *b, int m, int64_t n, float *out, int64_t ld)
{
    int u = 0;
    for (; u + 4 <= nh; u += 4)
        dots_4heads256(q + u * n, b, m, n, out + u * ld, ld);
    if (u + 2 <= nh) {
        dots_heads256(q + u * n, 2, b, m, n, out + u * ld, ld);
        u += 2;
    }
    if (u < nh)
        dots_heads256(q + u * n, 1, b, m, n, out + u * ld, ld);
}

/* acc[c] += w·v[c] for c < C: one head's share of a value. */
AVX2 INLINE void add_value256(__m256 *acc, float w, const __m256 *v, const int C)
{
    const __m256 wu = _mm256_set1_ps(w);
#pragma GCC unroll 4
    for (int c = 0; c < C; c++)
        acc[c] = _mm256_fmadd_ps(wu, v[c], acc[c]);
}

/* Columns i .. i + 8·C − 1 of H heads' outputs, kept in registers while the
 * values are added in order: a value's vectors are loaded once for all the
 * heads, its weights broadcast from wt[H·j + u]; use[j] (kern_weights_used)
 * names the heads that add value j. */
AVX2 INLINE void axpyk256(float *y, int64_t ld, const int H, const float *wt, const float *const *x,
                          const unsigned *use, int m, int64_t i, const int C)
{
    __m256 acc[4][4], v[4];
#pragma GCC unroll 4
    for (int u = 0; u < H; u++)
#pragma GCC unroll 4
        for (int c = 0; c < C; c++)
            acc[u][c] = _mm256_loadu_ps(y + u * ld + i + 8 * c);
    for (int j = 0; j < m; j++) {
        if (!use[j])
            continue;
#pragma GCC unroll 4
        for (int c = 0; c < C; c++)
            v[c] = _mm256_loadu_ps(x[j] + i + 8 * c);
#pragma GCC unroll 4
        for (int c = 0; c < C; c += 2) /* past the value's end: a prefetch never faults */
            _mm_prefetch((const char *)(x[j] + i + AXPY_AHEAD + 8 * c), _MM_HINT_T0);
        if (use[j] == (1u << H) - 1) /* every head (the common case): no branch per head */
#pragma GCC unroll 4
            for (int u = 0; u < H; u++)
                add_value256(acc[u], wt[H * j + u], v, C);
        else
#pragma GCC unroll 4
            for (int u = 0; u < H; u++)
                if (use[j] >> u & 1)
                    add_value256(acc[u], wt[H * j + u], v, C);
    }
#pragma GCC unroll 4
    for (int u = 0; u < H; u++)
#pragma GCC unroll 4
        for (int c = 0; c < C; c++)
            _mm256_storeu_ps(y + u * ld + i + 8 * c, acc[u][c]);
}

/* H heads, 8·C columns at a time (C = 3 for 4 heads, 4 for 2 and 1: 12 or 8
 * sums in registers), then one and the tail element by element, the same
 * operations. */
AVX2 INLINE void axpy_heads256(float *y, int64_t ld, const int H, const float *w, int64_t wld,
                               const float *const *x, int m, int64_t n)
{
    const int C = H == 4 ? 3 : 4;
    unsigned use[16];
    float wt[4 * 16];
    kern_weights_used(w, wld, H, x, m, use);
    for (int j = 0; j < m; j++)
        for (int u = 0; u < H; u++)
            wt[H * j + u] = w[u * wld + j];
    int64_t i = 0;
    for (; i + 8 * C <= n; i += 8 * C)
        axpyk256(y, ld, H, wt, x, use, m, i, C);
    for (; i + 8 <= n; i += 8)
        axpyk256(y, ld, H, wt, x, use, m, i, 1);
    for (; i < n; i++)
        for (int j = 0; j < m; j++)
            for (int u = 0; u < H; u++)
                if (use[j] >> u & 1)
                    y[u * ld + i] = fmaf(w[u * wld + j], x[j][i], y[u * ld + i]);
}

/* Values 16 at a time; heads 4 at a time, then 2 and 1. */
AVX2 void kern_axpy_avx2(float *y, int64_t ld, int nh, const float *w, int64_t wld, const float *const *x, int m,
                         int64_t n)
{
    for (int j = 0; j < m; j += 16) {
        const int mj = m - j < 16 ? m - j : 16;
        int u = 0;
        for (; u + 4 <= nh; u += 4)
            axpy_heads256(y + u * ld, ld, 4, w + u * wld + j, wld, x + j, mj, n);
        if (u + 2 <= nh) {
            axpy_heads256(y + u * ld, ld, 2, w + u * wld + j, wld, x + j, mj, n);
            u += 2;
        }
        if (u < nh)
            axpy_heads256(y + u * ld, ld, 1, w + u * wld + j, wld, x + j, mj, n);
    }
}

EXP_PARTS(AVX2, exp_parts256, __m256, _mm256, _mm256_castsi256_ps)

#define ZERO_OF256(x) _mm256_and_ps(x, _mm256_set1_ps(-0.0f))
#define SELECT_GT256(a, b, y, z) _mm256_blendv_ps(y, z, _mm256_cmp_ps(a, b, _CMP_GT_OQ))
GELU(AVX2, gelu256, __m256, _mm256, exp_parts256, ZERO_OF256, SELECT_GT256)

/* softcap512 on 8 lanes; the tail through kern_softcap itself. */
AVX2 void kern_softcap_avx2(float *x, float cap, int64_t n)
{
    const __m256 c = _mm256_set1_ps(cap);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 two_n, P = exp_parts256(_mm256_mul_ps(_mm256_set1_ps(2.0f), _mm256_div_ps(_mm256_loadu_ps(x + i), c)), &two_n);
        __m256 em = _mm256_add_ps(_mm256_mul_ps(two_n, P), _mm256_sub_ps(two_n, _mm256_set1_ps(1.0f)));
        _mm256_storeu_ps(x + i, _mm256_mul_ps(c, _mm256_div_ps(em, _mm256_add_ps(em, _mm256_set1_ps(2.0f)))));
    }
    kern_softcap_ref(x + i, cap, n - i);
}

/* kern_softmax with its exponentials and divisions on 8 lanes (kern_exp
 * step for step; the tail through kern_exp itself), the sum as the
 * definition takes it, the max in the lanes as kern_softmax_avx512 takes it
 * (the same value; of two zeros either may win, and x − m then differs only
 * for x = ±0, whose kern_exp is 1 either way). */
AVX2 void kern_softmax_avx2(float *x, int64_t n)
{
    __m256 mv = _mm256_set1_ps(-INFINITY);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) { /* a (quiet) NaN compares false: passed over, as by fmaxf */
        const __m256 a = _mm256_loadu_ps(x + i);
        mv = _mm256_blendv_ps(mv, a, _mm256_cmp_ps(a, mv, _CMP_GT_OQ));
    }
    float lanes[8], m = -INFINITY, sum = 0.0f;
    _mm256_storeu_ps(lanes, mv);
    for (int l = 0; l < 8; l++)
        m = fmaxf(m, lanes[l]);
    for (; i < n; i++)
        m = fmaxf(m, x[i]);
    const __m256 mm = _mm256_set1_ps(m);
    i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_sub_ps(_mm256_loadu_ps(x + i), mm);
        __m256 two_n, P = exp_parts256(v, &two_n);
        const __m256 e = _mm256_mul_ps(_mm256_add_ps(P, _mm256_set1_ps(1.0f)), two_n);
        _mm256_storeu_ps(x + i, _mm256_blendv_ps(e, _mm256_setzero_ps(),
                                                 _mm256_cmp_ps(v, _mm256_set1_ps(-KERN_EXP_VMAX), _CMP_LT_OQ)));
    }
    for (; i < n; i++)
        x[i] = kern_exp(x[i] - m);
    for (i = 0; i < n; i++)
        sum += x[i];
    const __m256 s = _mm256_set1_ps(sum);
    for (i = 0; i + 8 <= n; i += 8)
        _mm256_storeu_ps(x + i, _mm256_div_ps(_mm256_loadu_ps(x + i), s));
    for (; i < n; i++)
        x[i] /= sum;
}

/* The tail (fewer than 8) through kern_gelu itself: the same bits. */
AVX2 void kern_gelu_mul_avx2(float *g, const float *u, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(g + i, _mm256_mul_ps(gelu256(_mm256_loadu_ps(g + i)), _mm256_loadu_ps(u + i)));
    kern_gelu_mul_ref(g + i, u + i, n - i);
}

/* Code k of each word of v (affine; mk: the mask of code k below the top one). */
AVX2 INLINE __m256 acode256(__m256i v, const int k, const int bits, __m256i mk)
{
    return _mm256_cvtepi32_ps(k == 32 / bits - 1 ? _mm256_srli_epi32(v, 32 - bits) : _mm256_and_si256(v, mk));
}

/* code512 of avx512.c on 8 lanes: the E2M1 magnitudes from an 8-entry table,
 * the sign (bit 3) or'ed in. */
AVX2 INLINE __m256 code256(__m256i v, const int k, const int bits, const int mode)
{
    if (mode == QM_AFFINE)
        return acode256(v, k, bits, _mm256_set1_epi32((int)(((1u << bits) - 1) << (bits * k))));
    const __m256i c = _mm256_and_si256(_mm256_srli_epi32(v, bits * k), _mm256_set1_epi32((1 << bits) - 1));
    __m256 mag;
    __m256i sign;
    if (mode == QM_MXFP8) {
        __m256i m = _mm256_slli_epi32(_mm256_and_si256(c, _mm256_set1_epi32(0x7F)), 20);
        mag = _mm256_mul_ps(_mm256_castsi256_ps(m), _mm256_set1_ps(0x1p120f));
        sign = _mm256_slli_epi32(_mm256_and_si256(c, _mm256_set1_epi32(0x80)), 24);
    } else {
        mag = _mm256_permutevar8x32_ps(_mm256_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f), c);
        sign = _mm256_slli_epi32(_mm256_and_si256(c, _mm256_set1_epi32(8)), 28);
    }
    return _mm256_castsi256_ps(_mm256_or_si256(_mm256_castps_si256(mag), sign));
}

/* Half h of a block of 16 words (words: how many of its 8 are present) for
 * each token: the q·x products in two chains, summed, times each lane's
 * group scale sv, into accumulator h. */
AVX2 INLINE void qhalf256(const uint8_t *c, int64_t words, const float *xb, int64_t stride, const int tb,
                          const int bits, const int mode, __m256 sv, __m256 (*acc)[2], const int h)
{
    const int per_word = 32 / bits;
    _mm_prefetch((const char *)c + PREFETCH, _MM_HINT_T0);
    const __m256i v = words >= 8 ? _mm256_loadu_si256((const __m256i *)(const void *)c)
                                 : _mm256_maskload_epi32((const int *)(const void *)c,
                                                         _mm256_cmpgt_epi32(_mm256_set1_epi32((int)words),
                                                                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)));
    __m256 p[TB][2];
#pragma GCC unroll 8
    for (int k = 0; k < per_word; k++) {
        __m256 q = code256(v, k, bits, mode);
        for (int u = 0; u < tb; u++) {
            __m256 xv = _mm256_loadu_ps(xb + u * stride + 16 * k + 8 * h);
            p[u][k & 1] = k < 2 ? _mm256_mul_ps(xv, q) : _mm256_fmadd_ps(xv, q, p[u][k & 1]);
        }
    }
    for (int u = 0; u < tb; u++)
        acc[u][h] = _mm256_fmadd_ps(_mm256_add_ps(p[u][0], p[u][1]), sv, acc[u][h]);
}

/* Rows [row0, row1) for tokens t0..t0+tb-1; tb, gs, bits and mode are
 * constants after inlining, so every loop over a block unrolls. */
AVX2 INLINE void qrows256m(const struct wmat *w, const struct kern_qinput *in, int64_t t0, const int tb, float *y,
                           int64_t row0, int64_t row1, const int gs, const int bits, const int mode)
{
    const int per_word = 32 / bits, blk = 16 * per_word;
    const int64_t ng = w->cols / gs, stride = in->stride;
    const __m256i gidx0 = _mm256_setr_epi32(GROUP_OF_LANE(0), GROUP_OF_LANE(1), GROUP_OF_LANE(2), GROUP_OF_LANE(3),
                                            GROUP_OF_LANE(4), GROUP_OF_LANE(5), GROUP_OF_LANE(6), GROUP_OF_LANE(7));
    const __m256i gidx1 = _mm256_setr_epi32(GROUP_OF_LANE(8), GROUP_OF_LANE(9), GROUP_OF_LANE(10), GROUP_OF_LANE(11),
                                            GROUP_OF_LANE(12), GROUP_OF_LANE(13), GROUP_OF_LANE(14), GROUP_OF_LANE(15));
    float sc[PARAMS_MAX + 8]; /* zero past the row's groups, read by absent lanes */
    for (int64_t r = row0; r < row1; r++) {
        const uint8_t *codes = w->w + (size_t)r * w->row_stride;
        const uint8_t *sr = w->s + (size_t)r * w->srow_bytes;
        __m256 acc[TB][2]; /* the definition's A, lanes 0-7 and 8-15 */
        for (int u = 0; u < tb; u++)
            acc[u][0] = acc[u][1] = _mm256_setzero_ps();
        for (int64_t g0 = 0; g0 < ng; g0 += PARAMS_MAX) {
            int64_t nb = ng - g0 < PARAMS_MAX ? ng - g0 : PARAMS_MAX;
            kern_mx_scales((enum qmode)mode, sr + g0, sc, nb);
            memset(sc + nb, 0, 8 * sizeof *sc);
            const int64_t j0 = g0 * gs, j1 = (g0 + nb) * gs; /* a chunk is whole blocks but for the row's last */
            const float *xb = in->xd + t0 * stride;
            for (int64_t j = j0; j < j1; j += blk) {
                int64_t words = (j1 - j) / per_word;
                __m256 s8 = _mm256_loadu_ps(sc + (j - j0) / gs);
                qhalf256(codes + j * bits / 8, words, xb + j, stride, tb, bits, mode,
                         _mm256_permutevar8x32_ps(s8, gidx0), acc, 0);
                if (words > 8)
                    qhalf256(codes + j * bits / 8 + 32, words - 8, xb + j, stride, tb, bits, mode,
                             _mm256_permutevar8x32_ps(s8, gidx1), acc, 1);
            }
        }
        const __m256 zero = _mm256_setzero_ps(); /* + 0: kern_qdot_ref's bias lanes */
        for (int u = 0; u < tb; u++)
            y[(t0 + u) * w->rows + r] = hsum256(_mm256_add_ps(_mm256_add_ps(acc[u][0], zero), _mm256_add_ps(acc[u][1], zero)));
    }
}

/* ---- affine 4/8-bit: arows512 of avx512.c on two halves of 8 lanes ---- */

/* 8 F32/F16/BF16 values in a row as floats. */
AVX2 INLINE __m256 f32x8(enum dtype t, const uint8_t *a)
{
    if (t == DT_F32)
        return _mm256_loadu_ps((const float *)(const void *)a);
    const __m128i h = _mm_loadu_si128((const __m128i *)(const void *)a);
    return t == DT_F16 ? _mm256_cvtph_ps(h) : _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* The lanes of half h of a set whose rows in range are the bits of m, as a mask vector. */
AVX2 INLINE __m256 half_mask256(uint32_t m, int h)
{
    const __m256i bit = _mm256_sllv_epi32(_mm256_set1_epi32(1), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    const __m256i mh = _mm256_set1_epi32((int)(m >> 8 * h & 0xFF));
    return _mm256_castsi256_ps(_mm256_cmpeq_epi32(_mm256_and_si256(mh, bit), bit));
}

/* By rows: words [0, W) (W ≤ 8) of 8 rows (src: the first row's first, the
 * others `stride` bytes apart; m: the rows read, the others 0) as the
 * blocked layout holds them: word k of row l at dst[16k + l]. An 8 × 8
 * transpose. */
AVX2 INLINE void rows_to_lanes256(const uint8_t *src, size_t stride, uint32_t m, int W, uint32_t *dst)
{
    const __m256i wm = _mm256_cmpgt_epi32(_mm256_set1_epi32(W), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    __m256i r[8], t[8];
    for (int l = 0; l < 8; l++)
        r[l] = m >> l & 1 ? _mm256_maskload_epi32((const int *)(const void *)(src + (size_t)l * stride), wm)
                          : _mm256_setzero_si256();
    for (int q = 0; q < 2; q++) { /* rows 4q .. 4q+3: t[4q + k] holds word k (low half) and k + 4 (high) */
        const __m256i a = _mm256_unpacklo_epi32(r[4 * q], r[4 * q + 1]), b = _mm256_unpackhi_epi32(r[4 * q], r[4 * q + 1]);
        const __m256i c = _mm256_unpacklo_epi32(r[4 * q + 2], r[4 * q + 3]), d = _mm256_unpackhi_epi32(r[4 * q + 2], r[4 * q + 3]);
        t[4 * q] = _mm256_unpacklo_epi64(a, c);
        t[4 * q + 1] = _mm256_unpackhi_epi64(a, c);
        t[4 * q + 2] = _mm256_unpacklo_epi64(b, d);
        t[4 * q + 3] = _mm256_unpackhi_epi64(b, d);
    }
    for (int k = 0; k < W && k < 4; k++)
        _mm256_storeu_si256((__m256i *)(void *)(dst + 16 * k), _mm256_permute2x128_si256(t[k], t[4 + k], 0x20));
    for (int k = 4; k < W; k++)
        _mm256_storeu_si256((__m256i *)(void *)(dst + 16 * k), _mm256_permute2x128_si256(t[k - 4], t[k], 0x31));
}

/* By rows: groups [g, g + G) (G ≤ 16) of the scales (p = w->s) or biases
 * (w->b) of rows r0 .. r0+15 (m: those read, the others 0) as floats, group
 * g + k's 16 at dst[16k]. */
AVX2 INLINE void params_to_lanes256(const struct wmat *w, const uint8_t *p, int64_t r0, int64_t g, int G, uint32_t m,
                                    float *dst)
{
    const size_t psize = dtype_table[w->dtype].bits / 8;
    float row[16];
    for (int l = 0; l < 16; l++) {
        if (m >> l & 1)
            dtype_to_f32(w->dtype, p + (size_t)(r0 + l) * w->srow_bytes + (size_t)g * psize, row, (size_t)G);
        for (int k = 0; k < G; k++)
            dst[16 * k + l] = m >> l & 1 ? row[k] : 0.0f;
    }
}

/* By rows: group g of NB sets of 16 rows from r0 (base: each set's first
 * row's words of the group; m: the rows read) into the blocked layout's
 * order at lanes[512b], and the scales and biases of its 16 groups from g
 * (when g starts them) at pl[b]. */
AVX2 INLINE void rows_group256(const struct wmat *w, const uint8_t *const *base, int NB, int64_t r0, int64_t g,
                               uint32_t m, uint32_t *lanes, float (*pl)[2][16][16])
{
    const int wpg = w->gs * w->bits / 32;
    const int64_t ng = w->cols / w->gs;
    for (int b = 0; b < NB; b++) {
        for (int c = 0; c < wpg; c += 8)
            for (int h = 0; h < 2; h++)
                rows_to_lanes256(base[b] + 4 * c + (size_t)(8 * h) * w->row_stride, w->row_stride, m >> 8 * h & 0xFF,
                                 wpg - c < 8 ? wpg - c : 8, lanes + 512 * b + 16 * c + 8 * h);
        if (g % 16 == 0) {
            const int G = ng - g < 16 ? (int)(ng - g) : 16;
            params_to_lanes256(w, w->s, r0 + 16 * b, g, G, m, pl[b][0][0]);
            params_to_lanes256(w, w->b, r0 + 16 * b, g, G, m, pl[b][1][0]);
        }
    }
}

/* Half h of the scales (p = w->s) or biases (w->b) of a set's group, from its
 * record rec (blocked) or from pl (by rows); lanes outside m zero. */
AVX2 INLINE __m256 params8(const struct wmat *w, const uint8_t *p, const uint8_t *rec, const float *pl, int64_t r0,
                           int64_t g, uint32_t m, int h)
{
    if (!w->blocked)
        return _mm256_loadu_ps(pl + 8 * h);
    if (w->dtype == DT_BF16 || w->dtype == DT_F16 || w->dtype == DT_F32)
        return _mm256_and_ps(half_mask256(m, h),
                             f32x8(w->dtype, rec + (p - w->w) + (size_t)(8 * h) * (dtype_table[w->dtype].bits / 8)));
    float v[16];
    kern_params16(w, p, r0, g, m, v);
    return _mm256_loadu_ps(v + 8 * h);
}

/* NB sets of 16 rows from r0, 16 apart (m: the lanes of rows in range), for
 * tokens t0 .. t0+T-1; blocked, r0 starts a block. Per group, the even
 * words' chains, then the odd words', each word's two halves one at a time
 * (AVX2's 16 registers hold 2·NB·T ≤ 8 chains). A and B in memory. */
AVX2 INLINE void arows256(const struct wmat *w, const struct kern_qinput *in, int64_t t0, float *y, int64_t r0,
                          uint32_t m, const int NB, const int T, const int bits)
{
    const int per_word = 32 / bits, wpg = w->gs / per_word;
    const int64_t ng = w->cols / w->gs, stride = in->stride;
    const size_t block = KERN_BLOCK_ROWS * (w->row_bytes + 2 * w->srow_bytes), rec = block / (size_t)ng;
    uint32_t lanes[4 * 32 * 16]; /* by rows: each set's group in the blocked layout, */
    float pl[4][2][16][16];     /* and its scales and biases of 16 groups */
    float A[8][16], Bt[8][16];
    memset(A, 0, sizeof A);
    memset(Bt, 0, sizeof Bt);
    const uint8_t *base[4];
    for (int b = 0; b < NB; b++)
        base[b] = w->blocked ? w->w + (size_t)(r0 / 16 + b) * block : w->w + (size_t)(r0 + 16 * b) * w->row_stride;
    for (int64_t g = 0; g < ng; g++) {
        const float *x = in->xd + t0 * stride + g * w->gs;
        const uint8_t *words[4];
        if (!w->blocked)
            rows_group256(w, base, NB, r0, g, m, lanes, pl);
        for (int b = 0; b < NB; b++)
            words[b] = w->blocked ? base[b] : (const uint8_t *)(lanes + 512 * b);
        /* chain (b, h, u) at (b·2 + h)·T + u, set by its first product: the even words' (then kept in pe), then the odd words' */
        __m256 p[8];
        float pe[8][8];
        for (int n = 0; n < wpg; n++) {
            const int i = n < wpg / 2 ? 2 * n : 2 * (n - wpg / 2) + 1;
            for (int c = 0; n == wpg / 2 && c < 2 * NB * T; c++)
                _mm256_storeu_ps(pe[c], p[c]);
#pragma GCC unroll 8
            for (int c = 0; c < 2 * NB; c++) {
                const __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)(words[c / 2] + 64 * i + 32 * (c % 2)));
#pragma GCC unroll 8
                for (int k = 0; k < per_word; k++) {
                    const __m256 q = code256(v, k, bits, QM_AFFINE);
#pragma GCC unroll 4
                    for (int u = 0; u < T; u++) {
                        const __m256 xb = _mm256_broadcast_ss(x + u * stride + i * per_word + k);
                        p[c * T + u] = i < 2 && k == 0 ? _mm256_mul_ps(xb, q) : _mm256_fmadd_ps(xb, q, p[c * T + u]);
                    }
                }
            }
        }
        for (int b = 0; b < NB; b++) {
            for (int h = 0; h < 2; h++) {
                const __m256 sc = params8(w, w->s, base[b], pl[b][0][g % 16], r0 + 16 * b, g, m, h);
                const __m256 bi = params8(w, w->b, base[b], pl[b][1][g % 16], r0 + 16 * b, g, m, h);
                for (int u = 0; u < T; u++) {
                    const int c = (b * 2 + h) * T + u;
                    float *a = A[b * T + u] + 8 * h, *bt = Bt[b * T + u] + 8 * h;
                    _mm256_storeu_ps(a, _mm256_fmadd_ps(_mm256_add_ps(_mm256_loadu_ps(pe[c]), p[c]), sc, _mm256_loadu_ps(a)));
                    _mm256_storeu_ps(bt, _mm256_fmadd_ps(bi, _mm256_set1_ps(in->xsum[(t0 + u) * ng + g]), _mm256_loadu_ps(bt)));
                }
            }
            base[b] += w->blocked ? rec : (size_t)(4 * wpg);
        }
    }
    for (int b = 0; b < NB; b++)
        for (int u = 0; u < T; u++)
            for (int h = 0; h < 2; h++)
                _mm256_maskstore_ps(y + (t0 + u) * w->rows + r0 + 16 * b + 8 * h, _mm256_castps_si256(half_mask256(m, h)),
                                    _mm256_add_ps(_mm256_loadu_ps(A[b * T + u] + 8 * h), _mm256_loadu_ps(Bt[b * T + u] + 8 * h)));
}

/* Words i (even) and i + 1 (odd) of a set's group (c: the group's record;
 * x: its input) into the even and odd chains of both halves, e[h] and o[h]
 * (`first`: words 0 and 1, which start them). The masks of the codes come
 * from memory, 7 registers freed: GCC held them and kept the chains on the
 * stack. */
AVX2 INLINE void apair256(const uint8_t *c, const float *x, int i, __m256 *e, __m256 *o, const bool first,
                          const int bits)
{
    static const uint32_t masks[8][8] __attribute__((aligned(32))) = {
#define M8(k) {(k), (k), (k), (k), (k), (k), (k), (k)}
        M8(0xFu), M8(0xF0u), M8(0xF00u), M8(0xF000u), M8(0xF0000u), M8(0xF00000u), M8(0xF000000u), M8(0xFFu)};
#undef M8
    const int per_word = 32 / bits;
    const uint32_t(*M)[8] = masks;
    __asm__("" : "+r"(M)); /* opaque: each mask loaded where it is used */
    _mm_prefetch((const char *)c + 64 * i + PREFETCH, _MM_HINT_T0);
    _mm_prefetch((const char *)c + 64 * i + 64 + PREFETCH, _MM_HINT_T0);
    __m256i ve[2], vo[2];
    for (int h = 0; h < 2; h++) {
        ve[h] = _mm256_loadu_si256((const __m256i *)(const void *)(c + 64 * i + 32 * h));
        vo[h] = _mm256_loadu_si256((const __m256i *)(const void *)(c + 64 * i + 64 + 32 * h));
    }
#pragma GCC unroll 8
    for (int k = 0; k < per_word; k++) {
        const __m256 xe = _mm256_broadcast_ss(x + i * per_word + k), xo = _mm256_broadcast_ss(x + (i + 1) * per_word + k);
        const __m256i mk = k == per_word - 1 ? _mm256_setzero_si256()
                           : bits == 4       ? _mm256_load_si256((const __m256i *)(const void *)M[k])
                                             : _mm256_slli_epi32(_mm256_load_si256((const __m256i *)(const void *)M[7]), 8 * k);
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            const __m256 qe = acode256(ve[h], k, bits, mk), qo = acode256(vo[h], k, bits, mk);
            e[h] = first && k == 0 ? _mm256_mul_ps(xe, qe) : _mm256_fmadd_ps(xe, qe, e[h]);
            o[h] = first && k == 0 ? _mm256_mul_ps(xo, qo) : _mm256_fmadd_ps(xo, qo, o[h]);
        }
    }
}

/* Token t, one blocked set of 16 rows at r0 (m: the rows stored): per
 * group the even and the odd words' chains side by side, each word's two
 * halves; A and B in registers; its words prefetched PREFETCH ahead.
 * arows256's operations on 4 chains in place of its 8 (NB = 4), whose
 * masks, chains and A took more than the 16 registers: the kernel alone from
 * RAM, alternated in one process, E (Zen 4) 1.5-1.8x at 1 thread, X16 1.3-1.7x
 * at 1-4 (without the prefetch 0.7-1.0x there). */
AVX2 INLINE void aset256(const struct wmat *w, const struct kern_qinput *in, int64_t t, float *y, int64_t r0, uint32_t m,
                         const int bits)
{
    const int wpg = w->gs * bits / 32;
    const int64_t ng = w->cols / w->gs;
    const size_t block = KERN_BLOCK_ROWS * (w->row_bytes + 2 * w->srow_bytes), rec = block / (size_t)ng;
    const uint8_t *c = w->w + (size_t)(r0 / 16) * block;
    const size_t so = (size_t)(w->s - w->w), bo = (size_t)(w->b - w->w), psize = dtype_table[w->dtype].bits / 8;
    __m256 A[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()}, B[2] = {A[0], A[0]};
    for (int64_t g = 0; g < ng; g++, c += rec) {
        const float *x = in->xd + t * in->stride + g * w->gs;
        __m256 e[2], o[2];
        apair256(c, x, 0, e, o, true, bits);
        for (int i = 2; i < wpg; i += 2)
            apair256(c, x, i, e, o, false, bits);
        const __m256 xs = _mm256_set1_ps(in->xsum[t * ng + g]);
        for (int h = 0; h < 2; h++) {
            const __m256 sc = f32x8(w->dtype, c + so + 8 * h * psize), bi = f32x8(w->dtype, c + bo + 8 * h * psize);
            A[h] = _mm256_fmadd_ps(_mm256_add_ps(e[h], o[h]), sc, A[h]);
            B[h] = _mm256_fmadd_ps(bi, xs, B[h]);
        }
    }
    for (int h = 0; h < 2; h++)
        _mm256_maskstore_ps(y + t * w->rows + r0 + 8 * h, _mm256_castps_si256(half_mask256(m, h)), _mm256_add_ps(A[h], B[h]));
}

/* Rows [row0, row1) for tokens t0 .. t0+T-1: whole sets of 16 rows 4/T at a
 * time, a partial set (a blocked matrix's first, the last) alone. */
AVX2 INLINE void arange256(const struct wmat *w, const struct kern_qinput *in, int64_t t0, float *y, int64_t row0,
                           int64_t row1, const int T, const int bits)
{
    const int NB = T == 1 ? 4 : T == 2 ? 2 : 1;
    int64_t r = w->blocked ? row0 / 16 * 16 : row0;
    if (T == 1 && w->blocked && (w->dtype == DT_BF16 || w->dtype == DT_F16 || w->dtype == DT_F32)) {
        for (; r < row1; r += 16)
            aset256(w, in, t0, y, r, kern_rows_mask(r, row0, row1), bits);
        return;
    }
    if (r < row0) {
        arows256(w, in, t0, y, r, kern_rows_mask(r, row0, row1), 1, T, bits);
        r += 16;
    }
    for (; r + 16 * NB <= row1; r += 16 * NB)
        arows256(w, in, t0, y, r, 0xFFFF, NB, T, bits);
    for (; r < row1; r += 16)
        arows256(w, in, t0, y, r, kern_rows_mask(r, row0, row1), 1, T, bits);
}

AVX2 INLINE void adot256(const struct wmat *w, const struct kern_qinput *in, int64_t n, float *y, int64_t row0,
                         int64_t row1, const int bits)
{
    for (int64_t t0 = 0; t0 < n; t0 += 4)
        switch (n - t0 < 4 ? n - t0 : 4) {
        case 1: arange256(w, in, t0, y, row0, row1, 1, bits); break;
        case 2: arange256(w, in, t0, y, row0, row1, 2, bits); break;
        case 3: arange256(w, in, t0, y, row0, row1, 3, bits); break;
        default: arange256(w, in, t0, y, row0, row1, 4, bits); break;
        }
}

AVX2 void kern_qdot_avx2(const struct wmat *w, const struct kern_qinput *in, int64_t n, float *y, int64_t row0,
                         int64_t row1)
{
    if (kern_gtype_of(w->mode)) {
        kern_gdot_avx2(w, in, n, y, row0, row1);
        return;
    }
    if (w->mode != QM_AFFINE) {
        MX_TOKENS_DISPATCH(qrows256m)
    } else if (w->bits == 4) {
        adot256(w, in, n, y, row0, row1, 4);
    } else {
        adot256(w, in, n, y, row0, row1, 8);
    }
}

/* ---- affine 4/8-bit as a blocked GEMM: avx512.c's on 8 lanes (kern_agemm_tile) ----
 *
 * The same workspace (codes [set, column, 16], scales and biases [set,
 * group, 16], A [panel, set, AGEMM_T, 16]) and the same operations per
 * (row, token): a set's two halves × AGEMM_H2 tokens of one chain in
 * registers, the even words' chain over the group first (kept in memory),
 * then the odd words', the two added and folded into A with the scale. */

#define AGEMM_H2 6 /* tokens at a time: 2 halves × 6 = 12 chains of AVX2's 16 registers */

/* Chain c (0: even words, 1: odd) of a set's group (q: [gs, 16]) for
 * AGEMM_H2 tokens (xg: the group's input, [gs, AGEMM_T]) into p[half][u]:
 * its t-th column is word 2·(t / per_word) + c's code t % per_word. */
AVX2 INLINE void agemm_col256(const float *q, const float *xg, int j, __m256 (*p)[AGEMM_H2], const bool first)
{
    const __m256 v0 = _mm256_load_ps(q + 16 * j), v1 = _mm256_load_ps(q + 16 * j + 8);
#pragma GCC unroll 6
    for (int u = 0; u < AGEMM_H2; u++) {
        const __m256 xb = _mm256_broadcast_ss(xg + j * AGEMM_T + u);
        p[0][u] = first ? _mm256_mul_ps(xb, v0) : _mm256_fmadd_ps(xb, v0, p[0][u]);
        p[1][u] = first ? _mm256_mul_ps(xb, v1) : _mm256_fmadd_ps(xb, v1, p[1][u]);
    }
}

AVX2 INLINE void agemm_chain256(const float *q, const float *xg, int gs, int c, __m256 (*p)[AGEMM_H2],
                                const int per_word)
{
    const int j0 = c * per_word;
#pragma GCC unroll 8
    for (int k = 0; k < per_word; k++)
        agemm_col256(q, xg, j0 + k, p, k == 0);
    for (int i = 2 * per_word; i < gs; i += 2 * per_word)
#pragma GCC unroll 8
        for (int k = 0; k < per_word; k++)
            agemm_col256(q, xg, i + j0 + k, p, false);
}

/* One set (codes q: [ng·gs, 16]; scales st: [ng, 16]) × AGEMM_T tokens
 * (x: [ng·gs, AGEMM_T]) folded into A ([AGEMM_T, 16]). */
AVX2 INLINE void agemm_block256(const float *q, const float *x, const float *st, int64_t ng, int gs, float *A,
                                const int per_word)
{
    for (int64_t g = 0; g < ng; g++) {
        const float *qg = q + g * gs * 16;
        const __m256 sc[2] = {_mm256_load_ps(st + 16 * g), _mm256_load_ps(st + 16 * g + 8)};
        for (int h = 0; h < AGEMM_T; h += AGEMM_H2) {
            const float *xg = x + g * gs * AGEMM_T + h;
            __m256 p[2][AGEMM_H2];
            float pe[2][AGEMM_H2][8] __attribute__((aligned(32)));
            agemm_chain256(qg, xg, gs, 0, p, per_word);
            for (int l = 0; l < 2; l++)
                for (int u = 0; u < AGEMM_H2; u++)
                    _mm256_store_ps(pe[l][u], p[l][u]);
            agemm_chain256(qg, xg, gs, 1, p, per_word);
            for (int l = 0; l < 2; l++)
                for (int u = 0; u < AGEMM_H2; u++) {
                    float *a = A + (h + u) * 16 + 8 * l;
                    _mm256_store_ps(a, _mm256_fmadd_ps(_mm256_add_ps(_mm256_load_ps(pe[l][u]), p[l][u]), sc[l],
                                                       _mm256_load_ps(a)));
                }
        }
    }
}

/* The block on its own for each width (one set: qs and ss unused). */
__attribute__((noinline)) AVX2 static void agemm_block_b4_256(const float *q, int64_t qs, const float *x, const float *st,
                                                              int64_t ss, int64_t ng, int gs, float *A)
{
    (void)qs, (void)ss;
    agemm_block256(q, x, st, ng, gs, A, 8);
}

__attribute__((noinline)) AVX2 static void agemm_block_b8_256(const float *q, int64_t qs, const float *x, const float *st,
                                                              int64_t ss, int64_t ng, int gs, float *A)
{
    (void)qs, (void)ss;
    agemm_block256(q, x, st, ng, gs, A, 4);
}

/* agemm_decode512 on two halves: groups [g0, g1) of rows r0 .. r0+15 (m:
 * those in the tile) into qt [(g1 − g0)·gs, 16], scales into st and biases
 * into bt [groups, 16] (at group g); zeros for the others. */
AVX2 INLINE void agemm_decode256(const struct wmat *w, int64_t r0, uint32_t m, int64_t g0, int64_t g1, float *qt,
                                 float *st, float *bt, const int bits)
{
    const int per_word = 32 / bits, wpg = w->gs / per_word;
    uint32_t lanes[32 * 16] __attribute__((aligned(32))); /* by rows: the group in the blocked layout */
    for (int64_t g = g0; g < g1; g++) {
        const uint8_t *base = !m ? NULL
                              : w->blocked ? w->w + kern_block_off(w, r0 / 16, g)
                                           : w->w + (size_t)r0 * w->row_stride + (size_t)(4 * g * wpg);
        for (int c = 0; m && !w->blocked && c < wpg; c += 8)
            for (int h = 0; h < 2; h++)
                rows_to_lanes256(base + 4 * c + (size_t)(8 * h) * w->row_stride, w->row_stride, m >> 8 * h & 0xFF,
                                 wpg - c < 8 ? wpg - c : 8, lanes + 16 * c + 8 * h);
        for (int i = 0; i < wpg; i++)
            for (int h = 0; h < 2; h++) {
                const __m256i v = !m ? _mm256_setzero_si256()
                                  : w->blocked ? _mm256_maskload_epi32((const int *)(const void *)(base + 64 * i + 32 * h),
                                                                       _mm256_castps_si256(half_mask256(m, h)))
                                               : _mm256_load_si256((const __m256i *)(const void *)(lanes + 16 * i + 8 * h));
#pragma GCC unroll 8
                for (int k = 0; k < per_word; k++)
                    _mm256_store_ps(qt + ((g - g0) * w->gs + i * per_word + k) * 16 + 8 * h, code256(v, k, bits, QM_AFFINE));
            }
        if (w->blocked || !m) {
            for (int h = 0; h < 2; h++) {
                _mm256_store_ps(st + 16 * g + 8 * h, m ? params8(w, w->s, base, NULL, r0, g, m, h) : _mm256_setzero_ps());
                _mm256_store_ps(bt + 16 * g + 8 * h, m ? params8(w, w->b, base, NULL, r0, g, m, h) : _mm256_setzero_ps());
            }
        } else if ((g - g0) % 16 == 0) {
            params_to_lanes256(w, w->s, r0, g, g1 - g < 16 ? (int)(g1 - g) : 16, m, st + 16 * g);
            params_to_lanes256(w, w->b, r0, g, g1 - g < 16 ? (int)(g1 - g) : 16, m, bt + 16 * g);
        }
    }
}

AVX2 static void agemm_decode_b4_256(const struct wmat *w, int64_t r0, uint32_t m, int64_t g0, int64_t g1, float *qt,
                                     float *st, float *bt)
{
    agemm_decode256(w, r0, m, g0, g1, qt, st, bt, 4);
}

AVX2 static void agemm_decode_b8_256(const struct wmat *w, int64_t r0, uint32_t m, int64_t g0, int64_t g1, float *qt,
                                     float *st, float *bt)
{
    agemm_decode256(w, r0, m, g0, g1, qt, st, bt, 8);
}

/* A set's outputs: 4 tokens' bias chains side by side, then A + B. */
AVX2 static void agemm_finish256(const struct wmat *w, const struct kern_qinput *in, const float *bt, const float *A,
                                 int64_t t0, int tp, int64_t r, uint32_t m, float *y)
{
    const int64_t ng = w->cols / w->gs;
    for (int u0 = 0; u0 < tp; u0 += 4) {
        const int nu = tp - u0 < 4 ? tp - u0 : 4;
        const float *xs = in->xsum + (t0 + u0) * ng;
        __m256 b[4][2];
        for (int k = 0; k < 8; k++)
            b[k / 2][k % 2] = _mm256_setzero_ps();
        for (int64_t g = 0; g < ng; g++) {
            const __m256 b0 = _mm256_load_ps(bt + g * 16), b1 = _mm256_load_ps(bt + g * 16 + 8);
#pragma GCC unroll 4
            for (int u = 0; u < 4; u++) {
                const __m256 xb = _mm256_set1_ps(xs[(u < nu ? u : 0) * ng + g]);
                b[u][0] = _mm256_fmadd_ps(b0, xb, b[u][0]);
                b[u][1] = _mm256_fmadd_ps(b1, xb, b[u][1]);
            }
        }
        for (int u = 0; u < nu; u++)
            for (int h = 0; h < 2; h++)
                _mm256_maskstore_ps(y + (t0 + u0 + u) * w->rows + r + 8 * h, _mm256_castps_si256(half_mask256(m, h)),
                                    _mm256_add_ps(_mm256_load_ps(A + (u0 + u) * 16 + 8 * h), b[u][h]));
    }
}

static const struct kern_agemm_isa agemm_b4_256 = {agemm_decode_b4_256, agemm_block_b4_256, agemm_finish256, 1},
                                   agemm_b8_256 = {agemm_decode_b8_256, agemm_block_b8_256, agemm_finish256, 1};

/* ---- microscaling as a blocked GEMM: qgemm512m of avx512.c on two halves of 8 lanes ----
 *
 * The same workspace (kern_qgemm_ws_bytes): a row's codes decoded once into
 * floats, rows in pairs (code k of a block's 16 words, lanes 0-15, row i of
 * the pair at slot 2k + i), the lane scales beside them; the input prepared
 * for the GEMM (tokens in fours). For each panel of GEMM_TP tokens and chunk
 * of GEMM_KC columns, 2 rows × 2 tokens × one half at a time (their 8
 * chains in registers, the A lanes in the workspace). Every (row, token)
 * goes through the operations of qrows256m in the same order. */
/* Row r's codes into its pair's tile (qp: the pair's first float, the row's
 * slot i) and its lane scales (sv[blocks·16]); sc: scratch of ng16 + 16 floats. */
AVX2 INLINE void mgemm_decode256(const struct wmat *w, int64_t r, int64_t stride, float *qp, int i, float *sv,
                                 float *sc, const int gs, const int bits, const int mode)
{
    const int per_word = 32 / bits, blk = 16 * per_word;
    const int64_t ng = w->cols / gs, words = w->cols / per_word, ng16 = (ng + 15) / 16 * 16;
    const uint8_t *codes = w->w + (size_t)r * w->row_stride, *sr = w->s + (size_t)r * w->srow_bytes;
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i gidx[2] = {_mm256_setr_epi32(GROUP_OF_LANE(0), GROUP_OF_LANE(1), GROUP_OF_LANE(2), GROUP_OF_LANE(3),
                                               GROUP_OF_LANE(4), GROUP_OF_LANE(5), GROUP_OF_LANE(6), GROUP_OF_LANE(7)),
                             _mm256_setr_epi32(GROUP_OF_LANE(8), GROUP_OF_LANE(9), GROUP_OF_LANE(10), GROUP_OF_LANE(11),
                                               GROUP_OF_LANE(12), GROUP_OF_LANE(13), GROUP_OF_LANE(14), GROUP_OF_LANE(15))};
    memset(sc, 0, (size_t)(ng16 + 16) * sizeof *sc);
    kern_mx_scales((enum qmode)mode, sr, sc, ng);
    for (int64_t b = 0; b * blk < stride; b++) {
        const __m256 s8 = _mm256_loadu_ps(sc + b * blk / gs); /* zero past ng: the lanes past the row's words */
        for (int h = 0; h < 2; h++) {
            const int64_t left = words - 16 * b - 8 * h;
            const __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(left < 8 ? left : 8)), lane);
            const __m256i v = _mm256_maskload_epi32((const int *)(const void *)(codes + (b * blk + 8 * h * per_word) * bits / 8), m);
#pragma GCC unroll 8
            for (int k = 0; k < per_word; k++)
                _mm256_store_ps(qp + 2 * b * blk + (2 * k + i) * 16 + 8 * h, code256(v, k, bits, mode));
            _mm256_store_ps(sv + 16 * b + 8 * h, _mm256_permutevar8x32_ps(s8, gidx[h]));
        }
    }
}

/* Blocks [b0, b1) for R rows of a pair (qp: the pair's tile) and T tokens of
 * a four (xp: the four's copy, token u at slot u), lanes 8h .. 8h + 7: per
 * block the definition's two chains, then its step into the A lanes (row i,
 * token u at acc + i·accstride + 16u). */
AVX2 INLINE void mgemm_piece256(const float *qp, const float *sv, int64_t svstride, const float *xp, int64_t b0,
                                int64_t b1, float *acc, int64_t accstride, const int R, const int T, const int bits)
{
    const int per_word = 32 / bits, blk = 16 * per_word;
    for (int h = 0; h < 16; h += 8)
        for (int64_t b = b0; b < b1; b++) {
            const float *q = qp + 2 * b * blk + h, *x = xp + 4 * b * blk + h;
            __m256 p0[2][2], p1[2][2]; /* the definition's two chains: even and odd codes */
#pragma GCC unroll 8
            for (int k = 0; k < per_word; k += 2) {
                __m256 q0[2], q1[2];
#pragma GCC unroll 2
                for (int i = 0; i < R; i++) {
                    q0[i] = _mm256_load_ps(q + (2 * k + i) * 16);
                    q1[i] = _mm256_load_ps(q + (2 * k + 2 + i) * 16);
                }
#pragma GCC unroll 2
                for (int u = 0; u < T; u++) {
                    const __m256 x0 = _mm256_load_ps(x + (4 * k + u) * 16), x1 = _mm256_load_ps(x + (4 * k + 4 + u) * 16);
#pragma GCC unroll 2
                    for (int i = 0; i < R; i++) {
                        p0[i][u] = k == 0 ? _mm256_mul_ps(x0, q0[i]) : _mm256_fmadd_ps(x0, q0[i], p0[i][u]);
                        p1[i][u] = k == 0 ? _mm256_mul_ps(x1, q1[i]) : _mm256_fmadd_ps(x1, q1[i], p1[i][u]);
                    }
                }
            }
#pragma GCC unroll 2
            for (int i = 0; i < R; i++) {
                const __m256 s = _mm256_load_ps(sv + i * svstride + 16 * b + h);
#pragma GCC unroll 2
                for (int u = 0; u < T; u++) {
                    float *a = acc + i * accstride + 16 * u + h;
                    _mm256_store_ps(a, _mm256_fmadd_ps(_mm256_add_ps(p0[i][u], p1[i][u]), s, _mm256_load_ps(a)));
                }
            }
        }
}

#define MGEMM_PIECE256(R, T) mgemm_piece256(qp, svr, svs, xq, b0, b1, ar, GEMM_TP * 16, R, T, bits)

AVX2 INLINE void qgemm256m(const struct wmat *w, const struct kern_qinput *in, int64_t n, float *y, int64_t row0,
                           int64_t row1, float *ws, const int gs, const int bits, const int mode)
{
    const int per_word = 32 / bits, blk = 16 * per_word;
    const int64_t rows = row1 - row0, stride = in->stride, blocks = stride / blk, svs = 16 * blocks;
    float *qf = ws, *sv = qf + (rows + 1) / 2 * 2 * stride, *acc = sv + rows * svs;
    float *sc = acc + rows * GEMM_TP * 16;
    for (int64_t r = 0; r < rows; r++)
        mgemm_decode256(w, row0 + r, stride, qf + r / 2 * 2 * stride, (int)(r % 2), sv + r * svs, sc, gs, bits, mode);
    for (int64_t t0 = 0; t0 < n; t0 += GEMM_TP) {
        const int64_t tp = n - t0 < GEMM_TP ? n - t0 : GEMM_TP;
        memset(acc, 0, (size_t)(rows * GEMM_TP * 16) * sizeof *acc);
        for (int64_t b0 = 0; b0 < blocks; b0 += GEMM_KC / blk) {
            const int64_t b1 = b0 + GEMM_KC / blk < blocks ? b0 + GEMM_KC / blk : blocks;
            for (int64_t r = 0; r < rows; r += 2)
                for (int64_t u = 0; u < tp; u += 2) { /* a four's tokens 0-1, then 2-3 */
                    const float *qp = qf + r * stride, *svr = sv + r * svs;
                    const float *xq = in->xd + (t0 + u) / 4 * 4 * stride + (t0 + u) % 4 * 16;
                    float *ar = acc + (r * GEMM_TP + u) * 16;
                    switch ((rows - r >= 2 ? 2 : 1) * 2 + (tp - u >= 2 ? 2 : 1)) {
                    case 6: MGEMM_PIECE256(2, 2); break;
                    case 5: MGEMM_PIECE256(2, 1); break;
                    case 4: MGEMM_PIECE256(1, 2); break;
                    default: MGEMM_PIECE256(1, 1); break;
                    }
                }
        }
        const __m256 zero = _mm256_setzero_ps(); /* + 0: kern_qdot_ref's bias lanes */
        for (int64_t r = 0; r < rows; r++)
            for (int64_t u = 0; u < tp; u++) {
                const float *a = acc + (r * GEMM_TP + u) * 16;
                y[(t0 + u) * w->rows + row0 + r] =
                    hsum256(_mm256_add_ps(_mm256_add_ps(_mm256_load_ps(a), zero), _mm256_add_ps(_mm256_load_ps(a + 8), zero)));
            }
    }
}

AVX2 void kern_qgemm_avx2(const struct wmat *w, const struct kern_qinput *in, int64_t n, float *y, int64_t row0,
                          int64_t row1, void *ws)
{
    switch (w->mode == QM_AFFINE ? w->bits : -(int)w->mode) {
    case 4: kern_agemm_tile(&agemm_b4_256, w, in, n, y, row0, row1, ws); break;
    case 8: kern_agemm_tile(&agemm_b8_256, w, in, n, y, row0, row1, ws); break;
    case -QM_MXFP4: qgemm256m(w, in, n, y, row0, row1, ws, 32, 4, QM_MXFP4); break;
    case -QM_NVFP4: qgemm256m(w, in, n, y, row0, row1, ws, 16, 4, QM_NVFP4); break;
    default: qgemm256m(w, in, n, y, row0, row1, ws, 32, 8, QM_MXFP8); break;
    }
}

/* Columns [j, j + 16) of each token into chain c (lanes 0-7 in acc[u][c][0]):
 * `cols - j` of them present. */
AVX2 INLINE void bf16_step256(const uint8_t *row, const float *x, int64_t cols, int64_t t0, int tb, int64_t j,
                              __m256 (*acc)[2][2], int c)
{
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    for (int h = 0; h < 2; h++) {
        const int64_t k = j + 8 * h, left = cols - k;
        __m256 wv;
        if (left >= 8) {
            __m128i b = _mm_loadu_si128((const __m128i *)(const void *)(row + 2 * k));
            wv = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(b), 16));
        } else {
            float tail[8] = {0};
            for (int64_t i = 0; i < left; i++)
                tail[i] = bf16_to_f32(rd_u16le(row + 2 * (k + i)));
            wv = _mm256_loadu_ps(tail);
        }
        const __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(left < 8 ? left : 8)), lane);
        for (int u = 0; u < tb; u++)
            acc[u][c][h] = _mm256_fmadd_ps(_mm256_maskload_ps(x + (t0 + u) * cols + k, m), wv, acc[u][c][h]);
    }
}

/* kern_matvec_bf16_ref's two chains of 16 lanes, two tokens at a time (the
 * accumulators of more would not fit the 16 registers). */
AVX2 INLINE void bf16rows256(const struct wmat *w, const float *x, int64_t t0, int tb, float *y, int64_t row0,
                             int64_t row1)
{
    const int64_t cols = w->cols;
    for (int64_t r = row0; r < row1; r++) {
        const uint8_t *row = w->w + (size_t)r * w->row_stride;
        __m256 acc[2][2][2];
        for (int u = 0; u < tb; u++)
            acc[u][0][0] = acc[u][0][1] = acc[u][1][0] = acc[u][1][1] = _mm256_setzero_ps();
        for (int64_t j = 0; j < cols; j += 16)
            bf16_step256(row, x, cols, t0, tb, j, acc, (int)(j / 16 % 2));
        for (int u = 0; u < tb; u++)
            y[(t0 + u) * w->rows + r] = hsum256(_mm256_add_ps(_mm256_add_ps(acc[u][0][0], acc[u][1][0]),
                                                              _mm256_add_ps(acc[u][0][1], acc[u][1][1])));
    }
}

AVX2 void kern_matvec_bf16_avx2(const struct wmat *w, const float *x, int64_t n, float *y, int64_t row0, int64_t row1)
{
    for (int64_t t0 = 0; t0 < n; t0 += 2)
        bf16rows256(w, x, t0, n - t0 < 2 ? 1 : 2, y, row0, row1);
}

/* ---- kern_matvec_bf16_ref as a blocked GEMM: avx512.c's on 8 lanes ----
 *
 * The tile's rows are converted once into floats (zeros up to a whole 32
 * columns); then, for each panel of GEMM_TP tokens and each chunk of
 * GEMM_KC columns, R rows × T tokens at a time, one quarter of their two
 * chains (chain o / 16, lanes o % 16 .. + 7: columns j + o of every 32) in
 * registers and in the workspace (kern_bf16gemm_ws_bytes, avx512.c's
 * layout) between quarters and chunks. Every (row, token) goes through the
 * FMAs of bf16rows256 in the same order. */
/* Columns [j0, j1) (whole 32s) for R rows (q: the first row's floats, qs
 * apart) and T tokens (x: the first token's input, xs apart); the chains of
 * row i, token u at acc + (i·GEMM_TP + u)·32. */
AVX2 INLINE void bgemm_piece256(const float *q, int64_t qs, const float *x, int64_t xs, int64_t j0, int64_t j1,
                                float *acc, const int R, const int T)
{
    for (int o = 0; o < 32; o += 8) {
        __m256 c[12]; /* row i, token u at c[i·T + u] */
#pragma GCC unroll 12
        for (int k = 0; k < R * T; k++)
            c[k] = _mm256_load_ps(acc + (k / T * GEMM_TP + k % T) * 32 + o);
        for (int64_t j = j0 + o; j < j1; j += 32) {
            __m256 qv[3];
#pragma GCC unroll 3
            for (int i = 0; i < R; i++)
                qv[i] = _mm256_load_ps(q + i * qs + j);
#pragma GCC unroll 4
            for (int u = 0; u < T; u++) {
                const __m256 xv = _mm256_loadu_ps(x + u * xs + j);
#pragma GCC unroll 3
                for (int i = 0; i < R; i++)
                    c[i * T + u] = _mm256_fmadd_ps(xv, qv[i], c[i * T + u]);
            }
        }
#pragma GCC unroll 12
        for (int k = 0; k < R * T; k++)
            _mm256_store_ps(acc + (k / T * GEMM_TP + k % T) * 32 + o, c[k]);
    }
}

#define BGEMM_PIECE256(R, T) bgemm_piece256(qr, cols32, xr, cols, j0, j1, ar, R, T)

AVX2 void kern_bf16gemm_avx2(const struct wmat *w, const float *x, int64_t n, float *y, int64_t row0, int64_t row1,
                             void *ws)
{
    const int64_t rows = row1 - row0, cols = w->cols, cols32 = (cols + 31) / 32 * 32, full = cols / 32 * 32;
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    float *qf = ws, *acc = qf + rows * cols32;
    for (int64_t r = 0; r < rows; r++) {
        const uint8_t *src = w->w + (size_t)(row0 + r) * w->row_stride;
        float *dst = qf + r * cols32;
        int64_t j = 0;
        for (; j + 8 <= cols; j += 8)
            _mm256_store_ps(dst + j, f32x8(DT_BF16, src + 2 * j));
        for (; j < cols32; j++)
            dst[j] = j < cols ? bf16_to_f32(rd_u16le(src + 2 * j)) : 0.0f;
    }
    for (int64_t t0 = 0; t0 < n; t0 += GEMM_TP) {
        const int64_t tp = n - t0 < GEMM_TP ? n - t0 : GEMM_TP;
        memset(acc, 0, (size_t)(rows * GEMM_TP * 32) * sizeof *acc);
        BGEMM_CHUNKS(BGEMM_PIECE256)
        for (int64_t r = 0; r < rows; r++) /* the columns past the last 32, then the chains added and summed */
            for (int64_t u = 0; u < tp; u++) {
                float *a = acc + (r * GEMM_TP + u) * 32;
                const float *xu = x + (t0 + u) * cols, *qr = qf + r * cols32;
                __m256 c[2][2] = {{_mm256_load_ps(a), _mm256_load_ps(a + 8)}, {_mm256_load_ps(a + 16), _mm256_load_ps(a + 24)}};
                for (int64_t j = full; j < cols; j += 8) {
                    const int64_t left = cols - j < 8 ? cols - j : 8;
                    const __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)left), lane);
                    __m256 *ch = &c[(j - full) / 16][(j - full) / 8 % 2];
                    *ch = _mm256_fmadd_ps(_mm256_maskload_ps(xu + j, m), _mm256_load_ps(qr + j), *ch);
                }
                y[(t0 + u) * w->rows + row0 + r] = hsum256(_mm256_add_ps(_mm256_add_ps(c[0][0], c[1][0]),
                                                                         _mm256_add_ps(c[0][1], c[1][1])));
            }
    }
}

/* ---- kern_matmul_ref for every other weight type (kern_refgemm_avx512's scheme) ----
 *
 * Lane i of the two halves (lo: rows r0..r0 + 7, hi: r0 + 8..r0 + 15) holds
 * row r0 + i; per column each token's product rounded, then added, in column
 * order: kern_matmul_ref's bits. 2 halves × 6 tokens = 12 chains of AVX2's
 * 16 registers. */
#define REF_TOKENS256 6 /* KERN_TOKENS6 */

AVX2 INLINE void refgemm_rows256(const float *wt, const float *x, int64_t cols, int64_t t0, const int T, float *y,
                                 int64_t ldy, int64_t r0, int64_t nr)
{
    __m256 lo[REF_TOKENS256], hi[REF_TOKENS256];
#pragma GCC unroll 6
    for (int u = 0; u < T; u++)
        lo[u] = hi[u] = _mm256_setzero_ps();
    for (int64_t j = 0; j < cols; j++) {
        const __m256 wl = _mm256_load_ps(wt + 16 * j), wh = _mm256_load_ps(wt + 16 * j + 8);
#pragma GCC unroll 6
        for (int u = 0; u < T; u++) {
            const __m256 xv = _mm256_broadcast_ss(x + (t0 + u) * cols + j);
            lo[u] = _mm256_add_ps(lo[u], _mm256_mul_ps(xv, wl));
            hi[u] = _mm256_add_ps(hi[u], _mm256_mul_ps(xv, wh));
        }
    }
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i ml = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)nr), lane);
    const __m256i mh = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)nr - 8), lane);
#pragma GCC unroll 6
    for (int u = 0; u < T; u++) {
        _mm256_maskstore_ps(y + (t0 + u) * ldy + r0, ml, lo[u]);
        _mm256_maskstore_ps(y + (t0 + u) * ldy + r0 + 8, mh, hi[u]);
    }
}

/* refgemm_block512 of avx512.c on two halves: rows 0-7 of a word's line, then 8-15. */
AVX2 INLINE void refgemm_block256(const struct wmat *w, int64_t r0, float *wt, const float *x, float *y, const int bits,
                                  const bool one)
{
    const __m256i mask = _mm256_set1_epi32((int)((1u << bits) - 1));
    const size_t rec_bytes = KERN_BLOCK_ROWS * (w->row_bytes + 2 * w->srow_bytes) / (size_t)(w->cols / w->gs);
    __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int64_t g = 0; g < w->cols / w->gs; g++) {
        const uint8_t *rec = w->w + kern_block_off(w, r0 / KERN_BLOCK_ROWS, g);
        for (size_t o = 0; o < rec_bytes; o += 64)
            _mm_prefetch((const char *)(rec + PREFETCH + o), _MM_HINT_T0);
        const float *pl = (const float *)(const void *)rec; /* not read: blocked (GCC cannot tell, and warns of NULL) */
        const __m256 sc[2] = {params8(w, w->s, rec, pl, r0, g, 0xFFFF, 0), params8(w, w->s, rec, pl, r0, g, 0xFFFF, 1)};
        const __m256 bi[2] = {params8(w, w->b, rec, pl, r0, g, 0xFFFF, 0), params8(w, w->b, rec, pl, r0, g, 0xFFFF, 1)};
        for (int p = 0; p < w->gs / 32; p++) {
            const uint8_t *words = rec + 64 * bits * p;
            const int64_t j = g * w->gs + 32 * p;
#pragma GCC unroll 32
            for (int c = 0; c < 32; c++) {
                const int k = c * bits / 32, sh = c * bits % 32;
                for (int h = 0; h < 2; h++) {
                    const __m256i *line = (const __m256i *)(const void *)(words + 64 * k + 32 * h);
                    __m256i v = _mm256_srli_epi32(_mm256_loadu_si256(line), sh);
                    if (sh + bits > 32)
                        v = _mm256_or_si256(v, _mm256_slli_epi32(_mm256_loadu_si256(line + 2), 32 - sh));
                    const __m256 wv =
                        _mm256_add_ps(_mm256_mul_ps(sc[h], _mm256_cvtepi32_ps(_mm256_and_si256(v, mask))), bi[h]);
                    if (one)
                        acc[h] = _mm256_add_ps(acc[h], _mm256_mul_ps(_mm256_set1_ps(x[j + c]), wv));
                    else
                        _mm256_store_ps(wt + 16 * (j + c) + 8 * h, wv);
                }
            }
        }
    }
    if (one) {
        _mm256_storeu_ps(y + r0, acc[0]);
        _mm256_storeu_ps(y + r0 + 8, acc[1]);
    }
}
#define REF_BLOCK256(B) refgemm_block256(w, r0, wt, x, y, B, false)
#define REF_ONE256(B) refgemm_block256(w, r0, wt, x, y, B, true)

AVX2 void kern_refgemm_avx2(const struct wmat *w, const float *x, int64_t n, float *y, int64_t row0, int64_t row1,
                            void *ws)
{
    const int64_t cols = w->cols;
    float *wt = ws, *rows = wt + 16 * cols; /* [cols, 16], [16, cols] (kern_refgemm_ws_bytes) */
    const __m256i idx = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32((int)cols));
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    for (int64_t r0 = row0; r0 < row1; r0 += 16) {
        const int64_t nr = row1 - r0 < 16 ? row1 - r0 : 16;
        const bool whole = kern_whole_block(w, r0, nr);
        if (whole && n == 1) {
            KERN_BY_BITS(w->bits, REF_ONE256)
            continue;
        }
        if (whole) {
            KERN_BY_BITS(w->bits, REF_BLOCK256)
        } else {
            const __m256 ml = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32((int)nr), lane));
            const __m256 mh = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32((int)nr - 8), lane));
            for (int64_t i = 0; i < nr; i++)
                kern_row_f32(w, r0 + i, rows + i * cols);
            for (int64_t j = 0; j < cols; j++) { /* the rows absent read as zeros */
                _mm256_store_ps(wt + 16 * j, _mm256_mask_i32gather_ps(_mm256_setzero_ps(), rows + j, idx, ml, 4));
                _mm256_store_ps(wt + 16 * j + 8,
                                _mm256_mask_i32gather_ps(_mm256_setzero_ps(), rows + 8 * cols + j, idx, mh, 4));
            }
        }
#define REF_ROWS256(T) refgemm_rows256(wt, x, cols, t0, T, y, w->rows, r0, nr)
        for (int64_t t0 = 0; t0 < n; t0 += REF_TOKENS256)
            KERN_TOKENS6(n - t0, REF_ROWS256)
#undef REF_ROWS256
    }
}
