/* json.c - tokenizer.json (HF tokenizers' serialization) into the tables of
 * internal.h, with a pull parser of its own: json-c would build ~1.9 million
 * objects for Gemma's 33 MB file. The parser is strict JSON (RFC 8259): UTF-8
 * validated, escapes decoded (surrogate pairs paired), nesting at most
 * JSONX_MAX_DEPTH, nothing after the value. A component object is read in two
 * passes: its "type" first, wherever it stands, then its fields. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fileio.h"
#include "core/jsonx.h"
#include "tokenizer/internal.h"

struct jp {
    const char *s;
    size_t len, pos;
    int depth;
    const char *name;
    struct err *e;
    char *buf[2];       /* decoded strings: two may be live at once */
    size_t cap[2];
    size_t memo_at[4], memo_end[4]; /* values of a MiB or more skipped before: where each starts and ends */
};

static int fail(struct jp *p, const char *what)
{
    return err_set(p->e, ERR_FORMAT, "%s: byte %zu: %s", p->name, p->pos, what);
}

static void ws(struct jp *p)
{
    while (p->pos < p->len && (p->s[p->pos] == ' ' || p->s[p->pos] == '\t' || p->s[p->pos] == '\n' || p->s[p->pos] == '\r'))
        p->pos++;
}

static char peek(struct jp *p)
{
    ws(p);
    return p->pos < p->len ? p->s[p->pos] : 0;
}

static int expect(struct jp *p, char c)
{
    if (peek(p) != c) {
        char m[40];
        snprintf(m, sizeof m, "expected '%c'", c);
        return fail(p, m);
    }
    p->pos++;
    return ERR_OK;
}

static int hex4(struct jp *p, uint32_t *v)
{
    if (p->len - p->pos < 4)
        return fail(p, "truncated \\u escape");
    *v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p->s[p->pos++];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0)
            return fail(p, "bad \\u escape");
        *v = *v << 4 | (uint32_t)d;
    }
    return ERR_OK;
}

/* A string into p->buf[slot] (NUL-terminated; may hold NUL bytes from \u0000). */
static int jstring(struct jp *p, int slot, const char **out, size_t *n)
{
    if (expect(p, '"'))
        return p->e->code;
    size_t o = 0;
    for (;;) {
        if (p->cap[slot] < o + 8) {
            size_t cap = p->cap[slot] ? 2 * p->cap[slot] : 256;
            char *b = realloc(p->buf[slot], cap);
            if (!b)
                return err_set(p->e, ERR_NOMEM, "%s: cannot allocate a string of %zu bytes", p->name, cap);
            p->buf[slot] = b;
            p->cap[slot] = cap;
        }
        if (p->pos >= p->len)
            return fail(p, "unterminated string");
        uint8_t c = (uint8_t)p->s[p->pos];
        char *b = p->buf[slot];
        if (c == '"') {
            p->pos++;
            break;
        }
        if (c < 0x20)
            return fail(p, "a control character in a string");
        if (c == '\\') {
            if (++p->pos >= p->len)
                return fail(p, "unterminated string");
            char x = p->s[p->pos++];
            const char *simple = strchr("\"\\/bfnrt", x);
            if (x && simple) {
                b[o++] = "\"\\/\b\f\n\r\t"[simple - "\"\\/bfnrt"];
                continue;
            }
            if (x != 'u')
                return fail(p, "bad escape");
            uint32_t cp, lo;
            if (hex4(p, &cp))
                return p->e->code;
            if (cp >= 0xDC00 && cp <= 0xDFFF)
                return fail(p, "a lone low surrogate");
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                if (p->len - p->pos < 6 || p->s[p->pos] != '\\' || p->s[p->pos + 1] != 'u')
                    return fail(p, "a lone high surrogate");
                p->pos += 2;
                if (hex4(p, &lo))
                    return p->e->code;
                if (lo < 0xDC00 || lo > 0xDFFF)
                    return fail(p, "a high surrogate without its low surrogate");
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            }
            if (cp < 0x80) {
                b[o++] = (char)cp;
            } else if (cp < 0x800) {
                b[o++] = (char)(0xC0 | cp >> 6);
                b[o++] = (char)(0x80 | (cp & 0x3F));
            } else if (cp < 0x10000) {
                b[o++] = (char)(0xE0 | cp >> 12);
                b[o++] = (char)(0x80 | (cp >> 6 & 0x3F));
                b[o++] = (char)(0x80 | (cp & 0x3F));
            } else {
                b[o++] = (char)(0xF0 | cp >> 18);
                b[o++] = (char)(0x80 | (cp >> 12 & 0x3F));
                b[o++] = (char)(0x80 | (cp >> 6 & 0x3F));
                b[o++] = (char)(0x80 | (cp & 0x3F));
            }
            continue;
        }
        if (c < 0x80) {
            b[o++] = (char)c;
            p->pos++;
            continue;
        }
        size_t cl = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
        if (!cl || p->len - p->pos < cl)
            return fail(p, "invalid UTF-8");
        uint32_t cp = c & (0x7F >> cl);
        for (size_t k = 1; k < cl; k++) {
            uint8_t d = (uint8_t)p->s[p->pos + k];
            if ((d & 0xC0) != 0x80)
                return fail(p, "invalid UTF-8");
            cp = cp << 6 | (d & 0x3F);
        }
        if (cp < (cl == 2 ? 0x80u : cl == 3 ? 0x800u : 0x10000u) || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return fail(p, "invalid UTF-8");
        memcpy(b + o, p->s + p->pos, cl);
        o += cl;
        p->pos += cl;
    }
    p->buf[slot][o] = 0;
    *out = p->buf[slot];
    *n = o;
    return ERR_OK;
}

