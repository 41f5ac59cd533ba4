/* large.c — blocks above the largest size class, each a mapping of its own, and the large cache
 * that keeps a hot loop over big buffers free of page faults (seed 3) without holding what the
 * program no longer uses: reuse within 12.5 % waste (seed 1), unmapped after FRUGAL_DECAY_MS. */
#define _GNU_SOURCE
#include "internal.h"

#include <errno.h>
#include <pthread.h>

/* Two levels of cache: each heap caches what its thread frees, lock-free, up to what it had
 * live; the process cache behind it, under one spin lock, takes the rest, bounded by
 * FRUGAL_LARGE_CACHE_MB or the program's recent live peak. A request with no fit within
 * 12.5 % reshapes (mremap) the nearest cached block, cut down or grown with the pages of other
 * cached blocks, rather than map a new one while they stay resident. */
static fg_lock_t large_lock;
/* The process cache, under large_lock. With the big arrays: its 1.8 KiB, written only once
 * a process gives it large blocks, took the small variables past one page. */
static fg_big_zeros fg_large_cache_t shared;
static size_t live_bytes; /* mapped bytes of large blocks not in the process cache */
static size_t live_peak;  /* the most live_bytes was since the last decay pass */
/* ms: the last decay pass of a heap that had asked for large blocks since its previous one
 * (stamped there, not by each request: 8 threads storing the time of each 1 MiB request to
 * one cache line took 14 % more CPU in the lab's threads cell). */
static _Atomic(uint64_t) last_request;

static size_t option_bytes(void) { return (size_t)_fg_option(FG_OPTION_LARGE_CACHE_MB) << 20; }

/* Bucket b holds mappings in (2^k + j 2^(k-3), 2^k + (j+1) 2^(k-3)]: same shape as classes. */
static size_t bucket_of(size_t mapped) {
  size_t k = 63 - (size_t)__builtin_clzl(mapped - 1);
  size_t b = (k - FG_LARGE_BUCKET_MIN_SHIFT) * 8 + (((mapped - 1) >> (k - 3)) & 7);
  return b < FG_LARGE_BUCKETS ? b : FG_LARGE_BUCKETS - 1;
}

static void cache_put(fg_large_cache_t *c, fg_segment_t *s) {
  size_t b = bucket_of(s->mapped);
  s->prev = NULL;
  s->next = c->buckets[b];
  if (s->next != NULL) s->next->prev = s;
  c->buckets[b] = s;
  c->bytes += s->mapped;
}

static void cache_remove(fg_large_cache_t *c, size_t b, fg_segment_t *s) {
  if (s->prev != NULL)
    s->prev->next = s->next;
  else
    c->buckets[b] = s->next;
  if (s->next != NULL) s->next->prev = s->prev;
  c->bytes -= s->mapped;
}

/* The most recently freed cached mapping that fits `need` bytes with `offset` in front of the
 * block and wastes at most 1/8 of the block; NULL if none. */
static fg_warm fg_segment_t *cache_take(fg_large_cache_t *c, size_t need, size_t offset) {
  size_t first = bucket_of(need);
  for (size_t b = first; b < first + 3 && b < FG_LARGE_BUCKETS; b++) {
    for (fg_segment_t *s = c->buckets[b]; s != NULL; s = s->next) {
      if (s->mapped < need || (s->mapped - need) * 8 > s->mapped - offset) continue;
      cache_remove(c, b, s);
      return s;
    }
  }
  return NULL;
}

/* No cached mapping fits `need` by the 12.5 % rule: take the nearest one instead, the smallest
 * bigger one, else the biggest smaller one (NULL if the cache is empty). Mapping a new block
 * while one that could be reshaped stays resident would hold memory the program does not use:
 * random 5-25 MiB blocks, 16 live, peaked at 1.8 x glibc's RSS that way. */
static fg_warm fg_segment_t *cache_take_nearest(fg_large_cache_t *c, size_t need) {
  if (c->bytes == 0) return NULL;
  size_t first = bucket_of(need), at = 0;
  fg_segment_t *best = NULL;
  for (size_t b = first; b < FG_LARGE_BUCKETS && best == NULL; b++)
    for (fg_segment_t *s = c->buckets[b]; s != NULL; s = s->next)
      if (s->mapped >= need && (best == NULL || s->mapped < best->mapped)) best = s, at = b;
  for (size_t b = first + 1; b-- > 0 && best == NULL;)
    for (fg_segment_t *s = c->buckets[b]; s != NULL; s = s->next)
      if (s->mapped < need && (best == NULL || s->mapped > best->mapped)) best = s, at = b;
  if (best != NULL) cache_remove(c, at, best);
  return best;
}

/* Unlink the mappings cached for the decay time or longer (all of them when forced), and
 * return them linked by `next`. While no large block is asked for (`idle`), the cache serves
 * no hot loop (seed 3's loops ask every few ms): what it held for a tenth of the decay time
 * goes then. python3 freed its dicts' and strings' blocks at the end of each wave of its run
 * and asked again only well into the next, when its own arenas had grown: the cached blocks
 * stayed through that peak (RSS 154.3 -> 150.8 MB this way; glibc 149.5). */
