/* main.c - the gempack command line: argument parsing, printing, exit codes.
 * The only file that prints to the terminal or exits; everything it calls
 * returns error codes with messages (core/err.h).
 *
 * Exit codes: 0 success; 1 a negative verdict (check: not loadable);
 * 2 usage error, unreadable input or any other failure. */
#include <getopt.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "converter/check.h"
#include "converter/convert.h"
#include "core/checkpoint.h"
#include "core/config.h"
#include "core/pack.h"
#include "core/quant.h"
#include "core/safetensors.h"
#include "fixtures/fixture.h"
#include "gp_config.h"

enum { EXIT_VERDICT = 1, EXIT_ERROR = 2 };

static int fail(const struct err *e)
{
    fprintf(stderr, "gempack: error: %s\n", e->msg);
    return EXIT_ERROR;
}

static int usage_error(const char *cmd, const char *fmt, const char *arg)
{
    fprintf(stderr, "gempack %s: ", cmd);
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\nTry 'gempack %s --help'.\n", cmd);
    return EXIT_ERROR;
}

static void print_json(struct json_object *o)
{
    puts(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED |
                                               JSON_C_TO_STRING_NOSLASHESCAPE));
}

/* Strict decimal parse of a non-negative integer option value. */
static bool parse_u64(const char *s, unsigned long long max, unsigned long long *out)
{
    if (!s || !*s)
        return false;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (*end || s[0] == '-' || v > max)
        return false;
    *out = v;
    return true;
}

/* ---- check ---- */

static const char check_help[] =
    "usage: gempack check DIR [--json] [--headers-only]\n"
    "\n"
    "Tells whether the checkpoint in DIR loads as a Gemma 4 text model, reading\n"
    "config.json and the safetensors headers only, and lists every reason why not:\n"
    "missing, unexpected, mis-shaped and wrongly typed tensors (layer ranges\n"
    "collapsed), quantization inconsistent with config.json, config fields that are\n"
    "missing or invalid. K/V tensors of KV-shared layers are reported as redundant\n"
    "notes; tower and projector tensors are listed as ignored.\n"
    "\n"
    "  --json          print the report as one JSON object on stdout (schema\n"
    "                  gempack.check/1, docs/CLI.md); the text report goes to stderr\n"
    "  --headers-only  accept shards that end right after their header (fetched\n"
    "                  with a range request); names, dtypes and shapes are checked\n"
    "  -h, --help      this text\n"
    "\n"
    "Exit: 0 loadable, 1 not loadable, 2 usage error or unreadable input.\n";

static int cmd_check(int argc, char **argv)
{
    static const struct option opts[] = {
        {"json", no_argument, 0, 'j'}, {"headers-only", no_argument, 0, 'H'}, {"help", no_argument, 0, 'h'}, {0}};
    bool json = false;
    unsigned flags = 0;
    int c;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'j': json = true; break;
        case 'H': flags |= CHECK_HEADERS_ONLY; break;
        case 'h': fputs(check_help, stdout); return 0;
        default: return usage_error("check", "%s", "invalid option");
        }
    }
    if (optind + 1 != argc)
        return usage_error("check", "%s", "expected exactly one checkpoint directory");
    struct check_report r;
    struct err e = {0};
    int rc = check_run(&r, argv[optind], flags, &e);
    if (rc != ERR_OK) {
        check_free(&r);
        return fail(&e);
    }
    check_print_text(json ? stderr : stdout, &r);
    if (json) {
        struct json_object *o = check_to_json(&r);
        print_json(o);
        json_object_put(o);
    }
    int code = check_loadable(&r) ? 0 : EXIT_VERDICT;
    check_free(&r);
    return code;
}

/* ---- inspect ---- */

static const char inspect_help[] =
    "usage: gempack inspect PATH [--json]\n"
    "\n"
    "Lists the tensors (name, dtype, shape, bytes) and metadata of a safetensors\n"
    "file, of every shard of a checkpoint directory (headers only), or of a .gpk\n"
    "pack (header, manifest, tensors with CRCs and quantization).\n"
    "\n"
    "  --json      one JSON object on stdout (schema gempack.inspect/1)\n"
    "  -h, --help  this text\n";

