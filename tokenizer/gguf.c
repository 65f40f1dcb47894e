/* gguf.c - a GGUF's tokenizer.ggml.* metadata as a tokenizer (tokenizer.h
 * says which pipeline it implies). */
#include <string.h>

#include "core/bytes.h"
#include "tokenizer/internal.h"

/* An array of strings, validated by core/gguf (each a u64 length + bytes, in the file). */
static const struct gguf_kv *string_array(const struct gguf_file *g, const char *key, struct err *e)
{
    const struct gguf_kv *kv = gguf_find_kv(g, key);
    if (!kv)
        err_set(e, ERR_FORMAT, "%s: no %s: not a tokenizer", g->path, key);
    else if (kv->type != GGUF_ARRAY || kv->elem != GGUF_STRING)
        err_set(e, ERR_FORMAT, "%s: %s must be an array of strings", g->path, key), kv = NULL;
    else if (kv->n > TOK_MAX_VOCAB * 4ull)
        err_set(e, ERR_RANGE, "%s: %s: %llu entries, at most %u", g->path, key, (unsigned long long)kv->n,
                TOK_MAX_VOCAB * 4), kv = NULL;
    return kv;
}

static int read_gguf(struct tokenizer *t, const struct gguf_file *g, struct err *e)
{
    char model[64];
    if (gguf_get_str(g, "tokenizer.ggml.model", false, NULL, model, sizeof model, e))
        return e->code;
    if (strcmp(model, "gemma4") && strcmp(model, "llama") && strcmp(model, "gemma"))
        return err_set(e, ERR_UNSUPPORTED, "%s: tokenizer.ggml.model '%s' is not supported (gemma4, llama, gemma)",
                       g->path, model);
    const struct gguf_kv *tok = string_array(g, "tokenizer.ggml.tokens", e);
    if (!tok)
        return e->code;
    if (tok->n > TOK_MAX_VOCAB)
        return err_set(e, ERR_RANGE, "%s: %llu tokens, at most %u", g->path, (unsigned long long)tok->n, TOK_MAX_VOCAB);
    const struct gguf_kv *types = gguf_find_kv(g, "tokenizer.ggml.token_type");
    if (types && (types->type != GGUF_ARRAY || types->n != tok->n))
        return err_set(e, ERR_FORMAT, "%s: tokenizer.ggml.token_type must be an array of %llu integers", g->path,
                       (unsigned long long)tok->n);
    const struct gguf_kv *merges = string_array(g, "tokenizer.ggml.merges", e);
    if (!merges || tok_reserve(t, tok->n, merges->n, e))
        return e->code;
    const uint8_t *q = tok->arr;
    for (uint64_t i = 0; i < tok->n; i++) {
        uint64_t n = rd_u64le(q);
        if (tok_set_piece(t, (uint32_t)i, (const char *)q + 8, n, e))
            return err_prefix(e, "tokenizer.ggml.tokens");
        q += 8 + n;
    }
    /* control, unknown and user-defined tokens are matched in text (llama.cpp) */
    q = tok->arr;
    for (uint64_t i = 0; types && i < tok->n; i++) {
        uint64_t n = rd_u64le(q);
        int64_t type;
        if (!gguf_array_int(types, i, &type))
            return err_set(e, ERR_FORMAT, "%s: tokenizer.ggml.token_type must be integers", g->path);
        if ((type == 2 || type == 3 || type == 4) &&
            tok_add_added(t, (uint32_t)i, (const char *)q + 8, n, type != 4, false, false, e))
            return e->code;
        q += 8 + n;
    }
    q = merges->arr;
    for (uint64_t i = 0; i < merges->n; i++) {
        uint64_t n = rd_u64le(q);
        const char *s = (const char *)q + 8;
        const char *sp = n > 1 ? memchr(s + 1, ' ', n - 1) : NULL; /* llama.cpp: find(' ', 1) */
        if (!sp)
            return err_set(e, ERR_FORMAT, "%s: tokenizer.ggml.merges %llu has no space", g->path, (unsigned long long)i);
        if (tok_add_merge(t, s, (size_t)(sp - s), sp + 1, n - (size_t)(sp + 1 - s), i, e))
            return e->code;
        q += 8 + n;
    }
    uint64_t id;
    bool found;
    if (gguf_get_u64(g, "tokenizer.ggml.unknown_token_id", true, &found, &id, e))
        return e->code;
    if (found)
        t->unk_id = id < TOK_MAX_VOCAB ? (uint32_t)id : TOK_NONE - 1;
    t->byte_fallback = true;
    t->fuse_unk = true;
    const struct gguf_kv *bos = gguf_find_kv(g, "tokenizer.ggml.add_bos_token");
    if (bos && bos->type != GGUF_BOOL)
        return err_set(e, ERR_FORMAT, "%s: tokenizer.ggml.add_bos_token is %s, expected a bool", g->path,
                       gguf_vtype_name(bos->type));
    bool add_bos = !bos || bos->v.u;
    if (gguf_get_u64(g, "tokenizer.ggml.bos_token_id", !add_bos, &found, &id, e))
        return e->code;
    if (add_bos && tok_add_template_id(t, false, id < TOK_MAX_VOCAB ? (uint32_t)id : TOK_NONE - 1, e))
        return e->code;
    if (tok_add_replace(t, " ", 1, "\xE2\x96\x81", 3, e) ||
        tok_add_decoder(t, TOK_DEC_REPLACE, "\xE2\x96\x81", 3, " ", 1, 0, 0, e) ||
        tok_add_decoder(t, TOK_DEC_BYTE_FALLBACK, NULL, 0, NULL, 0, 0, 0, e) ||
        tok_add_decoder(t, TOK_DEC_FUSE, NULL, 0, NULL, 0, 0, 0, e))
        return e->code;
    return tok_finish(t, e);
}

int tok_load_gguf(struct tokenizer **out, const struct gguf_file *g, struct err *e)
{
    *out = NULL;
    struct tokenizer *t;
    if (tok_new(&t, g->path ? g->path : "gguf", e))
        return e->code;
    if (read_gguf(t, g, e)) {
        tok_free(t);
        return e->code;
    }
    *out = t;
    return ERR_OK;
}
