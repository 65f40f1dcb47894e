#!/usr/bin/python3
"""Independent float64 NumPy reference forward pass of the Gemma 4 text model.

Written from the Gemma 4 architecture and file formats as docs/MODEL.md and
docs/INPUTS.md restate them (sections named in the comments as "MODEL.md §x"
and "INPUTS.md §x"); the compressed-tensors pack-quantized and GGUF readers from the upstream
formats (the sources INPUTS.md §7.1 and §6, §7.2 list: neuralmagic/compressed-tensors, llama.cpp's
gemma4 conversion and ggml's GGUF spec). It shares
no code with, and was not derived from, the C runner of this repository.

Library use:
    import reference
    model = reference.load_checkpoint("path/to/checkpoint")   # or "path/to/model.gguf"
    logits = reference.forward(model, tokens)        # float64 [T, V]

Command line:
    /usr/bin/python3 golden/reference.py CHECKPOINT_DIR|FILE.gguf [--tokens-file tokens.json] -o OUT.npz
        [--rope-tables f32|f32-hf|f64] [--tolerance max_abs=1e-4] [--tolerance kld_mean=1e-6]
        [--compare OTHER.npz[:KEY]]

Everything is computed in float64 except, by default, the RoPE cos/sin tables, which are built
in float32 the way the upstream implementations build them (MODEL.md §4 "HF numerics"; MLX's
fast.rope does the same); --rope-tables f64 gives an all-float64 pass. See golden/README.md.

Only the Python standard library and numpy are used.
"""

import argparse
import hashlib
import io
import json
import math
import os
import re
import struct
import sys
import zipfile

import numpy as np

PRODUCER = "gempack golden/reference.py"

DEFAULT_TOLERANCES = {"max_abs": 1e-4, "top1": 1.0, "kld_mean": 1e-6}

# ---------------------------------------------------------------------------
# Configuration (MODEL.md §1.2 - §1.5)
# ---------------------------------------------------------------------------

SLIDING = "sliding_attention"
FULL = "full_attention"


class ReferenceError(Exception):
    """A checkpoint this reference cannot (or must not) run."""


def _require(tc, key):
    if key not in tc or tc[key] is None:
        raise ReferenceError("config.json: required text field %r is missing or null" % key)
    return tc[key]


def parse_config(config):
    """Return (text_config dict, derived hyper-parameters dict, quantization block or None)."""
    if config.get("model_type") in ("gemma4_text", "gemma4_unified_text") and "text_config" not in config:
        tc = dict(config)
        multimodal = False
    elif "text_config" in config:
        # gemma4 (and gemma4_unified) wrappers: text fields under text_config (MODEL.md §1.1).
        tc = dict(config["text_config"])
        multimodal = True
        if "vocab_size" not in tc and "vocab_size" in config:
            tc["vocab_size"] = config["vocab_size"]
    else:
        raise ReferenceError("config.json: model_type %r has neither text_config nor "
                             "gemma4_text fields" % config.get("model_type"))
    mt = tc.get("model_type", config.get("model_type"))
    if mt not in ("gemma4_text", "gemma4", "gemma4_unified", "gemma4_unified_text", None):
        raise ReferenceError("config.json: unexpected text model_type %r" % mt)
    # The 12B's text class (transformers models/gemma4_unified) declares no
    # per-layer-input and no MoE fields: absent, there are none.
    unified = mt == "gemma4_unified_text" or config.get("model_type") == "gemma4_unified"

    h = {}
    h["multimodal"] = multimodal
    h["H"] = int(_require(tc, "hidden_size"))
    h["L"] = int(_require(tc, "num_hidden_layers"))
    h["I"] = int(_require(tc, "intermediate_size"))
    h["Nq"] = int(_require(tc, "num_attention_heads"))
    h["G"] = int(_require(tc, "num_key_value_heads"))
    h["head_dim"] = int(_require(tc, "head_dim"))
    h["V"] = int(_require(tc, "vocab_size"))
    h["W"] = int(_require(tc, "sliding_window"))
    if unified:
        h["P"] = int(tc.get("hidden_size_per_layer_input") or 0)
    else:
        h["P"] = int(_require(tc, "hidden_size_per_layer_input"))  # MODEL.md §1.2: must be explicit
    h["eps"] = float(tc.get("rms_norm_eps", 1e-6) if tc.get("rms_norm_eps") is not None else 1e-6)

    # Full-layer head dim and KV heads (MODEL.md §1.2 notes, §1.3).
    gd = tc.get("global_head_dim")
    gkv = tc.get("num_global_key_value_heads")
    plc = tc.get("per_layer_config")
    if gd is None and isinstance(plc, dict):
        for v in plc.values():
            if isinstance(v, dict) and v.get("head_dim"):
                gd = v["head_dim"]
                if gkv is None and v.get("num_key_value_heads") is not None:
                    gkv = v["num_key_value_heads"]
                break
    h["global_head_dim"] = int(gd) if gd else 0
    h["num_global_kv"] = int(gkv) if gkv is not None else None
    h["k_eq_v"] = bool(tc.get("attention_k_eq_v") or False)
    h["n_shared"] = int(tc.get("num_kv_shared_layers") or 0)
    h["double_wide"] = bool(tc.get("use_double_wide_mlp") or False)
    h["moe"] = bool(tc.get("enable_moe_block") or False)
    if tc.get("attention_bias"):
        raise ReferenceError("attention_bias = true is not part of Gemma 4")
    act = tc.get("hidden_activation", "gelu_pytorch_tanh")
    if act not in ("gelu_pytorch_tanh", None):
        raise ReferenceError("hidden_activation %r is not the tanh GELU" % act)
    sc = tc.get("final_logit_softcapping")
    h["softcap"] = float(sc) if sc is not None else None  # MODEL.md §8.4: skip if null/absent
    if h["P"] > 0:
        vp = tc.get("vocab_size_per_layer_input")
        h["V_ple"] = int(vp) if vp is not None else None
    if h["moe"]:
        h["E"] = int(_require(tc, "num_experts"))
        h["K"] = int(_require(tc, "top_k_experts"))
        h["M"] = int(_require(tc, "moe_intermediate_size"))

    # Layer types (MODEL.md §1.2): explicit list; fall back to the MLX period only if absent.
    lt = tc.get("layer_types")
    if lt is None:
        pat = tc.get("sliding_window_pattern")
        if not pat:
            raise ReferenceError("config.json: layer_types is missing")
        lt = [FULL if (i + 1) % int(pat) == 0 else SLIDING for i in range(h["L"])]
    lt = list(lt)
    if len(lt) != h["L"]:
        raise ReferenceError("layer_types has %d entries for %d layers" % (len(lt), h["L"]))
    for t in lt:
        if t not in (SLIDING, FULL):
            raise ReferenceError("unknown layer type %r" % t)
    if lt[-1] != FULL:  # HF __post_init__ forces the last layer to full attention.
        sys.stderr.write("reference: warning: last layer forced to full_attention (HF rule)\n")
        lt[-1] = FULL
    h["layer_types"] = lt

    # RoPE (MODEL.md §1.4): required.
    rp = tc.get("rope_parameters")
    if not isinstance(rp, dict):
        raise ReferenceError("config.json: rope_parameters is missing")
    h["rope"] = {}
    for t in (SLIDING, FULL):
        if t not in lt:
            continue
        if t not in rp or not isinstance(rp[t], dict):
            raise ReferenceError("rope_parameters has no entry for %s" % t)
        h["rope"][t] = dict(rp[t])

    L = h["L"]
    F0 = L - h["n_shared"]
    if h["n_shared"] < 0 or F0 < 0:
        raise ReferenceError("num_kv_shared_layers out of range")
    h["F0"] = F0
    layers = []
    for i in range(L):
        full = lt[i] == FULL
        d = h["global_head_dim"] if (full and h["global_head_dim"]) else h["head_dim"]
        keqv = h["k_eq_v"] and full
        G = h["num_global_kv"] if (keqv and h["num_global_kv"] is not None) else h["G"]
        if h["Nq"] % G:
            raise ReferenceError("layer %d: %d query heads not divisible by %d KV heads" % (i, h["Nq"], G))
        shared = h["n_shared"] > 0 and i >= F0
        if shared:
            cands = [j for j in range(F0) if lt[j] == lt[i]]
            if not cands:
                raise ReferenceError("layer %d is KV-shared but no earlier %s layer owns KV" % (i, lt[i]))
            src = max(cands)
        else:
            src = i
        I = h["I"] * (2 if (h["double_wide"] and shared) else 1)
        layers.append(dict(type=lt[i], full=full, d=d, keqv=keqv, G=G, shared=shared, src=src, I=I))
    h["layers"] = layers

    q = _quant_block(config, tc)
    return tc, h, q


def _quant_block(config, tc):
    """INPUTS.md §3.4 step 1: MLX quantization block or None."""
    if isinstance(config.get("quantization"), dict):
        return config["quantization"]
    for qc in (config.get("quantization_config"), tc.get("quantization_config")):
        if isinstance(qc, dict):
            if qc.get("quant_method") == "compressed-tensors":
                return CTConfig(qc)
            if "quant_method" in qc:
                raise ReferenceError("quantization_config with quant_method %r is an HF quantizer "
                                     "format this reference does not read" % qc["quant_method"])
            if "bits" in qc or "group_size" in qc:
                return qc
            # Google QAT "unquantized" block without quant_method and without MLX keys:
            # treat as unquantized (MODEL.md §1.5).
            return None
    return None


MODE_DEFAULTS = {"affine": (64, 4), "mxfp4": (32, 4), "nvfp4": (16, 4), "mxfp8": (32, 8)}


def resolve_quant(qblock, paths):
    """Bits/group/mode of a quantized module (INPUTS.md §3.1 defaulting rule).

    paths: candidate override keys (the MLX module path first)."""
    if qblock is None:
        return None
    gmode = qblock.get("mode") or "affine"
    gbits = qblock.get("bits")
    ggs = qblock.get("group_size")
    for p in paths:
        if p in qblock:
            v = qblock[p]
            if v is False:
                raise ReferenceError("module %s has .scales but quantization says false" % p)
            if isinstance(v, dict):
                mode = v.get("mode") or "affine"
                dgs, dbits = MODE_DEFAULTS.get(mode, (None, None))
                gs = v.get("group_size")
                bits = v.get("bits")
                return (int(bits) if bits is not None else dbits,
                        int(gs) if gs is not None else dgs, mode, p)
            if v is True or v is None:
                break
            raise ReferenceError("quantization entry %s has unsupported value %r" % (p, v))
    dgs, dbits = MODE_DEFAULTS.get(gmode, (None, None))
    return (int(gbits) if gbits is not None else dbits,
            int(ggs) if ggs is not None else dgs, gmode, None)


# ---------------------------------------------------------------------------
# safetensors (INPUTS.md §1)
# ---------------------------------------------------------------------------

_DTYPES = {
    "BF16": (2, None), "F16": (2, "<f2"), "F32": (4, "<f4"), "F64": (8, "<f8"),
    "U32": (4, "<u4"), "I32": (4, "<i4"), "U8": (1, "u1"), "I64": (8, "<i8"),
}


class RawTensor:
    __slots__ = ("name", "dtype", "shape", "data", "file")

    def __init__(self, name, dtype, shape, data, file):
        self.name, self.dtype, self.shape, self.data, self.file = name, dtype, tuple(shape), data, file

    def as_f64(self):
        if self.dtype == "BF16":
            u16 = np.frombuffer(self.data, dtype="<u2")
            f = (u16.astype(np.uint32) << 16).view(np.float32)
            return f.astype(np.float64).reshape(self.shape)
        if self.dtype in ("F16", "F32", "F64"):
            return np.frombuffer(self.data, dtype=_DTYPES[self.dtype][1]).astype(np.float64).reshape(self.shape)
        raise ReferenceError("tensor %s: dtype %s is not a float type" % (self.name, self.dtype))

    def as_u32(self):
        if self.dtype != "U32":
            raise ReferenceError("tensor %s: expected U32 codes, found %s" % (self.name, self.dtype))
        return np.frombuffer(self.data, dtype="<u4").reshape(self.shape)


def read_safetensors(path):
    """Parse one safetensors file and validate it (INPUTS.md §1.1, §1.4). Returns {name: RawTensor}."""
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        raise ReferenceError("%s: file shorter than 8 bytes" % path)
    (n,) = struct.unpack("<Q", blob[:8])
    if n == 0 or n > 100_000_000 or 8 + n > len(blob):
        raise ReferenceError("%s: bad header length %d" % (path, n))
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    if not isinstance(header, dict):
        raise ReferenceError("%s: header is not a JSON object" % path)
    data = memoryview(blob)[8 + n:]
    entries = []
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dt = info["dtype"]
        if dt not in _DTYPES:
            raise ReferenceError("%s: tensor %s has unsupported dtype %s" % (path, name, dt))
        shape = [int(s) for s in info["shape"]]
        b, e = (int(x) for x in info["data_offsets"])
        nel = 1
        for s in shape:
            nel *= s
        if e - b != nel * _DTYPES[dt][0]:
            raise ReferenceError("%s: tensor %s byte size does not match its shape" % (path, name))
        entries.append((b, e, name, dt, shape))
    entries.sort()
    pos = 0
    out = {}
    for b, e, name, dt, shape in entries:
        if b != pos or e < b:
            raise ReferenceError("%s: tensor %s has a bad offset (holes/overlap)" % (path, name))
        pos = e
        out[name] = RawTensor(name, dt, shape, bytes(data[b:e]), os.path.basename(path))
    if pos != len(data):
        raise ReferenceError("%s: data buffer length %d != last offset %d" % (path, len(data), pos))
    return out