static void fmt_shape(char *buf, size_t len, const uint64_t *shape, int rank)
{
    size_t o = (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < rank && o < len; i++)
        o += (size_t)snprintf(buf + o, len - o, "%s%llu", i ? ", " : "", (unsigned long long)shape[i]);
    if (o < len)
        snprintf(buf + o, len - o, "]");
}

static struct json_object *tensor_json(const struct st_tensor *t, const char *file)
{
    struct json_object *o = json_object_new_object();
    json_object_object_add(o, "name", json_object_new_string(t->name));
    json_object_object_add(o, "dtype", json_object_new_string(dtype_name(t->dtype)));
    struct json_object *s = json_object_new_array();
    for (int d = 0; d < t->rank; d++)
        json_object_array_add(s, json_object_new_int64((int64_t)t->shape[d]));
    json_object_object_add(o, "shape", s);
    json_object_object_add(o, "nbytes", json_object_new_int64((int64_t)(t->end - t->begin)));
    json_object_object_add(o, "file", json_object_new_string(file));
    json_object_object_add(o, "offset", json_object_new_int64((int64_t)t->begin));
    return o;
}

static int inspect_pack(const char *path, bool json)
{
    struct pack p;
    struct err e = {0};
    if (pack_open(&p, path, &e) != ERR_OK)
        return fail(&e);
    FILE *out = json ? stderr : stdout;
    fprintf(out, "%s: gempack pack v%d.%u, alignment %u, %zu bytes\n", path, PACK_VERSION_MAJOR, p.version_minor,
            p.align, p.size);
    fprintf(out, "  data      offset %llu, %llu bytes\n", (unsigned long long)p.data_offset,
            (unsigned long long)p.data_size);
    fprintf(out, "  manifest  offset %llu, %llu bytes\n", (unsigned long long)p.manifest_offset,
            (unsigned long long)p.manifest_size);
    struct json_object *v, *q = NULL;
    if (json_object_object_get_ex(p.manifest, "required_features", &v))
        fprintf(out, "  features  %s\n", json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN));
    if (json_object_object_get_ex(p.manifest, "options", &v))
        fprintf(out, "  options   %s\n", json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN));
    if (json_object_object_get_ex(p.manifest, "normalization", &v))
        fprintf(out, "  normalization log: %zu entries\n", json_object_array_length(v));
    json_object_object_get_ex(p.manifest, "quantized", &q);
    fprintf(out, "  %-56s %-5s %-22s %12s %10s  %s\n", "tensor", "dtype", "shape", "bytes", "crc32", "quantization");
    for (size_t i = 0; i < p.n_tensors; i++) {
        const struct pack_tensor *t = &p.tensors[i];
        char shape[160], module[PACK_MAX_NAME + 1], quant[64] = "";
        fmt_shape(shape, sizeof shape, t->shape, t->rank);
        snprintf(module, sizeof module, "%s", t->name);
        char *dot = strrchr(module, '.');
        struct json_object *entry;
        if (dot && !strcmp(dot, ".weight") && (*dot = 0, q && json_object_object_get_ex(q, module, &entry)))
            snprintf(quant, sizeof quant, "affine %d-bit group %d",
                     json_object_get_int(json_object_object_get(entry, "bits")),
                     json_object_get_int(json_object_object_get(entry, "group_size")));
        fprintf(out, "  %-56s %-5s %-22s %12llu 0x%08x  %s\n", t->name, dtype_name(t->dtype), shape,
                (unsigned long long)t->nbytes, t->crc32, quant);
    }
    fprintf(out, "total: %zu tensors, %llu data bytes\n", p.n_tensors, (unsigned long long)p.data_size);
    if (json) {
        struct json_object *o = json_object_new_object(), *h = json_object_new_object();
        json_object_object_add(o, "schema", json_object_new_string("gempack.inspect/1"));
        json_object_object_add(o, "path", json_object_new_string(path));
        json_object_object_add(o, "kind", json_object_new_string("pack"));
        json_object_object_add(h, "version_major", json_object_new_int(PACK_VERSION_MAJOR));
        json_object_object_add(h, "version_minor", json_object_new_int(p.version_minor));
        json_object_object_add(h, "alignment", json_object_new_int64(p.align));
        json_object_object_add(h, "file_size", json_object_new_int64((int64_t)p.size));
        json_object_object_add(h, "data_offset", json_object_new_int64((int64_t)p.data_offset));
        json_object_object_add(h, "data_size", json_object_new_int64((int64_t)p.data_size));
        json_object_object_add(h, "manifest_offset", json_object_new_int64((int64_t)p.manifest_offset));
        json_object_object_add(h, "manifest_size", json_object_new_int64((int64_t)p.manifest_size));
        json_object_object_add(o, "header", h);
        json_object_object_add(o, "manifest", json_object_get(p.manifest));
        print_json(o);
        json_object_put(o);
    }
    pack_close(&p);
    return 0;
}

