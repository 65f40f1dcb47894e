#include "converter/convert.h"

#include <stdlib.h>
#include <string.h>

#include "ingest/ingest.h"
#include "core/fileio.h"
#include "core/jsonx.h"
#include "core/pack.h"
#include "core/sha256.h"
#include "gp_config.h"

/* ---- provenance and manifest ---- */

static struct json_object *options_json(const struct convert_opts *o)
{
    const struct plan_opts *p = &o->plan;
    struct json_object *j = json_object_new_object();
    json_object_object_add(j, "format", json_object_new_string(o->format_mlx ? "mlx" : "pack"));
    json_object_object_add(j, "mode", json_object_new_string(qmode_name(p->mode)));
    json_object_object_add(j, "bits", p->bits ? json_object_new_int(p->bits) : NULL);
    json_object_object_add(j, "group_size", json_object_new_int(p->group_size));
    struct json_object *q = json_object_new_array(), *d = json_object_new_array();
    for (size_t i = 0; i < p->n_quantize; i++) {
        char s[600];
        if (qformat_fixed(qformat_of(p->quantize[i].mode)))
            snprintf(s, sizeof s, "%s=%s", p->quantize[i].pattern, qmode_name(p->quantize[i].mode));
        else
            snprintf(s, sizeof s, "%s=%d:%d", p->quantize[i].pattern, p->quantize[i].bits, p->quantize[i].group_size);
        json_object_array_add(q, json_object_new_string(s));
    }
    for (size_t i = 0; i < p->n_keep_dense; i++)
        json_object_array_add(d, json_object_new_string(p->keep_dense[i].pattern));
    json_object_object_add(j, "quantize", q);
    json_object_object_add(j, "keep_dense", d);
    json_object_object_add(j, "ple_projection", json_object_new_string(p->ple_dense ? "dense" : "quantize"));
    json_object_object_add(j, "skip_last_full_attention", json_object_new_boolean(p->skip_last_full));
    json_object_object_add(j, "allow_requantize", json_object_new_boolean(p->allow_requantize));
    json_object_object_add(j, "qat_lattice", json_object_new_boolean(p->qat_lattice));
    if (!o->format_mlx)
        json_object_object_add(j, "align", json_object_new_int64(o->align));
    else
        json_object_object_add(j, "text_only", json_object_new_boolean(o->text_only));
    return j;
}

static struct json_object *source_json(const struct convert_report *r)
{
    struct json_object *s = json_object_new_object(), *files = json_object_new_array();
    char hex[65];
    const struct source *src = &r->in.source;
    for (size_t i = 0; i < src->ck.n_files; i++) {
        const struct st_file *f = &src->ck.shards[i];
        struct json_object *fo = json_object_new_object();
        json_object_object_add(fo, "name", json_object_new_string(src->ck.shard_names[i]));
        json_object_object_add(fo, "size", json_object_new_int64((int64_t)f->file_size));
        sha256_hex(f->map + 8, (size_t)f->header_len, hex);
        json_object_object_add(fo, "header_sha256", json_object_new_string(hex));
        json_object_array_add(files, fo);
    }
    if (src->kind == SRC_GGUF) { /* the header, metadata and tensor infos */
        struct json_object *fo = json_object_new_object();
        const char *slash = strrchr(src->path, '/');
        json_object_object_add(fo, "name", json_object_new_string(slash ? slash + 1 : src->path));
        json_object_object_add(fo, "size", json_object_new_int64((int64_t)src->gguf.size));
        sha256_hex(src->gguf.map, (size_t)src->gguf.data_offset, hex);
        json_object_object_add(fo, "header_sha256", json_object_new_string(hex));
        json_object_array_add(files, fo);
    }
    json_object_object_add(s, "files", files);
    sha256_hex(r->in.source.config_text, r->in.source.config_len, hex);
    json_object_object_add(s, "config_sha256", json_object_new_string(hex));
    json_object_object_add(s, "layout", json_object_new_string(name_family_name(r->in.norm.family)));
    json_object_object_add(s, "format", json_object_new_string(source_kind_name(src->kind)));
    json_object_object_add(s, "quantization",
                           json_object_new_string(src->kind != SRC_SAFETENSORS ? source_kind_name(src->kind)
                                                  : r->cfg.quant.mlx ? "mlx"
                                                  : r->cfg.quant.qat_unquantized ? "qat_unquantized"
                                                                                 : "none"));
    return s;
}

