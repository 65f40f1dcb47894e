/* test_fixture.c - the fixture generator (fixtures/fixture.h): determinism,
 * one model across layouts, quantization of the bf16 values, PTQ vs QAT K/V,
 * the prompt, full-size header-only shapes (MODEL.md §2.4),
 * --like, usage errors, and the GGUF llama-quantize presets (deterministic,
 * each tensor in the type llama.cpp's rules give it, valid block scales).
 *
 * Tiny dims (fixtures/fixture.c): vocab 512, hidden 128, sliding window 8;
 * e2b L 10 (F0 5), e4b L 12 (F0 6), 26b-a4b L 6 with E 4, M 64, I 128. */
#include <criterion/criterion.h>

#include <json-c/json.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ingest/check.h"
#include "core/checkpoint.h"
#include "model/config.h"
#include "core/dtype.h"
#include "core/err.h"
#include "core/fileio.h"
#include "core/gguf.h"
#include "quant/quant.h"
#include "core/safetensors.h"
#include "fixtures/fixture.h"
#include "tests/helpers.h"

#define PFX_HF "model.language_model."
#define PFX_MLX "language_model.model."

static struct fixture_opts fx(const char *variant, enum fixture_layout layout)
{
    return (struct fixture_opts){.variant = variant, .layout = layout, .group_size = 64, .shards = 1};
}

static uint8_t *read_file(const char *dir, const char *name, size_t *len)
{
    char *path = fio_join(dir, name);
    uint8_t *b = th_read(path, len);
    cr_assert(b, "cannot read %s", path);
    free(path);
    return b;
}

static void assert_same_file(const char *a, const char *b, const char *name)
{
    size_t la, lb;
    uint8_t *x = read_file(a, name, &la), *y = read_file(b, name, &lb);
    cr_assert_eq(la, lb, "%s: %zu vs %zu bytes", name, la, lb);
    cr_assert(memcmp(x, y, la) == 0, "%s differs between two runs with the same options", name);
    free(x);
    free(y);
}

static void open_ckpt(struct ckpt *ck, const char *dir, unsigned flags)
{
    struct err e = {0};
    cr_assert_eq(ckpt_open(ck, dir, flags, &e), ERR_OK, "%s: %s", dir, e.msg);
}

/* The tensor and its bytes (mapped checkpoint). */
static const struct st_tensor *tensor(const struct ckpt *ck, const char *name, const uint8_t **data)
{
    const struct ckpt_tensor *ct = ckpt_find(ck, name);
    cr_assert(ct, "no tensor %s", name);
    if (data) {
        struct err e = {0};
        cr_assert_eq(st_data(&ck->shards[ct->shard], ct->t, data, &e), ERR_OK, "%s", e.msg);
    }
    return ct->t;
}

static void assert_shape(const struct st_tensor *t, int rank, uint64_t a, uint64_t b, uint64_t c)
{
    uint64_t want[3] = {a, b, c};
    cr_assert_eq(t->rank, rank, "%s: rank %d, expected %d", t->name, t->rank, rank);
    for (int k = 0; k < rank; k++)
        cr_assert_eq(t->shape[k], want[k], "%s: dim %d is %llu, expected %llu", t->name, k,
                     (unsigned long long)t->shape[k], (unsigned long long)want[k]);
}

static struct json_object *load_json(const char *dir, const char *name)
{
    char *path = fio_join(dir, name);
    struct json_object *o = json_object_from_file(path);
    cr_assert(o, "cannot parse %s", path);
    free(path);
    return o;
}

static struct json_object *jget(struct json_object *o, const char *key)
{
    struct json_object *v = NULL;
    cr_assert(json_object_object_get_ex(o, key, &v), "no key %s", key);
    return v;
}

static bool jhas(struct json_object *o, const char *key)
{
    return json_object_object_get_ex(o, key, NULL);
}

static void load_cfg(struct gp_config *c, const char *dir)
{
    struct err e = {0};
    char *path = fio_join(dir, "config.json");
    cr_assert_eq(cfg_load(c, path, &e), ERR_OK, "%s", e.msg);
    free(path);
}

/* ------------------------------------------------- GGUF llama-quantize presets */

static const enum fixture_format presets[] = {FXF_GGUF_Q4_K_M, FXF_GGUF_Q5_K_M, FXF_GGUF_Q6_K,
                                              FXF_GGUF_IQ4_XS, FXF_GGUF_IQ2_XXS, FXF_GGUF_MXFP4};

static void open_gguf(struct gguf_file *g, const char *dir)
{
    struct err e = {0};
    char *path = fio_join(dir, "model.gguf");
    cr_assert_eq(gguf_open(g, path, &e), ERR_OK, "%s: %s", path, e.msg);
    free(path);
}

Test(fixture, gguf_presets_deterministic)
{
    char *tmp = th_mkdtemp();
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++) {
        const char *v = presets[i] == FXF_GGUF_MXFP4 ? "26b-a4b" : "e2b";
        struct fixture_opts o = fx(v, FX_HF);
        o.format = presets[i];
        char sa[64], sb[64], sc[64];
        snprintf(sa, sizeof sa, "a%zu", i);
        snprintf(sb, sizeof sb, "b%zu", i);
        snprintf(sc, sizeof sc, "c%zu", i);
        char *a = th_fixture(tmp, sa, o), *b = th_fixture(tmp, sb, o);
        o.seed = 7;
        char *c = th_fixture(tmp, sc, o);
        assert_same_file(a, b, "model.gguf");
        assert_same_file(a, b, "tokens.json");
        struct gguf_file g; /* core/gguf.c (check, inspect) parses it: sizes and offsets of every type */
        open_gguf(&g, a);
        gguf_close(&g);
        size_t la, lc;
        uint8_t *x = read_file(a, "model.gguf", &la), *y = read_file(c, "model.gguf", &lc);
        cr_assert(la == lc && memcmp(x, y, la) != 0, "%s: seed 7 gives the same file", fixture_format_name(presets[i]));
        free(x);
        free(y);
        free(a);
        free(b);
        free(c);
    }
    th_rmtree(tmp);
}

/* The type of blk.<layer>.<kind>.weight (or a global tensor with layer < 0). */
static uint32_t type_of(const struct gguf_file *g, int layer, const char *kind)
{
    char name[128];
    if (layer < 0)
        snprintf(name, sizeof name, "%s", kind);
    else
        snprintf(name, sizeof name, "blk.%d.%s.weight", layer, kind);
    const struct gguf_tensor *t = gguf_find_tensor(g, name);
    cr_assert(t, "no tensor %s", name);
    return t->type;
}

/* llama-quantize's Q4_K_M for the tiny E2B (10 layers, 4 heads / 1 KV head, hidden 128), worked by
 * hand from src/llama-quant.cpp: use_more_bits(i, 10) holds for i = 0, 3, 6, 8, 9; rows of 128 or 64
 * are not whole 256-blocks, so Q4_K falls back to Q5_0 and Q6_K to Q8_0; the tied token_embd (and
 * per_layer_token_embd) take the output rule: Q8_0 for a row that is not whole 256-blocks. */
