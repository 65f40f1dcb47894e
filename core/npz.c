#include "core/npz.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zip.h>

#include "core/bytes.h"
#include "core/crc.h"
#include "core/fileio.h"

static const struct {
    const char *descr;
    enum dtype dtype;
} descrs[] = {{"<f4", DT_F32}, {"<f8", DT_F64}, {"<i4", DT_I32}, {"<i8", DT_I64}, {"|u1", DT_U8}, {"<u1", DT_U8}};

/* ---- npy ---- */

static const char *skip_ws(const char *p, const char *end)
{
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\n'))
        p++;
    return p;
}

/* The header dict: {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), } in any key order. */
static int parse_dict(const char *p, const char *end, const char *what, struct npy *a, struct err *e)
{
    bool have_descr = false, have_order = false, have_shape = false;
    p = skip_ws(p, end);
    if (p >= end || *p++ != '{')
        return err_set(e, ERR_FORMAT, "%s: npy header does not start with '{'", what);
    for (;;) {
        p = skip_ws(p, end);
        if (p < end && *p == '}')
            break;
        if (p >= end || *p != '\'')
            return err_set(e, ERR_FORMAT, "%s: npy header: expected a quoted key", what);
        const char *k = ++p;
        while (p < end && *p != '\'')
            p++;
        if (p >= end)
            return err_set(e, ERR_FORMAT, "%s: npy header: unterminated key", what);
        size_t klen = (size_t)(p - k);
        p = skip_ws(p + 1, end);
        if (p >= end || *p++ != ':')
            return err_set(e, ERR_FORMAT, "%s: npy header: expected ':'", what);
        p = skip_ws(p, end);
        if (klen == 5 && !memcmp(k, "descr", 5)) {
            if (p >= end || *p != '\'')
                return err_set(e, ERR_FORMAT, "%s: npy descr is not a string", what);
            const char *v = ++p;
            while (p < end && *p != '\'')
                p++;
            if (p >= end)
                return err_set(e, ERR_FORMAT, "%s: npy descr unterminated", what);
            size_t vlen = (size_t)(p - v);
            p++;
            bool found = false;
            for (size_t i = 0; i < sizeof descrs / sizeof descrs[0]; i++)
                if (strlen(descrs[i].descr) == vlen && !memcmp(descrs[i].descr, v, vlen)) {
                    a->dtype = descrs[i].dtype;
                    found = true;
                }
            if (!found)
                return err_set(e, ERR_UNSUPPORTED, "%s: npy dtype '%.*s' not supported (expected <f4, <f8, <i4, <i8 "
                                                   "or |u1, little-endian)",
                               what, (int)(vlen > 16 ? 16 : vlen), v);
            have_descr = true;
        } else if (klen == 13 && !memcmp(k, "fortran_order", 13)) {
            if (end - p >= 5 && !memcmp(p, "False", 5)) {
                p += 5;
            } else if (end - p >= 4 && !memcmp(p, "True", 4)) {
                return err_set(e, ERR_UNSUPPORTED, "%s: Fortran-order npy arrays are not supported", what);
            } else {
                return err_set(e, ERR_FORMAT, "%s: npy fortran_order is not True or False", what);
            }
            have_order = true;
        } else if (klen == 5 && !memcmp(k, "shape", 5)) {
            if (p >= end || *p++ != '(')
                return err_set(e, ERR_FORMAT, "%s: npy shape is not a tuple", what);
            a->rank = 0;
            for (;;) {
                p = skip_ws(p, end);
                if (p < end && *p == ')') {
                    p++;
                    break;
                }
                if (a->rank == NPY_MAX_RANK)
                    return err_set(e, ERR_RANGE, "%s: npy rank above %d", what, NPY_MAX_RANK);
                uint64_t v = 0;
                const char *d0 = p;
                while (p < end && *p >= '0' && *p <= '9') {
                    if (!ck_mul_u64(v, 10, &v) || !ck_add_u64(v, (uint64_t)(*p - '0'), &v) || v >= (1ull << 62))
                        return err_set(e, ERR_RANGE, "%s: npy shape dimension overflows", what);
                    p++;
                }
                if (p == d0)
                    return err_set(e, ERR_FORMAT, "%s: npy shape holds a non-integer", what);
                a->shape[a->rank++] = v;
                p = skip_ws(p, end);
                if (p < end && *p == ',')
                    p++;
            }
            have_shape = true;
        } else {
            return err_set(e, ERR_FORMAT, "%s: npy header has unexpected key '%.*s'", what, (int)(klen > 32 ? 32 : klen),
                           k);
        }
        p = skip_ws(p, end);
        if (p < end && *p == ',')
            p++;
    }
    if (!have_descr || !have_order || !have_shape)
        return err_set(e, ERR_FORMAT, "%s: npy header lacks descr, fortran_order or shape", what);
    return ERR_OK;
}

