/* blas.c - prefill matmul: dequantize a tile of weight rows, then sgemm.
 * OpenBLAS runs single-threaded here; kern_matmul hands out the fixed tiles,
 * so results do not depend on the thread count. */
#include <cblas.h>
#include <stdlib.h>

#include "kernels/kernels.h"

void kern_matmul_blas(const struct wmat *w, const float *x, int64_t n, float *y, int64_t row0, int64_t row1)
{
    int64_t tr = row1 - row0;
    float *tile = malloc((size_t)tr * (size_t)w->cols * sizeof *tile); /* [tr, cols] */
    if (!tile) {
        kern_matmul_ref(w, x, n, y, row0, row1);
        return;
    }
    for (int64_t r = 0; r < tr; r++)
        kern_row_f32(w, row0 + r, tile + r * w->cols);
    /* y[:, row0:row1] = x[n, cols] · tileᵀ, written in place with ldc = rows */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (blasint)n, (blasint)tr, (blasint)w->cols, 1.0f, x,
                (blasint)w->cols, tile, (blasint)w->cols, 0.0f, y + row0, (blasint)w->rows);
    free(tile);
}

void kern_blas_init(void)
{
    openblas_set_num_threads(1);
}
