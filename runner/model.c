#include "runner/model.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "model/layout.h"

/* The stored tensor `name` (ingest's view of the pack or checkpoint), marked used. */
static bool lookup(const struct model *m, const char *name, struct ingest_part *out)
{
    const struct ingest_part *p = ingest_find(&m->src, name);
    *out = p ? *p : (struct ingest_part){0};
    if (p)
        m->used[p - m->src.parts] = true;
    return p != NULL;
}

/* The quantization of a module: its weight's (bits 0: not quantized). */
static struct ingest_quant quant_of(const struct model *m, const char *module)
{
    char name[NORM_NAME_MAX + 16];
    snprintf(name, sizeof name, "%s.weight", module);
    const struct ingest_part *p = ingest_find(&m->src, name);
    return p ? p->q : (struct ingest_quant){QM_AFFINE, 0, 0};
}

/* A matrix [experts?, rows, cols] under module path `module`. */
__attribute__((format(printf, 7, 8))) static int get_mat(struct model *m, struct wmat *w, int64_t experts, int64_t rows,
                                                         int64_t cols, struct err *e, const char *fmt, ...)
{
    char module[NORM_NAME_MAX], name[NORM_NAME_MAX + 16], got[96], want[96];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(module, sizeof module, fmt, ap);
    va_end(ap);
    memset(w, 0, sizeof *w);
    struct ingest_quant q = quant_of(m, module);
    if (q.bits && (q.gs <= 0 || cols % q.gs || (cols * q.bits) % 32))
        return err_set(e, ERR_FORMAT, "%s: %d-bit group %d cannot hold %lld input features", module, q.bits, q.gs,
                       (long long)cols);
    struct ingest_part ws, ss, bs;
    snprintf(name, sizeof name, "%s.weight", module);
    if (!lookup(m, name, &ws))
        return err_set(e, ERR_FORMAT, "tensor %s missing", name);
    int rank = experts ? 3 : 2;
    const struct qformat *f = qformat_of(q.mode);
    uint64_t wcols = q.bits ? qformat_part_cols(f, QP_WEIGHT, (uint64_t)cols, q.bits, q.gs) : (uint64_t)cols;
    uint64_t expect[3] = {(uint64_t)experts, (uint64_t)rows, wcols};
    const uint64_t *ex = experts ? expect : expect + 1;
    if (ws.rank != rank || memcmp(ws.shape, ex, (size_t)rank * sizeof *ex) ||
        (q.bits ? ws.dtype != qformat_part_dtype(f, QP_WEIGHT, DT_U8) : !dtype_is_weight_float(ws.dtype))) {
        shape_format(got, sizeof got, ws.shape, ws.rank);
        shape_format(want, sizeof want, ex, rank);
        return err_set(e, ERR_FORMAT, "%s is %s %s, expected %s %s", name, dtype_name(ws.dtype), got,
                       q.bits ? dtype_name(qformat_part_dtype(f, QP_WEIGHT, DT_U8)) : "F32/F16/BF16", want);
    }
    w->quantized = q.bits > 0;
    w->w = ws.data;
    w->rows = rows;
    w->cols = cols;
    w->dtype = ws.dtype;
    w->row_bytes = (size_t)wcols * dtype_table[ws.dtype].bits / 8;
    w->row_stride = ws.row_stride ? ws.row_stride : w->row_bytes;
    w->expert_bytes = ws.expert_stride ? ws.expert_stride : (size_t)rows * w->row_bytes;
    if (q.bits && f->parts == 1) { /* a ggml block type: the blocks alone */
        w->mode = q.mode;
        w->bits = q.bits;
        w->gs = q.gs;
    } else if (q.bits) { /* the format's scales, and biases where it has them */
        const bool biases = f->parts > QP_BIASES;
        snprintf(name, sizeof name, "%s.scales", module);
        bool have_s = lookup(m, name, &ss);
        snprintf(name, sizeof name, "%s.biases", module);
        bool have_b = lookup(m, name, &bs);
        uint64_t sexp[3] = {(uint64_t)experts, (uint64_t)rows, (uint64_t)(cols / q.gs)};
        const uint64_t *se = experts ? sexp : sexp + 1;
        if (!biases)
            bs = ss; /* the checks below then hold for the absent biases */
        if (!have_s || have_b != biases || ss.rank != rank || memcmp(ss.shape, se, (size_t)rank * sizeof *se) ||
            bs.rank != rank || memcmp(bs.shape, se, (size_t)rank * sizeof *se) || bs.dtype != ss.dtype ||
            !qformat_scales_ok(f, ss.dtype))
            return err_set(e, ERR_FORMAT, "%s: %s scales%s missing, or not %s [.., %lld, %lld]", module, f->name,
                           biases ? "/biases" : " (and no biases)",
                           f->scales == QF_FLOAT ? "float" : dtype_name(f->scales), (long long)rows,
                           (long long)(cols / q.gs));
        w->mode = q.mode;
        w->s = ss.data;
        w->b = biases ? bs.data : NULL;
        w->dtype = ss.dtype;
        w->bits = q.bits;
        w->gs = q.gs;
        w->srow_bytes = (size_t)(cols / q.gs) * dtype_table[ss.dtype].bits / 8;
        w->expert_sbytes = (size_t)rows * w->srow_bytes;
    }
    m->weight_bytes += /* of a 3-D expert tensor, the top-k experts a token is routed to */
        (uint64_t)(experts ? m->cfg.top_k : 1) * (uint64_t)rows * (w->row_bytes + (w->b ? 2 : 1) * w->srow_bytes);
    return ERR_OK;
}

