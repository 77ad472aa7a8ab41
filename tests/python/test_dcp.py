"""test_dcp.py - ckptfs.torch as PyTorch DCP's storage backend: 2 gloo
processes save ShardedTensors (rows, columns, uneven rows, a 3-D tensor by
its middle dimension), a replicated tensor and a byte item with
StorageWriter; the result passes `ckpt verify`, `ckpt cat` and reads
through the mount give the reference bytes; 1 and 3 processes load it with
other shardings through StorageReader, every element compared; saves the
planner must refuse (overlap, gap, dtype conflict) and a committed target
fail on every rank with nothing committed and the good checkpoint
unchanged (tests/python/dcp_worker.py runs the ranks); the 2.x call
sequence (reset, validate_checkpoint_id, storage_meta,
set_up_storage_writer/reader with rank kwargs) driven by hand; and
examples/torch_dcp_backend.py."""
import io
import os
import pickle
import shutil
import signal
import subprocess
import sys
import tempfile

import numpy as np

import util

torch = util.need_torch()
import ckptfs  # noqa: E402
import ckptfs.torch as ct  # noqa: E402
import dcp_worker  # noqa: E402

WORKER = os.path.join(util.HERE, "dcp_worker.py")


def ranks(cmd, root, world):
    return util.spawn(lambda r, init: util.python_argv(
        WORKER, cmd, root, r, world, init), world)


def raw(t):
    t = t.contiguous().reshape(-1)
    return t.view(torch.uint8).numpy().tobytes()


class Dcp(util.TempDir):
    @classmethod
    def setUpClass(cls):
        cls.root = tempfile.mkdtemp(prefix="ckpt-dcp-")
        cls.good = os.path.join(cls.root, "good")
        cls.saved = ranks("save", cls.root, 2)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.root, ignore_errors=True)

    def report(self, results, what):
        for rank, (rc, out) in enumerate(results):
            print("---- %s, rank %d (exit %d)\n%s" % (what, rank, rc, out))
            self.assertNotIn("FAIL ", out, "%s rank %d" % (what, rank))
            self.assertEqual(rc, 0, "%s rank %d" % (what, rank))
            self.assertIn("ok ", out)

    def test_save_on_2_ranks_and_refusals(self):
        self.report(self.saved, "save")
        if "SKIP refusals" in self.saved[0][1]:
            self.skipTest(self.saved[0][1].split("SKIP refusals: ")[1]
                          .splitlines()[0])
        # refused by ckptfs's commit: the save's pieces stay pending;
        # torch 2.x's own planner refuses overlaps and holes before
        # anything is written
        for name in ("overlap", "gap", "dtype"):
            self.assertIn(ckptfs.probe(os.path.join(self.root, name)),
                          ("pending", None) if name != "dtype"
                          and int(torch.__version__.split(".")[0]) >= 2
                          else ("pending",), name)

    def test_verify_info_cat(self):
        p = util.ckpt("verify", self.good)
        self.assertEqual(p.returncode, 0, p.stderr.decode())
        self.assertIn(b"ok:", p.stdout)
        ref = dcp_worker.reference()
        for name, t in ref.items():
            self.assertEqual(util.ckpt("cat", self.good, name,
                                       check=True).stdout, raw(t), name)
        # DCP stores a byte item as torch.save of the object
        blob = util.ckpt("cat", self.good, "rng", check=True).stdout
        self.assertEqual(torch.load(io.BytesIO(blob), weights_only=False)
                         .getvalue(), dcp_worker.BYTES)
        info = util.ckpt("info", self.good, "layer.cols", check=True).stdout
        self.assertIn(b"chunks: 2", info)
        self.assertIn(b"data/rank0.shard", info)
        self.assertIn(b"data/rank1.shard", info)
        with ckptfs.open(self.good) as f:
            meta = f.metadata()
            self.assertEqual((meta["step"], meta["world_size"]), ("42", "2"))
            self.assertEqual(f.info("rng").dtype, "bytes")
            self.assertEqual(f.info("layer.replicated").chunks[0].sizes, (9,))

    def test_mount(self):
        if not util.can_mount():
            self.skipTest("no FUSE mount here")
        ref = dcp_worker.reference()
        with util.mounted(self.good, self.path("mnt")) as mnt:
            for name, t in ref.items():
                path = os.path.join(mnt, *name.split("."))
                with open(path, "rb") as f:
                    self.assertEqual(f.read(), raw(t), name)
                shape = ",".join(str(d) for d in t.shape)
                self.assertEqual(os.getxattr(path, "user.ckpt.shape"),
                                 shape.encode())
            self.assertEqual(os.getxattr(os.path.join(mnt, "layer", "cols"),
                                         "user.ckpt.dtype"), b"bf16")
            with open(os.path.join(mnt, "rng"), "rb") as f:
                self.assertEqual(torch.load(io.BytesIO(f.read()),
                                            weights_only=False).getvalue(),
                                 dcp_worker.BYTES)
            npy = np.load(os.path.join(mnt, ".npy", "big.npy"))
            np.testing.assert_array_equal(npy, ref["big"].numpy())

    def test_load_on_1_rank(self):
        self.report(ranks("load", self.root, 1), "load, 1 rank")

    def test_load_on_3_ranks(self):
        self.report(ranks("load", self.root, 3), "load, 3 ranks")

    def test_lazy_reader(self):
        ref = dcp_worker.reference()
        with ckptfs.open(self.good, framework="pt") as f:
            for name, t in ref.items():
                self.assertTrue(torch.equal(f.get_tensor(name), t), name)
            self.assertTrue(torch.equal(f.get_slice("big")[3:9, 100:200, 2],
                                        ref["big"][3:9, 100:200, 2]))


