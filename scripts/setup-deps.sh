#!/bin/sh
# Installs every Debian 12 package ckptfs needs to build, test, benchmark and
# run its demo. The one place the package list lives: README's quick start,
# .ci/run and the developers all call this script.
set -eu

PACKAGES="
  build-essential autoconf automake libtool pkg-config
  libzstd-dev zstd
  libsqlite3-dev sqlite3
  libxxhash-dev
  check
  libfuse3-dev fuse3 attr
  libopenmpi-dev openmpi-bin
  python3 python3-numpy python3-zstandard python3-torch
  clang libclang-rt-14-dev
  procps util-linux bsdextrautils bsdutils
  strace time
  debootstrap
"

missing=""
for p in $PACKAGES; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" \
        || missing="$missing $p"
done

if [ -z "$missing" ]; then
    echo "setup-deps: all packages present"
    exit 0
fi

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
echo "setup-deps: installing:$missing"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
# shellcheck disable=SC2086
$SUDO apt-get install -y -q --no-install-recommends $missing
