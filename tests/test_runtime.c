/* test_runtime.c - issue 5: the quantized KV cache (--kv-bits), batched
 * decoding, the prefix cache (hot and cold tiers), and a regression suite
 * mirroring the seed report's "Test 9" (seeds/02).
 *
 * Fixtures (`gempack fixture`, deterministic, HF bf16 layout):
 *   e2b      10 layers, sliding window 8, layers 5..9 KV-shared (F0 = 5):
 *            sliding layers 5..8 read layer 3, full layer 9 reads layer 4
 *   26b-a4b  6 layers (MoE, k_eq_v), no KV sharing, last layer full
 *   31b      12 layers (k_eq_v), full layers 5 and 11
 * The fixture prompt has 24 tokens (> the window of 8). Longer prompts are
 * built from its ids (all < 512, the vocabulary).
 *
 * KLD numbers are KL(P_float || P_quantized) per position in nats, from
 * float64 log-softmax (golden_compare, cross-checked by a direct float64
 * computation here), against the float-cache logits of the same model. */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/fileio.h"
#include "golden/golden.h"
#include "runner/forward.h"
#include "runner/prefix.h"
#include "runner/sample.h"
#include "runner/session.h"
#include "runner/tokens.h"
#include "tests/helpers.h"

/* The bar for 8-bit caches. */
#define KV8_KLD_MEAN 1e-3
#define KV8_TOP1 0.95
/* 4-bit caches: the issue asks for no crash and a measured, stated number.
 * Measured here (kv_kld_*, test9_*; fixture prompt, group 64): mean KLD
 * e2b 6.7e-6 (skip-last on) / 1.4e-5 (off), 2.0e-5 on the 96-token prompt;
 * 26b-a4b 6.2e-7; 31b 3.1e-5 / 3.8e-5; top-1 agreement 1.0 everywhere.
 * The 4-bit/8-bit ratio seen is 147..316, as expected: the affine step is
 * (max-min)/15 against /255, 17x the rounding error, and the KLD grows with
 * its square (289x). The bound 5e-4 keeps a margin of >10x over the worst
 * fixture (31b) and is still far below what a broken dequantization or a
 * float/quantized mix-up gives (KLDs of order 0.1..1; ln 512 = 6.2). */
#define KV4_KLD_MEAN 5e-4
#define KV4_TOP1 0.95
/* Batched vs single sequence: the bar; the runner is bitwise. */
#define BATCH_MAX_ABS 1e-5

#define GEN 6          /* tokens generated per prompt */
#define BLOCK 8        /* prefix-cache block (= the window, so ring snapshots are whole blocks) */

/* ---- fixtures and runs ---- */

struct fx {
    char *tmp, *dir;
    struct model m;
    int32_t tok[24];
    int64_t T, V;
};

static void fx_open(struct fx *f, const char *variant)
{
    memset(f, 0, sizeof *f);
    f->tmp = th_mkdtemp();
    f->dir = th_fixture(f->tmp, "ckpt", (struct fixture_opts){.variant = variant, .layout = FX_HF});
    struct token_seqs s = {0};
    struct err e = {0};
    char path[4200];
    snprintf(path, sizeof path, "%s/tokens.json", f->dir);
    cr_assert_eq(tokens_read_file(path, &s, &e), ERR_OK, "%s", e.msg);
    cr_assert_eq(s.len[0], 24, "the fixture prompt has 24 tokens");
    f->T = s.len[0];
    memcpy(f->tok, s.seq[0], sizeof f->tok);
    tokens_free(&s);
    cr_assert_eq(model_open(&f->m, f->dir, &e), ERR_OK, "%s", e.msg);
    f->V = f->m.cfg.vocab_size;
    cr_assert_eq(f->V, 512);
}

static void fx_close(struct fx *f)
{
    model_close(&f->m);
    free(f->dir);
    th_rmtree(f->tmp);
}

static struct kv_opts kvo(int bits, bool skip_last)
{
    return (struct kv_opts){.bits = bits, .group_size = 64, .skip_last_full = skip_last};
}

static const char *kv_name(const struct kv_opts *kv, char *buf, size_t n)
{
    if (!kv->bits)
        snprintf(buf, n, "float");
    else
        snprintf(buf, n, "kv%d g%d start %lld skip-last %s", kv->bits, kv->group_size, (long long)kv->start,
                 kv->skip_last_full ? "on" : "off");
    return buf;
}

struct run_info {
    size_t cache_bytes;
    int float_layer;
};

/* Steps and contexts these tests stay within (the longest prompt here is
 * 20 blocks of 8 plus a few generated tokens; batches of a few prompts). */
#define TEST_STEP 512
#define TEST_CONTEXT 256

static void runner_open(struct runner *r, const struct model *m, const struct kv_opts *kv, int n_seq)
{
    struct err e = {0};
    struct runner_opts o = {.threads = 1, .kernels = KERN_BEST, .kv = kv ? *kv : (struct kv_opts){0}, .n_seq = n_seq,
                            .max_step = TEST_STEP, .max_context = TEST_CONTEXT};
    cr_assert_eq(runner_init(r, m, &o, &e), ERR_OK, "%s", e.msg);
}

/* Every row's logits [T, V] of a prompt through a fresh runner, in chunks
 * of `chunk` tokens (0: one prefill, 1: token by token). */
static float *run_kv(const struct model *m, const struct kv_opts *kv, const int32_t *tok, int64_t T, int64_t chunk,
                     struct run_info *info)
{
    struct runner r;
    struct err e = {0};
    int64_t V = m->cfg.vocab_size;
    runner_open(&r, m, kv, 1);
    float *lg = malloc((size_t)(T * V) * sizeof *lg);
    cr_assert(lg);
    cr_assert_eq(runner_prompt(&r, tok, T, chunk, lg, NULL, &e), ERR_OK, "%s", e.msg);
    if (info) {
        info->cache_bytes = runner_cache_bytes(&r, 0);
        info->float_layer = r.kv_float_layer;
    }
    runner_free(&r);
    return lg;
}

/* Prefill of tok[0, P) then tok[P, T) one token at a time (decode): [T, V]. */
static float *run_prefill_decode(const struct model *m, const struct kv_opts *kv, const int32_t *tok, int64_t P,
                                 int64_t T)
{
    struct runner r;
    struct err e = {0};
    int64_t V = m->cfg.vocab_size;
    runner_open(&r, m, kv, 1);
    float *lg = malloc((size_t)(T * V) * sizeof *lg);
    cr_assert(lg);
    cr_assert_eq(runner_forward(&r, tok, P, lg, true, NULL, &e), ERR_OK, "%s", e.msg);
    for (int64_t t = P; t < T; t++)
        cr_assert_eq(runner_forward(&r, tok + t, 1, lg + t * V, true, NULL, &e), ERR_OK, "%s", e.msg);
    runner_free(&r);
    return lg;
}

static bool all_finite(const float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(x[i]))
            return false;
    return true;
}

static double max_abs_diff(const float *a, const float *b, int64_t n)
{
    double m = 0.0;
    for (int64_t i = 0; i < n; i++)
        m = fmax(m, fabs((double)a[i] - (double)b[i]));
    return m;
}

