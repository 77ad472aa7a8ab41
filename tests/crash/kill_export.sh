#!/bin/bash
# kill_export.sh - kill -9 at seeded points of `ckpt export` (each format:
# a safetensors file, a sharded safetensors folder, a torch.save archive,
# a DCP folder): nothing may appear under OUT's name, only the hidden
# temporary beside it (.OUT.export-*), and the source stays
# byte-identical.  A later export to the same OUT then succeeds and reads
# back.  (tests/crash/README.md; the shim kills before the K-th file
# system call under OUT's directory.)
. "$(dirname "$0")/tmpdir.sh"
. "$(dirname "$0")/../cli/lib.sh"
. "$CKPT_SRCDIR/tests/crash/lib.sh"

make_baseline 1
SRC=$ROOT/$BASE
FORMATS="file:--format=safetensors:m.safetensors
shards:--max-shard-size=64K:hf
pt:--format=pt:m.pt
dcp:--format=dcp:m.dcp"

while IFS=: read -r name opt out; do
    D=$TMP/x.$name
    case $opt in
    --format=*) args=(export "$opt" "$SRC" "$D/$out") ;;
    *) args=(export --format=safetensors "$opt" "$SRC" "$D/$out") ;;
    esac
    rm -rf "$D"
    mkdir -p "$D"
    count_calls CKPT_SHIM_ROOT="$D" "$CKPT" "${args[@]}"
    N=${CALLS%% *}
    need_calls "$N"
    fails=0
    trials=$((N < TRIALS ? N : TRIALS))
    for ((t = 0; t < trials; t++)); do
        if [ "$N" -le "$TRIALS" ]; then K=$((t + 1)); else next_k "$N"; fi
        rm -rf "$D"
        mkdir -p "$D"
        shimmed CKPT_SHIM_ROOT="$D" CKPT_SHIM_KILL_AT="$K" "$CKPT" "${args[@]}"
        left=$(cd "$D" && ls -A | grep -v "^\.$out\.export-" | tr '\n' ' ')
        if [ "$RC" -ne 137 ] || [ -e "$D/$out" ] || [ -n "$left" ]; then
            fails=$((fails + 1))
            echo "     $name: kill at $K of $N: exit $RC, left: '$left'"
        fi
    done
    [ "$fails" -eq 0 ] && ok "$name: $trials kills of $N points leave nothing named $out" ||
        bad "$name: $fails of $trials kills left something under $out's name"
    run_ckpt "${args[@]}"
    expect_ok "$name: the export then succeeds beside the killed one's temporary"
    if [ "$name" != pt ]; then
        run_ckpt verify "$D/$out"
        expect_ok "$name: ckpt reads the export back whole"
    fi
done <<<"$FORMATS"
[ "$(snapshot "$SRC")" = "$BASE_SUMS" ] && ok "the source is byte-identical" ||
    bad "the source changed"
summary
