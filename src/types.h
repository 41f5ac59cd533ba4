/* types.h — the units of frugal's heap and the constants that size them.
 *
 * A *segment* is a 4 MiB region aligned to 4 MiB, so `p & ~FG_SEGMENT_MASK` finds the header
 * of any pointer inside it. A segment is owned by one thread heap and cut into *pages* of one
 * kind: 64 pages of 64 KiB (small blocks), 8 of 512 KiB (medium) or one page spanning the
 * whole segment (the biggest classes). A *large* segment holds a single block bigger than the
 * largest class, mapped on its own (it may be longer than 4 MiB; only its header is found by
 * the mask). A *page* hands out blocks of one size class from its own free lists.
 * A *heap* is one per thread: it owns segments, keeps a queue of pages per class, and a
 * direct table that maps a small size to the page to allocate from in one load. */
#ifndef FG_TYPES_H
#define FG_TYPES_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "frugal-stats.h"

/* A spin lock (internal.h's _fg_lock): 0 free, 1 held. */
typedef _Atomic(int) fg_lock_t;

/* Indices of the process-wide counters (frugal-stats.h's global field list). */
enum {
#define FG_X(name, help) FG_C_##name,
  FG_STATS_GLOBAL_FIELDS(FG_X)
#undef FG_X
      FG_C_COUNT
};
enum {
#define FG_X(name, help) FG_F_##name,
  FG_STATS_CLASS_FIELDS(FG_X)
#undef FG_X
      FG_F_COUNT
};
_Static_assert(FG_F_COUNT <= 8, "fg_ledger_t's rows hold 8 counters");

/* A thread's ledger, right behind its heap (fg_heap_ledger_t): written only by its thread (one
 * add to memory, no atomic read-modify-write), read by anyone merging; untouched, so never
 * committed, while the ledger is off. */
typedef struct fg_ledger_s {
  /* Rows of 8 counters (64 bytes): the inline ledger finds a class's row with one shift. */
  _Atomic(uint64_t) classes[FG_STATS_CLASSES][8];
  _Atomic(uint64_t) histogram[FG_STATS_HIST_BUCKETS];
} fg_ledger_t;

/* 4 MiB segments: big enough that segment headers and the segment map cost little, small
 * enough that a program using a few small blocks does not reserve much (mimalloc and
 * Go's heap use similar units). */
#define FG_SEGMENT_SHIFT 22
#define FG_SEGMENT_SIZE ((size_t)1 << FG_SEGMENT_SHIFT)
#define FG_SEGMENT_MASK (FG_SEGMENT_SIZE - 1)

#define FG_SMALL_PAGE_SHIFT 16  /* 64 KiB pages for blocks <= 8 KiB: >= 8 blocks per page */
#define FG_MEDIUM_PAGE_SHIFT 19 /* 512 KiB pages for blocks <= 64 KiB: >= 8 blocks */
#define FG_SMALL_MAX ((size_t)8 * 1024)
#define FG_MEDIUM_MAX ((size_t)64 * 1024)
#define FG_CLASS_MAX ((size_t)512 * 1024) /* above this: a large block of its own */

/* Size classes: 8 and 16 B, 16-byte steps up to 128 B, then 8 classes per doubling up to
 * FG_CLASS_MAX. Every block of 16 bytes or more is 16-byte aligned, as glibc's are on 64-bit
 * systems and as programs expect: GLib places a 16-aligned struct behind a 16-byte header in
 * one malloc (its rcbox test failed on a 40-byte class's block at an 8-byte boundary).
 * The step is 1/8 of the lower bound of its doubling, so waste is <= 12.5 % above 128 B.
 * Doublings (2^k, 2^(k+1)] from 256 B to 8 KiB begin with one more class, 2^k + FG_PLUS(k),
 * for requests of a power of two plus a header (sqlite asks for 4096 + 8 and 1024 + 8: 12 %
 * waste in the next regular class). Each is as big as it can be while as many of its blocks
 * fit a page as of 2^k + 16: 2112, 4368 and 8320 B rather than 2064, 4112 and 8208 (sqlite's
 * page cache asks for 4096 + 272, 15 to a 64 KiB page rather than 14 of 4608). */
