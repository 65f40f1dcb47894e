#include "golden/check.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/fileio.h"
#include "core/npz.h"
#include "core/pool.h"
#include "golden/compare.h"
#include "golden/report.h"
#include "gp_config.h"
#include "kernels/kernels.h"
#include "runner/forward.h"

struct golden_check_opts golden_check_defaults(void)
{
    return (struct golden_check_opts){.threads = pool_default_threads(),
                                      .over = {(double)NAN, (double)NAN, (double)NAN, (double)NAN, (double)NAN,
                                               (double)NAN}};
}

/* The golden's thresholds with the overrides applied. */
static struct golden_thresholds applied(struct golden_thresholds th, const struct golden_thresholds *o)
{
    double *dst[6] = {&th.max_abs, &th.nmse, &th.kld_mean, &th.kld_p99, &th.kld_max, &th.top1_min};
    const double src[6] = {o->max_abs, o->nmse, o->kld_mean, o->kld_p99, o->kld_max, o->top1_min};
    for (int i = 0; i < 6; i++)
        if (!isnan(src[i]))
            *dst[i] = src[i] < 0 ? -1 : src[i];
    return th;
}

/* The HTML page of a check: the golden as A, the model as B, no layers. */
static int report(const struct golden *g, const float *logits, const struct golden_result *res, const char *model_path,
                  const char *golden_path, const char *path, struct err *e)
{
    struct compare_result cr = {.n_pos = g->T, .V = g->V, .n_prompts = 1, .m = res->m, .th = res->th,
                                .pass = res->pass, .jump_layer = -1,
                                .pos = calloc((size_t)(g->T ? g->T : 1), sizeof *cr.pos)};
    int rc = cr.pos ? compare_positions(g->logits, logits, g->T, g->V, cr.pos) : ERR_NOMEM;
    if (rc == ERR_OK) {
        for (int64_t t = 0; t < g->T; t++)
            cr.pos[t].t = t;
        compare_totals(&cr);
        rc = report_write(path, "gempack golden check", golden_path, model_path, &cr, NULL, e);
    } else {
        rc = err_set(e, ERR_NOMEM, "%s: cannot hold the report's positions", path);
    }
    free(cr.pos);
    return rc;
}

struct json_object *golden_text_meta(const struct model_text *mt, const struct text_prompt *p, const char *rendered)
{
    struct json_object *j = json_object_new_object(), *bos = json_object_new_array();
    size_t nb;
    const uint32_t *rule = tok_bos_rule(mt->tok, &nb);
    json_object_object_add(j, "kind", json_object_new_string(p->conversation ? "conversation" : p->chat ? "chat" : "raw"));
    json_object_object_add(j, "text", json_object_new_string_len(p->text, (int)p->len)); /* a conversation: its JSON */
    if (p->chat) {
        json_object_object_add(j, "system", p->system ? json_object_new_string(p->system) : NULL);
        json_object_object_add(j, "rendered", json_object_new_string(rendered));
    }
    json_object_object_add(j, "tokenizer_sha256", json_object_new_string(mt->tok_sha256));
    json_object_object_add(j, "template_sha256", mt->tmpl_sha256[0] ? json_object_new_string(mt->tmpl_sha256) : NULL);
    for (size_t i = 0; !p->chat && i < nb; i++)
        json_object_array_add(bos, json_object_new_int((int32_t)rule[i]));
    json_object_object_add(j, "bos_rule", bos); /* the ids the tokenizer put before the text (a chat's BOS is the template's) */
    return j;
}

