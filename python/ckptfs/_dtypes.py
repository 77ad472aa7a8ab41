"""_dtypes.py - ckptfs dtypes and their NumPy and PyTorch equivalents.

Every dtype has a NumPy "storage" dtype of the same item size that holds
its bytes unchanged (bf16 as <u2, fp8 as |u1, c32 as <u4, bytes as |u1):
reads land in arrays of that dtype, then become what the caller asked for.
NumPy has no bf16, fp8 or complex32, so with framework "np" they are
widened exactly (as `ckpt unpack` and the mount's .npy view do: bf16 and
fp8 to float32, complex32 to complex64), or, on request, left as their raw
bits.  PyTorch has bf16, complex32 and complex64/128 (and, from 2.1, fp8;
the fnuz fp8 from 2.2, float8_e8m0fnu from 2.7); torch 1.13 lacks fp8 and
the unsigned types wider than 8 bits.
"""
import numpy as np

from . import _capi as C
from ._errors import UnsupportedError

NAMES = {
    C.F64: "f64", C.F32: "f32", C.F16: "f16", C.BF16: "bf16",
    C.F8E4M3: "f8e4m3", C.F8E5M2: "f8e5m2",
    C.I64: "i64", C.I32: "i32", C.I16: "i16", C.I8: "i8",
    C.U64: "u64", C.U32: "u32", C.U16: "u16", C.U8: "u8",
    C.BOOL: "bool", C.BYTES: "bytes",
    C.C64: "c64", C.C128: "c128", C.C32: "c32",
    C.F8E4M3FNUZ: "f8e4m3fnuz", C.F8E5M2FNUZ: "f8e5m2fnuz",
    C.F8E8M0: "f8e8m0",
}

# the NumPy dtype that holds each ckptfs dtype's bytes as they are
STORAGE = {
    C.F64: "<f8", C.F32: "<f4", C.F16: "<f2", C.BF16: "<u2",
    C.F8E4M3: "|u1", C.F8E5M2: "|u1",
    C.I64: "<i8", C.I32: "<i4", C.I16: "<i2", C.I8: "|i1",
    C.U64: "<u8", C.U32: "<u4", C.U16: "<u2", C.U8: "|u1",
    C.BOOL: "|b1", C.BYTES: "|u1",
    C.C64: "<c8", C.C128: "<c16", C.C32: "<u4",
    C.F8E4M3FNUZ: "|u1", C.F8E5M2FNUZ: "|u1", C.F8E8M0: "|u1",
}
STORAGE = {k: np.dtype(v) for k, v in STORAGE.items()}

# dtypes NumPy lacks, and the NumPy dtype each is widened to
WIDENED = {code: np.dtype(np.float32) for code in (
    C.BF16, C.F8E4M3, C.F8E5M2, C.F8E4M3FNUZ, C.F8E5M2FNUZ, C.F8E8M0)}
WIDENED[C.C32] = np.dtype(np.complex64)

_FROM_NUMPY = {(k, s): c for c, (k, s) in {
    C.F64: ("f", 8), C.F32: ("f", 4), C.F16: ("f", 2),
    C.I64: ("i", 8), C.I32: ("i", 4), C.I16: ("i", 2), C.I8: ("i", 1),
    C.U64: ("u", 8), C.U32: ("u", 4), C.U16: ("u", 2), C.U8: ("u", 1),
    C.BOOL: ("b", 1), C.C64: ("c", 8), C.C128: ("c", 16)}.items()}

TORCH_NAMES = {
    C.F64: "float64", C.F32: "float32", C.F16: "float16", C.BF16: "bfloat16",
    C.F8E4M3: "float8_e4m3fn", C.F8E5M2: "float8_e5m2",
    C.I64: "int64", C.I32: "int32", C.I16: "int16", C.I8: "int8",
    C.U64: "uint64", C.U32: "uint32", C.U16: "uint16", C.U8: "uint8",
    C.BOOL: "bool",
    C.C64: "complex64", C.C128: "complex128", C.C32: "complex32",
    C.F8E4M3FNUZ: "float8_e4m3fnuz", C.F8E5M2FNUZ: "float8_e5m2fnuz",
    C.F8E8M0: "float8_e8m0fnu",
}


def c_order(arr):
    """arr if it is C-contiguous (without negative strides, which torch
    refuses), else a C-contiguous copy; 0-d arrays stay 0-d, unlike with
    np.ascontiguousarray."""
    if arr.flags.c_contiguous and all(s >= 0 for s in arr.strides):
        return arr
    return arr.copy(order="C")


def name(code):
    return NAMES.get(code, "invalid(%d)" % code)


