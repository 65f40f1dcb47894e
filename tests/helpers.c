#include "tests/helpers.h"

#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/err.h"
#include "core/fileio.h"
#include "core/safetensors.h"

#if defined(__SANITIZE_ADDRESS__)
#define TH_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TH_ASAN 1
#endif
#endif

#ifdef TH_ASAN
#include <dlfcn.h>
#include <sanitizer/lsan_interface.h>
#include <stddef.h>
#endif

uint64_t th_rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

float th_rng_float(uint64_t *s)
{
    return (float)(int32_t)((th_rng_next(s) >> 40) - (1u << 23)) / (float)(1u << 23);
}

char *th_mkdtemp(void)
{
    const char *base = getenv("TMPDIR");
    char tmpl[4096];
    snprintf(tmpl, sizeof tmpl, "%s/gempack-test-XXXXXX", base && *base ? base : "/tmp");
    char *d = mkdtemp(tmpl);
    cr_assert(d, "mkdtemp(%s) failed", tmpl);
    return strdup(d);
}

void th_rmtree(char *dir)
{
    if (dir)
        fio_rmtree(dir, NULL);
    free(dir);
}

char *th_write(const char *dir, const char *name, const void *data, size_t len)
{
    char *path = fio_join(dir, name);
    FILE *f = fopen(path, "wb");
    cr_assert(f, "cannot create %s", path);
    cr_assert_eq(fwrite(data, 1, len, f), len);
    fclose(f);
    return path;
}

uint8_t *th_read(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = malloc(n > 0 ? (size_t)n : 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    *len = (size_t)n;
    return buf;
}

uint8_t *th_safetensors(const char *header_json, size_t data_len, size_t *len)
{
    size_t h = strlen(header_json);
    *len = 8 + h + data_len;
    uint8_t *buf = malloc(*len);
    cr_assert(buf);
    for (int i = 0; i < 8; i++)
        buf[i] = (uint8_t)((uint64_t)h >> (8 * i));
    memcpy(buf + 8, header_json, h);
    for (size_t i = 0; i < data_len; i++)
        buf[8 + h + i] = (uint8_t)i;
    return buf;
}

char *th_fixture(const char *dir, const char *sub, struct fixture_opts o)
{
    char *out = fio_join(dir, sub);
    o.out_dir = out;
    if (!o.shards)
        o.shards = 1;
    if (!o.group_size)
        o.group_size = 64;
    struct fixture_summary s;
    struct err e = {0};
    int rc = fixture_make(&o, &s, &e);
    cr_assert_eq(rc, ERR_OK, "fixture %s: %s", sub, e.msg);
    return out;
}

void th_edit_bf16(const char *dir, const char *key, void (*edit)(uint16_t *w, uint64_t n))
{
    char *path = fio_join(dir, "model.safetensors");
    struct st_file f;
    struct err e = {0};
    cr_assert_eq(st_open(&f, path, ST_HEADER_ONLY, &e), ERR_OK, "%s", e.msg);
    const struct st_tensor *t = st_find(&f, key);
    cr_assert(t && t->dtype == DT_BF16, "%s: no bf16 %s", path, key);
    uint64_t off = f.data_start + t->begin, n = (t->end - t->begin) / 2;
    st_close(&f);
    int fd = open(path, O_RDWR);
    cr_assert(fd >= 0);
    uint16_t *w = malloc((size_t)n * 2);
    cr_assert_eq(pread(fd, w, (size_t)n * 2, (off_t)off), (ssize_t)(n * 2));
    edit(w, n);
    cr_assert_eq(pwrite(fd, w, (size_t)n * 2, (off_t)off), (ssize_t)(n * 2));
    close(fd);
    free(w);
    free(path);
}

char *th_external_golden(const char *name)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/../shared/external-goldens/%s", GP_SOURCE_DIR, name);
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
        return NULL;
    return strdup(path);
}

void th_progress_note(void *ctx, const char *what, uint64_t done, uint64_t total, const char *unit)
{
    struct th_progress *p = ctx;
    (void)what;
    p->backwards |= done < p->done || done > total || (p->calls && total != p->total);
    p->calls++;
    p->done = done;
    p->total = total;
    snprintf(p->unit, sizeof p->unit, "%s", unit);
}

/* ---- the leak check of every test (AddressSanitizer builds) ----
 *
 * Criterion runs each test in a worker process of its own and decides
 * whether the test passed when its body returns: an assertion in a .fini
 * (the suite's or the test's) or a crash after that is printed but leaves
 * the test PASS, and LeakSanitizer's exit-time report comes later still
 * (Criterion 2.4.1; tried). A leak must therefore be found before the body
 * returns. Criterion's Test() macro runs the body through
 * criterion_internal_test_main(body) (criterion/internal/test.h); defined
 * here, in the test executable, it takes precedence over libcriterion's and
 * hands that one a body that runs the test's body and then th_leak_check().
 * A test whose body ends in a failed cr_assert skips the check (it has
 * failed already). helpers.o is linked whole into every test executable
 * (tests/meson.build), so every test is covered.
 *
 * The exit-time leak check is turned off in these executables
 * (__lsan_default_options; LSAN_OPTIONS can still set it): in a worker it
 * would only repeat the report of a test that has failed already, and in
 * Criterion's runner process, which runs only Criterion's own code, it
 * reports a 48-byte block Criterion leaks now and then (a calloc in
 * libcriterion.so.3+0x1a332, whose frames LeakSanitizer cannot name, so no
 * suppression can single it out). Other sanitizer errors (ASan, and UBSan
 * built with -fno-sanitize-recover) end the worker with exit status 1
 * during the test, which fails it. */

#ifdef TH_ASAN
const char *__lsan_default_options(void)
{
    return "leak_check_at_exit=0";
}

void th_leak_check(void)
{
    if (__lsan_do_recoverable_leak_check())
        cr_assert_fail("the test leaked memory (LeakSanitizer's report with the allocation stacks is on stderr)");
}

static void (*th_body)(void);

static void th_run(void)
{
    th_body();
    th_leak_check();
}

static void th_run_param(void *param)
{
    ((void (*)(void *))th_body)(param); /* as Criterion calls a ParameterizedTest */
    th_leak_check();
}

void criterion_internal_test_main(void (*fn)(void))
{
    void (*real)(void (*)(void));
    void *sym = dlsym(RTLD_NEXT, "criterion_internal_test_main");
    if (!sym) {
        fprintf(stderr, "helpers.c: libcriterion's criterion_internal_test_main not found: %s\n", dlerror());
        abort();
    }
    memcpy(&real, &sym, sizeof real);
    /* Whether the test is a ParameterizedTest, as libcriterion decides it
     * (data->param_). The worker's copy of the test's data is not aligned:
     * read it with memcpy. */
    const struct criterion_test_extra_data *data;
    struct criterion_test_params (*param)(void);
    memcpy(&data, (const char *)criterion_current_test + offsetof(struct criterion_test, data), sizeof data);
    memcpy(&param, (const char *)data + offsetof(struct criterion_test_extra_data, param_), sizeof param);
    th_body = fn;
    real(param ? (void (*)(void))th_run_param : th_run);
}
#else
void th_leak_check(void) {}
#endif
