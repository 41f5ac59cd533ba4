/* secure.c — hardened mode (FRUGAL_SECURE=1): on top of the default checks, a canary after
 * each block's request (a 1-byte overflow is caught on free), a fill in freed blocks checked
 * when they are handed out again (a write after free), a PROT_NONE page at the end of every
 * segment and large block, and new pages' blocks handed out in shuffled order. hooks.c calls
 * in here. */
#define _GNU_SOURCE
#include "internal.h"

#include <sys/mman.h>

static uint8_t canary_byte, fill_byte;
static uint64_t canary_word, fill_word;
/* The fill word twice, for the 16-byte spans: one aligned load where building it from
 * fill_word took three instructions in each of malloc's and free's paths. */
typedef uint64_t fill_v2 __attribute__((vector_size(16)));
static fill_v2 fill_vec;

/* Bounds that keep secure mode's cost per block, not per byte (measured on the lab's
 * workloads: 256 fill bytes checked one by one made a 128 B malloc/free 12x slower). */
#define CANARY_MAX 16 /* canary bytes after a request (two words): an overflow up to 16 is caught */
#define FILL_MAX 64   /* bytes of a freed block filled and checked */

void _fg_secure_init(void) {
  /* Per-process bytes, never 0: a zeroing bug or a guessed value does not pass. */
  canary_byte = (uint8_t)(_fg_secret >> 8) | 0x81;
  fill_byte = (uint8_t)(_fg_secret >> 16) | 0x42;
  if (fill_byte == canary_byte) fill_byte ^= 0x10;
  fill_word = fill_byte * 0x0101010101010101u;
  canary_word = canary_byte * 0x0101010101010101u;
  fill_vec = (fill_v2){fill_word, fill_word};
}

size_t _fg_secure_guard(void) { return _fg_secure_on() ? FG_OS_PAGE : 0; }

void _fg_secure_guard_mapping(void *base, size_t mapped) {
  if (_fg_secure_on()) mprotect((uint8_t *)base + mapped - FG_OS_PAGE, FG_OS_PAGE, PROT_NONE);
}

/* mremap moves a range of one kernel mapping, and a guard page is a mapping of its own: lifted,
 * it merges back into the block's last one. So a guard is put back with mprotect, which keeps
 * the page's place in its mapping, and not sealed with a new one (_fg_os_seal): a block that
 * had moved did not merge with that again, and every mremap over it failed (EFAULT). */
void _fg_secure_guard_lift(void *base, size_t mapped) {
  if (_fg_secure_on()) _fg_os_protect((uint8_t *)base + mapped - FG_OS_PAGE, FG_OS_PAGE, true);
}

void _fg_secure_guard_seal(void *base, size_t mapped) {
  if (!_fg_secure_on()) return;
  uint8_t *page = (uint8_t *)base + mapped - FG_OS_PAGE;
  _fg_os_purge(page, FG_OS_PAGE); /* it may have been written: resident under PROT_NONE */
  _fg_os_protect(page, FG_OS_PAGE, false);
}

/* ---- where a block's request and bounds live ------------------------------------------------- */

typedef struct secure_loc_s {
  fg_page_t *page; /* small block's page, or NULL for a large block */
  fg_segment_t *large;
  uint8_t *block; /* block start (a small block's; the large block's user pointer) */
  uint8_t *end;   /* end of the bytes usable from the block */
  uint32_t *slot; /* small: request + 1 */
} secure_loc_t;

/* A small block's place: its page, its index there and its start (p may be an aligned
 * pointer inside it). */
static inline void locate_small(fg_page_t *page, const void *p, secure_loc_t *loc) {
  size_t idx = _fg_block_index(page, (size_t)((const uint8_t *)p - page->start));
  loc->page = page;
  loc->large = NULL;
  loc->block = page->start + idx * page->block_size;
  loc->end = loc->block + page->block_size;
  loc->slot = page->requested + idx;
}

static inline void locate_large(fg_segment_t *s, const void *p, secure_loc_t *loc) {
  loc->page = NULL;
  loc->large = s;
  loc->block = (uint8_t *)p;
  loc->end = (uint8_t *)s + s->mapped - FG_OS_PAGE; /* secure mode: the guard page's start */
  loc->slot = NULL;
}

/* The page's side array, made if it has none yet (false: no memory for one: the block goes
 * unwatched). */
static inline bool side_ready(fg_page_t *page, const void *p) {
  return fg_likely(page->requested != NULL) || _fg_page_requested_slot(page, p, true) != NULL;
}

