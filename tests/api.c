/* api.c — API conformance: every row of RELIABILITY.md's "Bad input" table, each its own
 * check, run once through the libc names frugal overrides and once through the fg_ names.
 * Expected results are glibc's (the library frugal replaces), per that table. */
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "apis.h"
#include "check.h"
#include "testutil.h"

#define SENTINEL ((void *)(uintptr_t)0x5e471e1)

static size_t page_size(void) { return (size_t)sysconf(_SC_PAGESIZE); }

/* malloc(0): non-NULL, unique, freeable. */
static void row_malloc_zero(const api_t *a) {
  void *p = a->malloc(tu_size(0));
  void *q = a->malloc(tu_size(0));
  CHECKF(p != NULL, "%smalloc(0) returns non-NULL", a->pfx);
  CHECKF(p != q, "%smalloc(0) twice returns two distinct pointers", a->pfx);
  a->free(p);
  a->free(q);
  void *r = a->malloc(tu_size(1));
  CHECKF(r != NULL, "%sfree of malloc(0) blocks leaves the heap usable", a->pfx);
  a->free(r);
}

/* free(NULL) does nothing; free never changes errno, for any kind of block. */
static void row_free_errno(const api_t *a) {
  static const size_t sizes[] = {0, 16, 1000, 20 * 1024, 300 * 1024, 8 * 1024 * 1024};
  errno = 4242;
  a->free(NULL);
  CHECKF(errno == 4242, "%sfree(NULL) leaves errno unchanged", a->pfx);
  int kept = 1;
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    void *p = a->malloc(sizes[i]);
    memset(p, 1, sizes[i]);
    errno = 4243;
    a->free(p);
    if (errno != 4243)
      kept = 0;
  }
  CHECKF(kept, "%sfree of 0 B..8 MiB blocks leaves errno unchanged", a->pfx);
  /* Memory returned to the OS inside free (large blocks, emptied segments) must not leak
   * errno either: a large block freed right after fg_collect has nothing to cache into. */
  void *big = a->malloc(tu_size(32 * TU_MIB));
  fg_collect(true);
  errno = 4244;
  a->free(big);
  CHECKF(errno == 4244, "%sfree of a 32 MiB block after fg_collect leaves errno unchanged",
         a->pfx);
}

/* malloc(n) with n > PTRDIFF_MAX, malloc(SIZE_MAX): NULL, ENOMEM. */
static void row_malloc_huge(const api_t *a) {
  static const struct {
    size_t n;
    const char *what;
  } cases[] = {{(size_t)PTRDIFF_MAX + 1, "PTRDIFF_MAX+1"},
               {SIZE_MAX, "SIZE_MAX"},
               {SIZE_MAX - 4095, "SIZE_MAX-4095"},
               {(size_t)PTRDIFF_MAX, "PTRDIFF_MAX"}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    CHECKF(TU_FAILS_WITH(ENOMEM, a->malloc(tu_size(cases[i].n))),
           "%smalloc(%s) returns NULL with ENOMEM", a->pfx, cases[i].what);
  }
}

/* More memory than the machine has (2 TiB, 4 TiB), under the kernel's heuristic overcommit
 * (its default): NULL with ENOMEM, as glibc's malloc gives (the kernel refuses the mapping).
 * A program that tries a huge size first and falls back (gdk-pixbuf's decoders) relies on it. */
static void row_malloc_beyond_memory(const api_t *a) {
  FILE *f = fopen("/proc/sys/vm/overcommit_memory", "r");
  int mode = -1;
  if (f != NULL && fscanf(f, "%d", &mode) != 1) mode = -1;
  if (f != NULL) fclose(f);
  if (mode != 0) {
    check_note("vm.overcommit_memory is %d, not 0: the kernel may grant any size", mode);
    return;
  }
  size_t sizes[] = {(size_t)2 << 40, (size_t)4 << 40};
  for (size_t i = 0; i < 2; i++) {
    CHECKF(TU_FAILS_WITH(ENOMEM, a->malloc(tu_size(sizes[i]))), "%smalloc(%zu TiB) returns NULL with ENOMEM", a->pfx,
           sizes[i] >> 40);
    CHECKF(TU_FAILS_WITH(ENOMEM, a->calloc(1, tu_size(sizes[i]))), "%scalloc(1, %zu TiB) returns NULL with ENOMEM",
           a->pfx, sizes[i] >> 40);
  }
}

