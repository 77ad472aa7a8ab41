#!/bin/bash
# npy_same.sh - `ckpt unpack` and the mount's .npy/ view give the same bytes
# for every dtype ckptfs knows (both write through src/npy.c), and those
# bytes are NumPy's: the header NumPy reads back, the values of the dtypes
# NumPy has as they are, and bf16/f8e4m3/f8e5m2 widened to float32 by the
# rules of src/npy.h -- every value of bf16 (all 65,536 bit patterns, all
# NaN payloads, signalling ones too) and of both float8 formats (all 256
# bytes), checked bit for bit against a reference computed by NumPy, and
# against the Python package's own widening (ckptfs.load).  Likewise the
# later dtypes: c64 and c128 as NumPy's own, c32 widened to complex64
# (every binary16 bit pattern as a part), and the fnuz and e8m0 float8
# formats widened to float32 (all 256 bytes).
. "$(dirname "$0")/lib.sh"

DATA=$TMP/data
mkdir -p "$DATA"
# Every dtype, raw files with a pack spec each; the widened dtypes hold
# every bit pattern, the others random bytes (NaNs of f16/f32/f64 included).
"$PY" - "$DATA" <<'EOF' >"$TMP/specs.lst" || exit 99
import os, sys
import numpy as np
d = sys.argv[1]
rng = np.random.default_rng(17)
spec = {"f64": 8, "f32": 4, "f16": 2, "i64": 8, "i32": 4, "i16": 2,
        "i8": 1, "u64": 8, "u32": 4, "u16": 2, "u8": 1}
for name, size in spec.items():
    b = rng.integers(0, 256, size=6 * 5 * size, dtype=np.uint8)
    b.tofile(os.path.join(d, name + ".raw"))
    print("%s=%s/%s.raw:%s:6,5" % (name, d, name, name))
(rng.integers(0, 2, size=7, dtype=np.uint8)).tofile(os.path.join(d, "b.raw"))
print("bool=%s/b.raw:bool:7" % d)
np.arange(65536, dtype="<u2").reshape(256, 256).tofile(os.path.join(d, "bf16.raw"))
print("bf16=%s/bf16.raw:bf16:256,256" % d)
for name, size in (("c64", 8), ("c128", 16)):
    b = rng.integers(0, 256, size=6 * 5 * size, dtype=np.uint8)
    b.tofile(os.path.join(d, name + ".raw"))
    print("%s=%s/%s.raw:%s:6,5" % (name, d, name, name))
np.arange(65536, dtype="<u2").tofile(os.path.join(d, "c32.raw"))
print("c32=%s/c32.raw:c32:128,256" % d)
for name in ("f8e4m3", "f8e5m2", "f8e4m3fnuz", "f8e5m2fnuz", "f8e8m0"):
    np.arange(256, dtype=np.uint8).reshape(16, 16).tofile(
        os.path.join(d, name + ".raw"))
    print("%s=%s/%s.raw:%s:16,16" % (name, d, name, name))
np.float32(2.5).tofile(os.path.join(d, "scalar.raw"))
print("scalar=%s/scalar.raw:f32:" % d)
print("empty=%s/empty.raw:bf16:0,3" % d)
open(os.path.join(d, "blob.bin"), "wb").write(bytes(range(256)) * 3)
print("blob=%s/blob.bin" % d)
open(os.path.join(d, "empty.raw"), "wb").close()
EOF
mapfile -t SPECS <"$TMP/specs.lst"
CK=$TMP/ck
run_ckpt pack "$CK" "${SPECS[@]}"
expect_ok "pack every dtype" || { summary; }
run_ckpt unpack "$CK" "$TMP/out"
expect_ok "unpack"

