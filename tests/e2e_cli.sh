#!/bin/bash
# e2e_cli.sh GEMPACK [valgrind] - the command line as users script it: exit
# codes, --help on every command, JSON output, determinism of fixtures. With
# "valgrind", every gempack command runs under valgrind memcheck, and any
# memory error or leak makes it exit 97 (so its check fails).
set -u
G="$1"
. "$(dirname "$0")/lib.sh"
CPUS=$(nproc)
if [ "${2:-}" = valgrind ]; then
    # valgrind runs one thread at a time: pinned to one CPU, commands default
    # to one thread instead of contending for valgrind's lock
    CPUS=1
    printf '#!/bin/sh\nexec taskset -c %s valgrind -q --error-exitcode=97 --leak-check=full --show-leak-kinds=all --errors-for-leak-kinds=all "%s" "$@"\n' \
        "$(python3 -c 'import os; print(min(os.sched_getaffinity(0)))')" \
        "$(cd "$(dirname "$G")" && pwd)/$(basename "$G")" >"$T/gempack-vg"
    chmod +x "$T/gempack-vg"
    G="$T/gempack-vg"
fi

json_field() { # FILE EXPR: prints a field of a JSON document
    python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print($2)" "$1"
}

expect 0 "top-level --help" -- "$G" --help
expect 2 "no command" -- "$G"
expect 2 "unknown command" -- "$G" frobnicate
expect 0 "--version" -- "$G" --version
for c in check inspect fixture convert verify compare; do
    expect 0 "$c --help" -- "$G" $c --help
    ok "$c --help names its usage" -- grep -q "usage: gempack $c" "$T/out"
done
"$G" fixture --help > "$T/out"
ok "fixture --help lists every format whole" -- grep -q -- "--format safetensors|.*|gguf-iq2_xxs|gguf-mxfp4$" "$T/out"

expect 0 "fixture e2b hf" -- "$G" fixture --variant e2b -o "$T/e2b"
expect 0 "check e2b" -- "$G" check "$T/e2b"
ok "check prints the verdict" -- grep -q "verdict: LOADABLE" "$T/out"
ok "check collapses redundant K/V ranges" -- grep -q "layers.{5..9}.self_attn.k_proj.weight" "$T/out"
expect 0 "check --json" -- "$G" check --json "$T/e2b"
cp "$T/out" "$T/check.json"
ok "check --json schema" -- test "$(json_field "$T/check.json" "d['schema']")" = gempack.check/1
ok "check --json verdict" -- test "$(json_field "$T/check.json" "d['verdict']")" = loadable
ok "check --json text report on stderr" -- grep -q "verdict:" "$T/err"
expect 0 "inspect dir --json" -- "$G" inspect --json "$T/e2b"
ok "inspect counts tensors" -- test "$(json_field "$T/out" "len(d['tensors'])")" -gt 100
expect 0 "inspect file" -- "$G" inspect "$T/e2b/model.safetensors"

# same arguments, same bytes
expect 0 "fixture again" -- "$G" fixture --variant e2b -o "$T/e2b-again"
for f in config.json model.safetensors tokens.json; do
    ok "fixture deterministic: $f" -- cmp -s "$T/e2b/$f" "$T/e2b-again/$f"
done

# not loadable: a config whose hidden size disagrees with every tensor
cp -r "$T/e2b" "$T/bad"
sed -i 's/"hidden_size": 128/"hidden_size": 256/' "$T/bad/config.json"
expect 1 "check not loadable" -- "$G" check "$T/bad"
ok "not-loadable verdict printed" -- grep -q "verdict: NOT LOADABLE" "$T/out"
expect 1 "check --json not loadable" -- "$G" check --json "$T/bad"
ok "json verdict not_loadable" -- test "$(json_field "$T/out" "d['verdict']")" = not_loadable

# unreadable input and usage errors
mkdir -p "$T/empty"
expect 2 "check dir without config" -- "$G" check "$T/empty"
expect 2 "check without DIR" -- "$G" check
expect 2 "check bad option" -- "$G" check --bogus "$T/e2b"
expect 2 "fixture without -o" -- "$G" fixture --variant e2b
expect 2 "fixture unknown variant" -- "$G" fixture --variant e9b -o "$T/x"
expect 2 "fixture hf quantized" -- "$G" fixture --variant e2b --quant 4 -o "$T/x"
expect 2 "fixture bad group size" -- "$G" fixture --variant e2b --layout mlx --quant 4 --group-size 48 -o "$T/x"

# headers-only shards: loadable only with --headers-only
expect 0 "fixture 31b full-size headers" -- "$G" fixture --variant 31b --full-size --headers-only --shards 4 -o "$T/31b"
expect 0 "check --headers-only 31b" -- "$G" check --headers-only "$T/31b"
expect 2 "check 31b headers without --headers-only" -- "$G" check "$T/31b"

# MLX 4-bit multimodal, sharded
expect 0 "fixture mlx 4-bit multimodal" -- "$G" fixture --variant 26b-a4b --layout mlx --quant 4 --multimodal --shards 3 -o "$T/moe"
expect 0 "check mlx 4-bit multimodal" -- "$G" check "$T/moe"

# the MX modes: fixtures, convert --mode and per-tensor modes, the pack's features, a run
for m in mxfp4 nvfp4 mxfp8; do
    expect 0 "fixture mlx $m" -- "$G" fixture --variant e2b --layout mlx --quant $m -o "$T/fx-$m"
    expect 0 "check mlx $m" -- "$G" check "$T/fx-$m"
    ok "check names $m" -- grep -q "quant    mlx $m" "$T/out"
done
# every topology in every MX mode: a fixture that checks, converts to a pack that verifies, and runs
# (not under valgrind, which runs the e2b ones above: 15 more models would double its time)
[ "${2:-}" = valgrind ] || for v in e2b e4b 12b 26b-a4b 31b; do
    for m in mxfp4 nvfp4 mxfp8; do
        expect 0 "fixture $v $m" -- "$G" fixture --variant $v --layout mlx --quant $m -o "$T/mx-$v-$m"
        expect 0 "check $v $m" -- "$G" check "$T/mx-$v-$m"
        expect 0 "convert $v $m" -- "$G" convert "$T/mx-$v-$m" -o "$T/mx-$v-$m.gpk"
        expect 0 "verify $v $m" -- "$G" verify "$T/mx-$v-$m.gpk"
        expect 0 "run $v $m" -- "$G" run "$T/mx-$v-$m.gpk" --tokens-file "$T/mx-$v-$m/tokens.json" --generate 2
        rm -rf "$T/mx-$v-$m" "$T/mx-$v-$m.gpk"
    done
