#include "golden/golden.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "core/jsonx.h"
#include "core/npz.h"

#define GOLDEN_MAX_TOKENS (1u << 24)
#define GOLDEN_MAX_VOCAB (1u << 22) /* when the model's is not known */
#define GOLDEN_MAX_META (1u << 20)

/* Reads the golden's members from an open archive, each capped by what it
 * must hold: tokens by GOLDEN_MAX_TOKENS, logits by T x vocab, meta.json by
 * GOLDEN_MAX_META. */
static int read_members(const struct npz *z, int64_t vocab, struct golden *g, struct err *e)
{
    const char *path = z->path;
    struct npy tok, lg;
    int rc = npz_get_array(z, "tokens.npy", GOLDEN_MAX_TOKENS, &tok, e);
    if (rc != ERR_OK)
        return rc;
    if ((tok.dtype != DT_I32 && tok.dtype != DT_I64) || tok.rank != 1) {
        npy_free(&tok);
        return err_set(e, ERR_FORMAT, "%s: tokens.npy must be int32 [T]", path);
    }
    g->T = (int64_t)tok.shape[0];
    g->tokens = malloc((size_t)(g->T ? g->T : 1) * sizeof *g->tokens);
    for (int64_t t = 0; g->tokens && t < g->T; t++) {
        int64_t v = tok.dtype == DT_I32 ? ((int32_t *)tok.data)[t] : ((int64_t *)tok.data)[t];
        if (v < 0 || v > INT32_MAX) {
            npy_free(&tok);
            return err_set(e, ERR_FORMAT, "%s: tokens.npy[%lld] = %lld is not a token id", path, (long long)t,
                           (long long)v);
        }
        g->tokens[t] = (int32_t)v;
    }
    npy_free(&tok);
    if (!g->tokens)
        return err_set(e, ERR_NOMEM, "out of memory");
    /* logits_f64.npy, when present, must be valid: never silently skipped */
    g->f64 = npz_has(z, "logits_f64.npy");
    const char *lname = g->f64 ? "logits_f64.npy" : "logits.npy";
    uint64_t max_count = (uint64_t)g->T * (uint64_t)(vocab > 0 ? vocab : GOLDEN_MAX_VOCAB);
    if ((rc = npz_get_array(z, lname, max_count, &lg, e)) != ERR_OK)
        return rc == ERR_RANGE && vocab > 0
                   ? err_prefix(e, "logits must be float [T, V] with T = %lld tokens and V at most the model's "
                                   "vocabulary %lld", (long long)g->T, (long long)vocab)
                   : rc;
    if (lg.rank != 2 || (lg.dtype != DT_F32 && lg.dtype != DT_F64) || (int64_t)lg.shape[0] != g->T) {
        npy_free(&lg);
        return err_set(e, ERR_FORMAT, "%s: logits must be float [T, V] with T = %lld tokens", path, (long long)g->T);
    }
    g->V = (int64_t)lg.shape[1];
    g->logits = malloc((size_t)(lg.count ? lg.count : 1) * sizeof *g->logits);
    for (uint64_t k = 0; g->logits && k < lg.count; k++)
        g->logits[k] = lg.dtype == DT_F64 ? ((double *)lg.data)[k] : (double)((float *)lg.data)[k];
    npy_free(&lg);
    if (!g->logits)
        return err_set(e, ERR_NOMEM, "out of memory");
    if (npz_has(z, "meta.json")) {
        uint8_t *meta;
        size_t mlen;
        if ((rc = npz_get(z, "meta.json", GOLDEN_MAX_META, &meta, &mlen, e)) != ERR_OK)
            return rc;
        rc = jsonx_parse((const char *)meta, mlen, &g->meta, e);
        free(meta);
        if (rc != ERR_OK)
            return err_prefix(e, "%s: meta.json", path);
    }
    return golden_thresholds_from_meta(g, path, &g->th, e);
}

int golden_read(const char *path, int64_t vocab, struct golden *g, struct err *e)
{
    memset(g, 0, sizeof *g);
    struct npz z;
    int rc = npz_open(&z, path, e);
    if (rc == ERR_OK)
        rc = read_members(&z, vocab, g, e);
    npz_close(&z);
    if (rc != ERR_OK)
        golden_free(g);
    return rc;
}

void golden_free(struct golden *g)
{
    if (!g)
        return;
    free(g->tokens);
    free(g->logits);
    if (g->meta)
        json_object_put(g->meta);
    memset(g, 0, sizeof *g);
}

