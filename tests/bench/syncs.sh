#!/bin/bash
# syncs.sh - how many sync calls a save makes (part of `make bench`;
# issue #26, item 2).  Counts fsync, fdatasync and sync_file_range with
# `strace -f -c` over every process of three saves:
#   - 1 rank:  `ckpt pack` of NT tensors (one writer, one shard),
#   - 8 ranks: `mpirun -n 8 examples/mpi_save_load save` (ckpt_mpi_save),
#   - mount:   one rank writing NT tensors through a `-o rw,world=1`
#              mount, then `echo 0 > .ckptfs/commit` (the daemon and the
#              writing shell both counted),
# and prints for each: the shards it left in data/, the calls by kind,
# the target (shards + 4: each shard synced once, the commit a constant
# few times: docs/GUARANTEES.md, "Which sync makes which promise") and
# met / NOT MET.  A count, not a timing: a loaded machine gives the same.
#
# Environment: CKPT (ckpt binary, required), CKPTFS (ckptfs binary; the
# mount save is skipped without it or /dev/fuse), CKPT_BUILDDIR (for
# examples/mpi_save_load; the MPI save is skipped without it or mpirun),
# CKPT_BENCH_SYNCS_TENSORS (NT, default 20), CKPT_BENCH_STRICT=1 (exit 1
# when a target is missed).
set -uo pipefail
export LC_ALL=C

ckpt=${CKPT:?set CKPT to the ckpt binary}
ckptfs=${CKPTFS:-}
build=${CKPT_BUILDDIR:-}
nt=${CKPT_BENCH_SYNCS_TENSORS:-20}
command -v strace >/dev/null || { echo "SKIP syncs bench: no strace"; exit 0; }

work=$(mktemp -d "${TMPDIR:-/tmp}/ckptfs-syncs.XXXXXX")
mnt=$work/mnt
daemon=
cleanup() {
    if mountpoint -q "$mnt" 2>/dev/null; then
        fusermount3 -u "$mnt" 2>/dev/null || fusermount3 -uz "$mnt" 2>/dev/null
    fi
    [ -n "$daemon" ] && { kill "$daemon" 2>/dev/null; wait "$daemon" 2>/dev/null; }
    rm -rf "$work"
}
trap cleanup EXIT

missed=0
# count NAME SAVEDIR STRACE_FILE...: one line of the table.
count() {
    local name=$1 save=$2 shards kinds total target verdict
    shift 2
    shards=$(find "$save/data" -name '*.shard' 2>/dev/null | wc -l)
    # strace -c lines: % time, seconds, usecs/call, calls, [errors,] name
    read -r kinds total < <(awk '
        $NF ~ /^(fsync|fdatasync|sync_file_range)$/ { n[$NF] += $4 }
        END { printf "fsync=%d,fdatasync=%d,sync_file_range=%d %d\n",
                     n["fsync"], n["fdatasync"], n["sync_file_range"],
                     n["fsync"] + n["fdatasync"] + n["sync_file_range"] }' "$@")
    target=$((shards + 4))
    if [ -f "$save/index.db" ] && [ "$total" -le "$target" ]; then verdict=met
    else verdict="NOT MET"; missed=1; fi
    [ -f "$save/index.db" ] || verdict="NOT MET (no index.db: the save failed)"
    printf '%-8s shards %3d  syncs %4d (%s)  target <= %d  %s\n' \
        "$name" "$shards" "$total" "$kinds" "$target" "$verdict"
}

trace=(strace -f -qq -c -e trace=fsync,fdatasync,sync_file_range)
echo "== syncs per save (strace -f -c, every process; $nt tensors)"

# ---------------------------------------------------------------- 1 rank
args=()
for ((i = 0; i < nt; i++)); do
    head -c $((4096 * (i + 1))) /dev/urandom >"$work/t$i.bin"
    args+=("layer$i.w=$work/t$i.bin:float32:$((1024 * (i + 1)))")
done
"${trace[@]}" -o "$work/pack.st" "$ckpt" pack "$work/pack" "${args[@]}" >/dev/null ||
    echo "syncs bench: ckpt pack failed"
count "1 rank" "$work/pack" "$work/pack.st"

# ---------------------------------------------------------------- 8 ranks
ex=${build:+$build/examples/mpi_save_load}
if [ -n "$ex" ] && [ -x "$ex" ] && command -v mpirun >/dev/null; then
    mpi=(mpirun -n 8 --oversubscribe)
    [ "$(id -u)" = 0 ] && mpi+=(--allow-run-as-root)
    "${trace[@]}" -o "$work/mpi.st" "${mpi[@]}" "$ex" save "$work/mpi" \
        $(( (nt + 1) / 2 )) 256 >/dev/null 2>"$work/mpi.err" ||
        echo "syncs bench: the MPI save failed: $(tail -c 300 "$work/mpi.err")"
    count "8 ranks" "$work/mpi" "$work/mpi.st"
else
    echo "SKIP 8 ranks: no examples/mpi_save_load (CKPT_BUILDDIR) or no mpirun"
fi

# ---------------------------------------------------------------- mount
if [ -n "$ckptfs" ] && [ -x "$ckptfs" ] && [ -c /dev/fuse ] &&
   command -v setfattr >/dev/null; then
    mkdir -p "$work/root" "$mnt"
    "${trace[@]}" -o "$work/daemon.st" "$ckptfs" -f -o rw,world=1 \
        "$work/root" "$mnt" </dev/null >"$work/daemon.log" 2>&1 &
    daemon=$!
    for ((i = 0; i < 100; i++)); do
        mountpoint -q "$mnt" && break
        sleep 0.1
    done
    if mountpoint -q "$mnt"; then
        cat >"$work/writer.sh" <<'EOF'
set -e
m=$1 w=$2 nt=$3
mkdir "$m/step-1"
for ((i = 0; i < nt; i++)); do
    f=$m/step-1/layer$i
    touch "$f"
    setfattr -n user.ckpt.dtype -v float32 "$f"
    setfattr -n user.ckpt.shape -v $((1024 * (i + 1))) "$f"
    cat "$w/t$i.bin" >"$f"
done
echo 0 >"$m/step-1/.ckptfs/commit"
EOF
        "${trace[@]}" -o "$work/writer.st" bash "$work/writer.sh" "$mnt" \
            "$work" "$nt" || echo "syncs bench: the save through the mount failed"
        fusermount3 -u "$mnt" 2>/dev/null || fusermount3 -uz "$mnt"
        wait "$daemon"     # strace writes its counts as the daemon ends
        daemon=
        count "mount" "$work/root/step-1" "$work/writer.st" \
            "$work/daemon.st"
    else
        echo "syncs bench: the mount did not come up: $(tail -c 300 "$work/daemon.log")"
        missed=1
    fi
else
    echo "SKIP mount: no ckptfs (CKPTFS), /dev/fuse or setfattr"
fi

if [ "$missed" = 1 ] && [ "${CKPT_BENCH_STRICT:-0}" = 1 ]; then
    exit 1
fi
exit 0
