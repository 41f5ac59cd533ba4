/* fuzz_ops.c — libFuzzer harness: each input is decoded into a program of malloc, calloc,
 * realloc, aligned_alloc, posix_memalign, memalign, free, free_sized, malloc_usable_size and
 * fg_collect calls over a few hundred slots, sizes from 0 bytes to 4 MiB. Every block is filled
 * with a seeded pattern over its whole usable size; after every step the harness checks that
 * the block just made does not overlap any live block (an address-ordered index of
 * [p, p + usable)), that every live block's ends still hold their pattern, and every
 * FULL_EVERY steps the whole of every block and fg_heap_check(). frugal is compiled into the
 * binary (coverage-instrumented), so libFuzzer's own allocations go through it too. */
#include <errno.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frugal.h"
#include "testutil.h"

/* C23 names glibc 2.36 does not declare; frugal defines them. */
void free_sized(void *p, size_t size);
void free_aligned_sized(void *p, size_t alignment, size_t size);

#define NSLOTS 320                 /* a few hundred: enough for every size class to fill pages */
#define LIVE_CAP ((size_t)256 << 20) /* live bytes at most, well under libFuzzer's 2 GiB RSS limit */
#define MAX_SIZE ((size_t)4 << 20)  /* largest request: above the 512 KiB large-block threshold */
#define FULL_EVERY 32              /* steps between full pattern checks and fg_heap_check() */
#define EDGE 16                    /* bytes checked at each end of every block after each step */

typedef struct slot_s {
  unsigned char *p; /* NULL when the slot is empty */
  size_t req;       /* size asked for */
  size_t usable;    /* malloc_usable_size when made; the pattern covers all of it */
  uint64_t key;     /* pattern seed */
  size_t align;     /* alignment asked of aligned_alloc, posix_memalign or memalign; 0 if none */
} slot_t;

/* Static, not malloc'ed: the harness's own bookkeeping must not share the heap it checks. */
static slot_t slots[NSLOTS];
static uint16_t order[NSLOTS]; /* live slots sorted by address */
static size_t n_live, live_bytes;
static uint64_t key_counter;
static long step; /* steps of the current input, for messages */
static int trace;  /* FUZZ_TRACE=1: print every step (to turn a crash file into a reproduction) */

static void fail(const char *what, int slot) {
  const slot_t *s = slot >= 0 ? &slots[slot] : NULL;
  fprintf(stderr, "fuzz_ops: step %ld: %s (slot %d, block %p, size %zu, usable %zu)\n", step,
          what, slot, s ? (void *)s->p : NULL, s ? s->req : 0, s ? s->usable : 0);
  abort();
}

/* The harness's bookkeeping (index searches, pattern checks) compares addresses and pattern
 * words: coverage feedback from them would only steer the fuzzer by where blocks happen to
 * land, so they are compiled without it. The allocator and the decoding keep it. */
#define FUZZ_UNGUIDED __attribute__((no_sanitize("coverage")))

/* ---- the input, read as a stream of bytes (zeros once exhausted) ------------------------- */
typedef struct reader_s {
  const uint8_t *data;
  size_t len, pos;
} reader_t;

static unsigned take8(reader_t *r) { return r->pos < r->len ? r->data[r->pos++] : 0; }
static unsigned take16(reader_t *r) { return take8(r) | take8(r) << 8; }
static size_t take24(reader_t *r) { return (size_t)take16(r) | (size_t)take8(r) << 16; }

/* Sizes: half small (0..1024, the direct-table classes), a third medium (up to 64 KiB, the
 * limit of medium pages), the rest up to 512 KiB (the largest class) or 4 MiB (large blocks). */
static size_t take_size(reader_t *r) {
  unsigned band = take8(r);
  if (band < 128) return take16(r) % 1025;
  if (band < 208) return 1025 + take24(r) % ((64 << 10) - 1024);
  if (band < 240) return take24(r) % ((512 << 10) + 1);
  return take24(r) % (MAX_SIZE + 1);
}
static int take_slot(reader_t *r) { return (int)(take16(r) % NSLOTS); }
/* Power-of-two alignments 1 .. 2 MiB, the largest frugal supports for every size. */
static size_t take_align(reader_t *r) { return (size_t)1 << (take8(r) % 22); }

