/* page.c — one page: blocks of one size class, with free lists of its own so that malloc and
 * a local free touch no shared cache line and take no atomic; blocks carved a few KiB at a
 * time, so a page commits only what is used. Also side arrays and the heap's page queues. */
#include "internal.h"

/* ---- side arrays: the requested size of each block (ledger, secure mode) ------------------ */

/* Arrays come and go with their segments, and a FIFO empties and refills segments every
 * round: an mmap and a munmap per page cost the inline ledger a third of its time in the
 * 32 B FIFO. Freed arrays wait in a pool by their size in OS pages (1 to 8: a 64 KiB page of
 * 8 B blocks needs 32 KiB), already committed, up to SIDE_POOL_MAX bytes. */
#define SIDE_SIZES 9
#define SIDE_POOL_MAX ((size_t)64 << 20)
typedef struct side_free_s {
  struct side_free_s *next;
} side_free_t;
static fg_lock_t side_lock;
static side_free_t *side_pool[SIDE_SIZES];
static size_t side_pool_bytes;

static size_t side_pages(uint32_t entries) {
  return fg_align_up(entries * sizeof(uint32_t), FG_OS_PAGE) / FG_OS_PAGE;
}

static fg_rare bool side_array(fg_page_t *page) {
  if (page->requested != NULL) return true;
  size_t pages = side_pages(page->reserved);
  side_free_t *a = NULL;
  if (pages < SIDE_SIZES) {
    _fg_lock(&side_lock);
    if ((a = side_pool[pages]) != NULL) {
      side_pool[pages] = a->next;
      side_pool_bytes -= pages * FG_OS_PAGE;
    }
    _fg_unlock(&side_lock);
  }
  if (a == NULL) a = _fg_os_alloc_aligned(pages * FG_OS_PAGE, FG_OS_PAGE);
  if (a == NULL) return false;
  page->requested = (uint32_t *)a;
  page->requested_cap = (uint32_t)(pages * FG_OS_PAGE / sizeof(uint32_t));
  return true;
}

void _fg_page_side_array_drop(fg_page_t *page) {
  if (page->requested == NULL) return;
  size_t pages = side_pages(page->requested_cap);
  side_free_t *a = (side_free_t *)page->requested;
  page->requested = NULL;
  page->requested_cap = 0;
  _fg_lock(&side_lock);
  bool keep = pages < SIDE_SIZES && side_pool_bytes + pages * FG_OS_PAGE <= SIDE_POOL_MAX;
  if (keep) {
    a->next = side_pool[pages];
    side_pool[pages] = a;
    side_pool_bytes += pages * FG_OS_PAGE;
  }
  _fg_unlock(&side_lock);
  if (!keep) _fg_os_free(a, pages * FG_OS_PAGE);
}

void _fg_page_side_lock(bool lock) {
  if (lock)
    _fg_lock(&side_lock);
  else
    _fg_unlock(&side_lock);
}

/* ---- pages ------------------------------------------------------------------------------------ */

/* Two free lists: `free`, handed out from, where the owner's own frees go straight back (the
 * block freed last is handed out next, still in cache); `xthread_free`, other threads' frees
 * on an atomic stack, taken whole with its count. */

/* No block carved: what a page starts as, and what an uncarved one goes back to. */
static void carve_none(fg_page_t *page) {
  atomic_store_explicit(&page->capacity, 0, memory_order_relaxed);
  atomic_store_explicit(&page->carved_limit, 0, memory_order_relaxed);
  page->free = _fg_link_plain(_fg_list_end(page));
}

/* The page's class: its block size, how many blocks fit, and the constants derived from them. */
static void set_class(fg_page_t *page, fg_heap_t *heap, size_t class_idx, size_t area) {
  size_t bsize = _fg_class_size(class_idx);
  page->block_size = (uint32_t)bsize;
  page->size_slack = (uint32_t)((bsize + 120) / 8); /* see _fg_page_wrong_size */
  page->class_idx = (uint8_t)class_idx;
  page->ledger_row = (uint32_t)(offsetof(fg_heap_ledger_t, ledger.classes) + class_idx * sizeof(_fg_heap_ledger(heap)->classes[0]));
  page->reserved = (uint32_t)(area / bsize);
  page->magic = UINT64_MAX / bsize + 1 + fg_is_pow2(bsize); /* floor(2^64 / bsize) + 1 */
}