done
expect 2 "fixture mxfp4 with a group size" -- "$G" fixture --variant e2b --layout mlx --quant mxfp4 --group-size 64 -o "$T/x"
expect 0 "convert --mode nvfp4" -- "$G" convert "$T/e2b" --mode nvfp4 --align 64 -o "$T/e2b-nv.gpk"
expect 0 "verify the nvfp4 pack" -- "$G" verify "$T/e2b-nv.gpk"
expect 0 "inspect the nvfp4 pack" -- "$G" inspect "$T/e2b-nv.gpk"
ok "inspect names the feature" -- grep -q '"quant:nvfp4"' "$T/out"
ok "inspect names the mode per tensor" -- grep -q "layers.0.mlp.down_proj.weight .* nvfp4\$" "$T/out"
expect 0 "run the nvfp4 pack" -- "$G" run "$T/e2b-nv.gpk" --tokens 2,3,4 --generate 2
expect 2 "--mode mxfp4 --bits 8 refused" -- "$G" convert "$T/e2b" --mode mxfp4 --bits 8 -o "$T/x.gpk"
ok "the refusal names the mode's bits" -- grep -q "mxfp4 is 4-bit group 32" "$T/err"
# the library names a field ('mode', 'bits'); the command line names the flag, as a usage error
ok "... a usage error naming the flags" -- grep -qx -- "gempack convert: --mode mxfp4 is 4-bit group 32: drop --bits and --group-size, or give those" "$T/err"
ok "... with the hint to --help" -- grep -qx "Try 'gempack convert --help'." "$T/err"
expect 2 "fixture --variant unknown" -- "$G" fixture --variant e3b -o "$T/x-fx"
ok "... a usage error naming the flag" -- grep -qx -- "gempack fixture: --variant e3b: expected e2b, e4b, 12b, 26b-a4b or 31b" "$T/err"
expect 2 "--mode unknown" -- "$G" convert "$T/e2b" --mode fp4 -o "$T/x.gpk"
expect 0 "--quantize REGEX=MODE" -- "$G" convert "$T/e2b" --quantize 'mlp=mxfp8' --bits 4 --dry-run --json
ok "the rule's mode in the plan" -- test "$(json_field "$T/out" "[t['mode'] for t in d['plan']['tensors'] if t['tensor']=='layers.0.mlp.up_proj.weight'][0]")" = mxfp8
expect 0 "convert --format mlx --mode mxfp8" -- "$G" convert "$T/e2b" --format mlx --mode mxfp8 -o "$T/mlx-mx8"
expect 0 "the mxfp8 export passes check" -- "$G" check "$T/mlx-mx8"
ok "its config names the mode" -- test "$(json_field "$T/mlx-mx8/config.json" "d['quantization']['mode']")" = mxfp8

# a GGUF's ggml blocks in an MLX export: Q5_0 / Q5_1 (and Q4_1) as affine with the same values, the others refused
expect 0 "fixture gguf-q4_k_m" -- "$G" fixture --variant e2b --format gguf-q4_k_m -o "$T/km"
expect 2 "MLX export of K-quant blocks refused" -- "$G" convert "$T/km/model.gguf" --format mlx -o "$T/km-mlx"
ok "... naming tensor and type" -- grep -qE "layers\.[0-9]+\.[a-z_.]+\.weight is Q[46]_K blocks, which no MLX mode holds exactly" "$T/err"
rule='down_proj|layers\.(4|9)\.self_attn\.o_proj=8:64' # the Q4_K / Q6_K tensors of the fixture
expect 0 "MLX export: K-quants requantized, Q5_0 transcoded" -- "$G" convert "$T/km/model.gguf" --format mlx -o "$T/km-mlx" --allow-requantize --quantize "$rule"
ok "... 66 transcoded" -- grep -q "12 requantized, 0 dequantized, 66 transcoded" "$T/out"
ok "... counted exact" -- grep -q "exact: 148 of 160 tensors" "$T/out"
expect 0 "the export passes check" -- "$G" check "$T/km-mlx"
"$G" convert "$T/km/model.gguf" --format mlx -o "$T/x" --allow-requantize --quantize "$rule" --dry-run 2>/dev/null |
    awk '$2 == "transcode" {print $1}' >"$T/transcoded.txt"
ok "reference.py reads the GGUF's values in the export" -- /usr/bin/python3 "$(dirname "$0")/ggml/mlx_export_check.py" "$(dirname "$0")/../golden" "$T/km/model.gguf" "$T/km-mlx" "$T/transcoded.txt"

# progress: a line on a terminal, nothing otherwise
expect 0 "convert off a terminal" -- "$G" convert "$T/e2b" --bits 4 --align 64 -o "$T/notty.gpk"
ok "no progress line off a terminal" -- sh -c '! grep -q "MiB/s" "$1"' - "$T/err"
if command -v script >/dev/null; then
    script -qc "'$G' convert '$T/e2b' --bits 4 --align 64 -o '$T/tty.gpk'" /dev/null >"$T/tty.out" 2>&1
    ok "progress line on a terminal" -- grep -q "MiB/s, .* s left" "$T/tty.out"
fi

