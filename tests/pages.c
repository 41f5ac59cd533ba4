/* pages.c — an empty page serves every class of its kind (issue 10, item 3): a class that
 * needs a page takes one another class emptied, whose memory is committed already, before it
 * commits more. For the small pages and the single pages of the biggest classes: fill pages
 * with blocks of one class, free them all, then allocate as many bytes in the next class up.
 * The second set must take the first set's pages over (the ledger's pages_reused), commit
 * almost nothing (fresh_bytes, RSS), hand out blocks of its own class, keep their contents
 * apart, and leave the first class working afterwards. Medium pages are not passed between
 * classes (heap.c's page_take_empty says why): there, only the blocks are checked.
 * And blocks freed on a class's pages are handed out again before the class carves more; a thin
 * pile of another thread's frees on the page in use goes after the piles on the pages behind
 * it; carving runs ahead only over memory the slot had resident.
 * FRUGAL_DECAY_MS is set high by CMake so no decay pass releases the empty pages meanwhile. */
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>

#include "check.h"
#include "frugal-stats.h"
#include "frugal.h"
#include "testutil.h"

#define KIB ((size_t)1 << 10)
#define MAX_BLOCKS 4096

static void *blocks[MAX_BLOCKS];

static fg_stats_t stats(void) {
  fg_stats_t st;
  fg_stats_get(&st);
  return st;
}

/* Blocks of `size` adding up to `total` bytes, each filled with its own byte. */
static size_t fill(size_t size, size_t total, int tag) {
  size_t n = total / size;
  if (n > MAX_BLOCKS) n = MAX_BLOCKS;
  for (size_t i = 0; i < n; i++) {
    blocks[i] = malloc(size);
    if (blocks[i] != NULL) memset(blocks[i], (int)((i + (size_t)tag) & 0xff), size);
  }
  return n;
}

static bool intact(size_t n, size_t size, int tag) {
  for (size_t i = 0; i < n; i++) {
    const unsigned char *p = blocks[i];
    if (p == NULL || p[0] != ((i + (size_t)tag) & 0xff) || p[size - 1] != ((i + (size_t)tag) & 0xff)) return false;
  }
  return true;
}

static void drop(size_t n) {
  for (size_t i = 0; i < n; i++) free(blocks[i]);
}

/* `a`-byte blocks worth `total` bytes, freed, then `b`-byte blocks (the next class up). */
static void kind(const char *name, size_t a, size_t b, size_t total, bool takes_over) {
  size_t na = fill(a, total, 1);
  drop(na);
  size_t class_a = malloc_usable_size(blocks[0] = malloc(a));
  free(blocks[0]);
  fg_stats_t before = stats();
  size_t rss0 = tu_rss();
  size_t nb = fill(b, total, 7);
  size_t rss1 = tu_rss(), grew = rss1 > rss0 ? rss1 - rss0 : 0; /* a single page may give some back */
  fg_stats_t after = stats();
  size_t usable_b = malloc_usable_size(blocks[0]);
  check_note("%s: %zu x %zu B freed, then %zu x %zu B: %llu pages taken over, %llu fresh bytes, RSS %+lld KiB",
             name, na, a, nb, b, (unsigned long long)(after.pages_reused - before.pages_reused),
             (unsigned long long)(after.fresh_bytes - before.fresh_bytes), ((long long)rss1 - (long long)rss0) / 1024);
  if (takes_over) {
    CHECKF(after.pages_reused > before.pages_reused, "%s: the next class takes over the emptied pages", name);
    /* Both sets use the same pages: what the second commits is its blocks' extra bytes at
     * most (and the pages' tails), not a second copy. */
    size_t extra = total / 4 + 256 * KIB;
    CHECKF(after.fresh_bytes - before.fresh_bytes <= extra, "%s: the second set commits at most %zu KiB (%llu)",
           name, extra / KIB, (unsigned long long)(after.fresh_bytes - before.fresh_bytes));
    CHECKF(grew <= extra, "%s: RSS grows by at most %zu KiB (%zu)", name, extra / KIB, grew / KIB);
  } else {
    CHECKF(after.pages_reused == before.pages_reused, "%s: no page passes to another class", name);
  }
  CHECKF(usable_b >= b && usable_b < class_a * 2 && usable_b > class_a, "%s: blocks of their own class (%zu > %zu)",
         name, usable_b, class_a);
  CHECKF(intact(nb, b, 7), "%s: every block of the second set keeps its own bytes", name);
  /* The first class works again, with blocks of its own size, apart from the second set. */
  void *again[8];
  bool ok = true;
  for (int i = 0; i < 8; i++) {
    again[i] = malloc(a);
    ok &= again[i] != NULL && malloc_usable_size(again[i]) == class_a;
    if (again[i] != NULL) memset(again[i], 0xee, a);
  }
  CHECKF(ok && intact(nb, b, 7), "%s: the first class still hands out its own blocks", name);
  for (int i = 0; i < 8; i++) free(again[i]);
  drop(nb);
}

