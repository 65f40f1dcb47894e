/* avx512.c - AVX-512 fused dequantize + dot products; avx2.c and neon.c
 * have their twins, all giving the bits of kern_qdot_ref and
 * kern_matvec_bf16_ref (kernels/internal.h).
 *
 * MLX affine weights: each output is Σ_g scale_g·(Σ x·q)_g + Σ_g bias_g·(Σx)_g,
 * the form MLX's own kernels use; the bias terms use per-group input sums
 * computed once per call. Codes are read as 32-bit words, 16 words (one
 * AVX-512 vector) at a time: lane l holds word l, and code k of every lane is
 * isolated with one AND of the mask (2^bits − 1)·2^(bits·k) (the top code
 * with one shift) and converted to float, which is then q·2^(bits·k)
 * exactly. So that no shift back is needed, the input is rearranged once per
 * call to match: xd[16k + l] = x[W·l + k]·2^(−bits·k), W = 32/bits codes per
 * word (a power-of-two scaling, exact), zero-padded to whole blocks of 16
 * words. The q·x products of a block accumulate in two chains, are
 * multiplied by the group scales of their lanes, and accumulate in one
 * vector across the row; one reduction ends the row.
 *
 * A weight row is decoded once for up to TB tokens, and every token goes
 * through exactly the same operations as when it is alone, so prefill,
 * chunked and decode runs give bitwise-identical logits. Compiled with
 * per-function target attributes and chosen at run time (no -march flag). */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "core/dtype.h"
#include "kernels/x86/x86.h"
#include "kernels/x86/simd.h"
#include "quant/quant.h"

/* The lane sums of v[0..15] in hsum512's order (l and l + w for w = 8, 4,
 * 2, 1) as one transposing tree, 45 operations for 16 hsum512s' 128: lane
 * 4i + e of the result is v[4e + i]'s sum. Each step adds the halves of two
 * vectors' pending lanes side by side (shuffle_f32x4, then shuffle_ps within
 * 128-bit lanes). */
AVX512 INLINE __m512 hsum16x512(const __m512 *v)
{
    __m512 a[8], b[4], c[2];
#pragma GCC unroll 8
    for (int p = 0; p < 8; p++) /* w = 8: v[2p]'s 8 pending lanes, then v[2p + 1]'s */
        a[p] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * p], v[2 * p + 1], 0x44),
                             _mm512_shuffle_f32x4(v[2 * p], v[2 * p + 1], 0xEE));
#pragma GCC unroll 4
    for (int p = 0; p < 4; p++) /* w = 4: v[4p + i]'s 4 in 128-bit lane i */
        b[p] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * p], a[2 * p + 1], 0x88),
                             _mm512_shuffle_f32x4(a[2 * p], a[2 * p + 1], 0xDD));
#pragma GCC unroll 2
    for (int p = 0; p < 2; p++) /* w = 2: 128-bit lane i holds v[8p + i]'s 2, then v[8p + 4 + i]'s */
        c[p] = _mm512_add_ps(_mm512_shuffle_ps(b[2 * p], b[2 * p + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_ps(b[2 * p], b[2 * p + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    return _mm512_add_ps(_mm512_shuffle_ps(c[0], c[1], _MM_SHUFFLE(2, 0, 2, 0)), /* w = 1 */
                         _mm512_shuffle_ps(c[0], c[1], _MM_SHUFFLE(3, 1, 3, 1)));
}

/* kern_dot_ref's order for H query rows (q + u·n) against K keys side by
 * side: lane l of acc[u][k] is the reference's lane l of row u and key k;
 * a key's vector is loaded once for all the rows, a row's once for all the
 * keys. The tail comes through a masked load (0·0 added to a lane leaves it
 * unchanged). 16 sums are reduced together (hsum16x512). */
AVX512 INLINE void dotsk512(const float *q, const int H, const float *const *b, const int K, int64_t n, float *out,
                            int64_t ld, const float *const *pf)
{
    __m512 acc[8][8];
#pragma GCC unroll 8
    for (int u = 0; u < H; u++)
#pragma GCC unroll 8
        for (int k = 0; k < K; k++)
            acc[u][k] = _mm512_setzero_ps();
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = mask16(n - i);
        __m512 x[8];
#pragma GCC unroll 8
        for (int k = 0; k < K; k++) {
            x[k] = _mm512_maskz_loadu_ps(m, b[k] + i);
            if (pf)
                _mm_prefetch((const char *)(pf[k] + i), _MM_HINT_T0);
        }
#pragma GCC unroll 8
        for (int u = 0; u < H; u++) {
            const __m512 a = _mm512_maskz_loadu_ps(m, q + u * n + i);
#pragma GCC unroll 8
            for (int k = 0; k < K; k++)
                acc[u][k] = _mm512_fmadd_ps(a, x[k], acc[u][k]);
        }
    }
    if (H * K == 16) {
        __m512 v[16];
        float s[16];
#pragma GCC unroll 8
        for (int u = 0; u < H; u++)
#pragma GCC unroll 8
            for (int k = 0; k < K; k++)
                v[u * K + k] = acc[u][k];
        _mm512_storeu_ps(s, hsum16x512(v));
#pragma GCC unroll 8
        for (int u = 0; u < H; u++)
#pragma GCC unroll 8
            for (int k = 0; k < K; k++) /* v[i]'s sum is in lane 4(i % 4) + i / 4 */
                out[u * ld + k] = s[4 * ((u * K + k) % 4) + (u * K + k) / 4];
        return;
    }
#pragma GCC unroll 8
    for (int u = 0; u < H; u++)
#pragma GCC unroll 8
        for (int k = 0; k < K; k++)
            out[u * ld + k] = hsum512(acc[u][k]);
}

AVX512 float kern_dot_avx512(const float *a, const float *b, int64_t n)
{
    float out;
    dotsk512(a, 1, &b, 1, n, &out, 1, NULL);
    return out;
}

/* H heads' scores, 16/H keys at a time (8 for one head), the rest one by one. */
AVX512 INLINE void dots_heads512(const float *q, const int H, const float *const *b, int m, int64_t n, float *out,
                                 int64_t ld)
{
    const int K = H > 1 ? 16 / H : 8, A = K < DOTS_AHEAD ? DOTS_AHEAD : K; /* keys ahead prefetched */
    int j = 0;
    for (; j + K <= m; j += K)
        dotsk512(q, H, b + j, K, n, out + j, ld, j + A + K <= m ? b + j + A : NULL);
    for (; j < m; j++)
        dotsk512(q, H, b + j, 1, n, out + j, ld, NULL);
}

/* Heads 8 at a time, then 4, 2 and 1. */
AVX512 void kern_dots_avx512(const float *q, int nh, const float *const *b, int m, int64_t n, float *out, int64_t ld)
{
    int u = 0;
    for (; u + 8 <= nh; u += 8)
        dots_heads512(q + u * n, 8, b, m, n, out + u * ld, ld);
    if (u + 4 <= nh) {
        dots_heads512(q + u * n, 4, b, m, n, out + u * ld, ld);
        u += 4;
    }
    if (u + 2 <= nh) {
        dots_heads512(q + u * n, 2, b, m, n, out + u * ld, ld);
        u += 2;
    }
    if (u < nh)
        dots_heads512(q + u * n, 1, b, m, n, out + u * ld, ld);
}

/* acc[c] += w·v[c] for c < C in the lanes of k (all or none): one head's
 * share of a value, or none of it. */
AVX512 INLINE void add_value512(__m512 *acc, float w, const __m512 *v, const int C, __mmask16 k)
{
    const __m512 wu = _mm512_set1_ps(w);
#pragma GCC unroll 8
    for (int c = 0; c < C; c++)
        acc[c] = _mm512_mask3_fmadd_ps(wu, v[c], acc[c], k);
}

/* Columns i .. of H heads' outputs, C vectors each (the last under mask
 * `last`), kept in registers while the values are added in order: a value's
 * vectors are loaded once for all the heads; use[j] (kern_weights_used)
 * names the heads that add value j. */
AVX512 INLINE void axpyk512(float *y, int64_t ld, const int H, const float *w, int64_t wld, const float *const *x,
                            const unsigned *use, int m, int64_t i, const int C, __mmask16 last, int64_t n)
{
    const int64_t ahead = 16 * C > AXPY_AHEAD ? 16 * C : AXPY_AHEAD; /* at least the next pass's columns */
    __m512 acc[8][8], v[8];
#pragma GCC unroll 8
    for (int u = 0; u < H; u++)
#pragma GCC unroll 8
        for (int c = 0; c < C; c++)
            acc[u][c] = _mm512_maskz_loadu_ps(c == C - 1 ? last : 0xFFFF, y + u * ld + i + 16 * c);
    for (int j = 0; j < m; j++) {
        if (!use[j])
            continue;
#pragma GCC unroll 8
        for (int c = 0; c < C; c++) {
            v[c] = _mm512_maskz_loadu_ps(c == C - 1 ? last : 0xFFFF, x[j] + i + 16 * c);
            if (i + ahead + 16 * c < n)
                _mm_prefetch((const char *)(x[j] + i + ahead + 16 * c), _MM_HINT_T0);
        }
        if (use[j] == (1u << H) - 1) /* every head (the common case) */
#pragma GCC unroll 8
            for (int u = 0; u < H; u++)
                add_value512(acc[u], w[u * wld + j], v, C, 0xFFFF);
        else /* a head that skips it keeps its sums: masked, no branch per head (a branch mispredicted often) */
#pragma GCC unroll 8
            for (int u = 0; u < H; u++)
                add_value512(acc[u], w[u * wld + j], v, C, (__mmask16)-(int)(use[j] >> u & 1));
    }
#pragma GCC unroll 8
    for (int u = 0; u < H; u++)
#pragma GCC unroll 8
        for (int c = 0; c < C; c++)
            _mm512_mask_storeu_ps(y + u * ld + i + 16 * c, c == C - 1 ? last : 0xFFFF, acc[u][c]);
}

/* H heads, 16·C columns at a time (C = 16/H vectors, 8 for one head), then
 * one (masked) vector at a time. */
AVX512 INLINE void axpy_heads512(float *y, int64_t ld, const int H, const float *w, int64_t wld,
                                 const float *const *x, int m, int64_t n)
{
    const int C = H > 1 ? 16 / H : 8;
    unsigned use[16];
    kern_weights_used(w, wld, H, x, m, use);
    int64_t i = 0;
    for (; i + 16 * C <= n; i += 16 * C)
        axpyk512(y, ld, H, w, wld, x, use, m, i, C, 0xFFFF, n);
    for (; i < n; i += 16)
        axpyk512(y, ld, H, w, wld, x, use, m, i, 1, mask16(n - i), n);
}

/* Values 16 at a time; heads 8 at a time, then 4, 2 and 1. */
AVX512 void kern_axpy_avx512(float *y, int64_t ld, int nh, const float *w, int64_t wld, const float *const *x, int m,
                             int64_t n)
{
    for (int j = 0; j < m; j += 16) {
        const int mj = m - j < 16 ? m - j : 16;
        int u = 0;
        for (; u + 8 <= nh; u += 8)
            axpy_heads512(y + u * ld, ld, 8, w + u * wld + j, wld, x + j, mj, n);
        if (u + 4 <= nh) {
            axpy_heads512(y + u * ld, ld, 4, w + u * wld + j, wld, x + j, mj, n);
            u += 4;
        }
        if (u + 2 <= nh) {
            axpy_heads512(y + u * ld, ld, 2, w + u * wld + j, wld, x + j, mj, n);
            u += 2;
        }
        if (u < nh)
            axpy_heads512(y + u * ld, ld, 1, w + u * wld + j, wld, x + j, mj, n);
    }
}

EXP_PARTS(AVX512, exp_parts512, __m512, _mm512, _mm512_castsi512_ps)

#define ZERO_OF512(x) _mm512_castsi512_ps(_mm512_and_epi32(_mm512_castps_si512(x), _mm512_set1_epi32(INT32_MIN)))
#define SELECT_GT512(a, b, y, z) _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(a, b, _CMP_GT_OQ), z)
GELU(AVX512, gelu512, __m512, _mm512, exp_parts512, ZERO_OF512, SELECT_GT512)

/* kern_softcap on 16 lanes, step for step. */
AVX512 INLINE __m512 softcap512(__m512 x, __m512 cap)
{
    __m512 two_n, P = exp_parts512(_mm512_mul_ps(_mm512_set1_ps(2.0f), _mm512_div_ps(x, cap)), &two_n);
    __m512 em = _mm512_add_ps(_mm512_mul_ps(two_n, P), _mm512_sub_ps(two_n, _mm512_set1_ps(1.0f)));
    return _mm512_mul_ps(cap, _mm512_div_ps(em, _mm512_add_ps(em, _mm512_set1_ps(2.0f))));
}

AVX512 void kern_softcap_avx512(float *x, float cap, int64_t n)
{
    const __m512 c = _mm512_set1_ps(cap);
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) { /* four independent chains, as in kern_gelu_mul_avx512 */
        __m512 a = softcap512(_mm512_loadu_ps(x + i), c), b = softcap512(_mm512_loadu_ps(x + i + 16), c);
        __m512 d = softcap512(_mm512_loadu_ps(x + i + 32), c), e = softcap512(_mm512_loadu_ps(x + i + 48), c);
        _mm512_storeu_ps(x + i, a);
        _mm512_storeu_ps(x + i + 16, b);
        _mm512_storeu_ps(x + i + 32, d);
        _mm512_storeu_ps(x + i + 48, e);
    }
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(x + i, softcap512(_mm512_loadu_ps(x + i), c));
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        _mm512_mask_storeu_ps(x + i, m, softcap512(_mm512_maskz_loadu_ps(m, x + i), c));
    }
}

/* kern_softmax on 16 lanes: the max taken in the lanes (the same value; of
 * two zeros either may win, and x − m then differs only for x = ±0, whose
 * kern_exp is 1 either way), kern_exp step for step, the sum in order, one
 * division each. */
AVX512 void kern_softmax_avx512(float *x, int64_t n)
{
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    __m512 mv = ninf;
    for (int64_t i = 0; i < n; i += 16) { /* a (quiet) NaN compares false: passed over, as by fmaxf */
        const __m512 a = _mm512_mask_loadu_ps(ninf, mask16(n - i), x + i);
        mv = _mm512_mask_mov_ps(mv, _mm512_cmp_ps_mask(a, mv, _CMP_GT_OQ), a);
    }
    float lanes[16], m = -INFINITY, sum = 0.0f;
    _mm512_storeu_ps(lanes, mv);
    for (int l = 0; l < 16; l++)
        m = fmaxf(m, lanes[l]);
    const __m512 mm = _mm512_set1_ps(m);
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 k = mask16(n - i);
        const __m512 v = _mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + i), mm);
        __m512 two_n, P = exp_parts512(v, &two_n);
        const __m512 e = _mm512_mul_ps(_mm512_add_ps(P, _mm512_set1_ps(1.0f)), two_n);
        const __mmask16 under = _mm512_cmp_ps_mask(v, _mm512_set1_ps(-KERN_EXP_VMAX), _CMP_LT_OQ); /* e^v: 0 */
        _mm512_mask_storeu_ps(x + i, k, _mm512_maskz_mov_ps((__mmask16)~under, e));
    }
    for (int64_t i = 0; i < n; i++)
        sum += x[i];
    const __m512 s = _mm512_set1_ps(sum);
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 k = mask16(n - i);
        _mm512_mask_storeu_ps(x + i, k, _mm512_div_ps(_mm512_maskz_loadu_ps(k, x + i), s));
    }
}

