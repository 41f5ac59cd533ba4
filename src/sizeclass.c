/* sizeclass.c — frugal's size classes: 8-byte steps up to 128 B, then 8 classes per doubling
 * up to FG_CLASS_MAX (512 KiB). The step above 128 B is 1/8 of the doubling's lower bound, so
 * a block is at most 12.5 % bigger than the request (jemalloc and mimalloc allow 20-25 %):
 * seed 1's "bound the waste a cache hands out", applied to every block. Computed with a few
 * bit operations rather than a table, so the fast path reads no extra cache line
 * (_fg_class_of is inline, in internal.h). */
#include "internal.h"

size_t _fg_class_size(size_t c) {
  if (c < FG_CLASS_LINEAR) return (c + 1) * 8;
  size_t g = (c - FG_CLASS_LINEAR) / 8, j = (c - FG_CLASS_LINEAR) % 8 + 1;
  return ((size_t)1 << (7 + g)) + j * ((size_t)1 << (4 + g));
}

fg_segment_kind_t _fg_class_kind(size_t c) {
  size_t size = _fg_class_size(c);
  if (size <= FG_SMALL_MAX) return FG_SEG_SMALL;
  if (size <= FG_MEDIUM_MAX) return FG_SEG_MEDIUM;
  return FG_SEG_SINGLE;
}
