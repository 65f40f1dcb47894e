#include "converter/plan.h"
#include "quant/ggml.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "quant/quant.h"
#include "core/pool.h"

int plan_rule_parse(struct plan_rule *r, const char *arg, bool is_dense, struct err *e)
{
    memset(r, 0, sizeof *r);
    const char *eq = is_dense ? NULL : strrchr(arg, '=');
    if (!is_dense) {
        if (!eq || eq == arg)
            return err_set(e, ERR_USAGE, "'quantize' %s: expected REGEX=BITS[:GROUP] or REGEX=MODE", arg);
        if (qmode_from_name(eq + 1, &r->mode)) {
            qmode_defaults(r->mode, &r->group_size, &r->bits);
        } else {
            char *end;
            long bits = strtol(eq + 1, &end, 10), gs = 64;
            if (*end == ':')
                gs = strtol(end + 1, &end, 10);
            if (*end || !quant_params_valid(QM_AFFINE, (int)bits, (int)gs))
                return err_set(e, ERR_USAGE,
                               "'quantize' %s: expected BITS 2, 3, 4, 5, 6 or 8 with GROUP 32, 64 or 128, or a mode: "
                               "affine, mxfp4, nvfp4, mxfp8",
                               arg);
            r->mode = QM_AFFINE;
            r->bits = (int)bits;
            r->group_size = (int)gs;
        }
    }
    size_t len = eq ? (size_t)(eq - arg) : strlen(arg);
    r->pattern = strndup(arg, len);
    if (!r->pattern)
        return err_set(e, ERR_NOMEM, "out of memory");
    int rc = regcomp(&r->re, r->pattern, REG_EXTENDED | REG_NOSUB);
    if (rc != 0) {
        char msg[128];
        regerror(rc, &r->re, msg, sizeof msg);
        free(r->pattern);
        r->pattern = NULL;
        return err_set(e, ERR_USAGE, "'%s' %s: invalid regular expression: %s", is_dense ? "keep_dense" : "quantize",
                       arg, msg);
    }
    return ERR_OK;
}

void plan_rule_free(struct plan_rule *r)
{
    if (r && r->pattern) {
        regfree(&r->re);
        free(r->pattern);
        r->pattern = NULL;
    }
}

static const struct plan_rule *match(const struct plan_rule *rules, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (regexec(&rules[i].re, name, 0, NULL, 0) == 0)
            return &rules[i];
    return NULL;
}

const char *plan_action_name(enum plan_action a)
{
    switch (a) {
    case ACT_COPY: return "copy";
    case ACT_QUANTIZE: return "quantize";
    case ACT_REQUANTIZE: return "requantize";
    case ACT_DEQUANTIZE: return "dequantize";
    case ACT_TRANSCODE: return "transcode";
    }
    return "?";
}

static uint64_t numel(const struct norm_tensor *t)
{
    uint64_t n = 1;
    for (int k = 0; k < t->rank; k++)
        n *= t->shape[k];
    return n;
}

/* Output bytes of an item: codes + scales (+ biases), or the float tensor. */
static uint64_t item_bytes(const struct plan_item *it)
{
    uint64_t n = numel(it->nt);
    if (!it->quantized_out)
        return n * dtype_table[it->dtype].bits / 8;
    return qformat_bytes(qformat_of(it->mode), n, it->bits, it->group_size, it->dtype);
}

__attribute__((format(printf, 2, 3))) static void why(struct plan_item *it, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(it->why, sizeof it->why, fmt, ap);
    va_end(ap);
}

/* The float type a source row is exact in, which MLX would quantize it in:
 * the weight's, a source's float scales', bf16 for a source with byte
 * scales (MLX dequantizes those to bf16). */
static enum dtype source_type(const struct norm_tensor *t)
{
    if (!t->q.quantized)
        return t->w->t->dtype;
    return qformat_of(t->q.mode)->scales == QF_FLOAT ? t->s->t->dtype : DT_BF16; /* ggml types: bf16 too */
}

