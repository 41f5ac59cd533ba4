/* os.c — the OS layer: every mmap, munmap, mremap and madvise frugal makes goes through
 * here, so the ledger can count them. Failures return NULL/false with errno as the kernel
 * left it; callers turn that into ENOMEM. Nothing here allocates. */
#define _GNU_SOURCE
#include "internal.h"

#include <errno.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

/* Test hook (fg_test_fail_os): mappings from the n-th on fail until reset. The countdown
 * stops at 1, which means "failing". */
static _Atomic(long) fail_countdown;

fg_export void fg_test_fail_os(long n) { atomic_store(&fail_countdown, n > 0 ? n : 0); }

static bool injected_failure(void) {
  long n = atomic_load_explicit(&fail_countdown, memory_order_relaxed);
  while (n > 1 && !atomic_compare_exchange_weak(&fail_countdown, &n, n - 1)) {
  }
  if (n != 1) return false;
  errno = ENOMEM;
  return true;
}

/* Map `size` bytes, at `hint` if that range is free (0: anywhere). Accounted (no
 * MAP_NORESERVE): the kernel's overcommit policy then refuses a request no machine of this
 * size could hold, and malloc returns NULL as glibc's does; with MAP_NORESERVE a 2.2 TiB
 * request of gdk-pixbuf's failure tests was mapped, written into, and the test OOM-killed at
 * 23 GiB of RSS (glibc: NULL, and the decoder's error). */
static void *os_map_at(uintptr_t hint, size_t size) {
  if (fg_unlikely(injected_failure())) return NULL;
  int flags = MAP_PRIVATE | MAP_ANONYMOUS;
#ifdef MAP_FIXED_NOREPLACE
  if (hint != 0) flags |= MAP_FIXED_NOREPLACE; /* fails rather than mapping elsewhere */
#endif
  void *p = mmap((void *)hint, size, PROT_READ | PROT_WRITE, flags, -1, 0);
  _fg_count(FG_C_mmap_calls, 1);
  if (p == MAP_FAILED) return NULL;
  _fg_count(FG_C_mmap_bytes, size);
  return p;
}

static void *os_map(size_t size) { return os_map_at(0, size); }

__thread uint8_t _fg_returning __attribute__((tls_model("initial-exec")));
__thread uint64_t _fg_returned_bytes __attribute__((tls_model("initial-exec")));

/* Memory given back for a reason (a decay, the purger, out of memory, fg_collect). */
static void count_returned(size_t size) {
  if (_fg_returning == FG_BY_NONE) return;
  _fg_count(FG_C_returned_decay_bytes + _fg_returning - FG_BY_DECAY, size);
  _fg_returned_bytes += size;
}

static void os_unmap(void *p, size_t size) {
  munmap(p, size);
  _fg_count(FG_C_munmap_calls, 1);
  _fg_count(FG_C_munmap_bytes, size);
}

void _fg_os_free(void *p, size_t size) {
  int saved = errno;
  count_returned(size); /* first: whoever sees RSS drop sees who gave it back */
  os_unmap(p, size);
  errno = saved;
}

/* Where the next aligned mapping is tried first: below the last one, as the kernel places
 * mappings top-down. Each thread claims its range below the hint with a compare-and-swap, so
 * that two threads never try the same address: both tried `hint - size` before, and the one
 * that lost fell back to over-mapping and trimming each time (the lab's 1 MiB cell with 2
 * threads: 1,013 failed mmaps and 2,027 munmaps while the threads filled their caches). */
static _Atomic(uintptr_t) aligned_hint;

/* Map `size` bytes aligned to `align`: first right below the last aligned mapping (one mmap,
 * which succeeds while that address space is free), else by over-mapping and trimming both
 * ends (one mmap and two munmaps: the lab's 2 threads mapping their first 1,000 large
 * blocks each spent a quarter of their time in munmap). */
void *_fg_os_alloc_aligned(size_t size, size_t align) {
  int saved = errno;
  size = fg_align_up(size, FG_OS_PAGE);
  if (size > FG_MAX_ALLOC) return NULL;
  uintptr_t hint = atomic_load_explicit(&aligned_hint, memory_order_relaxed), want = 0;
  while (hint > size + align) {
    want = (hint - size) & ~(uintptr_t)(align - 1);
    if (atomic_compare_exchange_weak_explicit(&aligned_hint, &hint, want, memory_order_relaxed, memory_order_relaxed))
      break;
    want = 0; /* another thread moved the hint: claim below its range */
  }
  void *p = want != 0 ? os_map_at(want, size) : NULL;
  if (p != NULL && (uintptr_t)p != want) { /* a kernel without MAP_FIXED_NOREPLACE placed it elsewhere */
    os_unmap(p, size);
    p = NULL;
  }
  if (p == NULL) {
    p = os_map(size + align);
    if (p != NULL) {
      uintptr_t start = (uintptr_t)p, aligned = fg_align_up(start, align);
      if (aligned > start) os_unmap(p, aligned - start);
      size_t tail = (start + size + align) - (aligned + size);
      if (tail > 0) os_unmap((void *)(aligned + size), tail);
      p = (void *)aligned;
      /* Down only: a mapping the kernel placed above the hint sits in a gap among earlier
       * ones, where the next claims would fail again. A failed claim has moved the hint below
       * what was in its way already, so the next one tries further down. */
      uintptr_t h = atomic_load_explicit(&aligned_hint, memory_order_relaxed);
      while ((h == 0 || aligned < h) &&
             !atomic_compare_exchange_weak_explicit(&aligned_hint, &h, aligned, memory_order_relaxed, memory_order_relaxed)) {
      }
    }
  }
  errno = saved;
  return p;
}

