/* segment.c — 4 MiB-aligned regions cut into page slots (owner-only, lock-free), the segment
 * map that tells in O(1) whether a pointer is frugal's, and a bounded, decaying cache of empty
 * segments behind one spin lock (reached only when a whole segment changes hands). */
#define _GNU_SOURCE
#include "internal.h"

#include <pthread.h>

fg_big_zeros _Atomic(uint8_t) _fg_segmap[FG_SEGMAP_SIZE];

void _fg_segmap_set(const fg_segment_t *s, bool on) {
  uintptr_t i = (uintptr_t)s >> FG_SEGMENT_SHIFT;
  if (i >= FG_SEGMAP_SIZE) return; /* never happens with a 47-bit user space */
  /* The mode is set by process init, before the first segment is mapped. */
  uint8_t v = !on ? 0 : s->page_shift | (_fg_free_hooked() ? FG_SEGMAP_HOOKED : 0);
  atomic_store_explicit(&_fg_segmap[i], v, memory_order_release);
}

/* ---- the segment cache ------------------------------------------------------------------- */

static fg_lock_t cache_lock;
static fg_segment_t *cache_first; /* most recently freed first */
static size_t cache_count;

static size_t cache_limit(void) {
  return (size_t)_fg_option(FG_OPTION_SEGMENT_CACHE_MB) << 20 >> FG_SEGMENT_SHIFT;
}

void _fg_segment_unmap(fg_segment_t *s) {
  _fg_segmap_set(s, false);
  _fg_os_free(s, s->mapped);
}

static fg_segment_t *segment_from_cache(void) {
  _fg_lock(&cache_lock);
  fg_segment_t *s = cache_first;
  if (s != NULL) {
    cache_first = s->next;
    cache_count--;
  }
  _fg_unlock(&cache_lock);
  return s;
}

/* An empty segment: keep it if the cache has room, else give the newest back (seed 1: a full
 * cache returns what just came in, never an older one, so nothing is held for long). Its
 * decay time runs from when it emptied (freed_at), not from now: a segment a decay pass
 * releases has been unused for that long already. */
static void segment_to_cache(fg_segment_t *s) {
  s->heap = NULL;
  _fg_lock(&cache_lock);
  bool keep = cache_count < cache_limit();
  if (keep) {
    s->next = cache_first;
    cache_first = s;
    cache_count++;
  }
  _fg_unlock(&cache_lock);
  if (!keep) {
    _fg_event(1, "segment cache full: an empty segment goes back to the OS at once");
    _fg_count(FG_C_segment_cache_evictions, 1);
    _fg_segment_unmap(s);
  }
}

/* Cached segments unused for the decay time go back to the OS (all of them when forced).
 * The list is ordered newest first, so the expired ones are a tail. */
bool _fg_segment_cache_collect(uint64_t now, bool force) {
  uint64_t decay = (uint64_t)_fg_option(FG_OPTION_DECAY_MS);
  fg_segment_t *expired = NULL;
  _fg_lock(&cache_lock);
  fg_segment_t **link = &cache_first;
  while (*link != NULL && !force && (*link)->freed_at + decay > now) link = &(*link)->next;
  expired = *link;
  *link = NULL;
  for (fg_segment_t *s = expired; s != NULL; s = s->next) cache_count--;
  bool left = cache_first != NULL;
  _fg_unlock(&cache_lock);
  _fg_segment_unmap_list(expired, FG_C_segment_cache_decays);
  return left;
}

void _fg_segment_unmap_list(fg_segment_t *list, int counter) {
  while (list != NULL) {
    fg_segment_t *next = list->next;
    _fg_count(counter, 1);
    _fg_segment_unmap(list);
    list = next;
  }
}

/* The free slots of a list of segments, what of them is resident and what is address space
 * only (the ledger's held bytes). A committed slot holds only the pages its pages touched (a
 * buffer's 4 MiB single slot: what the buffer grew to), so the kernel is asked (mincore),
 * once per run of neighbouring committed slots: the ledger's samples read this every 100 ms. */
