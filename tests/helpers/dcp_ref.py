#!/usr/bin/python3
"""dcp_ref.py - PyTorch and safetensors checkpoints for the import tests,
written and read back by the reference implementations (run with
/usr/bin/python3, which has torch 1.13 and NumPy).

    save1 DIR               one process saves a state dict with torch's
                            distributed checkpoint: f32, bf16, f16, i64, bool,
                            a scalar, a transposed (non-contiguous) tensor, an
                            empty tensor, BytesIOs (one empty, one of every
                            byte value and not at position 0) and a pickled
                            object
    save2 DIR               two processes (gloo, CPU) save sharded tensors:
                            rows split 4+4, an uneven 1-D split 3+2, columns
                            split 3+3 of a bf16 tensor, and a replicated tensor
    check DCP TREE          loads DCP with torch (load_state_dict into tensors
                            of the shapes and dtypes its metadata gives) and
                            compares every tensor with TREE/<fqn as path>
                            (bytes, the .npy view, the xattrs when TREE is a
                            mount) and every byte item with torch.load of the
                            file's bytes; prints 'ok ...' / 'FAIL ...' lines
    mcheck DCP TREE         the same for a mount of DCP (docs/MOUNT.md): an
                            io.BytesIO item's file holds the BytesIO's value
                            (equal to what torch loads, also through the
                            .npy view and user.ckpt.shape), every byte
                            item's torch.save archive is TREE/.pt/<path>.pt
    storedcheck DCP FQN TREE  byte item FQN of the mount TREE (and its .pt
                            view) holds the item's bytes as stored in DCP
    st1 FILE                a safetensors file of several dtypes, written here
                            per the published format (8-byte header length,
                            JSON header, data), with __metadata__
    stdir DIR               a sharded model: two files and
                            model.safetensors.index.json
    stcheck SRC TREE        parses SRC (file or directory) with this script's
                            own reader and compares every tensor with TREE
    bad KIND SRC OUT        a malformed copy of SRC in OUT: meta-truncated,
                            meta-global (a pickle calling os.system),
                            item-cut (an item's length shortened in
                            .metadata), item-past-eof (an offset past the
                            end of its file), bytesio-pkl (the BytesIO
                            item's data.pkl encodes to 'latin2'), st-header-long (header length
                            past the end of the file), st-overlap (two
                            tensors' data_offsets overlap)
"""
import io
import json
import os
import shutil
import struct
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_compat import allow_unhashable_dataclass_defaults  # noqa: E402

allow_unhashable_dataclass_defaults()

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
try:  # torch 2.x; its _shard.checkpoint alias loads metadata.py twice
    from torch.distributed.checkpoint import (  # noqa: E402
        FileSystemReader, FileSystemWriter)
    from torch.distributed.checkpoint.metadata import (  # noqa: E402
        BytesStorageMetadata)
    from torch.distributed.checkpoint import (  # noqa: E402
        load_state_dict, save_state_dict)
except ImportError:  # torch 1.13
    from torch.distributed._shard.checkpoint import (  # noqa: E402
        FileSystemReader, FileSystemWriter, load_state_dict, save_state_dict)
    from torch.distributed._shard.checkpoint.metadata import (  # noqa: E402
        BytesStorageMetadata)

# ---------------------------------------------------------------- saving


def seeked(f, pos):
    f.seek(pos)     # getvalue() is the whole buffer, wherever it stands
    return f


def state1():
    g = torch.Generator().manual_seed(7)
    base = torch.randn(6, 10, generator=g)
    return {
        "model.w": torch.randn(33, 17, generator=g),
        "model.b_bf16": torch.randn(1000, generator=g).to(torch.bfloat16),
        "model.h_f16": torch.randn(4, 5, 6, generator=g).to(torch.float16),
        "step_i64": torch.arange(-5, 15, dtype=torch.int64) * 1000003,
        "mask": torch.rand(37, generator=g) > 0.5,
        "scalar": torch.tensor(2.5, dtype=torch.float64),
        "transposed": base.t(),            # a (10, 6) view, strides (1, 10)
        "empty": torch.zeros(0, 3),
        "rng": io.BytesIO(b"\x00\x01rng-state\xff" * 5),
        "loader.empty": io.BytesIO(b""),
        "loader.all_bytes": seeked(io.BytesIO(bytes(range(256)) * 3), 5),
        "extra": {"epoch": 3, "name": "run-a"},
    }