static int literal(struct jp *p, const char *lit)
{
    size_t n = strlen(lit);
    if (p->len - p->pos < n || memcmp(p->s + p->pos, lit, n))
        return fail(p, "invalid literal");
    p->pos += n;
    return ERR_OK;
}

static int number(struct jp *p, bool *integer, uint64_t *v)
{
    size_t st = p->pos;
    bool neg = p->pos < p->len && p->s[p->pos] == '-';
    if (neg)
        p->pos++;
    if (p->pos >= p->len || p->s[p->pos] < '0' || p->s[p->pos] > '9')
        return fail(p, "invalid number");
    bool lead0 = p->s[p->pos] == '0', big = false;
    uint64_t x = 0;
    size_t digits = 0;
    while (p->pos < p->len && p->s[p->pos] >= '0' && p->s[p->pos] <= '9') {
        if (x > (UINT64_MAX - 9) / 10)
            big = true;
        else
            x = x * 10 + (uint64_t)(p->s[p->pos] - '0');
        p->pos++, digits++;
    }
    if (lead0 && digits > 1) {
        p->pos = st;
        return fail(p, "a number with a leading zero");
    }
    *integer = !neg && !big;
    if (p->pos < p->len && p->s[p->pos] == '.') {
        p->pos++;
        *integer = false;
        size_t d = p->pos;
        while (p->pos < p->len && p->s[p->pos] >= '0' && p->s[p->pos] <= '9')
            p->pos++;
        if (d == p->pos)
            return fail(p, "invalid number");
    }
    if (p->pos < p->len && (p->s[p->pos] == 'e' || p->s[p->pos] == 'E')) {
        p->pos++;
        *integer = false;
        if (p->pos < p->len && (p->s[p->pos] == '+' || p->s[p->pos] == '-'))
            p->pos++;
        size_t d = p->pos;
        while (p->pos < p->len && p->s[p->pos] >= '0' && p->s[p->pos] <= '9')
            p->pos++;
        if (d == p->pos)
            return fail(p, "invalid number");
    }
    *v = x;
    return ERR_OK;
}

/* Enters an object ('{') or an array ('['), one level deeper. */
static int begin(struct jp *p, char open)
{
    if (expect(p, open))
        return p->e->code;
    if (++p->depth > JSONX_MAX_DEPTH)
        return fail(p, "nested deeper than 32");
    return ERR_OK;
}

/* The next item of an array or object (closed by `close`), or *more =
 * false at its end. `first` says whether a comma may precede it. */
static int next_item(struct jp *p, char close, bool *first, bool *more)
{
    if (peek(p) == close) {
        p->pos++;
        p->depth--;
        *more = false;
        return ERR_OK;
    }
    if (!*first && expect(p, ','))
        return p->e->code;
    *first = false;
    *more = true;
    return ERR_OK;
}

/* The next key of an object (into buf[0]), or *more = false at its end. */
static int obj_key(struct jp *p, bool *first, bool *more, const char **key, size_t *n)
{
    int rc = next_item(p, '}', first, more);
    if (rc != ERR_OK || !*more)
        return rc;
    if (jstring(p, 0, key, n) || expect(p, ':'))
        return p->e->code;
    return ERR_OK;
}

static int arr_next(struct jp *p, bool *first, bool *more)
{
    return next_item(p, ']', first, more);
}

static int skip_value(struct jp *p)
{
    char c = peek(p);
    bool first = true, more = true, integer;
    const char *s;
    size_t n;
    uint64_t v;
    switch (c) {
    case '{':
        if (begin(p, '{'))
            return p->e->code;
        while (!obj_key(p, &first, &more, &s, &n) && more)
            if (skip_value(p))
                return p->e->code;
        return more ? (int)p->e->code : ERR_OK;
    case '[':
        if (begin(p, '['))
            return p->e->code;
        while (!arr_next(p, &first, &more) && more)
            if (skip_value(p))
                return p->e->code;
        return more ? (int)p->e->code : ERR_OK;
    case '"':
        return jstring(p, 1, &s, &n);
    case 't':
        return literal(p, "true");
    case 'f':
        return literal(p, "false");
    case 'n':
        return literal(p, "null");
    default:
        return number(p, &integer, &v);
    }
}

/* skip_value, once per large value: a component's type is found before its
 * fields are read, so the model's vocab and merges would be skipped twice. */
static int skip(struct jp *p)
{
    size_t at = (ws(p), p->pos);
    for (int i = 0; i < 4; i++) {
        if (p->memo_end[i] && p->memo_at[i] == at) {
            p->pos = p->memo_end[i];
            return ERR_OK;
        }
    }
    if (skip_value(p))
        return p->e->code;
    if (p->pos - at >= 1u << 20) {
        int i = 0;
        while (i < 3 && p->memo_end[i])
            i++;
        p->memo_at[i] = at;
        p->memo_end[i] = p->pos;
    }
    return ERR_OK;
}

static bool key_is(const char *k, size_t n, const char *want)
{
    return n == strlen(want) && !memcmp(k, want, n);
}

