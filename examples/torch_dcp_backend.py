#!/usr/bin/python3
"""torch_dcp_backend.py - PyTorch distributed checkpoint (DCP) saving into
and loading from ckptfs, with a different number of processes each way.

    python3 examples/torch_dcp_backend.py CKPT_DIR

Two processes save a small model whose weights are sharded by rows
(ShardedTensor, as FSDP-style training holds them) plus a replicated bias
and a step counter, through ckptfs.torch.StorageWriter: each writes its
own shard file, and rank 0's finish() commits the checkpoint atomically.
Then three processes load it, each into its own third of the rows, through
ckptfs.torch.StorageReader: DCP's planner reshards 2 -> 3, and each
process reads only the regions it needs.  Every value is checked.

The processes talk over gloo (CPU) with a file:// rendezvous.  Runs with
PyTorch 1.13 (torch.distributed._shard.checkpoint) and 2.x
(torch.distributed.checkpoint).  Each process's output goes to a log
file, printed when the step ends; a step that is not done within
DCP_EXAMPLE_TIMEOUT seconds (default 120), or one rank failing, ends the
step: the other ranks are killed (a rank whose peer died waits forever in
a collective), a hung rank first printing its Python stack.  Afterwards: `ckpt ls CKPT_DIR`,
`ckpt verify CKPT_DIR`, or mount it with `ckptfs CKPT_DIR /mnt/ck`.
"""
import faulthandler
import os
import shutil
import subprocess
import sys
import tempfile
import time

import torch
import torch.distributed as dist

import ckptfs.torch as ct        # first: it also makes DCP importable on
                                 # torch 1.13 with Python >= 3.11

if ct.DCP_MODULE == "torch.distributed.checkpoint":       # PyTorch 2.x
    import torch.distributed.checkpoint as dcp

    def dcp_save(sd, path):
        dcp.save(sd, storage_writer=ct.StorageWriter(path, meta={"step": 100}))

    def dcp_load(sd, path):
        dcp.load(sd, storage_reader=ct.StorageReader(path))
else:                                                     # PyTorch 1.13
    from torch.distributed._shard.checkpoint import (load_state_dict,
                                                     save_state_dict)

    def dcp_save(sd, path):
        save_state_dict(sd, ct.StorageWriter(path, meta={"step": 100}))

    def dcp_load(sd, path):
        load_state_dict(sd, ct.StorageReader(path))

from torch.distributed._shard.metadata import ShardMetadata
from torch.distributed._shard.sharded_tensor import (Shard,
                                                     init_from_local_shards)

LAYERS, DIM = 4, 96
TIMEOUT = float(os.environ.get("DCP_EXAMPLE_TIMEOUT", "120"))
GRACE = 10      # seconds the other ranks get to end after one failed


def full_weight(layer):
    """The value every rank agrees on (here computed, in training learnt)."""
    g = torch.Generator().manual_seed(layer)
    return torch.randn(DIM, DIM, generator=g).to(torch.bfloat16)


def my_rows(rank, world):
    """Rank's row range of a DIM-row tensor split `world` ways."""
    base, extra = divmod(DIM, world)
    start = rank * base + min(rank, extra)
    return start, base + (1 if rank < extra else 0)


def row_shard(full, rank, world, fill=None):
    start, n = my_rows(rank, world)
    local = (full[start:start + n].clone() if fill is None else
             torch.full((n, full.shape[1]), fill, dtype=full.dtype))
    md = ShardMetadata([start, 0], [n, full.shape[1]], "rank:%d/cpu" % rank)
    return init_from_local_shards([Shard(local, md)], list(full.shape))


def state(rank, world, empty):
    sd = {"layers.%d.weight" % i: row_shard(full_weight(i), rank, world,
                                            0 if empty else None)
          for i in range(LAYERS)}
    sd["head.bias"] = torch.zeros(DIM) if empty else torch.linspace(0, 1, DIM)
    sd["step"] = torch.tensor(0 if empty else 100)
    return sd


def worker(cmd, path, rank, world, init):
    # a rank still here just before run() kills it shows where it hangs
    faulthandler.dump_traceback_later(TIMEOUT * 0.6, exit=False)
    dist.init_process_group("gloo", init_method="file://" + init, rank=rank,
                            world_size=world)
    if cmd == "save":
        dcp_save(state(rank, world, empty=False), path)
    else:
        sd = state(rank, world, empty=True)
        dcp_load(sd, path)
        for i in range(LAYERS):
            start, n = my_rows(rank, world)
            got = sd["layers.%d.weight" % i].local_shards()[0].tensor
            assert torch.equal(got, full_weight(i)[start:start + n]), i
        assert torch.equal(sd["head.bias"], torch.linspace(0, 1, DIM))
        assert sd["step"].item() == 100
        print("rank %d: rows %d..%d of %d layers loaded and checked"
              % (rank, start, start + n - 1, LAYERS), flush=True)
    dist.barrier()
    # Every rank has saved, or loaded and checked, its part by the barrier.
    # Tearing gloo down after that can hang a rank whose peers already
    # exited (seen with torch 2.6: a rank blocked in the process group's
    # destructor, pytorch/gloo#155), so the worker process ends here
    # without the teardown.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def wait_all(procs):
    """Exit statuses of procs once all ended; a rank failing or the step
    passing TIMEOUT kills the ranks still running (status "killed")."""
    deadline = time.monotonic() + TIMEOUT
    while True:
        codes = [p.poll() for p in procs]
        if None not in codes:
            return codes
        now = time.monotonic()
        if any(c not in (None, 0) for c in codes):
            deadline = min(deadline, now + GRACE)
        if now >= deadline:
            for p, c in zip(procs, codes):
                if c is None:
                    p.kill()
                    p.wait()
            return ["killed" if c is None else c for c in codes]
        time.sleep(0.1)


def run(cmd, path, world):
    tmp = tempfile.mkdtemp(prefix="dcp-%s-" % cmd)
    try:
        logs = [open(os.path.join(tmp, "rank%d.log" % r), "w+")
                for r in range(world)]
        procs = [subprocess.Popen([sys.executable, __file__, cmd, path,
                                   str(r), str(world),
                                   os.path.join(tmp, "init")],
                                  stdout=logs[r], stderr=subprocess.STDOUT)
                 for r in range(world)]
        codes = wait_all(procs)
        for r, log in enumerate(logs):
            log.seek(0)
            for line in log:
                print("[%s rank %d] %s" % (cmd, r, line), end="")
            log.close()
        sys.stdout.flush()
    finally:
        shutil.rmtree(tmp)
    if any(codes):
        sys.exit("%s on %d ranks failed (timeout %g s): exit statuses %s"
                 % (cmd, world, TIMEOUT, codes))


def main(argv):
    if len(argv) == 6:
        worker(argv[1], argv[2], int(argv[3]), int(argv[4]), argv[5])
    elif len(argv) == 2:
        run("save", argv[1], 2)
        print("2 ranks saved %s" % argv[1])
        run("load", argv[1], 3)
        print("3 ranks loaded %s: every value checked" % argv[1])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
