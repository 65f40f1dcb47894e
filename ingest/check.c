#include "ingest/check.h"
#include "ingest/inspect.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "core/fileio.h"
#include "model/layout.h"

/* A text key of the checkpoint, by text-relative name. */
struct tkey {
    const char *rel;
    const struct ckpt_tensor *ct;
    int layer;
    bool used;
};

static int cmp_tkey(const void *a, const void *b)
{
    return strcmp(((const struct tkey *)a)->rel, ((const struct tkey *)b)->rel);
}

static struct tkey *find_key(struct tkey *keys, size_t n, const char *rel)
{
    struct tkey k = {.rel = rel};
    return bsearch(&k, keys, n, sizeof k, cmp_tkey);
}

const char *check_kind_name(enum check_kind k)
{
    static const char *const names[CHK_KIND_COUNT] = {
        [CHK_CONFIG] = "config",       [CHK_LAYOUT] = "layout", [CHK_MISSING] = "missing",
        [CHK_UNEXPECTED] = "unexpected", [CHK_SHAPE] = "shape", [CHK_DTYPE] = "dtype",
        [CHK_QUANT] = "quantization",  [CHK_REDUNDANT] = "redundant",
    };
    return (unsigned)k < CHK_KIND_COUNT ? names[k] : "?";
}

static bool is_problem(enum check_kind k)
{
    return k != CHK_REDUNDANT;
}

static uint64_t group_hash(enum check_kind kind, const char *pattern, const char *expected, const char *found,
                           const char *message)
{
    uint64_t h = 0xcbf29ce484222325ull ^ (uint64_t)kind;
    const char *parts[4] = {pattern, expected, found, message};
    for (int k = 0; k < 4; k++)
        for (const char *c = parts[k]; ; c++) {
            h = (h ^ (uint8_t)*c) * 0x100000001b3ull;
            if (!*c)
                break;
        }
    return h;
}

/* Open addressing over group indices (+1; 0 is empty), kept at most half full. */
static struct check_group *group_find(const struct check_report *r, uint64_t hash, enum check_kind kind,
                                      const char *pattern, const char *expected, const char *found,
                                      const char *message)
{
    for (size_t i = hash & (r->index_cap - 1); r->index_cap && r->index[i]; i = (i + 1) & (r->index_cap - 1)) {
        struct check_group *h = &r->groups[r->index[i] - 1];
        if (h->kind == kind && !strcmp(h->pattern, pattern) && !strcmp(h->expected, expected) &&
            !strcmp(h->found, found) && !strcmp(h->message, message))
            return h;
    }
    return NULL;
}

static void group_index_add(struct check_report *r, uint64_t hash, int gi)
{
    if (2 * (size_t)r->n_indexed + 2 > r->index_cap) {
        size_t cap = r->index_cap ? 2 * r->index_cap : 64;
        int *v = calloc(cap, sizeof *v);
        if (!v)
            return; /* findings then simply stay ungrouped */
        for (size_t i = 0; i < r->index_cap; i++) {
            if (!r->index[i])
                continue;
            const struct check_group *h = &r->groups[r->index[i] - 1];
            size_t j = group_hash(h->kind, h->pattern, h->expected, h->found, h->message) & (cap - 1);
            while (v[j])
                j = (j + 1) & (cap - 1);
            v[j] = r->index[i];
        }
        free(r->index);
        r->index = v;
        r->index_cap = cap;
    }
    size_t i = hash & (r->index_cap - 1);
    while (r->index[i])
        i = (i + 1) & (r->index_cap - 1);
    r->index[i] = gi + 1;
    r->n_indexed++;
}

