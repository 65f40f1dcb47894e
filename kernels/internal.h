/* internal.h - helpers the kernel files share. Internal to kernels/. */
#ifndef GP_KERNELS_INTERNAL_H
#define GP_KERNELS_INTERNAL_H

#include "kernels/kernels.h"
#include "quant/quant.h"

/* n scale bytes of an MX-quantized row as float32 (mx_scale_value). */
static inline void kern_mx_scales(enum qmode m, const uint8_t *src, float *dst, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        dst[i] = mx_scale_value(m, src[i]);
}

/* Where 32-bit word k of row r sits in w->w, and group g's scale or bias of
 * row r in w->s or w->b: by rows, or in blocks of 16 (kernels.h). */
static inline size_t kern_code_off(const struct wmat *w, int64_t r, int64_t k)
{
    if (!w->blocked)
        return (size_t)r * w->row_stride + (size_t)(4 * k);
    const int64_t words = w->gs * w->bits / 32, g = k / words, l = r % KERN_BLOCK_ROWS;
    return kern_block_off(w, r / KERN_BLOCK_ROWS, g) + (size_t)(KERN_BLOCK_ROWS * 4 * (k - g * words) + 4 * l);
}

static inline size_t kern_param_off(const struct wmat *w, int64_t r, int64_t g)
{
    size_t psize = dtype_table[w->dtype].bits / 8;
    if (!w->blocked)
        return (size_t)r * w->srow_bytes + (size_t)g * psize;
    return kern_block_off(w, r / KERN_BLOCK_ROWS, g) + (size_t)(r % KERN_BLOCK_ROWS) * psize;
}

/* The mask of rows r .. r+15 within [row0, row1): bit l for row r + l. */
static inline uint32_t kern_rows_mask(int64_t r, int64_t row0, int64_t row1)
{
    uint32_t m = row1 - r >= 16 ? 0xFFFFu : row1 <= r ? 0u : (1u << (row1 - r)) - 1;
    return r < row0 ? m & ~((1u << (row0 - r)) - 1) : m;
}

/* Group g's scales (p = w->s) or biases (w->b) of rows r0 .. r0+15 as
 * float32 in v, zero for the rows not in the mask m (bit l: row r0 + l);
 * blocked, r0 starts a block. */
static inline void kern_params16(const struct wmat *w, const uint8_t *p, int64_t r0, int64_t g, uint32_t m, float v[16])
{
    const size_t psize = dtype_table[w->dtype].bits / 8;
    for (int l = 0; l < 16; l++)
        if (m >> l & 1)
            dtype_to_f32(w->dtype, p + (w->blocked ? kern_block_off(w, r0 / 16, g) + (size_t)l * psize
                                                   : (size_t)(r0 + l) * w->srow_bytes + (size_t)g * psize),
                         &v[l], 1);
        else
            v[l] = 0.0f;
}

/* Group g's scale (p = w->s) or bias (w->b) of row r as float32. */
static inline float kern_param_f32(const struct wmat *w, const uint8_t *p, int64_t r, int64_t g)
{
    if (w->mode != QM_AFFINE)
        return mx_scale_value(w->mode, p[kern_param_off(w, r, g)]);
    float v;
    dtype_to_f32(w->dtype, p + kern_param_off(w, r, g), &v, 1);
    return v;
}

/* Lanes l and l + w added for w = 8, 4, 2, 1 (lane is overwritten). */
static inline float kern_lanes_sum16(float lane[16])
{
    for (int w = 8; w >= 1; w /= 2)
        for (int l = 0; l < w; l++)
            lane[l] += lane[l + w];
    return lane[0];
}

/* Tokens of a panel of the blocked GEMM (avx512.c; its workspace: input.c). */
#define GEMM_TP 16

/* Tokens of a panel of the affine GEMM (avx512.c), its input laid out so
 * (input.c); sets of 16 rows it runs side by side (its workspace: input.c). */
#define AGEMM_T 12
#define AGEMM_KC 2048 /* columns of a tile decoded at a time (a multiple of every group size) */
#define AGEMM_S 2

/* sum[t·ng + g] = Σx over group g of token t, in column order (input.c). */
void kern_group_sums(const struct wmat *w, const float *x, int64_t n, float *sum);

/* The parts of a kern_q8input for n tokens in buf (xq zeroed): the pointers
 * into buf the preparations write, and the group count (input.c). */
struct kern_q8parts {
    float *d, *xsum;
    int8_t *xq;
    int64_t ng;
};
void kern_q8input_layout(const struct wmat *w, int64_t n, void *buf, struct kern_q8input *in,
                         struct kern_q8parts *p);

#endif
