/* text.c - a model's tokenizer and chat template (text.h). */
#include "ingest/text.h"

#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fileio.h"
#include "core/gguf.h"
#include "core/pack.h"
#include "core/sha256.h"
#include "ingest/source.h"
#include "model/config.h"

/* The template from its source text: loaded when known, else the refusal kept. */
static void set_template(struct model_text *t, const char *src, size_t len, const char *name)
{
    struct err te = {0};
    sha256_hex(src, len, t->tmpl_sha256);
    if (tmpl_load(&t->tmpl, src, len, name, &te) != ERR_OK)
        snprintf(t->tmpl_why, sizeof t->tmpl_why, "%s", te.msg);
}

static int tokenizer_from_json(struct model_text *t, const char *buf, size_t len, const char *name, struct err *e)
{
    sha256_hex(buf, len, t->tok_sha256);
    return tok_load_json_mem(&t->tok, buf, len, name, e);
}

/* tokenizer_config.json's "chat_template": a string, or [{name, template}] (the "default" entry). */
static const char *config_template(struct json_object *cfg)
{
    struct json_object *ct;
    if (!json_object_object_get_ex(cfg, "chat_template", &ct))
        return NULL;
    if (json_object_is_type(ct, json_type_string))
        return json_object_get_string(ct);
    for (size_t i = 0; json_object_is_type(ct, json_type_array) && i < json_object_array_length(ct); i++) {
        struct json_object *row = json_object_array_get_idx(ct, i), *n, *s;
        if (json_object_object_get_ex(row, "name", &n) && json_object_object_get_ex(row, "template", &s) &&
            !strcmp(json_object_get_string(n), "default") && json_object_is_type(s, json_type_string))
            return json_object_get_string(s);
    }
    return NULL;
}

static void template_from_config(struct model_text *t, const char *buf, size_t len, const char *name)
{
    struct json_tokener *tk = json_tokener_new();
    struct json_object *cfg = tk ? json_tokener_parse_ex(tk, buf, (int)len) : NULL;
    const char *src = cfg ? config_template(cfg) : NULL;
    if (src)
        set_template(t, src, strlen(src), name);
    json_object_put(cfg);
    if (tk)
        json_tokener_free(tk);
}

static int open_dir(struct model_text *t, const char *dir, struct err *e)
{
    char *path = fio_join(dir, "tokenizer.json"), *buf = NULL;
    size_t len;
    int rc = path ? ERR_OK : err_set(e, ERR_NOMEM, "out of memory");
    if (rc == ERR_OK && input_kind(path) == IN_MISSING)
        snprintf(t->tok_why, sizeof t->tok_why, "%s: no tokenizer.json", dir);
    else if (rc == ERR_OK && (rc = fio_read_file(path, FIO_INPUT, TOK_MAX_JSON_BYTES, &buf, &len, e)) == ERR_OK)
        rc = tokenizer_from_json(t, buf, len, path, e);
    free(buf);
    free(path);
    buf = NULL;
    path = NULL;
    if (rc == ERR_OK && (path = fio_join(dir, "chat_template.jinja")) && input_kind(path) != IN_MISSING) {
        if ((rc = fio_read_file(path, FIO_INPUT, TEXT_MAX_FILE, &buf, &len, e)) == ERR_OK)
            set_template(t, buf, len, path);
    } else if (rc == ERR_OK && path) {
        free(path);
        if ((path = fio_join(dir, "tokenizer_config.json")) && input_kind(path) != IN_MISSING &&
            (rc = fio_read_file(path, FIO_INPUT, TEXT_MAX_FILE, &buf, &len, e)) == ERR_OK)
            template_from_config(t, buf, len, path);
    }
    free(buf);
    free(path);
    return rc;
}

static int open_gguf(struct model_text *t, const struct gguf_file *g, const char *file, struct err *e)
{
    char *json = NULL;
    size_t len;
    int rc = ERR_OK;
    if (!gguf_find_kv(g, "tokenizer.ggml.tokens"))
        snprintf(t->tok_why, sizeof t->tok_why, "%s: no tokenizer.ggml.tokens metadata", file);
    else if ((rc = tok_load_gguf(&t->tok, g, e)) == ERR_OK && (rc = tok_write_json(t->tok, &json, &len, e)) == ERR_OK)
        sha256_hex(json, len, t->tok_sha256);
    const struct gguf_kv *kv = gguf_find_kv(g, "tokenizer.chat_template");
    if (rc == ERR_OK && kv && kv->type == GGUF_STRING)
        set_template(t, (const char *)kv->str, kv->n, file);
    free(json);
    return rc;
}

