/* input.c - the inputs the fused kernels read, prepared once per matmul: their
 * definitions (internal.h; x86/q8_avx512.c's preparation of the int8 input
 * writes the same bytes); the GEMMs' workspaces, and the scratch holding them. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/internal.h"

_Static_assert(KERN_QINPUT_PART % AGEMM_T == 0 && KERN_QINPUT_PART % 4 == 0, "a part is whole panels");

/* Eight groups' sums side by side: each is still one chain in column order,
 * but eight chains hide the add's latency (2-3× faster than one at a time). */
void kern_group_sums(const struct wmat *w, const float *x, int64_t n, float *sum)
{
    const int64_t ng = w->cols / w->gs, gs = w->gs;
    for (int64_t t = 0; t < n; t++)
        for (int64_t g0 = 0; g0 < ng; g0 += 8) {
            const int64_t m = ng - g0 < 8 ? ng - g0 : 8;
            const float *xg = x + t * w->cols + g0 * gs;
            float s[8] = {0.0f};
            for (int64_t j = 0; j < gs && m == 8; j++) /* the chains in registers */
#pragma GCC unroll 8
                for (int64_t u = 0; u < 8; u++)
                    s[u] += xg[u * gs + j];
            for (int64_t j = 0; j < gs && m < 8; j++)
                for (int64_t u = 0; u < m; u++)
                    s[u] += xg[u * gs + j];
            memcpy(sum + t * ng + g0, s, (size_t)m * sizeof *s);
        }
}

/* Floats per token of the prepared input: affine, cols rounded up to 16;
 * MX, cols rounded up to blocks of 16 words. */
static int64_t qinput_stride(const struct wmat *w)
{
    if (kern_gtype_of(w->mode)) /* ggml: x as it is */
        return w->cols;
    const int64_t blk = w->mode == QM_AFFINE ? 16 : 16 * (32 / w->bits);
    return (w->cols + blk - 1) / blk * blk;
}

/* w with the group size of the prepared input's sums: ggml's, KERN_GSUM. */
static struct wmat sums_view(const struct wmat *w)
{
    struct wmat v = *w;
    v.gs = kern_gtype_of(w->mode) ? KERN_GSUM : w->gs;
    return v;
}

/* Floats of the group sums, rounded up to a cache line: the rearranged
 * input after them starts 64-byte aligned, as the kernels' loads are. */
static int64_t qinput_sums(const struct wmat *w, int64_t n)
{
    return (n * (w->cols / sums_view(w).gs) + 15) / 16 * 16;
}

/* Tokens the prepared input holds: the GEMM's panels filled up with zeros. */
static int64_t qinput_tokens(const struct wmat *w, int64_t n, bool gemm)
{
    const int64_t panel = !gemm || kern_gtype_of(w->mode) ? 1 : w->mode == QM_AFFINE ? AGEMM_T : 4;
    return (n + panel - 1) / panel * panel;
}

size_t kern_qinput_bytes(const struct wmat *w, int64_t n)
{
    return (size_t)(qinput_sums(w, n) + qinput_tokens(w, n, true) * qinput_stride(w)) * sizeof(float);
}

int64_t kern_qinput_layout(const struct wmat *w, int64_t n, bool gemm, void *buf, struct kern_qinput *in)
{
    float *xsum = buf;
    *in = (struct kern_qinput){.xd = xsum + qinput_sums(w, n), .xsum = xsum, .stride = qinput_stride(w), .gemm = gemm};
    return (qinput_tokens(w, n, gemm) + KERN_QINPUT_PART - 1) / KERN_QINPUT_PART;
}

