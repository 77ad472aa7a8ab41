"""test_dcp_backend.py - the DCP backend (ckptfs.torch) against torch's own
DCP, items 7-9 of issue #23, on whatever torch runs it (2.x in the roots,
scripts/test-torch2.sh; 1.13 on the host, make check):

  7  a tensor of a dtype ckptfs cannot store is refused by
     prepare_local_plan, naming tensor and dtype, with nothing written
     (no .pending/, no data/), and a retry into the same path saves; a
     torchtitan-style complex64 freqs_cis buffer saves and loads bit-exact
     where ckptfs has complex64
  8  DCP's planner_data (flattened name -> nested keys) survives: with
     DefaultSavePlanner(enable_plan_caching=True) a second save through
     StorageWriter keeps it, and _load_state_dict_from_keys({"model"})
     through StorageReader returns {'model': ...} as FileSystemReader does
     (2.x), on a ckptfs checkpoint, on torch's own DCP checkpoint and on
     its `ckpt import`
  9  a folder holding a FileSystemWriter checkpoint is refused, unchanged;
     a committed checkpoint is never overwritten (the refusal says what to
     do, the old checkpoint still loads); overwrite=True is refused saying
     what to do
and, for docs/COMPAT.md, StorageReader and ckptfs.open on torch's own DCP
folder, a safetensors file and an HF sharded safetensors folder.
Exit status: 0 pass, 1 fail, 77 skip (no torch).
"""
import io
import os
import sys

import util

torch = util.need_torch()
import ckptfs  # noqa: E402
import ckptfs.torch as ct  # noqa: E402
from ckptfs import _dtypes  # noqa: E402

TORCH2 = int(torch.__version__.split(".")[0]) >= 2
if TORCH2:
    import torch.distributed.checkpoint as dcp  # noqa: E402
    from torch.distributed.checkpoint import FileSystemWriter  # noqa: E402
    from torch.distributed.checkpoint.default_planner import (  # noqa: E402
        DefaultSavePlanner)
else:
    import torch.distributed._shard.checkpoint as dcp  # noqa: E402
    from torch.distributed._shard.checkpoint import (  # noqa: E402
        FileSystemWriter)
    from torch.distributed._shard.checkpoint.default_planner import (  # noqa: E402,E501
        DefaultSavePlanner)

# dtypes that a torch may have and ckptfs may lack, most realistic first
# (fp4 of torch >= 2.8, the sub-byte integers of 2.3, then the raw bit
# types of 2.x, a quantized type of 1.13)
CANDIDATES = ["float4_e2m1fn_x2", "uint4", "int4", "complex32",
              "float8_e8m0fnu", "bits8", "bits16", "quint8"]


def save(sd, writer, planner=None):
    if TORCH2:
        dcp.save(sd, storage_writer=writer, planner=planner)
    else:
        dcp.save_state_dict(sd, writer, planner=planner, no_dist=True)


def load(sd, reader):
    if TORCH2:
        dcp.load(sd, storage_reader=reader)
    else:
        dcp.load_state_dict(sd, reader, no_dist=True)


def raw(t):
    return t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def unstorable_dtype():
    """A dtype this torch has (tensors of it can be made) that ckptfs
    cannot store, or None."""
    for n in CANDIDATES:
        dt = getattr(torch, n, None)
        if dt is None:
            continue
        try:
            _dtypes.from_torch(dt, "probe")
            continue
        except ckptfs.UnsupportedError:
            pass
        try:
            torch.empty(4, dtype=dt)
        except Exception:
            continue
        return dt
    return None


