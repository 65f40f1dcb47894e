#include "core/checkpoint.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/fileio.h"
#include "core/jsonx.h"
#include "core/text.h"

#define INDEX_MAX_BYTES (64u << 20)

static int cmp_ct(const void *a, const void *b)
{
    return strcmp(((const struct ckpt_tensor *)a)->name, ((const struct ckpt_tensor *)b)->name);
}

__attribute__((format(printf, 2, 3))) static void warn(struct ckpt *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    text_list_vadd(&c->warnings, &c->n_warnings, fmt, ap);
    va_end(ap);
}

static bool plain_file_name(const char *s)
{
    return s[0] && !strchr(s, '/') && strcmp(s, ".") && strcmp(s, "..") && strlen(s) < 256;
}

static int open_shard(struct ckpt *c, const char *name, unsigned flags, struct err *e)
{
    char *path = fio_join(c->dir, name);
    if (!path)
        return err_set(e, ERR_NOMEM, "cannot allocate a path");
    size_t k = c->n_shards;
    c->shard_names[k] = strdup(name);
    int rc = c->shard_names[k] ? st_open(&c->shards[k], path, flags, e) : err_set(e, ERR_NOMEM, "out of memory");
    free(path);
    if (rc != ERR_OK) {
        free(c->shard_names[k]);
        return rc;
    }
    c->bytes_read += c->shards[k].bytes_read;
    c->n_shards++;
    return ERR_OK;
}

static long shard_index(const struct ckpt *c, const char *name)
{
    for (size_t i = 0; i < c->n_shards; i++)
        if (!strcmp(c->shard_names[i], name))
            return (long)i;
    return -1;
}

