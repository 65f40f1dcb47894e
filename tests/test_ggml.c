/* test_ggml.c - quant/ggml against ggml itself: ggml's own ggml-quants.c
 * (build-ref/ggml/, extracted by setup.sh from the llama.cpp bundle of
 * node-llama-cpp@3.21.1) is compiled at test time with tests/ggml/ref_driver.c
 * into a reference executable; the same blocks go through both and every
 * float must have the same bits (NaN: NaN at the same place, as NaN payloads
 * follow the compiler's operand order). Without build-ref/ggml the tests
 * skip, saying so. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/bytes.h"
#include "core/gguf.h"
#include "core/dtype.h"
#include "quant/ggml.h"
#include "quant/quant.h"
#include "tests/helpers.h"

#define REF GP_SOURCE_DIR "/build-ref/ggml"
#define N_TYPES 22

/* ggml's block structs as the driver reports them. */
struct layout {
    int id;
    long qk, bytes, d, dmin;
};

/* Skips the test without the ggml sources setup.sh extracts. */
static void need_ref(void)
{
    FILE *ok = fopen(REF "/.ok", "r");
    if (!ok)
        cr_skip_test("no ggml sources under build-ref/ggml: run setup.sh (npm node-llama-cpp's llama.cpp bundle)");
    fclose(ok);
}

/* Builds the driver in dir; returns its malloc'ed path (skips without the sources). */
static char *build_driver(const char *dir)
{
    need_ref();
    const char *cc = getenv("CC") ? getenv("CC") : "cc";
    char *exe = malloc(4096), cmd[8192];
    snprintf(exe, 4096, "%s/ref_driver", dir);
    /* -ffp-contract=off: each multiply and add rounded, as ggml's own build of this file on x86-64 */
    snprintf(cmd, sizeof cmd,
             "nice %s -std=gnu11 -O2 -ffp-contract=off -w -I%s/ggml/include -I%s/ggml/src -I%s/ggml/src/ggml-cpu "
             "%s/ggml/src/ggml-quants.c %s/tests/ggml/ref_driver.c -o %s -lm",
             cc, REF, REF, REF, REF, GP_SOURCE_DIR, exe);
    cr_assert_eq(system(cmd), 0, "building ggml's reference driver failed: %s", cmd);
    return exe;
}

/* The reference: the driver built in a scratch directory, and its layouts. */
struct ref {
    char *dir, *exe;
    struct layout l[N_TYPES];
};

static void ref_open(struct ref *r)
{
    r->dir = th_mkdtemp();
    r->exe = build_driver(r->dir);
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "%s layout", r->exe);
    FILE *p = popen(cmd, "r");
    cr_assert(p);
    for (int t = 0; t < N_TYPES; t++) {
        struct layout *l = &r->l[t];
        cr_assert_eq(fscanf(p, "%d %ld %ld %ld %ld", &l->id, &l->qk, &l->bytes, &l->d, &l->dmin), 5);
    }
    cr_assert_eq(pclose(p), 0);
}

static void ref_close(struct ref *r)
{
    free(r->exe);
    th_rmtree(r->dir);
}

static const struct layout *layout_of(const struct layout *l, uint32_t id)
{
    for (int t = 0; t < N_TYPES; t++)
        if (l[t].id == (int)id)
            return &l[t];
    cr_assert_fail("type %u: not in the driver's layout", id);
    return NULL;
}

/* ggml's dequantization of blocks through the driver. */
static float *ref_dequant(const char *dir, const char *exe, uint32_t id, const uint8_t *b, size_t len, size_t n)
{
    char *in = th_write(dir, "in.bin", b, len), out[4096], cmd[12800];
    snprintf(out, sizeof out, "%s/out.bin", dir);
    snprintf(cmd, sizeof cmd, "%s %u %s %s", exe, id, in, out);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
    size_t got;
    uint8_t *raw = th_read(out, &got);
    float *y = malloc(n * sizeof *y);
    cr_assert(raw && y && got == n * sizeof(float), "type %u: driver wrote %zu bytes, want %zu", id, got,
              n * sizeof(float));
    memcpy(y, raw, got);
    free(raw), free(in);
    return y;
}

