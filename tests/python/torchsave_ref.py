"""torchsave_ref.py - torch.save archives for the tests of ckptfs's
torch.save reader (tests/compat/test_torchsave.py, tests/fs/mount_torchsave.sh),
written by the torch at hand, and hand-made hostile ones; and the
reference bytes of each tensor as torch.load gives them.

    python3 torchsave_ref.py write DIR        model.pt, a folder with
                                              pytorch_model.bin, an HF
                                              sharded folder, expand.pt
    python3 torchsave_ref.py mcheck DIR MNT   every tensor file of the
                                              mount of DIR/model.pt equals
                                              torch.load's bytes
"""
import io
import json
import os
import struct
import sys
import zipfile

import torch

FLAT_SEP = "."


def dtypes():
    """Every dtype of this torch that ckptfs reads."""
    names = ["float64", "float32", "float16", "bfloat16", "int64", "int32",
             "int16", "int8", "uint8", "bool", "uint16", "uint32", "uint64",
             "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz",
             "float8_e5m2fnuz", "float8_e8m0fnu", "complex32", "complex64",
             "complex128"]
    return [getattr(torch, n) for n in names
            if hasattr(torch, n) and _saves(getattr(torch, n))]


def _saves(dt):
    """torch.save of this dtype works here (torch 1.13 refuses complex32)."""
    try:
        torch.save(torch.zeros(1, dtype=dt), io.BytesIO())
        return True
    except (KeyError, RuntimeError, TypeError):
        return False


def sample(dt, shape, gen):
    if dt == torch.bool:
        return torch.rand(shape, generator=gen) > 0.5
    if dt.is_complex:
        return torch.complex(torch.randn(shape, generator=gen, dtype=torch.float64),
                             torch.randn(shape, generator=gen, dtype=torch.float64)).to(dt)
    if "e8m0" in str(dt):     # powers of two only
        return torch.full(shape, 2.0).pow(
            torch.randint(-8, 8, shape, generator=gen)).to(dt)
    if dt.is_floating_point:
        return torch.randn(shape, generator=gen).to(dt)
    if dt in (torch.uint8,) or str(dt).startswith("torch.uint"):
        return torch.randint(0, 250, shape, generator=gen).to(dt)
    return torch.randint(-100, 100, shape, generator=gen).to(dt)


def state(seed=0):
    """A state dict of every dtype, nested dicts and lists, tied weights,
    views with storage offsets, a transposed weight, a 0-d tensor, an
    expanded (stride 0) tensor, and non-tensor values."""
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(6, 5, generator=g)
    sd = {
        "model": {"layers": [{"w": w, "b": torch.randn(5, generator=g)},
                             {"w": w}],          # tied: one storage
                  "wt": w.t(),                   # transposed view
                  "rows": w[2:5],                # storage offset
                  "cols": w[1:4, 1:3],           # offset and gaps
                  "step": torch.tensor(7),       # 0-d
                  "ex": torch.arange(3.0)[1:2].expand(4, 3)},   # stride 0
        "dt": {str(dt).split(".")[1]: sample(dt, (3, 4), g)
               for dt in dtypes()},
        "epoch": 3, "lr": 0.5, "name": "run-1", "none": None,
    }
    return sd


def flat(obj, prefix="", out=None):
    """{fqn: tensor} as ckptfs names them (dotted, list indices)."""
    out = {} if out is None else out
    if isinstance(obj, dict):
        for k, v in obj.items():
            flat(v, prefix + FLAT_SEP + str(k) if prefix else str(k), out)
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            flat(v, prefix + FLAT_SEP + str(i) if prefix else str(i), out)
    elif isinstance(obj, torch.Tensor):
        out[prefix] = obj
    return out


