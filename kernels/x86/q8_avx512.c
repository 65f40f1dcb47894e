/* q8_avx512.c - the int8-activation kernels (KERN_Q8) on AVX-512 VNNI and
 * the AVX-512 preparation of their input: the same bits as kern_q8dot_ref and
 * kern_q8input_part (kernels/q8.c, input.c; tests/test_kernels.c). */
#include <immintrin.h>
#include <math.h>

#include "core/bytes.h"
#include "core/dtype.h"
#include "kernels/x86/x86.h"
#include "kernels/x86/simd.h"

/* ---- AVX-512 VNNI: int8 activations (kern_q8dot_ref, kernels/internal.h) ---- */

#define Q8_WINDOW 16 /* groups whose scales and biases sit in one register */

/* Scales or biases of groups [g, g + n), n <= 16, as float32 (zero past n). */
AVX512VNNI INLINE __m512 params16(enum dtype t, const uint8_t *src, int64_t n)
{
    const __mmask16 m = mask16(n);
    if (t == DT_F32)
        return _mm512_maskz_loadu_ps(m, src);
    if (t == DT_F16)
        return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, src));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, src)), 16));
}

/* Chunk j of a row (its first weight; `bytes` of its 64 code bytes present,
 * none for bytes <= 0: zero sums) for each token: the exact lane sums of q·xq through
 * vpdpbusd (codes unsigned, xq signed). Lane l holds the row's word 16c + l. */
AVX512VNNI INLINE void q8chunk512(const uint8_t *codes, int64_t j, int64_t bytes, const struct kern_q8input *in,
                                  int64_t t0, const int tb, const int bits, __m512i *s)
{
    if (bytes <= 0) { /* past the row's end: no codes, and no input to read (it ends with the row's chunks) */
        for (int u = 0; u < tb; u++)
            s[u] = _mm512_setzero_si512();
        return;
    }
    const __mmask64 m = bytes >= 64 ? ~(__mmask64)0 : ((__mmask64)1 << bytes) - 1;
    const uint8_t *c = codes + j * bits / 8;
    _mm_prefetch((const char *)c + PREFETCH, _MM_HINT_T0);
    const __m512i v = _mm512_maskz_loadu_epi8(m, c), nib = _mm512_set1_epi8(0x0F);
    const __m512i lo = bits == 8 ? v : _mm512_and_si512(v, nib);
    for (int u = 0; u < tb; u++) {
        const int8_t *xb = in->xq + (t0 + u) * in->stride + j;
        s[u] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, _mm512_loadu_si512(xb));
        if (bits == 4)
            s[u] = _mm512_dpbusd_epi32(s[u], _mm512_and_si512(_mm512_srli_epi16(v, 4), nib), _mm512_loadu_si512(xb + 64));
    }
}

/* The group sums of the window of 16 groups from weight j0 (to j1; full: a
 * whole window, every chunk whole) for each token, group g0 + i in lane i:
 * the chunks' lane sums (those of one group added first when a group spans
 * lg = gs·bits/32 >= 16 lanes) reduced by pair_sums in a binary tree. */
AVX512VNNI INLINE void q8window512(const uint8_t *codes, int64_t j0, int64_t j1, const struct kern_q8input *in,
                                   int64_t t0, const int tb, const int bits, const int gs, const bool full, __m512i *out)
{
    const int cw = 512 / bits, lg = gs * bits / 32; /* weights per 64-byte chunk; lanes per group */
    const int leaves = lg >= 16 ? 16 : lg, leaf_chunks = lg >= 16 ? lg / 16 : 1;
    __m512i lv[5][TB], s[TB], s2[TB]; /* the tree's pending vector of each level */
#pragma GCC unroll 16
    for (int i = 0; i < leaves; i++) {
        const int64_t j = j0 + (int64_t)i * leaf_chunks * cw;
        q8chunk512(codes, j, full ? 64 : (j1 - j) * bits / 8, in, t0, tb, bits, s);
        if (leaf_chunks == 2) {
            q8chunk512(codes, j + cw, full ? 64 : (j1 - j - cw) * bits / 8, in, t0, tb, bits, s2);
            for (int u = 0; u < tb; u++)
                s[u] = _mm512_add_epi32(s[u], s2[u]);
        }
        int level = 0;
        for (int h = i; h & 1; h >>= 1, level++)
            for (int u = 0; u < tb; u++)
                s[u] = pair_sums(lv[level][u], s[u]);
        for (int u = 0; u < tb; u++)
            lv[level][u] = s[u];
    }
    for (int u = 0; u < tb; u++)
        out[u] = lv[__builtin_ctz((unsigned)leaves)][u];
}

