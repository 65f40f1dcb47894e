/* pack.h - the .gpk pack, version 1.0 (byte tables in docs/FORMAT.md).
 *
 *   [0, 64)                          fixed header (below)
 *   [64, data_offset)                zeros; data_offset = alignment
 *   [data_offset, +data_size)        tensor bytes, then verbatim files, each at a multiple of the
 *                                    alignment, gaps zero
 *   [manifest_offset, +manifest_size) UTF-8 JSON manifest; manifest_offset = data_offset + data_size
 *   EOF == manifest_offset + manifest_size
 *
 * Fixed header, little-endian:
 *   0  u8[8] magic "\x89GPK\r\n\x1a\n"    8  u16 version_major (1)   10 u16 version_minor (0)
 *   12 u32 alignment (2^k, 64..65536)     16 u64 file_size           24 u64 data_offset
 *   32 u64 data_size                      40 u64 manifest_offset     48 u64 manifest_size
 *   56 u32 manifest_crc32                 60 u32 header_crc32 (CRC-32 of bytes [0, 60))
 *
 * The writer streams tensors in order, computing CRC-32s as it goes, appends
 * the manifest, writes the header last, then fsyncs and renames a temporary
 * file into place. The reader validates every header field, the manifest CRC,
 * and every manifest record before use; tensor CRCs are checked by
 * pack_verify, the "quantized" entries by quant_check_pack (quant/format.h). */
#ifndef GP_PACK_H
#define GP_PACK_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/dtype.h"
#include "core/err.h"
#include "core/fileio.h"
#include "core/qmode.h"

#define PACK_MAGIC "\x89GPK\r\n\x1a\n"
#define PACK_HEADER_SIZE 64
#define PACK_VERSION_MAJOR 1
#define PACK_VERSION_MINOR 0
#define PACK_MAX_MANIFEST (64u << 20)
#define PACK_MAX_RANK 8
#define PACK_MAX_NAME 512
#define PACK_MAX_TENSORS 1000000
#define PACK_MAX_FILE_NAME 255
#define PACK_MAX_FILES 256

struct pack_tensor {
    char *name;                     /* owned */
    enum dtype dtype;
    int rank;
    uint64_t shape[PACK_MAX_RANK];
    uint64_t offset;                /* relative to data_offset */
    uint64_t nbytes;
    uint32_t crc32;
    enum qmode qmode;               /* a quantized module's weight: its "quantized" entry (quant_check_pack) */
    int qbits, qgroup;
};

/* A verbatim file stored beside the tensors (a tokenizer.json, a chat
 * template): manifest key "files", required feature "files". */
struct pack_file {
    char *name;                     /* owned; a plain file name: 1..255 bytes, no '/' */
    uint64_t offset, nbytes;        /* offset relative to data_offset */
    uint32_t crc32;
};

/* ---- writer ---- */

struct pack_writer {
    struct fio_out out;
    uint32_t align;
    uint64_t pos;                   /* bytes written after data_offset */
    struct pack_tensor *t;
    size_t n, cap;
    bool open_tensor;               /* between begin_tensor and end_tensor */
    uint64_t written;               /* bytes of the open tensor so far */
    uint32_t crc;
    struct pack_file *f;            /* files, after the tensors */
    char (*f_sha)[65];              /* their SHA-256, hex */
    size_t n_files;
};

int pack_writer_open(struct pack_writer *w, const char *path, uint32_t alignment, struct err *e);

/* Starts a tensor at the next aligned offset. */
int pack_writer_begin(struct pack_writer *w, const char *name, enum dtype dtype, int rank, const uint64_t *shape,
                      struct err *e);
int pack_writer_write(struct pack_writer *w, const void *data, size_t len, struct err *e);
/* Checks the byte count against dtype x shape. */
int pack_writer_end(struct pack_writer *w, struct err *e);

/* Stores data[0, len) as the file `name` (a plain name, 1..255 bytes, no
 * '/', unique) at the next aligned offset. After the last tensor: no tensor
 * may begin once a file is added. */
int pack_writer_add_file(struct pack_writer *w, const char *name, const void *data, size_t len, struct err *e);

/* Appends the manifest: `fields` (an object; consumed) gets "format",
 * "version", "required_features" (extra_features plus one "dtype:X" per dtype
 * used, and "files" when there are files), "tensors" and "files" added, then the header is written and the file
 * committed. */
int pack_writer_finish(struct pack_writer *w, struct json_object *fields, const char *const *extra_features,
                       size_t n_extra, struct err *e);

/* Removes the temporary file; safe on a finished or zeroed writer. */
void pack_writer_abort(struct pack_writer *w);

/* Rewrites the pack at path with manifest key `key` set to value (consumed):
 * the data (tensors and files) copied as it is, a new manifest and header,
 * committed atomically over the old file (convert --eval's quality card). */
int pack_set_field(const char *path, const char *key, struct json_object *value, struct err *e);

/* ---- reader ---- */

struct pack {
    char *path;
    const uint8_t *map;             /* whole file, PROT_READ */
    size_t size;
    bool mapped;                    /* map owned (munmap on close) */
    uint16_t version_minor;
    uint32_t align;
    uint64_t data_offset, data_size, manifest_offset, manifest_size;
    struct json_object *manifest;   /* owned reference */
    struct pack_tensor *tensors;    /* in file order */
    size_t n_tensors;
    size_t *by_name;                /* indices sorted by name */
    struct pack_file *files;        /* in file order, after the tensors */
    size_t n_files;
};

/* Maps and validates a pack (everything but tensor CRCs). */
int pack_open(struct pack *p, const char *path, struct err *e);

/* Validates an in-memory image (tests, fuzzing); buf must outlive p. */
int pack_open_mem(struct pack *p, const uint8_t *buf, size_t len, const char *name, struct err *e);

void pack_close(struct pack *p);

const struct pack_tensor *pack_find(const struct pack *p, const char *name);

static inline const uint8_t *pack_data(const struct pack *p, const struct pack_tensor *t)
{
    return p->map + p->data_offset + t->offset;
}

/* The stored file `name`, or NULL. */
const struct pack_file *pack_find_file(const struct pack *p, const char *name);

static inline const uint8_t *pack_file_data(const struct pack *p, const struct pack_file *f)
{
    return p->map + p->data_offset + f->offset;
}

/* Recomputes every tensor and file CRC (and each file's SHA-256) and checks that all padding is zero, so a
 * flipped byte anywhere in the file is detected (header and manifest are
 * covered by their CRCs in pack_open). Returns ERR_OK when all match;
 * otherwise ERR_FORMAT naming the first bad tensor, file or offset, with *n_bad
 * the number of failed checks. */
int pack_verify(const struct pack *p, size_t *n_bad, struct err *e);

/* Features this reader implements ("dtype:BF16", "quant:affine", ...). */
bool pack_feature_known(const char *feature);

#endif