/* `old`-byte blocks worth `total` bytes written and freed, then one `want`-byte block of a class
 * with no page of its own yet: it takes one of the emptied pages over (heap.c's
 * page_take_empty), RSS falls by more than `drop`, and the ledger says [lo, hi] went back:
 * returned_takeover_bytes, from the page taken over, plus returned_growth_bytes, from the
 * other big classes' empty pages uncarved as a big class starts one (heap.c's
 * lone_pages_uncarve: the emptied page may be one of those, another class's taken over). */
static void gives_back(const char *name, size_t old, size_t total, size_t want, size_t drop_min, size_t lo, size_t hi) {
  drop(fill(old, total, 3));
  size_t rss0 = tu_rss();
  fg_stats_t before = stats();
  void *p = malloc(want);
  memset(p, 1, want);
  size_t rss1 = tu_rss();
  fg_stats_t after = stats();
  uint64_t said = after.returned_takeover_bytes - before.returned_takeover_bytes +
                  after.returned_growth_bytes - before.returned_growth_bytes;
  check_note("%s: %zu KiB of %zu KiB blocks freed, then %zu KiB: %llu page taken over, RSS %zu -> %zu KiB, %llu KiB given back",
             name, total / KIB, old / KIB, want / KIB, (unsigned long long)(after.pages_reused - before.pages_reused),
             rss0 / KIB, rss1 / KIB, (unsigned long long)(said / KIB));
  CHECKF(after.pages_reused == before.pages_reused + 1, "%s: the new class takes over an emptied page", name);
  CHECKF(rss1 + drop_min < rss0, "%s: what it does not use goes back (RSS %zu -> %zu KiB)", name, rss0 / KIB, rss1 / KIB);
  CHECKF(said >= lo && said <= hi, "%s: the ledger says so (returned_takeover_bytes + growth %llu KiB)", name,
         (unsigned long long)(said / KIB));
  free(p);
}

/* A single page (a segment) keeps its new class's first block: 3 MiB of 200 KiB blocks, then
 * 300 KiB (classes no case above used). The cases above left the odd empty page of a big
 * class, uncarved as well: up to 256 KiB more. */
static void single_gives_back(void) {
  gives_back("single", 200 * KIB, 3072 * KIB, 300 * KIB, 2048 * KIB, 2048 * KIB, 3328 * KIB);
}

/* A medium page keeps what the taking class used when its pages last emptied: 12 x 40 KiB
 * blocks (one 512 KiB page), then 60 KiB of a class never used, which keeps one block's worth
 * (416 KiB go back, RSS falls by 230-290 KiB: the block is written, page tables come and go).
 * Passed on whole from class to class, such pages kept the threads lab's storm at 9 MB for 5
 * (random sizes, a block or two of each medium class at a time). */
static void medium_gives_back(void) { gives_back("medium", 40 * KIB, 480 * KIB, 60 * KIB, 192 * KIB, 400 * KIB, 480 * KIB); }

/* Blocks freed on a class's pages go out again before the class carves more (heap.c's
 * page_find): 200 blocks of 3000 B (a class no other case uses; about ten pages, the last
 * one carved in part), every other one of the first 100 freed, then 50 allocated. Carving
 * first, the 50 came from untouched memory of the last page while the freed ones stayed
 * resident and idle (seed 1's process: 456 KiB resident for 297 KiB live). */
