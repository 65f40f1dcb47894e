/* kernels.h - compute for the runner: a scalar reference for every op, and
 * fast paths chosen once at run time through one table.
 *
 * Weights stay in their stored form (F32/F16/BF16 or MLX affine codes) and
 * are dequantized per group inside the dot products; no full dequantized
 * copy of a matrix is ever made. Multi-threaded kernels split their output
 * into fixed tiles that do not depend on the thread count, so results are
 * bitwise identical for any --threads. */
#ifndef GP_KERNELS_H
#define GP_KERNELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/cpu.h"
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

/* ---- matrix products: y[n, rows] = x[n, cols] · Wᵀ ---- */

typedef void (*matmul_fn)(const struct wmat *w, const float *x, int64_t n, float *y, int64_t row0, int64_t row1);

/* The scalar definition: rows [row0, row1) of the output, each an ordered
 * dot product over the columns with the weight dequantized per group. */
void kern_matmul_ref(const struct wmat *w, const float *x, int64_t n, float *y, int64_t row0, int64_t row1);

/* Input prepared once per matmul for the fused quantized kernels: per-group
 * input sums, and the input in a buffer of kern_qinput_bytes(w, n) bytes the
 * caller provides (aligned for floats). Affine: in column order, column j
 * divided by the place value its code keeps (2^(bits·k) for code k of its
 * word, 1 for the top code), token t at t·stride; for the blocked GEMM
 * (`gemm`) in panels of AGEMM_T tokens, token 12p + u's column j at
 * (12p·stride + 12j) + u, zeros for the tokens past n. MX: rearranged to the
 * lanes of the packed codes (see avx512.c), token by token, or for the
 * blocked GEMM in fours: tokens 4i .. 4i + 3 share 4·stride floats, the 16
 * lanes of code k of block b of token 4i + u at 4·(b·16W + 16k) + 16u (W
 * codes per word). */
struct kern_qinput {
    const float *xd;          /* [tokens, stride]: affine cols rounded up to 16, MX to blocks of 16 code words */
    const float *xsum;        /* [n, cols/gs] */
    int64_t stride;
    bool gemm;                /* laid out for kern_qgemm_* */
};
typedef void (*qdot_fn)(const struct wmat *w, const struct kern_qinput *in, int64_t n, float *y, int64_t row0,
                        int64_t row1);
size_t kern_qinput_bytes(const struct wmat *w, int64_t n);
/* Prepared in parts, on the thread pool: kern_qinput_layout points *in into
 * buf and returns the number of parts; kern_qinput_part(part) fills tokens
 * [part·KERN_QINPUT_PART, +KERN_QINPUT_PART) (a whole number of panels). */
#define KERN_QINPUT_PART 48
int64_t kern_qinput_layout(const struct wmat *w, int64_t n, bool gemm, void *buf, struct kern_qinput *in);
void kern_qinput_part(const struct wmat *w, const float *x, int64_t n, bool gemm, void *buf, int64_t part);

/* The definition of the fused 4/8-bit kernels, which every ISA's twin gives
 * bit for bit (so a result does not depend on the machine, the layout, the
 * token count or the split). Code k of a 32-bit word (k = 0 .. W−1, W =
 * 32/bits) as a float q: affine, isolated in place, i.e. the integer word &
 * ((2^bits − 1)·2^(bits·k)), the top one shifted down; MX, the code's value
 * (mx_code_value). x: the prepared input (kern_qinput).
 * Affine, per row and token: A = B = +0; for each group g in order, two
 * chains, p_0 over the group's even words and p_1 over its odd words (words
 * counted from the group's first): p_c = x_j·q_j for the chain's first
 * column j, then p_c = fma(x_j, q_j, p_c) for its others in column order;
 * A = fma(p_0 + p_1, scale_g, A); B = fma(bias_g, Σx_g, B). The result is
 * A + B. The kernels keep one row per vector lane, so a chain
 * needs no reduction and the GEMM broadcasts the input (avx512.c).
 * MX, per row and token: 16 lanes A, all +0. The row's words go in blocks of
 * 16, word 16b + l to lane l. For each block in order and each of its words:
 * with x_k the input of code k, p0 = x0·q0, p1 = x1·q1, then p_(k mod 2) =
 * fma(x_k, q_k, p_(k mod 2)) for k ≥ 2; A[l] = fma(p0 + p1, s, A[l]) with s
 * the scale of the word's group. Then A[l] += +0, and the 16 lanes summed as
 * in kern_dot_ref. Every step is one IEEE operation, so any ISA can repeat
 * it. */
