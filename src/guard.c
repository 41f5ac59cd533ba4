/* guard.c — guarded sampling: now and then (sample.c decides when) a small allocation gets a
 * slot of its own in one region reserved for them, a page whose block ends against a
 * PROT_NONE page (or starts after one), sealed when freed and left so until reused many
 * guarded allocations later. An overflow or a use after free on it faults; the SIGSEGV
 * handler names it and aborts. A guard must cost next to nothing, so: one mapping for all
 * slots, made once; one mprotect to open a slot and one mmap to seal it (which also drops
 * its page, so the quarantine is not resident); a lock held for a few instructions. */
#define _GNU_SOURCE
#include "internal.h"

#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

/* At most this many slots: a freed block stays out of reach for the next 255 guarded
 * allocations, and live guarded blocks take at most 1 MiB. */
#define GUARD_SLOTS 256

/* The region: one segment (4 MiB-aligned, so free() finds its header like any large
 * block's), header pages with the slots' table, then a guard page, and per slot a block page
 * and a guard page: every block page lies between two guard pages. */
typedef struct slot_s {
  _Atomic(uint8_t) state; /* SLOT_UNUSED, SLOT_LIVE or SLOT_FREED */
  uint16_t offset;        /* of the block in its page */
  uint32_t size;          /* requested */
  uint32_t alloc_stack, free_stack;
} slot_t;
enum { SLOT_UNUSED, SLOT_LIVE, SLOT_FREED };

#define SLOTS_AT ((sizeof(fg_segment_t) + sizeof(fg_page_t) + 63) & ~(size_t)63)
#define HEADER_PAGES ((SLOTS_AT + GUARD_SLOTS * sizeof(slot_t) + FG_OS_PAGE - 1) / FG_OS_PAGE)
#define REGION_PAGES (HEADER_PAGES + 2 * GUARD_SLOTS + 1)
_Static_assert(REGION_PAGES * FG_OS_PAGE <= FG_SEGMENT_SIZE, "the slots fit one segment");

static fg_lock_t guard_lock; /* the slot counters and the quarantine ring below */
static _Atomic(fg_segment_t *) region;
static bool region_failed;    /* no mapping for it: guarding stays off */
static bool underflow;        /* FRUGAL_GUARD_UNDERFLOW: blocks start after their guard page */
static uint32_t fresh;        /* slots handed out at least once */
static uint16_t ring[GUARD_SLOTS];     /* the quarantine: freed slots, oldest first */
static uint32_t ring_head, ring_count; /* from ring[ring_head], modulo GUARD_SLOTS */
static struct sigaction previous; /* the SIGSEGV action before ours: faults not ours go there */

static slot_t *slots(fg_segment_t *s) { return (slot_t *)((uint8_t *)s + SLOTS_AT); }
static uint8_t *block_page(fg_segment_t *s, uint32_t i) {
  return (uint8_t *)s + (HEADER_PAGES + 1 + 2 * (size_t)i) * FG_OS_PAGE;
}
static uint8_t *block_of(fg_segment_t *s, uint32_t i) { return block_page(s, i) + slots(s)[i].offset; }

/* Under guard_lock, once: the region mapped, all but its header made inaccessible. Its pages
 * cost nothing until a slot is written. */
static void region_create(void) {
  size_t bytes = REGION_PAGES * FG_OS_PAGE, header = HEADER_PAGES * FG_OS_PAGE;
  fg_segment_t *s = _fg_os_alloc_aligned(bytes, FG_SEGMENT_SIZE);
  if (s == NULL || !_fg_os_protect((uint8_t *)s + header, bytes - header, false)) {
    if (s != NULL) _fg_os_free(s, bytes);
    region_failed = true;
    return;
  }
  _fg_segment_large_init(s, bytes);
  s->guarded = 1; /* large.c sends its frees, sizes and reallocs here */
  atomic_store_explicit(&s->large_state, FG_LARGE_FREE, memory_order_relaxed); /* no block of its own */
  underflow = _fg_option(FG_OPTION_GUARD_UNDERFLOW) != 0;
  atomic_store_explicit(&region, s, memory_order_release);
}

/* A slot never used, else the one freed longest ago; -1: none (all live, or no region). */
static int slot_take(void) {
  int i = -1;
  _fg_lock(&guard_lock);
  if (region == NULL && !region_failed) region_create();
  if (region == NULL) {
  } else if (fresh < GUARD_SLOTS) {
    i = (int)fresh++;
  } else if (ring_count > 0) {
    i = ring[ring_head];
    ring_head = (ring_head + 1) % GUARD_SLOTS;
    ring_count--;
  }
  _fg_unlock(&guard_lock);
  return i;
}

