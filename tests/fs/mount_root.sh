#!/bin/bash
# mount_root.sh - ckptfs on a root: a directory of checkpoints
# (docs/MOUNT.md, "SOURCE").
#
# The root holds step-100, step-200, step-300 (--meta step=N, made and
# dated out of order, so neither creation order nor mtime gives the
# answer), zz-nostep (no step: sorts last by name, yet must not win), an
# uncommitted step-400 (greatest step, must not appear), a broken step-350
# (garbage index.db) and unrelated entries.  Checks: the listing, `latest`
# (a symlink to step-300), reads through it and through each checkpoint,
# the skipped ones logged; then, while mounted: step-1000 committed (appears,
# `latest` moves to it: numeric, not lexicographic), step-150 committed
# (appears, `latest` stays), an uncommitted and a broken one added (never
# appear, the mount keeps working).  A second root without any step:
# `latest` is the last committed.  A third: steps from directory names
# (step-000004 without metadata beats step-000002 with step=2), ties on
# the step broken by commit time, metadata over the name.
. "$(dirname "$0")/lib.sh"

IN=$TMP/in
ROOT=$TMP/root
mkdir -p "$IN" "$ROOT"
# Per step S: w (f32 64x300, random from seed S), step.marker (i64 [S]),
# m.n.o (u8 5x7); distinct contents show which checkpoint a path reads.
"$PY" - "$IN" <<'EOF' || exit 99
import sys, numpy as np
d = sys.argv[1]
for s in (100, 150, 200, 300, 400, 1000, 1, 2, 3, 7):
    rng = np.random.default_rng(s)
    np.save("%s/w%d.npy" % (d, s), rng.standard_normal((64, 300)).astype("<f4"))
    np.save("%s/marker%d.npy" % (d, s), np.array([s], dtype="<i8"))
    np.save("%s/o%d.npy" % (d, s), rng.integers(0, 255, (5, 7)).astype("|u1"))
    for k in ("w", "marker", "o"):
        open("%s/%s%d.ref" % (d, k, s), "wb").write(np.load("%s/%s%d.npy" % (d, k, s)).tobytes())
EOF

# mkck DIR KEY [--meta step=N]: a checkpoint of KEY's tensors
mkck() {
    local dir=$1 key=$2
    shift 2
    run_ckpt pack --grid 2 --frame-size 4K "$@" "$dir" \
        "w=$IN/w$key.npy" "step.marker=$IN/marker$key.npy" "m.n.o=$IN/o$key.npy"
    expect_ok "pack $(basename "$dir") $*"
}
# settime DIR DATE: date a checkpoint (its directory, index.db, shards)
settime() {
    find "$1" -exec touch -h -d "$2" {} +
}
# uncommitted DIR KEY STEP: what an interrupted save leaves
uncommitted() {
    mkck "$1" "$2" --meta "step=$3"
    rm -f "$1/index.db"
    mkdir -p "$1/.pending"
    echo rank0 >"$1/.pending/rank0.plan"
}
# broken DIR: an index.db that does not open
broken() {
    mkdir -p "$1/data"
    head -c 8192 /dev/urandom >"$1/index.db"
    head -c 1000 /dev/urandom >"$1/data/rank0.shard"
}

mkck "$ROOT/step-300" 300 --meta step=300
settime "$ROOT/step-300" "2021-01-01 00:00:00"
mkck "$ROOT/step-100" 100 --meta step=100
settime "$ROOT/step-100" "2022-01-01 00:00:00"
mkck "$ROOT/zz-nostep" 7
settime "$ROOT/zz-nostep" "2023-01-01 00:00:00"
mkck "$ROOT/step-200" 200 --meta step=200
uncommitted "$ROOT/step-400" 400 400
broken "$ROOT/step-350"
mkdir -p "$ROOT/notes"
echo "not a checkpoint" >"$ROOT/notes/readme.txt"
echo "hello" >"$ROOT/README"
echo "# root: $(ls "$ROOT" | tr '\n' ' ')"

