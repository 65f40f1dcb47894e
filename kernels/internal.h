/* internal.h - what the kernel files (and their tests) share: the scalar
 * definitions every SIMD twin (x86/x86.h, arm/arm.h) gives bit for bit, the
 * fused kernels' inputs, the blocked layout's offsets, the workers' scratch. */
#ifndef GP_KERNELS_INTERNAL_H
#define GP_KERNELS_INTERNAL_H

#include "core/cpu.h"
#include "kernels/kernels.h"
#include "quant/quant.h"

/* ---- matrix products: y[n, rows] = x[n, cols] · Wᵀ, rows [row0, row1) ---- */

/* The scalar definition: each output an ordered dot product over the
 * columns with the weight dequantized per group. */
void kern_matmul_ref(const struct wmat *w, const float *x, int64_t n, float *y, int64_t row0, int64_t row1);

/* Input prepared once per matmul for the fused quantized kernels: per-group
 * input sums, and the input in a buffer of kern_qinput_bytes(w, n) bytes the
 * caller provides (aligned for floats). Affine: in column order, column j
 * divided by the place value its code keeps (2^(bits·k) for code k of its
 * word, 1 for the top code), token t at t·stride; for the blocked GEMM
 * (`gemm`) in panels of AGEMM_T tokens, token 12p + u's column j at
 * (12p·stride + 12j) + u, zeros for the tokens past n. MX: rearranged to the
 * lanes of the packed codes (see x86/avx512.c), token by token, or for the
 * blocked GEMM in fours: tokens 4i .. 4i + 3 share 4·stride floats, the 16
 * lanes of code k of block b of token 4i + u at 4·(b·16W + 16k) + 16u (W
 * codes per word). */
struct kern_qinput {
    const float *xd;          /* [tokens, stride]: affine cols rounded up to 16, MX to blocks of 16 code words */
    const float *xsum;        /* [n, cols/gs] */
    int64_t stride;
    bool gemm;                /* laid out for kern_qgemm_* */
};
size_t kern_qinput_bytes(const struct wmat *w, int64_t n);
/* Prepared in parts, on the thread pool: kern_qinput_layout points *in into
 * buf and returns the number of parts; kern_qinput_part(part) fills tokens
 * [part·KERN_QINPUT_PART, +KERN_QINPUT_PART) (a whole number of panels; one
 * panel, so that many threads share a prefill's: 512 tokens in 43 parts, where
 * 48-token parts gave 11 and left 5 of 16 threads idle). */
#define KERN_QINPUT_PART 12
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
 * needs no reduction and the GEMM broadcasts the input (x86/avx512.c).
 * MX, per row and token: 16 lanes A, all +0. The row's words go in blocks of
 * 16, word 16b + l to lane l. For each block in order and each of its words:
 * with x_k the input of code k, p0 = x0·q0, p1 = x1·q1, then p_(k mod 2) =
 * fma(x_k, q_k, p_(k mod 2)) for k ≥ 2; A[l] = fma(p0 + p1, s, A[l]) with s
 * the scale of the word's group. Then A[l] += +0, and the 16 lanes summed as
 * in kern_dot_ref. Every step is one IEEE operation, so any ISA can repeat
 * it. */
void kern_qdot_ref(const struct wmat *w, const struct kern_qinput *in, int64_t n, float *y, int64_t row0,
                   int64_t row1);

/* ggml's block types in the fused kernels (quant/ggml.h). A block is decoded
 * into its weights' integer codes c (int8, in column order: the twins'
 * decoders give the same bytes) and, per sub-block of S weights, a scale a
 * and an offset m: the weight is a·c + m, ggml's value (d·sc·q − dmin·m,
 * d·(q − 16), d·kvalue ...; a and m are exact products). The definition,
 * kern_gdot_ref, per row and token: 16 lanes A = +0, B = +0; for each
 * sub-block j of the row in order, p[l] = x_l·c_l, then for S = 32 p[l] =
 * fma(x_(16+l), c_(16+l), p[l]) (x_i, c_i: the sub-block's i-th input and
 * code); A[l] = fma(p[l], a_j, A[l]); for a type with offsets (S = 32) B =
 * fma(m_j, Σx_j, B), Σx_j the prepared input's sum of the sub-block's
 * inputs. The result is A's lanes summed as in kern_dot_ref, plus B. The
 * prepared input (kern_qinput) holds x as it is (stride cols) and the sums
 * of every 32 columns. */
