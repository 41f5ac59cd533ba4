/* heap.c — thread heaps: each thread allocates from its own, reached through one TLS pointer,
 * so malloc and a local free take no lock and no atomic. Heaps are never unmapped (a page's
 * heap pointer is always safe to follow): an exited thread's heap is abandoned, then adopted. */
#define _GNU_SOURCE
#include "internal.h"

#include <errno.h>
#include <pthread.h>

/* A thread that has not allocated yet points at the empty heap, whose direct table leads every
 * size to a page with no free block: its first malloc takes the slow path, which sets its heap
 * up, so the fast path never tests for initialisation. */
fg_page_t _fg_page_empty;
fg_heap_t _fg_heap_empty = {.direct = {[0 ... FG_DIRECT_COUNT - 1] = &_fg_page_empty}};
__thread fg_heap_t *_fg_heap_tls __attribute__((tls_model("initial-exec"))) = &_fg_heap_empty;

static pthread_mutex_t heaps_lock = PTHREAD_MUTEX_INITIALIZER;
static fg_heap_t *heaps_all, *heaps_abandoned;
/* Heaps whose thread lives (owned): when none is left, the program's threads that frugal
 * knows of have all ended, and the purger looks whether it is the last thread (purger.c). */
static _Atomic size_t heaps_owned;
static uint8_t *heap_chunk;
static size_t heap_chunk_left;
static pthread_key_t heap_key;
static pthread_once_t heap_key_once = PTHREAD_ONCE_INIT;

static void make_key(void) { pthread_key_create(&heap_key, _fg_heap_thread_done); }

/* Heap structs (each with its ledger behind it) come from a chunk of their own, carved under
 * heaps_lock; never given back. Each starts a page: what its thread writes is then one page
 * (64-byte steps put most heaps across 2 or 3). */
static fg_heap_t *heap_new_locked(void) {
  size_t size = fg_align_up(sizeof(fg_heap_ledger_t), FG_OS_PAGE);
  if (heap_chunk_left < size) {
    heap_chunk = _fg_os_alloc_aligned(64 * size, FG_OS_PAGE);
    if (heap_chunk == NULL) return NULL;
    heap_chunk_left = 64 * size;
  }
  fg_heap_t *heap = (fg_heap_t *)heap_chunk;
  heap_chunk += size;
  heap_chunk_left -= size;
  for (size_t i = 0; i < FG_DIRECT_COUNT; i++) heap->direct[i] = &_fg_page_empty;
  heap->key = _fg_secret ^ ((uintptr_t)heap * 0xbf58476d1ce4e5b9u);
  heap->next_all = heaps_all;
  heaps_all = heap;
  return heap;
}

/* The calling thread takes a heap: `want` if it is still abandoned (else none), or, with
 * want NULL, the heap abandoned last, or a new one. */
static fg_heap_t *heap_take(fg_heap_t *want) {
  _fg_process_init();
  pthread_once(&heap_key_once, make_key);
  pthread_mutex_lock(&heaps_lock);
  fg_heap_t **at = &heaps_abandoned;
  while (want != NULL && *at != NULL && *at != want) at = &(*at)->next_abandoned;
  fg_heap_t *heap = *at;
  if (heap != NULL)
    *at = heap->next_abandoned;
  else if (want == NULL)
    heap = heap_new_locked();
  if (heap != NULL) {
    heap->owned = true;
    atomic_fetch_add_explicit(&heaps_owned, 1, memory_order_relaxed);
  }
  pthread_mutex_unlock(&heaps_lock);
  if (heap == NULL) return NULL;
  /* An adopted heap keeps its decay schedule: a chain of short threads passing one heap on
   * then decays it like one long-lived thread would (a new clock on every adoption would
   * postpone its passes for ever). */
  if (heap->decay_at == 0) heap->decay_at = _fg_clock_ms() + (uint64_t)_fg_option(FG_OPTION_DECAY_MS);
  _fg_heap_tls = heap;
  pthread_setspecific(heap_key, heap);
  return heap;
}

fg_heap_t *_fg_heap_init_thread(void) { return heap_take(NULL); }

/* Set when this thread's exit has begun (its heap abandoned): a free from a later TLS
 * destructor then takes no heap just to count itself (_fg_heap_counting). */
static __thread bool exiting __attribute__((tls_model("initial-exec")));

/* A thread that only frees (a consumer) has no heap; with the ledger on it takes one for its
 * counters. Without one it counted into the shared orphan ledger through the hooks (locate,
 * atomic adds on lines every such thread writes: 67 instructions a free): the lab's 2-thread
 * cross-thread 1 KiB cell took 1.66 times its CPU time with the ledger on, 1.05 with a heap. */
fg_heap_t *_fg_heap_counting(void) {
  fg_heap_t *heap = _fg_heap();
  if (heap != &_fg_heap_empty) return heap;
  return exiting ? NULL : _fg_heap_init_thread();
}

/* A thread with no heap yet whose free lands in an exited thread's heap takes that heap,
 * rather than the one abandoned last at its first malloc: its frees of the dead thread's
 * blocks are then its own, and its mallocs reuse them at once. Threads that take over the
 * blocks a dead one left (the lab's takeover shape) otherwise freed into one heap and
 * carved in another, whose thread freed into the first: 3.2 MB peak against glibc's 2.5. */
bool _fg_heap_adopt(fg_heap_t *heap) { return !exiting && heap_take(heap) != NULL; }

static void decay_if_due(fg_heap_t *heap);
static void page_release(fg_heap_t *heap, fg_page_t *page);
static inline void pages_wake(fg_heap_t *heap, size_t take);

/* An exited thread's heap is left whole for the next thread to adopt in one step; meanwhile
 * other threads' frees into it still land, and a heap nobody adopts within the decay time is
 * collected whole (the purger, or a live thread's decay pass). */
static void abandon(fg_heap_t *heap, uint64_t now) {
  heap->owned = false;
  atomic_fetch_sub_explicit(&heaps_owned, 1, memory_order_relaxed);
  heap->abandoned_at = now;
  heap->next_abandoned = heaps_abandoned;
  heaps_abandoned = heap;
}

/* Empty pages an exiting thread leaves to the next one: the 2 MiB a running thread may keep
 * (KEPT_MAX, below). The churn test (10,000 threads, 8 at a time, 0.6 MiB each) peaked at
 * 29.7 MiB keeping them all (glibc 25.3; 8.5 releasing all, at 3 times the CPU time), 17.6
 * keeping 2 MiB, 25.2 keeping 4; the lab's storm cell, 5.6 -> 4.5 MB (glibc 4.4-5.6). */
#define EXIT_KEEP ((size_t)2 << 20)

/* Release the empty pages of an unowned heap beyond `keep` carved bytes of them (smaller
 * classes first), gathering other threads' frees first; the slots they free, and the
 * segments that empty, are given back. Pages of the classes above FG_MEDIUM_MAX stay: each
 * is a segment of its own, given back whole and mapped again by the next thread (bench/
 * storm.c, blocks up to 255 KB: 10,700 madvise calls of 4 MiB, 3 times the CPU time), and
 * its carved bytes say little of what is resident (a block's pages are touched where the
 * program writes). The decay passes give them back. */
static void release_empty_beyond(fg_heap_t *heap, size_t keep, uint64_t now) {
  size_t kept = 0;
  bool released = false;
  pages_wake(heap, SIZE_MAX);
  for (size_t c = 0; c < FG_CLASS_COUNT; c++) {
    for (fg_page_t *page = heap->queues[c].first, *next; page != NULL; page = next) {
      next = page->next;
      if (page->block_size > FG_MEDIUM_MAX) break; /* a queue holds pages of one class */
      _fg_page_collect(page);
      if (_fg_page_used(page) != 0) continue;
      size_t bytes = (size_t)page->capacity * page->block_size;
      if (kept + bytes <= keep) {
        kept += bytes;
      } else {
        page_release(heap, page);
        released = true;
      }
    }
  }
  if (released) _fg_segment_purge_expired(heap, now, true);
}

/* Thread exit (pthread key destructor): the heap is abandoned as it is, pages, free blocks,
 * kept pages and free slots still committed, for the next thread to adopt whole in one step
 * (LIFO: the heap that left last, the warmest). Giving them back at exit cost the lab's
 * storm (rounds of 2 short threads) 15 madvise calls and 66 page faults per thread, half its
 * CPU time: the next thread faulted the same pages in again. What the exit gives back is the
 * empty pages beyond EXIT_KEEP. (Giving back the big free blocks that stayed free through
 * the thread's whole life too took the storm's RSS 5.6 -> 4.8 MB but its time 85 -> 123 ms:
 * a madvise with the other thread running costs an IPI.) A heap that nobody adopts within
 * the decay time is collected whole by the purger or a live thread's decay pass
 * (collect_abandoned_locked), so memory comes back as it would from an idle thread.
 * A later free from this thread (another TLS destructor) goes the remote way; a later
 * malloc adopts a heap again and re-arms this destructor. */
