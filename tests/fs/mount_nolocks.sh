#!/bin/bash
# mount_nolocks.sh - several nodes over one shared ROOT whose locks do not
# reach every node, and a node whose view of ROOT is stale (issue #25,
# item 7; docs/GUARANTEES.md, "What the shared file system must provide").
# Each "node" is a writable mount in a mount namespace of its own
# (unshare), over the same ROOT; its processes run in that namespace
# (nsenter), where the mount point has one path for all nodes.
#   - node C's daemon runs with tests/crash's shim making every fcntl and
#     flock lock succeed without locking (CKPT_SHIM_NOLOCK=1): its status
#     reads poll while node B's last rank commits (its link onto index.db
#     held back 150 ms by the shim); in every trial exactly one link onto
#     index.db is made, node B's commit succeeds, the poller never reads
#     `committed` while ROOT has no index.db nor `failed`, index.db stays,
#     no .pending/ is left, and the checkpoint reads back whole;
#   - node E's last rank commits, and its sync of the directory after the
#     link onto index.db is held back, then fails (index.db withdrawn): the
#     poller never reads `committed` in that window;
#   - node D sees ROOT through tests/fs/cachefs (names, attributes and
#     misses cached 30 s): it looked at a save, node A committed it, and a
#     rank written again through node D fails with EROFS and a message,
#     and leaves nothing inside the committed checkpoint (no .pending/,
#     no new shard);
#   - `ckpt gc --min-age 0` over that view, whose locks are its own, keeps
#     a save node A writes, and warns; --trust-locks lifts the guard.
# NOLOCK_TRIALS (default 10) sets the number of race trials.
. "$(dirname "$0")/lib.sh"

[ "$(id -u)" = 0 ] || _fs_skip "needs root (unshare --mount, nsenter)"
for t in unshare nsenter; do
    command -v $t >/dev/null 2>&1 || _fs_skip "no $t (util-linux)"
done
SHIM=${CKPT_SHIM:-$CKPT_BUILDDIR/tests/crash/.libs/ckptshim.so}
CACHEFS=${CKPT_CACHEFS:-$CKPT_BUILDDIR/tests/fs/cachefs}
[ -f "$SHIM" ] || _fs_skip "the shim $SHIM is not built (make check builds it)"
[ -x "$CACHEFS" ] || _fs_skip "$CACHEFS is not built (make check builds it)"
# A sanitizer build's daemon wants its runtime first in LD_PRELOAD.
ASAN_RT=
if [ -n "${CKPT_SAN_CFLAGS:-}" ] && [ -n "${CKPT_CC:-}" ]; then
    ASAN_RT=$($CKPT_CC -print-file-name=libasan.so 2>/dev/null)
    [ -f "$ASAN_RT" ] || ASAN_RT=
fi
TRIALS=${NOLOCK_TRIALS:-10}

R=$TMP/root
M=$TMP/mnt          # every node's mount point, in its own namespace
IN=$TMP/in
mkdir -p "$R" "$M" "$IN"
"$PY" - "$IN" <<'EOF' || exit 99
import sys, numpy as np
np.random.default_rng(257).standard_normal((64, 32)).astype("<f4").tofile(sys.argv[1] + "/w.bin")
EOF
WPUT=$HELPERS/wput.py

declare -A NODE_PID NODE_LOG
_nodes_cleanup() {
    local n p
    for n in "${!NODE_PID[@]}"; do
        p=${NODE_PID[$n]}
        [ -n "$p" ] || continue
        nsenter -t "$p" -m fusermount3 -u "$M" 2>/dev/null
        _fs_wait_gone "$p" 5 || kill -KILL "$p" 2>/dev/null
    done
}
trap '_nodes_cleanup; _fs_cleanup; kill "$_WATCHDOG" 2>/dev/null; rm -rf --one-file-system "$TMP"' EXIT

