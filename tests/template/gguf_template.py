#!/usr/bin/env python3
"""Writes the `tokenizer.chat_template` string of a GGUF file's metadata, byte for byte.
usage: gguf_template.py FILE.gguf OUT.jinja (setup.sh: build-ref/templates/)"""
import struct
import sys

SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


def main():
    data = open(sys.argv[1], "rb").read()
    if data[:4] != b"GGUF":
        sys.exit("%s: not a GGUF file" % sys.argv[1])
    version, _, nkv = struct.unpack_from("<IQQ", data, 4)
    if version < 2:
        sys.exit("%s: GGUF version %d" % (sys.argv[1], version))
    pos = 24

    def string():
        nonlocal pos
        (n,) = struct.unpack_from("<Q", data, pos)
        s = data[pos + 8:pos + 8 + n]
        pos += 8 + n
        return s

    def skip(t):
        nonlocal pos
        if t == 8:
            string()
        elif t == 9:
            et, n = struct.unpack_from("<IQ", data, pos)
            pos += 12
            if et in SIZES:
                pos += SIZES[et] * n
            else:
                for _ in range(n):
                    skip(et)
        else:
            pos += SIZES[t]

    for _ in range(nkv):
        key = string()
        (t,) = struct.unpack_from("<I", data, pos)
        pos += 4
        if key == b"tokenizer.chat_template" and t == 8:
            with open(sys.argv[2], "wb") as f:
                f.write(string())
            return
        skip(t)
    sys.exit("%s: no tokenizer.chat_template" % sys.argv[1])


if __name__ == "__main__":
    main()