/* Writes into a text config object every field whose default differs
 * between loaders (MODEL.md §1.2) with the value this config means, so that
 * HF, mlx-lm and gempack read the same model from it; the unified (12B)
 * class's undeclared per-layer-input and MoE fields become explicit. */
static void explicit_fields(struct json_object *t, const struct gp_config *c)
{
    json_object_object_add(t, "hidden_size_per_layer_input", json_object_new_int64(c->ple_dim));
    json_object_object_add(t, "vocab_size_per_layer_input", json_object_new_int64(c->ple_dim ? c->ple_vocab : 0));
    json_object_object_add(t, "num_kv_shared_layers", json_object_new_int64(c->n_kv_shared));
    json_object_object_add(t, "use_double_wide_mlp", json_object_new_boolean(c->double_wide));
    json_object_object_add(t, "enable_moe_block", json_object_new_boolean(c->moe));
}

/* The text config as a standalone gemma4_text config (no quantization keys:
 * the pack records quantization per module). The 12B's text class is the
 * Gemma 4 text model without PLE and MoE, so it is written as gemma4_text
 * too, with those fields explicit: every loader of gemma4_text runs it. */
static struct json_object *text_config(const struct gp_config *c)
{
    struct json_object *t = NULL;
    json_object_deep_copy(c->text_json, &t, NULL);
    json_object_object_del(t, "quantization");
    json_object_object_del(t, "quantization_config");
    json_object_object_add(t, "model_type", json_object_new_string("gemma4_text"));
    explicit_fields(t, c);
    return t;
}

static struct json_object *quantized_entry(const struct plan_item *it)
{
    const struct norm_tensor *t = it->nt;
    struct json_object *q = json_object_new_object();
    char name[NORM_NAME_MAX + 16];
    json_object_object_add(q, "mode", json_object_new_string(qmode_name(it->mode)));
    json_object_object_add(q, "bits", json_object_new_int(it->bits));
    json_object_object_add(q, "group_size", json_object_new_int(it->group_size));
    json_object_object_add(q, "in_features", json_object_new_int64((int64_t)t->shape[t->rank - 1]));
    json_object_object_add(q, "out_features", json_object_new_int64((int64_t)t->shape[t->rank - 2]));
    for (int k = 0; k < qformat_of(it->mode)->parts; k++) {
        snprintf(name, sizeof name, "%s.%s", t->module, qpart_names[k]);
        json_object_object_add(q, qpart_names[k], json_object_new_string(name));
    }
    json_object_object_add(q, "action", json_object_new_string(plan_action_name(it->act)));
    json_object_object_add(q, "why", json_object_new_string(it->why));
    return q;
}

/* ---- writers ---- */

static int pack_sink(void *ctx, const void *data, size_t len, struct err *e)
{
    return pack_writer_write(ctx, data, len, e);
}

static int st_sink(void *ctx, const void *data, size_t len, struct err *e)
{
    return st_writer_write(ctx, data, len, e);
}

static void lattice_totals(struct convert_report *r)
{
    for (size_t i = 0; i < r->plan.n; i++) {
        r->lattice_groups += r->plan.items[i].lattice_groups;
        r->lattice_exact += r->plan.items[i].lattice_exact;
    }
}