static fg_rare void slots_held(fg_segment_t *list, bool free_only, uint64_t *resident, uint64_t *returned) {
  uint64_t in = 0, all = 0;
  for (fg_segment_t *s = list; s != NULL; s = s->next) {
    uintptr_t run = 0, run_end = 0;
    for (size_t i = 0; i <= s->page_count; i++) {
      fg_page_t *page = i < s->page_count ? &s->pages[i] : NULL;
      bool held = page != NULL && (!free_only || page->heap == NULL);
      uint8_t *start = NULL;
      size_t area = held ? _fg_page_area(s, page, &start) : 0;
      /* Whole OS pages only: the first slot shares one with the segment header. */
      uintptr_t lo = fg_align_up((uintptr_t)start, FG_OS_PAGE), hi = ((uintptr_t)start + area) & ~(FG_OS_PAGE - 1);
      bool committed = held && page->committed && hi > lo;
      if (run != 0 && (!committed || lo != run_end)) { /* the run ends here */
        in += _fg_os_resident((void *)run, run_end - run);
        run = 0;
      }
      all += area;
      if (!committed) continue;
      if (run == 0) run = lo;
      run_end = hi;
    }
  }
  *resident += in;
  *returned += all - in;
}

fg_rare void _fg_segment_cache_held(uint64_t *resident, uint64_t *returned) {
  _fg_lock(&cache_lock);
  slots_held(cache_first, false, resident, returned);
  _fg_unlock(&cache_lock);
}

/* Fork: the child has only the forking thread, so releasing a lock is all it needs. */
void _fg_segment_lock_all(void) { _fg_lock(&cache_lock); }
void _fg_segment_unlock_all(void) { _fg_unlock(&cache_lock); }

/* ---- segments of a heap ------------------------------------------------------------------ */

static size_t header_size(size_t page_count) {
  return fg_align_up(sizeof(fg_segment_t) + page_count * sizeof(fg_page_t), 64);
}

static const uint8_t kind_shift[FG_SEG_KINDS] = {FG_SMALL_PAGE_SHIFT, FG_MEDIUM_PAGE_SHIFT, FG_SEGMENT_SHIFT};

static fg_segment_t *segment_new(fg_heap_t *heap, fg_segment_kind_t kind) {
  fg_segment_t *s = segment_from_cache();
  bool fresh = s == NULL;
  if (fresh) {
    s = _fg_os_alloc_aligned(FG_SEGMENT_SIZE, FG_SEGMENT_SIZE);
    if (s == NULL) return NULL;
    s->mapped = FG_SEGMENT_SIZE;
    _fg_secure_guard_mapping(s, FG_SEGMENT_SIZE);
  }
  _fg_count(fresh ? FG_C_segment_cache_misses : FG_C_segment_cache_hits, 1);
  size_t count = FG_SEGMENT_SIZE >> kind_shift[kind];
  /* A fresh header is zero as mapped, each slot uncommitted: left so, the page structs of
   * slots never used are never written (a small segment's header spans 3 OS pages, and a
   * program using 31 slots or fewer needs only 2). A cached one holds the previous owner's
   * state, and its slots may be committed. */
  if (!fresh) {
    memset(s, 0, header_size(count));
    for (size_t i = 0; i < count; i++) s->pages[i].committed = 1;
  }
  s->committed_slots = fresh ? 0 : ~(uint64_t)0;
  s->mapped = FG_SEGMENT_SIZE;
  s->cookie = _fg_cookie_of(s);
  s->kind = (uint8_t)kind;
  s->page_shift = kind_shift[kind];
  s->page_count = (uint16_t)count;
  s->free_slots = count == 64 ? ~(uint64_t)0 : ((uint64_t)1 << count) - 1;
  _fg_segmap_set(s, true); /* with its page shift, which a cached segment may change */
  s->heap = heap;
  s->next = heap->segments[kind];
  if (s->next != NULL) s->next->prev = s;
  heap->segments[kind] = s;
  return s;
}

