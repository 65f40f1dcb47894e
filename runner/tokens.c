#include "runner/tokens.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "core/fileio.h"
#include "core/jsonx.h"
#include "core/npz.h"

int tokens_push(struct token_seqs *s, const int32_t *tok, int64_t T, struct err *e)
{
    if (s->n >= TOKENS_MAX_SEQS)
        return err_set(e, ERR_RANGE, "more than %d token sequences", TOKENS_MAX_SEQS);
    int32_t **seq = realloc(s->seq, (size_t)(s->n + 1) * sizeof *seq);
    int64_t *len = seq ? realloc(s->len, (size_t)(s->n + 1) * sizeof *len) : NULL;
    if (seq)
        s->seq = seq;
    if (len)
        s->len = len;
    if (!seq || !len || !(s->seq[s->n] = malloc((size_t)(T ? T : 1) * sizeof **s->seq)))
        return err_set(e, ERR_NOMEM, "out of memory");
    memcpy(s->seq[s->n], tok, (size_t)T * sizeof *tok);
    s->len[s->n++] = T;
    return ERR_OK;
}

static int check_id(int64_t v, const char *what, int64_t at, struct err *e)
{
    if (v < 0 || v > INT32_MAX)
        return err_set(e, ERR_RANGE, "%s: token %lld at index %lld is not an id in [0, 2^31)", what, (long long)v,
                       (long long)at);
    return ERR_OK;
}

static int json_list(struct json_object *a, const char *what, struct token_seqs *s, struct err *e)
{
    size_t n = json_object_array_length(a);
    int64_t total = (int64_t)n; /* with the sequences before: a file's ids together */
    for (int i = 0; i < s->n; i++)
        total += s->len[i];
    if (total > TOKENS_MAX)
        return err_set(e, ERR_RANGE, "%s: more than %d tokens", what, TOKENS_MAX);
    int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
    if (!ids)
        return err_set(e, ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
        struct json_object *v = json_object_array_get_idx(a, i);
        if (json_object_get_type(v) != json_type_int) {
            free(ids);
            return err_set(e, ERR_FORMAT, "%s: element %zu is %s, expected an integer token id", what, i,
                           jsonx_type_name(v));
        }
        int64_t x = json_object_get_int64(v);
        int rc = check_id(x, what, (int64_t)i, e);
        if (rc != ERR_OK) {
            free(ids);
            return rc;
        }
        ids[i] = (int32_t)x;
    }
    int rc = tokens_push(s, ids, (int64_t)n, e);
    free(ids);
    return rc;
}

static int parse_json(const uint8_t *buf, size_t len, const char *what, struct token_seqs *s, struct err *e)
{
    struct json_object *o;
    int rc = jsonx_parse((const char *)buf, len, &o, e);
    if (rc != ERR_OK)
        return err_prefix(e, "%s", what);
    struct json_object *a = o;
    if (json_object_get_type(o) == json_type_object && !json_object_object_get_ex(o, "tokens", &a))
        rc = err_set(e, ERR_FORMAT, "%s: JSON object without a \"tokens\" list", what);
    else if (json_object_get_type(a) != json_type_array)
        rc = err_set(e, ERR_FORMAT, "%s: expected a list of token ids or a list of lists", what);
    else if (json_object_array_length(a) > 0 &&
             json_object_get_type(json_object_array_get_idx(a, 0)) == json_type_array) {
        for (size_t i = 0; rc == ERR_OK && i < json_object_array_length(a); i++) {
            struct json_object *row = json_object_array_get_idx(a, i);
            rc = json_object_get_type(row) == json_type_array
                     ? json_list(row, what, s, e)
                     : err_set(e, ERR_FORMAT, "%s: batch entry %zu is not a list", what, i);
        }
    } else {
        rc = json_list(a, what, s, e);
    }
    json_object_put(o);
    return rc;
}