class Api2x(util.TempDir):
    """The 2.x methods, called in the order torch 2.x's save and load call
    them, with this torch's default planners."""

    def planners(self):
        try:
            from torch.distributed.checkpoint.default_planner import (
                DefaultLoadPlanner, DefaultSavePlanner)
        except ImportError:
            from torch.distributed._shard.checkpoint.default_planner import (
                DefaultLoadPlanner, DefaultSavePlanner)
        return DefaultSavePlanner(), DefaultLoadPlanner()

    def setup_planner(self, planner, *args):
        fn = getattr(planner, "set_up_planner", None) or planner.init
        fn(*args)

    def test_call_sequence(self):
        path = self.path("ck")
        sd = {"w": torch.arange(256 * 64.0).reshape(256, 64) % 7,"b": torch.randn(3).to(torch.bfloat16),
              "blob": io.BytesIO(b"abc")}
        self.assertTrue(ct.StorageWriter.validate_checkpoint_id(path))
        self.assertFalse(ct.StorageWriter.validate_checkpoint_id("s3://b/x"))
        self.assertFalse(ct.StorageReader.validate_checkpoint_id(path))
        w = ct.StorageWriter(codec="zstd")
        w.reset(path)                                # checkpoint_id=path
        self.assertEqual(w.checkpoint_id, path)
        meta = w.storage_meta()
        self.assertTrue(meta is None or meta.checkpoint_id == path)
        pickle.loads(pickle.dumps(w))                # process-based async
        with self.assertRaises(ValueError):
            w.set_up_storage_writer(True, rank=0, use_collectives=False)
        sp, lp = self.planners()
        self.setup_planner(sp, sd, True)
        w.set_up_storage_writer(True, rank=0, use_collectives=True)
        local = w.prepare_local_plan(sp.create_local_plan())
        plans, md = sp.create_global_plan([local])
        plans = w.prepare_global_plan(plans)
        results = w.write_data(sp.finish_plan(plans[0]), sp).wait()
        w.finish(md, [results])
        self.assertEqual(ckptfs.probe(path), "ckptfs")

        self.assertTrue(ct.StorageReader.validate_checkpoint_id(path))
        r = ct.StorageReader()
        r.reset(path)
        md = r.read_metadata()
        self.assertEqual(sorted(md.state_dict_metadata), ["b", "blob", "w"])
        out = {"w": torch.zeros(256, 64),
               "b": torch.zeros(3, dtype=torch.bfloat16), "blob": None}
        self.setup_planner(lp, out, md, True)
        r.set_up_storage_reader(md, True, rank=0, use_collectives=True)
        plan = r.prepare_local_plan(lp.create_local_plan())
        plans = r.prepare_global_plan(lp.create_global_plan([plan]))
        r.read_data(lp.finish_plan(plans[0]), lp).wait()
        self.assertTrue(torch.equal(out["w"], sd["w"]))
        self.assertTrue(torch.equal(out["b"], sd["b"]))
        self.assertEqual(out["blob"].getvalue(), b"abc")
        with ckptfs.open(path) as f:
            self.assertIn("zstd", f.info("w").codec)


class Example(util.TempDir):
    def test_example_two_save_three_load(self):
        # Each step (save on 2, load on 3) kills its ranks after 120 s and
        # prints their output (a rank left waiting on a dead peer waits
        # forever); past both, this kills the example and all it started.
        ex = os.path.join(util.SRCDIR, "examples", "torch_dcp_backend.py")
        step = 120
        p = subprocess.Popen([sys.executable, ex, self.path("ck")],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             env=dict(os.environ,
                                      DCP_EXAMPLE_TIMEOUT=str(step)),
                             start_new_session=True)
        try:
            text, _ = p.communicate(timeout=2 * step + 60)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            text, _ = p.communicate()
        out = text.decode("utf-8", "replace")
        print(out)
        self.assertEqual(p.returncode, 0, "the example failed or hung")
        self.assertIn("3 ranks loaded", out)
        self.assertEqual(util.ckpt("verify", self.path("ck")).returncode, 0)


if __name__ == "__main__":
    util.main()