/* The npy header at the start of buf (which may hold only a prefix of the
 * array): dtype, shape and count into *a, the data offset into *data_off, and
 * the data's byte count into *nbytes. ERR_FORMAT with need > len when buf ends
 * inside the header. */
static int npy_header(const uint8_t *buf, size_t len, const char *what, struct npy *a, size_t *data_off,
                      uint64_t *nbytes, struct err *e)
{
    memset(a, 0, sizeof *a);
    if (len < 10 || memcmp(buf, "\x93NUMPY", 6) != 0)
        return err_set(e, ERR_FORMAT, "%s: not an .npy array (bad magic)", what);
    uint8_t major = buf[6];
    size_t hlen, hoff;
    if (major == 1) {
        hlen = rd_u16le(buf + 8);
        hoff = 10;
    } else if (major == 2 || major == 3) {
        if (len < 12)
            return err_set(e, ERR_FORMAT, "%s: npy header truncated", what);
        hlen = rd_u32le(buf + 8);
        hoff = 12;
    } else {
        return err_set(e, ERR_UNSUPPORTED, "%s: npy version %u, expected 1, 2 or 3", what, major);
    }
    if (hlen > NPY_MAX_HEADER)
        return err_set(e, ERR_RANGE, "%s: npy header of %zu bytes, above the %d-byte limit", what, hlen, NPY_MAX_HEADER);
    if (hlen > len - hoff)
        return err_set(e, ERR_FORMAT, "%s: npy header length %zu beyond the %zu-byte member", what, hlen, len);
    int rc = parse_dict((const char *)buf + hoff, (const char *)buf + hoff + hlen, what, a, e);
    if (rc != ERR_OK)
        return rc;
    if ((rc = dtype_nbytes(a->dtype, a->shape, a->rank, nbytes, e)) != ERR_OK)
        return err_prefix(e, "%s", what);
    shape_numel(a->shape, a->rank, &a->count);
    *data_off = hoff + hlen;
    return ERR_OK;
}

int npy_parse(const uint8_t *buf, size_t len, const char *what, struct npy *a, struct err *e)
{
    size_t data_off;
    uint64_t nbytes;
    int rc = npy_header(buf, len, what, a, &data_off, &nbytes, e);
    if (rc != ERR_OK)
        return rc;
    if (nbytes != len - data_off)
        return err_set(e, ERR_FORMAT, "%s: npy payload is %zu bytes, shape x dtype needs %llu", what, len - data_off,
                       (unsigned long long)nbytes);
    a->data = malloc(nbytes ? (size_t)nbytes : 1);
    if (!a->data)
        return err_set(e, ERR_NOMEM, "%s: cannot allocate %llu bytes", what, (unsigned long long)nbytes);
    memcpy(a->data, buf + data_off, (size_t)nbytes);
    return ERR_OK;
}

void npy_free(struct npy *a)
{
    if (a) {
        free(a->data);
        memset(a, 0, sizeof *a);
    }
}