void kern_qinput_part(const struct wmat *w, const float *x, int64_t n, bool gemm, void *buf, int64_t part)
{
    const struct wmat sv = sums_view(w);
    const int64_t cols = w->cols, per_word = 32 / w->bits, blk = 16 * per_word, ng = cols / sv.gs;
    const int64_t stride = qinput_stride(w), t0 = part * KERN_QINPUT_PART;
    const int64_t t1 = t0 + KERN_QINPUT_PART < qinput_tokens(w, n, gemm) ? t0 + KERN_QINPUT_PART : qinput_tokens(w, n, gemm);
    float *xsum = buf, *xd = xsum + qinput_sums(w, n);
    if (t0 < n)
        kern_group_sums(&sv, x + t0 * cols, (t1 < n ? t1 : n) - t0, xsum + t0 * ng);
    if (kern_gtype_of(w->mode)) { /* ggml: x as it is */
        if (t0 < n)
            memcpy(xd + t0 * cols, x + t0 * cols, (size_t)(((t1 < n ? t1 : n) - t0) * cols) * sizeof *xd);
        return;
    }
    if (w->mode == QM_AFFINE) { /* in column order, each code's place value divided out (the top code's is 1) */
        float unit[8];            /* column j's at j % 8 (4 or 8 codes a word) */
        for (int k = 0; k < 8; k++)
            unit[k] = k % per_word == per_word - 1 ? 1.0f : ldexpf(1.0f, -w->bits * (k % per_word));
        for (int64_t t = t0; t < t1 && !gemm; t++) {
            float *dst = xd + t * stride;
            const float *xt = x + t * cols;
            int64_t j = 0;
            for (; j + 8 <= cols; j += 8) /* in vector steps: no modulo a column */
                for (int k = 0; k < 8; k++)
                    dst[j + k] = xt[j + k] * unit[k];
            for (; j < cols; j++)
                dst[j] = xt[j] * unit[j % 8];
            memset(dst + cols, 0, (size_t)(stride - cols) * sizeof *dst);
        }
        for (int64_t p0 = t0; p0 < t1 && gemm; p0 += AGEMM_T) { /* the GEMM's in panels, [panel, column, AGEMM_T] */
            const int64_t m = n - p0 < AGEMM_T ? n - p0 : AGEMM_T; /* tokens in the panel; zeros after them */
            const float *xp = x + p0 * cols;
            float *dst = xd + p0 * stride;
            for (int64_t j = 0; j < cols && m == AGEMM_T; j++) /* a column's 12 values stored side by side */
#pragma GCC unroll 12
                for (int64_t u = 0; u < AGEMM_T; u++)
                    dst[j * AGEMM_T + u] = xp[u * cols + j] * unit[j % 8];
            for (int64_t j = 0; j < cols && m < AGEMM_T; j++)
                for (int64_t u = 0; u < AGEMM_T; u++)
                    dst[j * AGEMM_T + u] = u < m ? xp[u * cols + j] * unit[j % 8] : 0.0f;
            memset(dst + cols * AGEMM_T, 0, (size_t)((stride - cols) * AGEMM_T) * sizeof *dst);
        }
        return;
    }
    for (int64_t t = t0; t < t1; t++) {
        float *dst = gemm ? xd + t / 4 * 4 * stride : xd + t * stride; /* then [j] at [4j + 16u] in fours */
        const int64_t step = gemm ? 4 : 1, slot = gemm ? t % 4 * 16 : 0;
        for (int64_t b = 0; b < stride; b += blk)
            for (int64_t k = 0; k < per_word; k++) {
                for (int64_t l = 0; l < 16; l++) { /* MX: codes are looked up as values */
                    int64_t j = b + per_word * l + k;
                    dst[step * (b + 16 * k) + slot + l] = j < cols && t < n ? x[t * cols + j] : 0.0f;
                }
            }
    }
}

void kern_agemm_tile(const struct kern_agemm_isa *isa, const struct wmat *w, const struct kern_qinput *in, int64_t n,
                     float *y, int64_t row0, int64_t row1, float *ws)
{
    const int64_t cols = w->cols, ng = cols / w->gs, rbase = w->blocked ? row0 / 16 * 16 : row0;
    const int64_t sets = ((row1 - rbase + 15) / 16 + AGEMM_S - 1) / AGEMM_S * AGEMM_S;
    const int64_t kc = cols < AGEMM_KC ? cols : AGEMM_KC, panels = (n + AGEMM_T - 1) / AGEMM_T;
    float *qt = ws, *st = qt + sets * kc * 16, *bt = st + sets * ng * 16, *A = bt + sets * ng * 16;
    memset(A, 0, (size_t)(panels * sets * AGEMM_T * 16) * sizeof *A); /* [panels, sets, AGEMM_T, 16] */
    for (int64_t c0 = 0; c0 < cols; c0 += kc) {
        const int64_t g0 = c0 / w->gs, g1 = (c0 + kc < cols ? c0 + kc : cols) / w->gs;
        for (int64_t s = 0; s < sets; s++)
            isa->decode(w, rbase + 16 * s, kern_rows_mask(rbase + 16 * s, row0, row1), g0, g1, qt + s * kc * 16,
                        st + s * ng * 16, bt + s * ng * 16);
        for (int64_t p = 0; p < panels; p++) {
            const float *x = in->xd + p * AGEMM_T * in->stride + c0 * AGEMM_T; /* tokens p·AGEMM_T .., the slice */
            for (int64_t s = 0; s < sets; s += isa->sets)
                if (rbase + 16 * s < row1) /* sets past the tile's rows: only zeros */
                    isa->block(qt + s * kc * 16, kc * 16, x, st + (s * ng + g0) * 16, ng * 16, g1 - g0, w->gs,
                               A + (p * sets + s) * AGEMM_T * 16);
        }
    }
    for (int64_t p = 0; p < panels; p++) {
        const int64_t t0 = p * AGEMM_T;
        const int tp = n - t0 < AGEMM_T ? (int)(n - t0) : AGEMM_T;
        for (int64_t s = 0; s < sets; s++) {
            const int64_t r = rbase + 16 * s;
            const uint32_t m = kern_rows_mask(r, row0, row1);
            if (m)
                isa->finish(w, in, bt + s * ng * 16, A + (p * sets + s) * AGEMM_T * 16, t0, tp, r, m, y);
        }
    }
}

