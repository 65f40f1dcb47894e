/* test_quant.c - quant/: MLX affine quantization against INPUTS.md §2.5
 * (V1-V5) and the properties of MLX's own tests (§2.5); the AVX-512 twins
 * bit for bit against the definitions; the QAT lattice; the format table,
 * row by row, and the MLX quantization block. */
#include <criterion/criterion.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/cpu.h"
#include "core/dtype.h"
#include "core/gguf.h"
#include "quant/quant.h"
#include "tests/helpers.h"

static const int all_bits[] = {2, 3, 4, 5, 6, 8};
#define N_BITS (sizeof all_bits / sizeof all_bits[0])

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* Words as little-endian bytes, placed at an odd offset to exercise unaligned reads. */
static const uint8_t *le_bytes_unaligned(const uint32_t *words, size_t n, uint8_t *buf)
{
    uint8_t *p = buf + 1;
    for (size_t i = 0; i < n; i++)
        for (int b = 0; b < 4; b++)
            p[4 * i + (size_t)b] = (uint8_t)(words[i] >> (8 * b));
    return p;
}

static void assert_words(const uint32_t *got, const uint32_t *want, size_t n, const char *what)
{
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(got[i], want[i], "%s: word %zu is %08x, expected %08x", what, i, got[i],
                     want[i]);
}

/* ---------------------------------------------------------------- §2.1 */

Test(quant, qmode_names)
{
    static const struct { const char *name; enum qmode m; } t[] = {
        {"affine", QM_AFFINE}, {"mxfp4", QM_MXFP4}, {"nvfp4", QM_NVFP4}, {"mxfp8", QM_MXFP8},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        enum qmode m;
        cr_assert(qmode_from_name(t[i].name, &m), "%s", t[i].name);
        cr_assert_eq(m, t[i].m);
        cr_assert_str_eq(qmode_name(t[i].m), t[i].name);
    }
    enum qmode m;
    cr_assert_not(qmode_from_name("Affine", &m));
    cr_assert_not(qmode_from_name("", &m));
    cr_assert_not(qmode_from_name("fp4", &m));
}

Test(quant, qmode_defaults)
{
    static const struct { enum qmode m; int gs, bits; } t[] = {
        {QM_AFFINE, 64, 4}, {QM_MXFP4, 32, 4}, {QM_NVFP4, 16, 4}, {QM_MXFP8, 32, 8},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        int gs = 0, bits = 0;
        qmode_defaults(t[i].m, &gs, &bits);
        cr_assert_eq(gs, t[i].gs, "%s", qmode_name(t[i].m));
        cr_assert_eq(bits, t[i].bits, "%s", qmode_name(t[i].m));
        cr_assert(quant_params_valid(t[i].m, bits, gs), "%s defaults", qmode_name(t[i].m));
    }
}

