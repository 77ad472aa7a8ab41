"""_reader.py - reading checkpoints: the Reader over a ckpt_reader, and
the lazy, safetensors-style view of one that ckptfs.open returns.

Every read goes through the library's region reads, into a freshly
allocated array (or the caller's own memory, for load): only the frames
that the requested bytes touch are read and decoded, each checked against
its checksum.  The same calls read ckptfs checkpoints and what the C
reader opens of other tools: PyTorch DCP directories and safetensors
files.
"""
import collections
import contextlib
import ctypes
import errno
import operator
import os
import threading

import numpy as np

from . import _capi as C
from . import _dtypes
from ._errors import (MissingKeyError, UnsupportedError, check, error_class,
                      from_c)

ChunkInfo = collections.namedtuple(
    "ChunkInfo", "offsets sizes file nframes raw_bytes stored_bytes")
FrameInfo = collections.namedtuple(
    "FrameInfo", "file_offset stored_size raw_offset raw_size codec checksum")
TensorInfo = collections.namedtuple(
    "TensorInfo", "name dtype shape nbytes stored_bytes nframes codec chunks")
ChunkInfo.__doc__ = ("One chunk of a tensor: the box [offsets, offsets + "
                     "sizes) it holds, its shard file (relative to the "
                     "checkpoint) and its frames' raw and stored bytes.")
FrameInfo.__doc__ = ("One frame of a chunk: where it is in its file, its "
                     "byte range in the chunk's row-major image, its codec "
                     "and the XXH3-64 of its raw bytes.")
TensorInfo.__doc__ = ("A tensor (or byte object) of a checkpoint: ckptfs "
                      "dtype name, global shape, raw and stored bytes, "
                      "frame count, the codecs its frames use ('raw+zstd') "
                      "and its chunks.")

FORMATS = {C.FORMAT_CKPTFS: "ckptfs", C.FORMAT_DCP: "dcp",
           C.FORMAT_SAFETENSORS: "safetensors", C.FORMAT_TORCH: "torch"}


def _dims(ptr, n):
    return tuple(int(ptr[i]) for i in range(n))


