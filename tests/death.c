/* death.c — misuse is caught (RELIABILITY.md, "Misuse"): each case runs in a child process
 * with stderr in a pipe; the child must die of SIGABRT after printing exactly one line that
 * starts with "frugal: ", names the problem and names the pointer. Control cases (legal
 * uses that look close to misuse) must exit 0 without such a line.
 *
 * Sized-free policy (frugal's choice, like jemalloc's): free_sized, free_aligned_sized and
 * sized operator delete with a size that leaves more of the block unused than malloc's classes
 * and realloc do (usable / 8 + 7 bytes) abort with "wrong size"; a different size in the same
 * class, or one realloc kept the block for, is accepted. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

#include "apis.h"
#include "check.h"
#include "cxx_ops.h"
#include "testutil.h"

#define KIB ((size_t)1 << 10)

/* The pointer the child is about to misuse, written to memory shared with the parent. */
static volatile uintptr_t *shared_ptr;
static void expect(const void *p) { *shared_ptr = (uintptr_t)p; }

static char global_array[256];

/* ---- double free ---- */
static void df_now(size_t n) {
  void *p = malloc(n);
  expect(p);
  free(p);
  free(tu_ptr(p));
}
/* Free p, then keep the heap busy without ever handing p out again: same-class blocks
 * allocated before p was freed are freed after it (p sinks down the free list), and the
 * allocations in between use other sizes. */
static void df_later(size_t n, size_t other1, size_t other2) {
  void *same[16];
  for (int i = 0; i < 16; i++)
    same[i] = malloc(n);
  void *p = malloc(n);
  expect(p);
  free(p);
  for (int i = 0; i < 16; i++)
    free(same[i]);
  for (int i = 0; i < 200; i++) {
    void *a = malloc(other1), *b = malloc(other2), *c = malloc(24);
    free(a);
    free(c);
    free(b);
  }
  free(tu_ptr(p));
}
static void df_small_now(void) { df_now(64); }
static void df_small_later(void) { df_later(64, 200, 1000); }
static void df_medium_now(void) { df_now(20 * KIB); }
static void df_medium_later(void) { df_later(20 * KIB, 5 * KIB, 60 * KIB); }
/* Its page given back while empty (heap.c's lone_pages_uncarve, as a 20 KiB class starts a
 * page): the block is no longer carved, and still a double free. */
static void df_uncarved(void) {
  void *p = malloc(100 * KIB);
  free(p);
  void *q = malloc(20 * KIB);
  expect(q);
  expect(p);
  free(tu_ptr(p));
}
/* Grown where it is by realloc (heap.c's _fg_heap_regrow: its page changed class), freed,
 * freed again. */
static void df_regrown(void) {
  void *p = malloc(70 * KIB);
  expect(p);
  void *q = realloc(p, 100 * KIB);
  expect(q);
  free(q);
  free(tu_ptr(q));
}
static void df_large_now(void) { df_now(8 << 20); }
static void df_large_later(void) { df_later(8 << 20, 1 << 20, 16 << 20); }
static void df_fg_free(void) {
  void *p = fg_malloc(48);
  expect(p);
  fg_free(p);
  fg_free(tu_ptr(p));
}
static void *free_in_thread(void *p) {
  free(p);
  return NULL;
}
static void df_cross_thread(void) {
  void *p = malloc(64);
  pthread_t t;
  expect(p);
  pthread_create(&t, NULL, free_in_thread, p);
  pthread_join(t, NULL);
  free(tu_ptr(p));
}
static void df_delete(void) {
  void *p = cxx_new(100);
  expect(p);
  cxx_delete(p);
  cxx_delete(tu_ptr(p));
}

/* ---- interior and misaligned pointers ---- */
static void bad_interior(size_t n, size_t offset) {
  char *p = (char *)malloc(n);
  expect(p + offset);
  free(tu_ptr(p + offset));
}
static void inv_small_plus1(void) { bad_interior(64, 1); }
static void inv_small_plus16(void) { bad_interior(64, 16); }
static void inv_medium_page(void) { bad_interior(20 * KIB, 4 * KIB); }
static void inv_large_page(void) { bad_interior(8 << 20, 4 * KIB); }
static void inv_large_plus1(void) { bad_interior(8 << 20, 1); }

