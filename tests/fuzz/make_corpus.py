#!/usr/bin/python3
"""Writes the seed corpora of the fuzz harnesses (deterministic; the outputs
are committed under tests/fuzz/corpus/). Run from the repository root:
    /usr/bin/python3 tests/fuzz/make_corpus.py BUILD_DIR
It uses `gempack fixture` for realistic configs."""
import hashlib, io, json, os, random, struct, subprocess, sys, tempfile, zipfile, zlib

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

# round three (docs/TESTING.md hardening3.sh): strings that would drive a terminal, a duplicate member
put("safetensors", "escape-names", safetensors([("a\x1b]0;t\x07.weight", "BF16", [2], bytes(4)),
                                                 ("b\u009b31m", "F32", [1], struct.pack("<f", float("nan")))]))
z = io.BytesIO()
with zipfile.ZipFile(z, "w", zipfile.ZIP_STORED) as zf:
    for name, data in [("tokens.npy", tok), ("tokens.npy", tok), ("logits.npy", logits)]:
        zf.writestr(zipfile.ZipInfo(name, (1980, 1, 1, 0, 0, 0)), data)
put("npy", "duplicate-member.npz", z.getvalue())

put("index", "valid.json", json.dumps({"metadata": {"total_size": 2},
                                       "weight_map": {"a": "model-00001-of-00002.safetensors",
                                                      "b": "model-00002-of-00002.safetensors"}}))
put("index", "missing-shard.json", json.dumps({"weight_map": {"a": "model-00003-of-00002.safetensors"}}))


def pack(tensors, align=64, extra=None, files=()):
    """A .gpk v1 image (docs/FORMAT.md) of (name, dtype, shape, bytes), stored files (name, bytes) and
    extra manifest fields."""
    data, recs, frecs = b"", [], []
    for name, dt, shape, b in tensors:
        data += b"\0" * ((-len(data)) % align)
        recs.append({"name": name, "dtype": dt, "shape": shape, "offset": len(data), "nbytes": len(b),
                     "crc32": zlib.crc32(b)})
        data += b
    for name, b in files:
        data += b"\0" * ((-len(data)) % align)
        frecs.append({"name": name, "offset": len(data), "nbytes": len(b), "crc32": zlib.crc32(b),
                      "sha256": hashlib.sha256(b).hexdigest()})
        data += b
    feats = ["dtype:BF16"] + (["files"] if files else [])
    m = json.dumps({"format": "gempack", "version": [1, 0], "required_features": feats,
                    "tensors": recs, **({"files": frecs} if files else {}), **(extra or {})},
                   separators=(",", ":")).encode()
    hdr = bytearray(64)
    hdr[0:8] = b"\x89GPK\r\n\x1a\n"
    struct.pack_into("<HHIQQQQQI", hdr, 8, 1, 0, align, align + len(data) + len(m), align, len(data),
                     align + len(data), len(m), zlib.crc32(m))
    struct.pack_into("<I", hdr, 60, zlib.crc32(bytes(hdr[:60])))
    return bytes(hdr) + b"\0" * (align - 64) + data + m


put("pack", "two-tensors.gpk", pack([("a.weight", "BF16", [2, 3], bytes(range(12))), ("norm.weight", "BF16", [5], bytes(10))]))
put("pack", "empty.gpk", pack([]))
put("pack", "files.gpk", pack([("a.weight", "BF16", [2, 3], bytes(range(12)))],
                              files=[("tokenizer.json", b'{"version":"1.0"}'), ("chat_template.jinja", b"{{ bos_token }}"),
                                     ("empty", b"")]))
put("pack", "quantized.gpk", pack([("m.weight", "U32", [2, 4], bytes(range(32))), ("m.scales", "BF16", [2, 1], bytes(4)),
                                   ("m.biases", "BF16", [2, 1], bytes(4))],
                                  extra={"quantized": {"m": {"mode": "affine", "bits": 4, "group_size": 32,
                                                             "in_features": 32, "out_features": 2, "weight": "m.weight",
                                                             "scales": "m.scales", "biases": "m.biases"}}}))


