#!/usr/bin/python3
"""Writes tests/mx/vectors.h: MLX microscaling quantization test vectors from
the independent transcription tests/mx/reference.py (INPUTS.md §2.7).

Each vector is one group: the input as exact float32 bits (bf16 values for
T = bf16), the expected scale byte and codes, or `refused` where MLX's CPU
path is undefined (NaN/Inf, exponent outside the byte). Hand-picked cases
(ties, subnormals, zero groups, the largest magnitudes, NaN/Inf) come first,
then seeded random groups of varied magnitude.

Run: /usr/bin/python3 tests/mx/make_vectors.py > tests/mx/vectors.h
"""
import importlib.util
import math
import os
import random
import struct

here = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("reference", os.path.join(here, "reference.py"))
r = importlib.util.module_from_spec(spec)
spec.loader.exec_module(r)

inf, nan = math.inf, math.nan

HAND = {
    "mxfp4": [
        ("zero group", [0.0]),
        ("exact E2M1 values", [6, .5, 1, 1.5, 2, 3, 4, -6]),
        ("ties toward zero", [6, .25, .75, 1.25, 1.75, 2.5, 3.5, 5]),
        ("negative ties", [-6, -.25, -.75, -1.25, -1.75, -2.5, -3.5, -5]),
        ("small negatives give +0", [6, -0.0, -0.1, -0.25, 0.1, -0.2]),
        ("near thresholds", [5.0, 5.03125, 4.96875, 3.4375, 3.5625, 1.234375, 0.2597656]),
        ("e = 0, saturation at 6", [8.25, 7, 5.5, -8.25]),
        ("log2 rounded to bf16: 0.5 -> e = 0", [8.5, 3, 1, 0.5, -8.5]),
        ("e = 1", [8.75, 3, 1, 0.5, 0.25]),
        ("amax/6 = 2", [12, 6, 1, -12, 0.75]),
        ("e = -3", [1.0, 0.5, 0.0625, -0.75, 0.1875]),
        ("typical weights", [0.0123, -0.0456, 0.0078, 0.0311, -0.0012, 0.0222, -0.0199, 0.0049]),
        ("log2 -11.5 -> -12", [0.0020751953125, 0.001, -0.0005]),
        ("log2 -14.5 -> -14", [0.000255584716796875, 0.0001, -0.00002]),
        ("bf16 max", [3.3895313892515355e38, 1e38, -3e37]),
        ("tiny, log2 spacing 0.5", [2.0 ** -120, 2.0 ** -122]),
        ("exponent -129: refused", [2.0 ** -126, 2.0 ** -128]),
        ("amax/6 underflows bf16", [2.0 ** -133]),
        ("inf: refused", [inf, 1, -2]),
        ("NaN: refused", [nan, 1, -2]),
        ("ties at scale 2^-3", [0.75, 0.09375, 0.03125, 0.21875, -0.046875]),
    ],
    "mxfp8": [
        ("zero group", [0.0]),
        ("subnormals and ties", [448, 1, -1, 2.0 ** -6, 2.0 ** -9, 2.0 ** -10, 3 * 2.0 ** -10, 1.0625, 1.1875, -0.0]),
        ("RNE ties", [448, 17, 19, -17, -19, 240, 232, 0.015625 * 1.0625]),
        ("clamp to 448, never 0x7F", [470, 466, -452]),
        ("saturation", [600, 500, 1]),
        ("e = 1", [640, 600, 1, -0.001]),
        ("typical weights", [0.0123, -0.0456, 0.0078, 0.0311, -0.0012, 0.0222, -0.0199, 0.0049]),
        ("log2 rounded to bf16", [0.0024261474609375, 0.001, -1e-5]),
        ("the other direction", [0.00115966796875, 0.0005]),
        ("E4M3 subnormals and underflow", [1.0, 2.0 ** -12, 2.0 ** -15, 2.0 ** -16, 3 * 2.0 ** -17]),
        ("bf16 max", [3.3895313892515355e38, 1e30]),
        ("exponent below -127: refused", [2.0 ** -126]),
        ("inf: refused", [inf, 1]),
        ("NaN: refused", [nan, 1]),
        ("signed zeros", [-448, -0.0, 0.0, -1e-30]),
        ("subnormal RNE", [2.0 ** -6 * 1.0625 * 0.999, 2.0 ** -7 * 3, 2.0 ** -9 * 1.5, 2.0 ** -9 * 2.5, 448]),
        ("saturation below 1", [1.0, 0.99609375, 1.0078125]),
    ],
    "nvfp4": [
        ("zero group: scale 0", [0.0]),
        ("scale 1.0", [6, .5, 1, 1.5, 2, 3, 4, -6]),
        ("ties", [6, .25, .75, 1.25, 1.75, 2.5, 3.5, 5]),
        ("negatives", [6, -0.0, -0.1, -0.25, -0.75]),
        ("amax/6 -> E4M3 0.171875", [1.0, 0.5, 0.25, -0.125, 0.0859375]),
        ("E4M3 tie 1.0625 -> 1.0", [6.375, 3.1875, -1.0]),
        ("amax/6 -> 1.125", [6.5, 0.8, -2.9]),
        ("scale 448", [2688, 1000, -448]),
        ("scale saturates", [3000, 100]),
        ("smallest subnormal scale", [6 * 2.0 ** -9, 2.0 ** -9, 2.0 ** -10]),
        ("scale rounds to 0", [6 * 2.0 ** -10, 2.0 ** -10, -2.0 ** -11]),
        ("scale tie 1.5·2^-9", [6 * 2.0 ** -8 * 0.75, 2.0 ** -10]),
        ("typical weights", [0.0123, -0.0456, 0.0078, 0.0311, -0.0012, 0.0222, -0.0199, 0.0049]),
        ("inf", [inf, 1]),
        ("NaN", [nan, 1]),
        ("bf16 max: huge q", [3.3895313892515355e38]),
        ("exact ties at a non-power-of-two scale", [0.171875 * 6, 0.171875 * 0.75, 0.171875 * 1.75, 0.171875 * 3.5]),
        ("amax/6 -> 0.15625", [0.9, 0.3, 0.02]),
        ("bf16 smallest subnormal", [2.0 ** -133]),
        ("near the 448 boundary", [448 * 6 * 1.0625 * 0.99]),
    ],
}