static int open_indexed(struct ckpt *c, const char *index_path, unsigned flags, struct err *e)
{
    char *text;
    size_t len;
    int rc = fio_read_file(index_path, FIO_INPUT, INDEX_MAX_BYTES, &text, &len, e);
    if (rc != ERR_OK)
        return rc;
    c->bytes_read += len;
    struct json_object *root = NULL;
    rc = jsonx_parse(text, len, &root, e);
    bool nul = rc == ERR_OK && jsonx_has_escaped_nul(text, len);
    free(text);
    if (rc != ERR_OK)
        return err_prefix(e, "%s", index_path);
    struct json_object *wm;
    if (nul) {
        /* json-c would silently cut a tensor or shard name at the NUL (INPUTS.md §1.5) */
        rc = err_set(e, ERR_FORMAT, "%s: contains a string with an escaped NUL (\\u0000)", index_path);
        goto out;
    }
    if (json_object_get_type(root) != json_type_object || !json_object_object_get_ex(root, "weight_map", &wm) ||
        json_object_get_type(wm) != json_type_object) {
        rc = err_set(e, ERR_FORMAT, "%s: expected an object with a \"weight_map\" object", index_path);
        goto out;
    }
    size_t n = (size_t)json_object_object_length(wm);
    if (n > ST_MAX_TENSORS) {
        rc = err_set(e, ERR_RANGE, "%s: weight_map has %zu entries, above the limit of %d", index_path, n,
                     ST_MAX_TENSORS);
        goto out;
    }
    /* Distinct shard names, in first-seen order. */
    c->shards = calloc(n ? n : 1, sizeof *c->shards);
    c->shard_names = calloc(n ? n : 1, sizeof *c->shard_names);
    if (!c->shards || !c->shard_names) {
        rc = err_set(e, ERR_NOMEM, "%s: cannot allocate shard records", index_path);
        goto out;
    }
    json_object_object_foreach(wm, tname, shard) {
        if (json_object_get_type(shard) != json_type_string) {
            rc = err_set(e, ERR_FORMAT, "%s: weight_map[\"%s\"] is %s, expected a shard file name string",
                         index_path, tname, jsonx_type_name(shard));
            goto out;
        }
        const char *s = json_object_get_string(shard); /* no NUL inside: checked above */
        if (!plain_file_name(s)) {
            rc = err_set(e, ERR_FORMAT, "%s: weight_map[\"%s\"] = \"%s\" is not a plain file name in the same directory",
                         index_path, tname, s);
            goto out;
        }
        if (shard_index(c, s) < 0 && (rc = open_shard(c, s, flags, e)) != ERR_OK) {
            err_prefix(e, "shard named by %s", index_path);
            goto out;
        }
    }
    /* Every shard tensor is indexed to that shard, and every index entry exists in it. */
    size_t total = 0;
    uint64_t bytes = 0;
    for (size_t i = 0; i < c->n_shards; i++)
        total += c->shards[i].n_tensors;
    c->tensors = calloc(total ? total : 1, sizeof *c->tensors);
    if (!c->tensors) {
        rc = err_set(e, ERR_NOMEM, "cannot allocate %zu tensor records", total);
        goto out;
    }
    for (size_t i = 0; i < c->n_shards; i++) {
        for (size_t j = 0; j < c->shards[i].n_tensors; j++) {
            const struct st_tensor *t = &c->shards[i].tensors[j];
            struct json_object *m;
            if (!json_object_object_get_ex(wm, t->name, &m)) {
                rc = err_set(e, ERR_FORMAT, "%s: tensor '%s' is in shard %s but not in the weight_map of %s",
                             c->dir, t->name, c->shard_names[i], index_path);
                goto out;
            }
            if (strcmp(json_object_get_string(m), c->shard_names[i]) != 0) {
                /* The weight_map holds one shard per name, so a tensor stored in two
                 * shards always lands here: say so rather than blame the index. */
                long other = shard_index(c, json_object_get_string(m));
                if (other >= 0 && st_find(&c->shards[other], t->name))
                    rc = err_set(e, ERR_FORMAT, "%s: tensor '%s' is stored in two shards (%s and %s)", c->dir,
                                 t->name, c->shard_names[other], c->shard_names[i]);
                else
                    rc = err_set(e, ERR_FORMAT, "%s: tensor '%s' is in shard %s, but the weight_map places it in %s",
                                 c->dir, t->name, c->shard_names[i], json_object_get_string(m));
                goto out;
            }
            c->tensors[c->n_tensors++] = (struct ckpt_tensor){t->name, i, t};
            bytes += t->end - t->begin;
        }
    }
    json_object_object_foreach(wm, iname, ishard) {
        long k = shard_index(c, json_object_get_string(ishard));
        if (k < 0 || !st_find(&c->shards[k], iname)) {
            rc = err_set(e, ERR_FORMAT, "%s: weight_map names tensor '%s' in %s, but that shard has no such tensor",
                         index_path, iname, json_object_get_string(ishard));
            goto out;
        }
    }
    qsort(c->tensors, c->n_tensors, sizeof *c->tensors, cmp_ct);
    for (size_t i = 1; i < c->n_tensors; i++)
        if (!strcmp(c->tensors[i].name, c->tensors[i - 1].name)) {
            rc = err_set(e, ERR_FORMAT, "%s: tensor '%s' is stored in two shards (%s and %s)", c->dir,
                         c->tensors[i].name, c->shard_names[c->tensors[i - 1].shard],
                         c->shard_names[c->tensors[i].shard]);
            goto out;
        }
    struct json_object *meta, *ts;
    uint64_t declared;
    if (json_object_object_get_ex(root, "metadata", &meta) && json_object_get_type(meta) == json_type_object &&
        json_object_object_get_ex(meta, "total_size", &ts)) {
        if (!jsonx_u64(ts, &declared))
            warn(c, "%s: metadata.total_size is not a non-negative integer", index_path);
        else if (declared != bytes)
            warn(c, "%s: metadata.total_size is %llu, the tensors hold %llu bytes (advisory only)", index_path,
                 (unsigned long long)declared, (unsigned long long)bytes);
    }
out:
    json_object_put(root);
    return rc;
}

