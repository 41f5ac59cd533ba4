/* sizeclass.c — frugal's size classes: 8-byte steps up to 128 B, then 8 classes per doubling
 * up to FG_CLASS_MAX (512 KiB), and from 256 B to 8 KiB one more class 16 bytes above each
 * power of two. The step above 128 B is 1/8 of the doubling's lower bound, so a block is at
 * most 12.5 % bigger than the request (jemalloc and mimalloc allow 20-25 %): seed 1's "bound
 * the waste a cache hands out", applied to every block. The extra class is for requests of a
 * power of two plus a small header (sqlite asks for 4096 + 8 and 1024 + 8 bytes: 12 % waste in
 * the next regular class, the most any class allows). _fg_class_of is inline, in internal.h:
 * a few bit operations rather than a table, so the fast path reads no extra cache line. */
#include "internal.h"

size_t _fg_class_size(size_t c) {
  if (c < FG_CLASS_LINEAR) return (c + 1) * 8;
  size_t i = c - FG_CLASS_LINEAR;
  for (size_t k = 7;; k++) { /* the doubling (2^k, 2^(k+1)]: its extra class first, if it has one */
    size_t plus = k >= FG_CLASS_PLUS_FIRST && k <= FG_CLASS_PLUS_LAST;
    if (i < plus) return ((size_t)1 << k) + 16;
    i -= plus;
    if (i < 8) return ((size_t)1 << k) + (i + 1) * ((size_t)1 << (k - 3));
    i -= 8;
  }
}

fg_segment_kind_t _fg_class_kind(size_t c) {
  size_t size = _fg_class_size(c);
  if (size <= FG_SMALL_MAX) return FG_SEG_SMALL;
  if (size <= FG_MEDIUM_MAX) return FG_SEG_MEDIUM;
  return FG_SEG_SINGLE;
}
