"""_diff.py - ckptfs.diff: what changed between two checkpoints, tensor by
tensor (the library's ckpt_diff, as `ckpt diff --json` prints it)."""
import ctypes

from . import _capi as C
from ._errors import check
from ._reader import Reader

_STATUS = ("equal", "changed", "only_a", "only_b")


def _entry(e):
    out = {"fqn": e.fqn.decode("utf-8", "surrogateescape"),
           "status": _STATUS[e.status], "frames": e.frames}
    if e.status in (0, 1):
        out.update(same_type=bool(e.same_type),
                   same_layout=bool(e.same_layout),
                   changed_frames=e.changed_frames,
                   changed_elems=e.changed_elems)
    if e.has_stats:
        out.update(max_abs=e.max_abs, rel_l2=e.rel_l2)
    return out


def diff(a, b, *, threads=None):
    """Compares checkpoints `a` and `b` (paths) and returns one dict per
    tensor, in FQN order: fqn, status ('equal', 'changed', 'only_a',
    'only_b'), frames and, for a tensor in both, same_type, same_layout,
    changed_frames, changed_elems, and for float tensors max_abs and
    rel_l2 (||b - a|| / ||a||).  Frames stored alike are compared by their
    checksums without decoding.  See docs/PYTHON.md."""
    ra = Reader(a, threads)
    try:
        rb = Reader(b, threads)
        try:
            out = []

            def on_entry(_arg, e):
                out.append(_entry(e.contents))

            fn = C.DIFF_FN(on_entry)
            err = C.Error()
            n = C.lib.ckpt_diff(ra._h, rb._h, fn, None, ctypes.byref(err))
            check(int(n) if n < 0 else 0, err)
            return out
        finally:
            rb.close()
    finally:
        ra.close()
