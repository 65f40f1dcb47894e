/* main.c - the gempack command line: parse, call one library function per
 * command, print, exit. With cli.c (option parsing, messages, the progress
 * line, the dispatch) the only code that prints to the terminal or exits;
 * everything it calls returns error codes with messages (core/err.h).
 *
 * Exit codes: 0 success; 1 a negative verdict (check: not loadable; verify:
 * a mismatch; golden check: a regression); 2 usage error, unreadable input or
 * any other failure. */
#include <getopt.h>
#include <math.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "converter/convert.h"
#include "core/fileio.h"
#include "core/pool.h"
#include "fixtures/fixture.h"
#include "golden/check.h"
#include "golden/compare.h"
#include "golden/eval.h"
#include "golden/generation.h"
#include "golden/report.h"
#include "ingest/check.h"
#include "ingest/inspect.h"
#include "ingest/text.h"
#include "runner/session.h"

/* ---- check ---- */

struct check_args {
    bool json, headers_only;
};

static const struct opt check_opts[] = {
    FLAG("json", 'j', struct check_args, json, "print the report as one JSON object on stdout (schema\ngempack.check/1, docs/CLI.md); the text report goes to stderr"),
    FLAG("headers-only", 'H', struct check_args, headers_only, "accept shards that end right after their header (fetched\nwith a range request); names, dtypes and shapes are checked"),
    {0}};

static int cmd_check(int argc, char **argv)
{
    struct check_args a = {0};
    int code;
    for (int c; (c = next_opt(argc, argv, &a, &code)) != -1;)
        return c == -2 ? code : common_opt(c);
    if (optind + 1 != argc)
        return usage_error("check", "%s", "expected exactly one checkpoint directory");
    struct check_report r;
    struct err e = {0};
    if (check_run(&r, argv[optind], a.headers_only ? CHECK_HEADERS_ONLY : 0, &e) != ERR_OK) {
        check_free(&r);
        return fail(&e);
    }
    check_print_text(a.json ? stderr : stdout, &r);
    if (a.json)
        print_json(check_to_json(&r));
    code = check_loadable(&r) ? 0 : EXIT_VERDICT;
    check_free(&r);
    return code;
}

/* ---- inspect ---- */

static const struct opt inspect_opts[] = {
    FLAG("json", 'j', struct check_args, json, "one JSON object on stdout (schema gempack.inspect/1)"), {0}};

static int cmd_inspect(int argc, char **argv)
{
    struct check_args a = {0};
    int code;
    for (int c; (c = next_opt(argc, argv, &a, &code)) != -1;)
        return c == -2 ? code : common_opt(c);
    if (optind + 1 != argc)
        return usage_error("inspect", "%s", "expected exactly one PATH");
    struct json_object *jo;
    struct err e = {0};
    if (inspect_path(argv[optind], a.json ? stderr : stdout, &jo, &e) != ERR_OK)
        return fail(&e);
    if (a.json)
        print_json(jo);
    else
        json_object_put(jo);
    return 0;
}

/* ---- fixture ---- */

#define FX struct fixture_opts
static const int group_sizes[] = {32, 64, 128}, kv_bits[] = {4, 8};

static const struct opt fixture_opts[] = {
    STR("variant", "NAME", 'v', FX, variant, "e2b, e4b, 12b, 26b-a4b or 31b"),
    STR("like", "CONFIG.json", 'L', FX, like_path, "the topology of a real config, with tiny dimensions"),
    CHOICE("layout", 'l', FX, layout, "hf|mlx|text", NULL, "hf (default: model.language_model.*, fused experts),\nmlx (language_model.model.*, split experts) or\ntext (gemma4_text, model.*)"),
    CHOICE("format", 'f', FX, format, "safetensors|ct-w4a16|gguf-q4_0|gguf-q8_0|gguf-q4_k_m|gguf-q5_k_m|gguf-q6_k|gguf-iq4_xs|gguf-iq2_xxs|gguf-mxfp4", NULL, "safetensors (default), compressed-tensors int4 group 32\n(config.json + model.safetensors), or a GGUF file\n(model.gguf) in Q4_0 or Q8_0, as Google's QAT releases,\nor as a llama-quantize preset types each tensor"),
    FLAG("qat", 'q', FX, qat, "QAT export: KV-shared layers carry no K/V tensors\n(default PTQ: they carry the redundant ones)"),
    OWN("quant", "none|4|8|mxfp4|nvfp4|mxfp8", 'Q', "MLX quantization (layout mlx or text): affine 4 or 8\nbits, or a microscaling mode; the MoE router is\naffine 8-bit group 64"),
    CHOICE("group-size", 'g', FX, group_size, "32|64|128", group_sizes, "group size for affine --quant (default 64)"),
    FLAG("multimodal", 'm', FX, multimodal, "add a vision tower with more layers than the first\nKV-shared layer, an audio tower stub and projectors"),
    UINT("shards", "N", 's', FX, shards, 1, 99999, "N shards with model.safetensors.index.json (default 1)"),
    UINT("seed", "N", 'S', FX, seed, 0, UINT64_MAX, "weight and token seed (default 0)"),
    FLAG("full-size", 'F', FX, full_size, "the variant's real dimensions (safetensors or a GGUF\nformat, written row by row)"),
    FLAG("headers-only", 'H', FX, headers_only, "write only each shard's header (as a range request gets)"),
    STR("output", "DIR", 'o', FX, out_dir, "output directory (created; absent or empty)"),
    {0}};

