#include "ingest/source.h"

#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/bytes.h"
#include "model/config.h"
#include "core/fileio.h"
#include "core/jsonx.h"
#include "core/text.h"
#include "ingest/transcode.h"

const char *source_kind_name(enum source_kind k)
{
    return k == SRC_CT ? "compressed-tensors" : k == SRC_GGUF ? "gguf" : "safetensors";
}

/* ---- shards ---- */

static int st_append(struct tshard *s, const char *name, enum dtype dt, int rank, const uint64_t *shape,
                     uint64_t begin, uint64_t end, struct err *e)
{
    if (s->f.n_tensors == s->cap_t) {
        size_t cap = s->cap_t ? 2 * s->cap_t : 64;
        struct st_tensor *t = realloc(s->f.tensors, cap * sizeof *t);
        if (!t)
            return err_set(e, ERR_NOMEM, "cannot allocate %zu tensor records", cap);
        s->f.tensors = t;
        s->cap_t = cap;
    }
    struct st_tensor *t = &s->f.tensors[s->f.n_tensors];
    memset(t, 0, sizeof *t);
    if (!(t->name = strdup(name)))
        return err_set(e, ERR_NOMEM, "out of memory");
    t->dtype = dt;
    t->rank = rank;
    memcpy(t->shape, shape, (size_t)rank * sizeof *shape);
    t->begin = begin;
    t->end = end;
    s->f.n_tensors++;
    return ERR_OK;
}

int ts_add(struct tshard *s, const char *name, enum dtype dt, int rank, const uint64_t *shape, uint8_t **out,
           struct err *e)
{
    uint64_t nbytes, begin = (s->len + 63) & ~(uint64_t)63, end;
    int rc = dtype_nbytes(dt, shape, rank, &nbytes, e);
    if (rc != ERR_OK)
        return err_prefix(e, "%s", name);
    if (!ck_add_u64(begin, nbytes, &end))
        return err_set(e, ERR_NOMEM, "%s: %llu bytes do not fit", name, (unsigned long long)nbytes);
    if (s->data && end > s->cap) {
        uint64_t cap = s->cap ? s->cap : 1u << 20;
        while (cap < end)
            cap *= 2;
        uint8_t *b = cap == (size_t)cap ? realloc(s->buf, (size_t)cap) : NULL;
        if (!b)
            return err_set(e, ERR_NOMEM, "%s: cannot hold %llu transcoded bytes", name, (unsigned long long)cap);
        memset(b + s->cap, 0, (size_t)(cap - s->cap));
        s->buf = b;
        s->cap = cap;
    }
    if ((rc = st_append(s, name, dt, rank, shape, begin, end, e)) != ERR_OK)
        return rc;
    s->len = end;
    *out = s->data ? s->buf + begin : NULL;
    return ERR_OK;
}

int ts_view(struct tshard *s, const char *name, enum dtype dt, int rank, const uint64_t *shape, uint64_t begin,
            uint64_t end, struct err *e)
{
    return st_append(s, name, dt, rank, shape, begin, end, e);
}

static int cmp_tensor(const void *a, const void *b)
{
    return strcmp(((const struct st_tensor *)a)->name, ((const struct st_tensor *)b)->name);
}

int ts_commit(struct source *src, struct tshard *s, const char *name, struct err *e)
{
    if (s->f.n_tensors)
        qsort(s->f.tensors, s->f.n_tensors, sizeof *s->f.tensors, cmp_tensor);
    if (s->buf && src->mem)
        return err_set(e, ERR_USAGE, "%s: a second memory shard", src->path);
    if (s->buf) {
        s->f.map = s->buf;
        s->f.file_size = s->len;
        src->mem = s->buf; /* freed by source_close; the shard never unmaps (map_len 0) */
        s->buf = NULL;
    } else if (!s->f.map) {
        s->f.truncated = true; /* shapes only */
        s->f.file_size = s->len;
    }
    if (!s->f.path && !(s->f.path = strdup(name)))
        return err_set(e, ERR_NOMEM, "out of memory");
    return ckpt_add_shard(&src->ck, &s->f, name, e);
}

/* ---- records ---- */

void src_problem(struct source *s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    text_list_vadd(&s->problems, &s->n_problems, fmt, ap);
    va_end(ap);
}

