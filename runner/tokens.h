/* tokens.h - token ids from the command line or a file.
 *
 * Accepted forms: "2,17,99" (--tokens); a file holding a JSON list of ints,
 * {"tokens": [...]}, a JSON list of lists (a batch), an .npy of int32/int64
 * ([T] or [B, T]), or whitespace-separated integers. Every id must fit in
 * int32 and be non-negative; the vocabulary bound is checked by the runner. */
#ifndef GP_TOKENS_H
#define GP_TOKENS_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"

#define TOKENS_MAX (1 << 20)    /* ids per file, all sequences together */
#define TOKENS_FILE_MAX (32u << 20) /* bytes of a token file: bounds the JSON tree too */
#define TOKENS_MAX_SEQS 4096

struct token_seqs {
    int32_t **seq;              /* n arrays */
    int64_t *len;
    int n;
};

int tokens_parse(const uint8_t *buf, size_t len, const char *what, struct token_seqs *out, struct err *e);
int tokens_read_file(const char *path, struct token_seqs *out, struct err *e);
/* Appends one sequence parsed from "2,17,99"; messages name it `what`. */
int tokens_add_csv(struct token_seqs *s, const char *csv, const char *what, struct err *e);
/* Appends a copy of tok[0, T) as one more sequence (at most TOKENS_MAX_SEQS). */
int tokens_push(struct token_seqs *s, const int32_t *tok, int64_t T, struct err *e);
void tokens_free(struct token_seqs *s);

#endif
