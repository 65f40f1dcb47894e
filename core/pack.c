#include "core/pack.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/bytes.h"
#include "core/crc.h"
#include "core/fileio.h"
#include "core/jsonx.h"
#include "core/sha256.h"

/* ---- writer ---- */

int pack_writer_open(struct pack_writer *w, const char *path, uint32_t alignment, struct err *e)
{
    memset(w, 0, sizeof *w);
    w->out.fd = -1;
    if (alignment < 64 || alignment > 65536 || (alignment & (alignment - 1)))
        return err_set(e, ERR_USAGE, "alignment %u: expected a power of two from 64 to 65536", alignment);
    w->align = alignment;
    int rc = fio_out_open(&w->out, path, e);
    if (rc != ERR_OK)
        return rc;
    /* header placeholder and padding up to data_offset = alignment */
    uint8_t *zeros = calloc(1, alignment);
    if (!zeros) {
        pack_writer_abort(w);
        return err_set(e, ERR_NOMEM, "cannot allocate %u bytes", alignment);
    }
    rc = fio_write_all(w->out.fd, zeros, alignment, w->out.tmp, e);
    free(zeros);
    if (rc != ERR_OK)
        pack_writer_abort(w);
    return rc;
}

static int write_zeros(struct pack_writer *w, uint64_t n, struct err *e)
{
    static const uint8_t zeros[4096];
    while (n) {
        size_t take = n > sizeof zeros ? sizeof zeros : (size_t)n;
        int rc = fio_write_all(w->out.fd, zeros, take, w->out.tmp, e);
        if (rc != ERR_OK)
            return rc;
        n -= take;
        w->pos += take;
    }
    return ERR_OK;
}

/* Zeros up to the next aligned offset, where a tensor or file starts. */
static int pad_to_alignment(struct pack_writer *w, struct err *e)
{
    uint64_t aligned;
    if (!ck_align_u64(w->pos, w->align, &aligned))
        return err_set(e, ERR_RANGE, "%s: data offset overflows", w->out.tmp);
    return write_zeros(w, aligned - w->pos, e);
}

int pack_writer_begin(struct pack_writer *w, const char *name, enum dtype dtype, int rank, const uint64_t *shape,
                      struct err *e)
{
    if (w->open_tensor)
        return err_set(e, ERR_USAGE, "%s: tensor '%s' begun before the previous one ended", w->out.tmp, name);
    if (w->n_files)
        return err_set(e, ERR_USAGE, "%s: tensor '%s' begun after file '%s' (files follow the tensors)", w->out.tmp,
                       name, w->f[w->n_files - 1].name);
    if (rank < 0 || rank > PACK_MAX_RANK || strlen(name) == 0 || strlen(name) > PACK_MAX_NAME)
        return err_set(e, ERR_USAGE, "%s: tensor '%s': rank %d or name length out of range", w->out.tmp, name, rank);
    if (w->n == w->cap) {
        size_t cap = w->cap ? 2 * w->cap : 256;
        struct pack_tensor *t = realloc(w->t, cap * sizeof *t);
        if (!t)
            return err_set(e, ERR_NOMEM, "cannot grow the tensor list");
        w->t = t;
        w->cap = cap;
    }
    int rc = pad_to_alignment(w, e);
    if (rc != ERR_OK)
        return rc;
    struct pack_tensor *t = &w->t[w->n];
    memset(t, 0, sizeof *t);
    t->name = strdup(name);
    if (!t->name)
        return err_set(e, ERR_NOMEM, "cannot copy a name");
    t->dtype = dtype;
    t->rank = rank;
    memcpy(t->shape, shape, (size_t)rank * sizeof *shape);
    t->offset = w->pos;
    if ((rc = dtype_nbytes(dtype, t->shape, rank, &t->nbytes, e)) != ERR_OK) {
        free(t->name);
        return err_prefix(e, "tensor '%s'", name);
    }
    w->n++;
    w->open_tensor = true;
    w->written = 0;
    w->crc = 0;
    return ERR_OK;
}

int pack_writer_write(struct pack_writer *w, const void *data, size_t len, struct err *e)
{
    if (!w->open_tensor)
        return err_set(e, ERR_USAGE, "%s: %zu bytes written outside a tensor (no pack_writer_begin)", w->out.tmp, len);
    struct pack_tensor *t = &w->t[w->n - 1];
    if (w->written + len > t->nbytes)
        return err_set(e, ERR_USAGE, "%s: %zu bytes beyond tensor '%s' (%llu bytes)", w->out.tmp, len, t->name,
                       (unsigned long long)t->nbytes);
    int rc = fio_write_all(w->out.fd, data, len, w->out.tmp, e);
    if (rc != ERR_OK)
        return rc;
    w->crc = crc32_update(w->crc, data, len);
    w->written += len;
    w->pos += len;
    return ERR_OK;
}

