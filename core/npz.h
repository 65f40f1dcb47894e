/* npz.h - .npy arrays and .npz archives (formats.md §5.4), through libzip.
 *
 * npy: "\x93NUMPY", version 1-3, a Python-dict header ('descr',
 * 'fortran_order', 'shape') padded so the data starts at a multiple of 64,
 * then C-order little-endian data. The reader accepts <f4 <f8 <i4 <i8 |u1 and
 * rejects Fortran order, big-endian and object arrays; every count is
 * checked against the member size. npz: a zip of "<key>.npy" members (plus
 * raw members such as meta.json), written stored with a fixed timestamp so
 * identical content gives identical files, committed atomically. */
#ifndef GP_NPZ_H
#define GP_NPZ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/dtype.h"
#include "core/err.h"

#define NPY_MAX_RANK 8
#define NPZ_MAX_MEMBER (4ull << 30)

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

/* Declared (uncompressed) size of member `name`; ERR_FORMAT if absent. */
int npz_size(const struct npz *z, const char *name, uint64_t *size, struct err *e);

/* Member `name` (CRC checked by libzip). ERR_FORMAT if absent. *buf malloc'ed. */
int npz_get(const struct npz *z, const char *name, uint8_t **buf, size_t *len, struct err *e);

/* npz_get + npy_parse. */
int npz_get_array(const struct npz *z, const char *name, struct npy *out, struct err *e);

/* Convenience: open, read one array, close. */
int npz_read_array(const char *path, const char *name, struct npy *out, struct err *e);

#endif
