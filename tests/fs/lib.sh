# tests/fs/lib.sh - shared helpers of the mount tests (docs/MOUNT.md).
# Sourced (not run) by tests/fs/*.sh, under /bin/bash.
#
# Environment (set by `make check`; defaults for running by hand):
#   CKPT, CKPT_SRCDIR, CKPT_BUILDDIR   as for tests/cli (see its lib.sh)
#   CKPTFS                             the ckptfs daemon under test
#   CKPT_TEST_TIMEOUT                  watchdog of the whole script (s, 300)
# Exit status: 0 pass, 77 skip (no FUSE here, or no daemon built), 99 hard
# error, 1 failures.
#
# Everything of tests/cli/lib.sh (ok, bad, check, run_ckpt, report, summary,
# $TMP, $PY, $HELPERS, ...) plus:
#   mount_ck SRC MNT [OPTS...]     starts `$CKPTFS -f OPTS SRC MNT` in the
#                                  background (log: $MNT_LOG, pid: $MNT_PID),
#                                  waits up to 10 s for `mountpoint -q MNT`;
#                                  counts a check; returns 1 if not mounted
#   umount_ck MNT [-z|-n]          fusermount3 -u (-uz with -z, none with
#                                  -n; -u falls back to -uz), waits up to
#                                  15 s for the daemon
#                                  to end; $DAEMON_RC is its exit status, or
#                                  'hung' (then it was killed, after naming
#                                  any other mount namespace still holding
#                                  a copy of MNT: docs/MOUNT.md, Unmounting)
#   expect_daemon_clean DESC LOG   after umount_ck: exit status 0 and no
#                                  sanitizer/crash report in LOG
#   refuse_mount DESC ERE SRC [WANT_RC [OPTS...]]
#                                  the daemon (with OPTS) must refuse SRC:
#                                  exit status WANT_RC (1; 'nonzero': any
#                                  failure) within 10 s, a log line matching
#                                  ERE (grep -E -i), and nothing mounted
#   expect_erofs DESC CMD...       CMD fails saying 'Read-only file system'
#   stat_val FILE NAME             the value of 'NAME VALUE' in FILE
#   xattr_get FILE NAME            an extended attribute's value
#   xattr_set FILE NAME [VALUE]    setfattr -n NAME -v VALUE (-x without)
#   fscheck ARGS...                tests/helpers/fscheck.py
# As root the script runs in a mount namespace of its own (its mounts are
# not seen from outside it; see below).
# Every mount still there on exit (normal end, failure, INT/TERM, watchdog)
# is unmounted (fusermount3 -u, else -uz) and its daemon killed before the
# temp dir is removed.

set -u

_fs_name=$(basename "$0" .sh)
_fs_skip() {
    echo "SKIP: $_fs_name: $*"
    exit 77
}

[ -c /dev/fuse ] || _fs_skip "/dev/fuse is missing (no FUSE on this machine or in this container)"
command -v fusermount3 >/dev/null 2>&1 || _fs_skip "fusermount3 is not installed (package fuse3)"
command -v mountpoint >/dev/null 2>&1 || _fs_skip "mountpoint (util-linux) is not installed"
grep -qw fuse /proc/filesystems 2>/dev/null || _fs_skip "the kernel has no fuse file system (/proc/filesystems)"

if [ -z "${CKPT_SRCDIR:-}" ]; then
    CKPT_SRCDIR=$(cd "$(dirname "$0")/../.." && pwd)
fi
CKPT_BUILDDIR=${CKPT_BUILDDIR:-$CKPT_SRCDIR}
CKPTFS=${CKPTFS:-$CKPT_BUILDDIR/fs/ckptfs}
[ -x "$CKPTFS" ] || _fs_skip "the daemon is not built: $CKPTFS"

# As root, the script runs in a private mount namespace of its own
# (scripts/private-ns.sh): a namespace another program makes while a mount
# is up copies it, and that copy keeps the daemon serving after
# fusermount3 -u ('hung'); the script's mounts are not in the host's
# namespace, so none can copy them.
if [ "$(id -u)" = 0 ] && [ -z "${CKPT_FS_OWN_NS:-}" ] &&
    unshare --mount --propagation private true 2>/dev/null; then
    export CKPT_FS_OWN_NS=1
    exec /bin/bash "$CKPT_SRCDIR/scripts/private-ns.sh" /bin/bash "$0" "$@"
