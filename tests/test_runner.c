/* test_runner.c - runner/forward (with runner/model): the forward pass
 * against independent goldens, and its invariants: mode equivalence, thread
 * determinism, mask = no mask, weights loaded into the arena, the blas and
 * q8 kernels. (The KV cache, batches, the prefix cache, sampling and token
 * files have test files of their own: test_kvcache.c, test_session.c,
 * test_prefix.c, test_sample.c, test_tokens.c.)
 *
 * Goldens: golden/data/<variant>-{bf16,q4,q8}.npz, float64 logits from
 * golden/reference.py (an independent NumPy forward), for fixtures made by
 * `gempack fixture` (deterministic). The bar (MODEL.md §9): max |Δlogit| ≤
 * 1e-4 against float64, top-1 agreement 100 %. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "converter/convert.h"
#include "core/npz.h"
#include "golden/check.h"
#include "kernels/internal.h"
#include "runner/forward.h"
#include "runner/tokens.h"
#include "tests/helpers.h"
#include "tests/run_helpers.h"

/* MODEL.md §9: a float32 runner against the float64 reference. Seen: 1e-5 to 5e-5. */
#define GOLDEN_MAX_ABS 1e-4
/* Same model, different chunking: the bar. With the default kernels the
 * runs are bitwise identical (asserted too); OpenBLAS prefill differs from them
 * (bounded by GOLDEN_MAX_ABS below), which is why it is opt-in (--kernels blas). */
#define MODE_MAX_ABS 1e-5

static float *run_logits_kern(const char *model_path, const int32_t *tokens, int64_t T, int64_t chunk, int threads,
                              enum kern_level level, int64_t *V_out)
{
    struct model m;
    struct runner r;
    struct err e = {0};
    cr_assert_eq(model_open(&m, model_path, &e), ERR_OK, "%s", e.msg);
    cr_assert_eq(runner_init(&r, &m, TH_RUNNER(threads, level, T), &e), ERR_OK, "%s", e.msg);
    int64_t V = m.cfg.vocab_size;
    float *logits = malloc((size_t)(T * V) * sizeof *logits);
    cr_assert(logits);
    cr_assert_eq(runner_prompt(&r, tokens, T, chunk, logits, NULL, &e), ERR_OK, "%s", e.msg);
    runner_free(&r);
    model_close(&m);
    *V_out = V;
    return logits;
}

static float *run_logits(const char *model_path, const int32_t *tokens, int64_t T, int64_t chunk, int threads,
                         int64_t *V_out)
{
    return run_logits_kern(model_path, tokens, T, chunk, threads, KERN_BEST, V_out);
}

static char *golden_path(const char *name)
{
    char *p = malloc(4096);
    snprintf(p, 4096, "%s/golden/data/%s.npz", GP_SOURCE_DIR, name);
    return p;
}

/* Runs `model_path` on the golden's tokens (golden_check_model, as `golden
 * check` does) and asserts the bar. */
static void expect_golden(const char *model_path, const char *golden_name)
{
    char *gp = golden_path(golden_name);
    struct golden_check_opts o = golden_check_defaults();
    o.over = (struct golden_thresholds){GOLDEN_MAX_ABS, -1, -1, -1, -1, 1.0};
    struct golden_result res;
    struct err e = {0};
    cr_assert_eq(golden_check_model(model_path, gp, &o, &res, &e), ERR_OK, "%s", e.msg);
    cr_assert(res.f64, "%s: goldens carry float64 logits", gp);
    cr_expect(res.m.max_abs <= GOLDEN_MAX_ABS, "%s vs %s: max |dlogit| %.3g", model_path, golden_name, res.m.max_abs);
    cr_expect_eq(res.m.top1, 1.0, "%s vs %s: top-1 agreement %.3f", model_path, golden_name, res.m.top1);
    cr_expect(res.m.max_abs > 0.0, "exactly equal to a float64 reference would mean the golden came from the runner");
    cr_expect(res.pass, "%s vs %s: the verdict is not PASS", model_path, golden_name);
    free(gp);
}

struct layout_case {
    const char *variant;
    enum fixture_layout layout;
    bool qat, multimodal;
    int quant, shards;
    const char *golden; /* suffix */
    enum qmode mode;    /* with quant: affine, or an MX mode (its bits in quant) */
};

static struct layout_case cases[] = {
    /* bf16: HF, MLX, text-only, QAT (pruned K/V), multimodal sharded: one model */
    {"e2b", FX_HF, false, false, 0, 1, "bf16", QM_AFFINE},     {"e2b", FX_MLX, false, false, 0, 1, "bf16", QM_AFFINE},
    {"e2b", FX_TEXT, false, false, 0, 1, "bf16", QM_AFFINE},   {"e2b", FX_HF, true, false, 0, 1, "bf16", QM_AFFINE},
    {"e2b", FX_HF, false, true, 0, 3, "bf16", QM_AFFINE},      {"e2b", FX_MLX, false, false, 4, 1, "q4", QM_AFFINE},
    {"e2b", FX_MLX, true, false, 4, 1, "q4", QM_AFFINE},       {"e2b", FX_TEXT, false, false, 4, 1, "q4", QM_AFFINE},
    {"e2b", FX_MLX, false, false, 8, 1, "q8", QM_AFFINE},      {"e4b", FX_HF, false, false, 0, 1, "bf16", QM_AFFINE},
    {"e4b", FX_MLX, true, false, 0, 1, "bf16", QM_AFFINE},     {"e4b", FX_MLX, false, true, 4, 2, "q4", QM_AFFINE},
    {"e4b", FX_MLX, false, false, 8, 1, "q8", QM_AFFINE},      {"26b-a4b", FX_HF, false, false, 0, 1, "bf16", QM_AFFINE},
    {"26b-a4b", FX_MLX, false, false, 0, 1, "bf16", QM_AFFINE}, {"26b-a4b", FX_TEXT, false, false, 0, 1, "bf16", QM_AFFINE},
    {"26b-a4b", FX_MLX, false, false, 4, 1, "q4", QM_AFFINE},  {"26b-a4b", FX_MLX, false, false, 8, 1, "q8", QM_AFFINE},
    {"31b", FX_HF, false, false, 0, 1, "bf16", QM_AFFINE},     {"31b", FX_MLX, false, true, 0, 2, "bf16", QM_AFFINE},
    {"31b", FX_MLX, false, false, 4, 1, "q4", QM_AFFINE},      {"31b", FX_TEXT, false, false, 8, 1, "q8", QM_AFFINE},
    /* the 12B's classes: gemma4_unified (HF, MLX, multimodal with its encoder-free
     * embedder) and a gemma4_unified_text export without PLE or MoE fields */
    {"12b", FX_HF, false, false, 0, 1, "bf16", QM_AFFINE},     {"12b", FX_TEXT, false, false, 0, 1, "bf16", QM_AFFINE},
    {"12b", FX_MLX, false, true, 0, 2, "bf16", QM_AFFINE},     {"12b", FX_MLX, false, false, 4, 1, "q4", QM_AFFINE},
    {"12b", FX_TEXT, false, false, 8, 1, "q8", QM_AFFINE},
    /* MLX microscaling modes (the 26B's routers stay affine 8-bit beside them) */
    {"e2b", FX_MLX, false, false, 4, 1, "mxfp4", QM_MXFP4}, {"e2b", FX_TEXT, false, false, 4, 1, "nvfp4", QM_NVFP4},
    {"e2b", FX_MLX, true, true, 8, 2, "mxfp8", QM_MXFP8},   {"26b-a4b", FX_MLX, false, false, 4, 1, "mxfp4", QM_MXFP4},
};