void _fg_page_init(fg_page_t *page, fg_heap_t *heap, size_t class_idx) {
  fg_segment_t *s = _fg_segment_of(page);
  uint8_t *start;
  size_t area = _fg_page_area(s, page, &start);
  page->start = start;
  set_class(page, heap, class_idx, area);
  if (page->requested_cap < page->reserved) _fg_page_side_array_drop(page); /* kept, too small */
  /* The inline ledger counts the blocks of pages flagged FG_USED_LEDGER, whose side array is
   * made now (without memory for one, the page's blocks go uncounted at both ends). */
  bool counted = _fg_ledger_fast() && side_array(page);
  /* Secure mode alone: malloc's fast path pops the page's blocks, its flag sending each to
   * secure.c to be armed, which needs the side array; without memory for one the page is a
   * plain one (key 0, its blocks unwatched). */
  bool secured = _fg_secure_alone() && side_array(page);
  page->used = counted ? FG_USED_LEDGER | FG_USED_SLOW : secured ? FG_USED_SECURE | FG_USED_SLOW : 0;
  _fg_sample_page_init(page); /* after the flags: a flagged page's countdown stays below zero */
  bool keyed = _fg_secure_on() && (secured || !_fg_secure_alone());
  page->key = keyed ? heap->key ^ ((uintptr_t)page * 0x9e3779b97f4a7c15u) : 0;
  carve_none(page); /* after the key: the empty lists' links are encoded with it */
  atomic_store_explicit(&page->xthread_free, 0, memory_order_relaxed);
  page->fresh = !page->committed; /* carving uncommitted memory faults: the ledger counts it */
  page->committed = 1;
  page->has_aligned = 0;
  page->prev_class = 0;
  page->came_back = 0;
  _fg_page_buffer_set(page, false);
  _fg_bump(&heap->counts[FG_C_pages_new], 1);
  page->next = page->prev = NULL;
  /* page->heap was set when the slot was taken, under the heap's lock: the purger reads it. */
}

/* The limit _fg_block_carved compares with: a block start's offset times magic is its index
 * times magic * block_size (mod 2^64, a small number), so the first `capacity` blocks pass. */
static void set_carved_limit(fg_page_t *page) {
  uint64_t err = page->magic * page->block_size;
  atomic_store_explicit(&page->carved_limit, (uint64_t)atomic_load_explicit(&page->capacity, memory_order_relaxed) * err,
                        memory_order_release);
}

/* A page whose one carved block is its start takes a bigger class of its kind: the block grows
 * where it is, into the page's uncarved memory (realloc: heap.c's _fg_heap_regrow). False,
 * nothing changed, when that class's block does not fit the page. */
bool _fg_page_reclass(fg_page_t *page, fg_heap_t *heap, size_t class_idx) {
  uint8_t *start;
  size_t area = _fg_page_area(_fg_segment_of(page), page, &start);
  if (_fg_class_size(class_idx) > area) return false;
  set_class(page, heap, class_idx, area);
  set_carved_limit(page);
  return true;
}

/* Carve the next blocks into `free`: 4 KiB worth at a time, or one block of 4 KiB or more.
 * Carving writes each block's first word, so every block carved commits a page: carving 4
 * big blocks at once cost the seed-1 process its "peak RSS at most glibc's". Memory an
 * earlier page of the slot touched is still resident, though: there 16 blocks are carved at
 * a time, which commits nothing (seed 2's FIFO of 4 KiB blocks took a slow call a block in
 * every round after the first: 190 -> 110 ns a block; 2 KiB 120 -> 78). Not more: a page's
 * 256 blocks of 256 B carved at once left the cache before they were handed out (+25 %). */
#define CARVE_RESIDENT 16

/* Bytes from the page's start where carving its blocks costs nothing: see fg_page_t.resident. */
static size_t resident_bytes(const fg_page_t *page) {
  bool known = page->resident_class == 0 || page->resident_class == page->class_idx + 1u;
  return known ? (size_t)page->resident * FG_OS_PAGE : 0;
}