#define FG_CLASS_LINEAR 9 /* 8, 16, 32, ..., 128 */
#define FG_CLASS_PLUS_FIRST 8
#define FG_CLASS_PLUS_LAST 13
#define FG_CLASS_PLUS_COUNT (FG_CLASS_PLUS_LAST - FG_CLASS_PLUS_FIRST + 1)
/* The extra class of doubling k is 2^k + FG_PLUS(k) bytes (a table: one load in malloc). */
#define FG_PLUS_8 16
#define FG_PLUS_9 16
#define FG_PLUS_10 16
#define FG_PLUS_11 64
#define FG_PLUS_12 272
#define FG_PLUS_13 128
static const uint16_t fg_plus[FG_CLASS_PLUS_COUNT] = {FG_PLUS_8, FG_PLUS_9, FG_PLUS_10, FG_PLUS_11, FG_PLUS_12, FG_PLUS_13};
#define FG_PLUS(k) ((size_t)fg_plus[(k) - FG_CLASS_PLUS_FIRST])
#define FG_CLASS_COUNT (FG_CLASS_LINEAR + 8 * (19 - 7) + FG_CLASS_PLUS_COUNT)
_Static_assert(FG_STATS_CLASSES == FG_CLASS_COUNT + 1, "the ledger has a row per class and one for large blocks");
/* Sizes up to FG_DIRECT_MAX are looked up by words in the heap's direct table. */
#define FG_DIRECT_MAX 1024
#define FG_DIRECT_COUNT (FG_DIRECT_MAX / 8 + 1)

#define FG_OS_PAGE ((size_t)4096)
#define FG_LARGE_ALIGN_MAX ((size_t)2 << 20) /* large blocks: user offset must stay < 4 MiB */
#define FG_MAX_ALLOC ((size_t)PTRDIFF_MAX - 2 * FG_SEGMENT_SIZE)

typedef enum fg_segment_kind_e {
  FG_SEG_SMALL,  /* 64 KiB pages */
  FG_SEG_MEDIUM, /* 512 KiB pages */
  FG_SEG_SINGLE, /* one page of the biggest classes */
  FG_SEG_KINDS,
  FG_SEG_LARGE = FG_SEG_KINDS, /* one large block */
} fg_segment_kind_t;

/* A free-list link: the address of a block plus FG_LINK_TAG, xor-ed with its page's key
 * (0 unless FRUGAL_SECURE is on). See internal.h's _fg_link for why. */
typedef uintptr_t fg_link_t;

/* A free block's first word: the link to the next free block. */
typedef struct fg_block_s {
  fg_link_t next;
} fg_block_t;

struct fg_heap_s;

/* The thread-free word of a page: a stack of blocks freed by other threads, and in its low
 * bits (blocks are 8-aligned) the state of a full page, set and cleared under its heap's lock
 * (heap.c): FULL, it sits in its heap's full list, where the owner's malloc never looks, so
 * the first other thread to free into it moves it to the heap's woken list (WOKEN), which the
 * owner's next slow path takes back; and the thread whose free completes the stack (all the
 * page's blocks freed by other threads while it stayed full) gives the page back to its
 * segment itself, unless STAYS (a buffer's page). */
#define FG_TF_FULL ((uintptr_t)1)
#define FG_TF_WOKEN ((uintptr_t)2)
#define FG_TF_STAYS ((uintptr_t)4)
#define FG_TF_FLAGS (FG_TF_FULL | FG_TF_WOKEN | FG_TF_STAYS)
/* Above the 48 bits of the stack's top block: how many blocks the stack holds. Pushed and
 * taken in the same atomic word, the owner takes the count with the stack and never walks
 * it (each block of it was last written by another core: the walk was a sixth of the
 * cross-thread lab's time, and then each malloc missed on the same blocks again). */