# convert --eval: the quality card, in the pack's manifest and beside an MLX export's config. Under valgrind
# from a source without a tokenizer: the card's sample eval (8 windows of 128 tokens through both models)
# took 280 s there, a third of the suite; eval below runs its code on 2 windows of 16.
mkdir "$T/notok" && cp "$T/e2b/config.json" "$T/e2b/model.safetensors" "$T/notok/" # no tokenizer: no sample eval
if [ "${2:-}" = valgrind ]; then card_src="$T/notok"; else card_src="$T/e2b"; fi
expect 0 "convert --eval" -- "$G" convert "$card_src" --bits 4 --align 64 --eval --eval-tokens 2,5,7 -o "$T/ev.gpk"
ok "the report gives the cost" -- grep -q "quality: KL(source||output) mean" "$T/out"
expect 0 "eval the carded pack on 2 windows of 16 tokens" -- "$G" eval "$T/e2b" "$T/ev.gpk" --ctx 16 --chunks 2 --json
ok "... 2 windows, 14 scored positions" -- test "$(json_field "$T/out" "(d['windows'], d['positions'])")" = "(2, 14)"
expect 0 "the carded pack verifies" -- "$G" verify "$T/ev.gpk"
expect 0 "inspect shows the card" -- "$G" inspect "$T/ev.gpk"
ok "inspect's card line" -- grep -q "quality   KL(source||output) mean .* over 27 positions" "$T/out"
expect 0 "inspect --json carries it" -- "$G" inspect --json "$T/ev.gpk"
ok "card schema and prompts" -- test "$(json_field "$T/out" "(d['manifest']['quality']['schema'], d['manifest']['quality']['prompts']['count'])")" = "('gempack.quality/1', 2)"
expect 0 "convert --format mlx --eval of a source without a tokenizer" -- "$G" convert "$T/notok" --bits 8 --format mlx --eval -o "$T/ev-mlx"
ok "gempack_quality.json beside config.json" -- test "$(json_field "$T/ev-mlx/gempack_quality.json" "d['schema']")" = gempack.quality/1
ok "... its sample eval skipped, saying why" -- json_field "$T/ev-mlx/gempack_quality.json" "d['sample']['skipped']" | grep -q tokenizer
expect 0 "the carded export passes check" -- "$G" check "$T/ev-mlx"
expect 2 "--eval with --dry-run" -- "$G" convert "$T/e2b" --bits 4 --eval --dry-run

# Google's QAT formats: compressed-tensors and GGUF in, transcoded exactly
expect 0 "fixture ct-w4a16" -- "$G" fixture --variant e2b --format ct-w4a16 -o "$T/ct"
expect 0 "fixture gguf-q4_0" -- "$G" fixture --variant e2b --format gguf-q4_0 -o "$T/gg"
expect 0 "fixture gguf-q4_0 again" -- "$G" fixture --variant e2b --format gguf-q4_0 -o "$T/gg2"
ok "gguf fixture deterministic" -- cmp -s "$T/gg/model.gguf" "$T/gg2/model.gguf"
expect 2 "fixture --format with --quant" -- "$G" fixture --variant e2b --format gguf-q4_0 --quant 4 -o "$T/x"
expect 0 "check ct" -- "$G" check "$T/ct"
expect 0 "check gguf" -- "$G" check "$T/gg/model.gguf"
expect 0 "inspect gguf --json" -- "$G" inspect --json "$T/gg/model.gguf"
ok "inspect reads the metadata" -- test "$(json_field "$T/out" "d['metadata']['gemma4.block_count']")" = 10
ok "inspect lists ggml types" -- test "$(json_field "$T/out" "d['tensors'][0]['type']")" = Q4_0
expect 0 "run gguf" -- "$G" run "$T/gg/model.gguf" --tokens-file "$T/gg/tokens.json" --dump-logits "$T/gg-src.npz"
expect 0 "convert gguf to a pack" -- "$G" convert "$T/gg/model.gguf" --align 64 -o "$T/gg.gpk"
ok "convert says every tensor is exact" -- grep -q "exact: 160 of 160 tensors equal the source's values bit for bit" "$T/out"
expect 0 "run the pack" -- "$G" run "$T/gg.gpk" --tokens-file "$T/gg/tokens.json" --dump-logits "$T/gg-pack.npz"
ok "source and pack: the same logits" -- python3 -c "import zipfile,sys; a,b=(zipfile.ZipFile(f).read('logits.npy') for f in sys.argv[1:]); sys.exit(a!=b)" "$T/gg-src.npz" "$T/gg-pack.npz"
expect 0 "run the fixture's directory (its one .gguf, no config.json)" -- "$G" run "$T/gg" --tokens-file "$T/gg/tokens.json" --dump-logits "$T/gg-dir.npz"
ok "directory and file: the same logits" -- cmp -s "$T/gg-src.npz" "$T/gg-dir.npz"
expect 0 "inspect the fixture's directory" -- "$G" inspect "$T/gg"
ok "... as its GGUF" -- grep -q "model.gguf: GGUF v3" "$T/out"
expect 0 "check the fixture's directory" -- "$G" check "$T/gg"
mkdir "$T/gg/sub.gguf" && mkfifo "$T/gg/pipe.gguf"
expect 0 "... beside a directory and a FIFO named .gguf (not files: passed over)" -- "$G" check "$T/gg"
rmdir "$T/gg/sub.gguf" && rm "$T/gg/pipe.gguf"
cp "$T/gg/model.gguf" "$T/gg/second.gguf"
expect 2 "a directory of two .gguf files is not one model" -- "$G" check "$T/gg"
ok "... the error names both" -- grep -q "model.gguf" "$T/err"
ok "... both" -- grep -q "second.gguf" "$T/err"
rm "$T/gg/second.gguf"
mkdir "$T/notgguf" && echo hello >"$T/notgguf/model.gguf"
for c in check inspect; do
    expect 2 "$c: a directory's one .gguf that is not GGUF" -- "$G" $c "$T/notgguf"
    ok "... read as a GGUF, whatever its bytes" -- grep -q "model.gguf: not a GGUF file" "$T/err"
