# shellcheck shell=bash
# limits.sh - sourced by run.sh and mount.sh: a figure judged against the
# limit of its regime (issue 26),
#
#   limit = min(storage speed / stored-raw ratio, codec speed per core x cores)
#
# both measured in the same run: the storage speed by cat (reads, cold or
# warm) or dd conv=fdatasync (writes) of the raw bytes in this regime, the
# codec speed by bench_core decode (loads) or encode (saves) on one thread.
# A load that reads fewer bytes than it returns can go faster than the
# storage by 1 / ratio; it cannot go faster than its decoders.

# limit_header: the column titles of limit_line.
limit_header() {
    printf "  %-40s %7s %7s  %-34s %6s %7s %-8s %s\n" figure "GB/s" limit \
        "= min(storage / ratio, codec x n)" "frac" target verdict "codec cpu"
}

# limit_line LABEL FIG_GBPS STORAGE_GBPS RATIO CODEC_MBPS NCPU WANT
# [FIG_CPU_S BYTES]: prints the figure, its limit and which side bounds
# it, the fraction and the verdict (met when fraction >= WANT; no verdict
# for an empty WANT); sets limit_missed=1 on a miss.  An empty figure or
# storage speed prints "not measured"; an empty codec speed leaves the
# storage alone as the limit.  With the figure's CPU seconds and bytes,
# the last column is the codec's CPU time for those bytes / the figure's
# (1: the figure spent nothing besides the codec): on a machine whose
# cores others share, the wall-time fraction of a codec-bound figure
# measures the neighbours, this share what the figure would reach with its
# cores free.
limit_line() {
    local label=$1 fig=$2 sto=$3 ratio=$4 codec=$5 n=$6 want=$7 cpu=${8:-} bytes=${9:-} out
    if [[ -z $fig || -z $sto || -z $ratio ]]; then
        printf "  %-40s not measured\n" "$label"
        return 0
    fi
    out=$(awk -v f="$fig" -v s="$sto" -v r="$ratio" -v c="$codec" -v n="$n" -v w="$want" \
        -v cpu="$cpu" -v by="$bytes" 'BEGIN {
        a = s / r; b = (c == "") ? 0 : c * n / 1000
        lim = (b > 0 && b < a) ? b : a
        side = (b > 0 && b < a) ? "codec" : "storage"
        frac = f / lim
        share = (c != "" && cpu + 0 > 0 && by + 0 > 0) ? sprintf("%.2f", by / (c * 1e6) / cpu) : "-"
        printf "%7.2f %7.2f  %5.2f/%.3f | %-15s %-7s %5.2fx %7s %-8s %s", f, lim, s, r,
            (c == "") ? "-" : sprintf("%.0f MB/s x %d", c, n), side, frac,
            (w == "") ? "-" : sprintf("%.2fx", w),
            (w == "") ? "(info)" : (frac >= w) ? "met" : "NOT MET", share }')
    # shellcheck disable=SC2034  # read by the scripts that source this file
    [[ $out == *"NOT MET"* ]] && limit_missed=1
    printf "  %-40s %s\n" "$label" "$out"
}

# load_note: a warning when other work shared the CPUs (load average above
# the CPU count): codec-bound fractions are then not to be trusted.
load_note() {
    awk -v n="$(nproc)" '{ if ($1 > n) printf "NOTE: load average %s on %d CPUs: other work shared the cores; judge codec-bound figures by their codec cpu share, not their wall-time fraction\n", $1, n }' /proc/loadavg
}

# regime_line: one line saying which regime this run measures.
regime_line() {
    if [[ ${CKPT_BENCH_REGIME:-unthrottled} == throttled ]]; then
        echo "regime: storage throttled to ${CKPT_THROTTLE_MBPS:-?} MB/s (cgroup v1 blkio on ${CKPT_THROTTLE_DEV:-?}: reads, and the writeback of the savers' own syncs)"
    else
        echo "regime: unthrottled (the storage's own speed)"
    fi
}

# throttle_charged: what the throttled group was charged so far, if any.
throttle_charged() {
    local f=${CKPT_THROTTLE_GROUP:-}/blkio.throttle.io_service_bytes
    [[ -n ${CKPT_THROTTLE_GROUP:-} && -r $f ]] || return 0
    awk -v d="${CKPT_THROTTLE_DEV:-}" '$1 == d && ($2 == "Read" || $2 == "Write") { v[$2] = $3 }
        END { printf "bytes charged to the throttled group so far: read %.0f MB, written %.0f MB\n", v["Read"] / 1e6, v["Write"] / 1e6 }' "$f"
}
