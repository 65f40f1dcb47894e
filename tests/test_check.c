/* test_check.c - the loadability check (converter/check.h) on generated
 * fixtures of every variant and layout, on the external goldens, and on
 * deliberately broken checkpoints, each problem found BY NAME.
 *
 * Expectations come from MODEL.md §1.3/§2 and the tiny
 * dimensions of fixtures/fixture.c:
 *   e2b     L 10, num_kv_shared 5 -> F0 5, period 5 (full: 4, 9), H 128, Nq 4,
 *           G 1, head_dim 32 / global 64, I 256 (double-wide 512 from F0), P 64
 *   e4b     L 12, num_kv_shared 6 -> F0 6, period 6 (full: 5, 11), G 2
 *   26b-a4b L 6, no sharing, k_eq_v (full: 5), MoE E 4, M 64, I 128
 *   31b     L 12, no sharing, k_eq_v (full: 5, 11), G 2, global KV 2
 *   vocab 512 everywhere; vision tower layers e2b 7, e4b 8, 26b 8, 31b 14. */
#include <criterion/criterion.h>

#include <json-c/json.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "converter/convert.h"
#include "ingest/check.h"
#include "ingest/transcode.h"
#include "core/dtype.h"
#include "core/err.h"
#include "core/fileio.h"
#include "model/names.h"
#include "core/safetensors.h"
#include "fixtures/fixture.h"
#include "tests/helpers.h"

#define PFX_HF "model.language_model."
#define PFX_MLX "language_model.model."
#define PFX_TEXT "model."

/* ------------------------------------------------------------------ helpers */

static struct fixture_opts fx(const char *variant, enum fixture_layout layout)
{
    return (struct fixture_opts){.variant = variant, .layout = layout, .group_size = 64, .shards = 1};
}

static const char *layout_name(enum fixture_layout l)
{
    return l == FX_HF ? "hf" : l == FX_MLX ? "mlx" : "text";
}

/* All groups of a report, one a line, for failure messages. */
static const char *describe(const struct check_report *r)
{
    static char buf[16384];
    size_t o = (size_t)snprintf(buf, sizeof buf, "%d problems, %d notes, %d groups:", r->n_problems, r->n_notes,
                                r->n_groups);
    for (int i = 0; i < r->n_groups && o < sizeof buf; i++) {
        char name[768];
        check_group_name(&r->groups[i], name, sizeof name);
        o += (size_t)snprintf(buf + o, sizeof buf - o, "\n  %s %s [exp '%s' found '%s'] %s",
                              check_kind_name(r->groups[i].kind), name, r->groups[i].expected, r->groups[i].found,
                              r->groups[i].message);
    }
    return buf;
}

static const struct check_group *find_group(const struct check_report *r, enum check_kind kind, const char *name)
{
    for (int i = 0; i < r->n_groups; i++) {
        char buf[768];
        check_group_name(&r->groups[i], buf, sizeof buf);
        if (r->groups[i].kind == kind && !strcmp(buf, name))
            return &r->groups[i];
    }
    return NULL;
}

static int count_kind(const struct check_report *r, enum check_kind kind)
{
    int n = 0;
    for (int i = 0; i < r->n_groups; i++)
        n += r->groups[i].kind == kind;
    return n;
}

static int count_problem_groups(const struct check_report *r)
{
    return r->n_groups - count_kind(r, CHK_REDUNDANT);
}

static void run_check(struct check_report *r, const char *dir, unsigned flags)
{
    struct err e = {0};
    int rc = check_run(r, dir, flags, &e);
    cr_assert_eq(rc, ERR_OK, "check_run(%s) = %s: %s", dir, err_code_name((enum err_code)rc), e.msg);
}

/* The group (kind, collapsed name) must exist; returns it. */
static const struct check_group *expect_group(const struct check_report *r, enum check_kind kind, const char *name)
{
    const struct check_group *g = find_group(r, kind, name);
    cr_assert(g, "no %s finding named %s; %s", check_kind_name(kind), name, describe(r));
    return g;
}

static void expect_loadable(const struct check_report *r, const char *what)
{
    cr_assert(r->config_ok, "%s: config not ok; %s", what, describe(r));
    cr_assert(r->ckpt_ok, "%s: checkpoint not ok", what);
    cr_assert(check_loadable(r), "%s: not loadable; %s", what, describe(r));
    cr_assert_eq(r->n_problems, 0, "%s: %s", what, describe(r));
    cr_assert_eq(count_problem_groups(r), 0, "%s: %s", what, describe(r));
}

static void expect_not_loadable(const struct check_report *r)
{
    cr_assert_not(check_loadable(r), "loadable, expected a problem; %s", describe(r));
    cr_assert_gt(r->n_problems, 0);
}

/* --- rewriting model.safetensors with tensors dropped, added or changed --- */

enum ed_op { ED_DROP, ED_ADD, ED_CHANGE };

struct edit {
    enum ed_op op;
    char name[256];
    enum dtype dtype;           /* ED_ADD / ED_CHANGE */
    int rank;
    uint64_t shape[3];
};

static struct edit ed_drop(const char *fmt_name)
{
    struct edit d = {.op = ED_DROP};
    snprintf(d.name, sizeof d.name, "%s", fmt_name);
    return d;
}

static struct edit ed_set(enum ed_op op, const char *name, enum dtype dt, int rank, uint64_t a, uint64_t b, uint64_t c)
{
    struct edit d = {.op = op, .dtype = dt, .rank = rank, .shape = {a, b, c}};
    snprintf(d.name, sizeof d.name, "%s", name);
    return d;
}

/* Rewrites dir/model.safetensors: every tensor is copied byte for byte (via
 * st_data) except the dropped ones; changed and added tensors hold zeros.
 * The new file is written beside the old one and renamed over it (an output
 * may not replace a file the process reads). */
static void rewrite_st(const char *dir, const struct edit *ed, size_t ne)
{
    char *path = fio_join(dir, "model.safetensors"), *next = fio_join(dir, "next.safetensors");
    struct st_file f;
    struct err e = {0};
    cr_assert_eq(st_open(&f, path, 0, &e), ERR_OK, "%s", e.msg);
    size_t cap = f.n_tensors + ne;
    struct st_writer_tensor *wt = calloc(cap, sizeof *wt);
    const struct st_tensor **src = calloc(cap, sizeof *src);
    bool *used = calloc(ne ? ne : 1, sizeof *used);
    cr_assert(wt && src && used);
    size_t n = 0;
    for (size_t i = 0; i < f.n_tensors; i++) {
        const struct st_tensor *t = &f.tensors[i];
        const struct edit *m = NULL;
        for (size_t k = 0; k < ne; k++)
            if (!strcmp(ed[k].name, t->name)) {
                m = &ed[k];
                used[k] = true;
            }
        if (m && m->op == ED_DROP)
            continue;
        cr_assert(!m || m->op == ED_CHANGE, "edit: %s already exists", t->name);
        wt[n].name = t->name;
        if (m) {
            wt[n].dtype = m->dtype;
            wt[n].rank = m->rank;
            memcpy(wt[n].shape, m->shape, sizeof m->shape);
            src[n] = NULL;
        } else {
            wt[n].dtype = t->dtype;
            wt[n].rank = t->rank;
            memcpy(wt[n].shape, t->shape, sizeof t->shape);
            src[n] = t;
        }
        n++;
    }
    for (size_t k = 0; k < ne; k++) {
        if (used[k])
            continue;
        cr_assert_eq(ed[k].op, ED_ADD, "edit: no tensor %s in %s", ed[k].name, path);
        wt[n].name = ed[k].name;
        wt[n].dtype = ed[k].dtype;
        wt[n].rank = ed[k].rank;
        memcpy(wt[n].shape, ed[k].shape, sizeof ed[k].shape);
        src[n++] = NULL;
    }
    const char **meta = calloc(2 * f.n_meta + 1, sizeof *meta);
    cr_assert(meta);
    for (size_t i = 0; i < f.n_meta; i++) {
        meta[2 * i] = f.meta[i].key;
        meta[2 * i + 1] = f.meta[i].value;
    }
    struct st_writer w;
    cr_assert_eq(st_writer_open(&w, next, wt, n, meta, f.n_meta, false, &e), ERR_OK, "%s", e.msg);
    for (size_t i = 0; i < n; i++) {
        if (src[i]) {
            const uint8_t *p;
            cr_assert_eq(st_data(&f, src[i], &p, &e), ERR_OK, "%s", e.msg);
            cr_assert_eq(st_writer_write(&w, p, (size_t)(src[i]->end - src[i]->begin), &e), ERR_OK, "%s", e.msg);
        } else {
            uint64_t nb;
            cr_assert_eq(dtype_nbytes(wt[i].dtype, wt[i].shape, wt[i].rank, &nb, &e), ERR_OK, "%s", e.msg);
            void *z = calloc(nb ? (size_t)nb : 1, 1);
            cr_assert(z);
            cr_assert_eq(st_writer_write(&w, z, (size_t)nb, &e), ERR_OK, "%s", e.msg);
            free(z);
        }
    }
    cr_assert_eq(st_writer_finish(&w, &e), ERR_OK, "%s", e.msg);
    st_writer_abort(&w);
    st_close(&f);
    cr_assert_eq(rename(next, path), 0);
    free(meta);
    free(used);
    free(src);
    free(wt);
    free(path);
    free(next);
}

/* --- config.json edits --- */

static struct json_object *load_config(const char *dir)
{
    char *path = fio_join(dir, "config.json");
    struct json_object *o = json_object_from_file(path);
    cr_assert(o, "cannot parse %s", path);
    free(path);
    return o;
}

static void save_config(const char *dir, struct json_object *o)
{
    char *path = fio_join(dir, "config.json");
    cr_assert_eq(json_object_to_file_ext(path, o, JSON_C_TO_STRING_PRETTY), 0, "cannot write %s", path);
    free(path);
    json_object_put(o);
}

static struct json_object *obj(struct json_object *o, const char *key)
{
    struct json_object *v = NULL;
    cr_assert(json_object_object_get_ex(o, key, &v), "config has no key %s", key);
    return v;
}

static char *remove_file(const char *dir, const char *name)
{
    char *path = fio_join(dir, name);
    cr_assert_eq(unlink(path), 0, "cannot remove %s", path);
    return path;
}

