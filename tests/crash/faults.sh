#!/bin/bash
# faults.sh - injected I/O faults (EIO, then ENOSPC) at every stage of a
# save -- shard write, shard fdatasync, plan write, index write, the
# rename (link) that publishes index.db, the sync of the checkpoint's
# directory -- on every writing path: a library save (3 writers +
# ckpt_commit), an async save, ckpt pack, an MPI save (2 ranks) and a save
# through a writable mount (the daemon's calls fail; its writers see the
# error, and the commit write, the status and the log name it).  Each
# gives a clear error naming the stage, commits nothing, leaves the
# earlier checkpoint byte-identical; gc --min-age 0 then cleans the root
# and the step saves again (tests/crash/README.md).
. "$(dirname "$0")/tmpdir.sh"
. "$(dirname "$0")/../cli/lib.sh"
. "$CKPT_SRCDIR/tests/crash/lib.sh"

make_baseline 1
T=$ROOT/step-2
IN=$TMP/in
mkdir -p "$IN"
"$DRIVER" gen "$IN" 2 || exit 99

# Stage: shim rule (GLOB relative to the save; :last = the last matching
# call of a clean save, counted first) and what the error must say.
STAGES=(shard_write fdatasync plan_create plan_append index_create
        index_write rename dir_sync)
declare -A RULE=(
    [shard_write]='write:T/data/*.shard'
    [fdatasync]='fsync:T/data/*.shard'
    [plan_create]='write:T/.pending/*.plan*'
    [plan_append]='write:T/.pending/*.plan*:last'
    [index_create]='write:T/.pending/index.db.tmp*'
    [index_write]='write:T/.pending/index.db.tmp*:last'
    [rename]='rename:T/index.db'
    [dir_sync]='dirsync:T'
)
declare -A SAYS=(
    [shard_write]='cannot write .*data/[^ ]*\.shard'
    [fdatasync]='cannot sync [^:]*data/[^ ]*\.shard'
    [plan_create]='cannot create the local plan: [^ ]*\.plan'
    [plan_append]='cannot record pieces in the local plan: [^ ]*\.plan'
    [index_create]='cannot write the index: [^ ]*index\.db\.tmp'
    [index_write]='cannot write the index: [^ ]*index\.db\.tmp'
    [rename]='cannot publish [^ ]*index\.db'
    [dir_sync]='cannot sync directory [^ ]*step-2'
)
declare -A ERRSAYS=([EIO]='Input/output error|I/O error'
                    [ENOSPC]='No space left on device|disk is full')

# faulted PATH STAGE ERR: runs the save of PATH with the fault; its
# messages end up in $SHIM_OUT (the mount: its daemon's log and status).
lib_save() { "$@" "$DRIVER" lib "$T" 2 3; }
async_save() { "$@" "$DRIVER" async "$T" 2; }
pack_save() {
    "$@" "$CKPT" pack --grid 2 --frame-size 4K --threads 1 --meta step=2 \
        "$T" model.w="$IN/w.npy" model.b="$IN/b.npy" opt.m="$IN/m.npy"
}
mpi_save() {
    if [ "$1" = env ]; then
        timeout 120 mpirun --allow-run-as-root --oversubscribe -n 2 "$CKMPI" "$T" 2
        return
    fi
    shift
    local envs=() e
    for e in "$@"; do envs+=(-x "$e"); done
    ( timeout 120 mpirun --allow-run-as-root --oversubscribe \
        --mca odls_base_sigkill_timeout 0 -n 2 -x LD_PRELOAD="$PRELOAD" \
        "${envs[@]}" "$CKMPI" "$T" 2; exit $? ) >"$SHIM_OUT" 2>&1
    RC=$?
}
# fault_rule STAGE ERR SAVE: CKPT_SHIM_FAIL's value; for a ':last' stage,
# SAVE runs once without failing to count the calls the rule matches.
fault_rule() {
    local r=${RULE[$1]/T/$T} n
    if [[ $r == *:last ]]; then
        r=${r%:last}
        rm -f "$TMP/mcount"
        "$3" shimmed CKPT_SHIM_ROOT="$T" CKPT_SHIM_FAIL="$r:$2:1000000000" \
            CKPT_SHIM_COUNT="$TMP/mcount"
        n=$(awk '{ if ($3 > m) m = $3 } END { print m + 0 }' "$TMP/mcount")
        rm -rf "$T"
        echo "$r:$2:${n}"
    else
        echo "$r:$2"
    fi
}
PATHS=(lib async pack)
if command -v mpirun >/dev/null && [ -x "$CKMPI" ]; then
    PATHS+=(mpi)
else
    echo "# no MPI: the MPI save is not faulted here"
fi

