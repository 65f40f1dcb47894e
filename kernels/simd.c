/* simd.c - AVX2 and AVX-512 fused dequantize + dot products.
 *
 * MLX affine weights: each output is Σ_g scale_g·(Σ x·q)_g + Σ_g bias_g·(Σx)_g,
 * the form MLX's own kernels use; the bias terms use per-group input sums
 * computed once per call. Codes are read as 32-bit words, 16 words (one
 * AVX-512 vector, two AVX2 vectors) at a time: lane l holds word l, and code
 * k of every lane is isolated with one AND of the mask (2^bits − 1)·2^(bits·k)
 * (the top code with one shift) and converted to float, which is then
 * q·2^(bits·k) exactly. So that no shift back is needed, the input is
 * rearranged once per call to match: xd[16k + l] = x[W·l + k]·2^(−bits·k),
 * W = 32/bits codes per word (a power-of-two scaling, exact), zero-padded
 * to whole blocks of 16 words. The q·x products of a block accumulate in two
 * chains, are multiplied by the group scales of their lanes, and accumulate
 * in two vectors across the row; one reduction ends the row.
 *
 * bf16 weights: Σ x·w with the same vector accumulation.
 *
 * A weight row is decoded once for up to TB tokens, and every token goes
 * through exactly the same operations as when it is alone, so prefill,
 * chunked and decode runs give bitwise-identical logits. Compiled with
 * per-function target attributes and chosen at run time (no -march flag).
 * Tested against kern_matmul_ref on odd sizes (tests/test_kernels.c). */
#include <immintrin.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/bytes.h"
#include "core/dtype.h"
#include "core/err.h"
#include "core/quant.h"
#include "kernels/kernels.h"




#define PREFETCH 4096 /* bytes ahead in the code stream: the row after next, for E2B-sized rows */
#define PARAMS_AHEAD 8 /* rows ahead in the scales and biases streams */
#define TB 4 /* tokens sharing one decode of a weight row */
#define PARAMS_MAX 256 /* scales and biases of a row converted at once */
#define INLINE static inline __attribute__((always_inline))

bool kern_cpu_has_avx2(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

bool kern_cpu_has_avx512(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && kern_cpu_has_avx2();
}

bool kern_cpu_has_avx512_vnni(void)
{
    return kern_cpu_has_avx512() && __builtin_cpu_supports("avx512vnni");
}

/* sum[t·ng + g] = Σx over group g of token t, in column order. */
static void group_sums(const struct wmat *w, const float *x, int64_t n, float *sum)
{
    const int64_t ng = w->cols / w->gs;
    for (int64_t t = 0; t < n; t++)
        for (int64_t g = 0; g < ng; g++) {
            float s = 0.0f;
            for (int64_t j = g * w->gs; j < (g + 1) * w->gs; j++)
                s += x[t * w->cols + j];
            sum[t * ng + g] = s;
        }
}

int kern_qinput_prepare(const struct wmat *w, const float *x, int64_t n, struct kern_qinput *in)
{
    const int64_t ng = w->cols / w->gs, cols = w->cols, per_word = 32 / w->bits, blk = 16 * per_word;
    const int64_t stride = (cols + blk - 1) / blk * blk;
    float *buf = malloc((size_t)(n * ng + n * stride) * sizeof *buf);
    in->buf = buf;
    if (!buf)
        return ERR_NOMEM;
    group_sums(w, x, n, buf);
    in->xsum = buf;
    float *xd = buf + n * ng;
    for (int64_t t = 0; t < n; t++)
        for (int64_t b = 0; b < stride; b += blk)
            for (int64_t k = 0; k < per_word; k++) {
                /* the top code is shifted down, the others keep their place value */
                float unit = k == per_word - 1 ? 1.0f : ldexpf(1.0f, -w->bits * (int)k);
                for (int64_t l = 0; l < 16; l++) {
                    int64_t j = b + per_word * l + k;
                    xd[t * stride + b + 16 * k + l] = j < cols ? x[t * cols + j] * unit : 0.0f;
                }
            }
    in->xd = xd;
    in->stride = stride;
    return ERR_OK;
}

void kern_qinput_free(struct kern_qinput *in)
{
    free(in->buf);
    in->buf = NULL;
}

/* The buffer of a kern_q8input for n tokens (xq zeroed) and the pointers into
 * it the preparations write. */
struct q8parts {
    float *d, *xsum;
    int8_t *xq;
    int64_t ng;
};

static int q8input_alloc(const struct wmat *w, int64_t n, struct kern_q8input *in, struct q8parts *p)
{
    const int64_t blk = 512 / w->bits, stride = (w->cols + blk - 1) / blk * blk;
    p->ng = w->cols / w->gs;
    float *buf = malloc((size_t)(2 * n * p->ng) * sizeof *buf + (size_t)(n * stride));
    in->buf = buf;
    if (!buf)
        return ERR_NOMEM;
    p->d = buf;
    p->xsum = buf + n * p->ng;
    p->xq = (int8_t *)(void *)(p->xsum + n * p->ng);
    memset(p->xq, 0, (size_t)(n * stride));
    in->d = p->d;
    in->xsum = p->xsum;
    in->xq = p->xq;
    in->stride = stride;
    return ERR_OK;
}

/* One definition for every path (kernels.h): d = max|x|/127 per group, xq =
 * rint(x/d) clamped to ±127 at the byte that meets x's code in the chunk
 * (4-bit: weight o of a 128-weight chunk pairs with byte o/2, low nibble for
 * even o, so its xq goes to byte (o odd)·64 + o/2). A group with a NaN or inf
 * gets d = NaN and xq = 0, so the NaN reaches the output; a group whose d is
 * 0 (all zero, or max|x| so small that /127 underflows) keeps xq = 0. */
int kern_q8input_prepare(const struct wmat *w, const float *x, int64_t n, struct kern_q8input *in)
{
    struct q8parts p;
    if (q8input_alloc(w, n, in, &p) != ERR_OK)
        return ERR_NOMEM;
    const int64_t ng = p.ng, blk = 512 / w->bits, stride = in->stride;
    group_sums(w, x, n, p.xsum);
    for (int64_t t = 0; t < n; t++)
        for (int64_t g = 0; g < ng; g++) {
            const float *xg = x + t * w->cols + g * w->gs;
            float m = 0.0f;
            bool finite = true;
            for (int i = 0; i < w->gs; i++) {
                float a = fabsf(xg[i]);
                if (!isfinite(a))
                    finite = false;
                else if (a > m)
                    m = a;
            }
            float dg = finite ? m / 127.0f : NAN;
            p.d[t * ng + g] = dg;
            if (!finite || dg == 0.0f) /* dg is 0 also for a tiny m that underflows: xq stay 0 */
                continue;
            for (int i = 0; i < w->gs; i++) {
                int64_t j = g * w->gs + i, c = j / blk, o = j % blk;
                float q = rintf(xg[i] / dg);
                q = q > 127.0f ? 127.0f : q < -127.0f ? -127.0f : q;
                p.xq[t * stride + (w->bits == 8 ? j : 128 * c + 64 * (o & 1) + o / 2)] = (int8_t)q;
            }
        }
    return ERR_OK;
}

void kern_q8input_free(struct kern_q8input *in)
{
    free(in->buf);
    in->buf = NULL;
}

/* ---- AVX-512 ---- */

#define AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma")))

/* n F32/F16/BF16 values as float32, 16 at a time (the last 16 through a
 * masked load); other dtypes through dtype_to_f32. */
AVX512 void kern_to_f32_avx512(enum dtype t, const uint8_t *src, float *dst, int64_t n)
{
    if (t != DT_BF16 && t != DT_F16 && t != DT_F32) {
        dtype_to_f32(t, src, dst, (size_t)n);
        return;
    }
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 v;
        if (t == DT_F32)
            v = _mm512_loadu_ps(src + 4 * i);
        else if (t == DT_F16)
            v = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(src + 2 * i)));
        else
            v = _mm512_castsi512_ps(_mm512_slli_epi32(
                _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(const void *)(src + 2 * i))), 16));
        _mm512_storeu_ps(dst + i, v);
    }
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        __m512 v;
        if (t == DT_F32)
            v = _mm512_maskz_loadu_ps(m, src + 4 * i);
        else if (t == DT_F16)
            v = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, src + 2 * i));
        else
            v = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, src + 2 * i)), 16));
        _mm512_mask_storeu_ps(dst + i, m, v);
    }
}

