/* gdot.c - the x86 twins of kern_gdot_ref (kernels/internal.h, ggml's block
 * types): a block's codes decoded with byte shuffles into the same int8
 * bytes as the scalar decoders (AVX2, also called by the AVX-512 kernel),
 * its scales and offsets by the type's row (kernels/ggml.c), then the
 * definition's lanes for up to TB tokens at once, the codes converted once. */
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

/* Byte j = `val` where bit j of the 32 at qh is set, else 0. */
AVX2 INLINE __m256i bits32(const uint8_t *qh, char val)
{
    const __m256i pick = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3,
                                          3, 3, 3, 3, 3, 3, 3);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    const __m256i v = _mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32((int)rd_u32le(qh)), pick), bit);
    return _mm256_and_si256(_mm256_cmpeq_epi8(v, bit), _mm256_set1_epi8(val));
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
AVX2 void kern_gcodes_avx2(enum qmode m, const uint8_t *b, int8_t *c)
{
    const __m256i kv = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)ggml_kvalues_iq4nl));
    const __m256i m4 = _mm256_set1_epi8(0x0f), m30 = _mm256_set1_epi8(0x30), b32 = _mm256_set1_epi8(32);
    switch (m) {
    case QM_GGML_Q4_1:
        put(c, nib16(b + 4));
        break;
    case QM_GGML_Q5_0:
        put(c, _mm256_sub_epi8(_mm256_or_si256(nib16(b + 6), bits32(b + 2, 16)), _mm256_set1_epi8(16)));
        break;
    case QM_GGML_Q5_1:
        put(c, _mm256_or_si256(nib16(b + 8), bits32(b + 4, 16)));
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

/* Codes c[0..7] as floats. */
AVX2 INLINE __m256 cvt8(const int8_t *c)
{
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)c)));
}

/* Rows [row0, row1) for tokens t0 .. t0 + T − 1: lanes 0-7 in lo, 8-15 in hi. */
AVX2 INLINE void grows256(const struct wmat *w, const struct kern_gtype *gt, const struct kern_qinput *in, int64_t t0,
                          const int T, float *y, int64_t row0, int64_t row1)
{
    const int64_t nb = w->cols / w->gs, bb = (int64_t)w->row_bytes / nb, ns = w->gs / gt->S, S = gt->S;
    const int64_t nsum = w->cols / KERN_GSUM;
    for (int64_t r = row0; r < row1; r++) {
        __m256 lo[TB], hi[TB];
        float B[TB];
        for (int u = 0; u < T; u++)
            lo[u] = hi[u] = _mm256_setzero_ps(), B[u] = 0.0f;
        const uint8_t *row = w->w + (size_t)r * w->row_stride;
        for (int64_t bi = 0; bi < nb; bi++) {
            const uint8_t *blk = row + (size_t)(bi * bb);
            struct kern_gblock g;
            gt->params(blk, g.a, g.m);
            kern_gcodes_avx2(w->mode, blk, g.c);
            for (int64_t j = 0; j < ns; j++) {
                const int64_t col = bi * w->gs + j * S;
                const int8_t *c = g.c + j * S;
                const __m256 c0 = cvt8(c), c1 = cvt8(c + 8), a = _mm256_set1_ps(g.a[j]);
                __m256 c2 = c0, c3 = c1;
                if (S == 32)
                    c2 = cvt8(c + 16), c3 = cvt8(c + 24);
#pragma GCC unroll 4
                for (int u = 0; u < T; u++) {
                    const float *x = in->xd + (t0 + u) * in->stride + col;
                    __m256 pl = _mm256_mul_ps(_mm256_loadu_ps(x), c0), ph = _mm256_mul_ps(_mm256_loadu_ps(x + 8), c1);
                    if (S == 32) {
                        pl = _mm256_fmadd_ps(_mm256_loadu_ps(x + 16), c2, pl);
                        ph = _mm256_fmadd_ps(_mm256_loadu_ps(x + 24), c3, ph);
                    }
                    lo[u] = _mm256_fmadd_ps(pl, a, lo[u]);
                    hi[u] = _mm256_fmadd_ps(ph, a, hi[u]);
                    if (gt->offsets)
                        B[u] = fmaf(g.m[j], in->xsum[(t0 + u) * nsum + col / KERN_GSUM], B[u]);
                }
            }
        }
        for (int u = 0; u < T; u++)
            y[(t0 + u) * w->rows + r] = hsum256(_mm256_add_ps(lo[u], hi[u])) + B[u];
    }
}