def save1(out):
    sd = state1()
    assert not sd["transposed"].is_contiguous()
    save_state_dict(sd, FileSystemWriter(out), no_dist=True)


def rank_state(rank):
    from torch.distributed._shard.metadata import ShardMetadata
    from torch.distributed._shard.sharded_tensor import (
        Shard, init_from_local_shards)

    def sharded(full, offs, sizes):
        box = tuple(slice(o, o + s) for o, s in zip(offs, sizes))
        local = full[box].clone()
        md = ShardMetadata(list(offs), list(sizes), f"rank:{rank}/cpu")
        return init_from_local_shards([Shard(local, md)], list(full.shape))

    rows = torch.arange(8 * 6, dtype=torch.float32).reshape(8, 6) * 0.25
    vec = torch.arange(5, dtype=torch.int64) - 2
    cols = (torch.arange(4 * 6, dtype=torch.float32).reshape(4, 6) / 3
            ).to(torch.bfloat16)
    return {
        "layer.rows": sharded(rows, (4 * rank, 0), (4, 6)),
        "layer.vec": sharded(vec, (3 * rank,), (3 - rank,)),
        "layer.cols": sharded(cols, (0, 3 * rank), (4, 3)),
        "layer.replicated": torch.linspace(-1, 1, 9),
    }


def save_rank(out, rank, init):
    dist.init_process_group("gloo", init_method="file://" + init, rank=rank,
                            world_size=2)
    save_state_dict(rank_state(rank), FileSystemWriter(out))
    dist.barrier()
    dist.destroy_process_group()


def save2(out):
    init = os.path.join(os.path.dirname(os.path.abspath(out)),
                        ".gloo-init-%d" % os.getpid())
    if os.path.exists(init):
        os.unlink(init)
    procs = [subprocess.Popen([sys.executable, __file__, "save-rank", out,
                               str(r), init]) for r in range(2)]
    rcs = [p.wait(timeout=240) for p in procs]
    if os.path.exists(init):
        os.unlink(init)
    if any(rcs):
        sys.exit("save2: rank exit statuses %s" % rcs)

# ---------------------------------------------------------------- checking


def raw_bytes(t):
    """The row-major little-endian bytes of a tensor."""
    t = t.contiguous()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().tobytes()
    return t.numpy().tobytes()


DT_NAME = {torch.float32: "f32", torch.float64: "f64", torch.float16: "f16",
           torch.bfloat16: "bf16", torch.int64: "i64", torch.int32: "i32",
           torch.int16: "i16", torch.int8: "i8", torch.uint8: "u8",
           torch.bool: "bool"}


def torch_load(dcp):
    """What torch itself loads from DCP: tensors allocated from the
    metadata, byte items through its planner (torch.load of the bytes)."""
    md = FileSystemReader(dcp).read_metadata()
    sd = {}
    for fqn, m in md.state_dict_metadata.items():
        if isinstance(m, BytesStorageMetadata):
            sd[fqn] = None
        else:
            sd[fqn] = torch.full(tuple(m.size), 7, dtype=m.properties.dtype)
    load_state_dict(sd, FileSystemReader(dcp), no_dist=True)
    return sd


class Checker(object):
    def __init__(self):
        self.fails = 0

    def ok(self, msg):
        print("ok " + msg)

    def fail(self, msg):
        self.fails += 1
        print("FAIL " + msg)

    def expect(self, cond, msg):
        (self.ok if cond else self.fail)(msg)


