/* eval.c - `gempack eval` (eval.h): the text in sections, tokenized once; the
 * windows through the reference and every candidate; the measures of each
 * scored position, kept as floats, then summed in total and per category. */
#include "golden/eval.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "core/fileio.h"
#include "core/npz.h"
#include "core/jsonx.h"
#include "core/sha256.h"
#include "core/text.h"
#include "gp_config.h"
#include "golden/golden.h"
#include "ingest/text.h"
#include "kernels/kernels.h"
#include "model/layout.h"
#include "runner/forward.h"
#include "runner/model.h"

/* ---- marked text ---- */

static bool name_ok(const char *s, size_t n)
{
    if (n < 1 || n > EVAL_NAME_MAX)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '_' || s[i] == '-'))
            return false;
    return true;
}

/* A marker line ("@@ category NAME", "@@ chat NAME"): 1 with *chat and the
 * name set; 0 for any other line; -1 for a marker prefix with a bad name. */
static int marker(const char *line, size_t n, bool *chat, const char **name, size_t *name_len)
{
    static const char cat[] = "@@ category ", cht[] = "@@ chat ";
    size_t p = n >= sizeof cat - 1 && !memcmp(line, cat, sizeof cat - 1)   ? sizeof cat - 1
               : n >= sizeof cht - 1 && !memcmp(line, cht, sizeof cht - 1) ? sizeof cht - 1
                                                                           : 0;
    if (!p)
        return 0;
    *chat = p == sizeof cht - 1;
    *name = line + p;
    *name_len = n - p;
    return name_ok(*name, *name_len) ? 1 : -1;
}

int eval_text_parse(const char *text, size_t len, const char *what, struct eval_text *out, struct err *e)
{
    memset(out, 0, sizeof *out);
    if (len > EVAL_MAX_TEXT)
        return err_set(e, ERR_RANGE, "%s: %zu bytes: at most %u", what, len, EVAL_MAX_TEXT);
    if (!(out->buf = malloc(len + 1)) || !(out->s = calloc(EVAL_MAX_SECTIONS, sizeof *out->s))) {
        eval_text_free(out);
        return err_set(e, ERR_NOMEM, "%s: out of memory", what);
    }
    memcpy(out->buf, text, len);
    out->buf[len] = '\0';
    struct eval_section cur = {.name = "text", .text = out->buf};
    size_t line_no = 1;
    for (size_t at = 0; at < len; line_no++) {
        const char *line = out->buf + at, *nl = memchr(line, '\n', len - at);
        size_t n = nl ? (size_t)(nl - line) : len - at, next = at + n + (nl != NULL);
        bool chat;
        const char *name;
        size_t name_len;
        int m = marker(line, n, &chat, &name, &name_len);
        if (m < 0) { /* the message quotes the buffer: made before it is freed */
            const int shown = name_len < 40 ? (int)name_len : 40;
            int rc = err_set(e, ERR_FORMAT, "%s: line %zu: section name '%.*s': expected 1 to %d of a-z, 0-9, _ and -",
                             what, line_no, shown, name, EVAL_NAME_MAX);
            eval_text_free(out);
            return rc;
        }
        if (m > 0) {
            cur.len = (size_t)(line - cur.text);
            if (cur.len && out->n == EVAL_MAX_SECTIONS) {
                eval_text_free(out);
                return err_set(e, ERR_RANGE, "%s: line %zu: more than %d sections", what, line_no, EVAL_MAX_SECTIONS);
            }
            if (cur.len)
                out->s[out->n++] = cur;
            cur = (struct eval_section){.chat = chat, .text = out->buf + next};
            memcpy(cur.name, name, name_len);
        }
        at = next;
    }
    cur.len = (size_t)(out->buf + len - cur.text);
    if (cur.len && out->n == EVAL_MAX_SECTIONS) {
        eval_text_free(out);
        return err_set(e, ERR_RANGE, "%s: more than %d sections", what, EVAL_MAX_SECTIONS);
    }
    if (cur.len)
        out->s[out->n++] = cur;
    if (!out->n) {
        eval_text_free(out);
        return err_set(e, ERR_FORMAT, "%s: no text", what);
    }
    return ERR_OK;
}

void eval_text_free(struct eval_text *t)
{
    free(t->s);
    free(t->buf);
    memset(t, 0, sizeof *t);
}

/* ---- the token stream ---- */

/* What each section gives the tokenizers: its text, or a conversation as
 * the reference's template renders it (NULL: skipped, no template). */
struct piece {
    const char *text;
    size_t len;
    char *rendered;
    bool chat;
    uint16_t cat;
};

struct stream {
    int32_t *ids;
    int64_t n;
    uint16_t *cat;             /* [n] each token's category */
};

/* Appends a note to r (false: out of memory). */
__attribute__((format(printf, 2, 3))) static bool note(struct eval_result *r, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    bool ok = text_list_vadd(&r->notes, &r->n_notes, fmt, ap);
    va_end(ap);
    return ok;
}

/* The pieces of tx (categories named in r in the order they come); chat
 * sections rendered by t's template, or skipped with a note without one. */
static int pieces_of(const struct model_text *t, const struct eval_text *tx, struct eval_result *r, struct piece *p,
                     struct err *e)
{
    bool skipped = false;
    for (int i = 0; i < tx->n; i++) {
        const struct eval_section *s = &tx->s[i];
        p[i] = (struct piece){.text = s->text, .len = s->len, .chat = s->chat};
        if (s->chat && !t->tmpl) {
            p[i].text = NULL, skipped = true;
            continue;
        }
        if (s->chat) {
            struct text_prompt tp = {.what = s->name, .text = s->text, .len = s->len, .chat = true, .conversation = true};
            int32_t *ids;
            int64_t n;
            int rc = text_encode(t, &tp, &ids, &n, &p[i].rendered, e);
            if (rc != ERR_OK)
                return err_prefix(e, "section %d (%s)", i + 1, s->name);
            free(ids);
            p[i].text = p[i].rendered, p[i].len = strlen(p[i].rendered);
        }
        int c = 0;
        while (c < r->n_cat && strcmp(r->cat_names[c], s->name))
            c++;
        if (c == r->n_cat) {
            void *names = realloc(r->cat_names, (size_t)(r->n_cat + 1) * sizeof *r->cat_names);
            if (!names)
                return err_set(e, ERR_NOMEM, "out of memory");
            r->cat_names = names;
            snprintf(r->cat_names[r->n_cat++], sizeof r->cat_names[0], "%s", s->name);
        }
        p[i].cat = (uint16_t)c;
    }
    if (skipped && !note(r, "chat sections skipped: the reference has no known chat template"))
        return err_set(e, ERR_NOMEM, "out of memory");
    return ERR_OK;
}

