/* golden.h - golden-logit files and their comparison (CLI.md (golden make|check)).
 *
 * A golden file is an .npz (written by npz_write_logits, core/npz.h):
 * tokens.npy int32 [T], logits.npy float32 [T, V] (after the soft-cap),
 * optionally logits_f64.npy float64 [T, V] (preferred when present: the
 * project's references are float64), and meta.json
 * (producer, fingerprint, dtype, "tolerances"). Metrics use float64
 * throughout; KL divergence is computed from float64 log-softmax. */
#ifndef GP_GOLDEN_H
#define GP_GOLDEN_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/err.h"
#include "core/progress.h"

/* The thresholds a golden without "tolerances" is held to (MODEL.md §9). */
#define GOLDEN_DEFAULT_MAX_ABS 1e-4
#define GOLDEN_DEFAULT_TOP1 1.0
#define GOLDEN_TOPK 5

/* Thresholds; a negative value means "not checked". */
struct golden_thresholds {
    double max_abs, nmse, kld_mean, kld_p99, kld_max, top1_min;
};

struct golden {
    int32_t *tokens;          /* [T] */
    double *logits;           /* [T, V] (float64, from logits_f64 or logits) */
    int64_t T, V;
    struct json_object *meta; /* meta.json, or NULL */
    bool f64;                 /* logits came from logits_f64.npy */
    struct golden_thresholds th; /* from meta.json (golden_thresholds_from_meta) */
};

/* vocab: the model's vocabulary when known (0: not known); the logits
 * member must then fit T x vocab, checked before it is read, so a hostile
 * file cannot make the reader allocate more. */
int golden_read(const char *path, int64_t vocab, struct golden *g, struct err *e);
void golden_free(struct golden *g);

struct golden_metrics {
    double max_abs;           /* max |Δlogit| */
    double nmse;              /* Σ Δ² / Σ ref² */
    double cosine;            /* of the flattened logits */
    double kld_mean, kld_p99, kld_max; /* KL(P_ref || P_model) per position, nats */
    double top1;              /* share of positions whose argmax agrees */
    double rms_dp;            /* RMS over positions of p_ref(t*) - p_model(t*), t* the reference's top-1 */
    int64_t first_divergent;  /* first position whose top-1 differs or whose max |Δ| exceeds max_abs; -1 if none */
    double topk[GOLDEN_TOPK]; /* share of positions whose reference top token is among the model's K most likely */
    double regret_mean, regret_max; /* log p_ref of the reference's top token minus that of the model's top token */
    int64_t nonfinite;        /* positions whose model logits are no distribution (golden_row_broken): each
                               * the worst value of every metric */
    int64_t T, V;
};

/* Defaults (max_abs 1e-4, top1 1.0, others unchecked) overridden by the
 * golden's meta.json "tolerances" object, whose every entry must be a known
 * threshold holding a finite number >= 0 (top1 at most 1) or null (not
 * checked): anything else is ERR_FORMAT naming path and key. */
int golden_thresholds_from_meta(const struct golden *g, const char *path, struct golden_thresholds *t,
                                struct err *e);

/* Sets threshold `key` (max_abs, nmse, kld_mean, kld_p99, kld_max, top1) to the number `text` (finite, at
 * least 0, top1 at most 1), or to not checked for "off" (meta.json: null); anything else is ERR_USAGE
 * naming the key. The one parser of a caller's threshold. */
int golden_threshold_parse(struct golden_thresholds *t, const char *key, const char *text, struct err *e);

/* log-softmax of z[V] in float64; the first index of the largest value. */
void golden_log_softmax(const double *z, int64_t V, double *out);
int64_t golden_argmax(const double *z, int64_t V);
/* How many of z's values outrank z[i] (larger, or equal at a lower index), counted up to cap. */
int golden_rank(const double *z, int64_t V, int64_t i, int cap);

/* Compares model logits got[T, V] with the golden's. */
void golden_compare(const struct golden *g, const float *got, struct golden_thresholds th, struct golden_metrics *m);

/* True when a row of n logits is no distribution: a NaN or +inf in it, or
 * every value -inf (-inf alone is a masked token, probability 0). */
bool golden_row_broken(const float *x, int64_t n);

/* Appends {metric: name, value, threshold: limit} to failures when value is
 * past limit (above: greater than it; else less), limit < 0 being unchecked;
 * true when it did. */
bool golden_fail_if(struct json_object *failures, const char *name, double value, double limit, bool above);

/* v as a JSON number, or NULL (JSON null) when v is NaN or infinite. */
struct json_object *golden_num(double v);

/* Verdict object (schema gempack.golden/1): verdict, metrics, thresholds,
 * failures (a list of {metric, value, threshold}); positions with non-finite
 * logits fail it whatever the thresholds. *pass tells the verdict. */
struct json_object *golden_verdict(const struct golden_metrics *m, const struct golden_thresholds *t, bool *pass);

/* A runner's progress after each layer (runner_opts.progress) told to
 * `outer` as positions of the whole run: the running step covers positions
 * [at, at + n) of `total`, and its layers are pass `pass` of `passes` over
 * them (compare runs two models on each prompt). A long prompt in one step
 * then moves the line layer by layer. */
struct golden_positions {
    const struct progress *outer;
    const char *what;
    int64_t at, n, total;
    int pass, passes;
};
struct progress golden_positions_progress(struct golden_positions *p);

#endif