/* A float vector of length n, copied (norm weights, scalars). */
__attribute__((format(printf, 5, 6))) static int get_vec(struct model *m, float **out, int64_t n, struct err *e,
                                                         const char *fmt, ...)
{
    char name[NORM_NAME_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    struct ingest_part s;
    uint64_t numel = 0;
    if (!lookup(m, name, &s))
        return err_set(e, ERR_FORMAT, "tensor %s missing", name);
    if (!dtype_is_weight_float(s.dtype) || !shape_numel(s.shape, s.rank, &numel) || numel != (uint64_t)n)
        return err_set(e, ERR_FORMAT, "%s is %s with %llu elements, expected %lld floats", name,
                       dtype_name(s.dtype), (unsigned long long)numel, (long long)n);
    if (m->n_owned == m->cap_owned) {
        size_t cap = m->cap_owned ? 2 * m->cap_owned : 64;
        float **v = realloc(m->owned, cap * sizeof *v);
        if (!v)
            return err_set(e, ERR_NOMEM, "out of memory");
        m->owned = v;
        m->cap_owned = cap;
    }
    float *f = malloc((size_t)n * sizeof *f);
    if (!f)
        return err_set(e, ERR_NOMEM, "out of memory");
    dtype_to_f32(s.dtype, s.data, f, (size_t)n);
    m->owned[m->n_owned++] = f;
    *out = f;
    return ERR_OK;
}

/* Where each row of the canonical form binds: a field of the layer's struct
 * layer_weights (per-layer rows) or of struct model (global rows); a struct
 * wmat for a quantizable row, a float vector for the others. */
#define LW(f) offsetof(struct layer_weights, f)
static const size_t bind_at[TENSOR_KINDS] = {
    [TK_EMBED] = offsetof(struct model, embed), [TK_PLE_EMBED] = offsetof(struct model, ple_embed),
    [TK_PLE_MODEL_PROJ] = offsetof(struct model, ple_model_proj),
    [TK_PLE_PROJ_NORM] = offsetof(struct model, ple_proj_norm), [TK_NORM] = offsetof(struct model, final_norm),
    [TK_LN_IN] = LW(ln_in), [TK_Q] = LW(q), [TK_Q_NORM] = LW(q_norm), [TK_K] = LW(k), [TK_K_NORM] = LW(k_norm),
    [TK_V] = LW(v), [TK_O] = LW(o), [TK_LN_POST_ATTN] = LW(ln_post_attn), [TK_LN_PRE_FF] = LW(ln_pre_ff),
    [TK_GATE] = LW(gate), [TK_UP] = LW(up), [TK_DOWN] = LW(down), [TK_LN_POST_FF1] = LW(ln_post_ff1),
    [TK_ROUTER] = LW(router), [TK_ROUTER_SCALE] = LW(router_scale), [TK_PER_EXPERT_SCALE] = LW(per_expert_scale),
    [TK_LN_PRE_FF2] = LW(ln_pre_ff2), [TK_EX_GATE] = LW(ex_gate), [TK_EX_UP] = LW(ex_up), [TK_EX_DOWN] = LW(ex_down),
    [TK_LN_POST_FF2] = LW(ln_post_ff2), [TK_LN_POST_FF] = LW(ln_post_ff), [TK_PLE_GATE] = LW(ple_gate),
    [TK_PLE_PROJ] = LW(ple_proj), [TK_LN_POST_PLE] = LW(ln_post_ple), [TK_LAYER_SCALAR] = LW(layer_scalar),
};
#undef LW

/* Where row t binds: in layer `layer`'s weights, or the model's (-1). */
static void *bound(struct model *m, int t, int layer)
{
    return (layer < 0 ? (uint8_t *)m : (uint8_t *)&m->layers[layer]) + bind_at[t];
}

static int bind(struct model *m, struct err *e)
{
    const struct gp_config *c = &m->cfg;
    struct layout_entry *le = NULL;
    size_t n = 0;
    int rc = layout_build(c, EXPERTS_CANON, &le, &n, e);
    m->layers = rc == ERR_OK ? calloc((size_t)c->n_layers, sizeof *m->layers) : NULL;
    if (rc == ERR_OK && !m->layers)
        rc = err_set(e, ERR_NOMEM, "cannot allocate %lld layers", (long long)c->n_layers);
    for (size_t i = 0; rc == ERR_OK && i < n; i++) {
        const struct layout_entry *t = &le[i];
        void *at = bound(m, t->kind, t->layer);
        uint64_t before = m->weight_bytes;
        if (t->redundant) /* K/V of a KV-shared layer: it reads its source layer's cache */
            continue;
        if (t->flags & TR_QUANT)
            rc = get_mat(m, at, t->rank == 3 ? (int64_t)t->shape[0] : 0, (int64_t)t->shape[t->rank - 2],
                         (int64_t)t->shape[t->rank - 1], e, "%s", t->module);
        else
            rc = get_vec(m, at, (int64_t)t->shape[0], e, "%s", t->name);
        if (t->kind == TK_PLE_EMBED)
            m->weight_bytes = before; /* a decode step reads one row of it, not the table */
    }
    free(le);
    /* a pack holds exactly the tensors its config uses (as check requires of a directory) */
    size_t unused = 0, first = 0;
    for (size_t i = m->src.source.kind == SRC_PACK && rc == ERR_OK ? m->src.n_parts : 0; i-- > 0;)
        if (!m->used[i] && (!unused++ || m->src.parts[i].order < m->src.parts[first].order))
            first = i;
    if (unused)
        rc = err_set(e, ERR_FORMAT, "%zu tensor%s (first: %s) not used by the model the manifest's config describes "
                                    "(%lld layers): the pack and its config disagree",
                     unused, unused == 1 ? " is" : "s are", m->src.parts[first].name, (long long)c->n_layers);
    return rc;
}

/* ---- weights in anonymous memory ---- */

/* A byte range the forward reads, and where its copy is. */
struct span {
    const uint8_t *lo, *hi;
    uint8_t *copy;
};

static int span_cmp(const void *a, const void *b)
{
    uintptr_t x = (uintptr_t)((const struct span *)a)->lo, y = (uintptr_t)((const struct span *)b)->lo;
    return (x > y) - (x < y);
}

/* The matrices the forward reads whole (all but the PLE table, of which a
 * step reads one row), with their expert counts (0: a plain matrix): the
 * quantizable rows of the canonical form, globals then layer by layer, bound
 * or not (at most TENSOR_KINDS per layer and for the globals). */
static size_t model_mats(struct model *m, struct wmat **w, int64_t *experts)
{
    size_t k = 0;
    for (int i = -1; i < m->cfg.n_layers; i++)
        for (int t = 0; t < TENSOR_KINDS; t++) {
            const struct tensor_row *r = &tensor_table[t];
            if (!(r->flags & TR_QUANT) || r->flags & (TR_HF | TR_MLX) || t == TK_PLE_EMBED ||
                !(r->flags & TR_LAYER) != (i < 0))
                continue;
            w[k] = bound(m, t, i);
            experts[k++] = r->dim[2] ? m->cfg.n_experts : 0;
        }
    return k;
}

/* The bytes of one of w's streams: rows of row_bytes every stride, per expert. */
static struct span mat_span(const uint8_t *p, int64_t experts, size_t expert_stride, int64_t rows, size_t stride,
                            size_t row_bytes)
{
    size_t last = (size_t)(experts > 1 ? experts - 1 : 0) * expert_stride + (size_t)(rows - 1) * stride;
    return (struct span){p, p + last + row_bytes, NULL};
}

/* The copy of p: in the span that holds it (spans sorted, disjoint). */
static const uint8_t *relocate(const struct span *sp, size_t n, const uint8_t *p)
{
    size_t lo = 0, hi = n;
    while (hi - lo > 1) {
        size_t mid = (lo + hi) / 2;
        if ((uintptr_t)sp[mid].lo <= (uintptr_t)p)
            lo = mid;
        else
            hi = mid;
    }
    return sp[lo].copy + (p - sp[lo].lo);
}

/* The copy in tasks of COPY_PIECE bytes of the spans laid end to end: the
 * threads fault in (and the kernel zeroes) their own pages. */
#define COPY_PIECE ((size_t)4 << 20)

struct copy_job {
    const struct span *sp;
    const size_t *start; /* [n + 1]: where span i begins, end to end */
    size_t n;
};

static void copy_task(void *arg, int64_t task, int worker)
{
    (void)worker;
    const struct copy_job *j = arg;
    size_t a = (size_t)task * COPY_PIECE, b = a + COPY_PIECE < j->start[j->n] ? a + COPY_PIECE : j->start[j->n];
    size_t lo = 0, hi = j->n;
    while (hi - lo > 1) { /* the span holding byte a */
        size_t mid = (lo + hi) / 2;
        if (j->start[mid] <= a)
            lo = mid;
        else
            hi = mid;
    }
    for (size_t i = lo; a < b; i++) {
        size_t in = a - j->start[i], k = j->start[i + 1] - a < b - a ? j->start[i + 1] - a : b - a;
        memcpy(j->sp[i].copy + in, j->sp[i].lo + in, k);
        a += k;
    }
}

/* A piece of kern_block_rows' work: blocks [b0, b1) of one matrix (one
 * expert's) from its source view into its blocked copy at dst. */
struct block_piece {
    struct wmat src;
    uint8_t *dst;
    int64_t b0, b1;
};

static void block_task(void *arg, int64_t task, int worker)
{
    (void)worker;
    const struct block_piece *p = (const struct block_piece *)arg + task;
    kern_block_rows(&p->src, p->dst, p->b0, p->b1);
}

/* Bytes of w's blocked copy, all experts. */
static size_t blocked_size(const struct wmat *w, int64_t experts)
{
    return (size_t)(experts > 0 ? experts : 1) * kern_blocked_bytes(w);
}

/* The matrices listed in blk written in blocks of rows from their sources
 * into their own copies, one after another from `at` (each 4 KiB aligned), in
 * pieces of about COPY_PIECE bytes on `threads` threads; their views then
 * point at the copies. */
static int block_matrices(struct wmat **w, const int64_t *ex, const bool *blk, size_t n_mats, uint8_t *at,
                          int threads, struct err *e)
{
    size_t n = 0, cap = 0, off = 0;
    struct block_piece *p = NULL;
    uint8_t **dst = malloc(n_mats * sizeof *dst);
    if (!dst)
        return err_set(e, ERR_NOMEM, "cannot list the matrices to lay out in blocks");
    for (size_t i = 0; i < n_mats; i++) {
        if (!blk[i])
            continue;
        const struct wmat *a = w[i];
        const int64_t blocks = a->rows / KERN_BLOCK_ROWS, bytes = KERN_BLOCK_ROWS * (int64_t)a->row_bytes;
        const int64_t per = (int64_t)COPY_PIECE / bytes > 1 ? (int64_t)COPY_PIECE / bytes : 1;
        off = (off + 4095) / 4096 * 4096;
        dst[i] = at + off;
        off += blocked_size(a, ex[i]);
        for (int64_t x = 0; x < (ex[i] > 0 ? ex[i] : 1); x++)
            for (int64_t b0 = 0; b0 < blocks; b0 += per) {
                if (n == cap) {
                    cap = cap ? 2 * cap : 256;
                    struct block_piece *q = realloc(p, cap * sizeof *p);
                    if (!q) {
                        free(p);
                        free(dst);
                        return err_set(e, ERR_NOMEM, "cannot list the matrices to lay out in blocks");
                    }
                    p = q;
                }
                p[n++] = (struct block_piece){kern_wmat_expert(a, x), dst[i] + (size_t)x * kern_blocked_bytes(a), b0,
                                              b0 + per < blocks ? b0 + per : blocks};
            }
    }
    pool_run(threads, (int64_t)n, block_task, p);
    for (size_t i = 0; i < n_mats; i++)
        if (blk[i])
            *w[i] = kern_blocked_view(w[i], dst[i]);
    free(p);
    free(dst);
    return ERR_OK;
}

static int load_weights(struct model *m, int threads, struct err *e)
{
    size_t cap = TENSOR_KINDS * ((size_t)m->cfg.n_layers + 1);
    struct wmat **w = malloc(cap * sizeof *w);
    int64_t *ex = malloc(cap * sizeof *ex);
    bool *blk = malloc(cap * sizeof *blk);
    struct span *sp = malloc(3 * cap * sizeof *sp);
    size_t *start = malloc((3 * cap + 1) * sizeof *start);
    if (!w || !ex || !blk || !sp || !start) {
        free(w);
        free(ex);
        free(blk);
        free(sp);
        free(start);
        return err_set(e, ERR_NOMEM, "cannot list the matrices to load");
    }
    size_t n_mats = model_mats(m, w, ex), n = 0, blocked_total = 0;
    for (size_t i = 0; i < n_mats; i++) {
        const struct wmat *a = w[i];
        blk[i] = false;
        if (!a->w || a->rows <= 0)
            continue; /* absent (KV-shared k/v, a dense model's router, ...) */
        if ((blk[i] = kern_blockable(a))) { /* not copied as is: written in blocks below */
            blocked_total = (blocked_total + 4095) / 4096 * 4096 + blocked_size(a, ex[i]);
            continue;
        }
        sp[n++] = mat_span(a->w, ex[i], a->expert_bytes, a->rows, a->row_stride, a->row_bytes);
        if (a->quantized)
            sp[n++] = mat_span(a->s, ex[i], a->expert_sbytes, a->rows, a->srow_bytes, a->srow_bytes);
        if (a->b)
            sp[n++] = mat_span(a->b, ex[i], a->expert_sbytes, a->rows, a->srow_bytes, a->srow_bytes);
    }
    qsort(sp, n, sizeof *sp, span_cmp);
    size_t merged = 0, total = 0;
    for (size_t i = 0; i < n; i++) { /* overlapping or touching ranges become one */
        if (merged && (uintptr_t)sp[i].lo <= (uintptr_t)sp[merged - 1].hi) {
            if ((uintptr_t)sp[i].hi > (uintptr_t)sp[merged - 1].hi)
                sp[merged - 1].hi = sp[i].hi;
        } else {
            sp[merged++] = sp[i];
        }
    }
    for (size_t i = 0; i < merged; i++) /* each copy starts where its source sits in a 4 KiB page */
        total = (total + 4095) / 4096 * 4096 + (uintptr_t)sp[i].lo % 4096 + (size_t)(sp[i].hi - sp[i].lo);
    size_t blocks_at = (total + 4095) / 4096 * 4096; /* then the blocked copies */
    total = blocks_at + blocked_total;
    int rc = ERR_OK;
    uint8_t *arena = total ? mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0) : NULL;
    if (arena == MAP_FAILED) {
        rc = err_set(e, ERR_NOMEM,
                     "cannot map %zu bytes of anonymous memory for the weights (--mmap reads them in place)",
                     total);
    } else if (arena) {
#if defined(MADV_HUGEPAGE) && !defined(GP_PORTABLE)
        madvise(arena, total, MADV_HUGEPAGE); /* advice only: without it, 4 KiB pages */
#endif
        size_t off = 0;
        start[0] = 0;
        for (size_t i = 0; i < merged; i++) {
            off = (off + 4095) / 4096 * 4096 + (uintptr_t)sp[i].lo % 4096;
            sp[i].copy = arena + off;
            off += (size_t)(sp[i].hi - sp[i].lo);
            start[i + 1] = start[i] + (size_t)(sp[i].hi - sp[i].lo);
        }
        struct copy_job j = {sp, start, merged};
        pool_run(threads, (int64_t)((start[merged] + COPY_PIECE - 1) / COPY_PIECE), copy_task, &j);
        rc = block_matrices(w, ex, blk, n_mats, arena + blocks_at, threads, e);
        mprotect(arena, total, PROT_READ);
        for (size_t i = 0; rc == ERR_OK && i < n_mats; i++) {
            struct wmat *a = w[i];
            if (!a->w || a->rows <= 0 || blk[i])
                continue;
            a->w = relocate(sp, merged, a->w);
            if (a->quantized)
                a->s = relocate(sp, merged, a->s);
            if (a->b)
                a->b = relocate(sp, merged, a->b);
        }
        m->arena = arena;
        m->arena_size = total;
    }
    free(w);
    free(ex);
    free(blk);
    free(sp);
    free(start);
    return rc;
}

