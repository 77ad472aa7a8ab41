"""_tree.py - nested state dicts flattened into named items, and back.

A state is a dict whose values are tensors (NumPy arrays, torch tensors,
ckptfs.Raw), byte strings, plain values (None, bool, int, float, str),
nested dicts (keys str or int), lists and tuples -- what model and
optimizer state_dict()s hold -- and, only when the caller opts in,
other objects, pickled.  Tensors, byte strings and pickled objects become
checkpoint items named by their path, dotted ("optim.state.0.exp_avg");
plain values stay in the tree.  The tree, which records every container,
key type and leaf kind, is stored as JSON in the checkpoint metadata under
TREE_KEY, so that load() rebuilds the very structure that was saved.

Tree nodes: {"d": [[key, node], ...]} dict, {"l": [...]} list,
{"t": [...]} tuple, {"T": fqn, "f": "np"|"pt"|"sc"} tensor (NumPy array,
torch tensor, NumPy scalar), {"B": fqn} bytes, {"Y": fqn} bytearray,
{"P": fqn} pickled object, {"v": value} plain value.
"""
import json
import pickle
import sys

import numpy as np

from ._errors import UnsupportedError

TREE_KEY = "python.tree"
TREE_VERSION = 1


class Raw(object):
    """A tensor given as raw bits: `data` (a NumPy array or torch tensor)
    holds the bytes of a tensor of ckptfs dtype `dtype` of the same item
    size, e.g. ckptfs.Raw(bits_u16, "bf16") for bfloat16 bits from NumPy,
    which has no bfloat16."""

    __slots__ = ("data", "dtype")

    def __init__(self, data, dtype):
        self.data = data
        self.dtype = dtype


def torch_module():
    """torch if this process imported it (a torch tensor implies that)."""
    return sys.modules.get("torch")


def is_torch_tensor(value):
    torch = torch_module()
    return torch is not None and isinstance(value, torch.Tensor)


def is_tensor(value):
    return (isinstance(value, (np.ndarray, np.generic, Raw))
            or is_torch_tensor(value))


PLAIN = (type(None), bool, int, float, str)


def fqn_of(path):
    return ".".join(str(k) for k in path)


class Flat(object):
    """The items of a flattened state: `items` is a list of (fqn, kind,
    value) with kind "tensor", "bytes" or "pickle" (value: the tensor, the
    byte string, the pickled bytes); `tree` the JSON-able tree."""

    def __init__(self, state, allow_pickle):
        if not isinstance(state, dict):
            raise UnsupportedError("the state to save must be a dict (of "
                                   "tensors, bytes, values and nested "
                                   "dicts), not %s" % type(state).__name__)
        self.items = []
        self._names = {}
        self._allow_pickle = allow_pickle
        self.tree = {"version": TREE_VERSION, "root": self._node(state, ())}

    def _item(self, path, kind, value):
        fqn = fqn_of(path)
        if fqn in self._names:
            raise UnsupportedError(
                "two entries of the state are both named '%s' (paths %r and "
                "%r): keys with dots collide with nested dicts"
                % (fqn, self._names[fqn], path))
        self._names[fqn] = path
        self.items.append((fqn, kind, value))
        return fqn

    def _node(self, obj, path):
        if isinstance(obj, dict):
            return {"d": [[self._key(k, path), self._node(v, path + (k,))]
                          for k, v in obj.items()]}
        if isinstance(obj, (list, tuple)) and not is_tensor(obj):
            kids = [self._node(v, path + (i,)) for i, v in enumerate(obj)]
            return {"t" if isinstance(obj, tuple) else "l": kids}
        if is_tensor(obj):
            if isinstance(obj, np.generic):
                flavour = "sc"
            elif isinstance(obj, Raw):
                flavour = "pt" if is_torch_tensor(obj.data) else "np"
            else:
                flavour = "pt" if is_torch_tensor(obj) else "np"
            return {"T": self._item(path, "tensor", obj), "f": flavour}
        if isinstance(obj, (bytes, bytearray, memoryview)):
            tag = "Y" if isinstance(obj, bytearray) else "B"
            return {tag: self._item(path, "bytes", bytes(obj)
                                    if isinstance(obj, memoryview) else obj)}
        if isinstance(obj, PLAIN):
            return {"v": obj}
        if not self._allow_pickle:
            raise UnsupportedError(
                "state entry '%s' is a %s.%s, which ckptfs does not store as "
                "such (it stores tensors, bytes, None/bool/int/float/str, "
                "dicts, lists and tuples); pass allow_pickle=True to store "
                "it pickled (then loading it runs code from the checkpoint: "
                "only for checkpoints you trust)"
                % (fqn_of(path), type(obj).__module__, type(obj).__qualname__))
        return {"P": self._item(path, "pickle", pickle.dumps(
            obj, protocol=pickle.HIGHEST_PROTOCOL))}

    def _key(self, key, path):
        if isinstance(key, bool) or not isinstance(key, (str, int)):
            raise UnsupportedError("state entry '%s': key %r is a %s; keys "
                                   "must be str or int"
                                   % (fqn_of(path), key, type(key).__name__))
        return key

    def tree_json(self):
        return json.dumps(self.tree, separators=(",", ":"))


