#include "core/fileio.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* Unnamed temporary outputs (O_TMPFILE, named by linkat through /proc or
 * AT_EMPTY_PATH) are Linux's; elsewhere, and in a portable build, a named one. */
#if defined(O_TMPFILE) && !defined(GP_PORTABLE)
#define HAVE_UNNAMED 1
#else
#define HAVE_UNNAMED 0
#endif

/* fsync, or on macOS F_FULLFSYNC, which also flushes the drive's cache. */
static int sync_fd(int fd)
{
#ifdef F_FULLFSYNC
    if (fcntl(fd, F_FULLFSYNC) == 0)
        return 0;
#endif
    return fsync(fd);
}

/* ---- inputs ---- */

/* The files this process reads as inputs, by identity (device, inode). */
static struct input {
    dev_t dev;
    ino_t ino;
    char *path;
} *inputs;
static size_t n_inputs, cap_inputs;
static pthread_mutex_t inputs_lock = PTHREAD_MUTEX_INITIALIZER;

static void forget_inputs(void)
{
    for (size_t i = 0; i < n_inputs; i++)
        free(inputs[i].path);
    free(inputs);
    inputs = NULL;
    n_inputs = cap_inputs = 0;
}

static int note(const struct stat *st, const char *path, struct err *e)
{
    int rc = ERR_OK;
    pthread_mutex_lock(&inputs_lock);
    if (!cap_inputs)
        atexit(forget_inputs); /* the record lives as long as the process */
    size_t i = 0;
    while (i < n_inputs && (inputs[i].dev != st->st_dev || inputs[i].ino != st->st_ino))
        i++;
    if (i == n_inputs) {
        if (n_inputs == cap_inputs) {
            size_t cap = cap_inputs ? 2 * cap_inputs : 16;
            struct input *v = realloc(inputs, cap * sizeof *v);
            if (v) {
                inputs = v;
                cap_inputs = cap;
            }
        }
        char *p = n_inputs < cap_inputs ? strdup(path) : NULL;
        if (p)
            inputs[n_inputs++] = (struct input){st->st_dev, st->st_ino, p};
        else
            rc = err_set(e, ERR_NOMEM, "%s: cannot record an input", path);
    }
    pthread_mutex_unlock(&inputs_lock);
    return rc;
}

void fio_forget_input(const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return;
    pthread_mutex_lock(&inputs_lock);
    for (size_t i = 0; i < n_inputs; i++)
        if (inputs[i].dev == st.st_dev && inputs[i].ino == st.st_ino) {
            free(inputs[i].path);
            inputs[i] = inputs[--n_inputs];
            break;
        }
    pthread_mutex_unlock(&inputs_lock);
}

/* The recorded input with this identity, copied into buf; false if none. */
static bool is_input(const struct stat *st, char *buf, size_t cap)
{
    bool yes = false;
    pthread_mutex_lock(&inputs_lock);
    for (size_t i = 0; i < n_inputs && !yes; i++)
        if (inputs[i].dev == st->st_dev && inputs[i].ino == st->st_ino) {
            snprintf(buf, cap, "%s", inputs[i].path);
            yes = true;
        }
    pthread_mutex_unlock(&inputs_lock);
    return yes;
}

static const char *kind_of(mode_t m)
{
    return S_ISREG(m) ? "a regular file" : S_ISDIR(m) ? "a directory" : S_ISFIFO(m) ? "a FIFO" : S_ISCHR(m) ? "a character device"
         : S_ISBLK(m) ? "a block device" : S_ISSOCK(m) ? "a socket" : "a special file";
}

