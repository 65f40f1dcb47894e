#include "golden/compare.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "converter/convert.h"
#include "core/bytes.h"
#include "core/fileio.h"
#include "core/pack.h"
#include "core/sha256.h"
#include "fixtures/fixture.h"
#include "golden/eval.h"
#include "golden/report.h"
#include "gp_config.h"
#include "runner/model.h"

/* One model on one prompt, in one prefill: logits [T, V] and, with a probe,
 * every layer's branches and output [L, T, H]. */
struct side {
    struct model m;
    bool open;
    float *logits, *attn, *mlp, *hidden;
};

static int side_run(struct side *s, const struct kv_opts *kv, int threads, struct progress progress, const int32_t *tok,
                    int64_t T, const float *inject, int64_t inject_layers, struct err *e)
{
    const struct gp_config *c = &s->m.cfg;
    size_t per = (size_t)(c->n_layers * T * c->hidden_size);
    free(s->logits);
    free(s->attn);
    free(s->mlp);
    free(s->hidden);
    s->logits = malloc((size_t)(T * c->vocab_size) * sizeof *s->logits);
    s->attn = malloc(per * sizeof *s->attn);
    s->mlp = malloc(per * sizeof *s->mlp);
    s->hidden = malloc(per * sizeof *s->hidden);
    if (!s->logits || !s->attn || !s->mlp || !s->hidden)
        return err_set(e, ERR_NOMEM, "%s: cannot hold %lld positions of every layer", model_name(&s->m), (long long)T);
    struct runner r;
    struct runner_probe p = {s->attn, s->mlp, s->hidden, inject, inject_layers};
    int rc = runner_init(&r, &s->m,
                         &(struct runner_opts){.threads = threads, .kernels = KERN_BEST, .kv = *kv, .n_seq = 1,
                                               .max_step = T, .max_context = T, .progress = progress},
                         e);
    if (rc == ERR_OK) {
        r.probe = &p;
        rc = runner_prompt(&r, tok, T, 0, s->logits, NULL, e);
    }
    runner_free(&r);
    return rc;
}

static void side_free(struct side *s)
{
    if (s->open)
        model_close(&s->m);
    free(s->logits);
    free(s->attn);
    free(s->mlp);
    free(s->hidden);
}

/* Sums of a², b², ab and (a − b)² of one layer's values, across prompts. */
struct sums {
    double aa, bb, ab, dd;
};

static void add_sums(struct sums *s, const float *a, const float *b, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        double x = (double)a[i], y = (double)b[i], d = x - y;
        s->aa += x * x;
        s->bb += y * y;
        s->ab += x * y;
        s->dd += d * d;
    }
}

static struct compare_err err_of(const struct sums *s)
{
    struct compare_err r;
    if (!isfinite(s->dd) || !isfinite(s->bb)) /* B's values are not finite: the worst error, no agreement */
        return (struct compare_err){(double)INFINITY, (double)NAN, -(double)INFINITY};
    r.rel = s->aa > 0 ? sqrt(s->dd / s->aa) : s->dd > 0 ? (double)INFINITY : 0.0;
    r.cosine = s->aa > 0 && s->bb > 0 ? s->ab / sqrt(s->aa * s->bb) : 1.0;
    r.sqnr_db = s->dd > 0 ? 10.0 * log10(s->aa / s->dd) : (double)INFINITY;
    return r;
}

