#include "model/config.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/fileio.h"
#include "core/jsonx.h"

/* Upper bounds that keep every derived size far from overflow and reject
 * absurd configs before anything is allocated from them. */
#define LIM_DIM (1 << 20)
#define LIM_VOCAB (1 << 24)
#define LIM_HEADS 4096

/* Problems are collected, one per line, so the user sees all of them. */
struct diag {
    struct err *e;
    const char *path;
    const char *scope; /* "text_config." or "" */
    int n;
    size_t used;
};

__attribute__((format(printf, 2, 3))) static void problem(struct diag *d, const char *fmt, ...)
{
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    int first = d->n++ == 0; /* counted even without an err: cfg_parse fails on any problem */
    if (!d->e)
        return;
    int w = snprintf(d->e->msg + d->used, sizeof d->e->msg - d->used, "%s%s: %s", first ? "" : "\n", d->path,
                     line);
    if (w > 0 && d->used + (size_t)w < sizeof d->e->msg)
        d->used += (size_t)w;
}

static struct json_object *get(struct json_object *o, const char *key)
{
    struct json_object *v;
    return json_object_object_get_ex(o, key, &v) ? v : NULL;
}

static bool has(struct json_object *o, const char *key)
{
    return json_object_object_get_ex(o, key, NULL);
}

enum need { REQUIRED, OPTIONAL };

/* Integer field in [lo, hi]. Missing: problem if REQUIRED, else *out = def. */
static void get_int(struct diag *d, struct json_object *o, const char *key, enum need need, int64_t def,
                    int64_t lo, int64_t hi, int64_t *out)
{
    *out = def;
    struct json_object *v;
    if (!json_object_object_get_ex(o, key, &v)) {
        if (need == REQUIRED)
            problem(d, "%s%s: missing (required: HF and MLX defaults differ, so it cannot be assumed)", d->scope,
                    key);
        return;
    }
    uint64_t u;
    if (!jsonx_u64(v, &u)) {
        problem(d, "%s%s: %s %s, expected a non-negative integer", d->scope, key, jsonx_type_name(v),
                json_object_to_json_string(v));
        return;
    }
    if ((int64_t)u < lo || (int64_t)u > hi) {
        problem(d, "%s%s: %llu, expected %lld..%lld", d->scope, key, (unsigned long long)u, (long long)lo,
                (long long)hi);
        return;
    }
    *out = (int64_t)u;
}

/* Integer or null (null -> 0); missing is a problem when REQUIRED. */
static void get_int_or_null(struct diag *d, struct json_object *o, const char *key, enum need need, int64_t lo,
                            int64_t hi, int64_t *out)
{
    struct json_object *v;
    if (json_object_object_get_ex(o, key, &v) && json_object_get_type(v) == json_type_null) {
        *out = 0;
        return;
    }
    get_int(d, o, key, need, 0, lo, hi, out);
}

static void get_bool(struct diag *d, struct json_object *o, const char *key, bool def, bool *out)
{
    *out = def;
    struct json_object *v;
    if (!json_object_object_get_ex(o, key, &v) || json_object_get_type(v) == json_type_null)
        return;
    if (json_object_get_type(v) != json_type_boolean) {
        problem(d, "%s%s: %s %s, expected true or false", d->scope, key, jsonx_type_name(v),
                json_object_to_json_string(v));
        return;
    }
    *out = json_object_get_boolean(v);
}

static bool as_number(struct json_object *v, double *out)
{
    enum json_type t = json_object_get_type(v);
    if (t != json_type_double && t != json_type_int)
        return false;
    *out = json_object_get_double(v);
    return isfinite(*out);
}

static void get_number(struct diag *d, struct json_object *o, const char *key, const char *scope, enum need need,
                       double def, double *out)
{
    *out = def;
    struct json_object *v;
    if (!json_object_object_get_ex(o, key, &v)) {
        if (need == REQUIRED)
            problem(d, "%s%s: missing (required)", scope, key);
        return;
    }
    if (!as_number(v, out))
        problem(d, "%s%s: %s %s, expected a finite number", scope, key, jsonx_type_name(v),
                json_object_to_json_string(v));
}