int fio_open_read(const char *path, unsigned flags, int *fd, uint64_t *size, struct err *e)
{
    *fd = -1;
    if (!*path)
        return err_set(e, ERR_USAGE, "an input path is empty");
    int f = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | (flags & FIO_NOFOLLOW ? O_NOFOLLOW : 0));
    if (f < 0)
        return err_set(e, ERR_IO, "%s: cannot open: %s", path,
                       errno == ELOOP && (flags & FIO_NOFOLLOW) ? "a symbolic link, not followed" : strerror(errno));
    struct stat st;
    int rc = ERR_OK;
    if (fstat(f, &st) != 0)
        rc = err_set(e, ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
    else if (!S_ISREG(st.st_mode))
        rc = err_set(e, ERR_IO, "%s: is %s, not a regular file", path, kind_of(st.st_mode));
    else if ((flags & FIO_INPUT))
        rc = note(&st, path, e);
    if (rc != ERR_OK) {
        close(f);
        return rc;
    }
    if (size)
        *size = (uint64_t)st.st_size;
    *fd = f;
    return ERR_OK;
}

int fio_check_dir(const char *path, struct err *e)
{
    struct stat st;
    if (!*path)
        return err_set(e, ERR_USAGE, "a directory path is empty");
    if (stat(path, &st) != 0)
        return err_set(e, ERR_IO, "%s: %s", path, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return err_set(e, ERR_IO, "%s: is %s, expected a directory", path, kind_of(st.st_mode));
    return ERR_OK;
}

int fio_check_output(const char *path, struct err *e)
{
    struct stat st;
    char input[PATH_MAX];
    if (!*path)
        return err_set(e, ERR_USAGE, "the output path is empty");
    if (stat(path, &st) != 0)
        return errno == ENOENT ? ERR_OK : err_set(e, ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
    if (!S_ISREG(st.st_mode))
        return err_set(e, ERR_USAGE, "%s exists and is %s; an output is written only as a regular file", path,
                       kind_of(st.st_mode));
    if (is_input(&st, input, sizeof input))
        return err_set(e, ERR_USAGE, "refusing to write %s: it is %s, which this command reads", path, input);
    return ERR_OK;
}

/* ---- reads and writes ---- */

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

int fio_read_file(const char *path, unsigned flags, size_t max_bytes, char **out, size_t *len, struct err *e)
{
    *out = NULL;
    int fd;
    uint64_t size;
    int rc = fio_open_read(path, flags, &fd, &size, e);
    if (rc != ERR_OK)
        return rc;
    char *buf = NULL;
    if (size > max_bytes)
        rc = err_set(e, ERR_RANGE, "%s: %llu bytes, above the %zu-byte limit for this file", path,
                     (unsigned long long)size, max_bytes);
    else if (!(buf = malloc((size_t)size + 1)))
        rc = err_set(e, ERR_NOMEM, "%s: cannot allocate %llu bytes", path, (unsigned long long)size + 1);
    else
        rc = fio_pread_all(fd, buf, (size_t)size, 0, path, e);
    close(fd);
    if (rc != ERR_OK) {
        free(buf);
        return rc;
    }
    buf[size] = 0;
    *out = buf;
    *len = (size_t)size;
    return ERR_OK;
}

/* path's directory resolved (realpath of "." for a bare name), then "/" and its name; false if unresolvable. */
static bool resolved(const char *path, char out[PATH_MAX])
{
    const char *slash = strrchr(path, '/');
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - path) + 1 : 1, slash ? path : ".");
    char *r = realpath(dir, NULL);
    bool ok = r && (size_t)snprintf(out, PATH_MAX, "%s/%s", r, slash ? slash + 1 : path) < PATH_MAX;
    free(r);
    return ok;
}

bool fio_same_output(const char *a, const char *b)
{
    char ra[PATH_MAX], rb[PATH_MAX];
    return !strcmp(a, b) || (resolved(a, ra) && resolved(b, rb) && !strcmp(ra, rb));
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

/* ---- the atomic-write protocol ---- */

/* The directory part of path ("." for a bare name). */
static void parent_of(const char *path, char *dir, size_t cap)
{
    snprintf(dir, cap, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash == dir)
        slash[1] = 0;
    else if (slash)
        *slash = 0;
    else
        snprintf(dir, cap, ".");
}

static void fsync_parent(const char *path)
{
    char dir[PATH_MAX];
    parent_of(path, dir, sizeof dir);
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        sync_fd(dfd);
        close(dfd);
    }
}

