/* free.c — freeing, and the checks that catch heap misuse by default: cheap enough for the
 * fast path (a byte test, a multiply, a compare: see free_impl), with everything that fails
 * a check sent to a cold path that names the misuse and aborts. */
#define _GNU_SOURCE
#include "internal.h"

#include <errno.h>

/* A freed block's first word is a link (see _fg_link): its block lies in the freed block's
 * own segment and it carries the tag in its low bits. x below has bits 0-2 and 22-63 clear
 * exactly then: one test against a mask that is a sign-extended 32-bit immediate on x86-64
 * (0xffc00007), one instruction fewer than a rotate and a shift. A fresh block has its first
 * word zeroed (see page_pop). */
#define FG_LINK_FREED_MASK (~(uintptr_t)FG_SEGMENT_MASK | 7)
static inline bool link_looks_freed(const fg_block_t *b, uintptr_t link) {
  return fg_unlikely(((link ^ _fg_link_plain(b)) & FG_LINK_FREED_MASK) == 0);
}
static inline bool looks_freed(const fg_page_t *page, const fg_block_t *b) { return link_looks_freed(b, b->next ^ page->key); }
/* The page's key is 0 (no secure mode: see _fg_link_plain). A link's bits 22-31 are its
 * block's segment's, the freed block's own: fg_free's own test reads them, in the word's bytes
 * 2 and 3, against the page's start (in the line free reads anyway), and only a word that
 * passes has its low 4 bytes tested, the tag there too. What passes both goes on to the whole
 * word's test (block_checked): the same blocks as the 4 bytes tested at once. Not byte 0: a
 * load cannot take its value from a narrower store still on its way to the cache, and waits
 * for it there: with the 4 bytes read first, a program that writes a byte at a block's start
 * (a string's terminator, a flag) and frees it waits on every free (malloc(64), a 1-byte
 * store, free: 8.8 ns a pair, 6.6 this way; tcmalloc 7.4). Byte 0's tag bits tested first
 * send one free in eight of the minimizer shape's down a branch it cannot predict (its
 * blocks start with a mark byte of their size): 6 % slower than this. */
typedef uint16_t fg_word_half_t __attribute__((may_alias));
typedef uint32_t fg_word_low_t __attribute__((may_alias));
#define FG_LINK_SEGMENT_HALF ((uint16_t)(FG_LINK_FREED_MASK >> 16)) /* bits 22-31, in bytes 2-3 */
static inline bool looks_freed_low(const fg_block_t *b) {
  uint32_t low = *(const fg_word_low_t *)(const void *)b;
  return ((low ^ (uint32_t)_fg_link_plain(b)) & (uint32_t)FG_LINK_FREED_MASK) == 0;
}
static inline bool looks_freed_plain(const fg_page_t *page, const fg_block_t *b) {
  uint16_t half = *(const fg_word_half_t *)(const void *)((const uint8_t *)b + 2);
  uint16_t mine = *(const fg_word_half_t *)(const void *)((const uint8_t *)&page->start + 2);
  return fg_unlikely(((half ^ mine) & FG_LINK_SEGMENT_HALF) == 0) && looks_freed_low(b);
}

/* p is no block of its page. If the page was taken over from another class (heap.c's
 * page_take_empty) and p is a block start of that class, p was freed before: a double free. */
static fg_noinline fg_cold fg_rare void misplaced(const fg_page_t *page, const void *p) {
  size_t off = (size_t)((const uint8_t *)p - page->start);
  if (page->prev_class != 0 && (const uint8_t *)p >= page->start && off % _fg_class_size(page->prev_class - 1u) == 0)
    _fg_misuse("double free", p);
  _fg_misuse("invalid pointer", p);
}

/* The start of the block p is in, or abort: p must be a block start (or an aligned pointer
 * inside a block of a page that hands those out) and the block must not be free. */