/* ------------------------------------------------------ loadable fixtures */

/* The redundant K/V notes of a PTQ E-series fixture: k_proj, k_norm, v_proj
 * of every KV-shared layer (F0..L-1), nothing else. */
static void expect_redundant(const struct check_report *r, const char *layers, int n_shared)
{
    static const char *const parts[] = {"self_attn.k_proj.weight", "self_attn.k_norm.weight",
                                        "self_attn.v_proj.weight"};
    for (int k = 0; k < 3; k++) {
        char name[128];
        snprintf(name, sizeof name, "layers.%s.%s", layers, parts[k]);
        const struct check_group *g = expect_group(r, CHK_REDUNDANT, name);
        cr_assert_eq(g->n_layers, n_shared, "%s", name);
    }
    cr_assert_eq(count_kind(r, CHK_REDUNDANT), 3, "%s", describe(r));
    cr_assert_eq(r->n_notes, 3 * n_shared, "%s", describe(r));
}

static void matrix(const char *variant, enum fixture_layout layout)
{
    char *tmp = th_mkdtemp();
    static const int quants[] = {0, 4, 8};
    int nq = layout == FX_HF ? 1 : 3;
    bool eseries = !strcmp(variant, "e2b") || !strcmp(variant, "e4b");
    const char *shared = !strcmp(variant, "e2b") ? "{5..9}" : "{6..11}";
    int n_shared = !strcmp(variant, "e2b") ? 5 : 6;
    for (int qat = 0; qat < 2; qat++) {
        for (int q = 0; q < nq; q++) {
            struct fixture_opts o = fx(variant, layout);
            o.qat = qat;
            o.quant_bits = quants[q];
            char sub[64], what[128];
            snprintf(sub, sizeof sub, "%s-%s-%s-q%d", variant, layout_name(layout), qat ? "qat" : "ptq", quants[q]);
            snprintf(what, sizeof what, "%s %s %s quant %d", variant, layout_name(layout), qat ? "QAT" : "PTQ",
                     quants[q]);
            char *dir = th_fixture(tmp, sub, o);
            struct check_report r;
            run_check(&r, dir, 0);
            expect_loadable(&r, what);
            cr_assert_eq(r.family, layout == FX_HF ? NF_HF : layout == FX_MLX ? NF_MLX : NF_TEXT, "%s", what);
            if (eseries && !qat) {
                expect_redundant(&r, shared, n_shared);
            } else {
                cr_assert_eq(count_kind(&r, CHK_REDUNDANT), 0, "%s: %s", what, describe(&r));
                cr_assert_eq(r.n_notes, 0, "%s: %s", what, describe(&r));
            }
            if (quants[q]) {
                cr_assert(r.cfg.quant.mlx, "%s", what);
                cr_assert_eq(r.cfg.quant.global.bits, quants[q], "%s", what);
                cr_assert_gt(r.n_quantized, 0, "%s", what);
            } else {
                cr_assert_eq(r.n_quantized, 0, "%s", what);
                cr_assert_eq(r.cfg.quant.qat_unquantized, (bool)qat, "%s", what);
            }
            if (!strcmp(variant, "26b-a4b"))
                cr_assert_eq(r.experts_split, layout == FX_MLX || (layout == FX_TEXT && quants[q]), "%s", what);
            for (int k = 0; k < NC_UNKNOWN; k++)
                if (k != NC_TEXT)
                    cr_assert_eq(r.ignored[k], 0, "%s: %d ignored %s keys", what, r.ignored[k],
                                 name_class_name((enum name_class)k));
            check_free(&r);
            free(dir);
        }
    }
    th_rmtree(tmp);
}

Test(check, loadable_e2b_hf) { matrix("e2b", FX_HF); }
Test(check, loadable_e2b_mlx) { matrix("e2b", FX_MLX); }
Test(check, loadable_e2b_text) { matrix("e2b", FX_TEXT); }
Test(check, loadable_e4b_hf) { matrix("e4b", FX_HF); }
Test(check, loadable_e4b_mlx) { matrix("e4b", FX_MLX); }
Test(check, loadable_e4b_text) { matrix("e4b", FX_TEXT); }
Test(check, loadable_26b_hf) { matrix("26b-a4b", FX_HF); }
Test(check, loadable_26b_mlx) { matrix("26b-a4b", FX_MLX); }
Test(check, loadable_26b_text) { matrix("26b-a4b", FX_TEXT); }
Test(check, loadable_31b_hf) { matrix("31b", FX_HF); }
Test(check, loadable_31b_mlx) { matrix("31b", FX_MLX); }
Test(check, loadable_31b_text) { matrix("31b", FX_TEXT); }
Test(check, loadable_12b_hf) { matrix("12b", FX_HF); }
Test(check, loadable_12b_mlx) { matrix("12b", FX_MLX); }
Test(check, loadable_12b_text) { matrix("12b", FX_TEXT); }

/* Vision tower keys of the fixture: per encoder layer 4 norms, q/k/v/o as
 * clipped linears (weight + 4 clip scalars), q/k norms, 3 clipped MLP
 * linears = 41; plus the patch embedder's 2; plus std_bias/std_scale for the
 * 26B/31B towers (no audio). */
static int vision_keys(int layers, bool audio)
{
    return 41 * layers + 2 + (audio ? 0 : 2);
}

static void multimodal(const char *variant, int vision_layers, bool audio, int f0)
{
    char *tmp = th_mkdtemp();
    static const struct {
        enum fixture_layout layout;
        int quant;
    } cases[] = {{FX_HF, 0}, {FX_MLX, 0}, {FX_MLX, 4}, {FX_MLX, 8}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        struct fixture_opts o = fx(variant, cases[c].layout);
        o.multimodal = true;
        o.quant_bits = cases[c].quant;
        char sub[64], what[128];
        snprintf(sub, sizeof sub, "mm-%s-%s-q%d", variant, layout_name(cases[c].layout), cases[c].quant);
        snprintf(what, sizeof what, "multimodal %s %s quant %d", variant, layout_name(cases[c].layout), cases[c].quant);
        char *dir = th_fixture(tmp, sub, o);
        struct check_report r;
        run_check(&r, dir, 0);
        expect_loadable(&r, what);
        cr_assert_gt(r.ignored[NC_VISION], 0, "%s", what);
        cr_assert_eq(r.ignored[NC_VISION], vision_keys(vision_layers, audio), "%s: %d vision keys", what,
                     r.ignored[NC_VISION]);
        cr_assert_eq(r.ignored[NC_AUDIO], audio ? 12 : 0, "%s", what);
        cr_assert_eq(r.ignored[NC_PROJECTOR], audio ? 2 : 1, "%s", what);
        cr_assert_eq(r.ignored[NC_UNKNOWN], 0, "%s", what);
        /* The hazard is really present: a tower layer >= F0 with self_attn.k_proj. */
        if (f0 >= 0) {
            char key[256];
            snprintf(key, sizeof key, "%svision_tower.encoder.layers.%d.self_attn.k_proj.linear.weight",
                     cases[c].layout == FX_HF ? "model." : "", vision_layers - 1);
            cr_assert(vision_layers - 1 >= f0);
            cr_assert(ckpt_find(&r.src.ck, key), "%s: no %s", what, key);
        }
        for (int i = 0; i < r.n_groups; i++) {
            const struct check_group *g = &r.groups[i];
            char name[768];
            check_group_name(g, name, sizeof name);
            cr_assert(!strstr(name, "vision_tower") && !strstr(g->message, "vision_tower") &&
                          !strstr(g->expected, "vision_tower") && !strstr(g->found, "vision_tower"),
                      "%s: a finding mentions the vision tower; %s", what, describe(&r));
            cr_assert(!strstr(name, "audio_tower") && !strstr(g->message, "audio_tower"), "%s: %s", what,
                      describe(&r));
        }
        if (f0 >= 0)
            expect_redundant(&r, f0 == 5 ? "{5..9}" : "{6..11}", f0 == 5 ? 5 : 6);
        else
            cr_assert_eq(r.n_notes, 0, "%s: %s", what, describe(&r));
        check_free(&r);
        free(dir);
    }
    th_rmtree(tmp);
}

Test(check, multimodal_e2b) { multimodal("e2b", 7, true, 5); }
Test(check, multimodal_e4b) { multimodal("e4b", 8, true, 6); }
Test(check, multimodal_26b) { multimodal("26b-a4b", 8, false, -1); }
Test(check, multimodal_31b) { multimodal("31b", 14, false, -1); }

/* The 12B's encoder-free embedder: 9 vision_embedder keys and the vision and
 * audio projections, all ignored, in every layout. */
Test(check, multimodal_12b)
{
    char *tmp = th_mkdtemp();
    static const enum fixture_layout layouts[] = {FX_HF, FX_MLX};
    for (size_t k = 0; k < 2; k++) {
        struct fixture_opts o = fx("12b", layouts[k]);
        o.multimodal = true;
        char *dir = th_fixture(tmp, layouts[k] == FX_HF ? "mm-12b-hf" : "mm-12b-mlx", o);
        struct check_report r;
        run_check(&r, dir, 0);
        expect_loadable(&r, "multimodal 12b");
        cr_assert_eq(r.ignored[NC_VISION], 9, "%d vision keys", r.ignored[NC_VISION]);
        cr_assert_eq(r.ignored[NC_PROJECTOR], 2);
        cr_assert_eq(r.ignored[NC_AUDIO] + r.ignored[NC_UNKNOWN], 0, "%s", describe(&r));
        check_free(&r);
        free(dir);
    }
    th_rmtree(tmp);
}

Test(check, sharded)
{
    char *tmp = th_mkdtemp();
    static const struct {
        const char *variant;
        enum fixture_layout layout;
        int quant;
        bool multimodal;
    } cases[] = {
        {"e2b", FX_HF, 0, false}, {"26b-a4b", FX_MLX, 4, false}, {"31b", FX_TEXT, 8, false}, {"e4b", FX_MLX, 4, true},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        struct fixture_opts o = fx(cases[c].variant, cases[c].layout);
        o.quant_bits = cases[c].quant;
        o.multimodal = cases[c].multimodal;
        o.shards = 3;
        char sub[64];
        snprintf(sub, sizeof sub, "sh-%zu", c);
        char *dir = th_fixture(tmp, sub, o);
        struct check_report r;
        run_check(&r, dir, 0);
        expect_loadable(&r, cases[c].variant);
        cr_assert(r.src.ck.indexed);
        cr_assert_eq(r.src.ck.n_shards, 3);
        check_free(&r);
        free(dir);
    }
    th_rmtree(tmp);
}

