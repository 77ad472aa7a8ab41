#!/bin/bash
# torch2_bench.sh - `make bench`'s torch 2.x part: runs
# tests/bench/torch2_bench.py (DCP's FileSystemWriter with and without the
# ZStandard extension against ckptfs.torch.StorageWriter; torch's load of
# a ZStandard-extension checkpoint against ckptfs reading it) in the Debian
# sid root (torch 2.14; scripts/torch-root.sh), with libckptfs built there
# in build-sid.  Prints a SKIP line (and succeeds) where the root cannot
# be made.  CKPT_BENCH_TORCH2_MB, CKPT_BENCH_REPEAT: see the .py.
set -u
srcdir=${CKPT_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
suite=${CKPT_BENCH_TORCH2_SUITE:-sid}
if ! bash "$srcdir/scripts/torch-root.sh" "$suite" >/dev/null 2>&1; then
    echo "SKIP torch 2.x bench: the $suite root cannot be made (scripts/torch-root.sh needs root, debootstrap and the mirror)"
    exit 0
fi
bash "$srcdir/scripts/in-torch-root.sh" "$suite" --build ||
    { echo "torch2 bench: building build-$suite in the root failed" >&2; exit 1; }
work=$(mktemp -d "${TMPDIR:-/tmp}/ckpt-torch2-bench.XXXXXX")
trap 'rm -rf "$work"' EXIT
bash "$srcdir/scripts/in-torch-root.sh" "$suite" env \
    PYTHONPATH="$srcdir/build-$suite/python" \
    CKPT_BENCH_TORCH2_MB="${CKPT_BENCH_TORCH2_MB:-256}" \
    CKPT_BENCH_REPEAT="${CKPT_BENCH_REPEAT:-3}" \
    python3 "$srcdir/tests/bench/torch2_bench.py" "$work"
