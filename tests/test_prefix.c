/* test_prefix.c - runner/prefix: the prefix cache, hot (RAM) and cold
 * (directory) tiers. A restored prefix gives bitwise the logits and tokens
 * of the run without the cache, in one run, across runs and in a batch;
 * hot-only mode writes nothing; corrupt or stale cold entries are discarded
 * with a warning; namespaces (KV options, block, kernels) never share
 * entries; memory stays within the hot tier's bound. Fixtures and helpers:
 * run_helpers.h. */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/fileio.h"
#include "tests/helpers.h"
#include "tests/run_helpers.h"

/* Names of the *.gpkc files in dir, sorted; returns the count. */
static int cold_files(const char *dir, char names[][80], int max)
{
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *de;
    while (d && (de = readdir(d))) {
        size_t l = strlen(de->d_name);
        if (l > 5 && !strcmp(de->d_name + l - 5, ".gpkc") && n < max && l < 80)
            strcpy(names[n++], de->d_name);
    }
    if (d)
        closedir(d);
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++)
            if (strcmp(names[i], names[j]) > 0) {
                char t[80];
                strcpy(t, names[i]);
                strcpy(names[i], names[j]);
                strcpy(names[j], t);
            }
    return n;
}

/* Every entry in the directory (anything but . and ..). */
static int dir_entries(const char *dir)
{
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *de;
    while (d && (de = readdir(d)))
        n += strcmp(de->d_name, ".") && strcmp(de->d_name, "..");
    if (d)
        closedir(d);
    return n;
}

/* Two prompts sharing a 32-token prefix in one run (hot tier): the second
 * restores 4 blocks and matches its no-cache run bitwise; then the same
 * prompts again restore as much as a prompt allows (T-1 rounded down). */
static void prefix_hot(int bits)
{
    struct fx f;
    fx_open(&f, "e2b");
    int64_t V = f.V;
    struct kv_opts kv = kvo(bits, true);
    int32_t a[LEN_A], b[LEN_B];
    prefix_prompts(&f, a, b);
    struct pref ra, rb;
    pref_make(&ra, &f.m, &kv, a, LEN_A);
    pref_make(&rb, &f.m, &kv, b, LEN_B);
    struct prefix_opts o = {.block = BLOCK, .hot_limit = 64u << 20};
    struct prun p;
    prun_open(&p, &f.m, &kv, &o);
    float *rows = malloc((size_t)(GEN * V) * sizeof *rows);
    int32_t gen[GEN];
    prun_prompt(&p, a, LEN_A, rows, gen);
    expect_ref(&ra, rows, gen, V, "A, cold start");
    cr_expect_eq(p.pc.hit_tokens, 0);
    prun_prompt(&p, b, LEN_B, rows, gen);
    expect_ref(&rb, rows, gen, V, "B after A");
    cr_expect_eq(p.pc.hit_tokens, SHARED, "B restores the shared 4 blocks: %lld", (long long)p.pc.hit_tokens);
    prun_prompt(&p, a, LEN_A, rows, gen);
    expect_ref(&ra, rows, gen, V, "A again");
    cr_expect_eq(p.pc.hit_tokens, 2 * SHARED, "A again restores blocks up to 32 (< T = 40)");
    prun_prompt(&p, b, LEN_B, rows, gen);
    expect_ref(&rb, rows, gen, V, "B again");
    cr_expect_eq(p.pc.hit_tokens, 2 * SHARED + 40, "B again restores 5 blocks");
    cr_expect_eq(p.pc.n_warnings, 0);
    cr_expect_eq(prefix_cold_bytes(&p.pc), 0, "hot only: no cold bytes");
    cr_expect_gt(p.pc.hot_bytes, 0);
    cr_expect_leq(p.pc.hot_bytes, o.hot_limit);
    prun_close(&p);
    free(rows);
    free(ra.rows);
    free(rb.rows);
    fx_close(&f);
}

Test(prefix, hot_float) { prefix_hot(0); }
Test(prefix, hot_kv4) { prefix_hot(4); }
Test(prefix, hot_kv8) { prefix_hot(8); }

/* session_run with a prefix cache: a batch of two prompts sharing the
 * prefix; generation equals each prompt alone. */
