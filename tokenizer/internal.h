/* internal.h - what the tokenizer's readers (json.c, gguf.c) and its engine
 * (tokenizer.c) share: the tables, and the calls that fill them. */
#ifndef GP_TOKENIZER_INTERNAL_H
#define GP_TOKENIZER_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "tokenizer/tokenizer.h"

#define TOK_NONE UINT32_MAX
#define TOK_MAX_MERGES ((1u << 20) - 1) /* a rank + 1 fills the low 20 bits of a pair's slot */

/* Open addressing, linear probing; key UINT64_MAX marks an empty slot. */
struct tok_slot {
    uint64_t key, val;
};

struct tok_map {
    struct tok_slot *slot;
    size_t cap, n;  /* cap a power of two, n ≤ 3/4 cap */
};

/* A vocabulary slot: the piece hash's high half and the id (TOK_NONE: empty). */
struct tok_vslot {
    uint32_t tag, id;
};

struct tok_piece {
    uint64_t off;                  /* into pool; UINT64_MAX: no piece */
    uint32_t len;
    bool special;                  /* a special added token (decode's skip_special) */
    bool model;                    /* in the model's vocabulary (tok_set_piece), not an added token's alone */
};

enum tok_dec_kind { TOK_DEC_REPLACE, TOK_DEC_BYTE_FALLBACK, TOK_DEC_FUSE, TOK_DEC_STRIP };

struct tok_decoder {
    enum tok_dec_kind kind;
    char *pattern, *content;   /* REPLACE: pattern → content; STRIP: content is one character */
    size_t pattern_len, content_len;
    uint64_t start, stop;      /* STRIP: characters taken from each end */
};

struct tok_replace {
    char *from, *to;
    size_t from_len, to_len;
};

struct tok_added {
    uint32_t id;
    bool special, lstrip, rstrip;
};

struct tokenizer {
    const char *name;              /* for messages (owned copy in name_buf) */
    char *name_buf;
    /* pieces, by id: bytes in pool */
    uint32_t n_ids;                /* ids are below this */
    struct tok_piece *piece;

    char *pool;
    size_t pool_len, pool_cap;
    struct tok_vslot *vocab;       /* model pieces by hash (open addressing, linear probing, ≤ 3/4 full) */
    size_t vocab_cap, vocab_n;
    uint64_t *pair;                /* merges: left id << 42 | right id << 20 | rank + 1 (0: empty; as vocab) */
    size_t pair_cap;
    uint32_t *merge_id;            /* by rank: the merged id (the heap's entries hold only rank and position) */
    uint32_t *merge_split;         /* by rank, while loading: the left part's bytes (tok_finish looks the parts up) */
    size_t n_merges, merges_cap;
    /* added tokens: a byte trie, (node << 8 | byte) → child; node_added[node] = index + 1 */
    struct tok_map trie;
    uint64_t added_lead[4];        /* the bytes an added token starts with (a bit set) */
    uint32_t *node_added;
    size_t n_nodes, nodes_cap;
    struct tok_added *added;
    size_t n_added, added_cap;
    /* model */
    uint32_t unk_id;               /* TOK_NONE: no unk token */
    bool byte_fallback, fuse_unk, ignore_merges;
    uint32_t byte_id[256];         /* <0xXX>, TOK_NONE when absent */
    uint32_t ascii_id[128];        /* one-byte characters' ids, TOK_NONE when absent */
    uint64_t *junction;            /* pairs of characters adjacent in the pieces, a hashed bit set (tokenizer.c);
                                    * NULL when a piece is not UTF-8: words are then never cut */
    /* normalizer, pre-tokenizer, decoder */
    struct tok_replace *replace;
    size_t n_replace;
    char *split;                   /* Split's pattern (MergedWithPrevious), NULL: none */
    size_t split_len;
    struct tok_decoder *dec;
    size_t n_dec;
    /* post-processor: ids before and after the text */
    uint32_t *prefix, *suffix;
    size_t n_prefix, n_suffix;
};

/* A new, empty tokenizer named `name`. */
int tok_new(struct tokenizer **out, const char *name, struct err *e);
/* Room for this many pieces and merges (a reader that knows them up front). */
int tok_reserve(struct tokenizer *t, uint64_t n_pieces, uint64_t n_merges, struct err *e);
/* Model vocabulary: piece `s` is token `id` (each id and piece once). */
int tok_set_piece(struct tokenizer *t, uint32_t id, const char *s, size_t len, struct err *e);
/* The model's id of a piece, TOK_NONE when absent. */
uint32_t tok_lookup(const struct tokenizer *t, const char *s, size_t len);
/* Merge of rank `rank` (ranks 0, 1, 2, ... in order): left + right, both and
 * their concatenation in the vocabulary (a later merge of the same pair
 * replaces an earlier one, as in HF). */
int tok_add_merge(struct tokenizer *t, const char *l, size_t llen, const char *r, size_t rlen, uint64_t rank,
                  struct err *e);
/* An added token matched in raw text. */
int tok_add_added(struct tokenizer *t, uint32_t id, const char *s, size_t len, bool special, bool lstrip, bool rstrip,
                  struct err *e);
int tok_add_replace(struct tokenizer *t, const char *from, size_t flen, const char *to, size_t tlen, struct err *e);
int tok_add_decoder(struct tokenizer *t, enum tok_dec_kind kind, const char *pattern, size_t plen, const char *content,
                    size_t clen, uint64_t start, uint64_t stop, struct err *e);
/* Appends an id to the BOS rule's prefix (or suffix). */
int tok_add_template_id(struct tokenizer *t, bool suffix, uint32_t id, struct err *e);
/* After every table is filled: the byte and ASCII tables, checks of ids
 * (unk, the template's) against the vocabulary. */
int tok_finish(struct tokenizer *t, struct err *e);

#endif