static bool rows_equal(const float *a, const float *b, int64_t rows, int64_t V)
{
    return memcmp(a, b, (size_t)(rows * V) * sizeof *a) == 0;
}

/* KL(ref || got) and top-1 agreement via golden_compare on an in-memory
 * golden holding `ref` as float64; the mean is cross-checked by a direct
 * float64 computation. */
static void measure(const float *ref, const float *got, int64_t T, int64_t V, struct golden_metrics *mt)
{
    struct golden g = {.T = T, .V = V, .f64 = true};
    g.logits = malloc((size_t)(T * V) * sizeof *g.logits);
    cr_assert(g.logits);
    for (int64_t i = 0; i < T * V; i++)
        g.logits[i] = (double)ref[i];
    golden_compare(&g, got, (struct golden_thresholds){-1, -1, -1, -1, -1, -1}, mt);
    free(g.logits);

    double sum = 0.0;
    for (int64_t t = 0; t < T; t++) {
        const float *p = ref + t * V, *q = got + t * V;
        double mp = -INFINITY, mq = -INFINITY, zp = 0.0, zq = 0.0, kl = 0.0;
        for (int64_t k = 0; k < V; k++) {
            mp = fmax(mp, (double)p[k]);
            mq = fmax(mq, (double)q[k]);
        }
        for (int64_t k = 0; k < V; k++) {
            zp += exp((double)p[k] - mp);
            zq += exp((double)q[k] - mq);
        }
        for (int64_t k = 0; k < V; k++) {
            double lp = (double)p[k] - mp - log(zp), lq = (double)q[k] - mq - log(zq);
            kl += exp(lp) * (lp - lq);
        }
        sum += fmax(kl, 0.0);
    }
    double direct = sum / (double)T;
    cr_expect(fabs(direct - mt->kld_mean) <= 1e-9 + 1e-6 * direct, "golden_compare KLD %.6g, direct float64 %.6g",
              mt->kld_mean, direct);
}

static void report(const char *what, const struct golden_metrics *mt)
{
    cr_log_info("KLD %s: mean %.3e, p99 %.3e, max %.3e, top-1 %.4f (%lld positions)", what, mt->kld_mean, mt->kld_p99,
                mt->kld_max, mt->top1, (long long)mt->T);
    fprintf(stderr, "KLD %s: mean %.3e, p99 %.3e, max %.3e, top-1 %.4f (%lld positions)\n", what, mt->kld_mean,
            mt->kld_p99, mt->kld_max, mt->top1, (long long)mt->T);
}

/* A token_seqs over caller-owned arrays (not tokens_free'd). */
struct seqs3 {
    int32_t *seq[4];
    int64_t len[4];
    struct token_seqs s;
};

static void seqs_set(struct seqs3 *q, int n, int32_t *const *seq, const int64_t *len)
{
    memset(q, 0, sizeof *q);
    for (int b = 0; b < n; b++) {
        q->seq[b] = seq[b];
        q->len[b] = len[b];
    }
    q->s = (struct token_seqs){q->seq, q->len, n};
}

/* The batch of the issue: lengths 24, 7 and 13, different contents. */
static void batch_prompts(const struct fx *f, int32_t p[3][24], int64_t len[3])
{
    len[0] = 24;
    len[1] = 7;
    len[2] = 13;
    memcpy(p[0], f->tok, 24 * sizeof(int32_t));
    for (int t = 0; t < 7; t++)
        p[1][t] = f->tok[23 - t];          /* the prompt's tail, reversed */
    for (int t = 0; t < 13; t++)
        p[2][t] = f->tok[(5 * t + 3) % 24]; /* a permutation of it */
}

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
        measure(ref, got, f.T, f.V, &mt);
        report(what, &mt);
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

Test(runtime, kv_kld_e2b_shared_kv, .timeout = 120) { kv_kld("e2b", 4); }
Test(runtime, kv_kld_26b_moe, .timeout = 120) { kv_kld("26b-a4b", 5); }
Test(runtime, kv_kld_31b_k_eq_v, .timeout = 120) { kv_kld("31b", 11); }

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

Test(runtime, kv_layout_e2b_skip_on) { kv_layout("e2b", true); }
Test(runtime, kv_layout_e2b_skip_off) { kv_layout("e2b", false); }
Test(runtime, kv_layout_31b_skip_on) { kv_layout("31b", true); }

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

Test(runtime, kv4_modes_bitwise_e2b_skip_off) { kv_modes("e2b", 4, false); }
Test(runtime, kv4_modes_bitwise_e2b_skip_on) { kv_modes("e2b", 4, true); }
Test(runtime, kv4_modes_bitwise_26b) { kv_modes("26b-a4b", 4, true); }
Test(runtime, kv8_modes_bitwise_31b) { kv_modes("31b", 8, false); }

Test(runtime, kv_opts_validate)
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

/* --kv-start N: positions below N stay float. */
Test(runtime, kv_start)
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
    measure(ref, got, T, V, &mt);
    report("e2b kv4 start 12 skip-last off", &mt);
    free(dec);
    free(got);
    free(all);
    free(ref);
    fx_close(&f);
}

/* ---------------------------------------------------------------- */
/* Batched decoding                                                  */
/* ---------------------------------------------------------------- */

/* One prompt alone through session_run: logits [T, V] (may be NULL) and
 * `GEN` generated tokens. */
static void session_one(const struct model *m, const struct kv_opts *kv, int32_t *tok, int64_t T, int64_t chunk,
                        float temperature, uint64_t seed, float *logits, int32_t *gen)
{
    struct runner r;
    struct err e = {0};
    runner_open(&r, m, kv, 1);
    struct seqs3 q;
    seqs_set(&q, 1, &tok, &T);
    struct session_opts so = {.chunk = chunk, .generate = GEN, .temperature = temperature, .top_p = 1.0f,
                              .seed = seed, .all_logits = logits != NULL};
    struct session_result res;
    cr_assert_eq(session_run(&r, &q.s, &so, &res, &e), ERR_OK, "%s", e.msg);
    if (logits)
        memcpy(logits, res.logits, (size_t)(T * m->cfg.vocab_size) * sizeof *logits);
    memcpy(gen, res.generated, GEN * sizeof *gen);
    session_result_free(&res);
    runner_free(&r);
}

/* 3 prompts (24, 7, 13 tokens) as one batch in each mode: every sequence's
 * logits and generated tokens are bitwise those of running it alone. */
