/* fileio.h - whole reads/writes and the atomic-write protocol.
 *
 * Every output file is written as "<path>.tmp.<pid>" (fio_out_open) and
 * committed by fsync, rename over the final name and fsync of the directory
 * (fio_out_commit), so an interrupted writer never leaves a partial file
 * under the final name. */
#ifndef GP_FILEIO_H
#define GP_FILEIO_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"

/* Fault injection for tests/crash_safety.sh: with GEMPACK_CRASH_AT=N in the
 * environment, the process kills itself with SIGKILL at the N-th crash point
 * (before each write, fsync and rename of an output, and after the rename).
 * Without it, nothing happens. */
void fio_crash_point(void);

int fio_pread_all(int fd, void *buf, size_t len, uint64_t off, const char *path, struct err *e);
int fio_write_all(int fd, const void *buf, size_t len, const char *path, struct err *e);

/* A file being written under its temporary name "<path>.tmp.<pid>". */
struct fio_out {
    char *path, *tmp;              /* owned; tmp NULL when nothing is open */
    int fd;
};

/* Creates the temporary file. On failure *o is left empty (abort is safe). */
int fio_out_open(struct fio_out *o, const char *path, struct err *e);

/* fsync, close, rename over the final name, fsync the directory; on failure
 * the temporary file is removed. *o is emptied in every case. */
int fio_out_commit(struct fio_out *o, struct err *e);

/* Closes and removes the temporary file; safe on an empty or committed *o. */
void fio_out_abort(struct fio_out *o);

/* Writes a whole small file atomically (config.json, index.json, ...). */
int fio_write_file(const char *path, const void *data, size_t len, struct err *e);

/* mkdir -p. */
int fio_mkdirs(const char *dir, struct err *e);

/* rm -rf: removes a directory tree (no symlinks followed). */
int fio_rmtree(const char *dir, struct err *e);

/* "dir/name" into a malloc'ed string (NULL on allocation failure). */
char *fio_join(const char *dir, const char *name);

#endif
