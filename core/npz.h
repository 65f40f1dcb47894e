/* npz.h - .npy arrays and .npz archives (INPUTS.md §4), through libzip.
 *
 * npy: "\x93NUMPY", version 1-3, a Python-dict header ('descr',
 * 'fortran_order', 'shape') padded so the data starts at a multiple of 64,
 * then C-order little-endian data. The reader accepts <f4 <f8 <i4 <i8 |u1 and
 * rejects Fortran order, big-endian and object arrays; every count is
 * checked against the member size. npz: a zip of "<key>.npy" members (plus
 * raw members such as meta.json), written stored with a fixed timestamp so
 * identical content gives identical files, committed atomically.
 *
 * Reading trusts nothing the archive says of itself: every member read is
 * checked against its CRC-32 and its declared size (a mismatch is
 * ERR_FORMAT, "corrupt"), and nothing is allocated beyond what the caller
 * says the member may hold: a byte cap for raw members, an element cap for
 * arrays, whose header is read first and whose declared size must be exactly
 * what the header's shape needs. */
#ifndef GP_NPZ_H
#define GP_NPZ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <json-c/json.h>

#include "core/dtype.h"
#include "core/err.h"

#define NPY_MAX_RANK 8
#define NPY_MAX_HEADER 65536

struct npy {
    enum dtype dtype;             /* DT_F32, DT_F64, DT_I32, DT_I64 or DT_U8 */
    int rank;
    uint64_t shape[NPY_MAX_RANK];
    uint64_t count;               /* elements */
    void *data;                   /* malloc'ed, aligned; count elements */
};

/* Parses an .npy image (copies the data). `what` names it in messages. */
int npy_parse(const uint8_t *buf, size_t len, const char *what, struct npy *out, struct err *e);
void npy_free(struct npy *a);

/* Serializes an array (version 1.0 header). *out is malloc'ed. */
int npy_encode(enum dtype dtype, const uint64_t *shape, int rank, const void *data, uint8_t **out, size_t *len,
               struct err *e);

struct npz_member {
    const char *name;             /* "logits.npy", "meta.json", ... */
    const void *data;
    size_t len;
};

int npz_write(const char *path, const struct npz_member *m, size_t n, struct err *e);

/* The logits file of `run --dump-logits` and of a golden: for one prompt
 * tokens.npy int32 [T], logits.npy float32 [T, V]; for B > 1 tokens.npy
 * [B, tmax] (zero-padded), logits.npy [B, tmax, V] (rows as given) and
 * lengths.npy int32 [B]; then meta.json (meta not consumed). */
int npz_write_logits(const char *path, int B, const int32_t *const *tokens, const int64_t *len, int64_t tmax,
                     const float *logits, int64_t V, struct json_object *meta, struct err *e);

#define NPZ_MAX_MEMBERS 4096

/* An archive opened for reading (consistency checked; at most
 * NPZ_MAX_MEMBERS entries). Close it with npz_close. */
struct npz {
    char *path;
    void *za;                     /* zip_t */
    size_t n;                     /* members */
};

int npz_open(struct npz *z, const char *path, struct err *e);
void npz_close(struct npz *z);

/* Name of member i (< z->n); borrowed. */
const char *npz_name(const struct npz *z, size_t i);
bool npz_has(const struct npz *z, const char *name);

/* Member `name`, refused before anything is allocated when it declares more
 * than max_bytes. *buf malloc'ed. ERR_FORMAT if absent or corrupt. */
int npz_get(const struct npz *z, const char *name, size_t max_bytes, uint8_t **buf, size_t *len, struct err *e);

/* Array member `name` of at most max_count elements (checked from its header
 * before the data is allocated). ERR_FORMAT if absent or corrupt. */
int npz_get_array(const struct npz *z, const char *name, uint64_t max_count, struct npy *out, struct err *e);

/* Member i read once, in pieces, CRC and size checked: an .npy member's
 * header (dtype and shape in `array`, no data), any other member's bytes
 * when it holds at most `keep` (NUL-terminated; free data). */
struct npz_scan {
    const char *name;             /* borrowed from the archive */
    uint64_t size;
    bool is_array;
    struct npy array;             /* is_array: data NULL */
    uint8_t *data;                /* raw member of at most `keep` bytes, else NULL */
};
int npz_scan(const struct npz *z, size_t i, size_t keep, struct npz_scan *out, struct err *e);

/* Convenience: open, read one array, close. */
int npz_read_array(const char *path, const char *name, uint64_t max_count, struct npy *out, struct err *e);

#endif