/* calloc(n, s) with n*s overflowing, reallocarray overflow: NULL, ENOMEM. */
static void row_calloc_overflow(const api_t *a) {
  static const struct {
    size_t n, s;
    const char *what;
  } cases[] = {{SIZE_MAX / 2 + 1, 2, "(SIZE_MAX/2+1, 2)"},
               {(size_t)1 << 32, (size_t)1 << 32, "(2^32, 2^32)"},
               {SIZE_MAX, SIZE_MAX, "(SIZE_MAX, SIZE_MAX)"},
               {3, SIZE_MAX / 3 + 1, "(3, SIZE_MAX/3+1)"},
               {(size_t)PTRDIFF_MAX / 2 + 1, 2, "(PTRDIFF_MAX/2+1, 2) = PTRDIFF_MAX+1"}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    CHECKF(TU_FAILS_WITH(ENOMEM, a->calloc(tu_size(cases[i].n), tu_size(cases[i].s))),
           "%scalloc%s returns NULL with ENOMEM", a->pfx, cases[i].what);
  }
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    CHECKF(TU_FAILS_WITH(ENOMEM, a->reallocarray(NULL, tu_size(cases[i].n), tu_size(cases[i].s))),
           "%sreallocarray(NULL, %s) returns NULL with ENOMEM", a->pfx, cases[i].what + 1);
  }
  /* Overflow on an existing block: NULL, ENOMEM, and the block stays valid and intact. */
  char *q = (char *)a->malloc(100);
  tu_fill(q, 100, 77);
  errno = 0;
  void *r = a->reallocarray(q, tu_size(SIZE_MAX / 2 + 1), tu_size(4));
  int e = errno;
  CHECKF(r == NULL && e == ENOMEM, "%sreallocarray(p, SIZE_MAX/2+1, 4) returns NULL with ENOMEM",
         a->pfx);
  CHECKF(tu_verify(q, 100, 77) < 0, "%sreallocarray overflow leaves p's 100 bytes intact",
         a->pfx);
  q = (char *)a->reallocarray(q, 50, 4);
  CHECKF(q != NULL && tu_verify(q, 100, 77) < 0,
         "%sreallocarray(p, 50, 4) grows p to 200 bytes keeping its contents", a->pfx);
  a->free(q);
}

/* calloc(0, n), calloc(n, 0): non-NULL. calloc also zeroes memory that was dirty before. */
static void row_calloc_zero(const api_t *a) {
  void *p = a->calloc(tu_size(0), tu_size(16));
  void *q = a->calloc(tu_size(16), tu_size(0));
  void *r = a->calloc(tu_size(0), tu_size(0));
  CHECKF(p != NULL, "%scalloc(0, 16) returns non-NULL", a->pfx);
  CHECKF(q != NULL, "%scalloc(16, 0) returns non-NULL", a->pfx);
  CHECKF(r != NULL, "%scalloc(0, 0) returns non-NULL", a->pfx);
  a->free(p);
  a->free(q);
  a->free(r);
  /* Recycled memory: dirty a block, free it, calloc the same size: it must read as zero. */
  static const size_t sizes[] = {8, 24, 128, 1000, 4096, 20000, 100000, 1 << 20, 9 << 20};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    size_t n = sizes[i];
    int zero = 1;
    for (int round = 0; round < 4; round++) {
      void *d = a->malloc(n);
      memset(d, 0xA5, a->usable_size(d));
      a->free(d);
      unsigned char *z = (unsigned char *)a->calloc(1, tu_size(n));
      if (!z || !tu_is_zero(z, n))
        zero = 0;
      if (z)
        memset(z, 0x5A, n);
      a->free(z);
    }
    CHECKF(zero, "%scalloc(1, %zu) of recycled dirty memory is all zero", a->pfx, n);
  }
  /* Every size up to 300 (frugal zeroes small blocks in line, from both ends): the dirty block
   * freed comes back zeroed, and the block allocated after it keeps every byte. */
  int zeroed = 1, kept = 1;
  for (size_t n = 0; n <= 300; n++) {
    unsigned char *x = (unsigned char *)a->malloc(tu_size(n)), *y = (unsigned char *)a->malloc(tu_size(n));
    if (!x || !y) {
      zeroed = 0;
      break;
    }
    size_t ny = a->usable_size(y);
    memset(x, 0xA5, a->usable_size(x));
    memset(y, 0x5A, ny);
    a->free(x);
    unsigned char *z = (unsigned char *)a->calloc(1, tu_size(n));
    zeroed &= z != NULL && tu_is_zero(z, n);
    for (size_t i = 0; i < ny; i++) kept &= y[i] == 0x5A;
    a->free(z);
    a->free(y);
  }
  CHECKF(zeroed, "%scalloc(1, n) of a recycled dirty block is all zero, n = 0 .. 300", a->pfx);
  CHECKF(kept, "%scalloc(1, n) writes nothing of the block allocated next to it, n = 0 .. 300", a->pfx);
}

