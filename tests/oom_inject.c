/* oom_inject.c — out of memory at many points: for n = 1 … 50, fg_test_fail_os(n) makes the
 * n-th OS mapping fail during a mixed sequence of every C allocation call (small, medium and
 * large blocks; calloc; realloc grow and shrink; aligned_alloc, posix_memalign, memalign,
 * valloc), once armed at the start of the round and once re-armed before every call. Every call
 * must succeed or fail with NULL + ENOMEM (posix_memalign: ENOMEM, *memptr untouched; realloc:
 * the old block intact); live blocks keep their patterns and fg_heap_check() stays true; after
 * fg_test_fail_os(0) every call works again. The hook fails every mapping from the n-th on, so
 * calls do fail (frugal's retries cannot absorb it); a real RLIMIT_AS set at several heights
 * above the process's size does the same with the kernel's own failures (oom.cpp exhausts the
 * address space one block size at a time; this fails mixed calls wherever the limit falls).
 * Usage: oom_inject [ROUNDS] (default 50). */
#include <errno.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "check.h"
#include "frugal.h"
#include "testutil.h"

#define SLOTS 48
#define CALLS 160 /* calls per round: enough to map a few segments and large blocks */

typedef struct blk_s {
  unsigned char *p;
  size_t n;
  uint64_t key;
} blk_t;

/* Outcome of a sequence; every field but `calls` and `failed` is an error count. */
typedef struct tally_s {
  long calls, failed;   /* calls made, calls that failed cleanly (NULL + ENOMEM) */
  long bad_errno;       /* failed with another errno, or posix_memalign wrote *memptr */
  long corrupt;         /* a live block or a failed realloc's block lost its pattern */
  long misaligned;      /* a block not aligned as asked */
  long not_zero;        /* calloc block not zeroed */
  long heap_broken;     /* fg_heap_check() false */
} tally_t;

static blk_t blk[SLOTS];
static tu_rng_t rng;

/* Small, medium, large (> 512 KiB, each its own mapping) — in percent. */
static const tu_band_t sizes[] = {{55, 1, 1024}, {30, 1025, 256 << 10}, {15, 600 << 10, 4 << 20}};

static void adopt(tally_t *t, int i, void *p, size_t n, size_t align) {
  blk[i].p = p;
  blk[i].n = n;
  blk[i].key = tu_next(&rng);
  if ((uintptr_t)p % align != 0) t->misaligned++;
  tu_fill(p, n, blk[i].key);
}

static void drop(tally_t *t, int i) {
  if (blk[i].p == NULL) return;
  if (tu_verify(blk[i].p, blk[i].n, blk[i].key) >= 0) t->corrupt++;
  free(blk[i].p);
  blk[i].p = NULL;
}

/* A failed call: NULL with errno ENOMEM is the only acceptable failure. */
static void failed(tally_t *t, int err) {
  t->failed++;
  if (err != ENOMEM) t->bad_errno++;
}