/* dequant_affine_row for 2-, 4- and 8-bit codes (a word holds whole codes),
 * 16 values a step: the step's words are spread to the lanes (lane l takes
 * word l / per_word), shifted by (l % per_word)·bits and masked, converted,
 * then scale·q + bias with a separate multiply and add, exactly as the
 * scalar definition rounds. k is a multiple of gs (>= 32). */
AVX512 void kern_dequant_row_avx512(const uint8_t *row, const void *scales, const void *biases, enum dtype sdt,
                                    int64_t k, int gs, int bits, float *out)
{
    const int per_word = 32 / bits;
    const size_t ssz = dtype_table[sdt].bits / 8;
    int32_t wi[16], sh[16];
    for (int l = 0; l < 16; l++) {
        wi[l] = l / per_word;
        sh[l] = (l % per_word) * bits;
    }
    const __m512i widx = _mm512_loadu_si512(wi), shift = _mm512_loadu_si512(sh);
    const __m512i mask = _mm512_set1_epi32((int)((1u << bits) - 1));
    const __mmask16 wmask = (__mmask16)((1u << (16 / per_word)) - 1); /* the words of 16 codes */
    for (int64_t g = 0; g < k / gs; g++) {
        float sc, bi;
        dtype_to_f32(sdt, (const uint8_t *)scales + (size_t)g * ssz, &sc, 1);
        dtype_to_f32(sdt, (const uint8_t *)biases + (size_t)g * ssz, &bi, 1);
        const __m512 sv = _mm512_set1_ps(sc), bv = _mm512_set1_ps(bi);
        for (int64_t i = g * gs; i < (g + 1) * gs; i += 16) {
            __m512i words = _mm512_maskz_loadu_epi32(wmask, row + i * bits / 8);
            __m512i q = _mm512_and_si512(_mm512_srlv_epi32(_mm512_permutexvar_epi32(widx, words), shift), mask);
            _mm512_storeu_ps(out + i, _mm512_add_ps(_mm512_mul_ps(sv, _mm512_cvtepi32_ps(q)), bv));
        }
    }
}

/* The lanes summed in kern_dot_ref's order: l and l + w for w = 8, 4, 2, 1. */
AVX512 INLINE float hsum512(__m512 acc)
{
    __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(acc), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc), 1)));
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
}

/* kern_dot_ref's order: lane l of one vector is the reference's lane l; the
 * tail comes through a masked load (0·0 added to a lane leaves it unchanged). */
AVX512 float kern_dot_avx512(const float *a, const float *b, int64_t n)
{
    __m512 acc = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        acc = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc);
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), acc);
    }
    return hsum512(acc);
}

AVX512 void kern_axpy_avx512(float *y, float a, const float *x, int64_t n)
{
    const __m512 av = _mm512_set1_ps(a);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(y + i, _mm512_add_ps(_mm512_loadu_ps(y + i), _mm512_mul_ps(av, _mm512_loadu_ps(x + i))));
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        _mm512_mask_storeu_ps(y + i, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, y + i),
                                                      _mm512_mul_ps(av, _mm512_maskz_loadu_ps(m, x + i))));
    }
}

/* exp_clamp and exp_parts of ref.c on a vector, step for step (one
 * definition per width: P is _mm512 or _mm256): returns P = e^r − 1, sets
 * *two_n. max(lo, v) and min(hi, v) return v when it is NaN. */
#define EXP_PARTS(ATTR, name, T, P, cast_si_ps)                                                                      \
    ATTR INLINE T name(T v, T *two_n)                                                                                \
    {                                                                                                                \
        const T magic = P##_set1_ps(12582912.0f);                                                                    \
        v = P##_min_ps(P##_set1_ps(KERN_EXP_VMAX), P##_max_ps(P##_set1_ps(-KERN_EXP_VMAX), v));                        \
        T n = P##_sub_ps(P##_add_ps(P##_mul_ps(v, P##_set1_ps(KERN_LOG2E)), magic), magic);                           \
        T r = P##_sub_ps(P##_sub_ps(v, P##_mul_ps(n, P##_set1_ps(KERN_LN2_HI))), P##_mul_ps(n, P##_set1_ps(KERN_LN2_LO))); \
        T p = P##_set1_ps(KERN_EXP_C7);                                                                              \
        p = P##_add_ps(P##_mul_ps(p, r), P##_set1_ps(KERN_EXP_C6));                                                  \
        p = P##_add_ps(P##_mul_ps(p, r), P##_set1_ps(KERN_EXP_C5));                                                  \
        p = P##_add_ps(P##_mul_ps(p, r), P##_set1_ps(KERN_EXP_C4));                                                  \
        p = P##_add_ps(P##_mul_ps(p, r), P##_set1_ps(KERN_EXP_C3));                                                  \
        p = P##_add_ps(P##_mul_ps(p, r), P##_set1_ps(KERN_EXP_C2));                                                  \
        p = P##_add_ps(P##_mul_ps(p, r), P##_set1_ps(1.0f));                                                         \
        *two_n = cast_si_ps(P##_slli_epi32(P##_add_epi32(P##_cvtps_epi32(n), P##_set1_epi32(127)), 23));              \
        return P##_mul_ps(p, r);                                                                                     \
    }

EXP_PARTS(AVX512, exp_parts512, __m512, _mm512, _mm512_castsi512_ps)

/* kern_gelu on a vector, step for step (one definition per width); past the
 * clamp (v > 87) a zero of x's sign, chosen by zero_of and select_gt. */
#define GELU(ATTR, name, T, P, exp_parts, zero_of, select_gt)                                                         \
    ATTR INLINE T name(T x)                                                                                          \
    {                                                                                                                \
        T inner = P##_add_ps(x, P##_mul_ps(P##_mul_ps(P##_mul_ps(P##_set1_ps(KERN_GELU_C), x), x), x));               \
        T v = P##_mul_ps(P##_set1_ps(-2.0f), P##_mul_ps(P##_set1_ps(KERN_GELU_K), inner));                            \
        T two_n, E = exp_parts(v, &two_n);                                                                           \
        T y = P##_div_ps(x, P##_add_ps(P##_set1_ps(1.0f), P##_mul_ps(P##_add_ps(E, P##_set1_ps(1.0f)), two_n)));      \
        return select_gt(v, P##_set1_ps(KERN_EXP_VMAX), y, zero_of(x));                                              \
    }
#define ZERO_OF512(x) _mm512_castsi512_ps(_mm512_and_epi32(_mm512_castps_si512(x), _mm512_set1_epi32(INT32_MIN)))
#define SELECT_GT512(a, b, y, z) _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(a, b, _CMP_GT_OQ), z)
GELU(AVX512, gelu512, __m512, _mm512, exp_parts512, ZERO_OF512, SELECT_GT512)

/* kern_softcap on 16 lanes, step for step. */
AVX512 INLINE __m512 softcap512(__m512 x, __m512 cap)
{
    __m512 two_n, P = exp_parts512(_mm512_mul_ps(_mm512_set1_ps(2.0f), _mm512_div_ps(x, cap)), &two_n);
    __m512 em = _mm512_add_ps(_mm512_mul_ps(two_n, P), _mm512_sub_ps(two_n, _mm512_set1_ps(1.0f)));
    return _mm512_mul_ps(cap, _mm512_div_ps(em, _mm512_add_ps(em, _mm512_set1_ps(2.0f))));
}

AVX512 void kern_softcap_avx512(float *x, float cap, int64_t n)
{
    const __m512 c = _mm512_set1_ps(cap);
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) { /* four independent chains, as in kern_gelu_mul_avx512 */
        __m512 a = softcap512(_mm512_loadu_ps(x + i), c), b = softcap512(_mm512_loadu_ps(x + i + 16), c);
        __m512 d = softcap512(_mm512_loadu_ps(x + i + 32), c), e = softcap512(_mm512_loadu_ps(x + i + 48), c);
        _mm512_storeu_ps(x + i, a);
        _mm512_storeu_ps(x + i + 16, b);
        _mm512_storeu_ps(x + i + 32, d);
        _mm512_storeu_ps(x + i + 48, e);
    }
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(x + i, softcap512(_mm512_loadu_ps(x + i), c));
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        _mm512_mask_storeu_ps(x + i, m, softcap512(_mm512_maskz_loadu_ps(m, x + i), c));
    }
}