def checkpoint_files(ckpt):
    """List of (file name) holding weights (INPUTS.md §5 loader rules)."""
    idx = os.path.join(ckpt, "model.safetensors.index.json")
    if os.path.exists(idx):
        with open(idx) as f:
            index = json.load(f)
        wm = index.get("weight_map")
        if not isinstance(wm, dict):
            raise ReferenceError("index: weight_map missing")
        files = []
        for k, v in wm.items():
            if not isinstance(v, str) or "/" in v or "\\" in v or v.startswith(".."):
                raise ReferenceError("index: bad shard name %r for %s" % (v, k))
            if v not in files:
                files.append(v)
        return sorted(files), wm
    if os.path.exists(os.path.join(ckpt, "model.safetensors")):
        return ["model.safetensors"], None
    raise ReferenceError("%s: neither model.safetensors nor model.safetensors.index.json" % ckpt)


def read_all_tensors(ckpt):
    files, wm = checkpoint_files(ckpt)
    tensors = {}
    for fn in files:
        part = read_safetensors(os.path.join(ckpt, fn))
        for k, t in part.items():
            if k in tensors:
                raise ReferenceError("tensor %s appears in two shards" % k)
            if wm is not None and wm.get(k) != fn:
                raise ReferenceError("tensor %s is in %s but the index says %r" % (k, fn, wm.get(k)))
            tensors[k] = t
    if wm is not None:
        missing = [k for k in wm if k not in tensors]
        if missing:
            raise ReferenceError("index names %d tensors missing from the shards, e.g. %s" % (len(missing), missing[0]))
    return tensors, files


# ---------------------------------------------------------------------------
# MLX affine dequantization (INPUTS.md §2.3, §2.4)
# ---------------------------------------------------------------------------

def unpack_codes(words, bits, n_in):
    """uint32 words [..., n_in*bits/32] -> integer codes [..., n_in].

    Codes form one LSB-first bit stream per row; bit p is bit p%32 of word p/32, and the
    words are little-endian, so byte j of the row holds stream bits 8j..8j+7."""
    lead = words.shape[:-1]
    nbytes = words.shape[-1] * 4
    by = np.ascontiguousarray(words.astype("<u4")).view(np.uint8).reshape(lead + (nbytes,))
    bitsarr = np.unpackbits(by, axis=-1, bitorder="little")  # [..., nbytes*8], stream order
    if bitsarr.shape[-1] != n_in * bits:
        raise ReferenceError("packed row has %d bits, expected %d x %d" % (bitsarr.shape[-1], n_in, bits))
    bitsarr = bitsarr.reshape(lead + (n_in, bits)).astype(np.uint32)
    weights = (np.uint32(1) << np.arange(bits, dtype=np.uint32))
    return (bitsarr * weights).sum(axis=-1, dtype=np.uint32)


def dequantize_affine(words, scales, biases, bits, gs):
    n_in = scales.shape[-1] * gs
    q = unpack_codes(words, bits, n_in).astype(np.float64)
    lead = q.shape[:-1]
    q = q.reshape(lead + (scales.shape[-1], gs))
    w = scales[..., None] * q + biases[..., None]
    return w.reshape(lead + (n_in,))


# ---------------------------------------------------------------------------
# MLX microscaling dequantization (INPUTS.md §2.7): element value × scale
# ---------------------------------------------------------------------------

E2M1 = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
                 -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0], dtype=np.float64)


def e4m3_value(b):
    """FP8 E4M3 bytes -> float64: sign, 4 exponent bits (bias 7), 3 mantissa bits; exponent 0 is
    subnormal (m/8 * 2^-6); no NaN (0x7F is 480)."""
    b = b.astype(np.int64)
    e, m = (b >> 3) & 15, b & 7
    v = np.where(e == 0, m / 8.0 * 2.0 ** -6, (1.0 + m / 8.0) * np.exp2(e - 7.0))
    return np.where(b & 0x80, -v, v)


def dequantize_mx(words, scales, mode):
    """words U32 [..., n_in*bits/32], scales U8 [..., n_in/gs] -> float64 [..., n_in]."""
    gs, bits = MODE_DEFAULTS[mode]
    n_in = scales.shape[-1] * gs
    codes = unpack_codes(words, bits, n_in)
    v = e4m3_value(codes) if mode == "mxfp8" else E2M1[codes]
    if mode == "nvfp4":
        sc = e4m3_value(scales)
    else:  # E8M0: 2^(b-127); 255 is +inf
        b = scales.astype(np.float64)
        sc = np.where(b == 255, np.inf, np.exp2(b - 127.0))
    lead = v.shape[:-1]
    w = v.reshape(lead + (scales.shape[-1], gs)) * sc[..., None]
    return w.reshape(lead + (n_in,))


# ---------------------------------------------------------------------------
# compressed-tensors "pack-quantized" (the upstream format; INPUTS.md §7.1)
# ---------------------------------------------------------------------------

CT_SUFFIXES = (".weight_packed", ".weight_scale", ".weight_shape", ".weight_zero_point",
               ".weight_g_idx")
# Preset schemes that a config group may name instead of spelling out (group value = target list).
CT_PRESETS = {
    "W4A16": {"num_bits": 4, "type": "int", "symmetric": True, "strategy": "group", "group_size": 128},
    "W4A16_ASYM": {"num_bits": 4, "type": "int", "symmetric": False, "strategy": "group",
                   "group_size": 128},
    "W8A16": {"num_bits": 8, "type": "int", "symmetric": True, "strategy": "group", "group_size": 128},
}
# Relative (text-prefix-stripped) names of the Linear modules of the Gemma 4 text model, for the
# class target "Linear" and for the dense-module consistency check.
_CT_LINEAR = re.compile(r"^(layers\.\d+\.(self_attn\.[qkvo]_proj|mlp\.(gate|up|down)_proj|router\.proj|"
                        r"per_layer_input_gate|per_layer_projection|experts\.\d+\.(gate|up|down)_proj)|"
                        r"per_layer_model_projection|lm_head)$")


class CTConfig:
    """A parsed compressed-tensors quantization_config restricted to weight-only pack-quantized
    int groups (strategy group or channel). Anything else is refused with the reason."""

    def __init__(self, qc):
        fmt = qc.get("format")
        if fmt not in ("pack-quantized", "mixed-precision", None):
            raise ReferenceError("compressed-tensors format %r is not read (only pack-quantized, or "
                                 "mixed-precision with pack-quantized groups)" % fmt)
        st = qc.get("quantization_status")
        if st not in (None, "compressed"):
            raise ReferenceError("compressed-tensors quantization_status %r (expected compressed)" % st)
        if qc.get("kv_cache_scheme") is not None:
            raise ReferenceError("compressed-tensors kv_cache_scheme is not supported")
        if qc.get("transform_config"):
            raise ReferenceError("compressed-tensors transform_config is not supported")
        sp = qc.get("sparsity_config")
        if isinstance(sp, dict) and sp.get("format") not in (None, "dense"):
            raise ReferenceError("compressed-tensors sparsity format %r is not supported" % sp.get("format"))
        ign = qc.get("ignore") or []
        if not isinstance(ign, list) or not all(isinstance(x, str) for x in ign):
            raise ReferenceError("compressed-tensors ignore must be a list of strings")
        self.ignore = ign
        cg = qc.get("config_groups")
        if not isinstance(cg, dict) or not cg:
            raise ReferenceError("compressed-tensors config_groups missing or empty")
        self.groups = []
        for name, g in cg.items():
            if isinstance(g, list):  # preset name -> targets
                if name not in CT_PRESETS:
                    raise ReferenceError("compressed-tensors group %r: unknown preset" % name)
                g = {"targets": g, "weights": dict(CT_PRESETS[name])}
            if not isinstance(g, dict):
                raise ReferenceError("compressed-tensors group %r is not an object" % name)
            gfmt = g.get("format") or (fmt if fmt != "mixed-precision" else None)  # per-group wins
            if gfmt != "pack-quantized":
                raise ReferenceError("compressed-tensors group %r has format %r (only pack-quantized)"
                                     % (name, gfmt))
            for a in ("input_activations", "output_activations"):
                if g.get(a) is not None:
                    raise ReferenceError("compressed-tensors group %r quantizes %s (only weight-only "
                                         "W*A16 is exact to dequantize)" % (name, a))
            tg = g.get("targets")
            if not isinstance(tg, list) or not tg or not all(isinstance(x, str) for x in tg):
                raise ReferenceError("compressed-tensors group %r: targets must be a list of strings" % name)
            w = g.get("weights")
            if not isinstance(w, dict):
                raise ReferenceError("compressed-tensors group %r has no weights arguments" % name)
            self.groups.append(self._args(name, tg, w))

    @staticmethod
    def _args(name, targets, w):
        if w.get("type", "int") != "int":
            raise ReferenceError("compressed-tensors group %r: weight type %r (pack-quantized is int)"
                                 % (name, w.get("type")))
        bits = w.get("num_bits", 8)
        if not isinstance(bits, int) or isinstance(bits, bool) or not 1 <= bits <= 8:
            raise ReferenceError("compressed-tensors group %r: num_bits %r not in 1..8" % (name, bits))
        sym = w.get("symmetric", True)
        if not isinstance(sym, bool):
            raise ReferenceError("compressed-tensors group %r: symmetric %r" % (name, sym))
        gs = w.get("group_size")
        strat = w.get("strategy")
        if strat is None:  # quant_args.py inference
            strat = "tensor" if gs is None else ("channel" if gs == -1 else "group")
        if strat == "group":
            if not isinstance(gs, int) or isinstance(gs, bool) or gs <= 0:
                raise ReferenceError("compressed-tensors group %r: strategy group needs group_size > 0"
                                     % name)
        elif strat == "channel":
            gs = None
        else:
            raise ReferenceError("compressed-tensors group %r: weight strategy %r (only group, channel)"
                                 % (name, strat))
        if w.get("dynamic") not in (None, False):
            raise ReferenceError("compressed-tensors group %r: dynamic weights" % name)
        if w.get("block_structure") is not None:
            raise ReferenceError("compressed-tensors group %r: block_structure" % name)
        ao = w.get("actorder")
        if ao not in (None, False, "group", "dynamic", "weight", "static"):
            raise ReferenceError("compressed-tensors group %r: actorder %r" % (name, ao))
        gidx = ao in ("group", "dynamic")
        if gidx and strat != "group":
            raise ReferenceError("compressed-tensors group %r: actorder group needs strategy group" % name)
        return {"name": name, "targets": list(targets), "bits": bits, "group_size": gs,
                "strategy": strat, "symmetric": sym, "g_idx": gidx}

    @staticmethod
    def _match(target, name, is_linear):
        """CT utils/match.py: 're:PAT' is re.match on the name; else the exact name; a class name
        ('Linear') matches every Linear module. Returns a priority (0 best) or None."""
        if target.startswith("re:"):
            return 1 if re.match(target[3:], name) else None
        if target == name:
            return 0
        if target == "Linear" and is_linear:
            return 2
        return None

    def ignored(self, name, is_linear):
        return any(self._match(t, name, is_linear) is not None for t in self.ignore)

    def scheme(self, name, is_linear):
        """The group quantizing module `name` (full key without the weight suffix), or None."""
        best, found = None, []
        for g in self.groups:
            ps = [p for p in (self._match(t, name, is_linear) for t in g["targets"]) if p is not None]
            if ps:
                found.append((min(ps), g))
        if not found:
            return None
        top = min(p for p, _ in found)
        cands = [g for p, g in found if p == top]
        keyf = lambda g: (g["bits"], g["group_size"], g["strategy"], g["symmetric"], g["g_idx"])
        if len(set(keyf(g) for g in cands)) > 1:
            raise ReferenceError("module %s matches compressed-tensors groups %s with different "
                                 "arguments" % (name, ", ".join(g["name"] for g in cands)))
        return cands[0]


