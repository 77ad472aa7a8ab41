#!/usr/bin/python3
"""dcp_bench.py - the PyTorch distributed-checkpoint contender of `make bench`.

    dcp_bench.py save STATE_DIR OUT     time save_state_dict into OUT
    dcp_bench.py load STATE_DIR CKPT    time load_state_dict from CKPT

STATE_DIR holds state.bin and state.idx from `bench_core gen` (one line per
tensor: fqn dtype rows cols offset nbytes).  The state dict is built from
them before the clock starts; loads go into preallocated, zero-filled tensors
and are compared bit for bit with state.bin after the clock stops.  Prints
    RESULT name=dcp_save seconds=... bytes_logical=... bytes_on_disk=...
or, when this Python has no usable torch, one line starting with SKIP.
Run it with /usr/bin/python3 (run.sh does).
"""
import os
import resource
import sys
import time


sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "helpers"))
from torch_compat import allow_unhashable_dataclass_defaults  # noqa: E402

allow_unhashable_dataclass_defaults()

try:
    import numpy as np
    import torch
    from torch.distributed._shard.checkpoint import (
        FileSystemReader, FileSystemWriter, load_state_dict, save_state_dict)
except Exception as exc:  # torch missing or unusable: not an error here
    print(f"SKIP dcp: {type(exc).__name__}: {exc}".splitlines()[0])
    sys.exit(0)

# bench_core's dtype names -> (torch dtype, same-width integer types used to
# move and compare the bits exactly)
DTYPES = {
    "bf16": (torch.bfloat16, np.int16, torch.int16),
    "f32": (torch.float32, np.int32, torch.int32),
}


def read_manifest(state_dir):
    tensors = []
    with open(os.path.join(state_dir, "state.idx")) as f:
        for line in f:
            fqn, dt, rows, cols, off, nbytes = line.split()
            tensors.append((fqn, dt, (int(rows), int(cols)), int(off),
                            int(nbytes)))
    return tensors


def state_view(state_dir, dt, shape, off):
    """A read-only memmap of one tensor's bytes in state.bin, as integers."""
    return np.memmap(os.path.join(state_dir, "state.bin"), mode="r",
                     dtype=DTYPES[dt][1], offset=off, shape=shape)


def build_state(state_dir, tensors):
    state = {}
    for fqn, dt, shape, off, _ in tensors:
        bits = np.array(state_view(state_dir, dt, shape, off))
        state[fqn] = torch.from_numpy(bits).view(DTYPES[dt][0])
    return state


def disk_bytes(path):
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            total += os.lstat(os.path.join(root, name)).st_size
    return total


def peak_rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def report(name, seconds, cpu, tensors, path, extra=""):
    logical = sum(t[4] for t in tensors)
    print(f"RESULT name={name} seconds={seconds:.4f} cpu_seconds={cpu:.3f} "
          f"bytes_logical={logical} "
          f"bytes_on_disk={disk_bytes(path)} torch={torch.__version__}"
          f"{extra}", flush=True)


def cmd_save(state_dir, out):
    tensors = read_manifest(state_dir)
    state = build_state(state_dir, tensors)
    rss0 = peak_rss_mb()
    c0, t0 = time.process_time(), time.perf_counter()
    save_state_dict(state, FileSystemWriter(out, single_file_per_rank=True,
                                            sync_files=True), no_dist=True)
    secs, cpu = time.perf_counter() - t0, time.process_time() - c0
    rss1 = peak_rss_mb()
    report("dcp_save", secs, cpu, tensors, out,
           f" rss_before_mb={rss0:.1f} rss_peak_mb={rss1:.1f}"
           f" rss_growth_mb={rss1 - rss0:.1f}")


def verify(state_dir, tensors, state):
    for fqn, dt, shape, off, _ in tensors:
        want = torch.from_numpy(np.array(state_view(state_dir, dt, shape, off)))
        if not torch.equal(state[fqn].view(DTYPES[dt][2]), want):
            sys.exit(f"dcp_bench: VERIFY FAILED: {fqn} differs from the "
                     "saved bytes")


def cmd_load(state_dir, ckpt, name):
    tensors = read_manifest(state_dir)
    state = {fqn: torch.zeros(shape, dtype=DTYPES[dt][0])
             for fqn, dt, shape, _, _ in tensors}
    c0, t0 = time.process_time(), time.perf_counter()
    load_state_dict(state, FileSystemReader(ckpt), no_dist=True)
    secs, cpu = time.perf_counter() - t0, time.process_time() - c0
    verify(state_dir, tensors, state)
    report(name, secs, cpu, tensors, ckpt, " verified=1")


def main(argv):
    if len(argv) < 4 or argv[1] not in ("save", "load"):
        sys.exit("usage: dcp_bench.py save STATE_DIR OUT\n"
                 "       dcp_bench.py load STATE_DIR CKPT [NAME]")
    if argv[1] == "save":
        cmd_save(argv[2], argv[3])
    else:
        cmd_load(argv[2], argv[3], argv[4] if len(argv) > 4 else "dcp_load")


if __name__ == "__main__":
    main(sys.argv)