fi

CKPT_TEST_TIMEOUT=${CKPT_TEST_TIMEOUT:-300}
. "$CKPT_SRCDIR/tests/cli/lib.sh"
need_python

_MNTS=()     # mount points made (an entry is emptied once unmounted)
_MPIDS=()    # their daemons
_NMOUNT=0
MNT_PID=
MNT_LOG=
DAEMON_RC=

# _fs_wait_gone PID SECONDS: 0 when PID has ended within SECONDS.
_fs_wait_gone() {
    local i n=$(($2 * 10))
    for ((i = 0; i < n; i++)); do
        kill -0 "$1" 2>/dev/null || return 0
        sleep 0.1
    done
    ! kill -0 "$1" 2>/dev/null
}

_fs_cleanup() {
    local i m p
    for i in "${!_MNTS[@]}"; do
        m=${_MNTS[$i]}
        p=${_MPIDS[$i]}
        [ -n "$m" ] || continue
        if timeout 5 mountpoint -q "$m" 2>/dev/null; then
            timeout 10 fusermount3 -u "$m" 2>/dev/null ||
                timeout 10 fusermount3 -uz "$m" 2>/dev/null ||
                echo "     cleanup: could not unmount $m" >&2
        fi
        if [ -n "$p" ] && ! _fs_wait_gone "$p" 5; then
            kill -TERM "$p" 2>/dev/null
            _fs_wait_gone "$p" 2 || kill -KILL "$p" 2>/dev/null
        fi
        # the daemon gone, a mount left behind can only be lazily detached
        if timeout 5 mountpoint -q "$m" 2>/dev/null; then
            timeout 10 fusermount3 -uz "$m" 2>/dev/null
        fi
    done
}

# Unmount first, then what tests/cli/lib.sh does on exit; rm never crosses
# into a file system that could not be detached.
trap '_fs_cleanup; kill "$_WATCHDOG" 2>/dev/null; rm -rf --one-file-system "$TMP"' EXIT

fscheck() {
    "$PY" "$HELPERS/fscheck.py" "$@"
}

# mount_ck SRC MNT [OPTS...]
mount_ck() {
    local src=$1 mnt=$2 i
    shift 2
    mkdir -p "$mnt"
    _NMOUNT=$((_NMOUNT + 1))
    MNT_LOG=$TMP/ckptfs.$_NMOUNT.log
    echo "     \$ ckptfs -f ${*:+$* }$src $mnt   (log: $MNT_LOG)"
    "$CKPTFS" -f "$@" "$src" "$mnt" </dev/null >"$MNT_LOG" 2>&1 &
    MNT_PID=$!
    _MNTS+=("$mnt")
    _MPIDS+=("$MNT_PID")
    for ((i = 0; i < 100; i++)); do
        if mountpoint -q "$mnt"; then
            ok "mount $(basename "$src") on $(basename "$mnt") ${*:+($*) }within $((i / 10)).$((i % 10)) s"
            return 0
        fi
        kill -0 "$MNT_PID" 2>/dev/null || break
        sleep 0.1
    done
    if mountpoint -q "$mnt"; then
        ok "mount $(basename "$src") on $(basename "$mnt") ${*:+($*)}"
        return 0
    fi
    if kill -0 "$MNT_PID" 2>/dev/null; then
        bad "mount $src on $mnt: not a mount point after 10 s (daemon still running)"
    else
        wait "$MNT_PID"
        bad "mount $src on $mnt: the daemon exited with status $? without mounting"
    fi
    echo "     daemon log: $(tail -c 800 "$MNT_LOG" | tr '\n' '~')"
    return 1
}

# _fs_index MNT: the index of MNT in _MNTS (last match), or nothing.
_fs_index() {
    local i found=
    for i in "${!_MNTS[@]}"; do
        [ "${_MNTS[$i]}" = "$1" ] && found=$i
    done
    echo "$found"
}