def unpack_stream(words, bits, n):
    """uint32 words [R, nw] -> codes [R, n]: element i of a row at bits [i*b, i*b+b) of the
    LSB-first stream over the little-endian words (trailing padding bits ignored)."""
    R, nw = words.shape
    if nw != -(-n * bits // 32):
        raise ReferenceError("packed row has %d words, expected ceil(%d x %d / 32) = %d"
                             % (nw, n, bits, -(-n * bits // 32)))
    by = np.ascontiguousarray(words.astype("<u4")).view(np.uint8).reshape(R, nw * 4)
    st = np.unpackbits(by, axis=-1, bitorder="little")[:, :n * bits]
    st = st.reshape(R, n, bits).astype(np.int64)
    return (st << np.arange(bits, dtype=np.int64)).sum(axis=-1)


def ct_dequantize(mod, t, args):
    """Dequantize one pack-quantized module to float64 [out, in], exactly:
    w[r, c] = (q[r, c] - zp[r, g]) * scale[r, g], g = c // G (group), 0 (channel) or g_idx[c].

    t: dict suffix -> RawTensor of the module. The module's bits / group size come from the
    config (args) and are cross-checked against every tensor's shape."""
    b, gs, strat = args["bits"], args["group_size"], args["strategy"]
    ws = t["weight_shape"]
    if ws.dtype not in ("I64", "I32") or ws.shape != (2,):
        raise ReferenceError("%s.weight_shape: expected I64/I32 [2], found %s %s (only 2-D modules)"
                             % (mod, ws.dtype, list(ws.shape)))
    out, n_in = (int(x) for x in np.frombuffer(ws.data, dtype=_DTYPES[ws.dtype][1]))
    if out <= 0 or n_in <= 0:
        raise ReferenceError("%s.weight_shape [%d, %d] is not positive" % (mod, out, n_in))
    pk = t["weight_packed"]
    if pk.dtype != "I32":
        raise ReferenceError("%s.weight_packed: dtype %s, expected I32" % (mod, pk.dtype))
    nw = -(-n_in * b // 32)
    if pk.shape != (out, nw):
        raise ReferenceError("%s.weight_packed shape %s != [%d, ceil(%d x %d bits / 32) = %d] "
                             "(config group %r)" % (mod, list(pk.shape), out, n_in, b, nw, args["name"]))
    ng = -(-n_in // gs) if strat == "group" else 1
    sc = t["weight_scale"]
    if sc.dtype not in ("BF16", "F16", "F32"):
        raise ReferenceError("%s.weight_scale: dtype %s, expected BF16/F16/F32" % (mod, sc.dtype))
    if sc.shape != (out, ng):
        raise ReferenceError("%s.weight_scale shape %s != [%d, %d] (%s, group size %s, config group %r)"
                             % (mod, list(sc.shape), out, ng, strat, gs, args["name"]))
    scale = sc.as_f64()
    off = 1 << (b - 1)
    q = unpack_stream(np.frombuffer(pk.data, dtype="<u4").reshape(pk.shape), b, n_in) - off
    zt = t.get("weight_zero_point")
    if args["symmetric"]:
        if zt is not None:
            raise ReferenceError("%s has weight_zero_point but its group is symmetric" % mod)
        zp = np.zeros((out, ng), dtype=np.int64)
    else:
        if zt is None:
            raise ReferenceError("%s has no weight_zero_point but its group is asymmetric" % mod)
        nzw = -(-out * b // 32)
        if zt.dtype != "I32" or zt.shape != (nzw, ng):
            raise ReferenceError("%s.weight_zero_point: %s %s, expected I32 [%d, %d] (packed down dim 0)"
                                 % (mod, zt.dtype, list(zt.shape), nzw, ng))
        zw = np.frombuffer(zt.data, dtype="<u4").reshape(zt.shape)
        zp = unpack_stream(np.ascontiguousarray(zw.T), b, out).T - off  # [out, ng]
    gt = t.get("weight_g_idx")
    if args["g_idx"]:
        if gt is None:
            raise ReferenceError("%s has no weight_g_idx but its group has actorder group" % mod)
        if gt.dtype not in ("I32", "I64") or gt.shape != (n_in,):
            raise ReferenceError("%s.weight_g_idx: %s %s, expected I32 [%d]" % (mod, gt.dtype, list(gt.shape), n_in))
        gi = np.frombuffer(gt.data, dtype=_DTYPES[gt.dtype][1]).astype(np.int64)
        if gi.min() < 0 or gi.max() >= ng:
            raise ReferenceError("%s.weight_g_idx has entries outside [0, %d)" % (mod, ng))
    else:
        if gt is not None:
            raise ReferenceError("%s has weight_g_idx but its group has no actorder group" % mod)
        gi = np.arange(n_in, dtype=np.int64) // gs if strat == "group" else np.zeros(n_in, dtype=np.int64)
    # (q - zp) is an integer of at most 9 bits and the scale has at most 24 significant bits:
    # the float64 product is exact.
    return (q - zp[:, gi]).astype(np.float64) * scale[:, gi]


# ---------------------------------------------------------------------------
# Loading (MODEL.md §2, INPUTS.md §3.4)
# ---------------------------------------------------------------------------

TOWERS = ("vision_tower", "audio_tower", "embed_vision", "embed_audio",
          "multi_modal_projector", "vision_embedder")
TEXT_PREFIXES = ("model.language_model.", "language_model.model.", "model.")
QUANT_SUFFIXES = (".scales", ".biases")


def _is_tower(key):
    parts = key.split(".")
    if parts[0] in TOWERS:
        return True
    if len(parts) > 1 and parts[0] in ("model", "language_model") and parts[1] in TOWERS:
        return True
    return False


def _strip_text_prefix(key):
    for p in TEXT_PREFIXES:
        if key.startswith(p):
            return p, key[len(p):]
    return None, None


def _expected_in_features(rel, h):
    """In-features of a quantizable module from the architecture (for the INPUTS.md §3.4 cross-check)."""
    H, P, L = h["H"], h["P"], h["L"]
    if rel == "embed_tokens":
        return H
    if rel == "embed_tokens_per_layer":
        return L * P
    if rel == "per_layer_model_projection":
        return H
    if rel == "lm_head":
        return H
    parts = rel.split(".")
    if parts[0] != "layers":
        return None
    i = int(parts[1])
    ly = h["layers"][i]
    sub = ".".join(parts[2:])
    if sub in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "mlp.gate_proj",
               "mlp.up_proj", "router.proj", "per_layer_input_gate",
               "experts.switch_glu.gate_proj", "experts.switch_glu.up_proj"):
        return H
    if sub == "self_attn.o_proj":
        return h["Nq"] * ly["d"]
    if sub == "mlp.down_proj":
        return ly["I"]
    if sub == "experts.switch_glu.down_proj":
        return h["M"]
    if sub == "per_layer_projection":
        return P
    return None


def _kv_of_shared_layer(rel, h):
    parts = rel.split(".")
    if len(parts) >= 4 and parts[0] == "layers" and parts[1].isdigit():
        i = int(parts[1])
        if i < h["L"] and h["layers"][i]["shared"]:
            sub = ".".join(parts[2:4])
            return sub in ("self_attn.k_proj", "self_attn.v_proj", "self_attn.k_norm")
    return False


def load_checkpoint(ckpt):
    """Load a Gemma 4 text checkpoint into a dict of float64 arrays plus hyper-parameters.

    ckpt: a checkpoint directory (config.json + safetensors: HF / MLX / compressed-tensors
    pack-quantized) or a .gguf file."""
    if os.path.isfile(ckpt):
        return load_gguf(ckpt)
    with open(os.path.join(ckpt, "config.json"), "rb") as f:
        cfg_bytes = f.read()
    config = json.loads(cfg_bytes)
    tc, h, qblock = parse_config(config)
    ct = None
    if isinstance(qblock, CTConfig):
        ct, qblock = qblock, None
    raw, files = read_all_tensors(ckpt)

    # 1. classify by prefix FIRST (MODEL.md §2.6 collision hazard), then strip one text prefix.
    text = {}  # rel name -> (original key, RawTensor)
    ignored = {"tower": 0, "shared_kv": 0, "other": []}
    for key, t in raw.items():
        if _is_tower(key):
            ignored["tower"] += 1
            continue
        if key == "lm_head.weight" or key.startswith("lm_head."):
            text[key] = (key, t)  # checked against tying below
            continue
        pfx, rel = _strip_text_prefix(key)
        if rel is None:
            raise ReferenceError("tensor %s has no known text prefix" % key)
        if rel.split(".")[-1] in ("input_min", "input_max", "output_min", "output_max") \
                or "rotary_emb" in rel:
            ignored["other"].append(key)  # MODEL.md §2.6: clip bounds, rotary tables
            continue
        if _kv_of_shared_layer(rel, h):
            ignored["shared_kv"] += 1  # MODEL.md §2.5: redundant K/V of KV-shared layers
            continue
        if rel in text:
            raise ReferenceError("two tensors map to %s" % rel)
        text[rel] = (key, t)

    # 2. dequantize MLX affine triplets (INPUTS.md §2.4, §3.4) and upcast everything else.
    weights = {}
    quant_info = {}
    used = set()
    if ct is not None:
        _load_ct_modules(ct, text, weights, quant_info, used)
    for rel in sorted(text):
        if not rel.endswith(".scales"):
            continue
        if ct is not None:
            raise ReferenceError("%s: MLX scales in a compressed-tensors checkpoint" % text[rel][0])
        mod = rel[:-len(".scales")]
        key_scales, t_scales = text[rel]
        if mod + ".weight" not in text:
            raise ReferenceError("quantized module %s has scales but no weight" % mod)
        key_w, t_w = text[mod + ".weight"]
        mlx_path = key_scales[:-len(".scales")]
        cands = [mlx_path]
        if mlx_path.startswith("language_model."):
            cands.append(mlx_path[len("language_model."):])
        for p in ("language_model.model.", "model.", "model.language_model."):
            if p + mod not in cands:
                cands.append(p + mod)
        words = t_w.as_u32()
        r = resolve_quant(qblock, cands)
        if r is not None and r[2] != "affine":  # MX modes: U8 scales, no biases
            bits, gs, mode, src = r
            if (gs, bits) != MODE_DEFAULTS.get(mode) or t_scales.dtype != "U8" or mod + ".biases" in text:
                raise ReferenceError("module %s: %s needs U8 scales, group %s, bits %s and no biases"
                                     % (mod, mode, MODE_DEFAULTS[mode][0], MODE_DEFAULTS[mode][1]))
            scales = np.frombuffer(t_scales.data, dtype="u1").reshape(t_scales.shape)
            if words.shape[:-1] != scales.shape[:-1] or words.shape[-1] * 32 != scales.shape[-1] * gs * bits:
                raise ReferenceError("module %s: %s shapes %s %s disagree" % (mod, mode, words.shape, scales.shape))
            weights[mod + ".weight"] = dequantize_mx(words, scales, mode)
            quant_info[mod] = {"mode": mode, "bits": bits, "group_size": gs, "from": src or "global"}
            used.update((rel, mod + ".weight"))
            continue
        scales = t_scales.as_f64()
        if mod + ".biases" not in text:
            raise ReferenceError("quantized module %s has no .biases (affine needs them)" % mod)
        biases = text[mod + ".biases"][1].as_f64()
        if scales.shape != biases.shape or words.shape[:-1] != scales.shape[:-1]:
            raise ReferenceError("quantized module %s: inconsistent shapes %s %s %s"
                                 % (mod, words.shape, scales.shape, biases.shape))
        # bits/group from the config (INPUTS.md §3.1) and, independently, from the shapes given the
        # architecture's in-features (INPUTS.md §2.3 "Recovering (b, gs) from shapes"); both must agree.
        exp_in = _expected_in_features(mod, h)
        shape_bg = None
        if exp_in is not None:
            if exp_in % scales.shape[-1] or (32 * words.shape[-1]) % exp_in:
                raise ReferenceError("module %s: shapes %s / %s do not fit %d in-features"
                                     % (mod, words.shape, scales.shape, exp_in))
            shape_bg = (32 * words.shape[-1] // exp_in, exp_in // scales.shape[-1])
        if r is None:
            if shape_bg is None:
                raise ReferenceError("module %s is quantized but the config has no quantization "
                                     "block and its in-features are unknown" % mod)
            (bits, gs), mode, src = shape_bg, "affine", "shapes"
        else:
            bits, gs, mode, src = r
            src = src or "global"
        if mode != "affine":
            raise ReferenceError("module %s: quantization mode %s is not supported" % (mod, mode))
        if bits not in (2, 3, 4, 5, 6, 8) or gs not in (32, 64, 128):
            raise ReferenceError("module %s: bits %s group %s not allowed" % (mod, bits, gs))
        if (words.shape[-1] * 32) % bits or words.shape[-1] * 32 // bits != scales.shape[-1] * gs:
            raise ReferenceError("module %s: bits %d / group %d do not fit shapes %s, %s"
                                 % (mod, bits, gs, words.shape, scales.shape))
        if shape_bg is not None and shape_bg != (bits, gs):
            raise ReferenceError("module %s: config says bits %d group %d, shapes with %d "
                                 "in-features say bits %d group %d"
                                 % (mod, bits, gs, exp_in, shape_bg[0], shape_bg[1]))
        weights[mod + ".weight"] = dequantize_affine(words, scales, biases, bits, gs)
        quant_info[mod] = {"bits": bits, "group_size": gs, "from": src}
        used.update((rel, mod + ".weight", mod + ".biases"))
    for rel, (key, t) in text.items():
        if rel in used:
            continue
        if rel.endswith(".biases"):
            raise ReferenceError("%s has no matching .scales" % key)
        if t.dtype == "U32":
            raise ReferenceError("%s holds U32 codes but there is no %s.scales" % (key, rel[:-7]))
        weights[rel] = t.as_f64()

    # 3. MoE expert layouts (MODEL.md §2.3): HF fused -> split gate/up.
    if h["moe"]:
        M, E = h["M"], h["E"]
        for i in range(h["L"]):
            pre = "layers.%d.experts." % i
            if pre + "gate_up_proj" in weights:
                gu = weights.pop(pre + "gate_up_proj")
                if gu.shape != (E, 2 * M, h["H"]):
                    raise ReferenceError("%sgate_up_proj shape %s" % (pre, gu.shape))
                weights[pre + "gate"] = gu[:, :M, :]
                weights[pre + "up"] = gu[:, M:, :]
                weights[pre + "down"] = weights.pop(pre + "down_proj")
            elif pre + "switch_glu.gate_proj.weight" in weights:
                weights[pre + "gate"] = weights.pop(pre + "switch_glu.gate_proj.weight")
                weights[pre + "up"] = weights.pop(pre + "switch_glu.up_proj.weight")
                weights[pre + "down"] = weights.pop(pre + "switch_glu.down_proj.weight")
            elif pre + "0.gate_proj.weight" in weights:
                # per-expert Linear modules (compressed-tensors): experts.{e}.{gate,up,down}_proj,
                # stacked in expert order ([E, M, H] gate and up = the fused [E, 2M, H] split, [E, H, M]).
                for n in ("gate", "up", "down"):
                    ks = [pre + "%d.%s_proj.weight" % (e, n) for e in range(E)]
                    miss = [k for k in ks if k not in weights]
                    if miss:
                        raise ReferenceError("per-expert weights missing: %s" % ", ".join(miss[:4]))
                    mats = [weights.pop(k) for k in ks]
                    if len(set(m.shape for m in mats)) != 1:
                        raise ReferenceError("%s*.%s_proj: experts of different shapes" % (pre, n))
                    weights[pre + n] = np.stack(mats)

    # 4. tied head (MODEL.md §8.4): lm_head, if present, must equal the embedding.
    tied = config.get("tie_word_embeddings", tc.get("tie_word_embeddings", True))
    if tc.get("tie_word_embeddings") is False or tied is False:
        raise ReferenceError("untied output head: Gemma 4 releases are tied")
    if "lm_head.weight" in weights:
        lm = weights.pop("lm_head.weight")
        if lm.shape != weights["embed_tokens.weight"].shape or not np.array_equal(lm, weights["embed_tokens.weight"]):
            raise ReferenceError("lm_head.weight present and different from the tied embedding")

    model = {"config": config, "text_config": tc, "hp": h, "w": weights, "quant": quant_info,
             "files": files, "dir": ckpt, "config_sha256": hashlib.sha256(cfg_bytes).hexdigest(),
             "ignored": ignored, "format": "compressed-tensors" if ct is not None else "safetensors"}
    _check_shapes(model)
    return model


def _load_ct_modules(ct, text, weights, quant_info, used):
    """Dequantize every pack-quantized module (<m>.weight_packed + companions) of `text`
    (rel name -> (key, RawTensor)) into weights[<m>.weight]; check the config's coverage."""
    mods = {}
    for rel, (key, t) in text.items():
        for suf in CT_SUFFIXES:
            if rel.endswith(suf):
                mods.setdefault(rel[:-len(suf)], {})[suf[1:]] = (key, t)
                break
    for mod in sorted(mods):
        parts = mods[mod]
        if "weight_packed" not in parts:
            raise ReferenceError("%s has no weight_packed (only pack-quantized modules are read)"
                                 % sorted(k for k, _ in parts.values())[0])
        for need in ("weight_scale", "weight_shape"):
            if need not in parts:
                raise ReferenceError("pack-quantized module %s has no %s" % (mod, need))
        name = parts["weight_packed"][0][:-len(".weight_packed")]  # module name as stored
        if mod + ".weight" in text:
            raise ReferenceError("module %s has both a dense .weight and .weight_packed" % name)
        if not _CT_LINEAR.match(mod):
            raise ReferenceError("pack-quantized module %s is not a Linear module of the text model" % name)
        if ct.ignored(name, True):
            raise ReferenceError("module %s is pack-quantized but the config's ignore lists it" % name)
        args = ct.scheme(name, True)
        if args is None:
            raise ReferenceError("pack-quantized module %s matches no compressed-tensors config group" % name)
        weights[mod + ".weight"] = ct_dequantize(name, {k: v[1] for k, v in parts.items()}, args)
        quant_info[mod] = {"format": "compressed-tensors", "group": args["name"], "bits": args["bits"],
                           "group_size": args["group_size"], "strategy": args["strategy"],
                           "symmetric": args["symmetric"], "g_idx": args["g_idx"]}
        used.update(mod + "." + suf for suf in parts)
    # A dense Linear module that a group targets must be listed in ignore.
    for rel, (key, t) in sorted(text.items()):
        if rel.endswith(".weight") and _CT_LINEAR.match(rel[:-len(".weight")]):
            name = key[:-len(".weight")]
            if not ct.ignored(name, True) and ct.scheme(name, True) is not None:
                raise ReferenceError("dense module %s is targeted by compressed-tensors group %r and not "
                                     "listed in ignore" % (name, ct.scheme(name, True)["name"]))


# ---------------------------------------------------------------------------
# GGUF (the upstream format; INPUTS.md §6, §7.2): a .gguf file as llama.cpp writes the gemma4 architecture
# ---------------------------------------------------------------------------

GGUF_MAGIC = 0x46554747  # b"GGUF" little-endian
GGUF_DEFAULT_ALIGNMENT = 32
# ggml type id -> (name, block elements, block bytes)
GGML_TYPES = {
    0: ("F32", 1, 4), 1: ("F16", 1, 2), 2: ("Q4_0", 32, 18), 3: ("Q4_1", 32, 20),
    6: ("Q5_0", 32, 22), 7: ("Q5_1", 32, 24), 8: ("Q8_0", 32, 34), 9: ("Q8_1", 32, 40),
    10: ("Q2_K", 256, 84), 11: ("Q3_K", 256, 110), 12: ("Q4_K", 256, 144), 13: ("Q5_K", 256, 176),
    14: ("Q6_K", 256, 210), 15: ("Q8_K", 256, 292), 16: ("IQ2_XXS", 256, 66), 17: ("IQ2_XS", 256, 74),
    18: ("IQ3_XXS", 256, 98), 19: ("IQ1_S", 256, 50), 20: ("IQ4_NL", 32, 18), 21: ("IQ3_S", 256, 110),
    22: ("IQ2_S", 256, 82), 23: ("IQ4_XS", 256, 136), 24: ("I8", 1, 1), 25: ("I16", 1, 2),
    26: ("I32", 1, 4), 27: ("I64", 1, 8), 28: ("F64", 1, 8), 29: ("IQ1_M", 256, 56),
    30: ("BF16", 1, 2), 34: ("TQ1_0", 256, 54), 35: ("TQ2_0", 256, 66), 39: ("MXFP4", 32, 17),
    40: ("NVFP4", 64, 36), 41: ("Q1_0", 128, 18), 42: ("Q2_0", 64, 18),
}
GGUF_READ_TYPES = ("F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K",
                   "Q6_K", "IQ4_NL", "IQ4_XS", "IQ3_XXS", "IQ3_S", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ1_S", "IQ1_M",
                   "TQ1_0", "TQ2_0", "MXFP4")
# metadata value types: id -> (name, struct format) ; 8 STRING and 9 ARRAY are handled apart
GGUF_VTYPES = {0: ("UINT8", "<B"), 1: ("INT8", "<b"), 2: ("UINT16", "<H"), 3: ("INT16", "<h"),
               4: ("UINT32", "<I"), 5: ("INT32", "<i"), 6: ("FLOAT32", "<f"), 7: ("BOOL", "<B"),
               8: ("STRING", None), 9: ("ARRAY", None), 10: ("UINT64", "<Q"), 11: ("INT64", "<q"),
               12: ("FLOAT64", "<d")}


class GGUFValue:
    """One metadata value: vtype (name), value (python int/float/bool/str or list), and for
    arrays the element type name (etype)."""
    __slots__ = ("vtype", "value", "etype")

    def __init__(self, vtype, value, etype=None):
        self.vtype, self.value, self.etype = vtype, value, etype

    def __repr__(self):
        return "GGUFValue(%s%s, %r)" % (self.vtype, "[%s]" % self.etype if self.etype else "", self.value)


class _Cursor:
    def __init__(self, buf, path):
        self.buf, self.pos, self.path = buf, 0, path

    def take(self, n):
        if n < 0 or self.pos + n > len(self.buf):
            raise ReferenceError("%s: truncated GGUF (need %d bytes at offset %d, file has %d)"
                                 % (self.path, n, self.pos, len(self.buf)))
        b = self.buf[self.pos:self.pos + n]
        self.pos += n
        return b

    def unpack(self, fmt):
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]

    def string(self):
        n = self.unpack("<Q")
        try:
            return bytes(self.take(n)).decode("utf-8")
        except UnicodeDecodeError:
            raise ReferenceError("%s: GGUF string at offset %d is not UTF-8" % (self.path, self.pos))

    def value(self, vt, depth=0):
        if vt not in GGUF_VTYPES:
            raise ReferenceError("%s: unknown GGUF metadata value type %d" % (self.path, vt))
        name, fmt = GGUF_VTYPES[vt]
        if name == "STRING":
            return GGUFValue(name, self.string())
        if name == "ARRAY":
            if depth > 8:
                raise ReferenceError("%s: GGUF arrays nested too deeply" % self.path)
            et = self.unpack("<I")
            n = self.unpack("<Q")
            if et not in GGUF_VTYPES:
                raise ReferenceError("%s: unknown GGUF array element type %d" % (self.path, et))
            ename, efmt = GGUF_VTYPES[et]
            if efmt is not None:  # fixed-size elements: read in one go
                sz = struct.calcsize(efmt)
                if n > (len(self.buf) - self.pos) // sz:
                    raise ReferenceError("%s: GGUF array of %d elements exceeds the file" % (self.path, n))
                arr = np.frombuffer(self.take(n * sz), dtype=np.dtype(efmt))
                if ename == "BOOL":
                    if arr.size and arr.max() > 1:
                        raise ReferenceError("%s: GGUF BOOL array holds a value other than 0/1" % self.path)
                    vals = [bool(x) for x in arr]
                elif ename in ("FLOAT32", "FLOAT64"):
                    vals = [float(x) for x in arr]
                else:
                    vals = [int(x) for x in arr]
                return GGUFValue(name, vals, ename)
            if n > len(self.buf) - self.pos:
                raise ReferenceError("%s: GGUF array of %d elements exceeds the file" % (self.path, n))
            return GGUFValue(name, [self.value(et, depth + 1).value for _ in range(n)], ename)
        v = self.unpack(fmt)
        if name == "BOOL":
            if v > 1:
                raise ReferenceError("%s: GGUF BOOL value %d" % (self.path, v))
            v = bool(v)
        return GGUFValue(name, v)


class GGUFTensor:
    __slots__ = ("name", "ne", "shape", "type", "offset", "nbytes", "data")

    def __init__(self, name, ne, gtype, offset, nbytes):
        self.name, self.ne, self.type, self.offset, self.nbytes = name, tuple(ne), gtype, offset, nbytes
        self.shape = tuple(reversed(self.ne))  # numpy (C-order) shape = reversed ne
        self.data = None

    def as_f64(self):
        """Dequantize to float64 [shape], exactly."""
        buf, t, n = self.data, self.type, int(np.prod(self.shape, dtype=np.int64))
        if t == "F32":
            v = np.frombuffer(buf, dtype="<f4").astype(np.float64)
        elif t == "F16":
            v = np.frombuffer(buf, dtype="<f2").astype(np.float64)
        elif t == "BF16":
            v = (np.frombuffer(buf, dtype="<u2").astype(np.uint32) << 16).view(np.float32).astype(np.float64)
        elif t in GGML_DEQUANT:
            v = ggml_dequantize(t, buf).astype(np.float64)
        else:
            raise ReferenceError("GGUF tensor %s: type %s is not supported (only %s)"
                                 % (self.name, t, ", ".join(GGUF_READ_TYPES)))
        if v.size != n:
            raise ReferenceError("GGUF tensor %s: %d values for shape %s" % (self.name, v.size, self.shape))
        return v.reshape(self.shape)


# ---------------------------------------------------------------------------
# ggml block dequantization (INPUTS.md §7.2): every ggml weight type, written from the block structs of
# ggml's ggml-common.h and the formulas of ggml's reference dequantize_row_* (ggml-quants.c), in float32
# with ggml's order of operations, so every value equals ggml's bit for bit. The IQ codebooks are format
# data read at run time from ggml-common.h (build-ref/ggml/ggml/src/, extracted by setup.sh from
# llama.cpp's source; GGML_COMMON_H overrides the path).
# ---------------------------------------------------------------------------

_F32 = np.float32
_GGML_TABLES = {}


def ggml_tables():
    """The codebooks of ggml-common.h: {name: numpy array of the declared C type}."""
    if _GGML_TABLES:
        return _GGML_TABLES
    here = os.path.dirname(os.path.abspath(__file__))
    path = os.environ.get("GGML_COMMON_H") or os.path.join(here, "..", "build-ref", "ggml", "ggml", "src",
                                                           "ggml-common.h")
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise ReferenceError("ggml codebooks: cannot read %s (%s); run setup.sh" % (path, e.strerror))
    ctypes = {"uint8_t": np.uint8, "int8_t": np.int8, "uint32_t": np.uint32, "uint64_t": np.uint64}
    for m in re.finditer(r"GGML_TABLE_BEGIN\((\w+),\s*(\w+),\s*(\w+)\)(.*?)GGML_TABLE_END\(\)", text, re.S):
        ctype, name, body = m.group(1), m.group(2), re.sub(r"//[^\n]*", "", m.group(4))
        if ctype not in ctypes or name in _GGML_TABLES:
            continue
        vals = [int(x, 0) for x in re.findall(r"-?(?:0x[0-9a-fA-F]+|\d+)", body)]
        arr = np.array(vals, dtype=np.int64 if ctypes[ctype] is np.int8 else object).astype(ctypes[ctype])
        _GGML_TABLES[name] = arr
    want = {"kmask_iq2xs": 8, "ksigns_iq2xs": 128, "iq2xxs_grid": 256, "iq2xs_grid": 512, "iq2s_grid": 1024,
            "iq3xxs_grid": 256, "iq3s_grid": 512, "kvalues_iq4nl": 16, "kvalues_fp4": 16, "iq1s_grid": 2048}
    for name, n in want.items():
        if name not in _GGML_TABLES or _GGML_TABLES[name].size != n:
            got = _GGML_TABLES.get(name)
            _GGML_TABLES.clear()
            raise ReferenceError("%s: table %s has %s entries, expected %d"
                                 % (path, name, "no" if got is None else got.size, n))
    return _GGML_TABLES


def _grid_bytes(name, signed=False):
    """A codebook of packed 8-bit lanes (uint32/uint64, little-endian) as [entries, lanes] bytes."""
    t = ggml_tables()[name]
    b = t.astype(t.dtype.newbyteorder("<")).view(np.int8 if signed else np.uint8)
    return b.reshape(t.size, -1)


def _blocks(buf, bsz, tname):
    b = np.frombuffer(buf, dtype=np.uint8)
    if b.size % bsz:
        raise ReferenceError("%s data of %d bytes is not a whole number of %d-byte blocks" % (tname, b.size, bsz))
    return b.reshape(-1, bsz)


def _f16(b, off):
    """The little-endian f16 at byte off of every block, as float32 [nb, 1]."""
    return np.ascontiguousarray(b[:, off:off + 2]).view("<f2").astype(_F32)


def _u16(b, off, n):
    return np.ascontiguousarray(b[:, off:off + 2 * n]).view("<u2").astype(np.uint32)


def _u32(b, off, n):
    return np.ascontiguousarray(b[:, off:off + 4 * n]).view("<u4")


def _f(a):
    return np.asarray(a).astype(_F32)


def _nibbles(qs):
    """qs[j] low nibbles then high nibbles: elements 0..n−1, n..2n−1."""
    return np.concatenate([qs & 0x0F, qs >> 4], axis=-1)


def dq_q4_0(b):
    return _f(_nibbles(b[:, 2:18]).astype(np.int32) - 8) * _f16(b, 0)


def dq_q4_1(b):
    return _f(_nibbles(b[:, 4:20])) * _f16(b, 0) + _f16(b, 2)


def _q5(b, off_qh, off_qs):
    qh = _u32(b, off_qh, 1)  # [nb, 1]
    hi = ((qh >> np.arange(32, dtype=np.uint32)) & 1).astype(np.int32) << 4  # bit j of qh -> element j
    return _nibbles(b[:, off_qs:off_qs + 16]).astype(np.int32) | hi


def dq_q5_0(b):
    return _f(_q5(b, 2, 6) - 16) * _f16(b, 0)


def dq_q5_1(b):
    return _f(_q5(b, 4, 8)) * _f16(b, 0) + _f16(b, 2)


def dq_q8_0(b):
    return _f(b[:, 2:34].view(np.int8)) * _f16(b, 0)


def dq_mxfp4(b):
    e = b[:, 0:1].astype(np.uint32)  # E8M0, halved because kvalues are doubled E2M1 values
    bits = np.where(e < 2, np.uint32(0x00200000) << e, (e - 1) << 23).astype(np.uint32)
    d = bits.view(_F32)
    return _f(ggml_tables()["kvalues_fp4"][_nibbles(b[:, 1:17])]) * d


def dq_q2_k(b):
    scales, qs, d, dmin = b[:, 0:16], b[:, 16:80], _f16(b, 80), _f16(b, 82)
    out = []
    for half in range(2):
        q = qs[:, 32 * half:32 * half + 32]
        for j in range(4):
            for k in range(2):
                sc = scales[:, 8 * half + 2 * j + k:8 * half + 2 * j + k + 1]
                dl, ml = d * _f(sc & 0xF), dmin * _f(sc >> 4)
                out.append(dl * _f((q[:, 16 * k:16 * k + 16] >> (2 * j)) & 3) - ml)
    return np.concatenate(out, axis=1)


def dq_q3_k(b):
    hm, qs, d = b[:, 0:32], b[:, 32:96], _f16(b, 108)
    aux = _u32(b, 96, 3)
    a0, a1, tmp = aux[:, 0], aux[:, 1], aux[:, 2]
    k1, k2 = np.uint32(0x03030303), np.uint32(0x0F0F0F0F)
    words = np.stack([(a0 & k2) | (((tmp >> 0) & k1) << 4), (a1 & k2) | (((tmp >> 2) & k1) << 4),
                      ((a0 >> 4) & k2) | (((tmp >> 4) & k1) << 4), ((a1 >> 4) & k2) | (((tmp >> 6) & k1) << 4)],
                     axis=1).astype("<u4")
    scales = words.view(np.int8).astype(np.int32)  # [nb, 16]
    out, is_ = [], 0
    for half in range(2):
        q = qs[:, 32 * half:32 * half + 32]
        for j in range(4):
            m = 1 << (4 * half + j)
            for k in range(2):
                dl = d * _f(scales[:, is_:is_ + 1] - 32)
                is_ += 1
                lo = ((q[:, 16 * k:16 * k + 16] >> (2 * j)) & 3).astype(np.int32)
                out.append(dl * _f(lo - np.where(hm[:, 16 * k:16 * k + 16] & m, 0, 4)))
    return np.concatenate(out, axis=1)


def _scale_min_k4(s):
    """get_scale_min_k4: the 8 6-bit (scale, min) pairs of a 12-byte K-quant scales field."""
    s = s.astype(np.int32)
    sc = np.concatenate([s[:, 0:4] & 63, (s[:, 8:12] & 0xF) | ((s[:, 0:4] >> 6) << 4)], axis=1)
    mn = np.concatenate([s[:, 4:8] & 63, (s[:, 8:12] >> 4) | ((s[:, 4:8] >> 6) << 4)], axis=1)
    return sc, mn


def _k_scaled(b, q):
    """Q4_K / Q5_K: d·sc·q − dmin·m per 32-element sub-block; q [nb, 256] in element order."""
    d, dmin = _f16(b, 0), _f16(b, 2)
    sc, mn = _scale_min_k4(b[:, 4:16])
    d1 = np.repeat(d * _f(sc), 32, axis=1)
    m1 = np.repeat(dmin * _f(mn), 32, axis=1)
    return d1 * _f(q) - m1


def _k_order(lo, hi):
    """[nb, 4 groups of 32 bytes] low/high nibble planes -> element order lo0 hi0 lo1 hi1 ..."""
    return np.concatenate([x for g in range(4) for x in (lo[:, 32 * g:32 * g + 32], hi[:, 32 * g:32 * g + 32])],
                          axis=1)


def dq_q4_k(b):
    qs = b[:, 16:144].astype(np.int32)
    return _k_scaled(b, _k_order(qs & 0xF, qs >> 4))


def dq_q5_k(b):
    qh, qs = b[:, 16:48].astype(np.int32), b[:, 48:176].astype(np.int32)
    lo = np.concatenate([(qs[:, 32 * g:32 * g + 32] & 0xF) + (((qh >> (2 * g)) & 1) << 4) for g in range(4)], axis=1)
    hi = np.concatenate([(qs[:, 32 * g:32 * g + 32] >> 4) + (((qh >> (2 * g + 1)) & 1) << 4) for g in range(4)],
                        axis=1)
    return _k_scaled(b, _k_order(lo, hi))


def dq_q6_k(b):
    ql, qh, d = b[:, 0:128].astype(np.int32), b[:, 128:192].astype(np.int32), _f16(b, 208)
    sc = b[:, 192:208].view(np.int8)
    out = []
    for half in range(2):
        l_, h_, s_ = ql[:, 64 * half:64 * half + 64], qh[:, 32 * half:32 * half + 32], sc[:, 8 * half:8 * half + 8]
        qv = [(l_[:, 0:32] & 0xF) | (((h_ >> 0) & 3) << 4), (l_[:, 32:64] & 0xF) | (((h_ >> 2) & 3) << 4),
              (l_[:, 0:32] >> 4) | (((h_ >> 4) & 3) << 4), (l_[:, 32:64] >> 4) | (((h_ >> 6) & 3) << 4)]
        for r in range(4):
            for k in range(2):  # is = l/16: two scales per 32 values
                out.append((d * _f(s_[:, 2 * r + k:2 * r + k + 1])) * _f(qv[r][:, 16 * k:16 * k + 16] - 32))
    return np.concatenate(out, axis=1)


def _trits(q, n):
    """TQ1_0: trit n of a base-3 fixed-point byte: (uint8(q·3^n)·3) >> 8."""
    return (((q.astype(np.uint32) * 3 ** n) & 0xFF) * 3) >> 8


def dq_tq1_0(b):
    qs, qh, d = b[:, 0:48], b[:, 48:52], _f16(b, 52)
    parts = [_trits(qs[:, 0:32], n) for n in range(5)] + [_trits(qs[:, 32:48], n) for n in range(5)] + \
            [_trits(qh, n) for n in range(4)]
    return _f(np.concatenate(parts, axis=1).astype(np.int32) - 1) * d


def dq_tq2_0(b):
    qs, d = b[:, 0:64], _f16(b, 64)
    parts = [(qs[:, j:j + 32] >> (2 * l)) & 3 for j in (0, 32) for l in range(4)]
    return _f(np.concatenate(parts, axis=1).astype(np.int32) - 1) * d


def _signed(v, signs, bit0=0):
    """v [nb, 8] float32 times ±1 by bits bit0.. of signs [nb, 1] (set = negative), as ggml multiplies."""
    mask = ggml_tables()["kmask_iq2xs"][bit0:bit0 + v.shape[1]]
    return v * np.where(signs & mask, _F32(-1), _F32(1))


def dq_iq2_xxs(b):
    T = ggml_tables()
    grid, d = _grid_bytes("iq2xxs_grid"), _f16(b, 0)
    out = []
    for ib in range(8):
        a = _u32(b, 2 + 8 * ib, 2)
        idx, hi = b[:, 2 + 8 * ib:6 + 8 * ib], a[:, 1:2]
        db = d * (_F32(0.5) + _f(hi >> 28)) * _F32(0.25)
        for l in range(4):
            signs = T["ksigns_iq2xs"][(hi >> (7 * l)) & 127]
            out.append(_signed(db * _f(grid[idx[:, l]]), signs))
    return np.concatenate(out, axis=1)


def dq_iq2_xs(b):
    T = ggml_tables()
    grid, d, qs, scales = _grid_bytes("iq2xs_grid"), _f16(b, 0), _u16(b, 2, 32), b[:, 66:74]
    out = []
    for ib in range(8):
        db = [d * (_F32(0.5) + _f(scales[:, ib:ib + 1] & 0xF)) * _F32(0.25),
              d * (_F32(0.5) + _f(scales[:, ib:ib + 1] >> 4)) * _F32(0.25)]
        for l in range(4):
            q = qs[:, 4 * ib + l]
            out.append(_signed(db[l // 2] * _f(grid[q & 511]), T["ksigns_iq2xs"][q >> 9][:, None]))
    return np.concatenate(out, axis=1)


def dq_iq2_s(b):
    grid, d = _grid_bytes("iq2s_grid"), _f16(b, 0)
    qs, signs, qh, scales = b[:, 2:34].astype(np.int32), b[:, 34:66], b[:, 66:74].astype(np.int32), b[:, 74:82]
    out = []
    for ib in range(8):
        db = [d * (_F32(0.5) + _f(scales[:, ib:ib + 1] & 0xF)) * _F32(0.25),
              d * (_F32(0.5) + _f(scales[:, ib:ib + 1] >> 4)) * _F32(0.25)]
        for l in range(4):
            idx = qs[:, 4 * ib + l] | ((qh[:, ib] << (8 - 2 * l)) & 0x300)
            out.append(_signed(db[l // 2] * _f(grid[idx]), signs[:, 4 * ib + l:4 * ib + l + 1]))
    return np.concatenate(out, axis=1)


def dq_iq3_xxs(b):
    T = ggml_tables()
    grid, d, qs = _grid_bytes("iq3xxs_grid"), _f16(b, 0), b[:, 2:66]
    out = []
    for ib in range(8):
        a = _u32(b, 66 + 4 * ib, 1)
        db = d * (_F32(0.5) + _f(a >> 28)) * _F32(0.5)
        for l in range(4):
            signs = T["ksigns_iq2xs"][(a >> (7 * l)) & 127]
            g = np.concatenate([grid[qs[:, 8 * ib + 2 * l]], grid[qs[:, 8 * ib + 2 * l + 1]]], axis=1)
            out.append(_signed(db * _f(g), signs))
    return np.concatenate(out, axis=1)


def dq_iq3_s(b):
    grid, d = _grid_bytes("iq3s_grid"), _f16(b, 0)
    qs, qh, signs, scales = b[:, 2:66].astype(np.int32), b[:, 66:74].astype(np.int32), b[:, 74:106], b[:, 106:110]
    out = []
    for ib in range(8):
        sc = scales[:, ib // 2:ib // 2 + 1]
        db = d * _f(1 + 2 * ((sc >> (4 * (ib % 2))) & 0xF).astype(np.int32))
        for l in range(4):
            i1 = qs[:, 8 * ib + 2 * l] | ((qh[:, ib] << (8 - 2 * l)) & 256)
            i2 = qs[:, 8 * ib + 2 * l + 1] | ((qh[:, ib] << (7 - 2 * l)) & 256)
            g = np.concatenate([grid[i1], grid[i2]], axis=1)
            out.append(_signed(db * _f(g), signs[:, 4 * ib + l:4 * ib + l + 1]))
    return np.concatenate(out, axis=1)


_IQ1_DELTA = _F32(0.125)  # IQ1S_DELTA = IQ1M_DELTA


def dq_iq1_s(b):
    grid, d, qs, qh = _grid_bytes("iq1s_grid", signed=True), _f16(b, 0), b[:, 2:34].astype(np.int32), _u16(b, 34, 8)
    out = []
    for ib in range(8):
        h = qh[:, ib:ib + 1]
        dl = d * _f(2 * ((h >> 12) & 7) + 1)
        delta = np.where(h & 0x8000, -_IQ1_DELTA, _IQ1_DELTA)
        for l in range(4):
            idx = qs[:, 4 * ib + l] | (((qh[:, ib] >> (3 * l)) & 7) << 8).astype(np.int32)
            out.append(dl * (_f(grid[idx]) + delta))
    return np.concatenate(out, axis=1)


def dq_iq1_m(b):
    grid = _grid_bytes("iq1s_grid", signed=True)
    qs, qh, sc = b[:, 0:32].astype(np.int32), b[:, 32:48].astype(np.int32), _u16(b, 48, 4)
    u = (sc[:, 0] >> 12) | ((sc[:, 1] >> 8) & 0x00F0) | ((sc[:, 2] >> 4) & 0x0F00) | (sc[:, 3] & 0xF000)
    d = u.astype("<u2").view("<f2").astype(_F32)[:, None]
    out = []
    for ib in range(8):
        s = sc[:, ib // 2:ib // 2 + 1]
        dl = [d * _f(2 * ((s >> (6 * (ib % 2) + 0)) & 7) + 1), d * _f(2 * ((s >> (6 * (ib % 2) + 3)) & 7) + 1)]
        h0, h1 = qh[:, 2 * ib], qh[:, 2 * ib + 1]
        idx = [qs[:, 4 * ib + 0] | ((h0 << 8) & 0x700), qs[:, 4 * ib + 1] | ((h0 << 4) & 0x700),
               qs[:, 4 * ib + 2] | ((h1 << 8) & 0x700), qs[:, 4 * ib + 3] | ((h1 << 4) & 0x700)]
        bits = [h0 & 0x08, h0 & 0x80, h1 & 0x08, h1 & 0x80]
        for l in range(4):
            delta = np.where(bits[l][:, None] != 0, -_IQ1_DELTA, _IQ1_DELTA)
            out.append(dl[l // 2] * (_f(grid[idx[l]]) + delta))
    return np.concatenate(out, axis=1)


def dq_iq4_nl(b):
    return _f16(b, 0) * _f(ggml_tables()["kvalues_iq4nl"][_nibbles(b[:, 2:18])])


def dq_iq4_xs(b):
    kv, d = ggml_tables()["kvalues_iq4nl"], _f16(b, 0)
    sh, sl, qs = _u16(b, 2, 1), b[:, 4:8].astype(np.int32), b[:, 8:136]
    out = []
    for ib in range(8):
        ls = ((sl[:, ib // 2:ib // 2 + 1] >> (4 * (ib % 2))) & 0xF) | (((sh >> (2 * ib)) & 3) << 4).astype(np.int32)
        out.append((d * _f(ls - 32)) * _f(kv[_nibbles(qs[:, 16 * ib:16 * ib + 16])]))
    return np.concatenate(out, axis=1)


# ggml type name -> (block elements, block bytes, dequantizer of [nb, block bytes] -> float32 [nb, elements])
GGML_DEQUANT = {
    "Q4_0": (32, 18, dq_q4_0), "Q4_1": (32, 20, dq_q4_1), "Q5_0": (32, 22, dq_q5_0), "Q5_1": (32, 24, dq_q5_1),
    "Q8_0": (32, 34, dq_q8_0), "Q2_K": (256, 84, dq_q2_k), "Q3_K": (256, 110, dq_q3_k),
    "Q4_K": (256, 144, dq_q4_k), "Q5_K": (256, 176, dq_q5_k), "Q6_K": (256, 210, dq_q6_k),
    "IQ4_NL": (32, 18, dq_iq4_nl), "IQ4_XS": (256, 136, dq_iq4_xs), "IQ3_XXS": (256, 98, dq_iq3_xxs),
    "IQ3_S": (256, 110, dq_iq3_s), "IQ2_XXS": (256, 66, dq_iq2_xxs), "IQ2_XS": (256, 74, dq_iq2_xs),
    "IQ2_S": (256, 82, dq_iq2_s), "IQ1_S": (256, 50, dq_iq1_s), "IQ1_M": (256, 56, dq_iq1_m),
    "TQ1_0": (256, 54, dq_tq1_0), "TQ2_0": (256, 66, dq_tq2_0), "MXFP4": (32, 17, dq_mxfp4),
}


def ggml_dequantize(tname, buf):
    """The float32 values of ggml blocks of type tname (bytes), as ggml's dequantize_row_* gives them."""
    blk, bsz, fn = GGML_DEQUANT[tname]
    b = _blocks(buf, bsz, tname)
    with np.errstate(over="ignore", invalid="ignore"):  # inf/NaN block scales propagate as in ggml
        v = fn(b)
    assert v.dtype == _F32 and v.shape == (b.shape[0], blk), (tname, v.dtype, v.shape)
    return v.reshape(-1)


def read_gguf(path):
    """Parse a GGUF file (version 3, or 2): header, metadata, tensor infos, aligned data.

    Returns a dict: version, alignment, kv {key: GGUFValue} (file order), tensors {name: GGUFTensor}
    (file order, data attached), meta_bytes (header + metadata, for the config hash)."""
    with open(path, "rb") as f:
        blob = f.read()
    c = _Cursor(memoryview(blob), path)
    if len(blob) < 24 or c.unpack("<I") != GGUF_MAGIC:
        raise ReferenceError("%s: not a GGUF file (bad magic)" % path)
    version = c.unpack("<I")
    if version not in (2, 3):
        raise ReferenceError("%s: GGUF version %d (only 3, and 2, are read)" % (path, version))
    n_tensors = c.unpack("<Q")
    n_kv = c.unpack("<Q")
    if n_tensors > len(blob) or n_kv > len(blob):
        raise ReferenceError("%s: implausible GGUF counts (%d tensors, %d keys)" % (path, n_tensors, n_kv))
    kv = {}
    for _ in range(n_kv):
        key = c.string()
        vt = c.unpack("<I")
        if key in kv:
            raise ReferenceError("%s: metadata key %s appears twice" % (path, key))
        kv[key] = c.value(vt)
    meta_end = c.pos
    align = GGUF_DEFAULT_ALIGNMENT
    if "general.alignment" in kv:
        a = kv["general.alignment"]
        if a.vtype != "UINT32" or a.value <= 0 or a.value % 8:
            raise ReferenceError("%s: general.alignment %r must be a UINT32 multiple of 8" % (path, a))
        align = a.value
    infos = []
    for _ in range(n_tensors):
        name = c.string()
        nd = c.unpack("<I")
        if not 1 <= nd <= 4:
            raise ReferenceError("%s: tensor %s has %d dimensions" % (path, name, nd))
        ne = [c.unpack("<Q") for _ in range(nd)]
        tid = c.unpack("<I")
        off = c.unpack("<Q")
        if tid not in GGML_TYPES:
            raise ReferenceError("%s: tensor %s has unknown ggml type id %d" % (path, name, tid))
        tname, blk, bsz = GGML_TYPES[tid]
        if tname not in GGUF_READ_TYPES:
            raise ReferenceError("%s: tensor %s has type %s (id %d); only %s are read"
                                 % (path, name, tname, tid, ", ".join(GGUF_READ_TYPES)))
        if any(x <= 0 for x in ne) or ne[0] % blk:
            raise ReferenceError("%s: tensor %s: bad dimensions %s for %s" % (path, name, ne, tname))
        nel = 1
        for x in ne:
            nel *= x
        infos.append(GGUFTensor(name, ne, tname, off, nel // blk * bsz))
    data_start = c.pos + (-c.pos) % align
    tensors = {}
    spans = []
    for t in infos:
        if t.name in tensors:
            raise ReferenceError("%s: tensor %s appears twice" % (path, t.name))
        if t.offset % align:
            raise ReferenceError("%s: tensor %s offset %d is not a multiple of %d" % (path, t.name, t.offset, align))
        b = data_start + t.offset
        if b + t.nbytes > len(blob):
            raise ReferenceError("%s: tensor %s data [%d, %d) beyond the end of the file (%d)"
                                 % (path, t.name, b, b + t.nbytes, len(blob)))
        t.data = blob[b:b + t.nbytes]
        tensors[t.name] = t
        spans.append((t.offset, t.offset + t.nbytes, t.name))
    spans.sort()
    for (b0, e0, n0), (b1, e1, n1) in zip(spans, spans[1:]):
        if b1 < e0:
            raise ReferenceError("%s: tensors %s and %s overlap" % (path, n0, n1))
    return {"version": version, "alignment": align, "kv": kv, "tensors": tensors,
            "meta_bytes": blob[:meta_end], "data_start": data_start, "size": len(blob)}


_GGUF_INT_TYPES = ("UINT8", "INT8", "UINT16", "INT16", "UINT32", "INT32", "UINT64", "INT64")


def _gguf_num(kv, key, kind="int", required=True, default=None, per_layer=None):
    """A metadata number. kind 'int' (any integer type) or 'float' (FLOAT32 values are given back
    as the shortest decimal that rounds to the same float32, e.g. 1e-06 rather than
    9.999999974752427e-07: the value the converter was given). per_layer=L also accepts an
    array of L numbers and returns a list."""
    if key not in kv:
        if required:
            raise ReferenceError("GGUF: required metadata key %s is missing" % key)
        return default
    v = kv[key]

    def one(vtype, x):
        if kind == "int":
            if vtype not in _GGUF_INT_TYPES:
                raise ReferenceError("GGUF: %s has type %s, expected an integer" % (key, vtype))
            return int(x)
        if vtype == "FLOAT32":
            return float(str(np.float32(x)))
        if vtype == "FLOAT64" or vtype in _GGUF_INT_TYPES:
            return float(x)
        raise ReferenceError("GGUF: %s has type %s, expected a number" % (key, vtype))

    if v.vtype == "ARRAY":
        if per_layer is None:
            raise ReferenceError("GGUF: %s is an array, expected a scalar" % key)
        if len(v.value) != per_layer:
            raise ReferenceError("GGUF: %s has %d entries for %d layers" % (key, len(v.value), per_layer))
        return [one(v.etype, x) for x in v.value]
    return one(v.vtype, v.value)


# GGUF tensor name -> HF text-model name (MODEL.md §2 names without the model prefix)
GGUF_GLOBAL_NAMES = {
    "token_embd.weight": "embed_tokens.weight",
    "output.weight": "lm_head.weight",
    "output_norm.weight": "norm.weight",
    "per_layer_token_embd.weight": "embed_tokens_per_layer.weight",
    "per_layer_model_proj.weight": "per_layer_model_projection.weight",
    "per_layer_proj_norm.weight": "per_layer_projection_norm.weight",
}
GGUF_LAYER_NAMES = {
    "attn_norm.weight": "input_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_output.weight": "self_attn.o_proj.weight",
    "attn_q_norm.weight": "self_attn.q_norm.weight",
    "attn_k_norm.weight": "self_attn.k_norm.weight",
    "post_attention_norm.weight": "post_attention_layernorm.weight",
    "ffn_norm.weight": "pre_feedforward_layernorm.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
    "post_ffw_norm.weight": "post_feedforward_layernorm.weight",
    "pre_ffw_norm_2.weight": "pre_feedforward_layernorm_2.weight",
    "post_ffw_norm_1.weight": "post_feedforward_layernorm_1.weight",
    "post_ffw_norm_2.weight": "post_feedforward_layernorm_2.weight",
    "ffn_gate_inp.weight": "router.proj.weight",
    "ffn_gate_inp.scale": "router.scale",
    "ffn_down_exps.scale": "router.per_expert_scale",
    "ffn_gate_up_exps.weight": "experts.gate_up_proj",  # [E, 2M, H], gate rows first
    "ffn_gate_exps.weight": "experts.gate",  # separate layout [E, M, H]
    "ffn_up_exps.weight": "experts.up",
    "ffn_down_exps.weight": "experts.down",  # [E, H, M]
    "layer_output_scale.weight": "layer_scalar",
    "inp_gate.weight": "per_layer_input_gate.weight",
    "proj.weight": "per_layer_projection.weight",
    "post_norm.weight": "post_per_layer_input_norm.weight",
}
_GGUF_BLK = re.compile(r"^blk\.(0|[1-9][0-9]*)\.(.+)$")


def gguf_config(kv, tensors):
    """Hyper-parameters of a gemma4 GGUF as an HF gemma4_text config dict (notes §5), plus the
    per-layer KV-head and MLP-width lists when the file gives arrays."""
    arch = kv.get("general.architecture")
    if arch is None or arch.vtype != "STRING" or arch.value != "gemma4":
        raise ReferenceError("GGUF: general.architecture is %r, expected gemma4"
                             % (arch.value if arch is not None else None))
    g = lambda k, **a: _gguf_num(kv, "gemma4." + k, **a)
    L = g("block_count")
    if L <= 0:
        raise ReferenceError("GGUF: block_count %d" % L)
    H = g("embedding_length")
    nq = g("attention.head_count", per_layer=L)
    if isinstance(nq, list):
        if len(set(nq)) != 1:
            raise ReferenceError("GGUF: attention.head_count differs between layers (%s)" % nq)
        nq = nq[0]
    gd = g("attention.key_length")
    hd = g("attention.key_length_swa")
    for k, ref in (("attention.value_length", gd), ("attention.value_length_swa", hd)):
        v = g(k, required=False)
        if v is not None and v != ref:
            raise ReferenceError("GGUF: %s %d != key length %d" % (k, v, ref))

    # layer types: BOOL[L], true = sliding (a scalar n: every n-th layer is full)
    if "gemma4.attention.sliding_window_pattern" not in kv:
        raise ReferenceError("GGUF: required metadata key gemma4.attention.sliding_window_pattern is missing")
    swp = kv["gemma4.attention.sliding_window_pattern"]
    if swp.vtype == "ARRAY":
        if swp.etype != "BOOL" or len(swp.value) != L:
            raise ReferenceError("GGUF: sliding_window_pattern must be BOOL[%d]" % L)
        lt = [SLIDING if s else FULL for s in swp.value]
    else:
        n = g("attention.sliding_window_pattern")
        if n <= 0:
            raise ReferenceError("GGUF: sliding_window_pattern %d" % n)
        lt = [FULL if (i + 1) % n == 0 else SLIDING for i in range(L)]
    if lt[-1] != FULL:
        raise ReferenceError("GGUF: the last layer is sliding (Gemma 4 ends on a full layer)")

    shared = g("attention.shared_kv_layers", required=False, default=0)
    if not 0 <= shared < L:
        raise ReferenceError("GGUF: shared_kv_layers %d out of range" % shared)
    F0 = L - shared

    kvh = g("attention.head_count_kv", per_layer=L)
    kv_layers = kvh if isinstance(kvh, list) else [kvh] * L
    g_swa = sorted(set(kv_layers[i] for i in range(L) if lt[i] == SLIDING))
    g_full = sorted(set(kv_layers[i] for i in range(L) if lt[i] == FULL))
    if len(g_swa) > 1 or len(g_full) > 1:
        raise ReferenceError("GGUF: head_count_kv differs between layers of one type (%s)" % kv_layers)
    G = g_swa[0] if g_swa else g_full[0]

    ff = g("feed_forward_length", per_layer=L)
    ff_layers = ff if isinstance(ff, list) else [ff] * L
    I0 = ff_layers[0]
    double = [x == 2 * I0 for x in ff_layers]
    if not all(x == I0 or x == 2 * I0 for x in ff_layers) or \
            any(double[i] != (i >= F0 and any(double)) for i in range(L)):
        raise ReferenceError("GGUF: feed_forward_length %s is neither one width nor the double-wide "
                             "pattern (width on the %d KV-owning layers, twice that on the shared ones)"
                             % (ff_layers, F0))

    # attention_k_eq_v: the KV-owning full layers carry no attn_v
    owners_full = [i for i in range(F0) if lt[i] == FULL]
    has_v = [("blk.%d.attn_v.weight" % i) in tensors for i in owners_full]
    if any(has_v) and not all(has_v):
        raise ReferenceError("GGUF: attn_v present on some KV-owning full layers and not others")
    keqv = bool(owners_full) and not any(has_v)
    for i in range(F0):
        if lt[i] == SLIDING and ("blk.%d.attn_v.weight" % i) not in tensors:
            raise ReferenceError("GGUF: sliding layer %d owns KV but has no attn_v "
                                 "(k=v exists only on full layers)" % i)

    if "token_embd.weight" not in tensors:
        raise ReferenceError("GGUF: token_embd.weight is missing")
    V = tensors["token_embd.weight"].shape[0]
    P = g("embedding_length_per_layer_input")
    if P > 0 and "per_layer_token_embd.weight" not in tensors:
        raise ReferenceError("GGUF: embedding_length_per_layer_input is %d but per_layer_token_embd.weight "
                             "is missing" % P)
    bad = [(k, v) for k, v in (("embedding_length", H), ("attention.head_count", nq),
                               ("attention.key_length", gd), ("attention.key_length_swa", hd),
                               ("head_count_kv", min(kv_layers)), ("feed_forward_length", min(ff_layers)))
           if v <= 0] + [(k, v) for k, v in (("key_length", gd), ("key_length_swa", hd)) if v % 2]
    if bad or P < 0:
        raise ReferenceError("GGUF: implausible hyper-parameters %s" % (bad or [("per_layer_input", P)]))
    Vp = tensors["per_layer_token_embd.weight"].shape[0] if "per_layer_token_embd.weight" in tensors else None

    theta_full = g("rope.freq_base", kind="float")
    # rope.freq_base_swa: optional for llama.cpp, which then uses rope.freq_base
    rope = {SLIDING: {"rope_type": "default",
                      "rope_theta": g("rope.freq_base_swa", kind="float", required=False, default=theta_full)}}
    dc_swa = g("rope.dimension_count_swa", required=False)
    if dc_swa is not None and dc_swa != hd:
        raise ReferenceError("GGUF: rope.dimension_count_swa %d != key_length_swa %d (sliding layers "
                             "rotate the whole head)" % (dc_swa, hd))
    if FULL in lt:
        dc = g("rope.dimension_count", required=False)
        if dc is not None and dc != gd:
            raise ReferenceError("GGUF: rope.dimension_count %d != key_length %d" % (dc, gd))
        if "rope_freqs.weight" not in tensors:
            raise ReferenceError("GGUF: rope_freqs.weight is missing (needed by the full layers)")
        rf = tensors["rope_freqs.weight"]
        if rf.type != "F32" or rf.shape != (gd // 2,):
            raise ReferenceError("GGUF: rope_freqs.weight must be F32 [%d], found %s %s" % (gd // 2, rf.type, rf.shape))
        f = np.frombuffer(rf.data, dtype="<f4")
        n1 = int(np.sum(f == np.float32(1.0)))
        if not (np.all(f[:n1] == np.float32(1.0)) and np.all(f[n1:] == np.float32(1e30))):
            raise ReferenceError("GGUF: rope_freqs.weight is not 1.0 x A then 1e30 (proportional RoPE)")
        rope[FULL] = {"rope_type": "proportional", "rope_theta": theta_full,
                      "partial_rotary_factor": 2.0 * n1 / gd}

    tc = {
        "model_type": "gemma4_text",
        "hidden_size": H, "num_hidden_layers": L, "intermediate_size": I0,
        "num_attention_heads": nq, "num_key_value_heads": G,
        "num_global_key_value_heads": g_full[0] if (keqv and g_full) else None,
        "head_dim": hd, "global_head_dim": gd,
        "attention_k_eq_v": keqv, "num_kv_shared_layers": shared,
        "use_double_wide_mlp": any(double),
        "hidden_size_per_layer_input": P, "vocab_size": V, "vocab_size_per_layer_input": Vp,
        "sliding_window": g("attention.sliding_window"),
        "layer_types": lt, "rope_parameters": rope,
        "final_logit_softcapping": g("final_logit_softcapping", kind="float", required=False),
        "rms_norm_eps": g("attention.layer_norm_rms_epsilon", kind="float"),
        "hidden_activation": "gelu_pytorch_tanh", "tie_word_embeddings": True,
    }
    ne = g("expert_count", required=False, default=0)
    if ne:
        tc.update(enable_moe_block=True, num_experts=ne, top_k_experts=g("expert_used_count"),
                  moe_intermediate_size=g("expert_feed_forward_length"))
    return tc, kv_layers, ff_layers


def load_gguf(path):
    """Load a gemma4 GGUF file into the same model dict as load_checkpoint."""
    gf = read_gguf(path)
    tensors = gf["tensors"]
    tc, kv_layers, ff_layers = gguf_config(gf["kv"], tensors)
    _, h, _ = parse_config(tc)
    for i, ly in enumerate(h["layers"]):  # the file's per-layer values (checked consistent above)
        ly["G"], ly["I"] = kv_layers[i], ff_layers[i]
        if h["Nq"] % ly["G"]:
            raise ReferenceError("layer %d: %d query heads not divisible by %d KV heads" % (i, h["Nq"], ly["G"]))

    weights, quant_info = {}, {}
    ignored = {"tower": 0, "shared_kv": 0, "other": ["rope_freqs.weight"] if "rope_freqs.weight" in tensors else []}
    for name, t in tensors.items():
        if name == "rope_freqs.weight":
            continue
        if name in GGUF_GLOBAL_NAMES:
            rel = GGUF_GLOBAL_NAMES[name]
        else:
            m = _GGUF_BLK.match(name)
            if m is None or m.group(2) not in GGUF_LAYER_NAMES or int(m.group(1)) >= h["L"]:
                raise ReferenceError("GGUF: unknown tensor %s" % name)
            rel = "layers.%s.%s" % (m.group(1), GGUF_LAYER_NAMES[m.group(2)])
            if _kv_of_shared_layer(rel, h):
                ignored["shared_kv"] += 1  # converter keeps the redundant K/V of KV-shared layers
                continue
        if rel in weights:
            raise ReferenceError("GGUF: two tensors map to %s" % rel)
        weights[rel] = t.as_f64()
        if t.type in GGML_DEQUANT:
            quant_info[rel] = {"format": "gguf", "type": t.type}

    for i in range(h["L"]):
        pre = "layers.%d." % i
        if pre + "layer_scalar" not in weights:  # llama.cpp: absent layer_output_scale = no scaling
            sys.stderr.write("reference: warning: GGUF has no blk.%d.layer_output_scale.weight; using 1.0\n" % i)
            weights[pre + "layer_scalar"] = np.ones(1)
        gu = pre + "experts.gate_up_proj"
        if gu in weights:
            if pre + "experts.gate" in weights or pre + "experts.up" in weights:
                raise ReferenceError("GGUF: layer %d has both fused and separate gate/up experts" % i)
            w = weights.pop(gu)
            if not h["moe"] or w.shape != (h["E"], 2 * h["M"], h["H"]):
                raise ReferenceError("GGUF: blk.%d.ffn_gate_up_exps.weight shape %s" % (i, w.shape))
            weights[pre + "experts.gate"] = w[:, :h["M"], :]
            weights[pre + "experts.up"] = w[:, h["M"]:, :]

    if "lm_head.weight" in weights:  # output.weight: only as a copy of the tied embedding
        lm = weights.pop("lm_head.weight")
        if lm.shape != weights["embed_tokens.weight"].shape or not np.array_equal(lm, weights["embed_tokens.weight"]):
            raise ReferenceError("GGUF: output.weight present and different from token_embd.weight")

    model = {"config": tc, "text_config": tc, "hp": h, "w": weights, "quant": quant_info,
             "files": [os.path.basename(path)], "dir": os.path.dirname(os.path.abspath(path)),
             "config_sha256": hashlib.sha256(gf["meta_bytes"]).hexdigest(),
             "ignored": ignored, "format": "gguf", "gguf": {"version": gf["version"],
                                                            "alignment": gf["alignment"]}}
    _check_shapes(model)
    return model


def _check_shapes(model):
    """Every tensor the forward needs is present with the shape of MODEL.md §2.2 - §2.3; nothing extra."""
    h, w = model["hp"], model["w"]
    H, P, L, V, Nq = h["H"], h["P"], h["L"], h["V"], h["Nq"]
    need = {"embed_tokens.weight": (V, H), "norm.weight": (H,)}
    if P > 0:
        vp = h.get("V_ple")
        if vp is None:
            vp = w["embed_tokens_per_layer.weight"].shape[0]
            h["V_ple"] = vp
        need["embed_tokens_per_layer.weight"] = (vp, L * P)
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
        if P > 0:
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
    missing = [k for k in need if k not in w]
    extra = [k for k in w if k not in need]
    bad = [(k, w[k].shape, s) for k, s in need.items() if k in w and tuple(w[k].shape) != tuple(s)]
    msg = []
    if missing:
        msg.append("missing: " + ", ".join(sorted(missing)[:8]) + (" ..." if len(missing) > 8 else ""))
    if extra:
        msg.append("unexpected: " + ", ".join(sorted(extra)[:8]) + (" ..." if len(extra) > 8 else ""))
    if bad:
        msg.append("shape: " + ", ".join("%s %s != %s" % b for b in bad[:8]))
    if msg:
        raise ReferenceError("checkpoint does not match its config: " + "; ".join(msg))


# ---------------------------------------------------------------------------
# Forward pass (MODEL.md §8), float64 throughout
# ---------------------------------------------------------------------------

def rms_norm(x, w, eps):
    """MODEL.md §8.1 / §8.1: x * (mean(x^2) + eps)^(-1/2) * w over the last axis. No (1 + w)."""
    y = x * (np.mean(x * x, axis=-1, keepdims=True) + eps) ** -0.5
    return y if w is None else y * w


def gelu_tanh(x):
    """MODEL.md §6.1."""
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


ROPE_TABLES = ("f32", "f32-hf", "f64")


def rope_inv_freq(params, d, tables="f32"):
    """Inverse frequencies omega_0 .. omega_{d/2-1} for one layer type (MODEL.md §1.4, §4).

    "default": omega_i = theta^(-2i/d) for every i < d/2 (partial_rotary_factor ignored).
    "proportional": omega_i = theta^(-2i/d) / factor for i < A = floor(partial * d / 2), 0 beyond;
    the exponent denominator is the FULL head dim d.

    tables selects the precision of the table (see apply_rope):
      "f64"    exact float64 values;
      "f32"    float32 as MLX's fast.rope builds it (the upstream golden producer): default
               type exp(-i * ln(theta) / (d/2)), proportional 1 / (factor * theta^(2i/d));
      "f32-hf" float32 as HF builds it: 1 / theta^(2i/d) (then / factor) for both types.
    """
    rt = params.get("rope_type", "default")
    theta = float(params["rope_theta"])
    half = d // 2
    if rt == "default":
        A, factor = half, 1.0
    elif rt == "proportional":
        partial = float(params.get("partial_rotary_factor", 1.0))
        factor = float(params.get("factor", 1.0))
        A = int(math.floor(partial * d / 2))
        if not 0 <= A <= half:
            raise ReferenceError("partial_rotary_factor %r out of range" % partial)
    else:
        raise ReferenceError("rope_type %r is not supported" % rt)
    if tables == "f64":
        inv = np.zeros(half, dtype=np.float64)
        inv[:A] = theta ** (-2.0 * np.arange(A, dtype=np.float64) / d) / factor
        return inv
    f32 = np.float32
    inv = np.zeros(half, dtype=f32)
    if tables == "f32" and rt == "default":
        inv[:A] = np.exp(np.arange(0, -A, -1, dtype=f32) * f32(math.log(theta) / half))
    elif tables in ("f32", "f32-hf"):
        wl = f32(theta) ** (np.arange(0, 2 * A, 2, dtype=f32) / f32(d))
        if tables == "f32":
            inv[:A] = f32(1) / (wl * f32(factor))
        else:
            inv[:A] = (f32(1) / wl) / f32(factor)
    else:
        raise ReferenceError("unknown rope table precision %r" % tables)
    return inv


def apply_rope(x, pos, inv):
    """Rotate-half (NeoX) layout: pairs (i, i + d/2). x: [T, heads, d].

    A float32 table (inv.dtype == float32) gives float32 angles p*omega and float32 cos/sin,
    upcast to float64 before the rotation, which itself runs in float64."""
    half = x.shape[-1] // 2
    if inv.dtype == np.float32:
        ang = pos[:, None].astype(np.float32) * inv[None, :]
        c = np.cos(ang).astype(np.float64)
        s = np.sin(ang).astype(np.float64)
    else:
        ang = pos[:, None].astype(np.float64) * inv[None, :]
        c = np.cos(ang)
        s = np.sin(ang)
    c = c[:, None, :]
    s = s[:, None, :]
    x1, x2 = x[..., :half], x[..., half:]
    return np.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], axis=-1)


def attention_mask(T, layer_type, W):
    q = np.arange(T)[:, None]
    k = np.arange(T)[None, :]
    m = k <= q  # causal
    if layer_type == SLIDING:
        m &= k > q - W  # MODEL.md §1.2 notes: q - W < k <= q
    return m


def softmax(z, axis=-1):
    z = z - np.max(z, axis=axis, keepdims=True)
    e = np.exp(z)
    return e / np.sum(e, axis=axis, keepdims=True)


def forward(model, tokens, rope_tables="f32", return_hidden=False):
    """Full-sequence causal forward at positions 0..T-1; returns float64 logits [T, V].

    Everything is float64 except, by default, the RoPE cos/sin tables (rope_tables, see
    rope_inv_freq); rope_tables="f64" makes the whole pass float64."""
    h, w = model["hp"], model["w"]
    eps = h["eps"]
    H, P, L, Nq = h["H"], h["P"], h["L"], h["Nq"]
    tokens = np.asarray(tokens, dtype=np.int64).reshape(-1)
    T = tokens.shape[0]
    if T == 0:
        raise ReferenceError("empty token sequence")
    if tokens.min() < 0 or tokens.max() >= h["V"]:
        raise ReferenceError("token id out of range [0, %d)" % h["V"])
    pos = np.arange(T)

    E = w["embed_tokens.weight"]
    x = E[tokens] * math.sqrt(H)  # MODEL.md §8.2 (exact sqrt(H), f64)

    ple = None
    if P > 0:  # MODEL.md §3
        vp = h["V_ple"]
        if tokens.max() >= vp:
            raise ReferenceError("token id beyond vocab_size_per_layer_input")
        u = (w["embed_tokens_per_layer.weight"][tokens] * math.sqrt(P)).reshape(T, L, P)
        c = (x @ w["per_layer_model_projection.weight"].T) * (H ** -0.5)
        c = rms_norm(c.reshape(T, L, P), w["per_layer_projection_norm.weight"], eps)
        ple = (c + u) * (2.0 ** -0.5)

    inv = {}
    masks = {}
    for t, params in h["rope"].items():
        d = next(ly["d"] for ly in h["layers"] if ly["type"] == t)
        inv[t] = rope_inv_freq(params, d, rope_tables)
        masks[t] = attention_mask(T, t, h["W"])

    kv = {}
    hidden = []
    for i, ly in enumerate(h["layers"]):
        p = "layers.%d." % i
        d, G, t = ly["d"], ly["G"], ly["type"]
        R = Nq // G

        # MODEL.md §8.3 steps 1-4, attention §5
        a = rms_norm(x, w[p + "input_layernorm.weight"], eps)
        Q = (a @ w[p + "self_attn.q_proj.weight"].T).reshape(T, Nq, d)
        Q = apply_rope(rms_norm(Q, w[p + "self_attn.q_norm.weight"], eps), pos, inv[t])
        if not ly["shared"]:
            Kr = (a @ w[p + "self_attn.k_proj.weight"].T).reshape(T, G, d)
            Vr = Kr if ly["keqv"] else (a @ w[p + "self_attn.v_proj.weight"].T).reshape(T, G, d)
            K = apply_rope(rms_norm(Kr, w[p + "self_attn.k_norm.weight"], eps), pos, inv[t])
            Vv = rms_norm(Vr, None, eps)
            kv[i] = (K, Vv)
        else:
            K, Vv = kv[ly["src"]]  # MODEL.md §5 step 3, src(i) of §1.3
            if K.shape[1] != G or K.shape[2] != d:
                raise ReferenceError("layer %d: KV source %d has a different head layout" % (i, ly["src"]))
        kvh = np.arange(Nq) // R  # query head h -> kv head h // R
        Kh = K[:, kvh, :]  # [T, Nq, d]
        Vh = Vv[:, kvh, :]
        s = np.einsum("qhd,khd->hqk", Q, Kh)  # scale 1.0
        s = np.where(masks[t][None, :, :], s, -np.inf)
        pr = softmax(s, axis=-1)
        O = np.einsum("hqk,khd->qhd", pr, Vh).reshape(T, Nq * d)
        attn = O @ w[p + "self_attn.o_proj.weight"].T
        attn = rms_norm(attn, w[p + "post_attention_layernorm.weight"], eps)
        r = x + attn

        # MODEL.md §8.3 step 5, §6.1, §6.2
        z = rms_norm(r, w[p + "pre_feedforward_layernorm.weight"], eps)
        f = (gelu_tanh(z @ w[p + "mlp.gate_proj.weight"].T) * (z @ w[p + "mlp.up_proj.weight"].T)) \
            @ w[p + "mlp.down_proj.weight"].T
        if h["moe"]:
            f1 = rms_norm(f, w[p + "post_feedforward_layernorm_1.weight"], eps)
            n = rms_norm(r, None, eps) * w[p + "router.scale"] * (H ** -0.5)
            logits_r = n @ w[p + "router.proj.weight"].T  # [T, E]
            probs = softmax(logits_r, axis=-1)  # over all experts
            K_ = h["K"]
            top = np.argsort(-probs, axis=-1, kind="stable")[:, :K_]  # ties: lowest index
            tw = np.take_along_axis(probs, top, axis=-1)
            tw = tw / np.sum(tw, axis=-1, keepdims=True)
            tw = tw * w[p + "router.per_expert_scale"][top]
            y = rms_norm(r, w[p + "pre_feedforward_layernorm_2.weight"], eps)
            Wg, Wu, Wd = w[p + "experts.gate"], w[p + "experts.up"], w[p + "experts.down"]
            f2 = np.zeros_like(r)
            for tok in range(T):
                for k in range(K_):
                    e = top[tok, k]
                    hid = gelu_tanh(Wg[e] @ y[tok]) * (Wu[e] @ y[tok])
                    f2[tok] += tw[tok, k] * (Wd[e] @ hid)
            f2 = rms_norm(f2, w[p + "post_feedforward_layernorm_2.weight"], eps)
            f = f1 + f2
        f = rms_norm(f, w[p + "post_feedforward_layernorm.weight"], eps)
        x = r + f

        if P > 0:  # MODEL.md §8.3 step 8
            g = gelu_tanh(x @ w[p + "per_layer_input_gate.weight"].T) * ple[:, i, :]
            g = g @ w[p + "per_layer_projection.weight"].T
            x = x + rms_norm(g, w[p + "post_per_layer_input_norm.weight"], eps)
        x = x * w[p + "layer_scalar"][0]  # MODEL.md §8.3 step 9
        if return_hidden:
            hidden.append(x.copy())

    z = rms_norm(x, w["norm.weight"], eps) @ E.T  # tied, unscaled (MODEL.md §8.4)
    if h["softcap"] is not None:
        c = h["softcap"]
        z = c * np.tanh(z / c)
    if return_hidden:
        return z, hidden
    return z


# ---------------------------------------------------------------------------
# Output (.npz per INPUTS.md §4 - §4.3)
# ---------------------------------------------------------------------------

def _npy_bytes(arr):
    bio = io.BytesIO()
    np.lib.format.write_array(bio, np.ascontiguousarray(arr), allow_pickle=False)
    return bio.getvalue()


def write_golden(path, tokens, logits64, meta):
    members = [
        ("tokens.npy", _npy_bytes(np.asarray(tokens, dtype="<i4"))),
        ("logits.npy", _npy_bytes(logits64.astype("<f4"))),
        ("logits_f64.npy", _npy_bytes(logits64.astype("<f8"))),
        ("meta.json", (json.dumps(meta, indent=2, sort_keys=True) + "\n").encode("utf-8")),
    ]
    tmp = path + ".tmp"
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as zf:
        for name, data in members:
            zi = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            zi.compress_type = zipfile.ZIP_STORED
            zi.external_attr = 0o644 << 16
            zi.create_system = 3
            zf.writestr(zi, data)
    os.replace(tmp, path)


def build_meta(model, tokens, tolerances, rope_tables="f32"):
    files = {}
    fmt = model.get("format", "safetensors")
    if fmt == "gguf":  # the one file; config_sha256 hashes its header + metadata
        names = set(model["files"])
    else:
        names = set(model["files"]) | {"config.json"} | \
            ({"model.safetensors.index.json"} if len(model["files"]) > 1 or
             os.path.exists(os.path.join(model["dir"], "model.safetensors.index.json")) else set())
    for fn in sorted(names):
        fp = os.path.join(model["dir"], fn)
        if os.path.exists(fp):
            files[fn] = os.path.getsize(fp)
    h = model["hp"]
    extra = {} if fmt == "safetensors" else {"format": fmt}
    return dict(extra, **{
        "producer": PRODUCER,
        "numpy": np.__version__,
        "dtype": "float64",
        "rope_tables": rope_tables,
        "spec": "MODEL.md §8 (full-sequence causal prefill, positions 0..T-1)",
        "config_sha256": model["config_sha256"],
        "files": files,
        "num_tokens": int(len(tokens)),
        "vocab_size": int(h["V"]),
        "softcap": h["softcap"],
        "quantized_modules": len(model["quant"]),
        "positions_scored": int(len(tokens)),
        "kl_direction": "KL(golden || model): the golden is the reference",
        "tolerances": tolerances,
        "tolerances_provenance": ("MODEL.md §9: a float32 runner against this float64 forward (max_abs 1e-4, "
                                  "top1 1.0, kld_mean 1e-6)") if tolerances == DEFAULT_TOLERANCES
                                 else "golden/reference.py --tolerance, given when the golden was made",
    })


def _load_tokens(path):
    with open(path) as f:
        data = json.load(f)
    if isinstance(data, dict):
        for k in ("tokens", "input_ids", "ids"):
            if k in data:
                data = data[k]
                break
    if not isinstance(data, list) or not all(isinstance(t, int) for t in data):
        raise ReferenceError("%s: expected a list of token ids or {\"tokens\": [...]}" % path)
    return np.asarray(data, dtype=np.int64)


def _load_compare(spec):
    path, key = spec, None
    if ":" in spec and not os.path.exists(spec):
        path, key = spec.rsplit(":", 1)
    z = np.load(path, allow_pickle=False)
    names = [n[:-4] if n.endswith(".npy") else n for n in z.files]
    if key is None:
        for k in ("logits_f64", "logits_prefill_f64", "logits", "logits_prefill"):
            if k in names:
                key = k
                break
    if key not in names:
        raise ReferenceError("%s has no array %r (has %s)" % (path, key, ", ".join(names)))
    return np.asarray(z[key], dtype=np.float64), key


def compare(ref, other):
    """max |Δ|, top-1 agreement and mean KL(ref || other) over positions."""
    d = np.abs(ref - other)
    top1 = float(np.mean(np.argmax(ref, -1) == np.argmax(other, -1)))
    lp = ref - np.max(ref, -1, keepdims=True)
    lp = lp - np.log(np.sum(np.exp(lp), -1, keepdims=True))
    lq = other - np.max(other, -1, keepdims=True)
    lq = lq - np.log(np.sum(np.exp(lq), -1, keepdims=True))
    kld = np.sum(np.exp(lp) * (lp - lq), -1)
    return {"max_abs": float(d.max()), "mean_abs": float(d.mean()), "top1": top1,
            "kld_mean": float(np.mean(kld))}


def main(argv=None):
    ap = argparse.ArgumentParser(description="Float64 NumPy reference forward of a Gemma 4 text "
                                 "checkpoint; writes golden logits as .npz.")
    ap.add_argument("checkpoint", help="checkpoint directory (config.json + safetensors; HF, MLX or "
                    "compressed-tensors pack-quantized) or a gemma4 .gguf file")
    ap.add_argument("--tokens-file", help="JSON token ids (default: CHECKPOINT/tokens.json, or "
                    "tokens.json next to a .gguf file)")
    ap.add_argument("-o", "--output", help="output .npz")
    ap.add_argument("--tolerance", action="append", default=[], metavar="KEY=VALUE",
                    help="override a tolerance recorded in meta.json "
                         "(max_abs, top1, kld_mean); repeatable")
    ap.add_argument("--rope-tables", choices=ROPE_TABLES, default="f32",
                    help="precision of the RoPE cos/sin tables: f32 (default; float32 tables as "
                         "mlx-lm/MLX fast.rope builds them), f32-hf (HF's float32 recipe) or f64 "
                         "(exact); everything else is always float64")
    ap.add_argument("--compare", metavar="NPZ[:KEY]",
                    help="also compare against logits in another .npz (default key: logits_f64, "
                         "logits_prefill_f64, logits); exit 1 if outside the tolerances")
    args = ap.parse_args(argv)
    if not args.output and not args.compare:
        ap.error("nothing to do: give -o OUT.npz and/or --compare")

    tol = dict(DEFAULT_TOLERANCES)
    for item in args.tolerance:
        k, sep, v = item.partition("=")
        if not sep:
            ap.error("--tolerance expects KEY=VALUE, got %r" % item)
        if k.strip() not in DEFAULT_TOLERANCES:
            ap.error("--tolerance: unknown key %r (known: %s)" % (k, ", ".join(DEFAULT_TOLERANCES)))
        tol[k.strip()] = float(v)

    try:
        model = load_checkpoint(args.checkpoint)
        tf = args.tokens_file or os.path.join(
            os.path.dirname(args.checkpoint) if os.path.isfile(args.checkpoint) else args.checkpoint,
            "tokens.json")
        tokens = _load_tokens(tf)
        logits = forward(model, tokens, rope_tables=args.rope_tables)
        if args.output:
            write_golden(args.output, tokens, logits, build_meta(model, tokens, tol, args.rope_tables))
            sys.stderr.write("reference: %s: %d tokens x %d logits, %d quantized modules, "
                             "ignored %d tower and %d shared-layer K/V tensors\n"
                             % (args.output, logits.shape[0], logits.shape[1], len(model["quant"]),
                                model["ignored"]["tower"], model["ignored"]["shared_kv"]))
        if args.compare:
            other, key = _load_compare(args.compare)
            if other.shape != logits.shape:
                raise ReferenceError("compare: shape %s != %s" % (other.shape, logits.shape))
            m = compare(logits, other)
            m["key"] = key
            print(json.dumps(m, sort_keys=True))
            if m["max_abs"] > tol["max_abs"] or m["top1"] < tol["top1"] or m["kld_mean"] > tol["kld_mean"]:
                sys.stderr.write("reference: compare: outside tolerances %s\n" % json.dumps(tol))
                return 1
    except (ReferenceError, OSError, ValueError, KeyError) as e:
        sys.stderr.write("reference: error: %s\n" % e)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
