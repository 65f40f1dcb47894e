/* convert.h - `gempack convert`: check, normalize, plan, write.
 *
 * Input: any checkpoint directory `gempack check` accepts. Output: a .gpk
 * pack (core/pack.h) or, with format MLX, a directory of MLX safetensors and
 * a config.json whose quantization block carries per-module overrides; either
 * carries the source's tokenizer files (converter/carry.h). */
#ifndef GP_CONVERT_H
#define GP_CONVERT_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stdio.h>

#include "converter/carry.h"
#include "converter/plan.h"
#include "model/config.h"
#include "core/progress.h"
#include "ingest/ingest.h"

#define CONVERT_MLX_SHARD_BYTES (5ull << 30) /* mlx-lm's MAX_FILE_SIZE_GB */

struct convert_opts {
    struct plan_opts plan;
    bool format_mlx;        /* --format mlx (directory) instead of a pack */
    bool text_only;         /* --text-only: drop towers from the MLX export */
    bool dry_run;           /* plan only, write nothing */
    uint32_t align;         /* pack alignment (default 4096) */
    int threads;            /* quantization workers (default 1; same bytes for any count) */
    const char *out;
    struct progress progress; /* after each tensor written (bytes) */
    const char *check_out;  /* another output the caller writes afterwards (a report), or NULL: checked as
                             * `out` is, before any work */
};

struct convert_report {
    struct gp_config cfg;
    struct ingested in;     /* the source checkpoint */
    struct plan plan;
    bool written;
    char *out;
    uint64_t out_bytes;     /* tensor bytes written */
    int n_files;
    uint64_t lattice_groups, lattice_exact;
    struct carried carried; /* the tokenizer files the output stores (a pack's files, beside an MLX config.json) */
};

/* Runs the conversion. The report must be convert_free'd in every case. */
int convert_run(struct convert_report *r, const char *dir, const struct convert_opts *o, struct err *e);
void convert_free(struct convert_report *r);

/* Human summary: normalization log grouped by action and reason, plan totals. */
void convert_print(FILE *out, const struct convert_report *r, bool with_plan);
struct json_object *convert_json(const struct convert_report *r);

#endif