AVX512 void kern_gelu_mul_avx512(float *g, const float *u, int64_t n)
{
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) { /* four independent chains: each is one long dependency */
        __m512 a = gelu512(_mm512_loadu_ps(g + i)), b = gelu512(_mm512_loadu_ps(g + i + 16));
        __m512 c = gelu512(_mm512_loadu_ps(g + i + 32)), d = gelu512(_mm512_loadu_ps(g + i + 48));
        _mm512_storeu_ps(g + i, _mm512_mul_ps(a, _mm512_loadu_ps(u + i)));
        _mm512_storeu_ps(g + i + 16, _mm512_mul_ps(b, _mm512_loadu_ps(u + i + 16)));
        _mm512_storeu_ps(g + i + 32, _mm512_mul_ps(c, _mm512_loadu_ps(u + i + 32)));
        _mm512_storeu_ps(g + i + 48, _mm512_mul_ps(d, _mm512_loadu_ps(u + i + 48)));
    }
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(g + i, _mm512_mul_ps(gelu512(_mm512_loadu_ps(g + i)), _mm512_loadu_ps(u + i)));
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        _mm512_mask_storeu_ps(g + i, m, _mm512_mul_ps(gelu512(_mm512_maskz_loadu_ps(m, g + i)), _mm512_maskz_loadu_ps(m, u + i)));
    }
}

/* Code k of every lane of v as a float: affine q·2^(bits·k) (the place
 * value kept, exact), an MX mode the code's value (mx_code_value). */
AVX512 INLINE __m512 code512(__m512i v, const int k, const int bits, const int mode)
{
    if (mode == QM_AFFINE)
        return _mm512_cvtepi32_ps(k == 32 / bits - 1 ? _mm512_srli_epi32(v, 32 - bits)
                                                     : _mm512_and_si512(v, _mm512_set1_epi32((int)(((1u << bits) - 1) << (bits * k)))));
    const __m512i c = _mm512_and_si512(_mm512_srli_epi32(v, bits * k), _mm512_set1_epi32((1 << bits) - 1));
    if (mode == QM_MXFP8) { /* E4M3: the magnitude's bits moved into a float and scaled by 2^120, the sign or'ed */
        __m512i mag = _mm512_slli_epi32(_mm512_and_si512(c, _mm512_set1_epi32(0x7F)), 20);
        __m512 m = _mm512_mul_ps(_mm512_castsi512_ps(mag), _mm512_set1_ps(0x1p120f));
        return _mm512_castsi512_ps(
            _mm512_or_si512(_mm512_castps_si512(m), _mm512_slli_epi32(_mm512_and_si512(c, _mm512_set1_epi32(0x80)), 24)));
    }
    return _mm512_permutexvar_ps(c, _mm512_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f, -0.0f, -0.5f, -1.0f,
                                                   -1.5f, -2.0f, -3.0f, -4.0f, -6.0f));
}

