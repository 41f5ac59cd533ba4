/* large.c — blocks above the largest size class (512 KiB). Each is a mapping of its own,
 * aligned like a segment so the header is found by the same mask, and goes back through the
 * large cache: buckets of mappings by size (8 per doubling), most recently freed first; a
 * request takes a cached block only if that wastes at most 12.5 % of it (seed 1: never hand
 * out "the biggest"); the cache is bounded by FRUGAL_LARGE_CACHE_MB, or by the most the program
 * had live in large blocks since the last decay pass if that is more, and when full gives the
 * block just freed back to the OS; a cached block unused for FRUGAL_DECAY_MS is unmapped,
 * which bounds how long memory is held. (The lab's 2 threads cycling 1 GiB each of 1 MiB
 * blocks mapped and unmapped 6,000 blocks under a fixed 1 GiB bound: 0.4 s instead of 0.03.)
 * This is what keeps a hot loop over 8-32 MiB buffers free of page faults (seed 3) without
 * holding memory the program no longer uses. One spin lock, held for a few list operations. */
#define _GNU_SOURCE
#include "internal.h"

#include <errno.h>
#include <pthread.h>

#define LARGE_BUCKET_MIN_SHIFT 19 /* smallest mapping > 512 KiB */
#define LARGE_BUCKETS (8 * (48 - LARGE_BUCKET_MIN_SHIFT))

static fg_lock_t large_lock;
static fg_segment_t *buckets[LARGE_BUCKETS];
static size_t cached_bytes;
static size_t live_bytes; /* mapped bytes of live large blocks */
static size_t live_peak;  /* the most live_bytes was since the last decay pass */

/* Bucket b holds mappings in (2^k + j 2^(k-3), 2^k + (j+1) 2^(k-3)]: same shape as classes. */
static size_t bucket_of(size_t mapped) {
  size_t k = 63 - (size_t)__builtin_clzl(mapped - 1);
  size_t b = (k - LARGE_BUCKET_MIN_SHIFT) * 8 + (((mapped - 1) >> (k - 3)) & 7);
  return b < LARGE_BUCKETS ? b : LARGE_BUCKETS - 1;
}

static void bucket_remove(size_t b, fg_segment_t *s) {
  if (s->prev != NULL)
    s->prev->next = s->next;
  else
    buckets[b] = s->next;
  if (s->next != NULL) s->next->prev = s->prev;
  cached_bytes -= s->mapped;
}

/* The most recently freed cached mapping that fits `need` bytes with `offset` in front of the
 * block and wastes at most 1/8 of the block; NULL if none. Called with large_lock held. */
static fg_segment_t *cache_take(size_t need, size_t offset) {
  size_t first = bucket_of(need);
  for (size_t b = first; b < first + 3 && b < LARGE_BUCKETS; b++) {
    for (fg_segment_t *s = buckets[b]; s != NULL; s = s->next) {
      if (s->mapped < need || (s->mapped - need) * 8 > s->mapped - offset) continue;
      bucket_remove(b, s);
      return s;
    }
  }
  return NULL;
}

void *_fg_large_alloc(size_t size, size_t align, bool zero) {
  if (size > FG_MAX_ALLOC) {
    errno = ENOMEM;
    return NULL;
  }
  size_t offset = align > FG_OS_PAGE ? align : FG_OS_PAGE; /* the header's page */
  size_t need = offset + fg_align_up(size, FG_OS_PAGE) + _fg_secure_guard();
  _fg_lock(&large_lock);
  fg_segment_t *s = cache_take(need, offset);
  if (s != NULL) live_bytes += s->mapped;
  if (live_bytes > live_peak) live_peak = live_bytes;
  _fg_unlock(&large_lock);
  bool fresh = s == NULL;
  _fg_count(fresh ? FG_C_large_cache_misses : FG_C_large_cache_hits, 1);
  if (fresh) {
    _fg_process_init();
    s = _fg_segment_map_large(need);
    if (s == NULL) {
      _fg_large_cache_collect(0, true); /* memory held in the cache may be what is missing */
      _fg_segment_cache_collect(0, true);
      s = _fg_segment_map_large(need);
    }
    if (s == NULL) {
      errno = ENOMEM;
      return NULL;
    }
  }
  if (fresh) {
    _fg_count(FG_C_fresh_large_bytes, size);
    _fg_secure_guard_mapping(s, s->mapped);
    _fg_lock(&large_lock);
    live_bytes += s->mapped;
    if (live_bytes > live_peak) live_peak = live_bytes;
    _fg_unlock(&large_lock);
  }
  /* Secure mode ends the block against its guard page (16-byte aligned), so an overflow past
   * the canary faults at once rather than landing in the page-rounding slack. */
  size_t slack = s->mapped - _fg_secure_guard() - offset - size;
  if (_fg_secure_on && align <= 16 && offset + slack < FG_SEGMENT_SIZE) offset += slack & ~(size_t)15;
  s->large_offset = offset;
  atomic_store_explicit(&s->large_state, FG_LARGE_LIVE, memory_order_relaxed);
  uint8_t *p = (uint8_t *)s + offset;
  if (zero && !fresh) memset(p, 0, size); /* a fresh mapping is zero already */
  return p;
}

