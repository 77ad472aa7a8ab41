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
{"P": fqn} pickled object, {"v": value} plain value.  A node has exactly
one of these roles; loading refuses any other tree (parse_tree, below),
and unpickles nothing the caller did not opt in to.
"""
import json
import pickle
import sys

import numpy as np

from ._errors import TreeError, UnsupportedError

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
        self._nodes = 0
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
        self._bound(path)
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

    def _bound(self, path):
        """Refuses a state that load would refuse (TREE_MAX_DEPTH,
        TREE_MAX_NODES), before its depth is Python's recursion limit."""
        self._nodes += 1
        if len(path) > TREE_MAX_DEPTH:
            raise UnsupportedError("state entry '%s' is nested more than %d "
                                   "levels deep (ckptfs.TREE_MAX_DEPTH)"
                                   % (_short(fqn_of(path)), TREE_MAX_DEPTH))
        if self._nodes > TREE_MAX_NODES:
            raise UnsupportedError("the state has more than %d entries "
                                   "(ckptfs.TREE_MAX_NODES; store long "
                                   "lists of numbers as arrays)"
                                   % TREE_MAX_NODES)

    def _key(self, key, path):
        if isinstance(key, bool) or not isinstance(key, (str, int)):
            raise UnsupportedError("state entry '%s': key %r is a %s; keys "
                                   "must be str or int"
                                   % (fqn_of(path), key, type(key).__name__))
        return key

    def tree_json(self):
        return json.dumps(self.tree, separators=(",", ":"))


# ------------------------------------------------------------------ load
# A stored tree is input from whoever wrote the checkpoint.  parse_tree
# walks its JSON once: every node is checked to have exactly one role, of
# the right types, within the bounds, each item named once, and becomes an
# Item, a Value or a Container.  What load reads, and what it would
# unpickle (the "pickle" Items), is that walk's list of items; the result
# is built from the same typed nodes, which cannot be read two ways.

TREE_MAX_DEPTH = 200
"""Keys from the root to the deepest node of a stored tree, at most."""
TREE_MAX_NODES = 1 << 20
"""Nodes of a stored tree (containers, plain values, items), at most."""

_ITEM_TAGS = {"T": "tensor", "B": "bytes", "Y": "bytes", "P": "pickle"}
_ROLES = ("d", "l", "t", "v") + tuple(_ITEM_TAGS)
_FLAVOURS = ("np", "pt", "sc")


class Item(object):
    """An item node: kind "tensor", "bytes" or "pickle", the item's fqn,
    flavour ("np", "pt", "sc") for a tensor, tag "Y" for a bytearray."""

    __slots__ = ("kind", "fqn", "flavour", "tag")

    def __init__(self, tag, fqn, flavour):
        self.kind, self.fqn, self.flavour, self.tag = (_ITEM_TAGS[tag], fqn,
                                                       flavour, tag)

    @property
    def pickle(self):
        return self.fqn if self.kind == "pickle" else None

    def build(self, leaf):
        return leaf(self)

    def child(self, key):
        return None


class Value(object):
    """A plain value node (None, bool, int, float, str)."""

    __slots__ = ("value",)
    pickle = None

    def __init__(self, value):
        self.value = value

    def build(self, leaf):
        return self.value

    def child(self, key):
        return None


class Container(object):
    """A dict ("d"), list ("l") or tuple ("t") node: entries are (key,
    node); pickle names the first pickled item under it (or None)."""

    __slots__ = ("kind", "entries", "pickle", "_keys")

    def __init__(self, kind, entries, keys=None):
        self.kind, self.entries, self._keys = kind, entries, keys
        self.pickle = next((n.pickle for _, n in entries
                            if n.pickle is not None), None)

    def build(self, leaf):
        values = [(k, n.build(leaf)) for k, n in self.entries]
        if self.kind == "d":
            return dict(values)
        values = [v for _, v in values]
        return values if self.kind == "l" else tuple(values)

    def child(self, key):
        """The node under `key` (of the same type: 1 is not "1"), or
        None."""
        if self.kind == "d":
            got = self._keys.get(key)
            return got[1] if got and type(got[0]) is type(key) else None
        if (isinstance(key, int) and not isinstance(key, bool)
                and 0 <= key < len(self.entries)):
            return self.entries[key][1]
        return None


class Tree(object):
    """A checked stored tree: root (a node) and items (its Items, in
    order, each fqn once)."""

    def __init__(self, root, items):
        self.root, self.items = root, items

    @property
    def pickle(self):
        return self.root.pickle


def _what(value):
    """A JSON value's type, in words."""
    if isinstance(value, bool):
        return "a boolean"
    for types, words in ((dict, "an object"), (list, "a list"),
                         (str, "a string"), (int, "an integer"),
                         (float, "a number")):
        if isinstance(value, types):
            return words
    return "null"


def _short(text, n=200):
    return text if len(text) <= n else text[:n] + "..."