static fg_segment_t *cache_expired(fg_large_cache_t *c, uint64_t now, bool force, bool idle) {
  if (c->bytes == 0) return NULL; /* the common case: no walk over the empty buckets */
  uint64_t decay = (uint64_t)_fg_option(FG_OPTION_DECAY_MS);
  if (idle) decay /= 10;
  fg_segment_t *expired = NULL;
  for (size_t b = 0; b < FG_LARGE_BUCKETS; b++) {
    for (fg_segment_t *s = c->buckets[b], *next; s != NULL; s = next) {
      next = s->next;
      if (!force && s->freed_at + decay > now) continue;
      cache_remove(c, b, s);
      s->next = expired;
      expired = s;
    }
  }
  return expired;
}

/* ---- blocks of several mappings ---------------------------------------------------------------- */

/* A block grown with other cached blocks' pages (grow, below) is several kernel mappings side
 * by side: the kernel does not merge anonymous mappings faulted apart, and mremap resizes or
 * moves a range only inside one mapping (EFAULT otherwise). So a large block keeps where each
 * of its mappings ends, in its header page behind the lone page entry (no small segment's
 * header grows for it). A list finer than the kernel's (mappings it did merge) is still right:
 * each piece lies inside one mapping, which is all mremap needs. */
/* A bound on the mremap calls one move makes. Random 5-25 MiB blocks, 16 live: 8 took 1.4 x
 * the page faults of 16 (the blocks that reached it grew with fresh pages), 32 took 0.7 x,
 * and 64 or 128 no fewer than 32. */
#define PIECES_MAX 32
typedef struct {
  uint32_t count;
  size_t end[PIECES_MAX]; /* bytes from the block's start, increasing; the last is `mapped` */
} pieces_t;
#define PIECES_AT ((sizeof(fg_segment_t) + sizeof(fg_page_t) + 15) & ~(size_t)15)
_Static_assert(PIECES_AT + sizeof(pieces_t) <= FG_OS_PAGE, "a large block's header page holds its pieces");
/* Where a block's bytes start (alignments up to this need nothing more): in its header's page,
 * behind the pieces, so that a program that writes a block's first bytes has one page
 * resident less than with the bytes starting on the next page (the lab's 8 threads of 1,000
 * live 1 MiB blocks written at both ends: 3 pages a block, glibc's 2). */
#define USER_AT ((PIECES_AT + sizeof(pieces_t) + 63) & ~(size_t)63)

static pieces_t *pieces(fg_segment_t *s) { return (pieces_t *)((uint8_t *)s + PIECES_AT); }

/* Mappings beyond one per block, over every large block: each is a kernel mapping, and a
 * process has at most vm.max_map_count of them (65,530 by default; past it every mmap fails,
 * thread stacks included). Thousands of big blocks of 16 pieces would get there, so blocks
 * are grown from other blocks' pages only while this stays under EXTRA_MAX, an eighth of
 * that default. Only grow adds to it; cuts, shrinks and moves never do. */
#define EXTRA_MAX 8192
static _Atomic(long) extra_pieces;

static long extra_of(const pieces_t *p) { return (long)p->count - 1; }

static void extra_add(long delta) {
  if (delta != 0) atomic_fetch_add_explicit(&extra_pieces, delta, memory_order_relaxed);
}

/* The blocks of a list (linked by `next`) back to the OS. */
static void unmap_list(fg_segment_t *list, int counter) {
  long extra = 0;
  for (fg_segment_t *s = list; s != NULL; s = s->next) extra += extra_of(pieces(s));
  extra_add(-extra);
  _fg_segment_unmap_list(list, counter);
}

/* s is one mapping: every large block starts so. */
static void pieces_one(fg_segment_t *s) {
  pieces(s)->count = 1;
  pieces(s)->end[0] = s->mapped;
}

/* The pieces of a block cut to its first `keep` bytes. */
static void pieces_cut(pieces_t *p, size_t keep) {
  uint32_t i = 0;
  while (p->end[i] < keep) i++;
  p->end[i] = keep;
  p->count = i + 1;
}

/* How many of src's pieces bytes [from, to) cross. */
static uint32_t pieces_in(const pieces_t *src, size_t from, size_t to) {
  uint32_t n = 0;
  for (uint32_t i = 0; i < src->count; i++)
    if (src->end[i] > from && (i == 0 ? 0 : src->end[i - 1]) < to) n++;
  return n;
}

/* Bytes [from, to) of a block whose pieces are src now sit at offset `at` of the block of p. */
static void pieces_add(pieces_t *p, size_t at, const pieces_t *src, size_t from, size_t to) {
  for (uint32_t i = 0; i < src->count; i++) {
    size_t lo = i == 0 ? 0 : src->end[i - 1], hi = src->end[i];
    if (hi <= from || lo >= to) continue;
    p->end[p->count++] = at + (hi < to ? hi : to) - from;
  }
}

/* Move bytes [from, to) of the block at base (pieces p, a copy: the header may be among them)
 * onto dst, one mremap per piece; the pages go with their page tables, none is faulted again.
 * Returns where it stopped: `to` when all moved, else the start of the piece that did not
 * (what lies before it moved, what lies from it on is still at base). */
static size_t move_range(uint8_t *base, const pieces_t *p, size_t from, size_t to, uint8_t *dst) {
  for (uint32_t i = 0; i < p->count; i++) {
    size_t lo = i == 0 ? 0 : p->end[i - 1], hi = p->end[i] < to ? p->end[i] : to;
    if (lo < from) lo = from;
    if (lo < hi && !_fg_os_move(base + lo, hi - lo, dst + (lo - from), hi - lo)) return lo;
  }
  return to;
}

