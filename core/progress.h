/* progress.h - long work telling its caller how far it is (convert's
 * tensors, compare's positions): a callback, which the command line turns
 * into a progress line on a terminal. Libraries never print. */
#ifndef GP_PROGRESS_H
#define GP_PROGRESS_H

#include <stdint.h>

struct progress {
    /* `what` just finished; done of total `unit`s ("B", "tokens") */
    void (*fn)(void *ctx, const char *what, uint64_t done, uint64_t total, const char *unit);
    void *ctx;
};

static inline void progress_report(const struct progress *p, const char *what, uint64_t done, uint64_t total,
                                   const char *unit)
{
    if (p && p->fn)
        p->fn(p->ctx, what, done, total, unit);
}

#endif
