/* format.c - the quantization format table (format.h). */
#include "quant/format.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/gguf.h"
#include "core/jsonx.h"
#include "quant/ggml.h"
#include "quant/quant.h"

/* ---- the rows' functions, in one signature ---- */

static decl_qdequant_fn(deq_affine) { dequant_affine_row(codes, scales, biases, sdt, k, gs, bits, out); }
static decl_qdequant_fn(deq_affine_fast) { quant_dequant_row(codes, scales, biases, sdt, k, gs, bits, out); }
static decl_qdequant_fn(deq_mx) { dequant_mx_row(m, codes, scales, k, out); }
static decl_qdequant_fn(deq_ggml)
{
    struct ggml_qtype t;
    if (ggml_qtype_find(quant_formats[m].ggml, &t))
        t.dequant(codes, out, k);
}
static decl_qquant_fn(q_mx) { return quant_mx_row(m, src, w, k, words, scales); }
static decl_qquant_fn(q_affine)
{
    quant_row(w, k, gs, bits, sdt, words, scales, biases);
    return -1;
}

/* Affine's dequantization of every code u, scale·u + bias in two fp32
 * roundings, against ss·(u − shift). */
static double verify_affine(float scale, float bias, int bits, double ss, double shift)
{
    double err = 0.0;
    for (int u = 0; u < 1 << bits; u++) {
        double got = (double)(scale * (float)u + bias), want = ss * ((double)u - shift), d = fabs(got - want);
        err = got != want && (d > err || d != d) ? d : err;
    }
    return err;
}

#define MX(nm, gs, bits)                                                                                               \
    {nm, nm, "quant:" nm, gs, bits, 1u << (bits), gs, 2, DT_U8, deq_mx, deq_mx, q_mx, NULL, 0, 0, NULL}

const struct qformat quant_formats[QM_COUNT] = {
    [QM_AFFINE] = {"affine", "affine", "quant:affine", 64, 4, 1u << 2 | 1u << 3 | 1u << 4 | 1u << 5 | 1u << 6 | 1u << 8,
                   32 | 64 | 128, 3, QF_FLOAT, deq_affine, deq_affine_fast, q_affine, quant_lattice_row, 4, 32,
                   verify_affine},
    [QM_MXFP4] = MX("mxfp4", 32, 4),
    [QM_NVFP4] = MX("nvfp4", 16, 4),
    [QM_MXFP8] = MX("mxfp8", 32, 8),
#define GG(nm, id, block)                                                                                              \
    [QM_GGML_##nm] = {#nm, NULL, "quant:ggml", block, 8, 1u << 8, block, 1, DT_U8, deq_ggml, deq_ggml, NULL, NULL, 0, 0, \
                      NULL, id},
    QM_GGML_ROWS(GG)
#undef GG
};

const char *const qpart_names[3] = {"weight", "scales", "biases"};

bool qmode_from_name(const char *s, enum qmode *out)
{
    for (size_t i = 0; i < QM_COUNT; i++)
        if (!strcmp(s, quant_formats[i].name)) {
            *out = (enum qmode)i;
            return true;
        }
    return false;
}

const char *qmode_config_name(enum qmode m)
{
    const struct qformat *f = qformat_of(m);
    return f->mlx ? f->mlx : f->name;
}

const char *qmode_name(enum qmode m)
{
    return (size_t)m < QM_COUNT ? quant_formats[m].name : "unknown";
}

const char *qmode_describe(enum qmode m, int bits, int group_size, char *buf, size_t len)
{
    const struct qformat *f = qformat_of(m);
    snprintf(buf, len, qformat_fixed(f) ? "%s" : "%s %d-bit group %d", f->name, bits, group_size);
    return buf;
}

void qmode_defaults(enum qmode m, int *group_size, int *bits)
{
    *group_size = quant_formats[m].default_gs;
    *bits = quant_formats[m].default_bits;
}

