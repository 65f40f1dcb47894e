/* compressed-tensors "pack-quantized" → MLX affine (INPUTS.md §7.1).
 *
 * A module <m> holds <m>.weight_packed (I32 words, codes u = q + 2^(b−1)
 * LSB first: MLX's own packing), <m>.weight_scale ([.., out, groups] or
 * [.., out, 1] per channel), <m>.weight_shape, and for asymmetric schemes
 * <m>.weight_zero_point (packed down the rows); its value is (q − z)·s. The
 * codes become the affine codes unchanged; scale s and bias −s·(2^(b−1) + z)
 * are repeated over MLX groups of 128, 64 or 32. MoE experts stored per
 * expert (<p>.experts.<e>.<proj>) are stacked into <p>.experts.switch_glu.<proj>. */
#include <math.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/bytes.h"
#include "core/jsonx.h"
#include "ingest/transcode.h"

struct scheme {
    const char *name;
    struct json_object *targets;
    int bits;
    bool symmetric, channel, g_idx;
    bool bad;                  /* a group gempack does not read (a problem names it) */
    uint64_t group;
};

/* A target string and the scheme it selects: the last config group that
 * lists it (compressed-tensors' target_to_scheme). */
struct target {
    const char *t;
    size_t sch;
};

struct ctx {
    struct source *s;
    unsigned flags;
    struct scheme *sch;
    size_t n_sch;
    struct target *tg;         /* exact names first, then regexes, each in byte order (utils/match.py) */
    size_t n_tg;
    struct json_object *ignore;
    struct tshard mem, *views; /* views[i]: codes of file shard i */
    struct qrec *q;
    size_t n_q;
    char **drop;               /* source keys replaced (sorted before use) */
    size_t n_drop;
};

/* A quantized module: its tensors and what their shapes say. */
struct mod {
    char name[200];
    const struct ckpt_tensor *packed, *scale, *shape, *zp, *gidx;
    uint64_t out, in;
    int bits, gs;
    uint64_t group;            /* CT group (in for channel) */
    bool channel;
    bool dense;                /* no exact MLX affine form: stored as F32 (a group not a multiple of 32, a
                                * width other than 4 or 8, columns reordered across groups) */
};

/* Python's `re` syntax (what compressed-tensors matches `re:` targets with)
 * as POSIX ERE, for the subset targets use: literals and escapes, `.`,
 * `\\d \\w \\s` and their negations, sets, groups (`(?:` too), `|`, greedy
 * and lazy repeats (laziness cannot change whether re.match matches), `^`
 * and `$`. NULL, with *why, for anything else (look-arounds, backreferences,
 * `\\b`, flags): such a target matches nothing and is a problem. */
static char *py_to_ere(const char *py, const char **why)
{
    static const char *const cls[] = {['d'] = "0-9", ['w'] = "0-9A-Za-z_", ['s'] = " \t\n\r\f\v"};
    size_t n = strlen(py), o = 0;
    char *out = malloc(16 * n + 3);
    if (!out) {
        *why = "out of memory";
        return NULL;
    }
    out[o++] = '^';
    out[o++] = '(';
    for (size_t i = 0; i < n; i++) {
        char ch = py[i];
        if (ch == '\\' && i + 1 < n) {
            char x = py[++i], lo = (char)(x | 0x20);
            if ((lo == 'd' || lo == 'w' || lo == 's') && lo != x) /* \D \W \S */
                o += (size_t)sprintf(out + o, "[^%s]", cls[(unsigned char)lo]);
            else if (lo == 'd' || lo == 'w' || lo == 's')
                o += (size_t)sprintf(out + o, "[%s]", cls[(unsigned char)lo]);
            else if ((x >= '0' && x <= '9') || (x >= 'A' && x <= 'Z') || (x >= 'a' && x <= 'z')) {
                *why = "an escape other than \\d \\w \\s \\D \\W \\S";
                free(out);
                return NULL;
            } else
                o += (size_t)sprintf(out + o, strchr(".[](){}*+?|^$\\", x) ? "\\%c" : "%c", x);
        } else if (ch == '[') { /* a set: its members, then ERE's order (] first, [ and - last) */
            bool neg = py[i + 1] == '^', has[256] = {false};
            size_t j = i + 1 + neg;
            char ranges[1024];
            size_t nr = 0;
            for (bool first = true; j < n && (py[j] != ']' || first); first = false) {
                unsigned char a = (unsigned char)py[j++];
                if (a == '\\' && j < n) {
                    char x = py[j++], lo = (char)(x | 0x20);
                    if ((lo == 'd' || lo == 'w' || lo == 's') && lo == x) {
                        for (const char *c2 = cls[(unsigned char)lo]; *c2; c2++)
                            if (c2[1] == '-' && c2[2])
                                nr += (size_t)snprintf(ranges + nr, sizeof ranges - nr, "%c-%c", c2[0], c2[2]), c2 += 2;
                            else
                                has[(unsigned char)*c2] = true;
                        continue;
                    }
                    if ((x >= '0' && x <= '9') || (x >= 'A' && x <= 'Z') || (x >= 'a' && x <= 'z')) {
                        *why = "an escape in a set other than \\d \\w \\s";
                        free(out);
                        return NULL;
                    }
                    a = (unsigned char)x;
                }
                if (j + 1 < n && py[j] == '-' && py[j + 1] != ']') { /* a range a-b of plain characters */
                    unsigned char b = (unsigned char)py[j + 1];
                    if (strchr("[]-^\\", a) || strchr("[]-^\\", b) || b < a || nr + 4 > sizeof ranges) {
                        *why = "a set range that is not plain characters in order";
                        free(out);
                        return NULL;
                    }
                    nr += (size_t)snprintf(ranges + nr, sizeof ranges - nr, "%c-%c", a, b);
                    j += 2;
                } else
                    has[a] = true;
            }
            if (j >= n) {
                *why = "a set without its ]";
                free(out);
                return NULL;
            }
            size_t open = o; /* the set in ERE: ] first, ^ not first, [ and - last */
            out[o++] = '[';
            if (neg)
                out[o++] = '^';
            if (has[']'])
                out[o++] = ']';
            for (int c2 = 1; c2 < 256; c2++)
                if (has[c2] && !strchr("[]-^", c2))
                    out[o++] = (char)c2;
            memcpy(out + o, ranges, nr);
            o += nr;
            if (has['['])
                out[o++] = '[';
            if (has['^'] && o == open + 1 && !has['-']) /* [\^] alone: ^ as a literal */
                o = open, out[o++] = '\\', out[o++] = '^';
            else {
                if (has['^'] && o == open + 1) /* ^ must not come first: -^ */
                    out[o++] = '-', has['-'] = false;
                if (has['^'])
                    out[o++] = '^';
                if (has['-'])
                    out[o++] = '-';
                out[o++] = ']';
            }
            i = j;
        } else if (ch == '(' && py[i + 1] == '?') {
            if (py[i + 2] != ':') {
                *why = "a group of the (?...) kinds other than (?:";
                free(out);
                return NULL;
            }
            out[o++] = '(';
            i += 2;
        } else if (ch == '?' && i > 0 && strchr("*+?}", py[i - 1]) && (i < 2 || py[i - 2] != '\\')) {
            /* lazy: whether re.match matches does not depend on it */
        } else if (ch == '{') { /* a repeat {m}, {m,}, {m,n}; any other { is a literal in Python */
            size_t j = i + 1;
            while (j < n && ((py[j] >= '0' && py[j] <= '9') || py[j] == ','))
                j++;
            bool rep = j < n && py[j] == '}' && j > i + 1 && py[i + 1] != ',';
            out[o++] = rep ? '{' : '\\';
            if (!rep)
                out[o++] = '{';
        } else
            out[o++] = ch;
    }
    out[o++] = ')';
    out[o] = 0;
    return out;
}

