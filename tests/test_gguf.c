/* test_gguf.c - the GGUF reader against INPUTS.md §6.
 *
 * Images are written here, byte by byte, by a small writer. The valid file
 * holds a metadata value of every type (a 300,000-string array among them,
 * read in place) and F32, F16, BF16, Q4_0 and Q8_0 tensors whose offsets,
 * sizes and data pointers are checked exactly, under the default alignment
 * and general.alignment = 64. The hostile inputs are one table; each must be
 * refused with the expected code and a message naming the problem, through
 * gguf_open_mem and through gguf_open on a real file. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/bytes.h"
#include "core/gguf.h"
#include "tests/helpers.h"

/* ------------------------------------------------------------------ writer */

struct buf {
    uint8_t *p;
    size_t n, cap;
};

static void put(struct buf *b, const void *d, size_t n)
{
    if (b->n + n > b->cap) {
        b->cap = 2 * (b->n + n) + 64;
        b->p = realloc(b->p, b->cap);
        cr_assert(b->p);
    }
    memcpy(b->p + b->n, d, n);
    b->n += n;
}

static void put_u8(struct buf *b, uint8_t v)
{
    put(b, &v, 1);
}

static void put_u16(struct buf *b, uint16_t v)
{
    uint8_t x[2];
    wr_u16le(x, v);
    put(b, x, 2);
}

static void put_u32(struct buf *b, uint32_t v)
{
    uint8_t x[4];
    wr_u32le(x, v);
    put(b, x, 4);
}

static void put_u64(struct buf *b, uint64_t v)
{
    uint8_t x[8];
    wr_u64le(x, v);
    put(b, x, 8);
}

static void put_f32(struct buf *b, float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    put_u32(b, u);
}

static void put_str(struct buf *b, const char *s)
{
    put_u64(b, strlen(s));
    put(b, s, strlen(s));
}

static void head(struct buf *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv)
{
    put(b, "GGUF", 4);
    put_u32(b, version);
    put_u64(b, n_tensors);
    put_u64(b, n_kv);
}

static void key(struct buf *b, const char *k, uint32_t type)
{
    put_str(b, k);
    put_u32(b, type);
}

static void tinfo(struct buf *b, const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type, uint64_t offset)
{
    put_str(b, name);
    put_u32(b, n_dims);
    for (uint32_t j = 0; j < n_dims; j++)
        put_u64(b, ne[j]);
    put_u32(b, type);
    put_u64(b, offset);
}

static void pad(struct buf *b, size_t align)
{
    while (b->n % align)
        put_u8(b, 0);
}

/* n data bytes: i & 0xff. */
static void fill(struct buf *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        put_u8(b, (uint8_t)i);
}

/* A file of one tensor "w" (no metadata), padded to 32, then `data` bytes. */
static void one_tensor(struct buf *b, uint32_t n_dims, const uint64_t *ne, uint32_t type, uint64_t offset,
                       size_t data)
{
    head(b, 3, 1, 0);
    tinfo(b, "w", n_dims, ne, type, offset);
    pad(b, 32);
    fill(b, data);
}

/* ------------------------------------------------------------- valid file */

#define N_TOKENS 300000

/* The five tensors: F32 [3, 2], F16 [4], BF16 [2, 2], Q4_0 [64, 2], Q8_0 [32, 1, 2]. */
static const struct {
    const char *name;
    uint32_t n_dims;
    uint64_t ne[4];
    uint32_t type;
    uint64_t nbytes;
} vt[5] = {
    {"token_embd.weight", 2, {3, 2, 1, 1}, GGML_F32, 24},
    {"blk.0.attn_norm.weight", 1, {4, 1, 1, 1}, GGML_F16, 8},
    {"output_norm.weight", 2, {2, 2, 1, 1}, GGML_BF16, 8},
    {"blk.0.attn_q.weight", 2, {64, 2, 1, 1}, GGML_Q4_0, 72},
    {"blk.0.ffn_gate_up_exps.weight", 3, {32, 1, 2, 1}, GGML_Q8_0, 68},
};

/* Every metadata type, then the five tensors laid out at `align` (0: no
 * general.alignment key, so 32); `trailing` zero bytes after the last one.
 * *ti_end: where the tensor infos end. */
