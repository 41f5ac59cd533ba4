/* alloc.c — the allocation API. The fast path of fg_malloc for sizes up to 1 KiB is one
 * TLS load, one table load, a pop from the page's free list and a counter increment whose
 * sign says whether the ledger counts the page; every other case is a named slow path below
 * it. Semantics follow glibc (see RELIABILITY.md). */
#define _GNU_SOURCE
#include "internal.h"

#include <errno.h>

/* Take the first block of a page whose `free` is not nil, leaving its used count to the
 * caller. `plain`: the page's key is 0 (the fast path: see _fg_link_plain), so the link's bias
 * folds into the load's displacement. */
static inline void *take(fg_page_t *page, bool plain) {
  fg_block_t *b = _fg_block_plain(page->free); /* the head is plain: see _fg_link_head */
  fg_link_t next = plain ? b->next : _fg_link_head(page, b->next);
  /* The next pop reads next's link: after another thread's frees, from that thread's cache. */
  __builtin_prefetch(_fg_block_plain(next));
  page->free = next;
  /* A fresh block must not look freed to the double-free check. Without this store, trees of
   * 48 B nodes ran 4-7 % faster, but a block whose first word the program never writes (the
   * lab's tagged blocks, bench/threads.c) kept its stale link, and another thread's free of it
   * could tell it from a double free only by walking the owner's lists while the owner changes
   * them: no safe answer, on every such free. */
  b->next = 0;
  return b;
}
static inline void *page_pop(fg_page_t *page) { /* any key, no countdown */
  void *b = take(page, false);
  page->used_left++; /* `used`, 8 bytes wide as malloc and free write it (free.c's used_drop) */
  return b;
}
/* The same from a page of key 0, whose links need no decoding: the key sits in the page's
 * second line, which a block grown 16 B -> 256 B by doubling reallocs read on every step
 * (callgrind: 6.7 % of the instructions, the plain free in free.c's _fg_free_plain_block
 * with it). */
static inline void *page_pop_plain(fg_page_t *page) {
  void *b = take(page, true);
  page->used_left++;
  return b;
}
/* A block taken back as malloc hands out a sampled one in its place. */
static void untake(fg_page_t *page, fg_block_t *b) {
  b->next = _fg_head_link(page, page->free);
  page->free = _fg_link_plain(b);
  page->used_left--; /* `used`, 8 bytes wide as malloc and free write it (free.c's used_drop) */
}

/* Any size, through the class queues rather than the direct table (which stays empty while
 * the hooks are on, see page.c's set_direct). */
static fg_noinline void *malloc_generic(fg_heap_t *heap, size_t size) {
  if (fg_likely(size <= FG_CLASS_MAX)) {
    fg_page_t *page = heap->queues[_fg_class_of(size)].first;
    if (fg_likely(page != NULL && !_fg_link_nil_plain(page->free))) return page_pop(page);
    return _fg_heap_alloc_slow(heap, size);
  }
  return _fg_large_alloc(size, 0, false);
}

/* The allocation itself, without the hooks: what the hooked paths and the raw helpers call. */
static inline void *malloc_core(size_t size) {
  fg_heap_t *heap = _fg_heap();
  /* Secure mode alone fills the direct table a class up (page.c's _fg_direct_words); aligned
   * allocations need the class of the size itself. */
  if (fg_likely(size <= FG_DIRECT_MAX) && !_fg_secure_alone()) {
    fg_page_t *page = heap->direct[(size + 7) >> 3];
    if (fg_likely(!_fg_link_nil_plain(page->free))) return page_pop_plain(page); /* not secure: key 0 */
  }
  return malloc_generic(heap, size);
}

fg_rare void *_fg_malloc_raw(size_t size) { return malloc_core(size); }

/* No page for a block of a class, even after every cache was given back: the OS refused a
 * segment (4 MiB, 8 to align it). A mapping of the block's own size may still fit, as under a
 * limit on the process's data (RLIMIT_DATA: gdk-pixbuf's randomly-modified test sets 100 MiB,
 * under which glibc served a block of 92,774 bytes that frugal refused): a large block, as a
 * sample is: malloc's misses (with the hooks too, which take big blocks so) and malloc_any's
 * callers. The aligned paths ask the large path for an aligned mapping instead: they place
 * their pointer inside the block a page gives them. */
