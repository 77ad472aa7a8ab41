"""_api.py - ckptfs.save and ckptfs.load: whole (nested) state dicts to and
from a checkpoint, in one process."""
import ctypes
import pickle

import numpy as np

from . import _capi as C
from . import _dtypes
from ._errors import (MismatchError, MissingKeyError, UnsupportedError,
                      check)
from ._opts import SaveOpts, write_opts
from ._pieces import Pieces
from ._reader import Reader, convert
from ._tree import (TREE_KEY, Flat, fqn_of, is_tensor, is_torch_tensor,
                    leaves, parse_tree, replace)


def prepare(state, allow_pickle, meta, device_ok=False, **write):
    """(Pieces, SaveOpts) of a state: everything a save hands to the C
    library, checked and converted before anything is written."""
    flat = Flat(state, allow_pickle)
    pieces = Pieces(flat.items, device_ok)
    meta = dict(meta or {})
    if TREE_KEY in meta:
        raise ValueError("metadata key '%s' is reserved (ckptfs stores the "
                         "state's structure under it)" % TREE_KEY)
    meta[TREE_KEY] = flat.tree_json()
    return pieces, SaveOpts(write_opts(**write), meta)


def save(path, state, *, codec="auto", level=None, frame_size=None,
         meta=None, threads=None, allow_pickle=False, sync=True, base=None,
         full_every=None):
    """Saves `state` as the new checkpoint `path`, and returns once it is
    committed; with `base` (a committed checkpoint beside `path`), a delta
    save.  See docs/PYTHON.md."""
    pieces, opts = prepare(state, allow_pickle, meta, codec=codec,
                           level=level, frame_size=frame_size,
                           threads=threads, sync=sync, base=base,
                           full_every=full_every)
    err = C.Error()
    check(C.lib.ckpt_save_sync(C.fsencode(path), pieces.array, pieces.n,
                               ctypes.byref(opts.c), ctypes.byref(err)), err)


# ------------------------------------------------------------------ load

def load(path, into=None, *, framework=None, allow_pickle=False, widen=True,
         threads=None, device=None):
    """Loads a checkpoint: into the tensors of the state dict `into`, in
    place (returned), or as a new state dict; `device` (a new state only):
    its tensors as torch tensors on that device, e.g. "cuda".  See
    docs/PYTHON.md."""
    if framework not in (None, "np", "pt"):
        raise ValueError("framework must be None, 'np' or 'pt', not %r"
                         % (framework,))
    if device is not None:
        if into is not None:
            raise ValueError("device= is for a new state; a state to load "
                             "into keeps its tensors where they are")
        if framework == "np":
            raise ValueError("device=%r needs torch tensors, not "
                             "framework='np'" % (device,))
        import torch
        device = torch.device(device)
        framework = "pt"
    r = Reader(path, threads)
    try:
        # Only ckptfs.save writes a tree, and only into a ckptfs
        # checkpoint: one in a foreign file's metadata (a safetensors
        # __metadata__) is not ours, and ignored.
        tree = (parse_tree(r.meta().get(TREE_KEY), r.path)
                if r.format == "ckptfs" else None)
        loader = _Loader(r, tree, framework, allow_pickle, widen, device)
        if into is None:
            return loader.new()
        loader.into(into)
        return into
    finally:
        r.close()


def _node_at(root, path):
    node = root
    for k in path:
        node = node.child(k)
        if node is None:
            return None
    return node


