"""test_export.py - ckptfs.export (ckpt_export) read back by the real
libraries: torch.load(weights_only=True) of the torch.save archive,
FileSystemReader of the DCP folder, and safetensors' safe_open and
load_file (where the safetensors package exists; elsewhere the file is
read by the published layout: 8-byte header size, JSON, data).

Sources: a ckptfs checkpoint holding every dtype (random bits, so that
every bit pattern must come back), a DCP checkpoint torch itself
writes, and a torch.save archive torch writes (tests/python/
torchsave_ref.py: nested dicts and lists, a tied and a transposed
weight, every dtype this torch saves; the reference is torch.load of
the archive).  The reference of every tensor is the bytes the test generated
(or torch's own tensor), compared bit-exact.  Runs under torch 2.x (every
dtype; exports for torch 2) and torch 1.13 (exports for torch 1: float8
and uint16-64 refused by name, or widened with convert).  Also: sharded
safetensors with its index, nested and flat pt keys, parts (tensors,
prefix), byte objects, and refusals (OUT existing, bad SRC) that leave
nothing behind.

Run by the compat harness in the torch 2.x roots, and on the host by
tests/python/test_export.py (torch 1.13).  Exit 0 pass, 1 fail, 77 skip.
"""
import io
import json
import os
import struct
import sys

import numpy as np

import util

try:
    import torch
except ImportError:
    util.skip_all("no torch here")
if int(torch.__version__.split(".")[0]) < 2:
    # torch 1.13's DCP on Python >= 3.11 (util.optional_torch applies the
    # shim whatever the version, which torch 2.x's dataclasses refuse).
    sys.path.insert(0, util.HELPERS)
    from torch_compat import allow_unhashable_dataclass_defaults
    allow_unhashable_dataclass_defaults()
import ckptfs  # noqa: E402

try:
    import safetensors
    import safetensors.torch
except ImportError:
    safetensors = None

T2 = int(torch.__version__.split(".")[0]) >= 2
TORCH_MAJOR = 2 if T2 else 1
if T2:
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import FileSystemReader
else:
    import torch.distributed._shard.checkpoint as dcp
    from torch.distributed._shard.checkpoint import FileSystemReader

RNG = np.random.default_rng(24)

# ckptfs dtype -> (NumPy dtype of its bytes, torch dtype name)
DTYPES = {
    "f64": ("<f8", "float64"), "f32": ("<f4", "float32"),
    "f16": ("<f2", "float16"), "bf16": ("<u2", "bfloat16"),
    "f8e4m3": ("|u1", "float8_e4m3fn"), "f8e5m2": ("|u1", "float8_e5m2"),
    "i64": ("<i8", "int64"), "i32": ("<i4", "int32"),
    "i16": ("<i2", "int16"), "i8": ("|i1", "int8"),
    "u64": ("<u8", "uint64"), "u32": ("<u4", "uint32"),
    "u16": ("<u2", "uint16"), "u8": ("|u1", "uint8"),
    "bool": ("|b1", "bool"),
    "c64": ("<c8", "complex64"), "c128": ("<c16", "complex128"),
    "c32": ("<u4", "complex32"), "f8e4m3fnuz": ("|u1", "float8_e4m3fnuz"),
    "f8e5m2fnuz": ("|u1", "float8_e5m2fnuz"),
    "f8e8m0": ("|u1", "float8_e8m0fnu"),
}
NOT_IN_TORCH1 = ("f8e4m3", "f8e5m2", "u64", "u32", "u16", "c32",
                 "f8e4m3fnuz", "f8e5m2fnuz", "f8e8m0")
NOT_IN_SAFETENSORS = ("c128", "c32", "f8e4m3fnuz", "f8e5m2fnuz")
RAW = ("bf16", "f8e4m3", "f8e5m2", "c32", "f8e4m3fnuz", "f8e5m2fnuz",
       "f8e8m0")
SHAPES = [(3, 5), (7,), (), (2, 0, 3), (2, 3, 4)]