/* Give back s's bytes from `size` on (munmap takes a range of several mappings). */
static void shrink(fg_segment_t *s, size_t size) {
  long extra = extra_of(pieces(s));
  _fg_os_free((uint8_t *)s + size, s->mapped - size);
  pieces_cut(pieces(s), size);
  s->mapped = size;
  extra_add(extra_of(pieces(s)) - extra);
}

/* Grow s's last mapping to make s `size` bytes long where it is: false when the address space
 * behind it is taken. */
static bool grow_in_place(fg_segment_t *s, size_t size) {
  pieces_t *p = pieces(s);
  size_t last = p->count > 1 ? p->end[p->count - 2] : 0;
  if (!_fg_os_resize((uint8_t *)s + last, s->mapped - last, size - last)) return false;
  p->end[p->count - 1] = size;
  s->mapped = size;
  return true;
}

/* Move s onto a new segment-aligned range of `size` >= s->mapped bytes, its last mapping
 * growing as it moves (fresh zero pages; no new piece). NULL, with s given back, when no
 * range is to be had or a move fails. */
static fg_segment_t *relocate(fg_segment_t *s, size_t size) {
  pieces_t p = *pieces(s);
  size_t old = s->mapped, stop = 0;
  /* Out of the segment map before the move: once moved, s's range is free, and another
   * thread may map a segment there and register it, which a later clear would undo (its
   * blocks would then be "not a frugal pointer", as the threaded stress test under LD_PRELOAD
   * shows). */
  _fg_segmap_set(s, false);
  fg_segment_t *t = _fg_os_alloc_aligned(size, FG_SEGMENT_SIZE);
  for (uint32_t i = 0; t != NULL && i < p.count; i++, stop = old) {
    size_t lo = i == 0 ? 0 : p.end[i - 1], hi = i + 1 < p.count ? p.end[i] : size;
    if (!_fg_os_move((uint8_t *)s + lo, p.end[i] - lo, (uint8_t *)t + lo, hi - lo)) {
      stop = lo;
      break;
    }
  }
  if (stop < old) { /* what moved is in t's range, the rest still in s's: both go back */
    if (t != NULL) _fg_os_free(t, size);
    _fg_os_free((uint8_t *)s + stop, old - stop);
    _fg_count(FG_C_large_cache_evictions, 1);
    return NULL;
  }
  _fg_segment_large_init(t, size);
  *pieces(t) = p;
  pieces(t)->end[p.count - 1] = size;
  return t;
}

/* ---- the process cache ------------------------------------------------------------------------- */

/* Into the process cache if it has room, else onto `evicted` for unmapping. Room is the
 * option or the live peak, whichever is more (a fixed 1 GiB bound made the lab's 2 threads
 * map and unmap 6,000 blocks: 0.4 s instead of 0.03). Called with
 * large_lock held, for a block that leaves the live ones. */
static void shared_put_locked(fg_segment_t *s, fg_segment_t **evicted) {
  size_t limit = option_bytes();
  if (limit < live_peak) limit = live_peak;
  live_bytes -= s->mapped;
  if (shared.bytes + s->mapped <= limit) {
    cache_put(&shared, s);
    return;
  }
  s->next = *evicted;
  *evicted = s;
}

/* Blocks to the process cache (a list linked by `next`), under one lock. */
static fg_warm void shared_put_list(fg_segment_t *list) {
  fg_segment_t *evicted = NULL;
  _fg_lock(&large_lock);
  for (fg_segment_t *next; list != NULL; list = next) {
    next = list->next;
    shared_put_locked(list, &evicted);
  }
  _fg_unlock(&large_lock);
  if (evicted != NULL) _fg_event(1, "large cache full: a freed block goes back to the OS at once");
  unmap_list(evicted, FG_C_large_cache_evictions);
}

/* ---- the heaps' caches ------------------------------------------------------------------------ */

/* The calling thread's heap; NULL for a thread that has none (it never allocated, or its
 * exit is under way), unless `adopt`: then it gets one, as its first small block would. */
static fg_heap_t *own_heap(bool adopt) {
  fg_heap_t *heap = _fg_heap();
  if (heap != &_fg_heap_empty) return heap;
  return adopt ? _fg_heap_init_thread() : NULL;
}

/* How many bytes a heap may keep cached: what its thread had live since the decay pass, up
 * to FRUGAL_LARGE_CACHE_MB. (With the process cache alone, the lab's 2 threads cycling 1 MiB
 * blocks took its lock in turn for every block: 5x slower than one thread.) A thread that frees other threads' blocks (a consumer) has
 * nothing live and keeps nothing: its blocks go where their producers find them. (With a
 * 32 MiB allowance for every heap, the churn test's main thread, freeing what 10,000
 * threads left it, sat on 32 MiB while they mapped new blocks.) */
static size_t heap_limit(const fg_heap_t *heap) {
  size_t bound = option_bytes(), peak = heap->large_peak > 0 ? (size_t)heap->large_peak : 0;
  return peak < bound ? peak : bound;
}