# _fs_holders MNT: "PID (COMMAND)" of a process in each other mount
# namespace that holds a copy of MNT; such a copy keeps the daemon serving
# after fusermount3 -u (docs/MOUNT.md, "Unmounting").  Needs root.
_fs_holders() {
    local q n seen
    seen=" $(readlink /proc/self/ns/mnt) "
    command -v nsenter >/dev/null 2>&1 || return 0
    for q in /proc/[0-9]*; do
        n=$(readlink "$q/ns/mnt" 2>/dev/null) || continue
        case $seen in *" $n "*) continue ;; esac
        seen="$seen$n "
        if nsenter -t "${q#/proc/}" -m cat /proc/self/mountinfo 2>/dev/null | grep -q -F " $1 "; then
            echo "${q#/proc/} ($(tr '\0' ' ' <"$q/cmdline" 2>/dev/null | head -c 100))"
        fi
    done
}

# umount_ck MNT [-z|-n]
umount_ck() {
    local mnt=$1 how=${2:-} i pid
    i=$(_fs_index "$mnt")
    if [ -z "$i" ]; then
        bad "umount $mnt: not mounted by this script"
        DAEMON_RC=none
        return 1
    fi
    pid=${_MPIDS[$i]}
    if [ "$how" = -n ]; then
        :   # already unmounted: only wait for the daemon
    elif [ "$how" = -z ]; then
        timeout 10 fusermount3 -uz "$mnt"
    else
        timeout 10 fusermount3 -u "$mnt" || {
            echo "     fusermount3 -u $mnt failed; trying -uz"
            timeout 10 fusermount3 -uz "$mnt"
        }
    fi
    if _fs_wait_gone "$pid" 15; then
        wait "$pid"
        DAEMON_RC=$?
    else
        DAEMON_RC=hung
        local held
        held=$(_fs_holders "$mnt")
        [ -z "$held" ] || echo "     the daemon still serves copies of $mnt in other mount namespaces, of: $(echo "$held" | tr '\n' ' ')"
        kill -TERM "$pid" 2>/dev/null
        _fs_wait_gone "$pid" 2 || kill -KILL "$pid" 2>/dev/null
        wait "$pid" 2>/dev/null
    fi
    _MNTS[$i]=
    _MPIDS[$i]=
    if mountpoint -q "$mnt" 2>/dev/null; then
        bad "umount $mnt: still a mount point"
        return 1
    fi
    return 0
}

# expect_daemon_clean DESC LOG
expect_daemon_clean() {
    local desc=$1 log=$2
    if [ "$DAEMON_RC" = 0 ]; then
        ok "$desc: the daemon exited with status 0"
    else
        bad "$desc: the daemon's exit status is $DAEMON_RC, want 0"
        echo "     daemon log: $(tail -c 800 "$log" | tr '\n' '~')"
    fi
    if grep -E -q 'AddressSanitizer|LeakSanitizer|runtime error:|Segmentation|SIGSEGV|Aborted|core dumped|double free|stack smashing' "$log"; then
        bad "$desc: the daemon's log shows a crash or sanitizer report"
        grep -E -m 5 'AddressSanitizer|LeakSanitizer|runtime error:|Segmentation|SIGSEGV|Aborted|core dumped|double free|stack smashing' "$log" | sed 's/^/     /'
    else
        ok "$desc: no crash or sanitizer report in the daemon's log"
    fi
}