static void parse_rope(struct diag *d, struct json_object *rp, const char *type_name, struct cfg_rope *r)
{
    char scope[96];
    snprintf(scope, sizeof scope, "%srope_parameters.%s.", d->scope, type_name);
    r->kind = ROPE_DEFAULT;
    r->theta = 10000.0;
    r->partial = 1.0;
    r->factor = 1.0;
    struct json_object *o = get(rp, type_name);
    if (!o || json_object_get_type(o) != json_type_object) {
        problem(d, "%srope_parameters.%s: %s, expected an object (layer_types uses %s)", d->scope, type_name,
                o ? jsonx_type_name(o) : "missing", type_name);
        return;
    }
    struct json_object *k = get(o, "rope_type");
    const char *kind = k && json_object_get_type(k) == json_type_string ? json_object_get_string(k) : NULL;
    if (!kind)
        problem(d, "%srope_type: missing or not a string, expected \"default\" or \"proportional\"", scope);
    else if (strcmp(kind, "default") == 0)
        r->kind = ROPE_DEFAULT;
    else if (strcmp(kind, "proportional") == 0)
        r->kind = ROPE_PROPORTIONAL;
    else
        problem(d, "%srope_type: \"%s\" is not supported, expected \"default\" or \"proportional\"", scope, kind);
    get_number(d, o, "rope_theta", scope, REQUIRED, 10000.0, &r->theta);
    if (r->theta <= 0)
        problem(d, "%srope_theta: %g, expected > 0", scope, r->theta);
    if (r->kind == ROPE_PROPORTIONAL) {
        /* Implementations disagree on the default (0.25 vs 1.0): require it. */
        get_number(d, o, "partial_rotary_factor", scope, REQUIRED, 1.0, &r->partial);
        if (!(r->partial > 0 && r->partial <= 1))
            problem(d, "%spartial_rotary_factor: %g, expected in (0, 1]", scope, r->partial);
    }
    get_number(d, o, "factor", scope, OPTIONAL, 1.0, &r->factor);
    if (r->factor <= 0)
        problem(d, "%sfactor: %g, expected > 0", scope, r->factor);
}

/* --- quantization metadata (INPUTS.md §3) --- */

/* A present, non-null integer key of a per-module override replaces *out. */
static void override_int(struct diag *d, struct json_object *o, const char *key, const char *where, int64_t hi,
                         int *out)
{
    struct json_object *v = get(o, key);
    if (!v || json_object_get_type(v) == json_type_null)
        return;
    char scope[310];
    snprintf(scope, sizeof scope, "%s.", where);
    struct diag sub = *d;
    sub.scope = scope;
    int64_t x;
    get_int(&sub, o, key, REQUIRED, 0, 1, hi, &x);
    d->n = sub.n;
    d->used = sub.used;
    if (x)
        *out = (int)x;
}

static void parse_qspec_dict(struct diag *d, struct json_object *o, const char *where, struct cfg_qspec *s)
{
    /* Missing or null keys take the MODE defaults, not the top-level values. */
    s->quantized = true;
    s->mode = QM_AFFINE;
    struct json_object *m = get(o, "mode");
    if (m && json_object_get_type(m) != json_type_null) {
        if (json_object_get_type(m) != json_type_string || !qmode_from_name(json_object_get_string(m), &s->mode))
            problem(d, "%s.mode: %s, expected \"affine\", \"mxfp4\", \"nvfp4\" or \"mxfp8\"", where,
                    json_object_to_json_string(m));
    }
    qmode_defaults(s->mode, &s->group_size, &s->bits);
    override_int(d, o, "group_size", where, 1024, &s->group_size);
    override_int(d, o, "bits", where, 64, &s->bits);
    if (!quant_params_valid(s->mode, s->bits, s->group_size))
        problem(d, "%s: %s bits %d group_size %d is not a valid MLX quantization (affine: bits 2,3,4,5,6,8 and "
                   "group_size 32,64,128; mxfp4 4/32; nvfp4 4/16; mxfp8 8/32)",
                where, qmode_name(s->mode), s->bits, s->group_size);
}

