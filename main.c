/* main.c - the gempack command line: argument parsing, printing, exit codes.
 * The only file that prints to the terminal or exits; everything it calls
 * returns error codes with messages (core/err.h).
 *
 * Exit codes: 0 success; 1 a negative verdict (check: not loadable);
 * 2 usage error, unreadable input or any other failure. */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ingest/check.h"
#include "converter/convert.h"
#include "core/checkpoint.h"
#include "core/config.h"
#include "core/fileio.h"
#include "core/jsonx.h"
#include "core/npz.h"
#include "core/pack.h"
#include "quant/quant.h"
#include "core/safetensors.h"
#include "fixtures/fixture.h"
#include "ingest/inspect.h"
#include "golden/golden.h"
#include "runner/forward.h"
#include "runner/prefix.h"
#include "runner/session.h"
#include "runner/tokens.h"
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
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (*end || s[0] == '-' || errno == ERANGE || v > max)
        return false;
    *out = v;
    return true;
}

/* optarg as an integer in [lo, hi]; else false with *code the usage error,
 * which quotes the value as typed and the real limits. */
static bool opt_u64(const char *cmd, const char *opt, unsigned long long lo, unsigned long long hi,
                    unsigned long long *v, int *code)
{
    if (parse_u64(optarg, hi, v) && *v >= lo)
        return true;
    fprintf(stderr, "gempack %s: %s %s: expected an integer from %llu to %llu\nTry 'gempack %s --help'.\n", cmd, opt,
            optarg, lo, hi, cmd);
    *code = EXIT_ERROR;
    return false;
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
    "file, of every shard of a checkpoint directory (headers only), of a .gpk\n"
    "pack (header, manifest, tensors with CRCs and quantization), or of an .npz\n"
    "(members with dtype and shape; meta.json).\n"
    "\n"
    "  --json      one JSON object on stdout (schema gempack.inspect/1)\n"
    "  -h, --help  this text\n";

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
    struct json_object *jo;
    struct err e = {0};
    if (inspect_path(argv[optind], json ? stderr : stdout, &jo, &e) != ERR_OK)
        return fail(&e);
    if (json)
        print_json(jo);
    json_object_put(jo);
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
    int c, code;
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
            if (!opt_u64("fixture", "--shards", 1, 99999, &v, &code))
                return code;
            o.shards = (int)v;
            break;
        case 'S':
            if (!opt_u64("fixture", "--seed", 0, UINT64_MAX, &v, &code))
                return code;
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
    "  --threads N               quantization threads, 1..64 (default 1; the output\n"
    "                            bytes are identical for any N)\n"
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
        {"threads", required_argument, 0, 'n'},     {"help", no_argument, 0, 'h'},
        {0}};
    struct convert_opts o = {.align = 4096, .threads = 1, .plan = {.group_size = 64}};
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
        case 'n':
            if (!opt_u64("convert", "--threads", 1, 64, &v, &code))
                goto out;
            o.threads = (int)v;
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
    "Checks every CRC of a pack (header, manifest, every tensor), that all\n"
    "padding is zero, and that its tensors are exactly those its config uses,\n"
    "each of the shape and type the config implies. Exit 0 intact, 1 any\n"
    "mismatch, 2 unreadable.\n";

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
    if (rc != ERR_OK && rc != ERR_FORMAT && rc != ERR_RANGE)
        return fail(&e); /* unreadable, a newer version, an unknown feature: not a checksum verdict */
    if (rc != ERR_OK) {
        fprintf(stderr, "gempack verify: FAILED: %s\n", e.msg);
        return EXIT_VERDICT;
    }
    size_t bad;
    rc = pack_verify(&p, &bad, &e);
    struct model m;
    if (rc == ERR_OK && (rc = model_open(&m, argv[optind], &e)) == ERR_OK) /* the tensors are the config's */
        model_close(&m);
    if (rc == ERR_OK)
        printf("gempack verify: %s: OK (%zu tensors, header, manifest and padding intact; tensors as the config implies)\n", argv[optind],
               p.n_tensors);
    else
        fprintf(stderr, "gempack verify: FAILED: %s\n", e.msg);
    pack_close(&p);
    return rc == ERR_OK ? 0 : EXIT_VERDICT;
}

/* ---- run ---- */