void kern_qdot_ref(const struct wmat *w, const struct kern_qinput *in, int64_t n, float *y, int64_t row0,
                   int64_t row1);

/* A worker's scratch, kept across calls and grown on demand (fresh
 * multi-megabyte buffers would cost a page fault per 4 KiB): the blocked
 * GEMM's decoded tile, sgemm's tile and padded input. */
struct kern_ws {
    void *buf;                /* 64-byte aligned */
    size_t cap;               /* bytes */
};
/* ws's buffer holding at least `bytes`; NULL: out of memory. */
void *kern_ws_reserve(struct kern_ws *ws, size_t bytes);

/* Steps of at least KERN_GEMM_MIN_TOKENS tokens take sgemm (KERN_BLAS), and
 * of at least kern_qgemm_min_tokens the fused and bf16 kernels' definitions
 * as blocked GEMMs (below; one thread, 1536 × 1536: affine 4/8-bit 1.2–1.3×
 * the fused kernels at 9 tokens, 1.6× at 24, 2× at 512, where at 8 the fused
 * kernel's two passes of 4 tokens run 1.0–1.2× the GEMM's panel of 12;
 * microscaling 1.4–1.5× at 8, 2× from 24; bf16 1.0–1.3× at 8, 1.5–1.7× at
 * 16, 2.3× at 512). */
#define KERN_GEMM_MIN_TOKENS 32
#define KERN_QGEMM_MIN_TOKENS 8
#define KERN_AGEMM_MIN_TOKENS 9
static inline int64_t kern_qgemm_min_tokens(const struct wmat *w)
{
    return w->quantized && w->mode == QM_AFFINE ? KERN_AGEMM_MIN_TOKENS : KERN_QGEMM_MIN_TOKENS;
}

/* kern_qdot_ref's bits for many tokens at GEMM speed, from an input prepared
 * for it (kern_qinput's `gemm`): the tile's codes decoded once into floats in
 * a workspace of kern_qgemm_ws_bytes(w, rows, n) bytes (64-byte aligned), then
 * register blocks of rows × tokens (avx512.c; the workspace's size: input.c). */
typedef void (*qgemm_fn)(const struct wmat *w, const struct kern_qinput *in, int64_t n, float *y, int64_t row0,
                         int64_t row1, void *ws);
size_t kern_qgemm_ws_bytes(const struct wmat *w, int64_t rows, int64_t n);
void kern_qgemm_avx512(const struct wmat *w, const struct kern_qinput *in, int64_t n, float *y, int64_t row0,
                       int64_t row1, void *ws);

/* kern_matvec_bf16_ref's bits for many tokens at GEMM speed: the tile's rows
 * converted once into floats in a workspace of kern_bf16gemm_ws_bytes(w, rows)
 * bytes (64-byte aligned), then register blocks of rows × tokens over column
 * chunks (avx512.c). */
typedef void (*gemm_fn)(const struct wmat *w, const float *x, int64_t n, float *y, int64_t row0, int64_t row1,
                        void *ws);
size_t kern_bf16gemm_ws_bytes(const struct wmat *w, int64_t rows);
void kern_bf16gemm_avx512(const struct wmat *w, const float *x, int64_t n, float *y, int64_t row0, int64_t row1,
                          void *ws);

/* kern_matmul_ref's bits for the weights with no fused kernel (2/3/5/6-bit
 * affine, f16, f32), 16 rows in the vector lanes, in a workspace of
 * kern_refgemm_ws_bytes(w) bytes (64-byte aligned; avx512.c). */
size_t kern_refgemm_ws_bytes(const struct wmat *w);
void kern_refgemm_avx512(const struct wmat *w, const float *x, int64_t n, float *y, int64_t row0, int64_t row1,
                         void *ws);

/* The definition of the bf16 kernels: per row and token, two chains of 16
 * lanes, column j's product fused into lane j % 16 of chain (j / 16) % 2 in
 * column order, the chains added lane by lane, then the lanes summed as in
 * kern_dot_ref. */