static fg_noinline fg_block_t *block_checked_slow(fg_page_t *page, const void *p) {
  size_t off = (size_t)((const uint8_t *)p - page->start);
  size_t idx = off / page->block_size;
  if ((const uint8_t *)p < page->start || idx >= page->capacity) misplaced(page, p);
  fg_block_t *b = (fg_block_t *)(page->start + idx * page->block_size);
  if ((const void *)b != p && !page->has_aligned) misplaced(page, p);
  if (looks_freed(page, b) && _fg_page_holds_free(page, b)) _fg_misuse("double free", p);
  return b;
}

/* The same checks as fg_free's fast path (a carved block start that does not look freed);
 * the slow half sorts out aligned interior pointers and names the misuse. */
static inline fg_block_t *block_checked(fg_page_t *page, const void *p) {
  if (fg_likely(_fg_block_carved(page, (size_t)((const uint8_t *)p - page->start))) &&
      fg_likely(!looks_freed(page, p)))
    return (fg_block_t *)p;
  return block_checked_slow(page, p);
}

fg_page_t *_fg_checked_page(const void *p, fg_segment_t **seg) {
  fg_segment_t *s = _fg_segment_of(p);
  if (!_fg_segment_valid(s))
    _fg_misuse("not a frugal pointer", p);
  *seg = s;
  if (s->kind == FG_SEG_LARGE) return NULL;
  fg_page_t *page = _fg_page_of(s, p);
  if (page->heap == NULL) _fg_misuse("double free", p); /* its page was released */
  block_checked(page, p);
  return page;
}

/* Another thread's block (or a large one, or a misuse): push it on the page's atomic stack.
 * Into a page in its heap's full list, the first such free also wakes the page (the owner's
 * next slow path puts it back in service), and the one that leaves no block in use may give
 * it back: under the heap's lock, once per page (heap.c's _fg_heap_page_mailed). */
static inline void free_ours(void *p, unsigned page_shift, bool sized, size_t size, bool user);

static fg_noinline void free_remote(fg_segment_t *s, fg_page_t *page, void *p, bool user) {
  bool count = user && _fg_ledger_fast(); /* see free_ours */
  if (!_fg_cookie_ok(s)) _fg_misuse("not a frugal pointer", p);
  if (s->kind == FG_SEG_LARGE) {
    if (count) _fg_ledger_free(p);
    if (_fg_secure_alone()) _fg_secure_free(p);
    _fg_large_free(s, p);
    return;
  }
  fg_heap_t *heap = page->heap;
  if (heap == NULL) _fg_misuse("double free", p);
  if (fg_unlikely(_fg_heap() == &_fg_heap_empty) && !heap->owned && _fg_heap_adopt(heap)) {
    free_ours(p, s->page_shift, false, 0, user); /* now the thread's own */
    return;
  }
  fg_block_t *b = block_checked(page, p);
  if (_fg_secure_alone()) _fg_secure_freeing(page, b, p);
  if (count) { /* into this thread's ledger: a plain block inline, anything else by the hook */
    fg_heap_t *me = _fg_heap();
    if (fg_unlikely(me == &_fg_heap_empty)) me = _fg_heap_counting(); /* a thread that only frees */
    if (me != NULL && page->requested != NULL && (void *)b == p)
      _fg_ledger_count_free(me, page, _fg_block_index(page, (size_t)((uint8_t *)b - page->start)));
    else
      _fg_ledger_free(p);
  }
  /* Read before the push: once pushed, the block may have been the page's last in use, and
   * its owner may gather it and release the page, whose segment may then go back to the OS.
   * A full page's capacity does not change; for another page, n == capacity below only leads
   * to the test of the full flag. */
  uint32_t capacity = atomic_load_explicit(&page->capacity, memory_order_relaxed);
  uintptr_t tf = atomic_load_explicit(&page->xthread_free, memory_order_relaxed), pushed;
  do {
    fg_block_t *next = _fg_tf_top(tf);
    b->next = _fg_link(page, next != NULL ? next : _fg_list_end(page));
    pushed = (uintptr_t)b | (uintptr_t)(_fg_tf_count(tf) + 1) << FG_TF_COUNT_SHIFT | (tf & FG_TF_FLAGS);
  } while (!atomic_compare_exchange_weak_explicit(&page->xthread_free, &tf, pushed, memory_order_release,
                                                  memory_order_relaxed));
  /* A full page: the first such free wakes it, the one that leaves no block in use may give it
   * back (heap.c). First the one branch rarely taken: whether a page is full varies from page
   * to page, and tested first, that bit mispredicted on 3 frees in 10 of the lab's bursts
   * shape (cachegrind, 2 M frees: 690 k mispredicts, 180 k so; beside a busy loop a core,
   * 0.335 -> 0.320 s). */
  uint32_t n = _fg_tf_count(pushed); /* 1: the first since the stack was last taken */
  if (fg_unlikely((n == 1) | (n == capacity)) &&
      (tf & FG_TF_FULL) && (n == 1 || _fg_tf_emptied(page, pushed)))
    _fg_heap_page_mailed(heap, page, pushed);
}

