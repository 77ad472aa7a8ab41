"""_pieces.py - the C pieces (ckpt_piece) of a flattened state.

A piece points at the tensor's own memory: NumPy's buffer, a torch
tensor's data_ptr(), a bytes object's buffer; nothing is copied in Python
except where the memory is not row-major little-endian host memory (a
non-contiguous view, a big-endian array, a tensor on a GPU when the C
side cannot read it): then a contiguous copy is made for that tensor
alone.  Pieces keeps every object the pointers refer to alive until it is
dropped.
"""
import ctypes

import numpy as np

from . import _capi as C
from . import _dtypes
from ._errors import UnsupportedError
from ._tree import Raw, is_torch_tensor, torch_module


class HostTensor(object):
    """A tensor's dtype code, shape and the address of its row-major
    bytes, with `keep` holding whatever owns them."""

    __slots__ = ("code", "shape", "addr", "nbytes", "keep")

    def __init__(self, code, shape, addr, nbytes, keep):
        self.code, self.shape, self.addr = code, tuple(shape), addr
        self.nbytes, self.keep = nbytes, keep


def _numpy(arr, what, code=None):
    if code is None:
        code = _dtypes.from_numpy(arr.dtype, what)
    want = _dtypes.STORAGE[code]
    if arr.dtype.itemsize != want.itemsize:
        raise UnsupportedError("%s: %s data of item size %d cannot hold "
                               "ckptfs dtype %s (item size %d)"
                               % (what, arr.dtype, arr.dtype.itemsize,
                                  _dtypes.name(code), want.itemsize))
    if arr.dtype.byteorder == ">":
        arr = arr.astype(arr.dtype.newbyteorder("<"))
    arr = _dtypes.c_order(arr)
    return HostTensor(code, arr.shape, arr.ctypes.data, arr.nbytes, arr)


def _torch(t, what, code=None, device_ok=False):
    if type(t).__name__ in ("ShardedTensor", "DTensor"):
        raise UnsupportedError("%s: a %s is sharded across processes; save "
                               "it with torch.distributed.checkpoint and "
                               "ckptfs.torch.StorageWriter" % (
                                   what, type(t).__name__))
    if t.layout != torch_module().strided or t.is_quantized:
        raise UnsupportedError("%s: only dense tensors are saved (this one "
                               "is %s)" % (what, t.layout))
    if code is None:
        code = _dtypes.from_torch(t.dtype, what)
    if t.element_size() != _dtypes.STORAGE[code].itemsize:
        raise UnsupportedError("%s: torch %s cannot hold ckptfs dtype %s"
                               % (what, t.dtype, _dtypes.name(code)))
    t = t.detach()
    if t.device.type != "cpu" and not (device_ok and t.device.type == "cuda"):
        t = t.cpu()
    if not t.is_contiguous():
        t = t.contiguous()
    nbytes = t.numel() * t.element_size()
    return HostTensor(code, t.shape, t.data_ptr() if nbytes else 0, nbytes, t)


def host_tensor(value, what, device_ok=False):
    """The HostTensor of a NumPy array or scalar, torch tensor or Raw.
    device_ok: CUDA tensors are passed as device pointers (for a saver
    that can read them), not copied to the host."""
    code = None
    if isinstance(value, Raw):
        code = _dtypes.parse(value.dtype)
        value = value.data
    if is_torch_tensor(value):
        return _torch(value, what, code, device_ok)
    if isinstance(value, (np.ndarray, np.generic)):
        return _numpy(np.asarray(value), what, code)
    raise UnsupportedError("%s: %s is not a tensor" % (what,
                                                       type(value).__name__))


def byte_tensor(data):
    """The HostTensor of a byte string (no copy)."""
    arr = np.frombuffer(data, dtype=np.uint8) if len(data) else np.empty(
        0, np.uint8)
    return HostTensor(C.BYTES, (len(data),), arr.ctypes.data if len(data)
                      else 0, len(data), (data, arr))


class Pieces(object):
    """The ckpt_piece array of a flattened state's items: `array` and `n`
    for the C call.  Everything is checked and converted before any C
    call, so a bad entry fails with nothing written."""

    def __init__(self, items, device_ok=False):
        self.n = len(items)
        self.array = (C.Piece * max(1, self.n))()
        self._keep = []
        self.device = False      # some piece is CUDA memory
        for i, (fqn, kind, value) in enumerate(items):
            if kind == "tensor":
                h = host_tensor(value, "state entry '%s'" % fqn, device_ok)
                self.device |= getattr(getattr(h.keep, "device", None),
                                       "type", None) == "cuda"
            else:
                h = byte_tensor(value)
            self.set(i, fqn, h)

    @classmethod
    def one(cls, fqn, h, offsets=None, shape=None):
        """A single piece: tensor `fqn`'s HostTensor h (see set)."""
        pieces = cls([])
        pieces.n = 1
        pieces.set(0, fqn, h, offsets, shape)
        return pieces

    def set(self, i, fqn, h, offsets=None, shape=None):
        """Piece i: tensor `fqn`, the HostTensor h, at `offsets` of a
        global `shape` (default: h is the whole tensor)."""
        name = fqn.encode("utf-8")
        dims = C.int64_array(h.shape)
        gshape = C.int64_array(shape) if shape is not None else dims
        offs = C.int64_array(offsets) if offsets is not None else None
        p = self.array[i]
        p.fqn = name
        p.dtype = h.code
        p.ndim = len(h.shape)
        p.shape = ctypes.cast(gshape, C.I64P)
        p.sizes = ctypes.cast(dims, C.I64P)
        p.offsets = ctypes.cast(offs, C.I64P) if offs is not None else None
        p.data = h.addr or None
        self._keep.append((name, dims, gshape, offs, h))


def c_strings(values):
    """A C array of char * (and the bytes it points to, to keep)."""
    raw = [v.encode("utf-8") for v in values]
    return (ctypes.c_char_p * max(1, len(raw)))(*raw), raw