AVX2 void kern_gdot_avx2(const struct wmat *w, const struct kern_qinput *in, int64_t n, float *y, int64_t row0,
                         int64_t row1)
{
    const struct kern_gtype *gt = kern_gtype_of(w->mode);
    for (int64_t t0 = 0; t0 < n; t0 += TB) {
        switch (n - t0 < TB ? n - t0 : TB) {
        case 1: grows256(w, gt, in, t0, 1, y, row0, row1); break;
        case 2: grows256(w, gt, in, t0, 2, y, row0, row1); break;
        case 3: grows256(w, gt, in, t0, 3, y, row0, row1); break;
        default: grows256(w, gt, in, t0, 4, y, row0, row1); break;
        }
    }
}

/* Codes c[0..15] as floats. */
AVX512 INLINE __m512 cvt16(const int8_t *c)
{
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)c)));
}

AVX512 INLINE void grows512(const struct wmat *w, const struct kern_gtype *gt, const struct kern_qinput *in, int64_t t0,
                            const int T, float *y, int64_t row0, int64_t row1)
{
    const int64_t nb = w->cols / w->gs, bb = (int64_t)w->row_bytes / nb, ns = w->gs / gt->S, S = gt->S;
    const int64_t nsum = w->cols / KERN_GSUM;
    for (int64_t r = row0; r < row1; r++) {
        __m512 A[TB];
        float B[TB];
        for (int u = 0; u < T; u++)
            A[u] = _mm512_setzero_ps(), B[u] = 0.0f;
        const uint8_t *row = w->w + (size_t)r * w->row_stride;
        for (int64_t bi = 0; bi < nb; bi++) {
            const uint8_t *blk = row + (size_t)(bi * bb);
            _mm_prefetch((const char *)blk + PREFETCH, _MM_HINT_T0);
            struct kern_gblock g;
            gt->params(blk, g.a, g.m);
            kern_gcodes_avx2(w->mode, blk, g.c);
            for (int64_t j = 0; j < ns; j++) {
                const int64_t col = bi * w->gs + j * S;
                const int8_t *c = g.c + j * S;
                const __m512 c0 = cvt16(c), c1 = S == 32 ? cvt16(c + 16) : c0, a = _mm512_set1_ps(g.a[j]);
#pragma GCC unroll 4
                for (int u = 0; u < T; u++) {
                    const float *x = in->xd + (t0 + u) * in->stride + col;
                    __m512 p = _mm512_mul_ps(_mm512_loadu_ps(x), c0);
                    if (S == 32)
                        p = _mm512_fmadd_ps(_mm512_loadu_ps(x + 16), c1, p);
                    A[u] = _mm512_fmadd_ps(p, a, A[u]);
                    if (gt->offsets)
                        B[u] = fmaf(g.m[j], in->xsum[(t0 + u) * nsum + col / KERN_GSUM], B[u]);
                }
            }
        }
        for (int u = 0; u < T; u++)
            y[(t0 + u) * w->rows + r] = hsum512(A[u]) + B[u];
    }
}

AVX512 void kern_gdot_avx512(const struct wmat *w, const struct kern_qinput *in, int64_t n, float *y, int64_t row0,
                             int64_t row1)
{
    const struct kern_gtype *gt = kern_gtype_of(w->mode);
    for (int64_t t0 = 0; t0 < n; t0 += TB) {
        switch (n - t0 < TB ? n - t0 : TB) {
        case 1: grows512(w, gt, in, t0, 1, y, row0, row1); break;
        case 2: grows512(w, gt, in, t0, 2, y, row0, row1); break;
        case 3: grows512(w, gt, in, t0, 3, y, row0, row1); break;
        default: grows512(w, gt, in, t0, 4, y, row0, row1); break;
        }
    }
}