Test(prefix, session_batch)
{
    struct fx f;
    fx_open(&f, "e2b");
    for (int bits = 0; bits <= 4; bits += 4) {
        struct kv_opts kv = kvo(bits, true);
        int32_t a[LEN_A], b[LEN_B];
        prefix_prompts(&f, a, b);
        struct pref ra, rb;
        pref_make(&ra, &f.m, &kv, a, LEN_A);
        pref_make(&rb, &f.m, &kv, b, LEN_B);
        struct runner r;
        struct prefix_cache pc;
        struct err e = {0};
        runner_open(&r, &f.m, &kv, 2);
        struct prefix_opts o = {.block = BLOCK, .hot_limit = 64u << 20};
        cr_assert_eq(prefix_init(&pc, &r, &o, &e), ERR_OK, "%s", e.msg);
        int32_t *ptr[2] = {a, b};
        int64_t len[2] = {LEN_A, LEN_B};
        struct seqs3 q;
        seqs_set(&q, 2, ptr, len);
        struct session_opts so = {.generate = GEN, .top_p = 1.0f, .pc = &pc};
        struct session_result res;
        cr_assert_eq(session_run(&r, &q.s, &so, &res, &e), ERR_OK, "%s", e.msg);
        cr_expect_arr_eq(res.generated, ra.gen, sizeof ra.gen, "kv%d: batch A with the prefix cache", bits);
        cr_expect_arr_eq(res.generated + GEN, rb.gen, sizeof rb.gen, "kv%d: batch B with the prefix cache", bits);
        cr_expect_eq(pc.hit_tokens, SHARED, "kv%d: B restored A's shared blocks", bits);
        session_result_free(&res);
        prefix_free(&pc);
        runner_free(&r);
        free(ra.rows);
        free(rb.rows);
    }
    fx_close(&f);
}

/* Across runs: a fresh runner and cache on the same directory restore from
 * disk; files are whole (no temporary left behind). */
static void prefix_cold(int bits)
{
    struct fx f;
    fx_open(&f, "e2b");
    int64_t V = f.V;
    struct kv_opts kv = kvo(bits, true);
    int32_t a[LEN_A], b[LEN_B];
    prefix_prompts(&f, a, b);
    struct pref ra, rb;
    pref_make(&ra, &f.m, &kv, a, LEN_A);
    pref_make(&rb, &f.m, &kv, b, LEN_B);
    char *cold = subdir(f.tmp, "cold");
    struct prefix_opts o = {.block = BLOCK, .hot_limit = 64u << 20, .cold_dir = cold};
    float *rows = malloc((size_t)(GEN * V) * sizeof *rows);
    int32_t gen[GEN];
    struct prun p;
    prun_open(&p, &f.m, &kv, &o);
    prun_prompt(&p, a, LEN_A, rows, gen);
    expect_ref(&ra, rows, gen, V, "run 1");
    cr_expect_eq(p.pc.hit_tokens, 0);
    uint64_t cb = prefix_cold_bytes(&p.pc);
    prun_close(&p);
    char names[64][80];
    cr_expect_eq(cold_files(cold, names, 64), LEN_A / BLOCK, "one file per block boundary");
    cr_expect_eq(dir_entries(cold), LEN_A / BLOCK, "only whole entries in the directory");
    cr_expect_gt(cb, 0);

    prun_open(&p, &f.m, &kv, &o); /* another "run" */
    cr_expect_eq(p.pc.hot_bytes, 0, "a new run starts with an empty hot tier");
    cr_expect_eq(prefix_cold_bytes(&p.pc), cb);
    prun_prompt(&p, b, LEN_B, rows, gen);
    expect_ref(&rb, rows, gen, V, "run 2 (B, from disk)");
    cr_expect_eq(p.pc.hit_tokens, SHARED, "run 2 restores the shared blocks from disk");
    cr_expect_eq(p.pc.n_warnings, 0);
    cr_expect_eq(cold_files(cold, names, 64), LEN_A / BLOCK + 1, "B adds its own 5th block");
    prun_close(&p);

    prun_open(&p, &f.m, &kv, &o);
    prun_prompt(&p, b, LEN_B, rows, gen);
    expect_ref(&rb, rows, gen, V, "run 3 (B again)");
    cr_expect_eq(p.pc.hit_tokens, 40);
    prun_close(&p);
    free(rows);
    free(cold);
    free(ra.rows);
    free(rb.rows);
    fx_close(&f);
}

