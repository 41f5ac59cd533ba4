/* storm — threads that come and go while their blocks die on other threads:
 * ROUNDS rounds of 2 threads, each making 20,000 allocations of mostly small random
 * sizes (16-255 B), one in 64 of them 10-1000 times larger, freeing random ones of its own,
 * and swapping half of them with the other thread through a shared table of 1,000 atomic
 * slots, so blocks are freed by another thread, often after their owner exited. What it
 * measures: a thread's first malloc and its exit, adopted heaps, remote frees. `storm
 * [ROUNDS]` (400). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define SLOTS 1000
#define LOCAL 256
#define OPS 20000

static _Atomic(void *) table[SLOTS];

static uint64_t next_random(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

static void *body(void *arg) {
  uint64_t s = (uint64_t)(uintptr_t)arg * 0x9e3779b97f4a7c15ull + 1;
  void *local[LOCAL] = {0};
  for (int i = 0; i < OPS; i++) {
    uint64_t r = next_random(&s);
    size_t size = 16 + r % 240;
    if ((r >> 20) % 64 == 0) size *= 10 + (r >> 30) % 990;
    void *p = malloc(size);
    if (p == NULL) abort();
    *(volatile char *)p = 1;
    if ((r >> 50) & 1) p = atomic_exchange(&table[(r >> 8) % SLOTS], p); /* swap with the other */
    unsigned k = (unsigned)((r >> 40) % LOCAL);
    free(local[k]);
    local[k] = p;
  }
  for (int k = 0; k < LOCAL; k++) free(local[k]);
  return NULL;
}

int main(int argc, char **argv) {
  int rounds = argc > 1 ? atoi(argv[1]) : 400;
  if (rounds < 0) {
    fprintf(stderr, "usage: storm [ROUNDS]\n");
    return 2;
  }
  for (int r = 0; r < rounds; r++) {
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
      if (pthread_create(&t[i], NULL, body, (void *)(uintptr_t)(r * 2 + i + 1)) != 0) return 1;
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
  }
  for (int i = 0; i < SLOTS; i++) free(atomic_exchange(&table[i], NULL));
  return 0;
}