int compare_positions(const double *a, const float *b, int64_t n, int64_t V, struct compare_pos *out)
{
    double *w = malloc(3 * (size_t)V * sizeof *w), *wb = w, *la = w + V, *lb = w + 2 * V;
    if (!w)
        return ERR_NOMEM;
    for (int64_t t = 0; t < n; t++) {
        const double *wa = a + t * V;
        struct compare_pos *p = &out[t];
        if (golden_row_broken(b + t * V, V)) { /* the worst value of every metric, never agreement */
            golden_log_softmax(wa, V, la);
            p->kl_ab = p->kl_ba = p->regret = p->max_abs = p->nmse = (double)INFINITY;
            p->cosine = (double)NAN;
            p->p_top = exp(la[golden_argmax(wa, V)]);
            p->rank = COMPARE_TOPK;
            continue;
        }
        double mx = 0.0, aa = 0.0, bb = 0.0, ab2 = 0.0, dd = 0.0;
        for (int64_t k = 0; k < V; k++) {
            wb[k] = (double)b[t * V + k];
            mx = fmax(mx, fabs(wa[k] - wb[k]));
            aa += wa[k] * wa[k];
            bb += wb[k] * wb[k];
            ab2 += wa[k] * wb[k];
            dd += (wa[k] - wb[k]) * (wa[k] - wb[k]);
        }
        golden_log_softmax(wa, V, la);
        golden_log_softmax(wb, V, lb);
        double ab = 0.0, ba = 0.0;
        for (int64_t k = 0; k < V; k++) {
            if (la[k] > -HUGE_VAL)
                ab += exp(la[k]) * (la[k] - lb[k]);
            if (lb[k] > -HUGE_VAL)
                ba += exp(lb[k]) * (lb[k] - la[k]);
        }
        int64_t ia = golden_argmax(wa, V), ib = golden_argmax(wb, V);
        p->kl_ab = fmax(ab, 0.0);
        p->kl_ba = fmax(ba, 0.0);
        p->regret = la[ia] - la[ib];
        p->max_abs = mx;
        p->nmse = aa > 0 ? dd / aa : 0.0;                                  /* as golden_compare's totals */
        p->cosine = aa > 0 && bb > 0 ? ab2 / sqrt(aa * bb) : 1.0;
        p->p_top = exp(la[ia]);
        p->rank = golden_rank(wb, V, ia, COMPARE_TOPK);
    }
    free(w);
    return ERR_OK;
}

/* The first layer (after keep_a) whose hidden error is at least
 * COMPARE_JUMP times its predecessor's. */
static void find_jump(struct compare_result *r, int64_t keep_a)
{
    r->jump_layer = -1;
    r->jump_ratio = 0.0;
    for (int64_t i = keep_a + 1; i < r->L && r->jump_layer < 0; i++) {
        double prev = r->layers[i - 1].hidden.rel, cur = r->layers[i].hidden.rel;
        double ratio = prev > 0 ? cur / prev : cur > 0 ? (double)INFINITY : 0.0;
        if (ratio >= COMPARE_JUMP) {
            r->jump_ratio = ratio;
            r->jump_layer = i;
        }
    }
}

void compare_totals(struct compare_result *r)
{
    int64_t n = r->n_pos;
    for (int64_t i = 0; i < n; i++) {
        const struct compare_pos *p = &r->pos[i];
        r->kl_ba_mean += p->kl_ba;
        struct compare_bin *b = &r->bins[p->p_top < 0.5 ? 0 : p->p_top < 0.9 ? 1 : 2];
        b->n++;
        b->kl_ab += p->kl_ab;
        b->kl_ba += p->kl_ba;
        b->top1 += p->rank == 0;
        b->regret += p->regret;
        b->max_abs += p->max_abs;
        b->nmse += p->nmse;
        b->cosine += p->cosine;
    }
    r->kl_ba_mean = n ? r->kl_ba_mean / (double)n : 0.0;
    for (int k = 0; k < COMPARE_BINS; k++) {
        struct compare_bin *b = &r->bins[k];
        double m = b->n ? 1.0 / (double)b->n : 0.0;
        b->kl_ab *= m, b->kl_ba *= m, b->top1 *= m, b->regret *= m, b->max_abs *= m, b->nmse *= m, b->cosine *= m;
    }
}

