/* text.h - a model's tokenizer and chat template, wherever it keeps them,
 * and prompts given as text turned into its token ids.
 *
 *   directory  DIR/tokenizer.json; the template DIR/chat_template.jinja, else
 *              DIR/tokenizer_config.json "chat_template" (a string, or the
 *              entry named "default" of a list), as transformers loads them
 *   GGUF       tokenizer.ggml.* metadata; tokenizer.chat_template
 *   pack       the files convert stored: tokenizer.json, chat_template.jinja,
 *              tokenizer_config.json (docs/FORMAT.md "files")
 *
 * The tokenizer's sha256 is that of its tokenizer.json (a GGUF's: of the one
 * tok_write_json writes from its metadata, which convert stores); the
 * template's that of its source text. A template that is not one of the
 * known rows (tokenizer/template.h) is not loaded: a chat prompt is refused
 * with its hash, a raw prompt still works. */
#ifndef GP_INGEST_TEXT_H
#define GP_INGEST_TEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "tokenizer/template.h"
#include "tokenizer/tokenizer.h"

#define TEXT_MAX_FILE (64u << 20)   /* bytes of tokenizer_config.json or a template */
#define TEXT_MAX_STOPS 2

struct model_text {
    struct tokenizer *tok;          /* NULL: the model has none (tok_why says where it looked) */
    struct chat_template *tmpl;     /* NULL: none, or refused (tmpl_why) */
    char tok_sha256[65], tmpl_sha256[65]; /* "" when absent */
    char tok_why[ERR_MSG_MAX], tmpl_why[ERR_MSG_MAX];
    int32_t stop[TEXT_MAX_STOPS];   /* generation stops at these ids: <eos>, <turn|> where they exist */
    int n_stop;
    int64_t vocab;                  /* the model's vocabulary (its config) */
};

/* Finds model_path's tokenizer and template. A model without a tokenizer is
 * not an error (t->tok NULL); a tokenizer that is there but does not load is. */
int text_open(struct model_text *t, const char *model_path, struct err *e);
void text_close(struct model_text *t);

/* A prompt as text: raw (the tokenizer's BOS rule applies) or a chat turn
 * rendered through the template (add_generation_prompt; the template writes
 * BOS, so the tokenizer adds nothing). */
struct text_prompt {
    const char *what;               /* how messages name it ("--prompt", a file), or NULL */
    const char *text;               /* raw text, or the user message */
    size_t len;
    bool chat;
    bool conversation;              /* chat: text is a whole conversation, JSON: a messages array, or
                                       {"messages", "tools"?, "enable_thinking"?, "add_generation_prompt"?} */
    const char *system;             /* chat: a system turn first, or NULL */
};

/* The prompts a command was given as text, in order (copies, owned). */
#define TEXT_MAX_PROMPTS 4096
struct text_prompts {
    struct text_prompt *p;
    int n;
    const char *system;             /* --system: every chat prompt's system turn, or NULL */
};

/* Appends a copy of text[0, len) (raw, or a chat turn); messages name it `what`. */
int text_prompts_add(struct text_prompts *s, const char *text, size_t len, bool chat, const char *what,
                     struct err *e);
/* Appends the whole of a file as one raw prompt (at most TOK_MAX_TEXT bytes). */
int text_prompts_add_file(struct text_prompts *s, const char *path, struct err *e);
/* Appends a conversation file (its JSON checked now) as one chat prompt. */
int text_prompts_add_conversation(struct text_prompts *s, const char *path, struct err *e);
void text_prompts_free(struct text_prompts *s);

/* Ids of a prompt (malloc'ed) and, for a chat prompt, the rendered text
 * (malloc'ed, else NULL). A tokenizer with more ids than the model's
 * vocabulary is refused. */
int text_encode(const struct model_text *t, const struct text_prompt *p, int32_t **ids, int64_t *n, char **rendered,
                struct err *e);

/* The first position where ids a[0, na) and b[0, nb) differ (-1: none; a
 * length difference counts at the shorter's end), described in msg with both
 * ids and their pieces by t. */
int64_t text_first_diff(const struct tokenizer *t, const int32_t *a, int64_t na, const int32_t *b, int64_t nb,
                        char *msg, size_t cap);

#endif
