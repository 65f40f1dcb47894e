/* Fuzz harness: config.json. */
#include "model/config.h"
#include "model/layout.h"
#include "tests/fuzz/fuzz.h"

#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct gp_config c;
    struct err e;
    if (cfg_parse(&c, (const char *)data, size, "fuzz", &e) == ERR_OK) {
        struct layout_entry *le;
        size_t n;
        bool ex;
        if (layout_build(&c, EXPERTS_FUSED, &le, &n, &e) == ERR_OK)
            free(le);
        cfg_quant_lookup(&c.quant, "language_model.model.layers.0.router.proj", &ex);
        cfg_last_full_layer(&c);
    }
    cfg_free(&c);
    return 0;
}
