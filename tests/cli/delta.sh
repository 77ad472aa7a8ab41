#!/bin/bash
# delta.sh - delta checkpoints from the CLI (docs/CLI.md, "pack --base",
# "diff"; docs/FORMAT.md, "Delta checkpoints"): `ckpt pack --base` stores
# references and XOR deltas and reads back bit-exact (ckpt cat against the
# NumPy arrays packed); verify checks the base frames a delta uses; a base
# outside the root, missing or changed is refused; `ckpt diff` agrees with
# NumPy; gc keeps the bases of the checkpoints it keeps.
. "$(dirname "$0")/lib.sh"
need_python

IN=$TMP/in
R=$TMP/root
mkdir -p "$IN" "$R"
"$PY" - "$IN" <<'PY' || exit 99
import numpy as np, sys
d = sys.argv[1]
rng = np.random.default_rng(1)
a0 = rng.standard_normal((256, 1024)).astype('<f4')
b = rng.integers(0, 1000, size=(128, 256), dtype='<i4')
a1 = a0.copy(); a1[::9] += np.float32(1e-3)          # some rows nudged
a2 = a1.copy(); a2[40:60] = rng.standard_normal((20, 1024))
for n, v in (("a0", a0), ("a1", a1), ("a2", a2), ("b", b)):
    np.save("%s/%s.npy" % (d, n), v)
PY
pack() {   # pack NAME [OPTIONS] -- INPUTS
    "$CKPT" pack --frame-size 64K "$@" >/dev/null 2>"$TMP/pack.err"
}
pack "$R/s0" a="$IN/a0.npy" b="$IN/b.npy" || { cat "$TMP/pack.err"; exit 99; }
check "pack --base s0" pack --base "$R/s0" "$R/s1" a="$IN/a1.npy" b="$IN/b.npy"
check "pack --base s1" pack --base "$R/s1" "$R/s2" a="$IN/a2.npy" b="$IN/b.npy"

# bit-exact against the arrays packed
same_npy() {   # same_npy CKPT FQN NPY
    "$CKPT" cat "$1" "$2" >"$TMP/cat.bin" &&
    "$PY" -c "
import numpy as np, sys
a = np.load(sys.argv[2])
sys.exit(0 if open(sys.argv[1], 'rb').read() == a.tobytes() else 1)
" "$TMP/cat.bin" "$3"
}
check "s1 a reads back as packed" same_npy "$R/s1" a "$IN/a1.npy"
check "s2 a reads back as packed" same_npy "$R/s2" a "$IN/a2.npy"
check "s2 b reads back as packed" same_npy "$R/s2" b "$IN/b.npy"
run_ckpt info "$R/s2"
expect_out_re '^  b .* ref ' "b, unchanged, is all references"
expect_out_re 'format_version = 2' "a delta index is format version 2"
size() { du -sb "$1/data" | cut -f1; }
s0=$(size "$R/s0") s1=$(size "$R/s1")
if [ "$s1" -lt $((s0 / 4)) ]; then ok "s1 stores < 1/4 of s0 ($s1 / $s0)"
else bad "s1 stores < 1/4 of s0 ($s1 / $s0)"; fi
run_ckpt verify "$R/s2"
expect_ok "verify s2 (its frames and its bases')"

# a damaged base frame is a fault of the delta that uses it
cp -r "$R" "$TMP/dmg"
"$PY" -c "
import sys
f = open(sys.argv[1], 'r+b'); f.seek(1000); f.write(b'\xff' * 64)
" "$TMP/dmg/s0/data/rank0.shard"
run_ckpt verify "$TMP/dmg/s1"
expect_fail "verify s1 over a damaged base"
expect_out_re "^FAULT tensor=a chunk=0 frame=0 .*base 's0'.*checksum mismatch" "the fault names the base"
rm -r "$TMP/dmg"

# refusals
mkdir -p "$TMP/other"
run_ckpt pack --base "$R/s0" "$TMP/other/x" a="$IN/a1.npy"
expect_fail "a base outside the save's root"
expect_err_re "not in the save's root" "says the base is not in the root"
check "nothing left of the refused save" test ! -e "$TMP/other/x"
run_ckpt pack --base "$R/nope" "$R/s9" a="$IN/a1.npy"
expect_fail "a base that does not exist"
check "nothing left of the refused save" test ! -e "$R/s9"

# diff against NumPy
run_ckpt diff --json "$R/s0" "$R/s2"
expect_ok "diff --json s0 s2"
"$PY" - "$OUT" "$IN" >"$TMP/diff.check" 2>&1 <<'PY'
import json, sys
import numpy as np
d = json.load(open(sys.argv[1]))
a0 = np.load(sys.argv[2] + "/a0.npy"); a2 = np.load(sys.argv[2] + "/a2.npy")
t = {x["fqn"]: x for x in d["tensors"]}
def say(c, what): print(("ok " if c else "FAIL ") + what)
say(t["b"]["status"] == "equal", "b equal")
say(t["b"]["same_layout"] and t["b"]["changed_frames"] == 0, "b by checksums")
x = t["a"]
say(x["status"] == "changed", "a changed")
say(x["changed_elems"] == int((a0 != a2).sum()), "changed elements as NumPy")
diff = np.abs(a2.astype(np.float64) - a0)
say(abs(x["max_abs"] - diff.max()) <= 1e-9 * diff.max(), "max_abs as NumPy")
rel = np.sqrt((diff ** 2).sum() / (a0.astype(np.float64) ** 2).sum())
say(abs(x["rel_l2"] - rel) <= 1e-6 * rel, "rel_l2 as NumPy")
rows = np.flatnonzero((a0 != a2).any(axis=1))
frames = len(set(int(r) // 16 for r in rows))    # 64K frames: 16 rows
say(x["changed_frames"] == frames, "changed frames %d" % frames)
say(d["equal"] == 1 and d["changed"] == 1, "totals")
PY
report "$TMP/diff.check" "diff: "
run_ckpt diff "$R/s2" "$R/s2"
expect_out_re '^2 equal, 0 changed' "a checkpoint equals itself"

# gc keeps what a kept delta needs
run_ckpt gc --dry-run --keep-last 1 "$R"
expect_out_re '^kept s0: a base of s[12]' "dry run: s0 kept as a base"
expect_out_re '^kept s1: a base of s2' "dry run: s1 kept as a base"
run_ckpt gc --keep-last 1 "$R"
check "gc kept s0" test -f "$R/s0/index.db"
check "s2 still reads" same_npy "$R/s2" a "$IN/a2.npy"
pack "$R/s3" a="$IN/a2.npy" b="$IN/b.npy" || exit 99
run_ckpt gc --keep-last 1 "$R"
expect_ok "gc after a full save"
check "then the chain goes" test ! -e "$R/s0" -a ! -e "$R/s1" -a ! -e "$R/s2"

# a base changed since, and a base gone
pack "$R/t0" a="$IN/a0.npy" || exit 99
pack --base "$R/t0" "$R/t1" a="$IN/a1.npy" || exit 99
rm -r "$R/t0"
pack "$R/t0" a="$IN/a0.npy" || exit 99
run_ckpt cat "$R/t1" a
expect_fail "a base changed since is refused"
expect_err_re "'t0' changed since" "names the base that changed"
rm -r "$R/t0"
run_ckpt cat "$R/t1" a
expect_fail "a missing base is refused"
expect_err_re "'t0' is missing" "names the missing base"
summary