/* Rows [row0, row1) by rows, for tokens t0..t0+tb-1 (constants after
 * inlining, as in qrows512): per window of 16 groups, their sums in one
 * vector take the definition's two steps at once. */
AVX512VNNI INLINE void q8rows512(const struct wmat *w, const struct kern_q8input *in, void *ws, int64_t t0,
                                 const int tb, float *y, int64_t row0, int64_t row1, const int gs, const int bits)
{
    const int64_t ng = w->cols / gs;
    const size_t psize = dtype_table[w->dtype].bits / 8;
    for (int64_t r = row0; r < row1; r++) {
        const uint8_t *codes = w->w + (size_t)r * w->row_stride;
        const uint8_t *sr = w->s + (size_t)r * w->srow_bytes, *br = w->b + (size_t)r * w->srow_bytes;
        params_prefetch(sr, br, w->srow_bytes);
        __m512 acc[TB];
        for (int u = 0; u < tb; u++)
            acc[u] = _mm512_setzero_ps();
        for (int64_t g0 = 0; g0 < ng; g0 += Q8_WINDOW) {
            const int64_t nb = ng - g0 < Q8_WINDOW ? ng - g0 : Q8_WINDOW, j0 = g0 * gs, j1 = (g0 + nb) * gs;
            __m512i S[TB];
            if (nb == Q8_WINDOW)
                q8window512(codes, j0, j1, in, t0, tb, bits, gs, true, S);
            else
                q8window512(codes, j0, j1, in, t0, tb, bits, gs, false, S);
            const __m512 sc = params16(w->dtype, sr + (size_t)g0 * psize, nb), bi = params16(w->dtype, br + (size_t)g0 * psize, nb);
            for (int u = 0; u < tb; u++) {
                const __m512 ds = _mm512_mul_ps(_mm512_maskz_loadu_ps(mask16(nb), in->d + (t0 + u) * ng + g0), sc);
                acc[u] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(S[u]), ds, acc[u]);
                acc[u] = _mm512_fmadd_ps(bi, _mm512_maskz_loadu_ps(mask16(nb), in->xsum + (t0 + u) * ng + g0), acc[u]);
            }
        }
        for (int u = 0; u < tb; u++)
            y[(t0 + u) * w->rows + r] = hsum512(acc[u]);
    }
}

/* Group g of a 16-row block (one row a lane; c, sb, bb: the group's first
 * word, scale and bias) for one token: S_g of each row from the group's
 * 64-byte words, each against the token's four xq of that word in every lane
 * (at 4 bits those of its even weights, the low nibbles, then of its odd
 * ones; the high nibbles kept in place, 16·q, and their sum shifted back:
 * exact), then the definition's two steps into acc. The integer sums are
 * exact in any order, so the number of accumulators is free: four at 8 bits,
 * two at 4 (each a nibble half). Only the 4-bit words are prefetched: the
 * 8-bit head streamed at 78-85 % of a plain read of its bytes with a
 * prefetch per word and two accumulators, 91-99 % without the prefetches and
 * with four; the 4-bit head fell to 65-69 % without its prefetches. */
