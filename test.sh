#!/bin/bash
# test.sh - the whole test suite: every meson suite on the normal build, then
# again on an AddressSanitizer + UndefinedBehaviorSanitizer build, then (but
# valgrind's) on a clang build of the portable paths (-Dportable=true: what
# macOS compiles), then the arm64 build under qemu-user (tests/arm64.sh).
# Ends with one summary line counting individual test cases of all four.
set -uo pipefail
cd "$(dirname "$0")"

run_suite() { # BUILDDIR [meson setup args...]
    local dir=$1
    shift
    if [ ! -d "$dir" ]; then
        meson setup "$dir" "$@" >/dev/null || return 1
    fi
    ninja -C "$dir" >/dev/null || return 1
    meson test -C "$dir" --print-errorlogs -v
}

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
status=0
run_suite build || status=1
run_suite build-asan -Db_sanitize=address,undefined -Dc_args=-fno-sanitize-recover=all || status=1
# the portable paths (what a macOS build compiles) with clang, macOS's compiler
if [ ! -d build-portable ]; then
    CC=clang meson setup build-portable -Dportable=true >/dev/null || status=1
fi
{ ninja -C build-portable >/dev/null && meson test -C build-portable --no-suite valgrind --print-errorlogs; } || status=1
bash tests/arm64.sh build/gempack || status=1

# Criterion prints "Synthesis: Tested: N | Passing: P | Failing: F | Crashing: C"
# per executable; the CLI suite prints "N passed, N failed".
read -r passed failed < <(cat build/meson-logs/testlog.txt build-asan/meson-logs/testlog.txt build-portable/meson-logs/testlog.txt \
    build-arm64/meson-logs/testlog.txt build-arm64/meson-logs/retry.txt build-arm64/meson-logs/cross_bitwise.txt 2>/dev/null | awk '
    /Synthesis: Tested:/ { for (i = 1; i <= NF; i++) { if ($i == "Passing:") p += $(i+1); if ($i == "Failing:" || $i == "Crashing:") f += $(i+1) } }
    /^[0-9]+ passed, [0-9]+ failed$/ { p += $1; f += $3 }
    END { print p + 0, f + 0 }')
[ "$status" = 0 ] || [ "$failed" -gt 0 ] || failed=1
echo "gempack: $passed passed, $failed failed"
[ "$status" = 0 ] && [ "$failed" = 0 ]