void kern_matvec_bf16_ref(const struct wmat *w, const float *x, int64_t n, float *y, int64_t row0, int64_t row1);

/* ---- int8 activations (KERN_Q8: opt-in, approximate) ----
 *
 * For 4- and 8-bit affine weights, llama.cpp's trade: each group of gs input
 * values is quantized to int8, x ≈ d·xq with d = max|x|/127 and xq =
 * rint(x/d) (clamped to ±127), so that Σ q·xq is an exact int32 sum
 * (AVX-512 VNNI `vpdpbusd`: 64 byte products per instruction). The bias
 * terms keep the exact fp32 group sums. Per weight the error is at most
 * |scale|·q·d/2; results stay bitwise identical across thread counts and
 * batch sizes, but not equal to the exact default (MODEL.md §9), so goldens are
 * checked with the exact kernels.
 *
 * The definition, kern_q8dot_ref, and its SIMD twins: for each row and
 * token, S_g = Σ q·xq over group g (exact in int32: at most 128·255·127),
 * then for g = 0, 1, ... in order lane[g % 16] = fma(S_g, d_g·s_g,
 * lane[g % 16]) and lane[g % 16] = fma(b_g, Σx_g, lane[g % 16]) (d_g·s_g one
 * rounded product), and the 16 lanes summed as in kern_dot_ref (l and l + w
 * for w = 8, 4, 2, 1). How the codes are laid out (by rows, or in blocks of
 * rows: kern_block_rows) does not change a bit. */
struct kern_q8input {
    const int8_t *xq;         /* [n, stride]: per 64-byte chunk of codes, the xq of the
                                 weights its bytes hold (4-bit: low nibbles' 64, then high
                                 nibbles' 64), zero past cols */
    const float *d;           /* [n, cols/gs] group scales (NaN for a group with a NaN or inf) */
    const float *xsum;        /* [n, cols/gs] exact fp32 group sums, in column order */
    int64_t stride;           /* bytes per token: cols rounded up to 512/bits */
};
typedef void (*q8dot_fn)(const struct wmat *w, const struct kern_q8input *in, int64_t n, float *y, int64_t row0,
                         int64_t row1);
/* For w with 4 or 8 bits and gs of 32, 64 or 128 (kern_q8_supports). */
bool kern_q8_supports(const struct wmat *w);
/* The input in a buffer of kern_q8input_bytes(w, n) bytes the caller provides. */
size_t kern_q8input_bytes(const struct wmat *w, int64_t n);
typedef void (*q8prep_fn)(const struct wmat *w, const float *x, int64_t n, void *buf, struct kern_q8input *in);
void kern_q8input_prepare(const struct wmat *w, const float *x, int64_t n, void *buf, struct kern_q8input *in);
void kern_q8input_prepare_avx512(const struct wmat *w, const float *x, int64_t n, void *buf, struct kern_q8input *in);
void kern_q8dot_ref(const struct wmat *w, const struct kern_q8input *in, int64_t n, float *y, int64_t row0,
                    int64_t row1);
void kern_q8dot_avx512(const struct wmat *w, const struct kern_q8input *in, int64_t n, float *y, int64_t row0,
                       int64_t row1);
void kern_q8dot_avxvnni(const struct wmat *w, const struct kern_q8input *in, int64_t n, float *y, int64_t row0,
                        int64_t row1);
void kern_q8dot_avx2(const struct wmat *w, const struct kern_q8input *in, int64_t n, float *y, int64_t row0,
                     int64_t row1);
void kern_q8dot_neon(const struct wmat *w, const struct kern_q8input *in, int64_t n, float *y, int64_t row0,
                     int64_t row1);
/* kern_q8dot_neon needs the dot-product intrinsics: GCC enables them per
 * function, clang (14) only for a target that has them, as Apple's arm64
 * targets do. Without them KERN_Q8 has no int8 kernels on arm64. */
#if GP_ARM64 && (!defined(__clang__) || defined(__ARM_FEATURE_DOTPROD))
#define KERN_NEON_DOTPROD 1
#else
#define KERN_NEON_DOTPROD 0
#endif
/* True when this CPU has int8 kernels (AVX-512 VNNI, AVX-VNNI, AVX2 or arm64
 * dotprod): without them KERN_Q8 is KERN_BEST. */