Test(check, group_sizes)
{
    char *tmp = th_mkdtemp();
    static const struct {
        const char *variant;
        enum fixture_layout layout;
        int quant, gs;
    } cases[] = {
        {"e2b", FX_MLX, 4, 32},      {"e2b", FX_MLX, 4, 128},     {"e4b", FX_TEXT, 8, 32},
        {"26b-a4b", FX_MLX, 8, 128}, {"26b-a4b", FX_TEXT, 4, 32}, {"31b", FX_MLX, 4, 128},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        struct fixture_opts o = fx(cases[c].variant, cases[c].layout);
        o.quant_bits = cases[c].quant;
        o.group_size = cases[c].gs;
        char sub[64], what[96];
        snprintf(sub, sizeof sub, "gs-%zu", c);
        snprintf(what, sizeof what, "%s %s %d-bit group %d", cases[c].variant, layout_name(cases[c].layout),
                 cases[c].quant, cases[c].gs);
        char *dir = th_fixture(tmp, sub, o);
        struct check_report r;
        run_check(&r, dir, 0);
        expect_loadable(&r, what);
        cr_assert_eq(r.cfg.quant.global.group_size, cases[c].gs, "%s", what);
        cr_assert_eq(r.cfg.quant.global.bits, cases[c].quant, "%s", what);
        cr_assert_gt(r.n_quantized, 0, "%s", what);
        check_free(&r);
        free(dir);
    }
    th_rmtree(tmp);
}

/* ------------------------------------------------------ external goldens */

Test(check, external_golden_a)
{
    char *dir = th_external_golden("a");
    if (!dir)
        cr_skip_test("../shared/external-goldens/a is absent");
    struct check_report r;
    run_check(&r, dir, 0);
    expect_loadable(&r, "external golden a");
    cr_assert_eq(r.family, NF_HF);
    /* 8 layers, 3 KV-shared: layers 5..7 carry redundant K/V (README). */
    expect_redundant(&r, "{5..7}", 3);
    cr_assert_eq(r.cfg.first_shared, 5);
    check_free(&r);
    free(dir);
}

Test(check, external_golden_c)
{
    char *dir = th_external_golden("c");
    if (!dir)
        cr_skip_test("../shared/external-goldens/c is absent");
    struct check_report r;
    run_check(&r, dir, 0);
    expect_loadable(&r, "external golden c");
    cr_assert(r.cfg.moe);
    cr_assert_not(r.experts_split, "c has fused HF experts");
    cr_assert_eq(r.n_notes, 0, "%s", describe(&r));
    check_free(&r);
    free(dir);
}

/* ------------------------------------------------------ broken fixtures */

/* A fresh single-file fixture to break. */
static char *base_fixture(char **tmp, const char *variant, enum fixture_layout layout, int quant)
{
    *tmp = th_mkdtemp();
    struct fixture_opts o = fx(variant, layout);
    o.quant_bits = quant;
    return th_fixture(*tmp, "f", o);
}

static void check_broken(struct check_report *r, const char *dir)
{
    run_check(r, dir, 0);
    expect_not_loadable(r);
}

Test(check, broken_deleted_tensor)
{
    char *tmp, *dir = base_fixture(&tmp, "e2b", FX_HF, 0);
    struct edit ed[] = {ed_drop(PFX_HF "norm.weight"), ed_drop(PFX_HF "layers.3.mlp.down_proj.weight")};
    rewrite_st(dir, ed, 2);
    struct check_report r;
    check_broken(&r, dir);
    const struct check_group *g = expect_group(&r, CHK_MISSING, "norm.weight");
    cr_assert_str_eq(g->expected, "[128]");
    cr_assert_eq(g->n_layers, 0);
    g = expect_group(&r, CHK_MISSING, "layers.3.mlp.down_proj.weight");
    cr_assert_str_eq(g->expected, "[128, 256]");
    cr_assert_eq(g->n_layers, 1);
    cr_assert_eq(g->layers[0], 3);
    cr_assert_eq(r.n_problems, 2, "%s", describe(&r));
    cr_assert_eq(count_problem_groups(&r), 2, "%s", describe(&r));
    check_free(&r);
    free(dir);
    th_rmtree(tmp);
}

Test(check, broken_wrong_shape)
{
    char *tmp, *dir = base_fixture(&tmp, "e2b", FX_HF, 0);
    struct edit ed[] = {ed_set(ED_CHANGE, PFX_HF "layers.3.mlp.gate_proj.weight", DT_BF16, 2, 256, 64, 0)};
    rewrite_st(dir, ed, 1);
    struct check_report r;
    check_broken(&r, dir);
    const struct check_group *g = expect_group(&r, CHK_SHAPE, "layers.3.mlp.gate_proj.weight");
    cr_assert_str_eq(g->expected, "[256, 128]");
    cr_assert_str_eq(g->found, "[256, 64]");
    cr_assert_eq(r.n_problems, 1, "%s", describe(&r));
    check_free(&r);
    free(dir);
    th_rmtree(tmp);
}

Test(check, broken_wrong_shape_double_wide)
{
    /* A shared e2b layer is double-wide (I 512): the single-width shape is wrong there. */
    char *tmp, *dir = base_fixture(&tmp, "e2b", FX_HF, 0);
    struct edit ed[] = {ed_set(ED_CHANGE, PFX_HF "layers.7.mlp.up_proj.weight", DT_BF16, 2, 256, 128, 0)};
    rewrite_st(dir, ed, 1);
    struct check_report r;
    check_broken(&r, dir);
    const struct check_group *g = expect_group(&r, CHK_SHAPE, "layers.7.mlp.up_proj.weight");
    cr_assert_str_eq(g->expected, "[512, 128]");
    cr_assert_str_eq(g->found, "[256, 128]");
    cr_assert_eq(r.n_problems, 1, "%s", describe(&r));
    check_free(&r);
    free(dir);
    th_rmtree(tmp);
}

Test(check, broken_wrong_dtype)
{
    char *tmp, *dir = base_fixture(&tmp, "31b", FX_TEXT, 0);
    struct edit ed[] = {ed_set(ED_CHANGE, PFX_TEXT "layers.0.input_layernorm.weight", DT_I8, 1, 128, 0, 0)};
    rewrite_st(dir, ed, 1);
    struct check_report r;
    check_broken(&r, dir);
    const struct check_group *g = expect_group(&r, CHK_DTYPE, "layers.0.input_layernorm.weight");
    cr_assert_str_eq(g->found, "I8");
    cr_assert(strstr(g->expected, "BF16") && strstr(g->expected, "F32") && strstr(g->expected, "F16"), "%s",
              g->expected);
    cr_assert_eq(r.n_problems, 1, "%s", describe(&r));
    check_free(&r);
    free(dir);
    th_rmtree(tmp);
}

Test(check, broken_quantized_weight_without_scales)
{
    char *tmp, *dir = base_fixture(&tmp, "e2b", FX_MLX, 4);
    struct edit ed[] = {ed_drop(PFX_MLX "layers.2.self_attn.q_proj.scales"),
                        ed_drop(PFX_MLX "layers.2.self_attn.q_proj.biases")};
    rewrite_st(dir, ed, 2);
    struct check_report r;
    check_broken(&r, dir);
    const struct check_group *g = expect_group(&r, CHK_QUANT, "layers.2.self_attn.q_proj.weight");
    cr_assert_str_eq(g->found, "U32");
    cr_assert(strstr(g->message, ".scales"), "%s", g->message);
    cr_assert_eq(r.n_problems, 1, "%s", describe(&r));
    check_free(&r);
    free(dir);
    th_rmtree(tmp);
}

Test(check, broken_biases_without_scales)
{
    char *tmp, *dir = base_fixture(&tmp, "e2b", FX_MLX, 4);
    struct edit ed[] = {ed_drop(PFX_MLX "layers.2.self_attn.q_proj.scales")};
    rewrite_st(dir, ed, 1);
    struct check_report r;
    check_broken(&r, dir);
    const struct check_group *g = expect_group(&r, CHK_QUANT, "layers.2.self_attn.q_proj.biases");
    cr_assert(strstr(g->message, "biases") && strstr(g->message, "scales"), "%s", g->message);
    g = expect_group(&r, CHK_QUANT, "layers.2.self_attn.q_proj.weight");
    cr_assert_str_eq(g->found, "U32");
    cr_assert_eq(r.n_problems, 2, "%s", describe(&r));
    check_free(&r);
    free(dir);
    th_rmtree(tmp);
}

/* Findings that differ only by layer index collapse into one group, also for
 * quantization problems. */
Test(check, broken_quantized_collapse)
{
    char *tmp, *dir = base_fixture(&tmp, "e2b", FX_MLX, 4);
    struct edit ed[6];
    for (int l = 0; l < 3; l++) {
        char name[128];
        snprintf(name, sizeof name, PFX_MLX "layers.%d.self_attn.q_proj.scales", l);
        ed[2 * l] = ed_drop(name);
        snprintf(name, sizeof name, PFX_MLX "layers.%d.self_attn.q_proj.biases", l);
        ed[2 * l + 1] = ed_drop(name);
    }
    rewrite_st(dir, ed, 6);
    struct check_report r;
    check_broken(&r, dir);
    const struct check_group *g = expect_group(&r, CHK_QUANT, "layers.{0..2}.self_attn.q_proj.weight");
    cr_assert_eq(g->n_layers, 3);
    cr_assert_eq(r.n_problems, 3, "%s", describe(&r));
    cr_assert_eq(count_problem_groups(&r), 1, "%s", describe(&r));
    check_free(&r);
    free(dir);
    th_rmtree(tmp);
}

/* The router override (8-bit) names a module per layer; an unquantized router
 * in every layer is one collapsed finding. */
