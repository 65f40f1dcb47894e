#!/bin/bash
# limits.sh GEMPACK - inputs that declare absurd sizes (tests/make_limits.py)
# are rejected with a message naming the limit, exit 2, before any large
# allocation: the peak RSS of each run stays under 256 MiB (ASan included)
# while the inputs declare gigabytes to terabytes.
set -u
G="$1"
. "$(dirname "$0")/lib.sh"
python3 "$(dirname "$0")/make_limits.py" "$T/in"
"$G" fixture --variant e2b -o "$T/tera" >/dev/null 2>&1
cp "$T/in/tera.safetensors" "$T/tera/model.safetensors"

case_() { # DESCRIPTION MESSAGE-REGEX -- COMMAND...
    local what=$1 re=$2
    shift 3
    /usr/bin/time -f '%M' -o "$T/rss" "$@" >/dev/null 2>"$T/err"
    local rc=$? rss
    rss=$(tail -1 "$T/rss")
    if [ $rc = 2 ] && grep -Eq "$re" "$T/err" && [ "$rss" -lt 262144 ]; then
        pass=$((pass + 1))
        printf '  %-44s exit %d, peak RSS %6d KiB: %s\n' "$what" $rc "$rss" "$(grep -E "$re" "$T/err" | head -1 | cut -c1-120)"
    else
        fail=$((fail + 1))
        echo "FAIL: $what: exit $rc, peak RSS $rss KiB"
        sed 's/^/    /' "$T/err" | head -3
    fi
}

case_ "dims whose product overflows" "element count overflows 64 bits" -- "$G" inspect "$T/in/overflow.safetensors"
case_ "a 10^12-element tensor in a 96-byte file" "need exactly 4000000000096 \(truncated\)" -- "$G" check "$T/tera"
case_ "a 1 GiB header length" "header length 1073741824 exceeds" -- "$G" inspect "$T/in/gib-header.safetensors"
case_ "a 1 TiB header length" "header length 1099511627776 exceeds" -- "$G" inspect "$T/in/tib-header.safetensors"
case_ "a million tensors (70 MB header)" "above the limit of 1000000" -- "$G" inspect "$T/in/million.safetensors"
case_ "100,001 tensors" "above the limit of" -- "$G" inspect "$T/in/lakh.safetensors"
case_ "config.json nested 100,000 deep" "nesting too deep" -- "$G" check "$T/in/nested"
case_ "a GGUF claiming 2^40 tensors" "1099511627776 tensors, above the limit" -- "$G" inspect "$T/in/tera-count.gguf"
case_ "a GGUF array of 2^40 elements" "array of 1099511627776 u8 elements .* larger than the file" -- "$G" check "$T/in/tera-array.gguf"
case_ "a 4 TiB GGUF tensor in a 65-byte file" "4398046511104 bytes .* \(truncated\)" -- "$G" run "$T/in/tera-tensor.gguf" --tokens 2
finish