# node_start NAME SRC [VAR=VAL...]: a daemon (ckptfs -o rw,world=2 SRC on
# $M) in a new mount namespace, with the environment given.
node_start() {
    local name=$1 src=$2 i
    shift 2
    NODE_LOG[$name]=$TMP/node-$name.log
    env "$@" unshare --mount --propagation private \
        "$CKPTFS" -f -o rw,world=2 "$src" "$M" </dev/null >"${NODE_LOG[$name]}" 2>&1 &
    NODE_PID[$name]=$!
    for ((i = 0; i < 100; i++)); do
        if nsenter -t "${NODE_PID[$name]}" -m mountpoint -q "$M" 2>/dev/null; then
            ok "node $name: mounted in its own namespace"
            return 0
        fi
        kill -0 "${NODE_PID[$name]}" 2>/dev/null || break
        sleep 0.1
    done
    bad "node $name: not mounted: $(tail -c 400 "${NODE_LOG[$name]}" | tr '\n' '~')"
    return 1
}
# on NAME CMD...: runs CMD in node NAME's mount namespace.
on() {
    local name=$1
    shift
    nsenter -t "${NODE_PID[$name]}" -m -- "$@"
}
# node_stop NAME: unmounts; the daemon must end with status 0.
node_stop() {
    local name=$1 p=${NODE_PID[$1]}
    on "$name" fusermount3 -u "$M"
    if _fs_wait_gone "$p" 15; then
        wait "$p"
        DAEMON_RC=$?
    else
        kill -KILL "$p" 2>/dev/null
        DAEMON_RC=hung
    fi
    NODE_PID[$name]=
    expect_daemon_clean "node $name" "${NODE_LOG[$name]}"
}
put_rows() {   # put_rows NODE CKDIR RANK: rank R's 32 rows of w
    on "$1" env RANK="$3" "$PY" "$WPUT" put "$2/w" "$IN/w.bin" --dtype f32 \
        --shape 64,32 --offsets "$(($3 * 32)),0" --sizes 32,32 \
        --from $(($3 * 4096)) --to $(($3 * 4096 + 4096))
}

PRELOAD=$SHIM
[ -z "$ASAN_RT" ] || PRELOAD="$ASAN_RT:$SHIM"
LINKS=$TMP/links.log

echo "# ---- commits race a status poller whose node has no shared locks ($TRIALS trials)"
node_start A "$R" LD_PRELOAD="$PRELOAD" CKPT_SHIM_ROOT="$R" CKPT_SHIM_LOG="$LINKS" \
    CKPT_SHIM_DELAY="rename:*/index.db:150" || exit 1
node_start B "$R" LD_PRELOAD="$PRELOAD" CKPT_SHIM_ROOT="$R" CKPT_SHIM_LOG="$LINKS" \
    CKPT_SHIM_DELAY="rename:*/index.db:150" || exit 1
node_start C "$R" LD_PRELOAD="$PRELOAD" CKPT_SHIM_ROOT="$R" CKPT_SHIM_LOG="$LINKS" \
    CKPT_SHIM_DELAY="rename:*/index.db:150" CKPT_SHIM_NOLOCK=1 || exit 1
# The poller, in node C: reads the status until `stop` appears; each read
# of "committed" is checked against ROOT at once (index.db there; that it
# stays there, never withdrawn, is checked once the trial is over).  With
# a shim log (4th argument) it starts once the committer's delayed sync of
# the directory has begun, and a "committed" read before that sync ended
# (the shim logs its failure) is too early.
POLL='
if [ -n "${4:-}" ]; then   # from the moment the committer syncs the directory
    for ((i = 0; i < 400; i++)); do grep -q "^delay dirsync" "$4" && break; sleep 0.05; done
fi
while [ ! -e "$1/stop" ]; do
    s=$(cat "$2/.ckptfs/status" 2>&1)
    echo "$s" >>"$1/seen"
    if [ "$s" = committed ] && [ ! -f "$3/index.db" ]; then
        echo "committed while ROOT had: $(ls -A "$3" | tr "\n" " ")" >>"$1/early"
    fi
    if [ "$s" = committed ] && [ -n "${4:-}" ] && ! grep -q "^fail dirsync" "$4"; then
        echo "committed while the committer was still syncing the directory" >>"$1/early"
    fi