static void batch_session(const char *variant, int bits)
{
    struct fx f;
    fx_open(&f, variant);
    int64_t V = f.V;
    struct kv_opts kv = kvo(bits, true);
    int32_t p[3][24];
    int64_t len[3];
    batch_prompts(&f, p, len);
    int32_t *ptr[3] = {p[0], p[1], p[2]};
    float *ref[3];
    int32_t gen[3][GEN], sgen[3][GEN];
    for (int b = 0; b < 3; b++) {
        ref[b] = malloc((size_t)(len[b] * V) * sizeof(float));
        session_one(&f.m, &kv, p[b], len[b], 0, 0.0f, 0, ref[b], gen[b]);
        /* sampled: sequence b of a batch uses seed + b */
        session_one(&f.m, &kv, p[b], len[b], 0, 0.9f, 41 + (uint64_t)b, NULL, sgen[b]);
    }
    static const int64_t chunks[] = {0, 5, 1};
    for (size_t k = 0; k < 3; k++) {
        for (int sampled = 0; sampled < 2; sampled++) {
            struct runner r;
            struct err e = {0};
            runner_open(&r, &f.m, &kv, 3);
            struct seqs3 q;
            seqs_set(&q, 3, ptr, len);
            struct session_opts so = {.chunk = chunks[k], .generate = GEN, .temperature = sampled ? 0.9f : 0.0f,
                                      .top_p = 1.0f, .seed = 41, .all_logits = true};
            struct session_result res;
            cr_assert_eq(session_run(&r, &q.s, &so, &res, &e), ERR_OK, "%s", e.msg);
            cr_assert_eq(res.n, 3);
            cr_assert_eq(res.tmax, 24);
            for (int b = 0; b < 3; b++) {
                const float *rows = res.logits + (int64_t)b * res.tmax * V;
                cr_expect_eq(res.len[b], len[b]);
                double d = max_abs_diff(rows, ref[b], len[b] * V);
                cr_expect_leq(d, BATCH_MAX_ABS, "%s kv%d chunk %lld: sequence %d off by %.3g", variant, bits,
                              (long long)chunks[k], b, d);
                cr_expect(rows_equal(rows, ref[b], len[b], V), "%s kv%d chunk %lld: sequence %d not bitwise alone",
                          variant, bits, (long long)chunks[k], b);
                bool zero = true;
                for (int64_t i = len[b] * V; i < res.tmax * V; i++)
                    zero &= rows[i] == 0.0f;
                cr_expect(zero, "rows past the end of prompt %d are zero", b);
                cr_expect_arr_eq(res.generated + b * GEN, sampled ? sgen[b] : gen[b], GEN * sizeof(int32_t),
                                 "%s kv%d chunk %lld %s: generation of sequence %d differs from alone", variant, bits,
                                 (long long)chunks[k], sampled ? "sampled" : "greedy", b);
            }
            cr_expect_eq(res.prefill_tokens, 44);
            cr_expect_eq(res.decode_tokens, 3 * (GEN - 1));
            session_result_free(&res);
            runner_free(&r);
        }
    }
    for (int b = 0; b < 3; b++)
        free(ref[b]);
    fx_close(&f);
}

Test(runtime, batch_session_e2b_shared_kv, .timeout = 120) { batch_session("e2b", 0); }
Test(runtime, batch_session_26b_moe, .timeout = 120) { batch_session("26b-a4b", 0); }
Test(runtime, batch_session_e2b_kv4, .timeout = 120) { batch_session("e2b", 4); }
Test(runtime, batch_session_31b_kv8, .timeout = 120) { batch_session("31b", 8); }

/* runner_step directly: items in another order than their sequences,
 * chunks of 5 (items drop out as their prompts end), then a joint decode
 * step; each equals the sequence run alone. Bad batches are refused. */
static void batch_step(const char *variant, int bits)
{
    struct fx f;
    fx_open(&f, variant);
    int64_t V = f.V;
    struct kv_opts kv = kvo(bits, true);
    int32_t p[3][24];
    int64_t len[3];
    batch_prompts(&f, p, len);
    int32_t next[3] = {17, 300, 2};
    float *ref[3], *got[3];
    for (int b = 0; b < 3; b++) {
        /* alone: prompt then one decode token, rows [len + 1, V] */
        int32_t seq[25];
        memcpy(seq, p[b], (size_t)len[b] * sizeof *seq);
        seq[len[b]] = next[b];
        ref[b] = run_prefill_decode(&f.m, &kv, seq, len[b], len[b] + 1);
        got[b] = calloc((size_t)((len[b] + 1) * V), sizeof(float));
    }
    struct runner r;
    struct err e = {0};
    runner_open(&r, &f.m, &kv, 3);
    float *rows = malloc((size_t)(15 * V) * sizeof *rows);
    int64_t done[3] = {0};
    for (;;) {
        struct runner_item it[3];
        int n = 0;
        static const int order[3] = {2, 0, 1};
        for (int k = 0; k < 3; k++) {
            int b = order[k];
            int64_t left = len[b] - done[b];
            if (left > 0)
                it[n++] = (struct runner_item){b, p[b] + done[b], left < 5 ? left : 5, NULL};
        }
        if (!n)
            break;
        cr_assert_eq(runner_step(&r, it, n, rows, true, &e), ERR_OK, "%s", e.msg);
        int64_t row = 0;
        for (int k = 0; k < n; k++) {
            memcpy(got[it[k].seq] + done[it[k].seq] * V, rows + row * V, (size_t)(it[k].n * V) * sizeof *rows);
            row += it[k].n;
            done[it[k].seq] += it[k].n;
        }
    }
    struct runner_item dec[3] = {{1, &next[1], 1, NULL}, {2, &next[2], 1, NULL}, {0, &next[0], 1, NULL}};
    cr_assert_eq(runner_step(&r, dec, 3, rows, false, &e), ERR_OK, "%s", e.msg);
    for (int k = 0; k < 3; k++)
        memcpy(got[dec[k].seq] + len[dec[k].seq] * V, rows + k * V, (size_t)V * sizeof *rows);
    for (int b = 0; b < 3; b++) {
        cr_expect(rows_equal(got[b], ref[b], len[b] + 1, V), "%s kv%d: runner_step sequence %d not bitwise alone",
                  variant, bits, b);
        cr_expect_eq(r.seq[b].pos, len[b] + 1);
    }
    /* refused: a sequence twice, an unknown sequence, an empty chunk */
    struct runner_item twice[2] = {{0, next, 1, NULL}, {0, next, 1, NULL}};
    cr_expect_eq(runner_step(&r, twice, 2, rows, false, &e), ERR_USAGE);
    struct runner_item unknown = {3, next, 1, NULL}, empty = {1, next, 0, NULL};
    cr_expect_eq(runner_step(&r, &unknown, 1, rows, false, &e), ERR_USAGE);
    cr_expect_eq(runner_step(&r, &empty, 1, rows, false, &e), ERR_USAGE);
    for (int b = 0; b < 3; b++)
        cr_expect_eq(r.seq[b].pos, len[b] + 1, "a refused step changes no sequence");
    free(rows);
    runner_free(&r);
    for (int b = 0; b < 3; b++) {
        free(ref[b]);
        free(got[b]);
    }
    fx_close(&f);
}

Test(runtime, batch_runner_step_e2b) { batch_step("e2b", 0); }
Test(runtime, batch_runner_step_26b_kv4) { batch_step("26b-a4b", 4); }

/* An explicit all-true key_mask and no mask: bitwise identical, in a batch
 * prefill and in a 1-token decode step (the attention itself); a mask that
 * hides a key changes that query's output only. */
