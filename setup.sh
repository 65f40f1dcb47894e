#!/bin/bash
# setup.sh - as root on a fresh Debian bookworm machine: install the Debian
# packages gempack needs, build it, and run the main job on an embedded
# default: a tiny E2B fixture -> check -> convert -> run -> golden check against
# the committed float64 reference logits; then a 4-bit pack, verified.
set -euo pipefail
cd "$(dirname "$0")"

packages=(build-essential meson ninja-build pkg-config libjson-c-dev libzip-dev zlib1g-dev
          libcriterion-dev libopenblas-dev python3 python3-numpy valgrind time)
if [ "$(id -u)" = 0 ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${packages[@]}" >/dev/null
else
    echo "setup.sh: not root, skipping apt-get install of: ${packages[*]}" >&2
fi

if [ -d build ]; then
    meson setup --reconfigure build >/dev/null
else
    meson setup build >/dev/null
fi
ninja -C build

demo=build/demo
rm -rf "$demo"
./build/gempack fixture --variant e2b --layout hf -o "$demo/e2b"
./build/gempack check "$demo/e2b"
./build/gempack convert "$demo/e2b" -o "$demo/e2b.gpk" | tail -n 2
./build/gempack run "$demo/e2b.gpk" --tokens-file "$demo/e2b/tokens.json" --generate 8
./build/gempack golden check "$demo/e2b.gpk" golden/data/e2b-bf16.npz
./build/gempack convert "$demo/e2b" --bits 4 -o "$demo/e2b-q4.gpk" | tail -n 1
./build/gempack verify "$demo/e2b-q4.gpk"