Test(fixture, gguf_q4_k_m_types_e2b)
{
    char *tmp = th_mkdtemp();
    struct fixture_opts o = fx("e2b", FX_HF);
    o.format = FXF_GGUF_Q4_K_M;
    char *dir = th_fixture(tmp, "q", o);
    struct gguf_file g;
    open_gguf(&g, dir);
    cr_assert_eq(type_of(&g, -1, "token_embd.weight"), GGML_Q8_0);
    cr_assert_eq(type_of(&g, -1, "per_layer_token_embd.weight"), GGML_Q8_0);
    cr_assert_eq(type_of(&g, -1, "per_layer_model_proj.weight"), GGML_BF16);
    cr_assert_eq(type_of(&g, -1, "output_norm.weight"), GGML_F32);
    for (int l = 0; l < 10; l++) {
        bool more = l == 0 || l == 3 || l == 6 || l == 8 || l == 9, full = l == 4 || l == 9;
        cr_assert_eq(type_of(&g, l, "attn_q"), GGML_Q5_0, "layer %d", l);
        cr_assert_eq(type_of(&g, l, "attn_v"), more ? GGML_Q8_0 : GGML_Q5_0, "layer %d", l);
        cr_assert_eq(type_of(&g, l, "attn_output"), full ? GGML_Q4_K : GGML_Q5_0, "layer %d (rows 256 when full)", l);
        cr_assert_eq(type_of(&g, l, "ffn_down"), more ? GGML_Q6_K : GGML_Q4_K, "layer %d (rows 256)", l);
        cr_assert_eq(type_of(&g, l, "proj"), GGML_Q5_0, "layer %d", l);
        cr_assert_eq(type_of(&g, l, "attn_norm"), GGML_F32, "layer %d", l);
    }
    /* valid blocks: every Q4_K block's f16 d and dmin finite and positive */
    for (int l = 0; l < 10; l++) {
        char name[64];
        snprintf(name, sizeof name, "blk.%d.ffn_down.weight", l);
        const struct gguf_tensor *t = gguf_find_tensor(&g, name);
        if (t->type != GGML_Q4_K)
            continue;
        cr_assert_eq(t->nbytes, t->ne[0] / 256 * t->ne[1] * 144, "%s bytes", name);
        for (uint64_t k = 0; k < t->nbytes / 144; k++) {
            float d = f16_to_f32((uint16_t)(t->data[k * 144] | t->data[k * 144 + 1] << 8));
            float m = f16_to_f32((uint16_t)(t->data[k * 144 + 2] | t->data[k * 144 + 3] << 8));
            cr_assert(isfinite(d) && d > 0 && isfinite(m) && m > 0, "%s block %llu: d %g dmin %g", name,
                      (unsigned long long)k, (double)d, (double)m);
        }
    }
    gguf_close(&g);
    free(dir);
    th_rmtree(tmp);
}

/* MXFP4_MOE: the 3-D experts MXFP4 (17-byte blocks, e8m0 within [1, 254]), every other matrix Q8_0. */
Test(fixture, gguf_mxfp4_experts_26b)
{
    char *tmp = th_mkdtemp();
    struct fixture_opts o = fx("26b-a4b", FX_HF);
    o.format = FXF_GGUF_MXFP4;
    char *dir = th_fixture(tmp, "m", o);
    struct gguf_file g;
    open_gguf(&g, dir);
    cr_assert_eq(type_of(&g, -1, "token_embd.weight"), GGML_Q8_0);
    for (int l = 0; l < 6; l++) {
        cr_assert_eq(type_of(&g, l, "attn_q"), GGML_Q8_0, "layer %d", l);
        cr_assert_eq(type_of(&g, l, "ffn_down"), GGML_Q8_0, "layer %d", l);
        cr_assert_eq(type_of(&g, l, "ffn_gate_inp"), GGML_F32, "layer %d: the router stays F32", l);
        static const char *const exps[] = {"ffn_gate_up_exps", "ffn_down_exps"};
        for (int k = 0; k < 2; k++) {
            char name[64];
            snprintf(name, sizeof name, "blk.%d.%s.weight", l, exps[k]);
            const struct gguf_tensor *t = gguf_find_tensor(&g, name);
            cr_assert(t && t->type == 39, "%s: type %u, expected MXFP4 (39)", name, t ? t->type : 0);
            cr_assert_eq(t->nbytes, t->ne[0] * t->ne[1] * t->ne[2] / 32 * 17, "%s bytes", name);
            for (uint64_t b = 0; b < t->nbytes / 17; b++)
                cr_assert(t->data[b * 17] >= 1 && t->data[b * 17] <= 254, "%s block %llu: e8m0 %u", name,
                          (unsigned long long)b, t->data[b * 17]);
        }
    }
    gguf_close(&g);
    free(dir);
    th_rmtree(tmp);
}

/* IQ2_XXS on the tiny E4B (4 heads / 2 KV heads, no experts): llama-quantize gives attn_v Q2_K, whose rows
 * of 64 fall back to Q4_0, the seeded weights by ggml's Q4_0 quantizer: the same blocks as the gguf-q4_0
 * fixture's attn_v (whose golden reference.py checks). */
Test(fixture, gguf_iq2_xxs_q4_0_fallback_e4b)
{
    char *tmp = th_mkdtemp();
    struct fixture_opts o = fx("e4b", FX_HF);
    o.format = FXF_GGUF_IQ2_XXS;
    char *a = th_fixture(tmp, "iq2", o);
    o.format = FXF_GGUF_Q4_0;
    char *b = th_fixture(tmp, "q4", o);
    struct gguf_file ga, gb;
    open_gguf(&ga, a);
    open_gguf(&gb, b);
    for (int l = 0; l < 12; l++) {
        char name[64];
        snprintf(name, sizeof name, "blk.%d.attn_v.weight", l);
        const struct gguf_tensor *x = gguf_find_tensor(&ga, name), *y = gguf_find_tensor(&gb, name);
        cr_assert(x && y, "%s missing", name);
        cr_assert_eq(x->type, GGML_Q4_0, "%s: type %u", name, x->type);
        cr_assert_eq(x->nbytes, x->ne[0] / 32 * x->ne[1] * 18, "%s bytes", name);
        cr_assert(x->nbytes == y->nbytes && !memcmp(x->data, y->data, x->nbytes), "%s: not the Q4_0 blocks", name);
    }
    gguf_close(&ga);
    gguf_close(&gb);
    free(a);
    free(b);
    th_rmtree(tmp);
}

/* ------------------------------------------------------------ determinism */

Test(fixture, deterministic_e2b_hf)
{
    char *tmp = th_mkdtemp();
    struct fixture_opts o = fx("e2b", FX_HF);
    char *a = th_fixture(tmp, "a", o), *b = th_fixture(tmp, "b", o);
    static const char *const files[] = {"config.json", "model.safetensors", "tokens.json"};
    for (int i = 0; i < 3; i++)
        assert_same_file(a, b, files[i]);
    free(a);
    free(b);
    th_rmtree(tmp);
}

Test(fixture, deterministic_26b_mlx_q4_sharded)
{
    char *tmp = th_mkdtemp();
    struct fixture_opts o = fx("26b-a4b", FX_MLX);
    o.quant_bits = 4;
    o.shards = 2;
    char *a = th_fixture(tmp, "a", o), *b = th_fixture(tmp, "b", o);
    static const char *const files[] = {"config.json", "model-00001-of-00002.safetensors",
                                        "model-00002-of-00002.safetensors", "model.safetensors.index.json",
                                        "tokens.json"};
    for (int i = 0; i < 5; i++)
        assert_same_file(a, b, files[i]);
    struct stat st;
    char *single = fio_join(a, "model.safetensors");
    cr_assert_neq(stat(single, &st), 0, "a sharded fixture also wrote model.safetensors");
    free(single);
    free(a);
    free(b);
    th_rmtree(tmp);
}

