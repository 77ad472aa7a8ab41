#!/bin/bash
# run_mpi_tests.sh - the MPI tests of `make check`: runs the MPI test
# programs under mpirun on 1 to 4 ranks (oversubscribed: more ranks than
# cores is fine).
#
#   test_mpi_reshard on 1, 2 and 4 ranks: save on every rank count up to
#       the world size, load on every other, in 5 layouts, every element
#       compared; then on 3 ranks, a load of what the 4-rank run saved
#       (another process count for real).
#   test_mpi_errors on 3 ranks (with a 320 KiB tmpfs for ENOSPC when run as
#       root and mount works) and on 2 ranks.
#   test_mpi_async on 1, 2 and 3 ranks: asynchronous collective saves,
#       buffers scribbled over right after the call, staging cap, queue
#       depth 1, a planner refusal reported by the wait.
#   test_mpi_delta on 2 and 3 ranks: collective saves against a base
#       (sync and async), read back bit-exact, unchanged tensors all
#       references.
#   examples/mpi_save_load, when built: save on 4 ranks, load on 3.
#
# Exits 77 (skipped) without mpirun or without the test programs (built
# only when configure found MPI).  Environment: CKPT_BUILDDIR (the build
# tree, default .), CKPT_MPI_TIMEOUT (seconds per mpirun, default 120).
set -u
builddir=${CKPT_BUILDDIR:-.}
bin=$builddir/tests/mpi
limit=${CKPT_MPI_TIMEOUT:-120}

command -v mpirun >/dev/null || { echo "SKIP: no mpirun"; exit 77; }
[[ -x $bin/test_mpi_reshard && -x $bin/test_mpi_errors ]] ||
    { echo "SKIP: MPI test programs not built (configure found no MPI)"; exit 77; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/ckptfs-mpi.XXXXXX")
mounted=
cleanup() {
    [[ -n $mounted ]] && umount "$mounted" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Open MPI leaks at exit, largely from dlopen'ed components that LSan cannot
# name (so no suppression file can match them): leak checking is off for
# the MPI processes only (the variable is set on mpirun's command line, not
# exported to this script's other commands).  libckptfs's own leaks are
# checked by every other test of the sanitizer build.
mpirun_() {
    local n=$1
    shift
    ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" \
        timeout "$limit" mpirun --allow-run-as-root --oversubscribe -n "$n" "$@"
}

failed=0
step() {   # step NAME N PROGRAM ARGS...: one mpirun, reported
    local name=$1 n=$2 t0=$EPOCHREALTIME rc
    shift 2
    mpirun_ "$n" "$@" >"$tmp/out" 2>&1
    rc=$?
    if (( rc == 0 )); then
        printf 'PASS %-44s (%.1f s)\n' "$name" "$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { print b - a }')"
    else
        printf 'FAIL %-44s (exit %d)\n' "$name" "$rc"
        failed=1
    fi
    grep -E '^(  |balance|test_mpi)' "$tmp/out" | sed 's/^/    /'
    (( rc == 0 )) || sed 's/^/    | /' "$tmp/out" | tail -n 40
}

for n in 1 2 4; do
    mkdir -p "$tmp/reshard-$n"
    step "reshard matrix on $n rank(s)" "$n" "$bin/test_mpi_reshard" "$tmp/reshard-$n"
done
step "load on 3 ranks what 4 ranks saved" 3 "$bin/test_mpi_reshard" "$tmp/reshard-4" --load-only

# ENOSPC needs a small file system: a 320 KiB tmpfs, when we may mount one
# (the 3 ranks' big save, 480 KiB, cannot fit; a small save's 3 plans,
# each with its packed records' table since #26, and its index can).
mkdir -p "$tmp/errors-3" "$tmp/errors-2" "$tmp/small"
small=()
if [[ $(id -u) == 0 ]] && mount -t tmpfs -o size=320k tmpfs "$tmp/small" 2>/dev/null; then
    mounted=$tmp/small
    small=("$tmp/small")
else
    echo "note: cannot mount a tmpfs (needs root): the ENOSPC case is skipped"
fi
step "failures on 3 ranks" 3 "$bin/test_mpi_errors" "$tmp/errors-3" "${small[@]}"
if [[ -n $mounted ]]; then
    umount "$mounted" && mounted=
fi
step "failures on 2 ranks" 2 "$bin/test_mpi_errors" "$tmp/errors-2"

if [[ -x $bin/test_mpi_async ]]; then
    for n in 1 2 3; do
        mkdir -p "$tmp/async-$n"
        step "async save on $n rank(s)" "$n" "$bin/test_mpi_async" "$tmp/async-$n"
    done
fi

if [[ -x $bin/test_mpi_delta ]]; then
    for n in 2 3; do
        mkdir -p "$tmp/delta-$n"
        step "delta saves on $n ranks" "$n" "$bin/test_mpi_delta" "$tmp/delta-$n"
    done
fi

example=$builddir/examples/mpi_save_load
if [[ -x $example ]]; then
    step "example: save on 4 ranks" 4 "$example" save "$tmp/example" 2 64
    step "example: load on 3 ranks" 3 "$example" load "$tmp/example"
else
    echo "note: examples/mpi_save_load not built: not run"
fi
exit "$failed"