#define KERN_GSUM 32
struct kern_gblock {
    int8_t c[256];
    float a[16], m[16];
};
struct kern_gtype {
    int S;                    /* weights per sub-block: 16 or 32 */
    bool offsets;             /* m_j present (S = 32) */
    void (*params)(const uint8_t *blk, float *a, float *m); /* a and m of each sub-block */
    void (*codes)(const uint8_t *blk, int8_t *c);           /* the scalar decoder of c */
};
/* The fused row of a ggml mode; NULL for the modes the reference runs. */
const struct kern_gtype *kern_gtype_of(enum qmode m);
void kern_gdot_ref(const struct wmat *w, const struct kern_qinput *in, int64_t n, float *y, int64_t row0,
                   int64_t row1);

/* KERN_Q8 on them: the input quantized per KERN_GSUM columns (kern_q8input
 * of 8 bits, group KERN_GSUM: kern_gq8_view), per row and token 16 lanes L =
 * +0; for each sub-block j of the row in order, S_j = Σ c·xq (exact in
 * int32), L[j % 16] = fma(S_j, d·a_j, L[j % 16]) (d·a_j one rounded product,
 * d the input scale of the sub-block's 32 columns), then for a type with
 * offsets L[j % 16] = fma(m_j, Σx_j, L[j % 16]); the result is L's lanes
 * summed as in kern_dot_ref. */
void kern_gq8dot_ref(const struct wmat *w, const struct kern_q8input *in, int64_t n, float *y, int64_t row0,
                     int64_t row1);
/* The view of w whose kern_q8input the ggml kernels read (w itself otherwise). */
static inline struct wmat kern_gq8_view(const struct wmat *w)
{
    struct wmat v = *w;
    if (kern_gtype_of(w->mode))
        v.bits = 8, v.gs = KERN_GSUM;
    return v;
}

/* The definition of the bf16 kernels: per row and token, two chains of 16
 * lanes, column j's product fused into lane j % 16 of chain (j / 16) % 2 in
 * column order, the chains added lane by lane, then the lanes summed as in
 * kern_dot_ref. */
void kern_matvec_bf16_ref(const struct wmat *w, const float *x, int64_t n, float *y, int64_t row0, int64_t row1);

/* Scratch kept across calls and grown on demand (fresh multi-megabyte buffers
 * would cost a page fault per 4 KiB): a GEMM's tile, sgemm's, a prepared input. */
struct kern_ws {
    void *buf;                /* 64-byte aligned */
    size_t cap;               /* bytes */
};
/* ws's buffer holding at least `bytes`; NULL: out of memory. */
void *kern_ws_reserve(struct kern_ws *ws, size_t bytes);

/* Steps of at least KERN_AGEMM_MIN_TOKENS tokens (affine) or
 * KERN_QGEMM_MIN_TOKENS (microscaling, bf16) take the fused and bf16
 * kernels' definitions as blocked GEMMs (one thread, 1536 × 1536: affine
 * 4/8-bit 1.2–1.3× the fused kernels at 9 tokens, 1.6× at 24, 2× at 512,
 * where at 8 the fused kernel's two passes of 4 tokens run 1.0–1.2× the
 * GEMM's panel of 12; microscaling 1.4–1.5× at 8, 2× from 24; bf16 1.0–1.3×
 * at 8, 1.5–1.7× at 16, 2.3× at 512): the formats' table in dispatch.c. */