static const char run_help[] =
    "usage: gempack run MODEL (--tokens IDS ... | --tokens-file F) [options]\n"
    "\n"
    "Runs the Gemma 4 forward pass of MODEL (a .gpk pack, or a checkpoint\n"
    "directory converted in memory without requantizing) on token ids.\n"
    "\n"
    "  --tokens 2,17,99        a prompt's token ids; repeat for a batch\n"
    "  --tokens-file F         ids from a JSON list, {\"tokens\": [...]}, a JSON list of\n"
    "                          lists (a batch), an .npy [T] or [B, T], or\n"
    "                          whitespace-separated integers\n"
    "  --mode M                prefill (default: each prompt as one chunk), decode (one\n"
    "                          token at a time) or chunked:N; a batch advances together\n"
    "  --dump-logits OUT.npz   tokens.npy int32 and logits.npy float32, one row per\n"
    "                          prompt position after the soft-cap: [T] and [T, V] for\n"
    "                          one prompt; [B, Tmax], [B, Tmax, V] and lengths.npy [B]\n"
    "                          for a batch (rows past a prompt's end are zero)\n"
    "  --generate N            then generate N tokens per prompt (greedy unless\n"
    "                          --temperature)\n"
    "  --temperature X, --top-k K, --top-p P, --seed S   sampling (prompt b uses S+b)\n"
    "  --kv-bits 4|8           quantize the KV cache (MLX affine, per token and head)\n"
    "  --kv-group-size 32|64|128  its group size (default 64; at most the head dim)\n"
    "  --kv-start N            positions below N stay float (default 0)\n"
    "  --kv-skip-last-full-attention on|off  keep the cache of the last KV-owning\n"
    "                          full-attention layer in float (default: the pack's\n"
    "                          recorded choice, else on)\n"
    "  --prefix-cache          reuse the KV state of shared prompt prefixes (RAM only)\n"
    "  --prefix-cache-dir DIR  also keep entries on disk in DIR, across runs\n"
    "  --prefix-block N        tokens per prefix block (default 64)\n"
    "  --prefix-cache-hot-bytes N  RAM the hot tier may hold (default 256 MiB)\n"
    "  --threads N             worker threads (default 1; results are identical\n"
    "                          for any N)\n"
    "  --kernels K             best (default: fused SIMD dequant kernels, every mode\n"
    "                          bitwise identical), scalar (the reference), or blas\n"
    "                          (OpenBLAS sgemm for steps of >= 32 tokens: faster prefill,\n"
    "                          logits within ~1e-4 of the other modes), or q8 (4/8-bit\n"
    "                          weights times int8-quantized activations, llama.cpp's\n"
    "                          trade: faster decode, approximate logits, still identical\n"
    "                          for any --threads; not for golden checks)\n"
    "  --mmap                  read the matrices in place from the mapped file (default:\n"
    "                          copied once into anonymous memory advised for huge pages,\n"
    "                          which streams faster; costs that much memory and a copy)\n"
    "  --json                  one JSON object on stdout (tokens, timings, caches)\n"
    "  -h, --help              this text\n";

struct run_opts {
    const char *dump;
    struct session_opts s;
    struct kv_opts kv;
    bool kv_skip_given;
    bool prefix;
    struct prefix_opts prefix_o;
    int threads;
    enum kern_level kernels;
    bool json;
    bool mmap;
};

static bool parse_mode(const char *s, int64_t *chunk)
{
    unsigned long long v;
    if (!strcmp(s, "prefill"))
        *chunk = 0;
    else if (!strcmp(s, "decode"))
        *chunk = 1;
    else if (!strncmp(s, "chunked:", 8) && parse_u64(s + 8, 1ull << 30, &v) && v > 0)
        *chunk = (int64_t)v;
    else
        return false;
    return true;
}

static bool parse_float(const char *s, float lo, float hi, float *out)
{
    char *end;
    float v = strtof(s, &end);
    if (!*s || *end || !(v >= lo && v <= hi))
        return false;
    *out = v;
    return true;
}

/* Common option parsing of run-like commands; returns -1 on success. */
static int parse_tokens_arg(int c, const char *cmd, struct token_seqs *seqs)
{
    struct err e = {0};
    int rc = c == 't' ? tokens_add_csv(seqs, optarg, &e) : tokens_read_file(optarg, seqs, &e);
    if (rc != ERR_OK)
        return usage_error(cmd, "%s", e.msg);
    return -1;
}

