/* Fuzz harness: .npy arrays, and .npz archives through libzip (the input is
 * tried as both). */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "core/npz.h"
#include "golden/golden.h"
#include "tests/fuzz/fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct npy a;
    struct err e;
    if (npy_parse(data, size, "fuzz", &a, &e) == ERR_OK)
        npy_free(&a);
    char path[64];
    snprintf(path, sizeof path, "/tmp/gempack-fuzz-npz-%ld.npz", (long)getpid());
    FILE *f = fopen(path, "wb");
    if (!f)
        return 0;
    fwrite(data, 1, size, f);
    fclose(f);
    struct npz z;
    if (npz_open(&z, path, &e) == ERR_OK) {
        for (size_t i = 0; i < z.n; i++) {
            struct npy m;
            struct npz_scan sc;
            if (npz_get_array(&z, npz_name(&z, i), 1u << 20, &m, &e) == ERR_OK)
                npy_free(&m);
            if (npz_scan(&z, i, 1u << 20, &sc, &e) == ERR_OK)
                free(sc.data);
        }
        npz_close(&z);
    }
    struct golden g;
    if (golden_read(path, 512, &g, &e) == ERR_OK)
        golden_free(&g);
    unlink(path);
    return 0;
}
