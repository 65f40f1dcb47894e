#include "core/gguf.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/bytes.h"
#include "core/fileio.h"

/* ggml types by id (ggml.h, ggml-common.h); the gaps are removed ids. Q8_1 is
 * 36 bytes as ggml defines it (gguf-py's table still says 40). */
static const struct {
    const char *name;
    uint32_t block, bytes;
} ggml_types[] = {
    [0] = {"F32", 1, 4},          [1] = {"F16", 1, 2},         [2] = {"Q4_0", 32, 18},      [3] = {"Q4_1", 32, 20},
    [6] = {"Q5_0", 32, 22},       [7] = {"Q5_1", 32, 24},      [8] = {"Q8_0", 32, 34},      [9] = {"Q8_1", 32, 36},
    [10] = {"Q2_K", 256, 84},     [11] = {"Q3_K", 256, 110},   [12] = {"Q4_K", 256, 144},   [13] = {"Q5_K", 256, 176},
    [14] = {"Q6_K", 256, 210},    [15] = {"Q8_K", 256, 292},   [16] = {"IQ2_XXS", 256, 66}, [17] = {"IQ2_XS", 256, 74},
    [18] = {"IQ3_XXS", 256, 98},  [19] = {"IQ1_S", 256, 50},   [20] = {"IQ4_NL", 32, 18},   [21] = {"IQ3_S", 256, 110},
    [22] = {"IQ2_S", 256, 82},    [23] = {"IQ4_XS", 256, 136}, [24] = {"I8", 1, 1},         [25] = {"I16", 1, 2},
    [26] = {"I32", 1, 4},         [27] = {"I64", 1, 8},        [28] = {"F64", 1, 8},        [29] = {"IQ1_M", 256, 56},
    [30] = {"BF16", 1, 2},        [34] = {"TQ1_0", 256, 54},   [35] = {"TQ2_0", 256, 66},   [39] = {"MXFP4", 32, 17},
    [40] = {"NVFP4", 64, 36},
};

/* Metadata value types: name, and the fewest bytes a value takes (a string:
 * its u64 length; an array: element type and count). */
static const struct {
    const char *name;
    uint32_t size;
} vtypes[] = {
    [GGUF_U8] = {"u8", 1},   [GGUF_I8] = {"i8", 1},   [GGUF_U16] = {"u16", 2}, [GGUF_I16] = {"i16", 2},
    [GGUF_U32] = {"u32", 4}, [GGUF_I32] = {"i32", 4}, [GGUF_F32] = {"f32", 4}, [GGUF_BOOL] = {"bool", 1},
    [GGUF_U64] = {"u64", 8}, [GGUF_I64] = {"i64", 8}, [GGUF_F64] = {"f64", 8}, [GGUF_STRING] = {"string", 8},
    [GGUF_ARRAY] = {"array", 12},
};
#define N_VTYPES (sizeof vtypes / sizeof vtypes[0])

/* The fewest bytes a metadata entry (key of 1 byte, type, 1-byte value) and
 * a tensor info (name of 1 byte, n_dims 1) take. */
#define MIN_KV_BYTES (8 + 1 + 4 + 1)
#define MIN_TENSOR_BYTES (8 + 1 + 4 + 8 + 4 + 8)

bool ggml_type_info(uint32_t type, const char **name, uint32_t *block, uint32_t *block_bytes)
{
    if (type >= sizeof ggml_types / sizeof ggml_types[0] || !ggml_types[type].name)
        return false;
    if (name)
        *name = ggml_types[type].name;
    if (block)
        *block = ggml_types[type].block;
    if (block_bytes)
        *block_bytes = ggml_types[type].bytes;
    return true;
}

const char *gguf_vtype_name(uint32_t type)
{
    return type < N_VTYPES ? vtypes[type].name : "unknown";
}

static bool is_int(uint32_t t)
{
    return t <= GGUF_I32 || t == GGUF_U64 || t == GGUF_I64;
}