static void segment_unlink(fg_heap_t *heap, fg_segment_t *s) {
  if (s->prev != NULL)
    s->prev->next = s->next;
  else if (heap->segments[s->kind] == s)
    heap->segments[s->kind] = s->next;
  if (s->next != NULL) s->next->prev = s->prev;
  s->next = s->prev = NULL;
}

/* An empty segment leaves its heap for the shared cache (or the OS). */
static fg_warm void segment_release(fg_heap_t *heap, fg_segment_t *s) {
  segment_unlink(heap, s);
  for (size_t i = 0; i < s->page_count; i++) _fg_page_side_array_drop(&s->pages[i]);
  /* A running thread's empty segment stays committed for quick reuse (seed 2's FIFO rounds);
   * an exited thread's is given back whole but its header page (whose `mapped` the cache
   * unmaps it by: purged, it read 0 and munmap failed): one madvise, not one per page. */
  if (!heap->owned) {
    _fg_os_purge((uint8_t *)s + FG_OS_PAGE, FG_SEGMENT_SIZE - FG_OS_PAGE);
    for (size_t i = 0; i < s->page_count; i++) s->pages[i].committed = 0, s->pages[i].resident = 0;
    s->committed_slots = 0;
  }
  segment_to_cache(s);
}

fg_rare void _fg_segment_held(fg_heap_t *heap, uint64_t *resident, uint64_t *returned) {
  _fg_lock(&heap->lock);
  for (int kind = 0; kind < FG_SEG_KINDS; kind++) slots_held(heap->segments[kind], true, resident, returned);
  _fg_unlock(&heap->lock);
}

/* The usable area of a page slot: the first slot starts after the segment header. In a small
 * segment, at the OS page after it: every small page starts on an OS page, so that a class
 * whose size is a multiple of an alignment up to 4 KiB hands out blocks aligned to it
 * (alloc.c's _fg_memalign_raw), for 3,968 bytes of slot 0's address space, never touched.
 * Not so the bigger pages: the lab's FIFO, which writes a block's first and last 8 bytes,
 * found a big block's last bytes on the OS page of the next block's first ones where the
 * blocks start off a page boundary, and on one of their own where they start on it (128 KiB
 * blocks: 5.8 -> 10.0 MB peak). */
size_t _fg_page_area(const fg_segment_t *s, const fg_page_t *page, uint8_t **start) {
  size_t index = (size_t)(page - s->pages);
  size_t page_size = (size_t)1 << s->page_shift;
  size_t skip = index != 0 ? 0
                : s->kind == FG_SEG_SMALL ? fg_align_up(header_size(s->page_count), FG_OS_PAGE)
                                          : header_size(s->page_count);
  size_t guard = index + 1 == s->page_count ? _fg_secure_guard() : 0; /* secure: last OS page */
  *start = (uint8_t *)s + index * page_size + skip;
  return page_size - skip - guard;
}

/* Slot i of s, free, taken for `to` (s's heap's lock held). */
static fg_page_t *slot_take(fg_segment_t *s, size_t i, fg_heap_t *to) {
  s->free_slots &= ~((uint64_t)1 << i);
  fg_page_t *page = &s->pages[i];
  page->heap = to;
  s->used_pages++;
  if (s->used_pages == s->page_count) segment_unlink(s->heap, s); /* no free slot left */
  return page;
}

/* A free slot of `kind` in `owner`'s segments whose memory may still be committed, taken for
 * `to`; NULL if none. By the bits: a walk over the slots read a page struct, a cache line, for
 * each slot taken before it (seed 2's FIFO of 4 KiB blocks: 300 instructions a page). */
static fg_page_t *committed_slot_take(fg_heap_t *owner, fg_segment_kind_t kind, fg_heap_t *to) {
  for (fg_segment_t *s = owner->segments[kind]; s != NULL; s = s->next) {
    uint64_t bits = s->free_slots & s->committed_slots;
    if (bits != 0) return slot_take(s, (size_t)__builtin_ctzll(bits), to);
  }
  return NULL;
}