/* The pack's recorded KV choice (manifest runtime), else on. */
static bool pack_kv_skip_default(const struct model *m)
{
    struct json_object *rt, *v;
    if (m->from_pack && json_object_object_get_ex(m->pack.manifest, "runtime", &rt) &&
        json_object_object_get_ex(rt, "kv_skip_last_full_attention", &v) &&
        json_object_get_type(v) == json_type_boolean)
        return json_object_get_boolean(v);
    return true;
}

static int dump_batch(const char *path, const struct token_seqs *s, const struct session_result *res, int64_t V,
                      const struct model *m, struct err *e)
{
    struct json_object *meta = json_object_new_object();
    json_object_object_add(meta, "producer", json_object_new_string("gempack run " GEMPACK_VERSION));
    json_object_object_add(meta, "model_fingerprint", json_object_new_string(m->fingerprint));
    json_object_object_add(meta, "dtype", json_object_new_string("float32"));
    int rc;
    if (s->n == 1) {
        rc = golden_write(path, s->seq[0], s->len[0], res->logits, V, meta, e);
    } else {
        int64_t B = s->n, T = res->tmax;
        int32_t *tok = calloc((size_t)(B * T), sizeof *tok);
        int32_t *len = malloc((size_t)B * sizeof *len);
        uint8_t *tb = NULL, *lb = NULL, *nb = NULL;
        size_t tl = 0, ll = 0, nl = 0;
        rc = tok && len ? ERR_OK : err_set(e, ERR_NOMEM, "out of memory");
        for (int64_t b = 0; rc == ERR_OK && b < B; b++) {
            memcpy(tok + b * T, s->seq[b], (size_t)s->len[b] * sizeof *tok);
            len[b] = (int32_t)s->len[b];
        }
        uint64_t ts[2] = {(uint64_t)B, (uint64_t)T}, ls[3] = {(uint64_t)B, (uint64_t)T, (uint64_t)V},
                 ns[1] = {(uint64_t)B};
        if (rc == ERR_OK)
            rc = npy_encode(DT_I32, ts, 2, tok, &tb, &tl, e);
        if (rc == ERR_OK)
            rc = npy_encode(DT_F32, ls, 3, res->logits, &lb, &ll, e);
        if (rc == ERR_OK)
            rc = npy_encode(DT_I32, ns, 1, len, &nb, &nl, e);
        if (rc == ERR_OK) {
            const char *ms = json_object_to_json_string_ext(meta, JSON_C_TO_STRING_PRETTY);
            struct npz_member mm[4] = {{"tokens.npy", tb, tl}, {"logits.npy", lb, ll}, {"lengths.npy", nb, nl},
                                       {"meta.json", ms, strlen(ms)}};
            rc = npz_write(path, mm, 4, e);
        }
        free(tok);
        free(len);
        free(tb);
        free(lb);
        free(nb);
    }
    json_object_put(meta);
    return rc;
}

