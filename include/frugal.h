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

/* Options, read from FRUGAL_* environment variables at start: one list, each row
 * X(NAME, default, min, max, is_string, help) for FRUGAL_<NAME>. It makes the enum below and
 * the library's table and help (fg_options_print, `frugal --help-env`); python/tests/
 * test_docs.py holds the tables of README.md and docs/options.md to it. String options have no range: their value is the text. */
#define FG_OPTIONS(X)                                                                                    \
  X(VERBOSE, 0, 0, 2, 0, "events on stderr: 1 rare ones (out-of-memory retries, full caches), 2 also every give-back") \
  X(DECAY_MS, 1000, 0, 3600000, 0, "ms a free page, segment or large block stays before it returns to the OS") \
  X(LARGE_CACHE_MB, 1024, 0, 1L << 20, 0, "MiB of freed large blocks (> 512 KiB) kept for reuse")             \
  X(SEGMENT_CACHE_MB, 1024, 0, 1L << 20, 0, "MiB of empty 4 MiB segments kept for reuse")                     \
  X(STATS, 0, 0, 1, 0, "1: ledger on, printed on stderr at exit")                                              \
  X(STATS_FILE, 0, 0, 0, 1, "path: ledger on, written there as JSON at exit")                                   \
  X(STATS_INTERVAL_MS, 0, 0, 3600000, 0, "ms between timeline samples in the JSON (0: no timeline)")          \
  X(LEAKS, 0, 0, 1, 0, "1: ledger on, a call stack per block, live blocks by call site at exit")              \
  X(SECURE, 0, 0, 1, 0,                                                                                         \
    "1: hardened: canary after each block, freed blocks filled and checked, guard pages, shuffled allocation order") \
  X(PURGE_THREAD, 1, 0, 1, 0, "1: a background thread gives cached memory back while the program is quiet")   \
  X(SAMPLE_BYTES, 1L << 20, 0, 1L << 40, 0, "mean bytes allocated between two sampled allocations (0: no sampling)") \
  X(PROFILE, 0, 0, 0, 1, "directory (%p = pid): heap profile from the samples written there at exit")        \
  X(GUARD_EVERY, 500000, 0, 1L << 30, 0,                                                                             \
    "about one allocation (<= 4 KiB) in N ends against a guard page, and stays out of reach a while after free " \
    "(0: off; 1: every one)")                                                                                  \
  X(GUARD_UNDERFLOW, 0, 0, 1, 0, "1: guarded blocks start right after their guard page (catch underflows, not overflows)") \
  X(CONTROL, 0, 0, 1, 0,                                                                                       \
    "1: answer `frugal snapshot` and `frugal top` on a UNIX socket while running (a thread and 3 descriptors of frugal's)") \
  X(SNAPSHOT_EVERY_S, 0, 0, 86400, 0,                                                                          \
    "seconds between snapshots (ledger.json, profile.json) written under the profile's or the ledger file's directory, in snapshots/PID-TIME/ (0: none)") \
  X(SNAPSHOT_KEEP, 24, 1, 100000, 0, "snapshots kept per process: the oldest go as new ones are written")

typedef enum fg_option_e {
#define FG_X(name, def, min, max, is_string, help) FG_OPTION_##name,
  FG_OPTIONS(FG_X)
#undef FG_X
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