/* Parameters are indices into a table: Criterion runs each case in a new
 * process, where pointers into the table would not be valid. */
#define INDEX_PARAMS(name, table)                                                                                    \
    ParameterizedTestParameters(runner, name)                                                                        \
    {                                                                                                                \
        static size_t idx[sizeof table / sizeof table[0]];                                                           \
        for (size_t i = 0; i < sizeof idx / sizeof idx[0]; i++)                                                      \
            idx[i] = i;                                                                                              \
        return cr_make_param_array(size_t, idx, sizeof idx / sizeof idx[0]);                                         \
    }

INDEX_PARAMS(goldens, cases)

/* Every topology and layout, from the checkpoint directory and from its pack. */
ParameterizedTest(size_t *i, runner, goldens, .timeout = TH_TIMEOUT(120))
{
    const struct layout_case *c = &cases[*i];
    char *tmp = th_mkdtemp();
    struct fixture_opts o = {.variant = c->variant, .layout = c->layout, .qat = c->qat, .multimodal = c->multimodal,
                             .quant_bits = c->quant, .quant_mode = c->mode, .shards = c->shards};
    if (c->mode != QM_AFFINE)
        qmode_defaults(c->mode, &o.group_size, &o.quant_bits);
    char *dir = th_fixture(tmp, "ckpt", o);
    char golden[64];
    snprintf(golden, sizeof golden, "%s-%s", c->variant, c->golden);
    expect_golden(dir, golden);

    struct convert_opts co = {.align = 64, .plan = {.group_size = 64}};
    char pack[4200];
    snprintf(pack, sizeof pack, "%s/model.gpk", tmp);
    co.out = pack;
    struct convert_report rep;
    struct err e = {0};
    cr_assert_eq(convert_run(&rep, dir, &co, &e), ERR_OK, "%s", e.msg);
    convert_free(&rep);
    expect_golden(pack, golden);
    free(dir);
    th_rmtree(tmp);
}

/* Google's QAT formats: the source (compressed-tensors directory or GGUF
 * file) against its float64 golden from golden/reference.py, which reads
 * both itself; the pack and the MLX export convert makes hold the source's
 * values bit for bit (every tensor reported exact) and give the same logits,
 * bit for bit. */
struct format_case {
    const char *variant;
    enum fixture_format format;
    const char *name;
};

static struct format_case formats[] = {
    {"e2b", FXF_CT_W4A16, "ct-w4a16"},    {"e4b", FXF_CT_W4A16, "ct-w4a16"},     {"12b", FXF_CT_W4A16, "ct-w4a16"},
    {"26b-a4b", FXF_CT_W4A16, "ct-w4a16"}, {"31b", FXF_CT_W4A16, "ct-w4a16"},    {"e2b", FXF_GGUF_Q4_0, "gguf-q4_0"},
    {"e4b", FXF_GGUF_Q4_0, "gguf-q4_0"},   {"12b", FXF_GGUF_Q4_0, "gguf-q4_0"},  {"26b-a4b", FXF_GGUF_Q4_0, "gguf-q4_0"},
    {"31b", FXF_GGUF_Q4_0, "gguf-q4_0"},   {"e2b", FXF_GGUF_Q8_0, "gguf-q8_0"},  {"26b-a4b", FXF_GGUF_Q8_0, "gguf-q8_0"},
};

INDEX_PARAMS(qat_formats, formats)

static float *prompt_logits(const char *path, int32_t *tok, int64_t T, int64_t *V)
{
    struct model m;
    struct err e = {0};
    cr_assert_eq(model_open(&m, path, &e), ERR_OK, "%s", e.msg);
    *V = m.cfg.vocab_size;
    float *l = run_kv(&m, NULL, tok, T, 0, NULL);
    model_close(&m);
    return l;
}

/* convert src into out (pack or MLX directory) without requantizing; asserts
 * the report calls every tensor exact. */
static void convert_exact(const char *src, const char *out, bool mlx)
{
    struct convert_opts co = {.align = 64, .format_mlx = mlx, .out = out, .plan = {.group_size = 64}};
    struct convert_report rep;
    struct err e = {0};
    cr_assert_eq(convert_run(&rep, src, &co, &e), ERR_OK, "%s", e.msg);
    struct json_object *j = convert_json(&rep), *plan = json_object_object_get(j, "plan");
    cr_expect_eq(json_object_get_int64(json_object_object_get(plan, "exact_tensors")), (int64_t)rep.plan.n,
                 "%s -> %s: every tensor bit for bit: %s", src, out,
                 json_object_to_json_string(json_object_object_get(plan, "exact_tensors")));
    cr_expect_gt(rep.in.source.n_mods, 0, "%s: transcoded modules recorded", src);
    for (size_t k = 0; k < rep.in.source.n_mods; k++)
        cr_expect(rep.in.source.mods[k].verified && rep.in.source.mods[k].exact, "%s: %s -> %s: max |dw| %g", src,
                  rep.in.source.mods[k].name, rep.in.source.mods[k].to, rep.in.source.mods[k].max_abs_err);
    json_object_put(j);
    convert_free(&rep);
}

