"""test_reader.py - the package's Reader where it is misused or the
checkpoint is damaged (issue #22):
- close() in one thread while others read (get_tensor, get_slice, info,
  frames, keys, metadata): each call either returns what the checkpoint
  holds (checked against the arrays saved) or raises ValueError "closed";
  no use of freed memory (the sanitizer build, where this once was a
  heap-use-after-free in ckpt_reader_find) and no hang.  The threads run
  in a child process, so that a crash or a hang is a failure of this test
  rather than of the test driver;
- a tensor whose chunk rows in index.db are damaged: info() and frames()
  raise the library's error naming the tensor (they once gave
  IndexError("no chunk 0 of tensor 0") and []), the other tensors read on.
"""
import os
import random
import sqlite3
import subprocess
import sys
import threading

import numpy as np

import ckptfs
import util


def arrays():
    rng = np.random.default_rng(7)
    return {"t%d" % i: rng.standard_normal((64, 257)).astype(np.float32)
            for i in range(6)}


def reader_calls(f, want):
    """One round of every kind of call on the open CheckpointFile f;
    raises AssertionError when a result is wrong."""
    names = f.keys()
    assert names == sorted(want), names
    for name in names:
        got = f.get_tensor(name)
        assert np.array_equal(got, want[name]), name
        assert np.array_equal(f.get_slice(name)[3:9, 100:120],
                              want[name][3:9, 100:120]), name
        assert f.info(name).shape == want[name].shape, name
        assert f.frames(name), name
        assert name in f
    assert "step" in f.metadata()


def hammer(ck, rounds, nthreads=4):
    """In the child: rounds of nthreads threads calling the reader while
    the main thread closes it after a random pause.  Exit status 0 when
    every call returned the right thing or ValueError 'closed'."""
    want = arrays()
    rng = random.Random(3)
    bad = []

    def run(f):
        try:
            while True:
                reader_calls(f, want)
        except ValueError as exc:
            if "closed" not in str(exc):
                bad.append(repr(exc))
        except Exception as exc:     # anything else is a failure
            bad.append(repr(exc))

    for _ in range(rounds):
        f = ckptfs.open(ck, threads=2, cache_bytes=1 << 16)
        threads = [threading.Thread(target=run, args=(f,))
                   for _ in range(nthreads)]
        for t in threads:
            t.start()
        threading.Event().wait(rng.uniform(0, 0.02))
        f.close()
        for t in threads:
            t.join()
        if bad:
            print("wrong results after close: %s" % bad[:3])
            return 1
        try:
            f.keys()
            print("a call after close did not raise")
            return 1
        except ValueError as exc:
            assert "closed" in str(exc) and ck in str(exc), exc
    return 0


class Close(util.TempDir):
    def test_close_while_reading(self):
        ck = self.path("ck")
        ckptfs.save(ck, arrays(), frame_size=4096, meta={"step": 1})
        p = subprocess.run([sys.executable, __file__, "--hammer", ck, "40"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           timeout=600)
        out = p.stdout.decode("utf-8", "replace")
        self.assertEqual(p.returncode, 0, out[-4000:])
        self.assertNotIn("AddressSanitizer", out)

    def test_close_twice_and_in_context(self):
        ck = self.path("ck")
        ckptfs.save(ck, arrays())
        with ckptfs.open(ck) as f:
            names = f.keys()
        f.close()
        for call in (f.keys, lambda: f.get_tensor(names[0]),
                     lambda: f.info(names[0]), f.metadata, f.stats):
            with self.assertRaises(ValueError) as cm:
                call()
            self.assertIn("closed", str(cm.exception))


class Damaged(util.TempDir):
    def test_damaged_chunk_row(self):
        ck = self.path("ck")
        want = arrays()
        ckptfs.save(ck, want, frame_size=4096)
        db = sqlite3.connect(os.path.join(ck, "index.db"))
        with db:      # chunk sizes no longer match t1's frames
            n = db.execute("UPDATE chunks SET raw_bytes = raw_bytes + 8 "
                           "WHERE tensor_id = (SELECT id FROM tensors "
                           "WHERE fqn = 't1')").rowcount
        db.close()
        self.assertEqual(n, 1)
        with ckptfs.open(ck) as f:
            for call in (lambda: f.info("t1"), lambda: f.frames("t1"),
                         lambda: f.get_tensor("t1")):
                with self.assertRaises(ckptfs.CheckpointError) as cm:
                    call()
                msg = str(cm.exception)
                self.assertIn("damaged index", msg)
                self.assertIn("'t1'", msg)
                self.assertIn("raw_bytes", msg)
            self.assertEqual(f.info("t0").shape, (64, 257))
            self.assertTrue(f.frames("t2"))
            np.testing.assert_array_equal(f.get_tensor("t2"), want["t2"])


if __name__ == "__main__":
    if sys.argv[1:2] == ["--hammer"]:
        sys.exit(hammer(sys.argv[2], int(sys.argv[3])))
    util.main()