/* A block just handed out by the plain allocation: no checks. */
static inline bool locate_new(void *p, secure_loc_t *loc) {
  fg_segment_t *s = _fg_segment_of(p);
  if (s->kind == FG_SEG_LARGE) {
    locate_large(s, p, loc);
    return true;
  }
  fg_page_t *page = _fg_page_of(s, p);
  if (!side_ready(page, p)) return false;
  locate_small(page, p, loc);
  return true;
}

/* False for anything that is not a live frugal block start: the plain path reports it. */
static inline bool locate(const void *p, secure_loc_t *loc) {
  fg_segment_t *s = _fg_segment_of(p);
  if (p == NULL || !_fg_segment_valid(s)) return false;
  if (s->kind == FG_SEG_LARGE) {
    if ((const uint8_t *)p != (uint8_t *)s + s->large_offset) return false;
    locate_large(s, p, loc);
    return true;
  }
  fg_page_t *page = _fg_page_of(s, p);
  if (page->heap == NULL || page->requested == NULL || (const uint8_t *)p < page->start) return false;
  locate_small(page, p, loc);
  if (loc->slot >= page->requested + page->capacity) return false;             /* not carved */
  if (loc->block != (const uint8_t *)p && !page->has_aligned) return false; /* interior: misuse */
  return true;
}

static inline size_t stored_request(const secure_loc_t *loc) {
  return loc->slot != NULL ? *loc->slot : loc->large->large_requested;
}

static inline void store_request(const secure_loc_t *loc, size_t stored) {
  if (loc->slot != NULL)
    *loc->slot = (uint32_t)stored;
  else
    loc->large->large_requested = stored;
}

static inline uint64_t load64(const uint8_t *a) {
  uint64_t w;
  memcpy(&w, a, 8);
  return w;
}
static inline void store64(uint8_t *a, uint64_t w) { memcpy(a, &w, 8); }

/* The canary: the CANARY_MAX bytes after the request, or those up to the block's end (at least
 * one: the allocation asked for a byte more). Written and checked as two unaligned words: the
 * first at `after`, the second after it or, with fewer than 16 bytes left, ending at the
 * block's end (overlapping the first); under 8 bytes left, the top bytes of the block's last
 * word. (Byte by byte, the canary was a third of secure mode's cost: sizes just under a class
 * size leave fewer than 16 bytes.) */
static inline uint64_t canary_mask(size_t room) { return room > 0 ? ~(uint64_t)0 << (8 * (8 - room)) : 0; }

/* The second word: at after + 8, or ending at the block's end if that is nearer (fewer than
 * 16 bytes left). A min of two addresses, where the same choice made from `room` cost 3
 * instructions more on each side. */
static inline uint8_t *canary_second(uint8_t *after, uint8_t *end) {
  _Static_assert(CANARY_MAX == 16, "the canary is two words");
  return after + 8 < end - 8 ? after + 8 : end - 8;
}

/* With at least 8 bytes left, as malloc's fast path always has (page.c's direct table points a
 * class up in secure mode). */
static inline void canary_arm_word(uint8_t *after, uint8_t *end) {
  store64(after, canary_word);
  store64(canary_second(after, end), canary_word);
}

static inline void canary_arm(uint8_t *after, uint8_t *end) {
  if (fg_likely(after <= end - 8)) {
    canary_arm_word(after, end);
    return;
  }
  uint64_t mask = canary_mask((size_t)(end - after));
  store64(end - 8, (load64(end - 8) & ~mask) | (canary_word & mask));
}

static inline bool canary_intact(const uint8_t *after, const uint8_t *end) {
  if (fg_likely(after <= end - 8)) {
    uint64_t a = load64(after), b = load64(canary_second((uint8_t *)after, (uint8_t *)end));
    return ((a ^ canary_word) | (b ^ canary_word)) == 0;
  }
  return ((load64(end - 8) ^ canary_word) & canary_mask((size_t)(end - after))) == 0;
}

/* ---- new blocks: filled like freed ones, handed out in shuffled order ------------------------- */

static fg_rare uint64_t next_random(uint64_t *state) { /* xorshift64* */
  uint64_t x = *state;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  *state = x;
  return x * 0x2545f4914f6cdd1du;
}

/* The fill: bytes 8 to min(block size, FILL_MAX) of a free block (word 0 is the free-list
 * link; block sizes are multiples of 8), written and checked as at most four 16-byte spans that
 * overlap where the block is shorter: no loop, whatever the size (a loop of bsize / 8 words
 * was a fifth of secure mode's instructions on small C++ objects). */
