/* test_safetensors.c - the safetensors reader and writer against INPUTS.md §1.
 *
 * Happy paths are the valid examples of §1.4 ("Test cases worth porting") plus
 * the MLX facts of §1.3 (unaligned tensors, any tensor order). The corrupt
 * inputs are one table; every entry must be rejected with the expected error
 * code AND a message naming the problem (and the tensor, where there is one),
 * through st_open_mem, through st_open on a real file, and through the
 * header-only reader. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/dtype.h"
#include "core/err.h"
#include "core/safetensors.h"
#include "tests/helpers.h"

/* ------------------------------------------------------------------ helpers */

static void put_u64le(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_u64le(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

/* u64 N = strlen(hdr), hdr, then data_len bytes of `data` (or i & 0xff when NULL). */
static uint8_t *image(const char *hdr, const void *data, size_t data_len, size_t *len)
{
    size_t h = strlen(hdr);
    *len = 8 + h + data_len;
    uint8_t *buf = malloc(*len ? *len : 1);
    cr_assert(buf);
    put_u64le(buf, h);
    memcpy(buf + 8, hdr, h);
    for (size_t i = 0; i < data_len; i++)
        buf[8 + h + i] = data ? ((const uint8_t *)data)[i] : (uint8_t)i;
    return buf;
}

static size_t count_entries(const char *dir)
{
    DIR *d = opendir(dir);
    cr_assert(d, "opendir %s", dir);
    size_t n = 0;
    struct dirent *de;
    while ((de = readdir(d)))
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
            n++;
    closedir(d);
    return n;
}

static uint64_t file_size(const char *path)
{
    struct stat st;
    cr_assert_eq(stat(path, &st), 0, "stat %s", path);
    return (uint64_t)st.st_size;
}

/* The §1.4 example: N = 64, one F32 [1,2,3] tensor holding 0..5. */
static const char ex64_hdr[] = "{\"attn.0\":{\"dtype\":\"F32\",\"shape\":[1,2,3],\"data_offsets\":[0,24]}}";

static uint8_t *ex64_image(size_t *len)
{
    float v[6] = {0, 1, 2, 3, 4, 5};
    uint8_t raw[24];
    for (int i = 0; i < 6; i++) {
        uint32_t u;
        memcpy(&u, &v[i], 4);
        for (int b = 0; b < 4; b++)
            raw[4 * i + b] = (uint8_t)(u >> (8 * b)); /* little-endian on any host */
    }
    return image(ex64_hdr, raw, sizeof raw, len);
}

/* ------------------------------------------------------------- happy paths */

Test(safetensors, st_example_n64_f32_values)
{
    cr_assert_eq(strlen(ex64_hdr), 64, "the §1.4 example header is exactly 64 bytes");
    size_t len;
    uint8_t *buf = ex64_image(&len);
    cr_assert_eq(len, 8 + 64 + 24);
    cr_assert_eq(get_u64le(buf), 64);

    struct st_file f;
    struct err e = {0};
    cr_assert_eq(st_open_mem(&f, buf, len, "ex64", &e), ERR_OK, "%s", e.msg);
    cr_assert_eq(f.header_len, 64);
    cr_assert_eq(f.data_start, 72);
    cr_assert_eq(f.file_size, 96);
    cr_assert_eq(f.n_tensors, 1);
    cr_assert_eq(f.n_meta, 0);
    cr_assert_not(f.metadata_null);

    const struct st_tensor *t = st_find(&f, "attn.0");
    cr_assert_not_null(t);
    cr_assert_str_eq(t->name, "attn.0");
    cr_assert_eq(t->dtype, DT_F32);
    cr_assert_eq(t->rank, 3);
    cr_assert_eq(t->shape[0], 1);
    cr_assert_eq(t->shape[1], 2);
    cr_assert_eq(t->shape[2], 3);
    cr_assert_eq(t->begin, 0);
    cr_assert_eq(t->end, 24);

    const uint8_t *p = NULL;
    cr_assert_eq(st_data(&f, t, &p, &e), ERR_OK, "%s", e.msg);
    cr_assert_eq(p, buf + 72, "data pointer = map + 8 + N + begin");
    float out[6];
    dtype_to_f32(DT_F32, p, out, 6);
    for (int i = 0; i < 6; i++)
        cr_assert_float_eq(out[i], (float)i, 0.0f, "element %d is %g", i, (double)out[i]);
    st_close(&f);
    free(buf);
}

Test(safetensors, st_empty_object_padded_to_8)
{
    size_t len;
    uint8_t *buf = image("{}      ", NULL, 0, &len);
    cr_assert_eq(len, 16);
    struct st_file f;
    struct err e = {0};
    cr_assert_eq(st_open_mem(&f, buf, len, "empty", &e), ERR_OK, "%s", e.msg);
    cr_assert_eq(f.header_len, 8);
    cr_assert_eq(f.n_tensors, 0);
    cr_assert_eq(f.n_meta, 0);
    cr_assert_null(st_find(&f, "x"));
    st_close(&f);
    free(buf);
}

Test(safetensors, st_metadata_alone)
{
    size_t len;
    uint8_t *buf = image("{\"__metadata__\":{\"format\":\"pt\",\"note\":\"x y\"}}", NULL, 0, &len);
    struct st_file f;
    struct err e = {0};
    cr_assert_eq(st_open_mem(&f, buf, len, "meta", &e), ERR_OK, "%s", e.msg);
    cr_assert_eq(f.n_tensors, 0, "__metadata__ is not a tensor");
    cr_assert_eq(f.n_meta, 2);
    cr_assert_not(f.metadata_null);
    cr_assert_str_eq(st_meta_get(&f, "format"), "pt");
    cr_assert_str_eq(st_meta_get(&f, "note"), "x y");
    cr_assert_null(st_meta_get(&f, "missing"));
    cr_assert_null(st_meta_get(&f, "Format"), "metadata keys are case-sensitive");
    cr_assert_null(st_find(&f, "__metadata__"));
    st_close(&f);
    free(buf);
}

Test(safetensors, st_metadata_null_and_empty)
{
    /* MLX writes "__metadata__": null when given no metadata (§1.2). */
    size_t len;
    uint8_t *buf = image("{\"__metadata__\":null,\"w\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]}}",
                         NULL, 2, &len);
    struct st_file f;
    struct err e = {0};
    cr_assert_eq(st_open_mem(&f, buf, len, "metanull", &e), ERR_OK, "%s", e.msg);
    cr_assert(f.metadata_null);
    cr_assert_eq(f.n_meta, 0);
    cr_assert_eq(f.n_tensors, 1);
    cr_assert_null(st_meta_get(&f, "format"));
    st_close(&f);
    free(buf);

    buf = image("{\"__metadata__\":{}}", NULL, 0, &len);
    cr_assert_eq(st_open_mem(&f, buf, len, "metaempty", &e), ERR_OK, "%s", e.msg);
    cr_assert_not(f.metadata_null);
    cr_assert_eq(f.n_meta, 0);
    st_close(&f);
    free(buf);
}

Test(safetensors, st_scalar_shape_i32)
{
    uint8_t v[4] = {0xfe, 0xff, 0xff, 0xff}; /* -2 as I32 LE */
    size_t len;
    uint8_t *buf = image("{\"s\":{\"dtype\":\"I32\",\"shape\":[],\"data_offsets\":[0,4]}}", v, 4, &len);
    struct st_file f;
    struct err e = {0};
    cr_assert_eq(st_open_mem(&f, buf, len, "scalar", &e), ERR_OK, "%s", e.msg);
    const struct st_tensor *t = st_find(&f, "s");
    cr_assert_not_null(t);
    cr_assert_eq(t->rank, 0);
    cr_assert_eq(t->dtype, DT_I32);
    cr_assert_eq(t->end - t->begin, 4, "shape [] is one element");
    const uint8_t *p;
    cr_assert_eq(st_data(&f, t, &p, &e), ERR_OK, "%s", e.msg);
    int32_t x;
    memcpy(&x, p, 4);
    cr_assert_eq(x, -2);
    st_close(&f);
    free(buf);
}

Test(safetensors, st_empty_tensor_shape_2_0)
{
    size_t len;
    uint8_t *buf = image("{\"e\":{\"dtype\":\"F32\",\"shape\":[2,0],\"data_offsets\":[0,0]}}", NULL, 0, &len);
    struct st_file f;
    struct err e = {0};
    cr_assert_eq(st_open_mem(&f, buf, len, "emptyt", &e), ERR_OK, "%s", e.msg);
    const struct st_tensor *t = st_find(&f, "e");
    cr_assert_not_null(t);
    cr_assert_eq(t->rank, 2);
    cr_assert_eq(t->shape[0], 2);
    cr_assert_eq(t->shape[1], 0);
    cr_assert_eq(t->begin, 0);
    cr_assert_eq(t->end, 0);
    st_close(&f);
    free(buf);

    /* An empty tensor may sit between two others and take no bytes. */
    buf = image("{\"a\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[0,3]},"
                "\"e\":{\"dtype\":\"BF16\",\"shape\":[0,7],\"data_offsets\":[3,3]},"
                "\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[3,5]}}",
                NULL, 5, &len);
    cr_assert_eq(st_open_mem(&f, buf, len, "emptymid", &e), ERR_OK, "%s", e.msg);
    cr_assert_eq(f.n_tensors, 3);
    st_close(&f);
    free(buf);
}

Test(safetensors, st_whitespace_around_header)
{
    size_t len;
    uint8_t *buf = image("\t\n{\"w\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}\r \t\n", NULL, 4, &len);
    struct st_file f;
    struct err e = {0};
    cr_assert_eq(st_open_mem(&f, buf, len, "ws", &e), ERR_OK, "%s", e.msg);
    cr_assert_not_null(st_find(&f, "w"));
    st_close(&f);
    free(buf);
}

Test(safetensors, st_every_dtype_bit_size)
{
    /* The closed set of §1.2 with tensor.rs bit sizes; written out here, not
     * read from dtype_table, so a wrong table entry fails. */
    static const struct { const char *name; unsigned bits; } want[] = {
        {"BOOL", 8},  {"U8", 8},           {"I8", 8},           {"F8_E5M2", 8},     {"F8_E4M3", 8},
        {"F8_E8M0", 8}, {"F8_E4M3FNUZ", 8}, {"F8_E5M2FNUZ", 8}, {"F4", 4},          {"F6_E2M3", 6},
        {"F6_E3M2", 6}, {"I16", 16},        {"U16", 16},         {"F16", 16},        {"BF16", 16},
        {"I32", 32},  {"U32", 32},          {"F32", 32},         {"F64", 64},        {"I64", 64},
        {"U64", 64},  {"C64", 64},
    };
    cr_assert_eq(sizeof want / sizeof want[0], DT_COUNT, "the set is closed: %d dtypes", DT_COUNT);
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        /* 8 elements take exactly `bits` bytes. */
        char hdr[160];
        snprintf(hdr, sizeof hdr, "{\"x\":{\"dtype\":\"%s\",\"shape\":[2,4],\"data_offsets\":[0,%u]}}", want[i].name,
                 want[i].bits);
        size_t len;
        uint8_t *buf = image(hdr, NULL, want[i].bits, &len);
        struct st_file f;
        struct err e = {0};
        cr_assert_eq(st_open_mem(&f, buf, len, want[i].name, &e), ERR_OK, "%s: %s", want[i].name, e.msg);
        const struct st_tensor *t = st_find(&f, "x");
        cr_assert_not_null(t);
        cr_assert_str_eq(dtype_name(t->dtype), want[i].name);
        cr_assert_eq(dtype_table[t->dtype].bits, want[i].bits, "%s", want[i].name);
        enum dtype d;
        cr_assert(dtype_from_name(want[i].name, strlen(want[i].name), &d));
        cr_assert_eq(d, t->dtype);
        st_close(&f);
        free(buf);

        /* One byte too many is rejected, naming the tensor. */
        snprintf(hdr, sizeof hdr, "{\"x\":{\"dtype\":\"%s\",\"shape\":[2,4],\"data_offsets\":[0,%u]}}", want[i].name,
                 want[i].bits + 1);
        buf = image(hdr, NULL, want[i].bits + 1, &len);
        cr_assert_eq(st_open_mem(&f, buf, len, want[i].name, &e), ERR_FORMAT, "%s accepted a wrong size", want[i].name);
        cr_assert(strstr(e.msg, "'x'"), "%s", e.msg);
        free(buf);
    }
}

Test(safetensors, st_packed_subbyte_sizes)
{
    /* F4: 2 elements per byte; F6: 4 elements per 3 bytes (§1.1 packed). */
    static const struct { const char *dtype; int n; unsigned bytes; } ok[] = {
        {"F4", 2, 1}, {"F4", 6, 3}, {"F6_E2M3", 4, 3}, {"F6_E3M2", 8, 6},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        char hdr[160];
        snprintf(hdr, sizeof hdr, "{\"p\":{\"dtype\":\"%s\",\"shape\":[%d],\"data_offsets\":[0,%u]}}", ok[i].dtype,
                 ok[i].n, ok[i].bytes);
        size_t len;
        uint8_t *buf = image(hdr, NULL, ok[i].bytes, &len);
        struct st_file f;
        struct err e = {0};
        cr_assert_eq(st_open_mem(&f, buf, len, "packed", &e), ERR_OK, "%s [%d]: %s", ok[i].dtype, ok[i].n, e.msg);
        st_close(&f);
        free(buf);
    }
}

Test(safetensors, st_unaligned_bf16)
{
    /* MLX-style: no padding, a 1-byte tensor first, so the BF16 data sits at
     * an odd address (§1.3). Values: 1.0, -2.5, 0.15625, -0.0. */
    static const char hdr[] = "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
                              "\"b\":{\"dtype\":\"BF16\",\"shape\":[2,2],\"data_offsets\":[1,9]}}";
    static const uint8_t data[9] = {0x7a, 0x80, 0x3f, 0x20, 0xc0, 0x20, 0x3e, 0x00, 0x80};
    static const float want[4] = {1.0f, -2.5f, 0.15625f, -0.0f};
    /* Pad with one trailing space if needed so that 8 + N + 1 is odd. */
    char padded[sizeof hdr + 1];
    snprintf(padded, sizeof padded, "%s%s", hdr, (8 + strlen(hdr) + 1) % 2 ? "" : " ");
    size_t len;
    uint8_t *buf = image(padded, data, sizeof data, &len);
    cr_assert_eq((8 + strlen(padded) + 1) % 2, 1, "test setup: b must start at an odd offset");

    char *dir = th_mkdtemp();
    char *path = th_write(dir, "unaligned.safetensors", buf, len);
    for (int mode = 0; mode < 2; mode++) {
        struct st_file f;
        struct err e = {0};
        int rc = mode == 0 ? st_open_mem(&f, buf, len, "unaligned", &e) : st_open(&f, path, 0, &e);
        cr_assert_eq(rc, ERR_OK, "%s", e.msg);
        const struct st_tensor *t = st_find(&f, "b");
        cr_assert_not_null(t);
        cr_assert_eq(t->dtype, DT_BF16);
        const uint8_t *p;
        cr_assert_eq(st_data(&f, t, &p, &e), ERR_OK, "%s", e.msg);
        cr_assert_eq(((uintptr_t)p) & 1u, 1u, "data pointer is odd (unaligned)");
        float out[4];
        dtype_to_f32(DT_BF16, p, out, 4);
        for (int i = 0; i < 4; i++) {
            uint32_t g, w;
            memcpy(&g, &out[i], 4);
            memcpy(&w, &want[i], 4);
            cr_assert_eq(g, w, "mode %d element %d: %g, expected %g", mode, i, (double)out[i], (double)want[i]);
        }
        const struct st_tensor *a = st_find(&f, "a");
        cr_assert_not_null(a);
        cr_assert_eq(st_data(&f, a, &p, &e), ERR_OK, "%s", e.msg);
        cr_assert_eq(p[0], 0x7a);
        st_close(&f);
    }
    free(path);
    th_rmtree(dir);
    free(buf);
}

Test(safetensors, st_json_order_irrelevant)
{
    /* Offsets listed out of order in the JSON are valid (§1.4 rule 6 sorts). */
    static const char hdr[] = "{\"z.last\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[6,8]},"
                              "\"b.mid\":{\"dtype\":\"U16\",\"shape\":[2],\"data_offsets\":[2,6]},"
                              "\"a.first\":{\"dtype\":\"I8\",\"shape\":[2],\"data_offsets\":[0,2]}}";
    size_t len;
    uint8_t *buf = image(hdr, NULL, 8, &len);
    struct st_file f;
    struct err e = {0};
    cr_assert_eq(st_open_mem(&f, buf, len, "order", &e), ERR_OK, "%s", e.msg);
    cr_assert_eq(f.n_tensors, 3);
    const struct st_tensor *t = st_find(&f, "b.mid");
    cr_assert_not_null(t);
    cr_assert_eq(t->begin, 2);
    cr_assert_eq(t->end, 6);
    const uint8_t *p;
    cr_assert_eq(st_data(&f, t, &p, &e), ERR_OK);
    cr_assert_eq(p[0], 2, "bytes 2..5 of the data buffer");
    cr_assert_eq(p[3], 5);
    st_close(&f);
    free(buf);
}

Test(safetensors, st_find_exact)
{
    static const char hdr[] = "{\"layers.1.w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
                              "\"layers.10.w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]},"
                              "\"layers.0.w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[2,3]}}";
    size_t len;
    uint8_t *buf = image(hdr, NULL, 3, &len);
    struct st_file f;
    struct err e = {0};
    cr_assert_eq(st_open_mem(&f, buf, len, "find", &e), ERR_OK, "%s", e.msg);
    const struct st_tensor *t = st_find(&f, "layers.10.w");
    cr_assert_not_null(t);
    cr_assert_eq(t->begin, 1);
    t = st_find(&f, "layers.0.w");
    cr_assert_not_null(t);
    cr_assert_eq(t->begin, 2);
    cr_assert_null(st_find(&f, "layers.1"));
    cr_assert_null(st_find(&f, "layers.1.w "));
    cr_assert_null(st_find(&f, "LAYERS.1.w"));
    cr_assert_null(st_find(&f, ""));
    st_close(&f);
    free(buf);
}

Test(safetensors, st_header_only_reads_8_plus_n)
{
    size_t len;
    uint8_t *buf = ex64_image(&len);
    char *dir = th_mkdtemp();
    char *path = th_write(dir, "model.safetensors", buf, len);

    struct st_file f;
    struct err e = {0};
    cr_assert_eq(st_open(&f, path, ST_HEADER_ONLY, &e), ERR_OK, "%s", e.msg);
    cr_assert_eq(f.bytes_read, 8 + 64);
    cr_assert_null(f.map, "header-only maps nothing");
    cr_assert_eq(f.file_size, 96);
    cr_assert_not(f.truncated);
    const struct st_tensor *t = st_find(&f, "attn.0");
    cr_assert_not_null(t);
    cr_assert_eq(t->end, 24);
    const uint8_t *p = NULL;
    cr_assert_eq(st_data(&f, t, &p, &e), ERR_USAGE);
    cr_assert(strstr(e.msg, "attn.0"), "%s", e.msg);
    cr_assert(strstr(e.msg, "header-only"), "%s", e.msg);
    st_close(&f);
    st_close(&f); /* closing twice is safe */

    /* The full reader maps it and gives the data. */
    cr_assert_eq(st_open(&f, path, 0, &e), ERR_OK, "%s", e.msg);
    cr_assert_not_null(f.map);
    cr_assert_str_eq(f.path, path);
    t = st_find(&f, "attn.0");
    cr_assert_eq(st_data(&f, t, &p, &e), ERR_OK, "%s", e.msg);
    float out[6];
    dtype_to_f32(DT_F32, p, out, 6);
    cr_assert_float_eq(out[5], 5.0f, 0.0f);
    st_close(&f);

    free(path);
    th_rmtree(dir);
    free(buf);
}

Test(safetensors, st_allow_truncated)
{
    size_t len;
    uint8_t *buf = ex64_image(&len);
    char *dir = th_mkdtemp();
    char *cut = th_write(dir, "cut.safetensors", buf, 8 + 64);       /* ends right after the header */
    char *mid = th_write(dir, "mid.safetensors", buf, 8 + 64 + 10);  /* ends inside the data */

    struct st_file f;
    struct err e = {0};
    cr_assert_eq(st_open(&f, cut, 0, &e), ERR_FORMAT, "a header-only file needs ST_ALLOW_TRUNCATED");
    cr_assert(strstr(e.msg, "truncated"), "%s", e.msg);

    const unsigned modes[2] = {ST_ALLOW_TRUNCATED, ST_ALLOW_TRUNCATED | ST_HEADER_ONLY};
    for (int m = 0; m < 2; m++) {
        memset(&e, 0, sizeof e);
        cr_assert_eq(st_open(&f, cut, modes[m], &e), ERR_OK, "flags %u: %s", modes[m], e.msg);
        cr_assert(f.truncated);
        cr_assert_eq(f.bytes_read, 72);
        const struct st_tensor *t = st_find(&f, "attn.0");
        cr_assert_not_null(t);
        cr_assert_eq(t->rank, 3);
        cr_assert_eq(t->end, 24);
        const uint8_t *p = NULL;
        cr_assert_eq(st_data(&f, t, &p, &e), ERR_USAGE, "no data in a truncated file");
        cr_assert_null(p);
        cr_assert(strstr(e.msg, "attn.0"), "%s", e.msg);
        cr_assert(strstr(e.msg, "only its header"), "%s", e.msg);
        st_close(&f);

        /* Cut anywhere else is still an error. */
        cr_assert_eq(st_open(&f, mid, modes[m], &e), ERR_FORMAT, "flags %u accepted a file cut inside its data",
                     modes[m]);
        cr_assert(strstr(e.msg, "truncated"), "%s", e.msg);
        cr_assert(strstr(e.msg, "82"), "names the real size: %s", e.msg);
        cr_assert(strstr(e.msg, "96"), "names the needed size: %s", e.msg);
    }
    /* A complete file is not marked truncated. */
    char *full = th_write(dir, "full.safetensors", buf, len);
    cr_assert_eq(st_open(&f, full, ST_ALLOW_TRUNCATED, &e), ERR_OK, "%s", e.msg);
    cr_assert_not(f.truncated);
    st_close(&f);

    free(full);
    free(cut);
    free(mid);
    th_rmtree(dir);
    free(buf);
}

Test(safetensors, st_open_missing_file)
{
    char *dir = th_mkdtemp();
    char path[4200];
    snprintf(path, sizeof path, "%s/nope.safetensors", dir);
    struct st_file f;
    struct err e = {0};
    cr_assert_eq(st_open(&f, path, 0, &e), ERR_IO);
    cr_assert(strstr(e.msg, "nope.safetensors"), "%s", e.msg);
    st_close(&f);
    /* A directory is not a safetensors file. */
    cr_assert_eq(st_open(&f, dir, 0, &e), ERR_IO);
    cr_assert(strstr(e.msg, "not a regular file"), "%s", e.msg);
    th_rmtree(dir);
}

/* ----------------------------------------------------------- corrupt table */

struct corrupt {
    const char *what;
    const char *hdr;          /* header text (N = its length), or NULL to use raw */
    size_t data_len;          /* data bytes after the header */
    const uint8_t *raw;       /* whole file, when hdr is NULL */
    size_t raw_len;
    int code;
    const char *sub1, *sub2;  /* substrings the message must contain (sub2 may be NULL) */
};

static const uint8_t raw_short[5] = {1, 0, 0, 0, 0};
static const uint8_t raw_n60[8] = {60, 0, 0, 0, 0, 0, 0, 0};
static const uint8_t raw_n1e8[10] = {0x00, 0xe1, 0xf5, 0x05, 0, 0, 0, 0, '{', '}'};          /* 100,000,000 */
static const uint8_t raw_n1e8p1[10] = {0x01, 0xe1, 0xf5, 0x05, 0, 0, 0, 0, '{', '}'};        /* 100,000,001 */
static const uint8_t raw_nhigh[10] = {2, 0, 0, 0, 0, 0, 0xff, 0xff, '{', '}'};
static const uint8_t raw_n0[10] = {0, 0, 0, 0, 0, 0, 0, 0, '{', '}'};
static const uint8_t raw_ff[9] = {1, 0, 0, 0, 0, 0, 0, 0, 0xff};
static const uint8_t raw_brace[9] = {1, 0, 0, 0, 0, 0, 0, 0, '{'};

#define U8T(name, n, b, e) "\"" name "\":{\"dtype\":\"U8\",\"shape\":[" #n "],\"data_offsets\":[" #b "," #e "]}"

static const struct corrupt corrupt[] = {
    /* file level (§1.4 rules 1-3, MLX N == 0) */
    {"empty file", NULL, 0, raw_short, 0, ERR_FORMAT, "too small", NULL},
    {"5-byte file", NULL, 0, raw_short, sizeof raw_short, ERR_FORMAT, "too small", NULL},
    {"N=60 with only 8 bytes", NULL, 0, raw_n60, sizeof raw_n60, ERR_FORMAT, "beyond the end", "60"},
    {"N=100,000,000 passes the cap, then is beyond the file", NULL, 0, raw_n1e8, sizeof raw_n1e8, ERR_FORMAT,
     "beyond the end", "100000000"},
    {"N=100,000,001 above the cap", NULL, 0, raw_n1e8p1, sizeof raw_n1e8p1, ERR_FORMAT, "exceeds", "100000001"},
    {"N with high bytes 0xFF", NULL, 0, raw_nhigh, sizeof raw_nhigh, ERR_FORMAT, "exceeds", "limit"},
    {"N=0", NULL, 0, raw_n0, sizeof raw_n0, ERR_FORMAT, "length is 0", NULL},
    /* header text (rules 4-5) */
    {"N=1 then 0xFF", NULL, 0, raw_ff, sizeof raw_ff, ERR_FORMAT, "utf-8", "header"},
    {"0xFF inside a key", "{\"w\xff\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1, NULL, 0,
     ERR_FORMAT, "utf-8", "header"},
    {"N=1 then {", NULL, 0, raw_brace, sizeof raw_brace, ERR_FORMAT, "JSON", "header"},
    {"not JSON", "safetensors!", 0, NULL, 0, ERR_FORMAT, "invalid JSON", "header"},
    {"trailing garbage after the JSON", "{" U8T("w", 1, 0, 1) "} x", 1, NULL, 0, ERR_FORMAT, "JSON",
     "header"},
    {"second JSON value after the first", "{}{}", 0, NULL, 0, ERR_FORMAT, "JSON", "header"},
    {"top-level array", "[]", 0, NULL, 0, ERR_FORMAT, "expected an object", "array"},
    {"top-level string", "\"x\"", 0, NULL, 0, ERR_FORMAT, "expected an object", "string"},
    {"escaped NUL in a tensor name", "{\"a\\u0000b\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
     NULL, 0, ERR_FORMAT, "NUL", NULL},
    {"unknown dtype", "{\"w\":{\"dtype\":\"F33\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, NULL, 0, ERR_FORMAT,
     "unknown dtype \"F33\"", "'w'"},
    {"lowercase dtype", "{\"w\":{\"dtype\":\"f32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, NULL, 0, ERR_FORMAT,
     "unknown dtype \"f32\"", "'w'"},
    {"dtype not a string", "{\"w\":{\"dtype\":32,\"shape\":[1],\"data_offsets\":[0,4]}}", 4, NULL, 0, ERR_FORMAT,
     "dtype", "'w'"},
    {"missing dtype", "{\"w\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, NULL, 0, ERR_FORMAT, "\"dtype\" missing",
     "'w'"},
    {"missing shape", "{\"w\":{\"dtype\":\"U8\",\"data_offsets\":[0,4]}}", 4, NULL, 0, ERR_FORMAT, "\"shape\"",
     "'w'"},
    {"missing data_offsets", "{\"w\":{\"dtype\":\"U8\",\"shape\":[4]}}", 4, NULL, 0, ERR_FORMAT, "data_offsets",
     "'w'"},
    {"shape with float 16.0", "{\"w\":{\"dtype\":\"U8\",\"shape\":[16.0],\"data_offsets\":[0,16]}}", 16, NULL, 0,
     ERR_FORMAT, "shape[0]", "'w'"},
    {"negative dim", "{\"w\":{\"dtype\":\"U8\",\"shape\":[2,-1],\"data_offsets\":[0,2]}}", 2, NULL, 0, ERR_FORMAT,
     "shape[1]", "'w'"},
    {"dim 2^64-2", "{\"w\":{\"dtype\":\"U8\",\"shape\":[18446744073709551614],\"data_offsets\":[0,2]}}", 2, NULL, 0,
     ERR_FORMAT, "shape[0]", "'w'"},
    {"dim 2^64 (saturates in json-c)", "{\"w\":{\"dtype\":\"U8\",\"shape\":[18446744073709551616],\"data_offsets\":[0,2]}}",
     2, NULL, 0, ERR_FORMAT, "shape[0]", "'w'"},
    {"dims whose product overflows", "{\"w\":{\"dtype\":\"U8\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,1]}}",
     1, NULL, 0, ERR_RANGE, "overflow", "'w'"},
    {"element bits overflow", "{\"w\":{\"dtype\":\"F32\",\"shape\":[2305843009213693952],\"data_offsets\":[0,1]}}", 1,
     NULL, 0, ERR_RANGE, "overflow", "'w'"},
    {"rank 9", "{\"w\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}", 1, NULL, 0,
     ERR_RANGE, "rank 9", "'w'"},
    {"F4 odd element count (misaligned slice)", "{\"w\":{\"dtype\":\"F4\",\"shape\":[3],\"data_offsets\":[0,2]}}", 2,
     NULL, 0, ERR_RANGE, "whole number of bytes", "'w'"},
    {"data_offsets of length 3", "{\"w\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,2,4]}}", 4, NULL, 0,
     ERR_FORMAT, "data_offsets", "'w'"},
    {"data_offsets with a float", "{\"w\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4.0]}}", 4, NULL, 0,
     ERR_FORMAT, "data_offsets", "'w'"},
    {"negative data_offsets", "{\"w\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[-1,-1]}}", 0, NULL, 0,
     ERR_FORMAT, "data_offsets", "'w'"},
    {"data_offsets reversed", "{\"w\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[4,0]}}", 4, NULL, 0,
     ERR_FORMAT, "end before", "'w'"},
    {"size != shape x dtype (I32 [2,2] in 4 bytes)", "{\"w\":{\"dtype\":\"I32\",\"shape\":[2,2],\"data_offsets\":[0,4]}}",
     4, NULL, 0, ERR_FORMAT, "needs 16", "'w'"},
    {"overlapping offsets", "{" U8T("a", 8, 0, 8) "," U8T("b", 8, 4, 12) "}", 12, NULL, 0, ERR_FORMAT, "overlaps",
     "'b'"},
    {"gapped offsets", "{" U8T("a", 8, 0, 8) "," U8T("b", 8, 12, 20) "}", 20, NULL, 0, ERR_FORMAT, "gap", "'b'"},
    {"first tensor not at 0", "{" U8T("a", 8, 4, 12) "}", 12, NULL, 0, ERR_FORMAT, "expected 0", "'a'"},
    {"duplicate key, different range", "{" U8T("a", 8, 0, 8) "," U8T("b", 8, 8, 16) "," U8T("a", 8, 16, 24) "}", 24,
     NULL, 0, ERR_FORMAT, "duplicate", "'b'"},
    {"ten tensors all at [0,16]",
     "{" U8T("t0", 16, 0, 16) "," U8T("t1", 16, 0, 16) "," U8T("t2", 16, 0, 16) "," U8T("t3", 16, 0, 16) ","
     U8T("t4", 16, 0, 16) "," U8T("t5", 16, 0, 16) "," U8T("t6", 16, 0, 16) "," U8T("t7", 16, 0, 16) ","
     U8T("t8", 16, 0, 16) "," U8T("t9", 16, 0, 16) "}",
     16, NULL, 0, ERR_FORMAT, "overlaps", "'t1'"},
    {"trailing bytes after the last tensor", "{" U8T("a", 4, 0, 4) "}", 6, NULL, 0, ERR_FORMAT, "trailing bytes",
     NULL},
    {"truncated data (2 bytes missing)", "{" U8T("a", 4, 0, 4) "," U8T("b", 4, 4, 8) "}", 6, NULL, 0, ERR_FORMAT,
     "truncated", NULL},
    {"non-string metadata value", "{\"__metadata__\":{\"format\":\"pt\",\"step\":1}}", 0, NULL, 0, ERR_FORMAT,
     "__metadata__", "'step'"},
    {"metadata as an array", "{\"__metadata__\":[\"pt\"]}", 0, NULL, 0, ERR_FORMAT, "__metadata__", "array"},
    {"tensor entry that is not an object", "{\"w\":[0,4]}", 4, NULL, 0, ERR_FORMAT, "expected an object", "'w'"},
    {"empty tensor name", "{\"\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1, NULL, 0, ERR_FORMAT,
     "tensor name of 0 bytes", NULL},
};
#define N_CORRUPT (sizeof corrupt / sizeof corrupt[0])

static uint8_t *corrupt_image(const struct corrupt *c, size_t *len)
{
    if (c->hdr)
        return image(c->hdr, NULL, c->data_len, len);
    *len = c->raw_len;
    uint8_t *buf = malloc(c->raw_len ? c->raw_len : 1);
    cr_assert(buf);
    memcpy(buf, c->raw, c->raw_len);
    return buf;
}

static void expect_rejection(const struct corrupt *c, const char *how, int rc, const struct err *e)
{
    cr_assert_eq(rc, c->code, "[%s] via %s: code %d (%s), expected %d; message: %s", c->what, how, rc,
                 err_code_name((enum err_code)rc), c->code, e->msg);
    cr_assert_eq((int)e->code, c->code, "[%s] via %s: e.code disagrees with the return value", c->what, how);
    cr_assert(strstr(e->msg, c->sub1), "[%s] via %s: message lacks \"%s\": %s", c->what, how, c->sub1, e->msg);
    if (c->sub2)
        cr_assert(strstr(e->msg, c->sub2), "[%s] via %s: message lacks \"%s\": %s", c->what, how, c->sub2, e->msg);
}

ParameterizedTestParameters(safetensors, st_corrupt)
{
    static int idx[N_CORRUPT];
    for (size_t i = 0; i < N_CORRUPT; i++)
        idx[i] = (int)i;
    return cr_make_param_array(int, idx, N_CORRUPT);
}

ParameterizedTest(int *i, safetensors, st_corrupt)
{
    const struct corrupt *c = &corrupt[*i];
    size_t len;
    uint8_t *buf = corrupt_image(c, &len);

    struct st_file f;
    struct err e = {0};
    int rc = st_open_mem(&f, buf, len, "mem.safetensors", &e);
    expect_rejection(c, "st_open_mem", rc, &e);
    cr_assert(strstr(e.msg, "mem.safetensors"), "[%s] message names the file: %s", c->what, e.msg);
    cr_assert_eq(f.n_tensors, 0, "[%s] a failed open leaves the struct closed", c->what);
    cr_assert_null(f.tensors);
    st_close(&f);

    char *dir = th_mkdtemp();
    char *path = th_write(dir, "bad.safetensors", buf, len);
    static const unsigned flags[3] = {0, ST_HEADER_ONLY, ST_ALLOW_TRUNCATED};
    static const char *const names[3] = {"st_open", "st_open header-only", "st_open allow-truncated"};
    for (int m = 0; m < 3; m++) {
        memset(&e, 0, sizeof e);
        rc = st_open(&f, path, flags[m], &e);
        expect_rejection(c, names[m], rc, &e);
        cr_assert(strstr(e.msg, "bad.safetensors"), "[%s] message names the file: %s", c->what, e.msg);
        st_close(&f);
    }
    free(path);
    th_rmtree(dir);
    free(buf);
}

Test(safetensors, st_corrupt_table_is_complete)
{
    /* Guard against the table silently shrinking. */
    cr_assert_geq(N_CORRUPT, 40);
    for (size_t i = 0; i < N_CORRUPT; i++)
        cr_assert(corrupt[i].code != ERR_OK && corrupt[i].sub1, "%s", corrupt[i].what);
}

Test(safetensors, st_n_exactly_limit_constant)
{
    cr_assert_eq(ST_MAX_HEADER, 100000000ull, "§1.4 rule 2: the cap is 100,000,000 bytes");
}

/* ------------------------------------------------------------------ writer */

static const struct st_writer_tensor wt[3] = {
    {"w.a", DT_F32, 2, {2, 3}},
    {"w.empty", DT_BF16, 2, {0, 4}},
    {"w.c", DT_U8, 1, {5}},
};
static const char *const wmeta[2] = {"format", "pt"};

static void fill_writer_data(uint8_t data[29])
{
    for (int i = 0; i < 6; i++) {
        float v = (float)i * 0.5f - 1.0f;
        uint32_t u;
        memcpy(&u, &v, 4);
        for (int b = 0; b < 4; b++)
            data[4 * i + b] = (uint8_t)(u >> (8 * b));
    }
    for (int i = 0; i < 5; i++)
        data[24 + i] = (uint8_t)(0xa0 + i);
}

Test(safetensors, st_writer_round_trip)
{
    char *dir = th_mkdtemp();
    char *path = malloc(strlen(dir) + 32);
    sprintf(path, "%s/out.safetensors", dir);
    uint8_t data[29];
    fill_writer_data(data);

    struct st_writer w;
    struct err e = {0};
    cr_assert_eq(st_writer_open(&w, path, wt, 3, wmeta, 1, false, &e), ERR_OK, "%s", e.msg);
    cr_assert_eq(access(path, F_OK), -1, "nothing under the final name before finish");
    /* Chunks that straddle tensor boundaries. */
    cr_assert_eq(st_writer_write(&w, data, 7, &e), ERR_OK, "%s", e.msg);
    cr_assert_eq(st_writer_write(&w, data + 7, 20, &e), ERR_OK, "%s", e.msg);
    cr_assert_eq(st_writer_write(&w, data + 27, 2, &e), ERR_OK, "%s", e.msg);
    cr_assert_eq(st_writer_finish(&w, &e), ERR_OK, "%s", e.msg);
    cr_assert_eq(count_entries(dir), 1, "only the final file remains (no temporary)");

    struct st_file f;
    cr_assert_eq(st_open(&f, path, 0, &e), ERR_OK, "%s", e.msg);
    cr_assert_eq(f.header_len % 8, 0, "header padded to a multiple of 8");
    cr_assert_eq(f.file_size, 8 + f.header_len + 29);
    cr_assert_eq(f.n_tensors, 3);
    cr_assert_str_eq(st_meta_get(&f, "format"), "pt");

    const struct st_tensor *a = st_find(&f, "w.a"), *em = st_find(&f, "w.empty"), *c = st_find(&f, "w.c");
    cr_assert(a && em && c);
    cr_assert_eq(a->dtype, DT_F32);
    cr_assert_eq(a->rank, 2);
    cr_assert_eq(a->shape[0], 2);
    cr_assert_eq(a->shape[1], 3);
    cr_assert_eq(a->begin, 0);
    cr_assert_eq(a->end, 24);
    cr_assert_eq(em->dtype, DT_BF16);
    cr_assert_eq(em->rank, 2);
    cr_assert_eq(em->shape[0], 0);
    cr_assert_eq(em->shape[1], 4);
    cr_assert_eq(em->begin, em->end, "an empty tensor takes zero bytes");
    cr_assert_eq(c->dtype, DT_U8);
    cr_assert_eq(c->end - c->begin, 5);

    const uint8_t *p;
    cr_assert_eq(st_data(&f, a, &p, &e), ERR_OK);
    cr_assert_eq(memcmp(p, data, 24), 0, "w.a bytes");
    float fa[6];
    dtype_to_f32(DT_F32, p, fa, 6);
    cr_assert_float_eq(fa[0], -1.0f, 0.0f);
    cr_assert_float_eq(fa[5], 1.5f, 0.0f);
    cr_assert_eq(st_data(&f, c, &p, &e), ERR_OK);
    cr_assert_eq(memcmp(p, data + 24, 5), 0, "w.c bytes");
    st_close(&f);

    /* Byte-exact: the whole data region is what we wrote. */
    size_t n;
    uint8_t *raw = th_read(path, &n);
    cr_assert_not_null(raw);
    uint64_t hn = get_u64le(raw);
    cr_assert_eq(n, 8 + hn + 29);
    cr_assert_eq(memcmp(raw + 8 + hn, data, 29), 0);
    cr_assert_eq(raw[8], '{', "the writer puts no whitespace before the JSON");
    cr_assert_eq(raw[8 + hn - 1] == '}' || raw[8 + hn - 1] == ' ', 1);
    free(raw);
    free(path);
    th_rmtree(dir);
}

Test(safetensors, st_writer_single_byte_writes)
{
    char *dir = th_mkdtemp();
    char *path = malloc(strlen(dir) + 32);
    sprintf(path, "%s/bytes.safetensors", dir);
    uint8_t data[29];
    fill_writer_data(data);
    struct st_writer w;
    struct err e = {0};
    cr_assert_eq(st_writer_open(&w, path, wt, 3, NULL, 0, false, &e), ERR_OK, "%s", e.msg);
    for (int i = 0; i < 29; i++)
        cr_assert_eq(st_writer_write(&w, data + i, 1, &e), ERR_OK, "byte %d: %s", i, e.msg);
    cr_assert_eq(st_writer_finish(&w, &e), ERR_OK, "%s", e.msg);
    struct st_file f;
    cr_assert_eq(st_open(&f, path, 0, &e), ERR_OK, "%s", e.msg);
    cr_assert_eq(f.n_meta, 0);
    const uint8_t *p;
    cr_assert_eq(st_data(&f, st_find(&f, "w.c"), &p, &e), ERR_OK);
    cr_assert_eq(memcmp(p, data + 24, 5), 0);
    st_close(&f);
    free(path);
    th_rmtree(dir);
}

Test(safetensors, st_writer_misuse)
{
    char *dir = th_mkdtemp();
    char *path = malloc(strlen(dir) + 32);
    sprintf(path, "%s/bad.safetensors", dir);
    uint8_t data[40] = {0};
    struct st_writer w;
    struct err e = {0};

    /* Too few bytes: finish refuses and nothing appears under the final name. */
    cr_assert_eq(st_writer_open(&w, path, wt, 3, NULL, 0, false, &e), ERR_OK, "%s", e.msg);
    cr_assert_eq(st_writer_write(&w, data, 10, &e), ERR_OK, "%s", e.msg);
    cr_assert_eq(st_writer_finish(&w, &e), ERR_USAGE);
    cr_assert(strstr(e.msg, "of 3"), "%s", e.msg);
    st_writer_abort(&w);
    cr_assert_eq(count_entries(dir), 0, "abort after a failed finish leaves nothing");

    /* Too many bytes. */
    cr_assert_eq(st_writer_open(&w, path, wt, 3, NULL, 0, false, &e), ERR_OK, "%s", e.msg);
    cr_assert_eq(st_writer_write(&w, data, 30, &e), ERR_USAGE);
    cr_assert(strstr(e.msg, "past the last declared tensor"), "%s", e.msg);
    st_writer_abort(&w);
    cr_assert_eq(count_entries(dir), 0);
    free(path);
    th_rmtree(dir);
}

Test(safetensors, st_writer_abort_leaves_nothing)
{
    char *dir = th_mkdtemp();
    char *path = malloc(strlen(dir) + 32);
    sprintf(path, "%s/aborted.safetensors", dir);
    uint8_t data[29];
    fill_writer_data(data);
    struct st_writer w;
    struct err e = {0};
    cr_assert_eq(st_writer_open(&w, path, wt, 3, wmeta, 1, false, &e), ERR_OK, "%s", e.msg);
    cr_assert_leq(count_entries(dir), 1, "at most the temporary file while writing (none when unnamed)");
    cr_assert_eq(access(path, F_OK), -1, "nothing under the final name while writing");
    cr_assert_eq(st_writer_write(&w, data, 12, &e), ERR_OK, "%s", e.msg);
    st_writer_abort(&w);
    cr_assert_eq(count_entries(dir), 0, "abort removes the temporary file");
    cr_assert_eq(access(path, F_OK), -1);
    st_writer_abort(&w); /* twice is safe */

    struct st_writer z;
    memset(&z, 0, sizeof z);
    st_writer_abort(&z); /* a zeroed struct is safe (it closes no descriptor 0) */
    free(path);
    th_rmtree(dir);
}

Test(safetensors, st_writer_header_only)
{
    char *dir = th_mkdtemp();
    char *path = malloc(strlen(dir) + 32);
    sprintf(path, "%s/hdr.safetensors", dir);
    struct st_writer w;
    struct err e = {0};
    cr_assert_eq(st_writer_open(&w, path, wt, 3, wmeta, 1, true, &e), ERR_OK, "%s", e.msg);
    cr_assert_eq(st_writer_finish(&w, &e), ERR_OK, "%s", e.msg);

    size_t n;
    uint8_t *raw = th_read(path, &n);
    cr_assert_not_null(raw);
    uint64_t hn = get_u64le(raw);
    cr_assert_eq(n, 8 + hn, "header_only writes exactly the 8+N header bytes");
    cr_assert_eq(file_size(path), 8 + hn);
    free(raw);

    struct st_file f;
    cr_assert_eq(st_open(&f, path, 0, &e), ERR_FORMAT, "only ST_ALLOW_TRUNCATED accepts a header-only file");
    cr_assert(strstr(e.msg, "truncated"), "%s", e.msg);
    cr_assert_eq(st_open(&f, path, ST_HEADER_ONLY, &e), ERR_FORMAT);
    cr_assert_eq(st_open(&f, path, ST_ALLOW_TRUNCATED, &e), ERR_OK, "%s", e.msg);
    cr_assert(f.truncated);
    cr_assert_eq(f.n_tensors, 3);
    const struct st_tensor *a = st_find(&f, "w.a");
    cr_assert_not_null(a);
    cr_assert_eq(a->end, 24);
    cr_assert_eq(st_find(&f, "w.c")->end, 29);
    cr_assert_str_eq(st_meta_get(&f, "format"), "pt");
    st_close(&f);
    free(path);
    th_rmtree(dir);
}