/* The stream of the pieces by tokenizer tok, every id within vocab: the
 * tokenizer's BOS rule once at its start (as llama.cpp's perplexity
 * tokenizes its whole text), a rendered chat's own leading BOS (the
 * template's) dropped. */
static int tokenize(const struct tokenizer *tok, int64_t vocab, const struct piece *p, int n, struct stream *s,
                    struct err *e)
{
    memset(s, 0, sizeof *s);
    int rc = ERR_OK;
    size_t cap = 0, nb;
    const uint32_t *bos = tok_bos_rule(tok, &nb);
    bool first = true;
    for (int i = 0; rc == ERR_OK && i < n; i++) {
        uint32_t *ids;
        size_t m;
        if (!p[i].text)
            continue;
        const bool lead = first; /* this piece's ids begin with the BOS rule */
        if ((rc = tok_encode(tok, p[i].text, p[i].len, lead, &ids, &m, e)) != ERR_OK)
            break;
        first = false;
        const size_t at = lead ? nb : 0; /* where the template's BOS would be */
        size_t skip = p[i].chat && nb && m >= at + nb && !memcmp(ids + at, bos, nb * sizeof *bos) ? nb : 0;
        if ((size_t)s->n + m > cap) {
            size_t nc = 2 * ((size_t)s->n + m) + 1024;
            int32_t *a = realloc(s->ids, nc * sizeof *a);
            if (a)
                s->ids = a;
            uint16_t *b = a ? realloc(s->cat, nc * sizeof *b) : NULL;
            if (b)
                s->cat = b;
            cap = b ? nc : cap;
            if (!b)
                rc = err_set(e, ERR_NOMEM, "out of memory");
        }
        for (size_t k = skip; rc == ERR_OK && k < m; k++) {
            if ((int64_t)ids[k] >= vocab)
                rc = err_set(e, ERR_RANGE, "section %d: id %u past the model's vocabulary (%lld)", i + 1, ids[k],
                             (long long)vocab);
            s->ids[s->n] = (int32_t)ids[k];
            s->cat[s->n++] = p[i].cat;
        }
        free(ids);
    }
    if (rc != ERR_OK) {
        free(s->ids);
        free(s->cat);
        memset(s, 0, sizeof *s);
    }
    return rc;
}

/* ---- one model on the windows ---- */

struct evmodel {
    struct model m;
    struct runner r;
    bool open, ready;
    float *logits;             /* [ctx, V] the window's */
};

static void evmodel_close(struct evmodel *x)
{
    if (x->ready)
        runner_free(&x->r);
    if (x->open)
        model_close(&x->m);
    free(x->logits);
    memset(x, 0, sizeof *x);
}

static int evmodel_open(struct evmodel *x, const char *path, int64_t ctx, int threads, struct err *e)
{
    memset(x, 0, sizeof *x);
    int rc = model_open(&x->m, path, e);
    x->open = rc == ERR_OK;
    if (rc == ERR_OK)
        rc = model_load_weights(&x->m, threads, e);
    if (rc == ERR_OK)
        rc = runner_init(&x->r, &x->m,
                         &(struct runner_opts){.threads = threads, .kernels = KERN_BEST, .n_seq = 1, .max_step = ctx,
                                               .max_context = ctx},
                         e);
    x->ready = rc == ERR_OK;
    if (rc == ERR_OK && !(x->logits = malloc((size_t)ctx * (size_t)x->m.cfg.vocab_size * sizeof *x->logits)))
        rc = err_set(e, ERR_NOMEM, "%s: cannot hold a window's logits", path);
    return rc;
}

static int evmodel_window(struct evmodel *x, const int32_t *tokens, int64_t ctx, struct err *e)
{
    runner_reset(&x->r, 0);
    return runner_prompt(&x->r, tokens, ctx, 0, x->logits, NULL, e);
}

/* Stored bytes of every tensor the model binds, and its parameters (the
 * logical sizes of its config's tensors). */
static int model_size(const struct model *m, uint64_t *bytes, uint64_t *params, struct err *e)
{
    *bytes = *params = 0;
    for (size_t i = 0; i < m->src.n_parts; i++) {
        const struct ingest_part *p = &m->src.parts[i];
        uint64_t n = 1;
        for (int k = 0; k < p->rank; k++)
            n *= p->shape[k];
        if (m->used[i])
            *bytes += n * dtype_table[p->dtype].bits / 8;
    }
    struct layout_entry *le;
    size_t nl;
    int rc = layout_build(&m->cfg, EXPERTS_FUSED, &le, &nl, e);
    for (size_t i = 0; rc == ERR_OK && i < nl; i++) {
        uint64_t n = 1;
        for (int k = 0; k < le[i].rank; k++)
            n *= le[i].shape[k];
        *params += le[i].redundant ? 0 : n;
    }
    if (rc == ERR_OK)
        free(le);
    return rc;
}

/* ---- the reference's distributions at the scored positions ---- */

/* What is kept of the reference at one position: its whole log-softmax
 * (run), or its EVAL_REF_TOPK largest with the rest's log-mass (a file). */
struct refpos {
    const double *lp, *p;      /* [V] the log-probabilities and their exp, or NULL */
    const int32_t *top;        /* [K] ids, largest first (file) */
    const double *top_lp;      /* [K] */
    double tail_lp;            /* log Σ p over the ids not in top */
    double nll;
    int64_t argmax;
};

/* The K largest of lp (ties: lower id first), largest first. */
static void top_k(const double *lp, int64_t V, int K, int32_t *ids)
{
    int n = 0;
    for (int64_t k = 0; k < V; k++) {
        if (n == K && !(lp[k] > lp[ids[K - 1]]))
            continue;
        int at = n < K ? n++ : K - 1;
        while (at > 0 && lp[k] > lp[ids[at - 1]]) {
            ids[at] = ids[at - 1];
            at--;
        }
        ids[at] = (int32_t)k;
    }
}

static bool in_top(const int32_t *ids, int K, int64_t k)
{
    for (int i = 0; i < K; i++)
        if (ids[i] == k)
            return true;
    return false;
}

/* log Σ exp(lp[k]) over the ids not in top, in id order. */
static double tail_logmass(const double *lp, int64_t V, const int32_t *top, int K)
{
    double s = 0.0;
    for (int64_t k = 0; k < V; k++)
        if (!in_top(top, K, k))
            s += exp(lp[k]);
    return log(s);
}

/* The measures of one position: the candidate's row q (logits) against the
 * reference; next: the token that follows. */
