/* ref.c - the scalar definition of every op (internal.h). The SIMD twins
 * (x86/, arm/) and the dispatch (dispatch.c) give these bits. */
#include <math.h>
#include <string.h>

#include "core/bytes.h"
#include "kernels/internal.h"
#include "quant/format.h"
#include "quant/quant.h"

struct wmat kern_wmat_expert(const struct wmat *w, int64_t e)
{
    struct wmat v = *w;
    v.w += (size_t)e * w->expert_bytes;
    if (w->quantized && v.s) {
        v.s += (size_t)e * w->expert_sbytes;
        if (v.b)
            v.b += (size_t)e * w->expert_sbytes;
    }
    return v;
}

#define ROW_GROUPS 16 /* groups of a blocked row gathered for one dequantization */

/* Values [j, j + len) of row r as float32 (quantized: whole groups) on the
 * fastest path, bit-identical to dequant_affine_row, dequant_mx_row and
 * dtype_to_f32; a blocked row's groups gathered ROW_GROUPS at a time (a
 * group's codes are whole words: gs·bits is a multiple of 32). */
static void row_f32(const struct wmat *w, int64_t r, int64_t j, int64_t len, float *out)
{
    const uint8_t *row = w->w + (size_t)r * w->row_stride;
    const size_t psize = dtype_table[w->dtype].bits / 8;
    if (w->blocked) {
        uint8_t codes[ROW_GROUPS * 128], s[ROW_GROUPS * 4], b[ROW_GROUPS * 4]; /* gs·bits/8 <= 128; params <= 4 bytes */
        const int64_t words = w->gs * w->bits / 32, g1 = (j + len) / w->gs;
        const size_t l = (size_t)(r % KERN_BLOCK_ROWS);
        for (int64_t g0 = j / w->gs; g0 < g1; g0 += ROW_GROUPS) {
            const int64_t G = g1 - g0 < ROW_GROUPS ? g1 - g0 : ROW_GROUPS;
            for (int64_t g = 0; g < G; g++) {
                const size_t rec = kern_block_off(w, r / KERN_BLOCK_ROWS, g0 + g);
                for (int64_t k = 0; k < words; k++) /* word k of row l at 64k + 4l of the group's record */
                    memcpy(codes + 4 * (g * words + k), w->w + rec + (size_t)(KERN_BLOCK_ROWS * 4 * k) + 4 * l, 4);
                memcpy(s + (size_t)g * psize, w->s + rec + l * psize, psize);
                memcpy(b + (size_t)g * psize, w->b + rec + l * psize, psize);
            }
            quant_dequant_row(codes, s, b, w->dtype, (size_t)(G * w->gs), w->gs, w->bits, out + g0 * w->gs - j);
        }
    } else if (w->quantized && qformat_of(w->mode)->ggml) { /* whole blocks: row_bytes / (cols / gs) each */
        const size_t bb = w->row_bytes / (size_t)(w->cols / w->gs);
        qformat_of(w->mode)->dequant(w->mode, row + (size_t)(j / w->gs) * bb, NULL, NULL, w->dtype, (size_t)len, w->gs,
                                     w->bits, out);
    } else if (w->quantized && w->mode != QM_AFFINE) {
        dequant_mx_row(w->mode, row + j * w->bits / 8, w->s + (size_t)r * w->srow_bytes + (size_t)(j / w->gs),
                       (size_t)len, out);
    } else if (w->quantized) {
        const size_t g = (size_t)(j / w->gs) * psize;
        quant_dequant_row(row + j * w->bits / 8, w->s + (size_t)r * w->srow_bytes + g,
                          w->b + (size_t)r * w->srow_bytes + g, w->dtype, (size_t)len, w->gs, w->bits, out);
    } else {
        quant_to_f32(w->dtype, row + (size_t)j * psize, out, (size_t)len);
    }
}

void kern_row_f32(const struct wmat *w, int64_t r, float *out)
{
    row_f32(w, r, 0, w->cols, out);
}

void kern_matmul_ref(const struct wmat *w, const float *x, int64_t n, float *y, int64_t row0, int64_t row1)
{
    float chunk[256]; /* no heap: the reference cannot fail (a group: at most a ggml block of 256) */
    int64_t step = w->quantized ? w->gs : 128;
    for (int64_t r = row0; r < row1; r++)
        for (int64_t t = 0; t < n; t++) {
            const float *xt = x + t * w->cols;
            float acc = 0.0f;
            for (int64_t j = 0; j < w->cols; j += step) {
                int64_t len = w->cols - j < step ? w->cols - j : step;
                row_f32(w, r, j, len, chunk);
                for (int64_t k = 0; k < len; k++)
                    acc += xt[j + k] * chunk[k];
            }
            y[t * w->rows + r] = acc;
        }
}

/* The fused kernels' definition (internal.h): per row and token, lane l of
 * block b (16 code words) holds word 16b + l; its codes k, each times its
 * place value, against the rearranged input in two product chains, summed,
 * times the lane's group scale into A[l]; the bias terms into B[g % 16]. */