int compare_models(const char *a_path, const char *b_path, const struct token_seqs *prompts,
                   const struct compare_opts *o, struct compare_result *r, struct err *e)
{
    memset(r, 0, sizeof *r);
    struct side A = {0}, B = {0};
    int rc = model_open(&A.m, a_path, e);
    A.open = rc == ERR_OK;
    if (rc == ERR_OK && (rc = model_open(&B.m, b_path, e)) == ERR_OK)
        B.open = true;
    const struct gp_config *ca = &A.m.cfg, *cb = &B.m.cfg;
    if (rc == ERR_OK && (ca->vocab_size != cb->vocab_size || ca->n_layers != cb->n_layers ||
                         ca->hidden_size != cb->hidden_size))
        rc = err_set(e, ERR_USAGE, "%s and %s are not two forms of one model: vocabulary %lld / %lld, layers %lld / "
                                   "%lld, hidden %lld / %lld",
                     a_path, b_path, (long long)ca->vocab_size, (long long)cb->vocab_size, (long long)ca->n_layers,
                     (long long)cb->n_layers, (long long)ca->hidden_size, (long long)cb->hidden_size);
    if (rc == ERR_OK && o->check_out)
        rc = fio_check_output(o->check_out, e);
    if (rc == ERR_OK && (o->keep_a < 0 || o->keep_a > ca->n_layers))
        rc = err_set(e, ERR_USAGE, "'keep_a' %lld: expected 0..%lld (the layers)", (long long)o->keep_a,
                     (long long)ca->n_layers);
    int64_t n_pos = 0, maxT = 0;
    for (int p = 0; p < prompts->n; p++) {
        n_pos += prompts->len[p];
        maxT = prompts->len[p] > maxT ? prompts->len[p] : maxT;
    }
    int64_t V = ca->vocab_size, L = ca->n_layers, H = ca->hidden_size;
    struct sums *sums = calloc((size_t)(3 * L + 1), sizeof *sums);
    float *la_all = rc == ERR_OK ? malloc((size_t)(n_pos * V) * sizeof *la_all) : NULL,
          *lb_all = rc == ERR_OK ? malloc((size_t)(n_pos * V) * sizeof *lb_all) : NULL;
    r->pos = calloc((size_t)(n_pos ? n_pos : 1), sizeof *r->pos);
    r->layers = calloc((size_t)(L ? L : 1), sizeof *r->layers);
    if (rc == ERR_OK && (!sums || !la_all || !lb_all || !r->pos || !r->layers))
        rc = err_set(e, ERR_NOMEM, "cannot hold %lld positions of %lld logits", (long long)n_pos, (long long)V);
    struct kv_opts kv_a = {0};
    int64_t at = 0;
    for (int p = 0; rc == ERR_OK && p < prompts->n; p++) {
        int64_t T = prompts->len[p];
        char what[32];
        snprintf(what, sizeof what, "prompt %d", p + 1);
        struct golden_positions gp = {&o->progress, what, at, T, n_pos, 0, 2}; /* A's layers, then B's */
        rc = side_run(&A, &kv_a, o->threads, golden_positions_progress(&gp), prompts->seq[p], T, NULL, 0, e);
        gp.pass = 1;
        if (rc == ERR_OK)
            rc = side_run(&B, &o->kv_b, o->threads, golden_positions_progress(&gp), prompts->seq[p], T, A.hidden,
                          o->keep_a, e);
        if (rc != ERR_OK)
            break;
        memcpy(la_all + at * V, A.logits, (size_t)(T * V) * sizeof *la_all);
        memcpy(lb_all + at * V, B.logits, (size_t)(T * V) * sizeof *lb_all);
        for (int64_t t = 0; t < T; t++)
            r->pos[at + t] = (struct compare_pos){.prompt = p, .t = t};
        for (int64_t i = 0; i < L; i++) {
            size_t off = (size_t)(i * T * H), n = (size_t)(T * H);
            add_sums(&sums[3 * i], A.hidden + off, B.hidden + off, n);
            add_sums(&sums[3 * i + 1], A.attn + off, B.attn + off, n);
            add_sums(&sums[3 * i + 2], A.mlp + off, B.mlp + off, n);
        }
        at += T;
    }
    if (rc == ERR_OK) {
        r->n_pos = n_pos;
        r->V = V;
        r->L = L;
        r->n_prompts = prompts->n;
        for (int64_t i = 0; i < L; i++)
            r->layers[i] = (struct compare_layer){err_of(&sums[3 * i]), err_of(&sums[3 * i + 1]),
                                                  err_of(&sums[3 * i + 2])};
        find_jump(r, o->keep_a);
        struct golden g = {.T = n_pos, .V = V, .logits = malloc((size_t)(n_pos * V) * sizeof(double))};
        if (!g.logits) {
            rc = err_set(e, ERR_NOMEM, "out of memory");
        } else {
            for (int64_t k = 0; k < n_pos * V; k++)
                g.logits[k] = (double)la_all[k];
            golden_compare(&g, lb_all, o->th, &r->m);
            if (compare_positions(g.logits, lb_all, n_pos, V, r->pos) != ERR_OK)
                rc = err_set(e, ERR_NOMEM, "out of memory");
            free(g.logits);
            compare_totals(r);
            r->th = o->th;
            struct json_object *v = golden_verdict(&r->m, &r->th, &r->pass);
            json_object_put(v);
        }
    }
    free(sums);
    free(la_all);
    free(lb_all);
    side_free(&A);
    side_free(&B);
    return rc;
}

