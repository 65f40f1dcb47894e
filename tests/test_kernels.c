/* test_kernels.c - the compute kernels (kernels/kernels.h).
 *
 * Every fast path (AVX2 / AVX-512 fused dequantize + dot products, the
 * OpenBLAS prefill path) is compared with kern_matmul_ref on the same random
 * input, and kern_matmul_ref itself with a float64 evaluation of the same
 * weights, on odd sizes: 1, 3, 7, 65 and 130 rows (130 spans three 64-row
 * tiles with a short last one), columns that are 1, 3 and 5 groups (and 384)
 * for MLX affine weights, odd column counts for bf16 (tails after the 8/16
 * lanes), 1 and 5 tokens (and 37 for the blocked GEMMs). Weight matrices
 * are built by quantizing random floats with quant_affine_row (scales and
 * biases in BF16, F16 and F32) and are placed one byte off alignment, as
 * weights in a mapped file may be.
 * Outputs are pre-filled with NaN, so an element a kernel does not write
 * fails the comparison; a kernel run over a sub-range of rows must leave the
 * other rows untouched. Views: a split half (row_stride > row_bytes, like one
 * half of a fused tensor) and experts of a 3-D tensor (kern_wmat_expert).
 * kern_matmul must give bitwise identical results for 1, 2 and 3 threads on
 * every path. The element-wise ops are checked against hand-computed values.
 *
 * Tolerance. Write S = Σ_j |x_j|·(|s_g·q_j| + |b_g|) for an affine row (the
 * magnitude of every term either evaluation order can round, including the
 * cancellation between s·q and b) and S = Σ_j |x_j·w_j| for a float row.
 * Float32 sums of K terms in any order differ from the exact value by at most
 * about K·2^-24·S in the worst case, typically √K·2^-24·S. Measured over the
 * whole grid below (K up to 1079; AVX-512 machine, OpenBLAS 0.3.21; each run
 * logs its numbers with cr_log_info):
 *     |ref - float64| / S   affine 7.6e-8, bf16/f16/f32 2.0e-7
 *     |fast - ref| / S      q4 avx2 1.0e-7, q4 avx512 1.0e-7, q8 avx2 9.6e-8,
 *                           q8 avx512 1.0e-7, bf16 avx2/avx512 1.9e-7,
 *                           bf16 GEMM 2.3e-7, blas 1.7e-7; split views
 *                           1.5e-7, experts 1.0e-7
 * KERN_REL_TOL = 4e-6 is 20x the worst seen (leaves room for other BLAS
 * builds and CPUs) yet below what a defect costs: a 4-bit code off by one
 * moves a result by s·|x_j| ≈ S/(15·K), 1e-4·S at K = 640 (25x the
 * tolerance); 8-bit codes are finer (S/(255·K)), so there a defect is caught
 * once it touches a few codes of a row, as any decoding defect does. Checked
 * once with mutated copies of the kernels/ sources linked into this test:
 * the 4-bit mask 15 -> 7 (AVX2 and AVX-512), a skipped last 8-lane block or
 * last tail element of the bf16 loops, bias·Σx scaled by 1.0001, the last
 * token of a TB block not written, one row of the sgemm tile not copied back,
 * pool_run dropping a task with 3 threads, the RoPE angle taken in float,
 * the GELU cubic constant 0.0447, eps added outside the rsqrt: every one
 * fails at least one test below.
 * KERN_ABS_TOL covers results that cancel to ~0 with tiny S (a 1-column bf16
 * row); it is far below any single weight contribution of this data. */
#include <criterion/criterion.h>
#include <criterion/logging.h>

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/bytes.h"
#include "core/cpu.h"
#include "core/dtype.h"
#include "quant/format.h"
#include "quant/ggml.h"
#include "quant/quant.h"
#include "kernels/arm/arm.h"
#include "kernels/x86/x86.h"
#include "tests/helpers.h"

#define KERN_REL_TOL 4e-6
#define KERN_ABS_TOL 1e-7

/* ------------------------------------------------------------------ random data */

static float *rand_vec(uint64_t *s, size_t n)
{
    float *v = malloc((n ? n : 1) * sizeof *v);
    cr_assert(v);
    for (size_t i = 0; i < n; i++)
        v[i] = th_rng_float(s);
    return v;
}

static float *nan_vec(size_t n)
{
    float *v = malloc((n ? n : 1) * sizeof *v);
    cr_assert(v);
    for (size_t i = 0; i < n; i++)
        v[i] = NAN;
    return v;
}

/* ------------------------------------------------------------------ test matrices */

/* A matrix [rows, cols] as stored, one byte off alignment, with the exact
 * value of every weight in float64 (wd) and the magnitude of the terms that
 * make it (mag: |s·q| + |b| for affine, |w| for float). */
struct tmat {
    struct wmat m;
    uint8_t *wraw, *sraw, *braw;
    double *wd, *mag;
};

static void tmat_free(struct tmat *t)
{
    free(t->wraw);
    free(t->sraw);
    free(t->braw);
    free(t->wd);
    free(t->mag);
    memset(t, 0, sizeof *t);
}

static size_t esize(enum dtype d)
{
    return dtype_table[d].bits / 8;
}

/* MLX affine weights: random floats, rows scaled by 2^(r%5 - 2), quantized
 * row by row with quant_affine_row; scales and biases in sdt. */
static void make_quant(struct tmat *t, int64_t rows, int64_t cols, int bits, int gs, enum dtype sdt, uint64_t seed)
{
    memset(t, 0, sizeof *t);
    uint64_t s = seed;
    size_t words = quant_row_words((size_t)cols, bits), ng = (size_t)(cols / gs), ss = esize(sdt);
    struct wmat *m = &t->m;
    m->quantized = true;
    m->dtype = sdt;
    m->bits = bits;
    m->gs = gs;
    m->rows = rows;
    m->cols = cols;
    m->row_bytes = m->row_stride = words * 4;
    m->srow_bytes = ng * ss;
    m->expert_bytes = (size_t)rows * m->row_bytes;
    m->expert_sbytes = (size_t)rows * m->srow_bytes;
    t->wraw = malloc((size_t)rows * m->row_bytes + 1);
    t->sraw = malloc((size_t)rows * m->srow_bytes + 1);
    t->braw = malloc((size_t)rows * m->srow_bytes + 1);
    t->wd = malloc((size_t)(rows * cols) * sizeof *t->wd);
    t->mag = malloc((size_t)(rows * cols) * sizeof *t->mag);
    float *row = malloc((size_t)cols * sizeof *row);
    uint32_t *wbuf = malloc(words * sizeof *wbuf);
    cr_assert(t->wraw && t->sraw && t->braw && t->wd && t->mag && row && wbuf);
    m->w = t->wraw + 1;
    m->s = t->sraw + 1;
    m->b = t->braw + 1;
    for (int64_t r = 0; r < rows; r++) {
        float mul = ldexpf(1.0f, (int)(r % 5) - 2);
        for (int64_t j = 0; j < cols; j++)
            row[j] = th_rng_float(&s) * mul;
        uint8_t *wr = t->wraw + 1 + (size_t)r * m->row_bytes;
        uint8_t *sr = t->sraw + 1 + (size_t)r * m->srow_bytes, *br = t->braw + 1 + (size_t)r * m->srow_bytes;
        quant_affine_row(row, (size_t)cols, gs, bits, sdt, wbuf, sr, br);
        for (size_t k = 0; k < words; k++)
            for (int b = 0; b < 4; b++)
                wr[4 * k + (size_t)b] = (uint8_t)(wbuf[k] >> (8 * b));
        for (int64_t j = 0; j < cols; j++) {
            float sc, bi;
            dtype_to_f32(sdt, sr + (size_t)(j / gs) * ss, &sc, 1);
            dtype_to_f32(sdt, br + (size_t)(j / gs) * ss, &bi, 1);
            double q = (double)quant_code_at(wr, (size_t)j, bits);
            t->wd[r * cols + j] = (double)sc * q + (double)bi;
            t->mag[r * cols + j] = fabs((double)sc * q) + fabs((double)bi);
        }
    }
    free(row);
    free(wbuf);
}

/* An MX-quantized matrix (mxfp4, nvfp4, mxfp8) from random bf16 values,
 * quantized as MLX does; its exact values are code value × scale. */
static void make_mx(struct tmat *t, int64_t rows, int64_t cols, enum qmode mode, uint64_t seed)
{
    memset(t, 0, sizeof *t);
    int gs, bits;
    qmode_defaults(mode, &gs, &bits);
    uint64_t s = seed;
    size_t words = quant_row_words((size_t)cols, bits), ng = (size_t)(cols / gs);
    struct wmat *m = &t->m;
    *m = (struct wmat){.quantized = true, .mode = mode, .dtype = DT_U8, .bits = bits, .gs = gs, .rows = rows,
                       .cols = cols, .row_bytes = words * 4, .row_stride = words * 4, .srow_bytes = ng};
    m->expert_bytes = (size_t)rows * m->row_bytes;
    m->expert_sbytes = (size_t)rows * m->srow_bytes;
    t->wraw = malloc((size_t)rows * m->row_bytes + 1);
    t->sraw = malloc((size_t)rows * m->srow_bytes + 1);
    t->wd = malloc((size_t)(rows * cols) * sizeof *t->wd);
    t->mag = malloc((size_t)(rows * cols) * sizeof *t->mag);
    float *row = malloc((size_t)cols * sizeof *row);
    uint32_t *wbuf = malloc(words * sizeof *wbuf);
    cr_assert(t->wraw && t->sraw && t->wd && t->mag && row && wbuf);
    m->w = t->wraw + 1;
    m->s = t->sraw + 1;
    for (int64_t r = 0; r < rows; r++) {
        float mul = ldexpf(1.0f, (int)(r % 5) - 2);
        for (int64_t j = 0; j < cols; j++)
            row[j] = bf16_to_f32(f32_to_bf16(th_rng_float(&s) * mul));
        uint8_t *wr = t->wraw + 1 + (size_t)r * m->row_bytes, *sr = t->sraw + 1 + (size_t)r * m->srow_bytes;
        cr_assert_eq(quant_mx_row(mode, DT_BF16, row, (size_t)cols, wbuf, sr), -1);
        for (size_t k = 0; k < words; k++)
            for (int b = 0; b < 4; b++)
                wr[4 * k + (size_t)b] = (uint8_t)(wbuf[k] >> (8 * b));
        for (int64_t j = 0; j < cols; j++) {
            double v = (double)mx_code_value(mode, quant_code_at(wr, (size_t)j, bits)) *
                       (double)mx_scale_value(mode, sr[j / gs]);
            t->wd[r * cols + j] = v;
            t->mag[r * cols + j] = fabs(v);
        }
    }
    free(row);
    free(wbuf);
}

/* The fused ggml types (kernels/ggml.c) and where their f16 scale fields sit
 * (d, then m or dmin, or -1). */
static const struct {
    enum qmode mode;
    int d_at, m_at;
} ggml_fused[] = {
    {QM_GGML_Q4_1, 0, 2}, {QM_GGML_Q5_0, 0, -1}, {QM_GGML_Q5_1, 0, 2}, {QM_GGML_Q4_K, 0, 2},
    {QM_GGML_Q5_K, 0, 2}, {QM_GGML_Q6_K, 208, -1}, {QM_GGML_IQ4_NL, 0, -1}, {QM_GGML_IQ4_XS, 0, -1},
};

/* ggml blocks of ggml_fused[k]: random bytes (every code, sub-block scale and
 * high bit), the f16 scales random finite values of either sign; the exact
 * values are quant/ggml's dequantization (ggml's bits: tests/test_ggml.c). */
static void make_ggml_fill(struct tmat *t, int64_t rows, int64_t cols, size_t k, uint64_t seed, int fill)
{
    memset(t, 0, sizeof *t);
    struct ggml_qtype q;
    cr_assert(ggml_qtype_find(qformat_of(ggml_fused[k].mode)->ggml, &q));
    const int64_t nb = cols / q.block;
    struct wmat *m = &t->m;
    *m = (struct wmat){.quantized = true, .mode = ggml_fused[k].mode, .dtype = DT_U8, .bits = 8, .gs = (int)q.block,
                       .rows = rows, .cols = cols, .row_bytes = (size_t)nb * q.bytes, .row_stride = (size_t)nb * q.bytes};
    m->expert_bytes = (size_t)rows * m->row_bytes;
    t->wraw = malloc((size_t)rows * m->row_bytes + 1);
    t->wd = malloc((size_t)(rows * cols) * sizeof *t->wd);
    t->mag = malloc((size_t)(rows * cols) * sizeof *t->mag);
    float *row = malloc((size_t)cols * sizeof *row);
    cr_assert(t->wraw && t->wd && t->mag && row);
    m->w = t->wraw + 1; /* unaligned, as in a mapped file */
    uint64_t s = seed;
    for (int64_t r = 0; r < rows; r++) {
        uint8_t *wr = t->wraw + 1 + (size_t)r * m->row_bytes;
        for (size_t i = 0; i < m->row_bytes; i++)
            wr[i] = fill < 0 ? (uint8_t)(th_rng_next(&s) >> 56) : (uint8_t)fill;
        for (int64_t b = 0; b < nb; b++) {
            uint8_t *blk = wr + (size_t)b * q.bytes;
            wr_u16le(blk + ggml_fused[k].d_at, f32_to_f16(th_rng_float(&s) * 0.01f));
            if (ggml_fused[k].m_at >= 0)
                wr_u16le(blk + ggml_fused[k].m_at, f32_to_f16(th_rng_float(&s) * 0.1f));
        }
        q.dequant(wr, row, (size_t)cols);
        for (int64_t j = 0; j < cols; j++) {
            t->wd[r * cols + j] = row[j];
            t->mag[r * cols + j] = fabs((double)row[j]);
        }
    }
    free(row);
}

/* ggml blocks of random bytes, f16 d (and m) in range. */
static void make_ggml(struct tmat *t, int64_t rows, int64_t cols, size_t k, uint64_t seed)
{
    make_ggml_fill(t, rows, cols, k, seed, -1);
}

/* Float weights (F32 / F16 / BF16) from random floats. */
static void make_float(struct tmat *t, int64_t rows, int64_t cols, enum dtype dt, uint64_t seed)
{
    memset(t, 0, sizeof *t);
    uint64_t s = seed;
    struct wmat *m = &t->m;
    m->dtype = dt;
    m->rows = rows;
    m->cols = cols;
    m->row_bytes = m->row_stride = (size_t)cols * esize(dt);
    m->expert_bytes = (size_t)rows * m->row_bytes;
    t->wraw = malloc((size_t)rows * m->row_bytes + 1);
    t->wd = malloc((size_t)(rows * cols) * sizeof *t->wd);
    t->mag = malloc((size_t)(rows * cols) * sizeof *t->mag);
    cr_assert(t->wraw && t->wd && t->mag);
    m->w = t->wraw + 1;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < cols; j++) {
            float v = th_rng_float(&s) * ldexpf(1.0f, (int)(r % 5) - 2), back;
            uint8_t *p = t->wraw + 1 + (size_t)r * m->row_bytes + (size_t)j * esize(dt);
            dtype_from_f32(dt, &v, p, 1);
            dtype_to_f32(dt, p, &back, 1);
            t->wd[r * cols + j] = (double)back;
            t->mag[r * cols + j] = fabs((double)back);
        }
}

/* Exact products: truth[t, r] = Σ_j x[t, j]·wd[r, j] and mag[t, r] =
 * Σ_j |x[t, j]|·mag[r, j] in float64, for weights wd/mag with row pitch
 * `pitch` (in elements), starting at column c0 of row r0. */
static void exact(const double *wd, const double *wmag, int64_t pitch, int64_t r0, int64_t c0, const float *x,
                  int64_t n, int64_t rows, int64_t cols, double *truth, double *mag)
{
    for (int64_t t = 0; t < n; t++)
        for (int64_t r = 0; r < rows; r++) {
            double acc = 0.0, am = 0.0;
            for (int64_t j = 0; j < cols; j++) {
                size_t k = (size_t)((r0 + r) * pitch + c0 + j);
                acc += (double)x[t * cols + j] * wd[k];
                am += fabs((double)x[t * cols + j]) * wmag[k];
            }
            truth[t * rows + r] = acc;
            mag[t * rows + r] = am;
        }
}

/* ------------------------------------------------------------------ comparisons */

/* Largest |a - b| / S seen per category, for the log (the numbers quoted in
 * the header comment). */
static double worst_ratio, worst_ref_ratio;

static void note_ratio(double *worst, double d, double mag)
{
    if (mag > 0 && d / mag > *worst)
        *worst = d / mag;
}

static bool within(double d, double mag)
{
    return d <= KERN_REL_TOL * mag + KERN_ABS_TOL; /* false for NaN */
}

/* got vs want on rows [row0, row1) of y[n, rows], with magnitudes mag; every
 * other row of got must still be NaN. */
