#!/usr/bin/python3
"""Self-test of golden/reference.py's compressed-tensors and GGUF readers.

    /usr/bin/python3 golden/test_formats.py                 # unit vectors + tiny end-to-end models
    /usr/bin/python3 golden/test_formats.py --fixture DIR   # also convert an HF-layout checkpoint
                                                            # (e.g. `gempack fixture --layout hf`)

Everything here is written with its own small writers (safetensors, compressed-tensors packing,
GGUF with Q4_0 / Q8_0 quantizers as the upstream formats define them) and checks the
reader against:
  * known vectors of the upstream formats (compressed-tensors packing, GGUF Q4_0 / Q8_0 blocks);
  * a GGUF metadata round trip (every value type, string and nested arrays, alignment 32 and 64);
  * tiny Gemma 4 models written densely, as compressed-tensors and as GGUF (F32, BF16, F16,
    Q8_0, Q4_0): the reader must give exactly the weights the writer meant (the exact
    dequantized values) and the same hyper-parameters, hence the same logits bit for bit;
  * the refusals (wrong bits, ignored-but-packed module, unsupported GGUF type, unknown name...);
  * every ggml weight type reference.py dequantizes, against gguf-py's quants.py (build-ref/ggml/gguf-py),
    bit for bit on random blocks and blocks at their field edges.
Exit status 0 when everything passes. Standard library + numpy only.
"""

import json
import os
import shutil
import struct
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference as R  # noqa: E402

FAILS = []
CHECKS = [0]


def check(cond, what):
    CHECKS[0] += 1
    if not cond:
        FAILS.append(what)
        print("FAIL: " + what)


def expect_error(fn, needle, what):
    try:
        fn()
    except R.ReferenceError as e:
        check(needle.lower() in str(e).lower(), "%s: error %r lacks %r" % (what, str(e), needle))
        return
    check(False, "%s: no error raised" % what)


# ---------------------------------------------------------------------------
# value helpers
# ---------------------------------------------------------------------------

def bf16_exact(rng, shape, scale=1.0):
    """Random float64 values that are exactly representable in bf16."""
    f = (rng.standard_normal(shape) * scale).astype(np.float32)
    return (f.view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32).astype(np.float64)


def to_bf16_bits(x):
    f = np.asarray(x, dtype=np.float32)
    u = f.view(np.uint32)
    if np.any(u & 0xFFFF):
        raise ValueError("value not exact in bf16")
    return (u >> 16).astype("<u2")


def bf16_round(x):
    """Round float64 -> bf16 (nearest even, through float32), returned as float64."""
    u = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    return u.astype(np.uint32).view(np.float32).astype(np.float64)


# ---------------------------------------------------------------------------
# safetensors writer
# ---------------------------------------------------------------------------

def encode(dt, a):
    a = np.asarray(a)
    if dt == "F32":
        b = a.astype("<f4")
        if not np.array_equal(b.astype(np.float64), a.astype(np.float64)):
            raise ValueError("value not exact in F32")
        return b.tobytes()
    if dt == "BF16":
        return to_bf16_bits(a).tobytes()
    if dt == "F16":
        return a.astype("<f2").tobytes()
    if dt == "I32":
        return a.astype("<i4").tobytes()
    if dt == "I64":
        return a.astype("<i8").tobytes()
    raise ValueError(dt)


def write_safetensors(path, tensors):
    """tensors: name -> (dtype, array)."""
    header, chunks, off = {}, [], 0
    for name in sorted(tensors):
        dt, a = tensors[name]
        b = encode(dt, a)
        header[name] = {"dtype": dt, "shape": list(np.shape(a)), "data_offsets": [off, off + len(b)]}
        off += len(b)
        chunks.append(b)
    hb = json.dumps(header).encode("utf-8")
    hb += b" " * ((-len(hb)) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb)) + hb + b"".join(chunks))


# ---------------------------------------------------------------------------
# compressed-tensors writer (pack_to_int32 as notes §3 describes it, with Python integers)
# ---------------------------------------------------------------------------

