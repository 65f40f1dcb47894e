/* test_session.c - runner/session and runner_step: batched decoding.
 * Prompts of different lengths run as one batch (session_run in every mode,
 * greedy and sampled; runner_step with items out of order and chunks that
 * drop out) give bitwise the logits and tokens of each prompt run alone; bad
 * batches are refused; an all-true key mask equals no mask and a mask hides
 * only its own sequence's key. Fixtures and helpers: run_helpers.h. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "tests/helpers.h"
#include "tests/run_helpers.h"

/* Batched vs single sequence: the bar; the runner is bitwise. */
#define BATCH_MAX_ABS 1e-5

/* 3 prompts (24, 7, 13 tokens) as one batch in each mode: every sequence's
 * logits and generated tokens are bitwise those of running it alone. */
static void batch_session(const char *variant, int bits)
{
    struct fx f;
    fx_open(&f, variant);
    int64_t V = f.V;
    struct kv_opts kv = kvo(bits, true);
    int32_t p[3][24];
    int64_t len[3];
    batch_prompts(&f, p, len);
    int32_t *ptr[3] = {p[0], p[1], p[2]};
    float *ref[3];
    int32_t gen[3][GEN], sgen[3][GEN];
    for (int b = 0; b < 3; b++) {
        ref[b] = malloc((size_t)(len[b] * V) * sizeof(float));
        session_one(&f.m, &kv, p[b], len[b], 0, 0.0f, 0, ref[b], gen[b]);
        /* sampled: sequence b of a batch uses seed + b */
        session_one(&f.m, &kv, p[b], len[b], 0, 0.9f, 41 + (uint64_t)b, NULL, sgen[b]);
    }
    static const int64_t chunks[] = {0, 5, 1};
    for (size_t k = 0; k < 3; k++) {
        for (int sampled = 0; sampled < 2; sampled++) {
            struct runner r;
            struct err e = {0};
            runner_open(&r, &f.m, &kv, 3);
            struct seqs3 q;
            seqs_set(&q, 3, ptr, len);
            struct session_opts so = {.chunk = chunks[k], .generate = GEN, .temperature = sampled ? 0.9f : 0.0f,
                                      .top_p = 1.0f, .seed = 41, .all_logits = true};
            struct session_result res;
            cr_assert_eq(session_run(&r, &q.s, &so, &res, &e), ERR_OK, "%s", e.msg);
            cr_assert_eq(res.n, 3);
            cr_assert_eq(res.tmax, 24);
            for (int b = 0; b < 3; b++) {
                const float *rows = res.logits + (int64_t)b * res.tmax * V;
                cr_expect_eq(res.len[b], len[b]);
                double d = max_abs_diff(rows, ref[b], len[b] * V);
                cr_expect_leq(d, BATCH_MAX_ABS, "%s kv%d chunk %lld: sequence %d off by %.3g", variant, bits,
                              (long long)chunks[k], b, d);
                cr_expect(rows_equal(rows, ref[b], len[b], V), "%s kv%d chunk %lld: sequence %d not bitwise alone",
                          variant, bits, (long long)chunks[k], b);
                bool zero = true;
                for (int64_t i = len[b] * V; i < res.tmax * V; i++)
                    zero &= rows[i] == 0.0f;
                cr_expect(zero, "rows past the end of prompt %d are zero", b);
                cr_expect_arr_eq(res.generated + b * GEN, sampled ? sgen[b] : gen[b], GEN * sizeof(int32_t),
                                 "%s kv%d chunk %lld %s: generation of sequence %d differs from alone", variant, bits,
                                 (long long)chunks[k], sampled ? "sampled" : "greedy", b);
            }
            cr_expect_eq(res.prefill_tokens, 44);
            cr_expect_eq(res.decode_tokens, 3 * (GEN - 1));
            session_result_free(&res);
            runner_free(&r);
        }
    }
    for (int b = 0; b < 3; b++)
        free(ref[b]);
    fx_close(&f);
}

struct told {
    int32_t ids[3][GEN];
    int n[3];
};

static void tell(void *ctx, int seq, int32_t id)
{
    struct told *t = ctx;
    t->ids[seq][t->n[seq]++] = id;
}

/* Stop ids: a sequence ends with the first one it generates, the others go
 * on, each still bitwise its run alone; every id is told as it comes. */
