/* A GGUF file of the gemma4 architecture → a gemma4_text checkpoint
 * (INPUTS.md §7.2): the config from the gemma4.* metadata, llama.cpp's
 * tensor names mapped back to the text model's, ne reversed into shapes.
 * F32 / F16 / BF16 tensors are viewed in place; Q4_0 and Q8_0 blocks (32
 * weights, f16 d, value d·(q − 8) or d·q) become MLX affine group 32: codes
 * repacked LSB first (Q8_0 offset by 128), scale d, bias −8d or −128d, F16
 * unless the bias overflows it. Fused experts are split into switch_glu. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/bytes.h"
#include "model/gguf_names.h"
#include "core/jsonx.h"
#include "ingest/transcode.h"
#include "quant/ggml.h"

struct gctx {
    struct source *s;
    unsigned flags;
    struct tshard mem, view;
    struct qmodule *q;
    size_t n_q;
    int64_t n_layers;
};

static void shape_of(const struct gguf_tensor *t, uint64_t *shape)
{
    for (uint32_t i = 0; i < t->n_dims; i++)
        shape[i] = t->ne[t->n_dims - 1 - i];
}

/* Element i of a Q4_0 block: qs[i] low nibbles hold elements 0..15, high 16..31. */
static unsigned q4_nibble(const uint8_t *blk, int i)
{
    return i < 16 ? blk[2 + i] & 15u : blk[2 + i - 16] >> 4;
}

/* Transcodes `rows` source rows of a Q4_0 / Q8_0 tensor (row r of the output
 * is source row map(r)) into codes, scales and biases of dtype adt. */
static void blocks(const struct gguf_tensor *t, uint64_t in, uint64_t rows, uint64_t src0, uint64_t stride_rows,
                   uint64_t half, uint8_t *w, uint8_t *sc, uint8_t *bi, enum dtype adt, struct source_module *rec)
{
    bool q4 = t->type == GGML_Q4_0;
    int bits = q4 ? 4 : 8;
    uint64_t nb = in / 32, bb = q4 ? 18 : 34, sz = dtype_table[adt].bits / 8;
    for (uint64_t r = 0; r < rows; r++) {
        /* stacked experts: output row r is row (r mod half) of expert r / half */
        uint64_t sr = half ? (r / half) * stride_rows + src0 + r % half : src0 + r;
        const uint8_t *row = t->data + sr * nb * bb;
        uint8_t *wr = w + r * in * (uint64_t)bits / 8;
        for (uint64_t b = 0; b < nb; b++) {
            const uint8_t *blk = row + b * bb;
            float d = f16_to_f32(rd_u16le(blk)), sa = d, ba = (q4 ? -8.0f : -128.0f) * d, sv, bv;
            if (q4)
                for (int k = 0; k < 16; k++)
                    wr[b * 16 + (uint64_t)k] = (uint8_t)(q4_nibble(blk, 2 * k) | q4_nibble(blk, 2 * k + 1) << 4);
            else
                for (int k = 0; k < 32; k++)
                    wr[b * 32 + (uint64_t)k] = (uint8_t)(blk[2 + k] ^ 0x80); /* q + 128 */
            dtype_from_f32(adt, &sa, sc + (r * nb + b) * sz, 1);
            dtype_from_f32(adt, &ba, bi + (r * nb + b) * sz, 1);
            dtype_to_f32(adt, sc + (r * nb + b) * sz, &sv, 1);
            dtype_to_f32(adt, bi + (r * nb + b) * sz, &bv, 1);
            if (rec)
                verify_group(rec, sv, bv, bits, (double)d, q4 ? 8.0 : 128.0);
        }
    }
}