AVX512VNNI INLINE __m512 q8group16(const uint8_t *c, const uint8_t *sb, const uint8_t *bb, enum dtype dt,
                                   const int8_t *xq, int64_t g, float d, float xs, __m512 acc, const int gs,
                                   const int bits)
{
    const int words = gs * bits / 32;
    const __m512i nib = _mm512_set1_epi8(0x0F), zero = _mm512_setzero_si512();
    __m512i lo[4] = {zero, zero, zero, zero}, hi[2] = {zero, zero};
#pragma GCC unroll 32
    for (int k = 0; k < words; k++) {
        const int64_t wd = g * words + k;
        const uint8_t *p = c + 64 * k;
        if (bits == 8) {
            const __m512i v = _mm512_loadu_si512(p);
            lo[k & 3] = _mm512_dpbusd_epi32(lo[k & 3], v, _mm512_set1_epi32((int)rd_u32le(xq + 4 * wd)));
        } else {
            _mm_prefetch((const char *)p + PREFETCH, _MM_HINT_T0);
            const __m512i v = _mm512_loadu_si512(p);
            const int8_t *e = xq + 128 * (wd / 16) + 4 * (wd % 16);
            lo[k & 1] = _mm512_dpbusd_epi32(lo[k & 1], _mm512_and_si512(v, nib), _mm512_set1_epi32((int)rd_u32le(e)));
            hi[k & 1] = _mm512_dpbusd_epi32(hi[k & 1], _mm512_andnot_si512(nib, v), _mm512_set1_epi32((int)rd_u32le(e + 64)));
        }
    }
    __m512i s = _mm512_add_epi32(lo[0], lo[1]);
    if (bits == 8)
        s = _mm512_add_epi32(s, _mm512_add_epi32(lo[2], lo[3]));
    else
        s = _mm512_add_epi32(s, _mm512_srai_epi32(_mm512_add_epi32(hi[0], hi[1]), 4));
    const __m512 sc = params16(dt, sb, 16), bi = params16(dt, bb, 16);
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(_mm512_set1_ps(d), sc), acc);
    return _mm512_fmadd_ps(bi, _mm512_set1_ps(xs), acc);
}

/* The codes of B adjacent 4-bit 16-row blocks from row r as bytes, into u:
 * for each group, block and 64-byte word, the word's low nibbles, then its
 * high ones (128 bytes). A tile of q8tileT then reads them with no nibble
 * split (a shift and two ANDs a word and block, on the ports vpdpbusd uses),
 * once per strip of rows in place of once per 8 tokens. */
AVX512VNNI INLINE void q8unpack(const struct wmat *w, int64_t r, const int B, const int gs, uint8_t *u)
{
    const int words = gs / 8;
    const int64_t ng = w->cols / gs;
    const size_t block = kern_block_off(w, 1, 0), rec = kern_block_off(w, 0, 1);
    const uint8_t *c = w->w + (size_t)(r / KERN_BLOCK_ROWS) * block;
    const __m512i nib = _mm512_set1_epi8(0x0F);
    for (int64_t g = 0; g < ng; g++)
        for (int b = 0; b < B; b++)
            for (int k = 0; k < words; k++, u += 128) {
                const __m512i v = _mm512_loadu_si512(c + (size_t)g * rec + b * block + 64 * k);
                _mm512_storeu_si512(u, _mm512_and_si512(v, nib));
                _mm512_storeu_si512(u + 64, _mm512_and_si512(_mm512_srli_epi16(v, 4), nib));
            }
}

/* The definition's two steps for group g of one (token, block) into its lane
 * g % 16: S_g·(d·s) + lane (zero before the lane's first group), then b·xs. */
AVX512VNNI INLINE void q8step(__m512 *lane, __m512i s, __m512 d, __m512 sc, __m512 bi, __m512 xs, int64_t g)
{
    const __m512 a0 = g < 16 ? _mm512_setzero_ps() : *lane;
    *lane = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(d, sc), a0);
    *lane = _mm512_fmadd_ps(bi, xs, *lane);
}

/* The 16 lanes of one (token, block) summed in the definition's order (a
 * binary tree) into its 16 outputs. */
AVX512VNNI INLINE void q8lanes512(const __m512 *lane, float *out)
{
    __m512 a[16];
#pragma GCC unroll 16
    for (int l = 0; l < 16; l++)
        a[l] = lane[l];
#pragma GCC unroll 4
    for (int h = 8; h >= 1; h /= 2)
#pragma GCC unroll 8
        for (int l = 0; l < h; l++)
            a[l] = _mm512_add_ps(a[l], a[l + h]);
    _mm512_storeu_ps(out, a[0]);
}

