/* largecache.c — the large cache's policies, seen through the ledger's counters
 * (fg_stats_get: large_cache_hits / misses), getrusage and RSS:
 *   - a hot loop over one 8 MiB buffer maps it once and takes no page faults afterwards;
 *   - a cached block is handed out as it is only if it wastes at most 12.5 % (a cached 32 MiB
 *     block serves 30 MiB); else it is cut down to the request (it serves 8 MiB as 8 MiB);
 *   - a thread reuses the blocks it freed; when it exits they serve other threads;
 *   - blocks a consumer thread frees (it allocated none) serve their producer again;
 *   - a request bigger than every cached block takes their pages before fresh ones (no new
 *     page faults), and blocks so built keep their contents through realloc, reuse and cuts;
 *   - random big blocks replaced in turn fault in little more than their live peak;
 *   - fg_collect(true) gives every cached block back at once;
 *   - a block's first bytes share its header's page: written there, it has one page resident;
 *   - two threads mapping blocks side by side each claim their own address range (os.c's
 *     hint), rather than both trying the same one and the loser over-mapping and trimming;
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

static uint64_t fresh_large(void) {
  fg_stats_t st;
  fg_stats_get(&st);
  return st.fresh_large_bytes;
}

/* Three cached blocks of 6 MiB, every page touched, serve a 16 MiB request with their own
 * pages: nothing mapped fresh, no page fault when the program touches it. */
static void grow_from_cache(void) {
  fg_collect(true);
  char *p[3];
  for (int i = 0; i < 3; i++) memset(p[i] = malloc(6 * MIB), i + 1, 6 * MIB);
  for (int i = 0; i < 3; i++) free(p[i]);
  uint64_t fresh0 = fresh_large(), r0 = reshapes(), m0 = misses();
  size_t rss0 = tu_rss();
  long f0 = minor_faults();
  char *big = malloc(16 * MIB);
  memset(big, 7, 16 * MIB);
  long faults = minor_faults() - f0;
  size_t rss1 = tu_rss();
  CHECKF(misses() == m0 && reshapes() == r0 + 1 && fresh_large() - fresh0 < MIB,
         "a 16 MiB request over three cached 6 MiB blocks maps nothing new (%llu KiB fresh)",
         (unsigned long long)((fresh_large() - fresh0) >> 10));
  CHECKF(faults < 64 && rss1 < rss0 + MIB,
         "... and takes their resident pages: %ld page faults touching it (fresh: 4096), RSS %+.1f MiB",
         faults, ((double)rss1 - (double)rss0) / (double)MIB);
  free(big);
  fg_collect(true);
}

/* Issue #10's random big blocks, scaled down: 8 live blocks, each replaced in turn by one of
 * 2-10 MiB with every page touched. The cache's pages are spent before fresh ones: fresh
 * pages (faults) come to little more than the most the program had live, not to the 400 MiB
 * of pages it touched, and RSS stays near that peak. */
static void random_big_blocks(void) {
  fg_collect(true);
  enum { LIVE = 8, ROUNDS = 200 };
  char *p[LIVE] = {0};
  size_t n[LIVE] = {0}, live = 0, peak_live = 0, touched = 0;
  tu_rng_t rng = {10};
  size_t rss0 = tu_rss(), peak_rss = 0;
  long f0 = minor_faults();
  for (int r = 0; r < LIVE + ROUNDS; r++) {
    int i = r < LIVE ? r : (int)tu_range(&rng, 0, LIVE - 1);
    free(p[i]);
    live -= n[i];
    n[i] = tu_range(&rng, 2 * MIB, 10 * MIB);
    p[i] = malloc(n[i]);
    for (size_t off = 0; off < n[i]; off += 4096) p[i][off] = (char)r;
    live += n[i];
    touched += n[i];
    if (live > peak_live) peak_live = live;
    size_t rss = tu_rss();
    if (rss > peak_rss) peak_rss = rss;
  }
  double fresh = (double)(minor_faults() - f0) * 4096;
  for (int i = 0; i < LIVE; i++) free(p[i]);
  CHECKF(fresh < 1.5 * (double)peak_live,
         "random 2-10 MiB blocks, 8 live: %.0f MiB of fresh pages for %.0f MiB live at most "
         "(%.0f MiB touched)",
         fresh / (double)MIB, (double)peak_live / (double)MIB, (double)touched / (double)MIB);
  CHECKF(peak_rss < rss0 + peak_live + peak_live / 4, "... peak RSS %.0f MiB above the start",
         ((double)peak_rss - (double)rss0) / (double)MIB);
  fg_collect(true);
}