static bool is_signed(uint32_t t)
{
    return t == GGUF_I8 || t == GGUF_I16 || t == GGUF_I32 || t == GGUF_I64;
}

/* A read position in the image. */
struct cur {
    const uint8_t *p;
    uint64_t pos, end;
};

static uint64_t left(const struct cur *c)
{
    return c->end - c->pos;
}

/* Checks that n bytes of `what` remain at the position. */
static int need(const struct cur *c, uint64_t n, const char *what, struct err *e)
{
    if (n <= left(c))
        return ERR_OK;
    return err_set(e, ERR_FORMAT,
                   "%s of %llu bytes at offset %llu reaches past the end of the file (%llu bytes remain; truncated)",
                   what, (unsigned long long)n, (unsigned long long)c->pos, (unsigned long long)left(c));
}

static uint32_t take_u32(struct cur *c)
{
    uint32_t v = rd_u32le(c->p + c->pos);
    c->pos += 4;
    return v;
}

static uint64_t take_u64(struct cur *c)
{
    uint64_t v = rd_u64le(c->p + c->pos);
    c->pos += 8;
    return v;
}

/* A gguf_string: u64 length, then the bytes. */
static int take_str(struct cur *c, const uint8_t **s, uint64_t *n, struct err *e)
{
    int rc = need(c, 8, "string length", e);
    if (rc != ERR_OK)
        return rc;
    *n = take_u64(c);
    if ((rc = need(c, *n, "string", e)) != ERR_OK)
        return rc;
    *s = c->p + c->pos;
    c->pos += *n;
    return ERR_OK;
}

/* Strict UTF-8 (no overlong forms, surrogates or code points past U+10FFFF)
 * without NUL bytes. */
static bool valid_name(const uint8_t *s, uint64_t n)
{
    for (uint64_t i = 0; i < n;) {
        uint8_t b = s[i];
        uint32_t len, min, cp;
        if (b == 0)
            return false;
        if (b < 0x80) {
            i++;
            continue;
        }
        if ((b & 0xe0) == 0xc0) {
            len = 2, min = 0x80, cp = b & 0x1fu;
        } else if ((b & 0xf0) == 0xe0) {
            len = 3, min = 0x800, cp = b & 0x0fu;
        } else if ((b & 0xf8) == 0xf0) {
            len = 4, min = 0x10000, cp = b & 0x07u;
        } else {
            return false;
        }
        if (n - i < len)
            return false;
        for (uint32_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xc0) != 0x80)
                return false;
            cp = cp << 6 | (s[i + k] & 0x3fu);
        }
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            return false;
        i += len;
    }
    return true;
}

/* A key or tensor name of 1..max bytes, valid, copied NUL-terminated. */
static int take_name(struct cur *c, uint64_t max, const char *what, char **out, struct err *e)
{
    uint64_t at = c->pos, n;
    const uint8_t *s;
    int rc = take_str(c, &s, &n, e);
    if (rc != ERR_OK) {
        err_prefix(e, "%s at offset %llu", what, (unsigned long long)at);
        return rc;
    }
    if (n == 0 || n > max)
        return err_set(e, ERR_FORMAT, "%s at offset %llu is %llu bytes long, expected 1..%llu", what,
                       (unsigned long long)at, (unsigned long long)n, (unsigned long long)max);
    if (!valid_name(s, n))
        return err_set(e, ERR_FORMAT, "%s at offset %llu (%llu bytes) holds a NUL byte or invalid UTF-8", what,
                       (unsigned long long)at, (unsigned long long)n);
    if (!(*out = malloc((size_t)n + 1)))
        return err_set(e, ERR_NOMEM, "cannot copy %s (%llu bytes)", what, (unsigned long long)n);
    memcpy(*out, s, (size_t)n);
    (*out)[n] = '\0';
    return ERR_OK;
}