static void parse_quant_block(struct diag *d, struct json_object *q, const char *name, struct cfg_quant *cq)
{
    cq->mlx = true;
    if (json_object_get_type(q) != json_type_object) {
        problem(d, "%s: %s, expected an object", name, jsonx_type_name(q));
        return;
    }
    /* Top level: group_size and bits required (mlx-lm indexes them), mode defaults to affine. */
    cq->global.quantized = true;
    cq->global.mode = QM_AFFINE;
    struct json_object *m = get(q, "mode");
    if (m && json_object_get_type(m) != json_type_null &&
        (json_object_get_type(m) != json_type_string || !qmode_from_name(json_object_get_string(m), &cq->global.mode)))
        problem(d, "%s.mode: %s, expected \"affine\", \"mxfp4\", \"nvfp4\" or \"mxfp8\"", name,
                json_object_to_json_string(m));
    char scope[64];
    snprintf(scope, sizeof scope, "%s.", name);
    struct diag sub = *d;
    sub.scope = scope;
    int64_t gs, bits;
    get_int(&sub, q, "group_size", REQUIRED, 64, 1, 1024, &gs);
    get_int(&sub, q, "bits", REQUIRED, 4, 1, 64, &bits);
    d->n = sub.n;
    d->used = sub.used;
    cq->global.group_size = (int)gs;
    cq->global.bits = (int)bits;
    if (!quant_params_valid(cq->global.mode, cq->global.bits, cq->global.group_size))
        problem(d, "%s: %s bits %d group_size %d is not a valid MLX quantization", name, qmode_name(cq->global.mode),
                cq->global.bits, cq->global.group_size);
    size_t n = (size_t)json_object_object_length(q);
    cq->ov = calloc(n ? n : 1, sizeof *cq->ov);
    if (!cq->ov) {
        problem(d, "%s: cannot allocate %zu overrides", name, n);
        return;
    }
    json_object_object_foreach(q, key, val) {
        if (!strcmp(key, "group_size") || !strcmp(key, "bits") || !strcmp(key, "mode"))
            continue;
        struct cfg_qoverride *ov = &cq->ov[cq->n_ov];
        char where[300];
        snprintf(where, sizeof where, "%s.\"%s\"", name, key);
        switch (json_object_get_type(val)) {
        case json_type_boolean:
            ov->spec = cq->global;
            ov->spec.quantized = json_object_get_boolean(val);
            break;
        case json_type_null:
            ov->spec = cq->global;
            break;
        case json_type_object:
            parse_qspec_dict(d, val, where, &ov->spec);
            break;
        default:
            problem(d, "%s: %s, expected an object, true, false or null", where, jsonx_type_name(val));
            continue;
        }
        ov->path = strdup(key);
        if (ov->path)
            cq->n_ov++;
    }
}

static void parse_quant(struct diag *d, struct json_object *root, struct json_object *text, struct cfg_quant *cq)
{
    struct json_object *q = get(root, "quantization");
    if (q) {
        parse_quant_block(d, q, "quantization", cq);
        return;
    }
    const char *name = "quantization_config";
    q = get(root, "quantization_config");
    if (!q && text != root) {
        q = get(text, "quantization_config");
        name = "text_config.quantization_config";
    }
    if (!q || json_object_get_type(q) == json_type_null)
        return;
    if (json_object_get_type(q) != json_type_object) {
        problem(d, "%s: %s, expected an object", name, jsonx_type_name(q));
        return;
    }
    struct json_object *qm = get(q, "quant_method");
    if (qm) {
        snprintf(cq->hf_method, sizeof cq->hf_method, "%s",
                 json_object_get_type(qm) == json_type_string ? json_object_get_string(qm) : "?");
        problem(d, "%s.quant_method: \"%s\" is an HF quantizer format gempack does not read (supported: bf16/f16/f32 "
                   "weights and MLX affine quantization)",
                name, cq->hf_method);
        return;
    }
    /* Google's QAT "unquantized" exports carry a block without quant_method:
     * the weights are half precision; the block is informational. */
    cq->qat_unquantized = true;
}

