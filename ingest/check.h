/* check.h - loadability check: does a checkpoint directory load as a Gemma 4
 * text model, and every reason why not.
 *
 * check_run reads config.json and safetensors HEADERS only; check_source
 * takes a source already open (ingest_open's). The expected text-model
 * tensor set comes from config semantics (model/layout.h); MLX-quantized
 * modules are validated as triplets against their resolved bits and group
 * size; KV-shared layers' K/V are optional ("redundant; convert prunes
 * them"); tower, projector, clip-bound and rotary keys are listed as ignored.
 * Findings differing only by layer index are collapsed into ranges
 * (layers.{15..34}.self_attn.k_proj.weight). */
#ifndef GP_CHECK_H
#define GP_CHECK_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stdio.h>

#include "core/checkpoint.h"
#include "model/config.h"
#include "core/err.h"
#include "model/names.h"
#include "ingest/source.h"

enum check_kind {
    CHK_CONFIG,      /* config.json does not describe a loadable Gemma 4 text model */
    CHK_LAYOUT,      /* key families mixed or inconsistent with model_type */
    CHK_MISSING,
    CHK_UNEXPECTED,
    CHK_SHAPE,
    CHK_DTYPE,
    CHK_QUANT,       /* quantized triplet inconsistent with config or with itself */
    CHK_REDUNDANT,   /* note: K/V of a KV-shared layer, unused */
    CHK_KIND_COUNT
};

/* One finding, or a group of findings that differ only by layer index. */
struct check_group {
    enum check_kind kind;
    char pattern[192];       /* text-relative name, "%L" where the layer index goes */
    char expected[96], found[96];
    char message[256];
    int *layers;             /* sorted layer indices (n_layers == 0: a global tensor) */
    int n_layers, cap_layers;
};

struct check_report {
    bool config_ok;
    bool not_target;                  /* config.json names an architecture gempack does not run */
    struct gp_config cfg;
    bool ckpt_ok;
    struct source src;                /* the checkpoint as read (CT and GGUF: transcoded, shapes only) */
    enum name_family family;
    bool experts_split;
    int n_quantized;                  /* quantized modules found */
    int ignored[NC_UNKNOWN + 1];      /* keys per non-text class */
    struct check_group *groups;
    int n_groups, cap_groups;
    int *index;                       /* hash index of groups with layers (group index + 1) */
    size_t index_cap;
    int n_indexed;
    int n_problems, n_notes;          /* findings before collapsing */
};

enum check_flags { CHECK_HEADERS_ONLY = 1 };

/* Runs the check. Returns ERR_OK when a verdict was reached (see
 * check_loadable), or an error when the input is unreadable (no config.json,
 * malformed JSON, a corrupt safetensors header, a missing shard). The report
 * must be check_free'd in every case. */
int check_run(struct check_report *r, const char *dir, unsigned flags, struct err *e);

/* The same on an opened source, which the report takes (check_free closes it). */
int check_source(struct check_report *r, struct source *src, struct err *e);

bool check_loadable(const struct check_report *r);

/* The collapsed name of a group: "layers.{15..34}.self_attn.k_proj.weight". */
void check_group_name(const struct check_group *g, char *buf, size_t len);

const char *check_kind_name(enum check_kind k);

void check_print_text(FILE *out, const struct check_report *r);

/* The stable JSON document (schema "gempack.check/1", docs/CLI.md). */
struct json_object *check_to_json(const struct check_report *r);

void check_free(struct check_report *r);

#endif