static bool null_next(struct jp *p)
{
    if (peek(p) != 'n')
        return false;
    return !literal(p, "null");
}

static int get_bool(struct jp *p, const char *field, bool *out)
{
    char c = peek(p);
    if (c == 't' || c == 'f') {
        *out = c == 't';
        return literal(p, *out ? "true" : "false");
    }
    return err_set(p->e, ERR_FORMAT, "%s: byte %zu: '%s' must be true or false", p->name, p->pos, field);
}

static int get_u64(struct jp *p, const char *field, uint64_t *out)
{
    bool integer;
    size_t at = (ws(p), p->pos);
    if (number(p, &integer, out))
        return p->e->code;
    if (!integer)
        return err_set(p->e, ERR_FORMAT, "%s: byte %zu: '%s' must be a non-negative integer", p->name, at, field);
    return ERR_OK;
}

/* A string value copied (malloc'ed) - for the few small strings kept across other reads. */
static int get_str_dup(struct jp *p, char **out, size_t *n)
{
    const char *s;
    if (jstring(p, 1, &s, n))
        return p->e->code;
    *out = malloc(*n + 1);
    if (!*out)
        return err_set(p->e, ERR_NOMEM, "%s: cannot allocate %zu bytes", p->name, *n + 1);
    memcpy(*out, s, *n + 1);
    return ERR_OK;
}

/* The "type" of the object that starts at p->pos (copied into type[cap]),
 * p->pos unchanged. */
static int obj_type(struct jp *p, const char *what, char *type, size_t cap)
{
    size_t at = p->pos;
    int depth = p->depth;
    bool first = true, more = true;
    const char *k;
    size_t n;
    type[0] = 0;
    if (peek(p) != '{')
        return err_set(p->e, ERR_FORMAT, "%s: byte %zu: %s must be an object or null", p->name, p->pos, what);
    if (begin(p, '{'))
        return p->e->code;
    while (!obj_key(p, &first, &more, &k, &n) && more) {
        if (key_is(k, n, "type")) {
            const char *s;
            size_t sn;
            if (peek(p) != '"' || jstring(p, 1, &s, &sn))
                return err_set(p->e, ERR_FORMAT, "%s: %s's type must be a string", p->name, what);
            snprintf(type, cap, "%.*s", (int)(sn < cap ? sn : cap - 1), s);
            if (sn >= cap || strlen(type) != sn)
                snprintf(type, cap, "?");
        } else if (skip(p)) {
            return p->e->code;
        }
    }
    if (more)
        return p->e->code;
    if (!type[0])
        return err_set(p->e, ERR_UNSUPPORTED, "%s: %s has no \"type\"", p->name, what);
    p->pos = at;
    p->depth = depth;
    return ERR_OK;
}

/* {"String": s}: the pattern of Replace and Split (a Regex is refused). */
static int pattern(struct jp *p, const char *what, char **out, size_t *n)
{
    bool first = true, more = true;
    const char *k;
    size_t kn;
    *out = NULL;
    if (peek(p) != '{' || begin(p, '{'))
        return err_set(p->e, ERR_FORMAT, "%s: %s's pattern must be an object", p->name, what);
    while (!obj_key(p, &first, &more, &k, &kn) && more) {
        if (!key_is(k, kn, "String") || *out) {
            free(*out);
            *out = NULL;
            return err_set(p->e, ERR_UNSUPPORTED, "%s: %s's pattern %.*s: only {\"String\": ...} is supported",
                           p->name, what, (int)(kn > 32 ? 32 : kn), k);
        }
        if (get_str_dup(p, out, n))
            return p->e->code;
    }
    if (more || !*out) {
        free(*out);
        *out = NULL;
        return more ? (int)p->e->code : err_set(p->e, ERR_FORMAT, "%s: %s has no pattern", p->name, what);
    }
    return ERR_OK;
}

/* Fields of a component object other than "type": each handled by `field`
 * (returning an error code; unknown keys refused). */
typedef int (*field_fn)(struct jp *p, void *ctx, const char *key, size_t n);

static int fields(struct jp *p, void *ctx, field_fn field)
{
    bool first = true, more = true;
    const char *k;
    size_t n;
    if (begin(p, '{'))
        return p->e->code;
    while (!obj_key(p, &first, &more, &k, &n) && more) {
        if (key_is(k, n, "type")) {
            if (skip(p))
                return p->e->code;
            continue;
        }
        char key[64];
        snprintf(key, sizeof key, "%.*s", (int)(n < sizeof key ? n : sizeof key - 1), k);
        if (field(p, ctx, key, n))
            return p->e->code;
    }
    return more ? (int)p->e->code : ERR_OK;
}

struct comp {
    struct tokenizer *t;
    const char *what;
    char *pat, *content;
    size_t pat_len, content_len;
    uint64_t start, stop;
};

static int unknown_field(struct jp *p, struct comp *c, const char *key)
{
    return err_set(p->e, ERR_UNSUPPORTED, "%s: %s: field '%s' is not supported", p->name, c->what, key);
}

static int replace_field(struct jp *p, void *ctx, const char *key, size_t n)
{
    struct comp *c = ctx;
    if (!strcmp(key, "pattern") && n == 7 && !c->pat)
        return pattern(p, c->what, &c->pat, &c->pat_len);
    if (!strcmp(key, "content") && n == 7 && !c->content)
        return peek(p) == '"' ? get_str_dup(p, &c->content, &c->content_len)
                              : err_set(p->e, ERR_FORMAT, "%s: %s's content must be a string", p->name, c->what);
    return unknown_field(p, c, key);
}

