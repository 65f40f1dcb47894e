/* safetensors.h - hostile-input safetensors reader and streaming writer.
 *
 * Layout (INPUTS.md §1.1): u64 LE header length N, N bytes of UTF-8 JSON,
 * then the data buffer; every data_offsets pair is relative to byte 8+N.
 * The reader applies every rule of the reference implementation
 * (INPUTS.md §1.4): header size cap, UTF-8, strict JSON, closed dtype set,
 * offsets contiguous from 0 when sorted (no holes, overlaps or aliases),
 * size == numel x dtype size, and the file ending exactly at the last tensor.
 * Data pointers may be unaligned (MLX writes no padding): read them through
 * dtype_to_f32 / memcpy, never by casting. */
#ifndef GP_SAFETENSORS_H
#define GP_SAFETENSORS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/dtype.h"
#include "core/err.h"
#include "core/fileio.h"

#define ST_MAX_RANK 8
#define ST_MAX_HEADER 100000000ull /* as the reference: larger is HeaderTooLarge */
#define ST_MAX_TENSORS 100000 /* real checkpoints: a few thousand per file */
#define ST_MAX_NAME 1024

struct st_tensor {
    char *name;                   /* owned, NUL-terminated */
    enum dtype dtype;
    int rank;
    uint64_t shape[ST_MAX_RANK];
    uint64_t begin, end;          /* [begin, end) relative to the data buffer */
};

struct st_meta {
    char *key, *value;            /* owned */
};

enum st_flags {
    ST_HEADER_ONLY = 1,     /* read the header with pread; map nothing */
    ST_ALLOW_TRUNCATED = 2, /* also accept a file that ends right after its header */
};

struct st_file {
    char *path;                   /* owned copy, for messages */
    uint64_t file_size;
    uint64_t header_len;          /* N */
    uint64_t data_start;          /* 8 + N */
    bool truncated;               /* file ends after the header (ST_ALLOW_TRUNCATED) */
    bool metadata_null;           /* "__metadata__": null */
    struct st_tensor *tensors;    /* sorted by name */
    size_t n_tensors;
    struct st_meta *meta;
    size_t n_meta;
    const uint8_t *map;           /* whole file, PROT_READ; NULL with ST_HEADER_ONLY */
    size_t map_len;
    uint64_t bytes_read;          /* bytes read from disk to parse (8 + N) */
};

/* Opens and validates `path`. On failure *f is left closed (st_close is
 * still safe). The message names the file, the tensor or field, the value and
 * the expectation. */
int st_open(struct st_file *f, const char *path, unsigned flags, struct err *e);

/* Parses an in-memory safetensors image (tests, fuzzing). `buf` must outlive
 * *f (f->map points into it). `name` is used in messages. */
int st_open_mem(struct st_file *f, const uint8_t *buf, size_t len, const char *name, struct err *e);

/* Releases everything; accepts a zeroed or already closed struct. */
void st_close(struct st_file *f);

/* Tensor by exact name, or NULL. */
const struct st_tensor *st_find(const struct st_file *f, const char *name);

/* Value of a __metadata__ key, or NULL. */
const char *st_meta_get(const struct st_file *f, const char *key);

/* Pointer to the tensor's bytes (borrowed from the map; may be unaligned).
 * Fails for header-only or truncated files. */
int st_data(const struct st_file *f, const struct st_tensor *t, const uint8_t **out, struct err *e);

/* Drops the tensor's pages from this process (madvise DONTNEED on the
 * read-only mapping; they are read again from the file if touched), so a
 * pass that streams a large checkpoint keeps its resident memory bounded. */
void st_release(const struct st_file *f, const struct st_tensor *t);

/* Maps the pages of tensor t's data in one go (MADV_POPULATE_READ) before it
 * is streamed: one call instead of a page fault per page (convert of a bf16
 * E2B checkpoint: 10.1-11.0 s -> 8.6-8.8 s on the project VM). A hint: a
 * kernel without it, or a failure, changes nothing but the speed. */
void st_populate(const struct st_file *f, const struct st_tensor *t);

/* Streaming writer: the header is fixed up front, then tensor bytes are
 * appended in the declared order. Output goes to "<path>.tmp.<pid>", is
 * fsync'ed and renamed over `path` by st_writer_finish; st_writer_abort
 * removes it. Header JSON is padded with spaces to a multiple of 8. */
struct st_writer_tensor {
    const char *name;
    enum dtype dtype;
    int rank;
    uint64_t shape[ST_MAX_RANK];
};

struct st_writer {
    struct fio_out out;
    uint64_t *sizes;              /* byte size of each declared tensor */
    size_t n, cur;                /* tensors declared, tensor being written */
    uint64_t cur_written;         /* bytes of tensor `cur` written so far */
    bool header_only;             /* stop after the header (ST fixtures) */
};

/* Declares all tensors (written in this order) and writes the header.
 * metadata: n_meta key/value pairs (may be 0). header_only: write only the
 * 8+N header bytes (a "truncated" shard, as fetched by a range request). */
int st_writer_open(struct st_writer *w, const char *path, const struct st_writer_tensor *t, size_t n,
                   const char *const *meta_kv, size_t n_meta, bool header_only, struct err *e);

/* Appends bytes to the current tensor(s); may span tensor boundaries.
 * In header_only mode nothing need be written (bytes given are ignored). */
int st_writer_write(struct st_writer *w, const void *data, size_t len, struct err *e);

/* Checks every declared byte was written, fsyncs, renames into place. */
int st_writer_finish(struct st_writer *w, struct err *e);

/* Removes the temporary file and frees; safe after finish or on a zeroed struct. */
void st_writer_abort(struct st_writer *w);

#endif
