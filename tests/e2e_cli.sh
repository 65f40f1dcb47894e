#!/bin/bash
# e2e_cli.sh GEMPACK - the command line as users script it: exit codes,
# --help on every command, JSON output, determinism of fixtures.
set -u
G="$1"
T=$(mktemp -d "${TMPDIR:-/tmp}/gempack-e2e-XXXXXX")
trap 'rm -rf "$T"' EXIT
pass=0 fail=0

# expect CODE DESCRIPTION -- COMMAND...
expect() {
    local want=$1 what=$2
    shift 3
    "$@" >"$T/out" 2>"$T/err"
    local got=$?
    if [ "$got" = "$want" ]; then
        pass=$((pass + 1))
    else
        fail=$((fail + 1))
        echo "FAIL: $what: exit $got, expected $want"
        sed 's/^/    /' "$T/err" | head -5
    fi
}

# ok DESCRIPTION -- CONDITION...
ok() {
    local what=$1
    shift 2
    if "$@"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: $what"; fi
}

json_field() { # FILE EXPR: prints a field of a JSON document
    python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print($2)" "$1"
}

expect 0 "top-level --help" -- "$G" --help
expect 2 "no command" -- "$G"
expect 2 "unknown command" -- "$G" frobnicate
expect 0 "--version" -- "$G" --version
for c in check inspect fixture convert verify; do
    expect 0 "$c --help" -- "$G" $c --help
    ok "$c --help names its usage" -- grep -q "usage: gempack $c" "$T/out"
done

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

# convert -> verify -> inspect; a flipped byte is caught; no partial output on failure
expect 0 "convert e2b to a 4-bit pack" -- "$G" convert "$T/e2b" --bits 4 --align 64 -o "$T/e2b-q4.gpk"
expect 0 "verify the pack" -- "$G" verify "$T/e2b-q4.gpk"
expect 0 "inspect the pack --json" -- "$G" inspect --json "$T/e2b-q4.gpk"
ok "pack manifest records bits" -- test "$(json_field "$T/out" "d['manifest']['options']['bits']")" = 4
expect 0 "convert again" -- "$G" convert "$T/e2b" --bits 4 --align 64 -o "$T/e2b-q4-again.gpk"
ok "packs byte-identical" -- cmp -s "$T/e2b-q4.gpk" "$T/e2b-q4-again.gpk"
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

echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
