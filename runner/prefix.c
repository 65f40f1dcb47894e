#include "runner/prefix.h"

#include <dirent.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/bytes.h"
#include "core/crc.h"
#include "core/fileio.h"
#include "core/sha256.h"
#include "core/text.h"

/* Cold file: 64-byte header, then the payload.
 *   0 u8[8] "GPKCACHE"   8 u32 version (1)   12 u32 header crc32 of [16, 64)
 *   16 u8[32] key        48 u64 payload bytes   56 u32 payload crc32   60 u32 zero */
#define COLD_MAGIC "GPKCACHE"
#define COLD_VERSION 1
#define COLD_HEADER 64
/* A temporary file older than this in the cold directory is a killed
 * writer's: a live one finishes an entry in well under a second. */
#define PREFIX_STALE_TEMP_S 600

struct prefix_entry {
    uint8_t key[32];
    uint8_t *payload;
    size_t bytes;
    struct prefix_entry *prev, *next;
};

__attribute__((format(printf, 2, 3))) static void warn(struct prefix_cache *pc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    text_list_vadd(&pc->warnings, &pc->n_warnings, fmt, ap);
    va_end(ap);
}

int prefix_init(struct prefix_cache *pc, const struct runner *r, const struct prefix_opts *o, struct err *e)
{
    memset(pc, 0, sizeof *pc);
    if (o->block <= 0)
        return err_set(e, ERR_USAGE, "'prefix_block' %lld: expected a positive block size", (long long)o->block);
    pc->o = *o;
    if (o->cold_dir) {
        int rc = fio_mkdirs(o->cold_dir, e);
        if (rc != ERR_OK)
            return rc;
        fio_remove_stale_temps(o->cold_dir, PREFIX_STALE_TEMP_S);
    }
    char ns[320], weights[65];
    /* The weights themselves, not just the layout: entries on disk outlive
     * this process and must never be restored into another model. The
     * arithmetic too: the exact kernels give the same bits on every machine,
     * the int8 ones other bits (the same on every machine), sgemm its own on
     * each machine; and a build whose kernels round differently
     * (KERN_NUMERICS) must not restore an older build's state. */
    if (o->cold_dir)
        ingest_fingerprint(&r->m->src, true, weights);
    else
        memcpy(weights, r->m->fingerprint, sizeof weights); /* one process, one model */
    snprintf(ns, sizeof ns, "gempack prefix v%d|%s|bits=%d|group=%d|start=%lld|skip_last=%d|block=%lld|kernels=%s%s|numerics=%d",
             COLD_VERSION, weights, r->o.kv.bits, r->o.kv.group_size, (long long)r->o.kv.start,
             r->o.kv.skip_last_full, (long long)o->block, r->kt.q8dot ? "int8" : r->kt.blas ? "blas-" : "exact",
             r->kt.blas ? r->kt.name : "", KERN_NUMERICS);
    struct sha256 h;
    sha256_init(&h);
    sha256_update(&h, ns, strlen(ns));
    sha256_final(&h, pc->ns);
    return ERR_OK;
}

static void unlink_entry(struct prefix_cache *pc, struct prefix_entry *x)
{
    if (x->prev)
        x->prev->next = x->next;
    else
        pc->lru = x->next;
    if (x->next)
        x->next->prev = x->prev;
    x->prev = x->next = NULL;
}

static void push_front(struct prefix_cache *pc, struct prefix_entry *x)
{
    x->next = pc->lru;
    x->prev = NULL;
    if (pc->lru)
        pc->lru->prev = x;
    pc->lru = x;
}

static void drop(struct prefix_cache *pc, struct prefix_entry *x)
{
    unlink_entry(pc, x);
    pc->hot_bytes -= x->bytes;
    free(x->payload);
    free(x);
}

void prefix_free(struct prefix_cache *pc)
{
    if (!pc)
        return;
    while (pc->lru)
        drop(pc, pc->lru);
    for (size_t i = 0; i < pc->n_warnings; i++)
        free(pc->warnings[i]);
    free(pc->warnings);
    memset(pc, 0, sizeof *pc);
}

