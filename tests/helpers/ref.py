#!/usr/bin/python3
"""NumPy reference for the ckpt CLI tests (run with /usr/bin/python3).

A tensor argument TENSOR is one of
    FILE.npy                    a NumPy file (C or Fortran order)
    FILE:DTYPE:D0,D1,...        a raw little-endian file, as `ckpt pack` takes
                                it (empty shape = 0-d scalar); DTYPE may be
                                bf16, f8e4m3, f8e5m2 or any ckpt dtype name
    FILE                        any other file: a byte object (1-D uint8)

Subcommands:
    slice TENSOR SPEC           raw bytes of the NumPy basic slice SPEC
                                ('a:b,:,c'; a bare index c keeps its dim as
                                c:c+1; negative indices count from the end;
                                no steps) to stdout
    bytes TENSOR                the tensor's raw C-order bytes to stdout
    cmpnpy EXPECTED ACTUAL      compare: dtype, shape, bytes.  When EXPECTED
                                is a raw bf16/f8e4m3/f8e5m2 tensor, ACTUAL
                                must be a float32 .npy whose values equal the
                                independently decoded bits (NaN == NaN, -0 is
                                not +0).  Exit 0 when equal, 1 otherwise
                                (reason on stdout).
    cmpmany                     reads 'EXPECTED|ACTUAL' lines on stdin; prints
                                'ok EXPECTED' or 'FAIL EXPECTED: why' each
    randslices TENSOR N SEED    N random valid slice specs, one per line
    refbytes MANIFEST OUTDIR    OUTDIR/<fqn>.ref: C-order bytes of every
                                tensor of a gen_npy.py manifest.json
    slicebatch MANIFEST N SEED OUTDIR
                                for every tensor of ndim >= 2 N random slices
                                (N//4, at least 2, for 1-D ones): writes
                                OUTDIR/<fqn>.<k>.ref and lists
                                'fqn|k|spec|reffile' lines in OUTDIR/slices.lst
    region TENSOR OFFS SIZES    raw bytes of the region [OFFS, OFFS+SIZES)
                                (comma-separated; empty for 0-d) to stdout
    npyhdr FILE...              one 'ok ...' or 'FAIL ...' line: every file is
                                .npy version 1.0 in C order (what `ckpt
                                unpack` writes, docs/CLI.md)
    decode DTYPE FILE           decode raw bf16/f8e4m3/f8e5m2 bits to float32
                                and print them (debug aid)
"""
import json
import os
import sys

import numpy as np

NP_OF = {
    "f64": "<f8", "f32": "<f4", "f16": "<f2",
    "i64": "<i8", "i32": "<i4", "i16": "<i2", "i8": "|i1",
    "u64": "<u8", "u32": "<u4", "u16": "<u2", "u8": "|u1",
    "bool": "|b1", "bytes": "|u1", "c64": "<c8", "c128": "<c16",
    # bit containers for the dtypes NumPy lacks
    "bf16": "<u2", "f8e4m3": "|u1", "f8e5m2": "|u1",
}
LOWP = ("bf16", "f8e4m3", "f8e5m2")


class Tensor(object):
    def __init__(self, arr, dtype):
        self.arr = arr          # ndarray (bit container for LOWP dtypes)
        self.dtype = dtype      # ckpt dtype name, or None for .npy files


def parse_shape(s):
    s = s.strip()
    if s == "":
        return ()
    return tuple(int(x) for x in s.split(","))


def load(spec):
    # FILE:DTYPE:SHAPE (the shape part may be empty: a scalar)
    parts = spec.rsplit(":", 2)
    if len(parts) == 3 and parts[1] in NP_OF and os.path.exists(parts[0]):
        path, dt, shp = parts
        shape = parse_shape(shp)
        a = np.fromfile(path, dtype=np.dtype(NP_OF[dt]))
        n = int(np.prod(shape, dtype=np.int64)) if shape else 1
        if a.size != n:
            raise SystemExit("ref.py: %s holds %d items, shape %s needs %d"
                             % (path, a.size, shape, n))
        return Tensor(a.reshape(shape), dt)
    if spec.endswith(".npy"):
        return Tensor(np.load(spec, allow_pickle=False), None)
    return Tensor(np.fromfile(spec, dtype=np.uint8), "bytes")


def parse_slice(spec, shape):
    """NumPy basic-slicing index tuple for SPEC; bare index i -> i:i+1."""
    spec = spec.strip()
    parts = [] if spec == "" else spec.split(",")
    if len(parts) > len(shape):
        raise ValueError("too many indices for %d-d tensor" % len(shape))
    idx = []
    for d, p in enumerate(parts):
        p = p.strip()
        n = shape[d]
        if ":" in p:
            f = p.split(":")
            if len(f) != 2:
                raise ValueError("steps are not supported: %r" % p)
            a = int(f[0]) if f[0].strip() else None
            b = int(f[1]) if f[1].strip() else None
            idx.append(slice(a, b))
        else:
            i = int(p)
            if i < -n or i >= n:
                raise ValueError("index %d out of range for dim %d of size %d"
                                 % (i, d, n))
            if i < 0:
                i += n
            idx.append(slice(i, i + 1))
    return tuple(idx)


