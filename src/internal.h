/* internal.h — what frugal's layers share: the functions each layer offers the ones above it,
 * and the small inline helpers of the fast paths. Names shared across files start with _fg_.
 * Layers, bottom up: os, segment (+ segment map), page, sizeclass, heap, large, alloc/free. */
#ifndef FG_INTERNAL_H
#define FG_INTERNAL_H

#include "frugal.h"
#include "types.h"

#include <string.h>

void _fg_yield(void); /* os.c */

#define fg_likely(x) __builtin_expect(!!(x), 1)
#define fg_unlikely(x) __builtin_expect(!!(x), 0)
#define fg_noinline __attribute__((noinline))
#define fg_cold __attribute__((cold))
#define fg_noreturn __attribute__((noreturn))
#define fg_export __attribute__((visibility("default")))
/* `name`, exported, is `fn` itself, at its address: the libc and C++ names of the hottest
 * entry points, which a call from the program then reaches with no jump of its own (the
 * fill-and-drain shape: 4 % of its time). Written beside fn's definition, as an alias must be.
 * In the shared library only (FG_SHARED_LIBRARY): in the archive an alias would sit in alloc.o
 * or free.o, which a program linking it for the fg_ names alone pulls in, and that program
 * would get frugal's malloc too (the TSan build of the stress test, whose libc names must stay
 * TSan's). There override.c and override_new.c define them as tail jumps (FG_OVERRIDE_HOT). */