bool kern_has_q8(void);

/* The blocked layout, for the affine 4/8-bit kernels (exact and int8): a
 * quantized matrix whose row count is a multiple of KERN_BLOCK_ROWS
 * (kern_blockable) is stored in blocks
 * of 16 rows, each block one run of the same bytes as its rows, group after
 * group: group g's record holds its words (32-bit word k of the group of row
 * 16B + l at byte 64k + 4l), then the 16 rows' scales of the group, then their
 * biases (row l's at element l). One 64-byte load holds the same word of 16
 * rows, so the kernels keep one row per lane (the exact ones, reading by rows,
 * transpose 16 rows' words); and a thread's rows are one
 * stream (codes, scales and biases in separate arrays, three streams, were
 * slower from RAM). A blocked view's w, s and b point at block 0's first
 * word, scale and bias; block B's are KERN_BLOCK_ROWS·(row_bytes +
 * 2·srow_bytes)·B bytes further, and group g's a cols/gs-th of a block past
 * its block's. kern_blocked_bytes(w) is w's size (one expert), the same in
 * blocks as by rows; kern_block_rows writes blocks [b0, b1) of w (by rows;
 * one expert) into dst, the blocked copy's base; kern_blocked_view is the
 * view of that copy (experts kern_blocked_bytes apart). Every kernel reads
 * both layouts. */
#define KERN_BLOCK_ROWS 16
bool kern_blockable(const struct wmat *w);
/* Bytes from a blocked view's w (s, b) to block B's group g's first word (scale, bias). */
static inline size_t kern_block_off(const struct wmat *w, int64_t B, int64_t g)
{
    const size_t block = KERN_BLOCK_ROWS * (w->row_bytes + 2 * w->srow_bytes);
    return (size_t)B * block + (size_t)g * (block / (size_t)(w->cols / w->gs));
}
size_t kern_blocked_bytes(const struct wmat *w);
void kern_block_rows(const struct wmat *w, uint8_t *dst, int64_t b0, int64_t b1);
struct wmat kern_blocked_view(const struct wmat *w, const uint8_t *dst);

/* Σ a[i]·b[i] in a fixed order: sixteen lanes, lane l accumulating
 * a[i]·b[i] for i ≡ l (mod 16) in increasing i with fused multiply-adds, then
 * lanes l and l + w added for w = 8, 4, 2, 1. The SIMD versions are that
 * order exactly, so every level gives the same bits. */
typedef float (*dot_fn)(const float *a, const float *b, int64_t n);
float kern_dot_ref(const float *a, const float *b, int64_t n);
float kern_dot_avx2(const float *a, const float *b, int64_t n);
float kern_dot_avx512(const float *a, const float *b, int64_t n);
float kern_dot_neon(const float *a, const float *b, int64_t n);

/* out[j] = the dot product of a and b[j] (that order) for j < m: attention's
 * scores of one query against a block of keys, the keys' chains side by side. */
typedef void (*dots_fn)(const float *a, const float *const *b, int m, int64_t n, float *out);
void kern_dots_ref(const float *a, const float *const *b, int m, int64_t n, float *out);
void kern_dots_avx2(const float *a, const float *const *b, int m, int64_t n, float *out);
void kern_dots_avx512(const float *a, const float *const *b, int m, int64_t n, float *out);
void kern_dots_neon(const float *a, const float *const *b, int m, int64_t n, float *out);

/* y[i] += a[j]·x[j][i] for j = 0 .. m−1 in order, each a multiply, then an
 * add (every path gives the same bits): attention's weighted values, y kept
 * in registers across a block of them. */
typedef void (*axpy_fn)(float *y, const float *a, const float *const *x, int m, int64_t n);
void kern_axpy_ref(float *y, const float *a, const float *const *x, int m, int64_t n);
void kern_axpy_avx2(float *y, const float *a, const float *const *x, int m, int64_t n);
void kern_axpy_avx512(float *y, const float *a, const float *const *x, int m, int64_t n);
void kern_axpy_neon(float *y, const float *a, const float *const *x, int m, int64_t n);

