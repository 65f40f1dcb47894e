/* test_kvcache.c - runner/kvcache: the store's entries and their byte form
 * for the prefix cache; the quantized KV cache (--kv-bits,
 * --kv-group, --kv-start, skip-last): KLD and top-1 against the float cache
 * of the same model, the stored layout with KV sharing, bitwise equality of
 * prefill, decode and chunked runs, option validation, and the seed report's
 * "Test 9" regression suite (seeds/02), including quantized and float runs
 * alternating on one cold prefix cache.
 *
 * KLD numbers are KL(P_float || P_quantized) per position in nats, from
 * float64 log-softmax (golden_compare, cross-checked by a direct float64
 * computation in kld_measure), against the float-cache logits of the same
 * model. Fixtures and helpers: run_helpers.h. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/helpers.h"
#include "tests/run_helpers.h"

/* The bar for 8-bit caches. */
#define KV8_KLD_MEAN 1e-3
#define KV8_TOP1 0.95
/* 4-bit caches: the issue asks for no crash and a measured, stated number.
 * Measured here (kld_*, test9_*; fixture prompt, group 64): mean KLD
 * e2b 6.7e-6 (skip-last on) / 1.4e-5 (off), 2.0e-5 on the 96-token prompt;
 * 26b-a4b 6.2e-7; 31b 3.2e-5 / 3.8e-5; top-1 agreement 1.0 everywhere.
 * The 4-bit/8-bit ratio seen is 147..316, as expected: the affine step is
 * (max-min)/15 against /255, 17x the rounding error, and the KLD grows with
 * its square (289x). The bound 5e-4 keeps a margin of >10x over the worst
 * fixture (31b) and is still far below what a broken dequantization or a
 * float/quantized mix-up gives (KLDs of order 0.1..1; ln 512 = 6.2). */
#define KV4_KLD_MEAN 5e-4
#define KV4_TOP1 0.95

/* ---------------------------------------------------------------- */
/* KV quantization                                                   */
/* ---------------------------------------------------------------- */

/* kv 8 and kv 4 (skip-last on), kv 4 and kv 8 (skip-last off) against the
 * float cache of the same model on the fixture prompt. */
static void kv_kld(const char *variant, int want_float_layer)
{
    struct fx f;
    fx_open(&f, variant);
    struct kv_opts fl = kvo(0, true);
    struct run_info fi, qi;
    float *ref = run_kv(&f.m, &fl, f.tok, f.T, 0, &fi);
    cr_expect_eq(fi.float_layer, -1, "a float cache keeps no 'float layer'");
    cr_assert(all_finite(ref, f.T * f.V));
    static const struct {
        int bits;
        bool skip;
    } cfg[] = {{8, true}, {4, true}, {4, false}, {8, false}};
    float *q4on = NULL;
    for (size_t c = 0; c < sizeof cfg / sizeof cfg[0]; c++) {
        struct kv_opts kv = kvo(cfg[c].bits, cfg[c].skip);
        float *got = run_kv(&f.m, &kv, f.tok, f.T, 0, &qi);
        char what[160], name[100];
        snprintf(what, sizeof what, "%s %s", variant, kv_name(&kv, name, sizeof name));
        cr_expect_eq(qi.float_layer, cfg[c].skip ? want_float_layer : -1, "%s: kv_float_layer %d", what,
                     qi.float_layer);
        cr_expect_lt(qi.cache_bytes, fi.cache_bytes, "%s: cache %zu bytes, float %zu", what, qi.cache_bytes,
                     fi.cache_bytes);
        if (!cfg[c].skip) /* (with skip-last on, the float layer's 256-entry block dominates the tiny fixtures) */
            cr_expect_lt(qi.cache_bytes * 2, fi.cache_bytes, "%s: a quantized cache is less than half the float one",
                         what);
        cr_assert(all_finite(got, f.T * f.V), "%s: non-finite logits", what);
        struct golden_metrics mt;
        kld_measure(ref, got, f.T, f.V, &mt);
        kld_report(what, &mt);
        cr_expect(mt.kld_mean > 0.0, "%s: a quantized cache must move the distribution", what);
        cr_expect(isfinite(mt.kld_mean) && isfinite(mt.kld_max), "%s", what);
        if (cfg[c].bits == 8) {
            cr_expect_lt(mt.kld_mean, KV8_KLD_MEAN, "%s: mean KLD %.3g", what, mt.kld_mean);
            cr_expect_geq(mt.top1, KV8_TOP1, "%s: top-1 %.3f", what, mt.top1);
        } else {
            cr_expect_lt(mt.kld_mean, KV4_KLD_MEAN, "%s: mean KLD %.3g", what, mt.kld_mean);
            cr_expect_geq(mt.top1, KV4_TOP1, "%s: top-1 %.3f", what, mt.top1);
        }
        if (cfg[c].bits == 4 && cfg[c].skip) {
            q4on = got;
            continue;
        }
        if (cfg[c].bits == 4 && q4on)
            cr_expect_neq(memcmp(q4on, got, (size_t)(f.T * f.V) * sizeof *got), 0,
                          "%s: skip-last on and off give the same logits: the float layer is not float", what);
        free(got);
    }
    free(q4on);
    free(ref);
    fx_close(&f);
}