static void valid_file(struct buf *b, uint32_t align, size_t trailing, size_t *ti_end, uint64_t offsets[5])
{
    uint32_t a = align ? align : 32;
    head(b, 3, 5, 18 + (align != 0));
    if (align) {
        key(b, "general.alignment", GGUF_U32);
        put_u32(b, align);
    }
    key(b, "t.u8", GGUF_U8), put_u8(b, 200);
    key(b, "t.i8", GGUF_I8), put_u8(b, 0xfb); /* -5 */
    key(b, "t.u16", GGUF_U16), put_u16(b, 60000);
    key(b, "t.i16", GGUF_I16), put_u16(b, (uint16_t)-300);
    key(b, "t.u32", GGUF_U32), put_u32(b, 4000000000u);
    key(b, "t.i32", GGUF_I32), put_u32(b, (uint32_t)-70000);
    key(b, "t.f32", GGUF_F32), put_f32(b, 1.5f);
    key(b, "t.bool", GGUF_BOOL), put_u8(b, 1);
    key(b, "general.architecture", GGUF_STRING), put_str(b, "gemma4");
    key(b, "t.u64", GGUF_U64), put_u64(b, (1ull << 40) + 3);
    key(b, "t.i64", GGUF_I64), put_u64(b, (uint64_t)-(1ll << 40));
    key(b, "t.f64", GGUF_F64), put_u64(b, 0x3fb999999999999aull); /* 0.1 */
    key(b, "t.arr_i32", GGUF_ARRAY), put_u32(b, GGUF_I32), put_u64(b, 3);
    put_u32(b, 1), put_u32(b, (uint32_t)-2), put_u32(b, 2147483647);
    key(b, "t.arr_bool", GGUF_ARRAY), put_u32(b, GGUF_BOOL), put_u64(b, 3);
    put_u8(b, 1), put_u8(b, 0), put_u8(b, 1);
    key(b, "t.arr_u64", GGUF_ARRAY), put_u32(b, GGUF_U64), put_u64(b, 2);
    put_u64(b, 7), put_u64(b, UINT64_MAX);
    key(b, "t.arr_nested", GGUF_ARRAY), put_u32(b, GGUF_ARRAY), put_u64(b, 2); /* [[1, 2], [3]] of u16 */
    put_u32(b, GGUF_U16), put_u64(b, 2), put_u16(b, 1), put_u16(b, 2);
    put_u32(b, GGUF_U16), put_u64(b, 1), put_u16(b, 3);
    key(b, "t.arr_empty", GGUF_ARRAY), put_u32(b, GGUF_F32), put_u64(b, 0);
    key(b, "tokenizer.ggml.tokens", GGUF_ARRAY), put_u32(b, GGUF_STRING), put_u64(b, N_TOKENS);
    for (int i = 0; i < N_TOKENS; i++) {
        char s[16];
        snprintf(s, sizeof s, "t%d", i);
        put_str(b, s);
    }
    uint64_t off = 0;
    for (int i = 0; i < 5; i++) {
        offsets[i] = off;
        tinfo(b, vt[i].name, vt[i].n_dims, vt[i].ne, vt[i].type, off);
        off = (off + vt[i].nbytes + a - 1) / a * a;
    }
    *ti_end = b->n;
    for (int i = 0; i < 5; i++) {
        pad(b, a);
        for (uint64_t k = 0; k < vt[i].nbytes; k++)
            put_u8(b, (uint8_t)(16 * i + k));
    }
    for (size_t k = 0; k < trailing; k++)
        put_u8(b, 0);
}

static void check_tensors(const struct gguf_file *g, const uint8_t *base, uint64_t align, size_t ti_end,
                          const uint64_t want_off[5])
{
    cr_assert_eq(g->alignment, align);
    cr_assert_eq(g->data_offset, (ti_end + align - 1) / align * align, "data_offset %llu, tensor infos end at %zu",
                 (unsigned long long)g->data_offset, ti_end);
    cr_assert_eq(g->n_tensors, 5);
    for (int i = 0; i < 5; i++) {
        const struct gguf_tensor *t = &g->tensors[i];
        cr_assert_str_eq(t->name, vt[i].name, "file order");
        cr_assert_eq(gguf_find_tensor(g, vt[i].name), t);
        cr_assert_eq(t->n_dims, vt[i].n_dims);
        for (int j = 0; j < 4; j++)
            cr_assert_eq(t->ne[j], vt[i].ne[j], "%s ne[%d]", t->name, j);
        cr_assert_eq(t->type, vt[i].type);
        cr_assert_eq(t->offset, want_off[i], "%s offset %llu", t->name, (unsigned long long)t->offset);
        cr_assert_eq(t->offset % align, 0);
        cr_assert_eq(t->nbytes, vt[i].nbytes, "%s nbytes %llu", t->name, (unsigned long long)t->nbytes);
        cr_assert_eq(t->data, base + g->data_offset + want_off[i]);
        cr_assert_eq(t->data[0], 16 * i, "%s: its own first byte", t->name);
        cr_assert_eq(t->data[t->nbytes - 1], (uint8_t)(16 * i + t->nbytes - 1), "%s: its own last byte", t->name);
    }
    cr_assert_null(gguf_find_tensor(g, "token_embd"));
    cr_assert_null(gguf_find_tensor(g, "output.weight"));
}

