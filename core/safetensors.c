#include "core/safetensors.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/bytes.h"
#include "core/fileio.h"
#include "core/jsonx.h"

static int cmp_name(const void *a, const void *b)
{
    return strcmp(((const struct st_tensor *)a)->name, ((const struct st_tensor *)b)->name);
}

static int cmp_offsets(const void *a, const void *b)
{
    const struct st_tensor *x = *(const struct st_tensor *const *)a;
    const struct st_tensor *y = *(const struct st_tensor *const *)b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end)
        return x->end < y->end ? -1 : 1;
    return strcmp(x->name, y->name);
}

static int parse_metadata(struct st_file *f, struct json_object *v, struct err *e)
{
    if (json_object_get_type(v) == json_type_null) {
        f->metadata_null = true;
        return ERR_OK;
    }
    if (json_object_get_type(v) != json_type_object)
        return err_set(e, ERR_FORMAT, "__metadata__ is %s, expected an object of strings or null",
                       jsonx_type_name(v));
    size_t n = (size_t)json_object_object_length(v);
    f->meta = calloc(n ? n : 1, sizeof *f->meta);
    if (!f->meta)
        return err_set(e, ERR_NOMEM, "cannot allocate %zu metadata entries", n);
    json_object_object_foreach(v, key, val) {
        if (json_object_get_type(val) != json_type_string)
            return err_set(e, ERR_FORMAT, "__metadata__ key '%s' is %s, expected a string", key,
                           jsonx_type_name(val));
        struct st_meta *m = &f->meta[f->n_meta++];
        m->key = strdup(key);
        m->value = strdup(json_object_get_string(val));
        if (!m->key || !m->value)
            return err_set(e, ERR_NOMEM, "cannot copy metadata");
    }
    return ERR_OK;
}

static int parse_tensor(struct st_tensor *t, const char *name, struct json_object *v, struct err *e)
{
    size_t nlen = strlen(name);
    if (nlen == 0 || nlen > ST_MAX_NAME)
        return err_set(e, ERR_FORMAT, "tensor name of %zu bytes, expected 1..%d", nlen, ST_MAX_NAME);
    t->name = strdup(name);
    if (!t->name)
        return err_set(e, ERR_NOMEM, "cannot copy a tensor name");
    if (json_object_get_type(v) != json_type_object)
        return err_set(e, ERR_FORMAT, "tensor '%s' is %s, expected an object", name, jsonx_type_name(v));
    struct json_object *jd, *js, *jo;
    if (!json_object_object_get_ex(v, "dtype", &jd) || json_object_get_type(jd) != json_type_string)
        return err_set(e, ERR_FORMAT, "tensor '%s': \"dtype\" missing or not a string", name);
    const char *ds = json_object_get_string(jd);
    if (!dtype_from_name(ds, (size_t)json_object_get_string_len(jd), &t->dtype))
        return err_set(e, ERR_FORMAT, "tensor '%s': unknown dtype \"%.32s\", expected one of the safetensors dtypes (F32, BF16, U32, ...)",
                       name, ds);
    if (!json_object_object_get_ex(v, "shape", &js) || json_object_get_type(js) != json_type_array)
        return err_set(e, ERR_FORMAT, "tensor '%s': \"shape\" missing or not an array", name);
    size_t rank = json_object_array_length(js);
    if (rank > ST_MAX_RANK)
        return err_set(e, ERR_RANGE, "tensor '%s': rank %zu, expected at most %d", name, rank, ST_MAX_RANK);
    t->rank = (int)rank;
    for (size_t i = 0; i < rank; i++) {
        struct json_object *d = json_object_array_get_idx(js, i);
        if (!jsonx_u64(d, &t->shape[i]))
            return err_set(e, ERR_FORMAT, "tensor '%s': shape[%zu] = %s is not a non-negative integer below 2^63 (overflow or wrong type)",
                           name, i, json_object_to_json_string(d));
    }
    if (!json_object_object_get_ex(v, "data_offsets", &jo) || json_object_get_type(jo) != json_type_array ||
        json_object_array_length(jo) != 2)
        return err_set(e, ERR_FORMAT, "tensor '%s': \"data_offsets\" must be an array of two integers", name);
    if (!jsonx_u64(json_object_array_get_idx(jo, 0), &t->begin) ||
        !jsonx_u64(json_object_array_get_idx(jo, 1), &t->end))
        return err_set(e, ERR_FORMAT, "tensor '%s': data_offsets %s are not non-negative integers below 2^63",
                       name, json_object_to_json_string(jo));
    uint64_t nbytes;
    if (dtype_nbytes(t->dtype, t->shape, t->rank, &nbytes, e) != ERR_OK)
        return err_prefix(e, "tensor '%s' (%s, rank %d)", name, dtype_name(t->dtype), t->rank);
    if (t->end < t->begin)
        return err_set(e, ERR_FORMAT, "tensor '%s': data_offsets [%llu, %llu) end before they begin", name,
                       (unsigned long long)t->begin, (unsigned long long)t->end);
    if (t->end - t->begin != nbytes)
        return err_set(e, ERR_FORMAT, "tensor '%s': data_offsets span %llu bytes, but shape x %s needs %llu",
                       name, (unsigned long long)(t->end - t->begin), dtype_name(t->dtype),
                       (unsigned long long)nbytes);
    return ERR_OK;
}