Test(session, stop_ids_end_a_sequence, .timeout = TH_TIMEOUT(120))
{
    struct fx f;
    fx_open(&f, "e2b");
    struct kv_opts kv = kvo(0, true);
    int32_t p[3][24], gen[3][GEN];
    int64_t len[3];
    batch_prompts(&f, p, len);
    int32_t *ptr[3] = {p[0], p[1], p[2]};
    for (int b = 0; b < 3; b++)
        session_one(&f.m, &kv, p[b], len[b], 0, 0.0f, 0, NULL, gen[b]);
    int32_t stop[2] = {gen[1][2], -1};
    int64_t want[3], decoded = 0;
    for (int b = 0; b < 3; b++) {
        want[b] = GEN;
        for (int k = GEN - 1; k >= 0; k--)
            want[b] = gen[b][k] == stop[0] ? k + 1 : want[b];
        decoded += want[b] - 1; /* fed back after each id but its last */
    }
    cr_assert_leq(want[1], 3);
    struct runner r;
    struct err e = {0};
    runner_open(&r, &f.m, &kv, 3);
    struct seqs3 q;
    seqs_set(&q, 3, ptr, len);
    struct told t = {0};
    struct session_opts so = {.generate = GEN, .top_p = 1.0f, .stop = stop, .n_stop = 2, .on_token = tell, .ctx = &t};
    struct session_result res;
    cr_assert_eq(session_run(&r, &q.s, &so, &res, &e), ERR_OK, "%s", e.msg);
    for (int b = 0; b < 3; b++) {
        cr_expect_eq(res.n_generated[b], want[b], "sequence %d: %lld ids, expected %lld", b,
                     (long long)res.n_generated[b], (long long)want[b]);
        cr_expect_arr_eq(res.generated + b * GEN, gen[b], (size_t)want[b] * sizeof(int32_t));
        cr_expect_eq(t.n[b], want[b]);
        cr_expect_arr_eq(t.ids[b], gen[b], (size_t)want[b] * sizeof(int32_t));
    }
    cr_expect_eq(res.decode_tokens, decoded);
    session_result_free(&res);
    runner_free(&r);
    fx_close(&f);
}

Test(session, batch_session_e2b_shared_kv, .timeout = TH_TIMEOUT(120)) { batch_session("e2b", 0); }
Test(session, batch_session_26b_moe, .timeout = TH_TIMEOUT(120)) { batch_session("26b-a4b", 0); }
Test(session, batch_session_e2b_kv4, .timeout = TH_TIMEOUT(120)) { batch_session("e2b", 4); }
Test(session, batch_session_31b_kv8, .timeout = TH_TIMEOUT(120)) { batch_session("31b", 8); }

/* runner_step directly: items in another order than their sequences,
 * chunks of 5 (items drop out as their prompts end), then a joint decode
 * step; each equals the sequence run alone. Bad batches are refused. */
static void batch_step(const char *variant, int bits)
{
    struct fx f;
    fx_open(&f, variant);
    int64_t V = f.V;
    struct kv_opts kv = kvo(bits, true);
    int32_t p[3][24];
    int64_t len[3];
    batch_prompts(&f, p, len);
    int32_t next[3] = {17, 300, 2};
    float *ref[3], *got[3];
    for (int b = 0; b < 3; b++) {
        /* alone: prompt then one decode token, rows [len + 1, V] */
        int32_t seq[25];
        memcpy(seq, p[b], (size_t)len[b] * sizeof *seq);
        seq[len[b]] = next[b];
        ref[b] = run_prefill_decode(&f.m, &kv, seq, len[b], len[b] + 1);
        got[b] = calloc((size_t)((len[b] + 1) * V), sizeof(float));
    }
    struct runner r;
    struct err e = {0};
    runner_open(&r, &f.m, &kv, 3);
    float *rows = malloc((size_t)(15 * V) * sizeof *rows);
    int64_t done[3] = {0};
    for (;;) {
        struct runner_item it[3];
        int n = 0;
        static const int order[3] = {2, 0, 1};
        for (int k = 0; k < 3; k++) {
            int b = order[k];
            int64_t left = len[b] - done[b];
            if (left > 0)
                it[n++] = (struct runner_item){b, p[b] + done[b], left < 5 ? left : 5, NULL};
        }
        if (!n)
            break;
        cr_assert_eq(runner_step(&r, it, n, rows, true, &e), ERR_OK, "%s", e.msg);
        int64_t row = 0;
        for (int k = 0; k < n; k++) {
            memcpy(got[it[k].seq] + done[it[k].seq] * V, rows + row * V, (size_t)(it[k].n * V) * sizeof *rows);
            row += it[k].n;
            done[it[k].seq] += it[k].n;
        }
    }
    struct runner_item dec[3] = {{1, &next[1], 1, NULL}, {2, &next[2], 1, NULL}, {0, &next[0], 1, NULL}};
    cr_assert_eq(runner_step(&r, dec, 3, rows, false, &e), ERR_OK, "%s", e.msg);
    for (int k = 0; k < 3; k++)
        memcpy(got[dec[k].seq] + len[dec[k].seq] * V, rows + k * V, (size_t)V * sizeof *rows);
    for (int b = 0; b < 3; b++) {
        cr_expect(rows_equal(got[b], ref[b], len[b] + 1, V), "%s kv%d: runner_step sequence %d not bitwise alone",
                  variant, bits, b);
        cr_expect_eq(r.seq[b].pos, len[b] + 1);
    }
    /* refused: a sequence twice, an unknown sequence, an empty chunk */
    struct runner_item twice[2] = {{0, next, 1, NULL}, {0, next, 1, NULL}};
    cr_expect_eq(runner_step(&r, twice, 2, rows, false, &e), ERR_USAGE);
    struct runner_item unknown = {3, next, 1, NULL}, empty = {1, next, 0, NULL};
    cr_expect_eq(runner_step(&r, &unknown, 1, rows, false, &e), ERR_USAGE);
    cr_expect_eq(runner_step(&r, &empty, 1, rows, false, &e), ERR_USAGE);
    for (int b = 0; b < 3; b++)
        cr_expect_eq(r.seq[b].pos, len[b] + 1, "a refused step changes no sequence");
    free(rows);
    runner_free(&r);
    for (int b = 0; b < 3; b++) {
        free(ref[b]);
        free(got[b]);
    }
    fx_close(&f);
}

