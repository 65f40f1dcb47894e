/* neon.c - the arm64 twins: the fused dequantize + dot products (the bits of
 * kern_qdot_ref and kern_matvec_bf16_ref), attention's dot and axpy, and the
 * int8 kernels on the dot-product instructions (the bits of kern_q8dot_ref).
 * The definitions' 16 lanes are four 4-lane registers here; every step is
 * the definition's IEEE operation (vfmaq_f32 is one fused multiply-add), so a
 * result is the same on x86 and arm64. The scheme of the fused kernels is
 * described in x86/avx512.c. */
#include <arm_neon.h>
#include <math.h>
#include <string.h>

#include "core/bytes.h"
#include "core/dtype.h"
#include "kernels/arm/arm.h"
#include "quant/ggml.h"

#define INLINE static inline __attribute__((always_inline))
#if defined(__clang__)
#define DOTPROD __attribute__((target("dotprod")))
#else
#define DOTPROD __attribute__((target("arch=armv8.2-a+dotprod")))
#endif
#define NTB 2 /* tokens sharing one decode of a weight row */

/* Lanes l and l + w added for w = 8, 4, 2, 1: kern_lanes_sum16 on v[0..3]
 * (lanes 0-3, 4-7, 8-11, 12-15). */
INLINE float sum16(const float32x4_t v[4])
{
    float32x4_t t = vaddq_f32(vaddq_f32(v[0], v[2]), vaddq_f32(v[1], v[3]));
    float32x2_t u = vadd_f32(vget_low_f32(t), vget_high_f32(t));
    return vget_lane_f32(u, 0) + vget_lane_f32(u, 1);
}

/* The last r < 16 floats of a vector in t[16], zeros after them. */
INLINE const float *tail16(float *t, const float *p, int64_t r)
{
    memset(t, 0, 16 * sizeof *t);
    return memcpy(t, p, (size_t)r * sizeof *t);
}

/* kern_dot_ref's order for H query rows (q + u·n) against K keys side by
 * side: acc[u][k][c] holds lanes 4c .. 4c+3 of row u and key k; a key's
 * vectors are loaded once for all the rows, a row's once for all the keys.
 * The tail's absent lanes add 0·0, which leaves a lane as it is. */
INLINE void dotsk_neon(const float *q, const int H, const float *const *b, const int K, int64_t n, float *out,
                       int64_t ld, const float *const *pf)
{
    float32x4_t acc[4][4][4];
    for (int u = 0; u < H; u++)
        for (int k = 0; k < K; k++)
            for (int c = 0; c < 4; c++)
                acc[u][k][c] = vdupq_n_f32(0.0f);
    float tq[4][16], tb[4][16]; /* the tail, zero-padded */
    for (int64_t i = 0; i < n; i += 16) {
        const float *qu[4], *bk[4];
        for (int k = 0; k < K; k++) {
            bk[k] = n - i >= 16 ? b[k] + i : tail16(tb[k], b[k] + i, n - i);
            if (pf)
                __builtin_prefetch(pf[k] + i);
        }
        for (int u = 0; u < H; u++)
            qu[u] = n - i >= 16 ? q + u * n + i : tail16(tq[u], q + u * n + i, n - i);
        for (int c = 0; c < 4; c++) {
            float32x4_t x[4];
            for (int k = 0; k < K; k++)
                x[k] = vld1q_f32(bk[k] + 4 * c);
            for (int u = 0; u < H; u++) {
                const float32x4_t a = vld1q_f32(qu[u] + 4 * c);
                for (int k = 0; k < K; k++)
                    acc[u][k][c] = vfmaq_f32(acc[u][k][c], a, x[k]);
            }
        }
    }
    for (int u = 0; u < H; u++)
        for (int k = 0; k < K; k++)
            out[u * ld + k] = sum16(acc[u][k]);
}

float kern_dot_neon(const float *a, const float *b, int64_t n)
{
    float out;
    dotsk_neon(a, 1, &b, 1, n, &out, 1, NULL);
    return out;
}

/* H heads' scores, 4/H keys at a time, the rest one by one. */
INLINE void dots_heads_neon(const float *q, const int H, const float *const *b, int m, int64_t n, float *out,
                            int64_t ld)
{
    const int K = 4 / H, A = K < DOTS_AHEAD ? DOTS_AHEAD : K;
    int j = 0;
    for (; j + K <= m; j += K)
        dotsk_neon(q, H, b + j, K, n, out + j, ld, j + A + K <= m ? b + j + A : NULL);
    for (; j < m; j++)
        dotsk_neon(q, H, b + j, 1, n, out + j, ld, NULL);
}

/* Heads 4 at a time, then 2 and 1. */
void kern_dots_neon(const float *q, int nh, const float *const *b, int m, int64_t n, float *out, int64_t ld)
{
    int u = 0;
    for (; u + 4 <= nh; u += 4)
        dots_heads_neon(q + u * n, 4, b, m, n, out + u * ld, ld);
    if (u + 2 <= nh) {
        dots_heads_neon(q + u * n, 2, b, m, n, out + u * ld, ld);
        u += 2;
    }
    if (u < nh)
        dots_heads_neon(q + u * n, 1, b, m, n, out + u * ld, ld);
}

/* Columns i .. i + 15 of H heads' outputs (four vectors each), kept in
 * registers while the values are added in order: a value's vectors are
 * loaded once for all the heads; use[j] (kern_weights_used) names the heads
 * that add value j. */
INLINE void axpyk_neon(float *y, int64_t ld, const int H, const float *w, int64_t wld, const float *const *x,
                       const unsigned *use, int m, int64_t i, int64_t n)
{
    float32x4_t acc[4][4], v[4];
    for (int u = 0; u < H; u++)
        for (int c = 0; c < 4; c++)
            acc[u][c] = vld1q_f32(y + u * ld + i + 4 * c);
    for (int j = 0; j < m; j++) {
        if (!use[j])
            continue;
        for (int c = 0; c < 4; c++)
            v[c] = vld1q_f32(x[j] + i + 4 * c);
        if (i + AXPY_AHEAD < n)
            __builtin_prefetch(x[j] + i + AXPY_AHEAD);
        for (int u = 0; u < H; u++)
            if (use[j] >> u & 1)
                for (int c = 0; c < 4; c++)
                    acc[u][c] = vfmaq_n_f32(acc[u][c], v[c], w[u * wld + j]);
    }
    for (int u = 0; u < H; u++)
        for (int c = 0; c < 4; c++)
            vst1q_f32(y + u * ld + i + 4 * c, acc[u][c]);
}

/* H heads, 16 columns at a time; the tail element by element, the same
 * operations. */
INLINE void axpy_heads_neon(float *y, int64_t ld, const int H, const float *w, int64_t wld, const float *const *x,
                            int m, int64_t n)
{
    unsigned use[16];
    kern_weights_used(w, wld, H, x, m, use);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        axpyk_neon(y, ld, H, w, wld, x, use, m, i, n);
    for (; i < n; i++)
        for (int j = 0; j < m; j++)
            for (int u = 0; u < H; u++)
                if (use[j] >> u & 1)
                    y[u * ld + i] = fmaf(w[u * wld + j], x[j][i], y[u * ld + i]);
}

/* Values 16 at a time; heads 4 at a time, then 2 and 1. */
void kern_axpy_neon(float *y, int64_t ld, int nh, const float *w, int64_t wld, const float *const *x, int m, int64_t n)
{
    for (int j = 0; j < m; j += 16) {
        const int mj = m - j < 16 ? m - j : 16;
        int u = 0;
        for (; u + 4 <= nh; u += 4)
            axpy_heads_neon(y + u * ld, ld, 4, w + u * wld + j, wld, x + j, mj, n);
        if (u + 2 <= nh) {
            axpy_heads_neon(y + u * ld, ld, 2, w + u * wld + j, wld, x + j, mj, n);
            u += 2;
        }
        if (u < nh)
            axpy_heads_neon(y + u * ld, ld, 1, w + u * wld + j, wld, x + j, mj, n);
    }
}

/* ---- 4/8-bit affine: kern_qdot_ref, one row per lane (avx512.c's arows512) ---- */

/* NB sets of 16 rows from r0, 16 apart (m: bit l for row r0 + l in range),
 * for tokens t0 .. t0+T-1, in four registers of 4 lanes; blocked, r0
 * starts a block. A and B in memory. */
