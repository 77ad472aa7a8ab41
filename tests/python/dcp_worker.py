"""dcp_worker.py - one rank of the DCP backend tests (tests/python/
test_dcp.py starts them; torch.distributed over gloo, file:// rendezvous).

    dcp_worker.py save ROOT RANK WORLD INIT
        2 ranks save ROOT/good through ckptfs.torch.StorageWriter:
        ShardedTensors split by rows (f32), by columns (bf16), unevenly
        (i64, 3+2 rows), a 3-D f32 split by its middle dimension, a plain
        tensor every rank holds (replicated), a BytesIO and a nested
        value.  Then saves that must fail on every rank with nothing
        committed and ROOT/good unchanged: into ROOT/good again (committed),
        and, through planners that declare bad pieces, ROOT/overlap (rank
        1's rows overlap rank 0's), ROOT/gap (rank 1 writes nothing of a
        tensor), ROOT/dtype (rank 1 declares f64 for an f32 tensor).
    dcp_worker.py load ROOT RANK WORLD INIT
        WORLD ranks load ROOT/good with load_state_dict and
        ckptfs.torch.StorageReader into ShardedTensors split WORLD ways
        (rows, columns, uneven), or, for WORLD 1, plain tensors; every
        element is compared with reference().

Prints 'ok WHAT' / 'FAIL WHAT' lines; exits 1 if any check failed.
"""
import io
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import util  # noqa: E402

torch = util.need_torch()
import torch.distributed as dist  # noqa: E402
import ckptfs  # noqa: E402
import ckptfs.torch as ct  # noqa: E402

try:
    from torch.distributed.checkpoint import (  # noqa: F401
        load_state_dict, save_state_dict)
    from torch.distributed.checkpoint.default_planner import (
        DefaultSavePlanner)
    from torch.distributed.checkpoint.metadata import (
        ChunkStorageMetadata, MetadataIndex)
except ImportError:
    from torch.distributed._shard.checkpoint import (
        load_state_dict, save_state_dict)
    from torch.distributed._shard.checkpoint.default_planner import (
        DefaultSavePlanner)
    from torch.distributed._shard.checkpoint.metadata import (
        ChunkStorageMetadata, MetadataIndex)
from torch.distributed._shard.metadata import ShardMetadata  # noqa: E402
from torch.distributed._shard.sharded_tensor import (  # noqa: E402
    Shard, init_from_local_shards)

FAILS = 0


def say(cond, what):
    global FAILS
    print(("ok " if cond else "FAIL ") + what, flush=True)
    FAILS += 0 if cond else 1


def reference():
    """The global tensors of the test checkpoint."""
    g = torch.Generator().manual_seed(42)
    return {
        "layer.rows": torch.arange(8 * 6, dtype=torch.float32).reshape(8, 6)
        * 0.25,
        "layer.cols": (torch.randn(4, 6, generator=g)).to(torch.bfloat16),
        "layer.vec": torch.arange(5, dtype=torch.int64) * 1000003 - 7,
        "big": torch.randn(12, 300, 5, generator=g),
        "layer.replicated": torch.linspace(-1, 1, 9),
    }


BYTES = b"\x00rng-state\xff" * 7