/* Parses and validates the header bytes `hdr` (length f->header_len). */
static int parse_header(struct st_file *f, const char *hdr, bool allow_truncated, struct err *e)
{
    struct json_object *root;
    if (jsonx_parse(hdr, (size_t)f->header_len, &root, e) != ERR_OK)
        return err_prefix(e, "%s: header", f->path);
    int rc = ERR_OK;
    struct st_tensor **order = NULL;
    if (jsonx_has_escaped_nul(hdr, (size_t)f->header_len)) {
        /* json-c would silently cut a tensor name at the NUL (INPUTS.md §1.5). */
        rc = err_set(e, ERR_FORMAT, "%s: header contains a string with an escaped NUL (\\u0000); tensor names "
                     "and metadata must not contain NUL", f->path);
        goto out;
    }
    if (json_object_get_type(root) != json_type_object) {
        rc = err_set(e, ERR_FORMAT, "%s: header is a JSON %s, expected an object", f->path, jsonx_type_name(root));
        goto out;
    }
    size_t n = (size_t)json_object_object_length(root);
    if (n - (json_object_object_get_ex(root, "__metadata__", NULL) ? 1 : 0) > ST_MAX_TENSORS) {
        rc = err_set(e, ERR_RANGE, "%s: %zu header entries, above the limit of %d tensors", f->path, n,
                     ST_MAX_TENSORS);
        goto out;
    }
    f->tensors = calloc(n ? n : 1, sizeof *f->tensors);
    if (!f->tensors) {
        rc = err_set(e, ERR_NOMEM, "%s: cannot allocate %zu tensor records", f->path, n);
        goto out;
    }
    json_object_object_foreach(root, key, val) {
        if (strcmp(key, "__metadata__") == 0) {
            if ((rc = parse_metadata(f, val, e)) != ERR_OK)
                goto prefixed;
            continue;
        }
        if ((rc = parse_tensor(&f->tensors[f->n_tensors++], key, val, e)) != ERR_OK)
            goto prefixed;
    }

    /* Reference rule 6: sorted by (begin, end), tensors tile [0, last_end). */
    order = malloc((f->n_tensors ? f->n_tensors : 1) * sizeof *order);
    if (!order) {
        rc = err_set(e, ERR_NOMEM, "%s: cannot allocate %zu pointers", f->path, f->n_tensors);
        goto out;
    }
    for (size_t i = 0; i < f->n_tensors; i++)
        order[i] = &f->tensors[i];
    qsort(order, f->n_tensors, sizeof *order, cmp_offsets);
    uint64_t pos = 0;
    for (size_t i = 0; i < f->n_tensors; i++) {
        const struct st_tensor *t = order[i];
        if (t->begin != pos) {
            rc = err_set(e, ERR_FORMAT,
                         "%s: tensor '%s': data_offsets begin at %llu, expected %llu (%s; a duplicate key in "
                         "the header, whose earlier entry JSON drops, shows up this way)",
                         f->path, t->name, (unsigned long long)t->begin, (unsigned long long)pos,
                         t->begin > pos ? "a gap before it" : "it overlaps the previous tensor");
            goto out;
        }
        pos = t->end;
    }
    uint64_t expect_size;
    if (!ck_add_u64(f->data_start, pos, &expect_size)) {
        rc = err_set(e, ERR_RANGE, "%s: data end %llu overflows", f->path, (unsigned long long)pos);
        goto out;
    }
    if (allow_truncated && f->file_size == f->data_start) {
        f->truncated = true;
    } else if (expect_size != f->file_size) {
        rc = err_set(e, ERR_FORMAT, "%s: file is %llu bytes, but header + data need exactly %llu (%s)", f->path,
                     (unsigned long long)f->file_size, (unsigned long long)expect_size,
                     f->file_size < expect_size ? "truncated" : "trailing bytes after the last tensor");
        goto out;
    }
    qsort(f->tensors, f->n_tensors, sizeof *f->tensors, cmp_name);
    goto out;
prefixed:
    err_prefix(e, "%s", f->path);
out:
    free(order);
    json_object_put(root);
    return rc;
}