/* "<path>.tmp.XXXXXX" filled in and created with O_EXCL (mkostemp). */
static int named_temp(const char *path, char **tmp, int *fd, struct err *e)
{
    size_t n = strlen(path) + 16;
    if (!(*tmp = malloc(n)))
        return err_set(e, ERR_NOMEM, "%s: cannot allocate a path", path);
    snprintf(*tmp, n, "%s.tmp.XXXXXX", path);
    if ((*fd = mkostemp(*tmp, O_CLOEXEC)) < 0) {
        int rc = err_set(e, ERR_IO, "%s: cannot create: %s", *tmp, strerror(errno));
        free(*tmp);
        *tmp = NULL;
        return rc;
    }
    fchmod(*fd, 0644);
    return ERR_OK;
}

int fio_out_open(struct fio_out *o, const char *path, struct err *e)
{
    memset(o, 0, sizeof *o);
    o->fd = -1;
    int rc = fio_check_output(path, e);
    if (rc != ERR_OK)
        return rc;
    if (!(o->path = strdup(path)))
        return err_set(e, ERR_NOMEM, "%s: cannot allocate a path", path);
#if HAVE_UNNAMED
    /* an unnamed file can be given a name only through /proc or with
     * CAP_DAC_READ_SEARCH (AT_EMPTY_PATH); without either, a named one */
    char dir[PATH_MAX];
    parent_of(path, dir, sizeof dir);
    if (!getenv("GEMPACK_NO_TMPFILE") && (access("/proc/self/fd", X_OK) == 0 || geteuid() == 0))
        o->fd = open(dir, O_TMPFILE | O_WRONLY | O_CLOEXEC, 0644);
    if (o->fd >= 0) {
        size_t n = strlen(path) + 32;
        if (!(o->tmp = malloc(n))) {
            fio_out_abort(o);
            return err_set(e, ERR_NOMEM, "%s: cannot allocate a path", path);
        }
        snprintf(o->tmp, n, "%s (unnamed, being written)", path);
        return ERR_OK;
    }
#endif
    if ((rc = named_temp(path, &o->tmp, &o->fd, e)) != ERR_OK) {
        fio_out_abort(o);
        return rc;
    }
    o->named = true;
    return ERR_OK;
}

#if HAVE_UNNAMED
/* Gives the unnamed file o->fd the name `name`; errno set on failure. */
static int link_unnamed(const struct fio_out *o, const char *name)
{
#ifdef AT_EMPTY_PATH
    if (linkat(o->fd, "", AT_FDCWD, name, AT_EMPTY_PATH) == 0)
        return 0;
    if (errno == EEXIST)
        return -1;
#endif
    char self[64];
    snprintf(self, sizeof self, "/proc/self/fd/%d", o->fd);
    return linkat(AT_FDCWD, self, AT_FDCWD, name, AT_SYMLINK_FOLLOW);
}

/* Names the unnamed file: its final name directly when that is free, else
 * a fresh temporary name renamed over the final one (linkat never replaces
 * nor follows what is at its target). */
static int name_unnamed(struct fio_out *o, struct err *e)
{
    static _Atomic unsigned serial;
    fio_crash_point();
    if (link_unnamed(o, o->path) == 0)
        return ERR_OK;
    if (errno != EEXIST)
        return err_set(e, ERR_IO, "%s: cannot link the written file into place: %s", o->path, strerror(errno));
    size_t n = strlen(o->path) + 48;
    char *tmp = malloc(n);
    if (!tmp)
        return err_set(e, ERR_NOMEM, "%s: cannot allocate a path", o->path);
    int rc = ERR_OK;
    for (int attempt = 0;; attempt++) {
        snprintf(tmp, n, "%s.tmp.%ld.%u", o->path, (long)getpid(), serial++);
        if (link_unnamed(o, tmp) == 0)
            break;
        if (errno != EEXIST || attempt == 100) {
            rc = err_set(e, ERR_IO, "%s: cannot link the written file into place: %s", tmp, strerror(errno));
            break;
        }
    }
    if (rc == ERR_OK && rename(tmp, o->path) != 0) {
        rc = err_set(e, ERR_IO, "cannot rename %s to %s: %s", tmp, o->path, strerror(errno));
        unlink(tmp);
    }
    free(tmp);
    return rc;
}
#endif

