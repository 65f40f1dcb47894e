#!/bin/bash
# setup.sh - as root on a fresh Debian bookworm machine: install the Debian
# packages gempack needs, build it, and run the main job on an embedded
# default: a tiny E2B fixture -> check -> convert -> run -> golden check against
# the committed float64 reference logits; then a 4-bit pack, verified.
set -euo pipefail
cd "$(dirname "$0")"

packages=(build-essential clang meson ninja-build pkg-config libjson-c-dev libzip-dev zlib1g-dev
          libcriterion-dev libopenblas-dev python3 python3-numpy valgrind time
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