static int write_pack(struct convert_report *r, const struct convert_opts *o, struct err *e)
{
    struct out_tensor *out;
    size_t n;
    int rc = plan_outputs(&r->plan, &out, &n, e);
    if (rc != ERR_OK)
        return rc;
    struct pack_writer w;
    struct stream_state st = {.threads = o->threads};
    if ((rc = pack_writer_open(&w, o->out, o->align, e)) != ERR_OK) {
        free(out);
        return rc;
    }
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += out[i].nbytes;
    for (size_t i = 0; i < n && rc == ERR_OK; i++) {
        rc = pack_writer_begin(&w, out[i].name, out[i].dtype, out[i].rank, out[i].shape, e);
        if (rc == ERR_OK)
            rc = plan_stream(&r->in.source.ck, &out[i], &st, pack_sink, &w, e);
        if (rc == ERR_OK)
            rc = pack_writer_end(&w, e);
        r->out_bytes += out[i].nbytes;
        progress_report(&o->progress, out[i].name, r->out_bytes, total, "B");
    }
    plan_stream_free(&st);
    free(out);
    for (size_t i = 0; i < r->carried.n && rc == ERR_OK; i++)
        rc = pack_writer_add_file(&w, r->carried.f[i].name, r->carried.f[i].data, r->carried.f[i].len, e);
    if (rc != ERR_OK) {
        pack_writer_abort(&w);
        return rc;
    }
    lattice_totals(r);
    struct json_object *f = json_object_new_object(), *model = json_object_new_object(),
                       *quant = json_object_new_object(), *prod = json_object_new_object(),
                       *rt = json_object_new_object();
    json_object_object_add(prod, "name", json_object_new_string("gempack"));
    json_object_object_add(prod, "version", json_object_new_string(GEMPACK_VERSION));
    json_object_object_add(f, "producer", prod);
    json_object_object_add(model, "architecture", json_object_new_string("gemma4_text"));
    json_object_object_add(model, "config", text_config(&r->cfg));
    json_object_object_add(f, "model", model);
    for (size_t i = 0; i < r->plan.n; i++)
        if (r->plan.items[i].quantized_out)
            json_object_object_add(quant, r->plan.items[i].nt->module, quantized_entry(&r->plan.items[i]));
    json_object_object_add(f, "quantized", quant);
    json_object_object_add(f, "normalization", normalize_log_json(&r->in.norm));
    json_object_object_add(f, "source", source_json(r));
    json_object_object_add(f, "options", options_json(o));
    json_object_object_add(rt, "skip_last_full_attention", json_object_new_boolean(o->plan.skip_last_full));
    json_object_object_add(rt, "last_full_attention_layer", json_object_new_int(cfg_last_full_layer(&r->cfg)));
    /* the run-time default of --kv-skip-last-full-attention for this pack */
    json_object_object_add(rt, "kv_skip_last_full_attention", json_object_new_boolean(true));
    json_object_object_add(f, "runtime", rt);
    if (o->plan.qat_lattice) {
        struct json_object *l = json_object_new_object();
        json_object_object_add(l, "groups", json_object_new_int64((int64_t)r->lattice_groups));
        json_object_object_add(l, "exact", json_object_new_int64((int64_t)r->lattice_exact));
        json_object_object_add(f, "qat_lattice", l);
    }
    /* one feature per quantization mode the pack uses */
    const char *qfeat[QM_COUNT];
    size_t n_feat = 0;
    for (int m = 0; m < QM_COUNT; m++)
        for (size_t i = 0; i < r->plan.n; i++)
            if (r->plan.items[i].quantized_out && (int)r->plan.items[i].mode == m) {
                qfeat[n_feat++] = quant_formats[m].feature;
                break;
            }
    rc = pack_writer_finish(&w, f, qfeat, n_feat, e);
    r->n_files = 1;
    return rc;
}

/* MLX name of a canonical module or tensor: prefix + experts.switch_glu. */
static void mlx_name(const char *prefix, const char *canon, char *out, size_t len)
{
    const char *ex = strstr(canon, ".experts.");
    if (ex)
        snprintf(out, len, "%s%.*s.experts.switch_glu.%s", prefix, (int)(ex - canon), canon, ex + strlen(".experts."));
    else
        snprintf(out, len, "%s%s", prefix, canon);
}

/* config.json of the MLX export (NULL: out of memory): the quantization
 * block (quant_mlx_block) holds the global bits/group and a per-module entry
 * for every quantizable module that differs: a dict for other bits/group,
 * false for a module kept dense. */