static int open_pack(struct model_text *t, const struct pack *p, const char *file, struct err *e)
{
    int rc = ERR_OK;
    const struct pack_file *f = pack_find_file(p, "tokenizer.json");
    if (!f)
        snprintf(t->tok_why, sizeof t->tok_why, "%s: the pack stores no tokenizer.json", file);
    else
        rc = tokenizer_from_json(t, (const char *)pack_file_data(p, f), f->nbytes, file, e);
    if (rc == ERR_OK && (f = pack_find_file(p, "chat_template.jinja")))
        set_template(t, (const char *)pack_file_data(p, f), f->nbytes, file);
    else if (rc == ERR_OK && (f = pack_find_file(p, "tokenizer_config.json")))
        template_from_config(t, (const char *)pack_file_data(p, f), f->nbytes, file);
    return rc;
}

/* The id of a piece that encodes to exactly itself (an added token). */
static void add_stop(struct model_text *t, const char *piece)
{
    uint32_t *ids = NULL;
    size_t n = 0, plen;
    struct err ignored = {0};
    if (tok_encode(t->tok, piece, strlen(piece), false, &ids, &n, &ignored) == ERR_OK && n == 1) {
        const char *got = tok_piece(t->tok, ids[0], &plen);
        if (got && plen == strlen(piece) && !memcmp(got, piece, plen))
            t->stop[t->n_stop++] = (int32_t)ids[0];
    }
    free(ids);
}

int text_open(struct model_text *t, const char *model_path, struct err *e)
{
    memset(t, 0, sizeof *t);
    struct source s;
    struct gp_config cfg = {0};
    int rc = source_open(&s, model_path, SRC_HEADERS | SRC_PACK_ANY, e);
    if (rc == ERR_OK && (rc = cfg_parse(&cfg, s.config_text, s.config_len, s.config_name, e)) == ERR_OK)
        t->vocab = cfg.vocab_size;
    if (rc == ERR_OK)
        rc = s.kind == SRC_GGUF   ? open_gguf(t, &s.gguf, s.path, e)
             : s.kind == SRC_PACK ? open_pack(t, &s.pack, s.path, e)
                                  : open_dir(t, s.path, e);
    cfg_free(&cfg);
    source_close(&s);
    if (rc == ERR_OK && t->tok) {
        add_stop(t, "<eos>");
        add_stop(t, "<turn|>");
    }
    if (rc != ERR_OK)
        text_close(t);
    return rc;
}

void text_close(struct model_text *t)
{
    tok_free(t->tok);
    tmpl_free(t->tmpl);
    t->tok = NULL;
    t->tmpl = NULL;
}

/* A conversation's JSON: its messages (a new reference) and tools (borrowed
 * from *root, NULL when absent), enable_thinking (-1 absent) and
 * add_generation_prompt (default true); *root is the parsed document. */
