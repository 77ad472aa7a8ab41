#!/bin/bash
# mount_multinode.sh - several writable mounts ("nodes") over one shared
# ROOT saving one checkpoint (docs/MOUNT.md, "Several mounts"; issue #25):
#   - leases: a mount that joined a save (its mkdir answered EEXIST, or it
#     set user.ckpt.rank) holds the save's lease before it writes, so that
#     `ckpt gc --min-age 0` keeps the save after the maker's node finished
#     and unmounted, and the joiner's rank then commits it;
#   - a refused commit releases every mount's lease of the save (the
#     others notice .pending/failed), so gc removes it at once;
#   - a rank that runs again (its earlier process gone) replaces its
#     earlier pieces, with other bytes too, and commits; one process that
#     writes a piece twice with other bytes is refused, the writer named
#     once, never "writer rank0 ... vs writer rank0";
#   - a stale attempt that long-lived mounts still hold (rank 0 committed,
#     rank 1 died) is never joined silently: the job's next attempt, on
#     the same nodes or on others, begins a new attempt (the earlier
#     commits withdrawn, every rank's pieces replaced) and commits its own
#     bytes (docs/MOUNT.md, "A rank runs again"); so does a save whose
#     writers and mounts are all gone, none of its ranks committed;
#   - a save whose every rank is in but whose commit was cut short (the
#     daemon killed during it) is left by gc, with a message saying how it
#     is finished, and a status read through a mount commits it.
. "$(dirname "$0")/lib.sh"

R=$TMP/root
A=$TMP/node-a
B=$TMP/node-b
IN=$TMP/in
mkdir -p "$R" "$IN"
"$PY" - "$IN" <<'EOF' || exit 99
import sys, numpy as np
np.random.default_rng(25).standard_normal((64, 32)).astype("<f4").tofile(sys.argv[1] + "/w.bin")
EOF
WPUT=$HELPERS/wput.py
put_rows() {   # put_rows CKDIR RANK: rank R's 32 rows of w (R = 0 or 1)
    RANK=$2 "$PY" "$WPUT" put "$1/w" "$IN/w.bin" --dtype f32 --shape 64,32 \
        --offsets "$(($2 * 32)),0" --sizes 32,32 --from $(($2 * 4096)) --to $(($2 * 4096 + 4096))
}

echo "# ---- a mount that joined a save holds its lease before it writes"
mount_ck "$R" "$A" -o rw,world=2 || exit 1
mount_ck "$R" "$B" -o rw,world=2 || exit 1
S=step-000001
mkdir "$A/$S" && ok "node A starts $S"
if RANK=1 mkdir -p "$B/$S" && ! RANK=1 mkdir "$B/$S" 2>/dev/null; then ok "node B's rank 1 joins it (mkdir -p; mkdir: EEXIST)"; else bad "node B's mkdir"; fi
put_rows "$A/$S" 0 >"$TMP/put.out" 2>&1
grep -qx ok "$TMP/put.out" && ok "node A writes rank 0's rows" || bad "node A: $(cat "$TMP/put.out")"
echo 0 >"$A/$S/.ckptfs/commit" && ok "node A commits rank 0"
umount_ck "$A"
run_ckpt gc --min-age 0 "$R"
expect_out_re "kept $S" "gc keeps the save node B joined"
check "$S is still there" test -d "$R/$S/.pending"
put_rows "$B/$S" 1 >"$TMP/put.out" 2>&1
grep -qx ok "$TMP/put.out" && ok "node B writes rank 1's rows" || bad "node B: $(cat "$TMP/put.out")"
echo 1 >"$B/$S/.ckptfs/commit" 2>/dev/null
st=$(cat "$B/$S/.ckptfs/status")
[ "$st" = committed ] && ok "node B's commit completes the save" || bad "status: $st"
cmp -s "$IN/w.bin" "$B/$S/w" && ok "w reads back whole" || bad "w differs"

S=step-000002
mount_ck "$R" "$A" -o rw,world=2 || exit 1
mkdir "$A/$S" && ok "node A starts $S"
RANK=1 "$PY" "$WPUT" setx "$B/$S" user.ckpt.rank 1 >"$TMP/put.out" 2>&1
grep -qx ok "$TMP/put.out" && ok "node B sets its rank on $S" || bad "setx: $(cat "$TMP/put.out")"
umount_ck "$A"
run_ckpt gc --min-age 0 "$R"
expect_out_re "kept $S" "gc keeps the save whose rank node B set"
umount_ck "$B"
run_ckpt gc --min-age 0 "$R"
check "once every node unmounted, gc removes the unfinished $S" test ! -e "$R/$S"
expect_daemon_clean "node B" "$MNT_LOG"