int npy_encode(enum dtype dtype, const uint64_t *shape, int rank, const void *data, uint8_t **out, size_t *len,
               struct err *e)
{
    const char *descr = NULL;
    for (size_t i = 0; i < sizeof descrs / sizeof descrs[0] && !descr; i++)
        if (descrs[i].dtype == dtype)
            descr = descrs[i].descr;
    if (!descr || rank > NPY_MAX_RANK)
        return err_set(e, ERR_USAGE, "npy: dtype %s or rank %d cannot be written", dtype_name(dtype), rank);
    char dict[512];
    int o = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (", descr);
    for (int i = 0; i < rank; i++)
        o += snprintf(dict + o, sizeof dict - (size_t)o, "%llu,%s", (unsigned long long)shape[i],
                      i + 1 < rank ? " " : "");
    o += snprintf(dict + o, sizeof dict - (size_t)o, "), }");
    size_t hlen = ((size_t)o + 1 + 10 + 63) / 64 * 64 - 10; /* dict + spaces + '\n', total % 64 == 0 */
    uint64_t nbytes;
    int rc = dtype_nbytes(dtype, shape, rank, &nbytes, e);
    if (rc != ERR_OK)
        return rc;
    *len = 10 + hlen + (size_t)nbytes;
    uint8_t *b = malloc(*len);
    if (!b)
        return err_set(e, ERR_NOMEM, "npy: cannot allocate %zu bytes", *len);
    memcpy(b, "\x93NUMPY\x01\x00", 8);
    wr_u16le(b + 8, (uint16_t)hlen);
    memset(b + 10, ' ', hlen);
    memcpy(b + 10, dict, (size_t)o);
    b[10 + hlen - 1] = '\n';
    memcpy(b + 10 + hlen, data, (size_t)nbytes);
    *out = b;
    return ERR_OK;
}

/* ---- npz ---- */

int npz_write(const char *path, const struct npz_member *m, size_t n, struct err *e)
{
    zip_error_t ze;
    zip_error_init(&ze);
    zip_source_t *src = zip_source_buffer_create(NULL, 0, 0, &ze);
    zip_t *za = src ? zip_open_from_source(src, ZIP_TRUNCATE, &ze) : NULL;
    int rc = ERR_OK;
    if (!za) {
        rc = err_set(e, ERR_NOMEM, "%s: cannot create an in-memory zip: %s", path, zip_error_strerror(&ze));
        if (src)
            zip_source_free(src);
        zip_error_fini(&ze);
        return rc;
    }
    zip_source_keep(src);
    for (size_t i = 0; i < n && rc == ERR_OK; i++) {
        zip_source_t *s = zip_source_buffer(za, m[i].data, m[i].len, 0);
        zip_int64_t idx = s ? zip_file_add(za, m[i].name, s, ZIP_FL_OVERWRITE | ZIP_FL_ENC_UTF_8) : -1;
        if (idx < 0) {
            if (s)
                zip_source_free(s);
            rc = err_set(e, ERR_IO, "%s: cannot add %s: %s", path, m[i].name, zip_strerror(za));
        } else if (zip_set_file_compression(za, (zip_uint64_t)idx, ZIP_CM_STORE, 0) != 0 ||
                   zip_file_set_mtime(za, (zip_uint64_t)idx, 315532800 /* 1980-01-01 UTC */, 0) != 0) {
            rc = err_set(e, ERR_IO, "%s: cannot set %s's attributes: %s", path, m[i].name, zip_strerror(za));
        }
    }
    if (rc != ERR_OK) {
        zip_discard(za);
        zip_source_free(src);
        zip_error_fini(&ze);
        return rc;
    }
    if (zip_close(za) != 0) {
        rc = err_set(e, ERR_IO, "%s: cannot finish the zip: %s", path, zip_strerror(za));
        zip_discard(za);
    }
    uint8_t *bytes = NULL;
    zip_stat_t st;
    if (rc == ERR_OK && (zip_source_stat(src, &st) != 0 || zip_source_open(src) != 0))
        rc = err_set(e, ERR_IO, "%s: cannot read back the in-memory zip", path);
    if (rc == ERR_OK) {
        bytes = malloc(st.size ? (size_t)st.size : 1);
        if (!bytes || zip_source_read(src, bytes, st.size) != (zip_int64_t)st.size)
            rc = err_set(e, ERR_IO, "%s: cannot read back the in-memory zip", path);
        zip_source_close(src);
    }
    if (rc == ERR_OK)
        rc = fio_write_file(path, bytes, (size_t)st.size, e);
    free(bytes);
    zip_source_free(src);
    zip_error_fini(&ze);
    return rc;
}

int npz_write_logits(const char *path, int B, const int32_t *const *tokens, const int64_t *len, int64_t tmax,
                     const float *logits, int64_t V, struct json_object *meta, struct err *e)
{
    int64_t T = B == 1 ? len[0] : tmax;
    int32_t *tok = calloc((size_t)(B * T > 0 ? B * T : 1), sizeof *tok), *lens = malloc((size_t)B * sizeof *lens);
    uint8_t *tb = NULL, *lb = NULL, *nb = NULL;
    size_t tl = 0, ll = 0, nl = 0;
    int rc = tok && lens ? ERR_OK : err_set(e, ERR_NOMEM, "out of memory");
    for (int b = 0; rc == ERR_OK && b < B; b++) {
        memcpy(tok + b * T, tokens[b], (size_t)len[b] * sizeof *tok);
        lens[b] = (int32_t)len[b];
    }
    uint64_t ts[2] = {(uint64_t)B, (uint64_t)T}, ls[3] = {(uint64_t)B, (uint64_t)T, (uint64_t)V}, ns[1] = {(uint64_t)B};
    int batch = B == 1 ? 0 : 1; /* one prompt: [T] and [T, V], no lengths */
    if (rc == ERR_OK)
        rc = npy_encode(DT_I32, ts + 1 - batch, 1 + batch, tok, &tb, &tl, e);
    if (rc == ERR_OK)
        rc = npy_encode(DT_F32, ls + 1 - batch, 2 + batch, logits, &lb, &ll, e);
    if (rc == ERR_OK && batch)
        rc = npy_encode(DT_I32, ns, 1, lens, &nb, &nl, e);
    if (rc == ERR_OK) {
        const char *ms = json_object_to_json_string_ext(meta, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_NOSLASHESCAPE);
        struct npz_member mm[4] = {{"tokens.npy", tb, tl}, {"logits.npy", lb, ll}, {"lengths.npy", nb, nl},
                                   {"meta.json", ms, strlen(ms)}};
        if (!batch)
            mm[2] = mm[3];
        rc = npz_write(path, mm, batch ? 4 : 3, e);
    }
    free(tok);
    free(lens);
    free(tb);
    free(lb);
    free(nb);
    return rc;
}

int npz_open(struct npz *z, const char *path, struct err *e)
{
    memset(z, 0, sizeof *z);
    int fd, zerr = 0;
    int rc = fio_open_read(path, FIO_INPUT, &fd, NULL, e);
    if (rc != ERR_OK)
        return rc;
    zip_t *za = zip_fdopen(fd, ZIP_RDONLY | ZIP_CHECKCONS, &zerr);
    if (!za) {
        close(fd);
        zip_error_t ze;
        zip_error_init_with_code(&ze, zerr);
        rc = zerr == ZIP_ER_EXISTS /* libzip's word for a name that two members share */
                 ? err_set(e, ERR_FORMAT, "%s: not a readable .npz: two members have the same name (which one "
                                          "numpy reads depends on the reader)", path)
                 : err_set(e, ERR_FORMAT, "%s: not a readable .npz: %s", path, zip_error_strerror(&ze));
        zip_error_fini(&ze);
        return rc;
    }
    zip_int64_t n = zip_get_num_entries(za, 0);
    if (n < 0 || n > NPZ_MAX_MEMBERS) {
        zip_discard(za);
        return err_set(e, ERR_RANGE, "%s: %lld members, expected at most %d", path, (long long)n, NPZ_MAX_MEMBERS);
    }
    z->path = strdup(path);
    if (!z->path) {
        zip_discard(za);
        return err_set(e, ERR_NOMEM, "out of memory");
    }
    z->za = za;
    z->n = (size_t)n;
    return ERR_OK;
}

void npz_close(struct npz *z)
{
    if (!z)
        return;
    if (z->za)
        zip_discard(z->za);
    free(z->path);
    memset(z, 0, sizeof *z);
}

const char *npz_name(const struct npz *z, size_t i)
{
    const char *s = zip_get_name(z->za, (zip_uint64_t)i, 0);
    return s ? s : "";
}

bool npz_has(const struct npz *z, const char *name)
{
    return zip_name_locate(z->za, name, 0) >= 0;
}

/* A member being read: its declared size and CRC, the bytes and CRC so far. */
struct member {
    const struct npz *z;
    const char *name;
    zip_file_t *f;
    uint64_t size, done;
    uint32_t crc, want_crc;
};

static int member_open(const struct npz *z, zip_int64_t idx, struct member *m, struct err *e)
{
    zip_stat_t st;
    memset(m, 0, sizeof *m);
    m->z = z;
    m->name = zip_get_name(z->za, (zip_uint64_t)idx, 0);
    if (!m->name || zip_stat_index(z->za, (zip_uint64_t)idx, 0, &st) != 0 || !(st.valid & ZIP_STAT_SIZE) ||
        !(st.valid & ZIP_STAT_CRC))
        return err_set(e, ERR_FORMAT, "%s: cannot stat member %lld", z->path, (long long)idx);
    m->size = st.size;
    m->want_crc = st.crc;
    if (!(m->f = zip_fopen_index(z->za, (zip_uint64_t)idx, 0)))
        return err_set(e, ERR_FORMAT, "%s: cannot open member %s: %s", z->path, m->name, zip_strerror(z->za));
    return ERR_OK;
}

/* The next len bytes of the member (len <= what is left). */
static int member_read(struct member *m, void *buf, uint64_t len, struct err *e)
{
    uint8_t *p = buf;
    while (len) {
        zip_uint64_t take = len > (1u << 30) ? (1u << 30) : len;
        zip_int64_t got = zip_fread(m->f, p, take);
        if (got <= 0)
            return err_set(e, ERR_FORMAT, "%s: member %s: corrupt: read %llu of %llu bytes (%s)", m->z->path, m->name,
                           (unsigned long long)m->done, (unsigned long long)m->size,
                           got < 0 ? zip_file_strerror(m->f) : "the data ends early");
        m->crc = crc32_update(m->crc, p, (uint64_t)got);
        m->done += (uint64_t)got;
        p += got;
        len -= (uint64_t)got;
    }
    return ERR_OK;
}

/* Reads what is left without keeping it, then checks size and CRC-32. */
static int member_finish(struct member *m, struct err *e)
{
    uint8_t chunk[65536], extra;
    int rc = ERR_OK;
    while (rc == ERR_OK && m->done < m->size) {
        uint64_t left = m->size - m->done;
        rc = member_read(m, chunk, left < sizeof chunk ? left : sizeof chunk, e);
    }
    if (rc == ERR_OK && zip_fread(m->f, &extra, 1) > 0)
        rc = err_set(e, ERR_FORMAT, "%s: member %s: corrupt: more data than its declared %llu bytes", m->z->path,
                     m->name, (unsigned long long)m->size);
    if (rc == ERR_OK && m->crc != m->want_crc)
        rc = err_set(e, ERR_FORMAT, "%s: member %s: corrupt: CRC-32 0x%08x, the archive says 0x%08x", m->z->path,
                     m->name, m->crc, m->want_crc);
    return rc;
}

static void member_close(struct member *m)
{
    if (m->f)
        zip_fclose(m->f);
    m->f = NULL;
}

/* member_open of the member named `name`. */
static int member_find(const struct npz *z, const char *name, struct member *m, struct err *e)
{
    zip_int64_t idx = zip_name_locate(z->za, name, 0);
    if (idx < 0) {
        memset(m, 0, sizeof *m);
        return err_set(e, ERR_FORMAT, "%s: no member %s", z->path, name);
    }
    return member_open(z, idx, m, e);
}

int npz_get(const struct npz *z, const char *name, size_t max_bytes, uint8_t **buf, size_t *len, struct err *e)
{
    *buf = NULL;
    struct member m;
    int rc = member_find(z, name, &m, e);
    if (rc != ERR_OK)
        return rc;
    if (m.size > max_bytes)
        rc = err_set(e, ERR_RANGE, "%s: member %s declares %llu bytes, above the %zu bytes it may hold", z->path, name,
                     (unsigned long long)m.size, max_bytes);
    else if (!(*buf = malloc(m.size ? (size_t)m.size : 1)))
        rc = err_set(e, ERR_NOMEM, "%s: member %s: cannot allocate %llu bytes", z->path, name,
                     (unsigned long long)m.size);
    if (rc == ERR_OK)
        rc = member_read(&m, *buf, m.size, e);
    if (rc == ERR_OK)
        rc = member_finish(&m, e);
    member_close(&m);
    if (rc != ERR_OK) {
        free(*buf);
        *buf = NULL;
        return rc;
    }
    *len = (size_t)m.size;
    return ERR_OK;
}

/* The npy header at the member's start, read in as many bytes as it needs;
 * *data_off and *nbytes as npy_header gives them, which must add up to the
 * member's declared size. */
static int member_npy_header(struct member *m, const char *what, struct npy *a, size_t *data_off, uint64_t *nbytes,
                             struct err *e)
{
    uint8_t head[12 + NPY_MAX_HEADER];
    uint64_t have = m->size < 12 ? m->size : 12;
    int rc = member_read(m, head, have, e);
    if (rc != ERR_OK)
        return rc;
    size_t hlen = have >= 10 ? (head[6] == 1 ? 10u + rd_u16le(head + 8) : have >= 12 ? 12u + rd_u32le(head + 8) : 0) : 0;
    if (hlen > have && hlen <= sizeof head && hlen <= m->size) {
        if ((rc = member_read(m, head + have, hlen - have, e)) != ERR_OK)
            return rc;
        have = hlen;
    }
    if ((rc = npy_header(head, (size_t)have, what, a, data_off, nbytes, e)) != ERR_OK)
        return rc;
    if (m->size != *data_off + *nbytes)
        return err_set(e, ERR_FORMAT, "%s: member of %llu bytes, but its header and shape x dtype make %llu", what,
                       (unsigned long long)m->size, (unsigned long long)(*data_off + *nbytes));
    return ERR_OK;
}

int npz_get_array(const struct npz *z, const char *name, uint64_t max_count, struct npy *out, struct err *e)
{
    memset(out, 0, sizeof *out);
    char what[512];
    snprintf(what, sizeof what, "%s: %s", z->path, name);
    struct member m;
    int rc = member_find(z, name, &m, e);
    if (rc != ERR_OK)
        return rc;
    size_t off;
    uint64_t nbytes;
    if ((rc = member_npy_header(&m, what, out, &off, &nbytes, e)) != ERR_OK) {
        member_close(&m);
        return rc;
    }
    if (out->count > max_count)
        rc = err_set(e, ERR_RANGE, "%s: %llu elements, above the %llu this member may hold", what,
                     (unsigned long long)out->count, (unsigned long long)max_count);
    else if (!(out->data = malloc(nbytes ? (size_t)nbytes : 1)))
        rc = err_set(e, ERR_NOMEM, "%s: cannot allocate %llu bytes", what, (unsigned long long)nbytes);
    if (rc == ERR_OK)
        rc = member_read(&m, out->data, nbytes, e);
    if (rc == ERR_OK)
        rc = member_finish(&m, e);
    member_close(&m);
    if (rc != ERR_OK)
        npy_free(out);
    return rc;
}

int npz_scan(const struct npz *z, size_t i, size_t keep, struct npz_scan *out, struct err *e)
{
    memset(out, 0, sizeof *out);
    struct member m;
    int rc = member_open(z, (zip_int64_t)i, &m, e);
    if (rc != ERR_OK)
        return rc;
    out->name = m.name;
    out->size = m.size;
    size_t nl = strlen(m.name);
    if (nl > 4 && !strcmp(m.name + nl - 4, ".npy")) {
        char what[512];
        snprintf(what, sizeof what, "%s: %s", z->path, m.name);
        size_t off;
        uint64_t nbytes;
        out->is_array = (rc = member_npy_header(&m, what, &out->array, &off, &nbytes, e)) == ERR_OK;
    } else if (m.size <= keep) {
        if (!(out->data = malloc(m.size + 1)))
            rc = err_set(e, ERR_NOMEM, "out of memory");
        if (rc == ERR_OK && (rc = member_read(&m, out->data, m.size, e)) == ERR_OK)
            out->data[m.size] = 0;
    }
    if (rc == ERR_OK)
        rc = member_finish(&m, e);
    member_close(&m);
    if (rc != ERR_OK) {
        free(out->data);
        out->data = NULL;
    }
    return rc;
}

int npz_read_array(const char *path, const char *name, uint64_t max_count, struct npy *out, struct err *e)
{
    struct npz z;
    memset(out, 0, sizeof *out);
    int rc = npz_open(&z, path, e);
    if (rc == ERR_OK)
        rc = npz_get_array(&z, name, max_count, out, e);
    npz_close(&z);
    return rc;
}