class Reader(object):
    """An open checkpoint (libckptfs' ckpt_reader); usable from several
    threads at once (each read releases the GIL).  The C library's rule is
    that a reader is not closed while another thread uses it: every call
    here that passes the handle holds a use of it (_use), and close()
    waits until the calls in flight have returned; a call after close()
    raises ValueError."""

    def __init__(self, path, threads=None, cache_bytes=None, prefetch=None,
                 follow_links=False):
        self._cv = threading.Condition(threading.Lock())
        self._users = 0                # calls in flight that use _h
        self._h = ctypes.c_void_p()
        self.path = path
        o = C.ReadOpts()
        C.lib.ckpt_read_opts_init(ctypes.byref(o))
        o.follow_links = 1 if follow_links else 0
        if threads is not None:
            o.threads = int(threads)
        if cache_bytes is not None:
            o.cache_bytes = int(cache_bytes)
        if prefetch is not None:
            o.prefetch = int(prefetch)
        h = ctypes.c_void_p()
        err = C.Error()
        check(C.lib.ckpt_reader_open(ctypes.byref(h), C.fsencode(path),
                                     ctypes.byref(o), ctypes.byref(err)), err)
        self._h = h
        self.format = FORMATS.get(C.lib.ckpt_reader_format(h), "ckptfs")
        self._infos = {}

    def close(self):
        """Closes the checkpoint, once no call of another thread is using
        it (they finish first); later calls raise ValueError."""
        with self._cv:
            h, self._h = self._h, None     # no new call starts
            while self._users:
                self._cv.wait()
            if h:
                C.lib.ckpt_reader_close(h)

    def __del__(self):
        if getattr(self, "_cv", None) is not None:
            self.close()

    @contextlib.contextmanager
    def _use(self):
        """The handle, held open for the with-block."""
        with self._cv:
            h = self._h
            if not h:
                raise ValueError("checkpoint %s is closed" % (self.path,))
            self._users += 1
        try:
            yield h
        finally:
            with self._cv:
                self._users -= 1
                if not self._users:
                    self._cv.notify_all()

    # ------------------------------------------------------------ listing
    def count(self):
        with self._use() as h:
            return C.lib.ckpt_reader_count(h)

    def index(self, name):
        """The index of tensor `name`, or MissingKeyError."""
        with self._use() as h:
            i = C.lib.ckpt_reader_find(h, name.encode("utf-8"))
        if i < 0:
            raise MissingKeyError("'%s' is not in the checkpoint %s"
                                  % (name, self.path))
        return i

    def has(self, name):
        with self._use() as h:
            return C.lib.ckpt_reader_find(h, name.encode("utf-8")) >= 0

    def raw_info(self, i):
        """(name, dtype code, shape, nbytes) of tensor i, cached."""
        got = self._infos.get(i)
        if got is None:
            with self._use() as h:
                ti = self._tensor_info(h, i)
                got = (ti.fqn.decode("utf-8", "replace"), ti.dtype,
                       _dims(ti.shape, ti.ndim), int(ti.nbytes))
            self._infos[i] = got
        return got

    def _tensor_info(self, h, i):
        """The ckpt_tensor_info of tensor i: its pointers are the reader's,
        valid while h is in use."""
        ti = C.TensorInfo()
        if C.lib.ckpt_reader_info(h, i, ctypes.byref(ti)) != 0:
            raise IndexError("no tensor %d in %s" % (i, self.path))
        return ti

    def _chunk_info(self, h, i, c):
        """The ckpt_chunk_info of chunk c of tensor i, or the library's
        error: ckpt_reader_chunk has no message, so a failure is asked
        again of ckpt_reader_frame, which loads the chunks the same way and
        says what is wrong with them (a damaged index, naming the
        tensor)."""
        ci = C.ChunkInfo()
        rc = C.lib.ckpt_reader_chunk(h, i, c, ctypes.byref(ci))
        if rc != 0:
            err = C.Error()
            again = C.lib.ckpt_reader_frame(h, i, c, 0,
                                            ctypes.byref(C.FrameInfo()),
                                            ctypes.byref(err))
            if again < 0 and err.msg:
                raise from_c(again, err)
            raise error_class(-rc)(-rc, "%s: tensor %d, chunk %d: %s"
                                   % (self.path, i, c, os.strerror(-rc)))
        return ci

    def names(self):
        return [self.raw_info(i)[0] for i in range(self.count())]

    def info(self, i):
        """The TensorInfo of tensor i."""
        with self._use() as h:
            ti = self._tensor_info(h, i)
            chunks = []
            for c in range(ti.nchunks):
                ci = self._chunk_info(h, i, c)
                chunks.append(ChunkInfo(_dims(ci.offsets, ti.ndim),
                                        _dims(ci.sizes, ti.ndim),
                                        (ci.file or b"").decode("utf-8",
                                                                "replace"),
                                        int(ci.nframes), int(ci.raw_bytes),
                                        int(ci.stored_bytes)))
            return TensorInfo(ti.fqn.decode("utf-8", "replace"),
                              _dtypes.name(ti.dtype),
                              _dims(ti.shape, ti.ndim), int(ti.nbytes),
                              int(ti.stored_bytes), int(ti.nframes),
                              (ti.codecs or b"").decode("utf-8", "replace"),
                              tuple(chunks))

    def frames(self, i, chunk):
        """The FrameInfos of chunk `chunk` of tensor i."""
        with self._use() as h:
            ti = self._tensor_info(h, i)
            if not 0 <= chunk < ti.nchunks:
                raise IndexError("tensor '%s' has %d chunks, not %d"
                                 % (ti.fqn.decode("utf-8", "replace"),
                                    ti.nchunks, chunk + 1))
            ci = self._chunk_info(h, i, chunk)
            out = []
            err = C.Error()
            for f in range(ci.nframes):
                fi = C.FrameInfo()
                check(C.lib.ckpt_reader_frame(h, i, chunk, f,
                                              ctypes.byref(fi),
                                              ctypes.byref(err)), err)
                out.append(FrameInfo(int(fi.file_offset),
                                     int(fi.stored_size),
                                     int(fi.raw_offset), int(fi.raw_size),
                                     C.lib.ckpt_codec_name(fi.codec).decode(),
                                     int(fi.checksum)))
            return out

    def meta(self):
        """The checkpoint's key/value metadata."""
        out = {}
        k, v = ctypes.c_char_p(), ctypes.c_char_p()
        with self._use() as h:
            for j in range(C.lib.ckpt_reader_meta_count(h)):
                if C.lib.ckpt_reader_meta_at(h, j, ctypes.byref(k),
                                             ctypes.byref(v)) == 0:
                    out[k.value.decode("utf-8", "replace")] = v.value.decode(
                        "utf-8", "replace")
        return out

    def stats(self):
        s = C.Stats()
        with self._use() as h:
            C.lib.ckpt_reader_stats(h, ctypes.byref(s))
        return {name: int(getattr(s, name)) for name, _ in C.Stats._fields_}

    # ------------------------------------------------------------ reading
    def read_into(self, i, addr, offsets=None, sizes=None):
        """Reads the region [offsets, offsets + sizes) of tensor i (None:
        all of it) row-major to host memory at `addr` (device memory goes
        through load_batch)."""
        err = C.Error()
        if offsets is None:
            nbytes = self.raw_info(i)[3]
            if nbytes:
                with self._use() as h:
                    got = check(C.lib.ckpt_read(h, i, addr, 0, nbytes,
                                                ctypes.byref(err)), err)
                if got != nbytes:
                    raise EOFError("tensor %d: read %d of %d bytes"
                                   % (i, got, nbytes))
            return
        offs = C.int64_array(offsets) if offsets is not None else None
        size = C.int64_array(sizes) if sizes is not None else None
        with self._use() as h:
            check(C.lib.ckpt_read_region(h, i, offs, size, addr,
                                         ctypes.byref(err)), err)

    def read_batch(self, items):
        """Reads many tensors in one call, the work of all of them shared
        out among the reader's threads: items are (i, addr) for the whole
        of tensor i, or (i, addr, offsets, sizes) for a region of it."""
        self._batch(C.lib.ckpt_read_batch, items)

    def load_batch(self, items):
        """read_batch where an addr may also be CUDA device memory
        (ckpt_load_batch: one pipeline through pinned buffers for all the
        device items)."""
        self._batch(C.lib.ckpt_load_batch, items)

    def load_device_batch(self, items, devices):
        """load_batch of items whose addrs are CUDA memory on the torch
        `devices`, after torch's work on them: True, or False when this
        libckptfs cannot reach device memory (built without CUDA: EFAULT;
        nothing was read)."""
        import torch
        for d in devices:
            torch.cuda.synchronize(d)
        try:
            self.load_batch(items)
        except OSError as exc:
            if exc.errno != errno.EFAULT:
                raise
            return False
        return True

    def _batch(self, fn, items):
        if not items:
            return
        arr = (C.ReadItem * len(items))()
        keep = []                      # the region arrays, alive for the call
        for slot, item in zip(arr, items):
            slot.idx, slot.dst = item[0], item[1]
            if len(item) > 2 and item[2] is not None:
                keep.append(C.int64_array(item[2]))
                slot.offsets = keep[-1]
            if len(item) > 3 and item[3] is not None:
                keep.append(C.int64_array(item[3]))
                slot.sizes = keep[-1]
        err = C.Error()
        with self._use() as h:
            check(fn(h, arr, len(items), ctypes.byref(err)), err)

    def read_arrays(self, indices):
        """New NumPy arrays (of their dtypes' storage types) holding the
        tensors `indices`, read in one batch."""
        out = []
        for i in indices:
            _, code, shape, _ = self.raw_info(i)
            out.append(np.empty(shape, _dtypes.STORAGE[code]))
        self.read_batch([(i, a.ctypes.data) for i, a in zip(indices, out)
                         if a.nbytes])
        return out

    def read_array(self, i, offsets=None, sizes=None):
        """A new NumPy array (of the dtype's storage type) holding tensor
        i, or its region."""
        _, code, shape, _ = self.raw_info(i)
        arr = np.empty(tuple(sizes) if sizes is not None else shape,
                       _dtypes.STORAGE[code])
        if arr.nbytes:
            self.read_into(i, arr.ctypes.data, offsets, sizes)
        return arr