/* Decodes the scalar of type t (not STRING or ARRAY) at p. */
static void decode(uint32_t t, const uint8_t *p, struct gguf_kv *kv)
{
    switch (t) {
    case GGUF_U8:
    case GGUF_BOOL: kv->v.u = p[0]; break;
    case GGUF_I8: kv->v.i = (int8_t)p[0]; break;
    case GGUF_U16: kv->v.u = rd_u16le(p); break;
    case GGUF_I16: kv->v.i = (int16_t)rd_u16le(p); break;
    case GGUF_U32: kv->v.u = rd_u32le(p); break;
    case GGUF_I32: kv->v.i = (int32_t)rd_u32le(p); break;
    case GGUF_U64: kv->v.u = rd_u64le(p); break;
    case GGUF_I64: kv->v.i = (int64_t)rd_u64le(p); break;
    case GGUF_F32: {
        uint32_t b = rd_u32le(p);
        float f;
        memcpy(&f, &b, 4);
        kv->v.f = (double)f;
        break;
    }
    case GGUF_F64: {
        uint64_t b = rd_u64le(p);
        memcpy(&kv->v.f, &b, 8);
        break;
    }
    default: break;
    }
}

/* An array: u32 element type, u64 count, the elements, all validated in
 * place (bools 0 or 1, each string and nested array within the file). */
static int take_array(struct cur *c, int depth, uint32_t *elem, uint64_t *count, const uint8_t **first,
                      struct err *e)
{
    int rc = need(c, 12, "array header", e);
    if (rc != ERR_OK)
        return rc;
    uint32_t t = take_u32(c);
    uint64_t n = take_u64(c), bytes;
    if (t >= N_VTYPES)
        return err_set(e, ERR_FORMAT, "array element type %u, expected 0..%zu", t, N_VTYPES - 1);
    if (t == GGUF_ARRAY && depth >= GGUF_MAX_DEPTH)
        return err_set(e, ERR_RANGE, "arrays nested more than %d deep", GGUF_MAX_DEPTH);
    if (!ck_mul_u64(n, vtypes[t].size, &bytes) || bytes > left(c))
        return err_set(e, ERR_FORMAT, "array of %llu %s elements at offset %llu is larger than the file "
                       "(%llu bytes remain; truncated)", (unsigned long long)n, vtypes[t].name,
                       (unsigned long long)c->pos, (unsigned long long)left(c));
    *elem = t;
    *count = n;
    *first = c->p + c->pos;
    if (t != GGUF_STRING && t != GGUF_ARRAY) {
        if (t == GGUF_BOOL)
            for (uint64_t i = 0; i < n; i++)
                if (c->p[c->pos + i] > 1)
                    return err_set(e, ERR_FORMAT, "bool element %llu is %u, expected 0 or 1", (unsigned long long)i,
                                   c->p[c->pos + i]);
        c->pos += bytes;
        return ERR_OK;
    }
    for (uint64_t i = 0; i < n; i++) {
        const uint8_t *s;
        uint64_t len;
        uint32_t sub_t;
        rc = t == GGUF_STRING ? take_str(c, &s, &len, e) : take_array(c, depth + 1, &sub_t, &len, &s, e);
        if (rc != ERR_OK) {
            err_prefix(e, "element %llu", (unsigned long long)i);
            return rc;
        }
    }
    return ERR_OK;
}

/* The value of type t at the position. */
static int take_value(struct cur *c, uint32_t t, struct gguf_kv *kv, struct err *e)
{
    if (t >= N_VTYPES)
        return err_set(e, ERR_FORMAT, "value type %u, expected 0..%zu", t, N_VTYPES - 1);
    kv->type = (enum gguf_vtype)t;
    if (t == GGUF_STRING)
        return take_str(c, &kv->str, &kv->n, e);
    if (t == GGUF_ARRAY) {
        uint32_t elem;
        int rc = take_array(c, 1, &elem, &kv->n, &kv->arr, e);
        kv->elem = (enum gguf_vtype)elem;
        return rc;
    }
    int rc = need(c, vtypes[t].size, vtypes[t].name, e);
    if (rc != ERR_OK)
        return rc;
    decode(t, c->p + c->pos, kv);
    c->pos += vtypes[t].size;
    if (t == GGUF_BOOL && kv->v.u > 1)
        return err_set(e, ERR_FORMAT, "bool value %llu, expected 0 or 1", (unsigned long long)kv->v.u);
    return ERR_OK;
}