/* A golden of text: the model's tokenizer (mt) must give the golden's ids again. */
static int retokenize(const struct model_text *mt, const char *model_path, const struct golden *g,
                      const char *golden_path, struct golden_result *res, struct err *e)
{
    struct json_object *text = NULL, *kind, *t, *sys = NULL;
    if (!g->meta || !json_object_object_get_ex(g->meta, "text", &text) || !text)
        return ERR_OK;
    if (!json_object_object_get_ex(text, "kind", &kind) || !json_object_object_get_ex(text, "text", &t) ||
        !json_object_is_type(t, json_type_string))
        return err_set(e, ERR_FORMAT, "%s: meta.json \"text\" without its kind and text", golden_path);
    json_object_object_get_ex(text, "system", &sys);
    struct text_prompt p = {.text = json_object_get_string(t), .len = (size_t)json_object_get_string_len(t),
                            .chat = strcmp(json_object_get_string(kind), "raw") != 0,
                            .conversation = !strcmp(json_object_get_string(kind), "conversation"),
                            .system = json_object_is_type(sys, json_type_string) ? json_object_get_string(sys) : NULL};
    int32_t *ids = NULL;
    int64_t n = 0;
    char *rendered = NULL;
    int rc = mt->tok ? text_encode(mt, &p, &ids, &n, &rendered, e)
                     : err_set(e, ERR_USAGE, "%s records text, and %s (%s)", golden_path, mt->tok_why, model_path);
    if (rc == ERR_OK) {
        res->retokenized = text_first_diff(mt->tok, g->tokens, g->T, ids, n, res->retoken_diff,
                                           sizeof res->retoken_diff) < 0 ? 1 : -1;
    }
    free(ids);
    free(rendered);
    return rc;
}

/* The golden's meta.json string `key` into dst ("" when absent). */
static void meta_string(const struct golden *g, const char *key, char *dst, size_t cap)
{
    struct json_object *v = NULL;
    snprintf(dst, cap, "%s", g->meta && json_object_object_get_ex(g->meta, key, &v) &&
                                     json_object_is_type(v, json_type_string) ? json_object_get_string(v) : "");
}

static void provenance(const struct model *m, const struct model_text *mt, const struct golden *g,
                       struct golden_provenance *p)
{
    struct json_object *v = NULL;
    snprintf(p->model_fingerprint, sizeof p->model_fingerprint, "%s", m->fingerprint);
    snprintf(p->tokenizer_sha256, sizeof p->tokenizer_sha256, "%s", mt->tok_sha256);
    snprintf(p->template_sha256, sizeof p->template_sha256, "%s", mt->tmpl_sha256);
    meta_string(g, "producer", p->golden_producer, sizeof p->golden_producer);
    meta_string(g, "model_fingerprint", p->golden_fingerprint, sizeof p->golden_fingerprint);
    p->golden_numerics = g->meta && json_object_object_get_ex(g->meta, "numerics", &v) &&
                                 json_object_is_type(v, json_type_int) ? json_object_get_int(v) : -1;
}

/* golden_self_test: perturbs logits[T, V] at one position, compares with the
 * thresholds in force and puts the position back. */
static void self_test(const struct golden *g, float *logits, struct golden_result *res)
{
    struct golden_self_test *st = &res->self_test;
    int64_t t = g->T / 2, V = g->V, top = golden_argmax(g->logits + t * V, V);
    float *row = logits + t * V, saved = row[top], other = -INFINITY;
    for (int64_t v = 0; v < V; v++)
        if (v != top && row[v] > other)
            other = row[v];
    double margin = V > 1 && isfinite(saved) && isfinite(other) ? (double)saved - (double)other : 0.0;
    *st = (struct golden_self_test){.ran = true, .position = t,
                                    .amount = margin + fmax(1.0, 2.0 * res->th.max_abs)};
    row[top] = (float)((double)saved - st->amount);
    struct golden_metrics pm;
    golden_compare(g, logits, res->th, &pm);
    row[top] = saved;
    bool pass;
    struct json_object *v = golden_verdict(&pm, &res->th, &pass), *f = json_object_object_get(v, "failures");
    st->caught = !pass;
    for (size_t i = 0, k = 0; i < json_object_array_length(f) && k < sizeof st->failed_on; i++) {
        const char *name = json_object_get_string(json_object_object_get(json_object_array_get_idx(f, i), "metric"));
        int w = snprintf(st->failed_on + k, sizeof st->failed_on - k, "%s%s", i ? ", " : "", name);
        k += w > 0 ? (size_t)w : 0;
    }
    json_object_put(v);
}

