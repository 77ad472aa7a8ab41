#!/bin/bash
# tests/python/run.sh - runs one Python test script (make check's
# PY_LOG_COMPILER) with the build tree's ckptfs package:
#   PYTHONPATH   BUILD/python (the package, _config.py naming BUILD's
#                libckptfs) and tests/python (the tests' helpers)
#   interpreter  $CKPT_PYTHON (configure's PYTHON, /usr/bin/python3 here)
# In a sanitizer build (CKPT_SAN_CFLAGS set by make) libckptfs.so is
# ASan/UBSan-instrumented, and a Python interpreter (not instrumented) can
# only load it with the sanitizer runtimes preloaded: they are, with leak
# detection off (CPython and torch keep memory until exit by design; the
# C tests check leaks).  Exit status: the script's (77 = skipped).
set -u
script=$1
shift
srcdir=${CKPT_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
builddir=${CKPT_BUILDDIR:-$srcdir}
py=${CKPT_PYTHON:-/usr/bin/python3}
if [ -z "$py" ] || [ "$py" = ":" ] || ! "$py" -c 'import numpy' 2>/dev/null; then
    echo "SKIP: no Python with NumPy (configure's PYTHON is '${CKPT_PYTHON:-}')"
    exit 77
fi
export PYTHONPATH="$builddir/python:$srcdir/tests/python${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONDONTWRITEBYTECODE=1
unset CKPTFS_LIBRARY
if [ -n "${CKPT_SAN_CFLAGS:-}" ]; then
    cc=${CKPT_CC:-gcc}
    cc=${cc%% *}
    preload=
    for rt in libasan.so libubsan.so; do
        f=$("$cc" -print-file-name="$rt")
        [ -e "$f" ] && preload="$preload $f"
    done
    export LD_PRELOAD="${preload# }${LD_PRELOAD:+ $LD_PRELOAD}"
    export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
    export CKPT_TEST_SANITIZED=1
fi
exec "$py" "$script" "$@"