static void assert_close(const char *what, const float *got, const float *want, const double *mag, int64_t n,
                         int64_t rows, int64_t row0, int64_t row1)
{
    for (int64_t t = 0; t < n; t++)
        for (int64_t r = 0; r < rows; r++) {
            size_t k = (size_t)(t * rows + r);
            if (r < row0 || r >= row1) {
                cr_assert(isnan(got[k]), "%s: y[%lld, %lld] = %g written outside rows [%lld, %lld)", what,
                          (long long)t, (long long)r, (double)got[k], (long long)row0, (long long)row1);
                continue;
            }
            double d = fabs((double)got[k] - (double)want[k]);
            note_ratio(&worst_ratio, d, mag[k]);
            cr_assert(within(d, mag[k]), "%s: y[%lld, %lld] = %.9g, reference %.9g (|d| %.3g > %.3g)", what,
                      (long long)t, (long long)r, (double)got[k], (double)want[k], d,
                      KERN_REL_TOL * mag[k] + KERN_ABS_TOL);
        }
}

static void assert_close_exact(const char *what, const float *got, const double *truth, const double *mag, int64_t n,
                               int64_t rows)
{
    for (int64_t k = 0; k < n * rows; k++) {
        double d = fabs((double)got[k] - truth[k]);
        note_ratio(&worst_ref_ratio, d, mag[k]);
        cr_assert(within(d, mag[k]), "%s: y[%lld] = %.9g, float64 %.12g (|d| %.3g)", what, (long long)k,
                  (double)got[k], truth[k], d);
    }
}

/* ------------------------------------------------------------------ the paths */

enum wkind { WK_Q4, WK_Q8, WK_BF16, WK_MX, WK_GGML, WK_OTHER, WK_ANY }; /* WK_OTHER: no fused kernel */

struct path {
    const char *name;
    matmul_fn fn;
    enum wkind kind;
    int need;       /* a CPU feature (enum cpu_feature), NEED_NONE or NEED_BLAS */
    matmul_fn def;  /* the definition it must equal bit for bit, or NULL (sgemm) */
    bool many;      /* a GEMM: also checked on 37 tokens (panels, register blocks and their tails) */
};
enum { NEED_NONE = -1, NEED_BLAS = -2 };

static bool have_blas(void)
{
    struct kern_table t;
    kern_init(&t, KERN_BLAS);
    bool on = t.blas;
    kern_free(&t);
    return on;
}

/* The input of a fused kernel, every part in order. */
static void prepare_input(const struct wmat *w, const float *x, int64_t n, bool gemm, void *buf, struct kern_qinput *in)
{
    for (int64_t part = 0, parts = kern_qinput_layout(w, n, gemm, buf, in); part < parts; part++)
        kern_qinput_part(w, x, n, gemm, buf, part);
}

/* The fused kernels and sgemm as matmul_fn (their input prepared, or their
 * scratch made, for the call). */
static void qdot_alone(qdot_fn qdot, const struct wmat *w, const float *x, int64_t n, float *y, int64_t r0, int64_t r1)
{
    struct kern_qinput in;
    void *buf = aligned_alloc(64, (kern_qinput_bytes(w, n) + 63) / 64 * 64);
    cr_assert(buf);
    prepare_input(w, x, n, false, buf, &in);
    qdot(w, &in, n, y, r0, r1);
    free(buf);
}

static void kern_matvec_q_def(const struct wmat *w, const float *x, int64_t n, float *y, int64_t r0, int64_t r1)
{
    qdot_alone(kern_qdot_ref, w, x, n, y, r0, r1);
}

#if GP_X86 || GP_ARM64
static void qgemm_alone(qgemm_fn fn, const struct wmat *w, const float *x, int64_t n, float *y, int64_t r0, int64_t r1)
{
    struct kern_qinput in;
    void *buf = aligned_alloc(64, (kern_qinput_bytes(w, n) + 63) / 64 * 64);
    void *ws = aligned_alloc(64, (kern_qgemm_ws_bytes(w, r1 - r0, n) + 63) / 64 * 64);
    cr_assert(buf && ws);
    prepare_input(w, x, n, true, buf, &in);
    fn(w, &in, n, y, r0, r1, ws);
    free(buf);
    free(ws);
}

/* A blocked GEMM over the input as it is (bf16gemm, refgemm) with its workspace of `bytes`. */
static void gemm_alone(gemm_fn fn, size_t (*bytes)(const struct wmat *, int64_t, int64_t), const struct wmat *w,
                       const float *x, int64_t n, float *y, int64_t r0, int64_t r1)
{
    void *ws = aligned_alloc(64, (bytes(w, r1 - r0, n) + 63) / 64 * 64);
    cr_assert(ws);
    fn(w, x, n, y, r0, r1, ws);
    free(ws);
}
#endif

#if GP_X86

static void kern_matvec_q_avx2(const struct wmat *w, const float *x, int64_t n, float *y, int64_t r0, int64_t r1)
{
    qdot_alone(kern_qdot_avx2, w, x, n, y, r0, r1);
}

static void kern_matvec_q_avx512(const struct wmat *w, const float *x, int64_t n, float *y, int64_t r0, int64_t r1)
{
    qdot_alone(kern_qdot_avx512, w, x, n, y, r0, r1);
}

static void kern_matmul_q_gemm_avx512(const struct wmat *w, const float *x, int64_t n, float *y, int64_t r0, int64_t r1)
{
    qgemm_alone(kern_qgemm_avx512, w, x, n, y, r0, r1);
}

static void kern_matmul_q_gemm_avx2(const struct wmat *w, const float *x, int64_t n, float *y, int64_t r0, int64_t r1)
{
    qgemm_alone(kern_qgemm_avx2, w, x, n, y, r0, r1);
}

static void kern_matmul_bf16_gemm_avx512(const struct wmat *w, const float *x, int64_t n, float *y, int64_t r0,
                                         int64_t r1)
{
    gemm_alone(kern_bf16gemm_avx512, kern_bf16gemm_ws_bytes, w, x, n, y, r0, r1);
}

static void kern_matmul_bf16_gemm_avx2(const struct wmat *w, const float *x, int64_t n, float *y, int64_t r0,
                                       int64_t r1)
{
    gemm_alone(kern_bf16gemm_avx2, kern_bf16gemm_ws_bytes, w, x, n, y, r0, r1);
}

static void kern_matmul_ref_gemm_avx512(const struct wmat *w, const float *x, int64_t n, float *y, int64_t r0,
                                        int64_t r1)
{
    gemm_alone(kern_refgemm_avx512, kern_refgemm_ws_bytes, w, x, n, y, r0, r1);
}

static void kern_matmul_ref_gemm_avx2(const struct wmat *w, const float *x, int64_t n, float *y, int64_t r0,
                                      int64_t r1)
{
    gemm_alone(kern_refgemm_avx2, kern_refgemm_ws_bytes, w, x, n, y, r0, r1);
}
#endif
#if GP_ARM64
static void kern_matvec_q_neon(const struct wmat *w, const float *x, int64_t n, float *y, int64_t r0, int64_t r1)
{
    qdot_alone(kern_qdot_neon, w, x, n, y, r0, r1);
}

static void kern_matmul_q_gemm_neon(const struct wmat *w, const float *x, int64_t n, float *y, int64_t r0, int64_t r1)
{
    qgemm_alone(kern_qgemm_neon, w, x, n, y, r0, r1);
}

static void kern_matmul_ref_gemm_neon(const struct wmat *w, const float *x, int64_t n, float *y, int64_t r0,
                                      int64_t r1)
{
    gemm_alone(kern_refgemm_neon, kern_refgemm_ws_bytes, w, x, n, y, r0, r1);
}

static void kern_matmul_bf16_gemm_neon(const struct wmat *w, const float *x, int64_t n, float *y, int64_t r0,
                                       int64_t r1)
{
    gemm_alone(kern_bf16gemm_neon, kern_bf16gemm_ws_bytes, w, x, n, y, r0, r1);
}
#endif

static void kern_matmul_blas(const struct wmat *w, const float *x, int64_t n, float *y, int64_t r0, int64_t r1)
{
    struct kern_ws ws = {0};
    kern_matmul_blas_ws(w, x, n, y, r0, r1, &ws);
    free(ws.buf);
}

static const struct path paths[] = {
    {"q4_def", kern_matvec_q_def, WK_Q4, NEED_NONE, NULL, false},
    {"q8_def", kern_matvec_q_def, WK_Q8, NEED_NONE, NULL, false},
    {"bf16_def", kern_matvec_bf16_ref, WK_BF16, NEED_NONE, NULL, false},
    {"mx_def", kern_matvec_q_def, WK_MX, NEED_NONE, NULL, false},
    {"ggml_def", kern_matvec_q_def, WK_GGML, NEED_NONE, NULL, false},
#if GP_X86
    {"q4_avx2", kern_matvec_q_avx2, WK_Q4, CPU_AVX2, kern_matvec_q_def, false},
    {"q8_avx2", kern_matvec_q_avx2, WK_Q8, CPU_AVX2, kern_matvec_q_def, false},
    {"bf16_avx2", kern_matvec_bf16_avx2, WK_BF16, CPU_AVX2, kern_matvec_bf16_ref, false},
    {"q4_avx512", kern_matvec_q_avx512, WK_Q4, CPU_AVX512, kern_matvec_q_def, false},
    {"q8_avx512", kern_matvec_q_avx512, WK_Q8, CPU_AVX512, kern_matvec_q_def, false},
    {"bf16_avx512", kern_matvec_bf16_avx512, WK_BF16, CPU_AVX512, kern_matvec_bf16_ref, false},
    {"mx_avx2", kern_matvec_q_avx2, WK_MX, CPU_AVX2, kern_matvec_q_def, false},
    {"mx_avx512", kern_matvec_q_avx512, WK_MX, CPU_AVX512, kern_matvec_q_def, false},
    {"ggml_avx2", kern_matvec_q_avx2, WK_GGML, CPU_AVX2, kern_matvec_q_def, false},
    {"ggml_avx512", kern_matvec_q_avx512, WK_GGML, CPU_AVX512, kern_matvec_q_def, false},
    {"q4_gemm_avx2", kern_matmul_q_gemm_avx2, WK_Q4, CPU_AVX2, kern_matvec_q_def, true},
    {"q8_gemm_avx2", kern_matmul_q_gemm_avx2, WK_Q8, CPU_AVX2, kern_matvec_q_def, true},
    {"q4_gemm_avx512", kern_matmul_q_gemm_avx512, WK_Q4, CPU_AVX512, kern_matvec_q_def, true},
    {"q8_gemm_avx512", kern_matmul_q_gemm_avx512, WK_Q8, CPU_AVX512, kern_matvec_q_def, true},
    {"mx_gemm_avx2", kern_matmul_q_gemm_avx2, WK_MX, CPU_AVX2, kern_matvec_q_def, true},
    {"mx_gemm_avx512", kern_matmul_q_gemm_avx512, WK_MX, CPU_AVX512, kern_matvec_q_def, true},
    {"bf16_gemm_avx2", kern_matmul_bf16_gemm_avx2, WK_BF16, CPU_AVX2, kern_matvec_bf16_ref, true},
    {"bf16_gemm_avx512", kern_matmul_bf16_gemm_avx512, WK_BF16, CPU_AVX512, kern_matvec_bf16_ref, true},
    {"ref_gemm_avx2", kern_matmul_ref_gemm_avx2, WK_OTHER, CPU_AVX2, kern_matmul_ref, true},
    {"ref_gemm_avx512", kern_matmul_ref_gemm_avx512, WK_OTHER, CPU_AVX512, kern_matmul_ref, true},
#endif
#if GP_ARM64
    {"q4_neon", kern_matvec_q_neon, WK_Q4, CPU_NEON, kern_matvec_q_def, false},
    {"q8_neon", kern_matvec_q_neon, WK_Q8, CPU_NEON, kern_matvec_q_def, false},
    {"bf16_neon", kern_matvec_bf16_neon, WK_BF16, CPU_NEON, kern_matvec_bf16_ref, false},
    {"mx_neon", kern_matvec_q_neon, WK_MX, CPU_NEON, kern_matvec_q_def, false},
    {"ggml_neon", kern_matvec_q_neon, WK_GGML, CPU_NEON, kern_matvec_q_def, false},
    {"q4_gemm_neon", kern_matmul_q_gemm_neon, WK_Q4, CPU_NEON, kern_matvec_q_def, true},
    {"q8_gemm_neon", kern_matmul_q_gemm_neon, WK_Q8, CPU_NEON, kern_matvec_q_def, true},
    {"mx_gemm_neon", kern_matmul_q_gemm_neon, WK_MX, CPU_NEON, kern_matvec_q_def, true},
    {"bf16_gemm_neon", kern_matmul_bf16_gemm_neon, WK_BF16, CPU_NEON, kern_matvec_bf16_ref, true},
    {"ref_gemm_neon", kern_matmul_ref_gemm_neon, WK_OTHER, CPU_NEON, kern_matmul_ref, true},
#endif
    {"blas", kern_matmul_blas, WK_ANY, NEED_BLAS, NULL, false},
};

/* Whether path p computes matrix w (the fused paths: their kind of weights). */
static bool path_serves(const struct path *p, const struct wmat *w)
{
    bool affine = w->quantized && w->mode == QM_AFFINE;
    switch (p->kind) {
    case WK_Q4: return affine && w->bits == 4;
    case WK_Q8: return affine && w->bits == 8;
    case WK_BF16: return !w->quantized && w->dtype == DT_BF16;
    case WK_MX: return w->quantized && w->mode != QM_AFFINE && !qformat_of(w->mode)->ggml;
    case WK_GGML: return w->quantized && kern_gtype_of(w->mode);
    case WK_OTHER: return affine ? w->bits != 4 && w->bits != 8 : !w->quantized && w->dtype != DT_BF16;
    default: return true;
    }
}

static bool path_available(const struct path *p)
{
    return p->need == NEED_NONE || (p->need == NEED_BLAS ? have_blas() : cpu_has((enum cpu_feature)p->need));
}

static const struct path *find_path(const char *name)
{
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++)
        if (!strcmp(paths[i].name, name))
            return &paths[i];
    cr_assert_fail("no path %s", name);
    return NULL;
}

static void skip_unless(const struct path *p)
{
    if (!path_available(p))
        cr_skip_test("%s: not supported on this machine / build", p->name);
}

/* Runs path p and the reference on view w (exact values wd/mag with the given
 * pitch/origin), for n tokens: all rows, then a sub-range of rows. */
static void check_view(const struct path *p, const struct wmat *w, const double *wd, const double *wmag, int64_t pitch,
                       int64_t r0, int64_t c0, int64_t n, uint64_t seed, const char *what)
{
    int64_t rows = w->rows, cols = w->cols;
    size_t ny = (size_t)(n * rows);
    uint64_t s = seed;
    float *x = rand_vec(&s, (size_t)(n * cols));
    float *ref = nan_vec(ny), *got = nan_vec(ny);
    double *truth = malloc(ny * sizeof *truth), *mag = malloc(ny * sizeof *mag);
    cr_assert(truth && mag);
    exact(wd, wmag, pitch, r0, c0, x, n, rows, cols, truth, mag);
    char msg[256];
    snprintf(msg, sizeof msg, "%s ref %s n=%lld", what, p ? p->name : "", (long long)n);
    kern_matmul_ref(w, x, n, ref, 0, rows);
    assert_close_exact(msg, ref, truth, mag, n, rows);
    if (p) {
        snprintf(msg, sizeof msg, "%s %s n=%lld", what, p->name, (long long)n);
        p->fn(w, x, n, got, 0, rows);
        assert_close(msg, got, ref, mag, n, rows, 0, rows);
        if (p->def) { /* and the bits of its definition */
            float *want = nan_vec(ny);
            p->def(w, x, n, want, 0, rows);
            cr_assert_eq(memcmp(got, want, ny * sizeof *got), 0, "%s: not the definition's bits", msg);
            free(want);
        }
        if (rows >= 3) { /* a sub-range: rows [1, rows-1) only */
            for (size_t k = 0; k < ny; k++)
                got[k] = NAN;
            snprintf(msg, sizeof msg, "%s %s rows [1, %lld) n=%lld", what, p->name, (long long)rows - 1, (long long)n);
            p->fn(w, x, n, got, 1, rows - 1);
            assert_close(msg, got, ref, mag, n, rows, 1, rows - 1);
        }
    }
    free(x);
    free(ref);
    free(got);
    free(truth);
    free(mag);
}

static void check_tmat(const struct path *p, const struct tmat *t, int64_t n, uint64_t seed, const char *what)
{
    check_view(p, &t->m, t->wd, t->mag, t->m.cols, 0, 0, n, seed, what);
}

static const int64_t rows_grid[] = {1, 3, 7, 65, 130};
static const int gs_grid[] = {32, 64, 128};
static const enum dtype sdt_grid[] = {DT_BF16, DT_F32, DT_F16};
static const int64_t bf16_cols[] = {1, 7, 33, 257, 16, 64, 1079, 1087}; /* 1079: two GEMM chunks, 32, then 16 + 7; 1087: 31 past them */
#define LEN(a) (sizeof(a) / sizeof((a)[0]))