static void frees_before_carving(void) {
  enum { N = 200, FREED = 50 };
  for (size_t i = 0; i < N; i++) blocks[i] = malloc(3000);
  void *freed[FREED];
  for (size_t i = 0; i < FREED; i++) {
    freed[i] = blocks[2 * i];
    free(blocks[2 * i]);
  }
  fg_stats_t before = stats();
  size_t reused = 0;
  for (size_t i = 0; i < FREED; i++) {
    blocks[2 * i] = malloc(3000);
    for (size_t j = 0; j < FREED; j++) reused += blocks[2 * i] == freed[j];
  }
  fg_stats_t after = stats();
  check_note("frees first: %zu of %d new blocks were freed ones, %llu fresh bytes", reused, FREED,
             (unsigned long long)(after.fresh_bytes - before.fresh_bytes));
  CHECKF(reused == FREED, "frees first: the %d new blocks are the %d freed ones (%zu were)", FREED, FREED, reused);
  CHECKF(after.fresh_bytes == before.fresh_bytes, "frees first: nothing carved meanwhile (%llu fresh bytes)",
         (unsigned long long)(after.fresh_bytes - before.fresh_bytes));
  drop(N);
}

/* Another thread's frees, run to their end before the caller goes on. */
typedef struct {
  void **p;
  size_t n;
} frees_t;
static void *free_all(void *arg) {
  frees_t *f = arg;
  for (size_t i = 0; i < f->n; i++) free(f->p[i]);
  return NULL;
}
static void free_elsewhere(void **p, size_t n) {
  frees_t f = {p, n};
  pthread_t t;
  bool made = pthread_create(&t, NULL, free_all, &f) == 0;
  CHECK("another thread frees", made);
  if (made) pthread_join(t, NULL);
}
static uintptr_t slot_of(const void *p) { return (uintptr_t)p >> 16; }

/* A thin pile goes last (heap.c's page_find): the page being allocated from, run dry, while
 * another thread freed 2 of its blocks, and behind it a full page that got all of its blocks
 * back but one. The next block comes from the full page's pile; the thin pile's 2 go out after
 * it, before anything is carved. Taking the thin pile first, a producer chased the thread
 * freeing into its page, a few dozen blocks a time. 1700 B blocks: a class no other case
 * uses, 36 to a whole 64 KiB page. */
static void thin_pile_last(void) {
  enum { SIZE = 1700, MAX = 512 };
  static void *p[MAX], *again[MAX];
  size_t n = 0, b = 0, c = 0; /* page B's first block, then page C's (a whole slot) */
  while (n < MAX / 2) { /* room left for page C's blocks */
    p[n] = malloc(SIZE);
    if (n > 0 && slot_of(p[n]) != slot_of(p[n - 1])) {
      if ((uintptr_t)p[n] % 65536 == 0 && b > 0) {
        c = n;
        break;
      }
      b = n;
    }
    n++;
  }
  CHECKF(c > 0, "thin pile: pages of 1700 B blocks found (%zu blocks)", n);
  if (c == 0) return;
  size_t cap = 65536 / malloc_usable_size(p[c]);
  for (n = c + 1; n < c + cap; n++) p[n] = malloc(SIZE);
  CHECKF(slot_of(p[n - 1]) == slot_of(p[c]), "thin pile: page C holds %zu blocks", cap);
  size_t from_b = c - b - 1;             /* B's blocks but its first come back, */
  free_elsewhere(&p[b + 1], from_b);     /* B being full, */
  free_elsewhere(&p[c], 2);              /* and 2 of C's, which is dry */
  fg_stats_t before = stats();
  size_t m = from_b + 2, on_b = 0, on_c = 0;
  for (size_t i = 0; i < m; i++) {
    again[i] = malloc(SIZE);
    on_b += slot_of(again[i]) == slot_of(p[b]);
    on_c += slot_of(again[i]) == slot_of(p[c]);
  }
  fg_stats_t after = stats();
  check_note("thin pile: %zu blocks back on full page B, 2 on page C; the next %zu: first on %s, %zu on B, %zu on C, "
             "%llu fresh bytes",
             from_b, m, slot_of(again[0]) == slot_of(p[b]) ? "B" : "C", on_b, on_c,
             (unsigned long long)(after.fresh_bytes - before.fresh_bytes));
  CHECKF(slot_of(again[0]) == slot_of(p[b]), "thin pile: the next block comes from the page whose blocks came back");
  CHECKF(on_b == from_b && on_c == 2, "thin pile: both piles go out (%zu of %zu on B, %zu of 2 on C)", on_b, from_b,
         on_c);
  CHECKF(after.fresh_bytes == before.fresh_bytes, "thin pile: nothing carved meanwhile (%llu fresh bytes)",
         (unsigned long long)(after.fresh_bytes - before.fresh_bytes));
  for (size_t i = 0; i <= b; i++) free(p[i]);
  for (size_t i = c + 2; i < c + cap; i++) free(p[i]);
  for (size_t i = 0; i < m; i++) free(again[i]);
}

