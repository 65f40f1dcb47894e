/* ref.c - scalar reference of every op, the dispatch table and threads. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/err.h"
#include "core/quant.h"
#include "kernels/kernels.h"

struct wmat kern_wmat_expert(const struct wmat *w, int64_t e)
{
    struct wmat v = *w;
    v.w += (size_t)e * w->expert_bytes;
    if (w->quantized) {
        v.s += (size_t)e * w->expert_sbytes;
        v.b += (size_t)e * w->expert_sbytes;
    }
    return v;
}

/* Where 32-bit word k of row r sits in w->w, and group g's scale or bias of
 * row r in w->s or w->b: by rows, or in blocks of 16 (kernels.h). */
static size_t code_off(const struct wmat *w, int64_t r, int64_t k)
{
    if (!w->blocked)
        return (size_t)r * w->row_stride + (size_t)(4 * k);
    const int64_t words = w->gs * w->bits / 32, g = k / words, l = r % KERN_BLOCK_ROWS;
    return kern_block_off(w, r / KERN_BLOCK_ROWS, g) + (size_t)(KERN_BLOCK_ROWS * 4 * (k - g * words) + 4 * l);
}

static size_t param_off(const struct wmat *w, int64_t r, int64_t g)
{
    size_t psize = dtype_table[w->dtype].bits / 8;
    if (!w->blocked)
        return (size_t)r * w->srow_bytes + (size_t)g * psize;
    return kern_block_off(w, r / KERN_BLOCK_ROWS, g) + (size_t)(r % KERN_BLOCK_ROWS) * psize;
}

/* Group g of row r dequantized into out[gs] (a group's codes are whole words:
 * gs·bits is a multiple of 32 for every supported layout). */
static void group_f32(const struct wmat *w, int64_t r, int64_t g, float *out)
{
    uint8_t codes[128]; /* gs·bits/8 <= 128·8/8 */
    const int64_t words = w->gs * w->bits / 32;
    for (int64_t k = 0; k < words; k++)
        memcpy(codes + 4 * k, w->w + code_off(w, r, g * words + k), 4);
    if ((w->bits == 2 || w->bits == 4 || w->bits == 8) && kern_cpu_has_avx512())
        kern_dequant_row_avx512(codes, w->s + param_off(w, r, g), w->b + param_off(w, r, g), w->dtype, w->gs, w->gs,
                                w->bits, out);
    else
        dequant_affine_row(codes, w->s + param_off(w, r, g), w->b + param_off(w, r, g), w->dtype, (size_t)w->gs, w->gs,
                           w->bits, out);
}

void kern_row_f32(const struct wmat *w, int64_t r, float *out)
{
    const uint8_t *row = w->w + (size_t)r * w->row_stride;
    if (w->blocked)
        for (int64_t g = 0; g < w->cols / w->gs; g++)
            group_f32(w, r, g, out + g * w->gs);
    else if (w->quantized && (w->bits == 2 || w->bits == 4 || w->bits == 8) && kern_cpu_has_avx512())
        kern_dequant_row_avx512(row, w->s + (size_t)r * w->srow_bytes, w->b + (size_t)r * w->srow_bytes, w->dtype,
                                w->cols, w->gs, w->bits, out);
    else if (w->quantized)
        dequant_affine_row(row, w->s + (size_t)r * w->srow_bytes, w->b + (size_t)r * w->srow_bytes, w->dtype,
                           (size_t)w->cols, w->gs, w->bits, out);
    else
        dtype_to_f32(w->dtype, row, out, (size_t)w->cols);
}

/* Up to 128 values of row r from column j (a whole group when quantized). */
static void row_chunk(const struct wmat *w, int64_t r, int64_t j, int64_t len, float *out)
{
    const uint8_t *row = w->w + (size_t)r * w->row_stride;
    if (w->blocked) {
        group_f32(w, r, j / w->gs, out);
    } else if (w->quantized) {
        size_t sb = dtype_table[w->dtype].bits / 8, g = (size_t)(j / w->gs);
        dequant_affine_row(row + j * w->bits / 8, w->s + (size_t)r * w->srow_bytes + g * sb,
                           w->b + (size_t)r * w->srow_bytes + g * sb, w->dtype, (size_t)len, w->gs, w->bits, out);
    } else {
        dtype_to_f32(w->dtype, row + (size_t)j * (dtype_table[w->dtype].bits / 8), out, (size_t)len);
    }
}

