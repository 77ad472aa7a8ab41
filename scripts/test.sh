#!/bin/bash
# Sets everything up on a fresh Debian 12 machine and runs every test:
# installs the packages (scripts/setup-deps.sh), builds out of tree and runs
# `make check`.  With --sanitize, the build uses AddressSanitizer and
# UndefinedBehaviorSanitizer (configure --enable-sanitizers).
# Prints a closing line "tests: N passed, N failed, N skipped".
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"

build=build
conf=()
if [ "${1:-}" = "--sanitize" ]; then
    build=build-san
    conf+=(--enable-sanitizers)
fi

bash scripts/setup-deps.sh
[ -x configure ] && [ configure -nt configure.ac ] && [ configure -nt Makefile.am ] \
    || autoreconf -fi
mkdir -p "$build"
cd "$build"
# Each build directory has one configuration, so configure it once.
[ -f Makefile ] || ../configure "${conf[@]}" CFLAGS="-O2 -g"
make -j"$(nproc)"

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
status=0
make -j"$(nproc)" check || status=$?

# One closing line over everything automake ran (Check suites and shell tests).
pass=0 fail=0 skip=0
for log in $(find tests -name '*.log' ! -name 'test-suite.log'); do
    trs=${log%.log}.trs
    [ -f "$trs" ] || continue
    case $(sed -n 's/^:test-result: //p' "$trs" | head -n1) in
        PASS|XFAIL) pass=$((pass + 1)) ;;
        SKIP) skip=$((skip + 1)); echo "skipped: ${log%.log}" ;;
        *) fail=$((fail + 1)); echo "---- $log"; tail -n 40 "$log" ;;
    esac
done
echo "tests: $pass passed, $fail failed, $skip skipped"
[ "$status" -eq 0 ] && [ "$fail" -eq 0 ]
