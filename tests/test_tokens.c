/* test_tokens.c - runner/tokens: token ids from --tokens ("2,17,99") and
 * from files (a JSON list, {"tokens": [...]}, a JSON list of lists, an .npy
 * of int32/int64 [T] or [B, T], whitespace-separated integers). Each form is
 * read into the right sequences; ids that are negative, not integers or
 * beyond int32 are refused with a message naming the input and the place. */
#include <criterion/criterion.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/npz.h"
#include "runner/tokens.h"
#include "tests/helpers.h"

/* Sequence i of s is exactly want[0, n). */
static void expect_seq(const struct token_seqs *s, int i, const int32_t *want, int64_t n, const char *what)
{
    cr_assert_lt(i, s->n, "%s: %d sequences, no sequence %d", what, s->n, i);
    cr_assert_eq(s->len[i], n, "%s: sequence %d has %lld ids, expected %lld", what, i, (long long)s->len[i],
                 (long long)n);
    for (int64_t t = 0; t < n; t++)
        cr_expect_eq(s->seq[i][t], want[t], "%s: sequence %d, id %lld", what, i, (long long)t);
}

static int parse_str(const char *text, struct token_seqs *s, struct err *e)
{
    return tokens_parse((const uint8_t *)text, strlen(text), "input", s, e);
}

Test(tokens, csv)
{
    struct token_seqs s = {0};
    struct err e = {0};
    cr_assert_eq(tokens_add_csv(&s, "2,17,99", "--tokens", &e), ERR_OK, "%s", e.msg);
    cr_assert_eq(tokens_add_csv(&s, " 5 , 6,,2147483647 ", "--tokens", &e), ERR_OK, "%s", e.msg);
    cr_assert_eq(s.n, 2, "each call appends one sequence");
    expect_seq(&s, 0, (const int32_t[]){2, 17, 99}, 3, "2,17,99");
    expect_seq(&s, 1, (const int32_t[]){5, 6, 2147483647}, 3, "spaces and empty fields");
    tokens_free(&s);
    cr_expect_eq(s.n, 0);
    cr_expect_null(s.seq);
    cr_expect_null(s.len);
    tokens_free(&s); /* twice: nothing left to free */
}

/* tokens_push appends a copy (the caller's array may change after), and
 * refuses the sequence past TOKENS_MAX_SEQS as the parsers do. */
Test(tokens, push)
{
    struct token_seqs s = {0};
    struct err e = {0};
    int32_t ids[3] = {2, 17, 99};
    cr_assert_eq(tokens_push(&s, ids, 3, &e), ERR_OK, "%s", e.msg);
    ids[1] = 5;
    cr_assert_eq(tokens_push(&s, ids, 0, &e), ERR_OK, "%s", e.msg);
    expect_seq(&s, 0, (const int32_t[]){2, 17, 99}, 3, "a copy");
    expect_seq(&s, 1, ids, 0, "an empty sequence");
    while (s.n < TOKENS_MAX_SEQS)
        cr_assert_eq(tokens_push(&s, ids, 1, &e), ERR_OK, "%s", e.msg);
    cr_expect_eq(tokens_push(&s, ids, 1, &e), ERR_RANGE);
    cr_expect(strstr(e.msg, "more than 4096 token sequences"), "%s", e.msg);
    cr_expect_eq(s.n, TOKENS_MAX_SEQS);
    tokens_free(&s);
}

/* Inputs a parser must refuse: through tokens_add_csv (--tokens) or
 * tokens_parse (a file's bytes), the code and a phrase of the message. */
static const struct refusal {
    bool csv;
    const char *text;
    int code;
    const char *says;
} refusals[] = {
    {true, "2,-1", ERR_FORMAT, "'-'"},
    {true, "2,x,3", ERR_FORMAT, "'x'"},
    {true, "1.5", ERR_FORMAT, "'.'"},
    {true, "2;3", ERR_FORMAT, "';'"},
    {true, "7,2147483648", ERR_RANGE, "2147483648 at index 1"},
    {true, "99999999999999999999999", ERR_RANGE, "not an id"},
    {false, "{\"ids\": [1, 2]}", ERR_FORMAT, "\"tokens\""},
    {false, "{\"tokens\": 3}", ERR_FORMAT, "expected a list"},
    {false, "[1, 2.5]", ERR_FORMAT, "element 1"},
    {false, "[1, \"2\"]", ERR_FORMAT, "element 1"},
    {false, "[true]", ERR_FORMAT, "element 0"},
    {false, "[1, -3]", ERR_RANGE, "-3 at index 1"},
    {false, "[4294967296]", ERR_RANGE, "not an id"},
    {false, "[[1, 2], 3]", ERR_FORMAT, "batch entry 1"},
    {false, "[[1], [2, -1]]", ERR_RANGE, "-1 at index 1"},
    {false, "[1, 2", ERR_FORMAT, "JSON"},
    {false, "[1, 2] x", ERR_FORMAT, "JSON"},
};