static int parse_kv(struct cur *c, size_t idx, struct gguf_kv *kv, struct err *e)
{
    char what[64];
    snprintf(what, sizeof what, "the key of metadata entry %zu", idx);
    char *key;
    int rc = take_name(c, GGUF_MAX_KEY, what, &key, e);
    if (rc != ERR_OK)
        return rc;
    kv->key = key;
    if ((rc = need(c, 4, "value type", e)) == ERR_OK)
        rc = take_value(c, take_u32(c), kv, e);
    if (rc != ERR_OK)
        err_prefix(e, "key '%.200s'", key);
    return rc;
}

/* "[a, b, c]" of a tensor's ne. */
static void fmt_ne(char *buf, size_t cap, const struct gguf_tensor *t)
{
    size_t n = (size_t)snprintf(buf, cap, "[");
    for (uint32_t j = 0; j < t->n_dims && n < cap; j++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%llu", j ? ", " : "", (unsigned long long)t->ne[j]);
    if (n < cap)
        snprintf(buf + n, cap - n, "]");
}

/* Name, dims, type and offset of one tensor info; its size from ne and the type. */
static int parse_tensor(struct cur *c, size_t idx, struct gguf_tensor *t, struct err *e)
{
    char what[64];
    snprintf(what, sizeof what, "the name of tensor %zu", idx);
    char *name;
    int rc = take_name(c, GGUF_MAX_NAME, what, &name, e);
    if (rc != ERR_OK)
        return rc;
    t->name = name;
    if ((rc = need(c, 4, "n_dims", e)) == ERR_OK && ((t->n_dims = take_u32(c)) < 1 || t->n_dims > GGUF_MAX_DIMS))
        rc = err_set(e, ERR_FORMAT, "n_dims %u, expected 1..%d", t->n_dims, GGUF_MAX_DIMS);
    if (rc == ERR_OK)
        rc = need(c, 8ull * t->n_dims + 4 + 8, "ne, type and offset", e);
    if (rc != ERR_OK) {
        err_prefix(e, "tensor '%s'", name);
        return rc;
    }
    for (uint32_t j = 0; j < GGUF_MAX_DIMS; j++)
        t->ne[j] = j < t->n_dims ? take_u64(c) : 1;
    t->type = take_u32(c);
    t->offset = take_u64(c);

    char ne[128];
    fmt_ne(ne, sizeof ne, t);
    /* ggml counts elements in int64: the product of the dims (a 0 taken as 1,
     * so that every partial product fits too) must stay below 2^63. */
    uint64_t prod = 1;
    for (uint32_t j = 0; j < t->n_dims; j++)
        if (!ck_mul_u64(prod, t->ne[j] ? t->ne[j] : 1, &prod) || prod > INT64_MAX)
            return err_set(e, ERR_RANGE, "tensor '%s': ne %s overflows: more than 2^63-1 elements", name, ne);
    const char *tname;
    uint32_t block, bytes;
    if (!ggml_type_info(t->type, &tname, &block, &bytes))
        return err_set(e, ERR_FORMAT,
                       "tensor '%s': unknown ggml type %u (an id ggml removed, or newer than this reader)", name,
                       t->type);
    if (t->ne[0] % block)
        return err_set(e, ERR_FORMAT, "tensor '%s' (%s): ne[0] = %llu is not a multiple of the type's block of %u",
                       name, tname, (unsigned long long)t->ne[0], block);
    uint64_t nb;
    bool ok = ck_mul_u64(t->ne[0] / block, bytes, &nb);
    for (uint32_t j = 1; j < t->n_dims; j++)
        ok = ok && ck_mul_u64(nb, t->ne[j], &nb);
    if (!ok)
        return err_set(e, ERR_RANGE, "tensor '%s' (%s, ne %s): byte size overflows u64", name, tname, ne);
    t->nbytes = nb;
    return ERR_OK;
}

static int cmp_kv(const void *a, const void *b)
{
    return strcmp((*(const struct gguf_kv *const *)a)->key, (*(const struct gguf_kv *const *)b)->key);
}

static int cmp_tensor_name(const void *a, const void *b)
{
    return strcmp((*(const struct gguf_tensor *const *)a)->name, (*(const struct gguf_tensor *const *)b)->name);
}

static int cmp_tensor_offset(const void *a, const void *b)
{
    const struct gguf_tensor *x = *(const struct gguf_tensor *const *)a, *y = *(const struct gguf_tensor *const *)b;
    if (x->offset != y->offset)
        return x->offset < y->offset ? -1 : 1;
    return x->nbytes < y->nbytes ? -1 : x->nbytes > y->nbytes;
}

/* general.alignment: a u32 power of two of at least 8, or absent (32). */
static int find_alignment(struct gguf_file *g, struct err *e)
{
    const struct gguf_kv *kv = gguf_find_kv(g, "general.alignment");
    g->alignment = GGUF_DEFAULT_ALIGNMENT;
    if (!kv)
        return ERR_OK;
    if (kv->type != GGUF_U32)
        return err_set(e, ERR_FORMAT, "general.alignment is %s, expected u32", gguf_vtype_name(kv->type));
    if (kv->v.u < 8 || (kv->v.u & (kv->v.u - 1)))
        return err_set(e, ERR_FORMAT, "general.alignment is %llu, expected a power of two of at least 8",
                       (unsigned long long)kv->v.u);
    g->alignment = kv->v.u;
    return ERR_OK;
}

/* Every tensor: offset aligned, data inside the file, no two overlapping. */
static int place_tensors(struct gguf_file *g, struct err *e)
{
    for (size_t i = 0; i < g->n_tensors; i++) {
        struct gguf_tensor *t = &g->tensors[i];
        uint64_t start, end;
        if (t->offset % g->alignment)
            return err_set(e, ERR_FORMAT, "tensor '%s': offset %llu is not a multiple of the alignment %llu", t->name,
                           (unsigned long long)t->offset, (unsigned long long)g->alignment);
        if (!ck_add_u64(g->data_offset, t->offset, &start) || !ck_add_u64(start, t->nbytes, &end) || end > g->size)
            return err_set(e, ERR_FORMAT, "tensor '%s': %llu bytes at offset %llu of the data section (which starts "
                           "at file byte %llu) reach past the end of the %zu-byte file (truncated)", t->name,
                           (unsigned long long)t->nbytes, (unsigned long long)t->offset,
                           (unsigned long long)g->data_offset, g->size);
        t->data = g->map + start;
    }
    const struct gguf_tensor **order = malloc((g->n_tensors ? g->n_tensors : 1) * sizeof *order);
    if (!order)
        return err_set(e, ERR_NOMEM, "cannot allocate %zu pointers", g->n_tensors);
    for (size_t i = 0; i < g->n_tensors; i++)
        order[i] = &g->tensors[i];
    qsort(order, g->n_tensors, sizeof *order, cmp_tensor_offset);
    const struct gguf_tensor *prev = NULL;
    int rc = ERR_OK;
    for (size_t i = 0; i < g->n_tensors && rc == ERR_OK; i++) {
        const struct gguf_tensor *t = order[i];
        if (t->nbytes == 0)
            continue;
        if (prev && t->offset < prev->offset + prev->nbytes)
            rc = err_set(e, ERR_FORMAT, "tensor '%s' at [%llu, %llu) overlaps tensor '%s' at [%llu, %llu)", t->name,
                         (unsigned long long)t->offset, (unsigned long long)(t->offset + t->nbytes), prev->name,
                         (unsigned long long)prev->offset, (unsigned long long)(prev->offset + prev->nbytes));
        prev = t;
    }
    free(order);
    return rc;
}

static int parse(struct gguf_file *g, struct err *e)
{
    struct cur c = {g->map, 0, g->size};
    if (g->size < 4 || memcmp(g->map, "GGUF", 4) != 0)
        return err_set(e, ERR_FORMAT, "not a GGUF file: %s, expected the magic \"GGUF\"",
                       g->size < 4 ? "shorter than 4 bytes" : "the first 4 bytes differ");
    if (g->size < 24)
        return err_set(e, ERR_FORMAT, "%zu bytes, too small for the 24-byte GGUF header", g->size);
    c.pos = 4;
    g->version = take_u32(&c);
    if (g->version == 1)
        return err_set(e, ERR_UNSUPPORTED, "GGUF version 1 (32-bit counts) is not supported, expected 2 or 3");
    if (g->version != 0 && (g->version & 0xffff) == 0)
        return err_set(e, ERR_UNSUPPORTED, "big-endian GGUF (version field 0x%08x, a byte-swapped small number); "
                       "only little-endian files are supported", g->version);
    if (g->version != 2 && g->version != 3)
        return err_set(e, ERR_UNSUPPORTED, "GGUF version %u, expected 2 or 3", g->version);
    uint64_t n_tensors = take_u64(&c), n_kv = take_u64(&c);
    if (n_kv > GGUF_MAX_KV)
        return err_set(e, ERR_RANGE, "%llu metadata entries, above the limit of %d", (unsigned long long)n_kv,
                       GGUF_MAX_KV);
    if (n_tensors > GGUF_MAX_TENSORS)
        return err_set(e, ERR_RANGE, "%llu tensors, above the limit of %d", (unsigned long long)n_tensors,
                       GGUF_MAX_TENSORS);
    /* Both counts are below 2^20 now: the products below cannot overflow. */
    if (n_kv * MIN_KV_BYTES > left(&c))
        return err_set(e, ERR_FORMAT, "metadata count %llu is larger than the file: at least %llu bytes needed, "
                       "%llu remain", (unsigned long long)n_kv, (unsigned long long)(n_kv * MIN_KV_BYTES),
                       (unsigned long long)left(&c));

    if (!(g->kv = calloc(n_kv ? n_kv : 1, sizeof *g->kv)) ||
        !(g->kv_by_key = malloc((n_kv ? n_kv : 1) * sizeof *g->kv_by_key)))
        return err_set(e, ERR_NOMEM, "cannot allocate %llu metadata entries", (unsigned long long)n_kv);
    int rc;
    g->n_kv = (size_t)n_kv; /* keys not yet read are NULL */
    for (size_t i = 0; i < g->n_kv; i++) {
        if ((rc = parse_kv(&c, i, &g->kv[i], e)) != ERR_OK)
            return rc;
        g->kv_by_key[i] = &g->kv[i];
    }
    qsort(g->kv_by_key, g->n_kv, sizeof *g->kv_by_key, cmp_kv);
    for (size_t i = 1; i < g->n_kv; i++)
        if (strcmp(g->kv_by_key[i - 1]->key, g->kv_by_key[i]->key) == 0) {
            ptrdiff_t a = g->kv_by_key[i - 1] - g->kv, b = g->kv_by_key[i] - g->kv;
            return err_set(e, ERR_FORMAT, "duplicate key '%.200s' (metadata entries %td and %td)",
                           g->kv_by_key[i]->key, a < b ? a : b, a < b ? b : a);
        }
    if ((rc = find_alignment(g, e)) != ERR_OK)
        return rc;

    if (n_tensors * MIN_TENSOR_BYTES > left(&c))
        return err_set(e, ERR_FORMAT, "tensor count %llu is larger than the file: at least %llu bytes needed at "
                       "offset %llu, %llu remain", (unsigned long long)n_tensors,
                       (unsigned long long)(n_tensors * MIN_TENSOR_BYTES),
                       (unsigned long long)c.pos, (unsigned long long)left(&c));
    if (!(g->tensors = calloc(n_tensors ? n_tensors : 1, sizeof *g->tensors)) ||
        !(g->tensor_by_name = malloc((n_tensors ? n_tensors : 1) * sizeof *g->tensor_by_name)))
        return err_set(e, ERR_NOMEM, "cannot allocate %llu tensor records", (unsigned long long)n_tensors);
    g->n_tensors = (size_t)n_tensors;
    for (size_t i = 0; i < g->n_tensors; i++) {
        if ((rc = parse_tensor(&c, i, &g->tensors[i], e)) != ERR_OK)
            return rc;
        g->tensor_by_name[i] = &g->tensors[i];
    }
    qsort(g->tensor_by_name, g->n_tensors, sizeof *g->tensor_by_name, cmp_tensor_name);
    for (size_t i = 1; i < g->n_tensors; i++)
        if (strcmp(g->tensor_by_name[i - 1]->name, g->tensor_by_name[i]->name) == 0) {
            ptrdiff_t a = g->tensor_by_name[i - 1] - g->tensors, b = g->tensor_by_name[i] - g->tensors;
            return err_set(e, ERR_FORMAT, "duplicate tensor name '%s' (tensors %td and %td)",
                           g->tensor_by_name[i]->name, a < b ? a : b, a < b ? b : a);
        }

    ck_align_u64(c.pos, g->alignment, &g->data_offset); /* pos < 2^63, alignment < 2^32: no overflow */
    return place_tensors(g, e);
}

static int open_map(struct gguf_file *g, const char *name, struct err *e)
{
    int rc = parse(g, e);
    if (rc != ERR_OK) {
        err_prefix(e, "%s", name);
        gguf_close(g);
    }
    return rc;
}

int gguf_open(struct gguf_file *g, const char *path, struct err *e)
{
    memset(g, 0, sizeof *g);
    if (!(g->path = strdup(path)))
        return err_set(e, ERR_NOMEM, "cannot copy a path");
    int fd;
    uint64_t size;
    int rc = fio_open_read(path, FIO_INPUT, &fd, &size, e);
    if (rc != ERR_OK) {
        gguf_close(g);
        return rc;
    }
    if (size > 0) {
        void *m = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            rc = err_set(e, ERR_IO, "%s: mmap of %llu bytes failed: %s", path, (unsigned long long)size,
                         strerror(errno));
            close(fd);
            gguf_close(g);
            return rc;
        }
        g->map = m;
        g->size = (size_t)size;
        g->owns_map = true;
    }
    close(fd);
    return open_map(g, path, e);
}

