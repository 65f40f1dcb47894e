/* dispatch.c - the kernel table of a level (rows of ISAs), and the matrix
 * products on it (rows of paths): each matrix split into tiles of rows fixed
 * by its shape and the token count (never by the thread count), its input
 * prepared once, the tiles run on the thread pool. */
#include <stdlib.h>

#include "kernels/arm/arm.h"
#include "kernels/x86/x86.h"

/* The int8 kernels, the best first: the first this CPU has serves KERN_Q8. */
static const struct {
    enum cpu_feature needs;
    q8dot_fn dot;
    const char *name;
} q8_kernels[] = {
#if GP_X86
    {CPU_AMX_INT8, kern_q8dot_amx, "amx-int8"},
    {CPU_AVX512_VNNI, kern_q8dot_avx512, "avx512-vnni"},
    {CPU_AVX_VNNI, kern_q8dot_avxvnni, "avx-vnni"},
    {CPU_AVX2, kern_q8dot_avx2, "avx2"},
#elif KERN_NEON_DOTPROD
    {CPU_DOTPROD, kern_q8dot_neon, "neon-dotprod"},
#endif
    {0, NULL, NULL},
};

/* The int8 kernels this CPU has, or false. */
static bool pick_q8(q8dot_fn *dot, q8prep_fn *prep, const char **name)
{
    *prep = kern_q8input_part;
#if GP_X86
    if (cpu_has(CPU_AVX512))
        *prep = kern_q8input_part_avx512;
    else if (cpu_has(CPU_AVX2))
        *prep = kern_q8input_part_avx2;
#endif
    for (int i = 0; q8_kernels[i].dot; i++)
        if (cpu_has(q8_kernels[i].needs)) {
            *dot = q8_kernels[i].dot;
            *name = q8_kernels[i].name;
            return true;
        }
    return false;
}

bool kern_has_q8(void)
{
    struct kern_table t;
    return pick_q8(&t.q8dot, &t.q8prep, &t.q8name);
}

/* The exact kernels of each ISA, the best first: the first this CPU has
 * serves every level but KERN_SCALAR; the last, the definitions, needs nothing. */
static const struct {
    enum cpu_feature needs;
    struct kern_table k;
} isas[] = {
#if GP_X86
    {CPU_AVX512, {.name = "avx512", .qdot = kern_qdot_avx512, .matvec_bf16 = kern_matvec_bf16_avx512,
                  .dot = kern_dot_avx512, .dots = kern_dots_avx512, .axpy = kern_axpy_avx512,
                  .gelu_mul = kern_gelu_mul_avx512, .softcap = kern_softcap_avx512, .softmax = kern_softmax_avx512,
                  .qgemm = kern_qgemm_avx512,
                  .qgemm_modes = 1u << QM_AFFINE | 1u << QM_MXFP4 | 1u << QM_NVFP4 | 1u << QM_MXFP8,
                  .bf16gemm = kern_bf16gemm_avx512, .refgemm = kern_refgemm_avx512}},
    {CPU_AVX2, {.name = "avx2", .qdot = kern_qdot_avx2, .matvec_bf16 = kern_matvec_bf16_avx2, .dot = kern_dot_avx2,
                .dots = kern_dots_avx2, .axpy = kern_axpy_avx2, .gelu_mul = kern_gelu_mul_avx2,
                .softcap = kern_softcap_avx2, .softmax = kern_softmax_avx2, .qgemm = kern_qgemm_avx2,
                .qgemm_modes = 1u << QM_AFFINE | 1u << QM_MXFP4 | 1u << QM_NVFP4 | 1u << QM_MXFP8,
                .bf16gemm = kern_bf16gemm_avx2, .refgemm = kern_refgemm_avx2}},
#elif GP_ARM64
    {CPU_NEON, {.name = "neon", .qdot = kern_qdot_neon, .matvec_bf16 = kern_matvec_bf16_neon, .dot = kern_dot_neon,
                .dots = kern_dots_neon, .axpy = kern_axpy_neon, .gelu_mul = kern_gelu_mul_ref,
                .softcap = kern_softcap_ref, .softmax = kern_softmax, .qgemm = kern_qgemm_neon,
                .qgemm_modes = 1u << QM_AFFINE | 1u << QM_MXFP4 | 1u << QM_NVFP4 | 1u << QM_MXFP8,
                .bf16gemm = kern_bf16gemm_neon, .refgemm = kern_refgemm_neon}},
#endif
    {0, {.name = "scalar", .qdot = kern_qdot_ref, .matvec_bf16 = kern_matvec_bf16_ref, .dot = kern_dot_ref,
         .dots = kern_dots_ref, .axpy = kern_axpy_ref, .gelu_mul = kern_gelu_mul_ref, .softcap = kern_softcap_ref,
         .softmax = kern_softmax}},
};
#define ISAS (sizeof isas / sizeof isas[0])