/* One block of 16 words (m: the words present) for each token: the q·x
 * products in two chains, summed, times each lane's group scale sv, into
 * acc. xb: token t0's rearranged input of the block. */
AVX512 INLINE void qblock512(const uint8_t *c, __mmask16 m, const float *xb, int64_t stride, const int tb,
                             const int bits, const int mode, __m512 sv, __m512 *acc)
{
    const int per_word = 32 / bits;
    _mm_prefetch((const char *)c + PREFETCH, _MM_HINT_T0);
    const __m512i v = _mm512_maskz_loadu_epi32(m, c);
    __m512 p[TB][2];
#pragma GCC unroll 8
    for (int k = 0; k < per_word; k++) {
        __m512 q = code512(v, k, bits, mode);
        for (int u = 0; u < tb; u++) {
            __m512 xv = _mm512_loadu_ps(xb + u * stride + 16 * k);
            p[u][k & 1] = k < 2 ? _mm512_mul_ps(xv, q) : _mm512_fmadd_ps(xv, q, p[u][k & 1]);
        }
    }
    for (int u = 0; u < tb; u++)
        acc[u] = _mm512_fmadd_ps(_mm512_add_ps(p[u][0], p[u][1]), sv, acc[u]);
}

/* Rows [row0, row1) for tokens t0..t0+tb-1; tb, gs, bits and mode are
 * constants after inlining, so every loop over a block unrolls. */
AVX512 INLINE void qrows512m(const struct wmat *w, const struct kern_qinput *in, int64_t t0, const int tb, float *y,
                             int64_t row0, int64_t row1, const int gs, const int bits, const int mode)
{
    const int per_word = 32 / bits, blk = 16 * per_word;
    const int64_t ng = w->cols / gs, stride = in->stride;
    const __m512i gidx = _mm512_setr_epi32(GROUP_OF_LANE(0), GROUP_OF_LANE(1), GROUP_OF_LANE(2), GROUP_OF_LANE(3),
                                           GROUP_OF_LANE(4), GROUP_OF_LANE(5), GROUP_OF_LANE(6), GROUP_OF_LANE(7),
                                           GROUP_OF_LANE(8), GROUP_OF_LANE(9), GROUP_OF_LANE(10), GROUP_OF_LANE(11),
                                           GROUP_OF_LANE(12), GROUP_OF_LANE(13), GROUP_OF_LANE(14), GROUP_OF_LANE(15));
    float sc[PARAMS_MAX + 16]; /* zero past the row's groups, read by absent lanes */
    for (int64_t r = row0; r < row1; r++) {
        const uint8_t *codes = w->w + (size_t)r * w->row_stride;
        const uint8_t *sr = w->s + (size_t)r * w->srow_bytes;
        params_prefetch(sr, sr, w->srow_bytes); /* scales only */
        __m512 acc[TB]; /* the definition's A */
        for (int u = 0; u < tb; u++)
            acc[u] = _mm512_setzero_ps();
        for (int64_t g0 = 0; g0 < ng; g0 += PARAMS_MAX) {
            int64_t nb = ng - g0 < PARAMS_MAX ? ng - g0 : PARAMS_MAX;
            kern_mx_scales((enum qmode)mode, sr + g0, sc, nb);
            _mm512_storeu_ps(sc + nb, _mm512_setzero_ps());
            const int64_t j0 = g0 * gs, j1 = (g0 + nb) * gs; /* a chunk is whole blocks but for the row's last */
            const float *xb = in->xd + t0 * stride;
            for (int64_t j = j0; j < j1; j += blk)
                qblock512(codes + j * bits / 8, mask16((j1 - j) / per_word), xb + j, stride, tb, bits, mode,
                          _mm512_permutexvar_ps(gidx, _mm512_loadu_ps(sc + (j - j0) / gs)), acc);
        }
        for (int u = 0; u < tb; u++) /* + 0: kern_qdot_ref's bias lanes */
            y[(t0 + u) * w->rows + r] = hsum512(_mm512_add_ps(acc[u], _mm512_setzero_ps()));
    }
}

/* ---- affine 4/8-bit: kern_qdot_ref with one row per lane ----
 *
 * Lane l holds row 16B + l of a block of 16 rows. Per group, each word of
 * the 16 rows is one vector (blocked: one load; by rows: transposed from the
 * rows, rows_to_lanes512); its codes
 * isolated in place (code512) multiply the column's prepared input,
 * broadcast, into the word's chain (even or odd) of each (block, token); the
 * chains are added and folded with the 16 rows' scales into A and their bias
 * terms into B. NB blocks × T tokens × 2 chains run side by side. */

/* 16 F32/F16/BF16 values in a row as floats (quant_to_f32_avx512's conversions). */
AVX512 INLINE __m512 f32x16(enum dtype t, const uint8_t *a)
{
    if (t == DT_F32)
        return _mm512_loadu_ps(a);
    const __m256i h = _mm256_loadu_si256((const __m256i *)(const void *)a);
    return t == DT_F16 ? _mm512_cvtph_ps(h) : _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* kern_params16 as a vector: blocked, from rec, the group's record. */
AVX512 INLINE __m512 params16(const struct wmat *w, const uint8_t *p, const uint8_t *rec, int64_t r0, int64_t g,
                              __mmask16 m)
{
    if (w->blocked && (w->dtype == DT_BF16 || w->dtype == DT_F16 || w->dtype == DT_F32))
        return _mm512_maskz_mov_ps(m, f32x16(w->dtype, rec + (p - w->w)));
    float v[16];
    kern_params16(w, p, r0, g, m, v);
    return _mm512_loadu_ps(v);
}

/* r[i] becomes column i of the 16 × 16 matrix whose row j was r[j]. */
AVX512 INLINE void transpose16x16(__m512 r[16])
{
    __m512 t[16];
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 4; i++) {
        r[4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[4 * i]), _mm512_castps_pd(t[4 * i + 2])));
        r[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[4 * i]), _mm512_castps_pd(t[4 * i + 2])));
        r[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[4 * i + 1]), _mm512_castps_pd(t[4 * i + 3])));
        r[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[4 * i + 1]), _mm512_castps_pd(t[4 * i + 3])));
    }
    for (int i = 0; i < 4; i++) {
        t[i] = _mm512_shuffle_f32x4(r[i], r[4 + i], 0x88);
        t[4 + i] = _mm512_shuffle_f32x4(r[i], r[4 + i], 0xDD);
        t[8 + i] = _mm512_shuffle_f32x4(r[8 + i], r[12 + i], 0x88);
        t[12 + i] = _mm512_shuffle_f32x4(r[8 + i], r[12 + i], 0xDD);
    }
    for (int i = 0; i < 4; i++) {
        r[i] = _mm512_shuffle_f32x4(t[i], t[8 + i], 0x88);
        r[8 + i] = _mm512_shuffle_f32x4(t[i], t[8 + i], 0xDD);
        r[4 + i] = _mm512_shuffle_f32x4(t[4 + i], t[12 + i], 0x88);
        r[12 + i] = _mm512_shuffle_f32x4(t[4 + i], t[12 + i], 0xDD);
    }
}

/* By rows: groups [g, g + G) (G ≤ 16) of the scales (p = w->s) or biases
 * (w->b) of rows r0 .. r0+15 (m: those read, the others 0) as floats, group
 * g + k's 16 at dst[16k]. Each row's G converted at once, then transposed. */
AVX512 INLINE void params_to_lanes512(const struct wmat *w, const uint8_t *p, int64_t r0, int64_t g, int G,
                                      __mmask16 m, float *dst)
{
    const size_t psize = dtype_table[w->dtype].bits / 8;
    if (w->dtype != DT_BF16 && w->dtype != DT_F16 && w->dtype != DT_F32) {
        for (int k = 0; k < G; k++)
            kern_params16(w, p, r0, g + k, m, dst + 16 * k);
        return;
    }
    __m512 r[16];
    for (int l = 0; l < 16; l++) {
        const uint8_t *a = p + (size_t)(r0 + l) * w->srow_bytes + (size_t)g * psize;
        const __mmask16 gm = m >> l & 1 ? mask16(G) : 0;
        r[l] = w->dtype == DT_F32   ? _mm512_maskz_loadu_ps(gm, a)
               : w->dtype == DT_F16 ? _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(gm, a))
                                    : _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(gm, a)), 16));
    }
    transpose16x16(r);
    for (int k = 0; k < G; k++)
        _mm512_store_ps(dst + 16 * k, r[k]);
}

#define ROWS_AHEAD 512 /* bytes ahead in each row: a few groups */

/* Words [0, W) (W ≤ 8) of 16 rows (src: the first row's first, the others
 * `stride` bytes apart; m: the rows read, the others 0) as the blocked
 * layout holds them: word k of row l at dst[16k + l]. Two rows per vector,
 * then an 8 × 8 transpose in each half. */