void _fg_free_other(fg_page_t *page, void *p) { free_remote(_fg_segment_of(p), page, p, false); }

static fg_noinline fg_cold fg_rare void free_foreign(const void *p) { _fg_misuse("not a frugal pointer", p); }

/* A free left the page's used word at 0 or below: the page is empty, or flagged
 * FG_USED_SLOW. An empty page, if the lone page of its class (no neighbours: next == prev ==
 * NULL), stays (see _fg_heap_page_retire); only every 16th time does the heap look at the
 * clock, so a malloc/free loop of one block stays cheap. */
static inline void page_emptied(fg_page_t *page) {
  page->heap->maybe_empty = FG_MAYBE_EMPTY_ALL; /* one store: this is a malloc/free loop's path */
  if (page->next != page->prev || (++page->heap->ticks & 15) == 0) _fg_heap_page_retire(page);
}
/* A flagged page (FG_USED_SLOW) after a free: out of the full list, and emptied as an
 * unflagged page is. The ledger's and secure mode's pages keep their flag while empty: the
 * retire they took at once made a malloc/free loop of one block read the clock every time
 * (ledger on: 169 instructions a pair against 87 off). */
fg_noinline void _fg_page_unflag(fg_page_t *page) {
  if (_fg_page_in_full(page)) _fg_heap_page_unfull(page);
  if (_fg_page_used(page) != 0) return;
  if (page->regrown) /* a buffer's page (full while in use): retired now, a medium class's released */
    _fg_heap_page_retire(page);
  else
    page_emptied(page);
}
static fg_noinline void page_freed_into(fg_page_t *page) {
  if (page->used == 0)
    page_emptied(page);
  else
    _fg_page_unflag(page);
}
static fg_noinline void page_freed_empty(fg_page_t *page) { page_emptied(page); }

/* The same for fg_free's own frees, which the ledger counts here, in line, when it counts the
 * page (FG_USED_LEDGER): an unflagged page left empty first, one jump away as before; then
 * the count, where page and block are still in registers (a call to a function
 * of its own cost 5 instructions more a free). */
static inline void page_freed_counted(fg_page_t *page, size_t idx) {
  uint32_t used = page->used;
  if (used == 0) {
    page_freed_empty(page);
    return;
  }
  if (used & FG_USED_LEDGER) {
    _fg_ledger_count_free(page->heap, page, idx);
    /* In use and not full: with SLOW shifted out, FULL is the sign and LEDGER the next bit. */
    if (fg_likely((int32_t)(used << 1) > (int32_t)(FG_USED_LEDGER << 1))) return;
  }
  _fg_page_unflag(page);
}

