/* Fuzz harness: a tokenizer.json, or a GGUF's tokenizer.ggml.* metadata (an
 * input starting "GGUF"); when it loads, a few texts and the input itself
 * (when UTF-8) encoded and decoded back. */
#include <stdlib.h>
#include <string.h>

#include "core/gguf.h"
#include "tests/fuzz/fuzz.h"
#include "tokenizer/tokenizer.h"

static void exercise(const struct tokenizer *t, const char *text, size_t len)
{
    uint32_t *ids;
    size_t n;
    struct err e;
    if (tok_encode(t, text, len, true, &ids, &n, &e))
        return;
    char *s;
    size_t sl;
    if (!tok_decode(t, ids, n, false, &s, &sl, &e))
        free(s);
    if (!tok_decode(t, ids, n, true, &s, &sl, &e))
        free(s);
    free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct tokenizer *t = NULL;
    struct gguf_file g = {0};
    struct err e;
    if (size >= 4 && !memcmp(data, "GGUF", 4)) {
        if (!gguf_open_mem(&g, data, size, "fuzz.gguf", &e))
            tok_load_gguf(&t, &g, &e);
    } else {
        tok_load_json_mem(&t, (const char *)data, size, "fuzz.json", &e);
    }
    if (t) {
        static const char *texts[] = {"", "a", "abc ab  a", "<x> <x>y <bos>\n\n", "\xC3\xA9\xC3\xBC caf\xC3\xA9 \xF0\x9F\x98\x80",
                                      "\t \xE2\x96\x81 <0xC3>"};
        for (size_t i = 0; i < sizeof texts / sizeof *texts; i++)
            exercise(t, texts[i], strlen(texts[i]));
        exercise(t, (const char *)data, size < 4096 ? size : 4096);
        uint32_t ids[] = {0, 1, 2, 3, 4, 5, 11, 12, 11, 100000};
        for (size_t n = 0; n <= sizeof ids / sizeof *ids; n++) {
            char *s;
            size_t sl;
            if (!tok_decode(t, ids, n, false, &s, &sl, &e))
                free(s);
        }
        tok_free(t);
    }
    gguf_close(&g);
    return 0;
}