struct source_module *src_module(struct source *s, const char *name, const char *key, const char *from,
                                 const char *to)
{
    struct source_module *m = realloc(s->mods, (s->n_mods + 1) * sizeof *m);
    if (!m)
        return NULL;
    s->mods = m;
    m += s->n_mods++;
    memset(m, 0, sizeof *m);
    snprintf(m->name, sizeof m->name, "%s", name);
    snprintf(m->key, sizeof m->key, "%s", key);
    snprintf(m->from, sizeof m->from, "%s", from);
    snprintf(m->to, sizeof m->to, "%s", to);
    m->exact = true;
    return m;
}

const struct source_module *source_find_module(const struct source *s, const char *key)
{
    for (size_t i = 0; i < s->n_mods; i++)
        if (!strcmp(s->mods[i].key, key))
            return &s->mods[i];
    return NULL;
}

void verify_group(struct source_module *m, float sa, float ba, int bits, double ss, double shift)
{
    double d = qformat_of(QM_AFFINE)->verify(sa, ba, bits, ss, shift);
    m->verified = true;
    if (d != 0.0) {
        m->exact = false;
        m->max_abs_err = d > m->max_abs_err || d != d ? d : m->max_abs_err;
    }
}

int affine_group_for(uint64_t g)
{
    return g % 128 == 0 ? 128 : g % 64 == 0 ? 64 : g % 32 == 0 ? 32 : 0;
}

/* ---- opening ---- */

/* True when the config's quantization_config is compressed-tensors'. */
static bool is_ct(struct json_object *root)
{
    struct json_object *q, *m, *t;
    if (!json_object_object_get_ex(root, "quantization_config", &q) &&
        !(json_object_object_get_ex(root, "text_config", &t) && json_object_get_type(t) == json_type_object &&
          json_object_object_get_ex(t, "quantization_config", &q)))
        return false;
    return json_object_get_type(q) == json_type_object && json_object_object_get_ex(q, "quant_method", &m) &&
           json_object_get_type(m) == json_type_string && !strcmp(json_object_get_string(m), "compressed-tensors");
}

static int open_dir(struct source *s, const char *dir, unsigned flags, struct err *e)
{
    if (!(s->config_name = fio_join(dir, "config.json")))
        return err_set(e, ERR_NOMEM, "cannot allocate a path");
    int rc = fio_read_file(s->config_name, FIO_INPUT, CFG_MAX_BYTES, &s->config_text, &s->config_len, e);
    if (rc != ERR_OK)
        return rc;
    struct json_object *root = NULL;
    if (jsonx_parse(s->config_text, s->config_len, &root, NULL) == ERR_OK && json_object_get_type(root) ==
                                                                                  json_type_object &&
        is_ct(root)) {
        s->kind = SRC_CT;
        /* compressed-tensors needs each module's weight_shape: the data is mapped */
        unsigned st_flags = (flags & SRC_TRUNCATED) ? ST_HEADER_ONLY | ST_ALLOW_TRUNCATED : 0;
        rc = ckpt_open(&s->ck, dir, st_flags, e);
        if (rc == ERR_OK)
            rc = ct_open(s, root, flags, e);
    } else {
        unsigned st_flags = (flags & SRC_HEADERS ? ST_HEADER_ONLY : 0) | (flags & SRC_TRUNCATED ? ST_ALLOW_TRUNCATED : 0);
        rc = ckpt_open(&s->ck, dir, st_flags, e);
    }
    json_object_put(root);
    return rc;
}

enum input_kind input_kind(const char *path)
{
    struct stat st;
    char magic[8] = {0};
    int fd;
    if (stat(path, &st) != 0)
        return IN_MISSING;
    if (S_ISDIR(st.st_mode))
        return IN_DIR;
    if (!S_ISREG(st.st_mode) || fio_open_read(path, 0, &fd, NULL, NULL) != ERR_OK)
        return IN_OTHER;
    bool read = pread(fd, magic, sizeof magic, 0) >= 4; /* a shorter file keeps zeros, which no magic holds */
    close(fd);
    return !read ? IN_OTHER : !memcmp(magic, "GGUF", 4) ? IN_GGUF : !memcmp(magic, PACK_MAGIC, 8) ? IN_PACK
         : !memcmp(magic, "PK\x03\x04", 4) ? IN_NPZ : IN_OTHER;
}

