/* tokenizer.c - the tables, encode (added tokens, normalizer, split, BPE,
 * template) and decode of tokenizer.h. The readers (json.c, gguf.c) fill the
 * tables through internal.h. */
#include "tokenizer/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/bytes.h"
#include "tokenizer/internal.h"

/* ---- hash maps ---- */

static uint64_t mix64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

/* Eight bytes at a time (a piece is ~9 bytes: hashing byte by byte was a
 * third of a lookup). */
static uint64_t hash_bytes(const char *s, size_t len)
{
    uint64_t h = len;
    size_t i = 0;
    for (; i + 8 <= len; i += 8) {
        uint64_t w;
        memcpy(&w, s + i, 8);
        h = (h ^ w) * 0x9E3779B97F4A7C15ULL;
        h ^= h >> 32;
    }
    uint64_t w = 0;
    for (size_t k = 0; i + k < len; k++)
        w |= (uint64_t)(uint8_t)s[i + k] << 8 * k;
    return mix64(h ^ w);
}

static int map_grow(struct tok_map *m, struct err *e)
{
    size_t cap = m->cap ? m->cap * 2 : 1024;
    struct tok_slot *slot = malloc(cap * sizeof *slot);
    if (!slot)
        return err_set(e, ERR_NOMEM, "cannot allocate a tokenizer table of %zu entries", cap);
    memset(slot, 0xff, cap * sizeof *slot);
    for (size_t i = 0; i < m->cap; i++) {
        if (m->slot[i].key == UINT64_MAX)
            continue;
        size_t j = mix64(m->slot[i].key) & (cap - 1);
        while (slot[j].key != UINT64_MAX)
            j = (j + 1) & (cap - 1);
        slot[j] = m->slot[i];
    }
    free(m->slot);
    m->slot = slot;
    m->cap = cap;
    return ERR_OK;
}

/* The slot of `key` (found: key[slot] == key) or the empty slot where it goes. */
static size_t map_slot(const struct tok_map *m, uint64_t key)
{
    size_t j = mix64(key) & (m->cap - 1);
    while (m->slot[j].key != UINT64_MAX && m->slot[j].key != key)
        j = (j + 1) & (m->cap - 1);
    return j;
}

static bool map_get(const struct tok_map *m, uint64_t key, uint64_t *val)
{
    if (!m->cap)
        return false;
    size_t j = map_slot(m, key);
    if (m->slot[j].key == UINT64_MAX)
        return false;
    *val = m->slot[j].val;
    return true;
}

/* Sets key → val (replacing). */
static int map_put(struct tok_map *m, uint64_t key, uint64_t val, struct err *e)
{
    if ((m->n + 1) * 4 > m->cap * 3 && map_grow(m, e))
        return e->code;
    size_t j = map_slot(m, key);
    if (m->slot[j].key == UINT64_MAX) {
        m->slot[j].key = key;
        m->n++;
    }
    m->slot[j].val = val;
    return ERR_OK;
}

static void map_free(struct tok_map *m)
{
    free(m->slot);
}

/* ---- UTF-8 ---- */

/* Bytes of the UTF-8 character that starts with byte c (text already validated). */
static size_t utf8_len(uint8_t c)
{
    return c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
}

/* The first byte offset where s[0, len) is not valid UTF-8 (or holds a NUL,
 * unless allow_nul: then *nul says so), len if none. */