/* Decides one quantizable tensor. */
static int decide(struct plan_item *it, const struct plan_opts *o, int last_full, struct err *e)
{
    const struct norm_tensor *t = it->nt;
    uint64_t in = t->shape[t->rank - 1];
    bool src_q = t->q.quantized;
    it->act = ACT_COPY;
    it->quantized_out = src_q;
    it->mode = src_q ? t->q.mode : QM_AFFINE;
    it->bits = src_q ? t->q.bits : 0;
    it->group_size = src_q ? t->q.group_size : 0;
    it->dtype = src_q && t->s ? t->s->t->dtype : t->w->t->dtype; /* scales, or a ggml type's U8 blocks */
    const struct plan_rule *rq = match(o->quantize, o->n_quantize, t->name);
    const struct plan_rule *rd = match(o->keep_dense, o->n_keep_dense, t->name);
    bool ple = !strcmp(t->module, "per_layer_model_projection");

    if (o->skip_last_full && t->layer == last_full) {
        why(it, "--skip-last-full-attention (layer %d): source precision", last_full);
        return ERR_OK;
    }
    if (rd || (ple && o->ple_dense)) {
        if (rd)
            why(it, "--keep-dense %s", rd->pattern);
        else
            why(it, "--ple-projection dense");
        if (src_q) {
            it->act = ACT_DEQUANTIZE;
            it->quantized_out = false;
            it->dtype = DT_F32;
        }
        return ERR_OK;
    }
    int bits = 0, gs = 0;
    enum qmode mode = QM_AFFINE;
    char a[40], b[40];
    if (rq) {
        mode = rq->mode;
        bits = rq->bits;
        gs = rq->group_size;
        why(it, "--quantize %s=%s", rq->pattern, qmode_describe(mode, bits, gs, a, sizeof a));
    } else if (o->bits && t->router) {
        bits = 8;
        gs = 64;
        why(it, "MoE router: affine 8-bit group 64");
    } else if (o->bits) {
        mode = o->mode;
        bits = o->bits;
        gs = o->group_size;
        why(it, "--mode %s --bits %d --group-size %d", qmode_name(mode), bits, gs);
    } else if (o->mlx && src_q && ggml_affine_bits(qformat_of(t->q.mode)->ggml)) {
        it->act = ACT_TRANSCODE;
        it->mode = QM_AFFINE;
        it->bits = ggml_affine_bits(qformat_of(t->q.mode)->ggml);
        it->group_size = 32;
        it->dtype = DT_F16;
        why(it, "%s as MLX affine %d-bit group 32: the same values", qformat_of(t->q.mode)->name, it->bits);
        return ERR_OK;
    } else {
        why(it, src_q ? "source quantization kept" : "source precision kept");
        return ERR_OK;
    }
    if (in % (uint64_t)gs != 0) {
        why(it, "in_features %llu not a multiple of group %d: kept dense", (unsigned long long)in, gs);
        return ERR_OK;
    }
    if (src_q && t->q.mode == mode && t->q.bits == bits && t->q.group_size == gs) {
        why(it, "already %s: copied", qmode_describe(mode, bits, gs, a, sizeof a));
        return ERR_OK;
    }
    if (src_q && !o->allow_requantize)
        return err_set(e, ERR_USAGE, "%s is already MLX-quantized (%s); quantizing it again (%s) would compound the "
                                     "rounding error. Pass --allow-requantize to dequantize and requantize anyway, or "
                                     "convert the original float checkpoint",
                       t->name, qmode_describe(t->q.mode, t->q.bits, t->q.group_size, a, sizeof a), qmode_describe(mode, bits, gs, b, sizeof b));
    const struct qformat *f = qformat_of(mode);
    it->act = src_q ? ACT_REQUANTIZE : ACT_QUANTIZE;
    it->lattice = o->qat_lattice && f->lattice && bits == f->lattice_bits && gs == f->lattice_gs;
    it->quantized_out = true;
    it->mode = mode;
    it->bits = bits;
    it->group_size = gs;
    it->dtype = qformat_part_dtype(f, QP_SCALES, source_type(t)); /* float scales: the source's type */
    return ERR_OK;
}

