#!/bin/bash
# docs.sh - README.md and docs/*.md say what the code does, where a script
# can tell: the commands README names are those `ckpt --help` lists; the
# "Building by hand" steps can be run again (mkdir -p); the `latest` rule
# is written in one place (docs/MOUNT.md) that README and docs/CLI.md
# point to; README describes both namings of shard files, and mount saves
# name theirs as it says (checked on a real save in tests/fs/mount_write.sh).
. "$(dirname "$0")/lib.sh"

README=$CKPT_SRCDIR/README.md
MOUNT=$CKPT_SRCDIR/docs/MOUNT.md
CLI=$CKPT_SRCDIR/docs/CLI.md

# ------------------------------------------------ the component line
run_ckpt --help
cmds=$(sed -n 's/^  \([a-z][a-z]*\) .*/\1/p' "$OUT" | LC_ALL=C sort | tr '\n' ' ')
line=$(grep -E '^ +ckpt \(tools/\) ' "$README")
named=$(echo "${line#*)}" | tr ',' '\n' | tr -d ' ' | grep -v '^$' | LC_ALL=C sort | tr '\n' ' ')
if [ -n "$cmds" ] && [ "$cmds" = "$named" ]; then
    ok "README's component line names every command of ckpt --help: $named"
else
    bad "README's component line names '$named'; ckpt --help lists '$cmds'"
fi

# ------------------------------------------------ building by hand
block=$(awk '/^## Building by hand/ { on = 1; next } /^## / { on = 0 } on && /^    / { print }' "$README")
if [ -z "$block" ]; then
    bad "README has no 'Building by hand' commands"
elif echo "$block" | grep -E '(^ *|[;&|] *)mkdir ' | grep -v -q -- 'mkdir -p'; then
    bad "README's 'Building by hand' has a mkdir that fails when run again: $(echo "$block" | grep 'mkdir')"
else
    ok "README's 'Building by hand' can be run again (every mkdir has -p)"
fi

# ------------------------------------------------ `latest` in one place
n=$(grep -c '^## `latest`' "$MOUNT")
[ "$n" -eq 1 ] && ok "docs/MOUNT.md has one section on \`latest\`" ||
    bad "docs/MOUNT.md has $n sections '## \`latest\`', want 1"
for f in "$README" "$CLI"; do
    if grep -q 'docs/MOUNT.md, "`latest`"' "$f"; then
        ok "$(basename "$f") points to docs/MOUNT.md's \`latest\` rule"
    else
        bad "$(basename "$f") does not point to docs/MOUNT.md, \"\`latest\`\""
    fi
done
if grep -n -i 'last name in\|greatest numeric `step`\|follows the greatest `step`' "$README" "$MOUNT" "$CLI" >"$TMP/old"; then
    bad "an older statement of the latest rule is left: $(head -n 2 "$TMP/old" | tr '\n' '~')"
else
    ok "no older statement of the latest rule is left"
fi

# ------------------------------------------------ shard file names
if grep -q 'data/rank0.shard' "$README" && grep -q '`<host>-<pid>-<6 hex digits>-<n>`' "$README"; then
    ok "README names shard files both ways: rank<R>, and <host>-<pid>-<6 hex digits>-<n> for mount saves"
else
    bad "README does not describe both namings of shard files"
fi

summary
