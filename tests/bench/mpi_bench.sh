#!/bin/bash
# mpi_bench.sh - the MPI part of `make bench`: collective save (ckpt_mpi_save,
# codec auto: the library's default) and load (ckpt_mpi_load) of a ~1 GiB
# state dict on 1, 2 and 4 ranks (oversubscribed when the machine has fewer
# CPUs), resharding loads with their read amplification (bytes decoded /
# bytes requested, summed over ranks), and PyTorch DCP's single-process
# load of the same state dict: the collective load on 1 rank must be at
# least as fast.
#
# Checkpoints are saved FSDP-style (dim-0 shards).  Loads come from a
# checkpoint saved on another rank count: dim-0 resharding (FSDP on N ranks
# from FSDP on M) and dim-1 resharding (tensor-parallel columns from FSDP
# rows, where every frame is needed by every rank).
#
# Environment: CKPT_BENCH_MPI (mpi_bench binary, required), CKPT_BENCH_CORE
# (bench_core, which generates the state dict; required), CKPT_SRCDIR,
# CKPT_BENCH_MB (default 1024), CKPT_BENCH_REPS (default 3), CKPT_BENCH_DIR
# (scratch parent, default the build directory), CKPT_BENCH_PYTHON (default
# /usr/bin/python3), CKPT_BENCH_COLD=0 (never drop the page cache: warm
# loads only), CKPT_BENCH_STRICT=1 (exit 1 when a target is missed).
set -euo pipefail
export LC_ALL=C

die() { echo "mpi bench: $*" >&2; exit 1; }

mpib=${CKPT_BENCH_MPI:-}
core=${CKPT_BENCH_CORE:?set CKPT_BENCH_CORE to the bench_core binary (make bench does)}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
srcdir=${CKPT_SRCDIR:-$(cd "$here/../.." && pwd)}
dcp_py=$srcdir/tests/bench/dcp_bench.py
py=${CKPT_BENCH_PYTHON:-/usr/bin/python3}
mb=${CKPT_BENCH_MB:-1024}
reps=${CKPT_BENCH_REPS:-3}
if [[ -z $mpib || ! -x $mpib ]] || ! command -v mpirun >/dev/null; then
    echo "SKIP mpi bench: no mpirun or no mpi_bench (configure found no MPI)"
    exit 0
fi
[[ -x $core ]] || die "bench_core not found at $core"
[[ $mb =~ ^[0-9]+$ && $mb -ge 10 ]] || die "CKPT_BENCH_MB must be an integer >= 10"
[[ $reps =~ ^[0-9]+$ && $reps -ge 1 ]] || die "CKPT_BENCH_REPS must be >= 1"

base=${CKPT_BENCH_DIR:-$(dirname "$mpib")}
mkdir -p "$base"
work=$(mktemp -d "$base/ckptfs-mpibench.XXXXXX")
cleanup() { rm -rf "$work"; }
trap cleanup EXIT
trap 'exit 130' INT TERM
state=$work/state
mkdir "$state"
results=$work/results   # name seconds cpu_seconds amplification ranks
need=$(( mb * 1048576 * 6 ))   # state, 3 checkpoints, DCP + slack
avail=$(df -P -B1 "$work" | awk 'NR == 2 { print $4 }')
(( avail > need )) || die "need $(( need >> 20 )) MiB free in $base, have $(( avail >> 20 )) MiB (set CKPT_BENCH_DIR or CKPT_BENCH_MB)"

ncpu=$(nproc)
mpirun_() {
    local n=$1
    shift
    mpirun --allow-run-as-root --oversubscribe -n "$n" "$@"
}

# Records a RESULT line (the last one of the command's output) and shows
# progress.
record() {
    local line fields
    line=$(grep '^RESULT ' <<<"$1" | tail -n 1) || die "no RESULT in: $1"
    fields=$(awk '{ for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
           a = v["amplification"] == "" ? "-" : v["amplification"]
           c = v["cpu_seconds"] == "" ? "-" : v["cpu_seconds"]
           r = v["ranks"] == "" ? 1 : v["ranks"]
           print v["name"], v["seconds"], c, a, r }' <<<"$line")
    echo "$fields" >>"$results"
    awk -v rep="$rep/$reps" '{ printf "  [%s] %-26s %8.3f s%s\n", rep, $1, $2,
        $4 == "-" ? "" : "  amplification " $4 }' <<<"$fields"
}

