/* test_fileio.c - core/fileio: inputs opened without blocking and recorded,
 * outputs refused over an input or a special file, the atomic-write protocol
 * through an unnamed and through a named temporary, directory outputs, the
 * removal of stale temporaries. */
#include <criterion/criterion.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>
#include <utime.h>

#include "core/fileio.h"
#include "tests/helpers.h"

static size_t count_entries(const char *dir)
{
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "ls -A '%s' | wc -l", dir);
    FILE *p = popen(cmd, "r");
    size_t n = 0;
    cr_assert(p && fscanf(p, "%zu", &n) == 1);
    pclose(p);
    return n;
}

static char *text_of(const char *path)
{
    size_t n;
    uint8_t *b = th_read(path, &n);
    cr_assert(b, "cannot read %s", path);
    char *s = realloc(b, n + 1);
    s[n] = 0;
    return s;
}

/* A FIFO, a directory, a socket and a device are refused at once, never
 * waited on; a symbolic link only where FIO_NOFOLLOW says so. */
Test(fileio, open_read_refuses_what_is_not_a_regular_file)
{
    char *dir = th_mkdtemp();
    char *fifo = fio_join(dir, "fifo"), *sock = fio_join(dir, "sock"), *link = fio_join(dir, "link");
    char *file = th_write(dir, "file", "abc", 3);
    cr_assert_eq(mkfifo(fifo, 0644), 0);
    int s = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof a.sun_path, "%s", sock);
    cr_assert_eq(bind(s, (struct sockaddr *)&a, sizeof a), 0);
    cr_assert_eq(symlink("file", link), 0);
    static const struct {
        const char *name, *kind;
    } bad[] = {{"fifo", "is a FIFO, not a regular file"}, {".", "is a directory, not a regular file"},
               {"sock", ""}}; /* a socket: open() itself refuses it (ENXIO) */
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char *p = fio_join(dir, bad[i].name);
        int fd = 7;
        struct err e = {0};
        cr_assert_eq(fio_open_read(p, FIO_INPUT, &fd, NULL, &e), ERR_IO, "%s opened", p);
        cr_assert(strstr(e.msg, p) && strstr(e.msg, bad[i].kind), "%s", e.msg);
        cr_assert_eq(fd, -1);
        free(p);
    }
    if (access("/dev/null", F_OK) == 0) {
        int fd;
        struct err e = {0};
        cr_assert_eq(fio_open_read("/dev/null", 0, &fd, NULL, &e), ERR_IO);
        cr_assert(strstr(e.msg, "is a character device"), "%s", e.msg);
    }
    int fd;
    uint64_t size = 0;
    struct err e = {0};
    cr_assert_eq(fio_open_read(link, 0, &fd, &size, &e), ERR_OK, "%s", e.msg);
    cr_assert_eq(size, 3);
    close(fd);
    cr_assert_eq(fio_open_read(link, FIO_NOFOLLOW, &fd, NULL, &e), ERR_IO);
    cr_assert(strstr(e.msg, "a symbolic link, not followed"), "%s", e.msg);
    cr_assert_eq(fio_open_read("", 0, &fd, NULL, &e), ERR_USAGE);
    char *buf;
    size_t len;
    cr_assert_eq(fio_read_file(fifo, 0, 100, &buf, &len, &e), ERR_IO, "a FIFO read whole");
    cr_assert_eq(fio_read_file(file, 0, 2, &buf, &len, &e), ERR_RANGE, "above the cap");
    cr_assert_eq(fio_read_file(file, 0, 3, &buf, &len, &e), ERR_OK, "%s", e.msg);
    cr_assert(len == 3 && !strcmp(buf, "abc"));
    free(buf);
    close(s);
    free(fifo);
    free(sock);
    free(link);
    free(file);
    th_rmtree(dir);
}

/* An output that is, or resolves to, a recorded input is refused, naming
 * both; an unrecorded file of the same content is not. */
Test(fileio, output_over_an_input_is_refused)
{
    char *dir = th_mkdtemp();
    char *in = th_write(dir, "in.bin", "input", 5), *other = th_write(dir, "other.bin", "input", 5);
    char *sym = fio_join(dir, "sym.bin"), *hard = fio_join(dir, "hard.bin");
    cr_assert_eq(symlink(in, sym), 0);
    cr_assert_eq(link(in, hard), 0);
    int fd;
    struct err e = {0};
    cr_assert_eq(fio_check_output(in, &e), ERR_OK, "not an input yet: %s", e.msg);
    cr_assert_eq(fio_open_read(in, FIO_INPUT, &fd, NULL, &e), ERR_OK, "%s", e.msg);
    close(fd);
    const char *outs[] = {in, sym, hard};
    for (size_t i = 0; i < 3; i++) {
        cr_assert_eq(fio_check_output(outs[i], &e), ERR_USAGE, "%s accepted", outs[i]);
        char want[8400];
        snprintf(want, sizeof want, "refusing to write %s: it is %s, which this command reads", outs[i], in);
        cr_assert_str_eq(e.msg, want);
        struct fio_out o;
        cr_assert_eq(fio_out_open(&o, outs[i], &e), ERR_USAGE, "%s opened for writing", outs[i]);
        fio_out_abort(&o);
        cr_assert_eq(fio_write_file(outs[i], "x", 1, &e), ERR_USAGE);
    }
    char *t = text_of(in);
    cr_assert_str_eq(t, "input", "the input was changed");
    free(t);
    cr_assert_eq(fio_write_file(other, "new", 3, &e), ERR_OK, "%s", e.msg);
    t = text_of(other);
    cr_assert_str_eq(t, "new");
    free(t);
    free(in);
    free(other);
    free(sym);
    free(hard);
    th_rmtree(dir);
}

