# lib.sh - sourced by the end-to-end scripts: a scratch directory $T (removed
# on exit), pass/fail counting and the summary line test.sh adds up.
T=$(mktemp -d "${TMPDIR:-/tmp}/gempack-$(basename "$0" .sh)-XXXXXX")
trap 'rm -rf "$T"' EXIT
pass=0 fail=0

# expect CODE DESCRIPTION -- COMMAND...: the command's exit code; its output in
# $T/out and $T/err. A command that runs past EXPECT_TIMEOUT seconds (default
# 900) is killed and fails the check (exit 124).
expect() {
    local want=$1 what=$2
    shift 3
    timeout "${EXPECT_TIMEOUT:-900}" "$@" >"$T/out" 2>"$T/err"
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

# the summary line, and the script's status
finish() {
    echo "$pass passed, $fail failed"
    [ $fail = 0 ]
}
