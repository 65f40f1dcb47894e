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
    bool self_test;                   /* also check perturbed logits, which must fail (golden_result.self_test) */
    struct progress progress;         /* after each layer of each chunk (positions) */
};

/* What a check measured, for its record: the model and this build; the
 * golden's own record ("" or -1 where it has none). */
struct golden_provenance {
    char model_fingerprint[65], tokenizer_sha256[65], template_sha256[65]; /* "" when absent */
    char golden_producer[96], golden_fingerprint[65];
    int golden_numerics;              /* the numerics the golden was made with, -1: not recorded */
};

/* The self-test: at position `position` the golden's top token's logit,
 * in the model's logits, is lowered by `amount` (its margin over the
 * model's best other token plus the larger of 1 and twice the max-abs
 * threshold), so that position's top-1 flips and its |Δlogit| passes the
 * threshold; the thresholds must fail those logits. */
struct golden_self_test {
    bool ran, caught;                 /* caught: the perturbed logits failed, as they must */
    int64_t position;
    double amount;
    char failed_on[128];              /* the metrics that failed them, comma-separated */
};

struct golden_result {
    struct golden_metrics m;
    struct golden_thresholds th;      /* applied */
    bool pass, f64;
    int retokenized;                  /* a golden of text: 1 its text gives its ids again, -1 not (a failure); 0 no text */
    char retoken_diff[600];           /* -1: the first differing position, both ids and pieces */
    struct golden_provenance prov;
    struct golden_self_test self_test; /* pass is false when it ran and did not catch */
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

/* The verdict object of a result (gempack.golden/1, golden_verdict) with
 * what it measured ("measured": model, golden, gempack version, numerics),
 * the re-tokenization and the self-test; *pass is res->pass. */
struct json_object *golden_result_json(const struct golden_result *res, bool *pass);

/* Runs model_path on one prompt and writes out_path (tokens, logits, meta.json
 * with the default tolerances, what made it: model fingerprint, tokenizer and
 * template sha256, gempack version and numerics; and `text`, consumed, as meta "text" when the
 * prompt was text: golden_text_meta), telling `progress` (NULL: none) after
 * each layer; *V gets the vocabulary. */
int golden_make_file(const char *model_path, const int32_t *tokens, int64_t T, int threads, const char *out_path,
                     struct json_object *text, const struct progress *progress, int64_t *V, struct err *e);

/* What a golden of text records (meta.json "text"): the prompt (kind raw or
 * chat, text, system), the rendering, the tokenizer's and template's sha256
 * and the BOS rule, so golden check can tokenize it again. */
struct json_object *golden_text_meta(const struct model_text *mt, const struct text_prompt *p, const char *rendered);

#endif
