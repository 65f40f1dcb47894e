#!/bin/bash
# hardening.sh GEMPACK [SANITIZE] - the places around the readers and writers,
# tried as a hostile user would: one section per class. SANITIZE is meson's
# b_sanitize: a sanitized binary cannot start under a virtual-memory limit
# (its shadow memory), so the two checks that set one run without sanitizers.
#  1. an output that is, or resolves to, a file the command reads is refused
#  2. outputs are regular files only; temporaries never follow planted links;
#     stale temporaries of killed writers are cleaned from a cache directory
#  3. no input ever blocks: FIFOs are refused, never waited on
#  4. npz members are CRC-checked and read only up to what they must hold
#  5. a prefix-cache entry's size is checked before anything is allocated
#  6. a pack holds exactly the tensors its config uses
#  7. invalid settings are errors naming what was typed and the real limit
#  8. a memory limit never hangs a command
#  9. errors while binding weights or sizing caches name the model
set -u
G=$(realpath "$1")
HERE=$(cd "$(dirname "$0")" && pwd)
EXPECT_TIMEOUT=20 # the point of several checks is that nothing hangs
. "$HERE/lib.sh"
said() { grep -qF -- "$1" "$T/err"; } # the last command's stderr holds this text
rss_kib() { /usr/bin/time -f '%M' -o "$T/rss" "$@" >/dev/null 2>"$T/err"; echo $? >"$T/rc"; tail -1 "$T/rss"; }

"$G" fixture --variant e2b -o "$T/src" >/dev/null 2>&1
"$G" convert "$T/src" -o "$T/v.gpk" >/dev/null
(cd "$T/src" && sha256sum -- *) >"$T/src.sha256"
cp "$T/v.gpk" "$T/v.gpk.orig"
unchanged() { bash -c "cd '$T/src' && sha256sum --quiet -c '$T/src.sha256'" && cmp -s "$T/v.gpk" "$T/v.gpk.orig"; }

echo "# 1. never destroy an input"
expect 2 "convert -o onto a source shard" -- "$G" convert "$T/src" -o "$T/src/model.safetensors"
ok "... names both paths" -- said "refusing to write $T/src/model.safetensors: it is $T/src/model.safetensors"
expect 2 "convert -o onto config.json" -- "$G" convert "$T/src" -o "$T/src/config.json"
ok "... names config.json" -- said "it is $T/src/config.json, which this command reads"
ln -s src/model.safetensors "$T/shard-link.gpk"
expect 2 "convert -o a symlink to a source shard" -- "$G" convert "$T/src" -o "$T/shard-link.gpk"
ok "... names the link and its target" -- said "refusing to write $T/shard-link.gpk: it is $T/src/model.safetensors"
ln "$T/src/model.safetensors" "$T/hardlink.gpk"
expect 2 "convert -o a hard link of a source shard" -- "$G" convert "$T/src" -o "$T/hardlink.gpk"
expect 2 "run --dump-logits onto the pack being run" -- "$G" run "$T/v.gpk" --tokens 2,3 --dump-logits "$T/v.gpk"
ok "... names both paths" -- said "refusing to write $T/v.gpk: it is $T/v.gpk, which this command reads"
expect 2 "run --dump-logits onto the tokens file" -- "$G" run "$T/v.gpk" --tokens-file "$T/src/tokens.json" \
    --dump-logits "$T/src/tokens.json"
expect 2 "golden make -o onto the pack" -- "$G" golden make "$T/v.gpk" --tokens 2,3 -o "$T/v.gpk"
expect 2 "run a directory, --dump-logits onto its shard" -- "$G" run "$T/src" --tokens 2,3 \
    --dump-logits "$T/src/model.safetensors"
expect 2 "fixture --like onto its own config's directory" -- "$G" fixture --like "$T/src/config.json" -o "$T/src"
ok "... refused: not an empty directory" -- said "$T/src exists and is not an empty directory"
expect 2 "compare --report onto model B" -- "$G" compare "$T/src" "$T/v.gpk" --tokens 2,3 --report "$T/v.gpk"
ok "... names both paths" -- said "refusing to write $T/v.gpk: it is $T/v.gpk, which this command reads"
expect 2 "convert --eval --report onto a source shard" -- "$G" convert "$T/src" --bits 4 --eval \
    --report "$T/src/model.safetensors" -o "$T/never.gpk"
ok "... refused before any work" -- test ! -e "$T/never.gpk"
ok "... as an input" -- said "refusing to write $T/src/model.safetensors"
expect 2 "golden check --report onto the model" -- "$G" golden check "$T/v.gpk" \
    "$(dirname "$0")/../golden/data/e2b-bf16.npz" --report "$T/v.gpk"