#define KERN_QGEMM_MIN_TOKENS 8
#define KERN_AGEMM_MIN_TOKENS 9

/* The workspaces of the blocked GEMMs (x86/x86.h, arm/arm.h) for a tile of `rows` rows
 * and n tokens, 64-byte aligned: the fused kernels', the bf16 kernels' and
 * kern_matmul_ref's. */
size_t kern_qgemm_ws_bytes(const struct wmat *w, int64_t rows, int64_t n);
size_t kern_bf16gemm_ws_bytes(const struct wmat *w, int64_t rows, int64_t n);
size_t kern_refgemm_ws_bytes(const struct wmat *w, int64_t rows, int64_t n);
/* Whether rows [r0, r0 + nr) of w are one whole block of its blocked layout
 * (the refgemms' path that decodes a block's lines straight into the lanes). */
static inline bool kern_whole_block(const struct wmat *w, int64_t r0, int64_t nr)
{
    return w->blocked && r0 % KERN_BLOCK_ROWS == 0 && nr == KERN_BLOCK_ROWS;
}
/* BLOCK(B) for an affine width B (2, 3, 4, 5, 6, 8: KERN_AFFINE_WIDTHS, the
 * widths kern_blockable takes) as a constant. */
#define KERN_AFFINE_WIDTHS (1u << 2 | 1u << 3 | 1u << 4 | 1u << 5 | 1u << 6 | 1u << 8)
#define KERN_BY_BITS(bits, BLOCK)                                                                                      \
    switch (bits) {                                                                                                    \
    case 2: BLOCK(2); break;                                                                                           \
    case 3: BLOCK(3); break;                                                                                           \
    case 4: BLOCK(4); break;                                                                                           \
    case 5: BLOCK(5); break;                                                                                           \
    case 6: BLOCK(6); break;                                                                                           \
    default: BLOCK(8); break;                                                                                          \
    }
/* BLOCK(T) for T = min(left, 6) as a constant, so that a register block of T
 * tokens unrolls (the AVX2 and NEON refgemms' last step). */
#define KERN_TOKENS6(left, BLOCK)                                                                                      \
    switch ((left) < 6 ? (left) : 6) {                                                                                 \
    case 1: BLOCK(1); break;                                                                                           \
    case 2: BLOCK(2); break;                                                                                           \
    case 3: BLOCK(3); break;                                                                                           \
    case 4: BLOCK(4); break;                                                                                           \
    case 5: BLOCK(5); break;                                                                                           \
    default: BLOCK(6); break;                                                                                          \
    }

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
    const int8_t *xqs;        /* 8 bits: [n, stride] xq with each 128 columns' second and
                                 third 32 swapped (the order of Q4_K's nibbles); 4 bits: NULL */
    const int32_t *qsum;      /* 8 bits: [n, stride/16] Σ xq of each 16 columns (what codes
                                 stored with an offset subtract); 4 bits: NULL */
    int64_t stride;           /* bytes per token: cols rounded up to 512/bits */
};
/* For w with 4 or 8 bits and gs of 32, 64 or 128 (kern_q8_supports). */
bool kern_q8_supports(const struct wmat *w);
/* The input in a buffer of kern_q8input_bytes(w, n) bytes the caller provides,
 * prepared in parts on the thread pool as kern_qinput's: kern_q8input_layout
 * points *in into buf and returns the number of parts; a q8prep_fn (the
 * definition: kern_q8input_part) fills tokens [part·KERN_QINPUT_PART,
 * +KERN_QINPUT_PART). */
size_t kern_q8input_bytes(const struct wmat *w, int64_t n);
/* The scratch a q8dot_fn's worker holds for n tokens of w (rows unused: the
 * mm_path's form): a 4-bit blocked matrix's 2 blocks of codes as bytes, from
 * 4 tokens (x86/q8_avx512.c), else none. */