/* e^v without libm, for GELU and the soft-cap: v clamped to ±87 (2^n stays
 * a finite normal number; NaN stays NaN), v = n·ln2 + r with n an integer,
 * e^r − 1 by its Taylor polynomial of degree 7 (|r| ≤ ln2/2: error < 1e-8),
 * e^v = 2^n·(1 + that). Every step is one IEEE multiply, add, divide or
 * compare, no fused multiply-add, so the SIMD twins give the same bits
 * (tests/test_kernels.c). */
#define KERN_EXP_VMAX 87.0f
#define KERN_LOG2E 1.44269504088896341f
#define KERN_LN2_HI 0.693359375f /* 355/512: n·KERN_LN2_HI is exact */
#define KERN_LN2_LO -2.12194440054690583e-4f
#define KERN_EXP_C2 (1.0f / 2.0f)
#define KERN_EXP_C3 (1.0f / 6.0f)
#define KERN_EXP_C4 (1.0f / 24.0f)
#define KERN_EXP_C5 (1.0f / 120.0f)
#define KERN_EXP_C6 (1.0f / 720.0f)
#define KERN_EXP_C7 (1.0f / 5040.0f)

/* e^v for v ≤ 87 (softmax's arguments are ≤ 0) from those steps: 2^n·(1 + P),
 * 0 below −87 (where e^v is under 1.7e-38), NaN for NaN. Within 2e-7
 * relative of e^v; the same bits on every machine, which libm's expf does
 * not promise. */
float kern_exp(float v);

/* tanh-approximated GELU, 0.5·x·(1 + tanh(u)) with u = √(2/π)·(x + 0.044715·x³),
 * computed as x / (1 + e^(−2u)): the same function, without the tanh form's
 * cancellation for negative x. Past the clamp (−2u > 87, x < −9.7) the
 * result is a zero of x's sign (|gelu| < |x|·e^−87 there). */
#define KERN_GELU_K 0.7978845608028654f /* √(2/π) */
#define KERN_GELU_C 0.044715f
float kern_gelu(float x);

/* g[i] = gelu(g[i])·u[i]: kern_gelu_mul_ref and its SIMD twins, bit-identical. */
typedef void (*gelu_mul_fn)(float *g, const float *u, int64_t n);
void kern_gelu_mul_ref(float *g, const float *u, int64_t n);
void kern_gelu_mul_avx2(float *g, const float *u, int64_t n);
void kern_gelu_mul_avx512(float *g, const float *u, int64_t n);

/* Logit soft-cap cap·tanh(x/cap), tanh(z) computed as (e^(2z) − 1)/(e^(2z) + 1)
 * with e^(2z) − 1 = 2^n·(1 + P) − 1 = 2^n·P + (2^n − 1) (P = e^r − 1: no
 * cancellation for small z). */
float kern_softcap(float x, float cap);

/* x[i] = kern_softcap(x[i], cap): the reference and its SIMD twins, bit-identical. */
typedef void (*softcap_fn)(float *x, float cap, int64_t n);
void kern_softcap_ref(float *x, float cap, int64_t n);
void kern_softcap_avx2(float *x, float cap, int64_t n);
void kern_softcap_avx512(float *x, float cap, int64_t n);

/* The version of the kernels' arithmetic: bumped whenever a kernel's bits
 * change, so that state saved by an older build (the cold prefix cache) is
 * never restored into a newer one. */
#define KERN_NUMERICS 8