Test(kvcache, kld_e2b_shared_kv, .timeout = TH_TIMEOUT(120)) { kv_kld("e2b", 4); }
Test(kvcache, kld_26b_moe, .timeout = TH_TIMEOUT(120)) { kv_kld("26b-a4b", 5); }
Test(kvcache, kld_31b_k_eq_v, .timeout = TH_TIMEOUT(120)) { kv_kld("31b", 11); }

/* The stored representation: KV-shared layers own nothing (they read their
 * source); quantized layers hold codes only, no float copy; the float
 * layer (skip-last) holds floats only. */
static void kv_layout(const char *variant, bool skip)
{
    struct fx f;
    fx_open(&f, variant);
    struct kv_opts kv = kvo(4, skip);
    struct runner r;
    struct err e = {0};
    runner_open(&r, &f.m, &kv, 1);
    float *last = malloc((size_t)f.V * sizeof *last);
    cr_assert_eq(runner_prompt(&r, f.tok, f.T, 0, NULL, last, &e), ERR_OK, "%s", e.msg);
    const struct gp_config *c = &f.m.cfg;
    int owners = 0, shared = 0;
    for (int64_t i = 0; i < c->n_layers; i++) {
        const struct kv_cache *kc = &r.seq[0].cache[i];
        if (c->layers[i].shared) {
            shared++;
            cr_expect(!kc->rows.f && !kc->rows.q, "%s layer %lld is KV-shared but holds a cache", variant,
                      (long long)i);
            cr_expect(!c->layers[c->layers[i].kv_src].shared, "its source %d owns a cache", c->layers[i].kv_src);
            cr_expect_eq(c->layers[i].type, c->layers[c->layers[i].kv_src].type);
            continue;
        }
        owners++;
        if ((int)i == r.kv_float_layer) {
            cr_expect(kc->rows.f && !kc->rows.q, "%s layer %lld (skip-last) must be float only", variant,
                      (long long)i);
            cr_expect_eq(kc->fmt.bits, 0);
        } else {
            cr_expect(!kc->rows.f && kc->rows.q, "%s layer %lld must hold codes only (no float copy)", variant,
                      (long long)i);
            cr_expect_eq(kc->fmt.bits, 4);
            cr_expect_leq(kc->fmt.gs, kc->fmt.d, "groups stay within a head");
            cr_expect_eq(kc->fmt.d % kc->fmt.gs, 0);
        }
    }
    cr_expect_eq(owners, (int)c->first_shared);
    cr_expect_eq(shared, (int)(c->n_layers - c->first_shared));
    if (skip) {
        /* the last KV-owning full layer, the source of every KV-shared full layer */
        int last_full = -1;
        for (int64_t i = 0; i < c->first_shared; i++)
            if (c->layers[i].type == LT_FULL)
                last_full = (int)i;
        cr_expect_eq(r.kv_float_layer, last_full);
        for (int64_t i = c->first_shared; i < c->n_layers; i++)
            if (c->layers[i].type == LT_FULL)
                cr_expect_eq(c->layers[i].kv_src, r.kv_float_layer, "shared full layer %lld reads the float layer",
                             (long long)i);
    } else {
        cr_expect_eq(r.kv_float_layer, -1);
    }
    free(last);
    runner_free(&r);
    fx_close(&f);
}

Test(kvcache, layout_e2b_skip_on) { kv_layout("e2b", true); }
Test(kvcache, layout_e2b_skip_off) { kv_layout("e2b", false); }
Test(kvcache, layout_31b_skip_on) { kv_layout("31b", true); }

/* Entries are stored (quantized) before attention reads them, so prefill,
 * decode and chunked:N are bitwise identical with a quantized cache. */
