/* stacks.c — call stacks for whoever needs one (leak stacks, samples, guards): capture with
 * libunwind when leaks or profiles loaded it, else by walking frame pointers; intern into one
 * table of distinct stacks (an id per stack, so a block stores 4 bytes), and name the frames
 * for the reports. Interning runs under a lock. */
#define _GNU_SOURCE
#include "internal.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <unistd.h>

typedef struct stack_entry_s {
  uint64_t hash;
  uint32_t depth;
  void *pc[FG_STACK_FRAMES];
} stack_entry_t;

static pthread_mutex_t stack_lock = PTHREAD_MUTEX_INITIALIZER;
static stack_entry_t *stack_table;
static uint32_t *stack_index; /* open addressing over stack_table, entries are index + 1 */
static size_t stack_cap, stack_count;
/* libunwind's unw_backtrace, loaded by _fg_stacks_load when stacks are asked for: the
 * library is not a dependency of every program frugal is preloaded into. */
static int (*backtrace_fn)(void **frames, int max);
static void *self_base;

uint64_t _fg_mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdu;
  x ^= x >> 33;
  return x;
}

fg_rare bool _fg_stacks_load(const char *who) {
  if (backtrace_fn != NULL) return true;
  bool was = _fg_own_begin();
  void *lib = dlopen("libunwind.so.8", RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) lib = dlopen("libunwind.so", RTLD_NOW | RTLD_LOCAL);
  void *fn = lib != NULL ? dlsym(lib, "unw_backtrace") : NULL;
  _fg_own_end(was);
  if (fn == NULL) {
    if (who != NULL) _fg_warning(who, ": libunwind not found (apt-get install libunwind8): no call stacks");
    return false;
  }
  memcpy(&backtrace_fn, &fn, sizeof fn);
  return true;
}

/* A table and its index share one mapping. The first holds 16 stacks in one page: guards
 * take a stack or two per process (the first guard's table and index took 2 pages of the
 * 152 KiB mapped for 1024); leak stacks and profiles double it as they need. */
#define STACKS_FIRST 16

static size_t table_bytes(size_t cap) {
  return fg_align_up(cap * sizeof(stack_entry_t) + cap * 2 * sizeof(uint32_t), FG_OS_PAGE);
}

static bool stack_grow(void) {
  size_t cap = stack_cap == 0 ? STACKS_FIRST : stack_cap * 2;
  stack_entry_t *t = _fg_os_alloc_aligned(table_bytes(cap), FG_OS_PAGE);
  if (t == NULL) return false;
  uint32_t *index = (uint32_t *)(t + cap);
  if (stack_table != NULL) {
    memcpy(t, stack_table, stack_count * sizeof *t);
    _fg_os_free(stack_table, table_bytes(stack_cap));
  }
  for (size_t i = 0; i < stack_count; i++) {
    size_t j = t[i].hash & (cap * 2 - 1);
    while (index[j] != 0) j = (j + 1) & (cap * 2 - 1);
    index[j] = (uint32_t)i + 1;
  }
  stack_table = t;
  stack_index = index;
  stack_cap = cap;
  return true;
}

/* Under stack_lock. */
static uint32_t stack_intern(void **pc, uint32_t depth) {
  uint64_t h = depth;
  for (uint32_t i = 0; i < depth; i++) h = _fg_mix(h ^ (uint64_t)(uintptr_t)pc[i]);
  if (stack_count + 1 > stack_cap && !stack_grow()) return FG_NO_STACK;
  size_t mask = stack_cap * 2 - 1;
  for (size_t j = h & mask;; j = (j + 1) & mask) {
    uint32_t e = stack_index[j];
    if (e == 0) {
      stack_entry_t *st = &stack_table[stack_count];
      st->hash = h;
      st->depth = depth;
      memcpy(st->pc, pc, depth * sizeof *pc);
      stack_index[j] = (uint32_t)++stack_count;
      return (uint32_t)stack_count - 1;
    }
    stack_entry_t *st = &stack_table[e - 1];
    if (st->hash == h && st->depth == depth && memcmp(st->pc, pc, depth * sizeof *pc) == 0) return e - 1;
  }
}

/* The main thread's stack top (glibc's, set at process start). */
extern void *__libc_stack_end;
/* How far below __libc_stack_end the main thread's stack is believed to reach: the default
 * RLIMIT_STACK. The kernel keeps other mappings at least 128 MiB below the stack's top. */
#define MAIN_STACK_SPAN ((uintptr_t)8 << 20)

/* This thread's stack, learnt at its first capture: [stack_lo, stack_hi); stack_hi 1: unknown. */
static __thread uintptr_t stack_lo __attribute__((tls_model("initial-exec")));
static __thread uintptr_t stack_hi __attribute__((tls_model("initial-exec")));

/* pthread_getattr_np reads /proc/self/maps for the main thread (slow, and it allocates), so the
 * main thread's comes from __libc_stack_end; another thread's is its pthread stack (its
 * cpuset query allocates: _fg_own_begin keeps that allocation from sampling itself). */