static int conversation(const char *text, size_t len, const char *what, struct json_object **root,
                        struct json_object **msgs, struct json_object **tools, int *think, bool *agp, struct err *e)
{
    struct json_tokener *tk = json_tokener_new();
    if (!tk)
        return err_set(e, ERR_NOMEM, "out of memory");
    json_tokener_set_flags(tk, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
    *root = len <= INT32_MAX ? json_tokener_parse_ex(tk, text, (int)len) : NULL;
    size_t end = *root && json_tokener_get_error(tk) == json_tokener_success ? json_tokener_get_parse_end(tk) : 0;
    json_tokener_free(tk);
    bool ok = *root != NULL;
    while (ok && end < len && strchr(" \t\r\n", text[end]) && text[end])
        end++;
    ok = ok && end == len; /* one document, then whitespace only */
    struct json_object *v;
    *msgs = *tools = NULL;
    *think = -1;
    *agp = true;
    if (ok && json_object_is_type(*root, json_type_array)) {
        *msgs = json_object_get(*root);
    } else if (ok && json_object_is_type(*root, json_type_object)) {
        ok = json_object_object_get_ex(*root, "messages", &v) && json_object_is_type(v, json_type_array);
        *msgs = ok ? json_object_get(v) : NULL;
        if (ok && json_object_object_get_ex(*root, "tools", &v) && v) {
            ok = json_object_is_type(v, json_type_array);
            *tools = v;
        }
        if (ok && json_object_object_get_ex(*root, "enable_thinking", &v)) {
            ok = json_object_is_type(v, json_type_boolean);
            *think = json_object_get_boolean(v);
        }
        if (ok && json_object_object_get_ex(*root, "add_generation_prompt", &v)) {
            ok = json_object_is_type(v, json_type_boolean);
            *agp = json_object_get_boolean(v);
        }
    } else {
        ok = false;
    }
    if (ok)
        return ERR_OK;
    json_object_put(*msgs);
    json_object_put(*root);
    *root = *msgs = *tools = NULL;
    return err_set(e, ERR_FORMAT, "%s: a conversation is one JSON array of messages, or an object with \"messages\" "
                                  "(an array), \"tools\" (an array), \"enable_thinking\" and \"add_generation_prompt\" "
                                  "(true or false)", what);
}

static int render_chat(const struct model_text *t, const struct text_prompt *p, char **out, size_t *len,
                       struct err *e)
{
    if (!t->tmpl)
        return err_set(e, ERR_USAGE, "%s", t->tmpl_why[0] ? t->tmpl_why : "the model has no chat template; give the "
                                                                          "prompt as raw text (--prompt)");
    struct tmpl_vars v = {.add_generation_prompt = true, .enable_thinking = -1, .bos_token = "<bos>",
                          .eos_token = "<eos>"};
    struct json_object *root = NULL, *given = NULL, *tools = NULL, *msgs = json_object_new_array();
    int rc = p->conversation ? conversation(p->text, p->len, p->what ? p->what : "conversation", &root, &given, &tools,
                                            &v.enable_thinking, &v.add_generation_prompt, e)
                             : ERR_OK;
    if (p->system) {
        struct json_object *m = json_object_new_object();
        json_object_object_add(m, "role", json_object_new_string("system"));
        json_object_object_add(m, "content", json_object_new_string(p->system));
        json_object_array_add(msgs, m);
    }
    for (size_t i = 0; given && i < json_object_array_length(given); i++)
        json_object_array_add(msgs, json_object_get(json_object_array_get_idx(given, i)));
    if (!p->conversation) {
        struct json_object *m = json_object_new_object();
        json_object_object_add(m, "role", json_object_new_string("user"));
        json_object_object_add(m, "content", json_object_new_string_len(p->text, (int)p->len));
        json_object_array_add(msgs, m);
    }
    if (rc == ERR_OK)
        rc = tmpl_render(t->tmpl, msgs, tools, &v, out, len, e);
    json_object_put(msgs);
    json_object_put(given);
    json_object_put(root);
    return rc;
}

int text_encode(const struct model_text *t, const struct text_prompt *p, int32_t **ids, int64_t *n, char **rendered,
                struct err *e)
{
    *ids = NULL;
    *n = 0;
    *rendered = NULL;
    if (!t->tok)
        return err_set(e, ERR_USAGE, "%s: give the prompt as token ids (--tokens)", t->tok_why);
    if (p->len > TOK_MAX_TEXT || p->len > (size_t)INT32_MAX)
        return err_set(e, ERR_USAGE, "prompt of %zu bytes: at most %u", p->len, TOK_MAX_TEXT);
    const char *text = p->text;
    size_t len = p->len;
    int rc = ERR_OK;
    if (p->chat && (rc = render_chat(t, p, rendered, &len, e)) == ERR_OK)
        text = *rendered;
    uint32_t *u = NULL;
    size_t nu = 0;
    if (rc == ERR_OK && (rc = tok_encode(t->tok, text, len, !p->chat, &u, &nu, e)) != ERR_OK && p->what)
        err_prefix(e, "%s", p->what);
    if (rc == ERR_OK && tok_vocab_size(t->tok) > t->vocab)
        rc = err_set(e, ERR_FORMAT, "the tokenizer has %u ids, the model's vocabulary %lld: not this model's tokenizer",
                     tok_vocab_size(t->tok), (long long)t->vocab);
    if (rc == ERR_OK && nu == 0)
        rc = err_set(e, ERR_USAGE, "the prompt gives no tokens");
    if (rc == ERR_OK && !(*ids = malloc(nu * sizeof **ids)))
        rc = err_set(e, ERR_NOMEM, "out of memory");
    for (size_t i = 0; rc == ERR_OK && i < nu; i++)
        (*ids)[i] = (int32_t)u[i];
    free(u);
    if (rc == ERR_OK) {
        *n = (int64_t)nu;
    } else {
        free(*rendered);
        *rendered = NULL;
    }
    return rc;
}

int text_prompts_add(struct text_prompts *s, const char *text, size_t len, bool chat, const char *what,
                     struct err *e)
{
    if (s->n >= TEXT_MAX_PROMPTS)
        return err_set(e, ERR_USAGE, "%s: at most %d prompts", what, TEXT_MAX_PROMPTS);
    if (len > TOK_MAX_TEXT)
        return err_set(e, ERR_USAGE, "%s: %zu bytes of text, at most %u", what, len, TOK_MAX_TEXT);
    struct text_prompt *np = realloc(s->p, (size_t)(s->n + 1) * sizeof *np);
    if (!np)
        return err_set(e, ERR_NOMEM, "out of memory");
    s->p = np;
    char *copy = malloc(len + 1), *name = strdup(what);
    if (!copy || !name) {
        free(copy);
        free(name);
        return err_set(e, ERR_NOMEM, "out of memory");
    }
    memcpy(copy, text, len);
    copy[len] = 0;
    s->p[s->n++] = (struct text_prompt){.what = name, .text = copy, .len = len, .chat = chat};
    return ERR_OK;
}

int text_prompts_add_file(struct text_prompts *s, const char *path, struct err *e)
{
    char *buf;
    size_t len;
    int rc = fio_read_file(path, FIO_INPUT, TOK_MAX_TEXT, &buf, &len, e);
    if (rc == ERR_OK)
        rc = text_prompts_add(s, buf, len, false, path, e);
    free(buf);
    return rc;
}

int text_prompts_add_conversation(struct text_prompts *s, const char *path, struct err *e)
{
    char *buf;
    size_t len;
    struct json_object *root, *msgs, *tools;
    int think;
    bool agp;
    int rc = fio_read_file(path, FIO_INPUT, TEXT_MAX_FILE, &buf, &len, e);
    if (rc == ERR_OK && (rc = conversation(buf, len, path, &root, &msgs, &tools, &think, &agp, e)) == ERR_OK) {
        json_object_put(msgs);
        json_object_put(root);
        if ((rc = text_prompts_add(s, buf, len, true, path, e)) == ERR_OK)
            s->p[s->n - 1].conversation = true;
    }
    free(buf);
    return rc;
}

void text_prompts_free(struct text_prompts *s)
{
    for (int i = 0; i < s->n; i++) {
        free((char *)s->p[i].text);
        free((char *)s->p[i].what);
    }
    free(s->p);
    s->p = NULL;
    s->n = 0;
}

/* "id 9259 'Hello'", or "the end" past the last id. */
static void describe(const struct tokenizer *t, const int32_t *ids, int64_t n, int64_t i, char *out, size_t cap)
{
    size_t len = 0;
    const char *piece = i < n && ids[i] >= 0 ? tok_piece(t, (uint32_t)ids[i], &len) : NULL;
    if (i >= n)
        snprintf(out, cap, "the end");
    else
        snprintf(out, cap, "id %d '%.*s'", ids[i], piece ? (int)(len < 200 ? len : 200) : 1, piece ? piece : "?");
}

int64_t text_first_diff(const struct tokenizer *t, const int32_t *a, int64_t na, const int32_t *b, int64_t nb,
                        char *msg, size_t cap)
{
    int64_t i = 0;
    while (i < na && i < nb && a[i] == b[i])
        i++;
    if (i == na && i == nb)
        return -1;
    char da[260], db[260];
    describe(t, a, na, i, da, sizeof da);
    describe(t, b, nb, i, db, sizeof db);
    snprintf(msg, cap, "position %lld: %s vs %s (%lld and %lld ids)", (long long)i, da, db, (long long)na,
             (long long)nb);
    return i;
}