static void kv_modes(const char *variant, int bits, bool skip)
{
    struct fx f;
    fx_open(&f, variant);
    struct kv_opts kv = kvo(bits, skip);
    float *pre = run_kv(&f.m, &kv, f.tok, f.T, 0, NULL);
    static const int64_t chunks[] = {1, 3, 5, 8, 9, 17};
    for (size_t k = 0; k < sizeof chunks / sizeof chunks[0]; k++) {
        float *other = run_kv(&f.m, &kv, f.tok, f.T, chunks[k], NULL);
        cr_expect(rows_equal(pre, other, f.T, f.V), "%s kv%d: chunk %lld differs from prefill (max |d| %.3g)",
                  variant, bits, (long long)chunks[k], max_abs_diff(pre, other, f.T * f.V));
        free(other);
    }
    free(pre);
    fx_close(&f);
}

Test(kvcache, kv4_modes_bitwise_e2b_skip_off) { kv_modes("e2b", 4, false); }
Test(kvcache, kv4_modes_bitwise_e2b_skip_on) { kv_modes("e2b", 4, true); }
Test(kvcache, kv4_modes_bitwise_26b) { kv_modes("26b-a4b", 4, true); }
Test(kvcache, kv8_modes_bitwise_31b) { kv_modes("31b", 8, false); }

Test(kvcache, opts_validate)
{
    struct err e = {0};
    static const int ok_bits[] = {0, 4, 8}, ok_groups[] = {32, 64, 128};
    for (int b = 0; b < 3; b++)
        for (int g = 0; g < 3; g++) {
            struct kv_opts o = {.bits = ok_bits[b], .group_size = ok_groups[g], .start = 7};
            cr_expect_eq(kv_opts_validate(&o, &e), ERR_OK, "bits %d group %d: %s", o.bits, o.group_size, e.msg);
        }
    static const int bad_bits[] = {3, 16, 1, 2, 6, -4};
    for (size_t i = 0; i < sizeof bad_bits / sizeof bad_bits[0]; i++) {
        struct kv_opts o = {.bits = bad_bits[i], .group_size = 64};
        memset(&e, 0, sizeof e);
        cr_expect_eq(kv_opts_validate(&o, &e), ERR_USAGE, "bits %d accepted", o.bits);
        cr_expect(strstr(e.msg, "4 and 8"), "message lists the accepted values: %s", e.msg);
    }
    static const int bad_groups[] = {48, 0, 16, 256, 96};
    for (size_t i = 0; i < sizeof bad_groups / sizeof bad_groups[0]; i++) {
        struct kv_opts o = {.bits = 4, .group_size = bad_groups[i]};
        memset(&e, 0, sizeof e);
        cr_expect_eq(kv_opts_validate(&o, &e), ERR_USAGE, "group %d accepted", o.group_size);
        cr_expect(strstr(e.msg, "32, 64 and 128"), "message lists the accepted values: %s", e.msg);
    }
    struct kv_opts neg = {.bits = 4, .group_size = 64, .start = -1};
    cr_expect_eq(kv_opts_validate(&neg, &e), ERR_USAGE, "negative --kv-start accepted");

    /* runner_init refuses them too, before any allocation */
    struct fx f;
    fx_open(&f, "e2b");
    struct runner r;
    struct kv_opts three = {.bits = 3, .group_size = 64};
    cr_expect_eq(runner_init(&r, &f.m, &(struct runner_opts){.threads = 1, .kv = three, .n_seq = 1, .max_step = 1,
                                                             .max_context = 1}, &e), ERR_USAGE);
    cr_expect_null(r.seq, "nothing allocated for a rejected configuration");
    runner_free(&r);
    fx_close(&f);
}

/* Position p's K and V rows in entry_store_and_bytes (2 heads of 4). */
static void entry_values(int64_t p, float k[8], float v[8])
{
    for (int i = 0; i < 8; i++) {
        k[i] = (float)(100 * p + i);
        v[i] = -(float)(100 * p + i) - 0.5f;
    }
}

/* Head h's K (which 0) or V row of position p in `a` equals that in `b`. */
static void expect_same_head(const struct kv_fmt *f, const struct kv_cache *a, const struct kv_cache *b, int64_t p,
                             int h, int which, const char *what)
{
    float x[4], buf[4];
    memcpy(x, kv_rows_head(f, &a->rows, kv_cache_slot(a, p), p, h, which, buf), sizeof x);
    cr_expect_eq(memcmp(x, kv_rows_head(f, &b->rows, kv_cache_slot(b, p), p, h, which, buf), sizeof x), 0,
                 "%s: position %lld head %d %s", what, (long long)p, h, which ? "V" : "K");
}