class Dtypes(util.TempDir):
    def test_unstorable_dtype_refused_before_writing(self):
        dt = unstorable_dtype()
        if dt is None:
            self.skipTest("ckptfs stores every dtype of torch %s tried"
                          % torch.__version__)
        p = self.path("ck")
        w = torch.arange(12, dtype=torch.float32).reshape(3, 4)
        sd = {"w": w, "freqs_cis": torch.empty(4, dtype=dt)}
        with self.assertRaises(BaseException) as cm:  # DCP's wrapper
            save(sd, ct.StorageWriter(p))
        self.assertFalse(os.path.exists(p) and os.listdir(p),
                         "left behind: %s" % (os.path.exists(p) and
                                              os.listdir(p)))
        text = str(cm.exception)
        self.assertIn("freqs_cis", text)
        self.assertIn(str(dt), text)
        self.assertIn("nothing was written", text)
        # a retry into the same path without it saves
        save({"w": w}, ct.StorageWriter(p))
        back = {"w": torch.zeros(3, 4)}
        load(back, ct.StorageReader(p))
        self.assertEqual(raw(back["w"]), raw(w))

    def test_complex64_freqs_cis(self):
        """torchtitan's Llama: a persistent complex64 buffer."""
        try:
            _dtypes.from_torch(torch.complex64, "freqs_cis")
        except ckptfs.UnsupportedError:
            self.skipTest("this ckptfs has no complex64")
        freqs = 1.0 / (10000 ** (torch.arange(0, 16, 2).float() / 16))
        angles = torch.outer(torch.arange(32).float(), freqs)
        sd = {"freqs_cis": torch.polar(torch.ones_like(angles), angles),
              "tok_embeddings.weight": torch.randn(7, 16)}
        p = self.path("ck")
        save(sd, ct.StorageWriter(p))
        back = {k: torch.zeros_like(v) for k, v in sd.items()}
        load(back, ct.StorageReader(p))
        for k, v in sd.items():
            self.assertEqual(back[k].dtype, v.dtype, k)
            self.assertEqual(raw(back[k]), raw(v), k)


def nested_state():
    g = torch.Generator().manual_seed(3)
    # a key with '"' and '\\' (escaped in the JSON ckptfs keeps)
    return {"model": {"layers": {"0": {"w": torch.randn(4, 3, generator=g)}},
                      "head": torch.randn(5, generator=g),
                      'odd"\\key': torch.arange(3)},
            "optim": {"step": torch.tensor(7)}}


class PlannerData(util.TempDir):
    def setUp(self):
        super().setUp()
        if not TORCH2:
            self.skipTest("torch 1.13's DCP does not flatten nested states")
        try:
            from torch.distributed.checkpoint.state_dict_loader import (
                _load_state_dict_from_keys)
        except ImportError:
            self.skipTest("no _load_state_dict_from_keys in torch %s"
                          % torch.__version__)
        self.from_keys = _load_state_dict_from_keys

    def check_model(self, reader, sd):
        got = self.from_keys({"model"}, storage_reader=reader)
        self.assertEqual(sorted(got), ["model"])
        self.assertEqual(raw(got["model"]["layers"]["0"]["w"]),
                         raw(sd["model"]["layers"]["0"]["w"]))
        for k in ("head", 'odd"\\key'):
            self.assertEqual(raw(got["model"][k]), raw(sd["model"][k]), k)

    def test_plan_caching_keeps_planner_data(self):
        try:
            planner = DefaultSavePlanner(enable_plan_caching=True)
        except TypeError:
            self.skipTest("no plan caching in torch %s" % torch.__version__)
        sd = nested_state()
        for name in ("ck1", "ck2", "ck3"):
            save(sd, ct.StorageWriter(self.path(name)), planner=planner)
            self.check_model(ct.StorageReader(self.path(name)), sd)

    def test_torch_written_and_imported(self):
        """torch's own checkpoint: FileSystemReader (the reference), the
        StorageReader on it, and on its `ckpt import`."""
        sd = nested_state()
        fs = self.path("fs")
        save(sd, FileSystemWriter(fs))
        self.check_model(dcp.FileSystemReader(fs), sd)
        self.check_model(ct.StorageReader(fs), sd)
        util.ckpt("import", fs, self.path("imported"), check=True)
        self.check_model(ct.StorageReader(self.path("imported")), sd)


ST_DTYPES = {torch.float32: "F32", torch.float16: "F16",
             torch.bfloat16: "BF16", torch.int64: "I64", torch.int8: "I8",
             torch.uint8: "U8", torch.bool: "BOOL"}