/* The f16 scale of a block: at the driver's offsetof, or IQ1_M's four top
 * nibbles of its scale words (bytes 48..55); MXFP4's e8m0 byte. */
static void set_scale(const struct layout *l, uint8_t *b, long at, uint16_t h)
{
    if (l->id == GGML_IQ1_M) {
        for (int k = 0; k < 4; k++)
            b[48 + 2 * k + 1] = (uint8_t)((b[48 + 2 * k + 1] & 0x0f) | (((h >> 4 * k) & 0xf) << 4));
    } else if (l->id == GGML_MXFP4) {
        b[at] = (uint8_t)h;
    } else {
        wr_u16le(b + at, h);
    }
}

static void set_scales(const struct layout *l, uint8_t *b, uint16_t d, uint16_t dmin)
{
    set_scale(l, b, l->d, d);
    if (l->dmin >= 0)
        set_scale(l, b, l->dmin, dmin);
}

static uint16_t finite_f16(uint64_t *s)
{
    uint16_t h = (uint16_t)th_rng_next(s);
    return (h & 0x7c00) == 0x7c00 ? (uint16_t)(h & ~0x4000) : h;
}

static const uint16_t edge_f16[] = {0x0000, 0x8000, 0x0001, 0x8001, 0x03ff, 0x0400, 0x3c00, 0xbc00,
                                    0x7bff, 0xfbff, 0x7c00, 0xfc00, 0x7e00, 0x7c01};
static const uint8_t fills[] = {0x00, 0xff, 0x55, 0xaa, 0x0f, 0xf0, 0x80, 0x7f};
#define N_EDGE (sizeof edge_f16 / sizeof edge_f16[0])
#define N_FILL (sizeof fills / sizeof fills[0])

/* The test blocks of a type: random bytes under random finite scales
 * (16384 blocks of 32 weights, 2048 of 256: every grid index and sign
 * pattern, checked by `coverage`), every byte filled with each of `fills`
 * under every pair of edge scales (MXFP4: every exponent 0..255), and random
 * bytes as they come (scales NaN or infinite at times). */
static uint8_t *make_blocks(const struct layout *l, size_t *nb)
{
    size_t n_rand = l->qk == 32 ? 16384 : 2048, n_raw = 256;
    size_t n_edge = l->id == GGML_MXFP4 ? 256 * N_FILL : N_EDGE * (l->dmin >= 0 ? N_EDGE : 1) * N_FILL;
    *nb = n_rand + n_edge + n_raw;
    uint8_t *b = malloc(*nb * (size_t)l->bytes), *p = b;
    cr_assert(b);
    uint64_t s = 0x9e3779b97f4a7c15u ^ (uint64_t)l->id;
    for (size_t i = 0; i < n_rand; i++, p += l->bytes) {
        for (long k = 0; k < l->bytes; k++)
            p[k] = (uint8_t)th_rng_next(&s);
        set_scales(l, p, l->id == GGML_MXFP4 ? (uint16_t)(th_rng_next(&s) % 255) : finite_f16(&s), finite_f16(&s));
    }
    for (size_t f = 0; f < N_FILL; f++) {
        if (l->id == GGML_MXFP4) {
            for (unsigned e = 0; e < 256; e++, p += l->bytes) {
                memset(p, fills[f], (size_t)l->bytes);
                set_scales(l, p, (uint16_t)e, 0);
            }
            continue;
        }
        for (size_t i = 0; i < N_EDGE; i++)
            for (size_t j = 0; j < (l->dmin >= 0 ? N_EDGE : 1); j++, p += l->bytes) {
                memset(p, fills[f], (size_t)l->bytes);
                set_scales(l, p, edge_f16[i], edge_f16[j]);
            }
    }
    for (size_t i = 0; i < n_raw; i++, p += l->bytes)
        for (long k = 0; k < l->bytes; k++)
            p[k] = (uint8_t)th_rng_next(&s);
    cr_assert_eq((size_t)(p - b), *nb * (size_t)l->bytes);
    return b;
}

