/* q8_avx2.h - the int8 kernels on 256-bit vectors, a template that
 * q8_avx2.c instantiates twice: ATTR (target attributes), SFX (name suffix),
 * and DOT(acc, u, s), acc's 8 int32 lanes plus the sums of four products
 * u·s (u unsigned bytes below 129, s signed), exact; DOT8 the same for
 * 8-bit codes (any byte); PAIRS(s, lo, hi, xe, xo) adds to s the products
 * of one 4-bit word's low and high nibbles (lo, hi) with their xq (xe, xo),
 * for up to four words, and FLUSH(acc, s) adds s to acc's int32 lanes. The bits of
 * kern_q8dot_ref (kernels/internal.h). */

#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
#define F(name) CAT(name, SFX)

/* The sum of c's 8 int32 lanes (exact: the lanes are a group's partial sums). */
ATTR INLINE int32_t F(hsum_i32_)(__m256i v)
{
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
    return _mm_cvtsi128_si32(_mm_add_epi32(s, _mm_shuffle_epi32(s, 1)));
}

/* Eight scales or biases of type t as float32. */
ATTR INLINE __m256 F(params8_)(enum dtype t, const uint8_t *src)
{
    if (t == DT_F32)
        return _mm256_loadu_ps((const float *)(const void *)src);
    __m128i h = _mm_loadu_si128((const __m128i *)(const void *)src);
    if (t == DT_F16)
        return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* S of one group of one row, by rows: the group's code bytes (nb of them:
 * 16, 32 or 64) against its xq (4-bit: the low nibbles' at xlo, the high
 * nibbles' at xlo + 64; 8-bit: xlo). */
ATTR INLINE int32_t F(q8group_row_)(const uint8_t *c, const int8_t *xlo, const int nb, const int bits)
{
    const __m256i nib = _mm256_set1_epi8(0x0F);
    __m256i lo = _mm256_setzero_si256(), hi = _mm256_setzero_si256();
    for (int o = 0; o < nb; o += 32) {
        __m256i v, x, xh;
        if (nb == 16) { /* 4-bit group of 32: half a register */
            v = _mm256_inserti128_si256(_mm256_setzero_si256(), _mm_loadu_si128((const __m128i *)(const void *)c), 0);
            x = _mm256_inserti128_si256(_mm256_setzero_si256(), _mm_loadu_si128((const __m128i *)(const void *)xlo), 0);
            xh = _mm256_inserti128_si256(_mm256_setzero_si256(), _mm_loadu_si128((const __m128i *)(const void *)(xlo + 64)), 0);
        } else {
            v = _mm256_loadu_si256((const __m256i *)(const void *)(c + o));
            x = _mm256_loadu_si256((const __m256i *)(const void *)(xlo + o));
            xh = bits == 4 ? _mm256_loadu_si256((const __m256i *)(const void *)(xlo + 64 + o)) : x;
        }
        if (bits == 8) {
            DOT8(lo, hi, v, x);
        } else {
            lo = DOT(lo, _mm256_and_si256(v, nib), x);
            hi = DOT(hi, _mm256_and_si256(_mm256_srli_epi16(v, 4), nib), xh);
        }
    }
    return F(hsum_i32_)(_mm256_add_epi32(lo, bits == 8 ? _mm256_slli_epi32(hi, 4) : hi));
}

/* Rows [row0, row1) by rows, one token at a time: the sums S_g of a window
 * of 16 groups, then the definition's two steps on the window's lanes. */
ATTR INLINE void F(q8rows_)(const struct wmat *w, const struct kern_q8input *in, void *ws, int64_t t0, int64_t n,
                            float *y, int64_t row0, int64_t row1, const int gs, const int bits)
{
    const int64_t ng = w->cols / gs;
    const int nb = gs * bits / 8;
    const size_t psize = dtype_table[w->dtype].bits / 8;
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    for (int64_t r = row0; r < row1; r++) {
        const uint8_t *codes = w->w + (size_t)r * w->row_stride;
        const uint8_t *sr = w->s + (size_t)r * w->srow_bytes, *br = w->b + (size_t)r * w->srow_bytes;
        for (int64_t t = t0; t < t0 + n; t++) {
            const int8_t *xq = in->xq + t * in->stride;
            const float *d = in->d + t * ng, *xs = in->xsum + t * ng;
            __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
            for (int64_t g0 = 0; g0 < ng; g0 += 16) {
                int32_t S[16] = {0};
                float sc[16] = {0}, bi[16] = {0};
                const int64_t nw = ng - g0 < 16 ? ng - g0 : 16;
                for (int64_t i = 0; i < nw; i++) {
                    const int64_t j = (g0 + i) * gs; /* the group's first weight */
                    const int8_t *x = bits == 8 ? xq + j : xq + 128 * (j / 128) + j % 128 / 2;
                    S[i] = F(q8group_row_)(codes + j * bits / 8, x, nb, bits);
                }
                dtype_to_f32(w->dtype, sr + (size_t)g0 * psize, sc, (size_t)nw);
                dtype_to_f32(w->dtype, br + (size_t)g0 * psize, bi, (size_t)nw);
                for (int h = 0; h < 2; h++) {
                    const __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(nw - 8 * h)), lane);
                    const __m256 ds = _mm256_mul_ps(_mm256_maskload_ps(d + g0 + 8 * h, m), _mm256_loadu_ps(sc + 8 * h));
                    const __m256 Sf = _mm256_cvtepi32_ps(_mm256_loadu_si256((const __m256i *)(const void *)(S + 8 * h)));
                    acc[h] = _mm256_fmadd_ps(Sf, ds, acc[h]);
                    acc[h] = _mm256_fmadd_ps(_mm256_loadu_ps(bi + 8 * h), _mm256_maskload_ps(xs + g0 + 8 * h, m), acc[h]);
                }
            }
            y[t * w->rows + r] = hsum256(_mm256_add_ps(acc[0], acc[1]));
        }
    }
}