fg_warm void _fg_heap_thread_done(void *arg) {
  fg_heap_t *heap = arg;
  if (heap == NULL || heap == &_fg_heap_empty) return;
  _fg_heap_tls = &_fg_heap_empty;
  exiting = true;
  uint64_t now = _fg_clock_ms();
  uint8_t was = _fg_returning_for(FG_BY_DECAY);
  heap->owned = false; /* what empties now goes back whole (segment.c) */
  release_empty_beyond(heap, EXIT_KEEP, now);
  _fg_returning_end(was);
  /* Its cached large blocks go to the process cache, where any thread finds them (no OS
   * call), and what it had live in large blocks is now anybody's. */
  heap->large_live = 0;
  _fg_large_heap_collect(heap, now, true);
  pthread_mutex_lock(&heaps_lock);
  abandon(heap, now);
  pthread_mutex_unlock(&heaps_lock);
  _fg_purger_wake(); /* it gives the heap back if nobody adopts it */
  if (atomic_load_explicit(&heaps_owned, memory_order_relaxed) == 0) _fg_threads_ended();
}

size_t _fg_heaps_owned(void) { return atomic_load_explicit(&heaps_owned, memory_order_relaxed); }

/* ---- moving pages between queues ----------------------------------------------------------- */

/* A page with no free block goes to the full list, so the allocation path never walks it
 * again; the full bit in its thread-free word makes the next remote free wake it up. A
 * buffer's page (one block) stays when that block is freed: see _fg_tf_emptied. */
static bool page_to_full(fg_heap_t *heap, fg_page_t *page) {
  uintptr_t expected = 0, full = FG_TF_FULL | (page->regrown ? FG_TF_STAYS : 0);
  _fg_lock(&heap->lock);
  bool went = atomic_compare_exchange_strong_explicit(&page->xthread_free, &expected, full, memory_order_acq_rel,
                                                      memory_order_acquire); /* else blocks came back meanwhile */
  if (went) {
    page->freed_at = _fg_clock_ms(); /* full since: see _fg_heap_page_mailed */
    _fg_queue_remove(heap, &heap->queues[page->class_idx], page);
    _fg_queue_push_back(heap, &heap->full, page);
    _fg_page_flag_set(page, FG_USED_FULL);
  }
  _fg_unlock(&heap->lock);
  return went;
}

/* Under the lock: a full or woken page back to its class queue, its stack to be gathered as
 * any page's. False if the frees of other threads emptied it meanwhile: the last of them is
 * giving it back (_fg_heap_page_mailed), and it stays where it is until then. */
static bool page_unfull_locked(fg_heap_t *heap, fg_page_t *page) {
  uintptr_t tf = atomic_load_explicit(&page->xthread_free, memory_order_relaxed);
  do {
    if (_fg_tf_emptied(page, tf)) return false;
  } while (!atomic_compare_exchange_weak_explicit(&page->xthread_free, &tf, tf & ~FG_TF_FLAGS, memory_order_acq_rel,
                                                  memory_order_relaxed));
  _fg_queue_remove(heap, tf & FG_TF_WOKEN ? &heap->woken : &heap->full, page);
  _fg_page_flag_clear(page, FG_USED_FULL);
  page->freed_at = 0;
  _fg_queue_push_back(heap, &heap->queues[page->class_idx], page);
  return true;
}

/* The owner freed into a full page: it holds a block no other thread freed, so the page cannot
 * be emptied by them and comes back. */
void _fg_heap_page_unfull(fg_page_t *page) {
  fg_heap_t *heap = page->heap;
  _fg_lock(&heap->lock);
  page_unfull_locked(heap, page);
  _fg_unlock(&heap->lock);
}

/* Other heaps are short of pages: one of them, not this one, found no committed slot of its own
 * nor a page or slot to take from the others (page_from_others), and took fresh memory (an
 * uncommitted slot, or a new segment) less than SHORT_WINDOW_MS ago. Then a page that other
 * threads emptied goes back to its segment sooner, where that heap borrows its slot instead of
 * taking fresh memory: the free that empties it gives it back after RESCUE_SHORT_MS full, not
 * RESCUE_MS (_fg_heap_page_mailed), and its owner taking it back gives it back too
 * (pages_wake). 4 producers whose 1 KiB blocks 4 consumers free (the lab's cross shape), peak
 * RSS less what the queue held, median and worst of 8 runs: 39.6 and 48.2 MB with neither,
 * 28.3 and 33.2 with the hand-over alone, 24.1 and 30.1 with both (glibc 17-25). Not while the
 * heap taking fresh memory is the page's own: 1 producer and 1 consumer then only carved their
 * pages again (CPU time 0.35 -> 0.37-0.46 s). */
#define RESCUE_SHORT_MS 2
#define SHORT_WINDOW_MS 50
static _Atomic(uint64_t) fresh_taken_at;
static _Atomic(fg_heap_t *) fresh_taken_by;
static bool others_short(const fg_heap_t *heap) {
  return _fg_clock_ms() - atomic_load_explicit(&fresh_taken_at, memory_order_relaxed) < SHORT_WINDOW_MS &&
         atomic_load_explicit(&fresh_taken_by, memory_order_relaxed) != heap;
}

/* Woken pages back at the end of their queues, where page_find gathers their stacks in turn:
 * every full page another thread freed into is woken (by the first such free), or the full
 * list is flagged (full_freed), so page_find, a decay pass and a thread's exit look no
 * further. A buffer's page, its block freed, retires as if its owner had freed it (for the
 * next buffer); a page whose blocks all came back goes back to its segment while other heaps
 * are short (`share`). Not every page left empty: retired, such pages were kept and carved
 * again in address order (1 producer, 1 consumer: 0.40 -> 0.50 s CPU; 4 and 4: 0.46 -> 0.98),
 * and even not carved again they cost 12 % more CPU (0.35 -> 0.40 s) than gathered where they
 * are. At most RETIRES_MAX a call: they go after the lock; the rest wait for the next call.
 * The slow path takes back `take` pages it will allocate from, TAKE_BACK_PAGES, the others
 * stay woken: their blocks go on coming back, and there a page they empty goes back to its
 * segment or to a heap that needs one (_fg_heap_page_mailed, page_handover). Taken back all
 * at once, they waited behind the page in use, out of every other heap's reach as their
 * blocks came back: 4 producers whose 1 KiB blocks 4 consumers free each held 80-220 such
 * pages in their class queue, nearly every block of them freed, while another producer mapped
 * segments. Peak RSS less what the queue held, median and worst of 8-14 runs: 24-28 and 28-38
 * MB before, 19-20 and 22-24 after (one run in 30: 36); beside a busy loop a core, 42 and 46
 * before, 19 and 24 after. A decay pass or a collection takes them all. */
#define RETIRES_MAX 16
#define TAKE_BACK_PAGES 1
static bool pages_unfull_list(fg_heap_t *heap, fg_page_queue_t *q, fg_page_t **empty, size_t *n, bool share,
                              size_t *take) {
  for (fg_page_t *page = q->first, *next; page != NULL; page = next) {
    next = page->next;
    if (*n == RETIRES_MAX || *take == 0) return false;
    uintptr_t tf = atomic_load_explicit(&page->xthread_free, memory_order_relaxed);
    bool all = share && _fg_tf_count(tf) == atomic_load_explicit(&page->capacity, memory_order_relaxed);
    if (_fg_tf_top(tf) == NULL || !page_unfull_locked(heap, page)) continue;
    bool gather = page->regrown || all;
    if (gather) _fg_page_collect(page);
    if (gather && _fg_page_used(page) == 0)
      empty[(*n)++] = page;
    else
      (*take)--; /* in its class queue, for the owner */
  }
  return true;
}
static fg_noinline void pages_wake_some(fg_heap_t *heap, size_t take) {
  fg_page_t *empty[RETIRES_MAX];
  size_t n = 0;
  _fg_lock(&heap->lock);
  atomic_store_explicit(&heap->any_woken, false, memory_order_relaxed);
  bool full = atomic_exchange_explicit(&heap->full_freed, false, memory_order_relaxed), share = others_short(heap);
  if (!pages_unfull_list(heap, &heap->woken, empty, &n, share, &take) ||
      (full && !pages_unfull_list(heap, &heap->full, empty, &n, share, &take))) {
    atomic_store_explicit(&heap->any_woken, true, memory_order_relaxed); /* the rest next time */
    atomic_store_explicit(&heap->full_freed, full, memory_order_relaxed);
  }
  _fg_unlock(&heap->lock);
  /* A retire ticks, and a decay pass it ran would release the empty pages still in the array
   * (they sit in their class queues), which the loop then read and released again: a SIGSEGV
   * in the stress test once their segment was unmapped. No pass until the loop is done. */
  uint64_t decay_at = heap->decay_at;
  heap->decay_at = UINT64_MAX;
  for (size_t i = 0; i < n; i++) {
    if (empty[i]->regrown)
      _fg_heap_page_retire(empty[i]);
    else
      page_release(heap, empty[i]);
  }
  heap->decay_at = decay_at;
}
/* The test first, apart: with the body's frame set up before it, a look with nothing woken
 * took 38 instructions, not 8 (a thread's exit looks too). */
