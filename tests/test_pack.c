/* test_pack.c - the .gpk writer, reader and verifier (core/pack.h) against
 * FORMAT.md.
 *
 * A small pack is written with pack_writer_*, read back and checked field by
 * field (header, offsets, bytes, CRCs against zlib, manifest). Corrupt
 * images are made by editing a valid image in memory and re-computing the
 * header CRC (bytes [0, 60) at offset 60) and/or the manifest CRC (offset 56)
 * so that the check under test is the one that fires; every entry of that
 * table must be rejected with the expected code and a message naming the
 * problem, through pack_open_mem and through pack_open on a real file (the
 * "quantized" entries by quant_check_pack after them, as readers do). A
 * single flipped byte anywhere in a pack must be caught by pack_open (header,
 * manifest) or pack_verify (tensor bytes, padding). */
#include <criterion/criterion.h>

#include <dirent.h>
#include <json-c/json.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "core/bytes.h"
#include "core/dtype.h"
#include "core/err.h"
#include "core/fileio.h"
#include "core/pack.h"
#include "quant/format.h"
#include "tests/helpers.h"

/* ------------------------------------------------------------------ the sample pack */

/* tok.weight BF16 [3, 5] (30 bytes), empty F32 [0, 4] (0 bytes), codes U8 [77]
 * (77 bytes); with_quant adds an affine 4-bit group-64 triplet m.{weight,
 * scales, biases} (U32 [2, 8], BF16 [2, 1], BF16 [2, 1]) and its "quantized"
 * entry. */
#define N_BASIC 3
#define N_QUANT 6

struct sample {
    const char *name;
    enum dtype dtype;
    int rank;
    uint64_t shape[2];
    size_t nbytes;
};

static const struct sample samples[N_QUANT] = {
    {"tok.weight", DT_BF16, 2, {3, 5}, 30},  {"empty", DT_F32, 2, {0, 4}, 0},    {"codes", DT_U8, 1, {77, 0}, 77},
    {"m.weight", DT_U32, 2, {2, 8}, 64},     {"m.scales", DT_BF16, 2, {2, 1}, 4}, {"m.biases", DT_BF16, 2, {2, 1}, 4},
};

/* Deterministic, non-zero bytes of sample i. */
static void sample_bytes(size_t i, uint8_t *out)
{
    for (size_t k = 0; k < samples[i].nbytes; k++)
        out[k] = (uint8_t)(1 + (k * 37 + i * 101) % 251);
}

static uint32_t zcrc(const void *p, size_t n)
{
    return (uint32_t)crc32(crc32(0, Z_NULL, 0), p, (uInt)n);
}

static struct json_object *quantized_block(void)
{
    struct json_object *q = json_object_new_object(), *m = json_object_new_object();
    json_object_object_add(m, "mode", json_object_new_string("affine"));
    json_object_object_add(m, "bits", json_object_new_int(4));
    json_object_object_add(m, "group_size", json_object_new_int(64));
    json_object_object_add(m, "in_features", json_object_new_int(64));
    json_object_object_add(m, "out_features", json_object_new_int(2));
    json_object_object_add(m, "weight", json_object_new_string("m.weight"));
    json_object_object_add(m, "scales", json_object_new_string("m.scales"));
    json_object_object_add(m, "biases", json_object_new_string("m.biases"));
    json_object_object_add(q, "m", m);
    return q;
}

/* Writes the sample pack; the tensor bytes are written in two pieces to
 * exercise streaming. */
static void write_sample(const char *path, uint32_t align, bool with_quant)
{
    struct pack_writer w;
    struct err e = {0};
    cr_assert_eq(pack_writer_open(&w, path, align, &e), ERR_OK, "%s", e.msg);
    size_t n = with_quant ? N_QUANT : N_BASIC;
    for (size_t i = 0; i < n; i++) {
        uint8_t buf[128];
        sample_bytes(i, buf);
        cr_assert_eq(pack_writer_begin(&w, samples[i].name, samples[i].dtype, samples[i].rank, samples[i].shape, &e),
                     ERR_OK, "%s", e.msg);
        size_t half = samples[i].nbytes / 2;
        cr_assert_eq(pack_writer_write(&w, buf, half, &e), ERR_OK, "%s", e.msg);
        cr_assert_eq(pack_writer_write(&w, buf + half, samples[i].nbytes - half, &e), ERR_OK, "%s", e.msg);
        cr_assert_eq(pack_writer_end(&w, &e), ERR_OK, "%s", e.msg);
    }
    struct json_object *f = json_object_new_object(), *prod = json_object_new_object();
    json_object_object_add(prod, "name", json_object_new_string("test_pack"));
    json_object_object_add(f, "producer", prod);
    if (with_quant)
        json_object_object_add(f, "quantized", quantized_block());
    static const char *const qfeat[] = {"quant:affine"};
    cr_assert_eq(pack_writer_finish(&w, f, qfeat, with_quant ? 1 : 0, &e), ERR_OK, "%s", e.msg);
}

/* The sample pack as an in-memory image (malloc'ed). */
static uint8_t *sample_image(uint32_t align, bool with_quant, size_t *len)
{
    char *dir = th_mkdtemp();
    char *path = fio_join(dir, "s.gpk");
    write_sample(path, align, with_quant);
    uint8_t *img = th_read(path, len);
    cr_assert(img, "cannot read %s", path);
    free(path);
    th_rmtree(dir);
    return img;
}

static size_t count_entries(const char *dir)
{
    DIR *d = opendir(dir);
    cr_assert(d, "opendir %s", dir);
    size_t n = 0;
    struct dirent *de;
    while ((de = readdir(d)))
        n += strcmp(de->d_name, ".") && strcmp(de->d_name, "..");
    closedir(d);
    return n;
}

static bool file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

/* ------------------------------------------------------------------ round trip */