/* How many kernel mappings hold [p, p + n) (/proc/self/maps). */
static int mappings_of(const void *p, size_t n) {
  FILE *f = fopen("/proc/self/maps", "r");
  if (f == NULL) return 0;
  char line[512];
  int count = 0;
  uintptr_t lo = (uintptr_t)p, hi = lo + n;
  while (fgets(line, sizeof line, f) != NULL) {
    unsigned long a, b;
    if (sscanf(line, "%lx-%lx", &a, &b) == 2 && b > lo && a < hi) count++;
  }
  fclose(f);
  return count;
}

/* A word every 512 bytes and the last byte, from a key: pages moved to the wrong place, lost
 * or shared between blocks show. */
static void stamp(char *p, size_t n, uint64_t key) {
  for (size_t i = 0; i + 8 <= n; i += 512) {
    uint64_t w = tu_word(key, i);
    memcpy(p + i, &w, 8);
  }
  p[n - 1] = (char)key;
}

/* The stamp's words in the first n bytes. */
static bool stamped_words(const char *p, size_t n, uint64_t key) {
  for (size_t i = 0; i + 8 <= n; i += 512) {
    uint64_t w = tu_word(key, i);
    if (memcmp(p + i, &w, 8) != 0) return false;
  }
  return true;
}

static bool stamped(const char *p, size_t n, uint64_t key) { return stamped_words(p, n, key) && p[n - 1] == (char)key; }

#define SLOTS 12
typedef struct {
  char *p[SLOTS];
  size_t n[SLOTS];
  uint64_t key[SLOTS];
  tu_rng_t rng;
  int bad, most_mappings;
  uint64_t step;
} blocks_t;

/* Replace or realloc random blocks of 600 KiB - 12 MiB, each stamped: every block must read
 * back as stamped (a realloc keeps the stamp of what it keeps) whatever the cache cut, grew
 * or moved meanwhile. */
static void shuffle(blocks_t *b, int steps) {
  for (int k = 0; k < steps; k++, b->step++) {
    int i = (int)tu_range(&b->rng, 0, SLOTS - 1);
    size_t n = tu_range(&b->rng, 600 << 10, 12 * MIB);
    if (b->p[i] != NULL && !stamped(b->p[i], b->n[i], b->key[i])) b->bad++;
    if (b->p[i] != NULL && b->step % 3 == 0) { /* keeps min(old, new) bytes */
      char *q = realloc(b->p[i], n);
      if (q == NULL || !stamped_words(q, n < b->n[i] ? n : b->n[i], b->key[i])) b->bad++;
      b->p[i] = q;
    } else {
      free(b->p[i]);
      b->p[i] = malloc(n);
    }
    if (b->p[i] == NULL) {
      b->bad++;
      continue;
    }
    b->n[i] = n;
    b->key[i] = tu_next(&b->rng);
    stamp(b->p[i], n, b->key[i]);
    if (b->step % 16 == 0) {
      int m = mappings_of(b->p[i], n);
      if (m > b->most_mappings) b->most_mappings = m;
    }
  }
}

static void *shuffle_thread(void *arg) {
  shuffle(arg, 300);
  return NULL;
}