static void batch_mask(int bits)
{
    struct fx f;
    fx_open(&f, "e2b");
    int64_t V = f.V;
    struct kv_opts kv = kvo(bits, true);
    int32_t p[3][24];
    int64_t len[3];
    batch_prompts(&f, p, len);
    uint8_t *ones = malloc(25 * 25);
    memset(ones, 1, 25 * 25);
    struct runner r[2];
    struct err e = {0};
    float *out[2];
    for (int k = 0; k < 2; k++) {
        runner_open(&r[k], &f.m, &kv, 3);
        out[k] = malloc((size_t)(44 * V) * sizeof(float));
        struct runner_item it[3];
        for (int b = 0; b < 3; b++)
            it[b] = (struct runner_item){b, p[b], len[b], k ? ones : NULL}; /* [n, 0 + n] */
        cr_assert_eq(runner_step(&r[k], it, 3, out[k], true, &e), ERR_OK, "%s", e.msg);
    }
    cr_expect(rows_equal(out[0], out[1], 44, V), "kv%d: an all-true mask changed a batch prefill", bits);

    /* 1-token steps: mask [1, pos + 1] */
    int32_t tok[3] = {5, 6, 7};
    for (int k = 0; k < 2; k++) {
        struct runner_item it[3];
        for (int b = 0; b < 3; b++)
            it[b] = (struct runner_item){b, &tok[b], 1, k ? ones : NULL};
        cr_assert_eq(runner_step(&r[k], it, 3, out[k], false, &e), ERR_OK, "%s", e.msg);
    }
    cr_expect(rows_equal(out[0], out[1], 3, V), "kv%d: an all-true mask changed a decode step", bits);

    /* the mask is live: in the next step hide key 0 of sequence 0 (outside
     * the window: only the full layers, own and KV-shared, see it), then
     * the newest key of sequence 2 (the sliding layers see it) */
    for (int which = 0; which < 2; which++) {
        struct runner c[2];
        float *o[2];
        int hide_seq = which ? 2 : 0;
        for (int k = 0; k < 2; k++) {
            runner_open(&c[k], &f.m, &kv, 3);
            o[k] = malloc((size_t)(3 * V) * sizeof(float));
            struct runner_item it[3];
            for (int b = 0; b < 3; b++)
                it[b] = (struct runner_item){b, p[b], len[b], NULL};
            cr_assert_eq(runner_step(&c[k], it, 3, o[k], false, &e), ERR_OK, "%s", e.msg);
        }
        int64_t P = len[hide_seq];
        uint8_t *mask = malloc((size_t)(P + 1));
        memset(mask, 1, (size_t)(P + 1));
        mask[which ? P - 1 : 0] = 0;
        for (int k = 0; k < 2; k++) {
            struct runner_item it[3];
            for (int b = 0; b < 3; b++)
                it[b] = (struct runner_item){b, &tok[b], 1, k && b == hide_seq ? mask : NULL};
            cr_assert_eq(runner_step(&c[k], it, 3, o[k], false, &e), ERR_OK, "%s", e.msg);
        }
        for (int b = 0; b < 3; b++) {
            bool same = rows_equal(o[0] + b * V, o[1] + b * V, 1, V);
            if (b == hide_seq)
                cr_expect(!same, "kv%d: hiding key %lld of sequence %d had no effect", bits,
                          (long long)(which ? P - 1 : 0), b);
            else
                cr_expect(same, "kv%d: a mask on sequence %d changed sequence %d", bits, hide_seq, b);
        }
        free(mask);
        for (int k = 0; k < 2; k++) {
            free(o[k]);
            runner_free(&c[k]);
        }
    }
    for (int k = 0; k < 2; k++) {
        free(out[k]);
        runner_free(&r[k]);
    }
    free(ones);
    fx_close(&f);
}

Test(runtime, batch_mask_all_true_float) { batch_mask(0); }
Test(runtime, batch_mask_all_true_kv4) { batch_mask(4); }

/* ---------------------------------------------------------------- */
/* Prefix cache                                                      */
/* ---------------------------------------------------------------- */

#define LEN_A 40
#define LEN_B 43
#define SHARED 32

/* Two prompts sharing their first 32 tokens (4 blocks of 8). */
static void prefix_prompts(const struct fx *f, int32_t *a, int32_t *b)
{
    for (int t = 0; t < SHARED; t++)
        a[t] = b[t] = f->tok[(7 * t) % 24];
    for (int t = SHARED; t < LEN_A; t++)
        a[t] = (f->tok[t - SHARED] + 101) % 512;
    for (int t = SHARED; t < LEN_B; t++)
        b[t] = (f->tok[t - SHARED + 5] * 3 + 7) % 512;
    cr_assert_neq(a[SHARED], b[SHARED]);
}

/* A run: a runner of one sequence and, optionally, its prefix cache. */
struct prun {
    struct runner r;
    struct prefix_cache pc;
    bool has_pc;
};

static void prun_open(struct prun *p, const struct model *m, const struct kv_opts *kv, const struct prefix_opts *o)
{
    struct err e = {0};
    memset(p, 0, sizeof *p);
    runner_open(&p->r, m, kv, 1);
    if (o) {
        cr_assert_eq(prefix_init(&p->pc, &p->r, o, &e), ERR_OK, "%s", e.msg);
        p->has_pc = true;
    }
}

static void prun_close(struct prun *p)
{
    if (p->has_pc)
        prefix_free(&p->pc);
    runner_free(&p->r);
}

/* The prompt (through the prefix cache when there is one), then GEN greedy
 * tokens. rows [GEN, V]: the prompt's last logits, then each decode step's
 * (which read every cached entry, restored or computed). */
static void prun_prompt(struct prun *p, const int32_t *tok, int64_t T, float *rows, int32_t *gen)
{
    struct err e = {0};
    int64_t V = p->r.m->cfg.vocab_size;
    runner_reset(&p->r, 0);
    if (p->has_pc)
        cr_assert_eq(prefix_prompt(&p->pc, &p->r, 0, tok, T, rows, &e), ERR_OK, "%s", e.msg);
    else
        cr_assert_eq(runner_prompt(&p->r, tok, T, 0, NULL, rows, &e), ERR_OK, "%s", e.msg);
    cr_assert_eq(p->r.seq[0].pos, T);
    struct sampler s;
    sampler_init(&s, 0.0f, 0, 1.0f, 0);
    for (int k = 0; k < GEN; k++) {
        gen[k] = sampler_next(&s, rows + k * V, V);
        if (k + 1 < GEN)
            cr_assert_eq(runner_forward(&p->r, &gen[k], 1, rows + (k + 1) * V, false, NULL, &e), ERR_OK, "%s",
                         e.msg);
    }
}

struct pref {
    float *rows;
    int32_t gen[GEN];
};

/* The no-cache reference of a prompt. */
static void pref_make(struct pref *x, const struct model *m, const struct kv_opts *kv, const int32_t *tok, int64_t T)
{
    struct prun p;
    prun_open(&p, m, kv, NULL);
    x->rows = malloc((size_t)(GEN * m->cfg.vocab_size) * sizeof(float));
    prun_prompt(&p, tok, T, x->rows, x->gen);
    prun_close(&p);
}