/* The second reading: gguf-py's quants.py (NumPy) on the same blocks, every
 * float bit-identical too (tests/ggml/gguf_py.py). */
static void gguf_py(const char *dir, const char *name, const uint8_t *b, size_t len, const float *y, size_t n)
{
    char *in = th_write(dir, "py_in.bin", b, len), *out = th_write(dir, "py_ours.bin", y, n * sizeof *y);
    char cmd[12800], line[512] = "";
    snprintf(cmd, sizeof cmd, "nice /usr/bin/python3 %s/tests/ggml/gguf_py.py %s/gguf-py %s %s %s", GP_SOURCE_DIR,
             REF, name, in, out);
    FILE *p = popen(cmd, "r");
    cr_assert(p);
    if (!fgets(line, sizeof line, p))
        line[0] = 0;
    const int rc = pclose(p);
    line[strcspn(line, "\n")] = 0;
    cr_assert_eq(rc, 0, "gguf-py: %s", line);
    cr_log_info("gguf-py %s", line);
    free(in), free(out);
}

static uint32_t bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* The table's rows against ggml's block structs. */
Test(ggml, table)
{
    struct ref ref;
    ref_open(&ref);
    struct ggml_qtype t;
    size_t i = 0;
    for (; ggml_qtype_at(i, &t); i++) {
        const struct layout *r = layout_of(ref.l, t.id);
        cr_assert_eq(t.block, (uint32_t)r->qk, "%s: block %u, ggml %ld", t.name, t.block, r->qk);
        cr_assert_eq(t.bytes, (uint32_t)r->bytes, "%s: bytes %u, ggml %ld", t.name, t.bytes, r->bytes);
        cr_assert_float_eq(t.bpw, 8.0 * (double)r->bytes / (double)r->qk, 1e-12);
    }
    cr_assert_eq(i, N_TYPES);
    ref_close(&ref);
}

/* Lookups by id and by name in any case; ids and names without a row. */
Test(ggml, lookup)
{
    struct ggml_qtype t;
    for (size_t i = 0; ggml_qtype_at(i, &t); i++) {
        struct ggml_qtype u, v;
        cr_assert(ggml_qtype_find(t.id, &u) && u.dequant == t.dequant && u.bad_scale == t.bad_scale &&
                  strcmp(u.name, t.name) == 0);
        char lower[16];
        size_t k = 0;
        for (; t.name[k] && k < sizeof lower - 1; k++)
            lower[k] = (char)(t.name[k] >= 'A' && t.name[k] <= 'Z' ? t.name[k] - 'A' + 'a' : t.name[k]);
        lower[k] = 0;
        cr_assert(ggml_qtype_find_name(lower, &v) && v.id == t.id, "%s", lower);
    }
    cr_assert(ggml_qtype_find_name("q4_K", &t) && t.id == GGML_Q4_K && t.block == 256 && t.bytes == 144);
    cr_assert_float_eq(t.bpw, 4.5, 0);
    cr_assert(ggml_qtype_find(GGML_IQ2_XXS, &t) && strcmp(t.name, "IQ2_XXS") == 0);
    cr_assert_float_eq(t.bpw, 2.0625, 0);
    cr_assert(ggml_qtype_find(GGML_MXFP4, &t) && t.block == 32 && t.bytes == 17);
    cr_assert_not(ggml_qtype_find(GGML_F16, &t));
    cr_assert_not(ggml_qtype_find(GGML_Q8_K, &t));
    cr_assert_not(ggml_qtype_find(99, &t));
    cr_assert_not(ggml_qtype_find_name("Q4_K_M", &t));
    cr_assert_not(ggml_qtype_find_name("BF16", &t));
    cr_assert_not(ggml_qtype_at(N_TYPES, &t));
}

/* Every type: quant/ggml and ggml (and gguf-py) on the same blocks, every float
 * the same bits. */