void kern_matmul_ref(const struct wmat *w, const float *x, int64_t n, float *y, int64_t row0, int64_t row1)
{
    float chunk[128]; /* no heap: the reference cannot fail */
    int64_t step = w->quantized ? w->gs : 128;
    for (int64_t r = row0; r < row1; r++)
        for (int64_t t = 0; t < n; t++) {
            const float *xt = x + t * w->cols;
            float acc = 0.0f;
            for (int64_t j = 0; j < w->cols; j += step) {
                int64_t len = w->cols - j < step ? w->cols - j : step;
                row_chunk(w, r, j, len, chunk);
                for (int64_t k = 0; k < len; k++)
                    acc += xt[j + k] * chunk[k];
            }
            y[t * w->rows + r] = acc;
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
        x[i] = expf(x[i] - m);
        sum += x[i];
    }
    for (int64_t i = 0; i < n; i++)
        x[i] /= sum;
}

/* ---- threads ---- */

int kern_workers(int threads, int64_t n_tasks)
{
    if (threads > KERN_MAX_THREADS)
        threads = KERN_MAX_THREADS;
    if (threads > n_tasks)
        threads = (int)n_tasks;
    return threads < 1 ? 1 : threads;
}

/* ---- quantization ---- */

void kern_quant_row(const float *w, size_t k, int gs, int bits, enum dtype sdt, uint32_t *words, void *scales,
                    void *biases)
{
    if (kern_cpu_has_avx512())
        kern_quant_row_avx512(w, k, gs, bits, sdt, words, scales, biases);
    else
        quant_affine_row(w, k, gs, bits, sdt, words, scales, biases);
}

void kern_to_f32(enum dtype t, const uint8_t *src, float *dst, int64_t n)
{
    if (kern_cpu_has_avx512())
        kern_to_f32_avx512(t, src, dst, n);
    else
        dtype_to_f32(t, src, dst, (size_t)n);
}

/* Lanes l and l + w added for w = 8, 4, 2, 1 (lane is overwritten). */
static float lanes_sum16(float lane[16])
{
    for (int w = 8; w >= 1; w /= 2)
        for (int l = 0; l < w; l++)
            lane[l] += lane[l + w];
    return lane[0];
}

float kern_dot_ref(const float *a, const float *b, int64_t n)
{
    float lane[16] = {0};
    for (int64_t i = 0; i < n; i++)
        lane[i % 16] = fmaf(a[i], b[i], lane[i % 16]);
    return lanes_sum16(lane);
}

/* ---- int8 activations: the definition (kernels.h) ---- */

bool kern_q8_supports(const struct wmat *w)
{
    return w->quantized && (w->bits == 4 || w->bits == 8) && (w->gs == 32 || w->gs == 64 || w->gs == 128) &&
           w->cols % w->gs == 0;
}

bool kern_blockable(const struct wmat *w)
{
    return kern_q8_supports(w) && w->rows > 0 && w->cols > 0 && w->rows % KERN_BLOCK_ROWS == 0 &&
           w->row_stride == w->row_bytes;
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
    const size_t psize = dtype_table[w->dtype].bits / 8;
    const struct wmat v = kern_blocked_view(w, dst); /* the blocked layout's offsets */
    uint8_t *s = dst + (v.s - v.w), *b = dst + (v.b - v.w);
    for (int64_t r = b0 * KERN_BLOCK_ROWS; r < b1 * KERN_BLOCK_ROWS; r++) {
        for (int64_t k = 0; k < (int64_t)w->row_bytes / 4; k++)
            memcpy(dst + code_off(&v, r, k), w->w + code_off(w, r, k), 4);
        for (int64_t g = 0; g < w->cols / w->gs; g++) {
            memcpy(s + param_off(&v, r, g), w->s + param_off(w, r, g), psize);
            memcpy(b + param_off(&v, r, g), w->b + param_off(w, r, g), psize);
        }
    }
}

static float param_f32(const struct wmat *w, const uint8_t *p, int64_t r, int64_t g)
{
    float v;
    dtype_to_f32(w->dtype, p + param_off(w, r, g), &v, 1);
    return v;
}