/* A heap that takes a block from the process cache takes up to BATCH_COUNT - 1 more that
 * fit the same request, if it has room and they come to BATCH_BYTES or less: a thread that
 * allocates what another frees (a producer) then takes the lock once per batch. (The lab's
 * cross-thread 1 MiB cells, 2 threads: 85 -> 70 ms, mimalloc 84. Consumers sending their
 * frees in batches too gained a little more but held blocks producers could not reach: the
 * churn test's peak RSS went from 27 to 43 MiB.) */
#define BATCH_COUNT 8
#define BATCH_BYTES ((size_t)4 << 20)

/* The heap's decay pass (heap.c): blocks cached past the decay time go to the process cache,
 * whose own pass then unmaps them; all of them when forced or when the thread is gone. */
void _fg_large_heap_collect(fg_heap_t *heap, uint64_t now, bool force) {
  if (!heap->owned) heap->large_live = 0;                         /* what it had live is now anybody's */
  heap->large_peak = heap->large_live > 0 ? heap->large_live : 0; /* a new decay period */
  uint32_t n = atomic_load_explicit(&heap->large_requests, memory_order_relaxed);
  bool idle = n == heap->large_requests_seen; /* none since the last pass */
  heap->large_requests_seen = n;
  if (!idle) atomic_store_explicit(&last_request, now, memory_order_relaxed);
  _fg_lock(&heap->lock);
  fg_segment_t *expired = cache_expired(&heap->large_cache, now, force || !heap->owned, idle);
  _fg_unlock(&heap->lock);
  if (expired != NULL) shared_put_list(expired);
}

/* The purger's pass over a heap whose thread may be quiet: only what outlived the decay
 * time moves to the process cache (whose own pass then unmaps it). */
bool _fg_large_heap_expire(fg_heap_t *heap, uint64_t now) {
  _fg_lock(&heap->lock);
  uint32_t n = atomic_load_explicit(&heap->large_requests, memory_order_relaxed);
  bool idle = n == heap->large_requests_purged; /* none since the purger's last look */
  heap->large_requests_purged = n;
  fg_segment_t *expired = cache_expired(&heap->large_cache, now, false, idle);
  bool left = heap->large_cache.bytes != 0;
  _fg_unlock(&heap->lock);
  if (expired != NULL) shared_put_list(expired);
  return left;
}

/* ---- reshaping a cached block to a request ----------------------------------------------------- */

/* Reshaping a cached mapping to a request that does not fit it keeps its resident pages in
 * use: mremap moves pages with their page tables, so nothing is copied or faulted again.
 * Shrunk, a block's tail becomes a cached block of its own while the heap's cache stays under
 * half of what the thread has live in large blocks (16 MiB at least), else goes back to the
 * OS. Grown, it takes the pages of other cached blocks before any fresh ones (grow), so the
 * tails kept are spent rather than held: resident memory grows only when the cache has none
 * to give. Random 5-25 MiB blocks, 16 live, every page touched (glibc: 376 MB peak, 285k page
 * faults), two seeds: tails kept up to live / 6, 315-324 MB and 137-156k faults; live / 3,
 * 315-324 MB and 93-98k; live / 2, the same peak and 86-88k; all of live, 85-86k. */
#define SPLIT_MIN ((size_t)1 << 20) /* a smaller tail is not worth a mapping */
static size_t split_bound(const fg_heap_t *heap) {
  size_t half = heap->large_live > 0 ? (size_t)heap->large_live / 2 : 0;
  return half > ((size_t)16 << 20) ? half : (size_t)16 << 20;
}

/* Cut s down to `keep` bytes: its tail becomes a cached block of its own in `c` (the heap
 * cache s came from; NULL: the process cache, which keeps no tails) if it has room, else goes
 * back to the OS. */
static fg_warm void cut(fg_segment_t *s, size_t keep, fg_heap_t *heap, fg_large_cache_t *c) {
  size_t tail = s->mapped - keep;
  if (c != NULL && tail >= SPLIT_MIN && c->bytes + tail <= split_bound(heap)) {
    pieces_t p = *pieces(s);
    fg_segment_t *t = _fg_os_alloc_aligned(tail, FG_SEGMENT_SIZE);
    size_t stop = t != NULL ? move_range((uint8_t *)s, &p, keep, s->mapped, (uint8_t *)t) : keep;
    long extra = 0; /* of the tail, then less what s had */
    if (stop == s->mapped) {
      _fg_segment_large_init(t, tail);
      pieces(t)->count = 0;
      pieces_add(pieces(t), 0, &p, keep, s->mapped);
      t->freed_at = s->freed_at;
      atomic_store_explicit(&t->large_state, FG_LARGE_FREE, memory_order_relaxed);
      _fg_secure_guard_seal(t, tail); /* s's, lifted by reshape */
      cache_put(c, t);
      extra = extra_of(pieces(t));
    } else {
      if (t != NULL) _fg_os_free(t, tail); /* a move failed: what moved goes back with t's range */
      _fg_os_free((uint8_t *)s + stop, s->mapped - stop);
    }
    pieces_cut(pieces(s), keep);
    s->mapped = keep;
    extra_add(extra + extra_of(pieces(s)) - extra_of(&p));
    return;
  }
  shrink(s, keep);
}

/* What grow takes from one cached block: its last `bytes`. */
typedef struct {
  fg_segment_t *s;
  size_t bytes;
} donor_t;