def convert(raw, code, framework, widen=True, what="tensor"):
    """The storage array `raw` of a tensor of dtype `code` as what
    `framework` ("np" or "pt") has for it."""
    if code == C.BYTES:
        return raw.tobytes()
    if framework == "np":
        return _dtypes.widen(raw, code) if (code in _dtypes.WIDENED
                                            and widen) else raw
    import torch
    tdt = _dtypes.torch_dtype(code, torch)
    if tdt is None:
        if code in _dtypes.WIDENED:
            return torch.from_numpy(_dtypes.c_order(_dtypes.widen(raw,
                                                                  code)))
        raise UnsupportedError("%s is %s, for which this torch (%s) has no "
                               "dtype; read it with framework='np'"
                               % (what, _dtypes.name(code), torch.__version__))
    raw = _dtypes.c_order(raw)
    if raw.dtype.kind == "u" and raw.dtype.itemsize > 1:
        signed = raw.view(raw.dtype.str.replace("u", "i"))
        return torch.from_numpy(signed).view(tdt)
    t = torch.from_numpy(raw)
    return t if t.dtype == tdt else t.view(tdt)


def _index(k):
    try:
        return operator.index(k)
    except TypeError:
        raise TypeError("get_slice takes integers, slices (a:b:c) and "
                        "Ellipsis, not %s" % type(k).__name__) from None


