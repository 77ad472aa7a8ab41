"""ckptfs.torch - ckptfs as a storage backend of PyTorch's distributed
checkpoint (DCP): StorageWriter and StorageReader.

    import torch.distributed.checkpoint as dcp           # PyTorch 2.x
    dcp.save(state_dict, storage_writer=ckptfs.torch.StorageWriter(path))
    dcp.load(state_dict, storage_reader=ckptfs.torch.StorageReader(path))

    # PyTorch 1.13: torch.distributed._shard.checkpoint
    save_state_dict(sd, storage_writer=ckptfs.torch.StorageWriter(path))
    load_state_dict(sd, storage_reader=ckptfs.torch.StorageReader(path))

Each rank writes its items through its own libckptfs writer (its shard
data/rank<R>.shard); the coordinator's finish() commits with the planner,
which refuses overlapping pieces, holes and conflicting dtypes or shapes
as every ckptfs save does.  read_metadata() describes the checkpoint (any
checkpoint the C reader opens: ckptfs, DCP, safetensors) as DCP Metadata,
so DCP's own load planner reshards N ranks' pieces onto M ranks, and
read_data() reads each item's region with region reads.  One class serves
both the 1.13 interface (init) and the 2.x one (set_up_storage_writer /
set_up_storage_reader, reset, validate_checkpoint_id, storage_meta).
docs/PYTHON.md says what is verified on which version.
"""
import ctypes
import errno
import io
import json
import os
import sys
import uuid

import torch
import torch.distributed as dist

from . import _capi as C
from . import _dtypes
from ._errors import MismatchError, UnsupportedError, check, error_class
from ._opts import write_opts
from ._pieces import Pieces, byte_tensor, host_tensor
from ._reader import Reader, convert


def _import_dcp():
    """The DCP modules of this torch: torch.distributed.checkpoint (2.x) or
    torch.distributed._shard.checkpoint (1.13)."""
    try:
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint import metadata, planner, storage
    except ImportError:
        if sys.version_info >= (3, 11) and torch.__version__.startswith("1."):
            from ._torch_compat import allow_unhashable_dataclass_defaults
            allow_unhashable_dataclass_defaults()
        import torch.distributed._shard.checkpoint as dcp
        from torch.distributed._shard.checkpoint import (metadata, planner,
                                                         storage)
    props = getattr(metadata, "TensorProperties", None)
    if props is None:
        from torch.distributed._shard.sharded_tensor.metadata import (
            TensorProperties as props)
    return dcp, metadata, planner, storage, props


_dcp, _md, _plan, _storage, _TensorProperties = _import_dcp()
DCP_MODULE = _dcp.__name__
"""Which DCP this backend serves: 'torch.distributed.checkpoint' or
'torch.distributed._shard.checkpoint'."""

PLANNER_DATA_KEY = "dcp.planner_data"


def _is_local_path(checkpoint_id):
    try:
        text = os.fspath(checkpoint_id)
    except TypeError:
        return False
    text = text.decode() if isinstance(text, bytes) else text
    return bool(text) and "://" not in text


def _rank_of(rank):
    if rank is not None:
        return int(rank)
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank()
    return 0


def _planner_data_json(datas):
    """DCP's planner data (2.x: the flattening mappings, fqn -> key path)
    of all ranks' plans, or of the global Metadata, merged, as JSON; None
    when absent or not made of plain keys."""
    merged = {}
    for d in datas:
        if not isinstance(d, dict):
            return None
        merged.update(d)
    if not merged:
        return None
    try:
        return json.dumps({k: list(v) for k, v in merged.items()},
                          separators=(",", ":"))
    except (TypeError, ValueError):
        return None


def _refuse_unstorable_dtypes(plan):
    """UnsupportedError naming every tensor of this rank's plan whose dtype
    has no ckptfs equivalent (e.g. a complex freqs_cis buffer where ckptfs
    lacks complex): raised from prepare_local_plan, so DCP aborts the save
    on every rank before any rank has created the checkpoint's files."""
    bad = []
    for item in plan.items:
        if item.type == _plan.WriteItemType.BYTE_IO or item.tensor_data is None:
            continue
        dtype = item.tensor_data.properties.dtype
        try:
            _dtypes.from_torch(dtype, item.index.fqn)
        except UnsupportedError:
            bad.append("'%s' (%s)" % (item.index.fqn, dtype))
    if bad:
        bad = sorted(set(bad))
        raise UnsupportedError(
            "tensor %s: torch dtype has no ckptfs equivalent (ckptfs stores "
            "%s); nothing was written: convert the tensor (e.g. "
            "torch.view_as_real for a complex one) or leave it out of the "
            "state" % (", ".join(bad), ", ".join(
                sorted(set(_dtypes.TORCH_NAMES.values())))))


