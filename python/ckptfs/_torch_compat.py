"""_torch_compat.py - makes PyTorch 1.13's distributed checkpoint importable
on Python 3.11 and later.

PyTorch 1.13 declares `tensor_properties: TensorProperties =
field(default=TensorProperties())` (sharded_tensor/metadata.py).  Python
3.11 rejects any unhashable default as "mutable default ... use
default_factory", so importing torch.distributed._shard.checkpoint fails.
allow_unhashable_dataclass_defaults() wraps dataclasses._get_field so that
such a default becomes a default_factory returning a copy of it, which is
what upstream later did.  Call it before importing torch's distributed
checkpoint; ckptfs.torch calls it only for torch 1.x on Python >= 3.11
(tests/helpers/torch_compat.py re-exports it for the tests).  It does
nothing where the installed torch is 2.x (read from its package metadata,
without importing it): torch 2.x needs no fix, and Python 3.14 refuses a
default_factory on the ClassVar fields that torch 2.x declares.
"""
import copy
import dataclasses
import importlib.metadata


def _torch_needs_fix():
    """False where the installed torch is known to be 2.x or later."""
    try:
        version = importlib.metadata.version("torch")
    except Exception:  # no metadata: assume the old torch this is for
        return True
    return version.startswith("1.")


def allow_unhashable_dataclass_defaults():
    if not _torch_needs_fix():
        return
    orig = dataclasses._get_field
    if getattr(orig, "_ckptfs_compat", False):
        return

    def get_field(cls, a_name, a_type, *args, **kwargs):
        default = cls.__dict__.get(a_name, dataclasses.MISSING)
        if isinstance(default, dataclasses.Field):
            value = default.default
        else:
            value = default
        if (value is not dataclasses.MISSING
                and type(value).__hash__ is None):
            def factory(v=value):
                return copy.deepcopy(v)
            if isinstance(default, dataclasses.Field):
                default.default = dataclasses.MISSING
                default.default_factory = factory
            else:
                setattr(cls, a_name,
                        dataclasses.field(default_factory=factory))
        return orig(cls, a_name, a_type, *args, **kwargs)

    get_field._ckptfs_compat = True
    dataclasses._get_field = get_field