void compare_free(struct compare_result *r)
{
    free(r->pos);
    free(r->layers);
    memset(r, 0, sizeof *r);
}

static void print_err(FILE *out, const char *what, const struct compare_err *x)
{
    fprintf(out, "  %s %9.3g %8.6f %7.1f", what, x->rel, x->cosine, x->sqnr_db);
}

void compare_print(FILE *out, const char *a_path, const char *b_path, const struct compare_opts *o,
                   const struct compare_result *r)
{
    const struct golden_metrics *m = &r->m;
    fprintf(out, "gempack compare: A %s, B %s: %d prompt%s, %lld positions%s\n", a_path, b_path, r->n_prompts,
            r->n_prompts == 1 ? "" : "s", (long long)r->n_pos, o->kv_b.bits ? ", B with a quantized KV cache" : "");
    fprintf(out, "  KL(A||B) mean %.4g  p99 %.4g  max %.4g nats   KL(B||A) mean %.4g\n", m->kld_mean, m->kld_p99,
            m->kld_max, r->kl_ba_mean);
    fprintf(out, "  top-1..5 agreement");
    for (int k = 0; k < COMPARE_TOPK; k++)
        fprintf(out, " %.1f%%", 100.0 * r->m.topk[k]);
    fprintf(out, "   argmax regret mean %.4g max %.4g nats\n", r->m.regret_mean, r->m.regret_max);
    fprintf(out, "  logits: max |d| %.4g  NMSE %.4g  cosine %.8f\n", m->max_abs, m->nmse, m->cosine);
    if (m->nonfinite)
        fprintf(out, "  B's logits are not finite at %lld of %lld positions (first: %lld): a broken model\n",
                (long long)m->nonfinite, (long long)r->n_pos, (long long)m->first_divergent);
    static const char *const bins[] = {"p(A top) < 0.5", "0.5 .. 0.9", ">= 0.9"};
    for (int k = 0; k < COMPARE_BINS; k++)
        if (r->bins[k].n)
            fprintf(out, "  %-15s %5lld positions  KL(A||B) %.4g  KL(B||A) %.4g  top-1 %.1f%%  regret %.4g  max |d| %.4g"
                         "  NMSE %.4g  cosine %.6f\n",
                    bins[k], (long long)r->bins[k].n, r->bins[k].kl_ab, r->bins[k].kl_ba, 100.0 * r->bins[k].top1,
                    r->bins[k].regret, r->bins[k].max_abs, r->bins[k].nmse, r->bins[k].cosine);
        else
            fprintf(out, "  %-15s     0 positions\n", bins[k]);
    fprintf(out, "per layer (B against A: relative error, cosine, SQNR dB):\n");
    fprintf(out, "  layer     hidden                        attention                     feed-forward\n");
    for (int64_t i = 0; i < r->L; i++) {
        fprintf(out, "  %5lld", (long long)i);
        print_err(out, "", &r->layers[i].hidden);
        print_err(out, "", &r->layers[i].attn);
        print_err(out, "", &r->layers[i].mlp);
        fprintf(out, "%s\n", i < o->keep_a ? "  (B takes A's output)" : i == r->jump_layer ? "  <- jump" : "");
    }
    if (r->jump_layer >= 0)
        fprintf(out, "jump: layer %lld, hidden error x%.3g over layer %lld\n", (long long)r->jump_layer, r->jump_ratio,
                (long long)(r->jump_layer - 1));
    else
        fprintf(out, "jump: none (no layer's hidden error is %gx its predecessor's)\n", COMPARE_JUMP);
    fprintf(out, "verdict: %s\n", r->pass ? "PASS" : "FAIL");
}


