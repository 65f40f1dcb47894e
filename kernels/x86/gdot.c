/* gdot.c - the x86 twins of ggml's block types' definitions (kernels/ggml.c:
 * kern_gdot_ref, and kern_gq8dot_ref for --kernels q8), bit for bit. A
 * block's codes are decoded with byte shuffles into the scalar decoders'
 * int8 bytes (gcodes) and its scales and offsets with a few vector ops
 * (gparams: the same exact products); the kernels are specialized by type
 * and token count (G_TOKENS). Exact, AVX-512: the 4-bit types look their
 * codes up as floats (vpermps), the others convert the decoded bytes (Q4_K's
 * and Q6_K's params and Q6_K's codes by 512-bit twins of gparams and gcodes);
 * one token runs 4 rows a pass (gtile512, gtile256), Q4_K's 4 rows' params
 * unpacked in one vector and their offsets summed in one vector's lanes. Int8:
 * windows of 16 sub-blocks, vpdpbusd then pair_sums to one sum per
 * sub-block per lane; Q4_K, Q5_K and Q6_K decode a window's codes and
 * scales in registers and sum in 16-bit lanes where the sums fit
 * (lane_pair_sums): Q4_K / Q5_K's nibbles against the input in their order
 * (xqs), Q6_K's codes as stored (+32) with 32·Σxq subtracted (qsum). The
 * AVX2 kernels run the same steps on 8-lane halves. */
#include <immintrin.h>
#include <math.h>

#include "core/bytes.h"
#include "kernels/x86/simd.h"
#include "kernels/x86/x86.h"
#include "quant/ggml.h"

/* 16 bytes as 32 codes: the low nibbles, then the high ones. */
AVX2 INLINE __m256i nib16(const uint8_t *q)
{
    const __m128i v = _mm_loadu_si128((const __m128i *)q), m = _mm_set1_epi8(0x0f);
    return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), m), _mm_and_si128(v, m));
}

/* Byte j = 16 where bit j of the 32 at qh is set, else 0. */
AVX2 INLINE __m256i bits32(const uint8_t *qh)
{
    const __m256i pick = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3,
                                          3, 3, 3, 3, 3, 3, 3);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    const __m256i v = _mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32((int)rd_u32le(qh)), pick), bit);
    return _mm256_and_si256(_mm256_cmpeq_epi8(v, bit), _mm256_set1_epi8(16));
}

/* Byte j = 16 where qh's byte j has bit `b` set. */
AVX2 INLINE __m256i bit_of(__m256i qh, int b)
{
    const __m256i m = _mm256_set1_epi8((char)(1 << b));
    return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, m), m), _mm256_set1_epi8(16));
}

AVX2 INLINE void put(int8_t *c, __m256i v)
{
    _mm256_storeu_si256((__m256i *)c, v);
}

/* The codes of one block of mode m (the scalar decoders' bytes). */
AVX2 INLINE void gcodes(const enum qmode m, const uint8_t *b, int8_t *c)
{
    const __m256i kv = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)ggml_kvalues_iq4nl));
    const __m256i m4 = _mm256_set1_epi8(0x0f), m30 = _mm256_set1_epi8(0x30), b32 = _mm256_set1_epi8(32);
    switch (m) {
    case QM_GGML_Q4_1:
        put(c, nib16(b + 4));
        break;
    case QM_GGML_Q5_0:
        put(c, _mm256_sub_epi8(_mm256_or_si256(nib16(b + 6), bits32(b + 2)), _mm256_set1_epi8(16)));
        break;
    case QM_GGML_Q5_1:
        put(c, _mm256_or_si256(nib16(b + 8), bits32(b + 4)));
        break;
    case QM_GGML_IQ4_NL:
        put(c, _mm256_shuffle_epi8(kv, nib16(b + 2)));
        break;
    case QM_GGML_IQ4_XS:
        for (int j = 0; j < 8; j++)
            put(c + 32 * j, _mm256_shuffle_epi8(kv, nib16(b + 8 + 16 * j)));
        break;
    case QM_GGML_Q4_K:
    case QM_GGML_Q5_K: {
        const bool five = m == QM_GGML_Q5_K;
        const __m256i qh = _mm256_loadu_si256((const __m256i *)(b + 16));
        for (int k = 0; k < 4; k++) {
            const __m256i v = _mm256_loadu_si256((const __m256i *)(b + (five ? 48 : 16) + 32 * k));
            __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
            if (five)
                lo = _mm256_or_si256(lo, bit_of(qh, 2 * k)), hi = _mm256_or_si256(hi, bit_of(qh, 2 * k + 1));
            put(c + 64 * k, lo);
            put(c + 64 * k + 32, hi);
        }
        break;
    }
    case QM_GGML_Q6_K:
        for (int h = 0; h < 2; h++, c += 128) {
            const __m256i v0 = _mm256_loadu_si256((const __m256i *)(b + 64 * h));
            const __m256i v1 = _mm256_loadu_si256((const __m256i *)(b + 64 * h + 32));
            const __m256i qh = _mm256_loadu_si256((const __m256i *)(b + 128 + 32 * h));
            const __m256i h0 = _mm256_and_si256(_mm256_slli_epi16(qh, 4), m30), h1 = _mm256_and_si256(_mm256_slli_epi16(qh, 2), m30);
            const __m256i h2 = _mm256_and_si256(qh, m30), h3 = _mm256_and_si256(_mm256_srli_epi16(qh, 2), m30);
            put(c, _mm256_sub_epi8(_mm256_or_si256(_mm256_and_si256(v0, m4), h0), b32));
            put(c + 32, _mm256_sub_epi8(_mm256_or_si256(_mm256_and_si256(v1, m4), h1), b32));
            put(c + 64, _mm256_sub_epi8(_mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v0, 4), m4), h2), b32));
            put(c + 96, _mm256_sub_epi8(_mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v1, 4), m4), h3), b32));
        }
        break;
    default:
        break;
    }
}

/* The f16 at p as a float (exact, as f16_to_f32). */
AVX2 INLINE float h2f(const uint8_t *p)
{
    return _cvtsh_ss(rd_u16le(p));
}

/* Each sub-block's scale a and offset m of a block of mode m (the type
 * row's params, kernels/ggml.c: the same exact products). Q4_K / Q5_K:
 * the 12 bytes' 6-bit scales and mins unpacked four at a time, converted
 * and multiplied in one vector. */