static inline fill_v2 load128(const uint8_t *a) {
  fill_v2 v;
  memcpy(&v, a, 16);
  return v;
}

/* Blocks of FILL_MAX or more (the common case) take the spans at fixed offsets: no min, no
 * address arithmetic. Shorter ones: [8, bsize) as spans at 8, 24, bsize - 32 and bsize - 16,
 * or at 8 and bsize - 16. */
static inline void fill_free(uint8_t *block, size_t bsize) {
  fill_v2 f = fill_vec;
  if (fg_likely(bsize >= FILL_MAX)) {
    _Static_assert(FILL_MAX == 64, "the spans below cover [8, 64)");
    memcpy(block + 8, &f, 16);
    memcpy(block + 24, &f, 16);
    memcpy(block + 32, &f, 16);
    memcpy(block + 48, &f, 16);
  } else if (bsize >= 40) {
    memcpy(block + 8, &f, 16);
    memcpy(block + 24, &f, 16);
    memcpy(block + bsize - 32, &f, 16);
    memcpy(block + bsize - 16, &f, 16);
  } else if (bsize >= 24) {
    memcpy(block + 8, &f, 16);
    memcpy(block + bsize - 16, &f, 16);
  } else if (bsize == 16) {
    store64(block + 8, fill_word);
  }
}

static inline bool fill_intact(const uint8_t *block, size_t bsize) {
  fill_v2 f = fill_vec, d;
  if (fg_likely(bsize >= FILL_MAX))
    d = (load128(block + 8) ^ f) | (load128(block + 24) ^ f) | (load128(block + 32) ^ f) | (load128(block + 48) ^ f);
  else if (bsize >= 40)
    d = (load128(block + 8) ^ f) | (load128(block + 24) ^ f) | (load128(block + bsize - 32) ^ f) |
        (load128(block + bsize - 16) ^ f);
  else if (bsize >= 24)
    d = (load128(block + 8) ^ f) | (load128(block + bsize - 16) ^ f);
  else
    return bsize < 16 || load64(block + 8) == fill_word;
  return (d[0] | d[1]) == 0;
}

/* New blocks are handed out in a random order within runs of SHUFFLE_RUN neighbours, the runs
 * in ascending address order. A shuffle of the whole 4 KiB carved at a time cost more than
 * every check on programs that use blocks in the order they got them, as their consecutive
 * blocks no longer shared cache lines nor ran in an order the prefetchers follow; and the
 * direction counts as much (CPU s, secure mode, 2026-11-23, median of 3 interleaved runs:
 * FIFO of 16 B blocks whole 1.11, runs of 4 descending 0.63, ascending 0.48, plain mode 0.21;
 * FIFO of 64 B - / 0.38 / 0.19 / 0.11; of 128 B 0.44 / 0.38 / 0.18 / 0.10; std::list 0.54 /
 * 0.33 / 0.23 / 0.16). Runs of 4 keep 4! orders per run; blocks of 1 KiB and more (4 or fewer
 * carved at a time) are shuffled whole. The list is built from its end: the last
 * run first. */
#define SHUFFLE_RUN 4

/* The 24 orders of a run of 4, each as four 2-bit indices (lowest first): a run's order is one
 * random pick from the table, where a Fisher-Yates walk over an index array cost the carve 29
 * instructions a block (a 16 B FIFO re-carves every block each round). */
static const uint8_t run_orders[24] = {0xe4, 0xb4, 0xd8, 0x78, 0x9c, 0x6c, 0xe1, 0xb1, 0xc9, 0x39, 0x8d, 0x2d,
                                       0xd2, 0x72, 0xc6, 0x36, 0x4e, 0x1e, 0x93, 0x63, 0x87, 0x27, 0x4b, 0x1b};
_Static_assert(SHUFFLE_RUN == 4, "run_orders holds the orders of 4 blocks");

/* The fill of n new blocks, in a pass of its own: the loop has one block size, so the
 * compiler takes fill_free's case out of it (unswitched at -O3); inside the shuffled linking
 * loop, the case and each block's address cost the carve 26 instructions a block against
 * plain mode's 7 (callgrind, FIFO of 16 B blocks, which carves every block again each round). */
static fg_rare void fill_new(uint8_t *b, size_t bsize, uint32_t n) {
  for (uint8_t *end = b + (size_t)n * bsize; b < end; b += bsize) fill_free(b, bsize);
}

/* A new block linked in front of `head`: _fg_link with the page's key in a register (the
 * block's store could alias page->key, which the compiler would load again each time). */