Test(check, broken_router_not_quantized)
{
    char *tmp, *dir = base_fixture(&tmp, "26b-a4b", FX_MLX, 4);
    struct edit ed[18];
    for (int l = 0; l < 6; l++) {
        char name[128];
        snprintf(name, sizeof name, PFX_MLX "layers.%d.router.proj.scales", l);
        ed[3 * l] = ed_drop(name);
        snprintf(name, sizeof name, PFX_MLX "layers.%d.router.proj.biases", l);
        ed[3 * l + 1] = ed_drop(name);
        snprintf(name, sizeof name, PFX_MLX "layers.%d.router.proj.weight", l);
        ed[3 * l + 2] = ed_set(ED_CHANGE, name, DT_BF16, 2, 4, 128, 0);
    }
    rewrite_st(dir, ed, 18);
    struct check_report r;
    check_broken(&r, dir);
    const struct check_group *g = expect_group(&r, CHK_MISSING, "layers.{0..5}.router.proj.weight");
    cr_assert(strstr(g->message, "scales"), "%s", g->message);
    cr_assert_eq(r.n_problems, 6, "%s", describe(&r));
    cr_assert_eq(count_problem_groups(&r), 1, "%s", describe(&r));
    check_free(&r);
    free(dir);
    th_rmtree(tmp);
}

Test(check, broken_v_proj_on_k_eq_v_layer)
{
    /* 31b: full layers 5 and 11 are k_eq_v (global KV heads 2 x 64). */
    char *tmp, *dir = base_fixture(&tmp, "31b", FX_HF, 0);
    struct edit ed[] = {ed_set(ED_ADD, PFX_HF "layers.5.self_attn.v_proj.weight", DT_BF16, 2, 64, 128, 0),
                        ed_set(ED_ADD, PFX_HF "layers.11.self_attn.v_proj.weight", DT_BF16, 2, 64, 128, 0)};
    rewrite_st(dir, ed, 2);
    struct check_report r;
    check_broken(&r, dir);
    const struct check_group *g = expect_group(&r, CHK_UNEXPECTED, "layers.{5,11}.self_attn.v_proj.weight");
    cr_assert(strstr(g->message, "k_eq_v"), "%s", g->message);
    cr_assert_eq(g->layers[0], 5);
    cr_assert_eq(g->layers[1], 11);
    cr_assert_eq(r.n_problems, 2, "%s", describe(&r));
    check_free(&r);
    free(dir);
    th_rmtree(tmp);
}

Test(check, broken_v_proj_on_k_eq_v_layer_mlx)
{
    /* 26b-a4b MLX 4-bit: layer 5 is the one full (k_eq_v) layer. */
    char *tmp, *dir = base_fixture(&tmp, "26b-a4b", FX_MLX, 4);
    struct edit ed[] = {ed_set(ED_ADD, PFX_MLX "layers.5.self_attn.v_proj.weight", DT_BF16, 2, 64, 128, 0)};
    rewrite_st(dir, ed, 1);
    struct check_report r;
    check_broken(&r, dir);
    const struct check_group *g = expect_group(&r, CHK_UNEXPECTED, "layers.5.self_attn.v_proj.weight");
    cr_assert(strstr(g->message, "k_eq_v"), "%s", g->message);
    cr_assert_eq(r.n_problems, 1, "%s", describe(&r));
    check_free(&r);
    free(dir);
    th_rmtree(tmp);
}

Test(check, broken_layer_beyond_num_hidden_layers)
{
    char *tmp, *dir = base_fixture(&tmp, "e2b", FX_HF, 0);
    struct edit ed[4];
    static const int layers[] = {10, 11, 12, 100};
    for (int k = 0; k < 4; k++) {
        char name[128];
        snprintf(name, sizeof name, PFX_HF "layers.%d.mlp.gate_proj.weight", layers[k]);
        ed[k] = ed_set(ED_ADD, name, DT_BF16, 2, 256, 128, 0);
    }
    rewrite_st(dir, ed, 4);
    struct check_report r;
    check_broken(&r, dir);
    const struct check_group *g = expect_group(&r, CHK_UNEXPECTED, "layers.{10..12,100}.mlp.gate_proj.weight");
    cr_assert(strstr(g->message, "num_hidden_layers = 10"), "%s", g->message);
    cr_assert_eq(r.n_problems, 4, "%s", describe(&r));
    cr_assert_eq(count_problem_groups(&r), 1, "%s", describe(&r));
    check_free(&r);
    free(dir);
    th_rmtree(tmp);
}

Test(check, broken_scales_group_count)
{
    /* layers.2 q_proj: logical [Nq*d, H] = [128, 128]; group 64 -> scales [128, 2]. */
    char *tmp, *dir = base_fixture(&tmp, "e2b", FX_MLX, 4);
    struct edit ed[] = {ed_set(ED_CHANGE, PFX_MLX "layers.2.self_attn.q_proj.scales", DT_BF16, 2, 128, 4, 0),
                        ed_set(ED_CHANGE, PFX_MLX "layers.2.self_attn.q_proj.biases", DT_BF16, 2, 128, 4, 0)};
    rewrite_st(dir, ed, 2);
    struct check_report r;
    check_broken(&r, dir);
    const struct check_group *g = expect_group(&r, CHK_SHAPE, "layers.2.self_attn.q_proj.scales");
    cr_assert_str_eq(g->expected, "[128, 2]");
    cr_assert_str_eq(g->found, "[128, 4]");
    cr_assert(strstr(g->message, "64"), "%s", g->message);
    cr_assert_eq(r.n_problems, 1, "%s", describe(&r));
    check_free(&r);
    free(dir);
    th_rmtree(tmp);
}

Test(check, broken_biases_shape_differs_from_scales)
{
    char *tmp, *dir = base_fixture(&tmp, "e2b", FX_MLX, 4);
    struct edit ed[] = {ed_set(ED_CHANGE, PFX_MLX "layers.2.self_attn.q_proj.biases", DT_BF16, 2, 128, 4, 0)};
    rewrite_st(dir, ed, 1);
    struct check_report r;
    check_broken(&r, dir);
    expect_group(&r, CHK_SHAPE, "layers.2.self_attn.q_proj.biases");
    cr_assert_eq(r.n_problems, 1, "%s", describe(&r));
    check_free(&r);
    free(dir);
    th_rmtree(tmp);
}

Test(check, broken_config_bits_disagree)
{
    char *tmp, *dir = base_fixture(&tmp, "e2b", FX_MLX, 4);
    struct json_object *c = load_config(dir);
    json_object_object_add(obj(c, "quantization"), "bits", json_object_new_int(8));
    json_object_object_add(obj(c, "quantization_config"), "bits", json_object_new_int(8));
    save_config(dir, c);
    struct check_report r;
    check_broken(&r, dir);
    /* embed_tokens [512, 128]: 8-bit codes are [512, 32] words, the file holds [512, 16]. */
    const struct check_group *g = expect_group(&r, CHK_SHAPE, "embed_tokens.weight");
    cr_assert_str_eq(g->expected, "[512, 32]");
    cr_assert_str_eq(g->found, "[512, 16]");
    cr_assert(strstr(g->message, "8 bits"), "%s", g->message);
    cr_assert(strstr(g->message, "implies 4 bits"), "%s", g->message);
    /* The same for a per-layer module, collapsed over the 5 owning single-width layers. */
    g = expect_group(&r, CHK_SHAPE, "layers.{0..4}.mlp.gate_proj.weight");
    cr_assert_str_eq(g->expected, "[256, 32]");
    cr_assert_str_eq(g->found, "[256, 16]");
    check_free(&r);
    free(dir);
    th_rmtree(tmp);
}

Test(check, broken_config_missing_hidden_size)
{
    char *tmp, *dir = base_fixture(&tmp, "e2b", FX_HF, 0);
    struct json_object *c = load_config(dir);
    json_object_object_del(obj(c, "text_config"), "hidden_size");
    save_config(dir, c);
    struct check_report r;
    struct err e = {0};
    int rc = check_run(&r, dir, 0, &e);
    cr_assert_eq(rc, ERR_OK, "a config problem is a verdict, not an error: %s", e.msg);
    cr_assert_not(r.config_ok);
    cr_assert_not(check_loadable(&r));
    cr_assert_gt(r.n_problems, 0);
    bool found = false;
    for (int i = 0; i < r.n_groups; i++)
        if (r.groups[i].kind == CHK_CONFIG && strstr(r.groups[i].message, "hidden_size"))
            found = true;
    cr_assert(found, "no config problem naming hidden_size; %s", describe(&r));
    cr_assert_eq(count_problem_groups(&r), count_kind(&r, CHK_CONFIG), "%s", describe(&r));
    check_free(&r);
    free(dir);
    th_rmtree(tmp);
}

Test(check, broken_expert_tensor_without_moe)
{
    char *tmp, *dir = base_fixture(&tmp, "e2b", FX_HF, 0);
    struct edit ed[] = {ed_set(ED_ADD, PFX_HF "layers.1.experts.gate_up_proj", DT_BF16, 3, 4, 128, 128)};
    rewrite_st(dir, ed, 1);
    struct check_report r;
    check_broken(&r, dir);
    const struct check_group *g = expect_group(&r, CHK_UNEXPECTED, "layers.1.experts.gate_up_proj");
    cr_assert(strstr(g->message, "enable_moe_block"), "%s", g->message);
    cr_assert_eq(r.n_problems, 1, "%s", describe(&r));
    check_free(&r);
    free(dir);
    th_rmtree(tmp);
}

Test(check, broken_missing_k_proj_owning_layers)
{
    /* Layers 0..2 of e2b are sliding and own their K/V: k_proj [G*d, H] = [32, 128]. */
    char *tmp, *dir = base_fixture(&tmp, "e2b", FX_HF, 0);
    struct edit ed[3];
    for (int l = 0; l < 3; l++) {
        char name[128];
        snprintf(name, sizeof name, PFX_HF "layers.%d.self_attn.k_proj.weight", l);
        ed[l] = ed_drop(name);
    }
    rewrite_st(dir, ed, 3);
    struct check_report r;
    check_broken(&r, dir);
    const struct check_group *g = expect_group(&r, CHK_MISSING, "layers.{0..2}.self_attn.k_proj.weight");
    cr_assert_str_eq(g->expected, "[32, 128]");
    cr_assert_eq(g->n_layers, 3);
    cr_assert_eq(r.n_problems, 3, "%s", describe(&r));
    cr_assert_eq(count_problem_groups(&r), 1, "%s", describe(&r));
    /* The shared layers' K/V are still notes, not problems. */
    expect_redundant(&r, "{5..9}", 5);
    check_free(&r);
    free(dir);
    th_rmtree(tmp);
}

