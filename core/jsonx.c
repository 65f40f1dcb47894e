#include "core/jsonx.h"

#include <stdbool.h>
#include <string.h>

/* Values the parser would build: one per '{', '[', ',' or ':' outside strings
 * (every value but the root follows one of them), plus the root. */
static size_t count_values(const char *buf, size_t len)
{
    size_t n = 1;
    bool str = false;
    for (size_t i = 0; i < len; i++) {
        char c = buf[i];
        if (str) {
            if (c == '\\')
                i++;
            else if (c == '"')
                str = false;
        } else if (c == '"') {
            str = true;
        } else {
            n += c == '{' || c == '[' || c == ',' || c == ':';
        }
    }
    return n;
}

int jsonx_parse(const char *buf, size_t len, struct json_object **out, struct err *e)
{
    *out = NULL;
    if (len > (size_t)INT32_MAX)
        return err_set(e, ERR_RANGE, "JSON text of %zu bytes exceeds the 2 GiB parser limit", len);
    size_t values = count_values(buf, len);
    if (values > JSONX_MAX_VALUES) /* json-c needs ~250 bytes per value: refuse before building them */
        return err_set(e, ERR_RANGE, "JSON text of %zu bytes holds about %zu values, above the limit of %d", len,
                       values, JSONX_MAX_VALUES);
    struct json_tokener *tok = json_tokener_new_ex(JSONX_MAX_DEPTH);
    if (!tok)
        return err_set(e, ERR_NOMEM, "cannot allocate a JSON tokener");
    json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
    struct json_object *o = json_tokener_parse_ex(tok, buf, (int)len);
    enum json_tokener_error jerr = json_tokener_get_error(tok);
    size_t end = json_tokener_get_parse_end(tok);
    json_tokener_free(tok);
    if (!o || jerr != json_tokener_success) {
        if (o)
            json_object_put(o);
        if (jerr == json_tokener_continue)
            return err_set(e, ERR_FORMAT, "JSON text ends before the value is complete (%zu bytes)", len);
        return err_set(e, ERR_FORMAT, "invalid JSON at byte %zu: %s", end,
                       json_tokener_error_desc(jerr));
    }
    for (size_t i = end; i < len; i++) {
        char c = buf[i];
        if (c != ' ' && c != '\t' && c != '\r' && c != '\n') {
            json_object_put(o);
            return err_set(e, ERR_FORMAT, "unexpected byte 0x%02x at offset %zu after the JSON value",
                           (unsigned)(unsigned char)c, i);
        }
    }
    *out = o;
    return ERR_OK;
}

bool jsonx_has_escaped_nul(const char *buf, size_t len)
{
    bool in_string = false;
    for (size_t i = 0; i < len; i++) {
        char c = buf[i];
        if (!in_string) {
            in_string = c == '"';
        } else if (c == '"') {
            in_string = false;
        } else if (c == '\\' && i + 1 < len) {
            if (buf[i + 1] == 'u' && i + 5 < len && memcmp(buf + i + 2, "0000", 4) == 0)
                return true;
            i++; /* skip the escaped character (the hex digits of \uXXXX are plain characters) */
        }
    }
    return false;
}

bool jsonx_u64(struct json_object *o, uint64_t *out)
{
    if (!o || json_object_get_type(o) != json_type_int)
        return false;
    if (json_object_get_int64(o) < 0)
        return false;
    uint64_t u = json_object_get_uint64(o);
    if (u >= (uint64_t)INT64_MAX)
        return false;
    *out = u;
    return true;
}

const char *jsonx_type_name(struct json_object *o)
{
    return o ? json_type_to_name(json_object_get_type(o)) : "null";
}