drop_caches() { sync && echo 3 >/proc/sys/vm/drop_caches; } 2>/dev/null
warm_up() { find "$1" -type f -exec cat {} + >/dev/null; }
prepare_load() {   # prepare_load DIR: cold or warm, as decided below
    if (( cold )); then drop_caches; else warm_up "$1"; fi
}

# ------------------------------------------------------------ contenders
save_round() {
    local n
    for n in 1 2 4; do
        rm -rf "$work/ck$n"
        sync
        record "$(mpirun_ "$n" "$mpib" save "$state" "$work/ck$n" --name "mpi_save_$n")"
    done
}

# load_one LAYOUT N FROM: load on N ranks what FROM ranks saved.
load_one() {
    prepare_load "$work/ck$3"
    record "$(mpirun_ "$2" "$mpib" load "$state" "$work/ck$3" --layout "$1" \
        --name "mpi_load_${1}_${2}from$3")"
}

load_round() {
    load_one dim0 1 4
    load_one dim0 2 4
    load_one dim0 3 4
    load_one dim0 4 2
    load_one dim1 2 4
    load_one dim1 3 4
    load_one dim1 4 2
}

dcp_round() {
    [[ -z ${dcp_skip:-} ]] || return 0
    prepare_load "$work/dcp"
    record "$("$py" "$dcp_py" load "$state" "$work/dcp" dcp_load)"
}

# ------------------------------------------------------------ report
med() {   # med NAME COLUMN -> "median min max", or "-"
    awk -v n="$1" -v c="$2" '$1 == n && $c != "-" { print $c }' "$results" |
        sort -g | awk '{ s[NR] = $1 }
        END { if (NR == 0) { print "-"; exit }
              m = NR % 2 ? s[(NR + 1) / 2] : (s[NR / 2] + s[NR / 2 + 1]) / 2
              print m, s[1], s[NR] }'
}
median_of() { med "$1" 2 | awk '{ print $1 }'; }

row() {   # row NAME LABEL RANKS
    local t a c
    t=$(med "$1" 2)
    [[ $t != - ]] || return 0
    a=$(med "$1" 4 | awk '{ print $1 }')
    c=$(med "$1" 3 | awk '{ print $1 }')
    awk -v label="$2" -v n="$3" -v t="$t" -v a="$a" -v c="$c" -v bytes="$logical" \
        -v ncpu="$ncpu" 'BEGIN { split(t, s, " ")
        printf "%-34s %5s%s %8.3f %8.3f %8.3f %6s %7.2f %6s\n", label, n,
            (n > ncpu ? "*" : " "), s[1], s[2], s[3],
            c == "-" ? "-" : sprintf("%.2f", c), bytes / s[1] / 1e9,
            a == "-" ? "-" : sprintf("%.3f", a) }'
}

table() {
    printf "%-34s %6s %8s %8s %8s %6s %7s %6s\n" contender ranks median min max cpu GB/s "ampl."
    printf "%-34s %6s %8s %8s %8s %6s %7s %6s\n" "" "" s s s s "" ""
    local n
    for n in 1 2 4; do row "mpi_save_$n" "ckpt_mpi_save (auto)" "$n"; done
    row mpi_load_dim0_1from4 "load dim-0, saved on 4" 1
    row mpi_load_dim0_2from4 "load dim-0, saved on 4" 2
    row mpi_load_dim0_3from4 "load dim-0, saved on 4" 3
    row mpi_load_dim0_4from2 "load dim-0, saved on 2" 4
    row mpi_load_dim1_2from4 "load dim-1 from dim-0, saved on 4" 2
    row mpi_load_dim1_3from4 "load dim-1 from dim-0, saved on 4" 3
    row mpi_load_dim1_4from2 "load dim-1 from dim-0, saved on 2" 4
    row dcp_load "DCP load_state_dict (no_dist)" 1
}

ratio() {   # ratio A B -> median(A) / median(B)
    local a b
    a=$(median_of "$1")
    b=$(median_of "$2")
    [[ -n $a && -n $b && $a != - && $b != - ]] || return 0
    awk -v a="$a" -v b="$b" 'BEGIN { printf "%.2f", a / b }'
}