/* --page->used; true when it leaves the count at 0 or a flag set (FG_USED_SLOW). The subtract
 * is 8 bytes wide, over used and sample_left (types.h's used_left), as malloc's add is
 * (internal.h's _fg_page_charge): a store of 4 bytes there made the next malloc's load of 8
 * wait for it to reach the cache, where a store as wide hands its value on at once. A malloc/
 * free loop holding 16 blocks of 64 B: 7.4 -> 6.0-6.3 ns a pair (mimalloc 6.0, tcmalloc
 * 5.7-6.4); the lab's shapes the same (fresh copies of each library). The count never borrows from
 * sample_left: a block that passed free's checks is counted in it. The test is of `used`
 * alone, read back from that store: one compare more than the 4-byte subtract's own flags
 * (compilers load, subtract, store and test). FG_USED_SLOW never stands alone, so
 * 0x80000000 - 1 does not arise. */
static inline bool used_drop(fg_page_t *page) {
#if defined(__x86_64__) && defined(__GNUC__)
  __asm__ goto("subq $1, %0\n\tcmpl $0, %1\n\tjle %l[slow]" : "+m"(page->used_left) : "m"(page->used) : "cc" : slow);
  return false;
slow:
  return true;
#else
  page->used_left--;
  return (int32_t)page->used <= 0;
#endif
}

/* The owner's frees go straight back on `free`: the block just freed is the next one handed
 * out, still in cache (python3 under PYTHONMALLOC=malloc: 2.51 -> 2.34 s; 81 % of malloc's
 * time was the miss on a cold block's link). Other threads' frees still wait on the page's
 * atomic list until `free` runs dry or the decay pass gathers them: bounded by the page.
 * `plain`: the page's key is 0 (see _fg_link_plain); `count`: the ledger counts it here, as
 * block `idx` of the page. */
static inline void push_local(fg_page_t *page, fg_block_t *b, bool count, bool plain, size_t idx) {
  b->next = plain ? page->free : _fg_head_link(page, page->free);
  page->free = _fg_link_plain(b);
  if (fg_unlikely(used_drop(page))) {
    if (count)
      page_freed_counted(page, idx);
    else
      page_freed_into(page);
  }
}
/* fg_free's own: a page of key 0 (no secure mode), the ledger (if on) counting it inline. */
static inline void push_own_free(fg_page_t *page, fg_block_t *b, size_t idx) { push_local(page, b, true, true, idx); }
/* Through the hooks, which counted it already; any key (secure mode's pages have one). Secure
 * mode alone checks the block here, its page in hand (p: the pointer freed, in b). */
static inline void push_hooked_free(fg_page_t *page, fg_block_t *b, const void *p) {
  if (_fg_secure_alone()) _fg_secure_freeing(page, b, p);
  push_local(page, b, false, false, 0);
}

/* Local free of a block whose checks failed on the fast path: aligned interior pointers
 * land here legitimately; misuse aborts in block_checked. */
static fg_noinline void free_local_checked(fg_page_t *page, void *p, bool count) {
  fg_block_t *b = block_checked(page, p); /* first: a misuse is not counted */
  if (count && _fg_ledger_fast()) _fg_ledger_free(p);
  push_hooked_free(page, b, p);
}

/* A sized free whose size does not fit its page's block size: a large block (its segment's
 * lone page has block size 0), an aligned interior pointer (never size-checked: its size is
 * the request, not the block's), or a wrong size; or no page of ours at all. */
static fg_noinline fg_warm void free_sized_slow(void *p, size_t size, bool user) {
  fg_segment_t *s = _fg_segment_of(p);
  unsigned page_shift = s->page_shift;
  if (!_fg_cookie_ok(s)) _fg_misuse("not a frugal pointer", p);
  if (s->kind == FG_SEG_LARGE) {
    if (_fg_wrong_size(size, _fg_large_usable(s, p), FG_OS_PAGE)) _fg_misuse("wrong size in sized free", p);
  } else {
    fg_page_t *page = _fg_page_at(s, p, page_shift);
    if (page->heap == NULL) _fg_misuse("double free", p); /* its page was released */
    /* Secure mode's blocks are a class up for the canary (_fg_secure_size): 8 bytes more. */
    if (block_checked(page, p) == p && _fg_wrong_size(size, page->block_size, _fg_secure_on() ? 8 : 0))
      _fg_misuse("wrong size in sized free", p);
  }
  free_ours(p, page_shift, false, 0, user);
}