int ckpt_open(struct ckpt *c, const char *dir, unsigned st_flags, struct err *e)
{
    memset(c, 0, sizeof *c);
    c->dir = strdup(dir);
    char *index = fio_join(dir, "model.safetensors.index.json");
    if (!c->dir || !index) {
        free(index);
        return err_set(e, ERR_NOMEM, "cannot allocate a path");
    }
    struct stat st;
    int rc;
    if (stat(index, &st) == 0) {
        c->indexed = true;
        rc = open_indexed(c, index, st_flags, e);
    } else {
        c->shards = calloc(1, sizeof *c->shards);
        c->shard_names = calloc(1, sizeof *c->shard_names);
        rc = c->shards && c->shard_names ? open_shard(c, "model.safetensors", st_flags, e)
                                         : err_set(e, ERR_NOMEM, "out of memory");
        if (rc == ERR_OK) {
            struct st_file *f = &c->shards[0];
            c->tensors = calloc(f->n_tensors ? f->n_tensors : 1, sizeof *c->tensors);
            if (!c->tensors)
                rc = err_set(e, ERR_NOMEM, "cannot allocate %zu tensor records", f->n_tensors);
            for (size_t j = 0; rc == ERR_OK && j < f->n_tensors; j++)
                c->tensors[c->n_tensors++] = (struct ckpt_tensor){f->tensors[j].name, 0, &f->tensors[j]};
        } else if (rc == ERR_IO && errno == ENOENT) {
            err_prefix(e, "%s: neither model.safetensors.index.json nor model.safetensors", dir);
        }
    }
    free(index);
    if (rc != ERR_OK)
        ckpt_close(c);
    c->n_files = c->n_shards;
    return rc;
}

int ckpt_init_empty(struct ckpt *c, const char *dir, struct err *e)
{
    memset(c, 0, sizeof *c);
    if (!(c->dir = strdup(dir)))
        return err_set(e, ERR_NOMEM, "cannot allocate a path");
    return ERR_OK;
}

int ckpt_add_shard(struct ckpt *c, struct st_file *f, const char *name, struct err *e)
{
    struct st_file *s = realloc(c->shards, (c->n_shards + 1) * sizeof *s);
    if (s)
        c->shards = s;
    char **n = s ? realloc(c->shard_names, (c->n_shards + 1) * sizeof *n) : NULL;
    if (n)
        c->shard_names = n;
    if (!s || !n || !(n[c->n_shards] = strdup(name))) {
        st_close(f);
        return err_set(e, ERR_NOMEM, "cannot add a shard to %s", c->dir);
    }
    s[c->n_shards++] = *f;
    memset(f, 0, sizeof *f);
    return ERR_OK;
}

int ckpt_reindex(struct ckpt *c, bool (*drop)(const char *name, void *ctx), void *ctx, struct err *e)
{
    size_t total = 0;
    for (size_t i = 0; i < c->n_shards; i++)
        total += c->shards[i].n_tensors;
    struct ckpt_tensor *t = calloc(total ? total : 1, sizeof *t);
    if (!t)
        return err_set(e, ERR_NOMEM, "cannot allocate %zu tensor records", total);
    size_t n = 0;
    for (size_t i = 0; i < c->n_shards; i++)
        for (size_t j = 0; j < c->shards[i].n_tensors; j++) {
            const struct st_tensor *st = &c->shards[i].tensors[j];
            if (i >= c->n_files || !drop || !drop(st->name, ctx))
                t[n++] = (struct ckpt_tensor){st->name, i, st};
        }
    qsort(t, n, sizeof *t, cmp_ct);
    for (size_t i = 1; i < n; i++)
        if (!strcmp(t[i].name, t[i - 1].name)) {
            int rc = err_set(e, ERR_FORMAT, "%s: tensor '%s' twice (%s and %s)", c->dir, t[i].name,
                             c->shard_names[t[i - 1].shard], c->shard_names[t[i].shard]);
            free(t);
            return rc;
        }
    free(c->tensors);
    c->tensors = t;
    c->n_tensors = n;
    return ERR_OK;
}

void ckpt_close(struct ckpt *c)
{
    if (!c)
        return;
    for (size_t i = 0; i < c->n_shards; i++) {
        st_close(&c->shards[i]);
        free(c->shard_names[i]);
    }
    free(c->shards);
    free(c->shard_names);
    free(c->tensors);
    for (size_t i = 0; i < c->n_warnings; i++)
        free(c->warnings[i]);
    free(c->warnings);
    free(c->dir);
    memset(c, 0, sizeof *c);
}

const struct ckpt_tensor *ckpt_find(const struct ckpt *c, const char *name)
{
    struct ckpt_tensor key = {.name = name};
    return bsearch(&key, c->tensors, c->n_tensors, sizeof key, cmp_ct);
}
