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