GS = {"mxfp4": 32, "mxfp8": 32, "nvfp4": 16}


def bits32(x):
    return struct.unpack("<I", struct.pack("<f", x))[0] if not math.isnan(x) else 0x7FC00000


def expected(mode, T, vals):
    if mode == "nvfp4":
        return r.cpu_nvfp4(vals, T)
    return r.cpu_mx(vals, 8 if mode == "mxfp8" else 4, T)


def entry(mode, T, what, vals):
    gs = GS[mode]
    vals = [r.bf16(v) if T == "bf16" and not math.isnan(v) else (v if math.isnan(v) else r.f32(v)) for v in vals]
    vals = vals + [0.0] * (gs - len(vals))
    byte, codes, flags = expected(mode, T, vals)
    x = ", ".join("0x%08X" % bits32(v) for v in vals)
    c = ", ".join("0x%02X" % k for k in codes)
    return '    {QM_%s, DT_%s, "%s", %s, {%s}, 0x%02X, {%s}},' % (
        mode.upper(), "BF16" if T == "bf16" else "F32", what, "true" if flags else "false", x, byte, c)


def random_groups(mode, T, n, rng):
    gs = GS[mode]
    out = []
    for i in range(n):
        e = rng.choice([-140, -128, -100, -40, -20, -12, -8, -4, -1, 0, 1, 4, 9, 20, 60, 120, 127])
        spread = rng.choice([0, 1, 3, 8, 20])
        vals = []
        for _ in range(gs):
            kind = rng.random()
            if kind < 0.05:
                v = 0.0
            elif kind < 0.08:
                v = -0.0
            else:
                v = rng.uniform(-2, 2) * 2.0 ** (e - rng.randint(0, spread))
            vals.append(v)
        out.append(("random %d (2^%d)" % (i, e), vals))
    return out


def main():
    rng = random.Random(20261125)
    print("/* vectors.h - written by tests/mx/make_vectors.py from tests/mx/reference.py; do not edit. */")
    print("struct mx_vector {\n    enum qmode mode;\n    enum dtype t;\n    const char *what;\n    bool refused;\n"
          "    uint32_t x[32];\n    uint8_t scale;\n    uint8_t codes[32];\n};\n")
    print("static const struct mx_vector mx_vectors[] = {")
    for mode in ("mxfp4", "mxfp8", "nvfp4"):
        for what, vals in HAND[mode]:
            print(entry(mode, "bf16", what, vals))
        for what, vals in random_groups(mode, "bf16", 120, rng):
            print(entry(mode, "bf16", what, vals))
        for what, vals in random_groups(mode, "f32", 40, rng):
            print(entry(mode, "f32", what + ", f32", vals))
    print("};")


if __name__ == "__main__":
    main()