/* Group g of B adjacent 16-row blocks for T tokens (8 or 4: prefill) from the
 * same loaded words: c, the group's codes (8 bits: the first block's words,
 * `block` bytes apart; 4 bits: its bytes from q8unpack), sb, bb: the first
 * block's scales and biases. Each (token, block)'s S_g in one accumulator
 * (at 4 bits the high nibbles' products added to the low ones': integer sums,
 * exact in any order), then the definition's two steps into lane g % 16 of
 * that (token, block), acc[u·B + b][g % 16]. A word's load serves T tokens, a
 * token's xq broadcast B blocks. Every loop over tokens and blocks is
 * unrolled, so the T·B accumulators stay in registers. At 512 tokens, 4-bit
 * g64, one thread, A/B on an AMD EPYC (Zen 4): 8 tokens × 2 blocks ran
 * 1.15-1.20× the 8 tokens × 1 block with an accumulator per nibble half
 * (8-bit: 1.25-1.30×); 12 × 2 the same as 8 × 2, 6 × 3 and 16 × 1 slower.
 * With the input prepared on the pool, E2B prefill of 512 tokens on a 16-core
 * Xeon ran 1.1-1.4× the old kernels (commit 8ab8dee). */
AVX512VNNI INLINE void q8tileT(const uint8_t *c, const uint8_t *sb, const uint8_t *bb, size_t block, enum dtype dt,
                               const struct kern_q8input *in, int64_t t0, int64_t ng, int64_t g, __m512 (*acc)[16],
                               const int T, const int B, const int gs, const int bits)
{
    const int words = gs * bits / 32;
    /* The group's words' xq, 4 bytes apart from its first's; token u's at
     * x[u / 4] + {0, 1, 2, 3}·S (the last in S3): 4 integer registers for 8
     * tokens' addresses (GCC had kept 8 offsets, some in vector registers). */
    int64_t S = in->stride, S3 = 3 * S, wd0 = g * words;
    const int8_t *x[2];
    x[0] = in->xq + t0 * S + (bits == 8 ? 4 * wd0 : 128 * (wd0 / 16) + 4 * (wd0 % 16));
    x[1] = x[0] + 4 * S;
    __asm__("" : "+r"(S), "+r"(S3), "+r"(x[0]), "+r"(x[1]));
    __m512i s[8][2];
#pragma GCC unroll 8
    for (int u = 0; u < T; u++)
        for (int b = 0; b < B; b++)
            s[u][b] = _mm512_setzero_si512();
#pragma GCC unroll 32
    for (int k = 0; k < words; k++) {
        __m512i lo[2], hi[2];
        for (int b = 0; b < B; b++)
            if (bits == 8) {
                const uint8_t *p = c + b * block + 64 * k;
                _mm_prefetch((const char *)p + PREFETCH, _MM_HINT_T0);
                lo[b] = _mm512_loadu_si512(p);
            } else {
                const uint8_t *p = c + (b * words + k) * 128;
                lo[b] = _mm512_loadu_si512(p);
                hi[b] = _mm512_loadu_si512(p + 64);
            }
#pragma GCC unroll 8
        for (int u = 0; u < T; u++) {
            const int8_t *xq = x[u / 4] + (u % 4 == 3 ? S3 : u % 4 * S) + 4 * k;
            const __m512i xl = _mm512_set1_epi32((int)rd_u32le(xq));
            for (int b = 0; b < B; b++)
                s[u][b] = _mm512_dpbusd_epi32(s[u][b], lo[b], xl);
            if (bits == 4) {
                const __m512i xh = _mm512_set1_epi32((int)rd_u32le(xq + 64));
                for (int b = 0; b < B; b++)
                    s[u][b] = _mm512_dpbusd_epi32(s[u][b], hi[b], xh);
            }
        }
    }
    __m512 sc[2], bi[2];
    for (int b = 0; b < B; b++) {
        sc[b] = params16(dt, sb + b * block, 16);
        bi[b] = params16(dt, bb + b * block, 16);
    }
#pragma GCC unroll 8
    for (int u = 0; u < T; u++) {
        const __m512 d = _mm512_set1_ps(in->d[(t0 + u) * ng + g]), xs = _mm512_set1_ps(in->xsum[(t0 + u) * ng + g]);
        for (int b = 0; b < B; b++)
            q8step(&acc[u * B + b][g % 16], s[u][b], d, sc[b], bi[b], xs, g);
    }
}

