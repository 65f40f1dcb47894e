#include "core/fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int fio_pread_all(int fd, void *buf, size_t len, uint64_t off, const char *path, struct err *e)
{
    uint8_t *p = buf;
    size_t got = 0;
    while (got < len) {
        ssize_t r = pread(fd, p + got, len - got, (off_t)(off + got));
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return err_set(e, ERR_IO, "%s: read at byte %llu failed: %s", path,
                           (unsigned long long)(off + got), strerror(errno));
        if (r == 0)
            return err_set(e, ERR_IO, "%s: unexpected end of file at byte %llu", path,
                           (unsigned long long)(off + got));
        got += (size_t)r;
    }
    return ERR_OK;
}

void fio_crash_point(void)
{
    static _Atomic long long at = -1, seen;
    if (at < 0) {
        const char *s = getenv("GEMPACK_CRASH_AT");
        at = s ? atoll(s) : 0;
    }
    if (at > 0 && ++seen == at)
        raise(SIGKILL);
}

int fio_write_all(int fd, const void *buf, size_t len, const char *path, struct err *e)
{
    const uint8_t *p = buf;
    fio_crash_point();
    while (len) {
        ssize_t r = write(fd, p, len);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return err_set(e, ERR_IO, "%s: write failed: %s", path, strerror(errno));
        p += r;
        len -= (size_t)r;
    }
    return ERR_OK;
}

char *fio_join(const char *dir, const char *name)
{
    size_t a = strlen(dir), b = strlen(name);
    char *s = malloc(a + b + 2);
    if (!s)
        return NULL;
    memcpy(s, dir, a);
    s[a] = '/';
    memcpy(s + a + 1, name, b + 1);
    return s;
}

int fio_out_open(struct fio_out *o, const char *path, struct err *e)
{
    memset(o, 0, sizeof *o);
    o->fd = -1;
    size_t n = strlen(path) + 32;
    o->path = strdup(path);
    o->tmp = malloc(n);
    if (!o->path || !o->tmp) {
        fio_out_abort(o);
        return err_set(e, ERR_NOMEM, "%s: cannot allocate a path", path);
    }
    snprintf(o->tmp, n, "%s.tmp.%ld", path, (long)getpid());
    /* a leftover from a crashed writer with a recycled pid is simply replaced */
    o->fd = open(o->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (o->fd < 0) {
        int rc = err_set(e, ERR_IO, "%s: cannot create: %s", o->tmp, strerror(errno));
        free(o->tmp);
        o->tmp = NULL;
        fio_out_abort(o);
        return rc;
    }
    return ERR_OK;
}

static void fsync_parent(const char *path)
{
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash == dir)
        slash[1] = 0;
    else if (slash)
        *slash = 0;
    else
        snprintf(dir, sizeof dir, ".");
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
}

int fio_out_commit(struct fio_out *o, struct err *e)
{
    int rc = ERR_OK;
    fio_crash_point();
    if (fsync(o->fd) != 0)
        rc = err_set(e, ERR_IO, "%s: fsync failed: %s", o->tmp, strerror(errno));
    if (close(o->fd) != 0 && rc == ERR_OK)
        rc = err_set(e, ERR_IO, "%s: close failed: %s", o->tmp, strerror(errno));
    o->fd = -1;
    fio_crash_point();
    if (rc == ERR_OK && rename(o->tmp, o->path) != 0)
        rc = err_set(e, ERR_IO, "cannot rename %s to %s: %s", o->tmp, o->path, strerror(errno));
    if (rc == ERR_OK) {
        fio_crash_point();
        fsync_parent(o->path);
        free(o->tmp);
        o->tmp = NULL; /* nothing left to remove */
    }
    fio_out_abort(o);
    return rc;
}

void fio_out_abort(struct fio_out *o)
{
    if (!o)
        return;
    if (o->tmp) {
        if (o->fd >= 0)
            close(o->fd);
        unlink(o->tmp);
    }
    free(o->tmp);
    free(o->path);
    memset(o, 0, sizeof *o);
    o->fd = -1;
}

int fio_write_file(const char *path, const void *data, size_t len, struct err *e)
{
    struct fio_out o;
    int rc = fio_out_open(&o, path, e);
    if (rc == ERR_OK)
        rc = fio_write_all(o.fd, data, len, o.tmp, e);
    if (rc == ERR_OK)
        return fio_out_commit(&o, e);
    fio_out_abort(&o);
    return rc;
}

int fio_mkdirs(const char *dir, struct err *e)
{
    char buf[PATH_MAX];
    if (snprintf(buf, sizeof buf, "%s", dir) >= (int)sizeof buf)
        return err_set(e, ERR_RANGE, "%s: path too long", dir);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = 0;
        if (mkdir(buf, 0755) != 0 && errno != EEXIST)
            return err_set(e, ERR_IO, "%s: cannot create directory: %s", buf, strerror(errno));
        *p = '/';
    }
    if (mkdir(buf, 0755) != 0 && errno != EEXIST)
        return err_set(e, ERR_IO, "%s: cannot create directory: %s", buf, strerror(errno));
    struct stat st;
    if (stat(buf, &st) != 0 || !S_ISDIR(st.st_mode))
        return err_set(e, ERR_IO, "%s: exists and is not a directory", buf);
    return ERR_OK;
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

int fio_rmtree(const char *dir, struct err *e)
{
    if (nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS) != 0)
        return err_set(e, ERR_IO, "%s: cannot remove: %s", dir, strerror(errno));
    return ERR_OK;
}