struct posm {
    double kld, nll, regret;
    int rank;                  /* of the reference's top token among the candidate's (capped at EVAL_TOPK) */
};

static void measure(const struct refpos *p, const float *q, int64_t V, int64_t next, double *zq, double *lq,
                    struct posm *o)
{
    if (golden_row_broken(q, V)) { /* no distribution: the worst of everything, never agreement */
        *o = (struct posm){INFINITY, INFINITY, INFINITY, EVAL_TOPK};
        return;
    }
    for (int64_t k = 0; k < V; k++)
        zq[k] = (double)q[k];
    golden_log_softmax(zq, V, lq);
    double kld = 0.0;
    int64_t b = golden_argmax(zq, V);
    if (p->lp) {
        for (int64_t k = 0; k < V; k++)
            if (p->lp[k] > -HUGE_VAL) /* p = 0 terms are 0 */
                kld += p->p[k] * (p->lp[k] - lq[k]);
        o->regret = p->lp[p->argmax] - p->lp[b];
    } else {
        for (int i = 0; i < EVAL_REF_TOPK; i++)
            if (p->top_lp[i] > -HUGE_VAL)
                kld += exp(p->top_lp[i]) * (p->top_lp[i] - lq[p->top[i]]);
        if (p->tail_lp > -HUGE_VAL)
            kld += exp(p->tail_lp) * (p->tail_lp - tail_logmass(lq, V, p->top, EVAL_REF_TOPK));
        double lb = p->top_lp[EVAL_REF_TOPK - 1]; /* b outside the stored ids: at most the K-th's */
        for (int i = 0; i < EVAL_REF_TOPK; i++)
            if (p->top[i] == b)
                lb = p->top_lp[i];
        o->regret = p->top_lp[0] - lb;
    }
    o->kld = kld != kld ? (double)INFINITY : fmax(kld, 0.0);
    o->nll = -lq[next];
    o->rank = golden_rank(zq, V, p->argmax, EVAL_TOPK);
}

/* ---- statistics ---- */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The nearest-rank q-quantile of sorted v[0, n). */
static double quantile(const double *v, int64_t n, double q)
{
    int64_t i = (int64_t)ceil(q * (double)n) - 1;
    return v[i < 0 ? 0 : i >= n ? n - 1 : i];
}

/* The stats of the positions of category c (-1: all) of candidate x. */
static int stats(const struct eval_result *r, const struct eval_cand *x, const int *ranks, const double *regret, int c,
                 struct eval_stats *s, struct err *e)
{
    memset(s, 0, sizeof *s);
    double *k = malloc((size_t)(r->positions ? r->positions : 1) * sizeof *k);
    if (!k)
        return err_set(e, ERR_NOMEM, "out of memory");
    double sum = 0.0, sum2 = 0.0;
    int64_t within[EVAL_TOPK] = {0};
    for (int64_t i = 0; i < r->positions; i++) {
        if (c >= 0 && r->pos_cat[i] != c)
            continue;
        k[s->n++] = x->kld[i];
        sum += x->kld[i];
        sum2 += x->kld[i] * x->kld[i];
        s->nll_ref += r->nll_ref[i];
        s->nll += x->nll[i];
        for (int j = ranks[i]; j < EVAL_TOPK; j++)
            within[j]++;
        s->regret_mean += regret[i];
        s->regret_max = fmax(s->regret_max, regret[i]);
    }
    if (s->n) {
        const double n = (double)s->n;
        qsort(k, (size_t)s->n, sizeof *k, cmp_double);
        s->kld_mean = sum / n;
        s->kld_ci95 = s->n > 1 ? 1.96 * sqrt(fmax(sum2 - sum * sum / n, 0.0) / (n - 1.0) / n) : (double)INFINITY;
        s->kld_median = quantile(k, s->n, 0.5);
        s->kld_p90 = quantile(k, s->n, 0.9);
        s->kld_p99 = quantile(k, s->n, 0.99);
        s->kld_max = k[s->n - 1];
        s->ppl_ref = exp(s->nll_ref / n);
        s->ppl = exp(s->nll / n);
        s->ppl_ratio = s->ppl / s->ppl_ref;
        for (int j = 0; j < EVAL_TOPK; j++)
            s->topk[j] = (double)within[j] / n;
        s->regret_mean /= n;
    }
    free(k);
    return ERR_OK;
}

/* ---- the saved reference (npz: meta.json, tokens, the top ids and log-probabilities, the tail's log-mass, NLL) ---- */

struct refstore {
    int32_t *top;              /* [P, K] */
    double *top_lp;            /* [P, K] */
    double *tail_lp, *nll;     /* [P] */
};

static void refstore_free(struct refstore *s)
{
    free(s->top);
    free(s->top_lp);
    free(s->tail_lp);
    free(s->nll);
    memset(s, 0, sizeof *s);
}

static struct json_object *ref_meta(const struct eval_result *r)
{
    struct json_object *m = json_object_new_object();
    json_object_object_add(m, "schema", json_object_new_string("gempack.eval-ref/1"));
    json_object_object_add(m, "producer", json_object_new_string("gempack eval " GEMPACK_VERSION));
    json_object_object_add(m, "ref_fingerprint", json_object_new_string(r->ref_fingerprint));
    json_object_object_add(m, "tokenizer_sha256", json_object_new_string(r->tok_sha256));
    json_object_object_add(m, "text_sha256", json_object_new_string(r->text_sha256));
    json_object_object_add(m, "ctx", json_object_new_int64(r->ctx));
    json_object_object_add(m, "windows", json_object_new_int64(r->windows));
    json_object_object_add(m, "vocab", json_object_new_int64(r->vocab));
    json_object_object_add(m, "top_k", json_object_new_int(EVAL_REF_TOPK));
    json_object_object_add(m, "numerics", json_object_new_int(KERN_NUMERICS));
    return m;
}