static void check_roundtrip(uint32_t align)
{
    char *dir = th_mkdtemp();
    char *path = fio_join(dir, "rt.gpk");
    write_sample(path, align, false);
    cr_assert_eq(count_entries(dir), 1, "only the pack remains in the directory (no temp file)");

    struct pack p;
    struct err e = {0};
    cr_assert_eq(pack_open(&p, path, &e), ERR_OK, "%s", e.msg);
    size_t flen;
    uint8_t *raw = th_read(path, &flen);
    cr_assert(raw);

    /* header fields */
    cr_assert_eq(memcmp(raw, "\x89GPK\r\n\x1a\n", 8), 0);
    cr_assert_eq(rd_u16le(raw + 8), 1);
    cr_assert_eq(rd_u16le(raw + 10), 0);
    cr_assert_eq(rd_u32le(raw + 12), align);
    cr_assert_eq(rd_u64le(raw + 16), flen);
    cr_assert_eq(rd_u32le(raw + 60), zcrc(raw, 60), "header CRC is zlib crc32 of bytes [0, 60)");
    cr_assert_eq(p.size, flen);
    cr_assert_eq(p.align, align);
    cr_assert_eq(p.version_minor, 0);
    cr_assert_eq(p.data_offset, align, "data_offset == alignment");
    cr_assert_eq(rd_u64le(raw + 24), align);
    /* tok at 0 (30 bytes), empty at A (0 bytes), codes at A (77 bytes): data ends at A + 77 */
    cr_assert_eq(p.data_size, (uint64_t)align + 77);
    cr_assert_eq(rd_u64le(raw + 32), p.data_size);
    cr_assert_eq(p.manifest_offset, p.data_offset + p.data_size);
    cr_assert_eq(rd_u64le(raw + 40), p.manifest_offset);
    cr_assert_eq(p.manifest_offset + p.manifest_size, flen);
    cr_assert_eq(rd_u64le(raw + 48), p.manifest_size);
    cr_assert_eq(rd_u32le(raw + 56), zcrc(raw + p.manifest_offset, (size_t)p.manifest_size));
    for (uint64_t i = 60 + 4; i < p.data_offset; i++)
        cr_assert_eq(raw[i], 0, "byte %llu before data_offset is zero", (unsigned long long)i);

    /* tensors */
    cr_assert_eq(p.n_tensors, N_BASIC);
    static const uint64_t expect_off[N_BASIC] = {0, 1, 1}; /* in units of the alignment */
    for (size_t i = 0; i < N_BASIC; i++) {
        const struct pack_tensor *t = &p.tensors[i];
        uint8_t want[128];
        sample_bytes(i, want);
        cr_assert_str_eq(t->name, samples[i].name);
        cr_assert_eq(t->dtype, samples[i].dtype);
        cr_assert_eq(t->rank, samples[i].rank);
        for (int d = 0; d < t->rank; d++)
            cr_assert_eq(t->shape[d], samples[i].shape[d]);
        cr_assert_eq(t->nbytes, samples[i].nbytes);
        cr_assert_eq(t->offset % align, 0, "%s: offset %llu multiple of %u", t->name, (unsigned long long)t->offset,
                     align);
        cr_assert_eq(t->offset, expect_off[i] * align, "%s at %llu", t->name, (unsigned long long)t->offset);
        cr_assert_eq(memcmp(pack_data(&p, t), want, samples[i].nbytes), 0, "%s bytes", t->name);
        cr_assert_eq(t->crc32, zcrc(want, samples[i].nbytes), "%s CRC", t->name);
        cr_assert_eq(pack_find(&p, samples[i].name), t);
    }
    cr_assert_eq(p.tensors[1].crc32, 0, "CRC-32 of no bytes is 0");
    cr_assert_null(pack_find(&p, "missing"));
    cr_assert_null(pack_find(&p, "tok"));
    cr_assert_null(pack_find(&p, "tok.weight.x"));

    /* manifest */
    struct json_object *v, *m = p.manifest;
    cr_assert(json_object_object_get_ex(m, "format", &v));
    cr_assert_str_eq(json_object_get_string(v), "gempack");
    cr_assert(json_object_object_get_ex(m, "version", &v));
    cr_assert_eq(json_object_array_length(v), 2);
    cr_assert_eq(json_object_get_int(json_object_array_get_idx(v, 0)), 1);
    cr_assert_eq(json_object_get_int(json_object_array_get_idx(v, 1)), 0);
    cr_assert(json_object_object_get_ex(m, "required_features", &v));
    bool bf16 = false, f32 = false, u8 = false, quant = false;
    for (size_t i = 0; i < json_object_array_length(v); i++) {
        const char *s = json_object_get_string(json_object_array_get_idx(v, i));
        bf16 |= !strcmp(s, "dtype:BF16");
        f32 |= !strcmp(s, "dtype:F32");
        u8 |= !strcmp(s, "dtype:U8");
        quant |= !strcmp(s, "quant:affine");
        cr_assert(pack_feature_known(s), "%s known", s);
    }
    cr_assert(bf16 && f32 && u8, "one dtype:X per dtype used: %s", json_object_to_json_string(v));
    cr_assert_eq(json_object_array_length(v), 3, "no quant feature without quantized tensors: %s",
                 json_object_to_json_string(v));
    cr_assert(!quant);
    cr_assert(json_object_object_get_ex(m, "producer", &v), "caller fields are kept");
    cr_assert(json_object_object_get_ex(m, "tensors", &v));
    cr_assert_eq(json_object_array_length(v), N_BASIC);

    size_t bad = 99;
    cr_assert_eq(pack_verify(&p, &bad, &e), ERR_OK, "%s", e.msg);
    cr_assert_eq(bad, 0);
    pack_close(&p);
    free(raw);
    free(path);
    th_rmtree(dir);
}

Test(pack, roundtrip_align_64) { check_roundtrip(64); }

Test(pack, roundtrip_align_4096) { check_roundtrip(4096); }

Test(pack, quantized_entry_and_features)
{
    size_t len;
    uint8_t *img = sample_image(64, true, &len);
    struct pack p;
    struct err e = {0};
    cr_assert_eq(pack_open_mem(&p, img, len, "mem.gpk", &e), ERR_OK, "%s", e.msg);
    cr_assert_eq(p.n_tensors, N_QUANT);
    /* m.weight at 192 (after codes ends at 141), m.scales at 256, m.biases at 320 */
    cr_assert_eq(pack_find(&p, "m.weight")->offset, 192);
    cr_assert_eq(pack_find(&p, "m.scales")->offset, 256);
    cr_assert_eq(pack_find(&p, "m.biases")->offset, 320);
    cr_assert_eq(p.data_size, 324);
    struct json_object *v;
    cr_assert(json_object_object_get_ex(p.manifest, "required_features", &v));
    bool quant = false, u32 = false;
    for (size_t i = 0; i < json_object_array_length(v); i++) {
        quant |= !strcmp(json_object_get_string(json_object_array_get_idx(v, i)), "quant:affine");
        u32 |= !strcmp(json_object_get_string(json_object_array_get_idx(v, i)), "dtype:U32");
    }
    cr_assert(quant && u32, "%s", json_object_to_json_string(v));
    size_t bad;
    cr_assert_eq(pack_verify(&p, &bad, &e), ERR_OK, "%s", e.msg);
    pack_close(&p);
    free(img);
}

Test(pack, byte_identical_output)
{
    char *dir = th_mkdtemp();
    char *a = fio_join(dir, "a.gpk"), *b = fio_join(dir, "b.gpk");
    write_sample(a, 64, true);
    write_sample(b, 64, true);
    size_t la, lb;
    uint8_t *ia = th_read(a, &la), *ib = th_read(b, &lb);
    cr_assert(ia && ib);
    cr_assert_eq(la, lb);
    cr_assert_eq(memcmp(ia, ib, la), 0, "identical input gives identical bytes");
    free(ia);
    free(ib);
    free(a);
    free(b);
    th_rmtree(dir);
}

Test(pack, writer_rejects_bad_alignment)
{
    char *dir = th_mkdtemp();
    char *path = fio_join(dir, "x.gpk");
    static const uint32_t bad[] = {0, 32, 100, 65536u * 2, 4095};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct pack_writer w;
        struct err e = {0};
        cr_assert_eq(pack_writer_open(&w, path, bad[i], &e), ERR_USAGE, "alignment %u", bad[i]);
        cr_assert(strstr(e.msg, "power of two"), "%s", e.msg);
        pack_writer_abort(&w);
    }
    cr_assert_eq(count_entries(dir), 0);
    free(path);
    th_rmtree(dir);
}

/* ------------------------------------------------------------------ partial files */

Test(pack, abort_leaves_nothing)
{
    char *dir = th_mkdtemp();
    char *path = fio_join(dir, "x.gpk");
    struct pack_writer w;
    struct err e = {0};
    cr_assert_eq(pack_writer_open(&w, path, 64, &e), ERR_OK, "%s", e.msg);
    uint8_t buf[128];
    sample_bytes(0, buf);
    cr_assert_eq(pack_writer_begin(&w, "tok.weight", DT_BF16, 2, samples[0].shape, &e), ERR_OK, "%s", e.msg);
    cr_assert_eq(pack_writer_write(&w, buf, 30, &e), ERR_OK, "%s", e.msg);
    cr_assert_eq(pack_writer_end(&w, &e), ERR_OK, "%s", e.msg);
    cr_assert_leq(count_entries(dir), 1, "at most the temporary file while writing (none when unnamed)");
    cr_assert_eq(access(path, F_OK), -1, "nothing under the final name while writing");
    cr_assert(!file_exists(path), "nothing under the final name before finish");
    pack_writer_abort(&w);
    cr_assert_eq(count_entries(dir), 0, "abort removes the temporary file");
    pack_writer_abort(&w); /* safe twice */
    cr_assert_eq(count_entries(dir), 0);
    free(path);
    th_rmtree(dir);
}