def split(n, parts):
    """numpy.array_split's sizes of n in `parts`."""
    return [n // parts + (1 if i < n % parts else 0) for i in range(parts)]


def box(rank, world, shape, dim, sizes=None):
    sizes = sizes or split(shape[dim], world)
    offs = [0] * len(shape)
    lens = list(shape)
    offs[dim] = sum(sizes[:rank])
    lens[dim] = sizes[rank]
    return offs, lens


def sharded(full, rank, offs, lens, fill=None):
    sl = tuple(slice(o, o + n) for o, n in zip(offs, lens))
    local = full[sl].clone() if fill is None else torch.full(
        lens, fill, dtype=full.dtype)
    md = ShardMetadata(list(offs), list(lens), "rank:%d/cpu" % rank)
    return init_from_local_shards([Shard(local, md)], list(full.shape))


LAYOUT_SAVE = {"layer.rows": 0, "layer.cols": 1, "layer.vec": 0, "big": 1}


def save_state(rank, world):
    ref = reference()
    sd = {}
    for name, dim in LAYOUT_SAVE.items():
        sizes = [3, 2] if name == "layer.vec" else None
        offs, lens = box(rank, world, ref[name].shape, dim, sizes)
        sd[name] = sharded(ref[name], rank, offs, lens)
    sd["layer.replicated"] = ref["layer.replicated"].clone()
    sd["rng"] = io.BytesIO(BYTES)
    return sd


class BadPlanner(DefaultSavePlanner):
    """Rank 1 declares a bad piece of layer.rows: 'overlap' moves it onto
    rank 0's rows, 'gap' drops it, 'dtype' declares (and gives) f64."""

    def __init__(self, kind, rank):
        super().__init__()
        self.kind, self.rank, self.swap = kind, rank, {}

    def create_local_plan(self):
        plan = super().create_local_plan()
        if self.rank != 1:
            return plan
        import dataclasses
        items = []
        for it in plan.items:
            if it.index.fqn != "layer.rows":
                items.append(it)
                continue
            if self.kind == "gap":
                continue
            td = it.tensor_data
            if self.kind == "overlap":
                offs = torch.Size([2, 0])
                new = dataclasses.replace(
                    it, index=MetadataIndex("layer.rows", offs),
                    tensor_data=dataclasses.replace(
                        td, chunk=ChunkStorageMetadata(offsets=offs,
                                                       sizes=td.chunk.sizes)))
                self.swap[new.index] = torch.ones(4, 6)
            else:
                props = dataclasses.replace(td.properties,
                                            dtype=torch.float64)
                new = dataclasses.replace(
                    it, tensor_data=dataclasses.replace(td,
                                                        properties=props))
                self.swap[new.index] = torch.ones(4, 6, dtype=torch.float64)
            items.append(new)
        self.plan = dataclasses.replace(plan, items=items)
        return self.plan

    def resolve_data(self, write_item):
        if write_item.index in self.swap:
            return self.swap[write_item.index]
        return super().resolve_data(write_item)


def expect_refused(root, name, planner, words, good_snap):
    path = os.path.join(root, name)
    try:
        save_state_dict(save_state(dist.get_rank(), dist.get_world_size()),
                        ct.StorageWriter(path), planner=planner)
        say(False, "%s: the save was refused" % name)
    except BaseException as exc:   # 1.13's CheckpointException is one
        text = str(exc)
        named = all(any(a in text for a in w.split("|")) for w in words)
        say(named, "%s: refused with a message naming %s" % (name, words))
        if not named:
            print("     message: %s" % text[-600:])
    dist.barrier()
    if name != "good":
        say(not os.path.exists(os.path.join(path, "index.db")),
            "%s: nothing committed" % name)
    say(util.snapshot(os.path.join(root, "good")) == good_snap,
        "%s: ROOT/good unchanged" % name)


def exceptions_travel():
    """Whether DCP can send a rank's exception to the others: it pickles
    the exception with traceback.extract_tb(), whose frames hold code
    objects on Python 3.13 (torch 2.6 on Debian trixie), so a refused
    save there fails with "cannot pickle code objects" and the other
    ranks wait forever (torch's bug, not ckptfs's)."""
    import pickle
    import traceback
    try:
        raise ValueError("probe")
    except ValueError as exc:
        try:
            pickle.dumps(traceback.extract_tb(exc.__traceback__))
            return True
        except TypeError:
            return False


def cmd_save(root, rank, world):
    good = os.path.join(root, "good")
    save_state_dict(save_state(rank, world),
                    ct.StorageWriter(good, meta={"step": 42}))
    dist.barrier()
    say(ckptfs.probe(good) == "ckptfs", "rank %d: good is committed" % rank)
    if not exceptions_travel():
        print("SKIP refusals: this torch's DCP cannot send an exception "
              "between ranks on this Python (traceback frames do not pickle)")
        return
    snap = util.snapshot(good)
    expect_refused(root, "good", None, ["already a committed checkpoint"],
                   snap)
    expect_refused(root, "overlap", BadPlanner("overlap", rank),
                   ["layer.rows", "overlap"], snap)
    # torch 2.x's own planner finds the hole first ("invalid fill")
    expect_refused(root, "gap", BadPlanner("gap", rank),
                   ["layer.rows", "cover|invalid fill"], snap)
    expect_refused(root, "dtype", BadPlanner("dtype", rank),
                   ["layer.rows", "f64"], snap)


LAYOUT_LOAD = {"layer.rows": 1, "layer.cols": 0, "layer.vec": 0, "big": 2}


def cmd_load(root, rank, world):
    ref = reference()
    good = os.path.join(root, "good")
    sd = {}
    for name, dim in LAYOUT_LOAD.items():
        if world == 1:
            sd[name] = torch.full(ref[name].shape, 9, dtype=ref[name].dtype)
            continue
        offs, lens = box(rank, world, ref[name].shape, dim)
        sd[name] = sharded(ref[name], rank, offs, lens, fill=9)
    sd["layer.replicated"] = torch.zeros(9)
    sd["rng"] = None
    load_state_dict(sd, ct.StorageReader(good), no_dist=world == 1)
    for name, dim in LAYOUT_LOAD.items():
        if world == 1:
            say(torch.equal(sd[name], ref[name]),
                "rank %d: %s equals the reference" % (rank, name))
            continue
        shard = sd[name].local_shards()[0]
        offs = shard.metadata.shard_offsets
        lens = shard.metadata.shard_sizes
        sl = tuple(slice(o, o + n) for o, n in zip(offs, lens))
        say(torch.equal(shard.tensor, ref[name][sl]),
            "rank %d: %s%s equals the reference" % (rank, name,
                                                     [(s.start, s.stop)
                                                      for s in sl]))
    say(torch.equal(sd["layer.replicated"], ref["layer.replicated"]),
        "rank %d: the replicated tensor" % rank)
    say(isinstance(sd["rng"], io.BytesIO) and sd["rng"].getvalue() == BYTES,
        "rank %d: the byte item" % rank)


def main(argv):
    cmd, root, rank, world, init = argv[1], argv[2], int(argv[3]), int(
        argv[4]), argv[5]
    if world > 1 or cmd == "save":
        dist.init_process_group("gloo", init_method="file://" + init,
                                rank=rank, world_size=world)
    (cmd_save if cmd == "save" else cmd_load)(root, rank, world)
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
    sys.exit(1 if FAILS else 0)


if __name__ == "__main__":
    main(sys.argv)