static int read_replace(struct jp *p, struct tokenizer *t, const char *what, bool decoder)
{
    struct comp c = {.t = t, .what = what};
    int rc = fields(p, &c, replace_field);
    if (!rc && (!c.pat || !c.content))
        rc = err_set(p->e, ERR_FORMAT, "%s: %s Replace needs a pattern and a content", p->name, what);
    if (!rc)
        rc = decoder ? tok_add_decoder(t, TOK_DEC_REPLACE, c.pat, c.pat_len, c.content, c.content_len, 0, 0, p->e)
                     : tok_add_replace(t, c.pat, c.pat_len, c.content, c.content_len, p->e);
    free(c.pat);
    free(c.content);
    return rc;
}

static int read_normalizer(struct jp *p, struct tokenizer *t);
static int read_decoder(struct jp *p, struct tokenizer *t);

static int seq_field(struct jp *p, void *ctx, const char *key, size_t n)
{
    struct comp *c = ctx;
    bool dec = !strcmp(c->what, "decoder");
    if (strcmp(key, dec ? "decoders" : "normalizers"))
        return unknown_field(p, c, key);
    bool first = true, more = true;
    if (begin(p, '['))
        return p->e->code;
    while (!arr_next(p, &first, &more) && more) {
        int rc;
        if (dec) {
            char type[32];
            rc = obj_type(p, "decoder", type, sizeof type);
            if (!rc && !strcmp(type, "Sequence"))
                rc = err_set(p->e, ERR_UNSUPPORTED, "%s: decoder Sequence inside a Sequence", p->name);
            if (!rc)
                rc = read_decoder(p, c->t);
        } else {
            rc = read_normalizer(p, c->t);
        }
        if (rc)
            return rc;
    }
    return more ? (int)p->e->code : ERR_OK;
}

static int read_normalizer(struct jp *p, struct tokenizer *t)
{
    char type[32];
    if (obj_type(p, "normalizer", type, sizeof type))
        return p->e->code;
    if (!strcmp(type, "Replace"))
        return read_replace(p, t, "normalizer", false);
    if (!strcmp(type, "Sequence")) {
        struct comp c = {.t = t, .what = "normalizer"};
        return fields(p, &c, seq_field);
    }
    return err_set(p->e, ERR_UNSUPPORTED, "%s: normalizer %s is not supported (Replace, Sequence)", p->name, type);
}

static int strip_field(struct jp *p, void *ctx, const char *key, size_t n)
{
    struct comp *c = ctx;
    if (!strcmp(key, "content") && !c->content)
        return peek(p) == '"' ? get_str_dup(p, &c->content, &c->content_len)
                              : err_set(p->e, ERR_FORMAT, "%s: decoder Strip's content must be a string", p->name);
    if (!strcmp(key, "start"))
        return get_u64(p, "start", &c->start);
    if (!strcmp(key, "stop"))
        return get_u64(p, "stop", &c->stop);
    return unknown_field(p, c, key);
}

static int no_field(struct jp *p, void *ctx, const char *key, size_t n)
{
    return unknown_field(p, ctx, key);
}

static int read_decoder(struct jp *p, struct tokenizer *t)
{
    char type[32];
    if (obj_type(p, "decoder", type, sizeof type))
        return p->e->code;
    struct comp c = {.t = t, .what = "decoder"};
    if (!strcmp(type, "Replace"))
        return read_replace(p, t, "decoder", true);
    if (!strcmp(type, "Sequence"))
        return fields(p, &c, seq_field);
    if (!strcmp(type, "ByteFallback") || !strcmp(type, "Fuse"))
        return fields(p, &c, no_field) ||
               tok_add_decoder(t, type[0] == 'B' ? TOK_DEC_BYTE_FALLBACK : TOK_DEC_FUSE, NULL, 0, NULL, 0, 0, 0, p->e)
                   ? p->e->code : ERR_OK;
    if (!strcmp(type, "Strip")) {
        int rc = fields(p, &c, strip_field);
        if (!rc && (!c.content || !c.content_len || c.content_len != (size_t)((uint8_t)c.content[0] < 0x80   ? 1
                                                                                 : (uint8_t)c.content[0] < 0xE0 ? 2
                                                                                 : (uint8_t)c.content[0] < 0xF0 ? 3
                                                                                                                : 4)))
            rc = err_set(p->e, ERR_FORMAT, "%s: decoder Strip's content must be one character", p->name);
        if (!rc)
            rc = tok_add_decoder(t, TOK_DEC_STRIP, NULL, 0, c.content, c.content_len, c.start, c.stop, p->e);
        free(c.content);
        return rc;
    }
    return err_set(p->e, ERR_UNSUPPORTED,
                   "%s: decoder %s is not supported (Replace, ByteFallback, Fuse, Strip, Sequence)", p->name, type);
}

