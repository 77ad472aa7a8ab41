"""test_untrusted.py - ckptfs.load of checkpoints an attacker wrote
(docs/TRUST.md, "A checkpoint from elsewhere: the Python package").

Each test replays an attack on the stored `python.tree` (issue #22):
- a node with two roles, {"T": "a", "f": "np", "d": [["x", {"P": "b"}]]},
  once hid a pickle from the allow_pickle check while the build descended
  into it: written into a ckptfs checkpoint's `meta` table (with sqlite3)
  and into a hand-written safetensors file's __metadata__ (the pickle in a
  U8 tensor), it must not run, whether loading a new state or into one;
- malformed trees (unknown tags, wrong types, duplicate keys, depth and
  size past the bounds, not JSON) are refused with ckptfs.TreeError
  naming the problem and where it is in the tree;
- one item named many times (a 52 KB checkpoint naming one 64 MiB tensor
  100 times once made load use 12.7 GiB) is refused before any read;
- the DCP StorageReader refuses a byte item (which DCP would torch.load)
  where the state to load into holds a tensor.
The pickle, if it ever ran, would make a marker directory: each test
asserts it does not exist.
"""
import io
import json
import os
import pickle
import shutil
import sqlite3
import struct

import numpy as np

import ckptfs
import util


class Mkdir(object):
    """Unpickling this makes the directory `path` (the attack's payload)."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (os.mkdir, (self.path,))


EVIL = {"T": "a", "f": "np", "d": [["x", {"P": "b"}]]}


def tree(root):
    return json.dumps({"version": 1, "root": root})


def set_tree(ck, text):
    """Replaces the python.tree of the committed checkpoint ck (what an
    attacker who writes the checkpoint does)."""
    db = sqlite3.connect(os.path.join(ck, "index.db"))
    with db:
        db.execute("UPDATE meta SET value = ? WHERE key = 'python.tree'",
                   (text,))
    db.close()


def write_safetensors(path, tensors, meta):
    """A safetensors file written by hand: 8-byte little-endian header
    length, the JSON header, the data.  tensors: {name: (dtype, shape,
    bytes)}."""
    header, data = {"__metadata__": meta}, b""
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape,
                        "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)


class Base(util.TempDir):
    def setUp(self):
        super().setUp()
        self.marker = self.path("PWNED")
        self.payload = pickle.dumps(Mkdir(self.marker))

    def tearDown(self):
        self.assertFalse(os.path.exists(self.marker),
                         "the checkpoint's pickle ran")
        super().tearDown()

    def ckptfs_with_tree(self, root):
        """A ckptfs checkpoint holding tensor 'a' and the byte object 'b'
        (the pickle), its python.tree replaced by `root`."""
        ck = self.path("ck")
        ckptfs.save(ck, {"a": np.arange(4.0), "b": self.payload})
        set_tree(ck, tree(root))
        return ck

    def assertRefused(self, ck, *words, **kw):
        with self.assertRaises(ckptfs.Error) as cm:
            ckptfs.load(ck, **kw)
        self.assertFalse(os.path.exists(self.marker),
                         "the checkpoint's pickle ran")
        self.assertIsInstance(cm.exception, ckptfs.TreeError)
        for w in words:
            self.assertIn(w, str(cm.exception))
        return cm.exception


class TwoRoles(Base):
    """The reproduced attack: a node that is both an item and a dict."""

    def test_ckptfs_new_state(self):
        for root in (EVIL, {"d": [["y", EVIL]]}):
            ck = self.ckptfs_with_tree(root)
            for allow in (False, True):      # malformed: never built
                self.assertRefused(ck, "python.tree", "'T'", "'d'",
                                   allow_pickle=allow)
            shutil.rmtree(ck)

    def test_ckptfs_into(self):
        ck = self.ckptfs_with_tree({"d": [["y", EVIL]]})
        state = {"y": None}
        e = self.assertRefused(ck, "python.tree", into=state)
        self.assertIn("'y'", str(e))
        self.assertEqual(state, {"y": None})

    def test_safetensors(self):
        """safetensors exists so that a downloaded model runs no code: a
        python.tree in its __metadata__ is not ckptfs's (ckptfs.save
        never writes one there) and is ignored, the pickle comes back as
        the U8 tensor it is."""
        st = self.path("model.safetensors")
        a = np.arange(4, dtype=np.float32)
        write_safetensors(st, {"a": ("F32", [4], a.tobytes()),
                               "b": ("U8", [len(self.payload)],
                                     self.payload)},
                          {"python.tree": tree({"d": [["y", EVIL]]})})
        for allow in (False, True):
            got = ckptfs.load(st, allow_pickle=allow)
            self.assertEqual(sorted(got), ["a", "b"])
            np.testing.assert_array_equal(got["a"], a)
            self.assertEqual(got["b"].tobytes(), self.payload)
            state = {"y": None, "a": np.zeros(4, np.float32)}
            with self.assertRaises(ckptfs.MissingKeyError):
                ckptfs.load(st, into=state, allow_pickle=allow)
            state = {"b": None, "a": np.zeros(4, np.float32)}
            ckptfs.load(st, into=state, allow_pickle=allow)
            self.assertEqual(np.asarray(state["b"]).tobytes(), self.payload)
            np.testing.assert_array_equal(state["a"], a)


class Malformed(Base):
    """Each malformed tree is refused, naming the problem and its path."""

    CASES = [
        # (root, words the message must hold)
        ({"d": [["k", {"Q": "a"}]]}, ["unknown", "'Q'", "'k'"]),
        ({"d": [["k", {"T": "a", "f": "np", "x": 1}]]}, ["'x'", "'k'"]),
        ({"d": [["k", {"T": "a", "f": "zz"}]]}, ["'zz'", "'k'"]),
        ({"d": [["k", {"T": 5, "f": "np"}]]}, ["'k'", "str"]),
        ({"d": [["k", {"B": "b", "P": "b"}]]}, ["roles", "'k'"]),
        ({"d": [["k", {}]]}, ["no role", "'k'"]),
        ({"d": [["k", ["T", "a"]]]}, ["list", "'k'"]),
        ({"d": [["k", {"v": [1, 2]}]]}, ["plain value", "'k'"]),
        ({"d": [["k", {"v": {"P": "b"}}]]}, ["plain value", "'k'"]),
        ({"d": [["k", {"v": 1}], ["k", {"v": 2}]]}, ["'k'", "twice"]),
        ({"d": [[True, {"v": 1}]]}, ["key"]),
        ({"d": [[1.5, {"v": 1}]]}, ["key"]),
        ({"d": [["k"]]}, ["[key, node]"]),
        ({"d": {"k": {"v": 1}}}, ["list"]),
        ({"l": [{"v": 1}, {"t": [{"v": 1}, {"Y": 7}]}]}, ["'1.1'", "str"]),
        ({"d": [["a", {"T": "a", "f": "np"}], ["b", {"T": "a", "f": "np"}]]},
         ["'a'", "twice"]),
        ({"d": [["a", {"P": "b"}], ["c", {"l": [{"B": "b"}]}]]},
         ["'b'", "twice"]),
    ]

    def test_cases(self):
        ck = self.ckptfs_with_tree({"v": None})
        for root, words in self.CASES:
            set_tree(ck, tree(root))
            for allow in (False, True):
                with self.subTest(root=root, allow_pickle=allow):
                    self.assertRefused(ck, "python.tree", *words,
                                       allow_pickle=allow)

    def test_not_a_tree(self):
        ck = self.ckptfs_with_tree({"v": None})
        for text in ("{", "[]", '{"version": 1}', "1" * 5000,
                     '{"version": 1, "root": {"v": %s}}' % ("9" * 5000),
                     '{"version": 1, "root": {"v": 1}, "more": 1}'):
            set_tree(ck, text)
            with self.subTest(text=text[:40]):
                self.assertRefused(ck, "python.tree")

    def test_depth_bound(self):
        """Nested past ckptfs.TREE_MAX_DEPTH: refused, at save and at
        load (also far past it, where JSON parsing itself recurses)."""
        ck = self.ckptfs_with_tree({"v": None})
        for depth in (ckptfs.TREE_MAX_DEPTH + 1, 100000):
            root = {"v": 1}
            for _ in range(depth):
                root = {"l": [root]}
            text = (tree(root) if depth < 1000 else
                    '{"version":1,"root":' + '{"l":[' * depth + '{"v":1}'
                    + ']}' * depth + '}')
            set_tree(ck, text)
            self.assertRefused(ck, "python.tree", "deep")
        state = 1
        for _ in range(ckptfs.TREE_MAX_DEPTH - 1):   # 's', then the lists
            state = [state]
        ckptfs.save(self.path("deep"), {"s": state})
        self.assertEqual(ckptfs.load(self.path("deep")), {"s": state})
        with self.assertRaises(ckptfs.UnsupportedError):
            ckptfs.save(self.path("deeper"), {"s": [state]})
        self.assertFalse(os.path.exists(self.path("deeper")))

    def test_node_bound(self):
        ck = self.ckptfs_with_tree({"v": None})
        n = ckptfs.TREE_MAX_NODES
        set_tree(ck, tree({"l": [{"v": 0}] * n}))
        self.assertRefused(ck, "python.tree", str(n))


class Duplicates(Base):
    """One stored tensor named 100 times by the tree: refused before any
    byte is read (each reference would otherwise be a copy of its own)."""

    def test_refused(self):
        ck = self.path("ck")
        w = np.arange(1 << 14, dtype=np.float32)
        ckptfs.save(ck, {"w": w})
        root = {"d": [[str(i), {"T": "w", "f": "np"}] for i in range(100)]}
        set_tree(ck, tree(root))
        for kw in ({}, {"into": {"0": np.zeros_like(w), "1": None}}):
            self.assertRefused(ck, "'w'", "twice", **kw)
        # what ckptfs.save wrote loads
        set_tree(ck, tree({"d": [["w", {"T": "w", "f": "np"}]]}))
        np.testing.assert_array_equal(ckptfs.load(ck)["w"], w)


class PickleOptIn(Base):
    """A well-formed tree with a pickle: refused without allow_pickle
    (before anything is read), run with it (the caller's trust)."""

    def test_opt_in(self):
        ck = self.ckptfs_with_tree({"d": [["a", {"T": "a", "f": "np"}],
                                          ["y", {"d": [["x",
                                                        {"P": "b"}]]}]]})
        for kw in ({}, {"into": {"y": None}}, {"into": {"y": {"x": 0}}}):
            with self.assertRaises(ckptfs.UnsupportedError) as cm:
                ckptfs.load(ck, **kw)
            self.assertIn("'b'", str(cm.exception))
            self.assertIn("allow_pickle", str(cm.exception))
        self.assertFalse(os.path.exists(self.marker))
        ckptfs.load(ck, allow_pickle=True)
        self.assertTrue(os.path.isdir(self.marker))    # the caller's choice
        os.rmdir(self.marker)


class Retargeted(Base):
    """Well-formed trees whose item nodes name items of another kind
    (cases tests/fuzz/fuzz_tree.py found): a clear outcome, never a bare
    TypeError or UnpicklingError."""

    def test_kinds(self):
        ck = self.ckptfs_with_tree({"v": None})
        set_tree(ck, tree({"d": [["q", {"T": "b", "f": "sc"}]]}))
        self.assertEqual(ckptfs.load(ck), {"q": self.payload})
        set_tree(ck, tree({"d": [["q", {"P": "a"}]]}))
        with self.assertRaises(ckptfs.UnsupportedError) as cm:
            ckptfs.load(ck, allow_pickle=True)
        self.assertIn("pickled object 'a'", str(cm.exception))
        self.assertIn("does not load", str(cm.exception))


def dcp_load(torch):
    """DCP's load of this torch, in one process: (state, reader)."""
    import ckptfs.torch as ct
    if ct.DCP_MODULE == "torch.distributed.checkpoint":
        import torch.distributed.checkpoint as dcp
        return lambda state, reader: dcp.load(state, storage_reader=reader)
    from torch.distributed._shard.checkpoint import load_state_dict
    return lambda state, reader: load_state_dict(state, reader, no_dist=True)


class DcpBytes(Base):
    """DCP's load torch.loads (unpickles) every byte item the plan reads:
    where the caller's state holds a tensor, the checkpoint's byte object
    of that name is refused before anything is read."""

    def test_byte_item_for_a_tensor(self):
        torch = util.optional_torch()
        if torch is None:
            self.skipTest("no torch here")
        import ckptfs.torch as ct
        buf = io.BytesIO()
        torch.save(Mkdir(self.marker), buf)
        ck = self.path("ck")
        ckptfs.save(ck, {"x": buf.getvalue(), "w": np.arange(3.0)})
        state = {"w": torch.zeros(3, dtype=torch.float64),
                 "x": torch.zeros(3)}
        # DCP's CheckpointException is a BaseException
        with self.assertRaises(BaseException) as cm:
            dcp_load(torch)(state, ct.StorageReader(ck))
        self.assertFalse(os.path.exists(self.marker),
                         "DCP torch.loaded the byte item")
        msg = str(cm.exception)    # DCP's, with each rank's exception
        self.assertIn("'x'", msg)
        self.assertIn("torch.load", msg)
        f64 = torch.float64
        self.assertTrue(torch.equal(state["x"], torch.zeros(3)))
        self.assertTrue(torch.equal(state["w"], torch.zeros(3, dtype=f64)))
        # a byte item where the state holds no tensor is DCP's way of
        # storing other values: it loads (DCP torch.loads it)
        buf = io.BytesIO()
        torch.save({"lr": 0.5}, buf)
        ok = self.path("ok")
        ckptfs.save(ok, {"x": buf.getvalue(), "w": np.arange(3.0)})
        state = {"w": torch.zeros(3, dtype=f64), "x": None}
        dcp_load(torch)(state, ct.StorageReader(ok))
        self.assertEqual(state["x"], {"lr": 0.5})
        self.assertTrue(torch.equal(state["w"], torch.arange(3.0,
                                                            dtype=f64)))


if __name__ == "__main__":
    util.main()