Test(fixture, seed_changes_weights)
{
    char *tmp = th_mkdtemp();
    struct fixture_opts o = fx("e2b", FX_HF);
    char *a = th_fixture(tmp, "a", o);
    o.seed = 1;
    char *b = th_fixture(tmp, "b", o);
    assert_same_file(a, b, "config.json");
    struct ckpt ca, cb;
    open_ckpt(&ca, a, 0);
    open_ckpt(&cb, b, 0);
    cr_assert_eq(ca.n_tensors, cb.n_tensors);
    static const char *const names[] = {PFX_HF "embed_tokens.weight", PFX_HF "layers.1.self_attn.q_proj.weight",
                                        PFX_HF "layers.0.input_layernorm.weight"};
    for (int i = 0; i < 3; i++) {
        const uint8_t *x, *y;
        const struct st_tensor *tx = tensor(&ca, names[i], &x), *ty = tensor(&cb, names[i], &y);
        cr_assert_eq(tx->end - tx->begin, ty->end - ty->begin);
        cr_assert(memcmp(x, y, (size_t)(tx->end - tx->begin)) != 0, "%s: same bytes for seeds 0 and 1", names[i]);
    }
    size_t la, lb;
    uint8_t *ta = read_file(a, "tokens.json", &la), *tb = read_file(b, "tokens.json", &lb);
    cr_assert(la != lb || memcmp(ta, tb, la) != 0, "the prompt does not depend on the seed");
    free(ta);
    free(tb);
    ckpt_close(&ca);
    ckpt_close(&cb);
    free(a);
    free(b);
    th_rmtree(tmp);
}

/* ---------------------------------------------- one model across layouts */

static void assert_same_bytes(const struct ckpt *a, const char *na, const struct ckpt *b, const char *nb)
{
    const uint8_t *x, *y;
    const struct st_tensor *tx = tensor(a, na, &x), *ty = tensor(b, nb, &y);
    cr_assert_eq(tx->dtype, DT_BF16, "%s", na);
    cr_assert_eq(ty->dtype, DT_BF16, "%s", nb);
    cr_assert_eq(tx->rank, ty->rank, "%s", na);
    cr_assert(memcmp(tx->shape, ty->shape, (size_t)tx->rank * sizeof tx->shape[0]) == 0, "%s: shapes differ", na);
    cr_assert_eq(tx->end - tx->begin, ty->end - ty->begin, "%s", na);
    cr_assert(memcmp(x, y, (size_t)(tx->end - tx->begin)) == 0, "%s and %s hold different values", na, nb);
}

Test(fixture, hf_and_mlx_hold_the_same_model)
{
    char *tmp = th_mkdtemp();
    struct fixture_opts o = fx("e2b", FX_HF);
    o.seed = 7;
    char *hf = th_fixture(tmp, "hf", o);
    o.layout = FX_MLX;
    char *mlx = th_fixture(tmp, "mlx", o);
    o.layout = FX_TEXT;
    char *text = th_fixture(tmp, "text", o);
    struct ckpt a, b, c;
    open_ckpt(&a, hf, 0);
    open_ckpt(&b, mlx, 0);
    open_ckpt(&c, text, 0);
    assert_same_bytes(&a, PFX_HF "embed_tokens.weight", &b, PFX_MLX "embed_tokens.weight");
    assert_same_bytes(&a, PFX_HF "layers.1.self_attn.q_proj.weight", &b, PFX_MLX "layers.1.self_attn.q_proj.weight");
    assert_same_bytes(&a, PFX_HF "layers.1.self_attn.q_proj.weight", &c, "model.layers.1.self_attn.q_proj.weight");
    /* every text tensor, not just two */
    cr_assert_eq(a.n_tensors, b.n_tensors);
    size_t n = 0;
    for (size_t i = 0; i < a.n_tensors; i++) {
        const char *name = a.tensors[i].name;
        cr_assert(!strncmp(name, PFX_HF, strlen(PFX_HF)), "%s", name);
        char other[512];
        snprintf(other, sizeof other, PFX_MLX "%s", name + strlen(PFX_HF));
        assert_same_bytes(&a, name, &b, other);
        n++;
    }
    cr_assert_eq(n, a.n_tensors);
    /* and the values really are random weights, not a constant */
    const uint8_t *x;
    const struct st_tensor *t = tensor(&a, PFX_HF "embed_tokens.weight", &x);
    size_t distinct = 0;
    for (size_t i = 2; i < (size_t)(t->end - t->begin); i += 2)
        distinct += memcmp(x + i, x, 2) != 0;
    cr_assert_gt(distinct, (size_t)(t->end - t->begin) / 4);
    ckpt_close(&a);
    ckpt_close(&b);
    ckpt_close(&c);
    free(hf);
    free(mlx);
    free(text);
    th_rmtree(tmp);
}

Test(fixture, mlx_split_experts_are_halves_of_hf_gate_up)
{
    /* 26b-a4b tiny: E 4, M 64, H 128. */
    const uint64_t E = 4, M = 64, H = 128;
    char *tmp = th_mkdtemp();
    struct fixture_opts o = fx("26b-a4b", FX_HF);
    o.seed = 5;
    char *hf = th_fixture(tmp, "hf", o);
    o.layout = FX_MLX;
    char *mlx = th_fixture(tmp, "mlx", o);
    struct ckpt a, b;
    open_ckpt(&a, hf, 0);
    open_ckpt(&b, mlx, 0);
    cr_assert_null(ckpt_find(&b, PFX_MLX "layers.0.experts.gate_up_proj"));
    cr_assert_null(ckpt_find(&a, PFX_HF "layers.0.experts.switch_glu.gate_proj.weight"));
    for (int l = 0; l < 6; l++) {
        char n[256];
        const uint8_t *fused, *gate, *up, *hd, *md;
        snprintf(n, sizeof n, PFX_HF "layers.%d.experts.gate_up_proj", l);
        assert_shape(tensor(&a, n, &fused), 3, E, 2 * M, H);
        snprintf(n, sizeof n, PFX_MLX "layers.%d.experts.switch_glu.gate_proj.weight", l);
        assert_shape(tensor(&b, n, &gate), 3, E, M, H);
        snprintf(n, sizeof n, PFX_MLX "layers.%d.experts.switch_glu.up_proj.weight", l);
        assert_shape(tensor(&b, n, &up), 3, E, M, H);
        size_t half = (size_t)(M * H * 2); /* bytes of M bf16 rows */
        for (uint64_t e = 0; e < E; e++) {
            cr_assert(memcmp(gate + e * half, fused + e * 2 * half, half) == 0, "layer %d expert %llu: gate", l,
                      (unsigned long long)e);
            cr_assert(memcmp(up + e * half, fused + e * 2 * half + half, half) == 0, "layer %d expert %llu: up", l,
                      (unsigned long long)e);
            cr_assert(memcmp(gate + e * half, up + e * half, half) != 0);
        }
        char m[256];
        snprintf(n, sizeof n, PFX_HF "layers.%d.experts.down_proj", l);
        snprintf(m, sizeof m, PFX_MLX "layers.%d.experts.switch_glu.down_proj.weight", l);
        assert_shape(tensor(&a, n, &hd), 3, E, H, M);
        assert_shape(tensor(&b, m, &md), 3, E, H, M);
        assert_same_bytes(&a, n, &b, m);
    }
    ckpt_close(&a);
    ckpt_close(&b);
    free(hf);
    free(mlx);
    th_rmtree(tmp);
}