static int split_field(struct jp *p, void *ctx, const char *key, size_t n)
{
    struct comp *c = ctx;
    if (!strcmp(key, "pattern") && !c->pat)
        return pattern(p, "pre_tokenizer Split", &c->pat, &c->pat_len);
    if (!strcmp(key, "behavior")) {
        const char *s;
        size_t sn;
        if (peek(p) != '"' || jstring(p, 1, &s, &sn))
            return err_set(p->e, ERR_FORMAT, "%s: pre_tokenizer Split's behavior must be a string", p->name);
        return key_is(s, sn, "MergedWithPrevious")
                   ? ERR_OK
                   : err_set(p->e, ERR_UNSUPPORTED, "%s: pre_tokenizer Split behavior %.*s is not supported "
                             "(MergedWithPrevious)", p->name, (int)(sn > 32 ? 32 : sn), s);
    }
    if (!strcmp(key, "invert")) {
        bool inv;
        if (get_bool(p, "invert", &inv))
            return p->e->code;
        return inv ? err_set(p->e, ERR_UNSUPPORTED, "%s: pre_tokenizer Split with invert true is not supported", p->name)
                   : ERR_OK;
    }
    return unknown_field(p, c, key);
}

static int read_pre_tokenizer(struct jp *p, struct tokenizer *t)
{
    char type[32];
    if (obj_type(p, "pre_tokenizer", type, sizeof type))
        return p->e->code;
    if (strcmp(type, "Split"))
        return err_set(p->e, ERR_UNSUPPORTED, "%s: pre_tokenizer %s is not supported (Split, null)", p->name, type);
    struct comp c = {.t = t, .what = "pre_tokenizer Split"};
    int rc = fields(p, &c, split_field);
    if (!rc && !c.pat)
        rc = err_set(p->e, ERR_FORMAT, "%s: pre_tokenizer Split has no pattern", p->name);
    if (!rc) {
        t->split = c.pat;
        t->split_len = c.pat_len;
    } else {
        free(c.pat);
    }
    return rc;
}

/* Positions of a component's fields read in a second pass. */
struct later {
    struct tokenizer *t;
    const char *what;
    size_t at[2];
    bool seen[2];
    const char *names[2];
};

static int later_field(struct jp *p, void *ctx, const char *key, size_t n)
{
    struct later *l = ctx;
    for (int i = 0; i < 2; i++) {
        if (!strcmp(key, l->names[i]) && !l->seen[i]) {
            l->seen[i] = true;
            l->at[i] = (ws(p), p->pos);
            return skip(p);
        }
    }
    if (!strcmp(l->what, "post_processor") && !strcmp(key, "pair"))
        return skip(p);
    return err_set(p->e, ERR_UNSUPPORTED, "%s: %s: field '%s' is not supported", p->name, l->what, key);
}

struct special {
    char *name;
    size_t name_len;
    uint32_t ids[64];
    size_t n;
};

static int special_entry(struct jp *p, struct special *sp)
{
    bool first = true, more = true, got = false;
    const char *k;
    size_t n;
    if (peek(p) != '{' || begin(p, '{'))
        return err_set(p->e, ERR_FORMAT, "%s: post_processor special token must be an object", p->name);
    while (!obj_key(p, &first, &more, &k, &n) && more) {
        if (!key_is(k, n, "ids")) {
            if (skip(p))
                return p->e->code;
            continue;
        }
        bool f2 = true, m2 = true;
        if (begin(p, '['))
            return p->e->code;
        got = true;
        while (!arr_next(p, &f2, &m2) && m2) {
            uint64_t id;
            if (get_u64(p, "ids", &id))
                return p->e->code;
            if (sp->n == 64 || id >= TOK_MAX_VOCAB)
                return err_set(p->e, ERR_UNSUPPORTED, "%s: post_processor special token ids: at most 64, below %u",
                               p->name, TOK_MAX_VOCAB);
            sp->ids[sp->n++] = (uint32_t)id;
        }
        if (m2)
            return p->e->code;
    }
    if (more)
        return p->e->code;
    return got ? ERR_OK : err_set(p->e, ERR_FORMAT, "%s: post_processor special token without ids", p->name);
}

static int read_template(struct jp *p, struct tokenizer *t, const struct special *sp, size_t nsp)
{
    bool first = true, more = true, seq = false;
    if (peek(p) != '[' || begin(p, '['))
        return err_set(p->e, ERR_FORMAT, "%s: post_processor's single must be a list", p->name);
    while (!arr_next(p, &first, &more) && more) {
        bool f2 = true, m2 = true;
        const char *k;
        size_t n;
        if (peek(p) != '{' || begin(p, '{'))
            return err_set(p->e, ERR_FORMAT, "%s: post_processor's single: items are objects", p->name);
        while (!obj_key(p, &f2, &m2, &k, &n) && m2) {
            bool is_seq = key_is(k, n, "Sequence");
            if (!is_seq && !key_is(k, n, "SpecialToken"))
                return err_set(p->e, ERR_UNSUPPORTED, "%s: post_processor item %.*s (SpecialToken, Sequence)", p->name,
                               (int)(n > 32 ? 32 : n), k);
            bool f3 = true, m3 = true, got = false;
            const char *k3, *s;
            size_t n3, sn;
            if (peek(p) != '{' || begin(p, '{'))
                return err_set(p->e, ERR_FORMAT, "%s: post_processor item must be an object", p->name);
            while (!obj_key(p, &f3, &m3, &k3, &n3) && m3) {
                if (key_is(k3, n3, "type_id")) {
                    uint64_t v;
                    if (get_u64(p, "type_id", &v))
                        return p->e->code;
                    continue;
                }
                if (!key_is(k3, n3, "id") || peek(p) != '"' || jstring(p, 1, &s, &sn))
                    return err_set(p->e, ERR_FORMAT, "%s: post_processor item: expected \"id\" and \"type_id\"", p->name);
                got = true;
                if (is_seq) {
                    if (!key_is(s, sn, "A") || seq)
                        return err_set(p->e, ERR_UNSUPPORTED, "%s: post_processor single: one Sequence A", p->name);
                    seq = true;
                    continue;
                }
                size_t i = 0;
                while (i < nsp && !(sp[i].name_len == sn && !memcmp(sp[i].name, s, sn)))
                    i++;
                if (i == nsp)
                    return err_set(p->e, ERR_FORMAT, "%s: post_processor token '%.*s' is not in its special_tokens",
                                   p->name, (int)(sn > 64 ? 64 : sn), s);
                for (size_t j = 0; j < sp[i].n; j++)
                    if (tok_add_template_id(t, seq, sp[i].ids[j], p->e))
                        return p->e->code;
            }
            if (m3)
                return p->e->code;
            if (!got)
                return err_set(p->e, ERR_FORMAT, "%s: post_processor item without an id", p->name);
        }
        if (m2)
            return p->e->code;
    }
    if (more)
        return p->e->code;
    return seq ? ERR_OK : err_set(p->e, ERR_FORMAT, "%s: post_processor single has no Sequence", p->name);
}

