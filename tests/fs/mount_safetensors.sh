#!/bin/bash
# mount_safetensors.sh - the mount's .safetensors/ view (docs/MOUNT.md):
# every tensor of a checkpoint (every dtype) in model.safetensors, or past
# -o st_shard_size in model-0000i-of-0000n.safetensors files with
# model.safetensors.index.json; sizes exact in stat; the files parsed here
# by the published layout and compared with the data this test generated;
# a read of one tensor's bytes decodes only that tensor's frames
# (.ckptfs/stats); and, in the torch 2.x root when it exists, safetensors'
# safe_open (get_tensor, get_slice) and load_file on the mount
# (tests/compat/st_view_check.py), bit-exact.
. "$(dirname "$0")/lib.sh"
need_python

REF=$TMP/ref
CK=$TMP/ck
mkdir -p "$REF"
# The build's ckptfs package (in a sanitizer build, with the sanitizer
# runtimes preloaded, as tests/python/run.sh does).
PYENV=(env "PYTHONPATH=$CKPT_BUILDDIR/python")
if [[ $(ldd "$CKPT" 2>/dev/null) == *libasan* ]]; then
    PYENV+=("LD_PRELOAD=$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libubsan.so)"
            ASAN_OPTIONS=detect_leaks=0)
fi
"${PYENV[@]}" "$PY" - "$CK" "$REF" <<'EOF' || exit 99
import json, os, sys
import numpy as np
import ckptfs
ck, ref = sys.argv[1], sys.argv[2]
rng = np.random.default_rng(5)
kinds = {"f64": "<f8", "f32": "<f4", "f16": "<f2", "bf16": "<u2",
         "f8e4m3": "|u1", "f8e5m2": "|u1", "i64": "<i8", "i32": "<i4",
         "i16": "<i2", "i8": "|i1", "u64": "<u8", "u32": "<u4",
         "u16": "<u2", "u8": "|u1", "bool": "|b1"}
torch_names = {"f64": "float64", "f32": "float32", "f16": "float16",
               "bf16": "bfloat16", "f8e4m3": "float8_e4m3fn",
               "f8e5m2": "float8_e5m2", "i64": "int64", "i32": "int32",
               "i16": "int16", "i8": "int8", "u64": "uint64",
               "u32": "uint32", "u16": "uint16", "u8": "uint8",
               "bool": "bool"}
shapes = [(40, 300), (7,), (), (3, 0), (5, 6, 7)]
state, table = {}, {}
for i, (name, npdt) in enumerate(kinds.items()):
    shape = shapes[i % len(shapes)]
    dt = np.dtype(npdt)
    n = int(np.prod(shape))
    if dt.kind == "b":
        arr = rng.integers(0, 2, n).astype(dt).reshape(shape)
    else:
        arr = rng.integers(0, 256, n * dt.itemsize, dtype=np.uint8) \
            .view(dt).reshape(shape)
    fqn = "m%d.%s" % (i % 2, name)
    state[fqn] = ckptfs.Raw(arr, name) if name in ("bf16", "f8e4m3", "f8e5m2") else arr
    with open(os.path.join(ref, fqn + ".bin"), "wb") as f:
        f.write(arr.tobytes())
    table[fqn] = [torch_names[name], list(shape), fqn + ".bin"]
# a big tensor of many frames, to see what one read touches
big = rng.integers(-2**31, 2**31, 1 << 20, dtype=np.int64).astype("<i4")
state["big"] = big
big.tofile(os.path.join(ref, "big.bin"))
table["big"] = ["int32", [1 << 20], "big.bin"]
state["blob"] = b"not in the view"
ckptfs.save(ck, state, codec="zstd", frame_size=64 << 10, meta={"step": 9})
with open(os.path.join(ref, "ref.json"), "w") as f:
    json.dump(table, f)
EOF