done
expect 2 "run: the same" -- "$G" run "$T/notgguf" --tokens-file "$T/gg/tokens.json"
ok "... the same error" -- grep -q "model.gguf: not a GGUF file" "$T/err"
mkdir "$T/broken" && cp "$T/gg/model.gguf" "$T/broken/" && ln -s nowhere "$T/broken/config.json"
expect 2 "a broken config.json link beside a .gguf is a config.json" -- "$G" check "$T/broken"
ok "... reported" -- grep -q "broken/config.json" "$T/err"
cp "$T/gg/model.gguf" "$T/e2b/stray.gguf"
expect 0 "a directory with config.json and a stray .gguf stays a safetensors checkpoint" -- "$G" check "$T/e2b"
ok "... read as one" -- grep -q "verdict: LOADABLE" "$T/out"
rm "$T/e2b/stray.gguf"
expect 0 "convert ct --json" -- "$G" convert "$T/ct" --format mlx --json -o "$T/ct-mlx"
ok "json: the source's modules, exact" -- test "$(json_field "$T/out" "all(m['exact'] for m in d['source']['transcoded']) and d['plan']['exact_tensors'] == len(d['plan']['tensors'])")" = True
expect 0 "the MLX export of ct passes check" -- "$G" check "$T/ct-mlx"
expect 0 "requantizing a gguf reports the error" -- "$G" convert "$T/gg/model.gguf" --bits 8 --allow-requantize --dry-run
ok "a dry run measures nothing" -- grep -q "exact: not measured" "$T/out"
# a type without an exact MLX form, and another architecture
python3 - "$T/gg/model.gguf" "$T/iq.gguf" "$T/llama.gguf" <<'PY'
import struct, sys
b = bytearray(open(sys.argv[1], "rb").read())
name = b"blk.0.attn_q.weight"
i = b.index(struct.pack("<Q", len(name)) + name) + 8 + len(name)
n_dims = struct.unpack_from("<I", b, i)[0]
struct.pack_into("<I", b, i + 4 + 8 * n_dims, 20)  # Q4_0 -> IQ4_NL (same block size)
open(sys.argv[2], "wb").write(b)
b = bytearray(open(sys.argv[1], "rb").read())
i = b.index(b"general.architecture") + len(b"general.architecture") + 4 + 8
assert b[i:i + 6] == b"gemma4"
b[i:i + 6] = b"llama4"
open(sys.argv[3], "wb").write(b)
PY
expect 0 "check reads an IQ4_NL tensor (a Q4_0 block's bytes relabelled: the same block size)" -- "$G" check "$T/iq.gguf"
ok "its mix names the type" -- grep -q "IQ4_NL  *1 " "$T/out"
expect 1 "check refuses another GGUF architecture" -- "$G" check "$T/llama.gguf"
ok "by name" -- grep -q "not a Gemma 4 text model gempack runs: llama4" "$T/out"

# not a Gemma 4 text model: the architecture is refused by name
cp -r "$T/e2b" "$T/arch"
sed -i 's/"Gemma4ForConditionalGeneration"/"Gemma3ForCausalLM"/' "$T/arch/config.json"
expect 1 "check refuses another architecture" -- "$G" check "$T/arch"
ok "the refusal names it" -- grep -q "not a Gemma 4 text model gempack runs: Gemma3ForCausalLM" "$T/out"
expect 1 "run refuses another architecture, exit 1" -- "$G" run "$T/arch" --tokens 2,3
ok "by name" -- grep -q "not a Gemma 4 text model gempack runs: Gemma3ForCausalLM" "$T/err"
expect 1 "convert refuses another architecture, exit 1" -- "$G" convert "$T/arch" -o "$T/arch.gpk"
ok "and writes nothing" -- test ! -e "$T/arch.gpk"

# convert -> verify -> inspect; a flipped byte is caught; no partial output on failure
expect 0 "convert e2b to a 4-bit pack" -- "$G" convert "$T/e2b" --bits 4 --align 64 -o "$T/e2b-q4.gpk"
expect 0 "verify the pack" -- "$G" verify "$T/e2b-q4.gpk"
expect 0 "inspect the pack --json" -- "$G" inspect --json "$T/e2b-q4.gpk"
ok "pack manifest records bits" -- test "$(json_field "$T/out" "d['manifest']['options']['bits']")" = 4
expect 0 "convert again, 2 threads" -- "$G" convert "$T/e2b" --bits 4 --align 64 --threads 2 -o "$T/e2b-q4-again.gpk"
ok "packs byte-identical" -- cmp -s "$T/e2b-q4.gpk" "$T/e2b-q4-again.gpk"
expect 2 "convert --threads 0" -- "$G" convert "$T/e2b" --threads 0 -o "$T/never.gpk"
cp "$T/e2b-q4.gpk" "$T/flipped.gpk"
size=$(stat -c %s "$T/flipped.gpk")
printf '\x5a' | dd of="$T/flipped.gpk" bs=1 seek=$((size / 3)) conv=notrunc status=none
expect 1 "verify detects a flipped data byte" -- "$G" verify "$T/flipped.gpk"
expect 0 "convert --dry-run" -- "$G" convert "$T/e2b" --bits 4 --dry-run
ok "dry run prints bits per weight" -- grep -q "bits per weight" "$T/out"
ok "dry run writes nothing" -- test ! -e "$T/none.gpk"
expect 2 "convert a non-loadable checkpoint" -- "$G" convert "$T/bad" -o "$T/bad.gpk"
ok "no output for a refused convert" -- test ! -e "$T/bad.gpk"
expect 0 "convert --format mlx 4-bit" -- "$G" convert "$T/e2b" --format mlx --bits 4 --skip-last-full-attention -o "$T/mlx4"
expect 0 "MLX export passes check" -- "$G" check "$T/mlx4"
expect 2 "requantize refused" -- "$G" convert "$T/mlx4" --bits 8 -o "$T/re.gpk"
ok "requantize message names the flag" -- grep -q -- "--allow-requantize" "$T/err"
expect 0 "requantize allowed" -- "$G" convert "$T/mlx4" --bits 8 --allow-requantize --align 64 -o "$T/re.gpk"


# compare: the 4-bit pack against its source, per position and per layer
expect 0 "compare source and 4-bit pack" -- "$G" compare "$T/e2b" "$T/e2b-q4.gpk" --tokens-file "$T/e2b/tokens.json"
ok "compare reports both KL directions" -- grep -q "KL(A||B) mean .* KL(B||A) mean" "$T/out"
ok "compare reports every layer" -- grep -q "^      9 " "$T/out"
expect 1 "compare over a threshold" -- "$G" compare "$T/e2b" "$T/e2b-q4.gpk" --tokens-file "$T/e2b/tokens.json" --kld-mean 1e-9
expect 0 "compare --json, --keep-a, --kv-bits" -- "$G" compare "$T/e2b" "$T/e2b-q4.gpk" --tokens 2,17,99 --tokens 2,5 --keep-a 3 --kv-bits 8 --json
ok "compare schema" -- test "$(json_field "$T/out" "d['schema']")" = gempack.compare/1
ok "two prompts, five positions" -- test "$(json_field "$T/out" "(d['prompts'], len(d['positions']))")" = "(2, 5)"
ok "layers 0..2 are A's" -- test "$(json_field "$T/out" "[l['hidden']['relative_error'] for l in d['layers'][:3]]")" = "[0.0, 0.0, 0.0]"
expect 2 "compare without prompts" -- "$G" compare "$T/e2b" "$T/e2b-q4.gpk"
expect 2 "compare --keep-a beyond the layers" -- "$G" compare "$T/e2b" "$T/e2b-q4.gpk" --tokens 2,3 --keep-a 11
ok "... a usage error naming the flag" -- grep -qx -- "gempack compare: --keep-a 11: expected 0..10 (the layers)" "$T/err"
expect 2 "compare --max-abs not a number" -- "$G" compare "$T/e2b" "$T/e2b-q4.gpk" --tokens 2,3 --max-abs 1e-3x
ok "... names the threshold's flag" -- grep -qxF -- "gempack compare: --max-abs 1e-3x: expected a number in [0, inf), or off" "$T/err"