/* S of group g (its record's words at c) for the 16 rows of a block, one row
 * a lane, rows 0-7 in S[0] and 8-15 in S[1]: word k of the group (64 bytes,
 * 4 per row) against the token's four xq of that word in every lane. Each
 * word prefetched PREFETCH ahead (8-bit: half as far): the kernel alone from
 * RAM, alternated in one process, on X16 (AVX2, no VNNI) 1.40-1.48x at 4 bits
 * and 1.22-1.44x at 8, 1-4 threads; on E (Zen 4) 1.0x at 2 threads, at 1
 * 0.89x (4-bit) and 0.79x (8-bit). */
ATTR INLINE void F(q8group16_)(const uint8_t *c, const int8_t *xq, int64_t g, const int gs, const int bits,
                               __m256i S[2])
{
    const int words = gs * bits / 32;
    const __m256i nib = _mm256_set1_epi8(0x0F);
    __m256i lo[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()}, hi[2] = {lo[0], lo[0]};
    if (bits == 4) {
#pragma GCC unroll 4
        for (int k0 = 0; k0 < words; k0 += 4) {
            __m256i s4[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
#pragma GCC unroll 4
            for (int k = k0; k < k0 + 4; k++) {
                const int64_t wd = g * words + k;
                const int8_t *e = xq + 128 * (wd / 16) + 4 * (wd % 16);
                const __m256i xe = _mm256_set1_epi32((int)rd_u32le(e)), xo = _mm256_set1_epi32((int)rd_u32le(e + 64));
                _mm_prefetch((const char *)c + 64 * k + PREFETCH, _MM_HINT_T0);
                for (int h = 0; h < 2; h++) {
                    const __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)(c + 64 * k + 32 * h));
                    PAIRS(s4[h], _mm256_and_si256(v, nib), _mm256_and_si256(_mm256_srli_epi16(v, 4), nib), xe, xo);
                }
            }
            for (int h = 0; h < 2; h++)
                FLUSH(lo[h], s4[h]);
        }
        S[0] = lo[0];
        S[1] = lo[1];
        return;
    }
#pragma GCC unroll 32
    for (int k = 0; k < words; k++) {
        const __m256i x = _mm256_set1_epi32((int)rd_u32le(xq + 4 * (g * words + k)));
        _mm_prefetch((const char *)c + 64 * k + PREFETCH / 2, _MM_HINT_T0);
        for (int h = 0; h < 2; h++)
            DOT8(lo[h], hi[h], _mm256_loadu_si256((const __m256i *)(const void *)(c + 64 * k + 32 * h)), x);
    }
    for (int h = 0; h < 2; h++)
        S[h] = _mm256_add_epi32(lo[h], _mm256_slli_epi32(hi[h], 4));
}

/* A tile's (token, half) after group g: S_g (exact int32) takes the
 * definition's two steps into its lane, *a, which the lane's first group (g <
 * 16) sets; k: the token's group index into in->d and in->xsum. */