/* Every (gs, cols, rows, scales dtype, n) of the grid for affine `bits`. */
static void quant_grid(const struct path *p, int bits)
{
    uint64_t seed = 1;
    for (size_t g = 0; g < LEN(gs_grid); g++) {
        int gs = gs_grid[g];
        /* 293 groups: more than the SIMD kernels convert at once (256), ending in a partial block */
        int64_t cols_grid[] = {gs, 3 * gs, 5 * gs, 384, 293 * gs};
        for (size_t c = 0; c < LEN(cols_grid); c++)
            for (size_t r = 0; r < (c == LEN(cols_grid) - 1 ? 2 : LEN(rows_grid)); r++) /* long rows: 1 and 3 */
                for (size_t d = 0; d < LEN(sdt_grid); d++) {
                    struct tmat t;
                    make_quant(&t, rows_grid[r], cols_grid[c], bits, gs, sdt_grid[d], seed++);
                    char what[96];
                    snprintf(what, sizeof what, "q%d g%d [%lld, %lld] %s", bits, gs, (long long)rows_grid[r],
                             (long long)cols_grid[c], dtype_name(sdt_grid[d]));
                    check_tmat(p, &t, 1, seed++, what);
                    check_tmat(p, &t, 5, seed++, what);
                    if (p && p->many)
                        check_tmat(p, &t, 37, seed++, what);
                    tmat_free(&t);
                }
    }
}

/* Every MX mode on columns of 1, 3 and 5 groups, 384, and 300 groups (past
 * the 256 a kernel converts at once, ending in a partial block). */
static void mx_grid(const struct path *p)
{
    uint64_t seed = 3000;
    static const enum qmode modes[] = {QM_MXFP4, QM_NVFP4, QM_MXFP8};
    for (size_t mi = 0; mi < LEN(modes); mi++) {
        int gs, bits;
        qmode_defaults(modes[mi], &gs, &bits);
        int64_t cols_grid[] = {gs, 3 * gs, 5 * gs, 384, 300 * gs};
        for (size_t c = 0; c < LEN(cols_grid); c++)
            for (size_t r = 0; r < (c == LEN(cols_grid) - 1 ? 2 : LEN(rows_grid)); r++) {
                struct tmat t;
                make_mx(&t, rows_grid[r], cols_grid[c], modes[mi], seed++);
                char what[96];
                snprintf(what, sizeof what, "%s [%lld, %lld]", qmode_name(modes[mi]), (long long)rows_grid[r],
                         (long long)cols_grid[c]);
                check_tmat(p, &t, 1, seed++, what);
                check_tmat(p, &t, 5, seed++, what);
                if (p && p->many)
                    check_tmat(p, &t, 37, seed++, what);
                tmat_free(&t);
            }
    }
}

/* Every fused ggml type on rows of 1, 3 and 9 blocks (and 2,304 columns:
 * E2B's 9 K-blocks), 1 and 5 tokens. */
static void ggml_grid(const struct path *p)
{
    uint64_t seed = 5000;
    for (size_t k = 0; k < LEN(ggml_fused); k++) {
        struct ggml_qtype q;
        cr_assert(ggml_qtype_find(qformat_of(ggml_fused[k].mode)->ggml, &q));
        const int64_t cols_grid[] = {q.block, 3 * q.block, 9 * q.block, 2304};
        for (size_t c = 0; c < LEN(cols_grid); c++)
            for (size_t r = 0; r < LEN(rows_grid); r++) {
                struct tmat t;
                make_ggml(&t, rows_grid[r], cols_grid[c], k, seed++);
                char what[96];
                snprintf(what, sizeof what, "%s [%lld, %lld]", q.name, (long long)rows_grid[r], (long long)cols_grid[c]);
                check_tmat(p, &t, 1, seed++, what);
                check_tmat(p, &t, 5, seed++, what);
                tmat_free(&t);
            }
    }
}

static void float_grid(const struct path *p, enum dtype dt)
{
    uint64_t seed = 1000;
    for (size_t c = 0; c < LEN(bf16_cols); c++)
        for (size_t r = 0; r < LEN(rows_grid); r++) {
            struct tmat t;
            make_float(&t, rows_grid[r], bf16_cols[c], dt, seed++);
            char what[96];
            snprintf(what, sizeof what, "%s [%lld, %lld]", dtype_name(dt), (long long)rows_grid[r],
                     (long long)bf16_cols[c]);
            check_tmat(p, &t, 1, seed++, what);
            check_tmat(p, &t, 5, seed++, what);
            /* the bf16 GEMMs' last panel of 5-8 tokens (pieces of 1-4); the AVX2 refgemm's last 1-4 of 6 */
            for (int64_t n = 37; p && p->many && n <= 40; n++)
                check_tmat(p, &t, n, seed++, what);
            tmat_free(&t);
        }
}

static void run_path(const char *name)
{
    const struct path *p = find_path(name);
    skip_unless(p);
    worst_ratio = worst_ref_ratio = 0;
    switch (p->kind) {
    case WK_Q4: quant_grid(p, 4); break;
    case WK_Q8: quant_grid(p, 8); break;
    case WK_BF16: float_grid(p, DT_BF16); break;
    case WK_MX: mx_grid(p); break;
    case WK_GGML: ggml_grid(p); break;
    case WK_OTHER: /* under qemu (arm64) one width and one float type: the kernels take kern_row_f32's values */
        for (int bits = 2; bits <= 6; bits++)
            if (bits != 4 && (!GP_ARM64 || bits == 3))
                quant_grid(p, bits);
        float_grid(p, DT_F16);
        if (!GP_ARM64)
            float_grid(p, DT_F32);
        break;
    case WK_ANY:
        quant_grid(p, 4);
        quant_grid(p, 8);
        quant_grid(p, 3);
        float_grid(p, DT_BF16);
        float_grid(p, DT_F16);
        float_grid(p, DT_F32);
        mx_grid(p);
        break;
    }
    cr_log_info("%s: max |fast - ref| / S = %.3g, max |ref - f64| / S = %.3g", name, worst_ratio, worst_ref_ratio);
}

/* ------------------------------------------------------------------ reference */

Test(kernels, ref_affine_matches_float64)
{
    worst_ratio = worst_ref_ratio = 0;
    static const int bits[] = {2, 3, 4, 5, 6, 8};
    for (size_t b = 0; b < LEN(bits); b++)
        quant_grid(NULL, bits[b]);
    cr_log_info("ref affine: max |ref - f64| / S = %.3g", worst_ref_ratio);
}

Test(kernels, ref_float_matches_float64)
{
    worst_ratio = worst_ref_ratio = 0;
    float_grid(NULL, DT_BF16);
    float_grid(NULL, DT_F16);
    float_grid(NULL, DT_F32);
    cr_log_info("ref float: max |ref - f64| / S = %.3g", worst_ref_ratio);
}

/* Hand-made: a [2, 4] F32 matrix and two tokens; exact in float32. */
Test(kernels, ref_hand_values)
{
    const float w[8] = {1, 2, 3, 4, -1, 0.5f, 0, 2};
    const float x[8] = {1, 1, 1, 1, 2, -2, 0.25f, 1};
    struct wmat m = {.dtype = DT_F32, .w = (const uint8_t *)w, .rows = 2, .cols = 4, .row_bytes = 16, .row_stride = 16};
    float y[4] = {NAN, NAN, NAN, NAN};
    kern_matmul_ref(&m, x, 2, y, 0, 2);
    cr_assert_eq(y[0], 10.0f);  /* 1+2+3+4 */
    cr_assert_eq(y[1], 1.5f);   /* -1+0.5+0+2 */
    cr_assert_eq(y[2], 2.75f);  /* 2-4+0.75+4 */
    cr_assert_eq(y[3], -1.0f);  /* -2-1+0+2 */
    /* the same through an affine 4-bit g32 row: w = 0.5·q - 1 with q = j mod 16 */
    uint8_t codes[32];
    for (int j = 0; j < 32; j++)
        codes[j] = (uint8_t)(j % 16);
    uint32_t words[4];
    quant_pack_codes(codes, 32, 4, words);
    uint16_t sc = f32_to_bf16(0.5f), bi = f32_to_bf16(-1.0f);
    struct wmat q = {.quantized = true, .dtype = DT_BF16, .w = (const uint8_t *)words, .s = (const uint8_t *)&sc,
                     .b = (const uint8_t *)&bi, .bits = 4, .gs = 32, .rows = 1, .cols = 32, .row_bytes = 16,
                     .srow_bytes = 2, .row_stride = 16};
    float ones[32], y1 = NAN;
    for (int j = 0; j < 32; j++)
        ones[j] = 1.0f;
    kern_matmul_ref(&q, ones, 1, &y1, 0, 1);
    cr_assert_eq(y1, 88.0f); /* Σq = 2·120: 0.5·240 - 32 = 88 */
    for (size_t i = 0; i < LEN(paths); i++)
        if ((paths[i].kind == WK_ANY || paths[i].kind == WK_Q4) && path_available(&paths[i])) {
            float yf = NAN;
            paths[i].fn(&q, ones, 1, &yf, 0, 1);
            cr_assert_eq(yf, 88.0f, "%s: %g", paths[i].name, (double)yf);
        }
}

/* ------------------------------------------------------------------ fast paths vs reference */

Test(kernels, q4_def) { run_path("q4_def"); }
Test(kernels, q8_def) { run_path("q8_def"); }
Test(kernels, bf16_def) { run_path("bf16_def"); }
Test(kernels, mx_def) { run_path("mx_def"); }
Test(kernels, ggml_def) { run_path("ggml_def"); }
#if GP_X86
Test(kernels, q4_avx2) { run_path("q4_avx2"); }
Test(kernels, q8_avx2) { run_path("q8_avx2"); }
Test(kernels, bf16_avx2) { run_path("bf16_avx2"); }
Test(kernels, q4_avx512) { run_path("q4_avx512"); }
Test(kernels, q8_avx512) { run_path("q8_avx512"); }
Test(kernels, bf16_avx512) { run_path("bf16_avx512"); }
Test(kernels, mx_avx2) { run_path("mx_avx2"); }
Test(kernels, mx_avx512) { run_path("mx_avx512"); }
Test(kernels, ggml_avx2) { run_path("ggml_avx2"); }
Test(kernels, ggml_avx512) { run_path("ggml_avx512"); }
Test(kernels, q4_gemm_avx2) { run_path("q4_gemm_avx2"); }
Test(kernels, q8_gemm_avx2) { run_path("q8_gemm_avx2"); }
Test(kernels, q4_gemm_avx512) { run_path("q4_gemm_avx512"); }
Test(kernels, q8_gemm_avx512) { run_path("q8_gemm_avx512"); }
Test(kernels, mx_gemm_avx2) { run_path("mx_gemm_avx2"); }
Test(kernels, mx_gemm_avx512) { run_path("mx_gemm_avx512"); }
Test(kernels, bf16_gemm_avx2) { run_path("bf16_gemm_avx2"); }
Test(kernels, bf16_gemm_avx512) { run_path("bf16_gemm_avx512"); }
Test(kernels, ref_gemm_avx2) { run_path("ref_gemm_avx2"); }
Test(kernels, ref_gemm_avx512) { run_path("ref_gemm_avx512"); }
#endif
#if GP_ARM64
Test(kernels, q4_neon) { run_path("q4_neon"); }
Test(kernels, q8_neon) { run_path("q8_neon"); }
Test(kernels, bf16_neon) { run_path("bf16_neon"); }
Test(kernels, mx_neon) { run_path("mx_neon"); }
Test(kernels, ggml_neon) { run_path("ggml_neon"); }
Test(kernels, q4_gemm_neon) { run_path("q4_gemm_neon"); }
Test(kernels, q8_gemm_neon) { run_path("q8_gemm_neon"); }
Test(kernels, mx_gemm_neon) { run_path("mx_gemm_neon"); }
Test(kernels, bf16_gemm_neon) { run_path("bf16_gemm_neon"); }
Test(kernels, ref_gemm_neon) { run_path("ref_gemm_neon"); }
#endif
/* 25 s under qemu-user on an idle 2-core machine (tests/arm64.sh): room for a loaded one */
Test(kernels, blas, .timeout = TH_TIMEOUT(240)) { run_path("blas"); }

/* Runs every available path that serves w on a view (plus the reference). */
static void all_paths_on_view(const struct wmat *w, const double *wd, const double *mag, int64_t pitch, int64_t r0,
                              int64_t c0, uint64_t seed, const char *what)
{
    for (int64_t n = 1; n <= 5; n += 4) {
        check_view(NULL, w, wd, mag, pitch, r0, c0, n, seed + (uint64_t)n, what);
        for (size_t i = 0; i < LEN(paths); i++) {
            const struct path *p = &paths[i];
            if (path_serves(p, w) && path_available(p))
                check_view(p, w, wd, mag, pitch, r0, c0, n, seed + (uint64_t)n, what);
        }
    }
}

/* Reference output of a view must equal that of a contiguous copy bit for bit. */
static void assert_ref_equal(const struct wmat *a, const struct wmat *b, uint64_t seed, const char *what)
{
    uint64_t s = seed;
    int64_t n = 3;
    float *x = rand_vec(&s, (size_t)(n * a->cols));
    float *ya = nan_vec((size_t)(n * a->rows)), *yb = nan_vec((size_t)(n * b->rows));
    kern_matmul_ref(a, x, n, ya, 0, a->rows);
    kern_matmul_ref(b, x, n, yb, 0, b->rows);
    cr_assert_eq(memcmp(ya, yb, (size_t)(n * a->rows) * sizeof *ya), 0, "%s: view and copy differ", what);
    free(x);
    free(ya);
    free(yb);
}

/* One half of a [rows, 2·cols] matrix: row_stride = 2·row_bytes (and the
 * scales/biases pitch likewise), as a split view of a fused tensor. */
static struct wmat half_view(const struct tmat *full, int h)
{
    struct wmat v = full->m;
    v.cols = full->m.cols / 2;
    v.row_bytes = full->m.row_bytes / 2;
    v.row_stride = full->m.row_stride;
    v.w = full->m.w + (size_t)h * v.row_bytes;
    if (v.quantized) {
        size_t half_s = full->m.srow_bytes / 2;
        v.s = full->m.s + (size_t)h * half_s;
        v.b = full->m.b + (size_t)h * half_s;
        /* srow_bytes stays the full pitch: it is the stride between rows */
    }
    return v;
}

Test(kernels, split_half_view)
{
    worst_ratio = worst_ref_ratio = 0;
    struct {
        bool q;
        int bits, gs;
        enum dtype dt;
        int64_t rows, cols;
    } cases[] = {{true, 4, 32, DT_BF16, 65, 96}, {true, 8, 64, DT_F32, 7, 128}, {true, 4, 128, DT_F16, 3, 128},
                 {false, 0, 0, DT_BF16, 65, 33}, {false, 0, 0, DT_F32, 7, 20},   {false, 0, 0, DT_BF16, 130, 64}};
    for (size_t i = 0; i < LEN(cases); i++) {
        struct tmat full, half;
        uint64_t seed = 500 + 10 * i;
        if (cases[i].q)
            make_quant(&full, cases[i].rows, 2 * cases[i].cols, cases[i].bits, cases[i].gs, cases[i].dt, seed);
        else
            make_float(&full, cases[i].rows, 2 * cases[i].cols, cases[i].dt, seed);
        for (int h = 0; h < 2; h++) {
            struct wmat v = half_view(&full, h);
            cr_assert_gt(v.row_stride, v.row_bytes);
            char what[64];
            snprintf(what, sizeof what, "split half %d of case %zu", h, i);
            all_paths_on_view(&v, full.wd, full.mag, full.m.cols, 0, h * cases[i].cols, seed + 1, what);
            /* a contiguous copy of the half gives the same reference bits */
            memset(&half, 0, sizeof half);
            half.m = v;
            half.m.row_stride = v.row_bytes;
            half.wraw = malloc((size_t)v.rows * v.row_bytes);
            cr_assert(half.wraw);
            for (int64_t r = 0; r < v.rows; r++)
                memcpy(half.wraw + (size_t)r * v.row_bytes, v.w + (size_t)r * v.row_stride, v.row_bytes);
            half.m.w = half.wraw;
            if (v.quantized) {
                size_t sb = (size_t)(v.cols / v.gs) * esize(v.dtype);
                half.sraw = malloc((size_t)v.rows * sb);
                half.braw = malloc((size_t)v.rows * sb);
                cr_assert(half.sraw && half.braw);
                for (int64_t r = 0; r < v.rows; r++) {
                    memcpy(half.sraw + (size_t)r * sb, v.s + (size_t)r * v.srow_bytes, sb);
                    memcpy(half.braw + (size_t)r * sb, v.b + (size_t)r * v.srow_bytes, sb);
                }
                half.m.s = half.sraw;
                half.m.b = half.braw;
                half.m.srow_bytes = sb;
            }
            assert_ref_equal(&v, &half.m, seed + 2, what);
            tmat_free(&half);
        }
        tmat_free(&full);
    }
    cr_log_info("split views: max |fast - ref| / S = %.3g, |ref - f64| / S = %.3g", worst_ratio, worst_ref_ratio);
}

