/* realloc.c — realloc keeps min(old, new) bytes for every pair of size classes, growing and
 * shrinking, small <-> large, keeps every usable byte when growing, and realloc(p, huge) fails
 * with ENOMEM leaving p intact (also run with the ledger on: realloc_ledger). A large block
 * that cannot grow where it is (the address space behind it taken) moves its pages rather
 * than copy them: the kept part takes no page fault. A buffer alone in its page grows where it
 * is, and the next one grows through the pages it left.
 * Sizes walk the class table from outside: 0..128 step 8, then 8 steps per doubling. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>

#include "apis.h"
#include "check.h"
#include "testutil.h"

#define MAX_MATRIX ((size_t)4 << 20)
/* Bytes of the old block filled past the part that must survive: enough to catch a copy
 * that starts or ends at the wrong place, small enough that the 143^2 pairs stay quick. */
#define SLACK 4096

static size_t class_sizes(size_t *out) {
  size_t n = 0;
  for (size_t s = 0; s <= 128; s += 8)
    out[n++] = s;
  for (size_t base = 128; base < MAX_MATRIX; base *= 2) {
    if (base >= 256 && base <= 8192) /* the class right above 2^k (types.h's FG_PLUS) */
      out[n++] = base + (base == 2048 ? 64 : base == 4096 ? 272 : base == 8192 ? 128 : 16);
    for (size_t j = 1; j <= 8; j++)
      out[n++] = base + j * (base / 8);
  }
  return n;
}

static size_t min_size(size_t a, size_t b) { return a < b ? a : b; }

/* malloc(from), fill, realloc(to): the first min(from, to) bytes must survive and the new
 * block must be writable up to `to`. Returns 0 when good, else prints what went wrong. */
static int one_pair(void *(*re)(void *, size_t), size_t from, size_t to, uint64_t key,
                    int *reported) {
  unsigned char *p = (unsigned char *)malloc(from);
  size_t keep = min_size(from, to);
  size_t filled = min_size(from, keep + SLACK);
  if (!p)
    return 1;
  tu_fill(p, filled, key);
  unsigned char *q = (unsigned char *)re(p, to);
  const char *why = NULL;
  long bad = -1;
  if (to == 0) {
    /* realloc(p, 0) frees p and returns NULL (glibc); nothing is kept. */
    if (!q)
      return 0;
    why = "realloc(p, 0) did not return NULL";
  } else if (!q)
    why = "returned NULL";
  else if ((bad = tu_verify(q, keep, key)) >= 0)
    why = "lost contents";
  else if (fg_usable_size(q) < to)
    why = "usable size below the new size";
  if (why) {
    if ((*reported)++ < 20)
      check_note("realloc(%zu -> %zu) %s (first bad byte %ld)", from, to, why, bad);
    if (q)
      free(q);
    return 1;
  }
  if (to > keep)
    q[keep] = 0x42;
  q[to - 1] = 0x42;
  free(q);
  return 0;
}

/* Every ordered pair of sizes in the table, through the given realloc. */
static void matrix(const char *name, void *(*re)(void *, size_t), const size_t *sizes, size_t n,
                   size_t stride) {
  int reported = 0;
  long grow_bad = 0, shrink_bad = 0, pairs = 0;
  for (size_t i = 0; i < n; i += stride) {
    for (size_t j = 0; j < n; j += stride) {
      int bad = one_pair(re, sizes[i], sizes[j], tu_mix(i * 1000 + j), &reported);
      pairs++;
      if (sizes[j] >= sizes[i])
        grow_bad += bad;
      else
        shrink_bad += bad;
    }
  }
  CHECKF(grow_bad == 0, "%s: growing keeps contents over %ld size-class pairs 0..4 MiB (%ld bad)",
         name, pairs, grow_bad);
  CHECKF(shrink_bad == 0,
         "%s: shrinking keeps contents over %ld size-class pairs 0..4 MiB (%ld bad)", name, pairs,
         shrink_bad);
}

/* Small <-> large: every table size to and from 8, 16 and 32 MiB blocks. */
static void small_large(const size_t *sizes, size_t n) {
  static const size_t large[] = {8u << 20, 16u << 20, 32u << 20};
  int reported = 0;
  long up_bad = 0, down_bad = 0;
  for (size_t i = 0; i < n; i++) {
    for (size_t l = 0; l < sizeof large / sizeof large[0]; l++) {
      up_bad += one_pair(realloc, sizes[i], large[l], tu_mix(i + 7 * l), &reported);
      down_bad += one_pair(realloc, large[l], sizes[i], tu_mix(i + 11 * l), &reported);
    }
  }
  CHECKF(up_bad == 0, "realloc small -> 8/16/32 MiB keeps contents for all %zu sizes (%ld bad)",
         n, up_bad);
  CHECKF(down_bad == 0, "realloc 8/16/32 MiB -> small keeps contents for all %zu sizes (%ld bad)",
         n, down_bad);
}