/* Take the blocks' pages from the cache, smallest blocks first, up to `want` bytes in at most
 * `room` pieces. A block keeps its head when that is worth a block (SPLIT_MIN), else its head
 * goes back to the OS. Smallest first spends the small blocks whole, which alone serve
 * nothing; random 5-25 MiB blocks, 16 live, 3 seeds, against biggest first: 22 % fewer mremap
 * calls, 1-7 % fewer page faults, peak RSS 0-5 % lower. */
static uint32_t take_donors(fg_large_cache_t *c, size_t want, uint32_t room, donor_t *d) {
  uint32_t n = 0;
  for (size_t b = 0; b < FG_LARGE_BUCKETS && want > 0 && c->bytes > 0 && room > 0; b++) {
    for (fg_segment_t *s = c->buckets[b], *next; s != NULL && want > 0 && room > 0; s = next) {
      next = s->next;
      size_t take = s->mapped < want ? s->mapped : want;
      uint32_t k = pieces_in(pieces(s), s->mapped - take, s->mapped);
      if (k > room) continue;
      cache_remove(c, b, s);
      d[n].s = s;
      d[n].bytes = take;
      n++;
      room -= k;
      want -= take;
    }
  }
  return n;
}

/* Make s (cached, in `c` unless NULL) `need` > s->mapped bytes long: its own pages where they
 * are, then the pages of other blocks of the cache, then fresh ones. Random 5-25 MiB blocks,
 * 16 live: growing with fresh pages alone took 1.3 x glibc's page faults (372k against 285k),
 * the cache's spare pages sitting in tails too small for the request; with the cache's pages,
 * 88k. NULL, with s given back, when no mapping is to be had. */
static fg_warm fg_segment_t *grow(fg_segment_t *s, size_t need, fg_large_cache_t *c) {
  size_t old = s->mapped;
  pieces_t p = *pieces(s);
  donor_t d[PIECES_MAX];
  /* The donors' pieces, and one for the fresh rest, fit in the list; without donors the
   * growth extends s's last mapping. */
  uint32_t room = PIECES_MAX - p.count;
  long spare = EXTRA_MAX - atomic_load_explicit(&extra_pieces, memory_order_relaxed);
  if (spare < (long)room) room = spare > 0 ? (uint32_t)spare : 0;
  uint32_t n = c != NULL && room > 1 ? take_donors(c, need - old, room - 1, d) : 0;
  long extra = extra_of(&p); /* of the blocks this takes, then of those it leaves */
  for (uint32_t i = 0; i < n; i++) extra += extra_of(pieces(d[i].s));
  /* Donors whose head is not worth keeping leave the segment map before anything moves. */
  for (uint32_t i = 0; i < n; i++)
    if (d[i].s->mapped - d[i].bytes < SPLIT_MIN) _fg_segmap_set(d[i].s, false);
  fg_segment_t *t = s;
  if (!grow_in_place(s, need) && (t = relocate(s, need)) == NULL) {
    for (uint32_t i = 0; i < n; i++) { /* the donors stay as they were */
      _fg_segmap_set(d[i].s, true);
      cache_put(c, d[i].s);
    }
    extra_add(-extra_of(&p));
    return NULL;
  }
  if (n == 0) {
    _fg_count(FG_C_fresh_large_bytes, need - old);
    return t;
  }
  pieces_t *tp = pieces(t);
  *tp = p; /* its own pieces, then each donor's, then the fresh rest */
  size_t at = old;
  long left = 0;
  for (uint32_t i = 0; i < n; i++) {
    fg_segment_t *x = d[i].s;
    _fg_secure_guard_lift(x, x->mapped); /* it moves with x's last pages */
    pieces_t xp = *pieces(x); /* read first: x's header may move */
    size_t end = x->mapped, from = end - d[i].bytes;
    size_t stop = move_range((uint8_t *)x, &xp, from, end, (uint8_t *)t + at);
    pieces_add(tp, at, &xp, from, end); /* a failed move leaves t's own pages there */
    at += d[i].bytes;
    if (stop < end) _fg_os_free((uint8_t *)x + stop, end - stop);
    if (from >= SPLIT_MIN) { /* its head stays cached, where it is */
      pieces_cut(pieces(x), from);
      x->mapped = from;
      _fg_secure_guard_seal(x, from);
      cache_put(c, x);
      left += extra_of(pieces(x));
    } else if (from > 0) {
      _fg_os_free(x, from);
    }
  }
  if (at < need) tp->end[tp->count++] = need;
  t->mapped = need;
  extra_add(extra_of(tp) + left - extra);
  _fg_count(FG_C_fresh_large_bytes, need - at);
  return t;
}

/* Make s `need` bytes long; `c`: the heap cache it came from (NULL: the process cache), which
 * may take its tail or give it pages. NULL, with s given back, when no mapping is to be had. */
static fg_segment_t *reshape(fg_segment_t *s, size_t need, fg_heap_t *heap, fg_large_cache_t *c) {
  _fg_secure_guard_lift(s, s->mapped); /* secure mode: the guard moves to the new end */
  if (need < s->mapped)
    cut(s, need, heap, c);
  else
    s = grow(s, need, c);
  if (s != NULL) _fg_secure_guard_seal(s, s->mapped);
  return s;
}

/* ---- allocation and free ---------------------------------------------------------------------- */

/* The nearest cached mapping, the heap's or else the process's, reshaped to `need` bytes. In
 * secure mode its guard page is lifted while it is reshaped, and put back at its new end. */