/* Carving wrote the first words of the page's blocks up to `end` (whole OS pages; the page
 * carves from its start, so every block before was carved too). Blocks of 4 KiB or less put a
 * first word on every OS page they span: all of [0, end) is resident, for any class. A
 * bigger block's first OS page is, for its class: seed 2's FIFO of 32 KiB blocks otherwise
 * took the slow path for every block of every round, one carved at a time (64 KiB: 63 -> 31
 * ns a push, 16 KiB: 67 -> 36; mimalloc 40, 45). A single page's slot (4 MiB) is not tracked. */
static void resident_note(fg_page_t *page, size_t end) {
  size_t pages = end / FG_OS_PAGE;
  if (pages > UINT8_MAX || end <= resident_bytes(page)) return;
  if (page->block_size > FG_OS_PAGE && page->resident_class == 0 && pages <= page->resident) return;
  page->resident_class = page->block_size <= FG_OS_PAGE ? 0 : (uint8_t)(page->class_idx + 1);
  page->resident = (uint8_t)pages;
}
bool _fg_page_extend(fg_page_t *page) {
  uint32_t left = page->reserved - page->capacity;
  if (left == 0) return false;
  size_t bsize = page->block_size, at = (size_t)page->capacity * bsize;
  uint32_t n = (uint32_t)(FG_OS_PAGE / bsize);
  if (n < 1) n = 1;
  size_t resident = resident_bytes(page);
  if (n < CARVE_RESIDENT && at + sizeof(fg_block_t) <= resident) {
    uint32_t fit = (uint32_t)((resident - at - sizeof(fg_block_t)) / bsize + 1);
    n = fit < CARVE_RESIDENT ? fit : CARVE_RESIDENT;
  }
  if (n > left) n = left;
  uint8_t *first = page->start + at;
  if (at == 0 && page->prev_class == page->class_idx + 1u) page->came_back = 1; /* uncarved, used again */
  if (fg_unlikely(_fg_secure_on())) {
    _fg_secure_carve(page, first, n);
  } else {
    uint8_t *b = first;
    for (uint32_t i = 0; i + 1 < n; i++, b += bsize) ((fg_block_t *)b)->next = _fg_link(page, b + bsize);
    ((fg_block_t *)b)->next = _fg_head_link(page, page->free);
    page->free = _fg_link_plain(first);
    resident_note(page, fg_align_up(at + (size_t)(n - 1) * bsize + sizeof(fg_block_t), FG_OS_PAGE));
  }
  /* Owner-written: a plain store. An atomic add is a locked instruction, which waits for the
   * carving's stores to reach the cache, a miss each over memory the program last touched
   * (seed 2's FIFO of 4 KiB blocks: two thirds of the carving's time). */
  atomic_store_explicit(&page->capacity, atomic_load_explicit(&page->capacity, memory_order_relaxed) + n,
                        memory_order_relaxed);
  _fg_page_buffer_set(page, false); /* blocks of its own class now: a page like any other */
  set_carved_limit(page);
  /* Carving writes each block's first word: small blocks touch all their pages, a block
   * of 4 KiB or more touches one. */
  if (page->fresh) {
    _fg_bump(&page->heap->counts[FG_C_fresh_bytes], (uint64_t)n * (bsize < FG_OS_PAGE ? bsize : FG_OS_PAGE));
    page->heap->grown += (size_t)n * bsize; /* what the program is about to commit: heap.c's grew() */
    page->heap->grew_kinds |= (uint8_t)(1u << _fg_class_kind(page->class_idx));
  }
  return true;
}

/* ---- idle free blocks give their pages back ------------------------------------------------ */

/* A free block of PURGE_MIN_BLOCK or more spans whole OS pages that only its first word and
 * mark (below) use. Each check of a page (the owner's, as its heap grows: heap.c) marks its
 * free blocks with the check's number; a block still free and marked by the previous check
 * gives back every OS page but its first, and is marked purged so later checks skip it. A
 * block handed out and freed again between two checks may keep a stale mark: it is then
 * purged one check early, which costs a refault, never data (the block is free). Secure
 * mode's freed-block fill would read back as zeros: it is left alone. */
#define PURGE_MIN_BLOCK ((size_t)8 * FG_OS_PAGE)
#define PURGE_DONE ((uintptr_t)0x9e3779b97f4a7c15u)

static uintptr_t purge_mark(uint64_t check) { return _fg_secret ^ (check * 0xff51afd7ed558ccdu); }