GGUF_FMT = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}


def gguf_str(s):
    b = s if isinstance(s, bytes) else s.encode()
    return struct.pack("<Q", len(b)) + b


def gguf_val(t, v):
    """A metadata value of type id t; an array (9) is (element type, [values])."""
    if t == 8:
        return gguf_str(v)
    if t == 9:
        et, items = v
        return struct.pack("<IQ", et, len(items)) + b"".join(gguf_val(et, x) for x in items)
    return struct.pack("<" + GGUF_FMT[t], v)


def gguf(kvs, tensors, align=32, version=3, trailing=0):
    """A GGUF image (docs/INPUTS.md §6) of (key, type, value) metadata and (name, ne, ggml type, bytes)
    tensors, laid out in order at `align` (general.alignment must say so when it is not 32)."""
    out = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kvs))
    for key, t, v in kvs:
        out += gguf_str(key) + struct.pack("<I", t) + gguf_val(t, v)
    data = b""
    for name, ne, gt, raw in tensors:
        data += b"\0" * (-len(data) % align)
        out += gguf_str(name) + struct.pack("<I%dQIQ" % len(ne), len(ne), *ne, gt, len(data))
        data += raw
    return out + b"\0" * (-len(out) % align) + data + b"\0" * trailing


q4_0 = bytes.fromhex("0040809191a2a2b3b3c4c4d5d5e6e6f7f7f8")  # x = -16..15 (notes §4)
q8_0 = struct.pack("<H32b", 0x3c00, *range(-16, 16))          # d = 1.0
put("gguf", "tensors.gguf", gguf(
    [("general.architecture", 8, "gemma4"), ("gemma4.block_count", 4, 2), ("gemma4.rope.freq_base", 6, 1e6),
     ("gemma4.attention.sliding_window_pattern", 9, (7, [True, False])),
     ("gemma4.feed_forward_length", 9, (5, [64, 128])),
     ("tokenizer.ggml.tokens", 9, (8, ["<pad>", "<bos>", "a", "\u2581b"]))],
    [("token_embd.weight", [4, 2], 0, struct.pack("<8f", *range(8))),
     ("blk.0.attn_norm.weight", [8], 1, struct.pack("<8e", *[0.5] * 8)),
     ("output_norm.weight", [4], 30, bytes.fromhex("803f00c0203e0080")),
     ("blk.0.attn_q.weight", [32, 2], 2, q4_0 * 2),
     ("blk.0.ffn_down.weight", [32], 8, q8_0)]))
put("gguf", "aligned64.gguf", gguf(
    [("general.alignment", 4, 64), ("general.name", 8, "a64")],
    [("a", [3], 0, struct.pack("<3f", 1, 2, 3)), ("b", [64, 1, 2], 3, bytes(80))], align=64, trailing=64))
put("gguf", "metadata-v2.gguf", gguf(
    [("u8", 0, 200), ("i8", 1, -5), ("u16", 2, 60000), ("i16", 3, -300), ("u32", 4, 4000000000), ("i32", 5, -70000),
     ("f32", 6, 1.5), ("bool", 7, True), ("str", 8, "x"), ("u64", 10, 2 ** 40), ("i64", 11, -2 ** 40),
     ("f64", 12, 0.1), ("nested", 9, (9, [(2, [1, 2]), (8, ["a"])]))], [], version=2))
put("gguf", "header-only.gguf", gguf([], []))
put("gguf", "nonfinite-and-escapes.gguf", gguf(
    [("general.architecture", 8, "gemma4"), ("general.name", 8, b"\x1b]0;pwn\x07\x1b[2J\xff\xfe"),
     ("gemma4.attention.layer_norm_rms_epsilon", 6, float("nan")), ("gemma4.rope.freq_base", 12, float("inf"))],
    [("blk.0.attn_q.weight", [32, 1], 2, struct.pack("<H", 0x7E00) + q4_0[2:])]))

