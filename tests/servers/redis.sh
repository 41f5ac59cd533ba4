#!/usr/bin/env bash
# redis.sh LIBFRUGAL — redis-server (Debian's) under LD_PRELOAD=LIBFRUGAL on 127.0.0.1, a free
# port: a deterministic writer stores strings, lists and hashes of 1 B … 64 KiB; redis-benchmark
# (200,000 requests per command, random keys, values of 8 B and 300 B; 50,000 of 5 KiB) loads SET, GET, LPUSH, LPOP,
# INCR and HSET; then every key of the writer is read back and compared, half of them are
# rewritten with other sizes and checked again. Fails on a lost or wrong key, a server crash,
# a non-zero exit at shutdown, or a "frugal:" line. Exit 77 (ctest: skipped) without redis.
set -euo pipefail
lib=$(realpath "$1")
here=$(dirname "$(realpath "$0")")
for b in redis-server redis-cli redis-benchmark python3; do
  command -v "$b" >/dev/null || { echo "redis: $b not installed (apt-get install redis-server redis-tools): skipped"; exit 77; }
done
work=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
pid=
cleanup() {
  [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

LD_PRELOAD=$lib redis-server --bind 127.0.0.1 --port "$port" --save '' --appendonly no \
  --dir "$work" --logfile "$work/redis.log" --daemonize no 2>"$work/stderr" &
pid=$!
for _ in $(seq 100); do
  redis-cli -p "$port" ping 2>/dev/null | grep -q PONG && break
  sleep 0.1
done
redis-cli -p "$port" ping | grep -q PONG || { echo "redis: server did not start"; cat "$work/redis.log"; exit 1; }
grep -q "$(basename "$lib")" "/proc/$pid/maps" || { echo "redis: frugal not mapped in the server"; exit 1; }
echo "redis: redis-server $(redis-server --version | grep -o 'v=[^ ]*') pid $pid on 127.0.0.1:$port with $lib"

python3 "$here/resp_check.py" "$port" write a
# value size:request count per command (5 KiB values fewer, to hold the server near 500 MiB)
for run in 8:200000 300:200000 5000:50000; do
  size=${run%:*} count=${run#*:}
  redis-benchmark -h 127.0.0.1 -p "$port" -n "$count" -r 200000 -d "$size" -c 20 -P 8 \
    -t set,get,lpush,lpop,incr,hset -q | tr '\r' '\n' | grep 'requests per second' |
    sed "s/^/redis: -d $size: /"
done
python3 "$here/resp_check.py" "$port" verify a
python3 "$here/resp_check.py" "$port" write b
python3 "$here/resp_check.py" "$port" verify b
# Debian links redis with libjemalloc for its statistics calls (mallctl, nallocx), but redis
# allocates with the plain names, which the preload sends to frugal: jemalloc's own count of
# allocated bytes must stay a small fraction of what redis holds.
info=$(redis-cli -p "$port" info memory | tr -d '\r')
used=$(echo "$info" | sed -n 's/^used_memory://p')
jemalloc=$(echo "$info" | sed -n 's/^allocator_allocated://p')
echo "redis: redis holds $((used >> 20)) MiB; $(echo "$info" | grep '^mem_allocator:') reports $((${jemalloc:-0} >> 20)) MiB allocated by itself"
if [ -n "$jemalloc" ] && [ "$jemalloc" -gt $((used / 10)) ]; then
  echo "redis: jemalloc, not frugal, served the server's memory"; exit 1
fi

redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true
status=0
wait "$pid" || status=$?
pid=
[ "$status" -eq 0 ] || { echo "redis: server exited with status $status"; tail -20 "$work/redis.log"; exit 1; }
if grep -q 'frugal:' "$work/stderr" "$work/redis.log"; then
  echo "redis: frugal reported a problem:"; grep 'frugal:' "$work/stderr" "$work/redis.log"; exit 1
fi
echo "redis: passed (no key lost, clean shutdown, no frugal: line)"
