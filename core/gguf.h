/* gguf.h - hostile-input GGUF reader (INPUTS.md §6).
 *
 * Layout (ggml docs/gguf.md): u32 magic "GGUF", u32 version (2 or 3), u64
 * tensor count, u64 metadata count; the metadata key/values; the tensor
 * infos (name, n_dims ≤ 4, ne[] innermost first, ggml type, offset); zero
 * padding to the alignment (general.alignment, default 32); the data. All
 * little-endian; a big-endian file is refused by name.
 *
 * Every count, length and offset is checked against the bytes that remain
 * before anything is allocated for it; metadata arrays (a tokenizer's 262,144
 * strings) are validated in place and never copied. Tensors must have unique
 * names, a known type, ne[0] a multiple of the type's block, an aligned offset
 * and data that fits inside the file without overlapping another tensor. */
#ifndef GP_GGUF_H
#define GP_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/err.h"

#define GGUF_MAX_DIMS 4
#define GGUF_MAX_NAME 64          /* tensor names, bytes (the spec's limit; ggml's reader takes 63) */
#define GGUF_MAX_KEY 65535        /* metadata keys, bytes */
#define GGUF_MAX_TENSORS 1000000
#define GGUF_MAX_KV 1000000
#define GGUF_MAX_DEPTH 8          /* arrays nested in arrays, levels (ggml's reader takes 1) */
#define GGUF_DEFAULT_ALIGNMENT 32

enum gguf_vtype {
    GGUF_U8 = 0, GGUF_I8 = 1, GGUF_U16 = 2, GGUF_I16 = 3, GGUF_U32 = 4, GGUF_I32 = 5, GGUF_F32 = 6,
    GGUF_BOOL = 7, GGUF_STRING = 8, GGUF_ARRAY = 9, GGUF_U64 = 10, GGUF_I64 = 11, GGUF_F64 = 12,
};

/* ggml tensor types gempack names (ids from ggml.h). */
enum ggml_type {
    GGML_F32 = 0, GGML_F16 = 1, GGML_Q4_0 = 2, GGML_Q4_1 = 3, GGML_Q5_0 = 6, GGML_Q5_1 = 7, GGML_Q8_0 = 8,
    GGML_Q8_1 = 9, GGML_Q2_K = 10, GGML_Q3_K = 11, GGML_Q4_K = 12, GGML_Q5_K = 13, GGML_Q6_K = 14,
    GGML_Q8_K = 15, GGML_IQ2_XXS = 16, GGML_IQ2_XS = 17, GGML_IQ3_XXS = 18, GGML_IQ1_S = 19, GGML_IQ4_NL = 20,
    GGML_IQ3_S = 21, GGML_IQ2_S = 22, GGML_IQ4_XS = 23, GGML_IQ1_M = 29, GGML_BF16 = 30, GGML_TQ1_0 = 34,
    GGML_TQ2_0 = 35, GGML_MXFP4 = 39,
};

/* A ggml type's name ("Q4_0"; "type 99" style for unknown ids is the caller's),
 * elements per block and bytes per block (any out pointer may be NULL); false
 * for an id this table lacks. */
bool ggml_type_info(uint32_t type, const char **name, uint32_t *block, uint32_t *block_bytes);

/* A metadata value type's name ("u32", "string"), or "unknown". */
const char *gguf_vtype_name(uint32_t type);

struct gguf_kv {
    const char *key;              /* NUL-terminated copy, owned */
    enum gguf_vtype type;
    /* scalars (type != STRING/ARRAY) */
    union {
        uint64_t u;               /* U8..U64, BOOL (0/1) */
        int64_t i;                /* I8..I64 */
        double f;                 /* F32, F64 */
    } v;
    /* STRING: the bytes in the file (not NUL-terminated), length n */
    const uint8_t *str;
    /* ARRAY: element type, count n, first element in the file */
    enum gguf_vtype elem;
    uint64_t n;
    const uint8_t *arr;
};

struct gguf_tensor {
    const char *name;             /* NUL-terminated copy, owned */
    uint32_t n_dims;
    uint64_t ne[GGUF_MAX_DIMS];   /* ne[0] innermost; 1 beyond n_dims */
    uint32_t type;                /* enum ggml_type */
    uint64_t offset;              /* relative to data_offset */
    uint64_t nbytes;
    const uint8_t *data;          /* into the map */
};

struct gguf_file {
    char *path;
    const uint8_t *map;           /* the whole file (mmap, or the caller's buffer) */
    size_t size;
    bool owns_map;
    uint32_t version;
    uint64_t alignment;
    uint64_t data_offset;         /* start of the data section */
    struct gguf_kv *kv;           /* file order */
    size_t n_kv;
    struct gguf_tensor *tensors;  /* file order */
    size_t n_tensors;
    const struct gguf_kv **kv_by_key;              /* sorted, for lookups */
    const struct gguf_tensor **tensor_by_name;     /* sorted, for lookups */
};

/* Opens and validates `path` (through fio_open_read: regular files only).
 * On failure *g is left closed (gguf_close is still safe). Messages name the
 * file, the key or tensor, the value and the expectation. */
int gguf_open(struct gguf_file *g, const char *path, struct err *e);

/* The same over an in-memory image that outlives *g (tests, fuzzing). */
int gguf_open_mem(struct gguf_file *g, const uint8_t *buf, size_t len, const char *name, struct err *e);

void gguf_close(struct gguf_file *g);

const struct gguf_kv *gguf_find_kv(const struct gguf_file *g, const char *key);
const struct gguf_tensor *gguf_find_tensor(const struct gguf_file *g, const char *name);

/* Typed reads of one metadata value. Each returns ERR_OK, or ERR_CONFIG with
 * a message naming the file and key when the key is missing (unless
 * `optional`: then *found = false and ERR_OK) or has another type; `found`
 * may be NULL. Integers: any integer type whose value fits (negative values
 * refused for u64). Floats: F32 or F64. Strings: copied NUL-terminated into
 * out[cap]; one that does not fit, or holds a NUL byte, is refused. */
int gguf_get_u64(const struct gguf_file *g, const char *key, bool optional, bool *found, uint64_t *out, struct err *e);
int gguf_get_f64(const struct gguf_file *g, const char *key, bool optional, bool *found, double *out, struct err *e);
int gguf_get_str(const struct gguf_file *g, const char *key, bool optional, bool *found, char *out, size_t cap,
                 struct err *e);

/* Element i of an array kv of integers (any integer type) or bools, as an
 * int64; false when kv is not such an array or i is out of range. */
bool gguf_array_int(const struct gguf_kv *kv, uint64_t i, int64_t *out);

#endif