# parse FILE...: the safetensors files by the published layout, each
# tensor compared with REF; prints ok/FAIL lines and "size NAME BYTES".
parse() {
    "$PY" - "$REF" "$@" <<'EOF'
import json, os, struct, sys
ref = json.load(open(os.path.join(sys.argv[1], "ref.json")))
seen = set()
for path in sys.argv[2:]:
    blob = open(path, "rb").read()
    st = os.stat(path).st_size
    print(("ok   - " if st == len(blob) else "FAIL - ") +
          "%s: stat size %d = bytes read %d" % (os.path.basename(path), st, len(blob)))
    n = struct.unpack("<Q", blob[:8])[0]
    head = json.loads(blob[8:8 + n])
    meta = head.pop("__metadata__")
    good = meta.get("format") == "pt" and meta.get("step") == "9"
    print(("ok   - " if good else "FAIL - ") + "__metadata__ %r" % meta)
    for k, e in head.items():
        a, b = e["data_offsets"]
        want = open(os.path.join(sys.argv[1], ref[k][2]), "rb").read()
        ok = blob[8 + n + a:8 + n + b] == want and e["shape"] == ref[k][1]
        print(("ok   - " if ok else "FAIL - ") + "%s: %s %s" % (os.path.basename(path), k, e["dtype"]))
        seen.add(k)
print(("ok   - " if seen == set(ref) else "FAIL - ") +
      "every tensor in the view, the byte object left out (%d)" % len(seen))
EOF
}

# in_sid_root DESC: st_view_check.py on the mount, with safetensors and
# torch 2.x in the sid root (when scripts/torch-root.sh has made it).
SID_ST=/var/cache/ckptfs/roots/sid/usr/lib/python3/dist-packages/safetensors
in_sid_root() {
    if [ ! -d "$SID_ST" ]; then
        echo "     (no torch 2.x root with safetensors: safe_open on the view"
        echo "      not run; scripts/torch-root.sh sid makes it)"
        return
    fi
    CKPT_ROOT_FUSE=1 "$CKPT_SRCDIR/scripts/in-torch-root.sh" sid python3 \
        "$CKPT_SRCDIR/tests/compat/st_view_check.py" "$MNT" "$REF" >"$TMP/sid.out" 2>&1
    local rc=$?
    report "$TMP/sid.out" "safetensors, $1 (torch 2.x root): "
    [ "$rc" -eq 0 ] && ok "st_view_check.py passed in the root ($1)" ||
        { bad "st_view_check.py ($1): exit $rc"; tail -n 5 "$TMP/sid.out"; }
}

MNT=$TMP/mnt
mkdir -p "$MNT"
if mount_ck "$CK" "$MNT"; then
    V=$MNT/.safetensors
    # first, on a fresh mount, one tensor's bytes only (readahead off): the
    # daemon reads its frames, and at most one 64K frame of each neighbour
    # (the kernel reads whole pages), not the 4.6 MB of the file
    "$PY" - "$V/model.safetensors" "$MNT/.ckptfs/stats" <<'EOF' >"$TMP/one.out"
import json, os, struct, sys
path, stats = sys.argv[1], sys.argv[2]
def read_bytes():
    for line in open(stats):
        k, v = line.split()
        if k == "bytes_read":
            return int(v)
fd = os.open(path, os.O_RDONLY)
os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
n = struct.unpack("<Q", os.pread(fd, 8, 0))[0]
head = json.loads(os.pread(fd, n, 8))
a, b = head["m0.f64"]["data_offsets"]
before = read_bytes()
data = os.pread(fd, b - a, 8 + n + a)
after = read_bytes()
os.close(fd)
good = len(data) == b - a and 0 < after - before <= (b - a) + 2 * 65536
print(("ok   - " if good else "FAIL - ") +
      "reading m0.f64 (%d bytes) read %d bytes of shard files" % (b - a, after - before))
EOF
    check "the one-tensor read ran" test -s "$TMP/one.out"
    report "$TMP/one.out" "one tensor: "
    [ "$(ls -A "$V")" = model.safetensors ] && ok "one model.safetensors" ||
        bad ".safetensors/ holds: $(ls -A "$V" | tr '\n' ' ')"
    parse "$V/model.safetensors" >"$TMP/p.out"
    report "$TMP/p.out" "whole file: "
    in_sid_root "whole file"
    umount_ck "$MNT"
    expect_daemon_clean "daemon" "$MNT_LOG"
fi

if mount_ck "$CK" "$MNT" -o st_shard_size=1M; then
    V=$MNT/.safetensors
    files=$(ls "$V" | grep -c '^model-0000[0-9]-of-0000[0-9]\.safetensors$')
    [ "$files" -ge 2 ] && [ -f "$V/model.safetensors.index.json" ] &&
        ok "st_shard_size=1M: $files shards and the index" ||
        bad "st_shard_size=1M: $(ls "$V" | tr '\n' ' ')"
    parse "$V"/model-*.safetensors >"$TMP/s.out"
    report "$TMP/s.out" "shards: "
    in_sid_root "sharded"
    umount_ck "$MNT"
    expect_daemon_clean "daemon (sharded)" "$MNT_LOG"
fi
summary
