/* blas.c - prefill matmul: dequantize a tile of weight rows, then sgemm.
 * OpenBLAS runs single-threaded here; kern_matmul hands out the fixed tiles,
 * so results do not depend on the thread count. */
#include <cblas.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"

/* Tokens go to sgemm in blocks of exactly BLAS_M (the last one zero-padded):
 * OpenBLAS picks its kernels by the problem size, so a fixed M keeps each
 * token's arithmetic independent of how the prompt was chunked. 128 tokens
 * against KERN_BLAS_ROWS weight rows is large enough for OpenBLAS's packed
 * kernels to run near their peak (16-token blocks reached about a third). */
#define BLAS_M 128

void kern_matmul_blas(const struct wmat *w, const float *x, int64_t n, float *y, int64_t row0, int64_t row1)
{
    int64_t tr = row1 - row0, cols = w->cols;
    float *tile = malloc((size_t)tr * (size_t)cols * sizeof *tile);           /* [tr, cols] */
    float *xpad = malloc((size_t)BLAS_M * (size_t)cols * sizeof *xpad);       /* [BLAS_M, cols] */
    float *yt = malloc((size_t)tr * BLAS_M * sizeof *yt);                      /* [tr, BLAS_M] */
    if (!tile || !xpad || !yt) {
        free(tile);
        free(xpad);
        free(yt);
        kern_matmul_ref(w, x, n, y, row0, row1);
        return;
    }
    for (int64_t r = 0; r < tr; r++)
        kern_row_f32(w, row0 + r, tile + r * cols);
    for (int64_t t0 = 0; t0 < n; t0 += BLAS_M) {
        int64_t mb = n - t0 < BLAS_M ? n - t0 : BLAS_M;
        const float *xb = x + t0 * cols;
        if (mb < BLAS_M) {
            memset(xpad, 0, (size_t)BLAS_M * (size_t)cols * sizeof *xpad);
            memcpy(xpad, xb, (size_t)(mb * cols) * sizeof *xpad);
            xb = xpad;
        }
        /* yt[tr, BLAS_M] = tile · xbᵀ */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (blasint)tr, BLAS_M, (blasint)cols, 1.0f, tile,
                    (blasint)cols, xb, (blasint)cols, 0.0f, yt, BLAS_M);
        for (int64_t t = 0; t < mb; t++)
            for (int64_t r = 0; r < tr; r++)
                y[(t0 + t) * w->rows + row0 + r] = yt[r * BLAS_M + t];
    }
    free(tile);
    free(xpad);
    free(yt);
}

void kern_blas_init(void)
{
    openblas_set_num_threads(1);
}