def raw(t):
    """The tensor's row-major bytes."""
    return t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def write(d):
    os.makedirs(d, exist_ok=True)
    sd = state()
    torch.save(sd, os.path.join(d, "model.pt"))
    os.makedirs(os.path.join(d, "folder"), exist_ok=True)
    torch.save(flat(sd), os.path.join(d, "folder", "pytorch_model.bin"))
    hf = os.path.join(d, "hf")
    os.makedirs(hf, exist_ok=True)
    items = sorted(flat(sd).items())
    halves = [dict(items[: len(items) // 2]), dict(items[len(items) // 2:])]
    wm = {}
    for i, part in enumerate(halves):
        name = "pytorch_model-%05d-of-00002.bin" % (i + 1)
        torch.save(part, os.path.join(hf, name))
        wm.update({k: name for k in part})
    with open(os.path.join(hf, "pytorch_model.bin.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": 0}, "weight_map": wm}, f)
    torch.save({"e": torch.zeros(1).expand(2 ** 30)},
               os.path.join(d, "expand.pt"))


def dcp_save(p, sd):
    """DCP's own save of sd into p (torch 2.x, or 1.13's _shard)."""
    try:
        import torch.distributed.checkpoint as dcp
        if not hasattr(dcp, "save"):
            raise ImportError
        dcp.save(sd, checkpoint_id=p)
    except ImportError:
        here = os.path.dirname(os.path.abspath(__file__))
        sys.path.insert(0, os.path.join(here, "..", "helpers"))
        import torch_compat
        torch_compat.allow_unhashable_dataclass_defaults()
        import torch.distributed._shard.checkpoint as dcp
        dcp.save_state_dict(sd, dcp.FileSystemWriter(p), no_dist=True)


def dcp_put_item(p, fqn, data, size=None):
    """Replaces the item of tensor `fqn` (one chunk) of DCP checkpoint p by
    `data` in a file of its own, and its size by `size` when given: the
    .metadata unpickled by Python, changed, pickled back."""
    import pickle
    with open(os.path.join(p, ".metadata"), "rb") as f:
        meta = pickle.load(f)
    if size is not None:
        md = meta.state_dict_metadata[fqn]
        md.size = torch.Size(size)
        md.chunks[0].sizes = torch.Size(size)
    for k, v in meta.storage_data.items():
        if k.fqn == fqn:
            v.relative_path = "item-" + fqn
            with open(os.path.join(p, v.relative_path), "wb") as f:
                f.write(data)
            v.offset, v.length = 0, len(data)
    with open(os.path.join(p, ".metadata"), "wb") as f:
        pickle.dump(meta, f)


def dcp_stride0(p, n=2 ** 30):
    """A DCP checkpoint whose one item is torch.save of a stride-0 view of
    n elements (issue 22 item 5: DCP itself materializes such a view, so
    the item is put in by hand)."""
    dcp_save(p, {"e": torch.zeros(16)})
    buf = io.BytesIO()
    torch.save(torch.zeros(1).expand(n), buf)
    dcp_put_item(p, "e", buf.getvalue(), [n])


# ------------------------------------------------------------ hand-made

def _s(text):
    b = text.encode()
    return b"X" + struct.pack("<I", len(b)) + b


def _i(v):
    if 0 <= v < 2 ** 31:
        return b"J" + struct.pack("<i", v)
    n = (v.bit_length() + 8) // 8
    return b"\x8a" + bytes([n]) + v.to_bytes(n, "little", signed=True)


def _tup(vals):
    return b"(" + b"".join(_i(v) for v in vals) + b"t"


def rebuild(key, numel, off, size, stride, stype="FloatStorage"):
    """Pickle opcodes of _rebuild_tensor_v2 over storage `key`, as
    torch.save writes them."""
    return (b"ctorch._utils\n_rebuild_tensor_v2\n(" +
            b"(" + _s("storage") + b"ctorch\n" + stype.encode() + b"\n" +
            _s(key) + _s("cpu") + _i(numel) + b"tQ" +
            _i(off) + _tup(size) + _tup(stride) + b"\x89" +
            b"ccollections\nOrderedDict\n)R" + b"tR")


def pickle_dict(pairs):
    """data.pkl of a dict of name -> opcodes of its value."""
    return (b"\x80\x02}(" + b"".join(_s(k) + v for k, v in pairs) +
            b"u.")


def archive(path, pkl, storages, extra=()):
    """A zip as torch.save writes it: data.pkl, data/KEY, version."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        z.writestr("archive/data.pkl", pkl)
        for k, b in storages.items():
            z.writestr("archive/data/" + k, b)
        z.writestr("archive/version", "3\n")
        for name, b in extra:
            z.writestr(name, b)


def mcheck(d, mnt):
    ref = flat(torch.load(os.path.join(d, "model.pt")))
    bad = 0
    for k, t in sorted(ref.items()):
        p = os.path.join(mnt, *k.split("."))
        with open(p, "rb") as f:
            got = f.read()
        if got != raw(t):
            print("MISMATCH", k)
            bad += 1
    print("checked", len(ref), "tensors")
    return 1 if bad else 0


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "write":
        write(sys.argv[2])
    elif cmd == "mcheck":
        sys.exit(mcheck(sys.argv[2], sys.argv[3]))
    else:
        sys.exit("unknown command " + cmd)
