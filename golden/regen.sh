#!/bin/bash
# regen.sh BUILD_DIR - regenerate the committed goldens in golden/data/.
#
# For every topology (e2b, e4b, 12b, 26b-a4b, 31b): the bf16 fixture (HF layout;
# the MLX, text-only and QAT layouts of the same seed hold the same model) and
# the MLX 4-bit and 8-bit fixtures, each run through golden/reference.py in
# float64 with exact RoPE tables. The fixtures are made by `gempack fixture`
# (deterministic on every machine), so only the logits are committed.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build}
gempack="$build/gempack"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/gempack-regen-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
for v in e2b e4b 12b 26b-a4b 31b; do
    for kind in bf16 q4 q8; do
        case $kind in
            bf16) args=(--layout hf) ;;
            q4) args=(--layout mlx --quant 4) ;;
            q8) args=(--layout mlx --quant 8) ;;
        esac
        "$gempack" fixture --variant "$v" "${args[@]}" -o "$tmp/$v-$kind" 2>/dev/null
        /usr/bin/python3 "$here/reference.py" "$tmp/$v-$kind" --rope-tables f64 -o "$here/data/$v-$kind.npz"
    done
done
# the MLX microscaling modes: E2B (and the 26B-A4B, whose routers stay affine 8-bit)
for vm in e2b:mxfp4 e2b:nvfp4 e2b:mxfp8 26b-a4b:mxfp4; do
    v=${vm%%:*} m=${vm#*:}
    "$gempack" fixture --variant "$v" --layout mlx --quant "$m" -o "$tmp/$v-$m" 2>/dev/null
    /usr/bin/python3 "$here/reference.py" "$tmp/$v-$m" --rope-tables f64 -o "$here/data/$v-$m.npz"
done
# Google's QAT formats: compressed-tensors int4 (26B-A4B experts int8) and GGUF Q4_0 for every
# topology, GGUF Q8_0 for two
for vf in e2b:ct-w4a16 e4b:ct-w4a16 12b:ct-w4a16 26b-a4b:ct-w4a16 31b:ct-w4a16 \
          e2b:gguf-q4_0 e4b:gguf-q4_0 12b:gguf-q4_0 26b-a4b:gguf-q4_0 31b:gguf-q4_0 e2b:gguf-q8_0 26b-a4b:gguf-q8_0; do
    v=${vf%%:*} f=${vf#*:}
    "$gempack" fixture --variant "$v" --format "$f" -o "$tmp/$v-$f" 2>/dev/null
    src="$tmp/$v-$f"
    [ -f "$src/model.gguf" ] && src="$src/model.gguf"
    /usr/bin/python3 "$here/reference.py" "$src" --rope-tables f64 -o "$here/data/$v-$f.npz"
done
# llama-quantize presets (types per tensor as llama.cpp gives them for gemma4, random valid blocks),
# dequantized by reference.py's own ggml code: E2B in five presets, the 26B-A4B with MXFP4 experts
# (tests/test_runner.c's gguf_presets).
for vf in e2b:gguf-q4_k_m e2b:gguf-q5_k_m e2b:gguf-q6_k e2b:gguf-iq4_xs e2b:gguf-iq2_xxs \
          26b-a4b:gguf-q4_k_m 26b-a4b:gguf-mxfp4; do
    v=${vf%%:*} f=${vf#*:}
    "$gempack" fixture --variant "$v" --format "$f" -o "$tmp/$v-$f" 2>/dev/null
    /usr/bin/python3 "$here/reference.py" "$tmp/$v-$f/model.gguf" --rope-tables f64 -o "$here/data/$v-$f.npz"
done
