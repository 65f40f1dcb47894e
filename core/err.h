/* err.h - error codes and messages returned by every library function.
 *
 * Library code never prints and never exits: it fills an `struct err` with a
 * code and a message naming the file, the field or tensor, the offending value
 * and what was expected, and returns the code. Only main.c prints. */
#ifndef GP_ERR_H
#define GP_ERR_H

enum err_code {
    ERR_OK = 0,
    ERR_IO,          /* open/read/write/mmap failed */
    ERR_NOMEM,       /* allocation failed or a declared size is beyond our limits */
    ERR_FORMAT,      /* malformed input file */
    ERR_CONFIG,      /* config.json does not describe a model we can load */
    ERR_UNSUPPORTED, /* well formed, but a feature we do not implement */
    ERR_RANGE,       /* a value outside its allowed range */
    ERR_USAGE,       /* bad arguments from the caller */
    ERR_NOT_TARGET,  /* well formed, but another model's: refused by what it is (a verdict: exit 1) */
};

#define ERR_MSG_MAX 4096

struct err {
    enum err_code code;
    char msg[ERR_MSG_MAX];
};

/* Sets e->code and e->msg (printf-style; truncated to ERR_MSG_MAX) and returns
 * `code`, so callers can write `return err_set(e, ERR_FORMAT, "...")`.
 * `e` may be NULL. */
int err_set(struct err *e, enum err_code code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Prepends "prefix: " (printf-style) to the current message, keeping the code.
 * Returns e->code. */
int err_prefix(struct err *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Short name of a code ("format", "io", ...). */
const char *err_code_name(enum err_code code);

#endif