static int cmd_run(int argc, char **argv)
{
    static const struct option opts[] = {
        {"tokens", required_argument, 0, 't'},      {"tokens-file", required_argument, 0, 'T'},
        {"mode", required_argument, 0, 'm'},        {"dump-logits", required_argument, 0, 'd'},
        {"generate", required_argument, 0, 'g'},    {"temperature", required_argument, 0, 'x'},
        {"top-k", required_argument, 0, 'k'},       {"top-p", required_argument, 0, 'p'},
        {"seed", required_argument, 0, 's'},        {"threads", required_argument, 0, 'n'},
        {"kernels", required_argument, 0, 'K'},     {"json", no_argument, 0, 'j'},
        {"kv-bits", required_argument, 0, 'b'},     {"kv-group-size", required_argument, 0, 'G'},
        {"kv-start", required_argument, 0, 'S'},    {"kv-skip-last-full-attention", required_argument, 0, 'L'},
        {"prefix-cache", no_argument, 0, 'P'},      {"prefix-cache-dir", required_argument, 0, 'D'},
        {"prefix-block", required_argument, 0, 'B'}, {"prefix-cache-hot-bytes", required_argument, 0, 'H'},
        {"mmap", no_argument, 0, 'M'},              {"help", no_argument, 0, 'h'},
        {0}};
    struct run_opts o = {.threads = 1, .kernels = KERN_BEST, .s = {.top_p = 1.0f}, .kv = {.group_size = 64},
                         .prefix_o = {.block = 64, .hot_limit = 256u << 20}};
    struct token_seqs seqs = {0};
    unsigned long long v;
    int c, code = EXIT_ERROR;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 't':
        case 'T':
            if ((code = parse_tokens_arg(c, "run", &seqs)) >= 0)
                goto out;
            break;
        case 'm':
            if (!parse_mode(optarg, &o.s.chunk)) {
                code = usage_error("run", "--mode %s: expected prefill, decode or chunked:N with N from 1 to 1073741824", optarg);
                goto out;
            }
            break;
        case 'd': o.dump = optarg; break;
        case 'g':
            if (!opt_u64("run", "--generate", 0, 1u << 20, &v, &code))
                goto out;
            o.s.generate = (int64_t)v;
            break;
        case 'x':
            if (!parse_float(optarg, 0.0f, 100.0f, &o.s.temperature)) {
                code = usage_error("run", "--temperature %s: expected 0..100", optarg);
                goto out;
            }
            break;
        case 'k':
            if (!opt_u64("run", "--top-k", 0, 1u << 30, &v, &code))
                goto out;
            o.s.top_k = (int)v;
            break;
        case 'p':
            if (!parse_float(optarg, 0.0f, 1.0f, &o.s.top_p) || o.s.top_p <= 0.0f) {
                code = usage_error("run", "--top-p %s: expected (0, 1]", optarg);
                goto out;
            }
            break;
        case 's':
            if (!opt_u64("run", "--seed", 0, UINT64_MAX, &v, &code))
                goto out;
            o.s.seed = v;
            break;
        case 'n':
            if (!opt_u64("run", "--threads", 1, 64, &v, &code))
                goto out;
            o.threads = (int)v;
            break;
        case 'K': {
            static const struct {
                const char *name;
                enum kern_level level;
            } levels[] = {{"best", KERN_BEST}, {"scalar", KERN_SCALAR}, {"blas", KERN_BLAS}, {"q8", KERN_Q8}};
            size_t k = 0;
            while (k < sizeof levels / sizeof levels[0] && strcmp(optarg, levels[k].name))
                k++;
            if (k == sizeof levels / sizeof levels[0]) {
                code = usage_error("run", "--kernels %s: expected best, scalar, blas or q8", optarg);
                goto out;
            }
            o.kernels = levels[k].level;
            break;
        }
        case 'b':
            if (strcmp(optarg, "4") && strcmp(optarg, "8")) {
                code = usage_error("run", "--kv-bits %s: accepted values are 4 and 8", optarg);
                goto out;
            }
            o.kv.bits = atoi(optarg);
            break;
        case 'G':
            if (strcmp(optarg, "32") && strcmp(optarg, "64") && strcmp(optarg, "128")) {
                code = usage_error("run", "--kv-group-size %s: accepted values are 32, 64 and 128", optarg);
                goto out;
            }
            o.kv.group_size = atoi(optarg);
            break;
        case 'S':
            if (!opt_u64("run", "--kv-start", 0, 1ull << 40, &v, &code))
                goto out;
            o.kv.start = (int64_t)v;
            break;
        case 'L':
            if (strcmp(optarg, "on") && strcmp(optarg, "off")) {
                code = usage_error("run", "--kv-skip-last-full-attention %s: accepted values are on and off", optarg);
                goto out;
            }
            o.kv.skip_last_full = !strcmp(optarg, "on");
            o.kv_skip_given = true;
            break;
        case 'P': o.prefix = true; break;
        case 'D':
            o.prefix = true;
            o.prefix_o.cold_dir = optarg;
            break;
        case 'B':
            if (!opt_u64("run", "--prefix-block", 1, 1u << 20, &v, &code))
                goto out;
            o.prefix_o.block = (int64_t)v;
            break;
        case 'H':
            if (!opt_u64("run", "--prefix-cache-hot-bytes", 0, 1ull << 40, &v, &code))
                goto out;
            o.prefix_o.hot_limit = (size_t)v;
            break;
        case 'j': o.json = true; break;
        case 'M': o.mmap = true; break;
        case 'h': fputs(run_help, stdout); code = 0; goto out;
        default: code = usage_error("run", "%s", "invalid option"); goto out;
        }
    }
    if (optind + 1 != argc) {
        code = usage_error("run", "%s", "expected exactly one MODEL (.gpk or checkpoint directory)");
        goto out;
    }
    if (seqs.n < 1) {
        code = usage_error("run", "%s", "give a prompt with --tokens or --tokens-file");
        goto out;
    }
    for (int b = 0; b < seqs.n; b++)
        if (seqs.len[b] == 0) {
            code = usage_error("run", "%s", "every prompt needs at least one token");
            goto out;
        }
    if (o.dump && o.prefix) {
        code = usage_error("run", "%s", "--dump-logits needs every position's logits, which a prefix-cache hit skips; "
                                        "use one or the other");
        goto out;
    }
    struct model m;
    struct runner r = {0};
    struct prefix_cache pc = {0};
    struct session_result res = {0};
    struct err e = {0};
    if (model_open(&m, argv[optind], &e) != ERR_OK) {
        code = fail(&e);
        goto out;
    }
    if (!o.kv_skip_given)
        o.kv.skip_last_full = pack_kv_skip_default(&m);
    int64_t V = m.cfg.vocab_size;
    int rc = o.dump ? fio_check_output(o.dump, &e) : ERR_OK; /* before any work: not over an input */
    if (rc == ERR_OK && !o.mmap)
        rc = model_load_weights(&m, o.threads, o.kernels == KERN_Q8, &e);
    struct runner_opts ro = {.threads = o.threads, .kernels = o.kernels, .kv = o.kv, .n_seq = seqs.n};
    session_limits(&seqs, &o.s, o.prefix ? o.prefix_o.block : 0, &ro.max_step, &ro.max_context);
    if (rc == ERR_OK)
        rc = runner_init(&r, &m, &ro, &e);
    if (rc == ERR_OK && o.prefix) {
        rc = prefix_init(&pc, &r, &o.prefix_o, &e);
        o.s.pc = &pc;
    }
    o.s.all_logits = o.dump != NULL;
    if (rc == ERR_OK)
        rc = session_run(&r, &seqs, &o.s, &res, &e);
    if (rc == ERR_OK && o.dump)
        rc = dump_batch(o.dump, &seqs, &res, V, &m, &e);
    for (size_t i = 0; i < pc.n_warnings; i++)
        fprintf(stderr, "gempack run: warning: %s\n", pc.warnings[i]);
    if (rc == ERR_OK) {
        double pf = res.prefill_s > 0 ? (double)res.prefill_tokens / res.prefill_s : 0.0;
        double dc = res.decode_tokens && res.decode_s > 0 ? (double)res.decode_tokens / res.decode_s : 0.0;
        size_t cache_bytes = 0;
        for (int b = 0; b < seqs.n; b++)
            cache_bytes += runner_cache_bytes(&r, b);
        FILE *out = o.json ? stderr : stdout;
        fprintf(out, "%d prompt%s, %lld tokens in %.3f s (%.1f tokens/s, %s kernels, %d thread%s)\n", seqs.n,
                seqs.n == 1 ? "" : "s", (long long)res.prefill_tokens, res.prefill_s, pf, r.kt.name, o.threads,
                o.threads == 1 ? "" : "s");
        for (int b = 0; b < seqs.n && o.s.generate; b++) {
            fprintf(out, "generated:");
            if (seqs.n > 1)
                fprintf(out, " [%d]", b);
            for (int64_t k = 0; k < o.s.generate; k++)
                fprintf(out, " %d", res.generated[b * o.s.generate + k]);
            fprintf(out, "\n");
        }
        if (res.decode_tokens)
            fprintf(out, "decode %.1f tokens/s\n", dc);
        if (o.prefix)
            fprintf(out, "prefix cache: %lld tokens restored, hot %zu bytes, cold %llu bytes\n",
                    (long long)pc.hit_tokens, pc.hot_bytes, (unsigned long long)prefix_cold_bytes(&pc));
        if (o.json) {
            struct json_object *j = json_object_new_object(), *g = json_object_new_array();
            for (int b = 0; b < seqs.n; b++) {
                struct json_object *row = json_object_new_array();
                for (int64_t k = 0; k < o.s.generate; k++)
                    json_object_array_add(row, json_object_new_int(res.generated[b * o.s.generate + k]));
                json_object_array_add(g, row);
            }
            json_object_object_add(j, "schema", json_object_new_string("gempack.run/1"));
            json_object_object_add(j, "sequences", json_object_new_int(seqs.n));
            json_object_object_add(j, "prompt_tokens", json_object_new_int64(res.prefill_tokens));
            json_object_object_add(j, "generated", seqs.n == 1 ? json_object_get(json_object_array_get_idx(g, 0)) : json_object_get(g));
            json_object_put(g);
            json_object_object_add(j, "prefill_seconds", json_object_new_double(res.prefill_s));
            json_object_object_add(j, "prefill_tokens_per_s", json_object_new_double(pf));
            json_object_object_add(j, "decode_tokens_per_s", json_object_new_double(dc));
            json_object_object_add(j, "bytes_per_token", json_object_new_int64((int64_t)m.weight_bytes));
            json_object_object_add(j, "weights", json_object_new_string(m.arena ? "copied" : "mapped"));
            json_object_object_add(j, "threads", json_object_new_int(o.threads));
            json_object_object_add(j, "kernels", json_object_new_string(r.kt.name));
            struct json_object *kv = json_object_new_object();
            json_object_object_add(kv, "bits", json_object_new_int(o.kv.bits));
            json_object_object_add(kv, "group_size", json_object_new_int(o.kv.group_size));
            json_object_object_add(kv, "start", json_object_new_int64(o.kv.start));
            json_object_object_add(kv, "skip_last_full_attention", json_object_new_boolean(o.kv.skip_last_full));
            json_object_object_add(kv, "float_layer", r.kv_float_layer >= 0 ? json_object_new_int(r.kv_float_layer) : NULL);
            json_object_object_add(kv, "cache_bytes", json_object_new_int64((int64_t)cache_bytes));
            json_object_object_add(j, "kv_cache", kv);
            json_object_object_add(j, "prefix_cache_hit_tokens", json_object_new_int64(pc.hit_tokens));
            json_object_object_add(j, "prefix_cache_hot_bytes", json_object_new_int64((int64_t)pc.hot_bytes));
            json_object_object_add(j, "prefix_cache_cold_bytes", json_object_new_int64((int64_t)prefix_cold_bytes(&pc)));
            print_json(j);
            json_object_put(j);
        }
        code = 0;
    } else {
        code = fail(&e);
    }
    session_result_free(&res);
    prefix_free(&pc);
    runner_free(&r);
    model_close(&m);