/* True when the file starts with the pack magic. */
static bool is_pack(const char *path)
{
    FILE *f = fopen(path, "rb");
    char magic[8] = {0};
    bool yes = f && fread(magic, 1, 8, f) == 8 && !memcmp(magic, PACK_MAGIC, 8);
    if (f)
        fclose(f);
    return yes;
}

static int cmd_inspect(int argc, char **argv)
{
    static const struct option opts[] = {{"json", no_argument, 0, 'j'}, {"help", no_argument, 0, 'h'}, {0}};
    bool json = false;
    int c;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'j': json = true; break;
        case 'h': fputs(inspect_help, stdout); return 0;
        default: return usage_error("inspect", "%s", "invalid option");
        }
    }
    if (optind + 1 != argc)
        return usage_error("inspect", "%s", "expected exactly one PATH");
    const char *path = argv[optind];
    struct stat st;
    if (stat(path, &st) != 0)
        return usage_error("inspect", "%s: no such file or directory", path);
    if (S_ISREG(st.st_mode) && is_pack(path))
        return inspect_pack(path, json);
    struct err e = {0};
    struct ckpt ck = {0};
    struct st_file one = {0};
    const struct st_file *files;
    const char *const *names;
    const char *single_name[1] = {path};
    size_t n_files;
    bool dir = S_ISDIR(st.st_mode);
    if (dir) {
        if (ckpt_open(&ck, path, ST_HEADER_ONLY | ST_ALLOW_TRUNCATED, &e) != ERR_OK)
            return fail(&e);
        files = ck.shards;
        names = (const char *const *)ck.shard_names;
        n_files = ck.n_shards;
    } else {
        if (st_open(&one, path, ST_HEADER_ONLY | ST_ALLOW_TRUNCATED, &e) != ERR_OK)
            return fail(&e);
        files = &one;
        names = single_name;
        n_files = 1;
    }
    uint64_t total = 0, by_dtype[DT_COUNT] = {0};
    size_t n_tensors = 0;
    struct json_object *jo = json_object_new_object(), *jfiles = json_object_new_array(),
                       *jt = json_object_new_array();
    FILE *out = json ? stderr : stdout;
    for (size_t f = 0; f < n_files; f++) {
        const struct st_file *sf = &files[f];
        fprintf(out, "%s: %zu tensors, header %llu bytes%s\n", names[f], sf->n_tensors,
                (unsigned long long)sf->header_len, sf->truncated ? " (header only)" : "");
        struct json_object *jf = json_object_new_object(), *jm = json_object_new_object();
        for (size_t m = 0; m < sf->n_meta; m++) {
            fprintf(out, "  metadata %s = %s\n", sf->meta[m].key, sf->meta[m].value);
            json_object_object_add(jm, sf->meta[m].key, json_object_new_string(sf->meta[m].value));
        }
        json_object_object_add(jf, "file", json_object_new_string(names[f]));
        json_object_object_add(jf, "tensors", json_object_new_int64((int64_t)sf->n_tensors));
        json_object_object_add(jf, "header_bytes", json_object_new_int64((int64_t)sf->header_len));
        json_object_object_add(jf, "truncated", json_object_new_boolean(sf->truncated));
        json_object_object_add(jf, "metadata", jm);
        json_object_array_add(jfiles, jf);
        for (size_t i = 0; i < sf->n_tensors; i++) {
            const struct st_tensor *t = &sf->tensors[i];
            char shape[160];
            fmt_shape(shape, sizeof shape, t->shape, t->rank);
            fprintf(out, "  %-64s %-5s %-22s %12llu\n", t->name, dtype_name(t->dtype), shape,
                    (unsigned long long)(t->end - t->begin));
            json_object_array_add(jt, tensor_json(t, names[f]));
            total += t->end - t->begin;
            by_dtype[t->dtype] += t->end - t->begin;
            n_tensors++;
        }
    }
    fprintf(out, "total: %zu tensors, %llu bytes in %zu file%s\n", n_tensors, (unsigned long long)total, n_files,
            n_files == 1 ? "" : "s");
    struct json_object *jd = json_object_new_object();
    for (int t = 0; t < DT_COUNT; t++)
        if (by_dtype[t]) {
            fprintf(out, "  %-5s %llu bytes\n", dtype_name((enum dtype)t), (unsigned long long)by_dtype[t]);
            json_object_object_add(jd, dtype_name((enum dtype)t), json_object_new_int64((int64_t)by_dtype[t]));
        }
    json_object_object_add(jo, "schema", json_object_new_string("gempack.inspect/1"));
    json_object_object_add(jo, "path", json_object_new_string(path));
    json_object_object_add(jo, "kind", json_object_new_string(dir ? "checkpoint" : "safetensors"));
    json_object_object_add(jo, "files", jfiles);
    json_object_object_add(jo, "tensors", jt);
    json_object_object_add(jo, "total_bytes", json_object_new_int64((int64_t)total));
    json_object_object_add(jo, "bytes_by_dtype", jd);
    if (json)
        print_json(jo);
    json_object_put(jo);
    ckpt_close(&ck);
    st_close(&one);
    return 0;
}