/* ---------------------------------------------------------- quantization */

/* How far a dequantized element may be from its bf16 source, in units of its
 * group's stored |scale| (MLX CPU affine algorithm, INPUTS.md §2.2, on bf16
 * inputs). The bias is the group's largest-magnitude element, exact in bf16.
 * In f32 an element is off by at most 0.5 code, except the clamped opposite
 * extreme, off by less than 1 code (n/(2|q0|) with |q0| > n/2), and exactly 1
 * only when |q0| = (n+1)/2 is a power of two, where the scale edge/q0 is
 * exact in bf16. Storing the scale in bf16 adds up to q * 2^-9 |scale| for
 * code q <= n. For 4 bits that stays within 1 |scale| (q0 = 8: exact scale;
 * q0 >= 9: 15/17 + 15 * 2^-9 < 0.92); for 8 bits it does not (q0 = 129:
 * 255/258 + 255 * 2^-9 ~ 1.49). */
static double dequant_bound(int bits)
{
    return bits <= 4 ? 1.0 : 1.0 + (double)((1 << bits) - 1) * 0x1p-9 / (1.0 - 0x1p-9);
}

/* Dequantizes module `mod` of the quantized checkpoint and compares with the
 * bf16 checkpoint: every element within dequant_bound(bits) * |scale| of its
 * group (|scale| itself for 4 bits). Returns the largest error relative to
 * the scale. */
static double check_dequant(const struct ckpt *q, const struct ckpt *f, const char *mod, int bits, int gs)
{
    char n[256];
    const uint8_t *w, *s, *b, *ref;
    snprintf(n, sizeof n, "%s.weight", mod);
    const struct st_tensor *tw = tensor(q, n, &w), *tf = tensor(f, n, &ref);
    snprintf(n, sizeof n, "%s.scales", mod);
    const struct st_tensor *ts = tensor(q, n, &s);
    snprintf(n, sizeof n, "%s.biases", mod);
    const struct st_tensor *tb = tensor(q, n, &b);
    cr_assert_eq(tw->dtype, DT_U32, "%s", mod);
    cr_assert_eq(ts->dtype, DT_BF16, "%s", mod);
    cr_assert_eq(tb->dtype, DT_BF16, "%s", mod);
    cr_assert_eq(tf->dtype, DT_BF16, "%s", mod);
    int r = tf->rank;
    uint64_t k = tf->shape[r - 1], rows = 1;
    for (int i = 0; i + 1 < r; i++) {
        rows *= tf->shape[i];
        cr_assert_eq(tw->shape[i], tf->shape[i]);
        cr_assert_eq(ts->shape[i], tf->shape[i]);
    }
    cr_assert_eq(tw->rank, r, "%s", mod);
    cr_assert_eq(tw->shape[r - 1], k * (uint64_t)bits / 32, "%s: packed width", mod);
    cr_assert_eq(ts->shape[r - 1], k / (uint64_t)gs, "%s: groups", mod);
    cr_assert_eq(tb->shape[r - 1], k / (uint64_t)gs, "%s: groups", mod);
    size_t ng = (size_t)(k / (uint64_t)gs);
    float *out = malloc((size_t)k * sizeof *out), *want = malloc((size_t)k * sizeof *want),
          *sc = malloc(ng * sizeof *sc);
    cr_assert(out && want && sc);
    double worst = 0, bound = dequant_bound(bits);
    for (uint64_t row = 0; row < rows; row++) {
        const uint8_t *srow = s + row * ng * 2, *brow = b + row * ng * 2;
        dequant_affine_row(w + row * (k * (uint64_t)bits / 8), srow, brow, DT_BF16, (size_t)k, gs, bits, out);
        dtype_to_f32(DT_BF16, ref + row * k * 2, want, (size_t)k);
        dtype_to_f32(DT_BF16, srow, sc, ng);
        for (uint64_t j = 0; j < k; j++) {
            double scale = fabs((double)sc[j / (uint64_t)gs]);
            double err = fabs((double)out[j] - (double)want[j]);
            cr_assert(err <= bound * scale, "%s[%llu][%llu]: dequantized %g, bf16 %g, scale %g (%d bits)", mod,
                      (unsigned long long)row, (unsigned long long)j, (double)out[j], (double)want[j], scale, bits);
            if (scale > 0 && err / scale > worst)
                worst = err / scale;
        }
    }
    free(out);
    free(want);
    free(sc);
    return worst;
}

Test(fixture, quant4_dequantizes_to_the_bf16_values)
{
    char *tmp = th_mkdtemp();
    struct fixture_opts o = fx("26b-a4b", FX_MLX);
    o.seed = 11;
    char *f = th_fixture(tmp, "bf16", o);
    o.quant_bits = 4;
    char *q = th_fixture(tmp, "q4", o);
    struct ckpt cf, cq;
    open_ckpt(&cf, f, 0);
    open_ckpt(&cq, q, 0);
    static const char *const mods[] = {
        PFX_MLX "embed_tokens",
        PFX_MLX "layers.1.self_attn.q_proj",
        PFX_MLX "layers.5.self_attn.k_proj",
        PFX_MLX "layers.2.mlp.down_proj",
        PFX_MLX "layers.3.experts.switch_glu.gate_proj",
        PFX_MLX "layers.3.experts.switch_glu.up_proj",
        PFX_MLX "layers.3.experts.switch_glu.down_proj",
    };
    double worst = 0;
    for (size_t i = 0; i < sizeof mods / sizeof mods[0]; i++) {
        double w = check_dequant(&cq, &cf, mods[i], 4, 64);
        worst = w > worst ? w : worst;
    }
    cr_assert_gt(worst, 0.0, "4-bit quantization reproduced every value exactly: not quantized?");
    /* the router: 8-bit, group 64 whatever the global setting (E 4, H 128 -> [4, 32] words) */
    for (int l = 0; l < 6; l++) {
        char mod[128], n[160];
        snprintf(mod, sizeof mod, PFX_MLX "layers.%d.router.proj", l);
        snprintf(n, sizeof n, "%s.weight", mod);
        assert_shape(tensor(&cq, n, NULL), 2, 4, 128 * 8 / 32, 0);
        snprintf(n, sizeof n, "%s.scales", mod);
        assert_shape(tensor(&cq, n, NULL), 2, 4, 128 / 64, 0);
        check_dequant(&cq, &cf, mod, 8, 64);
    }
    /* norms, scalars and router scales stay bf16 */
    cr_assert_eq(tensor(&cq, PFX_MLX "layers.0.router.scale", NULL)->dtype, DT_BF16);
    cr_assert_eq(tensor(&cq, PFX_MLX "layers.0.router.per_expert_scale", NULL)->dtype, DT_BF16);
    cr_assert_eq(tensor(&cq, PFX_MLX "layers.0.layer_scalar", NULL)->dtype, DT_BF16);
    cr_assert_null(ckpt_find(&cq, PFX_MLX "layers.0.input_layernorm.scales"));
    assert_same_bytes(&cq, PFX_MLX "layers.0.input_layernorm.weight", &cf, PFX_MLX "layers.0.input_layernorm.weight");
    /* config.json: quantization block with the router overrides, duplicated as quantization_config */
    struct json_object *c = load_json(q, "config.json");
    static const char *const blocks[] = {"quantization", "quantization_config"};
    for (int k = 0; k < 2; k++) {
        struct json_object *qb = jget(c, blocks[k]);
        cr_assert_eq(json_object_get_int(jget(qb, "bits")), 4);
        cr_assert_eq(json_object_get_int(jget(qb, "group_size")), 64);
        cr_assert_not(jhas(qb, "quant_method"));
        for (int l = 0; l < 6; l++) {
            char path[128];
            snprintf(path, sizeof path, PFX_MLX "layers.%d.router.proj", l);
            struct json_object *ov = jget(qb, path);
            cr_assert_eq(json_object_get_int(jget(ov, "bits")), 8, "%s", path);
            cr_assert_eq(json_object_get_int(jget(ov, "group_size")), 64, "%s", path);
        }
    }
    json_object_put(c);
    ckpt_close(&cf);
    ckpt_close(&cq);
    free(f);
    free(q);
    th_rmtree(tmp);
}