int plan_build(const struct normalized *n, const struct gp_config *c, const struct plan_opts *o, struct plan *p,
               struct err *e)
{
    memset(p, 0, sizeof *p);
    p->items = calloc(n->n ? n->n : 1, sizeof *p->items);
    if (!p->items)
        return err_set(e, ERR_NOMEM, "cannot allocate the plan");
    int last_full = cfg_last_full_layer(c);
    for (size_t i = 0; i < n->n; i++) {
        struct plan_item *it = &p->items[p->n++];
        it->nt = &n->t[i];
        if (n->t[i].module[0]) {
            int rc = decide(it, o, last_full, e);
            if (rc != ERR_OK) {
                plan_free(p);
                return rc;
            }
        } else {
            it->act = ACT_COPY;
            it->dtype = n->t[i].w->t->dtype;
            why(it, "never quantized");
        }
        it->measured = it->act == ACT_COPY; /* the source's bytes: its values exactly */
        it->bytes = item_bytes(it);
        p->bytes += it->bytes;
        p->params += numel(it->nt);
    }
    return ERR_OK;
}

void plan_free(struct plan *p)
{
    if (!p)
        return;
    free(p->items);
    memset(p, 0, sizeof *p);
}

void plan_print(FILE *out, const struct plan *p)
{
    fprintf(out, "%-56s %-10s %-6s %-5s %4s %5s %12s  %s\n", "tensor", "action", "mode", "dtype", "bits", "group",
            "bytes", "why");
    for (size_t i = 0; i < p->n; i++) {
        const struct plan_item *it = &p->items[i];
        char bits[8] = "-", group[8] = "-";
        if (it->quantized_out) {
            snprintf(bits, sizeof bits, "%d", it->bits);
            snprintf(group, sizeof group, "%d", it->group_size);
        }
        fprintf(out, "%-56s %-10s %-6s %-5s %4s %5s %12llu  %s\n", it->nt->name, plan_action_name(it->act),
                it->quantized_out ? qmode_name(it->mode) : "-", it->quantized_out ? "U32" : dtype_name(it->dtype), bits,
                group, (unsigned long long)it->bytes, it->why);
    }
    fprintf(out, "total: %zu tensors, %llu weights, %llu bytes, %.3f bits per weight\n", p->n,
            (unsigned long long)p->params, (unsigned long long)p->bytes,
            p->params ? 8.0 * (double)p->bytes / (double)p->params : 0.0);
}

struct json_object *plan_json(const struct plan *p)
{
    struct json_object *o = json_object_new_object(), *a = json_object_new_array();
    for (size_t i = 0; i < p->n; i++) {
        const struct plan_item *it = &p->items[i];
        struct json_object *r = json_object_new_object();
        json_object_object_add(r, "tensor", json_object_new_string(it->nt->name));
        json_object_object_add(r, "action", json_object_new_string(plan_action_name(it->act)));
        json_object_object_add(r, "dtype", json_object_new_string(it->quantized_out ? "U32" : dtype_name(it->dtype)));
        json_object_object_add(r, "mode", it->quantized_out ? json_object_new_string(qmode_name(it->mode)) : NULL);
        json_object_object_add(r, "bits", it->quantized_out ? json_object_new_int(it->bits) : NULL);
        json_object_object_add(r, "group_size", it->quantized_out ? json_object_new_int(it->group_size) : NULL);
        json_object_object_add(r, "bytes", json_object_new_int64((int64_t)it->bytes));
        json_object_object_add(r, "why", json_object_new_string(it->why));
        json_object_array_add(a, r);
    }
    json_object_object_add(o, "tensors", a);
    json_object_object_add(o, "total_bytes", json_object_new_int64((int64_t)p->bytes));
    json_object_object_add(o, "total_weights", json_object_new_int64((int64_t)p->params));
    json_object_object_add(o, "bits_per_weight", json_object_new_double(p->params ? 8.0 * (double)p->bytes /
                                                                                        (double)p->params
                                                                                  : 0.0));
    return o;
}

