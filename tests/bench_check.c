/* bench_check.c - `check --headers-only` on 31B-shaped sharded headers.
 *
 * Makes `fixture --variant 31b --full-size --headers-only --shards 4` in a
 * scratch directory, then times check_run over it. Prints the median and
 * best wall time and the bytes read, beside the targets (100 ms, 1 MiB).
 * Exit status 1 when a target is missed. Run: meson test --benchmark. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ingest/check.h"
#include "core/fileio.h"
#include "fixtures/fixture.h"

#define RUNS 25
#define TARGET_MS 100.0
#define TARGET_BYTES (1u << 20)

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(void)
{
    char dir[] = "/tmp/gempack-bench-XXXXXX";
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 2;
    }
    char *out = fio_join(dir, "31b");
    struct fixture_opts o = {.variant = "31b", .layout = FX_HF, .group_size = 64, .shards = 4,
                             .full_size = true, .headers_only = true, .out_dir = out};
    struct fixture_summary s;
    struct err e = {0};
    if (fixture_make(&o, &s, &e) != ERR_OK) {
        fprintf(stderr, "fixture: %s\n", e.msg);
        return 2;
    }
    double ms[RUNS];
    uint64_t bytes = 0;
    bool loadable = false;
    for (int i = 0; i < RUNS; i++) {
        struct check_report r;
        double t0 = now_ms();
        int rc = check_run(&r, out, CHECK_HEADERS_ONLY, &e);
        ms[i] = now_ms() - t0;
        if (rc != ERR_OK) {
            fprintf(stderr, "check: %s\n", e.msg);
            return 2;
        }
        bytes = r.src.ck.bytes_read;
        loadable = check_loadable(&r);
        check_free(&r);
    }
    qsort(ms, RUNS, sizeof *ms, cmp_double);
    double median = ms[RUNS / 2];
    printf("check --headers-only, 31B-shaped, 4 shards + index: %zu tensors (%llu bytes of weights declared)\n",
           s.n_tensors, (unsigned long long)s.data_bytes);
    printf("  verdict       %s\n", loadable ? "loadable" : "NOT loadable");
    printf("  time          median %.2f ms, best %.2f ms over %d runs   (target < %.0f ms)\n", median, ms[0], RUNS,
           TARGET_MS);
    printf("  bytes read    %llu (index + 4 headers)   (target < %u)\n", (unsigned long long)bytes, TARGET_BYTES);
    bool ok = loadable && median < TARGET_MS && bytes < TARGET_BYTES;
    printf("  result        %s\n", ok ? "PASS" : "FAIL");
    if (fio_rmtree(dir, &e) != ERR_OK)
        fprintf(stderr, "%s\n", e.msg);
    free(out);
    return ok ? 0 : 1;
}