def cbytes(a):
    return np.ascontiguousarray(a).tobytes()


def do_slice(t, spec):
    return cbytes(t.arr[parse_slice(spec, t.arr.shape)])


# ---------------------------------------------------------- low-precision
def decode_lowp(dtype, bits):
    """Decode raw bits to float32, by formula, vectorized."""
    if dtype == "bf16":
        return (bits.astype(np.uint32) << np.uint32(16)).view(np.float32)
    b = bits.astype(np.int64)
    s = (b >> 7) & 1
    if dtype == "f8e4m3":       # float8_e4m3fn: bias 7, no inf, NaN = x.1111.111
        e = (b >> 3) & 0xF
        m = b & 7
        v = np.where(e == 0, np.ldexp(m / 8.0, -6),
                     np.ldexp(1.0 + m / 8.0, e - 7))
        v = np.where((e == 15) & (m == 7), np.nan, v)
    elif dtype == "f8e5m2":     # IEEE-like: bias 15, inf and NaN at e = 31
        e = (b >> 2) & 0x1F
        m = b & 3
        v = np.where(e == 0, np.ldexp(m / 4.0, -14),
                     np.ldexp(1.0 + m / 4.0, e - 15))
        v = np.where(e == 31, np.where(m == 0, np.inf, np.nan), v)
    else:
        raise ValueError(dtype)
    v = np.where(s == 1, -v, v)
    return v.astype(np.float32).reshape(bits.shape)


def float_equal_nan(exp, act):
    """Bitwise equality of float32 arrays, with any NaN equal to any NaN."""
    en, an = np.isnan(exp), np.isnan(act)
    if not np.array_equal(en, an):
        k = int(np.argmax(en != an))
        return "NaN mismatch at flat index %d: expected %r got %r" % (
            k, exp.ravel()[k], act.ravel()[k])
    eb = np.ascontiguousarray(exp).view(np.uint32)
    ab = np.ascontiguousarray(act).view(np.uint32)
    diff = (eb != ab) & ~en
    if diff.any():
        k = int(np.argmax(diff.ravel()))
        return "%d values differ; first at flat index %d: expected %r got %r" % (
            int(diff.sum()), k, exp.ravel()[k], act.ravel()[k])
    return None


def norm_dtype(dt):
    dt = np.dtype(dt)
    if dt.byteorder == "=":
        dt = dt.newbyteorder("<")
    return dt.str


def compare(expected, actual):
    """None when equal, else the reason."""
    e = load(expected)
    if e.dtype == "bytes":
        try:
            with open(expected, "rb") as f:
                eb = f.read()
            with open(actual, "rb") as f:
                ab = f.read()
        except OSError as x:
            return str(x)
        if eb != ab:
            return "byte object differs (%d vs %d bytes)" % (len(eb), len(ab))
        return None
    try:
        a = np.load(actual, allow_pickle=False)
    except Exception as x:  # noqa: BLE001 - any load failure is a mismatch
        return "cannot load %s: %s" % (actual, x)
    if e.dtype in LOWP:
        if norm_dtype(a.dtype) != "<f4":
            return "dtype %s, expected float32 for %s" % (a.dtype.str, e.dtype)
        if a.shape != e.arr.shape:
            return "shape %s, expected %s" % (a.shape, e.arr.shape)
        return float_equal_nan(decode_lowp(e.dtype, e.arr), a)
    ea = e.arr
    if norm_dtype(a.dtype) != norm_dtype(ea.dtype):
        return "dtype %s, expected %s" % (a.dtype.str, ea.dtype.str)
    if a.shape != ea.shape:
        return "shape %s, expected %s" % (a.shape, ea.shape)
    if cbytes(a) != cbytes(ea):
        ne = np.frombuffer(cbytes(a), np.uint8) != np.frombuffer(cbytes(ea), np.uint8)
        return "bytes differ (%d of %d, first at byte %d)" % (
            int(ne.sum()), ne.size, int(np.argmax(ne)))
    return None