/* Records a finding; groups it with an identical one that differs only in layer. */
__attribute__((format(printf, 7, 8))) static void finding(struct check_report *r, enum check_kind kind,
                                                          const char *rel, int layer, const char *expected,
                                                          const char *found, const char *fmt, ...)
{
    char pattern[192];
    char prefix[32];
    int pl = layer >= 0 ? snprintf(prefix, sizeof prefix, "layers.%d.", layer) : 0;
    if (layer >= 0 && strncmp(rel, prefix, (size_t)pl) == 0)
        snprintf(pattern, sizeof pattern, "layers.%%L.%s", rel + pl);
    else
        snprintf(pattern, sizeof pattern, "%s", rel), layer = -1;
    char message[256] = "";
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(message, sizeof message, fmt, ap);
        va_end(ap);
    }
    if (is_problem(kind))
        r->n_problems++;
    else
        r->n_notes++;
    /* findings that differ only by layer share a group, found through a hash index */
    uint64_t hash = group_hash(kind, pattern, expected, found, message);
    struct check_group *g = layer >= 0 ? group_find(r, hash, kind, pattern, expected, found, message) : NULL;
    if (!g) {
        if (r->n_groups == r->cap_groups) {
            int cap = r->cap_groups ? 2 * r->cap_groups : 32;
            struct check_group *v = realloc(r->groups, (size_t)cap * sizeof *v);
            if (!v)
                return;
            r->groups = v;
            r->cap_groups = cap;
        }
        g = &r->groups[r->n_groups++];
        memset(g, 0, sizeof *g);
        g->kind = kind;
        snprintf(g->pattern, sizeof g->pattern, "%s", pattern);
        snprintf(g->expected, sizeof g->expected, "%s", expected);
        snprintf(g->found, sizeof g->found, "%s", found);
        snprintf(g->message, sizeof g->message, "%s", message);
        if (layer >= 0)
            group_index_add(r, hash, r->n_groups - 1);
    }
    if (layer >= 0) {
        /* keep the layer set sorted: text keys arrive in name order ("layers.11." < "layers.5.") */
        int at = g->n_layers;
        while (at > 0 && g->layers[at - 1] > layer)
            at--;
        if (at > 0 && g->layers[at - 1] == layer)
            return;
        if (g->n_layers == g->cap_layers) {
            int cap = g->cap_layers ? 2 * g->cap_layers : 8;
            int *v = realloc(g->layers, (size_t)cap * sizeof *v);
            if (!v)
                return;
            g->layers = v;
            g->cap_layers = cap;
        }
        memmove(g->layers + at + 1, g->layers + at, (size_t)(g->n_layers - at) * sizeof *g->layers);
        g->layers[at] = layer;
        g->n_layers++;
    }
}

void check_group_name(const struct check_group *g, char *buf, size_t len)
{
    const char *mark = strstr(g->pattern, "%L");
    if (!mark || g->n_layers == 0) {
        snprintf(buf, len, "%s", g->pattern);
        return;
    }
    char set[512];
    size_t o = 0;
    if (g->n_layers == 1) {
        o = (size_t)snprintf(set, sizeof set, "%d", g->layers[0]);
    } else {
        o = (size_t)snprintf(set, sizeof set, "{");
        for (int i = 0; i < g->n_layers && o < sizeof set;) {
            int j = i;
            while (j + 1 < g->n_layers && g->layers[j + 1] == g->layers[j] + 1)
                j++;
            if (j - i >= 2)
                o += (size_t)snprintf(set + o, sizeof set - o, "%s%d..%d", i ? "," : "", g->layers[i], g->layers[j]);
            else
                for (int k = i; k <= j && o < sizeof set; k++)
                    o += (size_t)snprintf(set + o, sizeof set - o, "%s%d", k ? "," : "", g->layers[k]);
            i = j + 1;
        }
        if (o < sizeof set)
            snprintf(set + o, sizeof set - o, "}");
    }
    snprintf(buf, len, "%.*s%s%s", (int)(mark - g->pattern), g->pattern, set, mark + 2);
}

static const char *float_dtypes = "F32|F16|BF16";

/* A plain float tensor: present with a float dtype and the logical shape. */
static void check_float(struct check_report *r, const struct layout_entry *le, struct tkey *k)
{
    char exp[96], got[96];
    const struct st_tensor *t = k->ct->t;
    if (!dtype_is_weight_float(t->dtype)) {
        if (t->dtype == DT_U32 && le->module[0])
            finding(r, CHK_QUANT, le->name, le->layer, "", dtype_name(t->dtype),
                    "U32 (quantized) weight without its .scales");
        else
            finding(r, CHK_DTYPE, le->name, le->layer, float_dtypes, dtype_name(t->dtype), NULL);
        return;
    }
    if (t->rank != le->rank || memcmp(t->shape, le->shape, (size_t)le->rank * sizeof *t->shape) != 0) {
        shape_format(exp, sizeof exp, le->shape, le->rank);
        shape_format(got, sizeof got, t->shape, t->rank);
        finding(r, CHK_SHAPE, le->name, le->layer, exp, got, NULL);
    }
}

