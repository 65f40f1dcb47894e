/* template.c - the Jinja2 subset of the Gemma 4 chat templates, with Python
 * jinja2's semantics (template.h). Lexer (trim_blocks, lstrip_blocks, the
 * '-' and '+' markers) -> token array -> recursive-descent parser (jinja2's
 * precedence) -> AST -> a tree-walking evaluator over Python-like values. */
#include "tokenizer/template.h"

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/sha256.h"

/* The known templates (docs/INPUTS.md §"Chat templates"): sha256 of the exact source bytes. */
static const struct {
    const char *sha256, *label;
} known_templates[] = {
    {"2dfbfc7d538912f4ea11d29d85b4e25d7bc26386e53f57529f1d707c28b5828c", "gemma4-launch"},
    {"65f93a25708c952457106a30e185ba7beffddd726121c8d7e3f3e08b23c16c67", "gemma4-interleaved"},
    {"85a08664d16d8f3be4416c92427b3ac10df1024ac566cc0b4bc3bab409393f98", "gemma4-april"},
};

/* ---------------------------------------------------------------- memory */

struct chunk {
    struct chunk *next;
    size_t size, used;
    max_align_t data[];
};

struct arena {
    struct chunk *head;
    size_t total, cap; /* bytes taken from malloc; cap 0: unlimited */
};

static void *arena_alloc(struct arena *a, size_t n)
{
    n = (n + sizeof(max_align_t) - 1) / sizeof(max_align_t) * sizeof(max_align_t);
    if (n == 0)
        n = sizeof(max_align_t);
    struct chunk *c = a->head;
    if (!c || c->size - c->used < n) {
        size_t sz = n > 65536 ? n : 65536;
        if (a->cap && (sz > a->cap || a->total > a->cap - sz))
            return NULL;
        c = malloc(sizeof *c + sz);
        if (!c)
            return NULL;
        c->next = a->head;
        c->size = sz;
        c->used = 0;
        a->head = c;
        a->total += sz;
    }
    void *p = (char *)c->data + c->used;
    c->used += n;
    return p;
}

static void arena_free(struct arena *a)
{
    for (struct chunk *c = a->head, *n; c; c = n) {
        n = c->next;
        free(c);
    }
    a->head = NULL;
    a->total = 0;
}

/* ---------------------------------------------------------------- unicode */

struct sv {
    const char *p;
    size_t n;
};

static bool sv_eq(struct sv a, const char *s)
{
    size_t n = strlen(s);
    return a.n == n && !memcmp(a.p, s, n);
}

static bool sv_same(struct sv a, struct sv b)
{
    return a.n == b.n && (a.n == 0 || !memcmp(a.p, b.p, a.n));
}

/* Decodes one code point of valid UTF-8 (every string here was validated). */
static uint32_t utf8_next(const char *s, size_t n, size_t *i)
{
    const unsigned char *u = (const unsigned char *)s + *i;
    size_t left = n - *i;
    if (u[0] < 0x80 || left < 2) {
        *i += 1;
        return u[0];
    }
    if (u[0] < 0xE0) {
        *i += 2;
        return (uint32_t)(u[0] & 0x1F) << 6 | (u[1] & 0x3F);
    }
    if (u[0] < 0xF0 || left < 4) {
        *i += left < 3 ? left : 3;
        return left < 3 ? 0xFFFD : (uint32_t)(u[0] & 0x0F) << 12 | (uint32_t)(u[1] & 0x3F) << 6 | (u[2] & 0x3F);
    }
    *i += 4;
    return (uint32_t)(u[0] & 0x07) << 18 | (uint32_t)(u[1] & 0x3F) << 12 | (uint32_t)(u[2] & 0x3F) << 6 | (u[3] & 0x3F);
}