int fio_out_commit(struct fio_out *o, struct err *e)
{
    int rc = ERR_OK;
    fio_crash_point();
    if (sync_fd(o->fd) != 0)
        rc = err_set(e, ERR_IO, "%s: fsync failed: %s", o->tmp, strerror(errno));
#if HAVE_UNNAMED
    if (rc == ERR_OK && !o->named)
        rc = name_unnamed(o, e);
#endif
    if (close(o->fd) != 0 && rc == ERR_OK)
        rc = err_set(e, ERR_IO, "%s: close failed: %s", o->tmp, strerror(errno));
    o->fd = -1;
    if (rc == ERR_OK && o->named) {
        fio_crash_point();
        if (rename(o->tmp, o->path) != 0)
            rc = err_set(e, ERR_IO, "cannot rename %s to %s: %s", o->tmp, o->path, strerror(errno));
    }
    if (rc == ERR_OK) {
        fio_crash_point();
        fsync_parent(o->path);
        o->named = false; /* nothing left to remove */
    }
    fio_out_abort(o);
    return rc;
}

void fio_out_abort(struct fio_out *o)
{
    if (!o)
        return;
    if (o->fd >= 0)
        close(o->fd);
    if (o->named && o->tmp)
        unlink(o->tmp);
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

int fio_dir_begin(const char *path, char **tmp, struct err *e)
{
    *tmp = NULL;
    if (!*path)
        return err_set(e, ERR_USAGE, "the output directory path is empty");
    struct stat st;
    if (stat(path, &st) == 0) {
        DIR *d = S_ISDIR(st.st_mode) ? opendir(path) : NULL;
        struct dirent *de;
        bool empty = d != NULL;
        while (d && (de = readdir(d)))
            empty &= !strcmp(de->d_name, ".") || !strcmp(de->d_name, "..");
        if (d)
            closedir(d);
        if (!empty)
            return err_set(e, ERR_USAGE, "%s exists and is not an empty directory; choose a new output directory",
                           path);
    }
    char parent[PATH_MAX];
    parent_of(path, parent, sizeof parent);
    int rc = fio_mkdirs(parent, e);
    if (rc != ERR_OK)
        return rc;
    size_t n = strlen(path) + 16;
    if (!(*tmp = malloc(n)))
        return err_set(e, ERR_NOMEM, "%s: cannot allocate a path", path);
    snprintf(*tmp, n, "%s.tmp.XXXXXX", path);
    if (!mkdtemp(*tmp)) {
        rc = err_set(e, ERR_IO, "%s: cannot create a temporary directory: %s", *tmp, strerror(errno));
        free(*tmp);
        *tmp = NULL;
        return rc;
    }
    chmod(*tmp, 0755);
    return ERR_OK;
}

int fio_dir_commit(const char *path, char *tmp, struct err *e)
{
    int rc = ERR_OK;
    fio_crash_point();
    rmdir(path); /* the empty directory, if any */
    if (rename(tmp, path) != 0) {
        rc = err_set(e, ERR_IO, "cannot rename %s to %s: %s", tmp, path, strerror(errno));
        fio_rmtree(tmp, NULL);
    } else {
        fsync_parent(path);
    }
    free(tmp);
    return rc;
}

void fio_dir_abort(char *tmp)
{
    if (tmp)
        fio_rmtree(tmp, NULL);
    free(tmp);
}

void fio_remove_stale_temps(const char *dir, long max_age_s)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    time_t now = time(NULL);
    while (d && (de = readdir(d))) {
        if (!strstr(de->d_name, ".tmp."))
            continue;
        struct stat st;
        if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode) &&
            now - st.st_mtime > max_age_s)
            unlinkat(dirfd(d), de->d_name, 0);
    }
    if (d)
        closedir(d);
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