/* An MLX quantized triplet `module.{weight,scales,biases}`. */
static void check_quantized(struct check_report *r, const struct layout_entry *le, struct tkey *w, struct tkey *s,
                            struct tkey *b)
{
    char path[256], exp[96], got[96];
    snprintf(path, sizeof path, "%s%s", name_family_prefix(r->family), le->module);
    r->n_quantized++;
    if (!r->cfg.quant.mlx) {
        finding(r, CHK_QUANT, le->name, le->layer, "", "",
                "quantized (has .scales) but config.json has no \"quantization\" block giving bits and group size");
        return;
    }
    bool explicit_entry;
    struct cfg_qspec q = cfg_quant_lookup(&r->cfg.quant, path, &explicit_entry);
    if (!q.quantized) {
        finding(r, CHK_QUANT, le->name, le->layer, "", "",
                "config.json marks this module as not quantized (false), but its .scales exists");
        return;
    }
    if (!w) {
        finding(r, CHK_MISSING, le->name, le->layer, "U32", "", "quantized module has .scales but no .weight");
        return;
    }
    const struct st_tensor *wt = w->ct->t, *st = s->ct->t, *bt = b ? b->ct->t : NULL;
    const struct qformat *f = qformat_of(q.mode);
    if (wt->dtype != DT_U32)
        finding(r, CHK_DTYPE, le->name, le->layer, "U32", dtype_name(wt->dtype), "packed codes of a quantized module");
    if (!qformat_scales_ok(f, st->dtype))
        finding(r, CHK_DTYPE, s->rel, le->layer, f->scales == QF_FLOAT ? float_dtypes : dtype_name(f->scales),
                dtype_name(st->dtype), "%s scales", f->name);
    if (f->parts > QP_BIASES && !b)
        finding(r, CHK_MISSING, s->rel, le->layer, "", "", "%s quantization needs .biases next to .scales", f->name);
    if (f->parts <= QP_BIASES && b)
        finding(r, CHK_UNEXPECTED, b->rel, le->layer, "", "", "%s quantization has no biases", f->name);
    if (bt && st && (bt->dtype != st->dtype || bt->rank != st->rank ||
                     memcmp(bt->shape, st->shape, (size_t)st->rank * sizeof *st->shape)))
        finding(r, CHK_SHAPE, b->rel, le->layer, "same dtype and shape as .scales", "", NULL);
    uint64_t ws[3], ss[3];
    if (!layout_quant_shapes(le, q.bits, q.group_size, ws, ss)) {
        shape_format(exp, sizeof exp, le->shape, le->rank);
        finding(r, CHK_QUANT, le->name, le->layer, "", "",
                "logical shape %s cannot be quantized with %d bits, group size %d (%s)", exp, q.bits, q.group_size,
                explicit_entry ? "per-module override" : "global setting");
        return;
    }
    if (wt->rank != le->rank || memcmp(wt->shape, ws, (size_t)le->rank * sizeof *ws)) {
        shape_format(exp, sizeof exp, ws, le->rank);
        shape_format(got, sizeof got, wt->shape, wt->rank);
        uint64_t in = le->shape[le->rank - 1];
        uint64_t implied = wt->rank == le->rank && in ? wt->shape[wt->rank - 1] * 32 / in : 0;
        finding(r, CHK_SHAPE, le->name, le->layer, exp, got, "U32 codes for %d bits (config%s); the stored width implies %llu bits",
                q.bits, explicit_entry ? " override" : "", (unsigned long long)implied);
    }
    if (st->rank != le->rank || memcmp(st->shape, ss, (size_t)le->rank * sizeof *ss)) {
        shape_format(exp, sizeof exp, ss, le->rank);
        shape_format(got, sizeof got, st->shape, st->rank);
        finding(r, CHK_SHAPE, s->rel, le->layer, exp, got, "scales for group size %d", q.group_size);
    }
}