/* A pointer into one of our small or large segments (the segment map said so, and gave its
 * page shift). `user`: from fg_free itself, which counts the ledger inline (the other ways
 * in have counted already) and never sees secure mode's pages (their keys are not 0). */
static inline void free_ours(void *p, unsigned page_shift, bool sized, size_t size, bool user) {
  fg_segment_t *s = _fg_segment_of(p);
  fg_page_t *page = _fg_page_at(s, p, page_shift);
  /* The size first, by any thread: from here on the frees are unsized. */
  if (sized && fg_unlikely(_fg_page_wrong_size(page, size))) {
    free_sized_slow(p, size, user);
    return;
  }
  if (fg_unlikely(page->heap != _fg_heap())) {
    free_remote(s, page, p, user);
    return;
  }
  size_t idx;
  if (fg_unlikely(!_fg_block_carved_at(page, (size_t)((uint8_t *)p - page->start), &idx)) ||
      (user ? looks_freed_plain(page, p) : looks_freed(page, p))) {
    free_local_checked(page, p, user);
    return;
  }
  if (user)
    push_own_free(page, p, idx);
  else
    push_hooked_free(page, p, p);
}

void _fg_free_plain_block(fg_page_t *page, void *p) {
  if (fg_likely(page->heap == _fg_heap()))
    push_local(page, p, false, true, 0); /* a plain page: key 0, not secure mode's */
  else
    free_remote(_fg_segment_of(p), page, p, false);
}

void _fg_free_raw(void *p, bool sized, size_t size) {
  if (p == NULL) return;
  if (fg_unlikely(!_fg_segmap_contains(p))) free_foreign(p);
  free_ours(p, _fg_segment_of(p)->page_shift, sized, size, false);
}

/* What the segment map did not mark plain: NULL, a foreign pointer, or any pointer while
 * every call is hooked. */
static fg_noinline fg_rare void free_hooked(void *p, size_t size, bool sized, uint8_t v) {
  if (p == NULL) return;
  if (v == 0) free_foreign(p);
  _fg_hook_free(p);
  free_ours(p, _fg_segment_of(p)->page_shift, sized, size, false);
}
/* v: p's segment-map byte (0: NULL or not ours). Secure mode alone has its own path for
 * pointers of frugal's (secure.c: small blocks of this thread's pages checked and pushed,
 * their page in hand), which comes back to _fg_free_raw for the rest. Tail calls only: a
 * frame here cost secure mode 12 instructions a free. `sized` and `v` as unsigned: passed on
 * as bool and uint8_t, each cost a zero-extension before the jump (free_impl's byte load
 * extends v already). */
static fg_noinline void free_unusual(void *p, size_t size, unsigned sized, unsigned v) {
  if (p == NULL) return; /* free(NULL) is common: first */
  if (_fg_secure_alone() && v != 0) {
    _fg_secure_free_small(p, size, sized, v);
    return;
  }
  free_hooked(p, size, sized, v);
}

/* The checks: a pointer is frugal's if the segment map has its segment (one byte test, which
 * also turns away NULL and sends the hooked modes to their path); a carved block start if its
 * offset in the page, times the page's magic number, is below the page's carved limit (one
 * multiply, no divide); live unless its first word decodes to a free-list link of its own
 * segment, in which case the page's lists are walked to be sure. */
static inline void free_impl(void *p, bool sized, size_t size) {
  uint8_t v = _fg_segmap_byte(p);
  if (fg_unlikely((int8_t)v <= 0)) { /* none, or hooked */
    free_unusual(p, size, sized, v);
    return;
  }
  free_ours(p, v, sized, size, true);
}

fg_export void fg_free(void *p) { free_impl(p, false, 0); }
FG_ALIAS(free, fg_free);
FG_ALIAS(cfree, fg_free);
FG_ALIAS(_ZdlPv, fg_free); /* operator delete(void*) */
FG_ALIAS(_ZdaPv, fg_free); /* operator delete[](void*) */

