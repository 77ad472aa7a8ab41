"""test_torchsave.py - torch.save archives as checkpoints (issue 23 item 4,
issue 22 item 5), against the torch of the environment it runs in (1.13
on the host, 2.x in the roots):

- model.pt, a folder with pytorch_model.bin and an HF sharded folder with
  pytorch_model.bin.index.json, written here by torch.save: every tensor
  read by ckptfs.open equals torch.load's bit for bit (every dtype this
  torch has, nested dicts and lists, tied weights, storage offsets, a
  transposed weight, 0-d, stride 0), non-tensor values in the metadata;
- with torch 2.x, a DCP checkpoint of dcp.save holding every dtype (uint16,
  float8, ...: items whose storage is torch.storage.UntypedStorage) opens
  and equals dcp.load's tensors, through ckptfs.open and through
  ckptfs.torch.StorageReader;
- a 4-element slice of a 2^30-element expanded tensor (a 1 KB archive,
  and a DCP item of one) costs little memory: peak RSS of a child
  process, not time (4 GiB before);
- hostile archives, each refused naming the problem: os.system,
  builtins.eval, a __reduce__ to posix.system, the legacy format, a
  storage smaller than declared, a view past its storage, overflowing
  sizes, a compressed (zip bomb) entry, an entry whose size lies,
  duplicated entries, a pickle whose shared lists multiply; a bad tensor
  beside a good one is refused alone, in an archive and in a DCP
  checkpoint (an item asking for os.system).
Exit 0 pass, 1 fail, 77 skip."""
import json
import os
import pickle
import subprocess
import sys
import tempfile
import zipfile

try:
    import torch
except ImportError:
    print("SKIP: no torch")
    sys.exit(77)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "python"))
import ckptfs  # noqa: E402
import torchsave_ref as ref  # noqa: E402

FAILED = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        FAILED.append(what)


def refused(path, *needles):
    """ckptfs.open(path) fails with a message holding every needle."""
    try:
        ckptfs.open(path).close()
    except Exception as e:  # noqa: BLE001 - the message is what counts
        msg = str(e)
        return all(n in msg for n in needles), msg
    return False, "opened"


def same_as_torch(path, expect, what):
    ck = ckptfs.open(path, widen=False)
    keys = set(ck.keys())
    check(keys == set(expect), "%s: names %s" % (what, sorted(keys ^ set(expect))))
    bad = [k for k, t in expect.items()
           if k in keys and ck.get_tensor(k).tobytes() != ref.raw(t)]
    check(not bad, "%s: %d tensors bit-exact with torch.load (bad: %s)"
          % (what, len(expect), bad))
    ck.close()


def test_archives(d):
    ref.write(d)
    sd = torch.load(os.path.join(d, "model.pt"))
    expect = ref.flat(sd)
    same_as_torch(os.path.join(d, "model.pt"), expect, "model.pt")
    same_as_torch(os.path.join(d, "folder"), expect, "pytorch_model.bin folder")
    same_as_torch(os.path.join(d, "hf"), expect, "HF sharded folder")
    ck = ckptfs.open(os.path.join(d, "model.pt"))
    md = ck.metadata()
    check(ck.format == "torch", "format is torch: %s" % ck.format)
    check(md.get("value:epoch") == "3" and md.get("value:name") == "run-1"
          and md.get("value:none") == "None" and md.get("value:lr") == "0.5",
          "non-tensor values in the metadata: %s" % md)
    info = ck.info("model.wt")
    check(tuple(info.shape) == (5, 6), "transposed shape %s" % (info.shape,))
    ck.close()


def test_amplification(d):
    """issue 22 item 5: a small slice of a huge stride-0 view, in a
    torch.save archive and in a DCP item (4 GiB of peak RSS before)."""
    p = os.path.join(d, "expand.pt")
    check(os.path.getsize(p) < 4096, "expand.pt is %d bytes"
          % os.path.getsize(p))
    slice_rss(p, "a torch.save archive")
    q = os.path.join(d, "dcp-stride0")
    ref.dcp_stride0(q)
    slice_rss(q, "a DCP item")