static int save_ref(const char *path, const struct eval_result *r, const int32_t *tokens, const struct refstore *s,
                    struct err *e)
{
    const uint64_t P = (uint64_t)r->positions, K = EVAL_REF_TOPK, T = (uint64_t)(r->windows * r->ctx);
    const uint64_t pk[2] = {P, K};
    struct npz_member mem[6];
    uint8_t *buf[5] = {0};
    size_t len[5] = {0};
    struct json_object *meta = ref_meta(r);
    const char *mj = json_object_to_json_string_ext(meta, JSON_C_TO_STRING_PLAIN);
    int rc = npy_encode(DT_I32, &T, 1, tokens, &buf[0], &len[0], e);
    if (rc == ERR_OK)
        rc = npy_encode(DT_I32, pk, 2, s->top, &buf[1], &len[1], e);
    if (rc == ERR_OK)
        rc = npy_encode(DT_F64, pk, 2, s->top_lp, &buf[2], &len[2], e);
    if (rc == ERR_OK)
        rc = npy_encode(DT_F64, &P, 1, s->tail_lp, &buf[3], &len[3], e);
    if (rc == ERR_OK)
        rc = npy_encode(DT_F64, &P, 1, s->nll, &buf[4], &len[4], e);
    static const char *names[5] = {"tokens.npy", "top_ids.npy", "top_logp.npy", "tail_logp.npy", "nll.npy"};
    for (int i = 0; i < 5; i++)
        mem[i] = (struct npz_member){names[i], buf[i], len[i]};
    mem[5] = (struct npz_member){"meta.json", mj, strlen(mj)};
    if (rc == ERR_OK)
        rc = npz_write(path, mem, 6, e);
    for (int i = 0; i < 5; i++)
        free(buf[i]);
    json_object_put(meta);
    return rc;
}

/* Member `name` of the reference file: dtype and count as expected. */
static int ref_array(const struct npz *z, const char *path, const char *name, enum dtype dt, uint64_t count,
                     void **out, struct err *e)
{
    struct npy a;
    int rc = npz_get_array(z, name, count, &a, e);
    if (rc == ERR_OK && (a.dtype != dt || a.count != count)) {
        npy_free(&a);
        return err_set(e, ERR_FORMAT, "%s: %s: %llu values of %s, expected %llu of %s", path, name,
                       (unsigned long long)a.count, dtype_table[a.dtype].name, (unsigned long long)count,
                       dtype_table[dt].name);
    }
    if (rc == ERR_OK)
        *out = a.data; /* the npy's own allocation */
    return rc;
}

/* Reads the reference saved at path; every recorded setting must be this
 * run's (named when not), and its tokens the stream's. */
static int load_ref(const char *path, const struct eval_result *r, const int32_t *tokens, struct refstore *s,
                    struct err *e)
{
    memset(s, 0, sizeof *s);
    struct npz z;
    int rc = npz_open(&z, path, e);
    if (rc != ERR_OK)
        return rc;
    uint8_t *mj = NULL;
    size_t ml;
    struct json_object *meta = NULL, *want = ref_meta(r);
    if ((rc = npz_get(&z, "meta.json", 1u << 20, &mj, &ml, e)) == ERR_OK &&
        (rc = jsonx_parse((const char *)mj, ml, &meta, e)) != ERR_OK)
        err_prefix(e, "%s: meta.json", path);
    static const char *keys[] = {"schema", "tokenizer_sha256", "text_sha256", "ctx", "windows", "vocab", "top_k",
                                 "numerics"};
    for (size_t i = 0; rc == ERR_OK && i < sizeof keys / sizeof keys[0]; i++) {
        struct json_object *a = json_object_object_get(meta, keys[i]), *b = json_object_object_get(want, keys[i]);
        if (!a || strcmp(json_object_to_json_string(a), json_object_to_json_string(b)))
            rc = err_set(e, ERR_FORMAT, "%s: meta.json %s is %s; this run's is %s", path, keys[i],
                         a ? json_object_to_json_string(a) : "absent", json_object_to_json_string(b));
    }
    const uint64_t P = (uint64_t)r->positions, K = EVAL_REF_TOPK, T = (uint64_t)(r->windows * r->ctx);
    int32_t *tk = NULL;
    if (rc == ERR_OK && (rc = ref_array(&z, path, "tokens.npy", DT_I32, T, (void **)&tk, e)) == ERR_OK &&
        memcmp(tk, tokens, T * sizeof *tk))
        rc = err_set(e, ERR_FORMAT, "%s: its tokens are not this text's", path);
    if (rc == ERR_OK)
        rc = ref_array(&z, path, "top_ids.npy", DT_I32, P * K, (void **)&s->top, e);
    for (uint64_t i = 0; rc == ERR_OK && i < P * K; i++)
        if (s->top[i] < 0 || s->top[i] >= r->vocab)
            rc = err_set(e, ERR_FORMAT, "%s: top_ids.npy[%llu] = %d: not an id of the vocabulary (%lld)", path,
                         (unsigned long long)i, s->top[i], (long long)r->vocab);
    if (rc == ERR_OK)
        rc = ref_array(&z, path, "top_logp.npy", DT_F64, P * K, (void **)&s->top_lp, e);
    if (rc == ERR_OK)
        rc = ref_array(&z, path, "tail_logp.npy", DT_F64, P, (void **)&s->tail_lp, e);
    if (rc == ERR_OK)
        rc = ref_array(&z, path, "nll.npy", DT_F64, P, (void **)&s->nll, e);
    free(tk);
    free(mj);
    json_object_put(meta);
    json_object_put(want);
    npz_close(&z);
    if (rc != ERR_OK)
        refstore_free(s);
    return rc;
}

/* ---- the run ---- */

static void fail_if(struct eval_cand *c, const char *metric, double v, double limit, bool above)
{
    c->pass &= !golden_fail_if(c->failures, metric, v, limit, above);
}

/* Every candidate with a tokenizer gives the stream's ids (named at the first difference). */
static int same_ids(const char *path, const struct model_text *ref, const struct piece *p, int n,
                    const struct stream *s, char tok_sha[65], struct err *e)
{
    struct model_text t = {0};
    int rc = text_open(&t, path, e);
    snprintf(tok_sha, 65, "%s", t.tok_sha256);
    if (rc == ERR_OK && t.tok) {
        struct stream c;
        if ((rc = tokenize(t.tok, t.vocab, p, n, &c, e)) == ERR_OK) {
            char msg[600];
            if (text_first_diff(ref->tok, s->ids, s->n, c.ids, c.n, msg, sizeof msg) >= 0)
                rc = err_set(e, ERR_FORMAT, "%s: its tokenizer and the reference's give different ids at %s", path, msg);
            free(c.ids);
            free(c.cat);
        }
    }
    text_close(&t);
    return rc;
}