/* One buffer grown a byte at a time, then shrunk a byte at a time: the vector pattern. */
static void byte_steps(void) {
  size_t top = 4096;
  unsigned char *p = NULL;
  int ok = 1;
  for (size_t n = 1; n <= top && ok; n++) {
    p = (unsigned char *)realloc(p, n);
    if (!p) {
      ok = 0;
      break;
    }
    p[n - 1] = (unsigned char)(n * 31);
    for (size_t i = 0; i < n; i++)
      if (p[i] != (unsigned char)((i + 1) * 31))
        ok = 0;
  }
  CHECK("realloc growing one buffer 1 -> 4096 bytes a byte at a time keeps every byte", ok);
  for (size_t n = top - 1; n >= 1 && ok; n--) {
    p = (unsigned char *)realloc(p, n);
    if (!p) {
      ok = 0;
      break;
    }
    for (size_t i = 0; i < n; i++)
      if (p[i] != (unsigned char)((i + 1) * 31))
        ok = 0;
  }
  CHECK("realloc shrinking it 4095 -> 1 bytes a byte at a time keeps every byte", ok);
  free(p);
}

/* realloc(p, huge) for every table size: NULL, ENOMEM, p live and intact. */
static void huge(const size_t *sizes, size_t n) {
  long bad = 0;
  for (size_t i = 1; i < n; i++) {
    unsigned char *p = (unsigned char *)malloc(sizes[i]);
    size_t filled = min_size(sizes[i], 65536);
    tu_fill(p, filled, i);
    errno = 0;
    void *q = realloc(p, tu_size(i % 2 ? SIZE_MAX : (size_t)PTRDIFF_MAX + 1));
    int e = errno;
    if (q != NULL || e != ENOMEM || tu_verify(p, filled, i) >= 0) {
      if (bad++ < 10)
        check_note("realloc(p[%zu], huge) -> %p errno %d", sizes[i], q, e);
    }
    free(q ? q : p);
  }
  CHECKF(bad == 0,
         "realloc(p, SIZE_MAX or PTRDIFF_MAX+1) -> NULL, ENOMEM, p intact for %zu sizes (%ld bad)",
         n - 1, bad);
}

/* malloc_usable_size promises its bytes: a program may write all of them (redis's strings
 * do), and a growing realloc keeps every one, not only the request. */
static void usable_kept(const size_t *sizes, size_t n) {
  long bad = 0;
  for (size_t i = 1; i < n; i++) {
    size_t asked = sizes[i] - sizes[i] / 3; /* inside the class, below its size */
    unsigned char *p = (unsigned char *)malloc(asked);
    size_t usable = malloc_usable_size(p);
    tu_fill(p, usable, tu_mix(i));
    unsigned char *q = (unsigned char *)realloc(p, usable * 2 + 64);
    long at = q ? tu_verify(q, usable, tu_mix(i)) : 0;
    if ((q == NULL || at >= 0) && bad++ < 10)
      check_note("malloc(%zu), %zu usable bytes written, realloc to %zu: byte %ld lost", asked, usable,
                 usable * 2 + 64, at);
    free(q ? q : p);
  }
  CHECKF(bad == 0, "a growing realloc keeps all malloc_usable_size bytes, not only the request (%zu sizes, "
         "%ld lost some)", n - 1, bad);
}

static long minor_faults(void) {
  struct rusage ru;
  getrusage(RUSAGE_THREAD, &ru);
  return ru.ru_minflt;
}

/* An 8 MiB block, every page written, with a page mapped right behind its mapping (a large
 * block is a mapping of its own from a 4 MiB boundary, its header page first), grown to
 * 12 MiB: it cannot grow in place, and a copy would fault in the 8 MiB it keeps. The ledger
 * (realloc_ledger) hooks realloc into allocate, copy, free: the fault count is not checked
 * there. */
