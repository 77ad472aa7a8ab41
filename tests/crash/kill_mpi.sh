#!/bin/bash
# kill_mpi.sh - kill -9 at seeded random points of a collective save
# (ckpt_mpi_save on 2 ranks, tests/crash/crash_mpi): TRIALS trials with
# one rank killed (rank 0 and rank 1 in turn; mpirun then ends the other)
# and TRIALS trials with every rank killed, each at its own point.  Checks
# as kill_lib.sh (tests/crash/README.md); the step is saved again by the
# same collective save every 5th trial, by two library writers (the same
# state, faster than an mpirun) otherwise.
. "$(dirname "$0")/tmpdir.sh"
. "$(dirname "$0")/../cli/lib.sh"
. "$CKPT_SRCDIR/tests/crash/lib.sh"

command -v mpirun >/dev/null || { echo "SKIP: no mpirun"; exit 77; }
[ -x "$CKMPI" ] || { echo "SKIP: $CKMPI not built (no MPI)"; exit 77; }

make_baseline 1
T=$ROOT/step-2
# mpirun ends the job at once when a rank dies (not a second later).
mpi() {
    timeout 120 mpirun --allow-run-as-root --oversubscribe \
        --mca odls_base_sigkill_timeout 0 -n 2 "$@" "$CKMPI" "$T" 2
}
# mpi_shim KILL_AT...: the collective save with the shim in both ranks.
mpi_shim() {
    ( mpi -x LD_PRELOAD="$PRELOAD" -x CKPT_SHIM_ROOT="$T" "$@"; exit $? ) \
        >"$SHIM_OUT" 2>&1
    RC=$?
}
COUNTS=$TMP/counts
mpi_shim -x CKPT_SHIM_COUNT="$COUNTS"
N0=$(awk '$2 == 0 { print $1 }' "$COUNTS")
N1=$(awk '$2 == 1 { print $1 }' "$COUNTS")
need_calls "$N0" "$N1"
rm -rf "$T"
NRESAVE=0
resave() {
    if [ $((NRESAVE++ % 5)) = 0 ]; then mpi; else "$DRIVER" lib "$T" 2 2; fi
}
# A rank killed makes mpirun end the job with a failure of its own.
OTHER_RC="1 9 15 143"

# One rank killed: rank 0 (which also commits) and rank 1 in turn, each
# at a point among its own calls.
ONE=0
kill_save() {
    if [ $((ONE++ % 2)) = 0 ]; then
        next_k "$N0"
        mpi_shim -x CKPT_SHIM_KILL_AT="$K,0"
        K="$K (rank 0)"
    else
        next_k "$N1"
        mpi_shim -x CKPT_SHIM_KILL_AT="0,$K"
        K="$K (rank 1)"
    fi
}
run_kill_matrix "MPI save, one rank killed" "$T" 2 "$N0 or $N1"

kill_save() {
    local k0
    next_k "$N0"
    k0=$K
    next_k "$N1"
    mpi_shim -x CKPT_SHIM_KILL_AT="$k0,$K"
    K="$k0 and $K"
}
run_kill_matrix "MPI save, every rank killed" "$T" 2 "$N0 and $N1"
summary