bool quant_params_valid(enum qmode m, int bits, int group_size)
{
    return (size_t)m < QM_COUNT && bits > 0 && bits <= 8 && group_size > 0 && !(group_size & (group_size - 1)) &&
           (quant_formats[m].bits_allowed >> bits & 1) && (quant_formats[m].gs_allowed & (unsigned)group_size);
}

uint64_t qformat_part_cols(const struct qformat *f, enum qpart p, uint64_t in, int bits, int gs)
{
    uint32_t bytes = 0;
    if (p == QP_WEIGHT && f->ggml)
        return ggml_type_info(f->ggml, NULL, NULL, &bytes) ? in / (uint64_t)gs * bytes : 0;
    return p == QP_WEIGHT ? in * (uint64_t)bits / 32 : in / (uint64_t)gs;
}

uint64_t qformat_bytes(const struct qformat *f, uint64_t n, int bits, int gs, enum dtype sdt)
{
    if (f->ggml)
        return qformat_part_cols(f, QP_WEIGHT, n, bits, gs);
    return n * (uint64_t)bits / 8 +
           (uint64_t)(f->parts - 1) * (n / (uint64_t)gs) * dtype_table[qformat_part_dtype(f, QP_SCALES, sdt)].bits / 8;
}

/* ---- a pack's "quantized" entries ---- */

static int check_entry(struct pack *p, const char *module, struct json_object *q, struct err *e)
{
    struct json_object *v;
    uint64_t bits, gs, in, out;
    enum qmode mode;
    if (json_object_get_type(q) != json_type_object || !json_object_object_get_ex(q, "mode", &v) ||
        json_object_get_type(v) != json_type_string || !qmode_from_name(json_object_get_string(v), &mode) ||
        !json_object_object_get_ex(q, "bits", &v) || !jsonx_u64(v, &bits) ||
        !json_object_object_get_ex(q, "group_size", &v) || !jsonx_u64(v, &gs) ||
        !json_object_object_get_ex(q, "in_features", &v) || !jsonx_u64(v, &in) ||
        !json_object_object_get_ex(q, "out_features", &v) || !jsonx_u64(v, &out))
        return err_set(e, ERR_FORMAT, "%s: quantized[\"%s\"]: needs mode, bits, group_size, in_features, out_features",
                       p->path, module);
    if (bits > 8 || gs > 256 || !quant_params_valid(mode, (int)bits, (int)gs))
        return err_set(e, ERR_FORMAT, "%s: quantized[\"%s\"]: %s bits %llu group %llu is not supported (affine: bits "
                                      "2-6, 8; group 32, 64, 128; mxfp4 4/32, nvfp4 4/16, mxfp8 8/32; a ggml type 8 and its block)",
                       p->path, module, qmode_name(mode), (unsigned long long)bits, (unsigned long long)gs);
    if (in == 0 || in % gs || (in * bits) % 32)
        return err_set(e, ERR_FORMAT, "%s: quantized[\"%s\"]: in_features %llu is not a multiple of group %llu",
                       p->path, module, (unsigned long long)in, (unsigned long long)gs);
    const struct qformat *f = qformat_of(mode);
    const struct pack_tensor *t[3] = {NULL, NULL, NULL};
    if (f->parts < 3 && json_object_object_get_ex(q, qpart_names[QP_BIASES], NULL))
        return err_set(e, ERR_FORMAT, "%s: quantized[\"%s\"]: %s quantization has no biases", p->path, module,
                       f->name);
    for (int k = 0; k < f->parts; k++) {
        /* the parts are MODULE.weight/.scales/.biases: readers find them by those names */
        char want[PACK_MAX_NAME + 16];
        snprintf(want, sizeof want, "%s.%s", module, qpart_names[k]);
        if (!json_object_object_get_ex(q, qpart_names[k], &v) || json_object_get_type(v) != json_type_string ||
            strcmp(json_object_get_string(v), want) || !(t[k] = pack_find(p, want)))
            return err_set(e, ERR_FORMAT, "%s: quantized[\"%s\"].%s must name the pack's tensor %s", p->path, module,
                           qpart_names[k], want);
    }
    if (f->parts < 3)
        t[2] = t[1]; /* the checks below then hold for the absent biases */
    if (f->parts < 2)
        t[1] = t[2] = t[0]; /* and for the absent scales */
    int r = t[0]->rank;
    bool ok = t[0]->dtype == qformat_part_dtype(f, QP_WEIGHT, DT_U8) && r >= 2 && t[1]->rank == r &&
              t[2]->rank == r && (f->parts < 2 || qformat_scales_ok(f, t[1]->dtype)) && t[2]->dtype == t[1]->dtype &&
              t[0]->shape[r - 2] == out && t[0]->shape[r - 1] == qformat_part_cols(f, QP_WEIGHT, in, (int)bits, (int)gs) &&
              (f->parts < 2 || t[1]->shape[r - 1] == qformat_part_cols(f, QP_SCALES, in, (int)bits, (int)gs));
    for (int d = 0; ok && d < r - 1; d++)
        ok = t[1]->shape[d] == t[0]->shape[d] && t[2]->shape[d] == t[0]->shape[d];
    ok = ok && t[2]->shape[r - 1] == t[1]->shape[r - 1];
    if (!ok)
        return err_set(e, ERR_FORMAT, "%s: quantized[\"%s\"]: weight/scales/biases dtypes or shapes disagree with %llu "
                                      "bits, group %llu, [%llu, %llu]",
                       p->path, module, (unsigned long long)bits, (unsigned long long)gs, (unsigned long long)out,
                       (unsigned long long)in);
    struct pack_tensor *w = &p->tensors[t[0] - p->tensors];
    w->qmode = mode, w->qbits = (int)bits, w->qgroup = (int)gs;
    return ERR_OK;
}

