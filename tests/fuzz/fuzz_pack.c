/* Fuzz harness: a .gpk pack (header, manifest, tensors, CRCs). */
#include <stdlib.h>
#include <string.h>

#include "core/pack.h"
#include "tests/fuzz/fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *copy = malloc(size ? size : 1);
    if (!copy)
        return 0;
    memcpy(copy, data, size);
    struct pack p;
    struct err e;
    if (pack_open_mem(&p, copy, size, "fuzz", &e) == ERR_OK) {
        size_t bad;
        pack_verify(&p, &bad, &e);
        for (size_t i = 0; i < p.n_tensors; i++)
            if (pack_find(&p, p.tensors[i].name) != &p.tensors[i])
                abort();
        pack_close(&p);
    }
    free(copy);
    return 0;
}
