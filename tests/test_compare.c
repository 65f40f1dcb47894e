/* test_compare.c - gempack compare (golden/compare.c): the cost of a
 * conversion per position and per layer. A is a bf16 fixture, B its 4-bit
 * pack, on the fixture prompt. An error planted in one layer's weights must
 * be found at that layer, and --keep-a must isolate it. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "converter/convert.h"
#include "core/fileio.h"
#include "golden/compare.h"
#include "tests/helpers.h"

static const char *const variants[] = {"e2b", "e4b", "12b", "26b-a4b", "31b"};
#define N_VARIANTS (sizeof variants / sizeof variants[0])

static struct token_seqs prompt_of(const char *dir)
{
    struct token_seqs s = {0};
    struct err e = {0};
    char *path = fio_join(dir, "tokens.json");
    cr_assert_eq(tokens_read_file(path, &s, &e), ERR_OK, "%s", e.msg);
    free(path);
    return s;
}

static char *pack4(const char *tmp, const char *src, const char *name)
{
    char *out = fio_join(tmp, name);
    struct convert_opts co = {.align = 64, .out = out, .plan = {.bits = 4, .group_size = 64}};
    struct convert_report rep;
    struct err e = {0};
    cr_assert_eq(convert_run(&rep, src, &co, &e), ERR_OK, "%s", e.msg);
    convert_free(&rep);
    return out;
}

/* Negates every other weight (the bf16 sign bit): an error in that one layer
 * that no norm after it undoes (a uniform scale would be: the block's
 * post-norm removes it). */
static void negate_odd(uint16_t *w, uint64_t n)
{
    for (uint64_t i = 1; i < n; i += 2)
        w[i] ^= 0x8000;
}

static void plant(const char *dir, const char *key)
{
    th_edit_bf16(dir, key, negate_odd);
}

static struct compare_opts opts(int64_t keep_a)
{
    return (struct compare_opts){.threads = 1, .keep_a = keep_a, .th = {-1, -1, -1, -1, -1, -1}};
}

/* A form against itself: nothing to report. Its progress: positions, after
 * each layer of each of the two models. */
Test(compare, identical)
{
    char *tmp = th_mkdtemp();
    char *a = th_fixture(tmp, "a", (struct fixture_opts){.variant = "e2b", .layout = FX_HF});
    struct token_seqs s = prompt_of(a);
    struct compare_result r;
    struct compare_opts o = opts(0);
    struct th_progress p = {0};
    o.progress = (struct progress){th_progress_note, &p};
    struct err e = {0};
    cr_assert_eq(compare_models(a, a, &s, &o, &r, &e), ERR_OK, "%s", e.msg);
    cr_expect(p.calls == 2 * (int)r.L * s.n && p.done == (uint64_t)r.n_pos && p.total == (uint64_t)r.n_pos &&
                  !p.backwards && !strcmp(p.unit, "positions"),
              "%d calls, last %llu of %llu %s", p.calls, (unsigned long long)p.done, (unsigned long long)p.total, p.unit);
    cr_assert_eq(r.m.kld_mean, 0.0);
    cr_assert_eq(r.kl_ba_mean, 0.0);
    cr_assert_eq(r.m.max_abs, 0.0);
    cr_assert_eq(r.m.regret_max, 0.0);
    for (int k = 0; k < COMPARE_TOPK; k++)
        cr_assert_eq(r.m.topk[k], 1.0);
    for (int64_t i = 0; i < r.n_pos; i++)
        cr_assert(r.pos[i].nmse == 0.0 && fabs(r.pos[i].cosine - 1.0) < 1e-12, "position %lld: NMSE %g, cosine %.17g",
                  (long long)i, r.pos[i].nmse, r.pos[i].cosine);
    for (int64_t i = 0; i < r.L; i++) {
        cr_assert_eq(r.layers[i].hidden.rel, 0.0, "layer %lld", (long long)i);
        cr_assert(isinf(r.layers[i].hidden.sqnr_db));
    }
    cr_assert_eq(r.jump_layer, -1);
    cr_assert(r.pass);
    compare_free(&r);
    tokens_free(&s);
    free(a);
    th_rmtree(tmp);
}

/* A position whose B logits are NaN is the worst on every measure: no
 * top-K agreement, infinite KL both ways, regret and error, no cosine. */