Test(pack, failed_writer_leaves_nothing)
{
    char *dir = th_mkdtemp();
    char *path = fio_join(dir, "x.gpk");
    struct pack_writer w;
    struct err e = {0};
    uint8_t buf[128];
    sample_bytes(0, buf);

    /* too few bytes: end fails */
    cr_assert_eq(pack_writer_open(&w, path, 64, &e), ERR_OK, "%s", e.msg);
    cr_assert_eq(pack_writer_begin(&w, "tok.weight", DT_BF16, 2, samples[0].shape, &e), ERR_OK, "%s", e.msg);
    cr_assert_eq(pack_writer_write(&w, buf, 10, &e), ERR_OK, "%s", e.msg);
    cr_assert_eq(pack_writer_end(&w, &e), ERR_USAGE);
    cr_assert(strstr(e.msg, "tok.weight") && strstr(e.msg, "10 of 30"), "%s", e.msg);
    /* finishing with the tensor still open fails too */
    cr_assert_eq(pack_writer_finish(&w, json_object_new_object(), NULL, 0, &e), ERR_USAGE);
    cr_assert(strstr(e.msg, "still open"), "%s", e.msg);
    pack_writer_abort(&w);
    cr_assert_eq(count_entries(dir), 0, "nothing left after a failed writer");

    /* too many bytes: write fails */
    cr_assert_eq(pack_writer_open(&w, path, 64, &e), ERR_OK, "%s", e.msg);
    cr_assert_eq(pack_writer_begin(&w, "tok.weight", DT_BF16, 2, samples[0].shape, &e), ERR_OK, "%s", e.msg);
    cr_assert_eq(pack_writer_write(&w, buf, 31, &e), ERR_USAGE);
    cr_assert(strstr(e.msg, "tok.weight"), "%s", e.msg);
    pack_writer_abort(&w);
    cr_assert_eq(count_entries(dir), 0);

    /* misuse without a tensor: an error, not a crash */
    cr_assert_eq(pack_writer_open(&w, path, 64, &e), ERR_OK, "%s", e.msg);
    cr_assert_eq(pack_writer_write(&w, buf, 4, &e), ERR_USAGE);
    cr_assert_eq(pack_writer_end(&w, &e), ERR_USAGE);
    cr_assert_eq(pack_writer_begin(&w, "", DT_BF16, 2, samples[0].shape, &e), ERR_USAGE, "empty name");
    cr_assert_eq(pack_writer_begin(&w, "x", DT_BF16, PACK_MAX_RANK + 1, samples[0].shape, &e), ERR_USAGE, "rank 9");
    pack_writer_abort(&w);
    cr_assert_eq(count_entries(dir), 0);
    free(path);
    th_rmtree(dir);
}

/* ------------------------------------------------------------------ corrupt images */

struct image {
    uint8_t *b;
    size_t n;
};

static void fix_header_crc(struct image *im)
{
    wr_u32le(im->b + 60, zcrc(im->b, 60));
}

/* Replaces the manifest with `ms` and fixes sizes and both CRCs. */
static void set_manifest(struct image *im, const char *ms)
{
    uint64_t off = rd_u64le(im->b + 40), len = strlen(ms);
    im->b = realloc(im->b, (size_t)(off + len));
    cr_assert(im->b);
    memcpy(im->b + off, ms, (size_t)len);
    im->n = (size_t)(off + len);
    wr_u64le(im->b + 16, off + len);
    wr_u64le(im->b + 48, len);
    wr_u32le(im->b + 56, zcrc(ms, (size_t)len));
    fix_header_crc(im);
}

/* Parses the manifest, lets fn edit it, writes it back (CRCs fixed). */
static void edit_manifest(struct image *im, void (*fn)(struct json_object *m))
{
    uint64_t off = rd_u64le(im->b + 40), len = rd_u64le(im->b + 48);
    char *s = strndup((const char *)im->b + off, (size_t)len);
    struct json_object *m = json_tokener_parse(s);
    cr_assert(m, "sample manifest parses");
    fn(m);
    set_manifest(im, json_object_to_json_string_ext(m, JSON_C_TO_STRING_PLAIN));
    json_object_put(m);
    free(s);
}

static struct json_object *record(struct json_object *m, size_t i)
{
    return json_object_array_get_idx(json_object_object_get(m, "tensors"), i);
}

static struct json_object *qentry(struct json_object *m)
{
    return json_object_object_get(json_object_object_get(m, "quantized"), "m");
}

/* header edits (CRC fixed unless the CRC itself is the target) */
static void m_short63(struct image *im) { im->n = 63; }
static void m_empty(struct image *im) { im->n = 0; }
static void m_magic(struct image *im) { im->b[2] = 'X'; }
static void m_magic_zip(struct image *im) { memcpy(im->b, "PK\x03\x04", 4); }
static void m_magic_crlf(struct image *im)
{
    /* a text-mode transfer turns "\r\n" into "\n": every later byte moves down */
    memmove(im->b + 4, im->b + 5, im->n - 5);
    im->n--;
}
static void m_magic_7bit(struct image *im) { im->b[0] &= 0x7f; }
static void m_hcrc(struct image *im) { im->b[20] ^= 0x01; }
static void m_hcrc_field(struct image *im) { im->b[61] ^= 0x80; }
static void m_major2(struct image *im)
{
    wr_u16le(im->b + 8, 2);
    fix_header_crc(im);
}
static void m_major0(struct image *im)
{
    wr_u16le(im->b + 8, 0);
    fix_header_crc(im);
}
static void m_align100(struct image *im)
{
    wr_u32le(im->b + 12, 100);
    fix_header_crc(im);
}
static void m_align32(struct image *im)
{
    wr_u32le(im->b + 12, 32);
    fix_header_crc(im);
}
static void m_align128k(struct image *im)
{
    wr_u32le(im->b + 12, 131072);
    fix_header_crc(im);
}
static void m_truncated(struct image *im) { im->n--; }
static void m_trailing(struct image *im)
{
    im->b = realloc(im->b, im->n + 1);
    im->b[im->n++] = 0;
}
static void m_filesize_field(struct image *im)
{
    wr_u64le(im->b + 16, rd_u64le(im->b + 16) + 64);
    fix_header_crc(im);
}
static void m_tile_data_size(struct image *im)
{
    wr_u64le(im->b + 32, rd_u64le(im->b + 32) + 64);
    fix_header_crc(im);
}
static void m_tile_manifest_offset(struct image *im)
{
    wr_u64le(im->b + 40, rd_u64le(im->b + 40) - 1);
    fix_header_crc(im);
}
static void m_tile_data_offset(struct image *im)
{
    /* 128 is aligned, but data_offset + data_size no longer reaches manifest_offset */
    wr_u64le(im->b + 24, 128);
    fix_header_crc(im);
}
static void m_tile_data_offset_small(struct image *im)
{
    wr_u64le(im->b + 24, 0);
    wr_u64le(im->b + 32, rd_u64le(im->b + 40));
    fix_header_crc(im);
}
static void m_tile_overflow(struct image *im)
{
    wr_u64le(im->b + 32, UINT64_MAX - 16);
    fix_header_crc(im);
}
static void m_mcrc(struct image *im) { im->b[im->n - 2] ^= 0x20; }

