/* dispatch.c - the kernel table of a level, and the matrix products on it:
 * each matrix split into tiles of rows fixed by its shape and the token
 * count (never by the thread count), its input prepared once, the tiles
 * run on the thread pool. */
#include <stdlib.h>
#include <string.h>

#include "core/cpu.h"
#include "kernels/internal.h"
#include "quant/quant.h"

#define ROW_GROUPS 16 /* groups of a blocked row gathered for one dequantization */

/* Row r of a blocked matrix into out[cols] on the fastest path: ROW_GROUPS
 * groups at a time gathered from their records (a group's codes are whole
 * words: gs·bits is a multiple of 32 for every supported layout). */
static void blocked_row_f32(const struct wmat *w, int64_t r, float *out)
{
    uint8_t codes[ROW_GROUPS * 128], s[ROW_GROUPS * 4], b[ROW_GROUPS * 4]; /* gs·bits/8 <= 128; params <= 4 bytes */
    const int64_t words = w->gs * w->bits / 32, ng = w->cols / w->gs;
    const size_t psize = dtype_table[w->dtype].bits / 8;
    for (int64_t g0 = 0; g0 < ng; g0 += ROW_GROUPS) {
        const int64_t G = ng - g0 < ROW_GROUPS ? ng - g0 : ROW_GROUPS;
        for (int64_t g = 0; g < G; g++) {
            const size_t rec = kern_block_off(w, r / KERN_BLOCK_ROWS, g0 + g), l = (size_t)(r % KERN_BLOCK_ROWS);
            for (int64_t k = 0; k < words; k++) /* word k of row l at 64k + 4l of the group's record */
                memcpy(codes + 4 * (g * words + k), w->w + rec + (size_t)(KERN_BLOCK_ROWS * 4 * k) + 4 * l, 4);
            memcpy(s + (size_t)g * psize, w->s + rec + l * psize, psize);
            memcpy(b + (size_t)g * psize, w->b + rec + l * psize, psize);
        }
        quant_dequant_row(codes, s, b, w->dtype, (size_t)(G * w->gs), w->gs, w->bits, out + g0 * w->gs);
    }
}

void kern_row_f32(const struct wmat *w, int64_t r, float *out)
{
    const uint8_t *row = w->w + (size_t)r * w->row_stride;
    if (w->blocked)
        blocked_row_f32(w, r, out);
    else if (w->quantized && w->mode != QM_AFFINE)
        dequant_mx_row(w->mode, row, w->s + (size_t)r * w->srow_bytes, (size_t)w->cols, out);
    else if (w->quantized)
        quant_dequant_row(row, w->s + (size_t)r * w->srow_bytes, w->b + (size_t)r * w->srow_bytes, w->dtype,
                          (size_t)w->cols, w->gs, w->bits, out);
    else
        quant_to_f32(w->dtype, row, out, (size_t)w->cols);
}

/* The int8 kernels this CPU has (kernels.h), or false. */
static bool pick_q8(q8dot_fn *dot, q8prep_fn *prep, const char **name)
{
    *prep = kern_q8input_prepare;
#if GP_X86
    if (cpu_has(CPU_AVX512))
        *prep = kern_q8input_prepare_avx512;
    if (cpu_has(CPU_AVX512_VNNI)) {
        *dot = kern_q8dot_avx512;
        *name = "avx512-vnni";
    } else if (cpu_has(CPU_AVX_VNNI)) {
        *dot = kern_q8dot_avxvnni;
        *name = "avx-vnni";
    } else if (cpu_has(CPU_AVX2)) {
        *dot = kern_q8dot_avx2;
        *name = "avx2";
    } else {
        return false;
    }
    return true;
#elif KERN_NEON_DOTPROD
    if (!cpu_has(CPU_DOTPROD))
        return false;
    *dot = kern_q8dot_neon;
    *name = "neon-dotprod";
    return true;
#else
    (void)dot, (void)name;
    return false;
#endif
}

bool kern_has_q8(void)
{
    q8dot_fn dot;
    q8prep_fn prep;
    const char *name;
    return pick_q8(&dot, &prep, &name);
}

