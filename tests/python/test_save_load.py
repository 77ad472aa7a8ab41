"""test_save_load.py - ckptfs.save and ckptfs.load against independent
references: NumPy arrays of every dtype NumPy has (contiguous, transposed,
strided, big-endian, 0-d, empty) and torch tensors of every dtype torch
has (non-contiguous views, parameters), read back by load and, for the
bytes, by the ckpt tool; bf16 and fp8 given as raw bits, widened as torch
and `ckpt unpack` widen them; nested state dicts (int keys, lists, tuples,
plain values, bytes) rebuilt as saved; loading into an existing state in
place; options; and every error the issue lists, each with nothing
committed, the earlier checkpoint unchanged and, for loads, the state to
load into unchanged."""
import errno
import os
import pickle

import numpy as np

import ckptfs
import util

torch = util.optional_torch()      # None: the NumPy tests still run

NP_DTYPES = ["<f8", "<f4", "<f2", "<i8", "<i4", "<i2", "|i1", "<u8", "<u4",
             "<u2", "|u1", "|b1", "<c8", "<c16"]


def rand(dt, shape, rng):
    dt = np.dtype(dt)
    if dt.kind == "c":
        a = (rng.standard_normal(shape) + 1j * rng.standard_normal(shape))
        a = np.asarray(a, dt)
        if a.size > 3:
            a.flat[1], a.flat[2] = complex(np.inf, np.nan), complex(-0.0, 1)
        return a
    if dt.kind == "f":
        a = rng.standard_normal(shape).astype(dt)
        if a.size > 3:
            a.flat[1], a.flat[2] = np.inf, -0.0
        return a
    if dt.kind == "b":
        return rng.random(shape) > 0.5
    info = np.iinfo(dt)
    return rng.integers(info.min, info.max, size=shape, dtype=dt,
                        endpoint=True)


def same(a, b):
    """Deep equality of states: same containers and keys, arrays of the
    same dtype and shape and bits, tensors torch.equal (NaN == NaN)."""
    if isinstance(a, dict):
        return (isinstance(b, dict) and list(a) == list(b)
                and all(same(a[k], b[k]) for k in a))
    if isinstance(a, (list, tuple)):
        return (type(b) is type(a) and len(a) == len(b)
                and all(same(x, y) for x, y in zip(a, b)))
    if isinstance(a, np.ndarray):
        return (isinstance(b, np.ndarray) and a.dtype == b.dtype
                and a.shape == b.shape
                and a.tobytes() == np.ascontiguousarray(b).tobytes())
    if torch is not None and isinstance(a, torch.Tensor):
        return (isinstance(b, torch.Tensor) and a.dtype == b.dtype
                and a.shape == b.shape and bits(a) == bits(b))
    if isinstance(a, np.generic):
        return type(a) is type(b) and a.tobytes() == b.tobytes()
    return type(a) is type(b) and a == b


def bits(t):
    t = t.detach().contiguous().reshape(-1)
    return t.view(torch.uint8).numpy().tobytes() if t.numel() else b""


def le_bytes(a):
    return np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("<")).tobytes()


class Base(util.TempDir):
    def setUp(self):
        super().setUp()
        self.rng = np.random.default_rng(12)
        self.prev = self.path("prev")
        ckptfs.save(self.prev, {"w": np.arange(10.0)}, meta={"step": 1})
        self.prev_snap = util.snapshot(self.prev)

    def tearDown(self):
        self.assertUnchanged(self.prev_snap, self.prev, "(the earlier "
                             "checkpoint)")
        super().tearDown()

    def cat(self, ck, name):
        return util.ckpt("cat", ck, name, check=True).stdout


