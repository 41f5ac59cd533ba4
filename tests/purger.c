/* purger.c — memory goes back while the program is quiet (issue 10, item 1). Each case runs
 * in a child started with FRUGAL_DECAY_MS=200, builds a working set, drops it, and then only
 * sleeps or runs malloc/free fast paths, where no decay pass of its own runs:
 *   - large blocks: a loop over 64 MiB blocks, then sleep: RSS back within 8 MiB of where it
 *     started within 2 x the decay time, given back by the purger (the ledger says so);
 *   - small blocks: 64 MiB of mixed 16 B - 8 KiB blocks, freed, then a fast-path loop;
 *   - a thread that exits leaves its caches to the purger too;
 *   - after fork the child starts a purger of its own and gets its memory back too;
 *   - FRUGAL_PURGE_THREAD=0: no thread is started, and the memory stays until a slow path;
 *   - growth (purger off): 64 MiB of large blocks cached and 15 free 200 KiB blocks, then 64
 *     MiB of small blocks: the cached block and the free blocks' pages go back as the heap
 *     grows, so the two never add up in RSS;
 *   - idle (decay 4 s): a large cache no request reached for a tenth of the decay time gives
 *     its blocks back at the purger's next pass, long before the decay time; while a loop
 *     asks for its 64 MiB buffer every 100 ms, the buffer stays cached (no page faults). */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "frugal-stats.h"
#include "frugal.h"
#include "testutil.h"

#define MIB ((size_t)1 << 20)
#define DECAY_MS 200
#define SLACK ((size_t)8 << 20) /* the bound: within 8 MiB of live */

static void large_set(void) {
  for (int i = 0; i < 8; i++) {
    char *p = malloc(64 * MIB);
    memset(p, i, 64 * MIB);
    free(p);
  }
}

static void small_set(void) {
  enum { N = 40000 };
  static void *blocks[N];
  tu_rng_t rng = {42};
  for (int round = 0; round < 2; round++) {
    for (int i = 0; i < N; i++) {
      size_t n = tu_range(&rng, 16, 3200);
      blocks[i] = malloc(n);
      memset(blocks[i], 1, n);
    }
    for (int i = 0; i < N; i++) free(blocks[i]);
  }
}

/* 64 MiB of 1 KiB blocks, then, after a while, another thread frees them all and exits: the
 * pages left their owner's hands full, and it allocates no more (a producer whose consumer
 * drained the queue while it waits on something else). */
enum { HANDOFF_N = 64 * 1024 };
static void *handoff_blocks[HANDOFF_N];
static void *free_handed(void *arg) {
  (void)arg;
  for (int i = 0; i < HANDOFF_N; i++) free(handoff_blocks[i]);
  return NULL;
}
static size_t handoff_set(void) {
  for (int i = 0; i < HANDOFF_N; i++) memset(handoff_blocks[i] = malloc(1000), 1, 1000);
  size_t built = tu_rss();
  usleep(50 * 1000);
  pthread_t t;
  pthread_create(&t, NULL, free_handed, NULL);
  pthread_join(t, NULL);
  return built;
}

static void *thread_set(void *arg) {
  small_set(); /* first: small pages that grow give back idle cached large blocks */
  large_set();
  *(size_t *)arg = tu_rss(); /* what it built, read before its exit and any decay pass can run */
  return NULL;
}

/* Quiet for up to `limit` seconds: sleeping, or malloc(64)/free on the fast path. Returns the
 * seconds until RSS was within SLACK of `start`, or -1. */
static double quiet_until(size_t start, bool fast_paths, size_t *rss, double limit) {
  void *keep = malloc(64); /* its page never empties: the loop below stays on the fast paths */
  double t0 = tu_now();
  while (tu_now() - t0 < limit) {
    if ((*rss = tu_rss()) <= start + SLACK) {
      free(keep);
      return tu_now() - t0;
    }
    if (fast_paths) {
      for (int i = 0; i < 1000; i++) free(malloc(64));
    }
    usleep(5000);
  }
  free(keep);
  return -1;
}

/* Up to 2 x the decay time, plus a second for a loaded machine. */
static double quiet_until_back(size_t start, bool fast_paths, size_t *rss) {
  return quiet_until(start, fast_paths, rss, 2 * DECAY_MS / 1000.0 + 1.0);
}

static long minor_faults(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_minflt;
}