/* F16 holds −8d / −128d of every block unless one overflows. */
static enum dtype scale_dtype(const struct gguf_tensor *t, uint64_t in, uint64_t rows)
{
    bool q4 = t->type == GGML_Q4_0;
    uint64_t bb = q4 ? 18 : 34;
    for (uint64_t i = 0; i < rows * (in / 32); i++)
        if (fabsf((q4 ? 8.0f : 128.0f) * f16_to_f32(rd_u16le(t->data + i * bb))) > 65504.0f)
            return DT_F32;
    return DT_F16;
}

/* A ggml block type with a row of the format table: MODULE.weight, the
 * blocks as stored (U8 [.., rows, in/block·bytes]), viewed in place, or copied
 * for a half of fused experts; a block whose scale is not finite is refused. */
static int native(struct gctx *c, const char *name, const struct gguf_tensor *t, int rank, const uint64_t *shape,
                  uint64_t src0, uint64_t stride_rows, struct err *e)
{
    struct source *s = c->s;
    const char *tname;
    uint32_t blk, bb;
    ggml_type_info(t->type, &tname, &blk, &bb);
    enum qmode mode = QM_COUNT;
    for (int m = 0; m < QM_COUNT; m++)
        mode = quant_formats[m].ggml == t->type ? (enum qmode)m : mode;
    if (mode == QM_COUNT) {
        src_problem(s, "%s: type %s: gempack reads F32, F16, BF16 and the ggml block types of INPUTS.md §6.3",
                    t->name, tname ? tname : "unknown");
        return ERR_OK;
    }
    struct ggml_qtype g; /* the values: read when the file is opened for them, not by check */
    int64_t bad = !(c->flags & SRC_HEADERS) && ggml_qtype_find(t->type, &g) ? g.bad_scale(t->data, t->nbytes / bb) : -1;
    if (bad >= 0)
        return err_set(e, ERR_FORMAT, "%s: tensor %s (%s): block %lld has a scale that is not finite", s->path,
                       t->name, tname, (long long)bad);
    uint64_t in = shape[rank - 1], rows = 1, half = rank == 3 ? shape[1] : 0, rb = in / blk * bb, sh[3];
    for (int i = 0; i < rank - 1; i++)
        rows *= shape[i];
    memcpy(sh, shape, (size_t)rank * sizeof *shape);
    sh[rank - 1] = rb;
    char module[200];
    snprintf(module, sizeof module, "%.*s", (int)(strlen(name) - 7), name);
    struct qmodule *q = realloc(c->q, (c->n_q + 1) * sizeof *q);
    if (!q)
        return err_set(e, ERR_NOMEM, "out of memory");
    c->q = q;
    q[c->n_q] = (struct qmodule){.quantized = true, .mode = mode, .bits = 8, .gs = (int)blk};
    snprintf(q[c->n_q].path, sizeof q[c->n_q].path, "%s", module);
    c->n_q++;
    uint64_t at = (uint64_t)(t->data - s->gguf.map) - s->gguf.data_offset;
    if (src0 == 0 && (rank < 3 || stride_rows == half)) /* the tensor as stored */
        return ts_view(&c->view, name, DT_U8, rank, sh, at, at + t->nbytes, e);
    uint8_t *w;
    int rc = ts_add(&c->mem, name, DT_U8, rank, sh, &w, e);
    for (uint64_t r = 0; rc == ERR_OK && w && r < rows; r++)
        memcpy(w + r * rb, t->data + ((r / half) * stride_rows + src0 + r % half) * rb, (size_t)rb);
    return rc;
}

/* Emits `name` (module path + ".weight") from t: rows [src0, src0 + rows) of
 * each of E stacked blocks of stride_rows (E = 1 for a plain tensor). */
