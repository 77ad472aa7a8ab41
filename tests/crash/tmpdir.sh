# tests/crash/tmpdir.sh - sourced first by the crash matrix scripts: their
# temp dirs go to a memory file system (/dev/shm) when there is one, where
# an fsync costs nothing.  A kill -9 keeps the page cache, so what the
# matrix checks does not depend on the disk; only the trials get faster.
# CKPT_CRASH_TMPDIR chooses another place.
if [ -n "${CKPT_CRASH_TMPDIR:-}" ]; then
    export TMPDIR=$CKPT_CRASH_TMPDIR
elif [ -d /dev/shm ] && [ -w /dev/shm ]; then
    export TMPDIR=/dev/shm
fi
