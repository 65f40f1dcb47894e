/* card.h - the quality card of a conversion (convert --eval): its output
 * against its source (compare_models) on the fixture prompt and the
 * caller's, stored with the output, and optionally the HTML page
 * (golden/report.h) with every tensor's quantization error. */
#ifndef GP_GOLDEN_CARD_H
#define GP_GOLDEN_CARD_H

#include <json-c/json.h>

#include "converter/convert.h"
#include "golden/compare.h"

struct card_opts {
    const struct token_seqs *prompts; /* after the fixture prompt of the source's config; may be empty */
    int threads;
    const char *report;               /* NULL, or the HTML page to write */
    struct progress progress;         /* compare_models' */
};

struct card {
    struct compare_result r;
    struct json_object *json;         /* schema gempack.quality/1 (compare_card) */
    char *path;                       /* the file it was written to (an MLX output's gempack_quality.json);
                                       * NULL: the pack manifest's "quality" */
};

/* Compares the output o->out of the conversion cr of src with src and
 * stores the card: in the pack's manifest, or as OUT/gempack_quality.json.
 * c must be card_free'd in every case. */
int card_make(const char *src, const struct convert_opts *o, const struct convert_report *cr,
              const struct card_opts *co, struct card *c, struct err *e);
void card_free(struct card *c);

#endif