/* A free page slot of `kind` for `heap`, from a segment it owns: one whose memory may still be
 * committed first; with FG_SLOT_OR_MAP any other, else one of a segment it maps. The slot is
 * marked taken under the heap's lock, so the purger leaves it alone from then on. */
fg_page_t *_fg_segment_page_alloc(fg_heap_t *heap, fg_segment_kind_t kind, fg_slot_want_t want) {
  _fg_lock(&heap->lock);
  fg_page_t *page = committed_slot_take(heap, kind, heap);
  fg_segment_t *s = heap->segments[kind];
  if (page == NULL && want == FG_SLOT_OR_MAP && (s != NULL || (s = segment_new(heap, kind)) != NULL))
    page = slot_take(s, (size_t)__builtin_ctzll(s->free_slots), heap);
  _fg_unlock(&heap->lock);
  return page;
}

/* Set when a slot goes free with its memory committed; cleared by a lender's scan that found
 * none (heap.c's page_from_others): a hint, so that a growing heap looks at the others only when
 * one of them may lend. */
static _Atomic(bool) slots_lendable;
bool _fg_segment_lendable(void) { return atomic_load_explicit(&slots_lendable, memory_order_relaxed); }
void _fg_segment_lendable_none(void) { atomic_store_explicit(&slots_lendable, false, memory_order_relaxed); }

/* A free slot of `kind` in `owner`'s segments whose memory is still committed, taken for
 * another heap, `to`; NULL if none, or if the owner's lock is taken (never wait: the owner
 * may be off the CPU). The segment stays the owner's: the slot comes back to it when `to`
 * frees the page (_fg_segment_page_free locks the segment's heap, not the page's). */
fg_page_t *_fg_segment_slot_lend(fg_heap_t *owner, fg_segment_kind_t kind, fg_heap_t *to) {
  if (!_fg_trylock(&owner->lock)) return NULL;
  fg_page_t *page = committed_slot_take(owner, kind, to);
  if (page != NULL) _fg_bump(&to->counts[FG_C_slots_lent], 1);
  _fg_unlock(&owner->lock);
  return page;
}

/* A page slot back to its segment, under the lock of the segment's heap (_fg_segment_page_free). */
static void segment_page_free_locked(fg_page_t *page) {
  fg_segment_t *s = _fg_segment_of(page);
  fg_heap_t *heap = s->heap;
  _fg_bump(&heap->counts[FG_C_pages_released], 1); /* the lock's heap: a page's may be another thread's */
  page->heap = NULL;
  s->free_slots |= (uint64_t)1 << (page - s->pages);
  page->block_size = 0;
  /* No block start passes the carved check: fg_usable_size's fast path relies on it. */
  atomic_store_explicit(&page->carved_limit, 0, memory_order_relaxed);
  page->free = 0; /* nothing reads a free slot's list */
  page->committed = 1;
  s->committed_slots |= (uint64_t)1 << (page - s->pages);
  if (!atomic_load_explicit(&slots_lendable, memory_order_relaxed))
    atomic_store_explicit(&slots_lendable, true, memory_order_relaxed);
  page->freed_at = _fg_clock_ms();
  if (s->used_pages == s->page_count) { /* it had no free slot: it is one again */
    s->next = heap->segments[s->kind];
    s->prev = NULL;
    if (s->next != NULL) s->next->prev = s;
    heap->segments[s->kind] = s;
  }
  s->used_pages--;
  if (s->used_pages == 0) {
    /* A running thread keeps its empty segment until the decay pass: a loop that fills and
     * empties a page batch after batch (the lab's threads) took it to the shared cache and
     * back each time, and the cache's lock is what threads then met on. */
    s->freed_at = page->freed_at;
    if (!heap->owned) segment_release(heap, s);
  }
}

/* Give a page slot back to its segment. The slot's memory stays committed until the decay
 * pass (a page freed and soon reused should not fault again); an exited thread's empty
 * segment goes to the cache at once. The segment's heap's lock: the page may be lent. */
void _fg_segment_page_free(fg_page_t *page) {
  fg_heap_t *owner = _fg_segment_of(page)->heap; /* stable: the page keeps its segment in use */
  _fg_page_buffer_set(page, false);
  _fg_lock(&owner->lock);
  segment_page_free_locked(page);
  _fg_unlock(&owner->lock);
}