static struct json_object *err_json(const struct compare_err *x)
{
    struct json_object *o = json_object_new_object();
    json_object_object_add(o, "relative_error", golden_num(x->rel));
    json_object_object_add(o, "cosine", golden_num(x->cosine));
    json_object_object_add(o, "sqnr_db", golden_num(x->sqnr_db));
    return o;
}

/* The totals, into o (regret_max where with_regret_max). */
static void totals_json(struct json_object *o, const struct compare_result *r, bool with_regret_max)
{
    struct json_object *topk = json_object_new_array();
    json_object_object_add(o, "kl_ab_mean", golden_num(r->m.kld_mean));
    json_object_object_add(o, "kl_ab_p99", golden_num(r->m.kld_p99));
    json_object_object_add(o, "kl_ab_max", golden_num(r->m.kld_max));
    json_object_object_add(o, "kl_ba_mean", golden_num(r->kl_ba_mean));
    for (int k = 0; k < COMPARE_TOPK; k++)
        json_object_array_add(topk, golden_num(r->m.topk[k]));
    json_object_object_add(o, "topk_agreement", topk);
    json_object_object_add(o, "regret_mean", golden_num(r->m.regret_mean));
    if (with_regret_max)
        json_object_object_add(o, "regret_max", golden_num(r->m.regret_max));
    json_object_object_add(o, "max_abs", golden_num(r->m.max_abs));
    json_object_object_add(o, "nmse", golden_num(r->m.nmse));
    json_object_object_add(o, "cosine", golden_num(r->m.cosine));
}

