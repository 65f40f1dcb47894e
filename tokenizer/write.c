/* write.c - a loaded tokenizer as a HF tokenizer.json (tok_write_json):
 * the tables of internal.h back into the components json.c reads, in HF's
 * key order, through json-c. */
#include <json-c/json.h>
#include <stdlib.h>
#include <string.h>

#include "core/text.h"
#include "tokenizer/internal.h"

static bool valid_utf8(const char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        int l = text_utf8_len((const unsigned char *)s + i, n - i);
        if (l <= 0 || !s[i])
            return false;
        i += (size_t)l;
    }
    return true;
}

static struct json_object *str(const char *s, size_t n)
{
    return json_object_new_string_len(s, (int)n);
}

/* A piece as JSON text allows it (UTF-8 without NUL: json-c keys are C strings). */
static int piece(const struct tokenizer *t, uint32_t id, const char **s, size_t *n, struct err *e)
{
    *s = tok_piece(t, id, n);
    if (*s && !valid_utf8(*s, *n))
        return err_set(e, ERR_UNSUPPORTED, "%s: token %u is not UTF-8 text without NUL: tokenizer.json cannot hold it",
                       t->name, id);
    return ERR_OK;
}

/* Adds s[0, n) (UTF-8 without NUL) as a key of o: json-c keys are C strings. */
static void add_key(struct json_object *o, const char *s, size_t n, struct json_object *v, unsigned opts)
{
    char key[TOK_MAX_PIECE + 1];
    memcpy(key, s, n);
    key[n] = 0;
    json_object_object_add_ex(o, key, v, opts);
}

static struct json_object *pattern(const char *s, size_t n)
{
    struct json_object *p = json_object_new_object();
    json_object_object_add(p, "String", str(s, n));
    return p;
}

static struct json_object *typed(const char *type)
{
    struct json_object *o = json_object_new_object();
    json_object_object_add(o, "type", json_object_new_string(type));
    return o;
}

/* One component, or a Sequence of them under `key`, or null. */
static struct json_object *sequence(struct json_object **items, size_t n, const char *key)
{
    if (n == 0)
        return NULL;
    if (n == 1)
        return items[0];
    struct json_object *o = typed("Sequence"), *a = json_object_new_array();
    for (size_t i = 0; i < n; i++)
        json_object_array_add(a, items[i]);
    json_object_object_add(o, key, a);
    return o;
}

static struct json_object *normalizer(const struct tokenizer *t)
{
    struct json_object **v = calloc(t->n_replace ? t->n_replace : 1, sizeof *v);
    for (size_t i = 0; v && i < t->n_replace; i++) {
        v[i] = typed("Replace");
        json_object_object_add(v[i], "pattern", pattern(t->replace[i].from, t->replace[i].from_len));
        json_object_object_add(v[i], "content", str(t->replace[i].to, t->replace[i].to_len));
    }
    struct json_object *o = v ? sequence(v, t->n_replace, "normalizers") : NULL;
    free(v);
    return o;
}

static struct json_object *decoder(const struct tokenizer *t)
{
    struct json_object **v = calloc(t->n_dec ? t->n_dec : 1, sizeof *v);
    for (size_t i = 0; v && i < t->n_dec; i++) {
        const struct tok_decoder *d = &t->dec[i];
        static const char *const names[] = {"Replace", "ByteFallback", "Fuse", "Strip"};
        v[i] = typed(names[d->kind]);
        if (d->kind == TOK_DEC_REPLACE) {
            json_object_object_add(v[i], "pattern", pattern(d->pattern, d->pattern_len));
            json_object_object_add(v[i], "content", str(d->content, d->content_len));
        } else if (d->kind == TOK_DEC_STRIP) {
            json_object_object_add(v[i], "content", str(d->content, d->content_len));
            json_object_object_add(v[i], "start", json_object_new_int64((int64_t)d->start));
            json_object_object_add(v[i], "stop", json_object_new_int64((int64_t)d->stop));
        }
    }
    struct json_object *o = v ? sequence(v, t->n_dec, "decoders") : NULL;
    free(v);
    return o;
}

static struct json_object *pre_tokenizer(const struct tokenizer *t)
{
    if (!t->split)
        return NULL;
    struct json_object *o = typed("Split");
    json_object_object_add(o, "pattern", pattern(t->split, t->split_len));
    json_object_object_add(o, "behavior", json_object_new_string("MergedWithPrevious"));
    json_object_object_add(o, "invert", json_object_new_boolean(false));
    return o;
}