Test(compare, broken_positions_are_the_worst_value)
{
    const int64_t n = 3, V = 12;
    double a[36];
    float b[36];
    for (int64_t i = 0; i < n * V; i++) {
        a[i] = (double)((i * 7919) % 23) * 0.25;
        b[i] = (float)a[i];
    }
    for (int64_t k = 0; k < V; k++)
        b[V + k] = NAN;
    struct compare_pos pos[3];
    cr_assert_eq(compare_positions(a, b, n, V, pos), ERR_OK);
    cr_assert(pos[0].kl_ab == 0.0 && pos[0].rank == 0 && pos[2].kl_ab == 0.0 && pos[2].rank == 0);
    cr_assert(isinf(pos[1].kl_ab) && isinf(pos[1].kl_ba) && isinf(pos[1].regret) && isinf(pos[1].max_abs) &&
              isinf(pos[1].nmse) && isnan(pos[1].cosine));
    cr_assert_eq(pos[1].rank, COMPARE_TOPK);
    cr_assert(pos[1].p_top > 0.0 && pos[1].p_top <= 1.0, "A's top probability %g", pos[1].p_top);
}

/* Every topology: the 4-bit pack's cost is nonzero and bounded, per position
 * consistent with the totals; a layer broken in the source is where the
 * 4-bit pack's per-layer error jumps, and --keep-a shows it alone. */
Test(compare, four_bit_packs_and_a_planted_error, .timeout = TH_TIMEOUT(300))
{
    for (size_t v = 0; v < N_VARIANTS; v++) {
        char *tmp = th_mkdtemp();
        char *a = th_fixture(tmp, "a", (struct fixture_opts){.variant = variants[v], .layout = FX_HF});
        char *b = th_fixture(tmp, "b", (struct fixture_opts){.variant = variants[v], .layout = FX_HF});
        struct token_seqs s = prompt_of(a);
        char *pa = pack4(tmp, a, "a.gpk");
        struct compare_result r;
        struct compare_opts o = opts(0);
        struct err e = {0};
        cr_assert_eq(compare_models(a, pa, &s, &o, &r, &e), ERR_OK, "%s", e.msg);
        const char *what = variants[v];
        cr_expect(r.m.kld_mean > 1e-6 && r.m.kld_mean < 0.05, "%s: KL(A||B) %g", what, r.m.kld_mean);
        cr_expect(r.kl_ba_mean > 0.0 && r.kl_ba_mean < 0.05, "%s: KL(B||A) %g", what, r.kl_ba_mean);
        cr_expect(r.m.topk[0] >= 0.75, "%s: top-1 %g", what, r.m.topk[0]);
        for (int k = 1; k < COMPARE_TOPK; k++)
            cr_expect(r.m.topk[k] >= r.m.topk[k - 1], "%s: top-%d below top-%d", what, k + 1, k);
        double kl = 0.0;
        for (int64_t i = 0; i < r.n_pos; i++) {
            kl += r.pos[i].kl_ab;
            cr_expect(r.pos[i].regret >= 0.0, "%s: regret %g", what, r.pos[i].regret);
            cr_expect(r.pos[i].rank != 0 || r.pos[i].regret == 0.0, "%s: same top token, regret %g", what,
                      r.pos[i].regret);
            cr_expect(r.pos[i].nmse > 0.0 && r.pos[i].nmse < 1.0 && r.pos[i].cosine > 0.0 && r.pos[i].cosine < 1.0,
                      "%s: position %lld: NMSE %g, cosine %.17g", what, (long long)i, r.pos[i].nmse, r.pos[i].cosine);
        }
        cr_expect(fabs(kl / (double)r.n_pos - r.m.kld_mean) <= 1e-12 * (1 + kl), "%s: positions vs total", what);
        int64_t n_bins = 0;
        double regret = 0.0, nmse = 0.0; /* the bins' means, weighted by their counts: the positions' means */
        for (int k = 0; k < COMPARE_BINS; k++) {
            n_bins += r.bins[k].n;
            regret += r.bins[k].regret * (double)r.bins[k].n;
            nmse += r.bins[k].nmse * (double)r.bins[k].n;
        }
        cr_expect_eq(n_bins, r.n_pos);
        cr_expect(fabs(regret / (double)r.n_pos - r.m.regret_mean) <= 1e-12 * (1 + regret), "%s: bins' regret", what);
        for (int64_t i = 0; i < r.n_pos; i++)
            nmse -= r.pos[i].nmse;
        cr_expect(fabs(nmse) <= 1e-12, "%s: bins' NMSE against the positions'", what);
        for (int64_t i = 0; i < r.L; i++)
            cr_expect(r.layers[i].hidden.rel > 0.0 && r.layers[i].hidden.rel < 0.5, "%s: layer %lld: %g", what,
                      (long long)i, r.layers[i].hidden.rel);
        int64_t k = r.L / 2; /* the planted layer */
        compare_free(&r);
        o = opts(k);
        cr_assert_eq(compare_models(a, pa, &s, &o, &r, &e), ERR_OK, "%s", e.msg);
        struct compare_layer clean = r.layers[k];
        compare_free(&r);

        char key[128];
        snprintf(key, sizeof key, "model.language_model.layers.%lld.mlp.down_proj.weight", (long long)k);
        plant(b, key);
        char *pb = pack4(tmp, b, "b.gpk");
        o = opts(0);
        cr_assert_eq(compare_models(a, pb, &s, &o, &r, &e), ERR_OK, "%s", e.msg);
        cr_expect_eq(r.jump_layer, k, "%s: planted in layer %lld, jump found at %lld (x%g)", what, (long long)k,
                     (long long)r.jump_layer, r.jump_ratio);
        compare_free(&r);
        o = opts(k);
        cr_assert_eq(compare_models(a, pb, &s, &o, &r, &e), ERR_OK, "%s", e.msg);
        for (int64_t i = 0; i < k; i++)
            cr_expect_eq(r.layers[i].hidden.rel, 0.0, "%s: layer %lld is A's", what, (long long)i);
        /* the residual stream dilutes the layer's output; its feed-forward branch shows the plant whole */
        cr_expect(r.layers[k].hidden.rel > 3 * clean.hidden.rel, "%s: layer %lld alone: %g, without the plant %g",
                  what, (long long)k, r.layers[k].hidden.rel, clean.hidden.rel);
        cr_expect(r.layers[k].mlp.rel > 10 * clean.mlp.rel, "%s: layer %lld's feed-forward: %g, without the plant %g",
                  what, (long long)k, r.layers[k].mlp.rel, clean.mlp.rel);
        cr_expect(r.layers[k].attn.rel <= 1.0001 * clean.attn.rel, "%s: layer %lld's attention is not planted: %g / %g",
                  what, (long long)k, r.layers[k].attn.rel, clean.attn.rel);
        compare_free(&r);
        tokens_free(&s);
        free(a);
        free(b);
        free(pa);
        free(pb);
        th_rmtree(tmp);
    }
}

