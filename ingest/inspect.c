#include "ingest/inspect.h"

#include <math.h>
#include <stdbool.h>
#include <string.h>
#include <sys/stat.h>

#include "core/checkpoint.h"
#include "core/fileio.h"
#include "core/gguf.h"
#include "core/jsonx.h"
#include "core/npz.h"
#include "core/pack.h"
#include "core/safetensors.h"
#include "ingest/source.h"
#include "quant/format.h"

static struct json_object *tensor_json(const struct st_tensor *t, const char *file)
{
    struct json_object *o = json_object_new_object();
    json_object_object_add(o, "name", json_object_new_string(t->name));
    json_object_object_add(o, "dtype", json_object_new_string(dtype_name(t->dtype)));
    struct json_object *s = json_object_new_array();
    for (int d = 0; d < t->rank; d++)
        json_object_array_add(s, json_object_new_int64((int64_t)t->shape[d]));
    json_object_object_add(o, "shape", s);
    json_object_object_add(o, "nbytes", json_object_new_int64((int64_t)(t->end - t->begin)));
    json_object_object_add(o, "file", json_object_new_string(file));
    json_object_object_add(o, "offset", json_object_new_int64((int64_t)t->begin));
    return o;
}

/* The quality card of convert --eval (CLI.md (convert)), in one line. */
static void print_card(FILE *out, struct json_object *q)
{
    struct json_object *v, *t;
    if (!q || json_object_get_type(q) != json_type_object)
        return;
    fprintf(out, "  quality   KL(source||output) mean %.4g",
            json_object_object_get_ex(q, "kl_ab_mean", &v) ? json_object_get_double(v) : (double)NAN);
    if (json_object_object_get_ex(q, "topk_agreement", &t) && json_object_get_type(t) == json_type_array &&
        json_object_array_length(t) > 0)
        fprintf(out, ", top-1 %.1f%%", 100.0 * json_object_get_double(json_object_array_get_idx(t, 0)));
    if (json_object_object_get_ex(q, "max_abs", &v))
        fprintf(out, ", max |dlogit| %.4g", json_object_get_double(v));
    if (json_object_object_get_ex(q, "prompts", &t) && json_object_object_get_ex(t, "positions", &v))
        fprintf(out, " over %lld positions", (long long)json_object_get_int64(v));
    if (json_object_object_get_ex(q, "gempack_version", &v))
        fprintf(out, " (gempack %s)", json_object_get_string(v));
    fputc('\n', out);
    if (json_object_object_get_ex(q, "sample", &t) && json_object_object_get_ex(t, "ppl_ratio", &v)) {
        fprintf(out, "  quality   on the built-in sample: PPL ratio %.5g", json_object_get_double(v));
        if (json_object_object_get_ex(t, "kld_mean", &v))
            fprintf(out, ", KLD mean %.4g", json_object_get_double(v));
        if (json_object_object_get_ex(t, "positions", &v))
            fprintf(out, " over %lld positions", (long long)json_object_get_int64(v));
        if (json_object_object_get_ex(t, "text_sha256", &v))
            fprintf(out, " (text sha256 %.16s...)", json_object_get_string(v));
        fputc('\n', out);
    } else if (json_object_object_get_ex(q, "sample", &t) && json_object_object_get_ex(t, "skipped", &v)) {
        fprintf(out, "  quality   on the built-in sample: skipped (%s)\n", json_object_get_string(v));
    }
}