static fg_noinline void *malloc_unpaged(size_t size) { return _fg_large_alloc(size, 0, false); }

/* malloc_core, or a block in a mapping of its own when no page can be had: for the callers
 * that hand the block out as it is (calloc, realloc, memalign of a class's alignment). */
static inline void *malloc_any(size_t size) {
  void *p = malloc_core(size);
  return fg_likely(p != NULL) || size > FG_CLASS_MAX ? p : malloc_unpaged(size);
}

static fg_noinline fg_rare void *malloc_hooked(size_t size) {
  if (size > FG_MAX_ALLOC) {
    errno = ENOMEM;
    return NULL;
  }
  size_t want = size + _fg_hook_pad();
  if (fg_likely(_fg_secure_alone()) && size < FG_CLASS_MAX) { /* the page in hand: see hooks.c */
    want = _fg_secure_size(size);
    fg_page_t *page = _fg_heap()->queues[_fg_class_of(want)].first;
    if (fg_likely(page != NULL && !_fg_link_nil_plain(page->free))) {
      void *b = page_pop(page);
      _fg_secure_arm(page, b, size);
      return b;
    }
  }
  void *p = malloc_core(want);
  if (fg_unlikely(p == NULL) && want <= FG_CLASS_MAX) p = malloc_unpaged(want);
  if (p != NULL) _fg_hook_alloc(p, size);
  return p;
}

/* The heap's countdown, for the allocations that do not come from a page's fast path: a
 * sampled block, or NULL. */
static inline void *sampled(size_t size, size_t align, bool zero) {
  return fg_unlikely(_fg_sample_due(_fg_heap(), size)) ? _fg_sample_alloc(size, align, zero) : NULL;
}

/* fg_malloc's misses: with every call hooked, all of them (the direct table is empty). Size
 * first, as fg_malloc has it: the fast path then tail-calls without moving a register. A
 * thread's first allocation misses (its direct table is the empty heap's) and trips the
 * empty heap's countdown, which is 0: with sampling on, the sampler gives it a heap there. */
static fg_noinline void *malloc_small_miss(size_t size, fg_heap_t *heap) {
  void *p = sampled(size, 0, false);
  if (fg_unlikely(p != NULL)) return p;
  heap = _fg_heap(); /* the sampler may have made it */
  if (fg_unlikely(_fg_hooked())) return malloc_hooked(size);
  p = _fg_heap_alloc_slow(heap, size);
  return fg_likely(p != NULL) ? p : malloc_unpaged(size);
}
static void *malloc_page_tripped(size_t align, size_t size, fg_page_t *page, fg_block_t *b);
/* A block handed out while frugal allocates for itself (glibc's thread descriptor for the
 * purger thread, from calloc): the hooks leave it uncounted at both ends, as stats.c's
 * _fg_ledger_alloc says. Returns b, for a tail call. */
static fg_noinline fg_rare void *uncounted(void *b, size_t size) {
  _fg_ledger_alloc(b, size);
  return b;
}
/* Count block b of a ledger page, popped for `size` and aligned to `align` (0: malloc's own).
 * An aligned request that its alignment does not divide (or of 0) may be of a smaller class
 * than the page's: its histogram bucket is then set right. */
static inline void *counted(size_t align, size_t size, fg_page_t *page, fg_block_t *b) {
  if (fg_unlikely(_fg_own_doing())) return uncounted(b, size);
  _fg_ledger_count_alloc(page->heap, page, b, size);
  if (align != 0 && fg_unlikely((size & (align - 1)) != 0 || size == 0)) return _fg_ledger_rebucket(page, size, b);
  return b;
}
/* A block of a page of key 0 (no secure mode's page: _fg_pages_hooked), its countdown
 * charged as malloc's fast path charges it, for malloc past the direct table. The inline
 * ledger's pages count their blocks in the cold block, as malloc's fast path does. */
