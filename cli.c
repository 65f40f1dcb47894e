/* cli.c - the command line's machinery (cli.h): option tables and their
 * help, value parsing, error messages and the progress line. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "core/cpu.h"
#include "core/text.h"
#include "golden/golden.h"
#include "ingest/text.h"
#include "gp_config.h"
#include "runner/tokens.h"

/* ---- the terminal guard ---- */

static FILE *raw_out, *raw_err; /* the process's own streams, behind stdout and stderr once guarded */

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

#ifdef __GLIBC__ /* the guard: glibc's stdout and stderr are variables */
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


/* A sequence still held at the end was cut for good: spelled out. */
static int guard_close(void *cookie)
{
    struct guard *g = cookie;
    char out[5 * sizeof g->held + 1];
    size_t used, w = text_escape(g->held, g->n_held, false, true, out, &used);
    g->n_held = 0;
    return fwrite(out, 1, w, g->to) == w ? 0 : EOF;
}

/* At exit: the guards flushed and closed (nothing of them left allocated), the process's own streams back. */
static void unguard_streams(void)
{
    FILE *o = stdout, *e = stderr;
    stdout = raw_out;
    stderr = raw_err;
    fclose(o);
    fclose(e);
}
#endif

static void guard_streams(void)
{
    signal(SIGBUS, on_sigbus);
    raw_out = stdout;
    raw_err = stderr;
#ifdef __GLIBC__ /* glibc's stdout and stderr are variables (its manual); elsewhere the streams stay unguarded */
    static struct guard g_out, g_err;
    g_out.to = raw_out;
    g_err.to = raw_err;
    setvbuf(raw_out, NULL, _IONBF, 0); /* the guard's own buffer is the only one */
    FILE *o = fopencookie(&g_out, "w", (cookie_io_functions_t){.write = guard_write, .close = guard_close}),
         *e = fopencookie(&g_err, "w", (cookie_io_functions_t){.write = guard_write, .close = guard_close});
    if (o && e) {
        setvbuf(e, NULL, _IONBF, 0);
        stdout = o;
        stderr = e;
        atexit(unguard_streams);
    } else if (o || e) {
        fclose(o ? o : e);
    }
#endif
}

static const struct command *current; /* the command being run (cli_main sets it) */

/* The running command's option named field[0, len), dashes as underscores; NULL if none. */
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

/* A library message as the command line says it: each quoted 'field' that is
 * an option of the running command as its flag. */
static const char *flags_named(const char *msg, char out[static ERR_MSG_MAX + 256])
{
    size_t n = 0;
    for (const char *p = msg; *p && n < ERR_MSG_MAX + 192;) {
        size_t len = *p == '\'' ? strspn(p + 1, "abcdefghijklmnopqrstuvwxyz0123456789_") : 0;
        const struct opt *o = len && p[len + 1] == '\'' ? opt_of_field(p + 1, len) : NULL;
        if (o)
            n += (size_t)snprintf(out + n, 64, "--%s", o->name);
        else
            out[n++] = *p;
        p += o ? len + 2 : 1;
    }
    out[n] = 0;
    return out;
}

int fail(const struct err *e)
{
    char msg[ERR_MSG_MAX + 256];
    flags_named(e->msg, msg);
    if (e->code == ERR_USAGE && e->msg[0] == '\'' && !strncmp(msg, "--", 2)) /* it begins with a flag */
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
        json_object_put(o);
        return;
    }
    size_t w = text_escape(text, n, true, true, safe, &used);
    fwrite(safe, 1, w, raw_out ? raw_out : stdout);
    fputc('\n', raw_out ? raw_out : stdout);
    free(safe);
    json_object_put(o);
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
        const char *line = o->help;
        int w = fprintf(out, "  %s--%s%s%s", o->code == 'o' ? "-o, " : "", o->name, o->arg ? " " : "",
                        o->arg ? o->arg : "") - 2;
        if (w > (int)width) /* wider than the column: the text starts on the next line */
            fprintf(out, "\n  %-*s  ", (int)width, "");
        else
            fprintf(out, "%*s  ", (int)width - w, "");
        for (const char *nl; (nl = strchr(line, '\n')); line = nl + 1)
            fprintf(out, "%.*s\n  %-*s  ", (int)(nl - line), line, (int)width, "");
        fprintf(out, "%s\n", line);
    }
    fprintf(out, "  %-*s  this text\n", (int)width, "-h, --help");
    if (c->after)
        fprintf(out, "\n%s\n", c->after);
}