# run and golden: logit dumps, regression baselines, the committed float64 reference
SRC=$(cd "$(dirname "$0")/.." && pwd)
PY=/usr/bin/python3 # Debian's python3 with numpy (the python3 on PATH may lack it)
E="$T/e2b"
for c in run golden; do
    expect 0 "$c --help" -- "$G" $c --help
    ok "$c --help names its usage" -- grep -q "usage: gempack $c" "$T/out"
done
expect 0 "run --dump-logits" -- "$G" run "$E" --tokens-file "$E/tokens.json" --dump-logits "$T/run.npz"
ok "dump: tokens int32 [T], logits float32 [T, 512] (numpy)" -- $PY -c '
import json, sys, numpy as np
z = np.load(sys.argv[1]); want = json.load(open(sys.argv[2]))["tokens"]
t, l = z["tokens"], z["logits"]
assert t.dtype == np.int32 and t.shape == (len(want),) and t.tolist() == want, (t.dtype, t.shape)
assert l.dtype == np.float32 and l.shape == (len(want), 512), (l.dtype, l.shape)
assert np.isfinite(l).all() and 0 < np.abs(l).max() < 30
' "$T/run.npz" "$E/tokens.json"

expect 0 "golden make" -- "$G" golden make "$E" --tokens-file "$E/tokens.json" -o "$T/self.npz"
expect 0 "golden check against its own baseline" -- "$G" golden check "$E" "$T/self.npz"
ok "golden check prints PASS" -- grep -q "verdict: PASS" "$T/err"
ok "no progress line off a terminal (golden)" -- sh -c '! grep -q "positions/s" "$1"' - "$T/err"
if command -v script >/dev/null; then
    script -qc "'$G' golden make '$E' --tokens-file '$E/tokens.json' -o '$T/self-tty.npz'" /dev/null >"$T/tty.out" 2>&1
    ok "golden make's progress line on a terminal" -- grep -q "positions: 100.0% (.* of .* positions), .* positions/s" "$T/tty.out"
fi
expect 0 "golden check --json" -- "$G" golden check --json "$E" "$T/self.npz"
ok "golden --json schema" -- test "$(json_field "$T/out" "d['schema']")" = gempack.golden/1
ok "golden --json verdict pass" -- test "$(json_field "$T/out" "d['verdict']")" = pass
ok "own baseline: max_abs 0, no failures" -- test "$(json_field "$T/out" "(d['metrics']['max_abs'], len(d['failures']))")" = "(0.0, 0)"

# a golden perturbed by +0.01 at one logit of position 5 (its row minimum, so
# the argmax stays): a regression, exit 1, failures name max_abs
$PY - "$T/self.npz" "$T/perturbed.npz" "$T/v256.npz" "$T/short.npz" <<'PYEOF'
import sys, numpy as np
z = np.load(sys.argv[1]); tok, l = z["tokens"], z["logits"].copy()
l[5, l[5].argmin()] += np.float32(0.01)
np.savez(sys.argv[2], tokens=tok, logits=l)
np.savez(sys.argv[3], tokens=tok, logits=z["logits"][:, :256])  # another vocabulary
np.savez(sys.argv[4], tokens=tok[:-1], logits=z["logits"])      # T disagrees
PYEOF
ok "numpy wrote the modified goldens" -- test -s "$T/perturbed.npz" -a -s "$T/v256.npz" -a -s "$T/short.npz"
expect 1 "golden check: perturbed logit is a regression" -- "$G" golden check --json "$E" "$T/perturbed.npz"
ok "perturbed: verdict fail" -- test "$(json_field "$T/out" "d['verdict']")" = fail
ok "perturbed: failures name max_abs" -- test "$(json_field "$T/out" "[f['metric'] for f in d['failures']]")" = "['max_abs']"
ok "perturbed: first divergent position 5" -- test "$(json_field "$T/out" "d['metrics']['first_divergent']")" = 5
ok "perturbed: max_abs 0.01" -- test "$(json_field "$T/out" "abs(d['metrics']['max_abs'] - 0.01) < 1e-6")" = True
expect 0 "perturbed passes with --max-abs 0.02" -- "$G" golden check "$E" "$T/perturbed.npz" --max-abs 0.02
expect 0 "perturbed passes with the check off" -- "$G" golden check "$E" "$T/perturbed.npz" --max-abs off
expect 2 "a negative threshold is refused, not a disabled check" -- "$G" golden check "$E" "$T/perturbed.npz" --max-abs -1
ok "... naming the flag and the range" -- grep -qF -- "--max-abs -1: expected a number in [0, inf), or off" "$T/err"
expect 2 "golden check: other vocabulary" -- "$G" golden check "$E" "$T/v256.npz"
ok "vocabulary message" -- grep -q "vocabulary 256, model 512" "$T/err"
expect 2 "golden check: tokens/logits lengths disagree" -- "$G" golden check "$E" "$T/short.npz"
ok "length message" -- grep -q "T = 23 tokens" "$T/err"
expect 2 "golden check: missing golden" -- "$G" golden check "$E" "$T/none.npz"
expect 2 "golden check: not a zip" -- "$G" golden check "$E" "$E/tokens.json"

# the committed float64 reference golden: the hf fixture and its converted pack
expect 0 "golden check: committed e2b-bf16 golden, hf dir" -- "$G" golden check --json "$E" "$SRC/golden/data/e2b-bf16.npz"
ok "committed golden: verdict pass" -- test "$(json_field "$T/out" "d['verdict']")" = pass
ok "committed golden: top1 1.0" -- test "$(json_field "$T/out" "d['metrics']['top1']")" = 1.0
expect 0 "convert e2b to an unquantized pack" -- "$G" convert "$E" --align 64 -o "$T/e2b.gpk"
expect 0 "golden check: committed e2b-bf16 golden, pack" -- "$G" golden check "$T/e2b.gpk" "$SRC/golden/data/e2b-bf16.npz"

