"""test_async.py - ckptfs.Saver: the checkpoint holds the state as it was
when save_async returned, although every tensor (NumPy and torch) and
byte buffer is overwritten right after, with the default staging and with
a cap far below the state's size; done()/wait(timeout); queued saves;
errors found before staging raise at once with nothing started, errors of
the background part raise from wait() with nothing committed; the earlier
checkpoint is untouched throughout.  The reference is a copy of the state
made before the call."""
import copy
import errno
import os
import warnings

import numpy as np

import ckptfs
import util

torch = util.optional_torch()


def make_state(seed):
    rng = np.random.default_rng(seed)
    state = {"w": rng.standard_normal((512, 1024)).astype(np.float32),
             "ids": rng.integers(0, 1 << 40, (4096,), dtype=np.int64),
             "buf": bytearray(rng.bytes(10000)),
             "cfg": {"lr": 0.1 * seed}}
    if torch is not None:
        g = torch.Generator().manual_seed(seed)
        state["t"] = torch.randn(300, 700, generator=g).to(torch.bfloat16)
        state["tt"] = torch.randn(64, 48, generator=g).t()
    return state


def scribble(state):
    state["w"][...] = -1.0
    state["ids"][...] = 7
    state["buf"][:] = b"\xee" * len(state["buf"])
    if torch is not None:
        state["t"].fill_(3.0)
        state["tt"].zero_()


def reference(state):
    ref = {}
    for k, v in state.items():
        if torch is not None and isinstance(v, torch.Tensor):
            ref[k] = v.clone()
        elif isinstance(v, np.ndarray):
            ref[k] = v.copy()
        else:
            ref[k] = copy.deepcopy(v)
    return ref


class Async(util.TempDir):
    def setUp(self):
        super().setUp()
        self.prev = self.path("prev")
        ckptfs.save(self.prev, make_state(1))
        self.prev_snap = util.snapshot(self.prev)

    def tearDown(self):
        self.assertUnchanged(self.prev_snap, self.prev, "(earlier ckpt)")
        super().tearDown()

    def check(self, ck, ref):
        back = ckptfs.load(ck)
        np.testing.assert_array_equal(back["w"], ref["w"])
        np.testing.assert_array_equal(back["ids"], ref["ids"])
        self.assertEqual(back["buf"], ref["buf"])
        self.assertIsInstance(back["buf"], bytearray)
        self.assertEqual(back["cfg"], ref["cfg"])
        if torch is not None:
            self.assertTrue(torch.equal(back["t"], ref["t"]))
            self.assertTrue(torch.equal(back["tt"], ref["tt"]))

    def overwrite_case(self, **saver_opts):
        with ckptfs.Saver(**saver_opts) as saver:
            for i in range(2):           # the staging pool is reused
                state = make_state(10 + i)
                ref = reference(state)
                ck = self.path("ck%d" % i)
                h = saver.save_async(ck, state, meta={"step": i})
                scribble(state)
                self.assertIsNone(h.wait())
                self.assertTrue(h.done())
                self.assertIsNone(h.wait())            # again: same answer
                self.assertIsNone(h.exception())
                self.check(ck, ref)
                self.assertEqual(ckptfs.open(ck).metadata()["step"], str(i))

    def test_overwrite_after_return(self):
        self.overwrite_case()

    def test_reserve_then_save(self):
        with ckptfs.Saver() as saver:
            saver.reserve(8 << 20)        # the staging, before any save
            state = make_state(4)
            ref = reference(state)
            h = saver.save_async(self.path("ck"), state)
            scribble(state)
            h.wait()
            self.check(self.path("ck"), ref)
            with self.assertRaises(ValueError):
                saver.reserve(-1)         # not a byte count
            with self.assertRaises(ckptfs.CheckpointError) as cm:
                saver.reserve(1 << 62)    # more than the machine has
            self.assertEqual(cm.exception.errno, errno.ENOMEM)
            self.assertIn("more than this machine's memory",
                          str(cm.exception))

    def test_overwrite_with_small_staging_cap(self):
        # 1 MiB of staging for a ~3.5 MiB state: staged in slices
        self.overwrite_case(staging_bytes=1 << 20, copy_threads=2)

    def test_queue_and_polling(self):
        with ckptfs.Saver(queue_depth=2) as saver:
            states = [make_state(20 + i) for i in range(3)]
            refs = [reference(s) for s in states]
            handles = []
            for i, s in enumerate(states):
                handles.append(saver.save_async(self.path("q%d" % i), s,
                                                codec="zstd"))
                scribble(s)
            self.assertIn(handles[-1].wait(timeout=0), (False, True))
            self.assertTrue(handles[-1].wait(timeout=120))
            self.assertTrue(all(h.done() for h in handles))
            for i, h in enumerate(handles):
                h.wait()
                self.check(self.path("q%d" % i), refs[i])

    def test_errors_before_staging(self):
        with ckptfs.Saver() as saver:
            with self.assertRaises(FileExistsError):
                saver.save_async(self.prev, make_state(2))
            ck = self.path("ck")
            with self.assertRaises(ckptfs.UnsupportedError):
                saver.save_async(ck, {"a": np.zeros(2), "o": object()})
            self.assertFalse(os.path.exists(ck))
            # the saver still works
            state = make_state(3)
            ref = reference(state)
            saver.save_async(ck, state).wait()
            self.check(ck, ref)

    def test_error_in_the_background(self):
        ck = self.path("ck")
        saver = ckptfs.Saver()
        # a reserved metadata key is refused by the background writer
        h = saver.save_async(ck, make_state(4), meta={"created": "now"})
        with self.assertRaises(ckptfs.CheckpointError) as cm:
            h.wait()
        self.assertIn("'created' is reserved", str(cm.exception))
        self.assertIs(h.exception(), cm.exception)
        self.assertFalse(os.path.exists(ck))        # the save's dir removed
        # close() warns about a failed save nobody waited for
        saver.save_async(ck, make_state(5), meta={"format_version": "9"})
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            saver.close()
        self.assertTrue(any("format_version" in str(x.message) for x in w))
        self.assertFalse(os.path.exists(ck))
        with self.assertRaises(ValueError):
            saver.save_async(ck, make_state(6))


if __name__ == "__main__":
    util.main()
