#!/bin/bash
# run.sh - metadata at scale (`make bench`, after the other benchmarks): a
# save of W writers x T tensors simulated on one machine with scale_bench
# (local plans written through the library, sparse shards), then, per W and
# layout: planning and commit time and memory, index.db size, reader open
# time and the time of one tensor's region and layout; beside them torch
# 1.13 DCP's Metadata for the same layout (dcp_metadata.py: built, pickled,
# unpickled).  Prints the figures, the growth from one W to the next
# against W x T log(W x T), and the targets' verdicts.  See
# tests/bench/README.md ("Metadata at scale").
#
# Environment: CKPT_BENCH_SCALE (scale_bench binary, required),
# CKPT_BENCH_SCALE_W (writer counts, default "1024 4096"; the full sweep
# is "1024 2048 4096 8192 16384"), CKPT_BENCH_SCALE_T (tensors, default
# 1000), CKPT_BENCH_SCALE_LAYOUTS (default "fsdp tp2d"),
# CKPT_BENCH_SCALE_DCP_MAX (largest W x T given to DCP, default 1048576:
# its objects take ~2.7 KB of memory per chunk in Python, 11 GB at W =
# 4096; larger W get DCP's size extrapolated), CKPT_BENCH_SCALE_JOBS
# (generator processes, default 2), CKPT_BENCH_REPS (reads, default 3),
# CKPT_BENCH_DIR (scratch parent), CKPT_BENCH_PYTHON (/usr/bin/python3),
# CKPT_BENCH_COLD=0 (no cold open), CKPT_BENCH_SECOND=0 (no second save),
# CKPT_BENCH_STRICT=1 (exit 1 on a missed target).
#
# A second save of the same layout (the pieces of every save of a job) is
# timed too: a copy of the first save's plans and shards, committed after
# the first, which reuses the first save's layout (src/write/reuse.h);
# its commit time, CPU and memory are printed beside the first's.  Targets (issue #26) at the largest W: the commit <= 15 s
# wall and <= 1 GB resident, the second save's commit <= 3 s, index.db
# <= 40 bytes per chunk, open + one region <= 0.1 s.
set -euo pipefail
export LC_ALL=C

die() { echo "scale bench: $*" >&2; exit 1; }

bin=${CKPT_BENCH_SCALE:?set CKPT_BENCH_SCALE to the scale_bench binary (make bench does)}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
py=${CKPT_BENCH_PYTHON:-/usr/bin/python3}
ws=${CKPT_BENCH_SCALE_W:-1024 4096}
nt=${CKPT_BENCH_SCALE_T:-1000}
layouts=${CKPT_BENCH_SCALE_LAYOUTS:-fsdp tp2d}
dcp_max=${CKPT_BENCH_SCALE_DCP_MAX:-1048576}
jobs=${CKPT_BENCH_SCALE_JOBS:-2}
reps=${CKPT_BENCH_REPS:-3}
[[ -x $bin ]] || die "scale_bench not found at $bin"
for w in $ws; do
    [[ $w =~ ^[0-9]+$ && $w -ge 8 && $((w % 8)) -eq 0 ]] ||
        die "CKPT_BENCH_SCALE_W: '$w' is not a multiple of 8"
done
[[ $nt =~ ^[0-9]+$ && $nt -ge 2 ]] || die "CKPT_BENCH_SCALE_T must be >= 2"

base=${CKPT_BENCH_DIR:-$(dirname "$bin")}
mkdir -p "$base"
work=$(mktemp -d "$base/ckptfs-scale.XXXXXX")
trap 'rm -rf "$work"' EXIT
trap 'exit 130' INT TERM
res=$work/results

cold=0
if [[ ${CKPT_BENCH_COLD:-1} != 0 && $(id -u) == 0 ]] &&
   (echo 3 > /proc/sys/vm/drop_caches) 2>/dev/null; then
    cold=1
fi

# "RESULT k=v ..." -> the value of k
val() { sed -n "s/.* $2=\([^ ]*\).*/\1/p" <<<"$1"; }

# The median of the arguments.
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }

echo "== metadata at scale: W writers x $nt tensors, one piece each (1 KiB, one raw frame)"
echo "   load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
for lay in $layouts; do
    for w in $ws; do
        ck=$work/ck
        rm -rf "$ck"
        g=$("$bin" gen "$ck" --writers "$w" --tensors "$nt" --layout "$lay" \
            --jobs "$jobs" | grep '^RESULT') || die "gen failed ($lay, W=$w)"
        if [[ ${CKPT_BENCH_SECOND:-1} != 0 ]]; then
            rm -rf "$work/ck2"
            cp -a --sparse=always "$ck" "$work/ck2"
        fi
        sync
        p=$("$bin" plan "$ck" | grep '^RESULT') || die "plan failed ($lay, W=$w)"
        c=$("$bin" commit "$ck" | grep '^RESULT') || die "commit failed ($lay, W=$w)"
        c2_s=- c2_rss=- c2_cpu=- c2_from=-
        if [[ -d $work/ck2 ]]; then
            c2=$("$bin" commit "$work/ck2" | grep '^RESULT') ||
                die "second commit failed ($lay, W=$w)"
            c2_s=$(val "$c2" seconds) c2_rss=$(val "$c2" maxrss_kb)
            c2_cpu=$(val "$c2" cpu_s) c2_from=$(val "$c2" reused)
            rm -rf "$work/ck2"
        fi
        opens=() regions=() layouts_s=() rss=()
        copen=-
        if [[ $cold == 1 ]]; then
            sync; echo 3 > /proc/sys/vm/drop_caches
            r=$("$bin" read "$ck" --layout "$lay" | grep '^RESULT') || die "read failed"
            copen=$(awk -v a="$(val "$r" open_s)" -v b="$(val "$r" region_s)" 'BEGIN {print a + b}')
        fi
        for ((k = 0; k < reps; k++)); do
            r=$("$bin" read "$ck" --layout "$lay" | grep '^RESULT') || die "read failed ($lay, W=$w)"
            opens+=("$(val "$r" open_s)")
            regions+=("$(val "$r" region_s)")
            layouts_s+=("$(val "$r" layout_s)")
            rss+=("$(val "$r" maxrss_kb)")
        done
        rm -rf "$ck"
        d_plan=- d_res=- d_dumps=- d_loads=- d_bytes=- d_rss=-
        if (( w * nt <= dcp_max )); then
            d=$("$py" "$here/dcp_metadata.py" --writers "$w" --tensors "$nt" \
                --layout "$lay" | grep -E '^(RESULT|SKIP)') || die "dcp_metadata failed ($lay, W=$w)"
            if [[ $d == RESULT* ]]; then
                d_plan=$(val "$d" plan_s) d_res=$(val "$d" results_s)
                d_dumps=$(val "$d" dumps_s) d_loads=$(val "$d" loads_s)
                d_bytes=$(val "$d" metadata_bytes) d_rss=$(val "$d" maxrss_kb)
            else
                echo "   $d"
            fi
        fi
        echo "$lay $w $((w * nt)) $(val "$g" seconds) $(val "$p" read_s) $(val "$p" plan_s) $(val "$p" plan_cpu_s) $(val "$c" seconds) $(val "$c" cpu_s) $(val "$c" maxrss_kb) $(val "$c" index_bytes) $(median "${opens[@]}") $(median "${regions[@]}") $(median "${layouts_s[@]}") $(median "${rss[@]}") $copen $d_plan $d_res $d_dumps $d_loads $d_bytes $d_rss $c2_s $c2_rss $c2_cpu $c2_from" >>"$res"
        echo "   done: $lay W=$w ($(date +%T))"
    done
done
echo "   load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"

