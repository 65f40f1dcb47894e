/* forward.h - the Gemma 4 text forward pass with KV caches
 * (gemma4-architecture.md §3 and §4).
 *
 * A runner holds `n_seq` independent sequences. Each has a cache for every
 * KV-owning layer (runner/kvcache.h): growable for full attention, a ring of
 * W entries for sliding layers; KV-shared layers keep nothing and read their
 * source layer's entries, including the current chunk's. runner_step runs a
 * batch: one chunk of tokens for each of several sequences, their matmuls
 * done together; every token takes exactly the same operations whatever the
 * batch and chunking, so a sequence's logits are bitwise those of running it
 * alone, token by token or in one prefill. */
#ifndef GP_FORWARD_H
#define GP_FORWARD_H

#include <stdbool.h>
#include <stdint.h>

#include "kernels/kernels.h"
#include "runner/kvcache.h"
#include "runner/model.h"

/* KV cache representation (--kv-bits ...). */
struct kv_opts {
    int bits;                  /* 0 (float), 4 or 8 */
    int group_size;            /* 32, 64 or 128; per layer at most the head dim */
    int64_t start;             /* positions below stay float */
    bool skip_last_full;       /* the last KV-owning full-attention layer stays float */
};

/* Checks values as the CLI accepts them: bits 4|8 (or 0), group 32|64|128. */
int kv_opts_validate(const struct kv_opts *o, struct err *e);

struct seq_state {
    struct kv_cache *cache;    /* [L]; KV-owning layers only */
    int64_t pos;               /* tokens in the caches */
};

struct runner {
    const struct model *m;
    struct kern_table kt;
    int threads;
    struct kv_opts kv;
    int kv_float_layer;        /* layer kept float by skip_last_full, or -1 */
    double *inv_freq[2];       /* RoPE inverse frequencies per layer type, [d/2] */
    int64_t rope_dim[2];       /* that type's head dim d */
    struct seq_state *seq;
    int n_seq;
};

/* Also sets, process-wide, glibc's malloc to keep freed memory for reuse
 * (M_MMAP_THRESHOLD 32 MiB, M_TRIM_THRESHOLD 1 GiB): a prefill allocates
 * megabytes of step buffers per layer, and with the defaults each layer
 * faulted fresh pages in (a quarter of a 512-token prefill's time on the
 * project VM; docs/PERFORMANCE.md). */
int runner_init(struct runner *r, const struct model *m, int threads, enum kern_level level,
                const struct kv_opts *kv, int n_seq, struct err *e);
void runner_free(struct runner *r);

/* Forgets a sequence (position 0). */
void runner_reset(struct runner *r, int seq);

/* One chunk of one sequence in a batch step. */
struct runner_item {
    int seq;
    const int32_t *tokens;
    int64_t n;
    const uint8_t *key_mask;   /* NULL, or [n, pos + n]: a zero hides that key from that
                                  query on top of the causal and window rules (an all-ones
                                  mask gives bitwise the results of NULL) */
};

/* Runs the items (distinct sequences) together and appends their tokens to
 * their caches. logits: every token's row, items in order (all_rows), or
 * one row per item for its last token; after the soft-cap. */
int runner_step(struct runner *r, const struct runner_item *items, int n_items, float *logits, bool all_rows,
                struct err *e);

/* runner_step for one chunk of sequence 0. */
int runner_forward(struct runner *r, const int32_t *tokens, int64_t n, float *logits, bool all_rows,
                   const uint8_t *key_mask, struct err *e);

/* Runs a whole prompt of sequence 0 in chunks of `chunk` tokens (0: one
 * chunk; 1: token by token). logits: [T, V] or NULL; last: [V] or NULL. */
int runner_prompt(struct runner *r, const int32_t *tokens, int64_t T, int64_t chunk, float *logits, float *last,
                  struct err *e);

/* Bytes held by a sequence's caches. */
size_t runner_cache_bytes(const struct runner *r, int seq);

#endif
