/* churn.c — thread churn: 10,000 threads, 8 alive at a time, each allocates a mix of sizes
 * (about 0.6 MiB, sometimes a 1 MiB block), frees most of it and exits; some blocks are left
 * for the main thread to free (they outlive the heap that made them), and a TLS destructor
 * allocates and frees after the thread's own cleanup. Stated bound: resident memory never
 * grows more than 64 MiB above where it started — a per-thread leak of even 7 KiB would
 * exceed it over 10,000 threads. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "testutil.h"

#define THREADS 10000
#define AT_ONCE 8
#define BLOCKS 256       /* small blocks per thread, 8..4096 bytes */
#define LEFT_PER_THREAD 6
#define RSS_BOUND (64 * TU_MIB)

typedef struct left_s {
  unsigned char *p;
  size_t n;
  uint64_t key;
} left_t;

static pthread_mutex_t left_lock = PTHREAD_MUTEX_INITIALIZER;
static left_t left[AT_ONCE * LEFT_PER_THREAD];
static size_t n_left;
static pthread_key_t tls_key;
static long corrupt, failed;

static void count_failure(long *counter) {
  pthread_mutex_lock(&left_lock);
  (*counter)++;
  pthread_mutex_unlock(&left_lock);
}

/* Runs after the thread's start routine returned, possibly after the allocator's own
 * per-thread cleanup: freeing and allocating here must still work. */
static void tls_destructor(void *v) {
  left_t *b = (left_t *)v;
  if (tu_verify(b->p, b->n, b->key) >= 0)
    count_failure(&corrupt);
  free(b->p);
  free(b);
  void *late = malloc(200);
  if (!late)
    count_failure(&failed);
  free(late);
}

static void *churner(void *arg) {
  uint64_t index = (uint64_t)(uintptr_t)arg;
  tu_rng_t r = {tu_mix(index)};
  left_t blocks[BLOCKS + 5];
  size_t n = 0;
  for (; n < BLOCKS; n++)
    blocks[n].n = tu_range(&r, 8, 4096);
  for (int i = 0; i < 4; i++)
    blocks[n++].n = tu_range(&r, 16 << 10, 64 << 10);
  if (index % 10 == 0)
    blocks[n++].n = tu_range(&r, 1 << 20, 2 << 20);
  for (size_t i = 0; i < n; i++) {
    blocks[i].key = tu_mix(index * 1000 + i);
    blocks[i].p = (unsigned char *)malloc(blocks[i].n);
    if (!blocks[i].p) {
      count_failure(&failed);
      return NULL;
    }
    tu_fill(blocks[i].p, blocks[i].n, blocks[i].key);
  }
  /* The last few blocks (including the big ones) go to the main thread; the rest are
   * checked and freed here, in allocation order. */
  for (size_t i = 0; i < n; i++) {
    if (i + LEFT_PER_THREAD >= n) {
      pthread_mutex_lock(&left_lock);
      left[n_left++] = blocks[i];
      pthread_mutex_unlock(&left_lock);
      continue;
    }
    if (tu_verify(blocks[i].p, blocks[i].n, blocks[i].key) >= 0)
      count_failure(&corrupt);
    free(blocks[i].p);
  }
  left_t *late = (left_t *)malloc(sizeof *late);
  late->n = 300;
  late->key = index;
  late->p = (unsigned char *)malloc(late->n);
  tu_fill(late->p, late->n, late->key);
  pthread_setspecific(tls_key, late);
  return NULL;
}

int main(void) {
  pthread_key_create(&tls_key, tls_destructor);
  size_t start = tu_rss(), peak = start;
  long created = 0, create_failed = 0;
  double t0 = tu_now();
  check_note("start RSS %.1f MiB; bound: RSS <= start + %zu MiB throughout", start / 1048576.0,
             RSS_BOUND / TU_MIB);
  for (long base = 0; base < THREADS; base += AT_ONCE) {
    pthread_t t[AT_ONCE];
    int ok[AT_ONCE];
    for (int i = 0; i < AT_ONCE; i++) {
      ok[i] = pthread_create(&t[i], NULL, churner, (void *)(uintptr_t)(base + i)) == 0;
      created += ok[i];
      create_failed += !ok[i];
    }
    for (int i = 0; i < AT_ONCE; i++)
      if (ok[i])
        pthread_join(t[i], NULL);
    for (size_t i = 0; i < n_left; i++) {
      if (tu_verify(left[i].p, left[i].n, left[i].key) >= 0)
        corrupt++;
      free(left[i].p);
    }
    n_left = 0;
    size_t rss = tu_rss();
    if (rss > peak)
      peak = rss;
    if ((base / AT_ONCE) % 250 == 0)
      check_note("%ld threads: RSS %.1f MiB", base + AT_ONCE, rss / 1048576.0);
  }
  size_t final = tu_rss();
  check_note("%ld threads in %.1f s; RSS start %.1f, peak %.1f, final %.1f MiB", created,
             tu_now() - t0, start / 1048576.0, peak / 1048576.0, final / 1048576.0);
  CHECKF(created == THREADS && create_failed == 0, "%d threads created and joined", THREADS);
  CHECK("no allocation in a thread or its TLS destructor failed", failed == 0);
  CHECK("every block kept its contents until freed (by its thread, main, or a TLS destructor)",
        corrupt == 0);
  CHECKF(peak <= start + RSS_BOUND, "peak RSS %.1f MiB <= start %.1f + 64 MiB", peak / 1048576.0,
         start / 1048576.0);
  CHECKF(final <= start + RSS_BOUND, "final RSS %.1f MiB <= start %.1f + 64 MiB",
         final / 1048576.0, start / 1048576.0);
  return check_finish("churn");
}
