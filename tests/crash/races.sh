#!/bin/bash
# races.sh - the concurrency half of the crash matrix, each race widened
# with the shim's delays so that it happens every time
# (tests/crash/README.md):
#   - gc and a commit: gc never removes a save whose commit runs (the
#     committer holds the lease), and a commit that starts while gc
#     retires its save fails cleanly instead of reporting success;
#   - two `ckpt commit` of one save at once: exactly one commits;
#   - two mounts committing one step at once: both report success, the
#     checkpoint is whole;
#   - stuck saves: a daemon killed at the commit's link, and a commit that
#     hits ENOSPC and cannot even record its failure, are committed by the
#     next mount (or reported truthfully), never left "pending 2/2";
#   - gc running in a loop during saves of every kind: every save commits;
#   - gc killed while it retires checkpoints: never half of one visible;
#   - a reader whose checkpoint is retired under it: right bytes or an
#     error, never wrong bytes or a crash (library and mount).
. "$(dirname "$0")/tmpdir.sh"
. "$(dirname "$0")/../fs/lib.sh"
. "$CKPT_SRCDIR/tests/crash/lib.sh"

make_baseline 1
M=$TMP/mnt
mkdir -p "$M"

# bg_shimmed OUT [CKPT_SHIM_X=V...] CMD...: in the background ($!).
bg_shimmed() {
    local out=$1 envs=()
    shift
    while [[ $# -gt 0 && $1 == CKPT_SHIM_*=* ]]; do
        envs+=("$1")
        shift
    done
    env LD_PRELOAD="$PRELOAD" "${envs[@]}" timeout 120 "$@" >"$out" 2>&1 &
}

# wait_file FILE: until FILE exists (10 s at most).
wait_file() {
    for _ in $(seq 200); do [ -e "$1" ] && return 0; sleep 0.05; done
    return 1
}
# wait_glob GLOB: until a file matches GLOB (10 s at most).
wait_glob() {
    for _ in $(seq 200); do compgen -G "$1" >/dev/null && return 0; sleep 0.05; done
    return 1
}

# ------------------------------------------------------------ gc vs commit
echo "# ---- gc while a commit runs: the committer's lease keeps the save"
S=$ROOT/step-2
"$DRIVER" lib "$S" 2 2 nocommit || exit 99
bg_shimmed "$TMP/commit.out" CKPT_SHIM_ROOT="$S" CKPT_SHIM_DELAY="rename:$S/index.db:1500" \
    CKPT_SHIM_LOG="$TMP/shim.log" "$CKPT" commit "$S"
CPID=$!
wait_glob "$S/.pending/index.db.tmp.*"   # the commit is between planning and publishing
sleep 0.2
run_ckpt gc --min-age 0 "$ROOT"
expect_ok "gc during the commit"
expect_out_re '^kept step-2: save in progress' "gc keeps the save whose commit runs"
wait "$CPID"
check "the commit succeeds" grep -q '^committed' "$TMP/commit.out"
check "it delayed its link" grep -q '^delay rename' "$TMP/shim.log"
check "the committed checkpoint is whole" "$DRIVER" check "$S" 2
rm -rf "$S"

echo "# ---- a commit that starts while gc retires the save fails cleanly"
"$DRIVER" lib "$S" 2 2 nocommit || exit 99
rm -f "$TMP/shim.log"
# gc holds the save's lease exclusively while it waits before the rename
bg_shimmed "$TMP/gc.out" CKPT_SHIM_ROOT="$ROOT" CKPT_SHIM_DELAY="rename:$ROOT/.ckpt-gc.*:1500" \
    CKPT_SHIM_LOG="$TMP/shim.log" "$CKPT" gc --min-age 0 "$ROOT"
GPID=$!
wait_file "$TMP/shim.log"
run_ckpt commit "$S"
expect_rc 1 "the commit fails"
expect_err_re 'removed by ckpt gc' "the commit says gc removed its save"
wait "$GPID"
check "gc removed it" grep -q '^removed step-2: unfinished save' "$TMP/gc.out"
check "no index.db anywhere" test -z "$(find "$ROOT" -path "*step-2*" -name index.db)"
check "nothing of step-2 left" test ! -e "$S"
[ "$(snapshot "$ROOT/$BASE")" = "$BASE_SUMS" ] && ok "the baseline is byte-identical" || bad "the baseline changed"

# ------------------------------------------------------------ two commits
echo "# ---- two ckpt commit of one save at once"
for round in 1 2 3; do
    "$DRIVER" lib "$S" 2 2 nocommit || exit 99
    bg_shimmed "$TMP/c1.out" CKPT_SHIM_ROOT="$S" CKPT_SHIM_DELAY="rename:$S/index.db:300" "$CKPT" commit "$S"
    P1=$!
    bg_shimmed "$TMP/c2.out" CKPT_SHIM_ROOT="$S" CKPT_SHIM_DELAY="rename:$S/index.db:300" "$CKPT" commit "$S"
    P2=$!
    wait "$P1"; R1=$?
    wait "$P2"; R2=$?
    won=$(cat "$TMP/c1.out" "$TMP/c2.out" | grep -c '^committed')
    if [ "$won" = 1 ] && [ $((R1 + R2)) = 1 ] &&
       grep -E -q 'already committed|committed by someone else' "$TMP/c1.out" "$TMP/c2.out" &&
       "$DRIVER" check "$S" 2; then
        ok "round $round: one commit wins, the other says it was committed already"
    else
        bad "round $round: exits $R1/$R2: $(cat "$TMP/c1.out" "$TMP/c2.out" | tr '\n' '~')"
    fi
    rm -rf "$S"
done

# ------------------------------------------------------------ two mounts
echo "# ---- two mounts committing one step at once"
M2=$TMP/mnt2
mkdir -p "$M2"
WRAP=$TMP/ckptfs-delay
cat >"$WRAP" <<WRAPPER
#!/bin/bash
exec env LD_PRELOAD="$PRELOAD" CKPT_SHIM_ROOT="$ROOT" CKPT_SHIM_DELAY="rename:$ROOT/*/index.db:300" "$CKPTFS" "\$@"
WRAPPER
chmod +x "$WRAP"
REAL_CKPTFS=$CKPTFS
CKPTFS=$WRAP
mount_ck "$ROOT" "$M" -o rw,world=2 || exit 1
mount_ck "$ROOT" "$M2" -o rw,world=2 || exit 1
CKPTFS=$REAL_CKPTFS
for round in 3 4 5; do
    mkdir -p "$M/step-$round"
    # rank 0's pieces through mount 1, rank 1's through mount 2, without
    # committing; then both commit writes at once
    "$DRIVER" mount "$M/step-$round" "$round" 0 2 >/dev/null 2>&1 &
    W0=$!
    "$DRIVER" mount "$M2/step-$round" "$round" 1 2 >/dev/null 2>&1 &
    W1=$!
    wait "$W0"; R0=$?
    wait "$W1"; R1=$?
    st1=$(cat "$M/step-$round/.ckptfs/status" 2>&1)
    if [ "$R0" = 0 ] && [ "$R1" = 0 ] && [ "$st1" = committed ] &&
       "$DRIVER" check "$ROOT/step-$round" "$round"; then
        ok "round $round: both ranks' commit writes succeed, one commit, the checkpoint is whole"
    else
        bad "round $round: writers $R0/$R1, status '$st1'"
    fi
done
umount_ck "$M2"
umount_ck "$M"
rm -rf "$ROOT"/step-[345]

# ------------------------------------------------------------ stuck saves
echo "# ---- a daemon killed at the commit's link"
for how in status rank; do
    S=$ROOT/step-6
    cat >"$WRAP" <<WRAPPER
#!/bin/bash
exec env LD_PRELOAD="$PRELOAD" CKPT_SHIM_ROOT="$S" CKPT_SHIM_KILL_ON="rename:$S/index.db" "$REAL_CKPTFS" "\$@"
WRAPPER
    CKPTFS=$WRAP mount_ck "$ROOT" "$M" -o rw,world=2 || exit 1
    "$DRIVER" mount "$M/step-6" 6 1 2 || bad "rank 1"
    "$DRIVER" mount "$M/step-6" 6 0 2 >"$TMP/w0.out" 2>&1 &&
        bad "rank 0's commit write succeeded though the daemon died" ||
        ok "rank 0's commit write fails: $(tr '\n' ' ' <"$TMP/w0.out" | head -c 120)"
    umount_ck "$M" -z
    check "($how) the save is stuck: every rank in, no index.db" \
        test -e "$S/.pending/rank-0" -a -e "$S/.pending/rank-1" -a ! -e "$S/index.db"
    mount_ck "$ROOT" "$M" -o rw,world=2 || exit 1
    if [ "$how" = status ]; then
        st=$(cat "$M/step-6/.ckptfs/status" 2>&1)
        [ "$st" = committed ] && ok "a new mount's status read commits it" ||
            bad "the new mount's status reads '$st'"
    else
        echo 0 >"$M/step-6/.ckptfs/commit" 2>"$TMP/rank.err" &&
            ok "rank 0 written again through a new mount commits it" ||
            bad "writing rank 0 again fails: $(cat "$TMP/rank.err")"
        st=$(cat "$M/step-6/.ckptfs/status" 2>&1)
        [ "$st" = committed ] && ok "status: committed" || bad "status: '$st'"
    fi
    umount_ck "$M"
    check "($how) the recovered save is whole" "$DRIVER" check "$S" 6
    rm -rf "$S"
done

echo "# ---- a commit that hits ENOSPC and cannot record its failure"
S=$ROOT/step-7
cat >"$WRAP" <<WRAPPER
#!/bin/bash
exec env LD_PRELOAD="$PRELOAD" CKPT_SHIM_ROOT="$S" CKPT_SHIM_FAIL="write:$S/.pending/index.db.tmp*:ENOSPC" CKPT_SHIM_FAIL2="open:$S/.pending/failed*:ENOSPC" "$REAL_CKPTFS" "\$@"
WRAPPER
CKPTFS=$WRAP mount_ck "$ROOT" "$M" -o rw,world=2 || exit 1
"$DRIVER" mount "$M/step-7" 7 1 2 || bad "rank 1"
"$DRIVER" mount "$M/step-7" 7 0 2 >"$TMP/w0.out" 2>&1 &&
    bad "the commit write succeeded on a full disk" ||
    ok "the completing commit write fails: $(tr '\n' ' ' <"$TMP/w0.out" | head -c 160)"
check "no .pending/failed could be written" test ! -e "$S/.pending/failed"
st=$(cat "$M/step-7/.ckptfs/status" 2>&1)
case $st in
    "failed: "*"No space left"*|"failed: "*"disk is full"*) ok "the status says why: '${st:0:140}'" ;;
    *) bad "the status reads '$st', want failed: ... ENOSPC" ;;