INLINE void arows_neon(const struct wmat *w, const struct kern_qinput *in, int64_t t0, float *y, int64_t r0,
                       uint32_t m, const int NB, const int T, const int bits)
{
    const int per_word = 32 / bits, wpg = w->gs / per_word;
    const int64_t ng = w->cols / w->gs, stride = in->stride;
    float A[NTB][16] = {{0}}, Bt[NTB][16] = {{0}};
    for (int64_t g = 0; g < ng; g++) {
        const uint8_t *base[NTB];
        for (int b = 0; b < NB; b++)
            base[b] = w->blocked ? w->w + kern_block_off(w, r0 / 16 + b, g)
                                 : w->w + (size_t)(r0 + 16 * b) * w->row_stride + (size_t)(4 * g * wpg);
        const float *x = in->xd + t0 * stride + g * w->gs;
        /* chain b·T + u, lanes 4j .. 4j+3, set by its first product: the even words' (pe), then the odd words' (p) */
        float32x4_t p[NTB][4], pe[NTB][4];
        for (int n = 0; n < wpg; n++) {
            const int i = n < wpg / 2 ? 2 * n : 2 * (n - wpg / 2) + 1;
            if (n == wpg / 2)
                memcpy(pe, p, sizeof pe);
            uint32x4_t v[NTB][4];
            for (int b = 0; b < NB; b++) {
                if (w->blocked) {
                    for (int j = 0; j < 4; j++)
                        v[b][j] = vreinterpretq_u32_u8(vld1q_u8(base[b] + 64 * i + 16 * j));
                } else {
                    uint32_t words[16];
                    for (int l = 0; l < 16; l++)
                        words[l] = m >> l & 1 ? rd_u32le(base[b] + (size_t)l * w->row_stride + 4 * i) : 0;
                    for (int j = 0; j < 4; j++)
                        v[b][j] = vld1q_u32(words + 4 * j);
                }
            }
#pragma GCC unroll 8
            for (int k = 0; k < per_word; k++)
                for (int u = 0; u < T; u++) {
                    const float32x4_t xb = vdupq_n_f32(x[u * stride + i * per_word + k]);
                    for (int b = 0; b < NB; b++)
                        for (int j = 0; j < 4; j++) {
                            uint32x4_t qi = k == per_word - 1 ? vshlq_u32(v[b][j], vdupq_n_s32(bits - 32))
                                                              : vandq_u32(v[b][j], vdupq_n_u32(((1u << bits) - 1) << (bits * k)));
                            float32x4_t q = vcvtq_f32_u32(qi);
                            p[b * T + u][j] = i < 2 && k == 0 ? vmulq_f32(xb, q) : vfmaq_f32(p[b * T + u][j], xb, q);
                        }
                }
        }
        for (int b = 0; b < NB; b++) {
            float sc[16], bi[16];
            kern_params16(w, w->s, r0 + 16 * b, g, m, sc);
            kern_params16(w, w->b, r0 + 16 * b, g, m, bi);
            for (int u = 0; u < T; u++) {
                const float32x4_t xs = vdupq_n_f32(in->xsum[(t0 + u) * ng + g]);
                for (int j = 0; j < 4; j++) {
                    float *a = A[b * T + u] + 4 * j, *bt = Bt[b * T + u] + 4 * j;
                    vst1q_f32(a, vfmaq_f32(vld1q_f32(a), vaddq_f32(pe[b * T + u][j], p[b * T + u][j]), vld1q_f32(sc + 4 * j)));
                    vst1q_f32(bt, vfmaq_f32(vld1q_f32(bt), vld1q_f32(bi + 4 * j), xs));
                }
            }
        }
    }
    for (int b = 0; b < NB; b++)
        for (int u = 0; u < T; u++) {
            float out[16];
            for (int j = 0; j < 4; j++)
                vst1q_f32(out + 4 * j, vaddq_f32(vld1q_f32(A[b * T + u] + 4 * j), vld1q_f32(Bt[b * T + u] + 4 * j)));
            for (int l = 0; l < 16; l++)
                if (m >> l & 1)
                    y[(t0 + u) * w->rows + r0 + 16 * b + l] = out[l];
        }
}

/* Rows [row0, row1) for tokens t0 .. t0+T-1: whole sets two at a time (one
 * token) or one, a partial set (a blocked matrix's first, the last) alone. */
INLINE void arange_neon(const struct wmat *w, const struct kern_qinput *in, int64_t t0, float *y, int64_t row0,
                        int64_t row1, const int T, const int bits)
{
    const int NB = T == 1 ? 2 : 1;
    int64_t r = w->blocked ? row0 / 16 * 16 : row0;
    if (r < row0) {
        arows_neon(w, in, t0, y, r, kern_rows_mask(r, row0, row1), 1, T, bits);
        r += 16;
    }
    for (; r + 16 * NB <= row1; r += 16 * NB)
        arows_neon(w, in, t0, y, r, 0xFFFF, NB, T, bits);
    for (; r < row1; r += 16)
        arows_neon(w, in, t0, y, r, kern_rows_mask(r, row0, row1), 1, T, bits);
}

/* ---- microscaling (mxfp4, nvfp4, mxfp8): kern_qdot_ref (avx2.c's qrows256m on 4 lanes) ---- */

#define MX_PARAMS 256 /* group scales of a row converted at once */

/* Code k of each word of v as its value: E2M1's three magnitude bits at the
 * top of a float's mantissa times 2^126, E4M3's seven from bit 20 times
 * 2^120 (exact, subnormals included: the values of avx2.c's code256), the
 * sign or'ed in. */
INLINE float32x4_t mcode_neon(uint32x4_t v, const int k, const int bits, const int mode)
{
    const uint32x4_t c = vandq_u32(vshlq_u32(v, vdupq_n_s32(-bits * k)), vdupq_n_u32((1u << bits) - 1));
    const bool fp8 = mode == QM_MXFP8;
    const uint32x4_t m = vshlq_u32(vandq_u32(c, vdupq_n_u32(fp8 ? 0x7F : 7)), vdupq_n_s32(fp8 ? 20 : 22));
    const float32x4_t mag = vmulq_f32(vreinterpretq_f32_u32(m), vdupq_n_f32(fp8 ? 0x1p120f : 0x1p126f));
    const uint32x4_t sign = vshlq_u32(vandq_u32(c, vdupq_n_u32(fp8 ? 0x80 : 8)), vdupq_n_s32(fp8 ? 24 : 28));
    return vreinterpretq_f32_u32(vorrq_u32(vreinterpretq_u32_f32(mag), sign));
}

/* Four code words from c, of which `left` are the row's (none past them: zeros). */
INLINE uint32x4_t mwords_neon(const uint8_t *c, int64_t left)
{
    uint32_t part[4] = {0};
    if (left >= 4)
        return vreinterpretq_u32_u8(vld1q_u8(c));
    if (left > 0)
        memcpy(part, c, (size_t)(4 * left));
    return vld1q_u32(part);
}

/* Rows [row0, row1) for tokens t0 .. t0+T-1 (T, gs, bits and mode constants
 * once inlined): per block of 16 words, a quarter (4 words, one per lane) at
 * a time, the q·x products in two chains, summed, times each lane's group
 * scale into A. A quarter with no words of the row is skipped: its lanes
 * stay +0, as they do in the definition. */
INLINE void mrows_neon(const struct wmat *w, const struct kern_qinput *in, int64_t t0, const int T, float *y,
                       int64_t row0, int64_t row1, const int gs, const int bits, const int mode)
{
    const int per_word = 32 / bits, blk = 16 * per_word;
    const int64_t ng = w->cols / gs, stride = in->stride;
    float sc[MX_PARAMS + 16]; /* zero past the chunk's groups, read by absent lanes */
    for (int64_t r = row0; r < row1; r++) {
        const uint8_t *codes = w->w + (size_t)r * w->row_stride, *sr = w->s + (size_t)r * w->srow_bytes;
        float32x4_t acc[NTB][4];
        for (int u = 0; u < T; u++)
            for (int h = 0; h < 4; h++)
                acc[u][h] = vdupq_n_f32(0.0f);
        for (int64_t g0 = 0; g0 < ng; g0 += MX_PARAMS) {
            const int64_t nb = ng - g0 < MX_PARAMS ? ng - g0 : MX_PARAMS, j0 = g0 * gs, j1 = (g0 + nb) * gs;
            kern_mx_scales((enum qmode)mode, sr + g0, sc, nb);
            memset(sc + nb, 0, 16 * sizeof *sc);
            const float *xb = in->xd + t0 * stride;
            for (int64_t j = j0; j < j1; j += blk) {
                const int64_t words = (j1 - j) / per_word; /* of the row from j: 16 or more but in its last block */
                for (int h = 0; h < 4 && 4 * h < words; h++) {
                    const uint32x4_t v = mwords_neon(codes + j * bits / 8 + 16 * h, words - 4 * h);
                    float sv[4];
                    for (int l = 0; l < 4; l++)
                        sv[l] = sc[(j - j0) / gs + (4 * h + l) * per_word / gs];
                    float32x4_t p[NTB][2];
#pragma GCC unroll 8
                    for (int k = 0; k < per_word; k++) {
                        const float32x4_t q = mcode_neon(v, k, bits, mode);
                        for (int u = 0; u < T; u++) {
                            const float32x4_t xv = vld1q_f32(xb + u * stride + j + 16 * k + 4 * h);
                            p[u][k & 1] = k < 2 ? vmulq_f32(xv, q) : vfmaq_f32(p[u][k & 1], xv, q);
                        }
                    }
                    for (int u = 0; u < T; u++)
                        acc[u][h] = vfmaq_f32(acc[u][h], vaddq_f32(p[u][0], p[u][1]), vld1q_f32(sv));
                }
            }
        }
        const float32x4_t zero = vdupq_n_f32(0.0f); /* + 0: kern_qdot_ref's bias lanes */
        for (int u = 0; u < T; u++) {
            float32x4_t s[4];
            for (int h = 0; h < 4; h++)
                s[h] = vaddq_f32(acc[u][h], zero);
            y[(t0 + u) * w->rows + r] = sum16(s);
        }
    }
}

