#!/bin/bash
# st_header_memory.sh - opening a safetensors file costs memory in
# proportion to its header, at most 4x its size (docs/TRUST.md, "Memory of
# a safetensors header"): a header of >= 20 MiB made of 230,000 small
# tensors, and one that is mostly a 20 MiB __metadata__, are opened by
# `ckpt ls` and by the library (tests/cli/st_open_mem, which reads VmHWM),
# and the peak resident size beyond that of opening a tiny file must stay
# within 4x the header's bytes.  The listing and the bytes of a few tensors
# are checked against the file as NumPy reads it, so that a reader that
# saves memory by dropping tensors fails too.
#
# ST_OPEN_MEM names another st_open_mem (e.g. one built against main's
# library, to see the test fail there).  In a sanitizer build (whose
# shadow memory and redzones are no measure) the bound is not asserted,
# the rest is.
. "$(dirname "$0")/lib.sh"
need_python

OPENMEM=${ST_OPEN_MEM:-$CKPT_BUILDDIR/tests/cli/st_open_mem}
NTENSORS=${ST_MEM_TENSORS:-230000}
META_BYTES=${ST_MEM_META:-21000000}
BOUND=4

if [ ! -x /usr/bin/time ]; then
    echo "SKIP: /usr/bin/time is needed to read a command's peak memory"
    exit 77
fi

gen() {   # gen OUT KIND N: prints the header's length
    "$PY" "$HELPERS/gen_st_header.py" "$@" || exit 99
}

TINY=$TMP/tiny.safetensors
MANY=$TMP/many.safetensors
META=$TMP/meta.safetensors
gen "$TINY" many 3 >/dev/null
HMANY=$(gen "$MANY" many "$NTENSORS")
HMETA=$(gen "$META" meta "$META_BYTES")
[ "$HMANY" -ge $((20 << 20)) ] || { echo "ERROR: header of $HMANY bytes"; exit 99; }

# peak resident kB of `ckpt ls FILE` (its listing to $TMP/ls.out)
ls_kb() {
    /usr/bin/time -f "%M" -o "$TMP/time.out" "$CKPT" ls "$1" \
        >"$TMP/ls.out" 2>"$TMP/ls.err" || { cat "$TMP/ls.err"; echo 0; return; }
    tail -n 1 "$TMP/time.out"
}

# A sanitizer build: the build says so (CKPT_SAN_CFLAGS, from make
# check); clang links its runtime statically, so ldd cannot tell.
SANITIZED=0
if [[ "${CKPT_SAN_CFLAGS:-}" == *sanitize* ]] ||
   ldd "$CKPT" 2>/dev/null | grep -q -e libasan -e libubsan; then
    SANITIZED=1
    echo "     (a sanitizer build: memory is reported, not bounded)"
fi

# within NAME BASE_KB PEAK_KB HEADER_BYTES: peak - base <= BOUND x header
within() {
    local name=$1 base=$2 peak=$3 hdr=$4
    local used=$(((peak - base) * 1024))
    local ratio
    ratio=$(awk -v u="$used" -v h="$hdr" 'BEGIN { printf "%.2f", u / h }')
    echo "     $name: header $hdr bytes, peak $peak kB - base $base kB = ${ratio}x"
    if [ "$SANITIZED" = 1 ]; then
        return
    fi
    if [ "$peak" -gt 0 ] && [ "$used" -le $((BOUND * hdr)) ]; then
        ok "$name: ${ratio}x the header (at most ${BOUND}x)"
    else
        bad "$name: ${ratio}x the header (at most ${BOUND}x)"
    fi
}

# ---- ckpt ls
BASE=$(ls_kb "$TINY")
PEAK=$(ls_kb "$MANY")
within "ckpt ls, $NTENSORS tensors" "$BASE" "$PEAK" "$HMANY"
cp "$TMP/ls.out" "$TMP/many.ls"
PEAK=$(ls_kb "$META")
within "ckpt ls, a large __metadata__" "$BASE" "$PEAK" "$HMETA"

