/* guard.c — guarded sampling: now and then (sample.c decides when) a small allocation gets a
 * slot of its own, a large-block mapping whose block ends against a PROT_NONE page and which
 * is made inaccessible when freed, until the slot is reused many guarded allocations later.
 * An overflow or a use after free on it faults; the SIGSEGV handler names it and aborts. */
#define _GNU_SOURCE
#include "internal.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/mman.h>

/* At most this many slots, 3 pages each (header, block, guard): 256 keep the memory to
 * 2 MiB resident and a freed block out of reach for the next 255 guarded allocations. */
#define GUARD_SLOTS 256
#define SLOT_BYTES (3 * FG_OS_PAGE)

static fg_lock_t guard_lock;
static fg_segment_t *quarantine_head, *quarantine_tail; /* freed slots, oldest first (next) */
static size_t slots;
static struct sigaction previous; /* the SIGSEGV action before ours: faults not ours go there */

static uint8_t *block_page(fg_segment_t *s) { return (uint8_t *)s + FG_OS_PAGE; }

/* A slot for a request of `size` <= a page: a new one while there are fewer than
 * GUARD_SLOTS, else the one freed longest ago, made accessible again. NULL: none free. */
static fg_segment_t *slot_take(void) {
  _fg_lock(&guard_lock);
  fg_segment_t *s = NULL;
  bool fresh = slots < GUARD_SLOTS;
  if (fresh) {
    slots++;
  } else if ((s = quarantine_head) != NULL) {
    quarantine_head = s->next;
    if (quarantine_head == NULL) quarantine_tail = NULL;
  }
  _fg_unlock(&guard_lock);
  if (fresh) {
    s = _fg_segment_map_large(SLOT_BYTES);
    if (s == NULL || mprotect(block_page(s) + FG_OS_PAGE, FG_OS_PAGE, PROT_NONE) != 0) {
      _fg_lock(&guard_lock);
      slots--;
      _fg_unlock(&guard_lock);
      if (s != NULL) _fg_segment_unmap(s);
      return NULL;
    }
    s->guarded = 1;
  } else if (s != NULL && mprotect(block_page(s), FG_OS_PAGE, PROT_READ | PROT_WRITE) != 0) {
    _fg_guard_free(s); /* back to the quarantine; the plain path serves this request */
    return NULL;
  }
  return s;
}

void *_fg_guard_alloc(size_t size, bool zero, uint32_t stack) {
  fg_segment_t *s = slot_take();
  if (s == NULL) return NULL;
  /* The end of the block of its size class against the guard page: usable size and
   * alignment are what the plain path gives (a program behaves the same, guarded or not),
   * and an overflow faults at the first byte past the class size (the request's, for most
   * small sizes; 12.5 % of slack at most). */
  size_t offset = 2 * FG_OS_PAGE - _fg_class_size(_fg_class_of(size));
  uint8_t *p = (uint8_t *)s + offset;
  if (zero) memset(p, 0, size);
  s->large_offset = offset;
  s->sample_size = size;
  s->sample_stack = stack;
  s->free_stack = FG_NO_STACK;
  s->sampled = 0;
  atomic_store_explicit(&s->large_state, FG_LARGE_LIVE, memory_order_release);
  return p;
}

/* The slot's block was freed (large.c checked it was live): out of reach until reused. */
void _fg_guard_free(fg_segment_t *s) {
  s->free_stack = _fg_stack_capture(2); /* _fg_guard_free, _fg_large_free */
  mprotect(block_page(s), FG_OS_PAGE, PROT_NONE);
  _fg_lock(&guard_lock);
  s->next = NULL;
  if (quarantine_tail != NULL)
    quarantine_tail->next = s;
  else
    quarantine_head = s;
  quarantine_tail = s;
  _fg_unlock(&guard_lock);
}

/* ---- the fault handler ------------------------------------------------------------------------ */

static void write_stack(fg_writer_t *w, const char *title, uint32_t stack) {
  fg_frame_t frames[FG_STACK_FRAMES];
  size_t n = stack != FG_NO_STACK ? _fg_stack_frames(stack, frames) : 0;
  _fg_w_printf(w, "  %s:%s\n", title, n == 0 ? " (no stack: libunwind not loaded)" : "");
  for (size_t i = 0; i < n; i++) {
    const char *mod = strrchr(frames[i].module, '/');
    _fg_w_printf(w, "    #%zu %s (%s+0x%lx)\n", i, frames[i].symbol != NULL ? frames[i].symbol : "??",
                 mod != NULL ? mod + 1 : frames[i].module, (unsigned long)frames[i].offset);
  }
}

/* One `frugal: ` line naming the bug and the address, the block and its stacks, then abort. */
static fg_noreturn void report(fg_segment_t *s, const uint8_t *addr) {
  const uint8_t *p = (uint8_t *)s + s->large_offset, *end = p + s->sample_size;
  /* A live block's page is accessible: only its guard page faults. */
  bool freed = atomic_load_explicit(&s->large_state, memory_order_acquire) != FG_LARGE_LIVE;
  bool after = addr >= end;
  char buf[4096];
  fg_writer_t w = {buf, sizeof buf, 0, 2};
  _fg_w_printf(&w, "frugal: %s at %p: byte %zu %s the %zu-byte block at %p\n",
               freed ? "use-after-free" : "heap-buffer-overflow", (const void *)addr,
               after ? (size_t)(addr - end) + 1 : (size_t)(addr >= p ? addr - p : p - addr),
               after ? "past the end of" : addr >= p ? "of" : "before", (size_t)s->sample_size, (const void *)p);
  write_stack(&w, "allocated at", s->sample_stack);
  if (freed) write_stack(&w, "freed at", s->free_stack);
  _fg_w_flush(&w);
  signal(SIGABRT, SIG_DFL);
  abort();
}

static void on_fault(int sig, siginfo_t *info, void *context) {
  const uint8_t *addr = info->si_addr;
  fg_segment_t *s = _fg_segment_of(addr);
  if (_fg_segment_valid(s) && s->kind == FG_SEG_LARGE &&
      s->guarded && addr >= block_page(s) && addr < (uint8_t *)s + SLOT_BYTES)
    report(s, addr);
  /* Not ours: what the program (or the default) would have done. */
  if ((previous.sa_flags & SA_SIGINFO) && previous.sa_sigaction != NULL) {
    previous.sa_sigaction(sig, info, context);
  } else if (previous.sa_handler != SIG_DFL && previous.sa_handler != SIG_IGN) {
    previous.sa_handler(sig);
  } else { /* the default action, on the same fault once this handler returns */
    sigaction(SIGSEGV, &previous, NULL);
    if (previous.sa_handler == SIG_IGN) signal(SIGSEGV, SIG_DFL);
  }
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