max_ampl() {   # max_ampl PATTERN -> the largest median amplification
    local n m best=0
    for n in $(awk -v p="$1" '$1 ~ p { print $1 }' "$results" | sort -u); do
        m=$(med "$n" 4 | awk '{ print $1 }')
        best=$(awk -v a="$best" -v b="$m" 'BEGIN { print (b > a ? b : a) }')
    done
    echo "$best"
}

verdict() {   # verdict LABEL VALUE OK
    local word="NOT MET"
    (( $3 )) && word=met
    (( $3 )) || missed=1
    printf "target %-52s %s %s\n" "$1:" "$2" "$word"
}

targets() {
    local a r ok n
    for k in dim0 dim1; do
        a=$(max_ampl "^mpi_load_$k")
        ok=$(awk -v a="$a" 'BEGIN { print (a <= 1.05) }')
        verdict "read amplification <= 1.05, ${k/dim/dim-} resharding" "$a (worst row)" "$ok"
    done
    if [[ -n ${dcp_skip:-} ]]; then
        echo "target collective load on 1 rank >= 1.0x DCP: not measured ($dcp_skip)"
        return
    fi
    r=$(ratio dcp_load mpi_load_dim0_1from4)
    ok=$(awk -v r="$r" 'BEGIN { print (r >= 1) }')
    verdict "collective load on 1 rank >= 1.0x DCP's load (auto)" "${r}x" "$ok"
    echo "  (DCP seconds / collective load seconds on N ranks:"
    for n in 2 4; do
        printf "   %d ranks: %sx" "$n" "$(ratio dcp_load "mpi_load_dim0_${n}from$([[ $n == 4 ]] && echo 2 || echo 4)")"
    done
    echo ")"
}

# ------------------------------------------------------------ main
t_start=$EPOCHREALTIME
echo "ckptfs MPI benchmark: scratch $work ($(stat -f -c %T "$work")), $ncpu CPUs, $reps reps, Open MPI $(mpirun --version 2>/dev/null | head -n 1 | awk '{ print $NF }')"
gen_line=$("$core" gen "$state" --mb "$mb") || die "bench_core gen failed"
logical=$(awk '{ for (i = 2; i <= NF; i++) { split($i, kv, "="); if (kv[1] == "bytes_logical") print kv[2] } }' <<<"$gen_line")
echo "state dict: $(wc -l <"$state/state.idx") tensors (bench_core gen: bf16 weights, f32 Adam moments, 1024x1024 each) = $logical bytes"
cold=0
cache_note="cannot drop the page cache here: every load is measured warm (files read with cat first), for every contender alike"
if [[ ${CKPT_BENCH_COLD:-1} == 0 ]]; then
    cache_note="CKPT_BENCH_COLD=0: every load is measured warm (files read with cat first), for every contender alike"
elif drop_caches; then
    cold=1
    cache_note="page cache dropped before every load (cold), for every contender alike"
fi
echo "cache: $cache_note"
if [[ ! -x $py ]]; then
    dcp_skip="SKIP dcp: $py not found"
else
    out=$("$py" "$dcp_py" save "$state" "$work/dcp") || die "DCP save failed"
    grep -q '^SKIP' <<<"$out" && dcp_skip=$(grep '^SKIP' <<<"$out" | head -n 1)
fi
[[ -n ${dcp_skip:-} ]] && echo "  $dcp_skip"
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
for (( rep = 1; rep <= reps; rep++ )); do
    save_round
    # DCP's turn rotates so that drifts spread over all contenders.
    if (( rep % 2 )); then dcp_round; load_round; else load_round; dcp_round; fi
done

echo
echo "== ckptfs MPI benchmark: $logical logical bytes, median of $reps runs; * = more ranks than the $ncpu CPUs (oversubscribed); GB/s = logical bytes / median s / 1e9; cpu = CPU seconds summed over ranks; ampl. = bytes decoded / bytes requested, summed over ranks"
table
echo
echo "on disk: $(du -sb "$work/ck4" | awk '{ printf "%.1f MB", $1 / 1e6 }') (auto, saved on 4 ranks)$([[ -d $work/dcp ]] && du -sb "$work/dcp" | awk '{ printf ", DCP %.1f MB", $1 / 1e6 }')"
missed=0
targets
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg) (above $ncpu means other work shared the CPUs)"
echo "total MPI bench time: $(awk -v a="$t_start" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.0f", b - a }') s"
if (( missed )) && [[ ${CKPT_BENCH_STRICT:-0} == 1 ]]; then
    exit 1
fi
exit 0