static inline void *pop_charged(fg_page_t *page, size_t size) {
  void *b = take(page, true);
  if (fg_unlikely(_fg_page_charge(page))) {
    int32_t left = __atomic_load_n(&page->sample_left, __ATOMIC_RELAXED); /* as in malloc_fast */
    if (fg_unlikely((uint32_t)(left - FG_LEFT_LEDGER) >= (uint32_t)FG_LEFT_SPAN - 1))
      return malloc_page_tripped(0, size, page, b);
    return counted(0, size, page, b);
  }
  return b;
}
static fg_noinline void *malloc_big_slow(size_t size) {
  void *p = sampled(size, 0, false);
  if (fg_unlikely(p != NULL)) return p;
  if (fg_unlikely(_fg_hooked())) return malloc_hooked(size);
  p = malloc_generic(_fg_heap(), size);
  return fg_likely(p != NULL) || size > FG_CLASS_MAX ? p : malloc_unpaged(size);
}
/* Over 1 KiB, where the direct table ends: the class's first page, popped as malloc's fast
 * path pops (its countdown charged). The rest, and a heap not started yet, the general way,
 * with the heap's countdown (a call of its own: its frame cost this path 6 instructions). A
 * malloc/free pair of 4 KiB: 119 instructions the general way, 100 this way (up to 1 KiB:
 * 85; tcmalloc 80: tests/budget); with the ledger on, 291 by the hooks. */
static fg_noinline void *malloc_big(size_t size, fg_heap_t *heap) {
  if (fg_likely(size <= FG_CLASS_MAX) && fg_likely(!_fg_pages_hooked())) {
    fg_page_t *page = heap->queues[_fg_class_of(size)].first;
    if (fg_likely(page != NULL && !_fg_link_nil_plain(page->free))) return pop_charged(page, size);
  }
  return malloc_big_slow(size);
}

/* operator new's misses: as fg_malloc's, then `failed` (the new-handler loop and the throw)
 * if they found no memory. */
static fg_noinline void *new_miss(size_t size, fg_heap_t *heap, void *(*failed)(size_t)) {
  void *p = size <= FG_DIRECT_MAX ? malloc_small_miss(size, heap) : malloc_big(size, heap);
  return fg_likely(p != NULL) ? p : failed(size);
}

/* A plain or ledger page's countdown ran out (sample.c): a sampled block (aligned to `align`:
 * 0 for malloc's own) in place of b, which goes back on its page, or b (the ledger's,
 * counted). */
static fg_noinline void *malloc_page_tripped(size_t align, size_t size, fg_page_t *page, fg_block_t *b) {
  void *s = _fg_sample_page(page, size, align);
  if (s != NULL) {
    untake(page, b);
    return s;
  }
  if (page->used & FG_USED_LEDGER) return counted(align, size, page, b);
  return b;
}
/* The cold block's other cases: a page of secure mode alone, whose block secure.c arms (its
 * countdown set again, see FG_LEFT_SECURE), or a countdown run out. Tail calls only. */
static fg_noinline void *malloc_tripped(size_t size, fg_page_t *page, fg_block_t *b) {
  if (page->sample_left < FG_LEFT_LEDGER - 1) {
    page->sample_left = FG_LEFT_SECURE;
    return _fg_secure_popped(page, b, size);
  }
  return malloc_page_tripped(0, size, page, b);
}

/* fg_malloc, and operator new when `failed` is not NULL: one fast path for both, so that
 * operator new costs no call and no NULL test of its own (C++ programs allocate through it
 * alone: 27 instructions a call as a wrapper of fg_malloc, against mimalloc's 24). The pop is
 * plain (key 0; secure mode's pages decode theirs in secure.c), and one add to the page's
 * used word also counts the page's sampling down (_fg_page_charge). */