AVX512 INLINE void rows_to_lanes512(const uint8_t *src, size_t stride, __mmask16 m, int W, uint32_t *dst)
{
    const __mmask8 wm = (__mmask8)((1u << W) - 1);
    __m512i z[8], u[8];
    for (int r = 0; r < 16; r++) /* 16 streams from RAM: the prefetcher alone falls behind */
        _mm_prefetch((const char *)src + (size_t)r * stride + ROWS_AHEAD, _MM_HINT_T0);
    for (int r = 0; r < 8; r++) {
        const __m256i lo = m >> r & 1 ? _mm256_maskz_loadu_epi32(wm, src + (size_t)r * stride) : _mm256_setzero_si256();
        const __m256i hi = m >> (r + 8) & 1 ? _mm256_maskz_loadu_epi32(wm, src + (size_t)(r + 8) * stride) : _mm256_setzero_si256();
        z[r] = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1); /* 128-bit lane L: words 4(L % 2).. of row r + 8(L / 2) */
    }
    for (int q = 0; q < 2; q++) { /* rows 4q .. 4q+3: u[4q + k] holds word k (lanes 0, 2) and k + 4 (lanes 1, 3) */
        const __m512i a = _mm512_unpacklo_epi32(z[4 * q], z[4 * q + 1]), b = _mm512_unpackhi_epi32(z[4 * q], z[4 * q + 1]);
        const __m512i c = _mm512_unpacklo_epi32(z[4 * q + 2], z[4 * q + 3]), d = _mm512_unpackhi_epi32(z[4 * q + 2], z[4 * q + 3]);
        u[4 * q] = _mm512_unpacklo_epi64(a, c);
        u[4 * q + 1] = _mm512_unpackhi_epi64(a, c);
        u[4 * q + 2] = _mm512_unpacklo_epi64(b, d);
        u[4 * q + 3] = _mm512_unpackhi_epi64(b, d);
    }
    const __m512i lo = _mm512_setr_epi64(0, 1, 8, 9, 4, 5, 12, 13), hi = _mm512_setr_epi64(2, 3, 10, 11, 6, 7, 14, 15);
    for (int i = 0; i < W; i++)
        _mm512_storeu_si512(dst + 16 * i, _mm512_permutex2var_epi64(u[i % 4], i < 4 ? lo : hi, u[4 + i % 4]));
}

/* By rows: group g of NB sets of 16 rows from r0 (base: each set's first
 * row's words of the group; m: the rows read) into the blocked layout's
 * order, its words at lanes[512b] and its 16 groups' scales and biases from
 * g (when g starts them) at pl[b]. */
__attribute__((noinline)) AVX512 static void rows_group512(const struct wmat *w, const uint8_t *const *base, int NB,
                                                           int64_t r0, int64_t g, __mmask16 m, uint32_t *lanes,
                                                           float (*pl)[2][16][16])
{
    const int wpg = w->gs * w->bits / 32;
    const int64_t ng = w->cols / w->gs;
    for (int b = 0; b < NB; b++) {
        for (int c = 0; c < wpg; c += 8)
            rows_to_lanes512(base[b] + 4 * c, w->row_stride, m, wpg - c < 8 ? wpg - c : 8, lanes + 512 * b + 16 * c);
        if (g % 16 == 0) {
            const int G = ng - g < 16 ? (int)(ng - g) : 16;
            params_to_lanes512(w, w->s, r0 + 16 * b, g, G, m, pl[b][0][0]);
            params_to_lanes512(w, w->b, r0 + 16 * b, g, G, m, pl[b][1][0]);
        }
    }
}

/* Bytes ahead that each of arows512's NB streams prefetches: NB streams
 * 4096 ahead (PREFETCH) would keep NB·4 KiB in flight, most of L1 at NB = 8
 * (measured when one token ran 8 sets: 1024 against 4096 on a 16-core Xeon,
 * 1.09-1.13x at 2-4 threads). */
#define APREFETCH 1024

/* Word i of a group for NB sets (base: each set's group in the blocked
 * layout) and T tokens (x: the group's input of the first): its codes into
 * the chains p, the chain's first word (`first`) starting them; blocked,
 * each set's stream prefetched `ahead` bytes ahead. */
AVX512 INLINE void aword512(const struct wmat *w, const uint8_t *const *base, int i, const float *x, int64_t stride,
                            __m512 *p, const bool first, const int NB, const int T, const int bits, const int ahead)
{
    const int per_word = 32 / bits;
#pragma GCC unroll 8
    for (int b = 0; b < NB; b++) {
        if (w->blocked) /* each set one stream: codes, scales, biases */
            _mm_prefetch((const char *)base[b] + 64 * i + ahead, _MM_HINT_T0);
        const __m512i v = _mm512_loadu_si512((const void *)(base[b] + 64 * i));
#pragma GCC unroll 8
        for (int k = 0; k < per_word; k++) {
            const __m512 q = code512(v, k, bits, QM_AFFINE);
#pragma GCC unroll 4
            for (int u = 0; u < T; u++) {
                const __m512 xb = _mm512_set1_ps(x[u * stride + i * per_word + k]);
                p[b * T + u] = first && k == 0 ? _mm512_mul_ps(xb, q) : _mm512_fmadd_ps(xb, q, p[b * T + u]);
            }
        }
    }
}

/* NB sets of 16 rows from r0, 16 apart (m: the lanes of rows in range), for
 * tokens t0 .. t0+T-1; blocked, r0 starts a block. A and B in memory. */
AVX512 INLINE void arows512(const struct wmat *w, const struct kern_qinput *in, int64_t t0, float *y, int64_t r0,
                            __mmask16 m, const int NB, const int T, const int bits)
{
    const int wpg = w->gs * bits / 32;
    const int64_t ng = w->cols / w->gs, stride = in->stride;
    const size_t block = KERN_BLOCK_ROWS * (w->row_bytes + 2 * w->srow_bytes), rec = block / (size_t)ng;
    uint32_t lanes[8 * 32 * 16] __attribute__((aligned(64))); /* by rows: each set's group in the blocked layout, */
    float pl[8][2][16][16] __attribute__((aligned(64)));     /* and its scales and biases of 16 groups */
    float A[8][16] __attribute__((aligned(64))), B[8][16] __attribute__((aligned(64)));
    memset(A, 0, sizeof A);
    memset(B, 0, sizeof B);
    const uint8_t *base[8];
    for (int b = 0; b < NB; b++)
        base[b] = w->blocked ? w->w + (size_t)(r0 / 16 + b) * block : w->w + (size_t)(r0 + 16 * b) * w->row_stride;
    for (int64_t g = 0; g < ng; g++) {
        const float *x = in->xd + t0 * stride + g * w->gs;
        const uint8_t *words[8];
        if (!w->blocked)
            rows_group512(w, base, NB, r0, g, m, lanes, pl);
        for (int b = 0; b < NB; b++)
            words[b] = w->blocked ? base[b] : (const uint8_t *)(lanes + 512 * b);
        __m512 p[2][8]; /* the chains of the even and the odd words */
        aword512(w, words, 0, x, stride, p[0], true, NB, T, bits, APREFETCH);
        aword512(w, words, 1, x, stride, p[1], true, NB, T, bits, APREFETCH);
        for (int i = 2; i < wpg; i += 2) {
            aword512(w, words, i, x, stride, p[0], false, NB, T, bits, APREFETCH);
            aword512(w, words, i + 1, x, stride, p[1], false, NB, T, bits, APREFETCH);
        }
        for (int b = 0; b < NB; b++) {
            const __m512 sc = w->blocked ? params16(w, w->s, base[b], r0 + 16 * b, g, m) : _mm512_load_ps(pl[b][0][g % 16]);
            const __m512 bi = w->blocked ? params16(w, w->b, base[b], r0 + 16 * b, g, m) : _mm512_load_ps(pl[b][1][g % 16]);
#pragma GCC unroll 4
            for (int u = 0; u < T; u++) {
                const int c = b * T + u;
                _mm512_store_ps(A[c], _mm512_fmadd_ps(_mm512_add_ps(p[0][c], p[1][c]), sc, _mm512_load_ps(A[c])));
                _mm512_store_ps(B[c], _mm512_fmadd_ps(bi, _mm512_set1_ps(in->xsum[(t0 + u) * ng + g]), _mm512_load_ps(B[c])));
            }
            base[b] += w->blocked ? rec : (size_t)(4 * wpg);
        }
    }
    for (int b = 0; b < NB; b++)
        for (int u = 0; u < T; u++)
            _mm512_mask_storeu_ps(y + (t0 + u) * w->rows + r0 + 16 * b, m,
                                  _mm512_add_ps(_mm512_load_ps(A[b * T + u]), _mm512_load_ps(B[b * T + u])));
}

/* Token t, one blocked set of 16 rows at r0 (m: the rows stored): per
 * group the even and the odd words' chains, A and B in registers, one
 * stream prefetched PREFETCH ahead. arows512's operations (NB = 1). The
 * kernel alone from RAM against arows512 at NB = 8, alternated in one
 * process: 4-bit E (Zen 4) 1.17-1.23x at 1-2 threads, a 16-core Xeon
 * 0.97-1.19x at 1-4; 8-bit E 1.15-1.48x at 1 thread (1.03x at 2, its
 * bound), the Xeon 0.89-0.94x: 4-bit only. Two sets (two streams) or two
 * groups of one set side by side: 0.3-0.8x of this on E (two groups also
 * with their stream prefetched 8192 ahead). The chains' first words come
 * before the loop: started inside it (a branch on the word), GCC kept them
 * in memory, a store and a load in each chain's every word (E2B decode on
 * E, alternated: 1.07-1.20x at 1 thread, 1.10-1.35x at 2). */