AVX2 INLINE void gparams(const enum qmode mode, const uint8_t *b, float *a, float *m)
{
    switch (mode) {
    case QM_GGML_Q4_1:
    case QM_GGML_Q5_1:
        a[0] = h2f(b), m[0] = h2f(b + 2);
        break;
    case QM_GGML_Q5_0:
    case QM_GGML_IQ4_NL:
        a[0] = h2f(b);
        break;
    case QM_GGML_Q4_K:
    case QM_GGML_Q5_K: {
        const uint32_t u0 = rd_u32le(b + 4), u1 = rd_u32le(b + 8), u2 = rd_u32le(b + 12);
        const uint32_t sc_lo = u0 & 0x3f3f3f3fu, mn_lo = u1 & 0x3f3f3f3fu;
        const uint32_t sc_hi = (u2 & 0x0f0f0f0fu) | ((u0 >> 6) & 0x03030303u) << 4;
        const uint32_t mn_hi = ((u2 >> 4) & 0x0f0f0f0fu) | ((u1 >> 6) & 0x03030303u) << 4;
        const __m128i sc = _mm_setr_epi32((int)sc_lo, (int)sc_hi, 0, 0), mn = _mm_setr_epi32((int)mn_lo, (int)mn_hi, 0, 0);
        _mm256_storeu_ps(a, _mm256_mul_ps(_mm256_set1_ps(h2f(b)), _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(sc))));
        const __m256 dm = _mm256_mul_ps(_mm256_set1_ps(h2f(b + 2)), _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(mn)));
        _mm256_storeu_ps(m, _mm256_xor_ps(dm, _mm256_set1_ps(-0.0f)));
        break;
    }
    case QM_GGML_Q6_K: {
        const __m128i sc = _mm_loadu_si128((const __m128i *)(b + 192));
        const __m256 d = _mm256_set1_ps(h2f(b + 208));
        _mm256_storeu_ps(a, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(sc))));
        _mm256_storeu_ps(a + 8, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(sc, 8)))));
        break;
    }
    case QM_GGML_IQ4_XS: { /* lane j: nibble j of the u32 at 4, bits 2j, 2j + 1 of the u16 at 2 */
        const __m256i lo = _mm256_srlv_epi32(_mm256_set1_epi32((int)rd_u32le(b + 4)),
                                             _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28));
        const __m256i hi = _mm256_srlv_epi32(_mm256_set1_epi32((int)rd_u16le(b + 2)),
                                             _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14));
        const __m256i ls = _mm256_or_si256(_mm256_and_si256(lo, _mm256_set1_epi32(0x0f)),
                                           _mm256_slli_epi32(_mm256_and_si256(hi, _mm256_set1_epi32(3)), 4));
        const __m256 sc = _mm256_cvtepi32_ps(_mm256_sub_epi32(ls, _mm256_set1_epi32(32)));
        _mm256_storeu_ps(a, _mm256_mul_ps(_mm256_set1_ps(h2f(b)), sc));
        break;
    }
    default:
        break;
    }
}

/* Sub-block size and whether offsets exist, as constants of a mode. */
#define G_S(mode) ((mode) == QM_GGML_Q6_K ? 16 : 32)
#define G_OFF(mode) ((mode) == QM_GGML_Q4_1 || (mode) == QM_GGML_Q5_1 || (mode) == QM_GGML_Q4_K || (mode) == QM_GGML_Q5_K)
#define GR 4 /* rows a one-token pass of the exact AVX-512 kernel interleaves */
/* The AVX2 kernel's, by mode: Q5_0's decode leaves too few registers (0.9x with 4). */
#define G2(mode) ((mode) == QM_GGML_Q5_0 ? 1 : 4)
_Static_assert(TB <= GR && G2(QM_GGML_Q4_K) <= GR, "a pass's accumulators: GR rows of one token or TB tokens of one row");

/* The row kernel fn specialized by type (w's mode) and token count T. */
#define G_ONE(fn, m, T) case m: fn(w, m, in, t0, T, y, row0, row1); break;
#define G_CALL(fn, T)                                                                                                 \
    switch (w->mode) {                                                                                               \
        G_ONE(fn, QM_GGML_Q4_1, T) G_ONE(fn, QM_GGML_Q5_0, T) G_ONE(fn, QM_GGML_Q5_1, T) G_ONE(fn, QM_GGML_Q4_K, T) \
        G_ONE(fn, QM_GGML_Q5_K, T) G_ONE(fn, QM_GGML_Q6_K, T) G_ONE(fn, QM_GGML_IQ4_NL, T)                          \
        G_ONE(fn, QM_GGML_IQ4_XS, T)                                                                                 \
    default: break;                                                                                                  \
    }
/* fn for every TB tokens of n (then the rest). */
#define G_TOKENS(fn)                                                                                                 \
    for (int64_t t0 = 0; t0 < n; t0 += TB) {                                                                         \
        switch (n - t0 < TB ? n - t0 : TB) {                                                                         \
        case 1: G_CALL(fn, 1) break;                                                                                 \
        case 2: G_CALL(fn, 2) break;                                                                                 \
        case 3: G_CALL(fn, 3) break;                                                                                 \
        default: G_CALL(fn, 4) break;                                                                                \
        }                                                                                                            \
    }

/* Codes c[0..7] as floats. */
AVX2 INLINE __m256 cvt8(const int8_t *c)
{
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)c)));
}

/* Block bi (bb bytes) of the R rows r0, r0 + step, ...: its bytes blk[r],
 * (params) scales and offsets, and (codes) its decoded codes. R > 1 rows are R
 * streams: every line of the block is fetched PREFETCH ahead; one row
 * fetches its first `first` lines (its stream's own prefetch does the rest). */
AVX2 INLINE void gblocks(const struct wmat *w, const enum qmode mode, int64_t bi, int64_t bb, const int R, int64_t r0,
                         int64_t step, const bool params, const bool codes, const int first, const uint8_t **blk,
                         struct kern_gblock *g)
{
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) {
        blk[r] = w->w + (size_t)(r0 + r * step) * w->row_stride + (size_t)(bi * bb);
        for (int64_t o = 0; o < (R > 1 ? bb : 64 * first); o += 64)
            _mm_prefetch((const char *)blk[r] + PREFETCH + o, _MM_HINT_T0);
        if (params)
            gparams(mode, blk[r], g[r].a, g[r].m);
        if (codes)
            gcodes(mode, blk[r], g[r].c);
    }
}

/* The first PREFETCH bytes of the R streams of rows row0, row0 + q, ... (R >
 * 1, q > 0), which their rows' own prefetches (gblocks, PREFETCH ahead) skip:
 * a task's streams start cold otherwise (X16, E2B Q4_K_M decode at 2 threads,
 * alternated: AVX-512 92.6 against 89.4 % of the read bound, medians of 10
 * runs; AVX2 58.7 against 51.0 %, of 7). */
AVX2 INLINE void gstarts(const struct wmat *w, const int R, int64_t row0, int64_t q)
{
    if (R < 2 || q < 1) /* no passes of R rows: one row a pass is left to gblocks' prefetches */
        return;
    for (int k = 0; k < R; k++)
        for (int o = 0; o < PREFETCH; o += 64)
            _mm_prefetch((const char *)w->w + (size_t)(row0 + k * q) * w->row_stride + o, _MM_HINT_T0);
}

/* Rows r0, r0 + step, ... (R of them) for tokens t0 .. t0 + T − 1 (R or T
 * is 1): lanes 0-7 in lo, 8-15 in hi; the rows' steps interleaved as
 * grows512's. */