int pack_writer_end(struct pack_writer *w, struct err *e)
{
    if (!w->open_tensor)
        return err_set(e, ERR_USAGE, "%s: pack_writer_end without an open tensor", w->out.tmp);
    struct pack_tensor *t = &w->t[w->n - 1];
    if (w->written != t->nbytes)
        return err_set(e, ERR_USAGE, "%s: tensor '%s' got %llu of %llu bytes", w->out.tmp, t->name,
                       (unsigned long long)w->written, (unsigned long long)t->nbytes);
    t->crc32 = w->crc;
    w->open_tensor = false;
    return ERR_OK;
}

/* Whether name is a plain file name a pack may store: 1..255 bytes, no '/' or NUL, not "." or "..". */
static bool file_name_ok(const char *name, size_t len)
{
    return len >= 1 && len <= PACK_MAX_FILE_NAME && strlen(name) == len && !memchr(name, '/', len) &&
           strcmp(name, ".") && strcmp(name, "..");
}

int pack_writer_add_file(struct pack_writer *w, const char *name, const void *data, size_t len, struct err *e)
{
    if (w->open_tensor)
        return err_set(e, ERR_USAGE, "%s: file '%s' added with tensor '%s' still open", w->out.tmp, name,
                       w->t[w->n - 1].name);
    if (!file_name_ok(name, strlen(name)))
        return err_set(e, ERR_USAGE, "%s: file name '%s': expected 1 to %d bytes without '/', not . or ..",
                       w->out.tmp, name, PACK_MAX_FILE_NAME);
    for (size_t i = 0; i < w->n_files; i++)
        if (!strcmp(w->f[i].name, name))
            return err_set(e, ERR_USAGE, "%s: file '%s' added twice", w->out.tmp, name);
    if (w->n_files == PACK_MAX_FILES)
        return err_set(e, ERR_RANGE, "%s: file '%s': at most %d files", w->out.tmp, name, PACK_MAX_FILES);
    struct pack_file *f = realloc(w->f, (w->n_files + 1) * sizeof *f);
    if (f)
        w->f = f;
    char(*sha)[65] = f ? realloc(w->f_sha, (w->n_files + 1) * sizeof *sha) : NULL;
    if (!sha)
        return err_set(e, ERR_NOMEM, "cannot grow the file list");
    w->f_sha = sha;
    int rc = pad_to_alignment(w, e);
    if (rc != ERR_OK)
        return rc;
    f = &w->f[w->n_files];
    if (!(f->name = strdup(name)))
        return err_set(e, ERR_NOMEM, "cannot copy a name");
    f->offset = w->pos;
    f->nbytes = len;
    f->crc32 = crc32_update(0, data, len);
    sha256_hex(data, len, w->f_sha[w->n_files]);
    w->n_files++;
    if ((rc = fio_write_all(w->out.fd, data, len, w->out.tmp, e)) != ERR_OK)
        return rc;
    w->pos += len;
    return ERR_OK;
}

static struct json_object *tensor_record(const struct pack_tensor *t)
{
    struct json_object *o = json_object_new_object(), *s = json_object_new_array();
    json_object_object_add(o, "name", json_object_new_string(t->name));
    json_object_object_add(o, "dtype", json_object_new_string(dtype_name(t->dtype)));
    for (int d = 0; d < t->rank; d++)
        json_object_array_add(s, json_object_new_int64((int64_t)t->shape[d]));
    json_object_object_add(o, "shape", s);
    json_object_object_add(o, "offset", json_object_new_int64((int64_t)t->offset));
    json_object_object_add(o, "nbytes", json_object_new_int64((int64_t)t->nbytes));
    json_object_object_add(o, "crc32", json_object_new_int64(t->crc32));
    return o;
}

/* Appends the manifest js to a file holding the header's place and
 * data_size data bytes at offset `align`, writes the header last and commits. */
