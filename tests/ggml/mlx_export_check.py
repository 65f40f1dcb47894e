"""mlx_export_check.py GOLDEN_DIR MODEL.gguf MLX_DIR NAMES_FILE - the tensors named in
NAMES_FILE (one per line: the MLX export's transcoded ones) hold the same values in the
GGUF and in its MLX export, each dequantized by golden/reference.py's own code (ggml's
blocks; MLX affine), compared in float64 as numbers. Prints the count; exits 1 on any
difference or a name in neither."""
import sys

import numpy as np

sys.path.insert(0, sys.argv[1])
import reference  # noqa: E402

a = reference.load_checkpoint(sys.argv[2])["w"]
b = reference.load_checkpoint(sys.argv[3])["w"]
names = [n.strip() for n in open(sys.argv[4]) if n.strip()]
bad = 0
for n in names:
    key = n[:-len(".weight")] if n not in a and n.endswith(".weight") else n
    if key not in a or key not in b:
        print("%s: not in both models" % n)
        bad += 1
        continue
    x, y = np.asarray(a[key], dtype=np.float64), np.asarray(b[key], dtype=np.float64)
    if x.shape != y.shape or not np.array_equal(x, y):
        print("%s: values differ (max |d| %g)" % (n, float(np.max(np.abs(x - y))) if x.shape == y.shape else -1))
        bad += 1
print("%d of %d transcoded tensors: the GGUF's values" % (len(names) - bad, len(names)))
sys.exit(1 if bad or not names else 0)