#define MROWS_NEON(T)                                                                                                  \
    switch (w->mode) {                                                                                                 \
    case QM_MXFP4: mrows_neon(w, in, t0, T, y, row0, row1, 32, 4, QM_MXFP4); break;                                    \
    case QM_NVFP4: mrows_neon(w, in, t0, T, y, row0, row1, 16, 4, QM_NVFP4); break;                                    \
    default: mrows_neon(w, in, t0, T, y, row0, row1, 32, 8, QM_MXFP8); break;                                          \
    }

/* ---- ggml's block types (kern_gdot_ref): a block's codes decoded into the
 * scalar decoders' bytes, then the definition's lanes, up to 4 tokens a pass. */

/* 16 bytes as 32 codes at c: the low nibbles, then the high ones, each
 * ORed with the fifth bits hb (NULL: none). */
INLINE void nib16(const uint8_t *q, const uint8x16_t *hb, int8_t *c)
{
    const uint8x16_t v = vld1q_u8(q), m = vdupq_n_u8(0x0f);
    uint8x16_t lo = vandq_u8(v, m), hi = vshrq_n_u8(v, 4);
    if (hb)
        lo = vorrq_u8(lo, hb[0]), hi = vorrq_u8(hi, hb[1]);
    vst1q_u8((uint8_t *)c, lo);
    vst1q_u8((uint8_t *)c + 16, hi);
}