static int emit(struct gctx *c, const char *name, const struct gguf_tensor *t, int rank, const uint64_t *shape,
                uint64_t src0, uint64_t stride_rows, struct err *e)
{
    struct source *s = c->s;
    uint64_t in = shape[rank - 1], rows = 1, half = rank == 3 ? shape[1] : 0;
    for (int i = 0; i < rank - 1; i++)
        rows *= shape[i];
    const char *tname;
    uint32_t blk, bb;
    ggml_type_info(t->type, &tname, &blk, &bb);
    if (t->type == GGML_F32 || t->type == GGML_F16 || t->type == GGML_BF16) {
        enum dtype dt = t->type == GGML_F32 ? DT_F32 : t->type == GGML_F16 ? DT_F16 : DT_BF16;
        uint64_t rb = in * dtype_table[dt].bits / 8;
        if (src0 == 0 && (rank < 3 || stride_rows == half)) /* the tensor as stored */
            return ts_view(&c->view, name, dt, rank, shape, (uint64_t)(t->data - s->gguf.map) - s->gguf.data_offset,
                           (uint64_t)(t->data - s->gguf.map) - s->gguf.data_offset + t->nbytes, e);
        uint8_t *w;
        int rc = ts_add(&c->mem, name, dt, rank, shape, &w, e);
        for (uint64_t r = 0; rc == ERR_OK && w && r < rows; r++)
            memcpy(w + r * rb, t->data + ((r / half) * stride_rows + src0 + r % half) * rb, (size_t)rb);
        return rc;
    }
    if (t->type != GGML_Q4_0 && t->type != GGML_Q8_0)
        return native(c, name, t, rank, shape, src0, stride_rows, e);
    int bits = t->type == GGML_Q4_0 ? 4 : 8;
    enum dtype adt = scale_dtype(t, in, rows);
    char module[200], from[48], to[64], key[240];
    snprintf(module, sizeof module, "%.*s", (int)(strlen(name) - 7), name);
    snprintf(from, sizeof from, "%s", tname);
    snprintf(to, sizeof to, "affine %d-bit group 32, %s scales", bits, dtype_name(adt));
    struct source_module *rec = src_module(s, t->name, name, from, to);
    struct qmodule *q = realloc(c->q, (c->n_q + 1) * sizeof *q);
    if (!rec || !q)
        return err_set(e, ERR_NOMEM, "out of memory");
    c->q = q;
    q[c->n_q] = (struct qmodule){.quantized = true, .mode = QM_AFFINE, .bits = bits, .gs = 32};
    snprintf(q[c->n_q].path, sizeof q[c->n_q].path, "%s", module);
    c->n_q++;
    uint64_t shw[3], shs[3];
    memcpy(shw, shape, (size_t)rank * sizeof *shape);
    memcpy(shs, shape, (size_t)rank * sizeof *shape);
    shw[rank - 1] = in * (uint64_t)bits / 32;
    shs[rank - 1] = in / 32;
    uint8_t *w = NULL, *sc = NULL, *bi = NULL;
    int rc = ts_add(&c->mem, name, DT_U32, rank, shw, &w, e);
    size_t ow = w ? (size_t)(w - c->mem.buf) : 0;
    snprintf(key, sizeof key, "%s.scales", module);
    if (rc == ERR_OK)
        rc = ts_add(&c->mem, key, adt, rank, shs, &sc, e);
    size_t os = sc ? (size_t)(sc - c->mem.buf) : 0;
    snprintf(key, sizeof key, "%s.biases", module);
    if (rc == ERR_OK)
        rc = ts_add(&c->mem, key, adt, rank, shs, &bi, e);
    if (rc == ERR_OK && bi)
        blocks(t, in, rows, src0, stride_rows, rank == 3 ? half : 0, c->mem.buf + ow, c->mem.buf + os, bi, adt,
               (c->flags & SRC_HEADERS) ? NULL : rec);
    return rc;
}