esac
umount_ck "$M"
mount_ck "$ROOT" "$M" -o rw,world=2 || exit 1      # space is back
st=$(cat "$M/step-7/.ckptfs/status" 2>&1)
[ "$st" = committed ] && ok "once space is back, a new mount's status read commits it" ||
    bad "after the disk full: status '$st'"
umount_ck "$M"
check "the recovered step-7 is whole" "$DRIVER" check "$S" 7
rm -rf "$S"

# ------------------------------------------------------------ gc in a loop
echo "# ---- gc in a loop during saves of every kind"
GCLOG=$TMP/gc-loop.log
: >"$GCLOG"
gc_loop() {   # gc_loop MIN_AGE: until $TMP/stop exists
    while [ ! -e "$TMP/stop" ]; do
        "$CKPT" gc --min-age "$1" "$ROOT" >>"$GCLOG" 2>&1
        sleep 0.01
    done
}
IN=$TMP/in
mkdir -p "$IN"
"$DRIVER" gen "$IN" 8 || exit 99
mount_ck "$ROOT" "$M" -o rw,world=2 || exit 1
save_kind() {   # save_kind KIND STEP
    local d=$ROOT/step-$2
    case $1 in
        lib) "$DRIVER" lib "$d" "$2" 3 ;;
        async) "$DRIVER" async "$d" "$2" ;;
        pack) "$CKPT" pack --grid 2 --frame-size 4K "$d" --meta step="$2" \
                  model.w="$IN/w.npy" model.b="$IN/b.npy" opt.m="$IN/m.npy" ;;
        import) "$CKPT" import --frame-size 4K "$ROOT/$BASE" "$d" ;;
        mpi) timeout 120 mpirun --allow-run-as-root --oversubscribe -n 2 "$CKMPI" "$d" "$2" ;;
        mount) "$DRIVER" mount "$M/step-$2" "$2" 1 2 && "$DRIVER" mount "$M/step-$2" "$2" 0 2 ;;
    esac
}
seed_of() {   # the state a kind's step holds
    case $1 in pack) echo 8 ;; import) echo 1 ;; *) echo "$2" ;; esac
}
KINDS=(async pack import mount lib)
command -v mpirun >/dev/null && [ -x "$CKMPI" ] && KINDS+=(mpi)
step=100
for kind in "${KINDS[@]}"; do
    rm -f "$TMP/stop"
    # A library user's writers close before its commit: between the two
    # only the heartbeat (--min-age) protects the save; every other kind
    # holds a lease from its first file to its commit.
    age=0
    [ "$kind" = lib ] && age=60
    gc_loop "$age" &
    LOOP=$!
    good=0
    for i in 1 2 3; do
        step=$((step + 1))
        if save_kind "$kind" "$step" >"$TMP/save.out" 2>&1 &&
           "$DRIVER" check "$ROOT/step-$step" "$(seed_of "$kind" "$step")" 2>>"$TMP/save.out"; then
            good=$((good + 1))
        else
            echo "     $kind step-$step: $(tail -c 300 "$TMP/save.out" | tr '\n' '~')"
        fi
    done
    touch "$TMP/stop"
    wait "$LOOP"
    [ "$good" = 3 ] && ok "$kind: 3 saves commit whole while gc --min-age $age loops" ||
        bad "$kind: $good of 3 saves committed whole while gc loops"