#if !defined(FG_SHARED_LIBRARY)
#define FG_ALIAS(name, fn) extern __typeof__(fn) name
#define FG_OVERRIDE_HOT 1
#elif defined(__has_attribute) && __has_attribute(copy)
#define FG_ALIAS(name, fn) \
  extern __typeof__(fn) name __attribute__((alias(#fn), copy(fn), visibility("default")))
#else /* clang: no copy attribute, and no warning for the attributes left behind */
#define FG_ALIAS(name, fn) extern __typeof__(fn) name __attribute__((alias(#fn), visibility("default")))
#endif
/* Code a typical process never runs: reports, the ledger's and secure mode's work, misuse and
 * fault reports, the raw helpers of hooked calls. libfrugal.so links it into a mapping of its
 * own (cmake/layout.ld): the kernel maps a file's pages in by windows of 16 pages around each
 * fault, clipped to the mapping, so rare code among the hot code was resident with it. A rare
 * function that most processes call only to test a flag keeps that test outside, inline. */
#define fg_rare __attribute__((section(".text.fg_rare")))
/* Code that a small program may never run, though most real ones do: large blocks (and their
 * reallocs), aligned allocation, sized frees that miss, thread exit, giving memory back.
 * Linked into a mapping of its own as well (cmake/layout.ld), so that a program that only
 * mallocs, reallocs and frees small blocks has the hot code alone resident. */
#define fg_warm __attribute__((section(".text.fg_warm")))
/* Read-only data that only rare code reads (help texts), placed with it. */
#define fg_rare_data __attribute__((section(".fg_rare_rodata")))
/* A big zero-filled array that a process touches in a few places if at all (the segment map,
 * the ledger's tables, the process's large cache): placed behind the small variables
 * (cmake/layout.ld), which then share a page instead of being spread around it. */
#define fg_big_zeros __attribute__((section(".bss.fg_big")))

static inline size_t fg_align_up(size_t n, size_t a) { return (n + a - 1) & ~(a - 1); }
static inline bool fg_is_pow2(size_t n) { return n != 0 && (n & (n - 1)) == 0; }

/* A lock for the few short critical sections shared by threads (cache lists): spins, then
 * yields. A pthread mutex sleeps in the kernel under contention, which cost the lab's
 * 8-thread 1 MiB run more than the work it protected. */
static inline void _fg_lock(fg_lock_t *l) {
  for (unsigned spins = 0; atomic_exchange_explicit(l, 1, memory_order_acquire) != 0;) {
    while (atomic_load_explicit(l, memory_order_relaxed) != 0) {
      if (++spins < 64) {
#if defined(__x86_64__) || defined(__i386__)
        __asm__ volatile("pause");
#endif
      } else {
        _fg_yield();
      }
    }
  }
}
static inline void _fg_unlock(fg_lock_t *l) { atomic_store_explicit(l, 0, memory_order_release); }
static inline bool _fg_trylock(fg_lock_t *l) {
  return atomic_load_explicit(l, memory_order_relaxed) == 0 && atomic_exchange_explicit(l, 1, memory_order_acquire) == 0;
}

/* ---- init.c: process state, errors ---------------------------------------------------- */
extern uintptr_t _fg_secret; /* per-process random, set before the first heap */
void _fg_process_init(void); /* idempotent; safe before constructors run */
/* While a thread does frugal's own work (captures a stack, loads libunwind, writes a report,
 * starts the purger thread), what it allocates is frugal's doing, not the program's: no stack
 * is captured for it, no sample taken, and the ledger leaves it out. begin returns the old
 * state, for end. */
extern __thread bool _fg_own;
static inline bool _fg_own_doing(void) { return _fg_own; }
static inline bool _fg_own_begin(void) {
  bool was = _fg_own;
  _fg_own = true;
  return was;
}
static inline void _fg_own_end(bool was) { _fg_own = was; }

/* The process's mode: one word, set once by _fg_process_init from the options, before the
 * first heap or segment; read everywhere after. hooks.c says where each mode sends a call. */
enum {
  FG_MODE_SECURE = 1,      /* FRUGAL_SECURE: secure.c's checks on every call */
  FG_MODE_LEDGER = 2,      /* the ledger counts (FRUGAL_STATS, FRUGAL_STATS_FILE, FRUGAL_LEAKS) */
  FG_MODE_LEDGER_FAST = 4, /* ...inline in fg_malloc/fg_free: no secure mode, no leak stacks */
  FG_MODE_HOOKED = 8,      /* secure or ledger: every entry point but the malloc/free fast
                            * paths takes its hooked path, after one predictable branch */
  FG_MODE_HOOKED_ALL = 16, /* hooked, not ledger-fast nor secure-fast: malloc and free too;
                            * they need no test of their own, as the direct table stays empty
                            * and the segment map has FG_SEGMAP_HOOKED */
  FG_MODE_SECURE_FAST = 32, /* secure mode alone: malloc's fast path pops from secure pages
                             * (FG_USED_SECURE) and arms the block out of line; free is hooked
                             * by the segment map and checks where it pushes (hooks.c) */
};
/* Hidden: tested as one RIP-relative operand. Otherwise the compiler keeps its address in a
 * callee-saved register across calls (page.c's set_direct tests it twice around one), which
 * cost thread exit 5 instructions against the five bools it replaced. */
extern unsigned _fg_mode __attribute__((visibility("hidden")));
static inline bool _fg_secure_on(void) { return (_fg_mode & FG_MODE_SECURE) != 0; }
static inline bool _fg_ledger_active(void) { return (_fg_mode & FG_MODE_LEDGER) != 0; }
static inline bool _fg_ledger_fast(void) { return (_fg_mode & FG_MODE_LEDGER_FAST) != 0; }
static inline bool _fg_hooked(void) { return (_fg_mode & FG_MODE_HOOKED) != 0; }
static inline bool _fg_hooked_all(void) { return (_fg_mode & FG_MODE_HOOKED_ALL) != 0; }
/* Secure mode or every call hooked: a page's blocks are not to be popped as malloc's fast path
 * pops them (the inline ledger's are: its pages count them in the cold block). */
static inline bool _fg_pages_hooked(void) { return (_fg_mode & (FG_MODE_SECURE | FG_MODE_HOOKED_ALL)) != 0; }
/* Every free hooked: the segment map's bytes carry FG_SEGMAP_HOOKED. */
static inline bool _fg_free_hooked(void) { return (_fg_mode & (FG_MODE_HOOKED_ALL | FG_MODE_SECURE_FAST)) != 0; }
fg_noreturn fg_cold void _fg_misuse(const char *what, const void *p);
void _fg_warning(const char *msg, const char *detail);
/* One "frugal: event: " line on stderr when FRUGAL_VERBOSE >= level: 1 for rare events (an
 * out-of-memory retry, a full cache giving a block back at once, no purger thread), 2 for
 * every pass that gives memory back (_fg_returning_end prints those). */
void _fg_event(int level, const char *msg);

/* Why memory is being given back on this thread right now: os.c adds what it gives back to
 * the returned_<reason>_bytes counter, so the ledger says who returned what. */
typedef enum fg_reason_e { FG_BY_NONE, FG_BY_DECAY, FG_BY_IDLE, FG_BY_OOM, FG_BY_COLLECT, FG_BY_GROWTH,
                               FG_BY_TAKEOVER } fg_reason_t;
extern __thread uint8_t _fg_returning;
extern __thread uint64_t _fg_returned_bytes; /* given back since the scope began (os.c) */
static inline uint8_t _fg_returning_for(fg_reason_t r) {
  uint8_t old = _fg_returning;
  _fg_returning = (uint8_t)r;
  return old;
}
void _fg_returning_end(uint8_t was); /* closes the scope _fg_returning_for opened */
void _fg_write_stderr(const char *s);

/* ---- counters (stats.c owns them; every layer may count) ------------------------------- */
extern _Atomic(uint64_t) _fg_counters[FG_C_COUNT];
static inline void _fg_count(int c, uint64_t n) {
  atomic_fetch_add_explicit(&_fg_counters[c], n, memory_order_relaxed);
}
/* Owner-only counters, read by other threads with relaxed loads: no locked instruction. On
 * x86-64 one add to memory (an aligned 8-byte store is never torn); C11 atomics would need a
 * load, an add and a store, which is most of the inline ledger's cost. */
static inline void _fg_bump(_Atomic(uint64_t) *c, uint64_t n) {
#if defined(__x86_64__)
  __asm__("addq %1, %0" : "+m"(*(uint64_t *)c) : "er"(n));
#else
  atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + n, memory_order_relaxed);
#endif
}

/* ---- os.c: the only file that talks to the kernel -------------------------------------- */
void *_fg_os_alloc_aligned(size_t size, size_t align); /* NULL on failure, errno untouched */
void _fg_os_free(void *p, size_t size);
void _fg_os_purge(void *p, size_t size);                       /* give the pages back, keep the range */
size_t _fg_os_resident(const void *p, size_t size);             /* bytes of its pages resident (mincore) */
bool _fg_os_resize(void *p, size_t old_size, size_t new_size); /* grow/shrink in place */
bool _fg_os_move(void *p, size_t old_size, void *to, size_t new_size); /* onto the mapping at `to` */
bool _fg_os_protect(void *p, size_t size, bool access); /* PROT_READ|PROT_WRITE, or PROT_NONE */
bool _fg_os_seal(void *p, size_t size); /* PROT_NONE, and the pages dropped */
uint64_t _fg_clock_ms(void);
uintptr_t _fg_os_random(void);

/* ---- options.c ---------------------------------------------------------------------------- */
void _fg_options_init(void);
extern long _fg_option_values[FG_OPTION_COUNT];
static inline long _fg_option(fg_option_t o) { return _fg_option_values[o]; }

/* ---- segment.c: segments, the segment map, page slots ------------------------------------ */
/* One byte per 4 MiB of the 47-bit user address space: is a segment header there? A byte,
 * not a bit: free() tests it with one compare (3 instructions fewer than a bit test), and
 * the 32 MiB it reserves are only committed where segments are. */
#define FG_SEGMAP_SIZE ((size_t)1 << (47 - FG_SEGMENT_SHIFT))
extern _Atomic(uint8_t) _fg_segmap[FG_SEGMAP_SIZE];

static inline fg_segment_t *_fg_segment_of(const void *p) {
  return (fg_segment_t *)((uintptr_t)p & ~(uintptr_t)FG_SEGMENT_MASK);
}
/* A segment's byte is 0 (no segment), or its page shift (1..63), | FG_SEGMAP_HOOKED while
 * every call is hooked. free() reads the page shift from it rather than from the header, and
 * sends every pointer that is not plainly ours (NULL, foreign, hooked) to one slow path with
 * a single signed test. */
#define FG_SEGMAP_HOOKED 0x80
static inline uint8_t _fg_segmap_byte(const void *p) {
  uintptr_t i = (uintptr_t)p >> FG_SEGMENT_SHIFT;
  if (fg_unlikely(i >= FG_SEGMAP_SIZE)) return 0;
  return atomic_load_explicit(&_fg_segmap[i], memory_order_relaxed);
}
static inline bool _fg_segmap_contains(const void *p) { return _fg_segmap_byte(p) != 0; }
/* A segment header's cookie is its address xor the process secret: a stray or forged
 * pointer's "header" is almost never right (segment.c writes it). */
static inline uintptr_t _fg_cookie_of(const fg_segment_t *s) { return (uintptr_t)s ^ _fg_secret; }
static inline bool _fg_cookie_ok(const fg_segment_t *s) { return s->cookie == _fg_cookie_of(s); }
/* s is a live segment of frugal's: in the segment map, its header intact. */
static inline bool _fg_segment_valid(const fg_segment_t *s) { return _fg_segmap_contains(s) && _fg_cookie_ok(s); }
void _fg_segmap_set(const fg_segment_t *s, bool on);
static inline fg_page_t *_fg_page_at(fg_segment_t *s, const void *p, unsigned page_shift) {
  /* fg_page_t is 128 bytes: the slot's byte offset is a shift, and one add finds it. */
  uintptr_t slot = ((uintptr_t)p & FG_SEGMENT_MASK) >> page_shift;
  return (fg_page_t *)((uintptr_t)s->pages + slot * sizeof(fg_page_t));
}
static inline fg_page_t *_fg_page_of(fg_segment_t *s, const void *p) {
  return _fg_page_at(s, p, s->page_shift);
}
/* Which free slot _fg_segment_page_alloc may take: only one whose memory is still committed
 * (carving it costs no fault), or any, else one of a segment it maps. */
typedef enum fg_slot_want_e { FG_SLOT_COMMITTED, FG_SLOT_OR_MAP } fg_slot_want_t;
fg_page_t *_fg_segment_page_alloc(fg_heap_t *heap, fg_segment_kind_t kind, fg_slot_want_t want);
fg_page_t *_fg_segment_slot_lend(fg_heap_t *owner, fg_segment_kind_t kind, fg_heap_t *to);
bool _fg_segment_lendable(void);      /* some heap may have a committed free slot to lend */
void _fg_segment_lendable_none(void); /* a scan found none */
void _fg_segment_page_free(fg_page_t *page);
size_t _fg_page_area(const fg_segment_t *s, const fg_page_t *page, uint8_t **start);
bool _fg_segment_purge_expired(fg_heap_t *heap, uint64_t now, bool force); /* true: some left */
void _fg_segment_purge_idle(fg_heap_t *heap, uint64_t before, uint8_t kinds); /* free slots freed at or before */
bool _fg_segment_cache_collect(uint64_t now, bool force); /* true: some left */
fg_segment_t *_fg_segment_map_large(size_t size); /* a 4 MiB-aligned mapping, registered */
void _fg_segment_large_init(fg_segment_t *s, size_t size);
void _fg_segment_unmap(fg_segment_t *s);
void _fg_segment_unmap_list(fg_segment_t *list, int counter); /* linked by next; counts each */
void _fg_segment_held(fg_heap_t *heap, uint64_t *resident, uint64_t *returned); /* free slots */
void _fg_segment_cache_held(uint64_t *resident, uint64_t *returned);
void _fg_segment_lock_all(void);
void _fg_segment_unlock_all(void);

/* ---- page.c: one page's free lists and the heap's page queues ---------------------------- */
/* Free-list links (list heads and each free block's first word) hold a block's address plus
 * FG_LINK_TAG, xor-ed with the page's key (0 unless FRUGAL_SECURE is on). A list ends at
 * its segment's base address, so every link of a freed block leads into the block's own
 * segment and carries the tag in its low 3 bits (blocks are 8-aligned): free()'s double-free
 * check tests both with one xor and a rotate, and a live block's first word looks like that
 * only if it is a pointer into its own segment with 101 in its low bits; then the check walks
 * the page's lists to be sure (correct, only slower). A plain pointer, like a list node's
 * link to its neighbour, does not. Why a tag and not a key: malloc's critical path (load the
 * head, load its link, store it) had a per-page key's xor on it, a tenth of a malloc/free
 * loop; a bias of a few bytes folds into the load's displacement and costs nothing (a bias
 * of 2 KiB or more would: the load's fast path needs a small one). */
#define FG_LINK_TAG 5
#define FG_LINK_NIL_MASK (FG_SEGMENT_MASK & ~(uintptr_t)7)
static inline fg_block_t *_fg_list_end(const fg_page_t *page) {
  return (fg_block_t *)((uintptr_t)page & ~(uintptr_t)FG_SEGMENT_MASK);
}
/* The link to b under a page's key (a caller that links many blocks keeps the key in hand). */
static inline fg_link_t _fg_link_key(uintptr_t key, const void *b) { return ((uintptr_t)b + FG_LINK_TAG) ^ key; }
static inline fg_link_t _fg_link(const fg_page_t *page, const void *b) { return _fg_link_key(page->key, b); }
static inline fg_block_t *_fg_block(const fg_page_t *page, fg_link_t l) {
  return (fg_block_t *)((l ^ page->key) - FG_LINK_TAG);
}
/* The end of a list, or 0 (the lists of the empty static page, and of free slots). */
static inline bool _fg_link_nil(const fg_page_t *page, fg_link_t l) {
  return ((l ^ page->key) & FG_LINK_NIL_MASK) == 0;
}
/* The same for a page whose key is 0, or for a list head (below): on the malloc/free fast
 * paths, whose free never sees secure mode's pages (their segment-map bytes are hooked). */
static inline fg_link_t _fg_link_plain(const void *b) { return (uintptr_t)b + FG_LINK_TAG; }
static inline fg_block_t *_fg_block_plain(fg_link_t l) { return (fg_block_t *)(l - FG_LINK_TAG); }
static inline bool _fg_link_nil_plain(fg_link_t l) { return (l & FG_LINK_NIL_MASK) == 0; }
/* A page's `free` head is kept plain (its key not applied) in every mode, so that malloc's fast
 * path pops secure pages too, with no xor (secure.c's _fg_secure_popped then decodes the link
 * the pop moved into the head). Links inside blocks and the thread-free stack's links stay
 * encoded. These two convert (the same xor, named for the direction). */
static inline fg_link_t _fg_head_link(const fg_page_t *page, fg_link_t head) { return head ^ page->key; }
static inline fg_link_t _fg_link_head(const fg_page_t *page, fg_link_t l) { return l ^ page->key; }
/* Is `off` bytes into the page the start of a carved block? Write off = i * size + r and
 * err = magic * size - 2^64 (0 < err <= size). Then off * magic = i * err + r * magic
 * (mod 2^64, without wrapping for off < 2^22 and size <= 512 KiB): below carved_limit =
 * capacity * err exactly when r == 0 and i < capacity, since r > 0 gives at least magic,
 * which is far above it. An offset before the first block (a negative one) wraps to near
 * 2^64. One multiply and one compare: no divide, no second test; tests/blockstart.c sweeps
 * every class. */
static inline bool _fg_block_carved(const fg_page_t *page, size_t off) {
  return off * page->magic < atomic_load_explicit(&page->carved_limit, memory_order_relaxed);
}
/* The same from the page's owner, which alone writes the limit: a plain load, that the
 * compare can take from memory. */
static inline bool _fg_block_carved_own(const fg_page_t *page, size_t off) {
  return off * page->magic < *(const uint64_t *)&page->carved_limit;
}
/* off / block_size, for off < 2^32: the high half of off * magic. */
static inline size_t _fg_block_index(const fg_page_t *page, size_t off) {
  return (size_t)(((unsigned __int128)off * page->magic) >> 64);
}
/* _fg_block_carved_own and, in *idx, _fg_block_index: one multiply for both (its low half and
 * its high half). */
static inline bool _fg_block_carved_at(const fg_page_t *page, size_t off, size_t *idx) {
  unsigned __int128 prod = (unsigned __int128)off * page->magic;
  *idx = (size_t)(prod >> 64);
  return (uint64_t)prod < *(const uint64_t *)&page->carved_limit;
}

/* Bytes usable from p to the end of its block (p a block start or an aligned interior pointer). */
static inline size_t _fg_usable_from(const fg_page_t *page, const void *p) {
  size_t off = (size_t)((const uint8_t *)p - page->start);
  return page->block_size - off % page->block_size;
}
static inline uint32_t _fg_page_used(const fg_page_t *page) { return page->used & FG_USED_COUNT; }
/* What a kept empty page holds: its slot; for a page of one block grown by realloc (heap.c's
 * _fg_heap_regrow), kept for the next such buffer, that block (a single page is 4 MiB). */
static inline size_t _fg_page_bytes(const fg_page_t *page) {
  return (size_t)(page->regrown ? 1u : page->reserved) * page->block_size;
}
/* A kept empty page is taken back into service (it became its class's first page) or released. */
static inline void _fg_page_unkeep(fg_heap_t *heap, fg_page_t *page) {
  if (!page->kept) return;
  page->kept = 0;
  _fg_bump(&heap->kept_bytes, -(uint64_t)_fg_page_bytes(page));
}
/* A page holds a growing buffer, alone (heap.c's _fg_heap_regrow), or no longer: its heap
 * counts such pages, each a segment's address space for one block. */
static inline void _fg_page_buffer_set(fg_page_t *page, bool on) {
  if (page->regrown == on) return;
  page->regrown = on;
  page->heap->buffers += on ? 1u : (uint32_t)-1;
}
static inline bool _fg_page_in_full(const fg_page_t *page) { return (page->used & FG_USED_FULL) != 0; }
/* Set or clear FG_USED_FULL or FG_USED_LEDGER, keeping FG_USED_SLOW their union. */
static inline void _fg_page_used_set(fg_page_t *page, uint32_t u) {
  page->used = (u & (FG_USED_FULL | FG_USED_LEDGER | FG_USED_SECURE)) ? u | FG_USED_SLOW : u & ~FG_USED_SLOW;
}
static inline void _fg_page_flag_set(fg_page_t *page, uint32_t flag) { _fg_page_used_set(page, page->used | flag); }
static inline void _fg_page_flag_clear(fg_page_t *page, uint32_t flag) { _fg_page_used_set(page, page->used & ~flag); }
/* A page's thread-free word: its top block (NULL: none) and how many blocks it holds. */
static inline fg_block_t *_fg_tf_top(uintptr_t tf) { return (fg_block_t *)(tf & FG_TF_BLOCK); }
static inline uint32_t _fg_tf_count(uintptr_t tf) { return (uint32_t)(tf >> FG_TF_COUNT_SHIFT); }
/* Every block of a full page (FG_TF_FULL, not FG_TF_STAYS) is on its thread-free stack: it
 * went full with all its blocks in use, and a free of the owner's would have taken it out of
 * the full list first. Exactly one free makes this true, and then the page is its. */
static inline bool _fg_tf_emptied(const fg_page_t *page, uintptr_t tf) {
  return (tf & (FG_TF_FULL | FG_TF_STAYS)) == FG_TF_FULL &&
         _fg_tf_count(tf) == atomic_load_explicit(&page->capacity, memory_order_relaxed);
}
void _fg_page_init(fg_page_t *page, fg_heap_t *heap, size_t class_idx);
void _fg_page_purge_idle(fg_page_t *page, uint64_t check); /* owner: free blocks idle since the last check */
bool _fg_page_extend(fg_page_t *page);                    /* carve more blocks into `free` */
bool _fg_page_reclass(fg_page_t *page, fg_heap_t *heap, size_t class_idx); /* one block: a bigger class */
void _fg_page_uncarve(fg_page_t *page); /* owner, page empty: its blocks' memory goes back */
void _fg_page_recarve(fg_page_t *page); /* emptied: carved again in address order */
void _fg_page_collect(fg_page_t *page);                   /* local + thread frees into `free` */
bool _fg_page_holds_free(fg_page_t *page, const void *b); /* walk the lists: is b free? */
void _fg_page_side_array_drop(fg_page_t *page);           /* to the pool of side arrays */
void _fg_page_side_lock(bool lock);                       /* fork: the pool's lock */
/* The requested-size entry of block p (hooked paths only); NULL if p is no block start. */
uint32_t *_fg_page_requested_slot(fg_page_t *page, const void *p, bool create);
/* The words (size + 7) / 8 of the heap's direct table that lead to class c's first page:
 * [lo, hi]; false: none (a class above FG_DIRECT_MAX). */
bool _fg_direct_words(size_t c, size_t *lo, size_t *hi);
void _fg_queue_push_front(fg_heap_t *heap, fg_page_queue_t *q, fg_page_t *page);
void _fg_queue_push_back(fg_heap_t *heap, fg_page_queue_t *q, fg_page_t *page);
void _fg_queue_remove(fg_heap_t *heap, fg_page_queue_t *q, fg_page_t *page);

/* ---- sizeclass.c -------------------------------------------------------------------------- */
/* The class of a request by the doublings' formula, which goes on past FG_CLASS_MAX (the
 * ledger's histogram buckets continue it); constant for a constant size. */
static inline size_t _fg_class_of_doublings(size_t size) {
  if (size <= 128) return size <= 8 ? 0 : (size + 15) >> 4;
  size_t k = 63 - (size_t)__builtin_clzl(size - 1); /* 2^k < size <= 2^(k+1), k >= 7 */
  size_t c = FG_CLASS_LINEAR + (k - 7) * 8 + ((size - 1) >> (k - 3)) - 8;
  if (k < FG_CLASS_PLUS_FIRST) return c;
  if (k > FG_CLASS_PLUS_LAST) return c + FG_CLASS_PLUS_COUNT;
  return c + (k - FG_CLASS_PLUS_FIRST) + (size > ((size_t)1 << k) + FG_PLUS(k));
}
/* Every class above 8 B is a multiple of 16 bytes: up to FG_SMALL_MAX, the class of 16 * i,
 * built at compile time from the class sizes (sizeclass.c). */
extern const uint8_t _fg_class_by16[FG_SMALL_MAX / 16 + 1];
/* The class of a request: 129 B to 8 KiB by the table, one load where the formula took some
 * 30 instructions (malloc of 1-8 KiB, which the direct table does not cover, and every slow
 * path's lookup); the rest by the formula. */
static inline size_t _fg_class_of(size_t size) {
  if (size > 128 && size <= FG_SMALL_MAX) return _fg_class_by16[(size + 15) >> 4];
  return _fg_class_of_doublings(size);
}
size_t _fg_class_formula(size_t c); /* _fg_class_size's, continued past the classes */
extern const uint32_t _fg_class_sizes[FG_CLASS_COUNT];
static inline size_t _fg_class_size(size_t class_idx) { return _fg_class_sizes[class_idx]; }
/* The classes of a kind are contiguous (classes grow with their index): kind k's are
 * [_fg_kind_first_class(k), _fg_kind_first_class(k + 1)). The bounds fold to constants. */
static inline size_t _fg_kind_first_class(fg_segment_kind_t kind) {
  return kind == FG_SEG_SMALL    ? 0
         : kind == FG_SEG_MEDIUM ? _fg_class_of_doublings(FG_SMALL_MAX) + 1
         : kind == FG_SEG_SINGLE ? _fg_class_of_doublings(FG_MEDIUM_MAX) + 1
                                 : FG_CLASS_COUNT;
}
static inline fg_segment_kind_t _fg_class_kind(size_t c) {
  return c < _fg_kind_first_class(FG_SEG_MEDIUM) ? FG_SEG_SMALL
         : c < _fg_kind_first_class(FG_SEG_SINGLE) ? FG_SEG_MEDIUM
                                                   : FG_SEG_SINGLE;
}

/* ---- heap.c: thread heaps ------------------------------------------------------------------ */
extern fg_heap_t _fg_heap_empty;
extern fg_page_t _fg_page_empty;
extern __thread fg_heap_t *_fg_heap_tls;
static inline fg_heap_t *_fg_heap(void) { return _fg_heap_tls; }
fg_heap_t *_fg_heap_init_thread(void);
fg_heap_t *_fg_heap_counting(void); /* the thread's heap, adopted if need be; NULL once it exits */
bool _fg_heap_adopt(fg_heap_t *heap); /* a thread with no heap takes this exited thread's heap */
void _fg_heap_thread_done(void *heap);
void *_fg_heap_alloc_slow(fg_heap_t *heap, size_t size); /* size <= FG_CLASS_MAX */
void _fg_heap_page_retire(fg_page_t *page);              /* owner freed its last block */
void _fg_heap_page_unfull(fg_page_t *page);              /* owner freed into a full page */
/* Another thread freed into a full page (thread-free word now `tf`): the first such free, or
 * the one that left no block of it in use (_fg_tf_emptied). */
void _fg_heap_page_mailed(fg_heap_t *heap, fg_page_t *page, uintptr_t tf);
bool _fg_heap_regrow(fg_page_t *page, const void *p, size_t size); /* realloc in place, or false */
void _fg_heap_grew_large(fg_heap_t *heap, size_t bytes); /* a large block's fresh memory */
void *_fg_heap_alloc_buffer(size_t size); /* realloc: a block of over 8 KiB on a page of its own, or NULL */
void _fg_heap_collect(fg_heap_t *heap, bool force);
void _fg_heaps_lock(void);
void _fg_heaps_unlock(bool child);
void _fg_heap_tick(fg_heap_t *heap); /* slow-path heartbeat: runs decay when it is due */
bool _fg_heaps_purge(uint64_t now);  /* the purger's pass; true: something is left to expire */
void _fg_heaps_held(fg_stats_t *out); /* the ledger's held bytes, every cache */
void _fg_collect_all(fg_heap_t *heap, bool force); /* every layer; heap may be the empty one */

/* ---- purger.c: the background thread that gives memory back while the program is quiet -- */
void _fg_purger_enable(void); /* from the constructor: the thread may start from now on */
void _fg_purger_wake(void);   /* something was cached; call with no frugal lock held */
/* A background thread (purger, control channel) is wanted: the slow paths of allocation start
 * it, never a free (purger.c). One load. */
extern _Atomic bool _fg_start_wanted;
void _fg_background_start_slow(void);
void _fg_purger_grew(void); /* heap.c: a heap grew by a MiB: the purger is wanted */
static inline void _fg_background_start(void) {
  if (fg_unlikely(atomic_load_explicit(&_fg_start_wanted, memory_order_relaxed))) _fg_background_start_slow();
}
void _fg_purger_threads_ended(void); /* the last thread with a heap exited */
bool _fg_purger_running(void);
void _fg_purger_after_fork_child(void);
size_t _fg_heaps_owned(void); /* heap.c: heaps whose thread lives */
uint64_t _fg_collect_now(void); /* heap.c: every cache of every heap given back; the bytes */
/* init.c: the program's threads have all ended (only frugal's own live): the background
 * threads end then, so that the process ends as it would without them. */
bool _fg_program_ended(void);
int _fg_thread_start(void *(*main_fn)(void *)); /* a thread of frugal's own; 0 or an errno */
void _fg_threads_ended(void); /* the last thread with a heap exited: the background threads look */

/* ---- control.c: the control channel (`frugal snapshot`, `frugal top`) ---------------------- */
void _fg_control_enable(void); /* from the constructor */
void _fg_control_poke(void);   /* something was cached: a channel that should run is wanted */
void _fg_control_start_wanted(void); /* from _fg_background_start: a wanted channel starts */
void _fg_control_threads_ended(void);
bool _fg_control_running(void);
void _fg_control_after_fork_child(void);
void _fg_stats_json_to(int fd);   /* stats_report.c: the ledger's JSON */
bool _fg_profile_json_to(int fd); /* sample.c: the profile's JSON now; false: no profile */
void _fg_options_json_to(int fd); /* options.c: the options in effect, as JSON */

/* ---- large.c: blocks above the largest class, and the large cache ------------------------ */
void *_fg_large_alloc(size_t size, size_t align, bool zero);
void _fg_large_free(fg_segment_t *s, const void *p);
size_t _fg_large_usable(fg_segment_t *s, const void *p);
void *_fg_large_realloc(fg_segment_t *s, void *p, size_t size);
bool _fg_large_cache_collect(uint64_t now, bool force); /* true: some left */
bool _fg_large_heap_expire(fg_heap_t *heap, uint64_t now); /* the purger's pass; true: some left */
void _fg_large_zero(void *block, size_t size); /* calloc's zeroing of a large block: pages given back */
void _fg_large_heap_collect(fg_heap_t *heap, uint64_t now, bool force); /* the heap's own cache */
size_t _fg_large_heap_cached(fg_heap_t *heap); /* bytes in a heap's large cache */
void _fg_large_trim(fg_heap_t *heap, size_t bytes); /* small pages grew by bytes: give back as much */
size_t _fg_large_shared_cached(void);          /* bytes in the process cache */
void _fg_large_lock(void);
void _fg_large_unlock(void);

/* ---- alloc.c / free.c: the API without the hooks (the hooked paths call these) ------------ */
void *_fg_malloc_raw(size_t size);
/* override_new.c: operator new's way out when no memory is found (the new-handler loop, then
 * std::bad_alloc), and its nothrow forms' (NULL at the end); alloc.c's operator new calls them. */
void *_fg_new_failed(size_t size);
void *_fg_new_nothrow_failed(size_t size);
void *_fg_calloc_raw(size_t count, size_t size);
void *_fg_realloc_raw(void *p, size_t size);
void *_fg_memalign_raw(size_t align, size_t size); /* align: power of two */
void _fg_free_raw(void *p, bool sized, size_t size);
/* An unsized free of p, a pointer of frugal's whose page (page: _fg_page_of, any kind) is not
 * this thread's: what _fg_free_raw does then, without finding the segment and page again
 * (secure mode's frees of other threads' blocks). */
void _fg_free_other(fg_page_t *page, void *p);
/* An unsized free of p, a live block start of a plain page that _fg_plain_block_page returned
 * (realloc's old block, which it checked before the copy): the push, no check again. */
void _fg_free_plain_block(fg_page_t *page, void *p);

/* ---- secure.c: hardened mode ----------------------------------------------------------------- */
void _fg_secure_init(void);
void _fg_secure_alloc(void *p, size_t size); /* check the free fill, store the request, arm the canary */
/* Check the canary and fill the block; returns the request (0: unknown). _keep leaves the
 * request stored, for the ledger to read and clear next. */
size_t _fg_secure_free(void *p);
size_t _fg_secure_free_keep(void *p);
size_t _fg_secure_requested(const void *p); /* SIZE_MAX: unknown */
/* The same for a small block whose page the caller holds: p just popped from it, or b (p's
 * block, p perhaps an aligned pointer inside it) checked live and about to be freed. */
void _fg_secure_arm(fg_page_t *page, void *p, size_t size);
void _fg_secure_freeing(fg_page_t *page, fg_block_t *b, const void *p);
void _fg_secure_carve(fg_page_t *page, uint8_t *first, uint32_t n); /* fill + shuffle new blocks */
/* Secure mode alone, small blocks of the thread's secure pages (FG_USED_SECURE): p was just
 * popped by malloc's fast path for `size` (its page's direct-table words leave at least 8
 * bytes after any size: see page.c's _fg_direct_words); checked and armed, returned. */
void *_fg_secure_popped(fg_page_t *page, void *p, size_t size);
/* free() in secure mode alone, of a pointer of frugal's (v: its segment-map byte, hooked):
 * small blocks of this thread's secure pages are checked and pushed there, other threads'
 * go to _fg_free_other, the rest to _fg_free_raw's checked path. */
void _fg_secure_free_small(void *p, size_t size, unsigned sized, unsigned v);
size_t _fg_secure_guard(void); /* bytes of guard page at the end of a mapping */
void _fg_secure_guard_mapping(void *base, size_t mapped); /* on a fresh mapping's last page */
/* A cached large block reshaped (large.c): its guard lifted before its pages move, one put
 * back at its new end after (dropping that page's memory: a cut block's may be resident). */
void _fg_secure_guard_lift(void *base, size_t mapped);
void _fg_secure_guard_seal(void *base, size_t mapped);

/* ---- hooks.c: where a hooked call goes (secure mode, the ledger) ------------------------- */
/* Bytes a secure allocation asks for beyond the request: room for at least one canary byte. */
static inline size_t _fg_hook_pad(void) { return _fg_secure_on() ? 1 : 0; }
void _fg_hook_alloc(void *p, size_t size); /* after the raw allocation of size + pad */
size_t _fg_hook_free(void *p);             /* before the raw free; returns the request (0: unknown) */
/* Secure mode without the ledger: small blocks skip the hooks above, malloc and free call
 * secure.c where they hold the block's page (see hooks.c). */
static inline bool _fg_secure_alone(void) { return (_fg_mode & FG_MODE_SECURE_FAST) != 0; }
/* Secure mode alone: the bytes to allocate for a request of `size` on its hooked paths (a
 * fast-path miss, calloc, realloc), so that they use the class malloc's fast path does for the
 * same size: that of its direct-table word plus one byte (page.c's direct_words_secure), which
 * leaves at least 8 canary bytes. With the request + 1 alone, a size one below a class size
 * (1 to 7, 23, 1023...) took a class of its own that the direct table never pointed at, and
 * every malloc of it missed the fast path. Above the table: the request + 1. */
static inline size_t _fg_secure_size(size_t size) {
  return size <= FG_DIRECT_MAX ? ((size + 7) & ~(size_t)7) + 1 : size + 1;
}
size_t _fg_hook_requested(const void *p);  /* the request of a live block (SIZE_MAX: unknown) */

/* ---- stacks.c: call stacks, captured, interned and named ---------------------------------- */
#define FG_STACK_FRAMES 16
#define FG_NO_STACK UINT32_MAX
uint64_t _fg_mix(uint64_t x);       /* a 64-bit hash finalizer, for the tables keyed by address */
bool _fg_stacks_load(const char *who); /* from the constructor: libunwind; false without (who: warn) */
uint32_t _fg_stack_capture(int skip);  /* the caller's stack, interned; FG_NO_STACK if none */
size_t _fg_stack_count(void);          /* stacks interned so far: ids are below it */
void _fg_stacks_lock(bool lock);       /* fork */
typedef struct fg_frame_s { /* a frame, named: its module, offset there, dynamic symbol */
  const char *module, *symbol;
  uintptr_t offset;
  bool ours; /* in libfrugal itself */
} fg_frame_t;
/* The frames of a stack, without frugal's own at the top; out has FG_STACK_FRAMES entries. */
size_t _fg_stack_frames(uint32_t stack, fg_frame_t *out);

/* ---- sample.c: the allocation sampler and the heap profile -------------------------------- */
void _fg_sample_init(void);  /* after options and the mode */
void _fg_sample_start(void); /* from the library constructor: loads the unwinder for profiles */
/* What an allocation counts beyond its size: guarded sampling picks one allocation in N,
 * which a count of bytes alone cannot (a program of 16-byte blocks would hardly ever trip). */
#define FG_SAMPLE_CHARGE 64
/* Count an allocation of `size` down from the heap's sample_left; true when it went below
 * zero. On x86-64 an add folded into a lea, one subtract from memory and a jump on its sign
 * (compilers load, subtract, store and test). */
static inline bool _fg_sample_due(fg_heap_t *heap, size_t size) {
#if defined(__x86_64__) && defined(__GNUC__)
  __asm__ goto("subq %1, %0\n\tjs %l[due]" : "+m"(heap->sample_left) : "r"(size + FG_SAMPLE_CHARGE) : "cc" : due);
  return false;
due:
  return true;
#else
  return (heap->sample_left -= (int64_t)(size + FG_SAMPLE_CHARGE)) < 0;
#endif
}
/* After _fg_sample_due: sets the next countdown; a sampled allocation, served as a large
 * block, or NULL: take the plain path. */
void *_fg_sample_alloc(size_t size, size_t align, bool zero);
/* A page's sample_left: a plain page's blocks before its next trip (0 to FG_LEFT_SPAN - 1);
 * the inline ledger's, FG_LEFT_LEDGER plus as many, so that each of its mallocs finds the
 * word below zero and is counted in the cold block, which tells it by the range alone;
 * secure mode's, FG_LEFT_SECURE, set again by each malloc (secure mode samples nothing). */
#define FG_LEFT_SPAN ((int32_t)1 << 29)
#define FG_LEFT_LEDGER (-((int32_t)1 << 30))
#define FG_LEFT_SECURE (INT32_MIN + ((int32_t)1 << 20))
/* malloc's fast path counts down the page it pops from instead (a Poisson process per page
 * at the same rate per byte adds up to the heap's), in blocks: one more block in use and one
 * less to the trip, in one add to memory (types.h's used_left); true when the count went
 * below zero, or was already (a flagged page: FG_LEFT_LEDGER, FG_LEFT_SECURE). */
static inline bool _fg_page_charge(fg_page_t *page) {
  const uint64_t add = 1 - ((uint64_t)1 << 32);
#if defined(__x86_64__) && defined(__GNUC__)
  __asm__ goto("addq %1, %0\n\tjs %l[due]" : "+m"(page->used_left) : "r"(add) : "cc" : due);
  return false;
due:
  return true;
#else
  return (int64_t)(page->used_left += add) < 0;
#endif
}
void _fg_sample_page_init(fg_page_t *page); /* the countdown of a page starting in a class */
/* A page's countdown ran out (a plain page's or the ledger's): sets the next; a sampled
 * allocation of `size` (aligned to `align`: 0 for malloc's own) to serve in place of the
 * block popped, or NULL. */
void *_fg_sample_page(fg_page_t *page, size_t size, size_t align);
void _fg_sample_free(fg_segment_t *s); /* the large block s was a sample */
void _fg_sample_lock_all(bool lock);   /* fork: the sampler's, stack table's and guard's locks */

/* ---- guard.c: guarded slots, and the fault handler that reports on them ------------------ */
void _fg_guard_start(void); /* from the constructor: installs the SIGSEGV handler */
void *_fg_guard_alloc(size_t size, bool zero); /* size <= a page, malloc's alignment; NULL: no slot */
/* The region of guarded slots is a large segment marked guarded: large.c hands it its blocks. */
void _fg_guard_free(fg_segment_t *s, const void *p);
size_t _fg_guard_usable(fg_segment_t *s, const void *p); /* aborts unless p is a live block */
bool _fg_guard_owns(fg_segment_t *s, const void *p);
void _fg_guard_lock(bool lock);

/* ---- stats.c: the ledger ------------------------------------------------------------------ */
void _fg_stats_init(void); /* after options and the mode */
void _fg_stats_start(void); /* from the library constructor: loads the unwinder for leaks */
void _fg_ledger_alloc(void *p, size_t size);
size_t _fg_ledger_free(void *p); /* returns the block's requested size (0: unknown) */
/* With FG_MODE_LEDGER_FAST, fg_malloc and fg_free count inline (their pages carry side arrays
 * from the start), and so do the other entry points for a block they pop from a page
 * (alloc.c); the rest of their ways take the hooks. */
void _fg_ledger_sample(void); /* peaks and timeline, when due: sample.c's countdown calls it */

/* The ledger row of page's class in heap's ledger. */
static inline _Atomic(uint64_t) *_fg_ledger_row(fg_heap_t *heap, const fg_page_t *page) {
  return (_Atomic(uint64_t) *)((uintptr_t)heap + page->ledger_row);
}

/* Count block b of `page`, handed out for `size` (0 only where _fg_ledger_rebucket follows),
 * into heap's ledger: the block's side-array entry and two adds. stats.c derives the rest
 * when merging: the handed-out bytes (class size times count) and the histogram (a request of
 * class c falls in bucket c + 1; the hooks and _fg_ledger_rebucket count the others as
 * corrections). The sampler's countdown, which every
 * allocation runs anyway, says when to look at the clock for peaks (sample.c). */
static inline void _fg_ledger_count_alloc(fg_heap_t *heap, fg_page_t *page, void *b, size_t size) {
  page->requested[_fg_block_index(page, (uintptr_t)b - (uintptr_t)page->start)] = (uint32_t)size + 1;
  _Atomic(uint64_t) *row = _fg_ledger_row(heap, page);
  _fg_bump(&row[FG_F_allocations], 1);
  _fg_bump(&row[FG_F_bytes_requested], size);
}

/* Block b of page, counted by _fg_ledger_count_alloc for a request of `size` whose histogram
 * bucket may not be the page's class + 1 (an aligned request from a larger class, or 0):
 * moves the count to its bucket. Returns b, for a tail call (a call that returns cost the
 * aligned calls' fast path a frame). */
void *_fg_ledger_rebucket(const fg_page_t *page, size_t size, void *b);

/* Count the free of block idx of `page` into heap's ledger. The entry stays as it is: the
 * block's next hand-out records it again before anything reads it (page.c's
 * _fg_page_requested_slot), and free's checks turn a double free away before it gets here
 * (ledger on, malloc/free of 128 B: 2 % of the time was this store). */
static inline void _fg_ledger_count_free(fg_heap_t *heap, fg_page_t *page, size_t idx) {
  uint32_t stored = page->requested[idx];
  if (stored == 0) return; /* handed out uncounted: see stats.c's _fg_ledger_alloc */
  _Atomic(uint64_t) *row = _fg_ledger_row(heap, page);
  _fg_bump(&row[FG_F_frees], 1);
  _fg_bump(&row[FG_F_freed_requested], stored - 1);
}

fg_stats_t *_fg_stats_snapshot(void); /* fg_stats_get into a mapping of its own (NULL: none) */
void _fg_stats_snapshot_free(fg_stats_t *st);
size_t _fg_stats_timeline(fg_stats_sample_t *out); /* out: FG_STATS_TIMELINE_MAX entries */
typedef struct fg_site_s {                       /* blocks grouped by the stack that allocated them */
  uint64_t bytes, count;
  uint32_t stack;
} fg_site_t;
/* Live blocks (FRUGAL_LEAKS) by call site, the top `max` by bytes; returns how many. */
size_t _fg_leak_sites(fg_site_t *out, size_t max, uint64_t *total_bytes, uint64_t *total_count);

/* ---- stats_report.c: the reports' formatter, also used by the profile writer -------------- */
typedef struct fg_writer_s {
  char *buf;
  size_t size, len;
  int fd; /* >= 0: flush to it when the buffer fills */
} fg_writer_t;
__attribute__((format(printf, 2, 3))) void _fg_w_printf(fg_writer_t *w, const char *fmt, ...);
void _fg_w_jstr(fg_writer_t *w, const char *s); /* a JSON string */
void _fg_w_frames(fg_writer_t *w, uint32_t stack); /* a JSON array of a stack's frames */
void _fg_w_flush(fg_writer_t *w);
void _fg_expand_pid(const char *path, char *out, size_t size); /* "%p" -> the pid */

void _fg_heaps_foreach(void (*fn)(fg_heap_t *heap, void *arg), void *arg);

/* ---- free.c: shared by realloc, usable-size and secure mode -------------------------------- */
/* The waste bound on every path: a block of `usable` bytes handed out for `size` leaves at
 * most usable / 8 + 15 bytes unused, as malloc's classes do (at most 12.5 % over the request
 * from 128 B up, 16-byte steps below) and realloc keeps (_fg_realloc_stays). A sized free
 * whose size leaves more is a wrong size (policy: docs/api.md), and so is one bigger than the
 * block: usable - size then wraps (not for sizes 2^61 past the block, which no object has).
 * `slack`: what else the block may hold, beyond the bound: a large block's page rounding. */
static inline bool _fg_wrong_size(size_t size, size_t usable, size_t slack) {
  return (usable - size) * 8 > usable + 120 + 8 * slack;
}
/* The same for a page's block (slack 0), from the page's size_slack, (block_size + 120) / 8:
 * x * 8 > y is x > y / 8 rounded down, and no multiply to wrap. A page of no class (block
 * size 0) refuses every size. */
static inline bool _fg_page_wrong_size(const fg_page_t *page, size_t size) {
  return (size_t)page->block_size - size > page->size_slack;
}
/* realloc keeps a small block for a smaller size if it stays within 12.5 % of unused bytes,
 * or in its class (below 128 B, where classes step by 16); else it moves (glibc shrinks in
 * place, and a generous allocation trimmed by realloc kept up to 2 x its bytes). */
static inline bool _fg_realloc_stays(size_t size, size_t usable, uint32_t class_idx) {
  return size <= usable && ((usable - size) * 8 <= usable || _fg_class_of(size) == class_idx);
}
/* A flagged page (FG_USED_SLOW) after a free: out of the full list, and retired if empty. */
void _fg_page_unflag(fg_page_t *page);
/* The page of a live small block (NULL for a large one, *seg set either way), or abort with
 * the misuse found: not frugal's, interior, freed. */
fg_page_t *_fg_checked_page(const void *p, fg_segment_t **seg);
fg_page_t *_fg_plain_block_page(const void *p); /* see free.c */

#endif