class _Loader(object):
    def __init__(self, reader, tree, framework, allow_pickle, widen,
                 device=None):
        self.r, self.tree = reader, tree
        self.framework, self.allow_pickle, self.widen = (framework,
                                                         allow_pickle, widen)
        self.device = device   # a torch.device for a new state, or None
        self.fetched = {}      # fqn: its stored array, read in one batch
        self.placed = {}       # fqn: its tensor on self.device, loaded

    def _refuse_pickles(self, node):
        """Before anything is read: UnsupportedError if a pickled object
        is under the tree node (None: none) and the caller did not opt
        in."""
        name = node.pickle if node is not None else None
        if name is not None and not self.allow_pickle:
            raise UnsupportedError(
                "'%s' is a pickled object: loading it runs code stored in "
                "the checkpoint; pass allow_pickle=True if you trust %s"
                % (name, self.r.path))

    # -------------------------------------------------------- a new state
    def _leaf(self, item):
        """The value of an Item of the tree: unpickled only here, and only
        with allow_pickle."""
        i = self.r.index(item.fqn)
        placed = self.placed.pop(item.fqn, None)
        if placed is not None:
            return placed
        raw = self.fetched.pop(item.fqn, None)
        if raw is None:
            raw = self.r.read_array(i)
        code = self.r.raw_info(i)[1]
        if item.kind == "pickle":
            self._refuse_pickles(item)
            try:
                return pickle.loads(raw.tobytes())
            except Exception as exc:     # whatever the pickle's code raised
                raise UnsupportedError(
                    "pickled object '%s' of %s does not load: %s: %s"
                    % (item.fqn, self.r.path, type(exc).__name__,
                       exc)) from exc
        if item.kind == "bytes":
            data = raw.tobytes()
            return bytearray(data) if item.tag == "Y" else data
        if item.flavour == "sc":
            value = convert(raw, code, "np", self.widen)
            return value[()] if isinstance(value, np.ndarray) else value
        fw = self.framework or ("pt" if item.flavour == "pt" else "np")
        return self._placed(convert(raw, code, fw, self.widen,
                                    "tensor '%s'" % item.fqn))

    def _placed(self, value):
        """value moved to self.device when it is a tensor (one that
        _place could not load there directly)."""
        if self.device is not None and is_torch_tensor(value):
            return value.to(self.device)
        return value

    def _place(self, fqns):
        """Loads the tensors `fqns` whose stored dtype torch has straight
        into new tensors on self.device, in one ckpt_load_batch; returns
        the fqns left to read on the host."""
        import torch
        rest, batch = [], []
        for f in fqns:
            i = self.r.index(f)
            _, code, shape, _ = self.r.raw_info(i)
            tdt = (_dtypes.torch_dtype(code, torch) if code != C.BYTES
                   else None)
            if tdt is None:
                rest.append(f)
                continue
            t = torch.empty(tuple(shape), dtype=tdt, device=self.device)
            self.placed[f] = t
            if t.numel():
                batch.append((i, t.data_ptr()))
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)   # the allocations first
        self.r.load_batch(batch)
        return rest

    def new(self):
        if self.tree is not None:
            self._refuse_pickles(self.tree)
            fqns = [item.fqn for item in self.tree.items]
            if self.device is not None:
                fqns = self._place([it.fqn for it in self.tree.items
                                    if it.kind == "tensor"
                                    and it.flavour != "sc"])
                fqns += [it.fqn for it in self.tree.items
                         if it.kind != "tensor" or it.flavour == "sc"]
            arrays = self.r.read_arrays([self.r.index(f) for f in fqns])
            self.fetched = dict(zip(fqns, arrays))
            return self.tree.root.build(self._leaf)
        out = {}
        names = [self.r.raw_info(i)[0] for i in range(self.r.count())]
        todo = (self._place(names) if self.device is not None else names)
        arrays = self.r.read_arrays([self.r.index(f) for f in todo])
        for name, raw in zip(todo, arrays):
            code = self.r.raw_info(self.r.index(name))[1]
            out[name] = self._placed(convert(raw, code,
                                             self.framework or "np",
                                             self.widen,
                                             "tensor '%s'" % name))
        out.update(self.placed)
        self.placed = {}
        return {name: out[name] for name in names}

    # -------------------------------------------------------- into a state
    def into(self, into):
        """Checks every leaf of `into` against the checkpoint first (so a
        missing key or a mismatch changes nothing), then reads."""
        reads, later = [], []
        for path, dest in leaves(into):
            fqn = fqn_of(path)
            if is_tensor(dest) and not isinstance(dest, np.generic):
                reads.append(self._plan_read(fqn, dest))
                continue
            node = _node_at(self.tree.root, path) if self.tree else None
            if node is None and not (self.tree is None and self.r.has(fqn)):
                raise MissingKeyError("'%s' is not in the checkpoint %s"
                                      % (fqn, self.r.path))
            self._refuse_pickles(node)
            later.append((path, node, fqn))
        batch, dev, rest = [], [], []
        for i, code, dest in reads:
            addr = _host_addr(code, dest)
            if addr is None and _device_addr(code, dest):
                dev.append((i, code, dest))
            elif addr is None:
                rest.append((i, code, dest))
            elif addr:
                batch.append((i, addr))
        self.r.read_batch(batch)       # straight into place, all at once
        rest += self._load_device(dev)
        for i, code, dest in rest:
            self._fill(i, code, dest)
        repl = {}
        for path, node, fqn in later:
            if node is not None:
                repl[path] = node.build(self._leaf)
            else:
                i = self.r.index(fqn)
                repl[path] = convert(self.r.read_array(i),
                                     self.r.raw_info(i)[1],
                                     self.framework or "np", self.widen)
        replace(into, repl)

    def _plan_read(self, fqn, dest):
        i = self.r.index(fqn)
        _, code, shape, _ = self.r.raw_info(i)
        if code == C.BYTES:
            raise MismatchError("'%s' is a byte object in the checkpoint, "
                                "not a tensor" % fqn)
        if tuple(dest.shape) != tuple(shape):
            raise MismatchError("tensor '%s': shape %s in the checkpoint, %s "
                                "in the state to load into"
                                % (fqn, list(shape), list(dest.shape)))
        if not _dtype_fits(dest, code):
            raise MismatchError("tensor '%s': dtype %s in the checkpoint, %s "
                                "in the state to load into"
                                % (fqn, _dtypes.name(code), dest.dtype))
        return i, code, dest

    def _load_device(self, dev):
        """Loads (i, code, dest) items whose dest is a contiguous CUDA
        tensor of the stored dtype in one ckpt_load_batch; returns them
        all for _fill when this libckptfs cannot reach device memory
        (built without CUDA: EFAULT), else []."""
        if not dev or self.r.load_device_batch(
                [(i, dest.data_ptr()) for i, _, dest in dev],
                {dest.device for _, _, dest in dev}):
            return []
        return dev

    def _fill(self, i, code, dest):
        """Reads tensor i into `dest`, one that _host_addr cannot take
        as it is: converted (widened, another byte order, not contiguous)
        or on a device."""
        if is_torch_tensor(dest):
            return self._fill_torch(i, code, dest)
        raw = self.r.read_array(i)
        storage = _dtypes.STORAGE[code]
        if not (dest.dtype.kind == storage.kind
                and dest.dtype.itemsize == storage.itemsize):
            raw = _dtypes.widen(raw, code)
        np.copyto(dest, raw)

    def _fill_torch(self, i, code, t):
        import torch
        tdt = _dtypes.torch_dtype(code, torch)
        raw = self.r.read_array(i)
        if tdt is None and t.dtype == torch.uint8:
            src = torch.from_numpy(raw)          # fp8 bits, as they are
        else:
            src = convert(raw, code, "pt", True,
                          "tensor '%s'" % self.r.raw_info(i)[0])
        with torch.no_grad():
            t.copy_(src)


