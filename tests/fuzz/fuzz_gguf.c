/* Fuzz harness: a GGUF file (metadata and tensor data). Every kv and tensor
 * the reader accepts is walked; an inconsistency (a lookup that misses, a
 * pointer outside the image, a size that disagrees with ne and the type)
 * aborts. */
#include <stdlib.h>
#include <string.h>

#include "core/gguf.h"
#include "tests/fuzz/fuzz.h"

/* Bytes per array element of each fixed-size metadata type. */
static const uint64_t elem_size[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};

static void inside(const uint8_t *base, size_t size, const uint8_t *p, uint64_t n)
{
    if (p < base || (size_t)(p - base) > size || n > size - (size_t)(p - base))
        abort();
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
        }
        gguf_close(&g);
    }
    free(copy);
    return 0;
}