/* A thread taking back blocks as fast as another frees them gets one whole page ahead
 * (heap.c's page_ahead): a page of 176 B blocks (a class no other case uses), run dry, gets
 * back 2 blocks from another thread, again and again; within 64 such thin piles a malloc
 * hands out a block of a page carved whole, and only once: the next 64 take the piles back. */
static void chase_gets_a_page(void) {
  enum { SIZE = 176, MAX = 1024, ROUNDS = 64 };
  static void *p[MAX], *before[MAX];
  size_t n = 0, held = 0;
  for (p[0] = malloc(SIZE); held < MAX && (uintptr_t)p[0] % 65536 != 0; p[0] = malloc(SIZE))
    before[held++] = p[0]; /* held to the end: the pages before stay full */
  size_t cap = 65536 / malloc_usable_size(p[0]);
  for (n = 1; n < cap && n < MAX; n++) p[n] = malloc(SIZE);
  CHECKF(slot_of(p[n - 1]) == slot_of(p[0]), "chase: a page of %zu blocks, all handed out", cap);
  uintptr_t home = slot_of(p[0]), ahead = 0;
  size_t events = 0, at = 0, others = 0;
  for (size_t r = 0; r < 2 * ROUNDS; r++) {
    size_t k = r % (cap / 2) * 2;      /* 2 of the page's blocks */
    free_elsewhere(&p[k], 2);          /* a thin pile on the dry page */
    for (size_t i = k; i < k + 2; i++) { /* taken back */
      p[i] = malloc(SIZE);
      uintptr_t s = slot_of(p[i]);
      if (s != home && ahead == 0) {
        ahead = s;
        at = r + 1;
      }
      others += s != home && s != ahead;
    }
    events++;
    if (ahead != 0 && r + 1 == at) { /* the page ahead's blocks handed out, so the page runs dry again */
      static void *rest[MAX];
      size_t m = 0;
      while (m < MAX && (m == 0 || slot_of(rest[m - 1]) == ahead)) rest[m++] = malloc(SIZE);
      CHECKF(m > cap / 2, "chase: the page ahead was carved whole (%zu blocks on it)", m - 1);
      for (size_t i = 0; i < m; i++) free(rest[i]);
    }
  }
  check_note("chase: %zu thin piles; a page ahead after %zu of them; %zu blocks on a third page", events, at, others);
  CHECKF(ahead != 0 && at <= ROUNDS, "chase: a page ahead within %d thin piles (after %zu)", ROUNDS, at);
  CHECKF(others == 0, "chase: one page ahead, not more (%zu blocks elsewhere)", others);
  for (size_t i = 0; i < cap; i++) free(p[i]);
  for (size_t i = 0; i < held; i++) free(before[i]);
}

/* OS pages resident in [p, p + len) (mincore). */
static size_t resident_pages(const void *p, size_t len) {
  unsigned char vec[64];
  uintptr_t lo = (uintptr_t)p & ~(uintptr_t)4095;
  size_t n = (len + 4095) / 4096;
  if (n > sizeof vec || mincore((void *)lo, n * 4096, vec) != 0) return SIZE_MAX;
  size_t r = 0;
  for (size_t i = 0; i < n; i++) r += vec[i] & 1;
  return r;
}

/* n blocks of `size` over memory freed blocks left resident: at most max_slow slow calls,
 * nothing fresh committed, every block intact. */
