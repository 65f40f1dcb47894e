/* cli.c - the command line's machinery (cli.h): option tables and their
 * help, value parsing, error messages and the progress line. */
#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

/* The current command's option whose name is field[0, len) with dashes for
 * underscores; NULL if none. */
static const struct opt *opt_of_field(const char *field, size_t len)
{
    for (const struct opt *o = current ? current->opts : NULL; o && o->name; o++) {
        size_t i = 0;
        while (i < len && (o->name[i] == field[i] || (o->name[i] == '-' && field[i] == '_')))
            i++;
        if (i == len && !o->name[len])
            return o;
    }
    return NULL;
}

int fail(const struct err *e)
{
    char msg[ERR_MSG_MAX + 256];
    size_t n = 0;
    bool flag_first = false;
    for (const char *p = e->msg; *p && n < sizeof msg - 64;) {
        size_t len = *p == '\'' ? strspn(p + 1, "abcdefghijklmnopqrstuvwxyz0123456789_") : 0;
        const struct opt *o = len && p[len + 1] == '\'' ? opt_of_field(p + 1, len) : NULL;
        if (o && strlen(o->name) < 60) {
            n += (size_t)sprintf(msg + n, "--%s", o->name);
            flag_first |= p == e->msg;
            p += len + 2;
        } else {
            msg[n++] = *p++;
        }
    }
    msg[n] = 0;
    if (e->code == ERR_USAGE && flag_first)
        return usage_error(current->name, "%s", msg);
    fprintf(stderr, "gempack: error: %s\n", msg);
    return e->code == ERR_NOT_TARGET ? EXIT_VERDICT : EXIT_ERROR;
}

int usage_error(const char *cmd, const char *fmt, const char *arg)
{
    fprintf(stderr, "gempack %s: ", cmd);
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\nTry 'gempack %s --help'.\n", cmd);
    return EXIT_ERROR;
}

void print_json(struct json_object *o)
{
    puts(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED |
                                               JSON_C_TO_STRING_NOSLASHESCAPE));
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
    fprintf(stderr, "\r\033[K%.40s: %.1f%% (%llu of %llu %s), %.4g %s/s, %.0f s left", what,
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
        fputs("\r\033[K", stderr);
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

void opt_field(int code, char field[static 32])
{
    const struct opt *o = current->opts;
    while (o->name && o->code != code)
        o++;
    size_t i = 0;
    for (; o->name && o->name[i] && i < 31; i++)
        field[i] = o->name[i] == '-' ? '_' : o->name[i];
    field[i] = 0;
}

int common_opt(int c)
{
    if (c == 'h') {
        command_help(current, stdout);
        return 0;
    }
    return usage_error(current->name, "%s", "invalid option");
}
