/* simd.h - what the x86 SIMD kernels share (kernels/x86/: avx2.c, avx512.c,
 * q8_avx512.c, q8_avx2.c): their tuning constants and the vector templates of the
 * scalar definitions (one instantiation per vector width). Internal to
 * kernels/. */
#ifndef GP_KERNELS_SIMD_H
#define GP_KERNELS_SIMD_H

#define PREFETCH 4096 /* bytes ahead in the code stream: the row after next, for E2B-sized rows */
#define PARAMS_AHEAD 8 /* rows ahead in the scales and biases streams */
#define TB 4 /* tokens sharing one decode of a weight row */
#define PARAMS_MAX 256 /* scales and biases of a row converted at once */
#define INLINE static inline __attribute__((always_inline))
#define AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))
#define AVX512VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))
#define AVX2 __attribute__((target("avx2,fma,f16c")))
#define AVXVNNI __attribute__((target("avx2,fma,f16c,avxvnni")))
#define AMX __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c,amx-tile,amx-int8")))

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

/* The lanes summed in kern_dot_ref's order: l and l + w for w = 8, 4, 2, 1. */
AVX512 INLINE float hsum512(__m512 acc)
{
    __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(acc), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc), 1)));
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
}

/* The 32 lanes of a then b, adjacent lanes added: lane i is ab[2i] + ab[2i + 1]. */
AVX512 INLINE __m512i pair_sums(__m512i a, __m512i b)
{
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
    return _mm512_add_epi32(_mm512_permutex2var_epi32(a, even, b), _mm512_permutex2var_epi32(a, odd, b));
}

/* pair_sums within each 128-bit lane, for sums below 2^15 in magnitude
 * (exact): lanes 4L .. 4L + 3 are a's 4L + 0/1 and 4L + 2/3 added, then b's. */
AVX512 INLINE __m512i lane_pair_sums(__m512i a, __m512i b)
{
    return _mm512_madd_epi16(_mm512_packs_epi32(a, b), _mm512_set1_epi16(1));
}

/* The 8 lanes summed in kern_dot_ref's order (l and l + w for w = 4, 2, 1):
 * after v = lo + hi of 16 lanes, their sum in that order. */
AVX2 INLINE float hsum256(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* The first n of 16 lanes (none for n <= 0, all for n >= 16). */
INLINE __mmask16 mask16(int64_t n)
{
    return n <= 0 ? 0 : n >= 16 ? 0xFFFF : (__mmask16)((1u << n) - 1);
}

/* The scales and biases of the row PARAMS_AHEAD rows ahead. */
INLINE void params_prefetch(const uint8_t *sr, const uint8_t *br, size_t srow_bytes)
{
    for (size_t o = 0; o < srow_bytes; o += 64) {
        _mm_prefetch((const char *)sr + PARAMS_AHEAD * srow_bytes + o, _MM_HINT_T0);
        _mm_prefetch((const char *)br + PARAMS_AHEAD * srow_bytes + o, _MM_HINT_T0);
    }
}

/* Lane l's group, counted from the block's first group. */
#define GROUP_OF_LANE(l) ((32 / bits) * (l) / gs)

/* The int8 kernels' instantiations by group size and bits (fn is a row
 * kernel of w, in, ws, t0, tb tokens, y, row0, row1, gs, bits; ws the
 * worker's scratch, kern_q8_ws_bytes), and tokens TB at a time, each through
 * the instantiation for its count. */
#define QROWS_DISPATCH(fn, tb)                                                                                         \
    switch (w->gs * 16 + w->bits) {                                                                                  \
    case 32 * 16 + 4: fn(w, in, ws, t0, tb, y, row0, row1, 32, 4); break;                                            \
    case 64 * 16 + 4: fn(w, in, ws, t0, tb, y, row0, row1, 64, 4); break;                                            \
    case 128 * 16 + 4: fn(w, in, ws, t0, tb, y, row0, row1, 128, 4); break;                                          \
    case 32 * 16 + 8: fn(w, in, ws, t0, tb, y, row0, row1, 32, 8); break;                                            \
    case 64 * 16 + 8: fn(w, in, ws, t0, tb, y, row0, row1, 64, 8); break;                                            \
    default: fn(w, in, ws, t0, tb, y, row0, row1, 128, 8); break;                                                    \
    }

/* The MX modes' instantiations (fn takes the mode after bits), and tokens TB
 * at a time as TOKENS_DISPATCH. */
#define MX_DISPATCH(fn, tb)                                                                                          \
    switch (w->mode) {                                                                                               \
    case QM_MXFP4: fn(w, in, t0, tb, y, row0, row1, 32, 4, QM_MXFP4); break;                                         \
    case QM_NVFP4: fn(w, in, t0, tb, y, row0, row1, 16, 4, QM_NVFP4); break;                                         \
    default: fn(w, in, t0, tb, y, row0, row1, 32, 8, QM_MXFP8); break;                                               \
    }
#define MX_TOKENS_DISPATCH(fn)                                                                                       \
    for (int64_t t0 = 0; t0 < n; t0 += TB) {                                                                         \
        switch (n - t0 < TB ? n - t0 : TB) {                                                                         \
        case 1: MX_DISPATCH(fn, 1); break;                                                                           \
        case 2: MX_DISPATCH(fn, 2); break;                                                                           \
        case 3: MX_DISPATCH(fn, 3); break;                                                                           \
        default: MX_DISPATCH(fn, 4); break;                                                                          \
        }                                                                                                            \
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

#endif
