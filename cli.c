/* cli.c - the command line's machinery (cli.h): option tables and their
 * help, value parsing, error messages and the progress line. */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "core/text.h"

/* ---- the terminal guard ---- */

static FILE *raw_out, *raw_err; /* the process's own streams, behind stdout and stderr once guarded */

/* An escaping stream in front of `to` (core/text.h); holds a sequence cut
 * between two writes until the next one shows whether it is valid. */
struct guard {
    FILE *to;
    char held[4];
    size_t n_held;
};

static ssize_t guard_write(void *cookie, const char *buf, size_t n)
{
    struct guard *g = cookie;
    char in[256 + 4], out[5 * sizeof in + 1];
    for (size_t done = 0; done < n;) {
        size_t take = n - done < 256 ? n - done : 256, used;
        memcpy(in, g->held, g->n_held);
        memcpy(in + g->n_held, buf + done, take);
        size_t len = g->n_held + take, w = text_escape(in, len, false, false, out, &used);
        g->n_held = len - used;
        memcpy(g->held, in + used, g->n_held);
        if (fwrite(out, 1, w, g->to) != w)
            return -1;
        done += take;
    }
    return (ssize_t)n;
}

/* A mapped input cut short under a running command (a copy written in place
 * over it) faults on the next read of its data: an error, not a signal. */
static void on_sigbus(int sig)
{
    static const char msg[] = "gempack: error: an input file was cut short or rewritten in place while this command "
                               "read it (its mapped data is gone); nothing was written. Replace a model by renaming a "
                               "new file over it, never by writing into it.\n";
    (void)sig;
    ssize_t w = write(STDERR_FILENO, msg, sizeof msg - 1);
    (void)w;
    _exit(EXIT_ERROR);
}

void cli_guard(void)
{
    signal(SIGBUS, on_sigbus);
    raw_out = stdout;
    raw_err = stderr;
#ifdef __GLIBC__ /* glibc's stdout and stderr are variables (its manual); elsewhere the streams stay unguarded */
    static struct guard g_out, g_err;
    g_out.to = raw_out;
    g_err.to = raw_err;
    setvbuf(raw_out, NULL, _IONBF, 0); /* the guard's own buffer is the only one */
    FILE *o = fopencookie(&g_out, "w", (cookie_io_functions_t){.write = guard_write}),
         *e = fopencookie(&g_err, "w", (cookie_io_functions_t){.write = guard_write});
    if (o && e) {
        setvbuf(e, NULL, _IONBF, 0);
        stdout = o;
        stderr = e;
    }
#endif
}

int fail(const struct err *e)
{
    fprintf(stderr, "gempack: error: %s\n", e->msg);
    return e->code == ERR_NOT_TARGET ? EXIT_VERDICT : EXIT_ERROR;
}

int usage_error(const char *cmd, const char *fmt, const char *arg)
{
    fprintf(stderr, "gempack %s: ", cmd);
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\nTry 'gempack %s --help'.\n", cmd);
    return EXIT_ERROR;
}

/* Every NaN or infinite number in o becomes null: JSON has neither. */
static void json_nulls(struct json_object *o)
{
    if (json_object_is_type(o, json_type_object)) {
        json_object_object_foreach(o, k, v) {
            if (json_object_is_type(v, json_type_double) && !isfinite(json_object_get_double(v)))
                json_object_object_add(o, k, NULL);
            else
                json_nulls(v);
        }
    } else if (json_object_is_type(o, json_type_array)) {
        for (size_t i = 0; i < json_object_array_length(o); i++) {
            struct json_object *v = json_object_array_get_idx(o, i);
            if (json_object_is_type(v, json_type_double) && !isfinite(json_object_get_double(v)))
                json_object_array_put_idx(o, i, NULL);
            else
                json_nulls(v);
        }
    }
}

void print_json(struct json_object *o)
{
    json_nulls(o);
    const char *text = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED |
                                                             JSON_C_TO_STRING_NOSLASHESCAPE);
    size_t n = strlen(text), used;
    char *safe = malloc(5 * n + 1);
    fflush(stdout);
    if (!safe) { /* no room to escape: write nothing rather than something unchecked */
        fputs("gempack: error: out of memory writing JSON\n", stderr);
        return;
    }
    size_t w = text_escape(text, n, true, true, safe, &used);
    fwrite(safe, 1, w, raw_out ? raw_out : stdout);
    fputc('\n', raw_out ? raw_out : stdout);
    free(safe);
}

bool parse_u64(const char *s, unsigned long long max, unsigned long long *out)
{
    if (!s || !*s)
        return false;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (*end || s[0] == '-' || errno == ERANGE || v > max)
        return false;
    *out = v;
    return true;
}

bool parse_float(const char *s, double lo, double hi, double *out)
{
    char *end;
    double v = strtod(s, &end);
    if (!*s || *end || !(v >= lo && v <= hi))
        return false;
    *out = v;
    return true;
}