/* One GGUF tensor: its name mapped, its shape checked for the type's blocks. */
static int map_tensor(struct gctx *c, const struct gguf_tensor *t, struct err *e)
{
    struct source *s = c->s;
    char rel[200], name[240];
    uint64_t shape[GGUF_MAX_DIMS];
    shape_of(t, shape);
    if (t->n_dims > 3) {
        src_problem(s, "%s: %u dims, but no tensor of the gemma4 text model has more than 3", t->name, t->n_dims);
        return ERR_OK;
    }
    if (!gguf_name_to_text(t->name, rel, sizeof rel)) {
        src_problem(s, "%s: not a tensor of llama.cpp's gemma4 text model", t->name);
        return ERR_OK;
    }
    const char *x = strstr(rel, ".experts.");
    if (x && t->n_dims == 3 && strstr(rel, "switch_glu") == NULL) {
        /* HF's fused experts: [E, 2M, H] gate rows first, then up; [E, H, M] down */
        uint64_t half[3] = {shape[0], shape[1] / 2, shape[2]};
        int pre = (int)(x - rel);
        if (!strcmp(x, ".experts.down_proj")) {
            snprintf(name, sizeof name, "model.%.*s.experts.switch_glu.down_proj.weight", pre, rel);
            return emit(c, name, t, 3, shape, 0, shape[1], e);
        }
        snprintf(name, sizeof name, "model.%.*s.experts.switch_glu.gate_proj.weight", pre, rel);
        int rc = emit(c, name, t, 3, half, 0, shape[1], e);
        snprintf(name, sizeof name, "model.%.*s.experts.switch_glu.up_proj.weight", pre, rel);
        return rc == ERR_OK ? emit(c, name, t, 3, half, half[1], shape[1], e) : rc;
    }
    snprintf(name, sizeof name, "%s%s", strcmp(rel, "lm_head.weight") ? "model." : "", rel);
    return emit(c, name, t, (int)t->n_dims, shape, 0, t->n_dims == 3 ? shape[1] : 0, e);
}

/* ---- metadata → config ---- */

#define KEY(k) "gemma4." k

static int u64_of(struct gctx *c, const char *key, bool optional, uint64_t def, uint64_t *out, struct err *e)
{
    bool found;
    int rc = gguf_get_u64(&c->s->gguf, key, optional, &found, out, e);
    if (rc == ERR_OK && !found)
        *out = def;
    return rc;
}

/* A per-layer integer key: a scalar, or an array of block_count values. */
static bool per_layer(const struct gguf_file *g, const char *key, int64_t L, int64_t *v)
{
    const struct gguf_kv *kv = gguf_find_kv(g, key);
    if (!kv)
        return false;
    for (int64_t i = 0; i < L; i++) {
        if (kv->type == GGUF_ARRAY) {
            if (kv->n != (uint64_t)L || !gguf_array_int(kv, (uint64_t)i, &v[i]))
                return false;
        } else {
            uint64_t u;
            bool found;
            if (gguf_get_u64(g, key, false, &found, &u, NULL) != ERR_OK)
                return false;
            v[i] = (int64_t)u;
        }
    }
    return true;
}

static struct json_object *jnum(double v)
{
    char buf[40];
    snprintf(buf, sizeof buf, "%.17g", v);
    return json_object_new_double_s(v, buf);
}

