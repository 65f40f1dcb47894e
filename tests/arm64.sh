#!/bin/bash
# arm64.sh X86_GEMPACK - the arm64 build, run under qemu-user: cross-built
# with Debian's multiarch packages, the unit, kernels, runner and golden
# suites (every Criterion suite) run as arm64 executables, then
# cross_bitwise.sh compares its logits with the x86 build's. setup.sh
# installs what this needs (as root): the cross compiler, qemu-user and its
# binfmt registration, the arm64 libraries, and Criterion's arm64 runtime
# unpacked into build-arm64-deps/ (its package cannot be installed beside the
# amd64 one).
set -uo pipefail
cd "$(dirname "$0")/.."
deps=$PWD/build-arm64-deps
lib=$deps/root/usr/lib/aarch64-linux-gnu
if ! command -v aarch64-linux-gnu-gcc >/dev/null || [ ! -e "$lib/libcriterion.so.3" ] ||
    ! grep -qs enabled /proc/sys/fs/binfmt_misc/qemu-aarch64; then
    echo "arm64: the cross toolchain, Criterion's arm64 runtime or qemu's binfmt registration is missing: run setup.sh as root" >&2
    exit 1
fi
mkdir -p "$deps/pkgconfig"
cat >"$deps/cross.ini" <<INI
[binaries]
c = 'aarch64-linux-gnu-gcc'
ar = 'aarch64-linux-gnu-ar'
strip = 'aarch64-linux-gnu-strip'
pkgconfig = 'aarch64-linux-gnu-pkg-config'

[properties]
needs_exe_wrapper = false

[host_machine]
system = 'linux'
cpu_family = 'aarch64'
cpu = 'armv8-a'
endian = 'little'
INI
cat >"$deps/pkgconfig/criterion.pc" <<PC
libdir=$lib
Name: criterion
Description: Criterion's arm64 runtime, unpacked
Version: 2.4.1
Libs: -L\${libdir} -Wl,-rpath-link,\${libdir} -lcriterion
Cflags: -I$deps/root/usr/include
PC
if [ ! -d build-arm64 ]; then
    meson setup build-arm64 --cross-file "$deps/cross.ini" -Dpkg_config_path="$deps/pkgconfig" -Dblas=disabled \
        -Dc_args=-DTH_TIME_SCALE=5 \
        >/dev/null || exit 1
fi
ninja -C build-arm64 >/dev/null || exit 1
export LD_LIBRARY_PATH=$lib
status=0
suites=(--suite core --suite quant --suite kernels --suite ingest --suite converter --suite runner --suite golden
    --suite fixtures)
rm -f build-arm64/meson-logs/retry.*
if ! meson test -C build-arm64 --print-errorlogs --timeout-multiplier 5 "${suites[@]}"; then
    # qemu-user can deadlock in the child of a fork from a multi-threaded
    # process, which is how Criterion starts each test's worker: the test
    # executable then hangs until its timeout, or Criterion gives up with
    # "Could not spawn test instance". When every failure is of that kind,
    # those executables run once more (logged in retry.txt); any other failure stands.
    again=$(python3 - build-arm64/meson-logs/testlog.json <<'PY'
import json, sys
bad = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
bad = [d for d in bad if d["result"] not in ("OK", "SKIP")]
spawn = lambda d: d["result"] == "TIMEOUT" or "Could not spawn test instance" in (d.get("stderr") or "")
if bad and all(spawn(d) for d in bad):
    print(" ".join(d["name"].split(" / ")[-1] for d in bad))
PY
)
    if [ -n "$again" ]; then
        echo "arm64: $again hung or could not spawn a worker under qemu-user; running it once more" >&2
        # shellcheck disable=SC2086
        meson test -C build-arm64 --print-errorlogs --timeout-multiplier 5 --logbase retry $again || status=1
    else
        status=1
    fi
fi
bash tests/cross_bitwise.sh "$1" build-arm64/gempack | tee build-arm64/meson-logs/cross_bitwise.txt
[ "${PIPESTATUS[0]}" = 0 ] || status=1
exit $status