/* manifest edits */
static void m_not_json(struct image *im) { set_manifest(im, "{\"format\": \"gempack\", "); }
static void m_garbage_after(struct image *im) { set_manifest(im, "{} x"); }
static void m_not_object(struct image *im) { set_manifest(im, "[1, 2, 3]"); }
static void m_bad_utf8(struct image *im) { set_manifest(im, "{\"format\": \"gemp\xff\xfe\"}"); }
static void e_format(struct json_object *m) { json_object_object_add(m, "format", json_object_new_string("zip")); }
static void e_version(struct json_object *m)
{
    struct json_object *v = json_object_new_array();
    json_object_array_add(v, json_object_new_int(2));
    json_object_array_add(v, json_object_new_int(0));
    json_object_object_add(m, "version", v);
}
static void e_feat_fp6(struct json_object *m)
{
    json_object_array_add(json_object_object_get(m, "required_features"), json_object_new_string("quant:mxfp6"));
}
static void e_feat_foo(struct json_object *m)
{
    json_object_array_add(json_object_object_get(m, "required_features"), json_object_new_string("foo"));
}
static void e_feat_missing(struct json_object *m) { json_object_object_del(m, "required_features"); }
static void e_tensors_missing(struct json_object *m) { json_object_object_del(m, "tensors"); }
static void e_dtype(struct json_object *m)
{
    json_object_object_add(record(m, 2), "dtype", json_object_new_string("F12"));
}
static void e_dtype_lower(struct json_object *m)
{
    json_object_object_add(record(m, 0), "dtype", json_object_new_string("bf16"));
}
static void e_nbytes(struct json_object *m) { json_object_object_add(record(m, 0), "nbytes", json_object_new_int(31)); }
static void e_shape_neg(struct json_object *m)
{
    json_object_array_put_idx(json_object_object_get(record(m, 0), "shape"), 0, json_object_new_int(-3));
}
static void e_offset_unaligned(struct json_object *m)
{
    json_object_object_add(record(m, 2), "offset", json_object_new_int(65));
}
static void e_beyond(struct json_object *m)
{
    json_object_object_add(record(m, 2), "offset", json_object_new_int(64 * 100));
}
static void e_overlap(struct json_object *m) { json_object_object_add(record(m, 2), "offset", json_object_new_int(0)); }
static void e_overlap_full(struct json_object *m)
{
    /* m.scales (4 bytes at 256) moved onto m.weight (64 bytes at 192) */
    json_object_object_add(record(m, 4), "offset", json_object_new_int(192));
}
static void e_dup(struct json_object *m)
{
    json_object_object_add(record(m, 2), "name", json_object_new_string("tok.weight"));
}
static void e_name_empty(struct json_object *m)
{
    json_object_object_add(record(m, 1), "name", json_object_new_string(""));
}
static void e_crc_range(struct json_object *m)
{
    json_object_object_add(record(m, 0), "crc32", json_object_new_int64(1ll << 32));
}
static void e_q_missing(struct json_object *m)
{
    json_object_object_add(qentry(m), "scales", json_object_new_string("m.nothing"));
}
static void e_q_shape(struct json_object *m)
{
    json_object_object_add(qentry(m), "out_features", json_object_new_int(3));
}
static void e_q_group(struct json_object *m)
{
    /* group 32 would need 2 scales per row, the pack has 1 */
    json_object_object_add(qentry(m), "group_size", json_object_new_int(32));
}
static void e_q_bits(struct json_object *m) { json_object_object_add(qentry(m), "bits", json_object_new_int(7)); }
static void e_q_mode(struct json_object *m)
{
    json_object_object_add(qentry(m), "mode", json_object_new_string("int4"));
}
static void e_q_mx_biases(struct json_object *m)
{
    /* an affine triplet declared mxfp4 at 4-bit group 32: MX has no biases */
    struct json_object *q = qentry(m);
    json_object_object_add(q, "mode", json_object_new_string("mxfp4"));
    json_object_object_add(q, "group_size", json_object_new_int(32));
}
static void e_q_weight_dtype(struct json_object *m)
{
    /* m.weight declared as BF16 [2, 32] keeps 64 bytes, but codes must be U32 */
    struct json_object *r = record(m, 3), *s = json_object_new_array();
    json_object_array_add(s, json_object_new_int(2));
    json_object_array_add(s, json_object_new_int(16));
    json_object_object_add(r, "dtype", json_object_new_string("BF16"));
    json_object_object_add(r, "shape", s);
}

#define MANIFEST_EDIT(fn)                                                                                             \
    static void m_##fn(struct image *im) { edit_manifest(im, fn); }
MANIFEST_EDIT(e_format)
MANIFEST_EDIT(e_version)
MANIFEST_EDIT(e_feat_fp6)
MANIFEST_EDIT(e_feat_foo)
MANIFEST_EDIT(e_feat_missing)
MANIFEST_EDIT(e_tensors_missing)
MANIFEST_EDIT(e_dtype)
MANIFEST_EDIT(e_dtype_lower)
MANIFEST_EDIT(e_nbytes)
MANIFEST_EDIT(e_shape_neg)
MANIFEST_EDIT(e_offset_unaligned)
MANIFEST_EDIT(e_beyond)
MANIFEST_EDIT(e_overlap)
MANIFEST_EDIT(e_overlap_full)
MANIFEST_EDIT(e_dup)
MANIFEST_EDIT(e_name_empty)
MANIFEST_EDIT(e_crc_range)
MANIFEST_EDIT(e_q_missing)
MANIFEST_EDIT(e_q_shape)
MANIFEST_EDIT(e_q_group)
MANIFEST_EDIT(e_q_bits)
MANIFEST_EDIT(e_q_mode)
MANIFEST_EDIT(e_q_mx_biases)
MANIFEST_EDIT(e_q_weight_dtype)

struct corrupt_case {
    const char *name;
    void (*mutate)(struct image *);
    int code;
    const char *want;   /* substring of the message */
    const char *want2;  /* a second substring (or NULL) */
    const char *absent; /* must not appear (or NULL) */
};

