/* fork.c — fork() while 4 threads allocate and free: the child (where those threads do not
 * exist) must allocate, free blocks made before the fork by the main thread and by the busy
 * threads, start a thread of its own, and exit 0. A deadlock in the child (a lock held by a
 * thread that did not survive the fork) shows as SIGALRM after 20 s instead of a hang. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "testutil.h"

#define BUSY_THREADS 4
#define FORKS 24
#define PER_THREAD_PRE 8     /* pre-fork blocks each busy thread allocates and publishes */
#define MAIN_PRE 40          /* pre-fork blocks of the main thread */
#define NPRE (MAIN_PRE + BUSY_THREADS * PER_THREAD_PRE)

typedef struct pre_s {
  unsigned char *p;
  size_t n;
} pre_t;

static pre_t pre[NPRE];
static atomic_int published, stop;

/* Small, medium and large blocks, in percent. */
static const tu_band_t fork_sizes[] = {{85, 1, 1024}, {14, 1025, 128 << 10}, {1, 1 << 20, 4 << 20}};
static size_t some_size(tu_rng_t *r) { return tu_pick_size(r, fork_sizes, 3); }

static void *busy(void *arg) {
  int id = (int)(intptr_t)arg;
  tu_rng_t r = {tu_mix(0xF0 + id)};
  for (int i = 0; i < PER_THREAD_PRE; i++) {
    pre_t *b = &pre[MAIN_PRE + id * PER_THREAD_PRE + i];
    b->n = some_size(&r);
    b->p = (unsigned char *)malloc(b->n);
    tu_fill(b->p, b->n, (uint64_t)(uintptr_t)b);
  }
  atomic_fetch_add(&published, 1);
  void *slots[64] = {0};
  while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
    size_t i = tu_next(&r) % 64;
    if (tu_next(&r) % 4 == 0 && slots[i]) {
      slots[i] = realloc(slots[i], some_size(&r));
    } else {
      free(slots[i]);
      size_t n = some_size(&r);
      slots[i] = malloc(n);
      memset(slots[i], (int)i, n < 256 ? n : 256);
    }
  }
  for (int i = 0; i < 64; i++)
    free(slots[i]);
  return NULL;
}

static void *child_thread(void *arg) {
  (void)arg;
  void *ps[100];
  for (int i = 0; i < 100; i++)
    ps[i] = malloc((size_t)i * 40 + 1);
  for (int i = 0; i < 100; i++)
    free(ps[i]);
  return ps[0] ? (void *)1 : NULL;
}

/* In the child: check and free every pre-fork block, churn the heap, use a new thread. */
static void child(void *arg) {
  /* Exit codes: 10 a pre-fork block lost its contents, 11 malloc failed, 12 thread failed. */
  int round = (int)(intptr_t)arg;
  for (int i = 0; i < NPRE; i++) {
    if (tu_verify(pre[i].p, pre[i].n, (uint64_t)(uintptr_t)&pre[i]) >= 0)
      _exit(10);
    free(pre[i].p);
  }
  tu_rng_t r = {tu_mix(round)};
  void *slots[128] = {0};
  for (int step = 0; step < 20000; step++) {
    size_t i = tu_next(&r) % 128;
    free(slots[i]);
    size_t n = some_size(&r);
    slots[i] = malloc(n);
    if (!slots[i])
      _exit(11);
    memset(slots[i], 7, n < 512 ? n : 512);
  }
  for (int i = 0; i < 128; i++)
    free(slots[i]);
  pthread_t t;
  void *ok = NULL;
  if (pthread_create(&t, NULL, child_thread, NULL) != 0 || pthread_join(t, &ok) != 0 || !ok)
    _exit(12);
}

int main(void) {
  tu_rng_t r = {42};
  for (int i = 0; i < MAIN_PRE; i++) {
    pre[i].n = some_size(&r);
    pre[i].p = (unsigned char *)malloc(pre[i].n);
    tu_fill(pre[i].p, pre[i].n, (uint64_t)(uintptr_t)&pre[i]);
  }
  pthread_t threads[BUSY_THREADS];
  for (intptr_t i = 0; i < BUSY_THREADS; i++)
    pthread_create(&threads[i], NULL, busy, (void *)i);
  while (atomic_load(&published) < BUSY_THREADS) {
    struct timespec nap = {0, 1000 * 1000};
    nanosleep(&nap, NULL);
  }
  int good = 0;
  for (int f = 0; f < FORKS; f++) {
    struct timespec nap = {0, (long)(tu_next(&r) % 20) * 1000 * 1000};
    nanosleep(&nap, NULL);
    tu_child_t c;
    char how[64];
    int ran = tu_run_child(child, (void *)(intptr_t)f, 20, &c);
    if (ran && tu_child_exited_ok(&c))
      good++;
    else
      check_note("fork %d: child ended with %s; stderr: %s", f,
                 ran ? tu_child_how(&c, how, sizeof how) : "fork failed", c.err);
  }
  atomic_store(&stop, 1);
  for (int i = 0; i < BUSY_THREADS; i++)
    pthread_join(threads[i], NULL);
  CHECKF(good == FORKS,
         "%d forks while 4 threads allocate: every child freed %d pre-fork blocks, "
         "allocated, ran a thread and exited 0 (%d did)",
         FORKS, NPRE, good);
  int intact = 1;
  for (int i = 0; i < NPRE; i++) {
    if (tu_verify(pre[i].p, pre[i].n, (uint64_t)(uintptr_t)&pre[i]) >= 0)
      intact = 0;
    free(pre[i].p);
  }
  CHECK("the parent's pre-fork blocks are intact after the children freed their copies", intact);
  return check_finish("fork");
}
