"""torch2util.py - what the compatibility tests of tests/compat share
(besides tests/python/util.py): torch imported the way each torch version
needs, the build tree's `ckpt` found from the ckptfs package in use, and
tensors' bytes.

    need_torch()    torch with its distributed checkpoint importable, or
                    exit 77 (skipped); the torch 1.13 import fix only for
                    torch 1.x (it breaks newer torch on Python 3.14)
    raw(t)          a tensor's row-major bytes
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "python"))
import ckptfs  # noqa: E402

# BUILD/python/ckptfs/__init__.py: the build whose `ckpt` the tests run
os.environ.setdefault("CKPT_BUILDDIR", os.path.abspath(os.path.join(
    os.path.dirname(ckptfs.__file__), "..", "..")))
import util  # noqa: E402


def need_torch():
    try:
        import torch
    except ImportError:
        util.skip_all("no torch here")
    if torch.__version__.startswith("1."):
        from ckptfs._torch_compat import allow_unhashable_dataclass_defaults
        allow_unhashable_dataclass_defaults()
    import torch.distributed  # noqa: F401
    return torch


def raw(t):
    import torch
    t = t.detach().contiguous().reshape(-1)
    return t.view(torch.uint8).numpy().tobytes() if t.numel() else b""