MNT=$TMP/mnt
mkdir -p "$MNT"
mount_ck "$CK" "$MNT" || { summary; }
for s in "${SPECS[@]}"; do
    name=${s%%=*}
    if [ "$name" = blob ]; then
        # A byte object: unpack writes its bytes as blob.bin, the view the
        # 1-D uint8 array of them (a header, then the same bytes).
        hl=$("$PY" -c 'import numpy.lib.format as f, sys
with open(sys.argv[1], "rb") as fh:
    f.read_array_header_1_0(fh) if f.read_magic(fh) == (1, 0) else None
    print(fh.tell())' "$MNT/.npy/blob.npy")
        check "blob: the view's data is the unpacked byte object" \
            cmp -s -i "$hl:0" "$MNT/.npy/blob.npy" "$TMP/out/blob.bin"
        continue
    fi
    same_bytes "$name: ckpt unpack and the mount's .npy/ view agree" \
        "$TMP/out/$name.npy" "$MNT/.npy/$name.npy"
done
# The later dtypes' tensor files: their canonical names and stored bytes.
for name in c64 c128 c32 f8e4m3fnuz f8e5m2fnuz f8e8m0; do
    check "$name: user.ckpt.dtype is $name" \
        test "$(xattr_get "$MNT/$name" user.ckpt.dtype)" = "$name"
    check "$name: the tensor file holds the packed bytes" \
        cmp -s "$MNT/$name" "$DATA/$name.raw"
done
umount_ck "$MNT"
expect_daemon_clean "daemon" "$MNT_LOG"

# The reference: NumPy reads every file back, and the widened values are
# NumPy's (bit for bit, NaNs by the rules of src/npy.h).
"$PY" - "$DATA" "$TMP/out" <<'EOF' >"$TMP/ref.out" 2>&1
import os, sys
import numpy as np
data, out = sys.argv[1], sys.argv[2]
ok = lambda m: print("ok " + m)
bad = lambda m: print("FAIL " + m)

def check(name, want):
    got = np.load(os.path.join(out, name + ".npy"))
    if got.dtype != want.dtype or got.shape != want.shape:
        bad("%s: dtype/shape %s %s, want %s %s" % (name, got.dtype,
            got.shape, want.dtype, want.shape))
    elif got.tobytes() != want.tobytes():
        bits = got.ravel().view("u%d" % got.itemsize)
        ref = want.ravel().view("u%d" % want.itemsize)
        i = int(np.nonzero(bits != ref)[0][0])
        bad("%s: element %d has bits %#x, want %#x" % (name, i, bits[i],
                                                      ref[i]))
    else:
        ok("%s: NumPy reads the values back bit for bit" % name)

def raw(name, dt, shape):
    return np.fromfile(os.path.join(data, name + ".raw"), dt).reshape(shape)

for name, dt in (("f64", "<f8"), ("f32", "<f4"), ("f16", "<f2"),
                 ("i64", "<i8"), ("i32", "<i4"), ("i16", "<i2"),
                 ("i8", "i1"), ("u64", "<u8"), ("u32", "<u4"),
                 ("u16", "<u2"), ("u8", "u1")):
    check(name, raw(name, dt, (6, 5)))
check("bool", raw("b", "u1", (7,)).astype(bool))
check("c64", raw("c64", "<c8", (6, 5)))
check("c128", raw("c128", "<c16", (6, 5)))
check("scalar", np.array(2.5, np.float32))
check("empty", np.zeros((0, 3), np.float32))

# bf16: the top half of a float32, every bit kept.
u = np.arange(65536, dtype=np.uint32)
check("bf16", (u << 16).astype("<u4").view("<f4").reshape(256, 256))

def f_bits(ebits, mbits, nan_of, bias=None):
    """float32 bits of every value of a 1-sign-bit float format."""
    w = 1 + ebits + mbits
    b = np.arange(1 << w, dtype=np.uint32)
    sign = (b >> (w - 1)) << 31
    e = (b >> mbits) & ((1 << ebits) - 1)
    m = b & ((1 << mbits) - 1)
    if bias is None:
        bias = (1 << (ebits - 1)) - 1
    # Numbers through float64 (exact for these): normals and subnormals.
    val = np.where(e == 0, m * 2.0 ** (1 - bias - mbits),
                   (1 + m / 2.0 ** mbits) * 2.0 ** (e.astype(np.int64) - bias))
    with np.errstate(over="ignore"):
        val = np.where(b >> (w - 1) == 1, -val, val).astype(np.float32)
    bits = val.view(np.uint32).copy()
    return nan_of(b, sign, e, m, bits)

def f8_ref(ebits, mbits, nan_of, bias=None):
    bits = f_bits(ebits, mbits, nan_of, bias)
    return bits.astype("<u4").view("<f4").reshape(16, 16)

def e4m3_nan(b, sign, e, m, bits):
    nan = (e == 15) & (m == 7)             # S.1111.111: default quiet NaN
    return np.where(nan, sign | 0x7fc00000, bits).astype(np.uint32)

def e5m2_special(b, sign, e, m, bits):
    # infinities and NaNs: every bit kept, nothing quieted
    return np.where(e == 31, sign | 0x7f800000 | (m << 21),
                    bits).astype(np.uint32)

def fnuz_nan(b, sign, e, m, bits):
    # no infinities, no -0: 0x80 is the one NaN, the positive quiet NaN
    return np.where(b == 0x80, 0x7fc00000, bits).astype(np.uint32)

check("f8e4m3", f8_ref(4, 3, e4m3_nan))
check("f8e5m2", f8_ref(5, 2, e5m2_special))
check("f8e4m3fnuz", f8_ref(4, 3, fnuz_nan, bias=8))
check("f8e5m2fnuz", f8_ref(5, 2, fnuz_nan, bias=16))
# e8m0: 2^(b - 127), 0xff the NaN.
b = np.arange(256)
with np.errstate(over="ignore"):
    e8 = (2.0 ** (b - 127)).astype(np.float32)
e8[255] = np.uint32(0x7fc00000).view(np.float32)
check("f8e8m0", e8.reshape(16, 16))
# c32: each binary16 part as NumPy's float16 to float32 would, every bit
# kept (infinities, NaN payloads).
f16 = f_bits(5, 10, lambda b, sign, e, m, bits: np.where(
    e == 31, sign | 0x7f800000 | (m << 13), bits).astype(np.uint32))
check("c32", f16.astype("<u4").view("<c8").reshape(128, 256))
# f8e5m2 is the top byte of a float16: NumPy's float16 to float32 gives
# the same bits, NaN payloads included (where NumPy keeps them: a machine
# whose conversion quiets signalling NaNs differs in those two bytes only).
h = (np.arange(256, dtype=np.uint16) << 8).view(np.float16).astype(np.float32)
got = np.load(os.path.join(out, "f8e5m2.npy")).ravel()
hb, gb = h.view(np.uint32), got.view(np.uint32)
quieted = (hb != gb) & (hb == (gb | 0x00400000)) & np.isnan(h)
if np.array_equal(gb[~quieted], hb[~quieted]) and quieted.sum() in (0, 2):
    ok("f8e5m2: the bits of NumPy's float16 of the byte << 8")
else:
    i = int(np.nonzero(hb != gb)[0][0])
    bad("f8e5m2: byte %#x widens to %#x, NumPy's float16 gives %#x"
        % (i, gb[i], hb[i]))
EOF
[ $? -eq 0 ] || bad "the NumPy reference check failed"
report "$TMP/ref.out"

# The Python package widens on its own (ckptfs.load, widen=True): the same
# bits.  (Not in a sanitizer build: the library would need its runtime
# preloaded into Python, as tests/python/run.sh does.)
if [ -z "${CKPT_SAN_CFLAGS:-}" ] && [ -d "$CKPT_BUILDDIR/python/ckptfs" ]; then
    PYTHONPATH="$CKPT_BUILDDIR/python" "$PY" - "$CK" "$TMP/out" \
        <<'EOF' >"$TMP/py.out" 2>&1
import os, sys
import numpy as np
import ckptfs
ck, out = sys.argv[1], sys.argv[2]
wide = ckptfs.load(ck)
for k in ("bf16", "f8e4m3", "f8e5m2", "f8e4m3fnuz", "f8e5m2fnuz", "f8e8m0",
          "c32"):
    a = np.load(os.path.join(out, k + ".npy"))
    p = np.asarray(wide[k])
    same = a.dtype == p.dtype and a.tobytes() == p.tobytes()
    print(("ok " if same else "FAIL ") + "%s: ckptfs.load widens to the "
          "same bits as ckpt unpack" % k)
EOF
    [ $? -eq 0 ] || bad "the Python package check failed"
    report "$TMP/py.out"
fi
summary