Test(check, broken_missing_k_proj_two_layers_and_gap)
{
    char *tmp, *dir = base_fixture(&tmp, "e4b", FX_TEXT, 0);
    /* e4b: k_proj of sliding layers 0,1 ([2*32, 128]); gate_proj of 0,1,2,4 ([256, 128]). */
    struct edit ed[] = {
        ed_drop(PFX_TEXT "layers.0.self_attn.k_proj.weight"), ed_drop(PFX_TEXT "layers.1.self_attn.k_proj.weight"),
        ed_drop(PFX_TEXT "layers.0.mlp.gate_proj.weight"),    ed_drop(PFX_TEXT "layers.1.mlp.gate_proj.weight"),
        ed_drop(PFX_TEXT "layers.2.mlp.gate_proj.weight"),    ed_drop(PFX_TEXT "layers.4.mlp.gate_proj.weight"),
        ed_drop(PFX_TEXT "layers.5.self_attn.k_proj.weight"),
    };
    rewrite_st(dir, ed, sizeof ed / sizeof ed[0]);
    struct check_report r;
    check_broken(&r, dir);
    const struct check_group *g = expect_group(&r, CHK_MISSING, "layers.{0,1}.self_attn.k_proj.weight");
    cr_assert_str_eq(g->expected, "[64, 128]");
    g = expect_group(&r, CHK_MISSING, "layers.{0..2,4}.mlp.gate_proj.weight");
    cr_assert_str_eq(g->expected, "[256, 128]");
    /* layer 5 is full: global head dim 64, 2 KV heads (no k_eq_v in e4b). */
    g = expect_group(&r, CHK_MISSING, "layers.5.self_attn.k_proj.weight");
    cr_assert_str_eq(g->expected, "[128, 128]");
    cr_assert_eq(r.n_problems, 7, "%s", describe(&r));
    check_free(&r);
    free(dir);
    th_rmtree(tmp);
}

Test(check, broken_scales_on_a_norm)
{
    char *tmp, *dir = base_fixture(&tmp, "e2b", FX_MLX, 4);
    struct edit ed[] = {ed_set(ED_ADD, PFX_MLX "layers.0.input_layernorm.scales", DT_BF16, 1, 2, 0, 0)};
    rewrite_st(dir, ed, 1);
    struct check_report r;
    check_broken(&r, dir);
    const struct check_group *g = expect_group(&r, CHK_UNEXPECTED, "layers.0.input_layernorm.scales");
    cr_assert(strstr(g->message, "never quantized"), "%s", g->message);
    cr_assert_eq(r.n_problems, 1, "%s", describe(&r));
    check_free(&r);
    free(dir);
    th_rmtree(tmp);
}

Test(check, broken_scales_without_weight)
{
    char *tmp, *dir = base_fixture(&tmp, "e2b", FX_MLX, 4);
    struct edit ed[] = {ed_drop(PFX_MLX "layers.2.self_attn.q_proj.weight")};
    rewrite_st(dir, ed, 1);
    struct check_report r;
    check_broken(&r, dir);
    const struct check_group *g = expect_group(&r, CHK_MISSING, "layers.2.self_attn.q_proj.weight");
    cr_assert_str_eq(g->expected, "U32");
    cr_assert_eq(r.n_problems, 1, "%s", describe(&r));
    check_free(&r);
    free(dir);
    th_rmtree(tmp);
}

Test(check, broken_config_marks_quantized_module_false)
{
    char *tmp, *dir = base_fixture(&tmp, "e2b", FX_MLX, 4);
    struct json_object *c = load_config(dir);
    for (int l = 0; l < 3; l++) {
        char path[128];
        snprintf(path, sizeof path, PFX_MLX "layers.%d.mlp.up_proj", l);
        json_object_object_add(obj(c, "quantization"), path, json_object_new_boolean(false));
    }
    save_config(dir, c);
    struct check_report r;
    check_broken(&r, dir);
    const struct check_group *g = expect_group(&r, CHK_QUANT, "layers.{0..2}.mlp.up_proj.weight");
    cr_assert(strstr(g->message, "false"), "%s", g->message);
    cr_assert_eq(r.n_problems, 3, "%s", describe(&r));
    cr_assert_eq(count_problem_groups(&r), 1, "%s", describe(&r));
    check_free(&r);
    free(dir);
    th_rmtree(tmp);
}

Test(check, broken_mixed_prefixes)
{
    char *tmp, *dir = base_fixture(&tmp, "e2b", FX_MLX, 0);
    struct edit ed[] = {ed_drop(PFX_MLX "norm.weight"), ed_set(ED_ADD, PFX_HF "norm.weight", DT_BF16, 1, 128, 0, 0)};
    rewrite_st(dir, ed, 2);
    struct check_report r;
    check_broken(&r, dir);
    cr_assert_eq(r.family, NF_MLX);
    const struct check_group *g = expect_group(&r, CHK_LAYOUT, PFX_HF "norm.weight");
    cr_assert(strstr(g->message, PFX_MLX), "%s", g->message);
    g = expect_group(&r, CHK_MISSING, "norm.weight");
    cr_assert_str_eq(g->expected, "[128]");
    cr_assert_eq(r.n_problems, 2, "%s", describe(&r));
    check_free(&r);
    free(dir);
    th_rmtree(tmp);
}

/* model_type gemma4_text loads 'model.' keys; gemma4 nests the text model. */
Test(check, broken_model_type_and_prefix_disagree)
{
    char *tmp = th_mkdtemp();
    char *hf = th_fixture(tmp, "hf", fx("e2b", FX_HF));
    char *text = th_fixture(tmp, "text", fx("e2b", FX_TEXT));
    /* swap the configs: an HF-multimodal-keyed checkpoint with a gemma4_text config and vice versa */
    struct json_object *ch = load_config(hf), *ct = load_config(text);
    save_config(hf, ct);
    save_config(text, ch);
    struct check_report r;
    check_broken(&r, hf);
    const struct check_group *g = expect_group(&r, CHK_LAYOUT, PFX_HF);
    cr_assert_str_eq(g->expected, "model.");
    cr_assert_eq(r.n_problems, 1, "%s", describe(&r));
    check_free(&r);
    check_broken(&r, text);
    g = expect_group(&r, CHK_LAYOUT, "model.");
    cr_assert(strstr(g->expected, PFX_HF) && strstr(g->expected, PFX_MLX), "%s", g->expected);
    cr_assert_eq(r.n_problems, 1, "%s", describe(&r));
    check_free(&r);
    free(hf);
    free(text);
    th_rmtree(tmp);
}

/* The MLX microscaling modes: loadable in every layout that quantizes (the
 * 26B's routers affine 8-bit beside them); an MX module with biases, with
 * float scales or with an affine group size is refused, by name. */
static char *mx_fixture(char **tmp, const char *variant, enum fixture_layout layout, enum qmode mode)
{
    *tmp = th_mkdtemp();
    struct fixture_opts o = fx(variant, layout);
    o.quant_mode = mode;
    qmode_defaults(mode, &o.group_size, &o.quant_bits);
    return th_fixture(*tmp, "f", o);
}

Test(check, mx_modes_loadable)
{
    static const struct {
        const char *variant;
        enum fixture_layout layout;
        enum qmode mode;
    } cases[] = {{"e2b", FX_MLX, QM_MXFP4}, {"e2b", FX_TEXT, QM_NVFP4}, {"e4b", FX_MLX, QM_MXFP8},
                 {"26b-a4b", FX_MLX, QM_MXFP4}, {"12b", FX_TEXT, QM_MXFP8}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *tmp, *dir = mx_fixture(&tmp, cases[i].variant, cases[i].layout, cases[i].mode);
        struct check_report r;
        run_check(&r, dir, 0);
        char what[64];
        snprintf(what, sizeof what, "%s %s", cases[i].variant, qmode_name(cases[i].mode));
        expect_loadable(&r, what);
        cr_assert_eq(r.cfg.quant.global.mode, cases[i].mode, "%s", what);
        cr_assert_gt(r.n_quantized, 0, "%s", what);
        check_free(&r);
        free(dir);
        th_rmtree(tmp);
    }
}

Test(check, broken_mx_module)
{
    char *tmp, *dir = mx_fixture(&tmp, "e2b", FX_MLX, QM_MXFP4);
    /* q_proj [128, 128] (sliding layers), [256, 128] (full layer 4) in mxfp4: scales U8 [.., 4] */
    struct edit ed[] = {ed_set(ED_ADD, PFX_MLX "layers.2.self_attn.q_proj.biases", DT_U8, 2, 128, 4, 0),
                        ed_set(ED_CHANGE, PFX_MLX "layers.3.self_attn.q_proj.scales", DT_BF16, 2, 128, 4, 0),
                        ed_set(ED_CHANGE, PFX_MLX "layers.4.self_attn.q_proj.scales", DT_U8, 2, 256, 2, 0)};
    rewrite_st(dir, ed, 3);
    struct check_report r;
    check_broken(&r, dir);
    const struct check_group *g = expect_group(&r, CHK_UNEXPECTED, "layers.2.self_attn.q_proj.biases");
    cr_assert(strstr(g->message, "mxfp4 quantization has no biases"), "%s", g->message);
    g = expect_group(&r, CHK_DTYPE, "layers.3.self_attn.q_proj.scales");
    cr_assert_str_eq(g->expected, "U8");
    cr_assert_str_eq(g->found, "BF16");
    g = expect_group(&r, CHK_SHAPE, "layers.4.self_attn.q_proj.scales");
    cr_assert_str_eq(g->expected, "[256, 4]");
    check_free(&r);
    free(dir);
    th_rmtree(tmp);
}

/* ---- Google's QAT formats: compressed-tensors and GGUF, transcoded ---- */