/* key_i = sha256(key_{i-1} || tokens of block i), key_{-1} = namespace. */
static void next_key(const uint8_t prev[32], const int32_t *tokens, int64_t n, uint8_t out[32])
{
    struct sha256 h;
    sha256_init(&h);
    sha256_update(&h, prev, 32);
    for (int64_t t = 0; t < n; t++) {
        uint8_t b[4];
        wr_u32le(b, (uint32_t)tokens[t]);
        sha256_update(&h, b, 4);
    }
    sha256_final(&h, out);
}

static char *cold_path(const struct prefix_cache *pc, const uint8_t key[32])
{
    char name[80];
    for (int i = 0; i < 32; i++)
        snprintf(name + 2 * i, 3, "%02x", key[i]);
    snprintf(name + 64, sizeof name - 64, ".gpkc");
    return fio_join(pc->o.cold_dir, name);
}

/* Hot tier insert (evicting the least recently used). True when the tier
 * took the payload; false (too large, or out of memory) leaves it to the caller. */
static bool hot_put(struct prefix_cache *pc, const uint8_t key[32], uint8_t *payload, size_t bytes)
{
    if (bytes > pc->o.hot_limit)
        return false;
    while (pc->lru && pc->hot_bytes + bytes > pc->o.hot_limit) {
        struct prefix_entry *tail = pc->lru;
        while (tail->next)
            tail = tail->next;
        drop(pc, tail);
    }
    struct prefix_entry *x = calloc(1, sizeof *x);
    if (!x)
        return false;
    memcpy(x->key, key, 32);
    x->payload = payload;
    x->bytes = bytes;
    pc->hot_bytes += bytes;
    push_front(pc, x);
    return true;
}

/* A cold entry of `expect` payload bytes, validated; NULL (with a warning
 * when the file was bad) on a miss. Its size is checked against `expect`
 * before anything is allocated or read. */
static uint8_t *cold_get(struct prefix_cache *pc, const uint8_t key[32], size_t expect)
{
    if (!pc->o.cold_dir)
        return NULL;
    char *path = cold_path(pc, key);
    int fd;
    uint64_t size;
    struct err e;
    if (!path || access(path, F_OK) != 0) {
        free(path);
        return NULL;
    }
    uint8_t h[COLD_HEADER], *payload = NULL;
    const char *why = NULL;
    if (fio_open_read(path, FIO_NOFOLLOW, &fd, &size, &e) != ERR_OK) {
        warn(pc, "prefix cache: ignored %s (%s)", path, e.msg);
        free(path);
        return NULL; /* not ours to delete: not a regular file */
    }
    if (size != COLD_HEADER + (uint64_t)expect) {
        why = "its size is not what this model's block needs";
    } else if (fio_pread_all(fd, h, COLD_HEADER, 0, path, &e) != ERR_OK) {
        why = "unreadable header";
    } else if (memcmp(h, COLD_MAGIC, 8) || rd_u32le(h + 8) != COLD_VERSION) {
        why = "not a gempack prefix-cache entry of this version";
    } else if (rd_u32le(h + 12) != crc32_update(0, h + 16, COLD_HEADER - 16)) {
        why = "header CRC mismatch";
    } else if (memcmp(h + 16, key, 32)) {
        why = "stale: its key does not match its name";
    } else if (rd_u64le(h + 48) != (uint64_t)expect) {
        why = "size does not match its header";
    } else if (!(payload = malloc(expect ? expect : 1)) ||
               fio_pread_all(fd, payload, expect, COLD_HEADER, path, &e) != ERR_OK) {
        why = "unreadable payload";
    } else if (crc32_update(0, payload, expect) != rd_u32le(h + 56)) {
        why = "payload CRC mismatch";
    }
    close(fd);
    if (why) {
        warn(pc, "prefix cache: discarded %s (%s)", path, why);
        unlink(path);
        free(payload);
        payload = NULL;
    }
    free(path);
    return payload;
}