# refuse_mount DESC ERE SRC [WANT_RC [OPTS...]]  (WANT_RC: 1, or 'nonzero')
refuse_mount() {
    local desc=$1 re=$2 src=$3 want=${4:-1} mnt pid rc i
    shift 3
    [ $# -gt 0 ] && shift
    _NMOUNT=$((_NMOUNT + 1))
    mnt=$TMP/refuse.$_NMOUNT
    mkdir -p "$mnt"
    local log=$TMP/ckptfs.$_NMOUNT.log
    echo "     \$ ckptfs -f ${*:+$* }$src $mnt"
    "$CKPTFS" -f "$@" "$src" "$mnt" </dev/null >"$log" 2>&1 &
    pid=$!
    _MNTS+=("$mnt")
    _MPIDS+=("$pid")
    if _fs_wait_gone "$pid" 10; then
        wait "$pid"
        rc=$?
    else
        rc=running
    fi
    if mountpoint -q "$mnt"; then
        bad "$desc: refused (it mounted it)"
    else
        ok "$desc: nothing mounted"
    fi
    if [ "$rc" = "$want" ] || { [ "$want" = nonzero ] && [[ "$rc" =~ ^[0-9]+$ ]] && [ "$rc" -ne 0 ] && [ "$rc" -lt 124 ]; }; then
        ok "$desc: the daemon exits with status $rc"
    else
        bad "$desc: the daemon's exit status is $rc, want $want"
    fi
    if grep -E -i -q -- "$re" "$log"; then
        ok "$desc: its message says why (~ /$re/): $(head -c 200 "$log" | tr '\n' ' ')"
    else
        bad "$desc: no message matching /$re/; log: $(head -c 400 "$log" | tr '\n' '~')"
    fi
    if [ "$rc" = running ] || mountpoint -q "$mnt"; then
        umount_ck "$mnt" >/dev/null 2>&1
    else
        i=$(_fs_index "$mnt")
        _MNTS[$i]=
        _MPIDS[$i]=
    fi
}

# expect_erofs DESC CMD...
expect_erofs() {
    local desc=$1 rc
    shift
    if declare -F "$1" >/dev/null; then
        "$@" >"$TMP/.erofs.out" 2>"$TMP/.erofs.err" </dev/null   # a function
    else
        timeout 20 "$@" >"$TMP/.erofs.out" 2>"$TMP/.erofs.err" </dev/null
    fi
    rc=$?
    if [ "$rc" -ne 0 ] && grep -q 'Read-only file system' "$TMP/.erofs.err"; then
        ok "$desc fails with EROFS ($(tail -n 1 "$TMP/.erofs.err"))"
    else
        bad "$desc: exit $rc, want a failure saying 'Read-only file system'; stderr: $(head -c 300 "$TMP/.erofs.err" | tr '\n' '~')"
    fi
}

# xattr_get FILE NAME: the attribute's value (getfattr, else Python).
xattr_get() {
    if command -v getfattr >/dev/null 2>&1; then
        getfattr --absolute-names --only-values -n "$2" "$1" 2>/dev/null
    else
        "$PY" -c 'import os, sys; sys.stdout.buffer.write(os.getxattr(sys.argv[1], sys.argv[2]))' "$1" "$2" 2>/dev/null
    fi
}

# xattr_set FILE NAME [VALUE]: setfattr -n NAME -v VALUE (or -x NAME when
# no VALUE), else the same through Python; its stderr says why it failed.
xattr_set() {
    if command -v setfattr >/dev/null 2>&1; then
        if [ $# -ge 3 ]; then setfattr -n "$2" -v "$3" "$1"; else setfattr -x "$2" "$1"; fi
    else
        "$PY" -c '
import os, sys
try:
    if len(sys.argv) > 3:
        os.setxattr(sys.argv[1], sys.argv[2], sys.argv[3].encode())
    else:
        os.removexattr(sys.argv[1], sys.argv[2])
except OSError as e:
    sys.exit("%s: %s" % (sys.argv[1], e.strerror))' "$@"
    fi
}

# stat_val FILE NAME
stat_val() {
    awk -v k="$2" '$1 == k { print $2; found = 1 } END { if (!found) print "none" }' "$1"
}

# py_says DESC ERE: ok when the output a test kept in $TMP/py.out (of a
# Python snippet) has a line matching ERE.
py_says() {
    if grep -E -q -- "$2" "$TMP/py.out"; then ok "$1 ($(tr '\n' ' ' <"$TMP/py.out" | head -c 300))"; else bad "$1: want /$2/, got: $(tr '\n' '~' <"$TMP/py.out" | head -c 600)"; fi
}

# need_nobody: for tests run as root that act as a second user: defines
# NOGROUP and as_nobody CMD... (setpriv as user nobody, no groups), makes
# $TMP reachable, and skips (exit 77) where any of that cannot be.
need_nobody() {
    command -v setpriv >/dev/null 2>&1 || _fs_skip "no setpriv (util-linux)"
    id nobody >/dev/null 2>&1 || _fs_skip "no user nobody"
    [ "$(id -u)" = 0 ] || _fs_skip "needs root (to mount for another user)"
    NOGROUP=$(id -gn nobody)
    chmod 755 "$TMP"
    as_nobody test -x "$TMP" || _fs_skip "user nobody cannot reach $TMP (set TMPDIR)"
}
as_nobody() {
    setpriv --reuid=nobody --regid="$NOGROUP" --clear-groups "$@"
}