static struct json_object *mlx_config(const struct convert_report *r, const struct convert_opts *o, const char *prefix)
{
    struct json_object *root = NULL;
    if (o->text_only || !r->cfg.nested) {
        root = text_config(&r->cfg);
        struct json_object *arch = json_object_new_array();
        json_object_array_add(arch, json_object_new_string("Gemma4ForCausalLM"));
        json_object_object_add(root, "architectures", arch);
    } else {
        json_object_deep_copy(r->cfg.root_json, &root, NULL);
        struct json_object *t = json_object_object_get(root, "text_config");
        json_object_object_del(t, "quantization_config");
        explicit_fields(t, &r->cfg);
    }
    json_object_object_del(root, "quantization");
    json_object_object_del(root, "quantization_config");
    struct qmodule *m = calloc(r->plan.n + 1, sizeof *m);
    size_t n = 0, n_quantized = 0;
    if (!m) {
        json_object_put(root);
        return NULL;
    }
    for (size_t i = 0; i < r->plan.n; i++) {
        const struct plan_item *it = &r->plan.items[i];
        if (!it->nt->module[0])
            continue;
        m[n] = (struct qmodule){.quantized = it->quantized_out, .mode = it->mode, .bits = it->bits,
                                .gs = it->group_size};
        mlx_name(prefix, it->nt->module, m[n].path, sizeof m[n].path);
        n++;
        n_quantized += it->quantized_out;
    }
    struct json_object *q = n_quantized ? quant_mlx_block(m, n, false) : NULL, *copy = NULL;
    free(m);
    if (!q)
        return root;
    json_object_deep_copy(q, &copy, NULL);
    json_object_object_add(root, "quantization", q);
    json_object_object_add(root, "quantization_config", copy);
    return root;
}

struct mlx_out {
    char name[320];
    const struct out_tensor *t;     /* text tensor, or NULL for a tower key */
    const struct ckpt_tensor *tower;
    enum dtype dtype;
    int rank;
    uint64_t shape[ST_MAX_RANK];
    uint64_t nbytes;
    int shard;
};

static int write_mlx_shard(struct convert_report *r, struct mlx_out *mo, size_t n, int shard, const char *path,
                           const struct convert_opts *o, uint64_t total, struct err *e)
{
    size_t k = 0;
    struct st_writer_tensor *wt = calloc(n ? n : 1, sizeof *wt);
    if (!wt)
        return err_set(e, ERR_NOMEM, "cannot allocate the shard list");
    for (size_t i = 0; i < n; i++)
        if (mo[i].shard == shard) {
            wt[k] = (struct st_writer_tensor){mo[i].name, mo[i].dtype, mo[i].rank, {0}};
            memcpy(wt[k].shape, mo[i].shape, sizeof wt[k].shape);
            k++;
        }
    static const char *const meta[] = {"format", "mlx"};
    struct st_writer w;
    struct stream_state st = {.threads = o->threads};
    int rc = st_writer_open(&w, path, wt, k, meta, 1, false, e);
    free(wt);
    for (size_t i = 0; i < n && rc == ERR_OK; i++) {
        if (mo[i].shard != shard)
            continue;
        if (mo[i].t) {
            rc = plan_stream(&r->in.source.ck, (struct out_tensor *)mo[i].t, &st, st_sink, &w, e);
        } else {
            const uint8_t *data;
            rc = st_data(&r->in.source.ck.shards[mo[i].tower->shard], mo[i].tower->t, &data, e);
            if (rc == ERR_OK)
                rc = st_writer_write(&w, data, (size_t)mo[i].nbytes, e);
        }
        r->out_bytes += mo[i].nbytes;
        progress_report(&o->progress, mo[i].name, r->out_bytes, total, "B");
    }
    plan_stream_free(&st);
    if (rc == ERR_OK)
        return st_writer_finish(&w, e);
    st_writer_abort(&w);
    return rc;
}