static inline void *malloc_fast(size_t size, void *(*failed)(size_t)) {
  fg_heap_t *heap = _fg_heap();
  if (fg_likely(size <= FG_DIRECT_MAX)) {
    fg_page_t *page = heap->direct[(size + 7) >> 3];
    if (fg_likely(!_fg_link_nil_plain(page->free))) {
      void *b = take(page, true);
      /* The used word went below zero: the page is the inline ledger's, which counts the
       * block here, in the cold block (a function of its own, with a frame, cost the
       * ledger's malloc 16 instructions more; malloc(0) never comes here, see page.c's
       * set_direct: its histogram bucket is not its class's), or secure mode's, or its
       * countdown ran out (FG_LEFT_*: one range test tells the ledger's from the rest). */
      if (fg_unlikely(_fg_page_charge(page))) {
        int32_t left = __atomic_load_n(&page->sample_left, __ATOMIC_RELAXED); /* not kept from the add */
        if (fg_unlikely((uint32_t)(left - FG_LEFT_LEDGER) >= (uint32_t)FG_LEFT_SPAN - 1))
          return malloc_tripped(size, page, b);
        _fg_ledger_count_alloc(heap, page, b, size);
      }
      return b;
    }
    if (failed != NULL) return new_miss(size, heap, failed);
    return malloc_small_miss(size, heap);
  }
  if (failed != NULL) return new_miss(size, heap, failed);
  return malloc_big(size, heap);
}

fg_export void *fg_malloc(size_t size) { return malloc_fast(size, NULL); }

/* operator new(size_t), new[](size_t) and their nothrow forms: malloc's fast path, failing
 * into override_new.c's new-handler loop and std::bad_alloc (or NULL), with no jump of their
 * own (a tail jump from override_new.c took 2 of new's 24 instructions). The other forms of
 * new and delete are in override_new.c. */
fg_export void *_Znwm(size_t size) { return malloc_fast(size, _fg_new_failed); }
fg_export void *_Znam(size_t size) { return malloc_fast(size, _fg_new_failed); }
fg_export void *_ZnwmRKSt9nothrow_t(size_t size, const void *tag) {
  (void)tag;
  return malloc_fast(size, _fg_new_nothrow_failed);
}
fg_export void *_ZnamRKSt9nothrow_t(size_t size, const void *tag) {
  (void)tag;
  return malloc_fast(size, _fg_new_nothrow_failed);
}

/* Zeroes the first n bytes of a block of a class, which holds n rounded up to 8 and at least 8
 * bytes: up to 128 bytes by two stores of a fixed width from each end (overlapping in the
 * middle), written in line; more by memset. A call to memset cost calloc(64) a third of its
 * time (9.1 ns against mimalloc's 7.8). */
static inline void zero_block(uint8_t *p, size_t n) {
  size_t k = n <= 8 ? 8 : fg_align_up(n, 8); /* the block's own bytes */
  if (k <= 16) {
    __builtin_memset(p, 0, 8);
    __builtin_memset(p + k - 8, 0, 8);
  } else if (k <= 32) {
    __builtin_memset(p, 0, 16);
    __builtin_memset(p + k - 16, 0, 16);
  } else if (k <= 64) {
    __builtin_memset(p, 0, 32);
    __builtin_memset(p + k - 32, 0, 32);
  } else if (k <= 128) {
    __builtin_memset(p, 0, 64);
    __builtin_memset(p + k - 64, 0, 64);
  } else {
    memset(p, 0, n);
  }
}

void *_fg_calloc_raw(size_t count, size_t size) {
  size_t total;
  if (fg_unlikely(__builtin_mul_overflow(count, size, &total))) {
    errno = ENOMEM;
    return NULL;
  }
  if (total > FG_CLASS_MAX) return _fg_large_alloc(total, 0, true);
  void *p = malloc_any(total);
  if (p != NULL) zero_block(p, total);
  return p;
}

/* The inline ledger's block for calloc (FG_MODE_LEDGER_FAST), counted as malloc's fast path
 * counts it, its page's countdown not charged (fg_calloc's own ran for it, as for
 * _fg_calloc_raw's). NULL: none at hand (or a request of 0, or frugal's own: see uncounted),
 * take the hooks. calloc/free of
 * 64 B took 295 instructions by the hooks, 112 with the ledger off. */
static inline void *pop_counted(size_t size) {
  fg_heap_t *heap = _fg_heap();
  fg_page_t *page = size <= FG_DIRECT_MAX ? heap->direct[(size + 7) >> 3] : heap->queues[_fg_class_of(size)].first;
  if (size == 0 || page == NULL || _fg_link_nil_plain(page->free) || !(page->used & FG_USED_LEDGER) || _fg_own_doing())
    return NULL;
  void *b = page_pop_plain(page); /* the inline ledger's pages have key 0 */
  _fg_ledger_count_alloc(heap, page, b, size);
  return b;
}