static void template_ids(const struct tokenizer *t, struct json_object *a, const uint32_t *ids, size_t n,
                         int type_id, struct json_object *special)
{
    for (size_t i = 0; i < n; i++) {
        size_t len;
        const char *s = tok_piece(t, ids[i], &len); /* tok_finish: every template id has a piece */
        struct json_object *item = json_object_new_object(), *st = json_object_new_object();
        json_object_object_add(st, "id", str(s, len));
        json_object_object_add(st, "type_id", json_object_new_int(type_id));
        json_object_object_add(item, "SpecialToken", st);
        json_object_array_add(a, item);
        struct json_object *sp = json_object_new_object(), *v = json_object_new_array(), *tk = json_object_new_array();
        json_object_object_add(sp, "id", str(s, len));
        json_object_array_add(v, json_object_new_int64(ids[i]));
        json_object_object_add(sp, "ids", v);
        json_object_array_add(tk, str(s, len));
        json_object_object_add(sp, "tokens", tk);
        add_key(special, s, len, sp, 0); /* the same token twice: one entry */
    }
}

static void sequence_item(struct json_object *a, const char *id, int type_id)
{
    struct json_object *item = json_object_new_object(), *sq = json_object_new_object();
    json_object_object_add(sq, "id", json_object_new_string(id));
    json_object_object_add(sq, "type_id", json_object_new_int(type_id));
    json_object_object_add(item, "Sequence", sq);
    json_object_array_add(a, item);
}

/* TemplateProcessing: prefix, $A, suffix (and for pairs the same again around $B, type 1 as Gemma's), or null. */
static struct json_object *post_processor(const struct tokenizer *t)
{
    if (!t->n_prefix && !t->n_suffix)
        return NULL;
    struct json_object *o = typed("TemplateProcessing"), *single = json_object_new_array(),
                       *pair = json_object_new_array(), *special = json_object_new_object();
    template_ids(t, single, t->prefix, t->n_prefix, 0, special);
    sequence_item(single, "A", 0);
    template_ids(t, single, t->suffix, t->n_suffix, 0, special);
    template_ids(t, pair, t->prefix, t->n_prefix, 0, special);
    sequence_item(pair, "A", 0);
    template_ids(t, pair, t->suffix, t->n_suffix, 0, special);
    template_ids(t, pair, t->prefix, t->n_prefix, 1, special);
    sequence_item(pair, "B", 1);
    template_ids(t, pair, t->suffix, t->n_suffix, 1, special);
    json_object_object_add(o, "single", single);
    json_object_object_add(o, "pair", pair);
    json_object_object_add(o, "special_tokens", special);
    return o;
}

static int cmp_added(const void *a, const void *b)
{
    uint32_t x = ((const struct tok_added *)a)->id, y = ((const struct tok_added *)b)->id;
    return x < y ? -1 : x > y;
}

static int added_tokens(const struct tokenizer *t, struct json_object **out, struct err *e)
{
    struct tok_added *v = malloc((t->n_added ? t->n_added : 1) * sizeof *v);
    if (!v)
        return err_set(e, ERR_NOMEM, "%s: cannot allocate %zu added tokens", t->name, t->n_added);
    memcpy(v, t->added, t->n_added * sizeof *v);
    qsort(v, t->n_added, sizeof *v, cmp_added); /* HF lists them by id */
    *out = json_object_new_array();
    int rc = ERR_OK;
    for (size_t i = 0; rc == ERR_OK && i < t->n_added; i++) {
        const char *s;
        size_t n;
        if ((rc = piece(t, v[i].id, &s, &n, e)) != ERR_OK)
            break;
        struct json_object *a = json_object_new_object();
        json_object_object_add(a, "id", json_object_new_int64(v[i].id));
        json_object_object_add(a, "content", str(s, n));
        json_object_object_add(a, "single_word", json_object_new_boolean(false));
        json_object_object_add(a, "lstrip", json_object_new_boolean(v[i].lstrip));
        json_object_object_add(a, "rstrip", json_object_new_boolean(v[i].rstrip));
        json_object_object_add(a, "normalized", json_object_new_boolean(false)); /* matched in the raw text */
        json_object_object_add(a, "special", json_object_new_boolean(v[i].special));
        json_object_array_add(*out, a);
    }
    free(v);
    return rc;
}

struct merge {
    uint64_t rank;
    uint32_t a, b;
};

static int cmp_merge(const void *x, const void *y)
{
    uint64_t a = ((const struct merge *)x)->rank, b = ((const struct merge *)y)->rank;
    return a < b ? -1 : a > b;
}

