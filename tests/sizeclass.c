/* sizeclass.c — the size-class table seen from outside, through fg_usable_size: for every
 * size 1 .. 2 MiB (every byte to 64 KiB, then every 64 bytes) the usable size is >= the
 * request, equals the request rounded up to 8 up to 8 B and to 16 up to 128 B, is 16-byte aligned
 * from 16 B up (glibc's promise on 64-bit systems, which programs rely on), wastes <= 12.5 % above 128 B, never
 * shrinks as the request grows, is the smallest class that fits, and there are at most 8
 * distinct sizes per doubling (9 from 256 B to 16 KiB: a class right above the power of two). */
#include <stdint.h>

#include "apis.h"
#include "check.h"
#include "testutil.h"

#define FINE_LIMIT ((size_t)64 << 10)
#define LIMIT ((size_t)2 << 20)
#define COARSE_STEP 64

typedef struct tally_s {
  long below, not_round8, misaligned, waste, shrink, libc_differs, classes_over, early_jump;
  double worst_waste;
  size_t worst_waste_n;
} tally_t;

static void note_first(long count, const char *fmt, size_t n, size_t usable) {
  if (count <= 5)
    check_note(fmt, n, usable);
}

int main(void) {
  tally_t t = {0};
  size_t prev_usable = 0, prev_n = 0, checked = 0;
  /* Distinct usable sizes in the current doubling (2^k, 2^(k+1)], for 128 < n <= 64 KiB. */
  size_t doubling_top = 256, distinct = 0, last_in_doubling = 0;
  for (size_t n = 1; n <= LIMIT; n += n < FINE_LIMIT ? 1 : COARSE_STEP) {
    void *p = fg_malloc(tu_size(n));
    size_t usable = fg_usable_size(p);
    size_t libc_usable = malloc_usable_size(p);
    fg_free(p);
    checked++;
    if (libc_usable != usable && ++t.libc_differs <= 5)
      check_note("n=%zu: malloc_usable_size %zu != fg_usable_size %zu", n, libc_usable, usable);
    if (usable < n)
      note_first(++t.below, "n=%zu: usable %zu below the request", n, usable);
    if (n <= 128 && usable != (n <= 8 ? 8 : (n + 15) / 16 * 16))
      note_first(++t.not_round8, "n=%zu: usable %zu is not n rounded up to 8 (to 16 above 8)", n, usable);
    if (n >= 16 && ((uintptr_t)p & 15) != 0)
      note_first(++t.misaligned, "n=%zu: block not 16-byte aligned (usable %zu)", n, usable);
    if (n > 128 && usable >= n) {
      double w = (double)(usable - n) / (double)n;
      if (w > t.worst_waste) {
        t.worst_waste = w;
        t.worst_waste_n = n;
      }
      if ((usable - n) * 8 > n)
        note_first(++t.waste, "n=%zu: usable %zu wastes more than 12.5 %%", n, usable);
    }
    if (usable < prev_usable && ++t.shrink <= 5)
      check_note("n=%zu: usable %zu < usable %zu of n=%zu", n, usable, prev_usable, prev_n);
    /* The smallest class that fits: a request moves to a bigger class only once the one
     * before is full (byte by byte, where the sizes are checked one by one). */
    if (n <= FINE_LIMIT && n > 1 && usable != prev_usable && prev_usable != n - 1 && ++t.early_jump <= 5)
      check_note("n=%zu: usable %zu, but n-1 had usable %zu, which n fits", n, usable, prev_usable);
    if (n > 128 && n <= FINE_LIMIT) {
      if (n > doubling_top) {
        doubling_top *= 2;
        distinct = 0;
      }
      if (distinct == 0 || usable != last_in_doubling) {
        distinct++;
        last_in_doubling = usable;
        /* Doublings from 256 B to 8 KiB have one more class, right above their power of two. */
        size_t allowed = doubling_top >= 512 && doubling_top <= 16384 ? 9 : 8;
        if (distinct == allowed + 1 && ++t.classes_over <= 5)
          check_note("doubling up to %zu: more than %zu classes (at n=%zu, usable %zu)",
                     doubling_top, allowed, n, usable);
      }
    }
    prev_usable = usable;
    prev_n = n;
  }
  check_note("%zu sizes checked; worst waste above 128 B: %.2f %% at n=%zu", checked,
             t.worst_waste * 100.0, t.worst_waste_n);
  CHECKF(t.below == 0, "usable size >= request for all %zu sizes 1..2 MiB (%ld below)", checked,
         t.below);
  CHECKF(t.not_round8 == 0, "usable size == request rounded up to 8 for 1..8, to 16 for 9..128 (%ld differ)",
         t.not_round8);
  CHECKF(t.misaligned == 0, "every block of 16 bytes or more is 16-byte aligned (%ld are not)", t.misaligned);
  CHECKF(t.waste == 0, "waste (usable-n)/n <= 12.5 %% for all sizes 129..2 MiB (%ld over)",
         t.waste);
  CHECKF(t.shrink == 0, "usable size is non-decreasing in the request (%ld decreases)", t.shrink);
  CHECKF(t.early_jump == 0, "each request 1..64 KiB gets the smallest class that fits (%ld do not)", t.early_jump);
  CHECKF(t.classes_over == 0, "at most 8 distinct usable sizes per doubling 128 B..64 KiB, 9 from 256 B "
                              "to 16 KiB (%ld doublings over)",
         t.classes_over);
  CHECKF(t.libc_differs == 0, "malloc_usable_size == fg_usable_size for every size (%ld differ)",
         t.libc_differs);
  CHECK("fg_usable_size(NULL) == 0", fg_usable_size(NULL) == 0);
  void *a = fg_malloc(1000), *b = fg_malloc(1000);
  CHECK("two live blocks of one size report the same usable size",
        fg_usable_size(a) == fg_usable_size(b));
  fg_free(a);
  fg_free(b);
  return check_finish("sizeclass");
}
