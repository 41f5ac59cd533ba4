#!/usr/bin/env bash
# soak.sh BUILD MINUTES — `make soak`: run the threaded stress test, the fork test and the churn
# test in a loop for MINUTES, failing on the first failed check or when memory grows past the
# bounds below. RSS is read from outside, from /proc/PID/status (VmRSS) every 2 s while the
# stress test runs, and as the peak (VmHWM, via /usr/bin/time's %M) of each fork and churn run.
# Bounds, stated:
#  * stress: each run lasts STRESS_CHUNK s (default 120). Its RSS after the first 30 s must stay
#    under 1.5 x its peak over those 30 s + 64 MiB (its live set is bounded: 8 workers x 512
#    blocks + a 4096-block queue, so growth beyond that is a leak or unbounded caching), and no
#    run's peak may exceed 1.5 x the first run's peak + 64 MiB.
#  * fork, churn: no run's peak RSS may exceed 1.5 x the first run's + 32 MiB.
# A log of every run and sample is kept in BUILD/soak/.
set -euo pipefail
build=${1:?usage: soak.sh BUILD MINUTES}
minutes=${2:?usage: soak.sh BUILD MINUTES}
chunk=${STRESS_CHUNK:-120}
tests=$build/tests
log=$build/soak
mkdir -p "$log"
end=$(($(date +%s) + minutes * 60))
mib() { echo $(($1 / 1024)); }

# Run the stress test for $1 s, sampling its RSS; prints "warm_peak_kb late_peak_kb".
stress_run() {
  local secs=$1 out=$2 start pid rss warm=0 late=0 t
  start=$(date +%s)
  "$tests/test_stress" "$secs" >"$out" 2>&1 &
  pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$pid/status" 2>/dev/null || echo 0)
    rss=${rss:-0}
    t=$(($(date +%s) - start))
    if [ "$t" -lt 30 ]; then
      [ "$rss" -gt "$warm" ] && warm=$rss
    else
      [ "$rss" -gt "$late" ] && late=$rss
    fi
    echo "$t $rss" >>"$out.rss"
    sleep 2
  done
  if ! wait "$pid"; then
    echo "soak: FAIL test_stress exited non-zero; see $out" >&2
    tail -20 "$out" >&2
    exit 1
  fi
  echo "$warm $late"
}

# Run a test binary under /usr/bin/time; prints its peak RSS in KiB.
peak_run() {
  local name=$1 out=$2
  if ! /usr/bin/time -f '%M' -o "$out.peak" "$tests/test_$name" >"$out" 2>&1; then
    echo "soak: FAIL test_$name; see $out" >&2
    tail -20 "$out" >&2
    exit 1
  fi
  tail -1 "$out.peak"
}

iter=0 first_stress=0 first_fork=0 first_churn=0
echo "soak: $minutes min of stress ($chunk s runs), fork and churn; logs in $log"
while [ "$(date +%s)" -lt "$end" ]; do
  iter=$((iter + 1))
  left=$((end - $(date +%s)))
  secs=$((left < chunk ? (left < 40 ? 40 : left) : chunk))
  read -r warm late < <(stress_run "$secs" "$log/stress.$iter")
  peak=$((warm > late ? warm : late))
  [ "$iter" -eq 1 ] && first_stress=$peak
  if [ "$late" -gt $((warm * 3 / 2 + 65536)) ]; then
    echo "soak: FAIL stress run $iter grew: $(mib "$warm") MiB in its first 30 s, $(mib "$late") MiB later" >&2
    exit 1
  fi
  if [ "$peak" -gt $((first_stress * 3 / 2 + 65536)) ]; then
    echo "soak: FAIL stress run $iter peaked at $(mib "$peak") MiB, first run $(mib "$first_stress") MiB" >&2
    exit 1
  fi
  fork=$(peak_run fork "$log/fork.$iter")
  churn=$(peak_run churn "$log/churn.$iter")
  [ "$iter" -eq 1 ] && first_fork=$fork first_churn=$churn
  for t in fork churn; do
    now=${!t} first_var=first_$t
    first=${!first_var}
    if [ "$now" -gt $((first * 3 / 2 + 32768)) ]; then
      echo "soak: FAIL $t run $iter peaked at $(mib "$now") MiB, first run $(mib "$first") MiB" >&2
      exit 1
    fi
  done
  echo "soak: iteration $iter ok: stress ${secs} s, RSS $(mib "$warm") MiB (first 30 s) / $(mib "$late") MiB (after); fork peak $(mib "$fork") MiB; churn peak $(mib "$churn") MiB"
done
echo "soak: passed, $iter iterations in $minutes min"