static char *format_fixture(char **tmp, const char *variant, enum fixture_format f)
{
    *tmp = th_mkdtemp();
    struct fixture_opts o = fx(variant, FX_HF);
    o.format = f;
    char *dir = th_fixture(*tmp, "f", o);
    if (f == FXF_CT_W4A16)
        return dir;
    char *file = fio_join(dir, "model.gguf");
    free(dir);
    return file;
}

/* The problem from the transcoder whose message holds `sub`. */
static const struct check_group *source_problem(const struct check_report *r, const char *sub)
{
    for (int i = 0; i < r->n_groups; i++)
        if (r->groups[i].kind == CHK_QUANT && strstr(r->groups[i].message, sub))
            return &r->groups[i];
    cr_assert_fail("no problem saying \"%s\"; %s", sub, describe(r));
    return NULL;
}

Test(check, qat_formats_loadable)
{
    static const struct {
        const char *variant;
        enum fixture_format f;
        enum source_kind kind;
        size_t modules; /* transcoded modules (or tensors) recorded */
    } cases[] = {
        /* e2b: 10 layers x (q, k, v, o, gate, up, down, PLE gate and projection) + the PLE model projection */
        {"e2b", FXF_CT_W4A16, SRC_CT, 10 * 9 + 1},
        /* 26b-a4b: 5 sliding x 4 + 1 full (k_eq_v) x 3 attention, 6 x 3 MLP, 6 x 3 expert stacks */
        {"26b-a4b", FXF_CT_W4A16, SRC_CT, 23 + 18 + 18},
        /* GGUF also quantizes both embeddings */
        {"e2b", FXF_GGUF_Q4_0, SRC_GGUF, 10 * 9 + 1 + 2},
        /* the fused gate_up tensor becomes two records; the token embedding one more */
        {"26b-a4b", FXF_GGUF_Q8_0, SRC_GGUF, 23 + 18 + 18 + 1},
        /* 12b: 10 sliding x 4 + 2 full x 3 attention, 12 x 3 MLP, the embedding */
        {"12b", FXF_GGUF_Q4_0, SRC_GGUF, 46 + 36 + 1}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *tmp, *path = format_fixture(&tmp, cases[i].variant, cases[i].f);
        struct check_report r;
        run_check(&r, path, 0);
        expect_loadable(&r, path);
        cr_assert_eq(r.src.kind, cases[i].kind, "%s", path);
        cr_assert_eq(r.src.n_mods, cases[i].modules, "%s: %zu modules transcoded", path, r.src.n_mods);
        cr_assert_eq(r.cfg.quant.global.mode, QM_AFFINE);
        cr_assert_eq(r.cfg.quant.global.bits, cases[i].f == FXF_GGUF_Q8_0 ? 8 : 4, "%s", path);
        cr_assert_eq(r.cfg.quant.global.group_size, 32, "%s", path);
        check_free(&r);
        free(path);
        th_rmtree(tmp);
    }
}

Test(check, broken_ct)
{
    char *tmp, *dir = format_fixture(&tmp, "e2b", FXF_CT_W4A16);
    struct edit ed[] = {ed_drop(PFX_HF "layers.1.mlp.up_proj.weight_scale"),
                        ed_set(ED_CHANGE, PFX_HF "layers.2.mlp.up_proj.weight_scale", DT_BF16, 2, 256, 3, 0),
                        ed_set(ED_CHANGE, PFX_HF "layers.3.mlp.up_proj.weight_packed", DT_I32, 2, 256, 24, 0)};
    rewrite_st(dir, ed, 3);
    struct json_object *c = load_config(dir), *q = obj(c, "quantization_config");
    json_object_array_add(obj(q, "ignore"), json_object_new_string("re:.*layers\\.4\\.mlp\\.gate_proj$"));
    save_config(dir, c);
    struct check_report r;
    check_broken(&r, dir);
    source_problem(&r, "model.language_model.layers.1.mlp.up_proj: weight_packed without weight_scale");
    source_problem(&r, "layers.2.mlp.up_proj.weight_scale: BF16 rank 2, expected a float [256, groups] dividing 128");
    source_problem(&r, "layers.3.mlp.up_proj.weight_packed: 24 words per row, but num_bits 4 (config_groups.group_0) "
                       "packs 128 inputs in 16");
    source_problem(&r, "layers.4.mlp.gate_proj: quantized, but quantization_config.ignore keeps it dense");
    check_free(&r);

    /* activations quantized: not weight-only */
    c = load_config(dir);
    q = obj(obj(obj(c, "quantization_config"), "config_groups"), "group_0");
    json_object_object_add(q, "input_activations", json_object_new_object());
    save_config(dir, c);
    check_broken(&r, dir);
    source_problem(&r, "config_groups.group_0.input_activations: quantized activations (not weight-only)");
    check_free(&r);
    free(dir);
    th_rmtree(tmp);
}

/* A module with no exact MLX affine form (here int4 in groups of 16, and a
 * 3-bit one) is carried as F32, exact, and named; convert keeps it exact. */
Test(check, ct_dense_fallback)
{
    char *tmp, *dir = format_fixture(&tmp, "e2b", FXF_CT_W4A16);
    /* layers.2.mlp.down_proj [128, 256]: int4 group 16; layers.4.mlp.gate_proj [256, 128]: int3 group 32 */
    struct edit ed[] = {ed_set(ED_CHANGE, PFX_HF "layers.2.mlp.down_proj.weight_scale", DT_BF16, 2, 128, 16, 0),
                        ed_set(ED_CHANGE, PFX_HF "layers.4.mlp.gate_proj.weight_packed", DT_I32, 2, 256, 12, 0)};
    rewrite_st(dir, ed, 2);
    struct json_object *c = load_config(dir), *groups = obj(obj(c, "quantization_config"), "config_groups");
    static const char *const names[] = {"g16", "int3"};
    static const char *const targets[] = {"re:.*layers\\.2\\.mlp\\.down_proj$", "re:.*layers\\.4\\.mlp\\.gate_proj$"};
    for (int k = 0; k < 2; k++) {
        struct json_object *g = json_object_get(obj(groups, "group_0")), *copy = NULL;
        cr_assert_eq(json_object_deep_copy(g, &copy, NULL), 0);
        json_object_put(g);
        struct json_object *t = json_object_new_array(), *w = obj(copy, "weights");
        json_object_array_add(t, json_object_new_string(targets[k]));
        json_object_object_add(copy, "targets", t);
        json_object_object_add(w, k ? "num_bits" : "group_size", json_object_new_int(k ? 3 : 16));
        json_object_object_add(groups, names[k], copy);
    }
    save_config(dir, c);
    struct check_report r;
    run_check(&r, dir, 0);
    expect_loadable(&r, dir);
    int dense = 0;
    for (size_t i = 0; i < r.src.n_mods; i++)
        dense += strstr(r.src.mods[i].to, "F32, dense") != NULL;
    cr_assert_eq(dense, 2, "two modules carried as F32");
    check_free(&r);

    char pack[4200];
    snprintf(pack, sizeof pack, "%s/p.gpk", tmp);
    struct convert_opts co = {.align = 64, .out = pack, .plan = {.group_size = 64}};
    struct convert_report rep;
    struct err e = {0};
    cr_assert_eq(convert_run(&rep, dir, &co, &e), ERR_OK, "%s", e.msg);
    struct json_object *j = convert_json(&rep), *plan = json_object_object_get(j, "plan");
    cr_assert_eq(json_object_get_int64(json_object_object_get(plan, "exact_tensors")), (int64_t)rep.plan.n);
    bool seen = false;
    for (size_t i = 0; i < rep.plan.n; i++)
        if (!strcmp(rep.plan.items[i].nt->name, "layers.2.mlp.down_proj.weight")) {
            cr_assert_eq(rep.plan.items[i].dtype, DT_F32);
            seen = true;
        }
    cr_assert(seen);
    json_object_put(j);
    convert_free(&rep);
    free(dir);
    th_rmtree(tmp);
}

Test(check, qat_shared_layers_need_no_kv)
{
    /* Pruning the redundant K/V of a PTQ fixture by hand gives a loadable QAT-like checkpoint. */
    char *tmp, *dir = base_fixture(&tmp, "e2b", FX_HF, 0);
    struct edit ed[15];
    int n = 0;
    for (int l = 5; l < 10; l++) {
        static const char *const parts[] = {"k_proj.weight", "k_norm.weight", "v_proj.weight"};
        for (int k = 0; k < 3; k++) {
            char name[128];
            snprintf(name, sizeof name, PFX_HF "layers.%d.self_attn.%s", l, parts[k]);
            ed[n++] = ed_drop(name);
        }
    }
    rewrite_st(dir, ed, (size_t)n);
    struct check_report r;
    run_check(&r, dir, 0);
    expect_loadable(&r, "pruned");
    cr_assert_eq(r.n_notes, 0, "%s", describe(&r));
    check_free(&r);
    free(dir);
    th_rmtree(tmp);
}

Test(check, group_name_collapsing)
{
    struct check_group g = {.kind = CHK_MISSING};
    snprintf(g.pattern, sizeof g.pattern, "layers.%%L.self_attn.k_proj.weight");
    char buf[256];
    int one[] = {3};
    g.layers = one;
    g.n_layers = 1;
    check_group_name(&g, buf, sizeof buf);
    cr_assert_str_eq(buf, "layers.3.self_attn.k_proj.weight");
    int two[] = {0, 1};
    g.layers = two;
    g.n_layers = 2;
    check_group_name(&g, buf, sizeof buf);
    cr_assert_str_eq(buf, "layers.{0,1}.self_attn.k_proj.weight");
    int gap[] = {0, 1, 2, 4};
    g.layers = gap;
    g.n_layers = 4;
    check_group_name(&g, buf, sizeof buf);
    cr_assert_str_eq(buf, "layers.{0..2,4}.self_attn.k_proj.weight");
    int mixed[] = {1, 2, 3, 5, 6, 8, 9, 10, 20};
    g.layers = mixed;
    g.n_layers = 9;
    check_group_name(&g, buf, sizeof buf);
    cr_assert_str_eq(buf, "layers.{1..3,5,6,8..10,20}.self_attn.k_proj.weight");
    int run[] = {15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34};
    g.layers = run;
    g.n_layers = 20;
    check_group_name(&g, buf, sizeof buf);
    cr_assert_str_eq(buf, "layers.{15..34}.self_attn.k_proj.weight");
    struct check_group global = {.kind = CHK_MISSING};
    snprintf(global.pattern, sizeof global.pattern, "norm.weight");
    check_group_name(&global, buf, sizeof buf);
    cr_assert_str_eq(buf, "norm.weight");
}