static inline void pages_wake(fg_heap_t *heap, size_t take) {
  if (atomic_load_explicit(&heap->any_woken, memory_order_acquire)) pages_wake_some(heap, take);
}

/* Another thread freed into a full page. The first such free moves it to the woken list, which
 * the owner's next slow path looks at before it starts a page; or, when the heap's lock is
 * taken, flags the full list for that look instead (a free never waits for the owner, which
 * may be off the CPU holding it: 2 threads beside a busy loop a core, 0.31 s against 0.33
 * waiting). The free that left no block of it in use gives it back to its segment, whatever
 * its owner is doing: the owner holds no block of it, and its malloc never looks at a full
 * page. A thread that filled pages, handed their blocks to another and then waited (a
 * producer whose queue was drained while it sleeps on something else) otherwise kept them all
 * until it allocated again: 64 MiB of 1 KiB blocks stayed resident however long it slept
 * (tests/purger.c's handoff; now they go back with the decay time). Only a page full for
 * RESCUE_MS (RESCUE_SHORT_MS while others are short: others_short): one emptied sooner has an
 * owner about to take it back, and giving back every such page (1 producer, 1 consumer) cost
 * 40 % more CPU time, each page carved again; such a page STAYS (its owner takes it back as
 * any woken page, or another heap that needs one: page_handover). */
#define RESCUE_MS 8
/* Set when a full page's blocks all came back from other threads while it waited on its
 * owner's woken list (STAYS, below); cleared by a scan that found none (page_from_others). */
static _Atomic(bool) pages_emptied_away;
fg_noinline void _fg_heap_page_mailed(fg_heap_t *heap, fg_page_t *page, uintptr_t tf) {
  bool emptied = _fg_tf_emptied(page, tf);
  if (emptied) {
    atomic_thread_fence(memory_order_acquire); /* the other frees' writes to its blocks first */
    _fg_lock(&heap->lock);
  } else if (!_fg_trylock(&heap->lock)) { /* never wait on the owner: it looks at its full list */
    atomic_store_explicit(&heap->full_freed, true, memory_order_relaxed);
    atomic_store_explicit(&heap->any_woken, true, memory_order_release); /* read with full_freed */
    return;
  }
  if (emptied && _fg_clock_ms() - page->freed_at >= (others_short(heap) ? RESCUE_SHORT_MS : RESCUE_MS)) {
    _fg_queue_remove(heap, tf & FG_TF_WOKEN ? &heap->woken : &heap->full, page);
    atomic_store_explicit(&page->xthread_free, 0, memory_order_relaxed);
    _fg_page_used_set(page, 0);
    _fg_bump(&heap->counts[FG_C_pages_handed_back], 1);
    _fg_unlock(&heap->lock);
    _fg_segment_page_free(page); /* its segment's heap's lock: the page may be lent */
    _fg_purger_wake(); /* its owner may not come back for a decay pass */
    return;
  }
  if (emptied) { /* full for too short a time: its owner takes it back, or another heap (page_handover) */
    tf = atomic_fetch_or_explicit(&page->xthread_free, FG_TF_STAYS, memory_order_relaxed) | FG_TF_STAYS;
    if (!atomic_load_explicit(&pages_emptied_away, memory_order_relaxed))
      atomic_store_explicit(&pages_emptied_away, true, memory_order_relaxed);
  } else /* unless it came back meanwhile (its owner freed into it, or the frees emptied it and its
        * slot was taken again), or another free woke it */
    tf = atomic_load_explicit(&page->xthread_free, memory_order_relaxed);
  if (page->heap == heap && (tf & (FG_TF_FULL | FG_TF_WOKEN)) == FG_TF_FULL && _fg_tf_top(tf) != NULL &&
      !_fg_tf_emptied(page, tf)) {
    atomic_fetch_or_explicit(&page->xthread_free, FG_TF_WOKEN, memory_order_relaxed);
    _fg_queue_remove(heap, &heap->full, page);
    _fg_queue_push_back(heap, &heap->woken, page);
  }
  if (tf & FG_TF_FULL) atomic_store_explicit(&heap->any_woken, true, memory_order_relaxed);
  _fg_unlock(&heap->lock);
}

static void page_release(fg_heap_t *heap, fg_page_t *page) {
  _fg_page_unkeep(heap, page);
  _fg_queue_remove(heap, &heap->queues[page->class_idx], page); /* never a full page's: see callers */
  _fg_segment_page_free(page);
}

/* The owner freed the last block of a page. The page stays in its queue, its blocks still
 * carved, until the decay pass finds it empty for the decay time: a thread that fills and
 * empties pages batch after batch (the lab's seed-4 loop) spent a fifth of its time
 * releasing pages and carving them again. A lone page stays at the front; others go to the
 * back, behind the pages still in use, up to KEPT_MAX bytes of them per heap. Past that the
 * page goes back to its segment at once, where a page of any class can take its slot (and
 * the purger can give it back while the thread is quiet, which it cannot do for a page in a
 * queue: malloc's fast path may be reading it). sqlite3 building and dropping tables kept
 * 868 empty pages this way: 96 MB peak against glibc's 51. */
#define KEPT_MAX ((size_t)2 << 20) /* the lab's seed-4 batch: 1,000 x 1 KiB blocks in 16 pages */
/* A class's extent is counted in 128ths of its kind's page: OS pages for medium pages, 32 KiB
 * for single pages (a segment). */
static size_t extent_unit(size_t c) {
  return (size_t)1 << ((_fg_class_kind(c) == FG_SEG_MEDIUM ? FG_MEDIUM_PAGE_SHIFT : FG_SEGMENT_SHIFT) - 7);
}

/* What a class of big blocks used, for page_take_empty: how far the page that emptied was
 * carved, or the class's earlier extent less 1/16, whichever is more (a class that fills a
 * page and part of another keeps near the full one's; less a quarter, the STL test program
 * faulted 145 k pages against 42 k). At most 128: a whole page. */
static void extent_note(fg_heap_t *heap, const fg_page_t *page) {
  uint8_t *e = &heap->extent[page->class_idx];
  size_t unit = extent_unit(page->class_idx);
  size_t now = ((size_t)page->capacity * page->block_size + unit - 1) / unit, was = *e - *e / 16u;
  if (now > 128) now = 128; /* a medium class on a buffer's single page may have carved more */
  *e = (uint8_t)(now > was ? now : was);
}

/* A kept small page starts again in address order (page.c's _fg_page_recarve) once the heap
 * keeps more empty pages than a core's level-2 cache holds: its free list is in the order of
 * the frees, and a program that frees a structure that big and builds the next one walks it
 * with a cache miss a block (trees of 32-64 B nodes, 8 threads: 65 % of malloc's samples on
 * the popped block's link; D1 read misses 5.2 M against mimalloc's 2.9 M, which carves
 * emptied pages again). Carving is stores in a row. Below that, the list is in cache and
 * cheaper to pop than to carve again (the lab's batch of 1,000 x 128 B, recarved each round:
 * 8 % slower). Secure mode's carving shuffles: left as it is. */
#define RECARVE_KEPT ((size_t)512 << 10)
static bool recarves(const fg_heap_t *heap, const fg_page_t *page) {
  return _fg_class_kind(page->class_idx) == FG_SEG_SMALL && !_fg_secure_on() &&
         atomic_load_explicit(&heap->kept_bytes, memory_order_relaxed) >= RECARVE_KEPT &&
         _fg_tf_top(atomic_load_explicit(&page->xthread_free, memory_order_relaxed)) == NULL;
}

void _fg_heap_page_retire(fg_page_t *page) {
  fg_heap_t *heap = page->heap;
  if (_fg_page_in_full(page)) _fg_heap_page_unfull(page);
  fg_page_queue_t *q = &heap->queues[page->class_idx];
  page->freed_at = 0; /* the decay pass stamps it */
  heap->maybe_empty = FG_MAYBE_EMPTY_ALL;
  if (_fg_class_kind(page->class_idx) != FG_SEG_SMALL) extent_note(heap, page);
  if (_fg_segment_of(page)->kind != _fg_class_kind(page->class_idx)) {
    page_release(heap, page); /* a buffer's single page, in a medium class: for the next buffer */
    return;
  }
  if (q->first == page && page->next == NULL) {
    decay_if_due(heap); /* free() counted this lone retire: it is the 16th */
    return;
  }
  if (atomic_load_explicit(&heap->kept_bytes, memory_order_relaxed) + _fg_page_bytes(page) > KEPT_MAX) {
    page_release(heap, page);
    _fg_purger_wake();
  } else {
    if (page->next != NULL) {
      _fg_queue_remove(heap, q, page);
      _fg_queue_push_back(heap, q, page);
    }
    page->kept = 1;
    _fg_bump(&heap->kept_bytes, _fg_page_bytes(page));
    if (recarves(heap, page)) _fg_page_recarve(page);
  }
  _fg_heap_tick(heap);
}

