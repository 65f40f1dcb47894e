/* test_checkpoint.c - checkpoint directories (INPUTS.md §5): a single
 * model.safetensors, or shards listed by model.safetensors.index.json, with
 * the loader rules 1-6 of §5 checked one by one. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/checkpoint.h"
#include "core/err.h"
#include "core/safetensors.h"
#include "tests/helpers.h"

#define SHARD1 "model-00001-of-00002.safetensors"
#define SHARD2 "model-00002-of-00002.safetensors"
#define INDEX "model.safetensors.index.json"

/* Shard 1: a U8[4] (4 bytes) + b F32[2] (8 bytes); shard 2: c BF16[3] (6 bytes). */
#define HDR1 "{\"__metadata__\":{\"format\":\"pt\"}," \
             "\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}," \
             "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}"
#define HDR2 "{\"c\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[0,6]}}"
/* Shard 2 that also carries 'a' (the same tensor in two shards). */
#define HDR2_DUP "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}," \
                 "\"c\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[4,10]}}"
#define TOTAL 18 /* 4 + 8 + 6 */

static size_t write_st(const char *dir, const char *name, const char *hdr, size_t data_len)
{
    size_t len;
    uint8_t *buf = th_safetensors(hdr, data_len, &len);
    free(th_write(dir, name, buf, len));
    free(buf);
    return 8 + strlen(hdr);
}

static size_t write_text(const char *dir, const char *name, const char *text)
{
    free(th_write(dir, name, text, strlen(text)));
    return strlen(text);
}

static const char good_index[] = "{\"metadata\":{\"total_size\":18},\"weight_map\":{"
                                 "\"a\":\"" SHARD1 "\",\"b\":\"" SHARD1 "\",\"c\":\"" SHARD2 "\"}}";

static void write_two_shards(const char *dir)
{
    write_st(dir, SHARD1, HDR1, 12);
    write_st(dir, SHARD2, HDR2, 6);
}

/* ------------------------------------------------------------------ single */

Test(checkpoint, ckpt_single_file)
{
    char *dir = th_mkdtemp();
    size_t hdr_bytes = write_st(dir, "model.safetensors", HDR1, 12);
    const unsigned flags[2] = {0, ST_HEADER_ONLY};
    for (int m = 0; m < 2; m++) {
        struct ckpt c;
        struct err e = {0};
        cr_assert_eq(ckpt_open(&c, dir, flags[m], &e), ERR_OK, "%s", e.msg);
        cr_assert_not(c.indexed);
        cr_assert_eq(c.n_shards, 1);
        cr_assert_str_eq(c.shard_names[0], "model.safetensors");
        cr_assert_eq(c.n_tensors, 2, "__metadata__ is not a tensor");
        cr_assert_eq(c.n_warnings, 0);
        cr_assert_eq(c.bytes_read, hdr_bytes, "8 + N of the one file");
        const struct ckpt_tensor *t = ckpt_find(&c, "b");
        cr_assert_not_null(t);
        cr_assert_str_eq(t->name, "b");
        cr_assert_eq(t->shard, 0);
        cr_assert_eq(t->t->dtype, DT_F32);
        cr_assert_eq(t->t->begin, 4);
        cr_assert_eq(t->t->end, 12);
        cr_assert_null(ckpt_find(&c, "c"));
        cr_assert_str_eq(st_meta_get(&c.shards[0], "format"), "pt");
        if (flags[m] == 0) {
            const uint8_t *p;
            cr_assert_eq(st_data(&c.shards[t->shard], t->t, &p, &e), ERR_OK, "%s", e.msg);
            cr_assert_eq(p[0], 4, "data byte 4 (th_safetensors fills i & 0xff)");
        }
        ckpt_close(&c);
        ckpt_close(&c); /* twice is safe */
    }
    th_rmtree(dir);
}

Test(checkpoint, ckpt_single_file_invalid_shard)
{
    char *dir = th_mkdtemp();
    write_st(dir, "model.safetensors", HDR1, 11); /* one byte short */
    struct ckpt c;
    struct err e = {0};
    cr_assert_eq(ckpt_open(&c, dir, 0, &e), ERR_FORMAT);
    cr_assert(strstr(e.msg, "model.safetensors"), "%s", e.msg);
    cr_assert(strstr(e.msg, "truncated"), "%s", e.msg);
    cr_assert_eq(c.n_shards, 0, "a failed open leaves the struct closed");
    ckpt_close(&c);
    th_rmtree(dir);
}