fg_export void fg_free_sized(void *p, size_t size) { free_impl(p, true, size); }
FG_ALIAS(free_sized, fg_free_sized);
FG_ALIAS(_ZdlPvm, fg_free_sized); /* operator delete(void*, size_t): gcc's C++14 deletes */
FG_ALIAS(_ZdaPvm, fg_free_sized); /* operator delete[](void*, size_t) */

fg_export void fg_free_aligned_sized(void *p, size_t align, size_t size) {
  (void)align;
  if (p == NULL) return;
  if (size > fg_usable_size(p)) _fg_misuse("wrong size in sized free", p);
  fg_free(p);
}

/* fg_usable_size's other cases: NULL, secure mode's canary, large blocks, aligned interior
 * pointers (a division), and misuse. */
static fg_noinline size_t usable_slow(const void *p) {
  if (p == NULL) return 0;
  size_t requested = _fg_hook_requested(p); /* secure mode: the bytes past it are the canary's */
  if (requested != SIZE_MAX) return requested;
  fg_segment_t *s;
  fg_page_t *page = _fg_checked_page(p, &s);
  if (page == NULL) return _fg_large_usable(s, p);
  return _fg_usable_from(page, p);
}

/* The page of p if p is a live block start of a plain page (no key, no hooks), by any thread:
 * the checks of fg_free's fast path, and no division; else NULL (a large block, an aligned
 * interior pointer, a hooked pointer, a misuse: the caller's slow path sorts them out). A
 * released slot, and a large segment's lone page, have a carved limit of 0: no pointer passes
 * the block-start check there. fg_usable_size and realloc take the block's size from it: seed
 * 1's process calls fg_usable_size on every step (57 instructions a call with the division,
 * mimalloc 28). */
static inline fg_page_t *plain_block_page(const void *p) {
  uint8_t v = _fg_segmap_byte(p);
  if (fg_likely((int8_t)v > 0)) { /* plainly ours: not hooked, so the page's key is 0 */
    fg_page_t *page = _fg_page_at(_fg_segment_of(p), p, v);
    if (fg_likely(_fg_block_carved(page, (size_t)((const uint8_t *)p - page->start))) &&
        fg_likely(!looks_freed_plain(page, p)))
      return page;
  }
  return NULL;
}
fg_page_t *_fg_plain_block_page(const void *p) { return plain_block_page(p); }

fg_export size_t fg_usable_size(const void *p) {
  fg_page_t *page = plain_block_page(p);
  return fg_likely(page != NULL) ? page->block_size : usable_slow(p);
}
FG_ALIAS(malloc_usable_size, fg_usable_size);

fg_export fg_rare bool fg_is_owned(const void *p) {
  fg_segment_t *s = _fg_segment_of(p);
  if (p == NULL || !_fg_segment_valid(s)) return false;
  if (s->kind == FG_SEG_LARGE && s->guarded) return _fg_guard_owns(s, p);
  if (s->kind == FG_SEG_LARGE)
    return (const uint8_t *)p == (uint8_t *)s + s->large_offset &&
           atomic_load(&s->large_state) == FG_LARGE_LIVE;
  fg_page_t *page = _fg_page_of(s, p);
  if (page->heap == NULL) return false;
  size_t off = (size_t)((const uint8_t *)p - page->start);
  const fg_block_t *b = p;
  if (!_fg_block_carved(page, off)) { /* aligned calls hand out interior pointers */
    if (!page->has_aligned || (const uint8_t *)p < page->start || off / page->block_size >= page->capacity)
      return false;
    b = (const fg_block_t *)(page->start + off - off % page->block_size);
  }
  return !(looks_freed(page, b) && _fg_page_holds_free(page, b));
}

fg_export fg_warm void fg_collect(bool force) {
  uint8_t was = _fg_returning_for(FG_BY_COLLECT);
  _fg_collect_all(_fg_heap(), force);
  _fg_returning_end(was);
}