/* ---- output tensors ---- */

int plan_outputs(const struct plan *p, struct out_tensor **out, size_t *n, struct err *e)
{
    *out = calloc(3 * p->n + 1, sizeof **out);
    if (!*out)
        return err_set(e, ERR_NOMEM, "cannot allocate the output list");
    size_t k = 0;
    for (size_t i = 0; i < p->n; i++) {
        struct plan_item *it = &p->items[i];
        const struct norm_tensor *t = it->nt;
        const struct qformat *f = qformat_of(it->mode);
        for (int part = 0; part < (it->quantized_out ? f->parts : 1); part++) {
            struct out_tensor *o = &(*out)[k++];
            o->item = it;
            o->part = (enum out_part)part;
            o->rank = t->rank;
            memcpy(o->shape, t->shape, sizeof o->shape);
            if (!it->quantized_out) {
                snprintf(o->name, sizeof o->name, "%s", t->name);
                o->dtype = it->dtype;
            } else {
                snprintf(o->name, sizeof o->name, "%s.%s", t->module, qpart_names[part]);
                o->shape[t->rank - 1] =
                    qformat_part_cols(f, (enum qpart)part, t->shape[t->rank - 1], it->bits, it->group_size);
                o->dtype = qformat_part_dtype(f, (enum qpart)part, it->dtype);
            }
            if (dtype_nbytes(o->dtype, o->shape, o->rank, &o->nbytes, e) != ERR_OK)
                return err_prefix(e, "%s", o->name);
        }
    }
    *n = k;
    return ERR_OK;
}

/* The source bytes of a tensor, resolved (and bounds-checked) once. */
struct source {
    const struct norm_tensor *t;
    const uint8_t *w, *s, *b;
};

static int source_open(const struct ckpt *ck, const struct norm_tensor *t, struct source *src, struct err *e)
{
    *src = (struct source){.t = t};
    int rc = st_data(&ck->shards[t->w->shard], t->w->t, &src->w, e);
    if (rc == ERR_OK && t->s && (rc = st_data(&ck->shards[t->s->shard], t->s->t, &src->s, e)) == ERR_OK && t->b)
        rc = st_data(&ck->shards[t->b->shard], t->b->t, &src->b, e);
    const struct ckpt_tensor *parts[3] = {t->w, t->s, t->b};
    for (int k = 0; k < 3 && rc == ERR_OK && !t->split; k++) /* a half of a fused tensor reads half of it */
        if (parts[k])
            st_populate(&ck->shards[parts[k]->shard], parts[k]->t);
    return rc;
}

/* Row r of the logical float tensor (split halves of a fused source applied). */
static void source_row_f32(const struct source *src, uint64_t r, float *row)
{
    const struct norm_tensor *t = src->t;
    uint64_t cols = t->shape[t->rank - 1];
    if (!t->q.quantized) {
        uint64_t src_r = r;
        if (t->split) {
            uint64_t M = t->shape[1], ex = r / M, m = r % M;
            src_r = ex * 2 * M + m + (t->split == 2 ? M : 0);
        }
        unsigned esz = dtype_table[t->w->t->dtype].bits / 8;
        quant_to_f32(t->w->t->dtype, src->w + src_r * cols * esz, row, (size_t)cols);
        return;
    }
    const struct qformat *f = qformat_of(t->q.mode);
    uint64_t wb = qformat_part_cols(f, QP_WEIGHT, cols, t->q.bits, t->q.group_size) *
                  dtype_table[qformat_part_dtype(f, QP_WEIGHT, DT_U8)].bits / 8,
             ng = cols / (uint64_t)t->q.group_size;
    enum dtype sdt = t->s ? t->s->t->dtype : DT_U8; /* a ggml type has no scales */
    unsigned ssz = dtype_table[sdt].bits / 8;
    f->dequant(t->q.mode, src->w + r * wb, src->s ? src->s + r * ng * ssz : NULL,
               src->b ? src->b + r * ng * ssz : NULL, sdt, (size_t)cols, t->q.group_size, t->q.bits, row);
}