static void derive_layers(struct diag *d, struct gp_config *c)
{
    int64_t L = c->n_layers;
    c->first_shared = L - c->n_kv_shared;
    for (int64_t i = 0; i < L; i++) {
        struct cfg_layer *ly = &c->layers[i];
        bool full = ly->type == LT_FULL;
        ly->head_dim = full && c->global_head_dim > 0 ? c->global_head_dim : c->head_dim;
        ly->k_eq_v = c->k_eq_v && full;
        ly->kv_heads = ly->k_eq_v && c->n_global_kv_heads > 0 ? c->n_global_kv_heads : c->n_kv_heads;
        ly->shared = c->n_kv_shared > 0 && i >= c->first_shared;
        ly->kv_src = (int)i;
        if (ly->shared) {
            ly->kv_src = -1;
            for (int64_t j = c->first_shared - 1; j >= 0; j--)
                if (c->layers[j].type == ly->type) {
                    ly->kv_src = (int)j;
                    break;
                }
            if (ly->kv_src < 0)
                problem(d, "%slayer_types: KV-shared layer %lld (%s) has no earlier KV-owning %s layer to read from",
                        d->scope, (long long)i, layer_type_name(ly->type), layer_type_name(ly->type));
        }
        ly->mlp_width = c->intermediate_size * (c->double_wide && ly->shared ? 2 : 1);
        if (ly->kv_heads > 0 && c->n_heads % ly->kv_heads != 0)
            problem(d, "%snum_attention_heads %lld is not a multiple of layer %lld's %lld KV heads", d->scope,
                    (long long)c->n_heads, (long long)i, (long long)ly->kv_heads);
    }
}

#define MODEL_TYPES "\"gemma4\", \"gemma4_unified\", \"gemma4_text\" or \"gemma4_unified_text\""

/* The architectures gempack runs (MODEL.md §1.1). Anything else a config
 * names (DiffusionGemma, the assistant/draft models, a future class) is
 * refused, never run as if it were one of these. */
static const char *const known_architectures[] = {"Gemma4ForConditionalGeneration", "Gemma4ForCausalLM",
                                                  "Gemma4UnifiedForConditionalGeneration", "Gemma4UnifiedForCausalLM"};

/* Adds a problem for each architecture gempack does not run; true if any. */
static bool check_architectures(struct diag *d, struct json_object *root)
{
    bool other = false;
    struct json_object *a = get(root, "architectures");
    if (!a || json_object_get_type(a) == json_type_null)
        return false;
    if (json_object_get_type(a) != json_type_array) {
        problem(d, "architectures: %s, expected an array of strings", jsonx_type_name(a));
        return false;
    }
    for (size_t i = 0; i < json_object_array_length(a); i++) {
        struct json_object *v = json_object_array_get_idx(a, i);
        const char *s = json_object_get_type(v) == json_type_string ? json_object_get_string(v) : NULL;
        bool known = false;
        for (size_t k = 0; s && k < sizeof known_architectures / sizeof *known_architectures; k++)
            known |= !strcmp(s, known_architectures[k]);
        if (!known)
            problem(d, "architectures[%zu]: not a Gemma 4 text model gempack runs: %s", i,
                    s ? s : json_object_to_json_string(v));
        other |= !known;
    }
    return other;
}

