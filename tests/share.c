/* share.c — pages other threads emptied go to the heap that needs one, while their owner is
 * away (issue 30). A producer fills 16 MiB of 1 KiB blocks and waits; another thread frees
 * them all; a third then allocates as much. It takes the producer's pages, not fresh memory:
 *   - soon: the frees come right after the pages went full, newest first, so that those
 *     emptied within the producer's wait stay with it, and the third thread takes them over
 *     (pages_handed_over); the older ones go back to their segment as below;
 *   - late: the frees come 50 ms later, so they give the pages back to the producer's segment,
 *     whose committed slots the third thread borrows (slots_lent);
 *   - woke: as soon, and the producer allocates two pages' worth before it waits again: it
 *     takes back a page at a time, and the rest stay where the third thread takes them (taken
 *     back all at once, they waited in its class queue);
 *   - own: as soon, and the third thread allocated a block before the frees: it has a segment
 *     of its own, whose other 63 slots were never touched. It still takes the producer's
 *     pages, memory already resident, before it touches those (it took its own first: 63
 *     pages, 4 MiB of fresh memory).
 * Either way RSS grows by at most a quarter of the 16 MiB; without either, by all of it. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "frugal-stats.h"
#include "testutil.h"

#define MIB ((size_t)1 << 20)
enum { N = 16 * 1024, SIZE = 1000 };

static void *blocks[N], *taken[N];
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t changed = PTHREAD_COND_INITIALIZER;
/* 1: the producer filled its blocks; 2: it may allocate once more (woke), 3: it did;
 * 4: the check is done, it may exit */
static int stage;
static unsigned free_delay_ms;
enum { WOKE = 128 }; /* two pages' worth: the producer's slow path runs at least once */
static void *woke_blocks[WOKE];

/* Steps only go forward: in soon and late, 4 comes before the producer's 3. */
static void step_set(int *step, int s) {
  pthread_mutex_lock(&lock);
  if (s > *step) *step = s;
  pthread_cond_broadcast(&changed);
  pthread_mutex_unlock(&lock);
}
static void step_wait(const int *step, int s) {
  pthread_mutex_lock(&lock);
  while (*step < s) pthread_cond_wait(&changed, &lock);
  pthread_mutex_unlock(&lock);
}
/* own's third thread, on steps of its own: 1: it has its first block; 2: it may allocate the rest */
static int taker_step;

static void *producer(void *arg) {
  (void)arg;
  for (int i = 0; i < N; i++) memset(blocks[i] = malloc(SIZE), 1, SIZE);
  step_set(&stage, 1);
  step_wait(&stage, 2);
  for (int i = 0; i < WOKE; i++) woke_blocks[i] = malloc(SIZE); /* its slow path finds its pages freed */
  step_set(&stage, 3);
  step_wait(&stage, 4); /* away: blocked, as a producer waiting for room in its queue */
  for (int i = 0; i < WOKE; i++) free(woke_blocks[i]);
  return NULL;
}

static void *freer(void *arg) {
  (void)arg;
  step_wait(&stage, 1);
  usleep(free_delay_ms * 1000);
  for (int i = N - 1; i >= 0; i--) free(blocks[i]); /* the pages that went full last, first */
  return NULL;
}

/* own: the third thread's first block, allocated before the producer's are freed. */
static bool taker_first;
static void *taker_first_block;

static void *taker(void *arg) {
  (void)arg;
  if (taker_first) { /* one block now (a segment of its own), the rest when told */
    memset(taker_first_block = malloc(SIZE), 2, SIZE);
    step_set(&taker_step, 1);
    step_wait(&taker_step, 2);
  }
  for (int i = 0; i < N; i++) memset(taken[i] = malloc(SIZE), 2, SIZE);
  return NULL;
}

static int run_case(const char *name) {
  free_delay_ms = strcmp(name, "late") == 0 ? 50 : 0;
  taker_first = strcmp(name, "own") == 0;
  pthread_t p, f, t;
  if (taker_first) {
    pthread_create(&t, NULL, taker, NULL);
    step_wait(&taker_step, 1);
  }
  pthread_create(&p, NULL, producer, NULL);
  pthread_create(&f, NULL, freer, NULL);
  pthread_join(f, NULL);
  if (strcmp(name, "woke") == 0) {
    step_set(&stage, 2);
    step_wait(&stage, 3);
  }
  size_t filled = tu_rss();
  fg_stats_t st0, st1;
  fg_stats_get(&st0);
  if (taker_first)
    step_set(&taker_step, 2);
  else
    pthread_create(&t, NULL, taker, NULL);
  pthread_join(t, NULL);
  fg_stats_get(&st1);
  size_t grown = tu_rss() - filled;
  uint64_t over = st1.pages_handed_over - st0.pages_handed_over, lent = st1.slots_lent - st0.slots_lent;
  /* 16 MiB of 1 KiB blocks are 256 pages of 64 KiB */
  CHECKF(grown <= 4 * MIB, "%s: a third thread allocating 16 MiB after another freed the producer's 16 MiB grew "
         "RSS by %.1f MiB (<= 4)", name, grown / (double)MIB);
  CHECKF(over + lent >= 200, "%s: it took the producer's pages: %llu handed over, %llu slots lent (of 256)", name,
         (unsigned long long)over, (unsigned long long)lent);
  if (taker_first)
    CHECKF(over + lent >= 250, "%s: before a slot of its own never touched: %llu handed over, %llu lent (of 256)",
           name, (unsigned long long)over, (unsigned long long)lent);
  if (free_delay_ms != 0)
    CHECKF(lent >= 200, "%s: the pages went back to their segment first, and it borrowed their slots: %llu lent",
           name, (unsigned long long)lent);
  bool bad = false;
  for (int i = 0; i < N; i++) {
    for (int j = 0; j < SIZE; j++) bad |= ((unsigned char *)taken[i])[j] != 2;
    free(taken[i]);
  }
  if (taker_first) {
    bad |= ((unsigned char *)taker_first_block)[SIZE - 1] != 2;
    free(taker_first_block);
  }
  CHECK("the blocks taken kept their contents", !bad);
  step_set(&stage, 4);
  pthread_join(p, NULL);
  return check_finish(name);
}

/* Each case in a fresh process: the other's pages would be there to take. */
int main(int argc, char **argv) {
  if (argc > 1) return run_case(argv[1]);
  const char *cases[] = {"soon", "late", "woke", "own"};
  int failed = 0;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
      execl("/proc/self/exe", "share", cases[i], (char *)NULL);
      _exit(127);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    failed |= !WIFEXITED(status) || WEXITSTATUS(status) != 0;
  }
  return failed;
}
