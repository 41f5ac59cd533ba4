// oom_inject_new.cpp — the C++ side of oom_inject.c: for n = 1 … 50, with fg_test_fail_os(n)
// re-armed before every call, a mixed sequence of operator new forms (plain, array, aligned,
// nothrow) and standard containers growing. Each must succeed or throw std::bad_alloc
// (nothrow: return nullptr); a container that throws while growing keeps its old contents
// (the strong guarantee of push_back); live blocks keep their patterns; fg_heap_check() stays
// true; with the injection off, everything works again. The hook fails one mapping, which
// frugal's retries absorb; a child then does the same under a real RLIMIT_AS at several heights,
// where new must throw.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <sys/resource.h>
#include <string>
#include <vector>

#include "check.h"
#include "frugal.h"
#include "testutil.h"

namespace {

const int SLOTS = 32;
const int CALLS = 120;

struct block {
  unsigned char *p = nullptr;
  size_t n = 0;
  size_t align = 0; // 0: plain new[]; otherwise aligned operator new
  uint64_t key = 0;
};

struct tally {
  long calls = 0, threw = 0, nulls = 0;
  long corrupt = 0, misaligned = 0, heap_broken = 0, wrong_exception = 0;
  bool clean() const { return corrupt + misaligned + heap_broken + wrong_exception == 0; }
};

block blk[SLOTS];
std::vector<uint64_t> *grown; // a container that grows across calls
tu_rng_t rng;

void drop(tally &t, block &b) {
  if (b.p == nullptr) return;
  if (tu_verify(b.p, b.n, b.key) >= 0) t.corrupt++;
  if (b.align)
    ::operator delete(b.p, std::align_val_t(b.align));
  else
    delete[] b.p;
  b.p = nullptr;
}

void adopt(block &b, void *p, size_t n, size_t align) {
  b.p = static_cast<unsigned char *>(p);
  b.n = n;
  b.align = align;
  b.key = tu_next(&rng);
  tu_fill(b.p, n, b.key);
}

// Check the growing container: element i holds i ^ its tag.
bool grown_intact() {
  for (size_t i = 0; i < grown->size(); i++)
    if ((*grown)[i] != (i ^ 0x5a5a5a5aull)) return false;
  return true;
}

void one_call(tally &t, unsigned k, block &b, long rearm) {
  static const tu_band_t sizes[] = {{60, 1, 1024}, {30, 1025, 256 << 10}, {10, 600 << 10, 6 << 20}};
  size_t n = tu_pick_size(&rng, sizes, 3);
  size_t align = size_t(1) << tu_range(&rng, 4, 16);
  drop(t, b);
  fg_test_fail_os(rearm);
  t.calls++;
  try {
    switch (k % 5) {
    case 0:
      adopt(b, tu_ptr(new unsigned char[n]), n, 0);
      break;
    case 1: {
      void *p = tu_ptr(::operator new(n, std::align_val_t(align)));
      if (reinterpret_cast<uintptr_t>(p) % align != 0) t.misaligned++;
      adopt(b, p, n, align);
      break;
    }
    case 2: {
      unsigned char *p = static_cast<unsigned char *>(tu_ptr(new (std::nothrow) unsigned char[n]));
      if (p == nullptr)
        t.nulls++;
      else
        adopt(b, p, n, 0);
      break;
    }
    case 3: { // push_back until a reallocation happens: on bad_alloc the vector is unchanged
      size_t before = grown->size();
      try {
        do
          grown->push_back(grown->size() ^ 0x5a5a5a5aull);
        while (grown->size() != grown->capacity() && grown->size() < (8u << 20));
      } catch (const std::bad_alloc &) {
        if (grown->size() < before || !grown_intact()) t.corrupt++;
        throw;
      }
      if (grown->size() >= (8u << 20)) grown->clear(), grown->shrink_to_fit();
      break;
    }
    default: { // a string built by appending: many reallocations of growing sizes
      std::string s;
      for (size_t i = 0; i < n / 64 + 1; i++) s.append(64, char('a' + i % 26));
      if (s.size() != (n / 64 + 1) * 64) t.corrupt++;
      break;
    }
    }
  } catch (const std::bad_alloc &) {
    t.threw++;
  } catch (...) {
    t.wrong_exception++;
  }
  fg_test_fail_os(0);
}

void sequence(tally &t, long rearm) {
  for (int c = 0; c < CALLS; c++) {
    one_call(t, unsigned(tu_next(&rng)), blk[tu_range(&rng, 0, SLOTS - 1)], rearm);
    if (c % 16 == 15 && !fg_heap_check()) t.heap_broken++;
  }
  for (block &b : blk) drop(t, b);
  if (!grown_intact()) t.corrupt++;
  if (!fg_heap_check()) t.heap_broken++;
}

// The same sequence under RLIMIT_AS at several heights above the process's size: there the
// failures last, so operator new must really throw (the hook's single failure is absorbed by
// frugal's retries).
void rlimit_child(void *) {
  check_passed = check_failed = 0; // the child's tally is its own
  static const size_t headroom_mib[] = {0, 1, 2, 4, 8, 16, 32, 64};
  struct rlimit orig;
  getrlimit(RLIMIT_AS, &orig);
  int bad = 0, with_failures = 0, not_recovered = 0;
  long failures = 0;
  for (size_t h : headroom_mib) {
    for (int round = 0; round < 4; round++) {
      tally t;
      fg_collect(true);
      struct rlimit rl = {tu_vmsize() + h * TU_MIB, orig.rlim_max};
      if (setrlimit(RLIMIT_AS, &rl) != 0) _exit(90);
      sequence(t, 0);
      if (setrlimit(RLIMIT_AS, &orig) != 0) _exit(91);
      failures += t.threw + t.nulls;
      with_failures += t.threw + t.nulls > 0;
      if (!t.clean()) {
        bad++;
        check_note("RLIMIT_AS = VmSize + %zu MiB: corrupt %ld, misaligned %ld, heap check "
                   "failed %ld, other exception %ld", h, t.corrupt, t.misaligned, t.heap_broken,
                   t.wrong_exception);
      }
      tally r;
      sequence(r, 0);
      if (!r.clean() || r.threw + r.nulls != 0) not_recovered++;
    }
  }
  check_note("RLIMIT_AS at VmSize + 0 … 64 MiB, 32 rounds: %ld calls threw or returned nullptr, "
             "in %d rounds", failures, with_failures);
  CHECK("under RLIMIT_AS: success or std::bad_alloc (nullptr for nothrow), contents intact, "
        "fg_heap_check() true", bad == 0);
  CHECK("under RLIMIT_AS: operator new failed in the low limits (the limits bit)",
        with_failures >= 8);
  CHECK("after lifting RLIMIT_AS, every round's sequence succeeds again", not_recovered == 0);
  std::fflush(stdout);
  _exit(check_finish("oom_inject_new (RLIMIT_AS child)"));
}

} // namespace