static void cold_put(struct prefix_cache *pc, const uint8_t key[32], const uint8_t *payload, size_t bytes)
{
    if (!pc->o.cold_dir)
        return;
    uint8_t *buf = malloc(COLD_HEADER + bytes);
    char *path = cold_path(pc, key);
    struct err e;
    if (buf && path) {
        memset(buf, 0, COLD_HEADER);
        memcpy(buf, COLD_MAGIC, 8);
        wr_u32le(buf + 8, COLD_VERSION);
        memcpy(buf + 16, key, 32);
        wr_u64le(buf + 48, bytes);
        wr_u32le(buf + 56, crc32_update(0, payload, bytes));
        wr_u32le(buf + 12, crc32_update(0, buf + 16, COLD_HEADER - 16));
        memcpy(buf + COLD_HEADER, payload, bytes);
        if (fio_write_file(path, buf, COLD_HEADER + bytes, &e) != ERR_OK)
            warn(pc, "prefix cache: could not write %s: %s", path, e.msg);
    }
    free(buf);
    free(path);
}

/* The entry of `key`, of `expect` bytes, hot first (refreshing its recency),
 * then cold (promoted to hot). An entry the hot tier could not take is
 * returned in *owned, which the caller frees. *bytes: the entry's size (a hot
 * entry of another size is returned for the caller to report). */
static const uint8_t *lookup(struct prefix_cache *pc, const uint8_t key[32], size_t expect, size_t *bytes,
                             uint8_t **owned)
{
    *owned = NULL;
    for (struct prefix_entry *x = pc->lru; x; x = x->next)
        if (!memcmp(x->key, key, 32)) {
            unlink_entry(pc, x);
            push_front(pc, x);
            *bytes = x->bytes;
            return x->payload;
        }
    uint8_t *p = cold_get(pc, key, expect);
    *bytes = expect;
    if (p && !hot_put(pc, key, p, expect))
        *owned = p;
    return p;
}

/* Whether `key` is cached, without loading a cold entry. */
static bool cached(struct prefix_cache *pc, const uint8_t key[32])
{
    for (struct prefix_entry *x = pc->lru; x; x = x->next)
        if (!memcmp(x->key, key, 32))
            return true;
    if (!pc->o.cold_dir)
        return false;
    char *path = cold_path(pc, key);
    struct stat st;
    bool yes = path && stat(path, &st) == 0;
    free(path);
    return yes;
}

/* ---- snapshots ---- */

/* Positions a block entry holds for layer i: the block's own positions for a
 * full layer, the ring contents at the boundary for a sliding one. */
static void span(const struct runner *r, int64_t i, int64_t start, int64_t end, int64_t *p0, int64_t *p1)
{
    int64_t W = r->m->cfg.sliding_window;
    bool ring = r->m->cfg.layers[i].type == LT_SLIDING;
    *p0 = ring ? (end - W > 0 ? end - W : 0) : start;
    *p1 = end;
}

/* Serializes (or, with restore, deserializes) a block's state. */
static int block_io(struct runner *r, int seq, int64_t start, int64_t end, uint8_t *payload, size_t *bytes,
                    bool restore, bool last_block, struct err *e)
{
    const struct gp_config *c = &r->m->cfg;
    size_t o = 0;
    for (int64_t i = 0; i < c->n_layers; i++) {
        if (c->layers[i].shared)
            continue;
        struct kv_cache *kc = &r->seq[seq].cache[i];
        int64_t p0, p1;
        span(r, i, start, end, &p0, &p1);
        bool write = !restore || !kc->ring || last_block;
        if (restore && write) {
            int rc = kv_cache_reserve(kc, end, e);
            if (rc != ERR_OK)
                return rc;
        }
        for (int64_t p = p0; p < p1; p++)
            o += kv_cache_entry_io(kc, p, payload && write ? payload + o : NULL, restore);
    }
    *bytes = o;
    return ERR_OK;
}

