#!/bin/bash
# torchsave_bench.sh - `make bench`, issue 23: a ~1 GiB pytorch_model.bin
# (torch.save of a few hundred f32 and bf16 tensors, written by torch 2.x in
# the Debian sid root of scripts/torch-root.sh) read cold two ways, medians
# of CKPT_BENCH_REPS (default 3) runs, the page cache dropped before each:
#   torch   torch.load(mmap=True) in the root, then every tensor cloned
#           (each byte paged in and copied once)
#   mount   the file mounted by ckptfs on the host, every tensor file read
#           whole into memory by numpy.fromfile (the mount is made before
#           the caches are dropped; its data.pkl parse is not timed)
# and the ratio torch / mount (target >= 1.0x: the mount at least as fast).
# Skips (exit 0, saying so) when the sid root is not there, or there is no
# ckptfs daemon or /dev/fuse.  Environment: CKPTFS, CKPT_SRCDIR,
# CKPT_BENCH_DIR (scratch parent, default /tmp), CKPT_BENCH_TS_MB (default
# 1024), CKPT_BENCH_REPS, CKPT_BENCH_PYTHON (host, default /usr/bin/python3),
# CKPTFS_ROOT_CACHE (as scripts/torch-root.sh).
set -euo pipefail
export LC_ALL=C
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
srcdir=${CKPT_SRCDIR:-$(cd "$here/../.." && pwd)}
root=${CKPTFS_ROOT_CACHE:-/var/cache/ckptfs/roots}/sid
py=${CKPT_BENCH_PYTHON:-/usr/bin/python3}
mb=${CKPT_BENCH_TS_MB:-1024}
reps=${CKPT_BENCH_REPS:-3}

if [[ ! -x $root/usr/bin/python3 ]]; then
    echo "SKIP torch.save bench: no sid root at $root (scripts/torch-root.sh sid makes it)"
    exit 0
fi
if [[ ! -x ${CKPTFS:-} || ! -c /dev/fuse ]]; then
    echo "SKIP torch.save bench: no ckptfs daemon (CKPTFS=${CKPTFS:-unset}) or no /dev/fuse"
    exit 0
fi
# in-torch-root.sh binds /tmp: the scratch must be under it to be seen
work=$(mktemp -d "${CKPT_BENCH_DIR:-/tmp}/ckpt-tsbench.XXXXXX")
mnt=$work/mnt
pid=
cleanup() {
    mountpoint -q "$mnt" 2>/dev/null && fusermount3 -u "$mnt" 2>/dev/null
    [[ -n $pid ]] && wait "$pid" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT
in_root() { bash "$srcdir/scripts/in-torch-root.sh" sid "$@"; }
drop() { sync; echo 3 >/proc/sys/vm/drop_caches; }

cat >"$work/torch_side.py" <<'EOF'
import sys, time, torch
p, mode = sys.argv[1], sys.argv[2]
if mode == "write":
    mb = int(sys.argv[3])
    g = torch.Generator().manual_seed(0)
    sd, total, i = {}, 0, 0
    while total < mb << 20:      # 4 MiB f32 and 2 MiB bf16 tensors, alternating
        t = torch.randn(1024, 1024, generator=g)
        if i % 2:
            t = t.to(torch.bfloat16)
        sd["model.layers.%d.w" % i] = t
        total += t.numel() * t.element_size()
        i += 1
    torch.save(sd, p)
    print(len(sd), "tensors,", total >> 20, "MiB")
else:
    t0 = time.perf_counter()
    sd = torch.load(p, mmap=True, weights_only=True)
    n = sum(t.clone().numel() for t in sd.values())
    print("%.6f" % (time.perf_counter() - t0))
EOF
cat >"$work/mount_side.py" <<'EOF'
import os, sys, time
import numpy as np
t0 = time.perf_counter()
n = 0
for d, _, files in os.walk(sys.argv[1]):
    if "/." in d[len(sys.argv[1]):]:
        continue
    for f in files:
        n += np.fromfile(os.path.join(d, f), np.uint8).size
print("%.6f" % (time.perf_counter() - t0))
EOF

file=$work/pytorch_model.bin
echo "== torch.save bench: writing a ~$mb MiB pytorch_model.bin in the sid root"
in_root python3 "$work/torch_side.py" "$file" write "$mb"
mkdir -p "$mnt"
"$CKPTFS" -f "$file" "$mnt" >"$work/ckptfs.log" 2>&1 &
pid=$!
for _ in $(seq 100); do mountpoint -q "$mnt" && break; sleep 0.1; done
mountpoint -q "$mnt" || { echo "bench: ckptfs did not mount: $(tail -c 300 "$work/ckptfs.log")"; exit 1; }

t_torch=() t_mount=()
for ((r = 0; r < reps; r++)); do
    drop
    t_torch+=("$(in_root python3 "$work/torch_side.py" "$file" load | tail -n 1)")
    drop
    t_mount+=("$("$py" "$work/mount_side.py" "$mnt" | tail -n 1)")
done
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
mt=$(median "${t_torch[@]}")
mm=$(median "${t_mount[@]}")
echo "torch.load(mmap=True) + every tensor cloned, cold: median ${mt} s of (${t_torch[*]})"
echo "ckptfs mount, every tensor file read, cold:        median ${mm} s of (${t_mount[*]})"
awk -v a="$mt" -v b="$mm" 'BEGIN { r = a / b; printf "ratio torch/mount: %.2fx (target >= 1.0x): %s\n", r, (r >= 1.0 ? "met" : "MISSED") }'
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg) (above $(nproc) means other work shared the CPUs)"
