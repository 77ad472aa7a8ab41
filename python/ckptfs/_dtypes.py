"""_dtypes.py - ckptfs dtypes and their NumPy and PyTorch equivalents.

Every dtype has a NumPy "storage" dtype of the same item size that holds
its bytes unchanged (bf16 as <u2, fp8 as |u1, bytes as |u1): reads land in
arrays of that dtype, then become what the caller asked for.  NumPy has no
bf16 or fp8, so with framework "np" they are widened to float32, exactly
(as `ckpt unpack` and the mount's .npy view do), or, on request, left as
their raw bits.  PyTorch has bf16 (and, from 2.1, fp8); torch 1.13 lacks
fp8 and the unsigned types wider than 8 bits.
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
}

# the NumPy dtype that holds each ckptfs dtype's bytes as they are
STORAGE = {
    C.F64: "<f8", C.F32: "<f4", C.F16: "<f2", C.BF16: "<u2",
    C.F8E4M3: "|u1", C.F8E5M2: "|u1",
    C.I64: "<i8", C.I32: "<i4", C.I16: "<i2", C.I8: "|i1",
    C.U64: "<u8", C.U32: "<u4", C.U16: "<u2", C.U8: "|u1",
    C.BOOL: "|b1", C.BYTES: "|u1",
}
STORAGE = {k: np.dtype(v) for k, v in STORAGE.items()}

# dtypes NumPy lacks, shown widened to float32
WIDENED = (C.BF16, C.F8E4M3, C.F8E5M2)

_FROM_NUMPY = {(k, s): c for c, (k, s) in {
    C.F64: ("f", 8), C.F32: ("f", 4), C.F16: ("f", 2),
    C.I64: ("i", 8), C.I32: ("i", 4), C.I16: ("i", 2), C.I8: ("i", 1),
    C.U64: ("u", 8), C.U32: ("u", 4), C.U16: ("u", 2), C.U8: ("u", 1),
    C.BOOL: ("b", 1)}.items()}

TORCH_NAMES = {
    C.F64: "float64", C.F32: "float32", C.F16: "float16", C.BF16: "bfloat16",
    C.F8E4M3: "float8_e4m3fn", C.F8E5M2: "float8_e5m2",
    C.I64: "int64", C.I32: "int32", C.I16: "int16", C.I8: "int8",
    C.U64: "uint64", C.U32: "uint32", C.U16: "uint16", C.U8: "uint8",
    C.BOOL: "bool",
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


def _f8e4m3_table():
    """float32 of every f8e4m3fn byte: 1 sign, 4 exponent bits (bias 7),
    3 mantissa bits, no infinities, NaN at 0x7f and 0xff."""
    b = np.arange(256, dtype=np.uint32)
    e = (b >> 3) & 0xF
    m = (b & 7).astype(np.float64)
    mag = np.where(e == 0, m / 8 * 2.0 ** -6, (1 + m / 8) * 2.0 ** (
        e.astype(np.float64) - 7))
    mag = np.where((e == 15) & (b & 7 == 7), np.nan, mag)
    return np.where(b & 0x80, -mag, mag).astype(np.float32)


def _f8e5m2_table():
    """float32 of every f8e5m2 byte: the top byte of an IEEE half."""
    b = np.arange(256, dtype=np.uint16)
    return (b << 8).view(np.float16).astype(np.float32)


_TABLES = {}


def widen(raw, code):
    """float32 values of `raw` (the storage array of a bf16 or fp8 tensor),
    exact."""
    if code == C.BF16:
        bits = np.asarray(raw.astype(np.uint32) << np.uint32(16))
        return bits.view(np.float32)
    table = _TABLES.get(code)
    if table is None:
        table = _TABLES[code] = (_f8e4m3_table() if code == C.F8E4M3
                                 else _f8e5m2_table())
    return np.asarray(table[raw])