/* --mode: 0 prefill, 1 decode, N chunked:N. */
static bool parse_mode(const char *s, unsigned long long *chunk)
{
    if (!strcmp(s, "prefill") || !strcmp(s, "decode"))
        *chunk = !strcmp(s, "decode");
    else if (strncmp(s, "chunked:", 8) || !parse_u64(s + 8, 1ull << 30, chunk) || *chunk == 0)
        return false;
    return true;
}

/* Stores a typed option's value at base; false (with *code) on a bad value. */
static bool set_opt(const struct opt *o, void *base, int *code)
{
    unsigned long long v = 1;
    void *at = (char *)base + o->off;
    struct err e = {0};
    char msg[ERR_MSG_MAX + 256];
    if (o->type == OPT_STR) {
        memcpy(at, &optarg, sizeof optarg);
        return true;
    }
    snprintf(msg, sizeof msg, "--%s", o->name);
    int rc = o->type == OPT_TOKENS        ? tokens_add_csv(at, optarg, msg, &e)
             : o->type == OPT_TOKENS_FILE ? tokens_read_file(optarg, at, &e)
             : o->type == OPT_THRESHOLD   ? golden_threshold_parse(at, o->choices, optarg, &e)
             : o->type == OPT_PROMPT_FILE ? text_prompts_add_file(at, optarg, &e)
             : o->type == OPT_CHAT_FILE   ? text_prompts_add_conversation(at, optarg, &e)
             : o->type >= OPT_PROMPT      ? text_prompts_add(at, optarg, strlen(optarg), o->type == OPT_CHAT, msg, &e)
                                          : ERR_OK;
    if (rc != ERR_OK)
        *code = usage_error(current->name, "%s", flags_named(e.msg, msg));
    if (rc != ERR_OK || o->type >= OPT_TOKENS) /* the library's parsers store their own */
        return rc == ERR_OK;
    if (o->type == OPT_MODE && !parse_mode(optarg, &v)) {
        *code = usage_error(current->name, "--mode %s: expected prefill, decode or chunked:N with N from 1 to "
                                           "1073741824", optarg);
        return false;
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
    uint8_t *dst = at;
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

static void main_help(const struct command *commands, size_t n, FILE *out)
{
    fputs("usage: gempack COMMAND [options]   (gempack COMMAND --help for each)\n\n"
          "Toolkit for Gemma 4 text checkpoints.\n\n", out);
    for (size_t i = 0; i < n; i++)
        fprintf(out, "  %-14s %s\n", commands[i].name, commands[i].summary);
    fputs("\n  --version      print the version\n", out);
}

int cli_main(const struct command *commands, size_t n_commands, int argc, char **argv)
{
    /* A file-size limit (RLIMIT_FSIZE) surfaces as a failed write (EFBIG) with a
     * message and a removed temp file, not as a kill by SIGXFSZ. */
    signal(SIGXFSZ, SIG_IGN);
    guard_streams();
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        main_help(commands, n_commands, argc < 2 ? stderr : stdout);
        return argc < 2 ? EXIT_ERROR : 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("gempack %s\n", GEMPACK_VERSION);
        return 0;
    }
    if (!cpu_isa_valid()) {
        fprintf(stderr,
                "gempack: GEMPACK_ISA=%s: expected scalar, avx2, avx-vnni, avx512, avx512-vnni, neon or dotprod\n",
                getenv("GEMPACK_ISA"));
        return EXIT_ERROR;
    }
    bool sub = argc >= 3 && argv[2][0] != '-'; /* a two-word command: golden make, golden check */
    for (size_t i = 0; i < n_commands; i++) {
        size_t n = strlen(argv[1]);
        const char *name = commands[i].name;
        if (strncmp(name, argv[1], n) || (name[n] && !(sub && name[n] == ' ' && !strcmp(name + n + 1, argv[2]))))
            continue;
        current = &commands[i];
        return current->fn(argc - (name[n] ? 2 : 1), argv + (name[n] ? 2 : 1));
    }
    for (size_t i = 0; i < n_commands; i++) /* a command's first word alone: its help */
        if (!strncmp(commands[i].name, argv[1], strlen(argv[1])) && commands[i].name[strlen(argv[1])] == ' ') {
            if (argc >= 3 && (!strcmp(argv[2], "--help") || !strcmp(argv[2], "-h"))) {
                for (size_t j = i; j < n_commands; j++)
                    if (!strncmp(commands[j].name, argv[1], strlen(argv[1])))
                        command_help(&commands[j], stdout);
                return 0;
            }
            return usage_error(argv[1], "%s", "expected 'make' or 'check'");
        }
    fprintf(stderr, "gempack: unknown command '%s'\n\n", argv[1]);
    main_help(commands, n_commands, stderr);
    return EXIT_ERROR;
}