static int read_post_processor(struct jp *p, struct tokenizer *t)
{
    char type[32];
    if (obj_type(p, "post_processor", type, sizeof type))
        return p->e->code;
    if (strcmp(type, "TemplateProcessing"))
        return err_set(p->e, ERR_UNSUPPORTED, "%s: post_processor %s is not supported (TemplateProcessing, null)",
                       p->name, type);
    struct later l = {.t = t, .what = "post_processor", .names = {"single", "special_tokens"}};
    if (fields(p, &l, later_field))
        return p->e->code;
    if (!l.seen[0])
        return err_set(p->e, ERR_FORMAT, "%s: post_processor has no single template", p->name);
    size_t end = p->pos;
    int depth = p->depth;
    struct special *sp = NULL;
    size_t nsp = 0;
    int rc = ERR_OK;
    if (l.seen[1]) {
        p->pos = l.at[1];
        bool first = true, more = true;
        const char *k;
        size_t n;
        if (peek(p) != '{' || begin(p, '{'))
            rc = err_set(p->e, ERR_FORMAT, "%s: post_processor's special_tokens must be an object", p->name);
        while (!rc && !(rc = obj_key(p, &first, &more, &k, &n)) && more) {
            struct special *q = realloc(sp, (nsp + 1) * sizeof *q);
            if (!q) {
                rc = err_set(p->e, ERR_NOMEM, "%s: cannot allocate the post_processor", p->name);
                break;
            }
            sp = q;
            sp[nsp] = (struct special){.name = malloc(n + 1), .name_len = n};
            if (!sp[nsp].name) {
                rc = err_set(p->e, ERR_NOMEM, "%s: cannot allocate the post_processor", p->name);
                break;
            }
            memcpy(sp[nsp].name, k, n);
            rc = special_entry(p, &sp[nsp++]);
        }
    }
    if (!rc) {
        p->pos = l.at[0];
        rc = read_template(p, t, sp, nsp);
    }
    for (size_t i = 0; i < nsp; i++)
        free(sp[i].name);
    free(sp);
    p->pos = end;
    p->depth = depth;
    return rc;
}

struct model {
    struct tokenizer *t;
    const char *what;
    size_t at[2];
    bool seen[2];
    char *unk;
    size_t unk_len;
};

static int model_field(struct jp *p, void *ctx, const char *key, size_t n)
{
    struct model *m = ctx;
    struct tokenizer *t = m->t;
    const char *names[2] = {"vocab", "merges"};
    for (int i = 0; i < 2; i++) {
        if (!strcmp(key, names[i]) && !m->seen[i]) {
            m->seen[i] = true;
            m->at[i] = (ws(p), p->pos);
            return skip(p);
        }
    }
    if (!strcmp(key, "fuse_unk"))
        return get_bool(p, key, &t->fuse_unk);
    if (!strcmp(key, "byte_fallback"))
        return get_bool(p, key, &t->byte_fallback);
    if (!strcmp(key, "ignore_merges"))
        return get_bool(p, key, &t->ignore_merges);
    if (!strcmp(key, "unk_token") && !m->unk)
        return null_next(p) ? ERR_OK
               : peek(p) == '"' ? get_str_dup(p, &m->unk, &m->unk_len)
                                : err_set(p->e, ERR_FORMAT, "%s: model's unk_token must be a string or null", p->name);
    if (!strcmp(key, "dropout") || !strcmp(key, "continuing_subword_prefix") || !strcmp(key, "end_of_word_suffix")) {
        if (null_next(p))
            return ERR_OK;
        if (peek(p) == '"') { /* an empty affix is no affix */
            const char *s;
            size_t sn;
            if (jstring(p, 1, &s, &sn))
                return p->e->code;
            if (!sn && strcmp(key, "dropout"))
                return ERR_OK;
        }
        return err_set(p->e, ERR_UNSUPPORTED, "%s: model BPE with %s is not supported (null only)", p->name, key);
    }
    return err_set(p->e, ERR_UNSUPPORTED, "%s: model BPE: field '%s' is not supported", p->name, key);
}