/* T tokens from t0 of the B blocks from row r (at 4 bits their codes in u,
 * from q8unpack): every group through q8tileT, then each (token, block)'s 16
 * lanes summed in the definition's order into its 16 outputs. */
AVX512VNNI INLINE void q8tile512(const struct wmat *w, const struct kern_q8input *in, const uint8_t *u, int64_t t0,
                                 float *y, int64_t r, const int T, const int B, const int gs, const int bits)
{
    const int64_t ng = w->cols / gs;
    const size_t block = kern_block_off(w, 1, 0), rec = kern_block_off(w, 0, 1);
    const size_t off = (size_t)(r / KERN_BLOCK_ROWS) * block, urec = (size_t)B * 16 * gs; /* u's bytes a group */
    const uint8_t *c = bits == 8 ? w->w + off : u, *sb = w->s + off, *bb = w->b + off;
    __m512 acc[16][16]; /* lane l of (token, block) i: acc[i][l], set by its first group */
    for (int i = 0; i < T * B; i++)
        for (int64_t l = ng; l < 16; l++)
            acc[i][l] = _mm512_setzero_ps(); /* the lanes no group reaches: the definition's zeros */
    for (int t = 0; t < T; t++)
        for (int b = 0; b < B; b++)
            _mm_prefetch((const char *)(y + (t0 + t) * w->rows + r + KERN_BLOCK_ROWS * b), _MM_HINT_ET0);
    for (int64_t g = 0; g < ng; g++)
        q8tileT(c + (size_t)g * (bits == 8 ? rec : urec), sb + (size_t)g * rec, bb + (size_t)g * rec, block, w->dtype,
                in, t0, ng, g, acc, T, B, gs, bits);
    for (int t = 0; t < T; t++)
        for (int b = 0; b < B; b++)
            q8lanes512(acc[t * B + b], y + (t0 + t) * w->rows + r + KERN_BLOCK_ROWS * b);
}

/* ---- AMX-INT8: q8tile512's sums 16 tokens at a time ---- */

/* The tile registers of q8amx16: C of block b (16 tokens × 16 rows, int32) in
 * tile b, the 16 tokens' xq (16 × K bytes) in tile 2, block b's codes (K / 4
 * words of 16 rows × 4 codes: the blocked layout's) in tile 3 + b. */
AMX static void amx_config(const int K)
{
    struct {
        uint8_t palette, start_row, reserved[14];
        uint16_t colsb[16];
        uint8_t rows[16];
    } __attribute__((aligned(64))) c = {.palette = 1};
    for (int i = 0; i < 5; i++) {
        c.rows[i] = (uint8_t)(i >= 3 ? K / 4 : 16);
        c.colsb[i] = (uint16_t)(i == 2 ? K : 64);
    }
    __asm__ volatile("" : : "r"(&c) : "memory"); /* GCC 12's _tile_loadconfig names 8 of the 64 bytes it reads */
    _tile_loadconfig(&c);
}

/* Tokens t..t+15 of the B blocks from row r (at 4 bits their codes in u,
 * from q8unpack), q8tile512's result for T = 16: each group's S_g of every
 * (token, row) by tdpbsud (xq signed, codes unsigned; integer sums, exact in
 * any order) in passes of K bytes (8 bits: the group's words in order; 4 bits:
 * the even weights' xq against the low nibbles, then the odd ones' against
 * the high), stored, then q8tileT's two steps into lane g % 16 of each
 * (token, block) and q8tile512's tree. */
