/* blas.c - prefill matmul: dequantize a tile of weight rows, then sgemm.
 * OpenBLAS runs single-threaded here; kern_matmul hands out the fixed tiles,
 * so results do not depend on the thread count. */
#include <cblas.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"

/* Tokens go to sgemm in blocks of exactly BLAS_M columns (zero-padded):
 * OpenBLAS picks its kernels by the problem size, so a fixed size keeps each
 * token's arithmetic independent of how the prompt was chunked. 128 columns
 * against KERN_BLAS_ROWS weight rows is large enough for OpenBLAS's packed
 * kernels to run near their peak (16-token blocks reached about a third).
 *
 * Within one call, OpenBLAS may also round columns differently by position
 * (measured with its Haswell kernels, which the project VM's environment
 * selects with OPENBLAS_CORETYPE=Haswell: columns 8..119 of the 128 differ
 * from columns 0..7 and 120..127; with its SkylakeX and Cooperlake kernels all
 * columns agreed). So each call shape (tile rows, columns) is
 * probed once: the same random vector in every column of a random product,
 * and the columns whose results are bit-identical share one code path. The
 * largest such set (the first, on a tie) is the shape's slots: token i of a
 * block always goes to column slot[i], so its bits do not depend on its place
 * in the prompt, and the other columns stay zero. */
#define BLAS_M 128
#define SHAPES_MAX 256

struct shape {
    int64_t rows, cols;
    int n;                    /* slots: tokens a call carries */
    int slot[BLAS_M];
};

static struct shape shapes[SHAPES_MAX];
static int n_shapes;
static pthread_mutex_t shapes_lock = PTHREAD_MUTEX_INITIALIZER;

/* Fills sh with the slots of a (rows, cols) product; false: out of memory. */
static bool probe(int64_t rows, int64_t cols, struct shape *sh)
{
    float *a = malloc((size_t)(rows * cols) * sizeof *a), *b = malloc((size_t)BLAS_M * (size_t)cols * sizeof *b);
    float *c = malloc((size_t)rows * BLAS_M * sizeof *c);
    bool ok = a && b && c;
    if (ok) {
        uint64_t z = 0x9E3779B97F4A7C15ull;
        for (int64_t i = 0; i < rows * cols + cols; i++) {
            z = z * 6364136223846793005ull + 1442695040888963407ull;
            float v = (float)((int32_t)(z >> 40) - (1 << 23)) / 8388608.0f; /* in [-1, 1): sums that cancel */
            if (i < rows * cols)
                a[i] = v;
            else
                for (int t = 0; t < BLAS_M; t++)
                    b[t * cols + (i - rows * cols)] = v;
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (blasint)rows, BLAS_M, (blasint)cols, 1.0f, a,
                    (blasint)cols, b, (blasint)cols, 0.0f, c, BLAS_M);
        int cls[BLAS_M], best = 0, best_n = 0;
        for (int p = 0; p < BLAS_M; p++) { /* cls[p]: the first column computed as p is */
            cls[p] = p;
            for (int q = 0; q < p && cls[p] == p; q++) {
                bool same = cls[q] == q;
                for (int64_t r = 0; r < rows && same; r++)
                    same = !memcmp(&c[r * BLAS_M + p], &c[r * BLAS_M + q], sizeof *c);
                if (same)
                    cls[p] = q;
            }
        }
        for (int p = 0; p < BLAS_M; p++) {
            int n = 0;
            for (int q = 0; q < BLAS_M; q++)
                n += cls[q] == p;
            if (n > best_n) {
                best = p;
                best_n = n;
            }
        }
        sh->rows = rows;
        sh->cols = cols;
        sh->n = 0;
        for (int q = 0; q < BLAS_M; q++)
            if (cls[q] == best)
                sh->slot[sh->n++] = q;
    }
    free(a);
    free(b);
    free(c);
    return ok;
}

/* The slots of a (rows, cols) product, probed on first use; false: out of memory. */
static bool shape_slots(int64_t rows, int64_t cols, struct shape *out)
{
    pthread_mutex_lock(&shapes_lock);
    bool ok = true;
    int i = 0;
    while (i < n_shapes && (shapes[i].rows != rows || shapes[i].cols != cols))
        i++;
    if (i < n_shapes) {
        *out = shapes[i];
    } else {
        ok = probe(rows, cols, out);
        if (ok && n_shapes < SHAPES_MAX) /* past that, probed on every call: slower, same bits */
            shapes[n_shapes++] = *out;
    }
    pthread_mutex_unlock(&shapes_lock);
    return ok;
}

void kern_matmul_blas(const struct wmat *w, const float *x, int64_t n, float *y, int64_t row0, int64_t row1)
{
    int64_t tr = row1 - row0, cols = w->cols;
    struct shape sh;
    float *tile = malloc((size_t)tr * (size_t)cols * sizeof *tile);           /* [tr, cols] */
    float *xpad = calloc((size_t)BLAS_M * (size_t)cols, sizeof *xpad);        /* [BLAS_M, cols] */
    float *yt = malloc((size_t)tr * BLAS_M * sizeof *yt);                      /* [tr, BLAS_M] */
    if (!tile || !xpad || !yt || !shape_slots(tr, cols, &sh)) {
        free(tile);
        free(xpad);
        free(yt);
        kern_matmul_ref(w, x, n, y, row0, row1);
        return;
    }
    for (int64_t r = 0; r < tr; r++)
        kern_row_f32(w, row0 + r, tile + r * cols);
    for (int64_t t0 = 0; t0 < n; t0 += sh.n) {
        int64_t mb = n - t0 < sh.n ? n - t0 : sh.n;
        for (int i = 0; i < sh.n; i++) /* token t0 + i in column slot[i]; every other column zero */
            if (i < mb)
                memcpy(xpad + sh.slot[i] * cols, x + (t0 + i) * cols, (size_t)cols * sizeof *xpad);
            else
                memset(xpad + sh.slot[i] * cols, 0, (size_t)cols * sizeof *xpad);
        /* yt[tr, BLAS_M] = tile · xpadᵀ */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (blasint)tr, BLAS_M, (blasint)cols, 1.0f, tile,
                    (blasint)cols, xpad, (blasint)cols, 0.0f, yt, BLAS_M);
        for (int64_t t = 0; t < mb; t++)
            for (int64_t r = 0; r < tr; r++)
                y[(t0 + t) * w->rows + row0 + r] = yt[r * BLAS_M + sh.slot[t]];
    }
    free(tile);
    free(xpad);
    free(yt);
}

void kern_blas_init(void)
{
    openblas_set_num_threads(1);
}