/* Checks the 8-byte length prefix against the file size; sets header_len, data_start. */
static int check_prefix(struct st_file *f, const uint8_t *first8, struct err *e)
{
    if (f->file_size < 8)
        return err_set(e, ERR_FORMAT, "%s: %llu bytes, too small for the 8-byte header length", f->path,
                       (unsigned long long)f->file_size);
    uint64_t n = rd_u64le(first8);
    if (n > ST_MAX_HEADER)
        return err_set(e, ERR_FORMAT, "%s: header length %llu exceeds the %llu-byte limit", f->path,
                       (unsigned long long)n, ST_MAX_HEADER);
    if (n == 0)
        return err_set(e, ERR_FORMAT, "%s: header length is 0, expected a JSON object", f->path);
    if (8 + n > f->file_size)
        return err_set(e, ERR_FORMAT, "%s: header length %llu reaches beyond the end of the %llu-byte file",
                       f->path, (unsigned long long)n, (unsigned long long)f->file_size);
    f->header_len = n;
    f->data_start = 8 + n;
    return ERR_OK;
}

int st_open(struct st_file *f, const char *path, unsigned flags, struct err *e)
{
    memset(f, 0, sizeof *f);
    f->path = strdup(path);
    if (!f->path)
        return err_set(e, ERR_NOMEM, "cannot copy a path");
    int fd;
    int rc = fio_open_read(path, FIO_INPUT, &fd, &f->file_size, e);
    if (rc != ERR_OK) {
        st_close(f);
        return rc;
    }
    char *hdr = NULL;
    uint8_t first8[8] = {0};
    if (f->file_size >= 8 && (rc = fio_pread_all(fd, first8, 8, 0, path, e)) != ERR_OK)
        goto fail;
    if ((rc = check_prefix(f, first8, e)) != ERR_OK)
        goto fail;
    if (flags & ST_HEADER_ONLY) {
        hdr = malloc((size_t)f->header_len);
        if (!hdr) {
            rc = err_set(e, ERR_NOMEM, "%s: cannot allocate %llu header bytes", path,
                         (unsigned long long)f->header_len);
            goto fail;
        }
        if ((rc = fio_pread_all(fd, hdr, (size_t)f->header_len, 8, path, e)) != ERR_OK)
            goto fail;
        f->bytes_read = f->data_start;
        rc = parse_header(f, hdr, flags & ST_ALLOW_TRUNCATED, e);
        free(hdr);
        hdr = NULL;
    } else {
        void *m = mmap(NULL, (size_t)f->file_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            rc = err_set(e, ERR_IO, "%s: mmap of %llu bytes failed: %s", path,
                         (unsigned long long)f->file_size, strerror(errno));
            goto fail;
        }
        f->map = m;
        f->map_len = (size_t)f->file_size;
        f->bytes_read = f->data_start;
        rc = parse_header(f, (const char *)f->map + 8, flags & ST_ALLOW_TRUNCATED, e);
    }
    if (rc != ERR_OK)
        goto fail;
    close(fd);
    return ERR_OK;
fail:
    free(hdr);
    close(fd);
    st_close(f);
    return rc;
}