static inline fg_link_t link_new(uint8_t *b, fg_link_t head, uintptr_t key) {
  ((fg_block_t *)b)->next = head;
  return _fg_link_key(key, b);
}

fg_rare void _fg_secure_carve(fg_page_t *page, uint8_t *first, uint32_t n) {
  size_t bsize = page->block_size;
  uint64_t state = page->key ^ ((uint64_t)page->capacity << 32) ^ (uintptr_t)first;
  if (state == 0) state = 1;
  fill_new(first, bsize, n);
  fg_link_t head = _fg_head_link(page, page->free);
  uintptr_t key = page->key;
  /* A block's offset in its run by index, so that a block costs a load and no multiply. */
  const size_t at[SHUFFLE_RUN] = {0, bsize, 2 * bsize, 3 * bsize};
  /* The last run first: it may be short (m blocks), and takes the order of its m blocks from a
   * run of 4's, skipping the rest: uniform too. The full runs after it need no such test. */
  uint32_t r = (n - 1) / SHUFFLE_RUN * SHUFFLE_RUN, m = n - r;
  for (;; r -= SHUFFLE_RUN, m = SHUFFLE_RUN) {
    uint32_t order = run_orders[((next_random(&state) >> 32) * 24) >> 32];
    uint8_t *run = first + (size_t)r * bsize;
    if (fg_likely(m == SHUFFLE_RUN)) {
      for (uint32_t k = 0; k < SHUFFLE_RUN; k++, order >>= 2) head = link_new(run + at[order & 3], head, key);
    } else {
      for (uint32_t k = 0; k < SHUFFLE_RUN; k++, order >>= 2)
        if ((order & 3) < m) head = link_new(run + at[order & 3], head, key);
    }
    if (r == 0) break;
  }
  page->free = _fg_link_head(page, head);
}

/* ---- what hooks.c calls, and malloc and free for secure mode alone ------------------------- */

/* Reached by tail calls from malloc's path (_fg_secure_popped): a call to a function known not
 * to return needs an aligned stack, which cost that path a frame of its own (2 instructions a
 * malloc). It returns only for b == NULL, which never comes here, so that the compiler does
 * not find it noreturn. */
static fg_noinline fg_cold fg_rare void *write_after_free(const void *b) {
  if (b != NULL) _fg_misuse("write after free", b);
  return NULL;
}

static fg_noinline fg_cold fg_rare void overflow(const void *p) {
  _fg_misuse("heap buffer overflow (canary after the block)", p);
}

/* A block handed out for `size` bytes at p: its fill must be intact (nobody wrote to it while
 * it was free); then its request is stored and its canary armed. */
static inline void arm(const secure_loc_t *loc, void *p, size_t size) {
  if (loc->page != NULL && fg_unlikely(!fill_intact(loc->block, loc->page->block_size))) write_after_free(loc->block);
  store_request(loc, size + 1);
  canary_arm((uint8_t *)p + size, loc->end);
}

/* A block freed at p: its canary must be intact; then it is filled. Returns the stored request
 * + 1 (0: unknown, or freed already), left in place. */
static inline size_t disarm(const secure_loc_t *loc, const void *p) {
  size_t stored = stored_request(loc);
  if (stored != 0 && fg_unlikely(!canary_intact((const uint8_t *)p + stored - 1, loc->end))) overflow(p);
  if (loc->page != NULL) fill_free(loc->block, loc->page->block_size);
  return stored;
}

fg_rare void _fg_secure_alloc(void *p, size_t size) {
  secure_loc_t loc;
  if (locate_new(p, &loc)) arm(&loc, p, size);
}

/* `clear`: the request too (the ledger reads it otherwise). */
static inline size_t secure_free(void *p, bool clear) {
  secure_loc_t loc;
  if (!locate(p, &loc)) return 0;
  size_t stored = disarm(&loc, p);
  if (clear) store_request(&loc, 0);
  return stored != 0 ? stored - 1 : 0;
}

fg_rare size_t _fg_secure_free(void *p) { return secure_free(p, true); }
fg_rare size_t _fg_secure_free_keep(void *p) { return secure_free(p, false); }

fg_rare void _fg_secure_arm(fg_page_t *page, void *p, size_t size) {
  secure_loc_t loc;
  if (!side_ready(page, p)) return;
  locate_small(page, p, &loc);
  arm(&loc, p, size);
}