/* Bit j of the u32 at qh as byte j (16 where set), j < 16 in h[0], the rest in h[1]. */
INLINE void bits32(const uint8_t *qh, uint8x16_t h[2])
{
    static const uint8_t bit[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
    const uint8x16_t b = vld1q_u8(bit), v16 = vdupq_n_u8(16);
    for (int i = 0; i < 2; i++)
        h[i] = vandq_u8(vtstq_u8(vcombine_u8(vdup_n_u8(qh[2 * i]), vdup_n_u8(qh[2 * i + 1])), b), v16);
}

/* c[0..n) = kvalues[c[i]] (IQ4), or c[i] − sub. */
INLINE void remap(int8_t *c, int n, bool iq4, int sub)
{
    const int8x16_t kv = vld1q_s8(ggml_kvalues_iq4nl);
    for (int i = 0; i < n; i += 16) {
        const uint8x16_t v = vld1q_u8((const uint8_t *)c + i);
        vst1q_s8(c + i, iq4 ? vqtbl1q_s8(kv, v) : vsubq_s8(vreinterpretq_s8_u8(v), vdupq_n_s8((int8_t)sub)));
    }
}

static void gcodes_neon(enum qmode m, const uint8_t *b, int8_t *c)
{
    uint8x16_t h[2];
    const uint8x16_t m4 = vdupq_n_u8(0x0f), m30 = vdupq_n_u8(0x30), v16 = vdupq_n_u8(16);
    switch (m) {
    case QM_GGML_Q4_1: nib16(b + 4, NULL, c); break;
    case QM_GGML_Q5_0: bits32(b + 2, h), nib16(b + 6, h, c), remap(c, 32, false, 16); break;
    case QM_GGML_Q5_1: bits32(b + 4, h), nib16(b + 8, h, c); break;
    case QM_GGML_IQ4_NL: nib16(b + 2, NULL, c), remap(c, 32, true, 0); break;
    case QM_GGML_IQ4_XS:
        for (int j = 0; j < 8; j++)
            nib16(b + 8 + 16 * j, NULL, c + 32 * j);
        remap(c, 256, true, 0);
        break;
    case QM_GGML_Q4_K:
    case QM_GGML_Q5_K: {
        const bool five = m == QM_GGML_Q5_K;
        for (int k = 0; k < 4; k++)
            for (int half = 0; half < 2; half++) { /* bytes 16·half .. +15 of part k */
                const uint8x16_t v = vld1q_u8(b + (five ? 48 : 16) + 32 * k + 16 * half);
                uint8x16_t lo = vandq_u8(v, m4), hi = vshrq_n_u8(v, 4);
                if (five) {
                    const uint8x16_t qh = vld1q_u8(b + 16 + 16 * half);
                    lo = vorrq_u8(lo, vandq_u8(vtstq_u8(qh, vdupq_n_u8((uint8_t)(1u << 2 * k))), v16));
                    hi = vorrq_u8(hi, vandq_u8(vtstq_u8(qh, vdupq_n_u8((uint8_t)(2u << 2 * k))), v16));
                }
                vst1q_u8((uint8_t *)c + 64 * k + 16 * half, lo);
                vst1q_u8((uint8_t *)c + 64 * k + 32 + 16 * half, hi);
            }
        break;
    }
    case QM_GGML_Q6_K:
        for (int h6 = 0; h6 < 2; h6++)
            for (int half = 0; half < 2; half++) {
                const int o = 16 * half;
                const uint8x16_t v0 = vld1q_u8(b + 64 * h6 + o), v1 = vld1q_u8(b + 64 * h6 + 32 + o);
                const uint8x16_t qh = vld1q_u8(b + 128 + 32 * h6 + o);
                uint8_t *d = (uint8_t *)c + 128 * h6 + o;
                vst1q_u8(d, vorrq_u8(vandq_u8(v0, m4), vandq_u8(vshlq_n_u8(qh, 4), m30)));
                vst1q_u8(d + 32, vorrq_u8(vandq_u8(v1, m4), vandq_u8(vshlq_n_u8(qh, 2), m30)));
                vst1q_u8(d + 64, vorrq_u8(vshrq_n_u8(v0, 4), vandq_u8(qh, m30)));
                vst1q_u8(d + 96, vorrq_u8(vshrq_n_u8(v1, 4), vandq_u8(vshrq_n_u8(qh, 2), m30)));
            }
        remap(c, 256, false, 32);
        break;
    default:
        break;
    }
}

/* Codes c[0..15] as floats in f[0..3]. */
INLINE void cvt16(const int8_t *c, float32x4_t f[4])
{
    const int8x16_t v = vld1q_s8(c);
    const int16x8_t lo = vmovl_s8(vget_low_s8(v)), hi = vmovl_s8(vget_high_s8(v));
    f[0] = vcvtq_f32_s32(vmovl_s16(vget_low_s16(lo)));
    f[1] = vcvtq_f32_s32(vmovl_s16(vget_high_s16(lo)));
    f[2] = vcvtq_f32_s32(vmovl_s16(vget_low_s16(hi)));
    f[3] = vcvtq_f32_s32(vmovl_s16(vget_high_s16(hi)));
}

INLINE void grows_neon(const struct wmat *w, const struct kern_gtype *gt, const struct kern_qinput *in, int64_t t0,
                       const int T, float *y, int64_t row0, int64_t row1)
{
    const int64_t nb = w->cols / w->gs, bb = (int64_t)w->row_bytes / nb, ns = w->gs / gt->S, S = gt->S;
    const int64_t nsum = w->cols / KERN_GSUM;
    for (int64_t r = row0; r < row1; r++) {
        float32x4_t A[4][4];
        float B[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        for (int u = 0; u < T; u++)
            for (int c = 0; c < 4; c++)
                A[u][c] = vdupq_n_f32(0.0f);
        const uint8_t *row = w->w + (size_t)r * w->row_stride;
        for (int64_t bi = 0; bi < nb; bi++) {
            const uint8_t *blk = row + (size_t)(bi * bb);
            struct kern_gblock g;
            gt->params(blk, g.a, g.m);
            gcodes_neon(w->mode, blk, g.c);
            for (int64_t j = 0; j < ns; j++) {
                const int64_t col = bi * w->gs + j * S;
                float32x4_t c0[4], c1[4];
                cvt16(g.c + j * S, c0);
                if (S == 32)
                    cvt16(g.c + j * S + 16, c1);
                const float32x4_t a = vdupq_n_f32(g.a[j]);
                for (int u = 0; u < T; u++) {
                    const float *x = in->xd + (t0 + u) * in->stride + col;
                    for (int c = 0; c < 4; c++) {
                        float32x4_t p = vmulq_f32(vld1q_f32(x + 4 * c), c0[c]);
                        if (S == 32)
                            p = vfmaq_f32(p, vld1q_f32(x + 16 + 4 * c), c1[c]);
                        A[u][c] = vfmaq_f32(A[u][c], p, a);
                    }
                    if (gt->offsets)
                        B[u] = fmaf(g.m[j], in->xsum[(t0 + u) * nsum + col / KERN_GSUM], B[u]);
                }
            }
        }
        for (int u = 0; u < T; u++)
            y[(t0 + u) * w->rows + r] = sum16(A[u]) + B[u];
    }
}

static void gdot_neon(const struct wmat *w, const struct kern_qinput *in, int64_t n, float *y, int64_t row0,
                      int64_t row1)
{
    const struct kern_gtype *gt = kern_gtype_of(w->mode);
    for (int64_t t0 = 0; t0 < n; t0 += 4) {
        switch (n - t0 < 4 ? n - t0 : 4) {
        case 1: grows_neon(w, gt, in, t0, 1, y, row0, row1); break;
        case 2: grows_neon(w, gt, in, t0, 2, y, row0, row1); break;
        case 3: grows_neon(w, gt, in, t0, 3, y, row0, row1); break;
        default: grows_neon(w, gt, in, t0, 4, y, row0, row1); break;
        }
    }
}

void kern_qdot_neon(const struct wmat *w, const struct kern_qinput *in, int64_t n, float *y, int64_t row0,
                    int64_t row1)
{
    if (kern_gtype_of(w->mode)) {
        gdot_neon(w, in, n, y, row0, row1);
        return;
    }
    for (int64_t t0 = 0; t0 < n; t0 += NTB) {
        const int T = n - t0 >= 2 ? 2 : 1;
        if (w->mode != QM_AFFINE && T == 2) {
            MROWS_NEON(2)
        } else if (w->mode != QM_AFFINE) {
            MROWS_NEON(1)
        } else if (w->bits == 4)
            T == 2 ? arange_neon(w, in, t0, y, row0, row1, 2, 4) : arange_neon(w, in, t0, y, row0, row1, 1, 4);
        else
            T == 2 ? arange_neon(w, in, t0, y, row0, row1, 2, 8) : arange_neon(w, in, t0, y, row0, row1, 1, 8);
    }
}

/* ---- affine 4/8-bit as a blocked GEMM: x86/avx2.c's on 4 lanes (kern_agemm_tile) ----
 *
 * The same workspace (input.c: codes [set, column, 16], scales and biases
 * [set, group, 16], A [panel, set, AGEMM_T, 16]) and the same operations per
 * (row, token): a set's four quarters × AGEMM_H tokens of one chain in
 * registers, the even words' chain over the group first (kept in memory),
 * then the odd words', the two added and folded into A with the scale. A
 * token's input is one lane of a vector (FMLA by element: the same fused
 * multiply-add as a broadcast's). */
#define AGEMM_H 4 /* tokens at a time: 4 quarters × 4 = 16 chains of the 32 registers */
_Static_assert(AGEMM_T % AGEMM_H == 0, "a panel is whole passes of AGEMM_H tokens");

/* acc + v · x[u] (u a constant once inlined). */
INLINE float32x4_t fma_lane(float32x4_t acc, float32x4_t v, float32x4_t x, const int u, const bool first)
{
    switch (u) {
    case 0: return first ? vmulq_laneq_f32(v, x, 0) : vfmaq_laneq_f32(acc, v, x, 0);
    case 1: return first ? vmulq_laneq_f32(v, x, 1) : vfmaq_laneq_f32(acc, v, x, 1);
    case 2: return first ? vmulq_laneq_f32(v, x, 2) : vfmaq_laneq_f32(acc, v, x, 2);
    default: return first ? vmulq_laneq_f32(v, x, 3) : vfmaq_laneq_f32(acc, v, x, 3);
    }
}

/* Chain c (0: even words, 1: odd) of a set's group (q: [gs, 16]) for
 * AGEMM_H tokens (xg: the group's input, [gs, AGEMM_T]) into p[quarter][u]:
 * column j is word j / per_word's code j % per_word; `first` starts them. */
INLINE void agemm_col_neon(const float *q, const float *xg, int j, float32x4_t (*p)[AGEMM_H], const bool first)
{
    const float32x4_t xv = vld1q_f32(xg + j * AGEMM_T);
#pragma GCC unroll 4
    for (int l = 0; l < 4; l++) {
        const float32x4_t v = vld1q_f32(q + 16 * j + 4 * l);
#pragma GCC unroll 4
        for (int u = 0; u < AGEMM_H; u++)
            p[l][u] = fma_lane(p[l][u], v, xv, u, first);
    }
}
INLINE void agemm_chain_neon(const float *q, const float *xg, int gs, int c, float32x4_t (*p)[AGEMM_H],
                             const int per_word)
{
    const int j0 = c * per_word;
#pragma GCC unroll 8
    for (int k = 0; k < per_word; k++)
        agemm_col_neon(q, xg, j0 + k, p, k == 0);
    for (int i = 2 * per_word; i < gs; i += 2 * per_word)
#pragma GCC unroll 8
        for (int k = 0; k < per_word; k++)
            agemm_col_neon(q, xg, i + j0 + k, p, false);
}

/* One set (codes q: [ng·gs, 16]; scales st: [ng, 16]) × AGEMM_T tokens
 * (x: [ng·gs, AGEMM_T]) folded into A ([AGEMM_T, 16]). */
INLINE void agemm_block_neon(const float *q, const float *x, const float *st, int64_t ng, int gs, float *A,
                             const int per_word)
{
    for (int64_t g = 0; g < ng; g++) {
        const float *qg = q + g * gs * 16;
        for (int h = 0; h < AGEMM_T; h += AGEMM_H) {
            const float *xg = x + g * gs * AGEMM_T + h;
            float32x4_t p[4][AGEMM_H];
            float pe[4][AGEMM_H][4];
            agemm_chain_neon(qg, xg, gs, 0, p, per_word);
            for (int l = 0; l < 4; l++)
                for (int u = 0; u < AGEMM_H; u++)
                    vst1q_f32(pe[l][u], p[l][u]);
            agemm_chain_neon(qg, xg, gs, 1, p, per_word);
            for (int l = 0; l < 4; l++)
                for (int u = 0; u < AGEMM_H; u++) {
                    float *a = A + (h + u) * 16 + 4 * l;
                    vst1q_f32(a, vfmaq_f32(vld1q_f32(a), vaddq_f32(vld1q_f32(pe[l][u]), p[l][u]), vld1q_f32(st + 16 * g + 4 * l)));
                }
        }
    }
}

/* The block on its own for each width (one set: qs and ss unused). */
__attribute__((noinline)) static void agemm_block_b4_neon(const float *q, int64_t qs, const float *x, const float *st,
                                                          int64_t ss, int64_t ng, int gs, float *A)
{
    (void)qs, (void)ss;
    agemm_block_neon(q, x, st, ng, gs, A, 8);
}
__attribute__((noinline)) static void agemm_block_b8_neon(const float *q, int64_t qs, const float *x, const float *st,
                                                          int64_t ss, int64_t ng, int gs, float *A)
{
    (void)qs, (void)ss;
    agemm_block_neon(q, x, st, ng, gs, A, 4);
}

/* Groups [g0, g1) of rows r0 .. r0+15 (m: those in the tile) into qt
 * [(g1 − g0)·gs, 16] (code k of word i of row l at ((g − g0)·gs + i·per_word
 * + k)·16 + l, its place value kept, as arows_neon has it), scales into st
 * and biases into bt [groups, 16] (at group g); zeros for the others. */
INLINE void agemm_decode_neon(const struct wmat *w, int64_t r0, uint32_t m, int64_t g0, int64_t g1, float *qt,
                              float *st, float *bt, const int bits)
{
    const int per_word = 32 / bits, wpg = w->gs / per_word;
    for (int64_t g = g0; g < g1; g++) {
        for (int i = 0; i < wpg; i++) {
            uint32_t words[16];
            for (int l = 0; l < 16; l++)
                words[l] = !(m >> l & 1) ? 0
                           : w->blocked  ? rd_u32le(w->w + kern_block_off(w, r0 / 16, g) + 64 * i + 4 * l)
                                         : rd_u32le(w->w + (size_t)(r0 + l) * w->row_stride + 4 * (g * wpg + i));
            for (int j = 0; j < 4; j++) {
                const uint32x4_t v = vld1q_u32(words + 4 * j);
#pragma GCC unroll 8
                for (int k = 0; k < per_word; k++) {
                    const uint32x4_t qi = k == per_word - 1 ? vshlq_u32(v, vdupq_n_s32(bits - 32))
                                                            : vandq_u32(v, vdupq_n_u32(((1u << bits) - 1) << (bits * k)));
                    vst1q_f32(qt + ((g - g0) * w->gs + i * per_word + k) * 16 + 4 * j, vcvtq_f32_u32(qi));
                }
            }
        }
        kern_params16(w, w->s, r0, g, m, st + 16 * g);
        kern_params16(w, w->b, r0, g, m, bt + 16 * g);
    }
}

static void agemm_decode_b4_neon(const struct wmat *w, int64_t r0, uint32_t m, int64_t g0, int64_t g1, float *qt,
                                 float *st, float *bt)
{
    agemm_decode_neon(w, r0, m, g0, g1, qt, st, bt, 4);
}
static void agemm_decode_b8_neon(const struct wmat *w, int64_t r0, uint32_t m, int64_t g0, int64_t g1, float *qt,
                                 float *st, float *bt)
{
    agemm_decode_neon(w, r0, m, g0, g1, qt, st, bt, 8);
}

/* A set's outputs: each token's bias chain, then A + B. */
static void agemm_finish_neon(const struct wmat *w, const struct kern_qinput *in, const float *bt, const float *A,
                              int64_t t0, int tp, int64_t r, uint32_t m, float *y)
{
    const int64_t ng = w->cols / w->gs;
    for (int u = 0; u < tp; u++) {
        const float *xs = in->xsum + (t0 + u) * ng;
        float32x4_t b[4] = {vdupq_n_f32(0.0f), vdupq_n_f32(0.0f), vdupq_n_f32(0.0f), vdupq_n_f32(0.0f)};
        for (int64_t g = 0; g < ng; g++)
            for (int j = 0; j < 4; j++)
                b[j] = vfmaq_f32(b[j], vld1q_f32(bt + g * 16 + 4 * j), vdupq_n_f32(xs[g]));
        float out[16];
        for (int j = 0; j < 4; j++)
            vst1q_f32(out + 4 * j, vaddq_f32(vld1q_f32(A + u * 16 + 4 * j), b[j]));
        for (int l = 0; l < 16; l++)
            if (m >> l & 1)
                y[(t0 + u) * w->rows + r + l] = out[l];
    }
}

static const struct kern_agemm_isa agemm_b4_neon = {agemm_decode_b4_neon, agemm_block_b4_neon, agemm_finish_neon, 1},
                                   agemm_b8_neon = {agemm_decode_b8_neon, agemm_block_b8_neon, agemm_finish_neon, 1};

/* ---- microscaling as a blocked GEMM: x86/avx2.c's qgemm256m on 4 lanes ----
 *
 * The same workspace (kern_qgemm_ws_bytes): a row's codes decoded once into
 * floats, rows in pairs (code k of a block's 16 words, lanes 0-15, row i of
 * the pair at slot 2k + i), the lane scales beside them; the input prepared
 * for the GEMM (tokens in fours). For each panel of GEMM_TP tokens and chunk
 * of GEMM_KC columns, 2 rows × 2 tokens × one quarter of the lanes at a time
 * (their 8 chains in registers, the A lanes in the workspace; 2 × 4 tokens
 * spilled registers in GCC 12's code). Every (row, token) goes through the
 * operations of kern_qdot_ref in the same order. */
/* Row r's codes into its pair's tile (qp: the pair's first float, the row's
 * slot i) and its lane scales (sv[blocks·16]); sc: scratch of ng16 + 16
 * floats. Lanes past the row's words get code 0 and scale 0, as the AVX2
 * twin's masked loads give them. */
INLINE void mgemm_decode_neon(const struct wmat *w, int64_t r, int64_t stride, float *qp, int i, float *sv,
                              float *sc, const int gs, const int bits, const int mode)
{
    const int per_word = 32 / bits, blk = 16 * per_word;
    const int64_t ng = w->cols / gs, words = w->cols / per_word, ng16 = (ng + 15) / 16 * 16;
    const uint8_t *codes = w->w + (size_t)r * w->row_stride, *sr = w->s + (size_t)r * w->srow_bytes;
    memset(sc, 0, (size_t)(ng16 + 16) * sizeof *sc);
    kern_mx_scales((enum qmode)mode, sr, sc, ng);
    for (int64_t b = 0; b * blk < stride; b++)
        for (int h = 0; h < 16; h += 4) {
            const uint32x4_t v = mwords_neon(codes + 4 * (16 * b + h), words - 16 * b - h);
#pragma GCC unroll 8
            for (int k = 0; k < per_word; k++)
                vst1q_f32(qp + 2 * b * blk + (2 * k + i) * 16 + h, mcode_neon(v, k, bits, mode));
            for (int l = 0; l < 4; l++)
                sv[16 * b + h + l] = sc[(16 * b + h + l) * per_word / gs];
        }
}

/* Codes k and k + 1 of R rows (q: the block's tile, lanes h ..) × T tokens
 * (x: the block's input) into the definition's two chains: the first
 * products (k = 0) multiplied, the later ones fused. */
INLINE void mgemm_codes_neon(const float *q, const float *x, int k, float32x4_t (*p0)[2], float32x4_t (*p1)[2],
                             const int R, const int T, const bool first)
{
    float32x4_t q0[2], q1[2];
#pragma GCC unroll 2
    for (int i = 0; i < R; i++) {
        q0[i] = vld1q_f32(q + (2 * k + i) * 16);
        q1[i] = vld1q_f32(q + (2 * k + 2 + i) * 16);
    }
#pragma GCC unroll 2
    for (int u = 0; u < T; u++) {
        const float32x4_t x0 = vld1q_f32(x + (4 * k + u) * 16), x1 = vld1q_f32(x + (4 * k + 4 + u) * 16);
#pragma GCC unroll 2
        for (int i = 0; i < R; i++) {
            p0[i][u] = first ? vmulq_f32(x0, q0[i]) : vfmaq_f32(p0[i][u], x0, q0[i]);
            p1[i][u] = first ? vmulq_f32(x1, q1[i]) : vfmaq_f32(p1[i][u], x1, q1[i]);
        }
    }
}

/* Blocks [b0, b1) for R rows of a pair (qp: the pair's tile) and T tokens of
 * a four (xp: the four's copy, token u at slot u), a quarter of the lanes at
 * a time: per block the definition's two chains, then its step into the A
 * lanes (row i, token u at acc + i·accstride + 16u). */
INLINE void mgemm_piece_neon(const float *qp, const float *sv, int64_t svstride, const float *xp, int64_t b0,
                             int64_t b1, float *acc, int64_t accstride, const int R, const int T, const int bits)
{
    const int per_word = 32 / bits, blk = 16 * per_word;
    for (int h = 0; h < 16; h += 4)
        for (int64_t b = b0; b < b1; b++) {
            const float *q = qp + 2 * b * blk + h, *x = xp + 4 * b * blk + h;
            float32x4_t p0[2][2], p1[2][2]; /* the definition's two chains: even and odd codes */
            mgemm_codes_neon(q, x, 0, p0, p1, R, T, true);
#pragma GCC unroll 3
            for (int k = 2; k < per_word; k += 2)
                mgemm_codes_neon(q, x, k, p0, p1, R, T, false);
#pragma GCC unroll 2
            for (int i = 0; i < R; i++) {
                const float32x4_t s = vld1q_f32(sv + i * svstride + 16 * b + h);
#pragma GCC unroll 2
                for (int u = 0; u < T; u++) {
                    float *a = acc + i * accstride + 16 * u + h;
                    vst1q_f32(a, vfmaq_f32(vld1q_f32(a), vaddq_f32(p0[i][u], p1[i][u]), s));
                }
            }
        }
}

#define MGEMM_PIECE_NEON(R, T) mgemm_piece_neon(qp, svr, svs, xq, b0, b1, ar, GEMM_TP * 16, R, T, bits)

INLINE void qgemm_neon_m(const struct wmat *w, const struct kern_qinput *in, int64_t n, float *y, int64_t row0,
                         int64_t row1, float *ws, const int gs, const int bits, const int mode)
{
    const int per_word = 32 / bits, blk = 16 * per_word;
    const int64_t rows = row1 - row0, stride = in->stride, blocks = stride / blk, svs = 16 * blocks;
    float *qf = ws, *sv = qf + (rows + 1) / 2 * 2 * stride, *acc = sv + rows * svs;
    float *sc = acc + rows * GEMM_TP * 16;
    for (int64_t r = 0; r < rows; r++)
        mgemm_decode_neon(w, row0 + r, stride, qf + r / 2 * 2 * stride, (int)(r % 2), sv + r * svs, sc, gs, bits,
                          mode);
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
                    case 6: MGEMM_PIECE_NEON(2, 2); break;
                    case 5: MGEMM_PIECE_NEON(2, 1); break;
                    case 4: MGEMM_PIECE_NEON(1, 2); break;
                    default: MGEMM_PIECE_NEON(1, 1); break;
                    }
                }
        }
        const float32x4_t zero = vdupq_n_f32(0.0f); /* + 0: kern_qdot_ref's bias lanes */
        for (int64_t r = 0; r < rows; r++)
            for (int64_t u = 0; u < tp; u++) {
                const float *a = acc + (r * GEMM_TP + u) * 16;
                float32x4_t s[4];
                for (int j = 0; j < 4; j++)
                    s[j] = vaddq_f32(vld1q_f32(a + 4 * j), zero);
                y[(t0 + u) * w->rows + row0 + r] = sum16(s);
            }
    }
}

