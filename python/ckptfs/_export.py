"""_export.py - ckptfs.export: any checkpoint the library reads written as
safetensors, a torch.save archive or a DCP folder, by ckpt_export (the C
library streams it; nothing of the state is held in Python)."""
import ctypes

from . import _capi as C
from ._errors import check
from ._pieces import c_strings

_FORMATS = {"safetensors": C.EXPORT_SAFETENSORS, "pt": C.EXPORT_PT,
            "dcp": C.EXPORT_DCP}


def export(src, out, format="safetensors", *, torch=2, flat=False,
           max_shard_size=None, tensors=None, prefix=None, convert=False,
           bytes_as_u8=False, sync=False, threads=0, follow_links=False):
    """Writes the checkpoint `src` (ckptfs, DCP, safetensors, ...) as `out`
    in `format`, which must not exist yet:

    - "safetensors": `out` ending in .safetensors is one file; otherwise
      a Hugging Face folder (model.safetensors, or shards of at most
      `max_shard_size` bytes with model.safetensors.index.json);
    - "pt": a torch.save archive for torch.load(out, weights_only=True),
      keys nested by the names' dots unless `flat`;
    - "dcp": a folder torch.distributed.checkpoint loads (torch=1: torch
      1.13's torch.distributed._shard.checkpoint).

    `tensors` (names) and `prefix` choose a part.  A dtype the target lacks
    raises ckptfs.Error naming the tensor unless `convert` widens it
    exactly.  Byte objects go to DCP as byte items; safetensors and pt
    leave them out (or, with `bytes_as_u8`, write them as uint8 tensors).
    Returns the list of (name, why) of what was left out."""
    if format not in _FORMATS:
        raise ValueError("format '%s': not one of %s"
                         % (format, ", ".join(sorted(_FORMATS))))
    o = C.ExportOpts()
    C.lib.ckpt_export_opts_init(ctypes.byref(o))
    o.format = _FORMATS[format]
    o.torch_major = int(torch)
    if max_shard_size is not None:
        o.max_shard_size = int(max_shard_size)
    o.flat, o.convert, o.bytes_as_u8, o.sync, o.follow_links = (
        int(bool(flat)), int(bool(convert)), int(bool(bytes_as_u8)),
        int(bool(sync)), int(bool(follow_links)))
    o.threads = int(threads)
    keep = []
    if tensors is not None:
        names = [tensors] if isinstance(tensors, str) else list(tensors)
        arr, raw = c_strings(names)
        keep += [arr, raw]
        o.tensors = arr
        o.ntensors = len(names)
    if prefix is not None:
        p = prefix.encode("utf-8")
        keep.append(p)
        o.prefix = p
    left_out = []

    def note(_arg, fqn, why):
        left_out.append((fqn.decode("utf-8", "replace"),
                         why.decode("utf-8", "replace")))

    o.note = C.NOTE_FN(note)
    err = C.Error()
    check(C.lib.ckpt_export(C.fsencode(src), C.fsencode(out),
                            ctypes.byref(o), ctypes.byref(err)), err)
    return left_out
