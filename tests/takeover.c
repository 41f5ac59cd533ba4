/* takeover.c — a thread whose first call frees a block an exited thread left takes that
 * thread's heap, whichever heap was abandoned last (issue #11's takeover shape: work arrays
 * passed to new threads). Its frees are then its own, and its mallocs hand those blocks out
 * again. Two threads allocate a set of blocks each and exit, the first before the second (so
 * the second's heap is the one a new thread's first malloc would take); a third thread frees
 * the first one's set, then allocates as many blocks of the size: each must be one it freed.
 * Before, the third thread's frees went to the first heap's remote list and its mallocs
 * carved in the second heap. CMake sets FRUGAL_DECAY_MS high, so that no decay pass collects
 * the exited threads' heaps meanwhile, and FRUGAL_GUARD_EVERY=0: a guarded sample would hand
 * out a block of its own. */
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

#define SET 64
#define SIZE 100

static void *sets[2][SET];
static void *taken[SET];
static pthread_barrier_t both_alive, second_may_exit;

static void *owner(void *arg) {
  int i = (int)(intptr_t)arg;
  for (int k = 0; k < SET; k++) {
    sets[i][k] = malloc(SIZE);
    if (sets[i][k] != NULL) memset(sets[i][k], 'a' + i, SIZE);
  }
  pthread_barrier_wait(&both_alive); /* two live threads: two heaps */
  if (i == 1) pthread_barrier_wait(&second_may_exit);
  return NULL;
}

static void *taker(void *arg) {
  (void)arg;
  for (int k = 0; k < SET; k++) free(sets[0][k]); /* its first calls */
  for (int k = 0; k < SET; k++) taken[k] = malloc(SIZE);
  return NULL;
}

static bool in_first_set(const void *p) {
  for (int k = 0; k < SET; k++)
    if (sets[0][k] == p) return true;
  return false;
}

int main(void) {
  pthread_barrier_init(&both_alive, NULL, 2);
  pthread_barrier_init(&second_may_exit, NULL, 2);
  pthread_t t[3];
  for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, owner, (void *)(intptr_t)i);
  pthread_join(t[0], NULL);
  pthread_barrier_wait(&second_may_exit);
  pthread_join(t[1], NULL);
  bool made = true;
  for (int i = 0; i < 2; i++)
    for (int k = 0; k < SET; k++) made = made && sets[i][k] != NULL;
  CHECK("two threads each allocated their set and exited", made);

  pthread_create(&t[2], NULL, taker, NULL);
  pthread_join(t[2], NULL);
  int reused = 0, distinct = 1;
  for (int k = 0; k < SET; k++) {
    reused += taken[k] != NULL && in_first_set(taken[k]);
    for (int j = 0; j < k; j++) distinct &= taken[j] != taken[k];
  }
  CHECKF(reused == SET, "the thread that freed the first set got its %d blocks back (%d of them)", SET, reused);
  CHECK("each block handed out once", distinct);

  bool intact = true; /* the second set, untouched by all this */
  for (int k = 0; k < SET; k++)
    for (int b = 0; b < SIZE; b++) intact = intact && ((unsigned char *)sets[1][k])[b] == 'b';
  CHECK("the second thread's blocks kept their contents", intact);
  for (int k = 0; k < SET; k++) {
    free(taken[k]);
    free(sets[1][k]);
  }
  return check_finish("takeover");
}