static int read_vocab(struct jp *p, struct tokenizer *t)
{
    bool first = true, more = true;
    const char *k;
    size_t n;
    if (peek(p) != '{' || begin(p, '{'))
        return err_set(p->e, ERR_FORMAT, "%s: model's vocab must be an object", p->name);
    while (!obj_key(p, &first, &more, &k, &n) && more) {
        uint64_t id;
        if (get_u64(p, "vocab", &id))
            return p->e->code;
        if (id >= TOK_MAX_VOCAB)
            return err_set(p->e, ERR_RANGE, "%s: byte %zu: token id %llu: ids must be below %u", p->name, p->pos,
                           (unsigned long long)id, TOK_MAX_VOCAB);
        if (tok_set_piece(t, (uint32_t)id, k, n, p->e))
            return p->e->code;
    }
    return more ? (int)p->e->code : ERR_OK;
}

static int read_merges(struct jp *p, struct tokenizer *t)
{
    bool first = true, more = true;
    uint64_t rank = 0;
    if (peek(p) != '[' || begin(p, '['))
        return err_set(p->e, ERR_FORMAT, "%s: model's merges must be a list", p->name);
    while (!arr_next(p, &first, &more) && more) {
        const char *a, *b;
        size_t an, bn;
        if (peek(p) == '"') { /* the legacy form "a b" */
            if (jstring(p, 0, &a, &an))
                return p->e->code;
            const char *sp = memchr(a, ' ', an);
            if (!sp || memchr(sp + 1, ' ', an - (size_t)(sp + 1 - a)))
                return err_set(p->e, ERR_FORMAT, "%s: merge %llu: \"a b\" must hold exactly one space", p->name,
                               (unsigned long long)rank);
            b = sp + 1;
            bn = an - (size_t)(b - a);
            an = (size_t)(sp - a);
        } else {
            bool f2 = true, m2 = true;
            if (peek(p) != '[' || begin(p, '[') || arr_next(p, &f2, &m2) || !m2 || peek(p) != '"' ||
                jstring(p, 0, &a, &an) || arr_next(p, &f2, &m2) || !m2 || peek(p) != '"' || jstring(p, 1, &b, &bn) ||
                arr_next(p, &f2, &m2) || m2)
                return err_set(p->e, ERR_FORMAT, "%s: byte %zu: merge %llu must be [\"a\", \"b\"] or \"a b\"", p->name,
                               p->pos, (unsigned long long)rank);
        }
        if (tok_add_merge(t, a, an, b, bn, rank++, p->e))
            return p->e->code;
    }
    return more ? (int)p->e->code : ERR_OK;
}

static int read_model(struct jp *p, struct tokenizer *t)
{
    char type[32];
    if (obj_type(p, "model", type, sizeof type))
        return p->e->code;
    if (strcmp(type, "BPE"))
        return err_set(p->e, ERR_UNSUPPORTED, "%s: model %s is not supported (BPE)", p->name, type);
    struct model m = {.t = t, .what = "model BPE"};
    int rc = fields(p, &m, model_field);
    if (!rc && (!m.seen[0] || !m.seen[1]))
        rc = err_set(p->e, ERR_FORMAT, "%s: model BPE needs a vocab and merges", p->name);
    size_t end = p->pos;
    int depth = p->depth;
    if (!rc) {
        p->pos = m.at[0];
        rc = read_vocab(p, t);
    }
    if (!rc) {
        p->pos = m.at[1];
        rc = read_merges(p, t);
    }
    if (!rc && m.unk && (t->unk_id = tok_lookup(t, m.unk, m.unk_len)) == TOK_NONE)
        rc = err_set(p->e, ERR_FORMAT, "%s: model's unk_token '%.*s' is not in the vocabulary", p->name,
                     (int)(m.unk_len > 64 ? 64 : m.unk_len), m.unk);
    free(m.unk);
    p->pos = end;
    p->depth = depth;
    return rc;
}

