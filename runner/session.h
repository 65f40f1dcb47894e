/* session.h - one `gempack run`: prompts (one or a batch), then generation.
 *
 * Prefill: the prompts advance together, one chunk of each per step (the
 * whole prompt, or `chunk` tokens at a time), their matmuls batched; with a
 * prefix cache each prompt goes through it instead (prefix_prompt). Decode:
 * one token of every sequence per step. Each sequence's logits are bitwise
 * those of running it alone (runner/forward.h). */
#ifndef GP_SESSION_H
#define GP_SESSION_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdint.h>

#include "runner/forward.h"
#include "runner/prefix.h"
#include "runner/tokens.h"

struct session_opts {
    int64_t chunk;             /* 0: whole prompts; N: N tokens per step */
    int64_t generate;          /* tokens to generate per sequence */
    float temperature, top_p;
    int top_k;
    uint64_t seed;             /* sequence b samples with seed + b */
    bool all_logits;           /* keep every prompt position's logits */
    struct prefix_cache *pc;   /* NULL: no prefix cache */
    const int32_t *stop;       /* a sequence's generation ends with one of these ids (n_stop) */
    int n_stop;
    void (*on_token)(void *ctx, int seq, int32_t id); /* NULL, or told each generated id as it comes */
    void *ctx;
};

struct session_result {
    int n;                     /* sequences */
    int64_t *len;              /* [n] prompt lengths */
    int64_t tmax;
    float *logits;             /* all_logits: [n, tmax, V], rows past a prompt's end zero */
    int32_t *generated;        /* [n, generate] */
    int64_t *n_generated;      /* [n]: each sequence's count (less than generate after a stop id) */
    double prefill_s, decode_s;
    int64_t prefill_tokens, decode_tokens;
};

/* The runner limits (runner_opts max_step, max_context) session_run needs for
 * these prompts and options; prefix_block: the prefix cache's block, or 0. */
void session_limits(const struct token_seqs *s, const struct session_opts *o, int64_t prefix_block,
                    int64_t *max_step, int64_t *max_context);

int session_run(struct runner *r, const struct token_seqs *s, const struct session_opts *o,
                struct session_result *res, struct err *e);
void session_result_free(struct session_result *res);

/* Everything `gempack run` takes besides the model and the prompts. */
struct run_config {
    struct session_opts s;
    struct kv_opts kv;
    bool kv_skip_given;        /* else the pack's recorded choice (source.kv_skip_last_full) */
    bool prefix;               /* through a prefix cache (prefix_o) */
    struct prefix_opts prefix_o;
    int threads;
    enum kern_level kernels;
    bool mmap;                 /* matrices read in place (no model_load_weights) */
    const char *dump;          /* --dump-logits: every prompt position's logits to this file */
};

/* A whole `gempack run`: opens the model, refuses a dump over an input,
 * loads the weights, runs the prompts and the generation, writes the dump;
 * the text report goes to out, prefix-cache warnings to warn, and the JSON
 * report (schema gempack.run/1) comes back in *jo (the caller puts it). */
int session_main(const char *model_path, const struct token_seqs *s, const struct run_config *c, FILE *out, FILE *warn,
                 struct json_object **jo, struct err *e);

#endif
