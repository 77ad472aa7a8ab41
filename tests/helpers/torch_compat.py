"""torch_compat.py - makes PyTorch 1.13's distributed checkpoint importable
on Python 3.11 (imported by the helpers and benchmarks that use torch).

The fix itself lives in the ckptfs package (python/ckptfs/_torch_compat.py,
which documents it), and ckptfs.torch applies it; this module loads that
file by path, so that helpers use it without the package (or libckptfs)
being importable.  Call allow_unhashable_dataclass_defaults() before
importing torch.distributed._shard.checkpoint.
"""
import importlib.util
import os

_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                     "python", "ckptfs", "_torch_compat.py")
_spec = importlib.util.spec_from_file_location("_ckptfs_torch_compat", _PATH)
_mod = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_mod)

allow_unhashable_dataclass_defaults = _mod.allow_unhashable_dataclass_defaults
