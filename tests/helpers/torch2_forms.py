"""torch2_forms.py - run inside a torch 2.x root (scripts/in-torch-root.sh)
by tests/fs/mount_torch2.sh: writes, into OUT, PyTorch distributed
checkpoints in the forms of torch 2.x that ckptfs reads (issue 23 items
2, 3, 5) and, beside each, the reference bytes of every tensor as torch
itself loads it (dcp.load, or safetensors for what torch cannot load
back), one file per FQN:

    OUT/st    FileSystemWriter(serialization_format=SAFETENSORS)
    OUT/zstd  FileSystemWriter(_extensions=[ZStandard()])
    OUT/hf    HuggingFaceStorageWriter(enable_consolidation=True)
    OUT/ref/<name>/<fqn>   row-major bytes; OUT/ref/<name>.dtypes: lines
                           'fqn dtype' (torch's name)

Usage: python3 torch2_forms.py OUT"""
import os
import pickle
import sys

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import (FileSystemWriter,
                                          HuggingFaceStorageWriter)
from torch.distributed.checkpoint._extension import ZStandard
from torch.distributed.checkpoint.filesystem import SerializationFormat
from safetensors import safe_open
from safetensors.torch import load as st_load


def state():
    g = torch.Generator().manual_seed(11)
    return {"w": torch.randn(300, 257, generator=g),
            "emb": torch.randn(97, 64, generator=g).to(torch.bfloat16),
            "ids": torch.arange(-5, 4000, dtype=torch.int64),
            "h": torch.randn(8, 8, generator=g).half()}


def dump(out, name, tensors):
    d = os.path.join(out, "ref", name)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(out, "ref", name + ".dtypes"), "w") as f:
        for k, t in sorted(tensors.items()):
            t = t.contiguous().reshape(-1)
            with open(os.path.join(d, k), "wb") as g:
                g.write(t.view(torch.uint8).numpy().tobytes())
            f.write("%s %s\n" % (k, str(t.dtype).replace("torch.", "")))


def main(out):
    sd = state()
    p = os.path.join(out, "zstd")
    dcp.save(sd, storage_writer=FileSystemWriter(p, _extensions=[ZStandard()]))
    into = {k: torch.zeros_like(v) for k, v in sd.items()}
    dcp.load(into, checkpoint_id=p)
    dump(out, "zstd", into)

    p = os.path.join(out, "st")
    dcp.save(sd, storage_writer=FileSystemWriter(
        p, serialization_format=SerializationFormat.SAFETENSORS))
    md = pickle.load(open(os.path.join(p, ".metadata"), "rb"))
    blobs = {}
    for idx, info in md.storage_data.items():
        with open(os.path.join(p, info.relative_path), "rb") as f:
            f.seek(info.offset)
            blobs.update(st_load(f.read()))
    dump(out, "st", blobs)

    p = os.path.join(out, "hf")
    dcp.save(sd, storage_writer=HuggingFaceStorageWriter(
        p, enable_consolidation=True))
    ref = {}
    for dp, _, files in os.walk(p):
        for fn in files:
            if fn.endswith(".safetensors"):
                with safe_open(os.path.join(dp, fn), framework="pt") as f:
                    ref.update({k: f.get_tensor(k) for k in f.keys()})
    dump(out, "hf", ref)


if __name__ == "__main__":
    main(sys.argv[1])