/* ---- allocation slow path ------------------------------------------------------------------- */

/* The heap carved GROWTH_STEP of blocks from memory never touched or given back: while the
 * program commits more, what it freed and left idle is memory it does not use. Idle cached
 * large blocks give back as much (large.c's _fg_large_trim), and free big blocks idle since the
 * last step give back their pages (page.c's _fg_page_purge_idle: python3 growing lists by
 * realloc through the classes above 64 KiB left 5 MiB of free blocks resident among 0.8 MiB
 * used), and so do free page slots idle since the last step, of the kinds that did not grow in
 * this one (segment.c's _fg_segment_purge_idle: python3 lists growing together, each in a page
 * of its own past 64 KiB, left 5.5 MiB of medium slots resident at the peak, 45.8 -> 41.0-42.0
 * MB against glibc's 41.0). Not of a kind that grew: a FIFO of 128 KiB blocks gave back the
 * single pages it was about to take again, then faulted them in, 12 x slower. A loop that
 * reuses what it frees does not grow, and loses nothing. */
#define GROWTH_STEP ((size_t)1 << 20)
/* So do other threads' free page slots idle for OTHERS_IDLE_MS: a thread's free slots stay
 * committed for it until its decay pass, and while it waits, the threads that run grow into
 * fresh memory, so that what each heap took at its own high point adds up. 4 producers and 4
 * consumers over a 16 MB queue of 1 KiB blocks peaked at 60 MB, each producer's heap holding
 * 2 segments with 125 of their 128 slots free and committed; with this, 39 MB (median of 15
 * runs, 52 without it). Given back sooner (any slot idle at all), 35 MB, but 1.1 GiB went
 * back and was faulted in again over the run, at 1.6 times the CPU time. */
#define OTHERS_IDLE_MS 4
static void others_purge_idle(const fg_heap_t *self, uint64_t now) {
  if (now < OTHERS_IDLE_MS) return;
  pthread_mutex_lock(&heaps_lock);
  for (fg_heap_t *heap = heaps_all; heap != NULL; heap = heap->next_all)
    if (heap != self) _fg_segment_purge_idle(heap, now - OTHERS_IDLE_MS, FG_MAYBE_EMPTY_ALL);
  pthread_mutex_unlock(&heaps_lock);
}
static fg_noinline void grew_by(fg_heap_t *heap, size_t *grown) {
  _fg_purger_grew(); /* memory it may give back one day: before anything is cached, and freed */
  _fg_large_trim(heap, *grown);
  *grown = 0;
  heap->growth_checks++;
  uint8_t was = _fg_returning_for(FG_BY_GROWTH);
  for (size_t c = _fg_class_of(FG_MEDIUM_MAX / 2 + 1); c < FG_CLASS_COUNT; c++)
    for (fg_page_t *page = heap->queues[c].first; page != NULL; page = page->next)
      _fg_page_purge_idle(page, heap->growth_checks);
  uint64_t now = _fg_clock_ms();
  _fg_segment_purge_idle(heap, heap->grew_at, (uint8_t)(FG_MAYBE_EMPTY_ALL & ~heap->grew_kinds));
  others_purge_idle(heap, now);
  heap->grew_at = now;
  heap->grew_kinds = 0;
  _fg_returning_end(was);
}
static void grew(fg_heap_t *heap) { grew_by(heap, &heap->grown); }

/* A large block mapped or grown into fresh memory: the heap grew by it, as by carving (so
 * what sat idle goes back while a program grows big blocks too), counted on its own so that it
 * does not move the steps the carving makes. */
void _fg_heap_grew_large(fg_heap_t *heap, size_t bytes) {
  heap->grown_large += bytes;
  if (heap->grown_large >= GROWTH_STEP) grew_by(heap, &heap->grown_large);
}

/* An empty page of `kind` (c's own, or single for a buffer's page: _fg_heap_alloc_buffer)
 * from the queue of another class, taken out of it (NULL if none). Its
 * blocks are committed, so a class that needs a page takes it before a free slot: python3
 * growing dicts and lists through the classes above 64 KiB left each class an empty page, up
 * to a segment of memory apiece, while the next class faulted in a fresh one (peak RSS 158.6
 * against glibc's 145.9 MB; 151 this way). What the page's old blocks covered beyond what
 * the new class is expected to use goes back as it is taken over: beyond the extent the
 * class's own pages had when they last emptied or were taken over (extent_note; one block
 * for a class with none yet), for a medium page (512 KiB, blocks of 8-64 KiB) only if that is
 * more than a quarter of the page. For a single page (a segment) cut to its first block, the
 * storm had 5.2-5.4 MB, 5.2-6.2 uncut; python3's quick lab cell 41.0 MiB against 41.2, for
 * 1.5 % more CPU in madvise calls: 342 against 19 (the ledger's fresh bytes do not count the
 * pages this faults in again); but 24 buffers grown together by realloc through the single
 * classes gave back and faulted in again 25 MiB a round (tests/pages.c), where their extents
 * keep all but 28 KiB (the storm and python3 the same: their classes hold a block or two).
 * A medium page passed from class to class without this bound keeps resident all that any
 * of them touched (the threads lab's storm: 9.0 MB against 5.2). Kept
 * each by its own class, they cost the STL test program (3 consumer threads, each task 51
 * blocks of one size in 12-20 KiB) 29.5 MB peak RSS for 3.7 MiB live (glibc 8.6, mimalloc
 * 14.9). Only a page carved over
 * half its length is taken: the storm's pages of a block or two, taken and cut down, cost it
 * 10 % more CPU in madvise calls and faults (2,400 against 1,100 calls) and 0.4 MB; and only
 * more than a quarter of a page goes back: the STL program cut pages to each class's extent
 * at 10 % more CPU (42 k page faults against 3 k). Medians of 5, CPU s / peak RSS MB: STL
 * 1.35 / 29.8 -> 1.31 / 17.0, storm 0.25 / 5.0 -> 0.25 / 5.0. The queues are looked at only
 * after a page emptied (a kind's bit in maybe_empty), and only their ends, where retire
 * leaves empty pages. The page remembers its old class, so that a late double free of one
 * of its old blocks is still called one (free.c's misplaced). A small class's lone page
 * emptied since the last decay pass stays its class's: a program that takes sizes in turn
 * (fill and drain, 16-64 B, a size a round) had each class's page taken by the next class and
 * carved again every round, 15 % of its instructions in _fg_page_extend (callgrind: 449 M ->
 * 359 M, mimalloc 296 M); a class done with for good gives its page up at the next pass. */
#define MEDIUM_TAKEN_MIN (((size_t)1 << FG_MEDIUM_PAGE_SHIFT) / 2)
#define MEDIUM_SLACK (((size_t)1 << FG_MEDIUM_PAGE_SHIFT) / 4)
static fg_page_t *page_take_empty(fg_heap_t *heap, size_t c, fg_segment_kind_t kind) {
  if (!(heap->maybe_empty & (1u << kind))) return NULL;
  for (size_t o = _fg_kind_first_class(kind); o < _fg_kind_first_class(kind + 1); o++) {
    fg_page_t *page = heap->queues[o].last;
    if (o == c || page == NULL || _fg_page_used(page) != 0 || _fg_segment_of(page)->kind != kind) continue;
    if (kind == FG_SEG_SMALL && page->prev == NULL && page->freed_at == 0) continue; /* see above */
    size_t covered = (size_t)atomic_load_explicit(&page->capacity, memory_order_relaxed) * page->block_size;
    bool buffer = page->regrown && covered == page->block_size; /* see _fg_heap_regrow */
    if (kind == FG_SEG_MEDIUM && covered < MEDIUM_TAKEN_MIN && !buffer) continue; /* a block or two: stays */
    if (kind != FG_SEG_SMALL && page->prev == NULL) extent_note(heap, page); /* lone: emptied without a retire */
    if (kind != FG_SEG_SMALL && !buffer) {
      size_t keep = _fg_class_size(c);
      size_t used = (size_t)heap->extent[c] * extent_unit(c);
      if (used > keep) keep = used;
      if (covered > keep + (kind == FG_SEG_MEDIUM ? MEDIUM_SLACK : 0)) {
        uint8_t was = _fg_returning_for(FG_BY_TAKEOVER);
        _fg_os_purge(page->start + keep, covered - keep);
        if ((size_t)page->resident * FG_OS_PAGE > keep) page->resident = (uint8_t)(keep / FG_OS_PAGE);
        _fg_returning_end(was);
      }
    }
    _fg_page_unkeep(heap, page);
    _fg_queue_remove(heap, &heap->queues[o], page);
    _fg_bump(&heap->counts[FG_C_pages_reused], 1);
    return page;
  }
  heap->maybe_empty &= (uint8_t)~(1u << kind);
  return NULL;
}

