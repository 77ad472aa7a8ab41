#!/bin/bash
# import_bench.sh - `make bench`, foreign checkpoints: reading every tensor
# of a ~1 GiB PyTorch distributed checkpoint through the mount (ckptfs on
# the DCP directory as it is, `cat` of every tensor file) against PyTorch's
# own load_state_dict of it, and `ckpt import` throughput.  The state dict
# is bench_core's (bf16 weights, f32 Adam moments); DCP saves it with
# FileSystemWriter(single_file_per_rank=True).  Both loads read files the
# page cache holds (each is preceded by a cat of the DCP files), the mount
# is fresh for every repetition.  Medians of CKPT_BENCH_REPS (3); target:
# the mount at least 3x faster than torch.
#
# Environment: CKPT, CKPTFS, CKPT_BENCH_CORE, CKPT_SRCDIR (make bench sets
# them), CKPT_BENCH_MB (1024), CKPT_BENCH_REPS (3), CKPT_BENCH_DIR (scratch
# parent, default the build directory), CKPT_BENCH_STRICT=1 (exit 1 when
# the target is missed).
set -euo pipefail
export LC_ALL=C
die() { echo "import bench: $*" >&2; exit 1; }

core=${CKPT_BENCH_CORE:?set CKPT_BENCH_CORE}
ckpt=${CKPT:?set CKPT}
ckptfs=${CKPTFS:-}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
srcdir=${CKPT_SRCDIR:-$(cd "$here/../.." && pwd)}
py=${CKPT_BENCH_PYTHON:-/usr/bin/python3}
mb=${CKPT_BENCH_MB:-1024}
reps=${CKPT_BENCH_REPS:-3}

echo
echo "== foreign checkpoints: PyTorch DCP mounted and imported =="
if ! "$py" -c 'import sys; sys.path.insert(0, sys.argv[1]); import torch_compat; torch_compat.allow_unhashable_dataclass_defaults(); import torch.distributed._shard.checkpoint' "$srcdir/tests/helpers" 2>/dev/null; then
    echo "SKIP import bench: no usable torch in $py"
    exit 0
fi
base=${CKPT_BENCH_DIR:-$(dirname "$core")}
work=$(mktemp -d "$base/ckptfs-import-bench.XXXXXX")
mnt=$work/mnt
mkdir -p "$mnt"
cleanup() {
    mountpoint -q "$mnt" 2>/dev/null && fusermount3 -u "$mnt" 2>/dev/null
    rm -rf --one-file-system "$work"
}
trap cleanup EXIT

mkdir -p "$work/state"
"$core" gen "$work/state" --mb "$mb" >/dev/null || die "bench_core gen failed"
out=$("$py" "$srcdir/tests/bench/dcp_bench.py" save "$work/state" "$work/dcp") ||
    die "DCP save failed"
logical=$(grep -o 'bytes_logical=[0-9]*' <<<"$out" | cut -d= -f2)
ntensors=$(wc -l <"$work/state/state.idx")
echo "DCP checkpoint: $ntensors tensors, $logical bytes, $(ls "$work/dcp" | wc -l) files ($("$py" -c 'import torch; print("torch", torch.__version__)'))"

warm() { cat "$work"/dcp/* >/dev/null; }
secs_of() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.4f", b - a }'; }
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

torch_t=() mount_t=() import_t=()
for (( rep = 1; rep <= reps; rep++ )); do
    warm
    line=$("$py" "$srcdir/tests/bench/dcp_bench.py" load "$work/state" "$work/dcp" dcp_load | grep '^RESULT')
    torch_t+=("$(grep -o ' seconds=[0-9.]*' <<<"$line" | cut -d= -f2)")
    if [[ -n $ckptfs && -x $ckptfs && -c /dev/fuse ]]; then
        warm
        "$ckptfs" "$work/dcp" "$mnt" || die "mount failed"
        t0=$EPOCHREALTIME
        find "$mnt" -type f -not -path "$mnt/.*" -print0 | xargs -0 cat >/dev/null
        t1=$EPOCHREALTIME
        mount_t+=("$(secs_of "$t0" "$t1")")
        fusermount3 -u "$mnt"
    fi
    warm
    rm -rf "$work/imported"
    t0=$EPOCHREALTIME
    "$ckpt" import "$work/dcp" "$work/imported" || die "ckpt import failed"
    t1=$EPOCHREALTIME
    import_t+=("$(secs_of "$t0" "$t1")")
    echo "  [$rep/$reps] torch load ${torch_t[-1]} s, mount read ${mount_t[-1]:--} s, ckpt import ${import_t[-1]} s"
done
"$ckpt" verify "$work/imported" >/dev/null || die "the imported checkpoint does not verify"

mt=$(printf '%s\n' "${torch_t[@]}" | median)
mi=$(printf '%s\n' "${import_t[@]}" | median)
mbs() { awk -v b="$logical" -v s="$1" 'BEGIN { printf "%.0f", b / s / 1048576 }'; }
echo "medians of $reps:"
printf '  %-44s %8.3f s %7s MiB/s\n' "torch.distributed load_state_dict" "$mt" "$(mbs "$mt")"
missed=0
if (( ${#mount_t[@]} )); then
    mm=$(printf '%s\n' "${mount_t[@]}" | median)
    printf '  %-44s %8.3f s %7s MiB/s\n' "mount: cat every tensor file" "$mm" "$(mbs "$mm")"
    r=$(awk -v a="$mt" -v b="$mm" 'BEGIN { printf "%.2f", a / b }')
    if awk -v r="$r" 'BEGIN { exit !(r >= 3) }'; then v=met; else v=MISSED; missed=1; fi
    echo "  mount vs torch load: ${r}x faster (target >= 3x: $v)"
else
    echo "  mount: not measured (no ckptfs daemon or /dev/fuse)"
fi
printf '  %-44s %8.3f s %7s MiB/s\n' "ckpt import (auto codec, all cores)" "$mi" "$(mbs "$mi")"
ri=$(awk -v a="$mt" -v b="$mi" 'BEGIN { printf "%.2f", a / b }')
echo "  ckpt import vs torch load: ${ri}x  (import also encodes and writes; stored $(du -sb "$work/imported" | cut -f1) bytes)"
[[ ${CKPT_BENCH_STRICT:-0} == 1 && $missed == 1 ]] && exit 1
exit 0