void kern_init(struct kern_table *t, enum kern_level level)
{
    memset(t, 0, sizeof *t);
    t->name = "scalar";
    t->dot = kern_dot_ref;
    t->dots = kern_dots_ref;
    t->axpy = kern_axpy_ref;
    t->gelu_mul = kern_gelu_mul_ref;
    t->softcap = kern_softcap_ref;
    t->qdot = kern_qdot_ref;
    t->matvec_bf16 = kern_matvec_bf16_ref;
    t->scratch = calloc(KERN_MANY, sizeof *t->scratch); /* without it (no memory): kern_matmul_ref */
    t->ws = calloc(POOL_MAX_THREADS, sizeof *t->ws); /* without it (no memory): no GEMM paths */
    t->blas = level == KERN_BLAS && t->ws && kern_blas_init();
    if (level == KERN_SCALAR)
        return;
#if GP_X86
    if (cpu_has(CPU_AVX512)) {
        t->name = "avx512";
        t->dot = kern_dot_avx512;
        t->dots = kern_dots_avx512;
        t->axpy = kern_axpy_avx512;
        t->gelu_mul = kern_gelu_mul_avx512;
        t->softcap = kern_softcap_avx512;
        t->qdot = kern_qdot_avx512;
        t->qgemm = t->ws ? kern_qgemm_avx512 : NULL;
        t->bf16gemm = t->ws ? kern_bf16gemm_avx512 : NULL;
        t->refgemm = t->ws ? kern_refgemm_avx512 : NULL;
        t->matvec_bf16 = kern_matvec_bf16_avx512;
    } else if (cpu_has(CPU_AVX2)) {
        t->name = "avx2";
        t->dot = kern_dot_avx2;
        t->dots = kern_dots_avx2;
        t->axpy = kern_axpy_avx2;
        t->gelu_mul = kern_gelu_mul_avx2;
        t->softcap = kern_softcap_avx2;
        t->qdot = kern_qdot_avx2;
        t->matvec_bf16 = kern_matvec_bf16_avx2;
    }
#elif GP_ARM64
    if (cpu_has(CPU_NEON)) {
        t->name = "neon";
        t->dot = kern_dot_neon;
        t->dots = kern_dots_neon;
        t->axpy = kern_axpy_neon;
        t->qdot = kern_qdot_neon;
        t->matvec_bf16 = kern_matvec_bf16_neon;
    }
#endif
    if (level == KERN_Q8)
        pick_q8(&t->q8dot, &t->q8prep, &t->q8name);
}

void kern_free(struct kern_table *t)
{
    for (int i = 0; t->ws && i < POOL_MAX_THREADS; i++)
        free(t->ws[i].buf);
    free(t->ws);
    t->ws = NULL;
    t->blas = false;
    t->qgemm = NULL;
    t->bf16gemm = NULL;
    t->refgemm = NULL;
    for (int i = 0; t->scratch && i < KERN_MANY; i++)
        free(t->scratch[i].buf);
    free(t->scratch);
    t->scratch = NULL;
}

void *kern_ws_reserve(struct kern_ws *ws, size_t bytes)
{
    if (ws->cap < bytes) {
        free(ws->buf);
        ws->buf = aligned_alloc(64, (bytes + 63) / 64 * 64);
        ws->cap = ws->buf ? bytes : 0;
    }
    return ws->buf;
}

/* Scratch i holding at least `bytes`; NULL when that cannot be had. */
static void *scratch(const struct kern_table *t, int i, size_t bytes)
{
    struct kern_scratch *s = t->scratch ? &t->scratch[i] : NULL;
    if (s && s->cap < bytes) {
        free(s->buf);
        s->buf = aligned_alloc(64, (bytes + 63) / 64 * 64); /* the inputs' vector loads stay within cache lines */
        s->cap = s->buf ? bytes : 0;
    }
    return s ? s->buf : NULL;
}

#define GEMM_ROWS 64 /* rows of a blocked GEMM's tile */

int kern_reserve(struct kern_table *t, int64_t n, int64_t cols, int threads)
{
    size_t most = 0, gemm = 0;
    for (int k = 0; k < 4; k++) { /* the inputs the fused kernels take, affine and MX: the largest at group 16 */
        const int bits = k % 2 ? 8 : 4;
        struct wmat w = {.quantized = true, .mode = k < 2 ? QM_AFFINE : bits == 4 ? QM_MXFP4 : QM_MXFP8, .bits = bits,
                         .gs = 16, .cols = (cols + 31) / 32 * 32};
        size_t b = kern_qinput_bytes(&w, n), b8 = kern_q8input_bytes(&w, n), g = kern_qgemm_ws_bytes(&w, GEMM_ROWS, n);
        most = b > most ? b : most;
        most = b8 > most ? b8 : most;
        gemm = g > gemm ? g : gemm;
    }
    struct wmat bf = {.dtype = DT_BF16, .cols = cols}; /* the bf16 GEMM's tile; the reference's 16 rows */
    size_t g = t->bf16gemm ? kern_bf16gemm_ws_bytes(&bf, GEMM_ROWS) : 0, r = t->refgemm ? kern_refgemm_ws_bytes(&bf) : 0;
    gemm = n >= KERN_QGEMM_MIN_TOKENS && (t->qgemm || t->bf16gemm) ? (g > gemm ? g : gemm) : 0;
    gemm = r > gemm ? r : gemm; /* the reference's rows at any n */
    for (int i = 0; i < KERN_MANY; i++)
        if (!scratch(t, i, most))
            return ERR_NOMEM;
    for (int i = 0; gemm && i < threads && i < POOL_MAX_THREADS; i++)
        if (!kern_ws_reserve(&t->ws[i], gemm)) /* each worker's blocked-GEMM tile */
            return ERR_NOMEM;
    return ERR_OK;
}