/* A cached run matches its reference bitwise: last logits, decode logits, tokens. */
static void expect_ref(const struct pref *x, const float *rows, const int32_t *gen, int64_t V, const char *what)
{
    cr_expect(rows_equal(x->rows, rows, 1, V), "%s: last prompt logits not bitwise those without the cache", what);
    cr_expect(rows_equal(x->rows + V, rows + V, GEN - 1, V),
              "%s: decode logits after the prompt not bitwise those without the cache", what);
    cr_expect_arr_eq(x->gen, gen, sizeof x->gen, "%s: generated tokens differ", what);
}

/* Names of the *.gpkc files in dir, sorted; returns the count. */
static int cold_files(const char *dir, char names[][80], int max)
{
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *de;
    while (d && (de = readdir(d))) {
        size_t l = strlen(de->d_name);
        if (l > 5 && !strcmp(de->d_name + l - 5, ".gpkc") && n < max && l < 80)
            strcpy(names[n++], de->d_name);
    }
    if (d)
        closedir(d);
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++)
            if (strcmp(names[i], names[j]) > 0) {
                char t[80];
                strcpy(t, names[i]);
                strcpy(names[i], names[j]);
                strcpy(names[j], t);
            }
    return n;
}

/* Every entry in the directory (anything but . and ..). */
static int dir_entries(const char *dir)
{
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *de;
    while (d && (de = readdir(d)))
        n += strcmp(de->d_name, ".") && strcmp(de->d_name, "..");
    if (d)
        closedir(d);
    return n;
}

static char *subdir(const char *tmp, const char *name)
{
    char *p = fio_join(tmp, name);
    cr_assert(p);
    return p;
}

/* Two prompts sharing a 32-token prefix in one run (hot tier): the second
 * restores 4 blocks and matches its no-cache run bitwise; then the same
 * prompts again restore as much as a prompt allows (T-1 rounded down). */
static void prefix_hot(int bits)
{
    struct fx f;
    fx_open(&f, "e2b");
    int64_t V = f.V;
    struct kv_opts kv = kvo(bits, true);
    int32_t a[LEN_A], b[LEN_B];
    prefix_prompts(&f, a, b);
    struct pref ra, rb;
    pref_make(&ra, &f.m, &kv, a, LEN_A);
    pref_make(&rb, &f.m, &kv, b, LEN_B);
    struct prefix_opts o = {.block = BLOCK, .hot_limit = 64u << 20};
    struct prun p;
    prun_open(&p, &f.m, &kv, &o);
    float *rows = malloc((size_t)(GEN * V) * sizeof *rows);
    int32_t gen[GEN];
    prun_prompt(&p, a, LEN_A, rows, gen);
    expect_ref(&ra, rows, gen, V, "A, cold start");
    cr_expect_eq(p.pc.hit_tokens, 0);
    prun_prompt(&p, b, LEN_B, rows, gen);
    expect_ref(&rb, rows, gen, V, "B after A");
    cr_expect_eq(p.pc.hit_tokens, SHARED, "B restores the shared 4 blocks: %lld", (long long)p.pc.hit_tokens);
    prun_prompt(&p, a, LEN_A, rows, gen);
    expect_ref(&ra, rows, gen, V, "A again");
    cr_expect_eq(p.pc.hit_tokens, 2 * SHARED, "A again restores blocks up to 32 (< T = 40)");
    prun_prompt(&p, b, LEN_B, rows, gen);
    expect_ref(&rb, rows, gen, V, "B again");
    cr_expect_eq(p.pc.hit_tokens, 2 * SHARED + 40, "B again restores 5 blocks");
    cr_expect_eq(p.pc.n_warnings, 0);
    cr_expect_eq(prefix_cold_bytes(&p.pc), 0, "hot only: no cold bytes");
    cr_expect_gt(p.pc.hot_bytes, 0);
    cr_expect_leq(p.pc.hot_bytes, o.hot_limit);
    prun_close(&p);
    free(rows);
    free(ra.rows);
    free(rb.rows);
    fx_close(&f);
}

Test(runtime, prefix_hot_float) { prefix_hot(0); }
Test(runtime, prefix_hot_kv4) { prefix_hot(4); }
Test(runtime, prefix_hot_kv8) { prefix_hot(8); }

/* session_run with a prefix cache: a batch of two prompts sharing the
 * prefix; generation equals each prompt alone. */
Test(runtime, prefix_session_batch)
{
    struct fx f;
    fx_open(&f, "e2b");
    for (int bits = 0; bits <= 4; bits += 4) {
        struct kv_opts kv = kvo(bits, true);
        int32_t a[LEN_A], b[LEN_B];
        prefix_prompts(&f, a, b);
        struct pref ra, rb;
        pref_make(&ra, &f.m, &kv, a, LEN_A);
        pref_make(&rb, &f.m, &kv, b, LEN_B);
        struct runner r;
        struct prefix_cache pc;
        struct err e = {0};
        runner_open(&r, &f.m, &kv, 2);
        struct prefix_opts o = {.block = BLOCK, .hot_limit = 64u << 20};
        cr_assert_eq(prefix_init(&pc, &r, &o, &e), ERR_OK, "%s", e.msg);
        int32_t *ptr[2] = {a, b};
        int64_t len[2] = {LEN_A, LEN_B};
        struct seqs3 q;
        seqs_set(&q, 2, ptr, len);
        struct session_opts so = {.generate = GEN, .top_p = 1.0f, .pc = &pc};
        struct session_result res;
        cr_assert_eq(session_run(&r, &q.s, &so, &res, &e), ERR_OK, "%s", e.msg);
        cr_expect_arr_eq(res.generated, ra.gen, sizeof ra.gen, "kv%d: batch A with the prefix cache", bits);
        cr_expect_arr_eq(res.generated + GEN, rb.gen, sizeof rb.gen, "kv%d: batch B with the prefix cache", bits);
        cr_expect_eq(pc.hit_tokens, SHARED, "kv%d: B restored A's shared blocks", bits);
        session_result_free(&res);
        prefix_free(&pc);
        runner_free(&r);
        free(ra.rows);
        free(rb.rows);
    }
    fx_close(&f);
}

/* Across runs: a fresh runner and cache on the same directory restore from
 * disk; files are whole (no temporary left behind). */