AVX512 INLINE void aset512(const struct wmat *w, const struct kern_qinput *in, int64_t t, float *y, int64_t r0,
                           __mmask16 m, const int bits)
{
    const int wpg = w->gs * bits / 32;
    const int64_t ng = w->cols / w->gs;
    const size_t block = KERN_BLOCK_ROWS * (w->row_bytes + 2 * w->srow_bytes), rec = block / (size_t)ng;
    const uint8_t *c = w->w + (size_t)(r0 / 16) * block;
    const size_t so = (size_t)(w->s - w->w), bo = (size_t)(w->b - w->w);
    __m512 A = _mm512_setzero_ps(), B = A;
    for (int64_t g = 0; g < ng; g++, c += rec) {
        const float *x = in->xd + t * in->stride + g * w->gs;
        __m512 p[2]; /* the chains of the even and the odd words (wpg ≥ 2) */
        aword512(w, &c, 0, x, 0, &p[0], true, 1, 1, bits, PREFETCH);
        aword512(w, &c, 1, x, 0, &p[1], true, 1, 1, bits, PREFETCH);
        for (int i = 2; i < wpg; i += 2) {
            aword512(w, &c, i, x, 0, &p[0], false, 1, 1, bits, PREFETCH);
            aword512(w, &c, i + 1, x, 0, &p[1], false, 1, 1, bits, PREFETCH);
        }
        const __m512 sc = _mm512_maskz_mov_ps(m, f32x16(w->dtype, c + so));
        const __m512 bi = _mm512_maskz_mov_ps(m, f32x16(w->dtype, c + bo));
        A = _mm512_fmadd_ps(_mm512_add_ps(p[0], p[1]), sc, A);
        B = _mm512_fmadd_ps(bi, _mm512_set1_ps(in->xsum[t * ng + g]), B);
    }
    _mm512_mask_storeu_ps(y + t * w->rows + r0, m, _mm512_add_ps(A, B));
}

/* Rows [row0, row1) for tokens t0 .. t0+T-1: one token of a blocked 4-bit
 * matrix a set at a time (aset512); otherwise whole sets of 16 rows 8/T at a time,
 * then fewer (halving), a partial set (a blocked matrix's first, the last)
 * alone. */
AVX512 INLINE void arange512(const struct wmat *w, const struct kern_qinput *in, int64_t t0, float *y, int64_t row0,
                             int64_t row1, const int T, const int bits)
{
    const int NB = T == 1 ? 8 : T == 2 ? 4 : 2;
    int64_t r = w->blocked ? row0 / 16 * 16 : row0;
    if (T == 1 && bits == 4 && w->blocked && (w->dtype == DT_BF16 || w->dtype == DT_F16 || w->dtype == DT_F32)) {
        for (; r < row1; r += 16)
            aset512(w, in, t0, y, r, (__mmask16)kern_rows_mask(r, row0, row1), bits);
        return;
    }
    if (r < row0) {
        arows512(w, in, t0, y, r, (__mmask16)kern_rows_mask(r, row0, row1), 1, T, bits);
        r += 16;
    }
    for (; r + 16 * NB <= row1; r += 16 * NB)
        arows512(w, in, t0, y, r, 0xFFFF, NB, T, bits);
    if (NB >= 8 && r + 64 <= row1) {
        arows512(w, in, t0, y, r, 0xFFFF, 4, T, bits);
        r += 64;
    }
    if (NB >= 4 && r + 32 <= row1) {
        arows512(w, in, t0, y, r, 0xFFFF, 2, T, bits);
        r += 32;
    }
    for (; r < row1; r += 16)
        arows512(w, in, t0, y, r, (__mmask16)kern_rows_mask(r, row0, row1), 1, T, bits);
}

/* ---- affine 4/8-bit as a blocked GEMM: arows512's chains, tokens broadcast ----
 *
 * The tile's rows, in sets of 16 lanes (an even count; lanes and sets past
 * the tile zero), are decoded once into floats column by column ([set,
 * column, 16]: each code isolated in place, as arows512 has it) and their
 * scales and biases into [set, group, 16]. For each panel of AGEMM_T tokens
 * (the input prepared in panels, [column, AGEMM_T]), two sets × AGEMM_T
 * tokens at a time run each group's two chains of products in registers
 * and fold them with the scales into A; then the bias terms, and y = A + B:
 * every (row, token) through kern_qdot_ref's operations. */

#define AGEMM_H (AGEMM_T / AGEMM_S) /* its tokens: AGEMM_S × AGEMM_H × 2 chains = 24 registers */

/* Column j of AGEMM_S sets (q: the group's [gs, 16] of set i at q + i·qs)
 * for AGEMM_H tokens (xg: the group's input, [gs, AGEMM_T]) into the chains
 * p[set][u]. */
AVX512 INLINE void agemm_col512(const float *q, int64_t qs, const float *xg, int j, __m512 (*p)[AGEMM_H],
                                const bool first)
{
    __m512 v[AGEMM_S];
#pragma GCC unroll 4
    for (int i = 0; i < AGEMM_S; i++)
        v[i] = _mm512_load_ps(q + i * qs + 16 * j);
#pragma GCC unroll 6
    for (int u = 0; u < AGEMM_H; u++) {
        const __m512 xb = _mm512_set1_ps(xg[j * AGEMM_T + u]);
#pragma GCC unroll 4
        for (int i = 0; i < AGEMM_S; i++)
            p[i][u] = first ? _mm512_mul_ps(xb, v[i]) : _mm512_fmadd_ps(xb, v[i], p[i][u]);
    }
}

/* AGEMM_S sets (set i's ng groups of codes, [ng·gs, 16], at q + i·qs; its
 * scales, [ng, 16], at st + i·ss) × AGEMM_T tokens (x: [ng·gs, AGEMM_T]), in
 * pieces of AGEMM_H tokens: per group and piece, the two chains (even and odd
 * words) of each (set, token) in registers, added and folded into A
 * ([AGEMM_S, AGEMM_T, 16]); the group's columns stay in L1 for the next
 * piece. */
AVX512 INLINE void agemm_block512(const float *q, int64_t qs, const float *x, const float *st, int64_t ss, int64_t ng,
                                  int gs, float *A, const int per_word)
{
    for (int64_t g = 0; g < ng; g++) {
        const float *qg = q + g * gs * 16;
        for (int h = 0; h < AGEMM_T; h += AGEMM_H) {
            const float *xg = x + g * gs * AGEMM_T + h;
            __m512 p[2][AGEMM_S][AGEMM_H]; /* chain c of set i, token u: p[c][i][u] */
#pragma GCC unroll 8
            for (int k = 0; k < per_word; k++) {
                agemm_col512(qg, qs, xg, k, p[0], k == 0);
                agemm_col512(qg, qs, xg, per_word + k, p[1], k == 0);
            }
            for (int i = 2 * per_word; i < gs; i += 2 * per_word)
#pragma GCC unroll 8
                for (int k = 0; k < per_word; k++) {
                    agemm_col512(qg, qs, xg, i + k, p[0], false);
                    agemm_col512(qg, qs, xg, i + per_word + k, p[1], false);
                }
#pragma GCC unroll 4
            for (int i = 0; i < AGEMM_S; i++) {
                const __m512 sc = _mm512_load_ps(st + i * ss + 16 * g);
#pragma GCC unroll 6
                for (int u = 0; u < AGEMM_H; u++) {
                    float *a = A + (i * AGEMM_T + h + u) * 16;
                    _mm512_store_ps(a, _mm512_fmadd_ps(_mm512_add_ps(p[0][i][u], p[1][i][u]), sc, _mm512_load_ps(a)));
                }
            }
        }
    }
}

/* The block on its own for each width (inlined, GCC spilled its chains). */
__attribute__((noinline)) AVX512 static void agemm_block_b4(const float *q, int64_t qs, const float *x,
                                                            const float *st, int64_t ss, int64_t ng, int gs, float *A)
{
    agemm_block512(q, qs, x, st, ss, ng, gs, A, 8);
}

__attribute__((noinline)) AVX512 static void agemm_block_b8(const float *q, int64_t qs, const float *x,
                                                            const float *st, int64_t ss, int64_t ng, int gs, float *A)
{
    agemm_block512(q, qs, x, st, ss, ng, gs, A, 4);
}

/* Groups [g0, g1) of rows r0 .. r0+15 (m: those in the tile) decoded into qt
 * [(g1 − g0)·gs, 16], their scales into st and biases into bt [groups, 16]
 * (at group g); zeros for the others. */