int cfg_parse(struct gp_config *c, const char *text, size_t len, const char *path, struct err *e)
{
    memset(c, 0, sizeof *c);
    struct json_object *root;
    if (jsonx_parse(text, len, &root, e) != ERR_OK)
        return err_prefix(e, "%s", path);
    c->root_json = root;
    if (json_object_get_type(root) != json_type_object)
        return err_set(e, ERR_CONFIG, "%s: top level is a JSON %s, expected an object", path, jsonx_type_name(root));
    struct diag d = {.e = e, .path = path, .scope = ""};
    /* Another model's config is refused for what it is, not for the Gemma 4 fields it lacks */
    bool other = check_architectures(&d, root);
    if (d.n) {
        enum err_code rc = other ? ERR_NOT_TARGET : ERR_CONFIG;
        if (e)
            e->code = rc;
        return rc;
    }

    struct json_object *mt = get(root, "model_type");
    const char *model_type = mt && json_object_get_type(mt) == json_type_string ? json_object_get_string(mt) : NULL;
    struct json_object *t = root;
    if (!model_type) {
        problem(&d, "model_type: missing or not a string, expected " MODEL_TYPES);
    } else if (!strcmp(model_type, "gemma4") || !strcmp(model_type, "gemma4_unified")) {
        t = get(root, "text_config");
        if (!t || json_object_get_type(t) != json_type_object) {
            problem(&d, "text_config: %s, expected an object (model_type \"%s\" keeps the text model there)",
                    t ? jsonx_type_name(t) : "missing", model_type);
            t = NULL;
        }
        c->nested = true;
        d.scope = "text_config.";
    } else if (strcmp(model_type, "gemma4_text") != 0 && strcmp(model_type, "gemma4_unified_text") != 0) {
        problem(&d, "model_type: \"%s\", expected " MODEL_TYPES, model_type);
    }
    if (model_type)
        snprintf(c->model_type, sizeof c->model_type, "%s", model_type);
    if (!t)
        return e ? (e->code = ERR_CONFIG) : ERR_CONFIG;
    c->text_json = json_object_get(t);
    /* The 12B's classes (MODEL.md §1.1): the top model_type or the text config's */
    struct json_object *tmt = get(t, "model_type");
    c->unified = (model_type && !strncmp(model_type, "gemma4_unified", 14)) ||
                 (tmt && json_object_get_type(tmt) == json_type_string &&
                  !strcmp(json_object_get_string(tmt), "gemma4_unified_text"));

    get_int(&d, t, "vocab_size", REQUIRED, 0, 1, LIM_VOCAB, &c->vocab_size);
    get_int(&d, t, "hidden_size", REQUIRED, 0, 1, LIM_DIM, &c->hidden_size);
    get_int(&d, t, "num_hidden_layers", REQUIRED, 0, 1, CFG_MAX_LAYERS, &c->n_layers);
    get_int(&d, t, "intermediate_size", REQUIRED, 0, 1, LIM_DIM, &c->intermediate_size);
    get_int(&d, t, "num_attention_heads", REQUIRED, 0, 1, LIM_HEADS, &c->n_heads);
    get_int(&d, t, "num_key_value_heads", REQUIRED, 0, 1, LIM_HEADS, &c->n_kv_heads);
    get_int(&d, t, "head_dim", REQUIRED, 0, 2, 65536, &c->head_dim);
    get_int(&d, t, "sliding_window", REQUIRED, 0, 1, INT32_MAX, &c->sliding_window);
    /* The unified text class does not declare the per-layer-input and MoE
     * fields: absent, they mean none (its checkpoints hold no such tensors). */
    get_int(&d, t, "hidden_size_per_layer_input", c->unified ? OPTIONAL : REQUIRED, 0, 0, LIM_DIM, &c->ple_dim);
    get_int(&d, t, "num_kv_shared_layers", REQUIRED, 0, 0, CFG_MAX_LAYERS, &c->n_kv_shared);
    get_bool(&d, t, "attention_k_eq_v", false, &c->k_eq_v);
    get_bool(&d, t, "enable_moe_block", false, &c->moe);
    if (c->unified && (c->ple_dim || c->moe))
        problem(&d, "%s%s: the Gemma 4 unified (12B) text model has no %s", d.scope,
                c->ple_dim ? "hidden_size_per_layer_input" : "enable_moe_block",
                c->ple_dim ? "per-layer inputs" : "mixture of experts");
    /* HF's default is false, mlx-lm's true: it decides the KV-shared layers'
     * MLP width, so it is required exactly when there are any */
    get_bool(&d, t, "use_double_wide_mlp", false, &c->double_wide);
    if (c->n_kv_shared > 0 && !has(t, "use_double_wide_mlp"))
        problem(&d, "%suse_double_wide_mlp: missing (required with KV-shared layers: HF defaults to false, mlx-lm to "
                    "true)",
                d.scope);
    get_bool(&d, t, "tie_word_embeddings", true, &c->tie_embeddings);
    if (!has(t, "tie_word_embeddings") && c->nested)
        get_bool(&d, root, "tie_word_embeddings", true, &c->tie_embeddings);
    get_number(&d, t, "rms_norm_eps", d.scope, OPTIONAL, 1e-6, &c->rms_eps);
    if (!(c->rms_eps > 0 && c->rms_eps < 1))
        problem(&d, "%srms_norm_eps: %g, expected in (0, 1)", d.scope, c->rms_eps);
    if (!c->tie_embeddings)
        problem(&d, "%stie_word_embeddings: false; every Gemma 4 release ties the output head to embed_tokens, "
                    "and an untied head is not supported",
                d.scope);
    bool bias = false;
    get_bool(&d, t, "attention_bias", false, &bias);
    if (bias)
        problem(&d, "%sattention_bias: true is not a Gemma 4 architecture (no linear biases)", d.scope);
    struct json_object *act = get(t, "hidden_activation");
    if (act && (json_object_get_type(act) != json_type_string ||
                (strcmp(json_object_get_string(act), "gelu_pytorch_tanh") && strcmp(json_object_get_string(act), "gelu_tanh"))))
        problem(&d, "%shidden_activation: %s, expected \"gelu_pytorch_tanh\"", d.scope, json_object_to_json_string(act));

    /* Final soft-cap: the key is required (HF None vs MLX 30), null means none. */
    struct json_object *sc = get(t, "final_logit_softcapping"); /* NULL for a JSON null, too */
    if (!has(t, "final_logit_softcapping")) {
        problem(&d, "%sfinal_logit_softcapping: missing (required; use null for no soft-cap: HF defaults to none, MLX "
                    "to 30)",
                d.scope);
    } else if (json_object_get_type(sc) != json_type_null) {
        if (!as_number(sc, &c->softcap) || c->softcap <= 0)
            problem(&d, "%sfinal_logit_softcapping: %s, expected a positive number or null", d.scope,
                    json_object_to_json_string(sc));
        else
            c->has_softcap = true;
    }

    if (c->ple_dim > 0)
        get_int(&d, t, "vocab_size_per_layer_input", REQUIRED, 0, 1, LIM_VOCAB, &c->ple_vocab);
    /* Newer HF configs may give the full layers' head_dim / KV heads only in a
     * per_layer_config object (MODEL.md §1.2 parser rule). */
    struct json_object *plc = get(t, "per_layer_config");
    bool use_plc = plc && json_object_get_type(plc) == json_type_object;
    if (c->k_eq_v && (has(t, "num_global_key_value_heads") || !use_plc))
        get_int_or_null(&d, t, "num_global_key_value_heads", REQUIRED, 1, LIM_HEADS, &c->n_global_kv_heads);
    if (c->moe) {
        get_int(&d, t, "num_experts", REQUIRED, 0, 1, LIM_HEADS, &c->n_experts);
        get_int(&d, t, "top_k_experts", REQUIRED, 0, 1, LIM_HEADS, &c->top_k);
        get_int(&d, t, "moe_intermediate_size", REQUIRED, 0, 1, LIM_DIM, &c->moe_intermediate);
        if (c->top_k > c->n_experts && c->n_experts > 0)
            problem(&d, "%stop_k_experts: %lld, expected at most num_experts %lld", d.scope, (long long)c->top_k,
                    (long long)c->n_experts);
    }
    if (c->n_layers > 0 && c->n_kv_shared >= c->n_layers)
        problem(&d, "%snum_kv_shared_layers: %lld, expected fewer than num_hidden_layers %lld", d.scope,
                (long long)c->n_kv_shared, (long long)c->n_layers);

    /* layer_types: required, one entry per layer. */
    bool any[2] = {false, false};
    struct json_object *lt = get(t, "layer_types");
    if (c->n_layers > 0) {
        c->layers = calloc((size_t)c->n_layers, sizeof *c->layers);
        if (!c->layers)
            return err_set(e, ERR_NOMEM, "%s: cannot allocate %lld layers", path, (long long)c->n_layers);
    }
    if (!lt || json_object_get_type(lt) != json_type_array) {
        problem(&d, "%slayer_types: %s, expected an array of \"sliding_attention\"/\"full_attention\" (required: the "
                    "MLX and HF patterns differ)",
                d.scope, lt ? jsonx_type_name(lt) : "missing");
    } else if ((int64_t)json_object_array_length(lt) != c->n_layers) {
        problem(&d, "%slayer_types: %zu entries, expected num_hidden_layers = %lld", d.scope,
                json_object_array_length(lt), (long long)c->n_layers);
    } else {
        for (int64_t i = 0; i < c->n_layers; i++) {
            struct json_object *s = json_object_array_get_idx(lt, (size_t)i);
            const char *v = json_object_get_type(s) == json_type_string ? json_object_get_string(s) : "";
            if (!strcmp(v, "sliding_attention") || !strcmp(v, "full_attention")) {
                c->layers[i].type = !strcmp(v, "full_attention") ? LT_FULL : LT_SLIDING;
                any[c->layers[i].type] = true;
            } else {
                problem(&d, "%slayer_types[%lld]: %s, expected \"sliding_attention\" or \"full_attention\"", d.scope,
                        (long long)i, json_object_to_json_string(s));
            }
        }
    }

    /* Full-layer head dim: global_head_dim, or per_layer_config (newer HF). */
    if (any[LT_FULL]) {
        bool hd_key = has(t, "global_head_dim");
        bool kv_key = !c->k_eq_v || has(t, "num_global_key_value_heads");
        if (hd_key || !use_plc)
            get_int_or_null(&d, t, "global_head_dim", REQUIRED, 2, 65536, &c->global_head_dim);
        if (use_plc && (!hd_key || !kv_key)) {
            /* {layer_idx: {head_dim, num_key_value_heads}} for full layers */
            json_object_object_foreach(plc, k, v) {
                (void)k;
                struct json_object *hd = get(v, "head_dim");
                uint64_t u;
                if (!hd_key && hd && jsonx_u64(hd, &u) && u >= 2 && u <= 65536)
                    c->global_head_dim = (int64_t)u;
                struct json_object *kv = get(v, "num_key_value_heads");
                if (!kv_key && kv && jsonx_u64(kv, &u) && u >= 1 && u <= LIM_HEADS)
                    c->n_global_kv_heads = (int64_t)u;
                break;
            }
            if (!hd_key && !c->global_head_dim)
                problem(&d, "%sper_layer_config: no head_dim for the full-attention layers", d.scope);
            if (!kv_key && !c->n_global_kv_heads)
                problem(&d, "%sper_layer_config: no num_key_value_heads for the full-attention layers (attention_k_eq_v "
                            "is set and num_global_key_value_heads is absent)",
                        d.scope);
        }
    }

    struct json_object *rp = get(t, "rope_parameters");
    if (!rp || json_object_get_type(rp) != json_type_object) {
        problem(&d, "%srope_parameters: %s, expected an object keyed by layer type (required: implementations "
                    "default the full-attention partial factor differently)",
                d.scope, rp ? jsonx_type_name(rp) : "missing");
    } else {
        for (int k = 0; k < 2; k++)
            if (any[k])
                parse_rope(&d, rp, layer_type_name((enum layer_type)k), &c->rope[k]);
    }

    parse_quant(&d, root, t, &c->quant);

    if (d.n == 0 && c->layers)
        derive_layers(&d, c);
    if (d.n)
        return e ? (e->code = ERR_CONFIG) : ERR_CONFIG;
    return ERR_OK;
}