int gguf_open_mem(struct gguf_file *g, const uint8_t *buf, size_t len, const char *name, struct err *e)
{
    memset(g, 0, sizeof *g);
    if (!(g->path = strdup(name)))
        return err_set(e, ERR_NOMEM, "cannot copy a name");
    g->map = buf;
    g->size = len;
    return open_map(g, name, e);
}

void gguf_close(struct gguf_file *g)
{
    if (!g)
        return;
    for (size_t i = 0; i < g->n_kv; i++)
        free((char *)g->kv[i].key);
    free(g->kv);
    free(g->kv_by_key);
    for (size_t i = 0; i < g->n_tensors; i++)
        free((char *)g->tensors[i].name);
    free(g->tensors);
    free(g->tensor_by_name);
    if (g->owns_map)
        munmap((void *)g->map, g->size);
    free(g->path);
    memset(g, 0, sizeof *g);
}

const struct gguf_kv *gguf_find_kv(const struct gguf_file *g, const char *key)
{
    if (!g->n_kv)
        return NULL;
    const struct gguf_kv k = {.key = key}, *kp = &k;
    const struct gguf_kv *const *hit = bsearch(&kp, g->kv_by_key, g->n_kv, sizeof kp, cmp_kv);
    return hit ? *hit : NULL;
}

