"""test_open.py - ckptfs.open, the lazy reader: get_slice against NumPy's
own indexing of the reference array, for random keys (integers, negative
indices, slices with positive and negative steps, Ellipsis) over every
dtype (bf16 and fp8 as raw bits and widened), single-chunk tensors
(ckptfs.save) and tensors cut in a grid of chunks (`ckpt pack --grid`),
with framework "np" and "pt"; the reader's statistics showing that a small
slice of a large tensor decodes exactly the frames it touches (computed
here from the frame table); keys, metadata, info, frames; PyTorch DCP
directories and safetensors files read the same way and compared with what
torch itself loads and with the file's bytes; index errors."""
import os

import numpy as np

import ckptfs
import util

torch = util.optional_torch()
NP_DTYPES = ["<f8", "<f4", "<f2", "<i8", "<i4", "<i2", "|i1", "<u8", "<u4",
             "<u2", "|u1", "|b1"]
RAW = {"bf16": np.uint16, "f8e4m3": np.uint8, "f8e5m2": np.uint8}


def rand(dt, shape, rng):
    dt = np.dtype(dt)
    if dt.kind == "b":
        return rng.random(shape) > 0.5
    if dt.kind == "f":
        return rng.standard_normal(shape).astype(dt)
    info = np.iinfo(dt)
    return rng.integers(info.min, info.max, shape, dtype=dt, endpoint=True)


def random_key(shape, rng):
    """A random NumPy basic index of a tensor of `shape`."""
    key = []
    for n in shape:
        r = rng.random()
        if r < 0.2 and n > 0:
            key.append(int(rng.integers(-n, n)))
        elif r < 0.3:
            key.append(slice(None))
        else:
            a, b = sorted(int(x) for x in rng.integers(-n - 2, n + 3, 2))
            step = int(rng.choice([1, 1, 1, 2, 3, -1, -2]))
            key.append(slice(a, b, step) if step > 0 else slice(b, a, step))
    if len(key) > 1 and rng.random() < 0.3:
        at = int(rng.integers(0, len(key)))
        key = key[:at] + [Ellipsis]
    return tuple(key) if len(key) != 1 or rng.random() < 0.5 else key[0]


def widen(bits, name):
    """float32 of raw bf16/fp8 bits, independently of the package: bf16 by
    shifting, fp8 with torch where it has fp8, else the C tool's table."""
    if name == "bf16":
        return (bits.astype(np.uint32) << 16).view(np.float32)
    return None


