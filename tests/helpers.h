/* helpers.h - shared test utilities: scratch directories and files,
 * fixtures, external goldens, and the leak check every Criterion test gets
 * in an AddressSanitizer build (th_leak_check). */
#ifndef GP_TEST_HELPERS_H
#define GP_TEST_HELPERS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fixtures/fixture.h"

/* A Criterion test's timeout of s seconds on this machine. The arm64 build
 * runs under qemu-user, several times slower and slower still on a busy
 * machine: tests/arm64.sh builds it with TH_TIME_SCALE=5 and gives meson's
 * per-executable timeouts the same factor. */
#ifndef TH_TIME_SCALE
#define TH_TIME_SCALE 1
#endif
#define TH_TIMEOUT(s) ((s) * TH_TIME_SCALE)

/* A fresh directory under $TMPDIR (or /tmp), removed by th_rmtree. The
 * returned string is malloc'ed. Aborts the test (cr_assert) on failure. */
char *th_mkdtemp(void);

/* rm -rf of a directory made by th_mkdtemp; frees `dir`. */
void th_rmtree(char *dir);

/* Writes len bytes to dir/name; returns the malloc'ed path. */
char *th_write(const char *dir, const char *name, const void *data, size_t len);

/* Reads a whole file (malloc'ed; *len set). NULL on failure. */
uint8_t *th_read(const char *path, size_t *len);

/* A safetensors image from a header JSON string and `data_len` data bytes
 * (filled with i & 0xff): u64 header length, header, data. malloc'ed. */
uint8_t *th_safetensors(const char *header_json, size_t data_len, size_t *len);

/* splitmix64: a deterministic integer RNG; and uniform floats in [-1, 1),
 * exact multiples of 2^-23, from it. */
uint64_t th_rng_next(uint64_t *s);
float th_rng_float(uint64_t *s);

/* Makes a fixture in dir/sub with the given options (out_dir is set here).
 * Returns the malloc'ed output path; asserts success. */
char *th_fixture(const char *dir, const char *sub, struct fixture_opts o);

/* Edits the bf16 tensor `key` of dir/model.safetensors in place: edit(w, n)
 * gets its n values (bf16 bits). Asserts that it exists and is bf16. */
void th_edit_bf16(const char *dir, const char *key, void (*edit)(uint16_t *w, uint64_t n));

/* Path of ../shared/external-goldens/<name> relative to the source tree, or
 * NULL when that folder is absent (tests then skip). malloc'ed. */
char *th_external_golden(const char *name);

/* runner_init options for one sequence of up to T positions, steps of up to
 * T tokens (a compound literal: use where runner/forward.h is included). */
#define TH_RUNNER(threads_, level_, T_)                                                                                \
    (&(struct runner_opts){.threads = (threads_), .kernels = (level_), .n_seq = 1, .max_step = (T_),                   \
                           .max_context = (T_)})

/* A progress callback's record (ctx of th_progress_note): how often it was
 * called, the last (done, total, unit), and whether done ever went down or
 * past total. */
struct th_progress {
    int calls;
    uint64_t done, total;
    char unit[16];
    bool backwards;
};
void th_progress_note(void *ctx, const char *what, uint64_t done, uint64_t total, const char *unit);

/* In an AddressSanitizer build: runs LeakSanitizer now and fails the
 * current test (cr_assert_fail) if memory was allocated and is no longer
 * reachable; LeakSanitizer prints the allocation stacks on stderr. Without
 * ASan a no-op. helpers.c runs it at the end of every test's body (see
 * there); tests need not call it. */
void th_leak_check(void);

#endif
