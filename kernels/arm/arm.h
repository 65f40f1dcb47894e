/* arm.h - the arm64 twins of the definitions in kernels/internal.h (neon.c,
 * built for arm64 only), each giving its definition's bits. */
#ifndef GP_KERNELS_ARM_H
#define GP_KERNELS_ARM_H

#include "kernels/internal.h"

void kern_qdot_neon(const struct wmat *w, const struct kern_qinput *in, int64_t n, float *y, int64_t row0,
                    int64_t row1);
/* Affine 4/8-bit and microscaling as a blocked GEMM (kern_qgemm_ws_bytes of workspace). */
void kern_qgemm_neon(const struct wmat *w, const struct kern_qinput *in, int64_t n, float *y, int64_t row0,
                     int64_t row1, void *ws);
void kern_matvec_bf16_neon(const struct wmat *w, const float *x, int64_t n, float *y, int64_t row0, int64_t row1);
/* kern_matvec_bf16_ref as a blocked GEMM (kern_bf16gemm_ws_bytes of workspace). */
void kern_bf16gemm_neon(const struct wmat *w, const float *x, int64_t n, float *y, int64_t row0, int64_t row1,
                        void *ws);
/* kern_matmul_ref's bits for every other weight type (kern_refgemm_ws_bytes of workspace). */
void kern_refgemm_neon(const struct wmat *w, const float *x, int64_t n, float *y, int64_t row0, int64_t row1, void *ws);
float kern_dot_neon(const float *a, const float *b, int64_t n);
void kern_dots_neon(const float *q, int nh, const float *const *b, int m, int64_t n, float *out, int64_t ld);
void kern_axpy_neon(float *y, int64_t ld, int nh, const float *w, int64_t wld, const float *const *x, int m,
                    int64_t n);

/* kern_q8dot_ref on SDOT. It needs the dot-product intrinsics: GCC enables
 * them per function, clang (14) only for a target that has them, as Apple's
 * arm64 targets do. Without them KERN_Q8 has no int8 kernels on arm64. */
#if GP_ARM64 && (!defined(__clang__) || defined(__ARM_FEATURE_DOTPROD))
#define KERN_NEON_DOTPROD 1
#else
#define KERN_NEON_DOTPROD 0
#endif
void kern_q8dot_neon(const struct wmat *w, const struct kern_q8input *in, int64_t n, float *y, int64_t row0,
                     int64_t row1, void *ws);

#endif