out:
    tokens_free(&seqs);
    return code;
}

/* ---- golden ---- */

static const char golden_help[] =
    "usage: gempack golden make MODEL (--tokens IDS | --tokens-file F) -o G.npz\n"
    "       gempack golden check MODEL G.npz [--json] [thresholds] [--mode M] [--threads N]\n"
    "\n"
    "make: runs MODEL on the tokens and stores tokens.npy, logits.npy [T, V] and\n"
    "meta.json. A golden made by gempack itself is a regression baseline; the\n"
    "project's reference goldens come from golden/reference.py.\n"
    "\n"
    "check: runs MODEL on the golden's tokens and compares logits: max-abs, NMSE,\n"
    "cosine, KL divergence (mean, p99, max; float64 log-softmax), top-1 agreement,\n"
    "RMS dp, first divergent position. Thresholds come from the golden's\n"
    "meta.json \"tolerances\" (default max-abs 1e-4, top-1 1.0), overridden by:\n"
    "  --max-abs X --nmse X --kld-mean X --kld-p99 X --kld-max X --top1 X\n"
    "  (a negative value disables that check)\n"
    "A table goes to stderr; --json prints the verdict (schema gempack.golden/1).\n"
    "Exit: 0 pass, 1 regression, 2 error (unreadable files, vocabulary or length\n"
    "mismatch).\n";