ok "... refused as an input" -- said "refusing to write $T/v.gpk: it is $T/v.gpk, which this command reads"
ok "the inputs are untouched" -- unchanged
expect 0 "a fresh output beside the inputs is fine" -- "$G" run "$T/v.gpk" --tokens 2,3 --dump-logits "$T/d.npz"

echo "# 2. outputs are regular files; temporaries follow no link"
mknod "$T/devnull" c 1 3 2>/dev/null && {
    expect 2 "convert -o a character device" -- "$G" convert "$T/src" -o "$T/devnull"
    ok "... says what it is" -- said "exists and is a character device"
    ok "... the device is still a device" -- test -c "$T/devnull"
}
mkfifo "$T/fifo-out"
expect 2 "run --dump-logits onto a FIFO" -- "$G" run "$T/v.gpk" --tokens 2,3 --dump-logits "$T/fifo-out"
ok "... the FIFO is still a FIFO" -- test -p "$T/fifo-out"
python3 -c 'import socket, sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])' "$T/sock"
expect 2 "golden make -o a socket" -- "$G" golden make "$T/v.gpk" --tokens 2,3 -o "$T/sock"
mkdir "$T/adir"
expect 2 "convert -o an existing directory (pack)" -- "$G" convert "$T/src" -o "$T/adir"
ok "... says it is a directory" -- said "exists and is a directory"
echo "victim" >"$T/victim"
# the link planted at the name the old writer derived from its pid (exec keeps the pid)
expect 0 "convert with a link planted at OUT.tmp.<pid>" -- bash -c \
    "ln -s '$T/victim' '$T/out.gpk.tmp.'\$\$ && exec '$G' convert '$T/src' -o '$T/out.gpk'"
ok "... the link's target is untouched" -- test "$(cat "$T/victim")" = victim
for mode in unnamed named; do
    rm -f "$T"/w.gpk*
    if [ $mode = named ]; then export GEMPACK_NO_TMPFILE=1; fi
    expect 0 "convert through a $mode temporary" -- "$G" convert "$T/src" -o "$T/w.gpk"
    ok "... output identical to the reference" -- cmp -s "$T/w.gpk" "$T/v.gpk"
    ok "... no temporary left" -- test -z "$(ls "$T" | grep 'w\.gpk\.tmp')"
    unset GEMPACK_NO_TMPFILE
done
mkdir -p "$T/cache"
touch -d '2 hours ago' "$T/cache/aa.gpkc.tmp.12345.0"
touch "$T/cache/bb.gpkc.tmp.12345.1"
expect 0 "run with a cache directory holding temporaries" -- "$G" run "$T/v.gpk" --tokens-file "$T/src/tokens.json" \
    --prefix-cache-dir "$T/cache" --prefix-block 8
ok "... the stale temporary of a killed writer is removed" -- test ! -e "$T/cache/aa.gpkc.tmp.12345.0"
ok "... a fresh one (a live writer's) is kept" -- test -e "$T/cache/bb.gpkc.tmp.12345.1"