static fg_noinline void stack_learn(void) {
  uintptr_t top = (uintptr_t)__libc_stack_end, here = (uintptr_t)__builtin_frame_address(0);
  stack_hi = 1;
  if (here < top && top - here < MAIN_STACK_SPAN) { /* the main thread's stack */
    stack_lo = top - MAIN_STACK_SPAN;
    stack_hi = top;
    return;
  }
  pthread_attr_t attr;
  void *addr;
  size_t size;
  if (pthread_getattr_np(pthread_self(), &attr) != 0) return;
  if (pthread_attr_getstack(&attr, &addr, &size) == 0) {
    stack_lo = (uintptr_t)addr;
    stack_hi = (uintptr_t)addr + size;
  }
  pthread_attr_destroy(&attr);
}

/* The return addresses of the frame-pointer chain from the caller of _fg_stack_capture up,
 * reading only between the stack pointer and the top of the thread's stack, when it runs on
 * that stack (not on a coroutine's or a signal stack: no walk there, as a link could point
 * into unmapped memory beside it). Code without frame pointers uses rbp as it likes: the walk
 * stops at the first link that does not point up the stack, so it always has the return
 * address into the program (frugal's allocation and free paths keep frame pointers) and as many callers as
 * keep theirs. Measured on this VM (2026-11-23, 15 frames): 7 ns; libunwind's unw_backtrace
 * 170-320 ns, and 95-230 us the first time in each thread; glibc's backtrace() 3-6.5 us. */
static inline int fp_walk(void **pc, int max) {
  if (stack_hi == 0) stack_learn();
  uintptr_t lo = (uintptr_t)__builtin_frame_address(0), hi = stack_hi;
  if (lo < stack_lo || lo >= hi || hi - lo < 2 * sizeof(uintptr_t)) return 0;
  hi -= 2 * sizeof(uintptr_t); /* a frame record is two words */
  const uintptr_t *fp = (const uintptr_t *)lo;
  int n = 0;
  while (n < max && fp[1] != 0) {
    pc[n++] = (void *)fp[1];
    uintptr_t next = fp[0];
    if (next <= (uintptr_t)fp || next > hi || (next & 7) != 0) break;
    fp = (const uintptr_t *)next;
  }
  return n;
}

/* libunwind's unw_backtrace walks the stack without malloc on x86-64; the guard keeps any
 * allocation it might still make from recording (and unwinding) itself. `skip`: frames of
 * frugal's own to drop from the top (the reports drop the rest of frugal's by module). The
 * frame-pointer walk keeps them all: frugal's entry points reach their slow paths by tail
 * jumps, which leave no frame, so a count could drop the program's own. */
uint32_t _fg_stack_capture(int skip) {
  if (_fg_own_doing()) return FG_NO_STACK;
  _fg_own_begin();
  void *pc[FG_STACK_FRAMES + 4];
  int depth;
  if (backtrace_fn != NULL) {
    depth = backtrace_fn(pc, FG_STACK_FRAMES + 4);
    skip += 1; /* this function */
  } else {
    depth = fp_walk(pc, FG_STACK_FRAMES + 4); /* from this function's caller */
    skip = 0;
  }
  if (skip > depth) skip = 0;
  uint32_t n = (uint32_t)(depth - skip > FG_STACK_FRAMES ? FG_STACK_FRAMES : depth - skip);
  pthread_mutex_lock(&stack_lock);
  uint32_t id = stack_intern(pc + skip, n);
  pthread_mutex_unlock(&stack_lock);
  _fg_own_end(false);
  return id;
}

void _fg_stacks_lock(bool lock) {
  if (lock)
    pthread_mutex_lock(&stack_lock);
  else
    pthread_mutex_unlock(&stack_lock);
}

fg_rare size_t _fg_stack_count(void) {
  pthread_mutex_lock(&stack_lock);
  size_t n = stack_count;
  pthread_mutex_unlock(&stack_lock);
  return n;
}

/* The main program's path: dladdr names it by argv[0], whose memory a program that sets its
 * process title (redis, postgres) writes over, and which may be relative anyway. */
static char exe_path[4096];

/* The module, its offset there, and the dynamic symbol of a return address. */
static fg_frame_t symbolize(void *pc) {
  fg_frame_t f = {"?", NULL, (uintptr_t)pc, false};
  Dl_info info;
  if (dladdr(pc, &info) != 0) {
    f.module = info.dli_fname != NULL ? info.dli_fname : "?";
    if (info.dli_fname == program_invocation_name) {
      if (exe_path[0] == '\0') { /* once; readlink is async-signal-safe (guard reports) */
        ssize_t n = readlink("/proc/self/exe", exe_path, sizeof exe_path - 1);
        exe_path[n > 0 ? n : 0] = '\0';
      }
      if (exe_path[0] != '\0') f.module = exe_path;
    }
    f.offset = (uintptr_t)pc - (uintptr_t)info.dli_fbase;
    f.symbol = info.dli_sname;
    f.ours = info.dli_fbase == self_base;
  }
  return f;
}

fg_rare size_t _fg_stack_frames(uint32_t stack, fg_frame_t *out) {
  size_t n = 0;
  Dl_info info;
  if (self_base == NULL && dladdr((void *)_fg_stack_frames, &info) != 0) self_base = info.dli_fbase;
  pthread_mutex_lock(&stack_lock);
  if (stack < stack_count) {
    const stack_entry_t *st = &stack_table[stack];
    for (uint32_t i = 0; i < st->depth; i++) {
      fg_frame_t f = symbolize(st->pc[i]);
      if (f.ours && n == 0) continue;
      out[n++] = f;
    }
  }
  pthread_mutex_unlock(&stack_lock);
  return n;
}
