/* ggml.c - ggml's block types in the fused kernels (internal.h): one row per
 * type, its sub-blocks' scales and offsets and the scalar decoder of its
 * codes (the layouts of docs/INPUTS.md §6.3, the values of quant/ggml.c),
 * and the definition kern_gdot_ref that the SIMD twins give bit for bit. */
#include <math.h>

#include "core/bytes.h"
#include "core/dtype.h"
#include "kernels/internal.h"
#include "quant/ggml.h"

static float f16_at(const uint8_t *p)
{
    return f16_to_f32(rd_u16le(p));
}

/* ---- scales a and offsets m per sub-block ---- */

static void p_d(const uint8_t *b, float *a, float *m) /* Q5_0, IQ4_NL: d */
{
    (void)m;
    a[0] = f16_at(b);
}

static void p_dm(const uint8_t *b, float *a, float *m) /* Q4_1, Q5_1: d, then m */
{
    a[0] = f16_at(b);
    m[0] = f16_at(b + 2);
}

/* Q4_K / Q5_K: sub-block j's 6-bit scale and min from the 12 bytes at b + 4;
 * a = d·sc, m = −(dmin·min), both exact in float. */
static void p_k45(const uint8_t *b, float *a, float *m)
{
    const float d = f16_at(b), dmin = f16_at(b + 2);
    const uint8_t *q = b + 4;
    for (int j = 0; j < 8; j++) {
        const int sc = j < 4 ? q[j] & 63 : (q[j + 4] & 0x0f) | (q[j - 4] >> 6) << 4;
        const int mn = j < 4 ? q[j + 4] & 63 : (q[j + 4] >> 4) | (q[j] >> 6) << 4;
        a[j] = d * (float)sc;
        m[j] = -(dmin * (float)mn);
    }
}

static void p_q6k(const uint8_t *b, float *a, float *m) /* 16 int8 scales at 192, d at 208 */
{
    (void)m;
    const float d = f16_at(b + 208);
    for (int j = 0; j < 16; j++)
        a[j] = d * (float)(int8_t)b[192 + j];
}

static void p_iq4xs(const uint8_t *b, float *a, float *m) /* d·(ls − 32), ls 6 bits: 4 low at 4 + j/2, 2 high at 2 */
{
    (void)m;
    const float d = f16_at(b);
    const unsigned sh = rd_u16le(b + 2);
    for (int j = 0; j < 8; j++)
        a[j] = d * (float)((int)(((b[4 + j / 2] >> 4 * (j % 2)) & 0x0f) | ((sh >> 2 * j) & 3) << 4) - 32);
}

/* ---- codes ---- */

/* 32-weight blocks: qs[16] at q, weight j the low nibble of q[j], weight
 * 16 + j the high one; a fifth bit (bit j of the u32 at qh) adds 16. */
static void c_nib16(const uint8_t *q, const uint8_t *qh, int bias, const int8_t *table, int8_t *c)
{
    const uint32_t h = qh ? rd_u32le(qh) : 0;
    for (int j = 0; j < 16; j++) {
        int lo = q[j] & 0x0f, hi = q[j] >> 4;
        lo |= (int)(h >> j & 1) << 4;
        hi |= (int)(h >> (j + 16) & 1) << 4;
        c[j] = (int8_t)(table ? table[lo] : lo - bias);
        c[j + 16] = (int8_t)(table ? table[hi] : hi - bias);
    }
}

static void c_q4_1(const uint8_t *b, int8_t *c) { c_nib16(b + 4, NULL, 0, NULL, c); }
static void c_q5_0(const uint8_t *b, int8_t *c) { c_nib16(b + 6, b + 2, 16, NULL, c); }
static void c_q5_1(const uint8_t *b, int8_t *c) { c_nib16(b + 8, b + 4, 0, NULL, c); }
static void c_iq4nl(const uint8_t *b, int8_t *c) { c_nib16(b + 2, NULL, 0, ggml_kvalues_iq4nl, c); }

static void c_iq4xs(const uint8_t *b, int8_t *c)
{
    for (int j = 0; j < 8; j++)
        c_nib16(b + 8 + 16 * j, NULL, 0, ggml_kvalues_iq4nl, c + 32 * j);
}

/* Q4_K (qs at 16) and Q5_K (qh[32] at 16, qs at 48): part k of 32 bytes,
 * weight 64k + l the low nibble of qs[32k + l] (+16 with bit 2k of qh[l]),
 * 64k + 32 + l its high nibble (bit 2k + 1). */
static void c_k45(const uint8_t *b, bool five, int8_t *c)
{
    const uint8_t *qh = b + 16, *qs = b + (five ? 48 : 16);
    for (int k = 0; k < 4; k++)
        for (int l = 0; l < 32; l++) {
            const int h = five ? qh[l] >> 2 * k : 0;
            c[64 * k + l] = (int8_t)((qs[32 * k + l] & 0x0f) | (h & 1) << 4);
            c[64 * k + 32 + l] = (int8_t)((qs[32 * k + l] >> 4) | (h >> 1 & 1) << 4);
        }
}

static void c_q4k(const uint8_t *b, int8_t *c) { c_k45(b, false, c); }
static void c_q5k(const uint8_t *b, int8_t *c) { c_k45(b, true, c); }

