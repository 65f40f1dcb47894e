#include "tests/helpers.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/err.h"
#include "core/fileio.h"

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

char *th_external_golden(const char *name)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/../shared/external-goldens/%s", GP_SOURCE_DIR, name);
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
        return NULL;
    return strdup(path);
}
