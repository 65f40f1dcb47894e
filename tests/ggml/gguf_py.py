#!/usr/bin/python3
"""The second reading of tests/test_ggml.c: gguf-py's gguf/quants.py (NumPy;
build-ref/ggml/gguf-py, from the same llama.cpp bundle) dequantizes the
blocks quant/ggml dequantized, and the floats are compared.

    gguf_py.py GGUF_PY_DIR TYPE IN OURS

IN: the blocks; OURS: quant/ggml's floats (float32, little-endian). Prints
`TYPE: N floats, E bit-identical, max |d| M (relative R)` over the floats
both give as finite numbers, and where only one is NaN or infinite; exits 1
when any float differs in bits (NaN: NaN on both sides)."""
import sys

import numpy as np

sys.path.insert(0, sys.argv[1])
from gguf.constants import GGMLQuantizationType  # noqa: E402
from gguf.quants import dequantize  # noqa: E402

name, src, ours = sys.argv[2], sys.argv[3], sys.argv[4]
qtype = GGMLQuantizationType[name]
blocks = np.fromfile(src, dtype=np.uint8)
with np.errstate(all="ignore"):
    theirs = dequantize(blocks, qtype).astype(np.float32).reshape(-1)
mine = np.fromfile(ours, dtype="<f4")
if theirs.shape != mine.shape:
    sys.exit(f"{name}: gguf-py gives {theirs.size} floats, quant/ggml {mine.size}")
nan = np.isnan(theirs) & np.isnan(mine)
same = (theirs.view(np.uint32) == mine.view(np.uint32)) | nan
fin = np.isfinite(theirs) & np.isfinite(mine)
d = np.abs(theirs[fin].astype(np.float64) - mine[fin].astype(np.float64))
scale = np.maximum(np.abs(mine[fin].astype(np.float64)), np.finfo(np.float32).tiny)
only = int(np.sum(np.isfinite(theirs) != np.isfinite(mine)))
print(f"{name}: {mine.size} floats, {int(same.sum())} bit-identical, max |d| {d.max(initial=0):.3g} "
      f"(relative {np.max(d / scale, initial=0):.3g}), {only} non-finite on one side only")
sys.exit(0 if same.all() else 1)
