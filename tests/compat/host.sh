#!/bin/bash
# tests/compat/host.sh - make check's run of every compatibility test
# (tests/compat/test_*.py: no arguments, exit 0 pass, 1 fail, 77 skip)
# with the host's Python and torch 1.13, each through tests/python/run.sh
# (the build's package; sanitizer runtimes in a sanitizer build) with
# tests/compat on PYTHONPATH too.  scripts/test-torch2.sh runs the same
# scripts in the torch 2.x roots.  Prints one line per script; exit 1 if
# any failed, 77 if every one skipped, else 0.
set -u
srcdir=${CKPT_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
pass=0 fail=0 skip=0
for t in "$srcdir"/tests/compat/test_*.py; do
    [ -e "$t" ] || continue
    name=compat/$(basename "$t")
    out=$(PYTHONPATH="$srcdir/tests/compat${PYTHONPATH:+:$PYTHONPATH}" \
          bash "$srcdir/tests/python/run.sh" "$t" 2>&1)
    rc=$?
    case $rc in
        0)  pass=$((pass + 1)); echo "PASS: $name" ;;
        77) skip=$((skip + 1)); echo "SKIP: $name: $(grep -m1 '^SKIP' <<<"$out")" ;;
        *)  fail=$((fail + 1)); echo "FAIL: $name (exit $rc)"; echo "$out" | tail -n 60 ;;
    esac
done
echo "compat on the host: $pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ] || exit 1
[ "$pass" -gt 0 ] || exit 77