/* The store itself: a ring of 3 slots, 2 heads of 4 values, positions 0..4
 * (float below 4, 8-bit from 4). Each head's K and V row reads back as put;
 * an entry as bytes is its K row then its V row (a quantized one as
 * stored), and such bytes restore it in another cache of the same format;
 * entries copied from a chunk's pending rows (2 slots) into a full cache (5)
 * read back the same. */
Test(kvcache, entry_store_and_bytes)
{
    struct err e = {0};
    struct kv_fmt f;
    kv_fmt_init(&f, 2, 4, 8, 4, 4);
    struct kv_cache a, b, full;
    struct kv_rows pend = {0};
    cr_assert_eq(kv_cache_init(&a, &f, true, 3, &e), ERR_OK, "%s", e.msg);
    cr_assert_eq(kv_cache_init(&b, &f, true, 3, &e), ERR_OK, "%s", e.msg);
    cr_assert_eq(kv_cache_init(&full, &f, false, 5, &e), ERR_OK, "%s", e.msg);
    cr_assert_eq(kv_rows_alloc(&f, &pend, 2, &e), ERR_OK, "%s", e.msg);
    float k[8], v[8], buf[4];
    for (int64_t p = 0; p < 5; p++) {
        entry_values(p, k, v);
        kv_rows_put(&f, &a.rows, kv_cache_slot(&a, p), p, k, v);
    }
    for (int64_t p = 2; p < 4; p++) /* float entries, still in the ring */
        for (int h = 0; h < 2; h++)
            for (int i = 0; i < 4; i++) {
                cr_expect_eq(kv_rows_head(&f, &a.rows, kv_cache_slot(&a, p), p, h, 0, buf)[i], (float)(100 * p + 4 * h + i),
                             "position %lld head %d K[%d]", (long long)p, h, i);
                cr_expect_eq(kv_rows_head(&f, &a.rows, kv_cache_slot(&a, p), p, h, 1, buf)[i],
                             -(float)(100 * p + 4 * h + i) - 0.5f, "position %lld head %d V[%d]", (long long)p, h, i);
            }
    uint8_t bytes[256];
    cr_assert_eq(kv_cache_entry_io(&a, 3, NULL, false), 2 * 8 * sizeof(float), "a float entry's size");
    cr_assert_eq(kv_cache_entry_io(&a, 3, bytes, false), 2 * 8 * sizeof(float));
    for (int i = 0; i < 8; i++) {
        float x, y;
        memcpy(&x, bytes + 4 * i, 4);
        memcpy(&y, bytes + 32 + 4 * i, 4);
        cr_expect_eq(x, (float)(300 + i), "byte form K[%d]", i);
        cr_expect_eq(y, -(float)(300 + i) - 0.5f, "byte form V[%d]", i);
    }
    cr_assert_eq(kv_cache_entry_io(&b, 3, bytes, true), 2 * 8 * sizeof(float));
    size_t qn = kv_cache_entry_io(&a, 4, NULL, false);
    cr_assert_eq(qn, f.qbytes, "a quantized entry's size");
    cr_assert_eq(kv_cache_entry_io(&a, 4, bytes, false), qn);
    cr_expect_eq(memcmp(bytes, a.rows.q + (size_t)kv_cache_slot(&a, 4) * f.qbytes, qn), 0, "stored bytes as they are");
    cr_assert_eq(kv_cache_entry_io(&b, 4, bytes, true), qn);
    for (int64_t p = 3; p < 5; p++) {
        entry_values(p, k, v);
        kv_rows_put(&f, &pend, p - 3, p, k, v);
        kv_rows_copy(&f, &full.rows, kv_cache_slot(&full, p), &pend, p - 3, p);
    }
    for (int64_t p = 3; p < 5; p++)
        for (int h = 0; h < 2; h++)
            for (int which = 0; which < 2; which++) {
                expect_same_head(&f, &a, &b, p, h, which, "restored from bytes");
                expect_same_head(&f, &a, &full, p, h, which, "copied from pending rows");
            }
    kv_rows_free(&pend);
    kv_cache_free(&a);
    kv_cache_free(&b);
    kv_cache_free(&full);
}