static int parse_npy(const uint8_t *buf, size_t len, const char *what, struct token_seqs *s, struct err *e)
{
    struct npy a;
    int rc = npy_parse(buf, len, what, &a, e);
    if (rc != ERR_OK)
        return rc;
    if ((a.dtype != DT_I32 && a.dtype != DT_I64) || a.rank < 1 || a.rank > 2 || a.count > TOKENS_MAX) {
        npy_free(&a);
        return err_set(e, ERR_FORMAT, "%s: expected int32/int64 ids of shape [T] or [B, T] (at most %d)", what,
                       TOKENS_MAX);
    }
    int64_t B = a.rank == 2 ? (int64_t)a.shape[0] : 1, T = (int64_t)a.shape[a.rank - 1];
    for (int64_t b = 0; b < B && rc == ERR_OK; b++) {
        int32_t *ids = malloc((size_t)(T ? T : 1) * sizeof *ids);
        if (!ids) {
            rc = err_set(e, ERR_NOMEM, "out of memory");
            break;
        }
        for (int64_t t = 0; t < T && rc == ERR_OK; t++) {
            int64_t v = a.dtype == DT_I32 ? ((int32_t *)a.data)[b * T + t] : ((int64_t *)a.data)[b * T + t];
            rc = check_id(v, what, b * T + t, e);
            ids[t] = (int32_t)v;
        }
        if (rc == ERR_OK)
            rc = tokens_push(s, ids, T, e);
        free(ids);
    }
    npy_free(&a);
    return rc;
}

static int parse_text(const char *p, const char *end, const char *what, bool commas, struct token_seqs *s,
                      struct err *e)
{
    int64_t n = 0, cap = 64;
    int32_t *ids = malloc((size_t)cap * sizeof *ids);
    if (!ids)
        return err_set(e, ERR_NOMEM, "out of memory");
    while (p < end) {
        while (p < end && (isspace((unsigned char)*p) || (commas && *p == ',')))
            p++;
        if (p >= end)
            break;
        if (!isdigit((unsigned char)*p)) {
            free(ids);
            return err_set(e, ERR_FORMAT, "%s: unexpected character '%c' at token %lld (expected a non-negative "
                                          "integer)",
                           what, isprint((unsigned char)*p) ? *p : '?', (long long)n);
        }
        int64_t v = 0;
        const char *d0 = p;
        while (p < end && isdigit((unsigned char)*p))
            if (v <= INT32_MAX)
                v = v * 10 + (*p++ - '0');
            else
                p++;
        if (v > INT32_MAX) {
            free(ids);
            return err_set(e, ERR_RANGE, "%s: token %.*s%s at index %lld is not an id in [0, 2^31)", what,
                           (int)(p - d0 > 40 ? 40 : p - d0), d0, p - d0 > 40 ? "..." : "", (long long)n);
        }
        if (n == cap) {
            if (cap >= TOKENS_MAX) {
                free(ids);
                return err_set(e, ERR_RANGE, "%s: more than %d tokens", what, TOKENS_MAX);
            }
            cap *= 2;
            int32_t *v2 = realloc(ids, (size_t)cap * sizeof *v2);
            if (!v2) {
                free(ids);
                return err_set(e, ERR_NOMEM, "out of memory");
            }
            ids = v2;
        }
        ids[n++] = (int32_t)v;
    }
    int rc = tokens_push(s, ids, n, e);
    free(ids);
    return rc;
}


int tokens_parse(const uint8_t *buf, size_t len, const char *what, struct token_seqs *s, struct err *e)
{
    if (len >= 6 && !memcmp(buf, "\x93NUMPY", 6))
        return parse_npy(buf, len, what, s, e);
    size_t i = 0;
    while (i < len && isspace(buf[i]))
        i++;
    if (i < len && (buf[i] == '[' || buf[i] == '{'))
        return parse_json(buf, len, what, s, e);
    return parse_text((const char *)buf, (const char *)buf + len, what, false, s, e);
}

int tokens_read_file(const char *path, struct token_seqs *s, struct err *e)
{
    char *buf;
    size_t len;
    int rc = fio_read_file(path, FIO_INPUT, TOKENS_FILE_MAX, &buf, &len, e);
    if (rc != ERR_OK)
        return rc;
    rc = tokens_parse((const uint8_t *)buf, len, path, s, e);
    free(buf);
    return rc;
}

int tokens_add_csv(struct token_seqs *s, const char *csv, const char *what, struct err *e)
{
    return parse_text(csv, csv + strlen(csv), what, true, s, e);
}

void tokens_free(struct token_seqs *s)
{
    for (int i = 0; s && i < s->n; i++)
        free(s->seq[i]);
    if (s) {
        free(s->seq);
        free(s->len);
        memset(s, 0, sizeof *s);
    }
}