static int write_mlx(struct convert_report *r, const struct convert_opts *o, struct err *e)
{
    bool text_only = o->text_only || !r->cfg.nested;
    const char *prefix = text_only ? "model." : "language_model.model.";
    struct out_tensor *out;
    size_t n_out;
    int rc = plan_outputs(&r->plan, &out, &n_out, e);
    if (rc != ERR_OK)
        return rc;
    size_t n_tw = text_only ? 0 : r->in.norm.n_towers, n = n_out + n_tw;
    struct mlx_out *mo = calloc(n ? n : 1, sizeof *mo);
    struct json_object *cfg = NULL, *index = NULL;
    if (!mo) {
        free(out);
        return err_set(e, ERR_NOMEM, "cannot allocate the output list");
    }
    for (size_t i = 0; i < n_out; i++) {
        mlx_name(prefix, out[i].name, mo[i].name, sizeof mo[i].name);
        mo[i].t = &out[i];
        mo[i].dtype = out[i].dtype;
        mo[i].rank = out[i].rank;
        memcpy(mo[i].shape, out[i].shape, sizeof out[i].shape);
        mo[i].nbytes = out[i].nbytes;
    }
    for (size_t i = 0; i < n_tw; i++) {
        struct mlx_out *m = &mo[n_out + i];
        const struct ckpt_tensor *tw = r->in.norm.towers[i];
        /* mlx-vlm keeps towers without the HF "model." wrapper */
        snprintf(m->name, sizeof m->name, "%s", strncmp(tw->name, "model.", 6) ? tw->name : tw->name + 6);
        m->tower = tw;
        m->dtype = tw->t->dtype;
        m->rank = tw->t->rank;
        memcpy(m->shape, tw->t->shape, sizeof tw->t->shape);
        m->nbytes = tw->t->end - tw->t->begin;
    }
    /* greedy shards of at most 5 GB (a triplet stays together) */
    int shards = 1;
    uint64_t acc = 0, total = 0;
    for (size_t i = 0; i < n; i++)
        total += mo[i].nbytes;
    for (size_t i = 0; i < n; i++) {
        bool tail_part = mo[i].t && mo[i].t->part != PART_WEIGHT;
        if (acc > 0 && acc + mo[i].nbytes > CONVERT_MLX_SHARD_BYTES && !tail_part) {
            shards++;
            acc = 0;
        }
        mo[i].shard = shards - 1;
        acc += mo[i].nbytes;
    }
    if ((rc = fio_mkdirs(o->out, e)) != ERR_OK)
        goto out;
    char fname[64];
    for (int k = 0; k < shards && rc == ERR_OK; k++) {
        if (shards == 1)
            snprintf(fname, sizeof fname, "model.safetensors");
        else
            snprintf(fname, sizeof fname, "model-%05d-of-%05d.safetensors", k + 1, shards);
        char *path = fio_join(o->out, fname);
        rc = path ? write_mlx_shard(r, mo, n, k, path, o, total, e) : err_set(e, ERR_NOMEM, "out of memory");
        free(path);
    }
    if (rc != ERR_OK)
        goto out;
    lattice_totals(r);
    r->n_files = shards + 1;
    if (shards > 1) {
        index = json_object_new_object();
        struct json_object *meta = json_object_new_object(), *wm = json_object_new_object();
        json_object_object_add(meta, "total_size", json_object_new_int64((int64_t)r->out_bytes));
        json_object_object_add(index, "metadata", meta);
        for (size_t i = 0; i < n; i++) {
            snprintf(fname, sizeof fname, "model-%05d-of-%05d.safetensors", mo[i].shard + 1, shards);
            json_object_object_add(wm, mo[i].name, json_object_new_string(fname));
        }
        json_object_object_add(index, "weight_map", wm);
        const char *s = json_object_to_json_string_ext(index, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_NOSLASHESCAPE);
        char *path = fio_join(o->out, "model.safetensors.index.json");
        rc = path ? fio_write_file(path, s, strlen(s), e) : err_set(e, ERR_NOMEM, "out of memory");
        free(path);
        r->n_files++;
    }
    if (rc == ERR_OK) {
        cfg = mlx_config(r, o, prefix);
        const char *s = cfg ? json_object_to_json_string_ext(cfg, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED |
                                                                      JSON_C_TO_STRING_NOSLASHESCAPE)
                            : NULL;
        char *path = s ? fio_join(o->out, "config.json") : NULL;
        rc = path ? fio_write_file(path, s, strlen(s), e) : err_set(e, ERR_NOMEM, "out of memory");
        free(path);
    }
    for (size_t i = 0; i < r->carried.n && rc == ERR_OK; i++) { /* beside config.json */
        char *path = fio_join(o->out, r->carried.f[i].name);
        rc = path ? fio_write_file(path, r->carried.f[i].data, r->carried.f[i].len, e)
                  : err_set(e, ERR_NOMEM, "out of memory");
        free(path);
        r->n_files++;
    }
out:
    if (cfg)
        json_object_put(cfg);
    if (index)
        json_object_put(index);
    free(mo);
    free(out);
    return rc;
}

/* The MLX directory is written through fio_dir_begin/commit: nothing under
 * the output name until it is complete, and an existing non-empty output
 * directory refused rather than mixed with (mlx-lm loads every
 * model*.safetensors it finds). */