static int finish_file(struct fio_out *out, uint32_t align, uint64_t data_size, const char *js, size_t mlen,
                       struct err *e)
{
    uint64_t data_offset = align, manifest_offset = data_offset + data_size;
    int rc = fio_write_all(out->fd, js, mlen, out->tmp, e);
    if (rc != ERR_OK)
        return rc;
    uint8_t h[PACK_HEADER_SIZE] = {0};
    memcpy(h, PACK_MAGIC, 8);
    wr_u16le(h + 8, PACK_VERSION_MAJOR);
    wr_u16le(h + 10, PACK_VERSION_MINOR);
    wr_u32le(h + 12, align);
    wr_u64le(h + 16, manifest_offset + mlen);
    wr_u64le(h + 24, data_offset);
    wr_u64le(h + 32, data_size);
    wr_u64le(h + 40, manifest_offset);
    wr_u64le(h + 48, mlen);
    wr_u32le(h + 56, crc32_update(0, js, mlen));
    wr_u32le(h + 60, crc32_update(0, h, 60));
    fio_crash_point();
    if (pwrite(out->fd, h, sizeof h, 0) != (ssize_t)sizeof h)
        return err_set(e, ERR_IO, "%s: writing the header failed: %s", out->tmp, strerror(errno));
    return fio_out_commit(out, e);
}

