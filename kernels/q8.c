/* q8.c - the int8-activation kernels' definition (KERN_Q8, internal.h): the
 * dot product kern_q8dot_ref, and the blocked layout of rows they read. */
#include <math.h>
#include <string.h>

#include "kernels/internal.h"

bool kern_q8_supports(const struct wmat *w)
{
    return w->quantized && w->mode == QM_AFFINE && (w->bits == 4 || w->bits == 8) &&
           (w->gs == 32 || w->gs == 64 || w->gs == 128) &&
           w->cols % w->gs == 0;
}

bool kern_blockable(const struct wmat *w)
{
    return w->quantized && w->mode == QM_AFFINE && (1u << w->bits & KERN_AFFINE_WIDTHS) &&
           (w->gs == 32 || w->gs == 64 || w->gs == 128) &&
           w->cols % w->gs == 0 && w->rows > 0 && w->cols > 0 && w->rows % KERN_BLOCK_ROWS == 0 &&
           w->row_stride == w->row_bytes;
}

size_t kern_q8_ws_bytes(const struct wmat *w, int64_t rows, int64_t n)
{
    (void)rows;
    const bool unpacked = w->blocked && !kern_gtype_of(w->mode) && w->bits == 4 && n >= 4;
    return unpacked ? (size_t)(2 * KERN_BLOCK_ROWS * w->cols) : 0;
}

size_t kern_blocked_bytes(const struct wmat *w)
{
    return (size_t)w->rows * (w->row_bytes + 2 * w->srow_bytes);
}

struct wmat kern_blocked_view(const struct wmat *w, const uint8_t *dst)
{
    struct wmat v = *w;
    const size_t words = (size_t)(w->gs * w->bits / 32), psize = dtype_table[w->dtype].bits / 8;
    v.w = dst;
    v.s = dst + KERN_BLOCK_ROWS * 4 * words;
    v.b = v.s + KERN_BLOCK_ROWS * psize;
    v.row_stride = w->row_bytes;
    v.expert_bytes = v.expert_sbytes = kern_blocked_bytes(w);
    v.blocked = true;
    return v;
}

void kern_block_rows(const struct wmat *w, uint8_t *dst, int64_t b0, int64_t b1)
{
    const size_t psize = dtype_table[w->dtype].bits / 8, words = (size_t)(w->gs * w->bits / 32);
    const struct wmat v = kern_blocked_view(w, dst); /* the blocked layout's offsets */
    const size_t s = (size_t)(v.s - v.w), b = (size_t)(v.b - v.w);
    for (int64_t blk = b0; blk < b1; blk++)
        for (int64_t g = 0; g < w->cols / w->gs; g++) {
            uint8_t *rec = dst + kern_block_off(&v, blk, g); /* word k of row l at 64k + 4l, then the params */
            for (int l = 0; l < KERN_BLOCK_ROWS; l++) {
                const int64_t r = blk * KERN_BLOCK_ROWS + l;
                const uint8_t *src = w->w + (size_t)r * w->row_stride + (size_t)g * 4 * words;
                for (size_t k = 0; k < words; k++)
                    memcpy(rec + 64 * k + 4 * (size_t)l, src + 4 * k, 4);
                memcpy(rec + s + (size_t)l * psize, w->s + (size_t)r * w->srow_bytes + (size_t)g * psize, psize);
                memcpy(rec + b + (size_t)l * psize, w->b + (size_t)r * w->srow_bytes + (size_t)g * psize, psize);
            }
        }
}

/* S_g of row r: Σ q·xq over group g, exact in int32. Weight j's xq sits at j
 * (8 bits) or, at 4 bits, in its 128-weight chunk at byte (j odd)·64 + (j % 128)/2. */
static int32_t q8_group(const struct wmat *w, int64_t r, const int8_t *xq, int64_t g)
{
    int32_t s = 0;
    for (int64_t j = g * w->gs; j < (g + 1) * w->gs; j++) {
        const uint8_t *word = w->w + kern_code_off(w, r, j * w->bits / 32);
        int q = w->bits == 8 ? word[j % 4] : word[j % 8 / 2] >> 4 * (j & 1) & 15;
        s += q * xq[w->bits == 8 ? j : 128 * (j / 128) + 64 * (j & 1) + j % 128 / 2];
    }
    return s;
}

void kern_q8dot_ref(const struct wmat *w, const struct kern_q8input *in, int64_t n, float *y, int64_t row0,
                    int64_t row1, void *ws)
{
    (void)ws;
    if (kern_gtype_of(w->mode)) {
        kern_gq8dot_ref(w, in, n, y, row0, row1);
        return;
    }
    const int64_t ng = w->cols / w->gs;
    for (int64_t r = row0; r < row1; r++)
        for (int64_t t = 0; t < n; t++) {
            const int8_t *xq = in->xq + t * in->stride;
            const float *d = in->d + t * ng, *xs = in->xsum + t * ng;
            float lane[16] = {0};
            for (int64_t g = 0; g < ng; g++) {
                lane[g % 16] = fmaf((float)q8_group(w, r, xq, g), d[g] * kern_param_f32(w, w->s, r, g), lane[g % 16]);
                lane[g % 16] = fmaf(kern_param_f32(w, w->b, r, g), xs[g], lane[g % 16]);
            }
            y[t * w->rows + r] = kern_lanes_sum16(lane);
        }
}
