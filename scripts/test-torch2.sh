#!/bin/bash
# Runs the Python tests against a newer PyTorch: builds libckptfs (without
# FUSE and MPI) in build-SUITE inside the torch 2.x root of SUITE
# (scripts/torch-root.sh makes it once) and runs there, one at a time,
#   tests/python/test_*.py   the package's tests (torch 1.13 on the host)
#   tests/compat/test_*.py   the compatibility tests (no arguments; exit
#                            0 pass, 1 fail, 77 skip)
# each with PYTHONPATH=BUILD/python:tests/python:tests/compat:
#   scripts/test-torch2.sh sid        # torch 2.14, numpy 2.4, Python 3.14
#   scripts/test-torch2.sh trixie     # torch 2.6
# Prints one line per test and a closing line "tests: N passed, N failed,
# N skipped"; exits 1 if any test failed, 77 if the root cannot be made.
# A failed test's log (build-SUITE/torch2-logs/NAME.log) is printed.
# CKPT_TORCH2_TESTS="tests/compat/test_x.py ..." runs only those.
set -uo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
suite=${1:?usage: test-torch2.sh SUITE}

if [ "${2:-}" != "--inside" ]; then
    cd "$top"
    if ! bash scripts/torch-root.sh "$suite" >/dev/null; then
        echo "SKIP: the torch root of '$suite' cannot be made" \
             "(scripts/torch-root.sh needs root, debootstrap and the mirror)"
        exit 77
    fi
    bash scripts/in-torch-root.sh "$suite" --build || {
        echo "FAIL: building build-$suite in the $suite root" \
             "(see build-$suite/configure.out, make.out)"
        exit 1
    }
    exec bash scripts/in-torch-root.sh "$suite" \
        env CKPT_TORCH2_TESTS="${CKPT_TORCH2_TESTS:-}" \
        bash scripts/test-torch2.sh "$suite" --inside
fi

# ---- inside the root, in $top
build=$top/build-$suite
logs=$build/torch2-logs
mkdir -p "$logs"
py=/usr/bin/python3
export CKPT_SRCDIR=$top CKPT_BUILDDIR=$build CKPT_PYTHON=$py \
    CKPT=$build/tools/ckpt CKPTFS=$build/fs/ckptfs \
    PYTHONPATH=$build/python:$top/tests/python:$top/tests/compat \
    PYTHONDONTWRITEBYTECODE=1
unset CKPTFS_LIBRARY
echo "torch2 $suite: $("$py" -c 'import sys, numpy, torch
print("Python %d.%d, numpy %s, torch %s" % (sys.version_info[:2]
      + (numpy.__version__, torch.__version__)))' 2>&1 | tail -n1)"

tests=${CKPT_TORCH2_TESTS:-$(ls tests/python/test_*.py tests/compat/test_*.py 2>/dev/null)}
pass=0 fail=0 skip=0
for t in $tests; do
    name=${t#tests/}
    log=$logs/${name//\//_}.log
    start=$SECONDS
    timeout 900 "$py" "$t" >"$log" 2>&1
    rc=$?
    took=$((SECONDS - start))
    case $rc in
        0)  pass=$((pass + 1)); echo "PASS: $name (${took}s)" ;;
        77) skip=$((skip + 1))
            echo "SKIP: $name ($(grep -m1 '^SKIP' "$log" | cut -c7-))" ;;
        *)  fail=$((fail + 1)); echo "FAIL: $name (exit $rc, ${took}s)"
            tail -n 40 "$log" | sed 's/^/    /' ;;
    esac
done
echo "tests: $pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ]
