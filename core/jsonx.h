/* jsonx.h - the few json-c conventions every reader here shares.
 *
 * json-c alone accepts things our readers must not (INPUTS.md §1.5): invalid
 * UTF-8 unless asked, integers silently saturated to UINT64_MAX, trailing
 * garbage after the first value. jsonx_parse and jsonx_u64 close those gaps. */
#ifndef GP_JSONX_H
#define GP_JSONX_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/err.h"

/* Nesting depth accepted by every reader (json-c's default is 32). */
#define JSONX_MAX_DEPTH 32
#define JSONX_MAX_VALUES 1000000 /* ~250 MB of parsed objects at most */

/* Parses exactly `len` bytes as one JSON value (strict mode, UTF-8
 * validated, leading/trailing whitespace allowed, anything else after the
 * value rejected). On success *out owns a new reference (json_object_put it).
 * On failure the message says what and at which byte; the caller prefixes
 * the file name. */
int jsonx_parse(const char *buf, size_t len, struct json_object **out, struct err *e);

/* True when a string of the (already validated) JSON text `buf` contains the
 * escape \u0000. json-c keeps such a NUL inside string values but silently
 * cuts object KEYS at it, so a key "a\u0000b" would be read as "a"
 * (INPUTS.md §1.5: names containing NUL must be rejected). */
bool jsonx_has_escaped_nul(const char *buf, size_t len);

/* A non-negative JSON integer below INT64_MAX (so never a saturated value).
 * Floats such as 16.0, negatives and booleans are rejected. */
bool jsonx_u64(struct json_object *o, uint64_t *out);

/* json-c type name for messages ("int", "string", "null", ...). */
const char *jsonx_type_name(struct json_object *o);

#endif