static const struct corrupt_case cases[] = {
    {"63 bytes", m_short63, ERR_FORMAT, "63 bytes, too small", NULL, NULL},
    {"0 bytes", m_empty, ERR_FORMAT, "too small", NULL, NULL},
    {"bad magic", m_magic, ERR_FORMAT, "bad magic", NULL, "text-mode"},
    {"zip magic", m_magic_zip, ERR_FORMAT, "not a gempack pack", NULL, "text-mode"},
    {"CRLF -> LF", m_magic_crlf, ERR_FORMAT, "bad magic", "text-mode", NULL},
    {"7-bit mangled", m_magic_7bit, ERR_FORMAT, "bad magic", "text-mode", NULL},
    {"header CRC", m_hcrc, ERR_FORMAT, "header CRC", "damaged header", NULL},
    {"header CRC field", m_hcrc_field, ERR_FORMAT, "header CRC", NULL, NULL},
    {"major 2", m_major2, ERR_UNSUPPORTED, "version 2.0", "reads version 1", NULL},
    {"major 0", m_major0, ERR_UNSUPPORTED, "version 0.0", NULL, NULL},
    {"alignment 100", m_align100, ERR_FORMAT, "alignment 100", "power of two", NULL},
    {"alignment 32", m_align32, ERR_FORMAT, "alignment 32", NULL, NULL},
    {"alignment 128k", m_align128k, ERR_FORMAT, "alignment 131072", NULL, NULL},
    {"truncated", m_truncated, ERR_FORMAT, "header says", "truncated", NULL},
    {"trailing byte", m_trailing, ERR_FORMAT, "header says", "trailing bytes", NULL},
    {"file_size field", m_filesize_field, ERR_FORMAT, "header says", "truncated", NULL},
    {"data_size", m_tile_data_size, ERR_FORMAT, "do not tile", NULL, NULL},
    {"manifest_offset", m_tile_manifest_offset, ERR_FORMAT, "do not tile", NULL, NULL},
    {"data_offset 128", m_tile_data_offset, ERR_FORMAT, "do not tile", NULL, NULL},
    {"data_offset 0", m_tile_data_offset_small, ERR_FORMAT, "do not tile", NULL, NULL},
    {"data_size overflow", m_tile_overflow, ERR_FORMAT, "do not tile", NULL, NULL},
    {"manifest CRC", m_mcrc, ERR_FORMAT, "manifest CRC", "damaged manifest", NULL},
    {"manifest not JSON", m_not_json, ERR_FORMAT, "manifest: JSON text ends before the value is complete", NULL,
     NULL},
    {"manifest trailing garbage", m_garbage_after, ERR_FORMAT, "manifest: invalid JSON", NULL, NULL},
    {"manifest bad UTF-8", m_bad_utf8, ERR_FORMAT, "manifest", NULL, NULL},
    {"manifest array", m_not_object, ERR_FORMAT, "manifest is a JSON array", "expected an object", NULL},
    {"format", m_e_format, ERR_FORMAT, "\"format\"", NULL, NULL},
    {"manifest version", m_e_version, ERR_FORMAT, "\"version\" disagrees", NULL, NULL},
    {"feature quant:mxfp6 (a mode this gempack does not know)", m_e_feat_fp6, ERR_UNSUPPORTED,
     "feature \"quant:mxfp6\"", NULL, NULL},
    {"feature foo", m_e_feat_foo, ERR_UNSUPPORTED, "feature \"foo\"", NULL, NULL},
    {"features missing", m_e_feat_missing, ERR_FORMAT, "required_features", NULL, NULL},
    {"tensors missing", m_e_tensors_missing, ERR_FORMAT, "\"tensors\"", NULL, NULL},
    {"unknown dtype", m_e_dtype, ERR_FORMAT, "'codes'", "\"F12\" is not a known dtype", NULL},
    {"lower-case dtype", m_e_dtype_lower, ERR_FORMAT, "'tok.weight'", "not a known dtype", NULL},
    {"nbytes", m_e_nbytes, ERR_FORMAT, "'tok.weight'", "nbytes 31, but shape x BF16 needs 30", NULL},
    {"negative dim", m_e_shape_neg, ERR_FORMAT, "'tok.weight'", "shape[0]", NULL},
    {"offset unaligned", m_e_offset_unaligned, ERR_FORMAT, "'codes'", "offset 65 is not a multiple of the alignment 64",
     NULL},
    {"beyond data", m_e_beyond, ERR_FORMAT, "'codes'", "beyond the 324-byte data region", NULL},
    {"overlap", m_e_overlap, ERR_FORMAT, "'codes'", "overlaps", NULL},
    {"overlap inside", m_e_overlap_full, ERR_FORMAT, "'m.scales'", "overlaps or precedes 'm.weight'", NULL},
    {"duplicate name", m_e_dup, ERR_FORMAT, "'tok.weight' is listed twice", NULL, NULL},
    {"empty name", m_e_name_empty, ERR_FORMAT, "tensors[1].name", NULL, NULL},
    {"crc32 out of range", m_e_crc_range, ERR_FORMAT, "'tok.weight'", "crc32", NULL},
    {"quantized missing tensor", m_e_q_missing, ERR_FORMAT, "quantized[\"m\"].scales", "must name the pack's tensor m.scales",
     NULL},
    {"quantized shapes", m_e_q_shape, ERR_FORMAT, "quantized[\"m\"]", "disagree", NULL},
    {"quantized group", m_e_q_group, ERR_FORMAT, "quantized[\"m\"]", "disagree", NULL},
    {"quantized bits 7", m_e_q_bits, ERR_FORMAT, "quantized[\"m\"]", "not supported", NULL},
    {"quantized mode", m_e_q_mode, ERR_FORMAT, "quantized[\"m\"]", "needs mode", NULL},
    {"mxfp4 entry with biases", m_e_q_mx_biases, ERR_FORMAT, "quantized[\"m\"]", "mxfp4 quantization has no biases", NULL},
    {"quantized weight dtype", m_e_q_weight_dtype, ERR_FORMAT, "quantized[\"m\"]", "disagree", NULL},
};

Test(pack, corrupt_table)
{
    size_t len;
    uint8_t *valid = sample_image(64, true, &len);
    char *dir = th_mkdtemp();
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const struct corrupt_case *c = &cases[i];
        struct image im = {malloc(len + 1), len};
        cr_assert(im.b);
        memcpy(im.b, valid, len);
        c->mutate(&im);

        struct pack p;
        struct err e = {0};
        int rc = pack_open_mem(&p, im.b, im.n, "bad.gpk", &e);
        if (rc == ERR_OK && (rc = quant_check_pack(&p, &e)) != ERR_OK)
            pack_close(&p);
        cr_expect_eq(rc, c->code, "%s: code %s, expected %s (%s)", c->name, err_code_name((enum err_code)rc),
                     err_code_name((enum err_code)c->code), e.msg);
        cr_expect(strstr(e.msg, "bad.gpk"), "%s: message names the file: %s", c->name, e.msg);
        cr_expect(strstr(e.msg, c->want), "%s: '%s' not in: %s", c->name, c->want, e.msg);
        if (c->want2)
            cr_expect(strstr(e.msg, c->want2), "%s: '%s' not in: %s", c->name, c->want2, e.msg);
        if (c->absent)
            cr_expect(!strstr(e.msg, c->absent), "%s: '%s' should not be in: %s", c->name, c->absent, e.msg);
        cr_expect_null(p.manifest, "%s: reader state released", c->name);
        cr_expect_null(p.tensors, "%s: reader state released", c->name);

        /* the same image as a file */
        char *path = th_write(dir, "bad.gpk", im.b, im.n);
        struct err e2 = {0};
        rc = pack_open(&p, path, &e2);
        if (rc == ERR_OK && (rc = quant_check_pack(&p, &e2)) != ERR_OK)
            pack_close(&p);
        cr_expect_eq(rc, c->code, "%s (file): code %s (%s)", c->name, err_code_name((enum err_code)rc), e2.msg);
        cr_expect(strstr(e2.msg, c->want), "%s (file): '%s' not in: %s", c->name, c->want, e2.msg);
        cr_expect(strstr(e2.msg, path), "%s (file): message names the path: %s", c->name, e2.msg);
        if (rc == ERR_OK)
            pack_close(&p);
        unlink(path);
        free(path);
        free(im.b);
    }
    th_rmtree(dir);
    free(valid);
}

Test(pack, accepted_variations)
{
    size_t len;
    uint8_t *valid = sample_image(64, true, &len);
    struct image im = {malloc(len), len};
    memcpy(im.b, valid, len);
    /* a higher minor version is accepted (subject to required_features) */
    wr_u16le(im.b + 10, 7);
    fix_header_crc(&im);
    struct pack p;
    struct err e = {0};
    cr_assert_eq(pack_open_mem(&p, im.b, im.n, "minor.gpk", &e), ERR_OK, "%s", e.msg);
    cr_assert_eq(p.version_minor, 7);
    pack_close(&p);
    /* unknown optional manifest keys are ignored */
    memcpy(im.b, valid, len);
    set_manifest(&im, "{\"format\":\"gempack\",\"version\":[1,3],\"required_features\":[\"dtype:BF16\"],"
                      "\"future\":{\"x\":1},\"tensors\":[]}");
    cr_assert_eq(pack_open_mem(&p, im.b, im.n, "future.gpk", &e), ERR_OK, "%s", e.msg);
    cr_assert_eq(p.n_tensors, 0);
    size_t bad;
    /* the old tensor bytes are still in the data region, now outside any tensor: padding */
    cr_assert_eq(pack_verify(&p, &bad, &e), ERR_FORMAT);
    cr_assert(strstr(e.msg, "padding byte at offset 64 is not zero"), "%s", e.msg);
    pack_close(&p);
    free(im.b);
    free(valid);
}