/* S_g of row r: Σ q·xq over group g, exact in int32. Weight j's xq sits at j
 * (8 bits) or, at 4 bits, in its 128-weight chunk at byte (j odd)·64 + (j % 128)/2. */
static int32_t q8_group(const struct wmat *w, int64_t r, const int8_t *xq, int64_t g)
{
    int32_t s = 0;
    for (int64_t j = g * w->gs; j < (g + 1) * w->gs; j++) {
        const uint8_t *word = w->w + code_off(w, r, j * w->bits / 32);
        int q = w->bits == 8 ? word[j % 4] : word[j % 8 / 2] >> 4 * (j & 1) & 15;
        s += q * xq[w->bits == 8 ? j : 128 * (j / 128) + 64 * (j & 1) + j % 128 / 2];
    }
    return s;
}

void kern_q8dot_ref(const struct wmat *w, const struct kern_q8input *in, int64_t n, float *y, int64_t row0,
                    int64_t row1)
{
    const int64_t ng = w->cols / w->gs;
    for (int64_t r = row0; r < row1; r++)
        for (int64_t t = 0; t < n; t++) {
            const int8_t *xq = in->xq + t * in->stride;
            const float *d = in->d + t * ng, *xs = in->xsum + t * ng;
            float lane[16] = {0};
            for (int64_t g = 0; g < ng; g++) {
                lane[g % 16] = fmaf((float)q8_group(w, r, xq, g), d[g] * param_f32(w, w->s, r, g), lane[g % 16]);
                lane[g % 16] = fmaf(param_f32(w, w->b, r, g), xs[g], lane[g % 16]);
            }
            y[t * w->rows + r] = lanes_sum16(lane);
        }
}

void kern_axpy_ref(float *y, float a, const float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] += a * x[i];
}

/* ---- dispatch ---- */

void kern_init(struct kern_table *t, enum kern_level level)
{
    memset(t, 0, sizeof *t);
    t->name = "scalar";
    t->dot = kern_dot_ref;
    t->axpy = kern_axpy_ref;
    t->gelu_mul = kern_gelu_mul_ref;
    t->softcap = kern_softcap_ref;
    if (level == KERN_BLAS && kern_blas_init()) /* without its scratch (no memory): KERN_BEST */
        t->blas_ws = calloc(KERN_MAX_THREADS, sizeof *t->blas_ws);
    t->blas = t->blas_ws != NULL;
    if (level == KERN_Q8) {
        t->q8dot = kern_cpu_has_avx512_vnni() ? kern_q8dot_avx512 : kern_q8dot_ref;
        t->q8prep = kern_cpu_has_avx512() ? kern_q8input_prepare_avx512 : kern_q8input_prepare;
    }
    if (level == KERN_SCALAR)
        return;
    if (kern_cpu_has_avx512()) {
        t->name = "avx512";
        t->dot = kern_dot_avx512;
        t->axpy = kern_axpy_avx512;
        t->gelu_mul = kern_gelu_mul_avx512;
        t->softcap = kern_softcap_avx512;
        t->qdot = kern_qdot_avx512;
        t->matvec_bf16 = kern_matvec_bf16_avx512;
    } else if (kern_cpu_has_avx2()) {
        t->name = "avx2";
        t->dot = kern_dot_avx2;
        t->gelu_mul = kern_gelu_mul_avx2;
        t->softcap = kern_softcap_avx2;
        t->qdot = kern_qdot_avx2;
        t->matvec_bf16 = kern_matvec_bf16_avx2;
    }
    if (level == KERN_Q8) /* the other kernels are those of KERN_BEST, and the name tells both */
        t->name = t->q8dot == kern_q8dot_avx512 ? "avx512-q8"
                  : !strcmp(t->name, "avx512")  ? "avx512-q8ref"
                  : !strcmp(t->name, "avx2")    ? "avx2-q8ref"
                                                : "scalar-q8ref";
}

void kern_free(struct kern_table *t)
{
    for (int i = 0; t->blas_ws && i < KERN_MAX_THREADS; i++)
        free(t->blas_ws[i].buf);
    free(t->blas_ws);
    t->blas_ws = NULL;
    t->blas = false;
}