void kern_init(struct kern_table *t, enum kern_level level)
{
    size_t i = 0;
    while (i + 1 < ISAS && (level == KERN_SCALAR || !cpu_has(isas[i].needs)))
        i++;
    *t = isas[i].k;
    t->scratch = calloc(KERN_MANY, sizeof *t->scratch); /* without it (no memory): kern_matmul_ref */
    t->ws = calloc(POOL_MAX_THREADS, sizeof *t->ws); /* without it (no memory): no GEMM paths */
    if (!t->ws)
        t->qgemm = NULL, t->bf16gemm = t->refgemm = NULL;
    t->blas = level == KERN_BLAS && t->ws && kern_blas_init();
    if (level == KERN_Q8)
        pick_q8(&t->q8dot, &t->q8prep, &t->q8name);
}

void kern_free(struct kern_table *t)
{
    for (int i = 0; t->ws && i < POOL_MAX_THREADS; i++)
        free(t->ws[i].buf);
    free(t->ws);
    t->ws = NULL;
    t->blas = false, t->qgemm = NULL, t->bf16gemm = t->refgemm = NULL;
    for (int i = 0; t->scratch && i < KERN_MANY; i++)
        free(t->scratch[i].buf);
    free(t->scratch);
    t->scratch = NULL;
}

#define GEMM_ROWS 64 /* rows of a blocked GEMM's tile */

/* The quantized formats the fused kernels (qdot, qgemm) take, by mode: the
 * bit widths, and the fewest tokens from which the blocked GEMM runs
 * (internal.h). */
static const struct {
    unsigned bits;            /* 1 << b for each width b */
    int64_t gemm_from;
} fused[] = {
    [QM_AFFINE] = {1u << 4 | 1u << 8, KERN_AGEMM_MIN_TOKENS},
    [QM_MXFP4] = {1u << 4, KERN_QGEMM_MIN_TOKENS},
    [QM_NVFP4] = {1u << 4, KERN_QGEMM_MIN_TOKENS},
    [QM_MXFP8] = {1u << 8, KERN_QGEMM_MIN_TOKENS},
#define GGML_FUSED(t) [QM_GGML_##t] = {1u << 8, INT64_MAX}, /* ggml blocks (kern_gtype_of): no GEMM */
    GGML_FUSED(Q4_1) GGML_FUSED(Q5_0) GGML_FUSED(Q5_1) GGML_FUSED(Q4_K) GGML_FUSED(Q5_K) GGML_FUSED(Q6_K)
    GGML_FUSED(IQ4_NL) GGML_FUSED(IQ4_XS)
#undef GGML_FUSED
};
#define FORMATS (sizeof fused / sizeof fused[0])

