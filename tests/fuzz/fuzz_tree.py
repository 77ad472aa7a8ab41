"""fuzz_tree.py - fuzzes what ckptfs.load trusts in a checkpoint it did
not write: the stored structure (metadata python.tree, docs/PYTHON.md).

Valid trees (what ckptfs.save writes for random nested states, pickled
objects included) are mutated at random -- tags added, removed, renamed
or doubled, values of the wrong JSON type, entries repeated, items
renamed to each other, nodes wrapped deep, the JSON text cut or flipped --
and (gentler, so that most still load) item nodes get another kind,
flavour or name, and containers another kind; then:
  parse: ckptfs' tree walker (parse_tree, then building the result with a
         leaf that records its calls) must return a Tree, or raise
         ckptfs.Error; a built result must have called its leaf exactly
         once for each of the walk's items, and for a pickled item only
         when the walk says the tree holds one;
  load:  the tree is written into a real checkpoint's index.db (sqlite3)
         and ckptfs.load (a new state, and into a state) runs on it: it
         must return or raise ckptfs.Error, and without allow_pickle must
         never call pickle.loads (counted by patching it); with
         allow_pickle at most once per "P" in the text.
Any other exception, or a pickle where none was allowed, fails (exit 1)
and prints the input.  Seeded (CKPT_FUZZ_SEED, default 1), bounded:
CKPT_FUZZ_TREE_ITERS iterations (default 2000; one in four also loads
a mutation of the checkpoint's own tree); CKPT_FUZZ_SECONDS=N runs for N
seconds instead.  Run by make check through tests/python/run.sh.
"""
import copy
import json
import os
import pickle
import random
import shutil
import sqlite3
import sys
import tempfile
import time
import traceback

import numpy as np

import ckptfs
from ckptfs import _tree

TAGS = ["d", "l", "t", "v", "T", "B", "Y", "P", "f", "x"]


class Calls(object):
    """pickle.loads, counting its calls."""

    def __init__(self, real):
        self.real, self.n = real, 0

    def __call__(self, data, *args, **kwargs):
        self.n += 1
        return self.real(data, *args, **kwargs)


def random_state(rng, depth=0):
    """A random nested state of the kinds ckptfs.save stores."""
    out = {}
    for i in range(rng.randint(1, 4)):
        key = rng.choice(["k%d" % i, i])
        r = rng.random()
        if r < 0.25 and depth < 3:
            out[key] = random_state(rng, depth + 1)
        elif r < 0.4 and depth < 3:
            out[key] = [random_state(rng, depth + 1)
                        if rng.random() < 0.3 else rng.random()
                        for _ in range(rng.randint(0, 3))]
            if rng.random() < 0.3:
                out[key] = tuple(out[key])
        elif r < 0.55:
            out[key] = np.arange(rng.randint(0, 5), dtype=np.float32)
        elif r < 0.62:
            out[key] = np.float64(rng.random())
        elif r < 0.7:
            out[key] = rng.choice([b"bytes", bytearray(b"ba")])
        elif r < 0.78:
            out[key] = {1, 2}                       # pickled
        else:
            out[key] = rng.choice([None, True, 3, 2.5, "s"])
    return out