AVX512 void kern_gelu_mul_avx512(float *g, const float *u, int64_t n)
{
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) { /* four independent chains: each is one long dependency */
        __m512 a = gelu512(_mm512_loadu_ps(g + i)), b = gelu512(_mm512_loadu_ps(g + i + 16));
        __m512 c = gelu512(_mm512_loadu_ps(g + i + 32)), d = gelu512(_mm512_loadu_ps(g + i + 48));
        _mm512_storeu_ps(g + i, _mm512_mul_ps(a, _mm512_loadu_ps(u + i)));
        _mm512_storeu_ps(g + i + 16, _mm512_mul_ps(b, _mm512_loadu_ps(u + i + 16)));
        _mm512_storeu_ps(g + i + 32, _mm512_mul_ps(c, _mm512_loadu_ps(u + i + 32)));
        _mm512_storeu_ps(g + i + 48, _mm512_mul_ps(d, _mm512_loadu_ps(u + i + 48)));
    }
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(g + i, _mm512_mul_ps(gelu512(_mm512_loadu_ps(g + i)), _mm512_loadu_ps(u + i)));
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        _mm512_mask_storeu_ps(g + i, m, _mm512_mul_ps(gelu512(_mm512_maskz_loadu_ps(m, g + i)), _mm512_maskz_loadu_ps(m, u + i)));
    }
}

/* A row's scales or biases as float32, then 16 zeros: dst holds n + 16. */
AVX512 INLINE void params512(enum dtype t, const uint8_t *src, float *dst, int64_t n)
{
    kern_to_f32_avx512(t, src, dst, n);
    _mm512_storeu_ps(dst + n, _mm512_setzero_ps());
}

/* The scales and biases of the row PARAMS_AHEAD rows ahead. */
INLINE void params_prefetch(const uint8_t *sr, const uint8_t *br, size_t srow_bytes)
{
    for (size_t o = 0; o < srow_bytes; o += 64) {
        _mm_prefetch((const char *)sr + PARAMS_AHEAD * srow_bytes + o, _MM_HINT_T0);
        _mm_prefetch((const char *)br + PARAMS_AHEAD * srow_bytes + o, _MM_HINT_T0);
    }
}

/* The first n of 16 lanes (none for n <= 0, all for n >= 16). */
INLINE __mmask16 mask16(int64_t n)
{
    return n <= 0 ? 0 : n >= 16 ? 0xFFFF : (__mmask16)((1u << n) - 1);
}

/* The bias terms Σ_g bias_g·Σx_g of nb groups into bacc, group g in lane
 * g % 16 (bi holds zeros past nb). */
AVX512 INLINE __m512 bias_terms512(const float *bi, const float *xs, int64_t nb, __m512 bacc)
{
    for (int64_t k = 0; k < nb; k += 16)
        bacc = _mm512_fmadd_ps(_mm512_loadu_ps(bi + k), _mm512_maskz_loadu_ps(mask16(nb - k), xs + k), bacc);
    return bacc;
}

/* Lane l's group, counted from the block's first group. */
#define GROUP_OF_LANE(l) ((32 / bits) * (l) / gs)

/* One block of 16 words (m: the words present) for each token: the q·x
 * products in two chains, summed, times each lane's group scale sv, into
 * accumulator a (a constant). xb: token t0's rearranged input of the block. */
AVX512 INLINE void qblock512(const uint8_t *c, __mmask16 m, const float *xb, int64_t stride, const int tb,
                             const int bits, __m512 sv, __m512 (*acc)[2], const int a)
{
    const int per_word = 32 / bits;
    _mm_prefetch((const char *)c + PREFETCH, _MM_HINT_T0);
    const __m512i v = _mm512_maskz_loadu_epi32(m, c);
    __m512 p[TB][2];
#pragma GCC unroll 8
    for (int k = 0; k < per_word; k++) {
        __m512i qi = k == per_word - 1 ? _mm512_srli_epi32(v, 32 - bits)
                                       : _mm512_and_si512(v, _mm512_set1_epi32((int)(((1u << bits) - 1) << (bits * k))));
        __m512 q = _mm512_cvtepi32_ps(qi); /* q·2^(bits·k), exact */
        for (int u = 0; u < tb; u++) {
            __m512 xv = _mm512_loadu_ps(xb + u * stride + 16 * k);
            p[u][k & 1] = k < 2 ? _mm512_mul_ps(xv, q) : _mm512_fmadd_ps(xv, q, p[u][k & 1]);
        }
    }
    for (int u = 0; u < tb; u++)
        acc[u][a] = _mm512_fmadd_ps(_mm512_add_ps(p[u][0], p[u][1]), sv, acc[u][a]);
}

/* Rows [row0, row1) for tokens t0..t0+tb-1; tb, gs and bits are constants
 * after inlining, so every loop over a block unrolls. */