Test(prefix, cold_across_runs_float) { prefix_cold(0); }
Test(prefix, cold_across_runs_kv4) { prefix_cold(4); }

/* Hot-only mode never touches the disk: run in an empty working directory. */
Test(prefix, hot_only_writes_nothing)
{
    struct fx f;
    fx_open(&f, "e2b");
    int64_t V = f.V;
    char *cwd = subdir(f.tmp, "cwd");
    struct err e = {0};
    cr_assert_eq(fio_mkdirs(cwd, &e), ERR_OK);
    char old[4096];
    cr_assert(getcwd(old, sizeof old));
    cr_assert_eq(chdir(cwd), 0);
    int32_t a[LEN_A], b[LEN_B];
    prefix_prompts(&f, a, b);
    struct kv_opts kv = kvo(4, true);
    struct prefix_opts o = {.block = BLOCK, .hot_limit = 64u << 20, .cold_dir = NULL};
    struct prun p;
    prun_open(&p, &f.m, &kv, &o);
    float *rows = malloc((size_t)(GEN * V) * sizeof *rows);
    int32_t gen[GEN];
    prun_prompt(&p, a, LEN_A, rows, gen);
    prun_prompt(&p, b, LEN_B, rows, gen);
    cr_expect_eq(p.pc.hit_tokens, SHARED);
    cr_expect_eq(prefix_cold_bytes(&p.pc), 0);
    prun_close(&p);
    cr_expect_eq(dir_entries(cwd), 0, "hot-only mode wrote into the working directory");
    cr_expect_eq(dir_entries(f.tmp), 2, "hot-only mode wrote next to the model (only ckpt and cwd expected)");
    cr_assert_eq(chdir(old), 0);
    free(rows);
    free(cwd);
    fx_close(&f);
}

/* Corrupt or stale cold entries are discarded with a warning (and replaced
 * by a recomputed, identical entry); the result stays bitwise correct. */