# ---------------------------------------------------------- random slices
def rand_spec(rng, shape):
    parts = []
    for n in shape:
        r = rng.integers(0, 9)
        if n == 0:
            parts.append(":")
            continue
        if r == 0:
            parts.append(":")
        elif r in (1, 2):
            a = int(rng.integers(0, n))
            b = int(rng.integers(a + 1, n + 1))
            parts.append("%d:%d" % (a, b))
        elif r == 3:
            parts.append("%d:" % int(rng.integers(0, n)))
        elif r == 4:
            parts.append(":%d" % int(rng.integers(1, n + 1)))
        elif r == 5:
            parts.append("-%d:" % int(rng.integers(1, n + 1)))
        elif r == 6 and n >= 2:
            k = int(rng.integers(1, n))                  # stop = n - k
            a = int(rng.integers(0, n - k))
            parts.append("%d:-%d" % (a, k))
        elif r == 7:
            parts.append("%d" % int(rng.integers(0, n)))
        else:
            parts.append("-%d" % int(rng.integers(1, n + 1)))
    # sometimes leave trailing dims implicit (NumPy takes them whole)
    if len(parts) >= 2 and rng.random() < 0.15:
        parts = parts[:int(rng.integers(1, len(parts)))]
    return ",".join(parts)


def rand_specs(shape, n, seed):
    rng = np.random.default_rng(seed)
    return [rand_spec(rng, shape) for _ in range(n)]


def load_manifest(path):
    with open(path) as f:
        return json.load(f)


def tensor_arg(m):
    if m["kind"] == "raw":
        return "%s:%s:%s" % (m["file"], m["dtype"],
                             ",".join(str(d) for d in m["shape"]))
    return m["file"]


def main(argv):
    if len(argv) < 2:
        sys.stderr.write(__doc__)
        return 2
    cmd, args = argv[1], argv[2:]
    out = sys.stdout.buffer
    if cmd == "slice" and len(args) == 2:
        out.write(do_slice(load(args[0]), args[1]))
    elif cmd == "bytes" and len(args) == 1:
        out.write(cbytes(load(args[0]).arr))
    elif cmd == "region" and len(args) == 3:
        t = load(args[0])
        offs, sizes = parse_shape(args[1]), parse_shape(args[2])
        idx = tuple(slice(o, o + s) for o, s in zip(offs, sizes))
        out.write(cbytes(t.arr[idx]))
    elif cmd == "cmpnpy" and len(args) == 2:
        why = compare(args[0], args[1])
        if why:
            print("%s vs %s: %s" % (args[0], args[1], why))
            return 1
    elif cmd == "cmpmany" and not args:
        for line in sys.stdin:
            line = line.rstrip("\n")
            if not line:
                continue
            e, a = line.split("|", 1)
            why = compare(e, a)
            print(("FAIL %s: %s" % (e, why)) if why else ("ok %s" % e))
    elif cmd == "randslices" and len(args) == 3:
        t = load(args[0])
        if t.arr.ndim == 0:
            raise SystemExit("ref.py: a 0-d tensor has no slices")
        for s in rand_specs(t.arr.shape, int(args[1]), int(args[2])):
            print(s)
    elif cmd == "refbytes" and len(args) == 2:
        man = load_manifest(args[0])
        os.makedirs(args[1], exist_ok=True)
        for fqn, m in sorted(man.items()):
            with open(os.path.join(args[1], fqn + ".ref"), "wb") as f:
                f.write(cbytes(load(tensor_arg(m)).arr))
    elif cmd == "slicebatch" and len(args) == 4:
        man = load_manifest(args[0])
        n, seed, od = int(args[1]), int(args[2]), args[3]
        os.makedirs(od, exist_ok=True)
        with open(os.path.join(od, "slices.lst"), "w") as lst:
            for i, (fqn, m) in enumerate(sorted(man.items())):
                t = load(tensor_arg(m))
                if t.arr.ndim == 0 or t.arr.size == 0:
                    continue
                cnt = n if t.arr.ndim >= 2 else max(2, n // 4)
                for k, spec in enumerate(rand_specs(t.arr.shape, cnt,
                                                    seed * 1000 + i)):
                    rf = os.path.join(od, "%s.%d.ref" % (fqn, k))
                    with open(rf, "wb") as f:
                        f.write(do_slice(t, spec))
                    lst.write("%s|%d|%s|%s\n" % (fqn, k, spec, rf))
    elif cmd == "npyhdr":
        bad = []
        for path in args:
            with open(path, "rb") as f:
                try:
                    ver = np.lib.format.read_magic(f)
                    rd = (np.lib.format.read_array_header_1_0 if ver == (1, 0)
                          else np.lib.format.read_array_header_2_0)
                    _, fortran, _ = rd(f)
                except Exception as x:  # noqa: BLE001
                    bad.append("%s: %s" % (os.path.basename(path), x))
                    continue
            if ver != (1, 0) or fortran:
                bad.append("%s: version %s, fortran_order %s" % (
                    os.path.basename(path), ver, fortran))
        if bad:
            print("FAIL .npy headers: " + "; ".join(bad[:4]))
        else:
            print("ok %d .npy files are version 1.0, C order" % len(args))
    elif cmd == "decode" and len(args) == 2:
        bits = np.fromfile(args[1], dtype=np.dtype(NP_OF[args[0]]))
        print(decode_lowp(args[0], bits))
    else:
        sys.stderr.write("ref.py: bad usage\n" + __doc__)
        return 2
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
