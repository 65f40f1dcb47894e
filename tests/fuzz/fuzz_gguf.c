/* Fuzz harness: a GGUF file (metadata and tensor data). Every kv and tensor
 * the reader accepts is walked; an inconsistency (a lookup that misses, a
 * pointer outside the image, a size that disagrees with ne and the type)
 * aborts. A tensor of a ggml block type then goes where ingest's native()
 * and the runner take it (source_open has no in-memory entry): its row of
 * the format table, the byte count that row gives, bad_scale over every
 * block and the dequantization of its first rows. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/gguf.h"
#include "quant/format.h"
#include "quant/ggml.h"
#include "tests/fuzz/fuzz.h"

#define MAX_WEIGHTS 4096 /* dequantized per tensor: its first rows, or the first blocks of a longer row */

/* Bytes per array element of each fixed-size metadata type. */
static const uint64_t elem_size[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};

static void inside(const uint8_t *base, size_t size, const uint8_t *p, uint64_t n)
{
    if (p < base || (size_t)(p - base) > size || n > size - (size_t)(p - base))
        abort();
}

/* t (a validated tensor of `block` weights in `bytes` bytes per block)
 * through its ggml row: the format table's row (the one native() looks for),
 * its byte count, the first non-finite scale, the first rows' values. */
static void blocks(const struct gguf_tensor *t, uint32_t block, uint32_t bytes)
{
    struct ggml_qtype q;
    if (!ggml_qtype_find(t->type, &q))
        return; /* F32, F16, BF16 and the types without a dequantization (native() refuses those) */
    if (q.id != t->type || q.block != block || q.bytes != bytes || t->nbytes % bytes)
        abort();
    enum qmode m = QM_COUNT;
    for (int i = 0; i < QM_COUNT; i++)
        m = quant_formats[i].ggml == t->type ? (enum qmode)i : m;
    /* every dequantized ggml type has its row, but Q4_0 and Q8_0 (ingest transcodes them to affine) */
    if ((m == QM_COUNT) != (t->type == GGML_Q4_0 || t->type == GGML_Q8_0))
        abort();
    const struct qformat *f = m == QM_COUNT ? NULL : qformat_of(m);
    uint64_t rows = t->ne[1] * t->ne[2] * t->ne[3], n_blocks = t->nbytes / bytes;
    if (f && (f->default_gs != (int)block ||
              qformat_part_cols(f, QP_WEIGHT, t->ne[0], 8, (int)block) * rows != t->nbytes))
        abort();
    int64_t bad = q.bad_scale(t->data, (size_t)n_blocks);
    if (bad < -1 || bad >= (int64_t)n_blocks)
        abort();
    if (bad >= 0 && (q.bad_scale(t->data, (size_t)bad) != -1 || q.bad_scale(t->data, (size_t)bad + 1) != bad))
        abort(); /* not the first */
    float out[MAX_WEIGHTS], via_row[MAX_WEIGHTS];
    uint64_t row = t->ne[0] < MAX_WEIGHTS ? t->ne[0] : MAX_WEIGHTS / block * block;
    for (uint64_t r = 0, done = 0; row && r < rows && done + row <= MAX_WEIGHTS; r++, done += row) {
        const uint8_t *src = t->data + r * (t->ne[0] / block * bytes);
        q.dequant(src, out, (size_t)row);
        if (f) {
            f->dequant(m, src, NULL, NULL, DT_U8, (size_t)row, (int)block, 8, via_row);
            if (memcmp(out, via_row, (size_t)row * sizeof *out))
                abort();
        }
        /* finite scales give finite weights (MXFP4's largest exponents overflow in ggml too) */
        for (uint64_t k = 0; bad < 0 && t->type != GGML_MXFP4 && k < row; k++)
            if (!isfinite(out[k]))
                abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *copy = malloc(size ? size : 1); /* gguf_open_mem keeps pointers into the image */
    if (!copy)
        return 0;
    memcpy(copy, data, size);
    struct gguf_file g;
    struct err e;
    if (gguf_open_mem(&g, copy, size, "fuzz", &e) == ERR_OK) {
        if (g.alignment < 8 || (g.alignment & (g.alignment - 1)) || g.data_offset % g.alignment)
            abort();
        for (size_t i = 0; i < g.n_kv; i++) {
            const struct gguf_kv *kv = &g.kv[i];
            uint64_t u;
            double d;
            char s[64];
            int64_t x;
            if (gguf_find_kv(&g, kv->key) != kv)
                abort();
            if (kv->type == GGUF_STRING)
                inside(copy, size, kv->str, kv->n);
            if (kv->type == GGUF_ARRAY) {
                uint64_t bytes = 0;
                if (kv->elem != GGUF_STRING && kv->elem != GGUF_ARRAY &&
                    __builtin_mul_overflow(kv->n, elem_size[kv->elem], &bytes))
                    abort();
                inside(copy, size, kv->arr, bytes);
                for (uint64_t k = 0; k < kv->n; k++)
                    if (gguf_array_int(kv, k, &x) && kv->elem == GGUF_BOOL && (x < 0 || x > 1))
                        abort();
                if (gguf_array_int(kv, kv->n, &x))
                    abort(); /* past the end */
            }
            if (kv->type == GGUF_BOOL && kv->v.u > 1)
                abort();
            gguf_get_u64(&g, kv->key, false, NULL, &u, &e);
            gguf_get_f64(&g, kv->key, false, NULL, &d, &e);
            gguf_get_str(&g, kv->key, false, NULL, s, sizeof s, &e);
        }
        for (size_t i = 0; i < g.n_tensors; i++) {
            const struct gguf_tensor *t = &g.tensors[i];
            uint32_t block, bytes;
            if (gguf_find_tensor(&g, t->name) != t || !ggml_type_info(t->type, NULL, &block, &bytes))
                abort();
            if (t->n_dims < 1 || t->n_dims > GGUF_MAX_DIMS || t->ne[0] % block || t->offset % g.alignment)
                abort();
            uint64_t nb = t->ne[0] / block * bytes;
            for (uint32_t j = 1; j < GGUF_MAX_DIMS; j++)
                nb *= t->ne[j]; /* cannot wrap: the reader checked */
            if (nb != t->nbytes || t->data != copy + g.data_offset + t->offset)
                abort();
            inside(copy, size, t->data, t->nbytes);
            blocks(t, block, bytes);
        }
        gguf_close(&g);
    }
    free(copy);
    return 0;
}