/* ---- pointers frugal never handed out ---- */
static void foreign_stack(void) {
  char buf[64];
  memset(buf, 0, sizeof buf);
  expect(buf);
  free(tu_ptr(buf));
}
static void foreign_global(void) {
  expect(global_array);
  free(tu_ptr(global_array));
}
static void foreign_mmap(void) {
  void *m = mmap(NULL, 1 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  expect(m);
  free(tu_ptr(m));
}
static void foreign_mmap_aligned(void) {
  /* A private mapping at a 4 MiB boundary, where a segment header could be. */
  char *m = (char *)mmap(NULL, 12 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                         -1, 0);
  char *aligned = (char *)(((uintptr_t)m + (4 << 20) - 1) & ~(uintptr_t)((4 << 20) - 1));
  memset(aligned, 0xFF, 64 * KIB);
  expect(aligned + 4096);
  free(tu_ptr(aligned + 4096));
}

/* ---- use of a freed pointer ---- */
static void freed_realloc(void) {
  void *p = malloc(64);
  expect(p);
  free(p);
  void *q = realloc(tu_ptr(p), 128);
  tu_ptr(q);
}
static void freed_realloc_medium(void) {
  void *p = malloc(20 * KIB);
  expect(p);
  free(p);
  void *q = realloc(tu_ptr(p), 40 * KIB);
  tu_ptr(q);
}
static void freed_usable_size(void) {
  void *p = malloc(64);
  expect(p);
  free(p);
  size_t n = malloc_usable_size(tu_ptr(p));
  tu_size(n);
}

/* ---- sized frees with a size of another class ---- */
static void wrong_free_sized(void) {
  void *p = malloc(64);
  expect(p);
  free_sized(p, tu_size(4096));
}
static void wrong_free_sized_large(void) {
  void *p = malloc(8 << 20);
  expect(p);
  free_sized(p, tu_size(100));
}
static void wrong_free_aligned_sized(void) {
  void *p = aligned_alloc(64, 64);
  expect(p);
  free_aligned_sized(p, 64, tu_size(2000));
}
static void wrong_delete_sized(void) {
  void *p = cxx_new(64);
  expect(p);
  cxx_delete_sized(p, tu_size(4096));
}
static void wrong_delete_array_sized(void) {
  void *p = cxx_new_array(3000);
  expect(p);
  cxx_delete_array_sized(p, tu_size(24));
}

static void wrong_free_sized_within_half(void) { /* 600 of a 1,024-byte block: 41 % unused */
  void *p = malloc(1000);
  expect(p);
  free_sized(p, tu_size(600));
}

/* A byte past the waste bound (internal.h's _fg_wrong_size): 880 of a 1,024-byte block
 * leaves 144 B unused, the bound is 143 (secure mode: the bound is the request's). */
static void wrong_free_sized_edge(void) {
  void *p = malloc(1000);
  expect(p);
  size_t u = malloc_usable_size(p);
  free_sized(p, tu_size(u - (u + 120) / 8 - 1));
}

/* ---- controls: legal, must not abort ---- */
static void ok_sized_same_class(void) {
  void *p = malloc(60);
  free_sized(p, 64); /* 60 and 64 share the 64-byte class */
  void *q = malloc(20 * KIB);
  free_sized(q, 20 * KIB);
  void *r = aligned_alloc(4096, 5000);
  free_aligned_sized(r, 4096, 5000);
  void *s = cxx_new(64);
  cxx_delete_sized(s, 64);
  void *t = malloc(8 << 20);
  free_sized(t, 8 << 20);
  void *u = realloc(malloc(1000), 900); /* kept in its 1,024-byte block, 12 % unused */
  free_sized(u, 900);
  void *v = realloc(malloc(1000), 520); /* moved: a 1,024-byte block would leave 49 % */
  free_sized(v, 520);
  void *w = realloc(malloc(3 << 20), (3 << 20) - 300000); /* a large block, shrunk in place */
  free_sized(w, (3 << 20) - 300000);
  for (size_t n = 0; n <= 1200; n++) { /* every size with its own (secure mode: a class up) */
    free_sized(malloc(n), n);
    cxx_delete_sized(cxx_new(n + 1), n + 1);
  }
}
/* The smallest size each block takes: usable - (usable + 120) / 8, the waste bound's edge
 * (internal.h's _fg_wrong_size). Plain mode: secure mode's blocks are a class up, and its
 * usable size is the request. */
static void ok_sized_edge(void) {
  if (getenv("FRUGAL_SECURE") != NULL) return;
  for (size_t n = 1; n <= 70000; n += n < 4096 ? 1 : 97) {
    void *p = malloc(n);
    size_t u = malloc_usable_size(p);
    free_sized(p, u - (u + 120) / 8 > 0 ? u - (u + 120) / 8 : 1);
  }
}
static void ok_reuse_then_free(void) {
  for (int i = 0; i < 1000; i++) {
    void *p = malloc(64);
    free(p);
    void *q = malloc(64); /* likely p again: freeing it is legal */
    free(q);
  }
  void *b = malloc(8 << 20);
  free(b);
  void *c = malloc(8 << 20);
  free(c);
  free(NULL);
}

typedef struct death_s {
  const char *name;
  void (*misuse)(void);
  const char *words; /* expected in the frugal: line; "" = prefix only; NULL = control */
} death_t;

static const death_t cases[] = {
    {"double free, 64 B, right away", df_small_now, "double free"},
    {"double free, 64 B, after other frees and allocations", df_small_later, "double free"},
    {"double free, 20 KiB, right away", df_medium_now, "double free"},
    {"double free, 20 KiB, after other frees and allocations", df_medium_later, "double free"},
    {"double free, 100 KiB, after its empty page gave its memory back", df_uncarved, "double free"},
    {"double free, 100 KiB, grown in place from 70 KiB by realloc", df_regrown, "double free"},
    {"double free, 8 MiB, right away", df_large_now, "double free"},
    {"double free, 8 MiB, after other frees and allocations", df_large_later, "double free"},
    {"double fg_free, 48 B", df_fg_free, "double free"},
    {"double free, 64 B, first free from another thread", df_cross_thread, "double free"},
    {"double operator delete, 100 B", df_delete, "double free"},
    {"free(p+1) of a 64 B block", inv_small_plus1, "invalid pointer"},
    {"free(p+16) of a 64 B block", inv_small_plus16, "invalid pointer"},
    {"free(p+4096) of a 20 KiB block", inv_medium_page, "invalid pointer"},
    {"free(p+4096) of an 8 MiB block", inv_large_page, "invalid pointer"},
    {"free(p+1) of an 8 MiB block", inv_large_plus1, "invalid pointer"},
    {"free of a stack array", foreign_stack, "not a frugal pointer"},
    {"free of a global array", foreign_global, "not a frugal pointer"},
    {"free of a private mmap", foreign_mmap, "not a frugal pointer"},
    {"free inside a 4 MiB-aligned private mmap", foreign_mmap_aligned, "not a frugal pointer"},
    {"realloc of a freed 64 B block", freed_realloc, ""},
    {"realloc of a freed 20 KiB block", freed_realloc_medium, ""},
    {"malloc_usable_size of a freed 64 B block", freed_usable_size, ""},
    {"free_sized(64 B block, 4096)", wrong_free_sized, "wrong size"},
    {"free_sized(8 MiB block, 100)", wrong_free_sized_large, "wrong size"},
    {"free_aligned_sized(64 B block, 64, 2000)", wrong_free_aligned_sized, "wrong size"},
    {"operator delete(64 B block, 4096)", wrong_delete_sized, "wrong size"},
    {"operator delete[](3000 B block, 24)", wrong_delete_array_sized, "wrong size"},
    {"free_sized(1000 B block, 600)", wrong_free_sized_within_half, "wrong size"},
    {"free_sized(1000 B block, a byte past the bound)", wrong_free_sized_edge, "wrong size"},
    {"control: sized frees with sizes of the right class", ok_sized_same_class, NULL},
    {"control: sized frees at the waste bound's edge", ok_sized_edge, NULL},
    {"control: free of a block handed out again after a free", ok_reuse_then_free, NULL},
};

static void run_misuse(void *arg) { ((const death_t *)arg)->misuse(); }

/* Lines of err starting with "frugal: "; the last one is copied to line. */
static int frugal_lines(const char *err, char *line, size_t len) {
  int count = 0;
  for (const char *s = err; s && *s; s = strchr(s, '\n') ? strchr(s, '\n') + 1 : NULL) {
    if (strncmp(s, "frugal: ", 8) != 0)
      continue;
    count++;
    size_t n = strcspn(s, "\n");
    if (n >= len)
      n = len - 1;
    memcpy(line, s, n);
    line[n] = '\0';
  }
  return count;
}

static void lower(char *s) {
  for (; *s; s++)
    if (*s >= 'A' && *s <= 'Z')
      *s = (char)(*s - 'A' + 'a');
}

static void run_case(const death_t *d) {
  tu_child_t c;
  char how[64], line[512] = "", lowered[512], hex[32];
  *shared_ptr = 0;
  if (!tu_run_child(run_misuse, (void *)d, 20, &c)) {
    CHECKF(0, "%s: child process started", d->name);
    return;
  }
  int lines = frugal_lines(c.err, line, sizeof line);
  tu_child_how(&c, how, sizeof how);
  if (!d->words) {
    CHECKF(tu_child_exited_ok(&c) && lines == 0, "%s: exits 0 with no frugal: line (%s)",
           d->name, how);
    return;
  }
  if (!tu_child_signalled(&c, SIGABRT) || lines != 1)
    check_note("child stderr: %s", c.err[0] ? c.err : "(empty)");
  CHECKF(tu_child_signalled(&c, SIGABRT), "%s: child dies of SIGABRT (%s)", d->name, how);
  memcpy(lowered, line, sizeof lowered);
  lower(lowered);
  CHECKF(lines == 1 && strstr(lowered, d->words) != NULL,
         "%s: stderr has one line \"frugal: ...%s...\" (%d such lines)", d->name, d->words,
         lines);
  snprintf(hex, sizeof hex, "%lx", (unsigned long)*shared_ptr);
  CHECKF(lines == 1 && *shared_ptr != 0 && strstr(lowered, hex) != NULL,
         "%s: the line names the pointer %#lx", d->name, (unsigned long)*shared_ptr);
}

int main(void) {
  shared_ptr = (volatile uintptr_t *)mmap(NULL, 4096, PROT_READ | PROT_WRITE,
                                          MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (shared_ptr == MAP_FAILED) {
    CHECK("shared page for the children", 0);
    return check_finish("death");
  }
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    run_case(&cases[i]);
  return check_finish("death");
}