Test(gguf, every_value_type_and_tensor)
{
    struct buf b = {0};
    size_t ti_end;
    uint64_t off[5];
    valid_file(&b, 0, 0, &ti_end, off);
    struct gguf_file g;
    struct err e = {0};
    cr_assert_eq(gguf_open_mem(&g, b.p, b.n, "valid.gguf", &e), ERR_OK, "%s", e.msg);
    cr_assert_eq(g.version, 3);
    cr_assert_eq(g.size, b.n);
    cr_assert_not(g.owns_map);
    cr_assert_eq(g.n_kv, 18);
    cr_assert_str_eq(g.kv[0].key, "t.u8", "file order");

    /* Offsets under the default alignment: 24 -> 32, 8 -> 64, 8 -> 96, 72 -> 192. */
    static const uint64_t want[5] = {0, 32, 64, 96, 192};
    for (int i = 0; i < 5; i++)
        cr_assert_eq(off[i], want[i], "writer lays out as expected");
    check_tensors(&g, b.p, 32, ti_end, want);
    cr_assert_eq(b.n, g.data_offset + 192 + 68, "the file ends at the last tensor");
    cr_assert_eq(rd_u32le(g.tensors[0].data), 0x03020100u, "F32 data bytes in place");

    /* Scalars, decoded. */
    const struct gguf_kv *kv;
    cr_assert((kv = gguf_find_kv(&g, "t.u8")) && kv->type == GGUF_U8 && kv->v.u == 200);
    cr_assert((kv = gguf_find_kv(&g, "t.i8")) && kv->type == GGUF_I8 && kv->v.i == -5);
    cr_assert((kv = gguf_find_kv(&g, "t.u16")) && kv->v.u == 60000);
    cr_assert((kv = gguf_find_kv(&g, "t.i16")) && kv->v.i == -300);
    cr_assert((kv = gguf_find_kv(&g, "t.u32")) && kv->v.u == 4000000000u);
    cr_assert((kv = gguf_find_kv(&g, "t.i32")) && kv->v.i == -70000);
    cr_assert((kv = gguf_find_kv(&g, "t.f32")) && kv->type == GGUF_F32 && kv->v.f == 1.5);
    cr_assert((kv = gguf_find_kv(&g, "t.bool")) && kv->type == GGUF_BOOL && kv->v.u == 1);
    cr_assert((kv = gguf_find_kv(&g, "t.u64")) && kv->v.u == (1ull << 40) + 3);
    cr_assert((kv = gguf_find_kv(&g, "t.i64")) && kv->v.i == -(1ll << 40));
    cr_assert((kv = gguf_find_kv(&g, "t.f64")) && kv->type == GGUF_F64 && kv->v.f == 0.1);
    cr_assert((kv = gguf_find_kv(&g, "general.architecture")) && kv->type == GGUF_STRING && kv->n == 6);
    cr_assert_eq(memcmp(kv->str, "gemma4", 6), 0);
    cr_assert(kv->str > b.p && kv->str < b.p + b.n, "strings point into the image");
    cr_assert_null(gguf_find_kv(&g, "t"));
    cr_assert_null(gguf_find_kv(&g, "general.alignment"));

    /* Arrays, in place. */
    int64_t x;
    kv = gguf_find_kv(&g, "t.arr_i32");
    cr_assert(kv && kv->type == GGUF_ARRAY && kv->elem == GGUF_I32 && kv->n == 3);
    cr_assert(gguf_array_int(kv, 0, &x) && x == 1);
    cr_assert(gguf_array_int(kv, 1, &x) && x == -2);
    cr_assert(gguf_array_int(kv, 2, &x) && x == 2147483647);
    cr_assert_not(gguf_array_int(kv, 3, &x), "past the end");
    kv = gguf_find_kv(&g, "t.arr_bool");
    cr_assert(kv && kv->elem == GGUF_BOOL && kv->n == 3);
    cr_assert(gguf_array_int(kv, 0, &x) && x == 1);
    cr_assert(gguf_array_int(kv, 1, &x) && x == 0);
    kv = gguf_find_kv(&g, "t.arr_u64");
    cr_assert(gguf_array_int(kv, 0, &x) && x == 7);
    cr_assert_not(gguf_array_int(kv, 1, &x), "2^64-1 is no int64");
    kv = gguf_find_kv(&g, "t.arr_nested");
    cr_assert(kv && kv->elem == GGUF_ARRAY && kv->n == 2);
    cr_assert_not(gguf_array_int(kv, 0, &x));
    cr_assert_eq(rd_u32le(kv->arr), GGUF_U16, "the first inner array's element type");
    kv = gguf_find_kv(&g, "t.arr_empty");
    cr_assert(kv && kv->elem == GGUF_F32 && kv->n == 0);
    cr_assert_not(gguf_array_int(gguf_find_kv(&g, "t.u8"), 0, &x), "a scalar is no array");

    /* 300,000 strings, not copied: arr points at the first length in the image. */
    kv = gguf_find_kv(&g, "tokenizer.ggml.tokens");
    cr_assert(kv && kv->elem == GGUF_STRING && kv->n == N_TOKENS);
    cr_assert(kv->arr > b.p && kv->arr < b.p + b.n);
    cr_assert_not(gguf_array_int(kv, 0, &x));
    const uint8_t *p = kv->arr;
    for (int i = 0; i < N_TOKENS; i++) {
        uint64_t n = rd_u64le(p);
        char want_s[16];
        int k = snprintf(want_s, sizeof want_s, "t%d", i);
        cr_assert(n == (uint64_t)k && memcmp(p + 8, want_s, n) == 0, "token %d", i);
        p += 8 + n;
    }
    cr_assert_eq(rd_u64le(p), strlen(vt[0].name), "the tensor infos follow the last token");

    gguf_close(&g);
    gguf_close(&g); /* twice is safe */
    free(b.p);
}