int kern_reserve(struct kern_table *t, int64_t n, int64_t cols, int threads)
{
    size_t most = 0, gemm = 0;
    for (size_t m = 0; m < FORMATS; m++) /* the inputs each fused format takes: the largest at group 16 */
        for (int bits = 4; bits <= 8; bits += 4) {
            if (!(fused[m].bits >> bits & 1))
                continue;
            struct wmat w = {.quantized = true, .mode = (enum qmode)m, .bits = bits, .gs = 16,
                             .cols = (cols + 31) / 32 * 32};
            size_t b = kern_qinput_bytes(&w, n), b8 = kern_q8input_bytes(&w, n);
            size_t g = fused[m].gemm_from < INT64_MAX ? kern_qgemm_ws_bytes(&w, GEMM_ROWS, n) : 0;
            most = b > most ? b : most;
            most = b8 > most ? b8 : most;
            gemm = g > gemm ? g : gemm;
        }
    struct wmat bf = {.dtype = DT_BF16, .cols = cols}; /* the bf16 GEMM's tile; the reference's 16 rows */
    size_t g = t->bf16gemm ? kern_bf16gemm_ws_bytes(&bf, GEMM_ROWS, n) : 0;
    size_t r = t->refgemm ? kern_refgemm_ws_bytes(&bf, GEMM_ROWS, n) : 0;
    gemm = n >= KERN_QGEMM_MIN_TOKENS && (t->qgemm || t->bf16gemm) ? (g > gemm ? g : gemm) : 0;
    gemm = r > gemm ? r : gemm; /* the reference's rows at any n */
    struct wmat q4 = {.quantized = true, .bits = 4, .gs = 64, .cols = cols, .blocked = true};
    size_t q = t->q8dot ? kern_q8_ws_bytes(&q4, GEMM_ROWS, n) : 0; /* the int8 kernels' codes as bytes */
    gemm = q > gemm ? q : gemm;
    for (int i = 0; i < KERN_MANY; i++)
        if (!t->scratch || !kern_ws_reserve(&t->scratch[i], most))
            return ERR_NOMEM;
    for (int i = 0; gemm && i < threads && i < POOL_MAX_THREADS; i++)
        if (!kern_ws_reserve(&t->ws[i], gemm)) /* each worker's blocked-GEMM tile */
            return ERR_NOMEM;
    return ERR_OK;
}

/* Rows per task: about TILE_BYTES of weights per token, but no more than a
 * MIN_TASKS-th of the matrix, in whole steps of the path's kernel (a blocked
 * matrix's whole blocks, as many as it runs side by side: the exact kernels'
 * 8 blocks, q8's 2), and no fewer than TILE_ROWS or one step. Each thread
 * runs a contiguous share of the tiles (pool_run), so it streams on across
 * its tiles; the tile size sets the granularity at which the threads even
 * out at the end (4-bit q8 decode, 2 threads, alternating steps in one
 * process: 128 KiB tiles 0.9 % faster than 512 KiB, 256 KiB the same, 64-row
 * tiles 1.8 % slower; a 512-token q8 prefill on 16 threads, 2-block tiles
 * against 4-block ones (24 tasks for E2B's 1,536-row matrices): 1.06-1.13×;
 * docs/PERFORMANCE.md). Fixed by the matrix and the token count, never by
 * the thread count; and every row's result is the same whatever the split
 * (only sgemm's tiles shape rounding). */
#define TILE_ROWS 64
#define TILE_BYTES (128 << 10)
#define MIN_TASKS 4
#define EXACT_STEP (8 * KERN_BLOCK_ROWS) /* the exact kernels' widest step */
#define Q8_STEP (2 * KERN_BLOCK_ROWS)    /* q8's: 2 blocks */