/* ------------------------------------------------------ unreadable input */

Test(check, error_no_config)
{
    char *tmp, *dir = base_fixture(&tmp, "e2b", FX_HF, 0);
    free(remove_file(dir, "config.json"));
    struct check_report r;
    struct err e = {0};
    int rc = check_run(&r, dir, 0, &e);
    cr_assert_eq(rc, ERR_IO, "rc %d: %s", rc, e.msg);
    cr_assert(strstr(e.msg, "config.json"), "%s", e.msg);
    cr_assert_not(check_loadable(&r));
    check_free(&r);
    free(dir);
    th_rmtree(tmp);
}

Test(check, error_config_not_json)
{
    char *tmp, *dir = base_fixture(&tmp, "e2b", FX_HF, 0);
    free(th_write(dir, "config.json", "{\"model_type\": \"gemma4\", ", 25));
    struct check_report r;
    struct err e = {0};
    int rc = check_run(&r, dir, 0, &e);
    cr_assert_eq(rc, ERR_FORMAT, "rc %d: %s", rc, e.msg);
    cr_assert_not(check_loadable(&r));
    check_free(&r);
    free(dir);
    th_rmtree(tmp);
}

Test(check, error_missing_shard)
{
    char *tmp = th_mkdtemp();
    struct fixture_opts o = fx("e2b", FX_HF);
    o.shards = 3;
    char *dir = th_fixture(tmp, "f", o);
    free(remove_file(dir, "model-00002-of-00003.safetensors"));
    struct check_report r;
    struct err e = {0};
    int rc = check_run(&r, dir, 0, &e);
    cr_assert_neq(rc, ERR_OK, "missing shard accepted");
    cr_assert(strstr(e.msg, "model-00002-of-00003.safetensors"), "%s", e.msg);
    cr_assert_not(check_loadable(&r));
    check_free(&r);
    e = (struct err){0};
    rc = check_run(&r, dir, CHECK_HEADERS_ONLY, &e);
    cr_assert_neq(rc, ERR_OK, "missing shard accepted with CHECK_HEADERS_ONLY");
    check_free(&r);
    free(dir);
    th_rmtree(tmp);
}

static uint64_t header_len(const char *path)
{
    size_t len;
    uint8_t *b = th_read(path, &len);
    cr_assert(b && len >= 8);
    uint64_t n = 0;
    for (int i = 0; i < 8; i++)
        n |= (uint64_t)b[i] << (8 * i);
    free(b);
    return n;
}

Test(check, error_truncated_shard)
{
    char *tmp, *dir = base_fixture(&tmp, "e2b", FX_HF, 0);
    char *st = fio_join(dir, "model.safetensors");
    uint64_t n = header_len(st);
    struct check_report r;
    struct err e = {0};
    /* cut in the middle of the data: an error with or without the flag */
    cr_assert_eq(truncate(st, (off_t)(8 + n + 1000)), 0);
    int rc = check_run(&r, dir, 0, &e);
    cr_assert_neq(rc, ERR_OK, "truncated shard accepted");
    check_free(&r);
    rc = check_run(&r, dir, CHECK_HEADERS_ONLY, &e);
    cr_assert_neq(rc, ERR_OK, "a shard cut inside its data accepted with CHECK_HEADERS_ONLY");
    check_free(&r);
    /* cut right after the header: only CHECK_HEADERS_ONLY accepts it */
    cr_assert_eq(truncate(st, (off_t)(8 + n)), 0);
    rc = check_run(&r, dir, 0, &e);
    cr_assert_neq(rc, ERR_OK, "header-only shard accepted without CHECK_HEADERS_ONLY");
    check_free(&r);
    e = (struct err){0};
    rc = check_run(&r, dir, CHECK_HEADERS_ONLY, &e);
    cr_assert_eq(rc, ERR_OK, "%s", e.msg);
    expect_loadable(&r, "truncated after header, CHECK_HEADERS_ONLY");
    check_free(&r);
    free(st);
    free(dir);
    th_rmtree(tmp);
}

Test(check, headers_only_fixture)
{
    char *tmp = th_mkdtemp();
    static const struct {
        const char *variant;
        enum fixture_layout layout;
        int quant, shards;
    } cases[] = {{"e2b", FX_HF, 0, 1}, {"26b-a4b", FX_MLX, 4, 2}, {"31b", FX_TEXT, 0, 3}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        struct fixture_opts o = fx(cases[c].variant, cases[c].layout);
        o.quant_bits = cases[c].quant;
        o.shards = cases[c].shards;
        o.headers_only = true;
        char sub[32];
        snprintf(sub, sizeof sub, "h%zu", c);
        char *dir = th_fixture(tmp, sub, o);
        struct check_report r;
        struct err e = {0};
        int rc = check_run(&r, dir, CHECK_HEADERS_ONLY, &e);
        cr_assert_eq(rc, ERR_OK, "%s: %s", cases[c].variant, e.msg);
        expect_loadable(&r, cases[c].variant);
        for (size_t s = 0; s < r.src.ck.n_shards; s++)
            cr_assert(r.src.ck.shards[s].truncated, "%s shard %zu", cases[c].variant, s);
        check_free(&r);
        rc = check_run(&r, dir, 0, &e);
        cr_assert_neq(rc, ERR_OK, "%s: a headers-only fixture accepted without CHECK_HEADERS_ONLY", cases[c].variant);
        check_free(&r);
        free(dir);
    }
    th_rmtree(tmp);
}

/* ------------------------------------------------------ JSON */

static struct json_object *jget(struct json_object *o, const char *key)
{
    struct json_object *v = NULL;
    cr_assert(json_object_object_get_ex(o, key, &v), "JSON has no key %s: %s", key, json_object_to_json_string(o));
    return v;
}

static void roundtrip(struct json_object *o)
{
    const char *s = json_object_to_json_string(o);
    struct json_object *p = json_tokener_parse(s);
    cr_assert(p, "check_to_json output does not parse: %s", s);
    cr_assert(json_object_equal(o, p), "round trip differs");
    cr_assert_str_eq(json_object_to_json_string(p), s);
    json_object_put(p);
}

Test(check, json_loadable)
{
    char *tmp, *dir = base_fixture(&tmp, "e2b", FX_HF, 0);
    struct check_report r;
    run_check(&r, dir, 0);
    struct json_object *o = check_to_json(&r);
    cr_assert(o);
    roundtrip(o);
    cr_assert_str_eq(json_object_get_string(jget(o, "schema")), "gempack.check/1");
    cr_assert_str_eq(json_object_get_string(jget(o, "verdict")), "loadable");
    cr_assert(json_object_get_boolean(jget(o, "loadable")));
    cr_assert_str_eq(json_object_get_string(jget(o, "path")), dir);
    cr_assert_eq(json_object_array_length(jget(o, "problems")), 0);
    cr_assert_eq(json_object_get_int(jget(o, "problem_count")), 0);
    struct json_object *cfg = jget(o, "config");
    cr_assert_eq(json_object_get_int64(jget(cfg, "num_hidden_layers")), 10);
    cr_assert_eq(json_object_get_int64(jget(cfg, "first_kv_shared_layer")), 5);
    cr_assert_eq(json_object_get_int(jget(cfg, "full_layers")), 2);
    cr_assert_eq(json_object_get_int(jget(cfg, "sliding_layers")), 8);
    cr_assert_str_eq(json_object_get_string(jget(jget(o, "layout"), "family")), "hf");
    cr_assert_str_eq(json_object_get_string(jget(jget(o, "quantization"), "kind")), "none");
    struct json_object *notes = jget(o, "notes");
    cr_assert_eq(json_object_array_length(notes), 3);
    bool k_proj = false;
    for (size_t i = 0; i < 3; i++) {
        struct json_object *n = json_object_array_get_idx(notes, i);
        cr_assert_str_eq(json_object_get_string(jget(n, "kind")), "redundant");
        struct json_object *ls = jget(n, "layers");
        cr_assert_eq(json_object_array_length(ls), 5);
        for (size_t k = 0; k < 5; k++)
            cr_assert_eq(json_object_get_int(json_object_array_get_idx(ls, k)), 5 + (int)k);
        if (!strcmp(json_object_get_string(jget(n, "tensor")), "layers.{5..9}.self_attn.k_proj.weight"))
            k_proj = true;
    }
    cr_assert(k_proj);
    json_object_put(o);
    check_free(&r);
    free(dir);
    th_rmtree(tmp);
}

Test(check, json_not_loadable)
{
    char *tmp, *dir = base_fixture(&tmp, "e2b", FX_MLX, 4);
    struct edit ed[] = {ed_drop(PFX_MLX "layers.0.self_attn.k_proj.weight"),
                        ed_drop(PFX_MLX "layers.0.self_attn.k_proj.scales"),
                        ed_drop(PFX_MLX "layers.0.self_attn.k_proj.biases"),
                        ed_drop(PFX_MLX "layers.1.self_attn.k_proj.weight"),
                        ed_drop(PFX_MLX "layers.1.self_attn.k_proj.scales"),
                        ed_drop(PFX_MLX "layers.1.self_attn.k_proj.biases"),
                        ed_drop(PFX_MLX "layers.2.self_attn.k_proj.weight"),
                        ed_drop(PFX_MLX "layers.2.self_attn.k_proj.scales"),
                        ed_drop(PFX_MLX "layers.2.self_attn.k_proj.biases")};
    rewrite_st(dir, ed, sizeof ed / sizeof ed[0]);
    struct check_report r;
    run_check(&r, dir, 0);
    struct json_object *o = check_to_json(&r);
    roundtrip(o);
    cr_assert_str_eq(json_object_get_string(jget(o, "schema")), "gempack.check/1");
    cr_assert_str_eq(json_object_get_string(jget(o, "verdict")), "not_loadable");
    cr_assert_not(json_object_get_boolean(jget(o, "loadable")));
    cr_assert_eq(json_object_get_int(jget(o, "problem_count")), 3);
    struct json_object *q = jget(o, "quantization");
    cr_assert_str_eq(json_object_get_string(jget(q, "kind")), "mlx");
    cr_assert_eq(json_object_get_int(jget(q, "bits")), 4);
    cr_assert_eq(json_object_get_int(jget(q, "group_size")), 64);
    struct json_object *ps = jget(o, "problems");
    cr_assert_eq(json_object_array_length(ps), 1, "%s", json_object_to_json_string(ps));
    struct json_object *p = json_object_array_get_idx(ps, 0);
    cr_assert_str_eq(json_object_get_string(jget(p, "kind")), "missing");
    cr_assert_str_eq(json_object_get_string(jget(p, "tensor")), "layers.{0..2}.self_attn.k_proj.weight");
    cr_assert_str_eq(json_object_get_string(jget(p, "expected")), "[32, 128]");
    struct json_object *ls = jget(p, "layers");
    cr_assert_eq(json_object_array_length(ls), 3);
    for (size_t k = 0; k < 3; k++)
        cr_assert_eq(json_object_get_int(json_object_array_get_idx(ls, k)), (int)k);
    json_object_put(o);
    check_free(&r);
    free(dir);
    th_rmtree(tmp);
}

