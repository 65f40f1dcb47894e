#include "golden/report.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "converter/plan.h"
#include "core/fileio.h"

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