done
umount_ck "$M"
if grep -E '^removed step-1[0-9][0-9]' "$GCLOG"; then
    bad "the gc loop removed a save in progress"
else
    ok "the gc loop ($(grep -c . "$GCLOG") lines) removed no save in progress"
fi
rm -rf "$ROOT"/step-1[0-9][0-9]

echo "# ---- gc while a save's directory is being made (before its lease)"
rm -f "$TMP/shim2.log"
bg_shimmed "$TMP/pack.out" CKPT_SHIM_ROOT="$ROOT" \
    CKPT_SHIM_DELAY="open:$ROOT/.ckpt-new.*/.pending/lease:1500" \
    CKPT_SHIM_LOG="$TMP/shim2.log" "$CKPT" pack --frame-size 4K "$ROOT/step-40" \
    --meta step=8 model.w="$IN/w.npy" model.b="$IN/b.npy" opt.m="$IN/m.npy"
PP=$!
wait_file "$TMP/shim2.log"
run_ckpt gc --min-age 0 "$ROOT"
expect_out_re '^kept \.ckpt-new\..*step-40: ' "gc keeps the directory its maker is still making"
wait "$PP" && ok "the pack succeeds" || bad "the pack: $(cat "$TMP/pack.out")"
check "step-40 is whole" "$DRIVER" check "$ROOT/step-40" 8
rm -rf "$ROOT/step-40"

