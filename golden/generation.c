#include "golden/generation.h"

#include <stdio.h>
#include <string.h>

/* A piece "<unused" digits ">". */
static bool reserved_piece(const char *p, size_t len)
{
    if (!p || len < 9 || memcmp(p, "<unused", 7) || p[len - 1] != '>')
        return false;
    for (size_t i = 7; i + 1 < len; i++)
        if (p[i] < '0' || p[i] > '9')
            return false;
    return true;
}

void gen_check(const int32_t *ids, int64_t n, const struct tokenizer *t, struct gen_flags *f)
{
    *f = (struct gen_flags){.first_reserved = -1, .reserved_checked = t != NULL};
    for (int64_t i = 0; t && i < n; i++) {
        size_t len = 0;
        const char *piece = ids[i] >= 0 ? tok_piece(t, (uint32_t)ids[i], &len) : NULL;
        if (reserved_piece(piece, len) && f->n_reserved++ == 0) {
            f->first_reserved = i;
            f->reserved_id = ids[i];
        }
    }
    for (int64_t p = 1; p <= GEN_LOOP_MAX_PERIOD && p < n; p++) {
        int64_t run = 0; /* ids[i - run .. i] each equal to the one p before */
        for (int64_t i = p; i <= n; i++) {
            if (i < n && ids[i] == ids[i - p]) {
                run++;
                continue;
            }
            int64_t len = run + p, start = i - len; /* the span: the first period and the run after it */
            if (len >= GEN_LOOP_MIN_TOKENS && len >= GEN_LOOP_MIN_REPEATS * p && len > f->loop_length) {
                f->loop_start = start;
                f->loop_period = p;
                f->loop_length = len;
            }
            run = 0;
        }
    }
}

bool gen_flagged(const struct gen_flags *f)
{
    return f->n_reserved > 0 || f->loop_length > 0;
}

struct json_object *gen_flags_json(const struct gen_flags *f)
{
    struct json_object *j = json_object_new_object(), *r = NULL, *l = NULL;
    if (f->reserved_checked) {
        r = json_object_new_object();
        json_object_object_add(r, "count", json_object_new_int64(f->n_reserved));
        json_object_object_add(r, "first_position", f->n_reserved ? json_object_new_int64(f->first_reserved) : NULL);
        json_object_object_add(r, "first_id", f->n_reserved ? json_object_new_int(f->reserved_id) : NULL);
    }
    if (f->loop_length) {
        l = json_object_new_object();
        json_object_object_add(l, "start", json_object_new_int64(f->loop_start));
        json_object_object_add(l, "period", json_object_new_int64(f->loop_period));
        json_object_object_add(l, "length", json_object_new_int64(f->loop_length));
    }
    json_object_object_add(j, "reserved", r);
    json_object_object_add(j, "loop", l);
    json_object_object_add(j, "flagged", json_object_new_boolean(gen_flagged(f)));
    return j;
}

void gen_flags_text(const struct gen_flags *f, char *buf, size_t cap)
{
    int k = 0;
    if (f->n_reserved)
        k = snprintf(buf, cap, "%lld reserved <unusedN> token(s), the first id %d at generated position %lld",
                     (long long)f->n_reserved, f->reserved_id, (long long)f->first_reserved);
    if (f->loop_length && k >= 0 && (size_t)k < cap)
        snprintf(buf + k, cap - (size_t)k, "%sa repetition loop: %lld tokens from generated position %lld repeat a "
                 "span of %lld", k ? "; " : "", (long long)f->loop_length, (long long)f->loop_start,
                 (long long)f->loop_period);
    if (!gen_flagged(f))
        snprintf(buf, cap, "%s", f->reserved_checked ? "ok: no <unusedN> token, no repetition loop"
                                                     : "ok: no repetition loop (<unusedN> not checked: no tokenizer)");
}