Test(session, batch_runner_step_e2b) { batch_step("e2b", 0); }
Test(session, batch_runner_step_26b_kv4) { batch_step("26b-a4b", 4); }

/* An explicit all-true key_mask and no mask: bitwise identical, in a batch
 * prefill and in a 1-token decode step (the attention itself); a mask that
 * hides a key changes that query's output only. */
static void batch_mask(int bits)
{
    struct fx f;
    fx_open(&f, "e2b");
    int64_t V = f.V;
    struct kv_opts kv = kvo(bits, true);
    int32_t p[3][24];
    int64_t len[3];
    batch_prompts(&f, p, len);
    uint8_t *ones = malloc(25 * 25);
    memset(ones, 1, 25 * 25);
    struct runner r[2];
    struct err e = {0};
    float *out[2];
    for (int k = 0; k < 2; k++) {
        runner_open(&r[k], &f.m, &kv, 3);
        out[k] = malloc((size_t)(44 * V) * sizeof(float));
        struct runner_item it[3];
        for (int b = 0; b < 3; b++)
            it[b] = (struct runner_item){b, p[b], len[b], k ? ones : NULL}; /* [n, 0 + n] */
        cr_assert_eq(runner_step(&r[k], it, 3, out[k], true, &e), ERR_OK, "%s", e.msg);
    }
    cr_expect(rows_equal(out[0], out[1], 44, V), "kv%d: an all-true mask changed a batch prefill", bits);

    /* 1-token steps: mask [1, pos + 1] */
    int32_t tok[3] = {5, 6, 7};
    for (int k = 0; k < 2; k++) {
        struct runner_item it[3];
        for (int b = 0; b < 3; b++)
            it[b] = (struct runner_item){b, &tok[b], 1, k ? ones : NULL};
        cr_assert_eq(runner_step(&r[k], it, 3, out[k], false, &e), ERR_OK, "%s", e.msg);
    }
    cr_expect(rows_equal(out[0], out[1], 3, V), "kv%d: an all-true mask changed a decode step", bits);

    /* the mask is live: in the next step hide key 0 of sequence 0 (outside
     * the window: only the full layers, own and KV-shared, see it), then
     * the newest key of sequence 2 (the sliding layers see it) */
    for (int which = 0; which < 2; which++) {
        struct runner c[2];
        float *o[2];
        int hide_seq = which ? 2 : 0;
        for (int k = 0; k < 2; k++) {
            runner_open(&c[k], &f.m, &kv, 3);
            o[k] = malloc((size_t)(3 * V) * sizeof(float));
            struct runner_item it[3];
            for (int b = 0; b < 3; b++)
                it[b] = (struct runner_item){b, p[b], len[b], NULL};
            cr_assert_eq(runner_step(&c[k], it, 3, o[k], false, &e), ERR_OK, "%s", e.msg);
        }
        int64_t P = len[hide_seq];
        uint8_t *mask = malloc((size_t)(P + 1));
        memset(mask, 1, (size_t)(P + 1));
        mask[which ? P - 1 : 0] = 0;
        for (int k = 0; k < 2; k++) {
            struct runner_item it[3];
            for (int b = 0; b < 3; b++)
                it[b] = (struct runner_item){b, &tok[b], 1, k && b == hide_seq ? mask : NULL};
            cr_assert_eq(runner_step(&c[k], it, 3, o[k], false, &e), ERR_OK, "%s", e.msg);
        }
        for (int b = 0; b < 3; b++) {
            bool same = rows_equal(o[0] + b * V, o[1] + b * V, 1, V);
            if (b == hide_seq)
                cr_expect(!same, "kv%d: hiding key %lld of sequence %d had no effect", bits,
                          (long long)(which ? P - 1 : 0), b);
            else
                cr_expect(same, "kv%d: a mask on sequence %d changed sequence %d", bits, hide_seq, b);
        }
        free(mask);
        for (int k = 0; k < 2; k++) {
            free(o[k]);
            runner_free(&c[k]);
        }
    }
    for (int k = 0; k < 2; k++) {
        free(out[k]);
        runner_free(&r[k]);
    }
    free(ones);
    fx_close(&f);
}

Test(session, batch_mask_all_true_float) { batch_mask(0); }
Test(session, batch_mask_all_true_kv4) { batch_mask(4); }