AVX2 INLINE void grows256(const struct wmat *w, const enum qmode mode, const struct kern_qinput *in, int64_t t0,
                          const int T, const int R, float *y, int64_t r0, int64_t step)
{
    const int64_t nb = w->cols / w->gs, bb = (int64_t)w->row_bytes / nb, ns = w->gs / G_S(mode), S = G_S(mode);
    const int64_t nsum = w->cols / KERN_GSUM;
    __m256 lo[GR], hi[GR];
    float B[GR];
#pragma GCC unroll 4
    for (int i = 0; i < R * T; i++)
        lo[i] = hi[i] = _mm256_setzero_ps(), B[i] = 0.0f;
    for (int64_t bi = 0; bi < nb; bi++) {
        const uint8_t *blk[GR];
        struct kern_gblock g[GR];
        gblocks(w, mode, bi, bb, R, r0, step, true, true, 0, blk, g);
        for (int64_t j = 0; j < ns; j++) {
            const int64_t col = bi * w->gs + j * S;
#pragma GCC unroll 4
            for (int r = 0; r < R; r++) {
                const int8_t *c = g[r].c + j * S;
                const __m256 c0 = cvt8(c), c1 = cvt8(c + 8), a = _mm256_set1_ps(g[r].a[j]);
                __m256 c2 = c0, c3 = c1;
                if (S == 32)
                    c2 = cvt8(c + 16), c3 = cvt8(c + 24);
#pragma GCC unroll 4
                for (int u = 0; u < T; u++) {
                    const float *x = in->xd + (t0 + u) * in->stride + col;
                    const int i = r * T + u;
                    __m256 pl = _mm256_mul_ps(_mm256_loadu_ps(x), c0), ph = _mm256_mul_ps(_mm256_loadu_ps(x + 8), c1);
                    if (S == 32) {
                        pl = _mm256_fmadd_ps(_mm256_loadu_ps(x + 16), c2, pl);
                        ph = _mm256_fmadd_ps(_mm256_loadu_ps(x + 24), c3, ph);
                    }
                    lo[i] = _mm256_fmadd_ps(pl, a, lo[i]);
                    hi[i] = _mm256_fmadd_ps(ph, a, hi[i]);
                    if (G_OFF(mode))
                        B[i] = fmaf(g[r].m[j], in->xsum[(t0 + u) * nsum + col / KERN_GSUM], B[i]);
                }
            }
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
        for (int u = 0; u < T; u++)
            y[(t0 + u) * w->rows + r0 + r * step] = hsum256(_mm256_add_ps(lo[r * T + u], hi[r * T + u])) + B[r * T + u];
}

/* Rows [row0, row1) as gtile512, G2(mode) rows a one-token pass. */
AVX2 INLINE void gtile256(const struct wmat *w, const enum qmode mode, const struct kern_qinput *in, int64_t t0,
                          const int T, float *y, int64_t row0, int64_t row1)
{
    const int64_t q = T == 1 ? (row1 - row0) / G2(mode) : 0;
    gstarts(w, G2(mode), row0, q);
    for (int64_t r = row0; r < row0 + q; r++)
        grows256(w, mode, in, t0, 1, G2(mode), y, r, q);
    for (int64_t r = row0 + G2(mode) * q; r < row1; r++)
        grows256(w, mode, in, t0, T, 1, y, r, 0);
}

AVX2 void kern_gdot_avx2(const struct wmat *w, const struct kern_qinput *in, int64_t n, float *y, int64_t row0,
                         int64_t row1)
{
    G_TOKENS(gtile256)
}

/* Codes c[0..15] as floats. */
AVX512 INLINE __m512 cvt16(const int8_t *c)
{
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)c)));
}

/* One sub-block's steps of the definition for T tokens of a row: codes c0
 * (its first 16) and c1 (S 32), scale a, offset m; the tokens' inputs x0
 * (the sub-block's first 16 columns) and x1, and their group sums xs. */
AVX512 INLINE void gsub512(const int S, __m512 c0, __m512 c1, float a, float m, const bool off, const __m512 *x0,
                           const __m512 *x1, const float *xs, const int T, __m512 *A, float *B)
{
    const __m512 av = _mm512_set1_ps(a);
#pragma GCC unroll 4
    for (int u = 0; u < T; u++) {
        __m512 p = _mm512_mul_ps(x0[u], c0);
        if (S == 32)
            p = _mm512_fmadd_ps(x1[u], c1, p);
        A[u] = _mm512_fmadd_ps(p, av, A[u]);
        if (off)
            B[u] = fmaf(m, xs[u], B[u]);
    }
}

/* The T tokens' inputs of a sub-block of S at column col (x0: the first 16,
 * x1 the next) and their group sums, read once for every row. */
AVX512 INLINE void ginputs512(const struct kern_qinput *in, int64_t t0, const int T, const int S, int64_t col,
                              int64_t nsum, __m512 *x0, __m512 *x1, float *xs)
{
#pragma GCC unroll 4
    for (int u = 0; u < T; u++) {
        const float *x = in->xd + (t0 + u) * in->stride + col;
        x0[u] = _mm512_loadu_ps(x);
        if (S == 32)
            x1[u] = _mm512_loadu_ps(x + 16);
        xs[u] = in->xsum[(t0 + u) * nsum + col / KERN_GSUM];
    }
}

/* The 4-bit types whose codes index a table of 16 values (Q4_1 and Q4_K:
 * 0..15; IQ4_NL, IQ4_XS: kvalues). */
#define G_NIB(mode) ((mode) == QM_GGML_Q4_1 || (mode) == QM_GGML_Q4_K || (mode) == QM_GGML_IQ4_NL || (mode) == QM_GGML_IQ4_XS)

/* Q4_K's 6-bit fields from the 16 header bytes of a block in each 128-bit
 * lane of h (d, dmin, then the 12 bytes as dwords u0, u1, u2): per lane the
 * dwords [sc 0-3, mn 0-3, sc 4-7, mn 4-7], a byte each. */
AVX512 INLINE __m512i q4k_fields512(__m512i h)
{
#define L4(a, b, c, d) _mm512_setr_epi32(a, b, c, d, a, b, c, d, a, b, c, d, a, b, c, d)
    const __m512i S = _mm512_shuffle_epi32(h, _MM_SHUFFLE(3, 3, 2, 1)); /* u0, u1, u2, u2 */
    const __m512i T = _mm512_srlv_epi32(S, L4(6, 6, 0, 4));            /* u0 >> 6, u1 >> 6, u2, u2 >> 4 */
    /* dwords 2, 3: (u0 >> 6) << 4, (u1 >> 6) << 4 */
    const __m512i H = _mm512_slli_epi32(_mm512_shuffle_epi32(T, _MM_SHUFFLE(1, 0, 3, 2)), 4);
    const __m512i lo = _mm512_and_si512(S, L4(0x3f3f3f3f, 0x3f3f3f3f, 0, 0));
    const __m512i hi = _mm512_or_si512(_mm512_and_si512(T, L4(0, 0, 0x0f0f0f0f, 0x0f0f0f0f)),
                                       _mm512_and_si512(H, L4(0, 0, 0x30303030, 0x30303030)));
#undef L4
    return _mm512_or_si512(lo, hi);
}

/* Q4_K's a and m (gparams' products, the same bits) in vector registers
 * alone: the row's block's fields (q4k_fields512) converted, multiplied by
 * [d ×8, dmin ×8] and the mins' products negated. */