/* --kv-bits on B: the cost of a quantized KV cache, measured the same way. */
Test(compare, kv_cache_cost)
{
    char *tmp = th_mkdtemp();
    char *a = th_fixture(tmp, "a", (struct fixture_opts){.variant = "31b", .layout = FX_HF});
    struct token_seqs s = prompt_of(a);
    struct compare_result r4, r8;
    struct compare_opts o = opts(0);
    struct err e = {0};
    o.kv_b = (struct kv_opts){.bits = 4, .group_size = 32};
    cr_assert_eq(compare_models(a, a, &s, &o, &r4, &e), ERR_OK, "%s", e.msg);
    o.kv_b.bits = 8;
    cr_assert_eq(compare_models(a, a, &s, &o, &r8, &e), ERR_OK, "%s", e.msg);
    cr_expect(r8.m.kld_mean > 0.0 && r8.m.kld_mean < r4.m.kld_mean, "kv8 %g, kv4 %g", r8.m.kld_mean, r4.m.kld_mean);
    cr_expect_eq(r4.layers[0].hidden.rel == 0.0, false, "layer 0 attends over a quantized cache");
    compare_free(&r4);
    compare_free(&r8);
    tokens_free(&s);
    free(a);
    th_rmtree(tmp);
}

/* Thresholds give the verdict, as golden check's do. */
Test(compare, thresholds)
{
    char *tmp = th_mkdtemp();
    char *a = th_fixture(tmp, "a", (struct fixture_opts){.variant = "e2b", .layout = FX_HF});
    struct token_seqs s = prompt_of(a);
    char *pa = pack4(tmp, a, "a.gpk");
    struct compare_result r;
    struct compare_opts o = opts(0);
    struct err e = {0};
    o.th.kld_mean = 1e-9;
    cr_assert_eq(compare_models(a, pa, &s, &o, &r, &e), ERR_OK, "%s", e.msg);
    cr_expect_not(r.pass, "KL %g over 1e-9 passes", r.m.kld_mean);
    compare_free(&r);
    o.th.kld_mean = 1.0;
    cr_assert_eq(compare_models(a, pa, &s, &o, &r, &e), ERR_OK, "%s", e.msg);
    cr_expect(r.pass);
    compare_free(&r);
    o = opts(99);
    cr_assert_eq(compare_models(a, pa, &s, &o, &r, &e), ERR_USAGE);
    cr_expect(strstr(e.msg, "'keep_a' 99: expected 0..10"), "%s", e.msg);
    compare_free(&r);
    tokens_free(&s);
    free(a);
    free(pa);
    th_rmtree(tmp);
}
