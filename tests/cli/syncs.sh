#!/bin/bash
# syncs.sh - a save syncs each shard once and its commit a constant few
# times (issue #26, item 2; docs/GUARANTEES.md, "Which sync makes which
# promise").  Counts the fsync, fdatasync and sync_file_range calls of
# `ckpt pack` (every thread, with strace -f) for one writer and for
# three writers of 12 tensors, and requires at most shards + 4, each
# shard synced exactly once; the saves must still read back as the bytes
# packed.  Then a library save with one writer that syncs its shard and
# one that does not (sync = 0): the commit must sync the second's shard
# and not the first's again.  A count, not a timing.  Skipped (77)
# without strace or where it cannot trace.
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

# -y: each call shows the path of its descriptor
TRACE=(strace -f -qq -y -e trace=fsync,fdatasync,sync_file_range)
# LeakSanitizer cannot run under ptrace: the traced saves go without it
# in a sanitizer build (the reads below keep it).
nolsan=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0

# syncs_of LOG [PATH]: the sync calls in an strace -y log (of PATH only).
syncs_of() {
    grep -F -c -- "<${2:-}" "$1"
}
# each_once LOG DIR DESC: every shard of DIR/data was synced exactly once.
each_once() {
    local s n all=1
    for s in "$2"/data/*.shard; do
        n=$(syncs_of "$1" "$(realpath "$s")>")
        [ "$n" -eq 1 ] || { all=0; bad "$3: $(basename "$s") synced $n times, want 1"; }
    done
    [ "$all" = 1 ] && ok "$3: each shard synced exactly once"
}

for grid in 1 3; do
    ck=$TMP/ck$grid
    ASAN_OPTIONS=$nolsan "${TRACE[@]}" -o "$TMP/st$grid" \
        "$CKPT" pack --grid "$grid" --frame-size 4K "$ck" "${args[@]}" \
        >"$TMP/out" 2>"$TMP/err"
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
        grep -F '<' "$TMP/st$grid" | sed 's/^/     /' | head -40
    fi
    each_once "$TMP/st$grid" "$ck" "grid $grid"
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

# One writer syncs its shard (sync = 1) and its plan says so; the other
# does not (sync = 0): the commit syncs that one's shard itself.
cat >"$TMP/two.py" <<'PYEOF'
import ctypes, sys
from ctypes import byref
from ckptfs import _capi as C
out = sys.argv[1].encode()
err = C.Error()
def check(rc):
    if rc:
        sys.exit("two.py: %s" % err.msg.decode())
for name, sync in ((b"synced", 1), (b"unsynced", 0)):
    o = C.WriteOpts()
    C.lib.ckpt_write_opts_init(byref(o))
    o.sync = sync
    w = ctypes.c_void_p()
    check(C.lib.ckpt_writer_open(byref(w), out, name, byref(o), byref(err)))
    data = open(sys.argv[2] + "." + name.decode(), "rb").read()
    check(C.lib.ckpt_writer_put_bytes(w, name, data, len(data), byref(err)))
    check(C.lib.ckpt_writer_close(w, byref(err)))
c = C.CommitOpts()
C.lib.ckpt_commit_opts_init(byref(c))
check(C.lib.ckpt_commit(out, byref(c), byref(err)))
PYEOF
head -c 10000 /dev/urandom >"$TMP/ref.synced"
head -c 7000 /dev/urandom >"$TMP/ref.unsynced"
ck=$TMP/two
# (run.sh: the build's package, and a sanitizer build's runtimes)
ASAN_OPTIONS=$nolsan "${TRACE[@]}" -o "$TMP/st.two" /bin/bash \
    "$CKPT_SRCDIR/tests/python/run.sh" "$TMP/two.py" "$ck" "$TMP/ref" \
    >"$TMP/out" 2>"$TMP/err"
rc=$?
what="a syncing and a non-syncing writer"
if [ "$rc" -eq 77 ]; then
    echo "# $what: not run ($(head -c 200 "$TMP/out"))"
elif [ "$rc" -ne 0 ]; then
    bad "$what: the save exits $rc: $(tail -c 300 "$TMP/err")"
else
    each_once "$TMP/st.two" "$ck" "$what"
    n=$(syncs_of "$TMP/st.two")
    [ "$n" -le 6 ] && ok "$what: $n sync calls <= 2 + 4" ||
        bad "$what: $n sync calls > 2 + 4"
    for w in synced unsynced; do
        if "$CKPT" cat "$ck" "$w" >"$TMP/got" 2>"$TMP/err" &&
           cmp -s "$TMP/got" "$TMP/ref.$w"; then
            ok "$what: the $w writer's object reads back as written"
        else
            bad "$what: the $w writer's object does not read back: $(head -c 200 "$TMP/err")"
        fi
    done
fi

summary