/* Rows per task: about TILE_BYTES of weights per token, but no more than a
 * MIN_TASKS-th of the matrix and no fewer than TILE_ROWS, in whole blocks of
 * KERN_BLOCK_ROWS (a blocked matrix's). Each thread runs a contiguous share
 * of the tiles (kern_parallel), so it streams on across its tiles; the tile
 * size sets the granularity at which the threads even out at the end
 * (4-bit q8 decode, 2 threads, alternating steps in one process: 128 KiB
 * tiles 0.9 % faster than 512 KiB, 256 KiB the same, 64-row tiles 1.8 %
 * slower; docs/PERFORMANCE.md). Fixed by the matrix and the token count,
 * never by the thread count; and every row's result is the same whatever
 * the split (only sgemm's tiles shape rounding). */
#define TILE_ROWS 64
#define TILE_BYTES (128 << 10)
#define MIN_TASKS 4

static int64_t tile_rows(const struct wmat *w, int64_t n)
{
    int64_t row_bytes = (int64_t)w->row_stride + (w->quantized ? 2 * (int64_t)w->srow_bytes : 0);
    int64_t rows = TILE_BYTES / (row_bytes * n > 0 ? row_bytes * n : 1), quarter = (w->rows + MIN_TASKS - 1) / MIN_TASKS;
    rows = rows < quarter ? rows : quarter;
    rows = (rows + KERN_BLOCK_ROWS - 1) / KERN_BLOCK_ROWS * KERN_BLOCK_ROWS; /* whole blocks of a blocked matrix */
    return rows > TILE_ROWS ? rows : TILE_ROWS;
}

struct mm_job {
    matmul_fn fn;             /* or, when NULL, sgemm (blas_ws set), q8dot or qdot over the prepared input */
    struct kern_blas_ws *blas_ws;
    int64_t tile_rows;
    qdot_fn qdot;
    const struct kern_qinput *qin;
    q8dot_fn q8dot;
    const struct kern_q8input *q8in;
    const struct wmat *w;
    const float *x;
    int64_t n;
    float *y;
};

static void mm_task(void *arg, int64_t task, int worker)
{
    struct mm_job *j = arg;
    int64_t r0 = task * j->tile_rows, r1 = r0 + j->tile_rows < j->w->rows ? r0 + j->tile_rows : j->w->rows;
    if (j->fn)
        j->fn(j->w, j->x, j->n, j->y, r0, r1);
    else if (j->blas_ws)
        kern_matmul_blas_ws(j->w, j->x, j->n, j->y, r0, r1, &j->blas_ws[worker]);
    else if (j->q8dot)
        j->q8dot(j->w, j->q8in, j->n, j->y, r0, r1);
    else
        j->qdot(j->w, j->qin, j->n, j->y, r0, r1);
}

/* Chooses j's path for w; qin/q8in receive the input prepared for it, unless
 * prev (the job of another matrix of the same call) holds one made for the
 * same bits, group size and columns, which is then shared. */
static void mm_setup(const struct kern_table *t, struct mm_job *j, const struct wmat *w, const float *x, int64_t n,
                     float *y, struct kern_qinput *qin, struct kern_q8input *q8in, const struct mm_job *prev)
{
    *j = (struct mm_job){.fn = kern_matmul_ref, .tile_rows = tile_rows(w, n), .w = w, .x = x, .n = n, .y = y};
    bool same = prev && prev->w->quantized && w->quantized && prev->w->bits == w->bits && prev->w->gs == w->gs &&
                prev->w->cols == w->cols;
    const struct kern_q8input *q8 = same ? prev->q8in : NULL;
    const struct kern_qinput *q = same ? prev->qin : NULL;
    if (t->q8dot && kern_q8_supports(w) && (q8 || t->q8prep(w, x, n, q8in) == ERR_OK)) {
        j->fn = NULL;
        j->q8dot = t->q8dot;
        j->q8in = q8 ? q8 : q8in;
    } else if (w->blocked) {
        /* only the int8 kernels and the reference read blocks */
    } else
    if (n >= KERN_BLAS_MIN_TOKENS && t->blas) {
        j->fn = NULL;
        j->blas_ws = t->blas_ws;
        j->tile_rows = KERN_BLAS_ROWS;
    } else
    if (w->quantized && (w->bits == 4 || w->bits == 8) && t->qdot &&
        (q || kern_qinput_prepare(w, x, n, qin) == ERR_OK)) {
        j->fn = NULL; /* the input is prepared once and read by every tile */
        j->qdot = t->qdot;
        j->qin = q ? q : qin;
    } else if (!w->quantized && w->dtype == DT_BF16 && t->matvec_bf16) {
        j->fn = t->matvec_bf16;
    }
}