ATTR INLINE void F(q8fold_)(__m256 *a, int64_t g, __m256i S, const struct kern_q8input *in, int64_t k, __m256 sc,
                            __m256 bi)
{
    const __m256 a0 = g < 16 ? _mm256_setzero_ps() : *a;
    const __m256 ds = _mm256_mul_ps(_mm256_set1_ps(in->d[k]), sc);
    *a = _mm256_fmadd_ps(bi, _mm256_set1_ps(in->xsum[k]), _mm256_fmadd_ps(_mm256_cvtepi32_ps(S), ds, a0));
}

/* The lanes of a tile's n tokens that no group reaches (l >= ng): the
 * definition's zeros, set before the groups. */
ATTR INLINE void F(q8zero_)(__m256 (*acc)[16][2], int n, int64_t ng)
{
    for (int u = 0; u < n; u++)
        for (int64_t l = ng; l < 16; l++)
            acc[u][l][0] = acc[u][l][1] = _mm256_setzero_ps();
}

/* Half h of a tile's token: its 16 lanes (lanes[l][h]; those of no group
 * zero, q8zero_) summed in the definition's order into out[0..7]. */
ATTR INLINE void F(q8lanes_)(__m256 (*lanes)[2], int h, float *out)
{
    __m256 a[16];
#pragma GCC unroll 16
    for (int l = 0; l < 16; l++)
        a[l] = lanes[l][h];
#pragma GCC unroll 4
    for (int s = 8; s >= 1; s /= 2)
#pragma GCC unroll 8
        for (int l = 0; l < s; l++)
            a[l] = _mm256_add_ps(a[l], a[l + s]);
    _mm256_storeu_ps(out, a[0]);
}

/* Q8_TILE tokens from t0 of the 16-row block at row r, 4-bit codes: per
 * group and half (8 rows), a word's load and nibble split serve every token;
 * each (token, half)'s S_g (exact int32, as q8group16_'s) then takes the
 * definition's two steps into lane g % 16, acc[u][g % 16][h], which its first
 * group sets; the 16 lanes summed in the definition's order at the end. The
 * halves and the words of a group are loops, the tokens unrolled: fully
 * unrolled, GCC kept every product live and spilled them. */
#define Q8_TILE 4
ATTR INLINE void F(q8tile_)(const struct wmat *w, const struct kern_q8input *in, int64_t t0, float *y, int64_t r,
                            const int gs)
{
    const int64_t ng = w->cols / gs;
    const int words = gs / 8;
    const size_t block = kern_block_off(w, 1, 0), rec = kern_block_off(w, 0, 1);
    const size_t half = 8 * (dtype_table[w->dtype].bits / 8); /* bytes of 8 rows' scales */
    const size_t off = (size_t)(r / KERN_BLOCK_ROWS) * block;
    const uint8_t *c = w->w + off, *sb = w->s + off, *bb = w->b + off;
    const __m256i nib = _mm256_set1_epi8(0x0F);
    const int8_t *xq[Q8_TILE];
    __m256 acc[Q8_TILE][16][2];
    F(q8zero_)(acc, Q8_TILE, ng);
    for (int u = 0; u < Q8_TILE; u++) {
        xq[u] = in->xq + (t0 + u) * in->stride;
        _mm_prefetch((const char *)(y + (t0 + u) * w->rows + r), _MM_HINT_ET0);
    }
    for (int64_t g = 0; g < ng; g++) {
        const uint8_t *cg = c + (size_t)g * rec;
#pragma GCC unroll 1
        for (int h = 0; h < 2; h++) {
            __m256i S[Q8_TILE];
#pragma GCC unroll 4
            for (int u = 0; u < Q8_TILE; u++)
                S[u] = _mm256_setzero_si256();
#pragma GCC unroll 1
            for (int k0 = 0; k0 < words; k0 += 4) {
                __m256i s4[Q8_TILE];
#pragma GCC unroll 4
                for (int u = 0; u < Q8_TILE; u++)
                    s4[u] = _mm256_setzero_si256();
#pragma GCC unroll 4
                for (int k = k0; k < k0 + 4; k++) {
                    const int64_t wd = g * words + k, e = 128 * (wd / 16) + 4 * (wd % 16);
                    const __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)(cg + 64 * k + 32 * h));
                    const __m256i lo = _mm256_and_si256(v, nib), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), nib);
#pragma GCC unroll 4
                    for (int u = 0; u < Q8_TILE; u++)
                        PAIRS(s4[u], lo, hi, _mm256_set1_epi32((int)rd_u32le(xq[u] + e)),
                              _mm256_set1_epi32((int)rd_u32le(xq[u] + e + 64)));
                }