static void prefix_cold(int bits)
{
    struct fx f;
    fx_open(&f, "e2b");
    int64_t V = f.V;
    struct kv_opts kv = kvo(bits, true);
    int32_t a[LEN_A], b[LEN_B];
    prefix_prompts(&f, a, b);
    struct pref ra, rb;
    pref_make(&ra, &f.m, &kv, a, LEN_A);
    pref_make(&rb, &f.m, &kv, b, LEN_B);
    char *cold = subdir(f.tmp, "cold");
    struct prefix_opts o = {.block = BLOCK, .hot_limit = 64u << 20, .cold_dir = cold};
    float *rows = malloc((size_t)(GEN * V) * sizeof *rows);
    int32_t gen[GEN];
    struct prun p;
    prun_open(&p, &f.m, &kv, &o);
    prun_prompt(&p, a, LEN_A, rows, gen);
    expect_ref(&ra, rows, gen, V, "run 1");
    cr_expect_eq(p.pc.hit_tokens, 0);
    uint64_t cb = prefix_cold_bytes(&p.pc);
    prun_close(&p);
    char names[64][80];
    cr_expect_eq(cold_files(cold, names, 64), LEN_A / BLOCK, "one file per block boundary");
    cr_expect_eq(dir_entries(cold), LEN_A / BLOCK, "only whole entries in the directory");
    cr_expect_gt(cb, 0);

    prun_open(&p, &f.m, &kv, &o); /* another "run" */
    cr_expect_eq(p.pc.hot_bytes, 0, "a new run starts with an empty hot tier");
    cr_expect_eq(prefix_cold_bytes(&p.pc), cb);
    prun_prompt(&p, b, LEN_B, rows, gen);
    expect_ref(&rb, rows, gen, V, "run 2 (B, from disk)");
    cr_expect_eq(p.pc.hit_tokens, SHARED, "run 2 restores the shared blocks from disk");
    cr_expect_eq(p.pc.n_warnings, 0);
    cr_expect_eq(cold_files(cold, names, 64), LEN_A / BLOCK + 1, "B adds its own 5th block");
    prun_close(&p);

    prun_open(&p, &f.m, &kv, &o);
    prun_prompt(&p, b, LEN_B, rows, gen);
    expect_ref(&rb, rows, gen, V, "run 3 (B again)");
    cr_expect_eq(p.pc.hit_tokens, 40);
    prun_close(&p);
    free(rows);
    free(cold);
    free(ra.rows);
    free(rb.rows);
    fx_close(&f);
}

Test(runtime, prefix_cold_across_runs_float) { prefix_cold(0); }
Test(runtime, prefix_cold_across_runs_kv4) { prefix_cold(4); }

/* Hot-only mode never touches the disk: run in an empty working directory. */
Test(runtime, prefix_hot_only_writes_nothing)
{
    struct fx f;
    fx_open(&f, "e2b");
    int64_t V = f.V;
    char *cwd = subdir(f.tmp, "cwd");
    struct err e = {0};
    cr_assert_eq(fio_mkdirs(cwd, &e), ERR_OK);
    char old[4096];
    cr_assert(getcwd(old, sizeof old));
    cr_assert_eq(chdir(cwd), 0);
    int32_t a[LEN_A], b[LEN_B];
    prefix_prompts(&f, a, b);
    struct kv_opts kv = kvo(4, true);
    struct prefix_opts o = {.block = BLOCK, .hot_limit = 64u << 20, .cold_dir = NULL};
    struct prun p;
    prun_open(&p, &f.m, &kv, &o);
    float *rows = malloc((size_t)(GEN * V) * sizeof *rows);
    int32_t gen[GEN];
    prun_prompt(&p, a, LEN_A, rows, gen);
    prun_prompt(&p, b, LEN_B, rows, gen);
    cr_expect_eq(p.pc.hit_tokens, SHARED);
    cr_expect_eq(prefix_cold_bytes(&p.pc), 0);
    prun_close(&p);
    cr_expect_eq(dir_entries(cwd), 0, "hot-only mode wrote into the working directory");
    cr_expect_eq(dir_entries(f.tmp), 2, "hot-only mode wrote next to the model (only ckpt and cwd expected)");
    cr_assert_eq(chdir(old), 0);
    free(rows);
    free(cwd);
    fx_close(&f);
}

/* Corrupt or stale cold entries are discarded with a warning (and replaced
 * by a recomputed, identical entry); the result stays bitwise correct. */
