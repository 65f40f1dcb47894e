/* cli.h - the command line's machinery, shared by main.c's commands (cli.c):
 * one option table per command (parsed, stored and shown by --help), value
 * parsing, the error messages (a library's 'field' shown as its --flag) and
 * exit codes, a progress line on a terminal, and the dispatch to a command.
 * Only these two files print to the terminal or exit. */
#ifndef GEMPACK_CLI_H
#define GEMPACK_CLI_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "core/err.h"
#include "core/progress.h"

enum { EXIT_VERDICT = 1, EXIT_ERROR = 2 };

/* Prints a library error as the command line says it: each 'field' the
 * message quotes that is an option of the current command shown as its flag
 * (--field, underscores as dashes); a usage error that begins with one as a
 * usage error of the command, anything else as "gempack: error: ...". The
 * exit code: another model's checkpoint is a verdict (1), any other failure 2. */
int fail(const struct err *e);

/* "gempack CMD: " fmt (with arg) and the hint to --help on stderr; EXIT_ERROR. */
int usage_error(const char *cmd, const char *fmt, const char *arg);

/* o on stdout, pretty: every NaN or infinite number as null, invalid UTF-8 as \\xNN text; drops the reference. */
void print_json(struct json_object *o);

/* Strict decimal parse of a non-negative integer up to max. */
bool parse_u64(const char *s, unsigned long long max, unsigned long long *out);

/* A finite decimal number in [lo, hi]. */
bool parse_float(const char *s, double lo, double hi, double *out);

/* A progress line on stderr when it is a terminal (none otherwise): what
 * was just done, the share, the rate and the time left, at most ten times a
 * second, erased when the work ends. */
struct progress_line {
    double start, last;
    bool shown;
};

/* The progress of a command: printing on a terminal, nothing otherwise. */
struct progress progress_on_tty(struct progress_line *line);

/* Erases the line if one was shown. */
void progress_end(const struct progress_line *line);

/* ---- options and help, from one table per command ---- */

/* An option: how --help shows it, and for the typed ones where its value
 * goes (base + off, a field of `size` bytes) so the command need not parse it. */
enum opt_type {
    OPT_OWN,                   /* the command handles it */
    OPT_FLAG,                  /* sets a bool */
    OPT_STR,                   /* stores optarg (a const char *) */
    OPT_UINT,                  /* an integer in [lo, hi] */
    OPT_CHOICE,                /* one of `choices` ("a|b|c"): its index, or values[index] */
    OPT_MODE,                  /* an int64 chunk: prefill 0, decode 1, chunked:N N */
    OPT_TOKENS,                /* one more prompt "2,17,99" into a struct token_seqs (this and below: by the library) */
    OPT_TOKENS_FILE,           /* the prompts of a file (runner/tokens.h) into a struct token_seqs */
    OPT_THRESHOLD,             /* into a struct golden_thresholds, golden_threshold_parse's key in `choices` */
    OPT_PROMPT,                /* one more raw text prompt into a struct text_prompts (ingest/text.h) */
    OPT_PROMPT_FILE,           /* a file's text as one more raw prompt */
    OPT_CHAT,                  /* one more chat prompt (a user turn through the model's template) */
    OPT_CHAT_FILE,             /* a conversation file (JSON messages, tools) as one more chat prompt */
};

struct opt {
    const char *name;          /* long option, without the dashes */
    const char *arg;           /* its argument as the help names it, or NULL */
    int code;                  /* what getopt_long returns for it */
    const char *help;          /* lines separated by '\n'; NULL: described with another option */
    enum opt_type type;
    size_t off, size;
    unsigned long long lo, hi;
    const char *choices;
    const int *values;
};

