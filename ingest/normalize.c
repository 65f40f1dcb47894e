#include "ingest/normalize.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

__attribute__((format(printf, 5, 6))) static int log_add(struct normalized *n, struct err *e, const char *tensor,
                                                         const char *action, const char *fmt, ...)
{
    if (n->n_log == n->cap_log) {
        size_t cap = n->cap_log ? 2 * n->cap_log : 64;
        struct norm_log *v = realloc(n->log, cap * sizeof *v);
        if (!v)
            return err_set(e, ERR_NOMEM, "cannot grow the normalization log");
        n->log = v;
        n->cap_log = cap;
    }
    struct norm_log *l = &n->log[n->n_log++];
    snprintf(l->tensor, sizeof l->tensor, "%s", tensor);
    l->action = action;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(l->reason, sizeof l->reason, fmt, ap);
    va_end(ap);
    return ERR_OK;
}

static const char *class_reason(enum name_class c)
{
    switch (c) {
    case NC_VISION: return "vision tower: not part of the text model";
    case NC_AUDIO: return "audio tower: not part of the text model";
    case NC_PROJECTOR: return "multimodal projector: not part of the text model";
    case NC_CLIP: return "clip-bound scalar: the text decoder has plain linears";
    case NC_ROTARY: return "rotary table: recomputed from rope_parameters";
    default: return "not a Gemma 4 text-model key";
    }
}

/* Source key of a canonical layout entry in the checkpoint's family. */
static const struct ckpt_tensor *lookup(const struct ckpt *ck, enum name_family fam, const char *rel)
{
    char key[320];
    snprintf(key, sizeof key, "%s%s", name_family_prefix(fam), rel);
    return ckpt_find(ck, key);
}