static fg_warm void purge_list(fg_page_t *page, fg_link_t l, uint64_t check) {
  size_t bsize = page->block_size;
  for (uint32_t n = 0; !_fg_link_nil(page, l) && n <= page->capacity; n++) {
    fg_block_t *b = _fg_block(page, l);
    uintptr_t *mark = (uintptr_t *)b + 1;
    if (*mark == purge_mark(check - 1)) {
      uintptr_t lo = fg_align_up((uintptr_t)(mark + 1), FG_OS_PAGE), hi = ((uintptr_t)b + bsize) & ~(FG_OS_PAGE - 1);
      if (hi > lo) _fg_os_purge((void *)lo, hi - lo);
      *mark = PURGE_DONE ^ _fg_secret;
    } else if (*mark != (PURGE_DONE ^ _fg_secret)) {
      *mark = purge_mark(check);
    }
    l = b->next;
  }
}

/* An empty page gives back the memory of its blocks and stays where it is, as if just
 * started: the next block is carved again (and faults in again, which the ledger's fresh
 * bytes count). The OS pages it shares with its neighbours (a segment header) stay. */
/* An emptied page starts again in address order, its memory left as it is (see heap.c's
 * retire): the next blocks are carved, stores in a row, rather than popped from a list that
 * the frees left scattered over the page, a read that misses the cache each. */
void _fg_page_recarve(fg_page_t *page) {
  carve_none(page);
  page->prev_class = (uint8_t)(page->class_idx + 1); /* its old blocks freed again: double frees */
}

void _fg_page_uncarve(fg_page_t *page) {
  uintptr_t lo = fg_align_up((uintptr_t)page->start, FG_OS_PAGE);
  uintptr_t hi = ((uintptr_t)page->start + (size_t)page->capacity * page->block_size) & ~(FG_OS_PAGE - 1);
  if (hi > lo) _fg_os_purge((void *)lo, hi - lo);
  carve_none(page);
  page->resident = 0;
  page->fresh = 1;
  page->prev_class = (uint8_t)(page->class_idx + 1); /* its old blocks freed again: double frees */
}

void _fg_page_purge_idle(fg_page_t *page, uint64_t check) {
  if (page->block_size < PURGE_MIN_BLOCK || _fg_secure_on()) return;
  /* The blocks' first OS pages stay; what else was resident may go. */
  if (page->resident_class == 0) page->resident_class = (uint8_t)(page->class_idx + 1);
  purge_list(page, _fg_head_link(page, page->free), check);
}

/* Move what other threads freed into `free` (one atomic exchange). Not a full page's: its
 * stack counts towards the page coming back whole (heap.c takes it out of the full list
 * first). */
void _fg_page_collect(fg_page_t *page) {
  uintptr_t tf = atomic_load_explicit(&page->xthread_free, memory_order_relaxed);
  if (_fg_tf_top(tf) != NULL && !(tf & FG_TF_FULL)) {
    while (!atomic_compare_exchange_weak_explicit(&page->xthread_free, &tf, 0, memory_order_acq_rel,
                                                  memory_order_relaxed)) {
    }
    fg_block_t *head = _fg_tf_top(tf), *tail = head;
    uint32_t count = _fg_tf_count(tf);
    if (fg_unlikely(count == 0 || count > page->capacity))
      _fg_misuse("corrupted thread-free list in page", page);
    if (!_fg_link_nil_plain(page->free)) { /* rarely: the stack goes in front, its tail found by a walk */
      while (!_fg_link_nil(page, tail->next)) tail = _fg_block(page, tail->next);
      tail->next = _fg_head_link(page, page->free);
    }
    page->free = _fg_link_plain(head);
    page->used -= count;
  }
}

static bool list_holds(const fg_page_t *page, fg_link_t l, const void *b) {
  for (uint32_t n = 0; !_fg_link_nil(page, l) && n <= page->capacity; n++) {
    const fg_block_t *x = _fg_block(page, l);
    if (x == b) return true;
    l = x->next;
  }
  return false;
}

/* Slow confirmation of a suspected double free: is b on any of the page's free lists? */
bool _fg_page_holds_free(fg_page_t *page, const void *b) {
  uintptr_t tf = atomic_load_explicit(&page->xthread_free, memory_order_acquire);
  fg_block_t *top = _fg_tf_top(tf);
  return list_holds(page, _fg_head_link(page, page->free), b) ||
         (top != NULL && (top == b || list_holds(page, top->next, b)));
}