size_t kern_q8_ws_bytes(const struct wmat *w, int64_t rows, int64_t n);
int64_t kern_q8input_layout(const struct wmat *w, int64_t n, void *buf, struct kern_q8input *in);
void kern_q8input_part(const struct wmat *w, const float *x, int64_t n, void *buf, int64_t part);
void kern_q8dot_ref(const struct wmat *w, const struct kern_q8input *in, int64_t n, float *y, int64_t row0,
                    int64_t row1, void *ws);

/* The prefill path of KERN_BLAS: dequantize a tile of rows, then sgemm
 * (OpenBLAS, loaded at run time by kern_blas_init), in tiles of
 * KERN_BLAS_ROWS rows (smaller steps take the fused kernels: sgemm pads
 * every call to at least 144 columns). kern_matmul_blas_ws keeps its tile,
 * padded input and output in ws; kern_blas_init loads OpenBLAS (once; false
 * when it is not installed) and makes it single-threaded. */
#define KERN_BLAS_ROWS 256
void kern_matmul_blas_ws(const struct wmat *w, const float *x, int64_t n, float *y, int64_t row0, int64_t row1,
                         struct kern_ws *ws);
bool kern_blas_init(void);

/* ---- the blocked layout (kernels.h) ----
 *
 * Blocks of 16 rows, each block one run of the same bytes as its rows, group
 * after group: group g's record holds its words (32-bit word k of the group
 * of row 16B + l at byte 64k + 4l), then the 16 rows' scales of the group,
 * then their biases (row l's at element l). One 64-byte load holds the same
 * word of 16 rows, so the kernels keep one row per lane (the exact ones,
 * reading by rows, transpose 16 rows' words); and a thread's rows are one
 * stream (codes, scales and biases in separate arrays, three streams, were
 * slower from RAM). A blocked view's w, s and b point at block 0's first
 * word, scale and bias; block B's are KERN_BLOCK_ROWS·(row_bytes +
 * 2·srow_bytes)·B bytes further, and group g's a cols/gs-th of a block past
 * its block's: kern_block_off, from a blocked view's w (s, b) to block B's
 * group g's first word (scale, bias). */
static inline size_t kern_block_off(const struct wmat *w, int64_t B, int64_t g)
{
    const size_t block = KERN_BLOCK_ROWS * (w->row_bytes + 2 * w->srow_bytes);
    return (size_t)B * block + (size_t)g * (block / (size_t)(w->cols / w->gs));
}

/* ---- vector and element-wise definitions ---- */

/* Σ a[i]·b[i] in a fixed order: sixteen lanes, lane l accumulating
 * a[i]·b[i] for i ≡ l (mod 16) in increasing i with fused multiply-adds, then
 * lanes l and l + w added for w = 8, 4, 2, 1. The SIMD versions are that
 * order exactly, so every level gives the same bits. */
float kern_dot_ref(const float *a, const float *b, int64_t n);

/* The SIMD twins of dots and axpy prefetch, within a call, the keys
 * DOTS_AHEAD keys (or a pass's keys, when more) ahead of those being scored
 * and a value's columns AXPY_AHEAD floats (or a pass's columns, when more)
 * ahead of those being added: a decode step's keys and values come from RAM
 * in bursts too short for the hardware's prefetchers (X16, the attention of
 * an E2B decode step after 4096 tokens alone: 1.7-2.2x at 1 thread, 1.3-1.5x
 * at 4, 0.84-0.87x at 16). */
#define DOTS_AHEAD 4
#define AXPY_AHEAD 64

/* out[u·ld + j] = the dot product of q's row u (q + u·n) and b[j] (that
 * order) for heads u < nh and keys j < m: attention's scores of a query's
 * heads against a block of keys, each key read once for all of them. */
void kern_dots_ref(const float *q, int nh, const float *const *b, int m, int64_t n, float *out, int64_t ld);