done'
fails=0
for ((t = 1; t <= TRIALS; t++)); do
    S=step-$(printf %06d "$t")
    T=$TMP/trial-$t
    mkdir -p "$T"
    : >"$LINKS"
    why=
    on A mkdir "$M/$S" || why="node A's mkdir"
    put_rows A "$M/$S" 0 >"$T/put0" 2>&1
    on B env RANK=1 mkdir -p "$M/$S"
    put_rows B "$M/$S" 1 >"$T/put1" 2>&1
    grep -qx ok "$T/put0" && grep -qx ok "$T/put1" || why="puts: $(cat "$T/put0" "$T/put1" | tr '\n' ' ')"
    on A "$PY" "$WPUT" commit "$M/$S" 0 >"$T/commit0" 2>&1
    on C bash -c "$POLL" poll "$T" "$M/$S" "$R/$S" &
    poller=$!
    on B "$PY" "$WPUT" commit "$M/$S" 1 >"$T/commit1" 2>&1
    sleep 0.3       # the poller reads on after the commit returned
    touch "$T/stop"
    wait "$poller"
    nlinks=$(grep -c "index.db " "$LINKS")
    st=$(on C cat "$M/$S/.ckptfs/status")
    [ -n "$why" ] ||
    { grep -qx ok "$T/commit1" || why="node B's commit: $(cat "$T/commit1")"; }
    [ -n "$why" ] || [ "$nlinks" = 1 ] || why="$nlinks links onto index.db (commits that reached publishing): $(tr '\n' '~' <"$LINKS")"
    [ -n "$why" ] || [ ! -s "$T/early" ] || why="the poller read committed early: $(head -n 1 "$T/early")"
    [ -n "$why" ] || [ -f "$R/$S/index.db" ] || why="no index.db: $(ls -A "$R/$S" | tr '\n' ' ')"
    [ -n "$why" ] || [ ! -e "$R/$S/.pending" ] || why=".pending/ left in the committed $S"
    [ -n "$why" ] || [ "$st" = committed ] || why="status afterwards: $st"
    [ -n "$why" ] || ! grep -q '^failed' "$T/seen" || why="the poller read: $(grep -m1 '^failed' "$T/seen")"
    [ -n "$why" ] || on C cmp -s "$IN/w.bin" "$M/$S/w" || why="w does not read back whole"
    if [ -n "$why" ]; then
        fails=$((fails + 1))
        bad "trial $t: $why"
    fi
done
polls=$(cat "$TMP"/trial-*/seen 2>/dev/null | wc -l)
committing=$(cat "$TMP"/trial-*/seen 2>/dev/null | grep -c '^committing')
if [ "$fails" = 0 ]; then
    ok "$TRIALS trials, 0 failures: one link onto index.db each, node B's commit succeeds, never committed early ($polls status reads, $committing of them 'committing')"
else
    bad "$fails of $TRIALS trials failed"
fi
run_ckpt verify "$R/step-000001"
expect_ok "ckpt verify step-000001"

echo "# ---- the last rank's commit cannot sync the directory: never 'committed' before index.db is durable"
# node E commits; its sync of the checkpoint's directory (after the link
# onto index.db) is held back 500 ms, then fails: index.db is withdrawn.
S=sync-000900
T=$TMP/trial-sync
mkdir -p "$T"
SYNCLOG=$TMP/sync.log
: >"$SYNCLOG"
node_start E "$R" LD_PRELOAD="$PRELOAD" CKPT_SHIM_ROOT="$R/$S" CKPT_SHIM_LOG="$SYNCLOG" \
    CKPT_SHIM_DELAY="dirsync:$R/$S:500" CKPT_SHIM_FAIL="dirsync:$R/$S:EIO" || exit 1
on A mkdir "$M/$S"
put_rows A "$M/$S" 0 >"$T/put0" 2>&1
on E env RANK=1 mkdir -p "$M/$S"
put_rows E "$M/$S" 1 >"$T/put1" 2>&1
cat "$T/put0" "$T/put1" | grep -qvx ok && bad "puts: $(cat "$T/put0" "$T/put1" | tr '\n' ' ')"
on A "$PY" "$WPUT" commit "$M/$S" 0 >/dev/null 2>&1
on C bash -c "$POLL" poll "$T" "$M/$S" "$R/$S" "$SYNCLOG" &
poller=$!
on E "$PY" "$WPUT" commit "$M/$S" 1 >"$T/commit1" 2>&1
sleep 0.3
touch "$T/stop"
wait "$poller"
if grep -q "^fail dirsync" "$SYNCLOG"; then
    ok "node E's sync of the directory failed after its link onto index.db ($(cat "$T/commit1"))"
else
    bad "the shim did not fail node E's directory sync: $(tr '\n' '~' <"$SYNCLOG")"
fi
if [ -s "$T/early" ]; then
    bad "the poller read committed too early: $(head -n 1 "$T/early"); reads: $(uniq -c "$T/seen" | tr -s " \n" " " | head -c 300); shim: $(tr "\n" "~" <"$SYNCLOG"); commit: $(cat "$T/commit1")"
else
    ok "the poller never read committed before index.db was durable ($(sort "$T/seen" | uniq -c | tr -s ' \n' ' ' | head -c 200))"
fi
node_stop E
node_stop A
node_stop B
node_stop C

echo "# ---- a rank written again through a node whose view is stale"
CV=$TMP/cview
mkdir -p "$CV"
"$CACHEFS" -f -o cache_s=30 "$R" "$CV" </dev/null >"$TMP/cachefs.log" 2>&1 &
CFS_PID=$!
_MNTS+=("$CV")
_MPIDS+=("$CFS_PID")
for ((i = 0; i < 100; i++)); do
    mountpoint -q "$CV" && break
    sleep 0.1