def random_json(rng, depth=0):
    r = rng.random()
    if r < 0.15 and depth < 3:
        return [random_json(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    if r < 0.3 and depth < 3:
        return {rng.choice(TAGS): random_json(rng, depth + 1)
                for _ in range(rng.randint(0, 3))}
    return rng.choice([None, True, False, 0, -1, 2 ** 70, 1.5, float("nan"),
                       "", "a", "b", "p", "w", "np", "pt", "sc", "zz",
                       "k0", "\u0000", "a.b"])


def nodes(obj):
    """Every dict and list inside a JSON value (without recursion: the
    mutations nest deep)."""
    out, todo = [], [obj]
    while todo:
        o = todo.pop()
        if isinstance(o, (dict, list)):
            out.append(o)
            todo.extend(o.values() if isinstance(o, dict) else o)
    return out


def mutate(doc, rng, names):
    """Mutates the JSON document doc in place, a few times."""
    for _ in range(rng.randint(1, 4)):
        targets = nodes(doc)
        node = rng.choice(targets)
        r = rng.random()
        if isinstance(node, dict):
            keys = list(node)
            if r < 0.25:
                node[rng.choice(TAGS)] = random_json(rng)
            elif r < 0.4 and keys:
                del node[rng.choice(keys)]
            elif r < 0.6 and keys:
                node[rng.choice(keys)] = random_json(rng)
            elif r < 0.65 and keys:                 # an item renamed
                node[rng.choice(keys)] = rng.choice(names)
            elif r < 0.75:                          # made another item
                node.clear()
                node[rng.choice("TBYP")] = rng.choice(names)
                if rng.random() < 0.7:
                    node["f"] = rng.choice(["np", "pt", "sc"])
            elif r < 0.85 and keys:                 # a tag renamed
                k = rng.choice(keys)
                node[rng.choice(TAGS)] = node.pop(k)
            else:                                    # wrapped
                wrap(node, rng, rng.choice([1, 5]))
        elif node:
            i = rng.randrange(len(node))
            if r < 0.4:                              # a repeated entry
                node.insert(rng.randrange(len(node) + 1),
                            copy.deepcopy(node[i]))
            elif r < 0.6:
                del node[i]
            elif r < 0.8:
                node[i] = random_json(rng)
            else:
                node.append(node[i])                 # the same object
        else:
            node.append(random_json(rng))


def retarget(doc, rng, names):
    """Gentle mutations, which mostly leave a well-formed tree: item nodes
    given another kind or flavour, item names swapped between nodes or
    changed, a container turned into another."""
    items = [n for n in nodes(doc) if isinstance(n, dict)
             and any(t in n for t in "TBYP")]
    for _ in range(rng.randint(1, 3)):
        node = rng.choice(items)
        tag = next(t for t in "TBYP" if t in node)
        r = rng.random()
        if r < 0.4:
            fqn = node.pop(tag)
            node.pop("f", None)
            tag = rng.choice("TBYP")
            node[tag] = fqn
            if tag == "T":
                node["f"] = rng.choice(["np", "pt", "sc"])
        elif r < 0.7:
            other = rng.choice(items)
            otag = next(t for t in "TBYP" if t in other)
            node[tag], other[otag] = other[otag], node[tag]
        elif r < 0.8:
            node[tag] = rng.choice(names)
        else:
            box = rng.choice([n for n in nodes(doc) if isinstance(n, dict)
                              and any(t in n for t in "dlt")])
            kind = next(t for t in "dlt" if t in box)
            kids = box.pop(kind)
            if kind == "d":
                kids = [kid for _, kid in kids]
            new = rng.choice("dlt")
            box[new] = ([[rng.choice(["k%d" % i, i]), kid]
                         for i, kid in enumerate(kids)] if new == "d"
                        else kids)


def wrap(node, rng, levels):
    """The dict node, in place, wrapped in `levels` lists or tuples."""
    inner = dict(node)
    node.clear()
    for _ in range(levels):
        inner = {rng.choice("lt"): [inner]}
    node.update(inner)


def mutated_text(base, rng, names, gentle=False):
    doc = copy.deepcopy(base)
    (retarget if gentle else mutate)(doc, rng, names)
    if rng.random() < 0.05:                          # past TREE_MAX_DEPTH
        wrap(rng.choice([n for n in nodes(doc) if isinstance(n, dict)]),
             rng, rng.choice([_tree.TREE_MAX_DEPTH, 400]))
    try:
        text = json.dumps(doc)
    except (ValueError, RecursionError):            # a cycle: not JSON
        text = json.dumps(base)
    if rng.random() < 0.1:                           # the text itself
        pos = rng.randrange(len(text) + 1)
        text = (text[:pos] if rng.random() < 0.5 else
                text[:pos] + rng.choice("{}[]\",:0x") + text[pos + 1:])
    return text


def check_parse(text):
    """The walker on its own: a Tree whose build calls the leaf once per
    item of the walk, or ckptfs.Error."""
    try:
        tree = _tree.parse_tree(text)
    except ckptfs.Error:
        return
    seen = []
    tree.root.build(lambda item: seen.append(item) or item.fqn)
    assert [id(i) for i in seen] == [id(i) for i in tree.items], \
        "the build's items are not the walk's"
    kinds = [i.kind for i in seen]
    assert ("pickle" in kinds) == (tree.pickle is not None), \
        "the walk's pickle flag disagrees with its items"


def check_load(ck, text, rng, calls):
    """ckptfs.load on a checkpoint holding the tree `text`."""
    db = sqlite3.connect(os.path.join(ck, "index.db"))
    db.execute("PRAGMA synchronous = OFF")          # a scratch copy
    with db:
        db.execute("UPDATE meta SET value = ? WHERE key = 'python.tree'",
                   (text,))
    db.close()
    allow = rng.random() < 0.3
    into = rng.choice([None, {"a": np.zeros(3, np.float32), "b": None},
                       {"k0": {"x": None}, "p": 0}, {"w": [None, None]}])
    before = calls.n
    try:
        ckptfs.load(ck, into=copy.deepcopy(into), allow_pickle=allow)
        outcome = "loaded"
    except ckptfs.Error as exc:
        outcome = type(exc).__name__
    n = calls.n - before
    if not allow:
        assert n == 0, "pickle.loads ran %d times without allow_pickle" % n
    else:
        assert n <= text.count('"P"'), "more pickles than P nodes"
    return outcome


def main():
    seed = int(os.environ.get("CKPT_FUZZ_SEED", "1"))
    seconds = float(os.environ.get("CKPT_FUZZ_SECONDS", "0") or 0)
    iters = int(os.environ.get("CKPT_FUZZ_TREE_ITERS", "2000"))
    rng = random.Random(seed)
    calls = Calls(pickle.loads)
    pickle.loads = calls                 # the package calls pickle.loads
    tmp = tempfile.mkdtemp(prefix="ckpt-fuzz-tree-")
    try:
        ck = os.path.join(tmp, "ck")
        ckptfs.save(ck, {"a": np.arange(3, dtype=np.float32), "b": b"bytes",
                         "p": {1, 2}, "w": [np.float64(1.5), bytearray(b"y")],
                         "k0": {"x": 1}}, allow_pickle=True)
        with ckptfs.open(ck) as f:
            names = f.keys()
            bases = [json.loads(f.metadata()["python.tree"])]
        bases += [json.loads(_tree.Flat(random_state(rng), True).tree_json())
                  for _ in range(20)]
        end = time.monotonic() + seconds
        done, outcomes = 0, {}
        while (time.monotonic() < end) if seconds else done < iters:
            text = mutated_text(rng.choice(bases), rng, names)
            try:
                check_parse(text)
                if done % 4 == 0:      # ck's own tree, mutated, loaded
                    text = mutated_text(bases[0], rng, names,
                                        gentle=rng.random() < 0.6)
                    check_parse(text)
                    outcome = check_load(ck, text, rng, calls)
                    outcomes[outcome] = outcomes.get(outcome, 0) + 1
            except Exception:
                print("fuzz_tree: seed %d, iteration %d, input:\n%s"
                      % (seed, done, text[:4000]))
                traceback.print_exc()
                return 1
            done += 1
        print("fuzz_tree: seed %d: %d trees walked, loads: %s; no finding"
              % (seed, done, ", ".join("%s %d" % kv for kv in
                                       sorted(outcomes.items()))))
        return 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