int eval_run(const char *ref, const char *const *cands, int n_cands, const struct eval_opts *o, struct eval_result *r,
             struct err *e)
{
    memset(r, 0, sizeof *r);
    r->ctx = o->ctx;
    r->pass = true;
    r->ref_from_file = o->ref_file != NULL;
    if (o->ctx < 4 || o->ctx > (1 << 20))
        return err_set(e, ERR_USAGE, "'ctx' %lld: expected 4..1048576", (long long)o->ctx);
    if (!(r->ref_path = strdup(ref)) || !(r->c = calloc((size_t)(n_cands ? n_cands : 1), sizeof *r->c)))
        return err_set(e, ERR_NOMEM, "out of memory");
    r->n = n_cands;
    /* the text */
    char *file = NULL;
    size_t flen = 0;
    const char *text = o->text_path ? NULL : eval_sample(&flen);
    int rc = o->text_path ? fio_read_file(o->text_path, 0, EVAL_MAX_TEXT, &file, &flen, e) : ERR_OK;
    if (o->text_path)
        text = file;
    r->text_source = o->text_path ? o->text_path : "built-in sample";
    struct eval_text tx = {0};
    if (rc == ERR_OK) {
        sha256_hex(text, flen, r->text_sha256);
        rc = eval_text_parse(text, flen, r->text_source, &tx, e);
    }
    free(file);
    /* the stream, by the reference's tokenizer; the candidates' must agree */
    struct model_text mt = {0};
    struct stream s = {0};
    struct piece *pc = rc == ERR_OK ? calloc((size_t)tx.n, sizeof *pc) : NULL;
    if (rc == ERR_OK && !pc)
        rc = err_set(e, ERR_NOMEM, "out of memory");
    if (rc == ERR_OK && (rc = text_open(&mt, ref, e)) == ERR_OK && !mt.tok)
        rc = err_set(e, ERR_USAGE, "%s has no tokenizer (%s): eval needs one to read text", ref, mt.tok_why);
    if (rc == ERR_OK) {
        snprintf(r->tok_sha256, sizeof r->tok_sha256, "%s", mt.tok_sha256);
        snprintf(r->tmpl_sha256, sizeof r->tmpl_sha256, "%s", mt.tmpl_sha256);
        if ((rc = pieces_of(&mt, &tx, r, pc, e)) == ERR_OK)
            rc = tokenize(mt.tok, mt.vocab, pc, tx.n, &s, e);
    }
    for (int i = 0; i < n_cands; i++) {
        r->c[i].path = strdup(cands[i]);
        r->c[i].failures = json_object_new_array();
        r->c[i].pass = true;
        if (rc == ERR_OK)
            rc = r->c[i].path ? same_ids(cands[i], &mt, pc, tx.n, &s, r->c[i].tok_sha256, e)
                              : err_set(e, ERR_NOMEM, "out of memory");
    }
    for (int i = 0; pc && i < tx.n; i++)
        free(pc[i].rendered);
    free(pc);
    r->tokens = s.n;
    r->windows = o->ctx ? s.n / o->ctx : 0;
    if (o->chunks > 0 && r->windows > o->chunks)
        r->windows = o->chunks;
    const int64_t first = o->ctx / 2, per = o->ctx - 1 - first; /* scored: first .. ctx − 2 */
    r->positions = r->windows * per;
    if (rc == ERR_OK && r->windows < 1)
        rc = err_set(e, ERR_USAGE, "the text is %lld tokens: less than one window of %lld ('ctx')", (long long)s.n,
                     (long long)o->ctx);
    /* the models */
    struct evmodel *mods = calloc((size_t)n_cands + 1, sizeof *mods);
    struct evmodel *R = mods, *C = mods ? mods + 1 : NULL;
    if (rc == ERR_OK && !mods)
        rc = err_set(e, ERR_NOMEM, "out of memory");
    struct model ref_only = {0};
    bool ref_only_open = false;
    if (rc == ERR_OK && !o->ref_file)
        rc = evmodel_open(R, ref, o->ctx, o->threads, e);
    else if (rc == ERR_OK && (rc = model_open(&ref_only, ref, e)) == ERR_OK)
        ref_only_open = true;
    const struct model *rm = o->ref_file ? &ref_only : &R->m;
    if (rc == ERR_OK) {
        r->vocab = rm->cfg.vocab_size;
        snprintf(r->ref_fingerprint, sizeof r->ref_fingerprint, "%s", rm->fingerprint);
    }
    for (int i = 0; rc == ERR_OK && i < n_cands; i++) {
        struct eval_cand *x = &r->c[i];
        if ((rc = evmodel_open(&C[i], cands[i], o->ctx, o->threads, e)) == ERR_OK &&
            C[i].m.cfg.vocab_size != r->vocab)
            rc = err_set(e, ERR_FORMAT, "%s: vocabulary %lld, the reference's %lld", cands[i],
                         (long long)C[i].m.cfg.vocab_size, (long long)r->vocab);
        if (rc == ERR_OK && (rc = model_size(&C[i].m, &x->bytes, &x->params, e)) == ERR_OK) {
            x->bpw = x->params ? 8.0 * (double)x->bytes / (double)x->params : 0.0;
            snprintf(x->fingerprint, sizeof x->fingerprint, "%s", C[i].m.fingerprint);
            x->kld = malloc((size_t)(r->positions + 1) * sizeof *x->kld);
            x->nll = malloc((size_t)(r->positions + 1) * sizeof *x->nll);
            if (!x->kld || !x->nll)
                rc = err_set(e, ERR_NOMEM, "out of memory");
        }
    }
    /* the reference's distributions: from the file, or kept for saving */
    struct refstore st = {0};
    const int64_t V = r->vocab;
    int32_t *wt = rc == ERR_OK ? malloc((size_t)(r->windows * o->ctx) * sizeof *wt) : NULL; /* the windows' tokens */
    if (rc == ERR_OK && !wt)
        rc = err_set(e, ERR_NOMEM, "out of memory");
    size_t nb = 0;
    const uint32_t *bos = rc == ERR_OK ? tok_bos_rule(mt.tok, &nb) : NULL;
    for (int64_t w = 0; rc == ERR_OK && w < r->windows; w++) {
        memcpy(wt + w * o->ctx, s.ids + w * o->ctx, (size_t)o->ctx * sizeof *wt);
        if (nb)
            wt[w * o->ctx] = (int32_t)bos[0]; /* llama.cpp: the window's first token becomes BOS */
    }
    if (rc == ERR_OK && o->ref_file)
        rc = load_ref(o->ref_file, r, wt, &st, e);
    else if (rc == ERR_OK && o->save_ref) {
        st.top = malloc((size_t)(r->positions * EVAL_REF_TOPK) * sizeof *st.top);
        st.top_lp = malloc((size_t)(r->positions * EVAL_REF_TOPK) * sizeof *st.top_lp);
        st.tail_lp = malloc((size_t)r->positions * sizeof *st.tail_lp);
        st.nll = malloc((size_t)r->positions * sizeof *st.nll);
        if (!st.top || !st.top_lp || !st.tail_lp || !st.nll)
            rc = err_set(e, ERR_NOMEM, "out of memory");
    }
    if (rc == ERR_OK && o->save_ref)
        rc = fio_check_output(o->save_ref, e);
    r->nll_ref = rc == ERR_OK ? malloc((size_t)(r->positions + 1) * sizeof *r->nll_ref) : NULL;
    r->pos_cat = rc == ERR_OK ? malloc((size_t)(r->positions + 1) * sizeof *r->pos_cat) : NULL;
    int *ranks = rc == ERR_OK ? malloc((size_t)(n_cands * r->positions + 1) * sizeof *ranks) : NULL;
    double *regret = rc == ERR_OK ? malloc((size_t)(n_cands * r->positions + 1) * sizeof *regret) : NULL;
    double *zr = rc == ERR_OK ? malloc((size_t)V * sizeof *zr) : NULL, *lp = zr ? malloc((size_t)V * sizeof *lp) : NULL;
    double *zq = lp ? malloc((size_t)V * sizeof *zq) : NULL, *lq = zq ? malloc((size_t)V * sizeof *lq) : NULL;
    double *pr = lq ? malloc((size_t)V * sizeof *pr) : NULL;
    if (rc == ERR_OK && (!r->nll_ref || !r->pos_cat || !ranks || !regret || !pr))
        rc = err_set(e, ERR_NOMEM, "out of memory");
    /* the windows: every model's logits of one, then each scored position's measures, the reference's once */
    for (int64_t w = 0; rc == ERR_OK && w < r->windows; w++) {
        const int32_t *tok = wt + w * o->ctx;
        progress_report(&o->progress, "windows", (uint64_t)w, (uint64_t)r->windows, "windows");
        if (!o->ref_file)
            rc = evmodel_window(R, tok, o->ctx, e);
        for (int i = 0; rc == ERR_OK && i < n_cands; i++)
            rc = evmodel_window(&C[i], tok, o->ctx, e);
        for (int64_t j = first; rc == ERR_OK && j <= o->ctx - 2; j++) {
            const int64_t pos = w * per + (j - first), next = s.ids[w * o->ctx + j + 1];
            struct refpos rp;
            if (o->ref_file) {
                rp = (struct refpos){.top = st.top + pos * EVAL_REF_TOPK, .top_lp = st.top_lp + pos * EVAL_REF_TOPK,
                                     .tail_lp = st.tail_lp[pos], .nll = st.nll[pos], .argmax = st.top[pos * EVAL_REF_TOPK]};
            } else {
                const float *row = R->logits + j * V;
                if (golden_row_broken(row, V)) {
                    rc = err_set(e, ERR_RANGE, "%s: window %lld, position %lld: the reference's logits are no "
                                               "distribution (NaN or +inf)", ref, (long long)w, (long long)j);
                    break;
                }
                for (int64_t k = 0; k < V; k++)
                    zr[k] = (double)row[k];
                golden_log_softmax(zr, V, lp);
                for (int64_t k = 0; k < V; k++)
                    pr[k] = exp(lp[k]);
                rp = (struct refpos){.lp = lp, .p = pr, .nll = -lp[next], .argmax = golden_argmax(zr, V)};
                if (o->save_ref) {
                    top_k(lp, V, EVAL_REF_TOPK, st.top + pos * EVAL_REF_TOPK);
                    for (int k = 0; k < EVAL_REF_TOPK; k++)
                        st.top_lp[pos * EVAL_REF_TOPK + k] = lp[st.top[pos * EVAL_REF_TOPK + k]];
                    st.tail_lp[pos] = tail_logmass(lp, V, st.top + pos * EVAL_REF_TOPK, EVAL_REF_TOPK);
                    st.nll[pos] = rp.nll;
                }
            }
            r->nll_ref[pos] = rp.nll;
            r->pos_cat[pos] = s.cat[w * o->ctx + j + 1];
            for (int i = 0; i < n_cands; i++) {
                struct posm pm;
                measure(&rp, C[i].logits + j * V, V, next, zq, lq, &pm);
                r->c[i].kld[pos] = pm.kld;
                r->c[i].nll[pos] = pm.nll;
                ranks[i * r->positions + pos] = pm.rank;
                regret[i * r->positions + pos] = pm.regret;
            }
        }
    }
    progress_report(&o->progress, "windows", (uint64_t)r->windows, (uint64_t)r->windows, "windows");
    if (rc == ERR_OK && o->save_ref && !o->ref_file)
        rc = save_ref(o->save_ref, r, wt, &st, e);
    /* the statistics and the verdicts */
    if (rc == ERR_OK && n_cands)
        for (int i = 0; i < n_cands; i++)
            if (!(r->c[i].cat = calloc((size_t)r->n_cat + 1, sizeof *r->c[i].cat)))
                rc = err_set(e, ERR_NOMEM, "out of memory");
    for (int i = 0; rc == ERR_OK && i < n_cands; i++) {
        struct eval_cand *x = &r->c[i];
        rc = stats(r, x, ranks + i * r->positions, regret + i * r->positions, -1, &x->all, e);
        for (int c = 0; rc == ERR_OK && c < r->n_cat; c++)
            rc = stats(r, x, ranks + i * r->positions, regret + i * r->positions, c, &x->cat[c], e);
        fail_if(x, "kld_mean", x->all.kld_mean, o->th_kld_mean, true);
        fail_if(x, "kld_p99", x->all.kld_p99, o->th_kld_p99, true);
        fail_if(x, "kld_max", x->all.kld_max, o->th_kld_max, true);
        fail_if(x, "top1", x->all.topk[0], o->th_top1, false);
        fail_if(x, "ppl_ratio", x->all.ppl_ratio, o->th_ppl_ratio, true);
        if (!isfinite(x->all.kld_max)) { /* a position with no distribution fails whatever the thresholds */
            fail_if(x, "nonfinite", INFINITY, 0.0, true);
        }
        r->pass &= x->pass;
    }
    free(ranks);
    free(regret);
    free(zr);
    free(lp);
    free(zq);
    free(lq);
    free(pr);
    free(wt);
    refstore_free(&st);
    for (int i = 0; mods && i <= n_cands; i++)
        evmodel_close(&mods[i]);
    free(mods);
    if (ref_only_open)
        model_close(&ref_only);
    free(s.ids);
    free(s.cat);
    text_close(&mt);
    eval_text_free(&tx);
    return rc;
}

