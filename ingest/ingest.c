#include "ingest/ingest.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fileio.h"
#include "ingest/check.h"

/* ERR_FORMAT naming the check's first problem (ERR_NOT_TARGET when that is
 * another model's architecture), unless the checkpoint loads. */
static int require_loadable(const char *dir, struct err *e)
{
    struct check_report chk;
    int rc = check_run(&chk, dir, 0, e);
    if (rc == ERR_OK && !check_loadable(&chk)) {
        char first[800] = "";
        for (int i = 0; i < chk.n_groups; i++)
            if (chk.groups[i].kind != CHK_REDUNDANT) {
                const struct check_group *g = &chk.groups[i];
                check_group_name(g, first, sizeof first);
                size_t l = strlen(first);
                snprintf(first + l, sizeof first - l, ": %s%s%s%s%s%s%s", check_kind_name(g->kind),
                         g->expected[0] ? ", expected " : "", g->expected, g->found[0] ? ", found " : "", g->found,
                         g->message[0] ? ": " : "", g->message);
                break;
            }
        rc = err_set(e, chk.not_target ? ERR_NOT_TARGET : ERR_FORMAT,
                     "%s does not load as a Gemma 4 text model (%d problem%s; first: %s). Run 'gempack check %s' for "
                     "the full report",
                     dir, chk.n_problems, chk.n_problems == 1 ? "" : "s", first, dir);
    }
    check_free(&chk);
    return rc;
}

int ingest_open(struct ingested *in, struct gp_config *cfg, const char *dir, struct err *e)
{
    memset(in, 0, sizeof *in);
    memset(cfg, 0, sizeof *cfg);
    int rc = require_loadable(dir, e);
    if (rc == ERR_OK)
        rc = source_open(&in->source, dir, 0, e);
    if (rc == ERR_OK)
        rc = cfg_parse(cfg, in->source.config_text, in->source.config_len, in->source.config_name, e);
    if (rc == ERR_OK)
        rc = normalize(&in->source.ck, cfg, &in->norm, e);
    return rc;
}

void ingest_close(struct ingested *in)
{
    if (!in)
        return;
    normalize_free(&in->norm);
    source_close(&in->source);
    memset(in, 0, sizeof *in);
}