Test(kernels, expert_3d)
{
    worst_ratio = worst_ref_ratio = 0;
    const int64_t E = 3, rows = 65, cols = 128;
    /* MLX switch_glu layout: w [E, rows, cols·bits/32], scales/biases [E, rows, cols/gs] */
    for (int bits = 4; bits <= 8; bits += 4) {
        struct tmat all;
        make_quant(&all, E * rows, cols, bits, 32, DT_BF16, 900 + (uint64_t)bits);
        struct wmat w3 = all.m;
        w3.rows = rows;
        w3.expert_bytes = (size_t)rows * w3.row_bytes;
        w3.expert_sbytes = (size_t)rows * w3.srow_bytes;
        for (int64_t e = 0; e < E; e++) {
            struct wmat v = kern_wmat_expert(&w3, e);
            cr_assert_eq(v.w, all.m.w + (size_t)e * rows * all.m.row_bytes);
            cr_assert_eq(v.s, all.m.s + (size_t)e * rows * all.m.srow_bytes);
            cr_assert_eq(v.b, all.m.b + (size_t)e * rows * all.m.srow_bytes);
            char what[64];
            snprintf(what, sizeof what, "q%d expert %lld", bits, (long long)e);
            all_paths_on_view(&v, all.wd, all.mag, cols, e * rows, 0, 77 + (uint64_t)e, what);
        }
        tmat_free(&all);
    }
    /* HF fused gate_up [E, 2M, H] in BF16: the "up" half is rows M..2M-1 of
     * each expert, expert stride 2·M·H; the "gate" half rows 0..M-1. */
    const int64_t M = 7, H = 33;
    struct tmat f;
    make_float(&f, E * 2 * M, H, DT_BF16, 950);
    for (int half = 0; half < 2; half++) {
        struct wmat w3 = f.m;
        w3.rows = M;
        w3.w = f.m.w + (size_t)(half * M) * f.m.row_bytes;
        w3.expert_bytes = (size_t)(2 * M) * f.m.row_bytes;
        for (int64_t e = 0; e < E; e++) {
            struct wmat v = kern_wmat_expert(&w3, e);
            char what[64];
            snprintf(what, sizeof what, "gate_up half %d expert %lld", half, (long long)e);
            all_paths_on_view(&v, f.wd, f.mag, H, e * 2 * M + half * M, 0, 300 + (uint64_t)e, what);
        }
    }
    tmat_free(&f);
    cr_log_info("experts: max |fast - ref| / S = %.3g, |ref - f64| / S = %.3g", worst_ratio, worst_ref_ratio);
}

/* ------------------------------------------------------------------ dispatch and threads */

Test(kernels, init_tables)
{
    struct kern_table t;
    kern_init(&t, KERN_SCALAR);
    cr_assert_str_eq(t.name, "scalar");
    cr_assert(t.qdot == kern_qdot_ref && t.matvec_bf16 == kern_matvec_bf16_ref && !t.blas && !t.q8dot && !t.qgemm &&
              !t.bf16gemm && !t.refgemm);
    kern_free(&t);
    kern_init(&t, KERN_BEST);
#if GP_X86
    if (cpu_has(CPU_AVX512)) {
        cr_assert_str_eq(t.name, "avx512");
        cr_assert(t.qdot == kern_qdot_avx512 && t.qgemm == kern_qgemm_avx512 && t.matvec_bf16 == kern_matvec_bf16_avx512 &&
                  t.bf16gemm == kern_bf16gemm_avx512 && t.refgemm == kern_refgemm_avx512);
    } else if (cpu_has(CPU_AVX2)) {
        cr_assert_str_eq(t.name, "avx2");
        cr_assert(t.qdot == kern_qdot_avx2 && t.qgemm == kern_qgemm_avx2 &&
                  t.qgemm_modes == (1u << QM_AFFINE | 1u << QM_MXFP4 | 1u << QM_NVFP4 | 1u << QM_MXFP8) &&
                  t.bf16gemm == kern_bf16gemm_avx2 && t.refgemm == kern_refgemm_avx2 && t.matvec_bf16 == kern_matvec_bf16_avx2);
    } else {
        cr_assert_str_eq(t.name, "scalar");
    }
#elif GP_ARM64
    cr_assert_str_eq(t.name, "neon");
    cr_assert(t.qdot == kern_qdot_neon && t.qgemm == kern_qgemm_neon &&
              t.qgemm_modes == (1u << QM_AFFINE | 1u << QM_MXFP4 | 1u << QM_NVFP4 | 1u << QM_MXFP8) &&
              t.matvec_bf16 == kern_matvec_bf16_neon && t.bf16gemm == kern_bf16gemm_neon &&
              t.refgemm == kern_refgemm_neon);
#endif
    cr_assert(!t.blas, "KERN_BEST keeps the fused kernels for prefill too");
    struct kern_table tb;
    kern_init(&tb, KERN_BLAS); /* KERN_BEST plus sgemm when built with OpenBLAS */
    cr_assert_str_eq(tb.name, t.name);
    cr_assert(tb.qdot == t.qdot && tb.matvec_bf16 == t.matvec_bf16);
    cr_assert_eq(tb.blas, kern_blas_init(), "sgemm exactly when OpenBLAS loads");
    cr_assert(!tb.blas || tb.ws, "sgemm has its workers' scratch");
    kern_free(&tb);
    cr_assert(!tb.blas && !tb.ws && !tb.qgemm && !tb.bf16gemm && !tb.refgemm);
    cr_assert(!t.q8dot && !tb.q8dot, "int8 activations only when asked for");
    struct kern_table tq;
    kern_init(&tq, KERN_Q8); /* KERN_BEST plus the int8 dot, when the CPU has one */
    cr_assert(tq.qdot == t.qdot && tq.matvec_bf16 == t.matvec_bf16 && tq.dot == t.dot && !tq.blas);
    cr_assert_str_eq(tq.name, t.name);
    cr_assert_eq(tq.q8dot != NULL, kern_has_q8());
    cr_assert_eq(tq.q8name != NULL, kern_has_q8());
#if GP_X86
    q8dot_fn want = cpu_has(CPU_AMX_INT8)      ? kern_q8dot_amx
                    : cpu_has(CPU_AVX512_VNNI) ? kern_q8dot_avx512
                    : cpu_has(CPU_AVX_VNNI)  ? kern_q8dot_avxvnni
                    : cpu_has(CPU_AVX2)      ? kern_q8dot_avx2
                                             : NULL;
#elif KERN_NEON_DOTPROD
    q8dot_fn want = cpu_has(CPU_DOTPROD) ? kern_q8dot_neon : NULL;
#else
    q8dot_fn want = NULL;
#endif
    cr_assert(tq.q8dot == want, "the int8 kernels of the best ISA (%s)", tq.q8name ? tq.q8name : "none");
    kern_free(&t);
    kern_free(&tq);
}

/* The tables to run kern_matmul with: scalar, AVX2 only, AVX-512 only, best,
 * best + BLAS (sgemm for n > 1 when built). */
static size_t tables(struct kern_table *t, const char **label)
{
    size_t k = 0;
    label[k] = "KERN_SCALAR";
    kern_init(&t[k++], KERN_SCALAR);
#if GP_X86
    if (cpu_has(CPU_AVX2)) {
        label[k] = "AVX2 only";
        t[k++] = (struct kern_table){.name = "avx2", .qdot = kern_qdot_avx2, .matvec_bf16 = kern_matvec_bf16_avx2,
                                     .dot = kern_dot_avx2, .dots = kern_dots_avx2, .axpy = kern_axpy_avx2,
                                     .gelu_mul = kern_gelu_mul_avx2,
                                     .softcap = kern_softcap_avx2, .softmax = kern_softmax_avx2,
                                     .qgemm = kern_qgemm_avx2, .bf16gemm = kern_bf16gemm_avx2,
                                     .refgemm = kern_refgemm_avx2,
                                     .qgemm_modes = 1u << QM_AFFINE | 1u << QM_MXFP4 | 1u << QM_NVFP4 | 1u << QM_MXFP8,
                                     .ws = calloc(POOL_MAX_THREADS, sizeof(struct kern_ws)),
                                     .scratch = calloc(KERN_MANY, sizeof(struct kern_ws))};
    }
    if (cpu_has(CPU_AVX512)) {
        label[k] = "AVX-512 only";
        t[k++] = (struct kern_table){.name = "avx512", .qdot = kern_qdot_avx512, .qgemm = kern_qgemm_avx512,
                                     .qgemm_modes = 1u << QM_AFFINE | 1u << QM_MXFP4 | 1u << QM_NVFP4 | 1u << QM_MXFP8,
                                     .bf16gemm = kern_bf16gemm_avx512, .refgemm = kern_refgemm_avx512,
                                     .ws = calloc(POOL_MAX_THREADS, sizeof(struct kern_ws)),
                                     .matvec_bf16 = kern_matvec_bf16_avx512,
                                     .dot = kern_dot_avx512, .dots = kern_dots_avx512, .axpy = kern_axpy_avx512,
                                     .gelu_mul = kern_gelu_mul_avx512,
                                     .softcap = kern_softcap_avx512, .softmax = kern_softmax_avx512,
                                     .scratch = calloc(KERN_MANY, sizeof(struct kern_ws))};
    }
#endif
    label[k] = "KERN_BEST";
    kern_init(&t[k++], KERN_BEST);
    label[k] = "KERN_BLAS";
    kern_init(&t[k++], KERN_BLAS);
    return k;
}

/* The function kern_matmul should use for (table, w, n). */
static matmul_fn expected_fn(const struct kern_table *t, const struct wmat *w, int64_t n)
{
    if (n >= KERN_GEMM_MIN_TOKENS && t->blas)
        return kern_matmul_blas;
#if GP_X86
    if (n >= (w->mode == QM_AFFINE ? KERN_AGEMM_MIN_TOKENS : KERN_QGEMM_MIN_TOKENS) && t->qgemm == kern_qgemm_avx512 &&
        w->quantized && (w->bits == 4 || w->bits == 8))
        return kern_matmul_q_gemm_avx512;
    if (n >= (w->mode == QM_AFFINE ? KERN_AGEMM_MIN_TOKENS : KERN_QGEMM_MIN_TOKENS) && t->qgemm == kern_qgemm_avx2 &&
        w->quantized && (w->bits == 4 || w->bits == 8))
        return kern_matmul_q_gemm_avx2;
    if (n >= KERN_QGEMM_MIN_TOKENS && t->bf16gemm == kern_bf16gemm_avx512 && !w->quantized && w->dtype == DT_BF16)
        return kern_matmul_bf16_gemm_avx512;
    if (n >= KERN_QGEMM_MIN_TOKENS && t->bf16gemm == kern_bf16gemm_avx2 && !w->quantized && w->dtype == DT_BF16)
        return kern_matmul_bf16_gemm_avx2;
#elif GP_ARM64
    if (n >= (w->mode == QM_AFFINE ? KERN_AGEMM_MIN_TOKENS : KERN_QGEMM_MIN_TOKENS) && t->qgemm == kern_qgemm_neon &&
        w->quantized && (w->bits == 4 || w->bits == 8))
        return kern_matmul_q_gemm_neon;
    if (n >= KERN_QGEMM_MIN_TOKENS && t->bf16gemm == kern_bf16gemm_neon && !w->quantized && w->dtype == DT_BF16)
        return kern_matmul_bf16_gemm_neon;
#endif
    /* the fused kernel over input prepared once per call; its standalone entry
     * points prepare the same input themselves */
    if (w->quantized && (w->bits == 4 || w->bits == 8)) {
        if (t->qdot == kern_qdot_ref)
            return kern_matvec_q_def;
#if GP_X86
        if (t->qdot == kern_qdot_avx512)
            return kern_matvec_q_avx512;
        if (t->qdot == kern_qdot_avx2)
            return kern_matvec_q_avx2;
#elif GP_ARM64
        if (t->qdot == kern_qdot_neon)
            return kern_matvec_q_neon;
#endif
    }
    if (!w->quantized && w->dtype == DT_BF16 && t->matvec_bf16)
        return t->matvec_bf16;
#if GP_X86
    if (t->refgemm == kern_refgemm_avx512)
        return kern_matmul_ref_gemm_avx512;
    if (t->refgemm == kern_refgemm_avx2)
        return kern_matmul_ref_gemm_avx2;
#elif GP_ARM64
    if (t->refgemm == kern_refgemm_neon)
        return kern_matmul_ref_gemm_neon;
#endif
    return kern_matmul_ref;
}

Test(kernels, matmul_threads_bitwise_and_dispatch, .timeout = TH_TIMEOUT(60))
{
    struct kern_table tab[5];
    const char *label[5];
    size_t nt = tables(tab, label);
    struct tmat mats[9];
    make_quant(&mats[0], 300, 192, 4, 64, DT_BF16, 11); /* 300 rows: two sgemm tiles */
    make_quant(&mats[1], 130, 160, 8, 32, DT_F32, 12);
    make_quant(&mats[2], 200, 128, 3, 128, DT_F16, 13);
    make_float(&mats[3], 130, 257, DT_BF16, 14);
    make_float(&mats[4], 129, 33, DT_F32, 15);
    make_float(&mats[5], 65, 7, DT_F16, 16);
    make_mx(&mats[6], 300, 192, QM_MXFP4, 17);
    make_mx(&mats[7], 130, 176, QM_NVFP4, 18);
    make_mx(&mats[8], 65, 160, QM_MXFP8, 19);
    for (size_t i = 0; i < LEN(mats); i++) {
        const struct wmat *w = &mats[i].m;
        /* 8: the blocked GEMM's least; 40, 300: sgemm's narrow call; wide, then narrow */
        static const int64_t ns[] = {1, 5, 8, 17, 40, 300};
        for (size_t ni = 0; ni < LEN(ns); ni++) {
            int64_t n = ns[ni];
            uint64_t s = 40 + i;
            size_t ny = (size_t)(n * w->rows);
            float *x = rand_vec(&s, (size_t)(n * w->cols)), *y[3], *direct = nan_vec(ny), *ref = nan_vec(ny);
            double *truth = malloc(ny * sizeof *truth), *mag = malloc(ny * sizeof *mag);
            cr_assert(truth && mag);
            exact(mats[i].wd, mats[i].mag, w->cols, 0, 0, x, n, w->rows, w->cols, truth, mag);
            kern_matmul_ref(w, x, n, ref, 0, w->rows);
            for (size_t k = 0; k < nt; k++) {
                char what[96];
                snprintf(what, sizeof what, "%s, matrix %zu, n %lld", label[k], i, (long long)n);
                for (int th = 1; th <= 3; th++) {
                    y[th - 1] = nan_vec(ny);
                    kern_matmul(&tab[k], w, x, n, y[th - 1], th);
                }
                assert_close(what, y[0], ref, mag, n, w->rows, 0, w->rows); /* every element written, close */
                cr_assert_eq(memcmp(y[0], y[1], ny * sizeof(float)), 0, "%s: 1 vs 2 threads differ", what);
                cr_assert_eq(memcmp(y[0], y[2], ny * sizeof(float)), 0, "%s: 1 vs 3 threads differ", what);
                /* and it is the path the table selects, bit for bit (sgemm
                 * called per tile: its rounding depends on the tile's width) */
                matmul_fn fn = expected_fn(&tab[k], w, n);
                cr_assert(fn);
                int64_t tile = fn == kern_matmul_blas ? KERN_BLAS_ROWS : w->rows;
                for (int64_t r0 = 0; r0 < w->rows; r0 += tile)
                    fn(w, x, n, direct, r0, r0 + tile < w->rows ? r0 + tile : w->rows);
                cr_assert_eq(memcmp(y[0], direct, ny * sizeof(float)), 0, "%s: not the expected path", what);
                if (k == 0) /* KERN_SCALAR: the definitions; every exact table gives their bits */
                    memcpy(ref, y[0], ny * sizeof(float));
                else if (fn != kern_matmul_blas)
                    cr_assert_eq(memcmp(y[0], ref, ny * sizeof(float)), 0, "%s: not the scalar table's bits", what);
                for (int th = 0; th < 3; th++)
                    free(y[th]);
            }
            free(x);
            free(direct);
            free(ref);
            free(truth);
            free(mag);
        }
    }
    for (size_t i = 0; i < LEN(mats); i++)
        tmat_free(&mats[i]);
    for (size_t k = 0; k < nt; k++)
        kern_free(&tab[k]);
}

/* kern_matmul_many: every matrix's output is, bit for bit, kern_matmul's for
 * it alone, on every table (KERN_Q8 too), for 1-3 threads, whether the
 * matrices share an input preparation (same bits, group size, columns) or not,
 * and past KERN_MANY matrices. */
Test(kernels, matmul_many_bitwise_equal_one_by_one, .timeout = TH_TIMEOUT(60))
{
    struct kern_table tab[6];
    const char *label[6];
    size_t nt = tables(tab, label);
    label[nt] = "KERN_Q8";
    kern_init(&tab[nt++], KERN_Q8);
    struct tmat mats[KERN_MANY + 2];
    make_quant(&mats[0], 300, 192, 4, 64, DT_BF16, 31);
    make_quant(&mats[1], 48, 192, 4, 64, DT_BF16, 32);  /* shares mats[0]'s preparation */
    make_quant(&mats[2], 64, 192, 8, 64, DT_F32, 33);   /* other bits */
    make_quant(&mats[3], 80, 192, 4, 32, DT_F16, 34);   /* other group size */
    make_float(&mats[4], 33, 192, DT_BF16, 35);
    make_quant(&mats[5], 17, 192, 4, 64, DT_BF16, 36);  /* in the second batch */
    const struct wmat *w[LEN(mats)];
    for (size_t i = 0; i < LEN(mats); i++)
        w[i] = &mats[i].m;
    static const int64_t ns[] = {1, 3, 40};
    for (size_t ni = 0; ni < LEN(ns); ni++) {
        int64_t n = ns[ni];
        uint64_t s = 70 + ni;
        float *x = rand_vec(&s, (size_t)(n * 192)), *y[LEN(mats)], *one[LEN(mats)];
        for (size_t k = 0; k < nt; k++)
            for (int th = 1; th <= 3; th++)
                for (int count = 1; count <= (int)LEN(mats); count++) {
                    for (int i = 0; i < count; i++) {
                        y[i] = nan_vec((size_t)(n * w[i]->rows));
                        one[i] = nan_vec((size_t)(n * w[i]->rows));
                        kern_matmul(&tab[k], w[i], x, n, one[i], th);
                    }
                    kern_matmul_many(&tab[k], count, w, y, x, n, th);
                    for (int i = 0; i < count; i++) {
                        cr_assert_eq(memcmp(y[i], one[i], (size_t)(n * w[i]->rows) * sizeof(float)), 0,
                                     "%s, %d threads, n %lld: matrix %d of %d differs from kern_matmul alone",
                                     label[k], th, (long long)n, i, count);
                        free(y[i]);
                        free(one[i]);
                    }
                }
        free(x);
    }
    for (size_t i = 0; i < LEN(mats); i++)
        tmat_free(&mats[i]);
    for (size_t k = 0; k < nt; k++)
        kern_free(&tab[k]);
}