Test(checkpoint, ckpt_nothing_there)
{
    char *dir = th_mkdtemp();
    write_text(dir, "config.json", "{}");
    write_text(dir, "model-00001-of-00001.safetensors.bak", "x");
    struct ckpt c;
    struct err e = {0};
    cr_assert_eq(ckpt_open(&c, dir, 0, &e), ERR_IO);
    cr_assert(strstr(e.msg, "model.safetensors.index.json"), "%s", e.msg);
    cr_assert(strstr(e.msg, "model.safetensors"), "%s", e.msg);
    cr_assert(strstr(e.msg, "neither"), "%s", e.msg);
    cr_assert(strstr(e.msg, dir), "names the directory: %s", e.msg);
    ckpt_close(&c);

    /* A directory that does not exist at all. */
    char missing[4200];
    snprintf(missing, sizeof missing, "%s/no-such-dir", dir);
    cr_assert_eq(ckpt_open(&c, missing, 0, &e), ERR_IO);
    cr_assert(strstr(e.msg, "no-such-dir"), "%s", e.msg);
    ckpt_close(&c);
    th_rmtree(dir);
}

/* ----------------------------------------------------------------- sharded */

Test(checkpoint, ckpt_sharded)
{
    char *dir = th_mkdtemp();
    size_t h1 = write_st(dir, SHARD1, HDR1, 12);
    size_t h2 = write_st(dir, SHARD2, HDR2, 6);
    size_t hi = write_text(dir, INDEX, good_index);
    /* Rule 1: with an index, a stray (even broken) model.safetensors is not read. */
    write_text(dir, "model.safetensors", "garbage");

    struct ckpt c;
    struct err e = {0};
    cr_assert_eq(ckpt_open(&c, dir, 0, &e), ERR_OK, "%s", e.msg);
    cr_assert(c.indexed);
    cr_assert_eq(c.n_shards, 2);
    cr_assert_eq(c.n_tensors, 3);
    cr_assert_eq(c.n_warnings, 0, "total_size 18 is right: %s", c.n_warnings ? c.warnings[0] : "");
    cr_assert_eq(c.bytes_read, hi + h1 + h2, "index + 8+N of each shard");
    cr_assert_str_eq(c.tensors[0].name, "a", "sorted by name");
    cr_assert_str_eq(c.tensors[1].name, "b");
    cr_assert_str_eq(c.tensors[2].name, "c");

    const struct ckpt_tensor *a = ckpt_find(&c, "a"), *cc = ckpt_find(&c, "c");
    cr_assert(a && cc);
    cr_assert_str_eq(c.shard_names[a->shard], SHARD1);
    cr_assert_str_eq(c.shard_names[cc->shard], SHARD2);
    cr_assert_eq(cc->t->dtype, DT_BF16);
    cr_assert_eq(cc->t->shape[0], 3);
    const uint8_t *p;
    cr_assert_eq(st_data(&c.shards[cc->shard], cc->t, &p, &e), ERR_OK, "%s", e.msg);
    cr_assert_eq(p[0], 0);
    cr_assert_eq(p[5], 5);
    cr_assert_null(ckpt_find(&c, "d"));
    ckpt_close(&c);

    /* Header-only over the same directory. */
    cr_assert_eq(ckpt_open(&c, dir, ST_HEADER_ONLY, &e), ERR_OK, "%s", e.msg);
    cr_assert_eq(c.n_tensors, 3);
    cr_assert_null(c.shards[0].map);
    ckpt_close(&c);
    th_rmtree(dir);
}

Test(checkpoint, ckpt_shard_opened_once)
{
    /* Many tensors in one shard: the shard is opened once (rule 3). */
    char *dir = th_mkdtemp();
    write_two_shards(dir);
    write_text(dir, INDEX, good_index);
    struct ckpt c;
    struct err e = {0};
    cr_assert_eq(ckpt_open(&c, dir, 0, &e), ERR_OK, "%s", e.msg);
    cr_assert_eq(c.n_shards, 2, "two distinct shard names, two shards");
    ckpt_close(&c);
    th_rmtree(dir);
}