# threads and modes
expect 0 "run --threads 1" -- "$G" run "$E" --tokens-file "$E/tokens.json" --threads 1 --dump-logits "$T/th1.npz"
expect 0 "run --threads 2" -- "$G" run "$E" --tokens-file "$E/tokens.json" --threads 2 --dump-logits "$T/th2.npz"
ok "--threads 1 and 2 dump identical bytes" -- cmp -s "$T/th1.npz" "$T/th2.npz"
expect 0 "run, threads by default" -- "$G" run "$E" --tokens-file "$E/tokens.json" --json --dump-logits "$T/thd.npz"
ok "... every CPU of its affinity mask (nproc)" -- test "$(json_field "$T/out" "d['threads']")" = "$CPUS"
ok "... the same bytes" -- cmp -s "$T/th1.npz" "$T/thd.npz"
expect 0 "run on one CPU (taskset)" -- taskset -c 0 "$G" run "$E" --tokens-file "$E/tokens.json" --json
ok "... one thread" -- test "$(json_field "$T/out" "d['threads']")" = 1
expect 0 "run --mode decode" -- "$G" run "$E" --tokens-file "$E/tokens.json" --mode decode --dump-logits "$T/dec.npz"
expect 0 "run --mode prefill" -- "$G" run "$E" --tokens-file "$E/tokens.json" --mode prefill --dump-logits "$T/pre.npz"
ok "decode and prefill logits agree within 1e-5" -- $PY -c '
import sys, numpy as np
a, b = np.load(sys.argv[1])["logits"], np.load(sys.argv[2])["logits"]
assert a.shape == b.shape == (24, 512), (a.shape, b.shape)
d = np.abs(a.astype(np.float64) - b).max()
assert d <= 1e-5, d
' "$T/dec.npz" "$T/pre.npz"
# --kernels q8: int8 activations for the 4-bit pack's matmuls; approximate, deterministic
expect 0 "run --kernels q8 --json, 1 thread" -- "$G" run "$T/e2b-q4.gpk" --tokens-file "$E/tokens.json" --kernels q8 --json --dump-logits "$T/q8-1.npz"
ok "q8: the int8 kernels named" -- grep -q -E '"int8_kernels": *"(avx512-vnni|avx-vnni|avx2|neon-dotprod)"' "$T/out"
expect 0 "run --kernels q8, 2 threads" -- "$G" run "$T/e2b-q4.gpk" --tokens-file "$E/tokens.json" --kernels q8 --threads 2 --dump-logits "$T/q8-2.npz"
ok "q8: --threads 1 and 2 dump identical bytes" -- cmp -s "$T/q8-1.npz" "$T/q8-2.npz"
expect 0 "run the 4-bit pack, exact kernels" -- "$G" run "$T/e2b-q4.gpk" --tokens-file "$E/tokens.json" --dump-logits "$T/q4-exact.npz"
ok "q8 differs from the exact kernels, same top-1" -- $PY -c '
import sys, numpy as np
a, b = np.load(sys.argv[1])["logits"], np.load(sys.argv[2])["logits"]
assert a.shape == b.shape and np.abs(a.astype(np.float64) - b).max() > 1e-3
assert (a.argmax(-1) == b.argmax(-1)).all()
' "$T/q8-1.npz" "$T/q4-exact.npz"
# one definition per kernel: the kernels of every ISA give the same bits (GEMPACK_ISA limits them to a
# subset of this CPU's; a name this CPU lacks leaves fewer, which must not matter either)
expect 0 "run the bf16 pack, exact kernels" -- "$G" run "$T/e2b.gpk" --tokens-file "$E/tokens.json" --dump-logits "$T/bf16-exact.npz"
for isa in scalar avx2 avx-vnni avx512 avx512-vnni neon dotprod; do
    expect 0 "GEMPACK_ISA=$isa: run the 4-bit pack" -- env GEMPACK_ISA=$isa "$G" run "$T/e2b-q4.gpk" --tokens-file "$E/tokens.json" --dump-logits "$T/isa.npz"
    ok "GEMPACK_ISA=$isa: the default kernels' bytes (4-bit)" -- cmp -s "$T/q4-exact.npz" "$T/isa.npz"
    expect 0 "GEMPACK_ISA=$isa: run the bf16 pack" -- env GEMPACK_ISA=$isa "$G" run "$T/e2b.gpk" --tokens-file "$E/tokens.json" --dump-logits "$T/isa.npz"
    ok "GEMPACK_ISA=$isa: the default kernels' bytes (bf16)" -- cmp -s "$T/bf16-exact.npz" "$T/isa.npz"
    expect 0 "GEMPACK_ISA=$isa: run --kernels q8 --json" -- env GEMPACK_ISA=$isa "$G" run "$T/e2b-q4.gpk" --tokens-file "$E/tokens.json" --kernels q8 --json --dump-logits "$T/isa.npz"
    if grep -q '"int8_kernels": null' "$T/out"; then
        ok "GEMPACK_ISA=$isa, no int8 kernels: a warning" -- grep -q "no int8 kernels" "$T/err"
        ok "GEMPACK_ISA=$isa, no int8 kernels: the exact kernels' bytes" -- cmp -s "$T/q4-exact.npz" "$T/isa.npz"
    else
        ok "GEMPACK_ISA=$isa: the int8 kernels' bytes" -- cmp -s "$T/q8-1.npz" "$T/isa.npz"
    fi
done
expect 2 "GEMPACK_ISA=bogus refused" -- env GEMPACK_ISA=bogus "$G" check "$E"
ok "... naming the accepted values" -- grep -q "GEMPACK_ISA=bogus: expected scalar, avx2" "$T/err"
expect 2 "run --kernels bogus" -- "$G" run "$E" --tokens-file "$E/tokens.json" --kernels bogus
ok "bad kernels message lists q8" -- grep -q -- "--kernels bogus: expected one of scalar|best|blas|q8" "$T/err"
expect 2 "run --mode bogus" -- "$G" run "$E" --tokens-file "$E/tokens.json" --mode bogus
ok "bad mode message" -- grep -q -- "--mode bogus" "$T/err"
expect 2 "run --threads 0" -- "$G" run "$E" --tokens-file "$E/tokens.json" --threads 0
expect 2 "run without --tokens" -- "$G" run "$E"
expect 2 "run without MODEL" -- "$G" run --tokens 2,3
expect 2 "golden without a subcommand" -- "$G" golden
expect 2 "golden make without -o" -- "$G" golden make "$E" --tokens 2,3
expect 2 "golden check --threads 0" -- "$G" golden check --threads 0 "$E" "$T/self.npz"