struct json_object *compare_json(const char *a_path, const char *b_path, const struct compare_opts *o,
                                 const struct compare_result *r)
{
    struct json_object *j = json_object_new_object(), *opt = json_object_new_object(), *t = json_object_new_object();
    struct json_object *bins = json_object_new_array(), *layers = json_object_new_array(), *pos = json_object_new_array();
    json_object_object_add(j, "schema", json_object_new_string("gempack.compare/1"));
    json_object_object_add(j, "a", json_object_new_string(a_path));
    json_object_object_add(j, "b", json_object_new_string(b_path));
    json_object_object_add(j, "kl_direction", json_object_new_string("kl_ab = KL(A||B), A the reference"));
    json_object_object_add(opt, "keep_a", json_object_new_int64(o->keep_a));
    json_object_object_add(opt, "kv_bits_b", json_object_new_int(o->kv_b.bits));
    json_object_object_add(j, "options", opt);
    json_object_object_add(j, "prompts", json_object_new_int(r->n_prompts));
    json_object_object_add(t, "positions", json_object_new_int64(r->n_pos));
    totals_json(t, r, true);
    json_object_object_add(j, "totals", t);
    static const double lo[] = {0.0, 0.5, 0.9}, hi[] = {0.5, 0.9, 1.0};
    for (int k = 0; k < COMPARE_BINS; k++) {
        struct json_object *b = json_object_new_object();
        json_object_object_add(b, "p_top_from", json_object_new_double(lo[k]));
        json_object_object_add(b, "p_top_to", json_object_new_double(hi[k]));
        json_object_object_add(b, "positions", json_object_new_int64(r->bins[k].n));
        json_object_object_add(b, "kl_ab_mean", golden_num(r->bins[k].kl_ab));
        json_object_object_add(b, "kl_ba_mean", golden_num(r->bins[k].kl_ba));
        json_object_object_add(b, "top1", golden_num(r->bins[k].top1));
        json_object_object_add(b, "regret_mean", golden_num(r->bins[k].regret));
        json_object_object_add(b, "max_abs_mean", golden_num(r->bins[k].max_abs));
        json_object_object_add(b, "nmse_mean", golden_num(r->bins[k].nmse));
        json_object_object_add(b, "cosine_mean", golden_num(r->bins[k].cosine));
        json_object_array_add(bins, b);
    }
    json_object_object_add(j, "by_confidence", bins);
    for (int64_t i = 0; i < r->L; i++) {
        struct json_object *l = json_object_new_object();
        json_object_object_add(l, "layer", json_object_new_int64(i));
        json_object_object_add(l, "from_a", json_object_new_boolean(i < o->keep_a));
        json_object_object_add(l, "hidden", err_json(&r->layers[i].hidden));
        json_object_object_add(l, "attention", err_json(&r->layers[i].attn));
        json_object_object_add(l, "feed_forward", err_json(&r->layers[i].mlp));
        json_object_array_add(layers, l);
    }
    json_object_object_add(j, "layers", layers);
    json_object_object_add(j, "jump_layer", r->jump_layer >= 0 ? json_object_new_int64(r->jump_layer) : NULL);
    json_object_object_add(j, "jump_ratio", r->jump_layer >= 0 ? golden_num(r->jump_ratio) : NULL);
    for (int64_t i = 0; i < r->n_pos; i++) {
        const struct compare_pos *p = &r->pos[i];
        struct json_object *q = json_object_new_object();
        json_object_object_add(q, "prompt", json_object_new_int(p->prompt));
        json_object_object_add(q, "t", json_object_new_int64(p->t));
        json_object_object_add(q, "kl_ab", golden_num(p->kl_ab));
        json_object_object_add(q, "kl_ba", golden_num(p->kl_ba));
        json_object_object_add(q, "rank", json_object_new_int(p->rank));
        json_object_object_add(q, "regret", golden_num(p->regret));
        json_object_object_add(q, "max_abs", golden_num(p->max_abs));
        json_object_object_add(q, "nmse", golden_num(p->nmse));
        json_object_object_add(q, "cosine", golden_num(p->cosine));
        json_object_object_add(q, "p_top", golden_num(p->p_top));
        json_object_array_add(pos, q);
    }
    json_object_object_add(j, "positions", pos);
    bool pass;
    json_object_object_add(j, "verdict", golden_verdict(&r->m, &r->th, &pass));
    return j;
}

/* The card (schema gempack.quality/1): the totals on `prompts` (their SHA-256 as length-prefixed
 * little-endian ids) and each layer's hidden relative error. */
static struct json_object *card_json(const struct compare_result *r, const struct token_seqs *prompts)
{
    struct json_object *c = json_object_new_object(), *p = json_object_new_object(), *layers = json_object_new_array();
    struct sha256 h;
    uint8_t d[32];
    char hex[65];
    sha256_init(&h);
    for (int i = 0; i < prompts->n; i++) /* each prompt: its length, then its ids, little-endian */
        for (int64_t t = -1; t < prompts->len[i]; t++) {
            uint8_t b[8];
            if (t < 0)
                wr_u64le(b, (uint64_t)prompts->len[i]);
            else
                wr_u32le(b, (uint32_t)prompts->seq[i][t]);
            sha256_update(&h, b, t < 0 ? 8 : 4);
        }
    sha256_final(&h, d);
    for (int i = 0; i < 32; i++)
        snprintf(hex + 2 * i, 3, "%02x", d[i]);
    json_object_object_add(c, "schema", json_object_new_string("gempack.quality/1"));
    json_object_object_add(c, "gempack_version", json_object_new_string(GEMPACK_VERSION));
    json_object_object_add(p, "count", json_object_new_int(prompts->n));
    json_object_object_add(p, "positions", json_object_new_int64(r->n_pos));
    json_object_object_add(p, "sha256", json_object_new_string(hex));
    json_object_object_add(c, "prompts", p);
    json_object_object_add(c, "kl_direction", json_object_new_string("kl_ab = KL(source||output)"));
    totals_json(c, r, false);
    for (int64_t i = 0; i < r->L; i++)
        json_object_array_add(layers, golden_num(r->layers[i].hidden.rel));
    json_object_object_add(c, "layer_hidden_relative_error", layers);
    json_object_object_add(c, "jump_layer", r->jump_layer >= 0 ? json_object_new_int64(r->jump_layer) : NULL);
    return c;
}