static int build_config(struct gctx *c, struct err *e)
{
    struct source *s = c->s;
    const struct gguf_file *g = &s->gguf;
    char arch[64];
    bool found;
    int rc = gguf_get_str(g, "general.architecture", false, &found, arch, sizeof arch, e);
    if (rc != ERR_OK)
        return err_prefix(e, "%s", s->path);
    if (strcmp(arch, "gemma4")) { /* refused by its architecture, as a config would be */
        struct json_object *o = json_object_new_object(), *a = json_object_new_array();
        json_object_array_add(a, json_object_new_string(arch));
        json_object_object_add(o, "architectures", a);
        s->config_text = strdup(json_object_to_json_string(o));
        json_object_put(o);
        return s->config_text ? ERR_OK : err_set(e, ERR_NOMEM, "out of memory");
    }
    uint64_t L, H, nq, hd, ghd, W, P, shared, ctx, E, K, M, rd, rd_swa;
    double eps, th, th_swa, cap;
    bool has_cap;
    if ((rc = u64_of(c, KEY("block_count"), false, 0, &L, e)) || (rc = u64_of(c, KEY("embedding_length"), false, 0, &H, e)) ||
        (rc = u64_of(c, KEY("attention.head_count"), false, 0, &nq, e)) ||
        (rc = u64_of(c, KEY("attention.key_length"), false, 0, &ghd, e)) ||
        (rc = u64_of(c, KEY("attention.key_length_swa"), false, 0, &hd, e)) ||
        (rc = u64_of(c, KEY("attention.sliding_window"), false, 0, &W, e)) ||
        (rc = u64_of(c, KEY("embedding_length_per_layer_input"), false, 0, &P, e)) ||
        (rc = u64_of(c, KEY("attention.shared_kv_layers"), true, 0, &shared, e)) ||
        (rc = u64_of(c, KEY("context_length"), false, 0, &ctx, e)) ||
        (rc = u64_of(c, KEY("expert_count"), true, 0, &E, e)) || (rc = u64_of(c, KEY("expert_used_count"), true, 0, &K, e)) ||
        (rc = u64_of(c, KEY("expert_feed_forward_length"), true, 0, &M, e)) ||
        (rc = u64_of(c, KEY("rope.dimension_count"), true, 0, &rd, e)) ||
        (rc = u64_of(c, KEY("rope.dimension_count_swa"), true, 0, &rd_swa, e)) ||
        (rc = gguf_get_f64(g, KEY("attention.layer_norm_rms_epsilon"), false, &found, &eps, e)) ||
        (rc = gguf_get_f64(g, KEY("rope.freq_base"), false, &found, &th, e)) ||
        (rc = gguf_get_f64(g, KEY("rope.freq_base_swa"), false, &found, &th_swa, e)) ||
        (rc = gguf_get_f64(g, KEY("final_logit_softcapping"), true, &has_cap, &cap, e)))
        return err_prefix(e, "%s", s->path);
    const char *fk[] = {"attention.layer_norm_rms_epsilon", "rope.freq_base", "rope.freq_base_swa",
                        "final_logit_softcapping"};
    const double fv[] = {eps, th, th_swa, has_cap ? cap : 0.0};
    for (int i = 0; i < 4; i++)
        if (!isfinite(fv[i]))
            return err_set(e, ERR_CONFIG, "%s: gemma4.%s is %g: expected a finite number", s->path, fk[i], fv[i]);
    if (L < 1 || L > 4096)
        return err_set(e, ERR_CONFIG, "%s: gemma4.block_count %llu, expected 1..4096", s->path, (unsigned long long)L);
    c->n_layers = (int64_t)L;
    int64_t *ff = calloc(L, sizeof *ff), *kvh = calloc(L, sizeof *kvh), *swa = calloc(L, sizeof *swa);
    struct json_object *root = json_object_new_object(), *lt = json_object_new_array();
    if (!ff || !kvh || !swa || !per_layer(g, KEY("feed_forward_length"), (int64_t)L, ff) ||
        !per_layer(g, KEY("attention.head_count_kv"), (int64_t)L, kvh) ||
        !per_layer(g, KEY("attention.sliding_window_pattern"), (int64_t)L, swa))
        rc = err_set(e, ERR_CONFIG, "%s: gemma4.feed_forward_length, attention.head_count_kv and "
                                    "attention.sliding_window_pattern: expected a value or one per layer (%llu)",
                     s->path, (unsigned long long)L);
    int64_t F0 = (int64_t)L - (int64_t)shared, G = 0, Gg = 0, I = ff ? ff[0] : 0;
    bool dw = false, keqv = false;
    for (int64_t i = 0; rc == ERR_OK && i < (int64_t)L; i++) {
        json_object_array_add(lt, json_object_new_string(swa[i] ? "sliding_attention" : "full_attention"));
        int64_t *kv = swa[i] ? &G : &Gg;
        if (*kv && *kv != kvh[i])
            src_problem(s, "gemma4.attention.head_count_kv: layer %lld has %lld, another layer of its type %lld",
                        (long long)i, (long long)kvh[i], (long long)*kv);
        *kv = kvh[i];
        if (ff[i] != I)
            dw |= i >= F0 && ff[i] == 2 * I;
        if (ff[i] != I && !(i >= F0 && ff[i] == 2 * I))
            src_problem(s, "gemma4.feed_forward_length[%lld]: %lld, expected %lld (or %lld on a KV-shared layer)",
                        (long long)i, (long long)ff[i], (long long)I, (long long)(2 * I));
        char v[64];
        snprintf(v, sizeof v, "blk.%lld.attn_v.weight", (long long)i);
        if (!swa[i] && i < F0 && !gguf_find_tensor(g, v))
            keqv = true;
    }
    if (!G)
        G = Gg;
    /* the full layers' rotated share: rope_freqs is 1 on rotated pairs, 1e30 beyond */
    double partial = 1.0;
    const struct gguf_tensor *rf = gguf_find_tensor(g, "rope_freqs.weight");
    if (rc == ERR_OK && rf) {
        uint64_t n = rf->ne[0], ones = 0;
        bool ok = rf->type == GGML_F32 && rf->n_dims == 1 && n * 2 == ghd;
        for (uint64_t i = 0; ok && i < n; i++) {
            float f;
            memcpy(&f, rf->data + 4 * i, 4);
            ok = f == 1.0f ? ones++ == i : f >= 1e29f;
        }
        if (!ok)
            src_problem(s, "rope_freqs.weight: expected F32 [%llu] of 1 (rotated pairs) then 1e30", (unsigned long long)(ghd / 2));
        partial = (double)(2 * ones) / (double)ghd;
    }
    if ((rd && rd != ghd) || (rd_swa && rd_swa != hd))
        src_problem(s, "gemma4.rope.dimension_count(_swa): %llu / %llu, expected the head dims %llu / %llu",
                    (unsigned long long)rd, (unsigned long long)rd_swa, (unsigned long long)ghd,
                    (unsigned long long)hd);
    const struct gguf_tensor *emb = gguf_find_tensor(g, "token_embd.weight"),
                             *ple = gguf_find_tensor(g, "per_layer_token_embd.weight");
    if (rc == ERR_OK && (!emb || emb->n_dims != 2))
        rc = err_set(e, ERR_CONFIG, "%s: token_embd.weight: missing or not 2-D (its rows give the vocabulary)", s->path);
    if (rc == ERR_OK) {
#define ADD(k, v) json_object_object_add(root, k, v)
#define INT(v) json_object_new_int64((int64_t)(v))
        struct json_object *arch_a = json_object_new_array();
        json_object_array_add(arch_a, json_object_new_string("Gemma4ForCausalLM"));
        ADD("architectures", arch_a);
        ADD("model_type", json_object_new_string("gemma4_text"));
        ADD("vocab_size", INT(emb->ne[1]));
        ADD("hidden_size", INT(H));
        ADD("intermediate_size", INT(I));
        ADD("num_hidden_layers", INT(L));
        ADD("num_attention_heads", INT(nq));
        ADD("num_key_value_heads", INT(G));
        ADD("num_global_key_value_heads", Gg && (Gg != G || keqv) ? INT(Gg) : NULL);
        ADD("head_dim", INT(hd));
        ADD("global_head_dim", INT(ghd));
        ADD("attention_k_eq_v", json_object_new_boolean(keqv));
        ADD("num_kv_shared_layers", INT(shared));
        ADD("use_double_wide_mlp", json_object_new_boolean(dw));
        ADD("hidden_size_per_layer_input", INT(P));
        ADD("vocab_size_per_layer_input", INT(ple && ple->n_dims == 2 ? ple->ne[1] : emb->ne[1]));
        ADD("enable_moe_block", json_object_new_boolean(E > 0));
        ADD("num_experts", E ? INT(E) : NULL);
        ADD("top_k_experts", E ? INT(K) : NULL);
        ADD("moe_intermediate_size", E ? INT(M) : NULL);
        ADD("sliding_window", INT(W));
        ADD("layer_types", lt);
        lt = NULL;
        struct json_object *rope = json_object_new_object(), *rs = json_object_new_object(),
                           *rfull = json_object_new_object();
        json_object_object_add(rs, "rope_type", json_object_new_string("default"));
        json_object_object_add(rs, "rope_theta", jnum(th_swa));
        json_object_object_add(rfull, "rope_type", json_object_new_string("proportional"));
        json_object_object_add(rfull, "partial_rotary_factor", jnum(partial));
        json_object_object_add(rfull, "rope_theta", jnum(th));
        json_object_object_add(rope, "sliding_attention", rs);
        json_object_object_add(rope, "full_attention", rfull);
        ADD("rope_parameters", rope);
        ADD("final_logit_softcapping", has_cap ? jnum(cap) : NULL);
        ADD("rms_norm_eps", jnum(eps));
        ADD("hidden_activation", json_object_new_string("gelu_pytorch_tanh"));
        ADD("max_position_embeddings", INT(ctx));
        ADD("tie_word_embeddings", json_object_new_boolean(true));
#undef ADD
#undef INT
    }
    free(ff);
    free(kvh);
    free(swa);
    json_object_put(lt);
    if (rc == ERR_OK) {
        const char *text = json_object_to_json_string_ext(root, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_NOSLASHESCAPE);
        if (!(s->config_text = strdup(text)))
            rc = err_set(e, ERR_NOMEM, "out of memory");
        else
            s->config_len = strlen(text);
    }
    json_object_put(root);
    return rc;
}