AVX512 INLINE void qrows512(const struct wmat *w, const struct kern_qinput *in, int64_t t0, const int tb, float *y,
                            int64_t row0, int64_t row1, const int gs, const int bits)
{
    const int per_word = 32 / bits, blk = 16 * per_word;
    const int64_t ng = w->cols / gs, stride = in->stride;
    const size_t psize = dtype_table[w->dtype].bits / 8;
    const __m512i gidx = _mm512_setr_epi32(GROUP_OF_LANE(0), GROUP_OF_LANE(1), GROUP_OF_LANE(2), GROUP_OF_LANE(3),
                                           GROUP_OF_LANE(4), GROUP_OF_LANE(5), GROUP_OF_LANE(6), GROUP_OF_LANE(7),
                                           GROUP_OF_LANE(8), GROUP_OF_LANE(9), GROUP_OF_LANE(10), GROUP_OF_LANE(11),
                                           GROUP_OF_LANE(12), GROUP_OF_LANE(13), GROUP_OF_LANE(14), GROUP_OF_LANE(15));
    float sc[PARAMS_MAX + 16], bi[PARAMS_MAX + 16]; /* zero past the row's groups, read by absent lanes */
    for (int64_t r = row0; r < row1; r++) {
        const uint8_t *codes = w->w + (size_t)r * w->row_stride;
        const uint8_t *sr = w->s + (size_t)r * w->srow_bytes, *br = w->b + (size_t)r * w->srow_bytes;
        params_prefetch(sr, br, w->srow_bytes);
        __m512 acc[TB][2], bacc[TB]; /* even and odd blocks, two chains across the row; bias terms */
        for (int u = 0; u < tb; u++)
            acc[u][0] = acc[u][1] = bacc[u] = _mm512_setzero_ps();
        for (int64_t g0 = 0; g0 < ng; g0 += PARAMS_MAX) {
            int64_t nb = ng - g0 < PARAMS_MAX ? ng - g0 : PARAMS_MAX;
            params512(w->dtype, sr + (size_t)g0 * psize, sc, nb);
            params512(w->dtype, br + (size_t)g0 * psize, bi, nb);
            const int64_t j0 = g0 * gs, j1 = (g0 + nb) * gs; /* a chunk is whole blocks but for the row's last */
            const float *xb = in->xd + t0 * stride;
            int64_t j = j0;
            for (; j + 2 * blk <= j1; j += 2 * blk) {
                qblock512(codes + j * bits / 8, 0xFFFF, xb + j, stride, tb, bits,
                          _mm512_permutexvar_ps(gidx, _mm512_loadu_ps(sc + (j - j0) / gs)), acc, 0);
                qblock512(codes + (j + blk) * bits / 8, 0xFFFF, xb + j + blk, stride, tb, bits,
                          _mm512_permutexvar_ps(gidx, _mm512_loadu_ps(sc + (j + blk - j0) / gs)), acc, 1);
            }
            for (; j < j1; j += blk) {
                int64_t words = (j1 - j) / per_word;
                qblock512(codes + j * bits / 8, words >= 16 ? 0xFFFF : (__mmask16)((1u << words) - 1), xb + j, stride,
                          tb, bits, _mm512_permutexvar_ps(gidx, _mm512_loadu_ps(sc + (j - j0) / gs)), acc, 0);
            }
            for (int u = 0; u < tb; u++)
                bacc[u] = bias_terms512(bi, in->xsum + (t0 + u) * ng + g0, nb, bacc[u]);
        }
        for (int u = 0; u < tb; u++)
            y[(t0 + u) * w->rows + r] = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(acc[u][0], acc[u][1]), bacc[u]));
    }
}

/* One instantiation per (group size, bits) for a constant tb. */
#define QROWS_DISPATCH(fn, tb)                                                                                         \
    switch (w->gs * 16 + w->bits) {                                                                                  \
    case 32 * 16 + 4: fn(w, in, t0, tb, y, row0, row1, 32, 4); break;                                                \
    case 64 * 16 + 4: fn(w, in, t0, tb, y, row0, row1, 64, 4); break;                                                \
    case 128 * 16 + 4: fn(w, in, t0, tb, y, row0, row1, 128, 4); break;                                              \
    case 32 * 16 + 8: fn(w, in, t0, tb, y, row0, row1, 32, 8); break;                                                \
    case 64 * 16 + 8: fn(w, in, t0, tb, y, row0, row1, 64, 8); break;                                                \
    default: fn(w, in, t0, tb, y, row0, row1, 128, 8); break;                                                        \
    }

/* Tokens TB at a time, each run through fn's instantiation for its count. */
#define TOKENS_DISPATCH(fn)                                                                                          \
    for (int64_t t0 = 0; t0 < n; t0 += TB) {                                                                         \
        switch (n - t0 < TB ? n - t0 : TB) {                                                                         \
        case 1: QROWS_DISPATCH(fn, 1); break;                                                                        \
        case 2: QROWS_DISPATCH(fn, 2); break;                                                                        \
        case 3: QROWS_DISPATCH(fn, 3); break;                                                                        \
        default: QROWS_DISPATCH(fn, 4); break;                                                                       \
        }                                                                                                            \
    }

AVX512 void kern_qdot_avx512(const struct wmat *w, const struct kern_qinput *in, int64_t n, float *y, int64_t row0,
                             int64_t row1)
{
    TOKENS_DISPATCH(qrows512)
}

void kern_matvec_q_avx512(const struct wmat *w, const float *x, int64_t n, float *y, int64_t row0, int64_t row1)
{
    struct kern_qinput in;
    if (kern_qinput_prepare(w, x, n, &in) != ERR_OK) {
        kern_matmul_ref(w, x, n, y, row0, row1);
        return;
    }
    kern_qdot_avx512(w, &in, n, y, row0, row1);
    kern_qinput_free(&in);
}

/* ---- AVX-512 VNNI: int8 activations (kernels.h, kern_q8dot_ref) ---- */

#define AVX512VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma")))
#define Q8_WINDOW 16 /* groups whose scales and biases sit in one register */

/* Scales or biases of groups [g, g + n), n <= 16, as float32 (zero past n). */
AVX512VNNI INLINE __m512 params16(enum dtype t, const uint8_t *src, int64_t n)
{
    const __mmask16 m = mask16(n);
    if (t == DT_F32)
        return _mm512_maskz_loadu_ps(m, src);
    if (t == DT_F16)
        return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, src));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, src)), 16));
}

/* The 32 lanes of a then b, adjacent lanes added: lane i is ab[2i] + ab[2i + 1]. */
AVX512VNNI INLINE __m512i pair_sums(__m512i a, __m512i b)
{
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
    return _mm512_add_epi32(_mm512_permutex2var_epi32(a, even, b), _mm512_permutex2var_epi32(a, odd, b));
}

/* Chunk j of a row (its first weight; `bytes` of its 64 code bytes present,
 * none for bytes <= 0) for each token: the exact lane sums of q·xq through
 * vpdpbusd (codes unsigned, xq signed). Lane l holds the row's word 16c + l. */
AVX512VNNI INLINE void q8chunk512(const uint8_t *codes, int64_t j, int64_t bytes, const struct kern_q8input *in,
                                  int64_t t0, const int tb, const int bits, __m512i *s)
{
    const __mmask64 m = bytes >= 64 ? ~(__mmask64)0 : bytes <= 0 ? 0 : ((__mmask64)1 << bytes) - 1;
    const uint8_t *c = codes + j * bits / 8;
    _mm_prefetch((const char *)c + PREFETCH, _MM_HINT_T0);
    const __m512i v = _mm512_maskz_loadu_epi8(m, c), nib = _mm512_set1_epi8(0x0F);
    const __m512i lo = bits == 8 ? v : _mm512_and_si512(v, nib);
    for (int u = 0; u < tb; u++) {
        const int8_t *xb = in->xq + (t0 + u) * in->stride + j;
        s[u] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, _mm512_loadu_si512(xb));
        if (bits == 4)
            s[u] = _mm512_dpbusd_epi32(s[u], _mm512_and_si512(_mm512_srli_epi16(v, 4), nib), _mm512_loadu_si512(xb + 64));
    }
}

/* The group sums of the window of 16 groups from weight j0 (to j1; full: a
 * whole window, every chunk whole) for each token, group g0 + i in lane i:
 * the chunks' lane sums (those of one group added first when a group spans
 * lg = gs·bits/32 >= 16 lanes) reduced by pair_sums in a binary tree. */