Test(pack, open_missing_file_and_directory)
{
    struct pack p;
    struct err e = {0};
    cr_assert_eq(pack_open(&p, "/nonexistent/x.gpk", &e), ERR_IO);
    cr_assert(strstr(e.msg, "/nonexistent/x.gpk"), "%s", e.msg);
    char *dir = th_mkdtemp();
    cr_assert_eq(pack_open(&p, dir, &e), ERR_IO);
    cr_assert(strstr(e.msg, "not a regular file"), "%s", e.msg);
    th_rmtree(dir);
}

/* ------------------------------------------------------------------ flipped bytes */

enum region { R_HEADER, R_PAD_HEAD, R_TENSOR, R_GAP, R_MANIFEST };

static enum region region_of(const struct pack *p, uint64_t off, const struct pack_tensor **which)
{
    *which = NULL;
    if (off < PACK_HEADER_SIZE)
        return R_HEADER;
    if (off < p->data_offset)
        return R_PAD_HEAD;
    if (off >= p->manifest_offset)
        return R_MANIFEST;
    for (size_t i = 0; i < p->n_tensors; i++) {
        const struct pack_tensor *t = &p->tensors[i];
        if (off >= p->data_offset + t->offset && off < p->data_offset + t->offset + t->nbytes) {
            *which = t;
            return R_TENSOR;
        }
    }
    return R_GAP;
}

static void flip_check(const uint8_t *valid, size_t len, const struct pack *ref, uint64_t off, uint8_t mask,
                       int *seen)
{
    uint8_t *b = malloc(len);
    memcpy(b, valid, len);
    b[off] ^= mask;
    const struct pack_tensor *t;
    enum region r = region_of(ref, off, &t);
    seen[r]++;
    struct pack p;
    struct err e = {0};
    int rc = pack_open_mem(&p, b, len, "flip.gpk", &e);
    if (r == R_HEADER || r == R_MANIFEST) {
        cr_expect_neq(rc, ERR_OK, "flip at %llu (%s) must fail pack_open", (unsigned long long)off,
                      r == R_HEADER ? "header" : "manifest");
        if (r == R_MANIFEST)
            cr_expect(strstr(e.msg, "manifest CRC"), "flip at %llu: %s", (unsigned long long)off, e.msg);
    } else {
        cr_assert_eq(rc, ERR_OK, "flip at %llu is only visible to pack_verify: %s", (unsigned long long)off, e.msg);
        size_t bad = 0;
        rc = pack_verify(&p, &bad, &e);
        cr_expect_eq(rc, ERR_FORMAT, "flip at %llu must fail pack_verify", (unsigned long long)off);
        cr_expect_eq(bad, 1, "flip at %llu: exactly one failed check, got %zu", (unsigned long long)off, bad);
        if (r == R_TENSOR) {
            char want[160];
            snprintf(want, sizeof want, "tensor '%s'", t->name);
            cr_expect(strstr(e.msg, want), "flip at %llu: '%s' not in %s", (unsigned long long)off, want, e.msg);
        } else {
            char want[96];
            snprintf(want, sizeof want, "padding byte at offset %llu is not zero", (unsigned long long)off);
            cr_expect(strstr(e.msg, want), "flip at %llu: '%s' not in %s", (unsigned long long)off, want, e.msg);
        }
        pack_close(&p);
    }
    free(b);
}

/* Flips bytes of the quantized sample pack at alignment `align`: every header
 * byte, every 97th byte after it, and the first and last byte of every
 * tensor and of every gap (including the padding before data_offset). */
static void flip_all(uint32_t align)
{
    size_t len;
    uint8_t *valid = sample_image(align, true, &len);
    struct pack ref;
    struct err e = {0};
    cr_assert_eq(pack_open_mem(&ref, valid, len, "ref.gpk", &e), ERR_OK, "%s", e.msg);
    int seen[5] = {0};
    for (uint64_t off = 0; off < PACK_HEADER_SIZE; off++)
        flip_check(valid, len, &ref, off, 0x01, seen);
    static const uint8_t masks[] = {0x01, 0x80, 0xff};
    for (uint64_t off = PACK_HEADER_SIZE, k = 0; off < len; off += 97, k++)
        flip_check(valid, len, &ref, off, masks[k % 3], seen);
    uint64_t gap_from = PACK_HEADER_SIZE;
    for (size_t i = 0; i <= ref.n_tensors; i++) {
        uint64_t gap_to = i < ref.n_tensors ? ref.data_offset + ref.tensors[i].offset : ref.manifest_offset;
        if (gap_to > gap_from) {
            flip_check(valid, len, &ref, gap_from, 0x10, seen);
            flip_check(valid, len, &ref, gap_to - 1, 0x10, seen);
        }
        if (i == ref.n_tensors)
            break;
        const struct pack_tensor *t = &ref.tensors[i];
        if (t->nbytes) {
            flip_check(valid, len, &ref, ref.data_offset + t->offset, 0x10, seen);
            flip_check(valid, len, &ref, ref.data_offset + t->offset + t->nbytes - 1, 0x10, seen);
        }
        gap_from = ref.data_offset + t->offset + t->nbytes;
    }
    flip_check(valid, len, &ref, ref.manifest_offset, 0x10, seen);
    flip_check(valid, len, &ref, len - 1, 0x10, seen);
    cr_assert_gt(seen[R_HEADER], 0);
    if (align > PACK_HEADER_SIZE)
        cr_assert_gt(seen[R_PAD_HEAD], 0);
    cr_assert_gt(seen[R_TENSOR], 0);
    cr_assert_gt(seen[R_GAP], 0);
    cr_assert_gt(seen[R_MANIFEST], 0);
    pack_close(&ref);
    free(valid);
}

Test(pack, every_flipped_byte_is_detected_align_64) { flip_all(64); }

Test(pack, every_flipped_byte_is_detected_align_256) { flip_all(256); }

Test(pack, verify_counts_every_bad_tensor)
{
    size_t len;
    uint8_t *img = sample_image(64, true, &len);
    struct pack p;
    struct err e = {0};
    cr_assert_eq(pack_open_mem(&p, img, len, "multi.gpk", &e), ERR_OK, "%s", e.msg);
    uint64_t d = p.data_offset;
    img[d + pack_find(&p, "codes")->offset + 5] ^= 1;
    img[d + pack_find(&p, "m.biases")->offset] ^= 1;
    img[d + 40] = 7; /* padding after tok.weight */
    size_t bad = 0;
    cr_assert_eq(pack_verify(&p, &bad, &e), ERR_FORMAT);
    cr_assert_eq(bad, 3, "%zu: %s", bad, e.msg);
    cr_assert(strstr(e.msg, "3 checks failed") && strstr(e.msg, "first: tensor 'codes'"), "%s", e.msg);
    pack_close(&p);
    free(img);
}