echo "# ---- a refused commit releases every mount's lease"
S=step-000004
mount_ck "$R" "$A" -o rw,world=2 || exit 1
mount_ck "$R" "$B" -o rw,world=2 || exit 1
mkdir "$A/$S"
put_rows "$A/$S" 0 >"$TMP/put.out" 2>&1
grep -qx ok "$TMP/put.out" && ok "node A writes rank 0's rows" || bad "node A: $(cat "$TMP/put.out")"
echo 0 >"$A/$S/.ckptfs/commit" && ok "node A commits rank 0"
# rank 1 disagrees on the shape: the planner refuses the save
RANK=1 "$PY" "$WPUT" put "$B/$S/w" "$IN/w.bin" --dtype f32 --shape 65,32 \
    --offsets 32,0 --sizes 32,32 --from 4096 --to 8192 >"$TMP/put.out" 2>&1
"$PY" "$WPUT" commit "$B/$S" 1 >"$TMP/put.out" 2>&1
grep -qx "ERR commit EIO" "$TMP/put.out" && ok "node B's commit is refused" || bad "node B's commit: $(cat "$TMP/put.out")"
# node A notices the refusal by itself (its watch, every second): gc
# removes the save without either node unmounting
for ((i = 0; i < 100; i++)); do
    "$CKPT" gc --min-age 0 "$R" >"$TMP/gc.out" 2>&1
    [ -e "$R/$S" ] || break
    sleep 0.1
done
if [ ! -e "$R/$S" ]; then ok "gc --min-age 0 removes the refused save while both nodes are mounted"
else bad "gc kept the refused save: $(tr '\n' '~' <"$TMP/gc.out")"; fi
umount_ck "$A"
expect_daemon_clean "node A" "$MNT_LOG"
umount_ck "$B"
expect_daemon_clean "node B" "$MNT_LOG"

echo "# ---- a rank that runs again replaces its dead attempt's pieces"
S=step-000005
mount_ck "$R" "$A" -o rw,world=1 || exit 1
mkdir "$A/$S"
"$PY" -c 'import sys; d = open(sys.argv[1], "rb").read(); open(sys.argv[2], "wb").write(d[::-1])' "$IN/w.bin" "$IN/w2.bin"
RANK=0 "$PY" "$WPUT" put "$A/$S/w" "$IN/w.bin" --dtype f32 --shape 64,32 >"$TMP/put.out" 2>&1
grep -qx ok "$TMP/put.out" && ok "rank 0 writes w, and its process ends" || bad "put: $(cat "$TMP/put.out")"
RANK=0 "$PY" "$WPUT" put "$A/$S/w" "$IN/w2.bin" --dtype f32 --shape 64,32 >"$TMP/put.out" 2>&1
grep -qx ok "$TMP/put.out" && ok "rank 0 runs again: w, other bytes" || bad "put: $(cat "$TMP/put.out")"
echo 0 >"$A/$S/.ckptfs/commit" 2>/dev/null
st=$(cat "$A/$S/.ckptfs/status")
[ "$st" = committed ] && ok "the re-run commits" || bad "status: $st"
cmp -s "$IN/w2.bin" "$A/$S/w" && ok "w reads back as the re-run wrote it" || bad "w differs from the re-run's bytes"
names=$(cd "$R/$S/data" && ls | tr '\n' ' ')
[ "$names" = "rank0-2.shard rank0.shard " ] && ok "the re-run wrote through a writer of its own: $names" || bad "shards: '$names'"
S=step-000006
mkdir "$A/$S"
# one process, still running, writes w twice with other bytes: no re-run,
# the commit is refused, naming the writer once
RANK=0 "$PY" - "$A/$S/w" "$IN/w.bin" "$IN/w2.bin" >"$TMP/put.out" 2>&1 <<'PYEOF'
import os, sys
for src in sys.argv[2:]:
    fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.setxattr(fd, "user.ckpt.dtype", b"f32")
    os.setxattr(fd, "user.ckpt.shape", b"64,32")
    os.write(fd, open(src, "rb").read())
    os.close(fd)
