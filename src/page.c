/* page.c — one page: blocks of one size class handed out from `free`, owner frees gathered
 * on `local_free`, other threads' frees on the atomic `xthread_free` stack. Keeping three
 * lists lets malloc and a local free touch no shared cache line and take no atomic. Blocks
 * are carved lazily, a few KiB at a time, so a page only commits what is used.
 * Also the heap's page queues (doubly linked; the first page of a class is the one its
 * direct-table entries point at). */
#include "internal.h"

void _fg_page_init(fg_page_t *page, fg_heap_t *heap, size_t class_idx) {
  fg_segment_t *s = _fg_segment_of(page);
  size_t bsize = _fg_class_size(class_idx);
  uint8_t *start;
  size_t area = _fg_page_area(s, page, &start);
  page->start = start;
  page->block_size = bsize;
  page->class_idx = (uint8_t)class_idx;
  page->reserved = (uint32_t)(area / bsize);
  page->capacity = 0;
  page->used = 0;
  unsigned k = (unsigned)__builtin_ctzl(bsize);
  uint64_t odd = bsize >> k, inv = odd; /* Newton's iteration: each step doubles the bits */
  for (int i = 0; i < 5; i++) inv *= 2 - odd * inv;
  page->inv = inv;
  page->inv_shift = (uint8_t)k;
  page->key = (heap->key ^ ((uintptr_t)page * 0x9e3779b97f4a7c15u)) | ((uintptr_t)1 << 63);
  page->free = page->local_free = NULL;
  atomic_store_explicit(&page->xthread_free, 0, memory_order_relaxed);
  page->fresh = page->purged; /* carving uncommitted memory faults: the ledger counts it */
  page->purged = 0;
  page->has_aligned = 0;
  _fg_bump(&heap->counts[FG_C_pages_new], 1);
  page->next = page->prev = NULL;
  page->heap = heap;
}

/* Carve the next blocks into `free`: 4 KiB worth at a time, or one block of 4 KiB or more.
 * Carving writes each block's first word, so every block carved commits a page: carving 4
 * big blocks at once cost the seed-1 process its "peak RSS at most glibc's". */
bool _fg_page_extend(fg_page_t *page) {
  uint32_t left = page->reserved - page->capacity;
  if (left == 0) return false;
  size_t bsize = page->block_size;
  uint32_t n = (uint32_t)(FG_OS_PAGE / bsize);
  if (n < 1) n = 1;
  if (n > left) n = left;
  uint8_t *first = page->start + (size_t)page->capacity * bsize;
  if (fg_unlikely(_fg_secure_on)) {
    _fg_secure_carve(page, first, n);
  } else {
    uint8_t *b = first;
    for (uint32_t i = 0; i + 1 < n; i++, b += bsize) ((fg_block_t *)b)->next = _fg_encode(page, b + bsize);
    ((fg_block_t *)b)->next = _fg_encode(page, page->free);
    page->free = (fg_block_t *)first;
  }
  page->capacity += n;
  /* Carving writes each block's first word: small blocks touch all their pages, a block
   * of 4 KiB or more touches one. */
  if (page->fresh)
    _fg_bump(&page->heap->counts[FG_C_fresh_bytes], (uint64_t)n * (bsize < FG_OS_PAGE ? bsize : FG_OS_PAGE));
  return true;
}

/* Move frees into `free`: the owner's, and what other threads pushed (one atomic exchange
 * that keeps the full bit). */
void _fg_page_collect(fg_page_t *page) {
  if (page->local_free != NULL && page->free == NULL) {
    page->free = page->local_free;
    page->local_free = NULL;
  }
  uintptr_t tf = atomic_load_explicit(&page->xthread_free, memory_order_relaxed);
  if ((tf & ~FG_TF_FULL) == 0) return;
  while (!atomic_compare_exchange_weak_explicit(&page->xthread_free, &tf, tf & FG_TF_FULL,
                                                memory_order_acq_rel, memory_order_relaxed)) {
  }
  fg_block_t *head = (fg_block_t *)(tf & ~FG_TF_FULL), *tail = head;
  uint32_t count = 1;
  for (fg_block_t *n; (n = _fg_decode(page, tail->next)) != NULL; tail = n) {
    if (fg_unlikely(count > page->capacity)) _fg_misuse("corrupted thread-free list in page", page);
    count++;
  }
  tail->next = _fg_encode(page, page->free);
  page->free = head;
  page->used -= count;
}

static bool list_holds(const fg_page_t *page, const fg_block_t *list, const void *b) {
  uint32_t n = 0;
  for (; list != NULL && n <= page->capacity; list = _fg_decode(page, list->next), n++)
    if (list == b) return true;
  return false;
}

/* Slow confirmation of a suspected double free: is b on any of the page's free lists? */
bool _fg_page_holds_free(fg_page_t *page, const void *b) {
  uintptr_t tf = atomic_load_explicit(&page->xthread_free, memory_order_acquire);
  return list_holds(page, page->free, b) || list_holds(page, page->local_free, b) ||
         list_holds(page, (fg_block_t *)(tf & ~FG_TF_FULL), b);
}

/* The side array stays with the page slot when the page is released (a FIFO's pages come
 * and go every round: an mmap each time doubled the ledger's cost); segment.c frees it when
 * the whole segment goes. Stale entries are harmless: every block of a page is recorded when
 * it is handed out, before anything reads its entry. */
uint32_t *_fg_page_requested_slot(fg_page_t *page, const void *p, bool create) {
  if (page->heap == NULL || (const uint8_t *)p < page->start) return NULL;
  size_t off = (size_t)((const uint8_t *)p - page->start);
  size_t idx = _fg_block_index(page, off);
  if (idx >= page->capacity) idx = off / page->block_size; /* aligned interior, or beyond */
  if (idx >= page->capacity) return NULL;
  if (page->requested == NULL || page->requested_cap < page->reserved) {
    if (!create) return NULL;
    if (page->requested != NULL) _fg_os_free(page->requested, page->requested_cap * sizeof(uint32_t));
    page->requested = _fg_os_alloc_aligned(page->reserved * sizeof(uint32_t), FG_OS_PAGE);
    page->requested_cap = page->requested != NULL ? page->reserved : 0;
    if (page->requested == NULL) return NULL;
  }
  return &page->requested[idx];
}

/* ---- page queues --------------------------------------------------------------------------- */

/* With the hooks on (ledger, secure mode) the direct table stays empty: every fg_malloc then
 * misses into its hooked path, and the fast path needs no test of its own for them. */
static void set_direct(fg_heap_t *heap, fg_page_queue_t *q, fg_page_t *first) {
  if (q == &heap->full || _fg_hooked) return;
  size_t c = (size_t)(q - heap->queues);
  size_t hi = _fg_class_size(c);
  if (hi > FG_DIRECT_MAX) return;
  size_t lo = c == 0 ? 0 : (_fg_class_size(c - 1) + 8) / 8; /* first word count of the class */
  fg_page_t *target = first != NULL ? first : &_fg_page_empty;
  for (size_t w = lo; w <= hi / 8; w++) heap->direct[w] = target;
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
