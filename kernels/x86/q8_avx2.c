/* q8_avx2.c - the int8 kernels (KERN_Q8) on 256-bit vectors: with AVX-VNNI's
 * vpdpbusd, and with AVX2's vpmaddubsw + vpmaddwd (whose pair sums of u·s
 * saturate past 32767: every code is split into its nibbles first). The
 * template is q8_avx2.h; both give kern_q8dot_ref's bits (tests/test_kernels.c). */
#include <immintrin.h>

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
/* int16 pair sums: |each| <= 2·15·127, so eight of them (four words) fit */
#define PAIRS(s, lo, hi, xe, xo)                                                                                     \
    do {                                                                                                             \
        s = _mm256_add_epi16(_mm256_add_epi16(s, _mm256_maddubs_epi16(lo, xe)), _mm256_maddubs_epi16(hi, xo));        \
        __asm__("" : "+x"(s));                                                                                       \
    } while (0)
#define FLUSH(acc, s) (acc = _mm256_add_epi32(acc, _mm256_madd_epi16(s, _mm256_set1_epi16(1))))
#include "kernels/x86/q8_avx2.h"
#undef ATTR
#undef SFX
#undef DOT
#undef DOT8
#undef PAIRS
#undef FLUSH

#define ATTR AVXVNNI
#define SFX avxvnni
#define DOT(acc, u, s) _mm256_dpbusd_avx_epi32(acc, u, s)
#define DOT8(lo, hi, v, x) (lo = DOT(lo, v, x))
#define PAIRS(s, lo, hi, xe, xo) (s = DOT(DOT(s, lo, xe), hi, xo))
#define FLUSH(acc, s) (acc = _mm256_add_epi32(acc, s))
#include "kernels/x86/q8_avx2.h"