/* Outputs are regular files: a FIFO, a socket, a directory or a link to
 * one of them at the output path is refused and left as it was. */
Test(fileio, output_over_a_special_file_is_refused)
{
    char *dir = th_mkdtemp();
    char *fifo = fio_join(dir, "fifo"), *sub = fio_join(dir, "sub"), *lnk = fio_join(dir, "lnk");
    cr_assert_eq(mkfifo(fifo, 0644), 0);
    cr_assert_eq(mkdir(sub, 0755), 0);
    cr_assert_eq(symlink("fifo", lnk), 0);
    const char *outs[] = {fifo, sub, lnk, ""};
    const char *why[] = {"exists and is a FIFO", "exists and is a directory", "exists and is a FIFO",
                         "the output path is empty"};
    for (size_t i = 0; i < 4; i++) {
        struct err e = {0};
        cr_assert_eq(fio_write_file(outs[i], "x", 1, &e), ERR_USAGE, "'%s' written", outs[i]);
        cr_assert(strstr(e.msg, why[i]), "%s", e.msg);
    }
    struct stat st;
    cr_assert(stat(fifo, &st) == 0 && S_ISFIFO(st.st_mode));
    cr_assert(stat(sub, &st) == 0 && S_ISDIR(st.st_mode));
    cr_assert_eq(count_entries(dir), 3, "nothing was created beside them");
    /* a dangling link is replaced by the file, its target never created */
    char *dang = fio_join(dir, "dangling"), *target = fio_join(dir, "target");
    cr_assert_eq(symlink("target", dang), 0);
    struct err e = {0};
    cr_assert_eq(fio_write_file(dang, "x", 1, &e), ERR_OK, "%s", e.msg);
    cr_assert(lstat(dang, &st) == 0 && S_ISREG(st.st_mode), "the link was replaced by a regular file");
    cr_assert_eq(access(target, F_OK), -1, "written through the link");
    free(dang);
    free(target);
    free(fifo);
    free(sub);
    free(lnk);
    th_rmtree(dir);
}

/* The protocol through both temporaries: nothing under the final name while
 * writing, the whole file after the commit (replacing an older one), nothing
 * at all after an abort; the named one is a fresh O_EXCL name. */
static void protocol(bool named)
{
    if (named)
        setenv("GEMPACK_NO_TMPFILE", "1", 1);
    else
        unsetenv("GEMPACK_NO_TMPFILE");
    char *dir = th_mkdtemp();
    char *path = th_write(dir, "out.bin", "old", 3);
    struct fio_out o;
    struct err e = {0};
    cr_assert_eq(fio_out_open(&o, path, &e), ERR_OK, "%s", e.msg);
    cr_assert_eq(o.named, named);
    if (named) {
        cr_assert(!strncmp(o.tmp, path, strlen(path)) && strstr(o.tmp, ".tmp."), "%s", o.tmp);
        struct stat st;
        cr_assert(lstat(o.tmp, &st) == 0 && S_ISREG(st.st_mode));
    }
    cr_assert_eq(count_entries(dir), named ? 2u : 1u, "the temporary is %s", named ? "named" : "unnamed");
    cr_assert_eq(fio_write_all(o.fd, "new content", 11, o.tmp, &e), ERR_OK, "%s", e.msg);
    char *t = text_of(path);
    cr_assert_str_eq(t, "old", "the final name changed before the commit");
    free(t);
    cr_assert_eq(fio_out_commit(&o, &e), ERR_OK, "%s", e.msg);
    t = text_of(path);
    cr_assert_str_eq(t, "new content");
    free(t);
    cr_assert_eq(count_entries(dir), 1, "a temporary was left");
    struct stat st;
    cr_assert(stat(path, &st) == 0 && (st.st_mode & 0600) == 0600, "mode %o", st.st_mode & 0777);
    /* abort: nothing */
    char *path2 = fio_join(dir, "aborted.bin");
    cr_assert_eq(fio_out_open(&o, path2, &e), ERR_OK, "%s", e.msg);
    cr_assert_eq(fio_write_all(o.fd, "partial", 7, o.tmp, &e), ERR_OK);
    fio_out_abort(&o);
    fio_out_abort(&o);
    cr_assert_eq(count_entries(dir), 1, "abort left something");
    cr_assert_eq(access(path2, F_OK), -1);
    unsetenv("GEMPACK_NO_TMPFILE");
    free(path2);
    free(path);
    th_rmtree(dir);
}