int quant_check_pack(struct pack *p, struct err *e)
{
    struct json_object *q;
    if (!json_object_object_get_ex(p->manifest, "quantized", &q))
        return ERR_OK;
    if (json_object_get_type(q) != json_type_object)
        return err_set(e, ERR_FORMAT, "%s: manifest \"quantized\" is not an object", p->path);
    json_object_object_foreach(q, module, entry) {
        int rc = check_entry(p, module, entry, e);
        if (rc != ERR_OK)
            return rc;
    }
    return ERR_OK;
}

/* ---- the MLX quantization block ---- */

static struct json_object *mlx_entry(int gs, int bits, const char *mode) /* mode NULL: left out */
{
    struct json_object *o = json_object_new_object();
    json_object_object_add(o, "group_size", json_object_new_int(gs));
    json_object_object_add(o, "bits", json_object_new_int(bits));
    if (mode)
        json_object_object_add(o, "mode", json_object_new_string(mode));
    return o;
}

struct json_object *quant_mlx_block(const struct qmodule *m, size_t n, bool mode_always)
{
    const struct qmodule *best = NULL;
    size_t best_count = 0;
    for (size_t i = 0; i < n; i++) {
        size_t count = 0;
        for (size_t j = 0; j < n && m[i].quantized; j++)
            count += m[j].quantized && m[j].mode == m[i].mode && m[j].bits == m[i].bits && m[j].gs == m[i].gs;
        if (count > best_count)
            best = &m[i], best_count = count;
    }
    const struct qmodule top = best ? *best : (struct qmodule){"", true, QM_AFFINE, 4, 64};
    struct json_object *q = mlx_entry(top.gs, top.bits, qmode_config_name(top.mode));
    for (size_t i = 0; i < n; i++)
        if (!m[i].quantized)
            json_object_object_add(q, m[i].path, json_object_new_boolean(false));
        else if (m[i].mode != top.mode || m[i].bits != top.bits || m[i].gs != top.gs) /* mlx-lm: affine if unnamed */
            json_object_object_add(q, m[i].path, mlx_entry(m[i].gs, m[i].bits, mode_always || m[i].mode != QM_AFFINE
                                                                                    ? qmode_config_name(m[i].mode)
                                                                                    : NULL));
    return q;
}