void plan_stream_free(struct stream_state *st)
{
    free(st->scales);
    free(st->biases);
    *st = (struct stream_state){.threads = st->threads};
}

/* The source pages of a streamed tensor leave the resident set (the whole
 * checkpoint is mapped; conversion must stay near one tensor in memory). */
static void release_sources(const struct ckpt *ck, const struct norm_tensor *t)
{
    const struct ckpt_tensor *src[3] = {t->w, t->s, t->b};
    for (int k = 0; k < 3; k++)
        if (src[k])
            st_release(&ck->shards[src[k]->shard], src[k]->t);
}

/* Rows are quantized in parallel a block at a time and written in row order,
 * so the output does not depend on the thread count. */
#define BLOCK_BYTES ((size_t)16 << 20) /* f32 rows per block: bounds the extra memory */

struct qblock {
    const struct source *src;
    struct plan_item *it;
    struct stream_state *st;
    uint64_t r0;
    size_t cols, ng, ssz, row_bytes;
    size_t src_row_bytes;    /* ACT_TRANSCODE: a row of the source's blocks */
    enum dtype t;            /* the type the MX quantizer rounds in: the source's */
    float *scratch;          /* [workers][2][cols]: the source row, the output row dequantized */
    uint8_t *out;            /* [block][row_bytes] packed codes */
    uint64_t *groups, *exact; /* [block] lattice counts, summed after the block */
    int64_t *bad;            /* [block] the first group an MX quantizer refused, or -1 */
    double *err, *sq;        /* [block] max |dequantized output − source| of the row, Σ of its squares */
};

/* max |a − b| (NaN wins: it makes the sum NaN), and Σ (a − b)² added to *sq;
 * in 8 lanes, which the compiler vectorizes. */
static double max_diff(const float *a, const float *b, size_t n, double *sq)
{
    double m[8] = {0}, s[8] = {0}, mm = 0.0, ss = 0.0;
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++) {
            double d = fabs((double)a[i + l] - (double)b[i + l]);
            m[l] = d > m[l] ? d : m[l];
            s[l] += d * d;
        }
    for (; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        m[0] = d > m[0] ? d : m[0];
        s[0] += d * d;
    }
    for (int l = 0; l < 8; l++) {
        mm = m[l] > mm ? m[l] : mm;
        ss += s[l];
    }
    *sq += ss;
    return ss != ss ? ss : mm;
}

static void quant_task(void *arg, int64_t task, int worker)
{
    struct qblock *b = arg;
    uint64_t r = b->r0 + (uint64_t)task;
    float *row = b->scratch + (size_t)worker * 2 * b->cols, *deq = row + b->cols; /* [cols] each */
    uint32_t *words = (uint32_t *)(void *)(b->out + (size_t)task * b->row_bytes);
    uint8_t *sc = b->st->scales + r * b->ng * b->ssz, *bi = b->st->biases + r * b->ng * b->ssz;
    source_row_f32(b->src, r, row);
    b->groups[task] = b->exact[task] = 0;
    b->bad[task] = -1;
    const struct qformat *f = qformat_of(b->it->mode);
    if (b->it->act == ACT_TRANSCODE) /* the source's blocks, rewritten: the check below finds any value that moved */
        b->bad[task] = ggml_to_affine(qformat_of(b->src->t->q.mode)->ggml, b->src->w + r * b->src_row_bytes, b->cols,
                                      words, sc, bi);
    else if (b->it->lattice)
        f->lattice(row, b->cols, b->it->dtype, words, sc, bi, &b->groups[task], &b->exact[task]);
    else
        b->bad[task] = f->quantize(b->it->mode, b->t, row, b->cols, b->it->group_size, b->it->bits, b->it->dtype,
                                   words, sc, bi);
    f->dequant_fast(b->it->mode, (const uint8_t *)words, sc, bi, b->it->dtype, b->cols, b->it->group_size,
                    b->it->bits, deq);
    b->sq[task] = 0.0;
    b->err[task] = b->bad[task] >= 0 ? 0.0 : max_diff(row, deq, b->cols, &b->sq[task]);
}

