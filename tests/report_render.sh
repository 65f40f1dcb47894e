#!/bin/bash
# report_render.sh GEMPACK - the HTML reports rendered by a real browser:
# Debian's chromium, headless, takes a screenshot of each page and the test
# reads the PNG's pixels (not the markup): the verdict banner's color, the
# per-position KL bars and top-1 strip, the per-layer curve.
set -u
G="$1"
. "$(dirname "$0")/lib.sh"
CHROMIUM=$(command -v chromium || true)
if [ -z "$CHROMIUM" ]; then
    echo "report_render: chromium is not installed (setup.sh installs it)" >&2
    exit 1
fi

shot() { # HTML PNG: a 1000x1400 screenshot
    "$CHROMIUM" --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1000,1400 \
        --user-data-dir="$T/chromium" --screenshot="$2" "file://$1" >/dev/null 2>&1
}

# colors: how many pixels of each #rrggbb the PNG holds (stdlib only: zlib and the PNG filters)
count() { # PNG COLOR...
    python3 - "$@" <<'PY'
import struct, sys, zlib
data = open(sys.argv[1], "rb").read()
assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
pos, idat, w = 8, b"", 0
while pos < len(data):
    n, kind = struct.unpack(">I4s", data[pos:pos + 8])
    body = data[pos + 8:pos + 8 + n]
    if kind == b"IHDR":
        w, h, depth, ctype = struct.unpack(">IIBB", body[:10])
        assert depth == 8 and ctype in (2, 6), (depth, ctype)
        bpp = 3 if ctype == 2 else 4
    elif kind == b"IDAT":
        idat += body
    pos += 12 + n
raw, stride, prev, counts = zlib.decompress(idat), w * bpp, bytearray(w * bpp), {}
want = {bytes.fromhex(c.lstrip("#")): c for c in sys.argv[2:]}
for y in range(h):
    f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
    for i in range(stride):
        a = line[i - bpp] if i >= bpp else 0
        b, c = prev[i], prev[i - bpp] if i >= bpp else 0
        if f == 1: line[i] = (line[i] + a) & 255
        elif f == 2: line[i] = (line[i] + b) & 255
        elif f == 3: line[i] = (line[i] + (a + b) // 2) & 255
        elif f == 4:
            p = a + b - c; pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
            line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
    for x in range(w):
        px = bytes(line[x * bpp:x * bpp + 3])
        if px in want:
            counts[want[px]] = counts.get(want[px], 0) + 1
    prev = line
print(" ".join(str(counts.get(c, 0)) for c in sys.argv[2:]))
PY
}

PASS=2e7d32 FAIL=c62828 KL=1565c0 OK=43a047 MISS=e53935 HIDDEN=ef6c00
expect 0 "fixture" -- "$G" fixture --variant e2b -o "$T/a"
expect 0 "4-bit pack" -- "$G" convert "$T/a" --bits 4 --align 64 -o "$T/a4.gpk"
expect 0 "compare --report" -- "$G" compare "$T/a" "$T/a4.gpk" --tokens-file "$T/a/tokens.json" --report "$T/pass.html"
ok "the page fetches nothing" -- sh -c '! grep -Eq "(src|href)=\"(https?:)?//" "$1"' - "$T/pass.html"
shot "$T/pass.html" "$T/pass.png"
ok "chromium rendered the page" -- test -s "$T/pass.png"
read -r p f kl okc miss hid <<<"$(count "$T/pass.png" $PASS $FAIL $KL $OK $MISS $HIDDEN)"
echo "pass page: banner $p (fail $f), KL bars $kl, top-1 $okc (miss $miss), hidden curve $hid pixels"
ok "a green PASS banner" -- test "$p" -gt 40000 -a "$f" -lt 100
ok "KL bars drawn" -- test "$kl" -gt 500
ok "the top-1 strip: every position agrees" -- test "$okc" -gt 10000 -a "$miss" -eq 0
ok "the per-layer curve drawn" -- test "$hid" -gt 500

expect 1 "compare --report over a threshold" -- "$G" compare "$T/a" "$T/a4.gpk" --tokens-file "$T/a/tokens.json" \
    --kld-mean 1e-9 --report "$T/fail.html"
shot "$T/fail.html" "$T/fail.png"
read -r p f <<<"$(count "$T/fail.png" $PASS $FAIL)"
ok "a red FAIL banner" -- test "$f" -gt 40000 -a "$p" -lt 100

# golden check --report: the per-position page against a committed golden
expect 0 "golden check --report" -- "$G" golden check "$T/a" "$(dirname "$0")/../golden/data/e2b-bf16.npz" --report "$T/golden.html"
shot "$T/golden.html" "$T/golden.png"
read -r p kl okc hid <<<"$(count "$T/golden.png" $PASS $KL $OK $HIDDEN)"
ok "the golden page: banner, bars, strip, no layer curve" -- test "$p" -gt 40000 -a "$kl" -gt 100 -a "$okc" -gt 10000 -a "$hid" -eq 0

# convert --eval --report: the same page with the per-tensor table
expect 0 "convert --eval --report" -- "$G" convert "$T/a" --bits 4 --align 64 --eval --report "$T/convert.html" -o "$T/b.gpk"
ok "the tensor table" -- grep -q "<td>layers.3.mlp.down_proj.weight</td><td>quantize</td><td>affine</td><td>4</td><td>64</td>" "$T/convert.html"
shot "$T/convert.html" "$T/convert.png"
read -r p kl <<<"$(count "$T/convert.png" $PASS $KL)"
ok "the convert page renders" -- test "$p" -gt 40000 -a "$kl" -gt 500
# eval --report: the candidates' curves, category bars and frontier points in their colors
C1=3949ab C2=fb8c00
printf '@@ category prose\nThe quick brown fox jumps over the lazy dog, again and again, until the dog gets up.\n@@ category code\nint main(void) { return 0; }\n' >"$T/t.txt"
expect 0 "eval --report" -- "$G" eval "$T/a" "$T/a4.gpk" "$T/b.gpk" --text-file "$T/t.txt" --ctx 16 --report "$T/eval.html"
ok "the eval page fetches nothing" -- sh -c '! grep -Eq "(src|href)=\"(https?:)?//" "$1"' - "$T/eval.html"
shot "$T/eval.html" "$T/eval.png"
read -r p c1 c2 <<<"$(count "$T/eval.png" $PASS $C1 $C2)"
echo "eval page: banner $p, candidate 1 $c1, candidate 2 $c2 pixels"
ok "the eval page: banner, both candidates drawn" -- test "$p" -gt 40000 -a "$c1" -gt 300 -a "$c2" -gt 300
mkdir -p "$(dirname "$G")/meson-logs" && cp "$T/pass.png" "$(dirname "$G")/meson-logs/report-compare.png" &&
    cp "$T/convert.png" "$(dirname "$G")/meson-logs/report-convert.png" &&
    cp "$T/eval.png" "$(dirname "$G")/meson-logs/report-eval.png"
finish