def _fail(code, message):
    return error_class(code)(code, message)


OVERWRITE_HOW = (
    "ckptfs does not overwrite a checkpoint: save into a new path (e.g. "
    "one per step) and remove the old checkpoint once the new one has "
    "committed (`rm -r`, or `ckpt gc` for saves that never committed); "
    "docs/PYTHON.md, \"Overwriting\"")


def _refuse_occupied(path):
    """Refuses (before anything is written) a target that already holds a
    checkpoint: a committed ckptfs checkpoint (immutable; no overwrite,
    OVERWRITE_HOW), an unfinished save, or another format's checkpoint (a
    FileSystemWriter's .metadata and .distcp files, safetensors, ...),
    which a ckptfs save beside it would leave ambiguous."""
    p = C.fsencode(path)
    state = C.lib.ckpt_dir_probe(p)
    if state == C.DIR_COMMITTED:
        raise _fail(errno.EEXIST, "%s is already a committed checkpoint "
                    "(it has index.db); committed checkpoints are "
                    "immutable: %s" % (path, OVERWRITE_HOW))
    if state == C.DIR_PENDING:
        raise _fail(errno.EBUSY, "%s holds an unfinished save (data/ or "
                    ".pending/ without index.db): remove it first (ckpt "
                    "gc removes saves that never committed)" % path)
    fmt = C.lib.ckpt_format_probe(p, None, 0)
    if fmt not in (C.FORMAT_NONE, C.FORMAT_CKPTFS):
        what = {C.FORMAT_DCP: "a PyTorch DCP checkpoint (.metadata, "
                "FileSystemWriter)", C.FORMAT_SAFETENSORS:
                "a safetensors checkpoint"}.get(fmt, "another format's "
                                                 "checkpoint")
        raise _fail(errno.EEXIST, "%s already holds %s: ckptfs does not "
                    "write beside or over it; save into another path (`ckpt "
                    "import` converts it into a ckptfs checkpoint)"
                    % (path, what))