int golden_check_model(const char *model_path, const char *golden_path, const struct golden_check_opts *o,
                       struct golden_result *res, struct err *e)
{
    memset(res, 0, sizeof *res);
    struct model m;
    struct golden g;
    struct err te = {0};
    struct runner r = {0};
    float *logits = NULL;
    int rc = model_open(&m, model_path, e);
    if (rc != ERR_OK)
        return rc;
    if ((rc = golden_read(golden_path, m.cfg.vocab_size, &g, e)) != ERR_OK) {
        model_close(&m);
        return rc;
    }
    if (g.V != m.cfg.vocab_size)
        rc = err_set(e, ERR_FORMAT, "%s: golden vocabulary %lld, model %lld: not the same model", golden_path,
                     (long long)g.V, (long long)m.cfg.vocab_size);
    if (rc == ERR_OK && g.T == 0)
        rc = err_set(e, ERR_FORMAT, "%s: golden holds no positions", golden_path);
    for (int64_t t = 0; rc == ERR_OK && t < g.T; t++) /* the golden's tokens are the golden's fault */
        if (g.tokens[t] < 0 || g.tokens[t] >= g.V)
            rc = err_set(e, ERR_FORMAT, "%s: tokens.npy[%lld] = %d: outside the model's vocabulary [0, %lld)",
                         golden_path, (long long)t, g.tokens[t], (long long)g.V);
    if (rc == ERR_OK && o->report)
        rc = fio_check_output(o->report, e); /* before any work: not over an input */
    struct model_text mt = {0};
    if (rc == ERR_OK && text_open(&mt, model_path, &te) != ERR_OK) {
        mt = (struct model_text){0}; /* a golden of ids records the hashes of a tokenizer that loads, */
        if (g.meta && json_object_object_get_ex(g.meta, "text", NULL))
            *e = te, rc = te.code;   /* a golden of text needs it */
    }
    if (rc == ERR_OK) {
        provenance(&m, &mt, &g, &res->prov);
        rc = retokenize(&mt, model_path, &g, golden_path, res, e);
    }
    text_close(&mt);
    int64_t step = o->chunk > 0 && o->chunk < g.T ? o->chunk : g.T;
    struct golden_positions gp = {.outer = &o->progress, .what = "positions", .total = g.T, .passes = 1};
    if (rc == ERR_OK)
        rc = runner_init(&r, &m, &(struct runner_opts){.threads = o->threads, .kernels = KERN_BEST, .n_seq = 1,
                                                       .max_step = step, .max_context = g.T,
                                                       .progress = golden_positions_progress(&gp)}, e);
    if (rc == ERR_OK && !(logits = malloc((size_t)(g.T * g.V) * sizeof *logits)))
        rc = err_set(e, ERR_NOMEM, "out of memory");
    for (int64_t t = 0; rc == ERR_OK && t < g.T; t += step) {
        gp.at = t;
        gp.n = t + step <= g.T ? step : g.T - t;
        rc = runner_forward(&r, g.tokens + t, gp.n, logits + t * g.V, true, NULL, e);
    }
    if (rc == ERR_OK) {
        res->th = applied(g.th, &o->over);
        res->f64 = g.f64;
        golden_compare(&g, logits, res->th, &res->m);
        struct json_object *v = golden_verdict(&res->m, &res->th, &res->pass);
        json_object_put(v);
        if (o->self_test)
            self_test(&g, logits, res);
        res->pass = res->pass && res->retokenized >= 0 && (!o->self_test || res->self_test.caught);
    }
    if (rc == ERR_OK && o->report)
        rc = report(&g, logits, res, model_path, golden_path, o->report, e);
    free(logits);
    runner_free(&r);
    model_close(&m);
    golden_free(&g);
    return rc;
}