#pragma GCC unroll 4
                for (int u = 0; u < Q8_TILE; u++)
                    FLUSH(S[u], s4[u]);
            }
            const __m256 sc = F(params8_)(w->dtype, sb + (size_t)g * rec + h * half);
            const __m256 bi = F(params8_)(w->dtype, bb + (size_t)g * rec + h * half);
#pragma GCC unroll 4
            for (int u = 0; u < Q8_TILE; u++)
                F(q8fold_)(&acc[u][g % 16][h], g, S[u], in, (t0 + u) * ng + g, sc, bi);
        }
    }
    for (int u = 0; u < Q8_TILE; u++)
        for (int h = 0; h < 2; h++)
            F(q8lanes_)(acc[u], h, y + (t0 + u) * w->rows + r + 8 * h);
}

#if TILE8
/* TILE8 tokens from t0 of the 16-row block at row r, 8-bit codes, on AVX2
 * (ACC16): per group and half, a word's load and nibble split serve every
 * token; each code's low and high nibbles' pair sums against the token's xq
 * gather in int16 (|each| <= 2·15·127, so eight words' fit), then into int32
 * through one vpmaddwd, S_g = Σlo + 16·Σhi (exact), and the definition's two
 * steps as q8tile_'s. */
ATTR INLINE void F(q8tile8_)(const struct wmat *w, const struct kern_q8input *in, int64_t t0, float *y, int64_t r,
                             const int gs)
{
    const int64_t ng = w->cols / gs;
    const int words = gs / 4;
    const size_t block = kern_block_off(w, 1, 0), rec = kern_block_off(w, 0, 1);
    const size_t half = 8 * (dtype_table[w->dtype].bits / 8); /* bytes of 8 rows' scales */
    const size_t off = (size_t)(r / KERN_BLOCK_ROWS) * block;
    const uint8_t *c = w->w + off, *sb = w->s + off, *bb = w->b + off;
    const __m256i nib = _mm256_set1_epi8(0x0F), one = _mm256_set1_epi16(1);
    const int8_t *xq[TILE8];
    __m256 acc[TILE8][16][2];
    F(q8zero_)(acc, TILE8, ng);
    for (int u = 0; u < TILE8; u++) {
        xq[u] = in->xq + (t0 + u) * in->stride;
        _mm_prefetch((const char *)(y + (t0 + u) * w->rows + r), _MM_HINT_ET0);
    }
    for (int64_t g = 0; g < ng; g++) {
        const uint8_t *cg = c + (size_t)g * rec;
#pragma GCC unroll 1
        for (int h = 0; h < 2; h++) {
            __m256i lo[TILE8], hi[TILE8];
#pragma GCC unroll 4
            for (int u = 0; u < TILE8; u++)
                lo[u] = hi[u] = _mm256_setzero_si256();
#pragma GCC unroll 1
            for (int k0 = 0; k0 < words; k0 += 8) {
                __m256i l16[TILE8], h16[TILE8];
#pragma GCC unroll 4
                for (int u = 0; u < TILE8; u++)
                    l16[u] = h16[u] = _mm256_setzero_si256();
#pragma GCC unroll 8
                for (int k = k0; k < k0 + 8; k++) {
                    const __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)(cg + 64 * k + 32 * h));
                    const __m256i vl = _mm256_and_si256(v, nib), vh = _mm256_and_si256(_mm256_srli_epi16(v, 4), nib);
#pragma GCC unroll 4
                    for (int u = 0; u < TILE8; u++) {
                        const __m256i x = _mm256_set1_epi32((int)rd_u32le(xq[u] + 4 * (g * words + k)));
                        ACC16(l16[u], vl, x);
                        ACC16(h16[u], vh, x);
                    }
                }
#pragma GCC unroll 4
                for (int u = 0; u < TILE8; u++) {
                    lo[u] = _mm256_add_epi32(lo[u], _mm256_madd_epi16(l16[u], one));
                    hi[u] = _mm256_add_epi32(hi[u], _mm256_madd_epi16(h16[u], one));
                }
            }
            const __m256 sc = F(params8_)(w->dtype, sb + (size_t)g * rec + h * half);
            const __m256 bi = F(params8_)(w->dtype, bb + (size_t)g * rec + h * half);
#pragma GCC unroll 4
            for (int u = 0; u < TILE8; u++) {
                const __m256i S = _mm256_add_epi32(lo[u], _mm256_slli_epi32(hi[u], 4));
                F(q8fold_)(&acc[u][g % 16][h], g, S, in, (t0 + u) * ng + g, sc, bi);
            }
        }
    }
    for (int u = 0; u < TILE8; u++)
        for (int h = 0; h < 2; h++)
            F(q8lanes_)(acc[u], h, y + (t0 + u) * w->rows + r + 8 * h);
}
#endif