/* Each refusal of the kind (csv or not) is refused with its code and a
 * message naming the input and saying what is wrong. csv: after one good
 * sequence, which stays the only one. */
static void expect_refusals(bool csv)
{
    const char *name = csv ? "--tokens" : "input";
    int cases = 0;
    for (size_t i = 0; i < sizeof refusals / sizeof refusals[0]; i++) {
        const struct refusal *r = &refusals[i];
        if (r->csv != csv)
            continue;
        struct token_seqs s = {0};
        struct err e = {0};
        if (csv)
            cr_assert_eq(tokens_add_csv(&s, "1", "--tokens", &e), ERR_OK);
        int rc = csv ? tokens_add_csv(&s, r->text, "--tokens", &e) : parse_str(r->text, &s, &e);
        cr_expect_eq(rc, r->code, "%s '%s': accepted or wrong code: %s", name, r->text, e.msg);
        cr_expect(strstr(e.msg, name) && strstr(e.msg, r->says), "%s '%s': message '%s' should say '%s'", name,
                  r->text, e.msg, r->says);
        if (csv)
            cr_expect_eq(s.n, 1, "'%s': a refused --tokens adds no sequence", r->text);
        tokens_free(&s); /* a batch refused half-way keeps nothing the caller cannot free */
        cases++;
    }
    cr_assert_gt(cases, 5);
}

Test(tokens, csv_rejects) { expect_refusals(true); }

Test(tokens, json_forms)
{
    static const int32_t abc[] = {2, 17, 99};
    static const char *const single[] = {"[2, 17, 99]", "  \n[2,17,99]\n", "{\"tokens\": [2, 17, 99]}",
                                         "{\"other\": 1, \"tokens\": [2, 17, 99]}"};
    for (size_t i = 0; i < sizeof single / sizeof single[0]; i++) {
        struct token_seqs s = {0};
        struct err e = {0};
        cr_assert_eq(parse_str(single[i], &s, &e), ERR_OK, "%s: %s", single[i], e.msg);
        cr_expect_eq(s.n, 1, "%s", single[i]);
        expect_seq(&s, 0, abc, 3, single[i]);
        tokens_free(&s);
    }
    /* a batch: a list of lists, of different lengths */
    struct token_seqs s = {0};
    struct err e = {0};
    cr_assert_eq(parse_str("[[2, 17, 99], [5], [0, 2147483647]]", &s, &e), ERR_OK, "%s", e.msg);
    cr_assert_eq(s.n, 3);
    expect_seq(&s, 0, abc, 3, "batch");
    expect_seq(&s, 1, (const int32_t[]){5}, 1, "batch");
    expect_seq(&s, 2, (const int32_t[]){0, 2147483647}, 2, "batch");
    tokens_free(&s);
}

Test(tokens, json_rejects) { expect_refusals(false); }

Test(tokens, whitespace_text)
{
    struct token_seqs s = {0};
    struct err e = {0};
    cr_assert_eq(parse_str("2 17\n99\t5\r\n  0\n", &s, &e), ERR_OK, "%s", e.msg);
    cr_assert_eq(s.n, 1, "whitespace-separated ids are one sequence");
    expect_seq(&s, 0, (const int32_t[]){2, 17, 99, 5, 0}, 5, "text");
    tokens_free(&s);
    /* commas belong to --tokens only */
    cr_expect_eq(parse_str("2,17", &s, &e), ERR_FORMAT);
    cr_expect(strstr(e.msg, "input") && strstr(e.msg, "','"), "%s", e.msg);
    tokens_free(&s);
    cr_expect_eq(parse_str("2 -17", &s, &e), ERR_FORMAT);
    tokens_free(&s);
}

/* An .npy image of an array of `dt` with the given shape (npy_encode). malloc'ed. */
static uint8_t *npy(enum dtype dt, const uint64_t *shape, int rank, const void *data, size_t *len)
{
    uint8_t *buf;
    struct err e = {0};
    cr_assert_eq(npy_encode(dt, shape, rank, data, &buf, len, &e), ERR_OK, "%s", e.msg);
    return buf;
}