AVX512VNNI INLINE void q8window512(const uint8_t *codes, int64_t j0, int64_t j1, const struct kern_q8input *in,
                                   int64_t t0, const int tb, const int bits, const int gs, const bool full, __m512i *out)
{
    const int cw = 512 / bits, lg = gs * bits / 32; /* weights per 64-byte chunk; lanes per group */
    const int leaves = lg >= 16 ? 16 : lg, leaf_chunks = lg >= 16 ? lg / 16 : 1;
    __m512i lv[5][TB], s[TB], s2[TB]; /* the tree's pending vector of each level */
#pragma GCC unroll 16
    for (int i = 0; i < leaves; i++) {
        const int64_t j = j0 + (int64_t)i * leaf_chunks * cw;
        q8chunk512(codes, j, full ? 64 : (j1 - j) * bits / 8, in, t0, tb, bits, s);
        if (leaf_chunks == 2) {
            q8chunk512(codes, j + cw, full ? 64 : (j1 - j - cw) * bits / 8, in, t0, tb, bits, s2);
            for (int u = 0; u < tb; u++)
                s[u] = _mm512_add_epi32(s[u], s2[u]);
        }
        int level = 0;
        for (int h = i; h & 1; h >>= 1, level++)
            for (int u = 0; u < tb; u++)
                s[u] = pair_sums(lv[level][u], s[u]);
        for (int u = 0; u < tb; u++)
            lv[level][u] = s[u];
    }
    for (int u = 0; u < tb; u++)
        out[u] = lv[__builtin_ctz((unsigned)leaves)][u];
}

/* Rows [row0, row1) by rows, for tokens t0..t0+tb-1 (constants after
 * inlining, as in qrows512): per window of 16 groups, their sums in one
 * vector take the definition's two steps at once. */
AVX512VNNI INLINE void q8rows512(const struct wmat *w, const struct kern_q8input *in, int64_t t0, const int tb,
                                 float *y, int64_t row0, int64_t row1, const int gs, const int bits)
{
    const int64_t ng = w->cols / gs;
    const size_t psize = dtype_table[w->dtype].bits / 8;
    for (int64_t r = row0; r < row1; r++) {
        const uint8_t *codes = w->w + (size_t)r * w->row_stride;
        const uint8_t *sr = w->s + (size_t)r * w->srow_bytes, *br = w->b + (size_t)r * w->srow_bytes;
        params_prefetch(sr, br, w->srow_bytes);
        __m512 acc[TB];
        for (int u = 0; u < tb; u++)
            acc[u] = _mm512_setzero_ps();
        for (int64_t g0 = 0; g0 < ng; g0 += Q8_WINDOW) {
            const int64_t nb = ng - g0 < Q8_WINDOW ? ng - g0 : Q8_WINDOW, j0 = g0 * gs, j1 = (g0 + nb) * gs;
            __m512i S[TB];
            if (nb == Q8_WINDOW)
                q8window512(codes, j0, j1, in, t0, tb, bits, gs, true, S);
            else
                q8window512(codes, j0, j1, in, t0, tb, bits, gs, false, S);
            const __m512 sc = params16(w->dtype, sr + (size_t)g0 * psize, nb), bi = params16(w->dtype, br + (size_t)g0 * psize, nb);
            for (int u = 0; u < tb; u++) {
                const __m512 ds = _mm512_mul_ps(_mm512_maskz_loadu_ps(mask16(nb), in->d + (t0 + u) * ng + g0), sc);
                acc[u] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(S[u]), ds, acc[u]);
                acc[u] = _mm512_fmadd_ps(bi, _mm512_maskz_loadu_ps(mask16(nb), in->xsum + (t0 + u) * ng + g0), acc[u]);
            }
        }
        for (int u = 0; u < tb; u++)
            y[(t0 + u) * w->rows + r] = hsum512(acc[u]);
    }
}

/* Group g of a 16-row block (one row a lane; c, sb, bb: the group's first
 * word, scale and bias) for one token: S_g of each row from the group's
 * 64-byte words, each against the token's four xq of that word in every lane
 * (at 4 bits those of its even weights, the low nibbles, then of its odd
 * ones; the high nibbles kept in place, 16·q, and their sum shifted back:
 * exact), then the definition's two steps into acc. The integer sums are
 * exact in any order, so the number of accumulators is free: four at 8 bits,
 * two at 4 (each a nibble half). Only the 4-bit words are prefetched: the
 * 8-bit head streamed at 78-85 % of a plain read of its bytes with a
 * prefetch per word and two accumulators, 91-99 % without the prefetches and
 * with four; the 4-bit head fell to 65-69 % without its prefetches
 * (docs/PERFORMANCE.md, item 31). */
AVX512VNNI INLINE __m512 q8group16(const uint8_t *c, const uint8_t *sb, const uint8_t *bb, enum dtype dt,
                                   const int8_t *xq, int64_t g, float d, float xs, __m512 acc, const int gs,
                                   const int bits)
{
    const int words = gs * bits / 32;
    const __m512i nib = _mm512_set1_epi8(0x0F), zero = _mm512_setzero_si512();
    __m512i lo[4] = {zero, zero, zero, zero}, hi[2] = {zero, zero};
#pragma GCC unroll 32
    for (int k = 0; k < words; k++) {
        const int64_t wd = g * words + k;
        const uint8_t *p = c + 64 * k;
        if (bits == 8) {
            const __m512i v = _mm512_loadu_si512(p);
            lo[k & 3] = _mm512_dpbusd_epi32(lo[k & 3], v, _mm512_set1_epi32((int)rd_u32le(xq + 4 * wd)));
        } else {
            _mm_prefetch((const char *)p + PREFETCH, _MM_HINT_T0);
            const __m512i v = _mm512_loadu_si512(p);
            const int8_t *e = xq + 128 * (wd / 16) + 4 * (wd % 16);
            lo[k & 1] = _mm512_dpbusd_epi32(lo[k & 1], _mm512_and_si512(v, nib), _mm512_set1_epi32((int)rd_u32le(e)));
            hi[k & 1] = _mm512_dpbusd_epi32(hi[k & 1], _mm512_andnot_si512(nib, v), _mm512_set1_epi32((int)rd_u32le(e + 64)));
        }
    }
    __m512i s = _mm512_add_epi32(lo[0], lo[1]);
    if (bits == 8)
        s = _mm512_add_epi32(s, _mm512_add_epi32(lo[2], lo[3]));
    else
        s = _mm512_add_epi32(s, _mm512_srai_epi32(_mm512_add_epi32(hi[0], hi[1]), 4));
    const __m512 sc = params16(dt, sb, 16), bi = params16(dt, bb, 16);
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(_mm512_set1_ps(d), sc), acc);
    return _mm512_fmadd_ps(bi, _mm512_set1_ps(xs), acc);
}

/* Rows [row0, row1) of a blocked matrix (whole blocks), a token at a time:
 * the definition's 16 lanes are 16 vectors here, one row per lane, summed in
 * its order at the end. A block's bytes are read once per token (from cache
 * after the first), front to back. */
AVX512VNNI INLINE void q8blocks512(const struct wmat *w, const struct kern_q8input *in, int64_t t0, int64_t n,
                                   float *y, int64_t row0, int64_t row1, const int gs, const int bits)
{
    const int64_t ng = w->cols / gs;
    const size_t block = kern_block_off(w, 1, 0), rec = kern_block_off(w, 0, 1);
    for (int64_t r = row0; r < row1; r += KERN_BLOCK_ROWS) {
        const size_t off = (size_t)(r / KERN_BLOCK_ROWS) * block;
        const uint8_t *c = w->w + off, *sb = w->s + off, *bb = w->b + off;
        for (int64_t t = t0; t < t0 + n; t++) {
            const int8_t *xq = in->xq + t * in->stride;
            const float *d = in->d + t * ng, *xs = in->xsum + t * ng;
            __m512 acc[16];
            for (int l = 0; l < 16; l++)
                acc[l] = _mm512_setzero_ps();
            for (int64_t g0 = 0; g0 < ng; g0 += 16)
#pragma GCC unroll 16
                for (int l = 0; l < 16; l++)
                    if (g0 + l < ng) {
                        const size_t gr = (size_t)(g0 + l) * rec;
                        acc[l] = q8group16(c + gr, sb + gr, bb + gr, w->dtype, xq, g0 + l, d[g0 + l], xs[g0 + l],
                                           acc[l], gs, bits);
                    }
            for (int h = 8; h >= 1; h /= 2)
                for (int l = 0; l < h; l++)
                    acc[l] = _mm512_add_ps(acc[l], acc[l + h]);
            _mm512_storeu_ps(y + t * w->rows + r, acc[0]);
        }
    }
}