def random_bits(npdt, shape):
    dt = np.dtype(npdt)
    if dt.kind == "b":
        return RNG.integers(0, 2, size=shape).astype(dt)
    raw = RNG.integers(0, 256, size=int(np.prod(shape)) * dt.itemsize,
                       dtype=np.uint8)
    if dt.kind == "c":      # finite parts: NumPy may canonicalise NaNs
        raw = RNG.standard_normal(int(np.prod(shape)) * 2).astype(
            "<f8" if dt.itemsize == 16 else "<f4").view(np.uint8)
    return raw.view(dt).reshape(shape)


def make_state(dtypes):
    """{fqn: (ckptfs value, reference bytes, dtype)} nested by dots."""
    flat = {}
    for i, name in enumerate(dtypes):
        npdt, _ = DTYPES[name]
        shape = SHAPES[i % len(SHAPES)]
        arr = random_bits(npdt, shape)
        value = ckptfs.Raw(arr, name) if name in RAW else arr
        flat["layers.%d.%s" % (i % 3, name)] = (value, arr.tobytes(), name,
                                                shape)
    return flat


def nest(flat):
    out = {}
    for fqn, (value, _, _, _) in flat.items():
        node = out
        parts = fqn.split(".")
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        node[parts[-1]] = value
    return out


def tensor_bytes(t):
    t = t.detach().contiguous().reshape(-1).clone()
    if t.dtype == torch.bool:
        return t.to(torch.uint8).numpy().tobytes()
    if T2:
        return bytes(t.untyped_storage())
    if t.is_complex():
        t = torch.view_as_real(t).reshape(-1)
    return t.view(torch.uint8).numpy().tobytes()


def parse_safetensors(path):
    """(metadata, {name: (dtype, shape, bytes)}) by the published layout."""
    with open(path, "rb") as f:
        blob = f.read()
    n = struct.unpack("<Q", blob[:8])[0]
    head = json.loads(blob[8:8 + n])
    meta = head.pop("__metadata__", None)
    out = {}
    ends = []
    for name, e in head.items():
        a, b = e["data_offsets"]
        out[name] = (e["dtype"], tuple(e["shape"]), blob[8 + n + a:8 + n + b])
        ends.append((a, b))
    ends.sort()
    pos = 0
    for a, b in ends:              # contiguous, no gap, as safetensors checks
        assert a == pos, "gap or overlap at %d" % a
        pos = b
    assert 8 + n + pos == len(blob), "trailing bytes"
    assert n % 8 == 0, "header not padded to 8"
    return meta, out


ST_NAMES = {"f64": "F64", "f32": "F32", "f16": "F16", "bf16": "BF16",
            "f8e4m3": "F8_E4M3", "f8e5m2": "F8_E5M2", "i64": "I64",
            "i32": "I32", "i16": "I16", "i8": "I8", "u64": "U64",
            "u32": "U32", "u16": "U16", "u8": "U8", "bool": "BOOL",
            "c64": "C64", "f8e8m0": "F8_E8M0"}


def reads_st_dtype(st_name):
    """The installed safetensors reads a file holding a tensor of dtype
    ST_NAME (0.4.5, Debian trixie's, knows neither C64 nor F8_E8M0 and
    rejects the whole header: InvalidHeaderDeserialization).  Asked by
    loading a one-byte-per-element file the test writes by the format."""
    import tempfile
    head = json.dumps({"t": {"dtype": st_name, "shape": [0],
                             "data_offsets": [0, 0]}}).encode()
    head += b" " * (-len(head) % 8)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "probe.safetensors")
        with open(path, "wb") as f:
            f.write(struct.pack("<Q", len(head)) + head)
        try:
            safetensors.torch.load_file(path)
            return True
        except Exception as e:      # SafetensorError, no importable class
            if "InvalidHeaderDeserialization" in str(e):
                return False
            raise