# every ggml block type (ggml-common.h's block layouts): id, weights and bytes per block, the byte offsets
# of its f16 scale fields (d, then dmin where the type has one)
GGML_BLOCKS = {
    "Q4_0": (2, 32, 18, [0]), "Q4_1": (3, 32, 20, [0, 2]), "Q5_0": (6, 32, 22, [0]), "Q5_1": (7, 32, 24, [0, 2]),
    "Q8_0": (8, 32, 34, [0]), "Q2_K": (10, 256, 84, [80, 82]), "Q3_K": (11, 256, 110, [108]),
    "Q4_K": (12, 256, 144, [0, 2]), "Q5_K": (13, 256, 176, [0, 2]), "Q6_K": (14, 256, 210, [208]),
    "IQ2_XXS": (16, 256, 66, [0]), "IQ2_XS": (17, 256, 74, [0]), "IQ3_XXS": (18, 256, 98, [0]),
    "IQ1_S": (19, 256, 50, [0]), "IQ4_NL": (20, 32, 18, [0]), "IQ3_S": (21, 256, 110, [0]),
    "IQ2_S": (22, 256, 82, [0]), "IQ4_XS": (23, 256, 136, [0]), "IQ1_M": (29, 256, 56, []),
    "TQ1_0": (34, 256, 54, [52]), "TQ2_0": (35, 256, 66, [64]), "MXFP4": (39, 32, 17, []),
}
# types ggml names without a dequantization here (the reader takes them, ingest refuses them)
GGML_OTHER = {"Q8_1": (9, 32, 36), "Q8_K": (15, 256, 292), "NVFP4": (40, 64, 36)}
F16_NAN, F16_INF = 0x7E00, 0x7C00


def set_scale(name, blk, h, field=0):
    """Block bytes blk with its scale field `field` set to the f16 bits h; IQ1_M's f16 is the top nibbles of
    its four u16 scales (bytes 48..55), MXFP4's scale an e8m0 byte (h & 0xFF)."""
    b = bytearray(blk)
    if name == "IQ1_M":
        for k in range(4):
            b[49 + 2 * k] = (b[49 + 2 * k] & 0x0F) | ((h >> 4 * k) & 0xF) << 4
    elif name == "MXFP4":
        b[0] = h & 0xFF
    else:
        struct.pack_into("<H", b, GGML_BLOCKS[name][3][field], h)
    return bytes(b)


def blocks(name, n, seed):
    """n random blocks of type name with finite scales (0.001 .. 2; MXFP4: exponents 2^-8 .. 2^8)."""
    _, _, size, fields = GGML_BLOCKS[name]
    rng, out = random.Random(seed), b""
    for _ in range(n):
        blk = rng.randbytes(size)
        if name == "MXFP4":
            blk = set_scale(name, blk, rng.randrange(119, 136))
        else:
            h = struct.unpack("<H", struct.pack("<e", rng.uniform(0.001, 2.0)))[0]
            blk = set_scale(name, blk, h)
            for f in range(1, len(fields)):
                blk = set_scale(name, blk, struct.unpack("<H", struct.pack("<e", rng.uniform(0.001, 2.0)))[0], f)
        out += blk
    return out