static void slot_put(uint32_t i) {
  _fg_lock(&guard_lock);
  ring[(ring_head + ring_count++) % GUARD_SLOTS] = (uint16_t)i;
  _fg_unlock(&guard_lock);
}

void *_fg_guard_alloc(size_t size, bool zero) {
  int i = slot_take();
  if (i < 0) return NULL;
  fg_segment_t *s = region;
  uint8_t *page = block_page(s, (uint32_t)i);
  if (!_fg_os_protect(page, FG_OS_PAGE, true)) {
    slot_put((uint32_t)i); /* the plain path serves this request */
    return NULL;
  }
  /* The block of its size class (usable size and alignment are what the plain path gives:
   * a program behaves the same, guarded or not) against the guard page after it, so an
   * overflow faults at the first byte past the class size (the request's, for most small
   * sizes; 12.5 % of slack at most); or, for underflows, at the page's start. */
  slot_t *sl = &slots(s)[i];
  sl->offset = (uint16_t)(underflow ? 0 : FG_OS_PAGE - _fg_class_size(_fg_class_of(size)));
  sl->size = (uint32_t)size;
  sl->alloc_stack = _fg_stack_capture(2); /* _fg_guard_alloc, _fg_sample_alloc */
  sl->free_stack = FG_NO_STACK;
  atomic_store_explicit(&sl->state, SLOT_LIVE, memory_order_release);
  uint8_t *p = page + sl->offset;
  if (zero) memset(p, 0, size); /* sealed pages read as zeros, unless sealing failed */
  return p;
}

/* The slot whose block starts at p, or -1. */
static int slot_of_block(fg_segment_t *s, const void *p) {
  size_t off = (size_t)((const uint8_t *)p - (uint8_t *)s), page = off / FG_OS_PAGE;
  if (page < HEADER_PAGES + 1 || page >= REGION_PAGES || (page - HEADER_PAGES) % 2 == 0) return -1;
  uint32_t i = (uint32_t)(page - HEADER_PAGES - 1) / 2;
  return off % FG_OS_PAGE == slots(s)[i].offset ? (int)i : -1;
}

static slot_t *live_slot(fg_segment_t *s, const void *p) {
  int i = slot_of_block(s, p);
  if (i < 0) _fg_misuse("invalid pointer", p);
  slot_t *sl = &slots(s)[i];
  if (atomic_load_explicit(&sl->state, memory_order_acquire) != SLOT_LIVE) _fg_misuse("double free", p);
  return sl;
}

/* free() of a block in the region (large.c sends it here): sealed, then quarantined. */
void _fg_guard_free(fg_segment_t *s, const void *p) {
  int i = slot_of_block(s, p);
  if (i < 0) _fg_misuse("invalid pointer", p);
  slot_t *sl = &slots(s)[i];
  uint8_t live = SLOT_LIVE;
  if (!atomic_compare_exchange_strong(&sl->state, &live, SLOT_FREED)) _fg_misuse("double free", p);
  sl->free_stack = _fg_stack_capture(3); /* _fg_guard_free, _fg_large_free, free_remote */
  uint8_t *page = block_page(s, (uint32_t)i);
  if (!_fg_os_seal(page, FG_OS_PAGE)) _fg_os_protect(page, FG_OS_PAGE, false);
  slot_put((uint32_t)i);
}

size_t _fg_guard_usable(fg_segment_t *s, const void *p) {
  return _fg_class_size(_fg_class_of(live_slot(s, p)->size));
}

fg_rare bool _fg_guard_owns(fg_segment_t *s, const void *p) {
  int i = slot_of_block(s, p);
  return i >= 0 && atomic_load_explicit(&slots(s)[i].state, memory_order_acquire) == SLOT_LIVE;
}

/* ---- the fault handler ------------------------------------------------------------------------ */

static fg_rare void write_stack(fg_writer_t *w, const char *title, uint32_t stack) {
  fg_frame_t frames[FG_STACK_FRAMES];
  size_t n = stack != FG_NO_STACK ? _fg_stack_frames(stack, frames) : 0;
  _fg_w_printf(w, "  %s:%s\n", title, n == 0 ? " (no stack)" : "");
  for (size_t i = 0; i < n; i++) {
    const char *mod = strrchr(frames[i].module, '/');
    _fg_w_printf(w, "    #%zu %s (%s+0x%lx)\n", i, frames[i].symbol != NULL ? frames[i].symbol : "??",
                 mod != NULL ? mod + 1 : frames[i].module, (unsigned long)frames[i].offset);
  }
}

/* The slot a fault at addr is about, or -1 (a page of no block: not a heap bug we can name).
 * A sealed block page is its own slot's; a guard page is that of the nearer of the blocks on
 * either side of it. */