def _host_addr(code, dest):
    """The address in host memory that tensor data of dtype `code` loads
    to as it is stored, for `dest` (a NumPy array or a torch tensor); 0
    when dest holds nothing; None when it must be converted or uploaded
    (_Loader._fill)."""
    if is_torch_tensor(dest):
        import torch
        if dest.numel() == 0:
            return 0
        same = dest.dtype == _dtypes.torch_dtype(code, torch)
        if same and dest.is_contiguous() and dest.device.type == "cpu":
            return dest.data_ptr()
        return None
    if dest.nbytes == 0:
        return 0
    storage = _dtypes.STORAGE[code]
    if (dest.dtype.kind == storage.kind
            and dest.dtype.itemsize == storage.itemsize
            and dest.flags.c_contiguous and dest.flags.writeable
            and dest.dtype.byteorder != ">"):
        return dest.ctypes.data
    return None


def _device_addr(code, dest):
    """The device address a tensor of dtype `code` loads to as it is
    stored, for a CUDA tensor `dest` (contiguous, of that dtype, not
    empty); else None."""
    if not is_torch_tensor(dest) or dest.device.type != "cuda":
        return None
    import torch
    if (dest.numel() and dest.is_contiguous()
            and dest.dtype == _dtypes.torch_dtype(code, torch)):
        return dest.data_ptr()
    return None


def _dtype_fits(dest, code):
    """Whether a tensor of dtype `code` loads into `dest`: same dtype; for
    bf16, fp8 and complex32 where the framework lacks them, the dtype they
    widen to (float32, complex64) or an unsigned type of their size (raw
    bits)."""
    if is_torch_tensor(dest):
        import torch
        tdt = _dtypes.torch_dtype(code, torch)
        if tdt is not None:
            return dest.dtype == tdt
        return code in _dtypes.WIDENED and dest.dtype in (torch.float32,
                                                          torch.uint8)
    try:
        if _dtypes.from_numpy(dest.dtype, "") == code:
            return True
    except UnsupportedError:
        return False
    return code in _dtypes.WIDENED and (
        dest.dtype == _dtypes.WIDENED[code] or (
            dest.dtype.kind == "u" and
            dest.dtype.itemsize == _dtypes.STORAGE[code].itemsize))