AVX512VNNI void kern_q8dot_avx512(const struct wmat *w, const struct kern_q8input *in, int64_t n, float *y,
                                  int64_t row0, int64_t row1)
{
    if (w->blocked) {
        const int64_t t0 = 0; /* all n tokens, one after the other */
        QROWS_DISPATCH(q8blocks512, n)
    } else {
        TOKENS_DISPATCH(q8rows512)
    }
}

/* rint(v/d) clamped to ±127 as int8, 16 lanes: one IEEE division, rounding
 * to the nearest even integer, exact conversions. */
AVX512 INLINE __m128i q8_codes16(__m512 v, __m512 d)
{
    __m512 q = _mm512_roundscale_ps(_mm512_div_ps(v, d), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    q = _mm512_min_ps(_mm512_set1_ps(127.0f), _mm512_max_ps(_mm512_set1_ps(-127.0f), q));
    return _mm512_cvtepi32_epi8(_mm512_cvttps_epi32(q));
}

/* kern_q8input_prepare 16 values a step, the same buffer bit for bit
 * (tests/test_kernels.c): a group's max|x| is exact in any order; each group
 * sum keeps its column order, 16 groups at a time, one per lane of a gather;
 * at 4 bits the even and odd weights of 32 are split by one permute each. */
AVX512 int kern_q8input_prepare_avx512(const struct wmat *w, const float *x, int64_t n, struct kern_q8input *in)
{
    struct q8parts p;
    if (q8input_alloc(w, n, in, &p) != ERR_OK)
        return ERR_NOMEM;
    const int64_t ng = p.ng, gs = w->gs, cols = w->cols, stride = in->stride;
    const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512i lane_group = _mm512_mullo_epi32(iota, _mm512_set1_epi32((int)gs));
    const __m512i even = _mm512_slli_epi32(iota, 1), odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
    for (int64_t t = 0; t < n; t++) {
        const float *xt = x + t * cols;
        int8_t *xq = p.xq + t * stride;
        for (int64_t g0 = 0; g0 < ng; g0 += 16) { /* group sums, in column order */
            const __mmask16 m = mask16(ng - g0);
            __m512 sum = _mm512_setzero_ps();
            for (int64_t j = 0; j < gs; j++)
                sum = _mm512_add_ps(sum, _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, lane_group, xt + g0 * gs + j, 4));
            _mm512_mask_storeu_ps(p.xsum + t * ng + g0, m, sum);
        }
        for (int64_t g = 0; g < ng; g++) {
            const float *xg = xt + g * gs;
            __m512 mx = _mm512_setzero_ps();
            __mmask16 bad = 0;
            for (int64_t i = 0; i < gs; i += 16) {
                __m512 a = _mm512_abs_ps(_mm512_loadu_ps(xg + i));
                bad |= _mm512_cmp_ps_mask(a, _mm512_set1_ps(INFINITY), _CMP_NLT_UQ); /* inf or NaN */
                mx = _mm512_max_ps(mx, a);
            }
            float dg = bad ? NAN : _mm512_reduce_max_ps(mx) / 127.0f;
            p.d[t * ng + g] = dg;
            if (bad || dg == 0.0f)
                continue;
            const __m512 dv = _mm512_set1_ps(dg);
            for (int64_t i = 0; i < gs; i += 32) {
                const int64_t j = g * gs + i; /* at 4 bits: even, in chunk j / 128 */
                const __m512 lo = _mm512_loadu_ps(xg + i), hi = _mm512_loadu_ps(xg + i + 16);
                if (w->bits == 8) {
                    _mm_storeu_si128((__m128i *)(void *)(xq + j), q8_codes16(lo, dv));
                    _mm_storeu_si128((__m128i *)(void *)(xq + j + 16), q8_codes16(hi, dv));
                } else {
                    int8_t *c = xq + 128 * (j / 128) + (j % 128) / 2;
                    _mm_storeu_si128((__m128i *)(void *)c, q8_codes16(_mm512_permutex2var_ps(lo, even, hi), dv));
                    _mm_storeu_si128((__m128i *)(void *)(c + 64), q8_codes16(_mm512_permutex2var_ps(lo, odd, hi), dv));
                }
            }
        }
    }
    return ERR_OK;
}


AVX512 INLINE void bf16_step512(const uint8_t *row, const float *x, int64_t cols, int64_t t0, int tb, int64_t j,
                                __m512 (*acc)[4], int c)
{
    __m256i h = _mm256_loadu_si256((const __m256i *)(const void *)(row + 2 * j));
    __m512 wv = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    for (int u = 0; u < tb; u++)
        acc[u][c] = _mm512_fmadd_ps(_mm512_loadu_ps(x + (t0 + u) * cols + j), wv, acc[u][c]);
}

AVX512 INLINE void bf16rows512(const struct wmat *w, const float *x, int64_t t0, int tb, float *y, int64_t row0,
                               int64_t row1)
{
    int64_t c16 = w->cols & ~(int64_t)15, cols = w->cols;
    for (int64_t r = row0; r < row1; r++) {
        const uint8_t *row = w->w + (size_t)r * w->row_stride;
        __m512 acc[TB][4]; /* four independent chains per token */
        for (int u = 0; u < tb; u++)
            acc[u][0] = acc[u][1] = acc[u][2] = acc[u][3] = _mm512_setzero_ps();
        int64_t j = 0;
        for (; j + 64 <= c16; j += 64)
            for (int c = 0; c < 4; c++)
                bf16_step512(row, x, cols, t0, tb, j + 16 * c, acc, c);
        for (int c = 0; j < c16; j += 16, c++)
            bf16_step512(row, x, cols, t0, tb, j, acc, c);
        for (int u = 0; u < tb; u++) {
            float s = _mm512_reduce_add_ps(
                _mm512_add_ps(_mm512_add_ps(acc[u][0], acc[u][1]), _mm512_add_ps(acc[u][2], acc[u][3])));
            for (int64_t k = c16; k < cols; k++)
                s += x[(t0 + u) * cols + k] * bf16_to_f32((uint16_t)(row[2 * k] | row[2 * k + 1] << 8));
            y[(t0 + u) * w->rows + r] = s;
        }
    }
}

AVX512 void kern_matvec_bf16_avx512(const struct wmat *w, const float *x, int64_t n, float *y, int64_t row0,
                                    int64_t row1)
{
    for (int64_t t0 = 0; t0 < n; t0 += TB) {
        switch (n - t0 < TB ? n - t0 : TB) {
        case 1: bf16rows512(w, x, t0, 1, y, row0, row1); break;
        case 2: bf16rows512(w, x, t0, 2, y, row0, row1); break;
        case 3: bf16rows512(w, x, t0, 3, y, row0, row1); break;
        default: bf16rows512(w, x, t0, 4, y, row0, row1); break;
        }
    }
}

/* ---- AVX2 ---- */

#define AVX2 __attribute__((target("avx2,fma")))