/* simd.c and blas.c promise that a token's result does not depend on the
 * other tokens of the call (prefill, chunked and decode give the same bits):
 * y[t] of a 131-token call (TB = 4 blocks with a remainder; sgemm's wide
 * call, where a single token takes the narrow one) must equal, bit for bit, the single-token call on x[t] — on every path. */
Test(kernels, token_independent_bits, .timeout = TH_TIMEOUT(60))
{
    struct tmat mats[7];
    make_quant(&mats[0], 65, 192, 4, 64, DT_BF16, 21);
    make_quant(&mats[1], 7, 160, 8, 32, DT_F32, 22);
    make_float(&mats[2], 65, 257, DT_BF16, 23);
    make_float(&mats[3], 3, 33, DT_F16, 24);
    make_mx(&mats[4], 65, 192, QM_MXFP4, 25);
    make_mx(&mats[5], 7, 176, QM_NVFP4, 26);
    make_mx(&mats[6], 17, 160, QM_MXFP8, 27);
    const int64_t n = 131;
    for (size_t i = 0; i < LEN(mats); i++) {
        const struct wmat *w = &mats[i].m;
        uint64_t s = 60 + i;
        float *x = rand_vec(&s, (size_t)(n * w->cols)), *yb = nan_vec((size_t)(n * w->rows)),
              *y1 = nan_vec((size_t)w->rows);
        for (size_t k = 0; k <= LEN(paths); k++) {
            const struct path *p = k < LEN(paths) ? &paths[k] : NULL; /* NULL: the reference */
            matmul_fn fn = p ? p->fn : kern_matmul_ref;
            if (p && (!path_serves(p, w) || !path_available(p)))
                continue;
            fn(w, x, n, yb, 0, w->rows);
            for (int64_t t = 0; t < n; t++) {
                fn(w, x + t * w->cols, 1, y1, 0, w->rows);
                cr_assert_eq(memcmp(y1, yb + t * w->rows, (size_t)w->rows * sizeof *y1), 0,
                             "%s, matrix %zu: token %lld of a %lld-token call differs from the token alone",
                             p ? p->name : "ref", i, (long long)t, (long long)n);
            }
        }
        free(x);
        free(yb);
        free(y1);
    }
    for (size_t i = 0; i < LEN(mats); i++)
        tmat_free(&mats[i]);
}

Test(kernels, row_f32)
{
    struct tmat q;
    make_quant(&q, 3, 64, 4, 32, DT_BF16, 5);
    float row[64];
    for (int64_t r = 0; r < 3; r++) {
        kern_row_f32(&q.m, r, row);
        for (int64_t j = 0; j < 64; j++)
            /* float s·q + b: two roundings, each ≤ 2^-24 of |s·q| + |b| */
            cr_assert(fabs((double)row[j] - q.wd[r * 64 + j]) <= 0x1p-23 * q.mag[r * 64 + j], "row %lld col %lld",
                      (long long)r, (long long)j);
    }
    tmat_free(&q);
    struct tmat f;
    make_float(&f, 2, 9, DT_F16, 6);
    kern_row_f32(&f.m, 1, row);
    for (int j = 0; j < 9; j++)
        cr_assert_eq((double)row[j], f.wd[9 + j]); /* F16 -> F32 is exact */
    tmat_free(&f);
}

/* ------------------------------------------------------------------ element-wise ops */

/* Element-wise results are float32 evaluations of short formulas: within a
 * few ulp of the exact value, so 2e-7 relative (~3 ulp) plus 1e-7 absolute
 * for values that are zero by symmetry (cos 90° in float). */
static void assert_f(float got, double want, const char *what)
{
    cr_assert(fabs((double)got - want) <= 2e-7 * fabs(want) + 1e-7, "%s: %.9g, expected %.12g", what, (double)got,
              want);
}

Test(kernels, rmsnorm)
{
    float x[2] = {3, 4}, y[2] = {NAN, NAN};
    kern_rmsnorm(kern_dot_ref, y, x, NULL, 2, 0.0f); /* mean(x²) = 12.5 */
    assert_f(y[0], 3 / sqrt(12.5), "rmsnorm [3,4] y0");
    assert_f(y[1], 4 / sqrt(12.5), "rmsnorm [3,4] y1");
    const float w[2] = {2.0f, 0.5f};
    kern_rmsnorm(kern_dot_ref, y, x, w, 2, 0.0f);
    assert_f(y[0], 6 / sqrt(12.5), "weighted y0");
    assert_f(y[1], 2 / sqrt(12.5), "weighted y1");
    float ones[4] = {1, 1, 1, 1};
    kern_rmsnorm(kern_dot_ref, ones, ones, NULL, 4, 3.0f); /* in place; (1 + 3)^-½ = 0.5 */
    for (int i = 0; i < 4; i++)
        cr_assert_eq(ones[i], 0.5f);
    float z[3] = {0, 0, 0};
    kern_rmsnorm(kern_dot_ref, z, z, NULL, 3, 1e-6f); /* zero stays zero (no 0/0) */
    for (int i = 0; i < 3; i++)
        cr_assert_eq(z[i], 0.0f);
    float v[5] = {1, -2, 3, -4, 5}, out[5]; /* mean(x²) = 11 */
    kern_rmsnorm(kern_dot_ref, out, v, NULL, 5, 1e-6f);
    for (int i = 0; i < 5; i++)
        assert_f(out[i], (double)v[i] / sqrt(11.0 + 1e-6), "rmsnorm [1..5]");
}

/* Σx² is kern_dot's: every level's dot gives the reference's bits, for
 * lengths around the 16-lane steps and E2B's 1536, on values of many
 * magnitudes; the result is within float rounding of the float64 formula. */
/* The element-wise twins of this architecture (NULL: the level uses the
 * reference for that op); those the CPU lacks are skipped. */
static const struct ewtwin {
    const char *name;
    dot_fn dot;
    dots_fn dots;
    axpy_fn axpy;
    gelu_mul_fn gelu_mul;
    softcap_fn softcap;
    softmax_fn softmax;
    enum cpu_feature need;
} ewtwins[] = {
#if GP_X86
    {"avx2", kern_dot_avx2, kern_dots_avx2, kern_axpy_avx2, kern_gelu_mul_avx2, kern_softcap_avx2, kern_softmax_avx2,
     CPU_AVX2},
    {"avx512", kern_dot_avx512, kern_dots_avx512, kern_axpy_avx512, kern_gelu_mul_avx512, kern_softcap_avx512,
     kern_softmax_avx512, CPU_AVX512},
#elif GP_ARM64
    {"neon", kern_dot_neon, kern_dots_neon, kern_axpy_neon, NULL, NULL, NULL, CPU_NEON},
#endif
    {NULL, NULL, NULL, NULL, NULL, NULL, NULL, CPU_AVX2},
};

Test(kernels, rmsnorm_paths_bitwise_equal_reference)
{
    enum { N = 1536 };
    static float x[N], w[N], r[N], v[N];
    uint64_t s = 29;
    for (int i = 0; i < N; i++) {
        x[i] = ldexpf((float)(th_rng_next(&s) % 2001) / 1000.0f - 1.0f, (int)(th_rng_next(&s) % 16) - 8);
        w[i] = (float)(th_rng_next(&s) % 2001) / 1000.0f;
    }
    const int64_t lens[] = {1, 15, 16, 17, 255, 256, 1535, N};
    for (size_t k = 0; k < sizeof lens / sizeof lens[0]; k++) {
        const int64_t n = lens[k];
        kern_rmsnorm(kern_dot_ref, r, x, w, n, 1e-6f);
        double ss = 0.0;
        for (int64_t i = 0; i < n; i++)
            ss += (double)x[i] * (double)x[i];
        for (int64_t i = 0; i < n; i++)
            cr_assert(fabs((double)r[i] - (double)x[i] * (double)w[i] / sqrt(ss / (double)n + 1e-6)) <=
                          1e-6 * fabs((double)x[i] * (double)w[i] / sqrt(ss / (double)n)),
                      "n %lld, element %lld: %g", (long long)n, (long long)i, (double)r[i]);
        for (const struct ewtwin *tw = ewtwins; tw->name; tw++)
            if (cpu_has(tw->need)) {
                kern_rmsnorm(tw->dot, v, x, w, n, 1e-6f);
                cr_assert_eq(memcmp(r, v, (size_t)n * sizeof *v), 0, "%s, n %lld", tw->name, (long long)n);
            }
    }
}

Test(kernels, gelu)
{
    cr_assert_eq(kern_gelu(0.0f), 0.0f);
    /* 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))) in float64 */
    assert_f(kern_gelu(1.0f), 0.8411919906082768, "gelu(1)");
    assert_f(kern_gelu(-1.0f), -0.15880800939172324, "gelu(-1)");
    assert_f(kern_gelu(2.0f), 1.954597694087775, "gelu(2)");
    assert_f(kern_gelu(0.5f), 0.34571400982514394, "gelu(0.5)");
    assert_f(kern_gelu(-3.0f), -0.0036373920817729943, "gelu(-3)");
    assert_f(kern_gelu(10.0f), 10.0, "gelu(10)");
    cr_assert(fabsf(kern_gelu(-10.0f)) <= 1e-7f);
    /* the erf form differs: gelu_erf(1) = 0.8413447460685429, 1.5e-4 away */
    cr_assert_gt(fabs((double)kern_gelu(1.0f) - 0.8413447460685429), 1e-4);
    cr_assert_eq(kern_gelu(INFINITY), INFINITY);
    cr_assert(isnan(kern_gelu(NAN)));
    /* past the clamp: a zero of x's sign, however large |x| (not x·e^-87) */
    cr_assert(kern_gelu(-1e30f) == 0.0f && signbit(kern_gelu(-1e30f)));
    cr_assert(kern_gelu(-INFINITY) == 0.0f && signbit(kern_gelu(-INFINITY)));
}

/* cap·tanh(x/cap) against float64 over |x| from 2^-30 to 2^9 (cap 30, the
 * Gemma value, and 2.5): within 4 ulp-sized steps of the result, ±cap at the
 * ends, and NaN stays NaN (a NaN logit must not turn into −cap). */
Test(kernels, softcap)
{
    const float caps[] = {30.0f, 2.5f};
    double worst = 0.0;
    for (int c = 0; c < 2; c++)
        for (int sign = -1; sign <= 1; sign += 2)
            for (int e = -30; e < 9; e++)
                for (int m = 0; m < 256; m++) {
                    float x = (float)sign * ldexpf(1.0f + (float)m / 256.0f, e);
                    double want = (double)caps[c] * tanh((double)x / (double)caps[c]), got = (double)kern_softcap(x, caps[c]);
                    cr_assert(fabs(got - want) <= 5e-7 * fabs(want), "softcap(%a, %g) = %a, float64 %.17g", (double)x,
                              (double)caps[c], got, want);
                    if (fabs(got - want) / fabs(want) > worst)
                        worst = fabs(got - want) / fabs(want);
                }
    cr_assert_gt(worst, 1e-8); /* a real comparison ran */
    cr_assert_eq(kern_softcap(1e30f, 30.0f), 30.0f);
    cr_assert_eq(kern_softcap(-INFINITY, 30.0f), -30.0f);
    cr_assert_eq(kern_softcap(0.0f, 30.0f), 0.0f);
    cr_assert(isnan(kern_softcap(NAN, 30.0f)));
}

/* kern_gelu against float64 over |x| from 2^-30 to 2^7, both signs. The
 * float64 value is x / (1 + e^(−2u)), the same function as the tanh form,
 * which loses every digit to cancellation in float64 below x ≈ −7. The bound
 * grows with |v| = 2|u|: a rounding of u by δ moves e^(−2u) by 2δ relative
 * (conditioning, not the exp; measured at most 1.6e-7·|v|); past the clamp (v > 87,
 * x < −9.7, |gelu| < 1e-36) it is absolute. */
Test(kernels, gelu_accuracy)
{
    double worst = 0.0;
    for (int sign = -1; sign <= 1; sign += 2)
        for (int e = -30; e < 7; e++)
            for (int m = 0; m < 512; m++) {
                float x = (float)sign * ldexpf(1.0f + (float)m / 512.0f, e);
                double xd = (double)x, v = -2.0 * 0.7978845608028654 * (xd + 0.044715 * xd * xd * xd);
                double want = xd / (1.0 + exp(v)), err = fabs((double)kern_gelu(x) - want);
                double rel = 2.5e-7 * fmax(1.0, fabs(v));
                cr_assert(err <= rel * fabs(want) || (v > 87.0 && err <= 1e-35), "gelu(%a) = %a, float64 %.17g",
                          (double)x, (double)kern_gelu(x), want);
                if (v < 87.0 && err / fabs(want) / fmax(1.0, fabs(v)) > worst)
                    worst = err / fabs(want) / fmax(1.0, fabs(v));
            }
    cr_assert_gt(worst, 1e-8); /* a real comparison ran: not all exact */
}

/* g = gelu(g)·u on the SIMD paths gives the reference's bits for every
 * length 0..40 (full vectors and tails), for 100 (every loop of the AVX-512
 * path: 64 + 16 + a masked tail of 4) and for 4096 values, on ordinary
 * values in [−12, 12] and on ±0, ±inf, NaN, huge and clamp-edge inputs, and
 * writes nothing past n. */
Test(kernels, gelu_mul_simd_bitwise_equal_reference)
{
    enum { N = 4096 };
    const float special[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1e30f, -1e30f, 1e-40f, -9.7f, -9.8f, 30.0f, -30.0f};
    float g0[N + 1], u[N + 1];
    uint64_t s = 31;
    for (int i = 0; i <= N; i++) {
        g0[i] = (float)(th_rng_next(&s) % 24001) / 1000.0f - 12.0f;
        u[i] = (float)(th_rng_next(&s) % 2001) / 1000.0f - 1.0f;
    }
    for (size_t i = 0; i < sizeof special / sizeof *special; i++)
        g0[3 * i + 1] = special[i];
    for (const struct ewtwin *tw = ewtwins; tw->name; tw++)
        for (int64_t n = 0; n <= N && tw->gelu_mul && cpu_has(tw->need); n = n == 40 ? 100 : n == 100 ? N : n + 1) {
            static float r[N + 1], v[N + 1]; /* n: 0..40, 100 (64 + 16 + a tail of 4), N */
            memcpy(r, g0, sizeof r);
            memcpy(v, g0, sizeof v);
            r[n] = v[n] = 12345.0f;
            kern_gelu_mul_ref(r, u, n);
            tw->gelu_mul(v, u, n);
            for (int64_t i = 0; i < n; i++)
                cr_assert(memcmp(&r[i], &v[i], sizeof *r) == 0 || (isnan(r[i]) && isnan(v[i])),
                          "%s n %lld [%lld]: gelu(%a)·%a = %a, reference %a", tw->name, (long long)n,
                          (long long)i, (double)g0[i], (double)u[i], (double)v[i], (double)r[i]);
            cr_assert(v[n] == 12345.0f, "n %lld: wrote past the end", (long long)n);
            if (n > 5)
                cr_assert(r[5] == kern_gelu(g0[5]) * u[5]);
        }
}

/* The soft-cap's SIMD paths give the reference's bits, as GELU's above (the
 * inputs scaled to logits' range, [−60, 60]; caps 30 and 2.5). */
Test(kernels, softcap_simd_bitwise_equal_reference)
{
    enum { N = 4096 };
    const float special[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1e30f, -1e30f, 1e-40f, 1e-7f, -3e-5f, 1305.0f, -1306.0f};
    static float x0[N + 1];
    uint64_t s = 37;
    for (int i = 0; i <= N; i++)
        x0[i] = (float)(th_rng_next(&s) % 120001) / 1000.0f - 60.0f;
    for (size_t i = 0; i < sizeof special / sizeof *special; i++)
        x0[3 * i + 1] = special[i];
    const float caps[] = {30.0f, 2.5f};
    for (const struct ewtwin *tw = ewtwins; tw->name; tw++)
        for (int c = 0; c < 2; c++)
            for (int64_t n = 0; n <= N && tw->softcap && cpu_has(tw->need); n = n == 40 ? 100 : n == 100 ? N : n + 1) {
                static float r[N + 1], v[N + 1]; /* n: 0..40, 100 (64 + 16 + a tail of 4), N */
                memcpy(r, x0, sizeof r);
                memcpy(v, x0, sizeof v);
                r[n] = v[n] = 12345.0f;
                kern_softcap_ref(r, caps[c], n);
                tw->softcap(v, caps[c], n);
                for (int64_t i = 0; i < n; i++)
                    cr_assert(memcmp(&r[i], &v[i], sizeof *r) == 0 || (isnan(r[i]) && isnan(v[i])),
                              "%s cap %g n %lld [%lld]: softcap(%a) = %a, reference %a", tw->name, (double)caps[c],
                              (long long)n, (long long)i, (double)x0[i], (double)v[i], (double)r[i]);
                cr_assert(v[n] == 12345.0f, "n %lld: wrote past the end", (long long)n);
            }
}