/* Which implementation serves each case; filled once by kern_init. */
struct kern_table {
    const char *name;         /* the exact kernels: "scalar", "avx2", "avx512" or "neon" */
    const char *q8name;       /* KERN_Q8's int8 kernels: "avx512-vnni", "avx-vnni", "avx2" or
                                 "neon-dotprod"; NULL: none on this CPU (KERN_BEST then) */
    qdot_fn qdot;             /* fused 4/8-bit affine kernel (NULL: none) */
    matmul_fn matvec_bf16;    /* bf16 fast path (NULL: none) */
    bool blas;                /* sgemm for multi-token steps (KERN_BLAS) */
    dot_fn dot;               /* kern_dot_ref or its SIMD twin (always set) */
    dots_fn dots;             /* kern_dots_ref or its SIMD twin (always set) */
    axpy_fn axpy;             /* kern_axpy_ref or its SIMD twin (always set) */
    gelu_mul_fn gelu_mul;     /* kern_gelu_mul_ref or its SIMD twin (always set) */
    softcap_fn softcap;       /* kern_softcap_ref or its SIMD twin (always set) */
    q8dot_fn q8dot;           /* KERN_Q8: 4/8-bit affine matmuls on int8 activations (NULL: off) */
    q8prep_fn q8prep;         /* KERN_Q8: kern_q8input_prepare or its SIMD twin */
    qgemm_fn qgemm;           /* the fused kernels as a blocked GEMM, for steps of many tokens (NULL: none) */
    gemm_fn bf16gemm;         /* matvec_bf16 as a blocked GEMM, likewise */
    gemm_fn refgemm;          /* kern_matmul_ref's bits, faster (NULL: the reference itself) */
    struct kern_ws *ws;       /* the scratch of each worker (POOL_MAX_THREADS), kept across
                                 calls; released by kern_free */
    struct kern_scratch *scratch; /* [KERN_MANY] the prepared inputs of one call's matrices:
                                     sized by kern_reserve, grown when a call needs more */
};

struct kern_scratch {
    void *buf;
    size_t cap;               /* bytes */
};

enum kern_level {
    KERN_SCALAR,  /* the reference everywhere */
    KERN_BEST,    /* the fused SIMD kernels this CPU supports, for any number of tokens:
                     prefill, chunked and decode runs give bitwise-identical logits */
    KERN_BLAS,    /* KERN_BEST, plus OpenBLAS sgemm for multi-token matmuls: faster
                     prefill, but its rounding differs from decode's (see docs) */
    KERN_Q8,      /* KERN_BEST, with 4/8-bit affine matmuls on int8 activations
                     (kern_q8dot_*): faster, approximate, still deterministic */
};

/* Selects the kernels of a level (KERN_BLAS without OpenBLAS: KERN_BEST;
 * KERN_Q8 without int8 kernels: KERN_BEST). Every level but KERN_BLAS and
 * KERN_Q8 gives the definitions' bits, so the same on every machine. */
void kern_init(struct kern_table *t, enum kern_level level);

/* Releases what kern_init, kern_reserve and the calls since allocated. */
void kern_free(struct kern_table *t);

/* y[n, rows] = x[n, cols] · Wᵀ with the table's best path, split over
 * `threads` threads in fixed tiles of rows. */
void kern_matmul(const struct kern_table *t, const struct wmat *w, const float *x, int64_t n, float *y, int threads);

/* y_i = x · W_iᵀ for up to KERN_MANY matrices of the same input (q, k and v;
 * gate and up) in one parallel job: each matrix takes the path and tiles
 * kern_matmul gives it, so the same bits, and matrices of the same bits,
 * group size and columns share one input preparation. */
#define KERN_MANY 4
void kern_matmul_many(const struct kern_table *t, int count, const struct wmat *const w[], float *const y[],
                      const float *x, int64_t n, int threads);

/* Reserves the prepared-input scratch for matmuls of up to n tokens and
 * `cols` columns, and the blocked GEMMs' tile of each of `threads` workers,
 * so that such calls allocate nothing; ERR_NOMEM if it cannot. */
int kern_reserve(struct kern_table *t, int64_t n, int64_t cols, int threads);

/* The fused kernels' twins by ISA (call only when the CPU supports them). */
void kern_qdot_avx2(const struct wmat *w, const struct kern_qinput *in, int64_t n, float *y, int64_t row0,
                    int64_t row1);
void kern_qdot_avx512(const struct wmat *w, const struct kern_qinput *in, int64_t n, float *y, int64_t row0,
                      int64_t row1);
void kern_matvec_bf16_avx2(const struct wmat *w, const float *x, int64_t n, float *y, int64_t row0, int64_t row1);
void kern_matvec_bf16_avx512(const struct wmat *w, const float *x, int64_t n, float *y, int64_t row0, int64_t row1);
void kern_qdot_neon(const struct wmat *w, const struct kern_qinput *in, int64_t n, float *y, int64_t row0,
                    int64_t row1);