/* --kv-start N: positions below N stay float. */
Test(kvcache, kv_start)
{
    struct fx f;
    fx_open(&f, "e2b");
    int64_t T = f.T, V = f.V;
    struct kv_opts fl = kvo(0, false), q0 = kvo(4, false);
    struct run_info fi, qi;
    float *ref = run_kv(&f.m, &fl, f.tok, T, 0, &fi);
    float *all = run_kv(&f.m, &q0, f.tok, T, 0, NULL);
    cr_assert(!rows_equal(ref, all, T, V));
    static const int64_t never[] = {24, 25, 1000};
    for (size_t k = 0; k < 3; k++) {
        struct kv_opts kv = kvo(4, false);
        kv.start = never[k];
        float *got = run_kv(&f.m, &kv, f.tok, T, 0, NULL);
        cr_expect(rows_equal(ref, got, T, V), "start %lld >= prompt length %lld: not bitwise the float cache",
                  (long long)never[k], (long long)T);
        free(got);
        got = run_kv(&f.m, &kv, f.tok, T, 1, NULL);
        cr_expect(rows_equal(ref, got, T, V), "start %lld, decode mode: not bitwise the float cache",
                  (long long)never[k]);
        free(got);
    }
    /* in the middle: rows before it see float keys only (bitwise the float
     * cache); every later row sees quantized keys (differs from float); and
     * the early float entries make it differ from start 0 too */
    int64_t S = 12;
    struct kv_opts mid = kvo(4, false);
    mid.start = S;
    float *got = run_kv(&f.m, &mid, f.tok, T, 0, &qi);
    cr_expect(rows_equal(ref, got, S, V), "rows below --kv-start must equal the float cache");
    for (int64_t t = S; t < T; t++)
        cr_expect(!rows_equal(ref + t * V, got + t * V, 1, V), "row %lld (>= start) equals the float cache",
                  (long long)t);
    cr_expect(!rows_equal(all, got, T, V), "start %lld equals start 0", (long long)S);
    cr_expect(!rows_equal(all + S * V, got + S * V, T - S, V), "rows past start equal those of start 0");
    /* and the same in decode mode */
    float *dec = run_kv(&f.m, &mid, f.tok, T, 1, NULL);
    cr_expect(rows_equal(got, dec, T, V), "start %lld: decode differs from prefill", (long long)S);
    struct golden_metrics mt;
    kld_measure(ref, got, T, V, &mt);
    kld_report("e2b kv4 start 12 skip-last off", &mt);
    free(dec);
    free(got);
    free(all);
    free(ref);
    fx_close(&f);
}

/* ---------------------------------------------------------------- */
/* Test 9 (seeds/02): QuantizedKVCache regression                    */
/* ---------------------------------------------------------------- */

/* A prompt and the float baseline's greedy continuation; the quantized run
 * is fed the same tokens (prefill, then decode one token at a time) so
 * every position is compared: KLD and top-1 against the float baseline,
 * plus a free-running generation (no crash, tokens in the vocabulary). */
static void test9(const char *what, int bits, bool skip, int64_t P, double kld_bound, double top1_min)
{
    struct fx f;
    fx_open(&f, "e2b");
    int64_t V = f.V, T = P + GEN;
    int32_t *tok = malloc((size_t)T * sizeof *tok);
    for (int64_t t = 0; t < P; t++)
        tok[t] = t < 24 ? f.tok[t] : (int32_t)((f.tok[(t * 5) % 24] + 13 * (t / 24)) % 512);
    struct kv_opts fl = kvo(0, true), kv = kvo(bits, skip);
    int32_t fgen[GEN], qgen[GEN];
    session_one(&f.m, &fl, tok, P, 1, 0.0f, 0, NULL, fgen);
    memcpy(tok + P, fgen, sizeof fgen);
    float *base = run_prefill_decode(&f.m, &fl, tok, P, T);
    float *got = run_prefill_decode(&f.m, &kv, tok, P, T);
    cr_assert(all_finite(got, T * V), "%s: non-finite logits", what);
    struct golden_metrics mt;
    kld_measure(base, got, T, V, &mt);
    char name[160];
    snprintf(name, sizeof name, "test9 %s (e2b, %lld prompt + %d decode positions)", what, (long long)P, GEN);
    kld_report(name, &mt);
    if (bits == 0) {
        cr_expect_eq(mt.kld_mean, 0.0, "%s: the baseline against itself", what);
        cr_expect(rows_equal(base, got, T, V));
    } else {
        cr_expect_gt(mt.kld_mean, 0.0, "%s: quantization moved nothing", what);
    }
    cr_expect_leq(mt.kld_mean, kld_bound, "%s: mean KLD %.3g over %.3g", what, mt.kld_mean, kld_bound);
    cr_expect_geq(mt.top1, top1_min, "%s: top-1 %.3f under %.3f", what, mt.top1, top1_min);
    /* free-running generation in decode mode and as prefill */
    for (int64_t chunk = 0; chunk <= 1; chunk++) {
        session_one(&f.m, &kv, tok, P, chunk, 0.0f, 0, NULL, qgen);
        for (int k = 0; k < GEN; k++)
            cr_expect(qgen[k] >= 0 && qgen[k] < V);
        if (bits == 0)
            cr_expect_arr_eq(qgen, fgen, sizeof fgen);
    }
    free(base);
    free(got);
    free(tok);
    fx_close(&f);
}