void kern_qgemm_neon(const struct wmat *w, const struct kern_qinput *in, int64_t n, float *y, int64_t row0,
                     int64_t row1, void *ws)
{
    switch (w->mode == QM_AFFINE ? w->bits : -(int)w->mode) {
    case 4: kern_agemm_tile(&agemm_b4_neon, w, in, n, y, row0, row1, ws); break;
    case 8: kern_agemm_tile(&agemm_b8_neon, w, in, n, y, row0, row1, ws); break;
    case -QM_MXFP4: qgemm_neon_m(w, in, n, y, row0, row1, ws, 32, 4, QM_MXFP4); break;
    case -QM_NVFP4: qgemm_neon_m(w, in, n, y, row0, row1, ws, 16, 4, QM_NVFP4); break;
    default: qgemm_neon_m(w, in, n, y, row0, row1, ws, 32, 8, QM_MXFP8); break;
    }
}

/* ---- bf16: kern_matvec_bf16_ref ---- */

INLINE void bf16rows_neon(const struct wmat *w, const float *x, int64_t t0, const int tb, float *y, int64_t row0,
                          int64_t row1)
{
    const int64_t cols = w->cols;
    for (int64_t r = row0; r < row1; r++) {
        const uint8_t *row = w->w + (size_t)r * w->row_stride;
        float32x4_t acc[NTB][2][4];
        for (int u = 0; u < tb; u++)
            for (int j = 0; j < 4; j++)
                acc[u][0][j] = acc[u][1][j] = vdupq_n_f32(0.0f);
        for (int64_t j0 = 0; j0 < cols; j0 += 16) {
            const int c = (int)(j0 / 16 % 2);
            float32x4_t wv[4];
            const float *xp[NTB];
            float xt[NTB][16];
            if (j0 + 16 <= cols) {
                for (int j = 0; j < 4; j++)
                    wv[j] = vreinterpretq_f32_u32(vshll_n_u16(vreinterpret_u16_u8(vld1_u8(row + 2 * (j0 + 4 * j))), 16));
                for (int u = 0; u < tb; u++)
                    xp[u] = x + (t0 + u) * cols + j0;
            } else { /* the tail: absent lanes add 0·0 */
                float wt[16] = {0};
                for (int64_t k = j0; k < cols; k++)
                    wt[k - j0] = bf16_to_f32(rd_u16le(row + 2 * k));
                for (int j = 0; j < 4; j++)
                    wv[j] = vld1q_f32(wt + 4 * j);
                for (int u = 0; u < tb; u++) {
                    memset(xt[u], 0, sizeof xt[u]);
                    memcpy(xt[u], x + (t0 + u) * cols + j0, (size_t)(cols - j0) * sizeof(float));
                    xp[u] = xt[u];
                }
            }
            for (int u = 0; u < tb; u++)
                for (int j = 0; j < 4; j++)
                    acc[u][c][j] = vfmaq_f32(acc[u][c][j], vld1q_f32(xp[u] + 4 * j), wv[j]);
        }
        for (int u = 0; u < tb; u++) {
            float32x4_t s[4];
            for (int j = 0; j < 4; j++)
                s[j] = vaddq_f32(acc[u][0][j], acc[u][1][j]);
            y[(t0 + u) * w->rows + r] = sum16(s);
        }
    }
}