static int write_mlx_dir(struct convert_report *r, const struct convert_opts *o, struct err *e)
{
    char *tmp;
    int rc = fio_dir_begin(o->out, &tmp, e);
    if (rc != ERR_OK)
        return rc;
    struct convert_opts to = *o;
    to.out = tmp;
    rc = write_mlx(r, &to, e);
    if (rc != ERR_OK) {
        fio_dir_abort(tmp);
        return rc;
    }
    return fio_dir_commit(o->out, tmp, e);
}

/* ---- the command ---- */

/* The options as they apply: group size 0 means the mode's default;
 * --qat-lattice is the mode's lattice variant, affine 4 bits group 32 (other
 * values given with it are refused); --text-only is for MLX. */
static int resolve(const struct convert_opts *given, struct convert_opts *o, struct err *e)
{
    *o = *given;
    struct plan_opts *p = &o->plan;
    const struct qformat *f = qformat_of(p->mode);
    if (p->qat_lattice) {
        if ((p->bits && p->bits != f->lattice_bits) || (p->group_size && p->group_size != f->lattice_gs) ||
            !f->lattice)
            return err_set(e, ERR_USAGE, "'qat_lattice' emits affine 4-bit group 32 (the q4_0 grid)");
        p->bits = f->lattice_bits;
        p->group_size = f->lattice_gs;
    }
    if (qformat_fixed(f)) { /* a mode with one pair fixes its bits and group */
        if ((p->bits && p->bits != f->default_bits) || (p->group_size && p->group_size != f->default_gs))
            return err_set(e, ERR_USAGE, "'mode' %s is %d-bit group %d: drop 'bits' and 'group_size', or give those",
                           f->name, f->default_bits, f->default_gs);
        p->bits = f->default_bits;
        p->group_size = f->default_gs;
    }
    if (!p->group_size)
        p->group_size = f->default_gs;
    if (o->text_only && !o->format_mlx)
        return err_set(e, ERR_USAGE, "'text_only' applies to 'format' mlx (a pack is always text-only)");
    if (!o->dry_run && (!o->out || !*o->out))
        return err_set(e, ERR_USAGE, "the output path is empty");
    return ERR_OK;
}

/* An MLX export holds only MLX's modes: a tensor kept in a ggml block type is refused by name. */
static int mlx_holds(const struct plan *p, struct err *e)
{
    for (size_t i = 0; i < p->n; i++) {
        const struct plan_item *it = &p->items[i];
        if (it->quantized_out && !qformat_of(it->mode)->mlx)
            return err_set(e, ERR_USAGE, "%s is %s blocks, which no MLX mode holds exactly; give --bits (or --mode) "
                                         "with --allow-requantize to requantize it (the error is reported), or "
                                         "convert to a pack, which keeps the blocks",
                           it->nt->name, qformat_of(it->mode)->name);
    }
    return ERR_OK;
}

int convert_run(struct convert_report *r, const char *dir, const struct convert_opts *given, struct err *e)
{
    memset(r, 0, sizeof *r);
    struct convert_opts opts;
    const struct convert_opts *o = &opts;
    int rc = resolve(given, &opts, e);
    if (rc != ERR_OK)
        return rc;
    opts.plan.mlx = opts.format_mlx;
    rc = ingest_open(&r->in, &r->cfg, dir, 0, e);
    /* the inputs are known now (opened): an output over one is refused before any work */
    if (rc == ERR_OK && !o->dry_run && !o->format_mlx)
        rc = fio_check_output(o->out, e);
    if (rc == ERR_OK && o->check_out)
        rc = fio_check_output(o->check_out, e);
    if (rc == ERR_OK && o->check_out && o->out && fio_same_output(o->check_out, o->out))
        rc = err_set(e, ERR_USAGE, "'report' %s is the output too", o->check_out);
    if (rc == ERR_OK)
        rc = plan_build(&r->in.norm, &r->cfg, &o->plan, &r->plan, e);
    if (rc == ERR_OK && o->format_mlx)
        rc = mlx_holds(&r->plan, e);
    if (rc == ERR_OK)
        rc = carry_collect(&r->carried, &r->in.source, e);
    if (rc == ERR_OK && !o->dry_run) {
        r->out = strdup(o->out);
        rc = o->format_mlx ? write_mlx_dir(r, o, e) : write_pack(r, o, e);
        r->written = rc == ERR_OK;
    }
    return rc;
}

