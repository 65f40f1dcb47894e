#include "ingest/ingest.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/bytes.h"
#include "core/crc.h"
#include "core/sha256.h"
#include "ingest/check.h"
#include "quant/quant.h"

/* ERR_FORMAT naming the check's first problem (ERR_NOT_TARGET when that is
 * another model's architecture), unless the checkpoint loads; then its
 * source and config go back to the caller. */
static int require_loadable(struct source *src, struct gp_config *cfg, struct err *e)
{
    struct check_report chk;
    const char *dir = src->path;
    int rc = check_source(&chk, src, e);
    if (rc == ERR_OK && !check_loadable(&chk)) {
        char first[800] = "";
        for (int i = 0; i < chk.n_groups; i++)
            if (chk.groups[i].kind != CHK_REDUNDANT) {
                const struct check_group *g = &chk.groups[i];
                check_group_name(g, first, sizeof first);
                size_t l = strlen(first);
                snprintf(first + l, sizeof first - l, ": %s%s%s%s%s%s%s", check_kind_name(g->kind),
                         g->expected[0] ? ", expected " : "", g->expected, g->found[0] ? ", found " : "", g->found,
                         g->message[0] ? ": " : "", g->message);
                break;
            }
        rc = err_set(e, chk.not_target ? ERR_NOT_TARGET : ERR_FORMAT,
                     "%s does not load as a Gemma 4 text model (%d problem%s; first: %s). Run 'gempack check %s' for "
                     "the full report",
                     dir, chk.n_problems, chk.n_problems == 1 ? "" : "s", first, dir);
    } else if (rc == ERR_OK) {
        *src = chk.src, *cfg = chk.cfg;
        memset(&chk.src, 0, sizeof chk.src), memset(&chk.cfg, 0, sizeof chk.cfg);
    }
    check_free(&chk);
    return rc;
}

static int cmp_part(const void *a, const void *b)
{
    return strcmp(((const struct ingest_part *)a)->name, ((const struct ingest_part *)b)->name);
}

/* Appends the part `name` `suffix` of bytes at data; NULL when out of memory. */
static struct ingest_part *add_part(struct ingested *in, const char *name, const char *suffix, enum dtype dt, int rank,
                                    const uint64_t *shape, const uint8_t *data, struct ingest_quant q)
{
    struct ingest_part *p = &in->parts[in->n_parts];
    *p = (struct ingest_part){.dtype = dt, .rank = rank, .data = data, .q = q, .order = in->n_parts};
    memcpy(p->shape, shape, (size_t)rank * sizeof *shape);
    return asprintf(&p->name, "%s%s", name, suffix) < 0 ? NULL : &in->parts[in->n_parts++];
}

/* The view: a pack's tensors as stored, or a checkpoint's canonical tensors
 * (a split half of a fused experts tensor in its logical shape, with strides)
 * and the scales and biases of its quantized modules. */
static int build_view(struct ingested *in, struct err *e)
{
    const struct pack *pk = &in->source.pack;
    size_t cap = pk->n_tensors + 3 * in->norm.n; /* one of them is 0 */
    bool ok = (in->parts = calloc(cap ? cap : 1, sizeof *in->parts)) != NULL;
    for (size_t i = 0; ok && i < pk->n_tensors; i++) {
        const struct pack_tensor *t = &pk->tensors[i];
        ok = add_part(in, t->name, "", t->dtype, t->rank, t->shape, pack_data(pk, t),
                      (struct ingest_quant){t->qmode, t->qbits, t->qgroup});
    }
    for (size_t i = 0; ok && i < in->norm.n; i++) {
        const struct norm_tensor *t = &in->norm.t[i];
        const struct ckpt_tensor *part[3] = {t->w, t->s, t->b};
        for (int k = 0; ok && k < (t->q.quantized ? 3 : 1); k++) {
            const uint8_t *base;
            if (!part[k] || st_data(&in->source.ck.shards[part[k]->shard], part[k]->t, &base, NULL) != ERR_OK)
                continue; /* absent (MX modes have no biases) or not readable: missing to the runner */
            const struct st_tensor *st = part[k]->t;
            bool logical = k == 0 && !t->q.quantized, codes = k == 0 && t->q.quantized;
            struct ingest_part *p = add_part(
                in, k ? t->module : t->name, k == 1 ? ".scales" : k ? ".biases" : "", st->dtype,
                logical ? t->rank : st->rank, logical ? t->shape : st->shape, base,
                codes ? (struct ingest_quant){t->q.mode, t->q.bits, t->q.group_size} : (struct ingest_quant){0});
            if ((ok = p != NULL) && t->split) {
                size_t esz = dtype_table[st->dtype].bits / 8, M = (size_t)t->shape[1], H = (size_t)t->shape[2];
                p->data = base + (t->split == 2 ? M * H * esz : 0);
                p->row_stride = H * esz;
                p->expert_stride = 2 * M * H * esz;
            }
        }
    }
    if (!ok)
        return err_set(e, ERR_NOMEM, "cannot hold the view of %zu tensors", cap);
    qsort(in->parts, in->n_parts, sizeof *in->parts, cmp_part);
    return ERR_OK;
}

