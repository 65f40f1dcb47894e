/* template.h - chat templates rendered exactly as HF's apply_chat_template.
 *
 * An interpreter of the Jinja2 subset the Gemma 4 templates use, with Python
 * jinja2's semantics as transformers sets it up (ImmutableSandboxedEnvironment,
 * trim_blocks, lstrip_blocks, loopcontrols; its tojson; raise_exception):
 * None, True and False printed as Python prints them, Python's int and float
 * repr, str.strip's whitespace set, dicts in insertion order, Jinja's scoping
 * (a loop iteration's `set` stays in it; `if` makes no scope), macros with
 * default and keyword arguments. A construct outside the subset is refused by
 * name at parse time; a value the subset cannot print exactly (a string repr
 * or case mapping outside the tables here, an int beyond int64) is refused at
 * render time, never printed differently.
 *
 * tmpl_load admits only the known Gemma 4 templates (by sha256, the table in
 * template.c and docs/INPUTS.md); tmpl_parse takes any source (tests, fuzz).
 * Rendering is bounded: steps, macro depth, output and memory (TMPL_MAX_*). */
#ifndef GP_TEMPLATE_H
#define GP_TEMPLATE_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>

#include "core/err.h"

#define TMPL_MAX_SOURCE (1u << 20)        /* template bytes */
#define TMPL_MAX_NEST 100                 /* parser nesting: blocks and expressions */
#define TMPL_MAX_CALL_DEPTH 200           /* macro calls in progress */
#define TMPL_MAX_STEPS 200000000ull       /* evaluated nodes in one render */
#define TMPL_MAX_OUTPUT (64u << 20)       /* bytes of one output (the render, a macro's) */
#define TMPL_MAX_MEMORY (1ull << 30)      /* bytes allocated in one render */
#define TMPL_MAX_RANGE 100000             /* items of range(), as jinja2's sandbox */

struct chat_template;

/* Parses any template source (tests, fuzzing). */
int tmpl_parse(struct chat_template **out, const char *src, size_t len, const char *name, struct err *e);
/* The known-template gate: sha256 of the source must be one of the table's rows, else refused
   naming the hash ("unknown chat template sha256 ...: not rendered; use --prompt"). */
int tmpl_load(struct chat_template **out, const char *src, size_t len, const char *name, struct err *e);
void tmpl_free(struct chat_template *t);
const char *tmpl_sha256(const struct chat_template *t); /* 64 hex */
const char *tmpl_label(const struct chat_template *t);  /* the table row's name, or NULL */

struct tmpl_vars {
    bool add_generation_prompt;
    int enable_thinking; /* -1 undefined, 0, 1 */
    const char *bos_token, *eos_token;
};

/* messages: json-c array of objects (OpenAI/HF style: role, content (string or parts), tool_calls,
   reasoning_content ...); tools: json-c array or NULL (None). The template sees messages, tools,
   documents (None), add_generation_prompt, bos_token, eos_token and, unless -1, enable_thinking, as
   transformers passes them. Output malloc'ed, NUL-terminated. */
int tmpl_render(const struct chat_template *t, struct json_object *messages, struct json_object *tools,
                const struct tmpl_vars *v, char **out, size_t *len, struct err *e);

#endif