Test(fileio, protocol_unnamed_temporary)
{
#if defined(GP_PORTABLE) || !defined(O_TMPFILE)
    cr_skip_test("a portable build writes named temporaries only");
#endif
    char *dir = th_mkdtemp();
    int fd = open(dir, O_TMPFILE | O_WRONLY, 0600);
    th_rmtree(dir);
    if (fd < 0)
        cr_skip_test("this filesystem has no O_TMPFILE (%s)", strerror(errno));
    close(fd);
    protocol(false);
}

Test(fileio, protocol_named_temporary)
{
    protocol(true);
}

/* A commit over an existing final name that an unnamed file cannot be
 * linked to directly (EEXIST) still replaces it atomically; one onto a
 * fresh name links it there. */
Test(fileio, unnamed_commit_fresh_and_existing)
{
    unsetenv("GEMPACK_NO_TMPFILE");
    char *dir = th_mkdtemp();
    char *fresh = fio_join(dir, "fresh.bin");
    struct err e = {0};
    cr_assert_eq(fio_write_file(fresh, "one", 3, &e), ERR_OK, "%s", e.msg);
    cr_assert_eq(fio_write_file(fresh, "two", 3, &e), ERR_OK, "%s", e.msg);
    char *t = text_of(fresh);
    cr_assert_str_eq(t, "two");
    free(t);
    cr_assert_eq(count_entries(dir), 1);
    free(fresh);
    th_rmtree(dir);
}

/* Directory outputs: refused when not empty, invisible until committed,
 * nothing left by an abort; parents created. */
Test(fileio, directory_output)
{
    char *dir = th_mkdtemp();
    char *out = fio_join(dir, "a/b/out"), *full = fio_join(dir, "full");
    char *tmp;
    struct err e = {0};
    cr_assert_eq(fio_dir_begin(out, &tmp, &e), ERR_OK, "%s", e.msg);
    cr_assert_eq(access(out, F_OK), -1);
    char *f = fio_join(tmp, "x");
    cr_assert_eq(fio_write_file(f, "x", 1, &e), ERR_OK, "%s", e.msg);
    free(f);
    cr_assert_eq(fio_dir_commit(out, tmp, &e), ERR_OK, "%s", e.msg);
    f = fio_join(out, "x");
    cr_assert_eq(access(f, F_OK), 0);
    free(f);
    cr_assert_eq(fio_dir_begin(out, &tmp, &e), ERR_USAGE, "a non-empty directory reused");
    cr_assert(strstr(e.msg, "exists and is not an empty directory"), "%s", e.msg);
    cr_assert_null(tmp);
    cr_assert_eq(mkdir(full, 0755), 0);
    cr_assert_eq(fio_dir_begin(full, &tmp, &e), ERR_OK, "an empty directory is fine: %s", e.msg);
    fio_dir_abort(tmp);
    cr_assert_eq(count_entries(dir), 2, "abort left the temporary directory");
    cr_assert_eq(fio_dir_begin("", &tmp, &e), ERR_USAGE);
    free(out);
    free(full);
    th_rmtree(dir);
}

/* Stale temporaries (killed writers') go; fresh ones, links and other
 * files stay. */
Test(fileio, stale_temporaries_removed)
{
    char *dir = th_mkdtemp();
    char *old = th_write(dir, "a.gpkc.tmp.1.0", "x", 1), *young = th_write(dir, "b.gpkc.tmp.2.0", "x", 1);
    char *entry = th_write(dir, "c.gpkc", "x", 1), *lnk = fio_join(dir, "d.gpkc.tmp.3.0");
    cr_assert_eq(symlink(entry, lnk), 0);
    struct utimbuf two_hours_ago = {time(NULL) - 7200, time(NULL) - 7200};
    cr_assert_eq(utime(old, &two_hours_ago), 0);
    fio_remove_stale_temps(dir, 600);
    cr_assert_eq(access(old, F_OK), -1, "the stale temporary stayed");
    cr_assert_eq(access(young, F_OK), 0, "a live writer's temporary was removed");
    cr_assert_eq(access(entry, F_OK), 0);
    struct stat st;
    cr_assert_eq(lstat(lnk, &st), 0, "a link was removed");
    free(old);
    free(young);
    free(entry);
    free(lnk);
    th_rmtree(dir);
}