/* The thresholds by name (meta.json's keys, the fields a caller names) and
 * the largest value each may hold. */
static const struct {
    const char *key;
    size_t off;
    double max;
} threshold_keys[] = {{"max_abs", offsetof(struct golden_thresholds, max_abs), HUGE_VAL},
                      {"nmse", offsetof(struct golden_thresholds, nmse), HUGE_VAL},
                      {"kld_mean", offsetof(struct golden_thresholds, kld_mean), HUGE_VAL},
                      {"kld_p99", offsetof(struct golden_thresholds, kld_p99), HUGE_VAL},
                      {"kld_max", offsetof(struct golden_thresholds, kld_max), HUGE_VAL},
                      {"top1", offsetof(struct golden_thresholds, top1_min), 1.0}};

/* Where key's threshold is in t (*max: its largest value); NULL if key is none. */
static double *threshold_at(struct golden_thresholds *t, const char *key, double *max)
{
    for (size_t i = 0; i < sizeof threshold_keys / sizeof threshold_keys[0]; i++)
        if (!strcmp(threshold_keys[i].key, key)) {
            *max = threshold_keys[i].max;
            return (double *)(void *)((char *)t + threshold_keys[i].off);
        }
    return NULL;
}

int golden_threshold_parse(struct golden_thresholds *t, const char *key, const char *text, struct err *e)
{
    double max, *at = threshold_at(t, key, &max);
    char *end;
    double v = strtod(text, &end);
    if (!at)
        return err_set(e, ERR_USAGE, "'%s': not a threshold (max_abs, nmse, kld_mean, kld_p99, kld_max, top1)", key);
    if (!strcmp(text, "off")) { /* as meta.json's null: not checked */
        *at = -1;
        return ERR_OK;
    }
    if (!*text || *end || !isfinite(v) || v < 0 || v > max)
        return err_set(e, ERR_USAGE, "'%s' %s: expected a number in %s, or off", key, text, max == 1.0 ? "[0, 1]" : "[0, inf)");
    *at = v;
    return ERR_OK;
}

int golden_thresholds_from_meta(const struct golden *g, const char *path, struct golden_thresholds *t,
                                struct err *e)
{
    *t = (struct golden_thresholds){.max_abs = GOLDEN_DEFAULT_MAX_ABS, .nmse = -1, .kld_mean = -1, .kld_p99 = -1,
                                    .kld_max = -1, .top1_min = GOLDEN_DEFAULT_TOP1};
    struct json_object *tol;
    if (!g->meta || !json_object_object_get_ex(g->meta, "tolerances", &tol) || !tol)
        return ERR_OK;
    if (json_object_get_type(tol) != json_type_object)
        return err_set(e, ERR_FORMAT, "%s: meta.json: \"tolerances\" is %s, expected an object of thresholds", path,
                       jsonx_type_name(tol));
    json_object_object_foreach(tol, key, val) {
        double max, *dst = threshold_at(t, key, &max);
        if (!dst)
            return err_set(e, ERR_FORMAT, "%s: meta.json: tolerances.%s is not a threshold gempack knows (max_abs, "
                                          "nmse, kld_mean, kld_p99, kld_max, top1)", path, key);
        enum json_type ty = json_object_get_type(val);
        double x = ty == json_type_double || ty == json_type_int ? json_object_get_double(val) : (double)NAN;
        if (ty == json_type_null)
            *dst = -1; /* null disables the check */
        else if (!isfinite(x) || x < 0 || x > max)
            return err_set(e, ERR_FORMAT, "%s: meta.json: tolerances.%s is %s %s, expected a number in [0, %s] or null",
                           path, key, jsonx_type_name(val), json_object_to_json_string(val), max == 1.0 ? "1" : "inf");
        else
            *dst = x;
    }
    return ERR_OK;
}