print("ok")
PYEOF
grep -qx ok "$TMP/put.out" && ok "one process writes w twice" || bad "put: $(cat "$TMP/put.out")"
echo 0 >"$A/$S/.ckptfs/commit" 2>/dev/null
st=$(cat "$A/$S/.ckptfs/status")
case "$st" in
    *"writer rank0 wrote piece"*twice*"write each piece once"*) ok "the refusal names the writer once (${st:0:100})" ;;
    *) bad "status: $st" ;;
esac
umount_ck "$A"

echo "# ---- a stale attempt held by long-lived mounts is never joined silently"
# The job's first attempt: rank 0 (node A) writes and commits, rank 1
# (node B) writes and dies before committing; both mounts stay up.  The
# job runs again and saves the step again with other bytes.
"$PY" - "$IN" <<'PYEOF' || exit 99
import sys, numpy as np
np.random.default_rng(2525).standard_normal((64, 32)).astype("<f4").tofile(sys.argv[1] + "/y.bin")
PYEOF
put_y() {   # put_y CKDIR RANK: rank R's rows of y
    RANK=$2 "$PY" "$WPUT" put "$1/w" "$IN/y.bin" --dtype f32 --shape 64,32 \
        --offsets "$(($2 * 32)),0" --sizes 32,32 --from $(($2 * 4096)) --to $(($2 * 4096 + 4096))
}
mount_ck "$R" "$A" -o rw,world=2 || exit 1
mount_ck "$R" "$B" -o rw,world=2 || exit 1
for S in step-000007 step-000008; do
    # step-000008: the second attempt's ranks run on the other nodes
    if [ $S = step-000007 ]; then N0=$A N1=$B; else N0=$B N1=$A; fi
    mkdir "$A/$S"
    put_rows "$A/$S" 0 >"$TMP/put.out" 2>&1 && echo 0 >"$A/$S/.ckptfs/commit" &&
        put_rows "$B/$S" 1 >>"$TMP/put.out" 2>&1 && ok "$S, first attempt: rank 0 in, rank 1 wrote and died" ||
        bad "$S first attempt: $(cat "$TMP/put.out")"
    RANK=0 mkdir -p "$N0/$S" && ok "$S, second attempt: rank 0's mkdir -p" || bad "mkdir -p"
    put_y "$N0/$S" 0 >"$TMP/put.out" 2>&1
    grep -qx ok "$TMP/put.out" && ok "$S: rank 0 writes its rows again, other bytes" || bad "put: $(cat "$TMP/put.out")"
    if "$PY" "$WPUT" commit "$N0/$S" 0 >"$TMP/put.out" 2>&1; then ok "$S: rank 0 commits again"
    else bad "$S: rank 0's commit: $(cat "$TMP/put.out")"; fi
    st=$(cat "$N0/$S/.ckptfs/status")
    [ "$st" = "pending 1/2" ] && ok "$S: status $st (the earlier attempt's commits withdrawn)" || bad "$S status: $st"
    grep -q "a new attempt of the save begins" "$N0/$S/.ckptfs/errors" &&
        ok "$S: .ckptfs/errors says a new attempt began" || bad "errors: $(tr '\n' '~' <"$N0/$S/.ckptfs/errors")"
    put_y "$N1/$S" 1 >"$TMP/put.out" 2>&1
    grep -qx ok "$TMP/put.out" && ok "$S: rank 1 writes its rows again" || bad "put: $(cat "$TMP/put.out")"
    "$PY" "$WPUT" commit "$N1/$S" 1 >/dev/null 2>&1
    st=$(cat "$N1/$S/.ckptfs/status")
    [ "$st" = committed ] && ok "$S: the second attempt commits" || bad "$S status: $st"
    cmp -s "$IN/y.bin" "$A/$S/w" && cmp -s "$IN/y.bin" "$B/$S/w" &&
        ok "$S: w reads back as the second attempt wrote it, on both nodes" || bad "$S: w differs from the second attempt's bytes"