AMX INLINE void q8amx16(const struct wmat *w, const struct kern_q8input *in, const uint8_t *u, int64_t t, float *y,
                        int64_t r, const int B, const int gs, const int bits)
{
    const int64_t ng = w->cols / gs, S = in->stride;
    const int words = gs * bits / 32, K = bits == 4 ? gs / 2 : gs < 64 ? gs : 64, P = bits == 4 ? 2 : gs / K;
    const size_t block = kern_block_off(w, 1, 0), rec = kern_block_off(w, 0, 1);
    const size_t off = (size_t)(r / KERN_BLOCK_ROWS) * block, urec = (size_t)B * 16 * gs; /* u's bytes a group */
    const size_t cstride = bits == 8 ? 64 : 128, cblock = bits == 8 ? block : (size_t)words * 128;
    const uint8_t *sb = w->s + off, *bb = w->b + off;
    int32_t cs[2][16][16] __attribute__((aligned(64))); /* C of block b, token m: cs[b][m] */
    __m512 acc[32][16]; /* lane l of (token m, block b): acc[m·B + b][l], set by its first group */
    for (int i = 0; i < 16 * B; i++)
        for (int64_t l = ng; l < 16; l++)
            acc[i][l] = _mm512_setzero_ps(); /* the lanes no group reaches: the definition's zeros */
    for (int64_t g = 0; g < ng; g++) {
        const int64_t wd0 = g * words; /* the group's first word */
        const int8_t *x = in->xq + t * S + (bits == 8 ? 4 * wd0 : 128 * (wd0 / 16) + 4 * (wd0 % 16));
        const uint8_t *c = bits == 8 ? w->w + off + (size_t)g * rec : u + (size_t)g * urec;
        _tile_zero(0);
        if (B == 2)
            _tile_zero(1);
        for (int p = 0; p < P; p++) {
            const size_t step = bits == 8 ? (size_t)1024 * p : (size_t)64 * p; /* 8 bits: 16 words a pass */
            _tile_loadd(2, x + 64 * p, S);
            _tile_loadd(3, c + step, cstride);
            _tile_dpbsud(0, 2, 3);
            if (B == 2) {
                _tile_loadd(4, c + cblock + step, cstride);
                _tile_dpbsud(1, 2, 4);
            }
        }
        _tile_stored(0, cs[0], 64);
        if (B == 2)
            _tile_stored(1, cs[1], 64);
        __asm__ volatile("" : : "r"(cs) : "memory"); /* the tile stores wrote cs */
        __m512 sc[2], bi[2];
        for (int b = 0; b < B; b++) {
            sc[b] = params16(w->dtype, sb + (size_t)g * rec + b * block, 16);
            bi[b] = params16(w->dtype, bb + (size_t)g * rec + b * block, 16);
        }
        for (int m = 0; m < 16; m++) {
            const __m512 d = _mm512_set1_ps(in->d[(t + m) * ng + g]), xs = _mm512_set1_ps(in->xsum[(t + m) * ng + g]);
            for (int b = 0; b < B; b++)
                q8step(&acc[m * B + b][g % 16], _mm512_load_si512(cs[b][m]), d, sc[b], bi[b], xs, g);
        }
    }
    for (int m = 0; m < 16; m++)
        for (int b = 0; b < B; b++)
            q8lanes512(acc[m * B + b], y + (t + m) * w->rows + r + KERN_BLOCK_ROWS * b);
}

/* Tokens [t, t1) of the B blocks from row r, 16 at a time, through q8amx16
 * (its tiles configured first, released after); returns the first token left
 * (fewer than 16). */
__attribute__((noinline)) AMX static int64_t q8amx(const struct wmat *w, const struct kern_q8input *in,
                                                  const uint8_t *u, int64_t t, int64_t t1, float *y, int64_t r,
                                                  const int B)
{
    const int gs = (int)w->gs, bits = w->bits;
    amx_config(bits == 4 ? gs / 2 : gs < 64 ? gs : 64);
    for (; t + 16 <= t1; t += 16)
        switch (gs * 16 + bits + 4096 * B) {
#define Q8AMX(B_, gs_, bits_)                                                                                          \
    case (gs_) * 16 + (bits_) + 4096 * (B_): q8amx16(w, in, u, t, y, r, B_, gs_, bits_); break;
            Q8AMX(1, 32, 4) Q8AMX(1, 64, 4) Q8AMX(1, 128, 4) Q8AMX(1, 32, 8) Q8AMX(1, 64, 8) Q8AMX(1, 128, 8)
            Q8AMX(2, 32, 4) Q8AMX(2, 64, 4) Q8AMX(2, 128, 4) Q8AMX(2, 32, 8) Q8AMX(2, 64, 8) Q8AMX(2, 128, 8)
#undef Q8AMX
        }
    _tile_release();
    return t;
}