Test(ggml, bit_identical, .timeout = TH_TIMEOUT(300))
{
    struct ref ref;
    ref_open(&ref);
    struct ggml_qtype t;
    for (size_t i = 0; ggml_qtype_at(i, &t); i++) {
        const struct layout *r = layout_of(ref.l, t.id);
        size_t nb;
        uint8_t *b = make_blocks(r, &nb);
        size_t n = nb * t.block;
        float *want = ref_dequant(ref.dir, ref.exe, t.id, b, nb * t.bytes, n), *got = malloc(n * sizeof *got);
        cr_assert(got);
        t.dequant(b, got, n);
        size_t bad = 0, first = 0, nan = 0, inf = 0;
        for (size_t k = 0; k < n; k++) {
            const bool same = bits(got[k]) == bits(want[k]) || (isnan(got[k]) && isnan(want[k]));
            nan += isnan(want[k]) != 0;
            inf += isinf(want[k]) != 0;
            if (!same && bad++ == 0)
                first = k;
        }
        cr_assert_eq(bad, 0, "%s: %zu of %zu floats differ from ggml's; first at %zu (block %zu): 0x%08x, ggml 0x%08x",
                     t.name, bad, n, first, first / t.block, bits(got[first]), bits(want[first]));
        cr_log_info("%s: %zu blocks, %zu floats bit-identical to ggml (%zu NaN, %zu inf)", t.name, nb, n, nan, inf);
        gguf_py(ref.dir, t.name, b, nb * t.bytes, got, n);
        free(b), free(want), free(got);
    }
    ref_close(&ref);
}

/* Q4_1, Q5_0 and Q5_1 as MLX affine group 32 (ggml_to_affine): dequantized
 * as MLX does (quant_dequant_row, f16 scales and biases), every float has
 * the bits of ggml's own dequantization of the blocks, but for Q5_0's zeros
 * (−0 in ggml where d < 0, +0 in MLX); the other types have no such form. */
Test(ggml, affine_forms_exact, .timeout = TH_TIMEOUT(120))
{
    struct ref ref;
    ref_open(&ref);
    struct ggml_qtype t;
    int forms = 0;
    for (size_t i = 0; ggml_qtype_at(i, &t); i++) {
        const int nbits = ggml_affine_bits(t.id);
        cr_assert_eq(nbits != 0, t.id == GGML_Q4_1 || t.id == GGML_Q5_0 || t.id == GGML_Q5_1, "%s", t.name);
        if (!nbits)
            continue;
        size_t nb;
        uint8_t *b = make_blocks(layout_of(ref.l, t.id), &nb);
        for (size_t k = 0; k < nb; k++) /* finite scales (a NaN block is refused when the file is read) */
            for (int f = 0; f < (t.id == GGML_Q5_0 ? 1 : 2); f++)
                if ((rd_u16le(b + k * t.bytes + 2 * f) & 0x7c00) == 0x7c00)
                    wr_u16le(b + k * t.bytes + 2 * f, 0x3c00);
        for (size_t k = 0; k < nb && t.id == GGML_Q5_0; k++) /* −16·d within f16: |d| <= 2048 */
            if (fabsf(f16_to_f32(rd_u16le(b + k * t.bytes))) > 2048.0f)
                wr_u16le(b + k * t.bytes, 0x6800);
        const size_t n = nb * 32;
        uint32_t *words = malloc(n * (size_t)nbits / 8);
        uint8_t *sc = malloc(2 * nb), *bi = malloc(2 * nb);
        float *got = malloc(n * sizeof *got);
        cr_assert(words && sc && bi && got);
        cr_assert_eq(ggml_to_affine(t.id, b, n, words, sc, bi), -1, "%s: a bias that f16 holds", t.name);
        quant_dequant_row((const uint8_t *)words, sc, bi, DT_F16, n, 32, nbits, got);
        float *want = ref_dequant(ref.dir, ref.exe, t.id, b, nb * t.bytes, n);
        size_t zeros = 0; /* Q5_0 at q = 16 with d < 0: ggml's 0·d is −0, MLX's 16d − 16d is +0 */
        for (size_t k = 0; k < n; k++) {
            cr_assert(bits(got[k]) == bits(want[k]) || (got[k] == 0.0f && want[k] == 0.0f),
                      "%s: weight %zu: MLX affine %g (0x%08x), ggml %g (0x%08x)", t.name, k, (double)got[k],
                      bits(got[k]), (double)want[k], bits(want[k]));
            zeros += bits(got[k]) != bits(want[k]);
        }
        cr_assert(t.id == GGML_Q5_0 || zeros == 0, "%s: %zu zeros of another sign", t.name, zeros);
        if (t.id == GGML_Q5_0) { /* a d whose −16·d overflows f16 is named, not rounded */
            wr_u16le(b + 3 * t.bytes, 0x7800); /* 32768 */
            cr_assert_eq(ggml_to_affine(t.id, b, n, words, sc, bi), 3);
        }
        cr_log_info("%s: %zu blocks as MLX affine %d-bit group 32: ggml's values (%zu zeros of the other sign)", t.name,
                    nb, nbits, zeros);
        free(b), free(words), free(sc), free(bi), free(got), free(want);
        forms++;
    }
    cr_assert_eq(forms, 3);
    ref_close(&ref);
}