Test(pack, features_known)
{
    cr_assert(pack_feature_known("dtype:BF16"));
    cr_assert(pack_feature_known("dtype:F16"));
    cr_assert(pack_feature_known("dtype:F32"));
    cr_assert(pack_feature_known("dtype:U32"));
    cr_assert(pack_feature_known("quant:affine"));
    cr_assert(pack_feature_known("quant:mxfp4") && pack_feature_known("quant:nvfp4") && pack_feature_known("quant:mxfp8"));
    cr_assert(pack_feature_known("files"));
    cr_assert(!pack_feature_known("quant:mxfp6"));
    cr_assert(!pack_feature_known("foo"));
    cr_assert(!pack_feature_known("dtype:"));
    cr_assert(!pack_feature_known("dtype:bf16"));
    cr_assert(!pack_feature_known("dtype:C64"));
}

/* ------------------------------------------------------------------ files */

/* Two verbatim files after the basic sample's tensors; their SHA-256 by Python's hashlib. */
#define FILE_A "tokenizer.json"
#define FILE_B "chat_template.jinja"
#define SHA_A "2ac123dcd759eebabfa1b17c0332b88b3815ef3f95fbfcceb5fac07e233235bd"
#define SHA_B "7be006453e4f48bbe301809949f90703c56ccc84f5b3e789f5938755b8b73d8e"
static const char file_b[] = "{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}";

static void file_a(uint8_t *out)
{
    for (int k = 0; k < 100; k++)
        out[k] = (uint8_t)('a' + k % 26);
}

static void write_with_files(const char *path, uint32_t align)
{
    struct pack_writer w;
    struct err e = {0};
    cr_assert_eq(pack_writer_open(&w, path, align, &e), ERR_OK, "%s", e.msg);
    for (size_t i = 0; i < N_BASIC; i++) {
        uint8_t buf[128];
        sample_bytes(i, buf);
        cr_assert_eq(pack_writer_begin(&w, samples[i].name, samples[i].dtype, samples[i].rank, samples[i].shape, &e),
                     ERR_OK, "%s", e.msg);
        cr_assert_eq(pack_writer_write(&w, buf, samples[i].nbytes, &e), ERR_OK, "%s", e.msg);
        cr_assert_eq(pack_writer_end(&w, &e), ERR_OK, "%s", e.msg);
    }
    uint8_t a[100];
    file_a(a);
    cr_assert_eq(pack_writer_add_file(&w, FILE_A, a, sizeof a, &e), ERR_OK, "%s", e.msg);
    cr_assert_eq(pack_writer_add_file(&w, FILE_B, file_b, strlen(file_b), &e), ERR_OK, "%s", e.msg);
    cr_assert_eq(pack_writer_finish(&w, json_object_new_object(), NULL, 0, &e), ERR_OK, "%s", e.msg);
}

static uint8_t *files_image(uint32_t align, size_t *len)
{
    char *dir = th_mkdtemp();
    char *path = fio_join(dir, "f.gpk");
    write_with_files(path, align);
    uint8_t *img = th_read(path, len);
    cr_assert(img);
    free(path);
    th_rmtree(dir);
    return img;
}

static bool has_feature(const struct pack *p, const char *f)
{
    struct json_object *a = json_object_object_get(p->manifest, "required_features");
    for (size_t i = 0; i < json_object_array_length(a); i++)
        if (!strcmp(json_object_get_string(json_object_array_get_idx(a, i)), f))
            return true;
    return false;
}

static void check_files(const struct pack *p)
{
    uint8_t a[100];
    file_a(a);
    cr_assert_eq(p->n_files, 2);
    const struct pack_file *fa = pack_find_file(p, FILE_A), *fb = pack_find_file(p, FILE_B);
    cr_assert(fa && fb && fa == &p->files[0] && fb == &p->files[1]);
    cr_assert_null(pack_find_file(p, "tokens.json"));
    /* after the last tensor ("codes" at 64, 77 bytes), each at the next multiple of 64 */
    cr_expect_eq(fa->offset, 192);
    cr_expect_eq(fa->nbytes, 100);
    cr_expect_eq(fb->offset, 320);
    cr_expect_eq(fb->nbytes, strlen(file_b));
    cr_expect_eq(p->data_size, 320 + strlen(file_b));
    cr_expect(!memcmp(pack_file_data(p, fa), a, 100));
    cr_expect(!memcmp(pack_file_data(p, fb), file_b, strlen(file_b)));
    cr_expect_eq(fa->crc32, zcrc(a, 100));
    cr_expect_eq(fb->crc32, zcrc(file_b, strlen(file_b)));
    struct json_object *fs = json_object_object_get(p->manifest, "files");
    cr_assert_eq(json_object_array_length(fs), 2);
    cr_expect_str_eq(json_object_get_string(json_object_object_get(json_object_array_get_idx(fs, 0), "sha256")), SHA_A);
    cr_expect_str_eq(json_object_get_string(json_object_object_get(json_object_array_get_idx(fs, 1), "sha256")), SHA_B);
    cr_expect(has_feature(p, "files"));
    size_t bad;
    struct err e = {0};
    cr_expect_eq(pack_verify(p, &bad, &e), ERR_OK, "%s", e.msg);
}

Test(pack, files_roundtrip)
{
    char *dir = th_mkdtemp();
    char *path = fio_join(dir, "f.gpk");
    write_with_files(path, 64);
    struct pack p;
    struct err e = {0};
    cr_assert_eq(pack_open(&p, path, &e), ERR_OK, "%s", e.msg);
    check_files(&p);
    cr_expect_eq(p.n_tensors, N_BASIC);
    pack_close(&p);
    /* a manifest rewrite keeps the files */
    cr_assert_eq(pack_set_field(path, "quality", json_object_new_string("x"), &e), ERR_OK, "%s", e.msg);
    cr_assert_eq(pack_open(&p, path, &e), ERR_OK, "%s", e.msg);
    check_files(&p);
    cr_expect_str_eq(json_object_get_string(json_object_object_get(p.manifest, "quality")), "x");
    pack_close(&p);
    /* a pack without files has neither the key nor the feature */
    char *plain = fio_join(dir, "plain.gpk");
    write_sample(plain, 64, false);
    cr_assert_eq(pack_open(&p, plain, &e), ERR_OK, "%s", e.msg);
    free(plain);
    cr_expect_eq(p.n_files, 0);
    cr_expect(!json_object_object_get_ex(p.manifest, "files", NULL));
    cr_expect(!has_feature(&p, "files"));
    pack_close(&p);
    free(path);
    th_rmtree(dir);
}

