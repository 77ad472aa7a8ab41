#!/bin/bash
# layers.sh - the layer check: every `#include "..."` of src/, fs/ and tools/
# obeys the rules that src/README.md states (its ```layers block: which
# layer folder may include which; its ```outside block: which internal
# headers fs/ and tools/ may use).  An offending include is reported as
# FILE:LINE with the rule it breaks, and the check fails.
#
#   layers.sh ROOT        check the source tree at ROOT
#   layers.sh --self-test check synthetic trees: one that breaks each rule
#                         (must fail, naming every bad line), one that
#                         keeps them (must pass)
#   layers.sh             (make check) the self-test, then $CKPT_SRCDIR
set -u

# check ROOT: prints one line per offending include; status 1 if any.
check() {
    local root=$1 rules=$1/src/README.md
    [ -f "$rules" ] || { echo "$rules: missing (it holds the layer rules)"; return 1; }
    local files
    files=$(cd "$root" && ls src/*.h src/*.c src/*/*.c src/*/*.h fs/*.c fs/*.h \
        tools/*.c tools/*.h 2>/dev/null)
    (cd "$root" && awk -v root="$root" '
    function fail(msg) { printf "%s:%d: %s\n", FILENAME, FNR, msg; bad = 1 }
    function exists(p,   r, line) { r = (getline line < p); close(p); return r >= 0 }
    # the rules, from src/README.md
    FILENAME == "src/README.md" {
        if ($0 ~ /^```layers/) { mode = "layers"; next }
        if ($0 ~ /^```outside/) { mode = "outside"; next }
        if ($0 ~ /^```/) { mode = ""; next }
        if (mode == "" || $0 ~ /^#/ || NF == 0) next
        key = $1; sub(/:$/, "", key)
        if (mode == "layers") {
            layer[key] = 1
            for (i = 2; i <= NF; i++) may[key, $i] = 1
        } else {
            outside[key] = 1
            for (i = 2; i <= NF; i++) allow[key, $i] = 1
        }
        next
    }
    FNR == 1 {
        n = split(FILENAME, part, "/")
        top = part[1]; dir = part[1]
        for (i = 2; i < n; i++) dir = dir "/" part[i]
        where = (top == "src" && n == 3) ? part[2] : ""
        if (top == "src" && n == 2 && FILENAME !~ /^src\/ckptfs(_mpi)?\.h$/)
            fail("not in a layer folder (src/README.md)")
        if (where != "" && !(where in layer))
            fail("folder src/" where "/ is not a layer of src/README.md")
        if (top != "src" && !(top in outside))
            fail(top "/ has no line in src/README.md (```outside)")
    }
    /^[ \t]*#[ \t]*include[ \t]*"/ {
        inc = $0; sub(/^[^"]*"/, "", inc); sub(/".*$/, "", inc)
        if (inc == "config.h") next
        if (inc == "ckptfs.h" || inc == "ckptfs_version.h") next
        if (inc == "ckptfs_mpi.h") {
            if (top == "src" && where != "mpi" && where != "")
                fail("includes \"" inc "\": only the mpi layer may")
            next
        }
        if (inc !~ /\//) {
            if (top != "src" && exists(dir "/" inc)) next   # own header
            fail("includes \"" inc "\": an internal header without its layer folder")
            next
        }
        if (!exists("src/" inc)) {
            if (top != "src" && exists(dir "/" inc)) next
            fail("includes \"" inc "\": no such header src/" inc)
            next
        }
        to = inc; sub(/\/.*$/, "", to)
        if (top == "src") {
            if (where == "") fail("includes \"" inc "\": a public header may include only public ones")
            else if (to != where && !((where, to) in may))
                fail("includes \"" inc "\": layer " where "/ may not include " to "/ (src/README.md)")
        } else if (!((top, inc) in allow))
            fail("includes \"" inc "\": " top "/ may use only the internal headers src/README.md lists for it")
    }
    END { exit bad }
    ' src/README.md $files)
}

# A tree under $1 with the rules "low: -", "high: low", and fs/ allowed
# low/a.h; good when $2 is "good", else with one breach of each rule.
make_tree() {
    local t=$1
    mkdir -p "$t/src/low" "$t/src/high" "$t/fs" "$t/tools"
    printf '%s\n' '# rules' '```layers' 'low:' 'high: low' '```' \
        '```outside' 'fs: low/a.h' 'tools:' '```' >"$t/src/README.md"
    printf '/* public */\n' >"$t/src/ckptfs.h"
    printf '/* a */\n#include "ckptfs.h"\n' >"$t/src/low/a.h"
    printf '#include "low/a.h"\n#include <stdio.h>\n' >"$t/src/high/b.h"
    printf '#include "high/b.h"\n#include "low/a.h"\n' >"$t/src/high/b.c"
    printf '#include "own.h"\n#include "low/a.h"\n#include "ckptfs.h"\n' >"$t/fs/x.c"
    : >"$t/fs/own.h"
    printf '#include "ckptfs.h"\n' >"$t/tools/t.c"
    [ "$2" = good ] && return
    printf '/* low reaches up */\n#include "high/b.h"\n' >"$t/src/low/up.c"
    printf '#include "a.h"\n' >"$t/src/low/bare.c"
    printf '#include "low/none.h"\n' >"$t/src/high/gone.c"
    printf '#include "high/b.h"\n' >>"$t/tools/t.c"
    printf '#include "low/a.h"\n' >"$t/src/ckptfs_mpi.h"
    mkdir -p "$t/src/stray" && printf '/* s */\n' >"$t/src/stray/s.c"
    printf '/* flat */\n' >"$t/src/flat.c"
}

self_test() {
    local tmp rc=0 out
    tmp=$(mktemp -d) || return 1
    make_tree "$tmp/good" good
    if out=$(check "$tmp/good"); then
        echo "ok - self-test: a tree that keeps the rules passes"
    else
        echo "not ok - self-test: a tree that keeps the rules fails:"; echo "$out"; rc=1
    fi
    make_tree "$tmp/bad" bad
    out=$(check "$tmp/bad")
    if [ $? -ne 1 ]; then
        echo "not ok - self-test: a tree that breaks the rules passes"; rc=1
    fi
    local want
    for want in \
        'src/low/up.c:2: includes "high/b.h": layer low/ may not include high/' \
        'src/low/bare.c:1: includes "a.h": an internal header without its layer folder' \
        'src/high/gone.c:1: includes "low/none.h": no such header src/low/none.h' \
        'tools/t.c:2: includes "high/b.h": tools/ may use only the internal headers' \
        'src/ckptfs_mpi.h:1: includes "low/a.h": a public header may include only public ones' \
        'src/stray/s.c:1: folder src/stray/ is not a layer' \
        'src/flat.c:1: not in a layer folder'; do
        if grep -qF "$want" <<<"$out"; then
            echo "ok - self-test: reported: $want"
        else
            echo "not ok - self-test: not reported: $want"; rc=1
        fi
    done
    local n
    n=$(grep -c . <<<"$out")
    if [ "$n" -ne 7 ]; then
        echo "not ok - self-test: $n reports, want 7:"; echo "$out"; rc=1
    fi
    rm -rf "$tmp"
    return $rc
}

case ${1-} in
--self-test) self_test ;;
"")
    self_test || exit 1
    root=${CKPT_SRCDIR:-$(dirname "$0")/..}
    if out=$(check "$root"); then
        echo "ok - every include of src/, fs/ and tools/ keeps src/README.md's layer rules"
    else
        echo "not ok - includes that break src/README.md's layer rules:"; echo "$out"; exit 1
    fi ;;
*) check "$1" ;;
esac