/* For each head u < nh, y[u·ld + i] += w[u·wld + j]·x[j][i] (i < n) for
 * j = 0 .. m−1 in order, each a fused multiply-add (every path gives the
 * same bits): attention's weighted values, each value read once for all the
 * heads. A NULL x[j], or a weight below KERN_WEIGHT_MIN (kernels.h; NaN is
 * not below it), adds nothing. */
void kern_axpy_ref(float *y, int64_t ld, int nh, const float *w, int64_t wld, const float *const *x, int m, int64_t n);

/* The twins' view of that rule for heads u < H (H ≤ 8) of a block of up to
 * 16 values: bit u of use[j] set where head u adds x[j]. */
static inline void kern_weights_used(const float *w, int64_t wld, int H, const float *const *x, int m, unsigned *use)
{
    for (int j = 0; j < m; j++) {
        use[j] = 0;
        for (int u = 0; x[j] && u < H; u++)
            use[j] |= (unsigned)!(w[u * wld + j] < KERN_WEIGHT_MIN) << u;
    }
}

/* kern_exp and its twins: v clamped to ±87 (2^n stays a finite normal
 * number; NaN stays NaN), v = n·ln2 + r with n an integer, e^r − 1 by its
 * Taylor polynomial of degree 7 (|r| ≤ ln2/2: error < 1e-8), e^v = 2^n·(1 +
 * that). Every step is one IEEE multiply, add, divide or compare, no fused
 * multiply-add, so the SIMD twins give the same bits (tests/test_kernels.c);
 * libm's expf does not promise that. */
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

/* tanh-approximated GELU, 0.5·x·(1 + tanh(u)) with u = √(2/π)·(x + 0.044715·x³),
 * computed as x / (1 + e^(−2u)): the same function, without the tanh form's
 * cancellation for negative x. Past the clamp (−2u > 87, x < −9.7) the
 * result is a zero of x's sign (|gelu| < |x|·e^−87 there). */
#define KERN_GELU_K 0.7978845608028654f /* √(2/π) */
#define KERN_GELU_C 0.044715f
float kern_gelu(float x);

/* g[i] = gelu(g[i])·u[i]: the definition of the table's gelu_mul. */
void kern_gelu_mul_ref(float *g, const float *u, int64_t n);

/* Logit soft-cap cap·tanh(x/cap), tanh(z) computed as (e^(2z) − 1)/(e^(2z) + 1)
 * with e^(2z) − 1 = 2^n·(1 + P) − 1 = 2^n·P + (2^n − 1) (P = e^r − 1: no
 * cancellation for small z). */
float kern_softcap(float x, float cap);

/* x[i] = kern_softcap(x[i], cap): the definition of the table's softcap. */
void kern_softcap_ref(float *x, float cap, int64_t n);

/* n scale bytes of an MX-quantized row as float32 (mx_scale_value). */
static inline void kern_mx_scales(enum qmode m, const uint8_t *src, float *dst, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        dst[i] = mx_scale_value(m, src[i]);
}

/* Where 32-bit word k of row r sits in w->w, and group g's scale or bias of
 * row r in w->s or w->b: by rows, or in blocks of 16. */
static inline size_t kern_code_off(const struct wmat *w, int64_t r, int64_t k)
{
    if (!w->blocked)
        return (size_t)r * w->row_stride + (size_t)(4 * k);
    const int64_t words = w->gs * w->bits / 32, g = k / words, l = r % KERN_BLOCK_ROWS;
    return kern_block_off(w, r / KERN_BLOCK_ROWS, g) + (size_t)(KERN_BLOCK_ROWS * 4 * (k - g * words) + 4 * l);
}

static inline size_t kern_param_off(const struct wmat *w, int64_t r, int64_t g)
{
    size_t psize = dtype_table[w->dtype].bits / 8;
    if (!w->blocked)
        return (size_t)r * w->srow_bytes + (size_t)g * psize;
    return kern_block_off(w, r / KERN_BLOCK_ROWS, g) + (size_t)(r % KERN_BLOCK_ROWS) * psize;
}

