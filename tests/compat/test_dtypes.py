"""test_dtypes.py - the dtypes ckptfs added for PyTorch 2.x (complex64,
complex128, complex32, float8_e4m3fnuz, float8_e5m2fnuz, float8_e8m0fnu),
against the torch that runs the test: every one this torch has is saved
with ckptfs.save (every bit pattern of the 8-bit formats, every binary16
pattern in both parts of complex32, random complex64/128 with inf, NaN and
-0) and read back bit for bit by ckptfs.load, ckptfs.open slices and `ckpt
cat`; the widened NumPy values (float32, complex64) are torch's own
`.float()` / `.to(torch.complex64)` of the same tensor, bit for bit (NaNs:
the positions, and the bits ckptfs documents); and where torch has DCP's
`dcp.save`, a state of them saved through ckptfs.torch.StorageWriter loads
back through StorageReader bit for bit (issue 23 item 7: it used to fail
with "has no ckptfs equivalent" after leaving a half-made save behind).

Runs in the torch 2.x roots (all six dtypes with torch 2.7+) and with torch
1.13 (the three complex types).  Exit 0 pass, 1 fail, 77 skip."""
import os

import numpy as np

from torch2util import need_torch, raw  # first: it finds the build
import ckptfs  # noqa: E402
import util  # noqa: E402

torch = need_torch()

NEW = ["complex64", "complex128", "complex32", "float8_e4m3fnuz",
       "float8_e5m2fnuz", "float8_e8m0fnu"]
NAMES = {"complex64": "c64", "complex128": "c128", "complex32": "c32",
         "float8_e4m3fnuz": "f8e4m3fnuz", "float8_e5m2fnuz": "f8e5m2fnuz",
         "float8_e8m0fnu": "f8e8m0"}


def make(name):
    """A tensor of torch dtype `name` holding every bit pattern it can (the
    8-bit formats, binary16 in complex32) or random values with the
    special ones."""
    dt = getattr(torch, name)
    if name.startswith("float8"):
        return torch.arange(256, dtype=torch.uint8).view(dt).reshape(16, 16)
    if name == "complex32":
        u = torch.arange(65536, dtype=torch.int32).to(torch.int16)
        return u.view(dt).reshape(128, 256)     # pairs of halves
    g = torch.Generator().manual_seed(7)
    t = torch.randn(9, 7, dtype=dt, generator=g)
    flat = t.view(-1)
    flat[1] = complex(float("inf"), float("nan"))
    flat[2] = complex(-0.0, 1e-310 if dt == torch.complex128 else 1e-40)
    return t


def same_widened(got, want):
    """Bits equal where want is a number; NaN exactly where want is NaN."""
    got, want = np.ascontiguousarray(got), np.ascontiguousarray(want)
    if got.dtype != want.dtype or got.shape != want.shape:
        return "dtype/shape %s %s, want %s %s" % (got.dtype, got.shape,
                                                  want.dtype, want.shape)
    g = got.reshape(-1).view(np.float32)
    w = want.reshape(-1).view(np.float32)
    if not np.array_equal(np.isnan(g), np.isnan(w)):
        return "NaNs at other places"
    num = ~np.isnan(w)
    bad = np.nonzero(g.view(np.uint32)[num] != w.view(np.uint32)[num])[0]
    if len(bad):
        i = int(bad[0])
        return "value %d: bits %#x, torch gives %#x" % (
            i, g.view(np.uint32)[num][i], w.view(np.uint32)[num][i])
    return None


class Dtypes(util.TempDir):
    def setUp(self):
        super().setUp()
        self.have = [n for n in NEW if hasattr(torch, n)]
        self.state = {n: make(n) for n in self.have}
        self.ck = self.path("ck")
        ckptfs.save(self.ck, self.state, frame_size=4096)

    def test_round_trip_bit_exact(self):
        print("torch %s has %s" % (torch.__version__, ", ".join(self.have)))
        self.assertIn("complex64", self.have)
        back = ckptfs.load(self.ck, framework="pt")
        with ckptfs.open(self.ck, framework="pt") as f:
            for n, t in self.state.items():
                self.assertEqual(f.info(n).dtype, NAMES[n], n)
                self.assertEqual(back[n].dtype, t.dtype, n)
                self.assertEqual(raw(back[n]), raw(t), n)
                s = f.get_slice(n)[3:7, 1:5]
                self.assertEqual(s.dtype, t.dtype, n)
                self.assertEqual(raw(s), raw(t[3:7, 1:5]), n)
                out = util.ckpt("cat", self.ck, n, check=True).stdout
                self.assertEqual(out, raw(t), n)

    def test_widened_as_torch_converts(self):
        wide = ckptfs.load(self.ck, framework="np")
        narrow = ckptfs.load(self.ck, framework="np", widen=False)
        for n, t in self.state.items():
            if n in ("complex64", "complex128"):
                self.assertEqual(wide[n].dtype, np.dtype(n), n)
                self.assertEqual(wide[n].tobytes(), raw(t), n)
                continue
            if n == "complex32":
                want = t.to(torch.complex64).numpy()
            else:
                want = t.float().numpy()
            err = same_widened(wide[n], want)
            self.assertIsNone(err, n)
            self.assertEqual(np.ascontiguousarray(narrow[n]).tobytes(),
                             raw(t), n)
        for n in ("float8_e4m3fnuz", "float8_e5m2fnuz"):
            if n in wide:   # the one NaN, 0x80: the positive quiet NaN
                self.assertEqual(wide[n].view(np.uint32)[8, 0], 0x7FC00000)
        if "float8_e8m0fnu" in wide:
            self.assertEqual(wide["float8_e8m0fnu"].view(np.uint32)[15, 15],
                             0x7FC00000)
            self.assertEqual(wide["float8_e8m0fnu"][7, 15], 1.0)

    def test_unpack_is_the_widened_load(self):
        out = self.path("unpacked")
        util.ckpt("unpack", self.ck, out, check=True)
        wide = ckptfs.load(self.ck, framework="np")
        for n in self.state:
            got = np.load(os.path.join(out, n + ".npy"))
            self.assertEqual(got.dtype, wide[n].dtype, n)
            self.assertEqual(got.tobytes(), wide[n].tobytes(), n)

    def test_dcp_storage_writer_and_reader(self):
        try:
            import torch.distributed.checkpoint as dcp
        except ImportError:     # 1.13: torch.distributed._shard.checkpoint
            dcp = None
        if not hasattr(dcp, "save"):
            self.skipTest("torch %s has no dcp.save" % torch.__version__)
        import ckptfs.torch as ct
        p = self.path("dcp")
        sd = {"model": {n: t.clone() for n, t in self.state.items()}}
        dcp.save(sd, storage_writer=ct.StorageWriter(p))
        self.assertEqual(util.ckpt("verify", p).returncode, 0)
        into = {"model": {n: torch.zeros_like(t.view(torch.uint8)).view(
            t.dtype) for n, t in self.state.items()}}
        dcp.load(into, storage_reader=ct.StorageReader(p))
        for n, t in self.state.items():
            self.assertEqual(raw(into["model"][n]), raw(t), n)
        # DCP's own FileSystemReader agrees with what ckptfs read
        fs = self.path("fs")
        dcp.save(sd, checkpoint_id=fs)
        ref = {"model": {n: torch.zeros_like(t.view(torch.uint8)).view(
            t.dtype) for n, t in self.state.items()}}
        dcp.load(ref, checkpoint_id=fs)
        for n in self.state:
            self.assertEqual(raw(ref["model"][n]), raw(into["model"][n]), n)


if __name__ == "__main__":
    util.main()