Test(kvcache, test9_float_baseline) { test9("float baseline", 0, true, 16, 0.0, 1.0); }
Test(kvcache, test9_kv4_short) { test9("kv-bits 4 short", 4, true, 16, KV4_KLD_MEAN, KV4_TOP1); }
Test(kvcache, test9_kv8_short) { test9("kv-bits 8 short", 8, true, 16, KV8_KLD_MEAN, KV8_TOP1); }
/* 96 tokens: 12 windows; past the first KV-shared layer (5), whose sources
 * hold quantized entries: with skip-last on the shared full layer reads the
 * float layer 4, with it off everything a shared layer reads is quantized. */
Test(kvcache, test9_kv4_long) { test9("kv-bits 4 long", 4, true, 96, KV4_KLD_MEAN, KV4_TOP1); }
Test(kvcache, test9_kv4_long_skip_off) { test9("kv-bits 4 long, skip-last off", 4, false, 96, KV4_KLD_MEAN, KV4_TOP1); }
Test(kvcache, test9_kv8_long) { test9("kv-bits 8 long", 8, true, 96, KV8_KLD_MEAN, KV8_TOP1); }

/* Alternating quantized and float runs against one cold prefix cache: every
 * run equals its own no-cache reference bitwise (states never mix), and
 * hits come only from runs of the same representation. */
Test(kvcache, test9_alternating_cold_prefix_cache, .timeout = TH_TIMEOUT(120))
{
    struct fx f;
    fx_open(&f, "e2b");
    int64_t V = f.V;
    int32_t a[LEN_A], b[LEN_B];
    prefix_prompts(&f, a, b);
    char *cold = subdir(f.tmp, "cold");
    struct prefix_opts o = {.block = BLOCK, .hot_limit = 64u << 20, .cold_dir = cold};
    float *rows = malloc((size_t)(GEN * V) * sizeof *rows);
    int32_t gen[GEN];
    /* namespaces: 0 float, 1 kv4, 2 kv8; which prompts each has seen */
    bool seen[3][2] = {{false}};
    static const struct {
        int bits, ns, prompt;
    } runs[] = {{4, 1, 0}, {0, 0, 0}, {8, 2, 1}, {0, 0, 1}, {4, 1, 1}, {0, 0, 0}, {8, 2, 0}, {0, 0, 1}};
    for (size_t k = 0; k < sizeof runs / sizeof runs[0]; k++) {
        struct kv_opts kv = kvo(runs[k].bits, true);
        const int32_t *tok = runs[k].prompt ? b : a;
        int64_t T = runs[k].prompt ? LEN_B : LEN_A;
        struct pref ref;
        pref_make(&ref, &f.m, &kv, tok, T);
        struct prun p;
        prun_open(&p, &f.m, &kv, &o);
        prun_prompt(&p, tok, T, rows, gen);
        char what[80];
        snprintf(what, sizeof what, "alternating run %zu (kv %d, prompt %c)", k + 1, runs[k].bits,
                 runs[k].prompt ? 'B' : 'A');
        expect_ref(&ref, rows, gen, V, what);
        int ns = runs[k].ns, pr = runs[k].prompt;
        int64_t want = seen[ns][pr] ? (T - 1) / BLOCK * BLOCK : seen[ns][!pr] ? SHARED : 0;
        cr_expect_eq(p.pc.hit_tokens, want, "%s: restored %lld tokens, expected %lld", what,
                     (long long)p.pc.hit_tokens, (long long)want);
        cr_expect_eq(p.pc.n_warnings, 0);
        seen[ns][pr] = true;
        prun_close(&p);
        free(ref.rows);
    }
    free(rows);
    free(cold);
    fx_close(&f);
}