#define FG_TF_COUNT_SHIFT 48
#define FG_TF_BLOCK (((uintptr_t)1 << FG_TF_COUNT_SHIFT) - 8)
/* fg_page_t.used: the count of blocks in use, and flags above it. SLOW, the sign bit, is set
 * while FULL (the page sits in its heap's full list), LEDGER (the inline ledger counts its
 * blocks) or SECURE (secure mode arms the blocks malloc's fast path pops from it) is:
 * malloc's increment and free's decrement then test one sign each, and the fast paths pay
 * nothing for these cases when none holds. */
#define FG_USED_SLOW ((uint32_t)1 << 31)
#define FG_USED_FULL ((uint32_t)1 << 30)
#define FG_USED_LEDGER ((uint32_t)1 << 29)
#define FG_USED_SECURE ((uint32_t)1 << 28)
#define FG_USED_COUNT (FG_USED_SECURE - 1)

/* 128 bytes (aligned): finding a page from a pointer is then a shift, not a multiply. */
_Static_assert(sizeof(void *) == 8, "frugal's page layout assumes 64-bit pointers");
typedef struct __attribute__((aligned(128))) fg_page_s {
  /* First cache line: all that malloc and a local free touch, and all that another thread's
   * free touches (its checks, then its push on xthread_free). */
  fg_link_t free; /* link to the first block to allocate */
  uint8_t *start; /* first block */
  struct fg_heap_s *heap; /* owner; NULL while the slot is free */
  uint64_t magic;         /* floor(2^64 / block_size) + 1: see _fg_block_carved */
  /* capacity * (magic * block_size mod 2^64): a block start below the carved end multiplies
   * by magic to less than this. Atomic because other threads check their frees against it
   * while the owner carves (TSan); loads are plain moves. */
  _Atomic(uint64_t) carved_limit;
  uint32_t block_size; /* 0: page slot not in use; classes end at 512 KiB */
  /* How much less than block_size a sized free may name: _fg_wrong_size's bound, so that
   * free_sized tests it with a subtract and a compare (internal.h's _fg_page_wrong_size). */
  uint32_t size_slack;
  /* One word that malloc's fast path adds to once (internal.h's _fg_page_charge): a block
   * more in use, and in its upper half one block less to the page's next sampled allocation
   * (sample.c). The heap's countdown, a subtract of its own on every malloc, cost the lab's
   * trees shape 5 % (0.608 -> 0.574 s, medians of 9). Free subtracts from it as wide
   * (free.c's used_drop), a block less in use. */
  union {
    struct {
      uint32_t used;       /* blocks handed out and not yet freed back to this page | FG_USED_ flags */
      int32_t sample_left; /* blocks before the next trip; a flagged page's below 0 (FG_LEFT_*) */
    };
    uint64_t used_left;
  };
  /* Other threads' frees: a stack and its count (_fg_tf_top, _fg_tf_count) | FG_TF_FULL. In
   * the first line, which a remote free reads anyway: in the second, each remote free took
   * that line too, and the owner's next collect took it back (threads lab's remote shape,
   * 2 threads: 1.15 -> 1.09 s CPU, medians of 11). */
  _Atomic(uintptr_t) xthread_free;
  /* Second line: slow paths, and the inline ledger's row. */
  uintptr_t key;              /* FRUGAL_SECURE: free-list encoding key, random per page; else 0 */
  _Atomic(uint32_t) capacity; /* blocks carved so far (read by other threads' checks) */
  uint32_t reserved;          /* blocks that fit in the page */
  uint8_t class_idx;
  _Atomic(uint8_t) has_aligned; /* some block was handed out at an aligned interior address */
  uint8_t fresh;                /* in use, carved from uncommitted memory (counts fresh bytes) */
  uint8_t committed;            /* (free slot) its memory may be committed: 0 while new or given back */
  /* Where its class's ledger row sits in any heap (offsetof ledger.classes[class_idx]): the
   * inline ledger adds to heap + this, one load in place of three instructions. */
  uint32_t ledger_row;
  struct fg_page_s *next, *prev; /* in a class queue or the full list */
  uint64_t freed_at;             /* ms: when it became empty (kept page), free (slot) or full */
  /* Ledger and secure mode: requested size + 1 per block (0: unknown), else NULL. Beside
   * ledger_row: the inline ledger reads this line anyway. */
  uint32_t *requested;
  uint32_t requested_cap; /* entries in `requested`; kept with the slot for reuse */
  uint8_t prev_class; /* taken over from another class (heap.c), or uncarved: that class + 1, else 0 */
  /* OS pages of the slot's area, from its start, where carving costs no fault and no RSS (page.c's
   * _fg_page_extend): with resident_class 0, all of them are resident (what carving blocks of
   * 4 KiB or less touched); with c + 1, the first OS page of every block of class c there (a
   * bigger block's carving writes its first word only). Kept with the slot for its next page
   * (small and medium pages: 128 OS pages at most), and 0 once given back. */
  uint8_t resident;
  uint8_t resident_class;
  uint8_t kept : 1;      /* empty, kept in its queue (behind its class's first page) for reuse */
  uint8_t came_back : 1; /* uncarved while empty, then carved again: not uncarved twice (heap.c) */
  uint8_t regrown : 1;   /* a buffer's: its one block grows in place by realloc (_fg_page_buffer_set) */
  uint8_t sample_clamped : 1; /* sample_left holds less than the draw: running out is no trip */
} fg_page_t;
_Static_assert(__builtin_offsetof(fg_page_t, key) == 64, "malloc/free's fields fill the first line");
_Static_assert(sizeof(fg_page_t) == 128, "a page struct is two lines: a pointer's page is a shift away");
_Static_assert((FG_SEGMENT_SIZE >> FG_SMALL_PAGE_SHIFT) <= 64, "a segment's slots have a bit each in a word");