done
check "cachefs mounts ROOT with a 30 s cache" mountpoint -q "$CV"
node_start A "$R" || exit 1
node_start D "$CV" || exit 1
S=stale-000100
on A mkdir "$M/$S" && ok "node A starts $S"
put_rows A "$M/$S" 0 >"$TMP/put.out" 2>&1
grep -qx ok "$TMP/put.out" && ok "node A writes rank 0" || bad "node A: $(cat "$TMP/put.out")"
put_rows A "$M/$S" 1 >"$TMP/put.out" 2>&1
grep -qx ok "$TMP/put.out" && ok "node A writes rank 1" || bad "node A: $(cat "$TMP/put.out")"
on A "$PY" "$WPUT" commit "$M/$S" 0 >/dev/null 2>&1
# node D looks at the save (and its rank joins it): its kernel caches the
# save's .pending/ and the absence of index.db for 30 s
on D env RANK=1 mkdir -p "$M/$S"
st=$(on D cat "$M/$S/.ckptfs/status")
[ "$st" = "pending 1/2" ] && ok "node D reads $st" || bad "node D's status: $st"
check "node D does not see index.db yet" on D test ! -e "$CV/$S/index.db"
on A "$PY" "$WPUT" commit "$M/$S" 1 >"$TMP/commit.out" 2>&1
st=$(on A cat "$M/$S/.ckptfs/status")
[ "$st" = committed ] && ok "node A commits $S" || bad "node A's status: $st ($(cat "$TMP/commit.out"))"
ls -A "$R/$S/data" >"$TMP/data.before"
put_rows D "$M/$S" 1 >"$TMP/put.out" 2>&1
out=$(cat "$TMP/put.out")
case "$out" in
    "ERR "*" EROFS") ok "rank 1 written again through node D fails with EROFS ($out)" ;;
    *) bad "rank 1 written again through node D: $out, want ERR ... EROFS" ;;
esac
if grep -q "no longer a save in progress: it was committed" "${NODE_LOG[D]}"; then
    ok "node D's log says why: $(grep -m1 'no longer a save in progress' "${NODE_LOG[D]}" | head -c 200)"
elif on D test -e "$CV/$S/index.db"; then
    ok "node D's view had caught up (it sees index.db): EROFS as for any committed checkpoint"
else
    bad "node D's log has no message saying the save was committed: $(tail -c 400 "${NODE_LOG[D]}" | tr '\n' '~')"
fi
check "no .pending/ inside the committed $S" test ! -e "$R/$S/.pending"
ls -A "$R/$S/data" >"$TMP/data.after"
check "no new file in the committed $S's data/" cmp -s "$TMP/data.before" "$TMP/data.after"
run_ckpt verify "$R/$S"
expect_ok "ckpt verify $S"
cmp -s "$IN/w.bin" <(on A cat "$M/$S/w") && ok "w reads back whole" || bad "w differs"
node_stop D

echo "# ---- gc through a view whose locks do not reach the writers"
S2=stale-000200
on A mkdir "$M/$S2" && ok "node A starts $S2 (its lease is locked on ROOT itself)"
put_rows A "$M/$S2" 0 >"$TMP/put.out" 2>&1
grep -qx ok "$TMP/put.out" && ok "node A writes rank 0 of $S2" || bad "node A: $(cat "$TMP/put.out")"
# (the save itself: the view still shows $S as a save for 30 s, which gc
# refuses to touch once it finds index.db inside)
run_ckpt gc --min-age 0 "$CV/$S2"
expect_ok "gc --min-age 0 of $S2 over the cachefs view"
expect_out_re "kept .*$S2: .*locks may not reach the node writing it.*--trust-locks --min-age 0" \
    "gc keeps the live $S2, whose lease it cannot see, and says why"
check "$S2 is still there" test -d "$R/$S2/.pending"
expect_err_re "warning: .* is on a fuse\.cachefs file system, whose locks may not reach other nodes.*idle less than 1m30s are kept" \
    "gc warns that it cannot trust the locks there"
node_stop A
run_ckpt gc --min-age 0 --trust-locks "$CV/$S2"
expect_ok "gc --min-age 0 --trust-locks"
check "with --trust-locks, gc trusts the locks: the abandoned $S2 goes at once" test ! -e "$R/$S2"
check "the committed $S stays" test -f "$R/$S/index.db"
summary