AVX512 INLINE void q4k_params512(const uint8_t *b, float *a, float *m)
{
    const __m128i h = _mm_loadu_si128((const __m128i *)b);
    const __m128i f = _mm_shuffle_epi32(_mm512_castsi512_si128(q4k_fields512(_mm512_zextsi128_si512(h))),
                                        _MM_SHUFFLE(3, 1, 2, 0)); /* sc 0-7, mn 0-7 */
    const __m512 dm = _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1),
                                            _mm512_castps128_ps512(_mm_cvtph_ps(h)));
    const __m512i sign = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, INT32_MIN, INT32_MIN, INT32_MIN, INT32_MIN, INT32_MIN,
                                           INT32_MIN, INT32_MIN, INT32_MIN);
    const __m512 p = _mm512_mul_ps(dm, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(f))); /* d·sc ×8, dmin·mn ×8 */
    const __m512 v = _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(p), sign)); /* the mins' negated */
    _mm256_storeu_ps(a, _mm512_castps512_ps256(v));
    _mm256_storeu_ps(m, _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
}

/* q4k_params512 for the blocks of 4 rows at once, row r's 16 header bytes
 * at b[r] in 128-bit lane r: a[r][j] = d·sc_j (into g[r].a), lane 4j + r of
 * mT[j / 4] = −(dmin·mn_j), the same products; the mins of a sub-block side by
 * side for the rows' offsets in one vector. */
AVX512 INLINE void q4k_params4x512(const uint8_t *const *b, struct kern_gblock *g, __m512 *mT)
{
    __m512i h = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)b[0]));
    h = _mm512_inserti32x4(h, _mm_loadu_si128((const __m128i *)b[1]), 1);
    h = _mm512_inserti32x4(h, _mm_loadu_si128((const __m128i *)b[2]), 2);
    h = _mm512_inserti32x4(h, _mm_loadu_si128((const __m128i *)b[3]), 3);
    /* lane r: sc 0-3, mn 0-3, sc 4-7, mn 4-7 -> every row's sc 0-7, then mn 0-3 of rows 0-3, mn 4-7 of rows 0-3 */
    const __m512i f = _mm512_permutexvar_epi32(_mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 1, 5, 9, 13, 3, 7, 11, 15),
                                               q4k_fields512(h));
    const __m512i keep = _mm512_set4_epi32(0x0f0e0d0c, 0x0b0a0908, 0x07060504, 0x03020100);
    const __m512i turn = _mm512_set4_epi32(0x0f0b0703, 0x0e0a0602, 0x0d090501, 0x0c080400); /* a 4×4 byte transpose */
    const __m512i P = _mm512_shuffle_epi8(f, _mm512_inserti64x4(keep, _mm512_castsi512_si256(turn), 1)); /* mn by j */
    const __m256 D = _mm256_cvtph_ps(_mm512_castsi512_si128(_mm512_permutexvar_epi32(
        _mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), h))); /* d, dmin of rows 0-3 */
    const __m512 Dz = _mm512_castps256_ps512(D);
    const __m512 d01 = _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 2, 2, 2, 2, 2, 2, 2, 2), Dz);
    const __m512 d23 = _mm512_permutexvar_ps(_mm512_setr_epi32(4, 4, 4, 4, 4, 4, 4, 4, 6, 6, 6, 6, 6, 6, 6, 6), Dz);
    const __m512 dmin = _mm512_permutexvar_ps(_mm512_set4_epi32(7, 5, 3, 1), Dz); /* of rows 0-3, four times */
#define F16(i) _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm512_extracti32x4_epi32(P, i)))
#define NEG(v) _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(v), _mm512_set1_epi32(INT32_MIN)))
    const __m512 a01 = _mm512_mul_ps(d01, F16(0)), a23 = _mm512_mul_ps(d23, F16(1));
    mT[0] = NEG(_mm512_mul_ps(dmin, F16(2)));
    mT[1] = NEG(_mm512_mul_ps(dmin, F16(3)));
#undef NEG
#undef F16
    _mm256_storeu_ps(g[0].a, _mm512_castps512_ps256(a01));
    _mm256_storeu_ps(g[1].a, _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a01), 1)));
    _mm256_storeu_ps(g[2].a, _mm512_castps512_ps256(a23));
    _mm256_storeu_ps(g[3].a, _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a23), 1)));
}

/* Q6_K's a (gparams' products) in one vector: d times the 16 int8 scales at 192. */
AVX512 INLINE void q6k_params512(const uint8_t *b, float *a)
{
    const __m512 sc = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(b + 192))));
    _mm512_storeu_ps(a, _mm512_mul_ps(_mm512_set1_ps(h2f(b + 208)), sc));
}

/* Q6_K's codes (gcodes' bytes) in 512-bit steps: per half h, the 64 ql
 * bytes at once, qh's 32 in both 256-bit halves (16-bit shifts bring bit
 * pair 2i of qh[l] to bits 4-5 of byte l; the rest masked off). */
AVX512 INLINE void q6k_codes512(const uint8_t *b, int8_t *c)
{
    const __m512i m4 = _mm512_set1_epi8(0x0f), m30 = _mm512_set1_epi8(0x30), b32 = _mm512_set1_epi8(32);
    const __m512i sl = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1); /* pairs 0, 1 */
    const __m512i sr = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1); /* pairs 2, 3 */
    for (int h = 0; h < 2; h++, c += 128) {
        const __m512i v = _mm512_loadu_si512((const void *)(b + 64 * h));
        const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(b + 128 + 32 * h)));
        const __m512i lo = _mm512_or_si512(_mm512_and_si512(v, m4), _mm512_and_si512(_mm512_sllv_epi16(qh, sl), m30));
        const __m512i hi = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(v, 4), m4),
                                           _mm512_and_si512(_mm512_srlv_epi16(qh, sr), m30));
        _mm512_storeu_si512((void *)c, _mm512_sub_epi8(lo, b32));
        _mm512_storeu_si512((void *)(c + 64), _mm512_sub_epi8(hi, b32));
    }
}

/* A block of a G_NIB type from column col in R rows (b[r], g[r]: its bytes
 * and params): 16 code bytes widened to 32-bit lanes, whose low and high
 * nibbles pick the code values from a register (vpermps reads an index's low
 * 4 bits). Q4_K: sub-blocks 2k and 2k + 1 are the low and high nibbles of
 * bytes 32k .. 32k + 31; the others: a sub-block's first 16 codes are 16
 * bytes' low nibbles, the rest their high ones. A, B: T per row (Q4_K's
 * offsets into B unless the caller adds them: offs false). */
AVX512 INLINE void nib_block512(const enum qmode mode, const uint8_t *const *b, const struct kern_gblock *g,
                                const int R, const struct kern_qinput *in, int64_t t0, const int T, int64_t col,
                                int64_t nsum, const bool offs, __m512 *A, float *B)
{
    const __m512 tbl = mode == QM_GGML_IQ4_NL || mode == QM_GGML_IQ4_XS
                           ? _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)ggml_kvalues_iq4nl)))
                           : _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    __m512 x0[TB], x1[TB];
    float xs[TB];
