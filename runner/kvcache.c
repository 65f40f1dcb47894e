#include "runner/kvcache.h"

#include <stdlib.h>
#include <string.h>

#include "quant/quant.h"

void kv_fmt_init(struct kv_fmt *f, int64_t heads, int64_t d, int bits, int gs, int64_t qstart)
{
    memset(f, 0, sizeof *f);
    f->heads = heads;
    f->d = d;
    f->bits = bits;
    f->gs = gs;
    f->qstart = qstart;
    int64_t n = heads * d;
    f->fbytes = (size_t)(2 * n) * sizeof(float);
    if (bits)
        f->qbytes = (size_t)(2 * n * bits / 8) + (size_t)(4 * (n / gs)) * sizeof(float);
}

/* Quantized entry layout: [K codes | V codes | K scales | K biases | V scales | V biases]. */
static uint8_t *codes_at(const struct kv_fmt *f, uint8_t *e, int which)
{
    return e + (size_t)which * (size_t)(f->heads * f->d * f->bits / 8);
}

static float *params_at(const struct kv_fmt *f, uint8_t *e, int k)
{
    size_t n = (size_t)(f->heads * f->d), ng = n / (size_t)f->gs;
    return (float *)(void *)(e + 2 * n * (size_t)f->bits / 8) + (size_t)k * ng;
}

/* Float entries are planar: the K rows of all slots, then the V rows
 * ([2, cap, heads·d]), so that attention reads each as one stream. */
static float *float_row(const struct kv_fmt *f, const struct kv_rows *r, int64_t slot, int which)
{
    return (float *)(void *)(r->f + ((size_t)which * (size_t)r->cap + (size_t)slot) * (f->fbytes / 2));
}

void kv_rows_put(const struct kv_fmt *f, struct kv_rows *r, int64_t slot, int64_t pos, const float *k, const float *v)
{
    size_t n = (size_t)(f->heads * f->d);
    if (!kv_fmt_quantized(f, pos)) {
        memcpy(float_row(f, r, slot, 0), k, n * sizeof(float));
        memcpy(float_row(f, r, slot, 1), v, n * sizeof(float));
        return;
    }
    uint8_t *e = r->q + (size_t)slot * f->qbytes; /* heads·d values a row, as affine groups */
    quant_affine_row(k, n, (int)f->gs, f->bits, DT_F32, (uint32_t *)(void *)codes_at(f, e, 0), params_at(f, e, 0),
                     params_at(f, e, 1));
    quant_affine_row(v, n, (int)f->gs, f->bits, DT_F32, (uint32_t *)(void *)codes_at(f, e, 1), params_at(f, e, 2),
                     params_at(f, e, 3));
}

const float *kv_rows_head(const struct kv_fmt *f, const struct kv_rows *r, int64_t slot, int64_t pos, int64_t h,
                          int which, float *buf)
{
    int64_t d = f->d;
    if (!kv_fmt_quantized(f, pos))
        return float_row(f, r, slot, which) + h * d;
    uint8_t *e = r->q + (size_t)slot * f->qbytes;
    int64_t g0 = h * d / f->gs; /* groups never straddle heads: runner_init checks that gs divides d */
    dequant_affine_row(codes_at(f, e, which) + (size_t)(h * d * f->bits / 8), params_at(f, e, 2 * which) + g0,
                       params_at(f, e, 2 * which + 1) + g0, DT_F32, (size_t)d, f->gs, f->bits, buf);
    return buf;
}

void kv_rows_copy(const struct kv_fmt *f, struct kv_rows *dst, int64_t dslot, const struct kv_rows *src,
                  int64_t sslot, int64_t pos)
{
    if (kv_fmt_quantized(f, pos)) {
        memcpy(dst->q + (size_t)dslot * f->qbytes, src->q + (size_t)sslot * f->qbytes, f->qbytes);
        return;
    }
    for (int which = 0; which < 2; which++)
        memcpy(float_row(f, dst, dslot, which), float_row(f, src, sslot, which), f->fbytes / 2);
}

size_t kv_cache_entry_io(struct kv_cache *c, int64_t pos, uint8_t *bytes, bool restore)
{
    const struct kv_fmt *f = &c->fmt;
    const int64_t slot = kv_cache_slot(c, pos);
    if (kv_fmt_quantized(f, pos)) {
        uint8_t *q = c->rows.q + (size_t)slot * f->qbytes;
        if (bytes)
            memcpy(restore ? q : bytes, restore ? bytes : q, f->qbytes);
        return f->qbytes;
    }
    for (int which = 0; bytes && which < 2; which++) {
        uint8_t *x = (uint8_t *)float_row(f, &c->rows, slot, which), *b = bytes + (size_t)which * (f->fbytes / 2);
        memcpy(restore ? x : b, restore ? b : x, f->fbytes / 2);
    }
    return f->fbytes;
}

int kv_rows_alloc(const struct kv_fmt *f, struct kv_rows *r, int64_t cap, struct err *e)
{
    /* float part only when some position can be float: no quantization, or a float prefix */
    bool need_f = f->bits == 0 || f->qstart > 0;
    r->cap = cap;
    if (need_f && !(r->f = malloc((size_t)cap * f->fbytes)))
        return err_set(e, ERR_NOMEM, "cannot allocate a KV cache of %lld entries", (long long)cap);
    if (f->bits && !(r->q = malloc((size_t)cap * f->qbytes)))
        return err_set(e, ERR_NOMEM, "cannot allocate a quantized KV cache of %lld entries", (long long)cap);
    return ERR_OK;
}

void kv_rows_free(struct kv_rows *r)
{
    free(r->f);
    free(r->q);
    memset(r, 0, sizeof *r);
}

int kv_cache_init(struct kv_cache *c, const struct kv_fmt *f, bool ring, int64_t cap, struct err *e)
{
    memset(c, 0, sizeof *c);
    c->fmt = *f;
    c->ring = ring;
    return kv_rows_alloc(f, &c->rows, cap, e);
}

int kv_cache_reserve(const struct kv_cache *c, int64_t npos, struct err *e)
{
    if (c->ring || npos <= c->rows.cap)
        return ERR_OK;
    return err_set(e, ERR_RANGE, "%lld positions are beyond the cache's %lld", (long long)npos, (long long)c->rows.cap);
}

void kv_cache_free(struct kv_cache *c)
{
    kv_rows_free(&c->rows);
}

size_t kv_cache_bytes(const struct kv_cache *c)
{
    return (size_t)c->rows.cap * ((c->rows.f ? c->fmt.fbytes : 0) + (c->rows.q ? c->fmt.qbytes : 0));
}