void kern_matvec_bf16_neon(const struct wmat *w, const float *x, int64_t n, float *y, int64_t row0, int64_t row1);

/* The prefill path: dequantize a tile of rows, then sgemm (OpenBLAS, loaded
 * at run time by kern_blas_init). kern_matmul uses it for steps of at least
 * KERN_GEMM_MIN_TOKENS tokens, in tiles of KERN_BLAS_ROWS rows (smaller steps
 * take the fused kernels: sgemm pads every call to at least 144 columns).
 * kern_matmul_blas_ws keeps its tile, padded input and output in ws;
 * kern_blas_init loads OpenBLAS (once; false when it is not installed) and
 * makes it single-threaded; the other functions need it loaded. */
#define KERN_BLAS_ROWS 256
void kern_matmul_blas_ws(const struct wmat *w, const float *x, int64_t n, float *y, int64_t row0, int64_t row1,
                         struct kern_ws *ws);
bool kern_blas_init(void);

/* ---- element-wise and row ops (scalar; the definitions) ---- */

/* y = x * (mean(x²) + eps)^-½ * w   (w NULL: no weight). In place allowed.
 * Σx² is dot(x, x): kern_dot's order, so every level's dot gives the same
 * bits (a single chain of dependent adds was ~0.4 ms of a decode step). */
void kern_rmsnorm(dot_fn dot, float *y, const float *x, const float *w, int64_t d, float eps);

/* The RoPE angles of position pos for per-pair inverse frequencies
 * inv_freq[d/2]: cs[2i], cs[2i + 1] = cos, sin of pos·inv_freq[i] (the angle
 * and both values computed in double, then rounded to float). Once per
 * position and layer type, not per head and layer. */
void kern_rope_cs(float *cs, int64_t d, const double *inv_freq, int64_t pos);

/* Rotate-half RoPE of one head vector x[d] with those angles: pair (i, i + d/2)
 * turns by angle i; inv_freq 0 leaves a pair as is. */
void kern_rope(float *x, int64_t d, const double *inv_freq, const float *cs);

/* Softmax in place over n values: max subtracted, kern_exp, the sum in order,
 * one division each. */
void kern_softmax(float *x, int64_t n);

/* ---- attention ---- */

/* Keys and values as query `row` of a step sees them: key (which 0) or value
 * (1) of KV head g at position p, d floats, a pointer into storage or decoded
 * into buf[d]; NULL for a key a mask hides from that query. */
typedef const float *(*kern_kv_fn)(const void *ctx, int64_t row, int64_t p, int64_t g, int which, float *buf);

/* Query heads handled by one task: the heads of one KV head read each key
 * and value once for all of them; every head's arithmetic is the same as alone. */
#define KERN_ATTN_HEADS 4

/* Keys (and values) read per block: the block's keys are scored against
 * each head with one dots call, its values added with one axpy call. */
#define KERN_ATTN_KEYS 16

/* Causal attention of a step's queries (MODEL.md §5): for each query row
 * (position pos[row]) and query head h (KV head h / (Nq / G)), the scores
 * q·k (scale 1) of keys max(0, pos − window + 1) .. pos (window 0: from 0)
 * in position order, softmax (max subtracted, exp, sum, each weight one
 * division), out = Σ w·v over the keys in order, a weight below 2^-100
 * skipped. Tasks are (row, KV head, block of KERN_ATTN_HEADS heads), fixed
 * by the problem; dots and axpy are the table's (bit-identical on every level). */
struct kern_attn {
    const float *q;           /* [N, Nq, d] */
    float *out;               /* [N, Nq, d] */
    const int64_t *pos;       /* [N] */
    int64_t N, Nq, G, d, window;
    kern_kv_fn kv;
    const void *ctx;
    int64_t keys;             /* most keys any query sees */
    float *scratch;           /* per worker (pool_workers(threads, tasks)) kern_attn_scratch floats */
};

/* Floats of scratch one worker needs for up to `keys` keys of head dim d. */
static inline size_t kern_attn_scratch(int64_t keys, int64_t d)
{
    return (size_t)(KERN_ATTN_HEADS * keys + KERN_ATTN_KEYS * d);
}

void kern_attention(const struct kern_table *t, const struct kern_attn *a, int threads);

#endif
