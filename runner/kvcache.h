/* kvcache.h - the KV cache of one KV-owning layer (docs/MODEL.md §7).
 *
 * Full-attention layers keep every position up to the runner's context;
 * sliding layers keep a ring of W slots (slot = position mod W). An entry
 * holds the layer's K (after k_norm and RoPE) and V (after v_norm) for all
 * its KV heads.
 *
 * Quantized caches (--kv-bits): an entry at a position ≥ `qstart` is stored
 * as MLX affine codes with float32 scales and biases, in groups of `gs`
 * along each head's dimension (INPUTS.md §2.2 rules); earlier positions
 * stay float. Whatever reads an entry (the layer itself, or the KV-shared
 * layers that use it as their source) decodes that stored representation;
 * nothing keeps a float copy of a quantized entry or quantizes twice. */
#ifndef GP_KVCACHE_H
#define GP_KVCACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/err.h"

/* How entries of one layer are stored. */
struct kv_fmt {
    int64_t heads, d;      /* KV heads and head dim: an entry is 2 × heads × d values */
    int bits, gs;          /* 0 bits: float only */
    int64_t qstart;        /* positions ≥ qstart are quantized (when bits > 0) */
    size_t fbytes;         /* float entry: K and V, heads·d floats each (stored in two planes, kvcache.c) */
    size_t qbytes;         /* quantized entry: K codes, V codes, K scales, K biases, V scales, V biases */
};

void kv_fmt_init(struct kv_fmt *f, int64_t heads, int64_t d, int bits, int gs, int64_t qstart);

static inline bool kv_fmt_quantized(const struct kv_fmt *f, int64_t pos)
{
    return f->bits > 0 && pos >= f->qstart;
}

/* Entries of consecutive positions (a cache, or a chunk's pending rows). */
struct kv_rows {
    uint8_t *f;            /* [2, cap, heads·d] floats (every slot's K row, then every V row), or NULL when
                              never needed */
    uint8_t *q;            /* [cap, qbytes] or NULL */
    int64_t cap;
};

/* Stores position pos's K and V (heads·d floats each) into slot `slot`. */
void kv_rows_put(const struct kv_fmt *f, struct kv_rows *r, int64_t slot, int64_t pos, const float *k, const float *v);

/* Head h of the K (which 0) or V (which 1) row of the entry in `slot`
 * (position pos), d floats: a pointer into the store when the position is
 * kept in float, else decoded into buf[d] and buf returned. */
const float *kv_rows_head(const struct kv_fmt *f, const struct kv_rows *r, int64_t slot, int64_t pos, int64_t h,
                          int which, float *buf);

/* Copies an entry between row stores of the same format. */
void kv_rows_copy(const struct kv_fmt *f, struct kv_rows *dst, int64_t dslot, const struct kv_rows *src,
                  int64_t sslot, int64_t pos);

/* Allocates `cap` slots (float and/or quantized parts as the format needs)
 * to rows that hold none; kv_rows_free frees them, also after a failure. */
int kv_rows_alloc(const struct kv_fmt *f, struct kv_rows *r, int64_t cap, struct err *e);
void kv_rows_free(struct kv_rows *r);

struct kv_cache {
    struct kv_fmt fmt;
    struct kv_rows rows;
    bool ring;             /* sliding layer: cap = W, slot = pos mod W */
};

/* cap slots: W for a sliding layer's ring, the context for a full layer. */
int kv_cache_init(struct kv_cache *c, const struct kv_fmt *f, bool ring, int64_t cap, struct err *e);
/* ERR_RANGE unless a full cache has room for positions [0, npos). */
int kv_cache_reserve(const struct kv_cache *c, int64_t npos, struct err *e);
static inline int64_t kv_cache_slot(const struct kv_cache *c, int64_t pos)
{
    return c->ring ? pos % c->rows.cap : pos;
}
void kv_cache_free(struct kv_cache *c);

/* The entry of position pos as bytes (a float one K then V; a quantized one
 * as stored): copied into `bytes`, or from it with restore; NULL bytes
 * copies nothing. Returns the entry's size. */
size_t kv_cache_entry_io(struct kv_cache *c, int64_t pos, uint8_t *bytes, bool restore);

/* Bytes of storage the cache holds. */
size_t kv_cache_bytes(const struct kv_cache *c);

#endif