/* The canonical tensor of entry le (of the canonical form). */
static struct norm_tensor *add_tensor(struct normalized *n, const struct layout_entry *le, const struct ckpt_tensor *w)
{
    struct norm_tensor *t = &n->t[n->n++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", le->name);
    snprintf(t->module, sizeof t->module, "%s", le->module);
    t->layer = le->layer;
    t->router = le->flags & TR_ROUTER;
    t->rank = le->rank;
    memcpy(t->shape, le->shape, sizeof t->shape);
    t->w = w;
    return t;
}

/* lm_head.weight is accepted only when it holds the tied embedding. */
static int check_lm_head(const struct ckpt *ck, const struct ckpt_tensor *head, const struct norm_tensor *emb,
                         struct err *e)
{
    const struct st_tensor *a = head->t, *b = emb->w->t;
    if (emb->s)
        return err_set(e, ERR_UNSUPPORTED, "%s: lm_head.weight present beside a quantized embed_tokens; cannot "
                                           "compare them: remove lm_head.weight (Gemma 4 ties the head)",
                       ck->dir);
    if (a->dtype != b->dtype || a->rank != b->rank || memcmp(a->shape, b->shape, sizeof a->shape)) {
        char sa[160], sb[160];
        shape_format(sa, sizeof sa, a->shape, a->rank);
        shape_format(sb, sizeof sb, b->shape, b->rank);
        return err_set(e, ERR_FORMAT, "%s: lm_head.weight (%s %s) differs in dtype or shape from embed_tokens.weight "
                                      "(%s %s), but Gemma 4 ties the output head to the embedding",
                       ck->dir, dtype_name(a->dtype), sa, dtype_name(b->dtype), sb);
    }
    const uint8_t *pa, *pb;
    int rc = st_data(&ck->shards[head->shard], a, &pa, e);
    if (rc == ERR_OK)
        rc = st_data(&ck->shards[emb->w->shard], b, &pb, e);
    if (rc != ERR_OK)
        return rc;
    if (memcmp(pa, pb, (size_t)(a->end - a->begin)) != 0)
        return err_set(e, ERR_FORMAT, "%s: lm_head.weight differs from embed_tokens.weight; Gemma 4 ties them, and an "
                                      "untied head is not supported",
                       ck->dir);
    return ERR_OK;
}

int normalize(const struct ckpt *ck, const struct gp_config *c, struct normalized *n, struct err *e)
{
    memset(n, 0, sizeof *n);
    /* Classify every key by prefix; count the text family. */
    int fam_count[NF_TEXT + 1] = {0};
    bool split_experts = false;
    const struct ckpt_tensor *lm_head = NULL;
    n->towers = calloc(ck->n_tensors ? ck->n_tensors : 1, sizeof *n->towers);
    if (!n->towers)
        return err_set(e, ERR_NOMEM, "cannot allocate %zu records", ck->n_tensors);
    for (size_t i = 0; i < ck->n_tensors; i++) {
        struct name_info ni;
        names_classify(ck->tensors[i].name, &ni);
        if (ni.cls == NC_TEXT) {
            fam_count[ni.fam]++;
            split_experts |= strstr(ni.rel, ".experts.switch_glu.") != NULL;
        } else if (ni.cls == NC_LM_HEAD) {
            lm_head = &ck->tensors[i];
        } else {
            if (ni.cls == NC_VISION || ni.cls == NC_AUDIO || ni.cls == NC_PROJECTOR)
                n->towers[n->n_towers++] = &ck->tensors[i];
            if (log_add(n, e, ck->tensors[i].name, "dropped", "%s", class_reason(ni.cls)) != ERR_OK)
                return ERR_NOMEM;
        }
    }
    for (int f = NF_HF; f <= NF_TEXT; f++)
        if (fam_count[f] > (n->family == NF_NONE ? 0 : fam_count[n->family]))
            n->family = (enum name_family)f;

    struct layout_entry *le;
    size_t n_le;
    int rc = layout_build(c, split_experts ? EXPERTS_SPLIT : EXPERTS_FUSED, &le, &n_le, e);
    if (rc != ERR_OK)
        return rc;
    n->t = calloc(2 * n_le + 1, sizeof *n->t); /* a fused gate_up becomes two tensors */
    if (!n->t) {
        free(le);
        return err_set(e, ERR_NOMEM, "cannot allocate %zu tensors", 2 * n_le);
    }
    char key[320], rel[NORM_NAME_MAX + 16];
    struct layout_entry C;
    const char *prefix = name_family_prefix(n->family);
    for (size_t i = 0; i < n_le && rc == ERR_OK; i++) {
        const struct layout_entry *L = &le[i];
        const struct ckpt_tensor *w = lookup(ck, n->family, L->name), *s = NULL, *b = NULL;
        if (L->module[0]) {
            snprintf(rel, sizeof rel, "%s.scales", L->module);
            s = lookup(ck, n->family, rel);
            snprintf(rel, sizeof rel, "%s.biases", L->module);
            b = lookup(ck, n->family, rel);
        }
        if (L->redundant) {
            const struct ckpt_tensor *parts[3] = {w, s, b};
            for (int k = 0; k < 3 && rc == ERR_OK; k++)
                if (parts[k])
                    rc = log_add(n, e, parts[k]->name, "pruned", "K/V of a KV-shared layer: redundant (it reads the "
                                 "cache of the last KV-owning layer of its type)");
            continue;
        }
        if (!w) {
            snprintf(key, sizeof key, "%s%s", prefix, L->name);
            rc = err_set(e, ERR_FORMAT, "%s: tensor %s missing (run gempack check for the full report)", ck->dir, key);
            break;
        }
        if (L->kind == TK_EX_GATE_UP_HF) {
            /* [E, 2M, H] -> gate [E, M, H] (rows 0..M-1) and up [E, M, H] (rows M..2M-1) */
            for (int half = 1; half <= 2; half++) {
                layout_entry(c, half == 1 ? TK_EX_GATE : TK_EX_UP, L->layer, &C);
                add_tensor(n, &C, w)->split = half;
            }
            rc = log_add(n, e, w->name, "split",
                         "fused gate_up_proj [E, 2M, H] -> experts.gate_proj and experts.up_proj [E, M, H]");
            continue;
        }
        if (L->flags & (TR_HF | TR_MLX)) /* an expert tensor renamed */
            layout_entry(c, tensor_table[L->kind].canon, L->layer, &C);
        else
            C = *L;
        struct norm_tensor *t = add_tensor(n, &C, w);
        if (s || w->t->dtype == DT_U8) { /* .scales, or a ggml block type's blocks alone */
            snprintf(key, sizeof key, "%s%s", prefix, L->module);
            t->q = cfg_quant_lookup(&c->quant, key, NULL);
            t->s = s;
            t->b = b;
            const struct qformat *f = qformat_of(t->q.mode);
            if (!t->q.quantized || (f->parts > QP_SCALES) != (s != NULL) || (f->parts > QP_BIASES) != (b != NULL)) {
                rc = err_set(e, ERR_FORMAT, "%s: %s: %s quantization %s .biases (run gempack check for the full report)",
                             ck->dir, key, qmode_name(t->q.mode), b ? "has no" : "needs");
                break;
            }
        }
        if (L->flags & TR_HF)
            rc = log_add(n, e, w->name, "renamed", "HF experts.down_proj -> %s", C.name);
        else if (L->flags & TR_MLX)
            rc = log_add(n, e, w->name, "renamed", "MLX experts.switch_glu.* -> %s", C.module);
    }
    free(le);
    if (rc == ERR_OK && lm_head && (rc = check_lm_head(ck, lm_head, &n->t[0], e)) == ERR_OK)
        rc = log_add(n, e, lm_head->name, "dropped", "equals the tied embed_tokens.weight");
    if (rc != ERR_OK)
        normalize_free(n);
    return rc;
}

void normalize_free(struct normalized *n)
{
    if (!n)
        return;
    free(n->t);
    free(n->log);
    free(n->towers);
    memset(n, 0, sizeof *n);
}

struct json_object *normalize_log_json(const struct normalized *n)
{
    struct json_object *a = json_object_new_array();
    for (size_t i = 0; i < n->n_log; i++) {
        struct json_object *o = json_object_new_object();
        json_object_object_add(o, "tensor", json_object_new_string(n->log[i].tensor));
        json_object_object_add(o, "action", json_object_new_string(n->log[i].action));
        json_object_object_add(o, "reason", json_object_new_string(n->log[i].reason));
        json_object_array_add(a, o);
    }
    return a;
}