#define NIB16(p) _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(p)))
#define LOOK(e) _mm512_permutexvar_ps(e, tbl)
    if (mode == QM_GGML_Q4_K) {
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) {
            __m512i e0[GR], e1[GR];
#pragma GCC unroll 4
            for (int r = 0; r < R; r++)
                e0[r] = NIB16(b[r] + 16 + 32 * k), e1[r] = NIB16(b[r] + 32 + 32 * k);
#pragma GCC unroll 4
            for (int h = 0; h < 2; h++) { /* sub-block 2k + h: the low nibbles, then the high ones */
                ginputs512(in, t0, T, 32, col + 64 * k + 32 * h, nsum, x0, x1, xs);
#pragma GCC unroll 4
                for (int r = 0; r < R; r++) {
                    const __m512i f0 = h ? _mm512_srli_epi32(e0[r], 4) : e0[r];
                    const __m512i f1 = h ? _mm512_srli_epi32(e1[r], 4) : e1[r];
                    gsub512(32, LOOK(f0), LOOK(f1), g[r].a[2 * k + h], g[r].m[2 * k + h], offs, x0, x1, xs, T,
                            A + r * T, B + r * T);
                }
            }
        }
        return;
    }
    const int subs = mode == QM_GGML_IQ4_XS ? 8 : 1, at = mode == QM_GGML_IQ4_XS ? 8 : mode == QM_GGML_Q4_1 ? 4 : 2;
    for (int j = 0; j < subs; j++) {
        ginputs512(in, t0, T, 32, col + 32 * j, nsum, x0, x1, xs);
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            const __m512i e = NIB16(b[r] + at + 16 * j);
            gsub512(32, LOOK(e), LOOK(_mm512_srli_epi32(e, 4)), g[r].a[j], g[r].m[j], mode == QM_GGML_Q4_1, x0, x1, xs,
                    T, A + r * T, B + r * T);
        }
    }
#undef LOOK
#undef NIB16
}

/* Rows r0, r0 + step, ... (R of them) for tokens t0 .. t0 + T − 1 (R or T
 * is 1): each row and token in the definition's order, the R rows' steps
 * interleaved (independent chains, each input read once for all). */
AVX512 INLINE void grows512(const struct wmat *w, const enum qmode mode, const struct kern_qinput *in, int64_t t0,
                            const int T, const int R, float *y, int64_t r0, int64_t step)
{
    const int64_t nb = w->cols / w->gs, bb = (int64_t)w->row_bytes / nb, ns = w->gs / G_S(mode), S = G_S(mode);
    const int64_t nsum = w->cols / KERN_GSUM;
    __m512 A[GR], x0[TB], x1[TB];
    __m128 B4 = _mm_setzero_ps();
    float B[GR], xs[TB];
#pragma GCC unroll 4
    for (int i = 0; i < R * T; i++)
        A[i] = _mm512_setzero_ps(), B[i] = 0.0f;
    for (int64_t bi = 0; bi < nb; bi++) {
        const uint8_t *blk[GR];
        struct kern_gblock g[GR];
        gblocks(w, mode, bi, bb, R, r0, step, mode != QM_GGML_Q4_K && mode != QM_GGML_Q6_K,
                !G_NIB(mode) && mode != QM_GGML_Q6_K, 1, blk, g);
        if (mode == QM_GGML_Q6_K)
            for (int r = 0; r < R; r++)
                q6k_params512(blk[r], g[r].a), q6k_codes512(blk[r], g[r].c);
        if (mode == QM_GGML_Q4_K && R == 4) { /* the 4 rows' offsets in one vector's lanes, each its B's steps */
            __m512 mT[2]; /* in registers, not memory: 128-bit loads of a 512-bit store waited on it */
            q4k_params4x512(blk, g, mT);
            __asm__("" : "+m"(g[0].a), "+m"(g[1].a), "+m"(g[2].a), "+m"(g[3].a));
            const float *xs4 = in->xsum + t0 * nsum + bi * w->gs / KERN_GSUM;
#define B4STEP(j) B4 = _mm_fmadd_ps(_mm512_extractf32x4_ps(mT[(j) / 4], (j) % 4), _mm_set1_ps(xs4[j]), B4)
            B4STEP(0), B4STEP(1), B4STEP(2), B4STEP(3), B4STEP(4), B4STEP(5), B4STEP(6), B4STEP(7);
#undef B4STEP
            nib_block512(mode, blk, g, R, in, t0, T, bi * w->gs, nsum, false, A, B);
            continue;
        }
        if (mode == QM_GGML_Q4_K)
            for (int r = 0; r < R; r++) {
                q4k_params512(blk[r], g[r].a, g[r].m);
                __asm__("" : "+m"(g[r].a), "+m"(g[r].m)); /* read back by broadcasts (E: 1.15x against shuffles) */
            }
        if (G_NIB(mode)) { /* 4-bit codes: looked up as floats from 16 bytes at a time */
            nib_block512(mode, blk, g, R, in, t0, T, bi * w->gs, nsum, true, A, B);
            continue;
        }
        for (int64_t j = 0; j < ns; j++) {
            const int64_t col = bi * w->gs + j * S;
            ginputs512(in, t0, T, (int)S, col, nsum, x0, x1, xs);
#pragma GCC unroll 4
            for (int r = 0; r < R; r++) {
                const int8_t *c = g[r].c + j * S;
                const __m512 c0 = cvt16(c), c1 = S == 32 ? cvt16(c + 16) : c0;
                gsub512((int)S, c0, c1, g[r].a[j], g[r].m[j], G_OFF(mode), x0, x1, xs, T, A + r * T, B + r * T);
            }
        }
    }
    if (mode == QM_GGML_Q4_K && R == 4)
        _mm_storeu_ps(B, B4);
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
        for (int u = 0; u < T; u++)
            y[(t0 + u) * w->rows + r0 + r * step] = hsum512(A[r * T + u]) + B[r * T + u];
}

/* Rows [row0, row1) for tokens t0 .. t0 + T − 1: one token GR rows at a
 * time (one row's chains alone wait on their latency), rows a quarter of the
 * range apart (each of the GR streams of blocks read in order), else a row
 * at a time. */
AVX512 INLINE void gtile512(const struct wmat *w, const enum qmode mode, const struct kern_qinput *in, int64_t t0,
                            const int T, float *y, int64_t row0, int64_t row1)
{
    const int64_t q = T == 1 ? (row1 - row0) / GR : 0;
    gstarts(w, GR, row0, q);
    for (int64_t r = row0; r < row0 + q; r++)
        grows512(w, mode, in, t0, 1, GR, y, r, q);
    for (int64_t r = row0 + GR * q; r < row1; r++)
        grows512(w, mode, in, t0, T, 1, y, r, 0);
}

AVX512 void kern_gdot_avx512(const struct wmat *w, const struct kern_qinput *in, int64_t n, float *y, int64_t row0,
                             int64_t row1)
{
    G_TOKENS(gtile512)
}

/* ---- KERN_Q8 on ggml's blocks (kern_gq8dot_ref) ---- */

/* A window of up to 16 sub-blocks of a row from column col0: the blocks
 * decoded (codes c, zero past the window's nsw sub-blocks; a, m per sub-block). */
