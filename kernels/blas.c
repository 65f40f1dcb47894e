/* blas.c - prefill matmul: dequantize a tile of weight rows, then sgemm.
 * OpenBLAS runs single-threaded here; kern_matmul hands out the fixed tiles,
 * so results do not depend on the thread count. */
#include <cblas.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"

/* Tokens go to sgemm in blocks of exactly BLAS_M rows (the last one zero-padded):
 * OpenBLAS picks its kernels by the problem size, so a fixed M keeps each
 * token's arithmetic independent of how the prompt was chunked. */
#define BLAS_M 16

void kern_matmul_blas(const struct wmat *w, const float *x, int64_t n, float *y, int64_t row0, int64_t row1)
{
    int64_t tr = row1 - row0, cols = w->cols;
    float *tile = malloc((size_t)tr * (size_t)cols * sizeof *tile);           /* [tr, cols] */
    float *xpad = malloc((size_t)BLAS_M * (size_t)cols * sizeof *xpad);       /* [BLAS_M, cols] */
    float *ypad = malloc((size_t)BLAS_M * (size_t)tr * sizeof *ypad);         /* [BLAS_M, tr] */
    if (!tile || !xpad || !ypad) {
        free(tile);
        free(xpad);
        free(ypad);
        kern_matmul_ref(w, x, n, y, row0, row1);
        return;
    }
    for (int64_t r = 0; r < tr; r++)
        kern_row_f32(w, row0 + r, tile + r * cols);
    for (int64_t t0 = 0; t0 < n; t0 += BLAS_M) {
        int64_t mb = n - t0 < BLAS_M ? n - t0 : BLAS_M;
        memset(xpad, 0, (size_t)BLAS_M * (size_t)cols * sizeof *xpad);
        memcpy(xpad, x + t0 * cols, (size_t)(mb * cols) * sizeof *xpad);
        /* ypad[BLAS_M, tr] = xpad · tileᵀ */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, BLAS_M, (blasint)tr, (blasint)cols, 1.0f, xpad,
                    (blasint)cols, tile, (blasint)cols, 0.0f, ypad, (blasint)tr);
        for (int64_t t = 0; t < mb; t++)
            memcpy(y + (t0 + t) * w->rows + row0, ypad + t * tr, (size_t)tr * sizeof *y);
    }
    free(tile);
    free(xpad);
    free(ypad);
}

void kern_blas_init(void)
{
    openblas_set_num_threads(1);
}
