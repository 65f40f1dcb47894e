#!/bin/bash
# crash_safety.sh GEMPACK - an interrupted or failed conversion never leaves
# anything valid-looking under the output name, and never touches the source:
#  1. SIGKILL at crash points spread over a whole conversion (GEMPACK_CRASH_AT,
#     core/fileio.h: before each write, fsync and rename, and after the rename),
#     for a pack and for an MLX export directory;
#  2. SIGKILL from outside at timed points;
#  3. a full disk (RLIMIT_FSIZE): a clear message, exit 2, no output, no temp file.
# After a kill, the output name must be absent, or hold the complete output
# (byte-identical to an uninterrupted run, and verified). Where the filesystem
# has unnamed temporary files (O_TMPFILE), a killed pack conversion leaves no
# temporary file at all.
set -u
G="$1"
. "$(dirname "$0")/lib.sh"

"$G" fixture --variant e2b -o "$T/src" >/dev/null || { echo "FAIL: fixture"; echo "0 passed, 1 failed"; exit 1; }
(cd "$T/src" && sha256sum -- *) >"$T/src.sha256"
"$G" convert "$T/src" -o "$T/ref.gpk" --bits 4 >/dev/null
"$G" convert "$T/src" -o "$T/ref-mlx" --bits 4 --format mlx >/dev/null
ok "reference pack verifies" -- "$G" verify "$T/ref.gpk" >/dev/null

# The state after an interrupted run writing OUT (a .gpk file or an MLX directory):
# absent, or complete and identical to REF. Leftover temporary names are counted
# and removed; nothing else may appear in the directory.
outcome() { # OUT REF
    local out=$1 ref=$2 extra
    extra=$(cd "$T/w" && ls -A | grep -v -e '^out\.gpk\.tmp\.[0-9A-Za-z.]*$' -e '^out-mlx\.tmp\.[0-9A-Za-z]*$' \
        -e "^$(basename "$out")\$")
    [ -z "$extra" ] || { echo "unexpected files: $extra"; return 1; }
    leftovers=$((leftovers + $(cd "$T/w" && ls -A | grep -c '\.tmp\.')))
    if [ -e "$out" ]; then
        complete=$((complete + 1))
        if [ -d "$ref" ]; then diff -r "$ref" "$out" >/dev/null; else cmp -s "$ref" "$out" && "$G" verify "$out" >/dev/null; fi
    else
        absent=$((absent + 1))
    fi
}

crash_series() { # NAME OUT REF CONVERT-ARGS...: kill at points 1, 2, 3, ... until a run completes
    local name=$1 out=$2 ref=$3 n=1 step=1 rc last=0
    shift 3
    complete=0 absent=0 leftovers=0
    local tried=0
    while :; do
        rm -rf "$T/w" && mkdir "$T/w"
        rc=$( { GEMPACK_CRASH_AT=$n "$G" convert "$T/src" -o "$out" "$@" >/dev/null 2>&1; echo $?; } 2>/dev/null)
        tried=$((tried + 1))
        if [ $rc = 0 ]; then
            last=$n
            break
        fi
        ok "$name: killed at point $n (exit $rc)" -- test $rc = 137
        ok "$name: after a kill at point $n, nothing valid-looking under the output name" -- outcome "$out" "$ref"
        [ $n -ge 24 ] && step=7
        n=$((n + step))
    done
    for ((k = last - 1; k > last - step - 1 && k > 0; k--)); do # the last points: commit, rename, after
        rm -rf "$T/w" && mkdir "$T/w"
        rc=$( { GEMPACK_CRASH_AT=$k "$G" convert "$T/src" -o "$out" "$@" >/dev/null 2>&1; echo $?; } 2>/dev/null)
        tried=$((tried + 1))
        ok "$name: killed at point $k or completed (exit $rc)" -- test $rc = 137 -o $rc = 0
        ok "$name: after point $k, absent or complete" -- outcome "$out" "$ref"
    done
    echo "$name: $tried kill points (every point up to 24, then every 7th, then the last $step): output absent $absent, complete $complete; temporary files left by kills: $leftovers"
    ok "$name: some kills left no output" -- test $absent -gt 0
    ok "$name: the last point leaves the complete output" -- test $complete -gt 0
}

# does this build write unnamed temporaries here (Linux, not -Dportable, a filesystem with O_TMPFILE)?
unnamed_temps() {
    [ -z "${GEMPACK_PORTABLE:-}" ] &&
        python3 -c 'import os, sys; os.close(os.open(sys.argv[1], os.O_TMPFILE | os.O_WRONLY))' "$T" 2>/dev/null
}
crash_series pack "$T/w/out.gpk" "$T/ref.gpk" --bits 4
if unnamed_temps; then
    ok "pack: no kill left a temporary file (unnamed temporary files)" -- test $leftovers = 0
fi
crash_series mlx "$T/w/out-mlx" "$T/ref-mlx" --bits 4 --format mlx

# SIGKILL from outside, at timed points over a run
complete=0 absent=0 leftovers=0
for ms in 0 1 2 3 5 8 12 16 20 25 30 40 50 70 100; do
    rm -rf "$T/w" && mkdir "$T/w"
    "$G" convert "$T/src" -o "$T/w/out.gpk" --bits 4 >/dev/null 2>&1 &
    pid=$!
    sleep "$(printf '0.%03d' "$ms")"
    kill -KILL $pid 2>/dev/null
    wait $pid 2>/dev/null
    ok "external kill after $ms ms: absent or complete" -- outcome "$T/w/out.gpk" "$T/ref.gpk"
done
echo "external kills: output absent $absent, complete $complete; temporary files left: $leftovers"
if unnamed_temps; then
    ok "external kills left no temporary file (unnamed temporary files)" -- test $leftovers = 0
fi

# A full disk: the file-size limit hit at several points of the pack and of an
# MLX export (the last limit: half the size of the largest output file)
half=$(( $(stat -c %s "$T/ref.gpk" "$T"/ref-mlx/* | sort -n | tail -1) / 2048 ))
for kb in 1 16 256 $half; do
    for fmt in gpk mlx; do
        rm -rf "$T/w" && mkdir "$T/w"
        if [ $fmt = gpk ]; then out="$T/w/out.gpk"; args=(); else out="$T/w/out-mlx"; args=(--format mlx); fi
        (ulimit -f $kb; exec "$G" convert "$T/src" -o "$out" --bits 4 "${args[@]}") >/dev/null 2>"$T/err"
        rc=$?
        ok "file-size limit $kb KiB, $fmt: exit 2 (got $rc)" -- test $rc = 2
        ok "file-size limit $kb KiB, $fmt: the message says why" -- grep -q "write failed: File too large" "$T/err"
        ok "file-size limit $kb KiB, $fmt: nothing left in the output directory" -- test -z "$(ls -A "$T/w")"
    done
done

ok "the source is untouched" -- bash -c "cd '$T/src' && sha256sum --quiet -c '$T/src.sha256'"
finish
