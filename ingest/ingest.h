/* ingest.h - a checkpoint (directory or GGUF file) opened as a Gemma 4 text model: what
 * both `convert` and `run DIR` start from. The directory is checked first
 * (ingest/check.h: refused, with its first problem, unless loadable), then
 * its config parsed, its shards mapped and its tensors normalized into the
 * canonical list (ingest/normalize.h). */
#ifndef GP_INGEST_H
#define GP_INGEST_H

#include <stddef.h>

#include "core/checkpoint.h"
#include "model/config.h"
#include "core/err.h"
#include "ingest/normalize.h"
#include "ingest/source.h"

struct ingested {
    struct source source;      /* the checkpoint: shards mapped, CT / GGUF transcoded */
    struct normalized norm;    /* the canonical tensors */
};

/* Opens dir into *in and parses its config into *cfg (the caller's, freed
 * with cfg_free). *in must be ingest_close'd in every case. */
int ingest_open(struct ingested *in, struct gp_config *cfg, const char *dir, struct err *e);
void ingest_close(struct ingested *in);

#endif