int cfg_load(struct gp_config *c, const char *path, struct err *e)
{
    memset(c, 0, sizeof *c);
    /* A directory means DIR/config.json (as config.h promises). */
    struct stat st;
    char *joined = NULL;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        if (!(joined = fio_join(path, "config.json")))
            return err_set(e, ERR_NOMEM, "cannot allocate a path");
        path = joined;
    }
    char *text;
    size_t len;
    int rc = fio_read_file(path, FIO_INPUT, CFG_MAX_BYTES, &text, &len, e);
    if (rc == ERR_OK) {
        rc = cfg_parse(c, text, len, path, e);
        free(text);
    }
    free(joined);
    return rc;
}

void cfg_free(struct gp_config *c)
{
    if (!c)
        return;
    free(c->layers);
    for (size_t i = 0; i < c->quant.n_ov; i++)
        free(c->quant.ov[i].path);
    free(c->quant.ov);
    if (c->text_json)
        json_object_put(c->text_json);
    if (c->root_json)
        json_object_put(c->root_json);
    memset(c, 0, sizeof *c);
}

struct cfg_qspec cfg_quant_lookup(const struct cfg_quant *q, const char *module_path, bool *explicit_entry)
{
    static const char alias[] = "language_model.";
    const char *short_path =
        strncmp(module_path, alias, sizeof alias - 1) == 0 ? module_path + sizeof alias - 1 : NULL;
    for (size_t i = 0; i < q->n_ov; i++) {
        if (!strcmp(q->ov[i].path, module_path) || (short_path && !strcmp(q->ov[i].path, short_path))) {
            if (explicit_entry)
                *explicit_entry = true;
            return q->ov[i].spec;
        }
    }
    if (explicit_entry)
        *explicit_entry = false;
    return q->global;
}

int cfg_last_full_layer(const struct gp_config *c)
{
    for (int64_t i = c->n_layers - 1; i >= 0; i--)
        if (c->layers[i].type == LT_FULL)
            return (int)i;
    return -1;
}
