/* align.c — the alignment sweep: alignments 8 .. 2^21 × sizes 0 .. 4 MiB through every
 * aligned entry point (aligned_alloc, posix_memalign, memalign, their fg_ forms, C++ aligned
 * new), plus valloc/pvalloc over the same sizes. Each block must be aligned, have usable size
 * >= the request, be writable over its whole usable size, not overlap the block allocated
 * before it, and be freeable with its matching deallocator. */
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "apis.h"
#include "check.h"
#include "cxx_ops.h"
#include "testutil.h"

#define MAX_SIZE ((size_t)4 << 20)

/* One aligned entry point: allocate n bytes aligned to a, and free what it returned. */
typedef struct entry_s {
  const char *name;
  void *(*alloc)(size_t n, size_t a);
  void (*release)(void *p, size_t n, size_t a);
} entry_t;

static void *e_aligned_alloc(size_t n, size_t a) { return aligned_alloc(a, n); }
static void *e_fg_aligned_alloc(size_t n, size_t a) { return fg_aligned_alloc(a, n); }
static void *e_memalign(size_t n, size_t a) { return memalign(a, n); }
static void *e_fg_memalign(size_t n, size_t a) { return fg_memalign(a, n); }
static void *e_posix_memalign(size_t n, size_t a) {
  void *p = NULL;
  return posix_memalign(&p, a, n) == 0 ? p : NULL;
}
static void *e_fg_posix_memalign(size_t n, size_t a) {
  void *p = NULL;
  return fg_posix_memalign(&p, a, n) == 0 ? p : NULL;
}
static void *e_valloc(size_t n, size_t a) {
  (void)a;
  return valloc(n);
}
static void *e_fg_valloc(size_t n, size_t a) {
  (void)a;
  return fg_valloc(n);
}
static void *e_pvalloc(size_t n, size_t a) {
  (void)a;
  return pvalloc(n);
}
static void *e_fg_pvalloc(size_t n, size_t a) {
  (void)a;
  return fg_pvalloc(n);
}

static void r_free(void *p, size_t n, size_t a) {
  (void)n;
  (void)a;
  free(p);
}
static void r_fg_free(void *p, size_t n, size_t a) {
  (void)n;
  (void)a;
  fg_free(p);
}
static void r_free_aligned_sized(void *p, size_t n, size_t a) { free_aligned_sized(p, a, n); }
static void r_fg_free_aligned_sized(void *p, size_t n, size_t a) {
  fg_free_aligned_sized(p, a, n);
}
static void r_delete_aligned_sized(void *p, size_t n, size_t a) {
  cxx_delete_aligned_sized(p, n, a);
}
static void r_delete_array_aligned(void *p, size_t n, size_t a) {
  (void)n;
  cxx_delete_array_aligned(p, a);
}
static void r_delete_aligned(void *p, size_t n, size_t a) {
  (void)n;
  cxx_delete_aligned(p, a);
}

/* Entry points taking an alignment; each pairs with a different deallocator so that every
 * free form sees aligned blocks too. */
static const entry_t aligned_entries[] = {
    {"aligned_alloc", e_aligned_alloc, r_free},
    {"aligned_alloc+free_aligned_sized", e_aligned_alloc, r_free_aligned_sized},
    {"fg_aligned_alloc", e_fg_aligned_alloc, r_fg_free_aligned_sized},
    {"posix_memalign", e_posix_memalign, r_free},
    {"fg_posix_memalign", e_fg_posix_memalign, r_fg_free},
    {"memalign", e_memalign, r_free},
    {"fg_memalign", e_fg_memalign, r_fg_free_aligned_sized},
    {"operator new(align_val_t)", cxx_new_aligned, r_delete_aligned_sized},
    {"operator new[](align_val_t)", cxx_new_array_aligned, r_delete_array_aligned},
    {"operator new(align_val_t, nothrow)", cxx_new_aligned_nothrow, r_delete_aligned},
};
/* Page-aligned entry points: the alignment argument is ignored, the page size expected. */
static const entry_t page_entries[] = {
    {"valloc", e_valloc, r_free},
    {"fg_valloc", e_fg_valloc, r_fg_free},
    {"pvalloc", e_pvalloc, r_free},
    {"fg_pvalloc", e_fg_pvalloc, r_fg_free},
};

