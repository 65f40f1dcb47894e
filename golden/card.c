/* card.c - the quality card of a conversion (card.h). */
#include "golden/card.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/fileio.h"
#include "core/pack.h"
#include "fixtures/fixture.h"
#include "golden/report.h"
#include "gp_config.h"

/* The conversion's tensors for the report: each one's error against the source's values. */
static struct report_tensor *report_tensors(const struct convert_report *cr)
{
    struct report_tensor *t = calloc(cr->plan.n + 1, sizeof *t);
    for (size_t i = 0; t && i < cr->plan.n; i++) {
        const struct plan_item *it = &cr->plan.items[i];
        double n = 1.0;
        for (int k = 0; k < it->nt->rank; k++)
            n *= (double)it->nt->shape[k];
        t[i] = (struct report_tensor){it->nt->name, plan_action_name(it->act),
                                      it->quantized_out ? qmode_name(it->mode) : dtype_name(it->dtype),
                                      it->quantized_out ? it->bits : 0, it->quantized_out ? it->group_size : 0,
                                      sqrt(it->sq_err / n), it->max_err, it->measured};
    }
    return t;
}

int card_make(const char *src, const struct convert_opts *o, const struct convert_report *cr,
              const struct card_opts *co, struct card *c, struct err *e)
{
    memset(c, 0, sizeof *c);
    struct token_seqs p = {0};
    int64_t T;
    int32_t *fx = fixture_prompt(&cr->cfg, 0, &T);
    int rc = fx ? tokens_push(&p, fx, T, e) : err_set(e, ERR_NOMEM, "out of memory");
    for (int i = 0; rc == ERR_OK && i < co->prompts->n; i++)
        rc = tokens_push(&p, co->prompts->seq[i], co->prompts->len[i], e);
    free(fx);
    struct compare_opts cmp = {.threads = co->threads, .th = {-1, -1, -1, -1, -1, -1}, .progress = co->progress};
    if (rc == ERR_OK)
        rc = compare_models(src, o->out, &p, &cmp, &c->r, e);
    struct report_tensor *rt = rc == ERR_OK && co->report ? report_tensors(cr) : NULL;
    if (rc == ERR_OK && co->report)
        rc = rt ? report_write(co->report, "gempack convert --eval", src, o->out, &c->r, rt, cr->plan.n, e)
                : err_set(e, ERR_NOMEM, "out of memory");
    free(rt);
    if (rc == ERR_OK)
        c->json = compare_card(&c->r, &p, GEMPACK_VERSION);
    tokens_free(&p);
    if (rc != ERR_OK || !o->format_mlx)
        return rc == ERR_OK ? pack_set_field(o->out, "quality", json_object_get(c->json), e) : rc;
    const char *text = json_object_to_json_string_ext(c->json, JSON_C_TO_STRING_PRETTY);
    c->path = fio_join(o->out, "gempack_quality.json");
    return c->path ? fio_write_file(c->path, text, strlen(text), e) : err_set(e, ERR_NOMEM, "out of memory");
}

void card_free(struct card *c)
{
    compare_free(&c->r);
    json_object_put(c->json);
    free(c->path);
    memset(c, 0, sizeof *c);
}
