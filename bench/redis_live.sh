#!/bin/bash
# redis_live.sh — frugal's control channel on a real server (docs/profiles.md, "A running
# server"): redis-server under LD_PRELOAD with the profile on, loaded by redis-benchmark for
# DURATION seconds while `frugal snapshot` runs every 5 s and `frugal top` runs in a tmux
# pane; then a diff of the first and last snapshots. Then the channel's cost: redis-benchmark's
# requests per second and the server's peak RSS with FRUGAL_CONTROL=1 against =0 (the profile
# on in both), REPS pairs interleaved, medians.
#
#   bench/redis_live.sh [OUT] [DURATION] [REPS]     (defaults: out/redis-live 60 5)
#
# Needs redis-server, redis-benchmark, redis-cli, tmux; `make build` and the venv (make venv).
# FRUGAL_LIB, FRUGAL_CLI and PORT name another library, frugal command or port.
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
out=$(realpath -m "${1:-$here/out/redis-live}")
duration=${2:-60}
reps=${3:-5}
lib=${FRUGAL_LIB:-$here/build/libfrugal.so}
frugal=${FRUGAL_CLI:-$here/.venv/bin/frugal}
port=${PORT:-7390}
for tool in redis-server redis-benchmark redis-cli tmux; do
  command -v $tool >/dev/null || { echo "redis_live: $tool is not installed" >&2; exit 2; }
done
[ -e "$lib" ] && [ -x "$frugal" ] || { echo "redis_live: make build venv first" >&2; exit 2; }
rm -rf "$out"
mkdir -p "$out"
export XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-$out/run}
mkdir -p "$XDG_RUNTIME_DIR" && chmod 700 "$XDG_RUNTIME_DIR"

# start_server CONTROL PROFILE_DIR: redis-server in the background; its pid in $server
start_server() {
  FRUGAL_CONTROL=$1 FRUGAL_PROFILE=$2 LD_PRELOAD=$lib \
    redis-server --port $port --save '' --appendonly no >"$out/redis-$1.log" 2>&1 &
  server=$!
  for _ in $(seq 200); do redis-cli -p $port ping >/dev/null 2>&1 && return 0; sleep 0.05; done
  echo "redis_live: redis-server did not start" >&2
  exit 1
}
stop_server() {
  redis-cli -p $port shutdown nosave >/dev/null 2>&1
  wait $server
}

# ---- the demo: load, snapshots every 5 s, top in tmux -------------------------------------
start_server 1 "$out/profile"
echo "redis-server pid $server; load for ${duration} s; snapshots in $out/snap-*"
tmux kill-session -t frugal-top 2>/dev/null
tmux new-session -d -s frugal-top -x 160 -y 50 -e XDG_RUNTIME_DIR="$XDG_RUNTIME_DIR" "$frugal top $server"
end=$((SECONDS + duration))
(while [ $SECONDS -lt $end ]; do
   redis-benchmark -p $port -n 200000 -d 100 -r 1000000 -q -t set,get,lpush,hset >>"$out/benchmark.txt" 2>&1
 done) &
load=$!
n=0
snap_failed=0
while [ $SECONDS -lt $end ]; do
  sleep 5
  n=$((n + 1))
  t0=$(date +%s.%N)
  if ! "$frugal" snapshot $server -o "$out/snap-$(printf %02d $n)" >"$out/snapshot.log" 2>&1; then
    snap_failed=$((snap_failed + 1))
    tail -3 "$out/snapshot.log"
  fi
  echo "snapshot $n: $(echo "$(date +%s.%N) - $t0" | bc) s"
done
wait $load
tmux capture-pane -p -t frugal-top >"$out/top.txt"
tmux kill-session -t frugal-top 2>/dev/null
stop_server
first=$(ls -d "$out"/snap-* | head -1)
last=$(ls -d "$out"/snap-* | tail -1)
"$frugal" diff "$first" "$last" -o "$out/diff" >"$out/diff.txt" 2>&1
echo "snapshots: $n taken, $snap_failed failed; top: $out/top.txt; diff: $out/diff.txt"
grep -c "requests per second" "$out/benchmark.txt" | sed 's/^/benchmark lines: /'

# ---- the channel's cost: FRUGAL_CONTROL=1 against 0, interleaved ---------------------------
# One run: SET and GET requests per second, then the server's VmHWM (KiB).
one_run() {
  start_server $1 "$out/cost-profile-$1"
  local rps
  rps=$(redis-benchmark -p $port -n 300000 -d 100 -r 100000 --csv -t set,get 2>/dev/null |
        grep -E '^"(SET|GET)"' | cut -d, -f2 | tr -d '"' | tr '\n' ' ')
  local hwm
  hwm=$(awk '/VmHWM/ {print $2}' /proc/$server/status)
  stop_server
  echo "$1 $rps$hwm"
}
: >"$out/cost.txt"
for r in $(seq $reps); do
  for c in 0 1; do one_run $c | tee -a "$out/cost.txt"; done
done
python3 - "$out/cost.txt" <<'EOF'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
med = {c: [statistics.median(float(r[i]) for r in rows if r[0] == c) for i in (1, 2, 3)] for c in ("0", "1")}
for i, what in enumerate(("SET rps", "GET rps", "peak RSS KiB")):
    off, on = med["0"][i], med["1"][i]
    print(f"{what:>13}: channel off {off:>11,.0f}  on {on:>11,.0f}  on/off {on / off:.3f}")
EOF