/* One call of the API chosen by k, into slot i. `rearm` > 0: fg_test_fail_os(rearm) first. */
static void one_call(tally_t *t, unsigned k, int i, long rearm) {
  size_t n = tu_pick_size(&rng, sizes, 3);
  size_t align = (size_t)1 << tu_range(&rng, 3, 16);
  if (k % 9 != 2 && k % 9 != 3) drop(t, i); /* the realloc calls keep the slot's block */
  if (rearm > 0) fg_test_fail_os(rearm);
  t->calls++;
  errno = 0;
  void *p = NULL;
  switch (k % 9) {
  case 0:
    p = malloc(n);
    break;
  case 1:
    p = calloc(1 + n % 7, n / 7 + 1);
    if (p != NULL && !tu_is_zero(p, (1 + n % 7) * (n / 7 + 1))) t->not_zero++;
    n = (1 + n % 7) * (n / 7 + 1);
    break;
  case 2: /* realloc grow (or from NULL) */
  case 3: /* realloc shrink */
    if (blk[i].p != NULL) {
      size_t to = k % 9 == 2 ? blk[i].n + n : blk[i].n / 3 + 1;
      void *q = realloc(blk[i].p, to);
      if (q == NULL) {
        failed(t, errno);
        if (tu_verify(blk[i].p, blk[i].n, blk[i].key) >= 0) t->corrupt++;
        return;
      }
      size_t keep = to < blk[i].n ? to : blk[i].n;
      if (tu_verify(q, keep, blk[i].key) >= 0) t->corrupt++;
      blk[i].p = NULL;
      adopt(t, i, q, to, 8);
      return;
    }
    p = realloc(NULL, n);
    break;
  case 4:
    p = aligned_alloc(align, n);
    break;
  case 5: {
    void *out = &blk[i]; /* must stay untouched on failure */
    int rc = posix_memalign(&out, align, n);
    if (rc != 0) {
      failed(t, rc);
      if (out != &blk[i]) t->bad_errno++;
      return;
    }
    p = out;
    break;
  }
  case 6:
    p = memalign(align, n);
    break;
  case 7:
    p = valloc(n);
    align = 4096;
    break;
  default: /* a large block on purpose: each needs a mapping of its own */
    n = tu_range(&rng, 1 << 20, 8 << 20);
    p = malloc(n);
    break;
  }
  if (p == NULL) {
    failed(t, errno);
    return;
  }
  adopt(t, i, p, n, k % 9 >= 4 && k % 9 <= 7 ? align : 8);
}

/* The mixed sequence: CALLS calls over the slots, the heap checked every 16 calls. */
static void sequence(tally_t *t, long rearm) {
  for (unsigned c = 0; c < CALLS; c++) {
    one_call(t, (unsigned)tu_next(&rng), (int)tu_range(&rng, 0, SLOTS - 1), rearm);
    if (c % 16 == 15 && !fg_heap_check()) t->heap_broken++;
  }
  if (rearm > 0) fg_test_fail_os(0);
  for (int i = 0; i < SLOTS; i++)
    if (blk[i].p != NULL && tu_verify(blk[i].p, blk[i].n, blk[i].key) >= 0) t->corrupt++;
  if (!fg_heap_check()) t->heap_broken++;
}

static void free_all(tally_t *t) {
  for (int i = 0; i < SLOTS; i++) drop(t, i);
}

static int clean(const tally_t *t) {
  return t->bad_errno + t->corrupt + t->misaligned + t->not_zero + t->heap_broken == 0;
}
static void print_errors(const char *what, const tally_t *t) {
  if (!clean(t))
    check_note("%s: bad errno %ld, corrupt %ld, misaligned %ld, calloc not zero %ld, heap "
               "check failed %ld", what, t->bad_errno, t->corrupt, t->misaligned, t->not_zero,
               t->heap_broken);
}

/* After the failures: with no injection, a full sequence must succeed call for call. */
static int recovers(void) {
  tally_t t = {0};
  sequence(&t, 0);
  free_all(&t);
  print_errors("recovery", &t);
  return clean(&t) && t.failed == 0;
}