/* realloc(NULL, n) is malloc(n); realloc(NULL, 0) is non-NULL. */
static void row_realloc_null(const api_t *a) {
  static const size_t sizes[] = {1, 100, 5000, 70000, 3 << 20};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    char *p = (char *)a->realloc(NULL, tu_size(sizes[i]));
    CHECKF(p != NULL && a->usable_size(p) >= sizes[i],
           "%srealloc(NULL, %zu) returns a block of >= %zu usable bytes", a->pfx, sizes[i],
           sizes[i]);
    if (p)
      memset(p, 3, a->usable_size(p));
    a->free(p);
  }
  void *z = a->realloc(NULL, tu_size(0));
  CHECKF(z != NULL, "%srealloc(NULL, 0) returns non-NULL", a->pfx);
  a->free(z);
}

/* realloc(p, 0): frees p, returns NULL, errno unchanged (glibc). */
static void row_realloc_zero(const api_t *a) {
  static const size_t sizes[] = {16, 3000, 40000, 5 << 20};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    void *p = a->malloc(sizes[i]);
    int owned_before = fg_is_owned(p);
    errno = 4245;
    void *r = a->realloc(p, tu_size(0));
    int e = errno;
    CHECKF(r == NULL, "%srealloc(p[%zu], 0) returns NULL", a->pfx, sizes[i]);
    CHECKF(e == 4245, "%srealloc(p[%zu], 0) leaves errno unchanged", a->pfx, sizes[i]);
    CHECKF(owned_before && !fg_is_owned(p), "%srealloc(p[%zu], 0) frees p (fg_is_owned false)",
           a->pfx, sizes[i]);
    if (r)
      a->free(r);
  }
}

/* realloc(p, huge): NULL, ENOMEM, p still valid and intact. */
static void row_realloc_huge(const api_t *a) {
  static const size_t sizes[] = {40, 2000, 50000, 6 << 20};
  static const struct {
    size_t n;
    const char *what;
  } huge[] = {{SIZE_MAX, "SIZE_MAX"}, {(size_t)PTRDIFF_MAX + 1, "PTRDIFF_MAX+1"},
              {SIZE_MAX - 4095, "SIZE_MAX-4095"}};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    for (size_t h = 0; h < sizeof huge / sizeof huge[0]; h++) {
      char *p = (char *)a->malloc(sizes[i]);
      tu_fill(p, sizes[i], i * 10 + h);
      errno = 0;
      void *r = a->realloc(p, tu_size(huge[h].n));
      int e = errno;
      CHECKF(r == NULL && e == ENOMEM, "%srealloc(p[%zu], %s) returns NULL with ENOMEM", a->pfx,
             sizes[i], huge[h].what);
      CHECKF(fg_is_owned(p) && tu_verify(p, sizes[i], i * 10 + h) < 0,
             "%srealloc(p[%zu], %s) leaves p live and intact", a->pfx, sizes[i], huge[h].what);
      if (r)
        a->free(r);
      a->free(p);
    }
  }
}