int pack_writer_finish(struct pack_writer *w, struct json_object *fields, const char *const *extra_features,
                       size_t n_extra, struct err *e)
{
    int rc = ERR_OK;
    if (w->open_tensor) {
        json_object_put(fields);
        return err_set(e, ERR_USAGE, "%s: finished with tensor '%s' still open", w->out.tmp, w->t[w->n - 1].name);
    }
    struct json_object *m = json_object_new_object();
    json_object_object_add(m, "format", json_object_new_string("gempack"));
    struct json_object *ver = json_object_new_array();
    json_object_array_add(ver, json_object_new_int(PACK_VERSION_MAJOR));
    json_object_array_add(ver, json_object_new_int(PACK_VERSION_MINOR));
    json_object_object_add(m, "version", ver);
    struct json_object *feat = json_object_new_array();
    bool used[DT_COUNT] = {false};
    for (size_t i = 0; i < w->n; i++)
        used[w->t[i].dtype] = true;
    for (int d = 0; d < DT_COUNT; d++)
        if (used[d]) {
            char f[32];
            snprintf(f, sizeof f, "dtype:%s", dtype_name((enum dtype)d));
            json_object_array_add(feat, json_object_new_string(f));
        }
    for (size_t i = 0; i < n_extra; i++)
        json_object_array_add(feat, json_object_new_string(extra_features[i]));
    if (w->n_files)
        json_object_array_add(feat, json_object_new_string("files"));
    json_object_object_add(m, "required_features", feat);
    json_object_object_foreach(fields, key, val) json_object_object_add(m, key, json_object_get(val));
    json_object_put(fields);
    struct json_object *ts = json_object_new_array();
    for (size_t i = 0; i < w->n; i++)
        json_object_array_add(ts, tensor_record(&w->t[i]));
    json_object_object_add(m, "tensors", ts);
    if (w->n_files) {
        struct json_object *fs = json_object_new_array();
        for (size_t i = 0; i < w->n_files; i++) {
            struct json_object *o = json_object_new_object();
            json_object_object_add(o, "name", json_object_new_string(w->f[i].name));
            json_object_object_add(o, "offset", json_object_new_int64((int64_t)w->f[i].offset));
            json_object_object_add(o, "nbytes", json_object_new_int64((int64_t)w->f[i].nbytes));
            json_object_object_add(o, "crc32", json_object_new_int64(w->f[i].crc32));
            json_object_object_add(o, "sha256", json_object_new_string(w->f_sha[i]));
            json_object_array_add(fs, o);
        }
        json_object_object_add(m, "files", fs);
    }
    const char *js = json_object_to_json_string_ext(m, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
    size_t mlen = strlen(js);
    if (mlen > PACK_MAX_MANIFEST) {
        rc = err_set(e, ERR_RANGE, "%s: manifest of %zu bytes exceeds the %u-byte limit", w->out.tmp, mlen,
                     PACK_MAX_MANIFEST);
        goto out;
    }
    rc = finish_file(&w->out, w->align, w->pos, js, mlen, e);
out:
    json_object_put(m);
    pack_writer_abort(w);
    return rc;
}

void pack_writer_abort(struct pack_writer *w)
{
    if (!w)
        return;
    fio_out_abort(&w->out);
    for (size_t i = 0; i < w->n; i++)
        free(w->t[i].name);
    free(w->t);
    for (size_t i = 0; i < w->n_files; i++)
        free(w->f[i].name);
    free(w->f);
    free(w->f_sha);
    memset(w, 0, sizeof *w);
    w->out.fd = -1;
}

/* ---- reader ---- */

bool pack_feature_known(const char *f)
{
    static const char *const known[] = {"files", "quant:affine", "quant:mxfp4", "quant:nvfp4", "quant:mxfp8", "quant:ggml"};
    if (!strncmp(f, "dtype:", 6)) {
        enum dtype d;
        return dtype_from_name(f + 6, strlen(f + 6), &d) &&
               (dtype_is_weight_float(d) || d == DT_U32 || d == DT_U8 || d == DT_I32);
    }
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (!strcmp(f, known[i]))
            return true;
    return false;
}

/* A tensor's name and index, sorted by name (qsort_r's argument order differs
 * between glibc and the BSDs). */
struct name_index {
    const char *name;
    size_t i;
};

static int cmp_name_index(const void *a, const void *b)
{
    return strcmp(((const struct name_index *)a)->name, ((const struct name_index *)b)->name);
}

static int parse_record(struct pack *p, size_t i, struct json_object *r, struct err *e)
{
    struct pack_tensor *t = &p->tensors[i];
    struct json_object *v;
    if (json_object_get_type(r) != json_type_object)
        return err_set(e, ERR_FORMAT, "%s: manifest tensors[%zu] is %s, expected an object", p->path, i,
                       jsonx_type_name(r));
    if (!json_object_object_get_ex(r, "name", &v) || json_object_get_type(v) != json_type_string)
        return err_set(e, ERR_FORMAT, "%s: manifest tensors[%zu].name missing or not a string", p->path, i);
    size_t nlen = (size_t)json_object_get_string_len(v);
    const char *name = json_object_get_string(v);
    if (nlen == 0 || nlen > PACK_MAX_NAME || strlen(name) != nlen)
        return err_set(e, ERR_FORMAT, "%s: manifest tensors[%zu].name has %zu bytes (NUL inside or out of 1..%d)",
                       p->path, i, nlen, PACK_MAX_NAME);
    if (!(t->name = strdup(name)))
        return err_set(e, ERR_NOMEM, "cannot copy a name");
    if (!json_object_object_get_ex(r, "dtype", &v) || json_object_get_type(v) != json_type_string ||
        !dtype_from_name(json_object_get_string(v), (size_t)json_object_get_string_len(v), &t->dtype))
        return err_set(e, ERR_FORMAT, "%s: tensor '%s': dtype %s is not a known dtype", p->path, name,
                       v ? json_object_to_json_string(v) : "missing");
    if (!json_object_object_get_ex(r, "shape", &v) || json_object_get_type(v) != json_type_array ||
        json_object_array_length(v) > PACK_MAX_RANK)
        return err_set(e, ERR_FORMAT, "%s: tensor '%s': shape missing, not an array, or rank above %d", p->path, name,
                       PACK_MAX_RANK);
    t->rank = (int)json_object_array_length(v);
    for (int d = 0; d < t->rank; d++)
        if (!jsonx_u64(json_object_array_get_idx(v, (size_t)d), &t->shape[d]))
            return err_set(e, ERR_FORMAT, "%s: tensor '%s': shape[%d] is not a non-negative integer below 2^63",
                           p->path, name, d);
    uint64_t expect, crc;
    if (dtype_nbytes(t->dtype, t->shape, t->rank, &expect, e) != ERR_OK)
        return err_prefix(e, "%s: tensor '%s'", p->path, name);
    if (!json_object_object_get_ex(r, "offset", &v) || !jsonx_u64(v, &t->offset) ||
        !json_object_object_get_ex(r, "nbytes", &v) || !jsonx_u64(v, &t->nbytes) ||
        !json_object_object_get_ex(r, "crc32", &v) || !jsonx_u64(v, &crc) || crc > UINT32_MAX)
        return err_set(e, ERR_FORMAT, "%s: tensor '%s': offset, nbytes or crc32 missing or out of range", p->path,
                       name);
    t->crc32 = (uint32_t)crc;
    if (t->nbytes != expect)
        return err_set(e, ERR_FORMAT, "%s: tensor '%s': nbytes %llu, but shape x %s needs %llu", p->path, name,
                       (unsigned long long)t->nbytes, dtype_name(t->dtype), (unsigned long long)expect);
    if (t->offset % p->align)
        return err_set(e, ERR_FORMAT, "%s: tensor '%s': offset %llu is not a multiple of the alignment %u", p->path,
                       name, (unsigned long long)t->offset, p->align);
    uint64_t end;
    if (!ck_add_u64(t->offset, t->nbytes, &end) || end > p->data_size)
        return err_set(e, ERR_FORMAT, "%s: tensor '%s': [%llu, +%llu) reaches beyond the %llu-byte data region",
                       p->path, name, (unsigned long long)t->offset, (unsigned long long)t->nbytes,
                       (unsigned long long)p->data_size);
    if (i > 0) {
        const struct pack_tensor *prev = &p->tensors[i - 1];
        if (t->offset < prev->offset + prev->nbytes || (t->offset == prev->offset && prev->nbytes))
            return err_set(e, ERR_FORMAT, "%s: tensor '%s' at %llu overlaps or precedes '%s' (offsets must increase)",
                           p->path, name, (unsigned long long)t->offset, prev->name);
    }
    return ERR_OK;
}

/* The end and name of region i of the data section (the tensors, then the files). */
static const char *region_end(const struct pack *p, size_t i, uint64_t *end)
{
    if (i < p->n_tensors) {
        *end = p->tensors[i].offset + p->tensors[i].nbytes;
        return p->tensors[i].name;
    }
    *end = p->files[i - p->n_tensors].offset + p->files[i - p->n_tensors].nbytes;
    return p->files[i - p->n_tensors].name;
}

static bool is_sha256_hex(struct json_object *v)
{
    if (json_object_get_type(v) != json_type_string || json_object_get_string_len(v) != 64)
        return false;
    const char *s = json_object_get_string(v);
    for (int i = 0; i < 64; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return false;
    return true;
}

/* The "files" records: plain unique names, aligned, inside the data region,
 * after the tensors and each other without overlap. */
static int parse_files(struct pack *p, struct json_object *fs, struct err *e)
{
    if (json_object_get_type(fs) != json_type_array)
        return err_set(e, ERR_FORMAT, "%s: manifest \"files\" is %s, expected an array", p->path, jsonx_type_name(fs));
    size_t n = json_object_array_length(fs);
    if (n > PACK_MAX_FILES)
        return err_set(e, ERR_RANGE, "%s: %zu files, above the limit of %d", p->path, n, PACK_MAX_FILES);
    if (!(p->files = calloc(n ? n : 1, sizeof *p->files)))
        return err_set(e, ERR_NOMEM, "%s: cannot allocate %zu file records", p->path, n);
    for (size_t i = 0; i < n; i++) {
        struct json_object *r = json_object_array_get_idx(fs, i), *v;
        struct pack_file *f = &p->files[i];
        p->n_files = i + 1;
        if (json_object_get_type(r) != json_type_object)
            return err_set(e, ERR_FORMAT, "%s: manifest files[%zu] is %s, expected an object", p->path, i,
                           jsonx_type_name(r));
        if (!json_object_object_get_ex(r, "name", &v) || json_object_get_type(v) != json_type_string ||
            !file_name_ok(json_object_get_string(v), (size_t)json_object_get_string_len(v)))
            return err_set(e, ERR_FORMAT, "%s: manifest files[%zu].name: expected a string of 1 to %d bytes without "
                           "'/' or NUL, not . or ..", p->path, i, PACK_MAX_FILE_NAME);
        if (!(f->name = strdup(json_object_get_string(v))))
            return err_set(e, ERR_NOMEM, "cannot copy a name");
        for (size_t j = 0; j < i; j++)
            if (!strcmp(p->files[j].name, f->name))
                return err_set(e, ERR_FORMAT, "%s: file '%s' is listed twice", p->path, f->name);
        uint64_t crc, end, prev_end;
        if (!json_object_object_get_ex(r, "offset", &v) || !jsonx_u64(v, &f->offset) ||
            !json_object_object_get_ex(r, "nbytes", &v) || !jsonx_u64(v, &f->nbytes) ||
            !json_object_object_get_ex(r, "crc32", &v) || !jsonx_u64(v, &crc) || crc > UINT32_MAX)
            return err_set(e, ERR_FORMAT, "%s: file '%s': offset, nbytes or crc32 missing or out of range", p->path,
                           f->name);
        f->crc32 = (uint32_t)crc;
        if (!json_object_object_get_ex(r, "sha256", &v) || !is_sha256_hex(v))
            return err_set(e, ERR_FORMAT, "%s: file '%s': sha256 missing or not 64 lower-case hex digits", p->path,
                           f->name);
        if (f->offset % p->align)
            return err_set(e, ERR_FORMAT, "%s: file '%s': offset %llu is not a multiple of the alignment %u", p->path,
                           f->name, (unsigned long long)f->offset, p->align);
        if (!ck_add_u64(f->offset, f->nbytes, &end) || end > p->data_size)
            return err_set(e, ERR_FORMAT, "%s: file '%s': [%llu, +%llu) reaches beyond the %llu-byte data region",
                           p->path, f->name, (unsigned long long)f->offset, (unsigned long long)f->nbytes,
                           (unsigned long long)p->data_size);
        const char *prev = p->n_tensors + i ? region_end(p, p->n_tensors + i - 1, &prev_end) : NULL;
        if (prev && f->offset < prev_end)
            return err_set(e, ERR_FORMAT, "%s: file '%s' at %llu overlaps or precedes '%s' (files follow the tensors, "
                           "offsets increasing)", p->path, f->name, (unsigned long long)f->offset, prev);
    }
    return ERR_OK;
}

static int validate(struct pack *p, struct err *e)
{
    const uint8_t *h = p->map;
    if (p->size < PACK_HEADER_SIZE)
        return err_set(e, ERR_FORMAT, "%s: %zu bytes, too small for the 64-byte pack header", p->path, p->size);
    if (memcmp(h, PACK_MAGIC, 8) != 0)
        return err_set(e, ERR_FORMAT, "%s: not a gempack pack (bad magic%s)", p->path,
                       memcmp(h + 1, "GPK", 3) == 0 ? "; line endings mangled by a text-mode transfer?" : "");
    uint16_t major = rd_u16le(h + 8);
    p->version_minor = rd_u16le(h + 10);
    uint32_t hcrc = crc32_update(0, h, 60);
    if (rd_u32le(h + 60) != hcrc)
        return err_set(e, ERR_FORMAT, "%s: header CRC 0x%08x, computed 0x%08x (damaged header)", p->path,
                       rd_u32le(h + 60), hcrc);
    if (major != PACK_VERSION_MAJOR)
        return err_set(e, ERR_UNSUPPORTED, "%s: pack version %u.%u, this gempack reads version %d.x", p->path, major,
                       p->version_minor, PACK_VERSION_MAJOR);
    p->align = rd_u32le(h + 12);
    uint64_t file_size = rd_u64le(h + 16);
    p->data_offset = rd_u64le(h + 24);
    p->data_size = rd_u64le(h + 32);
    p->manifest_offset = rd_u64le(h + 40);
    p->manifest_size = rd_u64le(h + 48);
    if (p->align < 64 || p->align > 65536 || (p->align & (p->align - 1)))
        return err_set(e, ERR_FORMAT, "%s: alignment %u, expected a power of two from 64 to 65536", p->path, p->align);
    if (file_size != p->size)
        return err_set(e, ERR_FORMAT, "%s: header says %llu bytes, the file has %zu (%s)", p->path,
                       (unsigned long long)file_size, p->size, file_size > p->size ? "truncated" : "trailing bytes");
    uint64_t end;
    if (p->data_offset < PACK_HEADER_SIZE || p->data_offset % p->align ||
        !ck_add_u64(p->data_offset, p->data_size, &end) || end != p->manifest_offset ||
        !ck_add_u64(p->manifest_offset, p->manifest_size, &end) || end != file_size)
        return err_set(e, ERR_FORMAT, "%s: regions do not tile the file (data %llu+%llu, manifest %llu+%llu, size %llu)",
                       p->path, (unsigned long long)p->data_offset, (unsigned long long)p->data_size,
                       (unsigned long long)p->manifest_offset, (unsigned long long)p->manifest_size,
                       (unsigned long long)file_size);
    if (p->manifest_size > PACK_MAX_MANIFEST)
        return err_set(e, ERR_RANGE, "%s: manifest of %llu bytes exceeds the %u-byte limit", p->path,
                       (unsigned long long)p->manifest_size, PACK_MAX_MANIFEST);
    const char *ms = (const char *)p->map + p->manifest_offset;
    uint32_t mcrc = crc32_update(0, ms, p->manifest_size);
    if (rd_u32le(h + 56) != mcrc)
        return err_set(e, ERR_FORMAT, "%s: manifest CRC 0x%08x, computed 0x%08x (damaged manifest)", p->path,
                       rd_u32le(h + 56), mcrc);
    if (jsonx_parse(ms, (size_t)p->manifest_size, &p->manifest, e) != ERR_OK)
        return err_prefix(e, "%s: manifest", p->path);
    if (jsonx_has_escaped_nul(ms, (size_t)p->manifest_size))
        return err_set(e, ERR_FORMAT, "%s: manifest holds a string with an escaped NUL (\\u0000)", p->path);
    struct json_object *m = p->manifest, *v;
    if (json_object_get_type(m) != json_type_object)
        return err_set(e, ERR_FORMAT, "%s: manifest is a JSON %s, expected an object", p->path, jsonx_type_name(m));
    if (!json_object_object_get_ex(m, "format", &v) || json_object_get_type(v) != json_type_string ||
        strcmp(json_object_get_string(v), "gempack"))
        return err_set(e, ERR_FORMAT, "%s: manifest \"format\" is not \"gempack\"", p->path);
    uint64_t vmaj;
    if (!json_object_object_get_ex(m, "version", &v) || json_object_get_type(v) != json_type_array ||
        json_object_array_length(v) != 2 || !jsonx_u64(json_object_array_get_idx(v, 0), &vmaj) || vmaj != major)
        return err_set(e, ERR_FORMAT, "%s: manifest \"version\" disagrees with the header version %u", p->path, major);
    if (!json_object_object_get_ex(m, "required_features", &v) || json_object_get_type(v) != json_type_array)
        return err_set(e, ERR_FORMAT, "%s: manifest \"required_features\" missing or not an array", p->path);
    for (size_t i = 0; i < json_object_array_length(v); i++) {
        struct json_object *f = json_object_array_get_idx(v, i);
        if (json_object_get_type(f) != json_type_string || !pack_feature_known(json_object_get_string(f)))
            return err_set(e, ERR_UNSUPPORTED, "%s: the pack requires feature %s, which this gempack does not know",
                           p->path, json_object_to_json_string(f));
    }
    struct json_object *ts;
    if (!json_object_object_get_ex(m, "tensors", &ts) || json_object_get_type(ts) != json_type_array)
        return err_set(e, ERR_FORMAT, "%s: manifest \"tensors\" missing or not an array", p->path);
    size_t n = json_object_array_length(ts);
    if (n > PACK_MAX_TENSORS)
        return err_set(e, ERR_RANGE, "%s: %zu tensors, above the limit of %d", p->path, n, PACK_MAX_TENSORS);
    p->tensors = calloc(n ? n : 1, sizeof *p->tensors);
    p->by_name = calloc(n ? n : 1, sizeof *p->by_name);
    if (!p->tensors || !p->by_name)
        return err_set(e, ERR_NOMEM, "%s: cannot allocate %zu tensor records", p->path, n);
    for (size_t i = 0; i < n; i++) {
        p->n_tensors = i + 1;
        int rc = parse_record(p, i, json_object_array_get_idx(ts, i), e);
        if (rc != ERR_OK)
            return rc;
    }
    struct name_index *ni = malloc((n ? n : 1) * sizeof *ni);
    if (!ni)
        return err_set(e, ERR_NOMEM, "%s: cannot allocate the index of %zu tensors", p->path, n);
    for (size_t i = 0; i < n; i++)
        ni[i] = (struct name_index){p->tensors[i].name, i};
    qsort(ni, n, sizeof *ni, cmp_name_index);
    for (size_t i = 0; i < n; i++)
        p->by_name[i] = ni[i].i;
    free(ni);
    for (size_t i = 1; i < n; i++)
        if (!strcmp(p->tensors[p->by_name[i]].name, p->tensors[p->by_name[i - 1]].name))
            return err_set(e, ERR_FORMAT, "%s: tensor '%s' is listed twice", p->path, p->tensors[p->by_name[i]].name);
    struct json_object *fs;
    return json_object_object_get_ex(m, "files", &fs) ? parse_files(p, fs, e) : ERR_OK;
}

int pack_open(struct pack *p, const char *path, struct err *e)
{
    memset(p, 0, sizeof *p);
    if (!(p->path = strdup(path)))
        return err_set(e, ERR_NOMEM, "cannot copy a path");
    int fd;
    uint64_t size;
    int rc = fio_open_read(path, FIO_INPUT, &fd, &size, e);
    if (rc != ERR_OK) {
        pack_close(p);
        return rc;
    }
    if (size < PACK_HEADER_SIZE) {
        rc = err_set(e, ERR_FORMAT, "%s: %llu bytes, too small for the 64-byte pack header", path,
                     (unsigned long long)size);
    } else {
        void *m = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            rc = err_set(e, ERR_IO, "%s: mmap failed: %s", path, strerror(errno));
        } else {
            p->map = m;
            p->size = (size_t)size;
            p->mapped = true;
            rc = validate(p, e);
        }
    }
    close(fd);
    if (rc != ERR_OK)
        pack_close(p);
    return rc;
}

int pack_open_mem(struct pack *p, const uint8_t *buf, size_t len, const char *name, struct err *e)
{
    memset(p, 0, sizeof *p);
    if (!(p->path = strdup(name)))
        return err_set(e, ERR_NOMEM, "cannot copy a name");
    p->map = buf;
    p->size = len;
    int rc = validate(p, e);
    if (rc != ERR_OK)
        pack_close(p);
    return rc;
}

void pack_close(struct pack *p)
{
    if (!p)
        return;
    for (size_t i = 0; i < p->n_tensors; i++)
        free(p->tensors[i].name);
    free(p->tensors);
    free(p->by_name);
    for (size_t i = 0; i < p->n_files; i++)
        free(p->files[i].name);
    free(p->files);
    if (p->manifest)
        json_object_put(p->manifest);
    if (p->mapped)
        munmap((void *)p->map, p->size);
    free(p->path);
    memset(p, 0, sizeof *p);
}

const struct pack_tensor *pack_find(const struct pack *p, const char *name)
{
    size_t lo = 0, hi = p->n_tensors;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        int c = strcmp(p->tensors[p->by_name[mid]].name, name);
        if (c == 0)
            return &p->tensors[p->by_name[mid]];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

const struct pack_file *pack_find_file(const struct pack *p, const char *name)
{
    for (size_t i = 0; i < p->n_files; i++)
        if (!strcmp(p->files[i].name, name))
            return &p->files[i];
    return NULL;
}

/* First non-zero byte in [from, to) of the file, or `to`. */
static uint64_t nonzero_at(const struct pack *p, uint64_t from, uint64_t to)
{
    for (uint64_t i = from; i < to; i++)
        if (p->map[i])
            return i;
    return to;
}

int pack_verify(const struct pack *p, size_t *n_bad, struct err *e)
{
    *n_bad = 0;
    const char *first = NULL, *what = "";
    uint32_t first_crc = 0, first_stored = 0;
    uint64_t pad_at = UINT64_MAX, gap_from = PACK_HEADER_SIZE;
    struct json_object *fs = NULL;
    json_object_object_get_ex(p->manifest, "files", &fs);
    size_t n = p->n_tensors + p->n_files;
    for (size_t i = 0; i <= n; i++) { /* the tensors, then the files */
        /* padding before this region (or before the manifest) must be zero */
        const struct pack_tensor *t = i < p->n_tensors ? &p->tensors[i] : NULL;
        const struct pack_file *f = i >= p->n_tensors && i < n ? &p->files[i - p->n_tensors] : NULL;
        uint64_t gap_to = t ? p->data_offset + t->offset : f ? p->data_offset + f->offset : p->manifest_offset;
        uint64_t z = nonzero_at(p, gap_from, gap_to);
        if (z != gap_to && pad_at == UINT64_MAX) {
            pad_at = z;
            (*n_bad)++;
        }
        if (i == n)
            break;
        const uint8_t *data = t ? pack_data(p, t) : pack_file_data(p, f);
        uint64_t nbytes = t ? t->nbytes : f->nbytes;
        uint32_t stored = t ? t->crc32 : f->crc32, c = crc32_update(0, data, nbytes);
        bool bad = c != stored;
        if (f && !bad) { /* the manifest's SHA-256 too (its form checked by pack_open) */
            char hex[65];
            sha256_hex(data, (size_t)nbytes, hex);
            bad = strcmp(hex, json_object_get_string(
                                  json_object_object_get(json_object_array_get_idx(fs, i - p->n_tensors), "sha256")));
        }
        if (bad) {
            if (!first) {
                first = t ? t->name : f->name;
                what = t ? "tensor" : "file";
                first_crc = c;
                first_stored = stored;
            }
            (*n_bad)++;
        }
        gap_from = gap_to + nbytes;
    }
    if (first)
        return err_set(e, ERR_FORMAT, "%s: %zu check%s failed; first: %s '%s' stored CRC 0x%08x, computed 0x%08x%s",
                       p->path, *n_bad, *n_bad == 1 ? "" : "s", what, first, first_stored, first_crc,
                       first_crc == first_stored ? " (its SHA-256 differs)" : "");
    if (pad_at != UINT64_MAX)
        return err_set(e, ERR_FORMAT, "%s: padding byte at offset %llu is not zero", p->path,
                       (unsigned long long)pad_at);
    return ERR_OK;
}

int pack_set_field(const char *path, const char *key, struct json_object *value, struct err *e)
{
    struct pack p;
    int rc = pack_open(&p, path, e);
    if (rc != ERR_OK) {
        json_object_put(value);
        return rc;
    }
    json_object_object_add(p.manifest, key, value);
    const char *js = json_object_to_json_string_ext(p.manifest, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
    size_t mlen = strlen(js);
    struct fio_out out = {0};
    if (mlen > PACK_MAX_MANIFEST)
        rc = err_set(e, ERR_RANGE, "%s: manifest of %zu bytes exceeds the %u-byte limit", path, mlen, PACK_MAX_MANIFEST);
    fio_forget_input(path); /* replaced as a whole, atomically: the one output allowed over this input */
    if (rc == ERR_OK)
        rc = fio_out_open(&out, path, e);
    if (rc == ERR_OK) /* the old header's place (overwritten last) and padding, then the data as it is */
        rc = fio_write_all(out.fd, p.map, (size_t)(p.data_offset + p.data_size), out.tmp, e);
    if (rc == ERR_OK)
        rc = finish_file(&out, p.align, p.data_size, js, mlen, e);
    fio_out_abort(&out);
    pack_close(&p);
    return rc;
}
