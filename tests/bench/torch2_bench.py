"""torch2_bench.py - the DCP backend against PyTorch 2.x's own DCP, in a
torch 2.x root (tests/bench/torch2_bench.sh runs it there for `make
bench`):

  save, load (warm: just written, in the page cache), bytes on disk of
    FileSystemWriter / FileSystemReader
    FileSystemWriter(_extensions=[ZStandard()]) / FileSystemReader
    ckptfs.torch.StorageWriter / StorageReader (codec auto)
  and torch's own dcp.load of the ZStandard-extension checkpoint against
  ckptfs reading that same checkpoint (src/foreign/dcpzs.c): through
  ckptfs.torch.StorageReader under dcp.load, and through ckptfs.load into
  the state dict (no DCP planning); target >= 1.0x for both.  ckptfs
  failing to read it fails the bench.

The state (CKPT_BENCH_TORCH2_MB MiB, default 256: half bf16, half f32,
normally distributed, in 8 MiB tensors, like a model's weights and an
optimizer's moments) is built before the clock starts; every load goes
into zero-filled tensors and is compared bit for bit with the state after
the clock stops.  Each figure is the median of CKPT_BENCH_REPEAT (3) runs.
Prints one line per contender and the ratios.

    torch2_bench.py WORKDIR
"""
import os
import shutil
import statistics
import sys
import time

import torch
import torch.distributed.checkpoint as dcp

import ckptfs
import ckptfs.torch as ct

MB = int(os.environ.get("CKPT_BENCH_TORCH2_MB", "256"))
REPEAT = int(os.environ.get("CKPT_BENCH_REPEAT", "3"))


def make_state():
    g = torch.Generator().manual_seed(1)
    sd, n, i = {}, MB << 20, 0
    while n > 0:
        dt = torch.bfloat16 if i % 2 == 0 else torch.float32
        numel = min(8 << 20, n) // (2 if dt == torch.bfloat16 else 4)
        sd["layers.%d.w" % i] = torch.randn(numel, generator=g).to(dt)
        n -= numel * (2 if dt == torch.bfloat16 else 4)
        i += 1
    return sd


def raw(t):
    return t.reshape(-1).view(torch.uint8)


def disk_bytes(path):
    return sum(os.path.getsize(os.path.join(d, f))
               for d, _, files in os.walk(path) for f in files)


def zstd_writer(path):
    from torch.distributed.checkpoint._extension import ZStandard
    return dcp.FileSystemWriter(path, _extensions=[ZStandard()])


def timed_save(sd, make_writer, path):
    shutil.rmtree(path, ignore_errors=True)
    t0 = time.perf_counter()
    dcp.save(sd, storage_writer=make_writer(path))
    return time.perf_counter() - t0


def timed_load(sd, reader, load=None):
    """Times dcp.load through `reader` (or load(dst) instead) into
    zero-filled tensors, then checks them against sd bit for bit."""
    dst = {k: torch.zeros_like(v) for k, v in sd.items()}
    t0 = time.perf_counter()
    if load:
        load(dst)
    else:
        dcp.load(dst, storage_reader=reader)
    dt = time.perf_counter() - t0
    for k, v in sd.items():
        if not torch.equal(raw(dst[k]), raw(v)):
            sys.exit("torch2_bench: %s loads back different" % k)
    return dt


def median(f):
    return statistics.median(f() for _ in range(REPEAT))


CONTENDERS = [
    ("dcp", dcp.FileSystemWriter, dcp.FileSystemReader),
    ("dcp+zstd", zstd_writer, dcp.FileSystemReader),
    ("ckptfs", ct.StorageWriter, ct.StorageReader),
]


def main(work):
    sd = make_state()
    logical = sum(v.numel() * v.element_size() for v in sd.values())
    print("torch2 bench: torch %s, %d MiB state (%d tensors), median of %d, "
          "loads warm" % (torch.__version__, logical >> 20, len(sd), REPEAT))
    res = {}
    for name, writer, reader in CONTENDERS:
        path = os.path.join(work, name)
        save_s = median(lambda: timed_save(sd, writer, path))
        load_s = median(lambda: timed_load(sd, reader(path)))
        res[name] = (save_s, load_s, disk_bytes(path))
        print("RESULT name=%s save_s=%.3f load_s=%.3f save_MBps=%.0f "
              "load_MBps=%.0f bytes_on_disk=%d (%.3f of logical)"
              % (name, save_s, load_s, logical / save_s / 1e6,
                 logical / load_s / 1e6, res[name][2],
                 res[name][2] / logical))
    ck = res["ckptfs"]
    for other in ("dcp", "dcp+zstd"):
        o = res[other]
        print("ratio ckptfs vs %s: save %.2fx, load %.2fx, disk %.2fx "
              "(> 1: ckptfs faster / smaller)" % (other, o[0] / ck[0],
                                                   o[1] / ck[1], o[2] / ck[2]))
    zpath = os.path.join(work, "dcp+zstd")
    theirs = res["dcp+zstd"][1]
    for how, f in (("ckptfs StorageReader under dcp.load",
                    lambda: timed_load(sd, ct.StorageReader(zpath))),
                   ("ckptfs.load",
                    lambda: timed_load(sd, None, lambda dst: ckptfs.load(
                        zpath, into=dst)))):
        ours = median(f)
        print("zstd-extension load: torch dcp.load %.3f s, %s %.3f s: "
              "%.2fx (target >= 1.0x): %s"
              % (theirs, how, ours, theirs / ours,
                 "met" if theirs >= ours else "NOT met"))


if __name__ == "__main__":
    main(sys.argv[1])
