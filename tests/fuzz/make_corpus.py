#!/usr/bin/python3
"""Writes the seed corpora of the fuzz harnesses (deterministic; the outputs
are committed under tests/fuzz/corpus/). Run from the repository root:
    /usr/bin/python3 tests/fuzz/make_corpus.py BUILD_DIR
It uses `gempack fixture` for realistic configs."""
import io, json, os, struct, subprocess, sys, tempfile, zipfile, zlib

build = sys.argv[1] if len(sys.argv) > 1 else "build"
root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def put(kind, name, data):
    d = os.path.join(root, kind)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def safetensors(tensors):
    """tensors: list of (name, dtype, shape, bytes)"""
    hdr, off, blob = {"__metadata__": {"format": "pt"}}, 0, b""
    for name, dt, shape, data in tensors:
        hdr[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(data)]}
        off += len(data)
        blob += data
    h = json.dumps(hdr, separators=(",", ":")).encode()
    return struct.pack("<Q", len(h)) + h + blob


put("safetensors", "two-tensors", safetensors([("a.weight", "BF16", [2, 3], bytes(range(12))),
                                                ("b", "U32", [2], bytes(8))]))
put("safetensors", "empty", struct.pack("<Q", 8) + b"{}      ")
put("safetensors", "scalar-and-empty", safetensors([("s", "I32", [], bytes(4)), ("z", "F32", [2, 0], b"")]))

with tempfile.TemporaryDirectory() as tmp:
    for v in ["e2b", "26b-a4b", "31b"]:
        out = os.path.join(tmp, v)
        subprocess.run([os.path.join(build, "gempack"), "fixture", "--variant", v, "--layout", "mlx", "--quant", "4",
                        "-o", out], check=True, capture_output=True)
        put("config", v + ".json", open(os.path.join(out, "config.json"), "rb").read())
        put("tokens", v + "-tokens.json", open(os.path.join(out, "tokens.json"), "rb").read())

put("tokens", "list.json", "[2, 17, 99]")
put("tokens", "batch.json", "[[2, 17], [2, 5, 9]]")
put("tokens", "plain.txt", "2 17 99\n4\n")


def npy(arr_bytes, descr, shape):
    d = "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }" % (descr, ", ".join(map(str, shape)) + ("," if len(shape) == 1 else ""))
    pad = 64 - (10 + len(d) + 1) % 64
    h = (d + " " * pad + "\n").encode()
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h + arr_bytes


tok = npy(struct.pack("<3i", 2, 17, 99), "<i4", [3])
put("tokens", "ids.npy", tok)
logits = npy(struct.pack("<6f", 0.5, -1, 2, 0, 3.25, 1), "<f4", [3, 2])
put("npy", "tokens.npy", tok)
put("npy", "logits.npy", logits)
z = io.BytesIO()
with zipfile.ZipFile(z, "w", zipfile.ZIP_STORED) as zf:
    for name, data in [("tokens.npy", tok), ("logits.npy", npy(struct.pack("<1536f", *([0.25] * 1536)), "<f4", [3, 512])),
                       ("meta.json", b'{"tolerances": {"max_abs": 0.0001}}')]:
        zi = zipfile.ZipInfo(name, (1980, 1, 1, 0, 0, 0))
        zf.writestr(zi, data)
put("npy", "golden.npz", z.getvalue())

put("index", "valid.json", json.dumps({"metadata": {"total_size": 2},
                                       "weight_map": {"a": "model-00001-of-00002.safetensors",
                                                      "b": "model-00002-of-00002.safetensors"}}))
put("index", "missing-shard.json", json.dumps({"weight_map": {"a": "model-00003-of-00002.safetensors"}}))


def pack(tensors, align=64, extra=None):
    """A .gpk v1 image (docs/FORMAT.md) of (name, dtype, shape, bytes) and extra manifest fields."""
    data, recs = b"", []
    for name, dt, shape, b in tensors:
        data += b"\0" * ((-len(data)) % align)
        recs.append({"name": name, "dtype": dt, "shape": shape, "offset": len(data), "nbytes": len(b),
                     "crc32": zlib.crc32(b)})
        data += b
    m = json.dumps({"format": "gempack", "version": [1, 0], "required_features": ["dtype:BF16"],
                    "tensors": recs, **(extra or {})}, separators=(",", ":")).encode()
    hdr = bytearray(64)
    hdr[0:8] = b"\x89GPK\r\n\x1a\n"
    struct.pack_into("<HHIQQQQQI", hdr, 8, 1, 0, align, align + len(data) + len(m), align, len(data),
                     align + len(data), len(m), zlib.crc32(m))
    struct.pack_into("<I", hdr, 60, zlib.crc32(bytes(hdr[:60])))
    return bytes(hdr) + b"\0" * (align - 64) + data + m


put("pack", "two-tensors.gpk", pack([("a.weight", "BF16", [2, 3], bytes(range(12))), ("norm.weight", "BF16", [5], bytes(10))]))
put("pack", "empty.gpk", pack([]))
put("pack", "quantized.gpk", pack([("m.weight", "U32", [2, 4], bytes(range(32))), ("m.scales", "BF16", [2, 1], bytes(4)),
                                   ("m.biases", "BF16", [2, 1], bytes(4))],
                                  extra={"quantized": {"m": {"mode": "affine", "bits": 4, "group_size": 32,
                                                             "in_features": 32, "out_features": 2, "weight": "m.weight",
                                                             "scales": "m.scales", "biases": "m.biases"}}}))