/* ---- fixture ---- */

static const char fixture_help[] =
    "usage: gempack fixture --variant e2b|e4b|26b-a4b|31b [options] -o DIR\n"
    "       gempack fixture --like CONFIG.json [options] -o DIR\n"
    "\n"
    "Writes a random-weight checkpoint with the exact layout of a real Gemma 4\n"
    "variant: config.json, safetensors (one file or shards + index), and\n"
    "tokens.json holding a prompt longer than the sliding window. Tiny dimensions\n"
    "by default (vocab 512, hidden 128, sliding window 8) with the real topology:\n"
    "layer pattern, KV sharing and sources, double-wide MLP, per-layer inputs,\n"
    "k_eq_v, MoE. The same arguments give the same bytes on every machine.\n"
    "\n"
    "  --variant NAME      e2b, e4b, 26b-a4b or 31b\n"
    "  --like CONFIG.json  the topology of a real config, with tiny dimensions\n"
    "  --layout L          hf (default: model.language_model.*, fused experts),\n"
    "                      mlx (language_model.model.*, split experts) or\n"
    "                      text (gemma4_text, model.*)\n"
    "  --qat               QAT export: KV-shared layers carry no K/V tensors\n"
    "                      (default PTQ: they carry the redundant ones)\n"
    "  --quant none|4|8    MLX affine quantization (layout mlx or text); the MoE\n"
    "                      router is 8-bit group 64\n"
    "  --group-size N      32, 64 (default) or 128\n"
    "  --multimodal        add a vision tower with more layers than the first\n"
    "                      KV-shared layer, an audio tower stub and projectors\n"
    "  --shards N          N shards with model.safetensors.index.json (default 1)\n"
    "  --seed N            weight and token seed (default 0)\n"
    "  --full-size         the variant's real dimensions\n"
    "  --headers-only      write only each shard's header (as a range request gets)\n"
    "  -o, --output DIR    output directory (created)\n"
    "  -h, --help          this text\n";