class _Parse(object):
    """The one walk over a stored tree's JSON."""

    def __init__(self, what):
        self.what = what
        self.items, self.named, self.nodes = [], {}, 0

    def fail(self, path, what):
        where = ("its root" if not path
                 else "node '%s'" % _short(fqn_of(path)))
        raise TreeError("%s (the structure ckptfs.load rebuilds): %s %s"
                        % (self.what, where, what))

    def node(self, obj, path):
        self.nodes += 1
        if self.nodes > TREE_MAX_NODES:
            self.fail(path, "is past the bound of %d nodes in a tree"
                      % TREE_MAX_NODES)
        if len(path) > TREE_MAX_DEPTH:
            self.fail(path, "is nested too deep: more than %d levels"
                      % TREE_MAX_DEPTH)
        if not isinstance(obj, dict):
            self.fail(path, "is %s, not a node (an object)" % _what(obj))
        roles = [t for t in obj if t in _ROLES]
        if len(roles) != 1:
            self.fail(path, "has no role (unknown keys: %s)"
                      % (", ".join(repr(k) for k in obj) or "none")
                      if not roles else "has %d roles (%s): a node is one "
                      "container, value or item"
                      % (len(roles), ", ".join(repr(r) for r in roles)))
        tag = roles[0]
        extra = [k for k in obj if k != tag and not (tag == "T" and
                                                    k == "f")]
        if extra:
            self.fail(path, "has unknown keys: %s"
                      % ", ".join(repr(k) for k in extra))
        if tag in _ITEM_TAGS:
            return self.item(tag, obj, path)
        if tag == "v":
            value = obj["v"]
            if not (value is None or isinstance(value, PLAIN)):
                self.fail(path, "holds %s, not a plain value (null, a "
                          "boolean, a number, a string)" % _what(value))
            return Value(value)
        kids = obj[tag]
        if not isinstance(kids, list):
            self.fail(path, "holds %s under %r, not a list"
                      % (_what(kids), tag))
        if tag == "d":
            return self.dict_node(kids, path)
        return Container(tag, [(i, self.node(kid, path + (i,)))
                               for i, kid in enumerate(kids)])

    def dict_node(self, entries, path):
        keys, out = {}, []
        for entry in entries:
            if not (isinstance(entry, list) and len(entry) == 2):
                self.fail(path, "has an entry that is not [key, node]: %s"
                          % _short(repr(entry)))
            key, kid = entry
            if isinstance(key, bool) or not isinstance(key, (str, int)):
                self.fail(path, "has the key %s, %s: keys are strings or "
                          "integers" % (_short(repr(key)), _what(key)))
            if key in keys:
                self.fail(path, "has the key %s twice" % _short(repr(key)))
            node = self.node(kid, path + (key,))
            keys[key] = (key, node)
            out.append((key, node))
        return Container("d", out, keys)

    def item(self, tag, obj, path):
        fqn = obj[tag]
        if not isinstance(fqn, str):
            self.fail(path, "names its item with %s, not a string"
                      % _what(fqn))
        flavour = obj.get("f")
        if tag == "T" and flavour not in _FLAVOURS:
            self.fail(path, "has the flavour %s, not 'np', 'pt' or 'sc'"
                      % _short(repr(flavour)))
        if fqn in self.named:
            self.fail(path, "names the item '%s', which node '%s' names "
                      "too: an item is loaded once, not twice"
                      % (_short(fqn), _short(fqn_of(self.named[fqn]))))
        self.named[fqn] = path
        item = Item(tag, fqn, flavour)
        self.items.append(item)
        return item


def parse_tree(text, source="the checkpoint"):
    """The checked Tree of a stored tree (the metadata value `text` of
    the checkpoint `source`), or None if `text` is None.  TreeError for
    anything but a tree of the form ckptfs.save writes, within
    TREE_MAX_DEPTH and TREE_MAX_NODES."""
    if text is None:
        return None
    what = "metadata '%s' of %s" % (TREE_KEY, source)
    try:
        doc = json.loads(text)
    except RecursionError:
        raise TreeError("%s is nested too deep to parse (a tree is at "
                        "most %d levels deep)"
                        % (what, TREE_MAX_DEPTH)) from None
    except ValueError as exc:
        raise TreeError("%s is not JSON: %s"
                        % (what, _short(str(exc)))) from None
    version = doc.get("version") if isinstance(doc, dict) else None
    if type(version) is int and version != TREE_VERSION:
        raise UnsupportedError("%s is of an unknown version (this "
                               "ckptfs reads version %d)"
                               % (what, TREE_VERSION))
    if not (type(version) is int and sorted(doc) == ["root", "version"]):
        raise TreeError("%s is not a tree: %s, where ckptfs.save writes "
                        "{\"version\": %d, \"root\": node}"
                        % (what, _what(doc) if not isinstance(doc, dict)
                           else "an object with the keys %s"
                           % sorted(doc), TREE_VERSION))
    walk = _Parse(what)
    root = walk.node(doc["root"], ())
    return Tree(root, walk.items)


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
