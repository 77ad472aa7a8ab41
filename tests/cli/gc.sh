#!/bin/bash
# gc.sh - `ckpt gc` as an operator uses it (docs/CLI.md, "gc"): the grace
# period of unfinished saves (--min-age, default 1h), what --dry-run says,
# retention (--keep-last, --keep-every: never the newest, never what
# `latest` points to), the debris of interrupted commits and gcs, and bad
# usage.  Live saves (a lease held) are tested by tests/unit/test_gc and
# tests/crash/races.sh, kill_mount.sh.
. "$(dirname "$0")/lib.sh"
need_python

IN=$TMP/in
R=$TMP/root
mkdir -p "$IN" "$R"
"$PY" -c "
import numpy as np, sys
np.save(sys.argv[1] + '/w.npy', np.arange(6000, dtype='<f4').reshape(60, 100))
" "$IN" || exit 99
pack() {   # pack NAME [--meta step=N]
    local n=$1
    shift
    "$CKPT" pack --frame-size 4K "$@" "$R/$n" w="$IN/w.npy" >/dev/null ||
        { echo "ERROR: pack $n" >&2; exit 99; }
}
# an unfinished save written AGO ago (touch -d syntax)
unfinished() {
    mkdir -p "$R/$1/.pending" "$R/$1/data"
    head -c 4000 /dev/urandom >"$R/$1/data/rank0.shard"
    echo plan >"$R/$1/.pending/rank0.plan"
    [ -z "${2:-}" ] || find "$R/$1" -exec touch -h -d "$2" {} +
}
listing() {
    ls -A "$R" | tr '\n' ' '
}

echo "# ---- unfinished saves: the grace period"
for s in 1 2 3 4 5 6; do pack step-$s --meta step=$s; done
unfinished step-0 "2 hours ago"
before=$(cd "$R" && find . -exec stat -c '%n %s %Y' {} + | sort)
run_ckpt gc --dry-run "$R"
expect_out_re '^would remove step-0: unfinished save' "--dry-run would remove an interrupted save"
[ "$(cd "$R" && find . -exec stat -c '%n %s %Y' {} + | sort)" = "$before" ] &&
    ok "--dry-run changes nothing in the root (not even a lease file)" ||
    bad "--dry-run changed the root"
rm -rf "${R:?}/step-0"
unfinished step-7 "2 hours ago"
unfinished step-8
run_ckpt gc "$R"
expect_ok "gc with the default --min-age"
expect_out_re '^removed step-7: unfinished save, no writer holds its lease, idle 2h' "an interrupted save idle for 2 h goes"
expect_out_re '^kept step-8: unfinished save written [0-9]+s ago, less than --min-age 1h00m' "one written just now stays, and gc says why"
check "step-7 is gone" test ! -e "$R/step-7"
check "step-8 is there" test -d "$R/step-8/.pending"
run_ckpt gc --min-age 30m "$R"
expect_out_re '^kept step-8: .*less than --min-age 30m00s' "--min-age 30m keeps it too"
run_ckpt gc --dry-run --min-age 0 "$R"
expect_out_re '^would remove step-8: unfinished save' "--dry-run --min-age 0 would remove it"
check "the dry run removed nothing" test -d "$R/step-8/.pending"
run_ckpt gc --min-age 0 "$R"
expect_out_re '^removed step-8: ' "--min-age 0 removes it"

