#!/bin/bash
# import_bench.sh - `make bench`, foreign checkpoints: reading every tensor
# of a ~1 GiB PyTorch distributed checkpoint through the mount (ckptfs on
# the DCP directory as it is, `cat` of every tensor file) against the
# passthrough FUSE file system (tests/bench/passthrough.c) over the same
# files (`cat` of every file of the DCP directory): the floor of FUSE's own
# cost for these bytes.  PyTorch's own load_state_dict and `ckpt import`
# are timed too, for information.  The state dict is bench_core's (bf16
# weights, f32 Adam moments); DCP saves it with
# FileSystemWriter(single_file_per_rank=True).  Every contender reads files
# the page cache holds (each is preceded by a cat of the DCP files); the
# mounts are fresh for every repetition.  Medians of CKPT_BENCH_REPS (3);
# target: the mount at least 0.8x as fast as the passthrough.
#
# Environment: CKPT, CKPTFS, CKPT_BENCH_CORE, CKPT_BENCH_PASSTHROUGH,
# CKPT_SRCDIR (make bench sets them), CKPT_BENCH_MB (1024),
# CKPT_BENCH_REPS (3), CKPT_BENCH_DIR (scratch parent, default the build
# directory), CKPT_BENCH_STRICT=1 (exit 1 when the target is missed).
set -euo pipefail
export LC_ALL=C
die() { echo "import bench: $*" >&2; exit 1; }

core=${CKPT_BENCH_CORE:?set CKPT_BENCH_CORE}
ckpt=${CKPT:?set CKPT}
ckptfs=${CKPTFS:-}
pt_bin=${CKPT_BENCH_PASSTHROUGH:-}
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
    if mountpoint -q "$mnt" 2>/dev/null; then
        echo "import bench: $mnt is still mounted; leaving $work" >&2
        return
    fi
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
can_mount() { [[ -n $1 && -x $1 && -c /dev/fuse ]]; }
# what the passthrough's cat reads: the .distcp files (.metadata, a dot
# file, is skipped like the mount's .ckptfs/ and .npy/ views)
dcp_bytes=$(find "$work/dcp" -type f -not -name '.*' -printf '%s\n' | awk '{ s += $1 } END { print s + 0 }')

# read_mount NAME CMD...: mounts with CMD (daemonizing) on $mnt, cats
# every regular file under it but the .ckptfs/ and .npy/ views, unmounts;
# appends the seconds to the array NAME.
read_mount() {
    local -n out=$1
    shift
    warm
    "$@" "$mnt" || die "mount failed: $*"
    local t0 t1
    t0=$EPOCHREALTIME
    find "$mnt" -type f -not -path "$mnt/.*" -print0 | xargs -0 cat >/dev/null
    t1=$EPOCHREALTIME
    out+=("$(secs_of "$t0" "$t1")")
    fusermount3 -u "$mnt" || die "cannot unmount $mnt"
}

torch_t=() mount_t=() pt_t=() import_t=()
for (( rep = 1; rep <= reps; rep++ )); do
    warm
    line=$("$py" "$srcdir/tests/bench/dcp_bench.py" load "$work/state" "$work/dcp" dcp_load | grep '^RESULT')
    torch_t+=("$(grep -o ' seconds=[0-9.]*' <<<"$line" | cut -d= -f2)")
    # The two mounts take turns going first.
    for k in 0 1; do
        if (( (k + rep) % 2 )); then
            can_mount "$ckptfs" && read_mount mount_t "$ckptfs" "$work/dcp"
        else
            # st_blksize as ckptfs gives a foreign checkpoint's files
            can_mount "$pt_bin" && read_mount pt_t "$pt_bin" -o blksize=131072 "$work/dcp"
        fi
    done
    warm
    rm -rf "$work/imported"
    t0=$EPOCHREALTIME
    "$ckpt" import "$work/dcp" "$work/imported" || die "ckpt import failed"
    t1=$EPOCHREALTIME
    import_t+=("$(secs_of "$t0" "$t1")")
    echo "  [$rep/$reps] torch load ${torch_t[-1]} s, mount read ${mount_t[-1]:--} s, passthrough read ${pt_t[-1]:--} s, ckpt import ${import_t[-1]} s"
done
"$ckpt" verify "$work/imported" >/dev/null || die "the imported checkpoint does not verify"

mt=$(printf '%s\n' "${torch_t[@]}" | median)
mi=$(printf '%s\n' "${import_t[@]}" | median)
gbs() { awk -v b="$1" -v s="$2" 'BEGIN { printf "%.2f", b / s / 1e9 }'; }
echo "medians of $reps (GB/s: bytes read / seconds / 1e9):"
missed=0
# median_line LABEL BYTES NOTE SECONDS...: prints the median's line and
# sets `med` to it (empty, with a "not measured" line, when no seconds).
median_line() {
    local label=$1 bytes=$2 note=$3
    shift 3
    med=
    if (( $# == 0 )); then
        printf '  %-52s not measured (no daemon, or no /dev/fuse)\n' "$label"
        return
    fi
    med=$(printf '%s\n' "$@" | median)
    printf '  %-52s %8.3f s %6s GB/s  (%d bytes: %s)\n' "$label" "$med" \
        "$(gbs "$bytes" "$med")" "$bytes" "$note"
}
median_line "passthrough FUSE: cat every DCP file (the floor)" "$dcp_bytes" \
    "the .distcp files" "${pt_t[@]}"
mp=$med
median_line "ckptfs mount: cat every tensor file" "$logical" "every tensor" \
    "${mount_t[@]}"
mm=$med
printf '  %-52s %8.3f s %6s GB/s  (information: in-process, no FUSE)\n' \
    "torch.distributed load_state_dict" "$mt" "$(gbs "$logical" "$mt")"
printf '  %-52s %8.3f s %6s GB/s  (information: also encodes and writes %d bytes)\n' \
    "ckpt import (auto codec, all cores)" "$mi" "$(gbs "$logical" "$mi")" \
    "$(du -sb "$work/imported" | cut -f1)"
if [[ -n $mm && -n $mp ]]; then
    # Speeds, not seconds: the two read slightly different byte counts.
    r=$(awk -v a="$logical" -v sa="$mm" -v b="$dcp_bytes" -v sb="$mp" \
        'BEGIN { printf "%.2f", (a / sa) / (b / sb) }')
    if awk -v r="$r" 'BEGIN { exit !(r >= 0.8) }'; then v=met; else v="NOT MET"; missed=1; fi
    printf 'target %-50s %6sx  %s\n' "mount read of DCP >= 0.8x passthrough FUSE:" "$r" "$v"
else
    echo "target mount read of DCP >= 0.8x passthrough FUSE: not measured"
fi
[[ -n $mm ]] && printf '  %-56s %6sx  (information)\n' "mount vs torch's load" \
    "$(awk -v a="$mt" -v b="$mm" 'BEGIN { printf "%.2f", a / b }')"
printf '  %-56s %6sx  (information)\n' "ckpt import vs torch's load" \
    "$(awk -v a="$mt" -v b="$mi" 'BEGIN { printf "%.2f", a / b }')"
[[ ${CKPT_BENCH_STRICT:-0} == 1 && $missed == 1 ]] && exit 1
exit 0
