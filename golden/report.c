#include "golden/report.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "converter/plan.h"
#include "core/fileio.h"
#include "gp_config.h"

/* A growing page. */
struct page {
    char *s;
    size_t len, cap;
    bool oom;
};

__attribute__((format(printf, 2, 3))) static void put(struct page *p, const char *fmt, ...)
{
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = p->oom ? 0 : vsnprintf(p->s ? p->s + p->len : NULL, p->s ? p->cap - p->len : 0, fmt, ap);
        va_end(ap);
        if (p->oom || n < 0)
            return;
        if (p->s && p->len + (size_t)n < p->cap) {
            p->len += (size_t)n;
            return;
        }
        size_t cap = 2 * (p->cap + (size_t)n) + 4096;
        char *s = realloc(p->s, cap);
        if (!s) {
            p->oom = true;
            return;
        }
        p->s = s;
        p->cap = cap;
    }
}

/* Text for HTML: &, <, > and quotes escaped. */
static void put_text(struct page *p, const char *t)
{
    for (; *t; t++) {
        switch (*t) {
        case '&': put(p, "&amp;"); break;
        case '<': put(p, "&lt;"); break;
        case '>': put(p, "&gt;"); break;
        case '"': put(p, "&quot;"); break;
        default: put(p, "%c", *t);
        }
    }
}

/* For qsort: ascending. */
static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

#define W 900.0  /* chart width, px */
#define LEFT 60.0

/* Per position: KL(A||B) bars (linear, the largest full height), then a
 * strip green where B's top token is A's, red where not. */