/* A class of blocks over 8 KiB starts a page: the other big classes' pages that sit empty,
 * each the lone page of its class (which stays while empty, heap.c's retire), give their
 * blocks' memory back. Each holds a block or two that the program used once and may not use
 * again: python3 starting up left 20 such pages, 0.7 MB of its 1.2 MB over glibc's peak. A
 * class that comes back carves again, faulting its pages in, and keeps its page from then on
 * (came_back): python3's waves of the same sizes faulted 24 % more without that, 7 % more
 * with it. Pages a medium class carved over half are left whole for another class to take
 * over (page_take_empty). Medians of 5 to 10 runs: python3 on the lab's script 40.9 -> 40.3
 * MB peak RSS (glibc 39.4) in the same CPU time, `python3 -c pass` 14.6 -> 14.3; the threads
 * lab's storm 5.0 -> 4.8 MB for 2 % more CPU (222 -> 226 ms, madvise calls 1,218 -> 1,446).
 * Only every 4th start, python3 kept its 40.9. */
static void lone_pages_uncarve(fg_heap_t *heap, size_t except) {
  if (_fg_secure_on()) return; /* secure mode's blocks carry guards and fills: left alone */
  uint8_t was = _fg_returning_for(FG_BY_GROWTH);
  for (size_t c = _fg_kind_first_class(FG_SEG_MEDIUM); c < FG_CLASS_COUNT; c++) {
    fg_page_t *page = heap->queues[c].first;
    if (c == except || page == NULL || page->next != NULL || page->came_back || page->regrown ||
        _fg_page_used(page) != 0)
      continue;
    size_t carved = (size_t)atomic_load_explicit(&page->capacity, memory_order_relaxed) * page->block_size;
    if (carved == 0 || (_fg_class_kind(c) == FG_SEG_MEDIUM && carved >= MEDIUM_TAKEN_MIN) ||
        atomic_load_explicit(&page->xthread_free, memory_order_relaxed) != 0)
      continue;
    _fg_page_uncarve(page);
  }
  _fg_returning_end(was);
}

/* A page another heap's owner is away from, all its blocks freed by other threads, handed over
 * to `to`, whose slow path then starts it as a slot of its own (one of the first HANDOVER_LOOK
 * of `from`'s woken pages, the longest woken first). The page changes heap, not segment: its
 * slot stays taken, and no block of it is live for a free to race with. Only once it STAYS:
 * until the free that emptied it has decided so under the lock, that free may still give it
 * back (taken before, the page went back to its segment under its new heap). Not a buffer's
 * page (the heap counts those). NULL if none, or if from's lock is taken. */
#define HANDOVER_LOOK 8
static bool handover_ready(fg_page_t *page, fg_segment_kind_t kind) {
  uintptr_t tf = atomic_load_explicit(&page->xthread_free, memory_order_acquire);
  return (tf & (FG_TF_FULL | FG_TF_STAYS)) == (FG_TF_FULL | FG_TF_STAYS) &&
         _fg_tf_count(tf) == atomic_load_explicit(&page->capacity, memory_order_relaxed) && !page->regrown &&
         _fg_segment_of(page)->kind == kind &&
         atomic_compare_exchange_strong_explicit(&page->xthread_free, &tf, 0, memory_order_acquire, memory_order_relaxed);
}
static fg_page_t *page_handover(fg_heap_t *from, fg_heap_t *to, fg_segment_kind_t kind) {
  if (!_fg_trylock(&from->lock)) return NULL;
  fg_page_t *found = NULL, *page = from->woken.first;
  for (int looked = 0; page != NULL && looked < HANDOVER_LOOK && found == NULL; page = page->next, looked++)
    if (handover_ready(page, kind)) found = page;
  if (found != NULL) {
    _fg_queue_remove(from, &from->woken, found);
    _fg_page_used_set(found, 0);
    found->freed_at = 0;
    found->heap = to;
    _fg_bump(&to->counts[FG_C_pages_handed_over], 1);
  }
  _fg_unlock(&from->lock);
  return found;
}

/* A heap with no committed free slot of its own takes what other heaps leave idle before it
 * touches fresh memory (a slot of its own never or no longer committed, a new segment): a slot
 * freed with its memory still committed, lent (segment.c), else a page handed over. Without
 * this, 4 producers whose blocks 4 consumers freed (the lab's cross shape, 1 KiB) each kept the
 * pages of its own busiest moment, 150-210 pages of 64 KiB, mostly emptied and waiting on the
 * woken list while their thread waited for room in the queue, as the others carved fresh ones
 * (numbers at others_short). Looked at only when the heap had no free slot at all, while its
 * own slots were uncommitted the others' emptied pages still waited (250-530 pages, 16-33 MiB,
 * every block of them freed), and peak RSS less what the queue held, median and worst of 4
 * runs, was 17.4 and 18.7 MB (beside a busy loop a core: 22.4 and 26.3); looked at first, 10.4
 * and 11.5 (8.4 and 12.2; glibc 13.8-16.3). Each scan takes no lock that is held (an owner may
 * be off the CPU), and runs only while a hint says another heap may have one. */
static fg_page_t *page_from_others(fg_heap_t *heap, fg_segment_kind_t kind) {
  bool lend = _fg_segment_lendable(), handover = atomic_load_explicit(&pages_emptied_away, memory_order_relaxed);
  if (!lend && !handover) return NULL;
  fg_page_t *page = NULL;
  pthread_mutex_lock(&heaps_lock);
  for (fg_heap_t *h = heaps_all; lend && h != NULL && page == NULL; h = h->next_all)
    if (h != heap) page = _fg_segment_slot_lend(h, kind, heap);
  if (lend && page == NULL) _fg_segment_lendable_none();
  for (fg_heap_t *h = heaps_all; handover && h != NULL && page == NULL; h = h->next_all)
    if (h != heap) page = page_handover(h, heap, kind);
  if (handover && page == NULL) atomic_store_explicit(&pages_emptied_away, false, memory_order_relaxed);
  pthread_mutex_unlock(&heaps_lock);
  return page;
}

static fg_page_t *page_fresh(fg_heap_t *heap, size_t c, fg_segment_kind_t seg) {
  fg_page_t *page = page_take_empty(heap, c, seg);
  /* Not when a buffer in a medium class takes a single page: a string grown past 8 KiB and
   * freed took 30 % longer (155 against 118 ns), 15 of its 40 instructions a class scanned. */
  if (_fg_class_kind(c) == seg && seg != FG_SEG_SMALL) lone_pages_uncarve(heap, c);
  size_t prev = page != NULL ? page->class_idx + 1u : 0;
  if (page == NULL && seg != FG_SEG_SINGLE) { /* memory still committed, its own or others' */
    page = _fg_segment_page_alloc(heap, seg, FG_SLOT_COMMITTED);
    if (page == NULL) page = page_from_others(heap, seg);
    if (page == NULL) { /* fresh memory to touch: other heaps' pages that empty go back sooner */
      atomic_store_explicit(&fresh_taken_at, _fg_clock_ms(), memory_order_relaxed);
      atomic_store_explicit(&fresh_taken_by, heap, memory_order_relaxed);
    }
  }
  if (page == NULL) page = _fg_segment_page_alloc(heap, seg, FG_SLOT_OR_MAP);
  if (page == NULL) { /* out of memory: give back everything cached, try again */
    uint8_t was = _fg_returning_for(FG_BY_OOM);
    _fg_event(1, "out of memory: caches given back, retrying");
    _fg_collect_all(heap, true);
    _fg_returning_end(was);
    page = _fg_segment_page_alloc(heap, seg, FG_SLOT_OR_MAP);
    if (page == NULL) return NULL;
  }
  _fg_page_init(page, heap, c);
  page->prev_class = (uint8_t)prev;
  _fg_page_extend(page);
  _fg_queue_push_front(heap, &heap->queues[c], page);
  return page;
}

/* realloc growing a block of 8 KiB or more that is its page's only carved block, held by its
 * owner: the page takes the bigger class, and the block grows where it is. A medium page
 * takes medium classes only; a single page (a segment: a buffer's page, _fg_heap_alloc_buffer)
 * any class over 8 KiB that fits it. A
 * buffer grown by realloc otherwise walks every class above it, a copy and a block left in
 * each (python3's json.dumps output: 30 classes from 10 KiB to 512 KiB; a loop growing a
 * buffer by 4 KiB to 512 KiB and freeing it took 390 us a round and 228 page faults against
 * glibc's 11 us and none). Freed, such a page (`regrown`) waits for the next buffer, which
 * takes it whatever its class (page_take_empty, kept_bytes counting its one block), and is
 * not uncarved meanwhile. The growth counts as carving would (grew()): the program commits
 * more, and what it left idle goes back. python3 on the lab's footprint script, medians of 7:
 * peak RSS 39.35 -> 38.96 MiB (glibc 38.45; counting only growth into fresh memory, 39.51:
 * its idle cached large blocks stayed), the same CPU, 13 % fewer page faults. */