Test(gguf, typed_getters)
{
    struct buf b = {0};
    size_t ti_end;
    uint64_t off[5];
    valid_file(&b, 0, 0, &ti_end, off);
    struct gguf_file g;
    struct err e = {0};
    cr_assert_eq(gguf_open_mem(&g, b.p, b.n, "get.gguf", &e), ERR_OK, "%s", e.msg);
    uint64_t u;
    double d;
    bool found = false;
    cr_assert_eq(gguf_get_u64(&g, "t.u8", false, NULL, &u, &e), ERR_OK, "%s", e.msg);
    cr_assert_eq(u, 200);
    cr_assert_eq(gguf_get_u64(&g, "t.u32", false, &found, &u, &e), ERR_OK);
    cr_assert(found && u == 4000000000u);
    cr_assert_eq(gguf_get_u64(&g, "t.u64", false, NULL, &u, &e), ERR_OK);
    cr_assert_eq(u, (1ull << 40) + 3);
    cr_assert_eq(gguf_get_u64(&g, "t.i32", false, NULL, &u, &e), ERR_CONFIG);
    cr_assert(strstr(e.msg, "'t.i32' is -70000, expected a non-negative"), "%s", e.msg);
    cr_assert(strstr(e.msg, "get.gguf"), "%s", e.msg);
    cr_assert_eq(gguf_get_u64(&g, "t.f32", false, NULL, &u, &e), ERR_CONFIG);
    cr_assert(strstr(e.msg, "'t.f32' is f32, expected an integer"), "%s", e.msg);
    cr_assert_eq(gguf_get_u64(&g, "t.bool", false, NULL, &u, &e), ERR_CONFIG, "a bool is no integer");
    cr_assert_eq(gguf_get_u64(&g, "gemma4.block_count", false, NULL, &u, &e), ERR_CONFIG);
    cr_assert(strstr(e.msg, "get.gguf: metadata key 'gemma4.block_count' is missing"), "%s", e.msg);
    u = 99;
    found = true;
    cr_assert_eq(gguf_get_u64(&g, "gemma4.block_count", true, &found, &u, &e), ERR_OK);
    cr_assert(!found && u == 99, "optional and absent: nothing written");

    cr_assert_eq(gguf_get_f64(&g, "t.f32", false, NULL, &d, &e), ERR_OK);
    cr_assert_eq(d, 1.5);
    cr_assert_eq(gguf_get_f64(&g, "t.f64", false, NULL, &d, &e), ERR_OK);
    cr_assert_eq(d, 0.1);
    cr_assert_eq(gguf_get_f64(&g, "t.u32", false, NULL, &d, &e), ERR_CONFIG);
    cr_assert(strstr(e.msg, "'t.u32' is u32, expected f32 or f64"), "%s", e.msg);

    char s[16];
    cr_assert_eq(gguf_get_str(&g, "general.architecture", false, NULL, s, sizeof s, &e), ERR_OK, "%s", e.msg);
    cr_assert_str_eq(s, "gemma4");
    cr_assert_eq(gguf_get_str(&g, "general.architecture", false, NULL, s, 6, &e), ERR_CONFIG, "no room for the NUL");
    cr_assert(strstr(e.msg, "string of 6 bytes"), "%s", e.msg);
    cr_assert_eq(gguf_get_str(&g, "t.arr_i32", false, NULL, s, sizeof s, &e), ERR_CONFIG);
    cr_assert(strstr(e.msg, "is array, expected a string"), "%s", e.msg);
    gguf_close(&g);
    free(b.p);
}

Test(gguf, alignment_key_honoured)
{
    struct buf b = {0};
    size_t ti_end;
    uint64_t off[5];
    valid_file(&b, 64, 100, &ti_end, off);
    static const uint64_t want[5] = {0, 64, 128, 192, 320};
    for (int i = 0; i < 5; i++)
        cr_assert_eq(off[i], want[i]);
    struct gguf_file g;
    struct err e = {0};
    cr_assert_eq(gguf_open_mem(&g, b.p, b.n, "a64.gguf", &e), ERR_OK, "%s", e.msg);
    check_tensors(&g, b.p, 64, ti_end, want);
    cr_assert_eq(g.data_offset % 64, 0);
    cr_assert_eq(b.n, g.data_offset + 320 + 68 + 100, "100 trailing bytes accepted");
    gguf_close(&g);
    free(b.p);
}

Test(gguf, small_valid_files)
{
    struct gguf_file g;
    struct err e = {0};
    /* Header only: no metadata, no tensors, no padding (version 2). */
    struct buf b = {0};
    head(&b, 2, 0, 0);
    cr_assert_eq(gguf_open_mem(&g, b.p, b.n, "h.gguf", &e), ERR_OK, "%s", e.msg);
    cr_assert(g.version == 2 && g.n_kv == 0 && g.n_tensors == 0 && g.alignment == 32 && g.data_offset == 32);
    cr_assert_null(gguf_find_kv(&g, "general.alignment"));
    cr_assert_null(gguf_find_tensor(&g, "w"));
    gguf_close(&g);
    free(b.p);

    /* Empty tensors (ne 0) take no bytes and may share an offset; an empty
     * tensor right at the end of the file. */
    b = (struct buf){0};
    head(&b, 3, 3, 0);
    tinfo(&b, "e0", 2, (const uint64_t[]){0, 5}, GGML_F32, 0);
    tinfo(&b, "e1", 1, (const uint64_t[]){0}, GGML_Q4_0, 0);
    tinfo(&b, "w", 1, (const uint64_t[]){4}, GGML_F32, 0);
    pad(&b, 32);
    fill(&b, 16);
    cr_assert_eq(gguf_open_mem(&g, b.p, b.n, "empty.gguf", &e), ERR_OK, "%s", e.msg);
    cr_assert(g.tensors[0].nbytes == 0 && g.tensors[1].nbytes == 0 && g.tensors[2].nbytes == 16);
    cr_assert_eq(g.tensors[0].ne[1], 5);
    cr_assert_eq(g.tensors[0].ne[2], 1, "1 beyond n_dims");
    gguf_close(&g);
    free(b.p);

    /* Arrays nested GGUF_MAX_DEPTH deep. */
    b = (struct buf){0};
    head(&b, 3, 0, 1);
    key(&b, "deep", GGUF_ARRAY);
    for (int d = 1; d < GGUF_MAX_DEPTH; d++)
        put_u32(&b, GGUF_ARRAY), put_u64(&b, 1);
    put_u32(&b, GGUF_U8), put_u64(&b, 2), put_u8(&b, 7), put_u8(&b, 9);
    cr_assert_eq(gguf_open_mem(&g, b.p, b.n, "deep.gguf", &e), ERR_OK, "%s", e.msg);
    gguf_close(&g);
    free(b.p);
}

