/* q8_avx2.c - the int8 kernels (KERN_Q8) on 256-bit vectors: with AVX-VNNI's
 * vpdpbusd, and with AVX2's vpmaddubsw + vpmaddwd (whose pair sums of u·s
 * saturate past 32767: every code is split into its nibbles first). The
 * template is q8_avx2.h; both give kern_q8dot_ref's bits (tests/test_kernels.c).
 * Then the AVX2 preparation of their input (kern_q8input_part's bits). */
#include <immintrin.h>
#include <math.h>

#include "core/bytes.h"
#include "core/dtype.h"
#include "kernels/x86/x86.h"
#include "kernels/x86/simd.h"

#define ATTR AVX2
#define SFX avx2
#define DOT(acc, u, s) _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)))
#define DOT8(lo, hi, v, x)                                                                                           \
    do {                                                                                                             \
        lo = DOT(lo, _mm256_and_si256(v, nib), x);                                                                   \
        hi = DOT(hi, _mm256_and_si256(_mm256_srli_epi16(v, 4), nib), x);                                              \
    } while (0)
/* int16 pair sums added into s, pinned by an empty asm (GCC reassociated
 * the int16 adds and kept every product live: spills); |each| <= 2·15·127,
 * so eight of them (four words of both nibbles) fit */
#define ADD16(s, p)                                                                                                  \
    do {                                                                                                             \
        s = _mm256_add_epi16(s, p);                                                                                  \
        __asm__("" : "+x"(s));                                                                                       \
    } while (0)
#define PAIRS(s, lo, hi, xe, xo) ADD16(s, _mm256_add_epi16(_mm256_maddubs_epi16(lo, xe), _mm256_maddubs_epi16(hi, xo)))
#define ACC16(s, u, x) ADD16(s, _mm256_maddubs_epi16(u, x))
#define FLUSH(acc, s) (acc = _mm256_add_epi32(acc, _mm256_madd_epi16(s, _mm256_set1_epi16(1))))
#define TILE8 2 /* 8-bit tiles of TILE8 tokens */
#include "kernels/x86/q8_avx2.h"
#undef ATTR
#undef SFX
#undef DOT
#undef DOT8
#undef PAIRS
#undef FLUSH
#undef TILE8
#undef ACC16
#undef ADD16

#define ATTR AVXVNNI
#define TILE8 0
#define SFX avxvnni
#define DOT(acc, u, s) _mm256_dpbusd_avx_epi32(acc, u, s)
#define DOT8(lo, hi, v, x) (lo = DOT(lo, v, x))
#define PAIRS(s, lo, hi, xe, xo) (s = DOT(DOT(s, lo, xe), hi, xo))
#define FLUSH(acc, s) (acc = _mm256_add_epi32(acc, s))
#include "kernels/x86/q8_avx2.h"
#undef ATTR
#undef SFX
#undef DOT
#undef DOT8
#undef PAIRS
#undef FLUSH
#undef TILE8

/* rint(v/d) clamped to ±127 as 8 int8 (q8_codes16's steps on 8 lanes;
 * saturating packs of values within ±127: exact). */
AVX2 INLINE void q8_codes8(__m256 v, __m256 d, int8_t *out)
{
    __m256 q = _mm256_round_ps(_mm256_div_ps(v, d), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    q = _mm256_min_ps(_mm256_set1_ps(127.0f), _mm256_max_ps(_mm256_set1_ps(-127.0f), q));
    const __m256i i = _mm256_cvttps_epi32(q);
    const __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(i), _mm256_extracti128_si256(i, 1));
    _mm_storel_epi64((__m128i *)(void *)out, _mm_packs_epi16(w, w));
}

/* kern_q8input_part 8 values a step, the same buffer bit for bit
 * (tests/test_kernels.c), as kern_q8input_part_avx512: the definition's
 * group sums; a group's max|x| exact in any order; at 4 bits the even and
 * odd weights of 16 split by one shuffle and one permute each. */
AVX2 void kern_q8input_part_avx2(const struct wmat *w, const float *x, int64_t n, void *buf, int64_t part)
{
    struct kern_q8parts p;
    kern_q8input_part_begin(w, n, buf, part, &p);
    const int64_t ng = p.ng, gs = w->gs, cols = w->cols, stride = p.stride;
    kern_group_sums(w, x + p.t0 * cols, p.t1 - p.t0, p.xsum + p.t0 * ng);
    const __m256 sign = _mm256_set1_ps(-0.0f), inf = _mm256_set1_ps(INFINITY);
    for (int64_t t = p.t0; t < p.t1; t++) {
        const float *xt = x + t * cols;
        int8_t *xq = p.xq + t * stride;
        for (int64_t g = 0; g < ng; g++) {
            const float *xg = xt + g * gs;
            __m256 mx = _mm256_setzero_ps();
            int bad = 0;
            for (int64_t i = 0; i < gs; i += 8) {
                const __m256 a = _mm256_andnot_ps(sign, _mm256_loadu_ps(xg + i));
                bad |= _mm256_movemask_ps(_mm256_cmp_ps(a, inf, _CMP_NLT_UQ)); /* inf or NaN */
                mx = _mm256_max_ps(mx, a);
            }
            __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
            m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
            m4 = _mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1));
            const float dg = bad ? NAN : _mm_cvtss_f32(m4) / 127.0f;
            p.d[t * ng + g] = dg;
            if (bad || dg == 0.0f)
                continue;
            const __m256 dv = _mm256_set1_ps(dg);
            for (int64_t i = 0; i < gs; i += 16) {
                const int64_t j = g * gs + i; /* at 4 bits: even, in chunk j / 128 */
                const __m256 lo = _mm256_loadu_ps(xg + i), hi = _mm256_loadu_ps(xg + i + 8);
                if (w->bits == 8) {
                    q8_codes8(lo, dv, xq + j);
                    q8_codes8(hi, dv, xq + j + 8);
                } else {
                    int8_t *c = xq + 128 * (j / 128) + (j % 128) / 2;
                    const __m256 ev = _mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(2, 0, 2, 0)); /* 0 2 8 10 | 4 6 12 14 */
                    const __m256 od = _mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(3, 1, 3, 1));
                    q8_codes8(_mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(ev), 0xD8)), dv, c);
                    q8_codes8(_mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(od), 0xD8)), dv, c + 64);
                }
            }
        }
    }
    kern_q8input_part_end(&p);
}
