/* test_npz.c - core/npz reading what an archive says of itself: every member
 * checked against its CRC-32 and declared size, nothing allocated beyond what
 * the caller says a member may hold, each member decompressed once. The
 * archives are written by npz_write (stored) and patched byte by byte, or
 * made deflated by python3's zipfile. */
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fileio.h"
#include "core/npz.h"
#include "tests/helpers.h"

/* An archive of logits.npy float32 [4, 8] (values k/4) and meta.json. */
static char *write_archive(const char *dir, const char *name)
{
    float v[32];
    for (int k = 0; k < 32; k++)
        v[k] = (float)k / 4.0f;
    uint64_t shape[2] = {4, 8};
    uint8_t *npy;
    size_t len;
    struct err e = {0};
    cr_assert_eq(npy_encode(DT_F32, shape, 2, v, &npy, &len, &e), ERR_OK, "%s", e.msg);
    const char *meta = "{\"producer\": \"test_npz\"}";
    struct npz_member m[2] = {{"logits.npy", npy, len}, {"meta.json", meta, strlen(meta)}};
    char *path = fio_join(dir, name);
    cr_assert_eq(npz_write(path, m, 2, &e), ERR_OK, "%s", e.msg);
    free(npy);
    return path;
}

/* Offset of the first occurrence of `needle` in the file (a member's data:
 * stored members hold their bytes verbatim). */
static size_t find(const uint8_t *b, size_t n, const void *needle, size_t k)
{
    for (size_t i = 0; i + k <= n; i++)
        if (!memcmp(b + i, needle, k))
            return i;
    cr_assert_fail("pattern not found");
    return 0;
}

Test(npz, intact_archive_reads)
{
    char *dir = th_mkdtemp(), *path = write_archive(dir, "a.npz");
    struct npz z;
    struct npy a;
    struct err e = {0};
    cr_assert_eq(npz_open(&z, path, &e), ERR_OK, "%s", e.msg);
    cr_assert_eq(npz_get_array(&z, "logits.npy", 32, &a, &e), ERR_OK, "%s", e.msg);
    cr_assert(a.rank == 2 && a.shape[0] == 4 && a.shape[1] == 8 && ((float *)a.data)[31] == 7.75f);
    npy_free(&a);
    uint8_t *buf;
    size_t len;
    cr_assert_eq(npz_get(&z, "meta.json", 1000, &buf, &len, &e), ERR_OK, "%s", e.msg);
    cr_assert(len == 24 && !memcmp(buf, "{\"producer\": \"test_npz\"}", 24));
    free(buf);
    struct npz_scan s;
    for (size_t i = 0; i < z.n; i++) {
        cr_assert_eq(npz_scan(&z, i, 1000, &s, &e), ERR_OK, "%s", e.msg);
        if (!strcmp(s.name, "logits.npy"))
            cr_assert(s.is_array && s.array.shape[1] == 8 && !s.array.data && !s.data && s.size == 128 + 128);
        else
            cr_assert(!s.is_array && s.data && !strcmp((char *)s.data, "{\"producer\": \"test_npz\"}"));
        free(s.data);
    }
    npz_close(&z);
    free(path);
    th_rmtree(dir);
}

/* One flipped bit in a member's data is corruption (ERR_FORMAT, "corrupt:
 * CRC-32"), whichever way the member is read; the other member still reads. */
Test(npz, flipped_bit_is_corruption)
{
    char *dir = th_mkdtemp(), *path = write_archive(dir, "a.npz");
    size_t n;
    uint8_t *b = th_read(path, &n);
    float probe = 5.25f; /* logits[2][5] */
    b[find(b, n, &probe, 4) + 1] ^= 0x08;
    char *bad = th_write(dir, "bad.npz", b, n);
    free(b);
    struct npz z;
    struct npy a;
    struct err e = {0};
    cr_assert_eq(npz_open(&z, bad, &e), ERR_OK, "%s", e.msg);
    cr_assert_eq(npz_get_array(&z, "logits.npy", 32, &a, &e), ERR_FORMAT, "a flipped bit read as data");
    cr_assert(strstr(e.msg, bad) && strstr(e.msg, "logits.npy: corrupt: CRC-32"), "%s", e.msg);
    cr_assert_null(a.data);
    uint8_t *buf;
    size_t len;
    cr_assert_eq(npz_get(&z, "logits.npy", 1000, &buf, &len, &e), ERR_FORMAT);
    cr_assert_null(buf);
    struct npz_scan s;
    cr_assert_eq(npz_scan(&z, 0, 1000, &s, &e), ERR_FORMAT);
    cr_assert(strstr(e.msg, "corrupt: CRC-32"), "%s", e.msg);
    cr_assert_eq(npz_get(&z, "meta.json", 1000, &buf, &len, &e), ERR_OK, "%s", e.msg);
    free(buf);
    npz_close(&z);
    free(path);
    free(bad);
    th_rmtree(dir);
}