def st_exportable(name):
    """ckptfs dtype NAME has a safetensors dtype, and the installed
    safetensors package (where there is one) reads it."""
    return name not in NOT_IN_SAFETENSORS and \
        (safetensors is None or reads_st_dtype(ST_NAMES[name]))


def in_this_torch(name):
    """torch has the dtype of ckptfs dtype NAME (torch 2.6 has no
    float8_e8m0fnu, torch 1.13 none of NOT_IN_TORCH1 that it can save)."""
    if not T2 and name in NOT_IN_TORCH1:
        return False
    return getattr(torch, DTYPES[name][1], None) is not None


class Export(util.TempDir):
    def setUp(self):
        super().setUp()
        self.names = [d for d in DTYPES if in_this_torch(d)]
        self.flat = make_state(self.names)
        self.ck = self.path("ck")
        ckptfs.save(self.ck, nest(self.flat) | {"extra": b"\x00raw\xffbytes"},
                    meta={"step": 1200})

    def st_names(self):
        """The tensors safetensors has a dtype for (and the installed
        safetensors package, where there is one, reads)."""
        return [f for f, v in self.flat.items() if st_exportable(v[2])]

    def check_tensor(self, fqn, t):
        _, ref, name, shape = self.flat[fqn]
        self.assertEqual(str(t.dtype), "torch." + DTYPES[name][1], fqn)
        self.assertEqual(tuple(t.shape), shape, fqn)
        self.assertEqual(tensor_bytes(t), ref, fqn)

    # ---------------------------------------------------------------- pt

    def test_pt_nested_every_dtype(self):
        out = self.path("model.pt")
        left = ckptfs.export(self.ck, out, "pt", torch=TORCH_MAJOR)
        self.assertEqual([n for n, _ in left], ["extra"])
        sd = torch.load(out, weights_only=True)
        seen = 0
        for fqn in self.flat:
            node = sd
            for p in fqn.split("."):
                node = node[p]
            self.check_tensor(fqn, node)
            seen += 1
        self.assertEqual(seen, len(self.names))
        self.assertEqual(sorted(sd), ["layers"])

    def test_pt_flat_bytes_as_u8(self):
        out = self.path("flat.pt")
        self.assertEqual(ckptfs.export(self.ck, out, "pt", torch=TORCH_MAJOR,
                                       flat=True, bytes_as_u8=True), [])
        sd = torch.load(out, weights_only=True)
        self.assertEqual(sorted(sd), sorted(list(self.flat) + ["extra"]))
        for fqn in self.flat:
            self.check_tensor(fqn, sd[fqn])
        self.assertEqual(sd["extra"].dtype, torch.uint8)
        self.assertEqual(sd["extra"].numpy().tobytes(), b"\x00raw\xffbytes")

    def test_pt_part(self):
        out = self.path("part.pt")
        ckptfs.export(self.ck, out, "pt", torch=TORCH_MAJOR, flat=True,
                      prefix="layers.1.")
        sd = torch.load(out, weights_only=True)
        want = [f for f in self.flat if f.startswith("layers.1.")]
        self.assertEqual(sorted(sd), sorted(want))
        pick = sorted(self.flat)[:2]
        out2 = self.path("two.pt")
        ckptfs.export(self.ck, out2, "pt", torch=TORCH_MAJOR, flat=True,
                      tensors=pick)
        self.assertEqual(sorted(torch.load(out2, weights_only=True)), pick)

    # ---------------------------------------------------------------- dcp

    def dcp_load(self, folder, sd):
        if T2:
            dcp.load(sd, storage_reader=FileSystemReader(folder))
        else:
            dcp.load_state_dict(sd, FileSystemReader(folder), no_dist=True)

    def test_dcp_every_dtype(self):
        out = self.path("dcp")
        self.assertEqual(ckptfs.export(self.ck, out, "dcp",
                                       torch=TORCH_MAJOR), [])
        sd = {}
        for fqn, (_, _, name, shape) in self.flat.items():
            sd[fqn] = torch.zeros(shape, dtype=getattr(torch, DTYPES[name][1]))
        sd["extra"] = io.BytesIO()
        self.dcp_load(out, sd)
        for fqn in self.flat:
            self.check_tensor(fqn, sd[fqn])
        extra = sd["extra"]
        if isinstance(extra, io.BytesIO):
            extra = extra.getvalue()
        self.assertEqual(extra, b"\x00raw\xffbytes")
        if T2:   # the dcp_to_torch_save, now on an export
            from torch.distributed.checkpoint.format_utils import \
                dcp_to_torch_save
            pt = self.path("from_dcp.pt")
            dcp_to_torch_save(out, pt)
            got = torch.load(pt, weights_only=False)
            for fqn in self.flat:
                self.check_tensor(fqn, got[fqn])

    # ------------------------------------------------------------ safetensors

    def check_st_file(self, path, names):
        meta, parsed = parse_safetensors(path)
        self.assertEqual(meta.get("format"), "pt")
        self.assertEqual(meta.get("step"), "1200")
        for fqn in names:
            _, ref, name, shape = self.flat[fqn]
            self.assertEqual(parsed[fqn], (ST_NAMES[name], shape, ref), fqn)
        if safetensors is not None:
            with safetensors.safe_open(path, framework="pt") as f:
                self.assertEqual(f.metadata()["step"], "1200")
                self.assertEqual(sorted(f.keys()), sorted(names))
                for fqn in names:
                    self.check_tensor(fqn, f.get_tensor(fqn))
            loaded = safetensors.torch.load_file(path)
            for fqn in names:
                self.check_tensor(fqn, loaded[fqn])
        return parsed

    def test_safetensors_file_every_dtype(self):
        out = self.path("m.safetensors")
        names = self.st_names()
        left = ckptfs.export(self.ck, out, tensors=names + ["extra"])
        self.assertEqual([n for n, _ in left], ["extra"])
        self.check_st_file(out, names)
        lacking = [f for f, v in self.flat.items()
                   if v[2] in NOT_IN_SAFETENSORS]
        if lacking:
            with self.assertRaises(ckptfs.Error) as cm:
                ckptfs.export(self.ck, self.path("no.safetensors"),
                              tensors=lacking[:1])
            self.assertIn("has no safetensors dtype", str(cm.exception))

    def test_safetensors_sharded(self):
        out = self.path("hf")
        names = self.st_names()
        total = sum(len(self.flat[f][1]) for f in names)
        ckptfs.export(self.ck, out, max_shard_size=max(64, total // 3),
                      tensors=names)
        with open(os.path.join(out, "model.safetensors.index.json")) as f:
            index = json.load(f)
        self.assertEqual(index["metadata"]["total_size"], total)
        self.assertEqual(sorted(index["weight_map"]), sorted(names))
        files = sorted(set(index["weight_map"].values()))
        self.assertGreater(len(files), 1)
        n = len(files)
        self.assertEqual(files, ["model-%05d-of-%05d.safetensors" % (i, n)
                                 for i in range(1, n + 1)])
        self.assertEqual(sorted(os.listdir(out)),
                         sorted(files + ["model.safetensors.index.json"]))
        for fname in files:
            names = [k for k, v in index["weight_map"].items() if v == fname]
            self.check_st_file(os.path.join(out, fname), names)

    def test_safetensors_folder_one_file(self):
        out = self.path("hf1")
        ckptfs.export(self.ck, out, tensors=self.st_names())
        self.assertEqual(os.listdir(out), ["model.safetensors"])
        self.check_st_file(os.path.join(out, "model.safetensors"),
                           self.st_names())

    # ---------------------------------------------------------------- refusals

    def test_refusals(self):
        out = self.path("exists.pt")
        with open(out, "wb") as f:
            f.write(b"keep")
        with self.assertRaises(ckptfs.Error) as cm:
            ckptfs.export(self.ck, out, "pt")
        self.assertIn("exists", str(cm.exception))
        with open(out, "rb") as f:
            self.assertEqual(f.read(), b"keep")
        with self.assertRaises(ckptfs.Error) as cm:
            ckptfs.export(self.path("nothing"), self.path("x.safetensors"))
        self.assertIn("nothing", str(cm.exception))
        with self.assertRaises(ckptfs.Error) as cm:
            ckptfs.export(self.ck, self.path("y.pt"), "pt",
                          tensors=["no.such"])
        self.assertIn("no.such", str(cm.exception))
        # Nothing but the checkpoint, the file kept, and the plans the
        # checkpoint's commit moved aside (docs/FORMAT.md, "Commit").
        self.assertEqual(sorted(n for n in os.listdir(self.tmp)
                                if not n.startswith(".ckpt-gc.plans.")),
                         ["ck", "exists.pt"])

    def test_torch1_dtypes_refused_or_converted(self):
        ck = self.path("wide")
        u16 = RNG.integers(0, 65536, size=(4,), dtype=np.uint16)
        u32 = RNG.integers(0, 2**32, size=(3,), dtype=np.uint32)
        ckptfs.save(ck, {"u16": u16, "u32": u32,
                         "f8": ckptfs.Raw(np.arange(256, dtype=np.uint8),
                                          "f8e4m3"),
                         "u64": np.arange(2, dtype=np.uint64)})
        for fmt, out in (("pt", "a.pt"), ("dcp", "a.dcp")):
            with self.assertRaises(ckptfs.Error) as cm:
                ckptfs.export(ck, self.path(out), fmt, torch=1)
            self.assertRegex(str(cm.exception), "'f8': f8e4m3 is a dtype "
                             "torch 1.x lacks")
            self.assertFalse(os.path.exists(self.path(out)))
        with self.assertRaises(ckptfs.Error) as cm:
            ckptfs.export(ck, self.path("b.pt"), "pt", torch=1, convert=True)
        self.assertRegex(str(cm.exception), "'u64': u64 .*no exact")
        out = self.path("c.pt")
        ckptfs.export(ck, out, "pt", torch=1, convert=True,
                      tensors=["u16", "u32", "f8"])
        sd = torch.load(out, weights_only=True)
        self.assertEqual(sd["u16"].dtype, torch.int32)
        self.assertEqual(sd["u16"].numpy().tolist(), u16.tolist())
        self.assertEqual(sd["u32"].dtype, torch.int64)
        self.assertEqual(sd["u32"].numpy().tolist(), u32.tolist())
        with ckptfs.open(ck) as f:     # ckptfs widens f8 to f32 for NumPy
            ref = f.get_tensor("f8")
        self.assertEqual(sd["f8"].dtype, torch.float32)
        np.testing.assert_array_equal(sd["f8"].numpy(), ref)


class FromDcp(util.TempDir):
    """A DCP checkpoint torch writes, exported to the three formats."""

    def test_dcp_source(self):
        src = self.path("src")
        g = torch.Generator().manual_seed(7)
        sd = {"emb.weight": torch.randn(9, 4, generator=g),
              "head.bias": torch.randn(5, generator=g).to(torch.bfloat16),
              "step": torch.tensor(12, dtype=torch.int64),
              "mask": torch.rand(6, generator=g) > 0.5}
        if T2:
            dcp.save(sd, storage_writer=dcp.FileSystemWriter(src))
        else:
            dcp.save_state_dict(sd, dcp.FileSystemWriter(src), no_dist=True)
        ref = {k: tensor_bytes(v) for k, v in sd.items()}
        pt = self.path("o.pt")
        ckptfs.export(src, pt, "pt", torch=TORCH_MAJOR, flat=True)
        got = torch.load(pt, weights_only=True)
        self.assertEqual({k: tensor_bytes(v) for k, v in got.items()}, ref)
        for k in sd:
            self.assertEqual(got[k].dtype, sd[k].dtype)
            self.assertEqual(got[k].shape, sd[k].shape)
        st = self.path("o.safetensors")
        ckptfs.export(src, st)
        _, parsed = parse_safetensors(st)
        self.assertEqual({k: v[2] for k, v in parsed.items()}, ref)
        if safetensors is not None:
            got = safetensors.torch.load_file(st)
            self.assertEqual({k: tensor_bytes(v) for k, v in got.items()},
                             ref)
        out = self.path("o.dcp")
        ckptfs.export(src, out, "dcp", torch=TORCH_MAJOR)
        back = {k: torch.zeros_like(v) for k, v in sd.items()}
        Export.dcp_load(self, out, back)
        self.assertEqual({k: tensor_bytes(v) for k, v in back.items()}, ref)


class FromTorchSave(util.TempDir):
    """A torch.save archive written here (torchsave_ref.state: nested dicts
    and lists, a tied weight, a transposed and a strided view, a 0-d and
    an expanded tensor, every dtype this torch saves) exported to the
    three formats; each read back by torch equals torch.load of the
    original archive, bit for bit."""

    def setUp(self):
        super().setUp()
        import torchsave_ref
        self.src = self.path("model.pt")
        torch.save(torchsave_ref.state(), self.src)
        # (torch 1.13's weights_only unpickler refuses the float "lr";
        # the archive is the test's own, the exports load weights_only)
        self.ref = torchsave_ref.flat(torch.load(self.src,
                                                 weights_only=False))
        self.assertGreater(len(self.ref), 10)
        self.assertEqual(self.ref["model.layers.0.w"].data_ptr(),
                         self.ref["model.layers.1.w"].data_ptr(),
                         "the archive ties the two weights")
        self.assertFalse(self.ref["model.wt"].is_contiguous())

    def same(self, got, names, what):
        self.assertEqual(sorted(got), sorted(names), what)
        for k in names:
            want = self.ref[k]
            self.assertEqual(got[k].dtype, want.dtype, "%s: %s" % (what, k))
            self.assertEqual(got[k].shape, want.shape, "%s: %s" % (what, k))
            self.assertEqual(tensor_bytes(got[k]), tensor_bytes(want),
                             "%s: %s" % (what, k))

    def test_pt(self):
        out = self.path("flat.pt")
        self.assertEqual(ckptfs.export(self.src, out, "pt",
                                       torch=TORCH_MAJOR, flat=True), [])
        self.same(torch.load(out, weights_only=True), self.ref, "flat pt")
        out = self.path("nested.pt")
        ckptfs.export(self.src, out, "pt", torch=TORCH_MAJOR)
        nested = torch.load(out, weights_only=True)
        got = {}
        for fqn in self.ref:
            node = nested
            for p in fqn.split("."):
                node = node[p]
            got[fqn] = node
        self.same(got, self.ref, "nested pt")

    def test_dcp(self):
        out = self.path("o.dcp")
        self.assertEqual(ckptfs.export(self.src, out, "dcp",
                                       torch=TORCH_MAJOR), [])
        back = {k: torch.zeros(v.shape, dtype=v.dtype)
                for k, v in self.ref.items()}
        Export.dcp_load(self, out, back)
        self.same(back, self.ref, "dcp.load")

    def test_safetensors(self):
        ckptfs_of = {v[1]: k for k, v in DTYPES.items()}
        names = [k for k, v in self.ref.items()
                 if st_exportable(ckptfs_of[str(v.dtype)[len("torch."):]])]
        self.assertLess(len(names), len(self.ref))  # complex128 at least
        out = self.path("o.safetensors")
        self.assertEqual(ckptfs.export(self.src, out, tensors=names), [])
        _, parsed = parse_safetensors(out)
        self.assertEqual(sorted(parsed), sorted(names))
        for k in names:
            self.assertEqual(parsed[k][1:], (tuple(self.ref[k].shape),
                                             tensor_bytes(self.ref[k])), k)
        if safetensors is None:
            return
        with safetensors.safe_open(out, framework="pt") as f:
            self.same({k: f.get_tensor(k) for k in f.keys()}, names,
                      "safe_open")


if __name__ == "__main__":
    util.main()