def xattr(path, name):
    try:
        return os.getxattr(path, name).decode()
    except OSError:
        return None


def check_tensor_file(ck, tree, fqn, data, dtname, shape, npy_value):
    path = os.path.join(tree, *fqn.split("."))
    try:
        got = open(path, "rb").read()
    except OSError as e:
        ck.fail("%s: cannot read %s: %s" % (fqn, path, e))
        return
    ck.expect(got == data, "%s: %d bytes equal the reference" % (
        fqn, len(data)))
    if os.path.ismount(tree) or xattr(path, "user.ckpt.dtype") is not None:
        ck.expect(xattr(path, "user.ckpt.dtype") == dtname,
                  "%s: user.ckpt.dtype %s" % (fqn, dtname))
        want = ",".join(str(d) for d in shape)
        ck.expect(xattr(path, "user.ckpt.shape") == want,
                  "%s: user.ckpt.shape '%s'" % (fqn, want))
    npy = os.path.join(tree, ".npy", *fqn.split(".")) + ".npy"
    if npy_value is not None and os.path.exists(os.path.join(tree, ".npy")):
        arr = np.load(npy)
        same = arr.shape == npy_value.shape and np.array_equal(
            arr, npy_value, equal_nan=arr.dtype.kind == "f")
        ck.expect(same, "%s: numpy.load of the .npy view equals torch's "
                  "values (%s %s)" % (fqn, arr.dtype, arr.shape))


def same_object(got, v):
    if isinstance(v, io.BytesIO):
        return isinstance(got, io.BytesIO) and got.getvalue() == v.getvalue()
    return got == v


def check_bytesio_value(ck, tree, fqn, v):
    """A mount shows an io.BytesIO item as its value."""
    path = os.path.join(tree, *fqn.split("."))
    want = v.getvalue()
    ck.expect(open(path, "rb").read() == want, "%s: the file holds the "
              "BytesIO's %d bytes, as torch loads them" % (fqn, len(want)))
    ck.expect(os.stat(path).st_size == len(want), "%s: its size is %d" % (
        fqn, len(want)))
    ck.expect(xattr(path, "user.ckpt.shape") == str(len(want)),
              "%s: user.ckpt.shape %d" % (fqn, len(want)))
    npy = os.path.join(tree, ".npy", *fqn.split(".")) + ".npy"
    arr = np.load(npy)
    ck.expect(arr.dtype == np.uint8 and arr.tobytes() == want,
              "%s: numpy.load of the .npy view gives the value" % fqn)


def check(dcp, tree, mount=False):
    ck = Checker()
    sd = torch_load(dcp)
    for fqn, v in sorted(sd.items()):
        if isinstance(v, torch.Tensor):
            npv = (v.float() if v.dtype == torch.bfloat16 else v).numpy()
            check_tensor_file(ck, tree, fqn, raw_bytes(v), DT_NAME[v.dtype],
                              tuple(v.shape), npv)
            continue
        path = os.path.join(tree, *fqn.split("."))
        if mount:
            archive = os.path.join(tree, ".pt", *fqn.split(".")) + ".pt"
            ck.expect(same_object(torch.load(archive, weights_only=False),
                                  v), "%s: torch.load "
                      "of .pt/%s.pt equals what torch loads (%s)" % (
                          fqn, fqn.replace(".", "/"), type(v).__name__))
            if isinstance(v, io.BytesIO):
                check_bytesio_value(ck, tree, fqn, v)
                continue
        got = torch.load(io.BytesIO(open(path, "rb").read()),
                         weights_only=False)
        ck.expect(same_object(got, v), "%s: torch.load of the byte object "
                  "equals what torch loads (%s)" % (fqn, type(v).__name__))
    print("checked %d entries" % len(sd))
    sys.exit(1 if ck.fails else 0)

# ---------------------------------------------------------------- safetensors