static fg_segment_t *take_nearest(fg_heap_t *heap, size_t need) {
  fg_large_cache_t *c = heap != NULL ? &heap->large_cache : NULL;
  if (c != NULL) _fg_lock(&heap->lock);
  fg_segment_t *s = c != NULL ? cache_take_nearest(c, need) : NULL;
  size_t held = 0, now_held = 0; /* mapped bytes counted live before and after */
  if (s != NULL) {
    held = s->mapped + c->bytes;
    s = reshape(s, need, heap, c);
    now_held = (s != NULL ? s->mapped : 0) + c->bytes;
  }
  if (c != NULL) _fg_unlock(&heap->lock);
  if (s == NULL && held == 0) {
    _fg_lock(&large_lock);
    if ((s = cache_take_nearest(&shared, need)) != NULL) live_bytes += s->mapped;
    _fg_unlock(&large_lock);
    if (s == NULL) return NULL;
    held = s->mapped;
    s = reshape(s, need, heap, NULL);
    now_held = s != NULL ? s->mapped : 0;
  }
  if (s != NULL) _fg_count(FG_C_large_cache_reshapes, 1);
  _fg_lock(&large_lock);
  live_bytes = live_bytes - held + now_held;
  if (live_bytes > live_peak) live_peak = live_bytes;
  _fg_unlock(&large_lock);
  return s;
}

/* calloc of a reused block: its whole pages go back to the kernel, which gives zero pages
 * again as the program touches them (glibc's calloc of a fresh mapping costs the same), and
 * only the partial pages at its ends are cleared here. A memset touched every page: a
 * program that callocs a big buffer and uses a corner of it (gdk-pixbuf's JPEG tests) held
 * 12 GB resident where glibc held 50 MB. */
void _fg_large_zero(void *block, size_t size) {
  uint8_t *p = block;
  uintptr_t start = fg_align_up((uintptr_t)p, FG_OS_PAGE), end = ((uintptr_t)p + size) & ~(FG_OS_PAGE - 1);
  if (end <= start) {
    memset(p, 0, size);
    return;
  }
  memset(p, 0, start - (uintptr_t)p);
  _fg_os_purge((void *)start, end - start);
  memset((void *)end, 0, (uintptr_t)p + size - end);
}

fg_warm void *_fg_large_alloc(size_t size, size_t align, bool zero) {
  if (size > FG_MAX_ALLOC) {
    errno = ENOMEM;
    return NULL;
  }
  size_t offset = align > FG_OS_PAGE ? align : align > 64 ? fg_align_up(USER_AT, align) : USER_AT;
  size_t need = fg_align_up(offset + size, FG_OS_PAGE) + _fg_secure_guard();
  fg_heap_t *heap = own_heap(true); /* a thread of large blocks only caches them too */
  if (heap != NULL) /* for the decay passes: the cache is in use (owner-written: no locked add) */
    atomic_store_explicit(&heap->large_requests, atomic_load_explicit(&heap->large_requests, memory_order_relaxed) + 1,
                          memory_order_relaxed);
  fg_segment_t *s = NULL;
  if (heap != NULL) {
    _fg_lock(&heap->lock); /* then large_lock, never the other way (init.c's fork order) */
    s = cache_take(&heap->large_cache, need, offset);
  }
  if (s == NULL) {
    _fg_lock(&large_lock);
    s = cache_take(&shared, need, offset);
    if (s != NULL) live_bytes += s->mapped;
    size_t batch = s != NULL ? s->mapped : 0;
    for (uint32_t i = 1; s != NULL && heap != NULL && i < BATCH_COUNT; i++) { /* and a few more */
      if (heap->large_cache.bytes + s->mapped > heap_limit(heap) || (batch += s->mapped) > BATCH_BYTES) break;
      fg_segment_t *more = cache_take(&shared, need, offset);
      if (more == NULL) break;
      live_bytes += more->mapped;
      cache_put(&heap->large_cache, more);
    }
    if (live_bytes > live_peak) live_peak = live_bytes;
    _fg_unlock(&large_lock);
  }
  if (heap != NULL) _fg_unlock(&heap->lock);
  bool fresh = s == NULL;
  if (fresh && (s = take_nearest(heap, need)) != NULL) fresh = false;
  if (heap != NULL)
    _fg_bump(&heap->counts[fresh ? FG_C_large_cache_misses : FG_C_large_cache_hits], 1);
  else
    _fg_count(fresh ? FG_C_large_cache_misses : FG_C_large_cache_hits, 1);
  if (fresh) {
    _fg_process_init();
    s = _fg_segment_map_large(need);
    if (s == NULL) { /* memory held in the caches may be what is missing */
      uint8_t was = _fg_returning_for(FG_BY_OOM);
      _fg_event(1, "out of memory: caches given back, retrying");
      _fg_collect_all(heap != NULL ? heap : &_fg_heap_empty, true);
      _fg_returning_end(was);
      s = _fg_segment_map_large(need);
    }
    if (s == NULL) {
      errno = ENOMEM;
      return NULL;
    }
  }
  if (fresh) {
    pieces_one(s);
    _fg_count(FG_C_fresh_large_bytes, size);
    _fg_secure_guard_mapping(s, s->mapped);
    _fg_lock(&large_lock);
    live_bytes += s->mapped;
    if (live_bytes > live_peak) live_peak = live_bytes;
    _fg_unlock(&large_lock);
    if (heap != NULL) _fg_heap_grew_large(heap, s->mapped);
  }
  /* Secure mode ends the block against its guard page (16-byte aligned), so an overflow past
   * the canary faults at once rather than landing in the page-rounding slack. */
  size_t slack = s->mapped - _fg_secure_guard() - offset - size;
  if (_fg_secure_on() && align <= 16 && offset + slack < FG_SEGMENT_SIZE) offset += slack & ~(size_t)15;
  s->large_offset = offset;
  s->sampled = 0; /* sample.c marks its own after this */
  atomic_store_explicit(&s->large_state, FG_LARGE_LIVE, memory_order_relaxed);
  uint8_t *p = (uint8_t *)s + offset;
  if (zero && !fresh) _fg_large_zero(p, size); /* a fresh mapping is zero already */
  if (heap != NULL) {
    heap->large_live += (int64_t)s->mapped;
    if (heap->large_live > heap->large_peak) heap->large_peak = heap->large_live;
    _fg_heap_tick(heap); /* a thread that only uses large blocks still runs its decay pass */
  }
  _fg_background_start(); /* wanted by what this call cached or grew */
  return p;
}