Test(gguf, ggml_type_table)
{
    /* Written out from the notes' table (ggml-common.h for Q8_1), not read
     * from the reader's table. */
    static const struct { uint32_t id; const char *name; uint32_t block, bytes; } want[] = {
        {0, "F32", 1, 4},        {1, "F16", 1, 2},         {2, "Q4_0", 32, 18},     {3, "Q4_1", 32, 20},
        {6, "Q5_0", 32, 22},     {7, "Q5_1", 32, 24},      {8, "Q8_0", 32, 34},     {9, "Q8_1", 32, 36},
        {10, "Q2_K", 256, 84},   {11, "Q3_K", 256, 110},   {12, "Q4_K", 256, 144},  {13, "Q5_K", 256, 176},
        {14, "Q6_K", 256, 210},  {15, "Q8_K", 256, 292},   {16, "IQ2_XXS", 256, 66}, {17, "IQ2_XS", 256, 74},
        {18, "IQ3_XXS", 256, 98}, {19, "IQ1_S", 256, 50},  {20, "IQ4_NL", 32, 18},  {21, "IQ3_S", 256, 110},
        {22, "IQ2_S", 256, 82},  {23, "IQ4_XS", 256, 136}, {24, "I8", 1, 1},        {25, "I16", 1, 2},
        {26, "I32", 1, 4},       {27, "I64", 1, 8},        {28, "F64", 1, 8},       {29, "IQ1_M", 256, 56},
        {30, "BF16", 1, 2},      {34, "TQ1_0", 256, 54},   {35, "TQ2_0", 256, 66},  {39, "MXFP4", 32, 17},
        {40, "NVFP4", 64, 36},
    };
    bool known[64] = {false};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const char *name;
        uint32_t block, bytes;
        cr_assert(ggml_type_info(want[i].id, &name, &block, &bytes), "type %u", want[i].id);
        cr_assert_str_eq(name, want[i].name);
        cr_assert_eq(block, want[i].block, "%s", name);
        cr_assert_eq(bytes, want[i].bytes, "%s", name);
        known[want[i].id] = true;
    }
    for (uint32_t id = 0; id < 64; id++)
        cr_assert_eq(ggml_type_info(id, NULL, NULL, NULL), known[id], "type %u", id);
    cr_assert_not(ggml_type_info(UINT32_MAX, NULL, NULL, NULL));
    cr_assert_str_eq(gguf_vtype_name(GGUF_BOOL), "bool");
    cr_assert_str_eq(gguf_vtype_name(13), "unknown");

    /* A Q4_K [512, 3] tensor: 2 super-blocks of 144 bytes per row. */
    struct buf b = {0};
    one_tensor(&b, 2, (const uint64_t[]){512, 3}, GGML_Q4_K, 0, 864);
    struct gguf_file g;
    struct err e = {0};
    cr_assert_eq(gguf_open_mem(&g, b.p, b.n, "q4k.gguf", &e), ERR_OK, "%s", e.msg);
    cr_assert_eq(g.tensors[0].nbytes, 864);
    gguf_close(&g);
    free(b.p);
}

Test(gguf, open_files)
{
    struct buf b = {0};
    size_t ti_end;
    uint64_t off[5];
    valid_file(&b, 64, 0, &ti_end, off);
    char *dir = th_mkdtemp();
    char *path = th_write(dir, "model.gguf", b.p, b.n);
    char *other = th_write(dir, "model.safetensors", "\x08\0\0\0\0\0\0\0{}      ", 16);
    struct gguf_file g;
    struct err e = {0};
    cr_assert_eq(gguf_open(&g, path, &e), ERR_OK, "%s", e.msg);
    cr_assert(g.owns_map);
    cr_assert_str_eq(g.path, path);
    cr_assert_eq(g.size, b.n);
    static const uint64_t want[5] = {0, 64, 128, 192, 320};
    check_tensors(&g, g.map, 64, ti_end, want);
    cr_assert_eq(memcmp(g.tensors[3].data, b.p + g.data_offset + 192, 72), 0);
    gguf_close(&g);

    char missing[4200];
    snprintf(missing, sizeof missing, "%s/nope.gguf", dir);
    cr_assert_eq(gguf_open(&g, missing, &e), ERR_IO);
    cr_assert(strstr(e.msg, "nope.gguf"), "%s", e.msg);
    gguf_close(&g);
    cr_assert_eq(gguf_open(&g, dir, &e), ERR_IO);
    cr_assert(strstr(e.msg, "not a regular file"), "%s", e.msg);
    gguf_close(&g);
    cr_assert_eq(gguf_open(&g, other, &e), ERR_FORMAT);
    cr_assert(strstr(e.msg, "model.safetensors: not a GGUF file"), "%s", e.msg);
    gguf_close(&g);
    char *empty = th_write(dir, "empty.gguf", "", 0);
    cr_assert_eq(gguf_open(&g, empty, &e), ERR_FORMAT);
    cr_assert(strstr(e.msg, "shorter than 4 bytes"), "%s", e.msg);
    gguf_close(&g);

    free(empty);
    free(other);
    free(path);
    th_rmtree(dir);
    free(b.p);
}

/* ----------------------------------------------------------- hostile table */

static void c_bad_magic(struct buf *b)
{
    head(b, 3, 0, 0);
    b->p[3] = 'X';
}

static void c_short_header(struct buf *b)
{
    put(b, "GGUF\3\0\0\0\0\0\0\0", 12);
}

static void c_version1(struct buf *b)
{
    head(b, 1, 0, 0);
}

static void c_big_endian(struct buf *b)
{
    head(b, 0x03000000, 0, 0);
}