/* kern_dot_ref's order on two vectors: lo holds lanes 0-7, hi lanes 8-15. */
AVX2 float kern_dot_avx2(const float *a, const float *b, int64_t n)
{
    __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        lo = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), lo);
        hi = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), hi);
    }
    if (i < n) {
        const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        __m256i mlo = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(n - i)), lane);
        __m256i mhi = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(n - i - 8)), lane);
        lo = _mm256_fmadd_ps(_mm256_maskload_ps(a + i, mlo), _mm256_maskload_ps(b + i, mlo), lo);
        hi = _mm256_fmadd_ps(_mm256_maskload_ps(a + i + 8, mhi), _mm256_maskload_ps(b + i + 8, mhi), hi);
    }
    __m256 s8 = _mm256_add_ps(lo, hi);
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
}

EXP_PARTS(AVX2, exp_parts256, __m256, _mm256, _mm256_castsi256_ps)

#define ZERO_OF256(x) _mm256_and_ps(x, _mm256_set1_ps(-0.0f))
#define SELECT_GT256(a, b, y, z) _mm256_blendv_ps(y, z, _mm256_cmp_ps(a, b, _CMP_GT_OQ))
GELU(AVX2, gelu256, __m256, _mm256, exp_parts256, ZERO_OF256, SELECT_GT256)

/* softcap512 on 8 lanes; the tail through kern_softcap itself. */
AVX2 void kern_softcap_avx2(float *x, float cap, int64_t n)
{
    const __m256 c = _mm256_set1_ps(cap);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 two_n, P = exp_parts256(_mm256_mul_ps(_mm256_set1_ps(2.0f), _mm256_div_ps(_mm256_loadu_ps(x + i), c)), &two_n);
        __m256 em = _mm256_add_ps(_mm256_mul_ps(two_n, P), _mm256_sub_ps(two_n, _mm256_set1_ps(1.0f)));
        _mm256_storeu_ps(x + i, _mm256_mul_ps(c, _mm256_div_ps(em, _mm256_add_ps(em, _mm256_set1_ps(2.0f)))));
    }
    kern_softcap_ref(x + i, cap, n - i);
}

/* The tail (fewer than 8) through kern_gelu itself: the same bits. */
AVX2 void kern_gelu_mul_avx2(float *g, const float *u, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(g + i, _mm256_mul_ps(gelu256(_mm256_loadu_ps(g + i)), _mm256_loadu_ps(u + i)));
    kern_gelu_mul_ref(g + i, u + i, n - i);
}

AVX2 INLINE float hsum256(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* Half h of a block of 16 words (words: how many of its 8 are present) for
 * each token: the q·x products in two chains, summed, times each lane's
 * group scale sv, into accumulator h. */
AVX2 INLINE void qhalf256(const uint8_t *c, int64_t words, const float *xb, int64_t stride, const int tb,
                          const int bits, __m256 sv, __m256 (*acc)[2], const int h)
{
    const int per_word = 32 / bits;
    _mm_prefetch((const char *)c + PREFETCH, _MM_HINT_T0);
    const __m256i v = words >= 8 ? _mm256_loadu_si256((const __m256i *)(const void *)c)
                                 : _mm256_maskload_epi32((const int *)(const void *)c,
                                                         _mm256_cmpgt_epi32(_mm256_set1_epi32((int)words),
                                                                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)));
    __m256 p[TB][2];
#pragma GCC unroll 8
    for (int k = 0; k < per_word; k++) {
        __m256i qi = k == per_word - 1 ? _mm256_srli_epi32(v, 32 - bits)
                                       : _mm256_and_si256(v, _mm256_set1_epi32((int)(((1u << bits) - 1) << (bits * k))));
        __m256 q = _mm256_cvtepi32_ps(qi); /* q·2^(bits·k), exact */
        for (int u = 0; u < tb; u++) {
            __m256 xv = _mm256_loadu_ps(xb + u * stride + 16 * k + 8 * h);
            p[u][k & 1] = k < 2 ? _mm256_mul_ps(xv, q) : _mm256_fmadd_ps(xv, q, p[u][k & 1]);
        }
    }
    for (int u = 0; u < tb; u++)
        acc[u][h] = _mm256_fmadd_ps(_mm256_add_ps(p[u][0], p[u][1]), sv, acc[u][h]);
}

/* Rows [row0, row1) for tokens t0..t0+tb-1; tb, gs and bits are constants
 * after inlining, so every loop over a block unrolls. */
AVX2 INLINE void qrows256(const struct wmat *w, const struct kern_qinput *in, int64_t t0, const int tb, float *y,
                          int64_t row0, int64_t row1, const int gs, const int bits)
{
    const int per_word = 32 / bits, blk = 16 * per_word;
    const int64_t ng = w->cols / gs, stride = in->stride;
    const size_t psize = dtype_table[w->dtype].bits / 8;
    const __m256i gidx0 = _mm256_setr_epi32(GROUP_OF_LANE(0), GROUP_OF_LANE(1), GROUP_OF_LANE(2), GROUP_OF_LANE(3),
                                            GROUP_OF_LANE(4), GROUP_OF_LANE(5), GROUP_OF_LANE(6), GROUP_OF_LANE(7));
    const __m256i gidx1 = _mm256_setr_epi32(GROUP_OF_LANE(8), GROUP_OF_LANE(9), GROUP_OF_LANE(10), GROUP_OF_LANE(11),
                                            GROUP_OF_LANE(12), GROUP_OF_LANE(13), GROUP_OF_LANE(14), GROUP_OF_LANE(15));
    float sc[PARAMS_MAX + 8], bi[PARAMS_MAX + 8]; /* zero past the row's groups, read by absent lanes */
    for (int64_t r = row0; r < row1; r++) {
        const uint8_t *codes = w->w + (size_t)r * w->row_stride;
        const uint8_t *sr = w->s + (size_t)r * w->srow_bytes, *br = w->b + (size_t)r * w->srow_bytes;
        __m256 acc[TB][2], bacc[TB]; /* first and second halves of the blocks, two chains across the row; bias terms */
        for (int u = 0; u < tb; u++)
            acc[u][0] = acc[u][1] = bacc[u] = _mm256_setzero_ps();
        for (int64_t g0 = 0; g0 < ng; g0 += PARAMS_MAX) {
            int64_t nb = ng - g0 < PARAMS_MAX ? ng - g0 : PARAMS_MAX;
            dtype_to_f32(w->dtype, sr + (size_t)g0 * psize, sc, (size_t)nb);
            dtype_to_f32(w->dtype, br + (size_t)g0 * psize, bi, (size_t)nb);
            memset(sc + nb, 0, 8 * sizeof *sc);
            memset(bi + nb, 0, 8 * sizeof *bi);
            const int64_t j0 = g0 * gs, j1 = (g0 + nb) * gs; /* a chunk is whole blocks but for the row's last */
            const float *xb = in->xd + t0 * stride;
            for (int64_t j = j0; j < j1; j += blk) {
                int64_t words = (j1 - j) / per_word;
                __m256 s8 = _mm256_loadu_ps(sc + (j - j0) / gs);
                qhalf256(codes + j * bits / 8, words, xb + j, stride, tb, bits, _mm256_permutevar8x32_ps(s8, gidx0),
                         acc, 0);
                if (words > 8)
                    qhalf256(codes + j * bits / 8 + 32, words - 8, xb + j, stride, tb, bits,
                             _mm256_permutevar8x32_ps(s8, gidx1), acc, 1);
            }
            for (int u = 0; u < tb; u++) { /* the bias terms Σ_g bias_g · Σx_g, 8 groups a step */
                const float *xs = in->xsum + (t0 + u) * ng + g0;
                for (int64_t k = 0; k < nb; k += 8) {
                    __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(nb - k)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
                    bacc[u] = _mm256_fmadd_ps(_mm256_loadu_ps(bi + k), _mm256_maskload_ps(xs + k, m), bacc[u]);
                }
            }
        }
        for (int u = 0; u < tb; u++)
            y[(t0 + u) * w->rows + r] = hsum256(_mm256_add_ps(_mm256_add_ps(acc[u][0], acc[u][1]), bacc[u]));
    }
}