ParameterizedTest(size_t *i, runner, qat_formats, .timeout = TH_TIMEOUT(120))
{
    const struct format_case *c = &formats[*i];
    char *tmp = th_mkdtemp();
    struct fixture_opts o = {.variant = c->variant, .format = c->format};
    char *dir = th_fixture(tmp, "src", o), src[4200], pack[4200], mlx[4200], golden[64];
    snprintf(src, sizeof src, c->format == FXF_CT_W4A16 ? "%s" : "%s/model.gguf", dir);
    snprintf(golden, sizeof golden, "%s-%s", c->variant, c->name);
    expect_golden(src, golden);

    snprintf(pack, sizeof pack, "%s/model.gpk", tmp);
    snprintf(mlx, sizeof mlx, "%s/mlx", tmp);
    convert_exact(src, pack, false);
    convert_exact(src, mlx, true);
    struct token_seqs s = {0};
    struct err e = {0};
    char tokens[4200];
    snprintf(tokens, sizeof tokens, "%s/tokens.json", dir);
    cr_assert_eq(tokens_read_file(tokens, &s, &e), ERR_OK, "%s", e.msg);
    int64_t T = s.len[0], V;
    float *a = prompt_logits(src, s.seq[0], T, &V), *b = prompt_logits(pack, s.seq[0], T, &V),
          *m = prompt_logits(mlx, s.seq[0], T, &V);
    cr_expect(rows_equal(a, b, T, V), "%s: the source and its pack differ", golden);
    cr_expect(rows_equal(a, m, T, V), "%s: the source and its MLX export differ", golden);
    free(a);
    free(b);
    free(m);
    tokens_free(&s);
    free(dir);
    th_rmtree(tmp);
}

/* --kernels q8's bars against the float64 goldens (q8_kernels_vs_golden below). */
#define Q8_KLD_MAX 5e-4
#define Q8_TOP1_MIN 0.95

/* llama-quantize presets (ggml block types per tensor, fixtures/formats.c):
 * the GGUF against its golden from golden/reference.py (its own NumPy
 * dequantization of every type); the pack keeps every block (every tensor
 * exact, the same logits bit for bit); the MLX export refuses the blocks by
 * tensor and type; --kernels q8 within its bars. Seen 2026-11-28
 * (KERN_NUMERICS 9): exact max |dlogit| 1.2e-5-4.2e-5, top-1 1.000; q8 KLD
 * max 7.7e-8-1.9e-5, top-1 1.000, max |dlogit| 0.45-1.0. */
static struct format_case presets[] = {
    {"e2b", FXF_GGUF_Q4_K_M, "gguf-q4_k_m"},     {"e2b", FXF_GGUF_Q5_K_M, "gguf-q5_k_m"},
    {"e2b", FXF_GGUF_Q6_K, "gguf-q6_k"},         {"e2b", FXF_GGUF_IQ4_XS, "gguf-iq4_xs"},
    {"e2b", FXF_GGUF_IQ2_XXS, "gguf-iq2_xxs"},   {"26b-a4b", FXF_GGUF_Q4_K_M, "gguf-q4_k_m"},
    {"26b-a4b", FXF_GGUF_MXFP4, "gguf-mxfp4"},
};

INDEX_PARAMS(gguf_presets, presets)

ParameterizedTest(size_t *i, runner, gguf_presets, .timeout = TH_TIMEOUT(120))
{
    const struct format_case *c = &presets[*i];
    char *tmp = th_mkdtemp();
    struct fixture_opts o = {.variant = c->variant, .format = c->format};
    char *dir = th_fixture(tmp, "src", o), src[4200], pack[4200], mlx[4200], golden[64];
    snprintf(src, sizeof src, "%s/model.gguf", dir);
    snprintf(golden, sizeof golden, "%s-%s", c->variant, c->name);
    expect_golden(src, golden);

    snprintf(pack, sizeof pack, "%s/model.gpk", tmp);
    struct convert_opts co = {.align = 64, .out = pack, .plan = {.group_size = 64}};
    struct convert_report rep;
    struct err e = {0};
    cr_assert_eq(convert_run(&rep, src, &co, &e), ERR_OK, "%s", e.msg);
    struct json_object *j = convert_json(&rep), *plan = json_object_object_get(j, "plan");
    cr_expect_eq(json_object_get_int64(json_object_object_get(plan, "exact_tensors")), (int64_t)rep.plan.n,
                 "%s: every tensor of the pack bit for bit", golden);
    json_object_put(j);
    convert_free(&rep);
    snprintf(mlx, sizeof mlx, "%s/mlx", tmp);
    co = (struct convert_opts){.align = 64, .format_mlx = true, .out = mlx, .plan = {.group_size = 64}};
    cr_expect_eq(convert_run(&rep, src, &co, &e), ERR_USAGE, "%s: the MLX export of ggml blocks", golden);
    cr_expect(strstr(e.msg, "which no MLX mode holds exactly") != NULL, "%s", e.msg);
    convert_free(&rep);

    struct token_seqs s = {0};
    char tokens[4200];
    snprintf(tokens, sizeof tokens, "%s/tokens.json", dir);
    cr_assert_eq(tokens_read_file(tokens, &s, &e), ERR_OK, "%s", e.msg);
    int64_t T = s.len[0], V;
    float *a = prompt_logits(src, s.seq[0], T, &V), *b = prompt_logits(pack, s.seq[0], T, &V);
    cr_expect(rows_equal(a, b, T, V), "%s: the source and its pack differ", golden);
    /* --kernels q8 (the fused ggml types and the Q8_0 tensors on int8 activations): the q8 bars
     * against the golden, and decode steps on 2 threads give one prompt's bits */
    char *gp = golden_path(golden);
    struct golden g;
    cr_assert_eq(golden_read(gp, 0, &g, &e), ERR_OK, "%s", e.msg);
    float *q8 = run_logits_kern(src, g.tokens, g.T, 0, 1, KERN_Q8, &V), *q8d = run_logits_kern(src, g.tokens, g.T, 1, 2, KERN_Q8, &V);
    float *ex = run_logits(src, g.tokens, g.T, 0, 1, &V);
    struct golden_thresholds th = {-1, -1, -1, -1, -1, -1};
    struct golden_metrics mq, me;
    golden_compare(&g, q8, th, &mq);
    golden_compare(&g, ex, th, &me);
    cr_log_info("q8 %s: max |dlogit| %.3g (exact kernels %.3g), KLD mean %.3g max %.3g, top-1 %.3f", golden, mq.max_abs,
                me.max_abs, mq.kld_mean, mq.kld_max, mq.top1);
    cr_expect(mq.max_abs > 10 * me.max_abs, "%s: q8 max |d| %.3g: the int8 path was not taken", golden, mq.max_abs);
    cr_expect(mq.kld_max <= Q8_KLD_MAX, "%s: q8 KLD max %.3g > %g", golden, mq.kld_max, Q8_KLD_MAX);
    cr_expect(mq.top1 >= Q8_TOP1_MIN, "%s: q8 top-1 agreement %.3f < %g", golden, mq.top1, Q8_TOP1_MIN);
    cr_expect_eq(memcmp(q8, q8d, (size_t)(g.T * V) * sizeof *q8), 0, "%s: q8 decode on 2 threads differs", golden);
    free(q8);
    free(q8d);
    free(ex);
    golden_free(&g);
    free(gp);
    free(a);
    free(b);
    tokens_free(&s);
    free(dir);
    th_rmtree(tmp);
}

