#include "runner/session.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/fileio.h"
#include "core/npz.h"
#include "gp_config.h"
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

static bool is_stop(const struct session_opts *o, int32_t id)
{
    for (int i = 0; i < o->n_stop; i++)
        if (o->stop[i] == id)
            return true;
    return false;
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
    res->n_generated = calloc((size_t)B, sizeof *res->n_generated);
    if (o->all_logits)
        res->logits = calloc((size_t)(B * res->tmax * V), sizeof *res->logits);
    float *last = malloc((size_t)(B * V) * sizeof *last), *rows = malloc((size_t)(B * V) * sizeof *rows);
    struct sampler *smp = calloc((size_t)B, sizeof *smp);
    struct runner_item *items = calloc((size_t)B, sizeof *items);
    int rc = res->len && res->generated && res->n_generated && last && rows && smp && items &&
                     (!o->all_logits || res->logits)
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
    int live = B; /* the sequences still generating are items[0, live) after each step */
    for (int b = 0; b < B; b++)
        items[b].seq = b;
    for (int64_t k = 0; rc == ERR_OK && k < G && live > 0; k++) {
        int next = 0;
        for (int i = 0; i < live; i++) {
            int b = items[i].seq;
            int32_t *id = &res->generated[b * G + k];
            *id = sampler_next(&smp[b], last + b * V, V);
            res->n_generated[b]++;
            if (o->on_token)
                o->on_token(o->ctx, b, *id);
            if (!is_stop(o, *id))
                items[next++] = (struct runner_item){b, id, 1, NULL};
        }
        live = next;
        if (k + 1 < G && live > 0) {
            rc = runner_step(r, items, live, rows, false, e);
            for (int i = 0; i < live; i++)
                memcpy(last + items[i].seq * V, rows + i * V, (size_t)V * sizeof *rows);
            res->decode_tokens += live;
        }
    }
    res->prefill_s = t1 - t0;
    res->decode_s = seconds() - t1;
    free(last);
    free(rows);
    free(smp);
    free(items);
    return rc;
}

void session_result_free(struct session_result *res)
{
    free(res->len);
    free(res->logits);
    free(res->generated);
    free(res->n_generated);
    memset(res, 0, sizeof *res);
}

/* The JSON report of a run. */
static struct json_object *run_json(const struct runner *r, const struct token_seqs *s, const struct run_config *c,
                                    const struct session_result *res, const struct prefix_cache *pc, double pf,
                                    double dc, size_t cache_bytes)
{
    struct json_object *j = json_object_new_object(), *g = json_object_new_array(), *kv = json_object_new_object();
    for (int b = 0; b < s->n; b++) {
        struct json_object *row = json_object_new_array();
        for (int64_t k = 0; k < res->n_generated[b]; k++)
            json_object_array_add(row, json_object_new_int(res->generated[b * c->s.generate + k]));
        json_object_array_add(g, row);
    }
    json_object_object_add(j, "schema", json_object_new_string("gempack.run/1"));
    json_object_object_add(j, "sequences", json_object_new_int(s->n));
    json_object_object_add(j, "prompt_tokens", json_object_new_int64(res->prefill_tokens));
    json_object_object_add(j, "generated", s->n == 1 ? json_object_get(json_object_array_get_idx(g, 0)) : json_object_get(g));
    json_object_put(g);
    json_object_object_add(j, "prefill_seconds", json_object_new_double(res->prefill_s));
    json_object_object_add(j, "prefill_tokens_per_s", json_object_new_double(pf));
    json_object_object_add(j, "decode_tokens_per_s", json_object_new_double(dc));
    json_object_object_add(j, "bytes_per_token", json_object_new_int64((int64_t)r->m->weight_bytes));
    json_object_object_add(j, "weights", json_object_new_string(r->m->arena ? "copied" : "mapped"));
    json_object_object_add(j, "threads", json_object_new_int(c->threads));
    json_object_object_add(j, "kernels", json_object_new_string(r->kt.name));
    json_object_object_add(j, "int8_kernels", r->kt.q8dot ? json_object_new_string(r->kt.q8name) : NULL);
    json_object_object_add(kv, "bits", json_object_new_int(r->o.kv.bits));
    json_object_object_add(kv, "group_size", json_object_new_int(r->o.kv.group_size));
    json_object_object_add(kv, "start", json_object_new_int64(r->o.kv.start));
    json_object_object_add(kv, "skip_last_full_attention", json_object_new_boolean(r->o.kv.skip_last_full));
    json_object_object_add(kv, "float_layer", r->kv_float_layer >= 0 ? json_object_new_int(r->kv_float_layer) : NULL);
    json_object_object_add(kv, "cache_bytes", json_object_new_int64((int64_t)cache_bytes));
    json_object_object_add(j, "kv_cache", kv);
    json_object_object_add(j, "prefix_cache_hit_tokens", json_object_new_int64(pc->hit_tokens));
    json_object_object_add(j, "prefix_cache_hot_bytes", json_object_new_int64((int64_t)pc->hot_bytes));
    json_object_object_add(j, "prefix_cache_cold_bytes", json_object_new_int64((int64_t)prefix_cold_bytes(pc)));
    return j;
}