static fg_noinline void *calloc_hooked(size_t count, size_t size) {
  size_t total;
  if (__builtin_mul_overflow(count, size, &total) || total > FG_MAX_ALLOC) {
    errno = ENOMEM;
    return NULL;
  }
  if (_fg_ledger_fast() && total <= FG_CLASS_MAX) {
    void *b = pop_counted(total);
    if (b != NULL) {
      zero_block(b, total);
      return b;
    }
  }
  void *p = malloc_hooked(total); /* zeroed after the hook: it checks the free fill */
  if (p != NULL && total > FG_CLASS_MAX)
    _fg_large_zero(p, total); /* its pages given back, not written: see large.c */
  else if (p != NULL)
    memset(p, 0, total);
  return p;
}

fg_export void *fg_calloc(size_t count, size_t size) {
  size_t total;
  void *q = __builtin_mul_overflow(count, size, &total) ? NULL : sampled(total, 0, true);
  if (q != NULL) return q;
  if (fg_likely(!_fg_hooked())) return _fg_calloc_raw(count, size);
  return calloc_hooked(count, size);
}

void *_fg_realloc_raw(void *p, size_t size) {
  if (p == NULL) return malloc_any(size);
  if (size == 0) { /* glibc: free and return NULL, errno untouched */
    _fg_free_raw(p, false, 0);
    return NULL;
  }
  /* A block start first, as free tests it: no division for its usable size. */
  fg_page_t *page = _fg_plain_block_page(p), *plain = page;
  size_t usable;
  if (fg_likely(page != NULL)) {
    usable = page->block_size;
  } else {
    fg_segment_t *s;
    page = _fg_checked_page(p, &s);
    if (page == NULL) { /* a large block */
      if (size > FG_CLASS_MAX / 2) {
        void *q = _fg_large_realloc(s, p, size);
        if (q != NULL) return q;
      }
      usable = _fg_large_usable(s, p);
    } else {
      usable = _fg_usable_from(page, p);
    }
  }
  if (page != NULL) {
    if (_fg_realloc_stays(size, usable, page->class_idx)) return p;
    /* Only blocks of 8 KiB and up grow in place (their pages are not small ones). */
    if (size > usable && usable > FG_SMALL_MAX && size <= FG_CLASS_MAX && _fg_heap_regrow(page, p, size)) return p;
  }
  if (size > FG_MAX_ALLOC) {
    errno = ENOMEM;
    return NULL;
  }
  void *q = size > usable && size > FG_SMALL_MAX && size <= FG_CLASS_MAX ? _fg_heap_alloc_buffer(size) : NULL;
  if (q == NULL) q = malloc_any(size);
  if (q == NULL) return NULL; /* p stays valid and intact */
  memcpy(q, p, usable < size ? usable : size);
  if (fg_likely(plain != NULL))
    _fg_free_plain_block(plain, p); /* checked above: free's checks again cost a block grown
                                     * 16 B -> 4 KiB by doublings 151 ns against 138 */
  else
    _fg_free_raw(p, false, 0);
  return q;
}

/* Hooked, a realloc is an allocation, a copy, and a free: the ledger counts both ends and
 * secure mode arms a fresh canary. The copy is of every byte the program may have written:
 * its usable size, which is the request in secure mode but the whole block otherwise (redis
 * writes up to malloc_usable_size: copying only the request lost its strings under the
 * ledger). */
static fg_noinline fg_rare void *realloc_hooked(void *p, size_t size) {
  /* The inline ledger's blocks first: a block grown 16 B -> 4 KiB by doubling reallocs, then
   * freed, took 1.86 x the time of the ledger off by the hooks alone, 1.47 x so (the ops lab's
   * cell, medians of 5). */
  void *q = _fg_ledger_fast() && size <= FG_CLASS_MAX ? pop_counted(size) : NULL;
  if (p == NULL) return q != NULL ? q : malloc_hooked(size);
  if (size == 0) {
    fg_free(p);
    return NULL;
  }
  size_t old = fg_usable_size(p);
  if (q == NULL) q = malloc_hooked(size);
  if (q == NULL) return NULL; /* p stays valid and intact */
  memcpy(q, p, old < size ? old : size);
  fg_free(p);
  return q;
}

