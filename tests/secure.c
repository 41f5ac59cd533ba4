/* secure.c — FRUGAL_SECURE=1 (set by ctest for this binary): each hardening catches what it
 * promises, in a child process, with one "frugal: " line and SIGABRT (SIGSEGV for the guard
 * page); and ordinary use raises nothing (the stress test runs under it too). */
#include "check.h"
#include "testutil.h"

#include <frugal.h>
#include <malloc.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void overflow_small(void *arg) {
  (void)arg;
  char *p = tu_ptr(malloc(100));
  p[100] = 'x'; /* one byte past the request */
  free(p);
}

static void overflow_large(void *arg) {
  (void)arg;
  char *p = tu_ptr(malloc(3 << 20));
  p[(3 << 20)] = 'x';
  free(p);
}

static void overflow_aligned(void *arg) {
  (void)arg;
  char *p = tu_ptr(aligned_alloc(256, 1000));
  p[1003] = 'x';
  free(p);
}

static void write_after_free(void *arg) {
  (void)arg;
  char *p = tu_ptr(malloc(200));
  free(p);
  p[40] = 'x';
  for (int i = 0; i < 10000; i++) free(tu_ptr(malloc(200))); /* p comes back: caught then */
}

static void link_overwrite(void *arg) {
  (void)arg;
  void *p = tu_ptr(malloc(48));
  void *q = tu_ptr(malloc(48)); /* keeps the page in use */
  free(p);
  memcpy(p, &q, sizeof q); /* a dangling pointer's write over the freed block's link */
  for (int i = 0; i < 4; i++) tu_ptr(malloc(48)); /* p, then what its link leads to */
  free(q);
}

static void guard_page(void *arg) {
  (void)arg;
  char *p = tu_ptr(malloc(3 << 20)); /* the guard page starts at the end of the request */
  p[(3 << 20) + 64] = 'x';
}

static void ordinary_use(void *arg) {
  (void)arg;
  for (size_t n = 0; n < 70000; n += 7) {
    char *p = tu_ptr(malloc(n));
    memset(p, 1, n);
    p = tu_ptr(realloc(p, n + 100));
    memset(p, 2, n + 100);
    free(p);
  }
  char *c = tu_ptr(calloc(1000, 3));
  for (int i = 0; i < 3000; i++)
    if (c[i] != 0)
      abort();
  free(c);
}

/* ---- every size: the canary and the fill where each class puts them -------------------------- */

typedef enum { SWEEP_FIRST, SWEEP_FAST, SWEEP_ALIGNED } sweep_how_t;

typedef struct sweep_s {
  size_t size;
  size_t at; /* canary: bytes past the request; fill: offset in the freed block */
  sweep_how_t how; /* a class's first block (from the slow path), a later one (malloc's fast
                    * path), or one from aligned_alloc (the hooked path, any size) */
} sweep_t;

static void sweep_overflow(void *arg) {
  const sweep_t *w = arg;
  if (w->how == SWEEP_FAST) free(tu_ptr(malloc(w->size))); /* the class's page made: the next one is popped */
  unsigned char *p = tu_ptr(w->how == SWEEP_ALIGNED ? aligned_alloc(64, w->size) : malloc(w->size));
  p[w->size + w->at] ^= 0x5a; /* whatever the canary byte is, it differs now */
  free(p);
}

static void sweep_after_free(void *arg) {
  const sweep_t *w = arg;
  unsigned char *p = tu_ptr(malloc(w->size));
  free(p);
  p[w->at] ^= 0x5a;
  for (int i = 0; i < 100; i++) free(tu_ptr(malloc(w->size))); /* p comes back: caught then */
}

/* One child per case, each expected to die with the report named. */
static long sweep(void (*fn)(void *), sweep_t *w, const char *words) {
  tu_child_t c;
  bool ran = tu_run_child(fn, w, 20, &c);
  if (ran && tu_child_signalled(&c, SIGABRT) && strstr(c.err, words) != NULL) return 0;
  char how[64];
  static const char *const hows[] = {"first block", "fast path", "aligned"};
  check_note("  missed: size %zu, offset %zu, %s (%s)", w->size, w->at, hows[w->how], tu_child_how(&c, how, sizeof how));
  return 1;
}