/* ../shared/external-goldens: logits from upstream mlx-lm code (float64 keys). */
static void external(const char *name)
{
    char *dir = th_external_golden(name);
    if (!dir)
        cr_skip_test("../shared/external-goldens/%s is absent", name);
    char path[4200];
    struct token_seqs s = {0};
    struct err e = {0};
    snprintf(path, sizeof path, "%s/tokens.json", dir);
    cr_assert_eq(tokens_read_file(path, &s, &e), ERR_OK, "%s", e.msg);
    snprintf(path, sizeof path, "%s/golden.f64.npz", dir);
    struct npy ref_prefill, ref_decode;
    cr_assert_eq(npz_read_array(path, "logits_prefill_f64.npy", UINT64_MAX, &ref_prefill, &e), ERR_OK, "%s", e.msg);
    cr_assert_eq(npz_read_array(path, "logits_decode_f64.npy", UINT64_MAX, &ref_decode, &e), ERR_OK, "%s", e.msg);
    int64_t T = s.len[0], V;
    for (int mode = 0; mode < 2; mode++) {
        /* the upstream decode key: first 12 tokens as one chunk, then one at a time */
        struct model m;
        struct runner r;
        cr_assert_eq(model_open(&m, dir, &e), ERR_OK, "%s", e.msg);
        cr_assert_eq(runner_init(&r, &m, TH_RUNNER(1, KERN_BEST, T), &e), ERR_OK, "%s", e.msg);
        V = m.cfg.vocab_size;
        float *logits = malloc((size_t)(T * V) * sizeof *logits);
        if (mode == 0) {
            cr_assert_eq(runner_prompt(&r, s.seq[0], T, 0, logits, NULL, &e), ERR_OK, "%s", e.msg);
        } else {
            cr_assert_eq(runner_forward(&r, s.seq[0], 12, logits, true, NULL, &e), ERR_OK, "%s", e.msg);
            for (int64_t t = 12; t < T; t++)
                cr_assert_eq(runner_forward(&r, s.seq[0] + t, 1, logits + t * V, true, NULL, &e), ERR_OK, "%s",
                             e.msg);
        }
        const double *ref = mode == 0 ? ref_prefill.data : ref_decode.data;
        cr_assert_eq(ref_prefill.count, (uint64_t)(T * V));
        double worst = 0.0;
        int64_t agree = 0;
        for (int64_t t = 0; t < T; t++) {
            int64_t a = 0, b = 0;
            for (int64_t k = 0; k < V; k++) {
                worst = fmax(worst, fabs((double)logits[t * V + k] - ref[t * V + k]));
                if (logits[t * V + k] > logits[t * V + a])
                    a = k;
                if (ref[t * V + k] > ref[t * V + b])
                    b = k;
            }
            agree += a == b;
        }
        cr_expect(worst <= GOLDEN_MAX_ABS, "external %s (%s): max |dlogit| %.3g", name, mode ? "decode" : "prefill",
                  worst);
        cr_expect_eq(agree, T, "external %s: top-1 agrees on %lld of %lld positions", name, (long long)agree,
                     (long long)T);
        free(logits);
        runner_free(&r);
        model_close(&m);
    }
    npy_free(&ref_prefill);
    npy_free(&ref_decode);
    tokens_free(&s);
    free(dir);
}

Test(runner, external_a_eseries) { external("a"); }
Test(runner, external_c_moe) { external("c"); }

static char *fixture_tokens(const char *dir, struct token_seqs *s)
{
    char path[4200];
    struct err e = {0};
    snprintf(path, sizeof path, "%s/tokens.json", dir);
    cr_assert_eq(tokens_read_file(path, s, &e), ERR_OK, "%s", e.msg);
    cr_assert_gt(s->len[0], 16, "the fixture prompt is longer than the sliding window (8)");
    return NULL;
}

/* prefill, decode and chunked:N give the same logits on a prompt longer than the window. */
static void modes(const char *variant, int quant)
{
    char *tmp = th_mkdtemp();
    struct fixture_opts o = {.variant = variant, .layout = quant ? FX_MLX : FX_HF, .quant_bits = quant};
    char *dir = th_fixture(tmp, "ckpt", o);
    struct token_seqs s = {0};
    fixture_tokens(dir, &s);
    int64_t T = s.len[0], V;
    float *pre = run_logits(dir, s.seq[0], T, 0, 1, &V);
    static const int64_t chunks[] = {1, 3, 5, 8, 9, 17};
    for (size_t k = 0; k < sizeof chunks / sizeof chunks[0]; k++) {
        float *other = run_logits(dir, s.seq[0], T, chunks[k], 1, &V);
        double d = max_abs_diff(pre, other, T * V);
        cr_expect(d <= MODE_MAX_ABS, "%s: chunk %lld vs prefill: max |d| %.3g", variant, (long long)chunks[k], d);
        /* stronger, by construction of the kernels: every token takes the same operations */
        cr_expect_eq(memcmp(pre, other, (size_t)(T * V) * sizeof *pre), 0, "%s: chunk %lld not bitwise equal",
                     variant, (long long)chunks[k]);
        free(other);
    }
    free(pre);
    tokens_free(&s);
    free(dir);
    th_rmtree(tmp);
}

Test(runner, modes_e2b_shared_kv) { modes("e2b", 0); }
Test(runner, modes_e4b_q4) { modes("e4b", 4); }
Test(runner, modes_26b_moe) { modes("26b-a4b", 0); }
Test(runner, modes_31b_k_eq_v_q8) { modes("31b", 8); }

/* Output is bitwise identical for any thread count, in every mode. */
static void threads_bitwise(const char *variant, int quant)
{
    char *tmp = th_mkdtemp();
    struct fixture_opts o = {.variant = variant, .layout = quant ? FX_MLX : FX_HF, .quant_bits = quant};
    char *dir = th_fixture(tmp, "ckpt", o);
    struct token_seqs s = {0};
    fixture_tokens(dir, &s);
    int64_t T = s.len[0], V;
    for (int64_t chunk = 0; chunk <= 1; chunk++) {
        float *one = run_logits(dir, s.seq[0], T, chunk, 1, &V);
        for (int threads = 2; threads <= 3; threads++) {
            float *many = run_logits(dir, s.seq[0], T, chunk, threads, &V);
            cr_expect_eq(memcmp(one, many, (size_t)(T * V) * sizeof *one), 0,
                         "%s: %d threads differ from 1 thread (chunk %lld)", variant, threads, (long long)chunk);
            free(many);
        }
        free(one);
    }
    tokens_free(&s);
    free(dir);
    th_rmtree(tmp);
}

