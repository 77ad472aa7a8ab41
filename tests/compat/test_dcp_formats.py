"""test_dcp_formats.py - PyTorch 2.x distributed checkpoints in the forms
ckptfs used to refuse (issue 23 items 2, 3 and 5), written during the
test by the torch that runs it and read back by ckptfs (`ckpt cat`, `ckpt
verify`, ckptfs.open with slices, ckptfs.torch.StorageReader under
dcp.load), every tensor compared bit for bit with what torch itself
loads (dcp.load with FileSystemReader) or, where torch cannot load its
own output, with safetensors.torch.load of the blob torch wrote and with
the state saved:

- FileSystemWriter(p, serialization_format=SerializationFormat.
  SAFETENSORS): each .distcp file ends in a safetensors blob of its
  tensors (torch 2.14's FileSystemReader fails on it: "Unsupported
  operand 192");
- FileSystemWriter(p, _extensions=[ZStandard()]): every item one zstd
  stream, a transposed (strided) tensor and a byte item included; and
  hostile variants: a stream whose frame header lies about its size, one
  that decodes far past its tensor (a zip bomb), an unknown transform,
  each refused by name;
- HuggingFaceStorageWriter(p, enable_consolidation=True): opens at p, not
  only at p/sharded, equal to safetensors.safe_open of its file.

Runs where torch has these writers (2.x; skipped with 1.13).  Exit 0
pass, 1 fail, 77 skip."""
import io
import os
import pickle
import shutil

from torch2util import need_torch, raw  # first: it finds the build
import ckptfs  # noqa: E402
import util  # noqa: E402

torch = need_torch()
try:
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import FileSystemWriter
except ImportError as exc:
    util.skip_all("torch %s lacks DCP's writers of 2.x (%s)"
                  % (torch.__version__, exc))
# Each form where this torch has it (2.6 has the ZStandard extension but
# neither SerializationFormat nor HuggingFaceStorageWriter's
# consolidation).
try:
    from torch.distributed.checkpoint.filesystem import SerializationFormat
except ImportError:
    SerializationFormat = None
try:
    from torch.distributed.checkpoint._extension import ZStandard
except ImportError:
    ZStandard = None


def state():
    g = torch.Generator().manual_seed(5)
    w = torch.randn(64, 48, generator=g)
    return {
        "model": {
            "w": w,
            "wt": torch.randn(40, 24, generator=g).t(),   # strided
            "emb": torch.randn(300, 33, generator=g).to(torch.bfloat16),
            "ids": torch.arange(-50, 1000, dtype=torch.int64),
            "mask": torch.rand(17, generator=g) > 0.5,
            "u8": torch.randint(0, 256, (5, 7), dtype=torch.uint8,
                                generator=g),
            "step": torch.tensor(7.5),
            "empty": torch.zeros(0, 3),
        },
        "extra": {"note": "hello", "lr": [0.1, 0.01]},
    }


TENSORS = ["w", "wt", "emb", "ids", "mask", "u8", "step", "empty"]


def zeros_like(sd):
    return {"model": {k: torch.zeros_like(v) for k, v in sd["model"].items()},
            "extra": {"note": None, "lr": None}}