static size_t utf8_put(char *o, uint32_t c)
{
    if (c < 0x80) {
        o[0] = (char)c;
        return 1;
    }
    if (c < 0x800) {
        o[0] = (char)(0xC0 | c >> 6);
        o[1] = (char)(0x80 | (c & 0x3F));
        return 2;
    }
    if (c < 0x10000) {
        o[0] = (char)(0xE0 | c >> 12);
        o[1] = (char)(0x80 | (c >> 6 & 0x3F));
        o[2] = (char)(0x80 | (c & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | c >> 18);
    o[1] = (char)(0x80 | (c >> 12 & 0x3F));
    o[2] = (char)(0x80 | (c >> 6 & 0x3F));
    o[3] = (char)(0x80 | (c & 0x3F));
    return 4;
}

static bool utf8_valid(const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        unsigned c = u[i];
        size_t k;
        uint32_t cp, min;
        if (c < 0x80) {
            i++;
            continue;
        } else if ((c & 0xE0) == 0xC0) {
            k = 1, cp = c & 0x1F, min = 0x80;
        } else if ((c & 0xF0) == 0xE0) {
            k = 2, cp = c & 0x0F, min = 0x800;
        } else if ((c & 0xF8) == 0xF0) {
            k = 3, cp = c & 0x07, min = 0x10000;
        } else {
            return false;
        }
        if (n - i <= k)
            return false;
        for (size_t j = 1; j <= k; j++) {
            if ((u[i + j] & 0xC0) != 0x80)
                return false;
            cp = cp << 6 | (u[i + j] & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return false;
        i += k + 1;
    }
    return true;
}

/* Python's str.isspace(): bidirectional class WS, B or S, or category Zs. */
static bool py_isspace(uint32_t c)
{
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

/* Code points whose Python upper() and lower() are themselves: blocks with no cased letters
 * (checked against unicodedata 14.0, Python 3.11), and the caseless Latin-1 symbols. */
static bool caseless(uint32_t c)
{
    if (c < 0x80)
        return !((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z'));
    if (c < 0xC0)
        return c != 0xAA && c != 0xB5 && c != 0xBA;
    if (c == 0xD7 || c == 0xF7)
        return true;
    static const uint32_t ranges[][2] = {
        {0x0590, 0x08FF},   /* Hebrew, Arabic, Syriac, Thaana, NKo, Samaritan, Mandaic */
        {0x0900, 0x109F},   /* Indic scripts, Thai, Lao, Tibetan, Myanmar */
        {0x1100, 0x11FF},   /* Hangul Jamo */
        {0x2000, 0x206F},   /* general punctuation */
        {0x20A0, 0x20CF},   /* currency */
        {0x2190, 0x23FF},   /* arrows, math operators, technical */
        {0x2500, 0x2BFF},   /* box drawing .. misc symbols and arrows */
        {0x2E80, 0x2FDF},   /* CJK radicals */
        {0x3000, 0x9FFF},   /* CJK symbols, kana, CJK unified ideographs */
        {0xA000, 0xA4CF},   /* Yi */
        {0xAC00, 0xD7AF},   /* Hangul syllables */
        {0xF900, 0xFAFF},   /* CJK compatibility ideographs */
        {0xFE30, 0xFE4F},   /* CJK compatibility forms */
        {0x1F000, 0x1FAFF}, /* emoji and pictographs */
        {0x20000, 0x3134F}, /* CJK extensions */
    };
    for (size_t i = 0; i < sizeof ranges / sizeof *ranges; i++)
        if (c >= ranges[i][0] && c <= ranges[i][1])
            return true;
    return false;
}

/* Python's str.isprintable() for a code point, where known: returns 1 printable, 0 not, -1 unknown. */
static int py_printable(uint32_t c)
{
    if (c < 0x20 || c == 0x7F || (c >= 0x80 && c <= 0xA0) || c == 0xAD)
        return 0;
    if (c < 0x100)
        return 1;
    static const uint32_t unprintable[][2] = {
        {0x1680, 0x1680}, {0x2000, 0x200F}, {0x2028, 0x202F}, {0x205F, 0x2064}, {0x2066, 0x206F}, /* spaces, format */
        {0x3000, 0x3000}, {0xFEFF, 0xFEFF},
    };
    for (size_t i = 0; i < sizeof unprintable / sizeof *unprintable; i++)
        if (c >= unprintable[i][0] && c <= unprintable[i][1])
            return 0;
    static const uint32_t ranges[][2] = {
        {0x0100, 0x024F},   /* Latin Extended-A and B */
        {0x0391, 0x03A1}, {0x03A3, 0x03FF}, /* Greek */
        {0x0400, 0x052F},   /* Cyrillic */
        {0x05D0, 0x05EA},   /* Hebrew letters */
        {0x0621, 0x064A},   /* Arabic letters */
        {0x0905, 0x0939},   /* Devanagari letters */
        {0x0E01, 0x0E30},   /* Thai letters */
        {0x1E00, 0x1EFF},   /* Latin Extended Additional */
        {0x2010, 0x2027},   /* punctuation */
        {0x2030, 0x205E},
        {0x20A0, 0x20C0},   /* currency */
        {0x2190, 0x23FF},   /* arrows, operators, technical */
        {0x2500, 0x27BF},   /* box drawing .. dingbats */
        {0x3001, 0x303F},   /* CJK punctuation */
        {0x3041, 0x3096}, {0x3099, 0x30FF}, /* kana */
        {0x4E00, 0x9FFF},   /* CJK unified ideographs */
        {0xAC00, 0xD7A3},   /* Hangul syllables */
        {0xFF01, 0xFF60},   /* fullwidth forms */
        {0x1F300, 0x1F64F}, /* pictographs, emoticons */
        {0x1F680, 0x1F6D7}, /* transport */
        {0x1F900, 0x1F9FF}, /* supplemental symbols */
    };
    for (size_t i = 0; i < sizeof ranges / sizeof *ranges; i++)
        if (c >= ranges[i][0] && c <= ranges[i][1])
            return 1;
    return -1;
}

/* Python's upper()/lower() of one code point into o (up to 2 bytes of "SS"); false where unknown. */
static bool case_map(uint32_t c, bool upper, char *o, size_t *on)
{
    uint32_t r = c;
    if (c < 0x80) {
        if (upper && c >= 'a' && c <= 'z')
            r = c - 32;
        else if (!upper && c >= 'A' && c <= 'Z')
            r = c + 32;
    } else if (c >= 0xC0 && c <= 0xFF && c != 0xD7 && c != 0xF7) {
        if (upper) {
            if (c == 0xDF) {
                o[0] = 'S', o[1] = 'S', *on = 2;
                return true;
            }
            r = c == 0xFF ? 0x178 : c >= 0xE0 ? c - 0x20 : c;
        } else {
            r = c <= 0xDE ? c + 0x20 : c;
        }
    } else if (c == 0xB5) {
        r = upper ? 0x39C : c;
    } else if (!caseless(c)) {
        return false;
    }
    *on = utf8_put(o, r);
    return true;
}

/* ---------------------------------------------------------------- values */

enum vt { V_UNDEF, V_NONE, V_BOOL, V_INT, V_FLOAT, V_STR, V_LIST, V_DICT, V_NS, V_LOOP, V_MACRO, V_METHOD, V_FUNC };
/* list kinds: Python list, tuple, a generator (map), dict views, range */
enum lk { L_LIST, L_TUPLE, L_GEN, L_ITEMS, L_KEYS, L_VALUES, L_RANGE };

struct list;
struct dict;
struct loopv;
struct method;
struct stmt;

struct val {
    uint8_t t, k;
    union {
        bool b;
        int64_t i;
        double f;
        struct sv s;
        struct list *l;
        struct dict *d;
        struct loopv *lp;
        const struct stmt *mc;
        struct method *m;
        int fn;
        const char *name; /* V_UNDEF: the name, for messages (may be NULL) */
    };
};

struct list {
    size_t n;
    struct val *v;
    int64_t start, stop, step; /* L_RANGE */
};

struct dict {
    size_t n, cap;
    struct val *k, *v;
};

struct loopv {
    int64_t index0, length;
    struct val prev, next;
};

struct method {
    struct val recv;
    int id;
};

enum { F_RANGE, F_NAMESPACE, F_RAISE };

static struct val mk_undef(const char *name)
{
    struct val v = {.t = V_UNDEF};
    v.name = name;
    return v;
}
static struct val mk_none(void) { return (struct val){.t = V_NONE}; }
static struct val mk_bool(bool b) { return (struct val){.t = V_BOOL, .b = b}; }
static struct val mk_int(int64_t i) { return (struct val){.t = V_INT, .i = i}; }
static struct val mk_float(double f) { return (struct val){.t = V_FLOAT, .f = f}; }
static struct val mk_str(const char *p, size_t n) { return (struct val){.t = V_STR, .s = {p, n}}; }

/* ---------------------------------------------------------------- AST */

enum ek {
    E_LIT, E_NAME, E_ATTR, E_ITEM, E_SLICE, E_CALL, E_FILTER, E_TEST, E_NEG, E_POS, E_NOT, E_BIN, E_AND, E_OR,
    E_CMP, E_COND, E_LIST, E_TUPLE, E_DICT, E_CONCAT
};
enum binop { B_ADD, B_SUB, B_MUL, B_DIV, B_FDIV, B_MOD, B_POW };
enum cmpop { C_EQ, C_NE, C_LT, C_LE, C_GT, C_GE, C_IN, C_NOTIN };

/* filters, tests and methods: the supported names; anything else is refused at parse time */
static const char *const filter_names[] = {"upper", "lower", "trim", "map", "list", "default", "d", "length",
                                           "count", "dictsort", "tojson", "join", "first", "last", "replace",
                                           "string", NULL};
enum { FL_UPPER, FL_LOWER, FL_TRIM, FL_MAP, FL_LIST, FL_DEFAULT, FL_D, FL_LENGTH, FL_COUNT, FL_DICTSORT,
       FL_TOJSON, FL_JOIN, FL_FIRST, FL_LAST, FL_REPLACE, FL_STRING };
static const char *const test_names[] = {"defined", "undefined", "none", "boolean", "true", "false", "integer",
                                         "float", "number", "string", "mapping", "sequence", "iterable",
                                         "callable", "eq", "equalto", "==", "ne", "!=", "in", "odd", "even",
                                         "divisibleby", "lt", "<", "le", "<=", "gt", ">", "ge", ">=", NULL};
enum { T_DEFINED, T_UNDEFINED, T_NONE, T_BOOLEAN, T_TRUE, T_FALSE, T_INTEGER, T_FLOAT, T_NUMBER, T_STRING,
       T_MAPPING, T_SEQUENCE, T_ITERABLE, T_CALLABLE, T_EQ, T_EQUALTO, T_EQ2, T_NE, T_NE2, T_IN, T_ODD, T_EVEN,
       T_DIVISIBLEBY, T_LT, T_LT2, T_LE, T_LE2, T_GT, T_GT2, T_GE, T_GE2 };
/* methods callable here, by receiver type */
static const char *const method_names[] = {"split", "strip", "lstrip", "rstrip", "startswith", "endswith", "upper",
                                           "lower", "replace", "get", "items", "keys", "values", NULL};
enum { M_SPLIT, M_STRIP, M_LSTRIP, M_RSTRIP, M_STARTSWITH, M_ENDSWITH, M_UPPER, M_LOWER, M_REPLACE, M_GET,
       M_ITEMS, M_KEYS, M_VALUES };

struct expr {
    uint8_t k, op;
    bool negate;
    int id;          /* filter / test / function index */
    int line;
    struct sv name;  /* E_NAME, E_ATTR, E_FILTER, E_TEST */
    struct val lit;  /* E_LIT */
    struct expr *a, *b, *c;
    struct expr **args; /* positional; E_CMP: the operands after a; E_DICT: key, value pairs */
    size_t nargs;
    uint8_t *ops;       /* E_CMP */
    struct sv *kwn;
    struct expr **kwv;
    size_t nkw;
};

enum sk { S_TEXT, S_OUT, S_IF, S_FOR, S_SET, S_SETATTR, S_MACRO, S_BREAK, S_CONTINUE };

struct body {
    size_t n;
    struct stmt **s;
};

struct stmt {
    uint8_t k;
    int line;
    struct sv text;   /* S_TEXT */
    struct expr *x;   /* S_OUT, S_IF test, S_FOR iterable, S_SET value */
    struct sv name;   /* S_SET, S_SETATTR (the namespace), S_MACRO */
    struct sv attr;   /* S_SETATTR */
    struct sv *targets; /* S_FOR */
    size_t ntargets;
    struct body body, orelse; /* S_IF: orelse holds the elif chain or else; S_FOR: else */
    struct sv *params;  /* S_MACRO */
    struct expr **defaults;
    size_t nparams;
};

struct chat_template {
    struct arena mem;
    struct body root;
    char sha[65];
    const char *label;
    char name[128];
};

/* ---------------------------------------------------------------- lexer */

enum tk { K_TEXT, K_VBEGIN, K_VEND, K_BBEGIN, K_BEND, K_NAME, K_STR, K_INT, K_FLOAT, K_OP, K_EOF };

struct tok {
    uint8_t k;
    int line;
    struct sv s; /* K_TEXT, K_NAME, K_STR (decoded), K_OP */
    int64_t i;
    double f;
};

struct lexer {
    const char *src;
    size_t n, pos;
    int line;
    struct tok *t;
    size_t nt, cap;
    struct arena *mem;
    struct err *e;
    const char *name;
};

/* "name: line N: message", the form of every error about a template. */
static int verr(struct err *e, enum err_code code, const char *name, int line, const char *fmt, va_list ap)
    __attribute__((format(printf, 5, 0)));
static int verr(struct err *e, enum err_code code, const char *name, int line, const char *fmt, va_list ap)
{
    char m[1024];
    vsnprintf(m, sizeof m, fmt, ap);
    return err_set(e, code, "%s: line %d: %s", name, line, m);
}

static int lex_err(struct lexer *L, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int lex_err(struct lexer *L, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = verr(L->e, ERR_FORMAT, L->name, L->line, fmt, ap);
    va_end(ap);
    return rc;
}

static int lex_push(struct lexer *L, struct tok t)
{
    if (L->nt == L->cap) {
        size_t c = L->cap ? L->cap * 2 : 256;
        struct tok *nt = realloc(L->t, c * sizeof *nt);
        if (!nt)
            return err_set(L->e, ERR_NOMEM, "%s: out of memory lexing", L->name);
        L->t = nt, L->cap = c;
    }
    t.line = L->line;
    L->t[L->nt++] = t;
    return 0;
}

static void count_lines(struct lexer *L, size_t from, size_t to)
{
    for (size_t i = from; i < to; i++)
        L->line += L->src[i] == '\n';
}

/* Length of the Python-whitespace run at s[i..n). */
static size_t ws_run(const char *s, size_t i, size_t n)
{
    size_t j = i;
    while (j < n) {
        size_t k = j;
        if (!py_isspace(utf8_next(s, n, &k)))
            break;
        j = k;
    }
    return j - i;
}

/* Python's rstrip() of s[0..n): the new length. */
static size_t rstrip_len(const char *s, size_t n)
{
    size_t end = 0, i = 0;
    while (i < n) {
        uint32_t c = utf8_next(s, n, &i);
        if (!py_isspace(c))
            end = i;
    }
    return end;
}

/* Text data (the source's newlines are already \n, as jinja2's lexer makes them). */
static int lex_text(struct lexer *L, const char *p, size_t n)
{
    return n ? lex_push(L, (struct tok){.k = K_TEXT, .s = {p, n}}) : 0;
}

static int hexval(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* A string literal: Python's unicode-escape decoding of its body. */
static int lex_string(struct lexer *L)
{
    char q = L->src[L->pos];
    size_t i = L->pos + 1, start = i;
    while (i < L->n && L->src[i] != q) {
        if (L->src[i] == '\\')
            i++;
        i++;
    }
    if (i >= L->n)
        return lex_err(L, "unterminated string literal");
    const char *s = L->src + start;
    size_t n = i - start;
    char *o = arena_alloc(L->mem, n + 1);
    if (!o)
        return err_set(L->e, ERR_NOMEM, "%s: out of memory", L->name);
    size_t m = 0;
    for (size_t j = 0; j < n; j++) {
        char c = s[j];
        if (c != '\\') {
            o[m++] = c;
            continue;
        }
        char d = s[++j];
        uint32_t cp;
        int digits = 0;
        switch (d) {
        case '\n': continue;
        case '\\': o[m++] = '\\'; continue;
        case '\'': o[m++] = '\''; continue;
        case '"': o[m++] = '"'; continue;
        case 'a': o[m++] = '\a'; continue;
        case 'b': o[m++] = '\b'; continue;
        case 'f': o[m++] = '\f'; continue;
        case 'n': o[m++] = '\n'; continue;
        case 'r': o[m++] = '\r'; continue;
        case 't': o[m++] = '\t'; continue;
        case 'v': o[m++] = '\v'; continue;
        case 'x': digits = 2; break;
        case 'u': digits = 4; break;
        case 'U': digits = 8; break;
        case 'N': return lex_err(L, "string escape \\N{...}: not supported");
        default:
            if (d >= '0' && d <= '7') {
                cp = 0;
                int k = 0;
                while (k < 3 && j < n && s[j] >= '0' && s[j] <= '7')
                    cp = cp * 8 + (uint32_t)(s[j++] - '0'), k++;
                j--;
                goto put;
            }
            o[m++] = '\\';
            j--; /* the next character is read again as itself */
            continue;
        }
        cp = 0;
        for (int k = 0; k < digits; k++) {
            int h = j + 1 < n ? hexval(s[j + 1]) : -1;
            if (h < 0)
                return lex_err(L, "truncated \\%c escape in a string literal", d);
            cp = cp * 16 + (uint32_t)h;
            j++;
        }
    put:
        if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return lex_err(L, "string escape U+%X: not a Unicode scalar value", (unsigned)cp);
        m += utf8_put(o + m, cp);
    }
    count_lines(L, L->pos, i);
    L->pos = i + 1;
    return lex_push(L, (struct tok){.k = K_STR, .s = {o, m}});
}

static bool is_digit(char c) { return c >= '0' && c <= '9'; }
static bool is_name0(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }

/* The tokens of one tag up to its end; *trim: what follows the end ('-': whitespace, 'n': one newline). */
static int lex_tag(struct lexer *L, bool block, char *trim)
{
    static const char *const ops[] = {"//", "**", "==", "!=", ">=", "<=", "+", "-", "/", "*", "%", "~", "[", "]",
                                      "(", ")", "{", "}", ">", "<", "=", ".", ":", "|", ",", NULL};
    int depth = 0;
    for (;;) {
        size_t w = ws_run(L->src, L->pos, L->n);
        count_lines(L, L->pos, L->pos + w);
        L->pos += w;
        if (L->pos >= L->n)
            return lex_err(L, "unexpected end of template inside a %s tag", block ? "{% %}" : "{{ }}");
        const char *p = L->src + L->pos;
        size_t left = L->n - L->pos;
        const char *end = block ? "%}" : "}}";
        if (left >= 3 && p[0] == '-' && !memcmp(p + 1, end, 2)) {
            L->pos += 3, *trim = '-';
            return lex_push(L, (struct tok){.k = block ? K_BEND : K_VEND});
        }
        if (block && left >= 3 && p[0] == '+' && !memcmp(p + 1, end, 2)) {
            L->pos += 3, *trim = 0;
            return lex_push(L, (struct tok){.k = K_BEND});
        }
        if (left >= 2 && !memcmp(p, end, 2) && (block || depth == 0)) {
            L->pos += 2, *trim = block ? 'n' : 0;
            return lex_push(L, (struct tok){.k = block ? K_BEND : K_VEND});
        }
        int rc;
        if (*p == '\'' || *p == '"') {
            if ((rc = lex_string(L)))
                return rc;
        } else if (is_digit(*p)) {
            size_t i = 0;
            while (i < left && is_digit(p[i]))
                i++;
            bool flt = false;
            if (i + 1 < left && p[i] == '.' && is_digit(p[i + 1])) {
                flt = true;
                i++;
                while (i < left && is_digit(p[i]))
                    i++;
            }
            if (i < left && (p[i] == 'e' || p[i] == 'E')) {
                size_t j = i + 1;
                if (j < left && (p[j] == '+' || p[j] == '-'))
                    j++;
                if (j < left && is_digit(p[j])) {
                    flt = true;
                    while (j < left && is_digit(p[j]))
                        j++;
                    i = j;
                }
            }
            if (i < left && (p[i] == '_' || is_name0(p[i])))
                return lex_err(L, "number literal '%.*s': only decimal digits are supported", (int)(i + 1), p);
            char buf[400];
            if (i >= sizeof buf)
                return lex_err(L, "number literal of %zu characters: too long", i);
            memcpy(buf, p, i);
            buf[i] = 0;
            struct tok t = {.k = flt ? K_FLOAT : K_INT};
            if (flt) {
                t.f = strtod(buf, NULL);
            } else {
                char *e2;
                unsigned long long u = strtoull(buf, &e2, 10);
                if (i > 19 || u > (unsigned long long)INT64_MAX)
                    return lex_err(L, "integer literal %s: beyond int64 (not supported)", buf);
                t.i = (int64_t)u;
            }
            L->pos += i;
            if ((rc = lex_push(L, t)))
                return rc;
        } else if (is_name0(*p)) {
            size_t i = 1;
            while (i < left && (is_name0(p[i]) || is_digit(p[i])))
                i++;
            L->pos += i;
            if ((rc = lex_push(L, (struct tok){.k = K_NAME, .s = {p, i}})))
                return rc;
        } else {
            size_t i;
            for (i = 0; ops[i]; i++) {
                size_t ol = strlen(ops[i]);
                if (left >= ol && !memcmp(p, ops[i], ol))
                    break;
            }
            if (!ops[i]) {
                size_t k = 0;
                utf8_next(p, left, &k);
                return lex_err(L, "unexpected character '%.*s' in a tag", (int)k, p);
            }
            size_t ol = strlen(ops[i]);
            if (*p == '(' || *p == '[' || *p == '{')
                depth++;
            else if ((*p == ')' || *p == ']' || *p == '}') && depth > 0)
                depth--;
            L->pos += ol;
            if ((rc = lex_push(L, (struct tok){.k = K_OP, .s = {p, ol}})))
                return rc;
        }
    }
}

static int lex(struct lexer *L)
{
    bool line_starting = true;
    int rc;
    while (L->pos < L->n) {
        const char *p = L->src + L->pos;
        size_t left = L->n - L->pos, at = 0;
        char kind = 0;
        for (; at + 1 < left; at++)
            if (p[at] == '{' && (p[at + 1] == '{' || p[at + 1] == '%' || p[at + 1] == '#')) {
                kind = p[at + 1];
                break;
            }
        if (!kind) {
            rc = lex_text(L, p, left);
            count_lines(L, L->pos, L->n);
            L->pos = L->n;
            if (rc)
                return rc;
            break;
        }
        char mod = at + 2 < left ? p[at + 2] : 0;
        size_t tn = at;
        if (mod == '-') {
            tn = rstrip_len(p, at);
        } else if (kind != '{' && mod != '+') {
            size_t lpos = 0;
            for (size_t i = at; i > 0; i--)
                if (p[i - 1] == '\n') {
                    lpos = i;
                    break;
                }
            if ((lpos > 0 || line_starting) && lpos < at) {
                bool allws = true;
                for (size_t i = lpos; i < at;) {
                    if (!py_isspace(utf8_next(p, at, &i))) {
                        allws = false;
                        break;
                    }
                }
                if (allws)
                    tn = lpos;
            }
        }
        if (kind == '{' && mod == '+')
            return lex_err(L, "'{{+': not supported");
        if ((rc = lex_text(L, p, tn)))
            return rc;
        count_lines(L, L->pos, L->pos + at);
        L->pos += at + 2 + (mod == '-' || mod == '+');
        char trim = 0;
        if (kind == '#') {
            const char *q = L->src + L->pos;
            size_t ql = L->n - L->pos, j;
            for (j = 0; j + 1 < ql; j++)
                if (q[j] == '#' && q[j + 1] == '}')
                    break;
            if (j + 1 >= ql)
                return lex_err(L, "unterminated comment");
            bool minus = j > 0 && q[j - 1] == '-';
            bool plus = j > 0 && q[j - 1] == '+';
            count_lines(L, L->pos, L->pos + j + 2);
            L->pos += j + 2;
            trim = minus ? '-' : plus ? 0 : 'n';
        } else {
            if ((rc = lex_push(L, (struct tok){.k = kind == '{' ? K_VBEGIN : K_BBEGIN})))
                return rc;
            if ((rc = lex_tag(L, kind == '%', &trim)))
                return rc;
        }
        line_starting = false;
        if (trim == '-') {
            size_t w = ws_run(L->src, L->pos, L->n);
            count_lines(L, L->pos, L->pos + w);
            L->pos += w;
            line_starting = w > 0 && L->src[L->pos - 1] == '\n';
        } else if (trim == 'n' && L->pos < L->n && L->src[L->pos] == '\n') {
            L->pos++, L->line++;
            line_starting = true;
        }
    }
    return lex_push(L, (struct tok){.k = K_EOF});
}

/* ---------------------------------------------------------------- parser */

struct parser {
    struct tok *t;
    size_t pos;
    struct arena *mem;
    struct err *e;
    const char *name;
    int nest, loops;
    bool in_macro;
    struct sv macros[256]; /* macro names defined, and names called as functions */
    size_t nmacros;
    struct sv called[256];
    int called_line[256];
    size_t ncalled;
};

static int perr(struct parser *P, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int perr(struct parser *P, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = verr(P->e, ERR_FORMAT, P->name, P->t[P->pos].line, fmt, ap);
    va_end(ap);
    return rc;
}

static int unsupported(struct parser *P, const char *what, struct sv name)
{
    return err_set(P->e, ERR_UNSUPPORTED, "%s: line %d: %s '%.*s': not supported", P->name, P->t[P->pos].line,
                   what, (int)name.n, name.p);
}

static struct tok *cur(struct parser *P) { return &P->t[P->pos]; }
static bool is_op(struct parser *P, const char *op) { return cur(P)->k == K_OP && sv_eq(cur(P)->s, op); }
static bool is_name(struct parser *P, const char *n) { return cur(P)->k == K_NAME && sv_eq(cur(P)->s, n); }
static bool skip_op(struct parser *P, const char *op)
{
    if (!is_op(P, op))
        return false;
    P->pos++;
    return true;
}
static bool skip_name(struct parser *P, const char *n)
{
    if (!is_name(P, n))
        return false;
    P->pos++;
    return true;
}
static int expect_op(struct parser *P, const char *op)
{
    return skip_op(P, op) ? 0 : perr(P, "expected '%s'", op);
}

/* A zeroed node of the AST. */
static void *new_node(struct parser *P, size_t size)
{
    void *n = arena_alloc(P->mem, size);
    if (!n)
        err_set(P->e, ERR_NOMEM, "%s: out of memory parsing", P->name);
    else
        memset(n, 0, size);
    return n;
}

static struct expr *new_expr(struct parser *P, int k)
{
    struct expr *x = new_node(P, sizeof *x);
    if (x) {
        x->k = (uint8_t)k;
        x->line = cur(P)->line;
    }
    return x;
}

/* A growable array of pointers, copied into the arena when done. */
struct pvec {
    void **v;
    size_t n, cap;
};

static int pvec_push(struct parser *P, struct pvec *pv, void *x)
{
    if (pv->n == pv->cap) {
        size_t c = pv->cap ? pv->cap * 2 : 8;
        void **nv = realloc(pv->v, c * sizeof *nv);
        if (!nv)
            return err_set(P->e, ERR_NOMEM, "%s: out of memory parsing", P->name);
        pv->v = nv, pv->cap = c;
    }
    pv->v[pv->n++] = x;
    return 0;
}

static void *pvec_done(struct parser *P, struct pvec *pv, size_t elem)
{
    void *o = arena_alloc(P->mem, pv->n * elem + 1);
    if (o && pv->n)
        memcpy(o, pv->v, pv->n * elem);
    free(pv->v);
    pv->v = NULL;
    if (!o)
        err_set(P->e, ERR_NOMEM, "%s: out of memory parsing", P->name);
    return o;
}

static struct expr *parse_expr(struct parser *P, bool condexpr);
static struct expr *parse_unary(struct parser *P, bool filters);
static struct expr *parse_primary(struct parser *P);
static struct expr *parse_binary(struct parser *P, size_t level);

static int find_name(const char *const *names, struct sv s)
{
    for (int i = 0; names[i]; i++)
        if (sv_eq(s, names[i]))
            return i;
    return -1;
}

/* Call arguments after '(' : positional then keyword (name=value). */
static int parse_args(struct parser *P, struct expr *x)
{
    struct pvec pos = {0}, kwn = {0}, kwv = {0};
    int rc = 0;
    while (!is_op(P, ")")) {
        if (x->nargs + pos.n + kwn.n > 0 && (rc = expect_op(P, ",")))
            goto out;
        if (is_op(P, ")"))
            break;
        if (is_op(P, "*") || is_op(P, "**")) {
            rc = unsupported(P, "argument unpacking", cur(P)->s);
            goto out;
        }
        if (cur(P)->k == K_NAME && P->t[P->pos + 1].k == K_OP && sv_eq(P->t[P->pos + 1].s, "=")) {
            struct sv *n = arena_alloc(P->mem, sizeof *n);
            if (!n) {
                rc = err_set(P->e, ERR_NOMEM, "out of memory");
                goto out;
            }
            *n = cur(P)->s;
            P->pos += 2;
            struct expr *v = parse_expr(P, true);
            if (!v || (rc = pvec_push(P, &kwn, n)) || (rc = pvec_push(P, &kwv, v))) {
                rc = rc ? rc : (int)P->e->code;
                goto out;
            }
        } else {
            if (kwn.n) {
                rc = perr(P, "positional argument after a keyword argument");
                goto out;
            }
            struct expr *v = parse_expr(P, true);
            if (!v || (rc = pvec_push(P, &pos, v))) {
                rc = rc ? rc : (int)P->e->code;
                goto out;
            }
        }
    }
    P->pos++;
    x->nargs = pos.n;
    x->nkw = kwn.n;
    x->args = pvec_done(P, &pos, sizeof(void *));
    struct sv **names = pvec_done(P, &kwn, sizeof(void *));
    x->kwv = pvec_done(P, &kwv, sizeof(void *));
    if (!x->args || !names || !x->kwv)
        return P->e->code;
    x->kwn = arena_alloc(P->mem, (x->nkw + 1) * sizeof *x->kwn);
    if (!x->kwn)
        return err_set(P->e, ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < x->nkw; i++)
        x->kwn[i] = *names[i];
    return 0;
out:
    free(pos.v);
    free(kwn.v);
    free(kwv.v);
    return rc;
}

/* A node of kind k over a, named by the name token that follows. */
static struct expr *named(struct parser *P, int k, struct expr *a, const char *what)
{
    if (cur(P)->k != K_NAME) {
        perr(P, "expected %s name", what);
        return NULL;
    }
    struct expr *y = new_expr(P, k);
    if (!y)
        return NULL;
    y->a = a;
    y->name = cur(P)->s;
    P->pos++;
    return y;
}

static struct expr *parse_postfix(struct parser *P, struct expr *x)
{
    for (;;) {
        if (skip_op(P, ".")) {
            if (cur(P)->k == K_INT) {
                struct expr *y = new_expr(P, E_ITEM);
                if (!y)
                    return NULL;
                y->a = x;
                y->b = new_expr(P, E_LIT);
                if (!y->b)
                    return NULL;
                y->b->lit = mk_int(cur(P)->i);
                P->pos++;
                x = y;
                continue;
            }
            if (!(x = named(P, E_ATTR, x, "an attribute")))
                return NULL;
        } else if (skip_op(P, "[")) {
            struct expr *parts[3] = {0};
            int np = 0;
            bool slice = false;
            for (;;) {
                if (is_op(P, ":") || is_op(P, "]")) {
                    parts[np] = NULL;
                } else {
                    if (!(parts[np] = parse_expr(P, true)))
                        return NULL;
                }
                if (is_op(P, ":") && np < 2) {
                    P->pos++;
                    slice = true;
                    np++;
                    continue;
                }
                break;
            }
            if (is_op(P, ",")) {
                unsupported(P, "subscript", cur(P)->s);
                return NULL;
            }
            if (expect_op(P, "]"))
                return NULL;
            struct expr *y = new_expr(P, slice ? E_SLICE : E_ITEM);
            if (!y)
                return NULL;
            y->a = x;
            if (slice) {
                y->args = arena_alloc(P->mem, 3 * sizeof *y->args);
                if (!y->args) {
                    err_set(P->e, ERR_NOMEM, "out of memory");
                    return NULL;
                }
                memcpy(y->args, parts, sizeof parts);
                y->nargs = 3;
            } else {
                if (!parts[0]) {
                    perr(P, "empty subscript");
                    return NULL;
                }
                y->b = parts[0];
            }
            x = y;
        } else if (skip_op(P, "(")) {
            struct expr *y = new_expr(P, E_CALL);
            if (!y)
                return NULL;
            y->a = x;
            if (x->k == E_ATTR) {
                y->id = find_name(method_names, x->name);
                if (y->id < 0) {
                    unsupported(P, "method", x->name);
                    return NULL;
                }
            } else if (x->k == E_NAME) {
                if (P->ncalled == sizeof P->called / sizeof *P->called) {
                    unsupported(P, "more than 256 calls, at", x->name);
                    return NULL;
                }
                P->called_line[P->ncalled] = x->line;
                P->called[P->ncalled++] = x->name;
            } else {
                perr(P, "only names and methods can be called");
                return NULL;
            }
            if (parse_args(P, y))
                return NULL;
            x = y;
        } else {
            return x;
        }
    }
}

static struct expr *parse_filters(struct parser *P, struct expr *x)
{
    for (;;) {
        if (skip_op(P, "|")) {
            struct expr *y = named(P, E_FILTER, x, "a filter");
            if (!y)
                return NULL;
            y->id = find_name(filter_names, y->name);
            if (y->id < 0) {
                P->pos--;
                unsupported(P, "filter", y->name);
                return NULL;
            }
            if (skip_op(P, "(") && parse_args(P, y))
                return NULL;
            x = y;
        } else if (skip_name(P, "is")) {
            struct expr *y = new_expr(P, E_TEST);
            if (!y)
                return NULL;
            y->a = x;
            y->negate = skip_name(P, "not");
            if (cur(P)->k != K_NAME && !(cur(P)->k == K_OP && (sv_eq(cur(P)->s, "==") || sv_eq(cur(P)->s, "!=") ||
                                                               sv_eq(cur(P)->s, "<") || sv_eq(cur(P)->s, ">") ||
                                                               sv_eq(cur(P)->s, "<=") || sv_eq(cur(P)->s, ">=")))) {
                perr(P, "expected a test name after 'is'");
                return NULL;
            }
            y->name = cur(P)->s;
            y->id = find_name(test_names, y->name);
            if (y->id < 0) {
                unsupported(P, "test", y->name);
                return NULL;
            }
            P->pos++;
            if (skip_op(P, "(")) {
                if (parse_args(P, y))
                    return NULL;
            } else {
                struct tok *t = cur(P);
                bool arg = t->k == K_STR || t->k == K_INT || t->k == K_FLOAT ||
                           (t->k == K_OP && (sv_eq(t->s, "(") || sv_eq(t->s, "[") || sv_eq(t->s, "{"))) ||
                           (t->k == K_NAME && !sv_eq(t->s, "else") && !sv_eq(t->s, "or") && !sv_eq(t->s, "and") &&
                            !sv_eq(t->s, "if") && !sv_eq(t->s, "in") && !sv_eq(t->s, "not") && !sv_eq(t->s, "is"));
                if (arg) {
                    struct expr *v = parse_primary(P);
                    if (!v || !(v = parse_postfix(P, v)))
                        return NULL;
                    y->args = arena_alloc(P->mem, sizeof *y->args);
                    if (!y->args) {
                        err_set(P->e, ERR_NOMEM, "out of memory");
                        return NULL;
                    }
                    y->args[0] = v;
                    y->nargs = 1;
                }
            }
            x = y;
        } else if (is_op(P, "(")) {
            perr(P, "only names and methods can be called");
            return NULL;
        } else {
            return x;
        }
    }
}

/* Items of a list, tuple or dict literal up to the closing bracket. */
static struct expr *parse_seq(struct parser *P, int k, const char *close, struct expr *first)
{
    struct expr *x = new_expr(P, k);
    struct pvec pv = {0};
    if (!x)
        return NULL;
    if (first && pvec_push(P, &pv, first))
        return NULL;
    while (!is_op(P, close)) {
        if (pv.n && expect_op(P, ","))
            goto fail;
        if (is_op(P, close))
            break;
        struct expr *it = parse_expr(P, true);
        if (!it || pvec_push(P, &pv, it))
            goto fail;
        if (k == E_DICT) {
            if (expect_op(P, ":") || !(it = parse_expr(P, true)) || pvec_push(P, &pv, it))
                goto fail;
        }
    }
    P->pos++;
    x->nargs = pv.n;
    x->args = pvec_done(P, &pv, sizeof(void *));
    return x->args ? x : NULL;
fail:
    free(pv.v);
    return NULL;
}

static struct expr *parse_primary(struct parser *P)
{
    struct tok *t = cur(P);
    struct expr *x;
    if (++P->nest > TMPL_MAX_NEST) {
        perr(P, "expression nested deeper than %d", TMPL_MAX_NEST);
        return NULL;
    }
    if (t->k == K_NAME) {
        if (!(x = new_expr(P, E_LIT)))
            return NULL;
        if (sv_eq(t->s, "true") || sv_eq(t->s, "True")) {
            x->lit = mk_bool(true);
        } else if (sv_eq(t->s, "false") || sv_eq(t->s, "False")) {
            x->lit = mk_bool(false);
        } else if (sv_eq(t->s, "none") || sv_eq(t->s, "None")) {
            x->lit = mk_none();
        } else {
            x->k = E_NAME;
            x->name = t->s;
            if (P->in_macro && (sv_eq(t->s, "varargs") || sv_eq(t->s, "kwargs") || sv_eq(t->s, "caller"))) {
                unsupported(P, "macro variable", t->s);
                return NULL;
            }
        }
        P->pos++;
    } else if (t->k == K_STR) {
        if (!(x = new_expr(P, E_LIT)))
            return NULL;
        x->lit = mk_str(t->s.p, t->s.n);
        P->pos++;
        if (cur(P)->k == K_STR) { /* adjacent literals concatenate */
            size_t n = t->s.n;
            for (size_t j = P->pos; P->t[j].k == K_STR; j++)
                n += P->t[j].s.n;
            char *o = arena_alloc(P->mem, n + 1);
            if (!o) {
                err_set(P->e, ERR_NOMEM, "out of memory");
                return NULL;
            }
            memcpy(o, t->s.p, t->s.n);
            size_t m = t->s.n;
            for (; cur(P)->k == K_STR; P->pos++) {
                memcpy(o + m, cur(P)->s.p, cur(P)->s.n);
                m += cur(P)->s.n;
            }
            x->lit = mk_str(o, m);
        }
    } else if (t->k == K_INT || t->k == K_FLOAT) {
        if (!(x = new_expr(P, E_LIT)))
            return NULL;
        x->lit = t->k == K_INT ? mk_int(t->i) : mk_float(t->f);
        P->pos++;
    } else if (skip_op(P, "(")) {
        if (skip_op(P, ")")) {
            x = new_expr(P, E_TUPLE); /* () */
        } else {
            struct expr *first = parse_expr(P, true);
            if (!first)
                return NULL;
            if (is_op(P, ",")) {
                x = parse_seq(P, E_TUPLE, ")", first);
            } else {
                if (expect_op(P, ")"))
                    return NULL;
                x = first;
            }
        }
    } else if (skip_op(P, "[")) {
        x = parse_seq(P, E_LIST, "]", NULL);
    } else if (skip_op(P, "{")) {
        x = parse_seq(P, E_DICT, "}", NULL);
    } else {
        perr(P, "unexpected %s", t->k == K_OP ? "operator" : t->k == K_EOF ? "end of template" : "token");
        return NULL;
    }
    P->nest--;
    return x;
}

static struct expr *parse_unary(struct parser *P, bool filters)
{
    struct expr *x;
    if (is_op(P, "-") || is_op(P, "+")) {
        bool neg = is_op(P, "-");
        P->pos++;
        if (++P->nest > TMPL_MAX_NEST) {
            perr(P, "expression nested deeper than %d", TMPL_MAX_NEST);
            return NULL;
        }
        struct expr *a = parse_unary(P, false);
        P->nest--;
        if (!a || !(x = new_expr(P, neg ? E_NEG : E_POS)))
            return NULL;
        x->a = a;
    } else if (!(x = parse_primary(P))) {
        return NULL;
    }
    if (!(x = parse_postfix(P, x)))
        return NULL;
    return filters ? parse_filters(P, x) : x;
}

static struct expr *binary(struct parser *P, int k, int op, struct expr *a, struct expr *b)
{
    struct expr *x = b ? new_expr(P, k) : NULL;
    if (!x)
        return NULL;
    x->op = (uint8_t)op;
    x->a = a;
    x->b = b;
    return x;
}

/* The binary levels of jinja2's grammar, loosest first; parse_not and parse_compare sit between 1 and 2. */
static const struct level {
    int kind;
    bool word;
    const char *tok[4];
    int op[4];
} levels[] = {
    {E_OR, true, {"or"}, {0}},
    {E_AND, true, {"and"}, {0}},
    {E_BIN, false, {"+", "-"}, {B_ADD, B_SUB}},
    {E_CONCAT, false, {"~"}, {0}},
    {E_BIN, false, {"*", "/", "//", "%"}, {B_MUL, B_DIV, B_FDIV, B_MOD}},
    {E_BIN, false, {"**"}, {B_POW}},
};

static struct expr *parse_not(struct parser *P);

static struct expr *parse_operand(struct parser *P, size_t level)
{
    return level == 1 ? parse_not(P)
         : level + 1 < sizeof levels / sizeof *levels ? parse_binary(P, level + 1) : parse_unary(P, true);
}

static struct expr *parse_binary(struct parser *P, size_t level)
{
    const struct level *l = &levels[level];
    struct expr *x = parse_operand(P, level);
    while (x) {
        int k;
        for (k = 0; k < 4 && l->tok[k]; k++)
            if (l->word ? is_name(P, l->tok[k]) : is_op(P, l->tok[k]))
                break;
        if (k == 4 || !l->tok[k])
            return x;
        P->pos++;
        x = binary(P, l->kind, l->op[k], x, parse_operand(P, level));
    }
    return x;
}

static struct expr *parse_compare(struct parser *P)
{
    struct expr *x = parse_binary(P, 2);
    if (!x)
        return NULL;
    struct pvec ops = {0}, rhs = {0};
    for (;;) {
        int op = is_op(P, "==") ? C_EQ : is_op(P, "!=") ? C_NE : is_op(P, "<") ? C_LT : is_op(P, "<=") ? C_LE
               : is_op(P, ">") ? C_GT : is_op(P, ">=") ? C_GE : is_name(P, "in") ? C_IN : -1;
        if (op < 0 && is_name(P, "not") && P->t[P->pos + 1].k == K_NAME && sv_eq(P->t[P->pos + 1].s, "in")) {
            op = C_NOTIN;
            P->pos++;
        }
        if (op < 0)
            break;
        P->pos++;
        struct expr *b = parse_binary(P, 2);
        if (!b || pvec_push(P, &ops, (void *)(uintptr_t)op) || pvec_push(P, &rhs, b)) {
            free(ops.v);
            free(rhs.v);
            return NULL;
        }
    }
    if (!rhs.n)
        return x;
    struct expr *c = new_expr(P, E_CMP);
    if (!c) {
        free(ops.v);
        free(rhs.v);
        return NULL;
    }
    c->a = x;
    c->nargs = rhs.n;
    c->ops = arena_alloc(P->mem, ops.n);
    if (!c->ops) {
        free(ops.v);
        free(rhs.v);
        err_set(P->e, ERR_NOMEM, "out of memory");
        return NULL;
    }
    for (size_t i = 0; i < ops.n; i++)
        c->ops[i] = (uint8_t)(uintptr_t)ops.v[i];
    free(ops.v);
    c->args = pvec_done(P, &rhs, sizeof(void *));
    return c->args ? c : NULL;
}

static struct expr *parse_not(struct parser *P)
{
    if (skip_name(P, "not")) {
        if (++P->nest > TMPL_MAX_NEST) {
            perr(P, "expression nested deeper than %d", TMPL_MAX_NEST);
            return NULL;
        }
        struct expr *a = parse_not(P), *x = a ? new_expr(P, E_NOT) : NULL;
        P->nest--;
        if (x)
            x->a = a;
        return x;
    }
    return parse_compare(P);
}

static struct expr *parse_expr(struct parser *P, bool condexpr)
{
    if (++P->nest > TMPL_MAX_NEST) {
        perr(P, "expression nested deeper than %d", TMPL_MAX_NEST);
        return NULL;
    }
    struct expr *x = parse_binary(P, 0);
    while (condexpr && x && skip_name(P, "if")) {
        struct expr *c = new_expr(P, E_COND);
        if (!c || !(c->a = parse_binary(P, 0)))
            return NULL;
        c->b = x;
        if (skip_name(P, "else") && !(c->c = parse_expr(P, true)))
            return NULL;
        x = c;
    }
    P->nest--;
    return x;
}

/* An expression, or a tuple of them without brackets ("a, b"). */
static struct expr *parse_tuple(struct parser *P, bool condexpr)
{
    struct expr *x = parse_expr(P, condexpr);
    if (!x || !is_op(P, ","))
        return x;
    struct expr *t = new_expr(P, E_TUPLE);
    struct pvec pv = {0};
    if (!t || pvec_push(P, &pv, x))
        return NULL;
    while (skip_op(P, ",")) {
        if (cur(P)->k == K_BEND || cur(P)->k == K_VEND)
            break;
        struct expr *it = parse_expr(P, condexpr);
        if (!it || pvec_push(P, &pv, it)) {
            free(pv.v);
            return NULL;
        }
    }
    t->nargs = pv.n;
    t->args = pvec_done(P, &pv, sizeof(void *));
    return t->args ? t : NULL;
}

/* ---------------------------------------------------------------- statements */

static int parse_body(struct parser *P, struct body *b, const char *const *ends);

static struct stmt *new_stmt(struct parser *P, int k)
{
    struct stmt *s = new_node(P, sizeof *s);
    if (s) {
        s->k = (uint8_t)k;
        s->line = cur(P)->line;
    }
    return s;
}

static int expect_bend(struct parser *P)
{
    if (cur(P)->k != K_BEND)
        return perr(P, "expected the end of the statement ('%%}')");
    P->pos++;
    return 0;
}

static int parse_if(struct parser *P, struct stmt *s)
{
    static const char *const ends[] = {"elif", "else", "endif", NULL};
    if (!(s->x = parse_tuple(P, false)) || expect_bend(P) || parse_body(P, &s->body, ends))
        return P->e->code;
    /* parse_body stopped at {% elif|else|endif */
    if (skip_name(P, "elif")) {
        struct stmt *n = new_stmt(P, S_IF);
        if (!n)
            return P->e->code;
        s->orelse.n = 1;
        s->orelse.s = arena_alloc(P->mem, sizeof *s->orelse.s);
        if (!s->orelse.s)
            return err_set(P->e, ERR_NOMEM, "out of memory");
        s->orelse.s[0] = n;
        return parse_if(P, n);
    }
    if (skip_name(P, "else")) {
        static const char *const end[] = {"endif", NULL};
        if (expect_bend(P) || parse_body(P, &s->orelse, end))
            return P->e->code;
    }
    if (!skip_name(P, "endif"))
        return perr(P, "expected 'endif'");
    return expect_bend(P);
}

static int parse_stmt(struct parser *P, struct stmt **out)
{
    struct tok *t = cur(P);
    if (t->k != K_NAME)
        return perr(P, "expected a statement name after '{%%'");
    struct sv kw = t->s;
    struct stmt *s = NULL;
    P->pos++;
    if (sv_eq(kw, "if")) {
        if (!(s = new_stmt(P, S_IF)) || parse_if(P, s))
            return P->e->code;
    } else if (sv_eq(kw, "for")) {
        static const char *const ends[] = {"else", "endfor", NULL};
        struct sv targets[8];
        size_t nt = 0;
        if (!(s = new_stmt(P, S_FOR)))
            return P->e->code;
        bool paren = skip_op(P, "(");
        do {
            if (cur(P)->k != K_NAME || nt == 8)
                return perr(P, "expected up to 8 loop variable names");
            targets[nt++] = cur(P)->s;
            P->pos++;
        } while (skip_op(P, ","));
        if (paren && expect_op(P, ")"))
            return P->e->code;
        if (!skip_name(P, "in"))
            return perr(P, "expected 'in'");
        if (!(s->x = parse_tuple(P, false)))
            return P->e->code;
        if (is_name(P, "if") || is_name(P, "recursive"))
            return unsupported(P, "for-loop clause", cur(P)->s);
        s->targets = arena_alloc(P->mem, nt * sizeof *s->targets);
        if (!s->targets)
            return err_set(P->e, ERR_NOMEM, "out of memory");
        memcpy(s->targets, targets, nt * sizeof *targets);
        s->ntargets = nt;
        P->loops++;
        if (expect_bend(P) || parse_body(P, &s->body, ends))
            return P->e->code;
        P->loops--;
        if (skip_name(P, "else")) {
            static const char *const end[] = {"endfor", NULL};
            if (expect_bend(P) || parse_body(P, &s->orelse, end))
                return P->e->code;
        }
        if (!skip_name(P, "endfor"))
            return perr(P, "expected 'endfor'");
        if (expect_bend(P))
            return P->e->code;
    } else if (sv_eq(kw, "set")) {
        if (cur(P)->k != K_NAME)
            return perr(P, "expected a name after 'set'");
        if (!(s = new_stmt(P, S_SET)))
            return P->e->code;
        s->name = cur(P)->s;
        P->pos++;
        if (skip_op(P, ".")) {
            if (cur(P)->k != K_NAME)
                return perr(P, "expected an attribute name");
            s->k = S_SETATTR;
            s->attr = cur(P)->s;
            P->pos++;
        }
        if (is_op(P, ","))
            return unsupported(P, "statement", (struct sv){"set with several targets", 24});
        if (cur(P)->k == K_BEND)
            return unsupported(P, "statement", (struct sv){"set block", 9});
        if (expect_op(P, "=") || !(s->x = parse_tuple(P, true)) || expect_bend(P))
            return P->e->code;
    } else if (sv_eq(kw, "macro")) {
        static const char *const ends[] = {"endmacro", NULL};
        if (P->nest != 1)
            return unsupported(P, "statement", (struct sv){"macro inside a block", 20});
        if (cur(P)->k != K_NAME)
            return perr(P, "expected a macro name");
        if (!(s = new_stmt(P, S_MACRO)))
            return P->e->code;
        s->name = cur(P)->s;
        P->pos++;
        if (P->nmacros == sizeof P->macros / sizeof *P->macros)
            return unsupported(P, "more than 256 macros, at", s->name);
        P->macros[P->nmacros++] = s->name;
        if (expect_op(P, "("))
            return P->e->code;
        struct sv params[64];
        struct expr *defs[64];
        size_t np = 0;
        while (!skip_op(P, ")")) {
            if (np && expect_op(P, ","))
                return P->e->code;
            if (skip_op(P, ")"))
                break;
            if (cur(P)->k != K_NAME || np == 64)
                return perr(P, "expected up to 64 parameter names");
            params[np] = cur(P)->s;
            defs[np] = NULL;
            P->pos++;
            if (skip_op(P, "=") && !(defs[np] = parse_expr(P, true)))
                return P->e->code;
            if (!defs[np] && np && defs[np - 1])
                return perr(P, "non-default argument follows default argument");
            np++;
        }
        s->params = arena_alloc(P->mem, (np + 1) * sizeof *s->params);
        s->defaults = arena_alloc(P->mem, (np + 1) * sizeof *s->defaults);
        if (!s->params || !s->defaults)
            return err_set(P->e, ERR_NOMEM, "out of memory");
        memcpy(s->params, params, np * sizeof *params);
        memcpy(s->defaults, defs, np * sizeof *defs);
        s->nparams = np;
        if (expect_bend(P))
            return P->e->code;
        P->in_macro = true;
        int saved = P->loops;
        P->loops = 0;
        if (parse_body(P, &s->body, ends))
            return P->e->code;
        P->loops = saved;
        P->in_macro = false;
        P->pos++; /* endmacro */
        if (cur(P)->k == K_NAME)
            P->pos++; /* {% endmacro name %} */
        if (expect_bend(P))
            return P->e->code;
    } else if (sv_eq(kw, "break") || sv_eq(kw, "continue")) {
        if (!P->loops)
            return perr(P, "'%.*s' outside a loop", (int)kw.n, kw.p);
        if (!(s = new_stmt(P, sv_eq(kw, "break") ? S_BREAK : S_CONTINUE)) || expect_bend(P))
            return P->e->code;
    } else {
        P->pos--;
        return unsupported(P, "statement", kw);
    }
    *out = s;
    return 0;
}

/* Statements up to EOF (ends NULL) or up to a {% name %} with name in ends, left at that name. */
static int parse_body(struct parser *P, struct body *b, const char *const *ends)
{
    struct pvec pv = {0};
    int rc = 0;
    if (++P->nest > TMPL_MAX_NEST) {
        rc = perr(P, "blocks nested deeper than %d", TMPL_MAX_NEST);
        goto out;
    }
    for (;;) {
        struct tok *t = cur(P);
        struct stmt *s = NULL;
        if (t->k == K_EOF) {
            if (ends) {
                size_t last = 0;
                while (ends[last + 1])
                    last++;
                rc = perr(P, "unexpected end of template: expected '%s'", ends[last]);
                goto out;
            }
            break;
        }
        if (t->k == K_TEXT) {
            if (!(s = new_stmt(P, S_TEXT))) {
                rc = P->e->code;
                goto out;
            }
            s->text = t->s;
            P->pos++;
        } else if (t->k == K_VBEGIN) {
            P->pos++;
            if (!(s = new_stmt(P, S_OUT)) || !(s->x = parse_tuple(P, true))) {
                rc = P->e->code;
                goto out;
            }
            if (cur(P)->k != K_VEND) {
                rc = perr(P, "expected '}}'");
                goto out;
            }
            P->pos++;
        } else if (t->k == K_BBEGIN) {
            P->pos++;
            if (ends && cur(P)->k == K_NAME && find_name(ends, cur(P)->s) >= 0)
                break;
            if (cur(P)->k == K_NAME && (sv_eq(cur(P)->s, "endif") || sv_eq(cur(P)->s, "endfor") ||
                                         sv_eq(cur(P)->s, "endmacro") || sv_eq(cur(P)->s, "elif") ||
                                         sv_eq(cur(P)->s, "else"))) {
                rc = perr(P, "unexpected '%.*s'", (int)cur(P)->s.n, cur(P)->s.p);
                goto out;
            }
            if ((rc = parse_stmt(P, &s)))
                goto out;
        } else {
            rc = perr(P, "unexpected token");
            goto out;
        }
        if ((rc = pvec_push(P, &pv, s)))
            goto out;
    }
    P->nest--;
    b->n = pv.n;
    b->s = pvec_done(P, &pv, sizeof(void *));
    return b->s ? 0 : P->e->code;
out:
    free(pv.v);
    return rc;
}

/* ---------------------------------------------------------------- runtime */

struct frame {
    struct frame *parent;
    struct dict *vars; /* names (str values) -> values */
};

struct rt {
    struct arena mem;
    struct err *e;
    const char *tname;
    uint64_t steps;
    int depth;
    size_t bufmem;
    struct frame *top;
};

struct buf {
    char *p;
    size_t n, cap;
};

static int rterr(struct rt *R, enum err_code code, int line, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int rterr(struct rt *R, enum err_code code, int line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    verr(R->e, code, R->tname, line, fmt, ap);
    va_end(ap);
    return -1;
}

static int oom(struct rt *R, int line)
{
    return rterr(R, ERR_NOMEM, line, "rendering needs more than %llu bytes of memory: refused",
                 (unsigned long long)TMPL_MAX_MEMORY);
}

static void *ralloc(struct rt *R, size_t n, int line)
{
    if (R->bufmem > TMPL_MAX_MEMORY / 2) {
        oom(R, line);
        return NULL;
    }
    void *p = arena_alloc(&R->mem, n);
    if (!p)
        oom(R, line);
    return p;
}

static int buf_put(struct rt *R, struct buf *b, const char *s, size_t n, int line)
{
    if (n > TMPL_MAX_OUTPUT || b->n > TMPL_MAX_OUTPUT - n)
        return rterr(R, ERR_RANGE, line, "output over %u bytes: refused", TMPL_MAX_OUTPUT);
    if (b->n + n + 1 > b->cap) {
        size_t c = b->cap ? b->cap : 256;
        while (c < b->n + n + 1)
            c *= 2;
        if (R->bufmem + (c - b->cap) > TMPL_MAX_MEMORY / 2)
            return oom(R, line);
        char *p = realloc(b->p, c);
        if (!p)
            return oom(R, line);
        R->bufmem += c - b->cap;
        b->p = p, b->cap = c;
    }
    if (n)
        memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
    return 0;
}

static void buf_release(struct rt *R, struct buf *b)
{
    R->bufmem -= b->cap;
    free(b->p);
    b->p = NULL;
    b->n = b->cap = 0;
}

static int buf_cstr(struct rt *R, struct buf *b, const char *s, int line) { return buf_put(R, b, s, strlen(s), line); }

/* A buffer's bytes as a string value in the arena; the buffer is released. */
static int buf_to_val(struct rt *R, struct buf *b, struct val *out, int line)
{
    char *p = ralloc(R, b->n + 1, line);
    if (!p) {
        buf_release(R, b);
        return -1;
    }
    if (b->n)
        memcpy(p, b->p, b->n);
    *out = mk_str(p, b->n);
    buf_release(R, b);
    return 0;
}

/* Python's repr(float): the shortest digits that round-trip; fixed notation for
 * exponents -4..15 (always with a fraction), else d.ddde+XX. */
static void float_repr(double f, char *o, size_t on)
{
    if (isnan(f)) {
        snprintf(o, on, "nan");
        return;
    }
    if (isinf(f)) {
        snprintf(o, on, f < 0 ? "-inf" : "inf");
        return;
    }
    char e[40];
    int p;
    for (p = 1; p <= 17; p++) {
        snprintf(e, sizeof e, "%.*e", p - 1, f);
        if (strtod(e, NULL) == f)
            break;
    }
    /* e: [-]d[.ddd]e[+-]XX */
    const char *s = e;
    bool neg = *s == '-';
    if (neg)
        s++;
    char digits[20];
    int nd = 0;
    for (; *s && *s != 'e'; s++)
        if (*s != '.')
            digits[nd++] = *s;
    int exp = atoi(s + 1);
    while (nd > 1 && digits[nd - 1] == '0')
        nd--;
    char *w = o;
    if (neg)
        *w++ = '-';
    if (exp >= -4 && exp < 16) {
        if (exp < 0) {
            *w++ = '0', *w++ = '.';
            for (int i = 0; i < -exp - 1; i++)
                *w++ = '0';
            for (int i = 0; i < nd; i++)
                *w++ = digits[i];
        } else {
            for (int i = 0; i <= exp; i++)
                *w++ = i < nd ? digits[i] : '0';
            *w++ = '.';
            if (nd > exp + 1)
                for (int i = exp + 1; i < nd; i++)
                    *w++ = digits[i];
            else
                *w++ = '0';
        }
        *w = 0;
    } else {
        *w++ = digits[0];
        if (nd > 1) {
            *w++ = '.';
            for (int i = 1; i < nd; i++)
                *w++ = digits[i];
        }
        snprintf(w, on - (size_t)(w - o), "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    }
}

static const char *type_name(const struct val *v)
{
    static const char *const lk_names[] = {"list", "tuple", "generator", "dict_items", "dict_keys", "dict_values",
                                           "range"};
    switch (v->t) {
    case V_UNDEF: return "Undefined";
    case V_NONE: return "NoneType";
    case V_BOOL: return "bool";
    case V_INT: return "int";
    case V_FLOAT: return "float";
    case V_STR: return "str";
    case V_LIST: return lk_names[v->k];
    case V_DICT: return "dict";
    case V_NS: return "Namespace";
    case V_LOOP: return "LoopContext";
    case V_MACRO: return "Macro";
    case V_METHOD: return "method";
    default: return "function";
    }
}

static int py_repr(struct rt *R, const struct val *v, struct buf *b, int line);

/* An escape of code point c into tmp: its length; 0 where c stands as itself; -1 where not modelled. */
typedef int (*escaper)(uint32_t c, char q, bool ascii, char *tmp);

/* Python's repr: the quote and backslash, \n \r \t, the other unprintable code points as \xNN, \uNNNN, \UNNNNNNNN. */
static int esc_repr(uint32_t c, char q, bool ascii, char *tmp)
{
    (void)ascii;
    if (c == (uint32_t)q || c == '\\' || c == '\n' || c == '\r' || c == '\t') {
        tmp[0] = '\\';
        tmp[1] = c == '\n' ? 'n' : c == '\r' ? 'r' : c == '\t' ? 't' : (char)c;
        return 2;
    }
    int pr = py_printable(c);
    if (pr)
        return pr < 0 ? -1 : 0;
    return snprintf(tmp, 16, c < 0x100 ? "\\x%02x" : c < 0x10000 ? "\\u%04x" : "\\U%08x", (unsigned)c);
}

/* json.dumps: " \\ \n \r \t \b \f, other controls (and with ensure_ascii all but printable ASCII) as \\uXXXX. */
static int esc_json(uint32_t c, char q, bool ascii, char *tmp)
{
    static const char from[] = "\"\\\n\r\t\b\f", to[] = "\"\\nrtbf";
    (void)q;
    const char *f = c && c < 0x80 ? strchr(from, (int)c) : NULL;
    if (f) {
        tmp[0] = '\\', tmp[1] = to[f - from];
        return 2;
    }
    if (!(c < 0x20 || (ascii && c > 0x7E)))
        return 0;
    if (c < 0x10000)
        return snprintf(tmp, 16, "\\u%04x", (unsigned)c);
    uint32_t v = c - 0x10000;
    return snprintf(tmp, 16, "\\u%04x\\u%04x", (unsigned)(0xD800 + (v >> 10)), (unsigned)(0xDC00 + (v & 0x3FF)));
}

/* s between quotes q, each code point through esc. */
static int quoted(struct rt *R, struct sv s, char q, escaper esc, bool ascii, struct buf *b, int line)
{
    if (buf_put(R, b, &q, 1, line))
        return -1;
    for (size_t i = 0; i < s.n;) {
        size_t st = i;
        uint32_t c = utf8_next(s.p, s.n, &i);
        char tmp[16];
        int on = esc(c, q, ascii, tmp);
        if (on < 0)
            return rterr(R, ERR_UNSUPPORTED, line,
                         "repr of a string with U+%04X: its Python printability is not in gempack's table", (unsigned)c);
        if (on ? buf_put(R, b, tmp, (size_t)on, line) : buf_put(R, b, s.p + st, i - st, line))
            return -1;
    }
    return buf_put(R, b, &q, 1, line);
}

/* Python's repr of a str. */
static int str_repr(struct rt *R, struct sv s, struct buf *b, int line)
{
    bool sq = memchr(s.p, '\'', s.n) != NULL, dq = memchr(s.p, '"', s.n) != NULL;
    return quoted(R, s, sq && !dq ? '"' : '\'', esc_repr, false, b, line);
}

/* Python's str(v). */
static int py_str(struct rt *R, const struct val *v, struct buf *b, int line)
{
    char tmp[64];
    switch (v->t) {
    case V_UNDEF: return 0;
    case V_STR: return buf_put(R, b, v->s.p, v->s.n, line);
    case V_NONE: return buf_cstr(R, b, "None", line);
    case V_BOOL: return buf_cstr(R, b, v->b ? "True" : "False", line);
    case V_INT:
        snprintf(tmp, sizeof tmp, "%lld", (long long)v->i);
        return buf_cstr(R, b, tmp, line);
    case V_FLOAT:
        float_repr(v->f, tmp, sizeof tmp);
        return buf_cstr(R, b, tmp, line);
    default: return py_repr(R, v, b, line);
    }
}

static int py_repr(struct rt *R, const struct val *v, struct buf *b, int line)
{
    if (v->t == V_STR)
        return str_repr(R, v->s, b, line);
    if (v->t == V_UNDEF)
        return buf_cstr(R, b, "Undefined", line);
    if (v->t == V_DICT) {
        if (buf_cstr(R, b, "{", line))
            return -1;
        for (size_t i = 0; i < v->d->n; i++)
            if ((i && buf_cstr(R, b, ", ", line)) || py_repr(R, &v->d->k[i], b, line) || buf_cstr(R, b, ": ", line) ||
                py_repr(R, &v->d->v[i], b, line))
                return -1;
        return buf_cstr(R, b, "}", line);
    }
    if (v->t == V_LIST) {
        const struct list *l = v->l;
        if (v->k == L_RANGE) {
            char tmp[96];
            if (l->step == 1)
                snprintf(tmp, sizeof tmp, "range(%lld, %lld)", (long long)l->start, (long long)l->stop);
            else
                snprintf(tmp, sizeof tmp, "range(%lld, %lld, %lld)", (long long)l->start, (long long)l->stop,
                         (long long)l->step);
            return buf_cstr(R, b, tmp, line);
        }
        if (v->k == L_GEN)
            return rterr(R, ERR_UNSUPPORTED, line, "printing a generator (its address): not supported");
        static const char *const pre[] = {"[", "(", "", "dict_items([", "dict_keys([", "dict_values(["};
        static const char *const post[] = {"]", ")", "", "])", "])", "])"};
        if (buf_cstr(R, b, pre[v->k], line))
            return -1;
        for (size_t i = 0; i < l->n; i++)
            if ((i && buf_cstr(R, b, ", ", line)) || py_repr(R, &l->v[i], b, line))
                return -1;
        if (v->k == L_TUPLE && l->n == 1 && buf_cstr(R, b, ",", line))
            return -1;
        return buf_cstr(R, b, post[v->k], line);
    }
    if (v->t <= V_FLOAT)
        return py_str(R, v, b, line);
    return rterr(R, ERR_UNSUPPORTED, line, "printing a %s object: not supported", type_name(v));
}

/* str(v) as a string value (no copy for a str). */
static int to_sv(struct rt *R, const struct val *v, struct sv *out, int line)
{
    if (v->t == V_STR) {
        *out = v->s;
        return 0;
    }
    if (v->t == V_UNDEF) {
        *out = (struct sv){"", 0};
        return 0;
    }
    struct buf b = {0};
    struct val s;
    if (py_str(R, v, &b, line)) {
        buf_release(R, &b);
        return -1;
    }
    if (buf_to_val(R, &b, &s, line))
        return -1;
    *out = s.s;
    return 0;
}

static bool truthy(const struct val *v)
{
    switch (v->t) {
    case V_UNDEF:
    case V_NONE: return false;
    case V_BOOL: return v->b;
    case V_INT: return v->i != 0;
    case V_FLOAT: return v->f != 0;
    case V_STR: return v->s.n != 0;
    case V_LIST: return v->k == L_GEN || v->l->n != 0;
    case V_DICT: return v->d->n != 0;
    default: return true;
    }
}

static bool is_num(const struct val *v) { return v->t == V_BOOL || v->t == V_INT || v->t == V_FLOAT; }
static int64_t as_int(const struct val *v) { return v->t == V_BOOL ? v->b : v->i; }

/* int vs float, exactly as Python compares them: -1, 0, 1, or 2 when unordered (nan). */
static int cmp_int_float(int64_t i, double f)
{
    if (isnan(f))
        return 2;
    if (f >= 9223372036854775808.0)
        return -1;
    if (f < -9223372036854775808.0)
        return 1;
    double fl = floor(f);
    int64_t fi = (int64_t)fl;
    if (i != fi)
        return i < fi ? -1 : 1;
    return fl == f ? 0 : -1;
}

static int num_cmp(const struct val *a, const struct val *b)
{
    if (a->t != V_FLOAT && b->t != V_FLOAT) {
        int64_t x = as_int(a), y = as_int(b);
        return x < y ? -1 : x > y;
    }
    if (a->t == V_FLOAT && b->t == V_FLOAT)
        return a->f < b->f ? -1 : a->f > b->f ? 1 : a->f == b->f ? 0 : 2;
    if (a->t == V_FLOAT) {
        int r = cmp_int_float(as_int(b), a->f);
        return r == 2 ? 2 : -r;
    }
    return cmp_int_float(as_int(a), b->f);
}

static int sv_cmp(struct sv a, struct sv b)
{
    size_t n = a.n < b.n ? a.n : b.n;
    int r = n ? memcmp(a.p, b.p, n) : 0;
    return r ? (r < 0 ? -1 : 1) : a.n < b.n ? -1 : a.n > b.n;
}

static bool dict_find(const struct dict *d, const struct val *k, size_t *at);

/* Python's ==. */
static bool py_eq(const struct val *a, const struct val *b)
{
    if (is_num(a) && is_num(b))
        return num_cmp(a, b) == 0;
    if (a->t != b->t)
        return false;
    switch (a->t) {
    case V_UNDEF:
    case V_NONE: return true;
    case V_STR: return sv_same(a->s, b->s);
    case V_LIST:
        if (a->k != b->k || a->k == L_GEN)
            return a->l == b->l;
        if (a->k == L_RANGE)
            return a->l->n == b->l->n && (a->l->n == 0 || (a->l->start == b->l->start && (a->l->n == 1 || a->l->step == b->l->step)));
        if (a->l->n != b->l->n)
            return false;
        for (size_t i = 0; i < a->l->n; i++)
            if (!py_eq(&a->l->v[i], &b->l->v[i]))
                return false;
        return true;
    case V_DICT:
        if (a->d->n != b->d->n)
            return false;
        for (size_t i = 0; i < a->d->n; i++) {
            size_t j;
            if (!dict_find(b->d, &a->d->k[i], &j) || !py_eq(&a->d->v[i], &b->d->v[j]))
                return false;
        }
        return true;
    case V_NS: return a->d == b->d;
    case V_LOOP: return a->lp == b->lp;
    case V_MACRO: return a->mc == b->mc;
    case V_METHOD: return a->m == b->m;
    default: return a->fn == b->fn;
    }
}

static bool dict_find(const struct dict *d, const struct val *k, size_t *at)
{
    for (size_t i = 0; i < d->n; i++)
        if (py_eq(&d->k[i], k)) {
            *at = i;
            return true;
        }
    return false;
}

static bool hashable(const struct val *v)
{
    if (v->t == V_LIST) {
        if (v->k != L_TUPLE)
            return v->k == L_RANGE || v->k == L_GEN;
        for (size_t i = 0; i < v->l->n; i++)
            if (!hashable(&v->l->v[i]))
                return false;
        return true;
    }
    return v->t != V_DICT;
}

static int undefined_err(struct rt *R, const struct val *v, int line)
{
    return rterr(R, ERR_FORMAT, line, "'%s' is undefined", v->name ? v->name : "value");
}

/* Python's <, as -1/0/1; an error where Python raises TypeError. */
static int py_cmp(struct rt *R, const struct val *a, const struct val *b, int *out, int line)
{
    if (is_num(a) && is_num(b)) {
        *out = num_cmp(a, b);
        return 0;
    }
    if (a->t == V_STR && b->t == V_STR) {
        *out = sv_cmp(a->s, b->s);
        return 0;
    }
    if (a->t == V_LIST && b->t == V_LIST && a->k == b->k && (a->k == L_LIST || a->k == L_TUPLE)) {
        size_t n = a->l->n < b->l->n ? a->l->n : b->l->n;
        for (size_t i = 0; i < n; i++) {
            if (py_eq(&a->l->v[i], &b->l->v[i]))
                continue;
            return py_cmp(R, &a->l->v[i], &b->l->v[i], out, line);
        }
        *out = a->l->n < b->l->n ? -1 : a->l->n > b->l->n;
        return 0;
    }
    if (a->t == V_UNDEF || b->t == V_UNDEF)
        return undefined_err(R, a->t == V_UNDEF ? a : b, line);
    return rterr(R, ERR_FORMAT, line, "'<' not supported between instances of '%s' and '%s'", type_name(a),
                 type_name(b));
}

/* ---------------------------------------------------------------- containers */

static struct val mk_list(struct rt *R, int kind, size_t n, int line, struct val **items)
{
    struct val v = {.t = V_UNDEF};
    struct list *l = ralloc(R, sizeof *l, line);
    struct val *it = l && n ? ralloc(R, n * sizeof *it, line) : NULL;
    if (!l || (n && !it))
        return v;
    memset(l, 0, sizeof *l);
    l->n = n;
    l->v = it;
    *items = it;
    v.t = V_LIST;
    v.k = (uint8_t)kind;
    v.l = l;
    return v;
}

static struct dict *new_dict(struct rt *R, int line)
{
    struct dict *d = ralloc(R, sizeof *d, line);
    if (d)
        memset(d, 0, sizeof *d);
    return d;
}

static int dict_set(struct rt *R, struct dict *d, struct val k, struct val v, int line)
{
    size_t at;
    if (dict_find(d, &k, &at)) {
        d->v[at] = v;
        return 0;
    }
    if (d->n == d->cap) {
        size_t c = d->cap ? d->cap * 2 : 4;
        struct val *nk = ralloc(R, c * sizeof *nk, line), *nv = ralloc(R, c * sizeof *nv, line);
        if (!nk || !nv)
            return -1;
        if (d->n) {
            memcpy(nk, d->k, d->n * sizeof *nk);
            memcpy(nv, d->v, d->n * sizeof *nv);
        }
        d->k = nk, d->v = nv, d->cap = c;
    }
    d->k[d->n] = k;
    d->v[d->n++] = v;
    return 0;
}

/* The items iterating v yields (Python's iter()), materialized. */
static int iterate(struct rt *R, const struct val *v, struct val **items, size_t *n, int line)
{
    switch (v->t) {
    case V_UNDEF:
        *items = NULL, *n = 0;
        return 0;
    case V_LIST:
        if (v->k == L_RANGE && !v->l->v && v->l->n) {
            struct val *it = ralloc(R, v->l->n * sizeof *it, line);
            if (!it)
                return -1;
            for (size_t i = 0; i < v->l->n; i++)
                it[i] = mk_int(v->l->start + (int64_t)i * v->l->step);
            v->l->v = it;
        }
        *items = v->l->v, *n = v->l->n;
        return 0;
    case V_DICT:
        *items = v->d->k, *n = v->d->n;
        return 0;
    case V_STR: {
        size_t cnt = 0;
        for (size_t i = 0; i < v->s.n; cnt++)
            utf8_next(v->s.p, v->s.n, &i);
        struct val *it = cnt ? ralloc(R, cnt * sizeof *it, line) : NULL;
        if (cnt && !it)
            return -1;
        size_t k = 0;
        for (size_t i = 0; i < v->s.n; k++) {
            size_t st = i;
            utf8_next(v->s.p, v->s.n, &i);
            it[k] = mk_str(v->s.p + st, i - st);
        }
        *items = it, *n = cnt;
        return 0;
    }
    default:
        return rterr(R, ERR_FORMAT, line, "'%s' object is not iterable", type_name(v));
    }
}


/* Python attribute names of the builtin types that are not modelled here: reading them is refused. */
static bool python_attr(const struct val *v, struct sv name)
{
    static const char *const str_attrs[] = {"capitalize", "casefold", "center", "count", "encode", "expandtabs",
        "find", "format", "format_map", "index", "isalnum", "isalpha", "isascii", "isdecimal", "isdigit",
        "isidentifier", "islower", "isnumeric", "isprintable", "isspace", "istitle", "isupper", "join", "ljust",
        "maketrans", "partition", "removeprefix", "removesuffix", "rfind", "rindex", "rjust", "rpartition", "rsplit",
        "splitlines", "swapcase", "title", "translate", "zfill", NULL};
    static const char *const dict_attrs[] = {"copy", "fromkeys", NULL};
    static const char *const list_attrs[] = {"copy", "count", "index", "pop", "clear", NULL};
    static const char *const num_attrs[] = {"as_integer_ratio", "bit_count", "bit_length", "conjugate", "denominator",
        "from_bytes", "imag", "numerator", "real", "to_bytes", "fromhex", "hex", "is_integer", NULL};
    switch (v->t) {
    case V_STR: return find_name(str_attrs, name) >= 0;
    case V_DICT: return find_name(dict_attrs, name) >= 0;
    case V_LIST: return find_name(list_attrs, name) >= 0;
    case V_BOOL:
    case V_INT:
    case V_FLOAT: return find_name(num_attrs, name) >= 0;
    default: return false;
    }
}

/* Methods modelled here, by receiver type; mutating ones (the sandbox refuses them) read as undefined. */
static int method_of(const struct val *v, struct sv name)
{
    int id = find_name(method_names, name);
    if (id < 0)
        return -1;
    if (v->t == V_STR)
        return id <= M_REPLACE ? id : -1;
    if (v->t == V_DICT)
        return id >= M_GET ? id : -1;
    return -1;
}

static bool mutating(const struct val *v, struct sv name)
{
    static const char *const d[] = {"clear", "pop", "popitem", "setdefault", "update", NULL};
    static const char *const l[] = {"append", "extend", "insert", "remove", "reverse", "sort", NULL}; /* jinja2's list */
    if (name.n >= 1 && name.p[0] == '_')
        return name.n >= 4 && name.p[1] == '_' && name.p[name.n - 1] == '_' && name.p[name.n - 2] == '_';
    return (v->t == V_DICT && find_name(d, name) >= 0) || (v->t == V_LIST && v->k == L_LIST && find_name(l, name) >= 0);
}

/* getattr(obj, name) as Python says it exists: a method, a namespace or loop attribute; 1 found, 0 not. */
static int py_getattr(struct rt *R, const struct val *o, struct sv name, struct val *out, int line)
{
    if (mutating(o, name)) {
        *out = mk_undef(NULL);
        return 1;
    }
    int m = method_of(o, name);
    if (m >= 0) {
        struct method *mm = ralloc(R, sizeof *mm, line);
        if (!mm)
            return -1;
        mm->recv = *o;
        mm->id = m;
        *out = (struct val){.t = V_METHOD, .m = mm};
        return 1;
    }
    if (python_attr(o, name))
        return rterr(R, ERR_UNSUPPORTED, line, "attribute '%.*s' of a %s: not supported", (int)name.n, name.p,
                     type_name(o));
    if (o->t == V_NS) {
        struct val k = mk_str(name.p, name.n);
        size_t at;
        if (dict_find(o->d, &k, &at)) {
            *out = o->d->v[at];
            return 1;
        }
        return 0;
    }
    if (o->t == V_LOOP) {
        const struct loopv *lp = o->lp;
        static const char *const names[] = {"index", "index0", "revindex", "revindex0", "first", "last", "length",
                                            "depth", "depth0", "previtem", "nextitem", NULL};
        switch (find_name(names, name)) {
        case 0: *out = mk_int(lp->index0 + 1); return 1;
        case 1: *out = mk_int(lp->index0); return 1;
        case 2: *out = mk_int(lp->length - lp->index0); return 1;
        case 3: *out = mk_int(lp->length - lp->index0 - 1); return 1;
        case 4: *out = mk_bool(lp->index0 == 0); return 1;
        case 5: *out = mk_bool(lp->index0 == lp->length - 1); return 1;
        case 6: *out = mk_int(lp->length); return 1;
        case 7: *out = mk_int(1); return 1;
        case 8: *out = mk_int(0); return 1;
        case 9: *out = lp->prev; return 1;
        case 10: *out = lp->next; return 1;
        default:
            if (sv_eq(name, "cycle") || sv_eq(name, "changed"))
                return rterr(R, ERR_UNSUPPORTED, line, "loop.%.*s: not supported", (int)name.n, name.p);
            return 0;
        }
    }
    return 0;
}

/* obj[key] as Python says it exists; 1 found, 0 not (KeyError, IndexError, TypeError). */
static int py_getitem(struct rt *R, const struct val *o, const struct val *k, struct val *out, int line)
{
    if (o->t == V_DICT) {
        size_t at;
        if (hashable(k) && dict_find(o->d, k, &at)) {
            *out = o->d->v[at];
            return 1;
        }
        return 0;
    }
    if ((o->t == V_LIST && (o->k == L_LIST || o->k == L_TUPLE || o->k == L_RANGE)) || o->t == V_STR) {
        if (k->t != V_INT && k->t != V_BOOL)
            return 0;
        int64_t i = as_int(k);
        if (o->t == V_STR) {
            size_t cnt = 0;
            for (size_t j = 0; j < o->s.n; cnt++)
                utf8_next(o->s.p, o->s.n, &j);
            if (i < 0)
                i += (int64_t)cnt;
            if (i < 0 || i >= (int64_t)cnt)
                return 0;
            size_t j = 0;
            for (int64_t c = 0; c < i; c++)
                utf8_next(o->s.p, o->s.n, &j);
            size_t st = j;
            utf8_next(o->s.p, o->s.n, &j);
            *out = mk_str(o->s.p + st, j - st);
            return 1;
        }
        int64_t n = (int64_t)o->l->n;
        if (i < 0)
            i += n;
        if (i < 0 || i >= n)
            return 0;
        *out = o->k == L_RANGE ? mk_int(o->l->start + i * o->l->step) : o->l->v[i];
        return 1;
    }
    return 0;
}

/* jinja2's sandboxed environment getattr (obj.name) and getitem (obj[key]). */
static int env_getattr(struct rt *R, const struct val *o, struct sv name, struct val *out, int line)
{
    if (o->t == V_UNDEF)
        return undefined_err(R, o, line);
    int r = py_getattr(R, o, name, out, line);
    if (r)
        return r < 0 ? -1 : 0;
    struct val k = mk_str(name.p, name.n);
    if ((r = py_getitem(R, o, &k, out, line)))
        return r < 0 ? -1 : 0;
    *out = mk_undef(NULL);
    return 0;
}

static int env_getitem(struct rt *R, const struct val *o, const struct val *k, struct val *out, int line)
{
    if (o->t == V_UNDEF)
        return undefined_err(R, o, line);
    int r = py_getitem(R, o, k, out, line);
    if (r)
        return r < 0 ? -1 : 0;
    if (k->t == V_STR && (r = py_getattr(R, o, k->s, out, line)))
        return r < 0 ? -1 : 0;
    *out = mk_undef(NULL);
    return 0;
}

/* Python's len(); -1 (with the error set) where Python raises. */
static int py_len(struct rt *R, const struct val *v, int64_t *n, int line)
{
    switch (v->t) {
    case V_UNDEF: *n = 0; return 0;
    case V_STR: {
        int64_t c = 0;
        for (size_t i = 0; i < v->s.n; c++)
            utf8_next(v->s.p, v->s.n, &i);
        *n = c;
        return 0;
    }
    case V_LIST:
        if (v->k != L_GEN) {
            *n = (int64_t)v->l->n;
            return 0;
        }
        break;
    case V_DICT: *n = (int64_t)v->d->n; return 0;
    default: break;
    }
    return rterr(R, ERR_FORMAT, line, "object of type '%s' has no len()", type_name(v));
}

/* ---------------------------------------------------------------- strings */

static bool in_chars(uint32_t c, const struct sv *chars)
{
    if (!chars)
        return py_isspace(c);
    for (size_t i = 0; i < chars->n;)
        if (utf8_next(chars->p, chars->n, &i) == c)
            return true;
    return false;
}

/* str.strip / lstrip / rstrip with chars (NULL: Python's whitespace). */
static struct sv sv_strip(struct sv s, const struct sv *chars, bool left, bool right)
{
    size_t a = 0, b = s.n;
    if (left)
        while (a < b) {
            size_t i = a;
            if (!in_chars(utf8_next(s.p, s.n, &i), chars))
                break;
            a = i;
        }
    if (right) {
        size_t end = a;
        for (size_t i = a; i < b;) {
            if (!in_chars(utf8_next(s.p, b, &i), chars))
                end = i;
        }
        b = end;
    }
    return (struct sv){s.p + a, b - a};
}

static int sv_case(struct rt *R, struct sv s, bool upper, struct val *out, int line)
{
    char *o = ralloc(R, s.n * 2 + 1, line);
    if (!o)
        return -1;
    size_t m = 0;
    for (size_t i = 0; i < s.n;) {
        uint32_t c = utf8_next(s.p, s.n, &i);
        size_t on;
        if (!case_map(c, upper, o + m, &on))
            return rterr(R, ERR_UNSUPPORTED, line, "%s() of U+%04X: Python's case mapping of it is not in gempack's table",
                         upper ? "upper" : "lower", (unsigned)c);
        m += on;
    }
    *out = mk_str(o, m);
    return 0;
}

static const char *sv_find(struct sv h, struct sv n, size_t from)
{
    if (n.n == 0)
        return h.p + from;
    for (size_t i = from; i + n.n <= h.n; i++)
        if (h.p[i] == n.p[0] && !memcmp(h.p + i, n.p, n.n))
            return h.p + i;
    return NULL;
}

/* str.split(sep, maxsplit): sep NULL splits on whitespace runs. */
static int sv_split(struct rt *R, struct sv s, const struct sv *sep, int64_t maxsplit, struct val *out, int line)
{
    struct val *parts = NULL;
    size_t np = 0, cap = 0;
    for (int pass = 0; pass < 2; pass++) {
        np = 0;
        int64_t splits = 0;
        if (sep) {
            size_t st = 0;
            for (;;) {
                const char *f = (maxsplit < 0 || splits < maxsplit) ? sv_find(s, *sep, st) : NULL;
                size_t end = f ? (size_t)(f - s.p) : s.n;
                if (pass)
                    parts[np] = mk_str(s.p + st, end - st);
                np++;
                if (!f)
                    break;
                splits++;
                st = end + sep->n;
            }
        } else {
            size_t i = 0;
            for (;;) {
                while (i < s.n) {
                    size_t j = i;
                    if (!py_isspace(utf8_next(s.p, s.n, &j)))
                        break;
                    i = j;
                }
                if (i >= s.n)
                    break;
                size_t st = i, end;
                if (maxsplit >= 0 && splits >= maxsplit) {
                    end = rstrip_len(s.p, s.n);
                    i = s.n;
                } else {
                    while (i < s.n) {
                        size_t j = i;
                        if (py_isspace(utf8_next(s.p, s.n, &j)))
                            break;
                        i = j;
                    }
                    end = i;
                    splits++;
                }
                if (pass)
                    parts[np] = mk_str(s.p + st, end - st);
                np++;
            }
        }
        if (!pass) {
            cap = np;
            *out = mk_list(R, L_LIST, cap, line, &parts);
            if (out->t != V_LIST)
                return -1;
        }
    }
    return 0;
}

static int sv_replace(struct rt *R, struct sv s, struct sv old, struct sv new, int64_t count, struct val *out, int line)
{
    struct buf b = {0};
    int64_t done = 0;
    if (old.n == 0) {
        for (size_t i = 0; i <= s.n;) {
            if ((count < 0 || done < count) && buf_put(R, &b, new.p, new.n, line))
                goto fail;
            done++;
            if (i == s.n)
                break;
            size_t st = i;
            utf8_next(s.p, s.n, &i);
            if (buf_put(R, &b, s.p + st, i - st, line))
                goto fail;
        }
    } else {
        size_t st = 0;
        for (;;) {
            const char *f = (count < 0 || done < count) ? sv_find(s, old, st) : NULL;
            size_t end = f ? (size_t)(f - s.p) : s.n;
            if (buf_put(R, &b, s.p + st, end - st, line))
                goto fail;
            if (!f)
                break;
            if (buf_put(R, &b, new.p, new.n, line))
                goto fail;
            done++;
            st = end + old.n;
        }
    }
    return buf_to_val(R, &b, out, line);
fail:
    buf_release(R, &b);
    return -1;
}

/* ---------------------------------------------------------------- sorting */

typedef int (*idx_cmp)(struct rt *R, void *ctx, size_t a, size_t b, int *res);

/* A stable merge sort of the indices ord[0..n) (Python's sorted() is stable). */
static int sort_idx(struct rt *R, size_t *ord, size_t n, idx_cmp cmp, void *ctx, int line)
{
    if (n < 2)
        return 0;
    size_t *tmp = malloc(n * sizeof *tmp);
    if (!tmp)
        return oom(R, line);
    for (size_t w = 1; w < n; w *= 2) {
        for (size_t lo = 0; lo < n; lo += 2 * w) {
            size_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
            size_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi) {
                int r;
                if (cmp(R, ctx, ord[j], ord[i], &r)) {
                    free(tmp);
                    return -1;
                }
                tmp[k++] = r < 0 ? ord[j++] : ord[i++];
            }
            while (i < mid)
                tmp[k++] = ord[i++];
            while (j < hi)
                tmp[k++] = ord[j++];
        }
        memcpy(ord, tmp, n * sizeof *ord);
    }
    free(tmp);
    return 0;
}

struct sortctx {
    const struct val *keys;
    int line;
};

static int cmp_keys(struct rt *R, void *ctx, size_t a, size_t b, int *res)
{
    struct sortctx *c = ctx;
    return py_cmp(R, &c->keys[a], &c->keys[b], res, c->line);
}

/* ---------------------------------------------------------------- tojson (transformers' override) */

struct jsonopt {
    bool ascii, sort;
    int64_t indent; /* -1: none */
    struct sv item_sep, key_sep;
};

static int json_str(struct rt *R, struct sv s, bool ascii, struct buf *b, int line)
{
    return quoted(R, s, '"', esc_json, ascii, b, line);
}

static int json_newline(struct rt *R, const struct jsonopt *o, int level, struct buf *b, int line)
{
    if (buf_put(R, b, "\n", 1, line))
        return -1;
    for (int64_t i = 0; i < o->indent * level; i++)
        if (buf_put(R, b, " ", 1, line))
            return -1;
    return 0;
}

static int json_dump(struct rt *R, const struct val *v, const struct jsonopt *o, int level, struct buf *b, int line)
{
    if (level > 64)
        return rterr(R, ERR_RANGE, line, "tojson: nesting deeper than 64");
    switch (v->t) {
    case V_NONE: return buf_cstr(R, b, "null", line);
    case V_BOOL: return buf_cstr(R, b, v->b ? "true" : "false", line);
    case V_INT:
    case V_FLOAT:
        if (v->t == V_FLOAT && (isnan(v->f) || isinf(v->f)))
            return buf_cstr(R, b, isnan(v->f) ? "NaN" : v->f < 0 ? "-Infinity" : "Infinity", line);
        return py_str(R, v, b, line);
    case V_STR: return json_str(R, v->s, o->ascii, b, line);
    case V_LIST:
    case V_DICT: {
        bool dict = v->t == V_DICT;
        if (!dict && v->k != L_LIST && v->k != L_TUPLE)
            break;
        size_t n = dict ? v->d->n : v->l->n;
        if (!n)
            return buf_cstr(R, b, dict ? "{}" : "[]", line);
        size_t *ord = NULL;
        if (dict && o->sort) {
            ord = malloc(n * sizeof *ord);
            if (!ord)
                return oom(R, line);
            for (size_t i = 0; i < n; i++)
                ord[i] = i;
            struct sortctx c = {v->d->k, line};
            if (sort_idx(R, ord, n, cmp_keys, &c, line)) {
                free(ord);
                return -1;
            }
        }
        int rc = buf_cstr(R, b, dict ? "{" : "[", line);
        for (size_t i = 0; !rc && i < n; i++) {
            size_t at = ord ? ord[i] : i;
            if (i)
                rc = buf_put(R, b, o->item_sep.p, o->item_sep.n, line);
            if (!rc && o->indent >= 0)
                rc = json_newline(R, o, level + 1, b, line);
            if (!rc && dict) {
                const struct val *k = &v->d->k[at];
                if (k->t == V_STR)
                    rc = json_str(R, k->s, o->ascii, b, line);
                else if (k->t == V_NONE || k->t == V_BOOL || k->t == V_INT || k->t == V_FLOAT) {
                    struct buf kb = {0};
                    rc = k->t == V_NONE ? buf_cstr(R, &kb, "null", line)
                       : k->t == V_BOOL ? buf_cstr(R, &kb, k->b ? "true" : "false", line)
                                        : py_str(R, k, &kb, line);
                    if (!rc)
                        rc = json_str(R, (struct sv){kb.p, kb.n}, o->ascii, b, line);
                    buf_release(R, &kb);
                } else {
                    rc = rterr(R, ERR_FORMAT, line, "tojson: keys must be str, int, float, bool or None, not %s",
                               type_name(k));
                }
                if (!rc)
                    rc = buf_put(R, b, o->key_sep.p, o->key_sep.n, line);
            }
            if (!rc)
                rc = json_dump(R, dict ? &v->d->v[at] : &v->l->v[at], o, level + 1, b, line);
        }
        free(ord);
        if (!rc && o->indent >= 0)
            rc = json_newline(R, o, level, b, line);
        return rc ? -1 : buf_cstr(R, b, dict ? "}" : "]", line);
    }
    default: break;
    }
    return rterr(R, ERR_FORMAT, line, "tojson: Object of type %s is not JSON serializable", type_name(v));
}

/* ---------------------------------------------------------------- calls */

struct args {
    struct val *pos;
    size_t npos;
    const struct sv *kwn;
    struct val *kwv;
    size_t nkw;
};

/* Binds Python-style parameters: names[i] from position i or keyword; missing ones stay V_UNDEF with
 * the `set` flag false. An unknown keyword or too many positionals is an error. */
static int bind(struct rt *R, const char *fname, const struct args *a, const char *const *names, struct val *out,
                bool *set, int line)
{
    size_t np = 0;
    while (names[np])
        np++;
    if (a->npos > np)
        return rterr(R, ERR_FORMAT, line, "%s() takes at most %zu argument(s) (%zu given)", fname, np, a->npos);
    for (size_t i = 0; i < np; i++) {
        set[i] = i < a->npos;
        out[i] = i < a->npos ? a->pos[i] : mk_undef(NULL);
    }
    for (size_t k = 0; k < a->nkw; k++) {
        int i = find_name(names, a->kwn[k]);
        if (i < 0)
            return rterr(R, ERR_FORMAT, line, "%s() got an unexpected keyword argument '%.*s'", fname,
                         (int)a->kwn[k].n, a->kwn[k].p);
        if (set[i])
            return rterr(R, ERR_FORMAT, line, "%s() got multiple values for argument '%s'", fname, names[i]);
        set[i] = true;
        out[i] = a->kwv[k];
    }
    return 0;
}

static int want_str(struct rt *R, const char *fname, const struct val *v, int line)
{
    if (v->t == V_STR)
        return 0;
    return rterr(R, ERR_FORMAT, line, "%s: expected a str, got %s", fname, type_name(v));
}

static int want_int(struct rt *R, const char *fname, const struct val *v, int line)
{
    if (v->t == V_INT || v->t == V_BOOL)
        return 0;
    return rterr(R, ERR_FORMAT, line, "%s: expected an int, got %s", fname, type_name(v));
}

static int apply_filter(struct rt *R, int id, const struct val *x, const struct args *a, struct val *out, int line);

static int call_method(struct rt *R, const struct method *m, const struct args *a, struct val *out, int line)
{
    const struct val *o = &m->recv;
    struct val p[3];
    bool set[3];
    switch (m->id) {
    case M_SPLIT: {
        static const char *const n[] = {"sep", "maxsplit", NULL};
        if (bind(R, "split", a, n, p, set, line))
            return -1;
        bool has_sep = set[0] && p[0].t != V_NONE;
        if ((has_sep && want_str(R, "split", &p[0], line)) || (set[1] && want_int(R, "split", &p[1], line)))
            return -1;
        if (has_sep && p[0].s.n == 0)
            return rterr(R, ERR_FORMAT, line, "split: empty separator");
        return sv_split(R, o->s, has_sep ? &p[0].s : NULL, set[1] ? as_int(&p[1]) : -1, out, line);
    }
    case M_STRIP:
    case M_LSTRIP:
    case M_RSTRIP: {
        static const char *const n[] = {"chars", NULL};
        if (a->nkw)
            return rterr(R, ERR_FORMAT, line, "strip() takes no keyword arguments");
        if (bind(R, "strip", a, n, p, set, line))
            return -1;
        bool has = set[0] && p[0].t != V_NONE;
        if (has && want_str(R, "strip", &p[0], line))
            return -1;
        struct sv r = sv_strip(o->s, has ? &p[0].s : NULL, m->id != M_RSTRIP, m->id != M_LSTRIP);
        *out = mk_str(r.p, r.n);
        return 0;
    }
    case M_STARTSWITH:
    case M_ENDSWITH: {
        static const char *const n[] = {"prefix", NULL};
        if (a->nkw || a->npos != 1)
            return rterr(R, ERR_UNSUPPORTED, line, "startswith/endswith: only one positional argument is supported");
        if (bind(R, "startswith", a, n, p, set, line))
            return -1;
        const struct val *cands = &p[0];
        size_t nc = 1;
        if (p[0].t == V_LIST && p[0].k == L_TUPLE)
            cands = p[0].l->v, nc = p[0].l->n;
        bool r = false;
        for (size_t i = 0; i < nc; i++) {
            if (want_str(R, m->id == M_STARTSWITH ? "startswith" : "endswith", &cands[i], line))
                return -1;
            struct sv s = cands[i].s;
            if (s.n <= o->s.n &&
                !memcmp(m->id == M_STARTSWITH ? o->s.p : o->s.p + o->s.n - s.n, s.p, s.n))
                r = true;
        }
        *out = mk_bool(r);
        return 0;
    }
    case M_UPPER:
    case M_LOWER:
        if (a->npos || a->nkw)
            return rterr(R, ERR_FORMAT, line, "upper()/lower() take no arguments");
        return sv_case(R, o->s, m->id == M_UPPER, out, line);
    case M_REPLACE: {
        static const char *const n[] = {"old", "new", "count", NULL};
        if (a->nkw)
            return rterr(R, ERR_FORMAT, line, "replace() takes no keyword arguments");
        if (bind(R, "replace", a, n, p, set, line))
            return -1;
        if (!set[1] || want_str(R, "replace", &p[0], line) || want_str(R, "replace", &p[1], line) ||
            (set[2] && want_int(R, "replace", &p[2], line)))
            return set[1] ? -1 : rterr(R, ERR_FORMAT, line, "replace() takes at least 2 arguments");
        return sv_replace(R, o->s, p[0].s, p[1].s, set[2] ? as_int(&p[2]) : -1, out, line);
    }
    case M_GET: {
        static const char *const n[] = {"key", "default", NULL};
        if (a->nkw)
            return rterr(R, ERR_FORMAT, line, "get() takes no keyword arguments");
        if (bind(R, "get", a, n, p, set, line))
            return -1;
        if (!set[0])
            return rterr(R, ERR_FORMAT, line, "get expected at least 1 argument, got 0");
        if (!hashable(&p[0]))
            return rterr(R, ERR_FORMAT, line, "unhashable type: '%s'", type_name(&p[0]));
        size_t at;
        *out = dict_find(o->d, &p[0], &at) ? o->d->v[at] : set[1] ? p[1] : mk_none();
        return 0;
    }
    default: { /* items, keys, values */
        if (a->npos || a->nkw)
            return rterr(R, ERR_FORMAT, line, "items()/keys()/values() take no arguments");
        size_t n = o->d->n;
        struct val *it;
        *out = mk_list(R, m->id == M_ITEMS ? L_ITEMS : m->id == M_KEYS ? L_KEYS : L_VALUES, n, line, &it);
        if (out->t != V_LIST)
            return -1;
        for (size_t i = 0; i < n; i++) {
            if (m->id == M_ITEMS) {
                struct val *pair;
                it[i] = mk_list(R, L_TUPLE, 2, line, &pair);
                if (it[i].t != V_LIST)
                    return -1;
                pair[0] = o->d->k[i], pair[1] = o->d->v[i];
            } else {
                it[i] = m->id == M_KEYS ? o->d->k[i] : o->d->v[i];
            }
        }
        return 0;
    }
    }
}

static int apply_filter(struct rt *R, int id, const struct val *x, const struct args *a, struct val *out, int line)
{
    struct val p[4];
    bool set[4];
    struct sv s;
    switch (id) {
    case FL_UPPER:
    case FL_LOWER:
        if (a->npos || a->nkw)
            return rterr(R, ERR_FORMAT, line, "upper/lower take no arguments");
        return to_sv(R, x, &s, line) ? -1 : sv_case(R, s, id == FL_UPPER, out, line);
    case FL_STRING:
        if (a->npos || a->nkw)
            return rterr(R, ERR_FORMAT, line, "string takes no arguments");
        if (x->t == V_STR) {
            *out = *x;
            return 0;
        }
        if (to_sv(R, x, &s, line))
            return -1;
        *out = mk_str(s.p, s.n);
        return 0;
    case FL_TRIM: {
        static const char *const n[] = {"chars", NULL};
        if (bind(R, "trim", a, n, p, set, line) || to_sv(R, x, &s, line))
            return -1;
        bool has = set[0] && p[0].t != V_NONE;
        if (has && want_str(R, "trim", &p[0], line))
            return -1;
        s = sv_strip(s, has ? &p[0].s : NULL, true, true);
        *out = mk_str(s.p, s.n);
        return 0;
    }
    case FL_DEFAULT:
    case FL_D: {
        static const char *const n[] = {"default_value", "boolean", NULL};
        if (bind(R, "default", a, n, p, set, line))
            return -1;
        bool use = x->t == V_UNDEF || (set[1] && truthy(&p[1]) && !truthy(x));
        *out = use ? (set[0] ? p[0] : mk_str("", 0)) : *x;
        return 0;
    }
    case FL_LENGTH:
    case FL_COUNT: {
        int64_t n = 0;
        if (a->npos || a->nkw)
            return rterr(R, ERR_FORMAT, line, "length takes no arguments");
        if (py_len(R, x, &n, line))
            return -1;
        *out = mk_int(n);
        return 0;
    }
    case FL_LIST: {
        struct val *items, *it;
        size_t n;
        if (a->npos || a->nkw)
            return rterr(R, ERR_FORMAT, line, "list takes no arguments");
        if (iterate(R, x, &items, &n, line))
            return -1;
        *out = mk_list(R, L_LIST, n, line, &it);
        if (out->t != V_LIST)
            return -1;
        if (n)
            memcpy(it, items, n * sizeof *it);
        return 0;
    }
    case FL_FIRST:
    case FL_LAST: {
        struct val *items;
        size_t n;
        if (a->npos || a->nkw)
            return rterr(R, ERR_FORMAT, line, "first/last take no arguments");
        if (id == FL_LAST && x->t == V_LIST && x->k == L_GEN)
            return rterr(R, ERR_FORMAT, line, "last: 'generator' object is not reversible");
        if (iterate(R, x, &items, &n, line))
            return -1;
        *out = n ? items[id == FL_FIRST ? 0 : n - 1] : mk_undef(NULL);
        return 0;
    }
    case FL_JOIN: {
        static const char *const n[] = {"d", "attribute", NULL};
        struct val *items;
        size_t cnt;
        if (bind(R, "join", a, n, p, set, line) || iterate(R, x, &items, &cnt, line))
            return -1;
        if (set[1] && p[1].t != V_NONE)
            return rterr(R, ERR_UNSUPPORTED, line, "join(attribute=...): not supported");
        struct sv sep = {"", 0};
        if (set[0] && to_sv(R, &p[0], &sep, line))
            return -1;
        struct buf b = {0};
        for (size_t i = 0; i < cnt; i++)
            if ((i && buf_put(R, &b, sep.p, sep.n, line)) || py_str(R, &items[i], &b, line)) {
                buf_release(R, &b);
                return -1;
            }
        return buf_to_val(R, &b, out, line);
    }
    case FL_REPLACE: {
        static const char *const n[] = {"old", "new", "count", NULL};
        struct sv old, new;
        if (bind(R, "replace", a, n, p, set, line))
            return -1;
        if (!set[1])
            return rterr(R, ERR_FORMAT, line, "replace: needs old and new");
        if (to_sv(R, x, &s, line) || to_sv(R, &p[0], &old, line) || to_sv(R, &p[1], &new, line))
            return -1;
        int64_t count = -1;
        if (set[2] && p[2].t != V_NONE) {
            if (want_int(R, "replace", &p[2], line))
                return -1;
            count = as_int(&p[2]);
        }
        return sv_replace(R, s, old, new, count, out, line);
    }
    case FL_DICTSORT: {
        static const char *const n[] = {"case_sensitive", "by", "reverse", NULL};
        if (bind(R, "dictsort", a, n, p, set, line))
            return -1;
        if (x->t == V_UNDEF)
            return undefined_err(R, x, line);
        if (x->t != V_DICT)
            return rterr(R, ERR_FORMAT, line, "dictsort: '%s' object has no attribute 'items'", type_name(x));
        bool cs = set[0] && truthy(&p[0]);
        int pos = 0;
        if (set[1]) {
            if (p[1].t == V_STR && sv_eq(p[1].s, "value"))
                pos = 1;
            else if (!(p[1].t == V_STR && sv_eq(p[1].s, "key")))
                return rterr(R, ERR_FORMAT, line, "You can only sort by either \"key\" or \"value\"");
        }
        size_t cnt = x->d->n;
        struct val *keys = ralloc(R, (cnt + 1) * sizeof *keys, line), *it;
        size_t *ord = malloc((cnt + 1) * sizeof *ord);
        if (!keys || !ord) {
            free(ord);
            return keys ? oom(R, line) : -1;
        }
        for (size_t i = 0; i < cnt; i++) {
            ord[i] = i;
            keys[i] = pos ? x->d->v[i] : x->d->k[i];
            if (!cs && keys[i].t == V_STR && sv_case(R, keys[i].s, false, &keys[i], line)) {
                free(ord);
                return -1;
            }
        }
        struct sortctx c = {keys, line};
        if (sort_idx(R, ord, cnt, cmp_keys, &c, line)) {
            free(ord);
            return -1;
        }
        *out = mk_list(R, L_LIST, cnt, line, &it);
        for (size_t i = 0; out->t == V_LIST && i < cnt; i++) {
            struct val *pair;
            size_t at = ord[set[2] && truthy(&p[2]) ? cnt - 1 - i : i];
            it[i] = mk_list(R, L_TUPLE, 2, line, &pair);
            if (it[i].t != V_LIST) {
                out->t = V_UNDEF;
                break;
            }
            pair[0] = x->d->k[at], pair[1] = x->d->v[at];
        }
        free(ord);
        return out->t == V_LIST ? 0 : -1;
    }
    case FL_TOJSON: {
        static const char *const n[] = {"ensure_ascii", "indent", "separators", "sort_keys", NULL};
        if (bind(R, "tojson", a, n, p, set, line))
            return -1;
        struct jsonopt o = {.ascii = set[0] && truthy(&p[0]), .sort = set[3] && truthy(&p[3]), .indent = -1};
        if (set[1] && p[1].t != V_NONE) {
            if (want_int(R, "tojson indent", &p[1], line))
                return -1;
            o.indent = as_int(&p[1]) < 0 ? 0 : as_int(&p[1]);
            if (o.indent > 64)
                return rterr(R, ERR_RANGE, line, "tojson: indent %lld over 64", (long long)o.indent);
        }
        o.item_sep = o.indent >= 0 ? (struct sv){",", 1} : (struct sv){", ", 2};
        o.key_sep = (struct sv){": ", 2};
        if (set[2] && p[2].t != V_NONE) {
            if (p[2].t != V_LIST || (p[2].k != L_TUPLE && p[2].k != L_LIST) || p[2].l->n != 2 ||
                want_str(R, "tojson separators", &p[2].l->v[0], line) ||
                want_str(R, "tojson separators", &p[2].l->v[1], line))
                return R->e->code ? -1 : rterr(R, ERR_FORMAT, line, "tojson: separators must be two strings");
            o.item_sep = p[2].l->v[0].s, o.key_sep = p[2].l->v[1].s;
        }
        struct buf b = {0};
        if (json_dump(R, x, &o, 0, &b, line)) {
            buf_release(R, &b);
            return -1;
        }
        return buf_to_val(R, &b, out, line);
    }
    case FL_MAP: {
        struct val *items = NULL, *it;
        size_t cnt = 0;
        if (truthy(x) && iterate(R, x, &items, &cnt, line)) /* jinja2 maps nothing over a falsy value */
            return -1;
        struct val *res;
        *out = mk_list(R, L_GEN, cnt, line, &res);
        if (out->t != V_LIST)
            return -1;
        if (a->npos == 0) {
            static const char *const n[] = {"attribute", "default", NULL};
            if (bind(R, "map", a, n, p, set, line))
                return -1;
            if (!set[0] || p[0].t != V_STR)
                return rterr(R, ERR_FORMAT, line, "map: needs a filter name or attribute='name'");
            if (memchr(p[0].s.p, '.', p[0].s.n))
                return rterr(R, ERR_UNSUPPORTED, line, "map(attribute='%.*s'): dotted attributes not supported",
                             (int)p[0].s.n, p[0].s.p);
            for (size_t i = 0; i < cnt; i++) {
                if (env_getitem(R, &items[i], &p[0], &res[i], line))
                    return -1;
                if (res[i].t == V_UNDEF && set[1])
                    res[i] = p[1];
            }
            return 0;
        }
        if (a->pos[0].t != V_STR)
            return rterr(R, ERR_FORMAT, line, "map: the filter name must be a string");
        int fid = find_name(filter_names, a->pos[0].s);
        if (fid < 0)
            return rterr(R, ERR_UNSUPPORTED, line, "map: filter '%.*s': not supported", (int)a->pos[0].s.n,
                         a->pos[0].s.p);
        struct args sub = {a->pos + 1, a->npos - 1, a->kwn, a->kwv, a->nkw};
        it = res;
        for (size_t i = 0; i < cnt; i++)
            if (apply_filter(R, fid, &items[i], &sub, &it[i], line))
                return -1;
        return 0;
    }
    default:
        return rterr(R, ERR_UNSUPPORTED, line, "filter %d: not supported", id);
    }
}

static int binop(struct rt *R, int op, const struct val *a, const struct val *b, struct val *out, int line);

/* Python's `x in c`. */
static int py_in(struct rt *R, const struct val *x, const struct val *c, bool *out, int line)
{
    if (c->t == V_STR) {
        if (x->t != V_STR)
            return rterr(R, ERR_FORMAT, line, "'in <string>' requires string as left operand, not %s", type_name(x));
        *out = sv_find(c->s, x->s, 0) != NULL;
        return 0;
    }
    if (c->t == V_DICT) {
        size_t at;
        if (!hashable(x))
            return rterr(R, ERR_FORMAT, line, "unhashable type: '%s'", type_name(x));
        *out = dict_find(c->d, x, &at);
        return 0;
    }
    if (c->t == V_LIST || c->t == V_UNDEF) {
        struct val *items;
        size_t n;
        if (iterate(R, c, &items, &n, line))
            return -1;
        *out = false;
        for (size_t i = 0; i < n && !*out; i++)
            *out = py_eq(&items[i], x);
        return 0;
    }
    return rterr(R, ERR_FORMAT, line, "argument of type '%s' is not iterable", type_name(c));
}

static int apply_test(struct rt *R, int id, const struct val *x, const struct args *a, bool *out, int line)
{
    const struct val *y = a->npos ? &a->pos[0] : NULL;
    int c;
    if (a->nkw || a->npos > 1)
        return rterr(R, ERR_FORMAT, line, "tests here take at most one positional argument");
    bool need = id >= T_EQ && id != T_ODD && id != T_EVEN;
    if (need && !y)
        return rterr(R, ERR_FORMAT, line, "%s: missing an argument", test_names[id]);
    switch (id) {
    case T_DEFINED: *out = x->t != V_UNDEF; return 0;
    case T_UNDEFINED: *out = x->t == V_UNDEF; return 0;
    case T_NONE: *out = x->t == V_NONE; return 0;
    case T_BOOLEAN: *out = x->t == V_BOOL; return 0;
    case T_TRUE: *out = x->t == V_BOOL && x->b; return 0;
    case T_FALSE: *out = x->t == V_BOOL && !x->b; return 0;
    case T_INTEGER: *out = x->t == V_INT; return 0;
    case T_FLOAT: *out = x->t == V_FLOAT; return 0;
    case T_NUMBER: *out = is_num(x); return 0;
    case T_STRING: *out = x->t == V_STR; return 0;
    case T_MAPPING: *out = x->t == V_DICT; return 0;
    case T_SEQUENCE:
        *out = x->t == V_UNDEF || x->t == V_STR || x->t == V_DICT ||
               (x->t == V_LIST && (x->k == L_LIST || x->k == L_TUPLE || x->k == L_RANGE));
        return 0;
    case T_ITERABLE: *out = x->t == V_UNDEF || x->t == V_STR || x->t == V_DICT || x->t == V_LIST || x->t == V_LOOP; return 0;
    case T_CALLABLE: *out = x->t == V_UNDEF || x->t >= V_LOOP; return 0;
    case T_EQ:
    case T_EQUALTO:
    case T_EQ2: *out = py_eq(x, y); return 0;
    case T_NE:
    case T_NE2: *out = !py_eq(x, y); return 0;
    case T_ODD:
    case T_EVEN:
    case T_DIVISIBLEBY: { /* value % 2 == 1, value % 2 == 0, value % num == 0 */
        struct val two = mk_int(2), r, want = mk_int(id == T_ODD);
        if (binop(R, B_MOD, x, id == T_DIVISIBLEBY ? y : &two, &r, line))
            return -1;
        *out = py_eq(&r, &want);
        return 0;
    }
    case T_IN: return py_in(R, x, y, out, line);
    default:
        if (py_cmp(R, x, y, &c, line))
            return -1;
        *out = id <= T_LT2 ? c == -1 : id <= T_LE2 ? (c == -1 || c == 0) : id <= T_GT2 ? c == 1 : (c == 1 || c == 0);
        return 0;
    }
}

/* ---------------------------------------------------------------- evaluation */

static int set_var(struct rt *R, struct frame *f, struct sv name, struct val v, int line)
{
    if (!f->vars && !(f->vars = new_dict(R, line)))
        return -1;
    return dict_set(R, f->vars, mk_str(name.p, name.n), v, line);
}

static struct val lookup(const struct frame *f, struct sv name)
{
    for (; f; f = f->parent)
        for (size_t i = 0; f->vars && i < f->vars->n; i++)
            if (sv_same(f->vars->k[i].s, name))
                return f->vars->v[i];
    return mk_undef(NULL);
}

static int eval(struct rt *R, struct frame *f, const struct expr *x, struct val *out);
static int exec_body(struct rt *R, struct frame *f, const struct body *b, struct buf *o);

static int step(struct rt *R, int line)
{
    if (++R->steps > TMPL_MAX_STEPS)
        return rterr(R, ERR_RANGE, line, "rendering takes more than %llu steps: refused",
                     (unsigned long long)TMPL_MAX_STEPS);
    return 0;
}

static int eval_args(struct rt *R, struct frame *f, const struct expr *x, struct args *a)
{
    a->npos = x->nargs, a->nkw = x->nkw, a->kwn = x->kwn;
    a->pos = ralloc(R, (x->nargs + x->nkw + 1) * sizeof *a->pos, x->line);
    if (!a->pos)
        return -1;
    a->kwv = a->pos + x->nargs;
    for (size_t i = 0; i < x->nargs; i++)
        if (eval(R, f, x->args[i], &a->pos[i]))
            return -1;
    for (size_t i = 0; i < x->nkw; i++)
        if (eval(R, f, x->kwv[i], &a->kwv[i]))
            return -1;
    return 0;
}

static int call_macro(struct rt *R, const struct stmt *m, const struct args *a, struct val *out, int line)
{
    if (R->depth >= TMPL_MAX_CALL_DEPTH)
        return rterr(R, ERR_RANGE, line, "macro calls nested deeper than %d: refused", TMPL_MAX_CALL_DEPTH);
    if (a->npos > m->nparams)
        return rterr(R, ERR_FORMAT, line, "macro '%.*s' takes not more than %zu argument(s)", (int)m->name.n,
                     m->name.p, m->nparams);
    struct frame fr = {.parent = R->top};
    bool *set = calloc(m->nparams + 1, 1);
    if (!set)
        return oom(R, line);
    int rc = 0;
    for (size_t k = 0; !rc && k < a->nkw; k++) {
        size_t i;
        for (i = 0; i < m->nparams && !sv_same(m->params[i], a->kwn[k]); i++)
            ;
        if (i == m->nparams)
            rc = rterr(R, ERR_FORMAT, line, "macro '%.*s' takes no keyword argument '%.*s'", (int)m->name.n,
                       m->name.p, (int)a->kwn[k].n, a->kwn[k].p);
        else if (i < a->npos || set[i])
            rc = rterr(R, ERR_FORMAT, line, "macro '%.*s' got multiple values for argument '%.*s'", (int)m->name.n,
                       m->name.p, (int)a->kwn[k].n, a->kwn[k].p);
        else
            set[i] = true;
    }
    for (size_t i = 0; !rc && i < m->nparams; i++) {
        struct val v = mk_undef(NULL);
        if (i < a->npos) {
            v = a->pos[i];
        } else if (set[i]) {
            for (size_t k = 0; k < a->nkw; k++)
                if (sv_same(m->params[i], a->kwn[k]))
                    v = a->kwv[k];
        } else if (m->defaults[i]) {
            rc = eval(R, &fr, m->defaults[i], &v);
        }
        if (!rc)
            rc = set_var(R, &fr, m->params[i], v, line);
    }
    free(set);
    if (rc)
        return -1;
    struct buf b = {0};
    R->depth++;
    rc = exec_body(R, &fr, &m->body, &b);
    R->depth--;
    if (rc < 0) {
        buf_release(R, &b);
        return -1;
    }
    return buf_to_val(R, &b, out, line);
}

static int call_func(struct rt *R, int fn, const struct args *a, struct val *out, int line)
{
    if (fn == F_RAISE) {
        struct sv msg = {"", 0};
        if (a->npos && to_sv(R, &a->pos[0], &msg, line))
            return -1;
        return rterr(R, ERR_FORMAT, line, "the template raised an exception: %.*s", (int)msg.n, msg.p);
    }
    if (fn == F_NAMESPACE) {
        struct dict *d = new_dict(R, line);
        if (!d)
            return -1;
        if (a->npos > 1 || (a->npos == 1 && a->pos[0].t != V_DICT))
            return rterr(R, ERR_UNSUPPORTED, line, "namespace(): only a dict and keyword arguments are supported");
        for (size_t i = 0; a->npos && i < a->pos[0].d->n; i++)
            if (dict_set(R, d, a->pos[0].d->k[i], a->pos[0].d->v[i], line))
                return -1;
        for (size_t i = 0; i < a->nkw; i++)
            if (dict_set(R, d, mk_str(a->kwn[i].p, a->kwn[i].n), a->kwv[i], line))
                return -1;
        *out = (struct val){.t = V_NS, .d = d};
        return 0;
    }
    /* range */
    if (a->nkw || a->npos < 1 || a->npos > 3)
        return rterr(R, ERR_FORMAT, line, "range expected 1 to 3 positional arguments");
    for (size_t i = 0; i < a->npos; i++)
        if (a->pos[i].t != V_INT && a->pos[i].t != V_BOOL)
            return rterr(R, ERR_FORMAT, line, "'%s' object cannot be interpreted as an integer", type_name(&a->pos[i]));
    int64_t start = a->npos > 1 ? as_int(&a->pos[0]) : 0, stop = as_int(&a->pos[a->npos > 1]),
            stp = a->npos > 2 ? as_int(&a->pos[2]) : 1;
    if (stp == 0)
        return rterr(R, ERR_FORMAT, line, "range() arg 3 must not be zero");
    double span = ((double)stop - (double)start) / (double)stp;
    int64_t n = 0;
    if (span > 0) {
        if (span > TMPL_MAX_RANGE + 1.0)
            return rterr(R, ERR_RANGE, line, "Range too big. The sandbox blocks ranges larger than MAX_RANGE (%d).",
                         TMPL_MAX_RANGE);
        n = stp > 0 ? (stop - start + stp - 1) / stp : (start - stop - stp - 1) / -stp;
    }
    if (n > TMPL_MAX_RANGE)
        return rterr(R, ERR_RANGE, line, "Range too big. The sandbox blocks ranges larger than MAX_RANGE (%d).",
                     TMPL_MAX_RANGE);
    struct val *items;
    *out = mk_list(R, L_RANGE, 0, line, &items);
    if (out->t != V_LIST)
        return -1;
    out->l->n = (size_t)n;
    out->l->start = start, out->l->stop = stop, out->l->step = stp;
    return 0;
}

static int checked(struct rt *R, bool overflow, int64_t r, struct val *out, int line)
{
    if (overflow)
        return rterr(R, ERR_UNSUPPORTED, line, "integer result beyond int64 (Python's big integers are not modelled)");
    *out = mk_int(r);
    return 0;
}

/* Python's float floor division and modulo (CPython's float_divmod). */
static void float_divmod(double a, double b, double *div, double *mod)
{
    double m = fmod(a, b), d = (a - m) / b;
    if (m != 0) {
        if ((b < 0) != (m < 0)) {
            m += b;
            d -= 1.0;
        }
    } else {
        m = copysign(0.0, b);
    }
    double fd;
    if (d != 0) {
        fd = floor(d);
        if (d - fd > 0.5)
            fd += 1.0;
    } else {
        fd = copysign(0.0, a / b);
    }
    *div = fd, *mod = m;
}

static int binop(struct rt *R, int op, const struct val *a, const struct val *b, struct val *out, int line)
{
    static const char *const sym[] = {"+", "-", "*", "/", "//", "%", "**"};
    if (op == B_MOD && a->t == V_STR)
        return rterr(R, ERR_UNSUPPORTED, line, "string formatting with '%%': not supported");
    if (a->t == V_UNDEF || b->t == V_UNDEF)
        return undefined_err(R, a->t == V_UNDEF ? a : b, line);
    if (is_num(a) && is_num(b)) {
        if (a->t != V_FLOAT && b->t != V_FLOAT && op != B_DIV) {
            int64_t x = as_int(a), y = as_int(b), r = 0;
            switch (op) {
            case B_ADD: {
                bool ov = __builtin_add_overflow(x, y, &r);
                return checked(R, ov, r, out, line);
            }
            case B_SUB: {
                bool ov = __builtin_sub_overflow(x, y, &r);
                return checked(R, ov, r, out, line);
            }
            case B_MUL: {
                bool ov = __builtin_mul_overflow(x, y, &r);
                return checked(R, ov, r, out, line);
            }
            case B_FDIV:
            case B_MOD:
                if (y == 0)
                    return rterr(R, ERR_FORMAT, line, "integer division or modulo by zero");
                if (x == INT64_MIN && y == -1)
                    return checked(R, op == B_FDIV, 0, out, line);
                r = op == B_FDIV ? x / y : x % y;
                if (x % y != 0 && ((x < 0) != (y < 0)))
                    r = op == B_FDIV ? r - 1 : r + y;
                *out = mk_int(r);
                return 0;
            default: /* pow */
                if (y < 0)
                    break;
                r = 1;
                for (int64_t i = 0; i < y; i++) {
                    if (__builtin_mul_overflow(r, x, &r))
                        return checked(R, true, 0, out, line);
                    if (r == 0 || r == 1)
                        break;
                    if (r == -1) {
                        r = (y % 2) ? -1 : 1;
                        break;
                    }
                }
                *out = mk_int(r);
                return 0;
            }
        }
        double x = a->t == V_FLOAT ? a->f : (double)as_int(a), y = b->t == V_FLOAT ? b->f : (double)as_int(b);
        if ((a->t != V_FLOAT && (as_int(a) > (1LL << 53) || as_int(a) < -(1LL << 53))) ||
            (b->t != V_FLOAT && (as_int(b) > (1LL << 53) || as_int(b) < -(1LL << 53))))
            return rterr(R, ERR_UNSUPPORTED, line, "float arithmetic with an int beyond 2**53: not modelled");
        double r = 0, d, m;
        switch (op) {
        case B_ADD: r = x + y; break;
        case B_SUB: r = x - y; break;
        case B_MUL: r = x * y; break;
        case B_DIV:
        case B_FDIV:
        case B_MOD:
            if (y == 0)
                return rterr(R, ERR_FORMAT, line, "float division by zero");
            if (op == B_DIV) {
                r = x / y;
                break;
            }
            float_divmod(x, y, &d, &m);
            r = op == B_FDIV ? d : m;
            break;
        default:
            if ((x == 0 && y < 0) || (x < 0 && y != floor(y)) || isinf(pow(x, y)))
                return rterr(R, ERR_UNSUPPORTED, line, "float power %s: not modelled", "with this operand");
            r = pow(x, y);
        }
        *out = mk_float(r);
        return 0;
    }
    if (op == B_ADD && a->t == V_STR && b->t == V_STR) {
        char *p = ralloc(R, a->s.n + b->s.n + 1, line);
        if (!p)
            return -1;
        memcpy(p, a->s.p, a->s.n);
        memcpy(p + a->s.n, b->s.p, b->s.n);
        *out = mk_str(p, a->s.n + b->s.n);
        return 0;
    }
    if (op == B_ADD && a->t == V_LIST && b->t == V_LIST && a->k == b->k && (a->k == L_LIST || a->k == L_TUPLE)) {
        struct val *it;
        *out = mk_list(R, a->k, a->l->n + b->l->n, line, &it);
        if (out->t != V_LIST)
            return -1;
        if (a->l->n)
            memcpy(it, a->l->v, a->l->n * sizeof *it);
        if (b->l->n)
            memcpy(it + a->l->n, b->l->v, b->l->n * sizeof *it);
        return 0;
    }
    if (op == B_MUL && ((a->t == V_STR && (b->t == V_INT || b->t == V_BOOL)) ||
                        (b->t == V_STR && (a->t == V_INT || a->t == V_BOOL)))) {
        const struct val *s = a->t == V_STR ? a : b;
        int64_t n = as_int(a->t == V_STR ? b : a);
        if (n <= 0 || s->s.n == 0) {
            *out = mk_str("", 0);
            return 0;
        }
        if ((uint64_t)n > TMPL_MAX_OUTPUT / s->s.n)
            return rterr(R, ERR_RANGE, line, "string repetition over %u bytes: refused", TMPL_MAX_OUTPUT);
        char *p = ralloc(R, s->s.n * (size_t)n + 1, line);
        if (!p)
            return -1;
        for (int64_t i = 0; i < n; i++)
            memcpy(p + (size_t)i * s->s.n, s->s.p, s->s.n);
        *out = mk_str(p, s->s.n * (size_t)n);
        return 0;
    }
    if (op == B_MUL && ((a->t == V_LIST && (b->t == V_INT || b->t == V_BOOL)) ||
                        (b->t == V_LIST && (a->t == V_INT || a->t == V_BOOL)))) {
        const struct val *l = a->t == V_LIST ? a : b;
        int64_t n = as_int(a->t == V_LIST ? b : a);
        if (l->k != L_LIST && l->k != L_TUPLE)
            return rterr(R, ERR_FORMAT, line, "unsupported operand type(s) for *: '%s' and 'int'", type_name(l));
        if (n < 0)
            n = 0;
        if (l->l->n && (uint64_t)n > TMPL_MAX_OUTPUT / l->l->n)
            return rterr(R, ERR_RANGE, line, "list repetition over %u items: refused", TMPL_MAX_OUTPUT);
        struct val *it;
        *out = mk_list(R, l->k, l->l->n * (size_t)n, line, &it);
        if (out->t != V_LIST)
            return -1;
        for (int64_t i = 0; l->l->n && i < n; i++)
            memcpy(it + (size_t)i * l->l->n, l->l->v, l->l->n * sizeof *it);
        return 0;
    }
    return rterr(R, ERR_FORMAT, line, "unsupported operand type(s) for %s: '%s' and '%s'", sym[op], type_name(a),
                 type_name(b));
}

/* A slice's bounds over n items, as Python's slice.indices(). */
static int slice_indices(struct rt *R, const struct val *bd, int64_t n, int64_t *start, int64_t *stop, int64_t *stp,
                         int line)
{
    for (int i = 0; i < 3; i++)
        if (bd[i].t != V_NONE && bd[i].t != V_INT && bd[i].t != V_BOOL)
            return rterr(R, ERR_FORMAT, line, "slice indices must be integers or None");
    *stp = bd[2].t == V_NONE ? 1 : as_int(&bd[2]);
    if (*stp == 0)
        return rterr(R, ERR_FORMAT, line, "slice step cannot be zero");
    int64_t lo = *stp < 0 ? -1 : 0, hi = *stp < 0 ? n - 1 : n;
    for (int i = 0; i < 2; i++) {
        int64_t *d = i ? stop : start;
        if (bd[i].t == V_NONE) {
            *d = (*stp < 0) == (i == 0) ? hi : lo;
            continue;
        }
        int64_t v = as_int(&bd[i]);
        if (v < 0) {
            v += n;
            if (v < lo)
                v = lo;
        } else if (v > hi) {
            v = hi;
        }
        *d = v;
    }
    return 0;
}

static int eval_slice(struct rt *R, const struct val *o, const struct val *bd, struct val *out, int line)
{
    struct val *items;
    size_t n;
    if (o->t == V_UNDEF)
        return undefined_err(R, o, line);
    bool str = o->t == V_STR;
    if (o->t == V_DICT)
        return rterr(R, ERR_FORMAT, line, "unhashable type: 'slice'");
    if (!str && !(o->t == V_LIST && (o->k == L_LIST || o->k == L_TUPLE || o->k == L_RANGE)))
        return rterr(R, ERR_FORMAT, line, "'%s' object is not subscriptable", type_name(o));
    int64_t a = 0, b = 0, s = 1;
    if (o->t == V_LIST && o->k == L_RANGE) {
        const struct list *r = o->l;
        if (slice_indices(R, bd, (int64_t)r->n, &a, &b, &s, line))
            return -1;
        size_t cnt = 0;
        for (int64_t i = a; s > 0 ? i < b : i > b; i += s)
            cnt++;
        *out = mk_list(R, L_RANGE, 0, line, &items);
        if (out->t != V_LIST)
            return -1;
        out->l->n = cnt;
        out->l->start = r->start + a * r->step, out->l->stop = r->start + b * r->step, out->l->step = r->step * s;
        return 0;
    }
    if (iterate(R, o, &items, &n, line))
        return -1;
    if (slice_indices(R, bd, (int64_t)n, &a, &b, &s, line))
        return -1;
    size_t cnt = 0;
    for (int64_t i = a; s > 0 ? i < b : i > b; i += s)
        cnt++;
    if (str) {
        struct buf bf = {0};
        for (int64_t i = a; s > 0 ? i < b : i > b; i += s)
            if (buf_put(R, &bf, items[i].s.p, items[i].s.n, line)) {
                buf_release(R, &bf);
                return -1;
            }
        return buf_to_val(R, &bf, out, line);
    }
    struct val *it;
    *out = mk_list(R, o->k == L_TUPLE ? L_TUPLE : L_LIST, cnt, line, &it);
    if (out->t != V_LIST)
        return -1;
    size_t k = 0;
    for (int64_t i = a; s > 0 ? i < b : i > b; i += s)
        it[k++] = items[i];
    return 0;
}

/* An expression jinja2 may fold at compile time: no names and no calls in what decides it. Folded, a slice goes
 * through getitem (a number's slice is undefined); at run time it is Python's subscription (an error). */
static bool constant(const struct expr *x)
{
    if (!x)
        return true;
    if (x->k == E_NAME || x->k == E_CALL)
        return false;
    if (x->k == E_AND || x->k == E_OR || x->k == E_COND) /* folded lazily: the first operand may decide */
        return constant(x->a);
    for (size_t i = 0; i < x->nargs; i++)
        if (!constant(x->args[i]))
            return false;
    for (size_t i = 0; i < x->nkw; i++)
        if (!constant(x->kwv[i]))
            return false;
    return constant(x->a) && constant(x->b) && constant(x->c);
}

static int eval(struct rt *R, struct frame *f, const struct expr *x, struct val *out)
{
    int line = x->line;
    struct val a, b;
    if (step(R, line))
        return -1;
    switch (x->k) {
    case E_LIT: *out = x->lit; return 0;
    case E_NAME:
        *out = lookup(f, x->name);
        if (out->t == V_UNDEF) {
            char *n = ralloc(R, x->name.n + 1, line);
            if (!n)
                return -1;
            memcpy(n, x->name.p, x->name.n);
            n[x->name.n] = 0;
            out->name = n;
        }
        return 0;
    case E_ATTR:
        return eval(R, f, x->a, &a) ? -1 : env_getattr(R, &a, x->name, out, line);
    case E_ITEM:
        return eval(R, f, x->a, &a) || eval(R, f, x->b, &b) ? -1 : env_getitem(R, &a, &b, out, line);
    case E_SLICE: {
        struct val bd[3];
        if (eval(R, f, x->a, &a))
            return -1;
        if (constant(x->a) && a.t != V_STR && a.t != V_UNDEF && !(a.t == V_LIST && a.k != L_GEN && a.k < L_ITEMS))
            return rterr(R, ERR_UNSUPPORTED, line, "a slice of a constant %s: jinja2's constant folding is not modelled",
                         type_name(&a));
        for (int i = 0; i < 3; i++) {
            bd[i] = mk_none();
            if (x->args[i] && eval(R, f, x->args[i], &bd[i]))
                return -1;
        }
        return eval_slice(R, &a, bd, out, line);
    }
    case E_CALL: {
        struct args ar;
        if (x->a->k == E_ATTR) {
            struct val recv, m;
            if (eval(R, f, x->a->a, &recv) || env_getattr(R, &recv, x->a->name, &m, line))
                return -1;
            if (m.t == V_UNDEF)
                return rterr(R, ERR_FORMAT, line, "'%s' object has no attribute '%.*s'", type_name(&recv),
                             (int)x->a->name.n, x->a->name.p);
            a = m;
        } else if (eval(R, f, x->a, &a)) {
            return -1;
        }
        if (a.t == V_UNDEF)
            return undefined_err(R, &a, line);
        if (eval_args(R, f, x, &ar))
            return -1;
        if (a.t == V_METHOD)
            return call_method(R, a.m, &ar, out, line);
        if (a.t == V_MACRO)
            return call_macro(R, a.mc, &ar, out, line);
        if (a.t == V_FUNC)
            return call_func(R, a.fn, &ar, out, line);
        return rterr(R, ERR_FORMAT, line, "'%s' object is not callable", type_name(&a));
    }
    case E_FILTER: {
        struct args ar;
        return eval(R, f, x->a, &a) || eval_args(R, f, x, &ar) ? -1 : apply_filter(R, x->id, &a, &ar, out, line);
    }
    case E_TEST: {
        struct args ar;
        bool r;
        if (eval(R, f, x->a, &a) || eval_args(R, f, x, &ar) || apply_test(R, x->id, &a, &ar, &r, line))
            return -1;
        *out = mk_bool(r != x->negate);
        return 0;
    }
    case E_NEG:
    case E_POS:
        if (eval(R, f, x->a, &a))
            return -1;
        if (a.t == V_UNDEF)
            return undefined_err(R, &a, line);
        if (a.t == V_FLOAT) {
            *out = mk_float(x->k == E_NEG ? -a.f : a.f);
            return 0;
        }
        if (a.t == V_INT || a.t == V_BOOL)
            return checked(R, x->k == E_NEG && as_int(&a) == INT64_MIN, x->k == E_NEG ? -as_int(&a) : as_int(&a), out,
                           line);
        return rterr(R, ERR_FORMAT, line, "bad operand type for unary %c: '%s'", x->k == E_NEG ? '-' : '+',
                     type_name(&a));
    case E_NOT:
        if (eval(R, f, x->a, &a))
            return -1;
        *out = mk_bool(!truthy(&a));
        return 0;
    case E_AND:
    case E_OR:
        if (eval(R, f, x->a, &a))
            return -1;
        if (truthy(&a) == (x->k == E_OR)) {
            *out = a;
            return 0;
        }
        return eval(R, f, x->b, out);
    case E_BIN:
        return eval(R, f, x->a, &a) || eval(R, f, x->b, &b) ? -1 : binop(R, x->op, &a, &b, out, line);
    case E_CONCAT: {
        struct buf bf = {0};
        if (eval(R, f, x->a, &a) || eval(R, f, x->b, &b) || py_str(R, &a, &bf, line) || py_str(R, &b, &bf, line)) {
            buf_release(R, &bf);
            return -1;
        }
        return buf_to_val(R, &bf, out, line);
    }
    case E_CMP: {
        if (eval(R, f, x->a, &a))
            return -1;
        for (size_t i = 0; i < x->nargs; i++) {
            bool r;
            int c;
            if (eval(R, f, x->args[i], &b))
                return -1;
            switch (x->ops[i]) {
            case C_EQ: r = py_eq(&a, &b); break;
            case C_NE: r = !py_eq(&a, &b); break;
            case C_IN:
            case C_NOTIN:
                if (py_in(R, &a, &b, &r, line))
                    return -1;
                r = r != (x->ops[i] == C_NOTIN);
                break;
            default:
                if (py_cmp(R, &a, &b, &c, line))
                    return -1;
                r = x->ops[i] == C_LT ? c == -1 : x->ops[i] == C_LE ? (c == -1 || c == 0)
                  : x->ops[i] == C_GT ? c == 1 : (c == 1 || c == 0);
            }
            if (!r) {
                *out = mk_bool(false);
                return 0;
            }
            a = b;
        }
        *out = mk_bool(true);
        return 0;
    }
    case E_COND:
        if (eval(R, f, x->a, &a))
            return -1;
        if (truthy(&a))
            return eval(R, f, x->b, out);
        if (!x->c) {
            *out = mk_undef(NULL);
            return 0;
        }
        return eval(R, f, x->c, out);
    case E_LIST:
    case E_TUPLE: {
        struct val *it;
        *out = mk_list(R, x->k == E_LIST ? L_LIST : L_TUPLE, x->nargs, line, &it);
        if (out->t != V_LIST)
            return -1;
        for (size_t i = 0; i < x->nargs; i++)
            if (eval(R, f, x->args[i], &it[i]))
                return -1;
        return 0;
    }
    default: { /* E_DICT */
        struct dict *d = new_dict(R, line);
        if (!d)
            return -1;
        for (size_t i = 0; i + 1 < x->nargs; i += 2) {
            if (eval(R, f, x->args[i], &a) || eval(R, f, x->args[i + 1], &b))
                return -1;
            if (!hashable(&a))
                return rterr(R, ERR_FORMAT, line, "unhashable type: '%s'", type_name(&a));
            if (dict_set(R, d, a, b, line))
                return -1;
        }
        *out = (struct val){.t = V_DICT, .d = d};
        return 0;
    }
    }
}

/* ---------------------------------------------------------------- statements */

enum { CTL_OK = 0, CTL_BREAK = 1, CTL_CONTINUE = 2, CTL_ERR = -1 };

static int item_at(struct rt *R, const struct val *it, struct val *items, size_t i, struct val *out)
{
    (void)R;
    *out = it->t == V_LIST && it->k == L_RANGE ? mk_int(it->l->start + (int64_t)i * it->l->step) : items[i];
    return 0;
}

static int exec_for(struct rt *R, struct frame *f, const struct stmt *s, struct buf *o)
{
    struct val it, *items = NULL;
    size_t n;
    if (eval(R, f, s->x, &it))
        return CTL_ERR;
    if (it.t == V_LIST && it.k == L_RANGE)
        n = it.l->n; /* computed item by item, never materialized */
    else if (iterate(R, &it, &items, &n, s->line))
        return CTL_ERR;
    struct frame fr = {.parent = f};
    if (!n)
        return exec_body(R, &fr, &s->orelse, o);
    struct loopv *lp = ralloc(R, sizeof *lp, s->line);
    if (!lp)
        return CTL_ERR;
    lp->length = (int64_t)n;
    for (size_t i = 0; i < n; i++) {
        struct val cur;
        if (step(R, s->line))
            return CTL_ERR;
        item_at(R, &it, items, i, &cur);
        lp->index0 = (int64_t)i;
        lp->prev = mk_undef(NULL);
        lp->next = mk_undef(NULL);
        if (i)
            item_at(R, &it, items, i - 1, &lp->prev);
        if (i + 1 < n)
            item_at(R, &it, items, i + 1, &lp->next);
        if (fr.vars)
            fr.vars->n = 0; /* each iteration starts a fresh scope */
        if (set_var(R, &fr, (struct sv){"loop", 4}, (struct val){.t = V_LOOP, .lp = lp}, s->line))
            return CTL_ERR;
        if (s->ntargets == 1) {
            if (set_var(R, &fr, s->targets[0], cur, s->line))
                return CTL_ERR;
        } else {
            struct val *parts;
            size_t np;
            if (cur.t == V_DICT || cur.t == V_UNDEF || iterate(R, &cur, &parts, &np, s->line))
                return R->e->code ? CTL_ERR
                                  : rterr(R, ERR_FORMAT, s->line, "cannot unpack non-iterable %s object", type_name(&cur));
            if (np != s->ntargets)
                return rterr(R, ERR_FORMAT, s->line, "cannot unpack %zu values into %zu loop variables", np,
                             s->ntargets);
            for (size_t k = 0; k < np; k++)
                if (set_var(R, &fr, s->targets[k], parts[k], s->line))
                    return CTL_ERR;
        }
        int rc = exec_body(R, &fr, &s->body, o);
        if (rc == CTL_ERR)
            return CTL_ERR;
        if (rc == CTL_BREAK)
            break;
    }
    return CTL_OK;
}

static int exec_body(struct rt *R, struct frame *f, const struct body *b, struct buf *o)
{
    for (size_t i = 0; i < b->n; i++) {
        const struct stmt *s = b->s[i];
        struct val v;
        int rc;
        if (step(R, s->line))
            return CTL_ERR;
        switch (s->k) {
        case S_TEXT:
            if (buf_put(R, o, s->text.p, s->text.n, s->line))
                return CTL_ERR;
            break;
        case S_OUT:
            if (eval(R, f, s->x, &v) || py_str(R, &v, o, s->line))
                return CTL_ERR;
            break;
        case S_IF:
            if (eval(R, f, s->x, &v))
                return CTL_ERR;
            rc = exec_body(R, f, truthy(&v) ? &s->body : &s->orelse, o);
            if (rc)
                return rc;
            break;
        case S_FOR:
            if (exec_for(R, f, s, o))
                return CTL_ERR;
            break;
        case S_SET:
            if (eval(R, f, s->x, &v) || set_var(R, f, s->name, v, s->line))
                return CTL_ERR;
            break;
        case S_SETATTR: {
            struct val ns = lookup(f, s->name);
            if (ns.t != V_NS)
                return rterr(R, ERR_FORMAT, s->line, "cannot assign attribute on non-namespace object");
            if (eval(R, f, s->x, &v) || dict_set(R, ns.d, mk_str(s->attr.p, s->attr.n), v, s->line))
                return CTL_ERR;
            break;
        }
        case S_MACRO:
            if (set_var(R, f, s->name, (struct val){.t = V_MACRO, .mc = s}, s->line))
                return CTL_ERR;
            break;
        case S_BREAK: return CTL_BREAK;
        default: return CTL_CONTINUE;
        }
    }
    return CTL_OK;
}

/* ---------------------------------------------------------------- JSON in */

static int from_json(struct rt *R, struct json_object *j, struct val *out, int depth)
{
    if (depth > 64)
        return rterr(R, ERR_RANGE, 0, "conversation JSON nested deeper than 64");
    switch (json_object_get_type(j)) {
    case json_type_null: *out = mk_none(); return 0;
    case json_type_boolean: *out = mk_bool(json_object_get_boolean(j)); return 0;
    case json_type_double: *out = mk_float(json_object_get_double(j)); return 0;
    case json_type_int: {
        int64_t i = json_object_get_int64(j);
        if (i == INT64_MAX && json_object_get_uint64(j) != (uint64_t)INT64_MAX)
            return rterr(R, ERR_UNSUPPORTED, 0, "conversation integer %llu: beyond int64 (not supported)",
                         (unsigned long long)json_object_get_uint64(j));
        *out = mk_int(i);
        return 0;
    }
    case json_type_string: {
        const char *s = json_object_get_string(j);
        size_t n = (size_t)json_object_get_string_len(j);
        if (!utf8_valid(s, n) || memchr(s, 0, n))
            return rterr(R, ERR_FORMAT, 0, "conversation string: not UTF-8 without NUL");
        *out = mk_str(s, n);
        return 0;
    }
    case json_type_array: {
        size_t n = json_object_array_length(j);
        struct val *it;
        *out = mk_list(R, L_LIST, n, 0, &it);
        if (out->t != V_LIST)
            return -1;
        for (size_t i = 0; i < n; i++)
            if (from_json(R, json_object_array_get_idx(j, i), &it[i], depth + 1))
                return -1;
        return 0;
    }
    default: {
        struct dict *d = new_dict(R, 0);
        if (!d)
            return -1;
        json_object_object_foreach(j, k, v)
        {
            struct val cv;
            size_t kl = strlen(k);
            if (!utf8_valid(k, kl))
                return rterr(R, ERR_FORMAT, 0, "conversation key: not UTF-8");
            if (from_json(R, v, &cv, depth + 1) || dict_set(R, d, mk_str(k, kl), cv, 0))
                return -1;
        }
        *out = (struct val){.t = V_DICT, .d = d};
        return 0;
    }
    }
}

/* ---------------------------------------------------------------- API */

int tmpl_parse(struct chat_template **out, const char *src, size_t len, const char *name, struct err *e)
{
    *out = NULL;
    if (!name)
        name = "chat template";
    if (len > TMPL_MAX_SOURCE)
        return err_set(e, ERR_RANGE, "%s: %zu bytes: over the %u-byte limit", name, len, TMPL_MAX_SOURCE);
    if (!utf8_valid(src, len) || memchr(src, 0, len))
        return err_set(e, ERR_FORMAT, "%s: not UTF-8 text without NUL", name);
    struct chat_template *t = calloc(1, sizeof *t);
    if (!t)
        return err_set(e, ERR_NOMEM, "%s: out of memory", name);
    snprintf(t->name, sizeof t->name, "%s", name);
    sha256_hex(src, len, t->sha);
    /* jinja2 first makes every newline \n and drops one trailing newline */
    char *norm = arena_alloc(&t->mem, len + 1);
    if (!norm) {
        tmpl_free(t);
        return err_set(e, ERR_NOMEM, "%s: out of memory", name);
    }
    size_t m = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') {
            norm[m++] = '\n';
            if (i + 1 < len && src[i + 1] == '\n')
                i++;
        } else {
            norm[m++] = src[i];
        }
    }
    if (m && norm[m - 1] == '\n')
        m--;
    struct lexer L = {.src = norm, .n = m, .line = 1, .mem = &t->mem, .e = e, .name = t->name};
    int rc = lex(&L);
    if (!rc) {
        struct parser *P = calloc(1, sizeof *P);
        if (!P) {
            rc = err_set(e, ERR_NOMEM, "%s: out of memory", name);
        } else {
            *P = (struct parser){.t = L.t, .mem = &t->mem, .e = e, .name = t->name};
            rc = parse_body(P, &t->root, NULL);
            static const char *const builtins[] = {"range", "namespace", "raise_exception", NULL};
            for (size_t i = 0; !rc && i < P->ncalled; i++) {
                bool ok = find_name(builtins, P->called[i]) >= 0;
                for (size_t k = 0; !ok && k < P->nmacros; k++)
                    ok = sv_same(P->macros[k], P->called[i]);
                if (!ok)
                    rc = err_set(e, ERR_UNSUPPORTED, "%s: line %d: function '%.*s': not supported (not a macro of "
                                 "the template, range, namespace or raise_exception)", t->name, P->called_line[i],
                                 (int)P->called[i].n, P->called[i].p);
            }
            free(P);
        }
    }
    free(L.t);
    if (rc) {
        tmpl_free(t);
        return rc;
    }
    *out = t;
    return 0;
}

int tmpl_load(struct chat_template **out, const char *src, size_t len, const char *name, struct err *e)
{
    char hex[65];
    *out = NULL;
    sha256_hex(src, len, hex);
    for (size_t i = 0; i < sizeof known_templates / sizeof *known_templates; i++) {
        if (strcmp(hex, known_templates[i].sha256))
            continue;
        int rc = tmpl_parse(out, src, len, name, e);
        if (!rc)
            (*out)->label = known_templates[i].label;
        return rc;
    }
    return err_set(e, ERR_UNSUPPORTED, "%s: unknown chat template sha256 %s: not rendered; use --prompt",
                   name ? name : "chat template", hex);
}

void tmpl_free(struct chat_template *t)
{
    if (!t)
        return;
    arena_free(&t->mem);
    free(t);
}

const char *tmpl_sha256(const struct chat_template *t) { return t->sha; }
const char *tmpl_label(const struct chat_template *t) { return t->label; }

int tmpl_render(const struct chat_template *t, struct json_object *messages, struct json_object *tools,
                const struct tmpl_vars *v, char **out, size_t *len, struct err *e)
{
    *out = NULL;
    *len = 0;
    if (!messages || json_object_get_type(messages) != json_type_array)
        return err_set(e, ERR_USAGE, "%s: 'messages' must be a JSON array", t->name);
    if (tools && json_object_get_type(tools) != json_type_array)
        return err_set(e, ERR_USAGE, "%s: 'tools' must be a JSON array or absent", t->name);
    struct rt R = {.mem = {.cap = TMPL_MAX_MEMORY / 2}, .e = e, .tname = t->name};
    struct frame globals = {0}, top = {.parent = &globals};
    struct buf o = {0};
    struct val msgs, tl = mk_none();
    int rc = -1;
    if (from_json(&R, messages, &msgs, 0) || (tools && from_json(&R, tools, &tl, 0)))
        goto done;
    const char *bos = v->bos_token ? v->bos_token : "", *eos = v->eos_token ? v->eos_token : "";
    if (!utf8_valid(bos, strlen(bos)) || !utf8_valid(eos, strlen(eos))) {
        err_set(e, ERR_USAGE, "%s: bos_token / eos_token: not UTF-8", t->name);
        goto done;
    }
    if (set_var(&R, &globals, (struct sv){"messages", 8}, msgs, 0) ||
        set_var(&R, &globals, (struct sv){"tools", 5}, tl, 0) ||
        set_var(&R, &globals, (struct sv){"documents", 9}, mk_none(), 0) ||
        set_var(&R, &globals, (struct sv){"add_generation_prompt", 21}, mk_bool(v->add_generation_prompt), 0) ||
        set_var(&R, &globals, (struct sv){"bos_token", 9}, mk_str(bos, strlen(bos)), 0) ||
        set_var(&R, &globals, (struct sv){"eos_token", 9}, mk_str(eos, strlen(eos)), 0) ||
        set_var(&R, &globals, (struct sv){"range", 5}, (struct val){.t = V_FUNC, .fn = F_RANGE}, 0) ||
        set_var(&R, &globals, (struct sv){"namespace", 9}, (struct val){.t = V_FUNC, .fn = F_NAMESPACE}, 0) ||
        set_var(&R, &globals, (struct sv){"raise_exception", 15}, (struct val){.t = V_FUNC, .fn = F_RAISE}, 0) ||
        (v->enable_thinking >= 0 &&
         set_var(&R, &globals, (struct sv){"enable_thinking", 15}, mk_bool(v->enable_thinking != 0), 0)))
        goto done;
    R.top = &top;
    if (exec_body(&R, &top, &t->root, &o) == CTL_ERR)
        goto done;
    if (!o.p && buf_put(&R, &o, "", 0, 0))
        goto done;
    *out = o.p;
    *len = o.n;
    o.p = NULL;
    rc = 0;
done:
    free(o.p);
    arena_free(&R.mem);
    return rc ? (e && e->code ? (int)e->code : ERR_FORMAT) : 0;
}