AVX512 INLINE void agemm_decode512(const struct wmat *w, int64_t r0, __mmask16 m, int64_t g0, int64_t g1, float *qt,
                                   float *st, float *bt, const int bits)
{
    const int per_word = 32 / bits, wpg = w->gs / per_word;
    uint32_t lanes[32 * 16] __attribute__((aligned(64))); /* by rows: the group in the blocked layout */
    for (int64_t g = g0; g < g1; g++) {
        const uint8_t *base = !m ? NULL
                              : w->blocked ? w->w + kern_block_off(w, r0 / 16, g)
                                           : w->w + (size_t)r0 * w->row_stride + (size_t)(4 * g * wpg);
        for (int c = 0; m && !w->blocked && c < wpg; c += 8)
            rows_to_lanes512(base + 4 * c, w->row_stride, m, wpg - c < 8 ? wpg - c : 8, lanes + 16 * c);
        for (int i = 0; i < wpg; i++) {
            const __m512i v = !m         ? _mm512_setzero_si512()
                              : w->blocked ? _mm512_maskz_loadu_epi32(m, base + 64 * i)
                                           : _mm512_load_si512((const void *)(lanes + 16 * i));
#pragma GCC unroll 8
            for (int k = 0; k < per_word; k++)
                _mm512_store_ps(qt + ((g - g0) * w->gs + i * per_word + k) * 16, code512(v, k, bits, QM_AFFINE));
        }
        if (w->blocked || !m) {
            _mm512_store_ps(st + 16 * g, m ? params16(w, w->s, base, r0, g, m) : _mm512_setzero_ps());
            _mm512_store_ps(bt + 16 * g, m ? params16(w, w->b, base, r0, g, m) : _mm512_setzero_ps());
        } else if ((g - g0) % 16 == 0) {
            params_to_lanes512(w, w->s, r0, g, g1 - g < 16 ? (int)(g1 - g) : 16, m, st + 16 * g);
            params_to_lanes512(w, w->b, r0, g, g1 - g < 16 ? (int)(g1 - g) : 16, m, bt + 16 * g);
        }
    }
}

AVX512 static void agemm_decode_b4(const struct wmat *w, int64_t r0, uint32_t m, int64_t g0, int64_t g1, float *qt,
                                    float *st, float *bt)
{
    agemm_decode512(w, r0, (__mmask16)m, g0, g1, qt, st, bt, 4);
}

AVX512 static void agemm_decode_b8(const struct wmat *w, int64_t r0, uint32_t m, int64_t g0, int64_t g1, float *qt,
                                    float *st, float *bt)
{
    agemm_decode512(w, r0, (__mmask16)m, g0, g1, qt, st, bt, 8);
}

/* A set's outputs: 4 tokens' bias chains side by side, then A + B. */
AVX512 static void agemm_finish512(const struct wmat *w, const struct kern_qinput *in, const float *bt, const float *A,
                                   int64_t t0, int tp, int64_t r, uint32_t m, float *y)
{
    const int64_t ng = w->cols / w->gs;
    for (int u0 = 0; u0 < tp; u0 += 4) {
        const int nu = tp - u0 < 4 ? tp - u0 : 4;
        const float *xs = in->xsum + (t0 + u0) * ng;
        __m512 b[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
        for (int64_t g = 0; g < ng; g++) {
            const __m512 bg = _mm512_load_ps(bt + g * 16);
#pragma GCC unroll 4
            for (int u = 0; u < 4; u++)
                b[u] = _mm512_fmadd_ps(bg, _mm512_set1_ps(xs[(u < nu ? u : 0) * ng + g]), b[u]);
        }
        for (int u = 0; u < nu; u++)
            _mm512_mask_storeu_ps(y + (t0 + u0 + u) * w->rows + r, (__mmask16)m,
                                  _mm512_add_ps(_mm512_load_ps(A + (u0 + u) * 16), b[u]));
    }
}

static const struct kern_agemm_isa agemm_b4 = {agemm_decode_b4, agemm_block_b4, agemm_finish512, AGEMM_S},
                                   agemm_b8 = {agemm_decode_b8, agemm_block_b8, agemm_finish512, AGEMM_S};

AVX512 INLINE void adot512(const struct wmat *w, const struct kern_qinput *in, int64_t n, float *y, int64_t row0,
                           int64_t row1, const int bits)
{
    for (int64_t t0 = 0; t0 < n; t0 += 4)
        switch (n - t0 < 4 ? n - t0 : 4) {
        case 1: arange512(w, in, t0, y, row0, row1, 1, bits); break;
        case 2: arange512(w, in, t0, y, row0, row1, 2, bits); break;
        case 3: arange512(w, in, t0, y, row0, row1, 3, bits); break;
        default: arange512(w, in, t0, y, row0, row1, 4, bits); break;
        }
}

AVX512 void kern_qdot_avx512(const struct wmat *w, const struct kern_qinput *in, int64_t n, float *y, int64_t row0,
                             int64_t row1)
{
    if (kern_gtype_of(w->mode)) {
        kern_gdot_avx512(w, in, n, y, row0, row1);
        return;
    }
    if (w->mode != QM_AFFINE) {
        MX_TOKENS_DISPATCH(qrows512m)
    } else if (w->bits == 4) {
        adot512(w, in, n, y, row0, row1, 4);
    } else {
        adot512(w, in, n, y, row0, row1, 8);
    }
}

/* Columns [j, j + 16) (m: those present) of each token into chain c. */
AVX512 INLINE void bf16_step512(const uint8_t *row, const float *x, int64_t cols, int64_t t0, int tb, int64_t j,
                                __mmask16 m, __m512 (*acc)[2], int c)
{
    __m256i h = _mm256_maskz_loadu_epi16(m, row + 2 * j);
    __m512 wv = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    for (int u = 0; u < tb; u++)
        acc[u][c] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, x + (t0 + u) * cols + j), wv, acc[u][c]);
}