/* realloc grow and shrink keep min(old, new) bytes (the full sweep is tests/realloc.c). */
static void row_realloc_keeps(const api_t *a) {
  static const size_t steps[] = {10, 100, 1000, 30000, 600000, 5 << 20, 200, 3, 4 << 20, 1};
  size_t n = 5;
  char *p = (char *)a->malloc(n);
  tu_fill(p, n, 9);
  int ok = 1;
  for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
    size_t m = steps[i];
    p = (char *)a->realloc(p, m);
    if (!p || tu_verify(p, n < m ? n : m, 9) >= 0)
      ok = 0;
    if (!p)
      break;
    tu_fill(p, m, 9);
    n = m;
  }
  CHECKF(ok, "%srealloc through 5,10,...,5 MiB,200,3,4 MiB,1 keeps min(old,new) bytes", a->pfx);
  a->free(p);
}

/* aligned_alloc with alignment 0 or not a power of two: NULL, EINVAL (glibc >= 2.38). */
static void row_aligned_alloc_bad(const api_t *a) {
  static const size_t bad[] = {0, 3, 24, 48, 100, 4097, SIZE_MAX};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    CHECKF(TU_FAILS_WITH(EINVAL, a->aligned_alloc(tu_size(bad[i]), tu_size(64))),
           "%saligned_alloc(%zu, 64) returns NULL with EINVAL", a->pfx, bad[i]);
  }
  /* Powers of two below the word size are valid alignments for aligned_alloc. */
  static const size_t small[] = {1, 2, 4};
  for (size_t i = 0; i < sizeof small / sizeof small[0]; i++) {
    void *p = a->aligned_alloc(tu_size(small[i]), tu_size(10));
    CHECKF(p != NULL, "%saligned_alloc(%zu, 10) returns a block", a->pfx, small[i]);
    a->free(p);
  }
  CHECKF(TU_FAILS_WITH(ENOMEM, a->aligned_alloc(tu_size(64), tu_size(SIZE_MAX - 32))),
         "%saligned_alloc(64, SIZE_MAX-32) returns NULL with ENOMEM", a->pfx);
}

/* posix_memalign: bad alignment EINVAL, too large ENOMEM, *memptr untouched; size 0 → 0. */
static void row_posix_memalign(const api_t *a) {
  static const size_t bad[] = {0, 1, 2, 4, 12, 24, 48, 4097, SIZE_MAX};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    void *m = SENTINEL;
    int rc = a->posix_memalign(&m, tu_size(bad[i]), tu_size(64));
    CHECKF(rc == EINVAL && m == SENTINEL,
           "%sposix_memalign(&m, %zu, 64) returns EINVAL and leaves *memptr untouched", a->pfx,
           bad[i]);
  }
  static const size_t toolarge[] = {SIZE_MAX, SIZE_MAX - 4095, (size_t)PTRDIFF_MAX + 1};
  for (size_t i = 0; i < sizeof toolarge / sizeof toolarge[0]; i++) {
    void *m = SENTINEL;
    int rc = a->posix_memalign(&m, tu_size(64), tu_size(toolarge[i]));
    CHECKF(rc == ENOMEM && m == SENTINEL,
           "%sposix_memalign(&m, 64, %#zx) returns ENOMEM and leaves *memptr untouched", a->pfx,
           toolarge[i]);
  }
  void *m = SENTINEL;
  int rc = a->posix_memalign(&m, tu_size(256), tu_size(0));
  CHECKF(rc == 0 && m != SENTINEL && ((uintptr_t)m % 256) == 0,
         "%sposix_memalign(&m, 256, 0) returns 0 and sets a 256-aligned (or NULL) pointer",
         a->pfx);
  if (rc == 0)
    a->free(m);
  m = SENTINEL;
  rc = a->posix_memalign(&m, tu_size(sizeof(void *)), tu_size(100));
  CHECKF(rc == 0 && m != NULL && m != SENTINEL,
         "%sposix_memalign(&m, sizeof(void*), 100) returns 0 and a block", a->pfx);
  if (rc == 0)
    a->free(m);
}

