/* secure.c — hardened mode (FRUGAL_SECURE=1): on top of the default checks, a canary after
 * each block's request (a 1-byte overflow is caught on free), a fill in freed blocks checked
 * when they are handed out again (a write after free), a PROT_NONE page at the end of every
 * segment and large block, and new pages' blocks handed out in shuffled order. hooks.c calls
 * in here. */
#define _GNU_SOURCE
#include "internal.h"

#include <sys/mman.h>

static uint8_t canary_byte, fill_byte;
static uint64_t fill_word;

/* Bounds that keep secure mode's cost per block, not per byte (measured on the lab's
 * workloads: 256 fill bytes checked one by one made a 128 B malloc/free 12x slower). */
#define CANARY_MAX 16 /* canary bytes after a request: a 1-byte overflow up to 16 is caught */
#define FILL_MAX 64   /* bytes of a freed block filled and checked, in words */

void _fg_secure_init(void) {
  /* Per-process bytes, never 0: a zeroing bug or a guessed value does not pass. */
  canary_byte = (uint8_t)(_fg_secret >> 8) | 0x81;
  fill_byte = (uint8_t)(_fg_secret >> 16) | 0x42;
  if (fill_byte == canary_byte) fill_byte ^= 0x10;
  fill_word = fill_byte * 0x0101010101010101u;
}

size_t _fg_secure_guard(void) { return _fg_secure_on() ? FG_OS_PAGE : 0; }

void _fg_secure_guard_mapping(void *base, size_t mapped) {
  if (_fg_secure_on()) mprotect((uint8_t *)base + mapped - FG_OS_PAGE, FG_OS_PAGE, PROT_NONE);
}

/* ---- where a block's request and bounds live ------------------------------------------------- */

typedef struct secure_loc_s {
  fg_page_t *page; /* small block's page, or NULL for a large block */
  fg_segment_t *large;
  uint8_t *block; /* block start (a small block's; the large block's user pointer) */
  uint8_t *end;   /* end of the bytes usable from the block */
  uint32_t *slot; /* small: request + 1 */
} secure_loc_t;

/* False for anything that is not a live frugal block start: the plain path reports it. */
static bool locate(const void *p, secure_loc_t *loc, bool create) {
  fg_segment_t *s = _fg_segment_of(p);
  if (p == NULL || !_fg_segment_valid(s)) return false;
  if (s->kind == FG_SEG_LARGE) {
    if ((const uint8_t *)p != (uint8_t *)s + s->large_offset) return false;
    loc->page = NULL;
    loc->large = s;
    loc->block = (uint8_t *)p;
    loc->end = (uint8_t *)s + s->mapped - _fg_secure_guard();
    loc->slot = NULL;
    return true;
  }
  fg_page_t *page = _fg_page_of(s, p);
  loc->slot = _fg_page_requested_slot(page, p, create);
  if (loc->slot == NULL) return false;
  size_t idx = _fg_block_index(page, (size_t)((const uint8_t *)p - page->start));
  loc->page = page;
  loc->large = NULL;
  loc->block = page->start + idx * page->block_size;
  if (loc->block != (const uint8_t *)p && !page->has_aligned) return false; /* interior: misuse */
  loc->end = loc->block + page->block_size;
  return true;
}

static size_t stored_request(const secure_loc_t *loc) {
  return loc->slot != NULL ? *loc->slot : loc->large->large_requested;
}

static void store_request(const secure_loc_t *loc, size_t stored) {
  if (loc->slot != NULL)
    *loc->slot = (uint32_t)stored;
  else
    loc->large->large_requested = stored;
}

static size_t canary_len(const uint8_t *from, const uint8_t *end) {
  size_t room = (size_t)(end - from);
  return room < CANARY_MAX ? room : CANARY_MAX;
}

/* ---- new blocks: filled like freed ones, handed out in shuffled order ------------------------- */

static uint64_t next_random(uint64_t *state) { /* xorshift64* */
  uint64_t x = *state;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  *state = x;
  return x * 0x2545f4914f6cdd1du;
}

/* Words 1.. of a free block (word 0 is the free-list link); block sizes are multiples of 8. */
static void fill_free(uint8_t *block, size_t bsize) {
  size_t words = (bsize < FILL_MAX ? bsize : FILL_MAX) / 8;
  for (size_t i = 1; i < words; i++) ((uint64_t *)block)[i] = fill_word;
}

static bool fill_intact(const uint8_t *block, size_t bsize) {
  size_t words = (bsize < FILL_MAX ? bsize : FILL_MAX) / 8;
  uint64_t diff = 0;
  for (size_t i = 1; i < words; i++) diff |= ((const uint64_t *)block)[i] ^ fill_word;
  return diff == 0;
}

void _fg_secure_carve(fg_page_t *page, uint8_t *first, uint32_t n) {
  size_t bsize = page->block_size;
  uint64_t state = page->key ^ ((uint64_t)page->capacity << 32) ^ (uintptr_t)first;
  if (state == 0) state = 1;
  /* Link the n new blocks in a random order: a Fisher-Yates walk over their indices,
   * kept implicit by swapping the link targets as we go. */
  uint16_t order[FG_OS_PAGE / 8];
  for (uint32_t i = 0; i < n; i++) order[i] = (uint16_t)i;
  for (uint32_t i = n - 1; i > 0; i--) {
    uint32_t j = (uint32_t)(next_random(&state) % (i + 1));
    uint16_t t = order[i];
    order[i] = order[j];
    order[j] = t;
  }
  fg_link_t head = page->free;
  for (uint32_t i = 0; i < n; i++) {
    uint8_t *b = first + (size_t)order[i] * bsize;
    fill_free(b, bsize);
    ((fg_block_t *)b)->next = head;
    head = _fg_link(page, b);
  }
  page->free = head;
}

/* ---- what hooks.c calls ----------------------------------------------------------------------------------- */

static fg_noinline fg_cold void write_after_free(const void *b) { _fg_misuse("write after free", b); }

void _fg_secure_alloc(void *p, size_t size) {
  secure_loc_t loc;
  if (!locate(p, &loc, true)) return;
  /* The fill must be intact: nobody wrote to the block while it was free. */
  if (loc.page != NULL && !fill_intact(loc.block, loc.page->block_size)) write_after_free(loc.block);
  store_request(&loc, size + 1);
  uint8_t *after = (uint8_t *)p + size;
  memset(after, canary_byte, canary_len(after, loc.end));
}

/* Check the canary and fill the block; `clear`: its request too (the ledger reads it otherwise). */
static size_t secure_free(void *p, bool clear) {
  secure_loc_t loc;
  if (!locate(p, &loc, false)) return 0;
  size_t stored = stored_request(&loc);
  if (stored != 0) {
    const uint8_t *after = (uint8_t *)p + stored - 1;
    size_t n = canary_len(after, loc.end);
    uint8_t diff = 0;
    for (size_t i = 0; i < n; i++) diff |= after[i] ^ canary_byte;
    if (diff != 0) _fg_misuse("heap buffer overflow (canary after the block)", p);
  }
  if (loc.page != NULL) fill_free(loc.block, loc.page->block_size);
  if (clear) store_request(&loc, 0);
  return stored != 0 ? stored - 1 : 0;
}

size_t _fg_secure_free(void *p) { return secure_free(p, true); }
size_t _fg_secure_free_keep(void *p) { return secure_free(p, false); }

size_t _fg_secure_requested(const void *p) {
  secure_loc_t loc;
  if (!locate(p, &loc, false)) return SIZE_MAX;
  size_t stored = stored_request(&loc);
  return stored != 0 ? stored - 1 : SIZE_MAX;
}