static int golden_make(int argc, char **argv)
{
    static const struct option opts[] = {{"tokens", required_argument, 0, 't'}, {"tokens-file", required_argument, 0, 'T'},
                                         {"output", required_argument, 0, 'o'}, {"threads", required_argument, 0, 'n'},
                                         {"help", no_argument, 0, 'h'},         {0}};
    struct token_seqs seqs = {0};
    const char *outp = NULL;
    int threads = 1, c, code = EXIT_ERROR;
    unsigned long long v;
    while ((c = getopt_long(argc, argv, "ho:", opts, NULL)) != -1) {
        switch (c) {
        case 't':
        case 'T':
            if ((code = parse_tokens_arg(c, "golden make", &seqs)) >= 0)
                goto out;
            break;
        case 'o': outp = optarg; break;
        case 'n':
            if (!opt_u64("golden make", "--threads", 1, 64, &v, &code))
                goto out;
            threads = (int)v;
            break;
        case 'h': fputs(golden_help, stdout); code = 0; goto out;
        default: code = usage_error("golden make", "%s", "invalid option"); goto out;
        }
    }
    if (optind + 1 != argc || !outp || seqs.n != 1 || seqs.len[0] == 0) {
        code = usage_error("golden make", "%s", "expected MODEL, one prompt (--tokens or --tokens-file) and -o G.npz");
        goto out;
    }
    struct model m;
    struct runner r = {0};
    struct err e = {0};
    if (model_open(&m, argv[optind], &e) != ERR_OK) {
        code = fail(&e);
        goto out;
    }
    int64_t T = seqs.len[0], V = m.cfg.vocab_size;
    float *logits = malloc((size_t)(T * V) * sizeof *logits);
    int rc = fio_check_output(outp, &e); /* before any work: not over an input */
    if (rc == ERR_OK)
        rc = runner_init(&r, &m, &(struct runner_opts){.threads = threads, .kernels = KERN_BEST, .n_seq = 1,
                                                       .max_step = T, .max_context = T}, &e);
    if (rc == ERR_OK && !logits)
        rc = err_set(&e, ERR_NOMEM, "out of memory");
    if (rc == ERR_OK)
        rc = runner_prompt(&r, seqs.seq[0], T, 0, logits, NULL, &e);
    if (rc == ERR_OK) {
        struct json_object *meta = json_object_new_object(), *tol = json_object_new_object();
        json_object_object_add(meta, "producer", json_object_new_string("gempack golden make " GEMPACK_VERSION));
        json_object_object_add(meta, "model_fingerprint", json_object_new_string(m.fingerprint));
        json_object_object_add(meta, "dtype", json_object_new_string("float32"));
        json_object_object_add(tol, "max_abs", json_object_new_double(1e-4));
        json_object_object_add(tol, "top1", json_object_new_double(1.0));
        json_object_object_add(meta, "tolerances", tol);
        rc = golden_write(outp, seqs.seq[0], T, logits, V, meta, &e);
        json_object_put(meta);
    }
    code = rc == ERR_OK ? 0 : fail(&e);
    if (rc == ERR_OK)
        fprintf(stderr, "gempack golden make: %s: %lld positions x %lld logits\n", outp, (long long)T, (long long)V);
    free(logits);
    runner_free(&r);
    model_close(&m);
out:
    tokens_free(&seqs);
    return code;
}