/* 0, 1, 7, 8, 9, then 2^k - 1, 2^k, 2^k + 1 for 16 <= 2^k <= 4 MiB (the last one capped). */
static size_t sweep_sizes(size_t *out) {
  size_t n = 0;
  out[n++] = 0;
  out[n++] = 1;
  out[n++] = 7;
  out[n++] = 8;
  out[n++] = 9;
  for (size_t p = 16; p <= MAX_SIZE; p *= 2) {
    out[n++] = p - 1;
    out[n++] = p;
    if (p + 1 <= MAX_SIZE)
      out[n++] = p + 1;
  }
  return n;
}

typedef struct live_s {
  unsigned char *p;
  size_t usable;
  unsigned char tag;
} live_t;

/* A previous block still holds its tag at both ends and in the middle. */
static int live_intact(const live_t *l) {
  if (!l->p || l->usable == 0)
    return 1;
  return l->p[0] == l->tag && l->p[l->usable - 1] == l->tag && l->p[l->usable / 2] == l->tag;
}

/* Sweep all sizes through entry e at alignment a; returns the number of bad blocks and
 * prints the first few. The previous block stays live while the next is written, so blocks
 * that overlap are caught. */
static int sweep(const entry_t *e, size_t a, const size_t *sizes, size_t nsizes, int *reported) {
  int bad = 0;
  live_t prev = {NULL, 0, 0};
  size_t prev_n = 0;
  for (size_t i = 0; i < nsizes; i++) {
    size_t n = sizes[i];
    unsigned char *p = (unsigned char *)e->alloc(tu_size(n), a);
    size_t usable = p ? fg_usable_size(p) : 0;
    const char *why = NULL;
    if (!p)
      why = "NULL";
    else if ((uintptr_t)p % a != 0)
      why = "misaligned";
    else if (usable < n)
      why = "usable size below request";
    if (!why) {
      unsigned char tag = (unsigned char)(0x11 + i);
      memset(p, tag, usable);
      if (!live_intact(&prev))
        why = "writing it changed the previous block (overlap)";
      if (usable && (p[0] != tag || p[usable - 1] != tag))
        why = "did not read back";
      if (prev.p)
        e->release(prev.p, prev_n, a);
      prev = (live_t){p, usable, tag};
      prev_n = n;
    }
    if (why) {
      bad++;
      if ((*reported)++ < 20)
        check_note("%s(size %zu, align %zu) -> %p, usable %zu: %s", e->name, n, a, (void *)p,
                   usable, why);
      if (p)
        e->release(p, n, a);
    }
  }
  if (prev.p)
    e->release(prev.p, prev_n, a);
  return bad;
}

/* Many live blocks at once: for each alignment and a few small sizes, 64 blocks stay live
 * together (so they fill whole pages of one class), each aligned, with usable size >= the
 * request, and none overlapping another. Returns the number of bad (alignment, size) cells. */
#define CROWD 64
static int crowd(const entry_t *e, int *reported) {
  static const size_t sizes[] = {0, 1, 8, 24, 100, 1000};
  int bad = 0;
  for (size_t a = 8; a <= ((size_t)1 << 21); a *= 2) {
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
      size_t n = sizes[s];
      fprintf(stderr, "cell: %d live blocks of size %zu, align %zu\n", CROWD, n, a);
      unsigned char *p[CROWD];
      size_t usable[CROWD];
      const char *why = NULL;
      for (int i = 0; i < CROWD; i++) {
        p[i] = (unsigned char *)e->alloc(tu_size(n), a);
        usable[i] = p[i] ? fg_usable_size(p[i]) : 0;
        if (!p[i] || (uintptr_t)p[i] % a || usable[i] < n)
          why = !p[i] ? "NULL" : usable[i] < n ? "usable size below request" : "misaligned";
        else
          memset(p[i], i + 1, usable[i]);
      }
      for (int i = 0; i < CROWD && !why; i++)
        if (usable[i] && (p[i][0] != i + 1 || p[i][usable[i] - 1] != i + 1))
          why = "blocks overlap";
      if (why) {
        bad++;
        if ((*reported)++ < 20)
          check_note("%s: %d live blocks of size %zu, align %zu: %s", e->name, CROWD, n, a, why);
      }
      for (int i = 0; i < CROWD; i++)
        if (p[i])
          e->release(p[i], n, a);
    }
  }
  return bad;
}

/* crowd() runs in a child per entry point: frugal aborts on a block it thinks is not live,
 * and that must fail one check with the cell that did it, not end the whole sweep. */
