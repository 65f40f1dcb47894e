#include "runner/session.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runner/sample.h"

static double seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void session_limits(const struct token_seqs *s, const struct session_opts *o, int64_t prefix_block,
                    int64_t *max_step, int64_t *max_context)
{
    int64_t step = s->n, longest = 0, prefill = 0;
    for (int b = 0; b < s->n; b++) {
        int64_t len = s->len[b], chunk = prefix_block ? prefix_block : o->chunk > 0 ? o->chunk : len;
        longest = len > longest ? len : longest;
        prefill += chunk < len ? chunk : len;
        if (prefix_block) /* one prompt at a time through the prefix cache */
            step = (chunk < len ? chunk : len) > step ? (chunk < len ? chunk : len) : step;
    }
    *max_step = prefix_block || prefill < step ? step : prefill;
    *max_context = longest + (o->generate > 1 ? o->generate - 1 : 0);
}

/* Prefill of all prompts in lockstep chunks; last[b] gets prompt b's final logits. */
static int prefill(struct runner *r, const struct token_seqs *s, const struct session_opts *o,
                   struct session_result *res, float *last, struct err *e)
{
    int64_t V = r->m->cfg.vocab_size, step_rows = 0;
    int B = s->n;
    for (int b = 0; b < B; b++)
        step_rows += o->chunk > 0 && o->chunk < s->len[b] ? o->chunk : s->len[b];
    struct runner_item *items = calloc((size_t)B, sizeof *items);
    int64_t *done = calloc((size_t)B, sizeof *done);
    float *rows = malloc((size_t)((o->all_logits ? step_rows : B) * V) * sizeof *rows);
    int rc = items && done && rows ? ERR_OK : err_set(e, ERR_NOMEM, "out of memory");
    while (rc == ERR_OK) {
        int n = 0;
        for (int b = 0; b < B; b++) {
            int64_t left = s->len[b] - done[b];
            if (left > 0)
                items[n++] = (struct runner_item){b, s->seq[b] + done[b], o->chunk > 0 && o->chunk < left ? o->chunk : left,
                                                  NULL};
        }
        if (!n)
            break;
        if ((rc = runner_step(r, items, n, rows, o->all_logits, e)) != ERR_OK)
            break;
        int64_t row = 0;
        for (int k = 0; k < n; k++) {
            int b = items[k].seq;
            int64_t cnt = o->all_logits ? items[k].n : 1;
            if (o->all_logits)
                memcpy(res->logits + (b * res->tmax + done[b]) * V, rows + row * V, (size_t)(cnt * V) * sizeof *rows);
            done[b] += items[k].n;
            if (done[b] == s->len[b])
                memcpy(last + b * V, rows + (row + cnt - 1) * V, (size_t)V * sizeof *rows);
            row += cnt;
        }
    }
    free(items);
    free(done);
    free(rows);
    return rc;
}

int session_run(struct runner *r, const struct token_seqs *s, const struct session_opts *o,
                struct session_result *res, struct err *e)
{
    memset(res, 0, sizeof *res);
    int B = s->n;
    int64_t V = r->m->cfg.vocab_size, G = o->generate;
    if (B > r->o.n_seq)
        return err_set(e, ERR_USAGE, "%d prompts for a runner of %d sequences", B, r->o.n_seq);
    res->n = B;
    res->len = malloc((size_t)B * sizeof *res->len);
    for (int b = 0; res->len && b < B; b++) {
        res->len[b] = s->len[b];
        res->tmax = s->len[b] > res->tmax ? s->len[b] : res->tmax;
        res->prefill_tokens += s->len[b];
    }
    res->generated = malloc((size_t)(B * (G ? G : 1)) * sizeof *res->generated);
    if (o->all_logits)
        res->logits = calloc((size_t)(B * res->tmax * V), sizeof *res->logits);
    float *last = malloc((size_t)(B * V) * sizeof *last);
    struct sampler *smp = calloc((size_t)B, sizeof *smp);
    struct runner_item *items = calloc((size_t)B, sizeof *items);
    int rc = res->len && res->generated && last && smp && items && (!o->all_logits || res->logits)
                 ? ERR_OK
                 : err_set(e, ERR_NOMEM, "cannot allocate logits for %d prompts", B);
    double t0 = seconds();
    if (rc == ERR_OK && o->pc) {
        for (int b = 0; b < B && rc == ERR_OK; b++)
            rc = prefix_prompt(o->pc, r, b, s->seq[b], s->len[b], last + b * V, e);
    } else if (rc == ERR_OK) {
        rc = prefill(r, s, o, res, last, e);
    }
    double t1 = seconds();
    for (int b = 0; b < B; b++)
        sampler_init(&smp[b], o->temperature, o->top_k, o->top_p, o->seed + (uint64_t)b);
    for (int64_t k = 0; rc == ERR_OK && k < G; k++) {
        for (int b = 0; b < B; b++) {
            res->generated[b * G + k] = sampler_next(&smp[b], last + b * V, V);
            items[b] = (struct runner_item){b, &res->generated[b * G + k], 1, NULL};
        }
        if (k + 1 < G) {
            rc = runner_step(r, items, B, last, false, e);
            res->decode_tokens += B;
        }
    }
    res->prefill_s = t1 - t0;
    res->decode_s = seconds() - t1;
    free(last);
    free(smp);
    free(items);
    return rc;
}

void session_result_free(struct session_result *res)
{
    free(res->len);
    free(res->logits);
    free(res->generated);
    memset(res, 0, sizeof *res);
}