def write_safetensors(path, tensors):
    """A safetensors file: safetensors.torch.save_file where the package is
    installed, else written here per the published format (8-byte header
    length, JSON header, data)."""
    try:
        from safetensors.torch import save_file
    except ImportError:
        save_file = None
    if save_file is not None:
        save_file(tensors, path, metadata={"format": "pt"})
        return
    import json
    header, data = {"__metadata__": {"format": "pt"}}, b""
    for k, t in sorted(tensors.items()):
        b = raw(t)
        header[k] = {"dtype": ST_DTYPES[t.dtype], "shape": list(t.shape),
                     "data_offsets": [len(data), len(data) + len(b)]}
        data += b
    text = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little") + text + data)


def foreign_state():
    g = torch.Generator().manual_seed(11)
    return {"emb.weight": torch.randn(9, 4, generator=g),
            "h.0.w": torch.randn(4, 4, generator=g).bfloat16(),
            "h.0.b": torch.randn(4, generator=g).half(),
            "pos": torch.arange(6, dtype=torch.int64),
            "mask": torch.randn(5, generator=g) > 0,
            "q": torch.randint(-100, 100, (3, 2), generator=g,
                               dtype=torch.int8)}


class Foreign(util.TempDir):
    """Checkpoints of other tools through StorageReader (DCP's load with
    torch's default planner) and ckptfs.open(framework="pt"), bit-exact
    against what torch (FileSystemReader) or safetensors holds."""

    def check_reads(self, path, sd):
        back = {k: torch.zeros_like(v) for k, v in sd.items()}
        load(back, ct.StorageReader(path))
        with ckptfs.open(path, framework="pt") as f:
            for k, v in sd.items():
                self.assertEqual(back[k].dtype, v.dtype, k)
                self.assertEqual(raw(back[k]), raw(v), k)
                self.assertEqual(raw(f.get_tensor(k)), raw(v), k)

    def test_torch_dcp_folder(self):
        sd = foreign_state()
        p = self.path("dcp")
        save(sd, FileSystemWriter(p))
        ref = {k: torch.zeros_like(v) for k, v in sd.items()}
        load(ref, dcp.FileSystemReader(p))          # torch's own load
        for k, v in sd.items():
            self.assertEqual(raw(ref[k]), raw(v), k)
        self.check_reads(p, sd)

    def test_safetensors_file_and_hf_folder(self):
        sd = foreign_state()
        write_safetensors(self.path("model.safetensors"), sd)
        self.check_reads(self.path("model.safetensors"), sd)
        hf = self.path("hf")
        os.makedirs(hf)
        names = sorted(sd)
        shards = {"model-00001-of-00002.safetensors": names[:3],
                  "model-00002-of-00002.safetensors": names[3:]}
        for fname, keys in shards.items():
            write_safetensors(os.path.join(hf, fname),
                              {k: sd[k] for k in keys})
        import json
        with open(os.path.join(hf, "model.safetensors.index.json"),
                  "w") as f:
            json.dump({"metadata": {}, "weight_map": {
                k: fname for fname, keys in shards.items() for k in keys}},
                f)
        self.check_reads(hf, sd)


class Occupied(util.TempDir):
    def test_foreign_checkpoint_folder_refused(self):
        p = self.path("ck")
        save({"w": torch.ones(3)}, FileSystemWriter(p))
        before = util.snapshot(p)
        with self.assertRaises(BaseException) as cm:  # DCP's wrapper
            save({"w": torch.zeros(3)}, ct.StorageWriter(p))
        self.assertIn("already holds a PyTorch DCP checkpoint",
                      str(cm.exception))
        self.assertUnchanged(before, p, "by the refused save")

    def test_no_overwrite(self):
        p = self.path("ck")
        old = {"w": torch.arange(5.0)}
        save(old, ct.StorageWriter(p))
        before = util.snapshot(p)
        with self.assertRaises(BaseException) as cm:  # DCP's wrapper
            save({"w": torch.zeros(5)}, ct.StorageWriter(p))
        self.assertIn("save into a new path", str(cm.exception))
        self.assertUnchanged(before, p, "by the refused save")
        back = {"w": torch.zeros(5)}
        load(back, ct.StorageReader(p))
        self.assertEqual(raw(back["w"]), raw(old["w"]))
        with self.assertRaises(ValueError) as cm:
            ct.StorageWriter(self.path("other"), overwrite=True)
        self.assertIn("save into a new path", str(cm.exception))


if __name__ == "__main__":
    util.main()