static int cmd_fixture(int argc, char **argv)
{
    static const struct option opts[] = {
        {"variant", required_argument, 0, 'v'}, {"like", required_argument, 0, 'L'},
        {"layout", required_argument, 0, 'l'},  {"qat", no_argument, 0, 'q'},
        {"quant", required_argument, 0, 'Q'},   {"group-size", required_argument, 0, 'g'},
        {"multimodal", no_argument, 0, 'm'},    {"shards", required_argument, 0, 's'},
        {"seed", required_argument, 0, 'S'},    {"full-size", no_argument, 0, 'F'},
        {"headers-only", no_argument, 0, 'H'},  {"output", required_argument, 0, 'o'},
        {"help", no_argument, 0, 'h'},          {0}};
    struct fixture_opts o = {.layout = FX_HF, .group_size = 64, .shards = 1};
    unsigned long long v;
    int c;
    while ((c = getopt_long(argc, argv, "ho:", opts, NULL)) != -1) {
        switch (c) {
        case 'v': o.variant = optarg; break;
        case 'L': o.like_path = optarg; break;
        case 'l':
            if (!strcmp(optarg, "hf"))
                o.layout = FX_HF;
            else if (!strcmp(optarg, "mlx"))
                o.layout = FX_MLX;
            else if (!strcmp(optarg, "text"))
                o.layout = FX_TEXT;
            else
                return usage_error("fixture", "--layout %s: expected hf, mlx or text", optarg);
            break;
        case 'q': o.qat = true; break;
        case 'Q':
            if (!strcmp(optarg, "none"))
                o.quant_bits = 0;
            else if (!strcmp(optarg, "4") || !strcmp(optarg, "8"))
                o.quant_bits = atoi(optarg);
            else
                return usage_error("fixture", "--quant %s: expected none, 4 or 8", optarg);
            break;
        case 'g':
            if (!parse_u64(optarg, 128, &v) || (v != 32 && v != 64 && v != 128))
                return usage_error("fixture", "--group-size %s: expected 32, 64 or 128", optarg);
            o.group_size = (int)v;
            break;
        case 'm': o.multimodal = true; break;
        case 's':
            if (!parse_u64(optarg, 99999, &v) || v < 1)
                return usage_error("fixture", "--shards %s: expected an integer 1..99999", optarg);
            o.shards = (int)v;
            break;
        case 'S':
            if (!parse_u64(optarg, UINT64_MAX, &v))
                return usage_error("fixture", "--seed %s: expected a non-negative integer", optarg);
            o.seed = v;
            break;
        case 'F': o.full_size = true; break;
        case 'H': o.headers_only = true; break;
        case 'o': o.out_dir = optarg; break;
        case 'h': fputs(fixture_help, stdout); return 0;
        default: return usage_error("fixture", "%s", "invalid option");
        }
    }
    if (optind != argc)
        return usage_error("fixture", "unexpected argument '%s'", argv[optind]);
    if (!o.out_dir)
        return usage_error("fixture", "%s", "missing -o DIR");
    if (!o.variant == !o.like_path)
        return usage_error("fixture", "%s", "give exactly one of --variant and --like");
    if (o.like_path && o.full_size)
        return usage_error("fixture", "%s", "--full-size goes with --variant, not --like");
    struct fixture_summary s;
    struct err e = {0};
    if (fixture_make(&o, &s, &e) != ERR_OK)
        return fail(&e);
    fprintf(stderr, "gempack fixture: %s: %zu tensors, %llu bytes of weights%s, %d files, %d prompt tokens\n",
            o.out_dir, s.n_tensors, (unsigned long long)s.data_bytes, o.headers_only ? " (headers only)" : "",
            s.n_files, s.n_tokens);
    return 0;
}

/* ---- convert ---- */

static const char convert_help[] =
    "usage: gempack convert DIR -o OUT [options]\n"
    "\n"
    "Normalizes a checkpoint that 'gempack check' accepts into one canonical form\n"
    "and writes a .gpk pack (default) or, with --format mlx, a directory of MLX\n"
    "safetensors + config.json. Every dropped or transformed tensor is reported.\n"
    "Without --bits or --quantize nothing is requantized: tensors keep their\n"
    "source representation.\n"
    "\n"
    "  -o, --output OUT          the .gpk file, or the MLX directory\n"
    "  --format pack|mlx         output kind (default pack)\n"
    "  --bits 2|3|4|5|6|8        MLX affine quantization of every quantizable\n"
    "                            module (norms and scalars never; the MoE router\n"
    "                            at 8-bit group 64)\n"
    "  --group-size 32|64|128    group size for --bits (default 64)\n"
    "  --quantize REGEX=BITS[:GROUP]  per-tensor override, matched against canonical\n"
    "                            names (layers.3.mlp.down_proj.weight); repeatable,\n"
    "                            first match wins\n"
    "  --keep-dense REGEX        keep matching tensors unquantized; repeatable\n"
    "  --ple-projection quantize|dense  per_layer_model_projection (default quantize)\n"
    "  --skip-last-full-attention  keep every weight of the last full-attention\n"
    "                            layer at source precision\n"
    "  --allow-requantize        allow dequantize + requantize of MLX-quantized input\n"
    "  --qat-lattice             4-bit group 32 on the QAT q4_0 grid where a group\n"
    "                            sits on it exactly (scale d, bias -8d)\n"
    "  --text-only               MLX export without vision/audio towers\n"
    "  --align N                 pack data alignment, 64..65536 (default 4096)\n"
    "  --dry-run                 print the per-tensor plan and totals; write nothing\n"
    "  --json                    the report as JSON on stdout\n"
    "  -h, --help                this text\n";

