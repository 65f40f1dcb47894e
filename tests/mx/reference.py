#!/usr/bin/python3
"""An independent transcription (not MLX code) of MLX's mxfp4 / nvfp4 / mxfp8
quantizers, written from reading ml-explore/mlx @ 846d176227a0ac13d2667e58d2bb68b322109ab0
(mlx/ops.cpp fp_quantize's CPU fallback, mlx/backend/cpu/unary_ops.h ToFP8 / FromFP8,
mlx/types/bf16.h), for the test vectors of tests/mx/vectors.h (INPUTS.md §2.7).
T = the input dtype ('bf16' or 'f32'). Float->int conversions MLX leaves undefined
(NaN, Inf, an exponent byte outside 0..255) are flagged: gempack refuses those groups.
Needs numpy only for float32 rounding.
"""
import math, struct, sys
import numpy as np

np.seterr(all="ignore")
INT_MIN = -(2 ** 31)

def f32(x):                      # round a Python double to float32 (RNE, overflow->inf)
    return float(np.float32(x))

def f32_bits(x):
    return struct.unpack("<I", struct.pack("<f", np.float32(x)))[0]

def bits_f32(u):
    return float(np.frombuffer(struct.pack("<I", u & 0xFFFFFFFF), dtype=np.float32)[0])

def bf16_bits(x):                # mlx/types/bf16.h _MLX_BFloat16(float)
    x = f32(x)
    if math.isnan(x):
        return 0x7FC0
    u = f32_bits(x)
    u = (u + ((u >> 16) & 1) + 0x7FFF) & 0xFFFFFFFF
    return u >> 16

def bf16(x):
    return bits_f32(bf16_bits(x) << 16)

def rnd(T, x):                   # result of an op computed in float32 then stored as T
    x = f32(x)
    return bf16(x) if T == "bf16" else x

def to_int32(x):                 # static_cast<int32_t>(float); UB cases -> x86 semantics
    if math.isnan(x) or math.isinf(x) or not (-2**31 <= x < 2**31):
        return INT_MIN, True
    return int(x), False         # trunc toward zero (x is integral here anyway)

def to_uint8(x):                 # static_cast<uint8_t>(float): x86 = cvttss2si then low byte
    i, ub = to_int32(math.trunc(x) if math.isfinite(x) else x)
    return i & 0xFF, ub or not (0 <= x < 256)

# ---------------- FP8 E4M3 (mlx/backend/cpu/unary_ops.h ToFP8 / FromFP8) -------------
def to_fp8(x):
    fb = f32_bits(x)
    sign = fb & 0x80000000
    fb ^= sign
    if fb >= (543 << 21):                         # |x| >= 480.0, Inf, NaN
        r = 0x7E
    elif fb < (121 << 23):                        # |x| < 2^-6 : subnormal path
        denorm = 141 << 23                        # 2^14
        low = f32_bits(f32(bits_f32(fb) + bits_f32(denorm)))
        r = (low - denorm) & 0xFF
    else:
        mant_odd = (fb >> 20) & 1
        hb = (fb + (((7 - 127) << 23) & 0xFFFFFFFF) + 0x7FFFF + mant_odd) & 0xFFFFFFFF
        r = (hb >> 20) & 0xFF
    return r | (sign >> 24)

def from_fp8(b):                 # exact; 0x7F -> 480, 0xFF -> -480 (no NaN)
    e, m = (b >> 3) & 0xF, b & 7
    v = (m / 8.0) * 2.0 ** -6 if e == 0 else (1 + m / 8.0) * 2.0 ** (e - 7)
    return -v if b & 0x80 else v

FP4_LUT = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
           -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]

def fp4_argmin(T, x):            # ops.cpp: argmin(abs(x[...,None] - lut)), arg_reduce.cpp
    best_i, best_d = 0, None
    for i, l in enumerate(FP4_LUT):
        d = abs(rnd(T, x - l))
        if i == 0:
            best_d = d
        elif d < best_d:         # strict '<', NaN never wins, first index kept
            best_i, best_d = i, d
    return best_i