static int inspect_pack(const char *path, FILE *out, struct json_object **jo, struct err *e)
{
    struct pack p;
    int rc = pack_open(&p, path, e);
    if (rc == ERR_OK && (rc = quant_check_pack(&p, e)) != ERR_OK)
        pack_close(&p);
    if (rc != ERR_OK)
        return rc;
    fprintf(out, "%s: gempack pack v%d.%u, alignment %u, %zu bytes\n", path, PACK_VERSION_MAJOR, p.version_minor,
            p.align, p.size);
    fprintf(out, "  data      offset %llu, %llu bytes\n", (unsigned long long)p.data_offset,
            (unsigned long long)p.data_size);
    fprintf(out, "  manifest  offset %llu, %llu bytes\n", (unsigned long long)p.manifest_offset,
            (unsigned long long)p.manifest_size);
    struct json_object *v;
    if (json_object_object_get_ex(p.manifest, "required_features", &v))
        fprintf(out, "  features  %s\n", json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN));
    if (json_object_object_get_ex(p.manifest, "options", &v))
        fprintf(out, "  options   %s\n", json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN));
    if (json_object_object_get_ex(p.manifest, "normalization", &v))
        fprintf(out, "  normalization log: %zu entries\n", json_object_array_length(v));
    if (json_object_object_get_ex(p.manifest, "quality", &v))
        print_card(out, v);
    fprintf(out, "  %-56s %-5s %-22s %12s %10s  %s\n", "tensor", "dtype", "shape", "bytes", "crc32", "quantization");
    for (size_t i = 0; i < p.n_tensors; i++) {
        const struct pack_tensor *t = &p.tensors[i];
        char shape[160], quant[64] = "";
        shape_format(shape, sizeof shape, t->shape, t->rank);
        if (t->qbits) /* a quantized module's weight, as quant_check_pack read its entry */
            qmode_describe(t->qmode, t->qbits, t->qgroup, quant, sizeof quant);
        fprintf(out, "  %-56s %-5s %-22s %12llu 0x%08x  %s\n", t->name, dtype_name(t->dtype), shape,
                (unsigned long long)t->nbytes, t->crc32, quant);
    }
    if (p.n_files)
        fprintf(out, "  %-56s %12s  %s\n", "file", "bytes", "sha256");
    struct json_object *fs = json_object_object_get(p.manifest, "files");
    for (size_t i = 0; i < p.n_files; i++)
        fprintf(out, "  %-56s %12llu  %s\n", p.files[i].name, (unsigned long long)p.files[i].nbytes,
                json_object_get_string(json_object_object_get(json_object_array_get_idx(fs, i), "sha256")));
    fprintf(out, "total: %zu tensors, %llu data bytes", p.n_tensors, (unsigned long long)p.data_size);
    if (p.n_files)
        fprintf(out, " (%zu files among them)", p.n_files);
    fprintf(out, "\n");
    struct json_object *o = json_object_new_object(), *h = json_object_new_object();
    json_object_object_add(o, "schema", json_object_new_string("gempack.inspect/1"));
    json_object_object_add(o, "path", json_object_new_string(path));
    json_object_object_add(o, "kind", json_object_new_string("pack"));
    json_object_object_add(h, "version_major", json_object_new_int(PACK_VERSION_MAJOR));
    json_object_object_add(h, "version_minor", json_object_new_int(p.version_minor));
    json_object_object_add(h, "alignment", json_object_new_int64(p.align));
    json_object_object_add(h, "file_size", json_object_new_int64((int64_t)p.size));
    json_object_object_add(h, "data_offset", json_object_new_int64((int64_t)p.data_offset));
    json_object_object_add(h, "data_size", json_object_new_int64((int64_t)p.data_size));
    json_object_object_add(h, "manifest_offset", json_object_new_int64((int64_t)p.manifest_offset));
    json_object_object_add(h, "manifest_size", json_object_new_int64((int64_t)p.manifest_size));
    json_object_object_add(o, "header", h);
    json_object_object_add(o, "manifest", json_object_get(p.manifest));
    *jo = o;
    pack_close(&p);
    return ERR_OK;
}

/* True when the file starts with `magic`. */
#define INSPECT_META_MAX (1u << 20)

/* An .npz: every member read once (CRC and size checked), with dtype and
 * shape for .npy members; meta.json shown. */