static bool parse_threshold(const char *s, double *out)
{
    char *end;
    double v = strtod(s, &end);
    if (!*s || *end || v != v)
        return false;
    *out = v < 0 ? -1 : v;
    return true;
}

static int golden_check(int argc, char **argv)
{
    static const struct option opts[] = {
        {"json", no_argument, 0, 'j'},          {"max-abs", required_argument, 0, 'a'},
        {"nmse", required_argument, 0, 'N'},    {"kld-mean", required_argument, 0, 'k'},
        {"kld-p99", required_argument, 0, 'p'}, {"kld-max", required_argument, 0, 'K'},
        {"top1", required_argument, 0, '1'},    {"mode", required_argument, 0, 'm'},
        {"threads", required_argument, 0, 'n'}, {"help", no_argument, 0, 'h'},
        {0}};
    bool json = false;
    int threads = 1, c, code;
    int64_t chunk = 0;
    unsigned long long v;
    struct {
        int opt;
        double val;
        bool set;
    } over[6] = {{'a', 0, false}, {'N', 0, false}, {'k', 0, false}, {'p', 0, false}, {'K', 0, false}, {'1', 0, false}};
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'j': json = true; break;
        case 'm':
            if (!parse_mode(optarg, &chunk))
                return usage_error("golden check", "--mode %s: expected prefill, decode or chunked:N with N from 1 to 1073741824", optarg);
            break;
        case 'n':
            if (!opt_u64("golden check", "--threads", 1, 64, &v, &code))
                return code;
            threads = (int)v;
            break;
        case 'h': fputs(golden_help, stdout); return 0;
        case 'a': case 'N': case 'k': case 'p': case 'K': case '1':
            for (int i = 0; i < 6; i++)
                if (over[i].opt == c) {
                    if (!parse_threshold(optarg, &over[i].val))
                        return usage_error("golden check", "threshold %s: expected a number", optarg);
                    over[i].set = true;
                }
            break;
        default: return usage_error("golden check", "%s", "invalid option");
        }
    }
    if (optind + 2 != argc)
        return usage_error("golden check", "%s", "expected MODEL and G.npz");
    struct golden g;
    struct model m;
    struct runner r = {0};
    struct err e = {0};
    if (model_open(&m, argv[optind], &e) != ERR_OK)
        return fail(&e);
    if (golden_read(argv[optind + 1], m.cfg.vocab_size, &g, &e) != ERR_OK) {
        model_close(&m);
        return fail(&e);
    }
    int rc = ERR_OK;
    code = EXIT_ERROR;
    float *logits = NULL;
    if (g.V != m.cfg.vocab_size)
        rc = err_set(&e, ERR_FORMAT, "%s: golden vocabulary %lld, model %lld: not the same model", argv[optind + 1],
                     (long long)g.V, (long long)m.cfg.vocab_size);
    if (rc == ERR_OK && g.T == 0)
        rc = err_set(&e, ERR_FORMAT, "%s: golden holds no positions", argv[optind + 1]);
    if (rc == ERR_OK)
        rc = runner_init(&r, &m, &(struct runner_opts){.threads = threads, .kernels = KERN_BEST, .n_seq = 1,
                                                       .max_step = chunk > 0 && chunk < g.T ? chunk : g.T,
                                                       .max_context = g.T}, &e);
    if (rc == ERR_OK && !(logits = malloc((size_t)(g.T * g.V) * sizeof *logits)))
        rc = err_set(&e, ERR_NOMEM, "out of memory");
    if (rc == ERR_OK)
        rc = runner_prompt(&r, g.tokens, g.T, chunk, logits, NULL, &e);
    if (rc == ERR_OK) {
        struct golden_thresholds th = g.th;
        double *dst[6] = {&th.max_abs, &th.nmse, &th.kld_mean, &th.kld_p99, &th.kld_max, &th.top1_min};
        for (int i = 0; i < 6; i++)
            if (over[i].set)
                *dst[i] = over[i].val;
        struct golden_metrics mt;
        golden_compare(&g, logits, th, &mt);
        bool pass;
        struct json_object *verdict = golden_verdict(&mt, &th, &pass);
        fprintf(stderr, "gempack golden check: %s vs %s (%lld positions, vocab %lld, %s reference)\n", argv[optind],
                argv[optind + 1], (long long)g.T, (long long)g.V, g.f64 ? "float64" : "float32");
        fprintf(stderr, "  %-16s %-14s %s\n", "metric", "value", "threshold");
        const char *names[] = {"max_abs", "nmse", "kld_mean", "kld_p99", "kld_max", "top1"};
        double vals[] = {mt.max_abs, mt.nmse, mt.kld_mean, mt.kld_p99, mt.kld_max, mt.top1};
        for (int i = 0; i < 6; i++) {
            char lim[32] = "-";
            if (*dst[i] >= 0)
                snprintf(lim, sizeof lim, "%s %.3g", i == 5 ? ">=" : "<=", *dst[i]);
            fprintf(stderr, "  %-16s %-14.6g %s\n", names[i], vals[i], lim);
        }
        fprintf(stderr, "  %-16s %-14.6g\n  %-16s %-14.6g\n  %-16s %lld\n", "cosine", mt.cosine, "rms_dp", mt.rms_dp,
                "first_divergent", (long long)mt.first_divergent);
        fprintf(stderr, "verdict: %s\n", pass ? "PASS" : "FAIL (regression)");
        if (json)
            print_json(verdict);
        json_object_put(verdict);
        code = pass ? 0 : EXIT_VERDICT;
    } else {
        code = fail(&e);
    }
    free(logits);
    runner_free(&r);
    model_close(&m);
    golden_free(&g);
    return code;
}

static int cmd_golden(int argc, char **argv)
{
    if (argc >= 2 && !strcmp(argv[1], "make"))
        return golden_make(argc - 1, argv + 1);
    if (argc >= 2 && !strcmp(argv[1], "check"))
        return golden_check(argc - 1, argv + 1);
    if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        fputs(golden_help, stdout);
        return 0;
    }
    return usage_error("golden", "%s", "expected 'make' or 'check'");
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
                {"convert", cmd_convert}, {"verify", cmd_verify},   {"run", cmd_run},
                {"golden", cmd_golden}};
    /* A file-size limit (RLIMIT_FSIZE) surfaces as a failed write (EFBIG) with a
     * message and a removed temp file, not as a kill by SIGXFSZ. */
    signal(SIGXFSZ, SIG_IGN);
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
