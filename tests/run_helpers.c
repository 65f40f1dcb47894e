/* run_helpers.c - see run_helpers.h. */
#include "tests/run_helpers.h"

#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fileio.h"
#include "runner/sample.h"
#include "tests/helpers.h"

void fx_open(struct fx *f, const char *variant)
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

void fx_close(struct fx *f)
{
    model_close(&f->m);
    free(f->dir);
    th_rmtree(f->tmp);
}

struct kv_opts kvo(int bits, bool skip_last)
{
    return (struct kv_opts){.bits = bits, .group_size = 64, .skip_last_full = skip_last};
}

const char *kv_name(const struct kv_opts *kv, char *buf, size_t n)
{
    if (!kv->bits)
        snprintf(buf, n, "float");
    else
        snprintf(buf, n, "kv%d g%d start %lld skip-last %s", kv->bits, kv->group_size, (long long)kv->start,
                 kv->skip_last_full ? "on" : "off");
    return buf;
}

void runner_open(struct runner *r, const struct model *m, const struct kv_opts *kv, int n_seq)
{
    struct err e = {0};
    struct runner_opts o = {.threads = 1, .kernels = KERN_BEST, .kv = kv ? *kv : (struct kv_opts){0}, .n_seq = n_seq,
                            .max_step = TEST_STEP, .max_context = TEST_CONTEXT};
    cr_assert_eq(runner_init(r, m, &o, &e), ERR_OK, "%s", e.msg);
}

/* Logits [T, V] of tok through a fresh runner: runner_prompt in chunks of
 * `chunk` when P < 0, else tok[0, P) in one step and then one token a step. */
static float *run_logits(const struct model *m, const struct kv_opts *kv, const int32_t *tok, int64_t T,
                         int64_t chunk, int64_t P, struct run_info *info)
{
    struct runner r;
    struct err e = {0};
    int64_t V = m->cfg.vocab_size;
    runner_open(&r, m, kv, 1);
    float *lg = malloc((size_t)(T * V) * sizeof *lg);
    cr_assert(lg);
    if (P < 0) {
        cr_assert_eq(runner_prompt(&r, tok, T, chunk, lg, NULL, &e), ERR_OK, "%s", e.msg);
    } else {
        cr_assert_eq(runner_forward(&r, tok, P, lg, true, NULL, &e), ERR_OK, "%s", e.msg);
        for (int64_t t = P; t < T; t++)
            cr_assert_eq(runner_forward(&r, tok + t, 1, lg + t * V, true, NULL, &e), ERR_OK, "%s", e.msg);
    }
    if (info) {
        info->cache_bytes = runner_cache_bytes(&r, 0);
        info->float_layer = r.kv_float_layer;
    }
    runner_free(&r);
    return lg;
}

float *run_kv(const struct model *m, const struct kv_opts *kv, const int32_t *tok, int64_t T, int64_t chunk,
              struct run_info *info)
{
    return run_logits(m, kv, tok, T, chunk, -1, info);
}

float *run_prefill_decode(const struct model *m, const struct kv_opts *kv, const int32_t *tok, int64_t P,
                          int64_t T)
{
    return run_logits(m, kv, tok, T, 0, P, NULL);
}

bool all_finite(const float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(x[i]))
            return false;
    return true;
}

double max_abs_diff(const float *a, const float *b, int64_t n)
{
    double m = 0.0;
    for (int64_t i = 0; i < n; i++)
        m = fmax(m, fabs((double)a[i] - (double)b[i]));
    return m;
}

bool rows_equal(const float *a, const float *b, int64_t rows, int64_t V)
{
    return memcmp(a, b, (size_t)(rows * V) * sizeof *a) == 0;
}

void kld_measure(const float *ref, const float *got, int64_t T, int64_t V, struct golden_metrics *mt)
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
        double mp = -HUGE_VAL, mq = -HUGE_VAL, zp = 0.0, zq = 0.0, kl = 0.0;
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

void kld_report(const char *what, const struct golden_metrics *mt)
{
    cr_log_info("KLD %s: mean %.3e, p99 %.3e, max %.3e, top-1 %.4f (%lld positions)", what, mt->kld_mean, mt->kld_p99,
                mt->kld_max, mt->top1, (long long)mt->T);
    fprintf(stderr, "KLD %s: mean %.3e, p99 %.3e, max %.3e, top-1 %.4f (%lld positions)\n", what, mt->kld_mean,
            mt->kld_p99, mt->kld_max, mt->top1, (long long)mt->T);
}

void seqs_set(struct seqs3 *q, int n, int32_t *const *seq, const int64_t *len)
{
    memset(q, 0, sizeof *q);
    for (int b = 0; b < n; b++) {
        q->seq[b] = seq[b];
        q->len[b] = len[b];
    }
    q->s = (struct token_seqs){q->seq, q->len, n};
}

void batch_prompts(const struct fx *f, int32_t p[3][24], int64_t len[3])
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

void session_one(const struct model *m, const struct kv_opts *kv, int32_t *tok, int64_t T, int64_t chunk,
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

void prefix_prompts(const struct fx *f, int32_t *a, int32_t *b)
{
    for (int t = 0; t < SHARED; t++)
        a[t] = b[t] = f->tok[(7 * t) % 24];
    for (int t = SHARED; t < LEN_A; t++)
        a[t] = (f->tok[t - SHARED] + 101) % 512;
    for (int t = SHARED; t < LEN_B; t++)
        b[t] = (f->tok[t - SHARED + 5] * 3 + 7) % 512;
    cr_assert_neq(a[SHARED], b[SHARED]);
}

void prun_open(struct prun *p, const struct model *m, const struct kv_opts *kv, const struct prefix_opts *o)
{
    struct err e = {0};
    memset(p, 0, sizeof *p);
    runner_open(&p->r, m, kv, 1);
    if (o) {
        cr_assert_eq(prefix_init(&p->pc, &p->r, o, &e), ERR_OK, "%s", e.msg);
        p->has_pc = true;
    }
}

void prun_close(struct prun *p)
{
    if (p->has_pc)
        prefix_free(&p->pc);
    runner_free(&p->r);
}

void prun_prompt(struct prun *p, const int32_t *tok, int64_t T, float *rows, int32_t *gen)
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

void pref_make(struct pref *x, const struct model *m, const struct kv_opts *kv, const int32_t *tok, int64_t T)
{
    struct prun p;
    prun_open(&p, m, kv, NULL);
    x->rows = malloc((size_t)(GEN * m->cfg.vocab_size) * sizeof(float));
    prun_prompt(&p, tok, T, x->rows, x->gen);
    prun_close(&p);
}

void expect_ref(const struct pref *x, const float *rows, const int32_t *gen, int64_t V, const char *what)
{
    cr_expect(rows_equal(x->rows, rows, 1, V), "%s: last prompt logits not bitwise those without the cache", what);
    cr_expect(rows_equal(x->rows + V, rows + V, GEN - 1, V),
              "%s: decode logits after the prompt not bitwise those without the cache", what);
    cr_expect_arr_eq(x->gen, gen, sizeof x->gen, "%s: generated tokens differ", what);
}

char *subdir(const char *tmp, const char *name)
{
    char *p = fio_join(tmp, name);
    cr_assert(p);
    return p;
}
