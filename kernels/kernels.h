/* kernels.h - compute for the runner: matrix products on the thread pool,
 * attention and the row ops, through the table of a level chosen at run time.
 * Weights stay in their stored form, dequantized per group inside the
 * products. Every op has one scalar definition (kernels/internal.h) that its
 * SIMD twins (kernels/x86/, kernels/arm/) give bit for bit, on tiles fixed by
 * the problem, never by the thread count: the same results for any --threads,
 * token count and machine (KERN_BLAS and KERN_Q8 trade that away). */
#ifndef GP_KERNELS_H
#define GP_KERNELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/dtype.h"
#include "core/pool.h"
#include "core/qmode.h"

/* A weight matrix [rows, cols] as stored (one expert's slice of a 3-D tensor
 * is addressed with kern_wmat_expert). */
struct wmat {
    bool quantized;           /* MLX: codes + scales (+ biases for affine) */
    enum qmode mode;          /* quantized: affine, or an MX mode (4/8-bit codes, U8 scales, no biases) */
    enum dtype dtype;         /* float weights: F32/F16/BF16; quantized: the scales dtype (U8 for MX) */
    const uint8_t *w;         /* float data or packed codes (may be unaligned) */
    const uint8_t *s, *b;     /* scales, biases [rows, cols/gs] (quantized; b NULL for MX) */
    int bits, gs;
    int64_t rows, cols;
    size_t row_bytes;         /* bytes of one row of w */
    size_t srow_bytes;        /* bytes of one row of scales/biases */
    size_t expert_bytes, expert_sbytes; /* stride between experts of a 3-D tensor */
    size_t row_stride;        /* bytes between consecutive rows of w (== row_bytes unless a split view) */
    bool blocked;             /* quantized, in blocks of KERN_BLOCK_ROWS rows (kern_block_rows) */
};

/* The view of expert e of a 3-D weight. */
struct wmat kern_wmat_expert(const struct wmat *w, int64_t e);

/* Dequantizes / converts row r of W into out[cols] (embedding lookups, the
 * sgemm tiles); bit-identical to dequant_affine_row / dtype_to_f32 on every path. */
void kern_row_f32(const struct wmat *w, int64_t r, float *out);

/* The blocked layout of affine matrices (any width), read by every kernel with
 * the same bits (kernels/internal.h): kern_blockable, whether w may take it;
 * kern_blocked_bytes, w's size (one expert), the same as by rows;
 * kern_block_rows writes blocks [b0, b1) of w (by rows; one expert) into dst,
 * the copy's base; kern_blocked_view, the view of that copy (experts
 * kern_blocked_bytes apart). */
#define KERN_BLOCK_ROWS 16
bool kern_blockable(const struct wmat *w);
size_t kern_blocked_bytes(const struct wmat *w);
void kern_block_rows(const struct wmat *w, uint8_t *dst, int64_t b0, int64_t b1);
struct wmat kern_blocked_view(const struct wmat *w, const uint8_t *dst);

/* ---- the table of a level ---- */

struct kern_qinput; /* the prepared inputs and the scratch (kernels/internal.h) */
struct kern_q8input;
struct kern_ws;
typedef void (*matmul_fn)(const struct wmat *w, const float *x, int64_t n, float *y, int64_t row0, int64_t row1);
typedef void (*qdot_fn)(const struct wmat *w, const struct kern_qinput *in, int64_t n, float *y, int64_t row0,
                        int64_t row1);
typedef void (*qgemm_fn)(const struct wmat *w, const struct kern_qinput *in, int64_t n, float *y, int64_t row0,
                         int64_t row1, void *ws);
typedef void (*gemm_fn)(const struct wmat *w, const float *x, int64_t n, float *y, int64_t row0, int64_t row1,
                        void *ws);
typedef void (*q8dot_fn)(const struct wmat *w, const struct kern_q8input *in, int64_t n, float *y, int64_t row0,
                         int64_t row1, void *ws);