# latest_is MNT NAME: `latest` is a symlink that resolves to MNT/NAME
latest_is() {
    [ -L "$1/latest" ] && [ "$(basename "$(readlink "$1/latest")")" = "$2" ] &&
        [ "$(readlink -f "$1/latest")" = "$(readlink -f "$1/$2")" ]
}
# wait_for SECONDS CMD...: polls CMD every 0.2 s; 0 once it succeeds
wait_for() {
    local n=$(($1 * 5)) i
    shift
    for ((i = 0; i < n; i++)); do
        "$@" && return 0
        sleep 0.2
    done
    "$@"
}
listing() {
    ls -1 "$1" | LC_ALL=C sort | tr '\n' ' '
}
listing_is() {
    [ "$(listing "$1")" = "$2" ]
}
has_entry() {
    ls -1 "$1" | grep -qx -- "$2"
}
# marker_is FILE N: the i64 tensor file holds [N]
marker_is() {
    [ "$("$PY" -c 'import numpy, sys; print(" ".join(map(str, numpy.fromfile(sys.argv[1], dtype="<i8"))))' "$1" 2>&1)" = "$2" ]
}

MNT=$TMP/mnt
mount_ck "$ROOT" "$MNT" || { summary; }
LOG=$MNT_LOG

want="latest step-100 step-200 step-300 zz-nostep "
if listing_is "$MNT" "$want"; then
    ok "ls: $want(committed ones and latest)"
else
    bad "ls: '$(listing "$MNT")', want '$want'"
fi
for n in step-400 step-350 notes README; do
    if [ -e "$MNT/$n" ] || [ -L "$MNT/$n" ]; then
        bad "$n is not in the mount (uncommitted, broken or unrelated), yet it can be looked up"
    else
        ok "$n cannot be looked up ($(stat "$MNT/$n" 2>&1 | sed 's/.*: //'))"
    fi
done
for n in step-400 step-350; do
    if grep -q -F "$n" "$LOG"; then
        ok "the daemon logs that it left $n out: $(grep -F -m1 "$n" "$LOG" | head -c 200)"
    else
        bad "the daemon's log does not mention the skipped $n"
    fi
done
for n in step-100 step-200 step-300 zz-nostep; do
    t=$(stat -c %F "$MNT/$n" 2>&1)
    if [ "$t" = directory ]; then ok "$n is a directory"; else bad "$n: '$t', want a directory"; fi
done

if latest_is "$MNT" step-300; then
    ok "latest is a symlink to step-300 (greatest step; not zz-nostep, last by name; not step-200, newest by time): -> $(readlink "$MNT/latest")"
else
    bad "latest: $(stat -c %F "$MNT/latest" 2>&1) -> '$(readlink "$MNT/latest")', resolves to '$(readlink -f "$MNT/latest")', want step-300"
fi
if marker_is "$MNT/latest/step/marker" 300 && cmp -s "$MNT/latest/w" "$IN/w300.ref" &&
    cmp -s "$MNT/latest/m/n/o" "$IN/o300.ref"; then
    ok "reads through latest/ give step-300's tensors (step/marker = [300], w, m/n/o)"
else
    bad "reads through latest/: marker '$("$PY" -c 'import numpy,sys; print(numpy.fromfile(sys.argv[1], "<i8"))' "$MNT/latest/step/marker" 2>&1)', w $(cmp "$MNT/latest/w" "$IN/w300.ref" 2>&1 | head -1)"
fi
if [ "$(listing "$MNT/latest")" = "$(listing "$MNT/step-300")" ] && [ "$(listing "$MNT/latest")" = "m step w " ]; then
    ok "ls latest/ = ls step-300/ = m step w"
else
    bad "ls latest/ '$(listing "$MNT/latest")', ls step-300/ '$(listing "$MNT/step-300")', want 'm step w '"