for p in "${PATHS[@]}"; do
    for stage in "${STAGES[@]}"; do
        for err in EIO ENOSPC; do
            trial_begin
            rule=$(fault_rule "$stage" "$err" "${p}_save")
            "${p}_save" shimmed CKPT_SHIM_ROOT="$T" CKPT_SHIM_FAIL="$rule"
            [ "$RC" != 0 ] && [ "$RC" -lt 124 ] || fail_trial "exit $RC, want a failure"
            grep -E -q -- "${SAYS[$stage]}" "$SHIM_OUT" ||
                fail_trial "the error does not name the stage: $(tail -c 500 "$SHIM_OUT" | tr '\n' '~')"
            grep -E -q -- "${ERRSAYS[$err]}" "$SHIM_OUT" ||
                fail_trial "the error does not say $err"
            [ ! -e "$T/index.db" ] || fail_trial "index.db exists after the fault"
            check_root "$T" 2 nomount
            [ "$COMMITTED" = 0 ] || fail_trial "the faulted save committed"
            "${p}_save" env >"$TMP/re.out" 2>&1 && "$DRIVER" check "$T" 2 >>"$TMP/re.out" 2>&1 ||
                fail_trial "the step cannot be saved again: $(tail -c 300 "$TMP/re.out")"
            rm -rf "$T"
            trial_end "$p save, $stage fails with $err: $(grep -E -o -m1 -- "${SAYS[$stage]}[^~]{0,60}" "$SHIM_OUT" | head -c 160)"
        done
    done
done

# ------------------------------------------------------------ the mount
if [ -x "${CKPTFS:-}" ] && [ -c /dev/fuse ] && command -v fusermount3 >/dev/null; then
    M=$TMP/mnt
    mkdir -p "$M"
    # mount_save shimmed ENV...: a clean save through a mount whose daemon
    # runs with ENV (to count what a rule matches).
    mount_save() {
        shift
        env LD_PRELOAD="$PRELOAD" "$@" "$CKPTFS" -f -o rw,world=2 "$ROOT" \
            "$M" </dev/null >"$TMP/count.log" 2>&1 &
        local pid=$!
        for _ in $(seq 100); do mountpoint -q "$M" && break; sleep 0.05; done
        "$DRIVER" mount "$M/step-2" 2 1 2 && "$DRIVER" mount "$M/step-2" 2 0 2
        timeout 10 fusermount3 -u "$M" || timeout 10 fusermount3 -uz "$M"
        wait "$pid"
    } >/dev/null 2>&1
    # Where the mount's save reports each stage: a piece's close or
    # write (shard write, plan write), the rank's commit write (fdatasync:
    # the writers' sync at commit), the completing rank's commit write and
    # the status (index write, rename, dir sync).
    for stage in "${STAGES[@]}"; do
        for err in EIO ENOSPC; do
            trial_begin
            rule=$(fault_rule "$stage" "$err" mount_save)
            env LD_PRELOAD="$PRELOAD" CKPT_SHIM_ROOT="$T" \
                CKPT_SHIM_FAIL="$rule" "$CKPTFS" -f -o rw,world=2 \
                "$ROOT" "$M" </dev/null >"$TMP/daemon.log" 2>&1 &
            pid=$!
            for _ in $(seq 100); do mountpoint -q "$M" && break; sleep 0.05; done
            "$DRIVER" mount "$M/step-2" 2 1 2 >"$TMP/w.out" 2>&1
            r1=$?
            "$DRIVER" mount "$M/step-2" 2 0 2 >>"$TMP/w.out" 2>&1
            r0=$?
            st=$(cat "$M/step-2/.ckptfs/status" 2>&1)
            [ "$r0" != 0 ] || [ "$r1" != 0 ] || fail_trial "both writers succeeded"
            [[ $st != committed ]] || fail_trial "status: committed"
            timeout 10 fusermount3 -u "$M" || timeout 10 fusermount3 -uz "$M"
            wait "$pid"
            cat "$TMP/w.out" "$TMP/daemon.log" >"$SHIM_OUT"
            echo "status: $st" >>"$SHIM_OUT"
            grep -E -q -- "${SAYS[$stage]}" "$SHIM_OUT" ||
                fail_trial "neither the writers, the log nor the status name the stage: $(tail -c 600 "$SHIM_OUT" | tr '\n' '~')"
            grep -E -q -- "${ERRSAYS[$err]}" "$SHIM_OUT" || fail_trial "nothing says $err"
            [ ! -e "$T/index.db" ] || fail_trial "index.db exists after the fault"
            check_root "$T" 2 nomount
            "$CKPTFS" -f -o rw,world=2 "$ROOT" "$M" </dev/null >"$TMP/daemon2.log" 2>&1 &
            pid=$!
            for _ in $(seq 100); do mountpoint -q "$M" && break; sleep 0.05; done
            { "$DRIVER" mount "$M/step-2" 2 1 2 && "$DRIVER" mount "$M/step-2" 2 0 2; } >"$TMP/re.out" 2>&1 ||
                fail_trial "the step cannot be saved again: $(tail -c 300 "$TMP/re.out")"
            timeout 10 fusermount3 -u "$M" || timeout 10 fusermount3 -uz "$M"
            wait "$pid"
            "$DRIVER" check "$T" 2 >>"$TMP/re.out" 2>&1 || fail_trial "the re-saved step is wrong"
            rm -rf "$T"
            trial_end "mount save, $stage fails with $err (writers exit $r1/$r0, status '${st:0:120}')"
        done
    done
else
    echo "# no FUSE here: the mount is not faulted"
fi
summary
