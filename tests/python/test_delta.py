"""test_delta.py - delta saves from Python: ckptfs.save(..., base=),
Saver.save_async(..., base=) and ckptfs.torch.StorageWriter(base=) load
back bit-exact against the state saved (NumPy and torch references), store
references and XOR deltas where the base has the frames, respect
full_every, and refuse a base that is gone; ckptfs.diff tells what changed
against an independent NumPy comparison."""
import os
import shutil
import sqlite3

import numpy as np

import ckptfs
import util

torch = util.optional_torch()


def frame_codecs(path):
    """{codec name: frame count} of a checkpoint's index."""
    db = sqlite3.connect("file:%s?immutable=1" % os.path.join(path, "index.db"),
                         uri=True)
    try:
        rows = db.execute("SELECT k.name, count(*) FROM frames AS f JOIN "
                          "codecs AS k ON k.id = f.codec GROUP BY k.name")
        return dict(rows.fetchall())
    finally:
        db.close()


def stored(path):
    return sum(os.path.getsize(os.path.join(path, "data", f))
               for f in os.listdir(os.path.join(path, "data")))


def state0(rng):
    return {"frozen": rng.standard_normal((256, 1024)).astype(np.float32),
            "emb": rng.standard_normal((512, 128)).astype(np.float32),
            "step": np.array(1, dtype=np.int64)}


def train(state, rng, rows=26):
    out = {k: v.copy() for k, v in state.items()}
    idx = rng.choice(out["emb"].shape[0], rows, replace=False)
    out["emb"][idx] += np.float32(0.01)
    out["step"] = out["step"] + 1
    return out