static size_t utf8_check(const uint8_t *s, size_t len, bool allow_nul, bool *nul)
{
    size_t i = 0;
    *nul = false;
    while (i < len) {
        uint8_t c = s[i];
        if (c < 0x80) {
            if (!c && !allow_nul) {
                *nul = true;
                return i;
            }
            i++;
            continue;
        }
        size_t n;
        uint32_t min, cp;
        if (c >= 0xC2 && c <= 0xDF)
            n = 2, min = 0x80, cp = c & 0x1F;
        else if (c >= 0xE0 && c <= 0xEF)
            n = 3, min = 0x800, cp = c & 0x0F;
        else if (c >= 0xF0 && c <= 0xF4)
            n = 4, min = 0x10000, cp = c & 0x07;
        else
            return i;
        if (len - i < n)
            return i;
        for (size_t k = 1; k < n; k++) {
            if ((s[i + k] & 0xC0) != 0x80)
                return i;
            cp = cp << 6 | (s[i + k] & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return i;
        i += n;
    }
    return len;
}

/* Code point of the character at s (valid UTF-8), its length in *n. */
static uint32_t utf8_cp(const uint8_t *s, size_t *n)
{
    *n = utf8_len(s[0]);
    if (*n == 1)
        return s[0];
    uint32_t cp = s[0] & (0x7F >> *n);
    for (size_t k = 1; k < *n; k++)
        cp = cp << 6 | (s[k] & 0x3F);
    return cp;
}

/* ---- building ---- */

int tok_new(struct tokenizer **out, const char *name, struct err *e)
{
    struct tokenizer *t = calloc(1, sizeof *t);
    if (!t || !(t->name_buf = strdup(name))) {
        free(t);
        return err_set(e, ERR_NOMEM, "%s: cannot allocate a tokenizer", name);
    }
    t->name = t->name_buf;
    t->unk_id = TOK_NONE;
    *out = t;
    return ERR_OK;
}

static int ensure_id(struct tokenizer *t, uint32_t id, struct err *e)
{
    if (id >= TOK_MAX_VOCAB)
        return err_set(e, ERR_RANGE, "%s: token id %u: ids must be below %u", t->name, id, TOK_MAX_VOCAB);
    if (id < t->n_ids)
        return ERR_OK;
    uint32_t n = t->n_ids ? t->n_ids : 1024;
    while (n <= id)
        n *= 2;
    struct tok_piece *pc = realloc(t->piece, n * sizeof *pc);
    if (!pc)
        return err_set(e, ERR_NOMEM, "%s: cannot allocate %u token ids", t->name, n);
    t->piece = pc;
    for (uint32_t i = t->n_ids; i < n; i++) {
        t->piece[i].off = UINT64_MAX;
        t->piece[i].len = 0;
        t->piece[i].special = t->piece[i].model = false;
    }
    t->n_ids = n;
    return ERR_OK;
}

static int pool_add(struct tokenizer *t, const char *s, size_t len, uint64_t *off, struct err *e)
{
    if (len > TOK_MAX_PIECE)
        return err_set(e, ERR_RANGE, "%s: a piece of %zu bytes: at most %d", t->name, len, TOK_MAX_PIECE);
    if (t->pool_len + len > t->pool_cap) {
        size_t cap = t->pool_cap ? t->pool_cap : 1 << 20;
        while (cap < t->pool_len + len)
            cap *= 2;
        char *p = realloc(t->pool, cap);
        if (!p)
            return err_set(e, ERR_NOMEM, "%s: cannot allocate %zu bytes of pieces", t->name, cap);
        t->pool = p;
        t->pool_cap = cap;
    }
    memcpy(t->pool + t->pool_len, s, len);
    *off = t->pool_len;
    t->pool_len += len;
    return ERR_OK;
}

/* The vocabulary: a piece's slot is its hash's low bits, its tag the high
 * half; pieces with equal tags sit in the following slots (probing compares
 * the pieces). Grown to twice the slots, every piece rehashed from the pool. */
static int vocab_grow(struct tokenizer *t, size_t cap, struct err *e)
{
    struct tok_vslot *v = malloc(cap * sizeof *v);
    if (!v)
        return err_set(e, ERR_NOMEM, "%s: cannot allocate a vocabulary of %zu slots", t->name, cap);
    memset(v, 0xff, cap * sizeof *v);
    for (size_t i = 0; i < t->vocab_cap; i++) {
        uint32_t id = t->vocab[i].id;
        if (id == TOK_NONE)
            continue;
        size_t j = hash_bytes(t->pool + t->piece[id].off, t->piece[id].len) & (cap - 1);
        while (v[j].id != TOK_NONE)
            j = (j + 1) & (cap - 1);
        v[j] = t->vocab[i];
    }
    free(t->vocab);
    t->vocab = v;
    t->vocab_cap = cap;
    return ERR_OK;
}

/* The slot of piece s of hash h (found: its id is not TOK_NONE) or the empty slot where it goes. */
static size_t vocab_slot(const struct tokenizer *t, const char *s, size_t len, uint64_t h)
{
    uint32_t tag = (uint32_t)(h >> 32);
    size_t j = h & (t->vocab_cap - 1);
    for (; t->vocab[j].id != TOK_NONE; j = (j + 1) & (t->vocab_cap - 1)) {
        const struct tok_piece *p = &t->piece[t->vocab[j].id];
        if (t->vocab[j].tag == tag && p->len == len && !memcmp(t->pool + p->off, s, len))
            break;
    }
    return j;
}

uint32_t tok_lookup(const struct tokenizer *t, const char *s, size_t len)
{
    return t->vocab_cap ? t->vocab[vocab_slot(t, s, len, hash_bytes(s, len))].id : TOK_NONE;
}

int tok_set_piece(struct tokenizer *t, uint32_t id, const char *s, size_t len, struct err *e)
{
    if (ensure_id(t, id, e))
        return e->code;
    if (t->piece[id].off != UINT64_MAX)
        return err_set(e, ERR_FORMAT, "%s: token id %u appears twice in the vocabulary", t->name, id);
    if ((t->vocab_n + 1) * 4 > t->vocab_cap * 3 && vocab_grow(t, t->vocab_cap ? 2 * t->vocab_cap : 1024, e))
        return e->code;
    uint64_t h = hash_bytes(s, len);
    size_t j = vocab_slot(t, s, len, h);
    if (t->vocab[j].id != TOK_NONE)
        return err_set(e, ERR_FORMAT, "%s: piece '%.*s' appears twice in the vocabulary (ids %u and %u)", t->name,
                       (int)(len > 64 ? 64 : len), s, t->vocab[j].id, id);
    if (pool_add(t, s, len, &t->piece[id].off, e))
        return e->code;
    t->piece[id].len = (uint32_t)len;
    t->piece[id].model = true;
    t->vocab[j] = (struct tok_vslot){(uint32_t)(h >> 32), id};
    t->vocab_n++;
    return ERR_OK;
}

/* The merges: (left, right) → rank, in slots of left << 42 | right << 20 |
 * rank + 1 (ids are below 2^22, ranks below TOK_MAX_MERGES). */
#define PAIR_RANK ((1ull << 20) - 1)

static uint64_t pair_key(uint32_t left, uint32_t right)
{
    return (uint64_t)left << 42 | (uint64_t)right << 20;
}

/* The slot of (left, right), or the empty slot where it goes. */
static size_t pair_slot(const struct tokenizer *t, uint64_t key)
{
    size_t j = mix64(key) & (t->pair_cap - 1);
    while (t->pair[j] && (t->pair[j] & ~PAIR_RANK) != key)
        j = (j + 1) & (t->pair_cap - 1);
    return j;
}

/* The rank of the merge of left and right, TOK_NONE when they do not merge. */
static uint32_t pair_rank(const struct tokenizer *t, uint32_t left, uint32_t right)
{
    return (uint32_t)(t->pair[pair_slot(t, pair_key(left, right))] & PAIR_RANK) - 1;
}

static int grow_merges(struct tokenizer *t, uint64_t need, struct err *e)
{
    size_t cap = t->merges_cap ? t->merges_cap : 1024;
    while (cap < need)
        cap *= 2;
    uint32_t *m = realloc(t->merge_id, cap * sizeof *m);
    if (m)
        t->merge_id = m;
    uint32_t *p = m ? realloc(t->merge_split, cap * sizeof *p) : NULL;
    if (!p)
        return err_set(e, ERR_NOMEM, "%s: cannot allocate %zu merges", t->name, cap);
    t->merge_split = p;
    t->merges_cap = cap;
    return ERR_OK;
}

/* The pairs' table: each merge's parts (its merged piece cut where
 * tok_add_merge saw them split) looked up, in rank order (a later merge of the
 * same pair replaces the earlier, as in HF). Three stages AHEAD merges apart:
 * the parts hashed and their slots fetched, then looked up and their pair's
 * slot fetched, then the pair stored, so that the cache misses overlap. */
#define AHEAD 8

static int build_pairs(struct tokenizer *t, struct err *e)
{
    size_t cap = 1024;
    while ((t->n_merges + 1) * 4 > cap * 3)
        cap *= 2;
    t->pair = calloc(cap, sizeof *t->pair);
    if (!t->pair)
        return err_set(e, ERR_NOMEM, "%s: cannot allocate %zu merge slots", t->name, cap);
    t->pair_cap = cap;
    uint64_t hash[AHEAD][2], key[AHEAD];
    for (size_t r = 0; r < t->n_merges + 2 * AHEAD; r++) { /* the stages latest first: each frees its ring slot */
        size_t q = r - 2 * AHEAD;
        if (r >= 2 * AHEAD && q < t->n_merges)
            t->pair[pair_slot(t, key[q % AHEAD])] = key[q % AHEAD] | (q + 1);
        q = r - AHEAD;
        if (r >= AHEAD && q < t->n_merges) {
            const struct tok_piece *c = &t->piece[t->merge_id[q]];
            const char *part[2] = {t->pool + c->off, t->pool + c->off + t->merge_split[q]};
            size_t len[2] = {t->merge_split[q], c->len - t->merge_split[q]};
            uint32_t id[2];
            for (int k = 0; k < 2; k++) {
                id[k] = t->vocab[vocab_slot(t, part[k], len[k], hash[q % AHEAD][k])].id;
                if (id[k] == TOK_NONE)
                    return err_set(e, ERR_FORMAT, "%s: merge %zu: piece '%.*s' is not in the vocabulary", t->name, q,
                                   (int)(len[k] > 64 ? 64 : len[k]), part[k]);
            }
            key[q % AHEAD] = pair_key(id[0], id[1]);
            __builtin_prefetch(&t->pair[mix64(key[q % AHEAD]) & (cap - 1)], 1);
        }
        if (r < t->n_merges) {
            const struct tok_piece *c = &t->piece[t->merge_id[r]];
            const char *s = t->pool + c->off;
            hash[r % AHEAD][0] = hash_bytes(s, t->merge_split[r]);
            hash[r % AHEAD][1] = hash_bytes(s + t->merge_split[r], c->len - t->merge_split[r]);
            for (int k = 0; k < 2; k++)
                __builtin_prefetch(&t->vocab[hash[r % AHEAD][k] & (t->vocab_cap - 1)]);
        }
    }
    free(t->merge_split);
    t->merge_split = NULL;
    return ERR_OK;
}

int tok_reserve(struct tokenizer *t, uint64_t n_pieces, uint64_t n_merges, struct err *e)
{
    if (n_pieces > TOK_MAX_VOCAB || n_merges > TOK_MAX_MERGES)
        return err_set(e, ERR_RANGE, "%s: %llu pieces and %llu merges: at most %u and %u", t->name,
                       (unsigned long long)n_pieces, (unsigned long long)n_merges, TOK_MAX_VOCAB, TOK_MAX_MERGES);
    size_t cap = t->vocab_cap ? t->vocab_cap : 1024;
    while ((n_pieces + 1) * 4 > cap * 3)
        cap *= 2;
    if (cap > t->vocab_cap && vocab_grow(t, cap, e))
        return e->code;
    if (n_merges > t->merges_cap && grow_merges(t, n_merges, e))
        return e->code;
    return n_pieces ? ensure_id(t, (uint32_t)n_pieces - 1, e) : ERR_OK;
}

int tok_add_merge(struct tokenizer *t, const char *l, size_t llen, const char *r, size_t rlen, uint64_t rank,
                  struct err *e)
{
    /* The merged piece: nearly always the previous merge's id or the next
     * (files list merges in the order of the ids they make). Its parts are
     * looked up when the reading ends (build_pairs). */
    uint32_t c = TOK_NONE, prev = rank ? t->merge_id[rank - 1] : TOK_NONE;
    for (uint32_t k = 0; k < 2 && prev != TOK_NONE && prev + k < t->n_ids && c == TOK_NONE; k++) {
        const struct tok_piece *p = &t->piece[prev + k];
        if (p->model && p->len == llen + rlen && !memcmp(t->pool + p->off, l, llen) &&
            !memcmp(t->pool + p->off + llen, r, rlen))
            c = prev + k;
    }
    if (c == TOK_NONE && llen + rlen <= TOK_MAX_PIECE) {
        char buf[TOK_MAX_PIECE];
        memcpy(buf, l, llen);
        memcpy(buf + llen, r, rlen);
        c = tok_lookup(t, buf, llen + rlen);
    }
    if (c == TOK_NONE) {
        uint32_t a = tok_lookup(t, l, llen), b = tok_lookup(t, r, rlen);
        if (a == TOK_NONE || b == TOK_NONE)
            return err_set(e, ERR_FORMAT, "%s: merge %llu: piece '%.*s' is not in the vocabulary", t->name,
                           (unsigned long long)rank,
                           (int)(a == TOK_NONE ? (llen > 64 ? 64 : llen) : (rlen > 64 ? 64 : rlen)), a == TOK_NONE ? l : r);
        if (llen + rlen > TOK_MAX_PIECE)
            return err_set(e, ERR_FORMAT, "%s: merge %llu: the merged piece is not in the vocabulary", t->name,
                           (unsigned long long)rank);
        return err_set(e, ERR_FORMAT, "%s: merge %llu: '%.*s' + '%.*s' is not in the vocabulary", t->name,
                       (unsigned long long)rank, (int)(llen > 64 ? 64 : llen), l, (int)(rlen > 64 ? 64 : rlen), r);
    }
    if (rank >= TOK_MAX_MERGES)
        return err_set(e, ERR_RANGE, "%s: more than %u merges", t->name, TOK_MAX_MERGES);
    if (rank >= t->merges_cap && grow_merges(t, rank + 1, e))
        return e->code;
    t->merge_id[rank] = c;
    t->merge_split[rank] = (uint32_t)llen;
    t->n_merges = rank + 1;
    return ERR_OK;
}

int tok_add_added(struct tokenizer *t, uint32_t id, const char *s, size_t len, bool special, bool lstrip, bool rstrip,
                  struct err *e)
{
    if (!len)
        return ERR_OK; /* HF ignores an empty added token */
    if (len > TOK_MAX_ADDED_LEN)
        return err_set(e, ERR_UNSUPPORTED, "%s: added token %u of %zu bytes: at most %d", t->name, id, len,
                       TOK_MAX_ADDED_LEN);
    if (ensure_id(t, id, e))
        return e->code;
    if (t->piece[id].off == UINT64_MAX) {
        if (pool_add(t, s, len, &t->piece[id].off, e))
            return e->code;
        t->piece[id].len = (uint32_t)len;
    } else if (t->piece[id].len != len || memcmp(t->pool + t->piece[id].off, s, len)) {
        return err_set(e, ERR_UNSUPPORTED, "%s: added token '%.*s' has id %u, the vocabulary's '%.*s'", t->name,
                       (int)(len > 64 ? 64 : len), s, id, (int)(t->piece[id].len > 64 ? 64 : t->piece[id].len),
                       t->pool + t->piece[id].off);
    }
    if (special)
        t->piece[id].special = true;
    if (t->n_added == t->added_cap) {
        size_t cap = t->added_cap ? t->added_cap * 2 : 64;
        struct tok_added *a = realloc(t->added, cap * sizeof *a);
        if (!a)
            return err_set(e, ERR_NOMEM, "%s: cannot allocate %zu added tokens", t->name, cap);
        t->added = a;
        t->added_cap = cap;
    }
    /* the trie: a node per prefix */
    if (!t->n_nodes) {
        t->node_added = calloc(1024, sizeof *t->node_added);
        if (!t->node_added)
            return err_set(e, ERR_NOMEM, "%s: cannot allocate the added tokens' trie", t->name);
        t->nodes_cap = 1024;
        t->n_nodes = 1;
    }
    t->added_lead[(uint8_t)s[0] >> 6] |= 1ull << ((uint8_t)s[0] & 63);
    uint64_t node = 0;
    for (size_t i = 0; i < len; i++) {
        uint64_t key = node << 8 | (uint8_t)s[i], child;
        if (!map_get(&t->trie, key, &child)) {
            if (t->n_nodes == t->nodes_cap) {
                uint32_t *na = realloc(t->node_added, 2 * t->nodes_cap * sizeof *na);
                if (!na)
                    return err_set(e, ERR_NOMEM, "%s: cannot allocate the added tokens' trie", t->name);
                memset(na + t->nodes_cap, 0, t->nodes_cap * sizeof *na);
                t->node_added = na;
                t->nodes_cap *= 2;
            }
            child = t->n_nodes++;
            if (map_put(&t->trie, key, child, e))
                return e->code;
        }
        node = child;
    }
    if (t->node_added[node]) { /* the same content again: HF keeps the later token's id and flags */
        t->added[t->node_added[node] - 1] = (struct tok_added){id, special, lstrip, rstrip};
        return ERR_OK;
    }
    t->added[t->n_added++] = (struct tok_added){id, special, lstrip, rstrip};
    t->node_added[node] = (uint32_t)t->n_added;
    return ERR_OK;
}

static int dup_bytes(struct tokenizer *t, const char *s, size_t len, char **out, struct err *e)
{
    *out = malloc(len + 1);
    if (!*out)
        return err_set(e, ERR_NOMEM, "%s: cannot allocate %zu bytes", t->name, len + 1);
    memcpy(*out, s, len);
    (*out)[len] = 0;
    return ERR_OK;
}

int tok_add_replace(struct tokenizer *t, const char *from, size_t flen, const char *to, size_t tlen, struct err *e)
{
    if (!flen)
        return err_set(e, ERR_UNSUPPORTED, "%s: normalizer Replace with an empty pattern", t->name);
    struct tok_replace *r = realloc(t->replace, (t->n_replace + 1) * sizeof *r);
    if (!r)
        return err_set(e, ERR_NOMEM, "%s: cannot allocate a normalizer", t->name);
    t->replace = r;
    r += t->n_replace;
    *r = (struct tok_replace){.from_len = flen, .to_len = tlen};
    if (dup_bytes(t, from, flen, &r->from, e) || dup_bytes(t, to, tlen, &r->to, e)) {
        free(r->from);
        return e->code;
    }
    t->n_replace++;
    return ERR_OK;
}

int tok_add_decoder(struct tokenizer *t, enum tok_dec_kind kind, const char *pattern, size_t plen, const char *content,
                    size_t clen, uint64_t start, uint64_t stop, struct err *e)
{
    if (kind == TOK_DEC_REPLACE && !plen)
        return err_set(e, ERR_UNSUPPORTED, "%s: decoder Replace with an empty pattern", t->name);
    struct tok_decoder *d = realloc(t->dec, (t->n_dec + 1) * sizeof *d);
    if (!d)
        return err_set(e, ERR_NOMEM, "%s: cannot allocate a decoder", t->name);
    t->dec = d;
    d += t->n_dec;
    *d = (struct tok_decoder){.kind = kind, .pattern_len = plen, .content_len = clen, .start = start, .stop = stop};
    if (dup_bytes(t, pattern ? pattern : "", plen, &d->pattern, e) ||
        dup_bytes(t, content ? content : "", clen, &d->content, e)) {
        free(d->pattern);
        return e->code;
    }
    t->n_dec++;
    return ERR_OK;
}

int tok_add_template_id(struct tokenizer *t, bool suffix, uint32_t id, struct err *e)
{
    uint32_t **ids = suffix ? &t->suffix : &t->prefix;
    size_t *n = suffix ? &t->n_suffix : &t->n_prefix;
    if (*n >= 64)
        return err_set(e, ERR_UNSUPPORTED, "%s: post-processor template of more than 64 special tokens", t->name);
    uint32_t *p = realloc(*ids, (*n + 1) * sizeof *p);
    if (!p)
        return err_set(e, ERR_NOMEM, "%s: cannot allocate the post-processor", t->name);
    p[(*n)++] = id;
    *ids = p;
    return ERR_OK;
}

/* The junction table: bit junction_bit(a, b) is set for every pair of
 * characters a, b adjacent in a piece of the model's vocabulary (every piece
 * a merge can make). */
#define JUNCTION_BITS 20

static uint64_t junction_bit(uint32_t a, uint32_t b)
{
    return ((uint64_t)a << 21 | b) * 0x9E3779B97F4A7C15ULL >> (64 - JUNCTION_BITS);
}

static int build_junctions(struct tokenizer *t, struct err *e)
{
    bool nul;
    const uint8_t *pool = (const uint8_t *)t->pool;
    if (utf8_check(pool, t->pool_len, true, &nul) != t->pool_len)
        return ERR_OK;
    t->junction = calloc((size_t)1 << (JUNCTION_BITS - 6), sizeof *t->junction);
    if (!t->junction)
        return err_set(e, ERR_NOMEM, "%s: cannot allocate the junction table", t->name);
    for (uint32_t id = 0; id < t->n_ids; id++) {
        if (!t->piece[id].model)
            continue;
        const uint8_t *p = pool + t->piece[id].off;
        uint32_t a = UINT32_MAX;
        size_t cl;
        for (size_t i = 0; i < t->piece[id].len; i += cl) {
            uint32_t b = p[i] < 0x80 ? (cl = 1, p[i]) : utf8_cp(p + i, &cl);
            uint64_t bit = junction_bit(a, b);
            if (a != UINT32_MAX)
                t->junction[bit >> 6] |= 1ull << (bit & 63);
            a = b;
        }
    }
    return ERR_OK;
}

int tok_finish(struct tokenizer *t, struct err *e)
{
    if (!t->vocab_n)
        return err_set(e, ERR_FORMAT, "%s: the vocabulary is empty", t->name);
    for (int b = 0; b < 256; b++) {
        char s[8];
        snprintf(s, sizeof s, "<0x%02X>", b);
        t->byte_id[b] = tok_lookup(t, s, 6);
    }
    for (int c = 0; c < 128; c++) {
        char s = (char)c;
        t->ascii_id[c] = tok_lookup(t, &s, 1);
    }
    if (t->unk_id != TOK_NONE && (t->unk_id >= t->n_ids || t->piece[t->unk_id].off == UINT64_MAX))
        return err_set(e, ERR_FORMAT, "%s: the unk token %u is not in the vocabulary", t->name, t->unk_id);
    for (size_t i = 0; i < t->n_prefix + t->n_suffix; i++) {
        uint32_t id = i < t->n_prefix ? t->prefix[i] : t->suffix[i - t->n_prefix];
        if (id >= t->n_ids || t->piece[id].off == UINT64_MAX)
            return err_set(e, ERR_FORMAT, "%s: the post-processor's token %u is not in the vocabulary", t->name, id);
    }
    /* the id space ends after the last id that has a piece */
    while (t->n_ids && t->piece[t->n_ids - 1].off == UINT64_MAX)
        t->n_ids--;
    return build_pairs(t, e) || build_junctions(t, e) ? e->code : ERR_OK;
}

void tok_free(struct tokenizer *t)
{
    if (!t)
        return;
    free(t->name_buf);
    free(t->piece);
    free(t->pool);
    free(t->vocab);
    free(t->pair);
    map_free(&t->trie);
    free(t->node_added);
    free(t->merge_id);
    free(t->merge_split);
    free(t->junction);
    free(t->added);
    for (size_t i = 0; i < t->n_replace; i++) {
        free(t->replace[i].from);
        free(t->replace[i].to);
    }
    free(t->replace);
    free(t->split);
    for (size_t i = 0; i < t->n_dec; i++) {
        free(t->dec[i].pattern);
        free(t->dec[i].content);
    }
    free(t->dec);
    free(t->prefix);
    free(t->suffix);
    free(t);
}

uint32_t tok_vocab_size(const struct tokenizer *t)
{
    return t->n_ids;
}

const char *tok_piece(const struct tokenizer *t, uint32_t id, size_t *len)
{
    if (id >= t->n_ids || t->piece[id].off == UINT64_MAX)
        return NULL;
    *len = t->piece[id].len;
    return t->pool + t->piece[id].off;
}

const uint32_t *tok_bos_rule(const struct tokenizer *t, size_t *n)
{
    *n = t->n_prefix;
    return t->prefix;
}

/* ---- encode ---- */

struct idbuf {
    uint32_t *v;
    size_t n, cap;
};

static int push_id(struct idbuf *b, uint32_t id, struct err *e)
{
    if (b->n == b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 256;
        uint32_t *v = realloc(b->v, cap * sizeof *v);
        if (!v)
            return err_set(e, ERR_NOMEM, "cannot allocate %zu token ids", cap);
        b->v = v;
        b->cap = cap;
    }
    b->v[b->n++] = id;
    return ERR_OK;
}

/* Unicode White_Space (Rust's char::is_whitespace, regex \s). */
static bool is_space(uint32_t c)
{
    return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

struct sym {
    uint32_t id, len;
    int32_t prev, next;
};

/* A character's id, remembered: key the character's bytes + 1 (0: empty). */
#define CHAR_CACHE 4096

struct scratch {
    struct sym *sym;
    uint64_t *heap;
    size_t sym_cap, heap_cap;
    uint32_t char_key[CHAR_CACHE], char_id[CHAR_CACHE];
    char *norm[2];
    size_t norm_cap[2];
};

/* The merge queue: a 4-ary min-heap of rank << 32 | position (lowest rank,
 * then leftmost: HF's order); the merged id is merge_id[rank]. The four slots
 * after the last entry hold UINT64_MAX, so that the least of a node's four
 * children is found without branches. */
static void sift_down(uint64_t *h, size_t n, size_t i)
{
    uint64_t v = h[i];
    for (size_t c; (c = 4 * i + 1) < n;) {
        size_t a = c + (h[c + 1] < h[c]), b = c + 2 + (h[c + 3] < h[c + 2]);
        size_t best = h[b] < h[a] ? b : a;
        if (h[best] >= v)
            break;
        h[i] = h[best];
        i = best;
    }
    h[i] = v;
}

static void heap_push(uint64_t *h, size_t *n, uint64_t v)
{
    size_t i = (*n)++;
    h[*n + 3] = UINT64_MAX;
    while (i && v < h[(i - 1) / 4]) {
        h[i] = h[(i - 1) / 4];
        i = (i - 1) / 4;
    }
    h[i] = v;
}

static uint64_t heap_pop(uint64_t *h, size_t *n)
{
    uint64_t top = h[0];
    h[0] = h[--*n];
    h[*n] = UINT64_MAX;
    if (*n)
        sift_down(h, *n, 0);
    return top;
}

static int grow(void **p, size_t *cap, size_t need, size_t elem, struct err *e)
{
    if (need <= *cap)
        return ERR_OK;
    size_t n = need < 2 * *cap ? 2 * *cap : need;
    void *q = realloc(*p, n * elem);
    if (!q)
        return err_set(e, ERR_NOMEM, "cannot allocate %zu bytes to encode", n * elem);
    *p = q;
    *cap = n;
    return ERR_OK;
}

static void add_sym(struct sym *s, size_t *n, uint32_t id, uint32_t len)
{
    s[*n] = (struct sym){id, len, (int32_t)*n - 1, -1};
    if (*n)
        s[*n - 1].next = (int32_t)*n;
    (*n)++;
}

/* The queue entry of symbol pos and the one after it, false when the pair does not merge. */
static bool pair_entry(const struct tokenizer *t, const struct sym *s, size_t pos, uint64_t *entry)
{
    uint32_t rank = pair_rank(t, s[pos].id, s[s[pos].next].id);
    *entry = (uint64_t)rank << 32 | pos;
    return rank != TOK_NONE;
}

/* HF's Word::merge_all over symbols s[0, n): their ids appended to out. */
static int merge_all(const struct tokenizer *t, struct sym *s, size_t n, struct scratch *sc, struct idbuf *out,
                     struct err *e)
{
    if (grow((void **)&sc->heap, &sc->heap_cap, 3 * n + 4, sizeof *sc->heap, e))
        return e->code;
    if (n)
        s[n - 1].next = -1;
    uint64_t *h = sc->heap, entry;
    size_t nh = 0;
    for (size_t i = 0; i + 1 < n; i++)
        if (pair_entry(t, s, i, &entry))
            h[nh++] = entry;
    memset(h + nh, 0xff, 4 * sizeof *h);
    for (size_t i = nh / 4 + 1; i-- > 0;) /* heapify */
        if (i < nh)
            sift_down(h, nh, i);
    while (nh) {
        uint64_t top = heap_pop(h, &nh);
        size_t pos = (uint32_t)top;
        uint32_t rank = (uint32_t)(top >> 32), id = t->merge_id[rank];
        struct sym *a = &s[pos];
        if (!a->len || a->next < 0)
            continue;
        struct sym *b = &s[a->next];
        uint32_t now = pair_rank(t, a->id, b->id);
        if (now == TOK_NONE || (now != rank && t->merge_id[now] != id))
            continue; /* stale (HF compares the merged id) */
        a->id = id;
        a->len += b->len;
        a->next = b->next;
        b->len = 0;
        if (a->next >= 0)
            s[a->next].prev = (int32_t)pos;
        if (a->prev >= 0 && pair_entry(t, s, (size_t)a->prev, &entry))
            heap_push(h, &nh, entry);
        if (a->next >= 0 && pair_entry(t, s, pos, &entry))
            heap_push(h, &nh, entry);
    }
    for (size_t i = 0; i < n; i++)
        if (s[i].len && push_id(out, s[i].id, e))
            return e->code;
    return ERR_OK;
}

/* Whether no merge can join symbols `left` and `right` (adjacent): the last
 * character of the one and the first of the other are adjacent in no piece.
 * Every symbol a merge makes is a piece that holds both its parts whole, so a
 * symbol across this cut would hold that pair. */
static bool uncrossable(const struct tokenizer *t, uint32_t left, uint32_t right)
{
    const struct tok_piece *l = &t->piece[left], *r = &t->piece[right];
    if (!l->len || !r->len)
        return false;
    const uint8_t *end = (const uint8_t *)t->pool + l->off + l->len;
    size_t back = 1, cl;
    while (back < l->len && (end[-back] & 0xC0) == 0x80)
        back++;
    uint64_t bit = junction_bit(utf8_cp(end - back, &cl), utf8_cp((const uint8_t *)t->pool + r->off, &cl));
    return !(t->junction[bit >> 6] >> (bit & 63) & 1);
}

/* A long word is merged in parts of at least BPE_PART symbols, cut where no
 * merge can cross (uncrossable): no pair across a cut is ever in the queue, so
 * HF's queue over the whole word pops each part's entries in the order the
 * part's own queue does, and the merges are the same. A part's queue and
 * symbols stay in L1, and the time is linear in the word's length where cuts
 * come (prose: before each '▁'); a word without one is a single part. */
#define BPE_PART 512

/* HF's BPE::merge_word and Word::merge_all over one word. */
static int bpe_word(const struct tokenizer *t, const char *w, size_t len, struct scratch *sc, struct idbuf *out,
                    struct err *e)
{
    if (t->ignore_merges) {
        uint32_t id = tok_lookup(t, w, len);
        if (id != TOK_NONE)
            return push_id(out, id, e);
    }
    size_t n = 0;
    uint32_t unk_len = 0; /* a pending <unk> of this many bytes */
    for (size_t i = 0; i < len;) {
        if (n + 5 > sc->sym_cap && grow((void **)&sc->sym, &sc->sym_cap, n + 5, sizeof *sc->sym, e))
            return e->code;
        struct sym *s = sc->sym;
        uint8_t c = (uint8_t)w[i];
        size_t cl = utf8_len(c);
        uint32_t id;
        if (cl == 1) {
            id = t->ascii_id[c];
        } else {
            uint32_t key = 0;
            memcpy(&key, w + i, cl);
            key += 1; /* never 0: a character of 2 to 4 bytes has a non-zero lead byte */
            size_t slot = mix64(key) & (CHAR_CACHE - 1);
            if (sc->char_key[slot] != key) {
                sc->char_key[slot] = key;
                sc->char_id[slot] = tok_lookup(t, w + i, cl);
            }
            id = sc->char_id[slot];
        }
        if (id != TOK_NONE) {
            if (unk_len)
                add_sym(s, &n, t->unk_id, unk_len), unk_len = 0;
            add_sym(s, &n, id, (uint32_t)cl);
        } else {
            bool bytes = t->byte_fallback;
            for (size_t k = 0; bytes && k < cl; k++)
                bytes = t->byte_id[(uint8_t)w[i + k]] != TOK_NONE;
            if (bytes) {
                for (size_t k = 0; k < cl; k++)
                    add_sym(s, &n, t->byte_id[(uint8_t)w[i + k]], 1);
            } else if (t->unk_id != TOK_NONE) {
                if (unk_len && !t->fuse_unk)
                    add_sym(s, &n, t->unk_id, unk_len), unk_len = 0;
                unk_len += (uint32_t)cl;
            }
        }
        i += cl;
        if (n > BPE_PART && t->junction && uncrossable(t, s[n - 2].id, s[n - 1].id)) {
            struct sym last = s[n - 1];
            if (merge_all(t, s, n - 1, sc, out, e))
                return e->code;
            s[0] = (struct sym){last.id, last.len, -1, -1};
            n = 1;
        }
    }
    if (unk_len) {
        if (n + 1 > sc->sym_cap && grow((void **)&sc->sym, &sc->sym_cap, n + 1, sizeof *sc->sym, e))
            return e->code;
        add_sym(sc->sym, &n, t->unk_id, unk_len);
    }
    return merge_all(t, sc->sym, n, sc, out, e);
}

/* The text between added tokens: normalizer, pre-tokenizer, BPE. */
static int encode_segment(const struct tokenizer *t, const char *text, size_t len, struct scratch *sc,
                          struct idbuf *out, struct err *e)
{
    const char *cur = text;
    size_t cur_len = len;
    for (size_t r = 0; r < t->n_replace; r++) {
        const struct tok_replace *rp = &t->replace[r];
        int dst = (int)(r & 1);
        uint64_t cap;
        if (!ck_mul_u64(cur_len / rp->from_len + 1, rp->to_len, &cap) || !ck_add_u64(cap, cur_len + 1, &cap) ||
            cap > 8ull * TOK_MAX_TEXT)
            return err_set(e, ERR_RANGE, "%s: the normalized text would exceed %u bytes", t->name, 8 * TOK_MAX_TEXT);
        if (grow((void **)&sc->norm[dst], &sc->norm_cap[dst], (size_t)cap, 1, e))
            return e->code;
        char *o = sc->norm[dst];
        size_t on = 0;
        for (size_t i = 0; i < cur_len;) {
            const char *hit = rp->from_len <= cur_len - i ? memmem(cur + i, cur_len - i, rp->from, rp->from_len) : NULL;
            size_t keep = hit ? (size_t)(hit - (cur + i)) : cur_len - i;
            memcpy(o + on, cur + i, keep);
            on += keep;
            i += keep;
            if (!hit)
                break;
            memcpy(o + on, rp->to, rp->to_len);
            on += rp->to_len;
            i += rp->from_len;
        }
        cur = o;
        cur_len = on;
    }
    /* Split(pattern, MergedWithPrevious): each word ends after a match */
    size_t start = 0;
    while (start < cur_len) {
        const char *hit = t->split && t->split_len <= cur_len - start
                              ? memmem(cur + start, cur_len - start, t->split, t->split_len)
                              : NULL;
        size_t end = hit ? (size_t)(hit - cur) + t->split_len : cur_len;
        if (bpe_word(t, cur + start, end - start, sc, out, e))
            return e->code;
        start = end;
    }
    return ERR_OK;
}

/* The longest added token at text[pos] (index + 1 into t->added, 0: none), its length in *mlen. */
static uint32_t match_added(const struct tokenizer *t, const char *text, size_t len, size_t pos, size_t *mlen)
{
    uint8_t c = (uint8_t)text[pos];
    if (!(t->added_lead[c >> 6] >> (c & 63) & 1))
        return 0;
    uint64_t node = 0;
    uint32_t best = 0;
    for (size_t i = pos; i < len; i++) {
        if (!map_get(&t->trie, node << 8 | (uint8_t)text[i], &node))
            break;
        if (t->node_added[node]) {
            best = t->node_added[node];
            *mlen = i + 1 - pos;
        }
    }
    return best;
}

int tok_encode(const struct tokenizer *t, const char *text, size_t len, bool add_special, uint32_t **ids, size_t *n,
               struct err *e)
{
    *ids = NULL;
    *n = 0;
    if (len > TOK_MAX_TEXT)
        return err_set(e, ERR_RANGE, "text of %zu bytes: at most %u bytes are encoded", len, TOK_MAX_TEXT);
    bool nul;
    size_t bad = utf8_check((const uint8_t *)text, len, false, &nul);
    if (bad < len)
        return nul ? err_set(e, ERR_FORMAT, "text byte %zu: a NUL byte (text must not hold NUL)", bad)
                   : err_set(e, ERR_FORMAT, "text byte %zu: 0x%02X is not valid UTF-8", bad, (uint8_t)text[bad]);
    struct idbuf out = {0};
    struct scratch sc = {0};
    int rc = ERR_OK;
    for (size_t i = 0; add_special && !rc && i < t->n_prefix; i++)
        rc = push_id(&out, t->prefix[i], e);
    size_t start_offset = 0, pos = 0;
    while (!rc && pos < len) {
        size_t mlen = 0;
        uint32_t a = t->n_added ? match_added(t, text, len, pos, &mlen) : 0;
        if (!a) {
            pos += utf8_len((uint8_t)text[pos]);
            continue;
        }
        const struct tok_added *ad = &t->added[a - 1];
        size_t start = pos, stop = pos + mlen;
        if (ad->lstrip) { /* HF: back over the whitespace before, not into the previous match */
            while (start > start_offset) {
                size_t p = start - 1, cl;
                while (p > start_offset && ((uint8_t)text[p] & 0xC0) == 0x80)
                    p--;
                if (!is_space(utf8_cp((const uint8_t *)text + p, &cl)))
                    break;
                start = p;
            }
        }
        if (ad->rstrip) {
            size_t cl;
            while (stop < len && is_space(utf8_cp((const uint8_t *)text + stop, &cl)))
                stop += cl;
        }
        if (start_offset < start)
            rc = encode_segment(t, text + start_offset, start - start_offset, &sc, &out, e);
        if (!rc)
            rc = push_id(&out, ad->id, e);
        start_offset = pos = stop;
    }
    if (!rc && start_offset < len)
        rc = encode_segment(t, text + start_offset, len - start_offset, &sc, &out, e);
    for (size_t i = 0; add_special && !rc && i < t->n_suffix; i++)
        rc = push_id(&out, t->suffix[i], e);
    free(sc.sym);
    free(sc.heap);
    free(sc.norm[0]);
    free(sc.norm[1]);
    if (rc) {
        free(out.v);
        return rc;
    }
    *ids = out.v;
    *n = out.n;
    return ERR_OK;
}

/* ---- decode ---- */

struct str {
    char *s;
    size_t n;
};

static void strs_free(struct str *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i].s);
    free(v);
}

static int str_set(struct str *d, const char *s, size_t n, struct err *e)
{
    char *p = malloc(n + 1);
    if (!p)
        return err_set(e, ERR_NOMEM, "cannot allocate %zu bytes to decode", n + 1);
    memcpy(p, s, n);
    p[n] = 0;
    free(d->s);
    d->s = p;
    d->n = n;
    return ERR_OK;
}

static int str_replace(struct str *d, const char *from, size_t fn, const char *to, size_t tn, struct err *e)
{
    size_t hits = 0;
    for (const char *p = d->s; (size_t)(p - d->s) + fn <= d->n && (p = memmem(p, d->n - (size_t)(p - d->s), from, fn));
         p += fn)
        hits++;
    if (!hits)
        return ERR_OK;
    size_t n = d->n - hits * fn + hits * tn;
    char *o = malloc(n + 1);
    if (!o)
        return err_set(e, ERR_NOMEM, "cannot allocate %zu bytes to decode", n + 1);
    size_t on = 0, i = 0;
    while (i < d->n) {
        const char *hit = fn <= d->n - i ? memmem(d->s + i, d->n - i, from, fn) : NULL;
        size_t keep = hit ? (size_t)(hit - (d->s + i)) : d->n - i;
        memcpy(o + on, d->s + i, keep);
        on += keep;
        i += keep;
        if (!hit)
            break;
        memcpy(o + on, to, tn);
        on += tn;
        i += fn;
    }
    o[on] = 0;
    free(d->s);
    d->s = o;
    d->n = on;
    return ERR_OK;
}

static int hexval(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

static bool is_byte_piece(const struct str *d)
{
    return d->n == 6 && !memcmp(d->s, "<0x", 3) && d->s[5] == '>' && hexval(d->s[3]) >= 0 && hexval(d->s[4]) >= 0;
}

/* HF's ByteFallback: runs of <0xXX> become their bytes when those are UTF-8,
 * else one U+FFFD per byte. Rewrites v[0, *n) in place (fewer entries; the
 * rest zeroed). */
static int byte_fallback(struct str *v, size_t *n, struct err *e)
{
    size_t o = 0, i = 0;
    while (i < *n) {
        size_t j = i;
        while (j < *n && is_byte_piece(&v[j]))
            j++;
        struct str r = {0};
        if (j > i) {
            size_t nb = j - i;
            char *bytes = malloc(3 * nb + 1);
            if (!bytes)
                return err_set(e, ERR_NOMEM, "cannot allocate %zu bytes to decode", 3 * nb + 1);
            for (size_t k = 0; k < nb; k++)
                bytes[k] = (char)(hexval(v[i + k].s[3]) << 4 | hexval(v[i + k].s[4]));
            bool nul;
            if (utf8_check((const uint8_t *)bytes, nb, true, &nul) != nb) {
                for (size_t k = 0; k < nb; k++)
                    memcpy(bytes + 3 * k, "\xEF\xBF\xBD", 3);
                nb *= 3;
            }
            bytes[nb] = 0;
            r = (struct str){bytes, nb};
        } else {
            r = v[i];
            v[i] = (struct str){0};
            j = i + 1;
        }
        for (size_t k = i; k < j; k++) {
            free(v[k].s);
            v[k] = (struct str){0};
        }
        v[o++] = r;
        i = j;
    }
    *n = o;
    return ERR_OK;
}

/* HF's Strip: up to `start` leading and `stop` trailing copies of the
 * character cut, then (as HF computes it) at most byte length − both cuts
 * characters kept. */
static int strip(struct str *d, const struct tok_decoder *dec, struct err *e)
{
    size_t a = 0, cut_start = 0, cut_stop = 0, b = d->n, cl = dec->content_len;
    while (cut_start < dec->start && d->n - a >= cl && !memcmp(d->s + a, dec->content, cl))
        a += cl, cut_start++;
    while (cut_stop < dec->stop && b >= cl && !memcmp(d->s + b - cl, dec->content, cl))
        b -= cl, cut_stop++;
    size_t keep = cut_start + cut_stop <= d->n ? d->n - cut_start - cut_stop : SIZE_MAX, end = a;
    for (size_t k = 0; k < keep && end < d->n; k++)
        end += utf8_len((uint8_t)d->s[end]);
    return str_set(d, d->s + a, end - a, e);
}

int tok_decode(const struct tokenizer *t, const uint32_t *ids, size_t n, bool skip_special, char **text, size_t *len,
               struct err *e)
{
    *text = NULL;
    *len = 0;
    struct str *v = calloc(n ? n : 1, sizeof *v);
    if (!v)
        return err_set(e, ERR_NOMEM, "cannot allocate %zu tokens to decode", n);
    size_t m = 0;
    int rc = ERR_OK;
    for (size_t i = 0; i < n && !rc; i++) {
        size_t pl;
        const char *p = tok_piece(t, ids[i], &pl);
        if (!p)
            rc = err_set(e, ERR_RANGE, "token %zu: id %u is not in the vocabulary (%u ids)", i, ids[i], t->n_ids);
        else if (!(skip_special && t->piece[ids[i]].special))
            rc = str_set(&v[m++], p, pl, e);
    }
    for (size_t d = 0; d < t->n_dec && !rc; d++) {
        const struct tok_decoder *dec = &t->dec[d];
        if (dec->kind == TOK_DEC_BYTE_FALLBACK) {
            rc = byte_fallback(v, &m, e);
        } else if (dec->kind == TOK_DEC_FUSE && m) {
            size_t total = 0;
            for (size_t i = 0; i < m; i++)
                total += v[i].n;
            char *all = malloc(total + 1);
            if (!all) {
                rc = err_set(e, ERR_NOMEM, "cannot allocate %zu bytes to decode", total + 1);
                break;
            }
            size_t o = 0;
            for (size_t i = 0; i < m; i++) {
                memcpy(all + o, v[i].s, v[i].n);
                o += v[i].n;
                free(v[i].s);
                v[i] = (struct str){0};
            }
            all[o] = 0;
            v[0] = (struct str){all, o};
            m = 1;
        } else if (dec->kind != TOK_DEC_FUSE) {
            for (size_t i = 0; i < m && !rc; i++)
                rc = dec->kind == TOK_DEC_REPLACE
                         ? str_replace(&v[i], dec->pattern, dec->pattern_len, dec->content, dec->content_len, e)
                         : strip(&v[i], dec, e);
        }
    }
    /* the decoded tokens joined: by nothing, or by a space when there is no decoder (HF) */
    size_t total = 0, sep = t->n_dec ? 0 : 1;
    for (size_t i = 0; i < m; i++)
        total += v[i].n + sep;
    char *o = rc ? NULL : malloc(total + 1);
    if (!rc && !o)
        rc = err_set(e, ERR_NOMEM, "cannot allocate %zu bytes to decode", total + 1);
    if (!rc) {
        size_t k = 0;
        for (size_t i = 0; i < m; i++) {
            if (sep && i)
                o[k++] = ' ';
            memcpy(o + k, v[i].s, v[i].n);
            k += v[i].n;
        }
        o[k] = 0;
        *text = o;
        *len = k;
    }
    strs_free(v, n ? n : 1);
    return rc;
}
