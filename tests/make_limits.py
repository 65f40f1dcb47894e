#!/usr/bin/env python3
"""make_limits.py DIR - inputs that declare absurd sizes, for tests/limits.sh."""
import io, json, os, struct, sys, zipfile

d = sys.argv[1]
os.makedirs(d, exist_ok=True)

def st(name, header, data=b"", prefix=None):
    h = json.dumps(header).encode() if isinstance(header, dict) else header
    with open(os.path.join(d, name), "wb") as f:
        f.write(struct.pack("<Q", len(h) if prefix is None else prefix) + h + data)

# dims whose product overflows 64 bits
st("overflow.safetensors", {"t": {"dtype": "F32", "shape": [1 << 32, 1 << 32, 2], "data_offsets": [0, 0]}})
# a 10^12-element tensor in a 100-byte file
st("tera.safetensors", {"t": {"dtype": "F32", "shape": [10**6, 10**6], "data_offsets": [0, 4 * 10**12]}})
# header lengths of 1 GiB (past the end of the file) and 1 TiB (past any limit)
st("gib-header.safetensors", b'{"t":{}}', prefix=1 << 30)
st("tib-header.safetensors", b'{"t":{}}', prefix=1 << 40)
# a million tensors (one more than a million entries)
n = 1000001
h = ("{" + ",".join('"t%d":{"dtype":"F32","shape":[1],"data_offsets":[%d,%d]}' % (i, 4 * i, 4 * i + 4)
                   for i in range(n)) + "}").encode()
st("million.safetensors", h, b"\0" * (4 * n))
# 100,001 tensors: within the JSON budget, above the tensor limit
n = 100001
h = ("{" + ",".join('"t%d":{"dtype":"F32","shape":[1],"data_offsets":[%d,%d]}' % (i, 4 * i, 4 * i + 4)
                   for i in range(n)) + "}").encode()
st("lakh.safetensors", h, b"\0" * (4 * n))
# deeply nested JSON as a checkpoint's config.json
os.makedirs(os.path.join(d, "nested"), exist_ok=True)
with open(os.path.join(d, "nested", "config.json"), "w") as f:
    f.write('{"model_type": "gemma4", "text_config": ' + "[" * 100000 + "]" * 100000 + "}")
st("nested/model.safetensors", {"t": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}, b"\0" * 4)
# an .npz whose logits declare 10^12 float32 values
npy = io.BytesIO()
hdr = "{'descr': '<f4', 'fortran_order': False, 'shape': (1000000, 1000000), }"
hdr += " " * (63 - (10 + len(hdr)) % 64) + "\n"
npy.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(hdr)) + hdr.encode() + b"\0" * 64)
with zipfile.ZipFile(os.path.join(d, "tera.npz"), "w") as z:
    z.writestr("logits.npy", npy.getvalue())
    z.writestr("tokens.npy", b"\x93NUMPY\x01\x00" + struct.pack("<H", 118) +
               ("{'descr': '<i4', 'fortran_order': False, 'shape': (4,), }".ljust(117) + "\n").encode() + b"\0" * 16)
# GGUF: counts, an array and a tensor far beyond a 100-byte file
def gguf(name, body, n_tensors, n_kv):
    with open(os.path.join(d, name), "wb") as f:
        f.write(b"GGUF" + struct.pack("<IQQ", 3, n_tensors, n_kv) + body)

def gstr(s):
    return struct.pack("<Q", len(s)) + s

gguf("tera-count.gguf", b"", 1 << 40, 0)
gguf("tera-array.gguf", gstr(b"general.big") + struct.pack("<IIQ", 9, 0, 1 << 40), 0, 1)
gguf("tera-tensor.gguf", gstr(b"t") + struct.pack("<I2QIQ", 2, 1 << 20, 1 << 20, 0, 0), 1, 0)
