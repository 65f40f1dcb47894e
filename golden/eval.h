/* eval.h - `gempack eval`: one reference and any number of candidates (any
 * format gempack reads) on the same text, scored in windows as llama.cpp's
 * `perplexity --kl-divergence` does: PPL and its ratio to the reference's,
 * KL(REF || CAND) per position (mean with its 95 % interval, median, p90,
 * p99, max), top-1..5 agreement, argmax regret, bits per weight; in total and
 * per content category of the text (docs/CLI.md "eval").
 *
 * Text: a file or the built-in sample, in sections (eval_text_parse): plain
 * text of a category, or a conversation rendered through REF's chat
 * template. Each section is tokenized alone with REF's tokenizer, the ids
 * concatenated after its BOS rule (llama.cpp's perplexity tokenizes its
 * whole text so); every candidate with a tokenizer must give the same ids.
 * The stream is cut into windows of `ctx` tokens, each starting with BOS in
 * place of its first token; positions ctx/2 .. ctx − 2 of a window are
 * scored, each predicting the next token. A window runs through REF and
 * every candidate, then each position is measured (the reference's
 * distribution once): memory holds one window's logits per model. */
#ifndef GP_GOLDEN_EVAL_H
#define GP_GOLDEN_EVAL_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "core/err.h"
#include "core/progress.h"

/* ---- marked text ----
 *
 * A line exactly "@@ category NAME" starts a section of plain text of
 * category NAME; "@@ chat NAME" one holding a conversation (the JSON `run
 * --chat-file` takes), rendered through the reference's chat template. NAME:
 * 1..32 of [a-z0-9_-]. Text before the first marker is category "text"; the
 * marker lines are not text; a section ends with the newline before the next
 * marker. */
#define EVAL_NAME_MAX 32
#define EVAL_MAX_SECTIONS 4096
#define EVAL_MAX_TEXT (64u << 20)
struct eval_section {
    char name[EVAL_NAME_MAX + 1];
    bool chat;
    const char *text;       /* into eval_text.buf */
    size_t len;
};
struct eval_text {
    struct eval_section *s;
    int n;
    char *buf;
};
/* Parses text[0, len) (`what` names it in messages: the file, line and value). */
int eval_text_parse(const char *text, size_t len, const char *what, struct eval_text *out, struct err *e);
void eval_text_free(struct eval_text *t);

/* The built-in sample (golden/eval-sample.txt, compiled in). */
const char *eval_sample(size_t *len);

/* ---- a run ---- */

#define EVAL_TOPK 5            /* top-1..5 agreement */
#define EVAL_REF_TOPK 32       /* log-probabilities a saved reference keeps per position */

struct eval_opts {
    const char *text_path;     /* NULL: the built-in sample */
    int64_t ctx;               /* window (default 512) */
    int64_t chunks;            /* windows at most (0: every whole window) */
    int threads;
    const char *save_ref;      /* write the reference's scored distributions here */
    const char *ref_file;      /* read them instead of running REF (REF still gives the tokenizer) */
    double th_kld_mean, th_kld_p99, th_kld_max, th_top1, th_ppl_ratio; /* < 0: not checked */
    struct progress progress;   /* where the windows done are told (a TTY line) */
};

/* What a set of positions measured (all of them, or one category's). */
struct eval_stats {
    int64_t n;                 /* positions */
    double nll_ref, nll;       /* Σ −log p of the actual next token: the reference's, the candidate's */
    double ppl_ref, ppl, ppl_ratio;
    double kld_mean, kld_ci95, kld_median, kld_p90, kld_p99, kld_max;
    double topk[EVAL_TOPK];    /* share of positions whose reference top token is among the candidate's K best */
    double regret_mean, regret_max;
};

struct eval_cand {
    char *path;
    char fingerprint[65];
    char tok_sha256[65];       /* "" without a tokenizer */
    uint64_t bytes, params;    /* stored bytes of every tensor; the model's parameters */
    double bpw;                /* 8 · bytes / params */
    double *kld;               /* [positions] KL(REF || CAND) per scored position */
    double *nll;               /* [positions] −log q of the next token */
    struct eval_stats all;
    struct eval_stats *cat;    /* [n_cat] */
    bool pass;
    struct json_object *failures;
    struct eval_paired {      /* against the same candidate in a baseline result (eval_baseline) */
        bool has;
        double kld_mean_old;
        int64_t worse, better, ties; /* positions whose KLD went up, down, neither */
        double p_value;        /* two-sided sign test: the chance of a split at least this uneven */
    } base;
};

struct eval_result {
    char *ref_path;
    char ref_fingerprint[65], tok_sha256[65], tmpl_sha256[65], text_sha256[65];
    const char *text_source;   /* the file, or "built-in sample" */
    int64_t tokens, windows, positions, ctx, vocab;
    char (*cat_names)[EVAL_NAME_MAX + 1];
    int n_cat;
    uint16_t *pos_cat;         /* [positions] the category of each scored position */
    double *nll_ref;           /* [positions] */
    char **notes;              /* what was skipped (chat sections without a template) */
    size_t n_notes;
    bool ref_from_file;
    struct eval_cand *c;
    int n;
    bool pass;
};

int eval_run(const char *ref, const char *const *cands, int n_cands, const struct eval_opts *o, struct eval_result *r,
             struct err *e);
/* Pairs each candidate with the one of the same fingerprint (else path) in
 * a baseline result (`--json` of an earlier run on the same text, tokenizer
 * and windows: refused naming the field otherwise) and runs the sign test on
 * their per-position KLD; a candidate significantly worse (p < 0.05, more
 * positions up than down) fails ("baseline"). */
int eval_baseline(struct eval_result *r, const char *path, struct err *e);

void eval_print(FILE *out, const struct eval_result *r);
struct json_object *eval_json(const struct eval_result *r, const struct eval_opts *o);
void eval_free(struct eval_result *r);

#endif
