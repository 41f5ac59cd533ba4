#!/usr/bin/env bash
# sqlite.sh LIBFRUGAL — sqlite3 (Debian's) runs a generated insert / update / delete / query
# workload (gen_sql.py) on an in-memory database and on a file, once on glibc's malloc and once
# under LD_PRELOAD=LIBFRUGAL; the printed results must be identical, with no "frugal:" line.
# Exit 77 (ctest: skipped) without sqlite3.
set -euo pipefail
lib=$(realpath "$1")
here=$(dirname "$(realpath "$0")")
for b in sqlite3 python3; do
  command -v "$b" >/dev/null || { echo "sqlite: $b not installed (apt-get install sqlite3): skipped"; exit 77; }
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 "$here/gen_sql.py" "$work/workload.sql"
echo "sqlite: $(sqlite3 --version | cut -d' ' -f1), workload of $(wc -l <"$work/workload.sql") statements"
for db in :memory: file; do
  target=$db
  [ "$db" = file ] && target=$work/glibc.db
  sqlite3 "$target" <"$work/workload.sql" >"$work/glibc.$db.out" 2>&1
  [ "$db" = file ] && target=$work/frugal.db
  LD_PRELOAD=$lib sqlite3 "$target" <"$work/workload.sql" >"$work/frugal.$db.out" 2>"$work/frugal.$db.err"
  if grep -q 'frugal:' "$work/frugal.$db.err"; then
    echo "sqlite ($db): frugal reported a problem:"; cat "$work/frugal.$db.err"; exit 1
  fi
  if ! cmp -s "$work/glibc.$db.out" "$work/frugal.$db.out"; then
    echo "sqlite ($db): output differs from the run without frugal:"
    diff "$work/glibc.$db.out" "$work/frugal.$db.out" | head -20
    exit 1
  fi
  tail -1 "$work/frugal.$db.out" | grep -qx ok || { echo "sqlite ($db): integrity_check failed"; exit 1; }
  echo "sqlite ($db): $(wc -l <"$work/frugal.$db.out") lines of results identical with and without frugal"
done
echo "sqlite: passed"