/* ---- progress on a terminal ---- */

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void progress_print(void *ctx, const char *what, uint64_t done, uint64_t total, const char *unit)
{
    struct progress_line *p = ctx;
    double t = now_s();
    if (!p->start)
        p->start = t;
    if (done < total && t - p->last < 0.1)
        return;
    p->last = t;
    double rate = t > p->start ? (double)done / (t - p->start) : 0.0;
    bool bytes = !strcmp(unit, "B");
    fputs("\r\033[K", raw_err ? raw_err : stderr);
    fprintf(stderr, "%.40s: %.1f%% (%llu of %llu %s), %.4g %s/s, %.0f s left", what,
            total ? 100.0 * (double)done / (double)total : 100.0, (unsigned long long)(bytes ? done >> 20 : done),
            (unsigned long long)(bytes ? total >> 20 : total), bytes ? "MiB" : unit, bytes ? rate / 1048576.0 : rate,
            bytes ? "MiB" : unit, rate > 0 ? (double)(total - done) / rate : 0.0);
    fflush(stderr);
    p->shown = true;
}

struct progress progress_on_tty(struct progress_line *line)
{
    *line = (struct progress_line){0};
    return isatty(STDERR_FILENO) ? (struct progress){progress_print, line} : (struct progress){0};
}

void progress_end(const struct progress_line *line)
{
    if (line->shown)
        fputs("\r\033[K", raw_err ? raw_err : stderr);
}

/* ---- options and help ---- */

const struct command *current;

void command_help(const struct command *c, FILE *out)
{
    fprintf(out, "usage: %s\n\n%s\n", c->synopsis, c->about);
    size_t width = strlen("-h, --help");
    for (const struct opt *o = c->opts; o && o->name; o++) {
        size_t w = 2 + strlen(o->name) + (o->arg ? 1 + strlen(o->arg) : 0) + (o->code == 'o' ? 4 : 0);
        width = w > width && w <= 26 ? w : width;
    }
    for (const struct opt *o = c->opts; o && o->name; o++) {
        if (!o->help)
            continue;
        char head[80];
        snprintf(head, sizeof head, "%s--%s%s%s", o->code == 'o' ? "-o, " : "", o->name, o->arg ? " " : "",
                 o->arg ? o->arg : "");
        const char *line = o->help;
        fprintf(out, "  %-*s  ", (int)width, head);
        for (const char *nl; (nl = strchr(line, '\n')); line = nl + 1)
            fprintf(out, "%.*s\n  %-*s  ", (int)(nl - line), line, (int)width, "");
        fprintf(out, "%s\n", line);
    }
    fprintf(out, "  %-*s  this text\n", (int)width, "-h, --help");
    if (c->after)
        fprintf(out, "\n%s\n", c->after);
}

/* Stores a typed option's value at base; false (with *code) on a bad value. */
static bool set_opt(const struct opt *o, void *base, int *code)
{
    unsigned long long v = 1;
    if (o->type == OPT_STR) {
        memcpy((char *)base + o->off, &optarg, sizeof optarg);
        return true;
    }
    if (o->type == OPT_UINT && !(parse_u64(optarg, o->hi, &v) && v >= o->lo)) {
        fprintf(stderr, "gempack %s: --%s %s: expected an integer from %llu to %llu\nTry 'gempack %s --help'.\n",
                current->name, o->name, optarg, o->lo, o->hi, current->name);
        *code = EXIT_ERROR;
        return false;
    }
    if (o->type == OPT_CHOICE) {
        size_t n = strlen(optarg), k = 0;
        const char *p = o->choices;
        for (; *p; k++) {
            size_t len = strcspn(p, "|");
            if (len == n && !strncmp(p, optarg, n))
                break;
            p += len + (p[len] == '|');
        }
        if (!*p) {
            fprintf(stderr, "gempack %s: --%s %s: expected one of %s\nTry 'gempack %s --help'.\n", current->name,
                    o->name, optarg, o->choices, current->name);
            *code = EXIT_ERROR;
            return false;
        }
        v = o->values ? (unsigned long long)o->values[k] : k;
    }
    uint8_t *dst = (uint8_t *)base + o->off;
    if (o->size == 1)
        *dst = (uint8_t)v;
    else if (o->size == 4)
        memcpy(dst, &(uint32_t){(uint32_t)v}, 4);
    else
        memcpy(dst, &(uint64_t){(uint64_t)v}, 8);
    return true;
}

int next_opt(int argc, char **argv, void *base, int *code)
{
    static struct option longs[40];
    static const struct command *built;
    if (built != current) {
        int n = 0;
        for (const struct opt *o = current->opts; o && o->name && n < 38; o++)
            longs[n++] = (struct option){o->name, o->arg ? required_argument : no_argument, 0, o->code};
        longs[n++] = (struct option){"help", no_argument, 0, 'h'};
        longs[n] = (struct option){0};
        built = current;
    }
    for (int c; (c = getopt_long(argc, argv, "ho:", longs, NULL)) != -1;) {
        const struct opt *o = current->opts;
        while (o && o->name && o->code != c)
            o++;
        if (!o || !o->name || o->type == OPT_OWN)
            return c;
        if (!set_opt(o, base, code))
            return -2;
    }
    return -1;
}

int common_opt(int c)
{
    if (c == 'h') {
        command_help(current, stdout);
        return 0;
    }
    return usage_error(current->name, "%s", "invalid option");
}