Test(fixture, quant_e2b_text_layout_and_group_sizes)
{
    char *tmp = th_mkdtemp();
    struct fixture_opts o = fx("e2b", FX_TEXT);
    o.seed = 2;
    char *f = th_fixture(tmp, "bf16", o);
    struct ckpt cf;
    open_ckpt(&cf, f, 0);
    static const struct {
        int bits, gs;
    } cases[] = {{4, 32}, {8, 64}, {4, 128}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        o.quant_bits = cases[c].bits;
        o.group_size = cases[c].gs;
        char sub[32];
        snprintf(sub, sizeof sub, "q%zu", c);
        char *q = th_fixture(tmp, sub, o);
        struct ckpt cq;
        open_ckpt(&cq, q, 0);
        check_dequant(&cq, &cf, "model.embed_tokens", cases[c].bits, cases[c].gs);
        check_dequant(&cq, &cf, "model.embed_tokens_per_layer", cases[c].bits, cases[c].gs);
        check_dequant(&cq, &cf, "model.layers.7.mlp.down_proj", cases[c].bits, cases[c].gs);
        check_dequant(&cq, &cf, "model.layers.4.self_attn.o_proj", cases[c].bits, cases[c].gs);
        ckpt_close(&cq);
        free(q);
    }
    ckpt_close(&cf);
    free(f);
    th_rmtree(tmp);
}

/* ------------------------------------------------------------ PTQ vs QAT */

static void kv_presence(const char *variant, enum fixture_layout layout, int quant, int L, int f0)
{
    char *tmp = th_mkdtemp();
    const char *pfx = layout == FX_HF ? PFX_HF : layout == FX_MLX ? PFX_MLX : "model.";
    const char *suffix = quant ? "scales" : "weight";
    for (int qat = 0; qat < 2; qat++) {
        struct fixture_opts o = fx(variant, layout);
        o.qat = qat;
        o.quant_bits = quant;
        char *dir = th_fixture(tmp, qat ? "qat" : "ptq", o);
        struct ckpt ck;
        open_ckpt(&ck, dir, 0);
        for (int l = 0; l < L; l++) {
            bool want = !qat || l < f0;
            char n[256];
            snprintf(n, sizeof n, "%slayers.%d.self_attn.k_proj.%s", pfx, l, suffix);
            cr_assert_eq(ckpt_find(&ck, n) != NULL, want, "%s %s: %s", variant, qat ? "QAT" : "PTQ", n);
            snprintf(n, sizeof n, "%slayers.%d.self_attn.k_proj.weight", pfx, l);
            cr_assert_eq(ckpt_find(&ck, n) != NULL, want, "%s %s: %s", variant, qat ? "QAT" : "PTQ", n);
            snprintf(n, sizeof n, "%slayers.%d.self_attn.v_proj.weight", pfx, l);
            cr_assert_eq(ckpt_find(&ck, n) != NULL, want, "%s %s: %s", variant, qat ? "QAT" : "PTQ", n);
            snprintf(n, sizeof n, "%slayers.%d.self_attn.k_norm.weight", pfx, l);
            cr_assert_eq(ckpt_find(&ck, n) != NULL, want, "%s %s: %s", variant, qat ? "QAT" : "PTQ", n);
            /* q_proj, q_norm, o_proj in every layer */
            snprintf(n, sizeof n, "%slayers.%d.self_attn.q_proj.weight", pfx, l);
            cr_assert(ckpt_find(&ck, n), "%s", n);
            snprintf(n, sizeof n, "%slayers.%d.self_attn.q_norm.weight", pfx, l);
            cr_assert(ckpt_find(&ck, n), "%s", n);
            snprintf(n, sizeof n, "%slayers.%d.self_attn.o_proj.weight", pfx, l);
            cr_assert(ckpt_find(&ck, n), "%s", n);
        }
        char n[256];
        snprintf(n, sizeof n, "%slayers.%d.self_attn.q_proj.weight", pfx, L);
        cr_assert_null(ckpt_find(&ck, n), "%s: a layer beyond L", n);
        ckpt_close(&ck);
        struct json_object *c = load_json(dir, "config.json");
        if (quant) {
            cr_assert(jhas(c, "quantization"));
        } else if (qat) {
            cr_assert_not(jhas(c, "quantization"));
            struct json_object *qc = jget(c, "quantization_config");
            cr_assert(json_object_is_type(qc, json_type_object));
            cr_assert_not(jhas(qc, "quant_method"), "a QAT export's block has no quant_method");
            struct gp_config cfg;
            load_cfg(&cfg, dir);
            cr_assert(cfg.quant.qat_unquantized);
            cr_assert_not(cfg.quant.mlx);
            cfg_free(&cfg);
        } else {
            cr_assert_not(jhas(c, "quantization"));
            cr_assert_not(jhas(c, "quantization_config"));
        }
        json_object_put(c);
        free(dir);
    }
    th_rmtree(tmp);
}

Test(fixture, qat_prunes_shared_kv_e2b_hf) { kv_presence("e2b", FX_HF, 0, 10, 5); }
Test(fixture, qat_prunes_shared_kv_e4b_text) { kv_presence("e4b", FX_TEXT, 0, 12, 6); }
Test(fixture, qat_prunes_shared_kv_e2b_mlx_q4) { kv_presence("e2b", FX_MLX, 4, 10, 5); }

/* ---------------------------------------------------------------- prompt */

Test(fixture, tokens_json)
{
    char *tmp = th_mkdtemp();
    static const char *const variants[] = {"e2b", "31b"};
    for (int v = 0; v < 2; v++) {
        char *dir = th_fixture(tmp, variants[v], fx(variants[v], FX_HF));
        struct gp_config c;
        load_cfg(&c, dir);
        struct json_object *t = load_json(dir, "tokens.json");
        struct json_object *arr = jget(t, "tokens");
        cr_assert(json_object_is_type(arr, json_type_array));
        size_t n = json_object_array_length(arr);
        cr_assert_gt((int64_t)n, c.sliding_window, "%zu tokens, window %lld: the ring never wraps", n,
                     (long long)c.sliding_window);
        cr_assert_eq(json_object_get_int64(json_object_array_get_idx(arr, 0)), 2, "first token must be BOS (2)");
        bool varied = false;
        for (size_t i = 0; i < n; i++) {
            struct json_object *x = json_object_array_get_idx(arr, i);
            cr_assert(json_object_is_type(x, json_type_int));
            int64_t id = json_object_get_int64(x);
            cr_assert(id >= 0 && id < c.vocab_size, "token %zu: %lld outside vocab %lld", i, (long long)id,
                      (long long)c.vocab_size);
            if (i > 1 && id != json_object_get_int64(json_object_array_get_idx(arr, 1)))
                varied = true;
        }
        cr_assert(varied);
        json_object_put(t);
        cfg_free(&c);
        free(dir);
    }
    th_rmtree(tmp);
}

