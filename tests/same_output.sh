#!/bin/sh
# same_output.sh — run a program twice, on glibc's malloc and under LD_PRELOAD=LIB, and
# require the same stdout and exit status: frugal must be invisible to a correct program.
# Usage: same_output.sh LIB COMMAND [ARGS...]
set -u
lib=$1
shift
if [ ! -f "$lib" ]; then
  echo "FAIL library $lib not found"
  exit 1
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export LC_ALL=C
# The test runner's own variable, not an allocator option: keep it out of the programs.
unset FRUGAL_STRESS_SECONDS

# The preload must really be in effect, or the comparison proves nothing.
if LD_PRELOAD="$lib" cat /proc/self/maps | grep -q "$(basename "$lib")"; then
  echo "ok   $(basename "$lib") is mapped into a process started with LD_PRELOAD"
else
  echo "FAIL $(basename "$lib") is not mapped under LD_PRELOAD"
  exit 1
fi

"$@" >"$tmp/plain.out" 2>"$tmp/plain.err"
plain_rc=$?
LD_PRELOAD="$lib" "$@" >"$tmp/frugal.out" 2>"$tmp/frugal.err"
frugal_rc=$?

fail=0
if [ "$plain_rc" -eq 0 ] && [ -s "$tmp/plain.out" ]; then
  echo "ok   without the preload: exit 0, $(wc -c <"$tmp/plain.out") bytes of output"
else
  echo "FAIL without the preload: exit $plain_rc, output empty or failed"
  head -c 2000 "$tmp/plain.err"
  fail=1
fi
if [ "$frugal_rc" -eq "$plain_rc" ]; then
  echo "ok   exit status under LD_PRELOAD is the same ($frugal_rc)"
else
  echo "FAIL exit status under LD_PRELOAD is $frugal_rc, without it $plain_rc"
  head -c 2000 "$tmp/frugal.err"
  fail=1
fi
if cmp -s "$tmp/plain.out" "$tmp/frugal.out"; then
  echo "ok   stdout under LD_PRELOAD is byte-identical ($(wc -c <"$tmp/frugal.out") bytes)"
else
  echo "FAIL stdout under LD_PRELOAD differs:"
  cmp "$tmp/plain.out" "$tmp/frugal.out" | head -5
  head -c 2000 "$tmp/frugal.err"
  fail=1
fi
if grep -q '^frugal: ' "$tmp/frugal.err"; then
  echo "FAIL frugal printed on stderr:"
  grep '^frugal: ' "$tmp/frugal.err" | head -5
  fail=1
else
  echo "ok   no frugal: line on stderr"
fi
echo "$*: $([ $fail -eq 0 ] && echo passed || echo FAILED)"
exit $fail