/* The mask of rows r .. r+15 within [row0, row1): bit l for row r + l. */
static inline uint32_t kern_rows_mask(int64_t r, int64_t row0, int64_t row1)
{
    uint32_t m = row1 - r >= 16 ? 0xFFFFu : row1 <= r ? 0u : (1u << (row1 - r)) - 1;
    return r < row0 ? m & ~((1u << (row0 - r)) - 1) : m;
}

/* Group g's scales (p = w->s) or biases (w->b) of rows r0 .. r0+15 as
 * float32 in v, zero for the rows not in the mask m (bit l: row r0 + l);
 * blocked, r0 starts a block. */
static inline void kern_params16(const struct wmat *w, const uint8_t *p, int64_t r0, int64_t g, uint32_t m, float v[16])
{
    const size_t psize = dtype_table[w->dtype].bits / 8;
    for (int l = 0; l < 16; l++)
        if (m >> l & 1)
            dtype_to_f32(w->dtype, p + (w->blocked ? kern_block_off(w, r0 / 16, g) + (size_t)l * psize
                                                   : (size_t)(r0 + l) * w->srow_bytes + (size_t)g * psize),
                         &v[l], 1);
        else
            v[l] = 0.0f;
}

/* Group g's scale (p = w->s) or bias (w->b) of row r as float32. */
static inline float kern_param_f32(const struct wmat *w, const uint8_t *p, int64_t r, int64_t g)
{
    if (w->mode != QM_AFFINE)
        return mx_scale_value(w->mode, p[kern_param_off(w, r, g)]);
    float v;
    dtype_to_f32(w->dtype, p + kern_param_off(w, r, g), &v, 1);
    return v;
}

/* Lanes l and l + w added for w = 8, 4, 2, 1 (lane is overwritten). */
static inline float kern_lanes_sum16(float lane[16])
{
    for (int w = 8; w >= 1; w /= 2)
        for (int l = 0; l < w; l++)
            lane[l] += lane[l + w];
    return lane[0];
}

/* Tokens of a panel of the bf16 and MX blocked GEMMs (x86/avx512.c, x86/avx2.c, arm/neon.c; their workspace:
 * input.c). */
#define GEMM_TP 16

#define GEMM_KC 512 /* the bf16 and MX GEMMs' columns of a chunk: whole blocks at 4 and 8 bits (128, 64) */

/* The bf16 GEMMs' panel of tp tokens from t0 over the tile's rows (floats qf,
 * cols32 apart; chains in acc): chunks of GEMM_KC columns up to `full`, in each
 * pieces of R <= 3 rows × T <= 4 tokens, each shape its own instantiation of
 * piece(R, T) over qr, xr, ar and j0 .. j1. */
#define BGEMM_CHUNKS(piece)                                                                                            \
    for (int64_t j0 = 0; j0 < full; j0 += GEMM_KC) {                                                                   \
        const int64_t j1 = j0 + GEMM_KC < full ? j0 + GEMM_KC : full;                                                  \
        for (int64_t r = 0; r < rows; r += 3)                                                                          \
            for (int64_t u = 0; u < tp; u += 4) {                                                                      \
                const float *qr = qf + r * cols32, *xr = x + (t0 + u) * cols;                                          \
                float *ar = acc + (r * GEMM_TP + u) * 32;                                                              \
                const int left = tp - u >= 4 ? 4 : (int)(tp - u), R = rows - r >= 3 ? 3 : (int)(rows - r);             \
                BGEMM_SHAPES(R, left, piece)                                                                           \
            }                                                                                                          \
    }