static void c_version4(struct buf *b)
{
    head(b, 4, 0, 0);
}

static void c_kv_count_past_eof(struct buf *b)
{
    head(b, 3, 0, 1000);
    key(b, "a", GGUF_U32), put_u32(b, 1);
}

static void c_kv_count_limit(struct buf *b)
{
    head(b, 3, 0, 1ull << 40);
}

static void c_tensor_count_past_eof(struct buf *b)
{
    head(b, 3, 50, 0);
    tinfo(b, "w", 1, (const uint64_t[]){8}, GGML_F32, 0);
}

static void c_tensor_count_limit(struct buf *b)
{
    head(b, 3, UINT64_MAX, 0);
}

static void c_key_past_eof(struct buf *b)
{
    head(b, 3, 0, 1);
    put_u64(b, 1000), put(b, "general.", 8);
}

static void c_key_empty(struct buf *b)
{
    head(b, 3, 0, 1);
    key(b, "", GGUF_U32), put_u32(b, 1);
}

static void c_key_too_long(struct buf *b)
{
    head(b, 3, 0, 1);
    put_u64(b, GGUF_MAX_KEY + 1);
    for (int i = 0; i <= GGUF_MAX_KEY; i++)
        put_u8(b, 'k');
    put_u32(b, GGUF_U8), put_u8(b, 0);
}

static void c_key_nul(struct buf *b)
{
    head(b, 3, 0, 1);
    put_u64(b, 3), put(b, "a\0b", 3), put_u32(b, GGUF_U8), put_u8(b, 0);
}

static void c_key_utf8(struct buf *b)
{
    head(b, 3, 0, 1);
    key(b, "a\xc0\xafz", GGUF_U8), put_u8(b, 0); /* overlong '/' */
}

static void c_key_duplicate(struct buf *b)
{
    head(b, 3, 0, 3);
    key(b, "a.b", GGUF_U32), put_u32(b, 1);
    key(b, "a.c", GGUF_U32), put_u32(b, 2);
    key(b, "a.b", GGUF_STRING), put_str(b, "x");
}

static void c_str_past_eof(struct buf *b)
{
    head(b, 3, 0, 1);
    key(b, "general.name", GGUF_STRING), put_u64(b, 1000), put(b, "gemma", 5);
}

static void c_value_type(struct buf *b)
{
    head(b, 3, 0, 1);
    key(b, "x", 13), put_u32(b, 0);
}

static void c_bool2(struct buf *b)
{
    head(b, 3, 0, 1);
    key(b, "x.flag", GGUF_BOOL), put_u8(b, 2);
}

static void c_bool_array(struct buf *b)
{
    head(b, 3, 0, 1);
    key(b, "x.pattern", GGUF_ARRAY), put_u32(b, GGUF_BOOL), put_u64(b, 3);
    put_u8(b, 1), put_u8(b, 2), put_u8(b, 0);
}

static void c_array_past_eof(struct buf *b)
{
    head(b, 3, 0, 1);
    key(b, "x.ff", GGUF_ARRAY), put_u32(b, GGUF_U32), put_u64(b, 1ull << 62), put_u32(b, 1);
}

static void c_array_bytes_overflow(struct buf *b)
{
    head(b, 3, 0, 1);
    key(b, "x.ff", GGUF_ARRAY), put_u32(b, GGUF_U64), put_u64(b, 1ull << 61), put_u64(b, 1);
}

static void c_str_array(struct buf *b)
{
    head(b, 3, 0, 1);
    key(b, "tokenizer.ggml.tokens", GGUF_ARRAY), put_u32(b, GGUF_STRING), put_u64(b, 3);
    put_str(b, "a"), put_u64(b, 1ull << 40), put_str(b, "c");
}

static void c_array_elem_type(struct buf *b)
{
    head(b, 3, 0, 1);
    key(b, "x", GGUF_ARRAY), put_u32(b, 99), put_u64(b, 0);
}

static void c_nested_too_deep(struct buf *b)
{
    head(b, 3, 0, 1);
    key(b, "deep", GGUF_ARRAY);
    for (int d = 0; d < GGUF_MAX_DEPTH; d++)
        put_u32(b, GGUF_ARRAY), put_u64(b, 1);
    put_u32(b, GGUF_U8), put_u64(b, 0);
}

static void c_align_48(struct buf *b)
{
    head(b, 3, 0, 1);
    key(b, "general.alignment", GGUF_U32), put_u32(b, 48);
}

static void c_align_4(struct buf *b)
{
    head(b, 3, 0, 1);
    key(b, "general.alignment", GGUF_U32), put_u32(b, 4);
}

static void c_align_type(struct buf *b)
{
    head(b, 3, 0, 1);
    key(b, "general.alignment", GGUF_U64), put_u64(b, 32);
}

static void c_name_duplicate(struct buf *b)
{
    head(b, 3, 3, 0);
    tinfo(b, "blk.0.w", 1, (const uint64_t[]){8}, GGML_F32, 0);
    tinfo(b, "blk.1.w", 1, (const uint64_t[]){8}, GGML_F32, 32);
    tinfo(b, "blk.0.w", 1, (const uint64_t[]){8}, GGML_F32, 64);
    pad(b, 32);
    fill(b, 96);
}

static void c_name_long(struct buf *b)
{
    char name[GGUF_MAX_NAME + 2];
    memset(name, 'n', GGUF_MAX_NAME + 1);
    name[GGUF_MAX_NAME + 1] = '\0';
    head(b, 3, 1, 0);
    tinfo(b, name, 1, (const uint64_t[]){8}, GGML_F32, 0);
    pad(b, 32);
    fill(b, 32);
}