void eval_free(struct eval_result *r)
{
    for (int i = 0; r->c && i < r->n; i++) {
        free(r->c[i].path);
        free(r->c[i].kld);
        free(r->c[i].nll);
        free(r->c[i].cat);
        json_object_put(r->c[i].failures);
    }
    for (size_t i = 0; i < r->n_notes; i++)
        free(r->notes[i]);
    free(r->notes);
    free(r->c);
    free(r->ref_path);
    free(r->cat_names);
    free(r->pos_cat);
    free(r->nll_ref);
    memset(r, 0, sizeof *r);
}

/* ---- a baseline ---- */

/* P(X <= k) + P(X >= n − k) for X ~ Binomial(n, 1/2), k <= n/2: the sign
 * test's two-sided p-value, summed in log space (capped at 1). */
static double sign_test(int64_t k, int64_t n)
{
    if (n == 0)
        return 1.0;
    double sum = 0.0;
    for (int64_t i = 0; i <= k; i++)
        sum += exp(lgamma((double)n + 1) - lgamma((double)i + 1) - lgamma((double)(n - i) + 1) - (double)n * log(2.0));
    return fmin(1.0, 2.0 * sum);
}

int eval_baseline(struct eval_result *r, const char *path, struct err *e)
{
    char *buf;
    size_t len;
    struct json_object *j = NULL;
    int rc = fio_read_file(path, 0, 1u << 30, &buf, &len, e);
    if (rc != ERR_OK)
        return rc;
    if ((rc = jsonx_parse(buf, len, &j, e)) != ERR_OK)
        err_prefix(e, "%s", path);
    free(buf);
    struct json_object *v, *text = json_object_object_get(j, "text"), *ref = json_object_object_get(j, "reference");
    const char *want[][2] = {{"schema", "gempack.eval/1"}, {"text.sha256", r->text_sha256},
                             {"reference.tokenizer_sha256", r->tok_sha256}};
    struct json_object *got[] = {json_object_object_get(j, "schema"), json_object_object_get(text, "sha256"),
                                 json_object_object_get(ref, "tokenizer_sha256")};
    for (size_t i = 0; rc == ERR_OK && i < sizeof got / sizeof got[0]; i++)
        if (!json_object_is_type(got[i], json_type_string) || strcmp(json_object_get_string(got[i]), want[i][1]))
            rc = err_set(e, ERR_FORMAT, "%s: %s is %s; this run's is %s", path, want[i][0],
                         got[i] ? json_object_to_json_string(got[i]) : "absent", want[i][1]);
    if (rc == ERR_OK && (!json_object_object_get_ex(j, "positions", &v) || json_object_get_int64(v) != r->positions ||
                         !json_object_object_get_ex(j, "ctx", &v) || json_object_get_int64(v) != r->ctx))
        rc = err_set(e, ERR_FORMAT, "%s: other windows (ctx, positions) than this run's (%lld, %lld)", path,
                     (long long)r->ctx, (long long)r->positions);
    struct json_object *cs = json_object_object_get(j, "candidates");
    for (int i = 0; rc == ERR_OK && i < r->n; i++) {
        struct eval_cand *x = &r->c[i];
        struct json_object *old = NULL;
        for (int pass = 0; pass < 2 && !old; pass++) /* the same weights, else the same path */
            for (size_t k = 0; k < json_object_array_length(cs) && !old; k++) {
                struct json_object *c = json_object_array_get_idx(cs, k);
                const char *key = pass ? "path" : "fingerprint", *val = pass ? x->path : x->fingerprint;
                const char *s = json_object_get_string(json_object_object_get(c, key));
                if (s && !strcmp(s, val))
                    old = c;
            }
        if (!old)
            continue;
        struct json_object *pk = json_object_object_get(old, "kld_per_position");
        if (!json_object_is_type(pk, json_type_array) || (int64_t)json_object_array_length(pk) != r->positions) {
            rc = err_set(e, ERR_FORMAT, "%s: %s: kld_per_position is not %lld numbers", path, x->path,
                         (long long)r->positions);
            break;
        }
        struct eval_paired *b = &x->base;
        double sum = 0.0;
        for (int64_t p = 0; p < r->positions; p++) {
            struct json_object *o = json_object_array_get_idx(pk, (size_t)p);
            const double k = o ? json_object_get_double(o) : (double)INFINITY; /* null: infinite */
            sum += k;
            b->worse += x->kld[p] > k, b->better += x->kld[p] < k, b->ties += x->kld[p] == k;
        }
        b->has = true;
        b->kld_mean_old = sum / (double)r->positions;
        b->p_value = sign_test(b->worse < b->better ? b->worse : b->better, b->worse + b->better);
        if (b->p_value < 0.05 && b->worse > b->better) {
            fail_if(x, "baseline", b->p_value, 0.05, false);
            r->pass = false;
        }
    }
    json_object_put(j);
    return rc;
}