/* Rows per task: about TILE_BYTES of weights per token, but no more than a
 * MIN_TASKS-th of the matrix and no fewer than TILE_ROWS, in whole steps of
 * TILE_ALIGN rows (a blocked matrix's whole blocks, as many as the exact
 * kernels run side by side). Each thread runs a contiguous share
 * of the tiles (pool_run), so it streams on across its tiles; the tile
 * size sets the granularity at which the threads even out at the end
 * (4-bit q8 decode, 2 threads, alternating steps in one process: 128 KiB
 * tiles 0.9 % faster than 512 KiB, 256 KiB the same, 64-row tiles 1.8 %
 * slower; docs/PERFORMANCE.md). Fixed by the matrix and the token count,
 * never by the thread count; and every row's result is the same whatever
 * the split (only sgemm's tiles shape rounding). */
#define TILE_ROWS 64
#define TILE_ALIGN (8 * KERN_BLOCK_ROWS) /* the exact kernels' widest step: 8 blocks */
#define TILE_BYTES (128 << 10)
#define MIN_TASKS 4

static int64_t tile_rows(const struct wmat *w, int64_t n)
{
    int64_t row_bytes = (int64_t)w->row_stride + (w->quantized ? 2 * (int64_t)w->srow_bytes : 0);
    int64_t rows = TILE_BYTES / (row_bytes * n > 0 ? row_bytes * n : 1), quarter = (w->rows + MIN_TASKS - 1) / MIN_TASKS;
    rows = rows < quarter ? rows : quarter;
    rows = (rows + TILE_ALIGN - 1) / TILE_ALIGN * TILE_ALIGN; /* whole blocks of a blocked matrix, eight at a time */
    return rows > TILE_ROWS ? rows : TILE_ROWS;
}

struct mm_job {
    matmul_fn fn;             /* or, when NULL, sgemm (blas set), q8dot, qgemm, gemm or qdot */
    bool blas;
    struct kern_ws *ws;       /* the workers' scratch (sgemm, qgemm, gemm) */
    int64_t tile_rows;
    qdot_fn qdot;
    qgemm_fn qgemm;
    gemm_fn gemm;             /* over the input as it is: bf16gemm or refgemm */
    const struct kern_qinput *qin;
    void *prep;               /* qin's buffer, when this job prepares it: in `parts` parts */
    int64_t parts;
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
    else if (j->blas)
        kern_matmul_blas_ws(j->w, j->x, j->n, j->y, r0, r1, &j->ws[worker]);
    else if (j->q8dot)
        j->q8dot(j->w, j->q8in, j->n, j->y, r0, r1);
    else if (j->qgemm)
        j->qgemm(j->w, j->qin, j->n, j->y, r0, r1, j->ws[worker].buf);
    else if (j->gemm)
        j->gemm(j->w, j->x, j->n, j->y, r0, r1, j->ws[worker].buf);
    else
        j->qdot(j->w, j->qin, j->n, j->y, r0, r1);
}

/* Whether every worker of `threads` holds a blocked GEMM's tile of `bytes`
 * (grown here, before the job runs, when a call needs more than kern_reserve made). */
static bool gemm_reserve(const struct kern_table *t, size_t bytes, int threads)
{
    for (int i = 0; i < pool_workers(threads, INT64_MAX); i++)
        if (!kern_ws_reserve(&t->ws[i], bytes))
            return false;
    return true;
}

/* Chooses j's path for w; qin/q8in receive the input prepared for it in
 * scratch i, unless prev (the job of another matrix of the same call) holds
 * one made for the same bits, group size and columns (and layout), which is
 * then shared. */
