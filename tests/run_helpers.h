/* run_helpers.h - shared helpers of the runner/ tests (test_kvcache.c,
 * test_session.c, test_prefix.c, test_runner.c): fixture models and their
 * prompt, runs of a prompt through a fresh runner, logit comparisons and the
 * KLD measure, batches of prompts, and prefix-cache runs with their no-cache
 * references.
 *
 * Fixtures (`gempack fixture`, deterministic, HF bf16 layout):
 *   e2b      10 layers, sliding window 8, layers 5..9 KV-shared (F0 = 5):
 *            sliding layers 5..8 read layer 3, full layer 9 reads layer 4
 *   26b-a4b  6 layers (MoE, k_eq_v), no KV sharing, last layer full
 *   31b      12 layers (k_eq_v), full layers 5 and 11
 * The fixture prompt has 24 tokens (> the window of 8). Longer prompts are
 * built from its ids (all < 512, the vocabulary). */
#ifndef GP_TEST_RUN_HELPERS_H
#define GP_TEST_RUN_HELPERS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "golden/golden.h"
#include "runner/forward.h"
#include "runner/prefix.h"
#include "runner/session.h"
#include "runner/tokens.h"

#define GEN 6   /* tokens generated per prompt */
#define BLOCK 8 /* prefix-cache block (= the window, so ring snapshots are whole blocks) */

/* Steps and contexts these tests stay within (the longest prompt here is
 * 20 blocks of 8 plus a few generated tokens; batches of a few prompts). */
#define TEST_STEP 512
#define TEST_CONTEXT 256

/* ---- fixtures and runs ---- */

/* A fixture model in a scratch directory, and its 24-token prompt. */
struct fx {
    char *tmp, *dir;
    struct model m;
    int32_t tok[24];
    int64_t T, V;
};

void fx_open(struct fx *f, const char *variant);
void fx_close(struct fx *f);

/* KV options of `bits` (0: float), group 64, start 0. */
struct kv_opts kvo(int bits, bool skip_last);
/* "float" or "kv4 g64 start 0 skip-last on" into buf. */
const char *kv_name(const struct kv_opts *kv, char *buf, size_t n);

struct run_info {
    size_t cache_bytes;
    int float_layer;
};

/* runner_init on one thread, the best kernels, n_seq sequences, TEST_STEP
 * and TEST_CONTEXT; kv NULL for a float cache. Asserts success. */
void runner_open(struct runner *r, const struct model *m, const struct kv_opts *kv, int n_seq);

/* Every row's logits [T, V] of a prompt through a fresh runner, in chunks
 * of `chunk` tokens (0: one prefill, 1: token by token). malloc'ed. */
float *run_kv(const struct model *m, const struct kv_opts *kv, const int32_t *tok, int64_t T, int64_t chunk,
              struct run_info *info);

/* Prefill of tok[0, P) then tok[P, T) one token at a time (decode): [T, V]. */
float *run_prefill_decode(const struct model *m, const struct kv_opts *kv, const int32_t *tok, int64_t P,
                          int64_t T);

/* One prompt alone through session_run: logits [T, V] (may be NULL) and
 * `GEN` generated tokens. */
void session_one(const struct model *m, const struct kv_opts *kv, int32_t *tok, int64_t T, int64_t chunk,
                 float temperature, uint64_t seed, float *logits, int32_t *gen);

/* ---- comparisons ---- */

bool all_finite(const float *x, int64_t n);
double max_abs_diff(const float *a, const float *b, int64_t n);
bool rows_equal(const float *a, const float *b, int64_t rows, int64_t V);

/* KL(ref || got) per position in nats and top-1 agreement, via
 * golden_compare (float64 log-softmax) on an in-memory golden holding `ref`
 * as float64; the mean is cross-checked by a direct float64 computation. */
void kld_measure(const float *ref, const float *got, int64_t T, int64_t V, struct golden_metrics *mt);
/* Logs the numbers (Criterion's log and stderr). */
void kld_report(const char *what, const struct golden_metrics *mt);

/* ---- batches ---- */

/* A token_seqs over caller-owned arrays (not tokens_free'd). */
struct seqs3 {
    int32_t *seq[4];
    int64_t len[4];
    struct token_seqs s;
};

void seqs_set(struct seqs3 *q, int n, int32_t *const *seq, const int64_t *len);

/* The batch of the issue: lengths 24, 7 and 13, different contents. */
void batch_prompts(const struct fx *f, int32_t p[3][24], int64_t len[3]);

/* ---- prefix-cache runs ---- */

#define LEN_A 40
#define LEN_B 43
#define SHARED 32

/* Two prompts sharing their first 32 tokens (4 blocks of 8). */
void prefix_prompts(const struct fx *f, int32_t *a, int32_t *b);

/* A run: a runner of one sequence and, optionally, its prefix cache. */
struct prun {
    struct runner r;
    struct prefix_cache pc;
    bool has_pc;
};

/* o NULL: no prefix cache. */
void prun_open(struct prun *p, const struct model *m, const struct kv_opts *kv, const struct prefix_opts *o);
void prun_close(struct prun *p);

/* The prompt (through the prefix cache when there is one), then GEN greedy
 * tokens. rows [GEN, V]: the prompt's last logits, then each decode step's
 * (which read every cached entry, restored or computed). */
void prun_prompt(struct prun *p, const int32_t *tok, int64_t T, float *rows, int32_t *gen);

/* The no-cache reference of a prompt (rows malloc'ed). */
struct pref {
    float *rows;
    int32_t gen[GEN];
};

void pref_make(struct pref *x, const struct model *m, const struct kv_opts *kv, const int32_t *tok, int64_t T);

/* A cached run matches its reference bitwise: last logits, decode logits, tokens. */
void expect_ref(const struct pref *x, const float *rows, const int32_t *gen, int64_t V, const char *what);

/* tmp/name (malloc'ed; not created). */
char *subdir(const char *tmp, const char *name);

#endif
