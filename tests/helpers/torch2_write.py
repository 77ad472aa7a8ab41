"""torch2_write.py - run inside a torch 2.x root by tests/fs/mount_torch2.sh
(through scripts/in-torch-root.sh): writes, with that root's torch and
safetensors, checkpoints of one state and the reference the host compares
mounts of them with.

    torch2_write.py OUT
        OUT/plain   dcp.save(state, checkpoint_id=OUT/plain)
        OUT/ck      dcp.save(state, storage_writer=ckptfs.torch.StorageWriter)
        OUT/st.safetensors, OUT/hf/   safetensors.torch.save_file of its
                    tensors: one file, and an HF sharded folder (two files
                    and model.safetensors.index.json)
        OUT/ref/    per tensor FQN: FQN.bin (its bytes in row-major order,
                    as torch holds them; a BytesIO's value); plain.txt,
                    ck.txt, st.txt, hf.txt list what each checkpoint
                    holds, one line per tensor 'FQN DTYPE DIM0,DIM1,...'
                    (ckptfs dtype names, '-' for no dims) and per byte
                    object 'FQN bytes -'
Each checkpoint is loaded back first (dcp.load, safe_open) and compared
with the state (bit-exact), so that the reference is what torch reads too.
"""
import io
import json
import os
import sys

import torch
import torch.distributed.checkpoint as dcp

import ckptfs.torch

NAMES = {torch.float32: "f32", torch.bfloat16: "bf16", torch.float16: "f16",
         torch.float64: "f64", torch.int64: "i64", torch.int32: "i32",
         torch.int8: "i8", torch.uint8: "u8", torch.bool: "bool",
         torch.float8_e4m3fn: "f8e4m3", torch.float8_e5m2: "f8e5m2"}


def state(with_fp8):
    g = torch.Generator().manual_seed(23)
    base = torch.randn(6, 10, generator=g)
    sd = {
        "model.w": base,
        "model.wt": base.t(),                        # not contiguous
        "model.bf16": torch.randn(5, 7, generator=g).bfloat16(),
        "model.f16": torch.randn(33, generator=g).half(),
        "model.f64": torch.randn(3, 2, generator=g).double(),
        "model.steps": torch.tensor(1234567890123, dtype=torch.int64),
        "model.i32": torch.randint(-2**31, 2**31 - 1, (4, 4), generator=g,
                                   dtype=torch.int32),
        "model.i8": torch.randint(-128, 127, (9,), generator=g,
                                  dtype=torch.int8),
        "model.u8": torch.randint(0, 255, (2, 3, 4), generator=g,
                                  dtype=torch.uint8),
        "model.mask": torch.randn(11, generator=g) > 0,
        "rng": io.BytesIO(bytes(range(256)) * 3),
    }
    if with_fp8:
        sd["model.f8e4m3"] = torch.randn(8, 8, generator=g).to(
            torch.float8_e4m3fn)
        sd["model.f8e5m2"] = torch.randn(16, generator=g).to(
            torch.float8_e5m2)
    return sd


def raw(t):
    return t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def loaded(sd, path, reader):
    """What dcp.load gives for sd's keys from path."""
    out = {k: (io.BytesIO() if isinstance(v, io.BytesIO)
               else torch.zeros_like(v.contiguous()))
           for k, v in sd.items()}
    if reader is None:
        dcp.load(out, checkpoint_id=path)
    else:
        dcp.load(out, storage_reader=reader)
    return out


def check_same(sd, back, what):
    for k, v in sd.items():
        if isinstance(v, io.BytesIO):
            ok = back[k].getvalue() == v.getvalue()
        else:
            ok = back[k].dtype == v.dtype and raw(back[k]) == raw(v)
        if not ok:
            sys.exit("torch2_write: %s: %s loads back different" % (what, k))


def write_safetensors(sd, out):
    """OUT/st.safetensors (one file) and OUT/hf/ (two shards and
    model.safetensors.index.json, as HF writes a sharded model), written
    by the safetensors package and read back with safe_open; the tensors
    of sd (contiguous copies: safetensors refuses views and shared
    storage)."""
    from safetensors import safe_open
    from safetensors.torch import save_file
    st = {k: v.contiguous().clone() for k, v in sd.items()
          if not isinstance(v, io.BytesIO)}
    save_file(st, os.path.join(out, "st.safetensors"),
              metadata={"format": "pt"})
    hf = os.path.join(out, "hf")
    os.makedirs(hf)
    names = sorted(st)
    shards = {"model-00001-of-00002.safetensors": names[:len(names) // 2],
              "model-00002-of-00002.safetensors": names[len(names) // 2:]}
    weight_map = {}
    for fname, keys in shards.items():
        save_file({k: st[k] for k in keys}, os.path.join(hf, fname),
                  metadata={"format": "pt"})
        weight_map.update({k: fname for k in keys})
    with open(os.path.join(hf, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": sum(
            t.numel() * t.element_size() for t in st.values())},
            "weight_map": weight_map}, f)
    with safe_open(os.path.join(out, "st.safetensors"), "pt") as f:
        check_same(st, {k: f.get_tensor(k) for k in f.keys()}, "st")
    return st


def main(out):
    plain, ck, ref = (os.path.join(out, d) for d in ("plain", "ck", "ref"))
    os.makedirs(ref)
    sd = state(with_fp8=True)
    # plain DCP: the dtypes the C reader read on main (no fp8 storages)
    sd_plain = {k: v for k, v in sd.items() if "f8" not in k}
    dcp.save(sd_plain, checkpoint_id=plain)
    check_same(sd_plain, loaded(sd_plain, plain, None), "plain")
    dcp.save(sd, storage_writer=ckptfs.torch.StorageWriter(ck))
    check_same(sd, loaded(sd, ck, ckptfs.torch.StorageReader(ck)), "ck")
    st = write_safetensors(sd, out)
    for k, v in sd.items():
        with open(os.path.join(ref, k + ".bin"), "wb") as f:
            f.write(v.getvalue() if isinstance(v, io.BytesIO) else raw(v))
    for name, part in (("plain", sd_plain), ("ck", sd), ("st", st),
                       ("hf", st)):
        with open(os.path.join(ref, name + ".txt"), "w") as lines:
            for k, v in part.items():
                lines.write("%s bytes -\n" % k if isinstance(v, io.BytesIO)
                            else "%s %s %s\n" % (k, NAMES[v.dtype], ",".join(
                                str(n) for n in v.shape) or "-"))
    print("torch %s wrote %s and %s" % (torch.__version__, plain, ck))


if __name__ == "__main__":
    main(sys.argv[1])