static void injected(int rounds) {
  int rounds_with_failures = 0, bad_rounds = 0, rounds_not_recovered = 0;
  long total_failed = 0;
  for (int n = 1; n <= rounds; n++) {
    for (int rearmed = 0; rearmed < 2; rearmed++) {
      tally_t t = {0};
      fg_collect(true); /* empty caches: the round's blocks need fresh mappings */
      if (!rearmed) fg_test_fail_os(n);
      sequence(&t, rearmed ? n : 0);
      fg_test_fail_os(0);
      free_all(&t);
      if (!fg_heap_check()) t.heap_broken++;
      total_failed += t.failed;
      rounds_with_failures += t.failed > 0;
      if (!clean(&t)) {
        bad_rounds++;
        char what[64];
        snprintf(what, sizeof what, "n = %d%s", n, rearmed ? " (re-armed)" : "");
        print_errors(what, &t);
      }
      if (!recovers()) rounds_not_recovered++;
    }
  }
  check_note("%d rounds x 2 (armed once, re-armed before each call) of %d calls: %ld calls "
             "failed, in %d rounds", rounds, CALLS, total_failed, rounds_with_failures);
  CHECK("fg_test_fail_os(1..n): every failed call gave NULL + ENOMEM, no block lost its "
        "pattern, fg_heap_check() stayed true",
        bad_rounds == 0);
  CHECK("the injected exhaustion made calls fail (the failure paths ran)", rounds_with_failures > 0);
  CHECK("after fg_test_fail_os(0), a full sequence of every call succeeds again, each round",
        rounds_not_recovered == 0);
}

/* The same sequence under RLIMIT_AS at several heights above what the process maps now. The
 * soft limit moves; the hard one stays, so the limit can be lifted again. */
static void rlimit_child(void *arg) {
  (void)arg;
  check_passed = check_failed = 0; /* the child's tally is its own */
  static const size_t headroom_mib[] = {0, 1, 2, 4, 6, 8, 12, 16, 24, 32, 48, 64};
  const int heights = (int)(sizeof headroom_mib / sizeof headroom_mib[0]);
  struct rlimit orig;
  getrlimit(RLIMIT_AS, &orig);
  int bad = 0, with_failures = 0, not_recovered = 0;
  long total_failed = 0;
  for (int h = 0; h < heights; h++) {
    for (int round = 0; round < 4; round++) {
      tally_t t = {0};
      fg_collect(true);
      struct rlimit rl = {tu_vmsize() + headroom_mib[h] * TU_MIB, orig.rlim_max};
      if (setrlimit(RLIMIT_AS, &rl) != 0) _exit(90);
      sequence(&t, 0);
      free_all(&t);
      if (setrlimit(RLIMIT_AS, &orig) != 0) _exit(91);
      total_failed += t.failed;
      with_failures += t.failed > 0;
      if (!clean(&t)) {
        bad++;
        char what[64];
        snprintf(what, sizeof what, "RLIMIT_AS = VmSize + %zu MiB", headroom_mib[h]);
        print_errors(what, &t);
      }
      if (!recovers()) not_recovered++;
    }
  }
  check_note("RLIMIT_AS at VmSize + 0 … 64 MiB, %d rounds: %ld calls failed, in %d rounds",
             heights * 4, total_failed, with_failures);
  CHECK("under RLIMIT_AS: every failed call gave NULL + ENOMEM, patterns intact, heap "
        "consistent", bad == 0);
  CHECK("under RLIMIT_AS: calls failed (the limits bit)", with_failures >= heights);
  CHECK("after lifting RLIMIT_AS, a full sequence of every call succeeds again",
        not_recovered == 0);
  fflush(stdout);
  _exit(check_finish("oom_inject (RLIMIT_AS child)"));
}

int main(int argc, char **argv) {
  int rounds = argc > 1 ? atoi(argv[1]) : 50;
  rng.state = 0x00f00d5eedull; /* fixed: a failure replays */
  check_note("seed 0x%llx, %d rounds", (unsigned long long)rng.state, rounds);
  injected(rounds);

  tu_child_t c;
  char how[64];
  CHECK("the RLIMIT_AS child ran", tu_run_child(rlimit_child, NULL, 120, &c));
  if (!tu_child_exited_ok(&c))
    check_note("child ended with %s; stderr: %s", tu_child_how(&c, how, sizeof how), c.err);
  CHECK("the RLIMIT_AS child was not killed by a signal (no crash under exhaustion)",
        !WIFSIGNALED(c.status));
  CHECK("the RLIMIT_AS child exited 0 (all its checks passed)", tu_child_exited_ok(&c));
  return check_finish("oom_inject");
}