int main(int argc, char **argv) {
  int rounds = argc > 1 ? std::atoi(argv[1]) : 50;
  rng.state = 0xc0ffee; // fixed: a failure replays
  grown = new std::vector<uint64_t>;
  int bad = 0, with_failures = 0, not_recovered = 0;
  long failures = 0;
  for (int n = 1; n <= rounds; n++) {
    tally t;
    fg_collect(true); // empty caches: the round needs fresh mappings
    sequence(t, n);
    failures += t.threw + t.nulls;
    with_failures += t.threw + t.nulls > 0;
    if (!t.clean()) {
      bad++;
      check_note("n = %d: corrupt %ld, misaligned %ld, heap check failed %ld, other exception "
                 "%ld", n, t.corrupt, t.misaligned, t.heap_broken, t.wrong_exception);
    }
    tally r;
    sequence(r, 0);
    if (!r.clean() || r.threw + r.nulls != 0) not_recovered++;
  }
  check_note("%d rounds of %d calls with the n-th mapping of each call failing: %ld calls threw "
             "bad_alloc or returned nullptr, in %d rounds", rounds, CALLS, failures, with_failures);
  CHECK("new, new[], aligned new, nothrow new and growing containers under injected failures: "
        "success or std::bad_alloc (nullptr for nothrow), patterns and contents intact, "
        "fg_heap_check() true", bad == 0);
  CHECK("with the injection off, every round's sequence succeeds again", not_recovered == 0);

  tu_child_t c;
  char how[64];
  CHECK("the RLIMIT_AS child ran", tu_run_child(rlimit_child, nullptr, 120, &c));
  if (!tu_child_exited_ok(&c))
    check_note("child ended with %s; stderr: %s", tu_child_how(&c, how, sizeof how), c.err);
  CHECK("the RLIMIT_AS child was not killed by a signal (no crash under exhaustion)",
        !WIFSIGNALED(c.status));
  CHECK("the RLIMIT_AS child exited 0 (all its checks passed)", tu_child_exited_ok(&c));
  delete grown;
  return check_finish("oom_inject_new");
}