Test(runner, threads_bitwise_e2b_q4) { threads_bitwise("e2b", 4); }
Test(runner, threads_bitwise_26b_bf16) { threads_bitwise("26b-a4b", 0); }

/* Whether [p, p + n) lies in the model's arena. */
static bool in_arena(const struct model *m, const uint8_t *p, size_t n)
{
    return p >= m->arena && n <= m->arena_size && (size_t)(p - m->arena) <= m->arena_size - n;
}

/* model_load_weights: every matrix a step reads whole moves into the arena
 * (the PLE table stays in the file) and the logits are bitwise those of the
 * mapped model, on 2 threads in decode mode. From a directory (HF layout:
 * 26B's fused experts, split into two overlapping views) and from a pack
 * (E2B, 4-bit). The 4/8-bit matrices are laid out in blocks of rows (experts
 * one by one), and the logits are still those of the mapped model read by
 * rows, with the exact and the int8 kernels. */
static void loaded_weights(const char *variant, int quant, bool to_pack, enum kern_level level)
{
    char *tmp = th_mkdtemp();
    const bool mlx = quant == 4 || quant == 8; /* other widths: the bf16 fixture quantized by convert */
    struct fixture_opts o = {.variant = variant, .layout = mlx ? FX_MLX : FX_HF, .quant_bits = mlx ? quant : 0};
    char *dir = th_fixture(tmp, "ckpt", o);
    char path[4200];
    struct err e = {0};
    snprintf(path, sizeof path, "%s", dir);
    if (to_pack) {
        struct convert_opts co = {.align = 64, .plan = {.bits = mlx ? 0 : quant, .group_size = 64}};
        snprintf(path, sizeof path, "%s/model.gpk", tmp);
        co.out = path;
        struct convert_report rep;
        cr_assert_eq(convert_run(&rep, dir, &co, &e), ERR_OK, "%s", e.msg);
        convert_free(&rep);
    }
    struct token_seqs s = {0};
    fixture_tokens(dir, &s);
    int64_t T = s.len[0], V;
    float *mapped = run_logits_kern(path, s.seq[0], T, 1, 2, level, &V);
    struct model m;
    struct runner r;
    cr_assert_eq(model_open(&m, path, &e), ERR_OK, "%s", e.msg);
    cr_assert_eq(model_load_weights(&m, 2, &e), ERR_OK, "%s", e.msg);
    cr_assert(m.arena && m.arena_size > 0);
    const struct wmat *mats[] = {&m.embed, &m.layers[0].q, &m.layers[0].o, &m.layers[0].down,
                                 &m.layers[m.cfg.n_layers - 1].up, &m.layers[0].ex_up};
    for (size_t i = 0; i < sizeof mats / sizeof mats[0]; i++) {
        const struct wmat *w = mats[i];
        if (!w->w)
            continue;
        cr_assert(in_arena(&m, w->w, (size_t)w->rows * w->row_stride), "%s: matrix %zu not copied", variant, i);
        if (w->quantized)
            cr_assert(in_arena(&m, w->s, (size_t)w->rows * w->srow_bytes) &&
                          in_arena(&m, w->b, (size_t)w->rows * w->srow_bytes),
                      "%s: matrix %zu: scales/biases not copied", variant, i);
    }
    if (m.ple_embed.w)
        cr_assert(!in_arena(&m, m.ple_embed.w, 1), "%s: the PLE table is read in place", variant);
    int blocked = 0;
    for (int i = 0; i < m.cfg.n_layers; i++) {
        const struct layer_weights *L = &m.layers[i];
        blocked += L->q.blocked + L->o.blocked + L->down.blocked + L->ex_up.blocked;
        cr_assert(!L->q.blocked || L->q.quantized, "blocks only for quantized matrices");
    }
    cr_assert(quant ? blocked > 0 : blocked == 0, "%s: %d matrices laid out in blocks", variant, blocked);
    cr_assert_eq(runner_init(&r, &m, TH_RUNNER(2, level, T), &e), ERR_OK, "%s", e.msg);
    float *loaded = malloc((size_t)(T * V) * sizeof *loaded);
    cr_assert(loaded);
    cr_assert_eq(runner_prompt(&r, s.seq[0], T, 1, loaded, NULL, &e), ERR_OK, "%s", e.msg);
    cr_assert_eq(memcmp(mapped, loaded, (size_t)(T * V) * sizeof *loaded), 0, "%s: loaded weights change the logits",
                 variant);
    runner_free(&r);
    model_close(&m);
    free(mapped);
    free(loaded);
    tokens_free(&s);
    free(dir);
    th_rmtree(tmp);
}

Test(runner, loaded_weights_26b_fused_experts_dir) { loaded_weights("26b-a4b", 0, false, KERN_BEST); }
Test(runner, loaded_weights_e2b_q4_pack) { loaded_weights("e2b", 4, true, KERN_BEST); }
Test(runner, loaded_weights_blocked_e2b_q4_pack_q8) { loaded_weights("e2b", 4, true, KERN_Q8); }
Test(runner, loaded_weights_blocked_e2b_q6_pack) { loaded_weights("e2b", 6, true, KERN_BEST); }
Test(runner, loaded_weights_blocked_26b_q8_dir_q8) { loaded_weights("26b-a4b", 8, false, KERN_Q8); }

/* --kernels blas: sgemm for steps of >= KERN_GEMM_MIN_TOKENS tokens. Close to
 * the fused kernels (the golden bound), and, because sgemm calls have fixed
 * widths and a token always sits in a column slot computed alike in both,
 * bitwise independent of chunking (chunks that are all long enough: the whole
 * prompt takes the wide call, its chunks the narrow one) and of the thread
 * count. */