/* ---- reports ---- */

void eval_print(FILE *out, const struct eval_result *r)
{
    fprintf(out, "eval: reference %s%s\n", r->ref_path, r->ref_from_file ? " (its distributions from --ref)" : "");
    fprintf(out, "text: %s, %lld tokens; %lld windows of %lld, %lld positions scored; reference PPL %.4f\n",
            r->text_source, (long long)r->tokens, (long long)r->windows, (long long)r->ctx, (long long)r->positions,
            r->n ? r->c[0].all.ppl_ref : 0.0);
    for (size_t i = 0; i < r->n_notes; i++)
        fprintf(out, "note: %s\n", r->notes[i]);
    fprintf(out, "%-4s %7s %9s %10s %8s %21s %9s %9s %9s %7s %7s %8s  %s\n", "#", "bpw", "MB", "PPL", "ratio",
            "KLD mean (95 %)", "median", "p99", "max", "top-1", "top-5", "regret", "candidate");
    for (int i = 0; i < r->n; i++) {
        const struct eval_cand *x = &r->c[i];
        const struct eval_stats *s = &x->all;
        fprintf(out, "%-4d %7.3f %9.2f %10.4f %8.5f %10.3g ± %-8.2g %9.3g %9.3g %9.3g %7.4f %7.4f %8.3g  %s%s\n", i + 1,
                x->bpw, (double)x->bytes / 1e6, s->ppl, s->ppl_ratio, s->kld_mean, s->kld_ci95, s->kld_median,
                s->kld_p99, s->kld_max, s->topk[0], s->topk[EVAL_TOPK - 1], s->regret_mean, x->path,
                x->pass ? "" : "  FAIL");
    }
    for (int i = 0; i < r->n; i++) {
        const struct eval_paired *b = &r->c[i].base;
        if (b->has)
            fprintf(out, "#%d against the baseline: KLD mean %.3g -> %.3g; %lld positions up, %lld down, %lld equal; "
                         "sign test p = %.3g%s\n", i + 1, b->kld_mean_old, r->c[i].all.kld_mean, (long long)b->worse,
                    (long long)b->better, (long long)b->ties, b->p_value,
                    b->p_value < 0.05 ? (b->worse > b->better ? " (worse)" : " (better)") : "");
    }
    if (r->n_cat > 1) {
        fprintf(out, "per category (KLD mean / PPL ratio / top-1 of each candidate):\n");
        for (int c = 0; c < r->n_cat; c++) {
            fprintf(out, "  %-16s %7lld positions", r->cat_names[c], (long long)(r->n ? r->c[0].cat[c].n : 0));
            for (int i = 0; i < r->n; i++) {
                const struct eval_stats *s = &r->c[i].cat[c];
                fprintf(out, "  #%d %.3g / %.5f / %.4f", i + 1, s->kld_mean, s->ppl_ratio, s->topk[0]);
            }
            fputc('\n', out);
        }
    }
    fprintf(out, "verdict: %s\n", r->pass ? "PASS" : "FAIL");
}