def plan_slice(shape, key):
    """(offsets, sizes, post) for indexing a tensor of `shape` with `key`:
    the region to read and the NumPy index to apply to it afterwards
    (None when the region is the answer: steps of 1, no integers)."""
    key = key if isinstance(key, tuple) else (key,)
    if sum(k is Ellipsis for k in key) > 1:
        raise IndexError("an index can only have one Ellipsis")
    if Ellipsis in key:
        at = key.index(Ellipsis)
        fill = len(shape) - (len(key) - 1)
        key = key[:at] + (slice(None),) * max(0, fill) + key[at + 1:]
    if len(key) > len(shape):
        raise IndexError("too many indices: %d for a tensor of %d dimensions"
                         % (len(key), len(shape)))
    key = key + (slice(None),) * (len(shape) - len(key))
    offsets, sizes, post, trivial = [], [], [], True
    for d, (k, n) in enumerate(zip(key, shape)):
        if isinstance(k, slice):
            r = range(*k.indices(n))
            if len(r) == 0:
                offsets.append(max(0, min(r.start, n)))
                sizes.append(0)
                post.append(slice(None))
                continue
            lo, hi = min(r[0], r[-1]), max(r[0], r[-1]) + 1
            offsets.append(lo)
            sizes.append(hi - lo)
            post.append(slice(None, None, r.step))
            trivial = trivial and r.step == 1
        else:
            i = _index(k)
            if not -n <= i < n:
                raise IndexError("index %d is out of bounds for dimension %d "
                                 "of size %d" % (i, d, n))
            offsets.append(i % n)
            sizes.append(1)
            post.append(0)
            trivial = False
    return offsets, sizes, None if trivial else tuple(post)


