/* x86.h - the x86 twins of the definitions in kernels/internal.h (built for x86
 * only; called only when the CPU has their instructions), each with its bits. */
#ifndef GP_KERNELS_X86_H
#define GP_KERNELS_X86_H

#include "kernels/internal.h"

/* kern_qdot_ref, kern_matvec_bf16_ref (avx2.c, avx512.c) */
void kern_qdot_avx2(const struct wmat *w, const struct kern_qinput *in, int64_t n, float *y, int64_t row0,
                    int64_t row1);
void kern_qdot_avx512(const struct wmat *w, const struct kern_qinput *in, int64_t n, float *y, int64_t row0,
                      int64_t row1);
/* ggml's block types (kern_gdot_ref, kern_gq8dot_ref). */
void kern_gdot_avx2(const struct wmat *w, const struct kern_qinput *in, int64_t n, float *y, int64_t row0,
                    int64_t row1);
void kern_gdot_avx512(const struct wmat *w, const struct kern_qinput *in, int64_t n, float *y, int64_t row0,
                      int64_t row1);
void kern_gq8dot_avx2(const struct wmat *w, const struct kern_q8input *in, int64_t n, float *y, int64_t row0,
                      int64_t row1);
void kern_gq8dot_avx512(const struct wmat *w, const struct kern_q8input *in, int64_t n, float *y, int64_t row0,
                        int64_t row1);
void kern_matvec_bf16_avx2(const struct wmat *w, const float *x, int64_t n, float *y, int64_t row0, int64_t row1);
void kern_matvec_bf16_avx512(const struct wmat *w, const float *x, int64_t n, float *y, int64_t row0, int64_t row1);

/* The blocked GEMMs (avx512.c, avx2.c): kern_qdot_ref's (input: kern_qinput's `gemm`),
 * kern_matvec_bf16_ref's and kern_matmul_ref's bits for many tokens, a tile
 * decoded once into floats in ws, then register blocks of rows × tokens. */
void kern_qgemm_avx512(const struct wmat *w, const struct kern_qinput *in, int64_t n, float *y, int64_t row0,
                       int64_t row1, void *ws);
void kern_qgemm_avx2(const struct wmat *w, const struct kern_qinput *in, int64_t n, float *y, int64_t row0,
                     int64_t row1, void *ws);
void kern_bf16gemm_avx2(const struct wmat *w, const float *x, int64_t n, float *y, int64_t row0, int64_t row1,
                        void *ws);
void kern_bf16gemm_avx512(const struct wmat *w, const float *x, int64_t n, float *y, int64_t row0, int64_t row1,
                          void *ws);
void kern_refgemm_avx512(const struct wmat *w, const float *x, int64_t n, float *y, int64_t row0, int64_t row1,
                         void *ws);
void kern_refgemm_avx2(const struct wmat *w, const float *x, int64_t n, float *y, int64_t row0, int64_t row1,
                       void *ws);

/* kern_q8input_part, kern_q8dot_ref (q8_avx512.c, q8_avx2.c) */
void kern_q8input_part_avx512(const struct wmat *w, const float *x, int64_t n, void *buf, int64_t part);
void kern_q8input_part_avx2(const struct wmat *w, const float *x, int64_t n, void *buf, int64_t part);
void kern_q8dot_avx512(const struct wmat *w, const struct kern_q8input *in, int64_t n, float *y, int64_t row0,
                       int64_t row1, void *ws);
/* kern_q8dot_avx512 with its blocked prefill's tokens 16 at a time through AMX-INT8 */
void kern_q8dot_amx(const struct wmat *w, const struct kern_q8input *in, int64_t n, float *y, int64_t row0,
                    int64_t row1, void *ws);
void kern_q8dot_avxvnni(const struct wmat *w, const struct kern_q8input *in, int64_t n, float *y, int64_t row0,
                        int64_t row1, void *ws);
void kern_q8dot_avx2(const struct wmat *w, const struct kern_q8input *in, int64_t n, float *y, int64_t row0,
                     int64_t row1, void *ws);

/* kern_dot_ref, kern_dots_ref, kern_axpy_ref, kern_gelu_mul_ref, kern_softcap_ref */
float kern_dot_avx2(const float *a, const float *b, int64_t n);
float kern_dot_avx512(const float *a, const float *b, int64_t n);
void kern_dots_avx2(const float *q, int nh, const float *const *b, int m, int64_t n, float *out, int64_t ld);
void kern_dots_avx512(const float *q, int nh, const float *const *b, int m, int64_t n, float *out, int64_t ld);
void kern_axpy_avx2(float *y, int64_t ld, int nh, const float *w, int64_t wld, const float *const *x, int m,
                    int64_t n);
void kern_axpy_avx512(float *y, int64_t ld, int nh, const float *w, int64_t wld, const float *const *x, int m,
                      int64_t n);
void kern_gelu_mul_avx2(float *g, const float *u, int64_t n);
void kern_gelu_mul_avx512(float *g, const float *u, int64_t n);
void kern_softcap_avx2(float *x, float cap, int64_t n);
void kern_softcap_avx512(float *x, float cap, int64_t n);
void kern_softmax_avx2(float *x, int64_t n);
void kern_softmax_avx512(float *x, int64_t n);

#endif