AVX2 INLINE void gq8_window(const struct wmat *w, const enum qmode mode, const uint8_t *row, int64_t col0,
                       int64_t nsw, int8_t *c, float *a, float *m)
{
    const int64_t bb = (int64_t)w->row_bytes / (w->cols / w->gs), per = w->gs / G_S(mode);
    for (int64_t k = 0; k * per < nsw; k++) {
        const uint8_t *blk = row + (size_t)((col0 / w->gs + k) * bb);
        gparams(mode, blk, a + k * per, m + k * per);
        gcodes(mode, blk, c + k * w->gs);
    }
    for (int64_t i = nsw * G_S(mode); i < 16 * G_S(mode); i++)
        c[i] = 0;
}

/* Q4_K / Q5_K: two blocks' 6-bit scales and mins as bytes (the low half:
 * b0's 8 scales, then b1's; the high half: their mins), and their d and
 * dmin as floats d0 dmin0 d1 dmin1. Per block (16 bytes: d, dmin, u0 u1 u2):
 * sub-blocks 0-3 are u0 / u1 & 0x3f, 4-7 are u2 (>> 4 for the mins) & 0x0f
 * with bits 6-7 of u0 / u1 above. */
AVX2 INLINE __m256i k45_bytes2(const uint8_t *b0, const uint8_t *b1, __m128 *dm)
{
    const __m128i v0 = _mm_loadu_si128((const __m128i *)b0), v1 = _mm_loadu_si128((const __m128i *)b1);
    *dm = _mm_cvtph_ps(_mm_unpacklo_epi32(v0, v1));
    const __m256i w = _mm256_shuffle_epi32(_mm256_set_m128i(v1, v0), 0xF9); /* u0 u1 u2 u2 */
    const __m256i lo = _mm256_and_si256(w, _mm256_set1_epi8(0x3f));
    const __m256i hi = _mm256_or_si256(
        _mm256_and_si256(_mm256_srlv_epi32(w, _mm256_setr_epi32(0, 0, 0, 4, 0, 0, 0, 4)), _mm256_set1_epi8(0x0f)),
        _mm256_and_si256(_mm256_srli_epi32(_mm256_shuffle_epi32(w, 0x40), 2), _mm256_set1_epi8(0x30)));
    /* per block: scales 0-3, mins 0-3, scales 4-7, mins 4-7; then scales, mins */
    const __m256i sm = _mm256_shuffle_epi32(_mm256_blend_epi32(lo, hi, 0xCC), 0xD8);
    return _mm256_permute4x64_epi64(sm, 0xD8);
}

/* A whole window of Q4_K / Q5_K (two blocks, 16 sub-blocks from col0) for
 * T tokens, codes in registers: per 64 code bytes of a block (two parts)
 * their low and high nibbles, whose 256-bit halves regroup into chunks
 * (part p's low nibbles, then its high ones: gcodes' bytes); the scales
 * and mins of both blocks in one vector each. */
AVX512VNNI INLINE void k45_window512(const enum qmode mode, const uint8_t *b0, const uint8_t *b1,
                                     const struct kern_q8input *in, int64_t t0, const int T, int64_t col0, int64_t ng,
                                     __m512 *L)
{
    __m128 f;
    const __m256i sm = k45_bytes2(b0, b1, &f);
    const __m512 dd = _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 2, 2, 2, 2, 2, 2, 2, 2),
                                            _mm512_castps128_ps512(f));
    const __m512 dm = _mm512_permutexvar_ps(_mm512_setr_epi32(1, 1, 1, 1, 1, 1, 1, 1, 3, 3, 3, 3, 3, 3, 3, 3),
                                            _mm512_castps128_ps512(f));
    const __m512 av = _mm512_mul_ps(dd, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm256_castsi256_si128(sm))));
    const __m512 mn = _mm512_mul_ps(dm, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm256_extracti128_si256(sm, 1))));
    const __m512 mv = _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(mn), _mm512_set1_epi32(INT32_MIN)));
    const __m512i m4 = _mm512_set1_epi8(0x0f), v16 = _mm512_set1_epi8(16);
    __m512i cv[8];
    for (int k = 0; k < 2; k++) {
        const uint8_t *blk = k ? b1 : b0;
        const __m512i qh = mode == QM_GGML_Q5_K ? _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(blk + 16)))
                                                : _mm512_setzero_si512();
        for (int q = 0; q < 2; q++) { /* parts 2q and 2q + 1 */
            const __m512i v = _mm512_loadu_si512(blk + (mode == QM_GGML_Q5_K ? 48 : 16) + 64 * q);
            __m512i lo = _mm512_and_si512(v, m4), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
            if (mode == QM_GGML_Q5_K) { /* part p's fifth bits: 2p (low nibbles), 2p + 1 (high) */
                const __m512i blo = _mm512_inserti64x4(_mm512_set1_epi8((char)(1 << 4 * q)), _mm256_set1_epi8((char)(4 << 4 * q)), 1);
                const __m512i bhi = _mm512_inserti64x4(_mm512_set1_epi8((char)(2 << 4 * q)), _mm256_set1_epi8((char)(8 << 4 * q)), 1);
                lo = _mm512_mask_add_epi8(lo, _mm512_test_epi8_mask(qh, blo), lo, v16);
                hi = _mm512_mask_add_epi8(hi, _mm512_test_epi8_mask(qh, bhi), hi, v16);
            }
            cv[4 * k + 2 * q] = lo; /* sub-blocks 4q and 4q + 2 of block k, against xqs */
            cv[4 * k + 2 * q + 1] = hi;
        }
    }
    /* the sums' lanes: lane_pair_sums twice (|sums| <= 8 * 31 * 127), then across 128-bit lanes */
    const __m512i order = _mm512_setr_epi32(0, 1, 4, 5, 2, 3, 6, 7, 8, 9, 12, 13, 10, 11, 14, 15);
    for (int u = 0; u < T; u++) {
        const int8_t *xq = in->xqs + (t0 + u) * in->stride + col0;
        __m512i r[8];
#pragma GCC unroll 8
        for (int k = 0; k < 8; k++)
            r[k] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), cv[k], _mm512_loadu_si512(xq + 64 * k));
        const __m512i p0 = lane_pair_sums(lane_pair_sums(r[0], r[1]), lane_pair_sums(r[2], r[3]));
        const __m512i p1 = lane_pair_sums(lane_pair_sums(r[4], r[5]), lane_pair_sums(r[6], r[7]));
        const __m512i s = _mm512_permutexvar_epi32(order, _mm512_add_epi32(_mm512_shuffle_i64x2(p0, p1, 0x88),
                                                                          _mm512_shuffle_i64x2(p0, p1, 0xDD)));
        const float *d = in->d + (t0 + u) * ng + col0 / KERN_GSUM, *xs = in->xsum + (t0 + u) * ng + col0 / KERN_GSUM;
        L[u] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(_mm512_loadu_ps(d), av), L[u]);
        L[u] = _mm512_fmadd_ps(mv, _mm512_loadu_ps(xs), L[u]);
    }
}