/* The text report of a run. */
static void run_print(FILE *out, const struct runner *r, const struct token_seqs *s, const struct run_config *c,
                      const struct session_result *res, const struct prefix_cache *pc, double pf, double dc)
{
    fprintf(out, "%d prompt%s, %lld tokens in %.3f s (%.1f tokens/s, %s%s%s kernels, %d thread%s)\n", s->n,
            s->n == 1 ? "" : "s", (long long)res->prefill_tokens, res->prefill_s, pf, r->kt.name,
            r->kt.q8dot ? " + int8 " : "", r->kt.q8dot ? r->kt.q8name : "", c->threads, c->threads == 1 ? "" : "s");
    for (int b = 0; b < s->n && c->s.generate && !c->s.on_token; b++) {
        fprintf(out, "generated:");
        if (s->n > 1)
            fprintf(out, " [%d]", b);
        for (int64_t k = 0; k < res->n_generated[b]; k++)
            fprintf(out, " %d", res->generated[b * c->s.generate + k]);
        fprintf(out, "\n");
    }
    if (res->decode_tokens)
        fprintf(out, "decode %.1f tokens/s\n", dc);
    if (c->prefix)
        fprintf(out, "prefix cache: %lld tokens restored, hot %zu bytes, cold %llu bytes\n", (long long)pc->hit_tokens,
                pc->hot_bytes, (unsigned long long)prefix_cold_bytes(pc));
}

int session_main(const char *model_path, const struct token_seqs *s, const struct run_config *c, FILE *out, FILE *warn,
                 struct json_object **jo, struct err *e)
{
    *jo = NULL;
    if (c->dump && c->prefix)
        return err_set(e, ERR_USAGE, "'dump_logits' needs every position's logits, which a prefix-cache hit skips; "
                                     "use one or the other");
    struct model m;
    struct runner r = {0};
    struct prefix_cache pc = {0};
    struct session_result res = {0};
    struct session_opts so = c->s;
    int rc = model_open(&m, model_path, e);
    if (rc != ERR_OK)
        return rc;
    struct runner_opts ro = {.threads = c->threads, .kernels = c->kernels, .kv = c->kv, .n_seq = s->n};
    if (!c->kv_skip_given)
        ro.kv.skip_last_full = m.src.source.kv_skip_last_full;
    session_limits(s, &so, c->prefix ? c->prefix_o.block : 0, &ro.max_step, &ro.max_context);
    rc = c->dump ? fio_check_output(c->dump, e) : ERR_OK; /* before any work: not over an input */
    bool int8 = c->kernels == KERN_Q8 && kern_has_q8();
    if (c->kernels == KERN_Q8 && !int8)
        fprintf(warn, "gempack run: warning: --kernels q8: no int8 kernels on this CPU (they need AVX2, or arm64 "
                      "with dotprod); running the exact kernels\n");
    if (rc == ERR_OK && !c->mmap)
        rc = model_load_weights(&m, c->threads, e);
    if (rc == ERR_OK)
        rc = runner_init(&r, &m, &ro, e);
    if (rc == ERR_OK && c->prefix) {
        rc = prefix_init(&pc, &r, &c->prefix_o, e);
        so.pc = &pc;
    }
    so.all_logits = c->dump != NULL;
    if (rc == ERR_OK)
        rc = session_run(&r, s, &so, &res, e);
    if (rc == ERR_OK && c->dump) {
        struct json_object *meta = json_object_new_object();
        json_object_object_add(meta, "producer", json_object_new_string("gempack run " GEMPACK_VERSION));
        json_object_object_add(meta, "model_fingerprint", json_object_new_string(m.fingerprint));
        json_object_object_add(meta, "dtype", json_object_new_string("float32"));
        rc = npz_write_logits(c->dump, s->n, (const int32_t *const *)s->seq, s->len, res.tmax, res.logits,
                              m.cfg.vocab_size, meta, e);
        json_object_put(meta);
    }
    for (size_t i = 0; i < pc.n_warnings; i++)
        fprintf(warn, "gempack run: warning: %s\n", pc.warnings[i]);
    if (rc == ERR_OK) {
        double pf = res.prefill_s > 0 ? (double)res.prefill_tokens / res.prefill_s : 0.0;
        double dc = res.decode_tokens && res.decode_s > 0 ? (double)res.decode_tokens / res.decode_s : 0.0;
        size_t cache_bytes = 0;
        for (int b = 0; b < s->n; b++)
            cache_bytes += runner_cache_bytes(&r, b);
        run_print(out, &r, s, c, &res, &pc, pf, dc);
        *jo = run_json(&r, s, c, &res, &pc, pf, dc, cache_bytes);
    }
    session_result_free(&res);
    prefix_free(&pc);
    runner_free(&r);
    model_close(&m);
    return rc;
}
