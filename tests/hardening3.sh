#!/bin/bash
# hardening3.sh GEMPACK - round three of hostile inputs (the formats added
# since round two): one section per class, each a clean failure or a
# harmless output, never a silently different model or a lying gate.
#  1. a file's strings cannot drive the terminal or break a JSON document
#  2. a non-finite weight, norm or scale is an error at load naming it; weights
#     that overflow the hidden state make an error naming the layer
#  3. GGUF metadata that would make a non-finite config names the key
#  4. smaller: which file is wrong, and what a path is
#  5. a compressed-tensors g_idx outside its groups is refused by check, convert and run; a ggml
#     block whose scale is not finite is refused by run, naming tensor, type and block
#  6. a pack cut short in place under a running command: an error, never a signal
#  7. a tokenizer.json that does not parse: refused by the text commands naming
#     it (it was a double free); goldens of ids are made and checked without it
set -u
G=$(realpath "$1")
HERE=$(cd "$(dirname "$0")" && pwd)
EXPECT_TIMEOUT=60
. "$HERE/lib.sh"
said() { grep -qF -- "$1" "$T/err"; }
no_controls() { ! LC_ALL=C grep -qP '[\x00-\x08\x0b-\x1f\x7f]|\xc2[\x80-\x9f]' "$T/out" "$T/err"; }
# process $1 runs (not ended: no zombie) and has not mapped cut.gpk yet
unmapped_yet() { ! grep -qs '^State:[[:space:]]*[ZX]' "/proc/$1/status" && [ -e "/proc/$1" ] && ! grep -qs 'cut\.gpk$' "/proc/$1/maps"; }
strict_json() { python3 -c 'import json,sys; json.loads(open(sys.argv[1], encoding="utf-8", errors="strict").read())' "$T/out"; }

echo "# 1. strings from files are spelled out, never sent to the terminal"
"$G" fixture --variant e2b -o "$T/st" >/dev/null 2>&1
python3 - "$T/st/model.safetensors" <<'PY'
import json, struct, sys
p = sys.argv[1]
b = open(p, 'rb').read()
n = struct.unpack('<Q', b[:8])[0]
h = json.loads(b[8:8 + n])
h['__metadata__'] = {'format': 'pt', 'title': '\x1b]0;pwned\x07\x1b[2J\rverdict: LOADABLE\x9b31m'}
k = 'model.language_model.layers.0.mlp.gate_proj.weight'
h['model.language_model.layers.0.mlp.gate_proj.weight\x1b[8m'] = h.pop(k)
t = json.dumps(h).encode()
t += b' ' * (-len(t) % 8)
open(p, 'wb').write(struct.pack('<Q', len(t)) + t + b[8 + n:])
PY
expect 0 "inspect a file with escape sequences in its metadata and a tensor name" -- "$G" inspect "$T/st/model.safetensors"
ok "... no control byte reaches the terminal" -- no_controls
ok "... the sequences are spelled out" -- grep -qF '\x1B]0;pwned\x07\x1B[2J\x0Dverdict: LOADABLE\xC2\x9B31m' "$T/out"
expect 0 "inspect --json of the same file" -- "$G" inspect "$T/st/model.safetensors" --json
ok "... strict JSON, no raw control byte" -- strict_json
ok "... no raw control byte" -- no_controls
expect 1 "check a checkpoint whose tensor name holds an escape sequence" -- "$G" check "$T/st"
ok "... no control byte in its report" -- no_controls
ok "... the name spelled out" -- grep -qF 'gate_proj.weight\x1B[8m' "$T/out"

