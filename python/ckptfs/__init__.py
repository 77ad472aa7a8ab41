"""ckptfs - checkpoints for training jobs, from Python.

A pure-Python package over libckptfs (through ctypes): the C library does
the work (frames encoded on its threads, checksums, the planner, atomic
commits, region reads), and tensor memory is handed to it by address.

    import ckptfs
    ckptfs.save("ck/step-100", {"model": model.state_dict(),
                                "optim": optimizer.state_dict()})
    state = ckptfs.load("ck/step-100")                  # a new state dict
    ckptfs.load("ck/step-100", into=state)               # or in place
    with ckptfs.open("ck/step-100", framework="pt") as ck:
        w = ck.get_slice("model.layers.0.weight")[0:128, 5:9]
    saver = ckptfs.Saver()
    h = saver.save_async("ck/step-200", state)          # returns once staged
    h.wait()
    ckptfs.export("ck/step-100", "hf-model", format="safetensors")

The DCP storage backend is ckptfs.torch (StorageWriter, StorageReader).
docs/PYTHON.md is the reference.
"""
from . import _capi
from ._api import load, save
from ._diff import diff
from ._async import SaveHandle, Saver
from ._export import export
from ._errors import (CheckpointError, Error, MismatchError, MissingKeyError,
                      TreeError, UnsupportedError)
from ._reader import (CheckpointFile, ChunkInfo, FrameInfo, TensorInfo,
                      TensorSlice, open_checkpoint as open)
from ._tree import TREE_MAX_DEPTH, TREE_MAX_NODES, Raw

__version__ = _capi.lib.ckpt_version().decode()
LIBRARY = _capi.LIBRARY_PATH
"""The path of the libckptfs that was loaded."""

__all__ = [
    "save", "load", "open", "diff", "export", "Saver", "SaveHandle", "Raw",
    "CheckpointFile", "TensorSlice", "TensorInfo", "ChunkInfo", "FrameInfo",
    "Error", "CheckpointError", "UnsupportedError", "MismatchError",
    "MissingKeyError", "TreeError", "TREE_MAX_DEPTH", "TREE_MAX_NODES",
    "probe", "LIBRARY",
]


def probe(path):
    """What `path` is: 'ckptfs' (a committed checkpoint), 'pending' (a
    save that has not committed), 'dcp', 'safetensors', or None."""
    p = _capi.fsencode(path)
    state = _capi.lib.ckpt_dir_probe(p)
    if state == _capi.DIR_PENDING:
        return "pending"
    fmt = _capi.lib.ckpt_format_probe(p, None, 0)
    return {_capi.FORMAT_CKPTFS: "ckptfs", _capi.FORMAT_DCP: "dcp",
            _capi.FORMAT_SAFETENSORS: "safetensors",
            _capi.FORMAT_TORCH: "torch"}.get(fmt)
