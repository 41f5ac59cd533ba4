#!/bin/sh
# run.sh FUZZER SECONDS WORKDIR — run the libFuzzer harness for SECONDS. New inputs go to
# WORKDIR/corpus (the checked-in seeds in tests/fuzz/corpus are read, never written), and a
# failing input is saved as WORKDIR/crash-<sha1>: replay it with `FUZZER WORKDIR/crash-...`.
set -eu
fuzzer=$1 seconds=$2 work=$3
seeds=$(dirname "$0")/corpus
if [ ! -x "$fuzzer" ]; then
  echo "fuzz: $fuzzer not built (clang missing?): skipped"
  exit 77
fi
mkdir -p "$work/corpus"
echo "fuzz: running $fuzzer for $seconds s; seeds $seeds, corpus $work/corpus"
# -rss_limit_mb: the harness holds at most 256 MiB live; 2 GiB means a leak, not a big input.
# -timeout: one input runs at most a few thousand steps, far below 30 s unless something hangs.
exec "$fuzzer" -max_total_time="$seconds" -max_len=4096 -timeout=30 -rss_limit_mb=2048 \
  -print_final_stats=1 -artifact_prefix="$work/" "$work/corpus" "$seeds"