int input_lone_gguf(const char *dir, char **out, struct err *e)
{
    *out = NULL;
    struct stat st;
    char *cfg = fio_join(dir, "config.json");
    if (!cfg)
        return err_set(e, ERR_NOMEM, "out of memory");
    const bool none = lstat(cfg, &st) != 0 && errno == ENOENT; /* a broken link is a config.json, reported later */
    free(cfg);
    if (!none)
        return ERR_OK;
    DIR *d = opendir(dir);
    if (!d)
        return err_set(e, ERR_IO, "%s: cannot list: %s", dir, strerror(errno));
    char *found[2] = {NULL, NULL};
    int n = 0, rc = ERR_OK;
    for (struct dirent *de; rc == ERR_OK && n < 2;) {
        errno = 0;
        if (!(de = readdir(d))) {
            if (errno)
                rc = err_set(e, ERR_IO, "%s: cannot list: %s", dir, strerror(errno));
            break;
        }
        const size_t len = strlen(de->d_name);
        if (len <= 5 || strcmp(de->d_name + len - 5, ".gguf"))
            continue;
        char *p = fio_join(dir, de->d_name);
        if (!p)
            rc = err_set(e, ERR_NOMEM, "out of memory");
        else if (stat(p, &st) == 0 && S_ISREG(st.st_mode)) /* a link to a file counts; a directory, FIFO: not */
            found[n++] = p;
        else
            free(p);
    }
    closedir(d);
    if (rc == ERR_OK && n == 2)
        rc = err_set(e, ERR_USAGE, "%s: no config.json and more than one .gguf file (%s, %s ...): name the one to read",
                     dir, found[0], found[1]);
    if (rc == ERR_OK && n == 1)
        *out = found[0], found[0] = NULL;
    free(found[0]);
    free(found[1]);
    return rc;
}

/* A pack: validated by core/pack.c, its "quantized" entries by the format
 * table (quant_check_pack); its config is the manifest's model.config. */
static int open_pack(struct source *s, const char *path, struct err *e)
{
    s->kind = SRC_PACK;
    int rc = pack_open(&s->pack, path, e);
    if (rc == ERR_OK)
        rc = quant_check_pack(&s->pack, e);
    if (rc != ERR_OK)
        return rc;
    struct json_object *model, *cfg, *rt, *v;
    if (!json_object_object_get_ex(s->pack.manifest, "model", &model) ||
        !json_object_object_get_ex(model, "config", &cfg) || json_object_get_type(cfg) != json_type_object)
        return err_set(e, ERR_FORMAT, "%s: manifest has no model.config object", path);
    if (json_object_object_get_ex(s->pack.manifest, "runtime", &rt) &&
        json_object_object_get_ex(rt, "kv_skip_last_full_attention", &v) && json_object_get_type(v) == json_type_boolean)
        s->kv_skip_last_full = json_object_get_boolean(v);
    if (!(s->config_text = strdup(json_object_to_json_string_ext(cfg, JSON_C_TO_STRING_PLAIN))) ||
        asprintf(&s->config_name, "%s: manifest model.config", path) < 0)
        return err_set(e, ERR_NOMEM, "out of memory");
    s->config_len = strlen(s->config_text);
    return ERR_OK;
}

int source_open(struct source *s, const char *path, unsigned flags, struct err *e)
{
    memset(s, 0, sizeof *s);
    s->kv_skip_last_full = true;
    enum input_kind k = input_kind(path);
    char *lone = NULL;
    int lrc = k == IN_DIR ? input_lone_gguf(path, &lone, e) : ERR_OK;
    if (lrc != ERR_OK)
        return lrc;
    if (lone) /* read as a GGUF whatever its bytes: gguf_open says what is wrong with them */
        s->path = lone, path = lone, k = IN_GGUF;
    else if (!(s->path = strdup(path)))
        return err_set(e, ERR_NOMEM, "out of memory");
    if (k == IN_GGUF) {
        s->kind = SRC_GGUF;
        if (!(s->config_name = strdup(path)))
            return err_set(e, ERR_NOMEM, "out of memory");
        int rc = gguf_open(&s->gguf, path, e);
        if (rc == ERR_OK)
            rc = ckpt_init_empty(&s->ck, path, e);
        return rc == ERR_OK ? gguf_src_open(s, flags, e) : rc;
    }
    if (k != IN_DIR && (flags & SRC_PACK_ANY))
        return k == IN_MISSING ? err_set(e, ERR_IO, "%s: no such file or directory", path) : open_pack(s, path, e);
    int rc = fio_check_dir(path, e);
    return rc == ERR_OK ? open_dir(s, path, flags, e) : rc;
}

void source_close(struct source *s)
{
    if (!s)
        return;
    ckpt_close(&s->ck);
    gguf_close(&s->gguf);
    pack_close(&s->pack);
    free(s->mem);
    free(s->mods);
    for (size_t i = 0; i < s->n_problems; i++)
        free(s->problems[i]);
    free(s->problems);
    free(s->config_text);
    free(s->config_name);
    free(s->path);
    memset(s, 0, sizeof *s);
}