static int64_t tile_rows(const struct wmat *w, int64_t n, int64_t step)
{
    int64_t row_bytes = (int64_t)w->row_stride + (w->quantized ? 2 * (int64_t)w->srow_bytes : 0);
    int64_t rows = TILE_BYTES / (row_bytes * n > 0 ? row_bytes * n : 1), quarter = (w->rows + MIN_TASKS - 1) / MIN_TASKS;
    rows = rows < quarter ? rows : quarter;
    rows = (rows + step - 1) / step * step;
    int64_t fewest = step < TILE_ROWS ? step : TILE_ROWS;
    return rows > fewest ? rows : fewest;
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
    void *prep;               /* qin's or q8in's buffer, when this job prepares it: in `parts` parts */
    int64_t parts;
    q8dot_fn q8dot;
    q8prep_fn q8prep;         /* q8in's preparation, when this job makes it, */
    struct wmat q8view;       /* of this view (kern_gq8_view) */
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
        j->q8dot(j->w, j->q8in, j->n, j->y, r0, r1, j->ws ? j->ws[worker].buf : NULL);
    else if (j->qgemm)
        j->qgemm(j->w, j->qin, j->n, j->y, r0, r1, j->ws[worker].buf);
    else if (j->gemm)
        j->gemm(j->w, j->x, j->n, j->y, r0, r1, j->ws[worker].buf);
    else
        j->qdot(j->w, j->qin, j->n, j->y, r0, r1);
}

/* Whether every worker of `threads` holds a scratch (a blocked GEMM's tile)
 * of `bytes` (grown here, before the job runs, when a call needs more than
 * kern_reserve made; none needed for 0). */
static bool gemm_reserve(const struct kern_table *t, size_t bytes, int threads)
{
    for (int i = 0; bytes && i < pool_workers(threads, INT64_MAX); i++)
        if (!t->ws || !kern_ws_reserve(&t->ws[i], bytes))
            return false;
    return true;
}

/* The weights a path takes: a fused format, bf16, or any other (2/3/5/6-bit
 * affine, f16, f32). */
enum { W_FUSED = 1, W_BF16 = 2, W_OTHER = 4, W_ANY = 7 };

static int weights(const struct wmat *w)
{
    if (w->quantized && (size_t)w->mode < FORMATS && fused[w->mode].bits >> w->bits & 1)
        return W_FUSED;
    return !w->quantized && w->dtype == DT_BF16 ? W_BF16 : W_OTHER;
}

/* The level's kernel of a path for j->w into j; false: the level has none. */
static bool use_q8(const struct kern_table *t, struct mm_job *j)
{
    return (j->q8dot = t->q8dot) && (kern_q8_supports(j->w) || kern_gtype_of(j->w->mode));
}
static bool use_blas(const struct kern_table *t, struct mm_job *j) { return (j->blas = t->blas); }
static bool use_qgemm(const struct kern_table *t, struct mm_job *j)
{
    return (j->qgemm = t->qgemm) != NULL && t->qgemm_modes >> j->w->mode & 1;
}
static bool use_qdot(const struct kern_table *t, struct mm_job *j) { return (j->qdot = t->qdot) != NULL; }
static bool use_bf16gemm(const struct kern_table *t, struct mm_job *j) { return (j->gemm = t->bf16gemm) != NULL; }
static bool use_bf16(const struct kern_table *t, struct mm_job *j) { return (j->fn = t->matvec_bf16) != NULL; }
static bool use_refgemm(const struct kern_table *t, struct mm_job *j) { return (j->gemm = t->refgemm) != NULL; }
static bool use_ref(const struct kern_table *t, struct mm_job *j) { return (void)t, j->fn = kern_matmul_ref, true; }

enum mm_input { IN_X, IN_Q, IN_QGEMM, IN_Q8 }; /* x as it is; prepared for qdot, for qgemm; int8 */

/* kern_matmul's paths, in the order it tries them: the first that takes the
 * weights and the token count, that the level has, and whose workers' tiles
 * and prepared input can be had, runs the matrix. */