class DeltaSave(util.TempDir):

    def check_same(self, path, state):
        got = ckptfs.load(path)
        self.assertEqual(sorted(got), sorted(state))
        for k, v in state.items():
            self.assertEqual(got[k].dtype, v.dtype, k)
            self.assertEqual(got[k].tobytes(), v.tobytes(), k)

    def test_round_trip(self):
        rng = np.random.default_rng(5)
        s0 = state0(rng)
        s1 = train(s0, rng)
        ckptfs.save(self.path("s0"), s0, frame_size=16384)
        ckptfs.save(self.path("s1"), s1, frame_size=16384,
                    base=self.path("s0"))
        self.check_same(self.path("s0"), s0)
        self.check_same(self.path("s1"), s1)
        codecs = frame_codecs(self.path("s1"))
        self.assertGreater(codecs.get("ref", 0), 0, codecs)
        # 26 of 512 rows changed: far fewer bytes than the full save
        self.assertLess(stored(self.path("s1")), stored(self.path("s0")) / 4)
        # a region read through a delta frame
        with ckptfs.open(self.path("s1")) as r:
            part = r.get_slice("emb")[100:140, 3:9]
        self.assertEqual(np.asarray(part).tobytes(),
                         s1["emb"][100:140, 3:9].tobytes())

    def test_full_every(self):
        rng = np.random.default_rng(6)
        states = [state0(rng)]
        ckptfs.save(self.path("s0"), states[0], frame_size=16384)
        for k in range(1, 4):
            states.append(train(states[-1], rng, rows=300))
            ckptfs.save(self.path("s%d" % k), states[k], frame_size=16384,
                        base=self.path("s%d" % (k - 1)), full_every=2)
        for k, st in enumerate(states):
            self.check_same(self.path("s%d" % k), st)
        # with full_every=2 a frame is never an XOR of an XOR: s2 stores
        # the frames s1 stored as xor whole again
        self.assertGreater(frame_codecs(self.path("s1")).get("xor", 0), 0)
        self.assertEqual(frame_codecs(self.path("s2")).get("xor", 0), 0)

    def test_async(self):
        rng = np.random.default_rng(7)
        s0 = state0(rng)
        s1 = train(s0, rng)
        ckptfs.save(self.path("s0"), s0)
        base = str(self.path("s0"))
        with ckptfs.Saver() as sv:
            sv.save_async(self.path("s1"), s1, base=base).wait()
        self.check_same(self.path("s1"), s1)
        self.assertGreater(frame_codecs(self.path("s1")).get("ref", 0), 0)

    def test_base_gone(self):
        rng = np.random.default_rng(8)
        s0 = state0(rng)
        ckptfs.save(self.path("s0"), s0)
        ckptfs.save(self.path("s1"), train(s0, rng), base=self.path("s0"))
        shutil.move(self.path("s0"), self.path("elsewhere"))
        with self.assertRaises(ckptfs.CheckpointError) as cm:
            ckptfs.load(self.path("s1"))
        self.assertIn("'s0' is missing", str(cm.exception))
        with self.assertRaises(ckptfs.CheckpointError):
            ckptfs.save(self.path("s2"), s0, base=self.path("s0"))
        self.assertFalse(os.path.exists(self.path("s2")))

    def test_diff(self):
        rng = np.random.default_rng(9)
        s0 = state0(rng)
        s1 = train(s0, rng)
        s1["new"] = np.arange(5, dtype=np.int16)
        ckptfs.save(self.path("s0"), s0, frame_size=16384)
        ckptfs.save(self.path("s1"), s1, frame_size=16384,
                    base=self.path("s0"))
        got = {e["fqn"]: e for e in ckptfs.diff(self.path("s0"),
                                                self.path("s1"))}
        self.assertEqual(got["frozen"]["status"], "equal")
        self.assertTrue(got["frozen"]["same_layout"])
        self.assertEqual(got["new"]["status"], "only_b")
        e = got["emb"]
        self.assertEqual(e["status"], "changed")
        a, b = s0["emb"].astype(np.float64), s1["emb"].astype(np.float64)
        self.assertEqual(e["changed_elems"], int((a != b).sum()))
        rows = np.flatnonzero((a != b).any(axis=1))
        self.assertEqual(e["changed_frames"],
                         len(set(int(r) * 512 // 16384 for r in rows)))
        self.assertAlmostEqual(e["max_abs"], float(np.abs(b - a).max()),
                               places=12)
        rel = np.sqrt(((b - a) ** 2).sum() / (a ** 2).sum())
        self.assertAlmostEqual(e["rel_l2"] / rel, 1.0, places=9)
        self.assertEqual(got["step"]["status"], "changed")
        self.assertNotIn("max_abs", got["step"])

    def test_storage_writer(self):
        if torch is None:
            self.skipTest("torch is not usable here")
        import ckptfs.torch as ct
        try:
            from torch.distributed.checkpoint import save_state_dict
        except ImportError:
            from torch.distributed._shard.checkpoint import save_state_dict
        g = torch.Generator().manual_seed(3)
        sd0 = {"w": torch.randn(2048, 256, generator=g),   # 2 frames
               "v": torch.randn(64, generator=g).to(torch.bfloat16)}
        sd1 = {"w": sd0["w"].clone(), "v": sd0["v"].clone()}
        sd1["w"][10] += 1
        sd1["v"][::8] *= 2
        save_state_dict(sd0, ct.StorageWriter(self.path("d0")), no_dist=True)
        save_state_dict(sd1, ct.StorageWriter(self.path("d1"),
                                              base=self.path("d0")),
                        no_dist=True)
        codecs = frame_codecs(self.path("d1"))
        self.assertEqual(codecs.get("ref", 0), 1, codecs)   # w's 2nd frame
        # w's 1st frame; v (every 8th element doubled) too
        self.assertEqual(codecs.get("xor", 0), 2, codecs)
        with ckptfs.open(self.path("d1"), framework="pt") as r:
            for k, v in sd1.items():
                got = r.get_tensor(k)
                self.assertEqual(got.dtype, v.dtype, k)
                self.assertTrue(torch.equal(got, v), k)


if __name__ == "__main__":
    util.main()
