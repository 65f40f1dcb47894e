/* fileio.h - opening inputs, the atomic-write protocol, whole reads/writes.
 *
 * Inputs are opened without blocking and refused unless they are regular
 * files (a FIFO or a device never stalls or feeds a reader). The files a
 * process reads as a model's or a command's input are recorded; an output
 * that is, or resolves to, one of them is refused, as is an output path
 * holding anything but a regular file.
 *
 * An output is written into an unnamed file (O_TMPFILE) in its directory and
 * linked into place when complete, so a writer killed at any point leaves
 * nothing behind; where the filesystem has no unnamed files, into a
 * uniquely named "<path>.tmp.XXXXXX" created with O_EXCL (never through a
 * planted link), renamed over the final name. Either way the file is
 * fsync'ed before it gets its name and the directory after, so an
 * interrupted writer never leaves a partial file under the final name. */
#ifndef GP_FILEIO_H
#define GP_FILEIO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/err.h"

/* Fault injection for tests/crash_safety.sh: with GEMPACK_CRASH_AT=N in the
 * environment, the process kills itself with SIGKILL at the N-th crash point
 * (before each write, fsync and rename of an output, and after the rename).
 * Without it, nothing happens. With GEMPACK_NO_TMPFILE set, outputs take
 * the named temporary even where unnamed files exist (tests of that path). */
void fio_crash_point(void);

enum {
    FIO_INPUT = 1,    /* record the file as an input: no output may replace it */
    FIO_NOFOLLOW = 2, /* refuse a symbolic link at the path */
};

/* Opens a regular file for reading (O_NONBLOCK: a FIFO is refused, never
 * waited on). *size gets its size when size is not NULL. */
int fio_open_read(const char *path, unsigned flags, int *fd, uint64_t *size, struct err *e);

/* Checks that path names an existing directory (not "", not a file). */
int fio_check_dir(const char *path, struct err *e);

/* Checks that an output may be written at path: not empty, not an existing
 * special file or directory, not a file this process reads as an input. */
int fio_check_output(const char *path, struct err *e);

/* Whether two output paths name one file (the same directory, resolved, and
 * the same name), whether or not it exists yet. */
bool fio_same_output(const char *a, const char *b);

/* Drops path's file from the recorded inputs: its owner replaces it as a
 * whole, atomically (pack_set_field). */
void fio_forget_input(const char *path);

int fio_pread_all(int fd, void *buf, size_t len, uint64_t off, const char *path, struct err *e);
int fio_write_all(int fd, const void *buf, size_t len, const char *path, struct err *e);

/* A file being written. */
struct fio_out {
    char *path;   /* owned: the final name */
    char *tmp;    /* owned: the temporary name ("<path> (unnamed, being written)" for an unnamed file);
                     NULL when nothing is open; used in messages */
    bool named;   /* tmp is a real name in the directory */
    int fd;
};

/* Checks the output (fio_check_output) and creates the temporary file. On
 * failure *o is left empty (abort is safe). */
int fio_out_open(struct fio_out *o, const char *path, struct err *e);

/* fsync, give the file its final name (link or rename), fsync the
 * directory; on failure the temporary file is removed. *o is emptied in
 * every case. */
int fio_out_commit(struct fio_out *o, struct err *e);

/* Closes and removes the temporary file; safe on an empty or committed *o. */
void fio_out_abort(struct fio_out *o);

/* Writes a whole small file atomically (config.json, index.json, ...). */
int fio_write_file(const char *path, const void *data, size_t len, struct err *e);

/* Reads a whole regular file of at most max_bytes; *out is malloc'ed and
 * NUL-terminated. flags as for fio_open_read. */
int fio_read_file(const char *path, unsigned flags, size_t max_bytes, char **out, size_t *len, struct err *e);

/* A directory output (an MLX export, a fixture): refused unless path is
 * absent or an empty directory (files of two writers never mix), and
 * written under a fresh "<path>.tmp.XXXXXX" beside it (*tmp, malloc'ed;
 * the parent directories are created),
 * which fio_dir_commit renames into place when complete, so a failed or
 * interrupted writer leaves nothing under path. */
int fio_dir_begin(const char *path, char **tmp, struct err *e);

/* Renames tmp to path (replacing the empty directory, if any); on failure
 * removes tmp. Frees tmp in every case. */
int fio_dir_commit(const char *path, char *tmp, struct err *e);

/* Removes tmp and everything in it; frees tmp. */
void fio_dir_abort(char *tmp);

/* Removes the temporary files of killed writers in dir: regular files whose
 * name holds ".tmp." and that were last modified more than max_age_s ago. */
void fio_remove_stale_temps(const char *dir, long max_age_s);

/* mkdir -p. */
int fio_mkdirs(const char *dir, struct err *e);

/* rm -rf: removes a directory tree (no symlinks followed). */
int fio_rmtree(const char *dir, struct err *e);

/* "dir/name" into a malloc'ed string (NULL on allocation failure). */
char *fio_join(const char *dir, const char *name);

#endif