/* kern_matvec_bf16_ref's two chains of 16 lanes. */
AVX512 INLINE void bf16rows512(const struct wmat *w, const float *x, int64_t t0, int tb, float *y, int64_t row0,
                               int64_t row1)
{
    const int64_t cols = w->cols;
    for (int64_t r = row0; r < row1; r++) {
        const uint8_t *row = w->w + (size_t)r * w->row_stride;
        __m512 acc[TB][2];
        for (int u = 0; u < tb; u++)
            acc[u][0] = acc[u][1] = _mm512_setzero_ps();
        int64_t j = 0;
        for (; j + 32 <= cols; j += 32) {
            bf16_step512(row, x, cols, t0, tb, j, 0xFFFF, acc, 0);
            bf16_step512(row, x, cols, t0, tb, j + 16, 0xFFFF, acc, 1);
        }
        for (; j < cols; j += 16)
            bf16_step512(row, x, cols, t0, tb, j, mask16(cols - j), acc, (int)(j / 16 % 2));
        for (int u = 0; u < tb; u++)
            y[(t0 + u) * w->rows + r] = hsum512(_mm512_add_ps(acc[u][0], acc[u][1]));
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

/* ---- the fused kernels' definition as a blocked GEMM (steps of many tokens) ----
 *
 * kern_qdot_ref's operations, for a tile of rows and many tokens: the tile's
 * codes are decoded once into floats (code k of each word, place value kept,
 * in the lanes qblock512 gives them), rows in pairs, the two rows' vectors of
 * a code side by side; each block's lane scales beside them. The input comes
 * prepared in the same way, tokens in fours (kern_qinput). For each panel
 * of GEMM_TP tokens, 2 rows × 4 tokens at a time run the definition's steps,
 * their chains in registers and their A lanes in the workspace, over chunks
 * of GEMM_KC columns (the panel's chunk stays in L1). Every (row, token)
 * goes through the same IEEE operations in the same order as in
 * kern_qdot_avx512. */
/* Row r's codes decoded into its pair's tile (qp: the pair's first float,
 * the row's slot i) and its lane scales (sv[blocks·16]) as qrows512m reads
 * them; sc: scratch of ng16 + 16 floats. */
AVX512 INLINE void gemm_decode512(const struct wmat *w, int64_t r, int64_t stride, float *qp, int i, float *sv,
                                  float *sc, const int gs, const int bits, const int mode)
{
    const int per_word = 32 / bits, blk = 16 * per_word;
    const int64_t ng = w->cols / gs, words = w->cols / per_word, ng16 = (ng + 15) / 16 * 16;
    const uint8_t *codes = w->w + (size_t)r * w->row_stride, *sr = w->s + (size_t)r * w->srow_bytes;
    const __m512i gidx = _mm512_setr_epi32(GROUP_OF_LANE(0), GROUP_OF_LANE(1), GROUP_OF_LANE(2), GROUP_OF_LANE(3),
                                           GROUP_OF_LANE(4), GROUP_OF_LANE(5), GROUP_OF_LANE(6), GROUP_OF_LANE(7),
                                           GROUP_OF_LANE(8), GROUP_OF_LANE(9), GROUP_OF_LANE(10), GROUP_OF_LANE(11),
                                           GROUP_OF_LANE(12), GROUP_OF_LANE(13), GROUP_OF_LANE(14), GROUP_OF_LANE(15));
    memset(sc, 0, (size_t)(ng16 + 16) * sizeof *sc);
    kern_mx_scales((enum qmode)mode, sr, sc, ng);
    for (int64_t b = 0; b * blk < stride; b++) {
        const __m512i v = _mm512_maskz_loadu_epi32(mask16(words - 16 * b), codes + b * blk * bits / 8);
#pragma GCC unroll 8
        for (int k = 0; k < per_word; k++)
            _mm512_store_ps(qp + 2 * b * blk + (2 * k + i) * 16, code512(v, k, bits, mode));
        /* lane l's group's scale; zero for the lanes past the row's words (their groups are past ng) */
        _mm512_store_ps(sv + 16 * b, _mm512_permutexvar_ps(gidx, _mm512_loadu_ps(sc + b * blk / gs)));
    }
}

/* Blocks [b0, b1) for R rows of a pair (qp: the pair's tile) and T tokens of
 * a four (xp: the four's copy): per block the definition's two chains of
 * products, then its step into the A lanes (row i, token u at acc +
 * i·accstride + 16u). */
AVX512 INLINE void gemm_piece512(const float *qp, const float *sv, int64_t svstride, const float *xp, int64_t b0,
                                 int64_t b1, float *acc, int64_t accstride, const int R, const int T, const int bits)
{
    const int per_word = 32 / bits, blk = 16 * per_word;
    for (int64_t b = b0; b < b1; b++) {
        const float *q = qp + 2 * b * blk, *x = xp + 4 * b * blk;
        __m512 p0[2][4], p1[2][4]; /* the definition's two chains: even and odd codes */
#pragma GCC unroll 8
        for (int k = 0; k < per_word; k += 2)
#pragma GCC unroll 4
            for (int u = 0; u < T; u++) {
                __m512 x0 = _mm512_load_ps(x + (4 * k + u) * 16), x1 = _mm512_load_ps(x + (4 * k + 4 + u) * 16);
                __asm__("" : "+v"(x0), "+v"(x1)); /* in registers for both rows, not an operand of each FMA */
#pragma GCC unroll 2
                for (int i = 0; i < R; i++) {
                    const __m512 q0 = _mm512_load_ps(q + (2 * k + i) * 16), q1 = _mm512_load_ps(q + (2 * k + 2 + i) * 16);
                    p0[i][u] = k == 0 ? _mm512_mul_ps(x0, q0) : _mm512_fmadd_ps(x0, q0, p0[i][u]);
                    p1[i][u] = k == 0 ? _mm512_mul_ps(x1, q1) : _mm512_fmadd_ps(x1, q1, p1[i][u]);
                }
            }
#pragma GCC unroll 2
        for (int i = 0; i < R; i++) {
            const __m512 s = _mm512_load_ps(sv + i * svstride + 16 * b);
#pragma GCC unroll 4
            for (int u = 0; u < T; u++) {
                float *a = acc + i * accstride + 16 * u;
                _mm512_store_ps(a, _mm512_fmadd_ps(_mm512_add_ps(p0[i][u], p1[i][u]), s, _mm512_load_ps(a)));
            }
        }
    }
}

/* The common piece, 2 rows × 4 tokens, on its own for each width (inlined
 * into the large dispatch, GCC spilled its 16 chains). */
__attribute__((noinline)) AVX512 static void gemm_2x4_b4(const float *qp, const float *sv, int64_t svstride,
                                                         const float *xp, int64_t b0, int64_t b1, float *acc,
                                                         int64_t accstride)
{
    gemm_piece512(qp, sv, svstride, xp, b0, b1, acc, accstride, 2, 4, 4);
}

__attribute__((noinline)) AVX512 static void gemm_2x4_b8(const float *qp, const float *sv, int64_t svstride,
                                                         const float *xp, int64_t b0, int64_t b1, float *acc,
                                                         int64_t accstride)
{
    gemm_piece512(qp, sv, svstride, xp, b0, b1, acc, accstride, 2, 4, 8);
}

#define GEMM_PIECE(R, T)                                                                                             \
    gemm_piece512(qp, svr, svs, xq, b0, b1, ar, GEMM_TP * 16, R, T, bits)

AVX512 INLINE void qgemm512m(const struct wmat *w, const struct kern_qinput *in, int64_t n, float *y, int64_t row0,
                             int64_t row1, float *ws, const int gs, const int bits, const int mode)
{
    const int per_word = 32 / bits, blk = 16 * per_word;
    const int64_t rows = row1 - row0, stride = in->stride, blocks = stride / blk, svs = 16 * blocks;
    float *qf = ws, *sv = qf + (rows + 1) / 2 * 2 * stride, *acc = sv + rows * svs;
    float *sc = acc + rows * GEMM_TP * 16; /* [groups rounded up to 16, + 16]; all 64-byte aligned: every size is a multiple of 16 floats */
    for (int64_t r = 0; r < rows; r++)
        gemm_decode512(w, row0 + r, stride, qf + r / 2 * 2 * stride, (int)(r % 2), sv + r * svs, sc, gs, bits, mode);
    for (int64_t t0 = 0; t0 < n; t0 += GEMM_TP) {
        const int64_t tp = n - t0 < GEMM_TP ? n - t0 : GEMM_TP;
        memset(acc, 0, (size_t)(rows * GEMM_TP * 16) * sizeof *acc);
        for (int64_t b0 = 0; b0 < blocks; b0 += GEMM_KC / blk) {
            const int64_t b1 = b0 + GEMM_KC / blk < blocks ? b0 + GEMM_KC / blk : blocks;
            for (int64_t r = 0; r < rows; r += 2)
                for (int64_t u = 0; u < tp; u += 4) {
                    const float *qp = qf + r * stride, *svr = sv + r * svs, *xq = in->xd + (t0 + u) * stride;
                    float *ar = acc + (r * GEMM_TP + u) * 16;
                    const int left = tp - u >= 4 ? 4 : (int)(tp - u);
                    if (rows - r >= 2) {
                        switch (left) {
                        case 4: (bits == 4 ? gemm_2x4_b4 : gemm_2x4_b8)(qp, svr, svs, xq, b0, b1, ar, GEMM_TP * 16); break;
                        case 3: GEMM_PIECE(2, 3); break;
                        case 2: GEMM_PIECE(2, 2); break;
                        default: GEMM_PIECE(2, 1); break;
                        }
                    } else {
                        switch (left) {
                        case 4: GEMM_PIECE(1, 4); break;
                        case 3: GEMM_PIECE(1, 3); break;
                        case 2: GEMM_PIECE(1, 2); break;
                        default: GEMM_PIECE(1, 1); break;
                        }
                    }
                }
        }
        for (int64_t r = 0; r < rows; r++) /* + 0 (kern_qdot_ref's bias lanes), then the lanes summed */
            for (int64_t u = 0; u < tp; u++)
                y[(t0 + u) * w->rows + row0 + r] =
                    hsum512(_mm512_add_ps(_mm512_load_ps(acc + (r * GEMM_TP + u) * 16), _mm512_setzero_ps()));
    }
}

AVX512 void kern_qgemm_avx512(const struct wmat *w, const struct kern_qinput *in, int64_t n, float *y, int64_t row0,
                              int64_t row1, void *ws)
{
    switch (w->mode == QM_AFFINE ? w->bits : -(int)w->mode) {
    case 4: kern_agemm_tile(&agemm_b4, w, in, n, y, row0, row1, ws); break;
    case 8: kern_agemm_tile(&agemm_b8, w, in, n, y, row0, row1, ws); break;
    case -QM_MXFP4: qgemm512m(w, in, n, y, row0, row1, ws, 32, 4, QM_MXFP4); break;
    case -QM_NVFP4: qgemm512m(w, in, n, y, row0, row1, ws, 16, 4, QM_NVFP4); break;
    default: qgemm512m(w, in, n, y, row0, row1, ws, 32, 8, QM_MXFP8); break;
    }
}

/* ---- kern_matvec_bf16_ref as a blocked GEMM (steps of many tokens) ----
 *
 * The tile's rows are converted once into floats (zeros up to a whole 32
 * columns); then, for each panel of GEMM_TP tokens and each chunk of
 * GEMM_KC columns, R rows × T tokens at a time, their two chains in
 * registers and in the workspace between chunks. Every (row, token) goes
 * through the FMAs of bf16rows512 in the same order. */

/* Columns [j0, j1) (whole 32s) for R rows (q: the first row's floats, qs
 * apart) and T tokens (x: the first token's input, xs apart); the chains of
 * row i, token u at acc + (i·GEMM_TP + u)·32. */
AVX512 INLINE void bgemm_piece512(const float *q, int64_t qs, const float *x, int64_t xs, int64_t j0, int64_t j1,
                                  float *acc, const int R, const int T)
{
    __m512 c[24]; /* chain h of row i, token u at c[(i·T + u)·2 + h] */
#pragma GCC unroll 24
    for (int k = 0; k < 2 * R * T; k++)
        c[k] = _mm512_load_ps(acc + (k / (2 * T) * GEMM_TP + k / 2 % T) * 32 + 16 * (k % 2));
    for (int64_t j = j0; j < j1; j += 32)
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            __m512 qv[4];
#pragma GCC unroll 4
            for (int i = 0; i < R; i++)
                qv[i] = _mm512_load_ps(q + i * qs + j + 16 * h);
#pragma GCC unroll 4
            for (int u = 0; u < T; u++) {
                __m512 xv = _mm512_loadu_ps(x + u * xs + j + 16 * h);
                __asm__("" : "+v"(xv)); /* in a register for all R rows, not an operand of each FMA */
#pragma GCC unroll 4
                for (int i = 0; i < R; i++)
                    c[(i * T + u) * 2 + h] = _mm512_fmadd_ps(xv, qv[i], c[(i * T + u) * 2 + h]);
            }
        }
#pragma GCC unroll 24
    for (int k = 0; k < 2 * R * T; k++)
        _mm512_store_ps(acc + (k / (2 * T) * GEMM_TP + k / 2 % T) * 32 + 16 * (k % 2), c[k]);
}

__attribute__((noinline)) AVX512 static void bgemm_3x4(const float *q, int64_t qs, const float *x, int64_t xs,
                                                       int64_t j0, int64_t j1, float *acc)
{
    bgemm_piece512(q, qs, x, xs, j0, j1, acc, 3, 4);
}

#define BGEMM_PIECE(R, T)                                                                                              \
    ((R) * 4 + (T) == 16 ? bgemm_3x4(qr, cols32, xr, cols, j0, j1, ar)                                                 \
                         : bgemm_piece512(qr, cols32, xr, cols, j0, j1, ar, R, T))

AVX512 void kern_bf16gemm_avx512(const struct wmat *w, const float *x, int64_t n, float *y, int64_t row0,
                                 int64_t row1, void *ws)
{
    const int64_t rows = row1 - row0, cols = w->cols, cols32 = (cols + 31) / 32 * 32, full = cols / 32 * 32;
    float *qf = ws, *acc = qf + rows * cols32;
    for (int64_t r = 0; r < rows; r++) {
        quant_to_f32_avx512(DT_BF16, w->w + (size_t)(row0 + r) * w->row_stride, qf + r * cols32, cols);
        memset(qf + r * cols32 + cols, 0, (size_t)(cols32 - cols) * sizeof *qf);
    }
    for (int64_t t0 = 0; t0 < n; t0 += GEMM_TP) {
        const int64_t tp = n - t0 < GEMM_TP ? n - t0 : GEMM_TP;
        memset(acc, 0, (size_t)(rows * GEMM_TP * 32) * sizeof *acc);
        BGEMM_CHUNKS(BGEMM_PIECE)
        for (int64_t r = 0; r < rows; r++) /* the columns past the last 32, then the chains added and summed */
            for (int64_t u = 0; u < tp; u++) {
                float *a = acc + (r * GEMM_TP + u) * 32;
                const float *xu = x + (t0 + u) * cols;
                __m512 c0 = _mm512_load_ps(a), c1 = _mm512_load_ps(a + 16);
                for (int64_t j = full; j < cols; j += 16) {
                    __m512 p = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mask16(cols - j), xu + j),
                                               _mm512_load_ps(qf + r * cols32 + j), j == full ? c0 : c1);
                    c0 = j == full ? p : c0;
                    c1 = j == full ? c1 : p;
                }
                y[(t0 + u) * w->rows + row0 + r] = hsum512(_mm512_add_ps(c0, c1));
            }
    }
}