void convert_free(struct convert_report *r)
{
    if (!r)
        return;
    plan_free(&r->plan);
    carry_free(&r->carried);
    ingest_close(&r->in);
    cfg_free(&r->cfg);
    free(r->out);
    memset(r, 0, sizeof *r);
}

/* Whether tensor `it` of the output equals the source's values bit for bit:
 * its own measure, and for a CT / GGUF module also the transcoding's. False
 * when not known (a dry run quantizes nothing). */
static bool item_exactness(const struct convert_report *r, const struct plan_item *it, bool *exact, double *err)
{
    const struct source_module *m = source_find_module(&r->in.source, it->nt->w->name);
    *err = it->max_err;
    *exact = it->max_err == 0.0;
    if (m && m->verified) {
        *err = m->max_abs_err > *err || m->max_abs_err != m->max_abs_err ? m->max_abs_err : *err;
        *exact = *exact && m->exact;
    }
    return it->measured && (!m || m->verified);
}

/* "exact: 158 of 160 tensors ...", then each other one with its error. */
static void print_exactness(FILE *out, const struct convert_report *r)
{
    size_t known = 0, exact = 0;
    for (size_t i = 0; i < r->plan.n; i++) {
        bool x;
        double err;
        if (item_exactness(r, &r->plan.items[i], &x, &err)) {
            known++;
            exact += x;
        }
    }
    if (known < r->plan.n) {
        fprintf(out, "exact: not measured (a dry run quantizes nothing); %zu of %zu tensors are copies, bit for bit\n",
                exact, r->plan.n);
        return;
    }
    fprintf(out, "exact: %zu of %zu tensors equal the source's values bit for bit%s\n", exact, r->plan.n,
            exact == r->plan.n ? "" : "; the others:");
    for (size_t i = 0; i < r->plan.n; i++) {
        const struct plan_item *it = &r->plan.items[i];
        bool x;
        double err;
        item_exactness(r, it, &x, &err);
        if (!x)
            fprintf(out, "  %-56s max |dw| %.3g (%s)\n", it->nt->name, err, it->why);
    }
}

void convert_print(FILE *out, const struct convert_report *r, bool with_plan)
{
    const struct normalized *n = &r->in.norm;
    fprintf(out, "normalization (%zu entries; all of them in --json and in the pack manifest):\n", n->n_log);
    /* grouped by action and reason, with a count and the first key */
    bool *done = calloc(n->n_log ? n->n_log : 1, sizeof *done);
    for (size_t i = 0; done && i < n->n_log; i++) {
        if (done[i])
            continue;
        size_t count = 0;
        for (size_t j = i; j < n->n_log; j++)
            if (!done[j] && !strcmp(n->log[j].action, n->log[i].action) && !strcmp(n->log[j].reason, n->log[i].reason)) {
                done[j] = true;
                count++;
            }
        fprintf(out, "  %-8s %4zu x %s  (e.g. %s)\n", n->log[i].action, count, n->log[i].reason, n->log[i].tensor);
    }
    free(done);
    if (with_plan)
        plan_print(out, &r->plan);
    size_t by_act[ACT_TRANSCODE + 1] = {0};
    for (size_t i = 0; i < r->plan.n; i++)
        by_act[r->plan.items[i].act]++;
    fprintf(out, "plan: %zu tensors: %zu copied, %zu quantized, %zu requantized, %zu dequantized, %zu transcoded; %llu "
                 "bytes, %.3f bits per weight\n",
            r->plan.n, by_act[ACT_COPY], by_act[ACT_QUANTIZE], by_act[ACT_REQUANTIZE], by_act[ACT_DEQUANTIZE],
            by_act[ACT_TRANSCODE],
            (unsigned long long)r->plan.bytes,
            r->plan.params ? 8.0 * (double)r->plan.bytes / (double)r->plan.params : 0.0);
    print_exactness(out, r);
    if (r->lattice_groups)
        fprintf(out, "qat lattice: %llu of %llu groups (%.2f %%) reproduced exactly\n",
                (unsigned long long)r->lattice_exact, (unsigned long long)r->lattice_groups,
                100.0 * (double)r->lattice_exact / (double)r->lattice_groups);
    for (size_t i = 0; i < r->carried.n; i++)
        fprintf(out, "tokenizer file %s: %zu bytes, sha256 %s\n", r->carried.f[i].name, r->carried.f[i].len,
                r->carried.f[i].sha256);
    if (!r->carried.n)
        fprintf(out, "tokenizer: no tokenizer in the source\n");
    for (size_t i = 0; i < r->carried.n_notes; i++)
        fprintf(out, "note: %s\n", r->carried.notes[i]);
    if (r->written)
        fprintf(out, "wrote %s: %d file%s, %llu tensor bytes\n", r->out, r->n_files, r->n_files == 1 ? "" : "s",
                (unsigned long long)r->out_bytes);
}