typedef struct fg_segment_s {
  uintptr_t cookie; /* segment address ^ process secret: a sanity check for the header */
  uint8_t kind;     /* fg_segment_kind_t */
  uint8_t page_shift;
  uint16_t page_count;
  uint16_t used_pages;
  struct fg_heap_s *heap;
  uint64_t free_slots; /* bit i: pages[i] is a free slot (its heap NULL); the owner's, under its lock */
  uint64_t committed_slots; /* bit i, of a free slot: its memory may be committed (pages[i].committed) */
  struct fg_segment_s *next, *prev; /* heap's list of segments with free slots; cache list */
  size_t mapped;                    /* bytes mapped from the OS at this address */
  uint64_t freed_at;                /* ms, while in the segment cache or large cache */
  /* large segments only */
  size_t large_offset;           /* user block starts at segment + large_offset */
  size_t large_requested;        /* ledger only: requested size + 1 (0: unknown) */
  _Atomic(uint32_t) large_state; /* FG_LARGE_LIVE / FG_LARGE_FREE */
  uint32_t sample_stack;         /* a sampled or guarded block (sample.c): its stack, */
  uint32_t free_stack;           /* guarded: where it was freed, */
  uint8_t sampled;               /* whether it is a profile sample, */
  uint8_t guarded;               /* whether it is a guarded slot (guard.c), for good, */
  size_t sample_size;            /* and its request, */
  double sample_p;               /* and the chance it had of being sampled */
  fg_page_t pages[];             /* page_count entries; a large segment has one, unused */
} fg_segment_t;

#define FG_LARGE_LIVE 0x4c495645u
#define FG_LARGE_FREE 0x46524545u

/* A cache of freed large blocks (large.c): mappings in buckets by size, 8 per doubling from
 * 512 KiB, each bucket most recently freed first. */
#define FG_LARGE_BUCKET_MIN_SHIFT 19
#define FG_LARGE_BUCKETS (8 * (48 - FG_LARGE_BUCKET_MIN_SHIFT))
typedef struct fg_large_cache_s {
  size_t bytes; /* mapped bytes cached; first, with the buckets of the sizes programs use */
  struct fg_segment_s *buckets[FG_LARGE_BUCKETS];
} fg_large_cache_t;

#define FG_MAYBE_EMPTY_ALL ((uint8_t)((1u << FG_SEG_KINDS) - 1))

typedef struct fg_page_queue_s {
  fg_page_t *first, *last;
} fg_page_queue_t;