class StorageWriter(_dcp.StorageWriter):
    """Writes a DCP save as a ckptfs checkpoint at `path` (a directory
    that must not be a checkpoint yet, of ckptfs or another format).
    codec, level, frame_size, threads and sync are those of ckptfs.save;
    meta is checkpoint metadata (str -> str) set by the coordinator; base
    (and full_every) make it a delta save against that committed
    checkpoint, as in ckptfs.save.  overwrite=True (FileSystemWriter's) is
    refused: see OVERWRITE_HOW."""

    def __init__(self, path=None, codec="auto", *, level=None,
                 frame_size=None, threads=None, sync=True, meta=None,
                 overwrite=False, base=None, full_every=None):
        super().__init__()
        if overwrite:
            raise ValueError("ckptfs.torch.StorageWriter(overwrite=True): "
                             + OVERWRITE_HOW)
        self.path = os.fspath(path) if path is not None else None
        self._write = dict(codec=codec, level=level, frame_size=frame_size,
                           threads=threads, sync=sync,
                           base=None if base is None else os.fspath(base),
                           full_every=full_every)
        write_opts(**self._write)          # bad options fail here
        self.meta = dict(meta or {})
        self.save_id = None
        self._reset_state()

    def _reset_state(self):
        self.is_coordinator = False
        self.rank = 0
        self._planner_data = None

    def __getstate__(self):
        # for DCP's process-based async save: options travel, not state
        state = dict(self.__dict__)
        state["_planner_data"] = None
        return state

    @property
    def checkpoint_id(self):
        return self.path

    # ---------------------------------------------------------- 2.x
    def reset(self, checkpoint_id=None):
        """A new save begins (into checkpoint_id when given)."""
        if checkpoint_id is not None:
            self.path = os.fspath(checkpoint_id)
        self._reset_state()
        self.save_id = str(uuid.uuid4())

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id):
        """True for a local file-system path."""
        return _is_local_path(checkpoint_id)

    def storage_meta(self):
        cls = getattr(_md, "StorageMeta", None)
        if cls is None:
            return None
        return cls(checkpoint_id=self.path, save_id=self.save_id)

    def set_up_storage_writer(self, is_coordinator, *args, **kwargs):
        if kwargs.get("use_collectives", True) is False:
            raise ValueError(
                "ckptfs.torch.StorageWriter needs use_collectives=True: the "
                "coordinator commits every rank's pieces at once, after all "
                "have written")
        self._set_up(is_coordinator, kwargs.get("rank"))

    # ---------------------------------------------------------- 1.13
    def init(self, is_coordinator):
        self._set_up(is_coordinator, None)

    # ---------------------------------------------------------- both
    def _set_up(self, is_coordinator, rank):
        if self.path is None:
            raise ValueError("ckptfs.torch.StorageWriter: no checkpoint path "
                             "(pass it, or checkpoint_id to dcp.save)")
        self._reset_state()
        self.is_coordinator = bool(is_coordinator)
        self.rank = _rank_of(rank)
        _refuse_occupied(self.path)

    def prepare_local_plan(self, plan):
        """Refuses, before anything is written, a tensor of a dtype
        ckptfs cannot store."""
        _refuse_unstorable_dtypes(plan)
        return plan

    def prepare_global_plan(self, plans):
        self._planner_data = _planner_data_json(p.planner_data
                                                for p in plans)
        return plans

    def write_data(self, plan, planner):
        """Writes this rank's items through its own writer rank<R>."""
        name = "rank%d" % self.rank
        w = ctypes.c_void_p()
        err = C.Error()
        opts = write_opts(**self._write)
        check(C.lib.ckpt_writer_open(ctypes.byref(w),
                                     C.fsencode(self.path), name.encode(),
                                     ctypes.byref(opts), ctypes.byref(err)),
              err)
        try:
            results = self._write_items(w, plan, planner, name)
        except BaseException:
            C.lib.ckpt_writer_abort(w)
            raise
        check(C.lib.ckpt_writer_close(w, ctypes.byref(err)), err)
        fut = torch.futures.Future()
        fut.set_result(results)
        return fut

    def _write_items(self, w, plan, planner, name):
        err = C.Error()
        if self.is_coordinator:
            for k, v in self.meta.items():
                check(C.lib.ckpt_writer_set_meta(w, str(k).encode(),
                                                 str(v).encode(),
                                                 ctypes.byref(err)), err)
        results = []
        for item in plan.items:
            data = planner.resolve_data(item)
            fqn = item.index.fqn
            if item.type == _plan.WriteItemType.BYTE_IO:
                h = byte_tensor(data.getbuffer())  # no copy
                pieces = Pieces.one(fqn, h)
            else:
                td = item.tensor_data
                what = "tensor '%s'" % fqn
                h = host_tensor(data, what)
                if td.properties.dtype != data.dtype:
                    raise TypeError("%s: the planner declared %s but gave a "
                                    "%s tensor" % (what, td.properties.dtype,
                                                   data.dtype))
                if tuple(h.shape) != tuple(td.chunk.sizes):
                    raise ValueError("%s: the planner declared a chunk of "
                                     "%s but gave a tensor of %s"
                                     % (what, list(td.chunk.sizes),
                                        list(h.shape)))
                pieces = Pieces.one(fqn, h, offsets=td.chunk.offsets,
                                    shape=td.size)
            check(C.lib.ckpt_writer_put(w, pieces.array, ctypes.byref(err)),
                  err)
            results.append(_storage.WriteResult(index=item.index,
                                                size_in_bytes=h.nbytes,
                                                storage_data=name))
        return results

    def finish(self, metadata, results):
        """The coordinator commits: the planner checks every rank's pieces
        and index.db appears atomically, or nothing is committed."""
        extra = self._write_planner_data(metadata)
        o = C.CommitOpts()
        C.lib.ckpt_commit_opts_init(ctypes.byref(o))
        o.expect_writers = len(results) + extra
        o.world_size = len(results)
        o.sync = 1 if self._write["sync"] else 0
        err = C.Error()
        check(C.lib.ckpt_commit(C.fsencode(self.path), ctypes.byref(o),
                                ctypes.byref(err)), err)


    META_WRITER = "dcp-metadata"

    def _write_planner_data(self, metadata):
        """Records DCP's planner data (the flattened name -> nested keys
        mapping) as checkpoint metadata PLANNER_DATA_KEY, taken from the
        Metadata DCP hands finish() (with plan caching, later saves plan
        nothing anew, so only that Metadata holds it), else from the
        plans; through a writer of its own (META_WRITER, no pieces), since
        the ranks' writers are closed by now.  Returns the number of
        writers it added (0 or 1)."""
        pdata = _planner_data_json([getattr(metadata, "planner_data", None)])
        if pdata is None:
            pdata = self._planner_data
        if pdata is None:
            return 0
        w = ctypes.c_void_p()
        err = C.Error()
        opts = write_opts(**self._write)
        check(C.lib.ckpt_writer_open(ctypes.byref(w), C.fsencode(self.path),
                                     self.META_WRITER.encode(),
                                     ctypes.byref(opts), ctypes.byref(err)),
              err)
        rc = C.lib.ckpt_writer_set_meta(w, PLANNER_DATA_KEY.encode(),
                                        pdata.encode(), ctypes.byref(err))
        if rc < 0:
            C.lib.ckpt_writer_abort(w)
            check(rc, err)
        check(C.lib.ckpt_writer_close(w, ctypes.byref(err)), err)
        return 1