#define OWN(name, arg, code, help) {name, arg, code, help, OPT_OWN, 0, 0, 0, 0, NULL, NULL}
#define FLAG(name, code, S, f, help) {name, NULL, code, help, OPT_FLAG, offsetof(S, f), sizeof(((S *)0)->f), 0, 0, NULL, NULL}
#define STR(name, arg, code, S, f, help) {name, arg, code, help, OPT_STR, offsetof(S, f), sizeof(((S *)0)->f), 0, 0, NULL, NULL}
#define UINT(name, arg, code, S, f, lo, hi, help) {name, arg, code, help, OPT_UINT, offsetof(S, f), sizeof(((S *)0)->f), lo, hi, NULL, NULL}
#define TYPED(type, name, arg, code, S, f, help) {name, arg, code, help, type, offsetof(S, f), sizeof(((S *)0)->f), 0, 0, NULL, NULL}
/* The six thresholds (golden/golden.h); --max-abs described by help, the others with it. */
#define TH(name, key, code, S, f, help) {name, "X", code, help, OPT_THRESHOLD, offsetof(S, f), sizeof(((S *)0)->f), 0, 0, key, NULL}
#define THRESHOLDS(S, f, help) TH("max-abs", "max_abs", 'a', S, f, help), TH("nmse", "nmse", 'N', S, f, NULL), \
    TH("kld-mean", "kld_mean", 'k', S, f, NULL), TH("kld-p99", "kld_p99", 'p', S, f, NULL), \
    TH("kld-max", "kld_max", 'K', S, f, NULL), TH("top1", "top1", '1', S, f, NULL)
/* Prompts as text: --prompt, --prompt-file, --chat and --system into a struct text_prompts. */
#define PROMPTS(S, f) TYPED(OPT_PROMPT, "prompt", "TEXT", 0x100, S, f, "a prompt as text, tokenized by MODEL's tokenizer (its\nBOS rule applies)"), \
    TYPED(OPT_PROMPT_FILE, "prompt-file", "F", 0x101, S, f, "the whole of a UTF-8 file as one prompt"), \
    TYPED(OPT_CHAT, "chat", "MSG", 0x102, S, f, "a user message rendered through MODEL's chat template\n(with the generation prompt; known templates only)"), \
    TYPED(OPT_CHAT_FILE, "chat-file", "F", 0x104, S, f, "a whole conversation through the template: a JSON array\nof messages (role, content, tool_calls, ...) or\n{\"messages\", \"tools\", \"enable_thinking\",\n\"add_generation_prompt\" (default true)}"), \
    STR("system", "S", 0x103, S, f.system, "a system turn before each chat prompt")
#define CHOICE(name, code, S, f, choices, values, help) {name, choices, code, help, OPT_CHOICE, offsetof(S, f), sizeof(((S *)0)->f), 0, 0, choices, values}

struct command {
    const char *name, *synopsis, *summary;
    const char *about;         /* the paragraphs between the usage and the options */
    const struct opt *opts;    /* ends with a zero entry; -h, --help is added */
    const char *after;         /* a paragraph after the options, or NULL */
    int (*fn)(int, char **);
};

void command_help(const struct command *c, FILE *out);

/* The next option the command handles itself; typed ones are stored at base
 * on the way. -1: no more; -2: a bad value (*code is the exit code). 'h'
 * is --help. */
int next_opt(int argc, char **argv, void *base, int *code);

/* -h and an unknown option, the same way in every command: the exit code. */
int common_opt(int c);

/* gempack's main: the top-level help and --version, then the command
 * argv[1] (or the two words argv[1] argv[2]) of commands[n]; its exit code.
 * Before the command, stdout and stderr are guarded: they spell out every
 * byte a terminal could act on (core/text.h's text_escape; on glibc), so a
 * file's strings cannot drive the terminal; print_json and the progress line
 * write past the guard, JSON escaped as JSON. A mapped input cut short under
 * the command (SIGBUS) ends it with an error (exit 2), not a signal. */
int cli_main(const struct command *commands, size_t n, int argc, char **argv);

#endif