static void c_ndims0(struct buf *b)
{
    one_tensor(b, 0, NULL, GGML_F32, 0, 32);
}

static void c_ndims5(struct buf *b)
{
    one_tensor(b, 5, (const uint64_t[]){1, 1, 1, 1, 1}, GGML_F32, 0, 32);
}

static void c_block(struct buf *b)
{
    one_tensor(b, 2, (const uint64_t[]){48, 2}, GGML_Q4_0, 0, 64);
}

static void c_type77(struct buf *b)
{
    one_tensor(b, 1, (const uint64_t[]){8}, 77, 0, 32);
}

static void c_type4(struct buf *b)
{
    one_tensor(b, 1, (const uint64_t[]){32}, 4, 0, 32);
}

static void c_misaligned(struct buf *b)
{
    one_tensor(b, 1, (const uint64_t[]){4}, GGML_F32, 16, 48);
}

static void c_data_past_eof(struct buf *b)
{
    one_tensor(b, 1, (const uint64_t[]){16}, GGML_F32, 0, 60);
}

static void c_offset_huge(struct buf *b)
{
    one_tensor(b, 1, (const uint64_t[]){4}, GGML_F32, UINT64_MAX - 31, 16);
}

static void c_overlap(struct buf *b)
{
    head(b, 3, 2, 0);
    tinfo(b, "a", 1, (const uint64_t[]){16}, GGML_F32, 32);
    tinfo(b, "b", 1, (const uint64_t[]){16}, GGML_F32, 0);
    pad(b, 32);
    fill(b, 96);
}

static void c_ne_overflow_u64(struct buf *b)
{
    one_tensor(b, 2, (const uint64_t[]){1ull << 32, 1ull << 32}, GGML_F32, 0, 32);
}

static void c_ne_over_int64(struct buf *b)
{
    one_tensor(b, 2, (const uint64_t[]){1ull << 32, 1ull << 31}, 24 /* I8 */, 0, 32);
}

static void c_ne_zero_hides_overflow(struct buf *b)
{
    one_tensor(b, 3, (const uint64_t[]){0, 1ull << 40, 1ull << 40}, GGML_F32, 0, 32);
}

static void c_nbytes_overflow(struct buf *b)
{
    one_tensor(b, 1, (const uint64_t[]){1ull << 62}, GGML_F32, 0, 32);
}

static void c_tinfo_truncated(struct buf *b)
{
    head(b, 3, 1, 0);
    put_str(b, "w"), put_u32(b, 4), put_u64(b, 8), put_u64(b, 1), put_u64(b, 1);
}

struct hostile {
    const char *what;
    void (*build)(struct buf *b);
    int code;
    const char *sub1, *sub2; /* substrings the message must hold (sub2 may be NULL) */
};