class StorageReader(_dcp.StorageReader):
    """Reads a checkpoint that libckptfs opens (ckptfs, a PyTorch DCP
    directory, safetensors, torch.save archives) for DCP's load.  threads and cache_bytes are
    the reader's (decoder threads, decoded-frame cache)."""

    def __init__(self, path=None, *, threads=None, cache_bytes=None):
        super().__init__()
        self.path = os.fspath(path) if path is not None else None
        self._opts = dict(threads=threads, cache_bytes=cache_bytes)
        self._reader = None
        self.load_id = None

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_reader"] = None
        return state

    @property
    def checkpoint_id(self):
        return self.path

    def _open(self):
        if self._reader is None:
            if self.path is None:
                raise ValueError("ckptfs.torch.StorageReader: no checkpoint "
                                 "path (pass it, or checkpoint_id to "
                                 "dcp.load)")
            self._reader = Reader(self.path, **self._opts)
        return self._reader

    def close(self):
        """Closes the checkpoint (read_data does it once done)."""
        if self._reader is not None:
            self._reader.close()
            self._reader = None

    # ---------------------------------------------------------- 2.x
    def reset(self, checkpoint_id=None):
        self.close()
        if checkpoint_id is not None:
            self.path = os.fspath(checkpoint_id)
        self.load_id = str(uuid.uuid4())

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id):
        """True for a path libckptfs reads (a ckptfs checkpoint, a DCP
        directory, safetensors)."""
        if not _is_local_path(checkpoint_id):
            return False
        return C.lib.ckpt_format_probe(C.fsencode(checkpoint_id), None,
                                       0) != C.FORMAT_NONE

    def set_up_storage_reader(self, metadata, is_coordinator, *args,
                              **kwargs):
        self._open()

    # ---------------------------------------------------------- 1.13
    def init(self, metadata, is_coordinator):
        self._open()

    # ---------------------------------------------------------- both
    def read_metadata(self):
        """DCP Metadata of the checkpoint: every tensor with its dtype,
        global size and chunks, every byte object as bytes."""
        r = self._open()
        sd = {}
        for i in range(r.count()):
            name, code, shape, _ = r.raw_info(i)
            if code == C.BYTES:
                sd[name] = _md.BytesStorageMetadata()
                continue
            tdt = _dtypes.torch_dtype(code, torch)
            if tdt is None:
                raise TypeError("tensor '%s' is %s, for which torch %s has no "
                                "dtype" % (name, _dtypes.name(code),
                                           torch.__version__))
            chunks = [_md.ChunkStorageMetadata(offsets=torch.Size(c.offsets),
                                               sizes=torch.Size(c.sizes))
                      for c in r.info(i).chunks]
            sd[name] = _md.TensorStorageMetadata(
                properties=_TensorProperties(dtype=tdt),
                size=torch.Size(shape), chunks=chunks)
        md = _md.Metadata(state_dict_metadata=sd)
        pdata = r.meta().get(PLANNER_DATA_KEY)
        if pdata is not None:
            md.planner_data = {k: tuple(v) for k, v in json.loads(
                pdata).items()}
        if hasattr(md, "storage_meta") and hasattr(_md, "StorageMeta"):
            md.storage_meta = _md.StorageMeta(checkpoint_id=self.path,
                                              load_id=self.load_id)
        return md

    def prepare_local_plan(self, plan):
        return plan

    def prepare_global_plan(self, plans):
        return plans

    def read_data(self, plan, planner):
        """Reads every item of this rank's plan: byte items into BytesIO;
        tensor items in batches of about BATCH_BYTES, each region read
        straight into its destination tensor where that is contiguous
        host memory of the same dtype (one ckpt_read_batch for all of
        those, the decoding of all shared among the reader's threads),
        converted or uploaded otherwise."""
        r = self._open()
        try:
            _refuse_bytes_for_tensors(plan, planner, r.path)
            group, nbytes = [], 0
            for req in plan.items:
                i = r.index(req.storage_index.fqn)
                if req.type == _plan.LoadItemType.BYTE_IO:
                    data = r.read_array(i).tobytes()
                    planner.load_bytes(req, io.BytesIO(data))
                    continue
                target = planner.resolve_tensor(req).detach()
                group.append((req, i, target))
                nbytes += target.numel() * target.element_size()
                if nbytes >= self.BATCH_BYTES:
                    self._read_group(r, group, planner)
                    group, nbytes = [], 0
            self._read_group(r, group, planner)
        finally:
            self.close()
        fut = torch.futures.Future()
        fut.set_result(None)
        return fut

    # Destinations resolved (and held) at once: a planner may hand out
    # temporary tensors that it keeps until they are committed.
    BATCH_BYTES = 1 << 30

    @classmethod
    def _read_group(cls, r, group, planner):
        batch, dev, rest = [], [], []
        for req, i, target in group:
            offsets, sizes = cls._region(req, target)
            if target.numel() == 0:
                continue
            code = r.raw_info(i)[1]
            item = (i, target.data_ptr(), offsets, sizes)
            if not (target.is_contiguous()
                    and target.dtype == _dtypes.torch_dtype(code, torch)):
                rest.append((i, req, target, offsets, sizes, code))
            elif target.device.type == "cpu":
                batch.append(item)
            elif target.device.type == "cuda":
                dev.append((item, (i, req, target, offsets, sizes, code)))
            else:
                rest.append((i, req, target, offsets, sizes, code))
        r.read_batch(batch)
        rest += cls._read_device(r, dev)
        for item in rest:
            cls._read_other(r, *item)
        for req, _, target in group:
            planner.commit_tensor(req, target)

    @staticmethod
    def _read_device(r, dev):
        """Regions into contiguous CUDA tensors of the stored dtype, all
        in one ckpt_load_batch (pinned bounce buffers shared by all);
        returns them for _read_other when this libckptfs cannot reach
        device memory (built without CUDA: EFAULT), else []."""
        if not dev or r.load_device_batch(
                [item for item, _ in dev],
                {other[2].device for _, other in dev}):
            return []
        return [other for _, other in dev]

    @staticmethod
    def _region(req, target):
        """(offsets, sizes) in the stored tensor of a read item, checked
        against the planner's destination."""
        base = req.storage_index.offset
        offsets = [int(s) + (int(base[d]) if base is not None else 0)
                   for d, s in enumerate(req.storage_offsets)]
        sizes = [int(n) for n in req.lengths]
        if list(target.shape) != sizes:
            raise ValueError("tensor '%s': the planner's destination is %s, "
                             "the item %s" % (req.storage_index.fqn,
                                              list(target.shape), sizes))
        return offsets, sizes

    @staticmethod
    def _read_other(r, i, req, target, offsets, sizes, code):
        """A region into a destination that neither read_batch nor
        _read_device takes as it is (another dtype, not contiguous, or
        device memory this libckptfs cannot reach): read on the host,
        converted (or widened), copied in by torch."""
        src = convert(r.read_array(i, offsets, sizes), code, "pt", True,
                      "tensor '%s'" % req.storage_index.fqn)
        with torch.no_grad():
            target.copy_(src)


def _refuse_bytes_for_tensors(plan, planner, path):
    """Before anything is read: a byte item of the plan (which DCP's
    planner torch.loads, i.e. unpickles) whose destination in the state to
    load into is a tensor is refused -- where the caller expects a tensor,
    a checkpoint has no business running code.  The state is the
    planner's state_dict (DefaultLoadPlanner's, flattened in 2.x); a
    planner without one is not checked."""
    state = getattr(planner, "state_dict", None)
    if not isinstance(state, dict):
        return
    for req in plan.items:
        if req.type != _plan.LoadItemType.BYTE_IO:
            continue
        fqn = req.dest_index.fqn
        if isinstance(state.get(fqn), torch.Tensor):
            raise MismatchError(
                "'%s' is a tensor in the state to load into but a byte "
                "object in %s, which DCP would torch.load (unpickle: run "
                "code stored in the checkpoint); refused" % (fqn, path))


__all__ = ["StorageWriter", "StorageReader", "DCP_MODULE"]
