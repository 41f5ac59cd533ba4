#!/usr/bin/env bash
# Installs the build into a scratch prefix, then builds and runs a program against it twice:
# with pkg-config and with CMake's find_package. Usage: check.sh BUILD_DIR
set -euo pipefail
build=$1
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
export LD_LIBRARY_PATH="$tmp/prefix/lib"
PKG_CONFIG_PATH="$tmp/prefix/lib/pkgconfig" cc "$here/consumer.c" -o "$tmp/pc" \
  $(PKG_CONFIG_PATH="$tmp/prefix/lib/pkgconfig" pkg-config --cflags --libs frugal)
"$tmp/pc" | sed 's/$/ (pkg-config)/'
cmake -S "$here" -B "$tmp/cm" -DCMAKE_PREFIX_PATH="$tmp/prefix" >/dev/null
cmake --build "$tmp/cm" >/dev/null
"$tmp/cm/consumer" | sed 's/$/ (find_package)/'
echo "install: 2 checks, 0 failed"