class Formats(util.TempDir):
    def setUp(self):
        super().setUp()
        self.sd = state()

    def save(self, name, writer_kw):
        p = self.path(name)
        dcp.save(self.sd, storage_writer=FileSystemWriter(p, **writer_kw))
        return p

    def check_reads(self, p, ref):
        """ckpt verify, ckpt cat, ckptfs.open (whole and a slice), and
        StorageReader under dcp.load, against ref {fqn: tensor}."""
        v = util.ckpt("verify", p)
        self.assertEqual(v.returncode, 0, (v.stdout + v.stderr).decode())
        with ckptfs.open(p, framework="pt") as f:
            for k in TENSORS:
                fqn = "model." + k
                want = ref[k]
                out = util.ckpt("cat", p, fqn, check=True).stdout
                self.assertEqual(out, raw(want), fqn)
                got = f.get_tensor(fqn)
                self.assertEqual(got.dtype, want.dtype, fqn)
                self.assertEqual(raw(got), raw(want), fqn)
                if want.dim() == 2 and want.numel():
                    s = f.get_slice(fqn)[3:9, 1:-2]
                    self.assertEqual(raw(s), raw(want[3:9, 1:-2]), fqn)
            self.assertIn("extra.note", f.keys())
        import ckptfs.torch as ct
        into = zeros_like(self.sd)
        dcp.load(into, storage_reader=ct.StorageReader(p))
        for k in TENSORS:
            self.assertEqual(raw(into["model"][k]), raw(ref[k]), k)
        self.assertEqual(into["extra"]["note"], "hello")
        self.assertEqual(into["extra"]["lr"], [0.1, 0.01])

    def torch_loads(self, p):
        into = zeros_like(self.sd)
        dcp.load(into, checkpoint_id=p)
        return into["model"]

    def test_plain_baseline(self):
        p = self.save("plain", {})
        ref = self.torch_loads(p)
        for k in TENSORS:
            self.assertEqual(raw(ref[k]), raw(self.sd["model"][k]), k)
        self.check_reads(p, ref)

    def test_safetensors_serialization(self):
        """Item 2: each .distcp ends in a safetensors blob."""
        if SerializationFormat is None:
            self.skipTest("no SerializationFormat in this torch")
        from safetensors.torch import load as st_load
        # safetensors stores contiguous tensors only
        self.sd["model"]["wt"] = self.sd["model"]["wt"].contiguous()
        p = self.save("st", dict(
            serialization_format=SerializationFormat.SAFETENSORS))
        md = pickle.load(open(os.path.join(p, ".metadata"), "rb"))
        blobs = {}
        for idx, info in md.storage_data.items():
            if idx.offset is not None:     # a tensor item: its blob
                path = os.path.join(p, info.relative_path)
                with open(path, "rb") as fh:
                    fh.seek(info.offset)
                    blobs.update(st_load(fh.read()))
        self.assertEqual(sorted(blobs), sorted("model." + k for k in TENSORS))
        ref = {k: blobs["model." + k] for k in TENSORS}
        for k in TENSORS:    # the blob holds what was saved
            self.assertEqual(raw(ref[k]), raw(self.sd["model"][k]), k)
        self.check_reads(p, ref)

    def test_zstandard_extension(self):
        """Item 3: every item one zstd stream."""
        if ZStandard is None:
            self.skipTest("no ZStandard extension in this torch")
        p = self.save("zstd", dict(_extensions=[ZStandard()]))
        md = pickle.load(open(os.path.join(p, ".metadata"), "rb"))
        self.assertTrue(all(i.transform_descriptors == ["stream.zstd/1"]
                            for i in md.storage_data.values()))
        ref = self.torch_loads(p)
        self.check_reads(p, ref)
        with ckptfs.open(p) as f:
            self.assertEqual(f.info("model.w").codec, "zstd")
            # a slice decodes its item's whole stream, once
            before = f.stats()["frames_decoded"]
            f.get_slice("model.emb")[10:12, 0:4]
            self.assertEqual(f.stats()["frames_decoded"] - before, 1)

    def rewrite_item(self, p, fqn, stream=None, descriptors=None):
        """Points fqn's item at `stream` (appended to its file) and/or
        gives it other transform descriptors, in .metadata."""
        mdp = os.path.join(p, ".metadata")
        md = pickle.load(open(mdp, "rb"))
        for idx, info in md.storage_data.items():
            if idx.fqn != fqn:
                continue
            if stream is not None:
                path = os.path.join(p, info.relative_path)
                info.offset = os.path.getsize(path)
                info.length = len(stream)
                with open(path, "ab") as fh:
                    fh.write(stream)
            if descriptors is not None:
                info.transform_descriptors = descriptors
        with open(mdp, "wb") as fh:
            pickle.dump(md, fh)

    def refused(self, p, fqn, *words):
        """Reading fqn fails naming it and the problem (the checkpoint
        may list it, refused alone, or refuse to open)."""
        r = util.ckpt("cat", p, fqn)
        msg = r.stderr.decode()
        self.assertNotEqual(r.returncode, 0, r.stdout[:100])
        for w in (fqn,) + words:
            self.assertIn(w, msg)
        print("refused as it should be: " + msg.strip())

    def test_zstandard_hostile(self):
        if ZStandard is None:
            self.skipTest("no ZStandard extension in this torch")
        import zstandard
        p = self.save("zstd", dict(_extensions=[ZStandard()]))
        buf = io.BytesIO()
        torch.save(self.sd["model"]["w"].clone(), buf)
        archive = buf.getvalue()

        # a frame whose header says one byte more than it holds
        liar = bytearray(zstandard.ZstdCompressor(
            write_content_size=True).compress(archive))
        fhd = liar[4]                          # RFC 8878 frame header
        at = 5 + (0 if fhd & 0x20 else 1) + [0, 1, 2, 4][fhd & 3]
        n = [1 if fhd & 0x20 else 0, 2, 4, 8][fhd >> 6]
        bias = 256 if n == 2 else 0
        self.assertGreater(n, 0)
        size = int.from_bytes(liar[at:at + n], "little") + bias
        self.assertEqual(size, len(archive))
        liar[at:at + n] = (size + 1 - bias).to_bytes(n, "little")
        bad = self.path("liar")
        shutil.copytree(p, bad)
        self.rewrite_item(bad, "model.w", stream=bytes(liar))
        self.refused(bad, "model.w", "lies about its size")

        # a stream that decodes far past its tensor: refused, not decoded
        bomb = zstandard.ZstdCompressor().compress(archive + bytes(64 << 20))
        bad = self.path("bomb")
        shutil.copytree(p, bad)
        self.rewrite_item(bad, "model.w", stream=bomb)
        self.refused(bad, "model.w", "decodes to more than")

        # a transform ckptfs does not know
        bad = self.path("lz4")
        shutil.copytree(p, bad)
        self.rewrite_item(bad, "model.ids", descriptors=["stream.lz4/1"])
        self.refused(bad, "model.ids", "'stream.lz4/1'")
        bad = self.path("zstd2")
        shutil.copytree(p, bad)
        self.rewrite_item(bad, "model.ids", descriptors=["stream.zstd/2"])
        self.refused(bad, "model.ids", "'stream.zstd/2'")

        # a cut-short stream
        bad = self.path("cut")
        shutil.copytree(p, bad)
        good = zstandard.ZstdCompressor().compress(archive)
        self.rewrite_item(bad, "model.w", stream=good[:len(good) // 2])
        self.refused(bad, "model.w")

    def test_hf_consolidated_folder(self):
        """Item 5: HuggingFaceStorageWriter's folder opens where the user
        points."""
        from safetensors import safe_open
        try:
            from torch.distributed.checkpoint import HuggingFaceStorageWriter
            HuggingFaceStorageWriter(self.path("probe"),
                                     enable_consolidation=True)
        except (ImportError, TypeError):
            self.skipTest("no HuggingFaceStorageWriter consolidation here")
        p = self.path("hf")
        sd = {k: v for k, v in self.sd["model"].items() if v.numel()}
        sd = {k: v.contiguous() for k, v in sd.items()}
        dcp.save(sd, storage_writer=HuggingFaceStorageWriter(
            p, enable_consolidation=True))
        files = [os.path.join(dp, f) for dp, _, fs in os.walk(p) for f in fs
                 if f.endswith(".safetensors")]
        self.assertTrue(files)
        ref = {}
        for fn in files:
            with safe_open(fn, framework="pt") as f:
                for k in f.keys():
                    ref[k] = f.get_tensor(k)
        self.assertEqual(sorted(ref), sorted(sd))
        r = util.ckpt("ls", p)
        self.assertEqual(r.returncode, 0, r.stderr.decode())
        with ckptfs.open(p, framework="pt") as f:
            self.assertEqual(sorted(f.keys()), sorted(sd))
            for k, t in ref.items():
                self.assertEqual(raw(f.get_tensor(k)), raw(t), k)
                self.assertEqual(util.ckpt("cat", p, k, check=True).stdout,
                                 raw(t), k)


if __name__ == "__main__":
    util.main()
