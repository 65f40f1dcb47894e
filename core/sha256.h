/* sha256.h - SHA-256 (FIPS 180-4), for provenance hashes in pack manifests.
 * None of the project's dependencies (json-c, libzip, zlib, OpenBLAS)
 * exports one, so it lives here, tested against the FIPS vectors. */
#ifndef GP_SHA256_H
#define GP_SHA256_H

#include <stddef.h>
#include <stdint.h>

struct sha256 {
    uint32_t h[8];
    uint64_t len;       /* bytes hashed so far */
    uint8_t buf[64];
    size_t used;
};

void sha256_init(struct sha256 *s);
void sha256_update(struct sha256 *s, const void *data, size_t len);
void sha256_final(struct sha256 *s, uint8_t out[32]);

/* Lower-case hex digest of a buffer into hex[65]. */
void sha256_hex(const void *data, size_t len, char hex[65]);

#endif
