#include "model/gguf_names.h"

#include <stdio.h>
#include <string.h>

#include "model/layout.h"

/* `name` in llama.cpp's column (gguf) or the text model's of tensor_table →
 * the other column; a layer row's name has "blk.N." in one, "layers.N." in
 * the other. The tied head is no row: llama.cpp's output.weight. */
static bool map(const char *name, bool gguf, char *out, size_t len)
{
    static const char *const head[2] = {"lm_head.weight", "output.weight"};
    const char *pre = gguf ? "blk." : "layers.", *to_pre = gguf ? "layers." : "blk.", *rest = name;
    char text[LAYOUT_NAME_MAX];
    int layer = -1, n = 0;
    size_t pl = strlen(pre);
    if (!strcmp(name, head[gguf]))
        return snprintf(out, len, "%s", head[!gguf]) < (int)len;
    if (!strncmp(name, pre, pl) && name[pl] >= '0' && name[pl] <= '9' &&
        (sscanf(name + pl, "%d.%n", &layer, &n) != 1 || n == 0 || layer < 0))
        return false;
    if (layer >= 0)
        rest = name + pl + n;
    for (int t = 0; t < TENSOR_KINDS; t++) {
        const struct tensor_row *r = &tensor_table[t];
        if (!r->gguf || !(r->flags & TR_LAYER) != (layer < 0))
            continue;
        snprintf(text, sizeof text, "%s%s", r->name, r->flags & TR_QUANT ? ".weight" : "");
        if (!strcmp(rest, gguf ? r->gguf : text))
            return (layer < 0 ? snprintf(out, len, "%s", gguf ? text : r->gguf)
                               : snprintf(out, len, "%s%d.%s", to_pre, layer, gguf ? text : r->gguf)) < (int)len;
    }
    return false;
}

bool gguf_name_to_text(const char *gguf, char *out, size_t len)
{
    return map(gguf, true, out, len);
}

bool gguf_name_from_text(const char *text, char *out, size_t len)
{
    return map(text, false, out, len);
}
