/* pair.c — the fast path's workload for the instruction budget: N malloc/free pairs of one
 * small size, after a warm-up, so that the difference between two N is the pairs alone. */
#include <stdlib.h>

int main(int argc, char **argv) {
  long n = argc > 1 ? atol(argv[1]) : 100000;
  size_t size = argc > 2 ? (size_t)atol(argv[2]) : 32;
  void *volatile sink;
  for (int i = 0; i < 1000; i++) {
    sink = malloc(size);
    free(sink);
  }
  for (long i = 0; i < n; i++) {
    sink = malloc(size);
    free(sink);
  }
  (void)sink;
  return 0;
}