static int inspect_npz(const char *path, FILE *out, struct json_object **jo, struct err *e)
{
    struct npz z;
    int rc = npz_open(&z, path, e);
    if (rc != ERR_OK)
        return rc;
    struct json_object *o = json_object_new_object(), *members = json_object_new_array(), *meta = NULL;
    fprintf(out, "%s: npz archive, %zu members\n", path, z.n);
    for (size_t i = 0; i < z.n && rc == ERR_OK; i++) {
        struct npz_scan m;
        if ((rc = npz_scan(&z, i, INSPECT_META_MAX, &m, e)) != ERR_OK)
            break;
        struct json_object *jm = json_object_new_object();
        json_object_object_add(jm, "name", json_object_new_string(m.name));
        json_object_object_add(jm, "bytes", json_object_new_int64((int64_t)m.size));
        if (m.is_array) {
            char shape[160];
            shape_format(shape, sizeof shape, m.array.shape, m.array.rank);
            fprintf(out, "  %-24s %-5s %-20s %12llu bytes\n", m.name, dtype_name(m.array.dtype), shape,
                    (unsigned long long)m.size);
            json_object_object_add(jm, "dtype", json_object_new_string(dtype_name(m.array.dtype)));
            struct json_object *sh = json_object_new_array();
            for (int d = 0; d < m.array.rank; d++)
                json_object_array_add(sh, json_object_new_int64((int64_t)m.array.shape[d]));
            json_object_object_add(jm, "shape", sh);
        } else {
            fprintf(out, "  %-24s %-5s %-20s %12llu bytes\n", m.name, "raw", "-", (unsigned long long)m.size);
            if (!strcmp(m.name, "meta.json") && !meta && m.data &&
                jsonx_parse((const char *)m.data, (size_t)m.size, &meta, NULL) == ERR_OK)
                fprintf(out, "  meta.json: %s\n", json_object_to_json_string_ext(meta, JSON_C_TO_STRING_PLAIN));
        }
        json_object_array_add(members, jm);
        free(m.data);
    }
    npz_close(&z);
    json_object_object_add(o, "schema", json_object_new_string("gempack.inspect/1"));
    json_object_object_add(o, "path", json_object_new_string(path));
    json_object_object_add(o, "kind", json_object_new_string("npz"));
    json_object_object_add(o, "members", members);
    json_object_object_add(o, "meta", meta);
    if (rc == ERR_OK)
        *jo = o;
    else
        json_object_put(o);
    return rc;
}

/* A metadata value as JSON: scalars and strings; arrays by element type and
 * count (a tokenizer's are 262,144 long), with their first integers. */
static struct json_object *kv_json(const struct gguf_kv *kv, char *text, size_t len)
{
    switch (kv->type) {
    case GGUF_STRING:
        snprintf(text, len, "\"%.*s\"", kv->n > 60 ? 60 : (int)kv->n, (const char *)kv->str);
        return json_object_new_string_len((const char *)kv->str, (int)(kv->n < (1u << 20) ? kv->n : 1u << 20));
    case GGUF_ARRAY: {
        int64_t v;
        size_t l = (size_t)snprintf(text, len, "%s[%llu]", gguf_vtype_name(kv->elem), (unsigned long long)kv->n);
        for (uint64_t i = 0; i < 8 && l < len && gguf_array_int(kv, i, &v); i++)
            l += (size_t)snprintf(text + l, len - l, "%s%lld", i ? ", " : " ", (long long)v);
        struct json_object *a = json_object_new_object();
        json_object_object_add(a, "type", json_object_new_string(gguf_vtype_name(kv->elem)));
        json_object_object_add(a, "count", json_object_new_int64((int64_t)kv->n));
        return a;
    }
    case GGUF_F32:
    case GGUF_F64:
        snprintf(text, len, "%.9g", kv->v.f);
        return json_object_new_double(kv->v.f);
    case GGUF_I8:
    case GGUF_I16:
    case GGUF_I32:
    case GGUF_I64:
        snprintf(text, len, "%lld", (long long)kv->v.i);
        return json_object_new_int64(kv->v.i);
    case GGUF_BOOL:
        snprintf(text, len, "%s", kv->v.u ? "true" : "false");
        return json_object_new_boolean(kv->v.u != 0);
    default:
        snprintf(text, len, "%llu", (unsigned long long)kv->v.u);
        return json_object_new_int64((int64_t)kv->v.u);
    }
}

struct mix_row {
    char name[80];            /* a type's, or a kind's */
    uint64_t tensors, weights, bytes;
    uint64_t by_type[64];     /* a kind's tensors per ggml type id */
};

static struct mix_row *mix_at(struct mix_row *rows, size_t *n, size_t cap, const char *name)
{
    for (size_t i = 0; i < *n; i++)
        if (!strcmp(rows[i].name, name))
            return &rows[i];
    if (*n == cap)
        return NULL;
    memset(&rows[*n], 0, sizeof *rows);
    snprintf(rows[*n].name, sizeof rows[*n].name, "%s", name);
    return &rows[(*n)++];
}