#define IDLE_DECAY_MS 4000

static int idle_case(size_t start) {
  /* A hot loop first: its buffer, asked for every 100 ms (under a tenth of the decay time),
   * stays cached, so only the first round faults its pages in. */
  long faults = 0;
  for (int i = 0; i < 12; i++) {
    if (i == 1) faults = minor_faults();
    char *p = malloc(64 * MIB);
    memset(p, i, 64 * MIB);
    free(p);
    usleep(100 * 1000);
  }
  faults = minor_faults() - faults;
  CHECKF(faults < 1000, "idle: a 64 MiB buffer asked for every 100 ms stays cached: %ld page faults in 11 rounds",
         faults);
  size_t rss = 0;
  double took = quiet_until(start, false, &rss, IDLE_DECAY_MS / 1000.0);
  /* The purger looks every quarter of the decay time: the first look after the loop may still
   * see its requests, the next gives the block back. */
  CHECKF(took >= 0 && took < IDLE_DECAY_MS * 0.75 / 1000.0,
         "idle: then unasked, it goes back within %.2f s, < 3/4 of the decay time (%d ms): RSS %.1f MiB", took,
         IDLE_DECAY_MS, rss / (double)MIB);
  return check_finish("purger idle");
}

static int run_case(const char *name) {
  free(malloc(64)); /* the heap set up: its first segment is part of `start` */
  size_t start = tu_rss(), built, rss = 0;
  fg_stats_t st0, st1;
  fg_stats_get(&st0);
  bool fast = strcmp(name, "small") == 0;
  if (strcmp(name, "large") == 0) large_set();
  if (strcmp(name, "small") == 0) small_set();
  size_t thread_built = 0;
  if (strcmp(name, "handoff") == 0) {
    thread_built = handoff_set();
    fg_stats_get(&st1);
    CHECKF(st1.pages_handed_back - st0.pages_handed_back >= 900,
           "handoff: the other thread's frees gave back the pages they emptied: %llu of the 1,000 or so",
           (unsigned long long)(st1.pages_handed_back - st0.pages_handed_back));
  }
  if (strcmp(name, "thread") == 0) {
    pthread_t t;
    pthread_create(&t, NULL, thread_set, &thread_built);
    pthread_join(t, NULL);
  }
  if (strcmp(name, "fork") == 0) {
    pid_t pid = fork();
    if (pid == 0) { /* the child caches and must get it back by its own purger */
      large_set();
      built = tu_rss();
      double took = quiet_until_back(start, false, &rss);
      CHECKF(took >= 0 && built > start + 32 * MIB,
             "fork child: RSS %.1f -> %.1f -> %.1f MiB, back in %.2f s (its own purger)",
             start / (double)MIB, built / (double)MIB, rss / (double)MIB, took);
      _exit(check_failed != 0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK("fork: the child passed its check (above)", WIFEXITED(status) && WEXITSTATUS(status) == 0);
    return check_finish("purger fork");
  }
  if (strcmp(name, "idle") == 0) return idle_case(start);
  built = thread_built != 0 ? thread_built : tu_rss();
  if (strcmp(name, "sleep") == 0) { /* for verbose_events: the purger's pass ends, and says so */
    large_set();
    usleep(4 * DECAY_MS * 1000);
    return 0;
  }
  if (strcmp(name, "off") == 0) {
    large_set();
    built = tu_rss();
    usleep(3 * DECAY_MS * 1000);
    rss = tu_rss();
    CHECKF(tu_threads() == 1 && rss > start + 32 * MIB,
           "FRUGAL_PURGE_THREAD=0: %d thread, RSS %.1f MiB after 3 x the decay time asleep (kept: no "
           "slow path ran)",
           tu_threads(), rss / (double)MIB);
    return check_finish("purger off");
  }
  if (strcmp(name, "growth") == 0) {
    large_set();
    built = tu_rss();
    enum { BIG = 16, BIG_SIZE = 200 << 10 }; /* a class above 64 KiB: its one page holds 18 */
    static char *big[BIG];
    for (int i = 0; i < BIG; i++) memset(big[i] = malloc(BIG_SIZE), 1, BIG_SIZE);
    for (int i = 1; i < BIG; i++) free(big[i]); /* big[0] keeps their page in use */
    small_set();
    fg_stats_get(&st1);
    size_t peak = tu_status_bytes("VmHWM");
    uint64_t growth = st1.returned_growth_bytes - st0.returned_growth_bytes;
    CHECKF(built > start + 32 * MIB && growth >= 64 * MIB && st1.large_cache_bytes == 0,
           "growth: a cached 64 MiB block (RSS %.1f MiB) given back as small pages grew: %.1f MiB "
           "as pages grew, %.1f MiB left in the large cache",
           built / (double)MIB, growth / (double)MIB, st1.large_cache_bytes / (double)MIB);
    /* 15 free blocks of 200 KiB: all but their first OS page each (2.9 MiB) */
    CHECKF(growth >= 64 * MIB + 15 * (size_t)(BIG_SIZE - 4096),
           "growth: and the 15 free 200 KiB blocks idle meanwhile gave back their pages (%.1f MiB "
           "beyond the large block)", (growth - 64 * MIB) / (double)MIB);
    free(big[0]);
    CHECKF(peak < start + 100 * MIB, "growth: peak RSS %.1f MiB above the start (64 MiB large, then ~70 small; "
           "< 100: they did not add up)", (peak - start) / (double)MIB);
    return check_finish("purger growth");
  }
  double took = quiet_until_back(start, fast, &rss);
  fg_stats_get(&st1);
  CHECKF(took >= 0 && took <= 2 * DECAY_MS / 1000.0 + 1.0 && built > start + 32 * MIB,
         "%s: RSS %.1f -> %.1f -> %.1f MiB, within 8 MiB of the start %.2f s after going quiet "
         "(decay %d ms)",
         name, start / (double)MIB, built / (double)MIB, rss / (double)MIB, took, DECAY_MS);
  /* Reading RSS opens /proc files (stdio allocates), so a decay pass of this thread's own may
   * come first: the ledger must name one of the two. */
  uint64_t idle = st1.returned_idle_bytes - st0.returned_idle_bytes;
  uint64_t decay = st1.returned_decay_bytes - st0.returned_decay_bytes;
  CHECKF(idle + decay >= 32 * MIB && st1.purger_passes > st0.purger_passes,
         "%s: the ledger says who gave it back: %.1f MiB the purger, %.1f MiB decay passes; %llu purger "
         "passes",
         name, idle / (double)MIB, decay / (double)MIB, (unsigned long long)(st1.purger_passes - st0.purger_passes));
  /* With nothing left to give back the purger parks: one thread besides the program's, the
   * same one (started once: never again from a free, see purger.c), and no passes while
   * nothing is cached. Its end with the program's threads is lifetime.c's. */
  double t0 = tu_now(), quiet = -1; /* what is left (an exited thread's heap) expires first */
  while (quiet < 0 && tu_now() - t0 < 20 * DECAY_MS / 1000.0 + 2.0) {
    fg_stats_get(&st0);
    usleep(4 * DECAY_MS * 1000);
    fg_stats_get(&st1);
    if (st1.purger_passes == st0.purger_passes) quiet = tu_now() - t0;
  }
  int n = tu_threads();
  CHECKF(n == 2 && quiet >= 0,
         "%s: idle, the purger parks: %d threads (2: the program's and the purger), 4 x the decay time "
         "without a pass %.2f s after the check began",
         name, n, quiet);
  return check_finish(name);
}

/* Each case in a fresh process with a short decay time (options are read at start). */
static bool run_child(const char *name, bool purger) {
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    char decay[16];
    snprintf(decay, sizeof decay, "%d", strcmp(name, "idle") == 0 ? IDLE_DECAY_MS : DECAY_MS);
    setenv("FRUGAL_DECAY_MS", decay, 1);
    if (!purger) setenv("FRUGAL_PURGE_THREAD", "0", 1);
    execl("/proc/self/exe", "purger", name, (char *)NULL);
    _exit(127);
  }
  int status = 0;
  return pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

int main(int argc, char **argv) {
  if (argc > 1) return run_case(argv[1]);
  const char *cases[] = {"large", "small", "thread", "fork", "handoff"};
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
    CHECKF(run_child(cases[i], true), "case %s passed (above)", cases[i]);
  CHECK("case off passed (above)", run_child("off", false));
  CHECK("case growth passed (above)", run_child("growth", false));
  CHECK("case idle passed (above)", run_child("idle", true));
  return check_finish("purger");
}