awk -v cold="$cold" -v strict="${CKPT_BENCH_STRICT:-0}" '
function nlogn(n) { return n * log(n) / log(2) }
function ms(x) { return x == "-" ? "-" : sprintf("%.1f", 1000 * x) }
function mb(x) { return x == "-" ? "-" : sprintf("%.1f", x / 1e6) }
function verdict(ok) { missed += !ok; return ok ? "met" : "NOT MET" }
{
    n++; lay[n] = $1; w[n] = $2; pieces[n] = $3; gen[n] = $4; pread[n] = $5
    plan[n] = $6; plancpu[n] = $7; commit[n] = $8; commitcpu[n] = $9
    crss[n] = $10 * 1024; idx[n] = $11; open[n] = $12; region[n] = $13
    lays[n] = $14; rrss[n] = $15 * 1024; copen[n] = $16; dplan[n] = $17
    dres[n] = $18; ddumps[n] = $19; dloads[n] = $20; dbytes[n] = $21
    drss[n] = $22 == "-" ? "-" : $22 * 1024
    c2[n] = $23; c2rss[n] = $24 == "-" ? "-" : $24 * 1024
    c2cpu[n] = $25; c2from[n] = $26
}
END {
    for (i = 1; i <= n; i++) {
        if (i == 1 || lay[i] != lay[i - 1]) {
            what = "2-D: (W/8) x 8 grid of 2 x 128 blocks, FSDP x tensor parallel"
            if (lay[i] == "fsdp")
                what = "dim-0 shards: W x 256 f32, a row per writer"
            printf "\n-- layout %s (%s)\n", lay[i], what
            printf "%6s %9s | %7s %7s %8s %8s %8s %8s %7s | %7s %7s %7s %7s %6s\n",
                "W", "chunks", "gen s", "plan s", "commit s", "cpu s",
                "RSS MB", "index MB", "B/chunk", "open ms", "regn ms",
                "cold ms", "layt ms", "RSS MB"
        }
        printf "%6d %9d | %7.2f %7.2f %8.2f %8.2f %8.1f %8.1f %7.1f | %7s %7s %7s %7s %6.1f\n",
            w[i], pieces[i], gen[i], plan[i], commit[i], commitcpu[i],
            crss[i] / 1e6, idx[i] / 1e6, idx[i] / pieces[i], ms(open[i]),
            ms(region[i]), ms(copen[i]), ms(lays[i]), rrss[i] / 1e6
    }
    printf "\n-- the commit of a second save of the same layout (a copy of the first save'"'"'s plans and shards, committed after it), beside the first\n"
    printf "%6s %6s %9s | %8s %8s %8s | %8s %8s %8s | %8s %s\n", "layout", "W",
        "chunks", "1st s", "cpu s", "RSS MB", "2nd s", "cpu s", "RSS MB",
        "2nd/1st", "layout reused from"
    for (i = 1; i <= n; i++) {
        if (c2[i] == "-")
            continue
        printf "%6s %6d %9d | %8.2f %8.2f %8.1f | %8.2f %8.2f %8.1f | %7.2fx %s\n",
            lay[i], w[i], pieces[i], commit[i], commitcpu[i], crss[i] / 1e6,
            c2[i], c2cpu[i], c2rss[i] / 1e6, c2[i] / commit[i],
            c2from[i] == "-" ? "- (planned afresh)" : c2from[i]
    }
    printf "\n-- torch 1.13 DCP Metadata for the same layouts (rank 0: gather plans, global plan, gather results, pickle)\n"
    printf "%6s %6s %9s | %8s %9s %8s %8s %10s %7s %8s | %10s\n", "layout",
        "W", "chunks", "plans s", "results s", "dumps s", "loads s",
        ".metadata MB", "B/chunk", "RSS MB", "index/DCP"
    last_b = 0
    for (i = 1; i <= n; i++) {
        if (dbytes[i] == "-") {
            # extrapolated: bytes per chunk of the largest measured W
            if (per[lay[i]] > 0)
                printf "%6s %6d %9d | %8s %9s %8s %8s %10s %7.1f %8s | %9.2fx (DCP extrapolated)\n",
                    lay[i], w[i], pieces[i], "-", "-", "-", "-",
                    sprintf("~%.1f", per[lay[i]] * pieces[i] / 1e6),
                    per[lay[i]], "-", idx[i] / (per[lay[i]] * pieces[i])
            continue
        }
        per[lay[i]] = dbytes[i] / pieces[i]
        printf "%6s %6d %9d | %8.2f %9.2f %8.2f %8.2f %10.1f %7.1f %8.1f | %9.2fx\n",
            lay[i], w[i], pieces[i], dplan[i], dres[i], ddumps[i], dloads[i],
            dbytes[i] / 1e6, per[lay[i]], drss[i] / 1e6, idx[i] / dbytes[i]
    }
    printf "\n-- growth from one W to the next (CPU seconds; wall time moves with the machine load)\n"
    printf "%6s %13s | %9s %9s %9s | %9s %10s\n", "layout", "W", "n log n x",
        "commit x", "RSS x", "plan x", "open+rgn x"
    for (i = 2; i <= n; i++) {
        if (lay[i] != lay[i - 1])
            continue
        allow = nlogn(pieces[i]) / nlogn(pieces[i - 1])
        prev = plancpu[i - 1] > 0 ? plancpu[i - 1] : 1e-3
        printf "%6s %6d->%-6d | %9.2f %9.2f %9.2f | %9.2f %9.2f\n", lay[i],
            w[i - 1], w[i], allow, commitcpu[i] / commitcpu[i - 1],
            crss[i] / crss[i - 1], plancpu[i] / prev,
            (open[i] + region[i]) / (open[i - 1] + region[i - 1])
    }
    printf "\n-- targets (judged on the medians of this run)\n"
    for (i = 1; i <= n; i++) {
        last[lay[i]] = i
        if (!(lay[i] in first))
            first[lay[i]] = i
    }
    for (l in last) {
        a = first[l]; b = last[l]
        if (w[b] < 16384)
            printf "       %-4s (the commit, second-save and index targets are set at W=16384; the largest W of this run is %d)\n", l, w[b]
        printf "target %-4s commit at W=%d <= 15 s wall: %.2f s, %.2f CPU s (%s)\n",
            l, w[b], commit[b], commitcpu[b], verdict(commit[b] <= 15)
        printf "target %-4s commit at W=%d <= 1 GB resident: %.0f MB (%s)\n",
            l, w[b], crss[b] / 1e6, verdict(crss[b] <= 1e9)
        if (c2[b] != "-")
            printf "target %-4s second save of the same layout at W=%d: commit <= 3 s: %.2f s, %.2f CPU s, %.0f MB, layout %s (%s)\n",
                l, w[b], c2[b], c2cpu[b], c2rss[b] / 1e6,
                c2from[b] == "-" ? "planned afresh" : "reused",
                verdict(c2[b] <= 3 && c2from[b] != "-")
        printf "target %-4s index.db at W=%d <= 40 B per chunk: %.1f B (%s)\n",
            l, w[b], idx[b] / pieces[b], verdict(idx[b] <= 40 * pieces[b])
        t = open[b] + region[b]
        printf "target %-4s open + one region at W=%d <= 0.1 s: %.1f ms (%s); at W=%d %.1f ms: x%.2f for x%.0f writers\n",
            l, w[b], 1000 * t, verdict(t <= 0.1), w[a],
            1000 * (open[a] + region[a]), t / (open[a] + region[a]),
            w[b] / w[a]
        if (cold && copen[b] != "-")
            printf "       %-4s (cold page cache: %.1f ms, %s)\n", l,
                1000 * copen[b], copen[b] <= 0.1 ? "within 0.1 s" : "above 0.1 s"
        if (a != b) {
            allow = nlogn(pieces[b]) / nlogn(pieces[a])
            g = commitcpu[b] / commitcpu[a]
            # 15% for the noise of a shared machine
            printf "target %-4s commit CPU grows <= W x T log(W x T): x%.2f for x%.2f allowed (%s)\n",
                l, g, allow, verdict(g <= 1.15 * allow)
            g = crss[b] / crss[a]
            printf "target %-4s commit memory grows <= W x T log(W x T): x%.2f for x%.2f allowed (%s)\n",
                l, g, allow, verdict(g <= 1.15 * allow)
        }
        for (i = a; i <= b; i++)
            if (dbytes[i] != "-")
                printf "target %-4s index.db <= DCP .metadata at W=%d: %.1f MB vs %.1f MB, %.2fx (%s)\n",
                    l, w[i], idx[i] / 1e6, dbytes[i] / 1e6, idx[i] / dbytes[i],
                    verdict(idx[i] <= dbytes[i])
    }
    if (missed)
        printf "scale bench: %d target(s) not met\n", missed
    exit strict == 1 && missed > 0
}' "$res"