Test(pack, files_writer_refusals)
{
    char *dir = th_mkdtemp();
    char *path = fio_join(dir, "w.gpk");
    struct pack_writer w;
    struct err e = {0};
    char long_name[PACK_MAX_FILE_NAME + 2];
    memset(long_name, 'n', sizeof long_name - 1);
    long_name[sizeof long_name - 1] = 0;
    cr_assert_eq(pack_writer_open(&w, path, 64, &e), ERR_OK, "%s", e.msg);
    cr_assert_eq(pack_writer_begin(&w, "t", DT_U8, 1, (const uint64_t[]){3}, &e), ERR_OK, "%s", e.msg);
    cr_expect_eq(pack_writer_add_file(&w, "a", "x", 1, &e), ERR_USAGE, "a tensor still open");
    cr_expect(strstr(e.msg, "tensor 't' still open"), "%s", e.msg);
    cr_assert_eq(pack_writer_write(&w, "abc", 3, &e), ERR_OK, "%s", e.msg);
    cr_assert_eq(pack_writer_end(&w, &e), ERR_OK, "%s", e.msg);
    cr_expect_eq(pack_writer_add_file(&w, "", "x", 1, &e), ERR_USAGE, "empty name");
    cr_expect_eq(pack_writer_add_file(&w, "a/b", "x", 1, &e), ERR_USAGE, "a path");
    cr_expect(strstr(e.msg, "'a/b'"), "%s", e.msg);
    cr_expect_eq(pack_writer_add_file(&w, "..", "x", 1, &e), ERR_USAGE, "..");
    cr_expect_eq(pack_writer_add_file(&w, long_name, "x", 1, &e), ERR_USAGE, "256 bytes");
    long_name[PACK_MAX_FILE_NAME] = 0;
    cr_expect_eq(pack_writer_add_file(&w, long_name, "x", 1, &e), ERR_OK, "255 bytes: %s", e.msg);
    cr_expect_eq(pack_writer_add_file(&w, "empty", "", 0, &e), ERR_OK, "an empty file: %s", e.msg);
    cr_expect_eq(pack_writer_add_file(&w, "empty", "", 0, &e), ERR_USAGE, "twice");
    cr_expect(strstr(e.msg, "'empty' added twice"), "%s", e.msg);
    cr_expect_eq(pack_writer_begin(&w, "u", DT_U8, 1, (const uint64_t[]){3}, &e), ERR_USAGE, "a tensor after a file");
    cr_expect(strstr(e.msg, "after file 'empty'"), "%s", e.msg);
    cr_assert_eq(pack_writer_finish(&w, json_object_new_object(), NULL, 0, &e), ERR_OK, "%s", e.msg);
    struct pack p;
    cr_assert_eq(pack_open(&p, path, &e), ERR_OK, "%s", e.msg);
    cr_expect_eq(p.n_files, 2);
    cr_expect_eq(p.files[1].nbytes, 0);
    size_t bad;
    cr_expect_eq(pack_verify(&p, &bad, &e), ERR_OK, "%s", e.msg);
    pack_close(&p);
    free(path);
    th_rmtree(dir);
}

static struct json_object *frec(struct json_object *m, size_t i)
{
    return json_object_array_get_idx(json_object_object_get(m, "files"), i);
}
static void f_not_array(struct json_object *m) { json_object_object_add(m, "files", json_object_new_object()); }
static void f_not_object(struct json_object *m)
{
    json_object_array_put_idx(json_object_object_get(m, "files"), 0, json_object_new_int(1));
}
static void f_name_missing(struct json_object *m) { json_object_object_del(frec(m, 0), "name"); }
static void f_name_slash(struct json_object *m) { json_object_object_add(frec(m, 0), "name", json_object_new_string("../x")); }
static void f_name_dots(struct json_object *m) { json_object_object_add(frec(m, 0), "name", json_object_new_string("..")); }
static void f_name_empty(struct json_object *m) { json_object_object_add(frec(m, 0), "name", json_object_new_string("")); }
static void f_name_nul(struct json_object *m)
{
    json_object_object_add(frec(m, 0), "name", json_object_new_string_len("a\0b", 3));
}
static void f_name_long(struct json_object *m)
{
    char s[PACK_MAX_FILE_NAME + 2];
    memset(s, 'n', sizeof s - 1);
    s[sizeof s - 1] = 0;
    json_object_object_add(frec(m, 0), "name", json_object_new_string(s));
}
static void f_dup(struct json_object *m) { json_object_object_add(frec(m, 1), "name", json_object_new_string(FILE_A)); }
static void f_unaligned(struct json_object *m) { json_object_object_add(frec(m, 1), "offset", json_object_new_int(321)); }
static void f_beyond(struct json_object *m) { json_object_object_add(frec(m, 1), "nbytes", json_object_new_int(66)); }
static void f_on_tensor(struct json_object *m) { json_object_object_add(frec(m, 0), "offset", json_object_new_int(128)); }
static void f_overlap(struct json_object *m) { json_object_object_add(frec(m, 1), "offset", json_object_new_int(256)); }
static void f_crc(struct json_object *m) { json_object_object_add(frec(m, 0), "crc32", json_object_new_int64(1ll << 32)); }
static void f_sha(struct json_object *m) { json_object_object_add(frec(m, 0), "sha256", json_object_new_string("AB")); }
static void f_nbytes_missing(struct json_object *m) { json_object_object_del(frec(m, 1), "nbytes"); }

Test(pack, files_reader_refusals)
{
    static const struct {
        void (*fn)(struct json_object *);
        const char *want;
    } fc[] = {
        {f_not_array, "\"files\" is object, expected an array"},
        {f_not_object, "files[0] is int, expected an object"},
        {f_name_missing, "files[0].name"},
        {f_name_slash, "files[0].name: expected a string of 1 to 255 bytes without '/'"},
        {f_name_empty, "files[0].name"},
        {f_name_dots, "files[0].name"},
        {f_name_nul, "escaped NUL"},
        {f_name_long, "files[0].name"},
        {f_dup, "file 'tokenizer.json' is listed twice"},
        {f_unaligned, "file 'chat_template.jinja': offset 321 is not a multiple of the alignment 64"},
        {f_beyond, "file 'chat_template.jinja': [320, +66) reaches beyond the 385-byte data region"},
        {f_on_tensor, "file 'tokenizer.json' at 128 overlaps or precedes 'codes'"},
        {f_overlap, "file 'chat_template.jinja' at 256 overlaps or precedes 'tokenizer.json'"},
        {f_crc, "file 'tokenizer.json': offset, nbytes or crc32"},
        {f_sha, "file 'tokenizer.json': sha256 missing or not 64 lower-case hex digits"},
        {f_nbytes_missing, "file 'chat_template.jinja': offset, nbytes or crc32"},
    };
    size_t len;
    uint8_t *valid = files_image(64, &len);
    for (size_t i = 0; i < sizeof fc / sizeof fc[0]; i++) {
        struct image im = {malloc(len), len};
        memcpy(im.b, valid, len);
        edit_manifest(&im, fc[i].fn);
        struct pack p;
        struct err e = {0};
        cr_expect_eq(pack_open_mem(&p, im.b, im.n, "bad.gpk", &e), ERR_FORMAT, "case %zu: %s", i, e.msg);
        cr_expect(strstr(e.msg, fc[i].want), "case %zu: '%s' not in: %s", i, fc[i].want, e.msg);
        cr_expect_null(p.files, "case %zu: reader state released", i);
        free(im.b);
    }
    free(valid);
}

Test(pack, files_verify_catches_a_flipped_byte)
{
    size_t len;
    uint8_t *img = files_image(64, &len);
    struct pack p;
    struct err e = {0};
    cr_assert_eq(pack_open_mem(&p, img, len, "f.gpk", &e), ERR_OK, "%s", e.msg);
    uint64_t d = p.data_offset;
    const uint64_t at[] = {d + 192 + 50, d + 320 + 64, d + 300, d + 150, d + 385 - 1};
    const char *want[] = {"first: file 'tokenizer.json' stored CRC", "first: file 'chat_template.jinja'",
                          "padding byte at offset", "padding byte at offset", "first: file 'chat_template.jinja'"};
    for (size_t i = 0; i < sizeof at / sizeof at[0]; i++) {
        img[at[i]] ^= 0x10;
        size_t bad = 0;
        cr_expect_eq(pack_verify(&p, &bad, &e), ERR_FORMAT, "byte %llu", (unsigned long long)at[i]);
        cr_expect_eq(bad, 1);
        cr_expect(strstr(e.msg, want[i]), "byte %llu: '%s' not in: %s", (unsigned long long)at[i], want[i], e.msg);
        img[at[i]] ^= 0x10;
    }
    size_t bad;
    cr_expect_eq(pack_verify(&p, &bad, &e), ERR_OK, "%s", e.msg);
    pack_close(&p);
    free(img);
}