/* The merges in rank order (a pair merged twice kept once, at its later rank, as HF reads it). */
static int merges(const struct tokenizer *t, struct json_object **out, struct err *e)
{
    struct merge *m = malloc((t->n_merges ? t->n_merges : 1) * sizeof *m);
    if (!m)
        return err_set(e, ERR_NOMEM, "%s: cannot allocate %zu merges", t->name, t->n_merges);
    size_t n = 0;
    for (size_t i = 0; i < t->pair_cap && n < t->n_merges; i++) {
        uint64_t s = t->pair[i]; /* left << 42 | right << 20 | rank + 1 */
        if (s)
            m[n++] = (struct merge){(s & 0xFFFFF) - 1, (uint32_t)(s >> 42), (uint32_t)(s >> 20) & 0x3FFFFF};
    }
    qsort(m, n, sizeof *m, cmp_merge);
    *out = json_object_new_array_ext((int)n);
    int rc = ERR_OK;
    for (size_t i = 0; rc == ERR_OK && i < n; i++) {
        const char *a, *b;
        size_t an, bn;
        if ((rc = piece(t, m[i].a, &a, &an, e)) == ERR_OK && (rc = piece(t, m[i].b, &b, &bn, e)) == ERR_OK) {
            struct json_object *pr = json_object_new_array_ext(2);
            json_object_array_add(pr, str(a, an));
            json_object_array_add(pr, str(b, bn));
            json_object_array_add(*out, pr);
        }
    }
    free(m);
    return rc;
}

static int model(const struct tokenizer *t, struct json_object **out, struct err *e)
{
    struct json_object *o = typed("BPE"), *vocab = json_object_new_object(), *mg = NULL;
    *out = o;
    json_object_object_add(o, "dropout", NULL);
    const char *unk = NULL;
    size_t unk_len = 0;
    int rc = t->unk_id != TOK_NONE ? piece(t, t->unk_id, &unk, &unk_len, e) : ERR_OK;
    json_object_object_add(o, "unk_token", unk ? str(unk, unk_len) : NULL);
    json_object_object_add(o, "continuing_subword_prefix", NULL);
    json_object_object_add(o, "end_of_word_suffix", NULL);
    json_object_object_add(o, "fuse_unk", json_object_new_boolean(t->fuse_unk));
    json_object_object_add(o, "byte_fallback", json_object_new_boolean(t->byte_fallback));
    json_object_object_add(o, "ignore_merges", json_object_new_boolean(t->ignore_merges));
    json_object_object_add(o, "vocab", vocab);
    for (uint32_t id = 0; rc == ERR_OK && id < t->n_ids; id++) {
        const char *s;
        size_t n;
        if ((rc = piece(t, id, &s, &n, e)) == ERR_OK && s && tok_lookup(t, s, n) == id) /* in the model's vocabulary */
            add_key(vocab, s, n, json_object_new_int64(id), JSON_C_OBJECT_ADD_KEY_IS_NEW);
    }
    if (rc == ERR_OK)
        rc = merges(t, &mg, e);
    json_object_object_add(o, "merges", mg);
    return rc;
}

int tok_write_json(const struct tokenizer *t, char **out, size_t *len, struct err *e)
{
    *out = NULL;
    *len = 0;
    struct json_object *root = json_object_new_object(), *added = NULL, *m = NULL;
    json_object_object_add(root, "version", json_object_new_string("1.0"));
    json_object_object_add(root, "truncation", NULL);
    json_object_object_add(root, "padding", NULL);
    int rc = added_tokens(t, &added, e);
    json_object_object_add(root, "added_tokens", added);
    json_object_object_add(root, "normalizer", normalizer(t));
    json_object_object_add(root, "pre_tokenizer", pre_tokenizer(t));
    json_object_object_add(root, "post_processor", post_processor(t));
    json_object_object_add(root, "decoder", decoder(t));
    if (rc == ERR_OK)
        rc = model(t, &m, e);
    json_object_object_add(root, "model", m);
    if (rc == ERR_OK) {
        size_t n;
        const char *s = json_object_to_json_string_length(root, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE,
                                                          &n);
        if (!s || !(*out = malloc(n + 1))) {
            rc = err_set(e, ERR_NOMEM, "%s: cannot write tokenizer.json", t->name);
        } else {
            memcpy(*out, s, n + 1);
            *len = n;
        }
    }
    json_object_put(root);
    return rc;
}