static int cmd_fixture(int argc, char **argv)
{
    struct fixture_opts o = {.layout = FX_HF, .shards = 1};
    int code;
    for (int c; (c = next_opt(argc, argv, &o, &code)) != -1;) {
        if (c != 'Q')
            return c == -2 ? code : common_opt(c);
        if (qmode_from_name(optarg, &o.quant_mode) && qformat_fixed(qformat_of(o.quant_mode))) {
            o.quant_bits = qformat_of(o.quant_mode)->default_bits;
        } else if (!strcmp(optarg, "none") || !strcmp(optarg, "4") || !strcmp(optarg, "8")) {
            o.quant_mode = QM_AFFINE;
            o.quant_bits = atoi(optarg);
        } else {
            return usage_error("fixture", "--quant %s: expected one of none|4|8|mxfp4|nvfp4|mxfp8", optarg);
        }
    }
    if (!o.group_size) /* affine's default, or the MX mode's own group */
        o.group_size = qformat_of(o.quant_mode)->default_gs;
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

struct convert_args {
    struct convert_opts o;
    bool json, eval;
    struct token_seqs eval_tokens;
    const char *report;
};
#define CV struct convert_args
static const int bit_widths[] = {2, 3, 4, 5, 6, 8};

static const struct opt convert_opts[] = {
    STR("output", "OUT", 'o', CV, o.out, "the .gpk file, or the MLX directory"),
    CHOICE("format", 'f', CV, o.format_mlx, "pack|mlx", NULL, "output kind (default pack)"),
    CHOICE("bits", 'b', CV, o.plan.bits, "2|3|4|5|6|8", bit_widths, "MLX affine quantization of every quantizable\nmodule (norms and scalars never; the MoE router\nat affine 8-bit group 64)"),
    CHOICE("group-size", 'g', CV, o.plan.group_size, "32|64|128", group_sizes, "group size for --bits (default 64)"),
    CHOICE("mode", 'm', CV, o.plan.mode, "affine|mxfp4|nvfp4|mxfp8", NULL, "MLX quantization mode (default affine); mxfp4,\nnvfp4 and mxfp8 fix their bits and group and\nneed no --bits"),
    OWN("quantize", "REGEX=BITS[:GROUP]|REGEX=MODE", 'q', "per-tensor override, matched against canonical\nnames (layers.3.mlp.down_proj.weight); repeatable,\nfirst match wins"),
    OWN("keep-dense", "REGEX", 'k', "keep matching tensors unquantized; repeatable"),
    CHOICE("ple-projection", 'p', CV, o.plan.ple_dense, "quantize|dense", NULL, "per_layer_model_projection (default quantize)"),
    FLAG("skip-last-full-attention", 's', CV, o.plan.skip_last_full, "keep every weight of the last full-attention\nlayer at source precision"),
    FLAG("allow-requantize", 'r', CV, o.plan.allow_requantize, "allow dequantize + requantize of MLX-quantized input"),
    FLAG("qat-lattice", 'l', CV, o.plan.qat_lattice, "4-bit group 32 on the QAT q4_0 grid where a group\nsits on it exactly (scale d, bias -8d)"),
    FLAG("text-only", 't', CV, o.text_only, "MLX export without vision/audio towers"),
    OWN("align", "N", 'a', "pack data alignment, a power of two 64..65536 (default 4096)"),
    UINT("threads", "N", 'n', CV, o.threads, 1, 64, "quantization threads, 1..64 (default: every core this\nprocess may use; the output bytes are identical for any N)"),
    FLAG("dry-run", 'd', CV, o.dry_run, "print the per-tensor plan and totals; write nothing"),
    FLAG("eval", 'e', CV, eval, "compare the output with the source (gempack compare)\non the fixture prompt and store the quality card in\nthe pack's manifest or OUT/gempack_quality.json"),
    TYPED(OPT_TOKENS, "eval-tokens", "IDS", 'E', CV, eval_tokens, "one more prompt for --eval (repeatable; implies it)"),
    STR("report", "OUT.html", 'R', CV, report, "with --eval: one self-contained HTML page of the\ncomparison and every tensor's quantization error"),
    FLAG("json", 'j', CV, json, "the report as JSON on stdout"),
    {0}};

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

static int convert_with(int argc, char **argv, struct convert_args *a)
{
    struct convert_opts *o = &a->o;
    unsigned long long v;
    struct err e = {0};
    int code;
    for (int c; (c = next_opt(argc, argv, a, &code)) != -1;) {
        if (c == 'q' || c == 'k') {
            if ((c == 'q' ? add_rule(&o->plan.quantize, &o->plan.n_quantize, optarg, false, &e)
                          : add_rule(&o->plan.keep_dense, &o->plan.n_keep_dense, optarg, true, &e)) != ERR_OK)
                return fail(&e);
        } else if (c == 'a') {
            if (!parse_u64(optarg, 65536, &v) || v < 64 || (v & (v - 1)))
                return usage_error("convert", "--align %s: expected a power of two from 64 to 65536", optarg);
            o->align = (uint32_t)v;
        } else {
            return c == -2 ? code : common_opt(c);
        }
    }
    a->eval |= a->eval_tokens.n > 0;
    if (optind + 1 != argc)
        return usage_error("convert", "%s", "expected exactly one checkpoint directory");
    if (!o->out && !o->dry_run)
        return usage_error("convert", "%s", "missing -o OUT");
    if (a->eval && o->dry_run)
        return usage_error("convert", "%s", "--eval compares a written output: not with --dry-run");
    if (a->report && !a->eval)
        return usage_error("convert", "%s", "--report shows --eval's comparison: give --eval too");
    struct convert_report r;
    struct card card = {0};
    struct progress_line line;
    FILE *out = a->json ? stderr : stdout;
    o->progress = progress_on_tty(&line);
    o->check_out = a->report;
    int rc = convert_run(&r, argv[optind], o, &e);
    progress_end(&line);
    if (rc == ERR_OK)
        convert_print(out, &r, o->dry_run);
    if (rc == ERR_OK && a->eval) {
        rc = card_make(argv[optind], o, &r, &a->eval_tokens, a->report, progress_on_tty(&line), &card, &e);
        progress_end(&line);
        if (rc == ERR_OK)
            fprintf(out, "quality: KL(source||output) mean %.4g, top-1 %.1f%%, max |dlogit| %.4g over %lld positions; "
                         "card in %s%s\n", card.r.m.kld_mean, 100.0 * card.r.m.topk[0], card.r.m.max_abs,
                    (long long)card.r.n_pos, card.path ? card.path : o->out, card.path ? "" : " (manifest \"quality\")");
    }
    if (rc == ERR_OK && a->json) {
        struct json_object *jo = convert_json(&r);
        if (card.json)
            json_object_object_add(jo, "quality", json_object_get(card.json));
        print_json(jo);
    }
    card_free(&card);
    convert_free(&r);
    return rc == ERR_OK ? 0 : fail(&e);
}

static int cmd_convert(int argc, char **argv)
{
    struct convert_args a = {.o = {.align = 4096, .threads = pool_default_threads()}};
    int code = convert_with(argc, argv, &a);
    for (size_t i = 0; i < a.o.plan.n_quantize; i++)
        plan_rule_free(&a.o.plan.quantize[i]);
    for (size_t i = 0; i < a.o.plan.n_keep_dense; i++)
        plan_rule_free(&a.o.plan.keep_dense[i]);
    free(a.o.plan.quantize);
    free(a.o.plan.keep_dense);
    tokens_free(&a.eval_tokens);
    return code;
}

/* ---- verify ---- */

static int cmd_verify(int argc, char **argv)
{
    int code;
    for (int c; (c = next_opt(argc, argv, NULL, &code)) != -1;)
        return c == -2 ? code : common_opt(c);
    if (optind + 1 != argc)
        return usage_error("verify", "%s", "expected exactly one pack file");
    bool ok;
    size_t n;
    struct err e = {0};
    if (model_verify(argv[optind], &ok, &n, &e) != ERR_OK)
        return fail(&e);
    if (!ok) {
        fprintf(stderr, "gempack verify: FAILED: %s\n", e.msg);
        return EXIT_VERDICT;
    }
    printf("gempack verify: %s: OK (%zu tensors, header, manifest and padding intact; tensors as the config implies)\n",
           argv[optind], n);
    return 0;
}

/* ---- prompts as text ---- */

/* The text prompts as ids of mt's tokenizer, appended to seqs. rendered: each
 * chat prompt's rendering kept there (NULL: not kept). */
static int encode_with(const struct model_text *mt, const struct text_prompts *tp, struct token_seqs *seqs,
                       char **rendered, struct err *e)
{
    int chats = 0;
    for (int i = 0; i < tp->n; i++)
        chats += tp->p[i].chat;
    int rc = tp->system && !chats ? err_set(e, ERR_USAGE, "'system' goes with a chat prompt (--chat)") : ERR_OK;
    for (int i = 0; rc == ERR_OK && i < tp->n; i++) {
        struct text_prompt p = tp->p[i];
        p.system = tp->system;
        int32_t *ids;
        int64_t n;
        char *r;
        if ((rc = text_encode(mt, &p, &ids, &n, &r, e)) == ERR_OK)
            rc = tokens_push(seqs, ids, n, e);
        free(ids);
        if (rendered)
            rendered[i] = r;
        else
            free(r);
    }
    return rc;
}

/* encode_with MODEL's tokenizer; *mt (zeroed by the caller) stays open for decoding. */
static int encode_prompts(const char *model, const struct text_prompts *tp, struct model_text *mt,
                          struct token_seqs *seqs, char **rendered, struct err *e)
{
    int rc = text_open(mt, model, e);
    return rc == ERR_OK ? encode_with(mt, tp, seqs, rendered, e) : rc;
}

/* Generated text as it comes: each id's text once the decode of every id so
 * far holds it whole (a byte-fallback piece may be half a character: it waits
 * for the next id). */
struct stream {
    const struct tokenizer *t;
    uint32_t *ids;
    size_t n, printed;
};

static void stream_flush(struct stream *s)
{
    char *text;
    size_t len;
    struct err ignored = {0};
    if (tok_decode(s->t, s->ids, s->n, true, &text, &len, &ignored) != ERR_OK)
        return;
    if (len > s->printed)
        fwrite(text + s->printed, 1, len - s->printed, stdout);
    s->printed = len > s->printed ? len : s->printed;
    fflush(stdout);
    free(text);
}

static void stream_token(void *ctx, int seq, int32_t id)
{
    struct stream *s = ctx;
    size_t plen;
    uint32_t *nv = seq == 0 ? realloc(s->ids, (s->n + 1) * sizeof *nv) : NULL;
    if (!nv)
        return;
    s->ids = nv;
    s->ids[s->n++] = (uint32_t)id;
    const char *piece = tok_piece(s->t, (uint32_t)id, &plen);
    if (!(piece && plen == 6 && !strncmp(piece, "<0x", 3)))
        stream_flush(s);
}

/* The text of generated ids (JSON "text"), special tokens left out. */
static struct json_object *decoded(const struct tokenizer *t, struct json_object *ids)
{
    size_t n = json_object_array_length(ids), len;
    uint32_t *u = malloc((n ? n : 1) * sizeof *u);
    char *text = NULL;
    struct err ignored = {0};
    for (size_t i = 0; u && i < n; i++)
        u[i] = (uint32_t)json_object_get_int(json_object_array_get_idx(ids, i));
    struct json_object *jo = u && tok_decode(t, u, n, true, &text, &len, &ignored) == ERR_OK
                                 ? json_object_new_string_len(text, (int)len)
                                 : NULL;
    free(u);
    free(text);
    return jo;
}

/* ---- run ---- */

struct run_args {
    struct run_config c;
    struct token_seqs seqs;
    struct text_prompts tp;
    bool json, check_gen;
};
#define RA struct run_args

static const struct opt run_opts[] = {
    TYPED(OPT_TOKENS, "tokens", "2,17,99", 't', RA, seqs, "a prompt's token ids; repeat for a batch"),
    TYPED(OPT_TOKENS_FILE, "tokens-file", "F", 'T', RA, seqs, "ids from a JSON list, {\"tokens\": [...]}, a JSON list of\nlists (a batch), an .npy [T] or [B, T], or\nwhitespace-separated integers"),
    PROMPTS(RA, tp),
    TYPED(OPT_MODE, "mode", "M", 'm', RA, c.s.chunk, "prefill (default: each prompt as one chunk), decode (one\ntoken at a time) or chunked:N; a batch advances together"),
    STR("dump-logits", "OUT.npz", 'd', RA, c.dump, "tokens.npy int32 and logits.npy float32, one row per\nprompt position after the soft-cap: [T] and [T, V] for\none prompt; [B, Tmax], [B, Tmax, V] and lengths.npy [B]\nfor a batch (rows past a prompt's end are zero)"),
    UINT("generate", "N", 'g', RA, c.s.generate, 0, 1u << 20, "then generate N tokens per prompt (greedy unless\n--temperature; default 0, for a text prompt 256,\nwhich ends at <eos> or <turn|>)"),
    OWN("temperature", "X", 'x', "sampling temperature 0..100 (0: greedy)"),
    UINT("top-k", "K", 'k', RA, c.s.top_k, 0, 1u << 30, "sample among the K most likely (0: all)"),
    OWN("top-p", "P", 'p', "sample within probability mass P, (0, 1]"),
    UINT("seed", "S", 's', RA, c.s.seed, 0, UINT64_MAX, "sampling seed (prompt b uses S+b)"),
    CHOICE("kv-bits", 'b', RA, c.kv.bits, "4|8", kv_bits, "quantize the KV cache (MLX affine, per token and head)"),
    CHOICE("kv-group-size", 'G', RA, c.kv.group_size, "32|64|128", group_sizes, "its group size (default 64; at most the head dim)"),
    UINT("kv-start", "N", 'S', RA, c.kv.start, 0, 1ull << 40, "positions below N stay float (default 0)"),
    OWN("kv-skip-last-full-attention", "on|off", 'L', "keep the cache of the last KV-owning\nfull-attention layer in float (default: the pack's\nrecorded choice, else on)"),
    FLAG("prefix-cache", 'P', RA, c.prefix, "reuse the KV state of shared prompt prefixes (RAM only)"),
    OWN("prefix-cache-dir", "DIR", 'D', "also keep entries on disk in DIR, across runs"),
    UINT("prefix-block", "N", 'B', RA, c.prefix_o.block, 1, 1u << 20, "tokens per prefix block (default 64)"),
    UINT("prefix-cache-hot-bytes", "N", 'H', RA, c.prefix_o.hot_limit, 0, 1ull << 40, "RAM the hot tier may hold (default 256 MiB)"),
    UINT("threads", "N", 'n', RA, c.threads, 1, 64, "worker threads (default: every core this process may\nuse; results are identical for any N)"),
    CHOICE("kernels", 'K', RA, c.kernels, "scalar|best|blas|q8", NULL, "best (default: fused SIMD dequant kernels, every mode\nbitwise identical), scalar (the reference), or blas\n(OpenBLAS sgemm for steps of >= 32 tokens: faster prefill,\nlogits within ~1e-4 of the other modes), or q8 (4/8-bit\nweights times int8-quantized activations, llama.cpp's\ntrade: faster decode, approximate logits, still identical\nfor any --threads; not for golden checks)"),
    FLAG("mmap", 'M', RA, c.mmap, "read the matrices in place from the mapped file (default:\ncopied once into anonymous memory advised for huge pages,\nwhich streams faster; costs that much memory and a copy)"),
    FLAG("check-generation", 'C', RA, check_gen, "exit 1 when a generation check flags (a reserved\n<unusedN> token, a repetition loop); they are reported\nwhenever tokens are generated"),
    FLAG("json", 'j', RA, json, "one JSON object on stdout (tokens, timings, caches)"),
    {0}};

/* The generation checks of each sequence's generated ids (jo "generated"):
 * reported on out and as jo "generation_check"; true when one flagged. */
static bool check_generation(struct json_object *jo, int n_seq, const struct tokenizer *t, FILE *out)
{
    struct json_object *g = json_object_object_get(jo, "generated"), *all = json_object_new_array();
    bool flagged = false;
    for (int b = 0; b < n_seq; b++) {
        struct json_object *row = n_seq == 1 ? g : json_object_array_get_idx(g, b);
        int64_t n = (int64_t)json_object_array_length(row);
        int32_t *ids = malloc((size_t)(n ? n : 1) * sizeof *ids);
        struct gen_flags f = {0};
        char line[400], which[24] = "";
        for (int64_t i = 0; ids && i < n; i++)
            ids[i] = json_object_get_int(json_object_array_get_idx(row, (size_t)i));
        if (ids)
            gen_check(ids, n, t, &f);
        free(ids);
        gen_flags_text(&f, line, sizeof line);
        if (n_seq > 1)
            snprintf(which, sizeof which, " [%d]", b);
        fprintf(out, "generation check%s: %s\n", which, line);
        flagged |= gen_flagged(&f);
        json_object_array_add(all, gen_flags_json(&f));
    }
    json_object_object_add(jo, "generation_check", n_seq == 1 ? json_object_get(json_object_array_get_idx(all, 0))
                                                               : json_object_get(all));
    json_object_put(all);
    return flagged;
}

static int run_with(int argc, char **argv, struct run_args *a)
{
    struct run_config *c = &a->c;
    const struct token_seqs *seqs = &a->seqs;
    double x;
    int code;
    for (int ch; (ch = next_opt(argc, argv, a, &code)) != -1;) {
        if (ch == 'x') {
            if (!parse_float(optarg, 0.0, 100.0, &x))
                return usage_error("run", "--temperature %s: expected 0..100", optarg);
            c->s.temperature = (float)x;
        } else if (ch == 'p') {
            if (!parse_float(optarg, 0.0, 1.0, &x) || (float)x <= 0.0f)
                return usage_error("run", "--top-p %s: expected (0, 1]", optarg);
            c->s.top_p = (float)x;
        } else if (ch == 'L') {
            if (strcmp(optarg, "on") && strcmp(optarg, "off"))
                return usage_error("run", "--kv-skip-last-full-attention %s: expected on or off", optarg);
            c->kv.skip_last_full = !strcmp(optarg, "on");
            c->kv_skip_given = true;
        } else if (ch == 'D') {
            c->prefix = true;
            c->prefix_o.cold_dir = optarg;
        } else {
            return ch == -2 ? code : common_opt(ch);
        }
    }
    if (optind + 1 != argc)
        return usage_error("run", "%s", "expected exactly one MODEL (.gpk or checkpoint directory)");
    if (a->tp.n && seqs->n)
        return usage_error("run", "%s", "give the prompts as text or as token ids, not both");
    if (a->tp.n + seqs->n < 1)
        return usage_error("run", "%s", "give a prompt with --prompt, --chat, --tokens or their -file forms");
    struct model_text mt = {0};
    struct stream st = {0};
    struct json_object *jo = NULL;
    struct err e = {0};
    int rc = a->tp.n ? encode_prompts(argv[optind], &a->tp, &mt, &a->seqs, NULL, &e) : ERR_OK;
    if (c->s.generate < 0)
        c->s.generate = a->tp.n ? 256 : 0;
    if (a->tp.n) { /* text: the generated text on stdout, the report on stderr */
        c->s.stop = mt.stop;
        c->s.n_stop = mt.n_stop;
        st.t = mt.tok;
        c->s.on_token = a->json || seqs->n > 1 ? NULL : stream_token;
        c->s.ctx = &st;
    }
    if (rc == ERR_OK)
        rc = session_main(argv[optind], seqs, c, a->json || a->tp.n ? stderr : stdout, stderr, &jo, &e);
    if (rc == ERR_OK && a->tp.n) {
        struct json_object *g = json_object_object_get(jo, "generated"), *texts = json_object_new_array();
        for (int b = 0; b < seqs->n; b++)
            json_object_array_add(texts, decoded(mt.tok, seqs->n == 1 ? g : json_object_array_get_idx(g, b)));
        if (c->s.on_token) {
            stream_flush(&st);
            putchar('\n');
        }
        for (int b = 0; !a->json && !c->s.on_token && b < seqs->n; b++)
            printf("[%d] %s\n", b, json_object_get_string(json_object_array_get_idx(texts, b)));
        struct json_object *ids = json_object_new_array();
        for (int b = 0; b < seqs->n; b++) {
            struct json_object *row = json_object_new_array();
            for (int64_t i = 0; i < seqs->len[b]; i++)
                json_object_array_add(row, json_object_new_int(seqs->seq[b][i]));
            json_object_array_add(ids, row);
        }
        json_object_object_add(jo, "prompt_ids", seqs->n == 1 ? json_object_get(json_object_array_get_idx(ids, 0))
                                                              : json_object_get(ids));
        json_object_put(ids);
        json_object_object_add(jo, "text", seqs->n == 1 ? json_object_get(json_object_array_get_idx(texts, 0))
                                                        : json_object_get(texts));
        json_object_object_add(jo, "tokenizer_sha256", json_object_new_string(mt.tok_sha256));
        json_object_put(texts);
    }
    bool flagged = false;
    if (rc == ERR_OK && c->s.generate > 0) {
        if (!a->tp.n) /* ids: the model's tokenizer, if it has one, names <unusedN> */
            (void)text_open(&mt, argv[optind], &(struct err){0});
        flagged = check_generation(jo, seqs->n, mt.tok, a->json || a->tp.n ? stderr : stdout);
    }
    free(st.ids);
    text_close(&mt);
    if (rc != ERR_OK)
        return fail(&e);
    if (a->json)
        print_json(jo);
    else
        json_object_put(jo);
    return flagged && a->check_gen ? EXIT_VERDICT : 0;
}

static int cmd_run(int argc, char **argv)
{
    struct run_args a = {.c = {.threads = pool_default_threads(), .kernels = KERN_BEST, .s = {.top_p = 1.0f, .generate = -1},
                               .kv = {.group_size = 64}, .prefix_o = {.block = 64, .hot_limit = 256u << 20}}};
    int code = run_with(argc, argv, &a);
    tokens_free(&a.seqs);
    text_prompts_free(&a.tp);
    return code;
}

/* ---- golden ---- */

struct golden_args {
    const char *out;
    int threads;
    bool json;
    struct token_seqs seqs;
    struct text_prompts tp;
    struct golden_check_opts o;
};
#define GA struct golden_args

static const struct opt golden_make_opts[] = {
    TYPED(OPT_TOKENS, "tokens", "IDS", 't', GA, seqs, "the prompt's token ids"),
    TYPED(OPT_TOKENS_FILE, "tokens-file", "F", 'T', GA, seqs, "or a file of them (as run takes)"),
    PROMPTS(GA, tp),
    STR("output", "G.npz", 'o', GA, out, "the golden to write (a prompt given as text is recorded\nwith it and tokenized again by golden check)"),
    UINT("threads", "N", 'n', GA, threads, 1, 64, "worker threads (default: every core this process may\nuse; the logits are identical for any N)"),
    {0}};

static int golden_make_with(int argc, char **argv, struct golden_args *a)
{
    const struct token_seqs *seqs = &a->seqs;
    int code;
    for (int c; (c = next_opt(argc, argv, a, &code)) != -1;)
        return c == -2 ? code : common_opt(c);
    if (optind + 1 != argc || !a->out || seqs->n + a->tp.n != 1 || (seqs->n && seqs->len[0] == 0))
        return usage_error("golden make", "%s", "expected MODEL, one prompt (--tokens, --prompt, --chat or a file of "
                                                "them) and -o G.npz");
    int64_t V;
    struct err e = {0};
    struct model_text mt = {0};
    char *rendered = NULL;
    struct json_object *text = NULL;
    int rc = a->tp.n ? encode_prompts(argv[optind], &a->tp, &mt, &a->seqs, &rendered, &e) : ERR_OK;
    if (rc == ERR_OK && a->tp.n) {
        struct text_prompt p = a->tp.p[0];
        p.system = a->tp.system;
        text = golden_text_meta(&mt, &p, rendered);
    }
    free(rendered);
    text_close(&mt);
    struct progress_line line;
    struct progress progress = progress_on_tty(&line);
    if (rc == ERR_OK)
        rc = golden_make_file(argv[optind], seqs->seq[0], seqs->len[0], a->threads, a->out, text, &progress, &V, &e);
    else
        json_object_put(text);
    progress_end(&line);
    if (rc != ERR_OK)
        return fail(&e);
    fprintf(stderr, "gempack golden make: %s: %lld positions x %lld logits%s\n", a->out, (long long)seqs->len[0],
            (long long)V, a->tp.n ? " (the text recorded)" : "");
    return 0;
}

static int cmd_golden_make(int argc, char **argv)
{
    struct golden_args a = {.threads = pool_default_threads()};
    int code = golden_make_with(argc, argv, &a);
    tokens_free(&a.seqs);
    text_prompts_free(&a.tp);
    return code;
}

static const struct opt golden_check_opts[] = {
    FLAG("json", 'j', GA, json, "print the verdict (schema gempack.golden/1) on stdout"),
    THRESHOLDS(GA, o.over, "thresholds, also --nmse X, --kld-mean X, --kld-p99 X,\n--kld-max X, --top1 X: the golden's meta.json\n\"tolerances\" otherwise (default max-abs 1e-4, top1 1.0);\noff disables that check"),
    TYPED(OPT_MODE, "mode", "M", 'm', GA, o.chunk, "prefill (default), decode or chunked:N"),
    UINT("threads", "N", 'n', GA, o.threads, 1, 64, "worker threads (default: every core this process may\nuse; the logits are identical for any N)"),
    STR("report", "OUT.html", 'R', GA, o.report, "also one self-contained HTML page (per-position KL\nand top-1 against the golden)"),
    FLAG("self-test", 'S', GA, o.self_test, "also prove the gate live: the model's logits with one\nposition's top-1 flipped (the golden's top token lowered\nby its margin + max(1, 2 x max-abs)) must fail the\nthresholds, else the check fails"),
    {0}};

static int cmd_golden_check(int argc, char **argv)
{
    struct golden_args a = {.o = golden_check_defaults()};
    int code;
    for (int c; (c = next_opt(argc, argv, &a, &code)) != -1;)
        return c == -2 ? code : common_opt(c);
    if (optind + 2 != argc)
        return usage_error("golden check", "%s", "expected MODEL and G.npz");
    struct golden_result res;
    struct err e = {0};
    struct progress_line line;
    a.o.progress = progress_on_tty(&line);
    int rc = golden_check_model(argv[optind], argv[optind + 1], &a.o, &res, &e);
    progress_end(&line);
    if (rc != ERR_OK)
        return fail(&e);
    golden_print(stderr, argv[optind], argv[optind + 1], &res);
    bool pass;
    if (a.json)
        print_json(golden_result_json(&res, &pass));
    return res.pass ? 0 : EXIT_VERDICT;
}

/* ---- compare ---- */

struct compare_args {
    struct compare_opts o;
    struct token_seqs seqs;
    struct text_prompts tp;
    bool json;
    const char *report;
};
#define CA struct compare_args

static const struct opt compare_opts[] = {
    TYPED(OPT_TOKENS, "tokens", "IDS", 't', CA, seqs, "a prompt's token ids; repeat for several prompts"),
    TYPED(OPT_TOKENS_FILE, "tokens-file", "F", 'T', CA, seqs, "prompts from a file (as run takes, a batch too)"),
    PROMPTS(CA, tp),
    UINT("keep-a", "N", 'A', CA, o.keep_a, 0, CFG_MAX_LAYERS, "B takes A's hidden state after each of its first N\nlayers: layer N's own error, alone"),
    CHOICE("kv-bits", 'b', CA, o.kv_b.bits, "4|8", kv_bits, "B's KV cache quantized (A's stays float)"),
    CHOICE("kv-group-size", 'G', CA, o.kv_b.group_size, "32|64|128", group_sizes, "its group size (default 64)"),
    THRESHOLDS(CA, o.th, "thresholds on the totals, also --nmse X, --kld-mean X,\n--kld-p99 X, --kld-max X (KL(A||B)), --top1 X;\nnone by default"),
    UINT("threads", "N", 'n', CA, o.threads, 1, 64, "worker threads (default: every core this process may\nuse; the results are identical for any N)"),
    FLAG("json", 'j', CA, json, "the report (schema gempack.compare/1) on stdout"),
    STR("report", "OUT.html", 'R', CA, report, "also one self-contained HTML page of the comparison"),
    {0}};

/* Text prompts as A's tokenizer gives them (seqs); B's, where B has one, must give the same ids. */
static int same_ids(const char *a, const char *b, const struct text_prompts *tp, struct token_seqs *seqs,
                    struct err *e)
{
    struct model_text ta = {0}, tb = {0};
    struct token_seqs sb = {0};
    int rc = encode_prompts(a, tp, &ta, seqs, NULL, e);
    if (rc == ERR_OK && (rc = text_open(&tb, b, e)) == ERR_OK && tb.tok)
        rc = encode_with(&tb, tp, &sb, NULL, e);
    for (int i = 0; rc == ERR_OK && i < sb.n; i++) {
        char msg[600];
        if (text_first_diff(ta.tok, seqs->seq[i], seqs->len[i], sb.seq[i], sb.len[i], msg, sizeof msg) >= 0)
            rc = err_set(e, ERR_FORMAT, "prompt %d: A's tokenizer and B's give different ids at %s", i, msg);
    }
    tokens_free(&sb);
    text_close(&ta);
    text_close(&tb);
    return rc;
}

static int compare_with(int argc, char **argv, struct compare_args *a)
{
    const struct token_seqs *seqs = &a->seqs;
    int code;
    for (int c; (c = next_opt(argc, argv, a, &code)) != -1;)
        return c == -2 ? code : common_opt(c);
    if (optind + 2 != argc || seqs->n + a->tp.n == 0)
        return usage_error("compare", "%s", "expected A, B and prompts (--tokens, --prompt, --chat or their -file forms)");
    if (seqs->n && a->tp.n)
        return usage_error("compare", "%s", "give the prompts as text or as token ids, not both");
    struct compare_result r;
    struct err e = {0};
    if (a->tp.n && same_ids(argv[optind], argv[optind + 1], &a->tp, &a->seqs, &e) != ERR_OK)
        return fail(&e);
    struct progress_line line;
    a->o.progress = progress_on_tty(&line);
    a->o.check_out = a->report;
    int rc = compare_models(argv[optind], argv[optind + 1], seqs, &a->o, &r, &e);
    progress_end(&line);
    if (rc == ERR_OK && a->report)
        rc = report_write(a->report, "gempack compare", argv[optind], argv[optind + 1], &r, NULL, &e);
    if (rc != ERR_OK) {
        compare_free(&r);
        return fail(&e);
    }
    compare_print(a->json ? stderr : stdout, argv[optind], argv[optind + 1], &a->o, &r);
    if (a->json)
        print_json(compare_json(argv[optind], argv[optind + 1], &a->o, &r));
    bool pass = r.pass;
    compare_free(&r);
    return pass ? 0 : EXIT_VERDICT;
}

static int cmd_compare(int argc, char **argv)
{
    struct compare_args a = {.o = {.threads = pool_default_threads(), .th = {-1, -1, -1, -1, -1, -1}}};
    int code = compare_with(argc, argv, &a);
    tokens_free(&a.seqs);
    text_prompts_free(&a.tp);
    return code;
}

/* ---- eval ---- */

struct eval_args {
    struct eval_opts o;
    struct golden_thresholds th;
    bool json;
    const char *report, *baseline;
};
#define EA struct eval_args

static const struct opt eval_opts[] = {
    STR("text-file", "F", 'f', EA, o.text_path, "the text (UTF-8; sections \"@@ category NAME\" and\n\"@@ chat NAME\"): default the built-in sample"),
    UINT("ctx", "N", 'c', EA, o.ctx, 4, 1u << 20, "tokens per window (default 512); its second half is\nscored, as llama.cpp's perplexity does"),
    UINT("chunks", "K", 'C', EA, o.chunks, 1, 1u << 30, "score the first K windows only"),
    STR("save-ref", "F", 'S', EA, o.save_ref, "also store the reference's distributions at the scored\npositions (top-32 log-probabilities and the rest's mass)"),
    STR("ref", "F", 'r', EA, o.ref_file, "take the reference's distributions from F (made by\n--save-ref on the same text and settings): REF is not run"),
    TH("kld-mean", "kld_mean", 'k', EA, th, "thresholds on each candidate, also --kld-p99 X, --kld-max X,\n--top1 X (a share), --ppl-ratio X; none by default"),
    TH("kld-p99", "kld_p99", 'p', EA, th, NULL),
    TH("kld-max", "kld_max", 'K', EA, th, NULL),
    TH("top1", "top1", '1', EA, th, NULL),
    OWN("ppl-ratio", "X", 'P', NULL),
    UINT("threads", "N", 'n', EA, o.threads, 1, 64, "worker threads (default: every core this process may\nuse; the results are identical for any N)"),
    FLAG("json", 'j', EA, json, "the result (schema gempack.eval/1) on stdout"),
    STR("report", "OUT.html", 'R', EA, report, "also one self-contained HTML page: the table, the KLD\ndistributions, the categories and size against KLD"),
    STR("baseline", "OLD.json", 'B', EA, baseline, "an earlier --json result on the same text: each candidate's\nKLD against its own there, position by position (sign test)"),
    {0}};

static int eval_with(int argc, char **argv, struct eval_args *a)
{
    int code;
    for (int c; (c = next_opt(argc, argv, a, &code)) != -1;) {
        if (c != 'P')
            return c == -2 ? code : common_opt(c);
        char *end;
        a->o.th_ppl_ratio = strtod(optarg, &end);
        if (!*optarg || *end || !(a->o.th_ppl_ratio >= 0.0) || isinf(a->o.th_ppl_ratio))
            return usage_error("eval", "--ppl-ratio %s: expected a finite number >= 0", optarg);
    }
    if (argc - optind < 2)
        return usage_error("eval", "%s", "expected REF and at least one CAND");
    if (a->o.save_ref && a->o.ref_file)
        return usage_error("eval", "%s", "--save-ref stores what --ref reads: give one of them");
    a->o.th_kld_mean = a->th.kld_mean, a->o.th_kld_p99 = a->th.kld_p99, a->o.th_kld_max = a->th.kld_max;
    a->o.th_top1 = a->th.top1_min;
    struct eval_result r;
    struct err e = {0};
    struct progress_line line;
    a->o.progress = progress_on_tty(&line);
    int rc = a->report ? fio_check_output(a->report, &e) : ERR_OK;
    if (rc == ERR_OK)
        rc = eval_run(argv[optind], (const char *const *)argv + optind + 1, argc - optind - 1, &a->o, &r, &e);
    progress_end(&line);
    if (rc == ERR_OK && a->baseline)
        rc = eval_baseline(&r, a->baseline, &e);
    if (rc == ERR_OK && a->report)
        rc = eval_report_write(a->report, &r, &e);
    if (rc != ERR_OK) {
        eval_free(&r);
        return fail(&e);
    }
    eval_print(a->json ? stderr : stdout, &r);
    if (a->json)
        print_json(eval_json(&r, &a->o));
    bool pass = r.pass;
    eval_free(&r);
    return pass ? 0 : EXIT_VERDICT;
}

static int cmd_eval(int argc, char **argv)
{
    struct eval_args a = {.o = {.ctx = 512, .threads = pool_default_threads(), .th_ppl_ratio = -1},
                          .th = {-1, -1, -1, -1, -1, -1}};
    return eval_with(argc, argv, &a);
}

/* ---- tokenize ---- */

struct tokenize_args {
    struct text_prompts tp;
    bool chat, json;
    const char *file, *decode, *conversation;
};
#define TA struct tokenize_args

static const struct opt tokenize_opts[] = {
    STR("file", "F", 'f', TA, file, "the text of a file instead of TEXT"),
    FLAG("chat", 'c', TA, chat, "TEXT is a user message: rendered through MODEL's chat\ntemplate with the generation prompt first"),
    STR("chat-file", "F", 'C', TA, conversation, "a whole conversation instead (as run --chat-file takes)"),
    STR("system", "S", 's', TA, tp.system, "with --chat: a system turn before it"),
    STR("decode", "IDS", 'd', TA, decode, "print the text of ids \"2,17,99\" instead (special\ntokens included)"),
    FLAG("json", 'j', TA, json, "one JSON object on stdout (schema gempack.tokenize/1)"),
    {0}};

static int tokenize_print(const struct model_text *mt, const struct text_prompts *tp, bool json, struct err *e)
{
    struct token_seqs seqs = {0};
    char *rendered = NULL;
    int rc = encode_with(mt, tp, &seqs, &rendered, e);
    if (rc != ERR_OK) {
        free(rendered);
        return rc;
    }
    struct json_object *jo = json_object_new_object(), *ids = json_object_new_array(), *pieces = json_object_new_array();
    for (int64_t i = 0; i < seqs.len[0]; i++) {
        size_t len;
        const char *p = tok_piece(mt->tok, (uint32_t)seqs.seq[0][i], &len);
        json_object_array_add(ids, json_object_new_int(seqs.seq[0][i]));
        json_object_array_add(pieces, p ? json_object_new_string_len(p, (int)len) : NULL);
        if (!json)
            printf("%s%d", i ? "," : "", seqs.seq[0][i]);
    }
    for (int64_t i = 0; !json && i < seqs.len[0]; i++) {
        struct json_object *p = json_object_array_get_idx(pieces, (size_t)i);
        printf("%s%lld\t%d\t%s", i ? "\n" : "\n\n", (long long)i, seqs.seq[0][i], p ? json_object_get_string(p) : "");
    }
    if (!json)
        printf("\n");
    size_t nb;
    tok_bos_rule(mt->tok, &nb);
    fprintf(stderr, "gempack tokenize: %lld tokens; tokenizer sha256 %s (%s BOS)%s%s\n", (long long)seqs.len[0],
            mt->tok_sha256, nb ? "adds" : "adds no", rendered ? "; template sha256 " : "",
            rendered ? mt->tmpl_sha256 : "");
    json_object_object_add(jo, "schema", json_object_new_string("gempack.tokenize/1"));
    json_object_object_add(jo, "ids", ids);
    json_object_object_add(jo, "pieces", pieces);
    json_object_object_add(jo, "rendered", rendered ? json_object_new_string(rendered) : NULL);
    json_object_object_add(jo, "tokenizer_sha256", json_object_new_string(mt->tok_sha256));
    json_object_object_add(jo, "template_sha256", rendered ? json_object_new_string(mt->tmpl_sha256) : NULL);
    if (json)
        print_json(jo);
    else
        json_object_put(jo);
    free(rendered);
    tokens_free(&seqs);
    return ERR_OK;
}

static int decode_print(const struct model_text *mt, const char *csv, bool json, struct err *e)
{
    struct token_seqs seqs = {0};
    char *text = NULL;
    size_t len;
    int rc = tokens_add_csv(&seqs, csv, "'decode'", e);
    uint32_t *u = rc == ERR_OK ? malloc((size_t)seqs.len[0] * sizeof *u + 1) : NULL;
    if (rc == ERR_OK && !u)
        rc = err_set(e, ERR_NOMEM, "out of memory");
    for (int64_t i = 0; rc == ERR_OK && i < seqs.len[0]; i++)
        u[i] = (uint32_t)seqs.seq[0][i];
    if (rc == ERR_OK && (rc = tok_decode(mt->tok, u, (size_t)seqs.len[0], false, &text, &len, e)) == ERR_OK) {
        if (json) {
            struct json_object *jo = json_object_new_object();
            json_object_object_add(jo, "schema", json_object_new_string("gempack.tokenize/1"));
            json_object_object_add(jo, "text", json_object_new_string_len(text, (int)len));
            print_json(jo);
        } else {
            fwrite(text, 1, len, stdout);
            putchar('\n');
        }
    }
    free(text);
    free(u);
    tokens_free(&seqs);
    return rc;
}

static int tokenize_with(int argc, char **argv, struct tokenize_args *a)
{
    int code;
    for (int c; (c = next_opt(argc, argv, a, &code)) != -1;)
        return c == -2 ? code : common_opt(c);
    int texts = argc - optind - 1 + (a->file != NULL) + (a->decode != NULL) + (a->conversation != NULL);
    if (optind >= argc || texts != 1)
        return usage_error("tokenize", "%s", "expected MODEL and one of TEXT, --file F, --chat-file F or --decode IDS");
    struct err e = {0};
    struct model_text mt = {0};
    int rc = a->file           ? text_prompts_add_file(&a->tp, a->file, &e)
             : a->conversation ? text_prompts_add_conversation(&a->tp, a->conversation, &e)
             : a->decode       ? ERR_OK
                               : text_prompts_add(&a->tp, argv[optind + 1], strlen(argv[optind + 1]), false, "TEXT", &e);
    if (a->tp.n && !a->conversation)
        a->tp.p[0].chat = a->chat;
    if (rc == ERR_OK && (rc = text_open(&mt, argv[optind], &e)) == ERR_OK && !mt.tok)
        rc = err_set(&e, ERR_USAGE, "%s", mt.tok_why);
    if (rc == ERR_OK)
        rc = a->decode ? decode_print(&mt, a->decode, a->json, &e) : tokenize_print(&mt, &a->tp, a->json, &e);
    text_close(&mt);
    return rc == ERR_OK ? 0 : fail(&e);
}

static int cmd_tokenize(int argc, char **argv)
{
    struct tokenize_args a = {0};
    int code = tokenize_with(argc, argv, &a);
    text_prompts_free(&a.tp);
    return code;
}

/* ---- dispatch ---- */

static const struct command commands[] = {
    {"check", "gempack check DIR|FILE.gguf [--json] [--headers-only]", "does the checkpoint load as a Gemma 4 text model, and why not",
     "Tells whether the checkpoint in DIR (or a GGUF file) loads as a Gemma 4 text\n"
     "model, reading config.json and the safetensors headers only, and lists every\n"
     "reason why not (compressed-tensors and GGUF modules that do not map):\n"
     "missing, unexpected, mis-shaped and wrongly typed tensors (layer ranges\n"
     "collapsed), quantization inconsistent with config.json, config fields that are\n"
     "missing or invalid. K/V tensors of KV-shared layers are reported as redundant\n"
     "notes; tower and projector tensors are listed as ignored.\n",
     check_opts, "Exit: 0 loadable, 1 not loadable, 2 usage error or unreadable input.", cmd_check},
    {"inspect", "gempack inspect PATH [--json]",
     "tensors, dtypes, shapes and metadata of safetensors, a GGUF, a pack or an npz",
     "Lists the tensors (name, dtype, shape, bytes) and metadata of a safetensors\n"
     "file, of every shard of a checkpoint directory (headers only), of a GGUF file\n"
     "(metadata, tensors with ggml types), of a .gpk pack (header, manifest and its\n"
     "quality card, tensors with CRCs and quantization), or of an .npz (members with\n"
     "dtype and shape, each read once and CRC-checked; meta.json).\n",
     inspect_opts, NULL, cmd_inspect},
    {"convert", "gempack convert DIR|FILE.gguf -o OUT [options]", "normalize (and quantize) into a .gpk pack or an MLX directory",
     "Normalizes a checkpoint that 'gempack check' accepts (a directory, or a GGUF\n"
     "file; compressed-tensors and GGUF modules mapped exactly onto MLX affine) into\n"
     "one canonical form and writes a .gpk pack (default) or, with --format mlx, a\n"
     "directory of MLX safetensors + config.json. Every dropped or transformed\n"
     "tensor is reported, and whether each equals the source's values bit for bit.\n"
     "Without --bits, --mode or --quantize nothing is requantized: tensors keep their\n"
     "source representation.\n",
     convert_opts, NULL, cmd_convert},
    {"verify", "gempack verify FILE.gpk", "every checksum of a pack, and its tensors against its config",
     "Checks every CRC of a pack (header, manifest, every tensor), that all\n"
     "padding is zero, and that its tensors are exactly those its config uses,\n"
     "each of the shape and type the config implies.\n",
     NULL, "Exit: 0 intact, 1 any mismatch, 2 unreadable.", cmd_verify},
    {"run", "gempack run MODEL (--prompt TEXT | --chat MSG | --tokens IDS ... | their -file forms) [options]",
     "the forward pass on text or token ids: logits, generation, timings",
     "Runs the Gemma 4 forward pass of MODEL (a .gpk pack, a GGUF file or a\n"
     "checkpoint directory converted in memory without requantizing) on prompts\n"
     "given as text (tokenized by the model's own tokenizer; --chat through its chat\n"
     "template) or as token ids. From text, the generated text goes to stdout as it\n"
     "comes, the report to stderr (ids in --json).\n",
     run_opts, NULL, cmd_run},
    {"compare", "gempack compare A B (--prompt TEXT | --chat MSG | --tokens IDS ... | their -file forms) [options]",
     "how far B is from A, per position and per layer",
     "Runs two forms of one model (packs, checkpoint directories, GGUF files) on\n"
     "the same prompts (text: tokenized by A's tokenizer; B's, if it has one, must\n"
     "give the same ids). Per position and in total: KL(A||B) and KL(B||A), top-1..5\n"
     "agreement, argmax regret, max |dlogit|, NMSE, cosine, and the same by A's\n"
     "confidence. Per layer: the hidden state and both branches of B against A\n"
     "(relative error, cosine, SQNR) and the layer whose error jumps.\n",
     compare_opts, "Exit: 0 within the thresholds, 1 outside, 2 error.", cmd_compare},
    {"eval", "gempack eval REF CAND... [--text-file F] [--ctx N] [--chunks K] [--save-ref F | --ref F] [options]",
     "candidates against one reference on text: PPL, KLD, agreement, per category",
     "Tokenizes the text once with REF's tokenizer (every candidate's must give\n"
     "the same ids), cuts it into windows of --ctx tokens, each starting with BOS,\n"
     "and scores each window's second half as llama.cpp's perplexity does. Per\n"
     "candidate: PPL and its ratio to REF's, KL(REF||CAND) mean (95 % interval),\n"
     "median, p90, p99, max, top-1..5 agreement, argmax regret, bits per weight\n"
     "and size; the same per category of the text. All models in one process,\n"
     "one window at a time (exact kernels).\n",
     eval_opts, "Exit: 0 within the thresholds, 1 outside, 2 error.", cmd_eval},
    {"golden make", "gempack golden make MODEL (--prompt TEXT | --chat MSG | --tokens IDS | a -file form) -o G.npz",
     "golden logits of a model on a prompt",
     "Runs MODEL on the tokens and stores tokens.npy, logits.npy [T, V] and\n"
     "meta.json. A golden made by gempack itself is a regression baseline; the\n"
     "project's reference goldens come from golden/reference.py.\n",
     golden_make_opts, NULL, cmd_golden_make},
    {"golden check", "gempack golden check MODEL G.npz [--json] [thresholds] [--mode M] [--threads N]",
     "a model's logits against a golden: a verdict for CI",
     "Runs MODEL on the golden's tokens and compares logits: max-abs, NMSE,\n"
     "cosine, KL divergence (mean, p99, max; float64 log-softmax), top-1 agreement,\n"
     "RMS dp, first divergent position. A golden made from text is tokenized again\n"
     "by MODEL's tokenizer (and template): different ids fail it, naming the first\n"
     "differing position and both pieces. A table goes to stderr.\n",
     golden_check_opts, "Exit: 0 pass, 1 regression, 2 error (unreadable files, vocabulary or length\nmismatch).",
     cmd_golden_check},
    {"tokenize", "gempack tokenize MODEL (TEXT | --file F | --chat-file F | --decode IDS) [--chat [--system S]] [--json]",
     "text to token ids and pieces by a model's tokenizer, and back",
     "Tokenizes TEXT with MODEL's tokenizer (its tokenizer.json, a GGUF's\n"
     "tokenizer.ggml.* metadata, or the one a pack stores), exactly as HF tokenizers\n"
     "does: the ids on one line (for --tokens), then position, id and piece per\n"
     "token. With --chat, TEXT is a user message rendered through the model's chat\n"
     "template first (known templates only). The tokenizer's sha256 goes to stderr.\n",
     tokenize_opts, NULL, cmd_tokenize},
    {"fixture", "gempack fixture --variant e2b|e4b|12b|26b-a4b|31b [options] -o DIR\n"
                "       gempack fixture --like CONFIG.json [options] -o DIR",
     "tiny random checkpoints with the exact layout of a real variant",
     "Writes a random-weight checkpoint with the exact layout of a real Gemma 4\n"
     "variant: config.json, safetensors (one file or shards + index), and\n"
     "tokens.json holding a prompt longer than the sliding window. Tiny dimensions\n"
     "by default (vocab 512, hidden 128, sliding window 8) with the real topology:\n"
     "layer pattern, KV sharing and sources, double-wide MLP, per-layer inputs,\n"
     "k_eq_v, MoE. The same arguments give the same bytes on every machine.\n",
     fixture_opts, NULL, cmd_fixture},
};

int main(int argc, char **argv)
{
    return cli_main(commands, sizeof commands / sizeof commands[0], argc, argv);
}
