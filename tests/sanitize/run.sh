#!/usr/bin/env bash
# run.sh — `make sanitize`: the test suite under UBSan, and the threaded stress test under TSan,
# each in a build directory of its own (build-ubsan/, build-tsan/).
#  * UBSan (-fsanitize=undefined, every check fatal): the whole ctest suite — unit tests, the
#    stress test for $UBSAN_STRESS_SECONDS, the LD_PRELOAD programs — except the fast-path
#    instruction budget (instrumentation is what it would count) and the fuzz run (clang's).
#  * TSan: tests/stress.c built as stress_fg, and tests/share.c as share_fg — frugal linked
#    statically and called by its fg_ names (tests/sanitize/fg_names.h). TSan's runtime owns the
#    libc names (it calls malloc while it initialises, before an instrumented frugal could run),
#    so TSan sees every access and atomic inside frugal. Known reports are in
#    tests/sanitize/tsan.supp, each with its reason.
# Usage: tests/sanitize/run.sh [ubsan|tsan]... (both by default).
set -euo pipefail
cd "$(dirname "$0")/../.."
here=tests/sanitize
jobs=${JOBS:-$(nproc)}
ubsan_seconds=${UBSAN_STRESS_SECONDS:-10}
tsan_seconds=${TSAN_STRESS_SECONDS:-20}

configure() { # dir flags
  cmake -S . -B "$1" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFRUGAL_FUZZ=OFF \
    "-DCMAKE_C_FLAGS=$2" "-DCMAKE_CXX_FLAGS=$2" >/dev/null
}

ubsan() {
  echo "sanitize: UBSan build (build-ubsan/), ctest with the stress test for $ubsan_seconds s"
  configure build-ubsan "-fsanitize=undefined -fno-sanitize-recover=all -fno-omit-frame-pointer"
  cmake --build build-ubsan -j "$jobs" >/dev/null
  (cd build-ubsan && UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    FRUGAL_STRESS_SECONDS=$ubsan_seconds ctest --output-on-failure -j "$jobs" -E '^fastpath_budget$')
}

tsan() {
  echo "sanitize: TSan build (build-tsan/), stress_fg for $tsan_seconds s"
  configure build-tsan "-fsanitize=thread -fno-omit-frame-pointer"
  cmake --build build-tsan -j "$jobs" --target stress_fg share_fg >/dev/null
  # Guarded sampling off (it is on by default): when it took its stacks with libunwind, the
  # library's thread-exit destructor ran after TSan had torn the thread's state down and
  # crashed inside TSan's mutex interceptor (gdb: __tsan::MutexPreLock from
  # __nptl_deallocate_tsd). Guards have their own tests (guard, guard_underflow); this run is
  # about frugal's own synchronisation.
  FRUGAL_GUARD_EVERY=0 \
    TSAN_OPTIONS="halt_on_error=1 exitcode=66 second_deadlock_stack=1 suppressions=$PWD/$here/tsan.supp" \
    build-tsan/tests/stress_fg "$tsan_seconds"
  echo "sanitize: TSan: share_fg (pages lent and handed over between heaps)"
  FRUGAL_GUARD_EVERY=0 \
    TSAN_OPTIONS="halt_on_error=1 exitcode=66 second_deadlock_stack=1 suppressions=$PWD/$here/tsan.supp" \
    build-tsan/tests/share_fg
  # Again with the ledger and the control channel on, a client asking for the ledger and for a
  # collect all along: the channel's thread reads every heap while the workers run.
  echo "sanitize: TSan: stress_fg with the control channel answering meanwhile"
  local xdg
  xdg=$(mktemp -d)
  FRUGAL_GUARD_EVERY=0 FRUGAL_CONTROL=1 FRUGAL_STATS_FILE=/dev/null XDG_RUNTIME_DIR=$xdg \
    TSAN_OPTIONS="halt_on_error=1 exitcode=66 second_deadlock_stack=1 suppressions=$PWD/$here/tsan.supp" \
    build-tsan/tests/stress_fg "$tsan_seconds" &
  local pid=$! answers
  answers=$(python3 "$here/ask.py" "$xdg/frugal/$pid.sock" "$pid")
  wait "$pid"
  rm -rf "$xdg"
  echo "sanitize: TSan: no data race reported ($answers answers from the control channel)"
}

steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(ubsan tsan)
for s in "${steps[@]}"; do "$s"; done
echo "sanitize: passed (${steps[*]})"