/* A buffer's page is address space for one block: a segment (4 MiB; a lone medium page grown
 * in place, 512 KiB). Past 256 such pages (1 GiB) buffers share pages again: 2,000 buffers
 * each grown to 100 KiB and kept took 8 GiB of address space, what a ulimit -v or a strict
 * overcommit refuses. */
#define BUFFERS_MAX 256
bool _fg_heap_regrow(fg_page_t *page, const void *p, size_t size) {
  fg_heap_t *heap = _fg_heap();
  if (page->heap != heap) return false; /* first: another thread's page's words are its owner's */
  /* One block live and no flag but FULL (no ledger, no secure mode): a buffer's own page sits
   * in the full list (_fg_heap_alloc_buffer) and stays there. */
  bool full = page->used == (1u | FG_USED_FULL | FG_USED_SLOW);
  if ((const uint8_t *)p != page->start || (page->used != 1 && !full) ||
      atomic_load_explicit(&page->capacity, memory_order_relaxed) != 1 ||
      (atomic_load_explicit(&page->xthread_free, memory_order_relaxed) & ~FG_TF_FLAGS) != 0 ||
      (full && !(atomic_load_explicit(&page->xthread_free, memory_order_relaxed) & FG_TF_STAYS)))
    return false;
  size_t c = _fg_class_of(size), old = page->class_idx;
  fg_segment_kind_t kind = (fg_segment_kind_t)_fg_segment_of(page)->kind;
  bool fits = kind == FG_SEG_SINGLE ? _fg_class_kind(c) != FG_SEG_SMALL : _fg_class_kind(c) == kind;
  if (kind == FG_SEG_SMALL || !fits || (!page->regrown && heap->buffers >= BUFFERS_MAX) ||
      !_fg_page_reclass(page, heap, c))
    return false;
  if (!full) {
    _fg_queue_remove(heap, &heap->queues[old], page);
    _fg_queue_push_back(heap, &heap->queues[c], page);
  }
  _fg_page_buffer_set(page, true);
  heap->grown += _fg_class_size(c) - _fg_class_size(old);
  heap->grew_kinds |= (uint8_t)(1u << kind);
  if (heap->grown >= GROWTH_STEP) grew(heap);
  return true;
}

/* A page's first free block, handed out (the slow paths; malloc's fast path has its own). */
static inline fg_block_t *page_pop(fg_page_t *page) {
  fg_block_t *b = _fg_block_plain(page->free);
  page->free = _fg_link_head(page, b->next);
  b->next = 0;
  page->used_left++; /* `used`, 8 bytes wide as malloc and free write it (free.c's used_drop) */
  return b;
}

/* realloc growing a block past 8 KiB where it cannot grow in place: the new block gets a
 * single page of its own (a segment), in the full list (no malloc carves from it), and grows
 * in place from then on (_fg_heap_regrow), through the medium classes and the single ones
 * alike. Buffers growing together otherwise moved through the classes side by side, a
 * class's page holding 8 to 60 of them, and each step held both classes' blocks of every
 * buffer at once: python3 lists appended to in turn peaked at 64 MB where glibc, whose freed
 * neighbours merge and make room for the next bigger block, peaks at 41 (pages of their own
 * past 64 KiB only: 41-42 MB, the lists' medium pages sitting beside the single pages the
 * round before left; from 8 KiB: 38). Its own page costs a buffer no memory (what it does not
 * touch is not resident; freed, the next buffer takes it whole: page_take_empty), only
 * address space. Freed in a medium class, the page goes back to its segment at once
 * (_fg_heap_page_retire), where the next buffer or a single class takes it: medium classes
 * never carve on a single page. NULL: no such page, the caller allocates as usual. */
void *_fg_heap_alloc_buffer(size_t size) {
  fg_heap_t *heap = _fg_heap();
  if (heap == &_fg_heap_empty || _fg_ledger_fast() || _fg_secure_on() || heap->buffers >= BUFFERS_MAX)
    return NULL; /* the ledger's and secure mode's pages carry flags; the cap: see BUFFERS_MAX */
  fg_page_t *page = page_fresh(heap, _fg_class_of(size), FG_SEG_SINGLE);
  if (page == NULL) return NULL;
  _fg_page_buffer_set(page, true); /* one block, taken whole by the next buffer (page_take_empty) */
  if (!page_to_full(heap, page)) { /* a fresh page: no other thread frees into it yet */
    _fg_page_buffer_set(page, false);
    return NULL;
  }
  fg_block_t *b = page_pop(page);
  _fg_bump(&heap->counts[FG_C_slow_allocs], 1);
  if (fg_unlikely(heap->grown >= GROWTH_STEP)) grew(heap);
  return b;
}

/* A thin pile: blocks under 1/THIN_SHARE of the page's, gathered from the first page of the
 * queue, run dry. Then another thread is freeing into that page as this one allocates from it:
 * the blocks are the ones it has just written, still in its cache, and each gathering takes
 * the page's first line back from it, to run dry again a few dozen blocks later. page_find
 * goes on to the pages behind it, whose piles had longer to grow, and comes back to the thin
 * one before it carves. One thread allocating 64 B blocks and another freeing them (the lab's
 * producer-consumer shape) gathered 56-133 blocks at a time; with this, 225-600, and its CPU
 * time went from 1.01 to 0.88 s (medians of 15). */
#define THIN_SHARE 8
static bool thin_pile(const fg_page_t *page, uint32_t used_before) {
  return (used_before - _fg_page_used(page)) * THIN_SHARE < atomic_load_explicit(&page->capacity, memory_order_relaxed);
}

/* A page behind the queue's first whose blocks in use have all come back from other threads
 * (a page taken back from the woken list, whose blocks that thread finished freeing): taken
 * before the first page's own pile, which the other thread may be freeing into right now.
 * Allocating the blocks another thread frees as it frees them, a thread takes each block's
 * line from the other's cache while that one writes the next, in piles too short for the
 * prefetchers (perf: 84 % of malloc's samples on the load of the popped block's link, either
 * way, but 5,872 samples of malloc in a slow run against 3,950 in a fast one). Only in a class
 * that had its page ahead (page_ahead): 4 producers of random sizes beside 4 consumers, taking
 * such pages first in every class, left the other pages' piles waiting: peak RSS 13.6 -> 16.1
 * MB. WHOLE_LOOK pages at most. */
#define WHOLE_LOOK 8
static fg_page_t *whole_pile(const fg_page_queue_t *q) {
  fg_page_t *page = q->first->next;
  for (int n = 0; page != NULL && n < WHOLE_LOOK; page = page->next, n++) {
    uintptr_t tf = atomic_load_explicit(&page->xthread_free, memory_order_relaxed);
    if (_fg_tf_top(tf) != NULL && !(tf & FG_TF_FULL) && _fg_tf_count(tf) == _fg_page_used(page)) return page;
  }
  return NULL;
}

/* A thread taking back blocks as fast as another frees them: a page ran dry, and what came
 * back to it since is a thin pile, for the same class again and again. No page has had time to
 * fill up with frees: one thread allocating 64 B blocks in batches of 1,000 that another frees,
 * 4 batches out, carved 4,032 blocks for the 4,000 out. One whole page more, carved at once,
 * lets it allocate from pages the other thread is done with (whole_pile) from then on. After
 * CHASE_RUN thin piles in a row of one class, once a class in the heap's life: thin piles
 * spread over classes (producers of random sizes, threads freeing a few of each other's
 * blocks) carved pages ahead that ran no faster. Small classes only: a medium page carved whole
 * commits up to 512 KiB. */
#define CHASE_RUN 32
static fg_page_t *page_ahead(fg_heap_t *heap, size_t c) {
  if (_fg_class_kind(c) != FG_SEG_SMALL || heap->chased[c]) return NULL;
  if (heap->chase_class != c) {
    heap->chase_class = (uint32_t)c;
    heap->chase_run = 0;
  }
  if (++heap->chase_run < CHASE_RUN) return NULL;
  fg_page_t *page = page_fresh(heap, c, FG_SEG_SMALL);
  if (page == NULL) return NULL;
  heap->chased[c] = true;
  while (_fg_page_extend(page)) {
  }
  return page;
}