class Slices(util.TempDir):
    def setUp(self):
        super().setUp()
        self.rng = np.random.default_rng(5)

    def check_slices(self, ck, refs, n=40, frameworks=("np", "pt")):
        """refs: name -> (reference array, widened reference or None)."""
        for fw in frameworks:
            if fw == "pt" and torch is None:
                continue
            with ckptfs.open(ck, framework=fw) as f, \
                    ckptfs.open(ck, widen=False) as raw:
                for name, (ref, wide) in refs.items():
                    s = f.get_slice(name)
                    self.assertEqual(s.get_shape(), list(ref.shape))
                    for _ in range(n):
                        key = random_key(ref.shape, self.rng)
                        want = ref[key]
                        got = raw.get_slice(name)[key]
                        self.assertEqual(got.shape, want.shape, (name, key))
                        self.assertEqual(got.tobytes(), np.ascontiguousarray(
                            want).tobytes(), (name, key))
                        got = s[key]
                        expect = (wide if wide is not None else ref)[key]
                        if fw == "pt":
                            self.assertIsInstance(got, torch.Tensor)
                            # NumPy has no bf16 or fp8 (torch 2.x gives
                            # fp8 tensors): compare widened, exactly
                            narrow = (got.dtype == torch.bfloat16 or (
                                got.is_floating_point()
                                and got.element_size() == 1))
                            got = (got.float() if narrow else got).numpy()
                        self.assertEqual(got.shape, expect.shape, (name, key))
                        np.testing.assert_array_equal(got, expect,
                                                      err_msg=str((name, key)))

    def test_every_dtype_single_chunk(self):
        refs, state = {}, {}
        for dt in NP_DTYPES:
            a = rand(dt, (13, 11, 7), self.rng)
            state[np.dtype(dt).name] = a
            refs[np.dtype(dt).name] = (a, None)
        for name, store in RAW.items():
            bits = self.rng.integers(0, np.iinfo(store).max, (17, 9),
                                     dtype=store, endpoint=True)
            if name != "bf16":
                bits[bits & 0x7F == 0x7F] = 0     # no NaN bit patterns
            state[name] = ckptfs.Raw(bits, name)
            refs[name] = (bits, None)
        ck = self.path("ck")
        ckptfs.save(ck, state, frame_size=4096, codec="zstd")
        # widened references: bf16 by hand, fp8 from the C tool's unpack
        util.ckpt("unpack", ck, self.path("un"), check=True)
        for name in RAW:
            refs[name] = (refs[name][0], widen(refs[name][0], name)
                          if name == "bf16" else
                          np.load(self.path("un", name + ".npy")))
        self.check_slices(ck, refs, frameworks=("np",))
        if torch is not None:
            pt = {k: v for k, v in refs.items()
                  if k not in ("uint16", "uint32", "uint64", "f8e4m3",
                               "f8e5m2") or hasattr(torch, "uint16")}
            self.check_slices(ck, pt, n=15, frameworks=("pt",))

    def test_grid_of_chunks(self):
        refs, args = {}, []
        for i, dt in enumerate(["<f4", "<i8", "|b1", "<f2"]):
            a = rand(dt, (50, 31), self.rng)
            f = self.path("t%d.npy" % i)
            np.save(f, a)
            args.append("t%d=%s" % (i, f))
            refs["t%d" % i] = (a, None)
        bits = self.rng.integers(0, 1 << 16, (40, 12), dtype=np.uint16)
        bits.tofile(self.path("bf.raw"))
        args.append("bf=%s:bf16:40,12" % self.path("bf.raw"))
        refs["bf"] = (bits, widen(bits, "bf16"))
        ck = self.path("ck")
        util.ckpt("pack", "--grid", "3x2", "--frame-size", "4K", ck, *args,
                  check=True)
        with ckptfs.open(ck) as f:
            self.assertEqual(len(f.info("t0").chunks), 6)
        self.check_slices(ck, refs)

    def test_only_touched_frames_are_decoded(self):
        # 2048 x 1024 f32 (8 MiB) in 64 KiB zstd frames: 16 rows per frame
        a = (np.arange(2048 * 1024) % 97).astype(np.float32).reshape(2048,
                                                                   1024)
        ck = self.path("ck")
        ckptfs.save(ck, {"big": a}, codec="zstd", frame_size=65536)
        with ckptfs.open(ck) as f:
            frames = f.frames("big")
            self.assertEqual(len(frames), 128)
            self.assertTrue(all(fr.codec == "zstd" for fr in frames))
            row = 1024 * 4
            for rows, cols in ((slice(100, 104), slice(5, 9)),
                               (slice(15, 17), slice(1000, 1024)),
                               (slice(700, 701), slice(None))):
                touched = set()
                for r in range(rows.start, rows.stop):
                    lo = r * row + (cols.start or 0) * 4
                    hi = r * row + (cols.stop or 1024) * 4
                    touched |= {k for k, fr in enumerate(frames)
                                if fr.raw_offset < hi
                                and lo < fr.raw_offset + fr.raw_size}
                before = f.stats()
                got = f.get_slice("big")[rows, cols]
                after = f.stats()
                np.testing.assert_array_equal(got, a[rows, cols])
                self.assertEqual(after["frames_decoded"]
                                 - before["frames_decoded"], len(touched),
                                 (rows, cols, sorted(touched)))
                self.assertEqual(after["bytes_read"] - before["bytes_read"],
                                 sum(frames[k].stored_size for k in touched))
            self.assertLess(f.stats()["bytes_read"], a.nbytes // 20)

    def test_listing_and_errors(self):
        a = rand("<f4", (6, 4), self.rng)
        ck = self.path("ck")
        ckptfs.save(ck, {"m": {"a": a}, "blob": b"xyz"}, meta={"step": 9})
        f = ckptfs.open(ck)
        self.assertEqual(f.format, "ckptfs")
        self.assertEqual(f.keys(), ["blob", "m.a"])
        self.assertIn("m.a", f)
        self.assertEqual(f.metadata()["step"], "9")
        info = f.info("m.a")
        self.assertEqual((info.dtype, info.shape, info.nbytes),
                         ("f32", (6, 4), 96))
        self.assertEqual(info.chunks[0].file, "data/rank0.shard")
        self.assertEqual(f.get_tensor("blob"), b"xyz")
        s = f.get_slice("m.a")
        self.assertEqual((s.shape, s.dtype, len(s)), ((6, 4), "f32", 6))
        np.testing.assert_array_equal(s[-1, ...], a[-1])
        np.testing.assert_array_equal(s[2, 3], a[2, 3])
        self.assertEqual(s[2, 3].shape, ())
        with self.assertRaises(IndexError):
            s[6]
        with self.assertRaises(IndexError):
            s[0, 0, 0]
        with self.assertRaises(TypeError):
            s[[0, 1]]
        with self.assertRaises(TypeError):
            f.get_slice("blob")[0:1]
        with self.assertRaises(ckptfs.MissingKeyError):
            f.get_tensor("nope")
        with self.assertRaises(ValueError):
            ckptfs.open(ck, framework="jax")
        f.close()
        with self.assertRaises(ValueError):
            f.keys()

    def test_follow_links(self):
        """A shard that is a symbolic link out of the checkpoint is refused
        (docs/TRUST.md) unless follow_links=True, as in the C library."""
        a = rand("<f4", (64, 8), self.rng)
        ck, away = self.path("ck"), self.path("elsewhere.shard")
        ckptfs.save(ck, {"a": a})
        shard = os.path.join(ck, "data", "rank0.shard")
        os.rename(shard, away)
        os.symlink(away, shard)
        with self.assertRaises(ckptfs.CheckpointError) as cm:
            with ckptfs.open(ck) as f:
                f.get_tensor("a")
        self.assertIn("rank0.shard", str(cm.exception))
        with ckptfs.open(ck, follow_links=True) as f:
            np.testing.assert_array_equal(f.get_tensor("a"), a)


class Foreign(util.TempDir):
    """DCP directories and safetensors files, read by the C reader."""

    def test_dcp_directory(self):
        if torch is None:
            self.skipTest("no torch here")
        import dcp_ref
        dcp = self.path("dcp")
        dcp_ref.save1(dcp)
        want = dcp_ref.torch_load(dcp)
        rng = np.random.default_rng(1)
        with ckptfs.open(dcp, framework="pt") as f:
            self.assertEqual(f.format, "dcp")
            self.assertEqual(sorted(f.keys()), sorted(want))
            for name, t in want.items():
                got = f.get_tensor(name)
                if not isinstance(t, torch.Tensor):    # a BytesIO item
                    self.assertIsInstance(got, bytes)
                    continue
                self.assertTrue(torch.equal(got, t.contiguous()), name)
                ref = (t.float() if t.dtype == torch.bfloat16 else t).numpy()
                for _ in range(10 if t.dim() else 0):
                    key = random_key(ref.shape, rng)
                    got = f.get_slice(name)[key]
                    got = (got.float() if got.dtype == torch.bfloat16
                           else got).numpy()
                    np.testing.assert_array_equal(got, ref[key],
                                                  err_msg=str((name, key)))

    def test_safetensors_file(self):
        import importlib
        import sys
        sys.path.insert(0, util.HELPERS)
        if torch is None:
            self.skipTest("dcp_ref needs torch")
        dcp_ref = importlib.import_module("dcp_ref")
        st = self.path("model.safetensors")
        dcp_ref.st1(st)
        rng = np.random.default_rng(2)
        with ckptfs.open(st, widen=False) as f:
            self.assertEqual(f.format, "safetensors")
            self.assertIn("written by dcp_ref.py", str(f.metadata()))
            tensors = dcp_ref.st_read(st)
            self.assertEqual(sorted(f.keys()), sorted(n for n, _, _ in
                                                      tensors))
            for name, _, arr in tensors:
                got = f.get_tensor(name)
                self.assertEqual(got.tobytes(), arr.tobytes(), name)
                for _ in range(8 if arr.ndim else 0):
                    key = random_key(arr.shape, rng)
                    self.assertEqual(f.get_slice(name)[key].tobytes(),
                                     np.ascontiguousarray(arr[key]).tobytes(),
                                     (name, key))


if __name__ == "__main__":
    util.main()