/* The blocked GEMM's workspace for a tile of `rows` rows (floats): affine,
 * as kern_agemm_tile carves it; MX, as qgemm512m and qgemm256m do: decoded codes [rows rounded
 * up to pairs, stride], lane scales [rows, blocks, 16], the A lanes [rows,
 * GEMM_TP, 16] and a row's scales [groups rounded up to 16, + 16]. */
size_t kern_qgemm_ws_bytes(const struct wmat *w, int64_t rows, int64_t n)
{
    if (w->mode == QM_AFFINE) { /* kern_agemm_tile: codes [sets, slice, 16], scales and biases [sets, groups, 16], A [panels, sets, AGEMM_T, 16] */
        const int64_t sets = (rows + 15 + 16 * AGEMM_S - 1) / (16 * AGEMM_S) * AGEMM_S; /* rows from a block's start, whole register blocks of sets */
        const int64_t kc = w->cols < AGEMM_KC ? w->cols : AGEMM_KC, panels = (n + AGEMM_T - 1) / AGEMM_T;
        return (size_t)(sets * 16 * (kc + 2 * (w->cols / w->gs) + panels * AGEMM_T)) * sizeof(float);
    }
    const int64_t stride = qinput_stride(w), blocks = stride / (16 * (32 / w->bits));
    const int64_t ng16 = (w->cols / w->gs + 15) / 16 * 16;
    return (size_t)((rows + 1) / 2 * 2 * stride + rows * (16 * blocks + GEMM_TP * 16) + ng16 + 16) * sizeof(float);
}

/* Bytes per token of the int8 input: cols rounded up to 512/bits. */
static int64_t q8input_stride(const struct wmat *w)
{
    const int64_t blk = 512 / w->bits;
    return (w->cols + blk - 1) / blk * blk;
}

/* Floats of the group scales and sums, rounded up to a cache line (the int8
 * input after them starts 64-byte aligned). */
static int64_t q8input_params(const struct wmat *w, int64_t n)
{
    return (2 * n * (w->cols / w->gs) + 15) / 16 * 16;
}

size_t kern_q8input_bytes(const struct wmat *w, int64_t n)
{
    const size_t xq = (size_t)(n * q8input_stride(w)); /* 8 bits: xq, xqs, then a sum per 16 */
    return (size_t)q8input_params(w, n) * sizeof(float) + xq + (w->bits == 8 ? xq + xq / 16 * sizeof(int32_t) : 0);
}

int64_t kern_q8input_layout(const struct wmat *w, int64_t n, void *buf, struct kern_q8input *in)
{
    struct kern_q8parts p;
    kern_q8input_part_begin(w, n, buf, -1, &p);
    *in = (struct kern_q8input){.xq = p.xq, .d = p.d, .xsum = p.xsum, .xqs = p.xqs, .qsum = p.qsum, .stride = p.stride};
    return (n + KERN_QINPUT_PART - 1) / KERN_QINPUT_PART;
}

/* (part -1: the pointers alone, no tokens.) */
void kern_q8input_part_begin(const struct wmat *w, int64_t n, void *buf, int64_t part, struct kern_q8parts *p)
{
    p->stride = q8input_stride(w);
    p->ng = w->cols / w->gs;
    p->d = buf;
    p->xsum = p->d + n * p->ng;
    p->xq = (int8_t *)(void *)(p->d + q8input_params(w, n));
    p->xqs = w->bits == 8 ? p->xq + n * p->stride : NULL;
    p->qsum = w->bits == 8 ? (int32_t *)(void *)(p->xqs + n * p->stride) : NULL;
    p->t0 = part < 0 ? 0 : part * KERN_QINPUT_PART;
    p->t1 = part < 0 ? 0 : p->t0 + KERN_QINPUT_PART < n ? p->t0 + KERN_QINPUT_PART : n;
    memset(p->xq + p->t0 * p->stride, 0, (size_t)((p->t1 - p->t0) * p->stride));
}

