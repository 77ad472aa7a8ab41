#!/bin/bash
# regimes.sh - the load and save part of `make bench` (the core benchmark,
# run.sh, with the mount benchmark it starts, and the Python package's,
# python_bench.py) run twice: on the storage as it is, then with its reads
# (and the writeback of the savers' own syncs) throttled to a storage speed
# by throttle.sh, so that every figure is judged against the limit of both
# regimes: storage-bound (a node's share of a parallel file system) and
# CPU-bound (a fast local NVMe array).  See tests/bench/README.md.
#
# Environment: as run.sh, plus CKPT_BENCH_STORAGE_MBPS (the throttled
# storage speed, MB/s, default 500), CKPT_BENCH_PY (a Python with NumPy
# that runs python_bench.py; unset, empty or ":" skips it) and
# CKPT_BENCH_PY_PATH (its PYTHONPATH: the build's python/ directory).
# Where the throttle cannot be set, the throttled regime is skipped with
# the reason and the unthrottled figures stand alone.
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
mbps=${CKPT_BENCH_STORAGE_MBPS:-500}
py=${CKPT_BENCH_PY:-}

# the benchmarks of one regime (CKPT_BENCH_REGIME names it)
one_regime() {
    bash "$here/run.sh" || return
    if [[ -n $py && $py != : ]]; then
        PYTHONPATH=${CKPT_BENCH_PY_PATH:-} CKPT_BENCH_PYTHON=$py \
            "$py" "$here/python_bench.py" run || return
    else
        echo "SKIP python bench: no Python with NumPy"
    fi
}

if [[ ${1:-} == one ]]; then
    one_regime
    exit
fi
[[ $mbps =~ ^[0-9]+$ && $mbps -ge 1 ]] || { echo "regimes.sh: CKPT_BENCH_STORAGE_MBPS must be a positive integer" >&2; exit 2; }

echo "=== regime 1 of 2: unthrottled (the storage's own speed)"
CKPT_BENCH_REGIME=unthrottled one_regime || exit
echo
echo "=== regime 2 of 2: storage throttled to $mbps MB/s (CKPT_BENCH_STORAGE_MBPS)"
rc=0
CKPT_BENCH_REGIME=throttled \
    CKPT_BENCH_DIR=${CKPT_BENCH_DIR:-$(dirname "${CKPT_BENCH_CORE:-.}")} \
    bash "$here/throttle.sh" "$mbps" bash "$here/regimes.sh" one || rc=$?
if (( rc == 77 )); then
    echo "throttled regime not run (the SKIP line above says why): the figures above are for the unthrottled storage only"
    rc=0
fi
exit "$rc"