Test(check, json_config_problem)
{
    char *tmp, *dir = base_fixture(&tmp, "e2b", FX_HF, 0);
    struct json_object *c = load_config(dir);
    json_object_object_del(obj(c, "text_config"), "hidden_size");
    save_config(dir, c);
    struct check_report r;
    run_check(&r, dir, 0);
    struct json_object *o = check_to_json(&r);
    roundtrip(o);
    cr_assert_str_eq(json_object_get_string(jget(o, "verdict")), "not_loadable");
    cr_assert(json_object_is_type(jget(o, "config"), json_type_null));
    struct json_object *ps = jget(o, "problems");
    cr_assert_gt(json_object_array_length(ps), 0);
    struct json_object *p = json_object_array_get_idx(ps, 0);
    cr_assert_str_eq(json_object_get_string(jget(p, "kind")), "config");
    cr_assert(json_object_is_type(jget(p, "tensor"), json_type_null));
    cr_assert_eq(json_object_array_length(jget(p, "layers")), 0);
    cr_assert(strstr(json_object_get_string(jget(p, "message")), "hidden_size"));
    json_object_put(o);
    check_free(&r);
    free(dir);
    th_rmtree(tmp);
}

/* The kind of a path, by stat and magic: what source_open and inspect take it for. */
Test(check, input_kind)
{
    char *dir = th_mkdtemp(), missing[4200];
    char *gguf = th_write(dir, "model.gguf", "GGUF\3\0\0\0", 8), *pack = th_write(dir, "m.gpk", PACK_MAGIC, 8),
         *npz = th_write(dir, "g.npz", "PK\3\4", 4), *st = th_write(dir, "model.safetensors", "\x08\0\0\0\0\0\0\0{}", 10),
         *empty = th_write(dir, "empty.gguf", "", 0), *short_pack = th_write(dir, "short.gpk", PACK_MAGIC, 7);
    snprintf(missing, sizeof missing, "%s/nope.gguf", dir);
    cr_assert_eq(input_kind(dir), IN_DIR);
    cr_assert_eq(input_kind(gguf), IN_GGUF);
    cr_assert_eq(input_kind(pack), IN_PACK);
    cr_assert_eq(input_kind(npz), IN_NPZ);
    cr_assert_eq(input_kind(st), IN_OTHER);
    cr_assert_eq(input_kind(empty), IN_OTHER);
    cr_assert_eq(input_kind(short_pack), IN_OTHER);
    cr_assert_eq(input_kind(missing), IN_MISSING);
    cr_assert_eq(input_kind("/dev/null"), IN_OTHER, "a character device");
    free(gguf), free(pack), free(npz), free(st), free(empty), free(short_pack);
    th_rmtree(dir);
}

/* A directory without config.json whose one regular *.gguf file is that
 * model (what `fixture --format gguf-*` writes); two are an error naming
 * them; a config.json, even a broken link, keeps the directory a directory. */
Test(check, input_lone_gguf)
{
    char unset[] = "unset", *dir = th_mkdtemp(), *out = unset, sub[4200];
    struct err e = {0};
    cr_assert_eq(input_lone_gguf(dir, &out, &e), ERR_OK);
    cr_assert_null(out, "an empty directory");
    snprintf(sub, sizeof sub, "%s/d.gguf", dir);
    cr_assert_eq(mkdir(sub, 0755), 0);
    char *one = th_write(dir, "model.gguf", "GGUF", 4), *note = th_write(dir, "model.gguf.txt", "x", 1);
    cr_assert_eq(input_lone_gguf(dir, &out, &e), ERR_OK);
    cr_assert(out && !strcmp(out, one), "the one file, not the directory d.gguf nor model.gguf.txt: %s", out);
    free(out);
    char *two = th_write(dir, "b.gguf", "", 0);
    cr_assert_eq(input_lone_gguf(dir, &out, &e), ERR_USAGE);
    cr_assert(out == NULL && strstr(e.msg, "model.gguf") && strstr(e.msg, "b.gguf"), "%s", e.msg);
    cr_assert_eq(unlink(two), 0);
    char cfg[4200];
    snprintf(cfg, sizeof cfg, "%s/config.json", dir);
    cr_assert_eq(symlink("nowhere", cfg), 0);
    cr_assert_eq(input_lone_gguf(dir, &out, &e), ERR_OK);
    cr_assert_null(out, "a broken config.json link is a config.json");
    cr_assert_eq(unlink(cfg), 0);
    cr_assert_eq(rmdir(sub), 0);
    free(one), free(two), free(note);
    th_rmtree(dir);
}

/* compressed-tensors matches `re:` targets with Python's re.match: gempack
 * agrees with it on tests/ct_regex_cases.json (whose expected results
 * tests/ct_regex_cases.py checks against Python itself): \d, sets such as
 * [[:digit:]] read as Python reads them, (?: groups, lazy repeats, a
 * 600-byte pattern. */
Test(check, ct_targets_as_python_reads_them)
{
    char *path = fio_join(GP_SOURCE_DIR, "tests/ct_regex_cases.json");
    struct json_object *cases = json_object_from_file(path);
    cr_assert(cases && json_object_get_type(cases) == json_type_array, "%s", path);
    size_t n = json_object_array_length(cases);
    cr_assert_geq(n, 20);
    for (size_t i = 0; i < n; i++) {
        struct json_object *c = json_object_array_get_idx(cases, i);
        const char *p = json_object_get_string(json_object_object_get(c, "pattern")),
                   *name = json_object_get_string(json_object_object_get(c, "name"));
        bool want = json_object_get_boolean(json_object_object_get(c, "match"));
        cr_expect_eq(ct_py_match(p, name), want, "re.match(%s, %s) is %s in Python", p, name, want ? "a match" : "None");
    }
    json_object_put(cases);
    free(path);
}

/* compressed-tensors' own semantics (utils/match.py, lifecycle/apply.py): a
 * module takes the scheme of its most specific target (an exact name before
 * a regex before a class), whatever group order says; an `ignore` regex is
 * read whole however long; num_bits is a number from 1 to 8, not its low
 * 32 bits. */
Test(check, ct_most_specific_group_wins)
{
    char *tmp, *dir = format_fixture(&tmp, "e2b", FXF_CT_W4A16);
    const char *up3 = "model.language_model.layers.3.mlp.up_proj";
    struct json_object *c = load_config(dir), *q = obj(c, "quantization_config"), *groups = obj(q, "config_groups");
    /* a later group whose class target would also select every module: the regex of group_0 still wins */
    struct json_object *g1 = NULL, *t = json_object_new_array();
    cr_assert_eq(json_object_deep_copy(obj(groups, "group_0"), &g1, NULL), 0);
    json_object_array_add(t, json_object_new_string("Linear"));
    json_object_object_add(g1, "targets", t);
    json_object_object_add(obj(g1, "weights"), "num_bits", json_object_new_int(8));
    json_object_object_add(groups, "group_1", g1);
    save_config(dir, c);
    struct check_report r;
    run_check(&r, dir, 0);
    expect_loadable(&r, dir);
    check_free(&r);

    /* an exact name in an earlier group beats group_0's regex: its int8 is not the tensors' int4 */
    c = load_config(dir);
    groups = obj(obj(c, "quantization_config"), "config_groups");
    json_object_object_del(groups, "group_1");
    struct json_object *g2 = NULL;
    cr_assert_eq(json_object_deep_copy(obj(groups, "group_0"), &g2, NULL), 0);
    t = json_object_new_array();
    json_object_array_add(t, json_object_new_string(up3));
    json_object_object_add(g2, "targets", t);
    json_object_object_add(obj(g2, "weights"), "num_bits", json_object_new_int(8));
    json_object_object_add(groups, "a_first", g2);
    save_config(dir, c);
    check_broken(&r, dir);
    source_problem(&r, "layers.3.mlp.up_proj.weight_packed: 16 words per row, but num_bits 8 (config_groups.a_first) "
                       "packs 128 inputs in 32");
    check_free(&r);

    /* num_bits 2^32 + 4 is not 4; an ignore regex of 600 bytes is read whole */
    c = load_config(dir);
    q = obj(c, "quantization_config");
    groups = obj(q, "config_groups");
    json_object_object_del(groups, "a_first");
    json_object_object_add(obj(obj(groups, "group_0"), "weights"), "num_bits", json_object_new_int64(4294967300LL));
    char long_re[700];
    snprintf(long_re, sizeof long_re, "re:%0600d|.*layers\\.4\\.mlp\\.gate_proj$", 0);
    json_object_array_add(obj(q, "ignore"), json_object_new_string(long_re));
    save_config(dir, c);
    check_broken(&r, dir);
    source_problem(&r, "config_groups.group_0.weights.num_bits: 4294967300, expected 1..8");
    source_problem(&r, "layers.4.mlp.gate_proj: quantized, but quantization_config.ignore keeps it dense");
    check_free(&r);
    free(dir);
    th_rmtree(tmp);
}