Test(runner, blas_prefill_close_and_chunk_independent, .timeout = TH_TIMEOUT(120))
{
    struct kern_table kt;
    kern_init(&kt, KERN_BLAS);
    bool on = kt.blas;
    kern_free(&kt);
    if (!on)
        cr_skip_test("built without OpenBLAS");
    char *tmp = th_mkdtemp();
    struct fixture_opts o = {.variant = "e2b", .layout = FX_MLX, .quant_bits = 4};
    char *dir = th_fixture(tmp, "ckpt", o);
    struct token_seqs s = {0};
    fixture_tokens(dir, &s);
    const int64_t T = 5 * KERN_GEMM_MIN_TOKENS, chunk = 2 * KERN_GEMM_MIN_TOKENS;
    int32_t tok[5 * KERN_GEMM_MIN_TOKENS];
    for (int64_t i = 0; i < T; i++)
        tok[i] = s.seq[0][i % s.len[0]];
    int64_t V;
    float *best = run_logits_kern(dir, tok, T, 0, 1, KERN_BEST, &V);
    float *blas = run_logits_kern(dir, tok, T, 0, 1, KERN_BLAS, &V);
    float *chunked = run_logits_kern(dir, tok, T, chunk, 2, KERN_BLAS, &V);
    double d = max_abs_diff(best, blas, T * V);
    cr_expect(d > 0.0 && d <= GOLDEN_MAX_ABS, "blas vs fused prefill: max |d| %.3g (0 means sgemm was not used)", d);
    cr_expect_eq(memcmp(blas, chunked, (size_t)(T * V) * sizeof *blas), 0,
                 "blas: chunks of %lld on 2 threads differ from one %lld-token step", (long long)chunk, (long long)T);
    free(best);
    free(blas);
    free(chunked);
    tokens_free(&s);
    free(dir);
    th_rmtree(tmp);
}

/* A prompt long enough for the blocked GEMM (steps of >= KERN_GEMM_MIN_TOKENS
 * tokens) and, with routed experts, for two blocks of them (MOE_BLOCK; the
 * tiny 26B-A4B's 4 experts then take well over KERN_GEMM_MIN_TOKENS tokens
 * each): one step, chunks of 40 and 37 on 2 threads, and decode token by
 * token give the same bits, with the exact kernels and with the int8 ones. */
static void gemm_prefill_bitwise(const char *variant, int bits, enum kern_level level)
{
    char *tmp = th_mkdtemp();
    struct fixture_opts o = {.variant = variant, .layout = FX_MLX, .quant_bits = bits};
    char *dir = th_fixture(tmp, "ckpt", o);
    struct token_seqs s = {0};
    fixture_tokens(dir, &s);
    const int64_t T = strstr(variant, "26b") ? MOE_BLOCK + 37 : 3 * KERN_GEMM_MIN_TOKENS + 5;
    int32_t *tok = malloc((size_t)T * sizeof *tok);
    cr_assert(tok);
    for (int64_t i = 0; i < T; i++)
        tok[i] = s.seq[0][i % s.len[0]];
    int64_t V;
    float *whole = run_logits_kern(dir, tok, T, 0, 1, level, &V);
    static const int64_t chunks[] = {40, 37, 1};
    for (size_t c = 0; c < sizeof chunks / sizeof chunks[0]; c++) {
        float *part = run_logits_kern(dir, tok, T, chunks[c], 2, level, &V);
        cr_expect_eq(memcmp(whole, part, (size_t)(T * V) * sizeof *part), 0,
                     "%s q%d: chunks of %lld on 2 threads differ from one %lld-token step", variant, bits,
                     (long long)chunks[c], (long long)T);
        free(part);
    }
    free(whole);
    free(tok);
    tokens_free(&s);
    free(dir);
    th_rmtree(tmp);
}

/* A tiny E2B 4-bit MLX checkpoint in tmp, opened into m; its directory. */
static char *open_e2b_q4(const char *tmp, struct model *m)
{
    char *dir = th_fixture(tmp, "ckpt", (struct fixture_opts){.variant = "e2b", .layout = FX_MLX, .quant_bits = 4});
    struct err e = {0};
    cr_assert_eq(model_open(m, dir, &e), ERR_OK, "%s", e.msg);
    return dir;
}

/* The runner tells its progress after each layer of a step; golden make and
 * golden check tell it as positions, so that one long step moves their
 * progress line layer by layer. */
Test(runner, progress_by_layer)
{
    char *tmp = th_mkdtemp();
    struct model m;
    char *dir = open_e2b_q4(tmp, &m);
    struct runner r;
    struct err e = {0};
    const uint64_t L = (uint64_t)m.cfg.n_layers;
    struct th_progress p = {0};
    struct runner_opts o = *TH_RUNNER(1, KERN_BEST, 8);
    o.progress = (struct progress){th_progress_note, &p};
    cr_assert_eq(runner_init(&r, &m, &o, &e), ERR_OK, "%s", e.msg);
    int32_t tok[5] = {2, 3, 4, 5, 6};
    cr_assert_eq(runner_forward(&r, tok, 5, NULL, false, NULL, &e), ERR_OK, "%s", e.msg);
    cr_expect(p.calls == (int)L && p.done == L && p.total == L && !p.backwards && !strcmp(p.unit, "layers"),
              "a step of %llu layers: %d calls, last %llu of %llu %s", (unsigned long long)L, p.calls,
              (unsigned long long)p.done, (unsigned long long)p.total, p.unit);
    runner_free(&r);
    model_close(&m);

    char g[4200];
    snprintf(g, sizeof g, "%s/g.npz", tmp);
    struct th_progress pm = {0}, pc = {0};
    int64_t V;
    cr_assert_eq(golden_make_file(dir, tok, 5, 1, g, NULL, &(struct progress){th_progress_note, &pm}, &V, &e), ERR_OK, "%s",
                 e.msg);
    cr_expect(pm.calls == (int)L && pm.done == 5 && pm.total == 5 && !pm.backwards && !strcmp(pm.unit, "positions"),
              "golden make: %d calls, last %llu of %llu %s", pm.calls, (unsigned long long)pm.done,
              (unsigned long long)pm.total, pm.unit);
    struct golden_check_opts co = golden_check_defaults();
    co.chunk = 3;
    co.progress = (struct progress){th_progress_note, &pc};
    struct golden_result res;
    cr_assert_eq(golden_check_model(dir, g, &co, &res, &e), ERR_OK, "%s", e.msg);
    cr_expect(res.pass);
    cr_expect(pc.calls == 2 * (int)L && pc.done == 5 && pc.total == 5 && !pc.backwards,
              "golden check in chunks of 3: %d calls, last %llu of %llu", pc.calls, (unsigned long long)pc.done,
              (unsigned long long)pc.total);
    free(dir);
    th_rmtree(tmp);
}

/* The blocked GEMM's tiles are reserved at runner_init for each worker: a
 * long step grows none of them (a step allocates nothing). */