def parse(text):
    """A ckptfs dtype code from any spelling the library accepts ("bf16",
    "torch.bfloat16", "<f4", ...), or UnsupportedError."""
    code = C.lib.ckpt_dtype_parse(str(text).encode())
    if code == C.DTYPE_INVALID or code == C.BYTES:
        raise UnsupportedError("unknown tensor dtype '%s'" % text)
    return code


def from_numpy(dtype, what):
    """The ckptfs dtype of a NumPy dtype (any byte order)."""
    dtype = np.dtype(dtype)
    code = _FROM_NUMPY.get((dtype.kind, dtype.itemsize))
    if code is None:
        raise UnsupportedError("%s: NumPy dtype %s has no ckptfs equivalent "
                               "(ckptfs stores %s)" % (what, dtype, ", ".join(
                                   sorted(set(NAMES.values()) - {"bytes"}))))
    return code


def torch_dtype(code, torch):
    """The torch dtype of a ckptfs dtype, or None where this torch lacks
    it."""
    n = TORCH_NAMES.get(code)
    return getattr(torch, n, None) if n else None


def from_torch(dtype, what):
    """The ckptfs dtype of a torch dtype."""
    n = str(dtype).replace("torch.", "")
    for code, tn in TORCH_NAMES.items():
        if tn == n:
            return code
    raise UnsupportedError("%s: torch dtype %s has no ckptfs equivalent"
                           % (what, dtype))


def _f8_table(ebits, mbits, bias, nan, signed_nan=False):
    """float32 of every byte of an 8-bit float: 1 sign bit (none when
    ebits is 8), ebits exponent bits of that bias, mbits mantissa bits, no
    infinities.  `nan(b, e, m)` gives the NaN bytes; a NaN is the default
    quiet NaN, with the byte's sign where the format has signed NaNs
    (`signed_nan`: e4m3fn) and positive where it has one NaN (fnuz, e8m0),
    as in the rules of src/common/npy.h."""
    b = np.arange(256, dtype=np.uint32)
    e = (b >> mbits) & ((1 << ebits) - 1)
    m = b & ((1 << mbits) - 1)
    if ebits == 8:                      # e8m0: an exponent alone
        val = 2.0 ** (b.astype(np.float64) - bias)
    else:
        mf, scale = m.astype(np.float64), 2.0 ** -mbits
        mag = np.where(e == 0, mf * scale * 2.0 ** (1 - bias),
                       (1 + mf * scale) * 2.0 ** (e.astype(np.float64) - bias))
        val = np.where(b & 0x80, -mag, mag)
    with np.errstate(over="ignore"):    # e8m0's 0xff, a NaN below
        bits = val.astype(np.float32).view(np.uint32)
    nan_bits = 0x7FC00000 | ((b & 0x80) << 24 if signed_nan else 0)
    bits = np.where(nan(b, e, m), nan_bits, bits).astype(np.uint32)
    return bits.view(np.float32)


def _f8e4m3_table():
    """f8e4m3fn: bias 7, no infinities, NaN at 0x7f and 0xff."""
    return _f8_table(4, 3, 7, lambda b, e, m: (e == 15) & (m == 7),
                     signed_nan=True)


def _f8e5m2_table():
    """float32 of every f8e5m2 byte: the top byte of an IEEE half."""
    b = np.arange(256, dtype=np.uint16)
    return (b << 8).view(np.float16).astype(np.float32)


def _fnuz_table(ebits, mbits, bias):
    """The fnuz formats: no infinities, no negative zero, NaN at 0x80."""
    return _f8_table(ebits, mbits, bias, lambda b, e, m: b == 0x80)


_TABLE_OF = {
    C.F8E4M3: _f8e4m3_table, C.F8E5M2: _f8e5m2_table,
    C.F8E4M3FNUZ: lambda: _fnuz_table(4, 3, 8),
    C.F8E5M2FNUZ: lambda: _fnuz_table(5, 2, 16),
    C.F8E8M0: lambda: _f8_table(8, 0, 127, lambda b, e, m: b == 0xFF),
}
_TABLES = {}


def widen(raw, code):
    """The values of `raw` (the storage array of a tensor whose dtype NumPy
    lacks) in the NumPy dtype WIDENED[code], exact."""
    if code == C.BF16:
        bits = np.asarray(raw.astype(np.uint32) << np.uint32(16))
        return bits.view(np.float32)
    if code == C.C32:                   # two float16 halves per element
        halves = np.ascontiguousarray(raw).reshape(-1).view("<f2")
        return halves.astype(np.float32).view(np.complex64).reshape(
            raw.shape)
    table = _TABLES.get(code)
    if table is None:
        table = _TABLES[code] = _TABLE_OF[code]()
    return np.asarray(table[raw])
