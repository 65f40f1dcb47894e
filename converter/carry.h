/* carry.h - the files a converted model carries beside its weights: the
 * tokenizer and chat template (docs/CLI.md (convert)).
 *
 * From a checkpoint directory: tokenizer.json (stored only when gempack's
 * tokenizer loads it), tokenizer_config.json (only when it is JSON) and
 * chat_template.jinja, each verbatim and bounded in size. From a GGUF: a
 * tokenizer.json written from its tokenizer.ggml.* metadata (tok_write_json)
 * and chat_template.jinja from tokenizer.chat_template. A file that does
 * not qualify is left out with a note: the weights convert all the same. */
#ifndef GP_CARRY_H
#define GP_CARRY_H

#include <stddef.h>

#include "core/err.h"
#include "ingest/source.h"

#define CARRY_MAX_TOKENIZER_JSON (128u << 20) /* tokenizer.json (Gemma's: 33 MB) */
#define CARRY_MAX_FILE (16u << 20)            /* tokenizer_config.json, chat_template.jinja */

struct carried_file {
    char *name;
    char *data;
    size_t len;
    char sha256[65];
};

struct carried {
    struct carried_file *f;
    size_t n;
    char **notes;           /* why a file present in the source was left out */
    size_t n_notes;
};

/* Collects the files of source s (a checkpoint directory or a GGUF: what
 * convert takes) into *c (zeroed first). Errors only for memory; everything
 * else becomes a note. */
int carry_collect(struct carried *c, const struct source *s, struct err *e);
void carry_free(struct carried *c);

#endif
