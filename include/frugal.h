/* frugal.h — the public API of frugal, a thread-caching allocator for C and C++ on Linux.
 * Every symbol here is prefixed fg_. The libc names (malloc, free, ...) are provided too by
 * libfrugal.so and libfrugal.a; these are the same functions under names that never clash. */
#ifndef FRUGAL_H
#define FRUGAL_H

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FRUGAL_VERSION_MAJOR 0
#define FRUGAL_VERSION_MINOR 1
#define FRUGAL_VERSION_PATCH 0
#define FRUGAL_VERSION "0.1.0"

/* FRUGAL_VERSION of the library actually loaded, which may differ from the header compiled
 * against (`frugal --version` reads it from the .so). */
const char *fg_version(void);

#if defined(__GNUC__)
#define FG_ATTR_MALLOC __attribute__((malloc))
#define FG_ATTR_ALLOC_SIZE(n) __attribute__((alloc_size(n)))
#define FG_ATTR_ALLOC_SIZE2(n, m) __attribute__((alloc_size(n, m)))
#else
#define FG_ATTR_MALLOC
#define FG_ATTR_ALLOC_SIZE(n)
#define FG_ATTR_ALLOC_SIZE2(n, m)
#endif

/* Allocation. Semantics follow glibc: NULL + errno = ENOMEM on exhaustion or absurd sizes,
 * EINVAL for bad alignments. Heap misuse (double free, foreign or interior pointers) prints
 * one "frugal: " line on stderr and aborts. */
FG_ATTR_MALLOC FG_ATTR_ALLOC_SIZE(1) void *fg_malloc(size_t size);
FG_ATTR_MALLOC FG_ATTR_ALLOC_SIZE2(1, 2) void *fg_calloc(size_t count, size_t size);
FG_ATTR_ALLOC_SIZE(2) void *fg_realloc(void *p, size_t size);
FG_ATTR_ALLOC_SIZE2(2, 3) void *fg_reallocarray(void *p, size_t count, size_t size);
void fg_free(void *p);
/* free with the size the block was requested with (C23 free_sized); a wrong size aborts. */
void fg_free_sized(void *p, size_t size);
/* free of a block from fg_aligned_alloc / fg_memalign / fg_posix_memalign (C23). */
void fg_free_aligned_sized(void *p, size_t alignment, size_t size);
FG_ATTR_MALLOC FG_ATTR_ALLOC_SIZE(2) void *fg_aligned_alloc(size_t alignment, size_t size);
FG_ATTR_MALLOC FG_ATTR_ALLOC_SIZE(2) void *fg_memalign(size_t alignment, size_t size);
int fg_posix_memalign(void **out, size_t alignment, size_t size);
FG_ATTR_MALLOC FG_ATTR_ALLOC_SIZE(1) void *fg_valloc(size_t size);
FG_ATTR_MALLOC void *fg_pvalloc(size_t size);
/* Bytes usable at p (>= the size requested); 0 for NULL. */
size_t fg_usable_size(const void *p);

/* Give free memory back to the OS. force=false returns what has been unused for longer than
 * FRUGAL_DECAY_MS; force=true returns everything free now, in this thread and in the heaps of
 * exited threads (the large cache and segment cache included). */
void fg_collect(bool force);

/* True if p points to the start of a live block that frugal handed out. Never aborts. */
bool fg_is_owned(const void *p);

/* Options: one table, read from FRUGAL_* environment variables at start (see README). */
typedef enum fg_option_e {
  FG_OPTION_VERBOSE,           /* FRUGAL_VERBOSE: events on stderr (warnings always print) */
  FG_OPTION_DECAY_MS,          /* FRUGAL_DECAY_MS: ms of disuse before free memory returns to the OS */
  FG_OPTION_LARGE_CACHE_MB,    /* FRUGAL_LARGE_CACHE_MB: bytes of freed large blocks kept for reuse */
  FG_OPTION_SEGMENT_CACHE_MB,  /* FRUGAL_SEGMENT_CACHE_MB: bytes of empty segments kept for reuse */
  FG_OPTION_STATS,             /* FRUGAL_STATS: ledger on, printed to stderr at exit */
  FG_OPTION_STATS_FILE,        /* FRUGAL_STATS_FILE: ledger on, written there as JSON at exit */
  FG_OPTION_STATS_INTERVAL_MS, /* FRUGAL_STATS_INTERVAL_MS: timeline sample period in the JSON */
  FG_OPTION_LEAKS,             /* FRUGAL_LEAKS: ledger on + a call stack per block, leaks at exit */
  FG_OPTION_SECURE,            /* FRUGAL_SECURE: canaries, free-fill checks, guard pages, shuffled pages */
  FG_OPTION_PURGE_THREAD,      /* FRUGAL_PURGE_THREAD: a background thread gives memory back while quiet */
  FG_OPTION_SAMPLE_BYTES,      /* FRUGAL_SAMPLE_BYTES: mean bytes allocated between two sampled allocations */
  FG_OPTION_PROFILE,           /* FRUGAL_PROFILE: directory for the heap profile drawn from the samples */
  FG_OPTION_GUARD_EVERY,       /* FRUGAL_GUARD_EVERY: about one allocation in N gets a guard page */
  FG_OPTION_COUNT
} fg_option_t;

long fg_option_get(fg_option_t option);
/* The text of a string option (FRUGAL_STATS_FILE), or NULL when unset. */
const char *fg_option_get_string(fg_option_t option);
/* Set an option at run time (tests, embedders). Values are clamped to the table's range. */
void fg_option_set(fg_option_t option, long value);
/* Print the options table (name, value, default, help) to stderr. */
void fg_options_print(void);

/* ---- for tests and debugging ---------------------------------------------------------------- */

/* Walk the calling thread's heap and check every invariant (page lists inside their pages,
 * block counts adding up, queues well linked). Returns true when consistent; otherwise
 * prints one "frugal: heap check: ..." line naming the first broken invariant. */
bool fg_heap_check(void);
/* Make every OS mapping call from the n-th one from now on fail (n >= 1), as if memory were
 * exhausted, until called with 0. For out-of-memory tests. */
void fg_test_fail_os(long n);

#ifdef __cplusplus
}
#endif

#endif /* FRUGAL_H */