static fg_noinline void large_check(fg_segment_t *s, const void *p) {
  if (!_fg_cookie_ok(s)) _fg_misuse("not a frugal pointer", p);
  if ((const uint8_t *)p != (uint8_t *)s + s->large_offset) _fg_misuse("invalid pointer", p);
  if (atomic_load_explicit(&s->large_state, memory_order_relaxed) != FG_LARGE_LIVE)
    _fg_misuse("double free", p);
}

void _fg_large_free(fg_segment_t *s, const void *p) {
  if (fg_unlikely(s->guarded)) {
    _fg_guard_free(s, p);
    return;
  }
  large_check(s, p);
  if (fg_unlikely(s->sampled)) _fg_sample_free(s);
  uint32_t live = FG_LARGE_LIVE;
  if (!atomic_compare_exchange_strong(&s->large_state, &live, FG_LARGE_FREE)) _fg_misuse("double free", p);
  s->freed_at = _fg_clock_ms();
  fg_heap_t *heap = own_heap(false);
  if (heap == NULL) {
    s->next = NULL;
    shared_put_list(s);
    return;
  }
  heap->large_live -= (int64_t)s->mapped;
  _fg_lock(&heap->lock);
  bool keep = heap->large_cache.bytes + s->mapped <= heap_limit(heap);
  if (keep) cache_put(&heap->large_cache, s);
  _fg_unlock(&heap->lock);
  if (!keep) {
    s->next = NULL;
    shared_put_list(s);
  }
  _fg_purger_wake();
  _fg_heap_tick(heap);
}

size_t _fg_large_usable(fg_segment_t *s, const void *p) {
  if (fg_unlikely(s->guarded)) return _fg_guard_usable(s, p);
  large_check(s, p);
  /* A sampled small block is as usable as the plain path's block would be: a program behaves
   * the same, sampled or not (a sized delete of it is checked against its class). */
  if (fg_unlikely(s->sampled) && s->sample_size <= FG_CLASS_MAX) return _fg_class_size(_fg_class_of(s->sample_size));
  return s->mapped - s->large_offset - _fg_secure_guard();
}

/* A live block was resized from `old` mapped bytes: the process's count of live mapped bytes
 * follows (it would wrap below zero when the block is freed, and its peak bounds the process
 * cache). The heap's own count keeps the size the block was allocated with, as it always has:
 * counting the growth there raised the heap cache's bound (the thread's live peak) with it,
 * and python3's full-size footprint peak by 1.5 MB (its json encoder's buffers grow in place). */
static void live_resized(const fg_segment_t *s, size_t old) {
  _fg_lock(&large_lock);
  live_bytes = live_bytes - old + s->mapped;
  if (live_bytes > live_peak) live_peak = live_bytes;
  _fg_unlock(&large_lock);
}

/* A live block that cannot grow where it is (the address space behind it taken) moves: mremap
 * carries its pages with their page tables onto a new segment-aligned range whose tail is
 * fresh, so nothing is copied and the old and the new block are never resident together, as
 * glibc's realloc moves its mapped chunks (tests/realloc.c: 8 -> 12 MiB, 0 page faults against
 * the copy's 2048). One mapping only: a block of several (grown from cached blocks' pages)
 * would be left half moved by a failed mremap after the first; it is copied instead. NULL,
 * with s untouched, when it cannot move. */
static fg_segment_t *move_live(fg_segment_t *s, size_t size) {
  if (pieces(s)->count != 1 || s->sampled || _fg_secure_on()) return NULL;
  fg_segment_t *t = _fg_os_alloc_aligned(size, FG_SEGMENT_SIZE);
  if (t == NULL) return NULL;
  size_t old = s->mapped;
  /* Out of the segment map before the move, as relocate does: once moved, s's range is free
   * for another thread's segment, whose registration a later clear would undo. */
  _fg_segmap_set(s, false);
  if (!_fg_os_move(s, old, t, size)) {
    _fg_segmap_set(s, true);
    _fg_os_free(t, size);
    return NULL;
  }
  _fg_segment_large_init(t, size); /* the header moved with the block: offset and state too */
  pieces_one(t);
  return t;
}