/* Each twin's softmax against kern_softmax, bit for bit, on scores of many
 * magnitudes with the specials among them (a hidden key's −inf, NaN, ±0,
 * ±inf, huge values) or a block of zeros of both signs as the maximum, for
 * lengths around the 16-lane steps. */
Test(kernels, softmax_simd_bitwise_equal_reference)
{
    enum { N = 530 };
    const float special[] = {-INFINITY, -0.0f, 0.0f, 1e-40f, -1e-40f, -86.9f, -87.1f, 88.0f, -1e30f, 1e30f};
    static float x0[4][N + 1];
    uint64_t s = 41;
    for (int i = 0; i <= N; i++) {
        x0[0][i] = (float)(th_rng_next(&s) % 60001) / 1000.0f - 30.0f; /* scores */
        x0[1][i] = i % 5 == 2 ? -INFINITY : x0[0][i];                   /* some keys hidden */
        x0[2][i] = i % 3 == 0 ? -0.0f : i % 3 == 1 ? 0.0f : -x0[0][i] * x0[0][i]; /* zeros of both signs the max */
        x0[3][i] = i % 7 == 3 ? NAN : i == 40 ? INFINITY : x0[0][i];    /* NaN weights */
    }
    for (size_t i = 0; i < sizeof special / sizeof *special; i++)
        x0[0][47 * i + 3] = special[i]; /* 1e30 (the max: every other weight 0) from n = 427 */
    for (const struct ewtwin *tw = ewtwins; tw->name; tw++)
        for (int k = 0; k < 4; k++)
            for (int64_t n = 0; n <= N && tw->softmax && cpu_has(tw->need); n = n == 70 ? 255 : n == 255 ? N : n + 1) {
                static float r[N + 1], v[N + 1];
                memcpy(r, x0[k], sizeof r);
                memcpy(v, x0[k], sizeof v);
                r[n] = v[n] = 12345.0f;
                kern_softmax(r, n);
                tw->softmax(v, n);
                for (int64_t i = 0; i < n; i++)
                    cr_assert(memcmp(&r[i], &v[i], sizeof *r) == 0 || (isnan(r[i]) && isnan(v[i])),
                              "%s set %d n %lld [%lld]: softmax %a, reference %a", tw->name, k, (long long)n,
                              (long long)i, (double)v[i], (double)r[i]);
                cr_assert(v[n] == 12345.0f, "n %lld: wrote past the end", (long long)n);
            }
}

Test(kernels, softmax)
{
    float a[3] = {1, 2, 3};
    kern_softmax(a, 3);
    assert_f(a[0], 0.09003057317038046, "softmax[0]");
    assert_f(a[1], 0.24472847105479767, "softmax[1]");
    assert_f(a[2], 0.6652409557748219, "softmax[2]");
    float b[2] = {1000, 1000}; /* no overflow: the max is subtracted */
    kern_softmax(b, 2);
    cr_assert_eq(b[0], 0.5f);
    cr_assert_eq(b[1], 0.5f);
    float c[3] = {-INFINITY, 0, -INFINITY}; /* masked entries */
    kern_softmax(c, 3);
    cr_assert_eq(c[0], 0.0f);
    cr_assert_eq(c[1], 1.0f);
    cr_assert_eq(c[2], 0.0f);
    float d[1] = {-7.5f};
    kern_softmax(d, 1);
    cr_assert_eq(d[0], 1.0f);
    float e[4] = {0, (float)M_LN2, 0, (float)M_LN2}; /* weights 1:2:1:2 */
    kern_softmax(e, 4);
    assert_f(e[0], 1.0 / 6, "softmax ln2 [0]");
    assert_f(e[1], 2.0 / 6, "softmax ln2 [1]");
}

/* kern_rope at position pos, through kern_rope_cs. */
static void rope_at(float *x, int64_t d, const double *inv_freq, int64_t pos)
{
    float cs[8];
    cr_assert(d <= 8);
    kern_rope_cs(cs, d, inv_freq, pos);
    kern_rope(x, d, inv_freq, cs);
}

Test(kernels, rope)
{
    /* d = 4: pairs (0, 2) and (1, 3) */
    const double zero[2] = {0, 0};
    float x[4] = {1, 2, 3, 4};
    rope_at(x, 4, zero, 12345); /* inv_freq 0: untouched, bit for bit */
    cr_assert(x[0] == 1 && x[1] == 2 && x[2] == 3 && x[3] == 4);
    const double quarter[2] = {0, M_PI / 2};
    rope_at(x, 4, quarter, 1); /* pair (1, 3) turns by 90°: (2, 4) -> (-4, 2) */
    cr_assert(x[0] == 1 && x[2] == 3, "pair 0 must pass through");
    assert_f(x[1], -4.0, "rope 90° x1");
    assert_f(x[3], 2.0, "rope 90° x3");
    float y[4] = {1, 2, 3, 4};
    rope_at(y, 4, quarter, 2); /* 180°: negated */
    assert_f(y[1], -2.0, "rope 180° x1");
    assert_f(y[3], -4.0, "rope 180° x3");
    float p0[4] = {1, 2, 3, 4};
    const double any[2] = {0.3, 1.7};
    rope_at(p0, 4, any, 0); /* position 0: angle 0 */
    cr_assert(p0[0] == 1 && p0[1] == 2 && p0[2] == 3 && p0[3] == 4);
    /* d = 8, one frequency per pair, position 5: x[i]' = x0·cos - x1·sin, x[i+4]' = x1·cos + x0·sin */
    const double fr[4] = {1.0, 0.1, 0.01, 0.0};
    float v[8] = {0.5f, -1, 2, 3, 1.5f, 0.25f, -2, 7};
    float orig[8];
    memcpy(orig, v, sizeof v);
    rope_at(v, 8, fr, 5);
    for (int i = 0; i < 4; i++) {
        double a = 5 * fr[i], c = cos(a), s = sin(a);
        assert_f(v[i], (double)orig[i] * c - (double)orig[i + 4] * s, "rope d8 first");
        assert_f(v[i + 4], (double)orig[i + 4] * c + (double)orig[i] * s, "rope d8 second");
    }
    cr_assert(v[3] == 3 && v[7] == 7);
    /* large positions: the angle is taken in double (pos·inv_freq = 1e6·π/2 is a multiple of 2π) */
    float w[2] = {1, 0};
    const double f1[1] = {M_PI / 2};
    rope_at(w, 2, f1, 1000000);
    cr_assert(fabsf(w[0] - 1.0f) <= 1e-6f && fabsf(w[1]) <= 1e-6f, "(%g, %g)", (double)w[0], (double)w[1]);
}

/* ------------------------------------------------------------------ quantizer */

/* The dot products of attention: every path gives kern_dot_ref's bits, for
 * every length around the 16-lane steps, on values spanning many magnitudes
 * (where a different order would round differently); the reference itself is
 * within float rounding of the exact sum. */
Test(kernels, dot_paths_bitwise_equal_reference)
{
    enum { N = 80 };
    float a[N], b[N];
    uint64_t s = 17;
    for (int i = 0; i < N; i++) {
        a[i] = ldexpf((float)(th_rng_next(&s) % 2001) / 1000.0f - 1.0f, (int)(th_rng_next(&s) % 24) - 12);
        b[i] = (float)(th_rng_next(&s) % 2001) / 1000.0f - 1.0f;
    }
    for (int64_t n = 0; n <= N; n++) {
        float r = kern_dot_ref(a, b, n);
        double exact = 0.0, mag = 0.0;
        for (int64_t i = 0; i < n; i++) {
            exact += (double)a[i] * (double)b[i];
            mag += fabs((double)a[i] * (double)b[i]);
        }
        cr_assert(fabs((double)r - exact) <= 1e-6 * mag + 1e-30, "n %lld: %g vs %g", (long long)n, (double)r, exact);
        for (const struct ewtwin *tw = ewtwins; tw->name; tw++)
            if (cpu_has(tw->need)) {
                float v = tw->dot(a, b, n);
                cr_assert(memcmp(&r, &v, 4) == 0, "%s n %lld: %a vs %a", tw->name, (long long)n, (double)v, (double)r);
            }
    }
}

/* Attention's scores: kern_dots_ref is kern_dot_ref head by head and key by
 * key, and every SIMD path gives its bits for any number of heads (blocks of
 * 8, 4, 2 and 1) and keys (blocks and the rest) and any length (whole
 * vectors and a tail), writing nothing outside its heads' rows. */
Test(kernels, dots_paths_bitwise_equal_reference)
{
    enum { N = 300, M = 13, H = 11, LD = M + 2 };
    static float q[H * N], b[M][N];
    const float *bp[M];
    uint64_t s = 19;
    for (int i = 0; i < H * N; i++)
        q[i] = ldexpf((float)(th_rng_next(&s) % 2001) / 1000.0f - 1.0f, (int)(th_rng_next(&s) % 24) - 12);
    for (int j = 0; j < M; j++) {
        for (int i = 0; i < N; i++)
            b[j][i] = (float)(th_rng_next(&s) % 2001) / 1000.0f - 1.0f;
        bp[j] = b[j];
    }
    const int64_t lens[] = {0, 1, 15, 16, 17, 40, 256, 271, 300};
    const int heads[] = {1, 2, 3, 4, 5, 7, 8, 9, 11};
    for (size_t l = 0; l < sizeof lens / sizeof *lens; l++)
        for (size_t h = 0; h < sizeof heads / sizeof *heads; h++)
            for (int m = 0; m <= M; m++) {
                const int64_t n = lens[l];
                const int nh = heads[h];
                float r[H * LD], v[H * LD];
                for (int i = 0; i < H * LD; i++)
                    r[i] = v[i] = 12345.0f;
                kern_dots_ref(q, nh, bp, m, n, r, LD);
                for (int u = 0; u < nh; u++)
                    for (int j = 0; j < m; j++) {
                        float one = kern_dot_ref(q + u * n, b[j], n);
                        cr_assert(memcmp(&r[u * LD + j], &one, 4) == 0, "ref n %lld m %d head %d key %d", (long long)n,
                                  m, u, j);
                    }
                for (const struct ewtwin *tw = ewtwins; tw->name; tw++)
                    if (cpu_has(tw->need)) {
                        for (int i = 0; i < H * LD; i++)
                            v[i] = 12345.0f;
                        tw->dots(q, nh, bp, m, n, v, LD);
                        cr_assert(memcmp(r, v, sizeof r) == 0, "%s n %lld heads %d m %d", tw->name, (long long)n, nh,
                                  m);
                    }
            }
}

/* o += w·v of attention over a block of values for several heads: every SIMD
 * path gives the reference's bits (one value after another, each a
 * fused multiply-add) for any number of heads, values and length; a
 * weight below KERN_WEIGHT_MIN or a NULL value adds nothing, a NaN weight
 * does; nothing outside the heads' n columns changes. */
Test(kernels, axpy_paths_bitwise_equal_reference)
{
    enum { N = 300, M = 19, H = 11, LD = N + 3, WLD = M + 1 };
    static float x[M][N], w[H * WLD], y0[H * LD], r[H * LD], v[H * LD];
    const float *xp[M];
    uint64_t s = 23;
    for (int j = 0; j < M; j++) {
        for (int i = 0; i < N; i++)
            x[j][i] = ldexpf((float)(th_rng_next(&s) % 2001) / 1000.0f - 1.0f, (int)(th_rng_next(&s) % 24) - 12);
        xp[j] = j == 5 ? NULL : x[j];                            /* a hidden value */
    }
    const float edge[] = {0.0f, 0x1p-101f, 0x1p-100f, 0x1.fffffep-101f, NAN, 1e-40f};
    for (int i = 0; i < H * WLD; i++)                            /* the rule's edges scattered over heads and values */
        w[i] = i % 7 == 3 ? edge[i / 7 % 6] : (float)(th_rng_next(&s) % 1000 + 1) / 1000.0f;
    for (int i = 0; i < H * LD; i++)
        y0[i] = (float)(th_rng_next(&s) % 2001) / 1000.0f - 1.0f;
    { /* the definition, spelled out for head 1 */
        memcpy(r, y0, sizeof r);
        kern_axpy_ref(r, LD, 3, w, WLD, xp, 8, 2);
        float e = y0[LD + 1];
        for (int j = 0; j < 8; j++)
            if (j != 5 && !(w[WLD + j] < 0x1p-100f))
                e = fmaf(w[WLD + j], x[j][1], e);
        cr_assert(memcmp(&r[LD + 1], &e, 4) == 0 && r[LD + 2] == y0[LD + 2] && r[3 * LD + 1] == y0[3 * LD + 1]);
    }
    const int64_t lens[] = {0, 1, 15, 16, 31, 33, 127, 128, 129, 256, 300};
    const int heads[] = {1, 2, 3, 4, 5, 7, 8, 9, 11};
    for (size_t l = 0; l < sizeof lens / sizeof *lens; l++)
        for (size_t h = 0; h < sizeof heads / sizeof *heads; h++)
            for (int m = 0; m <= M; m++) {
                const int64_t n = lens[l];
                const int nh = heads[h];
                memcpy(r, y0, sizeof r);
                kern_axpy_ref(r, LD, nh, w, WLD, xp, m, n);
                for (const struct ewtwin *tw = ewtwins; tw->name; tw++)
                    if (cpu_has(tw->need)) {
                        memcpy(v, y0, sizeof v);
                        tw->axpy(v, LD, nh, w, WLD, xp, m, n);
                        cr_assert(memcmp(r, v, sizeof r) == 0, "%s n %lld heads %d m %d", tw->name, (long long)n, nh,
                                  m);
                    }
            }
}

/* ------------------------------------------------------------------ int8 activations (KERN_Q8) */

/* kern_q8dot_ref and its SIMD twins must give the same bits; the
 * definition itself must stay within the error its int8 input allows; and
 * kern_matmul on a KERN_Q8 table must keep the thread-count and batch
 * guarantees. Matrices as above (one byte off alignment, NaN-filled outputs). */

/* The int8 input of n tokens in buf, every part by the definition. */
static void q8_prepare(const struct wmat *w, const float *x, int64_t n, void *buf, struct kern_q8input *in)
{
    for (int64_t part = 0, parts = kern_q8input_layout(w, n, buf, in); part < parts; part++)
        kern_q8input_part(w, x, n, buf, part);
}

static void q8_run(q8dot_fn fn, const struct wmat *w, const float *x, int64_t n, float *y)
{
    struct kern_q8input in;
    const struct wmat v = kern_gq8_view(w); /* ggml: the input of 8 bits per 32 columns */
    void *buf = malloc(kern_q8input_bytes(&v, n));
    uint8_t *ws = malloc(kern_q8_ws_bytes(w, w->rows, n) + 1); /* a worker's scratch, one byte off alignment */
    cr_assert(buf && ws);
    q8_prepare(&v, x, n, buf, &in);
    fn(w, &in, n, y, 0, w->rows, ws + 1);
    free(ws);
    free(buf);
}

/* The shapes: every (bits, gs, scale dtype) the kernel takes, rows across
 * tiles, columns of 1, 3 and 5 groups (partial 64-byte chunks, 1-3 chunks
 * past the last group of four; 7 and 13 groups end in three whole chunks and a
 * partial one), and 293 groups of 32 at 4 bits (the row
 * crosses the 256-group parameter chunk and ends in a partial chunk). */
static const int64_t q8_rows[] = {1, 7, 65};
static const int64_t q8_groups[] = {1, 3, 5, 7, 13, 17};

/* The int8 twins of this architecture; those the CPU lacks are skipped. */
static const struct q8twin {
    const char *name;
    q8dot_fn fn;
    enum cpu_feature need;
} q8twins[] = {
#if GP_X86
    {"amx-int8", kern_q8dot_amx, CPU_AMX_INT8},
    {"avx512-vnni", kern_q8dot_avx512, CPU_AVX512_VNNI},
    {"avx-vnni", kern_q8dot_avxvnni, CPU_AVX_VNNI},
    {"avx2", kern_q8dot_avx2, CPU_AVX2},
#elif KERN_NEON_DOTPROD
    {"neon-dotprod", kern_q8dot_neon, CPU_DOTPROD},
#endif
    {NULL, NULL, CPU_AVX2},
};