/* ------------------------------------------------ full-size, headers only */

/* The 12B at its real dimensions (MODEL.md §2.4): 40 sliding layers of 14
 * tensors, 8 full k_eq_v layers of 13 (no v_proj), embed and norm: 666 text
 * tensors; 11 more with the multimodal embedder. */
Test(fixture, full_size_12b_headers_only)
{
    char *tmp = th_mkdtemp();
    for (int mm = 0; mm < 2; mm++) {
        struct fixture_opts o = fx("12b", FX_HF);
        o.full_size = true;
        o.headers_only = true;
        o.multimodal = mm;
        char *dir = th_fixture(tmp, mm ? "12b-mm" : "12b", o);
        struct ckpt c;
        struct err e = {0};
        cr_assert_eq(ckpt_open(&c, dir, ST_HEADER_ONLY | ST_ALLOW_TRUNCATED, &e), ERR_OK, "%s", e.msg);
        cr_assert_eq(c.n_tensors, mm ? 677u : 666u, "%zu tensors", c.n_tensors);
        static const struct {
            const char *name;
            uint64_t rows, cols;
        } want[] = {
            {"model.language_model.embed_tokens.weight", 262144, 3840},
            {"model.language_model.layers.0.self_attn.q_proj.weight", 4096, 3840},
            {"model.language_model.layers.0.self_attn.v_proj.weight", 2048, 3840},
            {"model.language_model.layers.5.self_attn.q_proj.weight", 8192, 3840},
            {"model.language_model.layers.5.self_attn.k_proj.weight", 512, 3840},
            {"model.language_model.layers.47.self_attn.o_proj.weight", 3840, 8192},
            {"model.language_model.layers.47.mlp.down_proj.weight", 3840, 15360},
        };
        for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
            const struct ckpt_tensor *ct = ckpt_find(&c, want[i].name);
            cr_assert(ct, "no %s", want[i].name);
            const struct st_tensor *t = ct->t;
            cr_assert(t->shape[0] == want[i].rows && t->shape[1] == want[i].cols, "%s: [%llu, %llu]", want[i].name,
                      (unsigned long long)t->shape[0], (unsigned long long)t->shape[1]);
        }
        cr_assert_null(ckpt_find(&c, "model.language_model.layers.5.self_attn.v_proj.weight"), "k = v: no v_proj");
        cr_assert_null(ckpt_find(&c, "model.language_model.embed_tokens_per_layer.weight"), "no PLE");
        ckpt_close(&c);
        free(dir);
    }
    th_rmtree(tmp);
}

Test(fixture, full_size_31b_headers_only_shards)
{
    char *tmp = th_mkdtemp();
    struct fixture_opts o = fx("31b", FX_HF);
    o.full_size = true;
    o.headers_only = true;
    o.shards = 4;
    char *dir = th_fixture(tmp, "31b", o);
    uint64_t declared = 0;
    for (int k = 1; k <= 4; k++) {
        char name[64];
        snprintf(name, sizeof name, "model-%05d-of-00004.safetensors", k);
        size_t len;
        uint8_t *b = read_file(dir, name, &len);
        cr_assert_geq(len, 8u);
        uint64_t n = 0;
        for (int i = 0; i < 8; i++)
            n |= (uint64_t)b[i] << (8 * i);
        cr_assert_eq((uint64_t)len, 8 + n, "%s: %zu bytes, header says %llu", name, len, (unsigned long long)(8 + n));
        free(b);
    }
    struct stat st;
    char *five = fio_join(dir, "model-00005-of-00004.safetensors");
    cr_assert_neq(stat(five, &st), 0);
    free(five);
    struct ckpt ck;
    open_ckpt(&ck, dir, ST_HEADER_ONLY | ST_ALLOW_TRUNCATED);
    cr_assert(ck.indexed);
    cr_assert_eq(ck.n_shards, 4);
    for (size_t i = 0; i < ck.n_shards; i++) {
        cr_assert(ck.shards[i].truncated);
        cr_assert_gt(ck.shards[i].n_tensors, 0);
    }
    for (size_t i = 0; i < ck.n_tensors; i++)
        declared += ck.tensors[i].t->end - ck.tensors[i].t->begin;
    /* MODEL.md §2.4, 31B: H 5376, L 60, sliding q [8192,5376] k/v [4096,5376],
     * full q [16384,5376] k [2048,5376] no v_proj, MLP [21504,5376]/[5376,21504]. */
    assert_shape(tensor(&ck, PFX_HF "embed_tokens.weight", NULL), 2, 262144, 5376, 0);
    assert_shape(tensor(&ck, PFX_HF "norm.weight", NULL), 1, 5376, 0, 0);
    assert_shape(tensor(&ck, PFX_HF "layers.0.self_attn.q_proj.weight", NULL), 2, 8192, 5376, 0);
    assert_shape(tensor(&ck, PFX_HF "layers.0.self_attn.k_proj.weight", NULL), 2, 4096, 5376, 0);
    assert_shape(tensor(&ck, PFX_HF "layers.0.self_attn.v_proj.weight", NULL), 2, 4096, 5376, 0);
    assert_shape(tensor(&ck, PFX_HF "layers.0.self_attn.o_proj.weight", NULL), 2, 5376, 8192, 0);
    assert_shape(tensor(&ck, PFX_HF "layers.0.self_attn.q_norm.weight", NULL), 1, 256, 0, 0);
    assert_shape(tensor(&ck, PFX_HF "layers.5.self_attn.q_proj.weight", NULL), 2, 16384, 5376, 0);
    assert_shape(tensor(&ck, PFX_HF "layers.5.self_attn.k_proj.weight", NULL), 2, 2048, 5376, 0);
    cr_assert_null(ckpt_find(&ck, PFX_HF "layers.5.self_attn.v_proj.weight"), "31B full layers are k_eq_v");
    assert_shape(tensor(&ck, PFX_HF "layers.5.self_attn.o_proj.weight", NULL), 2, 5376, 16384, 0);
    assert_shape(tensor(&ck, PFX_HF "layers.5.self_attn.k_norm.weight", NULL), 1, 512, 0, 0);
    assert_shape(tensor(&ck, PFX_HF "layers.5.mlp.gate_proj.weight", NULL), 2, 21504, 5376, 0);
    assert_shape(tensor(&ck, PFX_HF "layers.5.mlp.up_proj.weight", NULL), 2, 21504, 5376, 0);
    assert_shape(tensor(&ck, PFX_HF "layers.5.mlp.down_proj.weight", NULL), 2, 5376, 21504, 0);
    assert_shape(tensor(&ck, PFX_HF "layers.59.self_attn.q_proj.weight", NULL), 2, 16384, 5376, 0);
    cr_assert_null(ckpt_find(&ck, PFX_HF "layers.59.self_attn.v_proj.weight"));
    cr_assert_null(ckpt_find(&ck, PFX_HF "layers.60.self_attn.q_proj.weight"));
    cr_assert_null(ckpt_find(&ck, PFX_HF "per_layer_model_projection.weight"), "31B has no PLE");
    /* 50 sliding layers with v_proj, 10 full without (§1.3) */
    int v = 0, k = 0;
    for (size_t i = 0; i < ck.n_tensors; i++) {
        v += strstr(ck.tensors[i].name, ".self_attn.v_proj.weight") != NULL;
        k += strstr(ck.tensors[i].name, ".self_attn.k_proj.weight") != NULL;
    }
    cr_assert_eq(v, 50);
    cr_assert_eq(k, 60);
    ckpt_close(&ck);
    /* the index's total_size is the declared data size; about 31B bf16 parameters */
    struct json_object *idx = load_json(dir, "model.safetensors.index.json");
    cr_assert_eq((uint64_t)json_object_get_int64(jget(jget(idx, "metadata"), "total_size")), declared);
    cr_assert_gt(declared, 2ull * 29000000000ull);
    cr_assert_lt(declared, 2ull * 33000000000ull);
    json_object_put(idx);
    /* and the check reads it through the header-only path */
    struct check_report r;
    struct err e = {0};
    cr_assert_eq(check_run(&r, dir, CHECK_HEADERS_ONLY, &e), ERR_OK, "%s", e.msg);
    cr_assert(check_loadable(&r));
    cr_assert_eq(r.cfg.hidden_size, 5376);
    cr_assert_eq(r.cfg.n_layers, 60);
    check_free(&r);
    free(dir);
    th_rmtree(tmp);
}

