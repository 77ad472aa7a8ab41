# tests/crash/lib.sh - shared helpers of the crash and fault matrix
# (tests/crash/README.md).  Sourced by tests/crash/*.sh after
# tests/fs/lib.sh (scripts that mount) or tests/cli/lib.sh.
#
# Environment:
#   CKPT_CRASH_TRIALS   kill -9 trials per path (default 50)
#   CKPT_CRASH_SEED     seed of the kill points (default 13)
#
# After sourcing:
#   $DRIVER, $CKMPI      tests/crash/crash_driver, crash_mpi
#   $ROOT                a fresh root under $TMP
#   shimmed [VAR=VAL...] CMD...   runs CMD with the shim preloaded (and the
#                        ASan runtime first in a sanitizer build), with the
#                        CKPT_SHIM_* assignments given; $RC its status
#   count_calls VAR=VAL... CMD... counts the shim's calls of CMD under
#                        CKPT_SHIM_ROOT: $CALLS (one number per process)
#   next_k N             a kill point in 1..N from the seeded generator: $K
#   snapshot DIR         sha256 of every file of DIR (sorted), on stdout
#   check_root DESC TARGET SEED [MOUNT_CHECK]
#                        after a trial: every checkpoint ckpt ls shows
#                        verifies, the baseline is byte-identical, TARGET
#                        (if committed) holds SEED's state, the mount's
#                        listing and `latest` show committed checkpoints
#                        only, and gc --min-age 0 leaves the root clean;
#                        sets $COMMITTED (1 or 0); failures go to
#                        $TRIAL_FAIL
#   trial_begin / trial_end DESC  one ok or bad per trial

DRIVER=$CKPT_BUILDDIR/tests/crash/crash_driver
CKMPI=$CKPT_BUILDDIR/tests/crash/crash_mpi
SHIM=$CKPT_BUILDDIR/tests/crash/.libs/ckptshim.so
TRIALS=${CKPT_CRASH_TRIALS:-50}
RNG=${CKPT_CRASH_SEED:-13}

[ -x "$DRIVER" ] || { echo "SKIP: $DRIVER is not built"; exit 77; }
[ -f "$SHIM" ] || { echo "SKIP: the shim $SHIM is not built"; exit 77; }

# In a sanitizer build the ASan runtime must come first in LD_PRELOAD.
# (Not `ldd | grep -q`: with pipefail, ldd killed by SIGPIPE when grep
# quits early would make the test fail at random.)
PRELOAD=$SHIM
if [[ $(ldd "$CKPT" 2>/dev/null) == *libasan* ]]; then
    PRELOAD="$(gcc -print-file-name=libasan.so) $SHIM"
    [ -f "${PRELOAD%% *}" ] || { echo "ERROR: no ASan runtime for LD_PRELOAD" >&2; exit 99; }
fi
# Processes the matrix kills or fails on purpose: their leaks on error
# paths are checked by the other tests, not here.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"

ROOT=$TMP/root
mkdir -p "$ROOT"