Test(tokens, npy_forms)
{
    struct token_seqs s = {0};
    struct err e = {0};
    size_t n;
    static const int32_t i32[] = {2, 17, 99};
    uint8_t *b = npy(DT_I32, (const uint64_t[]){3}, 1, i32, &n);
    cr_assert_eq(tokens_parse(b, n, "a.npy", &s, &e), ERR_OK, "%s", e.msg);
    free(b);
    cr_assert_eq(s.n, 1);
    expect_seq(&s, 0, i32, 3, "int32 [3]");
    tokens_free(&s);

    static const int64_t i64[] = {2, 17, 99, 5, 0, 2147483647};
    b = npy(DT_I64, (const uint64_t[]){2, 3}, 2, i64, &n);
    cr_assert_eq(tokens_parse(b, n, "b.npy", &s, &e), ERR_OK, "%s", e.msg);
    free(b);
    cr_assert_eq(s.n, 2, "[B, T] is a batch of B sequences");
    expect_seq(&s, 0, (const int32_t[]){2, 17, 99}, 3, "int64 [2, 3] row 0");
    expect_seq(&s, 1, (const int32_t[]){5, 0, 2147483647}, 3, "int64 [2, 3] row 1");
    tokens_free(&s);
}

Test(tokens, npy_rejects)
{
    struct token_seqs s = {0};
    struct err e = {0};
    size_t n;
    static const float f32[] = {2.0f, 17.0f};
    uint8_t *b = npy(DT_F32, (const uint64_t[]){2}, 1, f32, &n);
    cr_expect_eq(tokens_parse(b, n, "f.npy", &s, &e), ERR_FORMAT, "float ids accepted");
    cr_expect(strstr(e.msg, "f.npy") && strstr(e.msg, "int32/int64"), "%s", e.msg);
    free(b);
    tokens_free(&s);

    static const int32_t cube[8] = {0};
    b = npy(DT_I32, (const uint64_t[]){2, 2, 2}, 3, cube, &n);
    cr_expect_eq(tokens_parse(b, n, "c.npy", &s, &e), ERR_FORMAT, "a rank-3 array accepted");
    free(b);
    tokens_free(&s);

    static const int64_t neg[] = {1, -2, 3}, big[] = {1, 2, 2147483648LL};
    b = npy(DT_I64, (const uint64_t[]){3}, 1, neg, &n);
    cr_expect_eq(tokens_parse(b, n, "n.npy", &s, &e), ERR_RANGE, "a negative id accepted");
    cr_expect(strstr(e.msg, "n.npy") && strstr(e.msg, "-2 at index 1"), "%s", e.msg);
    free(b);
    tokens_free(&s);
    b = npy(DT_I64, (const uint64_t[]){3}, 1, big, &n);
    cr_expect_eq(tokens_parse(b, n, "g.npy", &s, &e), ERR_RANGE, "an id beyond int32 accepted");
    free(b);
    tokens_free(&s);
}

/* tokens_read_file: the file's form decides the parser; messages name the file. */
Test(tokens, read_file)
{
    char *tmp = th_mkdtemp();
    struct token_seqs s = {0};
    struct err e = {0};
    static const char json[] = "{\"tokens\": [[3, 1], [4]]}", text[] = "3 1 4\n", bad[] = "[3, 1.5]";
    char *pj = th_write(tmp, "t.json", json, strlen(json));
    char *pt = th_write(tmp, "t.txt", text, strlen(text));
    char *pb = th_write(tmp, "bad.json", bad, strlen(bad));
    cr_assert_eq(tokens_read_file(pj, &s, &e), ERR_OK, "%s", e.msg);
    cr_assert_eq(s.n, 2);
    expect_seq(&s, 0, (const int32_t[]){3, 1}, 2, pj);
    expect_seq(&s, 1, (const int32_t[]){4}, 1, pj);
    tokens_free(&s);
    cr_assert_eq(tokens_read_file(pt, &s, &e), ERR_OK, "%s", e.msg);
    expect_seq(&s, 0, (const int32_t[]){3, 1, 4}, 3, pt);
    tokens_free(&s);
    cr_expect_eq(tokens_read_file(pb, &s, &e), ERR_FORMAT);
    cr_expect(strstr(e.msg, pb), "the message names the file: %s", e.msg);
    tokens_free(&s);
    char *missing = th_write(tmp, "x", "", 0);
    unlink(missing);
    cr_expect_neq(tokens_read_file(missing, &s, &e), ERR_OK, "a missing file read");
    cr_expect_eq(s.n, 0);
    tokens_free(&s);
    free(pj);
    free(pt);
    free(pb);
    free(missing);
    th_rmtree(tmp);
}