/* log-softmax of a row in float64 into out[V]. */
void golden_log_softmax(const double *z, int64_t V, double *out)
{
    double m = -HUGE_VAL, s = 0.0;
    for (int64_t k = 0; k < V; k++)
        m = fmax(m, z[k]);
    for (int64_t k = 0; k < V; k++)
        s += exp(z[k] - m);
    double lse = m + log(s);
    for (int64_t k = 0; k < V; k++)
        out[k] = z[k] - lse;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int64_t golden_argmax(const double *z, int64_t V)
{
    int64_t b = 0;
    for (int64_t k = 1; k < V; k++)
        if (z[k] > z[b])
            b = k;
    return b;
}

int golden_rank(const double *z, int64_t V, int64_t i, int cap)
{
    int rank = 0;
    for (int64_t k = 0; k < V && rank < cap; k++)
        rank += z[k] > z[i] || (z[k] == z[i] && k < i);
    return rank;
}

void golden_compare(const struct golden *g, const float *got, struct golden_thresholds th, struct golden_metrics *m)
{
    int64_t T = g->T, V = g->V;
    memset(m, 0, sizeof *m);
    m->T = T;
    m->V = V;
    m->first_divergent = -1;
    double *lp = malloc((size_t)V * sizeof *lp), *lq = malloc((size_t)V * sizeof *lq),
           *q = malloc((size_t)V * sizeof *q), *kl = malloc((size_t)(T ? T : 1) * sizeof *kl);
    if (!lp || !lq || !q || !kl) {
        free(lp);
        free(lq);
        free(q);
        free(kl);
        m->max_abs = HUGE_VAL;
        return;
    }
    double se = 0.0, sr = 0.0, dot = 0.0, ng = 0.0, dp2 = 0.0;
    int64_t agree = 0, within[GOLDEN_TOPK] = {0};
    for (int64_t t = 0; t < T; t++) {
        const double *ref = g->logits + t * V;
        if (golden_row_broken(got + t * V, V)) { /* a broken row: the worst value of every metric, never agreement */
            m->nonfinite++;
            m->max_abs = se = kl[t] = m->regret_max = (double)INFINITY;
            m->regret_mean += (double)INFINITY;
            dp2 += 1.0;
            if (m->first_divergent < 0)
                m->first_divergent = t;
            continue;
        }
        double row_max = 0.0;
        for (int64_t k = 0; k < V; k++) {
            double gv = (double)got[t * V + k], d = gv == ref[k] ? 0.0 : gv - ref[k];
            if (d != d)
                d = HUGE_VAL; /* a NaN reference logit is infinitely wrong (fmax would drop it) */
            row_max = fmax(row_max, fabs(d));
            se += d * d;
            sr += ref[k] * ref[k];
            dot += gv * ref[k];
            ng += gv * gv;
            q[k] = gv;
        }
        m->max_abs = fmax(m->max_abs, row_max);
        golden_log_softmax(ref, V, lp);
        golden_log_softmax(q, V, lq);
        double klt = 0.0;
        for (int64_t k = 0; k < V; k++)
            if (lp[k] > -HUGE_VAL) /* p = 0 terms are 0, even where q = 0 too */
                klt += exp(lp[k]) * (lp[k] - lq[k]);
        kl[t] = klt != klt ? (double)INFINITY : fmax(klt, 0.0); /* NaN: the reference's row is not a distribution */
        int64_t a = golden_argmax(ref, V), b = golden_argmax(q, V);
        agree += a == b;
        int rank = golden_rank(q, V, a, GOLDEN_TOPK);
        for (int k = rank; k < GOLDEN_TOPK; k++)
            within[k]++;
        double regret = lp[a] - lp[b];
        m->regret_mean += regret;
        m->regret_max = fmax(m->regret_max, regret);
        double dp = exp(lp[a]) - exp(lq[a]);
        dp2 += dp * dp;
        if (m->first_divergent < 0 && (a != b || (th.max_abs >= 0 && row_max > th.max_abs)))
            m->first_divergent = t;
    }
    double kl_sum = 0.0;
    for (int64_t t = 0; t < T; t++) {
        kl_sum += kl[t];
        m->kld_max = fmax(m->kld_max, kl[t]);
    }
    qsort(kl, (size_t)T, sizeof *kl, cmp_double);
    m->kld_mean = T ? kl_sum / (double)T : 0.0;
    m->kld_p99 = T ? kl[(int64_t)ceil(0.99 * (double)T) - 1] : 0.0; /* nearest rank */
    m->nmse = sr > 0 ? se / sr : 0.0;
    m->cosine = m->nonfinite ? (double)NAN : sr > 0 && ng > 0 ? dot / sqrt(sr * ng) : 1.0;
    m->top1 = T ? (double)agree / (double)T : 1.0;
    m->rms_dp = T ? sqrt(dp2 / (double)T) : 0.0;
    m->regret_mean = T ? m->regret_mean / (double)T : 0.0;
    for (int k = 0; k < GOLDEN_TOPK; k++)
        m->topk[k] = T ? (double)within[k] / (double)T : 1.0;
    free(lp);
    free(lq);
    free(q);
    free(kl);
}

bool golden_fail_if(struct json_object *failures, const char *name, double value, double limit, bool above)
{
    if (limit < 0 || (above ? value <= limit : value >= limit))
        return false;
    struct json_object *f = json_object_new_object();
    json_object_object_add(f, "metric", json_object_new_string(name));
    json_object_object_add(f, "value", golden_num(value));
    json_object_object_add(f, "threshold", json_object_new_double(limit));
    json_object_array_add(failures, f);
    return true;
}

bool golden_row_broken(const float *x, int64_t n)
{
    bool any = false;
    for (int64_t i = 0; i < n; i++) {
        if (x[i] != x[i] || x[i] == INFINITY)
            return true;
        any |= x[i] > -INFINITY;
    }
    return !any;
}

struct json_object *golden_num(double v)
{
    return isfinite(v) ? json_object_new_double(v) : NULL; /* JSON has no NaN or infinity */
}

static struct json_object *num_or_null(double v)
{
    return v < 0 ? NULL : json_object_new_double(v);
}

struct json_object *golden_verdict(const struct golden_metrics *m, const struct golden_thresholds *t, bool *pass)
{
    struct json_object *o = json_object_new_object(), *jm = json_object_new_object(), *jt = json_object_new_object(),
                       *f = json_object_new_array();
    golden_fail_if(f, "max_abs", m->max_abs, t->max_abs, true);
    golden_fail_if(f, "nmse", m->nmse, t->nmse, true);
    golden_fail_if(f, "kld_mean", m->kld_mean, t->kld_mean, true);
    golden_fail_if(f, "kld_p99", m->kld_p99, t->kld_p99, true);
    golden_fail_if(f, "kld_max", m->kld_max, t->kld_max, true);
    golden_fail_if(f, "top1", m->top1, t->top1_min, false);
    golden_fail_if(f, "nonfinite_positions", (double)m->nonfinite, 0.0, true);
    *pass = json_object_array_length(f) == 0;
    json_object_object_add(o, "schema", json_object_new_string("gempack.golden/1"));
    json_object_object_add(o, "verdict", json_object_new_string(*pass ? "pass" : "fail"));
    json_object_object_add(jm, "positions", json_object_new_int64(m->T));
    json_object_object_add(jm, "vocab", json_object_new_int64(m->V));
    json_object_object_add(jm, "max_abs", golden_num(m->max_abs));
    json_object_object_add(jm, "nmse", golden_num(m->nmse));
    json_object_object_add(jm, "cosine", golden_num(m->cosine));
    json_object_object_add(jm, "kld_mean", golden_num(m->kld_mean));
    json_object_object_add(jm, "kld_p99", golden_num(m->kld_p99));
    json_object_object_add(jm, "kld_max", golden_num(m->kld_max));
    json_object_object_add(jm, "top1", golden_num(m->top1));
    json_object_object_add(jm, "rms_dp", golden_num(m->rms_dp));
    json_object_object_add(jm, "first_divergent", json_object_new_int64(m->first_divergent));
    json_object_object_add(jm, "nonfinite_positions", json_object_new_int64(m->nonfinite));
    struct json_object *topk = json_object_new_array();
    for (int k = 0; k < GOLDEN_TOPK; k++)
        json_object_array_add(topk, golden_num(m->topk[k]));
    json_object_object_add(jm, "topk_agreement", topk);
    json_object_object_add(jm, "regret_mean", golden_num(m->regret_mean));
    json_object_object_add(jm, "regret_max", golden_num(m->regret_max));
    json_object_object_add(jm, "kl_direction", json_object_new_string("KL(golden || model): the golden is the reference"));
    json_object_object_add(o, "metrics", jm);
    for (size_t i = 0; i < sizeof threshold_keys / sizeof threshold_keys[0]; i++)
        json_object_object_add(jt, threshold_keys[i].key,
                               num_or_null(*(const double *)(const void *)((const char *)t + threshold_keys[i].off)));
    json_object_object_add(o, "thresholds", jt);
    json_object_object_add(o, "failures", f);
    return o;
}

static void layer_done(void *ctx, const char *what, uint64_t done, uint64_t total, const char *unit)
{
    (void)what;
    (void)unit;
    const struct golden_positions *p = ctx;
    double f = ((double)p->pass + (double)done / (double)total) / (double)p->passes;
    progress_report(p->outer, p->what, (uint64_t)p->at + (uint64_t)((double)p->n * f), (uint64_t)p->total,
                    "positions");
}

struct progress golden_positions_progress(struct golden_positions *p)
{
    return p->outer && p->outer->fn ? (struct progress){layer_done, p} : (struct progress){0};
}