/* Rows [row0, row1) of a blocked matrix (whole blocks), two blocks at a time
 * (the last one alone when their count is odd): eight (then four) tokens at a
 * time through q8tile512 (at 4 bits the two blocks' codes unpacked once into
 * ws first), the rest a token at a time: the definition's 16 lanes are 16
 * vectors here, one row per lane, summed in its order at the end. A block's
 * bytes are read once per token or group of tokens (from cache after the
 * first), front to back. */
AVX512VNNI INLINE void q8blocks512(const struct wmat *w, const struct kern_q8input *in, void *ws, int64_t t0,
                                   int64_t n, float *y, int64_t row0, int64_t row1, const int gs, const int bits,
                                   const bool amx)
{
    const int64_t ng = w->cols / gs;
    const size_t block = kern_block_off(w, 1, 0), rec = kern_block_off(w, 0, 1);
    for (int64_t r = row0; r < row1;) {
        const int B = row1 - r >= 2 * KERN_BLOCK_ROWS ? 2 : 1;
        int64_t t = t0;
        if (bits == 4 && n >= 4) /* once per strip: B need not be a constant */
            q8unpack(w, r, B, gs, ws);
        if (amx && n >= 16) /* prefill on AMX: 16 tokens a tile */
            t = q8amx(w, in, ws, t, t0 + n, y, r, B);
        for (; t + 8 <= t0 + n; t += 8) /* prefill: 8 tokens share each load of the blocks' words */
            if (B == 2)
                q8tile512(w, in, ws, t, y, r, 8, 2, gs, bits);
            else
                q8tile512(w, in, ws, t, y, r, 8, 1, gs, bits);
        for (; t + 4 <= t0 + n; t += 4)
            if (B == 2)
                q8tile512(w, in, ws, t, y, r, 4, 2, gs, bits);
            else
                q8tile512(w, in, ws, t, y, r, 4, 1, gs, bits);
        for (int64_t rb = r; rb < r + B * KERN_BLOCK_ROWS; rb += KERN_BLOCK_ROWS) {
            const size_t off = (size_t)(rb / KERN_BLOCK_ROWS) * block;
            const uint8_t *c = w->w + off, *sb = w->s + off, *bb = w->b + off;
            for (int64_t u = t; u < t0 + n; u++) {
                const int8_t *xq = in->xq + u * in->stride;
                const float *d = in->d + u * ng, *xs = in->xsum + u * ng;
                __m512 acc[16];
                for (int l = 0; l < 16; l++)
                    acc[l] = _mm512_setzero_ps();
                for (int64_t g0 = 0; g0 < ng; g0 += 16)
#pragma GCC unroll 16
                    for (int l = 0; l < 16; l++)
                        if (g0 + l < ng) {
                            const size_t gr = (size_t)(g0 + l) * rec;
                            acc[l] = q8group16(c + gr, sb + gr, bb + gr, w->dtype, xq, g0 + l, d[g0 + l], xs[g0 + l],
                                               acc[l], gs, bits);
                        }
                q8lanes512(acc, y + u * w->rows + rb);
            }
        }
        r += B * KERN_BLOCK_ROWS;
    }
}

/* q8blocks512 without and with AMX, in QROWS_DISPATCH's arguments */
#define Q8BLOCKS(amx)                                                                                                  \
    AVX512VNNI INLINE void q8blocks512_##amx(const struct wmat *w, const struct kern_q8input *in, void *ws,            \
                                             int64_t t0, int64_t n, float *y, int64_t row0, int64_t row1,            \
                                             const int gs, const int bits)                                           \
    {                                                                                                                  \
        q8blocks512(w, in, ws, t0, n, y, row0, row1, gs, bits, amx);                                                  \
    }
Q8BLOCKS(false)
Q8BLOCKS(true)
#undef Q8BLOCKS

AVX512VNNI INLINE void q8dot512(const struct wmat *w, const struct kern_q8input *in, int64_t n, float *y,
                                int64_t row0, int64_t row1, void *ws, const bool amx)
{
    if (kern_gtype_of(w->mode)) {
        kern_gq8dot_avx512(w, in, n, y, row0, row1);
        return;
    }
    if (w->blocked) {
        const int64_t t0 = 0; /* all n tokens, one after the other */
        if (amx) {
            QROWS_DISPATCH(q8blocks512_true, n)
        } else {
            QROWS_DISPATCH(q8blocks512_false, n)
        }
    } else {
        TOKENS_DISPATCH(q8rows512)
    }
}

