/* checkpoint.h - a checkpoint directory: one model.safetensors, or shards
 * listed by model.safetensors.index.json (INPUTS.md §5).
 *
 * With an index: every shard name is a plain file name, every shard exists
 * and is fully valid, every weight_map entry is in its shard, every shard
 * tensor is in the weight_map, and no tensor is in two shards. total_size is
 * advisory (a mismatch is a warning). */
#ifndef GP_CHECKPOINT_H
#define GP_CHECKPOINT_H

#include <stdbool.h>
#include <stddef.h>

#include "core/err.h"
#include "core/safetensors.h"

struct ckpt_tensor {
    const char *name;              /* borrowed from the shard */
    size_t shard;                  /* index into ckpt.shards */
    const struct st_tensor *t;     /* borrowed */
};

struct ckpt {
    char *dir;
    bool indexed;                  /* sharded through an index */
    struct st_file *shards;
    char **shard_names;            /* file names as given in the index (or "model.safetensors") */
    size_t n_shards;
    size_t n_files;                /* shards [0, n_files) are the directory's files; the rest were
                                    * added by ckpt_add_shard (views and transcoded tensors) */
    struct ckpt_tensor *tensors;   /* sorted by name */
    size_t n_tensors;
    char **warnings;               /* advisory findings, one sentence each */
    size_t n_warnings;
    uint64_t bytes_read;           /* header bytes read over all shards + index */
};

/* st_flags as for st_open (ST_HEADER_ONLY, ST_ALLOW_TRUNCATED). */
int ckpt_open(struct ckpt *c, const char *dir, unsigned st_flags, struct err *e);
void ckpt_close(struct ckpt *c);

const struct ckpt_tensor *ckpt_find(const struct ckpt *c, const char *name);

/* An empty checkpoint named `dir` (a source with no safetensors files). */
int ckpt_init_empty(struct ckpt *c, const char *dir, struct err *e);

/* Adds a shard built in memory (ownership of *f and its tensors moves to c;
 * its map is not unmapped: map_len 0). Call ckpt_reindex afterwards. */
int ckpt_add_shard(struct ckpt *c, struct st_file *f, const char *name, struct err *e);

/* Rebuilds the sorted tensor list from every shard, leaving out the file
 * shards' tensors for which drop(name, ctx) is true; a name in two shards is
 * an error. */
int ckpt_reindex(struct ckpt *c, bool (*drop)(const char *name, void *ctx), void *ctx, struct err *e);

#endif