done
# one process of rank 0 that writes, commits, and writes again is the same
# run: no new attempt
S=step-000009
mkdir "$A/$S"
RANK=0 "$PY" - "$A/$S" "$IN/y.bin" >"$TMP/put.out" 2>&1 <<'PYEOF'
import os, sys
ck, src = sys.argv[1], open(sys.argv[2], "rb").read()
for name in ("w", "v"):
    fd = os.open(ck + "/" + name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.setxattr(fd, "user.ckpt.dtype", b"f32")
    os.setxattr(fd, "user.ckpt.shape", b"64,32")
    os.write(fd, src)
    os.close(fd)
    if name == "w":
        with open(ck + "/.ckptfs/commit", "w") as f:
            f.write("0")
print("ok")
PYEOF
grep -qx ok "$TMP/put.out" && ok "$S: one process of rank 0 writes w, commits, writes v" || bad "put: $(cat "$TMP/put.out")"
st=$(cat "$A/$S/.ckptfs/status")
[ "$st" = "pending 1/2" ] && ! grep -q "new attempt" "$A/$S/.ckptfs/errors" &&
    ok "$S: its commit stands (status $st, no new attempt)" || bad "$S: status $st, errors $(tr '\n' '~' <"$A/$S/.ckptfs/errors")"
run_ckpt verify "$R/step-000008"
expect_ok "ckpt verify of the second attempt"
umount_ck "$A"
expect_daemon_clean "node A" "$MNT_LOG"
umount_ck "$B"
expect_daemon_clean "node B" "$MNT_LOG"

echo "# ---- a save whose writers and mounts are all gone: the next attempt replaces it"
# The first attempt's ranks wrote, none committed, and both nodes went
# (unmounted); fresh mounts save the step again with other bytes.
S=step-000010
mount_ck "$R" "$A" -o rw,world=2 || exit 1
mount_ck "$R" "$B" -o rw,world=2 || exit 1
mkdir "$A/$S"
put_rows "$A/$S" 0 >"$TMP/put.out" 2>&1 && put_rows "$B/$S" 1 >>"$TMP/put.out" 2>&1 &&
    ok "$S, first attempt: both ranks wrote, none committed" || bad "$S first attempt: $(cat "$TMP/put.out")"
umount_ck "$A"
umount_ck "$B"
mount_ck "$R" "$A" -o rw,world=2 || exit 1
mount_ck "$R" "$B" -o rw,world=2 || exit 1
RANK=0 mkdir -p "$A/$S" && put_y "$A/$S" 0 >"$TMP/put.out" 2>&1 &&
    "$PY" "$WPUT" commit "$A/$S" 0 >>"$TMP/put.out" 2>&1 &&
    ok "$S, second attempt: rank 0 writes other bytes and commits" || bad "$S rank 0: $(cat "$TMP/put.out")"
grep -q "no writer holds (its writers are gone)" "$A/$S/.ckptfs/errors" &&
    ok "$S: .ckptfs/errors says the earlier writers are gone" || bad "errors: $(tr '\n' '~' <"$A/$S/.ckptfs/errors")"
put_y "$B/$S" 1 >"$TMP/put.out" 2>&1
"$PY" "$WPUT" commit "$B/$S" 1 >>"$TMP/put.out" 2>&1
st=$(cat "$B/$S/.ckptfs/status")
[ "$st" = committed ] && ok "$S: the second attempt commits" || bad "$S status: $st ($(cat "$TMP/put.out"))"
cmp -s "$IN/y.bin" "$A/$S/w" && ok "$S: w reads back as the second attempt wrote it" || bad "$S: w differs from the second attempt's bytes"
umount_ck "$A"
expect_daemon_clean "node A" "$MNT_LOG"
umount_ck "$B"
expect_daemon_clean "node B" "$MNT_LOG"

echo "# ---- gc leaves a save whose every rank is in"
S=step-000003
mount_ck "$R" "$A" -o rw,world=2 || exit 1
mkdir "$A/$S"
put_rows "$A/$S" 0 >/dev/null 2>&1
put_rows "$A/$S" 1 >"$TMP/put.out" 2>&1
grep -qx ok "$TMP/put.out" && ok "both ranks' rows written" || bad "put: $(cat "$TMP/put.out")"
echo 0 >"$A/$S/.ckptfs/commit" && ok "rank 0 commits"
umount_ck "$A"
# What a daemon killed during the last rank's commit leaves (kill_mount.sh
# makes it for real, at random points): every rank's marker, no index.db.
cp -p "$R/$S/.pending/rank-0" "$R/$S/.pending/rank-1"
run_ckpt gc --min-age 0 "$R"
expect_out_re "kept $S: all 2 ranks are in but its commit was cut short; read its .ckptfs/status" \
    "gc leaves it, saying how it is finished"
check "$S is still there" test -d "$R/$S/.pending"
mount_ck "$R" "$A" -o rw,world=2 || exit 1
st=$(cat "$A/$S/.ckptfs/status")
[ "$st" = committed ] && ok "a status read through a mount commits it" || bad "status: $st"
cmp -s "$IN/w.bin" "$A/$S/w" && ok "w reads back whole" || bad "w differs"
umount_ck "$A"
expect_daemon_clean "node A" "$MNT_LOG"
summary