Test(prefix, cold_corrupt, .timeout = TH_TIMEOUT(120))
{
    struct fx f;
    fx_open(&f, "e2b");
    int64_t V = f.V;
    struct kv_opts kv = kvo(4, true);
    int32_t a[LEN_A], b[LEN_B];
    prefix_prompts(&f, a, b);
    struct pref rb;
    pref_make(&rb, &f.m, &kv, b, LEN_B);
    char *cold = subdir(f.tmp, "cold");
    struct prefix_opts o = {.block = BLOCK, .hot_limit = 64u << 20, .cold_dir = cold};
    float *rows = malloc((size_t)(GEN * V) * sizeof *rows);
    int32_t gen[GEN];
    /* block i's file: the one a prompt of 8i + 1 tokens adds */
    char blk[5][80], names[64][80], prev[64][80];
    int nprev = 0;
    for (int i = 0; i < 5; i++) {
        struct prun p;
        prun_open(&p, &f.m, &kv, &o);
        prun_prompt(&p, b, BLOCK * (i + 1) + 1, rows, gen);
        prun_close(&p);
        int n = cold_files(cold, names, 64);
        cr_assert_eq(n, i + 1);
        for (int k = 0; k < n; k++) {
            bool old = false;
            for (int j = 0; j < nprev; j++)
                old |= !strcmp(names[k], prev[j]);
            if (!old)
                strcpy(blk[i], names[k]);
        }
        memcpy(prev, names, sizeof names);
        nprev = n;
    }
    enum { FLIP_PAYLOAD, TRUNCATE, MAGIC, HEADER_CRC, VERSION, STALE, EMPTY, PAYLOAD_CRC_FIELD, GROWN };
    static const struct {
        int kind, block;
        const char *why;
    } cases[] = {
        {FLIP_PAYLOAD, 0, "payload CRC"}, {FLIP_PAYLOAD, 2, "payload CRC"}, {TRUNCATE, 1, "size"},
        {MAGIC, 3, "not a gempack"},       {HEADER_CRC, 0, "header CRC"},   {VERSION, 2, "not a gempack"},
        {STALE, 1, "stale"},               {EMPTY, 0, "size"},              {PAYLOAD_CRC_FIELD, 3, "header CRC"},
        {GROWN, 2, "size"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int blkno = cases[c].block;
        char *path = fio_join(cold, blk[blkno]);
        size_t n;
        uint8_t *orig = th_read(path, &n);
        cr_assert(orig && n > 64);
        uint8_t *bad = malloc(n + 16);
        memcpy(bad, orig, n);
        size_t bn = n;
        switch (cases[c].kind) {
        case FLIP_PAYLOAD: bad[64 + (n - 64) / 2] ^= 0x10; break;
        case TRUNCATE: bn = 64 + (n - 64) / 2; break;
        case MAGIC: bad[0] = 'X'; break;
        case HEADER_CRC: bad[20] ^= 1; break;        /* inside the key: the header CRC catches it */
        case VERSION: bad[8] = 2; break;
        case STALE: {                                /* another block's (valid) file under this name */
            char *other = fio_join(cold, blk[blkno + 1]);
            free(bad);
            bad = th_read(other, &bn);
            free(other);
            break;
        }
        case EMPTY: bn = 0; break;
        case PAYLOAD_CRC_FIELD: bad[56] ^= 0xff; break;
        case GROWN: memset(bad + n, 0, 16); bn = n + 16; break;
        }
        FILE *fp = fopen(path, "wb");
        cr_assert(fp);
        cr_assert_eq(fwrite(bad, 1, bn, fp), bn);
        fclose(fp);
        free(bad);

        struct prun p;
        prun_open(&p, &f.m, &kv, &o);
        prun_prompt(&p, b, LEN_B, rows, gen);
        char what[80];
        snprintf(what, sizeof what, "corruption case %zu (block %d)", c, blkno + 1);
        expect_ref(&rb, rows, gen, V, what);
        cr_expect_eq(p.pc.hit_tokens, (int64_t)BLOCK * blkno, "%s: restores the %d blocks before the bad one", what,
                     blkno);
        cr_expect_geq(p.pc.n_warnings, 1, "%s: discarded without a warning", what);
        bool named = false;
        for (size_t w = 0; w < p.pc.n_warnings; w++) {
            named |= strstr(p.pc.warnings[w], blk[blkno]) != NULL && strstr(p.pc.warnings[w], cases[c].why);
            fprintf(stderr, "%s: warning: %s\n", what, p.pc.warnings[w]);
        }
        cr_expect(named, "%s: the warning names the file and says '%s'", what, cases[c].why);
        prun_close(&p);
        /* the bad file was removed, then the recomputed entry written again */
        size_t n2;
        uint8_t *now = th_read(path, &n2);
        cr_expect(now && n2 == n && !memcmp(now, orig, n), "%s: the entry was not replaced by a good one", what);
        free(now);
        free(orig);
        free(path);
        cr_expect_eq(dir_entries(cold), 5, "%s: only entries in the directory", what);
    }
    free(rows);
    free(cold);
    free(rb.rows);
    fx_close(&f);
}

/* Namespaces: bits, group, start, skip-last and block each get their own
 * entries; a float run after quantized runs on one directory gets no hit
 * and so never restores quantized state. */
Test(prefix, namespaces, .timeout = TH_TIMEOUT(120))
{
    struct fx f;
    fx_open(&f, "e2b");
    int64_t V = f.V;
    int32_t a[LEN_A], b[LEN_B];
    prefix_prompts(&f, a, b);
    char *cold = subdir(f.tmp, "cold");
    float *rows = malloc((size_t)(GEN * V) * sizeof *rows);
    int32_t gen[GEN];
    struct {
        struct kv_opts kv;
        int64_t block;
    } ns[] = {
        {kvo(4, true), BLOCK}, {kvo(0, true), BLOCK}, {kvo(4, false), BLOCK}, {kvo(8, true), BLOCK},
        {kvo(4, true), BLOCK}, {kvo(4, true), BLOCK}, {kvo(4, true), 16},
    };
    ns[4].kv.group_size = 32;
    ns[5].kv.start = 4;
    int files = 0;
    for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
        struct pref ref;
        pref_make(&ref, &f.m, &ns[k].kv, a, LEN_A);
        struct prefix_opts o = {.block = ns[k].block, .hot_limit = 64u << 20, .cold_dir = cold};
        struct prun p;
        prun_open(&p, &f.m, &ns[k].kv, &o);
        prun_prompt(&p, a, LEN_A, rows, gen);
        char what[160], name[100];
        snprintf(what, sizeof what, "%s block %lld after other namespaces", kv_name(&ns[k].kv, name, sizeof name),
                 (long long)ns[k].block);
        expect_ref(&ref, rows, gen, V, what);
        cr_expect_eq(p.pc.hit_tokens, 0, "%s: hit %lld tokens of another representation", what,
                     (long long)p.pc.hit_tokens);
        cr_expect_eq(p.pc.n_warnings, 0);
        files += (int)(LEN_A / ns[k].block);
        char names[64][80];
        cr_expect_eq(cold_files(cold, names, 64), files, "%s: its own files", what);
        prun_close(&p);
        free(ref.rows);
    }
    /* each namespace still finds its own entries */
    for (size_t k = 0; k < 2; k++) {
        struct pref ref;
        pref_make(&ref, &f.m, &ns[k].kv, b, LEN_B);
        struct prefix_opts o = {.block = BLOCK, .hot_limit = 64u << 20, .cold_dir = cold};
        struct prun p;
        prun_open(&p, &f.m, &ns[k].kv, &o);
        prun_prompt(&p, b, LEN_B, rows, gen);
        expect_ref(&ref, rows, gen, V, k ? "float B" : "kv4 B");
        cr_expect_eq(p.pc.hit_tokens, SHARED);
        prun_close(&p);
        free(ref.rows);
    }
    free(rows);
    free(cold);
    fx_close(&f);
}