/* ------------------------------------------------------------------ --like */

Test(fixture, like_external_golden_a)
{
    char *g = th_external_golden("a");
    if (!g)
        cr_skip_test("../shared/external-goldens/a is absent");
    char *src = fio_join(g, "config.json");
    char *tmp = th_mkdtemp();
    struct fixture_opts o = fx(NULL, FX_HF);
    o.like_path = src;
    char *dir = th_fixture(tmp, "like", o);
    struct json_object *a = load_json(g, "config.json"), *b = load_json(dir, "config.json");
    struct json_object *ta = jget(a, "text_config"), *tb = jget(b, "text_config");
    cr_assert(json_object_equal(jget(ta, "layer_types"), jget(tb, "layer_types")), "layer_types differ: %s vs %s",
              json_object_to_json_string(jget(ta, "layer_types")), json_object_to_json_string(jget(tb, "layer_types")));
    cr_assert_eq(json_object_get_int(jget(tb, "num_kv_shared_layers")),
                 json_object_get_int(jget(ta, "num_kv_shared_layers")));
    cr_assert_eq(json_object_get_int(jget(tb, "num_kv_shared_layers")), 3);
    cr_assert_eq(json_object_get_boolean(jget(tb, "use_double_wide_mlp")),
                 json_object_get_boolean(jget(ta, "use_double_wide_mlp")));
    cr_assert(json_object_get_boolean(jget(tb, "use_double_wide_mlp")));
    cr_assert_eq(json_object_get_int(jget(tb, "num_hidden_layers")), 8);
    cr_assert_eq(json_object_get_int(jget(tb, "hidden_size")), 128, "tiny hidden size");
    cr_assert_eq(json_object_get_int(jget(tb, "vocab_size")), 512);
    /* PLE on as in the source */
    cr_assert_gt(json_object_get_int(jget(tb, "hidden_size_per_layer_input")), 0);
    json_object_put(a);
    json_object_put(b);
    /* double-wide shared layers: layer 5 MLP is twice layer 4's */
    struct ckpt ck;
    open_ckpt(&ck, dir, 0);
    const struct st_tensor *g4 = tensor(&ck, PFX_HF "layers.4.mlp.gate_proj.weight", NULL);
    const struct st_tensor *g5 = tensor(&ck, PFX_HF "layers.5.mlp.gate_proj.weight", NULL);
    cr_assert_eq(g5->shape[0], 2 * g4->shape[0]);
    ckpt_close(&ck);
    struct check_report r;
    struct err e = {0};
    cr_assert_eq(check_run(&r, dir, 0, &e), ERR_OK, "%s", e.msg);
    cr_assert(check_loadable(&r));
    cr_assert_eq(r.cfg.first_shared, 5);
    cr_assert_eq(r.n_notes, 9, "K/V of layers 5..7 are redundant");
    check_free(&r);
    free(dir);
    free(src);
    free(g);
    th_rmtree(tmp);
}

/* ------------------------------------------------------------ usage errors */

static void expect_usage(struct fixture_opts o, const char *what)
{
    char *tmp = th_mkdtemp();
    char *out = fio_join(tmp, "out");
    o.out_dir = out;
    struct fixture_summary s;
    struct err e = {0};
    int rc = fixture_make(&o, &s, &e);
    cr_assert_eq(rc, ERR_USAGE, "%s: rc %d (%s)", what, rc, e.msg);
    cr_assert_neq(e.msg[0], 0, "%s: no message", what);
    struct stat st;
    char *cfg = fio_join(out, "config.json");
    cr_assert_neq(stat(cfg, &st), 0, "%s: wrote a config.json anyway", what);
    free(cfg);
    free(out);
    th_rmtree(tmp);
}

Test(fixture, usage_errors)
{
    struct fixture_opts o = fx("e2b", FX_HF);
    o.quant_bits = 4;
    expect_usage(o, "--quant 4 with layout hf");
    o = fx("e2b", FX_TEXT);
    o.multimodal = true;
    expect_usage(o, "--multimodal with layout text");
    expect_usage(fx("e3b", FX_HF), "unknown variant");
    expect_usage(fx(NULL, FX_HF), "no variant");
    o = fx("e2b", FX_MLX);
    o.quant_bits = 5;
    expect_usage(o, "--quant 5");
    o = fx("e2b", FX_MLX);
    o.quant_bits = 4;
    o.group_size = 48;
    expect_usage(o, "--group-size 48");
    o = fx("e2b", FX_HF);
    o.shards = 0;
    expect_usage(o, "--shards 0");
    o = fx("e2b", FX_HF); /* --full-size goes with the GGUF formats only */
    o.format = FXF_CT_W4A16;
    o.full_size = true;
    expect_usage(o, "--format ct-w4a16 --full-size");
    o = fx("e2b", FX_HF);
    o.format = FXF_GGUF_Q4_K_M;
    o.full_size = true;
    o.headers_only = true;
    expect_usage(o, "--format gguf-q4_k_m --full-size --headers-only");
}

/* ---- the fixtures' tokenizer ---- */

#include "core/gguf.h"
#include "tokenizer/tokenizer.h"

static const char *const tok_strings[] = {
    "The model reads the text.",
    "Hello, w\xC3\xB6rld! \xF0\x9F\x98\x80",
    "<|turn>user\nhi there<turn|>\n<|turn>model\n",
    "the the the and of to in words",
    "  leading spaces\n\nnewlines\tand tabs ",
    "<unused0> <0x41> <bos><eos>",
};
#define N_TOK_STRINGS (sizeof tok_strings / sizeof *tok_strings)

/* The tokenizer a fixture carries: tokenizer.json in a directory, tokenizer.ggml.* in model.gguf. */
static struct tokenizer *fixture_tokenizer(const char *dir, struct gguf_file *g)
{
    struct tokenizer *t;
    struct err e = {0};
    char *path = fio_join(dir, "model.gguf");
    struct stat st;
    if (stat(path, &st) == 0) {
        cr_assert_eq(gguf_open(g, path, &e), ERR_OK, "%s", e.msg);
        cr_assert_eq(tok_load_gguf(&t, g, &e), ERR_OK, "%s", e.msg);
    } else {
        free(path);
        path = fio_join(dir, "tokenizer.json");
        cr_assert_eq(tok_load_json(&t, path, &e), ERR_OK, "%s", e.msg);
    }
    free(path);
    return t;
}