def fp4_e2m1_thresh(x):          # metal fp4.h fp4_e2m1(float) (== cpu to_fp4_e2m1)
    if math.isnan(x):
        return 0x7
    s = 0x8 if math.copysign(1.0, x) < 0 else 0
    a = abs(x)
    if a > 5.0: b = 7
    elif a >= 3.5: b = 6
    elif a > 2.5: b = 5
    elif a >= 1.75: b = 4
    elif a > 1.25: b = 3
    elif a >= 0.75: b = 2
    elif a > 0.25: b = 1
    else: b = 0
    return b | s

def amax_nanprop(vals):
    m = -math.inf
    for v in vals:
        a = abs(v)
        if math.isnan(a) or math.isnan(m):
            m = math.nan
        elif a > m:
            m = a
    return m

# ---------------- CPU (ops.cpp fallback) ----------------------------------------------
def cpu_mx(vals, bits, T="bf16", round_up=False):
    """returns (scale_byte, codes, flags). vals must be representable in T.
    round_up=True: PR #4353 variant (commit e73e87da8, merged after 846d176)."""
    flags = []
    maxval = 6.0 if bits == 4 else 448.0
    s = rnd(T, amax_nanprop(vals) / maxval)           # divide(max(abs(w)), maxval) in T
    if s == 0:
        e = 0.0                                       # where(scales == 0, 0, ...)
    else:
        l = rnd(T, math.log2(s) if s > 0 and math.isfinite(s) else
                (math.inf if s == math.inf else math.nan))
        r = l if not math.isfinite(l) else float(round(l))   # std::rint, ties-to-even
        e_i, ub = to_int32(r)
        if ub: flags.append("UB:float->int32")
        if round_up:                                  # decoded = 2^e in float32; bump if < s
            dec = f32(2.0 ** e_i) if e_i > -1100 else 0.0
            if dec < s:
                e_i += 1
        e = rnd(T, float(e_i))                        # where() promotes int32 -> T
    p = rnd(T, 2.0 ** e if e > -1100 else 0.0)        # power(T(2), e)
    byte, ub = to_uint8(rnd(T, e + 127))              # astype(add(e,127), uint8)
    if ub: flags.append("UB:float->uint8")
    codes = []
    for v in vals:
        q = rnd(T, v / p) if p != 0 else (math.nan if v == 0 or math.isnan(v) else math.copysign(math.inf, v))
        codes.append(fp4_argmin(T, q) if bits == 4 else to_fp8(q))
    return byte, codes, flags

def cpu_nvfp4(vals, T="bf16", global_scale=None):
    s = rnd(T, amax_nanprop(vals) / 6.0)              # in T
    enc = 1.0 if global_scale is None else f32(2688.0 / global_scale)
    s32 = f32(s * enc)                                # T * float32 -> float32
    byte = to_fp8(s32)
    sd = rnd(T, from_fp8(byte))                       # from_fp8(scales, T), exact
    codes = []
    for v in vals:
        if sd != 0:
            q = rnd(T, v / sd)
        else:
            q = math.nan if (v == 0 or math.isnan(v)) else math.copysign(math.inf, v * (1 if math.copysign(1, sd) > 0 else -1))
        q = f32(q * enc)                              # * scale_encode (float32)
        codes.append(fp4_argmin("f32", q))            # subtraction in float32
    return byte, codes, []

def pack(codes, bits):           # element k of a uint32 word sits at bits [k*bits, (k+1)*bits)
    per = 32 // bits
    words = []
    for j in range(0, len(codes), per):
        w = 0
        for k, c in enumerate(codes[j:j + per]):
            w |= (c & ((1 << bits) - 1)) << (k * bits)
        words.append(w)
    return words

