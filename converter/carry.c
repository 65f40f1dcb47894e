#include "converter/carry.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/fileio.h"
#include "core/jsonx.h"
#include "core/sha256.h"
#include "core/text.h"
#include "tokenizer/tokenizer.h"

static const char *const names[] = {"tokenizer.json", "tokenizer_config.json", "chat_template.jinja"};

/* Takes data (malloc'ed) as file `name`. */
static int add(struct carried *c, const char *name, char *data, size_t len, struct err *e)
{
    struct carried_file *f = realloc(c->f, (c->n + 1) * sizeof *f);
    if (!f) {
        free(data);
        return err_set(e, ERR_NOMEM, "cannot allocate the carried files");
    }
    c->f = f;
    f += c->n;
    if (!(f->name = strdup(name))) {
        free(data);
        return err_set(e, ERR_NOMEM, "cannot allocate the carried files");
    }
    f->data = data;
    f->len = len;
    sha256_hex(data, len, f->sha256);
    c->n++;
    return ERR_OK;
}

__attribute__((format(printf, 3, 4))) static int note(struct carried *c, struct err *e, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    bool ok = text_list_vadd(&c->notes, &c->n_notes, fmt, ap);
    va_end(ap);
    return ok ? ERR_OK : err_set(e, ERR_NOMEM, "cannot allocate a note");
}

/* A checkpoint directory's tokenizer files. */
static int from_dir(struct carried *c, const char *dir, struct err *e)
{
    int rc = ERR_OK;
    for (int i = 0; rc == ERR_OK && i < 3; i++) {
        char *path = fio_join(dir, names[i]), *data = NULL;
        struct stat st;
        size_t len;
        struct err fe = {0};
        if (!path)
            return err_set(e, ERR_NOMEM, "out of memory");
        if (lstat(path, &st) != 0 && errno == ENOENT) {
            free(path);
            continue;
        }
        if (fio_read_file(path, FIO_INPUT, i == 0 ? CARRY_MAX_TOKENIZER_JSON : CARRY_MAX_FILE, &data, &len, &fe)) {
            rc = note(c, e, "%s not stored: %s", names[i], fe.msg);
        } else if (i == 0) { /* a tokenizer gempack reads */
            struct tokenizer *t;
            if (tok_load_json_mem(&t, data, len, path, &fe) == ERR_OK) {
                tok_free(t);
                rc = add(c, names[i], data, len, e);
                data = NULL;
            } else {
                rc = note(c, e, "tokenizer.json not stored: %s", fe.msg);
            }
        } else if (i == 1) {
            struct json_object *j;
            if (jsonx_parse(data, len, &j, &fe) == ERR_OK) {
                json_object_put(j);
                rc = add(c, names[i], data, len, e);
                data = NULL;
            } else {
                rc = note(c, e, "tokenizer_config.json not stored: %s: %s", path, fe.msg);
            }
        } else {
            rc = add(c, names[i], data, len, e);
            data = NULL;
        }
        free(data);
        free(path);
    }
    return rc;
}

/* A GGUF's tokenizer metadata as tokenizer.json, its template as chat_template.jinja. */
static int from_gguf(struct carried *c, const struct gguf_file *g, struct err *e)
{
    int rc = ERR_OK;
    struct err fe = {0};
    if (gguf_find_kv(g, "tokenizer.ggml.tokens")) {
        struct tokenizer *t;
        char *js;
        size_t len;
        if (tok_load_gguf(&t, g, &fe) != ERR_OK) {
            rc = note(c, e, "tokenizer.json not written: %s", fe.msg);
        } else {
            rc = tok_write_json(t, &js, &len, &fe);
            tok_free(t);
            if (rc == ERR_NOMEM)
                return err_set(e, ERR_NOMEM, "%s", fe.msg);
            rc = rc == ERR_OK ? add(c, "tokenizer.json", js, len, e)
                              : note(c, e, "tokenizer.json not written: %s", fe.msg);
        }
    }
    const struct gguf_kv *kv = gguf_find_kv(g, "tokenizer.chat_template");
    if (rc == ERR_OK && kv) {
        char *s;
        if (kv->type != GGUF_STRING || kv->n > CARRY_MAX_FILE) {
            rc = note(c, e, "chat_template.jinja not stored: %s: tokenizer.chat_template is not a string of at most %u "
                      "bytes", g->path, CARRY_MAX_FILE);
        } else if (!(s = malloc((size_t)kv->n + 1))) {
            rc = err_set(e, ERR_NOMEM, "out of memory");
        } else {
            memcpy(s, kv->str, (size_t)kv->n);
            s[kv->n] = 0;
            rc = add(c, "chat_template.jinja", s, (size_t)kv->n, e);
        }
    }
    return rc;
}

int carry_collect(struct carried *c, const struct source *s, struct err *e)
{
    memset(c, 0, sizeof *c);
    return s->kind == SRC_GGUF ? from_gguf(c, &s->gguf, e) : from_dir(c, s->path, e);
}

void carry_free(struct carried *c)
{
    for (size_t i = 0; i < c->n; i++) {
        free(c->f[i].name);
        free(c->f[i].data);
    }
    free(c->f);
    for (size_t i = 0; i < c->n_notes; i++)
        free(c->notes[i]);
    free(c->notes);
    memset(c, 0, sizeof *c);
}