/* A Q6_K block (one window: 16 sub-blocks of 16 from col0) for T tokens,
 * codes in registers: per half, the 64 bytes of ql with qh's two bits
 * shifted per 256-bit half (parts 0 and 1, then 2 and 3: gcodes' bytes),
 * as stored (c + 32, unsigned); a sub-block's sum is Σ (c + 32)·xq − 32·Σ xq. */
AVX512VNNI INLINE void q6k_window512(const uint8_t *b, const struct kern_q8input *in, int64_t t0, const int T,
                                     int64_t col0, int64_t ng, __m512 *L)
{
    const __m512 av = _mm512_mul_ps(_mm512_set1_ps(h2f(b + 208)),
                                    _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(b + 192)))));
    const __m512i m4 = _mm512_set1_epi8(0x0f), m30 = _mm512_set1_epi8(0x30);
    const __m512i sl = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1); /* qh bits 0-1, 2-3 to 4-5 */
    const __m512i sr = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1); /* bits 4-5, 6-7 */
    __m512i cv[4];
    for (int h = 0; h < 2; h++) {
        const __m512i v = _mm512_loadu_si512(b + 64 * h);
        const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(b + 128 + 32 * h)));
        cv[2 * h] = _mm512_or_si512(_mm512_and_si512(v, m4), _mm512_and_si512(_mm512_sllv_epi16(qh, sl), m30));
        cv[2 * h + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(v, 4), m4),
                                        _mm512_and_si512(_mm512_srlv_epi16(qh, sr), m30));
    }
    const __m512i pairs = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
    /* the sums' lanes: lane_pair_sums (|sums| <= 4 * 63 * 127), then in 32 bits within 128-bit lanes */
    const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    for (int u = 0; u < T; u++) {
        const int8_t *xq = in->xq + (t0 + u) * in->stride + col0;
        __m512i r[4];
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++)
            r[k] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), cv[k], _mm512_loadu_si512(xq + 64 * k));
        const __m512 p0 = _mm512_castsi512_ps(lane_pair_sums(r[0], r[1])), p1 = _mm512_castsi512_ps(lane_pair_sums(r[2], r[3]));
        const __m512i sums = _mm512_add_epi32(_mm512_castps_si512(_mm512_shuffle_ps(p0, p1, 0x88)),
                                              _mm512_castps_si512(_mm512_shuffle_ps(p0, p1, 0xDD)));
        const __m512i qs = _mm512_loadu_si512(in->qsum + (t0 + u) * (in->stride / 16) + col0 / 16);
        const __m512i s = _mm512_sub_epi32(_mm512_permutexvar_epi32(order, sums), _mm512_slli_epi32(qs, 5));
        const __m512 dv = _mm512_permutexvar_ps(pairs, _mm512_maskz_loadu_ps((__mmask16)0xFF, in->d + (t0 + u) * ng + col0 / KERN_GSUM));
        L[u] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(dv, av), L[u]);
    }
}

/* Rows [row0, row1) for tokens t0 .. t0 + T − 1: per window of 16
 * sub-blocks, vpdpbusd on |xq| and the codes with xq's signs, the lane sums
 * reduced by pair_sums to one sum per sub-block, lane i the window's i-th. */
AVX512VNNI INLINE void gq8rows512(const struct wmat *w, const enum qmode mode, const struct kern_q8input *in,
                                  int64_t t0, const int T, float *y, int64_t row0, int64_t row1)
{
    const int64_t S = G_S(mode), nsub = w->cols / S, ng = w->cols / KERN_GSUM;
    const int chunks = (int)(16 * S / 64); /* 8 (S = 32) or 4 */
    const int64_t bb = (int64_t)w->row_bytes / (w->cols / w->gs);
    const int64_t wbytes = 16 * S / w->gs * bb; /* a whole window's bytes */
    const __m512i pairs = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
    for (int64_t r = row0; r < row1; r++) {
        const uint8_t *row = w->w + (size_t)r * w->row_stride, *wb = row; /* the window's bytes */
        __m512 L[TB];
        for (int u = 0; u < T; u++)
            L[u] = _mm512_setzero_ps();
        for (int64_t w0 = 0; w0 < nsub; w0 += 16, wb += wbytes) {
            const int64_t nsw = nsub - w0 < 16 ? nsub - w0 : 16, col0 = w0 * S, len = nsw * S;
            const int64_t nb = nsw == 16 ? wbytes : nsw * S / w->gs * bb;
            for (int64_t o = 0; o < nb; o += 64) /* PREFETCH past them */
                _mm_prefetch((const char *)wb + PREFETCH + o, _MM_HINT_T0);
            if ((mode == QM_GGML_Q4_K || mode == QM_GGML_Q5_K) && nsw == 16) {
                k45_window512(mode, wb, wb + bb, in, t0, T, col0, ng, L);
                continue;
            }
            if (mode == QM_GGML_Q6_K) { /* a window is a block */
                q6k_window512(wb, in, t0, T, col0, ng, L);
                continue;
            }
            _Alignas(64) int8_t c[512];
            _Alignas(64) float a[16] = {0}, m[16] = {0};
            gq8_window(w, mode, row, col0, nsw, c, a, m);
            const __mmask16 lanes = mask16(nsw);
            const __m512 av = _mm512_load_ps(a), mv = _mm512_load_ps(m);
            for (int u = 0; u < T; u++) {
                const int8_t *xq = in->xq + (t0 + u) * in->stride + col0;
                __m512i lv[4], s = _mm512_setzero_si512();
#pragma GCC unroll 8
                for (int k = 0; k < chunks; k++) {
                    const int64_t left = len - 64 * k;
                    const __mmask64 mk = left >= 64 ? ~(__mmask64)0 : left <= 0 ? 0 : ((__mmask64)1 << left) - 1;
                    const __m512i xv = _mm512_maskz_loadu_epi8(mk, xq + 64 * k), cv = _mm512_load_si512(c + 64 * k);
                    if (G_OFF(mode)) /* codes 0..31: unsigned as they are */
                        s = _mm512_dpbusd_epi32(_mm512_setzero_si512(), cv, xv);
                    else /* |xq| times the codes with xq's signs */
                        s = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_abs_epi8(xv),
                                                _mm512_mask_sub_epi8(cv, _mm512_movepi8_mask(xv), _mm512_setzero_si512(), cv));
                    int level = 0;
                    for (int h = k; h & 1; h >>= 1, level++)
                        s = pair_sums(lv[level], s);
                    lv[level] = s;
                }
                const __m512 dv = S == 32 ? _mm512_maskz_loadu_ps(lanes, in->d + (t0 + u) * ng + col0 / KERN_GSUM)
                                          : _mm512_permutexvar_ps(pairs, _mm512_maskz_loadu_ps((__mmask16)0xFF,
                                                                                                in->d + (t0 + u) * ng + col0 / KERN_GSUM));
                L[u] = _mm512_mask3_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(dv, av), L[u], lanes);
                if (G_OFF(mode))
                    L[u] = _mm512_mask3_fmadd_ps(mv, _mm512_maskz_loadu_ps(lanes, in->xsum + (t0 + u) * ng + col0 / KERN_GSUM),
                                                 L[u], lanes);
            }
        }
        for (int u = 0; u < T; u++)
            y[(t0 + u) * w->rows + r] = hsum512(L[u]);
    }
}

