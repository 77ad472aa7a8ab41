#!/bin/bash
# The MPI example: 3 ranks save a checkpoint with one writer each (uneven
# dim-0 slices, replicated biases); the result verifies, holds one copy of
# each replicated bias, and every element equals the formula the ranks used
# (checked with NumPy).  A second save into the same, committed directory
# is refused and leaves it intact.
set -u
. "$CKPT_SRCDIR/tests/cli/lib.sh"
need_python
example=$CKPT_BUILDDIR/examples/mpi_ranks_save
[ -x "$example" ] || { echo "mpi example not built (no MPI)"; exit 77; }
command -v mpirun >/dev/null || { echo "no mpirun"; exit 77; }

# Open MPI leaks at exit, largely from dlopen'ed components that LSan cannot
# name (so no suppression file can match them): leak checking is off for
# the MPI processes only.  libckptfs's own leaks are checked by every other
# test of the sanitizer build.
mpirun_() {
    ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" \
        mpirun --allow-run-as-root --oversubscribe "$@"
}
ck=$TMP/step-1
mpirun_ -n 3 "$example" "$ck" 100 30 2 >"$TMP/out" 2>&1
check "3 ranks save and commit" test $? -eq 0
check "index.db exists" test -f "$ck/index.db"
"$CKPT" verify "$ck" >"$TMP/verify" 2>&1
check "verify passes" test $? -eq 0
for l in 0 1; do
    "$CKPT" cat "$ck" "model.layers.$l.weight" >"$TMP/w$l.bin"
    "$CKPT" cat "$ck" "model.layers.$l.bias" >"$TMP/b$l.bin"
    /usr/bin/python3 - "$TMP/w$l.bin" "$TMP/b$l.bin" "$l" <<'PY'
import sys, numpy as np
l = np.float32(int(sys.argv[3]))
w = np.fromfile(sys.argv[1], dtype='<f4').reshape(100, 30)
i = np.arange(100, dtype=np.float32)[:, None]
j = np.arange(30, dtype=np.float32)[None, :]
assert np.array_equal(w, (l + i * np.float32(0.001) + j * np.float32(0.000001)).astype(np.float32))
b = np.fromfile(sys.argv[2], dtype='<f4')
assert np.array_equal(b, (l * np.float32(0.5) + np.arange(30, dtype=np.float32)))
PY
    check "layer $l values equal the reference" test $? -eq 0
done
chunks=$(/usr/bin/python3 -c "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); print(c.execute(\"select nchunks from tensors where fqn='model.layers.0.bias'\").fetchone()[0])" "$ck/index.db")
check "replicated bias stored once (nchunks=$chunks)" test "$chunks" = 1
chunks=$(/usr/bin/python3 -c "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); print(c.execute(\"select nchunks from tensors where fqn='model.layers.0.weight'\").fetchone()[0])" "$ck/index.db")
check "weight has one chunk per rank (nchunks=$chunks)" test "$chunks" = 3
mpirun_ -n 2 "$example" "$ck" 100 30 2 >"$TMP/out2" 2>&1
check "saving into a committed checkpoint fails" test $? -ne 0
check "... saying it is committed" grep -q "already a committed" "$TMP/out2"
"$CKPT" verify "$ck" >/dev/null 2>&1
check "... and the checkpoint still verifies" test $? -eq 0
summary
