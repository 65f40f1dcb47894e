#!/bin/bash
# cross_bitwise.sh X86_GEMPACK ARM64_GEMPACK - the same logits on both
# architectures (MODEL.md §9): the fixtures of every variant as an
# unquantized, a 4-bit and an 8-bit pack, under the default and the int8
# kernels, and E2B in the three MX modes, in prefill and decode, dumped by
# each build and compared byte for byte; and the committed float64 goldens
# checked by the arm64 build.
set -u
X="$1" A="$2"
SRC="$(cd "$(dirname "$0")/.." && pwd)"
. "$(dirname "$0")/lib.sh"

for v in e2b e4b 12b 26b-a4b 31b; do
    expect 0 "$v: hf fixture" -- "$X" fixture --variant $v --layout hf -o "$T/$v"
    expect 0 "$v: 4-bit mlx fixture" -- "$X" fixture --variant $v --layout mlx --quant 4 -o "$T/$v-q4"
    expect 0 "$v: 8-bit mlx fixture" -- "$X" fixture --variant $v --layout mlx --quant 8 --group-size 32 -o "$T/$v-q8"
    for f in "" -q4 -q8; do
        expect 0 "$v$f: convert" -- "$X" convert "$T/$v$f" -o "$T/$v$f.gpk"
        for k in best q8; do
            for m in prefill decode; do
                what="$v$f, --kernels $k, --mode $m"
                expect 0 "$what: x86 run" -- "$X" run "$T/$v$f.gpk" --tokens-file "$T/$v/tokens.json" --kernels $k \
                    --mode $m --dump-logits "$T/x.npz"
                expect 0 "$what: arm64 run" -- "$A" run "$T/$v$f.gpk" --tokens-file "$T/$v/tokens.json" --kernels $k \
                    --mode $m --dump-logits "$T/a.npz"
                ok "$what: the same bytes" -- cmp -s "$T/x.npz" "$T/a.npz"
            done
        done
    done
    expect 0 "$v: arm64 golden check against the committed float64 golden" -- \
        "$A" golden check "$T/$v.gpk" "$SRC/golden/data/$v-bf16.npz"
done
# the MLX microscaling modes (arm64 computes them through the scalar definition)
for m in mxfp4 nvfp4 mxfp8; do
    expect 0 "e2b $m: fixture and pack" -- "$X" fixture --variant e2b --layout mlx --quant $m -o "$T/mx-$m"
    expect 0 "e2b $m: convert" -- "$X" convert "$T/mx-$m" -o "$T/mx-$m.gpk"
    for mode in prefill decode; do
        expect 0 "e2b $m, --mode $mode: x86 run" -- "$X" run "$T/mx-$m.gpk" --tokens-file "$T/mx-$m/tokens.json" \
            --mode $mode --dump-logits "$T/x.npz"
        expect 0 "e2b $m, --mode $mode: arm64 run" -- "$A" run "$T/mx-$m.gpk" --tokens-file "$T/mx-$m/tokens.json" \
            --mode $mode --dump-logits "$T/a.npz"
        ok "e2b $m, --mode $mode: the same bytes" -- cmp -s "$T/x.npz" "$T/a.npz"
    done
    expect 0 "e2b $m: arm64 golden check" -- "$A" golden check "$T/mx-$m.gpk" "$SRC/golden/data/e2b-$m.npz"
done
finish