static void carve_again(size_t size, size_t n, int seed, uint64_t max_slow) {
  fg_stats_t before = stats();
  size_t got = fill(size, n * size, seed);
  fg_stats_t after = stats();
  uint64_t slow = after.slow_allocs - before.slow_allocs, fresh = after.fresh_bytes - before.fresh_bytes;
  check_note("carving: %zu x %zu B blocks over resident memory: %llu slow calls, %llu fresh bytes", got, size,
             (unsigned long long)slow, (unsigned long long)fresh);
  CHECKF(slow <= max_slow, "carving: resident memory is carved 16 blocks at a time (%llu slow calls for %zu blocks)",
         (unsigned long long)slow, got);
  CHECKF(fresh == 0, "carving: nothing fresh is committed (%llu bytes)", (unsigned long long)fresh);
  CHECKF(intact(got, size, seed), "carving: every block keeps its own bytes");
  drop(got);
}

/* Carving runs ahead only over memory a page of the slot touched before (page.c's
 * _fg_page_extend): the first 4 KiB block of a class's first page commits one OS page, not
 * the page's 16; once 64 such blocks were written and freed, 2 KiB blocks carved over their
 * pages take a slow call per 16 blocks, not per 2, and commit nothing. */
static void carves_resident(void) {
  enum { BIG = 64, SMALL = 128 };
  char *first = malloc(4096);
  memset(first, 1, 4096);
  /* From the OS page after the block's (the page's first block may start past a header) to
   * the page's end. */
  uintptr_t next = ((uintptr_t)first + 4096 + 4095) & ~(uintptr_t)4095;
  size_t rest = (((uintptr_t)first + 65536) & ~(uintptr_t)65535) - next;
  size_t ahead = resident_pages((void *)next, rest);
  check_note("carving: after the first 4 KiB block, %zu of the page's next %zu OS pages resident", ahead, rest / 4096);
  CHECKF(ahead == 0, "carving: a fresh page commits one OS page for its first 4 KiB block (%zu more)", ahead);
  free(first);
  drop(fill(4096, BIG * 4096, 5));
  /* One a block or two carving 4 KiB at a time (64), 8 if all 128 fell on resident memory:
   * the first of the pages was carved only in part by the 4 KiB blocks (17 seen). */
  carve_again(2048, SMALL, 9, SMALL / 4);
}

/* Blocks bigger than 4 KiB carve ahead too, over the block starts their class carved in the
 * slot before (page.c's resident_note): seed 2's FIFO of 32 KiB blocks took a slow call for
 * every block of every round. 256 blocks of 24 KiB (a medium class: 21 to a 512 KiB page; 6
 * MiB, past what a heap keeps of its empty pages), freed, then 256 again: the pages not kept
 * went back to their slots, and the class carves them again. */
static void carves_resident_big(void) {
  enum { N = 256, SIZE = 24 * 1024 };
  drop(fill(SIZE, N * SIZE, 3));
  carve_again(SIZE, N, 4, N / 4); /* 195 slow calls before */
}

/* Empty pages of the big classes, each the lone page of its class, give their blocks' memory
 * back when another big class starts a page (heap.c's lone_pages_uncarve): one written block
 * of each of four medium classes (9-45 KiB: a page carved that little is not taken over by
 * another class), freed, then a 30 KiB block. A class that comes back carves again, and keeps
 * its page from then on. Classes no other case uses. */