# shimmed [CKPT_SHIM_X=V...] CMD...: stdout and stderr (with the shell's
# own "Killed" notice) in $SHIM_OUT.
SHIM_OUT=$TMP/shimmed.out
shimmed() {
    local envs=()
    while [[ $# -gt 0 && $1 == CKPT_SHIM_*=* ]]; do
        envs+=("$1")
        shift
    done
    ( env LD_PRELOAD="$PRELOAD" "${envs[@]}" timeout 120 "$@"; exit $? ) \
        >"$SHIM_OUT" 2>&1
    RC=$?
    return 0
}

# count_calls [CKPT_SHIM_X=V...] CMD...
count_calls() {
    local f=$TMP/count.$$
    rm -f "$f"
    shimmed CKPT_SHIM_COUNT="$f" "$@"
    CALLS=$(cut -d' ' -f1 "$f" 2>/dev/null | sort -n | tr '\n' ' ')
    rm -f "$f"
}

# need_calls N...: after a calibration run ($RC), every N must be a
# positive count; otherwise the run's output is shown and the script ends.
need_calls() {
    local n
    for n in "$@"; do
        if [ "$RC" != 0 ] || ! [[ $n =~ ^[0-9]+$ ]] || [ "$n" -eq 0 ]; then
            echo "ERROR: calibration: exit $RC, calls '$*'; its output:" >&2
            tail -c 3000 "$SHIM_OUT" >&2
            exit 99
        fi
    done
}

# next_k N: $K in 1..N, from a 63-bit LCG seeded by CKPT_CRASH_SEED.
next_k() {
    RNG=$(( (RNG * 6364136223846793005 + 1442695040888963407) & 0x7fffffffffffffff ))
    K=$(( 1 + (RNG >> 17) % $1 ))
}

snapshot() {
    (cd "$1" && find . -type f -print0 | sort -z | xargs -0 sha256sum)
}

TRIAL_FAIL=
fail_trial() {
    TRIAL_FAIL="${TRIAL_FAIL:+$TRIAL_FAIL; }$*"
}

trial_begin() {
    TRIAL_FAIL=
}

trial_end() {
    if [ -z "$TRIAL_FAIL" ]; then
        ok "$*"
    else
        bad "$*: $TRIAL_FAIL"
    fi
}

# The committed checkpoints of root, as `ckpt ls ROOT` lists them.
committed_of() {
    "$CKPT" ls "$1" 2>/dev/null | awk '$2 == "committed" { print $1 }'
}

# listing_check ROOT WANT_LATEST: a read-only mount of ROOT lists exactly
# the committed checkpoints, and latest points to WANT_LATEST.
MNT_RO=$TMP/ro
listing_check() {
    local root=$1 want=$2 got names pid
    [ -x "${CKPTFS:-}" ] && [ -c /dev/fuse ] || return 0
    mkdir -p "$MNT_RO"
    "$CKPTFS" -f "$root" "$MNT_RO" </dev/null >"$TMP/ro.log" 2>&1 &
    pid=$!
    for _ in $(seq 100); do
        mountpoint -q "$MNT_RO" && break
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.05
    done
    if ! mountpoint -q "$MNT_RO"; then
        fail_trial "the read-only mount of the root failed: $(tail -c 300 "$TMP/ro.log")"
        wait "$pid"
        return
    fi
    names=$(ls "$MNT_RO" | grep -v '^latest$' | sort | tr '\n' ' ')
    want_names=$(committed_of "$root" | sort | tr '\n' ' ')
    [ "$names" = "$want_names" ] ||
        fail_trial "the mount lists '$names', ckpt ls committed '$want_names'"
    got=$(readlink "$MNT_RO/latest" 2>/dev/null)
    [ "$got" = "$want" ] || fail_trial "latest -> '$got', want '$want'"
    timeout 10 fusermount3 -u "$MNT_RO" || timeout 10 fusermount3 -uz "$MNT_RO"
    wait "$pid"
}

# root_clean ROOT: only committed checkpoints, no hidden entries, no
# .pending or index.db.tmp inside a checkpoint.
root_clean() {
    local e
    for e in "$1"/* "$1"/.[!.]*; do
        [ -e "$e" ] || continue
        case $(basename "$e") in
            .*) fail_trial "hidden $(basename "$e") left in the root" ;;
        esac
        if [ ! -f "$e/index.db" ]; then
            fail_trial "$(basename "$e") is not a checkpoint after gc"
        elif [ -e "$e/.pending" ] || [ -e "$e/index.db.tmp" ]; then
            fail_trial "$(basename "$e") keeps $(ls -A "$e" | tr '\n' ' ')"
        fi
    done
}

BASE=step-1
BASE_SUMS=
# make_baseline SEED: the earlier checkpoint every trial must leave
# byte-identical, saved by 2 library writers.
make_baseline() {
    "$DRIVER" lib "$ROOT/$BASE" "$1" 2 || { echo "ERROR: baseline" >&2; exit 99; }
    BASE_SUMS=$(snapshot "$ROOT/$BASE")
}

COMMITTED=0
# check_root DESC TARGET SEED [nomount]
check_root() {
    local target=$1 seed=$2 mount=${3:-mount} name latest
    name=$(basename "$target")
    COMMITTED=0
    [ -f "$target/index.db" ] && COMMITTED=1
    if ! "$CKPT" ls "$ROOT" >"$TMP/ls.out" 2>"$TMP/ls.err"; then
        fail_trial "ckpt ls ROOT fails: $(head -c 300 "$TMP/ls.err")"
    fi
    for c in $(committed_of "$ROOT"); do
        "$CKPT" verify "$ROOT/$c" >/dev/null 2>"$TMP/v.err" ||
            fail_trial "$c is listed committed but does not verify: $(head -c 300 "$TMP/v.err")"
    done
    [ "$(snapshot "$ROOT/$BASE")" = "$BASE_SUMS" ] ||
        fail_trial "the baseline $BASE changed"
    if [ "$COMMITTED" = 1 ]; then
        "$DRIVER" check "$target" "$seed" 2>"$TMP/c.err" ||
            fail_trial "$name is committed but wrong: $(cat "$TMP/c.err")"
    fi
    latest=$BASE
    [ "$COMMITTED" = 1 ] && latest=$name
    [ "$mount" = nomount ] || listing_check "$ROOT" "$latest"
    "$CKPT" gc --min-age 0 "$ROOT" >"$TMP/gc.out" 2>"$TMP/gc.err" ||
        fail_trial "gc fails: $(head -c 300 "$TMP/gc.err")"
    root_clean "$ROOT"
}

# run_kill_matrix DESC TARGET SEED N: TRIALS trials, each drawing a kill
# point K in 1..N and calling the script's `kill_save K` (which sets $RC:
# 137 killed, 0 completed, anything in $OTHER_RC accepted too), then the
# optional `after_kill`, then check_root, then, unless the target was
# committed, the script's `resave` (which must save the step again and
# return 0) and a check of what it saved.  One ok/bad line per trial and
# a closing count.
OTHER_RC=
K=0
run_kill_matrix() {
    local desc=$1 target=$2 seed=$3 n=$4 i killed=0 completed=0 committed=0
    for ((i = 1; i <= TRIALS; i++)); do
        [[ $n =~ ^[0-9]+$ ]] && next_k "$n"   # else kill_save draws its own
        trial_begin
        kill_save "$K"
        case " 137 $OTHER_RC " in
            *" $RC "*) killed=$((killed + 1)) ;;
            *) if [ "$RC" = 0 ]; then
                   completed=$((completed + 1))
               else
                   fail_trial "exit $RC: $(tail -c 400 "$SHIM_OUT" | tr '\n' '~')"
               fi ;;
        esac
        if declare -F after_kill >/dev/null; then after_kill; fi
        check_root "$target" "$seed"
        committed=$((committed + COMMITTED))
        if [ "$COMMITTED" = 0 ]; then
            resave >"$TMP/re.out" 2>&1 &&
                "$DRIVER" check "$target" "$seed" >>"$TMP/re.out" 2>&1 ||
                fail_trial "the step cannot be saved again: $(tail -c 400 "$TMP/re.out" | tr '\n' '~')"
        fi
        rm -rf "$target"
        trial_end "$desc, trial $i: killed before call $K of $n"
    done
    echo "# $desc: $TRIALS trials over $n calls: $killed killed, $completed completed, $committed left the step committed"
}