static double bpw(const struct mix_row *r)
{
    return r->weights ? 8.0 * (double)r->bytes / (double)r->weights : 0.0;
}

static struct json_object *mix_json(const struct mix_row *r, bool kind)
{
    struct json_object *o = json_object_new_object();
    json_object_object_add(o, kind ? "kind" : "type", json_object_new_string(r->name));
    json_object_object_add(o, "tensors", json_object_new_int64((int64_t)r->tensors));
    json_object_object_add(o, "weights", json_object_new_int64((int64_t)r->weights));
    json_object_object_add(o, "bytes", json_object_new_int64((int64_t)r->bytes));
    json_object_object_add(o, "bits_per_weight", json_object_new_double(bpw(r)));
    if (kind) {
        struct json_object *t = json_object_new_object();
        for (uint32_t id = 0; id < 64; id++) {
            const char *tn;
            if (r->by_type[id] && ggml_type_info(id, &tn, NULL, NULL))
                json_object_object_add(t, tn, json_object_new_int64((int64_t)r->by_type[id]));
        }
        json_object_object_add(o, "types", t);
    }
    return o;
}

struct json_object *inspect_gguf_mix(const struct gguf_file *g, FILE *out, bool kinds)
{
    enum { CAP = 256 }; /* types, and the tensor kinds of a gemma4 file (a few dozen) */
    struct mix_row *types = calloc(2 * CAP, sizeof *types), *kind = types + CAP;
    size_t nt = 0, nk = 0;
    for (size_t i = 0; types && i < g->n_tensors; i++) {
        const struct gguf_tensor *t = &g->tensors[i];
        const char *tn = NULL, *k = t->name;
        ggml_type_info(t->type, &tn, NULL, NULL);
        if (!strncmp(k, "blk.", 4) && strchr(k + 4, '.'))
            k = strchr(k + 4, '.') + 1;
        uint64_t n = 1;
        for (uint32_t d = 0; d < t->n_dims; d++)
            n *= t->ne[d];
        struct mix_row *rt = mix_at(types, &nt, CAP, tn ? tn : "?"), *rk = mix_at(kind, &nk, CAP, k);
        for (int j = 0; j < 2; j++) {
            struct mix_row *r = j ? rk : rt;
            if (r) {
                r->tensors++;
                r->weights += n;
                r->bytes += t->nbytes;
            }
        }
        if (rk && t->type < 64)
            rk->by_type[t->type]++;
    }
    struct json_object *o = json_object_new_object(), *jt = json_object_new_array(), *jk = json_object_new_array();
    if (out)
        fprintf(out, "mix:     %-30s %8s %12s %12s %7s\n", "type", "tensors", "weights", "bytes", "bpw");
    for (size_t i = 0; i < nt; i++) {
        if (out)
            fprintf(out, "         %-30s %8llu %12llu %12llu %7.3f\n", types[i].name,
                    (unsigned long long)types[i].tensors, (unsigned long long)types[i].weights,
                    (unsigned long long)types[i].bytes, bpw(&types[i]));
        json_object_array_add(jt, mix_json(&types[i], false));
    }
    if (out && kinds)
        fprintf(out, "by kind: %-30s %7s  types (tensors)\n", "tensor", "bpw");
    for (size_t i = 0; i < nk; i++) {
        if (out && kinds) {
            fprintf(out, "         %-30s %7.3f ", kind[i].name, bpw(&kind[i]));
            for (uint32_t id = 0; id < 64; id++) {
                const char *tn;
                if (kind[i].by_type[id] && ggml_type_info(id, &tn, NULL, NULL))
                    fprintf(out, " %s %llu", tn, (unsigned long long)kind[i].by_type[id]);
            }
            fprintf(out, "\n");
        }
        json_object_array_add(jk, mix_json(&kind[i], true));
    }
    json_object_object_add(o, "types", jt);
    json_object_object_add(o, "kinds", jk);
    free(types);
    return o;
}

