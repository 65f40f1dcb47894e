/* Fuzz harness: a safetensors file (header and data). */
#include <stdlib.h>
#include <string.h>

#include "core/safetensors.h"
#include "tests/fuzz/fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *copy = malloc(size ? size : 1); /* st_open_mem keeps pointers into the image */
    if (!copy)
        return 0;
    memcpy(copy, data, size);
    struct st_file f;
    struct err e;
    if (st_open_mem(&f, copy, size, "fuzz", &e) == ERR_OK) {
        for (size_t i = 0; i < f.n_tensors; i++) {
            const struct st_tensor *t = &f.tensors[i];
            const uint8_t *p;
            float v[8];
            if (st_find(&f, t->name) != t || st_data(&f, t, &p, &e) != ERR_OK)
                abort(); /* a listed tensor must be found and readable */
            size_t n = (size_t)(t->end - t->begin) / (dtype_table[t->dtype].bits / 8 ? dtype_table[t->dtype].bits / 8 : 1);
            if (dtype_is_weight_float(t->dtype))
                dtype_to_f32(t->dtype, p, v, n < 8 ? n : 8);
        }
        st_meta_get(&f, "format");
        st_close(&f);
    }
    free(copy);
    return 0;
}