int st_open_mem(struct st_file *f, const uint8_t *buf, size_t len, const char *name, struct err *e)
{
    memset(f, 0, sizeof *f);
    f->path = strdup(name);
    if (!f->path)
        return err_set(e, ERR_NOMEM, "cannot copy a name");
    f->file_size = len;
    int rc = check_prefix(f, buf, e);
    if (rc == ERR_OK)
        rc = parse_header(f, (const char *)buf + 8, false, e);
    if (rc != ERR_OK) {
        st_close(f);
        return rc;
    }
    f->map = buf;
    f->bytes_read = f->data_start;
    return ERR_OK;
}

void st_close(struct st_file *f)
{
    if (!f)
        return;
    for (size_t i = 0; i < f->n_tensors; i++)
        free(f->tensors[i].name);
    free(f->tensors);
    for (size_t i = 0; i < f->n_meta; i++) {
        free(f->meta[i].key);
        free(f->meta[i].value);
    }
    free(f->meta);
    if (f->map_len)
        munmap((void *)f->map, f->map_len);
    free(f->path);
    memset(f, 0, sizeof *f);
}

const struct st_tensor *st_find(const struct st_file *f, const char *name)
{
    struct st_tensor key = {.name = (char *)name};
    return bsearch(&key, f->tensors, f->n_tensors, sizeof key, cmp_name);
}

const char *st_meta_get(const struct st_file *f, const char *key)
{
    for (size_t i = 0; i < f->n_meta; i++)
        if (strcmp(f->meta[i].key, key) == 0)
            return f->meta[i].value;
    return NULL;
}

int st_data(const struct st_file *f, const struct st_tensor *t, const uint8_t **out, struct err *e)
{
    if (!f->map || f->truncated)
        return err_set(e, ERR_USAGE, "%s: tensor '%s': data not available (%s)", f->path, t->name,
                       f->truncated ? "file holds only its header" : "opened header-only");
    *out = f->map + f->data_start + t->begin;
    return ERR_OK;
}

/* madvise over the pages of t's data: the whole pages inside it, or (outer)
 * every page it touches. */
static void tensor_madvise(const struct st_file *f, const struct st_tensor *t, bool outer, int advice)
{
    if (!f->map_len)
        return;
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t a = (uintptr_t)(f->map + f->data_start + t->begin), b = (uintptr_t)(f->map + f->data_start + t->end);
    a = outer ? a & ~(page - 1) : (a + page - 1) & ~(page - 1);
    b = outer ? (b + page - 1) & ~(page - 1) : b & ~(page - 1);
    if (b > a)
        madvise((void *)a, b - a, advice);
}

void st_release(const struct st_file *f, const struct st_tensor *t)
{
    tensor_madvise(f, t, false, MADV_DONTNEED);
}

void st_populate(const struct st_file *f, const struct st_tensor *t)
{
#if defined(MADV_POPULATE_READ) && !defined(GP_PORTABLE)
    tensor_madvise(f, t, true, MADV_POPULATE_READ);
#else
    (void)f;
    (void)t;
#endif
}

/* ---- writer ---- */