/* A GGUF file: header, metadata, tensors (ne and ggml type as stored). */
static int inspect_gguf(const char *path, FILE *out, struct json_object **jo, struct err *e)
{
    struct gguf_file g;
    int rc = gguf_open(&g, path, e);
    if (rc != ERR_OK)
        return rc;
    fprintf(out, "%s: GGUF v%u, alignment %llu, %zu metadata keys, %zu tensors, data at %llu\n", path, g.version,
            (unsigned long long)g.alignment, g.n_kv, g.n_tensors, (unsigned long long)g.data_offset);
    struct json_object *o = json_object_new_object(), *meta = json_object_new_object(), *jt = json_object_new_array();
    for (size_t i = 0; i < g.n_kv; i++) {
        char text[200];
        json_object_object_add(meta, g.kv[i].key, kv_json(&g.kv[i], text, sizeof text));
        fprintf(out, "  %-48s %s\n", g.kv[i].key, text);
    }
    uint64_t total = 0;
    for (size_t i = 0; i < g.n_tensors; i++) {
        const struct gguf_tensor *t = &g.tensors[i];
        const char *type = NULL;
        ggml_type_info(t->type, &type, NULL, NULL);
        char ne[120];
        size_t l = 0;
        for (uint32_t k = 0; k < t->n_dims && l < sizeof ne; k++)
            l += (size_t)snprintf(ne + l, sizeof ne - l, "%s%llu", k ? ", " : "[", (unsigned long long)t->ne[k]);
        snprintf(ne + l, sizeof ne - (l < sizeof ne ? l : sizeof ne - 1), "]");
        fprintf(out, "  %-48s %-6s ne %-22s %12llu\n", t->name, type ? type : "?", ne, (unsigned long long)t->nbytes);
        struct json_object *jtt = json_object_new_object(), *jne = json_object_new_array();
        json_object_object_add(jtt, "name", json_object_new_string(t->name));
        json_object_object_add(jtt, "type", json_object_new_string(type ? type : "?"));
        for (uint32_t k = 0; k < t->n_dims; k++)
            json_object_array_add(jne, json_object_new_int64((int64_t)t->ne[k]));
        json_object_object_add(jtt, "ne", jne);
        json_object_object_add(jtt, "offset", json_object_new_int64((int64_t)t->offset));
        json_object_object_add(jtt, "bytes", json_object_new_int64((int64_t)t->nbytes));
        json_object_array_add(jt, jtt);
        total += t->nbytes;
    }
    fprintf(out, "total: %zu tensors, %llu bytes\n", g.n_tensors, (unsigned long long)total);
    json_object_object_add(o, "mix", inspect_gguf_mix(&g, out, true));
    json_object_object_add(o, "schema", json_object_new_string("gempack.inspect/1"));
    json_object_object_add(o, "path", json_object_new_string(path));
    json_object_object_add(o, "kind", json_object_new_string("gguf"));
    json_object_object_add(o, "version", json_object_new_int((int)g.version));
    json_object_object_add(o, "alignment", json_object_new_int64((int64_t)g.alignment));
    json_object_object_add(o, "metadata", meta);
    json_object_object_add(o, "tensors", jt);
    json_object_object_add(o, "total_bytes", json_object_new_int64((int64_t)total));
    *jo = o;
    gguf_close(&g);
    return ERR_OK;
}