void golden_print(FILE *out, const char *model_path, const char *golden_path, const struct golden_result *res)
{
    const struct golden_metrics *mt = &res->m;
    fprintf(out, "gempack golden check: %s vs %s (%lld positions, vocab %lld, %s reference)\n", model_path, golden_path,
            (long long)mt->T, (long long)mt->V, res->f64 ? "float64" : "float32");
    fprintf(out, "  %-16s %-14s %s\n", "metric", "value", "threshold");
    const char *names[] = {"max_abs", "nmse", "kld_mean", "kld_p99", "kld_max", "top1"};
    const double vals[] = {mt->max_abs, mt->nmse, mt->kld_mean, mt->kld_p99, mt->kld_max, mt->top1};
    const double lims[] = {res->th.max_abs, res->th.nmse,    res->th.kld_mean,
                           res->th.kld_p99, res->th.kld_max, res->th.top1_min};
    for (int i = 0; i < 6; i++) {
        char lim[32] = "-";
        if (lims[i] >= 0)
            snprintf(lim, sizeof lim, "%s %.3g", i == 5 ? ">=" : "<=", lims[i]);
        fprintf(out, "  %-16s %-14.6g %s\n", names[i], vals[i], lim);
    }
    fprintf(out, "  %-16s %-14.6g\n  %-16s %-14.6g\n  %-16s %lld\n", "cosine", mt->cosine, "rms_dp", mt->rms_dp,
            "first_divergent", (long long)mt->first_divergent);
    if (mt->nonfinite)
        fprintf(out, "  %-16s %lld of %lld positions: the model's logits are not finite (a broken model)\n",
                "non-finite", (long long)mt->nonfinite, (long long)mt->T);
    fprintf(out, "  %-16s", "top-1..5");
    for (int k = 0; k < GOLDEN_TOPK; k++)
        fprintf(out, " %.4g", mt->topk[k]);
    fprintf(out, "\n  %-16s mean %.6g, max %.6g nats (KL and regret: the golden is the reference)\n", "argmax regret",
            mt->regret_mean, mt->regret_max);
    if (res->retokenized)
        fprintf(out, "  %-16s %s%s\n", "text",
                res->retokenized > 0 ? "re-tokenized by the model's tokenizer: the golden's ids"
                                     : "the golden's ids and the model's tokenizer's differ at ",
                res->retokenized > 0 ? "" : res->retoken_diff);
    const struct golden_provenance *p = &res->prov;
    fprintf(out, "  %-16s model %.16s, gempack %s, numerics %d; golden by %s", "measured", p->model_fingerprint,
            GEMPACK_VERSION, KERN_NUMERICS, p->golden_producer[0] ? p->golden_producer : "(not recorded)");
    if (p->golden_numerics >= 0)
        fprintf(out, ", numerics %d%s", p->golden_numerics,
                p->golden_numerics != KERN_NUMERICS ? " (not this build's: a gempack golden made before the "
                                                      "kernels' numerics changed)" : "");
    fputc('\n', out);
    const struct golden_self_test *st = &res->self_test;
    if (st->ran)
        fprintf(out, "  %-16s position %lld, the golden's top token lowered by %.4g: %s%s%s\n", "self-test",
                (long long)st->position, st->amount, st->caught ? "caught (" : "NOT CAUGHT: these thresholds pass "
                "a flipped top-1 and a logit off by that much", st->failed_on, st->caught ? ")" : "");
    fprintf(out, "verdict: %s\n", res->pass ? "PASS" : !st->ran || st->caught ? "FAIL (regression)"
                                                                           : "FAIL (the self-test was not caught)");
}

struct json_object *golden_result_json(const struct golden_result *res, bool *pass)
{
    const struct golden_provenance *p = &res->prov;
    struct json_object *v = golden_verdict(&res->m, &res->th, pass), *m = json_object_new_object(),
                       *model = json_object_new_object(), *golden = json_object_new_object();
    json_object_object_add(model, "fingerprint", json_object_new_string(p->model_fingerprint));
    json_object_object_add(model, "tokenizer_sha256", p->tokenizer_sha256[0] ? json_object_new_string(p->tokenizer_sha256) : NULL);
    json_object_object_add(model, "template_sha256", p->template_sha256[0] ? json_object_new_string(p->template_sha256) : NULL);
    json_object_object_add(golden, "producer", p->golden_producer[0] ? json_object_new_string(p->golden_producer) : NULL);
    json_object_object_add(golden, "model_fingerprint",
                           p->golden_fingerprint[0] ? json_object_new_string(p->golden_fingerprint) : NULL);
    json_object_object_add(golden, "numerics", p->golden_numerics >= 0 ? json_object_new_int(p->golden_numerics) : NULL);
    json_object_object_add(golden, "reference", json_object_new_string(res->f64 ? "float64" : "float32"));
    json_object_object_add(m, "model", model);
    json_object_object_add(m, "golden", golden);
    json_object_object_add(m, "gempack_version", json_object_new_string(GEMPACK_VERSION));
    json_object_object_add(m, "numerics", json_object_new_int(KERN_NUMERICS));
    json_object_object_add(m, "kernels", json_object_new_string("best"));
    json_object_object_add(v, "measured", m);
    if (res->retokenized)
        json_object_object_add(v, "text", json_object_new_string(res->retokenized > 0 ? "same ids" : res->retoken_diff));
    if (res->self_test.ran) {
        const struct golden_self_test *st = &res->self_test;
        struct json_object *t = json_object_new_object();
        json_object_object_add(t, "position", json_object_new_int64(st->position));
        json_object_object_add(t, "amount", json_object_new_double(st->amount));
        json_object_object_add(t, "caught", json_object_new_boolean(st->caught));
        json_object_object_add(t, "failed_on", json_object_new_string(st->failed_on));
        json_object_object_add(v, "self_test", t);
    }
    json_object_object_add(v, "verdict", json_object_new_string(res->pass ? "pass" : "fail"));
    *pass = res->pass;
    return v;
}