# inspect reads .npz goldens
expect 0 "inspect a golden npz --json" -- "$G" inspect --json "$(dirname "$0")/../golden/data/e2b-bf16.npz"
ok "npz members listed with shapes" -- test "$(json_field "$T/out" "[m.get('shape') for m in d['members'] if m['name']=='logits.npy'][0]")" = "[24, 512]"

# issue 5: quantized KV cache, batches, prefix cache
# --kv-bits accepts 4 and 8 only, refused before any work: a nonexistent model
# path gives the usage error (exit 2, the accepted values), not a file error
for bad in 0 3 16 x; do
    expect 2 "run --kv-bits $bad refused" -- "$G" run "$T/no-such-model" --tokens 2,3 --kv-bits $bad
    ok "--kv-bits $bad: message lists 4 and 8" -- grep -q -- "--kv-bits $bad: expected one of 4|8" "$T/err"
    ok "--kv-bits $bad: refused before opening the model" -- test "$(grep -c "no-such-model" "$T/err")" = 0
done
expect 2 "run --kv-group-size 48 refused" -- "$G" run "$T/no-such-model" --tokens 2,3 --kv-group-size 48
ok "--kv-group-size message lists 32, 64 and 128" -- grep -q -- "--kv-group-size 48: expected one of 32|64|128" "$T/err"
expect 2 "run --kv-skip-last-full-attention maybe refused" -- "$G" run "$T/no-such-model" --tokens 2,3 --kv-skip-last-full-attention maybe
ok "--kv-skip-last-full-attention message lists on and off" -- grep -q "expected on or off" "$T/err"
expect 2 "the same model path without --kv-bits: a file error" -- "$G" run "$T/no-such-model" --tokens 2,3
ok "file error names the path" -- grep -q "no-such-model" "$T/err"

# --kv-bits 8: reported in --json; KLD against the float cache within the issue's bar
expect 0 "run --json (float cache)" -- "$G" run "$E" --tokens-file "$E/tokens.json" --json
cp "$T/out" "$T/kvf.json"
expect 0 "run --kv-bits 8 --json" -- "$G" run "$E" --tokens-file "$E/tokens.json" --kv-bits 8 --json
cp "$T/out" "$T/kv8.json"
ok "kv_cache.bits 8" -- test "$(json_field "$T/kv8.json" "d['kv_cache']['bits']")" = 8
ok "kv_cache.float_layer 4 (skip-last on by default)" -- test "$(json_field "$T/kv8.json" "d['kv_cache']['float_layer']")" = 4
ok "float run: kv_cache.bits 0, no float layer" -- test "$(json_field "$T/kvf.json" "(d['kv_cache']['bits'], d['kv_cache']['float_layer'])")" = "(0, None)"
ok "kv 8 cache smaller than float" -- test "$(json_field "$T/kv8.json" "d['kv_cache']['cache_bytes']")" -lt "$(json_field "$T/kvf.json" "d['kv_cache']['cache_bytes']")"
expect 0 "run --kv-bits 4 --kv-skip-last-full-attention off --json" -- "$G" run "$E" --tokens-file "$E/tokens.json" --kv-bits 4 --kv-skip-last-full-attention off --kv-group-size 32 --json
ok "kv 4 skip off: bits 4, group 32, no float layer" -- test "$(json_field "$T/out" "(d['kv_cache']['bits'], d['kv_cache']['group_size'], d['kv_cache']['float_layer'])")" = "(4, 32, None)"
expect 0 "run --kv-bits 8 --dump-logits" -- "$G" run "$E" --tokens-file "$E/tokens.json" --kv-bits 8 --dump-logits "$T/kv8.npz"
ok "kv 8 vs float cache: mean KLD < 1e-3, top-1 >= 95 %" -- $PY -c '
import sys, numpy as np
a = np.load(sys.argv[1])["logits"].astype(np.float64); b = np.load(sys.argv[2])["logits"].astype(np.float64)
lp = a - a.max(1, keepdims=True); lp -= np.log(np.exp(lp).sum(1, keepdims=True))
lq = b - b.max(1, keepdims=True); lq -= np.log(np.exp(lq).sum(1, keepdims=True))
kl = (np.exp(lp) * (lp - lq)).sum(1)
assert 0 < kl.mean() < 1e-3, kl.mean()
assert (a.argmax(1) == b.argmax(1)).mean() >= 0.95
' "$T/pre.npz" "$T/kv8.npz"

# batches: repeated --tokens and a JSON list of lists; --dump-logits [B, Tmax, V]
P0=$(json_field "$E/tokens.json" "','.join(map(str, d['tokens']))")
P1=$(json_field "$E/tokens.json" "','.join(map(str, d['tokens'][17:][::-1]))")
P2=$(json_field "$E/tokens.json" "','.join(map(str, d['tokens'][3:16]))")
printf '[[%s], [%s], [%s]]\n' "$P0" "$P1" "$P2" >"$T/batch.json"
expect 0 "run a batch: repeated --tokens" -- "$G" run "$E" --tokens "$P0" --tokens "$P1" --tokens "$P2" --dump-logits "$T/batch-t.npz"
expect 0 "run a batch: JSON list of lists, chunked:5" -- "$G" run "$E" --tokens-file "$T/batch.json" --mode chunked:5 --dump-logits "$T/batch-f.npz"
expect 0 "run a batch: decode mode, 2 threads" -- "$G" run "$E" --tokens-file "$T/batch.json" --mode decode --threads 2 --dump-logits "$T/batch-d.npz"
for i in 0 1 2; do
    P="P$i"
    expect 0 "run prompt $i alone" -- "$G" run "$E" --tokens "${!P}" --dump-logits "$T/single$i.npz"
done
for f in batch-t batch-f batch-d; do
    ok "$f: logits [3, 24, 512], lengths, zero rows past each end, each prompt = alone within 1e-5" -- $PY -c '