static struct json_object *stats_json(const struct eval_stats *s)
{
    struct json_object *j = json_object_new_object(), *k = json_object_new_object(), *t = json_object_new_array();
    json_object_object_add(j, "positions", json_object_new_int64(s->n));
    json_object_object_add(j, "ppl", golden_num(s->ppl));
    json_object_object_add(j, "ppl_ref", golden_num(s->ppl_ref));
    json_object_object_add(j, "ppl_ratio", golden_num(s->ppl_ratio));
    json_object_object_add(k, "mean", golden_num(s->kld_mean));
    json_object_object_add(k, "ci95", golden_num(s->kld_ci95));
    json_object_object_add(k, "median", golden_num(s->kld_median));
    json_object_object_add(k, "p90", golden_num(s->kld_p90));
    json_object_object_add(k, "p99", golden_num(s->kld_p99));
    json_object_object_add(k, "max", golden_num(s->kld_max));
    json_object_object_add(j, "kld", k);
    for (int i = 0; i < EVAL_TOPK; i++)
        json_object_array_add(t, golden_num(s->topk[i]));
    json_object_object_add(j, "topk_agreement", t);
    json_object_object_add(j, "regret_mean", golden_num(s->regret_mean));
    json_object_object_add(j, "regret_max", golden_num(s->regret_max));
    return j;
}

struct json_object *eval_json(const struct eval_result *r, const struct eval_opts *o)
{
    struct json_object *j = json_object_new_object(), *ref = json_object_new_object(), *tx = json_object_new_object();
    json_object_object_add(j, "schema", json_object_new_string("gempack.eval/1"));
    json_object_object_add(j, "gempack_version", json_object_new_string(GEMPACK_VERSION));
    json_object_object_add(j, "numerics", json_object_new_int(KERN_NUMERICS));
    json_object_object_add(ref, "path", json_object_new_string(r->ref_path));
    json_object_object_add(ref, "fingerprint", json_object_new_string(r->ref_fingerprint));
    json_object_object_add(ref, "tokenizer_sha256", json_object_new_string(r->tok_sha256));
    json_object_object_add(ref, "template_sha256", r->tmpl_sha256[0] ? json_object_new_string(r->tmpl_sha256) : NULL);
    json_object_object_add(ref, "from_file", o->ref_file ? json_object_new_string(o->ref_file) : NULL);
    json_object_object_add(j, "reference", ref);
    json_object_object_add(tx, "source", json_object_new_string(r->text_source));
    json_object_object_add(tx, "sha256", json_object_new_string(r->text_sha256));
    json_object_object_add(tx, "tokens", json_object_new_int64(r->tokens));
    struct json_object *cats = json_object_new_array(), *notes = json_object_new_array();
    for (int c = 0; c < r->n_cat; c++)
        json_object_array_add(cats, json_object_new_string(r->cat_names[c]));
    for (size_t i = 0; i < r->n_notes; i++)
        json_object_array_add(notes, json_object_new_string(r->notes[i]));
    json_object_object_add(tx, "categories", cats);
    json_object_object_add(j, "text", tx);
    json_object_object_add(j, "notes", notes);
    json_object_object_add(j, "ctx", json_object_new_int64(r->ctx));
    json_object_object_add(j, "windows", json_object_new_int64(r->windows));
    json_object_object_add(j, "positions", json_object_new_int64(r->positions));
    struct json_object *cs = json_object_new_array();
    for (int i = 0; i < r->n; i++) {
        const struct eval_cand *x = &r->c[i];
        struct json_object *c = json_object_new_object(), *bycat = json_object_new_object(), *pk = json_object_new_array();
        json_object_object_add(c, "path", json_object_new_string(x->path));
        json_object_object_add(c, "fingerprint", json_object_new_string(x->fingerprint));
        json_object_object_add(c, "tokenizer_sha256", x->tok_sha256[0] ? json_object_new_string(x->tok_sha256) : NULL);
        json_object_object_add(c, "bytes", json_object_new_int64((int64_t)x->bytes));
        json_object_object_add(c, "parameters", json_object_new_int64((int64_t)x->params));
        json_object_object_add(c, "bits_per_weight", golden_num(x->bpw));
        json_object_object_add(c, "all", stats_json(&x->all));
        for (int k = 0; k < r->n_cat; k++)
            json_object_object_add(bycat, r->cat_names[k], stats_json(&x->cat[k]));
        json_object_object_add(c, "categories", bycat);
        for (int64_t p = 0; p < r->positions; p++) /* per position, for a paired comparison with another run */
            json_object_array_add(pk, golden_num(x->kld[p]));
        json_object_object_add(c, "kld_per_position", pk);
        if (x->base.has) {
            struct json_object *b = json_object_new_object();
            json_object_object_add(b, "kld_mean_old", golden_num(x->base.kld_mean_old));
            json_object_object_add(b, "kld_mean", golden_num(x->all.kld_mean));
            json_object_object_add(b, "positions_worse", json_object_new_int64(x->base.worse));
            json_object_object_add(b, "positions_better", json_object_new_int64(x->base.better));
            json_object_object_add(b, "positions_equal", json_object_new_int64(x->base.ties));
            json_object_object_add(b, "sign_test_p", golden_num(x->base.p_value));
            json_object_object_add(c, "baseline", b);
        }
        json_object_object_add(c, "verdict", json_object_new_string(x->pass ? "pass" : "fail"));
        json_object_object_add(c, "failures", json_object_get(x->failures));
        json_object_array_add(cs, c);
    }
    json_object_object_add(j, "candidates", cs);
    json_object_object_add(j, "verdict", json_object_new_string(r->pass ? "pass" : "fail"));
    return j;
}