/* A sampled realloc moves the block into its sample. */
static fg_noinline fg_warm void *realloc_into(void *p, void *q, size_t size) {
  if (p != NULL) {
    size_t old = fg_usable_size(p);
    memcpy(q, p, old < size ? old : size);
    fg_free(p);
  }
  return q;
}

fg_export void *fg_realloc(void *p, size_t size) {
  void *q = size != 0 ? sampled(size, 0, false) : NULL;
  if (q != NULL) return realloc_into(p, q, size);
  if (fg_unlikely(_fg_hooked())) return realloc_hooked(p, size);
  return _fg_realloc_raw(p, size);
}

FG_ALIAS(malloc, fg_malloc);
FG_ALIAS(calloc, fg_calloc);
FG_ALIAS(realloc, fg_realloc);

fg_export void *fg_reallocarray(void *p, size_t count, size_t size) {
  size_t total;
  if (__builtin_mul_overflow(count, size, &total)) {
    errno = ENOMEM;
    return NULL;
  }
  return fg_realloc(p, total);
}

/* ---- aligned allocation ------------------------------------------------------------------- */

/* `align` is a power of two. Alignments come free from a size class whose size is a multiple
 * of them: blocks start at page starts and step by the class size. Every page starts on 64
 * bytes, every small page (blocks up to 8 KiB) on an OS page (segment.c's _fg_page_area).
 * Others over-allocate within a class and mark the page so free() maps the interior pointer
 * back to its block, which sends every free on that page down the checked path; posix_memalign
 * of 8 KiB at 4 KiB: 16.4 ns a pair that way, 11.9 from its class. The rest are large blocks,
 * whose mapping is segment-aligned. tests/align.c holds every entry point to its alignment. */
fg_warm void *_fg_memalign_raw(size_t align, size_t size) {
  if (align <= 8) return malloc_any(size);
  if (size > FG_MAX_ALLOC) {
    errno = ENOMEM;
    return NULL;
  }
  if (align <= FG_OS_PAGE) {
    size_t n = fg_align_up(size == 0 ? 1 : size, align);
    /* Up to 1 KiB the classes step by 16, 32 or 64 between doublings, plus 272 and 528: the
     * class of any multiple of an alignment is a multiple of it too, no need to look
     * (tests/align.c tries them all). */
    if (n <= FG_DIRECT_MAX ||
        (n <= (align <= 64 ? FG_CLASS_MAX : FG_SMALL_MAX) && (_fg_class_size(_fg_class_of(n)) & (align - 1)) == 0)) {
      void *p = malloc_core(n);
      return fg_likely(p != NULL) ? p : _fg_large_alloc(size, align, false); /* as below */
    }
  }
  if (align <= FG_OS_PAGE && size + align <= FG_CLASS_MAX) {
    uint8_t *p = malloc_core((size == 0 ? 1 : size) + align - 8); /* q stays inside the block */
    if (p != NULL) {
      uint8_t *q = (uint8_t *)fg_align_up((uintptr_t)p, align);
      fg_page_t *page = _fg_page_of(_fg_segment_of(p), p);
      if (q != p && !page->has_aligned) page->has_aligned = 1; /* read by freeing threads */
      return q;
    }
  } else if (align > FG_LARGE_ALIGN_MAX) {
    errno = ENOMEM;
    return NULL;
  }
  /* A large block; or a class's block that no page could hold (the OS refused a segment, as
   * malloc_unpaged has it, and the paths above fall through), in a mapping the large path
   * aligns. */
  return _fg_large_alloc(size, align, false);
}

static fg_noinline void *malloc_aligned(size_t align, size_t size) {
  void *q = sampled(size, align, false);
  if (q != NULL) return q;
  if (fg_likely(!_fg_hooked())) return _fg_memalign_raw(align, size);
  if (size > FG_MAX_ALLOC) {
    errno = ENOMEM;
    return NULL;
  }
  void *p = _fg_memalign_raw(align, size + _fg_hook_pad());
  if (p != NULL) _fg_hook_alloc(p, size);
  return p;
}

