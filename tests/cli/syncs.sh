#!/bin/bash
# syncs.sh - a save syncs each shard once and its commit a constant few
# times (issue #26, item 2; docs/GUARANTEES.md, "Which sync makes which
# promise").  Counts the fsync, fdatasync and sync_file_range calls of
# `ckpt pack` (every thread, with strace -f) for one writer and for
# three writers of 12 tensors, and requires at most shards + 4; the saves
# must still read back as the bytes packed.  A count, not a timing.
# Skipped (77) without strace or where it cannot trace.
. "$(dirname "$0")/lib.sh"

command -v strace >/dev/null 2>&1 || { echo "SKIP: strace is not installed"; exit 77; }
strace -f -qq -o /dev/null true 2>/dev/null ||
    { echo "SKIP: strace cannot trace here (ptrace not permitted)"; exit 77; }

NT=12
args=()
for ((i = 0; i < NT; i++)); do
    # sizes that are not multiples of the frame or of each other
    head -c $((4 * (3000 + 977 * i))) /dev/urandom >"$TMP/t$i.bin"
    args+=("layer$i.w=$TMP/t$i.bin:float32:$((3000 + 977 * i))")
done

# syncs_of FILE: the sync calls counted in an strace -c summary.
syncs_of() {
    awk '$NF ~ /^(fsync|fdatasync|sync_file_range)$/ { n += $4 }
         END { print n + 0 }' "$1"
}

# LeakSanitizer cannot run under ptrace: the traced save goes without it
# in a sanitizer build (the reads below keep it).
nolsan=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0
for grid in 1 3; do
    ck=$TMP/ck$grid
    ASAN_OPTIONS=$nolsan strace -f -qq -c \
        -e trace=fsync,fdatasync,sync_file_range \
        -o "$TMP/st$grid" "$CKPT" pack --grid "$grid" --frame-size 4K \
        "$ck" "${args[@]}" >"$TMP/out" 2>"$TMP/err"
    rc=$?
    if [ "$rc" -ne 0 ]; then
        bad "grid $grid: ckpt pack exits $rc: $(head -c 300 "$TMP/err")"
        continue
    fi
    shards=$(find "$ck/data" -name '*.shard' | wc -l)
    n=$(syncs_of "$TMP/st$grid")
    [ "$shards" -eq "$grid" ] && ok "grid $grid: $shards shard(s)" ||
        bad "grid $grid: $shards shards, want $grid"
    if [ "$n" -le $((shards + 4)) ]; then
        ok "grid $grid: $n sync calls <= shards + 4 = $((shards + 4))"
    else
        bad "grid $grid: $n sync calls > shards + 4 = $((shards + 4)):"
        sed 's/^/     /' "$TMP/st$grid"
    fi
    # the save is whole: every tensor reads back as packed
    for ((i = 0; i < NT; i++)); do
        if ! "$CKPT" cat "$ck" "layer$i.w" >"$TMP/got" 2>"$TMP/err" ||
           ! cmp -s "$TMP/got" "$TMP/t$i.bin"; then
            bad "grid $grid: layer$i.w does not read back as packed"
            continue 2
        fi
    done
    ok "grid $grid: all $NT tensors read back as packed"
    run_ckpt verify "$ck"
    expect_rc 0 "grid $grid: ckpt verify"
done

summary
