/* guard.c — guarded sampling (issue 13, RELIABILITY.md): run with FRUGAL_GUARD_EVERY=1, so
 * every allocation up to a page gets a guarded slot; once as is (blocks end against their
 * guard page: overflows), once with FRUGAL_GUARD_UNDERFLOW=1 (blocks start after it). Each bug runs in a child process, which
 * must die of SIGABRT after one "frugal: <kind> at <address>" line followed by the stack that
 * allocated the block (and, after a free, the one that freed it). A fault that is not frugal's
 * must end the child as it would without frugal: SIGSEGV, no frugal line. Guarded blocks
 * must otherwise behave like any: aligned, usable, reallocated with their contents. */
#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>

#include "check.h"
#include "testutil.h"

static volatile uintptr_t *shared_ptr; /* the address the child is about to touch */

__attribute__((noinline)) static char *guard_alloc_site(size_t n) { return tu_ptr(malloc(n)); }
__attribute__((noinline)) static void guard_free_site(void *p) { free(p); }

static void overflow_32(void) {
  char *p = guard_alloc_site(32);
  *shared_ptr = (uintptr_t)(p + 32);
  p[32] = 1;
}
static void overflow_read_page(void) { /* a 4096-byte block, read one byte past it */
  volatile char *p = guard_alloc_site(4096);
  *shared_ptr = (uintptr_t)(p + 4096);
  (void)p[4096];
}
static void overflow_rounded(void) { /* 100 bytes: the guard begins past its class, 112 B */
  volatile char *p = guard_alloc_site(100);
  *shared_ptr = (uintptr_t)(p + 112);
  for (int i = 0; i < 120; i++) p[i] = 1; /* a byte at a time: the first fault is at 112 */
}
static void underflow_1(void) { /* with FRUGAL_GUARD_UNDERFLOW=1 */
  volatile char *p = guard_alloc_site(48);
  *shared_ptr = (uintptr_t)(p - 1);
  p[-1] = 1;
}
static void underflow_read_16(void) {
  volatile char *p = guard_alloc_site(200);
  *shared_ptr = (uintptr_t)(p - 16);
  (void)p[-16];
}
static void use_after_free_read(void) {
  volatile char *p = guard_alloc_site(64);
  guard_free_site((void *)p);
  *shared_ptr = (uintptr_t)p;
  (void)p[0];
}
static void use_after_free_write_later(void) { /* after other allocations and frees */
  char *p = guard_alloc_site(100);
  guard_free_site(p);
  for (int i = 0; i < 50; i++) free(malloc(16 + (size_t)i));
  *shared_ptr = (uintptr_t)(p + 40);
  p[40] = 7;
}
static void *first_in_thread(void *arg) { /* the thread's first allocation: guarded too */
  char *p = tu_ptr(malloc(64));
  *shared_ptr = (uintptr_t)(p + 64);
  p[64] = 1;
  return arg;
}
static void overflow_thread_first(void) {
  pthread_t t;
  pthread_create(&t, NULL, first_in_thread, NULL);
  pthread_join(t, NULL);
}
static void not_ours(void) { /* a fault frugal must pass on */
  char *p = mmap(NULL, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  *shared_ptr = (uintptr_t)p;
  *(volatile char *)p = 1;
}

typedef struct bug_s {
  const char *name;
  void (*run)(void);
  const char *kind; /* in the frugal: line; NULL: not frugal's, the child dies of SIGSEGV */
  int freed;        /* the report shows where the block was freed too */
  int side;         /* 0: either placement; 1: blocks at the page's end only; 2: at its start only */
} bug_t;

static const bug_t bugs[] = {
    {"write 1 byte past a 32-byte block", overflow_32, "heap-buffer-overflow", 0, 1},
    {"write 1 byte past a thread's first block, of 64 bytes", overflow_thread_first, "heap-buffer-overflow", 0, 1},
    {"read 1 byte past a 4096-byte block", overflow_read_page, "heap-buffer-overflow", 0, 0},
    {"write 120 bytes into a 100-byte block", overflow_rounded, "heap-buffer-overflow", 0, 1},
    {"write 1 byte before a 48-byte block", underflow_1, "heap-buffer-underflow", 0, 2},
    {"read 16 bytes before a 200-byte block", underflow_read_16, "heap-buffer-underflow", 0, 2},
    {"read a freed 64-byte block", use_after_free_read, "use-after-free", 1, 0},
    {"write into a freed 100-byte block after 50 other allocations", use_after_free_write_later, "use-after-free",
     1, 0},
    {"control: touching a PROT_NONE page of the program's own", not_ours, NULL, 0, 0},
};

static void run_bug(void *arg) { ((const bug_t *)arg)->run(); }

/* Guarded allocations on a coroutine's stack (a heap block, beside unmapped memory or other
 * blocks): the stack walk must not wander off it; and in a thread, the report still names the
 * allocating function. */
static ucontext_t co_main, co_ctx;
static int co_done;
static void co_body(void) {
  for (int i = 0; i < 100; i++) free(tu_ptr(malloc(16 + (size_t)i)));
  co_done = 1;
}
static void coroutine_allocations(void) {
  size_t size = 256 << 10;
  char *stack = tu_ptr(malloc(size));
  getcontext(&co_ctx);
  co_ctx.uc_stack.ss_sp = stack;
  co_ctx.uc_stack.ss_size = size;
  co_ctx.uc_link = &co_main;
  makecontext(&co_ctx, co_body, 0);
  swapcontext(&co_main, &co_ctx);
  free(stack);
  CHECK("100 guarded allocations on a coroutine's heap stack", co_done == 1);
}
static void *thread_bug(void *arg) {
  free(tu_ptr(malloc(8))); /* not the thread's first block: under UBSan its runtime's is */
  use_after_free_read();
  return arg;
}
static void uaf_in_thread(void *arg) {
  pthread_t t;
  pthread_create(&t, NULL, thread_bug, arg);
  pthread_join(t, NULL);
}

/* fork while another thread takes and frees guarded slots: the child's slots (the guard's
 * lock, the region, its quarantine) must still work, and still catch a use after free. */
static atomic_int churning;
static void *churn(void *arg) {
  (void)arg;
  while (atomic_load(&churning)) free(tu_ptr(malloc(64)));
  return NULL;
}
static void child_after_fork(void *arg) {
  (void)arg;
  char *keep[300];
  for (int i = 0; i < 300; i++) keep[i] = tu_ptr(malloc(100)); /* more than the 256 slots */
  for (int i = 0; i < 300; i++) free(keep[i]);
  use_after_free_read();
}
static void fork_while_guarding(void) {
  pthread_t t;
  atomic_store(&churning, 1);
  pthread_create(&t, NULL, churn, NULL);
  int caught = 0;
  for (int i = 0; i < 20; i++) {
    tu_child_t c;
    if (tu_run_child(child_after_fork, NULL, 20, &c) && tu_child_signalled(&c, SIGABRT) &&
        strstr(c.err, "frugal: use-after-free") != NULL)
      caught++;
  }
  atomic_store(&churning, 0);
  pthread_join(t, NULL);
  CHECKF(caught == 20, "fork while a thread guards: each of 20 children guards 300 blocks and catches a use "
                       "after free (%d did)", caught);
}

static int count_lines(const char *err, const char *prefix, char *first, size_t len) {
  int n = 0;
  for (const char *s = err; s != NULL && *s; s = strchr(s, '\n') ? strchr(s, '\n') + 1 : NULL) {
    if (strncmp(s, prefix, strlen(prefix)) != 0) continue;
    if (n++ == 0) {
      size_t k = strcspn(s, "\n");
      k = k < len - 1 ? k : len - 1;
      memcpy(first, s, k);
      first[k] = '\0';
    }
  }
  return n;
}

static void run_case(const bug_t *b) {
  tu_child_t c;
  char how[64], line[512] = "", hex[32];
  *shared_ptr = 0;
  if (!tu_run_child(run_bug, (void *)b, 20, &c)) {
    CHECKF(0, "%s: child process started", b->name);
    return;
  }
  tu_child_how(&c, how, sizeof how);
  int lines = count_lines(c.err, "frugal: ", line, sizeof line);
  if (b->kind == NULL) {
    CHECKF(tu_child_signalled(&c, SIGSEGV) && lines == 0, "%s: dies of SIGSEGV, no frugal: line (%s)", b->name,
           how);
    return;
  }
  printf("#    %s: %s\n", b->name, line);
  CHECKF(tu_child_signalled(&c, SIGABRT), "%s: child dies of SIGABRT (%s)", b->name, how);
  snprintf(hex, sizeof hex, "0x%lx", (unsigned long)*shared_ptr);
  CHECKF(lines == 1 && strstr(line, b->kind) != NULL && strstr(line, hex) != NULL,
         "%s: one line \"frugal: %s at %s ...\" (%d frugal: lines)", b->name, b->kind, hex, lines);
  const char *alloc = strstr(c.err, "allocated at:"), *freed = strstr(c.err, "freed at:");
  CHECKF(alloc != NULL && strstr(alloc, "test_guard+") != NULL, "%s: the report shows the allocating stack",
         b->name);
  if (b->freed)
    CHECKF(freed != NULL && freed > alloc && strstr(freed, "test_guard+") != NULL,
           "%s: and the freeing stack", b->name);
  else
    CHECKF(freed == NULL, "%s: and no freeing stack (the block is live)", b->name);
  if (lines != 1 || alloc == NULL) check_note("child stderr: %s", c.err[0] ? c.err : "(empty)");
}

int main(void) {
  shared_ptr = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  /* Guarded blocks work as blocks: aligned and usable as the plain ones, kept by realloc. */
  char *p = malloc(40);
  CHECK("a guarded block is 16-aligned and usable for its size class (48 B)",
        ((uintptr_t)p & 15) == 0 && malloc_usable_size(p) == 48);
  memset(p, 'g', 40);
  char *q = realloc(p, 3000);
  CHECK("realloc of a guarded block keeps its bytes", q != NULL && q[0] == 'g' && q[39] == 'g');
  free(q);
  char *z = calloc(1, 4096);
  int zeroed = 1;
  for (int i = 0; i < 4096; i++) zeroed &= z[i] == 0;
  CHECK("calloc'd guarded block of a page is zeroed", zeroed);
  free(z);
  const char *u = getenv("FRUGAL_GUARD_UNDERFLOW");
  int side = u != NULL && strcmp(u, "1") == 0 ? 2 : 1;
  printf("# guarded blocks placed %s their page\n", side == 2 ? "at the start of" : "at the end of");
  /* Under UBSan (make sanitize sets UBSAN_OPTIONS) its runtime allocates in each new thread
   * before the thread's own code runs: the thread's first block is not the test's. */
  bool ubsan = getenv("UBSAN_OPTIONS") != NULL;
  for (size_t i = 0; i < sizeof bugs / sizeof *bugs; i++) {
    if (ubsan && bugs[i].run == overflow_thread_first) {
      check_note("%s: not checked under UBSan (its runtime allocates first in a thread)", bugs[i].name);
      continue;
    }
    if (bugs[i].side == 0 || bugs[i].side == side) run_case(&bugs[i]);
  }
  fork_while_guarding();
  coroutine_allocations();
  tu_child_t c;
  CHECK("a use after free in a thread: reported with the thread's allocating stack",
        tu_run_child(uaf_in_thread, NULL, 20, &c) && tu_child_signalled(&c, SIGABRT) &&
            strstr(c.err, "frugal: use-after-free") != NULL && strstr(c.err, "allocated at:\n    #0 ") != NULL &&
            strstr(strstr(c.err, "allocated at:"), "test_guard+") != NULL);
  return check_finish("guard");
}