Test(runner, gemm_workspace_reserved)
{
    char *tmp = th_mkdtemp();
    struct model m;
    char *dir = open_e2b_q4(tmp, &m);
    struct runner r;
    struct err e = {0};
    const int64_t T = 2 * KERN_GEMM_MIN_TOKENS;
    cr_assert_eq(runner_init(&r, &m, TH_RUNNER(2, KERN_BEST, T), &e), ERR_OK, "%s", e.msg);
    if (!r.kt.qgemm) {
        runner_free(&r);
        model_close(&m);
        th_rmtree(tmp);
        free(dir);
        cr_skip_test("no blocked GEMM on this CPU");
    }
    size_t cap[2] = {r.kt.ws[0].cap, r.kt.ws[1].cap};
    cr_assert(cap[0] > 0 && cap[1] > 0, "reserved: %zu, %zu bytes", cap[0], cap[1]);
    int32_t tok[2 * KERN_GEMM_MIN_TOKENS];
    for (int64_t i = 0; i < T; i++)
        tok[i] = (int32_t)(2 + i);
    float *last = malloc((size_t)m.cfg.vocab_size * sizeof *last);
    cr_assert_eq(runner_prompt(&r, tok, T, 0, NULL, last, &e), ERR_OK, "%s", e.msg);
    cr_expect(r.kt.ws[0].cap == cap[0] && r.kt.ws[1].cap == cap[1], "a step grew a tile: %zu -> %zu, %zu -> %zu",
              cap[0], r.kt.ws[0].cap, cap[1], r.kt.ws[1].cap);
    free(last);
    runner_free(&r);
    model_close(&m);
    free(dir);
    th_rmtree(tmp);
}

Test(runner, gemm_prefill_bitwise_e2b_q4, .timeout = TH_TIMEOUT(120)) { gemm_prefill_bitwise("e2b", 4, KERN_BEST); }
Test(runner, gemm_prefill_bitwise_e2b_bf16, .timeout = TH_TIMEOUT(120)) { gemm_prefill_bitwise("e2b", 0, KERN_BEST); }
/* 6-bit weights have no fused kernel: the default runs kern_matmul_ref's
 * sums 16 rows at a time (the AVX-512, AVX2 or NEON refgemm): the scalar
 * reference's bits, in one step, in chunks and on any thread count. */
Test(runner, q6_best_equals_scalar, .timeout = TH_TIMEOUT(120))
{
    char *tmp = th_mkdtemp();
    char *dir = th_fixture(tmp, "ckpt", (struct fixture_opts){.variant = "e2b", .layout = FX_HF});
    char pack[4200];
    snprintf(pack, sizeof pack, "%s/q6.gpk", tmp);
    struct convert_opts co = {.align = 64, .plan = {.bits = 6, .group_size = 64}, .out = pack};
    struct convert_report rep;
    struct err e = {0};
    cr_assert_eq(convert_run(&rep, dir, &co, &e), ERR_OK, "%s", e.msg);
    convert_free(&rep);
    struct token_seqs s = {0};
    fixture_tokens(dir, &s);
    int64_t V, T = s.len[0];
    float *scalar = run_logits_kern(pack, s.seq[0], T, 0, 1, KERN_SCALAR, &V);
    float *best = run_logits_kern(pack, s.seq[0], T, 0, 2, KERN_BEST, &V);
    float *chunked = run_logits_kern(pack, s.seq[0], T, 5, 3, KERN_BEST, &V);
    cr_expect_eq(memcmp(best, scalar, (size_t)(T * V) * sizeof *best), 0, "6-bit: best and scalar differ");
    cr_expect_eq(memcmp(chunked, scalar, (size_t)(T * V) * sizeof *best), 0, "6-bit: chunks of 5 differ");
    free(best);
    free(scalar);
    free(chunked);
    tokens_free(&s);
    free(dir);
    th_rmtree(tmp);
}
Test(runner, gemm_prefill_bitwise_31b_q8, .timeout = TH_TIMEOUT(120)) { gemm_prefill_bitwise("31b", 8, KERN_BEST); }
Test(runner, gemm_prefill_bitwise_26b_q4, .timeout = TH_TIMEOUT(120)) { gemm_prefill_bitwise("26b-a4b", 4, KERN_BEST); }
Test(runner, gemm_prefill_bitwise_26b_q4_int8, .timeout = TH_TIMEOUT(120)) { gemm_prefill_bitwise("26b-a4b", 4, KERN_Q8); }

/* An explicit all-true attention mask and no mask: bitwise identical (seed 03). */
Test(runner, all_true_mask_equals_no_mask)
{
    char *tmp = th_mkdtemp();
    struct fixture_opts o = {.variant = "e2b", .layout = FX_MLX, .quant_bits = 4};
    char *dir = th_fixture(tmp, "ckpt", o);
    struct token_seqs s = {0};
    fixture_tokens(dir, &s);
    int64_t T = s.len[0];
    struct model m;
    struct err e = {0};
    cr_assert_eq(model_open(&m, dir, &e), ERR_OK, "%s", e.msg);
    int64_t V = m.cfg.vocab_size;
    float *a = malloc((size_t)(T * V) * sizeof *a), *b = malloc((size_t)(T * V) * sizeof *b);
    uint8_t *mask = malloc((size_t)(T * T));
    memset(mask, 1, (size_t)(T * T));
    for (int with_mask = 0; with_mask < 2; with_mask++) {
        struct runner r;
        cr_assert_eq(runner_init(&r, &m, TH_RUNNER(2, KERN_BEST, T), &e), ERR_OK, "%s", e.msg);
        cr_assert_eq(runner_forward(&r, s.seq[0], T, with_mask ? b : a, true, with_mask ? mask : NULL, &e), ERR_OK,
                     "%s", e.msg);
        runner_free(&r);
    }
    cr_expect_eq(memcmp(a, b, (size_t)(T * V) * sizeof *a), 0, "all-true mask changed the logits");
    /* and the mask is live: hiding key 0 from the last query changes its row */
    struct runner r;
    mask[(T - 1) * T + 0] = 0;
    cr_assert_eq(runner_init(&r, &m, TH_RUNNER(1, KERN_BEST, T), &e), ERR_OK, "%s", e.msg);
    cr_assert_eq(runner_forward(&r, s.seq[0], T, b, true, mask, &e), ERR_OK, "%s", e.msg);
    cr_expect_neq(memcmp(a + (T - 1) * V, b + (T - 1) * V, (size_t)V * sizeof *a), 0, "a masked key had no effect");
    runner_free(&r);
    free(a);
    free(b);
    free(mask);
    model_close(&m);
    tokens_free(&s);
    free(dir);
    th_rmtree(tmp);
}

/* A 4-bit pack of the bf16 fixture against the float golden: KLD nonzero and
 * bounded; a threshold set below it fails the verdict. */
