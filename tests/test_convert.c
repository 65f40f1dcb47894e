/* test_convert.c - `gempack convert` (converter/convert.h) end to end on
 * generated fixtures: normalization of every layout into one canonical pack,
 * quantization plans and their numerics, MLX-quantized input carried through
 * byte for byte, the MLX export, and the inputs convert must refuse.
 *
 * Expectations come from MODEL.md §2.7INPUTS.mdctations come from MODEL.md §2.7/§2.6, INPUTS.md §3/,
 * MODEL.md §2.5-2.6 and the tiny fixture dimensions of
 * fixtures/fixture.c:
 *   e2b     L 10, num_kv_shared 5 -> F0 5, full layers 4 and 9, H 128, Nq 4,
 *           G 1, head_dim 32 / global 64, I 256 (double-wide 512 from F0),
 *           P 64, vocab 512; multimodal: 7 vision layers (> F0), audio stub
 *   26b-a4b L 6, full layer 5, k_eq_v, MoE E 4, M 64, I 128, H 128. */
#include <criterion/criterion.h>

#include <dirent.h>
#include <json-c/json.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ingest/check.h"
#include "converter/convert.h"
#include "converter/plan.h"
#include "core/dtype.h"
#include "core/err.h"
#include "core/fileio.h"
#include "core/pack.h"
#include "quant/quant.h"
#include "core/safetensors.h"
#include "fixtures/fixture.h"
#include "tests/helpers.h"

#define E2B_LAYERS 10
#define E2B_F0 5
#define E2B_LAST_FULL 9

/* ------------------------------------------------------------------ helpers */

static struct fixture_opts fx(const char *variant, enum fixture_layout layout, uint64_t seed)
{
    return (struct fixture_opts){.variant = variant, .layout = layout, .group_size = 64, .shards = 1, .seed = seed};
}

static struct convert_opts copts(const char *out)
{
    return (struct convert_opts){.plan = {.group_size = 64}, .align = 64, .out = out};
}

/* Converts and asserts success; the caller convert_free's r. */
static void convert_ok(struct convert_report *r, const char *src, const struct convert_opts *o)
{
    struct err e = {0};
    int rc = convert_run(r, src, o, &e);
    cr_assert_eq(rc, ERR_OK, "convert %s -> %s: %s", src, o->out ? o->out : "(dry run)", e.msg);
}

/* Converts src into dir/name (a pack at alignment 64); returns the malloc'ed path. */
static char *convert_to(const char *dir, const char *name, const char *src, struct convert_opts o)
{
    char *out = fio_join(dir, name);
    o.out = out;
    struct convert_report r;
    convert_ok(&r, src, &o);
    cr_assert(r.written);
    convert_free(&r);
    return out;
}

static void open_pack(struct pack *p, const char *path)
{
    struct err e = {0};
    cr_assert_eq(pack_open(p, path, &e), ERR_OK, "%s", e.msg);
    cr_assert_eq(quant_check_pack(p, &e), ERR_OK, "%s", e.msg);
    size_t bad = 0;
    cr_assert_eq(pack_verify(p, &bad, &e), ERR_OK, "%s", e.msg);
}

/* Both packs hold the same tensor names, dtypes, shapes and bytes. */
static void assert_same_tensors(const char *a_path, const char *b_path)
{
    struct pack a, b;
    open_pack(&a, a_path);
    open_pack(&b, b_path);
    cr_assert_eq(a.n_tensors, b.n_tensors, "%s has %zu tensors, %s %zu", a_path, a.n_tensors, b_path, b.n_tensors);
    for (size_t i = 0; i < a.n_tensors; i++) {
        const struct pack_tensor *ta = &a.tensors[i], *tb = pack_find(&b, ta->name);
        cr_assert(tb, "%s: tensor %s missing from %s", a_path, ta->name, b_path);
        cr_assert_eq(ta->dtype, tb->dtype, "%s dtype", ta->name);
        cr_assert_eq(ta->rank, tb->rank, "%s rank", ta->name);
        for (int d = 0; d < ta->rank; d++)
            cr_assert_eq(ta->shape[d], tb->shape[d], "%s shape[%d]", ta->name, d);
        cr_assert_eq(ta->nbytes, tb->nbytes, "%s nbytes", ta->name);
        cr_assert_eq(memcmp(pack_data(&a, ta), pack_data(&b, tb), (size_t)ta->nbytes), 0, "%s bytes differ", ta->name);
    }
    pack_close(&a);
    pack_close(&b);
}

static size_t count_log(const struct convert_report *r, const char *action, const char *substr)
{
    size_t n = 0;
    for (size_t i = 0; i < r->in.norm.n_log; i++)
        n += !strcmp(r->in.norm.log[i].action, action) && (!substr || strstr(r->in.norm.log[i].tensor, substr));
    return n;
}

static const struct norm_log *find_log(const struct convert_report *r, const char *tensor)
{
    for (size_t i = 0; i < r->in.norm.n_log; i++)
        if (!strcmp(r->in.norm.log[i].tensor, tensor))
            return &r->in.norm.log[i];
    return NULL;
}

static const struct plan_item *find_item(const struct convert_report *r, const char *name)
{
    for (size_t i = 0; i < r->plan.n; i++)
        if (!strcmp(r->plan.items[i].nt->name, name))
            return &r->plan.items[i];
    return NULL;
}

static struct json_object *jget(struct json_object *o, const char *key)
{
    struct json_object *v = NULL;
    if (!o || !json_object_object_get_ex(o, key, &v))
        return NULL;
    return v;
}

static struct json_object *quantized_of(const struct pack *p)
{
    struct json_object *q = jget(p->manifest, "quantized");
    cr_assert(q && json_object_get_type(q) == json_type_object, "manifest has a \"quantized\" object");
    return q;
}