typedef void (*q8prep_fn)(const struct wmat *w, const float *x, int64_t n, void *buf, int64_t part);
typedef float (*dot_fn)(const float *a, const float *b, int64_t n);
typedef void (*dots_fn)(const float *q, int nh, const float *const *b, int m, int64_t n, float *out, int64_t ld);
typedef void (*axpy_fn)(float *y, int64_t ld, int nh, const float *w, int64_t wld, const float *const *x, int m,
                        int64_t n);
/* Attention's weights below this add nothing to its values (axpy_fn): such a
 * weight would add at most 2^-100·|v|, and its product would be subnormal, slow. */
#define KERN_WEIGHT_MIN 0x1p-100f
typedef void (*gelu_mul_fn)(float *g, const float *u, int64_t n);
typedef void (*softcap_fn)(float *x, float cap, int64_t n);
typedef void (*softmax_fn)(float *x, int64_t n);

/* The version of the kernels' arithmetic: bumped whenever a kernel's bits
 * change, so that state saved by an older build (the cold prefix cache) is
 * never restored into a newer one. */
#define KERN_NUMERICS 11

/* Which implementation serves each case; filled once by kern_init. */
struct kern_table {
    const char *name;         /* the exact kernels: "scalar", "avx2", "avx512" or "neon" */
    const char *q8name;       /* KERN_Q8's int8 kernels: "avx512-vnni", "avx-vnni", "avx2" or
                                 "neon-dotprod"; NULL: none on this CPU (KERN_BEST then) */
    qdot_fn qdot;             /* fused 4/8-bit kernel (always set) */
    matmul_fn matvec_bf16;    /* bf16 kernel (always set) */
    bool blas;                /* sgemm for multi-token steps (KERN_BLAS) */
    dot_fn dot;               /* dot in kern_dot_ref's order (always set) */
    dots_fn dots;             /* attention's scores (always set) */
    axpy_fn axpy;             /* attention's weighted values (always set) */
    gelu_mul_fn gelu_mul;     /* g = gelu(g)·u (always set) */
    softcap_fn softcap;       /* the logit soft-cap (always set) */
    softmax_fn softmax;       /* kern_softmax: attention's weights (always set) */
    q8dot_fn q8dot;           /* KERN_Q8: 4/8-bit affine matmuls on int8 activations (NULL: off) */
    q8prep_fn q8prep;         /* KERN_Q8: their input's preparation */
    qgemm_fn qgemm;           /* the fused kernels as a blocked GEMM, for steps of many tokens (NULL: none) */
    unsigned qgemm_modes;     /* the quantization modes qgemm takes: bit 1 << mode */
    gemm_fn bf16gemm;         /* matvec_bf16 as a blocked GEMM, likewise */
    gemm_fn refgemm;          /* kern_matmul_ref's bits, faster (NULL: the reference itself) */
    struct kern_ws *ws;       /* [POOL_MAX_THREADS] each worker's scratch, kept across calls */
    struct kern_ws *scratch;  /* [KERN_MANY] the prepared inputs of a call's matrices (kern_reserve) */
};

enum kern_level {
    KERN_SCALAR,  /* the reference everywhere */
    KERN_BEST,    /* the fused SIMD kernels this CPU supports, for any number of tokens:
                     prefill, chunked and decode runs give bitwise-identical logits */
    KERN_BLAS,    /* KERN_BEST, plus OpenBLAS sgemm for steps of KERN_GEMM_MIN_TOKENS or more:
                     faster prefill, but its rounding differs from decode's (see docs) */
    KERN_Q8,      /* KERN_BEST, with 4/8-bit affine matmuls on int8 activations:
                     faster, approximate, still deterministic */
};
#define KERN_GEMM_MIN_TOKENS 32

/* Selects the kernels of a level (KERN_BLAS without OpenBLAS: KERN_BEST;
 * KERN_Q8 without int8 kernels: KERN_BEST). Every level but KERN_BLAS and
 * KERN_Q8 gives the definitions' bits, so the same on every machine. */
void kern_init(struct kern_table *t, enum kern_level level);

/* Releases what kern_init, kern_reserve and the calls since allocated. */
void kern_free(struct kern_table *t);

/* True when this CPU has int8 kernels (AVX-512 VNNI, AVX-VNNI, AVX2 or arm64
 * dotprod): without them KERN_Q8 is KERN_BEST. */
