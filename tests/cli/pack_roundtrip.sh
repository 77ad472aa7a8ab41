#!/bin/bash
# pack_roundtrip.sh - `ckpt pack` then cat / cat --slice / unpack / verify,
# compared against NumPy, over writer grids, codecs and frame sizes.
#
# Every grid {1, 2, 2x3, 3x1x2, 4} is packed with at least two codecs, and
# every frame size {4096, 4K, 5003 (not a multiple of 8: frames are cut on
# element boundaries below it), 64K, 65536, 1M, default} at least once; the
# full cartesian product would be too slow for `make check`.
#
# The data set (tests/helpers/gen_npy.py) has every NumPy dtype, bf16 and
# fp8 raw files, a byte object, a 0-d scalar, empty tensors, Fortran-order
# arrays and 1-D..4-D odd shapes.  References come from NumPy
# (tests/helpers/ref.py), never from ckpt itself.
. "$(dirname "$0")/lib.sh"
need_python

DATA=$TMP/data
gen_data "$DATA"
MAN=$DATA/manifest.lst
"$PY" "$HELPERS/ref.py" refbytes "$DATA/manifest.json" "$TMP/ref" || exit 99
mapfile -t PACKARGS < <(pack_args "$MAN")
NT=$(wc -l <"$MAN")
echo "# data set: $NT tensors, $(du -sh "$DATA" | cut -f1)"

# grid | codec ('' = default zstd:1) | frame size ('' = default 1M) | threads
CONFIGS=(
    "1|raw|1M|1"
    "1|zstd:9|4096|2"
    "2|zstd|65536|2"
    "2|raw|5003|2"
    "2x3|zstd|4K|2"
    "2x3|raw|64K|3"
    "3x1x2|zstd:9|1M|2"
    "3x1x2|raw|4096|2"
    "4||64K|2"
    "4|zstd:3||2"
)

# The CLI's tensor argument of ref.py for a manifest line.
ref_arg() {   # kind file dtype shape
    if [ "$1" = raw ]; then echo "$2:$3:$4"; else echo "$2"; fi
}

