/* sizeclass.c — the size classes (types.h): at most 12.5 % waste above 128 B, seed 1's "bound
 * the waste a cache hands out" applied to every block (jemalloc and mimalloc allow 20-25 %).
 * _fg_class_of, in internal.h, is a few bit operations: the fast path reads no table. */
#include "internal.h"

/* Each class's size, a table: the slow paths ask often (every queue change sets the direct
 * table from it), and the walk through the doublings it replaced took 90 instructions for a
 * big class, a fifth of a realloc that gives a buffer its page. */
#define STEP(k, i) (((uint32_t)1 << (k)) + (i) * ((uint32_t)1 << ((k) - 3)))
#define DOUBLING(k) STEP(k, 1), STEP(k, 2), STEP(k, 3), STEP(k, 4), STEP(k, 5), STEP(k, 6), STEP(k, 7), STEP(k, 8)
#define PLUS_CLASS(k) (((uint32_t)1 << (k)) + FG_PLUS_##k)
#define CLASS_SIZES                                                                         \
  8, 16, 24, 32, 40, 48, 56, 64, 72, 80, 88, 96, 104, 112, 120, 128, /* the linear ones */      \
      DOUBLING(7), PLUS_CLASS(8), DOUBLING(8), PLUS_CLASS(9), DOUBLING(9), PLUS_CLASS(10),          \
      DOUBLING(10), PLUS_CLASS(11), DOUBLING(11), PLUS_CLASS(12), DOUBLING(12), PLUS_CLASS(13),     \
      DOUBLING(13), DOUBLING(14), DOUBLING(15), DOUBLING(16), DOUBLING(17), DOUBLING(18)
_Static_assert(sizeof((uint32_t[]){CLASS_SIZES}) == FG_CLASS_COUNT * sizeof(uint32_t), "a size per class");
const uint32_t _fg_class_sizes[FG_CLASS_COUNT] = {CLASS_SIZES};

/* The classes continued past the largest (the ledger's histogram buckets): 8 a doubling. */
size_t _fg_class_formula(size_t c) {
  if (c < FG_CLASS_COUNT) return _fg_class_sizes[c];
  size_t k = 19 + (c - FG_CLASS_COUNT) / 8, i = (c - FG_CLASS_COUNT) % 8 + 1;
  return ((size_t)1 << k) + i * ((size_t)1 << (k - 3));
}