/* ---- the address-ordered index ------------------------------------------------------------ */
/* First position in order[] whose block starts at or after p. */
FUZZ_UNGUIDED static size_t index_lower(const unsigned char *p) {
  size_t lo = 0, hi = n_live;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (slots[order[mid]].p < p)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

FUZZ_UNGUIDED static void index_insert(int slot) {
  const slot_t *s = &slots[slot];
  size_t at = index_lower(s->p);
  if (at > 0) {
    const slot_t *prev = &slots[order[at - 1]];
    if (prev->p + prev->usable > s->p) fail("new block overlaps the live block below it", slot);
  }
  if (at < n_live) {
    const slot_t *next = &slots[order[at]];
    if (s->p + s->usable > next->p) fail("new block overlaps the live block above it", slot);
  }
  memmove(&order[at + 1], &order[at], (n_live - at) * sizeof order[0]);
  order[at] = (uint16_t)slot;
  n_live++;
  live_bytes += s->usable;
}

FUZZ_UNGUIDED static void index_remove(int slot) {
  size_t at = index_lower(slots[slot].p);
  if (at >= n_live || order[at] != slot) fail("index lost a live block", slot);
  memmove(&order[at], &order[at + 1], (n_live - at - 1) * sizeof order[0]);
  n_live--;
  live_bytes -= slots[slot].usable;
}

/* ---- blocks ---------------------------------------------------------------------------------- */
/* tu_verify's pattern, checked a word at a time with no call per word and no coverage
 * callbacks: checking blocks was 80 % of the run time with tu_verify, which compares each
 * word through memcmp. */
FUZZ_UNGUIDED static int intact(const unsigned char *p, size_t n,
                                                          uint64_t key) {
  size_t words = n / 8;
  uint64_t diff = 0, w = key;
  for (size_t i = 0; i < words; i++, w += 0x9E3779B97F4A7C15ull) {
    uint64_t got;
    memcpy(&got, p + i * 8, 8);
    diff |= got ^ w;
  }
  return diff == 0 && tu_verify(p + words * 8, n % 8, tu_word(key, words)) < 0;
}

static void verify_full(int slot) {
  const slot_t *s = &slots[slot];
  if (!intact(s->p, s->usable, s->key)) fail("live block lost its pattern", slot);
}

/* The first and last EDGE bytes: where a neighbour's overrun or a free-list link would land. */
FUZZ_UNGUIDED static void verify_edges(int slot) {
  const slot_t *s = &slots[slot];
  size_t n = s->usable < 2 * EDGE ? s->usable : EDGE;
  if (tu_verify(s->p, n, s->key) >= 0) fail("live block's head lost its pattern", slot);
  size_t tail = s->usable - n;
  unsigned char want[EDGE];
  unsigned char whole[2 * EDGE + 8];
  /* The pattern is a sequence of 8-byte words: rebuild the words that cover the tail. */
  size_t from = tail / 8 * 8, span = s->usable - from;
  if (span <= sizeof whole) {
    for (size_t i = 0; i < span; i += 8) {
      uint64_t w = tu_word(s->key, (from + i) / 8);
      memcpy(whole + i, &w, 8);
    }
    memcpy(want, whole + (tail - from), n);
    if (memcmp(s->p + tail, want, n) != 0) fail("live block's tail lost its pattern", slot);
  }
}

/* A block the allocator just returned for `slot`: checks, pattern, index. */
static void adopt(int slot, void *p, size_t req, size_t align, int aligned_call) {
  slot_t *s = &slots[slot];
  s->p = p;
  s->req = req;
  s->usable = 0;
  s->align = aligned_call ? align : 0;
  if (trace) fprintf(stderr, "  -> slot %d: %p (size %zu, align %zu)\n", slot, p, req, align);
  if (p == NULL) fail("allocation of a sane size returned NULL", slot);
  if ((uintptr_t)p % align != 0) fail("block not aligned as asked", slot);
  if (!fg_is_owned(p)) fail("block not owned by frugal", slot);
  s->usable = malloc_usable_size(p);
  if (s->usable < req) fail("usable size below the request", slot);
  s->key = tu_mix(++key_counter);
  tu_fill(s->p, s->usable, s->key);
  index_insert(slot);
}

static void release(int slot, int sized) {
  slot_t *s = &slots[slot];
  if (s->p == NULL) return;
  verify_full(slot);
  index_remove(slot);
  /* C23: free_sized for blocks of malloc, calloc and realloc; free_aligned_sized for aligned
   * ones (frugal takes it for posix_memalign and memalign blocks too). */
  if (sized && s->align != 0)
    free_aligned_sized(s->p, s->align, s->req);
  else if (sized)
    free_sized(s->p, s->req);
  else
    free(s->p);
  s->p = NULL;
}

/* True when another `req` bytes fit under LIVE_CAP (with the slot's own block freed first). */
static int fits(int slot, size_t req) {
  size_t held = slots[slot].p ? slots[slot].usable : 0;
  return live_bytes - held + req + MAX_SIZE / 8 <= LIVE_CAP;
}

/* ---- one step ------------------------------------------------------------------------------ */
static void op_realloc(int slot, size_t req) {
  slot_t *s = &slots[slot];
  if (s->p == NULL) {
    adopt(slot, realloc(NULL, req), req, 8, 0);
    return;
  }
  verify_full(slot);
  if (req == 0) { /* glibc's policy, which frugal follows: frees and returns NULL */
    index_remove(slot);
    errno = 0;
    void *q = realloc(s->p, 0);
    if (q != NULL || errno != 0) fail("realloc(p, 0) did not free and return NULL", slot);
    s->p = NULL;
    return;
  }
  size_t keep = s->req < req ? s->req : req;
  uint64_t key = s->key;
  index_remove(slot);
  void *q = realloc(s->p, req);
  if (q == NULL) fail("realloc to a sane size returned NULL", slot);
  if (!intact(q, keep, key)) fail("realloc lost the block's contents", slot);
  s->p = NULL;
  adopt(slot, q, req, 8, 0);
}

static void op_huge(int slot, unsigned how) {
  slot_t *s = &slots[slot];
  size_t huge = how & 1 ? SIZE_MAX - (how & 0xf0) : (size_t)PTRDIFF_MAX + 1;
  errno = 0;
  if (s->p != NULL && (how & 2)) {
    void *q = realloc(s->p, tu_size(huge));
    if (q != NULL || errno != ENOMEM) fail("realloc(p, huge) did not fail with ENOMEM", slot);
    verify_full(slot); /* p must still be valid and intact */
  } else {
    void *q = malloc(tu_size(huge));
    if (q != NULL || errno != ENOMEM) fail("malloc(huge) did not fail with ENOMEM", -1);
  }
}

static void op_calloc(int slot, size_t req, unsigned count_byte) {
  if (count_byte == 255) { /* count * size overflows */
    errno = 0;
    void *q = calloc(tu_size(SIZE_MAX / 2), tu_size(3));
    if (q != NULL || errno != ENOMEM) fail("calloc overflow did not fail with ENOMEM", -1);
    return;
  }
  size_t count = 1 + count_byte % 16, each = req / count;
  unsigned char *p = calloc(count, each);
  if (p == NULL) fail("calloc of a sane size returned NULL", slot);
  if (!tu_is_zero(p, count * each)) fail("calloc block not zeroed", slot);
  adopt(slot, p, count * each, 8, 0);
}

static void op_aligned(int slot, size_t req, size_t align, unsigned flavour) {
  void *p = NULL;
  switch (flavour % 3) {
  case 0:
    if (flavour & 0x80 && align >= 4) { /* not a power of two: EINVAL, per glibc 2.38 */
      errno = 0;
      void *q = aligned_alloc(tu_size(align + align / 2), req);
      if (q != NULL || errno != EINVAL) fail("aligned_alloc(bad alignment) did not give EINVAL", -1);
      return;
    }
    p = aligned_alloc(align, req);
    break;
  case 1: {
    size_t a = align < sizeof(void *) ? sizeof(void *) : align;
    void *out = &slots[slot]; /* must stay untouched on failure */
    if (flavour & 0x80) {
      int rc = posix_memalign(&out, tu_size(a + a / 2), req); /* not a power of two */
      if (rc != EINVAL || out != &slots[slot]) fail("posix_memalign(bad alignment) not EINVAL", -1);
      return;
    }
    int rc = posix_memalign(&out, a, req);
    if (rc != 0) fail("posix_memalign of a sane size failed", slot);
    p = out;
    align = a;
    break;
  }
  default:
    p = memalign(align, req);
    break;
  }
  adopt(slot, p, req, align, 1);
}

static void run_step(reader_t *r) {
  unsigned op = take8(r);
  int slot = take_slot(r);
  slot_t *s = &slots[slot];
  if (trace) fprintf(stderr, "step %ld: op %u slot %d (holds %p)\n", step, op % 16, slot, (void *)s->p);
  switch (op % 16) {
  case 0:
  case 1:
  case 2: { /* malloc, the most common call */
    size_t req = take_size(r);
    release(slot, 0);
    if (fits(slot, req)) adopt(slot, malloc(req), req, 8, 0);
    break;
  }
  case 3: {
    size_t req = take_size(r);
    unsigned count = take8(r);
    release(slot, 0);
    if (fits(slot, req)) op_calloc(slot, req, count);
    break;
  }
  case 4:
  case 5: {
    size_t req = take_size(r);
    if (fits(slot, req)) op_realloc(slot, req);
    break;
  }
  case 6:
  case 7: {
    size_t req = take_size(r), align = take_align(r);
    unsigned flavour = take8(r);
    release(slot, 0);
    if (fits(slot, req + align)) op_aligned(slot, req, align, flavour);
    break;
  }
  case 8:
  case 9:
  case 10:
    release(slot, 0);
    break;
  case 11: /* sized free with the size asked for: always a legal size */
    release(slot, 1);
    break;
  case 12: /* malloc_usable_size is stable and fg_is_owned agrees */
    if (s->p != NULL) {
      if (malloc_usable_size(s->p) != s->usable) fail("malloc_usable_size changed", slot);
      if (!fg_is_owned(s->p)) fail("live block no longer owned", slot);
    } else if (malloc_usable_size(NULL) != 0) {
      fail("malloc_usable_size(NULL) != 0", -1);
    }
    break;
  case 13:
    op_huge(slot, take8(r));
    break;
  case 14: /* return memory to the OS: live blocks must not notice */
    fg_collect(take8(r) & 1);
    break;
  default:
    if (!fg_heap_check()) fail("fg_heap_check() found a broken invariant", -1);
    break;
  }
  if (s->p != NULL) verify_full(slot);
}

FUZZ_UNGUIDED static void check_all(int full) {
  for (size_t i = 0; i < n_live; i++) {
    if (full)
      verify_full(order[i]);
    else
      verify_edges(order[i]);
  }
  if (full && !fg_heap_check()) fail("fg_heap_check() found a broken invariant", -1);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  const char *t = getenv("FUZZ_TRACE");
  trace = t != NULL && *t == '1';
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len) {
  reader_t r = {data, len, 0};
  for (step = 0; r.pos < r.len; step++) {
    run_step(&r);
    check_all(step % FULL_EVERY == FULL_EVERY - 1);
  }
  check_all(1);
  /* Every input starts from an empty table, so a crash file replays alone. */
  for (int i = 0; i < NSLOTS; i++) release(i, 0);
  if (n_live != 0 || live_bytes != 0) fail("index not empty after freeing everything", -1);
  if (!fg_heap_check()) fail("fg_heap_check() after freeing everything", -1);
  return 0;
}