/* ---- kern_matmul_ref for every other weight type, 16 rows in the lanes ----
 *
 * 2/3/5/6-bit affine and f16/f32 weights have no fused kernel: their
 * definition is kern_matmul_ref's, per row and token one sum over the
 * columns in order of the product rounded, then added. Here lane i holds row
 * r0 + i: the 16 rows are converted once per call into a column-major block
 * (a blocked matrix's whole blocks by refgemm_block512, other rows by
 * kern_row_f32 and gathers: the reference's values), then for up to 8 tokens
 * at a time each column's products and sums run in every lane. */
#define REF_TOKENS 8

AVX512 INLINE void refgemm_rows512(const float *wt, const float *x, int64_t cols, int64_t t0, const int T, float *y,
                                   int64_t ldy, int64_t r0, __mmask16 m)
{
    __m512 acc[REF_TOKENS];
#pragma GCC unroll 8
    for (int u = 0; u < T; u++)
        acc[u] = _mm512_setzero_ps();
    for (int64_t j = 0; j < cols; j++) {
        const __m512 wv = _mm512_load_ps(wt + 16 * j);
#pragma GCC unroll 8
        for (int u = 0; u < T; u++)
            acc[u] = _mm512_add_ps(acc[u], _mm512_mul_ps(_mm512_set1_ps(x[(t0 + u) * cols + j]), wv));
    }
#pragma GCC unroll 8
    for (int u = 0; u < T; u++)
        _mm512_mask_storeu_ps(y + (t0 + u) * ldy + r0, m, acc[u]);
}

/* Block r0 / 16 of a blocked affine matrix of `bits` bits column-major into
 * wt: a group's word k of its 16 rows is one 64-byte line of the record, code
 * c of every row bits c·bits.. of its words (across two words where it
 * straddles them), then scale·q + bias as dequant_affine_row rounds. 32 codes
 * fill `bits` words: each such period unrolled, its shifts constants. The
 * records are prefetched PREFETCH bytes ahead. One token (`one`): each
 * column's values go straight into the token's chains, x times them, and
 * the sums to y (no wt). */
AVX512 INLINE void refgemm_block512(const struct wmat *w, int64_t r0, float *wt, const float *x, float *y, const int bits,
                                    const bool one)
{
    const __m512i mask = _mm512_set1_epi32((int)((1u << bits) - 1));
    const size_t rec_bytes = KERN_BLOCK_ROWS * (w->row_bytes + 2 * w->srow_bytes) / (size_t)(w->cols / w->gs);
    __m512 acc = _mm512_setzero_ps();
    for (int64_t g = 0; g < w->cols / w->gs; g++) {
        const uint8_t *rec = w->w + kern_block_off(w, r0 / KERN_BLOCK_ROWS, g);
        for (size_t o = 0; o < rec_bytes; o += 64)
            _mm_prefetch((const char *)(rec + PREFETCH + o), _MM_HINT_T0);
        const __m512 sc = params16(w, w->s, rec, r0, g, 0xFFFF), bi = params16(w, w->b, rec, r0, g, 0xFFFF);
        for (int p = 0; p < w->gs / 32; p++) {
            const uint8_t *words = rec + 64 * bits * p;
            const int64_t j = g * w->gs + 32 * p;
#pragma GCC unroll 32
            for (int c = 0; c < 32; c++) {
                const int k = c * bits / 32, sh = c * bits % 32;
                __m512i v = _mm512_srli_epi32(_mm512_loadu_si512(words + 64 * k), sh);
                if (sh + bits > 32)
                    v = _mm512_or_si512(v, _mm512_slli_epi32(_mm512_loadu_si512(words + 64 * (k + 1)), 32 - sh));
                const __m512 wv = _mm512_add_ps(_mm512_mul_ps(sc, _mm512_cvtepi32_ps(_mm512_and_si512(v, mask))), bi);
                if (one)
                    acc = _mm512_add_ps(acc, _mm512_mul_ps(_mm512_set1_ps(x[j + c]), wv));
                else
                    _mm512_store_ps(wt + 16 * (j + c), wv);
            }
        }
    }
    if (one)
        _mm512_storeu_ps(y + r0, acc);
}
#define REF_BLOCK512(B) refgemm_block512(w, r0, wt, x, y, B, false)
#define REF_ONE512(B) refgemm_block512(w, r0, wt, x, y, B, true)

AVX512 void kern_refgemm_avx512(const struct wmat *w, const float *x, int64_t n, float *y, int64_t row0,
                                int64_t row1, void *ws)
{
    const int64_t cols = w->cols;
    float *wt = ws, *rows = wt + 16 * cols; /* [cols, 16], [16, cols] */
    const __m512i idx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                           _mm512_set1_epi32((int)cols));
    for (int64_t r0 = row0; r0 < row1; r0 += 16) {
        const int64_t nr = row1 - r0 < 16 ? row1 - r0 : 16;
        const bool whole = kern_whole_block(w, r0, nr);
        if (whole && n == 1) {
            KERN_BY_BITS(w->bits, REF_ONE512)
            continue;
        }
        if (whole) {
            KERN_BY_BITS(w->bits, REF_BLOCK512)
        } else {
            for (int64_t i = 0; i < nr; i++)
                kern_row_f32(w, r0 + i, rows + i * cols);
            for (int64_t j = 0; j < cols; j++) /* the rows absent read as zeros */
                _mm512_store_ps(wt + 16 * j, _mm512_mask_i32gather_ps(_mm512_setzero_ps(), mask16(nr), idx, rows + j, 4));
        }
        for (int64_t t0 = 0; t0 < n; t0 += REF_TOKENS) {
            switch (n - t0 < REF_TOKENS ? n - t0 : REF_TOKENS) {
            case 1: refgemm_rows512(wt, x, cols, t0, 1, y, w->rows, r0, mask16(nr)); break;
            case 2: refgemm_rows512(wt, x, cols, t0, 2, y, w->rows, r0, mask16(nr)); break;
            case 3: refgemm_rows512(wt, x, cols, t0, 3, y, w->rows, r0, mask16(nr)); break;
            case 4: refgemm_rows512(wt, x, cols, t0, 4, y, w->rows, r0, mask16(nr)); break;
            case 5: refgemm_rows512(wt, x, cols, t0, 5, y, w->rows, r0, mask16(nr)); break;
            case 6: refgemm_rows512(wt, x, cols, t0, 6, y, w->rows, r0, mask16(nr)); break;
            case 7: refgemm_rows512(wt, x, cols, t0, 7, y, w->rows, r0, mask16(nr)); break;
            default: refgemm_rows512(wt, x, cols, t0, 8, y, w->rows, r0, mask16(nr)); break;
            }
        }
    }
}