/* The page malloc allocates from: first in its queue. */
static fg_page_t *queue_front(fg_heap_t *heap, fg_page_queue_t *q, fg_page_t *page) {
  if (page != q->first) {
    _fg_queue_remove(heap, q, page);
    _fg_queue_push_front(heap, q, page);
  }
  return page;
}

/* A page of class c with a free block: the queue's pages in order, gathering their frees
 * and moving the exhausted ones to the full list; else more blocks carved from the first page
 * that has room; else a fresh page. Blocks freed on any page of the queue go out before new
 * ones are carved: carving commits memory the class has not touched yet. Seed 1's process
 * (blocks of 100 B to 100 KiB freed at random) carved every page of its classes to the end
 * while other pages of the class held free blocks: 456 KiB resident for a peak of 297 KiB
 * live. Past the page with room (one at most: a fresh page starts only when none has), the
 * walk goes on to the pages behind it; each has a free block, which ends the walk, or is
 * exhausted and leaves for the full list, as a later walk would have moved it. A thin pile
 * (above) on the first page does not end the walk. A class chased by another thread's frees
 * gets its page ahead (page_ahead), and from then on a page whose blocks have all come back
 * goes before the first page's pile (whole_pile). */
static fg_page_t *page_find(fg_heap_t *heap, size_t c) {
  pages_wake(heap, TAKE_BACK_PAGES);
  fg_page_queue_t *q = &heap->queues[c];
  fg_page_t *page = q->first, *room = NULL, *thin = NULL;
  fg_page_t *whole = page != NULL && heap->chased[c] && _fg_link_nil_plain(page->free) ? whole_pile(q) : NULL;
  if (whole != NULL) {
    _fg_page_collect(whole);
    return queue_front(heap, q, whole);
  }
  while (page != NULL) {
    fg_page_t *next = page->next;
    bool dry = _fg_link_nil_plain(page->free);
    uint32_t used = _fg_page_used(page);
    _fg_page_collect(page);
    if (!_fg_link_nil_plain(page->free)) {
      bool thinned = dry && thin_pile(page, used);
      fg_page_t *ahead = thinned ? page_ahead(heap, c) : NULL;
      if (ahead != NULL) return ahead;
      if (page != q->first || next == NULL || !thinned) break;
      thin = page;
      page = next;
      continue;
    }
    if (atomic_load_explicit(&page->capacity, memory_order_relaxed) < page->reserved) {
      if (room == NULL) room = page;
      if (next == NULL) break; /* the common case: the page being carved, alone in its queue */
    } else if (!page_to_full(heap, page)) {
      _fg_page_collect(page);
      if (!_fg_link_nil_plain(page->free)) return page; /* it stays where it is: fine */
    }
    page = next;
  }
  if ((page == NULL || _fg_link_nil_plain(page->free)) && thin != NULL) page = thin;
  if (page == NULL || _fg_link_nil_plain(page->free)) {
    if (room == NULL || !_fg_page_extend(room)) {
      _fg_heap_tick(heap);
      return page_fresh(heap, c, _fg_class_kind(c));
    }
    page = room;
  }
  return queue_front(heap, q, page);
}

void *_fg_heap_alloc_slow(fg_heap_t *heap, size_t size) {
  if (fg_unlikely(heap == &_fg_heap_empty)) {
    heap = _fg_heap_init_thread();
    if (heap == NULL) {
      errno = ENOMEM;
      return NULL;
    }
  }
  _fg_bump(&heap->counts[FG_C_slow_allocs], 1);
  fg_page_t *page = page_find(heap, _fg_class_of(size));
  if (fg_unlikely(page == NULL)) {
    errno = ENOMEM;
    return NULL;
  }
  fg_block_t *b = page_pop(page);
  if (fg_unlikely(heap->grown >= GROWTH_STEP)) grew(heap);
  _fg_background_start(); /* wanted by what this call cached or grew */
  return b;
}

/* ---- decay and collection -------------------------------------------------------------------- */

/* Walk every page of a heap: gather remote frees, release empty pages. A lone empty page
 * of a class is released once it has been seen empty for the decay time (owned heaps), or
 * at once (forced, or nobody owns the heap). Then purge free slots past the decay time. */
fg_warm void _fg_heap_collect(fg_heap_t *heap, bool force) {
  uint64_t now = _fg_clock_ms(), decay = (uint64_t)_fg_option(FG_OPTION_DECAY_MS);
  heap->decay_at = UINT64_MAX; /* the frees below tick: no pass inside this one */
  pages_wake(heap, SIZE_MAX);
  for (size_t c = 0; c < FG_CLASS_COUNT; c++) {
    fg_page_queue_t *q = &heap->queues[c];
    for (fg_page_t *page = q->first, *next; page != NULL; page = next) {
      next = page->next;
      _fg_page_collect(page);
      if (_fg_page_used(page) != 0) {
        page->freed_at = 0;
        continue;
      }
      if (heap->owned && !force) { /* empty: released once it stayed so for the decay time */
        if (page->freed_at == 0) page->freed_at = now;
        if (page->freed_at + decay > now) continue;
      }
      page_release(heap, page); /* purged below, neighbours together */
    }
  }
  _fg_segment_purge_expired(heap, now, force);
  _fg_large_heap_collect(heap, now, force);
  heap->decay_at = now + (decay / 4 > 0 ? decay / 4 : 1);
  _fg_purger_wake(); /* what stays cached expires later, if this thread goes quiet */
}

/* Abandoned heaps are collected by whoever holds heaps_lock; a decay pass only tries it.
 * One is collected whole (no thread will reuse what it caches) once it stayed abandoned for
 * the decay time, or when forced; before that it waits for a thread to adopt it. Returns
 * whether one is left to expire later. */
static bool collect_abandoned_locked(uint64_t now, bool force) {
  uint64_t decay = (uint64_t)_fg_option(FG_OPTION_DECAY_MS);
  bool left = false;
  for (fg_heap_t *heap = heaps_abandoned; heap != NULL; heap = heap->next_abandoned) {
    if (force || heap->abandoned_at + decay <= now)
      _fg_heap_collect(heap, true); /* again on later passes: remote frees may empty more pages */
    else
      left = true;
  }
  return left;
}

static void collect_abandoned(bool force) {
  pthread_mutex_lock(&heaps_lock);
  collect_abandoned_locked(_fg_clock_ms(), force);
  pthread_mutex_unlock(&heaps_lock);
}

/* Every layer at once: this thread's heap (if it has one), the exited threads' heaps, the
 * process caches. fg_collect, malloc_trim and the out-of-memory retries call it. */
fg_warm void _fg_collect_all(fg_heap_t *heap, bool force) {
  if (heap != &_fg_heap_empty) _fg_heap_collect(heap, force);
  collect_abandoned(force);
  uint64_t now = _fg_clock_ms();
  _fg_segment_cache_collect(now, force);
  _fg_large_cache_collect(now, force);
}

/* Everything every cache holds, given back now (the control channel's `collect`): what
 * fg_collect(true) gives back, and the live threads' free slots and cached large blocks as
 * the purger's pass gives them back once expired (a clock far ahead expires them all). */
uint64_t _fg_collect_now(void) {
  uint8_t was = _fg_returning_for(FG_BY_COLLECT);
  pthread_mutex_lock(&heaps_lock);
  for (fg_heap_t *heap = heaps_all; heap != NULL; heap = heap->next_all) {
    if (!heap->owned) continue;
    _fg_segment_purge_expired(heap, UINT64_MAX / 2, false);
    _fg_large_heap_expire(heap, UINT64_MAX / 2); /* into the process cache, collected next */
  }
  pthread_mutex_unlock(&heaps_lock);
  _fg_collect_all(&_fg_heap_empty, true);
  uint64_t bytes = _fg_returned_bytes;
  _fg_returning_end(was);
  return bytes;
}

/* The purger's pass: what expired in every heap's free slots and large cache (under the
 * heap's lock: its thread may be running), the abandoned heaps, the process caches. */
bool _fg_heaps_purge(uint64_t now) {
  uint8_t was = _fg_returning_for(FG_BY_IDLE);
  bool left = false;
  pthread_mutex_lock(&heaps_lock);
  for (fg_heap_t *heap = heaps_all; heap != NULL; heap = heap->next_all) {
    if (!heap->owned) continue;
    left |= _fg_segment_purge_expired(heap, now, false);
    left |= _fg_large_heap_expire(heap, now);
  }
  left |= collect_abandoned_locked(now, false);
  left |= _fg_segment_cache_collect(now, false);
  left |= _fg_large_cache_collect(now, false);
  pthread_mutex_unlock(&heaps_lock);
  _fg_returning_end(was);
  return left;
}

/* Slow-path heartbeat: the clock is read every 16th event, and the decay pass runs when due.
 * This is how memory returns to the OS without a background thread, in a program that
 * still calls malloc/free now and then. */
void _fg_heap_tick(fg_heap_t *heap) {
  if ((++heap->ticks & 15) == 0) decay_if_due(heap);
}