GG_KV = [("general.architecture", 8, "gemma4"), ("general.file_type", 4, 15)]
NORM = ("blk.0.attn_norm.weight", [64], 0, struct.pack("<64f", *[1.0] * 64))
for name, (tid, blk, size, fields) in GGML_BLOCKS.items():
    low, row2 = name.lower(), blocks(name, 4, tid)       # two rows of two blocks
    put("gguf", "type-%s.gguf" % low, gguf(GG_KV, [NORM, ("blk.0.attn_q.weight", [2 * blk, 2], tid, row2)]))
    # experts: [in, out, n_expert], the layout of a fused MoE tensor
    put("gguf", "type-%s-experts.gguf" % low, gguf(GG_KV, [("blk.0.ffn_down_exps.weight", [blk, 2, 3], tid,
                                                            blocks(name, 6, tid + 1000))]))
    put("gguf", "bad-%s-row.gguf" % low, gguf(GG_KV, [("blk.0.attn_q.weight", [blk + blk // 2, 1], tid,
                                                       blocks(name, 2, tid))]))
    put("gguf", "bad-%s-short.gguf" % low, gguf(GG_KV, [NORM, ("blk.0.attn_q.weight", [2 * blk, 2], tid, row2[:-size])]))
    if name == "MXFP4":
        put("gguf", "bad-mxfp4-e8m0-ff.gguf", gguf(GG_KV, [("a.weight", [2 * blk, 2], tid,
                                                             row2[:size] + set_scale(name, row2[size:2 * size], 0xFF) + row2[2 * size:])]))
        put("gguf", "type-mxfp4-e8m0-fe.gguf", gguf(GG_KV, [("a.weight", [blk], tid, set_scale(name, row2[:size], 0xFE))]))
        continue
    # the second block's d NaN; infinity in dmin where the type has one, else in d; the last block's d -inf
    nan = row2[:size] + set_scale(name, row2[size:2 * size], F16_NAN) + row2[2 * size:]
    inf = row2[:3 * size] + set_scale(name, row2[3 * size:], F16_INF, len(fields) - 1 if fields else 0)
    put("gguf", "bad-%s-nan.gguf" % low, gguf(GG_KV, [NORM, ("blk.0.attn_q.weight", [2 * blk, 2], tid, nan)]))
    put("gguf", "bad-%s-inf.gguf" % low, gguf(GG_KV, [("blk.0.attn_q.weight", [2 * blk, 2], tid, inf),
                                                      ("blk.0.attn_k.weight", [blk], tid,
                                                       set_scale(name, row2[:size], 0xFC00))]))
for name, (tid, blk, size) in GGML_OTHER.items():
    put("gguf", "type-%s.gguf" % name.lower(), gguf(GG_KV, [("a.weight", [blk, 2], tid, random.Random(tid).randbytes(2 * size))]))
for tid in (4, 5, 99):  # Q4_2 and Q4_3, which ggml removed; an id no ggml has
    put("gguf", "bad-type-%d.gguf" % tid, gguf(GG_KV, [("a.weight", [32, 2], tid, bytes(40))]))


def gguf_shrink(data, rows=2, keep=("blk.0.", "blk.1.")):
    """A GGUF image cut down: its metadata as it is, the tensors outside blk.* and of the layers in `keep`,
    each reduced to its first `rows` rows (and first two experts), re-laid at 32-byte alignment."""
    vsize = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
    n_t, n_kv = struct.unpack_from("<QQ", data, 8)

    def skip(t, p):
        if t == 8:
            return p + 8 + struct.unpack_from("<Q", data, p)[0]
        if t == 9:
            et, n = struct.unpack_from("<IQ", data, p)
            p += 12
            if et in vsize:
                return p + n * vsize[et]
            for _ in range(n):
                p = skip(et, p)
            return p
        return p + vsize[t]
    p = 24
    for _ in range(n_kv):
        p = skip(8, p)
        p = skip(struct.unpack_from("<I", data, p)[0], p + 4)
    kv_blob, infos = data[24:p], []
    for _ in range(n_t):
        ln = struct.unpack_from("<Q", data, p)[0]
        name = data[p + 8:p + 8 + ln].decode()
        p += 8 + ln
        nd = struct.unpack_from("<I", data, p)[0]
        ne = list(struct.unpack_from("<%dQ" % nd, data, p + 4))
        tid, off = struct.unpack_from("<IQ", data, p + 4 + 8 * nd)
        p += 4 + 8 * nd + 12
        infos.append((name, ne, tid, off))
    base = p + (-p % 32)
    sizes = {0: (1, 4), 1: (1, 2), 30: (1, 2), **{v[0]: v[1:3] for v in GGML_BLOCKS.values()}}
    tensors = []
    for name, ne, tid, off in infos:
        if name.startswith("blk.") and not name.startswith(keep):
            continue
        blk, size = sizes[tid]
        ne2 = [ne[0]] + [min(n, rows) for n in ne[1:]]
        nrows = 1
        for n in ne2[1:]:
            nrows *= n
        tensors.append((name, ne2, tid, data[base + off:base + off + nrows * ne[0] // blk * size]))
    out = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), n_kv) + kv_blob
    blob = b""
    for name, ne, tid, raw in tensors:
        blob += b"\0" * (-len(blob) % 32)
        out += gguf_str(name) + struct.pack("<I%dQIQ" % len(ne), len(ne), *ne, tid, len(blob))
        blob += raw
    return out + b"\0" * (-len(out) % 32) + blob


# the preset fixtures (`gempack fixture --format gguf-*`), their metadata whole and their tensors cut down
with tempfile.TemporaryDirectory() as tmp:
    for fmt, v in [("q4_0", "e2b"), ("q8_0", "e2b"), ("q4_k_m", "e2b"), ("q5_k_m", "e2b"), ("q6_k", "e2b"),
                   ("iq4_xs", "e2b"), ("iq2_xxs", "e2b"), ("mxfp4", "26b-a4b")]:
        out = os.path.join(tmp, fmt)
        subprocess.run([os.path.join(build, "gempack"), "fixture", "--variant", v, "--format", "gguf-" + fmt,
                        "-o", out], check=True, capture_output=True)
        put("gguf", "fixture-%s-%s.gguf" % (v, fmt), gguf_shrink(open(os.path.join(out, "model.gguf"), "rb").read()))

# tokenizer: a tokenizer.json with every component Gemma's has, and a GGUF's tokenizer.ggml.* metadata
tok_json = {
    "version": "1.0", "truncation": None, "padding": None,
    "added_tokens": [{"id": i, "content": c, "single_word": False, "lstrip": l, "rstrip": r, "normalized": False,
                      "special": s} for i, c, l, r, s in [(0, "<bos>", False, False, True), (1, "<x>", True, True, False),
                                                          (13, "<x>y", False, False, False)]],
    "normalizer": {"type": "Sequence", "normalizers": [{"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]},
    "pre_tokenizer": {"type": "Split", "pattern": {"String": " "}, "behavior": "MergedWithPrevious", "invert": False},
    "post_processor": {"type": "TemplateProcessing",
                       "single": [{"SpecialToken": {"id": "<bos>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
                       "pair": [], "special_tokens": {"<bos>": {"id": "<bos>", "ids": [0], "tokens": ["<bos>"]}}},
    "decoder": {"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
                                                 {"type": "ByteFallback"}, {"type": "Fuse"},
                                                 {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
    "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
              "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": True, "ignore_merges": False,
              "vocab": {"<bos>": 0, "<x>": 1, "<unk>": 2, "a": 3, "b": 4, "c": 5, "\u2581": 6, "ab": 7, "bc": 8,
                        "abc": 9, "\u2581a": 10, "<0xC3>": 11, "<0xA9>": 12, "<x>y": 13},
              "merges": [["a", "b"], ["b", "c"], ["ab", "c"], "\u2581 a"]}}
put("tokenizer", "tokenizer.json", json.dumps(tok_json, ensure_ascii=False))
put("tokenizer", "tokenizer-ascii.json", json.dumps(tok_json, indent=1))
# a campaign's find: a second pre_tokenizer leaked the first's pattern (now refused: a field twice)
dup = json.dumps(tok_json, ensure_ascii=False)
pre = json.dumps({"pre_tokenizer": tok_json["pre_tokenizer"]})[1:-1]
put("tokenizer", "crash-duplicate-pre-tokenizer.json", dup.replace(pre, pre + ", " + pre))
put("tokenizer", "tokenizer.gguf", gguf(
    [("tokenizer.ggml.model", 8, "gemma4"),
     ("tokenizer.ggml.tokens", 9, (8, ["<pad>", "<eos>", "<bos>", "<unk>", "<|turn>", "a", "b", "ab", "\u2581", "\u2581a",
                                       "<0xC3>", "<0xA9>"])),
     ("tokenizer.ggml.token_type", 9, (5, [3, 3, 3, 2, 4, 1, 1, 1, 1, 1, 6, 6])),
     ("tokenizer.ggml.merges", 9, (8, ["a b", "\u2581 a"])),
     ("tokenizer.ggml.bos_token_id", 4, 2), ("tokenizer.ggml.unknown_token_id", 4, 3),
     ("tokenizer.ggml.add_bos_token", 7, True)], []))

# template: a chat template, then NUL and a conversation; the seeds use every construct the Gemma 4
# templates use (their own sources are third-party: setup.sh fetches them, none is committed)
conv = json.dumps([{"role": "system", "content": "\u3000Be brief.\x1c"}, {"role": "user", "content": "Hi"},
                   {"role": "assistant", "content": "a<|channel>t<channel|>b", "reasoning_content": "r",
                    "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": {"B": 2.0, "a": [1e16, None]}}}]},
                   {"role": "tool", "content": "ok", "tool_call_id": "c"}])
put("template", "turns.jinja", "{{- bos_token -}}\n{%- set ns = namespace(prev=None, n=0) -%}\n"
    "{%- set loop_messages = messages[1:] if messages[0]['role'] in ['system', 'developer'] else messages -%}\n"
    "{%- for message in loop_messages -%}\n"
    "    {%- set role = 'model' if message['role'] == 'assistant' else message['role'] -%}\n"
    "    {{- '<|turn>' + role + '\\n' }}\n"
    "    {%- if message['content'] is string -%}{{ message['content'] | trim }}\n"
    "    {%- elif message['content'] is sequence -%}{% for p in message['content'] %}{{ p.get('text', '') }}{% endfor %}\n"
    "    {%- endif -%}\n    {%- set ns.n = ns.n + 1 -%}\n    {{- '<turn|>\\n' if not loop.last -}}\n{%- endfor -%}\n"
    "{%- if add_generation_prompt %}<|turn>model\n{% endif -%}{{ ns.n }}\n\0" + conv)
put("template", "macros.jinja", "{%- macro fmt(a, esc=True) -%}\n"
    "{%- if a is string -%}{{ '<|\"|>' + a + '<|\"|>' if esc else a }}{%- elif a is boolean -%}{{ 'true' if a else 'false' }}\n"
    "{%- elif a is mapping -%}{ {%- for k, v in a | dictsort -%}{{ k }}:{{ fmt(v, esc=esc) }}{{ ',' if not loop.last }}"
    "{%- endfor -%} }\n{%- elif a is sequence -%}[{%- for i in a -%}{{ fmt(i) }}{% if not loop.last %},{% endif %}"
    "{%- endfor -%}]\n{%- else -%}{{ a }}{%- endif -%}\n{%- endmacro -%}\n"
    "{%- for m in messages -%}{%- for tc in m.get('tool_calls') or [] -%}{{ fmt(tc['function']['arguments'], False) }}"
    "{%- endfor -%}{%- endfor -%}\n{{ tools | tojson }}{{ messages[0] | tojson(indent=2) }}\0" + conv)
put("template", "expressions.jinja", "{# comment #}\n  {% for x in range(3, 0, -1) %}{{ x }}{% if x == 2 %}{% continue %}"
    "{% endif %}{% endfor %}\n{{ 'a b'.split() }}{{ 'x'.startswith('x') }}{{ [1, 'b', none, 1.5, (1,)] }}"
    "{{ 7 // 2 ~ -7 % 3 ~ 2 ** 3 }}{{ 'abc'[::-1] }}{{ {'k': 1}.items() | list }}{{ u | default('d') | upper }}"
    "{{ ['b', 'a'] | map('upper') | join(',') }}{{ 'aXb' | replace('X', '') | length }}{{ messages | first }}"
    "{{ messages | last }}{%- if enable_thinking is defined and enable_thinking %}T{% endif %}")
put("template", "hostile-recursion.jinja", "{% macro r(n) %}{{ r(n + 1) }}{% endmacro %}{{ r(0) }}")
put("template", "hostile-range.jinja", "{% for i in range(100001) %}x{% endfor %}")