/* Adds the quantization block once the tensors are known. */
static int add_quant(struct gctx *c, struct err *e)
{
    struct source *s = c->s;
    struct json_object *root;
    int rc = jsonx_parse(s->config_text, s->config_len, &root, e);
    if (rc != ERR_OK)
        return rc;
    if (c->n_q)
        json_object_object_add(root, "quantization", quant_mlx_block(c->q, c->n_q, true));
    char *text = strdup(json_object_to_json_string_ext(root, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_NOSLASHESCAPE));
    json_object_put(root);
    if (!text)
        return err_set(e, ERR_NOMEM, "out of memory");
    free(s->config_text);
    s->config_text = text;
    s->config_len = strlen(text);
    return ERR_OK;
}

int gguf_src_open(struct source *s, unsigned flags, struct err *e)
{
    struct gctx c = {.s = s, .flags = flags};
    c.mem.data = !(flags & SRC_HEADERS);
    c.view.f = (struct st_file){.file_size = s->gguf.size, .header_len = s->gguf.data_offset - 8,
                                .data_start = s->gguf.data_offset, .map = s->gguf.map};
    int rc = build_config(&c, e);
    bool gemma4 = rc == ERR_OK && c.n_layers > 0;
    for (size_t i = 0; gemma4 && rc == ERR_OK && i < s->gguf.n_tensors; i++)
        if (strcmp(s->gguf.tensors[i].name, "rope_freqs.weight"))
            rc = map_tensor(&c, &s->gguf.tensors[i], e);
    if (rc == ERR_OK)
        rc = ts_commit(s, &c.view, "gguf tensors (in place)", e);
    if (rc == ERR_OK)
        rc = ts_commit(s, &c.mem, "gguf tensors (transcoded, in memory)", e);
    if (rc == ERR_OK)
        rc = ckpt_reindex(&s->ck, NULL, NULL, e);
    if (rc == ERR_OK && gemma4)
        rc = add_quant(&c, e);
    if (rc == ERR_OK)
        s->config_len = strlen(s->config_text);
    st_close(&c.view.f);
    st_close(&c.mem.f);
    free(c.mem.buf);
    free(c.q);
    return rc;
}