ST_DT = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "BF16": "<u2",
         "I64": "<i8", "I32": "<i4", "I16": "<i2", "I8": "|i1",
         "U8": "|u1", "U16": "<u2", "U32": "<u4", "U64": "<u8",
         "BOOL": "|b1"}
CK_DT = {"F64": "f64", "F32": "f32", "F16": "f16", "BF16": "bf16",
         "I64": "i64", "I32": "i32", "I16": "i16", "I8": "i8", "U8": "u8",
         "U16": "u16", "U32": "u32", "U64": "u64", "BOOL": "bool"}


def st_write(path, tensors, meta=None):
    """tensors: list of (name, ST dtype, ndarray of that dtype)."""
    header, blobs, off = {}, [], 0
    if meta is not None:
        header["__metadata__"] = meta
    for name, dt, arr in tensors:
        b = np.ascontiguousarray(arr).tobytes()
        header[name] = {"dtype": dt, "shape": list(arr.shape),
                        "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def st_tensors(seed, prefix):
    rng = np.random.default_rng(seed)
    return [
        (prefix + "weight", "F32", rng.standard_normal((16, 24)).astype("<f4")),
        (prefix + "bias", "F16", rng.standard_normal(24).astype("<f2")),
        (prefix + "emb", "BF16", rng.integers(0, 65535, (7, 9)).astype("<u2")),
        (prefix + "ids", "I64", rng.integers(-10**12, 10**12, 11).astype("<i8")),
        (prefix + "i8", "I8", rng.integers(-128, 127, (3, 3)).astype("|i1")),
        (prefix + "u8", "U8", rng.integers(0, 255, 5).astype("|u1")),
        (prefix + "flags", "BOOL", rng.random(6) > 0.5),
        (prefix + "scale", "F64", np.array(0.125, dtype="<f8")),
        (prefix + "none", "F32", np.zeros((0, 4), dtype="<f4")),
    ]


def st1(path):
    st_write(path, st_tensors(1, "model.layer."),
             {"format": "pt", "note": "written by dcp_ref.py"})


def stdir(d):
    os.makedirs(d, exist_ok=True)
    files = {"model-00001-of-00002.safetensors": st_tensors(2, "model.a."),
             "model-00002-of-00002.safetensors": st_tensors(3, "model.b.")}
    wm = {}
    for fname, ts in files.items():
        st_write(os.path.join(d, fname), ts, {"format": "pt"})
        wm.update({name: fname for name, _, _ in ts})
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": 12345}, "weight_map": wm}, f)


def st_read(path):
    """This script's own reading of a safetensors file."""
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    body = data[8 + n:]
    out = []
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, en = e["data_offsets"]
        arr = np.frombuffer(body[b:en], dtype=ST_DT[e["dtype"]]).reshape(
            e["shape"])
        out.append((name, e["dtype"], arr))
    return out


def stcheck(src, tree):
    ck = Checker()
    files = [src] if os.path.isfile(src) else sorted(
        os.path.join(src, f) for f in os.listdir(src)
        if f.endswith(".safetensors"))
    n = 0
    for path in files:
        for name, dt, arr in st_read(path):
            npv = arr.view("<u2").astype("<u4") << 16 if dt == "BF16" else arr
            if dt == "BF16":
                npv = npv.view("<f4")
            check_tensor_file(ck, tree, name, arr.tobytes(), CK_DT[dt],
                              arr.shape, npv)
            n += 1
    print("checked %d tensors" % n)
    sys.exit(1 if ck.fails else 0)

# ---------------------------------------------------------------- malformed


def first_tensor_item(md):
    for k, v in md.storage_data.items():
        if k.offset is not None:
            return k
    raise SystemExit("no tensor item")


def bad(kind, src, out):
    if os.path.isdir(src):
        shutil.copytree(src, out)
    else:
        shutil.copyfile(src, out)
    meta = os.path.join(out, ".metadata")
    if kind == "meta-truncated":
        data = open(meta, "rb").read()
        open(meta, "wb").write(data[:len(data) // 2])
    elif kind == "meta-global":
        marker = os.path.join(os.path.dirname(os.path.abspath(out)),
                              "PWNED")
        # GLOBAL os.system, called with ('touch MARKER',)
        evil = (b"\x80\x02cos\nsystem\nq\x00X" +
                struct.pack("<I", len("touch " + marker)) +
                ("touch " + marker).encode() + b"\x85R.")
        open(meta, "wb").write(evil)
    elif kind in ("item-cut", "item-past-eof"):
        md = FileSystemReader(out).read_metadata()
        k = first_tensor_item(md)
        info = md.storage_data[k]
        if kind == "item-cut":
            info.length -= 100
        else:
            size = os.path.getsize(os.path.join(out, info.relative_path))
            info.offset = size + 64
        import pickle
        with open(meta, "wb") as f:
            pickle.dump(md, f)
        print(k.fqn)
    elif kind == "bytesio-pkl":
        # rng's archive: its data.pkl encodes the bytes as 'latin2', which
        # the mount must not take for the BytesIO's value
        md = FileSystemReader(out).read_metadata()
        info = [v for k, v in md.storage_data.items() if k.fqn == "rng"][0]
        path = os.path.join(out, info.relative_path)
        data = bytearray(open(path, "rb").read())
        item = data[info.offset:info.offset + info.length]
        at = item.find(b"latin1")
        if at < 0:
            sys.exit("bytesio-pkl: no 'latin1' in rng's archive")
        data[info.offset + at:info.offset + at + 6] = b"latin2"
        open(path, "wb").write(bytes(data))
    elif kind == "st-header-long":
        data = bytearray(open(out, "rb").read())
        data[:8] = struct.pack("<Q", len(data) + 1000)
        open(out, "wb").write(bytes(data))
    elif kind == "st-overlap":
        a = np.arange(8, dtype="<f4")
        h = json.dumps({"x": {"dtype": "F32", "shape": [4],
                              "data_offsets": [0, 16]},
                        "y": {"dtype": "F32", "shape": [4],
                              "data_offsets": [8, 24]}}).encode()
        open(out, "wb").write(struct.pack("<Q", len(h)) + h + a.tobytes())
    else:
        sys.exit("unknown kind " + kind)


def stored_check(src, fqn, tree):
    """Byte item fqn of the mount TREE, and its .pt view, hold the item's
    bytes as stored in SRC."""
    md = FileSystemReader(src).read_metadata()
    info = [v for k, v in md.storage_data.items() if k.fqn == fqn][0]
    with open(os.path.join(src, info.relative_path), "rb") as f:
        f.seek(info.offset)
        stored = f.read(info.length)
    path = os.path.join(tree, *fqn.split("."))
    pt = os.path.join(tree, ".pt", *fqn.split(".")) + ".pt"
    ck = Checker()
    ck.expect(open(path, "rb").read() == stored, "%s: the file holds the %d "
              "bytes stored" % (fqn, len(stored)))
    ck.expect(open(pt, "rb").read() == stored, "%s: .pt view too" % fqn)
    sys.exit(1 if ck.fails else 0)


def main(argv):
    cmd = argv[1] if len(argv) > 1 else ""
    if cmd == "save1":
        save1(argv[2])
    elif cmd == "save2":
        save2(argv[2])
    elif cmd == "save-rank":
        save_rank(argv[2], int(argv[3]), argv[4])
    elif cmd == "check":
        check(argv[2], argv[3])
    elif cmd == "mcheck":
        check(argv[2], argv[3], mount=True)
    elif cmd == "storedcheck":
        stored_check(argv[2], argv[3], argv[4])
    elif cmd == "st1":
        st1(argv[2])
    elif cmd == "stdir":
        stdir(argv[2])
    elif cmd == "stcheck":
        stcheck(argv[2], argv[3])
    elif cmd == "bad":
        bad(argv[2], argv[3], argv[4])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
