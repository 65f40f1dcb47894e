/* fileio.h - whole reads/writes and the atomic-write protocol.
 *
 * Every output file goes through fio_tmp_create ("<path>.tmp.<pid>") and fio_commit (fsync, rename over the final name, fsync the
 * directory), so an interrupted writer never leaves a partial file under the
 * final name. */
#ifndef GP_FILEIO_H
#define GP_FILEIO_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"

int fio_pread_all(int fd, void *buf, size_t len, uint64_t off, const char *path, struct err *e);
int fio_write_all(int fd, const void *buf, size_t len, const char *path, struct err *e);

/* Creates the temporary file for `path`. *final_path and *tmp_path are
 * malloc'ed copies owned by the caller. */
int fio_tmp_create(const char *path, char **final_path, char **tmp_path, int *fd, struct err *e);

/* fsync(fd), close(fd), rename(tmp, path), fsync of the directory. On
 * failure the temporary file is removed. fd is closed in every case. */
int fio_commit(int fd, const char *tmp, const char *path, struct err *e);

/* Writes a whole small file atomically (config.json, index.json, ...). */
int fio_write_file(const char *path, const void *data, size_t len, struct err *e);

/* mkdir -p. */
int fio_mkdirs(const char *dir, struct err *e);

/* rm -rf: removes a directory tree (no symlinks followed). */
int fio_rmtree(const char *dir, struct err *e);

/* "dir/name" into a malloc'ed string (NULL on allocation failure). */
char *fio_join(const char *dir, const char *name);

#endif
