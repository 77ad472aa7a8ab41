#!/usr/bin/python3
"""Generate deterministic test tensors for the ckpt CLI tests.

    gen_npy.py OUTDIR [--seed N] [--set full|small] [--big-scale F]

Writes into OUTDIR:
  - one .npy file per NumPy-representable tensor (every supported NumPy dtype,
    a 0-d scalar, empty tensors, Fortran-order arrays, 1-D..4-D odd shapes,
    some compressible and some random content, special float values);
  - raw .bin files with random bit patterns for the dtypes NumPy lacks
    (bf16 through a uint16 view, f8e4m3 and f8e5m2 through uint8 views);
  - a byte object (a text file);
  - manifest.json: {fqn: {file, kind, dtype, shape, nbytes, itemsize,
    order, packarg}} where kind is npy | raw | bytes, dtype is the ckpt
    dtype name, and packarg is the `NAME=...` argument for `ckpt pack`;
  - manifest.lst: the same, one tensor per line, '|'-separated (not tabs:
    `read` would merge empty fields), for shell loops:
    fqn|kind|dtype|shape (comma-separated, empty for 0-d)|nbytes|file|packarg

Everything depends only on the seed, so two runs produce identical bytes.
This runs under /usr/bin/python3 (the interpreter with NumPy).
"""
import argparse
import json
import os
import sys

import numpy as np

# ckpt dtype name -> NumPy dtype used to hold the bits (little-endian).
CKPT_TO_NP = {
    "f64": "<f8", "f32": "<f4", "f16": "<f2",
    "i64": "<i8", "i32": "<i4", "i16": "<i2", "i8": "|i1",
    "u64": "<u8", "u32": "<u4", "u16": "<u2", "u8": "|u1",
    "bool": "|b1", "c64": "<c8", "c128": "<c16",
    # dtypes NumPy does not have: raw bit containers
    "bf16": "<u2", "f8e4m3": "|u1", "f8e5m2": "|u1",
    "bytes": "|u1",
}
ITEMSIZE = {k: np.dtype(v).itemsize for k, v in CKPT_TO_NP.items()}


def values(rng, dtype, shape, mode):
    """An array of `dtype` (ckpt name, native NumPy only) and `shape`.

    mode: 'random'  - full-range random (mostly incompressible)
          'small'   - small-range values (compressible by zstd)
          'special' - random with special float values sprinkled in
    """
    npdt = np.dtype(CKPT_TO_NP[dtype])
    n = int(np.prod(shape, dtype=np.int64)) if len(shape) else 1
    if dtype == "bool":
        a = rng.random(n) < (0.5 if mode == "random" else 0.1)
    elif npdt.kind == "c":
        parts = np.dtype("<f%d" % (npdt.itemsize // 2))
        re = values(rng, "f%d" % (npdt.itemsize * 4), (n,), mode)
        im = values(rng, "f%d" % (npdt.itemsize * 4), (n,), mode)
        a = np.empty(n, npdt)
        a.real, a.imag = re.astype(parts), im.astype(parts)
    elif npdt.kind == "f":
        if mode == "small":
            a = (np.round(rng.standard_normal(n) * 8) / 8).astype(npdt)
        else:
            a = (rng.standard_normal(n) * 1000).astype(npdt)
        if mode == "special" and n >= 8:
            sp = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0,
                           np.finfo(npdt).tiny, np.finfo(npdt).max,
                           np.finfo(npdt).min], dtype=npdt)
            pos = rng.choice(n, size=len(sp), replace=False)
            a[pos] = sp
    else:
        info = np.iinfo(npdt)
        if mode == "small":
            lo, hi = max(info.min, -3), min(info.max, 12)
        else:
            lo, hi = info.min, info.max
        a = rng.integers(lo, hi, size=n, dtype=npdt, endpoint=True)
    return np.asarray(a, dtype=npdt).reshape(shape)


