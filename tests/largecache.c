/* largecache.c — the large cache's policies, seen through the ledger's counters
 * (fg_stats_get: large_cache_hits / misses), getrusage and RSS:
 *   - a hot loop over one 8 MiB buffer maps it once and takes no page faults afterwards;
 *   - a cached block is handed out as it is only if it wastes at most 12.5 % (a cached 32 MiB
 *     block serves 30 MiB); else it is cut down to the request (it serves 8 MiB as 8 MiB);
 *   - a thread reuses the blocks it freed; when it exits they serve other threads;
 *   - blocks a consumer thread frees (it allocated none) serve their producer again;
 *   - fg_collect(true) gives every cached block back at once;
 *   - with FRUGAL_DECAY_MS=50 (a child runs with it), cached blocks go back to the OS by
 *     themselves while the program only makes small calls. */
#include <malloc.h>
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
#define BLOCKS 64

static uint64_t hits(void) {
  fg_stats_t st;
  fg_stats_get(&st);
  return st.large_cache_hits;
}

static uint64_t misses(void) {
  fg_stats_t st;
  fg_stats_get(&st);
  return st.large_cache_misses;
}

static long minor_faults(void) {
  struct rusage ru;
  getrusage(RUSAGE_THREAD, &ru);
  return ru.ru_minflt;
}

static void hot_loop(void) {
  uint64_t m0 = misses();
  long faults = 0;
  for (int i = 0; i < 20; i++) {
    long f0 = minor_faults();
    char *p = malloc(8 * MIB);
    memset(p, i, 8 * MIB);
    free(p);
    if (i > 0) faults += minor_faults() - f0;
  }
  CHECKF(misses() - m0 == 1, "hot 8 MiB loop: mapped once (%llu maps for 20 rounds)",
         (unsigned long long)(misses() - m0));
  CHECKF(faults < 20, "hot 8 MiB loop: %ld page faults in rounds 2-20 (a fresh block: 2048 each)", faults);
}

static uint64_t reshapes(void) {
  fg_stats_t st;
  fg_stats_get(&st);
  return st.large_cache_reshapes;
}

static void waste_bound(void) {
  fg_collect(true);       /* nothing cached but: */
  free(malloc(32 * MIB)); /* this */
  uint64_t h0 = hits(), r0 = reshapes(), m0 = misses();
  void *close = malloc(30 * MIB);
  CHECK("a cached 32 MiB block serves 30 MiB as it is (6 % waste)", hits() == h0 + 1 && reshapes() == r0);
  free(close);
  void *small = malloc(8 * MIB);
  CHECKF(reshapes() == r0 + 1 && misses() == m0 && malloc_usable_size(small) <= 8 * MIB + MIB,
         "a cached 32 MiB block serves 8 MiB cut down to %zu KiB (75 %% waste not handed out, no new "
         "mapping)",
         malloc_usable_size(small) >> 10);
  free(small);
}

/* BLOCKS blocks of 1 MiB into p; returns how many came from the cache. */
static uint64_t alloc_all(void **p) {
  uint64_t h0 = hits();
  for (int i = 0; i < BLOCKS; i++) p[i] = malloc(MIB);
  return hits() - h0;
}

static void free_all(void **p) {
  for (int i = 0; i < BLOCKS; i++) free(p[i]);
}

/* Run fn(&result) in a thread of its own; return the result. */
static uint64_t in_thread(void *(*fn)(void *)) {
  uint64_t result = 0;
  pthread_t t;
  pthread_create(&t, NULL, fn, &result);
  pthread_join(t, NULL);
  return result;
}

static void *cycle_blocks(void *arg) {
  void *p[BLOCKS];
  alloc_all(p);
  free_all(p);
  *(uint64_t *)arg = alloc_all(p);
  free_all(p);
  return NULL;
}

static void thread_cache(void) {
  uint64_t reused = in_thread(cycle_blocks);
  CHECKF(reused == BLOCKS, "a thread reuses the %d blocks it freed (%llu reused)", BLOCKS,
         (unsigned long long)reused);
  void *p[BLOCKS];
  reused = alloc_all(p);
  CHECKF(reused == BLOCKS, "after it exits they serve another thread (%llu of %d reused)",
         (unsigned long long)reused, BLOCKS);
  free_all(p);
  fg_collect(true);
}

static void *consume(void *arg) {
  free_all(arg);
  return NULL;
}

/* Allocates twice; a consumer thread frees each round. The result: reused the second time. */
static void *produce(void *arg) {
  void *p[BLOCKS];
  for (int round = 0; round < 2; round++) {
    uint64_t reused = alloc_all(p);
    if (round == 1) *(uint64_t *)arg = reused;
    pthread_t t;
    pthread_create(&t, NULL, consume, p);
    pthread_join(t, NULL);
  }
  return NULL;
}

static void consumer_keeps_nothing(void) {
  uint64_t reused = in_thread(produce);
  CHECKF(reused == BLOCKS, "blocks a consumer thread freed serve their producer again (%llu of %d)",
         (unsigned long long)reused, BLOCKS);
  fg_collect(true);
}

/* BLOCKS blocks of 1 MiB, every byte written, freed: what the cache then holds. */
static void cache_touched(void) {
  void *p[BLOCKS];
  alloc_all(p);
  for (int i = 0; i < BLOCKS; i++) memset(p[i], 1, MIB);
  free_all(p);
}

static void collect_all(void) {
  fg_collect(true);
  size_t start = tu_rss();
  cache_touched();
  size_t cached = tu_rss();
  fg_collect(true);
  size_t after = tu_rss();
  CHECKF(cached >= start + BLOCKS * MIB / 2 && after <= start + 4 * MIB,
         "fg_collect(true) gives cached blocks back: RSS %.1f -> %.1f (cached) -> %.1f MiB",
         start / (double)MIB, cached / (double)MIB, after / (double)MIB);
}

/* The last check runs in a child started with a short decay time: the cache must empty
 * itself while the program only makes small calls now and then (as a program waiting for
 * work would). */
static void decay(void) {
  size_t start = tu_rss();
  cache_touched();
  size_t cached = tu_rss();
  double t0 = tu_now();
  while (tu_rss() > start + 4 * MIB && tu_now() - t0 < 5) {
    free(malloc(64));
    usleep(2000);
  }
  size_t after = tu_rss();
  CHECKF(after <= start + 4 * MIB && cached >= start + BLOCKS * MIB / 2,
         "FRUGAL_DECAY_MS=50: cached blocks go back by themselves: RSS %.1f -> %.1f -> %.1f MiB in %.2f s",
         start / (double)MIB, cached / (double)MIB, after / (double)MIB, tu_now() - t0);
}

static bool run_decay_child(void) {
  pid_t pid = fork();
  if (pid == 0) {
    setenv("FRUGAL_DECAY_MS", "50", 1);
    execl("/proc/self/exe", "largecache", "decay", (char *)NULL);
    _exit(127);
  }
  int status = 0;
  return pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "decay") == 0) {
    decay();
    return check_finish("largecache decay");
  }
  hot_loop();
  waste_bound();
  thread_cache();
  consumer_keeps_nothing();
  collect_all();
  fflush(stdout);
  CHECK("a child with FRUGAL_DECAY_MS=50 passed its check (above)", run_decay_child());
  return check_finish("largecache");
}
