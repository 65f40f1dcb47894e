/* prefix.h - a prefix cache: the KV state of a token prefix, reused across
 * prompts and runs.
 *
 * A prompt is cut into fixed blocks of B tokens. The entry of block i holds,
 * for every KV-owning layer, the state needed at position (i+1)·B: the
 * full-attention entries of the block's own positions, and for sliding
 * layers a frozen copy of the ring (the last W entries) at that boundary —
 * copies, never references to live buffers. An entry's key is a hash chain
 * over the namespace (model fingerprint, KV representation: bits, group,
 * float start, skip-last; block size; kernels, whose rounding differs) and
 * every token up to the boundary, so any mismatch is a miss and float and
 * quantized state never mix.
 *
 * Hot tier: entries in RAM, bounded bytes, least recently used evicted.
 * Cold tier (optional directory): one file per entry, written atomically
 * with a CRC; a corrupt or stale file is discarded with a warning. Without a
 * directory the cache never touches the disk. */
#ifndef GP_PREFIX_H
#define GP_PREFIX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "runner/forward.h"

struct prefix_opts {
    int64_t block;             /* tokens per block (> 0) */
    size_t hot_limit;          /* bytes the hot tier may hold */
    const char *cold_dir;      /* NULL: hot only */
};

struct prefix_entry;

struct prefix_cache {
    struct prefix_opts o;
    uint8_t ns[32];            /* namespace: model + KV representation */
    struct prefix_entry *lru;  /* most recently used first */
    size_t hot_bytes;
    int64_t hit_tokens;        /* tokens restored instead of computed */
    char **warnings;           /* discarded cold entries, one sentence each */
    size_t n_warnings;
};

int prefix_init(struct prefix_cache *pc, const struct runner *r, const struct prefix_opts *o, struct err *e);
void prefix_free(struct prefix_cache *pc);

/* Runs the prompt of sequence `seq` (which must be empty) through the cache:
 * restores the longest cached whole-block prefix that leaves at least one
 * token to compute, computes the rest in chunks ending on block boundaries,
 * and stores every boundary state not yet cached. last: the last token's
 * logits [V]. Logits are bitwise those of a run without the cache. */
int prefix_prompt(struct prefix_cache *pc, struct runner *r, int seq, const int32_t *tokens, int64_t T, float *last,
                  struct err *e);

/* Bytes of this namespace's files in the cold directory (0 without one). */
uint64_t prefix_cold_bytes(const struct prefix_cache *pc);

#endif