static void crowd_child(void *arg) {
  int reported = 0;
  _exit(crowd((const entry_t *)arg, &reported) ? 1 : 0);
}

/* The last two lines of a child's stderr: the cell it was in and what killed it. */
static const char *last_lines(const char *err) {
  const char *end = err + strlen(err), *s = end;
  int newlines = 0;
  while (s > err && newlines < 3)
    if (*--s == '\n')
      newlines++;
  return newlines == 3 ? s + 1 : s;
}

int main(void) {
  size_t sizes[80];
  size_t nsizes = sweep_sizes(sizes);
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  int reported = 0;
  check_note("%zu sizes from 0 to %zu bytes, alignments 8 .. 2^21", nsizes, sizes[nsizes - 1]);
  for (size_t e = 0; e < sizeof aligned_entries / sizeof aligned_entries[0]; e++) {
    const entry_t *en = &aligned_entries[e];
    for (size_t a = 8; a <= ((size_t)1 << 21); a *= 2) {
      int bad = sweep(en, a, sizes, nsizes, &reported);
      CHECKF(bad == 0,
             "%s, alignment %zu: %zu sizes 0..4 MiB aligned, usable >= size, writable, "
             "disjoint, freed (%d bad)",
             en->name, a, nsizes, bad);
    }
  }
  for (size_t e = 0; e < sizeof aligned_entries / sizeof aligned_entries[0]; e++) {
    tu_child_t c;
    char how[64];
    bool ran = tu_run_child(crowd_child, (void *)&aligned_entries[e], 60, &c);
    if (ran && !tu_child_exited_ok(&c))
      check_note("%s: child ended with %s after:\n%s", aligned_entries[e].name,
                 tu_child_how(&c, how, sizeof how), last_lines(c.err));
    CHECKF(ran && tu_child_exited_ok(&c),
           "%s: 64 live blocks per alignment 8..2^21 x size 0,1,8,24,100,1000: aligned, usable "
           ">= size, disjoint",
           aligned_entries[e].name);
  }
  for (size_t e = 0; e < sizeof page_entries / sizeof page_entries[0]; e++) {
    const entry_t *en = &page_entries[e];
    int bad = sweep(en, page, sizes, nsizes, &reported);
    CHECKF(bad == 0,
           "%s: %zu sizes 0..4 MiB page aligned, usable >= size, writable, disjoint, freed (%d "
           "bad)",
           en->name, nsizes, bad);
  }
  /* A size that is a multiple of its alignment, up to 4 KiB, is a whole block of its class (every
   * page starts on an OS page): usable size exactly the class's, no interior pointer into a
   * larger block, hundreds of them in a row (more than a page holds, the segment's first page
   * among them). */
  int whole = 0, tried = 0;
  for (size_t a = 16; a <= 4096; a *= 2) {
    static void *held[512];
    size_t n = 512 * 64 / a + 8;
    if (n > 512) n = 512;
    for (size_t i = 0; i < n; i++, tried++) {
      held[i] = aligned_alloc(a, a);
      whole += held[i] != NULL && ((uintptr_t)held[i] & (a - 1)) == 0 && malloc_usable_size(held[i]) == a;
    }
    for (size_t i = 0; i < n; i++) free(held[i]);
  }
  CHECKF(whole == tried, "aligned_alloc(a, a) for a = 16 .. 4 KiB: a whole block of the a-byte class, aligned "
                         "(%d of %d)", whole, tried);
  /* Sizes up to 1 KiB rounded up to the alignment take the class of the size, unchecked: that
   * class must be a multiple of the alignment. 8 blocks held at a time, so that some lie past
   * the first of their page. */
  int aligned = 0, asked = 0;
  for (size_t a = 16; a <= 1024; a *= 2)
    for (size_t n = 1; n <= 1024; n++) {
      void *held8[8];
      for (int i = 0; i < 8; i++, asked++) {
        held8[i] = aligned_alloc(a, (n + a - 1) / a * a);
        aligned += held8[i] != NULL && ((uintptr_t)held8[i] & (a - 1)) == 0;
      }
      for (int i = 0; i < 8; i++) free(held8[i]);
    }
  CHECKF(aligned == asked, "aligned_alloc(a, n) for a = 16 .. 1 KiB and every n up to 1 KiB: aligned (%d of %d)",
         aligned, asked);
  return check_finish("align");
}