/* A module of a ggml block type: its .weight alone, the blocks (U8 [.., out, in/block · bytes]). */
static void check_blocks(struct check_report *r, const struct layout_entry *le, const struct tkey *w,
                         struct cfg_qspec q)
{
    const struct qformat *f = qformat_of(q.mode);
    const struct st_tensor *wt = w->ct->t;
    uint64_t in = le->shape[le->rank - 1], ws[3];
    char exp[96], got[96];
    r->n_quantized++;
    if (in % (uint64_t)q.group_size) {
        finding(r, CHK_QUANT, le->name, le->layer, "", "", "%llu input features are not whole %s blocks of %d",
                (unsigned long long)in, f->name, q.group_size);
        return;
    }
    memcpy(ws, le->shape, (size_t)le->rank * sizeof *ws);
    ws[le->rank - 1] = qformat_part_cols(f, QP_WEIGHT, in, q.bits, q.group_size);
    if (wt->dtype != DT_U8)
        finding(r, CHK_DTYPE, le->name, le->layer, "U8", dtype_name(wt->dtype), "%s blocks", f->name);
    if (wt->rank != le->rank || memcmp(wt->shape, ws, (size_t)le->rank * sizeof *ws)) {
        shape_format(exp, sizeof exp, ws, le->rank);
        shape_format(got, sizeof got, wt->shape, wt->rank);
        finding(r, CHK_SHAPE, le->name, le->layer, exp, got, "%s blocks", f->name);
    }
}

static void check_entry(struct check_report *r, const struct layout_entry *le, struct tkey *keys, size_t n)
{
    char rel[LAYOUT_NAME_MAX + 16], exp[96];
    struct tkey *w = find_key(keys, n, le->name), *s = NULL, *b = NULL;
    if (le->module[0]) {
        snprintf(rel, sizeof rel, "%s.scales", le->module);
        s = find_key(keys, n, rel);
        snprintf(rel, sizeof rel, "%s.biases", le->module);
        b = find_key(keys, n, rel);
    }
    if (w)
        w->used = true;
    if (s)
        s->used = true;
    if (b)
        b->used = true;
    if (le->redundant && (w || s || b)) {
        finding(r, CHK_REDUNDANT, le->name, le->layer, "", "",
                "K/V of a KV-shared layer (it reads its source layer's cache): redundant; convert prunes them");
        return;
    }
    if (s) {
        check_quantized(r, le, w, s, b);
        return;
    }
    if (b)
        finding(r, CHK_QUANT, b->rel, le->layer, "", "", ".biases without .scales");
    if (!w) {
        if (!le->redundant) {
            shape_format(exp, sizeof exp, le->shape, le->rank);
            finding(r, CHK_MISSING, le->name, le->layer, exp, "", NULL);
        }
        return;
    }
    if (le->module[0] && r->cfg.quant.mlx) {
        snprintf(rel, sizeof rel, "%s%s", name_family_prefix(r->family), le->module);
        bool explicit_entry;
        struct cfg_qspec q = cfg_quant_lookup(&r->cfg.quant, rel, &explicit_entry);
        if (q.quantized && qformat_of(q.mode)->ggml && w->ct->t->dtype == DT_U8) {
            check_blocks(r, le, w, q);
            return;
        }
        if (explicit_entry && q.quantized) {
            finding(r, CHK_MISSING, le->name, le->layer, "", "",
                    "config.json quantizes this module explicitly (per-module override), so MLX loaders expect its "
                    ".scales");
            return;
        }
    }
    check_float(r, le, w);
}

/* Why an unmatched text key is unexpected, in the user's terms. */
static void unexpected(struct check_report *r, const struct tkey *k)
{
    const struct gp_config *c = &r->cfg;
    if (k->layer >= c->n_layers) {
        finding(r, CHK_UNEXPECTED, k->rel, k->layer, "", "", "layer index beyond num_hidden_layers = %lld",
                (long long)c->n_layers);
    } else if (k->layer >= 0 && c->layers[k->layer].k_eq_v && strstr(k->rel, ".self_attn.v_proj.")) {
        finding(r, CHK_UNEXPECTED, k->rel, k->layer, "", "",
                "attention_k_eq_v layer: values come from k_proj, there is no v_proj");
    } else if (strstr(k->rel, ".experts.")) {
        finding(r, CHK_UNEXPECTED, k->rel, k->layer, "", "",
                c->moe ? "expert tensors mix the fused (HF) and split (MLX) layouts"
                       : "expert tensor, but enable_moe_block is false");
    } else if (strstr(k->rel, ".scales") || strstr(k->rel, ".biases")) {
        finding(r, CHK_UNEXPECTED, k->rel, k->layer, "", "", "quantization data for a module that is never quantized");
    } else {
        finding(r, CHK_UNEXPECTED, k->rel, k->layer, "", "", NULL);
    }
}

