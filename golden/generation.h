/* generation.h - checks of generated text that CI can gate on: reserved
 * tokens (Gemma's <unusedN>, never meant to be produced) and repetition loops
 * (the tail of a broken or badly quantized model repeating one span). */
#ifndef GP_GOLDEN_GENERATION_H
#define GP_GOLDEN_GENERATION_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stdint.h>

#include "tokenizer/tokenizer.h"

/* A loop: a span of at least GEN_LOOP_MIN_TOKENS generated ids, and at least
 * GEN_LOOP_MIN_REPEATS periods, in which every id equals the one `period`
 * before it, for a period of 1..GEN_LOOP_MAX_PERIOD. */
#define GEN_LOOP_MAX_PERIOD 64
#define GEN_LOOP_MIN_REPEATS 4
#define GEN_LOOP_MIN_TOKENS 16

struct gen_flags {
    int64_t n_reserved;       /* generated ids whose piece is <unusedN> */
    int64_t first_reserved;   /* its position in the generation, -1: none */
    int32_t reserved_id;      /* the first one's id */
    bool reserved_checked;    /* false: no tokenizer to name the ids */
    int64_t loop_start, loop_period, loop_length; /* the longest loop (ties: shorter period, then earlier); length 0: none */
};

/* Checks n generated ids; t NULL leaves reserved tokens unchecked. */
void gen_check(const int32_t *ids, int64_t n, const struct tokenizer *t, struct gen_flags *f);

/* True when a check flagged something. */
bool gen_flagged(const struct gen_flags *f);

/* {reserved: {count, first_position, first_id} | null when unchecked,
 *  loop: {start, period, length} | null, flagged}. */
struct json_object *gen_flags_json(const struct gen_flags *f);

/* One line for people: "ok", or what was flagged and where. */
void gen_flags_text(const struct gen_flags *f, char *buf, size_t cap);

#endif