def ct_pack(u, bits):
    """Unsigned codes [R, n] -> int32 words [R, ceil(n*bits/32)], element i at stream bit i*bits."""
    u = np.asarray(u)
    R_, n = u.shape
    nw = -(-n * bits // 32)
    out = np.zeros((R_, nw), dtype=np.uint32)
    for r in range(R_):
        acc = 0
        for i, c in enumerate(u[r].tolist()):
            assert 0 <= c < (1 << bits)
            acc |= c << (i * bits)
        for w in range(nw):
            out[r, w] = (acc >> (32 * w)) & 0xFFFFFFFF
    return out.view(np.int32)


def ct_quantize(w, bits, strategy, gs, symmetric, g_idx=None, rng=None):
    """Quantize a float [out, in] matrix the compressed-tensors way (scales rounded to bf16).
    Returns (tensors suffix -> (dtype, array), exact dequantized float64 matrix)."""
    out, n_in = w.shape
    qmin, qmax = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    if strategy == "group":
        ng = -(-n_in // gs)
        gi = np.arange(n_in) // gs if g_idx is None else np.asarray(g_idx)
    else:
        ng, gi = 1, np.zeros(n_in, dtype=np.int64)
    scale = np.zeros((out, ng))
    zp = np.zeros((out, ng), dtype=np.int64)
    for g in range(ng):
        cols = w[:, gi == g]
        if cols.shape[1] == 0:
            scale[:, g] = 1.0
            continue
        mn = np.minimum(cols.min(axis=1), 0.0)
        mx = np.maximum(cols.max(axis=1), 0.0)
        if symmetric:
            s = np.maximum(np.abs(mn), np.abs(mx)) / ((qmax - qmin) / 2.0)
        else:
            s = (mx - mn) / float(qmax - qmin)
        s = bf16_round(np.where(s > 0, s, 1.0))
        scale[:, g] = s
        if not symmetric:
            zp[:, g] = np.clip(np.round(qmin - mn / s), qmin, qmax).astype(np.int64)
    q = np.clip(np.round(w / scale[:, gi] + zp[:, gi]), qmin, qmax).astype(np.int64)
    deq = (q - zp[:, gi]).astype(np.float64) * scale[:, gi]
    t = {"weight_packed": ("I32", ct_pack(q + (1 << (bits - 1)), bits)),
         "weight_scale": ("BF16", scale),
         "weight_shape": ("I64", np.array([out, n_in]))}
    if not symmetric:
        t["weight_zero_point"] = ("I32", ct_pack((zp + (1 << (bits - 1))).T, bits).T)
    if g_idx is not None:
        t["weight_g_idx"] = ("I32", np.asarray(g_idx))
    return t, deq


# ---------------------------------------------------------------------------
# GGUF writer
# ---------------------------------------------------------------------------

VT = {"UINT8": (0, "<B"), "INT8": (1, "<b"), "UINT16": (2, "<H"), "INT16": (3, "<h"),
      "UINT32": (4, "<I"), "INT32": (5, "<i"), "FLOAT32": (6, "<f"), "BOOL": (7, "<B"),
      "STRING": (8, None), "ARRAY": (9, None), "UINT64": (10, "<Q"), "INT64": (11, "<q"),
      "FLOAT64": (12, "<d")}
GT = {"F32": 0, "F16": 1, "Q4_0": 2, "Q8_0": 8, "BF16": 30, "Q4_K": 12, "Q6_K": 14, "Q8_K": 15, "IQ2_XXS": 16,
      "MXFP4": 39}


def gstr(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def gval(vtype, value):
    """Encoded value (without its type id); ARRAY values are (element type, list)."""
    if vtype == "STRING":
        return gstr(value)
    if vtype == "ARRAY":
        et, items = value
        out = struct.pack("<IQ", VT[et][0], len(items))
        return out + b"".join(gval(et, x) for x in items)
    return struct.pack(VT[vtype][1], value)


def write_gguf(path, kvs, tensors, alignment=None, version=3, magic=b"GGUF"):
    """kvs: list of (key, vtype, value); tensors: list of (name, type, numpy shape, data bytes)."""
    A = alignment or 32
    if alignment is not None:
        kvs = [("general.alignment", "UINT32", alignment)] + list(kvs)
    head = magic + struct.pack("<IQQ", version, len(tensors), len(kvs))
    for k, vt, v in kvs:
        head += gstr(k) + struct.pack("<I", VT[vt][0]) + gval(vt, v)
    off, infos, datas = 0, b"", []
    for name, ty, shape, data in tensors:
        ne = list(reversed(shape))
        infos += gstr(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", x) for x in ne)
        infos += struct.pack("<IQ", GT[ty], off)
        pad = (-len(data)) % A
        datas.append(data + b"\0" * pad)
        off += len(data) + pad
    head += infos
    head += b"\0" * ((-len(head)) % A)
    with open(path, "wb") as f:
        f.write(head + b"".join(datas))


def f16_bytes(x):
    return np.float16(x).astype("<f2").tobytes()


def q4_0_quantize(x):
    """ggml reference Q4_0 (notes §4): per 32 values m = the element of largest |x| with its sign,
    d = m / -8, q = min(15, trunc(x * (1/d) + 8.5)); qs[j] = q[j] | q[j+16] << 4.
    Returns (bytes, exact dequantized float64 values)."""
    x = np.asarray(x, dtype=np.float32).reshape(-1, 32)
    out, deq = bytearray(), []
    for blk in x:
        m = blk[int(np.argmax(np.abs(blk)))]
        d = np.float32(m / np.float32(-8.0))
        idv = np.float32(1.0) / d if d != 0 else np.float32(0.0)
        q = [min(15, int(np.float32(v * idv + np.float32(8.5)))) for v in blk]
        dh = np.float16(d)
        out += f16_bytes(dh)
        out += bytes(q[j] | (q[j + 16] << 4) for j in range(16))
        deq.extend((qq - 8) * float(dh) for qq in q)
    return bytes(out), np.array(deq)


def q8_0_quantize(x):
    """ggml reference Q8_0: d = absmax / 127, q = round-half-away(x / d). Returns (bytes, values)."""
    x = np.asarray(x, dtype=np.float32).reshape(-1, 32)
    out, deq = bytearray(), []
    for blk in x:
        amax = float(np.max(np.abs(blk)))
        d = np.float32(amax / 127.0)
        idv = np.float32(1.0) / d if d != 0 else np.float32(0.0)
        q = [int(np.trunc(v * idv + (0.5 if v * idv >= 0 else -0.5))) for v in blk]
        dh = np.float16(d)
        out += f16_bytes(dh)
        out += struct.pack("<32b", *q)
        deq.extend(qq * float(dh) for qq in q)
    return bytes(out), np.array(deq)


def gguf_tensor(x, ty):
    """(data bytes, exact float64 values the reader should give) for a float64 array."""
    x = np.asarray(x, dtype=np.float64)
    if ty == "F32":
        return encode("F32", x), x
    if ty == "BF16":
        return encode("BF16", x), x
    if ty == "F16":
        h = x.astype(np.float16)
        return h.astype("<f2").tobytes(), h.astype(np.float64)
    if ty == "Q4_0":
        b, d = q4_0_quantize(x.reshape(-1))
        return b, d.reshape(x.shape)
    if ty == "Q8_0":
        b, d = q8_0_quantize(x.reshape(-1))
        return b, d.reshape(x.shape)
    raise ValueError(ty)


# ---------------------------------------------------------------------------
# 1. known vectors
# ---------------------------------------------------------------------------

def raw(name, dtype, arr):
    return R.RawTensor(name, dtype, np.shape(arr), encode(dtype, arr), "test")


def test_vectors():
    # CT int4 worked example (notes §6)
    q = np.array([[7, -4, 0, 2, -8, 4, -1, 3]])
    w = ct_pack(q + 8, 4)
    check(w.shape == (1, 1) and (int(w[0, 0]) & 0xFFFFFFFF) == 0xB7C0A84F, "CT int4 pack -> 0xB7C0A84F")
    check(int(w[0, 0]) == -1212110769, "CT int4 word as int32")
    check(w.astype("<i4").tobytes() == bytes([0x4F, 0xA8, 0xC0, 0xB7]), "CT int4 word bytes")
    args = {"name": "g", "bits": 4, "group_size": 8, "strategy": "group", "symmetric": True, "g_idx": False}
    t = {"weight_packed": raw("p", "I32", np.array([[np.uint32(0xB7C0A84F).astype(np.int32)]])),
         "weight_scale": raw("s", "BF16", np.array([[0.09375]])),
         "weight_shape": raw("h", "I64", np.array([1, 8]))}
    got = R.ct_dequantize("m", t, args)
    want = np.array([[0.65625, -0.375, 0, 0.1875, -0.75, 0.375, -0.09375, 0.28125]])
    check(got.dtype == np.float64 and np.array_equal(got, want), "CT int4 dequant %s" % got)
    # channel strategy, same word: scale [out, 1]
    t["weight_scale"] = raw("s", "F16", np.array([[0.09375]]))
    got = R.ct_dequantize("m", t, dict(args, strategy="channel", group_size=None))
    check(np.array_equal(got, want), "CT int4 channel dequant")
    # shape cross-checks: bits 8 against an int4 packing, a wrong group size
    expect_error(lambda: R.ct_dequantize("m", t, dict(args, bits=8)), "weight_packed shape", "CT bits mismatch")
    t["weight_scale"] = raw("s", "BF16", np.array([[0.09375]]))
    expect_error(lambda: R.ct_dequantize("m", t, dict(args, group_size=4)), "weight_scale shape",
                 "CT group mismatch")

    # g32 group of -8..7, -8..7 (notes §6)
    codes = np.tile(np.arange(-8, 8), 2)[None, :]
    w = ct_pack(codes + 8, 4).view(np.uint32)[0]
    check([int(x) for x in w] == [0x76543210, 0xFEDCBA98, 0x76543210, 0xFEDCBA98], "CT g32 words")
    check(np.array_equal(R.unpack_stream(w[None, :], 4, 32)[0] - 8, codes[0]), "CT g32 unpack")

    # zero points [-3, 0, 5] packed down dim 0 -> [[0x00000D85]]
    zpw = ct_pack((np.array([[-3, 0, 5]]) + 8), 4).T
    check(zpw.shape == (1, 1) and int(zpw[0, 0]) == 0x00000D85, "CT zero points -> 0x00000D85")
    # asymmetric 3-row module with those zero points: w = (q - zp) * s
    qa = np.array([[1, -2], [0, 7], [-8, 5]])
    ta = {"weight_packed": raw("p", "I32", ct_pack(qa + 8, 4)),
          "weight_scale": raw("s", "BF16", np.array([[0.5], [0.25], [2.0]])),
          "weight_shape": raw("h", "I32", np.array([3, 2])),
          "weight_zero_point": raw("z", "I32", zpw)}
    got = R.ct_dequantize("m", ta, dict(args, symmetric=False, group_size=2))
    check(np.array_equal(got, np.array([[2.0, 0.5], [0.0, 1.75], [-26.0, 0.0]])), "CT asym dequant %s" % got)
    expect_error(lambda: R.ct_dequantize("m", ta, dict(args, group_size=2)), "zero_point", "CT zp on symmetric")

    # int8 codes [-128, -1, 0, 127] -> 0xFF807F00
    w8 = ct_pack(np.array([[-128, -1, 0, 127]]) + 128, 8)
    check((int(w8[0, 0]) & 0xFFFFFFFF) == 0xFF807F00 and int(w8[0, 0]) == -8356096, "CT int8 -> 0xFF807F00")
    t8 = {"weight_packed": raw("p", "I32", w8), "weight_scale": raw("s", "F32", np.array([[0.125]])),
          "weight_shape": raw("h", "I64", np.array([1, 4]))}
    got = R.ct_dequantize("m", t8, dict(args, bits=8, strategy="channel", group_size=None))
    check(np.array_equal(got, np.array([[-16.0, -0.125, 0.0, 15.875]])), "CT int8 dequant")

    # 3-bit dense stream across word boundaries + g_idx (actorder group)
    rng = np.random.default_rng(5)
    q3 = rng.integers(-4, 4, size=(5, 23))
    gidx = rng.integers(0, 3, size=23)
    sc = bf16_exact(rng, (5, 3))
    t3 = {"weight_packed": raw("p", "I32", ct_pack(q3 + 4, 3)), "weight_scale": raw("s", "BF16", sc),
          "weight_shape": raw("h", "I64", np.array([5, 23])), "weight_g_idx": raw("g", "I32", gidx)}
    check(t3["weight_packed"].shape == (5, 3), "CT 3-bit packed width ceil(23*3/32)")
    got = R.ct_dequantize("m", t3, dict(args, bits=3, group_size=8, g_idx=True))
    check(np.array_equal(got, q3 * sc[:, gidx]), "CT 3-bit + g_idx dequant")

    # Q4_0 block for x = -16..15 (notes §4)
    b, deq = q4_0_quantize(np.arange(-16, 16))
    want = bytes.fromhex("0040 8091 91a2 a2b3 b3c4 c4d5 d5e6 e6f7 f7f8")
    check(b == want, "Q4_0 block bytes %s" % b.hex())
    got = R.ggml_dequantize("Q4_0", want)
    exp = np.array([-16] + [-14, -14, -12, -12, -10, -10, -8, -8, -6, -6, -4, -4, -2, -2, 0]
                   + [0, 2, 2, 4, 4, 6, 6, 8, 8, 10, 10, 12, 12, 14, 14, 14], dtype=np.float64)
    check(np.array_equal(got, exp) and np.array_equal(deq, exp), "Q4_0 dequant %s" % got)
    check(got[0] == -16 and got[1] == -14 and got[2] == -14 and list(got[-3:]) == [14, 14, 14], "Q4_0 ends")

    # Q8_0 block: x = 0.5 * (-127, -126, ..) -> d = 0.5 (f16 0x3800), q = the integers
    qv = np.array([-127, -100, -64, -1, 0, 1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 127] + list(range(-8, 8)))
    b, deq = q8_0_quantize(qv * 0.5)
    check(b == bytes([0x00, 0x38]) + qv.astype(np.int8).tobytes(), "Q8_0 block bytes")
    got = R.ggml_dequantize("Q8_0", b)
    check(np.array_equal(got, qv * 0.5) and np.array_equal(deq, qv * 0.5), "Q8_0 dequant")
    # a second Q8_0 block with a non-trivial scale: exact q * f16(d)
    x = np.linspace(-3.3, 2.9, 32)
    b2, deq2 = q8_0_quantize(x)
    d = float(np.frombuffer(b2[:2], "<f2")[0])
    check(np.array_equal(R.ggml_dequantize("Q8_0", b2), np.frombuffer(b2[2:], np.int8) * d), "Q8_0 dequant 2")
    check(np.max(np.abs(deq2 - x)) <= d / 2 + 1e-3, "Q8_0 quantizer error bound")


# ---------------------------------------------------------------------------
# 2. GGUF metadata round trip
# ---------------------------------------------------------------------------

def test_gguf_roundtrip(tmp):
    kvs = [
        ("general.architecture", "STRING", "gemma4"),
        ("t.u8", "UINT8", 250), ("t.i8", "INT8", -7), ("t.u16", "UINT16", 65000), ("t.i16", "INT16", -300),
        ("t.u32", "UINT32", 4000000000), ("t.i32", "INT32", -2000000000), ("t.f32", "FLOAT32", 1e-6),
        ("t.bool", "BOOL", True), ("t.str", "STRING", "héllo ▁world"), ("t.u64", "UINT64", 2 ** 63 + 5),
        ("t.i64", "INT64", -2 ** 62), ("t.f64", "FLOAT64", 0.1),
        ("t.strs", "ARRAY", ("STRING", ["<pad>", "", "▁a", "multi\nline"])),
        ("t.ints", "ARRAY", ("INT32", [6144] * 3 + [12288] * 2)),
        ("t.bools", "ARRAY", ("BOOL", [True, False, True])),
        ("t.floats", "ARRAY", ("FLOAT32", [0.5, -2.25])),
        ("t.nested", "ARRAY", ("ARRAY", [("STRING", ["x", "y"]), ("STRING", [])])),
        ("t.empty", "ARRAY", ("UINT8", [])),
    ]
    rng = np.random.default_rng(1)
    a = bf16_exact(rng, (3, 5))
    b = bf16_exact(rng, (7,))
    c = bf16_exact(rng, (2, 64))
    qb, qd = gguf_tensor(c, "Q8_0")
    tens = [("a", "F32", a.shape, encode("F32", a)), ("b", "BF16", b.shape, encode("BF16", b)),
            ("c", "Q8_0", c.shape, qb), ("d", "F16", (3,), np.array([1.5, -2, 65504], "<f2").tobytes())]
    for align in (None, 32, 64):
        p = os.path.join(tmp, "rt%s.gguf" % align)
        write_gguf(p, kvs, tens, alignment=align)
        g = R.read_gguf(p)
        A = align or 32
        check(g["version"] == 3 and g["alignment"] == A, "GGUF alignment %s" % A)
        check(g["data_start"] % A == 0, "GGUF data start aligned to %d" % A)
        for k, vt, v in kvs:
            gv = g["kv"][k]
            if vt == "ARRAY":
                et, items = v
                if et == "ARRAY":
                    items = [x[1] for x in items]
                if et == "FLOAT32":
                    items = [float(np.float32(x)) for x in items]
                ok = gv.vtype == "ARRAY" and gv.etype == et and gv.value == items
            else:
                vv = float(np.float32(v)) if vt == "FLOAT32" else v
                ok = gv.vtype == vt and gv.value == vv and type(gv.value) is type(vv)
            check(ok, "GGUF round trip %s (align %s): %r" % (k, align, gv))
        check(list(g["kv"])[:2] == (["general.alignment", "general.architecture"] if align
                                    else ["general.architecture", "t.u8"]), "GGUF key order")
        check(list(g["tensors"]) == ["a", "b", "c", "d"], "GGUF tensor order")
        t = g["tensors"]
        check(t["a"].shape == (3, 5) and t["a"].ne == (5, 3), "GGUF ne reversed")
        check(np.array_equal(t["a"].as_f64(), a) and np.array_equal(t["b"].as_f64(), b), "GGUF F32/BF16 data")
        check(np.array_equal(t["c"].as_f64(), qd), "GGUF Q8_0 data")
        check(np.array_equal(t["d"].as_f64(), [1.5, -2, 65504]), "GGUF F16 data")
        check(all(x.offset % A == 0 for x in t.values()), "GGUF offsets aligned")
        check(R._gguf_num(g["kv"], "t.f32", kind="float") == 1e-06, "FLOAT32 1e-6 read back as 1e-06")
    # version 2 reads, version 1 and a bad magic do not
    p = os.path.join(tmp, "v2.gguf")
    write_gguf(p, kvs[:3], tens[:1], version=2)
    check(R.read_gguf(p)["version"] == 2, "GGUF version 2 accepted")
    write_gguf(p, kvs[:3], tens[:1], version=1)
    expect_error(lambda: R.read_gguf(p), "version 1", "GGUF version 1")
    write_gguf(p, kvs[:3], tens[:1], magic=b"GGUG")
    expect_error(lambda: R.read_gguf(p), "magic", "GGUF magic")
    write_gguf(p, kvs[:3], [("k", "Q8_K", (256,), b"\0" * 292)])
    expect_error(lambda: R.read_gguf(p), "Q8_K", "GGUF unsupported type named")
    write_gguf(p, kvs[:3], [("a", "F32", (4,), b"\0" * 16), ("a", "F32", (4,), b"\0" * 16)])
    expect_error(lambda: R.read_gguf(p), "twice", "GGUF duplicate tensor")
    write_gguf(p, kvs[:3] + [("general.alignment", "UINT32", 12)], tens[:1])
    expect_error(lambda: R.read_gguf(p), "alignment", "GGUF bad alignment")
    write_gguf(p, kvs[:3], tens[:1])
    with open(p, "r+b") as f:
        f.truncate(os.path.getsize(p) - 8)
    expect_error(lambda: R.read_gguf(p), "beyond the end", "GGUF truncated data")


# ---------------------------------------------------------------------------
# 3. tiny models: dense vs compressed-tensors vs GGUF
# ---------------------------------------------------------------------------

S, F = "sliding_attention", "full_attention"


def tiny_config(kind):
    if kind == "e":  # E-series-like: PLE, KV sharing, double-wide MLP, proportional RoPE
        tc = dict(model_type="gemma4_text", hidden_size=64, num_hidden_layers=4, intermediate_size=64,
                  num_attention_heads=2, num_key_value_heads=1, head_dim=32, global_head_dim=64,
                  num_global_key_value_heads=None, attention_k_eq_v=False, num_kv_shared_layers=2,
                  use_double_wide_mlp=True, hidden_size_per_layer_input=32, vocab_size=48,
                  vocab_size_per_layer_input=48, enable_moe_block=False, sliding_window=3,
                  layer_types=[S, F, S, F], final_logit_softcapping=30.0, rms_norm_eps=1e-6,
                  rope_parameters={S: {"rope_type": "default", "rope_theta": 10000.0},
                                   F: {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                                       "rope_theta": 1000000.0}},
                  tie_word_embeddings=True)
    else:  # 26B-like MoE with k = v full layers and their own KV-head count
        tc = dict(model_type="gemma4_text", hidden_size=64, num_hidden_layers=3, intermediate_size=64,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=16, global_head_dim=32,
                  num_global_key_value_heads=1, attention_k_eq_v=True, num_kv_shared_layers=0,
                  use_double_wide_mlp=False, hidden_size_per_layer_input=0, vocab_size=40,
                  enable_moe_block=True, num_experts=4, top_k_experts=2, moe_intermediate_size=32,
                  sliding_window=4, layer_types=[S, F, F], rms_norm_eps=1e-6,
                  rope_parameters={S: {"rope_type": "default", "rope_theta": 10000.0},
                                   F: {"rope_type": "proportional", "partial_rotary_factor": 0.5,
                                       "rope_theta": 1000000.0}},
                  tie_word_embeddings=True)
    return tc


def random_weights(h, rng):
    """Weights in the reference's internal form (rel names; experts.gate/up/down), bf16-exact."""
    w = {}
    for k, shape in _shapes(h).items():
        if k.endswith("layer_scalar"):
            w[k] = bf16_round(1.0 + 0.3 * rng.standard_normal(shape))
        elif "norm" in k or k.endswith("router.scale") or k.endswith("per_expert_scale"):
            w[k] = bf16_round(1.0 + 0.2 * rng.standard_normal(shape))
        else:
            w[k] = bf16_exact(rng, shape, 0.2)
    return w


def _shapes(h):
    """The tensor set of MODEL.md §2.2 - §2.3 (as R._check_shapes requires it)."""
    need = {}
    H, P, L, V, Nq = h["H"], h["P"], h["L"], h["V"], h["Nq"]
    need["embed_tokens.weight"] = (V, H)
    need["norm.weight"] = (H,)
    if P:
        need["embed_tokens_per_layer.weight"] = (h["V_ple"], L * P)
        need["per_layer_model_projection.weight"] = (L * P, H)
        need["per_layer_projection_norm.weight"] = (P,)
    for i, ly in enumerate(h["layers"]):
        p = "layers.%d." % i
        d, G, I = ly["d"], ly["G"], ly["I"]
        for n in ("input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                  "post_feedforward_layernorm"):
            need[p + n + ".weight"] = (H,)
        need[p + "self_attn.q_proj.weight"] = (Nq * d, H)
        need[p + "self_attn.q_norm.weight"] = (d,)
        need[p + "self_attn.o_proj.weight"] = (H, Nq * d)
        if not ly["shared"]:
            need[p + "self_attn.k_proj.weight"] = (G * d, H)
            need[p + "self_attn.k_norm.weight"] = (d,)
            if not ly["keqv"]:
                need[p + "self_attn.v_proj.weight"] = (G * d, H)
        need[p + "mlp.gate_proj.weight"] = (I, H)
        need[p + "mlp.up_proj.weight"] = (I, H)
        need[p + "mlp.down_proj.weight"] = (H, I)
        need[p + "layer_scalar"] = (1,)
        if P:
            need[p + "per_layer_input_gate.weight"] = (P, H)
            need[p + "per_layer_projection.weight"] = (H, P)
            need[p + "post_per_layer_input_norm.weight"] = (H,)
        if h["moe"]:
            E, M = h["E"], h["M"]
            need[p + "router.proj.weight"] = (E, H)
            need[p + "router.scale"] = (H,)
            need[p + "router.per_expert_scale"] = (E,)
            need[p + "experts.gate"] = (E, M, H)
            need[p + "experts.up"] = (E, M, H)
            need[p + "experts.down"] = (E, H, M)
            for n in ("pre_feedforward_layernorm_2", "post_feedforward_layernorm_1",
                      "post_feedforward_layernorm_2"):
                need[p + n + ".weight"] = (H,)
    return need


PFX = "model.language_model."


def write_dense(d, config, w, dtype="F32", lm_head=False):
    """HF layout (model.language_model.*, fused experts) with dense weights."""
    os.makedirs(d, exist_ok=True)
    t = {}
    for k, a in w.items():
        if k.endswith("experts.gate"):
            t[PFX + k[:-4] + "gate_up_proj"] = (dtype, np.concatenate([a, w[k[:-4] + "up"]], axis=1))
        elif k.endswith("experts.up"):
            continue
        elif k.endswith("experts.down"):
            t[PFX + k + "_proj"] = (dtype, a)
        else:
            t[PFX + k] = (dtype, a)
    if lm_head:
        t["lm_head.weight"] = (dtype, w["embed_tokens.weight"])
    write_safetensors(os.path.join(d, "model.safetensors"), t)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(config, f, indent=1)


_LINEAR_RE = R._CT_LINEAR


def ct_plan(rel, h):
    """(bits, strategy, group, symmetric, actorder) the tiny CT checkpoints use for each module, matching
    the config groups of ct_config below, or None (kept dense)."""
    if rel.endswith("router.proj"):
        return None
    if ".experts." in rel:
        return (8, "channel", None, False, False)  # group "experts": regex beats the class target
    if rel == "layers.0.mlp.down_proj":
        return (4, "group", 16, False, True)  # exact name: asymmetric g16 with g_idx
    if rel == "layers.1.self_attn.q_proj":
        return (3, "group", 24, True, False)  # exact name: 3-bit dense stream, partial last group
    return (4, "group", 32, True, False)  # class "Linear"


def ct_config():
    return {
        "quant_method": "compressed-tensors", "format": "pack-quantized", "quantization_status": "compressed",
        "config_groups": {
            "group_0": {"targets": ["Linear"], "weights": {"num_bits": 4, "type": "int", "symmetric": True,
                                                           "strategy": "group", "group_size": 32},
                        "input_activations": None, "output_activations": None, "format": "pack-quantized"},
            "experts": {"targets": ["re:.*experts\\.\\d+\\.(gate|up|down)_proj$"],
                        "weights": {"num_bits": 8, "type": "int", "symmetric": False, "strategy": "channel",
                                    "group_size": None, "zp_dtype": "torch.int8"}},
            "down0": {"targets": [PFX + "layers.0.mlp.down_proj"],
                      "weights": {"num_bits": 4, "symmetric": False, "group_size": 16, "actorder": "group"}},
            "q1": {"targets": [PFX + "layers.1.self_attn.q_proj"],
                   "weights": {"num_bits": 3, "symmetric": True, "strategy": "group", "group_size": 24}},
        },
        "ignore": ["lm_head", "re:.*router\\.proj$"],
        "kv_cache_scheme": None, "global_compression_ratio": None,
    }


def write_ct(d, config, w, h, rng, plan=ct_plan, lm_head=True, wrap=True, extra=None):
    """compressed-tensors checkpoint of w; returns the exact weights the reader must produce.
    extra: rel module -> matrix written (quantized) but not expected back (shared-layer K/V)."""
    os.makedirs(d, exist_ok=True)
    t, want = {}, {}

    def module(rel, mat):
        p = plan(rel, h)
        if p is None:
            t[PFX + rel + ".weight"] = ("BF16", mat)
            return mat
        bits, strat, gs, sym, ao = p
        gidx = rng.integers(0, -(-mat.shape[1] // gs), size=mat.shape[1]) if ao else None
        tens, deq = ct_quantize(mat, bits, strat, gs, sym, gidx)
        for suf, v in tens.items():
            t[PFX + rel + "." + suf] = v
        return deq

    for k, a in w.items():
        if k.endswith(".weight") and _LINEAR_RE.match(k[:-7]):
            want[k] = module(k[:-7], a)
        elif k.endswith(("experts.gate", "experts.up", "experts.down")):
            n = k.rsplit(".", 1)[1]
            want[k] = np.stack([module("%s.%d.%s_proj" % (k.rsplit(".", 1)[0], e, n), a[e])
                                for e in range(a.shape[0])])
        else:
            t[PFX + k] = ("BF16", a)
            want[k] = a
    for rel, mat in (extra or {}).items():
        module(rel, mat)
    if lm_head:
        t["lm_head.weight"] = ("BF16", w["embed_tokens.weight"])
    cfg = dict(config) if not wrap else {"model_type": "gemma4", "text_config": dict(config),
                                         "tie_word_embeddings": True}
    cfg["quantization_config"] = ct_config()
    write_safetensors(os.path.join(d, "model.safetensors"), t)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    return want


GGUF_NAMES = [  # (reference rel suffix, GGUF suffix), per layer
    ("input_layernorm.weight", "attn_norm.weight"), ("self_attn.q_proj.weight", "attn_q.weight"),
    ("self_attn.k_proj.weight", "attn_k.weight"), ("self_attn.v_proj.weight", "attn_v.weight"),
    ("self_attn.o_proj.weight", "attn_output.weight"), ("self_attn.q_norm.weight", "attn_q_norm.weight"),
    ("self_attn.k_norm.weight", "attn_k_norm.weight"),
    ("post_attention_layernorm.weight", "post_attention_norm.weight"),
    ("pre_feedforward_layernorm.weight", "ffn_norm.weight"), ("mlp.gate_proj.weight", "ffn_gate.weight"),
    ("mlp.up_proj.weight", "ffn_up.weight"), ("mlp.down_proj.weight", "ffn_down.weight"),
    ("post_feedforward_layernorm.weight", "post_ffw_norm.weight"),
    ("pre_feedforward_layernorm_2.weight", "pre_ffw_norm_2.weight"),
    ("post_feedforward_layernorm_1.weight", "post_ffw_norm_1.weight"),
    ("post_feedforward_layernorm_2.weight", "post_ffw_norm_2.weight"),
    ("router.proj.weight", "ffn_gate_inp.weight"), ("router.scale", "ffn_gate_inp.scale"),
    ("router.per_expert_scale", "ffn_down_exps.scale"), ("experts.down", "ffn_down_exps.weight"),
    ("layer_scalar", "layer_output_scale.weight"), ("per_layer_input_gate.weight", "inp_gate.weight"),
    ("per_layer_projection.weight", "proj.weight"), ("post_per_layer_input_norm.weight", "post_norm.weight"),
]
GGUF_GLOBAL = [("embed_tokens.weight", "token_embd.weight"), ("norm.weight", "output_norm.weight"),
               ("embed_tokens_per_layer.weight", "per_layer_token_embd.weight"),
               ("per_layer_model_projection.weight", "per_layer_model_proj.weight"),
               ("per_layer_projection_norm.weight", "per_layer_proj_norm.weight")]


def write_gguf_model(path, tc, h, w, outtype, alignment=None, output=False, fused=True, ff_array=None,
                     extra_tensors=(), drop=(), kv_override=None):
    """Write a gemma4 GGUF the way the converter does (notes §5, §6); returns the exact weights
    (reference form) the reader must produce."""
    L = h["L"]
    pre = "gemma4."
    lt = h["layer_types"]
    Gs = [ly["G"] for ly in h["layers"]]
    Is = [ly["I"] for ly in h["layers"]]
    kvs = [("general.architecture", "STRING", "gemma4"), ("general.name", "STRING", "tiny"),
           (pre + "block_count", "UINT32", L), (pre + "context_length", "UINT32", 4096),
           (pre + "embedding_length", "UINT32", h["H"])]
    if len(set(Is)) > 1 or ff_array:
        kvs.append((pre + "feed_forward_length", "ARRAY", ("INT32", Is)))
    else:
        kvs.append((pre + "feed_forward_length", "UINT32", Is[0]))
    kvs.append((pre + "attention.head_count", "UINT32", h["Nq"]))
    if tc.get("num_global_key_value_heads") is not None:
        kvs.append((pre + "attention.head_count_kv", "ARRAY", ("INT32", Gs)))
    else:
        kvs.append((pre + "attention.head_count_kv", "UINT32", Gs[0]))
    gd = tc["global_head_dim"]
    part = tc["rope_parameters"][F].get("partial_rotary_factor", 1.0)
    kvs += [(pre + "attention.key_length", "UINT32", gd), (pre + "attention.value_length", "UINT32", gd),
            (pre + "attention.key_length_swa", "UINT32", tc["head_dim"]),
            (pre + "attention.value_length_swa", "UINT32", tc["head_dim"]),
            (pre + "attention.layer_norm_rms_epsilon", "FLOAT32", tc["rms_norm_eps"]),
            (pre + "attention.sliding_window", "UINT32", tc["sliding_window"]),
            (pre + "attention.sliding_window_pattern", "ARRAY", ("BOOL", [t == S for t in lt])),
            (pre + "attention.shared_kv_layers", "UINT32", tc.get("num_kv_shared_layers") or 0),
            (pre + "embedding_length_per_layer_input", "UINT32", tc.get("hidden_size_per_layer_input") or 0),
            (pre + "rope.freq_base", "FLOAT32", tc["rope_parameters"][F]["rope_theta"]),
            (pre + "rope.freq_base_swa", "FLOAT32", tc["rope_parameters"][S]["rope_theta"]),
            (pre + "rope.dimension_count", "UINT32", gd),
            (pre + "rope.dimension_count_swa", "UINT32", tc["head_dim"])]
    if tc.get("final_logit_softcapping") is not None:
        kvs.append((pre + "final_logit_softcapping", "FLOAT32", tc["final_logit_softcapping"]))
    if h["moe"]:
        kvs += [(pre + "expert_count", "UINT32", h["E"]), (pre + "expert_used_count", "UINT32", h["K"]),
                (pre + "expert_feed_forward_length", "UINT32", h["M"])]
    kvs += [("general.file_type", "UINT32", 0), ("tokenizer.ggml.model", "STRING", "gemma4"),
            ("tokenizer.ggml.tokens", "ARRAY", ("STRING", ["<t%d>" % i for i in range(h["V"])]))]
    if kv_override:
        kvs = [(k, vt, v) for k, vt, v in kvs if k not in kv_override] + \
              [(k, vt, v) for k, (vt, v) in kv_override.items() if vt is not None]

    tens, want = [], {}

    def add(gname, rel, x, force_f32=False):
        ty = outtype
        if force_f32 or x.ndim == 1 or gname.endswith("_norm.weight") or "ffn_gate_inp" in gname \
                or not gname.endswith(".weight"):
            ty = "F32"
        elif x.shape[-1] % 32 and ty in ("Q4_0", "Q8_0"):
            ty = "F16"  # converter fallback for rows that are not whole blocks
        b, deq = gguf_tensor(x, ty)
        tens.append((gname, ty, x.shape, b))
        if rel is not None:
            want[rel] = deq
        return deq

    nA = int(np.floor(part * gd / 2))
    rf = np.concatenate([np.ones(nA), np.full(gd // 2 - nA, 1e30)]).astype(np.float32)
    tens.append(("rope_freqs.weight", "F32", rf.shape, rf.astype("<f4").tobytes()))
    for rel, gname in GGUF_GLOBAL:
        if rel in w:
            deq = add(gname, rel, w[rel])
    if output:
        b = tens[[t[0] for t in tens].index("token_embd.weight")]
        tens.append(("output.weight",) + b[1:])
    for i in range(L):
        p = "layers.%d." % i
        for rs, gs_ in GGUF_NAMES:
            if p + rs in w:
                add("blk.%d.%s" % (i, gs_), p + rs, w[p + rs])
        if h["moe"]:
            gu = np.concatenate([w[p + "experts.gate"], w[p + "experts.up"]], axis=1)
            if fused:
                deq = add("blk.%d.ffn_gate_up_exps.weight" % i, None, gu)
                want[p + "experts.gate"] = deq[:, :h["M"]]
                want[p + "experts.up"] = deq[:, h["M"]:]
            else:
                add("blk.%d.ffn_gate_exps.weight" % i, p + "experts.gate", w[p + "experts.gate"])
                add("blk.%d.ffn_up_exps.weight" % i, p + "experts.up", w[p + "experts.up"])
    tens += list(extra_tensors)
    tens = [t for t in tens if t[0] not in drop]
    write_gguf(path, kvs, tens, alignment=alignment)
    return want


def same_hp(a, b):
    ks = ("H", "L", "Nq", "V", "W", "P", "eps", "softcap", "moe", "E", "K", "M", "V_ple", "F0", "layers",
          "layer_types", "global_head_dim")
    diff = [k for k in ks if a.get(k) != b.get(k)]
    for t in a["rope"]:
        for tab in R.ROPE_TABLES:
            d = next(ly["d"] for ly in a["layers"] if ly["type"] == t)
            if not np.array_equal(R.rope_inv_freq(a["rope"][t], d, tab), R.rope_inv_freq(b["rope"][t], d, tab)):
                diff.append("rope %s %s" % (t, tab))
    return diff


def same_weights(got, want):
    bad = sorted(set(got) ^ set(want))
    bad += [k for k in want if k in got and (got[k].shape != want[k].shape or not np.array_equal(got[k], want[k]))]
    return bad


def compare_models(label, got, ref_model, want, tokens):
    d = same_hp(got["hp"], ref_model["hp"])
    check(not d, "%s: hyper-parameters differ: %s" % (label, d))
    bad = same_weights(got["w"], want)
    check(not bad, "%s: weights differ: %s" % (label, bad[:6]))
    m2 = dict(ref_model, w=want)
    for tab in ("f32", "f64"):
        a = R.forward(got, tokens, rope_tables=tab)
        b = R.forward(m2, tokens, rope_tables=tab)
        check(np.array_equal(a, b), "%s: logits differ (%s tables): max %g" % (label, tab, np.max(np.abs(a - b))))


def test_tiny(tmp):
    for kind in ("e", "moe"):
        rng = np.random.default_rng(42 if kind == "e" else 7)
        tc = tiny_config(kind)
        _, h, _ = R.parse_config(tc)
        h["V_ple"] = tc.get("vocab_size_per_layer_input")
        w = random_weights(h, rng)
        tokens = rng.integers(0, tc["vocab_size"], size=9)
        dense_dir = os.path.join(tmp, kind + "-dense")
        write_dense(dense_dir, tc, w, lm_head=True)
        ref = R.load_checkpoint(dense_dir)
        check(not same_weights(ref["w"], w), "%s: dense checkpoint round trip" % kind)

        # compressed-tensors
        ct_dir = os.path.join(tmp, kind + "-ct")
        # the KV-shared layers of the E model also carry (redundant, ignored) K/V modules, as PTQ exports do
        extra = {} if kind != "e" else {"layers.2.self_attn.k_proj": bf16_exact(rng, (32, 64)),
                                        "layers.2.self_attn.v_proj": bf16_exact(rng, (32, 64)),
                                        "layers.3.self_attn.k_proj": bf16_exact(rng, (64, 64))}
        want = write_ct(ct_dir, tc, w, h, rng, extra=extra)
        m = R.load_checkpoint(ct_dir)
        compare_models("%s CT" % kind, m, ref, want, tokens)
        check(m["ignored"]["shared_kv"] == 3 * len(extra), "%s CT: shared-layer K/V ignored" % kind)
        nq = sum(1 for k in want if k.endswith(".weight") and _LINEAR_RE.match(k[:-7])
                 and not k.endswith("router.proj.weight"))
        nq += sum(h["E"] * 3 for _ in range(h["L"])) if h["moe"] else 0
        check(len(m["quant"]) == nq and m["format"] == "compressed-tensors",
              "%s CT: %d quantized modules, expected %d" % (kind, len(m["quant"]), nq))
        if kind == "e":
            check(m["quant"]["layers.0.mlp.down_proj"]["g_idx"] and
                  m["quant"]["layers.1.self_attn.q_proj"]["bits"] == 3 and
                  m["quant"]["layers.0.mlp.up_proj"]["group"] == "group_0", "CT group selection")
        else:
            check(m["quant"]["layers.0.experts.3.down_proj"]["group"] == "experts", "CT experts group")
        # the same as gemma4_text (no wrapper) and without lm_head
        want2 = write_ct(ct_dir + "-text", tc, w, h, np.random.default_rng(3), lm_head=False, wrap=False)
        compare_models("%s CT text" % kind, R.load_checkpoint(ct_dir + "-text"), ref, want2, tokens)
        # the CLI end to end (tokens.json, meta)
        with open(os.path.join(ct_dir, "tokens.json"), "w") as f:
            json.dump([int(x) for x in tokens], f)
        out = os.path.join(tmp, kind + "-ct.npz")
        check(R.main([ct_dir, "-o", out]) == 0, "%s CT CLI" % kind)
        z = np.load(out)
        check(np.array_equal(z["logits_f64"], R.forward(dict(ref, w=want), tokens)), "%s CT CLI logits" % kind)
        meta = json.loads(z["meta.json"])
        check(meta.get("format") == "compressed-tensors" and meta["quantized_modules"] == nq, "CT meta %s" % meta)

        # GGUF in every readable type, alignments 32 / 64
        for outtype, align in (("F32", None), ("BF16", 64), ("F16", None), ("Q8_0", 32), ("Q4_0", 64)):
            gp = os.path.join(tmp, "%s-%s.gguf" % (kind, outtype))
            shared_kv = []
            if kind == "e" and outtype == "Q4_0":  # the converter keeps the shared layers' K/V
                for i, d in ((2, 32), (3, 64)):
                    for n, shp in (("attn_k.weight", (d, 64)), ("attn_v.weight", (d, 64)), ("attn_k_norm.weight", (d,))):
                        x = bf16_exact(rng, shp)
                        shared_kv.append(("blk.%d.%s" % (i, n), "F32", shp, encode("F32", x)))
            want = write_gguf_model(gp, tc, h, w, outtype, alignment=align, output=(outtype == "Q8_0"),
                                    fused=(outtype != "F16"), extra_tensors=shared_kv)
            g = R.load_checkpoint(gp)
            check(g["ignored"]["shared_kv"] == len(shared_kv), "%s GGUF %s shared K/V ignored" % (kind, outtype))
            compare_models("%s GGUF %s" % (kind, outtype), g, ref, want, tokens)
            if outtype in ("F32", "BF16"):
                check(not same_weights(g["w"], w), "%s GGUF %s exact" % (kind, outtype))
            if outtype in ("Q8_0", "Q4_0"):
                check(len(g["quant"]) > 0 and all(v["type"] == outtype for v in g["quant"].values()),
                      "%s GGUF %s quant info" % (kind, outtype))
        with open(os.path.join(tmp, "tokens.json"), "w") as f:
            json.dump([int(x) for x in tokens], f)
        out = os.path.join(tmp, kind + "-gguf.npz")
        check(R.main([os.path.join(tmp, "%s-BF16.gguf" % kind), "-o", out]) == 0, "%s GGUF CLI" % kind)
        z = np.load(out)
        check(np.array_equal(z["logits_f64"], R.forward(ref, tokens)), "%s GGUF CLI logits = dense" % kind)
        meta = json.loads(z["meta.json"])
        check(meta.get("format") == "gguf" and list(meta["files"]) == ["%s-BF16.gguf" % kind], "GGUF meta %s" % meta)

    # --- refusals (on the E model) ---
    rng = np.random.default_rng(42)
    tc = tiny_config("e")
    _, h, _ = R.parse_config(tc)
    h["V_ple"] = 48
    w = random_weights(h, rng)
    gp = os.path.join(tmp, "bad.gguf")
    write_gguf_model(gp, tc, h, w, "F32", extra_tensors=[("blk.0.mystery.weight", "F32", (4,), b"\0" * 16)])
    expect_error(lambda: R.load_checkpoint(gp), "unknown tensor blk.0.mystery", "GGUF unknown name")
    write_gguf_model(gp, tc, h, w, "F32", extra_tensors=[("blk.9.attn_q.weight", "F32", (4,), b"\0" * 16)])
    expect_error(lambda: R.load_checkpoint(gp), "unknown tensor blk.9", "GGUF layer out of range")
    write_gguf_model(gp, tc, h, w, "F32", drop=("blk.0.ffn_up.weight",))
    expect_error(lambda: R.load_checkpoint(gp), "missing: layers.0.mlp.up_proj", "GGUF missing tensor")
    write_gguf_model(gp, tc, h, w, "F32", drop=("rope_freqs.weight",))
    expect_error(lambda: R.load_checkpoint(gp), "rope_freqs", "GGUF without rope_freqs")
    write_gguf_model(gp, tc, h, w, "F32", drop=("blk.0.attn_v.weight",))
    expect_error(lambda: R.load_checkpoint(gp), "attn_v", "GGUF sliding layer without attn_v")
    write_gguf_model(gp, tc, h, w, "F32", kv_override={"general.architecture": ("STRING", "llama")})
    expect_error(lambda: R.load_checkpoint(gp), "gemma4", "GGUF other architecture")
    write_gguf_model(gp, tc, h, w, "F32", kv_override={"gemma4.attention.sliding_window": (None, None)})
    expect_error(lambda: R.load_checkpoint(gp), "sliding_window", "GGUF missing key")
    write_gguf_model(gp, tc, h, w, "F32", kv_override={"gemma4.feed_forward_length":
                                                       ("ARRAY", ("INT32", [64, 128, 64, 128]))})
    expect_error(lambda: R.load_checkpoint(gp), "feed_forward_length", "GGUF odd MLP widths")
    write_gguf_model(gp, tc, h, w, "F32", kv_override={"gemma4.attention.key_length": ("FLOAT32", 64.0)})
    expect_error(lambda: R.load_checkpoint(gp), "expected an integer", "GGUF wrongly typed key")
    # no layer_output_scale: llama.cpp's "no scaling"
    want = write_gguf_model(gp, tc, h, w, "F32", drop=tuple("blk.%d.layer_output_scale.weight" % i for i in range(4)))
    m = R.load_checkpoint(gp)
    check(all(np.array_equal(m["w"]["layers.%d.layer_scalar" % i], [1.0]) for i in range(4)),
          "GGUF absent layer_output_scale = 1.0")
    # scalar sliding_window_pattern (every n-th layer full) and an all-equal feed_forward array
    tc2 = dict(tc, use_double_wide_mlp=False)
    _, h2, _ = R.parse_config(tc2)
    h2["V_ple"] = 48
    w2 = {k: v for k, v in w.items()}
    for i in (2, 3):
        for n in ("gate", "up"):
            w2["layers.%d.mlp.%s_proj.weight" % (i, n)] = w["layers.%d.mlp.%s_proj.weight" % (i, n)][:64]
        w2["layers.%d.mlp.down_proj.weight" % i] = w["layers.%d.mlp.down_proj.weight" % i][:, :64]
    want = write_gguf_model(gp, tc2, h2, w2, "F32", ff_array=True,
                            kv_override={"gemma4.attention.sliding_window_pattern": ("UINT32", 2)})
    m = R.load_checkpoint(gp)
    check(m["hp"]["layer_types"] == [S, F, S, F] and not m["hp"]["double_wide"], "GGUF scalar pattern / flat ff")

    ctd = os.path.join(tmp, "bad-ct")
    write_ct(ctd, tc, w, h, rng)
    cfg = json.load(open(os.path.join(ctd, "config.json")))

    def with_cfg(mod):
        c = json.loads(json.dumps(cfg))
        mod(c["quantization_config"])
        with open(os.path.join(ctd, "config.json"), "w") as f:
            json.dump(c, f)
        return lambda: R.load_checkpoint(ctd)

    expect_error(with_cfg(lambda q: q["config_groups"]["group_0"]["weights"].update(num_bits=8)),
                 "weight_packed shape", "CT config bits disagree with shapes")
    expect_error(with_cfg(lambda q: q["config_groups"]["group_0"]["weights"].update(group_size=64)),
                 "weight_scale shape", "CT config group disagrees with shapes")
    expect_error(with_cfg(lambda q: q["ignore"].append("re:.*layers\\.2\\.mlp\\.up_proj")),
                 "ignore lists it", "CT packed module in ignore")
    expect_error(with_cfg(lambda q: q["ignore"].remove("lm_head")), "not listed in ignore",
                 "CT dense targeted module")
    expect_error(with_cfg(lambda q: q.update(format="int-quantized")), "int-quantized", "CT other format")
    expect_error(with_cfg(lambda q: q["config_groups"]["group_0"].update(
        input_activations={"num_bits": 8, "type": "int"})), "input_activations", "CT W8A8")
    expect_error(with_cfg(lambda q: q["config_groups"].pop("down0")), "weight_scale shape",
                 "CT module falling back to a symmetric group")
    expect_error(with_cfg(lambda q: q["config_groups"]["q1"]["weights"].update(num_bits=4)),
                 "", "CT exact-name group with wrong bits")
    expect_error(with_cfg(lambda q: q.update(quant_method="gptq")), "gptq", "other quant_method")
    # mixed-precision with per-group formats, and a preset group
    c2 = with_cfg(lambda q: (q.update(format="mixed-precision"),
                             [g.update(format="pack-quantized") for g in q["config_groups"].values()]))
    check(len(c2()["quant"]) > 0, "CT mixed-precision accepted")
    expect_error(with_cfg(lambda q: (q.update(format="mixed-precision"),
                                     [g.update(format="pack-quantized") for g in q["config_groups"].values()],
                                     q["config_groups"]["q1"].update(format="float-quantized"))),
                 "float-quantized", "CT mixed-precision with another group format")
    expect_error(with_cfg(lambda q: (q["config_groups"].pop("group_0"),
                                     q["config_groups"].update(W4A16=["Linear"]))),
                 "weight_scale shape", "CT preset W4A16 is group 128")


# ---------------------------------------------------------------------------
# 4. optional: convert real HF-layout checkpoints (gempack fixture --layout hf)
# ---------------------------------------------------------------------------

def fixture_plan(rel, h):
    if rel.endswith("router.proj"):
        return None
    if ".experts." in rel:
        return (8, "channel", None, False, False)
    return (4, "group", 32, True, False)


def test_fixture(src, tmp):
    ref = R.load_checkpoint(src)
    h = ref["hp"]
    tc = ref["text_config"]
    tokens = R._load_tokens(os.path.join(src, "tokens.json"))
    base = R.forward(ref, tokens, rope_tables="f64")
    name = os.path.basename(os.path.normpath(src))
    for outtype in ("BF16", "Q8_0", "Q4_0"):
        gp = os.path.join(tmp, "%s-%s.gguf" % (name, outtype))
        want = write_gguf_model(gp, tc, h, ref["w"], outtype)
        g = R.load_checkpoint(gp)
        compare_models("%s GGUF %s" % (name, outtype), g, ref, want, tokens)
        if outtype == "BF16":
            check(np.array_equal(R.forward(g, tokens, rope_tables="f64"), base),
                  "%s GGUF BF16 logits = HF logits" % name)
    d = os.path.join(tmp, name + "-ct")
    cfg = dict(ref["config"])
    want = write_ct(d, tc, ref["w"], h, np.random.default_rng(0), plan=fixture_plan,
                    wrap="text_config" in cfg)
    qc = {"quant_method": "compressed-tensors", "format": "pack-quantized",
          "config_groups": {"group_0": {"targets": ["Linear"], "weights": {
              "num_bits": 4, "type": "int", "symmetric": True, "strategy": "group", "group_size": 32}},
              "experts": {"targets": ["re:.*experts\\.\\d+\\."], "weights": {
                  "num_bits": 8, "type": "int", "symmetric": False, "strategy": "channel"}}},
          "ignore": ["lm_head", "re:.*router\\.proj$"]}
    c = dict(cfg)  # the checkpoint's own config (gemma4 / gemma4_unified / gemma4_text) + the CT block
    c["quantization_config"] = qc
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(c, f, indent=1)
    m = R.load_checkpoint(d)
    compare_models("%s CT" % name, m, ref, want, tokens)
    print("%s: GGUF BF16/Q8_0/Q4_0 and CT int4 g32 (+int8 channel experts): %d tensors, %d CT modules"
          % (name, len(ref["w"]), len(m["quant"])))


# ---------------------------------------------------------------------------
# every ggml type: reference.py's dequantization against gguf-py's quants.py (the second reading,
# build-ref/ggml/gguf-py from setup.sh), bit for bit, on random blocks and blocks at their field edges
# ---------------------------------------------------------------------------

# byte offsets of the f16 scale fields of each block (IQ1_M's f16 is spread over its scales' top nibbles)
F16_FIELDS = {"Q4_0": (0,), "Q4_1": (0, 2), "Q5_0": (0,), "Q5_1": (0, 2), "Q8_0": (0,), "Q2_K": (80, 82),
              "Q3_K": (108,), "Q4_K": (0, 2), "Q5_K": (0, 2), "Q6_K": (208,), "IQ4_NL": (0,), "IQ4_XS": (0,),
              "IQ3_XXS": (0,), "IQ3_S": (0,), "IQ2_XXS": (0,), "IQ2_XS": (0,), "IQ2_S": (0,), "IQ1_S": (0,),
              "IQ1_M": (), "TQ1_0": (52,), "TQ2_0": (64,), "MXFP4": ()}


def gguf_py_quants():
    """gguf-py's quants module, imported from build-ref without the rest of the package."""
    import importlib
    import types
    here = os.path.dirname(os.path.abspath(__file__))
    d = os.path.join(here, "..", "build-ref", "ggml", "gguf-py", "gguf")
    if not os.path.exists(os.path.join(d, "quants.py")):
        return None
    if "gguf" not in sys.modules:
        pkg = types.ModuleType("gguf")
        pkg.__path__ = [d]
        sys.modules["gguf"] = pkg
    return importlib.import_module("gguf.quants")


def random_blocks(rng, tname, n):
    """n blocks of random bytes with finite f16 scales; the first two blocks hold every code bit at
    0 and at 1 (with d = 1.0 and the largest finite f16, 65504)."""
    blk, bsz, _ = R.GGML_DEQUANT[tname]
    b = rng.integers(0, 256, size=(n, bsz), dtype=np.uint8)
    b[0], b[1] = 0, 0xFF
    for off in F16_FIELDS[tname]:
        u = b[:, off:off + 2].copy().view("<u2")
        inf = (u & 0x7C00) == 0x7C00
        u[inf] &= np.uint16(0xBFFF)  # exponent 11110: finite
        u[0], u[1] = 0x3C00, 0x7BFF
        b[:, off:off + 2] = u.view(np.uint8).reshape(n, 2)
    if tname == "IQ1_M":  # f16 nibbles at the top of the four u16 scales: keep its exponent below 31
        b[:, 55] &= np.uint8(0xBF)
    return b


def test_ggml_types(tmp):
    q = gguf_py_quants()
    if q is None:
        print("SKIP: build-ref/ggml/gguf-py missing (run setup.sh): ggml types not checked against gguf-py")
        return
    try:
        R.ggml_tables()
    except R.ReferenceError as e:
        check(False, "ggml codebooks: %s" % e)
        return
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType
    rng = np.random.default_rng(46)
    for tname, (blk, bsz, _) in R.GGML_DEQUANT.items():
        qt = GGMLQuantizationType[tname]
        check(GGML_QUANT_SIZES[qt] == (blk, bsz), "%s block size %s, gguf-py %s" % (tname, (blk, bsz),
                                                                                    GGML_QUANT_SIZES[qt]))
        b = random_blocks(rng, tname, 64)
        got = R.ggml_dequantize(tname, b.tobytes())
        with np.errstate(over="ignore", invalid="ignore"):
            want = np.asarray(q.dequantize(b, qt), dtype=np.float32).reshape(-1)
        same = got.shape == want.shape and np.array_equal(got.view(np.uint32), want.view(np.uint32))
        bad = "" if same or got.shape != want.shape else " (first at %d: %r vs %r)" % (
            int(np.argmax(got.view(np.uint32) != want.view(np.uint32))), got[np.argmax(got != want)],
            want[np.argmax(got != want)])
        check(same, "%s: reference.py and gguf-py differ on %d random blocks%s" % (tname, b.shape[0], bad))
        check(np.isfinite(got[blk:]).all() or tname == "MXFP4", "%s: non-finite values from finite scales" % tname)
    # hand-computed values (ggml-quants.c's formulas) for block fields at their edges
    q4k = np.zeros(144, np.uint8)
    q4k[0:2] = np.frombuffer(np.float16(0.5).tobytes(), np.uint8)   # d
    q4k[2:4] = np.frombuffer(np.float16(0.25).tobytes(), np.uint8)  # dmin
    q4k[4], q4k[8] = 63, 63          # sub-block 0: scale 63, min 63
    q4k[12] = 0xF1                   # sub-block 4: scale low 1 | (q[0] >> 6) << 4, min 15 | (q[4] >> 6) << 4
    q4k[16:48] = 0xF0                # sub-block 0 codes 0, sub-block 1 codes 15
    v = R.ggml_dequantize("Q4_K", q4k.tobytes())
    check(v[0] == -15.75 and v[32] == 0.0 and v[128] == 0.0 - 0.25 * 15, "Q4_K edge vector %s" % v[[0, 32, 128]])
    mx = np.zeros(17, np.uint8)
    mx[1] = 0x7F                      # codes 0xF (−6 doubled: −12) then 0x7 (12)
    for e, scale in ((0, 2.0 ** -128), (1, 2.0 ** -127), (127, 2.0 ** -1), (250, 2.0 ** 122)):
        mx[0] = e
        v = R.ggml_dequantize("MXFP4", mx.tobytes())
        check(v[0] == np.float32(-12 * scale) and v[16] == np.float32(12 * scale) and v[1] == 0,
              "MXFP4 e=%d: %s" % (e, v[[0, 16]]))
    # the GGUF reader takes them: a file of mixed types reads back as the dequantized blocks
    rng = np.random.default_rng(7)
    blocks = {t: random_blocks(rng, t, 4) for t in ("Q4_K", "IQ2_XXS", "MXFP4")}
    p = os.path.join(tmp, "mixed.gguf")
    write_gguf(p, [("general.architecture", "STRING", "gemma4")],
               [("a", "Q4_K", (4, 256), blocks["Q4_K"].tobytes()),
                ("b", "IQ2_XXS", (2, 512), blocks["IQ2_XXS"].tobytes()),
                ("c", "MXFP4", (2, 2, 32), blocks["MXFP4"].tobytes())])
    gf = R.read_gguf(p)
    for name, t in (("a", "Q4_K"), ("b", "IQ2_XXS"), ("c", "MXFP4")):
        got = gf["tensors"][name].as_f64()
        want = R.ggml_dequantize(t, blocks[t].tobytes()).astype(np.float64).reshape(got.shape)
        check(gf["tensors"][name].type == t and np.array_equal(got, want, equal_nan=True), "GGUF %s tensor read" % t)
    iq = R.ggml_tables()
    check(list(iq["kvalues_iq4nl"][[0, 15]]) == [-127, 113] and int(iq["iq2xxs_grid"][0]) == 0x0808080808080808,
          "ggml codebooks read (kvalues_iq4nl ends, iq2xxs_grid[0])")


def main(argv):
    fixtures = []
    args = list(argv)
    while args:
        a = args.pop(0)
        if a == "--fixture" and args:
            fixtures.append(args.pop(0))
        else:
            print("usage: test_formats.py [--fixture HF_CHECKPOINT_DIR]...")
            return 2
    tmp = tempfile.mkdtemp(prefix="gempack-test-formats-")
    try:
        test_vectors()
        test_ggml_types(tmp)
        test_gguf_roundtrip(tmp)
        test_tiny(tmp)
        for fx in fixtures:
            test_fixture(fx, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if FAILS:
        print("test_formats: %d of %d checks FAILED" % (len(FAILS), CHECKS[0]))
        return 1
    print("test_formats: all %d checks passed" % CHECKS[0])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
