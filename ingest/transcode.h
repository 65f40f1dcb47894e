/* transcode.h - what the compressed-tensors and GGUF transcoders share
 * (ingest/source.c): building shards, recording modules and problems,
 * verifying a group's affine form against the source's values, and the
 * MLX quantization block of the rewritten config. Internal to ingest/. */
#ifndef GP_TRANSCODE_H
#define GP_TRANSCODE_H

#include <json-c/json.h>

#include "core/dtype.h"
#include "ingest/source.h"

/* A shard being built: a memory shard owns growing bytes (none with
 * SRC_HEADERS), a view shard points into an existing file map. */
struct tshard {
    struct st_file f;
    size_t cap_t;
    uint8_t *buf;      /* memory shard bytes (the final map) */
    uint64_t len, cap;
    bool data;         /* bytes are written (memory shard, not SRC_HEADERS) */
};

/* Appends a tensor of `dt` and `shape` to a memory shard; *out points at its
 * bytes (NULL without data), valid until the next append. */
int ts_add(struct tshard *s, const char *name, enum dtype dt, int rank, const uint64_t *shape, uint8_t **out,
           struct err *e);

/* Appends a view of bytes [begin, end) of the shard's map. */
int ts_view(struct tshard *s, const char *name, enum dtype dt, int rank, const uint64_t *shape, uint64_t begin,
            uint64_t end, struct err *e);

/* Sorts the shard and moves it into the source's checkpoint. */
int ts_commit(struct source *src, struct tshard *s, const char *name, struct err *e);

__attribute__((format(printf, 2, 3))) void src_problem(struct source *s, const char *fmt, ...);
struct source_module *src_module(struct source *s, const char *name, const char *key, const char *from,
                                 const char *to);

/* A group's affine form (scale sa, bias ba, each read from its stored dtype)
 * against the source's values ss·(u − shift) for every code u of `bits`:
 * folds the largest |difference| into m (exact stays true only for none). */
void verify_group(struct source_module *m, float sa, float ba, int bits, double ss, double shift);

/* The MLX affine group size an exact mapping of a group of `g` uses: the
 * largest of 128, 64, 32 dividing g; 0 if none. */
int affine_group_for(uint64_t g);

/* The `quantization` block of MLX affine modules {path, bits, group}: the most
 * common pair on top, every other module as an explicit override. */
struct qrec {
    char path[200];
    int bits, gs;
};
struct json_object *quant_block(const struct qrec *r, size_t n);

/* Transcoders (ingest/ct.c, ingest/gguf_src.c). ct_open takes the parsed
 * config (its quantization_config block is read, then replaced). */
int ct_open(struct source *s, struct json_object *config, unsigned flags, struct err *e);
int gguf_src_open(struct source *s, unsigned flags, struct err *e);

/* Python's re.match(pattern, name) for the part of Python's regex syntax that
 * compressed-tensors targets use (ingest/ct.c); false for a pattern outside it. */
bool ct_py_match(const char *pattern, const char *name);

#endif
