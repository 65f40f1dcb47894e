/* forward.h - the Gemma 4 text forward pass with KV caches
 * (gemma4-architecture.md §3 and §4).
 *
 * A runner holds the caches of one sequence: a growable cache for each
 * KV-owning full-attention layer, a ring of W entries for each KV-owning
 * sliding layer, and nothing for KV-shared layers (they read their source
 * layer's keys and values, including the current chunk's). runner_forward
 * takes a chunk of n tokens at the next positions; any split of a prompt into
 * chunks gives the same logits up to float rounding. */
#ifndef GP_FORWARD_H
#define GP_FORWARD_H

#include <stdbool.h>
#include <stdint.h>

#include "kernels/kernels.h"
#include "runner/model.h"

struct kv_cache {
    float *k, *v;        /* [cap, dim] */
    int64_t cap;         /* entries allocated (W for a ring) */
    int64_t dim;         /* G·d */
    bool ring;           /* sliding layer: slot = position mod W */
};

struct runner {
    const struct model *m;
    struct kern_table kt;
    int threads;
    struct kv_cache *cache;     /* [L]; used for KV-owning layers only */
    int64_t pos;                /* tokens already in the caches */
    double *inv_freq[2];        /* RoPE inverse frequencies per layer type, [d/2] */
};

int runner_init(struct runner *r, const struct model *m, int threads, enum kern_level level, struct err *e);
void runner_free(struct runner *r);

/* Forgets the sequence (caches emptied, position 0). */
void runner_reset(struct runner *r);

/* Runs n tokens at positions pos..pos+n-1 and appends them to the caches.
 * logits: [n, V] when all_rows, else [V] for the last token only (after the
 * soft-cap). key_mask: NULL, or [n, pos+n] bytes; a zero hides that key from
 * that query on top of the causal and sliding-window rules (an all-ones mask
 * gives results bitwise identical to NULL). */
int runner_forward(struct runner *r, const int32_t *tokens, int64_t n, float *logits, bool all_rows,
                   const uint8_t *key_mask, struct err *e);

/* Runs a whole prompt in chunks of `chunk` tokens (0: one chunk; 1: token by
 * token, as decoding does). logits: [T, V] for every position, or NULL;
 * last: [V] for the final position, or NULL. */
int runner_prompt(struct runner *r, const int32_t *tokens, int64_t T, int64_t chunk, float *logits, float *last,
                  struct err *e);

#endif
