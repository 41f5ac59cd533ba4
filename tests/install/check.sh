#!/usr/bin/env bash
# Installs the build into a scratch prefix, then builds and runs a program against it twice:
# with pkg-config and with CMake's find_package; then runs the installed frugal command from
# outside the checkout (its package installed from a wheel, schemas included). Usage:
# check.sh BUILD_DIR
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

# The frugal command: from a directory far from the checkout and its build, no FRUGAL_BUILD.
frugal=$tmp/prefix/bin/frugal
cd "$tmp"
unset FRUGAL_BUILD LD_LIBRARY_PATH
version=$(sed -n 's/^#define FRUGAL_VERSION "\(.*\)"/\1/p' "$here/../../include/frugal.h")
"$frugal" --version | tee version.txt
grep -q "^libfrugal $version ($tmp/prefix/lib/" version.txt
"$tmp/prefix/libexec/frugal/venv/bin/python" -c '
import json, frugal.compare as c, frugal.ledger as l
l.schema(); json.loads(c.SCHEMA_PATH.read_text()); print("schemas: package data present")'
"$frugal" run -o run -- sort /etc/passwd >/dev/null 2>run.txt
grep -q '"schema": "frugal-ledger/1"' run/ledger.json && test -s run/report.html
echo "frugal run: ledger.json and report.html"
"$frugal" compare -n 1 --allocators glibc,frugal -o cmp -- sort /etc/passwd >cmp.txt
grep -q '"name": "frugal"' cmp/results.json && test -s cmp/report.html
echo "frugal compare: results.json and report.html"
"$frugal" bench bufcache --smoke --allocators glibc,frugal --out lab >lab.txt 2>&1 || { cat lab.txt; exit 1; }
test -s lab/report.html
echo "frugal bench --smoke: report.html"
echo "install: 7 checks, 0 failed"