static const struct mm_path {
    int weights;              /* the classes it takes */
    int64_t from;             /* the fewest tokens; -1: the format's (fused) */
    bool (*use)(const struct kern_table *t, struct mm_job *j);
    enum mm_input in;
    size_t (*ws)(const struct wmat *w, int64_t rows, int64_t n); /* a worker's tile (NULL: none) */
    int64_t tile;             /* rows per task; < 0: tile_rows in whole steps of -tile rows */
} paths[] = {
    {W_FUSED, 0, use_q8, IN_Q8, kern_q8_ws_bytes, -Q8_STEP},                  /* KERN_Q8: int8 activations */
    {W_ANY, KERN_GEMM_MIN_TOKENS, use_blas, IN_X, NULL, KERN_BLAS_ROWS},      /* KERN_BLAS: sgemm */
    {W_FUSED, -1, use_qgemm, IN_QGEMM, kern_qgemm_ws_bytes, GEMM_ROWS},       /* the fused kernels' bits as a GEMM */
    {W_FUSED, 0, use_qdot, IN_Q, NULL, -EXACT_STEP},                          /* the fused kernels */
    {W_BF16, KERN_QGEMM_MIN_TOKENS, use_bf16gemm, IN_X, kern_bf16gemm_ws_bytes, GEMM_ROWS},
    {W_BF16, 0, use_bf16, IN_X, NULL, -EXACT_STEP},
    {W_OTHER, 0, use_refgemm, IN_X, kern_refgemm_ws_bytes, -EXACT_STEP},      /* the reference's bits, 16 rows at a time */
    {W_ANY, 0, use_ref, IN_X, NULL, -EXACT_STEP},                             /* the definition */
};

/* Chooses j's path for w; qin/q8in receive the input prepared for it in
 * t->scratch[i], unless prev (the job of another matrix of the same call) holds
 * one made for the same format, bits, group size and columns (and layout),
 * which is then shared. */
static void mm_setup(const struct kern_table *t, int i, struct mm_job *j, const struct wmat *w, const float *x,
                     int64_t n, float *y, int threads, struct kern_qinput *qin, struct kern_q8input *q8in,
                     const struct mm_job *prev)
{
    const bool same = prev && prev->w->quantized && w->quantized && prev->w->mode == w->mode &&
                      prev->w->bits == w->bits && prev->w->gs == w->gs && prev->w->cols == w->cols;
    for (const struct mm_path *p = paths;; p++) {
        int64_t rows = p->tile > 0 ? p->tile : tile_rows(w, n, -p->tile);
        *j = (struct mm_job){.tile_rows = rows, .ws = t->ws, .w = w, .x = x, .n = n, .y = y};
        if (!(p->weights & weights(w)) || n < (p->from < 0 ? fused[w->mode].gemm_from : p->from) || !p->use(t, j) ||
            (p->ws && !gemm_reserve(t, p->ws(w, w->rows < GEMM_ROWS ? w->rows : GEMM_ROWS, n), threads)))
            continue;
        if (p->in == IN_Q8) {
            const struct kern_q8input *q8 = same ? prev->q8in : NULL;
            j->q8view = kern_gq8_view(w);
            void *buf = q8 || !t->scratch ? NULL : kern_ws_reserve(&t->scratch[i], kern_q8input_bytes(&j->q8view, n));
            if (!q8 && !buf)
                continue;
            if (buf) { /* prepared once (kern_matmul_many's first job) and read by every tile */
                j->prep = buf;
                j->q8prep = t->q8prep;
                j->parts = kern_q8input_layout(&j->q8view, n, buf, q8in);
            }
            j->q8in = q8 ? q8 : q8in;
        } else if (p->in != IN_X) { /* prepared once (kern_matmul_many's first job) and read by every tile */
            const struct kern_qinput *q = same && prev->qin && prev->qin->gemm == (p->in == IN_QGEMM) ? prev->qin : NULL;
            void *buf = q || !t->scratch ? NULL : kern_ws_reserve(&t->scratch[i], kern_qinput_bytes(w, n));
            if (!q && !buf)
                continue;
            j->prep = buf;
            j->parts = q ? 0 : kern_qinput_layout(w, n, p->in == IN_QGEMM, buf, qin);
            j->qin = q ? q : qin;
        }
        return;
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
    if (j->q8prep)
        j->q8prep(&j->q8view, j->x, j->n, j->prep, task - m->pfirst[i]);
    else
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