void kern_q8input_part_end(const struct kern_q8parts *p)
{
    if (!p->qsum)
        return;
    for (int64_t i = p->t0 * p->stride / 16; i < p->t1 * p->stride / 16; i++) {
        int32_t s = 0;
        for (int j = 0; j < 16; j++)
            s += p->xq[16 * i + j];
        p->qsum[i] = s;
    }
    for (int64_t t = p->t0; t < p->t1; t++) /* of each whole 128, quarters 0 and 3 stay, 1 and 2 swap */
        for (int64_t c = 0; c < p->stride; c += 32) {
            const int64_t q = c % 128 / 32, from = c + 128 - c % 128 > p->stride ? c : c + 32 * ((q == 1) - (q == 2));
            memcpy(p->xqs + t * p->stride + c, p->xq + t * p->stride + from, 32);
        }
}

/* One definition for every path (internal.h): d = max|x|/127 per group, xq =
 * rint(x/d) clamped to ±127 at the byte that meets x's code in the chunk
 * (4-bit: weight o of a 128-weight chunk pairs with byte o/2, low nibble for
 * even o, so its xq goes to byte (o odd)·64 + o/2). A group with a NaN or inf
 * gets d = NaN and xq = 0, so the NaN reaches the output; a group whose d is
 * 0 (all zero, or max|x| so small that /127 underflows) keeps xq = 0. */
void kern_q8input_part(const struct wmat *w, const float *x, int64_t n, void *buf, int64_t part)
{
    struct kern_q8parts p;
    kern_q8input_part_begin(w, n, buf, part, &p);
    const int64_t ng = p.ng, blk = 512 / w->bits, stride = p.stride;
    kern_group_sums(w, x + p.t0 * w->cols, p.t1 - p.t0, p.xsum + p.t0 * ng);
    for (int64_t t = p.t0; t < p.t1; t++)
        for (int64_t g = 0; g < ng; g++) {
            const float *xg = x + t * w->cols + g * w->gs;
            float m = 0.0f;
            bool finite = true;
            for (int i = 0; i < w->gs; i++) {
                float a = fabsf(xg[i]);
                if (!isfinite(a))
                    finite = false;
                else if (a > m)
                    m = a;
            }
            float dg = finite ? m / 127.0f : NAN;
            p.d[t * ng + g] = dg;
            if (!finite || dg == 0.0f) /* dg is 0 also for a tiny m that underflows: xq stay 0 */
                continue;
            for (int i = 0; i < w->gs; i++) {
                int64_t j = g * w->gs + i, c = j / blk, o = j % blk;
                float q = rintf(xg[i] / dg);
                q = q > 127.0f ? 127.0f : q < -127.0f ? -127.0f : q;
                p.xq[t * stride + (w->bits == 8 ? j : 128 * c + 64 * (o & 1) + o / 2)] = (int8_t)q;
            }
        }
    kern_q8input_part_end(&p);
}

/* kern_bf16gemm_avx512's and _avx2's workspace for a tile of `rows` rows (any n): the
 * rows as floats [rows, cols rounded up to 32], the chains [rows, GEMM_TP, 2, 16]. */
size_t kern_bf16gemm_ws_bytes(const struct wmat *w, int64_t rows, int64_t n)
{
    (void)n;
    return (size_t)(rows * ((w->cols + 31) / 32 * 32 + GEMM_TP * 32)) * sizeof(float);
}

/* kern_refgemm_avx512's, _avx2's and _neon's workspace (any tile, any n): 16 rows column-major
 * [cols, 16], then by rows [16, cols]. */
size_t kern_refgemm_ws_bytes(const struct wmat *w, int64_t rows, int64_t n)
{
    (void)rows, (void)n;
    return (size_t)(32 * w->cols) * sizeof(float);
}

void *kern_ws_reserve(struct kern_ws *ws, size_t bytes)
{
    if (ws->cap < bytes) {
        free(ws->buf);
        ws->buf = aligned_alloc(64, (bytes + 63) / 64 * 64); /* vector loads stay within cache lines */
        ws->cap = ws->buf ? bytes : 0;
    }
    return ws->buf;
}