static void lone_pages(void) {
  static const size_t sizes[] = {9 * KIB, 13 * KIB, 26 * KIB, 45 * KIB};
  void *p[4];
  size_t total = 0;
  for (size_t i = 0; i < 4; i++) { /* all live while their pages start: none is empty yet */
    p[i] = malloc(sizes[i]);
    memset(p[i], 1, sizes[i]);
    total += sizes[i];
  }
  for (size_t i = 0; i < 4; i++) free(p[i]);
  size_t rss0 = tu_rss();
  fg_stats_t before = stats();
  char *q = malloc(30 * KIB);
  memset(q, 2, 30 * KIB);
  size_t rss1 = tu_rss();
  fg_stats_t after = stats();
  uint64_t back = after.returned_growth_bytes - before.returned_growth_bytes;
  check_note("lone pages: %zu KiB of big blocks freed, then a 30 KiB block: RSS %zu -> %zu KiB, %llu KiB given back",
             total / KIB, rss0 / KIB, rss1 / KIB, (unsigned long long)(back / KIB));
  CHECKF(back + 4 * 8 * KIB >= total && back <= total, "lone pages: their blocks go back (%llu of %zu KiB)",
         (unsigned long long)(back / KIB), total / KIB);
  /* The 30 KiB block, written, comes on top. */
  CHECKF(rss1 + total / 4 < rss0, "lone pages: RSS falls (%zu -> %zu KiB)", rss0 / KIB, rss1 / KIB);
  char *again = malloc(26 * KIB); /* carved again, from given-back memory */
  memset(again, 3, 26 * KIB);
  bool ok = again[0] == 3 && again[26 * KIB - 1] == 3 && q[0] == 2 && q[30 * KIB - 1] == 2;
  free(again);
  before = stats();
  void *r = malloc(50 * KIB); /* another start: the 26 KiB class came back, and keeps its page */
  after = stats();
  back = after.returned_growth_bytes - before.returned_growth_bytes;
  CHECKF(ok, "lone pages: a class whose page was given back hands out working blocks");
  CHECKF(back == 0, "lone pages: a class that came back keeps its page (%llu KiB given back)",
         (unsigned long long)(back / KIB));
  free(r);
  free(q);
}

/* Buffers growing together walk the single pages' classes: 24 of them grown by realloc,
 * in turn, from 72 to 400 KiB by 8 KiB steps (each class's blocks fill most of a single
 * page), freed, and grown again. Each class takes over the pages the class below it emptied,
 * and keeps what its own pages had carved when they last emptied (heap.c's extent_note):
 * the second round gives back next to nothing and faults little in. Cutting every page taken
 * down to one block, as the medium pages' extent alone did, gave back 70 MiB and faulted
 * 24 k pages in the second round. */
static long minor_faults(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_minflt;
}
static void buffers_grow_together(void) {
  enum { N = 24 };
  unsigned char *buf[N];
  for (int round = 0; round < 2; round++) {
    fg_stats_t before = stats();
    long f0 = minor_faults();
    bool kept = true;
    for (int i = 0; i < N; i++) buf[i] = malloc(72 * KIB), memset(buf[i], i, 72 * KIB);
    for (size_t n = 72 * KIB; n < 400 * KIB; n += 8 * KIB)
      for (int i = 0; i < N; i++) {
        buf[i] = realloc(buf[i], n + 8 * KIB);
        kept = kept && buf[i] != NULL && buf[i][0] == i && buf[i][n - 1] == i;
        if (buf[i] != NULL) memset(buf[i] + n, i, 8 * KIB);
      }
    for (int i = 0; i < N; i++) free(buf[i]);
    fg_stats_t after = stats();
    long faults = minor_faults() - f0;
    uint64_t back = after.returned_takeover_bytes - before.returned_takeover_bytes;
    check_note("buffers growing together, round %d: %llu KiB given back as pages were taken over, %ld page faults",
               round + 1, (unsigned long long)(back / KIB), faults);
    CHECKF(kept, "buffers growing together, round %d: every buffer keeps its bytes", round + 1);
    if (round == 1) {
      CHECKF(back < 8192 * KIB, "round 2: the pages taken over keep what their new class used (%llu KiB given back)",
             (unsigned long long)(back / KIB));
      CHECKF(faults < 8000, "round 2: ...and fault little in (%ld page faults)", faults);
    }
  }
}

/* Buffers grown by realloc in turn from 10 to 400 KiB: after its first move each has a page of
 * its own and grows there (heap.c's _fg_heap_alloc_buffer), so RSS follows what they hold.
 * Sharing pages, each moved at every class (846 moves here; 224 with pages of their own only
 * past 64 KiB), every step holding two classes' blocks of every buffer (python3 lists appended
 * to in turn: 65 MB peak, glibc 41). */