/* The pass itself, out of line: inlined, its register saves ran on every look at the clock
 * (decay_if_due, every 16th lone-page free: +5 instructions a look). */
static fg_noinline void decay_pass(fg_heap_t *heap, uint64_t now) {
  uint8_t was = _fg_returning_for(FG_BY_DECAY);
  _fg_heap_collect(heap, false);
  if (pthread_mutex_trylock(&heaps_lock) == 0) {
    collect_abandoned_locked(now, false);
    pthread_mutex_unlock(&heaps_lock);
  }
  _fg_segment_cache_collect(now, false);
  _fg_large_cache_collect(now, false);
  _fg_returning_end(was);
}

static void decay_if_due(fg_heap_t *heap) {
  uint64_t now = _fg_clock_ms();
  if (now >= heap->decay_at) decay_pass(heap, now);
}

/* The ledger merges every heap, live or abandoned. */
fg_rare void _fg_heaps_foreach(void (*fn)(fg_heap_t *heap, void *arg), void *arg) {
  pthread_mutex_lock(&heaps_lock);
  for (fg_heap_t *heap = heaps_all; heap != NULL; heap = heap->next_all) fn(heap, arg);
  pthread_mutex_unlock(&heaps_lock);
}

/* What every cache holds right now (fg_stats_get). */
fg_rare void _fg_heaps_held(fg_stats_t *out) {
  pthread_mutex_lock(&heaps_lock);
  for (fg_heap_t *heap = heaps_all; heap != NULL; heap = heap->next_all) {
    out->large_cache_bytes += _fg_large_heap_cached(heap);
    out->kept_page_bytes += atomic_load_explicit(&heap->kept_bytes, memory_order_relaxed);
    _fg_segment_held(heap, &out->free_page_bytes, &out->free_page_returned_bytes);
  }
  pthread_mutex_unlock(&heaps_lock);
  out->large_cache_bytes += _fg_large_shared_cached();
  _fg_segment_cache_held(&out->segment_cache_bytes, &out->segment_cache_returned_bytes);
}

/* ---- fork ------------------------------------------------------------------------------------- */

/* Every heap's lock too: a thread that does not live on in the child may hold one. */
void _fg_heaps_lock(void) {
  pthread_mutex_lock(&heaps_lock);
  for (fg_heap_t *heap = heaps_all; heap != NULL; heap = heap->next_all) _fg_lock(&heap->lock);
}

void _fg_heaps_unlock(bool child) {
  for (fg_heap_t *heap = heaps_all; heap != NULL; heap = heap->next_all) _fg_unlock(&heap->lock);
  if (!child) {
    pthread_mutex_unlock(&heaps_lock);
    return;
  }
  pthread_mutex_init(&heaps_lock, NULL);
  /* Only the forking thread lives on in the child: the other threads' heaps are abandoned,
   * so their memory is collected and reused rather than stranded. */
  fg_heap_t *self = _fg_heap_tls;
  for (fg_heap_t *heap = heaps_all; heap != NULL; heap = heap->next_all) {
    if (heap->owned && heap != self) abandon(heap, _fg_clock_ms());
  }
}

/* ---- invariants (fg_heap_check) ------------------------------------------------------------- */

static bool check_fail(const char *what, const void *where) {
  char line[160];
  size_t n = 0;
  for (const char *c = "heap check: "; *c; c++) line[n++] = *c;
  for (const char *c = what; *c && n < sizeof line - 1; c++) line[n++] = *c;
  line[n] = '\0';
  _fg_warning(line, "");
  (void)where;
  return false;
}

/* Count a page's free list, checking each link lands on a block start of the page. */
static fg_rare bool check_list(const fg_page_t *page, fg_link_t l, uint32_t *count) {
  for (const fg_block_t *b; !_fg_link_nil(page, l); l = b->next) {
    b = _fg_block(page, l);
    size_t off = (size_t)((const uint8_t *)b - page->start);
    if ((const uint8_t *)b < page->start || off % page->block_size != 0 ||
        off / page->block_size >= page->capacity)
      return check_fail("free list leaves its page", b);
    if (++*count > page->capacity) return check_fail("free list longer than the page (a cycle)", b);
  }
  return true;
}

static bool check_page(fg_heap_t *heap, fg_page_t *page, size_t c, bool full, bool woken) {
  if (page->heap != heap) return check_fail("page in a queue of another heap", page);
  if (!full && page->class_idx != c) return check_fail("page in the wrong class queue", page);
  if (_fg_page_in_full(page) != full) return check_fail("page's full flag disagrees with its queue", page);
  if (page->block_size != _fg_class_size(page->class_idx)) return check_fail("page block size", page);
  if (page->capacity > page->reserved) return check_fail("page carved beyond its area", page);
  /* Blocks other threads freed still count as used until the owner gathers them. */
  uint32_t count = 0, remote = 0;
  uintptr_t tf = atomic_load_explicit(&page->xthread_free, memory_order_acquire);
  fg_block_t *top = _fg_tf_top(tf);
  if (!check_list(page, _fg_head_link(page, page->free), &count) ||
      (top != NULL && !check_list(page, _fg_link(page, top), &remote)))
    return false;
  if (_fg_page_used(page) + count != page->capacity)
    return check_fail("page's used + free blocks != its capacity", page);
  if (remote > _fg_page_used(page)) return check_fail("more blocks freed by other threads than used", page);
  if (remote != _fg_tf_count(tf)) return check_fail("thread-free count disagrees with its stack", page);
  if ((tf & (FG_TF_FULL | FG_TF_WOKEN)) != (full ? FG_TF_FULL : 0) + (woken ? FG_TF_WOKEN : 0))
    return check_fail("page's thread-free flags disagree with its queue", page);
  return true;
}

static bool check_queue(fg_heap_t *heap, fg_page_queue_t *q, size_t c, bool full, size_t *kept, uint32_t *buffers) {
  fg_page_t *prev = NULL;
  for (fg_page_t *page = q->first; page != NULL; prev = page, page = page->next) {
    if (page->prev != prev) return check_fail("queue links broken", page);
    if (!check_page(heap, page, c, full, q == &heap->woken)) return false;
    if (page->kept && (page == q->first || full || _fg_page_used(page) != 0))
      return check_fail("a kept page is in use, first in its queue or full", page);
    *kept += page->kept ? _fg_page_bytes(page) : 0;
    *buffers += page->regrown;
  }
  if (q->last != prev) return check_fail("queue's last page is not its tail", q);
  return true;
}

fg_export fg_rare bool fg_heap_check(void) {
  fg_heap_t *heap = _fg_heap();
  if (heap == &_fg_heap_empty) return true;
  size_t kept = 0;
  uint32_t buffers = 0;
  for (size_t c = 0; c < FG_CLASS_COUNT; c++) {
    if (!check_queue(heap, &heap->queues[c], c, false, &kept, &buffers)) return false;
    fg_page_t *first = heap->queues[c].first;
    if (first == NULL || _fg_hooked_all()) first = &_fg_page_empty; /* see page.c's set_direct */
    size_t lo, hi;
    if (_fg_direct_words(c, &lo, &hi) && heap->direct[hi] != first)
      return check_fail("direct table does not lead to the class's first page", first);
  }
  _fg_lock(&heap->lock); /* other threads' frees move full pages */
  bool lists = check_queue(heap, &heap->full, 0, true, &kept, &buffers) &&
               check_queue(heap, &heap->woken, 0, true, &kept, &buffers);
  _fg_unlock(&heap->lock);
  if (!lists) return false;
  if (buffers != heap->buffers) return check_fail("buffers' pages do not add up to the heap's count", heap);
  if (kept != atomic_load_explicit(&heap->kept_bytes, memory_order_relaxed)) return check_fail("kept pages do not add up to the heap's kept bytes", heap);
  const char *bad = NULL;
  _fg_lock(&heap->lock); /* the purger may be releasing segments */
  for (int kind = 0; kind < FG_SEG_KINDS && bad == NULL; kind++) {
    for (fg_segment_t *s = heap->segments[kind]; s != NULL && bad == NULL; s = s->next) {
      if (!_fg_segment_valid(s))
        bad = "segment header or map entry broken";
      else if (s->heap != heap || s->kind != kind)
        bad = "segment in the wrong list";
      else if (s->used_pages >= s->page_count)
        bad = "full segment in the free-slot list";
      for (size_t i = 0; i < s->page_count && bad == NULL; i++) {
        if (((s->free_slots >> i) & 1) != (s->pages[i].heap == NULL)) bad = "segment's free-slot bits disagree with its slots";
        else if (s->pages[i].heap == NULL && ((s->committed_slots >> i) & 1) != s->pages[i].committed)
          bad = "segment's committed-slot bits disagree with its free slots";
      }
    }
  }
  _fg_unlock(&heap->lock);
  return bad == NULL || check_fail(bad, heap);
}