/* MADV_DONTNEED rather than MADV_FREE: RSS drops at once, which is what the user asked for
 * when memory is returned (MADV_FREE pages still count until the kernel needs them). Only
 * the whole OS pages inside the range: madvise refuses a start that is not page-aligned
 * (a segment's first page slot starts after the header), and then gave back nothing of a
 * run of free slots: 16 MiB of a quiet program's 24 stayed resident that way. */
void _fg_os_purge(void *p, size_t size) {
  uintptr_t start = fg_align_up((uintptr_t)p, FG_OS_PAGE), end = ((uintptr_t)p + size) & ~(FG_OS_PAGE - 1);
  if (end <= start) return;
  int saved = errno;
  count_returned(end - start);
  madvise((void *)start, end - start, MADV_DONTNEED);
  _fg_count(FG_C_madvise_calls, 1);
  _fg_count(FG_C_madvise_bytes, end - start);
  errno = saved;
}

/* The resident bytes of the OS pages [p, p + size) spans: for the ledger's held bytes (rare),
 * which counted a free slot's whole area, though a buffer's slot is 4 MiB of which it may
 * have touched 12 KiB. */
fg_rare size_t _fg_os_resident(const void *p, size_t size) {
  unsigned char vec[256];
  uintptr_t lo = (uintptr_t)p & ~(FG_OS_PAGE - 1), hi = fg_align_up((uintptr_t)p + size, FG_OS_PAGE);
  size_t resident = 0;
  int saved = errno;
  for (uintptr_t at = lo; at < hi; at += sizeof vec * FG_OS_PAGE) {
    size_t pages = (hi - at) / FG_OS_PAGE < sizeof vec ? (hi - at) / FG_OS_PAGE : sizeof vec;
    if (mincore((void *)at, pages * FG_OS_PAGE, vec) != 0) break;
    for (size_t i = 0; i < pages; i++) resident += (vec[i] & 1) * FG_OS_PAGE;
  }
  errno = saved;
  return resident;
}

/* Guarded slots (guard.c): make a range accessible or not, its contents kept. */
bool _fg_os_protect(void *p, size_t size, bool access) {
  int saved = errno;
  bool ok = mprotect(p, size, access ? PROT_READ | PROT_WRITE : PROT_NONE) == 0;
  errno = saved;
  return ok;
}

/* Make a range inaccessible and drop its pages in one call: a fresh PROT_NONE mapping over
 * it (mprotect then madvise would be two, and each takes the process's memory-map lock). A
 * page made accessible again later reads as zeros. */
bool _fg_os_seal(void *p, size_t size) {
  int saved = errno;
  bool ok = mmap(p, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0) == p;
  _fg_count(FG_C_mmap_calls, 1);
  errno = saved;
  return ok;
}

/* Grow or shrink a mapping where it is; never moves it, so segment alignment holds. */
fg_warm bool _fg_os_resize(void *p, size_t old_size, size_t new_size) {
  int saved = errno;
  bool ok = mremap(p, old_size, new_size, 0) != MAP_FAILED;
  _fg_count(FG_C_mremap_calls, 1);
  errno = saved;
  return ok;
}

/* Move a mapping to `to` (a range of new_size bytes the caller mapped: the kernel replaces it),
 * growing it on the way: the pages move with their page tables, nothing is copied or faulted
 * again, and the grown tail is fresh zero pages. */
fg_warm bool _fg_os_move(void *p, size_t old_size, void *to, size_t new_size) {
  int saved = errno;
  bool ok = mremap(p, old_size, new_size, MREMAP_MAYMOVE | MREMAP_FIXED, to) != MAP_FAILED;
  _fg_count(FG_C_mremap_calls, 1);
  errno = saved;
  return ok;
}

void _fg_yield(void) { sched_yield(); }

uint64_t _fg_clock_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

uintptr_t _fg_os_random(void) {
  uintptr_t r = 0;
  int saved = errno;
  if (getrandom(&r, sizeof r, GRND_NONBLOCK) != sizeof r) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    r = (uintptr_t)ts.tv_nsec * 0x9e3779b97f4a7c15u ^ (uintptr_t)getpid() ^ (uintptr_t)&r;
  }
  errno = saved;
  return r;
}