def parse_tree(text):
    """The root node of a stored tree, or None if `text` is None."""
    if text is None:
        return None
    tree = json.loads(text)
    if not isinstance(tree, dict) or tree.get("version") != TREE_VERSION:
        raise UnsupportedError("metadata '%s' is of an unknown version "
                               "(this ckptfs reads version %d)"
                               % (TREE_KEY, TREE_VERSION))
    return tree["root"]


def build(node, leaf):
    """The structure a tree node describes; leaf(node) gives the value of
    each item node (tensor, bytes, pickled)."""
    if "d" in node:
        return {k: build(v, leaf) for k, v in node["d"]}
    if "l" in node:
        return [build(v, leaf) for v in node["l"]]
    if "t" in node:
        return tuple(build(v, leaf) for v in node["t"])
    if "v" in node:
        return node["v"]
    return leaf(node)


def item_name(node):
    """(kind, fqn) of an item node, or (None, None) for a container or a
    plain value."""
    for tag, kind in (("T", "tensor"), ("B", "bytes"), ("Y", "bytes"),
                      ("P", "pickle")):
        if tag in node:
            return kind, node[tag]
    return None, None


def child(node, key):
    """The node under `key` of a container node, or None."""
    if node is None:
        return None
    if "d" in node:
        for k, v in node["d"]:
            if k == key and type(k) is type(key):
                return v
        return None
    kids = node.get("l", node.get("t"))
    if kids is not None and isinstance(key, int) and 0 <= key < len(kids):
        return kids[key]
    return None


def leaves(obj, path=()):
    """(path, value) of every leaf of a structure: what is not a dict, a
    list or a tuple (tensors are leaves)."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from leaves(v, path + (k,))
    elif isinstance(obj, (list, tuple)) and not is_tensor(obj):
        for i, v in enumerate(obj):
            yield from leaves(v, path + (i,))
    else:
        yield path, obj


def replace(obj, repl, path=()):
    """obj with the leaves at the paths of `repl` replaced by its values:
    dicts and lists in place, tuples rebuilt (returned)."""
    if path in repl:
        return repl[path]
    if isinstance(obj, dict):
        for k in list(obj):
            new = replace(obj[k], repl, path + (k,))
            if new is not obj[k]:
                obj[k] = new
        return obj
    if isinstance(obj, list):
        for i, v in enumerate(obj):
            new = replace(v, repl, path + (i,))
            if new is not v:
                obj[i] = new
        return obj
    if isinstance(obj, tuple) and not is_tensor(obj):
        new = [replace(v, repl, path + (i,)) for i, v in enumerate(obj)]
        if all(a is b for a, b in zip(new, obj)):
            return obj
        return obj._make(new) if hasattr(obj, "_make") else type(obj)(new)
    return obj