static bool has_suffix(const char *s, const char *suf)
{
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

/* Norms (input_layernorm, post_feedforward_layernorm_1, q_norm, ...), the
 * layer scalar and the router's scale vectors. */
static bool never_quantized_name(const char *name)
{
    return (strstr(name, "norm") && has_suffix(name, ".weight")) || has_suffix(name, "layer_scalar") ||
           has_suffix(name, "router.scale") || has_suffix(name, "per_expert_scale");
}

/* The float values of a pack tensor (F32/F16/BF16), malloc'ed. */
static float *pack_floats(const struct pack *p, const char *name, uint64_t *n)
{
    const struct pack_tensor *t = pack_find(p, name);
    cr_assert(t, "tensor %s in %s", name, p->path);
    cr_assert(dtype_is_weight_float(t->dtype), "%s is %s", name, dtype_name(t->dtype));
    cr_assert(shape_numel(t->shape, t->rank, n));
    float *v = malloc((size_t)(*n ? *n : 1) * sizeof *v);
    dtype_to_f32(t->dtype, pack_data(p, t), v, (size_t)*n);
    return v;
}

struct qmod {
    int bits, gs;
    uint64_t rows, cols;
    float *deq;   /* rows x cols */
    float *scale; /* rows x cols/gs */
};

/* Dequantizes the module of a "quantized" manifest entry. */
static struct qmod dequant_module(const struct pack *p, const char *module, struct json_object *q)
{
    struct qmod m = {0};
    m.bits = json_object_get_int(jget(q, "bits"));
    m.gs = json_object_get_int(jget(q, "group_size"));
    m.cols = (uint64_t)json_object_get_int64(jget(q, "in_features"));
    cr_assert_str_eq(json_object_get_string(jget(q, "mode")), "affine", "%s", module);
    const struct pack_tensor *w = pack_find(p, json_object_get_string(jget(q, "weight")));
    const struct pack_tensor *s = pack_find(p, json_object_get_string(jget(q, "scales")));
    const struct pack_tensor *b = pack_find(p, json_object_get_string(jget(q, "biases")));
    cr_assert(w && s && b, "%s: triplet present", module);
    char want[256];
    snprintf(want, sizeof want, "%s.weight", module);
    cr_assert_str_eq(w->name, want);
    cr_assert_eq(w->dtype, DT_U32, "%s.weight is U32", module);
    m.rows = 1;
    for (int d = 0; d + 1 < w->rank; d++)
        m.rows *= w->shape[d];
    cr_assert_eq(w->shape[w->rank - 1], m.cols * (uint64_t)m.bits / 32, "%s packed width", module);
    cr_assert_eq(s->shape[s->rank - 1], m.cols / (uint64_t)m.gs, "%s scales width", module);
    size_t words = quant_row_words((size_t)m.cols, m.bits), ng = (size_t)(m.cols / (uint64_t)m.gs);
    size_t ssz = dtype_table[s->dtype].bits / 8;
    m.deq = malloc((size_t)(m.rows * m.cols) * sizeof *m.deq);
    m.scale = malloc((size_t)(m.rows * ng) * sizeof *m.scale);
    for (uint64_t r = 0; r < m.rows; r++) {
        dequant_affine_row(pack_data(p, w) + r * words * 4, pack_data(p, s) + r * ng * ssz,
                           pack_data(p, b) + r * ng * ssz, s->dtype, (size_t)m.cols, m.gs, m.bits,
                           m.deq + r * m.cols);
        dtype_to_f32(s->dtype, pack_data(p, s) + r * ng * ssz, m.scale + r * ng, ng);
    }
    return m;
}

static void qmod_free(struct qmod *m)
{
    free(m->deq);
    free(m->scale);
}

/* Every dequantized value is within |scale| of the reference value (the MLX
 * property, INPUTS.md §2.5). The codes are chosen with the f32 scale and
 * bias, which are then stored in bf16 (INPUTS.md §2.2 step 6): that adds up
 * to |q|*|scale|*2^-9 + |bias|*2^-9 with |q|, |bias|/|scale| <= n = 2^bits-1,
 * negligible at 4 bits but up to |scale| at 8 bits. So the bound is |scale|
 * for bits <= 4 and |scale| * (1/2 + n/256) above. */
static void assert_within_scale(const struct qmod *m, const float *ref, const char *module)
{
    size_t ng = (size_t)(m->cols / (uint64_t)m->gs);
    double n = (double)((1 << m->bits) - 1), k = m->bits <= 4 ? 1.0 : 1.01 * (0.5 + n / 256.0);
    for (uint64_t r = 0; r < m->rows; r++)
        for (uint64_t c = 0; c < m->cols; c++) {
            double d = fabs((double)m->deq[r * m->cols + c] - (double)ref[r * m->cols + c]);
            double s = fabs((double)m->scale[r * ng + c / (uint64_t)m->gs]);
            if (!(d <= k * s + 1e-6))
                cr_assert_fail("%s (%d-bit)[%llu, %llu]: |%g - %g| = %g > %g x |scale| %g", module, m->bits,
                               (unsigned long long)r, (unsigned long long)c, (double)m->deq[r * m->cols + c],
                               (double)ref[r * m->cols + c], d, k, s);
        }
}

static size_t count_entries(const char *dir)
{
    DIR *d = opendir(dir);
    cr_assert(d, "opendir %s", dir);
    size_t n = 0;
    struct dirent *de;
    while ((de = readdir(d)))
        n += strcmp(de->d_name, ".") && strcmp(de->d_name, "..");
    closedir(d);
    return n;
}

static bool exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

static struct json_object *read_json(const char *dir, const char *name)
{
    char *path = fio_join(dir, name);
    struct json_object *o = json_object_from_file(path);
    cr_assert(o, "%s parses", path);
    free(path);
    return o;
}

static void assert_loadable(const char *dir)
{
    struct check_report chk;
    struct err e = {0};
    cr_assert_eq(check_run(&chk, dir, 0, &e), ERR_OK, "check %s: %s", dir, e.msg);
    cr_assert(check_loadable(&chk), "%s: %d problems", dir, chk.n_problems);
    check_free(&chk);
}

struct extra_tensor {
    const char *name;
    enum dtype dtype;
    int rank;
    uint64_t shape[ST_MAX_RANK];
    const uint8_t *bytes;
};

/* A copy of the single-file checkpoint `src` in dir/sub with the bytes of
 * `replace_key` replaced (when not NULL) and `extra` appended (when not
 * NULL). Returns the malloc'ed directory. */
static char *clone_ckpt(const char *dir, const char *sub, const char *src, const char *replace_key,
                        const uint8_t *replace, const struct extra_tensor *extra)
{
    struct err e = {0};
    char *out = fio_join(dir, sub);
    cr_assert_eq(fio_mkdirs(out, &e), ERR_OK, "%s", e.msg);
    char *cfg_src = fio_join(src, "config.json");
    size_t cfg_len;
    uint8_t *cfg = th_read(cfg_src, &cfg_len);
    cr_assert(cfg);
    free(th_write(out, "config.json", cfg, cfg_len));
    free(cfg);
    free(cfg_src);

    char *st_src = fio_join(src, "model.safetensors"), *st_dst = fio_join(out, "model.safetensors");
    struct st_file f;
    cr_assert_eq(st_open(&f, st_src, 0, &e), ERR_OK, "%s", e.msg);
    size_t n = f.n_tensors + (extra ? 1 : 0);
    struct st_writer_tensor *wt = calloc(n, sizeof *wt);
    for (size_t i = 0; i < f.n_tensors; i++) {
        wt[i] = (struct st_writer_tensor){f.tensors[i].name, f.tensors[i].dtype, f.tensors[i].rank, {0}};
        memcpy(wt[i].shape, f.tensors[i].shape, sizeof wt[i].shape);
    }
    if (extra) {
        wt[n - 1] = (struct st_writer_tensor){extra->name, extra->dtype, extra->rank, {0}};
        memcpy(wt[n - 1].shape, extra->shape, sizeof wt[n - 1].shape);
    }
    static const char *const meta[] = {"format", "pt"};
    struct st_writer w;
    cr_assert_eq(st_writer_open(&w, st_dst, wt, n, meta, 1, false, &e), ERR_OK, "%s", e.msg);
    bool replaced = false;
    for (size_t i = 0; i < f.n_tensors; i++) {
        const struct st_tensor *t = &f.tensors[i];
        const uint8_t *data;
        cr_assert_eq(st_data(&f, t, &data, &e), ERR_OK, "%s", e.msg);
        if (replace_key && !strcmp(t->name, replace_key)) {
            data = replace;
            replaced = true;
        }
        cr_assert_eq(st_writer_write(&w, data, (size_t)(t->end - t->begin), &e), ERR_OK, "%s", e.msg);
    }
    cr_assert(!replace_key || replaced, "%s not in %s", replace_key, st_src);
    if (extra) {
        uint64_t nbytes;
        cr_assert_eq(dtype_nbytes(extra->dtype, extra->shape, extra->rank, &nbytes, &e), ERR_OK);
        cr_assert_eq(st_writer_write(&w, extra->bytes, (size_t)nbytes, &e), ERR_OK, "%s", e.msg);
    }
    cr_assert_eq(st_writer_finish(&w, &e), ERR_OK, "%s", e.msg);
    st_close(&f);
    free(wt);
    free(st_src);
    free(st_dst);
    return out;
}

/* ------------------------------------------------------------------ normalization */

Test(convert, e2b_ptq_qat_mlx_text_agree)
{
    char *dir = th_mkdtemp();
    char *hf = th_fixture(dir, "hf", fx("e2b", FX_HF, 7));
    struct fixture_opts q = fx("e2b", FX_HF, 7);
    q.qat = true;
    char *qat = th_fixture(dir, "qat", q);
    char *mlx = th_fixture(dir, "mlx", fx("e2b", FX_MLX, 7));
    char *text = th_fixture(dir, "text", fx("e2b", FX_TEXT, 7));
    struct fixture_opts sh = fx("e2b", FX_HF, 7);
    sh.shards = 3;
    char *sharded = th_fixture(dir, "sharded", sh);

    char *out_hf = fio_join(dir, "hf.gpk"), *out_qat = fio_join(dir, "qat.gpk");
    struct convert_opts o = copts(out_hf);
    struct convert_report r;
    convert_ok(&r, hf, &o);
    /* PTQ: exactly the K/V of the shared layers 5..9 are pruned (e2b has v_proj: no k_eq_v) */
    cr_assert_eq(count_log(&r, "pruned", NULL), 3 * (E2B_LAYERS - E2B_F0), "pruned entries");
    cr_assert_eq(r.in.norm.n_log, 3 * (E2B_LAYERS - E2B_F0), "nothing else is logged for a text-only HF fixture");
    for (int l = 0; l < E2B_LAYERS; l++) {
        static const char *const kv[] = {"k_proj.weight", "v_proj.weight", "k_norm.weight"};
        for (int k = 0; k < 3; k++) {
            char key[160];
            snprintf(key, sizeof key, "model.language_model.layers.%d.self_attn.%s", l, kv[k]);
            const struct norm_log *lg = find_log(&r, key);
            if (l >= E2B_F0) {
                cr_assert(lg, "%s logged", key);
                cr_assert_str_eq(lg->action, "pruned");
                cr_assert(strstr(lg->reason, "KV-shared"), "%s", lg->reason);
            } else {
                cr_assert_null(lg, "%s of a KV-owning layer is kept", key);
            }
        }
    }
    convert_free(&r);

    o.out = out_qat;
    convert_ok(&r, qat, &o);
    cr_assert_eq(count_log(&r, "pruned", NULL), 0, "QAT has nothing to prune");
    cr_assert_eq(r.in.norm.n_log, 0);
    convert_free(&r);

    char *out_mlx = convert_to(dir, "mlx.gpk", mlx, copts(NULL));
    char *out_text = convert_to(dir, "text.gpk", text, copts(NULL));

    assert_same_tensors(out_hf, out_qat);
    assert_same_tensors(out_hf, out_mlx);
    assert_same_tensors(out_hf, out_text);
    char *out_sharded = convert_to(dir, "sharded.gpk", sharded, copts(NULL));
    assert_same_tensors(out_hf, out_sharded);

    struct pack p;
    open_pack(&p, out_hf);
    cr_assert_eq(p.n_tensors, 160, "e2b tiny: %zu canonical tensors", p.n_tensors);
    cr_assert(pack_find(&p, "layers.4.self_attn.k_proj.weight"));
    cr_assert(pack_find(&p, "layers.4.self_attn.v_proj.weight"));
    cr_assert(pack_find(&p, "layers.4.self_attn.k_norm.weight"));
    cr_assert_null(pack_find(&p, "layers.5.self_attn.k_proj.weight"));
    cr_assert_null(pack_find(&p, "layers.9.self_attn.v_proj.weight"));
    cr_assert_null(pack_find(&p, "layers.9.self_attn.k_norm.weight"));
    cr_assert(pack_find(&p, "layers.9.self_attn.q_proj.weight"));
    cr_assert(pack_find(&p, "embed_tokens.weight"));
    cr_assert(pack_find(&p, "per_layer_model_projection.weight"));
    cr_assert(pack_find(&p, "norm.weight"));
    const struct pack_tensor *q9 = pack_find(&p, "layers.9.self_attn.q_proj.weight");
    cr_assert_eq(q9->shape[0], 4 * 64, "full layer: Nq x global_head_dim");
    cr_assert_eq(q9->shape[1], 128);
    cr_assert_eq(pack_find(&p, "layers.5.mlp.gate_proj.weight")->shape[0], 512, "double-wide MLP from F0");
    cr_assert_eq(pack_find(&p, "layers.4.mlp.gate_proj.weight")->shape[0], 256);
    /* the manifest carries the normalization log and the normalized text config */
    struct json_object *norm = jget(p.manifest, "normalization");
    cr_assert_eq(json_object_array_length(norm), 15);
    cr_assert_str_eq(json_object_get_string(jget(json_object_array_get_idx(norm, 0), "action")), "pruned");
    struct json_object *cfg = jget(jget(p.manifest, "model"), "config");
    cr_assert_str_eq(json_object_get_string(jget(cfg, "model_type")), "gemma4_text");
    cr_assert_eq(json_object_get_int(jget(cfg, "num_hidden_layers")), E2B_LAYERS);
    cr_assert_null(jget(cfg, "quantization_config"));
    cr_assert_eq(json_object_object_length(quantized_of(&p)), 0, "no quantization requested");
    cr_assert_str_eq(json_object_get_string(jget(jget(p.manifest, "source"), "layout")), "hf");
    pack_close(&p);

    struct pack pq;
    open_pack(&pq, out_qat);
    cr_assert_str_eq(json_object_get_string(jget(jget(pq.manifest, "source"), "quantization")), "qat_unquantized");
    pack_close(&pq);

    free(out_hf);
    free(out_qat);
    free(out_mlx);
    free(out_text);
    free(out_sharded);
    free(sharded);
    free(hf);
    free(qat);
    free(mlx);
    free(text);
    th_rmtree(dir);
}

Test(convert, multimodal_towers_dropped_never_pruned)
{
    char *dir = th_mkdtemp();
    struct fixture_opts m = fx("e2b", FX_HF, 7);
    m.multimodal = true;
    char *mm = th_fixture(dir, "mm", m);
    char *hf = th_fixture(dir, "hf", fx("e2b", FX_HF, 7));
    char *out = fio_join(dir, "mm.gpk");
    struct convert_opts o = copts(out);
    struct convert_report r;
    convert_ok(&r, mm, &o);

    size_t towers = 0;
    for (size_t i = 0; i < r.in.norm.n_log; i++) {
        const struct norm_log *lg = &r.in.norm.log[i];
        bool tower = strstr(lg->tensor, "vision_tower") || strstr(lg->tensor, "audio_tower") ||
                     strstr(lg->tensor, "embed_vision") || strstr(lg->tensor, "embed_audio");
        if (tower) {
            towers++;
            cr_assert_str_eq(lg->action, "dropped", "%s: %s", lg->tensor, lg->action);
        } else {
            cr_assert_str_eq(lg->action, "pruned", "%s: %s", lg->tensor, lg->action);
            cr_assert(!strncmp(lg->tensor, "model.language_model.layers.", 28), "%s", lg->tensor);
        }
    }
    cr_assert_eq(count_log(&r, "pruned", NULL), 15, "only the decoder's shared K/V are pruned");
    cr_assert_eq(count_log(&r, "pruned", "tower"), 0);
    /* the vision tower has layers >= F0 with self_attn.k_proj: dropped as tower keys, never pruned as K/V */
    for (int l = E2B_F0; l < 7; l++) {
        char key[160];
        snprintf(key, sizeof key, "model.vision_tower.encoder.layers.%d.self_attn.k_proj.linear.weight", l);
        const struct norm_log *lg = find_log(&r, key);
        cr_assert(lg, "%s logged", key);
        cr_assert_str_eq(lg->action, "dropped");
        cr_assert(strstr(lg->reason, "vision tower"), "%s", lg->reason);
        snprintf(key, sizeof key, "model.vision_tower.encoder.layers.%d.self_attn.k_norm.weight", l);
        lg = find_log(&r, key);
        cr_assert(lg && !strcmp(lg->action, "dropped"), "%s dropped", key);
    }
    const struct norm_log *au = find_log(&r, "model.audio_tower.layers.0.self_attn.k_proj.linear.weight");
    cr_assert(au && !strcmp(au->action, "dropped") && strstr(au->reason, "audio tower"));
    cr_assert(towers > 7 * 4, "%zu tower keys logged", towers);
    cr_assert_eq(r.in.norm.n_towers, towers, "every tower/projector key is kept aside for the MLX export");
    convert_free(&r);

    struct pack p;
    open_pack(&p, out);
    for (size_t i = 0; i < p.n_tensors; i++)
        cr_assert(!strstr(p.tensors[i].name, "vision") && !strstr(p.tensors[i].name, "audio") &&
                      !strstr(p.tensors[i].name, "tower"),
                  "tower tensor %s in the pack", p.tensors[i].name);
    pack_close(&p);
    char *out_hf = convert_to(dir, "hf.gpk", hf, copts(NULL));
    assert_same_tensors(out, out_hf);
    free(out_hf);
    free(out);
    free(mm);
    free(hf);
    th_rmtree(dir);
}

Test(convert, moe_fused_and_split_agree)
{
    char *dir = th_mkdtemp();
    char *hf = th_fixture(dir, "hf", fx("26b-a4b", FX_HF, 3));
    char *mlx = th_fixture(dir, "mlx", fx("26b-a4b", FX_MLX, 3));
    char *out_hf = fio_join(dir, "hf.gpk"), *out_mlx = fio_join(dir, "mlx.gpk");
    struct convert_opts o = copts(out_hf);
    struct convert_report r;
    convert_ok(&r, hf, &o);
    cr_assert_eq(count_log(&r, "split", NULL), 6, "one split per layer");
    for (int l = 0; l < 6; l++) {
        char key[160];
        snprintf(key, sizeof key, "model.language_model.layers.%d.experts.gate_up_proj", l);
        const struct norm_log *lg = find_log(&r, key);
        cr_assert(lg && !strcmp(lg->action, "split"), "%s split", key);
    }
    cr_assert_eq(count_log(&r, "pruned", NULL), 0, "26b-a4b shares no KV");
    convert_free(&r);
    o.out = out_mlx;
    convert_ok(&r, mlx, &o);
    cr_assert_eq(count_log(&r, "split", NULL), 0, "MLX experts are already split");
    cr_assert_eq(count_log(&r, "renamed", "switch_glu"), 18, "switch_glu.{gate,up,down}_proj renamed, 6 layers");
    convert_free(&r);
    assert_same_tensors(out_hf, out_mlx);

    /* canonical names and shapes; gate = rows 0..M-1, up = rows M..2M-1 of each expert's fused block */
    struct pack p;
    open_pack(&p, out_hf);
    struct st_file f;
    struct err e = {0};
    char *src = fio_join(hf, "model.safetensors");
    cr_assert_eq(st_open(&f, src, 0, &e), ERR_OK, "%s", e.msg);
    for (int l = 0; l < 6; l++) {
        char name[128];
        static const char *const part[] = {"gate", "up", "down"};
        const struct pack_tensor *t[3];
        for (int k = 0; k < 3; k++) {
            snprintf(name, sizeof name, "layers.%d.experts.%s_proj.weight", l, part[k]);
            t[k] = pack_find(&p, name);
            cr_assert(t[k], "%s in the pack", name);
            cr_assert_eq(t[k]->dtype, DT_BF16);
            cr_assert_eq(t[k]->rank, 3);
            cr_assert_eq(t[k]->shape[0], 4, "%s: E", name);
            cr_assert_eq(t[k]->shape[1], k < 2 ? 64 : 128, "%s", name);
            cr_assert_eq(t[k]->shape[2], k < 2 ? 128 : 64, "%s", name);
        }
        snprintf(name, sizeof name, "model.language_model.layers.%d.experts.gate_up_proj", l);
        const struct st_tensor *fused = st_find(&f, name);
        cr_assert(fused, "%s", name);
        const uint8_t *fb;
        cr_assert_eq(st_data(&f, fused, &fb, &e), ERR_OK);
        size_t half = 64 * 128 * 2; /* M rows x H x bf16 */
        for (int ex = 0; ex < 4; ex++) {
            cr_assert_eq(memcmp(pack_data(&p, t[0]) + (size_t)ex * half, fb + (size_t)ex * 2 * half, half), 0,
                         "layer %d expert %d gate", l, ex);
            cr_assert_eq(memcmp(pack_data(&p, t[1]) + (size_t)ex * half, fb + (size_t)ex * 2 * half + half, half), 0,
                         "layer %d expert %d up", l, ex);
        }
        snprintf(name, sizeof name, "model.language_model.layers.%d.experts.down_proj", l);
        const struct st_tensor *down = st_find(&f, name);
        cr_assert(down);
        cr_assert_eq(st_data(&f, down, &fb, &e), ERR_OK);
        cr_assert_eq(memcmp(pack_data(&p, t[2]), fb, (size_t)t[2]->nbytes), 0, "layer %d down", l);
        snprintf(name, sizeof name, "layers.%d.experts.gate_up_proj", l);
        cr_assert_null(pack_find(&p, name));
        snprintf(name, sizeof name, "layers.%d.self_attn.v_proj.weight", l);
        if (l == 5)
            cr_assert_null(pack_find(&p, name), "k_eq_v: the full layer has no v_proj");
        else
            cr_assert(pack_find(&p, name), "%s", name);
    }
    st_close(&f);
    free(src);
    pack_close(&p);
    free(out_hf);
    free(out_mlx);
    free(hf);
    free(mlx);
    th_rmtree(dir);
}

Test(convert, identical_inputs_give_identical_packs)
{
    char *dir = th_mkdtemp();
    char *hf = th_fixture(dir, "hf", fx("e2b", FX_HF, 11));
    struct convert_opts o = copts(NULL);
    o.plan.bits = 4;
    o.plan.skip_last_full = true;
    char *a = convert_to(dir, "a.gpk", hf, o);
    o.threads = 3; /* quantization workers never change a byte */
    char *b = convert_to(dir, "b.gpk", hf, o);
    o.threads = 0;
    o.align = 4096;
    o.plan.bits = 0;
    o.plan.skip_last_full = false;
    char *c = convert_to(dir, "c.gpk", hf, o);
    char *d = convert_to(dir, "d.gpk", hf, o);
    const char *pairs[2][2] = {{a, b}, {c, d}};
    for (int k = 0; k < 2; k++) {
        size_t la, lb;
        uint8_t *ia = th_read(pairs[k][0], &la), *ib = th_read(pairs[k][1], &lb);
        cr_assert(ia && ib);
        cr_assert_eq(la, lb, "%s and %s sizes", pairs[k][0], pairs[k][1]);
        cr_assert_eq(memcmp(ia, ib, la), 0, "%s and %s are byte-identical", pairs[k][0], pairs[k][1]);
        free(ia);
        free(ib);
    }
    struct pack p;
    open_pack(&p, c);
    cr_assert_eq(p.align, 4096);
    cr_assert_eq(p.data_offset, 4096);
    for (size_t i = 0; i < p.n_tensors; i++)
        cr_assert_eq(p.tensors[i].offset % 4096, 0);
    pack_close(&p);
    assert_same_tensors(a, a);
    free(a);
    free(b);
    free(c);
    free(d);
    free(hf);
    th_rmtree(dir);
}

/* ------------------------------------------------------------------ quantization */

/* Checks a --bits 4 pack against the unquantized pack of the same source:
 * every rank >= 2 tensor is a quantized module (router at 8/64), everything
 * else is copied byte for byte, and every dequantized value is within
 * |scale| of the source. Returns the number of quantized modules. */
static size_t check_bits4(const char *qpath, const char *refpath)
{
    struct pack q, ref;
    open_pack(&q, qpath);
    open_pack(&ref, refpath);
    struct json_object *qz = quantized_of(&q);
    size_t n_q = 0;
    for (size_t i = 0; i < ref.n_tensors; i++) {
        const struct pack_tensor *t = &ref.tensors[i];
        char module[256];
        snprintf(module, sizeof module, "%.*s", (int)strlen(t->name) - (has_suffix(t->name, ".weight") ? 7 : 0),
                 t->name);
        struct json_object *entry = jget(qz, module);
        if (t->rank < 2) {
            cr_assert(never_quantized_name(t->name), "%s: a rank-1 tensor is a norm or a scalar", t->name);
            cr_assert_null(entry, "%s must never be quantized", t->name);
            const struct pack_tensor *c = pack_find(&q, t->name);
            cr_assert(c, "%s copied", t->name);
            cr_assert_eq(c->dtype, DT_BF16);
            cr_assert_eq(memcmp(pack_data(&q, c), pack_data(&ref, t), (size_t)t->nbytes), 0, "%s bytes", t->name);
            continue;
        }
        cr_assert(entry, "%s quantized", module);
        n_q++;
        bool router = has_suffix(module, "router.proj");
        cr_assert_eq(json_object_get_int(jget(entry, "bits")), router ? 8 : 4, "%s bits", module);
        cr_assert_eq(json_object_get_int(jget(entry, "group_size")), 64, "%s group", module);
        cr_assert_eq((uint64_t)json_object_get_int64(jget(entry, "in_features")), t->shape[t->rank - 1], "%s in",
                     module);
        cr_assert_eq((uint64_t)json_object_get_int64(jget(entry, "out_features")), t->shape[t->rank - 2], "%s out",
                     module);
        cr_assert_str_eq(json_object_get_string(jget(entry, "action")), "quantize");
        const struct pack_tensor *codes = pack_find(&q, t->name);
        cr_assert(codes && codes->dtype == DT_U32, "%s stored as U32 codes", t->name);
        struct qmod m = dequant_module(&q, module, entry);
        cr_assert_eq(m.rows * m.cols, t->nbytes / 2);
        uint64_t n;
        float *src = pack_floats(&ref, t->name, &n);
        assert_within_scale(&m, src, module);
        /* and not trivially: the error is non-zero somewhere at 4 bits */
        double err = 0;
        for (uint64_t k = 0; k < n; k++)
            err += fabs((double)m.deq[k] - (double)src[k]);
        if (!router)
            cr_assert_gt(err, 0.0, "%s was quantized", module);
        free(src);
        qmod_free(&m);
    }
    json_object_object_foreach(qz, key, val)
    {
        (void)val;
        cr_assert(!strstr(key, "norm") && !strstr(key, "layer_scalar") && !has_suffix(key, "router.scale") &&
                      !strstr(key, "per_expert_scale"),
                  "quantized entry %s", key);
    }
    cr_assert_eq((size_t)json_object_object_length(qz), n_q);
    bool feat = false;
    struct json_object *rf = jget(q.manifest, "required_features");
    for (size_t i = 0; i < json_object_array_length(rf); i++)
        feat |= !strcmp(json_object_get_string(json_object_array_get_idx(rf, i)), "quant:affine");
    cr_assert(feat, "quant:affine required");
    pack_close(&q);
    pack_close(&ref);
    return n_q;
}

Test(convert, bits4_e2b)
{
    char *dir = th_mkdtemp();
    char *hf = th_fixture(dir, "hf", fx("e2b", FX_HF, 5));
    char *ref = convert_to(dir, "ref.gpk", hf, copts(NULL));
    struct convert_opts o = copts(NULL);
    o.plan.bits = 4;
    char *q = convert_to(dir, "q4.gpk", hf, o);
    size_t n_q = check_bits4(q, ref);
    /* globals: embed_tokens, embed_tokens_per_layer, per_layer_model_projection; per layer: q, o, gate, up, down,
     * per_layer_input_gate, per_layer_projection (+ k, v in layers < F0) */
    cr_assert_eq(n_q, 3 + E2B_LAYERS * 7 + E2B_F0 * 2, "%zu quantized modules", n_q);
    struct pack p;
    open_pack(&p, q);
    struct json_object *qz = quantized_of(&p);
    static const char *const expect[] = {"embed_tokens", "embed_tokens_per_layer", "per_layer_model_projection",
                                         "layers.0.self_attn.q_proj", "layers.0.self_attn.k_proj",
                                         "layers.0.self_attn.v_proj", "layers.0.self_attn.o_proj",
                                         "layers.9.mlp.down_proj", "layers.3.per_layer_input_gate"};
    for (size_t i = 0; i < sizeof expect / sizeof expect[0]; i++)
        cr_assert(jget(qz, expect[i]), "%s quantized", expect[i]);
    cr_assert_null(jget(qz, "layers.5.self_attn.k_proj"), "pruned K/V has no entry");
    cr_assert_eq(json_object_get_int(jget(jget(p.manifest, "options"), "bits")), 4);
    pack_close(&p);
    free(ref);
    free(q);
    free(hf);
    th_rmtree(dir);
}

/* The error convert measures for each quantized tensor (the report's RMS and
 * max columns) is max |dequantized − source| and Σ (dequantized − source)²,
 * recomputed here from the two packs in plain order. */
Test(convert, measured_quantization_error)
{
    char *dir = th_mkdtemp();
    char *hf = th_fixture(dir, "hf", fx("e2b", FX_HF, 6));
    char *ref = convert_to(dir, "ref.gpk", hf, copts(NULL));
    char *out = fio_join(dir, "q4.gpk");
    struct convert_opts o = copts(out);
    o.plan.bits = 4;
    struct convert_report r;
    convert_ok(&r, hf, &o);
    struct pack q, pr;
    open_pack(&q, out);
    open_pack(&pr, ref);
    struct json_object *qz = quantized_of(&q);
    size_t checked = 0;
    for (size_t i = 0; i < r.plan.n; i++) {
        const struct plan_item *it = &r.plan.items[i];
        if (it->act != ACT_QUANTIZE)
            continue;
        const char *name = it->nt->name;
        char module[256];
        snprintf(module, sizeof module, "%.*s", (int)strlen(name) - 7, name); /* without ".weight" */
        struct qmod m = dequant_module(&q, module, jget(qz, module));
        uint64_t n;
        float *src = pack_floats(&pr, name, &n);
        double mx = 0.0, sq = 0.0;
        for (uint64_t k = 0; k < n; k++) {
            double d = fabs((double)m.deq[k] - (double)src[k]);
            mx = d > mx ? d : mx;
            sq += d * d;
        }
        cr_assert(it->measured, "%s measured", name);
        cr_assert_eq(it->max_err, mx, "%s: max error %.17g, recomputed %.17g", name, it->max_err, mx);
        cr_assert(mx > 0.0 && fabs(it->sq_err - sq) <= 1e-12 * sq, "%s: sum of squares %.17g, recomputed %.17g", name,
                  it->sq_err, sq);
        checked++;
        free(src);
        qmod_free(&m);
    }
    cr_assert_gt(checked, 20, "%zu quantized tensors", checked);
    pack_close(&q);
    pack_close(&pr);
    convert_free(&r);
    free(out);
    free(ref);
    free(hf);
    th_rmtree(dir);
}

Test(convert, bits4_moe_router_8bit)
{
    char *dir = th_mkdtemp();
    char *hf = th_fixture(dir, "hf", fx("26b-a4b", FX_HF, 5));
    char *ref = convert_to(dir, "ref.gpk", hf, copts(NULL));
    struct convert_opts o = copts(NULL);
    o.plan.bits = 4;
    char *q = convert_to(dir, "q4.gpk", hf, o);
    check_bits4(q, ref);
    struct pack p;
    open_pack(&p, q);
    struct json_object *qz = quantized_of(&p);
    for (int l = 0; l < 6; l++) {
        char m[96];
        snprintf(m, sizeof m, "layers.%d.router.proj", l);
        struct json_object *r = jget(qz, m);
        cr_assert(r, "%s quantized", m);
        cr_assert_eq(json_object_get_int(jget(r, "bits")), 8, "%s", m);
        cr_assert_eq(json_object_get_int(jget(r, "group_size")), 64, "%s", m);
        snprintf(m, sizeof m, "layers.%d.experts.gate_proj", l);
        cr_assert_eq(json_object_get_int(jget(jget(qz, m), "bits")), 4, "%s", m);
        snprintf(m, sizeof m, "layers.%d.router.scale", l);
        const struct pack_tensor *t = pack_find(&p, m);
        cr_assert(t && t->dtype == DT_BF16 && !jget(qz, m), "%s kept", m);
        snprintf(m, sizeof m, "layers.%d.router.per_expert_scale", l);
        t = pack_find(&p, m);
        cr_assert(t && t->dtype == DT_BF16 && !jget(qz, m), "%s kept", m);
        snprintf(m, sizeof m, "layers.%d.experts.down_proj.weight", l);
        t = pack_find(&p, m);
        cr_assert(t && t->dtype == DT_U32 && t->rank == 3 && t->shape[0] == 4 && t->shape[1] == 128 &&
                      t->shape[2] == 64 * 4 / 32,
                  "%s packed [E, H, M*4/32]", m);
    }
    pack_close(&p);
    free(ref);
    free(q);
    free(hf);
    th_rmtree(dir);
}

Test(convert, mlx_quantized_input)
{
    char *dir = th_mkdtemp();
    struct fixture_opts f = fx("e2b", FX_MLX, 9);
    f.quant_bits = 4;
    char *src = th_fixture(dir, "q4", f);
    char *out = fio_join(dir, "copy.gpk");
    struct convert_opts o = copts(out);
    struct convert_report r;
    convert_ok(&r, src, &o);
    convert_free(&r);

    /* default: every tensor (triplets included) is the source's bytes */
    struct pack p;
    open_pack(&p, out);
    struct st_file st;
    struct err e = {0};
    char *stp = fio_join(src, "model.safetensors");
    cr_assert_eq(st_open(&st, stp, 0, &e), ERR_OK, "%s", e.msg);
    size_t n_u32 = 0;
    for (size_t i = 0; i < p.n_tensors; i++) {
        const struct pack_tensor *t = &p.tensors[i];
        char key[256];
        snprintf(key, sizeof key, "language_model.model.%s", t->name);
        const struct st_tensor *s = st_find(&st, key);
        cr_assert(s, "%s has source %s", t->name, key);
        cr_assert_eq(s->dtype, t->dtype, "%s dtype", t->name);
        cr_assert_eq(s->rank, t->rank, "%s rank", t->name);
        for (int d = 0; d < t->rank; d++)
            cr_assert_eq(s->shape[d], t->shape[d], "%s shape", t->name);
        const uint8_t *sb;
        cr_assert_eq(st_data(&st, s, &sb, &e), ERR_OK);
        cr_assert_eq(s->end - s->begin, t->nbytes);
        cr_assert_eq(memcmp(sb, pack_data(&p, t), (size_t)t->nbytes), 0, "%s copied byte for byte", t->name);
        n_u32 += t->dtype == DT_U32;
    }
    struct json_object *qz = quantized_of(&p);
    cr_assert_eq((size_t)json_object_object_length(qz), n_u32);
    cr_assert_eq(n_u32, 3 + E2B_LAYERS * 7 + E2B_F0 * 2);
    json_object_object_foreach(qz, key, val)
    {
        cr_assert_str_eq(json_object_get_string(jget(val, "action")), "copy", "%s", key);
        cr_assert_eq(json_object_get_int(jget(val, "bits")), 4, "%s", key);
        cr_assert_eq(json_object_get_int(jget(val, "group_size")), 64, "%s", key);
    }
    cr_assert_str_eq(json_object_get_string(jget(jget(p.manifest, "source"), "quantization")), "mlx");
    pack_close(&p);
    st_close(&st);
    free(stp);

    /* the MLX export of a quantized source carries the triplets, loads, and packs back to the same bytes */
    char *mlxdir = fio_join(dir, "mlx");
    struct convert_opts mo = copts(mlxdir);
    mo.format_mlx = true;
    convert_ok(&r, src, &mo);
    convert_free(&r);
    assert_loadable(mlxdir);
    char *back = convert_to(dir, "back.gpk", mlxdir, copts(NULL));
    assert_same_tensors(out, back);
    free(back);
    free(mlxdir);

    /* requantizing needs --allow-requantize */
    char *out8 = fio_join(dir, "q8.gpk");
    o.out = out8;
    o.plan.bits = 8;
    int rc = convert_run(&r, src, &o, &e);
    cr_assert_eq(rc, ERR_USAGE, "%s", e.msg);
    cr_assert(strstr(e.msg, "--allow-requantize"), "%s", e.msg);
    cr_assert(strstr(e.msg, "already MLX-quantized"), "%s", e.msg);
    cr_assert(!r.written);
    convert_free(&r);
    cr_assert(!exists(out8), "nothing written on failure");

    o.plan.allow_requantize = true;
    convert_ok(&r, src, &o);
    convert_free(&r);
    open_pack(&p, out8);
    qz = quantized_of(&p);
    cr_assert_eq((size_t)json_object_object_length(qz), n_u32);
    json_object_object_foreach(qz, key8, val8)
    {
        cr_assert_eq(json_object_get_int(jget(val8, "bits")), 8, "%s", key8);
        cr_assert_eq(json_object_get_int(jget(val8, "group_size")), 64, "%s", key8);
        cr_assert_str_eq(json_object_get_string(jget(val8, "action")), "requantize", "%s", key8);
    }
    /* the 8-bit requantization stays within its |scale| of the 4-bit source values */
    struct pack p4;
    open_pack(&p4, out);
    struct json_object *qz4 = quantized_of(&p4);
    static const char *const mods[] = {"layers.0.self_attn.q_proj", "layers.7.mlp.down_proj", "embed_tokens"};
    for (size_t i = 0; i < 3; i++) {
        struct qmod a = dequant_module(&p4, mods[i], jget(qz4, mods[i]));
        struct qmod b = dequant_module(&p, mods[i], jget(qz, mods[i]));
        assert_within_scale(&b, a.deq, mods[i]);
        qmod_free(&a);
        qmod_free(&b);
    }
    pack_close(&p4);
    pack_close(&p);

    /* a dense-kept module of a quantized source is dequantized to F32, exactly */
    char *outd = fio_join(dir, "dense.gpk");
    struct convert_opts od = copts(outd);
    od.plan.keep_dense = calloc(1, sizeof *od.plan.keep_dense);
    cr_assert_eq(plan_rule_parse(&od.plan.keep_dense[0], "layers\\.2\\.mlp\\.up_proj", true, &e), ERR_OK, "%s",
                 e.msg);
    od.plan.n_keep_dense = 1;
    convert_ok(&r, src, &od);
    const struct plan_item *it = find_item(&r, "layers.2.mlp.up_proj.weight");
    cr_assert(it && it->act == ACT_DEQUANTIZE, "keep-dense on a quantized source dequantizes");
    convert_free(&r);
    plan_rule_free(&od.plan.keep_dense[0]);
    free(od.plan.keep_dense);
    struct pack pd;
    open_pack(&pd, outd);
    open_pack(&p4, out);
    uint64_t n;
    float *dense = pack_floats(&pd, "layers.2.mlp.up_proj.weight", &n);
    cr_assert_eq(pack_find(&pd, "layers.2.mlp.up_proj.weight")->dtype, DT_F32);
    cr_assert_null(jget(quantized_of(&pd), "layers.2.mlp.up_proj"));
    struct qmod a = dequant_module(&p4, "layers.2.mlp.up_proj", jget(quantized_of(&p4), "layers.2.mlp.up_proj"));
    cr_assert_eq(n, a.rows * a.cols);
    cr_assert_eq(memcmp(dense, a.deq, (size_t)n * sizeof *dense), 0, "exact dequantization");
    qmod_free(&a);
    free(dense);
    pack_close(&pd);
    pack_close(&p4);

    free(outd);
    free(out8);
    free(out);
    free(src);
    th_rmtree(dir);
}

Test(convert, skip_last_full_attention)
{
    char *dir = th_mkdtemp();
    char *hf = th_fixture(dir, "hf", fx("e2b", FX_HF, 5));
    char *ref = convert_to(dir, "ref.gpk", hf, copts(NULL));
    struct convert_opts o = copts(NULL);
    o.plan.bits = 4;
    o.plan.skip_last_full = true;
    char *q = convert_to(dir, "q.gpk", hf, o);
    struct pack p, pr;
    open_pack(&p, q);
    open_pack(&pr, ref);
    struct json_object *qz = quantized_of(&p);
    size_t n9 = 0;
    for (size_t i = 0; i < pr.n_tensors; i++) {
        const struct pack_tensor *t = &pr.tensors[i];
        if (strncmp(t->name, "layers.9.", 9))
            continue;
        n9++;
        const struct pack_tensor *c = pack_find(&p, t->name);
        cr_assert(c, "%s kept under its float name", t->name);
        cr_assert_eq(c->dtype, DT_BF16, "%s stays BF16", t->name);
        cr_assert_eq(memcmp(pack_data(&p, c), pack_data(&pr, t), (size_t)t->nbytes), 0, "%s source bytes", t->name);
    }
    cr_assert_eq(n9, 14, "layer 9: 5 norms, q_norm, q/o, gate/up/down, PLE gate/projection, layer_scalar");
    json_object_object_foreach(qz, key, val)
    {
        (void)val;
        cr_assert(strncmp(key, "layers.9.", 9), "%s must not be quantized", key);
    }
    /* other layers, including the other full-attention layer 4, are quantized */
    static const char *const quantized[] = {"layers.4.self_attn.q_proj", "layers.4.self_attn.o_proj",
                                            "layers.8.self_attn.q_proj", "layers.8.mlp.down_proj", "embed_tokens"};
    for (size_t i = 0; i < sizeof quantized / sizeof quantized[0]; i++)
        cr_assert(jget(qz, quantized[i]), "%s quantized", quantized[i]);
    cr_assert_eq(json_object_object_length(qz), 3 + E2B_LAYERS * 7 + E2B_F0 * 2 - 7);
    struct json_object *opt = jget(p.manifest, "options"), *rt = jget(p.manifest, "runtime");
    cr_assert(json_object_get_boolean(jget(opt, "skip_last_full_attention")));
    cr_assert_eq(json_object_get_type(jget(opt, "skip_last_full_attention")), json_type_boolean);
    cr_assert(json_object_get_boolean(jget(rt, "skip_last_full_attention")));
    cr_assert_eq(json_object_get_int(jget(rt, "last_full_attention_layer")), E2B_LAST_FULL);
    pack_close(&p);
    pack_close(&pr);
    free(ref);
    free(q);
    free(hf);
    th_rmtree(dir);
}

static void add_rule(struct plan_rule **v, size_t *n, const char *arg, bool dense)
{
    struct err e = {0};
    *v = realloc(*v, (*n + 1) * sizeof **v);
    cr_assert_eq(plan_rule_parse(&(*v)[*n], arg, dense, &e), ERR_OK, "%s: %s", arg, e.msg);
    (*n)++;
}

static void free_rules(struct plan_opts *o)
{
    for (size_t i = 0; i < o->n_quantize; i++)
        plan_rule_free(&o->quantize[i]);
    for (size_t i = 0; i < o->n_keep_dense; i++)
        plan_rule_free(&o->keep_dense[i]);
    free(o->quantize);
    free(o->keep_dense);
}

Test(convert, ple_dense_and_rules)
{
    char *dir = th_mkdtemp();
    char *hf = th_fixture(dir, "hf", fx("e2b", FX_HF, 5));
    char *ref = convert_to(dir, "ref.gpk", hf, copts(NULL));
    struct convert_opts o = copts(NULL);
    o.plan.bits = 4;
    o.plan.ple_dense = true;
    add_rule(&o.plan.quantize, &o.plan.n_quantize, "mlp\\.down_proj=8:32", false);
    add_rule(&o.plan.keep_dense, &o.plan.n_keep_dense, "self_attn\\.o_proj", true);
    add_rule(&o.plan.keep_dense, &o.plan.n_keep_dense, "layers\\.3\\.mlp\\.down_proj", true);
    char *q = convert_to(dir, "q.gpk", hf, o);
    struct pack p, pr;
    open_pack(&p, q);
    open_pack(&pr, ref);
    struct json_object *qz = quantized_of(&p);

    const struct pack_tensor *ple = pack_find(&p, "per_layer_model_projection.weight");
    cr_assert(ple && ple->dtype == DT_BF16, "per_layer_model_projection stays BF16");
    cr_assert_null(jget(qz, "per_layer_model_projection"));
    cr_assert_eq(memcmp(pack_data(&p, ple), pack_data(&pr, pack_find(&pr, "per_layer_model_projection.weight")),
                        (size_t)ple->nbytes),
                 0);
    cr_assert(jget(qz, "embed_tokens_per_layer"), "only the projection is kept dense");
    for (int l = 0; l < E2B_LAYERS; l++) {
        char m[96];
        snprintf(m, sizeof m, "layers.%d.mlp.down_proj", l);
        struct json_object *d = jget(qz, m);
        if (l == 3) {
            cr_assert_null(d, "--keep-dense wins over --quantize");
            cr_assert_eq(pack_find(&p, "layers.3.mlp.down_proj.weight")->dtype, DT_BF16);
        } else {
            cr_assert(d, "%s", m);
            cr_assert_eq(json_object_get_int(jget(d, "bits")), 8, "%s", m);
            cr_assert_eq(json_object_get_int(jget(d, "group_size")), 32, "%s", m);
            struct qmod qm = dequant_module(&p, m, d);
            char w[128];
            snprintf(w, sizeof w, "%s.weight", m);
            uint64_t n;
            float *src = pack_floats(&pr, w, &n);
            assert_within_scale(&qm, src, m);
            free(src);
            qmod_free(&qm);
        }
        snprintf(m, sizeof m, "layers.%d.mlp.gate_proj", l);
        cr_assert_eq(json_object_get_int(jget(jget(qz, m), "bits")), 4, "%s", m);
        cr_assert_eq(json_object_get_int(jget(jget(qz, m), "group_size")), 64, "%s", m);
        snprintf(m, sizeof m, "layers.%d.self_attn.o_proj", l);
        cr_assert_null(jget(qz, m), "%s kept dense", m);
        snprintf(m, sizeof m, "layers.%d.self_attn.o_proj.weight", l);
        cr_assert_eq(pack_find(&p, m)->dtype, DT_BF16, "%s", m);
    }
    struct json_object *opt = jget(p.manifest, "options");
    cr_assert_str_eq(json_object_get_string(jget(opt, "ple_projection")), "dense");
    cr_assert_str_eq(json_object_get_string(json_object_array_get_idx(jget(opt, "quantize"), 0)),
                     "mlp\\.down_proj=8:32");
    cr_assert_eq(json_object_array_length(jget(opt, "keep_dense")), 2);
    cr_assert_str_eq(json_object_get_string(json_object_array_get_idx(jget(opt, "keep_dense"), 0)),
                     "self_attn\\.o_proj");
    pack_close(&p);
    pack_close(&pr);
    free_rules(&o.plan);
    free(ref);
    free(q);
    free(hf);
    th_rmtree(dir);
}

Test(convert, rule_parsing)
{
    struct plan_rule r;
    struct err e = {0};
    cr_assert_eq(plan_rule_parse(&r, "mlp\\.down_proj=8:32", false, &e), ERR_OK, "%s", e.msg);
    cr_assert_str_eq(r.pattern, "mlp\\.down_proj");
    cr_assert_eq(r.bits, 8);
    cr_assert_eq(r.group_size, 32);
    plan_rule_free(&r);
    cr_assert_eq(plan_rule_parse(&r, "q_proj=6", false, &e), ERR_OK, "%s", e.msg);
    cr_assert_eq(r.bits, 6);
    cr_assert_eq(r.group_size, 64, "group defaults to 64");
    plan_rule_free(&r);
    static const char *const bad[] = {"q_proj", "=4", "q_proj=7", "q_proj=4:48", "q_proj=4:", "q_proj=x"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cr_assert_eq(plan_rule_parse(&r, bad[i], false, &e), ERR_USAGE, "%s accepted", bad[i]);
        cr_assert(strstr(e.msg, bad[i]), "message names the argument: %s", e.msg);
    }
    cr_assert_eq(plan_rule_parse(&r, "down_proj=nvfp4", false, &e), ERR_OK, "%s", e.msg);
    cr_assert(r.mode == QM_NVFP4 && r.bits == 4 && r.group_size == 16, "a mode brings its bits and group");
    plan_rule_free(&r);
    cr_assert_eq(plan_rule_parse(&r, "([", true, &e), ERR_USAGE);
    cr_assert(strstr(e.msg, "'keep_dense'") && strstr(e.msg, "regular expression"), "%s", e.msg);
}

Test(convert, dry_run_writes_nothing)
{
    char *dir = th_mkdtemp();
    char *hf = th_fixture(dir, "hf", fx("26b-a4b", FX_HF, 5));
    char *outdir = fio_join(dir, "out");
    struct err e = {0};
    cr_assert_eq(fio_mkdirs(outdir, &e), ERR_OK);
    char *out = fio_join(outdir, "x.gpk");
    struct convert_opts o = copts(out);
    o.plan.bits = 4;
    add_rule(&o.plan.quantize, &o.plan.n_quantize, "mlp\\.down_proj=8:32", false);
    o.dry_run = true;
    struct convert_report r;
    convert_ok(&r, hf, &o);
    cr_assert(!r.written);
    cr_assert_eq(r.out_bytes, 0);
    cr_assert(!exists(out));
    cr_assert_eq(count_entries(outdir), 0, "no file, no temporary file");
    uint64_t bytes = 0, params = 0;
    for (size_t i = 0; i < r.plan.n; i++) {
        const struct plan_item *it = &r.plan.items[i];
        uint64_t n = 1;
        for (int k = 0; k < it->nt->rank; k++)
            n *= it->nt->shape[k];
        params += n;
        bytes += it->bytes;
        uint64_t want = it->quantized_out ? n * (uint64_t)it->bits / 8 + 2 * (n / (uint64_t)it->group_size) * 2
                                          : n * dtype_table[it->dtype].bits / 8;
        cr_assert_eq(it->bytes, want, "%s bytes", it->nt->name);
    }
    cr_assert_eq(r.plan.bytes, bytes, "plan total is the sum of its items");
    cr_assert_eq(r.plan.params, params);
    uint64_t planned = r.plan.bytes;
    size_t n_items = r.plan.n;
    convert_free(&r);

    /* the real conversion writes exactly the planned bytes */
    o.dry_run = false;
    convert_ok(&r, hf, &o);
    cr_assert(r.written);
    cr_assert_eq(r.out_bytes, planned);
    cr_assert_eq(r.plan.n, n_items);
    convert_free(&r);
    struct pack p;
    open_pack(&p, out);
    uint64_t sum = 0;
    for (size_t i = 0; i < p.n_tensors; i++)
        sum += p.tensors[i].nbytes;
    cr_assert_eq(sum, planned, "pack tensor bytes %llu, plan %llu", (unsigned long long)sum,
                 (unsigned long long)planned);
    pack_close(&p);
    cr_assert_eq(count_entries(outdir), 1);
    free_rules(&o.plan);
    free(out);
    free(outdir);
    free(hf);
    th_rmtree(dir);
}

/* ------------------------------------------------------------------ lm_head */

Test(convert, lm_head_tied_and_untied)
{
    char *dir = th_mkdtemp();
    char *text = th_fixture(dir, "text", fx("e2b", FX_TEXT, 4));
    char *stp = fio_join(text, "model.safetensors");
    struct st_file st;
    struct err e = {0};
    cr_assert_eq(st_open(&st, stp, 0, &e), ERR_OK, "%s", e.msg);
    const struct st_tensor *emb = st_find(&st, "model.embed_tokens.weight");
    cr_assert(emb);
    const uint8_t *eb;
    cr_assert_eq(st_data(&st, emb, &eb, &e), ERR_OK);
    size_t nb = (size_t)(emb->end - emb->begin);
    uint8_t *head = malloc(nb);
    memcpy(head, eb, nb);
    struct extra_tensor x = {"lm_head.weight", DT_BF16, 2, {512, 128}, head};
    char *tied = clone_ckpt(dir, "tied", text, NULL, NULL, &x);
    head[nb / 2] ^= 0x01;
    char *untied = clone_ckpt(dir, "untied", text, NULL, NULL, &x);
    struct extra_tensor y = {"lm_head.weight", DT_BF16, 2, {256, 128}, head};
    char *shaped = clone_ckpt(dir, "shaped", text, NULL, NULL, &y);
    st_close(&st);

    char *out = fio_join(dir, "tied.gpk");
    struct convert_opts o = copts(out);
    struct convert_report r;
    convert_ok(&r, tied, &o);
    const struct norm_log *lg = find_log(&r, "lm_head.weight");
    cr_assert(lg, "lm_head.weight logged");
    cr_assert_str_eq(lg->action, "dropped");
    cr_assert(strstr(lg->reason, "tied"), "%s", lg->reason);
    convert_free(&r);
    struct pack p;
    open_pack(&p, out);
    cr_assert_null(pack_find(&p, "lm_head.weight"));
    pack_close(&p);
    char *plain = convert_to(dir, "plain.gpk", text, copts(NULL));
    assert_same_tensors(out, plain);

    char *out2 = fio_join(dir, "untied.gpk");
    o.out = out2;
    int rc = convert_run(&r, untied, &o, &e);
    cr_assert_eq(rc, ERR_FORMAT, "%s", e.msg);
    cr_assert(strstr(e.msg, "lm_head.weight differs from embed_tokens.weight"), "%s", e.msg);
    convert_free(&r);
    cr_assert(!exists(out2));

    rc = convert_run(&r, shaped, &o, &e);
    cr_assert_eq(rc, ERR_FORMAT, "an lm_head of another shape is refused: %s", e.msg);
    cr_assert(strstr(e.msg, "lm_head.weight (BF16 [256, 128])") &&
                  strstr(e.msg, "embed_tokens.weight (BF16 [512, 128])"),
              "both shapes named: %s", e.msg);
    convert_free(&r);
    cr_assert(!exists(out2));

    free(head);
    free(stp);
    free(out);
    free(out2);
    free(plain);
    free(tied);
    free(untied);
    free(shaped);
    free(text);
    th_rmtree(dir);
}

/* ------------------------------------------------------------------ QAT lattice */

Test(convert, qat_lattice)
{
    char *dir = th_mkdtemp();
    char *hf = th_fixture(dir, "hf", fx("e2b", FX_HF, 8));
    const char *key = "model.language_model.layers.0.self_attn.q_proj.weight";
    /* q_proj of layer 0 is [Nq*hd = 128, H = 128]: every group of 32 is d*q, q in [-8, 7], with d of four
     * significant bits (so d, d*q and -8d are exact in bf16) */
    enum { ROWS = 128, COLS = 128 };
    float *lat = malloc(ROWS * COLS * sizeof *lat);
    uint8_t *bytes = malloc(ROWS * COLS * 2);
    uint64_t s = 12345;
    for (int g = 0; g < ROWS * COLS / 32; g++) {
        float d = ldexpf(1.0f + (float)(g % 8) / 8.0f, -(4 + g % 5));
        for (int i = 0; i < 32; i++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            int q = (int)((s >> 33) % 16) - 8;
            if (i == 0)
                q = g % 2 ? 7 : -8; /* the grid's ends appear */
            lat[g * 32 + i] = d * (float)q;
        }
    }
    dtype_from_f32(DT_BF16, lat, bytes, ROWS * COLS);
    float back[ROWS * COLS / 32];
    for (int i = 0; i < ROWS * COLS; i++) {
        dtype_to_f32(DT_BF16, bytes + 2 * i, back, 1);
        cr_assert_eq(back[0], lat[i], "lattice value %d exact in bf16", i);
    }
    char *src = clone_ckpt(dir, "lat", hf, key, bytes, NULL);

    char *out = fio_join(dir, "lat.gpk");
    struct convert_opts o = copts(out);
    o.plan.bits = 4;
    o.plan.group_size = 32;
    o.plan.qat_lattice = true;
    struct convert_report r;
    convert_ok(&r, src, &o);
    const struct plan_item *it = find_item(&r, "layers.0.self_attn.q_proj.weight");
    cr_assert(it && it->lattice, "q_proj planned on the lattice");
    cr_assert_eq(it->lattice_groups, ROWS * COLS / 32);
    cr_assert_eq(it->lattice_exact, it->lattice_groups, "%llu of %llu groups exact",
                 (unsigned long long)it->lattice_exact, (unsigned long long)it->lattice_groups);
    uint64_t groups = 0, exact = 0;
    for (size_t i = 0; i < r.plan.n; i++) {
        groups += r.plan.items[i].lattice_groups;
        exact += r.plan.items[i].lattice_exact;
    }
    cr_assert_eq(r.lattice_groups, groups);
    cr_assert_eq(r.lattice_exact, exact);
    uint64_t other_groups = groups - it->lattice_groups, other_exact = exact - it->lattice_exact;
    cr_assert_gt(other_groups, 1000);
    cr_assert_lt((double)other_exact, 0.5 * (double)other_groups, "random weights: %llu of %llu groups exact",
                 (unsigned long long)other_exact, (unsigned long long)other_groups);
    uint64_t rg = r.lattice_groups, re = r.lattice_exact;
    convert_free(&r);

    struct pack p;
    open_pack(&p, out);
    struct json_object *qz = quantized_of(&p), *entry = jget(qz, "layers.0.self_attn.q_proj");
    cr_assert(entry);
    cr_assert_eq(json_object_get_int(jget(entry, "bits")), 4);
    cr_assert_eq(json_object_get_int(jget(entry, "group_size")), 32);
    struct qmod m = dequant_module(&p, "layers.0.self_attn.q_proj", entry);
    for (int i = 0; i < ROWS * COLS; i++)
        if (m.deq[i] != lat[i])
            cr_assert_fail("element %d: dequantized %g, source %g", i, (double)m.deq[i], (double)lat[i]);
    qmod_free(&m);
    struct json_object *l = jget(p.manifest, "qat_lattice");
    cr_assert(l, "manifest reports the lattice share");
    cr_assert_eq((uint64_t)json_object_get_int64(jget(l, "groups")), rg);
    cr_assert_eq((uint64_t)json_object_get_int64(jget(l, "exact")), re);
    cr_assert(json_object_get_boolean(jget(jget(p.manifest, "options"), "qat_lattice")));
    pack_close(&p);

    free(lat);
    free(bytes);
    free(out);
    free(src);
    free(hf);
    th_rmtree(dir);
}

/* ------------------------------------------------------------------ MLX export */

/* dir_a/name and dir_b/name hold the same bytes. */
static void assert_same_bytes(const char *dir_a, const char *dir_b, const char *name)
{
    char *a = fio_join(dir_a, name), *b = fio_join(dir_b, name);
    size_t la, lb;
    uint8_t *x = th_read(a, &la), *y = th_read(b, &lb);
    cr_assert(x && y, "%s, %s", a, b);
    cr_expect(la == lb && !memcmp(x, y, la), "%s and %s differ", a, b);
    free(x);
    free(y);
    free(a);
    free(b);
}

Test(convert, mlx_export)
{
    char *dir = th_mkdtemp();
    struct fixture_opts f = fx("e2b", FX_HF, 6);
    f.multimodal = true;
    char *mm = th_fixture(dir, "mm", f);

    /* unquantized MLX export of the multimodal checkpoint */
    char *plain = fio_join(dir, "plain");
    struct convert_opts o = copts(plain);
    o.format_mlx = true;
    struct convert_report r;
    convert_ok(&r, mm, &o);
    cr_assert_eq(r.n_files, 4, "model.safetensors, config.json and the fixture's tokenizer.json, tokenizer_config.json");
    convert_free(&r);
    assert_loadable(plain);
    assert_same_bytes(mm, plain, "tokenizer.json");
    assert_same_bytes(mm, plain, "tokenizer_config.json");
    struct json_object *cfg = read_json(plain, "config.json");
    cr_assert_null(jget(cfg, "quantization"), "nothing quantized, no quantization block");
    cr_assert_str_eq(json_object_get_string(jget(cfg, "model_type")), "gemma4");
    json_object_put(cfg);

    /* quantized, last full-attention layer kept dense */
    char *mlx = fio_join(dir, "mlx");
    o.out = mlx;
    o.plan.bits = 4;
    o.plan.skip_last_full = true;
    convert_ok(&r, mm, &o);
    size_t n_quant = 0;
    for (size_t i = 0; i < r.plan.n; i++)
        n_quant += r.plan.items[i].quantized_out;
    convert_free(&r);
    assert_loadable(mlx);
    struct check_report chk;
    struct err e = {0};
    cr_assert_eq(check_run(&chk, mlx, 0, &e), ERR_OK);
    cr_assert_eq((size_t)chk.n_quantized, n_quant, "check sees every quantized module");
    check_free(&chk);

    cfg = read_json(mlx, "config.json");
    cr_assert_str_eq(json_object_get_string(jget(cfg, "model_type")), "gemma4");
    cr_assert(jget(cfg, "vision_config"), "multimodal config kept");
    struct json_object *q = jget(cfg, "quantization");
    cr_assert(q, "quantization block");
    cr_assert_eq(json_object_get_int(jget(q, "bits")), 4);
    cr_assert_eq(json_object_get_int(jget(q, "group_size")), 64);
    cr_assert_str_eq(json_object_get_string(jget(q, "mode")), "affine");
    static const char *const dense9[] = {"q_proj", "o_proj"};
    for (int k = 0; k < 2; k++) {
        char key[128];
        snprintf(key, sizeof key, "language_model.model.layers.9.self_attn.%s", dense9[k]);
        struct json_object *v = jget(q, key);
        cr_assert(v, "%s override", key);
        cr_assert_eq(json_object_get_type(v), json_type_boolean, "%s", key);
        cr_assert(!json_object_get_boolean(v), "%s: false", key);
    }
    cr_assert(jget(q, "language_model.model.layers.9.mlp.down_proj"));
    cr_assert_null(jget(q, "language_model.model.layers.4.self_attn.q_proj"), "global setting, no override");
    struct json_object *qc = jget(cfg, "quantization_config");
    cr_assert(qc && jget(qc, "language_model.model.layers.9.self_attn.q_proj"), "quantization_config mirrors it");
    json_object_put(cfg);

    struct st_file st, src;
    char *stp = fio_join(mlx, "model.safetensors"), *srcp = fio_join(mm, "model.safetensors");
    cr_assert_eq(st_open(&st, stp, 0, &e), ERR_OK, "%s", e.msg);
    cr_assert_eq(st_open(&src, srcp, 0, &e), ERR_OK, "%s", e.msg);
    cr_assert_str_eq(st_meta_get(&st, "format"), "mlx");
    size_t towers = 0;
    for (size_t i = 0; i < st.n_tensors; i++) {
        const char *n = st.tensors[i].name;
        cr_assert(strncmp(n, "model.", 6), "%s: no HF model. wrapper", n);
        if (!strncmp(n, "language_model.model.", 21))
            continue;
        cr_assert(!strncmp(n, "vision_tower.", 13) || !strncmp(n, "audio_tower.", 12) ||
                      !strncmp(n, "embed_vision.", 13) || !strncmp(n, "embed_audio.", 12),
                  "%s", n);
        towers++;
        char key[320];
        snprintf(key, sizeof key, "model.%s", n);
        const struct st_tensor *s = st_find(&src, key);
        cr_assert(s, "%s comes from %s", n, key);
        const uint8_t *a, *b;
        cr_assert_eq(st_data(&st, &st.tensors[i], &a, &e), ERR_OK);
        cr_assert_eq(st_data(&src, s, &b, &e), ERR_OK);
        cr_assert_eq(st.tensors[i].end - st.tensors[i].begin, s->end - s->begin);
        cr_assert_eq(memcmp(a, b, (size_t)(s->end - s->begin)), 0, "%s carried byte for byte", n);
    }
    cr_assert_gt(towers, 0);
    cr_assert(st_find(&st, "vision_tower.encoder.layers.6.self_attn.k_proj.linear.weight"),
              "vision layer >= F0 kept");
    const struct st_tensor *emb = st_find(&st, "language_model.model.embed_tokens.weight");
    cr_assert(emb && emb->dtype == DT_U32);
    cr_assert(st_find(&st, "language_model.model.embed_tokens.scales"));
    const struct st_tensor *q9 = st_find(&st, "language_model.model.layers.9.self_attn.q_proj.weight");
    cr_assert(q9 && q9->dtype == DT_BF16);
    cr_assert_null(st_find(&st, "language_model.model.layers.9.self_attn.q_proj.scales"));
    cr_assert_null(st_find(&st, "language_model.model.layers.5.self_attn.k_proj.weight"));
    st_close(&st);
    st_close(&src);
    free(stp);
    free(srcp);

    /* the export converts back (copy) into the same pack as a direct conversion */
    struct convert_opts po = copts(NULL);
    po.plan.bits = 4;
    po.plan.skip_last_full = true;
    char *direct = convert_to(dir, "direct.gpk", mm, po);
    char *back = convert_to(dir, "back.gpk", mlx, copts(NULL));
    assert_same_tensors(direct, back);

    /* text-only export */
    char *txt = fio_join(dir, "txt");
    o.out = txt;
    o.text_only = true;
    convert_ok(&r, mm, &o);
    convert_free(&r);
    assert_loadable(txt);
    cfg = read_json(txt, "config.json");
    cr_assert_str_eq(json_object_get_string(jget(cfg, "model_type")), "gemma4_text");
    cr_assert_null(jget(cfg, "text_config"));
    cr_assert_null(jget(cfg, "vision_config"));
    cr_assert_eq(json_object_get_int(jget(cfg, "num_hidden_layers")), E2B_LAYERS);
    q = jget(cfg, "quantization");
    struct json_object *v = jget(q, "model.layers.9.self_attn.q_proj");
    cr_assert(v && json_object_get_type(v) == json_type_boolean && !json_object_get_boolean(v));
    json_object_put(cfg);
    stp = fio_join(txt, "model.safetensors");
    cr_assert_eq(st_open(&st, stp, 0, &e), ERR_OK, "%s", e.msg);
    for (size_t i = 0; i < st.n_tensors; i++)
        cr_assert(!strncmp(st.tensors[i].name, "model.", 6) && !strstr(st.tensors[i].name, "tower"), "%s",
                  st.tensors[i].name);
    cr_assert(st_find(&st, "model.embed_tokens.weight"));
    st_close(&st);
    free(stp);
    char *back_txt = convert_to(dir, "back_txt.gpk", txt, copts(NULL));
    assert_same_tensors(direct, back_txt);

    free(back_txt);
    free(direct);
    free(back);
    free(txt);
    free(mlx);
    free(plain);
    free(mm);
    th_rmtree(dir);
}

Test(convert, mlx_export_moe)
{
    char *dir = th_mkdtemp();
    char *hf = th_fixture(dir, "hf", fx("26b-a4b", FX_HF, 2));
    char *out = fio_join(dir, "mlx");
    struct convert_opts o = copts(out);
    o.format_mlx = true;
    o.plan.bits = 4;
    struct convert_report r;
    convert_ok(&r, hf, &o);
    convert_free(&r);
    assert_loadable(out);
    struct json_object *cfg = read_json(out, "config.json");
    /* text-only source (no towers) but an HF multimodal layout: the router override is a dict */
    struct json_object *q = jget(cfg, "quantization");
    struct json_object *router = jget(q, "language_model.model.layers.0.router.proj");
    cr_assert(router, "router override");
    cr_assert_eq(json_object_get_int(jget(router, "bits")), 8);
    cr_assert_eq(json_object_get_int(jget(router, "group_size")), 64);
    json_object_put(cfg);
    struct st_file st;
    struct err e = {0};
    char *stp = fio_join(out, "model.safetensors");
    cr_assert_eq(st_open(&st, stp, 0, &e), ERR_OK, "%s", e.msg);
    cr_assert(st_find(&st, "language_model.model.layers.0.experts.switch_glu.gate_proj.weight"));
    cr_assert(st_find(&st, "language_model.model.layers.0.experts.switch_glu.down_proj.scales"));
    cr_assert_null(st_find(&st, "language_model.model.layers.0.experts.gate_proj.weight"));
    st_close(&st);
    free(stp);
    struct convert_opts po = copts(NULL);
    po.plan.bits = 4;
    char *direct = convert_to(dir, "direct.gpk", hf, po);
    char *back = convert_to(dir, "back.gpk", out, copts(NULL));
    assert_same_tensors(direct, back);
    free(direct);
    free(back);
    free(out);
    free(hf);
    th_rmtree(dir);
}

/* ------------------------------------------------------------------ refused inputs */

Test(convert, refuses_what_check_rejects)
{
    char *dir = th_mkdtemp();
    char *hf = th_fixture(dir, "hf", fx("e2b", FX_HF, 1));
    char *cfgp = fio_join(hf, "config.json");
    struct json_object *cfg = json_object_from_file(cfgp);
    cr_assert(cfg);
    json_object_object_add(jget(cfg, "text_config"), "hidden_size", json_object_new_int(96));
    cr_assert_eq(json_object_to_file(cfgp, cfg), 0);
    json_object_put(cfg);

    char *out = fio_join(dir, "x.gpk");
    struct convert_opts o = copts(out);
    struct convert_report r;
    struct err e = {0};
    int rc = convert_run(&r, hf, &o, &e);
    cr_assert_eq(rc, ERR_FORMAT, "%s: %s", err_code_name((enum err_code)rc), e.msg);
    cr_assert(strstr(e.msg, "gempack check"), "%s", e.msg);
    cr_assert(strstr(e.msg, hf), "names the directory: %s", e.msg);
    cr_assert(strstr(e.msg, "does not load as a Gemma 4 text model"), "%s", e.msg);
    cr_assert(strstr(e.msg, "embed_tokens.weight") && strstr(e.msg, "expected [512, 96]") &&
                  strstr(e.msg, "found [512, 128]"),
              "the first problem with expected and found: %s", e.msg);
    cr_assert(!r.written);
    convert_free(&r);
    cr_assert(!exists(out));

    char *emptydir = fio_join(dir, "nothing");
    cr_assert_eq(fio_mkdirs(emptydir, &e), ERR_OK);
    rc = convert_run(&r, emptydir, &o, &e);
    cr_assert_neq(rc, ERR_OK, "an empty directory is refused");
    cr_assert(strstr(e.msg, "config.json"), "%s", e.msg);
    convert_free(&r);
    cr_assert(!exists(out));

    free(emptydir);
    free(out);
    free(cfgp);
    free(hf);
    th_rmtree(dir);
}

/* ------------------------------------------------------------------ MLX microscaling modes */

/* convert --mode M from bf16 writes the same bytes as MLX-style fixtures
 * quantized in M from the same values (fixture --quant M): every quantized
 * module (routers affine 8-bit group 64 beside them) a U32 weight and U8
 * scales without biases, the pack's features naming the modes it uses. */
Test(convert, mx_modes_from_bf16)
{
    char *dir = th_mkdtemp();
    static const struct {
        const char *variant;
        enum qmode mode;
    } cases[] = {{"e2b", QM_MXFP4}, {"e2b", QM_NVFP4}, {"26b-a4b", QM_MXFP8}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char sub[64];
        snprintf(sub, sizeof sub, "%s-hf-%zu", cases[i].variant, i);
        char *hf = th_fixture(dir, sub, fx(cases[i].variant, FX_HF, 7));
        struct fixture_opts fo = fx(cases[i].variant, FX_MLX, 7);
        fo.quant_mode = cases[i].mode;
        qmode_defaults(cases[i].mode, &fo.group_size, &fo.quant_bits);
        snprintf(sub, sizeof sub, "%s-mx-%zu", cases[i].variant, i);
        char *mx = th_fixture(dir, sub, fo);
        struct convert_opts o = copts(NULL);
        o.plan.mode = cases[i].mode;
        o.plan.group_size = 0; /* the mode's own */
        snprintf(sub, sizeof sub, "from-bf16-%zu.gpk", i);
        char *a = convert_to(dir, sub, hf, o);
        snprintf(sub, sizeof sub, "copied-%zu.gpk", i);
        char *b = convert_to(dir, sub, mx, copts(NULL));
        assert_same_tensors(a, b);
        struct pack p;
        open_pack(&p, a);
        struct json_object *qz = quantized_of(&p), *feat = jget(p.manifest, "required_features");
        size_t n_mx = 0, n_router = 0;
        json_object_object_foreach(qz, module, entry) {
            const char *mode = json_object_get_string(jget(entry, "mode"));
            if (strstr(module, "router.proj")) {
                cr_assert_str_eq(mode, "affine", "%s", module);
                n_router++;
                continue;
            }
            cr_assert_str_eq(mode, qmode_name(cases[i].mode), "%s", module);
            cr_assert_null(jget(entry, "biases"), "%s: no biases", module);
            char name[256];
            snprintf(name, sizeof name, "%s.scales", module);
            cr_assert_eq(pack_find(&p, name)->dtype, DT_U8, "%s", name);
            n_mx++;
        }
        cr_assert_gt(n_mx, 0);
        cr_assert_eq(n_router > 0, !strcmp(cases[i].variant, "26b-a4b"));
        char want[32];
        snprintf(want, sizeof want, "quant:%s", qmode_name(cases[i].mode));
        bool named = false;
        for (size_t k = 0; k < json_object_array_length(feat); k++)
            named |= !strcmp(json_object_get_string(json_object_array_get_idx(feat, k)), want);
        cr_assert(named, "required_features lists %s", want);
        pack_close(&p);
        free(a);
        free(b);
        free(hf);
        free(mx);
    }
    th_rmtree(dir);
}

/* The MX options: --mode with other bits, requantizing without leave, and a
 * tensor holding an inf (refused at load, before MLX's quantizer would leave it undefined) are refused; per tensor
 * --quantize REGEX=MODE mixes modes, which the MLX export writes as
 * mlx-lm reads them (a module's dict without "mode" is affine). */
Test(convert, mx_options_and_refusals)
{
    char *dir = th_mkdtemp();
    char *hf = th_fixture(dir, "hf", fx("e2b", FX_HF, 9));
    struct convert_report r;
    struct err e = {0};
    struct convert_opts o = copts(NULL);
    o.dry_run = true;
    o.plan.mode = QM_MXFP4;
    o.plan.group_size = 0;
    o.plan.bits = 8;
    cr_assert_eq(convert_run(&r, hf, &o, &e), ERR_USAGE);
    cr_assert(strstr(e.msg, "'mode' mxfp4 is 4-bit group 32"), "%s", e.msg);
    convert_free(&r);

    struct fixture_opts fo = fx("e2b", FX_MLX, 9);
    fo.quant_mode = QM_NVFP4;
    qmode_defaults(QM_NVFP4, &fo.group_size, &fo.quant_bits);
    char *nv = th_fixture(dir, "nv", fo);
    o = copts(NULL);
    o.dry_run = true;
    o.plan.bits = 4;
    cr_assert_eq(convert_run(&r, nv, &o, &e), ERR_USAGE);
    cr_assert(strstr(e.msg, "already MLX-quantized (nvfp4)") && strstr(e.msg, "--allow-requantize"), "%s", e.msg);
    convert_free(&r);
    o.plan.allow_requantize = true;
    convert_ok(&r, nv, &o);
    cr_assert_eq(find_item(&r, "layers.0.mlp.down_proj.weight")->act, ACT_REQUANTIZE);
    convert_free(&r);

    /* mxfp8 for down_proj, mxfp4 elsewhere; exported for MLX */
    o = copts(NULL);
    o.plan.mode = QM_MXFP4;
    o.plan.group_size = 0;
    add_rule(&o.plan.quantize, &o.plan.n_quantize, "down_proj=mxfp8", false);
    o.format_mlx = true;
    char *out = fio_join(dir, "mlx");
    o.out = out;
    convert_ok(&r, hf, &o);
    convert_free(&r);
    free_rules(&o.plan);
    struct json_object *cfg = read_json(out, "config.json"), *q = jget(cfg, "quantization");
    cr_assert_str_eq(json_object_get_string(jget(q, "mode")), "mxfp4");
    struct json_object *down = jget(q, "language_model.model.layers.0.mlp.down_proj");
    cr_assert(down && !strcmp(json_object_get_string(jget(down, "mode")), "mxfp8"), "per-module mode written");
    json_object_put(cfg);
    assert_loadable(out);

    /* an inf in a float source: MLX's mxfp4 is undefined there, so that group is refused by name */
    static const char key[] = "model.language_model.layers.1.mlp.up_proj.weight";
    char *st = fio_join(hf, "model.safetensors");
    struct st_file f;
    cr_assert_eq(st_open(&f, st, 0, &e), ERR_OK, "%s", e.msg);
    const struct st_tensor *t = NULL;
    for (size_t i = 0; i < f.n_tensors; i++)
        if (!strcmp(f.tensors[i].name, key))
            t = &f.tensors[i];
    cr_assert(t && t->dtype == DT_BF16 && t->rank == 2);
    const uint8_t *data;
    cr_assert_eq(st_data(&f, t, &data, &e), ERR_OK, "%s", e.msg);
    size_t nbytes = (size_t)(t->end - t->begin);
    uint8_t *edited = malloc(nbytes);
    cr_assert(edited);
    memcpy(edited, data, nbytes);
    size_t at = 2 * (size_t)(3 * t->shape[1] + 40); /* row 3, column 40: group 1 in mxfp4 */
    edited[at] = 0x80;
    edited[at + 1] = 0x7F; /* bf16 +inf */
    st_close(&f);
    free(st);
    char *bad = clone_ckpt(dir, "inf", hf, key, edited, NULL);
    free(edited);
    o = copts(NULL);
    o.plan.mode = QM_MXFP4;
    o.plan.group_size = 0;
    char *badout = fio_join(dir, "inf.gpk");
    o.out = badout;
    /* refused when the source is opened, before any quantizer sees it (quant_mx_row's own refusal: test_quant) */
    cr_assert_eq(convert_run(&r, bad, &o, &e), ERR_FORMAT);
    cr_assert(strstr(e.msg, "layers.1.mlp.up_proj.weight element ") && strstr(e.msg, " is +inf: every weight"), "%s",
              e.msg);
    cr_assert_not(exists(badout), "no partial pack");
    convert_free(&r);
    free(badout);
    free(bad);
    free(out);
    free(nv);
    free(hf);
    th_rmtree(dir);
}

/* ------------------------------------------------------------------ the tokenizer travels */

#include "core/gguf.h"
#include "tokenizer/tokenizer.h"

static void pack_file_equals(const struct pack *p, const char *dir, const char *name)
{
    const struct pack_file *f = pack_find_file(p, name);
    cr_assert(f, "the pack stores %s", name);
    char *path = fio_join(dir, name);
    size_t len;
    uint8_t *b = th_read(path, &len);
    cr_assert(b, "%s", path);
    cr_expect(f->nbytes == len && !memcmp(pack_file_data(p, f), b, len), "%s: stored bytes differ from the source's",
              name);
    free(b);
    free(path);
}

static bool note_has(const struct convert_report *r, const char *needle)
{
    for (size_t i = 0; i < r->carried.n_notes; i++)
        if (strstr(r->carried.notes[i], needle))
            return true;
    return false;
}

/* A directory's tokenizer.json, tokenizer_config.json and chat_template.jinja are stored byte for byte;
 * a tokenizer.json gempack cannot read is left out with a note, the weights converted all the same. */
Test(convert, carries_the_tokenizer)
{
    char *dir = th_mkdtemp();
    char *src = th_fixture(dir, "src", fx("e2b", FX_HF, 0));
    static const char tmpl[] = "{{ bos_token }}{% for m in messages %}{{ m['content'] }}{% endfor %}";
    free(th_write(src, "chat_template.jinja", tmpl, strlen(tmpl)));
    char *out = convert_to(dir, "a.gpk", src, copts(NULL));
    struct pack p;
    open_pack(&p, out);
    cr_expect_eq(p.n_files, 3);
    pack_file_equals(&p, src, "tokenizer.json");
    pack_file_equals(&p, src, "tokenizer_config.json");
    pack_file_equals(&p, src, "chat_template.jinja");
    pack_close(&p);
    free(out);

    /* a broken tokenizer.json: a note, the rest stored */
    char *tj = fio_join(src, "tokenizer.json");
    size_t len;
    uint8_t *full = th_read(tj, &len);
    free(th_write(src, "tokenizer.json", full, len / 2));
    char *out2 = fio_join(dir, "b.gpk");
    struct convert_opts o = copts(out2);
    struct convert_report r;
    convert_ok(&r, src, &o);
    cr_expect_eq(r.carried.n, 2);
    cr_expect(note_has(&r, "tokenizer.json not stored: ") && note_has(&r, "tokenizer.json: byte"), "the reader's "
              "message in the note");
    struct json_object *j = convert_json(&r);
    cr_expect_eq(json_object_array_length(jget(j, "files")), 2);
    cr_expect_eq(json_object_array_length(jget(j, "file_notes")), 1);
    json_object_put(j);
    convert_free(&r);
    open_pack(&p, out2);
    cr_expect_null(pack_find_file(&p, "tokenizer.json"));
    pack_file_equals(&p, src, "chat_template.jinja");
    pack_close(&p);

    /* no tokenizer at all: no files, said so */
    unlink(tj);
    char *cfg = fio_join(src, "tokenizer_config.json"), *ct = fio_join(src, "chat_template.jinja");
    unlink(cfg);
    unlink(ct);
    char *out3 = fio_join(dir, "c.gpk");
    o.out = out3;
    convert_ok(&r, src, &o);
    cr_expect_eq(r.carried.n, 0);
    j = convert_json(&r);
    cr_expect_str_eq(json_object_get_string(json_object_array_get_idx(jget(j, "file_notes"), 0)),
                     "no tokenizer in the source");
    json_object_put(j);
    char *text;
    size_t tlen;
    FILE *mf = open_memstream(&text, &tlen);
    convert_print(mf, &r, false);
    fclose(mf);
    cr_expect(strstr(text, "tokenizer: no tokenizer in the source"), "%s", text);
    free(text);
    convert_free(&r);
    open_pack(&p, out3);
    cr_expect_eq(p.n_files, 0);
    cr_expect(!json_object_object_get_ex(p.manifest, "files", NULL));
    pack_close(&p);
    free(full);
    free(tj);
    free(cfg);
    free(ct);
    free(out2);
    free(out3);
    free(src);
    th_rmtree(dir);
}

/* A GGUF's tokenizer metadata becomes a tokenizer.json that loads and gives the GGUF's ids. */
Test(convert, gguf_tokenizer_written)
{
    char *dir = th_mkdtemp();
    struct fixture_opts f = fx("e2b", FX_HF, 0);
    f.format = FXF_GGUF_Q4_0;
    char *src = th_fixture(dir, "g", f);
    char *gguf = fio_join(src, "model.gguf");
    char *out = convert_to(dir, "g.gpk", gguf, copts(NULL));
    struct pack p;
    open_pack(&p, out);
    cr_assert_eq(p.n_files, 1);
    const struct pack_file *pf = pack_find_file(&p, "tokenizer.json");
    cr_assert(pf);
    struct tokenizer *written, *orig;
    struct gguf_file g;
    struct err e = {0};
    cr_assert_eq(tok_load_json_mem(&written, (const char *)pack_file_data(&p, pf), (size_t)pf->nbytes, "stored", &e),
                 ERR_OK, "%s", e.msg);
    cr_assert_eq(gguf_open(&g, gguf, &e), ERR_OK, "%s", e.msg);
    cr_assert_eq(tok_load_gguf(&orig, &g, &e), ERR_OK, "%s", e.msg);
    cr_expect_eq(tok_vocab_size(written), 512);
    static const char *const texts[] = {"The model reads the text.", "<|turn>user\nhi<turn|>", "w\xC3\xB6rld \xF0\x9F\x98\x80"};
    for (size_t i = 0; i < 3; i++) {
        uint32_t *a, *b;
        size_t na, nb;
        cr_assert_eq(tok_encode(written, texts[i], strlen(texts[i]), true, &a, &na, &e), ERR_OK, "%s", e.msg);
        cr_assert_eq(tok_encode(orig, texts[i], strlen(texts[i]), true, &b, &nb, &e), ERR_OK, "%s", e.msg);
        cr_expect(na == nb && !memcmp(a, b, na * sizeof *a), "'%s': ids differ", texts[i]);
        free(a);
        free(b);
    }
    tok_free(written);
    tok_free(orig);
    gguf_close(&g);
    pack_close(&p);
    free(out);
    free(gguf);
    free(src);
    th_rmtree(dir);
}

/* llama.cpp's Gemma 4 vocabulary GGUF (build-ref/, setup.sh): its tokenizer written as a tokenizer.json
 * that loads (262,144 ids), its tokenizer.chat_template (12,045 bytes) as chat_template.jinja, byte for byte. */
Test(convert, gguf_chat_template_carried, .timeout = 120)
{
    const char *path = GP_SOURCE_DIR "/build-ref/llama/ggml-vocab-gemma-4.gguf";
    struct stat st;
    if (stat(path, &st) != 0)
        cr_skip_test("no build-ref/llama/ggml-vocab-gemma-4.gguf: run setup.sh");
    struct source s = {.kind = SRC_GGUF};
    struct err e = {0};
    cr_assert_eq(gguf_open(&s.gguf, path, &e), ERR_OK, "%s", e.msg);
    struct carried c;
    cr_assert_eq(carry_collect(&c, &s, &e), ERR_OK, "%s", e.msg);
    cr_assert_eq(c.n, 2, "%zu files, %zu notes", c.n, c.n_notes);
    cr_expect_str_eq(c.f[0].name, "tokenizer.json");
    cr_expect_str_eq(c.f[1].name, "chat_template.jinja");
    const struct gguf_kv *kv = gguf_find_kv(&s.gguf, "tokenizer.chat_template");
    cr_assert(kv);
    cr_expect_eq(c.f[1].len, 12045);
    cr_expect(kv->n == c.f[1].len && !memcmp(kv->str, c.f[1].data, c.f[1].len));
    struct tokenizer *t;
    cr_assert_eq(tok_load_json_mem(&t, c.f[0].data, c.f[0].len, "written", &e), ERR_OK, "%s", e.msg);
    cr_expect_eq(tok_vocab_size(t), 262144);
    tok_free(t);
    carry_free(&c);
    gguf_close(&s.gguf);
}

/* A tokenizer.json that is a FIFO (never waited on) or a directory: a note, the conversion done. */
Test(convert, hostile_tokenizer_files_are_notes)
{
    char *dir = th_mkdtemp();
    char *src = th_fixture(dir, "src", fx("e2b", FX_HF, 0));
    char *tj = fio_join(src, "tokenizer.json"), *ct = fio_join(src, "chat_template.jinja");
    unlink(tj);
    cr_assert_eq(mkfifo(tj, 0600), 0);
    cr_assert_eq(mkdir(ct, 0700), 0);
    char *out = fio_join(dir, "h.gpk");
    struct convert_opts o = copts(out);
    struct convert_report r;
    convert_ok(&r, src, &o);
    cr_expect(r.written);
    cr_expect_eq(r.carried.n, 1, "tokenizer_config.json only");
    cr_expect(note_has(&r, "tokenizer.json not stored: ") && note_has(&r, "chat_template.jinja not stored: "));
    convert_free(&r);
    free(out);
    free(tj);
    free(ct);
    free(src);
    th_rmtree(dir);
}
