#!/usr/bin/env python3
"""edit_pack.py IN.gpk OUT.gpk PYTHON-STATEMENT: rewrites a pack's manifest
(docs/FORMAT.md) with the statement applied to it as `m`, and its header
fields and CRCs to match, so the result is a pack whose every checksum holds
but whose manifest says what the test wants (hostile-input tests)."""
import json
import struct
import sys
import zlib

src, dst, stmt = sys.argv[1:4]
b = bytearray(open(src, "rb").read())
moff, msize = struct.unpack_from("<QQ", b, 40)
m = json.loads(b[moff:moff + msize])
exec(stmt, {}, {"m": m})
text = json.dumps(m).encode()
out = b[:moff] + text
struct.pack_into("<Q", out, 16, len(out))
struct.pack_into("<Q", out, 48, len(text))
struct.pack_into("<I", out, 56, zlib.crc32(text))
struct.pack_into("<I", out, 60, zlib.crc32(bytes(out[:60])))
open(dst, "wb").write(out)