AVX512VNNI void kern_q8dot_avx512(const struct wmat *w, const struct kern_q8input *in, int64_t n, float *y,
                                  int64_t row0, int64_t row1, void *ws)
{
    q8dot512(w, in, n, y, row0, row1, ws, false);
}

AVX512VNNI void kern_q8dot_amx(const struct wmat *w, const struct kern_q8input *in, int64_t n, float *y, int64_t row0,
                               int64_t row1, void *ws)
{
    q8dot512(w, in, n, y, row0, row1, ws, true);
}

/* rint(v/d) clamped to ±127 as int8, 16 lanes: one IEEE division, rounding
 * to the nearest even integer, exact conversions. */
AVX512 INLINE __m128i q8_codes16(__m512 v, __m512 d)
{
    __m512 q = _mm512_roundscale_ps(_mm512_div_ps(v, d), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    q = _mm512_min_ps(_mm512_set1_ps(127.0f), _mm512_max_ps(_mm512_set1_ps(-127.0f), q));
    return _mm512_cvtepi32_epi8(_mm512_cvttps_epi32(q));
}

/* kern_q8input_part 16 values a step, the same buffer bit for bit
 * (tests/test_kernels.c): the group sums are the definition's own
 * (kern_group_sums: 2-3× faster than 16 groups in the lanes of gathers); a
 * group's max|x| is exact in any order; at 4 bits the even and odd weights of
 * 32 are split by one permute each. */
AVX512 void kern_q8input_part_avx512(const struct wmat *w, const float *x, int64_t n, void *buf, int64_t part)
{
    struct kern_q8parts p;
    kern_q8input_part_begin(w, n, buf, part, &p);
    const int64_t ng = p.ng, gs = w->gs, cols = w->cols, stride = p.stride;
    kern_group_sums(w, x + p.t0 * cols, p.t1 - p.t0, p.xsum + p.t0 * ng);
    const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512i even = _mm512_slli_epi32(iota, 1), odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
    for (int64_t t = p.t0; t < p.t1; t++) {
        const float *xt = x + t * cols;
        int8_t *xq = p.xq + t * stride;
        for (int64_t g = 0; g < ng; g++) {
            const float *xg = xt + g * gs;
            __m512 mx = _mm512_setzero_ps();
            __mmask16 bad = 0;
            for (int64_t i = 0; i < gs; i += 16) {
                __m512 a = _mm512_abs_ps(_mm512_loadu_ps(xg + i));
                bad |= _mm512_cmp_ps_mask(a, _mm512_set1_ps(INFINITY), _CMP_NLT_UQ); /* inf or NaN */
                mx = _mm512_max_ps(mx, a);
            }
            float dg = bad ? NAN : _mm512_reduce_max_ps(mx) / 127.0f;
            p.d[t * ng + g] = dg;
            if (bad || dg == 0.0f)
                continue;
            const __m512 dv = _mm512_set1_ps(dg);
            for (int64_t i = 0; i < gs; i += 32) {
                const int64_t j = g * gs + i; /* at 4 bits: even, in chunk j / 128 */
                const __m512 lo = _mm512_loadu_ps(xg + i), hi = _mm512_loadu_ps(xg + i + 16);
                if (w->bits == 8) {
                    _mm_storeu_si128((__m128i *)(void *)(xq + j), q8_codes16(lo, dv));
                    _mm_storeu_si128((__m128i *)(void *)(xq + j + 16), q8_codes16(hi, dv));
                } else {
                    int8_t *c = xq + 128 * (j / 128) + (j % 128) / 2;
                    _mm_storeu_si128((__m128i *)(void *)c, q8_codes16(_mm512_permutex2var_ps(lo, even, hi), dv));
                    _mm_storeu_si128((__m128i *)(void *)(c + 64), q8_codes16(_mm512_permutex2var_ps(lo, odd, hi), dv));
                }
            }
        }
    }
    kern_q8input_part_end(&p);
}