void kern_matvec_bf16_neon(const struct wmat *w, const float *x, int64_t n, float *y, int64_t row0, int64_t row1)
{
    for (int64_t t0 = 0; t0 < n; t0 += NTB) {
        if (n - t0 >= 2)
            bf16rows_neon(w, x, t0, 2, y, row0, row1);
        else
            bf16rows_neon(w, x, t0, 1, y, row0, row1);
    }
}

/* ---- kern_matvec_bf16_ref as a blocked GEMM: x86/avx2.c's on 4 lanes ----
 *
 * The tile's rows are converted once into floats (zeros up to a whole 32
 * columns); then, for each panel of GEMM_TP tokens and each chunk of
 * GEMM_KC columns, R rows × T tokens at a time (BGEMM_CHUNKS), one eighth of
 * their two chains (chain o / 16, lanes o % 16 .. + 3: columns j + o of
 * every 32) in registers and in the workspace (kern_bf16gemm_ws_bytes)
 * between eighths and chunks. Every (row, token) goes through the FMAs of
 * bf16rows_neon in the same order. */
/* Columns [j0, j1) (whole 32s) for R rows (q: the first row's floats, qs
 * apart) and T tokens (x: the first token's input, xs apart); the chains of
 * row i, token u at acc + (i·GEMM_TP + u)·32. */
INLINE void bgemm_piece_neon(const float *q, int64_t qs, const float *x, int64_t xs, int64_t j0, int64_t j1,
                             float *acc, const int R, const int T)
{
    for (int o = 0; o < 32; o += 4) {
        float32x4_t c[12]; /* row i, token u at c[i·T + u] */
#pragma GCC unroll 12
        for (int k = 0; k < R * T; k++)
            c[k] = vld1q_f32(acc + (k / T * GEMM_TP + k % T) * 32 + o);
        for (int64_t j = j0 + o; j < j1; j += 32) {
            float32x4_t qv[3];
#pragma GCC unroll 3
            for (int i = 0; i < R; i++)
                qv[i] = vld1q_f32(q + i * qs + j);
#pragma GCC unroll 4
            for (int u = 0; u < T; u++) {
                const float32x4_t xv = vld1q_f32(x + u * xs + j);
#pragma GCC unroll 3
                for (int i = 0; i < R; i++)
                    c[i * T + u] = vfmaq_f32(c[i * T + u], xv, qv[i]);
            }
        }
#pragma GCC unroll 12
        for (int k = 0; k < R * T; k++)
            vst1q_f32(acc + (k / T * GEMM_TP + k % T) * 32 + o, c[k]);
    }
}

#define BGEMM_PIECE_NEON(R, T) bgemm_piece_neon(qr, cols32, xr, cols, j0, j1, ar, R, T)

void kern_bf16gemm_neon(const struct wmat *w, const float *x, int64_t n, float *y, int64_t row0, int64_t row1,
                        void *ws)
{
    const int64_t rows = row1 - row0, cols = w->cols, cols32 = (cols + 31) / 32 * 32, full = cols / 32 * 32;
    float *qf = ws, *acc = qf + rows * cols32;
    for (int64_t r = 0; r < rows; r++) {
        const uint8_t *src = w->w + (size_t)(row0 + r) * w->row_stride;
        float *dst = qf + r * cols32;
        int64_t j = 0;
        for (; j + 4 <= cols; j += 4)
            vst1q_f32(dst + j, vreinterpretq_f32_u32(vshll_n_u16(vreinterpret_u16_u8(vld1_u8(src + 2 * j)), 16)));
        for (; j < cols32; j++)
            dst[j] = j < cols ? bf16_to_f32(rd_u16le(src + 2 * j)) : 0.0f;
    }
    for (int64_t t0 = 0; t0 < n; t0 += GEMM_TP) {
        const int64_t tp = n - t0 < GEMM_TP ? n - t0 : GEMM_TP;
        memset(acc, 0, (size_t)(rows * GEMM_TP * 32) * sizeof *acc);
        BGEMM_CHUNKS(BGEMM_PIECE_NEON)
        for (int64_t r = 0; r < rows; r++) /* the columns past the last 32 (column j in lane j − full), then the sum */
            for (int64_t u = 0; u < tp; u++) {
                float *a = acc + (r * GEMM_TP + u) * 32;
                const float *xu = x + (t0 + u) * cols, *qr = qf + r * cols32;
                for (int64_t j = full; j < cols; j++)
                    a[j - full] = fmaf(xu[j], qr[j], a[j - full]);
                float32x4_t s[4];
                for (int j = 0; j < 4; j++)
                    s[j] = vaddq_f32(vld1q_f32(a + 4 * j), vld1q_f32(a + 16 + 4 * j));
                y[(t0 + u) * w->rows + row0 + r] = sum16(s);
            }
    }
}