int inspect_path(const char *path, FILE *out, struct json_object **jo, struct err *e)
{
    *jo = NULL;
    enum input_kind kind = input_kind(path);
    if (kind == IN_MISSING)
        return err_set(e, ERR_IO, "%s: no such file or directory", path);
    if (kind == IN_PACK)
        return inspect_pack(path, out, jo, e);
    if (kind == IN_NPZ)
        return inspect_npz(path, out, jo, e);
    char *lone = NULL;
    int lrc = kind == IN_DIR ? input_lone_gguf(path, &lone, e) : ERR_OK;
    if (lrc != ERR_OK)
        return lrc;
    if (lone || kind == IN_GGUF) {
        lrc = inspect_gguf(lone ? lone : path, out, jo, e);
        free(lone);
        return lrc;
    }
    struct ckpt ck = {0};
    struct st_file one = {0};
    const struct st_file *files;
    const char *const *names;
    const char *single_name[1] = {path};
    size_t n_files;
    bool dir = kind == IN_DIR;
    if (dir) {
        int rc = ckpt_open(&ck, path, ST_HEADER_ONLY | ST_ALLOW_TRUNCATED, e);
        if (rc != ERR_OK)
            return rc;
        files = ck.shards;
        names = (const char *const *)ck.shard_names;
        n_files = ck.n_shards;
    } else {
        int rc = st_open(&one, path, ST_HEADER_ONLY | ST_ALLOW_TRUNCATED, e);
        if (rc != ERR_OK)
            return rc;
        files = &one;
        names = single_name;
        n_files = 1;
    }
    uint64_t total = 0, by_dtype[DT_COUNT] = {0};
    size_t n_tensors = 0;
    struct json_object *o = json_object_new_object(), *jfiles = json_object_new_array(),
                       *jt = json_object_new_array();
    for (size_t f = 0; f < n_files; f++) {
        const struct st_file *sf = &files[f];
        fprintf(out, "%s: %zu tensors, header %llu bytes%s\n", names[f], sf->n_tensors,
                (unsigned long long)sf->header_len, sf->truncated ? " (header only)" : "");
        struct json_object *jf = json_object_new_object(), *jm = json_object_new_object();
        for (size_t m = 0; m < sf->n_meta; m++) {
            fprintf(out, "  metadata %s = %s\n", sf->meta[m].key, sf->meta[m].value);
            json_object_object_add(jm, sf->meta[m].key, json_object_new_string(sf->meta[m].value));
        }
        json_object_object_add(jf, "file", json_object_new_string(names[f]));
        json_object_object_add(jf, "tensors", json_object_new_int64((int64_t)sf->n_tensors));
        json_object_object_add(jf, "header_bytes", json_object_new_int64((int64_t)sf->header_len));
        json_object_object_add(jf, "truncated", json_object_new_boolean(sf->truncated));
        json_object_object_add(jf, "metadata", jm);
        json_object_array_add(jfiles, jf);
        for (size_t i = 0; i < sf->n_tensors; i++) {
            const struct st_tensor *t = &sf->tensors[i];
            char shape[160];
            shape_format(shape, sizeof shape, t->shape, t->rank);
            fprintf(out, "  %-64s %-5s %-22s %12llu\n", t->name, dtype_name(t->dtype), shape,
                    (unsigned long long)(t->end - t->begin));
            json_object_array_add(jt, tensor_json(t, names[f]));
            total += t->end - t->begin;
            by_dtype[t->dtype] += t->end - t->begin;
            n_tensors++;
        }
    }
    fprintf(out, "total: %zu tensors, %llu bytes in %zu file%s\n", n_tensors, (unsigned long long)total, n_files,
            n_files == 1 ? "" : "s");
    struct json_object *jd = json_object_new_object();
    for (int t = 0; t < DT_COUNT; t++)
        if (by_dtype[t]) {
            fprintf(out, "  %-5s %llu bytes\n", dtype_name((enum dtype)t), (unsigned long long)by_dtype[t]);
            json_object_object_add(jd, dtype_name((enum dtype)t), json_object_new_int64((int64_t)by_dtype[t]));
        }
    json_object_object_add(o, "schema", json_object_new_string("gempack.inspect/1"));
    json_object_object_add(o, "path", json_object_new_string(path));
    json_object_object_add(o, "kind", json_object_new_string(dir ? "checkpoint" : "safetensors"));
    char *card_path = dir ? fio_join(path, "gempack_quality.json") : NULL;
    char *card_text = NULL;
    size_t card_len;
    struct json_object *card = NULL;
    struct stat cst;
    if (card_path && stat(card_path, &cst) == 0 &&
        fio_read_file(card_path, FIO_INPUT, INSPECT_META_MAX, &card_text, &card_len, NULL) == ERR_OK &&
        jsonx_parse(card_text, card_len, &card, NULL) == ERR_OK) {
        print_card(out, card);
        json_object_object_add(o, "quality", card);
    }
    free(card_text);
    free(card_path);
    json_object_object_add(o, "files", jfiles);
    json_object_object_add(o, "tensors", jt);
    json_object_object_add(o, "total_bytes", json_object_new_int64((int64_t)total));
    json_object_object_add(o, "bytes_by_dtype", jd);
    *jo = o;
    ckpt_close(&ck);
    st_close(&one);
    return ERR_OK;
}
