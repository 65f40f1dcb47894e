/* crc.h - CRC-32/IEEE (zlib's crc32) over buffers of any length.
 * zlib takes a 32-bit length; this feeds it in pieces. */
#ifndef GP_CRC_H
#define GP_CRC_H

#include <stdint.h>
#include <zlib.h>

/* crc32_update(0, data, len) is the CRC of data; pass the result back in to continue. */
static inline uint32_t crc32_update(uint32_t crc, const void *data, uint64_t len)
{
    const uint8_t *p = data;
    while (len) {
        uInt take = len > (1u << 30) ? (1u << 30) : (uInt)len;
        crc = (uint32_t)crc32(crc, p, take);
        p += take;
        len -= take;
    }
    return crc;
}

#endif