echo "# 3. never block on an input"
mkfifo "$T/p"
expect 2 "verify a FIFO" -- "$G" verify "$T/p"
ok "... says it is a FIFO" -- said "$T/p: is a FIFO, not a regular file"
expect 2 "inspect a FIFO" -- "$G" inspect "$T/p"
expect 2 "run --tokens-file a FIFO" -- "$G" run "$T/v.gpk" --tokens-file "$T/p"
expect 2 "run a FIFO as the model" -- "$G" run "$T/p" --tokens 2
expect 2 "golden check a FIFO golden" -- "$G" golden check "$T/v.gpk" "$T/p"
mkdir "$T/fifocfg"
mkfifo "$T/fifocfg/config.json"
expect 2 "check a directory whose config.json is a FIFO" -- "$G" check "$T/fifocfg"
for f in "$T"/cache/*.gpkc; do rm "$f"; mkfifo "$f"; done # every entry: whichever block is looked up first
expect 0 "a FIFO in the prefix-cache directory is ignored, not read" -- "$G" run "$T/v.gpk" \
    --tokens-file "$T/src/tokens.json" --prefix-cache-dir "$T/cache" --prefix-block 8
ok "... with a warning naming it" -- said "is a FIFO, not a regular file"

echo "# 4. an archive's claims are verified"
"$G" golden make "$T/v.gpk" --tokens-file "$T/src/tokens.json" -o "$T/g.npz" 2>/dev/null
python3 - "$T/g.npz" "$T/flip.npz" <<'PY'
import sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
raw = bytearray(open(sys.argv[1], "rb").read())
info = z.getinfo("logits.npy")
# the member's data: after its local header (30 bytes + name + extra)
n, x = int.from_bytes(raw[info.header_offset + 26:info.header_offset + 28], "little"), \
       int.from_bytes(raw[info.header_offset + 28:info.header_offset + 30], "little")
raw[info.header_offset + 30 + n + x + 200] ^= 0x04
open(sys.argv[2], "wb").write(raw)
PY
expect 0 "golden check of the intact golden" -- "$G" golden check "$T/v.gpk" "$T/g.npz"
expect 2 "golden check: one flipped bit in logits.npy" -- "$G" golden check "$T/v.gpk" "$T/flip.npz"
ok "... reported as corruption (CRC), not a regression" -- said "logits.npy: corrupt: CRC-32"
expect 2 "inspect: the same flipped bit" -- "$G" inspect "$T/flip.npz"
python3 - "$T/g.npz" "$T/bomb.npz" <<'PY'
import sys, zipfile, zlib
src = zipfile.ZipFile(sys.argv[1])
with zipfile.ZipFile(sys.argv[2], "w") as out:
    for name in ("tokens.npy", "logits.npy"):
        out.writestr(name, src.read(name))
    info = zipfile.ZipInfo("meta.json")
    info.compress_type = zipfile.ZIP_DEFLATED
    with out.open(info, "w", force_zip64=True) as f:   # 1 GiB of JSON whitespace
        block = b" " * (1 << 20)
        f.write(b"{")
        for _ in range(1024):
            f.write(block)
        f.write(b"}")
PY
ok "the meta.json bomb is a small file" -- test "$(stat -c %s "$T/bomb.npz")" -lt 4000000
rss=$(rss_kib "$G" golden check "$T/v.gpk" "$T/bomb.npz")
ok "golden check of a 1 GiB meta.json: exit 2 (got $(cat "$T/rc"))" -- test "$(cat "$T/rc")" = 2
ok "... refused by its declared size, before reading" -- said "meta.json declares 1073741826 bytes"
ok "... peak RSS $rss KiB < 256 MiB" -- test "$rss" -lt 262144
rss=$(rss_kib "$G" inspect "$T/bomb.npz")
ok "inspect of the bomb: exit 0 (got $(cat "$T/rc")), peak RSS $rss KiB < 256 MiB" -- \
    test "$(cat "$T/rc")" = 0 -a "$rss" -lt 262144

echo "# 5. a cache entry's claimed size is bounded"
rm -rf "$T/cache" && mkdir "$T/cache"
"$G" run "$T/v.gpk" --tokens-file "$T/src/tokens.json" --prefix-cache-dir "$T/cache" --prefix-block 8 >/dev/null
entry=$(ls "$T"/cache/*.gpkc | head -1)
python3 - "$T"/cache/*.gpkc <<'PY'
import struct, sys, zlib
for p in sys.argv[1:]:                                       # every entry: whichever block is looked up first
    h = bytearray(open(p, "rb").read(64))
    struct.pack_into("<Q", h, 48, 1 << 30)                   # payload: 1 GiB
    struct.pack_into("<I", h, 12, zlib.crc32(bytes(h[16:64])))  # header CRC made consistent
    with open(p, "wb") as f:
        f.write(h)
        f.truncate(64 + (1 << 30))                           # sparse
PY
ok "the forged entry is sparse (under 100 KiB on disk)" -- test "$(du -k "$entry" | cut -f1)" -lt 100
rss=$(rss_kib "$G" run "$T/v.gpk" --tokens-file "$T/src/tokens.json" --prefix-cache-dir "$T/cache" --prefix-block 8)
ok "a forged entry claiming 1 GiB: run succeeds (exit $(cat "$T/rc"))" -- test "$(cat "$T/rc")" = 0
ok "... the entry is discarded with a warning" -- said "its size is not what this model's block needs"
ok "... peak RSS $rss KiB < 128 MiB" -- test "$rss" -lt 131072

echo "# 6. a pack says exactly what it holds"
"$G" fixture --variant 31b -o "$T/f31" >/dev/null 2>&1
"$G" convert "$T/f31" -o "$T/f31.gpk" >/dev/null
python3 "$HERE/edit_pack.py" "$T/f31.gpk" "$T/f6.gpk" \
    'c = m["model"]["config"]; c["num_hidden_layers"] = 6; c["layer_types"] = c["layer_types"][:6]'
expect 2 "run a pack whose manifest says 6 of its 12 layers" -- "$G" run "$T/f6.gpk" --tokens 2,3
ok "... names the unused tensors" -- said "83 tensors are (first: layers.6.input_layernorm.weight) not used"
expect 1 "verify the same pack" -- "$G" verify "$T/f6.gpk"
python3 "$HERE/edit_pack.py" "$T/f31.gpk" "$T/fx.gpk" \
    'l = m["tensors"][-1]; m["tensors"].insert(-1, dict(name="extra.weight", dtype="F32", shape=[0], offset=l["offset"], nbytes=0, crc32=0))'
expect 2 "run a pack with a tensor no config entry uses" -- "$G" run "$T/fx.gpk" --tokens 2,3
ok "... names it" -- said "first: extra.weight"
expect 0 "verify of the intact pack" -- "$G" verify "$T/f31.gpk"

echo "# 7. invalid settings are errors"
for bad in '"1e-4"' 'true' '[0.1]' 'NaN' '-1' ; do
    python3 - "$T/g.npz" "$T/tol.npz" "$bad" <<'PY'
import sys, zipfile
src = zipfile.ZipFile(sys.argv[1])
with zipfile.ZipFile(sys.argv[2], "w") as out:
    for name in ("tokens.npy", "logits.npy"):
        out.writestr(name, src.read(name))
    out.writestr("meta.json", '{"tolerances": {"max_abs": %s}}' % sys.argv[3])
PY
    expect 2 "golden tolerance max_abs = $bad" -- "$G" golden check "$T/v.gpk" "$T/tol.npz"
    ok "... names the file and the key" -- said "$T/tol.npz: meta.json: tolerances.max_abs is"
done
python3 - "$T/g.npz" "$T/tol.npz" <<'PY'
import sys, zipfile
src = zipfile.ZipFile(sys.argv[1])
with zipfile.ZipFile(sys.argv[2], "w") as out:
    for name in ("tokens.npy", "logits.npy"):
        out.writestr(name, src.read(name))
    out.writestr("meta.json", '{"tolerances": {"top1": 1.5}}')
PY
expect 2 "golden tolerance top1 = 1.5" -- "$G" golden check "$T/v.gpk" "$T/tol.npz"
ok "... names the range" -- said "tolerances.top1 is double 1.5, expected a number in [0, 1]"
expect 2 "--tokens 99999999999999999999" -- "$G" run "$T/v.gpk" --tokens 99999999999999999999
ok "... quoted as typed" -- said "token 99999999999999999999 at index 0 is not an id in [0, 2^31)"
expect 2 "--mode chunked:99999999999999999999" -- "$G" run "$T/v.gpk" --tokens 2 --mode chunked:99999999999999999999
ok "... with the real limit" -- said "chunked:N with N from 1 to 1073741824"
expect 2 "--kv-start 99999999999999999999" -- "$G" run "$T/v.gpk" --tokens 2 --kv-start 99999999999999999999
ok "... quoted, with the real limit" -- said "--kv-start 99999999999999999999: expected an integer from 0 to 1099511627776"
expect 2 'check ""' -- "$G" check ""
ok "... says the path is empty" -- said "a directory path is empty"
(cd "$T/adir" && timeout 20 "$G" convert "$T/src" -o "" >/dev/null 2>"$T/err"; echo $? >"$T/rc")
ok 'convert -o "": exit 2 before any work' -- test "$(cat "$T/rc")" = 2
ok "... says the output path is empty" -- said "the output path is empty"
ok "... and leaves nothing behind" -- test -z "$(ls -A "$T/adir")"

sanitized=false
[ "${2:-none}" != none ] && sanitized=true
echo "# 8. a memory limit never hangs"
$sanitized && echo "(skipped under -Db_sanitize=$2: checked by the plain build)"
$sanitized || for cmd in "--version" "check $T/src" "run $T/v.gpk --tokens 2,3 --kernels blas" "run $T/v.gpk --tokens 2,3 --threads 4"; do
    (ulimit -v 122880; timeout 20 "$G" $cmd >/dev/null 2>&1; echo $? >"$T/rc")
    ok "ulimit -v 122880: gempack $cmd ends (exit $(cat "$T/rc"))" -- test "$(cat "$T/rc")" = 0 -o "$(cat "$T/rc")" = 2
done

echo "# 9. messages name the model"
expect 2 "a binding error names the pack" -- "$G" run "$T/f6.gpk" --tokens 2
ok "... prefixed with its path" -- said "$T/f6.gpk: 83 tensors"
python3 -c 'print(" ".join(["7"] * 400000))' >"$T/long.txt"
$sanitized || {
(ulimit -v 262144; timeout 60 "$G" run "$T/v.gpk" --tokens-file "$T/long.txt" --mmap >/dev/null 2>"$T/err"; echo $? >"$T/rc")
ok "a prompt too long for the memory limit: exit 2 (got $(cat "$T/rc"))" -- test "$(cat "$T/rc")" = 2
ok "... the message names the pack" -- said "gempack: error: $T/v.gpk: "
}

finish