/* Q6_K: ql[128], qh[64]; per half h of 128 weights (ql + 64h, qh + 32h),
 * weight 32i + l (i = 0..3) from ql[l + 32(i % 2)]'s nibble i / 2 and bits
 * 2i, 2i + 1 of qh[l], minus 32. */
static void c_q6k(const uint8_t *b, int8_t *c)
{
    for (int h = 0; h < 2; h++) {
        const uint8_t *ql = b + 64 * h, *qh = b + 128 + 32 * h;
        for (int i = 0; i < 4; i++)
            for (int l = 0; l < 32; l++) {
                const int q = (ql[l + 32 * (i % 2)] >> 4 * (i / 2) & 0x0f) | (qh[l] >> 2 * i & 3) << 4;
                c[128 * h + 32 * i + l] = (int8_t)(q - 32);
            }
    }
}

static const struct kern_gtype gtypes[QM_COUNT] = {
    [QM_GGML_Q4_1] = {32, true, p_dm, c_q4_1},
    [QM_GGML_Q5_0] = {32, false, p_d, c_q5_0},
    [QM_GGML_Q5_1] = {32, true, p_dm, c_q5_1},
    [QM_GGML_Q4_K] = {32, true, p_k45, c_q4k},
    [QM_GGML_Q5_K] = {32, true, p_k45, c_q5k},
    [QM_GGML_Q6_K] = {16, false, p_q6k, c_q6k},
    [QM_GGML_IQ4_NL] = {32, false, p_d, c_iq4nl},
    [QM_GGML_IQ4_XS] = {32, false, p_iq4xs, c_iq4xs},
};

const struct kern_gtype *kern_gtype_of(enum qmode m)
{
    return (unsigned)m < QM_COUNT && gtypes[m].codes ? &gtypes[m] : NULL;
}

/* Block bi of row r decoded: its codes, scales and offsets. */
static void block_of(const struct wmat *w, const struct kern_gtype *gt, int64_t r, int64_t bi, struct kern_gblock *g)
{
    const uint8_t *blk = w->w + (size_t)r * w->row_stride + (size_t)bi * (w->row_bytes / (size_t)(w->cols / w->gs));
    gt->params(blk, g->a, g->m);
    gt->codes(blk, g->c);
}

void kern_gdot_ref(const struct wmat *w, const struct kern_qinput *in, int64_t n, float *y, int64_t row0,
                   int64_t row1)
{
    const struct kern_gtype *gt = kern_gtype_of(w->mode);
    const int64_t nb = w->cols / w->gs, ns = w->gs / gt->S;
    for (int64_t r = row0; r < row1; r++)
        for (int64_t t = 0; t < n; t++) {
            const float *x = in->xd + t * in->stride, *xs = in->xsum + t * (w->cols / KERN_GSUM);
            float A[16] = {0}, B = 0.0f;
            for (int64_t bi = 0; bi < nb; bi++) {
                struct kern_gblock g;
                block_of(w, gt, r, bi, &g);
                for (int64_t j = 0; j < ns; j++) {
                    const int64_t col = bi * w->gs + j * gt->S;
                    const int8_t *c = g.c + j * gt->S;
                    for (int l = 0; l < 16; l++) {
                        float p = x[col + l] * (float)c[l];
                        if (gt->S == 32)
                            p = fmaf(x[col + 16 + l], (float)c[16 + l], p);
                        A[l] = fmaf(p, g.a[j], A[l]);
                    }
                    if (gt->offsets)
                        B = fmaf(g.m[j], xs[col / KERN_GSUM], B);
                }
            }
            y[t * w->rows + r] = kern_lanes_sum16(A) + B;
        }
}

/* KERN_Q8 on ggml's blocks (internal.h): per sub-block the exact int32 sum
 * of code times int8 input, folded into lane j % 16. */
void kern_gq8dot_ref(const struct wmat *w, const struct kern_q8input *in, int64_t n, float *y, int64_t row0,
                     int64_t row1)
{
    const struct kern_gtype *gt = kern_gtype_of(w->mode);
    const int64_t nb = w->cols / w->gs, ns = w->gs / gt->S, ng = w->cols / KERN_GSUM;
    for (int64_t r = row0; r < row1; r++)
        for (int64_t t = 0; t < n; t++) {
            const int8_t *xq = in->xq + t * in->stride;
            const float *d = in->d + t * ng, *xs = in->xsum + t * ng;
            float L[16] = {0};
            for (int64_t bi = 0; bi < nb; bi++) {
                struct kern_gblock g;
                block_of(w, gt, r, bi, &g);
                for (int64_t j = 0; j < ns; j++) {
                    const int64_t col = bi * w->gs + j * gt->S, sub = col / gt->S;
                    int32_t S = 0;
                    for (int i = 0; i < gt->S; i++)
                        S += g.c[j * gt->S + i] * xq[col + i];
                    L[sub % 16] = fmaf((float)S, d[col / KERN_GSUM] * g.a[j], L[sub % 16]);
                    if (gt->offsets)
                        L[sub % 16] = fmaf(g.m[j], xs[col / KERN_GSUM], L[sub % 16]);
                }
            }
            y[t * w->rows + r] = kern_lanes_sum16(L);
        }
}