class NumPy(Base):
    def test_every_dtype_and_layout(self):
        state = {}
        for dt in NP_DTYPES:
            key = np.dtype(dt).name
            base = rand(dt, (37, 29), self.rng)
            state[key] = {"plain": base, "transposed": base.T,
                          "strided": rand(dt, (9, 40, 3), self.rng)[::2, 5:31:3],
                          "scalar": rand(dt, (), self.rng),
                          "empty": rand(dt, (0, 7), self.rng)}
            if np.dtype(dt).itemsize > 1:
                state[key]["big_endian"] = base.astype(
                    np.dtype(dt).newbyteorder(">"))
        ck = self.path("ck")
        ckptfs.save(ck, state, frame_size=4096)
        back = ckptfs.load(ck)
        for key, group in state.items():
            for name, a in group.items():
                b = back[key][name]
                self.assertEqual(b.shape, a.shape, (key, name))
                self.assertEqual(b.dtype, a.dtype.newbyteorder("="),
                                 (key, name))
                self.assertEqual(le_bytes(b), le_bytes(a), (key, name))
                # the C tool reads the same row-major little-endian bytes
                self.assertEqual(self.cat(ck, "%s.%s" % (key, name)),
                                 le_bytes(a), (key, name))
        with ckptfs.open(ck) as f:
            self.assertEqual(f.info("float32.plain").dtype, "f32")
            self.assertGreater(f.info("float64.plain").nframes, 1)

    def test_raw_bits_bf16_fp8(self):
        bf = self.rng.integers(0, 1 << 16, (33, 5), dtype=np.uint16)
        f8 = np.arange(256, dtype=np.uint8).reshape(16, 16)
        state = {"bf": ckptfs.Raw(bf, "bf16"),
                 "e4m3": ckptfs.Raw(f8, "f8e4m3"),
                 "e5m2": ckptfs.Raw(f8.T, "float8_e5m2")}
        ck = self.path("ck")
        ckptfs.save(ck, state)
        with ckptfs.open(ck) as f:
            self.assertEqual([f.info(k).dtype for k in ("bf", "e4m3", "e5m2")],
                             ["bf16", "f8e4m3", "f8e5m2"])
        raw = ckptfs.load(ck, widen=False)
        self.assertTrue(same(raw["bf"], bf))
        self.assertTrue(same(raw["e4m3"], f8))
        self.assertTrue(same(raw["e5m2"], np.ascontiguousarray(f8.T)))
        wide = ckptfs.load(ck)
        # bf16 widened: the bits shifted into a float32, as torch does
        want = (bf.astype(np.uint32) << 16).view(np.float32)
        self.assertTrue(same(wide["bf"], want))
        # fp8 widened as the C tool widens them (`ckpt unpack`, src/npy.c)
        out = self.path("unpacked")
        util.ckpt("unpack", ck, out, check=True)
        for k in ("e4m3", "e5m2"):
            ref = np.load(os.path.join(out, k + ".npy"))
            self.assertEqual(ref.dtype, np.float32)
            np.testing.assert_array_equal(wide[k], ref, err_msg=k)

    def test_nested_structure_and_values(self):
        state = {
            "model": {"layers.0.weight": rand("<f4", (4, 3), self.rng),
                      "layers": [rand("<f2", (2,), self.rng),
                                 (rand("<i8", (3,), self.rng), 7)]},
            "optim": {"state": {0: {"step": np.array(3, np.int64)},
                                1: {}},
                      "param_groups": [{"lr": 1e-3, "betas": (0.9, 0.999),
                                        "eps": 1e-8, "amsgrad": False,
                                        "name": None, "params": [0, 1]}]},
            "rng": b"\x00\xffstate",
            "cursor": bytearray(b"pos=17"),
            "epoch": 3, "tag": "run-a", "nan": float("nan") != 0,
            "np_scalar": np.float32(2.5),
            "empty": {}, "nothing": [],
        }
        ck = self.path("ck")
        ckptfs.save(ck, state)
        back = ckptfs.load(ck)
        self.assertTrue(same(state, back), (state, back))
        with ckptfs.open(ck) as f:
            self.assertIn("model.layers.0.weight", f.keys())
            self.assertIn("model.layers.1.0", f.keys())
            self.assertIn("optim.state.0.step", f.keys())
            self.assertEqual(f.get_tensor("rng"), b"\x00\xffstate")
            self.assertNotIn("epoch", f.keys())     # plain values: metadata

    def test_meta_and_options(self):
        a = rand("<f4", (300, 300), self.rng)
        for codec, frames, want in (("raw", 8192, "raw"),
                                    ("zstd:3", 65536, "zstd"),
                                    ("auto", None, "")):
            ck = self.path("ck-" + codec.replace(":", ""))
            ckptfs.save(ck, {"a": a}, codec=codec, frame_size=frames,
                        threads=2, meta={"step": 100, "note": "x y"})
            with ckptfs.open(ck) as f:
                self.assertEqual(f.metadata()["step"], "100")
                self.assertEqual(f.metadata()["note"], "x y")
                info = f.info("a")
                self.assertIn(want, info.codec)
                if frames:
                    self.assertEqual(info.nframes, -(-a.nbytes // frames))
                np.testing.assert_array_equal(f.get_tensor("a"), a)
        with self.assertRaises(ValueError):
            ckptfs.save(self.path("bad"), {"a": a}, codec="lz4")
        self.assertFalse(os.path.exists(self.path("bad")))

    def test_pickle_only_when_asked(self):
        state = {"obj": {"set": {1, 2, 3}}, "a": np.ones(3)}
        ck = self.path("ck")
        with self.assertRaises(ckptfs.UnsupportedError) as cm:
            ckptfs.save(ck, state)
        self.assertIn("'obj.set'", str(cm.exception))
        self.assertIn("allow_pickle=True", str(cm.exception))
        self.assertFalse(os.path.exists(ck))
        ckptfs.save(ck, state, allow_pickle=True)
        with self.assertRaises(ckptfs.UnsupportedError) as cm:
            ckptfs.load(ck)
        self.assertIn("runs code", str(cm.exception))
        back = ckptfs.load(ck, allow_pickle=True)
        self.assertEqual(back["obj"]["set"], {1, 2, 3})
        with ckptfs.open(ck) as f:     # a byte object holding the pickle
            self.assertEqual(pickle.loads(f.get_tensor("obj.set")),
                             {1, 2, 3})

    def test_load_into_in_place(self):
        a = rand("<f4", (6, 5), self.rng)
        bf = self.rng.integers(0, 1 << 16, (4,), dtype=np.uint16)
        ck = self.path("ck")
        ckptfs.save(ck, {"a": a, "t": a.T, "bf": ckptfs.Raw(bf, "bf16"),
                         "g": [{"lr": 0.5}, ("x", 2)], "b": b"blob"})
        big = np.zeros((8, 10), np.float32)
        into = {"a": np.zeros((6, 5), np.float32),
                "t": big[1:6, 2:8],                    # a strided view
                "bf": np.zeros(4, np.float32),
                "g": [{"lr": 0.0}, ("y", 0)], "b": None}
        dest_a, dest_t = into["a"], into["t"]
        self.assertEqual(dest_t.shape, (5, 6))
        got = ckptfs.load(ck, into=into)
        self.assertIs(got, into)
        self.assertIs(into["a"], dest_a)             # filled, not replaced
        np.testing.assert_array_equal(dest_a, a)
        np.testing.assert_array_equal(big[1:6, 2:8], a.T)
        self.assertEqual(np.count_nonzero(big[0]), 0)  # nothing outside
        np.testing.assert_array_equal(into["bf"], (bf.astype(np.uint32)
                                                   << 16).view(np.float32))
        self.assertEqual(into["g"], [{"lr": 0.5}, ("x", 2)])
        self.assertEqual(into["b"], b"blob")
        bits_into = {"bf": np.zeros(4, np.uint16)}
        ckptfs.load(ck, into=bits_into)
        np.testing.assert_array_equal(bits_into["bf"], bf)


class Batch(Base):
    """Loads read every tensor of the state in one ckpt_read_batch, the
    decoding shared among the reader's threads: many tensors, small and
    of several frames, come back bit for bit, new and in place; regions
    of a batch are NumPy's slices; a damaged frame fails the load."""

    def state(self):
        rng = self.rng
        layers = [{"w": rand("<f4", (int(rng.integers(1, 300)), 1024), rng),
                   "b": rand("<f2", (1024,), rng),
                   "n": rand("<i8", (3,), rng)} for _ in range(16)]
        return {"layers": layers, "emb": rand("<f4", (700, 1024), rng),
                "empty": np.zeros((0, 4), np.float32)}

    def test_many_tensors_new_and_in_place(self):
        state = self.state()
        ck = self.path("ck")
        ckptfs.save(ck, state)
        for threads in (1, 4):
            self.assertTrue(same(ckptfs.load(ck, threads=threads), state))
            into = {"layers": [{k: np.full_like(v, 7) for k, v in d.items()}
                               for d in state["layers"]],
                    "emb": np.zeros((700, 1024), np.float32),
                    "empty": np.zeros((0, 4), np.float32)}
            dest = into["emb"]
            ckptfs.load(ck, into=into, threads=threads)
            self.assertIs(into["emb"], dest)
            self.assertTrue(same(into, state))

    def test_regions_of_a_batch(self):
        from ckptfs._reader import Reader
        state = self.state()
        ck = self.path("ck")
        ckptfs.save(ck, state)
        r = Reader(ck, 4)
        try:
            want, items = [], []
            for k in range(12):
                name = "layers.%d.w" % k if k % 3 else "emb"
                a = state["emb"] if k % 3 == 0 else state["layers"][k]["w"]
                lo = int(self.rng.integers(0, a.shape[0]))
                hi = int(self.rng.integers(lo, a.shape[0])) + 1
                c0 = int(self.rng.integers(0, 1000))
                ref = a[lo:hi, c0:c0 + 24]
                out = np.full(ref.shape, -1, ref.dtype)
                want.append((ref, out))
                items.append((r.index(name), out.ctypes.data, [lo, c0],
                              list(ref.shape)))
            r.read_batch(items)
            for ref, out in want:
                np.testing.assert_array_equal(out, ref)
            bad = items[:2] + [(r.index("emb"), want[0][1].ctypes.data,
                                [699, 0], [2, 1])]
            with self.assertRaises(OSError) as cm:
                r.read_batch(bad)
            self.assertEqual(cm.exception.errno, errno.EINVAL)
            self.assertIn("item 2 of 3", str(cm.exception))
        finally:
            r.close()

    def test_damaged_frame_fails_the_load(self):
        ck = self.path("ck")
        emb = rand("<f4", (700, 1024), self.rng)
        ckptfs.save(ck, {"emb": emb, "b": np.arange(5.0)}, codec="raw")
        shard = os.path.join(ck, "data", os.listdir(os.path.join(ck, "data"))[0])
        with open(shard, "r+b") as f:
            f.seek(1 << 20)            # inside emb's second frame
            byte = f.read(1)
            f.seek(1 << 20)
            f.write(bytes([byte[0] ^ 0x10]))
        with self.assertRaises(OSError) as cm:
            ckptfs.load(ck, threads=4)
        self.assertEqual(cm.exception.errno, errno.EIO)
        self.assertIn("emb", str(cm.exception))
        self.assertIn("checksum", str(cm.exception))


class Errors(Base):
    """Every error of the issue: a clear exception, nothing committed, the
    earlier checkpoint (checked in tearDown) unchanged."""

    def test_committed_target(self):
        with self.assertRaises(FileExistsError) as cm:
            ckptfs.save(self.prev, {"w": np.zeros(3)})
        self.assertIsInstance(cm.exception, ckptfs.CheckpointError)
        self.assertEqual(cm.exception.errno, errno.EEXIST)
        self.assertIn("already a committed checkpoint", str(cm.exception))
        again = pickle.loads(pickle.dumps(cm.exception))   # DCP pickles it
        self.assertIs(type(again), type(cm.exception))
        self.assertEqual((again.errno, str(again)),
                         (errno.EEXIST, str(cm.exception)))

    def test_unfinished_target(self):
        ck = self.path("ck")
        os.makedirs(os.path.join(ck, ".pending"))
        snap = util.snapshot(ck)
        with self.assertRaises(ckptfs.CheckpointError) as cm:
            ckptfs.save(ck, {"w": np.zeros(3)})
        self.assertEqual(cm.exception.errno, errno.EBUSY)
        self.assertIn("unfinished save", str(cm.exception))
        self.assertUnchanged(snap, ck)
        with self.assertRaises(ckptfs.CheckpointError) as cm:
            ckptfs.load(ck)
        self.assertIn(ck, str(cm.exception))

    def test_unsupported_dtype(self):
        ck = self.path("ck")
        with self.assertRaises(ckptfs.UnsupportedError) as cm:
            ckptfs.save(ck, {"ok": np.ones(3), "z": {"c": np.zeros(
                2, np.clongdouble)}})
        self.assertIn("'z.c'", str(cm.exception))
        self.assertIn(np.dtype(np.clongdouble).name, str(cm.exception))
        self.assertFalse(os.path.exists(ck))

    def test_object_without_pickle(self):
        ck = self.path("ck")
        with self.assertRaises(ckptfs.UnsupportedError) as cm:
            ckptfs.save(ck, {"ok": np.ones(3), "cfg": object()})
        self.assertIn("'cfg'", str(cm.exception))
        self.assertFalse(os.path.exists(ck))

    def test_names_that_collide_or_are_refused(self):
        ck = self.path("ck")
        with self.assertRaises(ckptfs.UnsupportedError) as cm:
            ckptfs.save(ck, {"a.b": np.ones(1), "a": {"b": np.ones(1)}})
        self.assertIn("'a.b'", str(cm.exception))
        with self.assertRaises(ckptfs.UnsupportedError):
            ckptfs.save(ck, {(1, 2): np.ones(1)})
        with self.assertRaises(ckptfs.CheckpointError) as cm:
            ckptfs.save(ck, {"a/b": np.ones(1)})      # the library refuses
        self.assertEqual(cm.exception.errno, errno.EINVAL)
        self.assertIn("a/b", str(cm.exception))
        with self.assertRaises(ckptfs.CheckpointError) as cm:
            ckptfs.save(ck, {"w": np.ones(2)}, meta={"created": "now"})
        self.assertIn("reserved", str(cm.exception))
        self.assertFalse(os.path.exists(ck))

    def test_nonexistent_path(self):
        with self.assertRaises(FileNotFoundError) as cm:
            ckptfs.load(self.path("nope"))
        self.assertIsInstance(cm.exception, ckptfs.CheckpointError)
        self.assertIn(self.path("nope"), str(cm.exception))
        with self.assertRaises(FileNotFoundError):
            ckptfs.open(self.path("nope"))

    def _into(self):
        return {"w": np.full(10, 7.0), "x": np.full(2, 5.0)}

    def test_missing_key_on_load(self):
        into = self._into()
        with self.assertRaises(ckptfs.MissingKeyError) as cm:
            ckptfs.load(self.prev, into=into)
        self.assertIsInstance(cm.exception, KeyError)
        self.assertIn("'x' is not in the checkpoint", str(cm.exception))
        self.assertTrue(same(into, self._into()), "into was changed")

    def test_dtype_mismatch_on_load(self):
        into = {"w": np.zeros(10, np.float32)}
        with self.assertRaises(ckptfs.MismatchError) as cm:
            ckptfs.load(self.prev, into=into)
        self.assertIn("dtype f64 in the checkpoint, float32", str(
            cm.exception))
        self.assertEqual(np.count_nonzero(into["w"]), 0)

    def test_shape_mismatch_on_load(self):
        into = {"w": np.full((2, 5), 7.0)}
        with self.assertRaises(ckptfs.MismatchError) as cm:
            ckptfs.load(self.prev, into=into)
        self.assertIn("shape [10] in the checkpoint, [2, 5]",
                      str(cm.exception))
        self.assertTrue((into["w"] == 7.0).all())


class Torch(Base):
    def setUp(self):
        if torch is None:
            self.skipTest("no torch here")
        super().setUp()
        torch.manual_seed(3)

    def dtypes(self):
        names = ["float64", "float32", "float16", "bfloat16", "int64",
                 "int32", "int16", "int8", "uint8", "bool", "uint16",
                 "uint32", "uint64", "float8_e4m3fn", "float8_e5m2",
                 "complex64", "complex128", "complex32", "float8_e4m3fnuz",
                 "float8_e5m2fnuz", "float8_e8m0fnu"]
        return [getattr(torch, n) for n in names if hasattr(torch, n)]

    def make(self, dt, shape):
        if dt == torch.bool:
            return torch.rand(shape) > 0.5
        if dt.is_complex:
            return torch.randn(shape, dtype=torch.complex64).to(dt)
        if dt.is_floating_point:
            return torch.randn(shape).to(dt)
        info = torch.iinfo(dt)
        return torch.randint(max(info.min, -2 ** 62), min(info.max, 2 ** 62),
                             shape, dtype=dt)

    def test_every_dtype_and_layout(self):
        state = {}
        for dt in self.dtypes():
            base = self.make(dt, (23, 17))
            state[str(dt)[6:]] = {
                "plain": base, "t": base.t(), "cols": base[:, 3:11:2],
                "scalar": self.make(dt, ()), "empty": self.make(dt, (0, 4)),
                "expanded": self.make(dt, (1, 5)).expand(3, 5)}
        state["param"] = torch.nn.Parameter(torch.randn(4, 4))
        ck = self.path("ck")
        ckptfs.save(ck, state, frame_size=4096)
        back = ckptfs.load(ck)
        self.assertEqual(set(back), set(state))
        for key, group in state.items():
            if key == "param":
                self.assertTrue(torch.equal(back[key], group.detach()))
                continue
            for name, t in group.items():
                self.assertTrue(same(t.contiguous(), back[key][name]),
                                (key, name))
                self.assertEqual(self.cat(ck, "%s.%s" % (key, name)),
                                 bits(t))
        np_back = ckptfs.load(ck, framework="np")
        self.assertIsInstance(np_back["float32"]["plain"], np.ndarray)
        np.testing.assert_array_equal(np_back["bfloat16"]["t"],
                                      state["bfloat16"]["t"].float().numpy())

    def test_load_into_torch(self):
        a = torch.randn(5, 6)
        bf = torch.randn(7).to(torch.bfloat16)
        ck = self.path("ck")
        ckptfs.save(ck, {"a": a, "bf": bf, "s": torch.tensor(4)})
        big = torch.zeros(6, 8)
        into = {"a": big[:5, 1:7], "bf": torch.zeros(7, dtype=torch.bfloat16),
                "s": torch.tensor(0)}
        dest_bf = into["bf"]
        ckptfs.load(ck, into=into)
        self.assertTrue(torch.equal(big[:5, 1:7], a))
        self.assertEqual(big[5].abs().sum().item(), 0)
        self.assertIs(into["bf"], dest_bf)
        self.assertTrue(torch.equal(dest_bf, bf))
        self.assertEqual(into["s"].item(), 4)
        with self.assertRaises(ckptfs.MismatchError):
            ckptfs.load(ck, into={"bf": torch.zeros(7)})    # f32 != bf16

    def test_load_to_device(self):
        """load(device=) gives torch tensors on that device, read straight
        into them (one ckpt_load_batch), equal to the saved ones; values
        that are not tensors stay as they are.  Here the device is the
        CPU; tests/gpu/torch_gpu.py does the same with "cuda"."""
        state = {"w": torch.randn(40, 30), "b": torch.randn(9).to(
            torch.bfloat16), "n": np.arange(12, dtype=np.int16),
            "e": torch.zeros(0, 3), "lr": 0.5, "tag": b"x"}
        ck = self.path("ck")
        ckptfs.save(ck, state)
        back = ckptfs.load(ck, device="cpu")
        self.assertEqual(set(back), set(state))
        for k in ("w", "b", "e"):
            self.assertIsInstance(back[k], torch.Tensor)
            self.assertTrue(same(state[k], back[k]), k)
        self.assertIsInstance(back["n"], torch.Tensor)   # NumPy saved: torch
        self.assertTrue(np.array_equal(back["n"].numpy(), state["n"]))
        self.assertEqual(back["lr"], 0.5)
        self.assertEqual(back["tag"], b"x")
        # A foreign checkpoint (a flat dict): the same.
        st = self.path("m.safetensors")
        util.ckpt("export", ck, st, "--tensors", "w,b", check=True)
        flat = ckptfs.load(st, device=torch.device("cpu"))
        self.assertEqual(sorted(flat), ["b", "w"])
        self.assertTrue(same(state["w"], flat["w"]))
        self.assertTrue(same(state["b"], flat["b"]))
        with self.assertRaises(ValueError) as cm:
            ckptfs.load(ck, into=state, device="cpu")
        self.assertIn("device= is for a new state", str(cm.exception))
        with self.assertRaises(ValueError) as cm:
            ckptfs.load(ck, framework="np", device="cpu")
        self.assertIn("framework='np'", str(cm.exception))

    def test_unsupported_dtype(self):
        # A dtype ckptfs has no equivalent for: bits8 (torch 2.1+), else a
        # quantized tensor (torch 1.13 has no dense dtype ckptfs lacks).
        ck = self.path("ck")
        if hasattr(torch, "bits8"):
            z, want = torch.zeros(3, dtype=torch.uint8).view(torch.bits8), \
                "torch.bits8"
        else:
            z, want = torch.quantize_per_tensor(
                torch.ones(3), 0.1, 0, torch.qint8), "only dense tensors"
        with self.assertRaises(ckptfs.UnsupportedError) as cm:
            ckptfs.save(ck, {"a": torch.ones(2), "z": z})
        self.assertIn(want, str(cm.exception))
        self.assertFalse(os.path.exists(ck))


if __name__ == "__main__":
    util.main()