static int read_added(struct jp *p, struct tokenizer *t)
{
    bool first = true, more = true;
    if (peek(p) != '[' || begin(p, '['))
        return err_set(p->e, ERR_FORMAT, "%s: added_tokens must be a list", p->name);
    for (size_t i = 0; !arr_next(p, &first, &more) && more; i++) {
        bool f2 = true, m2 = true, fl[5] = {0}, have_id = false;
        const char *names[5] = {"single_word", "lstrip", "rstrip", "normalized", "special"};
        char *content = NULL;
        size_t clen = 0;
        uint64_t id = 0;
        const char *k;
        size_t n;
        int rc = peek(p) != '{' || begin(p, '{') ? err_set(p->e, ERR_FORMAT, "%s: added token %zu must be an object",
                                                         p->name, i)
                                               : ERR_OK;
        while (!rc && !(rc = obj_key(p, &f2, &m2, &k, &n)) && m2) {
            int f = 0;
            while (f < 5 && !key_is(k, n, names[f]))
                f++;
            if (f < 5)
                rc = get_bool(p, names[f], &fl[f]);
            else if (key_is(k, n, "id"))
                rc = get_u64(p, "id", &id), have_id = true;
            else if (key_is(k, n, "content") && !content)
                rc = peek(p) == '"' ? get_str_dup(p, &content, &clen)
                                    : err_set(p->e, ERR_FORMAT, "%s: added token %zu: content must be a string", p->name, i);
            else
                rc = err_set(p->e, ERR_UNSUPPORTED, "%s: added token %zu: field '%.*s' is not supported", p->name, i,
                             (int)(n > 32 ? 32 : n), k);
        }
        if (!rc && (!content || !have_id))
            rc = err_set(p->e, ERR_FORMAT, "%s: added token %zu needs an id and a content", p->name, i);
        if (!rc && (fl[0] || fl[3]))
            rc = err_set(p->e, ERR_UNSUPPORTED, "%s: added token %zu ('%.*s'): %s true is not supported", p->name, i,
                         (int)(clen > 64 ? 64 : clen), content, fl[0] ? "single_word" : "normalized");
        if (!rc && id >= TOK_MAX_VOCAB)
            rc = err_set(p->e, ERR_RANGE, "%s: added token %zu: id %llu: ids must be below %u", p->name, i,
                         (unsigned long long)id, TOK_MAX_VOCAB);
        if (!rc && tok_lookup(t, content, clen) != TOK_NONE && tok_lookup(t, content, clen) != id)
            rc = err_set(p->e, ERR_FORMAT, "%s: added token %zu ('%.*s') has id %llu, the vocabulary %u", p->name, i,
                         (int)(clen > 64 ? 64 : clen), content, (unsigned long long)id, tok_lookup(t, content, clen));
        if (!rc)
            rc = tok_add_added(t, (uint32_t)id, content, clen, fl[4], fl[1], fl[2], p->e);
        free(content);
        if (rc)
            return rc;
    }
    return more ? (int)p->e->code : ERR_OK;
}

static int read_top(struct jp *p, struct tokenizer *t)
{
    bool first = true, more = true;
    const char *k;
    size_t n, model_at = 0, added_at = 0;
    bool model = false, added = false;
    unsigned seen = 0;
    if (peek(p) != '{' || begin(p, '{'))
        return err_set(p->e, ERR_FORMAT, "%s: not a JSON object", p->name);
    while (!obj_key(p, &first, &more, &k, &n) && more) {
        int rc;
        char key[32];
        snprintf(key, sizeof key, "%.*s", (int)(n < sizeof key ? n : sizeof key - 1), k);
        static const char *known[] = {"version", "truncation", "padding", "model", "added_tokens", "normalizer",
                                      "pre_tokenizer", "post_processor", "decoder"};
        for (int i = 0; i < 9; i++) {
            if (strcmp(key, known[i]))
                continue;
            if (seen & 1u << i)
                return err_set(p->e, ERR_FORMAT, "%s: byte %zu: '%s' appears twice", p->name, p->pos, key);
            seen |= 1u << i;
        }
        bool nul = null_next(p);
        if (!strcmp(key, "version")) {
            rc = nul ? ERR_OK : skip(p);
        } else if (!strcmp(key, "truncation") || !strcmp(key, "padding")) {
            rc = nul ? ERR_OK : err_set(p->e, ERR_UNSUPPORTED, "%s: %s is not supported (null only)", p->name, key);
        } else if (!strcmp(key, "model") && !nul) { /* an object read in place, anything else refused after the rest */
            model = true;
            model_at = peek(p) == '{' ? 0 : p->pos;
            rc = model_at ? skip(p) : read_model(p, t);
        } else if (!strcmp(key, "added_tokens") && !nul) {
            added = true;
            added_at = p->pos;
            rc = skip(p);
        } else if (!strcmp(key, "normalizer")) {
            rc = nul ? ERR_OK : read_normalizer(p, t);
        } else if (!strcmp(key, "pre_tokenizer")) {
            rc = nul ? ERR_OK : read_pre_tokenizer(p, t);
        } else if (!strcmp(key, "post_processor")) {
            rc = nul ? ERR_OK : read_post_processor(p, t);
        } else if (!strcmp(key, "decoder")) {
            rc = nul ? ERR_OK : read_decoder(p, t);
        } else {
            rc = err_set(p->e, ERR_UNSUPPORTED, "%s: top-level field '%s' is not supported", p->name, key);
        }
        if (rc)
            return rc;
    }
    if (more)
        return p->e->code;
    if (peek(p))
        return fail(p, "data after the JSON value");
    if (!model)
        return err_set(p->e, ERR_FORMAT, "%s: no model", p->name);
    p->pos = model_at;
    if (model_at && read_model(p, t))
        return p->e->code;
    p->pos = added_at;
    return added ? read_added(p, t) : ERR_OK;
}

int tok_load_json_mem(struct tokenizer **out, const char *buf, size_t len, const char *name, struct err *e)
{
    *out = NULL;
    struct tokenizer *t;
    if (tok_new(&t, name, e))
        return e->code;
    struct jp p = {.s = buf, .len = len, .name = t->name, .e = e};
    int rc = read_top(&p, t);
    free(p.buf[0]);
    free(p.buf[1]);
    if (!rc)
        rc = tok_finish(t, e);
    if (rc) {
        tok_free(t);
        return rc;
    }
    *out = t;
    return ERR_OK;
}

int tok_load_json(struct tokenizer **out, const char *path, struct err *e)
{
    char *buf;
    size_t len;
    *out = NULL;
    if (fio_read_file(path, 0, TOK_MAX_JSON_BYTES, &buf, &len, e))
        return e->code;
    int rc = tok_load_json_mem(out, buf, len, path, e);
    free(buf);
    return rc;
}