bool kern_has_q8(void);

/* y[n, rows] = x[n, cols] · Wᵀ on the first of the table's paths that takes
 * w and n (kernels/dispatch.c), split over `threads` threads in tiles of rows. */
void kern_matmul(const struct kern_table *t, const struct wmat *w, const float *x, int64_t n, float *y, int threads);

/* y_i = x · W_iᵀ for up to KERN_MANY matrices of the same input (q, k and v;
 * gate and up) in one parallel job: each matrix takes the path and tiles
 * kern_matmul gives it, so the same bits, and matrices of the same format,
 * bits, group size and columns share one input preparation. */
#define KERN_MANY 4
void kern_matmul_many(const struct kern_table *t, int count, const struct wmat *const w[], float *const y[],
                      const float *x, int64_t n, int threads);

/* Reserves the prepared-input scratch for matmuls of up to n tokens and
 * `cols` columns, and the scratch of each of `threads` workers (the blocked
 * GEMMs' tile, the int8 kernels' codes), so that such calls allocate nothing;
 * ERR_NOMEM if it cannot. */
int kern_reserve(struct kern_table *t, int64_t n, int64_t cols, int threads);

/* y = x * (mean(x²) + eps)^-½ * w   (w NULL: no weight). In place allowed.
 * Σx² is dot(x, x), so every level's dot gives the same bits. */
void kern_rmsnorm(dot_fn dot, float *y, const float *x, const float *w, int64_t d, float eps);

/* The RoPE angles of position pos for per-pair inverse frequencies
 * inv_freq[d/2]: cs[2i], cs[2i + 1] = cos, sin of pos·inv_freq[i] (the angle
 * and both values computed in double, then rounded to float). Once per
 * position and layer type, not per head and layer. */
void kern_rope_cs(float *cs, int64_t d, const double *inv_freq, int64_t pos);

/* Rotate-half RoPE of one head vector x[d] with those angles: pair (i, i + d/2)
 * turns by angle i; inv_freq 0 leaves a pair as is. */
void kern_rope(float *x, int64_t d, const double *inv_freq, const float *cs);

/* e^v without libm, the same bits on every machine (kernels/internal.h):
 * within 2e-7 relative for v ≤ 87, 0 below −87, NaN for NaN. */
float kern_exp(float v);

/* Softmax in place over n values: max subtracted, kern_exp, the sum in order,
 * one division each. */
void kern_softmax(float *x, int64_t n);

/* Keys and values as query `row` of a step sees them: key (which 0) or value
 * (1) of KV head g at position p, d floats, a pointer into storage or decoded
 * into buf[d]; NULL for a key a mask hides from that query. */
typedef const float *(*kern_kv_fn)(const void *ctx, int64_t row, int64_t p, int64_t g, int which, float *buf);

/* Causal attention of a step's queries (MODEL.md §5): for each query row
 * (position pos[row]) and query head h (KV head h / (Nq / G)), the scores
 * q·k (scale 1) of keys max(0, pos − window + 1) .. pos (window 0: from 0)
 * in position order, softmax (max subtracted, exp, sum, each weight one
 * division), out = Σ w·v, a weight below 2^-100 skipped, summed per
 * 64-position chunk (each from zero, keys in order; the chunks' sums added
 * to zero in order). The tasks (kernels/attention.c) depend on the rows and threads,
 * the bits do not; dots and axpy are the table's (bit-identical on every
 * level). */
struct kern_attn {
    const float *q;           /* [N, Nq, d] */
    float *out;               /* [N, Nq, d] */
    const int64_t *pos;       /* [N] */
    int64_t N, Nq, G, d, window;
    kern_kv_fn kv;
    const void *ctx;
    int64_t keys;             /* most keys any query sees */
    float *scratch;           /* kern_attn_scratch(N, Nq, keys, d, threads) floats (or more) */
};

/* Floats of scratch an attention of up to N query rows, Nq heads, `keys`
 * keys of head dim d needs on `threads` threads. */
size_t kern_attn_scratch(int64_t N, int64_t Nq, int64_t keys, int64_t d, int threads);

void kern_attention(const struct kern_table *t, const struct kern_attn *a, int threads);

#endif