Test(runner, q4_pack_kld_vs_float_golden, .timeout = TH_TIMEOUT(120))
{
    char *tmp = th_mkdtemp();
    struct fixture_opts o = {.variant = "e2b", .layout = FX_HF};
    char *dir = th_fixture(tmp, "ckpt", o);
    char pack[4200];
    snprintf(pack, sizeof pack, "%s/q4.gpk", tmp);
    struct convert_opts co = {.align = 64, .plan = {.bits = 4, .group_size = 64}, .out = pack};
    struct convert_report rep;
    struct err e = {0};
    cr_assert_eq(convert_run(&rep, dir, &co, &e), ERR_OK, "%s", e.msg);
    convert_free(&rep);
    char *gp = golden_path("e2b-bf16");
    struct golden g;
    cr_assert_eq(golden_read(gp, 0, &g, &e), ERR_OK, "%s", e.msg);
    int64_t V;
    float *logits = run_logits(pack, g.tokens, g.T, 0, 1, &V);
    struct golden_thresholds th = {-1, -1, -1, -1, -1, -1};
    struct golden_metrics mt;
    golden_compare(&g, logits, th, &mt);
    cr_expect(mt.kld_mean > 1e-6, "4-bit quantization must move the distribution: KLD %.3g", mt.kld_mean);
    cr_expect(mt.kld_mean < 0.5, "4-bit KLD %.3g is beyond any sane bound", mt.kld_mean);
    bool pass;
    th.kld_mean = mt.kld_mean * 2;
    json_object_put(golden_verdict(&mt, &th, &pass));
    cr_expect(pass, "threshold above the measured KLD passes");
    th.kld_mean = mt.kld_mean / 2;
    struct json_object *v = golden_verdict(&mt, &th, &pass);
    cr_expect(!pass, "threshold below the measured KLD fails");
    cr_expect_str_eq(json_object_get_string(json_object_object_get(v, "verdict")), "fail");
    json_object_put(v);
    free(logits);
    golden_free(&g);
    free(gp);
    free(dir);
    th_rmtree(tmp);
}

/* --kernels q8: int8 activations for the 4/8-bit matmuls, approximate by
 * design (not the MODEL.md §9 bar), so measured against the float64 goldens
 * with bars of their own, on quantized goldens of every topology. Seen on
 * 2026-11-23 (logged, KERN_NUMERICS 5): KL divergence per position at most
 * 4.9e-5 nats (e4b q4), top-1 agreement 1.000 everywhere, max |dlogit| 0.42-1.7 (against
 * 2e-5-7e-5 for the exact kernels: the int8 error sits on improbable tokens
 * of these random-weight fixtures). Bars: KLD max about 10x the worst seen,
 * top-1 allowing one flip in the 24 positions. And the invariants the exact
 * kernels keep, kept: decode steps on 2 threads give the bits of one
 * single-threaded prompt. */

struct q8_case {
    const char *variant;
    int quant;
};

static struct q8_case q8_cases[] = {{"e2b", 4}, {"e2b", 8}, {"e4b", 4}, {"26b-a4b", 4}, {"26b-a4b", 8}, {"31b", 8}};

INDEX_PARAMS(q8_kernels_vs_golden, q8_cases)

ParameterizedTest(size_t *i, runner, q8_kernels_vs_golden, .timeout = TH_TIMEOUT(120))
{
    const struct q8_case *c = &q8_cases[*i];
    char *tmp = th_mkdtemp(), gname[64];
    struct fixture_opts o = {.variant = c->variant, .layout = FX_MLX, .quant_bits = c->quant};
    char *dir = th_fixture(tmp, "ckpt", o);
    snprintf(gname, sizeof gname, "%s-q%d", c->variant, c->quant);
    char *gp = golden_path(gname);
    struct golden g;
    struct err e = {0};
    cr_assert_eq(golden_read(gp, 0, &g, &e), ERR_OK, "%s", e.msg);
    int64_t V, T = g.T;
    float *q8 = run_logits_kern(dir, g.tokens, T, 0, 1, KERN_Q8, &V);
    float *exact = run_logits(dir, g.tokens, T, 0, 1, &V);
    struct golden_thresholds th = {-1, -1, -1, -1, -1, -1};
    struct golden_metrics mq, me;
    golden_compare(&g, q8, th, &mq);
    golden_compare(&g, exact, th, &me);
    cr_log_info("q8 %s: max |dlogit| %.3g (exact kernels %.3g), KLD mean %.3g max %.3g, top-1 %.3f", gname,
                mq.max_abs, me.max_abs, mq.kld_mean, mq.kld_max, mq.top1);
    cr_expect(mq.max_abs > 10 * me.max_abs, "%s: q8 max |d| %.3g: the int8 path was not taken", gname, mq.max_abs);
    cr_expect(mq.kld_max <= Q8_KLD_MAX, "%s: q8 KLD max %.3g > %g", gname, mq.kld_max, Q8_KLD_MAX);
    cr_expect(mq.top1 >= Q8_TOP1_MIN, "%s: q8 top-1 agreement %.3f < %g", gname, mq.top1, Q8_TOP1_MIN);
    float *chunked = run_logits_kern(dir, g.tokens, T, 1, 2, KERN_Q8, &V); /* one token a step: decode */
    cr_expect_eq(memcmp(q8, chunked, (size_t)(T * V) * sizeof *q8), 0,
                 "%s: q8 decode on 2 threads differs from one prompt on 1 thread", gname);
    free(q8);
    free(exact);
    free(chunked);
    golden_free(&g);
    free(gp);
    free(dir);
    th_rmtree(tmp);
}

/* Weights that are finite but overflow the hidden state (every one the
 * largest bf16) are never silent: the step fails, naming the logit and the
 * first layer whose output is not finite. */
static void huge(uint16_t *w, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++)
        w[i] = 0x7F7F; /* 3.39e38 */
}

Test(runner, nonfinite_logits_name_the_layer)
{
    char *tmp = th_mkdtemp();
    char *dir = th_fixture(tmp, "ckpt", (struct fixture_opts){.variant = "e2b", .layout = FX_HF});
    th_edit_bf16(dir, "model.language_model.layers.3.mlp.down_proj.weight", huge);
    struct model m;
    struct err e = {0};
    cr_assert_eq(model_open(&m, dir, &e), ERR_OK, "%s", e.msg);
    struct runner r;
    cr_assert_eq(runner_init(&r, &m, TH_RUNNER(1, KERN_BEST, 8), &e), ERR_OK, "%s", e.msg);
    int32_t tok[5] = {2, 3, 4, 5, 6};
    float *logits = malloc((size_t)(5 * m.cfg.vocab_size) * sizeof *logits);
    cr_assert(logits);
    cr_assert_eq(runner_forward(&r, tok, 5, logits, true, NULL, &e), ERR_RANGE, "non-finite logits returned: %s",
                 e.msg);
    cr_expect(strstr(e.msg, "not finite: the hidden state is first non-finite after layer 3"), "%s", e.msg);
    free(logits);
    runner_free(&r);
    model_close(&m);
    free(dir);
    th_rmtree(tmp);
}