/* The tasks of all matrices in one job: matrix i's tiles are tasks [first[i], first[i + 1]). */
struct many_job {
    struct mm_job j[KERN_MANY];
    int64_t first[KERN_MANY + 1];
};

static void many_task(void *arg, int64_t task, int worker)
{
    struct many_job *m = arg;
    int i = 0;
    while (task >= m->first[i + 1])
        i++;
    mm_task(&m->j[i], task - m->first[i], worker);
}

void kern_matmul_many(const struct kern_table *t, int count, const struct wmat *const w[], float *const y[],
                      const float *x, int64_t n, int threads)
{
    kern_matmul_many_next(t, count, w, y, x, n, threads, NULL);
}

void kern_matmul_many_next(const struct kern_table *t, int count, const struct wmat *const w[], float *const y[],
                           const float *x, int64_t n, int threads, const struct kern_ahead *next)
{
    if (count > KERN_MANY) {
        kern_matmul_many(t, KERN_MANY, w, y, x, n, threads);
        kern_matmul_many_next(t, count - KERN_MANY, w + KERN_MANY, y + KERN_MANY, x, n, threads, next);
        return;
    }
    struct many_job m = {0};
    struct kern_qinput qin[KERN_MANY] = {0};
    struct kern_q8input q8in[KERN_MANY] = {0};
    for (int i = 0; i < count; i++) {
        mm_setup(t, &m.j[i], w[i], x, n, y[i], &qin[i], &q8in[i], i ? &m.j[0] : NULL);
        m.first[i + 1] = m.first[i] + (w[i]->rows + m.j[i].tile_rows - 1) / m.j[i].tile_rows;
    }
    kern_parallel_next(threads, m.first[count], many_task, &m, next);
    for (int i = 0; i < count; i++) {
        kern_qinput_free(&qin[i]);
        kern_q8input_free(&q8in[i]);
    }
}

void kern_matmul_ahead(const struct kern_table *t, int count, const struct wmat *const w[], int64_t n, int threads,
                       struct kern_ahead *plan)
{
    int64_t first[KERN_MANY + 1] = {0}, rows[KERN_MANY];
    plan->parts = 0;
    if (count > KERN_MANY || (n >= KERN_BLAS_MIN_TOKENS && t->blas))
        return;
    for (int i = 0; i < count; i++) {
        rows[i] = tile_rows(w[i], n);
        first[i + 1] = first[i] + (w[i]->rows + rows[i] - 1) / rows[i];
    }
    if (first[count] == 0)
        return; /* no rows: no job */
    plan->parts = kern_workers(threads, first[count]);
    for (int p = 0; p < plan->parts; p++) {
        int64_t task = first[count] * p / plan->parts, end = first[count] * (p + 1) / plan->parts;
        int i = 0;
        while (task >= first[i + 1])
            i++;
        const struct wmat *m = w[i];
        int64_t r0 = (task - first[i]) * rows[i];                   /* the share's first row */
        int64_t r1 = end < first[i + 1] ? (end - first[i]) * rows[i] : m->rows; /* its last in this matrix */
        size_t row = m->blocked ? m->row_bytes + 2 * m->srow_bytes : m->row_stride; /* bytes a row takes */
        bool one_run = m->blocked || m->row_stride == m->row_bytes;
        size_t n_bytes = one_run ? (size_t)((r1 < m->rows ? r1 : m->rows) - r0) * row : 0;
        plan->p[p] = m->w + (m->blocked ? kern_block_off(m, r0 / KERN_BLOCK_ROWS, 0) : (size_t)r0 * row);
        plan->n[p] = n_bytes < KERN_AHEAD_BYTES ? n_bytes : KERN_AHEAD_BYTES;
    }
}

void kern_matmul(const struct kern_table *t, const struct wmat *w, const float *x, int64_t n, float *y, int threads)
{
    kern_matmul_many_next(t, 1, &w, &y, x, n, threads, NULL);
}

void kern_matmul_next(const struct kern_table *t, const struct wmat *w, const float *x, int64_t n, float *y,
                      int threads, const struct kern_ahead *next)
{
    kern_matmul_many_next(t, 1, &w, &y, x, n, threads, next);
}