/* The exact kernels of every level give the same bits, so a best run
 * restores a scalar run's cold entries; the int8 kernels round differently,
 * so their entries are another namespace: a miss, and a hit stays bitwise
 * the run without the cache. */
Test(prefix, kernels_namespace)
{
    struct fx f;
    fx_open(&f, "e2b");
    int64_t V = f.V;
    int32_t a[LEN_A], b[LEN_B];
    prefix_prompts(&f, a, b);
    char *cold = subdir(f.tmp, "cold");
    struct prefix_opts o = {.block = BLOCK, .hot_limit = 64u << 20, .cold_dir = cold};
    static const enum kern_level lv[3] = {KERN_SCALAR, KERN_BEST, KERN_Q8};
    float *ref[3], *got[3];
    int64_t hits[3];
    for (int k = 0; k < 3; k++) {
        struct runner r;
        struct prefix_cache pc;
        struct err e = {0};
        ref[k] = malloc((size_t)V * sizeof(float));
        got[k] = malloc((size_t)V * sizeof(float));
        cr_assert_eq(runner_init(&r, &f.m, TH_RUNNER(1, lv[k], TEST_CONTEXT), &e), ERR_OK, "%s", e.msg);
        cr_assert_eq(runner_prompt(&r, b, LEN_B, 0, NULL, ref[k], &e), ERR_OK, "%s", e.msg);
        runner_reset(&r, 0);
        cr_assert_eq(prefix_init(&pc, &r, &o, &e), ERR_OK, "%s", e.msg);
        cr_assert_eq(prefix_prompt(&pc, &r, 0, k ? b : a, k ? LEN_B : LEN_A, got[k], &e), ERR_OK, "%s", e.msg);
        hits[k] = pc.hit_tokens;
        if (k) /* the first run is on prompt a, which writes the blocks b shares */
            cr_expect(rows_equal(ref[k], got[k], 1, V), "level %d: a hit is not bitwise the run without the cache", k);
        prefix_free(&pc);
        runner_free(&r);
    }
    cr_expect_eq(hits[0], 0);
    cr_expect(rows_equal(ref[0], ref[1], 1, V), "scalar and best kernels: not the same bits");
    cr_expect_eq(hits[1], SHARED, "best restores the scalar run's shared blocks");
    if (kern_has_q8())
        cr_expect_eq(hits[2], 0, "an int8 run restored %lld tokens computed by the exact kernels", (long long)hits[2]);
    for (int k = 0; k < 3; k++) {
        free(ref[k]);
        free(got[k]);
    }
    free(cold);
    fx_close(&f);
}

/* Memory stays bounded on a prompt of 20 blocks: the hot tier holds at most
 * its limit (about 3 entries) while the run produced 20 entries; the cold
 * tier keeps them all, so a later run restores 19 blocks from disk. */