Test(kernels_q8, twins_bitwise_equal_reference, .timeout = TH_TIMEOUT(120))
{
    for (const struct q8twin *tw = q8twins; tw->name; tw++) {
        if (!cpu_has(tw->need)) {
            cr_log_info("kernels_q8: %s not on this CPU", tw->name);
            continue;
        }
        int cases = 0;
        for (int bits = 4; bits <= 8; bits += 4)
            for (size_t gi = 0; gi < LEN(gs_grid); gi++)
                for (size_t di = 0; di < LEN(sdt_grid); di++)
                    for (size_t ri = 0; ri < LEN(q8_rows); ri++)
                        for (size_t ci = 0; ci <= LEN(q8_groups); ci++) {
                            int gs = gs_grid[gi];
                            int64_t rows = q8_rows[ri], cols = ci < LEN(q8_groups) ? q8_groups[ci] * gs : 293 * 32;
                            if (ci == LEN(q8_groups) && (gs != 32 || bits != 4 || ri != 1))
                                continue;
                            struct tmat t;
                            make_quant(&t, rows, cols, bits, gs, sdt_grid[di], (uint64_t)(1000 + cases));
                            for (int64_t n = 1; n <= 5; n += 4) {
                                uint64_t seed = (uint64_t)(2000 + cases);
                                float *x = rand_vec(&seed, (size_t)(n * cols)), *a = nan_vec((size_t)(n * rows)),
                                      *b = nan_vec((size_t)(n * rows));
                                q8_run(kern_q8dot_ref, &t.m, x, n, a);
                                q8_run(tw->fn, &t.m, x, n, b);
                                for (int64_t k = 0; k < n * rows; k++)
                                    cr_assert(!isnan(a[k]), "every output written");
                                cr_assert_eq(memcmp(a, b, (size_t)(n * rows) * sizeof *a), 0,
                                             "q%d g%d %s, %lld x %lld, n %lld: %s differs from kern_q8dot_ref", bits,
                                             gs, dtype_table[sdt_grid[di]].name, (long long)rows, (long long)cols,
                                             (long long)n, tw->name);
                                free(x);
                                free(a);
                                free(b);
                            }
                            tmat_free(&t);
                            cases++;
                        }
        cr_log_info("kernels_q8: %s, %d shapes bitwise equal", tw->name, cases);
    }
}

/* ggml's fused types on int8 activations: every twin gives kern_gq8dot_ref's
 * bits (rows of 1, 3 and 9 blocks and E2B's 2,304 columns; windows of 16
 * sub-blocks whole and partial), and the definition stays within the error
 * of its input: per weight |w|·d/2 (d the 32 columns' input scale), plus
 * float rounding. */
Test(kernels_q8, ggml_twins_bitwise_equal_reference, .timeout = TH_TIMEOUT(120))
{
    int cases = 0;
    for (size_t k = 0; k < LEN(ggml_fused); k++) {
        struct ggml_qtype q;
        cr_assert(ggml_qtype_find(qformat_of(ggml_fused[k].mode)->ggml, &q));
        const int64_t cols_grid[] = {q.block, 3 * q.block, 9 * q.block, 2304};
        for (size_t ci = 0; ci < LEN(cols_grid); ci++)
            for (size_t ri = 0; ri < LEN(q8_rows); ri++) {
                const int64_t rows = q8_rows[ri], cols = cols_grid[ci];
                struct tmat t;
                make_ggml(&t, rows, cols, k, (uint64_t)(7000 + cases));
                for (int64_t n = 1; n <= 5; n += 4) {
                    uint64_t seed = (uint64_t)(8000 + cases);
                    float *x = rand_vec(&seed, (size_t)(n * cols)), *a = nan_vec((size_t)(n * rows));
                    float *b = nan_vec((size_t)(n * rows));
                    q8_run(kern_q8dot_ref, &t.m, x, n, a);
                    for (int64_t i = 0; i < n * rows; i++) { /* within the int8 input's error of the exact product */
                        const int64_t tk = i / rows, r = i % rows;
                        double exact = 0.0, bound = 0.0;
                        for (int64_t g = 0; g < cols / 32; g++) {
                            float m = 0.0f; /* the input's largest |x| of the 32 columns (as the preparation's) */
                            for (int j = 0; j < 32; j++)
                                if (fabsf(x[tk * cols + 32 * g + j]) > m)
                                    m = fabsf(x[tk * cols + 32 * g + j]);
                            for (int j = 0; j < 32; j++) {
                                const int64_t c = 32 * g + j;
                                exact += t.wd[r * cols + c] * (double)x[tk * cols + c];
                                bound += fabs(t.wd[r * cols + c]) * ((double)m / 127.0 / 2.0 + 1e-6 * fabs((double)x[tk * cols + c]));
                            }
                        }
                        cr_assert(fabs((double)a[i] - exact) <= bound * 1.01 + 1e-6, "%s %lld x %lld n %lld: y[%lld] %g, exact %g, bound %g",
                                  q.name, (long long)rows, (long long)cols, (long long)n, (long long)i, (double)a[i], exact, bound);
                    }
                    for (const struct q8twin *tw = q8twins; tw->name; tw++)
                        if (cpu_has(tw->need)) {
                            memset(b, 0xFF, (size_t)(n * rows) * sizeof *b);
                            q8_run(tw->fn, &t.m, x, n, b);
                            cr_assert_eq(memcmp(a, b, (size_t)(n * rows) * sizeof *a), 0,
                                         "%s %lld x %lld, n %lld: %s differs from kern_gq8dot_ref", q.name,
                                         (long long)rows, (long long)cols, (long long)n, tw->name);
                        }
                    free(x);
                    free(a);
                    free(b);
                }
                tmat_free(&t);
                cases++;
            }
    }
    cr_log_info("kernels_q8: ggml, %d shapes bitwise equal", cases);
}

/* The twins sum a window's products in 16-bit lanes where they fit: every
 * code byte 0x00 or 0xFF (each type's largest codes of either sign) against
 * inputs that all quantize to +127, -127 or alternate, bit for bit with the
 * definition. */
Test(kernels_q8, ggml_twins_extreme_sums)
{
    for (size_t k = 0; k < LEN(ggml_fused); k++)
        for (int fill = 0; fill <= 0xFF; fill += 0xFF) {
            const int64_t rows = 3, cols = 2304, n = 5;
            struct tmat t;
            make_ggml_fill(&t, rows, cols, k, 77, fill);
            float *x = malloc((size_t)(n * cols) * sizeof *x), *a = nan_vec((size_t)(n * rows)),
                  *b = nan_vec((size_t)(n * rows));
            cr_assert(x);
            for (int64_t i = 0; i < n * cols; i++) /* tokens: +1, -1, alternating, +1, -1 */
                x[i] = i / cols % 2 ? -1.0f : i / cols == 2 && i % 2 ? -1.0f : 1.0f;
            q8_run(kern_q8dot_ref, &t.m, x, n, a);
            for (const struct q8twin *tw = q8twins; tw->name; tw++)
                if (cpu_has(tw->need)) {
                    q8_run(tw->fn, &t.m, x, n, b);
                    cr_assert_eq(memcmp(a, b, (size_t)(n * rows) * sizeof *a), 0, "%s bytes 0x%02x: %s differs",
                                 qmode_name(ggml_fused[k].mode), fill, tw->name);
                }
            free(x);
            free(a);
            free(b);
            tmat_free(&t);
        }
}

/* The blocked layout holds the same matrix: the int8 kernels, the exact
 * ones (3- and 6-bit: the reference's GEMMs, their codes straddling words),
 * the reference matmul and the row lookups give the bits they give on the
 * rows. */
static struct wmat block_copy(const struct wmat *w, uint8_t **buf)
{
    *buf = malloc(kern_blocked_bytes(w) + 1); /* one byte off alignment, as make_quant's */
    cr_assert(*buf);
    kern_block_rows(w, *buf + 1, 0, w->rows / KERN_BLOCK_ROWS);
    return kern_blocked_view(w, *buf + 1);
}

Test(kernels_q8, blocked_bitwise_equal_rows, .timeout = TH_TIMEOUT(120))
{
    static const int64_t brows[] = {16, 48, 80}, bgroups[] = {1, 3, 17, 24};
    struct kern_table q8;
    kern_init(&q8, KERN_Q8);
    int cases = 0;
    static const int bitss[] = {2, 3, 4, 5, 6, 8}; /* under qemu (arm64) 3 and 6 the straddling widths */
    for (size_t bi = 0; bi < LEN(bitss); bi++)
        if (!GP_ARM64 || bitss[bi] % 3 == 0 || bitss[bi] % 4 == 0)
        for (size_t gi = 0; gi < LEN(gs_grid); gi++)
            for (size_t di = 0; di < LEN(sdt_grid); di++)
                for (size_t ri = 0; ri < LEN(brows); ri++)
                    for (size_t ci = 0; ci < LEN(bgroups); ci++) {
                        const int gs = gs_grid[gi], bits = bitss[bi];
                        const bool q8able = bits == 4 || bits == 8;
                        const int64_t rows = brows[ri], cols = bgroups[ci] * gs;
                        struct tmat t;
                        make_quant(&t, rows, cols, bits, gs, sdt_grid[di], (uint64_t)(5000 + cases));
                        cr_assert(kern_blockable(&t.m));
                        uint8_t *buf;
                        struct wmat b = block_copy(&t.m, &buf);
                        float *ra = malloc((size_t)cols * sizeof *ra), *rb = malloc((size_t)cols * sizeof *rb);
                        cr_assert(ra && rb);
                        for (int64_t r = 0; r < rows; r++) {
                            kern_row_f32(&t.m, r, ra);
                            kern_row_f32(&b, r, rb);
                            cr_assert_eq(memcmp(ra, rb, (size_t)cols * sizeof *ra), 0, "row %lld looked up", (long long)r);
                        }
                        /* 13: eight tokens at once, four, one; 61: AMX's 16 first (x86, the int8 kernels; one
                         * group and 17: lanes reached twice) */
                        static const int64_t ns[] = {1, 5, 13, 61};
                        for (size_t ni = 0; ni < LEN(ns); ni++) {
                            const int64_t n = ns[ni];
                            if (n == 61 && !(GP_X86 && q8able && (bgroups[ci] == 1 || bgroups[ci] == 17)))
                                continue;
                            uint64_t seed = (uint64_t)(6000 + cases);
                            float *x = rand_vec(&seed, (size_t)(n * cols)), *want = nan_vec((size_t)(n * rows));
                            float *y = nan_vec((size_t)(n * rows));
                            if (q8able) {
                                q8_run(kern_q8dot_ref, &t.m, x, n, want);
                                q8_run(kern_q8dot_ref, &b, x, n, y);
                                cr_assert_eq(memcmp(want, y, (size_t)(n * rows) * sizeof *y), 0,
                                             "q%d g%d %s %lld x %lld n %lld: kern_q8dot_ref on blocks", bits, gs,
                                             dtype_table[sdt_grid[di]].name, (long long)rows, (long long)cols,
                                             (long long)n);
                            }
                            for (const struct q8twin *tw = q8twins; q8able && tw->name; tw++)
                                if (cpu_has(tw->need)) {
                                    memset(y, 0xFF, (size_t)(n * rows) * sizeof *y);
                                    q8_run(tw->fn, &b, x, n, y);
                                    cr_assert_eq(memcmp(want, y, (size_t)(n * rows) * sizeof *y), 0,
                                                 "q%d g%d %s %lld x %lld n %lld: %s on blocks", bits, gs,
                                                 dtype_table[sdt_grid[di]].name, (long long)rows, (long long)cols,
                                                 (long long)n, tw->name);
                                }
                            if (q8able && q8.q8dot) {
                                memset(y, 0xFF, (size_t)(n * rows) * sizeof *y);
                                kern_matmul(&q8, &b, x, n, y, 2);
                                cr_assert_eq(memcmp(want, y, (size_t)(n * rows) * sizeof *y), 0, "kern_matmul on blocks");
                            }
                            kern_matmul_ref(&t.m, x, n, want, 0, rows);
                            kern_matmul_ref(&b, x, n, y, 0, rows);
                            cr_assert_eq(memcmp(want, y, (size_t)(n * rows) * sizeof *y), 0, "kern_matmul_ref on blocks");
                            for (size_t pi = 0; pi < LEN(paths); pi++) /* the exact kernels: rows, then blocks */
                                if (paths[pi].kind == (bits == 4 ? WK_Q4 : bits == 8 ? WK_Q8 : WK_OTHER) &&
                                    path_available(&paths[pi])) {
                                    paths[pi].fn(&t.m, x, n, want, 0, rows);
                                    memset(y, 0xFF, (size_t)(n * rows) * sizeof *y);
                                    paths[pi].fn(&b, x, n, y, 0, rows);
                                    cr_assert_eq(memcmp(want, y, (size_t)(n * rows) * sizeof *y), 0,
                                                 "q%d g%d %s %lld x %lld n %lld: %s on blocks", bits, gs,
                                                 dtype_table[sdt_grid[di]].name, (long long)rows, (long long)cols,
                                                 (long long)n, paths[pi].name);
                                    const int64_t r0 = 5, r1 = rows - 3; /* rows inside blocks at both ends */
                                    memset(y, 0xFF, (size_t)(n * rows) * sizeof *y);
                                    paths[pi].fn(&b, x, n, y, r0, r1);
                                    for (int64_t k = 0; k < n * rows; k++)
                                        cr_assert(k % rows >= r0 && k % rows < r1 ? memcmp(&want[k], &y[k], sizeof *y) == 0
                                                                                   : isnan(y[k]),
                                                  "%s on blocks, rows [%lld, %lld): y[%lld]", paths[pi].name,
                                                  (long long)r0, (long long)r1, (long long)k);
                                }
                            free(x);
                            free(want);
                            free(y);
                        }
                        free(ra);
                        free(rb);
                        free(buf);
                        tmat_free(&t);
                        cases++;
                    }
    kern_free(&q8);
    cr_log_info("kernels_q8: %d blocked shapes bitwise equal", cases);
}

/* Which matrices take the blocked layout: affine, gs 32-128, whole blocks
 * of rows, some columns, rows contiguous. */
Test(kernels_q8, blockable)
{
    struct tmat t;
    make_quant(&t, 32, 128, 4, 64, DT_BF16, 71);
    cr_assert(kern_blockable(&t.m));
    t.m.rows = 40;
    cr_assert(!kern_blockable(&t.m), "rows not a multiple of 16");
    t.m.rows = 16;
    t.m.cols = 0;
    cr_assert(!kern_blockable(&t.m), "no columns (no groups to lay out)");
    t.m.cols = 128;
    t.m.row_stride = 2 * t.m.row_bytes;
    cr_assert(!kern_blockable(&t.m), "a split view (rows apart)");
    tmat_free(&t);
    make_quant(&t, 32, 128, 3, 128, DT_BF16, 72);
    cr_assert(kern_blockable(&t.m), "3-bit codes");
    tmat_free(&t);
    make_mx(&t, 32, 128, QM_MXFP4, 73);
    cr_assert(!kern_blockable(&t.m), "microscaling");
    tmat_free(&t);
}

#if GP_X86
/* kern_q8input_part_avx512 and _avx2 fill the same buffer as the definition,
 * bit for bit, part by part (a whole part of KERN_QINPUT_PART tokens, then 3;
 * the last part first), for every (bits, gs), odd group counts (the gathers'
 * masked lanes), and hostile groups: a NaN, an inf, all zeros, a max that
 * underflows d, and values at x/d = k + 0.5 (ties to even). */
static const struct {
    const char *name;
    q8prep_fn fn;
    enum cpu_feature need;
} q8preps[] = {{"avx512", kern_q8input_part_avx512, CPU_AVX512}, {"avx2", kern_q8input_part_avx2, CPU_AVX2}};