Test(runtime, prefix_cold_corrupt, .timeout = 120)
{
    struct fx f;
    fx_open(&f, "e2b");
    int64_t V = f.V;
    struct kv_opts kv = kvo(4, true);
    int32_t a[LEN_A], b[LEN_B];
    prefix_prompts(&f, a, b);
    struct pref rb;
    pref_make(&rb, &f.m, &kv, b, LEN_B);
    char *cold = subdir(f.tmp, "cold");
    struct prefix_opts o = {.block = BLOCK, .hot_limit = 64u << 20, .cold_dir = cold};
    float *rows = malloc((size_t)(GEN * V) * sizeof *rows);
    int32_t gen[GEN];
    /* block i's file: the one a prompt of 8i + 1 tokens adds */
    char blk[5][80], names[64][80], prev[64][80];
    int nprev = 0;
    for (int i = 0; i < 5; i++) {
        struct prun p;
        prun_open(&p, &f.m, &kv, &o);
        prun_prompt(&p, b, BLOCK * (i + 1) + 1, rows, gen);
        prun_close(&p);
        int n = cold_files(cold, names, 64);
        cr_assert_eq(n, i + 1);
        for (int k = 0; k < n; k++) {
            bool old = false;
            for (int j = 0; j < nprev; j++)
                old |= !strcmp(names[k], prev[j]);
            if (!old)
                strcpy(blk[i], names[k]);
        }
        memcpy(prev, names, sizeof names);
        nprev = n;
    }
    enum { FLIP_PAYLOAD, TRUNCATE, MAGIC, HEADER_CRC, VERSION, STALE, EMPTY, PAYLOAD_CRC_FIELD, GROWN };
    static const struct {
        int kind, block;
        const char *why;
    } cases[] = {
        {FLIP_PAYLOAD, 0, "payload CRC"}, {FLIP_PAYLOAD, 2, "payload CRC"}, {TRUNCATE, 1, "size"},
        {MAGIC, 3, "not a gempack"},       {HEADER_CRC, 0, "header CRC"},   {VERSION, 2, "not a gempack"},
        {STALE, 1, "stale"},               {EMPTY, 0, "size"},              {PAYLOAD_CRC_FIELD, 3, "header CRC"},
        {GROWN, 2, "size"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int blkno = cases[c].block;
        char *path = fio_join(cold, blk[blkno]);
        size_t n;
        uint8_t *orig = th_read(path, &n);
        cr_assert(orig && n > 64);
        uint8_t *bad = malloc(n + 16);
        memcpy(bad, orig, n);
        size_t bn = n;
        switch (cases[c].kind) {
        case FLIP_PAYLOAD: bad[64 + (n - 64) / 2] ^= 0x10; break;
        case TRUNCATE: bn = 64 + (n - 64) / 2; break;
        case MAGIC: bad[0] = 'X'; break;
        case HEADER_CRC: bad[20] ^= 1; break;        /* inside the key: the header CRC catches it */
        case VERSION: bad[8] = 2; break;
        case STALE: {                                /* another block's (valid) file under this name */
            char *other = fio_join(cold, blk[blkno + 1]);
            free(bad);
            bad = th_read(other, &bn);
            free(other);
            break;
        }
        case EMPTY: bn = 0; break;
        case PAYLOAD_CRC_FIELD: bad[56] ^= 0xff; break;
        case GROWN: memset(bad + n, 0, 16); bn = n + 16; break;
        }
        FILE *fp = fopen(path, "wb");
        cr_assert(fp);
        cr_assert_eq(fwrite(bad, 1, bn, fp), bn);
        fclose(fp);
        free(bad);

        struct prun p;
        prun_open(&p, &f.m, &kv, &o);
        prun_prompt(&p, b, LEN_B, rows, gen);
        char what[80];
        snprintf(what, sizeof what, "corruption case %zu (block %d)", c, blkno + 1);
        expect_ref(&rb, rows, gen, V, what);
        cr_expect_eq(p.pc.hit_tokens, (int64_t)BLOCK * blkno, "%s: restores the %d blocks before the bad one", what,
                     blkno);
        cr_expect_geq(p.pc.n_warnings, 1, "%s: discarded without a warning", what);
        bool named = false;
        for (size_t w = 0; w < p.pc.n_warnings; w++) {
            named |= strstr(p.pc.warnings[w], blk[blkno]) != NULL && strstr(p.pc.warnings[w], cases[c].why);
            fprintf(stderr, "%s: warning: %s\n", what, p.pc.warnings[w]);
        }
        cr_expect(named, "%s: the warning names the file and says '%s'", what, cases[c].why);
        prun_close(&p);
        /* the bad file was removed, then the recomputed entry written again */
        size_t n2;
        uint8_t *now = th_read(path, &n2);
        cr_expect(now && n2 == n && !memcmp(now, orig, n), "%s: the entry was not replaced by a good one", what);
        free(now);
        free(orig);
        free(path);
        cr_expect_eq(dir_entries(cold), 5, "%s: only entries in the directory", what);
    }
    free(rows);
    free(cold);
    free(rb.rows);
    fx_close(&f);
}

/* Namespaces: bits, group, start, skip-last and block each get their own
 * entries; a float run after quantized runs on one directory gets no hit
 * and so never restores quantized state. */
Test(runtime, prefix_namespaces, .timeout = 120)
{
    struct fx f;
    fx_open(&f, "e2b");
    int64_t V = f.V;
    int32_t a[LEN_A], b[LEN_B];
    prefix_prompts(&f, a, b);
    char *cold = subdir(f.tmp, "cold");
    float *rows = malloc((size_t)(GEN * V) * sizeof *rows);
    int32_t gen[GEN];
    struct {
        struct kv_opts kv;
        int64_t block;
    } ns[] = {
        {kvo(4, true), BLOCK}, {kvo(0, true), BLOCK}, {kvo(4, false), BLOCK}, {kvo(8, true), BLOCK},
        {kvo(4, true), BLOCK}, {kvo(4, true), BLOCK}, {kvo(4, true), 16},
    };
    ns[4].kv.group_size = 32;
    ns[5].kv.start = 4;
    int files = 0;
    for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
        struct pref ref;
        pref_make(&ref, &f.m, &ns[k].kv, a, LEN_A);
        struct prefix_opts o = {.block = ns[k].block, .hot_limit = 64u << 20, .cold_dir = cold};
        struct prun p;
        prun_open(&p, &f.m, &ns[k].kv, &o);
        prun_prompt(&p, a, LEN_A, rows, gen);
        char what[160], name[100];
        snprintf(what, sizeof what, "%s block %lld after other namespaces", kv_name(&ns[k].kv, name, sizeof name),
                 (long long)ns[k].block);
        expect_ref(&ref, rows, gen, V, what);
        cr_expect_eq(p.pc.hit_tokens, 0, "%s: hit %lld tokens of another representation", what,
                     (long long)p.pc.hit_tokens);
        cr_expect_eq(p.pc.n_warnings, 0);
        files += (int)(LEN_A / ns[k].block);
        char names[64][80];
        cr_expect_eq(cold_files(cold, names, 64), files, "%s: its own files", what);
        prun_close(&p);
        free(ref.rows);
    }
    /* each namespace still finds its own entries */
    for (size_t k = 0; k < 2; k++) {
        struct pref ref;
        pref_make(&ref, &f.m, &ns[k].kv, b, LEN_B);
        struct prefix_opts o = {.block = BLOCK, .hot_limit = 64u << 20, .cold_dir = cold};
        struct prun p;
        prun_open(&p, &f.m, &ns[k].kv, &o);
        prun_prompt(&p, b, LEN_B, rows, gen);
        expect_ref(&ref, rows, gen, V, k ? "float B" : "kv4 B");
        cr_expect_eq(p.pc.hit_tokens, SHARED);
        prun_close(&p);
        free(ref.rows);
    }
    free(rows);
    free(cold);
    fx_close(&f);
}

/* Kernels round differently (scalar vs avx2/avx512 differ by ~1e-5 on the
 * fixtures): a cold entry written by a run with other kernels is a miss,
 * so a hit stays bitwise the run without the cache. */
Test(runtime, prefix_kernels_namespace)
{
    struct fx f;
    fx_open(&f, "e2b");
    int64_t V = f.V;
    int32_t a[LEN_A], b[LEN_B];
    prefix_prompts(&f, a, b);
    char *cold = subdir(f.tmp, "cold");
    struct prefix_opts o = {.block = BLOCK, .hot_limit = 64u << 20, .cold_dir = cold};
    static const enum kern_level lv[2] = {KERN_SCALAR, KERN_BEST};
    float *ref[2], *got[2];
    const char *name[2];
    int64_t hits[2];
    for (int k = 0; k < 2; k++) {
        struct runner r;
        struct prefix_cache pc;
        struct err e = {0};
        ref[k] = malloc((size_t)V * sizeof(float));
        got[k] = malloc((size_t)V * sizeof(float));
        cr_assert_eq(runner_init(&r, &f.m, TH_RUNNER(1, lv[k], TEST_CONTEXT), &e), ERR_OK, "%s", e.msg);
        name[k] = r.kt.name;
        cr_assert_eq(runner_prompt(&r, b, LEN_B, 0, NULL, ref[k], &e), ERR_OK, "%s", e.msg);
        runner_reset(&r, 0);
        cr_assert_eq(prefix_init(&pc, &r, &o, &e), ERR_OK, "%s", e.msg);
        cr_assert_eq(prefix_prompt(&pc, &r, 0, k ? b : a, k ? LEN_B : LEN_A, got[k], &e), ERR_OK, "%s", e.msg);
        hits[k] = pc.hit_tokens;
        prefix_free(&pc);
        runner_free(&r);
    }
    cr_expect_eq(hits[0], 0);
    cr_expect(rows_equal(ref[1], got[1], 1, V), "%s run after a %s run on one cold directory: not bitwise", name[1],
              name[0]);
    if (strcmp(name[0], name[1])) {
        cr_expect_eq(hits[1], 0, "a %s run restored %lld tokens computed by %s kernels", name[1], (long long)hits[1],
                     name[0]);
        cr_log_info("scalar vs %s kernels: last logits max |d| %.3g", name[1], max_abs_diff(ref[0], ref[1], V));
    } else {
        cr_expect_eq(hits[1], SHARED, "same kernels (%s): the shared blocks are restored", name[1]);
    }
    for (int k = 0; k < 2; k++) {
        free(ref[k]);
        free(got[k]);
    }
    free(cold);
    fx_close(&f);
}

/* Memory stays bounded on a prompt of 20 blocks: the hot tier holds at most
 * its limit (about 3 entries) while the run produced 20 entries; the cold
 * tier keeps them all, so a later run restores 19 blocks from disk. */