#if KERN_NEON_DOTPROD
/* ---- int8 activations on SDOT: kern_q8dot_ref ---- */

/* An 8-bit code's nibbles against x, four bytes per int32 lane: lo gets the
 * low nibbles' products, hi the high ones' (S = lo + 16·hi; a nibble fits a
 * signed byte, a code does not). */
DOTPROD INLINE void q8dot_nibbles(int32x4_t *lo, int32x4_t *hi, uint8x16_t v, int8x16_t x)
{
    *lo = vdotq_s32(*lo, vreinterpretq_s8_u8(vandq_u8(v, vdupq_n_u8(0x0F))), x);
    *hi = vdotq_s32(*hi, vreinterpretq_s8_u8(vshrq_n_u8(v, 4)), x);
}

/* S of one group of one row, by rows: nb code bytes (16, 32 or 64) against
 * the group's xq (4-bit: the low nibbles' at xlo, the high ones' 64 further). */
DOTPROD INLINE int32_t q8group_row(const uint8_t *c, const int8_t *xlo, const int nb, const int bits)
{
    const uint8x16_t nib = vdupq_n_u8(0x0F);
    int32x4_t lo = vdupq_n_s32(0), hi = vdupq_n_s32(0);
    for (int o = 0; o < nb; o += 16) {
        uint8x16_t v = vld1q_u8(c + o);
        if (bits == 8) {
            q8dot_nibbles(&lo, &hi, v, vld1q_s8(xlo + o));
        } else {
            lo = vdotq_s32(lo, vreinterpretq_s8_u8(vandq_u8(v, nib)), vld1q_s8(xlo + o));
            hi = vdotq_s32(hi, vreinterpretq_s8_u8(vshrq_n_u8(v, 4)), vld1q_s8(xlo + 64 + o));
        }
    }
    return vaddvq_s32(bits == 8 ? vaddq_s32(lo, vshlq_n_s32(hi, 4)) : vaddq_s32(lo, hi));
}

DOTPROD INLINE void q8rows_neon(const struct wmat *w, const struct kern_q8input *in, int64_t n, float *y,
                                int64_t row0, int64_t row1, const int gs, const int bits)
{
    const int64_t ng = w->cols / gs;
    const int nb = gs * bits / 8;
    const size_t psize = dtype_table[w->dtype].bits / 8;
    for (int64_t r = row0; r < row1; r++) {
        const uint8_t *codes = w->w + (size_t)r * w->row_stride;
        const uint8_t *sr = w->s + (size_t)r * w->srow_bytes, *br = w->b + (size_t)r * w->srow_bytes;
        for (int64_t t = 0; t < n; t++) {
            const int8_t *xq = in->xq + t * in->stride;
            float32x4_t acc[4] = {vdupq_n_f32(0.0f), vdupq_n_f32(0.0f), vdupq_n_f32(0.0f), vdupq_n_f32(0.0f)};
            for (int64_t g0 = 0; g0 < ng; g0 += 16) {
                int32_t S[16] = {0};
                float sc[16] = {0}, bi[16] = {0}, d[16] = {0}, xs[16] = {0};
                const int64_t nw = ng - g0 < 16 ? ng - g0 : 16;
                for (int64_t i = 0; i < nw; i++) {
                    const int64_t j = (g0 + i) * gs;
                    const int8_t *x = bits == 8 ? xq + j : xq + 128 * (j / 128) + j % 128 / 2;
                    S[i] = q8group_row(codes + j * bits / 8, x, nb, bits);
                }
                dtype_to_f32(w->dtype, sr + (size_t)g0 * psize, sc, (size_t)nw);
                dtype_to_f32(w->dtype, br + (size_t)g0 * psize, bi, (size_t)nw);
                memcpy(d, in->d + t * ng + g0, (size_t)nw * sizeof *d);
                memcpy(xs, in->xsum + t * ng + g0, (size_t)nw * sizeof *xs);
                for (int j = 0; j < 4; j++) {
                    float32x4_t ds = vmulq_f32(vld1q_f32(d + 4 * j), vld1q_f32(sc + 4 * j));
                    acc[j] = vfmaq_f32(acc[j], vcvtq_f32_s32(vld1q_s32(S + 4 * j)), ds);
                    acc[j] = vfmaq_f32(acc[j], vld1q_f32(bi + 4 * j), vld1q_f32(xs + 4 * j));
                }
            }
            y[t * w->rows + r] = sum16(acc);
        }
    }
}

/* Rows [row0, row1) of a blocked matrix (whole blocks), a token at a time:
 * 16 rows in four registers, one row a lane; word k of group g (64 bytes, 4
 * per row) against the token's four xq of that word in every lane. */
DOTPROD INLINE void q8blocks_neon(const struct wmat *w, const struct kern_q8input *in, int64_t n, float *y,
                                  int64_t row0, int64_t row1, const int gs, const int bits)
{
    const int64_t ng = w->cols / gs;
    const int words = gs * bits / 32;
    const size_t block = kern_block_off(w, 1, 0), rec = kern_block_off(w, 0, 1);
    for (int64_t r = row0; r < row1; r += KERN_BLOCK_ROWS) {
        const size_t off = (size_t)(r / KERN_BLOCK_ROWS) * block;
        for (int64_t t = 0; t < n; t++) {
            const int8_t *xq = in->xq + t * in->stride;
            const float *d = in->d + t * ng, *xs = in->xsum + t * ng;
            float32x4_t acc[16][4];
            for (int l = 0; l < 16; l++)
                for (int j = 0; j < 4; j++)
                    acc[l][j] = vdupq_n_f32(0.0f);
            for (int64_t g = 0; g < ng; g++) {
                const uint8_t *c = w->w + off + (size_t)g * rec;
                int32x4_t lo[4], hi[4];
                for (int j = 0; j < 4; j++)
                    lo[j] = hi[j] = vdupq_n_s32(0);
                for (int k = 0; k < words; k++) {
                    const int64_t wd = g * words + k;
                    if (bits == 8) {
                        int8x16_t x = vreinterpretq_s8_u32(vdupq_n_u32(rd_u32le(xq + 4 * wd)));
                        for (int j = 0; j < 4; j++)
                            q8dot_nibbles(&lo[j], &hi[j], vld1q_u8(c + 64 * k + 16 * j), x);
                    } else {
                        const int8_t *e = xq + 128 * (wd / 16) + 4 * (wd % 16);
                        int8x16_t xe = vreinterpretq_s8_u32(vdupq_n_u32(rd_u32le(e)));
                        int8x16_t xo = vreinterpretq_s8_u32(vdupq_n_u32(rd_u32le(e + 64)));
                        for (int j = 0; j < 4; j++) {
                            uint8x16_t v = vld1q_u8(c + 64 * k + 16 * j);
                            lo[j] = vdotq_s32(lo[j], vreinterpretq_s8_u8(vandq_u8(v, vdupq_n_u8(0x0F))), xe);
                            hi[j] = vdotq_s32(hi[j], vreinterpretq_s8_u8(vshrq_n_u8(v, 4)), xo);
                        }
                    }
                }
                float sc[16], bi[16];
                dtype_to_f32(w->dtype, w->s + off + (size_t)g * rec, sc, 16);
                dtype_to_f32(w->dtype, w->b + off + (size_t)g * rec, bi, 16);
                for (int j = 0; j < 4; j++) {
                    int32x4_t S = bits == 8 ? vaddq_s32(lo[j], vshlq_n_s32(hi[j], 4)) : vaddq_s32(lo[j], hi[j]);
                    float32x4_t ds = vmulq_f32(vdupq_n_f32(d[g]), vld1q_f32(sc + 4 * j));
                    acc[g % 16][j] = vfmaq_f32(acc[g % 16][j], vcvtq_f32_s32(S), ds);
                    acc[g % 16][j] = vfmaq_f32(acc[g % 16][j], vld1q_f32(bi + 4 * j), vdupq_n_f32(xs[g]));
                }
            }
            for (int s = 8; s >= 1; s /= 2)
                for (int l = 0; l < s; l++)
                    for (int j = 0; j < 4; j++)
                        acc[l][j] = vaddq_f32(acc[l][j], acc[l + s][j]);
            for (int j = 0; j < 4; j++)
                vst1q_f32(y + t * w->rows + r + 4 * j, acc[0][j]);
        }
    }
}