/* The side array stays with the page slot when the page is released (a FIFO's pages come
 * and go every round: an mmap each time doubled the ledger's cost); segment.c frees it when
 * the whole segment goes. Stale entries are harmless: every block of a page is recorded when
 * it is handed out, before anything reads its entry. */
fg_rare uint32_t *_fg_page_requested_slot(fg_page_t *page, const void *p, bool create) {
  if (page->heap == NULL || (const uint8_t *)p < page->start) return NULL;
  size_t off = (size_t)((const uint8_t *)p - page->start);
  size_t idx = _fg_block_index(page, off); /* a block start, or an aligned interior pointer */
  if (idx >= page->capacity) return NULL;
  if (page->requested == NULL && (!create || !side_array(page))) return NULL;
  return &page->requested[idx];
}

/* ---- page queues --------------------------------------------------------------------------- */
/* Doubly linked, a queue per class; the first page of a class is the one its direct-table
 * entries point at. */

/* Secure mode alone: the sizes 8w - 7 .. 8w share word w, whose class must leave the largest
 * a canary byte: the class of 8w + 1, which leaves each of them at least 8 (secure.c's canary
 * is then whole words). So class c takes words [size of the class below / 8, its size / 8 - 1].
 * Out of line: thread start fills the table through set_direct. */
static fg_noinline fg_rare bool direct_words_secure(size_t c, size_t *lo, size_t *hi) {
  *lo = c == 0 ? 0 : _fg_class_size(c - 1) / 8;
  *hi = _fg_class_size(c) / 8 - 1;
  if (*hi > FG_DIRECT_MAX / 8) *hi = FG_DIRECT_MAX / 8;
  return *lo <= *hi;
}

static inline bool direct_words(size_t c, size_t *lo, size_t *hi) {
  if (fg_unlikely(_fg_secure_alone())) return direct_words_secure(c, lo, hi);
  *hi = _fg_class_size(c);
  if (*hi > FG_DIRECT_MAX) return false;
  *hi /= 8;
  /* The first word count of the class; with the inline ledger, malloc(0) (word 0) misses to
   * the hooks, which count it in histogram bucket 0. */
  *lo = c == 0 ? (_fg_ledger_fast() ? 1 : 0) : (_fg_class_size(c - 1) + 8) / 8;
  return true;
}

bool _fg_direct_words(size_t c, size_t *lo, size_t *hi) { return direct_words(c, lo, hi); }

/* With every call hooked (secure mode with the ledger, leak stacks) the direct table stays
 * empty: every fg_malloc then misses into its hooked path, and the fast path needs no test for it. */
static void set_direct(fg_heap_t *heap, fg_page_queue_t *q, fg_page_t *first) {
  if (first != NULL) _fg_page_unkeep(heap, first); /* malloc's fast path hands out its blocks */
  size_t lo, hi;
  if (q == &heap->full || q == &heap->woken || _fg_hooked_all() || !direct_words((size_t)(q - heap->queues), &lo, &hi))
    return;
  fg_page_t *target = first != NULL ? first : &_fg_page_empty;
  for (size_t w = lo; w <= hi; w++) heap->direct[w] = target;
}

void _fg_queue_push_front(fg_heap_t *heap, fg_page_queue_t *q, fg_page_t *page) {
  page->prev = NULL;
  page->next = q->first;
  if (q->first != NULL)
    q->first->prev = page;
  else
    q->last = page;
  q->first = page;
  set_direct(heap, q, page);
}

void _fg_queue_push_back(fg_heap_t *heap, fg_page_queue_t *q, fg_page_t *page) {
  page->next = NULL;
  page->prev = q->last;
  if (q->last != NULL)
    q->last->next = page;
  else {
    q->first = page;
    set_direct(heap, q, page);
  }
  q->last = page;
}

void _fg_queue_remove(fg_heap_t *heap, fg_page_queue_t *q, fg_page_t *page) {
  if (page->prev != NULL) page->prev->next = page->next;
  if (page->next != NULL) page->next->prev = page->prev;
  if (q->last == page) q->last = page->prev;
  if (q->first == page) {
    q->first = page->next;
    set_direct(heap, q, q->first);
  }
  page->next = page->prev = NULL;
}