/* (transcode.h) A target gempack cannot read matches nothing (pattern_readable reports it). */
bool ct_py_match(const char *pattern, const char *module)
{
    const char *why;
    char *ere = py_to_ere(pattern, &why);
    regex_t re;
    bool m = ere && regcomp(&re, ere, REG_EXTENDED | REG_NOSUB) == 0;
    if (m) {
        m = regexec(&re, module, 0, NULL, 0) == 0;
        regfree(&re);
    }
    free(ere);
    return m;
}

/* How a target selects a module: 1 by its name (exact, or a `re:` regex), 2
 * by its class (a quantized module is a torch Linear, whose classes are
 * Linear and Module), 0 not at all (utils/match.py's _match_name, _match_class). */
static int target_match(const char *target, const char *module)
{
    if (!strncmp(target, "re:", 3))
        return ct_py_match(target + 3, module) ? 1 : 0;
    return !strcmp(target, module) ? 1 : !strcmp(target, "Linear") || !strcmp(target, "Module") ? 2 : 0;
}

static size_t arr_len(struct json_object *o)
{
    return json_object_get_type(o) == json_type_array ? json_object_array_length(o) : 0;
}

static bool list_match(struct json_object *list, const char *module)
{
    for (size_t i = 0; i < arr_len(list); i++) {
        struct json_object *v = json_object_array_get_idx(list, i);
        if (json_object_get_type(v) == json_type_string && target_match(json_object_get_string(v), module))
            return true;
    }
    return false;
}

static struct json_object *get(struct json_object *o, const char *k)
{
    struct json_object *v = NULL;
    return o && json_object_get_type(o) == json_type_object && json_object_object_get_ex(o, k, &v) ? v : NULL;
}