static int stream_quantized(const struct source *src, struct plan_item *it, struct stream_state *st, uint64_t rows,
                            uint64_t cols, sink_fn sink, void *ctx, struct err *e)
{
    plan_stream_free(st);
    size_t ng = (size_t)(cols / (uint64_t)it->group_size), ssz = dtype_table[it->dtype].bits / 8;
    size_t row_bytes = quant_row_words((size_t)cols, it->bits) * 4;
    uint64_t block = BLOCK_BYTES / ((size_t)cols * sizeof(float));
    block = block > rows ? rows : block;
    block = block < 1 ? 1 : block; /* >= 1 even for a tensor of 0 rows */
    int workers = pool_workers(st->threads, (int64_t)block);
    st->nbytes = (size_t)rows * ng * ssz;
    st->scales = malloc(st->nbytes ? st->nbytes : 1);
    st->biases = malloc(st->nbytes ? st->nbytes : 1);
    const struct norm_tensor *t = src->t;
    const size_t src_row_bytes = !t->q.quantized ? 0
                                 : (size_t)qformat_part_cols(qformat_of(t->q.mode), QP_WEIGHT, cols, t->q.bits,
                                                             t->q.group_size); /* ggml: U8 blocks */
    struct qblock b = {.src = src, .it = it, .st = st, .cols = (size_t)cols, .ng = ng, .ssz = ssz,
                       .row_bytes = row_bytes, .src_row_bytes = src_row_bytes, .t = source_type(src->t),
                       .scratch = malloc((size_t)workers * 2 * (size_t)cols * sizeof(float)),
                       .err = malloc((size_t)block * sizeof(double)),
                       .sq = malloc((size_t)block * sizeof(double)),
                       .out = malloc((size_t)block * row_bytes),
                       .groups = malloc((size_t)block * sizeof(uint64_t)),
                       .exact = malloc((size_t)block * sizeof(uint64_t)),
                       .bad = malloc((size_t)block * sizeof(int64_t))};
    int rc = ERR_OK;
    if (!st->scales || !st->biases || !b.scratch || !b.out || !b.groups || !b.exact || !b.bad || !b.err || !b.sq)
        rc = err_set(e, ERR_NOMEM, "%s: cannot allocate %llu rows of %llu for quantization", src->t->name,
                     (unsigned long long)block, (unsigned long long)cols);
    for (b.r0 = 0; b.r0 < rows && rc == ERR_OK; b.r0 += block) {
        uint64_t n = rows - b.r0 < block ? rows - b.r0 : block;
        pool_run(workers, (int64_t)n, quant_task, &b);
        for (uint64_t i = 0; i < n && rc == ERR_OK; i++) {
            it->lattice_groups += b.groups[i];
            it->lattice_exact += b.exact[i];
            it->max_err = b.err[i] > it->max_err || b.err[i] != b.err[i] ? b.err[i] : it->max_err;
            it->sq_err += b.sq[i];
            if (b.bad[i] >= 0 && it->act == ACT_TRANSCODE)
                rc = err_set(e, ERR_UNSUPPORTED, "%s: row %llu, group %lld: its bias −16·d does not fit f16; keep the "
                                                 "tensor dense (--keep-dense) or convert to a pack",
                             src->t->name, (unsigned long long)(b.r0 + i), (long long)b.bad[i]);
            else if (b.bad[i] >= 0)
                rc = err_set(e, ERR_UNSUPPORTED,
                             "%s: row %llu, group %lld holds a NaN or inf, or magnitudes outside %s's exponent range: "
                             "MLX's quantizer is undefined there; keep the tensor dense (--keep-dense) or use affine",
                             src->t->name, (unsigned long long)(b.r0 + i), (long long)b.bad[i], qmode_name(it->mode));
        }
        if (rc == ERR_OK && it->act == ACT_TRANSCODE && it->max_err != 0.0) /* never: verified, not assumed */
            rc = err_set(e, ERR_FORMAT, "%s: transcoded to MLX affine, a value moved by %g", src->t->name, it->max_err);
        if (rc == ERR_OK)
            rc = sink(ctx, b.out, (size_t)n * row_bytes, e);
    }
    free(b.scratch);
    free(b.out);
    free(b.groups);
    free(b.exact);
    free(b.bad);
    free(b.err);
    free(b.sq);
    it->measured = rc == ERR_OK;
    return rc;
}

