#!/bin/bash
# Makes (once) and prints the path of a Debian root with a newer PyTorch, to
# build libckptfs in and run the Python tests against torch 2.x:
#   scripts/torch-root.sh sid      # torch 2.14, safetensors 0.8, numpy 2.4
#   scripts/torch-root.sh trixie   # torch 2.6
# The root is kept in $CKPTFS_ROOT_CACHE (default /var/cache/ckptfs/roots)
# and reused by later runs on the same machine.  Needs root and debootstrap
# (scripts/setup-deps.sh installs it).  Prints only the root's path on stdout.
set -euo pipefail
suite=${1:?usage: torch-root.sh SUITE}
cache=${CKPTFS_ROOT_CACHE:-/var/cache/ckptfs/roots}
root=$cache/$suite
mirror=${CKPTFS_MIRROR:-http://deb.debian.org/debian}
# What the Python tests and a build without FUSE and MPI need inside.
PACKAGES="python3 python3-torch python3-safetensors python3-numpy
  python3-zstandard build-essential autoconf automake libtool pkg-config
  libzstd-dev zstd libsqlite3-dev sqlite3 libxxhash-dev check"

PACKAGES=$(echo $PACKAGES)
install_packages() {   # ROOT: installs what of PACKAGES is missing there
    # shellcheck disable=SC2086
    chroot "$1" env DEBIAN_FRONTEND=noninteractive sh -c '
        missing=""
        for p in "$@"; do
            dpkg-query -W -f="\${Status}" "$p" 2>/dev/null |
                grep -q "install ok installed" || missing="$missing $p"
        done
        [ -z "$missing" ] && exit 0
        apt-get update -q && apt-get install -y -q --no-install-recommends $missing
    ' sh $PACKAGES >&2
}
if [ -f "$root/.ckptfs-ready" ]; then
    install_packages "$root"
    echo "$root"
    exit 0
fi
mkdir -p "$cache"
rm -rf "$root.tmp"
echo "torch-root: debootstrap $suite into $root" >&2
debootstrap --variant=minbase "$suite" "$root.tmp" "$mirror" >&2
# sid's Release on the mirror can be older than its Valid-Until.
echo 'Acquire::Check-Valid-Until "false";' > "$root.tmp/etc/apt/apt.conf.d/99ckptfs"
cp /etc/resolv.conf "$root.tmp/etc/resolv.conf" 2>/dev/null || true
install_packages "$root.tmp"
touch "$root.tmp/.ckptfs-ready"
mv "$root.tmp" "$root"
echo "$root"