/* memalign: non-power-of-two alignment rounds up; absurd alignment: NULL, EINVAL. */
static void row_memalign(const api_t *a) {
  static const struct {
    size_t align, expect;
  } round[] = {{24, 32}, {100, 128}, {3, 4}, {1000, 1024}, {4097, 8192}, {65535, 65536}};
  for (size_t i = 0; i < sizeof round / sizeof round[0]; i++) {
    void *p = a->memalign(tu_size(round[i].align), tu_size(50));
    CHECKF(p != NULL && (uintptr_t)p % round[i].expect == 0,
           "%smemalign(%zu, 50) returns a block aligned to %zu", a->pfx, round[i].align,
           round[i].expect);
    a->free(p);
  }
  void *one = a->memalign(tu_size(1), tu_size(50));
  CHECKF(one != NULL, "%smemalign(1, 50) returns a block", a->pfx);
  a->free(one);
  static const struct {
    size_t align;
    const char *what;
  } absurd[] = {{SIZE_MAX, "SIZE_MAX"}, {SIZE_MAX / 2 + 2, "SIZE_MAX/2+2"}};
  for (size_t i = 0; i < sizeof absurd / sizeof absurd[0]; i++) {
    CHECKF(TU_FAILS_WITH(EINVAL, a->memalign(tu_size(absurd[i].align), tu_size(16))),
           "%smemalign(%s, 16) returns NULL with EINVAL", a->pfx, absurd[i].what);
  }
  CHECKF(TU_FAILS_WITH(ENOMEM, a->memalign(tu_size(4096), tu_size(SIZE_MAX - 8192))),
         "%smemalign(4096, SIZE_MAX-8192) returns NULL with ENOMEM", a->pfx);
}

/* valloc: page aligned; pvalloc: page aligned, rounded to pages; pvalloc(SIZE_MAX): ENOMEM. */
static void row_valloc(const api_t *a) {
  size_t pg = page_size();
  static const size_t sizes[] = {0, 1, 100, 4096, 5000, 70000, 3 << 20};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    char *v = (char *)a->valloc(tu_size(sizes[i]));
    CHECKF(v != NULL && (uintptr_t)v % pg == 0 && a->usable_size(v) >= sizes[i],
           "%svalloc(%zu) is page aligned with >= %zu usable bytes", a->pfx, sizes[i], sizes[i]);
    if (v)
      memset(v, 1, a->usable_size(v));
    a->free(v);
    size_t want = (sizes[i] + pg - 1) / pg * pg; /* glibc: pvalloc(0) rounds to 0 */
    char *w = (char *)a->pvalloc(tu_size(sizes[i]));
    CHECKF(w != NULL && (uintptr_t)w % pg == 0 && a->usable_size(w) >= want,
           "%spvalloc(%zu) is page aligned with >= %zu usable bytes", a->pfx, sizes[i], want);
    if (w)
      memset(w, 2, a->usable_size(w));
    a->free(w);
  }
  CHECKF(TU_FAILS_WITH(ENOMEM, a->pvalloc(tu_size(SIZE_MAX))),
         "%spvalloc(SIZE_MAX) returns NULL with ENOMEM", a->pfx);
  CHECKF(TU_FAILS_WITH(ENOMEM, a->pvalloc(tu_size(SIZE_MAX - pg + 2))),
         "%spvalloc(SIZE_MAX-page+2) returns NULL with ENOMEM", a->pfx);
  CHECKF(TU_FAILS_WITH(ENOMEM, a->valloc(tu_size(SIZE_MAX))),
         "%svalloc(SIZE_MAX) returns NULL with ENOMEM", a->pfx);
}