int model_load_weights(struct model *m, int threads, struct err *e)
{
    int rc = load_weights(m, threads, e);
    return rc == ERR_OK ? rc : err_prefix(e, "%s", model_name(m));
}

int model_verify(const char *path, bool *verdict, size_t *n_tensors, struct err *e)
{
    struct pack p;
    struct model m;
    size_t bad;
    *verdict = false;
    int rc = pack_open(&p, path, e);
    if (rc == ERR_OK && (rc = quant_check_pack(&p, e)) != ERR_OK)
        pack_close(&p);
    if (rc != ERR_OK) /* unreadable, a newer version, an unknown feature: no verdict; else a mismatch */
        return rc == ERR_FORMAT || rc == ERR_RANGE ? ERR_OK : rc;
    *n_tensors = p.n_tensors;
    rc = pack_verify(&p, &bad, e);
    pack_close(&p);
    if (rc == ERR_OK && (rc = model_open(&m, path, e)) == ERR_OK) /* the tensors are the config's */
        model_close(&m);
    *verdict = rc == ERR_OK;
    return rc == ERR_OK || rc == ERR_FORMAT || rc == ERR_RANGE ? ERR_OK : rc;
}

const char *model_name(const struct model *m)
{
    return m->src.source.path ? m->src.source.path : "model";
}

int model_open(struct model *m, const char *path, struct err *e)
{
    memset(m, 0, sizeof *m);
    int rc = ingest_open(&m->src, &m->cfg, path, SRC_PACK_ANY, e);
    if (rc == ERR_OK && !(m->used = calloc(m->src.n_parts ? m->src.n_parts : 1, sizeof *m->used)))
        rc = err_set(e, ERR_NOMEM, "%s: cannot allocate %zu flags", path, m->src.n_parts);
    if (rc == ERR_OK)
        ingest_fingerprint(&m->src, false, m->fingerprint);
    if (rc == ERR_OK && (rc = bind(m, e)) != ERR_OK)
        err_prefix(e, "%s", path);
    if (rc != ERR_OK)
        model_close(m);
    return rc;
}

void model_close(struct model *m)
{
    if (!m)
        return;
    for (size_t i = 0; i < m->n_owned; i++)
        free(m->owned[i]);
    free(m->owned);
    free(m->layers);
    free(m->used);
    if (m->arena)
        munmap(m->arena, m->arena_size);
    ingest_close(&m->src);
    cfg_free(&m->cfg);
    memset(m, 0, sizeof *m);
}