echo "# ---- a save a mount only looked at, removed by gc, is saved again"
"$DRIVER" lib "$ROOT/step-30" 30 2 nocommit || exit 99
mount_ck "$ROOT" "$M" -o rw,world=2 || exit 1
ls "$M/step-30" >/dev/null 2>&1      # joins it; writes nothing: no lease
run_ckpt gc --min-age 0 "$ROOT"
expect_out_re '^removed step-30: unfinished save' "gc removes the save the mount only looked at"
sleep 1.1                            # the kernel keeps names for a second
"$DRIVER" mount "$M/step-30" 30 1 2 >"$TMP/w.out" 2>&1 &&
    "$DRIVER" mount "$M/step-30" 30 0 2 >>"$TMP/w.out" 2>&1 &&
    ok "the step is saved again through the same mount" ||
    bad "saving step-30 again: $(tr '\n' '~' <"$TMP/w.out")"
umount_ck "$M"
check "step-30 is whole" "$DRIVER" check "$ROOT/step-30" 30
rm -rf "$ROOT/step-30"

# ------------------------------------------------------------ gc killed
echo "# ---- gc killed while it retires checkpoints: never half of one"
for s in 11 12 13 14; do "$DRIVER" lib "$ROOT/step-$s" "$s" 2 || exit 99; done
count_calls CKPT_SHIM_ROOT="$ROOT" "$CKPT" gc --keep-last 1 "$ROOT"
N=${CALLS%% *}
for s in 11 12 13; do "$DRIVER" lib "$ROOT/step-$s" "$s" 2 || exit 99; done
"$DRIVER" lib "$ROOT/$BASE" 1 2 2>/dev/null    # retention took it too
BASE_SUMS=$(snapshot "$ROOT/$BASE")
GC_TRIALS=$((TRIALS / 5 > 0 ? TRIALS / 5 : 1))
for ((i = 1; i <= GC_TRIALS; i++)); do
    next_k "$N"
    trial_begin
    shimmed CKPT_SHIM_ROOT="$ROOT" CKPT_SHIM_KILL_AT="$K" "$CKPT" gc --keep-last 1 "$ROOT"
    for c in $(committed_of "$ROOT"); do
        "$CKPT" verify "$ROOT/$c" >/dev/null 2>&1 || fail_trial "$c is listed but does not verify"
    done
    for e in "$ROOT"/step-*; do
        [ -f "$e/index.db" ] || fail_trial "$(basename "$e") is there without its index"
    done
    [ -f "$ROOT/step-14/index.db" ] || fail_trial "the newest, step-14, is gone"
    "$CKPT" gc --keep-last 1 "$ROOT" >/dev/null 2>&1 || fail_trial "the next gc fails"
    [ "$(ls -A "$ROOT")" = step-14 ] || fail_trial "after the next gc: $(ls -A "$ROOT" | tr '\n' ' ')"
    trial_end "gc --keep-last 1 killed before call $K of $N"
    for s in 11 12 13; do "$DRIVER" lib "$ROOT/step-$s" "$s" 2 >/dev/null 2>&1 || exit 99; done
    "$DRIVER" lib "$ROOT/$BASE" 1 2 >/dev/null 2>&1 || exit 99