struct json_object *convert_json(const struct convert_report *r)
{
    struct json_object *o = json_object_new_object();
    json_object_object_add(o, "schema", json_object_new_string("gempack.convert/1"));
    json_object_object_add(o, "output", r->out ? json_object_new_string(r->out) : NULL);
    json_object_object_add(o, "written", json_object_new_boolean(r->written));
    json_object_object_add(o, "normalization", normalize_log_json(&r->in.norm));
    struct json_object *plan = plan_json(&r->plan), *ts = json_object_object_get(plan, "tensors");
    size_t n_exact = 0, n_known = 0;
    for (size_t i = 0; i < r->plan.n; i++) {
        bool x;
        double err;
        bool known = item_exactness(r, &r->plan.items[i], &x, &err);
        struct json_object *t = json_object_array_get_idx(ts, i);
        json_object_object_add(t, "exact", known ? json_object_new_boolean(x) : NULL);
        json_object_object_add(t, "max_abs_error", known ? json_object_new_double(err) : NULL);
        n_known += known;
        n_exact += known && x;
    }
    json_object_object_add(plan, "exact_tensors", n_known == r->plan.n ? json_object_new_int64((int64_t)n_exact) : NULL);
    json_object_object_add(o, "plan", plan);
    struct json_object *src = json_object_new_object(), *mods = json_object_new_array();
    json_object_object_add(src, "format", json_object_new_string(source_kind_name(r->in.source.kind)));
    for (size_t i = 0; i < r->in.source.n_mods; i++) {
        const struct source_module *m = &r->in.source.mods[i];
        struct json_object *j = json_object_new_object();
        json_object_object_add(j, "module", json_object_new_string(m->name));
        json_object_object_add(j, "tensor", json_object_new_string(m->key));
        json_object_object_add(j, "from", json_object_new_string(m->from));
        json_object_object_add(j, "to", json_object_new_string(m->to));
        json_object_object_add(j, "exact", json_object_new_boolean(m->exact));
        json_object_object_add(j, "max_abs_error", json_object_new_double(m->max_abs_err));
        json_object_array_add(mods, j);
    }
    json_object_object_add(src, "transcoded", mods);
    json_object_object_add(o, "source", src);
    if (r->lattice_groups) {
        struct json_object *l = json_object_new_object();
        json_object_object_add(l, "groups", json_object_new_int64((int64_t)r->lattice_groups));
        json_object_object_add(l, "exact", json_object_new_int64((int64_t)r->lattice_exact));
        json_object_object_add(o, "qat_lattice", l);
    }
    json_object_object_add(o, "bytes_written", json_object_new_int64((int64_t)r->out_bytes));
    struct json_object *files = json_object_new_array(), *notes = json_object_new_array();
    for (size_t i = 0; i < r->carried.n; i++) {
        struct json_object *f = json_object_new_object();
        json_object_object_add(f, "name", json_object_new_string(r->carried.f[i].name));
        json_object_object_add(f, "bytes", json_object_new_int64((int64_t)r->carried.f[i].len));
        json_object_object_add(f, "sha256", json_object_new_string(r->carried.f[i].sha256));
        json_object_array_add(files, f);
    }
    if (!r->carried.n)
        json_object_array_add(notes, json_object_new_string("no tokenizer in the source"));
    for (size_t i = 0; i < r->carried.n_notes; i++)
        json_object_array_add(notes, json_object_new_string(r->carried.notes[i]));
    json_object_object_add(o, "files", files);
    json_object_object_add(o, "file_notes", notes);
    return o;
}