/* Resize when the pages can follow: shrink in place, grow into free address space behind the
 * block, else move the pages (move_live). No copy, no fault on the kept pages. NULL when the
 * block must be copied. */
fg_warm void *_fg_large_realloc(fg_segment_t *s, void *p, size_t size) {
  /* A guarded block moves (the caller's _fg_large_usable checks it), and so does a sample,
   * whose usable size is its request's class. */
  if (s->guarded || s->sampled) return NULL;
  large_check(s, p);
  size_t usable = s->mapped - s->large_offset - _fg_secure_guard(), old = s->mapped;
  if (size <= usable) { /* shrink in place when more than 12.5 % would stay unused */
    size_t want = fg_align_up(s->large_offset + size, FG_OS_PAGE);
    if ((usable - size) * 8 > usable && want < s->mapped) {
      shrink(s, want);
      live_resized(s, old);
    }
    return p;
  }
  if (size > usable && size <= FG_MAX_ALLOC) {
    size_t want = fg_align_up(s->large_offset + size, FG_OS_PAGE);
    fg_segment_t *t = grow_in_place(s, want) ? s : move_live(s, want);
    if (t != NULL) {
      _fg_count(FG_C_fresh_large_bytes, want - old);
      fg_heap_t *heap = _fg_heap();
      if (heap != &_fg_heap_empty) _fg_heap_grew_large(heap, want - old);
      live_resized(t, old);
      return (uint8_t *)t + t->large_offset;
    }
  }
  return NULL;
}

/* The process cache's blocks unused for the decay time go back to the OS (all when forced). */
bool _fg_large_cache_collect(uint64_t now, bool force) {
  _fg_lock(&large_lock);
  live_peak = live_bytes; /* a new decay period */
  uint64_t decay = (uint64_t)_fg_option(FG_OPTION_DECAY_MS);
  bool idle = now >= atomic_load_explicit(&last_request, memory_order_relaxed) + decay / 10;
  fg_segment_t *expired = cache_expired(&shared, now, force, idle);
  bool left = shared.bytes != 0;
  _fg_unlock(&large_lock);
  unmap_list(expired, FG_C_large_cache_decays);
  return left;
}

/* The cache's least recently freed block, unlinked (NULL when empty). */
static fg_warm fg_segment_t *cache_take_oldest(fg_large_cache_t *c) {
  fg_segment_t *oldest = NULL;
  size_t at = 0;
  for (size_t b = 0; b < FG_LARGE_BUCKETS && c->bytes != 0; b++)
    for (fg_segment_t *s = c->buckets[b]; s != NULL; s = s->next)
      if (oldest == NULL || s->freed_at < oldest->freed_at) oldest = s, at = b;
  if (oldest != NULL) cache_remove(c, at, oldest);
  return oldest;
}

/* The heap's pages of small blocks grew by `bytes` of memory never touched or given back: a
 * cached large block that sat idle meanwhile holds memory the program is not using while it
 * commits more. Give back the least recently freed ones, the heap's then the process's, up to
 * that much: RSS then follows what the program uses (sqlite3 freed 3 MiB of large blocks, then
 * grew its small blocks by 20 MiB: the cached blocks were a tenth of its peak RSS above glibc's).
 * A hot loop over a big buffer (seed 3) is not touched: it does not grow elsewhere. */
static fg_noinline fg_warm void trim_cached(fg_heap_t *heap, size_t bytes) {
  fg_segment_t *out = NULL;
  size_t taken = 0;
  _fg_lock(&heap->lock);
  for (fg_segment_t *s; taken < bytes && (s = cache_take_oldest(&heap->large_cache)) != NULL; taken += s->mapped)
    s->next = out, out = s;
  _fg_unlock(&heap->lock);
  _fg_lock(&large_lock);
  for (fg_segment_t *s = out; s != NULL; s = s->next) live_bytes -= s->mapped; /* heap-cached counted live */
  for (fg_segment_t *s; taken < bytes && (s = cache_take_oldest(&shared)) != NULL; taken += s->mapped)
    s->next = out, out = s;
  _fg_unlock(&large_lock);
  if (out == NULL) return;
  uint8_t was = _fg_returning_for(FG_BY_GROWTH);
  unmap_list(out, FG_C_large_cache_evictions);
  _fg_returning_end(was);
}

/* Every heap that grows calls here, most with no large block cached: the test stays out of
 * the warm code. */
void _fg_large_trim(fg_heap_t *heap, size_t bytes) {
  _fg_lock(&heap->lock);
  bool any = heap->large_cache.bytes != 0;
  _fg_unlock(&heap->lock);
  if (!any) {
    _fg_lock(&large_lock);
    any = shared.bytes != 0;
    _fg_unlock(&large_lock);
  }
  if (any) trim_cached(heap, bytes);
}

size_t _fg_large_heap_cached(fg_heap_t *heap) {
  _fg_lock(&heap->lock);
  size_t n = heap->large_cache.bytes;
  _fg_unlock(&heap->lock);
  return n;
}

size_t _fg_large_shared_cached(void) {
  _fg_lock(&large_lock);
  size_t n = shared.bytes;
  _fg_unlock(&large_lock);
  return n;
}

void _fg_large_lock(void) { _fg_lock(&large_lock); }
void _fg_large_unlock(void) { _fg_unlock(&large_lock); }