static void mm_setup(const struct kern_table *t, int i, struct mm_job *j, const struct wmat *w, const float *x,
                     int64_t n, float *y, int threads, struct kern_qinput *qin, struct kern_q8input *q8in,
                     const struct mm_job *prev)
{
    *j = (struct mm_job){.fn = kern_matmul_ref, .tile_rows = tile_rows(w, n), .w = w, .x = x, .n = n, .y = y};
    bool same = prev && prev->w->quantized && w->quantized && prev->w->mode == w->mode && prev->w->bits == w->bits &&
                prev->w->gs == w->gs && prev->w->cols == w->cols;
    const struct kern_q8input *q8 = same ? prev->q8in : NULL;
    const struct kern_qinput *q = same ? prev->qin : NULL;
    void *buf;
    if (t->q8dot && kern_q8_supports(w) &&
        (q8 || ((buf = scratch(t, i, kern_q8input_bytes(w, n))) && (t->q8prep(w, x, n, buf, q8in), true)))) {
        j->fn = NULL;
        j->q8dot = t->q8dot;
        j->q8in = q8 ? q8 : q8in;
    } else if (n >= KERN_GEMM_MIN_TOKENS && t->blas) {
        j->fn = NULL;
        j->blas = true;
        j->ws = t->ws;
        j->tile_rows = KERN_BLAS_ROWS;
    } else if (w->quantized && (w->bits == 4 || w->bits == 8) && t->qdot) {
        /* the same bits at GEMM speed for many tokens, its input laid out for it */
        bool gemm = n >= kern_qgemm_min_tokens(w) && t->qgemm &&
                    gemm_reserve(t, kern_qgemm_ws_bytes(w, w->rows < GEMM_ROWS ? w->rows : GEMM_ROWS, n), threads);
        q = q && q->gemm == gemm ? q : NULL;
        if (q || (buf = scratch(t, i, kern_qinput_bytes(w, n)))) {
            j->fn = NULL; /* the input is prepared once (kern_matmul_many's first job) and read by every tile */
            j->prep = q ? NULL : buf;
            j->parts = q ? 0 : kern_qinput_layout(w, n, gemm, buf, qin);
            j->qin = q ? q : qin;
            j->qdot = gemm ? NULL : t->qdot;
            j->qgemm = gemm ? t->qgemm : NULL;
            j->ws = t->ws;
            j->tile_rows = gemm ? GEMM_ROWS : j->tile_rows;
        }
    } else if (!w->quantized && w->dtype == DT_BF16 && n >= KERN_QGEMM_MIN_TOKENS && t->bf16gemm &&
               gemm_reserve(t, kern_bf16gemm_ws_bytes(w, w->rows < GEMM_ROWS ? w->rows : GEMM_ROWS), threads)) {
        j->fn = NULL;
        j->gemm = t->bf16gemm;
        j->ws = t->ws;
        j->tile_rows = GEMM_ROWS;
    } else if (!w->quantized && w->dtype == DT_BF16 && t->matvec_bf16) {
        j->fn = t->matvec_bf16;
    } else if (t->refgemm && gemm_reserve(t, kern_refgemm_ws_bytes(w), threads)) {
        j->fn = NULL; /* every other type: the reference's bits, 16 rows at a time */
        j->gemm = t->refgemm;
        j->ws = t->ws;
    }
}

/* The tasks of all matrices in one job: matrix i's tiles are tasks [first[i],
 * first[i + 1]), the parts of the inputs it prepares [pfirst[i], pfirst[i + 1]). */
struct many_job {
    struct mm_job j[KERN_MANY];
    int64_t first[KERN_MANY + 1], pfirst[KERN_MANY + 1];
};

static void many_task(void *arg, int64_t task, int worker)
{
    struct many_job *m = arg;
    int i = 0;
    while (task >= m->first[i + 1])
        i++;
    mm_task(&m->j[i], task - m->first[i], worker);
}

static void prep_task(void *arg, int64_t task, int worker)
{
    (void)worker;
    struct many_job *m = arg;
    int i = 0;
    while (task >= m->pfirst[i + 1])
        i++;
    const struct mm_job *j = &m->j[i];
    kern_qinput_part(j->w, j->x, j->n, j->qin->gemm, j->prep, task - m->pfirst[i]);
}

void kern_matmul_many(const struct kern_table *t, int count, const struct wmat *const w[], float *const y[],
                      const float *x, int64_t n, int threads)
{
    for (; count > KERN_MANY; count -= KERN_MANY, w += KERN_MANY, y += KERN_MANY)
        kern_matmul_many(t, KERN_MANY, w, y, x, n, threads);
    struct many_job m = {0};
    struct kern_qinput qin[KERN_MANY];
    struct kern_q8input q8in[KERN_MANY];
    for (int i = 0; i < count; i++) {
        mm_setup(t, i, &m.j[i], w[i], x, n, y[i], threads, &qin[i], &q8in[i], i ? &m.j[0] : NULL);
        m.first[i + 1] = m.first[i] + (w[i]->rows + m.j[i].tile_rows - 1) / m.j[i].tile_rows;
        m.pfirst[i + 1] = m.pfirst[i] + m.j[i].parts;
    }
    pool_run(threads, m.pfirst[count], prep_task, &m);
    pool_run(threads, m.first[count], many_task, &m);
}

void kern_matmul(const struct kern_table *t, const struct wmat *w, const float *x, int64_t n, float *y, int threads)
{
    kern_matmul_many(t, 1, &w, &y, x, n, threads);
}
