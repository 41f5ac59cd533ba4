/* sizeclass.c — the size classes (types.h): at most 12.5 % waste above 128 B, seed 1's "bound
 * the waste a cache hands out" applied to every block (jemalloc and mimalloc allow 20-25 %).
 * _fg_class_of, in internal.h, is a few bit operations or one load from a table built here:
 * the fast path (up to 1 KiB) reads the heap's direct table instead. */
#include "internal.h"

/* The class sizes, in order, as an X-macro: X(size, a) for each, `a` passed through. Each
 * class's size is a table (the slow paths ask often: every queue change sets the direct
 * table from it, and the walk through the doublings it replaced took 90 instructions for a
 * big class, a fifth of a realloc that gives a buffer its page), and so is the class of each
 * size up to FG_SMALL_MAX: both come from this one list. */
#define STEP(k, i) (((uint32_t)1 << (k)) + (i) * ((uint32_t)1 << ((k) - 3)))
#define DOUBLING(X, a, k)                                                                            \
  X(STEP(k, 1), a) X(STEP(k, 2), a) X(STEP(k, 3), a) X(STEP(k, 4), a) X(STEP(k, 5), a) X(STEP(k, 6), a) \
      X(STEP(k, 7), a) X(STEP(k, 8), a)
#define PLUS_CLASS(X, a, k) X(((uint32_t)1 << (k)) + FG_PLUS_##k, a)
#define CLASS_LIST(X, a)                                                                             \
  X(8, a) X(16, a) X(32, a) X(48, a) X(64, a) X(80, a) X(96, a) X(112, a) X(128, a) /* the linear ones */ \
      DOUBLING(X, a, 7) PLUS_CLASS(X, a, 8) DOUBLING(X, a, 8) PLUS_CLASS(X, a, 9) DOUBLING(X, a, 9)  \
      PLUS_CLASS(X, a, 10) DOUBLING(X, a, 10) PLUS_CLASS(X, a, 11) DOUBLING(X, a, 11)                \
      PLUS_CLASS(X, a, 12) DOUBLING(X, a, 12) PLUS_CLASS(X, a, 13) DOUBLING(X, a, 13)                \
      DOUBLING(X, a, 14) DOUBLING(X, a, 15) DOUBLING(X, a, 16) DOUBLING(X, a, 17) DOUBLING(X, a, 18)

#define AS_ITEM(size, a) size,
_Static_assert(sizeof((uint32_t[]){CLASS_LIST(AS_ITEM, 0)}) == FG_CLASS_COUNT * sizeof(uint32_t), "a size per class");
const uint32_t _fg_class_sizes[FG_CLASS_COUNT] = {CLASS_LIST(AS_ITEM, 0)};

/* The class of `s`: how many classes are smaller than it (a constant expression). */
#define SMALLER(size, s) +((size) < (s))
#define CLASS_OF(s) (0 CLASS_LIST(SMALLER, s))
#define BY16_1(i) CLASS_OF((i) * 16),
#define BY16_2(i) BY16_1(i) BY16_1((i) + 1)
#define BY16_8(i) BY16_2(i) BY16_2((i) + 2) BY16_2((i) + 4) BY16_2((i) + 6)
#define BY16_32(i) BY16_8(i) BY16_8((i) + 8) BY16_8((i) + 16) BY16_8((i) + 24)
#define BY16_128(i) BY16_32(i) BY16_32((i) + 32) BY16_32((i) + 64) BY16_32((i) + 96)
#define BY16_512(i) BY16_128(i) BY16_128((i) + 128) BY16_128((i) + 256) BY16_128((i) + 384)
_Static_assert(FG_SMALL_MAX / 16 == 512, "the table below has an entry per 16 bytes up to 8 KiB");
const uint8_t _fg_class_by16[FG_SMALL_MAX / 16 + 1] = {BY16_512(0) BY16_1(512)};
#define NOT_BY16(size, a) +((size) > 8 && (size) % 16 != 0)
_Static_assert((0 CLASS_LIST(NOT_BY16, 0)) == 0, "classes above 8 B are multiples of 16 bytes: 16-byte aligned blocks");

/* The classes continued past the largest (the ledger's histogram buckets): 8 a doubling. */
size_t _fg_class_formula(size_t c) {
  if (c < FG_CLASS_COUNT) return _fg_class_sizes[c];
  size_t k = 19 + (c - FG_CLASS_COUNT) / 8, i = (c - FG_CLASS_COUNT) % 8 + 1;
  return ((size_t)1 << k) + i * ((size_t)1 << (k - 3));
}