static void encode_all(const struct tokenizer *t, uint32_t **ids, size_t *n)
{
    for (size_t i = 0; i < N_TOK_STRINGS; i++) {
        struct err e = {0};
        cr_assert_eq(tok_encode(t, tok_strings[i], strlen(tok_strings[i]), true, &ids[i], &n[i], &e), ERR_OK, "%s",
                     e.msg);
    }
}

static void expect_piece(const struct tokenizer *t, uint32_t id, const char *want)
{
    size_t len;
    const char *p = tok_piece(t, id, &len);
    cr_expect(p && len == strlen(want) && !memcmp(p, want, len), "id %u is '%.*s', expected '%s'", id,
              p ? (int)len : 0, p ? p : "", want);
}

/* Every variant, layout, quantization and format carries one tokenizer (the same ids from its
 * tokenizer.json and its GGUF metadata), with vocab_size ids and Gemma's ids where they fit. */
Test(fixture, tokenizer_in_every_form, .timeout = 120)
{
    static const char *const variants[] = {"e2b", "e4b", "12b", "26b-a4b", "31b"};
    char *root = th_mkdtemp();
    uint32_t *want[N_TOK_STRINGS] = {0};
    size_t n_want[N_TOK_STRINGS] = {0};
    for (size_t v = 0; v < 5; v++)
        for (int form = 0; form < 6; form++) {
            struct fixture_opts o = fx(variants[v], form == 1 || form == 3 ? FX_MLX : form == 2 ? FX_TEXT : FX_HF);
            o.quant_bits = form == 3 ? 4 : 0;
            o.format = form == 4 ? FXF_CT_W4A16 : form == 5 ? (v % 2 ? FXF_GGUF_Q8_0 : FXF_GGUF_Q4_0) : FXF_SAFETENSORS;
            char sub[64];
            snprintf(sub, sizeof sub, "%s-%d", variants[v], form);
            char *dir = th_fixture(root, sub, o);
            struct gguf_file g = {0};
            struct tokenizer *t = fixture_tokenizer(dir, &g);
            cr_expect_eq(tok_vocab_size(t), 512, "%s: vocab_size ids", sub);
            size_t nb;
            const uint32_t *bos = tok_bos_rule(t, &nb);
            cr_expect(nb == 1 && bos[0] == 2, "%s: <bos> prepended", sub);
            uint32_t *ids[N_TOK_STRINGS];
            size_t n[N_TOK_STRINGS];
            encode_all(t, ids, n);
            for (size_t i = 0; i < N_TOK_STRINGS; i++) {
                if (!want[i]) {
                    want[i] = ids[i];
                    n_want[i] = n[i];
                    continue;
                }
                cr_expect(n[i] == n_want[i] && !memcmp(ids[i], want[i], n[i] * sizeof *ids[i]),
                          "%s: string %zu gives other ids", sub, i);
                free(ids[i]);
            }
            tok_free(t);
            if (o.format == FXF_GGUF_Q4_0 || o.format == FXF_GGUF_Q8_0)
                gguf_close(&g);
            else {
                char *cfg = fio_join(dir, "tokenizer_config.json");
                struct stat st;
                cr_expect_eq(stat(cfg, &st), 0, "%s: tokenizer_config.json", sub);
                free(cfg);
            }
            free(dir);
        }
    /* Gemma's ids where they fit, and ordinary words as merged pieces (ids by HF tokenizers, 0.23.2) */
    struct gguf_file g = {0};
    char *dir = fio_join(root, "e2b-0");
    struct tokenizer *t = fixture_tokenizer(dir, &g);
    expect_piece(t, 0, "<pad>");
    expect_piece(t, 1, "<eos>");
    expect_piece(t, 2, "<bos>");
    expect_piece(t, 3, "<unk>");
    expect_piece(t, 105, "<|turn>");
    expect_piece(t, 106, "<turn|>");
    expect_piece(t, 238, "<0x00>");
    expect_piece(t, 493, "<0xFF>");
    const uint32_t first[] = {2, 80, 77, 128, 104, 41, 141, 6}; /* <bos> The ▁model ▁rea ds ▁the ▁text . */
    cr_expect(n_want[0] == 8 && !memcmp(want[0], first, sizeof first), "'%s'", tok_strings[0]);
    expect_piece(t, 77, "\xE2\x96\x81model");
    tok_free(t);
    /* HF tokenizers agrees on the written tokenizer.json (when build-ref/ and node are there) */
    FILE *f = fopen(GP_SOURCE_DIR "/build-ref/npm/tokenizers_0.23.2/package/package.json", "rb");
    if (!f || system("node --version >/dev/null 2>&1") != 0) {
        cr_log_warn("no build-ref/ or node: HF tokenizers' check of the fixture tokenizer skipped");
    } else {
        struct json_object *a = json_object_new_array();
        for (size_t i = 0; i < N_TOK_STRINGS; i++)
            json_object_array_add(a, json_object_new_string(tok_strings[i]));
        const char *js = json_object_to_json_string(a);
        char *spath = th_write(root, "strings.json", js, strlen(js));
        json_object_put(a);
        char cmd[4096];
        snprintf(cmd, sizeof cmd, "node '%s/tests/tokenizer/hf_encode.js' '%s/build-ref' '%s/tokenizer.json' '%s'",
                 GP_SOURCE_DIR, GP_SOURCE_DIR, dir, spath);
        FILE *p = popen(cmd, "r");
        cr_assert(p, "%s", cmd);
        char line[8192];
        for (size_t i = 0; i < N_TOK_STRINGS; i++) {
            cr_assert(fgets(line, sizeof line, p), "HF tokenizers: no line for string %zu", i);
            char *s = line, *end;
            size_t k = 0;
            bool same = true;
            for (unsigned long id = strtoul(s, &end, 10); end != s; s = end, id = strtoul(s, &end, 10), k++)
                same = same && k < n_want[i] && want[i][k] == id;
            cr_expect(same && k == n_want[i], "string %zu: HF tokenizers' ids differ from gempack's", i);
        }
        cr_expect_eq(pclose(p), 0);
        free(spath);
    }
    if (f)
        fclose(f);
    for (size_t i = 0; i < N_TOK_STRINGS; i++)
        free(want[i]);
    free(dir);
    th_rmtree(root);
}

/* The full-size vocabulary: 262,144 ids, the media tokens at their real ids, <unusedN> after the pieces. */
Test(fixture, tokenizer_full_size, .timeout = 120)
{
    char *root = th_mkdtemp();
    struct fixture_opts o = fx("e2b", FX_HF);
    o.full_size = true;
    o.headers_only = true;
    char *dir = th_fixture(root, "full", o);
    struct gguf_file g = {0};
    struct tokenizer *t = fixture_tokenizer(dir, &g);
    cr_expect_eq(tok_vocab_size(t), 262144);
    expect_piece(t, 255999, "<|image>");
    expect_piece(t, 258884, "<|video|>");
    expect_piece(t, 77, "\xE2\x96\x81model");
    size_t len;
    const char *last = tok_piece(t, 262143, &len);
    cr_expect(last && len > 8 && !memcmp(last, "<unused", 7), "the last id is an <unusedN>");
    tok_free(t);
    /* same arguments, same bytes */
    char *again = th_fixture(root, "full2", o);
    assert_same_file(dir, again, "tokenizer.json");
    free(again);
    free(dir);
    th_rmtree(root);
}