static void prefix_memory(int bits, double limit_entries)
{
    struct fx f;
    fx_open(&f, "e2b");
    int64_t V = f.V, T = 20 * BLOCK;
    struct kv_opts kv = kvo(bits, true);
    int32_t *tok = malloc((size_t)T * sizeof *tok);
    for (int64_t t = 0; t < T; t++)
        tok[t] = (int32_t)((f.tok[t % 24] + 31 * (t / 24)) % 512);
    struct pref ref;
    pref_make(&ref, &f.m, &kv, tok, T);
    float *rows = malloc((size_t)(GEN * V) * sizeof *rows);
    int32_t gen[GEN];

    /* the size of one entry: an unbounded hot-only run holds all 20 */
    struct prefix_opts big = {.block = BLOCK, .hot_limit = (size_t)1 << 30};
    struct prun p;
    prun_open(&p, &f.m, &kv, &big);
    prun_prompt(&p, tok, T, rows, gen);
    size_t total = p.pc.hot_bytes, entry = total / 20;
    cr_assert_eq(entry * 20, total, "entries of equal size (window = block)");
    prun_close(&p);

    char *cold = subdir(f.tmp, "cold");
    struct prefix_opts o = {.block = BLOCK, .hot_limit = (size_t)((double)entry * limit_entries), .cold_dir = cold};
    prun_open(&p, &f.m, &kv, &o);
    prun_prompt(&p, tok, T, rows, gen);
    expect_ref(&ref, rows, gen, V, "bounded, first pass");
    cr_expect_leq(p.pc.hot_bytes, o.hot_limit, "hot tier %zu bytes over its limit %zu", p.pc.hot_bytes, o.hot_limit);
    cr_expect_geq(p.pc.hot_bytes, (size_t)limit_entries * entry, "the hot tier keeps the most recent entries");
    cr_expect_gt(total, o.hot_limit, "the run produced more than the limit (%zu > %zu): evictions happened", total,
                 o.hot_limit);
    char names[64][80];
    cr_expect_eq(cold_files(cold, names, 64), 20);
    cr_expect_eq(prefix_cold_bytes(&p.pc), 20 * (64 + entry));
    /* again in the same run: blocks 1.. were evicted from RAM, come from disk */
    prun_prompt(&p, tok, T, rows, gen);
    expect_ref(&ref, rows, gen, V, "bounded, same run again");
    cr_expect_eq(p.pc.hit_tokens, T - BLOCK, "19 blocks restored");
    cr_expect_leq(p.pc.hot_bytes, o.hot_limit);
    cr_expect_eq(p.pc.n_warnings, 0);
    prun_close(&p);
    /* a later run */
    prun_open(&p, &f.m, &kv, &o);
    prun_prompt(&p, tok, T, rows, gen);
    expect_ref(&ref, rows, gen, V, "bounded, later run");
    cr_expect_eq(p.pc.hit_tokens, T - BLOCK, "19 blocks restored from disk");
    cr_expect_leq(p.pc.hot_bytes, o.hot_limit);
    prun_close(&p);
    /* hot only with the same bound: block 1 was evicted, so no hit, but correct */
    o.cold_dir = NULL;
    prun_open(&p, &f.m, &kv, &o);
    prun_prompt(&p, tok, T, rows, gen);
    prun_prompt(&p, tok, T, rows, gen);
    expect_ref(&ref, rows, gen, V, "bounded hot only, again");
    cr_expect_eq(p.pc.hit_tokens, 0, "the first blocks were evicted");
    cr_expect_leq(p.pc.hot_bytes, o.hot_limit);
    prun_close(&p);
    free(cold);
    free(rows);
    free(tok);
    free(ref.rows);
    fx_close(&f);
}

Test(prefix, memory_bound_float, .timeout = TH_TIMEOUT(120)) { prefix_memory(0, 3.5); }
Test(prefix, memory_bound_kv4, .timeout = TH_TIMEOUT(120)) { prefix_memory(4, 3.5); }
/* A hot tier of barely one entry: restoring must not lose the entry being
 * restored to the eviction the look-ahead at the next block causes. */
Test(prefix, memory_bound_one_entry, .timeout = TH_TIMEOUT(120)) { prefix_memory(0, 1.5); }
