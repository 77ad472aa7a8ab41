#!/usr/bin/python3
"""gen_st_header.py - writes a safetensors file whose header is large, for
the memory bound of opening one (tests/cli/st_header_memory.sh).

    gen_st_header.py OUT KIND N

KIND many: N small tensors (shapes [k], [2, k] and [], dtypes F32, I64,
U8, BF16) with names like a model's; KIND meta: a header of about N
bytes that is mostly an __metadata__ of 100-byte entries, beside 3
tensors with 4000-byte names.
The data is deterministic (seeded) so that a reader's bytes can be
compared with NumPy's view of the same file (check_st_bytes below).
Prints the header's length in bytes.
"""
import json
import struct
import sys

import numpy as np

DTYPES = [("F32", np.float32), ("I64", np.int64), ("U8", np.uint8),
          ("BF16", np.uint16)]


def many(n):
    hdr, off = {}, 0
    for i in range(n):
        dt, npt = DTYPES[i % len(DTYPES)]
        shape = [] if i % 7 == 0 else [i % 5 + 1] if i % 3 else [2, i % 4 + 1]
        nb = int(np.prod(shape, dtype=np.int64)) * np.dtype(npt).itemsize
        name = "model.layers.%d.experts.%d.w%d" % (i // 1000, i % 1000, i % 3)
        hdr[name] = {"dtype": dt, "shape": shape,
                     "data_offsets": [off, off + nb]}
        off += nb
    return hdr, off


def meta(n):
    hdr, off = {}, 0
    hdr["__metadata__"] = {"key%07d" % k: "v%07d" % k + "." * 80
                           for k in range(n // 100)}
    for i in range(3):
        name = ("t%d." % i) + "x" * 3997
        hdr[name] = {"dtype": "F32", "shape": [4],
                     "data_offsets": [off, off + 16]}
        off += 16
    return hdr, off


def main():
    out, kind, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    hdr, nbytes = many(n) if kind == "many" else meta(n)
    text = json.dumps(hdr, separators=(",", ":")).encode()
    data = np.random.default_rng(n).integers(0, 256, nbytes, dtype=np.uint8)
    with open(out, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        f.write(data.tobytes())
    print(len(text))


if __name__ == "__main__":
    main()