/* The card's "sample": eval of the output against src on the first
 * CARD_WINDOWS windows of CARD_CTX tokens of the built-in sample (text
 * sha256, windows, PPL ratio, KLD mean and p99, top-1), or {"skipped": why}
 * (no tokenizer, a text too short): never a failure of the conversion. */
#define CARD_CTX 128
#define CARD_WINDOWS 8
static struct json_object *card_sample(const char *src, const char *out, int threads, struct progress progress)
{
    struct eval_opts eo = {.ctx = CARD_CTX, .chunks = CARD_WINDOWS, .threads = threads, .th_kld_mean = -1,
                           .th_kld_p99 = -1, .th_kld_max = -1, .th_top1 = -1, .th_ppl_ratio = -1, .progress = progress};
    struct eval_result r;
    struct err e = {0};
    struct json_object *j = json_object_new_object();
    if (eval_run(src, &out, 1, &eo, &r, &e) != ERR_OK) {
        json_object_object_add(j, "skipped", json_object_new_string(e.msg));
    } else {
        const struct eval_stats *s = &r.c[0].all;
        json_object_object_add(j, "text_sha256", json_object_new_string(r.text_sha256));
        json_object_object_add(j, "ctx", json_object_new_int64(r.ctx));
        json_object_object_add(j, "windows", json_object_new_int64(r.windows));
        json_object_object_add(j, "positions", json_object_new_int64(r.positions));
        json_object_object_add(j, "ppl_ratio", golden_num(s->ppl_ratio));
        json_object_object_add(j, "kld_mean", golden_num(s->kld_mean));
        json_object_object_add(j, "kld_p99", golden_num(s->kld_p99));
        json_object_object_add(j, "top1", golden_num(s->topk[0]));
    }
    eval_free(&r);
    return j;
}

int card_make(const char *src, const struct convert_opts *o, const struct convert_report *cr,
              const struct token_seqs *prompts, const char *report, struct progress progress, struct card *c,
              struct err *e)
{
    memset(c, 0, sizeof *c);
    struct token_seqs p = {0};
    int64_t T;
    int32_t *fx = fixture_prompt(&cr->cfg, 0, &T);
    int rc = fx ? tokens_push(&p, fx, T, e) : err_set(e, ERR_NOMEM, "out of memory");
    for (int i = 0; rc == ERR_OK && i < prompts->n; i++)
        rc = tokens_push(&p, prompts->seq[i], prompts->len[i], e);
    free(fx);
    struct compare_opts cmp = {.threads = o->threads, .th = {-1, -1, -1, -1, -1, -1}, .progress = progress};
    if (rc == ERR_OK)
        rc = compare_models(src, o->out, &p, &cmp, &c->r, e);
    if (rc == ERR_OK && report)
        rc = report_write(report, "gempack convert --eval", src, o->out, &c->r, &cr->plan, e);
    if (rc == ERR_OK)
        c->json = card_json(&c->r, &p);
    tokens_free(&p);
    if (rc == ERR_OK) /* the built-in sample, a few windows: the output's PPL and KLD on text */
        json_object_object_add(c->json, "sample", card_sample(src, o->out, o->threads, progress));
    if (rc != ERR_OK || !o->format_mlx)
        return rc == ERR_OK ? pack_set_field(o->out, "quality", json_object_get(c->json), e) : rc;
    const char *text = json_object_to_json_string_ext(c->json, JSON_C_TO_STRING_PRETTY);
    c->path = fio_join(o->out, "gempack_quality.json");
    return c->path ? fio_write_file(c->path, text, strlen(text), e) : err_set(e, ERR_NOMEM, "out of memory");
}

void card_free(struct card *c)
{
    compare_free(&c->r);
    json_object_put(c->json);
    free(c->path);
    memset(c, 0, sizeof *c);
}