/* Rows [row0, row1) of a blocked matrix (whole blocks): at 4 bits Q8_TILE
 * tokens at a time through q8tile_, at 8 bits TILE8 through q8tile8_ (AVX2;
 * AVX-VNNI's 8-bit tiles ran 0.88-0.95x a token at a time), the rest a token
 * at a time: the definition's 16 lanes are 16 pairs of vectors here, one row
 * a lane, summed in its order at the end. */
ATTR INLINE void F(q8blocks_)(const struct wmat *w, const struct kern_q8input *in, void *ws, int64_t t0, int64_t n,
                              float *y, int64_t row0, int64_t row1, const int gs, const int bits)
{
    const int64_t ng = w->cols / gs;
    const size_t block = kern_block_off(w, 1, 0), rec = kern_block_off(w, 0, 1);
    const size_t half = 8 * (dtype_table[w->dtype].bits / 8); /* bytes of 8 rows' scales */
    for (int64_t r = row0; r < row1; r += KERN_BLOCK_ROWS) {
        const size_t off = (size_t)(r / KERN_BLOCK_ROWS) * block;
        const uint8_t *c = w->w + off, *sb = w->s + off, *bb = w->b + off;
        int64_t t = t0;
        for (; bits == 4 && t + Q8_TILE <= t0 + n; t += Q8_TILE)
            F(q8tile_)(w, in, t, y, r, gs);
#if TILE8
        for (; bits == 8 && t + TILE8 <= t0 + n; t += TILE8)
            F(q8tile8_)(w, in, t, y, r, gs);
#endif
        for (; t < t0 + n; t++) {
            const int8_t *xq = in->xq + t * in->stride;
            const float *d = in->d + t * ng, *xs = in->xsum + t * ng;
            __m256 acc[16][2];
            for (int l = 0; l < 16; l++)
                acc[l][0] = acc[l][1] = _mm256_setzero_ps();
            for (int64_t g = 0; g < ng; g++) {
                const size_t gr = (size_t)g * rec;
                __m256i S[2];
                F(q8group16_)(c + gr, xq, g, gs, bits, S);
                for (int h = 0; h < 2; h++) {
                    __m256 sc = F(params8_)(w->dtype, sb + gr + h * half), bi = F(params8_)(w->dtype, bb + gr + h * half);
                    __m256 a = _mm256_fmadd_ps(_mm256_cvtepi32_ps(S[h]), _mm256_mul_ps(_mm256_set1_ps(d[g]), sc), acc[g % 16][h]);
                    acc[g % 16][h] = _mm256_fmadd_ps(bi, _mm256_set1_ps(xs[g]), a);
                }
            }
            for (int s = 8; s >= 1; s /= 2)
                for (int l = 0; l < s; l++)
                    for (int h = 0; h < 2; h++)
                        acc[l][h] = _mm256_add_ps(acc[l][h], acc[l + s][h]);
            _mm256_storeu_ps(y + t * w->rows + r, acc[0][0]);
            _mm256_storeu_ps(y + t * w->rows + r + 8, acc[0][1]);
        }
    }
}

ATTR void F(kern_q8dot_)(const struct wmat *w, const struct kern_q8input *in, int64_t n, float *y, int64_t row0,
                         int64_t row1, void *ws)
{
    if (kern_gtype_of(w->mode)) { /* exact int32 sums: the AVX2 kernel's bits are every variant's */
        kern_gq8dot_avx2(w, in, n, y, row0, row1);
        return;
    }
    const int64_t t0 = 0; /* all n tokens, one after the other */
    if (w->blocked) {
        QROWS_DISPATCH(F(q8blocks_), n)
    } else {
        QROWS_DISPATCH(F(q8rows_), n)
    }
}

#undef Q8_TILE
#undef F
#undef CAT
#undef CAT_