Test(quant, params_valid)
{
    static const struct { enum qmode m; int bits, gs; bool ok; } t[] = {
        {QM_AFFINE, 2, 32, true},   {QM_AFFINE, 3, 64, true},   {QM_AFFINE, 4, 64, true},
        {QM_AFFINE, 5, 128, true},  {QM_AFFINE, 6, 32, true},   {QM_AFFINE, 8, 128, true},
        {QM_AFFINE, 1, 64, false},  {QM_AFFINE, 7, 64, false},  {QM_AFFINE, 0, 64, false},
        {QM_AFFINE, 9, 64, false},  {QM_AFFINE, 16, 64, false}, {QM_AFFINE, -4, 64, false},
        {QM_AFFINE, 4, 16, false},  {QM_AFFINE, 4, 0, false},   {QM_AFFINE, 4, 96, false},
        {QM_AFFINE, 4, 256, false}, {QM_AFFINE, 4, -64, false},
        {QM_MXFP4, 4, 32, true},    {QM_MXFP4, 4, 64, false},   {QM_MXFP4, 8, 32, false},
        {QM_MXFP4, 4, 16, false},
        {QM_NVFP4, 4, 16, true},    {QM_NVFP4, 4, 32, false},   {QM_NVFP4, 8, 16, false},
        {QM_MXFP8, 8, 32, true},    {QM_MXFP8, 4, 32, false},   {QM_MXFP8, 8, 64, false},
        {QM_MXFP8, 8, 16, false},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        cr_assert_eq(quant_params_valid(t[i].m, t[i].bits, t[i].gs), t[i].ok,
                     "%s bits=%d gs=%d should be %s", qmode_name(t[i].m), t[i].bits, t[i].gs,
                     t[i].ok ? "valid" : "invalid");
}

/* ---------------------------------------------------------------- V1 */

static const uint32_t v1_words[9][8] = {
    [2] = {0xe4e4e4e4, 0xe4e4e4e4},
    [3] = {0x88fac688, 0xc688fac6, 0xfac688fa},
    [4] = {0x76543210, 0xfedcba98, 0x76543210, 0xfedcba98},
    [5] = {0x8a418820, 0xc5a92839, 0xca307b9a, 0x38bdab49, 0xffbbcdeb},
    [6] = {0x440c2040, 0xa2481c61, 0x3ce34c2c, 0x544d2450, 0xa6585d65, 0x7de75c6d},
    [8] = {0x03020100, 0x07060504, 0x0b0a0908, 0x0f0e0d0c, 0x13121110, 0x17161514, 0x1b1a1918,
           0x1f1e1d1c},
};

Test(quant, v1_pack_and_unpack)
{
    for (size_t bi = 0; bi < N_BITS; bi++) {
        int b = all_bits[bi];
        uint8_t codes[32];
        for (int i = 0; i < 32; i++)
            codes[i] = (uint8_t)(i % (1 << b));
        size_t nw = quant_row_words(32, b);
        cr_assert_eq(nw, (size_t)b);
        uint32_t words[8];
        memset(words, 0xa5, sizeof words); /* pack must zero-initialise */
        quant_pack_codes(codes, 32, b, words);
        char what[32];
        snprintf(what, sizeof what, "V1 b=%d", b);
        assert_words(words, v1_words[b], nw, what);

        uint8_t buf[40];
        const uint8_t *row = le_bytes_unaligned(v1_words[b], nw, buf);
        for (size_t i = 0; i < 32; i++)
            cr_assert_eq(quant_code_at(row, i, b), codes[i], "V1 b=%d code %zu", b, i);
    }
}

Test(quant, pack_roundtrip_random_codes)
{
    uint32_t s = 12345u;
    for (size_t bi = 0; bi < N_BITS; bi++) {
        int b = all_bits[bi];
        uint8_t codes[128];
        for (int i = 0; i < 128; i++) {
            s ^= s << 13, s ^= s >> 17, s ^= s << 5;
            codes[i] = (uint8_t)(s & ((1u << b) - 1u));
        }
        uint32_t words[32];
        quant_pack_codes(codes, 128, b, words);
        uint8_t buf[132];
        const uint8_t *row = le_bytes_unaligned(words, quant_row_words(128, b), buf);
        for (size_t i = 0; i < 128; i++)
            cr_assert_eq(quant_code_at(row, i, b), codes[i], "b=%d code %zu", b, i);
    }
}

/* ---------------------------------------------------------------- V2 */

struct vec {
    int bits;
    uint32_t scale;
    bool has_q;
    uint8_t q[32];
    uint32_t words[8];
};

static const struct vec v2[] = {
    {2, 0xbf980000, true,
     {3, 3, 3, 3, 3, 3, 3, 3, 2, 2, 2, 2, 2, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0},
     {0xaaaaffff, 0x00155556}},
    {3, 0xbf180000, true,
     {7, 6, 6, 6, 6, 5, 5, 5, 5, 5, 4, 4, 4, 4, 4, 3, 3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 1, 0, 0, 0},
     {0x2db6edb7, 0x26db7249, 0x00124949}},
    {4, 0xbe871c72, true,
     {15, 14, 14, 13, 13, 12, 12, 11, 11, 10, 10, 9, 9, 9, 8, 8,
      7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0},
     {0xbccddeef, 0x88999aab, 0x44556677, 0x00112233}},
    {5, 0xbe000000, true,
     {31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20, 19, 18, 17, 16,
      15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0},
     {0x75be77df, 0x3a56d7c6, 0x35cf8465, 0xc74254b6, 0x00443214}},
    {6, 0xbd796f97, true,
     {63, 62, 60, 57, 55, 53, 51, 49, 47, 45, 43, 41, 39, 37, 35, 33,
      31, 29, 27, 25, 23, 21, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0},
     {0x77e7cfbf, 0xbb6fc73d, 0x863967a6, 0x5765b75f, 0xa30e4125, 0x00210620}},
    {8, 0xbc796f97, true,
     {255, 246, 238, 230, 222, 213, 205, 197, 189, 181, 172, 164, 156, 148, 140, 131,
      123, 115, 107, 99, 90, 82, 74, 66, 57, 49, 41, 33, 25, 16, 8, 0},
     {0xe6eef6ff, 0xc5cdd5de, 0xa4acb5bd, 0x838c949c, 0x636b737b, 0x424a525a, 0x21293139,
      0x00081019}},
};

/* Max abs reconstruction error listed for V2 (b = 2,3,4,5,6,8) and its tolerance. */
static const float v2_maxerr[] = {0.5625f, 0.28125f, 0.125f, 0.0f, 0.0385f, 0.00721f};
static const float v2_maxerr_tol[] = {0.0f, 0.0f, 0.0f, 0.0f, 5e-5f, 5e-6f};

/* Checks one group of 32 through quant_affine_group and quant_affine_row (F32 storage). */
static void check_vec(const char *name, const float *w, const struct vec *v, uint32_t bias_bits)
{
    int b = v->bits;
    uint8_t codes[32];
    float scale, bias;
    quant_affine_group(w, 32, b, codes, &scale, &bias);
    cr_assert_eq(f32_bits(scale), v->scale, "%s b=%d: scale %08x, expected %08x", name, b,
                 f32_bits(scale), v->scale);
    cr_assert_eq(f32_bits(bias), bias_bits, "%s b=%d: bias %08x, expected %08x", name, b,
                 f32_bits(bias), bias_bits);
    if (v->has_q)
        for (int i = 0; i < 32; i++)
            cr_assert_eq(codes[i], v->q[i], "%s b=%d: q[%d] = %d, expected %d", name, b, i,
                         codes[i], v->q[i]);

    char what[48];
    snprintf(what, sizeof what, "%s b=%d group", name, b);
    uint32_t words[8];
    quant_pack_codes(codes, 32, b, words);
    assert_words(words, v->words, (size_t)b, what);

    uint32_t rwords[8];
    uint8_t sc[4], bi[4];
    quant_affine_row(w, 32, 32, b, DT_F32, rwords, sc, bi);
    snprintf(what, sizeof what, "%s b=%d row", name, b);
    assert_words(rwords, v->words, (size_t)b, what);
    uint32_t sb, bb;
    memcpy(&sb, sc, 4);
    memcpy(&bb, bi, 4);
    cr_assert_eq(sb, v->scale, "%s b=%d: stored scale %08x", name, b, sb);
    cr_assert_eq(bb, bias_bits, "%s b=%d: stored bias %08x", name, b, bb);
}

static void v2_input(float *w)
{
    for (int i = 0; i < 32; i++)
        w[i] = (float)(i - 12) / 8.0f;
}

Test(quant, v2_all_bits)
{
    float w[32];
    v2_input(w);
    for (size_t i = 0; i < sizeof v2 / sizeof v2[0]; i++)
        check_vec("V2", w, &v2[i], 0x40180000);
}

Test(quant, v2_dequant_max_error)
{
    float w[32];
    v2_input(w);
    for (size_t i = 0; i < sizeof v2 / sizeof v2[0]; i++) {
        int b = v2[i].bits;
        uint32_t words[8];
        uint8_t sc[4], bi[4], buf[40];
        float deq[32];
        quant_affine_row(w, 32, 32, b, DT_F32, words, sc, bi);
        const uint8_t *row = le_bytes_unaligned(words, (size_t)b, buf);
        dequant_affine_row(row, sc, bi, DT_F32, 32, 32, b, deq);
        float maxerr = 0.0f;
        for (int j = 0; j < 32; j++)
            maxerr = fmaxf(maxerr, fabsf(w[j] - deq[j]));
        cr_assert_leq(fabsf(maxerr - v2_maxerr[i]), v2_maxerr_tol[i],
                      "V2 b=%d: max error %.9g, expected %.9g", b, (double)maxerr,
                      (double)v2_maxerr[i]);
    }
}

/* ---------------------------------------------------------------- V3 */

Test(quant, v3_all_negative)
{
    static const struct vec v3[] = {
        {4, 0x3e088889, true,
         {15, 14, 14, 13, 13, 12, 12, 11, 11, 10, 10, 9, 9, 8, 8, 7,
          7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0},
         {0xbccddeef, 0x78899aab, 0x44556677, 0x00112233}},
        {8, 0x3bf92fb2, false, {0},
         {0xe6eef7ff, 0xc5cdd6de, 0xa4adb5bd, 0x848c949c, 0x636b737b, 0x424a525a, 0x2129313a,
          0x00081019}},
    };
    float w[32];
    for (int i = 0; i < 32; i++)
        w[i] = -(float)(i + 1) / 16.0f;
    for (size_t i = 0; i < sizeof v3 / sizeof v3[0]; i++)
        check_vec("V3", w, &v3[i], 0xc0000000);
}

/* ---------------------------------------------------------------- V4 */

Test(quant, v4_zeros)
{
    static const struct vec v4 = {4, 0xb3d6bf95, true, {0}, {0, 0, 0, 0}};
    float w[32] = {0};
    check_vec("V4", w, &v4, 0x00000000);

    uint32_t words[4];
    uint8_t sc[4], bi[4];
    float deq[32];
    quant_affine_row(w, 32, 32, 4, DT_F32, words, sc, bi);
    dequant_affine_row((const uint8_t *)words, sc, bi, DT_F32, 32, 32, 4, deq);
    for (int i = 0; i < 32; i++)
        cr_assert(deq[i] == 0.0f, "V4: deq[%d] = %g", i, (double)deq[i]);
}

/* ---------------------------------------------------------------- V5 */

Test(quant, v5_bf16_gs64)
{
    static const uint16_t in_head[8] = {0x0000, 0x3d2c, 0x3d3a, 0x3be7,
                                        0xbd1b, 0xbd44, 0xbc65, 0x3d07};
    static const uint8_t q[64] = {
        8, 1,  1,  7,  14, 15, 10, 3,  0,  5,  12, 15, 12, 5,  0, 3, 10, 15, 14, 7, 1, 1,
        8, 15, 15, 9,  2,  0,  6,  13, 15, 11, 4,  0,  4,  11, 15, 13, 6, 0, 2,  9,  15, 15,
        8, 1,  1,  7,  14, 15, 10, 3,  0,  5,  12, 15, 12, 5,  0,  3, 10, 15, 14, 7};
    static const uint32_t want_words[8] = {0x3afe7118, 0x305cfc50, 0xf8117efa, 0xbfd6029f,
                                           0x06dfb404, 0x7118ff92, 0xfc503afe, 0x7efa305c};
    static const double want_deq[8] = {0.0,           0.043792725, 0.043792725, 0.006256104,
                                       -0.037536621, -0.043792725, -0.012512207, 0.031280518};

    float w[64];
    for (int i = 0; i < 64; i++) {
        uint16_t h = f32_to_bf16((float)(sin((double)i) * 0.05));
        if (i < 8)
            cr_assert_eq(h, in_head[i], "V5 input %d: bf16 %04x, expected %04x", i, h,
                         in_head[i]);
        w[i] = bf16_to_f32(h);
    }

    uint8_t codes[64];
    float scale, bias;
    quant_affine_group(w, 64, 4, codes, &scale, &bias);
    cr_assert_eq(f32_bits(scale), f32_bits(-0.006256103515625f), "V5 f32 scale %08x",
                 f32_bits(scale));
    cr_assert_eq(f32_bits(bias), f32_bits(0.050048828125f), "V5 f32 bias %08x", f32_bits(bias));
    for (int i = 0; i < 64; i++)
        cr_assert_eq(codes[i], q[i], "V5 q[%d] = %d, expected %d", i, codes[i], q[i]);

    uint32_t words[8];
    uint8_t sc[2], bi[2];
    quant_affine_row(w, 64, 64, 4, DT_BF16, words, sc, bi);
    assert_words(words, want_words, 8, "V5");
    uint16_t sh = (uint16_t)(sc[0] | sc[1] << 8), bh = (uint16_t)(bi[0] | bi[1] << 8);
    cr_assert_eq(sh, 0xbbcd, "V5 bf16 scale %04x", sh);
    cr_assert_eq(bh, 0x3d4d, "V5 bf16 bias %04x", bh);

    uint8_t buf[40];
    const uint8_t *row = le_bytes_unaligned(words, 8, buf);
    float deq[64];
    dequant_affine_row(row, sc, bi, DT_BF16, 64, 64, 4, deq);
    for (int i = 0; i < 64; i++) {
        float want = -0.006256103515625f * (float)q[i] + 0.050048828125f;
        cr_assert(deq[i] == want, "V5 deq[%d] = %.9g, expected %.9g", i, (double)deq[i],
                  (double)want);
    }
    for (int i = 0; i < 8; i++) {
        double d = (double)deq[i], t = want_deq[i];
        /* the listed decimals are rounded to 9 decimal places (8 significant digits), so
         * they can only be matched to 1e-9 absolute, not relative (0.043792725 vs the
         * exact 0.043792724609375 differs by 8.9e-9 relative) */
        cr_assert(fabs(d - t) <= 1e-9,
                  "V5 deq[%d] = %.12g, expected %.9g", i, d, t);
    }
}

/* ---------------------------------------------------------------- ties (not from §2.5) */

/* The §2.5 vectors contain no exact .5 ties, so they cannot tell rint from
 * round-half-away (the GPU kernels' rounding). This group has ties both in q0
 * and in the codes: b=2, wmax=5, wmin=-1 -> scale -2, edge/scale = -2.5 ->
 * q0 = -2 (round would give -3) -> scale -2.5, bias 5; then
 * (3.75-5)/-2.5 = 0.5 -> 0 and (1.25-5)/-2.5 = 1.5 -> 2. */
Test(quant, rounding_half_to_even)
{
    float w[32] = {5.0f, -1.0f, 3.75f, 1.25f};
    uint8_t codes[32];
    float scale, bias;
    quant_affine_group(w, 32, 2, codes, &scale, &bias);
    cr_assert_eq(f32_bits(scale), f32_bits(-2.5f), "scale %.9g", (double)scale);
    cr_assert_eq(f32_bits(bias), f32_bits(5.0f), "bias %.9g", (double)bias);
    static const uint8_t head[4] = {0, 2, 0, 2};
    for (int i = 0; i < 32; i++)
        cr_assert_eq(codes[i], i < 4 ? head[i] : 2, "q[%d] = %d", i, codes[i]);
}

/* ---------------------------------------------------------------- §2.5 properties */

/* xorshift32 + Irwin-Hall(4) sum: deterministic, roughly normal, zero mean. */
static uint32_t rng_state;

static float rand_uniform(void)
{
    uint32_t x = rng_state;
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    rng_state = x;
    return (float)(x >> 8) * 0x1p-24f;
}

static float rand_normalish(void)
{
    float s = rand_uniform() + rand_uniform() + rand_uniform() + rand_uniform() - 2.0f;
    return s * 1.7320508f; /* unit variance */
}

#define PROP_K 512

Test(quant, property_error_bound)
{
    static const int gss[] = {32, 64, 128};
    rng_state = 0x9e3779b9u;
    for (size_t gi = 0; gi < 3; gi++) {
        for (size_t bi = 0; bi < N_BITS; bi++) {
            int gs = gss[gi], b = all_bits[bi];
            float w[PROP_K], deq[PROP_K];
            float scale_mul = (gi + bi) % 2 ? 0.02f : 3.0f; /* small and large magnitudes */
            for (int i = 0; i < PROP_K; i++)
                w[i] = rand_normalish() * scale_mul;
            uint32_t words[PROP_K * 8 / 32];
            float sc[PROP_K / 32], bs[PROP_K / 32];
            quant_affine_row(w, PROP_K, gs, b, DT_F32, words, sc, bs);
            dequant_affine_row((const uint8_t *)words, sc, bs, DT_F32, PROP_K, gs, b, deq);
            for (int i = 0; i < PROP_K; i++) {
                float s = sc[i / gs];
                cr_assert(fabsf(w[i] - deq[i]) <= fabsf(s) + 1e-6f,
                          "gs=%d b=%d i=%d: w=%.9g deq=%.9g scale=%.9g", gs, b, i, (double)w[i],
                          (double)deq[i], (double)s);
            }
            /* the row path must agree with the group path */
            for (int g = 0; g < PROP_K / gs; g++) {
                uint8_t codes[128];
                float s, bias;
                quant_affine_group(w + g * gs, gs, b, codes, &s, &bias);
                cr_assert_eq(f32_bits(s), f32_bits(sc[g]), "gs=%d b=%d group %d scale", gs, b, g);
                cr_assert_eq(f32_bits(bias), f32_bits(bs[g]), "gs=%d b=%d group %d bias", gs, b,
                             g);
                for (int j = 0; j < gs; j++)
                    cr_assert_eq(quant_code_at((const uint8_t *)words, (size_t)(g * gs + j), b),
                                 codes[j], "gs=%d b=%d group %d code %d", gs, b, g, j);
            }
        }
    }
}

Test(quant, property_zeros_exact)
{
    static const int gss[] = {32, 64, 128};
    static const enum dtype sdts[] = {DT_F32, DT_F16, DT_BF16};
    for (size_t di = 0; di < 3; di++) {
        for (size_t gi = 0; gi < 3; gi++) {
            for (size_t bi = 0; bi < N_BITS; bi++) {
                int gs = gss[gi], b = all_bits[bi];
                float w[256] = {0}, deq[256];
                uint32_t words[256 * 8 / 32];
                uint8_t sc[8 * 4], bs[8 * 4];
                memset(deq, 0xff, sizeof deq);
                quant_affine_row(w, 256, gs, b, sdts[di], words, sc, bs);
                dequant_affine_row((const uint8_t *)words, sc, bs, sdts[di], 256, gs, b, deq);
                for (int i = 0; i < 256; i++)
                    cr_assert(deq[i] == 0.0f, "%s gs=%d b=%d: deq[%d] = %g",
                              dtype_name(sdts[di]), gs, b, i, (double)deq[i]);
            }
        }
    }
}

/* ---------------------------------------------------------------- the fast twins (x86) */

#define LEN(a) (sizeof(a) / sizeof((a)[0]))
#if GP_X86
static const int gs_grid[] = {32, 64, 128};
static const enum dtype sdt_grid[] = {DT_BF16, DT_F32, DT_F16};

/* The AVX-512 quantizer gives the scalar quantizer's bytes (words, scales,
 * biases) for every bits/group/scale dtype, on rows with wide magnitudes,
 * ties at .5, constant groups, zeros of both signs, subnormals, infinities
 * and NaNs. */
Test(quant, affine_row_avx512_bit_exact)
{
    if (!cpu_has(CPU_AVX512))
        cr_skip_test("no AVX-512 on this CPU");
    enum { K = 1024 };
    static const int bits_grid[] = {2, 3, 4, 5, 6, 8};
    static const float special[] = {0.0f, -0.0f, 1e-40f, -1e-40f, INFINITY, -INFINITY, NAN, 0.5f, 1.5f, -2.5f};
    uint64_t s = 77;
    float w[K];
    size_t cases = 0, nonzero = 0;
    for (int trial = 0; trial < 24; trial++) {
        for (size_t i = 0; i < K; i++) {
            uint64_t r = th_rng_next(&s);
            float v = th_rng_float(&s) * ldexpf(1.0f, (int)(r % 40) - 20);
            if (trial % 3 == 1 && r % 11 == 0)
                v = special[(r >> 8) % LEN(special)];
            if (trial % 3 == 2)
                v = (float)(int)((r >> 16) % 7) * 0.25f; /* many exact ties and constant runs */
            w[i] = v;
        }
        for (size_t b = 0; b < LEN(bits_grid); b++)
            for (size_t g = 0; g < LEN(gs_grid); g++)
                for (size_t d = 0; d < LEN(sdt_grid); d++) {
                    int bits = bits_grid[b], gs = gs_grid[g];
                    enum dtype sdt = sdt_grid[d];
                    size_t nw = quant_row_words(K, bits), np = K / (size_t)gs * dtype_table[sdt].bits / 8;
                    uint32_t w1[K], w2[K];
                    uint8_t s1[K * 4], s2[K * 4], b1[K * 4], b2[K * 4];
                    memset(w2, 0xAB, sizeof w2);
                    quant_affine_row(w, K, gs, bits, sdt, w1, s1, b1);
                    quant_affine_row_avx512(w, K, gs, bits, sdt, w2, s2, b2);
                    cr_assert(memcmp(w1, w2, nw * 4) == 0 && memcmp(s1, s2, np) == 0 && memcmp(b1, b2, np) == 0,
                              "trial %d, %d bits, group %d, %s scales: AVX-512 bytes differ from the scalar quantizer",
                              trial, bits, gs, dtype_name(sdt));
                    for (size_t i = 0; i < nw; i++)
                        nonzero += w1[i] != 0;
                    cases++;
                }
    }
    cr_assert_eq(cases, 24 * LEN(bits_grid) * LEN(gs_grid) * LEN(sdt_grid));
    cr_assert_gt(nonzero, cases, "the rows quantize to real codes");
    uint32_t words[K];
    uint8_t sc[K], bi[K];
    quant_row(w, K, 64, 4, DT_BF16, words, sc, bi); /* the dispatcher takes the same path */
    uint32_t ref[K];
    uint8_t rs[K], rb[K];
    quant_affine_row(w, K, 64, 4, DT_BF16, ref, rs, rb);
    cr_assert(memcmp(words, ref, quant_row_words(K, 4) * 4) == 0);
}


/* The AVX-512 and AVX2 twins of dequant_affine_row and dtype_to_f32. */
static const struct {
    const char *name;
    enum cpu_feature need;
    void (*dequant)(const uint8_t *, const void *, const void *, enum dtype, int64_t, int, int, float *);
    void (*to_f32)(enum dtype, const uint8_t *, float *, int64_t);
} twins[] = {
    {"avx512", CPU_AVX512, quant_dequant_row_avx512, quant_to_f32_avx512},
    {"avx2", CPU_AVX2, quant_dequant_row_avx2, quant_to_f32_avx2},
};

/* Each twin of dequant_affine_row gives its bits (NaN scales only need to
 * stay NaN) for 2/3/4/5/6/8 bits, every group size and scale dtype, on random
 * codes and on scale/bias bytes that include NaN, inf and subnormals. */
Test(quant, dequant_row_twins_match_reference)
{
    static const int bitss[] = {2, 3, 4, 5, 6, 8}, gss[] = {32, 64, 128};
    static const enum dtype dts[] = {DT_BF16, DT_F16, DT_F32};
    enum { K = 384 };
    uint8_t codes[K], sb[2][4 * K / 32];
    uint64_t s = 9;
    for (size_t i = 0; i < sizeof codes; i++)
        codes[i] = (uint8_t)th_rng_next(&s);
    for (int h = 0; h < 2; h++)
        for (size_t i = 0; i < sizeof sb[h]; i++)
            sb[h][i] = (uint8_t)th_rng_next(&s);
    int ran = 0;
    for (size_t t = 0; t < LEN(twins); t++) {
        if (!cpu_has(twins[t].need))
            continue;
        ran++;
        for (size_t b = 0; b < LEN(bitss); b++)
            for (size_t g = 0; g < LEN(gss); g++)
                for (size_t d = 0; d < LEN(dts); d++) {
                    float a[K + 1], v[K + 1];
                    memset(v, 0x5A, sizeof v);
                    const size_t bytes = (size_t)K * (size_t)bitss[b] / 8; /* the row ends its buffer (ASan) */
                    uint8_t *row = malloc(bytes);
                    cr_assert(row);
                    memcpy(row, codes, bytes);
                    dequant_affine_row(row, sb[0], sb[1], dts[d], K, gss[g], bitss[b], a);
                    twins[t].dequant(row, sb[0], sb[1], dts[d], K, gss[g], bitss[b], v);
                    free(row);
                    for (int i = 0; i < K; i++)
                        cr_assert(memcmp(&a[i], &v[i], 4) == 0 || (isnan(a[i]) && isnan(v[i])),
                                  "%s %d-bit group %d %s: value %d: %a vs %a", twins[t].name, bitss[b], gss[g],
                                  dtype_name(dts[d]), i, (double)a[i], (double)v[i]);
                    uint32_t guard;
                    memcpy(&guard, &v[K], 4);
                    cr_assert_eq(guard, 0x5A5A5A5Au, "%s: wrote past the end", twins[t].name);
                }
    }
    if (!ran)
        cr_skip_test("neither AVX-512 nor AVX2 on this CPU");
}

/* Each twin of dtype_to_f32 widens like it (bitwise; NaNs only need to stay
 * NaNs) for every length around the 8- and 16-lane steps. */
Test(quant, to_f32_twins_match_dtype_to_f32)
{
    static const enum dtype dts[] = {DT_BF16, DT_F16, DT_F32};
    uint8_t src[4 * 64];
    uint64_t s = 5;
    for (size_t i = 0; i < sizeof src; i++)
        src[i] = (uint8_t)th_rng_next(&s);
    int ran = 0;
    for (size_t t = 0; t < LEN(twins); t++) {
        if (!cpu_has(twins[t].need))
            continue;
        ran++;
        for (size_t d = 0; d < LEN(dts); d++)
            for (int64_t n = 0; n <= 40; n++) {
                float a[64], b[64];
                memset(b, 0x5A, sizeof b);
                dtype_to_f32(dts[d], src, a, (size_t)n);
                twins[t].to_f32(dts[d], src, b, n);
                for (int64_t i = 0; i < n; i++)
                    cr_assert(memcmp(&a[i], &b[i], 4) == 0 || (isnan(a[i]) && isnan(b[i])),
                              "%s %s n %lld: value %lld", twins[t].name, dtype_name(dts[d]), (long long)n,
                              (long long)i);
                uint32_t guard;
                memcpy(&guard, &b[n], 4);
                cr_assert_eq(guard, 0x5A5A5A5Au, "%s %s n %lld: wrote past the end", twins[t].name,
                             dtype_name(dts[d]), (long long)n);
            }
    }
    if (!ran)
        cr_skip_test("neither AVX-512 nor AVX2 on this CPU");
}

#endif

/* ---------------------------------------------------------------- MLX microscaling modes */

#include "tests/mx/vectors.h"

/* Every vector of tests/mx/make_vectors.py (from the independent transcription
 * tests/mx/reference.py): the scale byte and every code, or a refusal where
 * MLX's CPU path is undefined; and the row packed as MLX packs it. */
Test(quant, mx_vectors_bit_exact)
{
    int cases[3] = {0, 0, 0}, refused = 0;
    for (size_t i = 0; i < sizeof mx_vectors / sizeof mx_vectors[0]; i++) {
        const struct mx_vector *v = &mx_vectors[i];
        int gs, bits;
        qmode_defaults(v->mode, &gs, &bits);
        float x[32];
        memcpy(x, v->x, sizeof x);
        uint32_t words[8];
        uint8_t scale = 0xAA;
        int64_t bad = quant_mx_row(v->mode, v->t, x, (size_t)gs, words, &scale);
        if (v->refused) {
            cr_assert_eq(bad, 0, "%s %s: refused", qmode_name(v->mode), v->what);
            refused++;
            continue;
        }
        cr_assert_eq(bad, -1, "%s %s: not refused", qmode_name(v->mode), v->what);
        cr_assert_eq(scale, v->scale, "%s %s: scale 0x%02X, expected 0x%02X", qmode_name(v->mode), v->what, scale,
                     v->scale);
        for (int j = 0; j < gs; j++)
            cr_assert_eq(quant_code_at((const uint8_t *)words, (size_t)j, bits), v->codes[j],
                         "%s %s: element %d (%a): code 0x%02X, expected 0x%02X", qmode_name(v->mode), v->what, j,
                         (double)x[j], quant_code_at((const uint8_t *)words, (size_t)j, bits), v->codes[j]);
        cases[v->mode - QM_MXFP4]++;
    }
    cr_log_info("mx vectors: mxfp4 %d, nvfp4 %d, mxfp8 %d groups bit-exact, %d refused", cases[0], cases[1], cases[2],
                refused);
}

/* The threshold form of the E2M1 rounding is MLX's argmin for every bf16 and
 * f16 q below 512 in magnitude, and for float32 q on a sweep. */
Test(quant, mx_e2m1_threshold_equals_argmin)
{
    for (uint32_t h = 0; h < 0x10000; h++) {
        float b = bf16_to_f32((uint16_t)h), f = f16_to_f32((uint16_t)h);
        if (fabsf(b) < 512.0f)
            cr_assert_eq(mx_e2m1_code(DT_BF16, b), mx_e2m1_argmin(DT_BF16, b), "bf16 %a", (double)b);
        if (fabsf(f) < 512.0f)
            cr_assert_eq(mx_e2m1_code(DT_F16, f), mx_e2m1_argmin(DT_F16, f), "f16 %a", (double)f);
    }
    uint64_t s = 7;
    for (int i = 0; i < 2000000; i++) {
        float q = ldexpf(th_rng_float(&s), (int)(th_rng_next(&s) % 40) - 20);
        cr_assert_eq(mx_e2m1_code(DT_F32, q), mx_e2m1_argmin(DT_F32, q), "f32 %a", (double)q);
    }
}

/* E4M3 round trip: every byte decodes to a value its encoder gives back (but
 * 0x7F/0xFF, 480, which MLX never produces: they saturate to 0x7E/0xFE, and
 * −0 encodes as 0x80); dequantization is code value × scale value. */
Test(quant, mx_e4m3_and_dequant)
{
    for (int b = 0; b < 256; b++) {
        float v = mx_e4m3_value((uint8_t)b);
        uint8_t want = (b & 0x7F) == 0x7F ? (uint8_t)(b - 1) : (uint8_t)b;
        cr_assert_eq(mx_e4m3_encode(v), want, "0x%02X (%a)", b, (double)v);
    }
    cr_assert_eq(mx_e4m3_value(0x7E), 448.0f);
    cr_assert_eq(mx_e4m3_value(0x01), 0x1p-9f);
    cr_assert_eq(mx_scale_value(QM_MXFP4, 0), 0x1p-127f);
    cr_assert_eq(mx_scale_value(QM_MXFP4, 127), 1.0f);
    cr_assert(isinf(mx_scale_value(QM_MXFP8, 255)));
    uint8_t row[16] = {0x10, 0x32, 0x54, 0x76, 0x98, 0xBA, 0xDC, 0xFE}, sc[1] = {126};
    float out[16];
    dequant_mx_row(QM_NVFP4, row, (const uint8_t[]){0x38}, 16, out);
    for (int j = 0; j < 16; j++)
        cr_assert_eq(out[j], mx_e2m1_value((unsigned)j), "nvfp4 element %d", j);
    uint8_t row8[32];
    for (int j = 0; j < 32; j++)
        row8[j] = (uint8_t)(j * 7);
    float out8[32];
    dequant_mx_row(QM_MXFP8, row8, sc, 32, out8);
    for (int j = 0; j < 32; j++)
        cr_assert_eq(out8[j], mx_e4m3_value((uint8_t)(j * 7)) * 0.5f, "mxfp8 element %d", j);
}

/* ---------------------------------------------------------------- the QAT lattice */

/* A group on the q4_0 grid d·q (q in [-8, 7], d exact in the scales dtype)
 * becomes codes q + 8, scale d, bias -8d, and dequantizes to the same
 * values exactly; a group off it is quantized as quant_row would. */
Test(quant, lattice_exact_groups_and_the_rest)
{
    enum { K = 96 };
    float w[K], back[K];
    const float d = 0.0078125f * 3; /* 3·2^-7, exact in bf16 */
    for (int i = 0; i < 64; i++)
        w[i] = d * (float)(i % 16 - 8);                /* groups 0 and 1: the grid, every code */
    for (int i = 64; i < K; i++)
        w[i] = d * (float)(i % 16 - 8) + 1e-3f * (float)(i % 3); /* group 2: off it */
    uint32_t words[K / 8], ref_words[K / 8];
    uint16_t sc[K / 32], bi[K / 32], ref_sc[K / 32], ref_bi[K / 32];
    uint64_t groups = 0, exact = 0;
    quant_lattice_row(w, K, DT_BF16, words, sc, bi, &groups, &exact);
    cr_assert(groups == 3 && exact == 2, "%llu of %llu groups on the grid", (unsigned long long)exact,
              (unsigned long long)groups);
    dequant_affine_row((const uint8_t *)words, sc, bi, DT_BF16, 64, 32, 4, back);
    for (int i = 0; i < 64; i++)
        cr_assert_eq(f32_bits(back[i]), f32_bits(w[i]), "value %d: %a, expected %a", i, (double)back[i], (double)w[i]);
    for (int i = 0; i < 32; i++)
        cr_assert_eq(quant_code_at((const uint8_t *)words, (size_t)i, 4), (uint32_t)(i % 16), "code %d", i);
    quant_affine_row(w + 64, 32, 32, 4, DT_BF16, ref_words, ref_sc, ref_bi);
    cr_assert(!memcmp(words + 8, ref_words, 16) && sc[2] == ref_sc[0] && bi[2] == ref_bi[0],
              "the group off the grid differs from the affine quantizer's");
}

/* ---------------------------------------------------------------- the format table */

/* Every row of quant/format.h: its names read back as its mode; at every
 * allowed (bits, group), its quantizer writes exactly the bytes its parts
 * and qformat_bytes say (run over two fillings: every byte of a part is
 * written, nothing past it, no biases where it has none),
 * its definition and fast twin read back the same bits, and those are the
 * values within half a group's largest magnitude (groups 2^4 apart, so a
 * misplaced scale shows); its lattice variant and transcoding check where
 * it has them. */
Test(quant, format_rows)
{
    enum { K = 256, GUARD = 64 };
    for (int m = 0; m < QM_COUNT; m++) {
        const struct qformat *f = &quant_formats[m];
        enum qmode back;
        cr_assert(qmode_from_name(f->name, &back) && back == (enum qmode)m, "%s", f->name);
        cr_assert_str_eq(qmode_name((enum qmode)m), f->name);
        cr_assert(!f->mlx || (qmode_from_name(f->mlx, &back) && back == (enum qmode)m), "%s: MLX name", f->name);
        if (f->ggml) { /* a ggml block type: its blocks alone, read only, ggml's block and bytes */
            uint32_t block, bytes;
            const char *gname;
            cr_assert(ggml_type_info(f->ggml, &gname, &block, &bytes) && !strcmp(gname, f->name), "%s", f->name);
            cr_assert(!strcmp(f->feature, "quant:ggml") && f->parts == 1 && !f->mlx && !f->quantize, "%s", f->name);
            cr_assert(quant_params_valid((enum qmode)m, 8, (int)block) && qformat_fixed(f), "%s", f->name);
            cr_assert_eq(qformat_bytes(f, 4 * block, 8, (int)block, DT_U8), 4 * (uint64_t)bytes, "%s", f->name);
            cr_assert_eq(qformat_part_dtype(f, QP_WEIGHT, DT_BF16), DT_U8);
            continue;
        }
        cr_assert(!strncmp(f->feature, "quant:", 6) && !strcmp(f->feature + 6, f->name), "%s", f->feature);
        cr_assert(f->parts == 2 || f->parts == 3, "%s: %d parts", f->name, f->parts);
        for (int bits = 1; bits <= 8; bits++)
            for (int gs = 16; gs <= 128; gs *= 2) {
                if (!quant_params_valid((enum qmode)m, bits, gs))
                    continue;
                float w[K], def[K], fast[K];
                uint64_t seed = (uint64_t)(m * 100 + bits * 10 + gs);
                for (int i = 0; i < K; i++) /* exact in bf16, the type the quantizer is told */
                    w[i] = bf16_to_f32(f32_to_bf16(th_rng_float(&seed) * (float)(1 << (i / gs % 4 * 4))));
                enum dtype sdt = qformat_part_dtype(f, QP_SCALES, DT_BF16);
                uint64_t cb = qformat_part_cols(f, QP_WEIGHT, K, bits, gs) * 4,
                         sb = qformat_part_cols(f, QP_SCALES, K, bits, gs) * dtype_table[sdt].bits / 8;
                cr_assert_eq(cb + (uint64_t)(f->parts - 1) * sb, qformat_bytes(f, K, bits, gs, sdt), "%s %d/%d",
                             f->name, bits, gs);
                uint32_t words[2][K / 4 + GUARD / 4];
                uint8_t sc[2][K * 4 + GUARD], bi[2][K * 4 + GUARD];
                for (int r = 0; r < 2; r++) {
                    memset(words[r], r ? 0x5A : 0xA5, sizeof words[r]);
                    memset(sc[r], r ? 0x5A : 0xA5, sizeof sc[r]);
                    memset(bi[r], r ? 0x5A : 0xA5, sizeof bi[r]);
                    cr_assert_eq(f->quantize((enum qmode)m, DT_BF16, w, K, gs, bits, sdt, words[r], sc[r], bi[r]), -1);
                }
                const uint8_t *part[3][2] = {
                    {(uint8_t *)words[0], (uint8_t *)words[1]}, {sc[0], sc[1]}, {bi[0], bi[1]}};
                for (int p = 0; p < 3; p++) {
                    uint64_t n = p >= f->parts ? 0 : p == QP_WEIGHT ? cb : sb;
                    for (uint64_t i = 0; i < n + GUARD; i++)
                        cr_assert(i < n ? part[p][0][i] == part[p][1][i]
                                        : part[p][0][i] == 0xA5 && part[p][1][i] == 0x5A,
                                  "%s %d/%d: %s byte %llu %s", f->name, bits, gs, qpart_names[p], (unsigned long long)i,
                                  i < n ? "not written" : "written");
                }
                f->dequant((enum qmode)m, (const uint8_t *)words[0], sc[0], bi[0], sdt, K, gs, bits, def);
                f->dequant_fast((enum qmode)m, (const uint8_t *)words[0], sc[0], bi[0], sdt, K, gs, bits, fast);
                for (int i = 0; i < K; i++) {
                    float amax = 0.0f;
                    for (int j = i / gs * gs; j < (i / gs + 1) * gs; j++)
                        amax = fmaxf(amax, fabsf(w[j]));
                    cr_assert_eq(f32_bits(fast[i]), f32_bits(def[i]), "%s %d/%d: value %d", f->name, bits, gs, i);
                    cr_assert(fabsf(def[i] - w[i]) <= 0.5f * amax, "%s %d/%d: value %d is %g, expected %g",
                              f->name, bits, gs, i, (double)def[i], (double)w[i]);
                }
            }
        if (f->lattice) { /* the q4_0 grid d·q comes back exactly */
            float w[K], out[K];
            uint32_t words[K / 4];
            uint16_t sc[K / 16], bi[K / 16];
            uint64_t groups = 0, exact = 0;
            for (int i = 0; i < K; i++)
                w[i] = 0.015625f * (float)(i * 7 % 16 - 8);
            f->lattice(w, K, DT_BF16, words, sc, bi, &groups, &exact);
            cr_assert(groups == K / (uint64_t)f->lattice_gs && exact == groups, "%s lattice: %llu of %llu", f->name,
                      (unsigned long long)exact, (unsigned long long)groups);
            f->dequant((enum qmode)m, (const uint8_t *)words, sc, bi, DT_BF16, K, f->lattice_gs, f->lattice_bits, out);
            cr_assert(!memcmp(out, w, sizeof w), "%s lattice: values differ", f->name);
        }
        if (f->verify) { /* scale d, bias -8d against d·(u - 8): exact; a bias one step off: d */
            cr_assert_eq(f->verify(0.25f, -2.0f, 4, 0.25, 8.0), 0.0, "%s", f->name);
            cr_assert_eq(f->verify(0.25f, -1.75f, 4, 0.25, 8.0), 0.25, "%s", f->name);
            cr_assert(isnan(f->verify(NAN, 0.0f, 4, 0.25, 8.0)), "%s: NaN wins", f->name);
        }
    }
}

/* The MLX quantization block: the most common (mode, bits, group) on top,
 * the first of a tie; the others and the dense modules as entries. */
Test(quant, mlx_block)
{
    const struct qmodule m[] = {
        {"a", true, QM_AFFINE, 4, 64}, {"b", true, QM_MXFP4, 4, 32}, {"c", false, QM_AFFINE, 0, 0},
        {"d", true, QM_MXFP4, 4, 32},  {"e", true, QM_AFFINE, 4, 64}, {"f", true, QM_AFFINE, 8, 64},
    };
    struct json_object *q = quant_mlx_block(m, 6, false);
    cr_assert_str_eq(json_object_to_json_string_ext(q, JSON_C_TO_STRING_PLAIN),
                     "{\"group_size\":64,\"bits\":4,\"mode\":\"affine\",\"b\":{\"group_size\":32,\"bits\":4,\"mode\":"
                     "\"mxfp4\"},\"c\":false,\"d\":{\"group_size\":32,\"bits\":4,\"mode\":\"mxfp4\"},\"f\":{"
                     "\"group_size\":64,\"bits\":8}}");
    json_object_put(q);
    q = quant_mlx_block(m + 4, 2, true); /* a tie: the first; its entry names the mode */
    cr_assert_str_eq(json_object_to_json_string_ext(q, JSON_C_TO_STRING_PLAIN),
                     "{\"group_size\":64,\"bits\":4,\"mode\":\"affine\",\"f\":{\"group_size\":64,\"bits\":8,"
                     "\"mode\":\"affine\"}}");
    json_object_put(q);
    q = quant_mlx_block(m, 0, true);
    cr_assert_str_eq(json_object_to_json_string_ext(q, JSON_C_TO_STRING_PLAIN),
                     "{\"group_size\":64,\"bits\":4,\"mode\":\"affine\"}");
    json_object_put(q);
}