static fg_noinline void large_check(fg_segment_t *s, const void *p) {
  if (s->cookie != ((uintptr_t)s ^ _fg_secret)) _fg_misuse("not a frugal pointer", p);
  if ((const uint8_t *)p != (uint8_t *)s + s->large_offset) _fg_misuse("invalid pointer", p);
  if (atomic_load_explicit(&s->large_state, memory_order_relaxed) != FG_LARGE_LIVE)
    _fg_misuse("double free", p);
}

void _fg_large_free(fg_segment_t *s, const void *p) {
  large_check(s, p);
  uint32_t live = FG_LARGE_LIVE;
  if (!atomic_compare_exchange_strong(&s->large_state, &live, FG_LARGE_FREE)) _fg_misuse("double free", p);
  size_t limit = (size_t)_fg_option(FG_OPTION_LARGE_CACHE_MB) << 20;
  s->freed_at = _fg_clock_ms();
  _fg_lock(&large_lock);
  live_bytes -= s->mapped;
  if (limit < live_peak) limit = live_peak;
  bool keep = cached_bytes + s->mapped <= limit;
  if (keep) {
    size_t b = bucket_of(s->mapped);
    s->prev = NULL;
    s->next = buckets[b];
    if (s->next != NULL) s->next->prev = s;
    buckets[b] = s;
    cached_bytes += s->mapped;
  }
  _fg_unlock(&large_lock);
  if (!keep) {
    _fg_count(FG_C_large_cache_evictions, 1);
    _fg_segment_unmap(s);
  }
}

size_t _fg_large_usable(fg_segment_t *s, const void *p) {
  large_check(s, p);
  return s->mapped - s->large_offset - _fg_secure_guard();
}

/* Resize in place when the mapping can follow (shrink, or grow into free address space
 * behind it): no copy, no fault on the kept pages. NULL when the block must move. */
void *_fg_large_realloc(fg_segment_t *s, void *p, size_t size) {
  large_check(s, p);
  size_t usable = s->mapped - s->large_offset - _fg_secure_guard();
  if (size <= usable && size >= usable / 2) {
    size_t want = s->large_offset + fg_align_up(size, FG_OS_PAGE);
    if ((s->mapped - want) * 8 > s->mapped && _fg_os_resize(s, s->mapped, want)) s->mapped = want;
    return p;
  }
  if (size > usable && size <= FG_MAX_ALLOC) {
    size_t want = s->large_offset + fg_align_up(size, FG_OS_PAGE);
    if (_fg_os_resize(s, s->mapped, want)) {
      s->mapped = want;
      return p;
    }
  }
  return NULL;
}

/* Cached blocks unused for the decay time go back to the OS (all when forced). */
void _fg_large_cache_collect(uint64_t now, bool force) {
  uint64_t decay = (uint64_t)_fg_option(FG_OPTION_DECAY_MS);
  fg_segment_t *expired = NULL;
  _fg_lock(&large_lock);
  live_peak = live_bytes; /* a new decay period */
  for (size_t b = 0; b < LARGE_BUCKETS; b++) {
    for (fg_segment_t *s = buckets[b], *next; s != NULL; s = next) {
      next = s->next;
      if (!force && s->freed_at + decay > now) continue;
      bucket_remove(b, s);
      s->next = expired;
      expired = s;
    }
  }
  _fg_unlock(&large_lock);
  _fg_segment_unmap_list(expired, FG_C_large_cache_decays);
}

void _fg_large_lock(void) { _fg_lock(&large_lock); }
void _fg_large_unlock(void) { _fg_unlock(&large_lock); }
