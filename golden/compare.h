/* compare.h - how far model B is from model A on the same prompts, and in
 * which layer (CLI.md (compare)). A is the reference: KL(A||B) is the cost of
 * using B where A was meant; KL(B||A) is reported beside it.
 *
 * Each prompt runs through both models in one prefill. Per position: KL both
 * ways, the rank of A's top token among B's (top-K agreement for K = 1..5),
 * argmax regret (A's log-probability of its own top token minus that of B's
 * top token), max |Δlogit|; in total also NMSE and cosine, and the same
 * grouped by A's confidence. Per decoder layer: the hidden state after the
 * layer and its attention and feed-forward branches, A against B: relative
 * error, cosine, SQNR. keep_a feeds A's hidden state into B after each of
 * the first keep_a layers, so layer keep_a shows its own error alone. */
#ifndef GP_COMPARE_H
#define GP_COMPARE_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "core/progress.h"
#include "golden/golden.h"
#include "runner/forward.h"
#include "runner/tokens.h"

#define COMPARE_TOPK GOLDEN_TOPK
#define COMPARE_BINS 3 /* A's top probability: < 0.5, 0.5 to 0.9, >= 0.9 */
#define COMPARE_JUMP 2.0 /* a layer's hidden error this many times its predecessor's is a jump */

struct compare_opts {
    int threads;
    struct kv_opts kv_b;          /* B's KV cache (A's is float) */
    int64_t keep_a;               /* layers whose output B takes from A */
    struct golden_thresholds th;  /* on the totals; negative: not checked */
    struct progress progress;     /* after each layer of each model on each prompt (positions) */
    const char *check_out;        /* an output the caller writes afterwards (a report), or NULL: refused
                                   * before any work if it is one of the models' files */
};

struct compare_pos {
    int prompt;
    int64_t t;
    double kl_ab, kl_ba, regret, max_abs, p_top; /* p_top: A's probability of its top token */
    double nmse, cosine;          /* of the position's logits: Σ(a − b)² / Σa², a·b / (|a||b|) */
    int rank;                     /* of A's top token among B's logits (0: B's top too) */
};

/* A against B over every position of every prompt. */
struct compare_err {
    double rel, cosine, sqnr_db;  /* ||a − b|| / ||a||; a·b / (|a||b|); 10 log10(Σa² / Σ(a − b)²), inf when equal */
};

struct compare_layer {
    struct compare_err hidden, attn, mlp;
};

struct compare_bin {
    int64_t n;
    double kl_ab, kl_ba, top1, regret, max_abs, nmse, cosine; /* means over the bin's positions */
};

struct compare_result {
    int64_t n_pos, V, L;
    int n_prompts;
    struct compare_pos *pos;      /* [n_pos] */
    struct golden_metrics m;      /* totals, KL(A||B), top-K, regret (golden_compare's metrics) */
    double kl_ba_mean;
    struct compare_bin bins[COMPARE_BINS];
    struct compare_layer *layers; /* [L] */
    int64_t jump_layer;           /* the first layer whose hidden error is at least COMPARE_JUMP times
                                   * the layer before's (-1: none) */
    double jump_ratio;
    struct golden_thresholds th;
    bool pass;
};

int compare_models(const char *a_path, const char *b_path, const struct token_seqs *prompts,
                   const struct compare_opts *o, struct compare_result *r, struct err *e);
void compare_free(struct compare_result *r);

/* The measures of n positions (A's logits a in float64, B's b), all but
 * prompt and t; ERR_NOMEM. And the totals that come from them (KL(B||A)
 * mean, the confidence bins; r->pos and r->n_pos set). */
int compare_positions(const double *a, const float *b, int64_t n, int64_t V, struct compare_pos *out);
void compare_totals(struct compare_result *r);

void compare_print(FILE *out, const char *a_path, const char *b_path, const struct compare_opts *o,
                   const struct compare_result *r);
/* schema gempack.compare/1 */
struct json_object *compare_json(const char *a_path, const char *b_path, const struct compare_opts *o,
                                 const struct compare_result *r);

/* convert --eval: the output o->out of the conversion cr against its source src on the fixture prompt and
 * `prompts`, the card stored in the pack's manifest ("quality") or as OUT/gempack_quality.json, and with
 * `report` the HTML page with every tensor's error. c must be card_free'd in every case. */
struct convert_opts;
struct convert_report;
struct card {
    struct compare_result r;
    struct json_object *json;     /* schema gempack.quality/1 */
    char *path;                   /* the card's file, or NULL: in the pack's manifest */
};
int card_make(const char *src, const struct convert_opts *o, const struct convert_report *cr,
              const struct token_seqs *prompts, const char *report, struct progress progress, struct card *c,
              struct err *e);
void card_free(struct card *c);

#endif