#define BGEMM_SHAPES(R, T, piece)                                                                                      \
    switch ((R) * 4 + (T)) {                                                                                           \
    case 16: piece(3, 4); break;                                                                                       \
    case 15: piece(3, 3); break;                                                                                       \
    case 14: piece(3, 2); break;                                                                                       \
    case 13: piece(3, 1); break;                                                                                       \
    case 12: piece(2, 4); break;                                                                                       \
    case 11: piece(2, 3); break;                                                                                       \
    case 10: piece(2, 2); break;                                                                                       \
    case 9: piece(2, 1); break;                                                                                        \
    case 8: piece(1, 4); break;                                                                                        \
    case 7: piece(1, 3); break;                                                                                        \
    case 6: piece(1, 2); break;                                                                                        \
    default: piece(1, 1); break;                                                                                       \
    }

/* Tokens of a panel of the affine GEMM (kern_agemm_tile, input.c; its
 * blocks: x86/avx512.c, x86/avx2.c, arm/neon.c), its input laid out so; the
 * tile's sets of 16 rows come in multiples of AGEMM_S (AVX-512's block runs
 * AGEMM_S side by side). */
#define AGEMM_T 12
#define AGEMM_KC 2048 /* columns of a tile decoded at a time (a multiple of every group size) */
#define AGEMM_S 2

/* One ISA's parts of the affine GEMM, for one width. decode: groups [g0, g1)
 * of the 16 rows from r0 (m: those in the tile) into codes qt [(g1 − g0)·gs,
 * 16] (code k of word i at column i·per_word + k, its place value kept),
 * scales st and biases bt [groups, 16] (at group g), zeros for the rows not
 * in m; block: `sets` sets of codes q (qs floats apart) and their scales st
 * (ss apart, from the slice's first group) × a panel of AGEMM_T tokens x
 * ([ng·gs, AGEMM_T]) folded into A ([sets, AGEMM_T, 16]); finish: a set's
 * outputs for tokens t0 .. t0+tp−1 (rows r .. r+15 in m) from its A
 * ([AGEMM_T, 16]) and the bias terms of bt. */
struct kern_agemm_isa {
    void (*decode)(const struct wmat *w, int64_t r0, uint32_t m, int64_t g0, int64_t g1, float *qt, float *st,
                   float *bt);
    void (*block)(const float *q, int64_t qs, const float *x, const float *st, int64_t ss, int64_t ng, int gs,
                  float *A);
    void (*finish)(const struct wmat *w, const struct kern_qinput *in, const float *bt, const float *A, int64_t t0,
                   int tp, int64_t r, uint32_t m, float *y);
    int sets; /* 1 or AGEMM_S */
};

/* Rows [row0, row1) of the affine GEMM for n tokens (input laid out for it)
 * with one ISA's parts, in kern_qgemm_ws_bytes of ws: slices of AGEMM_KC
 * columns, each set's codes decoded once and run for every panel of tokens
 * while in L2 (a whole 64-row tile of a 12288-column matrix would not: 54 %
 * of sgemm against 83 %), A kept per panel across the slices; then the bias
 * terms (input.c). */
void kern_agemm_tile(const struct kern_agemm_isa *isa, const struct wmat *w, const struct kern_qinput *in, int64_t n,
                     float *y, int64_t row0, int64_t row1, float *ws);

/* sum[t·ng + g] = Σx over group g of token t, in column order (input.c). */
void kern_group_sums(const struct wmat *w, const float *x, int64_t n, float *sum);

/* Part `part` of a kern_q8input for n tokens in buf: the pointers into buf
 * the preparations write, the group count, the stride, and the part's tokens
 * [t0, t1), whose xq kern_q8input_part_begin zeroes (input.c). */
struct kern_q8parts {
    float *d, *xsum;
    int8_t *xq, *xqs;
    int32_t *qsum;
    int64_t ng, stride, t0, t1;
};
void kern_q8input_part_begin(const struct wmat *w, int64_t n, void *buf, int64_t part, struct kern_q8parts *p);
/* The part's xqs and qsum from its xq (every preparation's last step). */
void kern_q8input_part_end(const struct kern_q8parts *p);

#endif