fg_rare void _fg_secure_freeing(fg_page_t *page, fg_block_t *b, const void *p) {
  secure_loc_t loc;
  if (fg_unlikely(page->requested == NULL)) return; /* armed without a side array: unwatched */
  locate_small(page, b, &loc);
  disarm(&loc, p);
  *loc.slot = 0;
}

fg_rare size_t _fg_secure_requested(const void *p) {
  secure_loc_t loc;
  if (!locate(p, &loc)) return SIZE_MAX;
  size_t stored = stored_request(&loc);
  return stored != 0 ? stored - 1 : SIZE_MAX;
}

/* ---- secure mode alone: malloc's fast path and free's own path ------------------------------ */

/* As write_after_free: a tail call, not found noreturn. */
static fg_noinline fg_cold fg_rare void *corrupted_list(const void *p) {
  if (p != NULL) _fg_misuse("corrupted free list (a write after free into its link)", p);
  return NULL;
}

fg_rare void *_fg_secure_popped(fg_page_t *page, void *p, size_t size) {
  /* The pop moved p's link, encoded, into the plain head: decode it, and check that it ends
   * the list or leads to a carved block of this page. Overwritten after free, it decodes to
   * an address that does neither (but for a 2^-13 chance on a small page), which the next pop
   * would otherwise hand out. */
  fg_link_t head = _fg_link_head(page, page->free);
  page->free = head;
  /* The next pop reads head's link: what alloc.c's pop prefetches, but decoded (the pop's
   * own prefetch saw the encoded link, an address of nothing). Python under PYTHONMALLOC=malloc
   * spent 10.5 % of its time in fg_malloc in secure mode, 7.6 % in plain, on that miss. */
  __builtin_prefetch(_fg_block_plain(head));
  if (fg_unlikely(!_fg_link_nil_plain(head)) &&
      fg_unlikely(!_fg_block_carved_own(page, (size_t)((uint8_t *)_fg_block_plain(head) - page->start))))
    return corrupted_list(p);
  uint8_t *b = p;
  size_t bsize = page->block_size;
  if (fg_unlikely(!fill_intact(b, bsize))) return write_after_free(b);
  page->requested[_fg_block_index(page, (size_t)(b - page->start))] = (uint32_t)size + 1;
  canary_arm_word(b + size, b + bsize); /* the direct table left it 8 bytes at least */
  return p;
}

/* Secure mode's own push: its pages always carry FG_USED_SECURE (free's used_drop would
 * always jump): the page needs a look only when it was full or is now empty; a lone empty page
 * stays, the clock looked at every 16th time (as free.c's page_freed_into). */
static fg_noinline fg_rare void page_freed(fg_page_t *page) {
  if (_fg_page_used(page) == 0 && !_fg_page_in_full(page) && page->next == page->prev &&
      (++page->heap->ticks & 15) != 0)
    return;
  _fg_page_unflag(page);
}

fg_rare void _fg_secure_free_small(void *p, size_t size, unsigned sized, unsigned v) {
  uint8_t *b = p;
  fg_page_t *page = _fg_page_at(_fg_segment_of(p), p, v & ~FG_SEGMAP_HOOKED);
  size_t off = (size_t)(b - page->start), bsize = page->block_size;
  if (fg_unlikely(page->heap != _fg_heap())) goto other;
  if (fg_unlikely((page->used & FG_USED_SECURE) == 0)) goto checked;
  if (fg_unlikely(sized && _fg_wrong_size(size, bsize, 0))) goto checked;
  size_t idx;
  if (fg_unlikely(!_fg_block_carved_at(page, off, &idx))) goto checked; /* aligned, or a misuse */
  uint32_t *slot = &page->requested[idx];
  uint32_t stored = *slot;
  if (fg_unlikely(stored == 0)) goto checked; /* freed already (a double free), or never armed */
  if (fg_unlikely(!canary_intact(b + stored - 1, b + bsize))) overflow(p);
  *slot = 0;
  fill_free(b, bsize);
  ((fg_block_t *)b)->next = _fg_head_link(page, page->free);
  page->free = _fg_link_plain(b);
  uint32_t used = --page->used;
  if (fg_unlikely((used & FG_USED_FULL) != 0 || (used & FG_USED_COUNT) == 0)) page_freed(page);
  return;
checked:
  _fg_free_raw(p, sized, size);
  return;
other: /* another thread's block, or a large one: as _fg_free_raw would, less its first look-ups
        * (40 instructions of a cross-thread free's 200) */
  if (fg_unlikely(sized)) goto checked; /* the size checked first there */
  _fg_free_other(page, p);
}