static void free_rules(struct plan_opts *p)
{
    for (size_t i = 0; i < p->n_quantize; i++)
        plan_rule_free(&p->quantize[i]);
    for (size_t i = 0; i < p->n_keep_dense; i++)
        plan_rule_free(&p->keep_dense[i]);
    free(p->quantize);
    free(p->keep_dense);
}

static int add_rule(struct plan_rule **v, size_t *n, const char *arg, bool dense, struct err *e)
{
    struct plan_rule *nv = realloc(*v, (*n + 1) * sizeof *nv);
    if (!nv)
        return err_set(e, ERR_NOMEM, "out of memory");
    *v = nv;
    int rc = plan_rule_parse(&nv[*n], arg, dense, e);
    if (rc == ERR_OK)
        (*n)++;
    return rc;
}

static int cmd_convert(int argc, char **argv)
{
    static const struct option opts[] = {
        {"output", required_argument, 0, 'o'},      {"format", required_argument, 0, 'f'},
        {"bits", required_argument, 0, 'b'},        {"group-size", required_argument, 0, 'g'},
        {"quantize", required_argument, 0, 'q'},    {"keep-dense", required_argument, 0, 'k'},
        {"ple-projection", required_argument, 0, 'p'}, {"skip-last-full-attention", no_argument, 0, 's'},
        {"allow-requantize", no_argument, 0, 'r'},  {"qat-lattice", no_argument, 0, 'l'},
        {"text-only", no_argument, 0, 't'},         {"align", required_argument, 0, 'a'},
        {"dry-run", no_argument, 0, 'd'},           {"json", no_argument, 0, 'j'},
        {"help", no_argument, 0, 'h'},              {0}};
    struct convert_opts o = {.align = 4096, .plan = {.group_size = 64}};
    bool json = false, gs_given = false;
    unsigned long long v;
    struct err e = {0};
    int c, code = EXIT_ERROR;
    while ((c = getopt_long(argc, argv, "ho:", opts, NULL)) != -1) {
        switch (c) {
        case 'o': o.out = optarg; break;
        case 'f':
            if (strcmp(optarg, "pack") && strcmp(optarg, "mlx")) {
                code = usage_error("convert", "--format %s: expected pack or mlx", optarg);
                goto out;
            }
            o.format_mlx = !strcmp(optarg, "mlx");
            break;
        case 'b':
            if (!parse_u64(optarg, 8, &v) || !quant_params_valid(QM_AFFINE, (int)v, 64)) {
                code = usage_error("convert", "--bits %s: expected 2, 3, 4, 5, 6 or 8", optarg);
                goto out;
            }
            o.plan.bits = (int)v;
            break;
        case 'g':
            if (!parse_u64(optarg, 128, &v) || !quant_params_valid(QM_AFFINE, 4, (int)v)) {
                code = usage_error("convert", "--group-size %s: expected 32, 64 or 128", optarg);
                goto out;
            }
            o.plan.group_size = (int)v;
            gs_given = true;
            break;
        case 'q':
        case 'k':
            if ((c == 'q' ? add_rule(&o.plan.quantize, &o.plan.n_quantize, optarg, false, &e)
                          : add_rule(&o.plan.keep_dense, &o.plan.n_keep_dense, optarg, true, &e)) != ERR_OK) {
                code = usage_error("convert", "%s", e.msg);
                goto out;
            }
            break;
        case 'p':
            if (strcmp(optarg, "quantize") && strcmp(optarg, "dense")) {
                code = usage_error("convert", "--ple-projection %s: expected quantize or dense", optarg);
                goto out;
            }
            o.plan.ple_dense = !strcmp(optarg, "dense");
            break;
        case 's': o.plan.skip_last_full = true; break;
        case 'r': o.plan.allow_requantize = true; break;
        case 'l': o.plan.qat_lattice = true; break;
        case 't': o.text_only = true; break;
        case 'a':
            if (!parse_u64(optarg, 65536, &v) || v < 64 || (v & (v - 1))) {
                code = usage_error("convert", "--align %s: expected a power of two from 64 to 65536", optarg);
                goto out;
            }
            o.align = (uint32_t)v;
            break;
        case 'd': o.dry_run = true; break;
        case 'j': json = true; break;
        case 'h': fputs(convert_help, stdout); code = 0; goto out;
        default: code = usage_error("convert", "%s", "invalid option"); goto out;
        }
    }
    if (optind + 1 != argc) {
        code = usage_error("convert", "%s", "expected exactly one checkpoint directory");
        goto out;
    }
    if (!o.out && !o.dry_run) {
        code = usage_error("convert", "%s", "missing -o OUT");
        goto out;
    }
    if (o.plan.qat_lattice) {
        if ((o.plan.bits && o.plan.bits != 4) || (gs_given && o.plan.group_size != 32)) {
            code = usage_error("convert", "%s", "--qat-lattice emits 4-bit group 32 (the q4_0 grid)");
            goto out;
        }
        o.plan.bits = 4;
        o.plan.group_size = 32;
    }
    if (o.text_only && !o.format_mlx) {
        code = usage_error("convert", "%s", "--text-only applies to --format mlx (a pack is always text-only)");
        goto out;
    }
    struct convert_report r;
    int rc = convert_run(&r, argv[optind], &o, &e);
    if (rc == ERR_OK) {
        convert_print(json ? stderr : stdout, &r, o.dry_run);
        if (json) {
            struct json_object *jo = convert_json(&r);
            print_json(jo);
            json_object_put(jo);
        }
        code = 0;
    } else {
        code = fail(&e);
    }
    convert_free(&r);
out:
    free_rules(&o.plan);
    return code;
}