Test(checkpoint, ckpt_total_size_advisory)
{
    char *dir = th_mkdtemp();
    write_two_shards(dir);
    write_text(dir, INDEX,
               "{\"metadata\":{\"total_size\":4096},\"weight_map\":{"
               "\"a\":\"" SHARD1 "\",\"b\":\"" SHARD1 "\",\"c\":\"" SHARD2 "\"}}");
    struct ckpt c;
    struct err e = {0};
    cr_assert_eq(ckpt_open(&c, dir, 0, &e), ERR_OK, "a total_size mismatch is not an error: %s", e.msg);
    cr_assert_eq(c.n_warnings, 1);
    cr_assert(strstr(c.warnings[0], "total_size"), "%s", c.warnings[0]);
    cr_assert(strstr(c.warnings[0], "4096"), "%s", c.warnings[0]);
    cr_assert(strstr(c.warnings[0], "18"), "names the real size: %s", c.warnings[0]);
    cr_assert_eq(c.n_tensors, 3);
    ckpt_close(&c);

    /* No metadata at all: fine, no warning. */
    write_text(dir, INDEX, "{\"weight_map\":{\"a\":\"" SHARD1 "\",\"b\":\"" SHARD1 "\",\"c\":\"" SHARD2 "\"}}");
    cr_assert_eq(ckpt_open(&c, dir, 0, &e), ERR_OK, "%s", e.msg);
    cr_assert_eq(c.n_warnings, 0);
    ckpt_close(&c);
    th_rmtree(dir);
}

/* ------------------------------------------------------------- rejections */

struct bad_index {
    const char *what;
    const char *index;      /* index text */
    const char *hdr2;       /* header of shard 2 (HDR2 unless given) */
    bool subdir_shard;      /* also create sub/SHARD2 */
    int code;
    const char *sub1, *sub2, *sub3;
};

#define WM(body) "{\"metadata\":{\"total_size\":18},\"weight_map\":{" body "}}"
#define E_A "\"a\":\"" SHARD1 "\""
#define E_B "\"b\":\"" SHARD1 "\""
#define E_C "\"c\":\"" SHARD2 "\""

static const struct bad_index bad[] = {
    {"missing shard file", WM(E_A "," E_B "," E_C ",\"d\":\"model-00003-of-00003.safetensors\""), NULL, false,
     ERR_IO, "model-00003-of-00003.safetensors", "cannot open", NULL},
    {"weight_map names a tensor absent from its shard", WM(E_A "," E_B "," E_C ",\"d\":\"" SHARD2 "\""), NULL,
     false, ERR_FORMAT, "'d'", SHARD2, "no such tensor"},
    {"a shard tensor absent from the weight_map", WM(E_A "," E_C), NULL, false, ERR_FORMAT, "'b'", SHARD1,
     "not in the weight_map"},
    {"index places a tensor in the wrong shard", WM("\"a\":\"" SHARD2 "\"," E_B "," E_C), NULL, false, ERR_FORMAT,
     "'a'", "places it in " SHARD2, NULL},
    {"the same tensor in two shards", WM(E_A "," E_B "," E_C), HDR2_DUP, false, ERR_FORMAT, "'a'", "two shards",
     SHARD2},
    {"non-string weight_map value", WM(E_A "," E_B ",\"c\":2"), NULL, false, ERR_FORMAT, "weight_map[\"c\"]", "int",
     NULL},
    {"null weight_map value", WM(E_A "," E_B ",\"c\":null"), NULL, false, ERR_FORMAT, "weight_map[\"c\"]", "null",
     NULL},
    {"shard name with /", WM(E_A "," E_B ",\"c\":\"sub/" SHARD2 "\""), NULL, true, ERR_FORMAT, "sub/" SHARD2,
     "not a plain file name", NULL},
    {"shard name ..", WM(E_A "," E_B ",\"c\":\"..\""), NULL, false, ERR_FORMAT, "\"..\"", "not a plain file name",
     NULL},
    {"shard name ../x", WM(E_A "," E_B ",\"c\":\"../" SHARD2 "\""), NULL, false, ERR_FORMAT, "../" SHARD2,
     "not a plain file name", NULL},
    {"absolute shard name", WM(E_A "," E_B ",\"c\":\"/etc/passwd\""), NULL, false, ERR_FORMAT, "/etc/passwd",
     "not a plain file name", NULL},
    {"empty shard name", WM(E_A "," E_B ",\"c\":\"\""), NULL, false, ERR_FORMAT, "weight_map[\"c\"]",
     "not a plain file name", NULL},
    {"shard name with an escaped NUL", WM(E_A "," E_B ",\"c\":\"" SHARD2 "\\u0000.x\""), NULL, false, ERR_FORMAT,
     INDEX, "escaped NUL", NULL},
    {"tensor name with an escaped NUL", WM(E_A "," E_B ",\"c\\u0000d\":\"" SHARD2 "\""), NULL, false, ERR_FORMAT,
     INDEX, "escaped NUL", NULL},
    {"index not JSON", "weight_map = {}", NULL, false, ERR_FORMAT, INDEX, "JSON", NULL},
    {"index truncated JSON", "{\"weight_map\":{\"a\":", NULL, false, ERR_FORMAT, INDEX, "JSON", NULL},
    {"index without weight_map", "{\"metadata\":{\"total_size\":18}}", NULL, false, ERR_FORMAT, INDEX, "weight_map",
     NULL},
    {"weight_map is an array", "{\"weight_map\":[\"" SHARD1 "\"]}", NULL, false, ERR_FORMAT, INDEX, "weight_map",
     NULL},
    {"a listed shard is itself invalid", WM(E_A "," E_B "," E_C),
     "{\"c\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[0,8]}}", false, ERR_FORMAT, SHARD2, "'c'", NULL},
};
#define N_BAD (sizeof bad / sizeof bad[0])

