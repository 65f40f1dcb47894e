/* source.h - an input as gempack reads it (INPUTS.md §7): a directory
 * of safetensors in any HF or MLX layout, a compressed-tensors
 * "pack-quantized" directory, a GGUF file, or (for run) a .gpk pack.
 *
 * The last two are transcoded into gempack's own form, an MLX affine
 * checkpoint: codes are shared with the file where their bits already agree
 * (compressed-tensors) or repacked (GGUF Q4_0 / Q8_0), scales and biases are
 * computed, and each module's mapping is verified value by value: `exact`
 * means every code of every group dequantizes to the source's value bit for
 * bit. The config is read (or, for GGUF, written from the metadata) and given
 * an MLX `quantization` block, so check, normalization, convert and run see
 * one kind of checkpoint. */
#ifndef GP_SOURCE_H
#define GP_SOURCE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/checkpoint.h"
#include "core/err.h"
#include "core/gguf.h"
#include "core/pack.h"

/* What a path is, by stat and a regular file's magic: the one place an
 * input's kind is decided (source_open, inspect). */
enum input_kind { IN_MISSING, IN_DIR, IN_GGUF, IN_PACK, IN_NPZ, IN_OTHER };
enum input_kind input_kind(const char *path);
/* *out = DIR/NAME.gguf (freed by the caller) when the directory dir has no
 * config.json (not even a broken link) and NAME.gguf is its one regular file,
 * or link to one, named *.gguf (as `fixture --format gguf-*` writes): such a
 * directory is that GGUF file. Else *out = NULL; two such files are an
 * error naming them. */
int input_lone_gguf(const char *dir, char **out, struct err *e);

enum source_kind { SRC_SAFETENSORS, SRC_CT, SRC_GGUF, SRC_PACK };

enum source_flags {
    SRC_HEADERS = 1,   /* shapes and config only: nothing is transcoded or verified */
    SRC_TRUNCATED = 2, /* with SRC_HEADERS: safetensors shards may hold only their headers */
    SRC_PACK_ANY = 4,  /* a path that is neither a directory nor a GGUF file is opened as a pack */
};

/* How one quantized module of a CT or GGUF source became MLX affine. */
struct source_module {
    char name[200];    /* the source's module or tensor name */
    char key[240];     /* the .weight tensor it became (a canonical ckpt key) */
    char from[48];     /* "int4 group 32 symmetric", "Q4_0" */
    char to[64];       /* "affine 4-bit group 32, F16 scales" */
    bool verified;     /* its values were compared (not with SRC_HEADERS) */
    bool exact;        /* ... and every one is bit for bit the source's */
    double max_abs_err;
};

struct source {
    enum source_kind kind;
    char *path;                /* the directory, the .gguf or the .gpk file */
    char *config_name;         /* DIR/config.json, FILE.gguf for metadata, "FILE.gpk: manifest model.config" */
    char *config_text;         /* config.json as gempack reads it (transcoded sources: rewritten) */
    size_t config_len;
    struct ckpt ck;            /* every tensor, in the MLX affine form (not a pack's) */
    struct gguf_file gguf;     /* GGUF: the file (owns its map) */
    struct pack pack;          /* a pack: validated, every module's quantization parsed (core/pack.h) */
    bool kv_skip_last_full;    /* a pack's recorded cache choice (manifest runtime), else true */
    uint8_t *mem;              /* transcoded tensors' bytes (the ckpt's memory shard) */
    struct source_module *mods;
    size_t n_mods;
    char **problems;           /* why a CT or GGUF source does not map (check lists them) */
    size_t n_problems;
};

int source_open(struct source *s, const char *path, unsigned flags, struct err *e);
void source_close(struct source *s);

const char *source_kind_name(enum source_kind k); /* "safetensors", "compressed-tensors", "gguf" */

/* The record of the module whose weight is the checkpoint key `key`, or NULL. */
const struct source_module *source_find_module(const struct source *s, const char *key);

#endif