static int stream_float(const struct source *src, struct plan_item *it, uint64_t rows, uint64_t cols,
                        sink_fn sink, void *ctx, struct err *e)
{
    unsigned esz = dtype_table[it->dtype].bits / 8;
    float *row = malloc(2 * (size_t)cols * sizeof *row);   /* [2][cols]: source, output */
    uint8_t *buf = malloc((size_t)cols * esz);             /* [cols] in the output dtype */
    int rc = ERR_OK;
    if (!row || !buf)
        rc = err_set(e, ERR_NOMEM, "%s: cannot allocate a row of %llu", src->t->name, (unsigned long long)cols);
    for (uint64_t r = 0; r < rows && rc == ERR_OK; r++) {
        source_row_f32(src, r, row);
        dtype_from_f32(it->dtype, row, buf, (size_t)cols);
        dtype_to_f32(it->dtype, buf, row + cols, (size_t)cols);
        double d = max_diff(row, row + cols, (size_t)cols, &it->sq_err);
        it->max_err = d > it->max_err || d != d ? d : it->max_err;
        rc = sink(ctx, buf, (size_t)cols * esz, e);
    }
    it->measured = rc == ERR_OK;
    free(row);
    free(buf);
    return rc;
}

int plan_stream(const struct ckpt *ck, struct out_tensor *o, struct stream_state *st, sink_fn sink, void *ctx,
                struct err *e)
{
    struct plan_item *it = o->item;
    const struct norm_tensor *t = it->nt;
    int rc;
    if (it->act == ACT_COPY && !t->split) {
        /* byte copy: the float tensor, or the matching part of the source triplet */
        const struct ckpt_tensor *src = o->part == PART_WEIGHT ? t->w : o->part == PART_SCALES ? t->s : t->b;
        const uint8_t *data;
        if ((rc = st_data(&ck->shards[src->shard], src->t, &data, e)) != ERR_OK)
            return rc;
        rc = sink(ctx, data, (size_t)(src->t->end - src->t->begin), e);
        st_release(&ck->shards[src->shard], src->t);
        return rc;
    }
    if (o->part != PART_WEIGHT) {
        if (!st->scales)
            return err_set(e, ERR_USAGE, "%s: scales/biases streamed before their weight", o->name);
        return sink(ctx, o->part == PART_SCALES ? st->scales : st->biases, st->nbytes, e);
    }
    uint64_t rows = 1, cols = t->shape[t->rank - 1];
    for (int k = 0; k + 1 < t->rank; k++)
        rows *= t->shape[k];
    struct source src;
    if ((rc = source_open(ck, t, &src, e)) != ERR_OK)
        return rc;
    if (it->quantized_out)
        rc = stream_quantized(&src, it, st, rows, cols, sink, ctx, e);
    else
        rc = stream_float(&src, it, rows, cols, sink, ctx, e);
    release_sources(ck, t);
    return rc;
}