AVX512VNNI void kern_gq8dot_avx512(const struct wmat *w, const struct kern_q8input *in, int64_t n, float *y,
                                   int64_t row0, int64_t row1)
{
    G_TOKENS(gq8rows512)
}

/* The sums of 8 int32 vectors' lanes, vector i's in lane i (exact). */
AVX2 INLINE __m256i sums8(const __m256i v[8])
{
    const __m256i a = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
    const __m256i b = _mm256_hadd_epi32(_mm256_hadd_epi32(v[4], v[5]), _mm256_hadd_epi32(v[6], v[7]));
    return _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20), _mm256_permute2x128_si256(a, b, 0x31));
}

/* Σ xq·c over 32 bytes as 8 int32 lane sums (|xq|, |c| <= 127: no pair saturates). */
AVX2 INLINE __m256i dot32(const int8_t *xq, const int8_t *c)
{
    const __m256i xv = _mm256_loadu_si256((const __m256i *)xq), cv = _mm256_loadu_si256((const __m256i *)c);
    return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(xv), _mm256_sign_epi8(cv, xv)), _mm256_set1_epi16(1));
}

/* dot32 of a mode's codes: those of the types with offsets (0..31, no pair
 * saturates) go into vpmaddubsw as they are, the others through xq's signs. */
AVX2 INLINE __m256i gdot32(const enum qmode mode, const int8_t *xq, const int8_t *c)
{
    if (!G_OFF(mode))
        return dot32(xq, c);
    const __m256i xv = _mm256_loadu_si256((const __m256i *)xq), cv = _mm256_loadu_si256((const __m256i *)c);
    return _mm256_madd_epi16(_mm256_maddubs_epi16(cv, xv), _mm256_set1_epi16(1));
}

/* As gq8rows512 on 8-lane halves: per sub-block (S = 32) or pair of them
 * (S = 16, lanes 0-3 and 4-7) the lane sums of maddubs + madd, reduced by hadd. */
AVX2 INLINE void gq8rows256(const struct wmat *w, const enum qmode mode, const struct kern_q8input *in, int64_t t0,
                            const int T, float *y, int64_t row0, int64_t row1)
{
    const int64_t S = G_S(mode), nsub = w->cols / S, ng = w->cols / KERN_GSUM;
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (int64_t r = row0; r < row1; r++) {
        const uint8_t *row = w->w + (size_t)r * w->row_stride;
        __m256 lo[TB], hi[TB];
        for (int u = 0; u < T; u++)
            lo[u] = hi[u] = _mm256_setzero_ps();
        for (int64_t w0 = 0; w0 < nsub; w0 += 16) {
            const int64_t nsw = nsub - w0 < 16 ? nsub - w0 : 16, col0 = w0 * S;
            _Alignas(64) int8_t c[512];
            _Alignas(64) float a[16], m[16];
            if (nsw < 16)
                for (int i = 0; i < 16; i++)
                    a[i] = m[i] = 0.0f;
            gq8_window(w, mode, row, col0, nsw, c, a, m);
            for (int u = 0; u < T; u++) {
                const int8_t *xq = in->xq + (t0 + u) * in->stride + col0;
                __m256i s[2];
                for (int h = 0; nsw == 16 && h < 2; h++) { /* sub-blocks 8h .. 8h + 7 of a whole window */
                    __m256i v[8];
                    if (S == 32) {
#pragma GCC unroll 8
                        for (int i = 0; i < 8; i++)
                            v[i] = gdot32(mode, xq + 32 * (8 * h + i), c + 32 * (8 * h + i));
                        s[h] = sums8(v);
                    } else {
#pragma GCC unroll 4
                        for (int i = 0; i < 4; i++)
                            v[i] = dot32(xq + 16 * (8 * h + 2 * i), c + 16 * (8 * h + 2 * i));
                        const __m256i q = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
                        s[h] = _mm256_permutevar8x32_epi32(q, order);
                    }
                }
                for (int h = 0; nsw < 16 && h < 2; h++) { /* sub-blocks 8h .. 8h + 7 */
                    __m256i v[8];
                    for (int i = 0; i < 8; i++)
                        v[i] = _mm256_setzero_si256();
                    if (S == 32) {
                        for (int i = 0; i < 8 && 8 * h + i < nsw; i++)
                            v[i] = gdot32(mode, xq + 32 * (8 * h + i), c + 32 * (8 * h + i));
                        s[h] = sums8(v);
                    } else { /* 4 vectors of 2 sub-blocks: halves summed as 8 lanes, then the order restored */
                        for (int i = 0; i < 4 && 8 * h + 2 * i < nsw; i++)
                            v[i] = dot32(xq + 16 * (8 * h + 2 * i), c + 16 * (8 * h + 2 * i));
                        const __m256i q = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
                        s[h] = _mm256_permutevar8x32_epi32(q, order);
                    }
                }
                const float *d = in->d + (t0 + u) * ng + col0 / KERN_GSUM, *xs = in->xsum + (t0 + u) * ng + col0 / KERN_GSUM;
                if (nsw == 16) { /* a whole window: d and Σx as they are (S = 16: d[i / 2]) */
                    for (int h = 0; h < 2; h++) {
                        const __m256 dv = S == 32 ? _mm256_loadu_ps(d + 8 * h)
                                                  : _mm256_permutevar8x32_ps(_mm256_castps128_ps256(_mm_loadu_ps(d + 4 * h)),
                                                                             _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3));
                        __m256 *acc = h ? &hi[u] : &lo[u];
                        *acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[h]), _mm256_mul_ps(dv, _mm256_load_ps(a + 8 * h)), *acc);
                        if (G_OFF(mode))
                            *acc = _mm256_fmadd_ps(_mm256_load_ps(m + 8 * h), _mm256_loadu_ps(xs + 8 * h), *acc);
                    }
                    continue;
                }
                float dl[16] = {0}, xl[16] = {0};
                for (int64_t i = 0; i < nsw; i++) {
                    dl[i] = d[S == 32 ? i : i / 2];
                    xl[i] = G_OFF(mode) ? xs[i] : 0.0f;
                }
                for (int h = 0; h < 2; h++) {
                    const __m256 ds = _mm256_mul_ps(_mm256_loadu_ps(dl + 8 * h), _mm256_load_ps(a + 8 * h));
                    const __m256 live = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32((int)(nsw - 8 * h)),
                                                                               _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)));
                    __m256 *acc = h ? &hi[u] : &lo[u];
                    __m256 v = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[h]), ds, *acc);
                    if (G_OFF(mode))
                        v = _mm256_fmadd_ps(_mm256_load_ps(m + 8 * h), _mm256_loadu_ps(xl + 8 * h), v);
                    *acc = _mm256_blendv_ps(*acc, v, live);
                }
            }
        }
        for (int u = 0; u < T; u++)
            y[(t0 + u) * w->rows + r] = hsum256(_mm256_add_ps(lo[u], hi[u]));
    }
}

AVX2 void kern_gq8dot_avx2(const struct wmat *w, const struct kern_q8input *in, int64_t n, float *y, int64_t row0,
                           int64_t row1)
{
    G_TOKENS(gq8rows256)
}
