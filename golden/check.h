/* check.h - golden files and models: run a model on a golden's tokens and
 * judge its logits (`golden check`), and make a golden from a model (`golden
 * make`). The exact kernels (KERN_BEST) are used for goldens. */
#ifndef GP_GOLDEN_CHECK_H
#define GP_GOLDEN_CHECK_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "core/progress.h"
#include "golden/golden.h"
#include "ingest/text.h"

struct golden_check_opts {
    int threads;
    int64_t chunk;                    /* 0: one prefill; N: chunks of N tokens */
    struct golden_thresholds over;    /* NAN: the golden's own; negative: not checked */
    const char *report;               /* NULL, or the HTML page to write (golden/report.h) */
    struct progress progress;         /* after each layer of each chunk (positions) */
};

struct golden_result {
    struct golden_metrics m;
    struct golden_thresholds th;      /* applied */
    bool pass, f64;
    int retokenized;                  /* a golden of text: 1 its text gives its ids again, -1 not (a failure); 0 no text */
    char retoken_diff[600];           /* -1: the first differing position, both ids and pieces */
};

/* The golden's thresholds, each replaced by its override when not NAN. */
struct golden_check_opts golden_check_defaults(void);

/* Runs model_path (a pack or checkpoint directory) on golden_path's tokens
 * and compares. ERR_* for files that cannot be read or do not belong
 * together (vocabulary, length); a regression is res->pass false. */
int golden_check_model(const char *model_path, const char *golden_path, const struct golden_check_opts *o,
                       struct golden_result *res, struct err *e);

/* The human table of a result (metric, value, threshold, verdict). */
void golden_print(FILE *out, const char *model_path, const char *golden_path, const struct golden_result *res);

/* Runs model_path on one prompt and writes out_path (tokens, logits, meta.json
 * with the default tolerances, and `text`, consumed, as meta "text" when the
 * prompt was text: golden_text_meta), telling `progress` (NULL: none) after
 * each layer; *V gets the vocabulary. */
int golden_make_file(const char *model_path, const int32_t *tokens, int64_t T, int threads, const char *out_path,
                     struct json_object *text, const struct progress *progress, int64_t *V, struct err *e);

/* What a golden of text records (meta.json "text"): the prompt (kind raw or
 * chat, text, system), the rendering, the tokenizer's and template's sha256
 * and the BOS rule, so golden check can tokenize it again. */
struct json_object *golden_text_meta(const struct model_text *mt, const struct text_prompt *p, const char *rendered);

#endif