static void buffers_own_pages(void) {
  enum { N = 32 };
  unsigned char *buf[N];
  size_t rss0 = tu_rss(), most = 0;
  int moves = 0;
  bool kept = true;
  for (int i = 0; i < N; i++) buf[i] = malloc(10 * KIB), memset(buf[i], i, 10 * KIB);
  for (size_t n = 10 * KIB; n < 400 * KIB; n += 8 * KIB) {
    for (int i = 0; i < N; i++) {
      unsigned char *q = realloc(buf[i], n + 8 * KIB);
      kept = kept && q != NULL && q[0] == i && q[n - 1] == i;
      if (q == NULL) continue;
      moves += q != buf[i];
      buf[i] = q;
      memset(q + n, i, 8 * KIB);
    }
    size_t rss = tu_rss();
    if (rss > rss0 && rss - rss0 > most) most = rss - rss0;
  }
  for (int i = 0; i < N; i++) free(buf[i]);
  size_t live = N * 400 * KIB;
  /* RSS is noted, not checked: the pages the tests before left resident serve these too. */
  check_note("buffers growing in turn: %d moves, RSS grew at most %zu KiB for %zu KiB live", moves, most / KIB,
             live / KIB);
  CHECKF(kept, "buffers growing in turn: every buffer keeps its bytes");
  CHECKF(moves <= 2 * N, "buffers growing in turn: each moves once or twice (%d moves)", moves);
}

/* Past BUFFERS_MAX (heap.c: 256) buffers share pages again: 600 buffers grown by realloc to
 * 100 KiB and kept take less than 1.25 GiB of address space (each on a segment of its own:
 * 2.4 GiB), and the heap's count of buffers' pages agrees with its pages (fg_heap_check). */
static void buffers_capped(void) {
  enum { N = 600 };
  static unsigned char *buf[N];
  size_t vm0 = tu_status_bytes("VmSize");
  bool kept = true;
  for (int i = 0; i < N; i++) {
    unsigned char *p = malloc(70 * KIB), *neighbour = malloc(70 * KIB); /* p is not alone */
    memset(p, i, 70 * KIB);
    buf[i] = realloc(p, 100 * KIB);
    kept = kept && buf[i] != NULL && buf[i][0] == (unsigned char)i && buf[i][70 * KIB - 1] == (unsigned char)i;
    free(neighbour);
  }
  size_t grew = tu_status_bytes("VmSize") - vm0;
  bool sound = fg_heap_check();
  for (int i = 0; i < N; i++) free(buf[i]);
  check_note("600 buffers grown to 100 KiB and kept: address space grew %zu MiB", grew / (1024 * KIB));
  CHECKF(kept, "600 buffers grown and kept: every buffer keeps its bytes");
  CHECKF(grew < 1280 * 1024 * KIB, "600 buffers grown and kept: less than 1.25 GiB of address space (%zu MiB)",
         grew / (1024 * KIB));
  CHECKF(sound && fg_heap_check(), "600 buffers grown and kept, then freed: the heap checks out");
}

/* Free page slots left idle while the heap grows elsewhere give their memory back at the next
 * growth step (heap.c's grew()): 400 blocks of 20 KiB freed leave their medium pages' slots
 * committed (the decay time is a minute here), then 6 MiB of 100 KiB blocks are carved. */
static void idle_slots_go_back(void) {
  enum { N = 400, M = 60 };
  static void *p[N], *q[M];
  for (int i = 0; i < N; i++) p[i] = malloc(20 * KIB), memset(p[i], 1, 20 * KIB);
  fg_stats_t s0 = stats();
  for (int i = 0; i < N; i++) free(p[i]);
  fg_stats_t s1 = stats();
  for (int i = 0; i < M; i++) q[i] = malloc(100 * KIB), memset(q[i], 2, 100 * KIB);
  fg_stats_t s2 = stats();
  for (int i = 0; i < M; i++) free(q[i]);
  long long freed = (long long)s1.free_page_bytes - (long long)s0.free_page_bytes;
  long long back = (long long)s1.free_page_bytes - (long long)s2.free_page_bytes;
  check_note("idle free slots: %lld KiB of slots freed, %lld KiB of them given back as the heap grew 6 MiB",
             freed / (long long)KIB, back / (long long)KIB);
  CHECKF(freed >= 2048 * (long long)KIB, "idle free slots: freeing 8 MiB of medium blocks frees page slots (%lld KiB)",
         freed / (long long)KIB);
  CHECKF(back >= freed / 2, "idle free slots: most give their memory back as the heap grows (%lld of %lld KiB)",
         back / (long long)KIB, freed / (long long)KIB);
}

