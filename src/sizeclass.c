/* sizeclass.c — the size classes (types.h): at most 12.5 % waste above 128 B, seed 1's "bound
 * the waste a cache hands out" applied to every block (jemalloc and mimalloc allow 20-25 %).
 * _fg_class_of, in internal.h, is a few bit operations: the fast path reads no table. */
#include "internal.h"

size_t _fg_class_size(size_t c) {
  if (c < FG_CLASS_LINEAR) return (c + 1) * 8;
  size_t i = c - FG_CLASS_LINEAR;
  for (size_t k = 7;; k++) { /* the doubling (2^k, 2^(k+1)]: its extra class first, if it has one */
    size_t plus = k >= FG_CLASS_PLUS_FIRST && k <= FG_CLASS_PLUS_LAST;
    if (i < plus) return ((size_t)1 << k) + FG_PLUS(k);
    i -= plus;
    if (i < 8) return ((size_t)1 << k) + (i + 1) * ((size_t)1 << (k - 3));
    i -= 8;
  }
}
