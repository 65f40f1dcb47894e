/* Fuzz harness: a .gpk pack (header, manifest, tensors, stored files, CRCs,
 * the "quantized" entries).
 * Each input is opened twice: as given (the header and manifest CRCs turn
 * away almost every mutation there), then with the header's file size, the
 * manifest size and both CRCs recomputed, so mutations of the manifest and
 * header fields reach the parser and the validation behind the checksums. */
#include <stdlib.h>
#include <string.h>

#include "core/bytes.h"
#include "core/crc.h"
#include "core/pack.h"
#include "quant/format.h"
#include "tests/fuzz/fuzz.h"

static void open_and_walk(uint8_t *buf, size_t size)
{
    struct pack p;
    struct err e;
    if (pack_open_mem(&p, buf, size, "fuzz", &e) != ERR_OK)
        return;
    quant_check_pack(&p, &e);
    size_t bad;
    pack_verify(&p, &bad, &e);
    for (size_t i = 0; i < p.n_tensors; i++)
        if (pack_find(&p, p.tensors[i].name) != &p.tensors[i])
            abort();
    for (size_t i = 0; i < p.n_files; i++)
        if (pack_find_file(&p, p.files[i].name) != &p.files[i]) /* (pack_verify read every byte) */
            abort();
    pack_close(&p);
}

/* Makes the header agree with the buffer: file size, manifest size (the
 * manifest runs to the end), manifest CRC and header CRC. */
static void repair(uint8_t *h, size_t size)
{
    wr_u64le(h + 16, size);
    uint64_t moff = rd_u64le(h + 40);
    if (moff <= size) {
        wr_u64le(h + 48, size - moff);
        wr_u32le(h + 56, crc32_update(0, h + moff, (size_t)(size - moff)));
    }
    wr_u32le(h + 60, crc32_update(0, h, 60));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *copy = malloc(size ? size : 1);
    if (!copy)
        return 0;
    memcpy(copy, data, size);
    open_and_walk(copy, size);
    if (size >= PACK_HEADER_SIZE) {
        memcpy(copy, data, size);
        repair(copy, size);
        open_and_walk(copy, size);
    }
    free(copy);
    return 0;
}