static void positions_svg(struct page *p, const struct compare_result *r)
{
    double top = 0.0;
    for (int64_t i = 0; i < r->n_pos; i++)
        top = fmax(top, r->pos[i].kl_ab);
    double bw = (W - LEFT) / (double)(r->n_pos ? r->n_pos : 1), h = 140.0;
    put(p, "<svg id=\"positions\" width=\"%.0f\" height=\"%.0f\" xmlns=\"http://www.w3.org/2000/svg\">\n", W, h + 60);
    put(p, "<text x=\"0\" y=\"14\" font-size=\"12\">KL(A||B)</text><text x=\"0\" y=\"30\" font-size=\"11\">max "
           "%.3g</text>\n",
        top);
    put(p, "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"#888\"/>\n", LEFT, h, W, h);
    for (int64_t i = 0; i < r->n_pos; i++) {
        double bh = top > 0 ? h * r->pos[i].kl_ab / top : 0.0;
        put(p, "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"" REPORT_KL "\"/>\n",
            LEFT + (double)i * bw, h - bh, bw * 0.9, bh);
        put(p, "<rect x=\"%.2f\" y=\"%.0f\" width=\"%.2f\" height=\"24\" fill=\"%s\"/>\n", LEFT + (double)i * bw,
            h + 10, bw * 0.9, r->pos[i].rank == 0 ? REPORT_TOP1_OK : REPORT_TOP1_MISS);
    }
    put(p, "<text x=\"0\" y=\"%.0f\" font-size=\"12\">top-1</text>\n", h + 27);
    put(p, "<text x=\"%.0f\" y=\"%.0f\" font-size=\"11\">position (all prompts in order)</text></svg>\n", LEFT,
        h + 52);
}

/* Per layer: relative error of the hidden state (solid) and of the
 * attention and feed-forward branches (dashed), log scale; the jump marked. */
static void layers_svg(struct page *p, const struct compare_result *r)
{
    double lo = (double)INFINITY, hi = 0.0, h = 220.0;
    for (int64_t i = 0; i < r->L; i++) {
        const struct compare_err *e3[3] = {&r->layers[i].hidden, &r->layers[i].attn, &r->layers[i].mlp};
        if (!isfinite(e3[0]->rel)) {
            put(p, "<p style=\"color:" REPORT_FAIL "\">B's hidden state is not finite from layer %lld on: a broken "
                   "model.</p>\n", (long long)i);
            return;
        }
        for (int k = 0; k < 3; k++)
            if (e3[k]->rel > 0 && isfinite(e3[k]->rel)) {
                lo = fmin(lo, e3[k]->rel);
                hi = fmax(hi, e3[k]->rel);
            }
    }
    if (!(hi > 0)) {
        put(p, "<p>Every layer of B equals A's.</p>\n");
        return;
    }
    double llo = floor(log10(lo)), lhi = ceil(log10(hi));
    if (lhi <= llo)
        lhi = llo + 1;
    double dx = (W - LEFT - 20) / (double)(r->L > 1 ? r->L - 1 : 1);
#define X(i) (LEFT + (double)(i)*dx)
#define Y(v) (10 + h * (lhi - log10(v)) / (lhi - llo))
    put(p, "<svg id=\"layers\" width=\"%.0f\" height=\"%.0f\" xmlns=\"http://www.w3.org/2000/svg\">\n", W, h + 50);
    for (double d = llo; d <= lhi; d += 1) {
        put(p, "<line x1=\"%.0f\" y1=\"%.2f\" x2=\"%.0f\" y2=\"%.2f\" stroke=\"#ddd\"/>", LEFT, Y(pow(10, d)), W,
            Y(pow(10, d)));
        put(p, "<text x=\"0\" y=\"%.2f\" font-size=\"11\">1e%.0f</text>\n", Y(pow(10, d)) + 4, d);
    }
    static const char *const colors[3] = {REPORT_HIDDEN, "#8e24aa", "#00897b"};
    for (int k = 0; k < 3; k++) {
        put(p, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"%s\"%s points=\"", colors[k], k ? "2" : "4",
            k ? " stroke-dasharray=\"6,4\"" : "");
        for (int64_t i = 0; i < r->L; i++) {
            const struct compare_err *x = k == 0 ? &r->layers[i].hidden : k == 1 ? &r->layers[i].attn
                                                                                    : &r->layers[i].mlp;
            if (x->rel > 0 && isfinite(x->rel))
                put(p, "%.2f,%.2f ", X(i), Y(x->rel));
        }
        put(p, "\"/>\n");
    }
    if (r->jump_layer >= 0)
        put(p, "<circle cx=\"%.2f\" cy=\"%.2f\" r=\"9\" fill=\"none\" stroke=\"" REPORT_FAIL "\" stroke-width=\"3\"/>\n",
            X(r->jump_layer), Y(r->layers[r->jump_layer].hidden.rel));
    for (int64_t i = 0; i < r->L; i++)
        put(p, "<text x=\"%.2f\" y=\"%.0f\" font-size=\"10\" text-anchor=\"middle\">%lld</text>", X(i), h + 28,
            (long long)i);
    put(p, "\n<text x=\"%.0f\" y=\"%.0f\" font-size=\"11\">layer: hidden state (solid), attention and feed-forward "
           "(dashed)</text></svg>\n",
        LEFT, h + 46);
#undef X
#undef Y
}

static void totals_table(struct page *p, const struct compare_result *r)
{
    const struct golden_metrics *m = &r->m;
    put(p, "<table><tr><th>KL(A||B) mean</th><th>p99</th><th>max</th><th>KL(B||A) mean</th><th>top-1..5</th>"
           "<th>regret mean / max</th><th>max |&Delta;logit|</th><th>NMSE</th><th>cosine</th></tr>\n");
    put(p, "<tr><td>%.4g</td><td>%.4g</td><td>%.4g</td><td>%.4g</td><td>", m->kld_mean, m->kld_p99, m->kld_max,
        r->kl_ba_mean);
    for (int k = 0; k < COMPARE_TOPK; k++)
        put(p, "%s%.1f%%", k ? " " : "", 100.0 * m->topk[k]);
    put(p, "</td><td>%.4g / %.4g</td><td>%.4g</td><td>%.4g</td><td>%.6f</td></tr></table>\n", m->regret_mean,
        m->regret_max, m->max_abs, m->nmse, m->cosine);
}

static void tensors_table(struct page *p, const struct plan *plan)
{
    put(p, "<h2>Quantization error per tensor</h2>\n<table><tr><th>tensor</th><th>action</th><th>mode</th>"
           "<th>bits</th><th>group</th><th>RMS error</th><th>max error</th></tr>\n");
    for (size_t i = 0; i < plan->n; i++) {
        const struct plan_item *it = &plan->items[i];
        uint64_t n;
        shape_numel(it->nt->shape, it->nt->rank, &n);
        put(p, "<tr><td>");
        put_text(p, it->nt->name);
        put(p, "</td><td>%s</td><td>%s</td>", plan_action_name(it->act),
            it->quantized_out ? qmode_name(it->mode) : dtype_name(it->dtype));
        if (it->quantized_out && it->bits)
            put(p, "<td>%d</td><td>%d</td>", it->bits, it->group_size);
        else
            put(p, "<td>-</td><td>-</td>");
        if (it->measured)
            put(p, "<td>%.4g</td><td>%.4g</td></tr>\n", sqrt(it->sq_err / (double)n), it->max_err);
        else
            put(p, "<td>-</td><td>-</td></tr>\n");
    }
    put(p, "</table>\n");
}

int report_write(const char *path, const char *title, const char *a, const char *b, const struct compare_result *r,
                 const struct plan *plan, struct err *e)
{
    struct page p = {0};
    put(&p, "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>");
    put_text(&p, title);
    put(&p, "</title>\n<style>body{font-family:sans-serif;margin:20px;width:%.0fpx}"
            "#verdict{color:#fff;font-size:28px;padding:18px;margin-bottom:12px}"
            "table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #ccc;padding:3px 8px;font-size:12px}"
            "</style></head><body>\n",
        W);
    put(&p, "<div id=\"verdict\" style=\"background:%s\">%s</div>\n", r->pass ? REPORT_PASS : REPORT_FAIL,
        r->pass ? "PASS" : "FAIL");
    put(&p, "<h1>");
    put_text(&p, title);
    put(&p, "</h1>\n<p>A (reference): ");
    put_text(&p, a);
    put(&p, "<br>B: ");
    put_text(&p, b);
    put(&p, "<br>%d prompt%s, %lld positions", r->n_prompts, r->n_prompts == 1 ? "" : "s", (long long)r->n_pos);
    put(&p, r->L ? ", %lld layers</p>\n" : "</p>\n", (long long)r->L);
    totals_table(&p, r);
    put(&p, "<h2>Per position</h2>\n");
    positions_svg(&p, r);
    if (r->L) {
        put(&p, "<h2>Per layer: relative error of B against A</h2>\n");
        layers_svg(&p, r);
    }
    if (r->jump_layer >= 0)
        put(&p, "<p>Jump: layer %lld, hidden error %.3gx the layer before.</p>\n", (long long)r->jump_layer,
            r->jump_ratio);
    if (plan && plan->n)
        tensors_table(&p, plan);
    put(&p, "<p style=\"color:#888;font-size:11px\">gempack compare; KL(A||B) with A the reference.</p>\n"
            "</body></html>\n");
    int rc = p.oom ? err_set(e, ERR_NOMEM, "%s: cannot hold the report", path) : fio_write_file(path, p.s, p.len, e);
    free(p.s);
    return rc;
}

/* ---- gempack eval ---- */

/* A candidate's color: eight distinct ones, then around again. */
static const char *cand_color(int i)
{
    static const char *const c[8] = {REPORT_CAND1, REPORT_CAND2, "#8e24aa", "#00897b", "#6d4c41", "#546e7a",
                                     "#d81b60", "#f9a825"}; /* none the verdict's green or red */
    return c[i % 8];
}

/* KLD drawn on a log axis from 1e-8 (0 and anything below at its bottom). */
#define KLD_FLOOR 1e-8

static void eval_table(struct page *p, const struct eval_result *r)
{
    put(p, "<table id=\"candidates\"><tr><th>#</th><th>candidate</th><th>bits per weight</th><th>MB</th><th>PPL</th>"
           "<th>PPL ratio</th><th>KLD mean (95 %%)</th><th>median</th><th>p90</th><th>p99</th><th>max</th><th>top-1</th>"
           "<th>top-5</th><th>regret</th><th>verdict</th></tr>\n");
    for (int i = 0; i < r->n; i++) {
        const struct eval_cand *x = &r->c[i];
        const struct eval_stats *s = &x->all;
        put(p, "<tr><td style=\"color:%s\">#%d</td><td>", cand_color(i), i + 1);
        put_text(p, x->path);
        put(p, "</td><td>%.3f</td><td>%.2f</td><td>%.4f</td><td>%.5f</td><td>%.3g ± %.2g</td><td>%.3g</td><td>%.3g</td>"
               "<td>%.3g</td><td>%.3g</td><td>%.4f</td><td>%.4f</td><td>%.3g</td><td style=\"color:%s\">%s</td></tr>\n",
            x->bpw, (double)x->bytes / 1e6, s->ppl, s->ppl_ratio, s->kld_mean, s->kld_ci95, s->kld_median, s->kld_p90,
            s->kld_p99, s->kld_max, s->topk[0], s->topk[EVAL_TOPK - 1], s->regret_mean,
            x->pass ? REPORT_PASS : REPORT_FAIL, x->pass ? "pass" : "FAIL");
    }
    put(p, "</table>\n");
}

/* Per candidate the share of positions whose KLD is at most x, x on a log axis. */
static void eval_cdf_svg(struct page *p, const struct eval_result *r)
{
    double hi = KLD_FLOOR * 10;
    for (int i = 0; i < r->n; i++)
        for (int64_t k = 0; k < r->positions; k++)
            if (isfinite(r->c[i].kld[k]))
                hi = fmax(hi, r->c[i].kld[k]);
    const double llo = log10(KLD_FLOOR), lhi = ceil(log10(hi)), h = 220.0;
    put(p, "<svg id=\"kld-cdf\" width=\"%.0f\" height=\"%.0f\" xmlns=\"http://www.w3.org/2000/svg\">\n", W, h + 50);
#define X(v) (LEFT + (W - LEFT - 20) * (log10(fmax(v, KLD_FLOOR)) - llo) / (lhi - llo))
#define Y(f) (10 + h * (1.0 - (f)))
    for (double d = llo; d <= lhi; d += 1)
        put(p, "<line x1=\"%.2f\" y1=\"10\" x2=\"%.2f\" y2=\"%.0f\" stroke=\"#ddd\"/><text x=\"%.2f\" y=\"%.0f\" "
               "font-size=\"10\" text-anchor=\"middle\">1e%.0f</text>\n",
            X(pow(10, d)), X(pow(10, d)), h + 10, X(pow(10, d)), h + 26, d);
    put(p, "<text x=\"0\" y=\"%.2f\" font-size=\"11\">100 %%</text><text x=\"0\" y=\"%.2f\" font-size=\"11\">0</text>\n",
        Y(1.0) + 4, Y(0.0));
    double *v = malloc((size_t)(r->positions ? r->positions : 1) * sizeof *v);
    for (int i = 0; v && i < r->n; i++) {
        memcpy(v, r->c[i].kld, (size_t)r->positions * sizeof *v);
        qsort(v, (size_t)r->positions, sizeof *v, cmp_double);
        put(p, "<polyline class=\"cdf\" fill=\"none\" stroke=\"%s\" stroke-width=\"2\" points=\"", cand_color(i));
        const int64_t step = r->positions > 400 ? r->positions / 400 : 1;
        for (int64_t k = 0; k < r->positions; k += step)
            if (isfinite(v[k]))
                put(p, "%.2f,%.2f ", X(v[k]), Y((double)(k + 1) / (double)r->positions));
        if (r->positions && isfinite(v[r->positions - 1]))
            put(p, "%.2f,%.2f", X(v[r->positions - 1]), Y(1.0));
        put(p, "\"/>\n");
    }
    free(v);
    put(p, "<text x=\"%.0f\" y=\"%.0f\" font-size=\"11\">KL(REF||CAND) per position (log scale; below 1e-8 at the "
           "left edge): share of positions at most that</text></svg>\n",
        LEFT, h + 44);
#undef X
#undef Y
}

/* Per category, each candidate's KLD mean as a bar (linear, the largest full width). */
static void eval_categories_svg(struct page *p, const struct eval_result *r)
{
    double top = 0.0;
    for (int c = 0; c < r->n_cat; c++)
        for (int i = 0; i < r->n; i++)
            if (isfinite(r->c[i].cat[c].kld_mean))
                top = fmax(top, r->c[i].cat[c].kld_mean);
    const double bh = 12.0, label = 140.0, group = bh * r->n + 10;
    put(p, "<svg id=\"categories\" width=\"%.0f\" height=\"%.0f\" xmlns=\"http://www.w3.org/2000/svg\">\n", W,
        group * r->n_cat + 20);
    for (int c = 0; c < r->n_cat; c++) {
        const double y0 = 10 + group * c;
        put(p, "<text x=\"0\" y=\"%.1f\" font-size=\"12\">", y0 + bh);
        put_text(p, r->cat_names[c]);
        put(p, " (%lld)</text>\n", (long long)(r->n ? r->c[0].cat[c].n : 0));
        for (int i = 0; i < r->n; i++) {
            const double k = r->c[i].cat[c].kld_mean, w = top > 0 && isfinite(k) ? (W - label - 80) * k / top : 0.0;
            put(p, "<rect class=\"catbar\" x=\"%.0f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" fill=\"%s\"/>"
                   "<text x=\"%.2f\" y=\"%.1f\" font-size=\"10\">%.3g</text>\n",
                label, y0 + bh * i, w, bh - 2, cand_color(i), label + w + 4, y0 + bh * (i + 1) - 3, k);
        }
    }
    put(p, "</svg>\n");
}

/* Bits per weight (x) against KLD mean (y, log scale): one labelled point per candidate. */
static void eval_frontier_svg(struct page *p, const struct eval_result *r)
{
    double xlo = (double)INFINITY, xhi = 0.0, khi = KLD_FLOOR * 10;
    for (int i = 0; i < r->n; i++) {
        xlo = fmin(xlo, r->c[i].bpw);
        xhi = fmax(xhi, r->c[i].bpw);
        if (isfinite(r->c[i].all.kld_mean))
            khi = fmax(khi, r->c[i].all.kld_mean);
    }
    xlo = floor(xlo - 0.5), xhi = ceil(xhi + 0.5);
    const double llo = log10(KLD_FLOOR), lhi = ceil(log10(khi)), h = 260.0;
#define X(b) (LEFT + (W - LEFT - 40) * ((b) - xlo) / (xhi - xlo))
#define Y(k) (10 + h * (lhi - log10(fmax(k, KLD_FLOOR))) / (lhi - llo))
    put(p, "<svg id=\"frontier\" width=\"%.0f\" height=\"%.0f\" xmlns=\"http://www.w3.org/2000/svg\">\n", W, h + 50);
    for (double d = llo; d <= lhi; d += 1)
        put(p, "<line x1=\"%.0f\" y1=\"%.2f\" x2=\"%.0f\" y2=\"%.2f\" stroke=\"#ddd\"/><text x=\"0\" y=\"%.2f\" "
               "font-size=\"10\">1e%.0f</text>\n",
            LEFT, Y(pow(10, d)), W - 20, Y(pow(10, d)), Y(pow(10, d)) + 4, d);
    for (double b = xlo; b <= xhi; b += 1)
        put(p, "<text x=\"%.2f\" y=\"%.0f\" font-size=\"10\" text-anchor=\"middle\">%.0f</text>", X(b), h + 26, b);
    for (int i = 0; i < r->n; i++) {
        const double k = isfinite(r->c[i].all.kld_mean) ? r->c[i].all.kld_mean : pow(10, lhi);
        put(p, "<circle class=\"point\" cx=\"%.2f\" cy=\"%.2f\" r=\"6\" fill=\"%s\"/><text x=\"%.2f\" y=\"%.2f\" "
               "font-size=\"11\">#%d</text>\n",
            X(r->c[i].bpw), Y(k), cand_color(i), X(r->c[i].bpw) + 8, Y(k) - 6, i + 1);
    }
    put(p, "\n<text x=\"%.0f\" y=\"%.0f\" font-size=\"11\">bits per weight (x) against KLD mean (y, log scale; 0 at "
           "the bottom)</text></svg>\n",
        LEFT, h + 44);
#undef X
#undef Y
}

int eval_report_write(const char *path, const struct eval_result *r, struct err *e)
{
    struct page p = {0};
    put(&p, "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>gempack eval</title>\n<style>"
            "body{font-family:sans-serif;margin:20px;width:%.0fpx}"
            "#verdict{color:#fff;font-size:28px;padding:18px;margin-bottom:12px}"
            "table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #ccc;padding:3px 8px;font-size:12px}"
            "</style></head><body>\n",
        W);
    put(&p, "<div id=\"verdict\" style=\"background:%s\">%s</div>\n<h1>gempack eval</h1>\n<p>reference: ",
        r->pass ? REPORT_PASS : REPORT_FAIL, r->pass ? "PASS" : "FAIL");
    put_text(&p, r->ref_path);
    put(&p, "%s<br>text: ", r->ref_from_file ? " (distributions from a saved reference)" : "");
    put_text(&p, r->text_source);
    put(&p, " (sha256 %.16s…), %lld tokens; %lld windows of %lld tokens, %lld positions scored</p>\n", r->text_sha256,
        (long long)r->tokens, (long long)r->windows, (long long)r->ctx, (long long)r->positions);
    for (size_t i = 0; i < r->n_notes; i++) {
        put(&p, "<p>note: ");
        put_text(&p, r->notes[i]);
        put(&p, "</p>\n");
    }
    eval_table(&p, r);
    bool paired = false;
    for (int i = 0; i < r->n; i++)
        paired |= r->c[i].base.has;
    if (paired)
        put(&p, "<h2>Against the baseline</h2>\n<table id=\"baseline\"><tr><th>#</th><th>KLD mean then</th><th>now</th>"
                "<th>positions up</th><th>down</th><th>equal</th><th>sign test p</th></tr>\n");
    for (int i = 0; i < r->n; i++) {
        const struct eval_paired *b = &r->c[i].base;
        if (b->has)
            put(&p, "<tr><td>#%d</td><td>%.3g</td><td>%.3g</td><td>%lld</td><td>%lld</td><td>%lld</td><td>%.3g</td></tr>\n",
                i + 1, b->kld_mean_old, r->c[i].all.kld_mean, (long long)b->worse, (long long)b->better,
                (long long)b->ties, b->p_value);
    }
    if (paired)
        put(&p, "</table>\n");
    put(&p, "<h2>KL divergence per position</h2>\n");
    eval_cdf_svg(&p, r);
    if (r->n_cat > 1) {
        put(&p, "<h2>KLD mean per category</h2>\n");
        eval_categories_svg(&p, r);
    }
    put(&p, "<h2>Size against KLD</h2>\n");
    eval_frontier_svg(&p, r);
    put(&p, "<p style=\"color:#888;font-size:11px\">gempack eval " GEMPACK_VERSION "; KL(REF||CAND) in nats.</p>\n"
            "</body></html>\n");
    int rc = p.oom ? err_set(e, ERR_NOMEM, "%s: cannot hold the report", path) : fio_write_file(path, p.s, p.len, e);
    free(p.s);
    return rc;
}