"$G" fixture --variant e2b --format gguf-q4_0 -o "$T/gg" >/dev/null 2>&1
python3 - "$T/gg/model.gguf" <<'PY'
import sys
p = sys.argv[1]
b = open(p, 'rb').read()
old = b'gempack fixture'
new = b'\x1b]0;pwn\x07\x1b[2J\xff\xfe!'
assert len(old) == len(new) and b.count(old) == 1
open(p, 'wb').write(b.replace(old, new))
PY
expect 0 "inspect a GGUF whose name is escape sequences and invalid UTF-8" -- "$G" inspect "$T/gg/model.gguf"
ok "... no control byte reaches the terminal" -- no_controls
ok "... spelled out, invalid bytes too" -- grep -qF '\x1B]0;pwn\x07\x1B[2J\xFF\xFE!' "$T/out"
expect 0 "inspect --json of that GGUF" -- "$G" inspect "$T/gg/model.gguf" --json
ok "... strict UTF-8 JSON" -- strict_json
ok "... the invalid bytes as text" -- grep -qF '\\xFF\\xFE!' "$T/out"

echo "# 2. a non-finite weight is an error at load; non-finite logits name the layer"
edit_bf16() { # DIR KEY HEX4|huge: element 0 set, or every element the largest bf16
    /usr/bin/python3 - "$@" <<'PY'
import json, struct, sys
d, key, v = sys.argv[1:4]
p = d + '/model.safetensors'
b = bytearray(open(p, 'rb').read())
n = struct.unpack('<Q', b[:8])[0]
t = json.loads(b[8:8 + n])[key]
o, e = 8 + n + t['data_offsets'][0], 8 + n + t['data_offsets'][1]
if v == 'huge':
    b[o:e] = b'\x7f\x7f' * ((e - o) // 2)
else:
    b[o:o + 2] = bytes.fromhex(v)
open(p, 'wb').write(b)
PY
}
for v in c07f:NaN 807f:+inf 80ff:-inf; do
    rm -rf "$T/nan" && "$G" fixture --variant e2b -o "$T/nan" >/dev/null 2>&1
    edit_bf16 "$T/nan" model.language_model.layers.3.mlp.down_proj.weight ${v%%:*}
    expect 2 "run a model with a ${v#*:} weight" -- "$G" run "$T/nan" --tokens 2,3,4
    ok "... names the tensor and the element" -- said "layers.3.mlp.down_proj.weight element 0 is ${v#*:}: every weight, scale and norm must be finite"
    expect 2 "convert it" -- "$G" convert "$T/nan" -o "$T/nan.gpk"
    ok "... nothing written" -- test ! -e "$T/nan.gpk"
done
rm -rf "$T/nan" && "$G" fixture --variant e2b -o "$T/nan" >/dev/null 2>&1
edit_bf16 "$T/nan" model.language_model.layers.3.self_attn.q_norm.weight c07f
expect 2 "a NaN norm" -- "$G" run "$T/nan" --tokens 2,3,4
ok "... named" -- said "layers.3.self_attn.q_norm.weight element 0 is NaN"
"$G" fixture --variant e2b --layout mlx --quant mxfp4 -o "$T/mx" >/dev/null 2>&1
/usr/bin/python3 - "$T/mx" <<'PY'
import json, struct, sys
p = sys.argv[1] + '/model.safetensors'
b = bytearray(open(p, 'rb').read())
n = struct.unpack('<Q', b[:8])[0]
h = json.loads(b[8:8 + n])
k = [k for k in h if k.endswith('layers.2.mlp.up_proj.scales')][0]
b[8 + n + h[k]['data_offsets'][0] + 3] = 0xFF
open(p, 'wb').write(b)
PY
expect 2 "an mxfp4 scale byte 0xFF (E8M0 NaN)" -- "$G" run "$T/mx" --tokens 2,3
ok "... named" -- said "layers.2.mlp.up_proj.scales element 3 is the scale byte 0xFF (E8M0 NaN)"
"$G" fixture --variant e2b --format gguf-q4_0 -o "$T/gq" >/dev/null 2>&1
/usr/bin/python3 - "$T/gq/model.gguf" <<'PY'
import struct, sys
p = sys.argv[1]
b = bytearray(open(p, 'rb').read())
rd = lambda f, o: struct.unpack_from(f, b, o)
def rstr(o):
    n, = rd('<Q', o)
    return b[o + 8:o + 8 + n].decode(), o + 8 + n
def skip(t, o):
    if t == 8:
        return rstr(o)[1]
    if t == 9:
        at, n = rd('<IQ', o)
        o += 12
        for _ in range(n):
            o = skip(at, o)
        return o
    return o + {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}[t]
nt, nkv = rd('<QQ', 8)
o, align = 24, 32
for _ in range(nkv):
    k, o = rstr(o)
    t, = rd('<I', o)
    if k == 'general.alignment':
        align, = rd('<I', o + 4)
    o = skip(t, o + 4)
infos = []
for _ in range(nt):
    name, o = rstr(o)
    nd, = rd('<I', o)
    ty, off = rd('<IQ', o + 4 + 8 * nd)
    o += 4 + 8 * nd + 12
    infos.append((name, ty, off))
data = (o + align - 1) // align * align
off = [x[2] for x in infos if x[0] == 'blk.2.ffn_up.weight'][0]
b[data + off:data + off + 2] = struct.pack('<H', 0x7E00)  # block 0's f16 scale d: NaN
open(p, 'wb').write(b)
PY
expect 2 "a GGUF Q4_0 block scale NaN" -- "$G" run "$T/gq/model.gguf" --tokens 2,3
ok "... named" -- said "layers.2.mlp.up_proj.biases element 0 is NaN"
expect 2 "convert it" -- "$G" convert "$T/gq/model.gguf" -o "$T/gq.gpk"
rm -rf "$T/nan" && "$G" fixture --variant e2b -o "$T/nan" >/dev/null 2>&1
edit_bf16 "$T/nan" model.language_model.layers.3.mlp.down_proj.weight huge
expect 2 "run a model whose layer 3 overflows" -- "$G" run "$T/nan" --tokens 2,3,4
ok "... names the layer" -- said "not finite: the hidden state is first non-finite after layer 3"
expect 2 "golden make of it" -- "$G" golden make "$T/nan" --tokens 2,3,4 -o "$T/g.npz"
ok "... no golden written" -- test ! -e "$T/g.npz"

echo "# 3. GGUF metadata that would make a non-finite config"
for v in nan inf; do
    "$G" fixture --variant e2b --format gguf-q8_0 -o "$T/gm-$v" >/dev/null 2>&1
    python3 - "$T/gm-$v/model.gguf" $v <<'PY'
import struct, sys
p, v = sys.argv[1], sys.argv[2]
b = bytearray(open(p, 'rb').read())
k = b'gemma4.attention.layer_norm_rms_epsilon'
i = b.index(k) + len(k)
assert struct.unpack('<I', b[i:i + 4])[0] == 6  # GGUF_TYPE_FLOAT32
b[i + 4:i + 8] = struct.pack('<f', float(v))
open(p, 'wb').write(b)
PY
    expect 2 "check a GGUF whose rms epsilon is $v" -- "$G" check "$T/gm-$v/model.gguf"
    ok "... names the key and the value" -- said "model.gguf: gemma4.attention.layer_norm_rms_epsilon is $v: expected a finite number"
    expect 2 "run it" -- "$G" run "$T/gm-$v/model.gguf" --tokens 2,3
done

echo "# 4. smaller: which file is wrong, and what a path is"
/usr/bin/python3 - "$T" <<'PY'
import io, sys, warnings, zipfile
import numpy as np
warnings.simplefilter('ignore')
def arr(a):
    b = io.BytesIO()
    np.save(b, a)
    return b.getvalue()
with zipfile.ZipFile(sys.argv[1] + '/dup.npz', 'w') as z:
    z.writestr('tokens.npy', arr(np.array([2, 3], np.int32)))
    z.writestr('tokens.npy', arr(np.array([2, 4], np.int32)))
    z.writestr('logits.npy', arr(np.zeros((2, 512), np.float32)))
with zipfile.ZipFile(sys.argv[1] + '/oov.npz', 'w') as z:
    z.writestr('tokens.npy', arr(np.array([2, 9999, 5], np.int32)))
    z.writestr('logits.npy', arr(np.zeros((3, 512), np.float32)))
PY
"$G" convert "$T/st" -o "$T/st.gpk" >/dev/null 2>&1
"$G" fixture --variant e2b -o "$T/ok" >/dev/null 2>&1
expect 2 "a golden with two members of one name" -- "$G" golden check "$T/ok" "$T/dup.npz"
ok "... says so" -- said "dup.npz: not a readable .npz: two members have the same name"
expect 2 "a golden whose token is outside the vocabulary" -- "$G" golden check "$T/ok" "$T/oov.npz"
ok "... blames the golden, not the model" -- said "oov.npz: tokens.npy[1] = 9999: outside the model's vocabulary [0, 512)"
expect 2 "convert --eval --report X -o X" -- "$G" convert "$T/ok" --bits 4 --eval --report "$T/same.gpk" -o "$T/same.gpk"
ok "... refused before any work" -- test ! -e "$T/same.gpk"
ok "... naming the flag" -- said "--report $T/same.gpk is the output too"
expect 2 "check a regular file that is no checkpoint" -- "$G" check "$T/oov.npz"
ok "... called a regular file" -- said "oov.npz: is a regular file, expected a directory"
"$G" fixture --variant e2b --format ct-w4a16 -o "$T/ct" >/dev/null 2>&1
expect 0 "check --json of a compressed-tensors checkpoint" -- "$G" check "$T/ct" --json
ok "... its transcoded shards are no truncated files" -- python3 -c '
import json, sys
sh = json.load(open(sys.argv[1]))["files"]["shards"]
assert [x["transcoded"] for x in sh] == [False, True, True], sh
assert all(x["truncated"] is None and x["header_bytes"] is None for x in sh[1:]), sh
assert sh[0]["truncated"] is False and sh[0]["header_bytes"] > 0, sh' "$T/out"

echo "# 5. a compressed-tensors g_idx outside its groups"
for v in 8 -1 4611686018427387904; do
    rm -rf "$T/gi" && cp -r "$T/ct" "$T/gi"
    /usr/bin/python3 - "$T/gi" $v <<'PY'
import copy, json, struct, sys
import numpy as np
d, bad = sys.argv[1], int(sys.argv[2])
p = d + '/model.safetensors'
b = open(p, 'rb').read()
n = struct.unpack('<Q', b[:8])[0]
h, data = json.loads(b[8:8 + n]), b[8 + n:]
mod = 'model.language_model.layers.2.mlp.down_proj'
inn, groups = 256, h[mod + '.weight_scale']['shape'][1]
g = (np.arange(inn) // (inn // groups)).astype(np.int64)
g[5] = bad
h[mod + '.weight_g_idx'] = {'dtype': 'I64', 'shape': [inn], 'data_offsets': [len(data), len(data) + 8 * inn]}
data += g.tobytes()
t = json.dumps(h).encode()
t += b' ' * (-len(t) % 8)
open(p, 'wb').write(struct.pack('<Q', len(t)) + t + data)
c = json.load(open(d + '/config.json'))
q = c.get('quantization_config') or c['text_config']['quantization_config']
g1 = copy.deepcopy(q['config_groups']['group_0'])
g1['targets'] = [mod]
g1['weights']['actorder'] = 'group'
q['config_groups']['gidx'] = g1
json.dump(c, open(d + '/config.json', 'w'))
PY
    expect 1 "check: g_idx[5] = $v" -- "$G" check "$T/gi"
    ok "... names the column and the value" -- grep -qF "down_proj.weight_g_idx[5] = $v: not a group (0..7)" "$T/out"
    expect 2 "convert refuses it, nothing written" -- "$G" convert "$T/gi" -o "$T/gi.gpk"
    ok "... no pack" -- test ! -e "$T/gi.gpk"
    expect 2 "run refuses it" -- "$G" run "$T/gi" --tokens 2,3
done

echo "# 5b. a ggml block whose scale is not finite (a Q4_K_M file)"
"$G" fixture --variant e2b --format gguf-q4_k_m -o "$T/km" >/dev/null 2>&1
"$G" inspect "$T/km/model.gguf" >"$T/km.txt" 2>&1
python3 - "$T/km/model.gguf" "$T/km.txt" "$T/kmnan.gguf" <<'PY'
import re, sys
b = bytearray(open(sys.argv[1], 'rb').read())
txt = open(sys.argv[2]).read()
data = int(re.search(r'data at (\d+)', txt).group(1))
names = [l.split()[0] for l in txt.splitlines() if re.match(r'\s+blk\.\d+\.\w+\.weight\s+Q4_K\s', l)]
offs, off = {}, 0
for l in txt.splitlines():  # offsets: the tensors in file order, each padded to the alignment (32)
    m = re.match(r'\s+(\S+)\s+\S+\s+ne \[.*\]\s+(\d+)$', l)
    if m:
        offs[m.group(1)] = off
        off += (int(m.group(2)) + 31) // 32 * 32
t = names[0]
at = data + offs[t] + 144  # the second block's f16 d
b[at:at + 2] = b'\x00\x7e'  # NaN
open(sys.argv[3], 'wb').write(b)
PY
expect 0 "check reads no values: a NaN block scale passes it" -- "$G" check "$T/kmnan.gguf"
expect 2 "run refuses the NaN block scale" -- "$G" run "$T/kmnan.gguf" --tokens 2,3
ok "... naming the tensor, its type and the block" -- grep -qE "tensor blk\.[0-9]+\.[a-z_]+\.weight \(Q4_K\): block 1 has a scale that is not finite" "$T/err"

echo "# 6. a pack cut short in place under a run"
"$G" convert "$T/ok" -o "$T/cut.gpk" >/dev/null 2>&1
for mode in --mmap ""; do
    "$G" run "$T/cut.gpk" --tokens 2,3 --generate 4000 $mode >/dev/null 2>"$T/err" &
    pid=$!
    # cut once the pack is mapped (a slow start, as under ASan, would otherwise be cut before it opens)
    for _ in $(seq 1000); do unmapped_yet $pid || break; sleep 0.01; done
    : >"$T/cut.gpk" # truncated in place, as cp onto it does first
    wait $pid
    rc=$?
    # done before the cut (0), or stopped by it with the error (2); never killed by SIGBUS (135)
    ok "run ${mode:-(copied weights)} whose pack is cut in place: exit $rc" -- test $rc = 0 -o $rc = 2
    [ $rc = 2 ] && ok "... says why" -- said "was cut short or rewritten in place while this command read it"
    "$G" convert "$T/ok" -o "$T/cut.gpk.new" >/dev/null 2>&1 && mv "$T/cut.gpk.new" "$T/cut.gpk"
done
echo "# 7. a tokenizer.json that does not parse"
rm -rf "$T/bt" && "$G" fixture --variant e2b -o "$T/bt" >/dev/null 2>&1
"$G" golden make "$T/bt" --tokens 2,17,99 -o "$T/bt-ids.npz" >/dev/null 2>&1
"$G" golden make "$T/bt" --prompt "hello there" -o "$T/bt-text.npz" >/dev/null 2>&1
printf '{"model": {"vocab": {"a": 1' >"$T/bt/tokenizer.json"
expect 2 "tokenize: refused, not a crash" -- "$G" tokenize "$T/bt" "hi"
ok "... naming the file" -- said "bt/tokenizer.json"
expect 2 "run --prompt: refused" -- "$G" run "$T/bt" --prompt "hi"
expect 0 "golden make from ids: the model runs without it" -- "$G" golden make "$T/bt" --tokens 2,17,99 -o "$T/bt-ids2.npz"
expect 0 "golden check of ids: passes, recording no tokenizer" -- "$G" golden check "$T/bt" "$T/bt-ids.npz" --json
ok "... tokenizer_sha256 null" -- python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["measured"]["model"]["tokenizer_sha256"] is None' "$T/out"
expect 2 "golden check of text: refused, naming the file" -- "$G" golden check "$T/bt" "$T/bt-text.npz"
ok "... naming the file" -- said "bt/tokenizer.json"
finish