/* The grid indices (and the 7-bit sign indices where the type has them) of
 * one block, read from ggml-common.h's layouts; -1 ends each list. */
static void iq_indices(uint32_t id, const uint8_t *b, int *idx, int *sg)
{
    int ni = 0, ns = 0;
    for (int ib = 0; ib < 8; ib++)
        for (int l = 0; l < 4; l++) {
            if (id == GGML_IQ2_XXS) {
                idx[ni++] = b[2 + 8 * ib + l];
                sg[ns++] = (int)((rd_u32le(b + 2 + 8 * ib + 4) >> 7 * l) & 127);
            } else if (id == GGML_IQ2_XS) {
                const uint16_t v = rd_u16le(b + 2 + 2 * (4 * ib + l));
                idx[ni++] = v & 511;
                sg[ns++] = v >> 9;
            } else if (id == GGML_IQ2_S) {
                idx[ni++] = b[2 + 4 * ib + l] | (((b[66 + ib] >> 2 * l) & 3) << 8);
            } else if (id == GGML_IQ3_XXS) {
                idx[ni++] = b[2 + 8 * ib + 2 * l];
                idx[ni++] = b[2 + 8 * ib + 2 * l + 1];
                sg[ns++] = (int)((rd_u32le(b + 66 + 4 * ib) >> 7 * l) & 127);
            } else if (id == GGML_IQ3_S) {
                idx[ni++] = b[2 + 8 * ib + 2 * l] | (((b[66 + ib] >> 2 * l) & 1) << 8);
                idx[ni++] = b[2 + 8 * ib + 2 * l + 1] | (((b[66 + ib] >> (2 * l + 1)) & 1) << 8);
            } else if (id == GGML_IQ1_S) {
                idx[ni++] = b[2 + 4 * ib + l] | (((rd_u16le(b + 34 + 2 * ib) >> 3 * l) & 7) << 8);
            } else if (id == GGML_IQ1_M) {
                const uint8_t h = b[32 + 2 * ib + l / 2];
                idx[ni++] = b[4 * ib + l] | (((h >> 4 * (l % 2)) & 7) << 8);
            }
        }
    idx[ni] = -1;
    sg[ns] = -1;
}

/* The random blocks bit_identical compares reach every grid row and every
 * sign pattern of each IQ type. */