static void prefix_memory(int bits, double limit_entries)
{
    struct fx f;
    fx_open(&f, "e2b");
    int64_t V = f.V, T = 20 * BLOCK;
    struct kv_opts kv = kvo(bits, true);
    int32_t *tok = malloc((size_t)T * sizeof *tok);
    for (int64_t t = 0; t < T; t++)
        tok[t] = (int32_t)((f.tok[t % 24] + 31 * (t / 24)) % 512);
    struct pref ref;
    pref_make(&ref, &f.m, &kv, tok, T);
    float *rows = malloc((size_t)(GEN * V) * sizeof *rows);
    int32_t gen[GEN];

    /* the size of one entry: an unbounded hot-only run holds all 20 */
    struct prefix_opts big = {.block = BLOCK, .hot_limit = (size_t)1 << 30};
    struct prun p;
    prun_open(&p, &f.m, &kv, &big);
    prun_prompt(&p, tok, T, rows, gen);
    size_t total = p.pc.hot_bytes, entry = total / 20;
    cr_assert_eq(entry * 20, total, "entries of equal size (window = block)");
    prun_close(&p);

    char *cold = subdir(f.tmp, "cold");
    struct prefix_opts o = {.block = BLOCK, .hot_limit = (size_t)((double)entry * limit_entries), .cold_dir = cold};
    prun_open(&p, &f.m, &kv, &o);
    prun_prompt(&p, tok, T, rows, gen);
    expect_ref(&ref, rows, gen, V, "bounded, first pass");
    cr_expect_leq(p.pc.hot_bytes, o.hot_limit, "hot tier %zu bytes over its limit %zu", p.pc.hot_bytes, o.hot_limit);
    cr_expect_geq(p.pc.hot_bytes, (size_t)limit_entries * entry, "the hot tier keeps the most recent entries");
    cr_expect_gt(total, o.hot_limit, "the run produced more than the limit (%zu > %zu): evictions happened", total,
                 o.hot_limit);
    char names[64][80];
    cr_expect_eq(cold_files(cold, names, 64), 20);
    cr_expect_eq(prefix_cold_bytes(&p.pc), 20 * (64 + entry));
    /* again in the same run: blocks 1.. were evicted from RAM, come from disk */
    prun_prompt(&p, tok, T, rows, gen);
    expect_ref(&ref, rows, gen, V, "bounded, same run again");
    cr_expect_eq(p.pc.hit_tokens, T - BLOCK, "19 blocks restored");
    cr_expect_leq(p.pc.hot_bytes, o.hot_limit);
    cr_expect_eq(p.pc.n_warnings, 0);
    prun_close(&p);
    /* a later run */
    prun_open(&p, &f.m, &kv, &o);
    prun_prompt(&p, tok, T, rows, gen);
    expect_ref(&ref, rows, gen, V, "bounded, later run");
    cr_expect_eq(p.pc.hit_tokens, T - BLOCK, "19 blocks restored from disk");
    cr_expect_leq(p.pc.hot_bytes, o.hot_limit);
    prun_close(&p);
    /* hot only with the same bound: block 1 was evicted, so no hit, but correct */
    o.cold_dir = NULL;
    prun_open(&p, &f.m, &kv, &o);
    prun_prompt(&p, tok, T, rows, gen);
    prun_prompt(&p, tok, T, rows, gen);
    expect_ref(&ref, rows, gen, V, "bounded hot only, again");
    cr_expect_eq(p.pc.hit_tokens, 0, "the first blocks were evicted");
    cr_expect_leq(p.pc.hot_bytes, o.hot_limit);
    prun_close(&p);
    free(cold);
    free(rows);
    free(tok);
    free(ref.rows);
    fx_close(&f);
}

Test(runtime, prefix_memory_bound_float, .timeout = 120) { prefix_memory(0, 3.5); }
Test(runtime, prefix_memory_bound_kv4, .timeout = 120) { prefix_memory(4, 3.5); }
/* A hot tier of barely one entry: restoring must not lose the entry being
 * restored to the eviction the look-ahead at the next block causes. */
Test(runtime, prefix_memory_bound_one_entry, .timeout = 120) { prefix_memory(0, 1.5); }

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
    measure(base, got, T, V, &mt);
    char name[160];
    snprintf(name, sizeof name, "test9 %s (e2b, %lld prompt + %d decode positions)", what, (long long)P, GEN);
    report(name, &mt);
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

Test(runtime, test9_float_baseline) { test9("float baseline", 0, true, 16, 0.0, 1.0); }
Test(runtime, test9_kv4_short) { test9("kv-bits 4 short", 4, true, 16, KV4_KLD_MEAN, KV4_TOP1); }
Test(runtime, test9_kv8_short) { test9("kv-bits 8 short", 8, true, 16, KV8_KLD_MEAN, KV8_TOP1); }
/* 96 tokens: 12 windows; past the first KV-shared layer (5), whose sources
 * hold quantized entries: with skip-last on the shared full layer reads the
 * float layer 4, with it off everything a shared layer reads is quantized. */
Test(runtime, test9_kv4_long) { test9("kv-bits 4 long", 4, true, 96, KV4_KLD_MEAN, KV4_TOP1); }
Test(runtime, test9_kv4_long_skip_off) { test9("kv-bits 4 long, skip-last off", 4, false, 96, KV4_KLD_MEAN, KV4_TOP1); }
Test(runtime, test9_kv8_long) { test9("kv-bits 8 long", 8, true, 96, KV8_KLD_MEAN, KV8_TOP1); }

/* Alternating quantized and float runs against one cold prefix cache: every
 * run equals its own no-cache reference bitwise (states never mix), and
 * hits come only from runs of the same representation. */
Test(runtime, test9_alternating_cold_prefix_cache, .timeout = 120)
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

/* Greedy sampling is the first index of the largest logit, NaNs never
 * winning (a NaN at 0 stays the answer), against the one-chain definition on
 * lengths around the eight-lane blocks, with ties, infinities and NaNs. */
Test(runtime, greedy_is_first_argmax)
{
    struct sampler s;
    sampler_init(&s, 0.0f, 0, 1.0f, 0);
    uint64_t seed = 99;
    float x[203];
    for (int rep = 0; rep < 400; rep++) {
        int64_t n = 1 + rep % 203;
        for (int64_t i = 0; i < n; i++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            x[i] = (float)((seed >> 40) % 7) - 3.0f; /* few values: many ties */
        }
        if (rep % 5 == 1)
            x[(rep * 7) % n] = NAN;
        if (rep % 7 == 2)
            x[(rep * 3) % n] = INFINITY;
        if (rep % 11 == 3)
            x[n - 1] = 100.0f; /* the maximum in the tail past the blocks */
        if (rep % 13 == 4)
            x[0] = NAN;
        int64_t want = 0;
        for (int64_t i = 1; i < n; i++)
            if (x[i] > x[want])
                want = i;
        cr_assert_eq(sampler_next(&s, x, n), want, "n %lld, rep %d", (long long)n, rep);
    }
}
