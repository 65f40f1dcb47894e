/* Fuzz harness: model.safetensors.index.json beside two small valid shards. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/checkpoint.h"
#include "core/fileio.h"
#include "tests/fuzz/fuzz.h"

/* A one-tensor safetensors image: {"NAME": U8 [1]} + 1 byte. */
static void write_shard(const char *dir, const char *file, const char *tensor)
{
    char hdr[128], path[512];
    int n = snprintf(hdr, sizeof hdr, "{\"%s\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", tensor);
    uint8_t len[8] = {(uint8_t)n};
    snprintf(path, sizeof path, "%s/%s", dir, file);
    FILE *f = fopen(path, "wb");
    if (!f)
        return;
    fwrite(len, 1, 8, f);
    fwrite(hdr, 1, (size_t)n, f);
    fputc(7, f);
    fclose(f);
}

static char dir[64];

/* The directory and its three files, at exit. */
static void remove_dir(void)
{
    const char *files[] = {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
                           "model.safetensors.index.json"};
    char path[128];
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        unlink(path);
    }
    rmdir(dir);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "/tmp/gempack-fuzz-index-%ld", (long)getpid());
        mkdir(dir, 0755);
        atexit(remove_dir);
        write_shard(dir, "model-00001-of-00002.safetensors", "a");
        write_shard(dir, "model-00002-of-00002.safetensors", "b");
    }
    char path[128];
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    FILE *f = fopen(path, "wb");
    if (!f)
        return 0;
    fwrite(data, 1, size, f);
    fclose(f);
    struct ckpt c;
    struct err e;
    if (ckpt_open(&c, dir, ST_HEADER_ONLY, &e) == ERR_OK) {
        for (size_t i = 0; i < c.n_tensors; i++)
            if (ckpt_find(&c, c.tensors[i].name) != &c.tensors[i])
                abort();
        ckpt_close(&c);
    }
    return 0;
}