typedef struct fg_heap_s {
  /* Bytes malloc may still hand out before the next sampled allocation (sample.c): first,
   * in the direct table's cache line, which malloc's fast path reads anyway. */
  int64_t sample_left;
  fg_page_t *direct[FG_DIRECT_COUNT]; /* words of size -> page to allocate from */
  fg_page_queue_t queues[FG_CLASS_COUNT];
  fg_page_queue_t full;                 /* pages with no free block (under `lock`) */
  fg_segment_t *segments[FG_SEG_KINDS]; /* segments with free page slots, per kind */
  fg_page_queue_t woken;                /* full pages other threads freed into (under `lock`) */
  _Atomic(bool) any_woken;              /* woken (or full: full_freed) is worth a look (the owner's slow path) */
  _Atomic(bool) full_freed;             /* full is: a free found the lock taken (heap.c) */
  uintptr_t key;                        /* seeds page keys */
  uint64_t decay_at;                    /* ms: next decay pass */
  uint32_t ticks;                       /* slow-path events since the last clock read */
  _Atomic(uint64_t) counts[FG_C_COUNT]; /* this heap's share of the global counters */
  _Atomic(bool) owned;                  /* a live thread uses it */
  uint64_t abandoned_at;                /* ms: when its thread exited (heap.c) */
  /* Guards what other threads may change behind the owner's back: the heap's segment lists
   * and free page slots and its large cache (the purger, purger.c), and its full and woken
   * lists (other threads' frees into full pages). */
  fg_lock_t lock;
  /* Large blocks: what this thread has live (allocated minus freed, by this thread:
   * negative in a thread that frees others' blocks) and the most since its decay pass. */
  int64_t large_live, large_peak;
  /* Large allocations (owner-written), and their count at the last decay pass and at the
   * purger's last look (large.c: a cache nobody asks of gives back sooner). */
  _Atomic(uint32_t) large_requests;
  uint32_t large_requests_seen, large_requests_purged;
  size_t grown;           /* bytes of blocks carved from uncommitted memory since the last check (heap.c) */
  size_t grown_large;     /* the same of large blocks (heap.c's _fg_heap_grew_large) */
  uint64_t growth_checks; /* how many such checks */
  uint64_t grew_at;       /* ms: the last check */
  uint8_t grew_kinds;     /* bit per segment kind: carved from fresh memory since the last check */
  _Atomic(size_t) kept_bytes; /* of the empty pages kept in the class queues (fg_page_t.kept); owner-written */
  uint32_t buffers;           /* pages holding a buffer (fg_page_t.regrown): heap.c caps them */
  uint8_t maybe_empty;        /* bit per segment kind: an empty page may sit in its queue (heap.c) */
  /* Classes of medium and single pages: how far a page of the class was carved when it
   * emptied, the most of late, in 128ths of a page (heap.c's page_take_empty keeps that much
   * of a page it takes over). */
  uint8_t extent[FG_CLASS_COUNT];
  /* Thin piles of small classes in a row, all of class chase_class (heap.c's page_ahead), and
   * the classes that had their page ahead. */
  uint32_t chase_run, chase_class;
  bool chased[FG_CLASS_COUNT];
  struct fg_heap_s *next_abandoned, *next_all;
  uint64_t sample_rng; /* the sampler's random state; 0 until its first interval is drawn */
  /* Large blocks this thread freed, kept for its own next requests without the process
   * cache's lock. Last: a heap is 5.3 KiB, and what a thread writes then fits its first page
   * (heap.c gives each heap its own pages); the buckets past it are those of blocks of more
   * than 1.5 GiB. */
  fg_large_cache_t large_cache;
} fg_heap_t;

/* A thread heap and its ledger, allocated together (heap.c). The empty heap is a bare
 * fg_heap_t, as nothing counts into it: with its 10 KiB of ledger it took 4 pages of
 * libfrugal's data, resident in every process, where it needs 2. */
typedef struct fg_heap_ledger_s {
  fg_heap_t heap;
  _Alignas(64) fg_ledger_t ledger; /* a row per cache line (heap.c aligns heaps to 64) */
} fg_heap_ledger_t;

static inline fg_ledger_t *_fg_heap_ledger(fg_heap_t *heap) { return &((fg_heap_ledger_t *)heap)->ledger; }

#endif