class TensorSlice(object):
    """A tensor of an open checkpoint, read lazily: indexing it with
    integers, slices and Ellipsis, as NumPy does, reads only that part (the
    frames it touches).  Slices with steps read the box spanning the
    elements, then take every step-th."""

    def __init__(self, ck, name):
        self._ck = ck
        self._i = ck._reader.index(name)
        self.name = name
        _, self._code, self._shape, _ = ck._reader.raw_info(self._i)

    def get_shape(self):
        return list(self._shape)

    def get_dtype(self):
        return _dtypes.name(self._code)

    @property
    def shape(self):
        return tuple(self._shape)

    @property
    def dtype(self):
        return self.get_dtype()

    def __len__(self):
        if not self._shape:
            raise TypeError("len() of a 0-d tensor")
        return self._shape[0]

    def __getitem__(self, key):
        if self._code == C.BYTES:
            raise TypeError("'%s' is a byte object; use get_tensor"
                            % self.name)
        offsets, sizes, post = plan_slice(self._shape, key)
        raw = self._ck._reader.read_array(self._i, offsets, sizes)
        if post is not None:
            raw = _dtypes.c_order(np.asarray(raw[post]))
        return convert(raw, self._code, self._ck.framework, self._ck.widen,
                       "tensor '%s'" % self.name)


class CheckpointFile(object):
    """An open checkpoint, in the manner of safetensors' safe_open: keys(),
    metadata(), info(name), get_tensor(name), get_slice(name)[...].  Use
    it as a context manager, or call close()."""

    def __init__(self, path, framework="np", threads=None, cache_bytes=None,
                 widen=True, follow_links=False):
        if framework not in ("np", "numpy", "pt", "torch"):
            raise ValueError("framework must be 'np' or 'pt', not %r"
                             % (framework,))
        self.framework = "pt" if framework in ("pt", "torch") else "np"
        if self.framework == "pt":
            import torch  # noqa: F401  (fail here, not at the first read)
        self.widen = widen
        self._reader = Reader(path, threads, cache_bytes,
                              follow_links=follow_links)
        self.path = path

    @property
    def format(self):
        """'ckptfs', 'dcp' or 'safetensors': what the path holds."""
        return self._reader.format

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        self._reader.close()

    def keys(self):
        """Names of every tensor and byte object, sorted."""
        return self._reader.names()

    def __contains__(self, name):
        return self._reader.has(name)

    def __iter__(self):
        return iter(self.keys())

    def __len__(self):
        return self._reader.count()

    def metadata(self):
        """The checkpoint's metadata: a dict of str to str."""
        return self._reader.meta()

    def info(self, name):
        """The TensorInfo of `name`: dtype, shape, chunks, codec, stored
        bytes."""
        return self._reader.info(self._reader.index(name))

    def frames(self, name, chunk=0):
        """The FrameInfos of one chunk of `name`."""
        return self._reader.frames(self._reader.index(name), chunk)

    def get_tensor(self, name):
        """All of `name`: an array or tensor, or bytes for a byte
        object."""
        i = self._reader.index(name)
        code = self._reader.raw_info(i)[1]
        return convert(self._reader.read_array(i), code, self.framework,
                       self.widen, "tensor '%s'" % name)

    def get_slice(self, name):
        """A TensorSlice of `name`, read only when indexed."""
        return TensorSlice(self, name)

    def stats(self):
        """The reader's counters since it was opened: frames_decoded,
        bytes_decoded, cache_hits, cache_misses, bytes_read,
        bytes_served."""
        return self._reader.stats()


def open_checkpoint(path, framework="np", *, threads=None, cache_bytes=None,
                    widen=True, follow_links=False):
    """Opens a checkpoint (a ckptfs checkpoint, a PyTorch DCP directory, a
    safetensors file or directory, a torch.save archive such as model.pt or
    pytorch_model.bin, or a folder of them) for lazy reads; see
    CheckpointFile."""
    return CheckpointFile(path, framework, threads, cache_bytes, widen,
                          follow_links)