static int add_drop(struct ctx *c, const char *name, struct err *e)
{
    char **d = realloc(c->drop, (c->n_drop + 1) * sizeof *d);
    if (!d || !(d[c->n_drop] = strdup(name)))
        return err_set(e, ERR_NOMEM, "out of memory");
    c->drop = d;
    c->n_drop++;
    return ERR_OK;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static bool dropped(const char *name, void *p)
{
    struct ctx *c = p;
    return c->n_drop && bsearch(&name, c->drop, c->n_drop, sizeof *c->drop, cmp_str) != NULL;
}

/* The block's schemes; problems for anything that is not weight-only int. */
static void read_schemes(struct ctx *c, struct json_object *q)
{
    struct source *s = c->s;
    const char *fmt = json_object_get_string(get(q, "format"));
    bool mixed = fmt && !strcmp(fmt, "mixed-precision");
    if (!fmt || (strcmp(fmt, "pack-quantized") && !mixed))
        src_problem(s, "quantization_config.format: %s, expected \"pack-quantized\" (int weights packed in int32)",
                    fmt ? fmt : "missing");
    const char *status = json_object_get_string(get(q, "quantization_status"));
    if (status && strcmp(status, "compressed"))
        src_problem(s, "quantization_config.quantization_status: \"%s\", expected \"compressed\"", status);
    struct json_object *groups = get(q, "config_groups");
    if (!groups || json_object_get_type(groups) != json_type_object) {
        src_problem(s, "quantization_config.config_groups: missing, expected an object of schemes");
        return;
    }
    c->sch = calloc((size_t)json_object_object_length(groups) + 1, sizeof *c->sch);
    if (!c->sch)
        return;
    json_object_object_foreach(groups, name, g)
    {
        struct scheme *k = &c->sch[c->n_sch++];
        struct json_object *w = get(g, "weights"), *v;
        k->name = name;
        k->targets = get(g, "targets");
        k->bad = true; /* until read whole */
        const char *gfmt = json_object_get_string(get(g, "format"));
        if (mixed && gfmt && strcmp(gfmt, "pack-quantized")) {
            src_problem(s, "config_groups.%s.format: \"%s\", expected \"pack-quantized\"", name, gfmt);
            continue;
        }
        if ((v = get(g, "input_activations")) && json_object_get_type(v) != json_type_null) {
            src_problem(s, "config_groups.%s.input_activations: quantized activations (not weight-only); gempack "
                           "reads W4A16/W8A16 schemes",
                        name);
            continue;
        }
        const char *type = json_object_get_string(get(w, "type"));
        uint64_t bits = 8, gsz = 0;
        if (!w || (type && strcmp(type, "int")) || ((v = get(w, "num_bits")) && !jsonx_u64(v, &bits))) {
            src_problem(s, "config_groups.%s.weights: expected int weights with num_bits", name);
            continue;
        }
        if (bits < 1 || bits > 8) {
            src_problem(s, "config_groups.%s.weights.num_bits: %s, expected 1..8", name, json_object_to_json_string(v));
            continue;
        }
        const char *strategy = json_object_get_string(get(w, "strategy"));
        struct json_object *gs = get(w, "group_size");
        bool gs_set = gs && json_object_get_type(gs) == json_type_int;
        int64_t gsv = gs_set ? json_object_get_int64(gs) : 0;
        k->channel = strategy ? !strcmp(strategy, "channel") : gs_set && gsv == -1;
        bool group = strategy ? !strcmp(strategy, "group") : gs_set && gsv > 0;
        if (group && gsv > 0)
            gsz = (uint64_t)gsv;
        if (!k->channel && !(group && gsz)) {
            src_problem(s, "config_groups.%s.weights.strategy: %s (group_size %s), expected \"group\" with a group "
                           "size or \"channel\"",
                        name, strategy ? strategy : "null", gs ? json_object_to_json_string(gs) : "null");
            continue;
        }
        struct json_object *sym = get(w, "symmetric");
        k->symmetric = !sym || json_object_get_boolean(sym);
        const char *act = json_object_get_string(get(w, "actorder"));
        k->g_idx = act && (!strcmp(act, "group") || !strcmp(act, "dynamic"));
        k->bits = (int)bits;
        k->group = gsz;
        k->bad = false;
    }
}

/* A `re:` pattern gempack cannot read is a problem (it would match nothing). */
static void pattern_readable(struct ctx *c, const char *where, const char *t)
{
    const char *why;
    char *ere = t && !strncmp(t, "re:", 3) ? py_to_ere(t + 3, &why) : NULL;
    if (t && !strncmp(t, "re:", 3) && !ere)
        src_problem(c->s, "%s \"%s\": %s (gempack reads the part of Python's re that targets use)", where, t, why);
    free(ere);
}

static int cmp_target(const void *a, const void *b)
{
    const struct target *x = a, *y = b;
    int rx = !strncmp(x->t, "re:", 3), ry = !strncmp(y->t, "re:", 3);
    return rx != ry ? rx - ry : strcmp(x->t, y->t);
}

/* Every target of every group, the last group listing it owning it, in
 * the order compressed-tensors tries them; a `re:` target or ignore entry
 * gempack cannot read is a problem. */
static void order_targets(struct ctx *c)
{
    size_t cap = 0;
    for (size_t i = 0; i < c->n_sch; i++)
        cap += arr_len(c->sch[i].targets);
    c->tg = calloc(cap + 1, sizeof *c->tg);
    for (size_t i = 0; c->tg && i < c->n_sch; i++)
        for (size_t j = 0; j < arr_len(c->sch[i].targets); j++) {
            const char *t = json_object_get_string(json_object_array_get_idx(c->sch[i].targets, j));
            size_t k = 0;
            if (!t || json_object_get_type(json_object_array_get_idx(c->sch[i].targets, j)) != json_type_string)
                continue;
            while (k < c->n_tg && strcmp(c->tg[k].t, t))
                k++;
            c->tg[k] = (struct target){t, i};
            c->n_tg += k == c->n_tg;
        }
    if (c->tg)
        qsort(c->tg, c->n_tg, sizeof *c->tg, cmp_target);
    for (size_t i = 0; i < c->n_tg; i++)
        pattern_readable(c, "quantization_config: target", c->tg[i].t);
    for (size_t j = 0; j < arr_len(c->ignore); j++)
        pattern_readable(c, "quantization_config.ignore:", json_object_get_string(json_object_array_get_idx(c->ignore, j)));
}

/* The scheme compressed-tensors applies to a module (apply.py: the first
 * target matching its name, exact before regex, else the first matching its
 * class), or NULL. */
static const struct scheme *scheme_of(const struct ctx *c, const char *module)
{
    const struct target *by_class = NULL;
    for (size_t i = 0; i < c->n_tg; i++) {
        int m = target_match(c->tg[i].t, module);
        if (m == 1)
            return &c->sch[c->tg[i].sch];
        if (m == 2 && !by_class)
            by_class = &c->tg[i];
    }
    return by_class ? &c->sch[by_class->sch] : NULL;
}

/* The tensor <m>.<part>, or NULL. */
static const struct ckpt_tensor *part(const struct source *s, const char *m, const char *p)
{
    char key[260];
    snprintf(key, sizeof key, "%s.%s", m, p);
    return ckpt_find(&s->ck, key);
}

static const uint8_t *data_of(const struct source *s, const struct ckpt_tensor *t)
{
    const uint8_t *p = NULL;
    return st_data(&s->ck.shards[t->shard], t->t, &p, NULL) == ERR_OK ? p : NULL;
}

/* What a module's tensors say: groups, the logical [out, in]. */
static bool describe(struct ctx *c, struct mod *m)
{
    struct source *s = c->s;
    const struct st_tensor *pk = m->packed->t;
    if ((pk->dtype != DT_I32 && pk->dtype != DT_U32) || pk->rank != 2) {
        src_problem(s, "%s.weight_packed: %s rank %d, expected I32 [out, words]", m->name, dtype_name(pk->dtype),
                    pk->rank);
        return false;
    }
    if (!m->scale || !m->shape) {
        src_problem(s, "%s: weight_packed without %s", m->name, m->scale ? "weight_shape" : "weight_scale");
        return false;
    }
    const struct st_tensor *sh = m->shape->t, *sc = m->scale->t;
    const uint8_t *d = data_of(s, m->shape);
    if ((sh->dtype != DT_I64 && sh->dtype != DT_I32) || sh->rank != 1 || sh->shape[0] != 2) {
        src_problem(s, "%s.weight_shape: %s, expected I64 [2]", m->name, dtype_name(sh->dtype));
        return false;
    }
    if (!d) {
        src_problem(s, "%s.weight_shape: its data is not available (headers only)", m->name);
        return false;
    }
    int64_t o = sh->dtype == DT_I64 ? (int64_t)rd_u64le(d) : (int32_t)rd_u32le(d);
    int64_t i = sh->dtype == DT_I64 ? (int64_t)rd_u64le(d + 8) : (int32_t)rd_u32le(d + 4);
    if (o < 1 || i < 1 || i > INT32_MAX || (uint64_t)o != pk->shape[0]) {
        src_problem(s, "%s.weight_shape: [%lld, %lld], but weight_packed has %llu rows (and inputs are 1..2^31)",
                    m->name, (long long)o, (long long)i, (unsigned long long)pk->shape[0]);
        return false;
    }
    m->out = (uint64_t)o;
    m->in = (uint64_t)i;
    if (!dtype_is_weight_float(sc->dtype) || sc->rank != 2 || sc->shape[0] != m->out || !sc->shape[1] ||
        m->in % sc->shape[1]) {
        src_problem(s, "%s.weight_scale: %s rank %d, expected a float [%llu, groups] dividing %llu inputs", m->name,
                    dtype_name(sc->dtype), sc->rank, (unsigned long long)m->out, (unsigned long long)m->in);
        return false;
    }
    m->channel = sc->shape[1] == 1;
    m->group = m->in / sc->shape[1];
    m->gs = affine_group_for(m->group);
    const struct st_tensor *g = m->gidx ? m->gidx->t : NULL;
    if (g && ((g->dtype != DT_I32 && g->dtype != DT_I64) || g->rank != 1 || g->shape[0] != m->in)) {
        src_problem(s, "%s.weight_g_idx: %s rank %d, expected I32 [%llu]", m->name, dtype_name(g->dtype), g->rank,
                    (unsigned long long)m->in);
        return false;
    }
    const uint8_t *gd = g ? data_of(s, m->gidx) : NULL; /* small: check reads it too */
    for (uint64_t col = 0; gd && col < m->in; col++) {
        int64_t v = g->dtype == DT_I32 ? (int32_t)rd_u32le(gd + 4 * col) : (int64_t)rd_u64le(gd + 8 * col);
        if (v < 0 || (uint64_t)v >= m->in / m->group) {
            src_problem(s, "%s.weight_g_idx[%llu] = %lld: not a group (0..%llu)", m->name, (unsigned long long)col,
                        (long long)v, (unsigned long long)(m->in / m->group - 1));
            return false;
        }
    }
    return true;
}

/* The scheme compressed-tensors applies to the module (not ignored; the
 * most specific target), which its tensors must agree with: num_bits packs
 * its inputs into weight_packed's words, strategy and group give its scales,
 * symmetry its zero points, actorder its g_idx. The width is the config's. */
static bool scheme_agrees(struct ctx *c, struct mod *m)
{
    struct source *s = c->s;
    if (list_match(c->ignore, m->name)) {
        src_problem(s, "%s: quantized, but quantization_config.ignore keeps it dense", m->name);
        return false;
    }
    const struct scheme *k = scheme_of(c, m->name);
    if (!k) {
        src_problem(s, "%s: quantized, but no config group targets it", m->name);
        return false;
    }
    if (k->bad) {
        src_problem(s, "%s: quantized, but config group %s, which targets it, is not one gempack reads", m->name,
                    k->name);
        return false;
    }
    const struct st_tensor *pk = m->packed->t, *z = m->zp ? m->zp->t : NULL;
    if (pk->shape[1] != (m->in * (uint64_t)k->bits + 31) / 32) {
        src_problem(s, "%s.weight_packed: %llu words per row, but num_bits %d (config_groups.%s) packs %llu inputs in "
                       "%llu", m->name, (unsigned long long)pk->shape[1], k->bits, k->name, (unsigned long long)m->in,
                    (unsigned long long)((m->in * (uint64_t)k->bits + 31) / 32));
        return false;
    }
    m->bits = k->bits;
    uint64_t zrows = (m->out * (uint64_t)m->bits + 31) / 32;
    if (z && ((z->dtype != DT_I32 && z->dtype != DT_U32) || z->rank != 2 || z->shape[0] != zrows ||
              z->shape[1] != m->in / m->group)) {
        src_problem(s, "%s.weight_zero_point: %s rank %d, expected I32 [%llu, %llu] (packed down the rows)", m->name,
                    dtype_name(z->dtype), z->rank, (unsigned long long)zrows, (unsigned long long)(m->in / m->group));
        return false;
    }
    if (k->symmetric != !m->zp || k->g_idx != !!m->gidx || (k->channel ? !m->channel : k->group != m->group)) {
        src_problem(s, "%s: int%d %s%llu %s in its tensors, but config group %s, which targets it, says otherwise",
                    m->name, m->bits, m->channel ? "channel, group " : "group ", (unsigned long long)m->group,
                    m->zp ? "asymmetric" : "symmetric", k->name);
        return false;
    }
    return true;
}

/* The value of code u in CT group g of row r: (u − shift)·scale. */
static void group_params(const struct mod *m, const uint8_t *sc, const uint8_t *zp, uint64_t r, uint64_t g,
                         double *scale, double *shift)
{
    enum dtype sdt = m->scale->t->dtype;
    float f;
    uint64_t ng = m->in / m->group;
    dtype_to_f32(sdt, sc + (r * ng + g) * (dtype_table[sdt].bits / 8), &f, 1);
    *scale = (double)f;
    *shift = (double)(1 << (m->bits - 1));
    if (zp) {
        uint64_t bit = r * (uint64_t)m->bits, word = rd_u32le(zp + ((bit / 32) * ng + g) * 4);
        *shift += (double)((word >> (bit % 32)) & ((1u << m->bits) - 1)) - (double)(1 << (m->bits - 1));
    }
}

/* Scales and biases of the affine form (expert e of a stack at row offset
 * r0); the dtype the module's scales are stored in. */
static enum dtype fill_affine(const struct mod *m, const uint8_t *sc, const uint8_t *zp, uint8_t *s_out,
                              uint8_t *b_out, uint64_t r0, enum dtype adt, struct source_module *rec)
{
    uint64_t ng = m->in / m->group, per = m->group / (uint64_t)m->gs, sz = dtype_table[adt].bits / 8;
    for (uint64_t r = 0; r < m->out; r++)
        for (uint64_t g = 0; g < ng; g++) {
            double scale, shift;
            group_params(m, sc, zp, r, g, &scale, &shift);
            float sa = (float)scale, ba = (float)(-scale * shift), sv, bv;
            uint8_t sbytes[4], bbytes[4];
            dtype_from_f32(adt, &sa, sbytes, 1);
            dtype_from_f32(adt, &ba, bbytes, 1);
            dtype_to_f32(adt, sbytes, &sv, 1);
            dtype_to_f32(adt, bbytes, &bv, 1);
            if (rec)
                verify_group(rec, sv, bv, m->bits, scale, shift);
            for (uint64_t k = 0; k < per; k++) {
                memcpy(s_out + ((r0 + r) * ng * per + g * per + k) * sz, sbytes, sz);
                memcpy(b_out + ((r0 + r) * ng * per + g * per + k) * sz, bbytes, sz);
            }
        }
    return adt;
}

/* The dtype that holds a module's scale and bias exactly: the scales' own
 * for symmetric schemes (−2^(b−1)·s is exact unless it overflows), F32 for
 * zero points (and when the bias overflows). */
static enum dtype affine_dtype(const struct mod *m, const uint8_t *sc, const uint8_t *zp)
{
    enum dtype sdt = m->scale->t->dtype;
    if (zp || !sc)
        return zp ? DT_F32 : sdt;
    uint64_t ng = m->in / m->group;
    for (uint64_t r = 0; r < m->out; r++)
        for (uint64_t g = 0; g < ng; g++) {
            double scale, shift;
            group_params(m, sc, NULL, r, g, &scale, &shift);
            float b = (float)(-scale * shift), back;
            uint8_t bytes[4];
            dtype_from_f32(sdt, &b, bytes, 1);
            dtype_to_f32(sdt, bytes, &back, 1);
            if (back != b)
                return DT_F32;
        }
    return sdt;
}

static bool gidx_trivial(const struct source *s, const struct mod *m)
{
    const uint8_t *d = data_of(s, m->gidx);
    const struct st_tensor *t = m->gidx->t;
    if (!d || (t->dtype != DT_I32 && t->dtype != DT_I64) || t->rank != 1 || t->shape[0] != m->in)
        return false;
    for (uint64_t c = 0; c < m->in; c++) {
        int64_t g = t->dtype == DT_I32 ? (int32_t)rd_u32le(d + 4 * c) : (int64_t)rd_u64le(d + 8 * c);
        if (g != (int64_t)(c / m->group))
            return false;
    }
    return true;
}

static int record(struct ctx *c, const char *path, const struct mod *m, enum dtype adt, struct source_module **rec,
                  struct err *e)
{
    char from[48], to[64], key[240];
    snprintf(from, sizeof from, "int%d %s%llu %s", m->bits, m->channel ? "channel, group " : "group ",
             (unsigned long long)m->group, m->zp ? "asymmetric" : "symmetric");
    snprintf(to, sizeof to, "affine %d-bit group %d, %s scales", m->bits, m->gs, dtype_name(adt));
    struct qrec *q = realloc(c->q, (c->n_q + 1) * sizeof *q);
    snprintf(key, sizeof key, "%s.weight", path);
    if (!q || !(*rec = src_module(c->s, path, key, from, to)))
        return err_set(e, ERR_NOMEM, "out of memory");
    c->q = q;
    snprintf(q[c->n_q].path, sizeof q[c->n_q].path, "%s", path);
    q[c->n_q].bits = m->bits;
    q[c->n_q].gs = m->gs;
    c->n_q++;
    return ERR_OK;
}

static int drop_parts(struct ctx *c, const struct mod *m, struct err *e)
{
    const struct ckpt_tensor *p[] = {m->packed, m->scale, m->shape, m->zp, m->gidx};
    for (size_t i = 0; i < sizeof p / sizeof *p; i++)
        if (p[i] && add_drop(c, p[i]->name, e) != ERR_OK)
            return ERR_NOMEM;
    return ERR_OK;
}

/* One module: codes viewed in place, scales and biases transcoded. */
static int map_module(struct ctx *c, struct mod *m, struct err *e)
{
    struct source *s = c->s;
    const uint8_t *sc = data_of(s, m->scale), *zp = m->zp ? data_of(s, m->zp) : NULL;
    enum dtype adt = affine_dtype(m, sc, zp);
    struct source_module *rec;
    int rc = record(c, m->name, m, adt, &rec, e);
    char key[260];
    uint64_t shw[2] = {m->out, m->in * (uint64_t)m->bits / 32}, shs[2] = {m->out, m->in / (uint64_t)m->gs};
    snprintf(key, sizeof key, "%s.weight", m->name);
    const struct st_tensor *pk = m->packed->t;
    if (rc == ERR_OK)
        rc = ts_view(&c->views[m->packed->shard], key, DT_U32, 2, shw, pk->begin, pk->end, e);
    uint8_t *so = NULL, *bo = NULL;
    snprintf(key, sizeof key, "%s.scales", m->name);
    if (rc == ERR_OK)
        rc = ts_add(&c->mem, key, adt, 2, shs, &so, e);
    size_t off = so ? (size_t)(so - c->mem.buf) : 0;
    snprintf(key, sizeof key, "%s.biases", m->name);
    if (rc == ERR_OK)
        rc = ts_add(&c->mem, key, adt, 2, shs, &bo, e);
    if (rc == ERR_OK && bo && sc)
        fill_affine(m, sc, zp, c->mem.buf + off, bo, 0, adt, (c->flags & SRC_HEADERS) ? NULL : rec);
    return rc == ERR_OK ? drop_parts(c, m, e) : rc;
}

/* A module with no exact MLX affine form, as the F32 matrix of its values
 * (q − z)·s, checked exact in F32; convert can then requantize it and
 * report the error. */
static int dense_module(struct ctx *c, const struct mod *m, struct err *e)
{
    struct source *s = c->s;
    char key[260], from[48];
    snprintf(key, sizeof key, "%s.weight", m->name);
    snprintf(from, sizeof from, "int%d %s%llu%s", m->bits, m->channel ? "channel, group " : "group ",
             (unsigned long long)m->group, m->gidx ? " reordered" : "");
    struct source_module *rec = src_module(s, m->name, key, from, "F32, dense (no exact MLX affine form)");
    uint8_t *w;
    int rc = rec ? ts_add(&c->mem, key, DT_F32, 2, (const uint64_t[]){m->out, m->in}, &w, e)
                 : err_set(e, ERR_NOMEM, "out of memory");
    const uint8_t *pk = data_of(s, m->packed), *sc = data_of(s, m->scale), *zp = m->zp ? data_of(s, m->zp) : NULL,
                  *gi = m->gidx ? data_of(s, m->gidx) : NULL;
    uint64_t words = m->packed->t->shape[1];
    for (uint64_t r = 0; rc == ERR_OK && w && pk && sc && r < m->out; r++)
        for (uint64_t col = 0; col < m->in; col++) {
            uint64_t bit = col * (uint64_t)m->bits, at = r * words * 4 + bit / 8;
            unsigned v = (unsigned)(pk[at] | (bit % 8 + (uint64_t)m->bits > 8 ? pk[at + 1] << 8 : 0));
            unsigned u = (v >> (bit % 8)) & ((1u << m->bits) - 1);
            uint64_t g = !gi ? col / m->group
                       : m->gidx->t->dtype == DT_I32 ? (uint64_t)(uint32_t)rd_u32le(gi + 4 * col)
                                                     : rd_u64le(gi + 8 * col);
            if (g >= m->in / m->group) /* describe() refused it already: never read past the scales */
                return err_set(e, ERR_FORMAT, "%s.weight_g_idx[%llu]: not a group", m->name, (unsigned long long)col);
            double scale, shift;
            group_params(m, sc, zp, r, g, &scale, &shift);
            double want = scale * ((double)u - shift);
            float got = (float)want;
            memcpy(w + (r * m->in + col) * 4, &got, 4);
            if ((double)got != want) {
                rec->exact = false;
                rec->max_abs_err = fmax(rec->max_abs_err, fabs((double)got - want));
            }
            rec->verified = true;
        }
    return rc == ERR_OK ? drop_parts(c, m, e) : rc;
}

/* "<p>.experts.<e>.<proj>": the stack's name "<p>.experts.switch_glu.<proj>" and e. */
static bool expert_name(const char *name, char *stack, size_t len, long *e)
{
    const char *x = strstr(name, ".experts.");
    if (!x)
        return false;
    char *end;
    long v = strtol(x + 9, &end, 10);
    if (end == x + 9 || *end != '.' || v < 0)
        return false;
    snprintf(stack, len, "%.*s.experts.switch_glu.%s", (int)(x - name), name, end + 1);
    *e = v;
    return true;
}

/* Per-expert modules <p>.experts.<e>.<proj>, e = 0..E−1, stacked. */
static int map_stack(struct ctx *c, const char *stack, struct mod *ms, size_t n, struct err *e)
{
    struct source *s = c->s;
    const struct mod *m0 = &ms[0];
    for (size_t k = 0; k < n; k++)
        if (ms[k].bits != m0->bits || ms[k].out != m0->out || ms[k].in != m0->in || ms[k].group != m0->group ||
            !ms[k].zp != !m0->zp || ms[k].scale->t->dtype != m0->scale->t->dtype) {
            src_problem(s, "%s: experts quantized differently (%s)", stack, ms[k].name);
            return ERR_OK;
        }
    enum dtype adt = DT_F32;
    bool all_native = true;
    for (size_t k = 0; k < n; k++) {
        const uint8_t *sc = data_of(s, ms[k].scale), *zp = ms[k].zp ? data_of(s, ms[k].zp) : NULL;
        all_native &= affine_dtype(&ms[k], sc, zp) == m0->scale->t->dtype;
    }
    if (all_native)
        adt = m0->scale->t->dtype;
    struct source_module *rec;
    int rc = record(c, stack, m0, adt, &rec, e);
    uint64_t E = n, wrow = m0->in * (uint64_t)m0->bits / 32;
    uint64_t shw[3] = {E, m0->out, wrow}, shs[3] = {E, m0->out, m0->in / (uint64_t)m0->gs};
    char key[260];
    uint8_t *w = NULL, *so = NULL, *bo = NULL;
    snprintf(key, sizeof key, "%s.weight", stack);
    if (rc == ERR_OK && (rc = ts_add(&c->mem, key, DT_U32, 3, shw, &w, e)) == ERR_OK && w)
        for (size_t k = 0; k < n; k++) {
            const uint8_t *d = data_of(s, ms[k].packed);
            if (d)
                memcpy(w + k * m0->out * wrow * 4, d, m0->out * wrow * 4);
        }
    snprintf(key, sizeof key, "%s.scales", stack);
    if (rc == ERR_OK)
        rc = ts_add(&c->mem, key, adt, 3, shs, &so, e);
    size_t off_s = so ? (size_t)(so - c->mem.buf) : 0;
    snprintf(key, sizeof key, "%s.biases", stack);
    if (rc == ERR_OK)
        rc = ts_add(&c->mem, key, adt, 3, shs, &bo, e);
    for (size_t k = 0; rc == ERR_OK && bo && k < n; k++) {
        const uint8_t *sc = data_of(s, ms[k].scale), *zp = ms[k].zp ? data_of(s, ms[k].zp) : NULL;
        if (sc)
            fill_affine(&ms[k], sc, zp, c->mem.buf + off_s, bo, k * m0->out, adt,
                        (c->flags & SRC_HEADERS) ? NULL : rec);
    }
    for (size_t k = 0; rc == ERR_OK && k < n; k++)
        rc = drop_parts(c, &ms[k], e);
    return rc;
}

/* Dense per-expert weights <p>.experts.<e>.<proj>.weight stacked into a
 * float <p>.experts.switch_glu.<proj>.weight. */
static int stack_dense(struct ctx *c, struct err *e)
{
    struct source *s = c->s;
    for (size_t i = 0; i < s->ck.n_tensors; i++) {
        const struct ckpt_tensor *t = &s->ck.tensors[i];
        char stack[220], module[220];
        long ex;
        size_t l = strlen(t->name);
        if (l < 8 || strcmp(t->name + l - 7, ".weight") || !expert_name(t->name, stack, sizeof stack, &ex) || ex != 0)
            continue;
        snprintf(module, sizeof module, "%.*s", (int)(l - 7), t->name);
        stack[strlen(stack) - 7] = 0; /* drop ".weight" */
        size_t n = 0;
        char key[260];
        for (;; n++) {
            char base[220];
            snprintf(base, sizeof base, "%.*s", (int)(strstr(module, ".experts.") - module), module);
            snprintf(key, sizeof key, "%s.experts.%zu.%s.weight", base, n, strstr(stack, "switch_glu.") + 11);
            if (!ckpt_find(&s->ck, key))
                break;
        }
        const struct st_tensor *t0 = t->t;
        uint64_t sh[3] = {n, t0->shape[0], t0->rank == 2 ? t0->shape[1] : 0}, bytes;
        if (t0->rank != 2 || dtype_nbytes(t0->dtype, t0->shape, 2, &bytes, NULL) != ERR_OK) {
            src_problem(s, "%s: expected a 2-D expert weight", t->name);
            continue;
        }
        uint8_t *w;
        snprintf(key, sizeof key, "%s.weight", stack);
        int rc = ts_add(&c->mem, key, t0->dtype, 3, sh, &w, e);
        for (size_t k = 0; rc == ERR_OK && k < n; k++) {
            char base[220];
            snprintf(base, sizeof base, "%.*s", (int)(strstr(module, ".experts.") - module), module);
            snprintf(key, sizeof key, "%s.experts.%zu.%s.weight", base, k, strstr(stack, "switch_glu.") + 11);
            const struct ckpt_tensor *tk = ckpt_find(&s->ck, key);
            const uint8_t *d = data_of(s, tk);
            if (tk->t->dtype != t0->dtype || tk->t->rank != 2 || tk->t->shape[0] != t0->shape[0] ||
                tk->t->shape[1] != t0->shape[1]) {
                src_problem(s, "%s: not the shape and dtype of expert 0", key);
                continue;
            }
            if (w && d)
                memcpy(w + k * bytes, d, (size_t)bytes);
            rc = add_drop(c, key, e);
        }
        if (rc != ERR_OK)
            return rc;
    }
    return ERR_OK;
}

static int modules(struct ctx *c, struct err *e)
{
    struct source *s = c->s;
    struct mod *ms = calloc(s->ck.n_tensors + 1, sizeof *ms);
    if (!ms)
        return err_set(e, ERR_NOMEM, "out of memory");
    size_t n = 0;
    for (size_t i = 0; i < s->ck.n_tensors; i++) {
        const char *name = s->ck.tensors[i].name;
        size_t l = strlen(name);
        if (l <= 14 || strcmp(name + l - 14, ".weight_packed") || l - 14 >= sizeof ms[n].name)
            continue;
        struct mod *m = &ms[n];
        snprintf(m->name, sizeof m->name, "%.*s", (int)(l - 14), name);
        m->packed = &s->ck.tensors[i];
        m->scale = part(s, m->name, "weight_scale");
        m->shape = part(s, m->name, "weight_shape");
        m->zp = part(s, m->name, "weight_zero_point");
        m->gidx = part(s, m->name, "weight_g_idx");
        if (!describe(c, m) || !scheme_agrees(c, m))
            continue;
        m->dense = !m->gs || (m->bits != 4 && m->bits != 8) || (m->gidx && !gidx_trivial(s, m));
        n++;
    }
    int rc = ERR_OK;
    for (size_t i = 0; rc == ERR_OK && i < n; i++) {
        char stack[220];
        long ex;
        if (!ms[i].name[0])
            continue;
        if (ms[i].dense) {
            rc = dense_module(c, &ms[i], e);
            continue;
        }
        if (!expert_name(ms[i].name, stack, sizeof stack, &ex)) {
            rc = map_module(c, &ms[i], e);
            continue;
        }
        /* gather the stack's experts in order 0..E−1 */
        struct mod *st = calloc(n, sizeof *st);
        size_t ne = 0;
        if (!st) {
            rc = err_set(e, ERR_NOMEM, "out of memory");
            break;
        }
        for (bool found = true; found;) {
            found = false;
            for (size_t j = i; j < n; j++) {
                char sj[220];
                long xj;
                if (ms[j].name[0] && expert_name(ms[j].name, sj, sizeof sj, &xj) && !strcmp(sj, stack) &&
                    xj == (long)ne) {
                    st[ne++] = ms[j];
                    ms[j].name[0] = 0;
                    found = true;
                }
            }
        }
        for (size_t j = i; j < n; j++) {
            char sj[220];
            long xj;
            if (ms[j].name[0] && expert_name(ms[j].name, sj, sizeof sj, &xj) && !strcmp(sj, stack)) {
                src_problem(s, "%s: expert %ld without expert %zu", stack, xj, ne);
                ms[j].name[0] = 0;
            }
        }
        rc = map_stack(c, stack, st, ne, e);
        free(st);
    }
    free(ms);
    return rc;
}

/* Replaces quantization_config with the MLX block of the mapped modules. */
static int rewrite_config(struct ctx *c, struct json_object *root, struct err *e)
{
    struct json_object *t = get(root, "text_config");
    if (get(root, "quantization_config"))
        json_object_object_del(root, "quantization_config");
    else if (t)
        json_object_object_del(t, "quantization_config");
    json_object_object_add(root, "quantization", quant_block(c->q, c->n_q));
    const char *text = json_object_to_json_string_ext(root, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_NOSLASHESCAPE);
    char *copy = strdup(text);
    if (!copy)
        return err_set(e, ERR_NOMEM, "out of memory");
    free(c->s->config_text);
    c->s->config_text = copy;
    c->s->config_len = strlen(copy);
    return ERR_OK;
}

int ct_open(struct source *s, struct json_object *root, unsigned flags, struct err *e)
{
    struct ctx c = {.s = s, .flags = flags};
    struct json_object *q = get(root, "quantization_config");
    if (!q)
        q = get(get(root, "text_config"), "quantization_config");
    c.ignore = get(q, "ignore");
    read_schemes(&c, q);
    order_targets(&c);
    c.mem.data = !(flags & SRC_HEADERS);
    size_t nf = s->ck.n_files;
    c.views = calloc(nf ? nf : 1, sizeof *c.views);
    int rc = c.views ? ERR_OK : err_set(e, ERR_NOMEM, "out of memory");
    for (size_t i = 0; rc == ERR_OK && i < nf; i++) {
        const struct st_file *f = &s->ck.shards[i];
        c.views[i].f = (struct st_file){.file_size = f->file_size, .header_len = f->header_len,
                                        .data_start = f->data_start, .truncated = f->truncated, .map = f->map};
    }
    if (rc == ERR_OK)
        rc = modules(&c, e);
    if (rc == ERR_OK)
        rc = stack_dense(&c, e);
    for (size_t i = 0; rc == ERR_OK && i < nf; i++) {
        char name[300];
        snprintf(name, sizeof name, "%s (compressed-tensors codes)", s->ck.shard_names[i]);
        rc = c.views[i].f.n_tensors ? ts_commit(s, &c.views[i], name, e) : ERR_OK;
    }
    if (rc == ERR_OK)
        rc = ts_commit(s, &c.mem, "compressed-tensors scales and biases (in memory)", e);
    if (rc == ERR_OK) {
        if (c.n_drop)
            qsort(c.drop, c.n_drop, sizeof *c.drop, cmp_str);
        rc = ckpt_reindex(&s->ck, dropped, &c, e);
    }
    if (rc == ERR_OK)
        rc = rewrite_config(&c, root, e);
    for (size_t i = 0; i < nf; i++)
        st_close(&c.views[i].f);
    free(c.views);
    st_close(&c.mem.f);
    free(c.mem.buf); /* NULL once committed */
    for (size_t i = 0; i < c.n_drop; i++)
        free(c.drop[i]);
    free(c.drop);
    free(c.q);
    free(c.sch);
    free(c.tg);
    return rc;
}
