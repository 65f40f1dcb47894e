/* tokenizer.h - Gemma's tokenizer: text to token ids and back, exactly as HF
 * tokenizers computes them.
 *
 * Two sources give one tokenizer: a HF `tokenizer.json` (tok_load_json) and a
 * GGUF's `tokenizer.ggml.*` metadata (tok_load_gguf). The pipeline is the one
 * Gemma's tokenizer.json spells out, nothing else (any other component type is
 * refused by name):
 *   1. added tokens are matched in the raw text, leftmost-longest (HF's
 *      aho-corasick), with their lstrip / rstrip; the text between them goes on;
 *   2. normalizer: Replace(string → string), alone or in a Sequence;
 *   3. pre-tokenizer: Split(string, MergedWithPrevious) or none;
 *   4. model: BPE with merge ranks (lowest rank first, leftmost on a tie; a
 *      heap, over parts of a long word cut where no merge can cross: linear
 *      in its length where such cuts exist, O(n log n) at worst), characters
 *      missing from the vocabulary as byte-fallback tokens <0xXX>, else <unk>
 *      (fused);
 *   5. post-processor: TemplateProcessing's single template (ids before and
 *      after the text: Gemma's <bos>) or none. The BOS rule is that prefix.
 * From a GGUF: vocabulary and merges as written, the added tokens those of type
 * control, unknown and user-defined (what llama.cpp matches in text), the
 * normalizer Replace(" ", "▁"), byte fallback, and a prefix of bos_token_id
 * when tokenizer.ggml.add_bos_token is true (or absent: llama.cpp's default).
 *
 * Text rule: encode takes valid UTF-8 without NUL bytes, at most TOK_MAX_TEXT
 * bytes; anything else is refused with the byte offset. Decode runs the
 * tokenizer.json's decoder (Replace, ByteFallback, Fuse, Strip; a GGUF's is
 * Replace("▁", " "), ByteFallback, Fuse): byte-fallback pieces are reassembled
 * into UTF-8, a run that is not valid UTF-8 gives one U+FFFD per byte (HF's rule). */
#ifndef GP_TOKENIZER_H
#define GP_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "core/gguf.h"

#define TOK_MAX_TEXT (32u << 20)    /* bytes of text encode accepts */
#define TOK_MAX_VOCAB (1u << 22)    /* token ids (Gemma: 262,144) */
#define TOK_MAX_PIECE 65536         /* bytes of one vocabulary piece */
#define TOK_MAX_ADDED_LEN 1024      /* bytes of one added token (bounds the text scan: O(n · this)) */
#define TOK_MAX_JSON_BYTES (512u << 20)

struct tokenizer;

/* Reads a tokenizer.json file (at most TOK_MAX_JSON_BYTES). */
int tok_load_json(struct tokenizer **out, const char *path, struct err *e);
/* The same over bytes in memory; `name` names them in messages. */
int tok_load_json_mem(struct tokenizer **out, const char *buf, size_t len, const char *name, struct err *e);
/* Reads an open GGUF's tokenizer.ggml.* metadata (tokenizer.ggml.model "gemma4",
 * "llama" or "gemma": the SentencePiece-style BPE Gemma uses). */
int tok_load_gguf(struct tokenizer **out, const struct gguf_file *g, struct err *e);
void tok_free(struct tokenizer *t);

/* The tokenizer as a HF tokenizer.json that loads back (here and in HF
 * tokenizers) to the same ids: model BPE (vocabulary by id, merges in rank
 * order, byte_fallback, fuse_unk, unk_token), the added tokens by id with
 * their flags, the normalizer, pre-tokenizer, decoder and post-processor the
 * tokenizer has (null where it has none). Deterministic bytes, compact JSON;
 * *out malloc'ed and NUL-terminated, *len without the NUL. A piece that is not
 * UTF-8 text without NUL (JSON cannot hold it) is refused with its id. */
int tok_write_json(const struct tokenizer *t, char **out, size_t *len, struct err *e);

/* Ids of text[0, len): the BOS rule's prefix and suffix when add_special.
 * *ids is malloc'ed (free it), *n its count. */
int tok_encode(const struct tokenizer *t, const char *text, size_t len, bool add_special, uint32_t **ids, size_t *n,
               struct err *e);

/* Text of ids[0, n) (malloc'ed, NUL-terminated, *len without the NUL); special
 * added tokens left out when skip_special. An id outside the vocabulary is
 * refused with its position. */
int tok_decode(const struct tokenizer *t, const uint32_t *ids, size_t n, bool skip_special, char **text, size_t *len,
               struct err *e);

/* Token ids are below tok_vocab_size. */
uint32_t tok_vocab_size(const struct tokenizer *t);
/* The piece of an id as the tokenizer stores it ("▁Hello", "<0x0A>", "<bos>"),
 * NULL for an id without one; *len its bytes. */
const char *tok_piece(const struct tokenizer *t, uint32_t id, size_t *len);
/* The ids add_special puts before the text (Gemma: {2}, or none), *n their count. */
const uint32_t *tok_bos_rule(const struct tokenizer *t, size_t *n);

#endif