const struct gguf_tensor *gguf_find_tensor(const struct gguf_file *g, const char *name)
{
    if (!g->n_tensors)
        return NULL;
    const struct gguf_tensor k = {.name = name}, *kp = &k;
    const struct gguf_tensor *const *hit = bsearch(&kp, g->tensor_by_name, g->n_tensors, sizeof kp, cmp_tensor_name);
    return hit ? *hit : NULL;
}

/* The kv of `key`, or NULL with ERR_OK and *found = false when optional. */
static int get_kv(const struct gguf_file *g, const char *key, bool optional, bool *found, const struct gguf_kv **kv,
                  struct err *e)
{
    *kv = gguf_find_kv(g, key);
    if (found)
        *found = *kv != NULL;
    if (!*kv && !optional)
        return err_set(e, ERR_CONFIG, "%s: metadata key '%s' is missing", g->path, key);
    return ERR_OK;
}

int gguf_get_u64(const struct gguf_file *g, const char *key, bool optional, bool *found, uint64_t *out, struct err *e)
{
    const struct gguf_kv *kv;
    int rc = get_kv(g, key, optional, found, &kv, e);
    if (rc != ERR_OK || !kv)
        return rc;
    if (!is_int(kv->type))
        return err_set(e, ERR_CONFIG, "%s: metadata key '%s' is %s, expected an integer", g->path, key,
                       gguf_vtype_name(kv->type));
    if (is_signed(kv->type) && kv->v.i < 0)
        return err_set(e, ERR_CONFIG, "%s: metadata key '%s' is %lld, expected a non-negative integer", g->path, key,
                       (long long)kv->v.i);
    *out = is_signed(kv->type) ? (uint64_t)kv->v.i : kv->v.u;
    return ERR_OK;
}