/* Every value the model computes with is finite: float tensors (norms,
 * weights), affine scales and biases (transcoded ones too), microscaling
 * scale bytes. The first that is not is an error naming its tensor. */
static int all_finite(const struct ingested *in, struct err *e)
{
    for (size_t i = 0; i < in->n_parts; i++) {
        const struct ingest_part *p = &in->parts[i];
        uint64_t n = 1;
        for (int k = 0; k < p->rank; k++)
            n *= p->shape[k];
        int64_t bad = -1;
        if (dtype_is_weight_float(p->dtype) && !p->row_stride) {
            bad = dtype_first_nonfinite(p->dtype, p->data, n);
        } else if (dtype_is_weight_float(p->dtype)) { /* a half of a fused experts tensor: [E, M, H] rows */
            uint64_t H = p->shape[p->rank - 1], rows = n / H;
            for (uint64_t r = 0; bad < 0 && r < rows; r++) {
                uint64_t ex = r / p->shape[1], in_ex = r % p->shape[1];
                int64_t b = dtype_first_nonfinite(p->dtype, p->data + ex * p->expert_stride + in_ex * p->row_stride, H);
                bad = b < 0 ? -1 : (int64_t)(r * H) + b;
            }
        } else if (p->dtype == DT_U8 && strlen(p->name) > 7 && !strcmp(p->name + strlen(p->name) - 7, ".scales")) {
            char w[600];
            snprintf(w, sizeof w, "%.*s.weight", (int)(strlen(p->name) - 7), p->name);
            const struct ingest_part *wp = ingest_find(in, w);
            for (uint64_t k = 0; wp && wp->q.bits && bad < 0 && k < n; k++)
                if (!isfinite(mx_scale_value(wp->q.mode, p->data[k])))
                    bad = (int64_t)k;
        }
        if (bad >= 0) {
            float v = 0; /* a scale byte's value is not finite only as E8M0's 0xFF */
            if (dtype_is_weight_float(p->dtype))
                dtype_to_f32(p->dtype, p->data + (size_t)bad * (dtype_table[p->dtype].bits / 8), &v, 1);
            return err_set(e, ERR_FORMAT, "%s: %s element %lld is %s%s: every weight, scale and norm must be finite",
                           in->source.path, p->name, (long long)bad,
                           dtype_is_weight_float(p->dtype) ? (v != v ? "NaN" : v > 0 ? "+inf" : "-inf") : "the scale byte ",
                           dtype_is_weight_float(p->dtype) ? "" : "0xFF (E8M0 NaN)");
        }
    }
    return ERR_OK;
}

int ingest_open(struct ingested *in, struct gp_config *cfg, const char *path, unsigned flags, struct err *e)
{
    memset(in, 0, sizeof *in);
    memset(cfg, 0, sizeof *cfg);
    int rc = source_open(&in->source, path, flags, e);
    if (rc == ERR_OK && in->source.kind == SRC_PACK)
        rc = cfg_parse(cfg, in->source.config_text, in->source.config_len, in->source.config_name, e);
    else if (rc == ERR_OK && (rc = require_loadable(&in->source, cfg, e)) == ERR_OK)
        rc = normalize(&in->source.ck, cfg, &in->norm, e);
    if (rc == ERR_OK)
        rc = build_view(in, e);
    return rc == ERR_OK ? all_finite(in, e) : rc;
}

const struct ingest_part *ingest_find(const struct ingested *in, const char *name)
{
    struct ingest_part key = {.name = (char *)name};
    return in->n_parts ? bsearch(&key, in->parts, in->n_parts, sizeof key, cmp_part) : NULL;
}

void ingest_fingerprint(const struct ingested *in, bool weights, char out[65])
{
    if (in->source.kind == SRC_PACK) {
        sha256_hex(in->source.pack.map + in->source.pack.manifest_offset, (size_t)in->source.pack.manifest_size, out);
        return;
    }
    struct sha256 h;
    uint8_t d[32];
    sha256_init(&h);
    for (size_t i = 0; i < in->source.ck.n_shards; i++) {
        const struct st_file *f = &in->source.ck.shards[i];
        uint8_t crc[4];
        sha256_update(&h, f->map, (size_t)f->data_start);
        if (weights) {
            wr_u32le(crc, crc32_update(0, f->map + f->data_start, f->file_size - f->data_start));
            sha256_update(&h, crc, 4);
        }
    }
    sha256_final(&h, d);
    for (int i = 0; i < 32; i++)
        snprintf(out + 2 * i, 3, "%02x", d[i]);
}

void ingest_close(struct ingested *in)
{
    if (!in)
        return;
    for (size_t i = 0; i < in->n_parts; i++)
        free(in->parts[i].name);
    free(in->parts);
    normalize_free(&in->norm);
    source_close(&in->source);
    memset(in, 0, sizeof *in);
}
