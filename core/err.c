#include "core/err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int err_set(struct err *e, enum err_code code, const char *fmt, ...)
{
    if (e) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(e->msg, sizeof e->msg, fmt, ap);
        va_end(ap);
        e->code = code;
    }
    return (int)code;
}

int err_prefix(struct err *e, const char *fmt, ...)
{
    if (!e)
        return ERR_OK;
    char head[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(head, sizeof head, fmt, ap);
    va_end(ap);
    char tmp[ERR_MSG_MAX];
    snprintf(tmp, sizeof tmp, "%s: %.*s", head, (int)(sizeof tmp - sizeof head - 3), e->msg);
    memcpy(e->msg, tmp, sizeof tmp);
    return (int)e->code;
}

const char *err_code_name(enum err_code code)
{
    switch (code) {
    case ERR_OK: return "ok";
    case ERR_IO: return "io";
    case ERR_NOMEM: return "memory";
    case ERR_FORMAT: return "format";
    case ERR_CONFIG: return "config";
    case ERR_UNSUPPORTED: return "unsupported";
    case ERR_RANGE: return "range";
    case ERR_USAGE: return "usage";
    case ERR_NOT_TARGET: return "not a target";
    }
    return "unknown";
}