/* usable size: 0 for NULL, >= request; sized frees with the right size work. */
static void row_usable_and_sized(const api_t *a) {
  CHECKF(a->usable_size(NULL) == 0, "%s usable size of NULL is 0", a->pfx);
  static const size_t sizes[] = {1, 60, 64, 1000, 20000, 300000, 5 << 20};
  int ok = 1;
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    void *p = a->malloc(sizes[i]);
    if (!p || a->usable_size(p) < sizes[i])
      ok = 0;
    a->free_sized(p, sizes[i]);
    void *q = a->aligned_alloc(256, sizes[i]);
    if (!q || a->usable_size(q) < sizes[i] || (uintptr_t)q % 256)
      ok = 0;
    a->free_aligned_sized(q, 256, sizes[i]);
  }
  CHECKF(ok, "%sfree_sized / free_aligned_sized with the requested size free 1 B..5 MiB blocks",
         a->pfx);
  a->free_sized(NULL, 0);
  a->free_aligned_sized(NULL, 64, 0);
  void *p = a->malloc(10);
  CHECKF(p != NULL, "%sfree_sized(NULL, 0) and free_aligned_sized(NULL, ...) are no-ops",
         a->pfx);
  a->free(p);
}

/* free's double-free test reads the segment bits of a block's first word (its bytes 2-3),
 * and the first 4 bytes, the link tag with them, only where those match the block's own
 * segment; a word that passes both is looked up in the page's free lists. Live blocks that
 * start with each of the 256 byte values, or with a pointer into their own segment with each
 * low 3 bits (one of them shaped exactly like a free-list link to a neighbour), are live blocks
 * to free and to malloc_usable_size (a false "double free" would abort the test). */
static void row_first_word(const api_t *a) {
  int ok = 1;
  for (int v = 0; v < 256; v++) {
    unsigned char *x = a->malloc(48), *y = a->malloc(48);
    if (!x || !y) {
      ok = 0;
      break;
    }
    x[0] = (unsigned char)v;
    uintptr_t near = (uintptr_t)x + (unsigned)(v & 7);
    memcpy(y, &near, sizeof near);
    if (a->usable_size(x) < 48 || a->usable_size(y) < 48) ok = 0;
    a->free(y);
    a->free(x);
  }
  CHECKF(ok, "%sblocks starting with any byte, or a pointer into their segment, are freed as live", a->pfx);
}

/* fg_-only parts of the API: ownership queries, collect, options. */
static void fg_only(void) {
  int local = 0;
  char *p = (char *)fg_malloc(100);
  CHECK("fg_is_owned(live block) is true", fg_is_owned(p));
  CHECK("fg_is_owned(interior pointer p+8) is false", !fg_is_owned(p + 8));
  CHECK("fg_is_owned(stack address) is false", !fg_is_owned(&local));
  CHECK("fg_is_owned(NULL) is false", !fg_is_owned(NULL));
  fg_free(p);
  CHECK("fg_is_owned(freed block) is false", !fg_is_owned(p));
  void *m = malloc(20000);
  CHECK("a libc-name malloc block is frugal's (fg_is_owned)", fg_is_owned(m));
  free(m);
  fg_collect(false);
  fg_collect(true);
  CHECK("malloc_trim(0) runs and returns 0 or 1", (unsigned)malloc_trim(0) <= 1);
  void *after = fg_malloc(64);
  CHECK("fg_collect(false), fg_collect(true) and malloc_trim leave the heap usable",
        after != NULL);
  fg_free(after);
  long decay = fg_option_get(FG_OPTION_DECAY_MS);
  CHECK("fg_option_get(FG_OPTION_DECAY_MS) is >= 0", decay >= 0);
  fg_option_set(FG_OPTION_DECAY_MS, 123);
  CHECK("fg_option_set then fg_option_get(FG_OPTION_DECAY_MS) reads 123",
        fg_option_get(FG_OPTION_DECAY_MS) == 123);
  fg_option_set(FG_OPTION_DECAY_MS, decay);
}

int main(void) {
  for (int i = 0; i < 2; i++) {
    const api_t *a = api_all[i];
    row_malloc_zero(a);
    row_free_errno(a);
    row_malloc_huge(a);
    row_malloc_beyond_memory(a);
    row_calloc_overflow(a);
    row_calloc_zero(a);
    row_realloc_null(a);
    row_realloc_zero(a);
    row_realloc_huge(a);
    row_realloc_keeps(a);
    row_aligned_alloc_bad(a);
    row_posix_memalign(a);
    row_memalign(a);
    row_valloc(a);
    row_usable_and_sized(a);
    row_first_word(a);
  }
  fg_only();
  return check_finish("api");
}
