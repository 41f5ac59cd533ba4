/* frugal-stats.h — the ledger's field lists and the struct fg_stats_get fills.
 * One X-macro list per kind of counter feeds the struct, the per-thread merge, the text
 * report and the JSON writer, so a counter is added in exactly one place. */
#ifndef FRUGAL_STATS_H
#define FRUGAL_STATS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FG_STATS_CLASSES 112       /* 111 size classes + one row for large blocks */
#define FG_STATS_HIST_BUCKETS 336  /* requested sizes 0..2^47: 0, then one bucket per size class */
#define FG_STATS_TIMELINE_MAX 2048 /* samples kept; halved (every other one) when full */

/* Per size class, counted per thread while the ledger is on, merged on read.
 * X(name, help) */
#define FG_STATS_CLASS_FIELDS(X)                                    \
  X(allocations, "blocks handed out")                               \
  X(bytes_requested, "bytes asked for, cumulative")                 \
  X(bytes_handed_out, "bytes of the blocks handed out, cumulative") \
  X(frees, "blocks freed")                                          \
  X(freed_requested, "bytes asked for by blocks freed since")       \
  X(freed_handed_out, "bytes of blocks freed since")

/* Process-wide counters, kept whether the ledger is on or off: they sit on slow paths
 * (OS calls, cache decisions), never on the malloc/free fast paths. X(name, help) */
#define FG_STATS_GLOBAL_FIELDS(X)                                                    \
  X(mmap_calls, "mmap calls")                                                        \
  X(mmap_bytes, "bytes mapped")                                                      \
  X(munmap_calls, "munmap calls")                                                    \
  X(munmap_bytes, "bytes unmapped")                                                  \
  X(madvise_calls, "madvise(DONTNEED) calls: memory given back, range kept")         \
  X(madvise_bytes, "bytes given back by madvise")                                    \
  X(mremap_calls, "mremap calls: large blocks resized or moved")                     \
  X(fresh_bytes,                                                                     \
    "uncommitted bytes frugal touched carving blocks: a page fault and "             \
    "kernel zeroing per 4 KiB (seed 3's hidden cost); the program's own "            \
    "first touches of big blocks come on top")                                       \
  X(fresh_large_bytes, "bytes of large blocks mapped fresh from the OS")             \
  X(slow_allocs, "small allocations that missed the thread cache (page free lists)") \
  X(pages_new, "pages started")                                                      \
  X(pages_released, "empty pages given back to their segment")                       \
  X(pages_reused, "empty pages a class took over from another (memory already committed)") \
  X(pages_handed_back, "full pages other threads emptied, given back by the last of them: the owner was away") \
  X(pages_handed_over, "full pages other threads emptied, taken by a heap that needed a page: the owner was away") \
  X(slots_lent, "free page slots another heap's segment lent, their memory still committed") \
  X(segment_cache_hits, "segments reused from the segment cache")                    \
  X(segment_cache_misses, "segments mapped from the OS")                             \
  X(segment_cache_evictions, "empty segments the full cache gave back at once")      \
  X(segment_cache_decays, "cached segments unmapped after the decay time")           \
  X(large_cache_hits, "large blocks reused from the large cache")                    \
  X(large_cache_misses, "large blocks mapped from the OS")                           \
  X(large_cache_evictions, "freed large blocks the full cache gave back at once")    \
  X(large_cache_reshapes, "cached large blocks shrunk, grown or moved to fit a request") \
  X(large_cache_decays, "cached large blocks unmapped after the decay time")        \
  X(returned_decay_bytes, "bytes given back by the threads' own decay passes")       \
  X(returned_idle_bytes, "bytes given back by the purger thread while threads were quiet") \
  X(returned_oom_bytes, "bytes given back when the OS refused a mapping, before retrying") \
  X(returned_collect_bytes, "bytes given back by fg_collect / malloc_trim")          \
  X(returned_growth_bytes, "bytes of idle cached large blocks and free big blocks given back as the heap grew") \
  X(returned_takeover_bytes, "bytes a single page gave back as another class took it over")                  \
  X(purger_passes, "passes of the purger thread over every heap and cache")

/* What frugal holds for reuse right now, by cache, in bytes: read at fg_stats_get, so a user
 * can see why RSS is what it is. "resident" is committed memory; "returned" has been given
 * back to the OS (MADV_DONTNEED) and costs address space only. X(name, help) */
#define FG_STATS_HELD_FIELDS(X)                                                                   \
  X(large_cache_bytes, "freed large blocks cached for reuse (resident)")                          \
  X(kept_page_bytes, "empty pages kept in their class queues for reuse (resident)")               \
  X(free_page_bytes, "free page slots in the heaps' segments: their resident pages")              \
  X(free_page_returned_bytes, "free page slots' other pages: given back or never touched (address space only)") \
  X(segment_cache_bytes, "empty segments cached for reuse: their resident pages")                 \
  X(segment_cache_returned_bytes, "cached empty segments' other pages (address space only)")

typedef struct fg_stats_class_s {
  uint64_t block_size; /* 0 for the large row */
#define FG_X(name, help) uint64_t name;
  FG_STATS_CLASS_FIELDS(FG_X)
#undef FG_X
  uint64_t peak_live_blocks; /* highest live count seen at a sample or read */
} fg_stats_class_t;

/* A timeline sample. `held`: what frugal's caches keep resident for reuse at the sample (the
 * resident fields of FG_STATS_HELD_FIELDS): with live bytes, frugal's share of `rss`. */
typedef struct fg_stats_sample_s {
  uint64_t t_ms, live_requested, live_handed_out, rss, held;
} fg_stats_sample_t;

typedef struct fg_stats_s {
  bool ledger_on;
#define FG_X(name, help) uint64_t name;
  FG_STATS_GLOBAL_FIELDS(FG_X)
#undef FG_X
  fg_stats_class_t classes[FG_STATS_CLASSES];
  uint64_t histogram[FG_STATS_HIST_BUCKETS];
  uint64_t peak_live_requested, peak_live_handed_out; /* sampled */
#define FG_X(name, help) uint64_t name;
  FG_STATS_HELD_FIELDS(FG_X)
#undef FG_X
  /* The process, as the kernel sees it. */
  uint64_t rss, peak_rss, minor_faults, major_faults, user_us, sys_us;
} fg_stats_t;

/* Fill *out (counters merged over every thread, live and exited). */
void fg_stats_get(fg_stats_t *out);
/* Lower bound of histogram bucket i (its upper bound is bucket i+1's lower bound). */
size_t fg_stats_bucket_lo(size_t i);
/* The ledger as text on stderr (what FRUGAL_STATS=1 prints at exit). */
void fg_stats_print(void);
/* The ledger as JSON (schema: python/frugal/ledger.schema.json) into buf; returns the
 * length it needs (like snprintf), writing at most size bytes, NUL-terminated if size > 0. */
size_t fg_stats_json(char *buf, size_t size);
/* Write the JSON to a file; false on error (errno set). */
bool fg_stats_write(const char *path);

#ifdef __cplusplus
}
#endif

#endif /* FRUGAL_STATS_H */