import sys, numpy as np
z = np.load(sys.argv[1]); l, n, t = z["logits"], z["lengths"], z["tokens"]
assert l.dtype == np.float32 and l.shape == (3, 24, 512), (l.dtype, l.shape)
assert n.tolist() == [24, 7, 13], n
assert t.shape == (3, 24)
for b in range(3):
    s = np.load(sys.argv[2 + b])
    assert t[b, :n[b]].tolist() == s["tokens"].tolist()
    assert (l[b, n[b]:] == 0).all(), b
    d = np.abs(l[b, :n[b]].astype(np.float64) - s["logits"]).max()
    assert d <= 1e-5, (b, d)
' "$T/$f.npz" "$T/single0.npz" "$T/single1.npz" "$T/single2.npz"
done
expect 0 "batch --generate 4 --json" -- "$G" run "$E" --tokens "$P0" --tokens "$P1" --generate 4 --json
ok "batch --json: one generated list per prompt" -- test "$(json_field "$T/out" "(d['sequences'], len(d['generated']), len(d['generated'][1]))")" = "(2, 2, 4)"
g1=$(json_field "$T/out" "d['generated'][1]")
expect 0 "prompt 1 alone --generate 4 --json" -- "$G" run "$E" --tokens "$P1" --generate 4 --json
ok "batched generation = alone" -- test "$(json_field "$T/out" "d['generated']")" = "$g1"

# prefix cache: two runs on one directory; hot only; a corrupt entry
LONG=$(json_field "$E/tokens.json" "','.join(map(str, d['tokens'] + d['tokens'][::-1]))")
expect 0 "run without a prefix cache --generate 4 --json" -- "$G" run "$E" --tokens "$LONG" --generate 4 --json
gen_ref=$(json_field "$T/out" "d['generated']")
PC=(--prefix-cache-dir "$T/pc" --prefix-block 8 --generate 4 --json)
expect 0 "prefix cache dir: first run" -- "$G" run "$E" --tokens "$LONG" "${PC[@]}"
ok "first run: no hit, files written" -- test "$(json_field "$T/out" "(d['prefix_cache_hit_tokens'], d['prefix_cache_cold_bytes'] > 0)")" = "(0, True)"
ok "first run: same tokens as without the cache" -- test "$(json_field "$T/out" "d['generated']")" = "$gen_ref"
float_entries=$(ls "$T/pc"/*.gpkc) # all of the first run's entries: which one a run reads first depends on the key hashes
expect 0 "prefix cache dir: second run" -- "$G" run "$E" --tokens "$LONG" "${PC[@]}"
ok "second run: prefix_cache_hit_tokens > 0" -- test "$(json_field "$T/out" "d['prefix_cache_hit_tokens']")" -gt 0
ok "second run: prefix_cache_cold_bytes > 0" -- test "$(json_field "$T/out" "d['prefix_cache_cold_bytes']")" -gt 0
ok "second run: prefix_cache_hot_bytes > 0" -- test "$(json_field "$T/out" "d['prefix_cache_hot_bytes']")" -gt 0
ok "second run: same tokens as without the cache" -- test "$(json_field "$T/out" "d['generated']")" = "$gen_ref"
expect 0 "prefix cache dir: a --kv-bits 4 run on the same directory" -- "$G" run "$E" --tokens "$LONG" "${PC[@]}" --kv-bits 4
ok "kv 4 run: no hit from float entries" -- test "$(json_field "$T/out" "d['prefix_cache_hit_tokens']")" = 0
expect 0 "prefix cache dir: float again after kv 4" -- "$G" run "$E" --tokens "$LONG" "${PC[@]}"
ok "float again: hits, same tokens" -- test "$(json_field "$T/out" "(d['prefix_cache_hit_tokens'] > 0, d['generated'])")" = "(True, $gen_ref)"
ok "float entries to corrupt" -- test -n "$float_entries"
for f in $float_entries; do
    printf '\x5a' | dd of="$f" bs=1 seek=100 conv=notrunc status=none
done
expect 0 "prefix cache dir: every float entry corrupt" -- "$G" run "$E" --tokens "$LONG" "${PC[@]}"
ok "corrupt entries: warning on stderr" -- grep -q "warning: prefix cache: discarded" "$T/err"
ok "corrupt entries: same tokens" -- test "$(json_field "$T/out" "d['generated']")" = "$gen_ref"
mkdir -p "$T/hotcwd"
GA=$(cd "$(dirname "$G")" && pwd)/$(basename "$G")
expect 0 "hot-only --prefix-cache, a batch sharing a prefix" -- env -C "$T/hotcwd" "$GA" run "$E" --tokens "$LONG" --tokens "$LONG" --prefix-cache --prefix-block 8 --generate 4 --json
ok "hot only: prefix_cache_cold_bytes 0" -- test "$(json_field "$T/out" "d['prefix_cache_cold_bytes']")" = 0
ok "hot only: the second prompt hits" -- test "$(json_field "$T/out" "d['prefix_cache_hit_tokens']")" -gt 0
ok "hot only: same tokens for both prompts" -- test "$(json_field "$T/out" "d['generated']")" = "[$gen_ref, $gen_ref]"
ok "hot only: nothing written in the working directory" -- test -z "$(ls -A "$T/hotcwd")"
expect 2 "--dump-logits with --prefix-cache is a usage error" -- "$G" run "$E" --tokens "$LONG" --prefix-cache --dump-logits "$T/pcdump.npz"
ok "no dump written" -- test ! -e "$T/pcdump.npz"
expect 2 "--dump-logits with --prefix-cache-dir is a usage error" -- "$G" run "$E" --tokens "$LONG" --prefix-cache-dir "$T/pc2" --dump-logits "$T/pcdump.npz"
ok "no cache directory created by a refused run" -- test ! -e "$T/pc2"

# MLX export: never into a non-empty directory, never a partial directory
mkdir -p "$T/occupied" && echo x > "$T/occupied/model-00001-of-00002.safetensors"
expect 2 "MLX export refuses a non-empty directory" -- "$G" convert "$T/e2b" --format mlx -o "$T/occupied"
ok "the occupied directory is untouched" -- test "$(ls "$T/occupied")" = "model-00001-of-00002.safetensors"
ok "no temporary directory left behind" -- test -z "$(ls -d "$T"/occupied.tmp.* 2>/dev/null)"

finish