int prefix_prompt(struct prefix_cache *pc, struct runner *r, int seq, const int32_t *tokens, int64_t T, float *last,
                  struct err *e)
{
    int64_t B = pc->o.block, pos = 0;
    uint8_t key[32];
    memcpy(key, pc->ns, 32);
    if (r->seq[seq].pos != 0)
        return err_set(e, ERR_USAGE, "prefix cache: sequence %d is not empty", seq);
    /* restore the longest run of cached blocks, leaving at least one token:
     * each block's full-attention entries as it is found; the sliding rings
     * from the last block restored, of which we keep a private copy (a later
     * lookup may evict it from the hot tier) */
    uint8_t *ring_src = NULL;
    size_t ring_bytes = 0;
    for (int64_t end = B; end < T; end += B) {
        uint8_t k[32];
        size_t bytes, expect;
        uint8_t *owned;
        next_key(key, tokens + end - B, B, k);
        int rc = block_io(r, seq, end - B, end, NULL, &expect, true, false, e);
        if (rc != ERR_OK) {
            free(ring_src);
            return rc;
        }
        const uint8_t *p = lookup(pc, k, expect, &bytes, &owned);
        if (!p)
            break;
        if (bytes != expect) {
            warn(pc, "prefix cache: entry for tokens [0, %lld) holds %zu bytes, expected %zu; ignored", (long long)end,
                 bytes, expect);
            free(owned);
            break;
        }
        uint8_t *mine = owned ? owned : malloc(bytes ? bytes : 1);
        if (!mine)
            rc = err_set(e, ERR_NOMEM, "prefix cache: cannot allocate %zu bytes", bytes);
        if (rc == ERR_OK && !owned)
            memcpy(mine, p, bytes);
        if (rc == ERR_OK)
            rc = block_io(r, seq, end - B, end, mine, &bytes, true, false, e);
        if (rc != ERR_OK) {
            free(mine);
            free(ring_src);
            return rc;
        }
        free(ring_src);
        ring_src = mine;
        ring_bytes = bytes;
        memcpy(key, k, 32);
        pos = end;
        r->seq[seq].pos = end;
    }
    if (ring_src) {
        int rc = block_io(r, seq, pos - B, pos, ring_src, &ring_bytes, true, true, e);
        free(ring_src);
        if (rc != ERR_OK)
            return rc;
    }
    pc->hit_tokens += pos;
    /* compute the rest, stopping at every block boundary to store its state */
    int64_t V = r->m->cfg.vocab_size;
    float *tmp = malloc((size_t)V * sizeof *tmp);
    if (!tmp)
        return err_set(e, ERR_NOMEM, "out of memory");
    int rc = ERR_OK;
    while (pos < T && rc == ERR_OK) {
        int64_t next = (pos / B + 1) * B, n = (next < T ? next : T) - pos;
        struct runner_item it = {seq, tokens + pos, n, NULL};
        rc = runner_step(r, &it, 1, pos + n == T ? last : tmp, false, e);
        pos += n;
        if (rc == ERR_OK && pos % B == 0) {
            uint8_t k[32];
            size_t bytes;
            next_key(key, tokens + pos - B, B, k);
            memcpy(key, k, 32);
            if (cached(pc, k))
                continue;
            block_io(r, seq, pos - B, pos, NULL, &bytes, false, false, e);
            uint8_t *payload = malloc(bytes ? bytes : 1);
            if (!payload) {
                rc = err_set(e, ERR_NOMEM, "prefix cache: cannot allocate %zu bytes", bytes);
                break;
            }
            block_io(r, seq, pos - B, pos, payload, &bytes, false, false, e);
            cold_put(pc, k, payload, bytes);
            if (!hot_put(pc, k, payload, bytes))
                free(payload);
        }
    }
    free(tmp);
    return rc;
}

uint64_t prefix_cold_bytes(const struct prefix_cache *pc)
{
    if (!pc->o.cold_dir)
        return 0;
    DIR *d = opendir(pc->o.cold_dir);
    uint64_t total = 0;
    struct dirent *de;
    while (d && (de = readdir(d))) {
        size_t n = strlen(de->d_name);
        if (n < 5 || strcmp(de->d_name + n - 5, ".gpkc"))
            continue;
        char *p = fio_join(pc->o.cold_dir, de->d_name);
        struct stat st;
        if (p && stat(p, &st) == 0)
            total += (uint64_t)st.st_size;
        free(p);
    }
    if (d)
        closedir(d);
    return total;
}