done
rm -rf "$ROOT"/step-1[1-4]

# ------------------------------------------------------------ readers
echo "# ---- a reader whose checkpoint is retired under it"
"$DRIVER" lib "$ROOT/step-20" 20 2 || exit 99
rm -f "$TMP/ready" "$TMP/go"
"$DRIVER" read "$ROOT/$BASE" 1 "$TMP/ready" "$TMP/go" >"$TMP/read.out" 2>&1 &
RP=$!
wait_file "$TMP/ready" || bad "the reader did not start"
run_ckpt gc --keep-last 1 "$ROOT"
expect_ok "gc --keep-last 1 retires step-1 under the reader"
check "step-1 is gone" test ! -e "$ROOT/$BASE"
touch "$TMP/go"
wait "$RP"
RRC=$?
case $RRC:$(cat "$TMP/read.out") in
    0:ok|0:error:*) ok "the library reader gets the right bytes or an error: $(head -c 150 "$TMP/read.out")" ;;
    *) bad "the library reader: exit $RRC: $(cat "$TMP/read.out")" ;;
esac

"$DRIVER" lib "$ROOT/step-21" 21 2 || exit 99
mount_ck "$ROOT" "$M" || exit 1
"$CKPT" cat "$ROOT/step-20" model.w >"$TMP/w20.ref" || exit 99
exec 3<"$M/step-20/model/w" || bad "cannot open step-20/model/w"
head -c 4096 <&3 >"$TMP/w20.head"       # the reader is open and has read
run_ckpt gc --keep-last 1 "$ROOT"
expect_ok "gc --keep-last 1 retires step-20 under the mount's open file"
if cat <&3 >"$TMP/w20.rest" 2>"$TMP/w20.err"; then
    cat "$TMP/w20.head" "$TMP/w20.rest" >"$TMP/w20.got"
    same_bytes "the open file reads the right bytes to its end" "$TMP/w20.ref" "$TMP/w20.got"
else
    grep -q 'Input/output error' "$TMP/w20.err" &&
        ok "the open file's read fails with EIO" ||
        bad "the open file's read fails otherwise: $(cat "$TMP/w20.err")"
fi
exec 3<&-
sleep 1.1      # the root listing is rescanned at most once a second
listed=" $(ls "$M" | tr '\n' ' ')"
[[ $listed == *" step-20 "* ]] && bad "the mount still lists step-20" ||
    ok "the mount no longer lists step-20 (lists:$listed)"
[ "$(readlink "$M/latest")" = step-21 ] && ok "latest -> step-21" || bad "latest -> $(readlink "$M/latest")"
umount_ck "$M"
expect_daemon_clean "the read-only mount" "$MNT_LOG"
summary