AVX2 void kern_qdot_avx2(const struct wmat *w, const struct kern_qinput *in, int64_t n, float *y, int64_t row0,
                         int64_t row1)
{
    for (int64_t t0 = 0; t0 < n; t0 += TB) {
        switch (n - t0 < TB ? n - t0 : TB) {
        case 1: QROWS_DISPATCH(qrows256, 1); break;
        case 2: QROWS_DISPATCH(qrows256, 2); break;
        case 3: QROWS_DISPATCH(qrows256, 3); break;
        default: QROWS_DISPATCH(qrows256, 4); break;
        }
    }
}

void kern_matvec_q_avx2(const struct wmat *w, const float *x, int64_t n, float *y, int64_t row0, int64_t row1)
{
    struct kern_qinput in;
    if (kern_qinput_prepare(w, x, n, &in) != ERR_OK) {
        kern_matmul_ref(w, x, n, y, row0, row1);
        return;
    }
    kern_qdot_avx2(w, &in, n, y, row0, row1);
    kern_qinput_free(&in);
}


AVX2 INLINE void bf16_step256(const uint8_t *row, const float *x, int64_t cols, int64_t t0, int tb, int64_t j,
                              __m256 (*acc)[4], int c)
{
    __m128i h = _mm_loadu_si128((const __m128i *)(const void *)(row + 2 * j));
    __m256 wv = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    for (int u = 0; u < tb; u++)
        acc[u][c] = _mm256_fmadd_ps(_mm256_loadu_ps(x + (t0 + u) * cols + j), wv, acc[u][c]);
}

AVX2 INLINE void bf16rows256(const struct wmat *w, const float *x, int64_t t0, int tb, float *y, int64_t row0,
                             int64_t row1)
{
    int64_t c8 = w->cols & ~(int64_t)7, cols = w->cols;
    for (int64_t r = row0; r < row1; r++) {
        const uint8_t *row = w->w + (size_t)r * w->row_stride;
        __m256 acc[TB][4]; /* four independent chains per token */
        for (int u = 0; u < tb; u++)
            acc[u][0] = acc[u][1] = acc[u][2] = acc[u][3] = _mm256_setzero_ps();
        int64_t j = 0;
        for (; j + 32 <= c8; j += 32)
            for (int c = 0; c < 4; c++)
                bf16_step256(row, x, cols, t0, tb, j + 8 * c, acc, c);
        for (int c = 0; j < c8; j += 8, c++)
            bf16_step256(row, x, cols, t0, tb, j, acc, c);
        for (int u = 0; u < tb; u++) {
            float s = hsum256(_mm256_add_ps(_mm256_add_ps(acc[u][0], acc[u][1]), _mm256_add_ps(acc[u][2], acc[u][3])));
            for (int64_t k = c8; k < cols; k++)
                s += x[(t0 + u) * cols + k] * bf16_to_f32((uint16_t)(row[2 * k] | row[2 * k + 1] << 8));
            y[(t0 + u) * w->rows + r] = s;
        }
    }
}

AVX2 void kern_matvec_bf16_avx2(const struct wmat *w, const float *x, int64_t n, float *y, int64_t row0, int64_t row1)
{
    for (int64_t t0 = 0; t0 < n; t0 += TB) {
        switch (n - t0 < TB ? n - t0 : TB) {
        case 1: bf16rows256(w, x, t0, 1, y, row0, row1); break;
        case 2: bf16rows256(w, x, t0, 2, y, row0, row1); break;
        case 3: bf16rows256(w, x, t0, 3, y, row0, row1); break;
        default: bf16rows256(w, x, t0, 4, y, row0, row1); break;
        }
    }
}

/* ---- MLX affine quantizer (convert) ---- */

/* quant_affine_row with the per-weight work 16 lanes at a time: the group's
 * minimum and maximum with the same comparisons as the scalar loop, then
 * (w − bias) / scale, round to nearest even, clamp (NaN to 0) — the same
 * IEEE operations in the same order, so codes, scales and biases are
 * bit-identical to the scalar quantizer (tests/test_kernels.c). */
AVX512 void kern_quant_row_avx512(const float *w, size_t k, int gs, int bits, enum dtype sdt, uint32_t *words,
                                  void *scales, void *biases)
{
    const size_t ssz = dtype_table[sdt].bits / 8, ng = k / (size_t)gs, gwords = (size_t)gs * (size_t)bits / 32;
    const __m512 n_bins = _mm512_set1_ps((float)((1 << bits) - 1));
    uint8_t codes[QUANT_MAX_GROUP];
    for (size_t g = 0; g < ng; g++) {
        const float *wg = w + g * (size_t)gs;
        __m512 mx = _mm512_set1_ps(-INFINITY), mn = _mm512_set1_ps(INFINITY);
        for (int j = 0; j < gs; j += 16) {
            __m512 x = _mm512_loadu_ps(wg + j);
            mx = _mm512_max_ps(x, mx); /* x > mx ? x : mx: a NaN x is skipped, as in the scalar loop */
            mn = _mm512_min_ps(x, mn);
        }
        float scale, bias;
        quant_params_from_range(_mm512_reduce_min_ps(mn), _mm512_reduce_max_ps(mx), bits, &scale, &bias);
        const __m512 s = _mm512_set1_ps(scale), b = _mm512_set1_ps(bias);
        uint8_t *out = (uint8_t *)(words + g * gwords);
        for (int j = 0; j < gs; j += 16) {
            __m512 q = _mm512_div_ps(_mm512_sub_ps(_mm512_loadu_ps(wg + j), b), s);
            q = _mm512_roundscale_ps(q, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
            q = _mm512_min_ps(_mm512_max_ps(q, _mm512_setzero_ps()), n_bins); /* max(NaN, 0) is 0 */
            __m128i c = _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(q)); /* 16 codes, one per byte */
            if (bits == 8) {
                _mm_storeu_si128((__m128i *)(void *)(out + j), c);
            } else if (bits == 4) { /* byte i = c[2i] | c[2i+1] << 4: the LSB-first stream */
                c = _mm_packus_epi16(_mm_maddubs_epi16(c, _mm_set1_epi16(16 << 8 | 1)), _mm_setzero_si128());
                _mm_storel_epi64((__m128i *)(void *)(out + j / 2), c);
            } else if (bits == 2) { /* pairs into nibbles, then nibble pairs into bytes */
                c = _mm_packus_epi16(_mm_maddubs_epi16(c, _mm_set1_epi16(4 << 8 | 1)), _mm_setzero_si128());
                c = _mm_packus_epi16(_mm_maddubs_epi16(c, _mm_set1_epi16(16 << 8 | 1)), _mm_setzero_si128());
                _mm_storeu_si32(out + j / 4, c);
            } else {
                _mm_storeu_si128((__m128i *)(void *)(codes + j), c);
            }
        }
        if (bits != 8 && bits != 4 && bits != 2)
            quant_pack_codes(codes, (size_t)gs, bits, words + g * gwords);
        dtype_from_f32(sdt, &scale, (uint8_t *)scales + g * ssz, 1);
        dtype_from_f32(sdt, &bias, (uint8_t *)biases + g * ssz, 1);
    }
}