/* Every request size to 1100 B (the direct table's, whose classes leave 8 canary bytes at
 * least, and past it): a write into the first byte after the request, and into the eighth for
 * the direct table's sizes, is caught on free, whether the block is its class's first (the
 * slow path) or a later one (malloc's fast path); and one into the first and the last byte of the freed block's fill (bytes 8 to 64
 * at most of the request) when the block is handed out again. */
static void sweep_sizes(void) {
  long missed_canary = 0, missed_fill = 0, cases = 0;
  for (size_t n = 0; n <= 1100; n++) {
    for (int how = SWEEP_FIRST; how <= SWEEP_FAST; how++) {
      sweep_t w = {n, 0, (sweep_how_t)how};
      missed_canary += sweep(sweep_overflow, &w, "heap buffer overflow"), cases++;
      if (n <= 1024) {
        w.at = 7;
        missed_canary += sweep(sweep_overflow, &w, "heap buffer overflow"), cases++;
      }
    }
    if (n % 8 == 3) { /* any size: at least 1 canary byte */
      sweep_t w = {n, 0, SWEEP_ALIGNED};
      missed_canary += sweep(sweep_overflow, &w, "heap buffer overflow"), cases++;
    }
    if (n > 8) {
      size_t last = (n < 64 ? n : 64) - 1;
      sweep_t f = {n, 8, SWEEP_FIRST};
      missed_fill += sweep(sweep_after_free, &f, "write after free"), cases++;
      f.at = last;
      missed_fill += sweep(sweep_after_free, &f, "write after free"), cases++;
    }
  }
  CHECKF(missed_canary == 0, "every size to 1100 B: a write just past the request, and 7 past it, is caught (%ld missed)",
         missed_canary);
  CHECKF(missed_fill == 0, "every size to 1100 B: a write after free at the fill's first and last byte is caught (%ld missed)",
         missed_fill);
  check_note("  %ld cases, one child each", cases);
}

/* ---- large blocks reshaped: the guard page moves to each block's new end ------------------- */

#define LIVE_BIG 8
static char *big_live[LIVE_BIG];
static size_t big_size[LIVE_BIG];

static void past_reshaped(void *arg) {
  size_t i = *(const size_t *)arg;
  big_live[i][big_size[i] + 64] = 'x'; /* in the guard page: dies of SIGSEGV */
}

/* Random 2-10 MiB blocks, 8 live, each replaced by one of another size and written whole:
 * requests that fit no cached block by the 12.5 % rule reshape one (cut, or grown with other
 * cached blocks' pages), as without secure mode. Every byte of a block stays writable (a guard
 * left behind inside it would fault), a guard ends each block, and RSS stays near what is
 * live (with no reshaping in secure mode, this peaked at 2.4 x plain's: 796 against 324 MB
 * on the footprint lab's bigrand). */
static void reshaped_guards(void) {
  uint64_t seed = 12345;
  size_t start = tu_rss(), peak_rss = 0, live = 0, peak_live = 0;
  for (int r = 0; r < 160; r++) {
    size_t i = (size_t)r % LIVE_BIG;
    if (big_live[i] != NULL) {
      free(big_live[i]);
      live -= big_size[i];
    }
    seed = seed * 6364136223846793005u + 1442695040888963407u;
    big_size[i] = ((size_t)2 << 20) + (size_t)(seed >> 33) % ((size_t)8 << 20);
    big_live[i] = tu_ptr(malloc(big_size[i]));
    memset(big_live[i], r, big_size[i]);
    live += big_size[i];
    if (live > peak_live) peak_live = live;
    size_t rss = tu_rss() - start;
    if (rss > peak_rss) peak_rss = rss;
  }
  CHECKF(peak_rss <= peak_live + peak_live / 4, "reshaped secure large blocks: peak RSS %.1f MiB for %.1f MiB live",
         peak_rss / 1048576.0, peak_live / 1048576.0);
  int faulted = 0;
  for (size_t i = 0; i < LIVE_BIG; i++) {
    tu_child_t c;
    faulted += tu_run_child(past_reshaped, &i, 20, &c) && tu_child_signalled(&c, SIGSEGV);
  }
  CHECKF(faulted == LIVE_BIG, "each reshaped block ends against its guard page (%d of %d faulted)", faulted, LIVE_BIG);
  for (size_t i = 0; i < LIVE_BIG; i++) free(big_live[i]);
}

