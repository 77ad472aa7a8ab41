#!/usr/bin/python3
"""dcp_metadata.py - PyTorch 1.13 DCP's metadata for the layout of
scale_bench (the contender of tests/bench/scale/run.sh).

    dcp_metadata.py --writers W --tensors T --layout fsdp|tp2d

Builds, with torch's own classes and functions, what rank 0 of a W-rank
`save_state_dict` (FileSystemWriter, one file per rank) holds and writes
for W writers x T tensors laid out as scale_bench lays them out:

  plan     each rank's local SavePlan (a WriteItem per shard: MetadataIndex,
           ChunkStorageMetadata, TensorProperties, global size), passed
           through pickle as gather_object passes it to rank 0, then
           create_default_global_save_plan (the global Metadata);
  results  each rank's WriteResults (MetadataIndex -> _StorageInfo of its
           __R_0.distcp file), passed through pickle likewise, joined into
           Metadata.storage_data as FileSystemWriter.finish joins them;
  dumps    pickle.dumps(Metadata) (what finish writes as .metadata);
  loads    pickle.loads of those bytes (what every loading rank does).

Prints one line
    RESULT cmd=dcp plan_s=... results_s=... dumps_s=... loads_s=...
           metadata_bytes=... maxrss_kb=...
or a line starting with SKIP when this Python has no usable torch.
"""
import argparse
import gc
import os
import pickle
import resource
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "..", "helpers"))
from torch_compat import allow_unhashable_dataclass_defaults  # noqa: E402

allow_unhashable_dataclass_defaults()

try:
    import torch
    from torch.distributed._shard.checkpoint.default_planner import (
        create_default_global_save_plan)
    from torch.distributed._shard.checkpoint.filesystem import _StorageInfo
    from torch.distributed._shard.checkpoint.metadata import (
        ChunkStorageMetadata, MetadataIndex)
    from torch.distributed._shard.checkpoint.planner import (
        SavePlan, TensorWriteData, WriteItem, WriteItemType)
    from torch.distributed._shard.checkpoint.storage import WriteResult
    from torch.distributed._shard.sharded_tensor.metadata import (
        TensorProperties)
except Exception as exc:  # torch missing or unusable: not an error here
    print(f"SKIP dcp: {type(exc).__name__}: {exc}".splitlines()[0])
    sys.exit(0)

PIECE_BYTES = 1024
TP = 8
PARAMS = ["self_attn.q_proj.weight", "self_attn.k_proj.weight",
          "self_attn.v_proj.weight", "self_attn.o_proj.weight",
          "mlp.gate_proj.weight", "mlp.up_proj.weight",
          "mlp.down_proj.weight", "input_layernorm.weight",
          "post_attention_layernorm.weight", "mlp.router.weight"]


def tensor_name(t):
    """scale_bench.c's tensor_name."""
    return "model.layers.%d.%s" % (t // 10, PARAMS[t % 10])


def shape_and_box(layout, writers, r):
    """scale_bench.c's tensor_shape and piece_box."""
    if layout == "fsdp":
        return [writers, PIECE_BYTES // 4], [r, 0], [1, PIECE_BYTES // 4]
    return ([writers // TP * 2, TP * 128], [r // TP * 2, r % TP * 128],
            [2, 128])


def gathered(obj):
    """What rank 0 holds of another rank's object after gather_object."""
    return pickle.loads(pickle.dumps(obj))


def local_plan(layout, writers, tensors, r):
    """Rank r's SavePlan: one WriteItem per tensor shard it holds, made as
    torch's _create_write_item_for_shard makes it."""
    size, off, sz = shape_and_box(layout, writers, r)
    items = []
    for t in range(tensors):
        props = TensorProperties(dtype=torch.float32, layout=torch.strided,
                                 requires_grad=False,
                                 memory_format=torch.contiguous_format,
                                 pin_memory=False)
        chunk = ChunkStorageMetadata(offsets=torch.Size(off),
                                     sizes=torch.Size(sz))
        items.append(WriteItem(
            index=MetadataIndex(tensor_name(t), torch.Size(off)),
            type=WriteItemType.SHARD,
            tensor_data=TensorWriteData(chunk=chunk, properties=props,
                                        size=torch.Size(size))))
    return SavePlan(items)


def write_results(plan, r):
    """Rank r's WriteResults for its (global) plan: all its items in one
    file, as FileSystemWriter(single_file_per_rank=True) writes them."""
    name = "__%d_0.distcp" % r
    out = []
    for k, item in enumerate(plan.items):
        info = _StorageInfo(name, k * (PIECE_BYTES + 747), PIECE_BYTES + 747)
        out.append(WriteResult(index=item.index,
                               size_in_bytes=info.length, storage_data=info))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--writers", type=int, required=True)
    ap.add_argument("--tensors", type=int, required=True)
    ap.add_argument("--layout", choices=["fsdp", "tp2d"], required=True)
    a = ap.parse_args()

    gc.disable()   # as the figures of torch's own runs: no cycles here
    t0 = time.perf_counter()
    plans = [gathered(local_plan(a.layout, a.writers, a.tensors, r))
             for r in range(a.writers)]
    new_plans, md = create_default_global_save_plan(plans)
    del plans
    t1 = time.perf_counter()
    storage = {}
    for r in range(a.writers):
        results = gathered(write_results(new_plans[r], r))
        new_plans[r] = None
        storage.update({wr.index: wr.storage_data for wr in results})
    md.storage_data = storage
    t2 = time.perf_counter()
    blob = pickle.dumps(md)
    t3 = time.perf_counter()
    del md, storage, new_plans
    t4 = time.perf_counter()
    back = pickle.loads(blob)
    t5 = time.perf_counter()
    nchunks = sum(len(v.chunks) for v in back.state_dict_metadata.values())
    if nchunks != a.writers * a.tensors:
        sys.exit("dcp_metadata: %d chunks, expected %d" %
                 (nchunks, a.writers * a.tensors))
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print("RESULT cmd=dcp plan_s=%.3f results_s=%.3f dumps_s=%.3f "
          "loads_s=%.3f metadata_bytes=%d maxrss_kb=%d" %
          (t1 - t0, t2 - t1, t3 - t2, t5 - t4, len(blob), rss))


if __name__ == "__main__":
    main()