ParameterizedTestParameters(checkpoint, ckpt_rejects)
{
    static int idx[N_BAD];
    for (size_t i = 0; i < N_BAD; i++)
        idx[i] = (int)i;
    return cr_make_param_array(int, idx, N_BAD);
}

ParameterizedTest(int *i, checkpoint, ckpt_rejects)
{
    const struct bad_index *b = &bad[*i];
    char *dir = th_mkdtemp();
    write_st(dir, SHARD1, HDR1, 12);
    const char *h2 = b->hdr2 ? b->hdr2 : HDR2;
    size_t d2 = b->hdr2 == NULL ? 6 : (strstr(h2, "[4,10]") ? 10 : 6);
    write_st(dir, SHARD2, h2, d2);
    if (b->subdir_shard) {
        char *sub = malloc(strlen(dir) + 8);
        sprintf(sub, "%s/sub", dir);
        cr_assert_eq(mkdir(sub, 0755), 0);
        write_st(sub, SHARD2, HDR2, 6);
        free(sub);
    }
    write_text(dir, INDEX, b->index);

    const unsigned flags[2] = {0, ST_HEADER_ONLY};
    for (int m = 0; m < 2; m++) {
        struct ckpt c;
        struct err e = {0};
        int rc = ckpt_open(&c, dir, flags[m], &e);
        cr_assert_eq(rc, b->code, "[%s] flags %u: code %d (%s), expected %d; message: %s", b->what, flags[m], rc,
                     err_code_name((enum err_code)rc), b->code, e.msg);
        cr_assert(strstr(e.msg, b->sub1), "[%s] message lacks \"%s\": %s", b->what, b->sub1, e.msg);
        if (b->sub2)
            cr_assert(strstr(e.msg, b->sub2), "[%s] message lacks \"%s\": %s", b->what, b->sub2, e.msg);
        if (b->sub3)
            cr_assert(strstr(e.msg, b->sub3), "[%s] message lacks \"%s\": %s", b->what, b->sub3, e.msg);
        cr_assert_eq(c.n_shards, 0, "[%s] a failed open leaves the struct closed", b->what);
        cr_assert_null(c.tensors);
        ckpt_close(&c);
    }
    th_rmtree(dir);
}

Test(checkpoint, ckpt_two_shards_message_names_both)
{
    /* The duplicate is reported as such, naming both shards, whichever shard
     * the index points at. */
    static const char *const owners[2] = {SHARD1, SHARD2};
    for (int k = 0; k < 2; k++) {
        char *dir = th_mkdtemp();
        write_st(dir, SHARD1, HDR1, 12);
        write_st(dir, SHARD2, HDR2_DUP, 10);
        char index[512];
        snprintf(index, sizeof index, "{\"weight_map\":{\"a\":\"%s\"," E_B "," E_C "}}", owners[k]);
        write_text(dir, INDEX, index);
        struct ckpt c;
        struct err e = {0};
        cr_assert_eq(ckpt_open(&c, dir, 0, &e), ERR_FORMAT, "index owner %s", owners[k]);
        cr_assert(strstr(e.msg, "two shards"), "%s", e.msg);
        cr_assert(strstr(e.msg, SHARD1), "%s", e.msg);
        cr_assert(strstr(e.msg, SHARD2), "%s", e.msg);
        cr_assert(strstr(e.msg, "'a'"), "%s", e.msg);
        ckpt_close(&c);
        th_rmtree(dir);
    }
}