def random_bits(rng, dtype, shape):
    npdt = np.dtype(CKPT_TO_NP[dtype])
    n = int(np.prod(shape, dtype=np.int64)) if len(shape) else 1
    raw = rng.integers(0, 256, size=n * npdt.itemsize, dtype=np.uint8)
    return raw.view(npdt).reshape(shape)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("outdir")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--set", choices=["full", "small"], default="full")
    ap.add_argument("--big-scale", type=float, default=1.0,
                    help="scale factor for the two large tensors")
    args = ap.parse_args()

    rng = np.random.default_rng(args.seed)
    out = args.outdir
    os.makedirs(out, exist_ok=True)
    manifest = {}

    def add_npy(fqn, dtype, shape, mode="random", order="C"):
        a = values(rng, dtype, tuple(shape), mode)
        if order == "F":
            a = np.asfortranarray(a)
            assert a.ndim < 2 or not a.flags.c_contiguous
        fn = os.path.join(out, fqn + ".npy")
        np.save(fn, a, allow_pickle=False)
        manifest[fqn] = dict(file=fn, kind="npy", dtype=dtype,
                             shape=list(shape), nbytes=int(a.nbytes),
                             itemsize=ITEMSIZE[dtype], order=order,
                             packarg="%s=%s" % (fqn, fn))

    def add_raw(fqn, dtype, shape):
        a = random_bits(rng, dtype, tuple(shape))
        fn = os.path.join(out, fqn + "." + dtype + ".bin")
        with open(fn, "wb") as f:
            f.write(np.ascontiguousarray(a).tobytes())
        spec = ",".join(str(int(d)) for d in shape)
        manifest[fqn] = dict(file=fn, kind="raw", dtype=dtype,
                             shape=list(shape), nbytes=int(a.nbytes),
                             itemsize=ITEMSIZE[dtype], order="C",
                             packarg="%s=%s:%s:%s" % (fqn, fn, dtype, spec))

    def add_bytes(fqn, data):
        fn = os.path.join(out, fqn + ".txt")
        with open(fn, "wb") as f:
            f.write(data)
        manifest[fqn] = dict(file=fn, kind="bytes", dtype="bytes",
                             shape=[len(data)], nbytes=len(data), itemsize=1,
                             order="C", packarg="%s=%s" % (fqn, fn))

    s = args.big_scale
    if args.set == "full":
        # Two larger tensors: several 1 MiB frames, compressible (zstd).
        add_npy("model.embed.weight", "f32", (max(3, int(513 * s)), 1025),
                "small")
        add_npy("model.pos.ids", "i32", (max(5, int(300007 * s)),), "small")
    # Exactly 128 KiB: frames of 4K/64K/1M fit a whole number of times.
    add_npy("model.exact", "f32", (128, 256), "small")
    # Every NumPy dtype, odd shapes of 1..4 dims.
    add_npy("model.layers.0.attn.w", "f64", (31, 17), "special")
    add_npy("model.layers.0.attn.b", "f64", (37,), "random")
    add_npy("model.layers.0.mlp.w", "f32", (3, 5, 7), "special")
    add_npy("model.layers.0.mlp.row", "f32", (1, 4099), "random")
    add_npy("model.layers.1.norm", "f16", (33, 65), "special")
    add_npy("opt.state.step_count", "i64", (19, 7), "random")
    add_npy("opt.state.i32_4d", "i32", (5, 6, 7, 9), "small")
    add_npy("opt.state.i16", "i16", (1001,), "random")
    add_npy("opt.state.i8", "i8", (17, 31), "random")
    add_npy("data.image", "u8", (64, 64, 3), "random")
    add_npy("data.u16", "u16", (129, 3), "small")
    add_npy("data.u32", "u32", (7, 11, 13), "random")
    add_npy("data.u64", "u64", (2, 3, 5, 7), "random")
    add_npy("data.mask", "bool", (45, 13), "random")
    add_npy("model.rope.freqs_cis", "c64", (64, 33), "special")
    add_npy("model.rope.c128", "c128", (9, 5), "random", order="F")
    # 0-d scalar, empty tensors, Fortran order.
    add_npy("scalar.lr", "f32", (), "random")
    add_npy("scalar.epoch", "i64", (), "random")
    add_npy("empty.f32", "f32", (0, 5), "random")
    add_npy("empty.i16", "i16", (4, 0, 3), "random")
    add_npy("fortran.f64", "f64", (31, 17), "random", order="F")
    add_npy("fortran.i32", "i32", (5, 7, 9), "small", order="F")
    # dtypes NumPy lacks: raw random bit patterns (NaN, inf, subnormals).
    add_raw("lowp.bf16", "bf16", (37, 129))
    add_raw("lowp.f8e4m3", "f8e4m3", (23, 45))
    add_raw("lowp.f8e5m2", "f8e5m2", (1000,))
    # A byte object.
    words = [b"alpha", b"beta", b"gamma", b"delta", b"\n", b"\t", b"\x00",
             b"\xff\xfe", b"ckpt"]
    idx = rng.integers(0, len(words), size=6000)
    add_bytes("meta.notes", b" ".join(words[i] for i in idx))

    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
    with open(os.path.join(out, "manifest.lst"), "w") as f:
        for fqn in sorted(manifest):
            m = manifest[fqn]
            f.write("|".join([fqn, m["kind"], m["dtype"],
                               ",".join(str(d) for d in m["shape"]),
                               str(m["nbytes"]), m["file"], m["packarg"]])
                    + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