int st_writer_open(struct st_writer *w, const char *path, const struct st_writer_tensor *t, size_t n,
                   const char *const *meta_kv, size_t n_meta, bool header_only, struct err *e)
{
    memset(w, 0, sizeof *w);
    w->out.fd = -1;
    w->header_only = header_only;
    w->sizes = calloc(n ? n : 1, sizeof *w->sizes);
    if (!w->sizes)
        return err_set(e, ERR_NOMEM, "%s: cannot allocate %zu sizes", path, n);
    w->n = n;
    struct json_object *root = json_object_new_object();
    if (n_meta) {
        struct json_object *m = json_object_new_object();
        for (size_t i = 0; i < n_meta; i++)
            json_object_object_add(m, meta_kv[2 * i], json_object_new_string(meta_kv[2 * i + 1]));
        json_object_object_add(root, "__metadata__", m);
    }
    uint64_t off = 0;
    int rc = ERR_OK;
    for (size_t i = 0; i < n; i++) {
        if ((rc = dtype_nbytes(t[i].dtype, t[i].shape, t[i].rank, &w->sizes[i], e)) != ERR_OK) {
            err_prefix(e, "%s: tensor '%s'", path, t[i].name);
            goto fail;
        }
        struct json_object *o = json_object_new_object();
        json_object_object_add(o, "dtype", json_object_new_string(dtype_name(t[i].dtype)));
        struct json_object *s = json_object_new_array();
        for (int d = 0; d < t[i].rank; d++)
            json_object_array_add(s, json_object_new_uint64(t[i].shape[d]));
        json_object_object_add(o, "shape", s);
        struct json_object *d = json_object_new_array();
        json_object_array_add(d, json_object_new_uint64(off));
        json_object_array_add(d, json_object_new_uint64(off + w->sizes[i]));
        json_object_object_add(o, "data_offsets", d);
        json_object_object_add(root, t[i].name, o);
        off += w->sizes[i];
    }
    const char *js = json_object_to_json_string_ext(root, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
    size_t jlen = strlen(js), padded = (jlen + 7) & ~(size_t)7;
    uint8_t *hdr = malloc(8 + padded);
    if (!hdr) {
        rc = err_set(e, ERR_NOMEM, "%s: cannot allocate the header", path);
        goto fail;
    }
    wr_u64le(hdr, padded);
    memcpy(hdr + 8, js, jlen);
    memset(hdr + 8 + jlen, ' ', padded - jlen);
    rc = fio_out_open(&w->out, path, e);
    if (rc == ERR_OK)
        rc = fio_write_all(w->out.fd, hdr, 8 + padded, w->out.tmp, e);
    free(hdr);
    if (rc != ERR_OK)
        goto fail;
    json_object_put(root);
    return ERR_OK;
fail:
    json_object_put(root);
    st_writer_abort(w);
    return rc;
}

int st_writer_write(struct st_writer *w, const void *data, size_t len, struct err *e)
{
    const uint8_t *p = data;
    size_t left = len;
    while (left) {
        if (w->cur >= w->n)
            return err_set(e, ERR_USAGE, "%s: %zu bytes written past the last declared tensor", w->out.tmp, left);
        uint64_t room = w->sizes[w->cur] - w->cur_written;
        size_t take = left < room ? left : (size_t)room;
        if (!w->header_only) {
            int rc = fio_write_all(w->out.fd, p, take, w->out.tmp, e);
            if (rc != ERR_OK)
                return rc;
        }
        p += take;
        left -= take;
        w->cur_written += take;
        while (w->cur < w->n && w->cur_written == w->sizes[w->cur]) {
            w->cur++;
            w->cur_written = 0;
        }
    }
    return ERR_OK;
}

int st_writer_finish(struct st_writer *w, struct err *e)
{
    while (w->cur < w->n && w->sizes[w->cur] == 0)
        w->cur++;
    if (!w->header_only && w->cur != w->n)
        return err_set(e, ERR_USAGE, "%s: only %zu of %zu declared tensors were written", w->out.tmp, w->cur, w->n);
    int rc = fio_out_commit(&w->out, e);
    st_writer_abort(w);
    return rc;
}

void st_writer_abort(struct st_writer *w)
{
    if (!w)
        return;
    fio_out_abort(&w->out);
    free(w->sizes);
    memset(w, 0, sizeof *w);
    w->out.fd = -1;
}