static void gathered_blocks_keep_contents(void) {
  fg_collect(true);
  blocks_t b = {.rng = {20261123}};
  shuffle(&b, 300);
  /* Then a thread shuffles them and exits: its cache goes to the process cache, where these
   * blocks are cut and grown with no heap cache beside them. */
  pthread_t t;
  pthread_create(&t, NULL, shuffle_thread, &b);
  pthread_join(t, NULL);
  shuffle(&b, 300);
  for (int i = 0; i < SLOTS; i++) {
    if (b.p[i] != NULL && !stamped(b.p[i], b.n[i], b.key[i])) b.bad++;
    free(b.p[i]);
  }
  CHECKF(b.bad == 0, "900 random replacements and reallocs (600 KiB - 12 MiB): every block reads back "
                     "as written (%d did not)", b.bad);
  CHECKF(b.most_mappings >= 2, "... some of them built from several cached blocks (up to %d mappings)",
         b.most_mappings);
  fg_collect(true);
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

/* Two threads map 1,000 blocks of 1 MiB each at the same time, written at both ends as the
 * lab's threads cell does (no cached block can serve them: all stay live until both are done).
 * Both threads tried each new mapping at the same address, and the one that lost mapped 4 MiB
 * more and trimmed it (two munmaps): 286-1,334 munmaps here in five runs of the old build,
 * 1-2 now. */
#define SIDE_BLOCKS 1000
static pthread_barrier_t side_barrier;
static void *map_side(void *arg) {
  void **p = arg;
  pthread_barrier_wait(&side_barrier);
  for (int i = 0; i < SIDE_BLOCKS; i++) {
    p[i] = malloc(MIB);
    if (p[i] != NULL) memset(p[i], 1, 8), memset((char *)p[i] + MIB - 8, 1, 8);
  }
  pthread_barrier_wait(&side_barrier);
  return NULL;
}

static void threads_map_side_by_side(void) {
  static void *blocks[2][SIDE_BLOCKS];
  fg_stats_t st0, st1;
  fg_stats_get(&st0);
  pthread_barrier_init(&side_barrier, NULL, 2);
  pthread_t t;
  pthread_create(&t, NULL, map_side, blocks[1]);
  map_side(blocks[0]);
  pthread_join(t, NULL);
  fg_stats_get(&st1);
  bool all = true;
  for (int k = 0; k < 2; k++)
    for (int i = 0; i < SIDE_BLOCKS; i++) {
      all &= blocks[k][i] != NULL;
      free(blocks[k][i]);
    }
  pthread_barrier_destroy(&side_barrier);
  fg_collect(true); /* the 2,000 blocks freed into the caches go back */
  uint64_t unmaps = st1.munmap_calls - st0.munmap_calls, maps = st1.mmap_calls - st0.mmap_calls;
  check_note("side by side: %d blocks, %llu mmap calls, %llu munmap calls", 2 * SIDE_BLOCKS,
             (unsigned long long)maps, (unsigned long long)unmaps);
  CHECK("side by side: every block mapped", all);
  CHECKF(unmaps <= 2 * SIDE_BLOCKS / 10, "side by side: at most one mapping in 20 over-mapped and trimmed (%llu munmaps)",
         (unsigned long long)unmaps);
}

/* 256 blocks of 1 MiB, each written at its first byte: one page resident apiece (the header's,
 * which the block's first bytes share), not two. Fresh mappings: the cache is empty here. */
static void first_bytes_share_the_header(void) {
  enum { N = 256 };
  static char *p[N];
  size_t rss0 = tu_rss();
  for (int i = 0; i < N; i++) {
    p[i] = malloc(MIB);
    if (p[i] != NULL) p[i][0] = 1;
  }
  size_t rss1 = tu_rss(), grew = rss1 > rss0 ? rss1 - rss0 : 0;
  bool all = true;
  for (int i = 0; i < N; i++) all &= p[i] != NULL, free(p[i]);
  fg_collect(true);
  check_note("first bytes: %d blocks of 1 MiB written at their start: RSS +%zu KiB", N, grew / 1024);
  CHECKF(all && grew <= N * 4096 * 3 / 2, "first bytes: one page resident a block (RSS +%zu KiB for %d blocks)",
         grew / 1024, N);
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

/* calloc of a cached block: zeroed, and the block's pages given back rather than written (a
 * program that callocs a big buffer and uses a corner of it held all of it resident). */
static void calloc_reused(void) {
  size_t n = 64 * TU_MIB;
  char *p = tu_ptr(malloc(n));
  memset(p, 0xa5, n);
  free(p);
  size_t before = tu_rss();
  char *q = tu_ptr(calloc(1, n));
  size_t after = tu_rss();
  CHECKF(q == p, "calloc of 64 MiB reuses the cached block (%p, freed %p)", (void *)q, (void *)p);
  CHECKF(before > after + 56 * TU_MIB, "...whose pages go back rather than being written: RSS %.1f -> %.1f MiB",
         before / (double)TU_MIB, after / (double)TU_MIB);
  size_t nonzero = 0;
  for (size_t i = 0; i < n; i++) nonzero += q[i] != 0;
  CHECKF(nonzero == 0, "...and reads as zeros, every byte (%zu not)", nonzero);
  free(q);
  char *r = tu_ptr(calloc(1, 2 * TU_MIB + 123)); /* partial pages at both ends */
  memset(r, 1, 2 * TU_MIB + 123);
  free(r);
  r = tu_ptr(calloc(1, 2 * TU_MIB + 123));
  nonzero = 0;
  for (size_t i = 0; i < 2 * TU_MIB + 123; i++) nonzero += r[i] != 0;
  CHECKF(nonzero == 0, "a reused 2 MiB + 123 B block, calloc'd: zero to its last byte (%zu not)", nonzero);
  free(r);
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "decay") == 0) {
    decay();
    return check_finish("largecache decay");
  }
  hot_loop();
  calloc_reused();
  waste_bound();
  grow_from_cache();
  random_big_blocks();
  gathered_blocks_keep_contents();
  thread_cache();
  consumer_keeps_nothing();
  collect_all();
  first_bytes_share_the_header();
  threads_map_side_by_side();
  fflush(stdout);
  CHECK("a child with FRUGAL_DECAY_MS=50 passed its check (above)", run_decay_child());
  return check_finish("largecache");
}