static const struct hostile hostile[] = {
    {"bad magic", c_bad_magic, ERR_FORMAT, "not a GGUF file", "magic \"GGUF\""},
    {"12-byte file", c_short_header, ERR_FORMAT, "12 bytes, too small for the 24-byte GGUF header", NULL},
    {"version 1", c_version1, ERR_UNSUPPORTED, "GGUF version 1 (32-bit counts) is not supported", NULL},
    {"big-endian", c_big_endian, ERR_UNSUPPORTED, "big-endian GGUF", "0x03000000"},
    {"version 4", c_version4, ERR_UNSUPPORTED, "GGUF version 4, expected 2 or 3", NULL},
    {"metadata count past EOF", c_kv_count_past_eof, ERR_FORMAT, "metadata count 1000 is larger than the file", NULL},
    {"metadata count above the limit", c_kv_count_limit, ERR_RANGE, "1099511627776 metadata entries", "limit"},
    {"tensor count past EOF", c_tensor_count_past_eof, ERR_FORMAT, "tensor count 50 is larger than the file", NULL},
    {"tensor count above the limit", c_tensor_count_limit, ERR_RANGE, "18446744073709551615 tensors", "limit"},
    {"key length past EOF", c_key_past_eof, ERR_FORMAT, "key of metadata entry 0", "string of 1000 bytes"},
    {"empty key", c_key_empty, ERR_FORMAT, "key of metadata entry 0", "0 bytes long, expected 1..65535"},
    {"key of 65536 bytes", c_key_too_long, ERR_FORMAT, "65536 bytes long, expected 1..65535", NULL},
    {"NUL inside a key", c_key_nul, ERR_FORMAT, "NUL byte or invalid UTF-8", "entry 0"},
    {"overlong UTF-8 in a key", c_key_utf8, ERR_FORMAT, "NUL byte or invalid UTF-8", NULL},
    {"duplicate key", c_key_duplicate, ERR_FORMAT, "duplicate key 'a.b'", "entries 0 and 2"},
    {"string length past EOF", c_str_past_eof, ERR_FORMAT, "key 'general.name'", "string of 1000 bytes"},
    {"value type 13", c_value_type, ERR_FORMAT, "key 'x': value type 13", NULL},
    {"bool value 2", c_bool2, ERR_FORMAT, "key 'x.flag': bool value 2, expected 0 or 1", NULL},
    {"bool 2 inside an array", c_bool_array, ERR_FORMAT, "key 'x.pattern'", "bool element 1 is 2"},
    {"array count past EOF", c_array_past_eof, ERR_FORMAT, "key 'x.ff'", "larger than the file"},
    {"array bytes overflow", c_array_bytes_overflow, ERR_FORMAT, "2305843009213693952 u64 elements",
     "larger than the file"},
    {"string array element past EOF", c_str_array, ERR_FORMAT, "key 'tokenizer.ggml.tokens': element 1",
     "string of 1099511627776 bytes"},
    {"array element type 99", c_array_elem_type, ERR_FORMAT, "array element type 99", "key 'x'"},
    {"arrays nested too deep", c_nested_too_deep, ERR_RANGE, "nested more than 8 deep", "key 'deep'"},
    {"alignment 48", c_align_48, ERR_FORMAT, "general.alignment is 48, expected a power of two", NULL},
    {"alignment 4", c_align_4, ERR_FORMAT, "general.alignment is 4", "at least 8"},
    {"alignment as u64", c_align_type, ERR_FORMAT, "general.alignment is u64, expected u32", NULL},
    {"duplicate tensor name", c_name_duplicate, ERR_FORMAT, "duplicate tensor name 'blk.0.w'", "tensors 0 and 2"},
    {"tensor name of 65 bytes", c_name_long, ERR_FORMAT, "name of tensor 0", "65 bytes long, expected 1..64"},
    {"n_dims 0", c_ndims0, ERR_FORMAT, "tensor 'w': n_dims 0, expected 1..4", NULL},
    {"n_dims 5", c_ndims5, ERR_FORMAT, "tensor 'w': n_dims 5, expected 1..4", NULL},
    {"ne[0] not a multiple of the block", c_block, ERR_FORMAT, "tensor 'w' (Q4_0): ne[0] = 48", "block of 32"},
    {"unknown type 77", c_type77, ERR_FORMAT, "tensor 'w': unknown ggml type 77", NULL},
    {"removed type 4", c_type4, ERR_FORMAT, "unknown ggml type 4", NULL},
    {"offset misaligned", c_misaligned, ERR_FORMAT, "tensor 'w': offset 16 is not a multiple of the alignment 32",
     NULL},
    {"data past EOF", c_data_past_eof, ERR_FORMAT, "tensor 'w': 64 bytes at offset 0", "truncated"},
    {"offset near 2^64", c_offset_huge, ERR_FORMAT, "tensor 'w': 16 bytes at offset 18446744073709551584",
     "truncated"},
    {"overlapping tensors", c_overlap, ERR_FORMAT, "tensor 'a' at [32, 96) overlaps tensor 'b' at [0, 64)", NULL},
    {"ne product overflowing u64", c_ne_overflow_u64, ERR_RANGE, "tensor 'w': ne [4294967296, 4294967296] overflows",
     NULL},
    {"ne product of 2^63", c_ne_over_int64, ERR_RANGE, "overflows: more than 2^63-1 elements", NULL},
    {"huge dims behind a 0", c_ne_zero_hides_overflow, ERR_RANGE, "overflows", NULL},
    {"byte size overflowing u64", c_nbytes_overflow, ERR_RANGE, "tensor 'w' (F32, ne [4611686018427387904])",
     "byte size overflows"},
    {"tensor info cut inside ne", c_tinfo_truncated, ERR_FORMAT, "tensor 'w': ne, type and offset", "truncated"},
};
#define N_HOSTILE (sizeof hostile / sizeof hostile[0])

static void expect_refusal(const struct hostile *c, const char *how, const char *file, int rc, const struct err *e)
{
    cr_assert_eq(rc, c->code, "[%s] via %s: code %d (%s), expected %d; message: %s", c->what, how, rc,
                 err_code_name((enum err_code)rc), c->code, e->msg);
    cr_assert_eq((int)e->code, c->code, "[%s] via %s: e.code disagrees with the return value", c->what, how);
    cr_assert(strstr(e->msg, c->sub1), "[%s] via %s: message lacks \"%s\": %s", c->what, how, c->sub1, e->msg);
    if (c->sub2)
        cr_assert(strstr(e->msg, c->sub2), "[%s] via %s: message lacks \"%s\": %s", c->what, how, c->sub2, e->msg);
    cr_assert(strstr(e->msg, file), "[%s] via %s: message names the file: %s", c->what, how, e->msg);
}

ParameterizedTestParameters(gguf, hostile)
{
    static int idx[N_HOSTILE];
    for (size_t i = 0; i < N_HOSTILE; i++)
        idx[i] = (int)i;
    return cr_make_param_array(int, idx, N_HOSTILE);
}

ParameterizedTest(int *i, gguf, hostile)
{
    const struct hostile *c = &hostile[*i];
    struct buf b = {0};
    c->build(&b);
    struct gguf_file g;
    struct err e = {0};
    int rc = gguf_open_mem(&g, b.p, b.n, "mem.gguf", &e);
    expect_refusal(c, "gguf_open_mem", "mem.gguf", rc, &e);
    cr_assert(g.n_kv == 0 && g.n_tensors == 0 && !g.kv && !g.tensors && !g.path,
              "[%s] a failed open leaves the struct closed", c->what);
    gguf_close(&g);

    char *dir = th_mkdtemp();
    char *path = th_write(dir, "bad.gguf", b.p, b.n);
    memset(&e, 0, sizeof e);
    rc = gguf_open(&g, path, &e);
    expect_refusal(c, "gguf_open", "bad.gguf", rc, &e);
    gguf_close(&g);
    free(path);
    th_rmtree(dir);
    free(b.p);
}

Test(gguf, hostile_table_is_complete)
{
    cr_assert_geq(N_HOSTILE, 40, "the table did not shrink");
    for (size_t i = 0; i < N_HOSTILE; i++)
        cr_assert(hostile[i].code != ERR_OK && hostile[i].sub1 && hostile[i].build, "%s", hostile[i].what);
}
