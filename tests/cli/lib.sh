# tests/cli/lib.sh - shared helpers of the ckpt CLI tests.  Sourced (not run)
# by tests/cli/*.sh, under /bin/bash.
#
# Environment (set by `make check`; sensible defaults for running by hand):
#   CKPT           the ckpt binary under test
#   CKPT_SRCDIR    the source root (tests/helpers lives there)
#   CKPT_BUILDDIR  the build root
# Exit status of a test script: 0 pass, 77 skip, 99 hard error, 1 failures.
#
# After sourcing: $TMP is a fresh temp dir removed on exit, $PY is the
# Python with NumPy, $HELPERS the helper dir.  Use
#   ok / bad DESC                  count a passed / failed check
#   check DESC CMD...              passes when CMD exits 0
#   run_ckpt ARGS...               runs $CKPT; sets $RC, $OUT and $ERR (files)
#   expect_rc N DESC               after run_ckpt: exit status is N
#   expect_fail DESC               after run_ckpt: exit status is non-zero
#   expect_err_re ERE DESC         after run_ckpt: stderr matches ERE (grep -E -i)
#   expect_out_re ERE DESC         after run_ckpt: stdout matches ERE
#   expect_err_prefix DESC         after run_ckpt: a 'ckpt: ' line on stderr
#   same_bytes DESC EXP ACT        files EXP and ACT are identical
#   report FILE [PREFIX]           counts 'ok ...'/'FAIL ...' lines of a checker
#   summary                        prints 'NAME: P passed, F failed'; exits

set -u
set -o pipefail

T_NAME=$(basename "$0" .sh)
PY=/usr/bin/python3

if [ -z "${CKPT_SRCDIR:-}" ]; then
    CKPT_SRCDIR=$(cd "$(dirname "$0")/../.." && pwd)
fi
CKPT_BUILDDIR=${CKPT_BUILDDIR:-$CKPT_SRCDIR}
CKPT=${CKPT:-$CKPT_BUILDDIR/tools/ckpt}
HELPERS=$CKPT_SRCDIR/tests/helpers

if [ ! -x "$CKPT" ]; then
    echo "ERROR: ckpt binary not found or not executable: $CKPT" >&2
    exit 99
fi

TMP=$(mktemp -d "${TMPDIR:-/tmp}/ckpt-$T_NAME.XXXXXX") || {
    echo "ERROR: mktemp -d failed" >&2
    exit 99
}
# A watchdog bounds the whole script (make check has no timeout of its own):
# after CKPT_TEST_TIMEOUT seconds it terminates the script's children (a hung
# ckpt) and the script, which then exits 99.  Single ckpt runs through
# run_ckpt have their own, shorter limit (CKPT_TIMEOUT).
CKPT_TEST_TIMEOUT=${CKPT_TEST_TIMEOUT:-600}
_SELF=$$
(
    # polls, so that it ends by itself within a second of the script
    for ((_i = 0; _i < CKPT_TEST_TIMEOUT; _i++)); do
        sleep 1
        kill -0 "$_SELF" 2>/dev/null || exit 0
    done
    _me=$BASHPID
    kill -TERM $(pgrep -P "$_SELF" 2>/dev/null | grep -v "^$_me\$") "$_SELF" 2>/dev/null
) </dev/null >/dev/null 2>&1 &
_WATCHDOG=$!
trap 'kill "$_WATCHDOG" 2>/dev/null; rm -rf "$TMP"' EXIT
trap 'echo "ERROR: $T_NAME: terminated (interrupted, or over CKPT_TEST_TIMEOUT=${CKPT_TEST_TIMEOUT}s)" >&2; exit 99' INT TERM HUP

N_PASS=0
N_FAIL=0

ok() {
    N_PASS=$((N_PASS + 1))
    echo "ok   - $*"
}

bad() {
    N_FAIL=$((N_FAIL + 1))
    echo "FAIL - $*"
}

# check DESC CMD...: passes when CMD exits 0 (its output goes to the log).
check() {
    local desc=$1
    shift
    if "$@"; then ok "$desc"; else bad "$desc (command: $*)"; fi
}

# Limits each ckpt run so that a hang fails the test instead of blocking.
CKPT_TIMEOUT=${CKPT_TIMEOUT:-60}
if command -v timeout >/dev/null 2>&1; then
    _TO=(timeout "$CKPT_TIMEOUT")
else
    _TO=()
fi

OUT=$TMP/.out
ERR=$TMP/.err
RC=0
LAST_CMD=

