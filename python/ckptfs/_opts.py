"""_opts.py - the C option structs of a save, from the keyword arguments of
ckptfs.save, Saver.save_async and ckptfs.torch.StorageWriter."""
import ctypes

from . import _capi as C
from ._pieces import c_strings


def _codec_ids():
    out = {}
    for i in range(C.CODEC_AUTO, C.CODEC_LAST + 1):
        out[C.lib.ckpt_codec_name(i).decode()] = i
    return out


def parse_codec(spec):
    """(codec id, zstd level or None) of "auto", "raw", "zstd", "zstd:3",
    "bgf32", ..."""
    text = str(spec)
    name, _, level = text.partition(":")
    ids = _codec_ids()
    if name not in ids or (level and not level.lstrip("-").isdigit()):
        raise ValueError("codec '%s': not one of %s (zstd may take a level, "
                         "e.g. 'zstd:3')" % (text, ", ".join(sorted(ids))))
    return ids[name], int(level) if level else None


def write_opts(codec="auto", level=None, frame_size=None, threads=None,
               sync=True, base=None, full_every=None):
    """A ckpt_write_opts from the library's defaults and these values.
    base: a committed checkpoint (path) to save a delta against."""
    o = C.WriteOpts()
    C.lib.ckpt_write_opts_init(ctypes.byref(o))
    o.codec, spec_level = parse_codec(codec)
    if level is None:
        level = spec_level
    if level is not None:
        o.level = int(level)
    if frame_size is not None:
        o.frame_size = int(frame_size)
    if threads is not None:
        o.threads = int(threads)
    o.sync = 1 if sync else 0
    if base is not None:
        o.base = C.fsencode(base)
    if full_every is not None:
        o.full_every = int(full_every)
    return o


class SaveOpts(object):
    """A ckpt_save_opts (`c`, for byref) with its metadata arrays kept
    alive.  meta: a dict of str keys to values (str() of each)."""

    def __init__(self, write, meta):
        self.c = C.SaveOpts()
        C.lib.ckpt_save_opts_init(ctypes.byref(self.c))
        self.c.write = write
        keys = [str(k) for k in meta]
        values = [v if isinstance(v, str) else str(v) for v in meta.values()]
        self._keys, kk = c_strings(keys)
        self._values, vv = c_strings(values)
        self._raw = (kk, vv)
        self.c.meta_keys = self._keys
        self.c.meta_values = self._values
        self.c.nmeta = len(keys)
