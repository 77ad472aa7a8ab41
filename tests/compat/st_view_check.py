"""st_view_check.py MNT REFDIR - reads the .safetensors/ view of the
mounted checkpoint MNT with the real safetensors package (safe_open with
its mmap: get_tensor and get_slice; load_file) and compares every tensor
bit-exact with the reference REFDIR/ref.json ({name: [torch dtype, shape,
file]}, each file the tensor's raw bytes, written by the test that made
the checkpoint).  Follows model.safetensors.index.json when the view is
sharded.  Prints 'ok ...'/'FAIL ...' lines; exit 0 when all pass, 1 on a
failure, 77 without safetensors.  Run by tests/fs/mount_safetensors.sh in
the torch 2.x root on a mount made on the host."""
import json
import os
import sys

try:
    import torch
    import safetensors
    import safetensors.torch
except ImportError as e:
    print("SKIP: %s" % e)
    sys.exit(77)

mnt, refdir = sys.argv[1], sys.argv[2]
view = os.path.join(mnt, ".safetensors")
with open(os.path.join(refdir, "ref.json")) as f:
    ref = json.load(f)
fails = 0


def check(cond, what):
    global fails
    print(("ok   - " if cond else "FAIL - ") + what)
    fails += 0 if cond else 1


def raw(t):
    t = t.contiguous().reshape(-1)
    if t.dtype == torch.bool:
        t = t.to(torch.uint8)
    return t.view(torch.uint8).numpy().tobytes()


def ref_tensor(name):
    dtype, shape, fname = ref[name]
    with open(os.path.join(refdir, fname), "rb") as f:
        data = bytearray(f.read())
    dt = getattr(torch, dtype)
    if dt == torch.bool:
        return torch.frombuffer(data, dtype=torch.uint8).to(torch.bool) \
            .reshape(shape) if data else torch.zeros(shape, dtype=dt)
    if not data:
        return torch.zeros(shape, dtype=dt)
    return torch.frombuffer(data, dtype=dt).reshape(shape)


index = os.path.join(view, "model.safetensors.index.json")
if os.path.exists(index):
    with open(index) as f:
        files = sorted(set(json.load(f)["weight_map"].values()))
else:
    files = ["model.safetensors"]
seen = set()
for fname in files:
    path = os.path.join(view, fname)
    with safetensors.safe_open(path, framework="pt") as f:
        keys = list(f.keys())
        for k in keys:
            want = ref_tensor(k)
            got = f.get_tensor(k)
            check(got.dtype == want.dtype and got.shape == want.shape and
                  raw(got) == raw(want), "%s: safe_open get_tensor %s" %
                  (fname, k))
            if want.dim() >= 1 and want.shape[0] >= 2:
                sl = f.get_slice(k)[1:2]
                check(raw(sl) == raw(want[1:2]),
                      "%s: get_slice(%s)[1:2]" % (fname, k))
        seen.update(keys)
    loaded = safetensors.torch.load_file(path)
    check(all(raw(v) == raw(ref_tensor(k)) for k, v in loaded.items()),
          "%s: load_file, %d tensors bit-exact" % (fname, len(loaded)))
check(seen == set(ref), "every reference tensor is in the view (%d)"
      % len(ref))
sys.exit(1 if fails else 0)
