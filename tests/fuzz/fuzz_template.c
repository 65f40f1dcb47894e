/* Fuzz harness: a chat template, optionally followed by a NUL and a JSON conversation (an array of
 * messages); when the template parses, it is rendered over that conversation and over a fixed one,
 * with and without the generation prompt and thinking. */
#include <stdlib.h>
#include <string.h>

#include "core/jsonx.h"
#include "tests/fuzz/fuzz.h"
#include "tokenizer/template.h"

static void exercise(const struct chat_template *t, struct json_object *messages, struct json_object *tools)
{
    static const struct tmpl_vars vars[] = {
        {.add_generation_prompt = false, .enable_thinking = -1, .bos_token = "<bos>", .eos_token = "<eos>"},
        {.add_generation_prompt = true, .enable_thinking = 1, .bos_token = "<bos>", .eos_token = "<eos>"},
    };
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) {
        char *out;
        size_t len;
        struct err e;
        if (!tmpl_render(t, messages, tools, &vars[i], &out, &len, &e))
            free(out);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char fixed[] =
        "[{\"role\":\"system\",\"content\":\" sys\\u00a0\"},{\"role\":\"user\",\"content\":[{\"type\":\"text\","
        "\"text\":\"hi\"},{\"type\":\"image\"}]},{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":"
        "\"c\",\"function\":{\"name\":\"f\",\"arguments\":{\"x\":1e-05,\"y\":[null,true,\"s\"],\"Z\":{}}}}]},"
        "{\"role\":\"tool\",\"content\":\"r\",\"tool_call_id\":\"c\"}]";
    static const char tools_json[] =
        "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"description\":\"d\",\"parameters\":{\"type\":"
        "\"object\",\"properties\":{\"x\":{\"type\":\"number\",\"nullable\":true}},\"required\":[\"x\"]}}}]";
    const uint8_t *nul = memchr(data, 0, size);
    size_t tlen = nul ? (size_t)(nul - data) : size;
    struct chat_template *t = NULL;
    struct err e;
    if (tmpl_parse(&t, (const char *)data, tlen, "fuzz.jinja", &e))
        return 0;
    struct json_object *m = NULL, *tools = NULL;
    if (!jsonx_parse(fixed, sizeof fixed - 1, &m, &e) && !jsonx_parse(tools_json, sizeof tools_json - 1, &tools, &e))
        exercise(t, m, tools);
    json_object_put(m);
    json_object_put(tools);
    m = NULL;
    if (nul && !jsonx_parse((const char *)nul + 1, size - tlen - 1, &m, &e)) {
        exercise(t, m, NULL);
        json_object_put(m);
    }
    tmpl_free(t);
    return 0;
}