Test(ggml, coverage)
{
    static const struct {
        uint32_t id;
        int grid, signs;
    } iq[] = {{GGML_IQ2_XXS, 256, 128}, {GGML_IQ2_XS, 512, 128}, {GGML_IQ2_S, 1024, 0}, {GGML_IQ3_XXS, 256, 128},
              {GGML_IQ3_S, 512, 0},     {GGML_IQ1_S, 2048, 0},   {GGML_IQ1_M, 2048, 0}};
    for (size_t i = 0; i < sizeof iq / sizeof iq[0]; i++) {
        struct ggml_qtype t;
        cr_assert(ggml_qtype_find(iq[i].id, &t));
        struct layout l = {(int)t.id, t.block, t.bytes, t.id == GGML_IQ1_M ? -1 : 0, -1};
        size_t nb;
        uint8_t *b = make_blocks(&l, &nb);
        char seen[2048] = {0}, seen_s[128] = {0};
        int idx[80], sg[80];
        for (size_t k = 0; k < nb; k++) {
            iq_indices(t.id, b + k * t.bytes, idx, sg);
            for (int j = 0; idx[j] >= 0; j++)
                seen[idx[j]] = 1;
            for (int j = 0; sg[j] >= 0; j++)
                seen_s[sg[j]] = 1;
        }
        int g = 0, s = 0;
        for (int j = 0; j < 2048; j++)
            g += seen[j];
        for (int j = 0; j < 128; j++)
            s += seen_s[j];
        cr_assert_eq(g, iq[i].grid, "%s: %d of %d grid rows reached", t.name, g, iq[i].grid);
        cr_assert_eq(s, iq[i].signs, "%s: %d of %d sign patterns reached", t.name, s, iq[i].signs);
        free(b);
    }
}

/* bad_scale finds the first block whose scale (d, then dmin) is infinite or
 * NaN, and ggml's own output of that block is not finite. */
Test(ggml, bad_scale, .timeout = TH_TIMEOUT(120))
{
    struct ref ref;
    ref_open(&ref);
    struct ggml_qtype t;
    for (size_t i = 0; ggml_qtype_at(i, &t); i++) {
        const struct layout *r = layout_of(ref.l, t.id);
        const size_t nb = 8;
        uint8_t *b = malloc(nb * t.bytes);
        cr_assert(b);
        uint64_t s = t.id;
        for (size_t k = 0; k < nb * t.bytes; k++)
            b[k] = 0x77;
        for (size_t k = 0; k < nb; k++)
            set_scales(r, b + k * t.bytes, t.id == GGML_MXFP4 ? 127 : finite_f16(&s), finite_f16(&s));
        cr_assert_eq(t.bad_scale(b, nb), -1, "%s", t.name);
        const uint16_t bad[] = {0x7c00, 0xfc00, 0x7e00, 0x7c01};
        for (int field = 0; field < (r->dmin >= 0 ? 2 : 1); field++)
            for (size_t v = 0; v < (t.id == GGML_MXFP4 ? 1 : sizeof bad / sizeof bad[0]); v++) {
                uint8_t *c = malloc(nb * t.bytes);
                cr_assert(c);
                memcpy(c, b, nb * t.bytes);
                set_scale(r, c + 5 * t.bytes, field ? r->dmin : r->d, t.id == GGML_MXFP4 ? 0xff : bad[v]);
                cr_assert_eq(t.bad_scale(c, nb), 5, "%s field %d value 0x%04x", t.name, field, bad[v]);
                cr_assert_eq(t.bad_scale(c, 5), -1, "%s", t.name);
                float *y = ref_dequant(ref.dir, ref.exe, t.id, c, nb * t.bytes, nb * t.block);
                size_t nonfinite = 0;
                for (size_t k = 5 * t.block; k < 6 * t.block; k++)
                    nonfinite += !isfinite(y[k]);
                cr_assert_gt(nonfinite, 0, "%s: ggml's block 5 is finite under the bad scale", t.name);
                set_scale(r, c + 2 * t.bytes, r->d, t.id == GGML_MXFP4 ? 0xff : 0x7c00);
                cr_assert_eq(t.bad_scale(c, nb), 2, "%s", t.name);
                free(y), free(c);
            }
        free(b);
    }
    ref_close(&ref);
}

/* quant/ggml_grids.c is what tests/ggml/extract_grids.py makes of build-ref's ggml-common.h. */
Test(ggml, grids_generated)
{
    need_ref();
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s/tests/ggml/extract_grids.py %s | cmp -s - %s/quant/ggml_grids.c",
             GP_SOURCE_DIR, REF, GP_SOURCE_DIR);
    cr_assert_eq(system(cmd), 0, "quant/ggml_grids.c differs from the generator's output: %s", cmd);
}