/* ---- verify ---- */

static const char verify_help[] =
    "usage: gempack verify FILE.gpk\n"
    "\n"
    "Checks every CRC of a pack (header, manifest, every tensor) and that all\n"
    "padding is zero. Exit 0 intact, 1 any mismatch, 2 unreadable.\n";

static int cmd_verify(int argc, char **argv)
{
    static const struct option opts[] = {{"help", no_argument, 0, 'h'}, {0}};
    int c;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        if (c == 'h') {
            fputs(verify_help, stdout);
            return 0;
        }
        return usage_error("verify", "%s", "invalid option");
    }
    if (optind + 1 != argc)
        return usage_error("verify", "%s", "expected exactly one pack file");
    struct pack p;
    struct err e = {0};
    int rc = pack_open(&p, argv[optind], &e);
    if (rc == ERR_IO)
        return fail(&e);
    if (rc != ERR_OK) {
        fprintf(stderr, "gempack verify: FAILED: %s\n", e.msg);
        return EXIT_VERDICT;
    }
    size_t bad;
    rc = pack_verify(&p, &bad, &e);
    if (rc == ERR_OK)
        printf("gempack verify: %s: OK (%zu tensors, header, manifest and padding intact)\n", argv[optind],
               p.n_tensors);
    else
        fprintf(stderr, "gempack verify: FAILED: %s\n", e.msg);
    pack_close(&p);
    return rc == ERR_OK ? 0 : EXIT_VERDICT;
}

/* ---- dispatch ---- */

static const char main_help[] =
    "usage: gempack COMMAND [options]   (gempack COMMAND --help for each)\n"
    "\n"
    "Toolkit for Gemma 4 text checkpoints.\n"
    "\n"
    "  check DIR      does the checkpoint load as a Gemma 4 text model, and why not\n"
    "  inspect PATH   tensors, dtypes, shapes and metadata of safetensors files\n"
    "  fixture        tiny random checkpoints with the exact layout of a real variant\n"
    "\n"
    "  --version      print the version\n";

int main(int argc, char **argv)
{
    static const struct {
        const char *name;
        int (*fn)(int, char **);
    } cmds[] = {{"check", cmd_check},     {"inspect", cmd_inspect}, {"fixture", cmd_fixture},
                {"convert", cmd_convert}, {"verify", cmd_verify}};
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        fputs(main_help, argc < 2 ? stderr : stdout);
        return argc < 2 ? EXIT_ERROR : 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("gempack %s\n", GEMPACK_VERSION);
        return 0;
    }
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
        if (!strcmp(argv[1], cmds[i].name))
            return cmds[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "gempack: unknown command '%s'\n\n%s", argv[1], main_help);
    return EXIT_ERROR;
}