/* Code k of a word as a float: affine, isolated in place (the top one shifted down); MX, its value. */
static float code_value(const struct wmat *w, uint32_t v, int k)
{
    const int bits = w->bits, per_word = 32 / bits;
    const uint32_t mask = (1u << bits) - 1;
    return w->mode != QM_AFFINE    ? mx_code_value(w->mode, v >> bits * k & mask)
           : k == per_word - 1 ? (float)(v >> (32 - bits))
                               : (float)(v & mask << bits * k);
}

/* Affine: per group two chains of products in column order, the even and
 * the odd words', added and folded with the group's scale into A; its bias
 * term into B (internal.h). */
static void qdot_affine_ref(const struct wmat *w, const struct kern_qinput *in, int64_t n, float *y, int64_t row0,
                            int64_t row1)
{
    const int per_word = 32 / w->bits;
    const int64_t ng = w->cols / w->gs;
    for (int64_t r = row0; r < row1; r++)
        for (int64_t t = 0; t < n; t++) {
            const float *xd = in->xd + t * in->stride, *xs = in->xsum + t * ng;
            float A = 0.0f, B = 0.0f;
            for (int64_t g = 0; g < ng; g++) {
                float p[2] = {0.0f, 0.0f};
                for (int64_t j = g * w->gs; j < (g + 1) * w->gs; j++) {
                    const int64_t i = j / per_word - g * w->gs / per_word; /* the word within the group */
                    float q = code_value(w, rd_u32le(w->w + kern_code_off(w, r, j / per_word)), (int)(j % per_word));
                    p[i % 2] = i < 2 && j % per_word == 0 ? xd[j] * q : fmaf(xd[j], q, p[i % 2]);
                }
                A = fmaf(p[0] + p[1], kern_param_f32(w, w->s, r, g), A);
                B = fmaf(kern_param_f32(w, w->b, r, g), xs[g], B);
            }
            y[t * w->rows + r] = A + B;
        }
}

void kern_qdot_ref(const struct wmat *w, const struct kern_qinput *in, int64_t n, float *y, int64_t row0,
                   int64_t row1)
{
    if (kern_gtype_of(w->mode)) {
        kern_gdot_ref(w, in, n, y, row0, row1);
        return;
    }
    if (w->mode == QM_AFFINE) {
        qdot_affine_ref(w, in, n, y, row0, row1);
        return;
    }
    const int bits = w->bits, per_word = 32 / bits, blk = 16 * per_word;
    const int64_t words = w->cols / per_word;
    for (int64_t r = row0; r < row1; r++)
        for (int64_t t = 0; t < n; t++) {
            const float *xd = in->xd + t * in->stride;
            float A[16] = {0};
            for (int64_t b = 0; b * 16 < words; b++)
                for (int l = 0; l < 16 && b * 16 + l < words; l++) {
                    uint32_t v = rd_u32le(w->w + kern_code_off(w, r, b * 16 + l));
                    float p[2];
                    for (int k = 0; k < per_word; k++) {
                        float x = xd[b * blk + 16 * k + l];
                        p[k & 1] = k < 2 ? x * code_value(w, v, k) : fmaf(x, code_value(w, v, k), p[k & 1]);
                    }
                    A[l] = fmaf(p[0] + p[1], kern_param_f32(w, w->s, r, (b * blk + per_word * l) / w->gs), A[l]);
                }
            for (int l = 0; l < 16; l++)
                A[l] += 0.0f; /* the (absent) bias lanes: a -0 lane becomes +0 */
            y[t * w->rows + r] = kern_lanes_sum16(A);
        }
}

/* bf16 rows (internal.h): column j in chain (j / 16) % 2, lane j % 16. */
void kern_matvec_bf16_ref(const struct wmat *w, const float *x, int64_t n, float *y, int64_t row0, int64_t row1)
{
    for (int64_t r = row0; r < row1; r++) {
        const uint8_t *row = w->w + (size_t)r * w->row_stride;
        for (int64_t t = 0; t < n; t++) {
            float c[2][16] = {{0}};
            for (int64_t j = 0; j < w->cols; j++)
                c[j / 16 % 2][j % 16] = fmaf(x[t * w->cols + j], bf16_to_f32(rd_u16le(row + 2 * j)), c[j / 16 % 2][j % 16]);
            for (int l = 0; l < 16; l++)
                c[0][l] += c[1][l];
            y[t * w->rows + r] = kern_lanes_sum16(c[0]);
        }
    }
}

/* ---- element-wise ops ---- */

void kern_rmsnorm(dot_fn dot, float *y, const float *x, const float *w, int64_t d, float eps)
{
    float inv = 1.0f / sqrtf(dot(x, x, d) / (float)d + eps);
    if (w)
        for (int64_t i = 0; i < d; i++)
            y[i] = x[i] * inv * w[i];
    else
        for (int64_t i = 0; i < d; i++)
            y[i] = x[i] * inv;
}