/* The held bytes of free slots are their resident pages (mincore), not their area: a buffer
 * grown past 8 KiB gets a single page, a 4 MiB slot, and freed in a medium class gives the
 * slot back to its segment with the 12 KiB it touched resident (the ledger said 4 MiB). */
static void free_slots_held(void) {
  fg_stats_t s0 = stats();
  char *b = malloc(6000);
  b = realloc(b, 12000);
  memset(b, 3, 12000);
  free(b);
  fg_stats_t s1 = stats();
  long long held = (long long)s1.free_page_bytes - (long long)s0.free_page_bytes;
  long long area = (long long)(s1.free_page_bytes + s1.free_page_returned_bytes) -
                   (long long)(s0.free_page_bytes + s0.free_page_returned_bytes);
  check_note("a 12 KiB buffer's slot freed: %lld KiB of free slots, %lld KiB held resident", area / (long long)KIB,
             held / (long long)KIB);
  CHECKF(area >= 1024 * (long long)KIB, "a buffer's single slot goes back to its segment (%lld KiB of slots)",
         area / (long long)KIB);
  CHECKF(held <= 64 * (long long)KIB, "free slots are held for their resident pages only (%lld KiB)",
         held / (long long)KIB);
}

/* Buffers grown in turn past 512 KiB move from their pages to large blocks, which grow by
 * mremap: their growth counts as the heap's (heap.c's _fg_heap_grew_large), so the pages they
 * left, idle, give their memory back as it goes on (python3 lists of 80,000 items growing
 * together: 90.5 MB peak against glibc's 67.9 while those pages stayed, 59.3 now). */
static void buffers_into_large(void) {
  enum { N = 32 };
  unsigned char *buf[N];
  bool kept = true;
  for (int i = 0; i < N; i++) buf[i] = malloc(300 * KIB), memset(buf[i], i, 300 * KIB);
  size_t rss0 = tu_rss();
  for (size_t n = 300 * KIB; n < 900 * KIB; n += 16 * KIB)
    for (int i = 0; i < N; i++) {
      unsigned char *q = realloc(buf[i], n + 16 * KIB);
      kept = kept && q != NULL && q[0] == i && q[n - 1] == i;
      if (q == NULL) continue;
      buf[i] = q;
      memset(q + n, i, 16 * KIB);
    }
  size_t rss1 = tu_rss(), grew = rss1 > rss0 ? rss1 - rss0 : 0, added = N * 600 * KIB;
  for (int i = 0; i < N; i++) free(buf[i]);
  check_note("buffers grown in turn into large blocks: RSS grew %zu KiB as they grew by %zu KiB", grew / KIB,
             added / KIB);
  CHECKF(kept, "buffers grown into large blocks: every buffer keeps its bytes");
  /* The pages they left, resident, came on top: +38.8 MiB for 19.2 MiB added. */
  CHECKF(grew <= added + added / 4, "buffers grown into large blocks: the pages they left give back (RSS +%zu KiB)",
         grew / KIB);
}

int main(void) {
  carves_resident(); /* first: its 4 KiB class starts on a fresh page */
  carves_resident_big();
  lone_pages();
  medium_gives_back(); /* no other medium class has an empty page to take */
  frees_before_carving();
  thin_pile_last();
  chase_gets_a_page();
  kind("small", 1000, 1100, 2048 * KIB, true);       /* 64 KiB pages */
  kind("medium", 20 * KIB, 23 * KIB, 4000 * KIB, true); /* 512 KiB pages, 8 of them carved whole */
  kind("single", 100 * KIB, 115 * KIB, 3072 * KIB, true); /* one page a segment */
  single_gives_back();
  buffers_grow_together();
  buffers_own_pages();
  buffers_capped();
  idle_slots_go_back();
  free_slots_held();
  buffers_into_large();
  return check_finish("pages");
}