fi
nbad=0
for pair in step-100:100 step-200:200 step-300:300 zz-nostep:7; do
    n=${pair%%:*}
    k=${pair#*:}
    if ! cmp -s "$MNT/$n/w" "$IN/w$k.ref" || ! cmp -s "$MNT/$n/m/n/o" "$IN/o$k.ref" || ! marker_is "$MNT/$n/step/marker" "$k"; then
        bad "$n/: its tensors differ from the references of $n"
        nbad=$((nbad + 1))
    fi
done
[ "$nbad" -eq 0 ] && ok "each checkpoint's tensors (w, step/marker, m/n/o) equal their own references"
v=$(xattr_get "$MNT/latest/step/marker" user.ckpt.fqn)
if [ "$v" = step.marker ]; then ok "getfattr user.ckpt.fqn through latest/: step.marker"; else bad "getfattr user.ckpt.fqn latest/step/marker = '$v'"; fi
if "$PY" -c '
import json, sys
j = json.load(open(sys.argv[1]))
m = j.get("metadata", j.get("meta", {}))
sys.exit(0 if str(m.get("step")) == "200" else 1)' "$MNT/step-200/.ckptfs/metadata.json" 2>/dev/null; then
    ok "step-200/.ckptfs/metadata.json has step 200"
else
    bad "step-200/.ckptfs/metadata.json: no metadata step 200"
fi
if "$PY" -c '
import numpy, sys
a = numpy.load(sys.argv[1])
sys.exit(0 if a.dtype.str == "<i8" and a.tolist() == [100] else 1)' "$MNT/step-100/.npy/step/marker.npy" 2>/dev/null; then
    ok "numpy.load(step-100/.npy/step/marker.npy) = [100]"
else
    bad "numpy.load(step-100/.npy/step/marker.npy) is not int64 [100]"
fi
# ckpt on a path inside the mount: an error that says where the
# checkpoint is on disk, never an empty listing with status 0.
run_ckpt ls "$MNT/latest"
expect_rc 1 "ckpt ls MNT/latest fails"
expect_empty_out "ckpt ls MNT/latest lists nothing"
expect_err_re 'latest: nothing to list: it is inside the ckptfs mount of .*/root on .*/mnt.*try .*/root/step-300$' \
    "ckpt ls MNT/latest names the checkpoint on disk"
run_ckpt ls "$MNT"
expect_rc 1 "ckpt ls MNT fails"
expect_err_re 'nothing to list: it is inside the ckptfs mount of .*/root on .*ckpt reads checkpoints on disk, in .*/root$' \
    "ckpt ls MNT names the root on disk"
run_ckpt info "$MNT/latest"
expect_rc 1 "ckpt info MNT/latest fails"
expect_err_re 'is not a checkpoint: .*; it is inside the ckptfs mount of .*try .*/root/step-300$' \
    "ckpt info MNT/latest names the checkpoint on disk"
expect_erofs "rm latest" rm -f "$MNT/latest"
expect_erofs "mkdir step-500" mkdir "$MNT/step-500"

# ------------------------------------------------ commits after mounting
echo "# ---- committed after mounting"
mkck "$ROOT/step-1000" 1000 --meta step=1000
if wait_for 5 has_entry "$MNT" step-1000; then
    ok "step-1000, committed after mounting, appears in ls within 5 s"
else
    bad "step-1000 committed after mounting: not in ls after 5 s ('$(listing "$MNT")')"
fi
if wait_for 5 latest_is "$MNT" step-1000; then
    ok "latest moves to step-1000 (step 1000 > 300 numerically, though '1000' < '300' as text)"
else
    bad "latest -> '$(readlink "$MNT/latest")' 5 s after committing step-1000, want step-1000"
fi
if wait_for 3 marker_is "$MNT/latest/step/marker" 1000 && cmp -s "$MNT/latest/w" "$IN/w1000.ref"; then
    ok "reads through latest/ now give step-1000's tensors"
else
    bad "reads through latest/ after step-1000: not step-1000's tensors"
fi

mkck "$ROOT/step-150" 150 --meta step=150
if wait_for 5 has_entry "$MNT" step-150; then
    ok "step-150, committed after mounting, appears in ls"
else
    bad "step-150 committed after mounting: not in ls after 5 s"
fi
if cmp -s "$MNT/step-150/w" "$IN/w150.ref" && latest_is "$MNT" step-1000; then
    ok "step-150 reads correctly; latest stays step-1000 (150 < 1000)"
else
    bad "step-150/w or latest wrong after step-150: latest -> '$(readlink "$MNT/latest")'"
fi

uncommitted "$ROOT/step-5000" 1 5000
broken "$ROOT/step-9000"
mkck "$ROOT/aaa-marker" 2 --meta step=3   # committed after those two: the rescan saw them
wait_for 5 has_entry "$MNT" aaa-marker ||
    bad "aaa-marker committed after mounting: not in ls after 5 s"
sleep 1.2
ls "$MNT" >/dev/null
want="aaa-marker latest step-100 step-1000 step-150 step-200 step-300 zz-nostep "
if listing_is "$MNT" "$want"; then
    ok "ls: the uncommitted step-5000 and broken step-9000 added after mounting stay out: $want"
else
    bad "ls after adding uncommitted step-5000 and broken step-9000: '$(listing "$MNT")', want '$want'"
fi
if latest_is "$MNT" step-1000 && cmp -s "$MNT/latest/w" "$IN/w1000.ref" && cmp -s "$MNT/step-200/w" "$IN/w200.ref"; then
    ok "with a broken checkpoint in the root, latest is still step-1000 and reads work"
else
    bad "after the broken step-9000: latest -> '$(readlink "$MNT/latest")', or reads fail"
fi
if mountpoint -q "$MNT"; then ok "still mounted"; else bad "the mount is gone"; fi

umount_ck "$MNT"
expect_daemon_clean "root mount" "$LOG"

# --------------------------------------------------- a root without steps
echo "# ---- a root whose checkpoints have no step, in metadata or name"
ROOT2=$TMP/root2
mkck "$ROOT2/c-ck" 1
settime "$ROOT2/c-ck" "2021-01-01 00:00:00"
mkck "$ROOT2/b-ck" 3
settime "$ROOT2/b-ck" "2022-01-01 00:00:00"
mkck "$ROOT2/a-ck" 2
MNT2=$TMP/mnt2
if mount_ck "$ROOT2" "$MNT2"; then
    LOG2=$MNT_LOG
    if listing_is "$MNT2" "a-ck b-ck c-ck latest "; then ok "ls: a-ck b-ck c-ck latest"; else bad "ls: '$(listing "$MNT2")', want 'a-ck b-ck c-ck latest '"; fi
    if latest_is "$MNT2" a-ck && cmp -s "$MNT2/latest/w" "$IN/w2.ref"; then
        ok "without steps, latest is the last committed: a-ck (though first by name)"
    else
        bad "without steps: latest -> '$(readlink "$MNT2/latest")', want a-ck (committed last)"
    fi
    mkck "$ROOT2/0-first" 7 --meta step=1
    settime "$ROOT2/0-first" "2020-01-01 00:00:00"
    if wait_for 5 latest_is "$MNT2" 0-first; then
        ok "a checkpoint with a step (0-first, step 1, oldest) wins over those without: latest -> 0-first"
    else
        bad "after committing 0-first with step=1: latest -> '$(readlink "$MNT2/latest")', want 0-first"
    fi
    umount_ck "$MNT2"
    expect_daemon_clean "root without steps" "$LOG2"
fi

# ------------------------------------------- steps from directory names
echo "# ---- steps from directory names (docs/MOUNT.md, \`latest\`)"
ROOT3=$TMP/root3
mkck "$ROOT3/step-000004" 2                   # no step metadata, older
settime "$ROOT3/step-000004" "2021-01-01 00:00:00"
mkck "$ROOT3/step-000002" 1 --meta step=2     # step=2, committed later
MNT3=$TMP/mnt3
if mount_ck "$ROOT3" "$MNT3"; then
    LOG3=$MNT_LOG
    if latest_is "$MNT3" step-000004 && cmp -s "$MNT3/latest/w" "$IN/w2.ref"; then
        ok "step-000004 without step metadata is step 4: latest -> step-000004 over step-000002 (step=2, newer)"
    else
        bad "latest -> '$(readlink "$MNT3/latest")', want step-000004 (its name's number 4 > step 2)"
    fi
    # A tie: run-b says step=4 in metadata and is committed after
    # step-000004: the later commit wins.
    mkck "$ROOT3/run-b" 3 --meta step=4
    if wait_for 5 latest_is "$MNT3" run-b; then
        ok "tie on step 4 (run-b's metadata, step-000004's name): the later commit, run-b"
    else
        bad "tie on step 4: latest -> '$(readlink "$MNT3/latest")', want run-b (committed later)"
    fi
    # Metadata wins over the name: step-000009 with step=3 is step 3.
    mkck "$ROOT3/step-000009" 7 --meta step=3
    wait_for 5 has_entry "$MNT3" step-000009 ||
        bad "step-000009 committed after mounting: not in ls after 5 s"
    sleep 1.2
    ls "$MNT3" >/dev/null
    if latest_is "$MNT3" run-b; then
        ok "step-000009 with step=3 metadata is step 3: latest stays run-b"
    else
        bad "after step-000009 (step=3): latest -> '$(readlink "$MNT3/latest")', want run-b"
    fi
    # Numeric: step-000010 (no metadata) is step 10 > 4.
    mkck "$ROOT3/step-000010" 150
    if wait_for 5 latest_is "$MNT3" step-000010 && cmp -s "$MNT3/latest/w" "$IN/w150.ref"; then
        ok "step-000010 without metadata: latest -> step-000010 (10 > 4)"
    else
        bad "after step-000010: latest -> '$(readlink "$MNT3/latest")', want step-000010"
    fi
    umount_ck "$MNT3"
    expect_daemon_clean "steps from names" "$LOG3"
fi

summary