Test(kernels_q8, prepare_twins_bitwise_equal_reference)
{
    int cases = 0;
    for (size_t pi = 0; pi < LEN(q8preps); pi++)
    for (int bits = 4; bits <= 8 && cpu_has(q8preps[pi].need); bits += 4)
        for (size_t gi = 0; gi < LEN(gs_grid); gi++)
            for (size_t ci = 0; ci <= LEN(q8_groups); ci++) {
                const int gs = gs_grid[gi];
                const int64_t ng = ci < LEN(q8_groups) ? q8_groups[ci] : 293, cols = ng * gs, n = KERN_QINPUT_PART + 3;
                struct tmat t;
                make_quant(&t, 1, cols, bits, gs, DT_BF16, (uint64_t)(5000 + cases));
                uint64_t seed = (uint64_t)(6000 + cases);
                float *x = rand_vec(&seed, (size_t)(n * cols));
                x[0 * cols + 1] = NAN;                                  /* token 0, group 0 */
                if (ng > 1)
                    x[1 * cols + gs + 3] = -INFINITY;                   /* token 1, group 1 */
                for (int64_t j = 0; j < gs; j++) {
                    x[2 * cols + j] = j == 5 ? -0.0f : 0.0f;            /* token 2, group 0: zeros */
                    x[1 * cols + j] = j == 7 ? 1e-44f : 0.0f;           /* token 1, group 0: d underflows */
                }
                if (ng > 2)
                    for (int64_t j = 0; j < gs; j++)                    /* token 2, group 2: x/d = k + 0.5 */
                        x[2 * cols + 2 * gs + j] = j == 0 ? 127.0f : (float)((j % 254) - 127) + 0.5f;
                struct kern_q8input a, b;
                void *ba = malloc(kern_q8input_bytes(&t.m, n)), *bb = malloc(kern_q8input_bytes(&t.m, n));
                cr_assert(ba && bb);
                memset(bb, 0x5A, kern_q8input_bytes(&t.m, n)); /* every byte the preparation leaves is checked */
                q8_prepare(&t.m, x, n, ba, &a);
                for (int64_t part = kern_q8input_layout(&t.m, n, bb, &b) - 1; part >= 0; part--) /* any order */
                    q8preps[pi].fn(&t.m, x, n, bb, part);
                cr_assert_eq(a.stride, b.stride);
                cr_assert_eq(memcmp(a.d, b.d, (size_t)(n * ng) * sizeof *a.d), 0, "q%d g%d %lld groups: d", bits, gs,
                             (long long)ng);
                cr_assert_eq(memcmp(a.xsum, b.xsum, (size_t)(n * ng) * sizeof *a.xsum), 0,
                             "q%d g%d %lld groups: group sums", bits, gs, (long long)ng);
                cr_assert_eq(memcmp(a.xq, b.xq, (size_t)(n * a.stride)), 0, "q%d g%d %lld groups: xq", bits, gs,
                             (long long)ng);
                for (int64_t i = 0; bits == 8 && i < n * a.stride / 16; i++) { /* Σ of each 16 xq */
                    int32_t sum = 0;
                    for (int j = 0; j < 16; j++)
                        sum += a.xq[16 * i + j];
                    cr_assert(a.qsum[i] == sum && b.qsum[i] == sum, "q8 g%d: qsum[%lld] %d / %d, xq sum %d", gs,
                              (long long)i, a.qsum[i], b.qsum[i], sum);
                }
                for (int64_t i = 0; bits == 8 && i < n * a.stride; i++) { /* xqs: of whole 128s, 32-63 <-> 64-95 */
                    const int64_t c = i % a.stride, g = c - c % 128, o = c % 128;
                    const int64_t from = g + 128 > a.stride ? c : g + (o >= 32 && o < 64 ? o + 32 : o >= 64 && o < 96 ? o - 32 : o);
                    cr_assert(a.xqs[i] == a.xq[i - c + from] && b.xqs[i] == a.xqs[i], "q8 g%d: xqs[%lld]", gs, (long long)i);
                }
                cr_assert(bits == 8 || (!a.qsum && !b.qsum && !a.xqs && !b.xqs));
                cr_assert(isnan(a.d[0]) && a.d[ng] == 0.0f && a.d[2 * ng] == 0.0f, "the hostile groups are there");
                free(ba);
                free(bb);
                free(x);
                tmat_free(&t);
                cases++;
            }
    cr_log_info("kernels_q8: %d preparations bitwise equal", cases);
    cr_assert(cases > 0 || !cpu_has(CPU_AVX2), "a twin ran");
}

#endif

/* Each x is represented as d·xq with |x − d·xq| ≤ d/2 (d = max|x|/127 of its
 * group), so |y_q8 − y| ≤ Σ_j |s_g|·q_j·d_g/2, plus the float32 rounding of
 * the sums (KERN_REL_TOL·S as above). A code paired with another weight's xq
 * (a nibble or byte order mistake) costs ~|s·q·x| per weight, far over it. */
Test(kernels_q8, reference_within_int8_error)
{
    double worst = 0.0;
    for (int bits = 4; bits <= 8; bits += 4)
        for (size_t gi = 0; gi < LEN(gs_grid); gi++) {
            int gs = gs_grid[gi];
            int64_t rows = 65, cols = 5 * gs, n = 3;
            struct tmat t;
            make_quant(&t, rows, cols, bits, gs, DT_BF16, (uint64_t)(3000 + bits * 1000 + gs));
            uint64_t seed = (uint64_t)(4000 + gs + bits);
            float *x = rand_vec(&seed, (size_t)(n * cols)), *y = nan_vec((size_t)(n * rows));
            double *truth = malloc((size_t)(n * rows) * sizeof *truth), *mag = malloc((size_t)(n * rows) * sizeof *mag);
            cr_assert(truth && mag);
            exact(t.wd, t.mag, cols, 0, 0, x, n, rows, cols, truth, mag);
            q8_run(kern_q8dot_ref, &t.m, x, n, y);
            for (int64_t tk = 0; tk < n; tk++)
                for (int64_t r = 0; r < rows; r++) {
                    double bound = 0.0;
                    for (int64_t g = 0; g < cols / gs; g++) {
                        float amax = 0.0f, sc;
                        for (int64_t j = g * gs; j < (g + 1) * gs; j++)
                            amax = fmaxf(amax, fabsf(x[tk * cols + j]));
                        dtype_to_f32(DT_BF16, t.m.s + (size_t)r * t.m.srow_bytes + (size_t)g * 2, &sc, 1);
                        for (int64_t j = g * gs; j < (g + 1) * gs; j++)
                            bound += fabs((double)sc) * (double)quant_code_at(t.m.w + (size_t)r * t.m.row_stride,
                                                                              (size_t)j, bits) *
                                     (double)amax / 127.0 / 2.0;
                    }
                    double err = fabs((double)y[tk * rows + r] - truth[tk * rows + r]);
                    cr_assert(err <= bound * 1.0001 + KERN_REL_TOL * mag[tk * rows + r] + KERN_ABS_TOL,
                              "q%d g%d row %lld token %lld: |q8 - exact| %.3g over the int8 bound %.3g", bits, gs,
                              (long long)r, (long long)tk, err, bound);
                    if (bound > 0 && err / bound > worst)
                        worst = err / bound;
                }
            free(x);
            free(y);
            free(truth);
            free(mag);
            tmat_free(&t);
        }
    cr_log_info("kernels_q8: worst |q8 - exact| / int8 bound %.3f", worst);
    cr_assert(worst > 0.01, "the int8 input does change results (else this test measures nothing)");
}

/* kern_matmul with KERN_Q8: the q8 dot on every supported matrix (MLX affine
 * and ggml types), bitwise the same for 1, 2 and 3 threads and for a token
 * alone or in a 131-token call; other matrices (3-bit, bf16) exactly as
 * KERN_BEST computes them. */
Test(kernels_q8, matmul_threads_tokens_dispatch, .timeout = TH_TIMEOUT(60))
{
    struct kern_table q8, best;
    kern_init(&q8, KERN_Q8);
    kern_init(&best, KERN_BEST);
    struct tmat mats[6];
    make_quant(&mats[0], 130, 192, 4, 64, DT_BF16, 51);
    make_quant(&mats[1], 65, 160, 8, 32, DT_F32, 52);
    make_quant(&mats[2], 70, 128, 3, 128, DT_F16, 53);
    make_float(&mats[3], 65, 257, DT_BF16, 54);
    make_ggml(&mats[4], 65, 512, 5, 55); /* Q6_K: codes stored with an offset */
    make_ggml(&mats[5], 65, 512, 3, 56); /* Q4_K: nibbles in its own order */
    cr_assert(ggml_fused[5].mode == QM_GGML_Q6_K && ggml_fused[3].mode == QM_GGML_Q4_K);
    const int64_t n = 131;
    for (size_t i = 0; i < LEN(mats); i++) {
        const struct wmat *w = &mats[i].m;
        size_t ny = (size_t)(n * w->rows);
        uint64_t s = 70 + i;
        float *x = rand_vec(&s, (size_t)(n * w->cols)), *y[3], *want = nan_vec(ny), *y1 = nan_vec((size_t)w->rows);
        const bool int8 = kern_q8_supports(w) || kern_gtype_of(w->mode);
        cr_assert_eq(int8, i != 2 && i != 3);
        bool q8path = int8 && q8.q8dot; /* without int8 kernels KERN_Q8 is KERN_BEST */
        if (q8path)
            q8_run(q8.q8dot, w, x, n, want);
        else
            kern_matmul(&best, w, x, n, want, 1);
        for (int th = 1; th <= 3; th++) {
            y[th - 1] = nan_vec(ny);
            kern_matmul(&q8, w, x, n, y[th - 1], th);
            cr_assert_eq(memcmp(y[th - 1], want, ny * sizeof(float)), 0, "matrix %zu, %d threads: not the expected bits",
                         i, th);
        }
        for (int64_t t = 0; t < n; t += 13) {
            kern_matmul(&q8, w, x + t * w->cols, 1, y1, 2);
            cr_assert_eq(memcmp(y1, want + t * w->rows, (size_t)w->rows * sizeof *y1), 0,
                         "matrix %zu: token %lld alone differs from the batch", i, (long long)t);
        }
        for (int th = 0; th < 3; th++)
            free(y[th]);
        free(x);
        free(want);
        free(y1);
        tmat_free(&mats[i]);
    }
    kern_free(&q8);
    kern_free(&best);
}

/* Hostile activations: a NaN or inf in a group makes the rows' outputs NaN
 * (never converted to int8), an all-zero group and one whose d underflows to 0
 * add only their bias terms, and the other tokens are untouched. */
Test(kernels_q8, nan_inf_zero_groups)
{
    struct tmat t;
    make_quant(&t, 9, 128, 4, 64, DT_BF16, 61);
    const int64_t n = 4;
    uint64_t s = 62;
    float *x = rand_vec(&s, (size_t)(n * 128)), *a = nan_vec((size_t)(n * 9)), *b = nan_vec((size_t)(n * 9));
    x[0 * 128 + 5] = NAN;
    x[1 * 128 + 70] = INFINITY;
    for (int j = 0; j < 64; j++)
        x[2 * 128 + j] = 0.0f;
    for (int j = 64; j < 128; j++) /* max|x| so small that d = max/127 underflows to 0: no 0/0 */
        x[2 * 128 + j] = j == 70 ? 1e-44f : 0.0f;
    struct kern_q8input in;
    void *buf = malloc(kern_q8input_bytes(&t.m, n));
    cr_assert(buf);
    q8_prepare(&t.m, x, n, buf, &in);
    cr_assert(isnan(in.d[0]) && !isnan(in.d[1]) && isnan(in.d[3]) && in.d[4] == 0.0f && in.d[5] == 0.0f);
    for (int j = 0; j < 128; j++)
        cr_assert_eq(in.xq[2 * in.stride + j], 0, "token 2: zero and underflowing groups keep xq = 0");
    kern_q8dot_ref(&t.m, &in, n, a, 0, 9, NULL);
    for (const struct q8twin *tw = q8twins; tw->name; tw++)
        if (cpu_has(tw->need)) {
            memset(b, 0xFF, sizeof(float) * (size_t)(n * 9));
            tw->fn(&t.m, &in, n, b, 0, 9, NULL); /* by rows: no scratch */
            cr_assert_eq(memcmp(a, b, sizeof(float) * (size_t)(n * 9)), 0, "%s", tw->name);
        }
    free(buf);
    float *one = nan_vec(9);
    q8_run(kern_q8dot_ref, &t.m, x + 3 * 128, 1, one);
    for (int r = 0; r < 9; r++) {
        cr_assert(isnan(a[0 * 9 + r]) && isnan(a[1 * 9 + r]), "row %d: NaN/inf input must give NaN", r);
        cr_assert(isfinite(a[2 * 9 + r]) && isfinite(a[3 * 9 + r]));
        cr_assert_eq(memcmp(&a[3 * 9 + r], &one[r], sizeof(float)), 0, "token 3 depends on the others");
    }
    free(x);
    free(a);
    free(b);
    free(one);
    tmat_free(&t);
}

/* ------------------------------------------------------------------ the next job's plan */


/* ------------------------------------------------------------------ attention */

/* Keys and values of a test: [P, G, d] each, position-major; a mask hides
 * key p from query row r when hide[r * P + p]. */
struct kv_test {
    const float *k, *v;
    const uint8_t *hide;
    int64_t P, G, d;
};

static const float *kv_test_entry(const void *ctx, int64_t row, int64_t p, int64_t g, int which, float *buf)
{
    const struct kv_test *t = ctx;
    (void)buf;
    if (t->hide && t->hide[row * t->P + p])
        return NULL;
    return (which ? t->v : t->k) + (p * t->G + g) * t->d;
}

/* kern_attention: every level's table gives the scalar table's bits (1 to 3
 * threads by rows; 17 threads, split for the 4-row steps), each query row
 * alone gives the same bits as in its step (1 thread: by rows; 8 threads:
 * split), and those are within float rounding of a float64 evaluation; on grouped heads,
 * full and sliding windows (5, and 70 across the 64-position chunks of the
 * values' sums), queries at scattered positions, masked keys, head dims
 * around the 16-lane steps; steps of 4 rows over 23 and 200 keys and of 20
 * rows over 150 keys (d 70); 12 heads on one KV head (by rows two blocks of
 * heads, split one group). */
Test(kernels, attention_levels_bitwise_and_close_to_float64)
{
    static const struct {
        int64_t d, N, P, G;
    } cases[] = {{16, 4, 23, 2}, {37, 4, 23, 2}, {64, 4, 23, 2}, {70, 20, 150, 2}, {24, 4, 200, 1}};
    struct kern_table ref, best;
    kern_init(&ref, KERN_SCALAR);
    kern_init(&best, KERN_BEST);
    for (size_t ci = 0; ci < LEN(cases); ci++)
        for (int window = 0; window <= 70; window += window ? 65 : 5) {
            const int64_t d = cases[ci].d, G = cases[ci].G, Nq = 12, N = cases[ci].N, P = cases[ci].P;
            uint64_t s = 500 + (uint64_t)(ci * 7 + (size_t)window);
            float *q = rand_vec(&s, (size_t)(N * Nq * d)), *k = rand_vec(&s, (size_t)(P * G * d));
            float *v = rand_vec(&s, (size_t)(P * G * d));
            int64_t pos[20] = {0, 7, P - 2, P - 1};
            for (int64_t r = 4; r < N; r++)
                pos[r] = (r * 37 + 5) % P;
            uint8_t *hide = calloc((size_t)(N * P), 1);
            hide[2 * P + P - 3] = hide[3 * P + 0] = 1;          /* masked keys */
            for (int64_t r = 4; r < N; r++)
                hide[r * P + pos[r] / 2] = 1;
            struct kv_test kv = {k, v, hide, P, G, d};
            float *out[7], *scratch = malloc(kern_attn_scratch(N, Nq, P, d, 17) * sizeof(float));
            cr_assert(scratch && hide);
            static const int threads[5] = {1, 1, 2, 3, 17};
            for (int run = 0; run < 5; run++) {
                out[run] = nan_vec((size_t)(N * Nq * d));
                struct kern_attn a = {.q = q, .out = out[run], .pos = pos, .N = N, .Nq = Nq, .G = G, .d = d,
                                      .window = window, .kv = kv_test_entry, .ctx = &kv, .keys = P,
                                      .scratch = scratch};
                kern_attention(run ? &best : &ref, &a, threads[run]);
            }
            for (int run = 5; run < 7; run++) {
                out[run] = nan_vec((size_t)(N * Nq * d));
                for (int64_t r = 0; r < N; r++) { /* row r alone, as a decode step */
                    struct kv_test kr = {k, v, hide + r * P, P, G, d};
                    struct kern_attn a = {.q = q + r * Nq * d, .out = out[run] + r * Nq * d, .pos = pos + r, .N = 1,
                                          .Nq = Nq, .G = G, .d = d, .window = window, .kv = kv_test_entry,
                                          .ctx = &kr, .keys = pos[r] + 1, .scratch = scratch};
                    kern_attention(&best, &a, run == 5 ? 1 : 8);
                }
            }
            for (int run = 1; run < 7; run++)
                cr_assert_eq(memcmp(out[0], out[run], (size_t)(N * Nq * d) * sizeof(float)), 0,
                             "d %lld window %d: run %d of %s (%s) differs from the scalar table", (long long)d,
                             window, run, best.name, run < 5 ? "the step" : "rows alone");
            double worst = 0.0;
            for (int64_t r = 0; r < N; r++)
                for (int64_t h = 0; h < Nq; h++) {
                    int64_t g = h / (Nq / G), k0 = window && pos[r] - window + 1 > 0 ? pos[r] - window + 1 : 0;
                    double sc[200], m = -(double)INFINITY, sum = 0.0;
                    for (int64_t p = k0; p <= pos[r]; p++) {
                        sc[p] = -(double)INFINITY;
                        if (hide[r * P + p])
                            continue;
                        double x = 0.0;
                        for (int64_t i = 0; i < d; i++)
                            x += (double)q[(r * Nq + h) * d + i] * (double)k[(p * G + g) * d + i];
                        sc[p] = x;
                        m = fmax(m, x);
                    }
                    for (int64_t p = k0; p <= pos[r]; p++)
                        sum += sc[p] == -(double)INFINITY ? 0.0 : exp(sc[p] - m);
                    for (int64_t i = 0; i < d; i++) {
                        double o = 0.0;
                        for (int64_t p = k0; p <= pos[r]; p++)
                            o += (sc[p] == -(double)INFINITY ? 0.0 : exp(sc[p] - m) / sum) * (double)v[(p * G + g) * d + i];
                        worst = fmax(worst, fabs(o - (double)out[0][(r * Nq + h) * d + i]));
                    }
                }
            cr_assert_lt(worst, 1e-5, "d %lld window %d: %g from float64", (long long)d, window, worst);
            for (int run = 0; run < 7; run++)
                free(out[run]);
            free(scratch);
            free(hide);
            free(q);
            free(k);
            free(v);
        }
    kern_free(&ref);
    kern_free(&best);
}