typedef struct death_s {
  const char *name;
  void (*fn)(void *);
  int sig;
  const char *words; /* NULL: no frugal line expected (signal from the guard page) */
} death_t;

int main(void) {
  CHECK("FRUGAL_SECURE is on for this test", fg_option_get(FG_OPTION_SECURE) == 1);

  static const death_t cases[] = {
      {"1-byte overflow of a 100 B block", overflow_small, SIGABRT, "heap buffer overflow"},
      {"1-byte overflow of a 3 MiB block", overflow_large, SIGABRT, "heap buffer overflow"},
      {"overflow of an aligned block", overflow_aligned, SIGABRT, "heap buffer overflow"},
      {"write after free of a 200 B block", write_after_free, SIGABRT, "write after free"},
      {"write after free over a freed block's link", link_overwrite, SIGABRT, "corrupted free list"},
      {"write into the guard page after a large block", guard_page, SIGSEGV, NULL},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    tu_child_t c;
    char how[64];
    bool ran = tu_run_child(cases[i].fn, NULL, 20, &c);
    CHECKF(ran && tu_child_signalled(&c, cases[i].sig), "%s: child dies of signal %d (%s)", cases[i].name,
           cases[i].sig, tu_child_how(&c, how, sizeof how));
    if (cases[i].words != NULL)
      CHECKF(strstr(c.err, "frugal: ") != NULL && strstr(c.err, cases[i].words) != NULL,
             "%s: stderr names it (\"%s\")", cases[i].name, cases[i].words);
  }

  tu_child_t ok;
  char how[64];
  CHECKF(tu_run_child(ordinary_use, NULL, 60, &ok) && tu_child_exited_ok(&ok) && ok.err_len == 0,
         "ordinary malloc/realloc/calloc/free under secure mode: exits 0, no frugal line (%s)",
         tu_child_how(&ok, how, sizeof how));

  sweep_sizes();
  reshaped_guards();

  char *p = tu_ptr(malloc(100));
  CHECK("malloc_usable_size is the request: the rest is the canary's", malloc_usable_size(p) == 100);
  free(p);

  /* Shuffled carving: a fresh page of an otherwise unused class does not hand out its
   * blocks in address order. */
  void *blocks[64];
  int rising = 0;
  for (int i = 0; i < 64; i++) {
    blocks[i] = tu_ptr(malloc(1500));
    if (i > 0 && (uintptr_t)blocks[i] > (uintptr_t)blocks[i - 1])
      rising++;
  }
  CHECKF(rising < 56, "allocation order within a page is shuffled (%d of 63 steps rise)", rising);
  for (int i = 0; i < 64; i++)
    free(blocks[i]);
  /* Small blocks are shuffled within runs of 4 neighbours: neither order holds throughout. */
  rising = 0;
  for (int i = 0; i < 64; i++) {
    blocks[i] = tu_ptr(malloc(200));
    if (i > 0 && (uintptr_t)blocks[i] > (uintptr_t)blocks[i - 1])
      rising++;
  }
  CHECKF(rising > 4 && rising < 59, "small blocks too are handed out shuffled (%d of 63 steps rise)", rising);
  for (int i = 0; i < 64; i++)
    free(blocks[i]);
  CHECK("the heap is consistent afterwards", fg_heap_check());
  return check_finish("secure");
}