#define Q8_NEON(fn)                                                                                                  \
    switch (w->gs * 16 + w->bits) {                                                                                  \
    case 32 * 16 + 4: fn(w, in, n, y, row0, row1, 32, 4); break;                                                     \
    case 64 * 16 + 4: fn(w, in, n, y, row0, row1, 64, 4); break;                                                     \
    case 128 * 16 + 4: fn(w, in, n, y, row0, row1, 128, 4); break;                                                   \
    case 32 * 16 + 8: fn(w, in, n, y, row0, row1, 32, 8); break;                                                     \
    case 64 * 16 + 8: fn(w, in, n, y, row0, row1, 64, 8); break;                                                     \
    default: fn(w, in, n, y, row0, row1, 128, 8); break;                                                             \
    }

/* kern_gq8dot_ref on SDOT: a sub-block's exact sum in int32 lanes, added
 * across them (exact), then the definition's lane steps. */
DOTPROD static void gq8dot_neon(const struct wmat *w, const struct kern_q8input *in, int64_t n, float *y,
                                int64_t row0, int64_t row1)
{
    const struct kern_gtype *gt = kern_gtype_of(w->mode);
    const int64_t nb = w->cols / w->gs, bb = (int64_t)w->row_bytes / nb, ns = w->gs / gt->S, S = gt->S;
    const int64_t ng = w->cols / KERN_GSUM;
    for (int64_t r = row0; r < row1; r++) {
        float L[4][16] = {{0}};
        const int T = n < 4 ? (int)n : 4;
        for (int64_t t0 = 0; t0 < n; t0 += 4) {
            const int tb = n - t0 < T ? (int)(n - t0) : T;
            memset(L, 0, sizeof L);
            for (int64_t bi = 0; bi < nb; bi++) {
                const uint8_t *blk = w->w + (size_t)r * w->row_stride + (size_t)(bi * bb);
                struct kern_gblock g;
                gt->params(blk, g.a, g.m);
                gcodes_neon(w->mode, blk, g.c);
                for (int64_t j = 0; j < ns; j++) {
                    const int64_t col = bi * w->gs + j * S, sub = col / S;
                    const int8x16_t c0 = vld1q_s8(g.c + j * S), c1 = S == 32 ? vld1q_s8(g.c + j * S + 16) : vdupq_n_s8(0);
                    for (int u = 0; u < tb; u++) {
                        const int8_t *xq = in->xq + (t0 + u) * in->stride + col;
                        int32x4_t acc = vdotq_s32(vdupq_n_s32(0), c0, vld1q_s8(xq));
                        if (S == 32)
                            acc = vdotq_s32(acc, c1, vld1q_s8(xq + 16));
                        const float *d = in->d + (t0 + u) * ng, *xs = in->xsum + (t0 + u) * ng;
                        float *l = &L[u][sub % 16];
                        *l = fmaf((float)vaddvq_s32(acc), d[col / KERN_GSUM] * g.a[j], *l);
                        if (gt->offsets)
                            *l = fmaf(g.m[j], xs[col / KERN_GSUM], *l);
                    }
                }
            }
            for (int u = 0; u < tb; u++)
                y[(t0 + u) * w->rows + r] = kern_lanes_sum16(L[u]);
        }
    }
}

DOTPROD void kern_q8dot_neon(const struct wmat *w, const struct kern_q8input *in, int64_t n, float *y, int64_t row0,
                             int64_t row1, void *ws)
{
    if (kern_gtype_of(w->mode)) {
        gq8dot_neon(w, in, n, y, row0, row1);
        return;
    }
    if (w->blocked) {
        Q8_NEON(q8blocks_neon)
    } else {
        Q8_NEON(q8rows_neon)
    }
}
#endif

/* ---- kern_matmul_ref for every other weight type (the scheme of x86/avx512.c's kern_refgemm_avx512) ----
 *
 * Lane i of the four quarters holds row r0 + i: the 16 rows converted once
 * per call into a column-major block (a blocked matrix's whole blocks by
 * refgemm_block_neon, other rows by kern_row_f32), then per column each
 * token's product rounded, then added (vmulq_f32, vaddq_f32: never fused),
 * in column order. 4 quarters × 6 tokens = 24 chains of the 32 registers. */
#define REF_TOKENS_NEON 6 /* KERN_TOKENS6 */

INLINE void refgemm_rows_neon(const float *wt, const float *x, int64_t cols, int64_t t0, const int T, float *y,
                              int64_t ldy, int64_t r0, int64_t nr)
{
    float32x4_t acc[REF_TOKENS_NEON][4];
    for (int u = 0; u < T; u++)
        for (int q = 0; q < 4; q++)
            acc[u][q] = vdupq_n_f32(0.0f);
    for (int64_t j = 0; j < cols; j++) {
        float32x4_t wv[4];
        for (int q = 0; q < 4; q++)
            wv[q] = vld1q_f32(wt + 16 * j + 4 * q);
        for (int u = 0; u < T; u++) {
            const float32x4_t xv = vld1q_dup_f32(x + (t0 + u) * cols + j);
            for (int q = 0; q < 4; q++)
                acc[u][q] = vaddq_f32(acc[u][q], vmulq_f32(xv, wv[q]));
        }
    }
    for (int u = 0; u < T; u++) {
        float out[16];
        for (int q = 0; q < 4; q++)
            vst1q_f32(out + 4 * q, acc[u][q]);
        memcpy(y + (t0 + u) * ldy + r0, out, (size_t)nr * sizeof *out);
    }
}

/* x86/avx512.c's refgemm_block512 on four quarters of a word's 64-byte line. */
INLINE void refgemm_block_neon(const struct wmat *w, int64_t r0, float *wt)
{
    const int bits = w->bits;
    const uint32x4_t mask = vdupq_n_u32((1u << bits) - 1);
    for (int64_t g = 0; g < w->cols / w->gs; g++) {
        const uint8_t *rec = w->w + kern_block_off(w, r0 / KERN_BLOCK_ROWS, g);
        float sc[16], bi[16];
        kern_params16(w, w->s, r0, g, 0xFFFF, sc);
        kern_params16(w, w->b, r0, g, 0xFFFF, bi);
        for (int c = 0; c < w->gs; c++) {
            const int k = c * bits / 32, sh = c * bits % 32;
            for (int q = 0; q < 4; q++) {
                const uint8_t *line = rec + 64 * k + 16 * q;
                uint32x4_t v = vshlq_u32(vld1q_u32((const uint32_t *)(const void *)line), vdupq_n_s32(-sh));
                if (sh + bits > 32)
                    v = vorrq_u32(v, vshlq_u32(vld1q_u32((const uint32_t *)(const void *)(line + 64)), vdupq_n_s32(32 - sh)));
                const float32x4_t qf = vcvtq_f32_u32(vandq_u32(v, mask));
                vst1q_f32(wt + 16 * (g * w->gs + c) + 4 * q,
                          vaddq_f32(vmulq_f32(vld1q_f32(sc + 4 * q), qf), vld1q_f32(bi + 4 * q)));
            }
        }
    }
}

void kern_refgemm_neon(const struct wmat *w, const float *x, int64_t n, float *y, int64_t row0, int64_t row1, void *ws)
{
    const int64_t cols = w->cols;
    float *wt = ws, *rows = wt + 16 * cols; /* [cols, 16], [16, cols] (kern_refgemm_ws_bytes) */
    for (int64_t r0 = row0; r0 < row1; r0 += 16) {
        const int64_t nr = row1 - r0 < 16 ? row1 - r0 : 16;
        if (kern_whole_block(w, r0, nr)) {
            refgemm_block_neon(w, r0, wt);
        } else {
            for (int64_t i = 0; i < nr; i++)
                kern_row_f32(w, r0 + i, rows + i * cols);
            for (int64_t j = 0; j < cols; j++) /* the rows absent read as zeros */
                for (int64_t i = 0; i < 16; i++)
                    wt[16 * j + i] = i < nr ? rows[i * cols + j] : 0.0f;
        }
#define REF_BLOCK_NEON(T) refgemm_rows_neon(wt, x, cols, t0, T, y, w->rows, r0, nr)
        for (int64_t t0 = 0; t0 < n; t0 += REF_TOKENS_NEON)
            KERN_TOKENS6(n - t0, REF_BLOCK_NEON)
#undef REF_BLOCK_NEON
    }
}
