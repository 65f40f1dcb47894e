/* forward.h - the Gemma 4 text forward pass with KV caches (docs/MODEL.md).
 *
 * A runner holds `n_seq` independent sequences. Each has a cache for every
 * KV-owning layer (runner/kvcache.h): max_context positions for full
 * attention, a ring of W entries for sliding layers; KV-shared layers keep
 * nothing and read their source layer's entries, including the current
 * chunk's. runner_step runs a batch: one chunk of tokens for each of several
 * sequences, their matmuls done together; every token takes exactly the
 * same operations whatever the batch and chunking, so a sequence's logits
 * are bitwise those of running it alone, token by token or in one prefill.
 *
 * Everything a step uses is allocated by runner_init for the largest step
 * and context the caller declares (as llama2.c's run state): a step
 * allocates nothing, and one beyond those limits is refused. */
#ifndef GP_FORWARD_H
#define GP_FORWARD_H

#include <stdbool.h>
#include <stdint.h>

#include "core/progress.h"
#include "kernels/kernels.h"
#include "runner/kvcache.h"
#include "runner/model.h"

/* KV cache representation (--kv-bits ...). */
struct kv_opts {
    int bits;                  /* 0 (float), 4 or 8 */
    int group_size;            /* 32, 64 or 128 (0: 64); per layer at most the head dim */
    int64_t start;             /* positions below stay float */
    bool skip_last_full;       /* the last KV-owning full-attention layer stays float */
};

/* Checks values as the CLI accepts them: bits 4|8 (or 0), group 32|64|128. */
int kv_opts_validate(const struct kv_opts *o, struct err *e);

struct runner_opts {
    int threads;               /* worker threads (at least 1) */
    enum kern_level kernels;
    struct kv_opts kv;
    int n_seq;                 /* sequences */
    int64_t max_step;          /* most tokens of one step, all its items together */
    int64_t max_context;       /* most positions of one sequence */
    struct progress progress;  /* after each decoder layer of a step ("layers": i + 1 of n_layers) */
};

struct seq_state {
    struct kv_cache *cache;    /* [L]; KV-owning layers only */
    int64_t pos;               /* tokens in the caches */
};

/* One chunk of one sequence in a step: its rows are off..off+n-1 of every activation. */
struct step_item {
    struct seq_state *s;
    int64_t off, n, p0;        /* first row, tokens, first position */
    const uint8_t *key_mask;
};

/* The routed experts run on blocks of MOE_BLOCK tokens, each expert once on
 * its tokens of a block (a long prompt gives an expert enough of them for
 * the blocked GEMM); under KERN_BLAS in pieces of MOE_PIECE rows at most,
 * below KERN_GEMM_MIN_TOKENS, since sgemm's rounding depends on the batch
 * and every other path gives a token the same bits in any batch. */
#define MOE_BLOCK 512
#define MOE_PIECE (KERN_GEMM_MIN_TOKENS - 1)

/* Rows of an expert's piece for blocks of `block` tokens. */
static inline int64_t moe_piece(bool blas, int64_t block)
{
    return blas && block > MOE_PIECE ? MOE_PIECE : block;
}

/* Every buffer of a step, carved from one allocation for max_step tokens:
 * [N, .] is N = max_step rows. */
struct run_state {
    int32_t *tokens;           /* [N] */
    int64_t *pos;              /* [N] each row's position */
    int32_t *item_of;          /* [N] each row's item */
    float *x, *a;              /* [N, H] residual stream, branch */
    float *z;                  /* [N, H] normed feed-forward input */
    float *q, *o;              /* [N, Nq, dmax] queries, attention output */
    float *k, *v;              /* [N, Gmax, dmax] this chunk's keys and values */
    float *gate, *up;          /* [N, Imax] */
    float *ple;                /* [N, L, P] per-layer inputs */
    float *pg;                 /* [N, P] per-layer input gate */
    float *ple_tok;            /* [threads, L, P] each worker's token row of the per-layer table */
    uint8_t *bad;              /* [N] whether a row holds a NaN or infinity */
    float *rope_cs[2];         /* [N, d] per layer type: each row's cos, sin */
    float *scores;             /* kern_attn_scratch(max_step, n_heads, max_context, dmax, threads) */
    float *moe;                /* [H normed router input | E logits] */
    uint8_t *taken;            /* [E] */
    int64_t *moe_top;          /* [B, K] each token's experts (B = min(MOE_BLOCK, N)) */
    float *moe_w;              /* [B, K] their weights */
    int64_t *moe_row;          /* [moe_piece(B)] the (token, k) of each row of an expert's piece */
    float *moe_in, *moe_out;   /* [moe_piece(B), H] an expert's piece: inputs, outputs */
    float *moe_eo;             /* [B, K, H] each token's expert outputs */
    float *moe_sum;            /* [B, H] each token's routed sum */
    struct step_item *items;   /* [n_seq] */
    struct kv_rows *pending;   /* [L] the step's entries of each KV-owning layer, max_step slots */
    void *block;               /* the allocation the arrays above are carved from */
};

/* What a step shows of its layers (gempack compare): each decoder layer's
 * attention and feed-forward branch and its output, [L, N, H] each (NULL: not
 * kept), and, for layers below inject_layers, an output to use instead:
 * another model's hidden state, so a layer's own error can be seen. */
struct runner_probe {
    float *attn, *mlp, *hidden;
    const float *inject;       /* [inject_layers, N, H] */
    int64_t inject_layers;
};

struct runner {
    const struct model *m;
    struct runner_probe *probe; /* NULL: none */
    struct kern_table kt;
    struct runner_opts o;
    int kv_float_layer;        /* layer kept float by skip_last_full, or -1 */
    double *inv_freq[2];       /* RoPE inverse frequencies per layer type, [d/2] */
    int64_t rope_dim[2];       /* that type's head dim d */
    struct seq_state *seq;     /* [n_seq] */
    struct run_state rs;
};

int runner_init(struct runner *r, const struct model *m, const struct runner_opts *o, struct err *e);
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

/* Runs the items (distinct sequences, at most max_step tokens together)
 * and appends their tokens to their caches. logits: every token's row,
 * items in order (all_rows), or one row per item for its last token; after
 * the soft-cap. NULL: no logits (the head is not run). */
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