int gguf_get_f64(const struct gguf_file *g, const char *key, bool optional, bool *found, double *out, struct err *e)
{
    const struct gguf_kv *kv;
    int rc = get_kv(g, key, optional, found, &kv, e);
    if (rc != ERR_OK || !kv)
        return rc;
    if (kv->type != GGUF_F32 && kv->type != GGUF_F64)
        return err_set(e, ERR_CONFIG, "%s: metadata key '%s' is %s, expected f32 or f64", g->path, key,
                       gguf_vtype_name(kv->type));
    *out = kv->v.f;
    return ERR_OK;
}

int gguf_get_str(const struct gguf_file *g, const char *key, bool optional, bool *found, char *out, size_t cap,
                 struct err *e)
{
    const struct gguf_kv *kv;
    int rc = get_kv(g, key, optional, found, &kv, e);
    if (rc != ERR_OK || !kv)
        return rc;
    if (kv->type != GGUF_STRING)
        return err_set(e, ERR_CONFIG, "%s: metadata key '%s' is %s, expected a string", g->path, key,
                       gguf_vtype_name(kv->type));
    if (kv->n >= cap)
        return err_set(e, ERR_CONFIG, "%s: metadata key '%s' is a string of %llu bytes, expected fewer than %zu",
                       g->path, key, (unsigned long long)kv->n, cap);
    if (memchr(kv->str, 0, (size_t)kv->n))
        return err_set(e, ERR_CONFIG, "%s: metadata key '%s' holds a NUL byte", g->path, key);
    memcpy(out, kv->str, (size_t)kv->n);
    out[kv->n] = '\0';
    return ERR_OK;
}

bool gguf_array_int(const struct gguf_kv *kv, uint64_t i, int64_t *out)
{
    if (kv->type != GGUF_ARRAY || !(is_int(kv->elem) || kv->elem == GGUF_BOOL) || i >= kv->n)
        return false;
    struct gguf_kv v;
    decode(kv->elem, kv->arr + i * vtypes[kv->elem].size, &v);
    if (is_signed(kv->elem)) {
        *out = v.v.i;
        return true;
    }
    if (v.v.u > INT64_MAX)
        return false;
    *out = (int64_t)v.v.u;
    return true;
}