/* Decay pass over a heap's partly used segments: free slots unused for the decay time give
 * their memory back (all of them when forced). Neighbouring slots go in one madvise call.
 * The owner's decay passes call it, and the purger's for a heap whose thread is quiet.
 * Returns whether resident free slots or empty segments are left to expire later. */
/* s's committed free slots freed at or before `before` give their memory back, neighbours in
 * one call. True: some stay committed. Under the heap's lock. */
static bool purge_slots(fg_segment_t *s, uint64_t before) {
  bool left = false;
  uint8_t *run = NULL, *run_end = NULL;
  for (size_t i = 0; i <= s->page_count; i++) {
    fg_page_t *page = i < s->page_count ? &s->pages[i] : NULL;
    bool idle = page != NULL && page->heap == NULL && page->committed;
    bool due = idle && page->freed_at <= before;
    left |= idle && !due;
    uint8_t *start = NULL;
    size_t area = due ? _fg_page_area(s, page, &start) : 0;
    if (run != NULL && (!due || start != run_end)) { /* the run ends here */
      _fg_os_purge(run, (size_t)(run_end - run));
      run = NULL;
    }
    if (!due) continue;
    if (run == NULL) run = start;
    run_end = start + area;
    page->committed = 0;
    page->resident = 0;
    s->committed_slots &= ~((uint64_t)1 << i);
  }
  return left;
}

bool _fg_segment_purge_expired(fg_heap_t *heap, uint64_t now, bool force) {
  uint64_t decay = (uint64_t)_fg_option(FG_OPTION_DECAY_MS);
  uint64_t before = force ? UINT64_MAX : now >= decay ? now - decay : 0;
  bool left = false;
  _fg_lock(&heap->lock);
  for (int kind = 0; kind < FG_SEG_KINDS; kind++) {
    for (fg_segment_t *s = heap->segments[kind], *next; s != NULL; s = next) {
      next = s->next;
      if (s->used_pages == 0 && (force || !heap->owned || s->freed_at <= before)) {
        segment_release(heap, s); /* empty past the decay time: the whole segment goes */
        continue;
      }
      left |= s->used_pages == 0;
      left |= purge_slots(s, before);
    }
  }
  _fg_unlock(&heap->lock);
  return left;
}

void _fg_segment_purge_idle(fg_heap_t *heap, uint64_t before, uint8_t kinds) {
  _fg_lock(&heap->lock);
  for (int kind = 0; kind < FG_SEG_KINDS; kind++)
    if (kinds & (1u << kind))
      for (fg_segment_t *s = heap->segments[kind]; s != NULL; s = s->next) purge_slots(s, before);
  _fg_unlock(&heap->lock);
}

/* A mapping for one large block: `size` bytes (header included) at a segment-aligned
 * address, registered in the segment map. */
fg_warm fg_segment_t *_fg_segment_map_large(size_t size) {
  fg_segment_t *s = _fg_os_alloc_aligned(size, FG_SEGMENT_SIZE);
  if (s == NULL) return NULL;
  _fg_segment_large_init(s, size);
  return s;
}

/* The header of a large mapping of `size` bytes at s, registered in the segment map. */
void _fg_segment_large_init(fg_segment_t *s, size_t size) {
  s->cookie = _fg_cookie_of(s);
  s->kind = FG_SEG_LARGE;
  s->page_shift = FG_SEGMENT_SHIFT; /* every offset within the first 4 MiB maps to pages[0] */
  s->page_count = 1;
  s->mapped = fg_align_up(size, FG_OS_PAGE);
  /* A split-off tail's header held user data: the lone page must read as no page (heap NULL,
   * carved limit 0) to free's and fg_usable_size's fast paths, which look at it first, and the
   * block as neither sampled nor guarded. */
  memset(&s->pages[0], 0, sizeof s->pages[0]);
  s->sampled = s->guarded = 0;
  _fg_segmap_set(s, true);
}