def slice_rss(p, what):
    code = r"""
import resource, sys
import ckptfs
ck = ckptfs.open(sys.argv[1])
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
s = ck.get_slice("e")[1000:1004]
assert list(s) == [0.0] * 4, s
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print((after - before) // 1024)
"""
    out = subprocess.run([sys.executable, "-c", code, p], env=os.environ,
                         capture_output=True, text=True)
    grew = int(out.stdout.split()[-1]) if out.returncode == 0 else -1
    # 4 GiB before the fix; a page or two after
    check(0 <= grew < 64, "%s: a 4-element slice of a 2^30 expand: peak "
          "RSS grew %d MiB (%s)" % (what, grew, out.stderr.strip()[-300:]))


def tensor_pkl(pairs):
    return ref.pickle_dict(pairs)


def test_hostile(d):
    def path(name):
        return os.path.join(d, name + ".pt")
    good = ref.rebuild("0", 4, 0, (4,), (1,))
    store = {"0": b"\0" * 16}
    # globals that run code
    ref.archive(path("system"), b"\x80\x02cos\nsystem\n" +
                b"X\x04\0\0\0trueR.", store)
    ok, msg = refused(path("system"), "os.system")
    check(ok, "os.system refused by name: " + msg)
    ref.archive(path("eval"), b"\x80\x02cbuiltins\neval\n" +
                b"X\x04\0\0\0TrueR.", store)
    ok, msg = refused(path("eval"), "builtins.eval")
    check(ok, "builtins.eval refused by name: " + msg)

    class Trick:
        def __reduce__(self):
            return (os.system, ("true",))
    ref.archive(path("reduce"), pickle.dumps({"w": Trick()}, protocol=2),
                store)
    ok, msg = refused(path("reduce"), "system")
    check(ok, "a __reduce__ to os.system refused by name: " + msg)
    # legacy format
    torch.save({"w": torch.ones(2)}, path("legacy"),
               _use_new_zipfile_serialization=False)
    ok, msg = refused(path("legacy"), "legacy")
    check(ok, "the legacy (torch < 1.6) format refused: " + msg)
    # storages and views out of bounds, overflow: refused tensor by tensor
    cases = {
        "short": (ref.rebuild("1", 100, 0, (100,), (1,)), "holds 16 bytes"),
        "past": (ref.rebuild("0", 4, 2, (3,), (1,)), "reach element"),
        "huge": (ref.rebuild("0", 4, 0, (2 ** 62, 2 ** 62), (0, 0)),
                 "overflow"),
        "missing": (ref.rebuild("9", 4, 0, (4,), (1,)), "missing"),
    }
    pairs = [("good", good)] + [(k, v[0]) for k, v in cases.items()]
    ref.archive(path("bounds"), tensor_pkl(pairs),
                {"0": b"\1" * 16, "1": b"\0" * 16})
    ck = ckptfs.open(path("bounds"), widen=False)
    check(ck.get_tensor("good").tobytes() == b"\1" * 16,
          "the good tensor beside bad ones reads")
    for name, (_, needle) in cases.items():
        try:
            ck.get_tensor(name)
            msg = "read"
        except Exception as e:  # noqa: BLE001
            msg = str(e)
        check(needle in msg and name in msg,
              "tensor '%s' refused alone, by name: %s" % (name, msg))
    ck.close()
    # one name for two tensors
    torch.save({"a.b": torch.ones(2), "a": {"b": torch.zeros(2)}},
               path("twice"))
    ok, msg = refused(path("twice"), "two tensors are named 'a.b'")
    check(ok, "a key with a dot beside the same nested path refused: " + msg)
    # zip: a compressed entry (a bomb: small stored, huge inflated)
    with zipfile.ZipFile(path("bomb"), "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("archive/data.pkl", tensor_pkl([("w", good)]))
        z.writestr("archive/data/0", b"\0" * (64 << 20))
    ok, msg = refused(path("bomb"), "compress")
    check(ok, "a compressed (bomb) entry refused: " + msg)
    # an entry whose size lies: the central directory claims 1 TB
    ref.archive(path("lie"), tensor_pkl([("w", good)]), store)
    b = bytearray(open(path("lie"), "rb").read())
    at = b.find(b"PK\x01\x02")
    while at >= 0:
        name_len = int.from_bytes(b[at + 28:at + 30], "little")
        name = bytes(b[at + 46:at + 46 + name_len])
        if name == b"archive/data/0":
            b[at + 20:at + 24] = (0xFFFFFFF0).to_bytes(4, "little")
            b[at + 24:at + 28] = (0xFFFFFFF0).to_bytes(4, "little")
        at = b.find(b"PK\x01\x02", at + 4)
    open(path("lie"), "wb").write(bytes(b))
    ok, msg = refused(path("lie"))
    ck_msg = msg
    try:
        ck = ckptfs.open(path("lie"))
        ck.get_tensor("w")
        ok2 = False
    except Exception as e:  # noqa: BLE001
        ck_msg, ok2 = str(e), True
    check(ok2 and ("outside" in ck_msg or "past" in ck_msg or "holds" in
                   ck_msg or "end" in ck_msg),
          "an entry whose size lies refused: " + ck_msg)
    # duplicated entries
    ref.archive(path("dup"), tensor_pkl([("w", good)]), store,
                extra=[("archive/data/0", b"\2" * 16)])
    ok, msg = refused(path("dup"), "twice")
    check(ok, "duplicated zip entries refused: " + msg)
    # shared lists multiplied: 2^40 leaves from a 1 KB pickle (memo i
    # is a list of memo i-1 twice)
    lvl = b"\x80\x02" + good + b"q\x000"
    for i in range(1, 41):
        lvl += b"(h" + bytes([i - 1]) + b"h" + bytes([i - 1]) + b"lq" + \
            bytes([i]) + b"0"
    lvl += b"h" + bytes([40]) + b"."
    ref.archive(path("dag"), lvl, store)
    ok, msg = refused(path("dag"), "names more than")
    check(ok, "a pickle naming 2^40 values through shared lists refused: "
          + msg)


def test_dcp_bad_item(d):
    """issue 23 item 1: one DCP item that cannot be read (its pickle asks
    for os.system) refuses its tensor alone, by name; the others serve."""
    p = os.path.join(d, "dcp-bad")
    ref.dcp_save(p, {"a": torch.arange(4.0), "b": torch.ones(4)})
    evil = os.path.join(d, "evil.zip")
    ref.archive(evil, b"\x80\x02cos\nsystem\nX\x04\0\0\0trueR.",
                {"0": b"\0" * 16})
    ref.dcp_put_item(p, "b", open(evil, "rb").read())
    ck = ckptfs.open(p, widen=False)
    check(ck.get_tensor("a").tobytes() == ref.raw(torch.arange(4.0)),
          "DCP: the good tensor beside a refused item reads")
    try:
        ck.get_tensor("b")
        msg = "read"
    except Exception as e:  # noqa: BLE001
        msg = str(e)
    check("'b'" in msg and "os.system" in msg,
          "DCP: the item asking for os.system refuses tensor 'b' alone: "
          + msg)
    ck.close()


def test_dcp_dtypes(d):
    """torch 2.x dcp.save of every dtype: items of UntypedStorage."""
    try:
        import torch.distributed.checkpoint as dcp
        if not hasattr(torch, "uint16"):
            raise ImportError
    except ImportError:
        print("skip: DCP of torch 2.x with uint16 (this torch: %s)"
              % torch.__version__)
        return
    g = torch.Generator().manual_seed(1)
    sd = {str(dt).split(".")[1]: ref.sample(dt, (5, 3), g)
          for dt in ref.dtypes()}
    p = os.path.join(d, "dcp")
    dcp.save(sd, checkpoint_id=p)
    back = {k: torch.empty_like(v) for k, v in sd.items()}
    dcp.load(back, checkpoint_id=p)
    same_as_torch(p, back, "DCP of every dtype (torch %s)"
                  % torch.__version__)
    import ckptfs.torch as ct
    via = {k: torch.empty_like(v) for k, v in sd.items()}
    dcp.load(via, storage_reader=ct.StorageReader(p))
    bad = [k for k in sd if ref.raw(via[k]) != ref.raw(back[k])]
    check(not bad, "DCP of every dtype through ckptfs.torch.StorageReader "
          "equals dcp.load's (bad: %s)" % bad)
    # the same tensors torch.save'd: every dtype of this torch in an archive
    torch.save(sd, os.path.join(d, "dtypes.pt"))
    same_as_torch(os.path.join(d, "dtypes.pt"),
                  torch.load(os.path.join(d, "dtypes.pt")),
                  "torch.save of every dtype (torch %s)" % torch.__version__)


def main():
    with tempfile.TemporaryDirectory() as d:
        test_archives(d)
        test_amplification(d)
        test_hostile(d)
        test_dcp_bad_item(d)
        test_dcp_dtypes(d)
    if FAILED:
        print("%d FAILED" % len(FAILED))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