int golden_make_file(const char *model_path, const int32_t *tokens, int64_t T, int threads, const char *out_path,
                     struct json_object *text, const struct progress *progress, int64_t *V, struct err *e)
{
    struct golden_positions gp = {.outer = progress, .what = "positions", .n = T, .total = T, .passes = 1};
    struct model m;
    struct runner r = {0};
    float *logits = NULL;
    int rc = model_open(&m, model_path, e);
    if (rc != ERR_OK) {
        json_object_put(text);
        return rc;
    }
    *V = m.cfg.vocab_size;
    struct model_text mt = {0};
    rc = fio_check_output(out_path, e); /* before any work: not over an input */
    if (rc == ERR_OK && text_open(&mt, model_path, &(struct err){0}) != ERR_OK)
        mt = (struct model_text){0}; /* its tokenizer's and template's sha256, when it has one that loads */
    text_close(&mt);
    if (rc == ERR_OK)
        rc = runner_init(&r, &m, &(struct runner_opts){.threads = threads, .kernels = KERN_BEST, .n_seq = 1,
                                                       .max_step = T, .max_context = T,
                                                       .progress = golden_positions_progress(&gp)}, e);
    if (rc == ERR_OK && !(logits = malloc((size_t)(T * *V) * sizeof *logits)))
        rc = err_set(e, ERR_NOMEM, "out of memory");
    if (rc == ERR_OK)
        rc = runner_prompt(&r, tokens, T, 0, logits, NULL, e);
    if (rc == ERR_OK) {
        struct json_object *meta = json_object_new_object(), *tol = json_object_new_object();
        json_object_object_add(meta, "producer", json_object_new_string("gempack golden make " GEMPACK_VERSION));
        json_object_object_add(meta, "model_fingerprint", json_object_new_string(m.fingerprint));
        json_object_object_add(meta, "tokenizer_sha256", mt.tok_sha256[0] ? json_object_new_string(mt.tok_sha256) : NULL);
        json_object_object_add(meta, "template_sha256", mt.tmpl_sha256[0] ? json_object_new_string(mt.tmpl_sha256) : NULL);
        json_object_object_add(meta, "gempack_version", json_object_new_string(GEMPACK_VERSION));
        json_object_object_add(meta, "numerics", json_object_new_int(KERN_NUMERICS));
        json_object_object_add(meta, "kernels", json_object_new_string("best"));
        json_object_object_add(meta, "dtype", json_object_new_string("float32"));
        json_object_object_add(meta, "positions_scored", json_object_new_int64(T));
        json_object_object_add(meta, "kl_direction", json_object_new_string("KL(golden || model)"));
        json_object_object_add(meta, "tolerances_provenance",
                               json_object_new_string("gempack's defaults for a regression baseline (MODEL.md §9)"));
        json_object_object_add(tol, "max_abs", json_object_new_double(GOLDEN_DEFAULT_MAX_ABS));
        json_object_object_add(tol, "top1", json_object_new_double(GOLDEN_DEFAULT_TOP1));
        json_object_object_add(meta, "tolerances", tol);
        if (text)
            json_object_object_add(meta, "text", text);
        text = NULL;
        rc = npz_write_logits(out_path, 1, &tokens, &T, T, logits, *V, meta, e);
        json_object_put(meta);
    }
    json_object_put(text);
    free(logits);
    runner_free(&r);
    model_close(&m);
    return rc;
}
