/* ingest.h - any input opened as a Gemma 4 text model: what `convert` and
 * `run` start from. A checkpoint (directory or GGUF file) is checked on its
 * opened source (ingest/check.h: refused, with its first problem, unless
 * loadable) and normalized into the canonical list (ingest/normalize.h); a
 * pack (run only) is validated by core/pack.c. Either way its tensors are
 * one view: canonical name → bytes in place, dtype, shape, quantization. */
#ifndef GP_INGEST_H
#define GP_INGEST_H

#include <stddef.h>

#include "core/checkpoint.h"
#include "model/config.h"
#include "core/err.h"
#include "ingest/normalize.h"
#include "ingest/source.h"

/* A module's quantization (bits 0: not quantized). */
struct ingest_quant {
    enum qmode mode;
    int bits, gs;
};

/* A stored tensor: MODULE.weight (codes, with the module's quantization),
 * MODULE.scales, MODULE.biases, or a float tensor in its logical shape. */
struct ingest_part {
    char *name;
    enum dtype dtype;
    int rank;
    uint64_t shape[ST_MAX_RANK];
    const uint8_t *data;
    size_t row_stride, expert_stride; /* 0: contiguous (else a half of a fused [E, 2M, H] experts tensor) */
    struct ingest_quant q;
    size_t order;                     /* its place in the source (a pack: file order) */
};

struct ingested {
    struct source source;      /* the input: shards mapped, CT / GGUF transcoded, or a pack */
    struct normalized norm;    /* a checkpoint's canonical tensors */
    struct ingest_part *parts; /* the view, sorted by name */
    size_t n_parts;
};

/* Opens path (source_open's flags) into *in and parses its config into *cfg
 * (the caller's, freed with cfg_free). *in must be ingest_close'd in every case. */
int ingest_open(struct ingested *in, struct gp_config *cfg, const char *path, unsigned flags, struct err *e);
void ingest_close(struct ingested *in);

const struct ingest_part *ingest_find(const struct ingested *in, const char *name);

/* SHA-256 hex of a pack's manifest (it holds every tensor's CRC), or of a
 * checkpoint's safetensors headers, with `weights` and the CRC-32 of each
 * shard's data (reads every byte once). */
void ingest_fingerprint(const struct ingested *in, bool weights, char out[65]);

#endif
