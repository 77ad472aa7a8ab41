#!/bin/bash
# export_bench.sh - `make bench`'s export part (issue 24): on a ~1 GiB
# state of bf16 weights (random normal values, as trained weights look)
# saved by ckptfs with its default codec,
#   1. `ckpt export CK OUT.safetensors` (reads and decodes every frame)
#      against safetensors.torch.save_file of the same state already in
#      memory (target >= 0.8x its speed);
#   2. load_file of the mount's .safetensors/model.safetensors, cold (page
#      cache dropped, fresh mount), against load_file of a real
#      safetensors file of the same bytes on the same disk, cold (target
#      >= 0.8x), and both again with reads throttled to 500 MB/s (cgroup
#      v1 blkio; the FUSE daemon, which does the view's disk reads, in the
#      group; target >= 1.0x: the view reads the compressed frames).
# safetensors exists only in the torch 2.x root (scripts/torch-root.sh
# sid): its side runs there (tests/bench/export_bench.py), on files under
# /tmp and a mount the host made.  Without the root, or without FUSE,
# those parts are skipped with a message.  Medians of CKPT_BENCH_REPS
# (default 3).  Needs root for drop_caches and the cgroup.
set -euo pipefail
export LC_ALL=C
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
srcdir=${CKPT_SRCDIR:-$(cd "$here/../.." && pwd)}
builddir=${CKPT_BUILDDIR:-$srcdir}
CKPT=${CKPT:-$builddir/tools/ckpt}
CKPTFS=${CKPTFS:-$builddir/fs/ckptfs}
py=${CKPT_BENCH_PYTHON:-/usr/bin/python3}
mb=${CKPT_BENCH_MB:-1024}
reps=${CKPT_BENCH_REPS:-3}
root=/var/cache/ckptfs/roots/sid
inroot() { "$srcdir/scripts/in-torch-root.sh" sid "$@"; }

if [ ! -d "$root/usr/lib/python3/dist-packages/safetensors" ]; then
    echo "SKIP export bench: no torch 2.x root with safetensors (scripts/torch-root.sh sid makes it)"
    exit 0
fi
dir=$(mktemp -d /tmp/ckpt-export-bench.XXXXXX)
mnt=$dir/mnt
cg=/sys/fs/cgroup/blkio/ckpt-export-bench.$$
daemon=
cleanup() {
    mountpoint -q "$mnt" 2>/dev/null && fusermount3 -u "$mnt" 2>/dev/null
    [ -n "$daemon" ] && wait "$daemon" 2>/dev/null
    [ -d "$cg" ] && rmdir "$cg" 2>/dev/null
    rm -rf "$dir"
}
trap cleanup EXIT
mkdir -p "$mnt"

median() { sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
drop() { sync; echo 3 >/proc/sys/vm/drop_caches; }
now() { date +%s.%N; }

echo "== export bench: ${mb} MiB of bf16, $reps repetitions (medians)"
PYTHONPATH=$builddir/python "$py" - "$dir/ck" "$mb" <<'EOF'
import sys
import numpy as np
import ckptfs
path, mb = sys.argv[1], int(sys.argv[2])
rng = np.random.default_rng(0)
per = 64 << 20                      # bytes per tensor
state = {}
for i in range(max(1, (mb << 20) // per)):
    f = (rng.standard_normal(per // 2, dtype=np.float32) * 0.02)
    bits = (f.view(np.uint32) >> 16).astype(np.uint16)   # bf16
    state["layers.%d.weight" % i] = ckptfs.Raw(bits.reshape(4096, -1), "bf16")
ckptfs.save(path, state)
EOF
"$CKPT" ls "$dir/ck" | tail -n +2 | awk '{ r += $4; s += $5 } END { printf "   stored %.0f MB of %.0f MB (ratio %.2f)\n", s / 1e6, r / 1e6, r / s }'
"$CKPT" export "$dir/ck" "$dir/ref.safetensors" 2>/dev/null
bytes=$(stat -c %s "$dir/ref.safetensors")

# 1. export against save_file from memory
ex=() sf=()
for ((i = 0; i < reps; i++)); do
    rm -f "$dir/out.safetensors" "$dir/sf.safetensors"
    sync
    t0=$(now); "$CKPT" export "$dir/ck" "$dir/out.safetensors" 2>/dev/null; t1=$(now)
    ex+=("$(echo "$t1 - $t0" | bc)")
    sync
    sf+=("$(inroot python3 "$srcdir/tests/bench/export_bench.py" save "$dir/ref.safetensors" "$dir/sf.safetensors" | cut -d' ' -f1)")
done
cmp -s "$dir/out.safetensors" "$dir/ref.safetensors" || { echo "bench: export output differs between runs" >&2; exit 1; }
e=$(printf '%s\n' "${ex[@]}" | median); s=$(printf '%s\n' "${sf[@]}" | median)
awk -v e="$e" -v s="$s" -v b="$bytes" 'BEGIN {
    printf "   ckpt export (decode + write): %6.2f s  %7.0f MB/s\n", e, b / e / 1e6
    printf "   save_file from memory:        %6.2f s  %7.0f MB/s\n", s, b / s / 1e6
    printf "   export / save_file speed: %.2fx (target >= 0.8x)\n", s / e }'
rm -f "$dir/out.safetensors" "$dir/sf.safetensors"

if [ ! -c /dev/fuse ] || [ ! -x "$CKPTFS" ]; then
    echo "SKIP the .safetensors/ view: no FUSE or no ckptfs"
    exit 0
fi

# view_load [CGROUP]: cold load_file of the view on a fresh mount (the
# daemon in CGROUP when given); prints seconds.
view_load() {
    drop
    "$CKPTFS" -f "$dir/ck" "$mnt" 2>>"$dir/daemon.log" &
    daemon=$!
    for _ in $(seq 100); do mountpoint -q "$mnt" && break; sleep 0.1; done
    [ -n "${1:-}" ] && echo "$daemon" >"$1/cgroup.procs"
    CKPT_ROOT_FUSE=1 inroot python3 "$srcdir/tests/bench/export_bench.py" load "$mnt/.safetensors/model.safetensors" | cut -d' ' -f1
    fusermount3 -u "$mnt"
    # (a torch root of another process, started meanwhile, may hold a
    # copy of the mount: the daemon is then told to end)
    for _ in $(seq 50); do kill -0 "$daemon" 2>/dev/null || break; sleep 0.1; done
    kill -TERM "$daemon" 2>/dev/null || true
    wait "$daemon" || true
    daemon=
}
# file_load [CGROUP]: cold load_file of the real file (the reader in
# CGROUP when given).
file_load() {
    drop
    ( [ -n "${1:-}" ] && echo "$BASHPID" >"$1/cgroup.procs"
      exec "$srcdir/scripts/in-torch-root.sh" sid python3 "$srcdir/tests/bench/export_bench.py" load "$dir/ref.safetensors" ) | cut -d' ' -f1
}
compare() {
    local what=$1 target=$2 cgroup=${3:-} v=() f=()
    for ((i = 0; i < reps; i++)); do
        v+=("$(view_load "$cgroup")")
        f+=("$(file_load "$cgroup")")
    done
    local vm fm
    vm=$(printf '%s\n' "${v[@]}" | median); fm=$(printf '%s\n' "${f[@]}" | median)
    awk -v v="$vm" -v f="$fm" -v b="$bytes" -v w="$what" -v t="$target" 'BEGIN {
        printf "   %s: load_file of .safetensors/ %6.2f s (%5.0f MB/s), of the file %6.2f s (%5.0f MB/s): %.2fx (target >= %s)\n",
            w, v, b / v / 1e6, f, b / f / 1e6, f / v, t }'
}
compare "cold" 0.8x
dev=$(lsblk -no MAJ:MIN "$(findmnt -no SOURCE -T "$dir" | head -n1)" 2>/dev/null | head -n1 | tr -d ' ')
if [ -d /sys/fs/cgroup/blkio ] && [ -n "$dev" ] && mkdir "$cg" 2>/dev/null; then
    echo "$dev 500000000" >"$cg/blkio.throttle.read_bps_device"
    compare "cold, reads throttled to 500 MB/s" 1.0x "$cg"
else
    echo "SKIP the throttled loads: no cgroup v1 blkio or no block device for $dir"
fi