# run_ckpt ARGS...: stdout to $OUT, stderr to $ERR, status in $RC.
run_ckpt() {
    LAST_CMD="ckpt $*"
    "${_TO[@]}" "$CKPT" "$@" >"$OUT" 2>"$ERR" </dev/null
    RC=$?
    if [ "$RC" -ge 124 ] && [ "$RC" -ne 126 ] && [ "$RC" -ne 127 ]; then
        echo "     ($LAST_CMD: exit $RC; timed out or crashed)"
    fi
    return 0
}

_show() {
    echo "     command: $LAST_CMD"
    echo "     exit: $RC"
    echo "     stderr: $(head -c 600 "$ERR" | tr '\n' '~')"
    echo "     stdout: $(head -c 300 "$OUT" | tr '\n' '~' | LC_ALL=C tr -c '[:print:]~' '?')"
}

expect_rc() {
    local want=$1
    shift
    if [ "$RC" -eq "$want" ]; then ok "$* (exit $want)"; else bad "$* (exit $RC, want $want)"; _show; fi
}

expect_ok() { expect_rc 0 "$@"; }

# A failure: non-zero, but neither a crash (signal) nor a timeout.
expect_fail() {
    if [ "$RC" -ne 0 ] && [ "$RC" -lt 124 ]; then
        ok "$* (exit $RC)"
    else
        bad "$* (exit $RC, want a non-zero failure status)"
        _show
    fi
}

expect_err_re() {
    local re=$1
    shift
    if grep -E -i -q -- "$re" "$ERR"; then ok "$* (stderr ~ /$re/)"; else bad "$* (stderr does not match /$re/)"; _show; fi
}

expect_out_re() {
    local re=$1
    shift
    if grep -E -q -- "$re" "$OUT"; then ok "$* (stdout ~ /$re/)"; else bad "$* (stdout does not match /$re/)"; _show; fi
}

# Every error message starts with 'ckpt: ' (docs/CLI.md).
expect_err_prefix() {
    if grep -q '^ckpt: ' "$ERR"; then ok "$* (stderr has 'ckpt: ' prefix)"; else bad "$* (no 'ckpt: ' line on stderr)"; _show; fi
}

expect_empty_out() {
    if [ ! -s "$OUT" ]; then ok "$* (no stdout)"; else bad "$* (unexpected stdout)"; _show; fi
}

# same_bytes DESC EXPECTED_FILE ACTUAL_FILE
same_bytes() {
    local desc=$1 exp=$2 act=$3
    if cmp -s -- "$exp" "$act"; then
        ok "$desc"
    else
        bad "$desc: $(cmp -- "$exp" "$act" 2>&1 | head -1) (sizes $(stat -c %s "$exp") vs $(stat -c %s "$act"))"
    fi
}

# report FILE [PREFIX]: counts the 'ok WHAT' / 'FAIL WHAT' lines a Python
# checker printed; other lines are shown as they are.
report() {
    local word rest
    while IFS= read -r line; do
        word=${line%% *}
        rest=${line#* }
        case $word in
            ok) ok "${2:-}$rest" ;;
            FAIL) bad "${2:-}$rest" ;;
            *) echo "     $line" ;;
        esac
    done <"$1"
}

need_python() {
    if ! "$PY" -c 'import numpy' >/dev/null 2>&1; then
        echo "SKIP: $PY with NumPy is needed for the reference"
        exit 77
    fi
}

# gen_data DIR [gen_npy.py options]: the generated tensors + manifest.
gen_data() {
    local dir=$1
    shift
    "$PY" "$HELPERS/gen_npy.py" "$dir" "$@" >/dev/null || {
        echo "ERROR: gen_npy.py failed" >&2
        exit 99
    }
}

# pack_args MANIFEST_LST: prints the NAME=FILE arguments, one per line.
pack_args() {
    cut -d'|' -f7 "$1"
}

# flip_byte FILE OFFSET: inverts every bit of the byte at OFFSET in place.
flip_byte() {
    "$PY" - "$1" "$2" <<'EOF'
import sys
path, off = sys.argv[1], int(sys.argv[2])
with open(path, "r+b") as f:
    f.seek(off)
    b = f.read(1)
    if len(b) != 1:
        sys.exit("flip_byte: offset %d beyond the end of %s" % (off, path))
    f.seek(off)
    f.write(bytes([b[0] ^ 0xFF]))
EOF
}

summary() {
    echo "$T_NAME: $N_PASS passed, $N_FAIL failed"
    if [ "$N_FAIL" -ne 0 ]; then exit 1; fi
    if [ "$N_PASS" -eq 0 ]; then exit 99; fi
    exit 0
}