/* aligned_fast's cold block, as pop_charged's but out of line (in line, it cost the fast path
 * a register move): an inline ledger's block counted, or a countdown run out. */
static fg_noinline void *aligned_tripped(size_t align, size_t size, fg_page_t *page, fg_block_t *b) {
  if (fg_unlikely((uint32_t)(page->sample_left - FG_LEFT_LEDGER) >= (uint32_t)FG_LEFT_SPAN - 1))
    return malloc_page_tripped(align, size, page, b);
  return counted(align, size, page, b);
}

/* A size and alignment (a power of two) whose rounded size is a class of a small page, of a
 * size the alignment divides: malloc's pop and countdown, as fg_malloc's fast path has them,
 * since that class's blocks are aligned (see _fg_memalign_raw). The rest go to `slow`. Not
 * in secure mode, nor with every call hooked (_fg_pages_hooked). The general way took 133
 * instructions an aligned_alloc/free pair of 64 B at 64 (tcmalloc 102; malloc and free 68) and
 * 188 a posix_memalign/free pair of 4 KiB at 4 KiB (tcmalloc 128), in frames and tests of its
 * own. Tail calls only, as in malloc's fast path. The inline ledger's pages too (their blocks
 * counted in aligned_tripped): aligned_alloc/free of 64 B at 64 took 302 instructions with
 * the ledger on by the hooks. */
static inline void *aligned_fast(size_t align, size_t size, void *(*slow)(size_t, size_t)) {
  if (fg_likely(size <= FG_SMALL_MAX && align <= FG_OS_PAGE) && fg_likely(!_fg_pages_hooked())) {
    size_t n = fg_align_up(size == 0 ? 1 : size, align);
    fg_heap_t *heap = _fg_heap();
    fg_page_t *page;
    if (fg_likely(n <= FG_DIRECT_MAX)) { /* up to 1 KiB every class the alignment divides: see above */
      page = heap->direct[(n + 7) >> 3];
    } else {
      size_t c = _fg_class_of(n);
      if ((_fg_class_size(c) & (align - 1)) != 0 || (page = heap->queues[c].first) == NULL) /* n <= 8 KiB */
        return slow(align, size);
    }
    if (fg_likely(!_fg_link_nil_plain(page->free))) {
      void *b = take(page, true);
      if (fg_unlikely(_fg_page_charge(page))) return aligned_tripped(align, size, page, b);
      return b;
    }
  }
  return slow(align, size);
}

fg_export void *fg_aligned_alloc(size_t align, size_t size) {
  if (!fg_is_pow2(align)) { /* glibc >= 2.38: alignment 0 or not a power of two */
    errno = EINVAL;
    return NULL;
  }
  return aligned_fast(align, size, malloc_aligned);
}

fg_export void *fg_memalign(size_t align, size_t size) {
  if (align > ((size_t)1 << 62)) { /* absurd: cannot be rounded to a power of two */
    errno = EINVAL;
    return NULL;
  }
  if (align < 8) align = 8;
  if (!fg_is_pow2(align)) align = (size_t)1 << (64 - __builtin_clzl(align)); /* round up */
  return aligned_fast(align, size, malloc_aligned);
}

/* posix_memalign's general way: errno as it was, whatever happens. */
static fg_noinline void *malloc_aligned_quiet(size_t align, size_t size) {
  int saved = errno;
  void *p = malloc_aligned(align, size);
  if (p == NULL) errno = saved;
  return p;
}

fg_export int fg_posix_memalign(void **out, size_t align, size_t size) {
  if (align < sizeof(void *) || !fg_is_pow2(align)) return EINVAL;
  void *p = aligned_fast(align, size, malloc_aligned_quiet);
  if (fg_unlikely(p == NULL)) return ENOMEM;
  *out = p;
  return 0;
}

fg_export fg_rare void *fg_valloc(size_t size) { return malloc_aligned(FG_OS_PAGE, size); }

fg_export fg_rare void *fg_pvalloc(size_t size) {
  if (size > FG_MAX_ALLOC) {
    errno = ENOMEM;
    return NULL;
  }
  return malloc_aligned(FG_OS_PAGE, fg_align_up(size == 0 ? 1 : size, FG_OS_PAGE));
}