static void grow_blocked(void) {
  const size_t mib = (size_t)1 << 20;
  unsigned char *p = (unsigned char *)malloc(8 * mib);
  tu_fill(p, 8 * mib, 99);
  uintptr_t end = ((uintptr_t)p & ~(uintptr_t)(4 * mib - 1)) + 4096 + 8 * mib;
  void *wall = mmap((void *)end, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  long f0 = minor_faults();
  unsigned char *q = (unsigned char *)realloc(p, 12 * mib);
  long faults = minor_faults() - f0;
  CHECK("realloc 8 -> 12 MiB with the address space behind taken keeps the contents",
        q != NULL && tu_verify(q, 8 * mib, 99) < 0);
  if (getenv("FRUGAL_STATS_FILE") == NULL)
    CHECKF(faults < 64, "...and moves the pages rather than copy them (%ld page faults; a copy takes 2048)",
           faults);
  memset(q + 8 * mib, 1, 4 * mib);
  free(q);
  if (wall != MAP_FAILED) munmap(wall, 4096);
}

/* A buffer grown by realloc 4 KiB at a time from 12 to 500 KiB, written as it grows, then
 * freed, twice: every byte survives every step; a block alone in its page grows where it is
 * (heap.c's _fg_heap_regrow), so it moves only where no page of its own kind can hold the next
 * size (64 KiB: medium to single pages) or where it did not start alone in its page; and the
 * second buffer grows through the pages the first left, with next to no page faults (the
 * class-by-class walk moved it 37 times and faulted 226 pages in the second round). Not with the ledger,
 * whose realloc allocates, copies and frees. */
static void grow_in_place(void) {
  const size_t kib = 1024, step = 4 * kib, top = 500 * kib;
  bool plain = getenv("FRUGAL_STATS_FILE") == NULL;
  for (int round = 0; round < 2; round++) {
    unsigned char *p = malloc(12 * kib);
    tu_fill(p, 12 * kib, 40 + round);
    int moves = 0, lost = 0;
    long f0 = minor_faults();
    for (size_t n = 12 * kib; n < top; n += step) {
      unsigned char *q = realloc(p, n + step);
      if (q == NULL || tu_verify(q, n, 40 + round) >= 0) lost++;
      if (q == NULL) break;
      moves += q != p;
      tu_fill(q, n + step, 40 + round);
      p = q;
    }
    long faults = minor_faults() - f0;
    CHECKF(lost == 0, "round %d: a buffer grown by realloc 12 -> 500 KiB in 4 KiB steps keeps every byte", round + 1);
    if (plain) {
      CHECKF(moves <= 3, "round %d: ...and grows in place: %d moves (medium to single pages: 1; a walk: 37)", round + 1, moves);
      if (round == 1)
        CHECKF(faults < 16, "round 2: ...through the pages the first round left: %ld page faults (a walk: 226)", faults);
    }
    free(p);
  }
}

/* The waste bound holds after a shrinking realloc as after malloc (RELIABILITY.md, "Bounds
 * kept on every path"): a block trimmed to `to` leaves at most 12.5 % of itself unused (or 15
 * bytes up to 128 B, the 16-byte steps of the small classes; a large block also its page rounding). Every table size cut to
 * 1/16 ... 15/16 of itself, and the generous-then-trim case: malloc(1000), realloc(p, 520). */
static void shrink_bound(const size_t *sizes, size_t n) {
  long over = 0, pairs = 0;
  int reported = 0;
  for (size_t i = 0; i < n; i++) {
    for (size_t k = 1; k < 16; k++) {
      size_t from = sizes[i], to = from * k / 16;
      if (to == 0) continue;
      char *p = tu_ptr(malloc(from));
      memset(p, 'r', from);
      char *q = tu_ptr(realloc(p, to));
      size_t usable = malloc_usable_size(q);
      size_t allowed = (usable / 8 > 15 ? usable / 8 : 15) + (usable > (256 << 10) ? 4096 : 0);
      pairs++;
      if (usable < to || usable - to > allowed || q[to - 1] != 'r') {
        over++;
        if (reported++ < 10) check_note("realloc(%zu -> %zu): usable %zu", from, to, usable);
      }
      free(q);
    }
  }
  CHECKF(over == 0, "a shrinking realloc leaves at most 12.5 %% of the block unused: %ld pairs (%ld over)", pairs,
         over);
  char *p = tu_ptr(malloc(1000));
  char *q = tu_ptr(realloc(p, 520));
  CHECKF(malloc_usable_size(q) <= 520 + 520 / 8, "malloc(1000), realloc(p, 520): %zu usable bytes (at most 585)",
         malloc_usable_size(q));
  free(q);
}

int main(void) {
  size_t sizes[200];
  size_t n = class_sizes(sizes);
  check_note("%zu sizes: 0..128 step 8, then 8 per doubling (9 from 256 B to 16 KiB) up to %zu", n, sizes[n - 1]);
  double t0 = tu_now();
  matrix("realloc", realloc, sizes, n, 1);
  matrix("fg_realloc (every 3rd size)", fg_realloc, sizes, n, 3);
  small_large(sizes, n);
  byte_steps();
  usable_kept(sizes, n);
  shrink_bound(sizes, n);
  huge(sizes, n);
  grow_blocked();
  grow_in_place();
  check_note("took %.1f s", tu_now() - t0);
  return check_finish("realloc");
}
