/* collect.c — memory goes back to the OS on demand: allocate 1 GiB in mixed sizes (a third
 * small, a third medium, a third large; the medium third made by a thread that then exits),
 * touch all of it, free it all in shuffled order, then fg_collect(true): resident memory must
 * come back to within 16 MiB of where it started. A second round does the same with
 * malloc_trim(0). The bookkeeping array is mmap'ed so it is not part of what is measured. */
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

#include "apis.h"
#include "check.h"
#include "testutil.h"

#define TOTAL ((size_t)1 << 30)
#define MAX_BLOCKS ((size_t)3 << 20)
#define SLACK (16 * TU_MIB)

typedef struct block_s {
  void *p;
  size_t n;
} block_t;

static block_t *blocks;
static size_t nblocks;
static long failed;

/* Allocate `budget` bytes in blocks of lo..hi bytes, each written over its whole size. */
static void fill(tu_rng_t *r, size_t budget, size_t lo, size_t hi) {
  for (size_t used = 0; used < budget && nblocks < MAX_BLOCKS;) {
    size_t n = tu_range(r, lo, hi);
    void *p = malloc(n);
    if (!p) {
      failed++;
      return;
    }
    memset(p, 0x5A, n);
    blocks[nblocks++] = (block_t){p, n};
    used += n;
  }
}

static void *medium_thread(void *arg) {
  fill((tu_rng_t *)arg, TOTAL / 3, 1025, 512 << 10);
  return NULL;
}

/* One round: allocate, measure the peak, free everything, give memory back, measure. */
static void round_trip(const char *how, void (*give_back)(void), uint64_t seed) {
  tu_rng_t r = {seed};
  size_t start = tu_rss();
  nblocks = 0;
  fill(&r, TOTAL / 3, 16, 1024);
  tu_rng_t tr = {seed ^ 0xABCD};
  pthread_t t;
  pthread_create(&t, NULL, medium_thread, &tr);
  pthread_join(t, NULL);
  fill(&r, TOTAL / 3, 1 << 20, 32 << 20);
  size_t peak = tu_rss();
  for (size_t i = nblocks; i > 1; i--) { /* shuffle, then free in that order */
    size_t j = tu_next(&r) % i;
    block_t b = blocks[i - 1];
    blocks[i - 1] = blocks[j];
    blocks[j] = b;
  }
  for (size_t i = 0; i < nblocks; i++)
    free(blocks[i].p);
  size_t freed = tu_rss();
  give_back();
  size_t after = tu_rss();
  check_note("%s: %zu blocks; RSS start %.1f, peak %.1f, after free %.1f, after %s %.1f MiB", how,
             nblocks, start / 1048576.0, peak / 1048576.0, freed / 1048576.0, how,
             after / 1048576.0);
  CHECKF(failed == 0, "%s round: every allocation of the 1 GiB succeeded", how);
  CHECKF(peak >= start + 900 * TU_MIB,
         "%s round: the 1 GiB was resident (peak %.0f MiB above start)", how,
         (peak - start) / 1048576.0);
  CHECKF(after <= start + SLACK, "%s: RSS back within 16 MiB of the start (%.1f MiB above)", how,
         after > start ? (after - start) / 1048576.0 : 0.0);
}

static void collect_force(void) { fg_collect(true); }
static void trim(void) { malloc_trim(0); }

int main(void) {
  blocks = (block_t *)mmap(NULL, MAX_BLOCKS * sizeof *blocks, PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (blocks == MAP_FAILED) {
    CHECK("mmap of the bookkeeping array", 0);
    return check_finish("collect");
  }
  round_trip("fg_collect(true)", collect_force, 1);
  round_trip("malloc_trim(0)", trim, 2);
  return check_finish("collect");
}