/* v clamped to ±KERN_EXP_VMAX, NaN kept (the SIMD max/min order). */
static float exp_clamp(float v)
{
    v = v < -KERN_EXP_VMAX ? -KERN_EXP_VMAX : v;
    return v > KERN_EXP_VMAX ? KERN_EXP_VMAX : v;
}

/* e^v = 2^n·(1 + P) for a clamped v: returns P = e^r − 1 and sets *two_n.
 * n = v·log2(e) rounded to nearest (the 1.5·2^23 trick), r = v − n·ln2 in two
 * parts, P by Horner ending in ·r (accurate relative to r). */
static float exp_parts(float v, float *two_n)
{
    float n = (v * KERN_LOG2E + 12582912.0f) - 12582912.0f;
    float r = (v - n * KERN_LN2_HI) - n * KERN_LN2_LO;
    float p = KERN_EXP_C7;
    p = p * r + KERN_EXP_C6;
    p = p * r + KERN_EXP_C5;
    p = p * r + KERN_EXP_C4;
    p = p * r + KERN_EXP_C3;
    p = p * r + KERN_EXP_C2;
    p = p * r + 1.0f;
    uint32_t bits = (uint32_t)((n == n ? (int32_t)n : 0) + 127) << 23; /* NaN: P is NaN, any 2^n does */
    memcpy(two_n, &bits, sizeof *two_n);
    return p * r;
}

float kern_exp(float v)
{
    float two_n, P = exp_parts(exp_clamp(v), &two_n);
    return v < -KERN_EXP_VMAX ? 0.0f : (P + 1.0f) * two_n;
}

float kern_gelu(float x)
{
    float v = -2.0f * (KERN_GELU_K * (x + KERN_GELU_C * x * x * x)), two_n, P = exp_parts(exp_clamp(v), &two_n);
    float y = x / (1.0f + (P + 1.0f) * two_n);
    return v > KERN_EXP_VMAX ? copysignf(0.0f, x) : y; /* x < −9.7: |gelu| < |x|·e^−87, a signed zero */
}

void kern_gelu_mul_ref(float *g, const float *u, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        g[i] = kern_gelu(g[i]) * u[i];
}

float kern_softcap(float x, float cap)
{
    float two_n, P = exp_parts(exp_clamp(2.0f * (x / cap)), &two_n);
    float em = two_n * P + (two_n - 1.0f); /* e^(2z) − 1 */
    return cap * (em / (em + 2.0f));
}

void kern_softcap_ref(float *x, float cap, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = kern_softcap(x[i], cap);
}

void kern_rope_cs(float *cs, int64_t d, const double *inv_freq, int64_t pos)
{
    for (int64_t i = 0; i < d / 2; i++) {
        double a = (double)pos * inv_freq[i];
        cs[2 * i] = (float)cos(a);
        cs[2 * i + 1] = (float)sin(a);
    }
}

void kern_rope(float *x, int64_t d, const double *inv_freq, const float *cs)
{
    int64_t half = d / 2;
    for (int64_t i = 0; i < half; i++) {
        if (inv_freq[i] == 0.0)
            continue; /* cos 1, sin 0: the pair passes through */
        float c = cs[2 * i], s = cs[2 * i + 1];
        float x0 = x[i], x1 = x[i + half];
        x[i] = x0 * c - x1 * s;
        x[i + half] = x1 * c + x0 * s;
    }
}

void kern_softmax(float *x, int64_t n)
{
    float m = -INFINITY;
    for (int64_t i = 0; i < n; i++)
        m = fmaxf(m, x[i]);
    float sum = 0.0f;
    for (int64_t i = 0; i < n; i++) {
        x[i] = kern_exp(x[i] - m);
        sum += x[i];
    }
    for (int64_t i = 0; i < n; i++)
        x[i] /= sum;
}

float kern_dot_ref(const float *a, const float *b, int64_t n)
{
    float lane[16] = {0};
    for (int64_t i = 0; i < n; i++)
        lane[i % 16] = fmaf(a[i], b[i], lane[i % 16]);
    return kern_lanes_sum16(lane);
}

void kern_dots_ref(const float *q, int nh, const float *const *b, int m, int64_t n, float *out, int64_t ld)
{
    for (int u = 0; u < nh; u++)
        for (int j = 0; j < m; j++)
            out[u * ld + j] = kern_dot_ref(q + u * n, b[j], n);
}

void kern_axpy_ref(float *y, int64_t ld, int nh, const float *w, int64_t wld, const float *const *x, int m, int64_t n)
{
    for (int u = 0; u < nh; u++)
        for (int j = 0; j < m; j++)
            if (x[j] && !(w[u * wld + j] < KERN_WEIGHT_MIN))
                for (int64_t i = 0; i < n; i++)
                    y[u * ld + i] = fmaf(w[u * wld + j], x[j][i], y[u * ld + i]);
}