# the listing: every tensor, with the dtype and shape of the header
"$PY" - "$MANY" "$TMP/many.ls" >"$TMP/ls.check" 2>&1 <<'PY'
import json, struct, sys
path, listing = sys.argv[1], sys.argv[2]
with open(path, "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    hdr = json.loads(f.read(n))
hdr.pop("__metadata__", None)
rows = [l.split() for l in open(listing).read().splitlines()[1:]]
names = [r[0] for r in rows]
print("ok" if names == sorted(hdr) else "FAIL",
      "ls lists the header's %d tensors, in name order" % len(hdr))
bad = [r[0] for r in rows
       if r[1] != hdr[r[0]]["dtype"].lower()
       or r[2] != (",".join(map(str, hdr[r[0]]["shape"])) or "()")]
print("ok" if not bad else "FAIL", "ls gives each its dtype and shape",
      bad[:3])
PY
report "$TMP/ls.check"

# ---- the library
if [ -x "$OPENMEM" ]; then
    PICK=(model.layers.0.experts.0.w0 model.layers.17.experts.3.w2
          model.layers.229.experts.999.w1 model.layers.100.experts.500.w0)
    "$OPENMEM" "$TINY" >"$TMP/tiny.lib" || exit 99
    "$OPENMEM" "$MANY" "${PICK[@]}" >"$TMP/many.lib" 2>"$TMP/lib.err"
    "$OPENMEM" "$META" @key0000000 @key0209999 >"$TMP/meta.lib" 2>>"$TMP/lib.err"
    kb() { awk -v k="$1" '$1 == k { print $2 }' "$2"; }
    LBASE=$(kb hwm_kb "$TMP/tiny.lib")
    within "ckpt_reader_open, $NTENSORS tensors" "$LBASE" \
        "$(kb hwm_kb "$TMP/many.lib")" "$HMANY"
    within "ckpt_reader_open, a large __metadata__" "$LBASE" \
        "$(kb hwm_kb "$TMP/meta.lib")" "$HMETA"
    # the bytes read, the count and the metadata, against NumPy
    "$PY" - "$MANY" "$TMP/many.lib" "$TMP/meta.lib" >"$TMP/lib.check" 2>&1 <<'PY'
import json, struct, sys
import numpy as np
path, out, meta_out = sys.argv[1:4]
with open(path, "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    hdr = json.loads(f.read(n))
data = np.fromfile(path, dtype=np.uint8, offset=8 + n)
got = dict(l.split(None, 1) for l in open(out).read().splitlines())
print("ok" if int(got["tensors"]) == len(hdr) else "FAIL",
      "the library lists", got["tensors"], "of", len(hdr))
total = sum(e["data_offsets"][1] - e["data_offsets"][0] for e in hdr.values())
print("ok" if int(got["bytes"]) == total else "FAIL",
      "the tensors' bytes add up to", total)
for name in [k for k in got if k.startswith("model.")]:
    b, e = hdr[name]["data_offsets"]
    want = data[b:e].tobytes().hex()
    print("ok" if got[name].strip() == want else "FAIL",
          "bytes of", name, got[name].strip(), "want", want)
print("ok" if sum(k.startswith("model.") for k in got) == 4 else "FAIL",
      "4 tensors read")
meta = dict(l.split(None, 1) for l in open(meta_out).read().splitlines())
for k in ("key0000000", "key0209999"):
    want = "v%s%s" % (k[3:], "." * 80)
    print("ok" if meta.get("@" + k, "").strip() == want else "FAIL",
          "__metadata__", k, "is", meta.get("@" + k))
PY
    cat "$TMP/lib.err"
    report "$TMP/lib.check"
else
    echo "     (no $OPENMEM: the library's figures not taken)"
fi

summary
