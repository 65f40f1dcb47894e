/* report.h - one self-contained HTML page of a comparison (compare
 * --report, convert --eval --report, eval --report; CLI.md): the verdict on top, the
 * totals, a per-position strip of KL(A||B) and top-1 agreement, the
 * per-layer error curves and, for a conversion, the per-tensor quantization
 * error table. Inline SVG and CSS only: no script, nothing fetched. */
#ifndef GP_REPORT_H
#define GP_REPORT_H

#include "core/err.h"
#include "golden/compare.h"
#include "golden/eval.h"

struct plan;

/* The colors the page draws with (tests look for them in a render). */
#define REPORT_PASS "#2e7d32"
#define REPORT_FAIL "#c62828"
#define REPORT_KL "#1565c0"
#define REPORT_TOP1_OK "#43a047"
#define REPORT_TOP1_MISS "#e53935"
#define REPORT_HIDDEN "#ef6c00"
#define REPORT_CAND1 "#3949ab" /* eval: the first two candidates' curves, bars and points */
#define REPORT_CAND2 "#fb8c00"

/* plan: the conversion's, whose every tensor's error against the source's values the page lists; or NULL. */
int report_write(const char *path, const char *title, const char *a, const char *b, const struct compare_result *r,
                 const struct plan *plan, struct err *e);

/* `gempack eval --report`: the verdict, the candidate × measure table, each
 * candidate's KL(REF||CAND) distribution (a cumulative curve on a log
 * scale), the KLD mean per category (bars) and bits per weight against KLD
 * mean (one point per candidate). */
int eval_report_write(const char *path, const struct eval_result *r, struct err *e);

#endif