/* Caps: a raw member above max_bytes and an array above max_count are
 * refused (ERR_RANGE) from what they declare; an array whose header and
 * declared size disagree is malformed. */
Test(npz, caps_and_declared_sizes)
{
    char *dir = th_mkdtemp(), *path = write_archive(dir, "a.npz");
    struct npz z;
    struct npy a;
    uint8_t *buf;
    size_t len;
    struct err e = {0};
    cr_assert_eq(npz_open(&z, path, &e), ERR_OK, "%s", e.msg);
    cr_assert_eq(npz_get(&z, "meta.json", 23, &buf, &len, &e), ERR_RANGE);
    cr_assert(strstr(e.msg, "meta.json declares 24 bytes, above the 23 bytes it may hold"), "%s", e.msg);
    cr_assert_eq(npz_get_array(&z, "logits.npy", 31, &a, &e), ERR_RANGE);
    cr_assert(strstr(e.msg, "32 elements, above the 31 this member may hold"), "%s", e.msg);
    cr_assert_eq(npz_get_array(&z, "absent.npy", 31, &a, &e), ERR_FORMAT);
    cr_assert(strstr(e.msg, "no member absent.npy"), "%s", e.msg);
    npz_close(&z);
    /* the header claims [4, 9] while the member holds [4, 8]'s bytes */
    size_t n;
    uint8_t *b = th_read(path, &n);
    memcpy(b + find(b, n, "(4, 8,)", 7), "(4, 9,)", 7);
    char *bad = th_write(dir, "shape.npz", b, n);
    free(b);
    cr_assert_eq(npz_open(&z, bad, &e), ERR_OK, "%s", e.msg);
    cr_assert_eq(npz_get_array(&z, "logits.npy", 1000, &a, &e), ERR_FORMAT);
    cr_assert(strstr(e.msg, "member of 256 bytes, but its header and shape x dtype make 272"), "%s", e.msg);
    npz_close(&z);
    free(bad);
    free(path);
    th_rmtree(dir);
}

/* A deflated member that declares a huge size is refused before it is
 * inflated; scanned, it is read in pieces and not kept. */
Test(npz, deflated_members)
{
    char *dir = th_mkdtemp(), *big = fio_join(dir, "big.npz");
    char cmd[9000];
    snprintf(cmd, sizeof cmd,
             "python3 -c 'import sys, zipfile\n"
             "with zipfile.ZipFile(sys.argv[1], \"w\", zipfile.ZIP_DEFLATED) as z:\n"
             "    z.writestr(\"meta.json\", \"{\" + \" \" * (64 << 20) + \"}\")' '%s'",
             big);
    if (system(cmd) != 0)
        cr_skip_test("python3 cannot write the archive");
    struct npz z;
    uint8_t *buf;
    size_t len;
    struct err e = {0};
    cr_assert_eq(npz_open(&z, big, &e), ERR_OK, "%s", e.msg);
    cr_assert_eq(npz_get(&z, "meta.json", 1 << 20, &buf, &len, &e), ERR_RANGE);
    cr_assert(strstr(e.msg, "meta.json declares 67108866 bytes"), "%s", e.msg);
    struct npz_scan s;
    cr_assert_eq(npz_scan(&z, 0, 1 << 20, &s, &e), ERR_OK, "a big member scanned in pieces: %s", e.msg);
    cr_assert(s.size == 67108866 && !s.data, "kept a member above `keep`");
    cr_assert_eq(npz_get(&z, "meta.json", 1 << 27, &buf, &len, &e), ERR_OK, "%s", e.msg);
    free(buf);
    npz_close(&z);
    free(big);
    th_rmtree(dir);
}