ci=0
for cfg in "${CONFIGS[@]}"; do
    ci=$((ci + 1))
    IFS='|' read -r grid codec fsize threads <<<"$cfg"
    tag="[grid=$grid codec=${codec:-default} frame=${fsize:-default}]"
    echo "# ---- config $ci: $tag"
    ck=$TMP/ck$ci
    opts=(--grid "$grid" --threads "$threads" --meta "step=$ci")
    [ -n "$codec" ] && opts+=(--codec "$codec")
    [ -n "$fsize" ] && opts+=(--frame-size "$fsize")

    run_ckpt pack "${opts[@]}" "$ck" "${PACKARGS[@]}"
    expect_ok "$tag pack"
    if [ "$RC" -ne 0 ]; then
        continue
    fi
    if [ -f "$ck/index.db" ] && [ ! -e "$ck/.pending" ]; then
        ok "$tag committed: index.db present, .pending/ gone"
    else
        bad "$tag committed: index.db present, .pending/ gone"
    fi
    # One shard per grid cell: every grid here has a tensor cut in all cells.
    ncells=$(( ${grid//x/*} ))
    want=$(for ((r = 0; r < ncells; r++)); do echo "rank$r.shard"; done | sort)
    have=$(ls "$ck/data" 2>/dev/null | sort)
    if [ "$want" = "$have" ]; then
        ok "$tag shard files rank0..rank$((ncells - 1)).shard"
    else
        bad "$tag shard files: want [$(echo $want)], have [$(echo $have)]"
    fi

    run_ckpt verify "$ck"
    expect_ok "$tag verify"
    expect_out_re "^ok: $NT tensors, [0-9]+ frames, [0-9]+ bytes verified" "$tag verify summary"

    # Whole tensors.
    nbad=0
    while IFS='|' read -r fqn kind dtype shape nbytes file packarg; do
        run_ckpt cat "$ck" "$fqn"
        if [ "$RC" -ne 0 ]; then
            bad "$tag cat $fqn exits 0"; _show; nbad=$((nbad + 1)); continue
        fi
        if cmp -s "$TMP/ref/$fqn.ref" "$OUT"; then
            ok "$tag cat $fqn ($dtype [$shape], $nbytes bytes)"
        else
            bad "$tag cat $fqn ($dtype [$shape]): $(cmp "$TMP/ref/$fqn.ref" "$OUT" 2>&1 | head -1), got $(stat -c %s "$OUT") bytes, want $nbytes"
            nbad=$((nbad + 1))
        fi
    done <"$MAN"

    # Random slices (20 per 2+-D tensor, 5 per 1-D one), fresh per config.
    sl=$TMP/sl$ci
    "$PY" "$HELPERS/ref.py" slicebatch "$DATA/manifest.json" 20 "$ci" "$sl" || exit 99
    # Fast path: one cat per slice appended to one file, compared once with
    # the references concatenated in the same order; on any difference, the
    # slow path below finds and reports each wrong slice.
    ns=$(wc -l <"$sl/slices.lst")
    : >"$TMP/slices.out"
    fast_ok=1
    while IFS='|' read -r fqn k spec reffile; do
        "$CKPT" cat "$ck" "$fqn" --slice "$spec" >>"$TMP/slices.out" 2>"$ERR" </dev/null || fast_ok=0
    done <"$sl/slices.lst"
    cut -d'|' -f4 "$sl/slices.lst" | xargs cat >"$TMP/slices.ref"
    if [ "$fast_ok" = 1 ] && cmp -s "$TMP/slices.ref" "$TMP/slices.out"; then
        ok "$tag $ns random slices equal NumPy's"
    else
        while IFS='|' read -r fqn k spec reffile; do
            run_ckpt cat "$ck" "$fqn" --slice "$spec"
            if [ "$RC" -ne 0 ]; then
                bad "$tag cat $fqn --slice '$spec' exits 0"
                _show
            elif ! cmp -s "$reffile" "$OUT"; then
                bad "$tag cat $fqn --slice '$spec': got $(stat -c %s "$OUT") bytes, want $(stat -c %s "$reffile"); $(cmp "$reffile" "$OUT" 2>&1 | head -1)"
            fi
        done <"$sl/slices.lst"
    fi
    rm -rf "$sl"

    # unpack, then compare every file with NumPy (bf16/fp8 -> float32).
    un=$TMP/un$ci
    run_ckpt unpack "$ck" "$un"
    expect_ok "$tag unpack"
    if [ "$RC" -eq 0 ]; then
        : >"$TMP/pairs"
        while IFS='|' read -r fqn kind dtype shape nbytes file packarg; do
            if [ "$kind" = bytes ]; then ext=bin; else ext=npy; fi
            echo "$(ref_arg "$kind" "$file" "$dtype" "$shape")|$un/$fqn.$ext" >>"$TMP/pairs"
        done <"$MAN"
        "$PY" "$HELPERS/ref.py" cmpmany <"$TMP/pairs" >"$TMP/cmp" || exit 99
        while read -r word rest; do
            if [ "$word" = ok ]; then
                ok "$tag unpack $(basename "${rest%%:*}")"
            else
                bad "$tag unpack $rest"
            fi
        done <"$TMP/cmp"
        "$PY" "$HELPERS/ref.py" npyhdr "$un"/*.npy >"$TMP/hdr"
        report "$TMP/hdr" "$tag unpack: "
        nfiles=$(find "$un" -type f | wc -l)
        if [ "$nfiles" -eq "$NT" ]; then
            ok "$tag unpack wrote exactly $NT files"
        else
            bad "$tag unpack wrote $nfiles files, want $NT: $(ls "$un" | tr '\n' ' ')"
        fi
    fi
    rm -rf "$un" "$ck"
done

summary