echo "# ---- what interrupted commits and gcs leave"
mkdir -p "$R/.ckpt-gc.123.0.step-0/data"
head -c 1000 /dev/urandom >"$R/.ckpt-gc.123.0.step-0/data/rank0.shard"
mkdir -p "$R/.ckpt-gc.plans.55.0.step-5/sub"
echo x >"$R/.ckpt-gc.plans.55.0.step-5/rank0.plan"
mkdir -p "$R/.ckpt-new.77.1.step-9/.pending"
find "$R/.ckpt-new.77.1.step-9" -exec touch -h -d "3 hours ago" {} +
mkdir -p "$R/step-6/.pending"
echo x >"$R/step-6/.pending/rank0.plan"
cp "$R/step-6/index.db" "$R/step-6/index.db.tmp"
run_ckpt gc "$R"
expect_ok "gc of the debris"
expect_out_re '^removed \.ckpt-gc\.123\.0\.step-0: what an interrupted gc left' "a half-removed retired directory goes"
expect_out_re '^removed \.ckpt-gc\.plans\.55\.0\.step-5: the plans of a committed save' "a committed save's plans, moved aside and half removed, go"
check "no spent plans left in the root" test -z "$(ls -A "$R" | grep '^\.ckpt-gc\.plans\.')"
expect_out_re '^removed \.ckpt-new\.77\.1\.step-9: ' "a save's directory that never made it into place goes"
expect_out_re '^removed step-6/\.pending and index\.db\.tmp: what its commit left behind' "a committed checkpoint's leftover .pending and index.db.tmp go"
check "step-6 keeps its index, loses .pending and index.db.tmp" \
    test -f "$R/step-6/index.db" -a ! -e "$R/step-6/.pending" -a ! -e "$R/step-6/index.db.tmp"
run_ckpt verify "$R/step-6"
expect_ok "step-6 still verifies"
[ "$(listing)" = "step-1 step-2 step-3 step-4 step-5 step-6 " ] && ok "only the checkpoints are left" || bad "left: $(listing)"

echo "# ---- retention"
pack final                       # no step, no number: older than all
pack step-10                     # no step metadata: its name's number
run_ckpt gc --dry-run --keep-last 2 --keep-every 3 "$R"
expect_ok "dry run of --keep-last 2 --keep-every 3"
expect_out_re '^kept step-10: the newest checkpoint \(latest\)' "step-10 (named 10) is the newest"
expect_out_re '^kept step-6: one of the 2 newest' "step-6 is the second newest"
expect_out_re '^kept step-3: step 3 is a multiple of --keep-every 3' "step-3 is kept as a multiple of 3"
for n in step-1 step-2 step-4 step-5 final; do
    expect_out_re "^would remove $n: committed checkpoint" "$n would go"
done
# The last commit moved its plans aside for the next commit or gc.
expect_out_re '^would remove \.ckpt-gc\.plans\.[0-9]+\.[0-9]+\.step-10: the plans of a committed save' "step-10's plans, moved aside by its commit, would go"
[ "$(listing)" = "$(ls -A "$R" | grep '^\.ckpt-gc\.plans\.[0-9]*\.[0-9]*\.step-10$' | tr '\n' ' ')final step-1 step-10 step-2 step-3 step-4 step-5 step-6 " ] && ok "the dry run removed nothing" || bad "after the dry run: $(listing)"
run_ckpt gc --keep-last 2 --keep-every 3 "$R"
expect_ok "--keep-last 2 --keep-every 3"
expect_out_re '^removed step-1: committed checkpoint \(step 1\), not among the 2 newest nor a multiple of --keep-every' "step-1 goes, and gc says why"
[ "$(listing)" = "step-10 step-3 step-6 " ] && ok "left: step-10 step-3 step-6" || bad "left: $(listing)"
for n in step-10 step-3 step-6; do
    run_ckpt verify "$R/$n"
    expect_ok "$n still verifies"
done
run_ckpt gc --keep-every 5 "$R"
expect_ok "--keep-every alone keeps the newest and the multiples"
[ "$(listing)" = "step-10 " ] && ok "left: step-10 (the newest; 10 is a multiple of 5)" || bad "left: $(listing)"
run_ckpt gc --keep-last 1 "$R"
expect_ok "--keep-last 1 with one checkpoint"
[ "$(listing)" = "step-10 " ] && ok "the newest is never removed" || bad "left: $(listing)"

echo "# ---- bad usage"
for args in "--keep-last 0" "--keep-last x" "--keep-every 0" "--min-age abc" "--min-age 5y" "--min-age -1"; do
    # shellcheck disable=SC2086
    run_ckpt gc $args "$R"
    expect_rc 2 "gc $args is a usage error"
done
unfinished step-11
run_ckpt gc --keep-last 1 "$R/step-11"
expect_rc 1 "--keep-last on a single unfinished save is refused"
expect_err_re 'need a root' "and says why"
summary