int check_run(struct check_report *r, const char *dir, unsigned flags, struct err *e)
{
    memset(r, 0, sizeof *r); /* a source that fails to open stays in the report, for check_free */
    int rc = source_open(&r->src, dir, SRC_HEADERS | ((flags & CHECK_HEADERS_ONLY) ? SRC_TRUNCATED : 0), e);
    struct source src = r->src;
    return rc == ERR_OK ? check_source(r, &src, e) : rc;
}

int check_source(struct check_report *r, struct source *src, struct err *e)
{
    memset(r, 0, sizeof *r);
    r->src = *src;
    memset(src, 0, sizeof *src);
    int rc = cfg_parse(&r->cfg, r->src.config_text, r->src.config_len, r->src.config_name, e);
    if (rc == ERR_CONFIG || rc == ERR_NOT_TARGET) {
        r->not_target = rc == ERR_NOT_TARGET;
        /* Each line of the message is one problem; keep going to read the headers. */
        char *save = NULL;
        for (char *line = strtok_r(e->msg, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
            finding(r, CHK_CONFIG, "config.json", -1, "", "", "%s", line);
    } else if (rc != ERR_OK) {
        return rc;
    } else {
        r->config_ok = true;
    }
    for (size_t i = 0; i < r->src.n_problems; i++)
        finding(r, CHK_QUANT, source_kind_name(r->src.kind), -1, "", "", "%s", r->src.problems[i]);
    r->ckpt_ok = true;

    /* Classify every key by prefix; only text keys go on to layer rules. */
    struct tkey *keys = calloc(r->src.ck.n_tensors ? r->src.ck.n_tensors : 1, sizeof *keys);
    if (!keys)
        return err_set(e, ERR_NOMEM, "cannot allocate %zu keys", r->src.ck.n_tensors);
    size_t n = 0;
    int fam_count[NF_TEXT + 1] = {0};
    struct name_info *info = calloc(r->src.ck.n_tensors ? r->src.ck.n_tensors : 1, sizeof *info);
    if (!info) {
        free(keys);
        return err_set(e, ERR_NOMEM, "cannot allocate %zu keys", r->src.ck.n_tensors);
    }
    for (size_t i = 0; i < r->src.ck.n_tensors; i++) {
        names_classify(r->src.ck.tensors[i].name, &info[i]);
        if (info[i].cls == NC_TEXT)
            fam_count[info[i].fam]++;
    }
    r->family = NF_NONE;
    for (int f = NF_HF; f <= NF_TEXT; f++)
        if (fam_count[f] > (r->family == NF_NONE ? 0 : fam_count[r->family]))
            r->family = (enum name_family)f;
    for (size_t i = 0; i < r->src.ck.n_tensors; i++) {
        const char *name = r->src.ck.tensors[i].name;
        if (info[i].cls == NC_UNKNOWN) {
            finding(r, CHK_UNEXPECTED, name, -1, "", "",
                    "not under a Gemma 4 text prefix (model.language_model., language_model.model., model.) nor a tower");
        } else if (info[i].cls != NC_TEXT) {
            r->ignored[info[i].cls]++;
        } else if (info[i].fam != r->family) {
            finding(r, CHK_LAYOUT, name, -1, "", "", "text keys mix prefixes: most use '%s'",
                    name_family_prefix(r->family));
        } else {
            keys[n++] = (struct tkey){info[i].rel, &r->src.ck.tensors[i], info[i].layer, false};
            if (strstr(info[i].rel, ".experts.switch_glu."))
                r->experts_split = true;
        }
    }
    free(info);
    qsort(keys, n, sizeof *keys, cmp_tkey);
    if (r->config_ok) {
        bool text_only = !r->cfg.nested; /* gemma4_text, gemma4_unified_text */
        if (text_only && r->family != NF_TEXT && r->family != NF_NONE)
            finding(r, CHK_LAYOUT, name_family_prefix(r->family), -1, "model.", "",
                    "model_type %s loads text keys under 'model.'", r->cfg.model_type);
        if (!text_only && r->family == NF_TEXT)
            finding(r, CHK_LAYOUT, "model.", -1, "model.language_model. or language_model.model.", "",
                    "model_type %s nests the text model; 'model.' keys belong to a text-only checkpoint",
                    r->cfg.model_type);
        if (r->cfg.moe && !r->experts_split && r->family == NF_MLX)
            r->experts_split = find_key(keys, n, "layers.0.experts.gate_up_proj") == NULL;
        struct layout_entry *exp;
        size_t n_exp;
        if ((rc = layout_build(&r->cfg, r->experts_split ? EXPERTS_SPLIT : EXPERTS_FUSED, &exp, &n_exp, e)) != ERR_OK) {
            free(keys);
            return rc;
        }
        for (size_t i = 0; i < n_exp; i++)
            check_entry(r, &exp[i], keys, n);
        free(exp);
        for (size_t i = 0; i < n; i++)
            if (!keys[i].used)
                unexpected(r, &keys[i]);
    }
    free(keys);
    return ERR_OK;
}

bool check_loadable(const struct check_report *r)
{
    return r->config_ok && r->ckpt_ok && r->n_problems == 0;
}

void check_free(struct check_report *r)
{
    if (!r)
        return;
    for (int i = 0; i < r->n_groups; i++)
        free(r->groups[i].layers);
    free(r->groups);
    free(r->index);
    cfg_free(&r->cfg);
    source_close(&r->src);
    memset(r, 0, sizeof *r);
}

/* ---- output ---- */

static const char *quant_kind(const struct check_report *r)
{
    if (!r->config_ok)
        return "unknown";
    if (r->cfg.quant.mlx)
        return "mlx";
    if (r->cfg.quant.qat_unquantized)
        return "qat_unquantized";
    return "none";
}

static int count_layers(const struct gp_config *c, enum layer_type t)
{
    int k = 0;
    for (int64_t i = 0; i < c->n_layers; i++)
        k += c->layers[i].type == t;
    return k;
}

void check_print_text(FILE *out, const struct check_report *r)
{
    const struct gp_config *c = &r->cfg;
    fprintf(out, "gempack check: %s\n", r->src.path);
    if (r->config_ok) {
        fprintf(out, "  config   %s%s: %lld layers (%d sliding, %d full), hidden %lld, vocab %lld", c->model_type,
                c->nested ? " (text_config)" : "", (long long)c->n_layers, count_layers(c, LT_SLIDING),
                count_layers(c, LT_FULL), (long long)c->hidden_size, (long long)c->vocab_size);
        if (c->n_kv_shared)
            fprintf(out, ", KV-shared from layer %lld", (long long)c->first_shared);
        if (c->ple_dim)
            fprintf(out, ", PLE %lld", (long long)c->ple_dim);
        if (c->moe)
            fprintf(out, ", MoE %lld experts top-%lld", (long long)c->n_experts, (long long)c->top_k);
        if (c->k_eq_v)
            fprintf(out, ", k_eq_v");
        fprintf(out, "\n");
    }
    if (r->ckpt_ok) {
        fprintf(out, "  files    %zu shard%s%s, %zu tensors, %llu header bytes read\n", r->src.ck.n_shards,
                r->src.ck.n_shards == 1 ? "" : "s", r->src.ck.indexed ? " via model.safetensors.index.json" : "",
                r->src.ck.n_tensors, (unsigned long long)r->src.ck.bytes_read);
        fprintf(out, "  values   not read: shapes, types and (transcoded sources) their small tensors only; convert, run "
                     "and verify refuse a non-finite weight, scale or norm\n");
        fprintf(out, "  layout   %s (%s)%s\n", name_family_name(r->family), name_family_prefix(r->family),
                r->config_ok && c->moe ? (r->experts_split ? ", experts split (MLX)" : ", experts fused (HF)") : "");
    }
    if (r->config_ok && r->src.kind == SRC_GGUF) {
        fprintf(out, "  quant    gguf: %d quantized modules, the file's types as stored (transcoded: INPUTS.md §7.2)\n",
                r->n_quantized);
        json_object_put(inspect_gguf_mix(&r->src.gguf, out, false));
    } else if (r->config_ok) {
        fprintf(out, "  quant    %s", quant_kind(r));
        if (c->quant.mlx)
            fprintf(out, " %s %d-bit group %d, %zu override%s, %d quantized module%s", qmode_name(c->quant.global.mode),
                    c->quant.global.bits, c->quant.global.group_size, c->quant.n_ov, c->quant.n_ov == 1 ? "" : "s",
                    r->n_quantized, r->n_quantized == 1 ? "" : "s");
        if (c->quant.qat_unquantized)
            fprintf(out, " (quantization_config without quant_method: half-precision QAT weights)");
        fprintf(out, "\n");
    }
    for (int pass = 0; pass < 2; pass++) {
        int count = 0;
        for (int i = 0; i < r->n_groups; i++)
            count += is_problem(r->groups[i].kind) == (pass == 0);
        if (!count)
            continue;
        fprintf(out, "%s (%d):\n", pass == 0 ? "problems" : "notes", pass == 0 ? r->n_problems : r->n_notes);
        for (int i = 0; i < r->n_groups; i++) {
            const struct check_group *g = &r->groups[i];
            if (is_problem(g->kind) != (pass == 0))
                continue;
            char name[768];
            check_group_name(g, name, sizeof name);
            fprintf(out, "  %-12s %s", check_kind_name(g->kind), g->kind == CHK_CONFIG ? "" : name);
            if (g->expected[0])
                fprintf(out, "%sexpected %s", g->kind == CHK_CONFIG ? "" : "  ", g->expected);
            if (g->found[0])
                fprintf(out, ", found %s", g->found);
            if (g->message[0])
                fprintf(out, "%s%s", g->kind == CHK_CONFIG ? "" : "  ", g->message);
            fprintf(out, "\n");
        }
    }
    if (r->ckpt_ok) {
        for (size_t i = 0; i < r->src.ck.n_warnings; i++)
            fprintf(out, "  warning      %s\n", r->src.ck.warnings[i]);
        int any = 0;
        for (int k = NC_VISION; k < NC_UNKNOWN; k++)
            any += r->ignored[k];
        if (any) {
            fprintf(out, "ignored (not part of the text model):");
            for (int k = NC_VISION; k < NC_UNKNOWN; k++)
                if (r->ignored[k])
                    fprintf(out, " %s %d", name_class_name((enum name_class)k), r->ignored[k]);
            fprintf(out, "\n");
        }
    }
    if (check_loadable(r))
        fprintf(out, "verdict: LOADABLE as a Gemma 4 text model%s\n",
                r->n_notes ? " (see notes)" : "");
    else
        fprintf(out, "verdict: NOT LOADABLE (%d problem%s)\n", r->n_problems, r->n_problems == 1 ? "" : "s");
}

static struct json_object *group_json(const struct check_group *g)
{
    char name[768];
    check_group_name(g, name, sizeof name);
    struct json_object *o = json_object_new_object();
    json_object_object_add(o, "kind", json_object_new_string(check_kind_name(g->kind)));
    json_object_object_add(o, "tensor", g->kind == CHK_CONFIG ? NULL : json_object_new_string(name));
    struct json_object *ls = json_object_new_array();
    for (int i = 0; i < g->n_layers; i++)
        json_object_array_add(ls, json_object_new_int(g->layers[i]));
    json_object_object_add(o, "layers", ls);
    json_object_object_add(o, "expected", g->expected[0] ? json_object_new_string(g->expected) : NULL);
    json_object_object_add(o, "found", g->found[0] ? json_object_new_string(g->found) : NULL);
    json_object_object_add(o, "message", g->message[0] ? json_object_new_string(g->message) : NULL);
    return o;
}

struct json_object *check_to_json(const struct check_report *r)
{
    const struct gp_config *c = &r->cfg;
    struct json_object *o = json_object_new_object();
    json_object_object_add(o, "schema", json_object_new_string("gempack.check/1"));
    json_object_object_add(o, "path", json_object_new_string(r->src.path));
    json_object_object_add(o, "verdict", json_object_new_string(check_loadable(r) ? "loadable" : "not_loadable"));
    if (r->src.kind == SRC_GGUF)
        json_object_object_add(o, "gguf_mix", inspect_gguf_mix(&r->src.gguf, NULL, false));
    json_object_object_add(o, "loadable", json_object_new_boolean(check_loadable(r)));
    struct json_object *jc = NULL;
    if (r->config_ok) {
        jc = json_object_new_object();
        json_object_object_add(jc, "model_type", json_object_new_string(c->model_type));
        json_object_object_add(jc, "num_hidden_layers", json_object_new_int64(c->n_layers));
        json_object_object_add(jc, "hidden_size", json_object_new_int64(c->hidden_size));
        json_object_object_add(jc, "vocab_size", json_object_new_int64(c->vocab_size));
        json_object_object_add(jc, "sliding_layers", json_object_new_int(count_layers(c, LT_SLIDING)));
        json_object_object_add(jc, "full_layers", json_object_new_int(count_layers(c, LT_FULL)));
        json_object_object_add(jc, "first_kv_shared_layer", c->n_kv_shared ? json_object_new_int64(c->first_shared) : NULL);
        json_object_object_add(jc, "per_layer_input", json_object_new_int64(c->ple_dim));
        json_object_object_add(jc, "moe", json_object_new_boolean(c->moe));
        json_object_object_add(jc, "k_eq_v", json_object_new_boolean(c->k_eq_v));
    }
    json_object_object_add(o, "config", jc);
    struct json_object *jf = NULL;
    if (r->ckpt_ok) {
        jf = json_object_new_object();
        json_object_object_add(jf, "indexed", json_object_new_boolean(r->src.ck.indexed));
        struct json_object *sh = json_object_new_array();
        for (size_t i = 0; i < r->src.ck.n_shards; i++) {
            struct json_object *s = json_object_new_object();
            json_object_object_add(s, "file", json_object_new_string(r->src.ck.shard_names[i]));
            json_object_object_add(s, "tensors", json_object_new_int64((int64_t)r->src.ck.shards[i].n_tensors));
            bool file = i < r->src.ck.n_files; /* past them: what a transcoder made of them, no file of its own */
            json_object_object_add(s, "transcoded", json_object_new_boolean(!file));
            json_object_object_add(s, "header_bytes",
                                   file ? json_object_new_int64((int64_t)r->src.ck.shards[i].header_len) : NULL);
            json_object_object_add(s, "truncated", file ? json_object_new_boolean(r->src.ck.shards[i].truncated) : NULL);
            json_object_array_add(sh, s);
        }
        json_object_object_add(jf, "shards", sh);
        json_object_object_add(jf, "tensors", json_object_new_int64((int64_t)r->src.ck.n_tensors));
        json_object_object_add(jf, "bytes_read", json_object_new_int64((int64_t)r->src.ck.bytes_read));
        struct json_object *w = json_object_new_array();
        for (size_t i = 0; i < r->src.ck.n_warnings; i++)
            json_object_array_add(w, json_object_new_string(r->src.ck.warnings[i]));
        json_object_object_add(jf, "warnings", w);
    }
    json_object_object_add(o, "files", jf);
    struct json_object *jl = json_object_new_object();
    json_object_object_add(jl, "family", json_object_new_string(name_family_name(r->family)));
    json_object_object_add(jl, "prefix", json_object_new_string(name_family_prefix(r->family)));
    json_object_object_add(jl, "experts",
                           json_object_new_string(!r->config_ok || !c->moe ? "none" : r->experts_split ? "split" : "fused"));
    json_object_object_add(o, "layout", jl);
    struct json_object *jq = json_object_new_object();
    json_object_object_add(jq, "kind", json_object_new_string(quant_kind(r)));
    if (r->config_ok && c->quant.mlx) {
        json_object_object_add(jq, "mode", json_object_new_string(qmode_name(c->quant.global.mode)));
        json_object_object_add(jq, "bits", json_object_new_int(c->quant.global.bits));
        json_object_object_add(jq, "group_size", json_object_new_int(c->quant.global.group_size));
        json_object_object_add(jq, "overrides", json_object_new_int64((int64_t)c->quant.n_ov));
    }
    json_object_object_add(jq, "quantized_modules", json_object_new_int(r->n_quantized));
    json_object_object_add(o, "quantization", jq);
    struct json_object *jp = json_object_new_array(), *jn = json_object_new_array();
    for (int i = 0; i < r->n_groups; i++)
        json_object_array_add(is_problem(r->groups[i].kind) ? jp : jn, group_json(&r->groups[i]));
    json_object_object_add(o, "problems", jp);
    json_object_object_add(o, "notes", jn);
    json_object_object_add(o, "problem_count", json_object_new_int(r->n_problems));
    struct json_object *ji = json_object_new_object();
    for (int k = NC_VISION; k < NC_UNKNOWN; k++)
        json_object_object_add(ji, name_class_name((enum name_class)k), json_object_new_int(r->ignored[k]));
    json_object_object_add(o, "ignored", ji);
    return o;
}