static fg_rare int slot_at(fg_segment_t *s, const uint8_t *addr) {
  size_t page = (size_t)(addr - (uint8_t *)s) / FG_OS_PAGE - HEADER_PAGES;
  if (page % 2 == 1) {
    uint32_t i = (uint32_t)(page - 1) / 2;
    return atomic_load_explicit(&slots(s)[i].state, memory_order_acquire) == SLOT_FREED ? (int)i : -1;
  }
  int best = -1;
  size_t best_gap = SIZE_MAX;
  for (size_t i = page / 2 - (page > 0); i <= page / 2 && i < GUARD_SLOTS; i++) {
    const slot_t *sl = &slots(s)[i];
    if (atomic_load_explicit(&sl->state, memory_order_acquire) == SLOT_UNUSED) continue;
    const uint8_t *p = block_of(s, (uint32_t)i);
    size_t gap = addr >= p ? (size_t)(addr - (p + sl->size)) : (size_t)(p - addr);
    if (gap < best_gap) best = (int)i, best_gap = gap;
  }
  return best;
}

/* One `frugal: ` line naming the bug and the address, the block and its stacks, then abort. */
static fg_noreturn fg_rare void report(fg_segment_t *s, uint32_t i, const uint8_t *addr) {
  const slot_t *sl = &slots(s)[i];
  const uint8_t *p = block_of(s, i), *end = p + sl->size;
  bool freed = atomic_load_explicit(&sl->state, memory_order_acquire) != SLOT_LIVE;
  bool after = addr >= end;
  char buf[4096];
  fg_writer_t w = {buf, sizeof buf, 0, 2};
  _fg_w_printf(&w, "frugal: %s at %p: byte %zu %s the %u-byte block at %p\n",
               freed ? "use-after-free" : after ? "heap-buffer-overflow" : "heap-buffer-underflow",
               (const void *)addr, after ? (size_t)(addr - end) + 1 : (size_t)(addr >= p ? addr - p : p - addr),
               after ? "past the end of" : addr >= p ? "of" : "before", sl->size, (const void *)p);
  write_stack(&w, "allocated at", sl->alloc_stack);
  if (freed) write_stack(&w, "freed at", sl->free_stack);
  _fg_w_flush(&w);
  signal(SIGABRT, SIG_DFL);
  abort();
}

/* Not ours: exactly what would have happened without frugal's handler. The previous
 * handler, called as the kernel would have (its mask, SA_RESETHAND); or its default action:
 * a fault (si_code > 0, from the kernel) comes back when the instruction runs again, and a
 * signal sent by a process (raise, kill, sigqueue: si_code <= 0) is sent again, with its own
 * siginfo, to this thread, where it waits until this handler returns. An ignored signal
 * stays ignored; an ignored fault kills, as the kernel forces. */
static fg_rare void pass_on(int sig, siginfo_t *info, void *context) {
  struct sigaction prev = previous;
  bool sent = info->si_code <= 0;
  if (prev.sa_handler == SIG_IGN && sent) return;
  if (prev.sa_handler != SIG_DFL && prev.sa_handler != SIG_IGN) {
    if (prev.sa_flags & SA_RESETHAND) {
      previous.sa_handler = SIG_DFL;
      previous.sa_flags &= ~SA_SIGINFO;
    }
    sigset_t old;
    pthread_sigmask(SIG_BLOCK, &prev.sa_mask, &old);
    if (prev.sa_flags & SA_SIGINFO)
      prev.sa_sigaction(sig, info, context);
    else
      prev.sa_handler(sig);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return;
  }
  signal(sig, SIG_DFL);
  if (sent) syscall(SYS_rt_tgsigqueueinfo, getpid(), (pid_t)syscall(SYS_gettid), sig, info);
}

static fg_rare void on_fault(int sig, siginfo_t *info, void *context) {
  const uint8_t *addr = info->si_addr;
  fg_segment_t *s = atomic_load_explicit(&region, memory_order_acquire);
  if (info->si_code > 0 && s != NULL && addr >= (uint8_t *)s + HEADER_PAGES * FG_OS_PAGE &&
      addr < (uint8_t *)s + REGION_PAGES * FG_OS_PAGE) {
    int i = slot_at(s, addr);
    if (i >= 0) report(s, (uint32_t)i, addr);
  }
  pass_on(sig, info, context);
}

void _fg_guard_lock(bool lock) {
  if (lock)
    _fg_lock(&guard_lock);
  else
    _fg_unlock(&guard_lock);
}

void _fg_guard_start(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_fault;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGSEGV, &sa, &previous);
}
