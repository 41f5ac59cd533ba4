/* oom_fill.h — what oom_recover.c and oom_recover_new.cpp share: the size classes listed from
 * their rule (types.h), an address-space limit set a fixed height above what the process maps,
 * and filling memory with blocks of one size until the allocator refuses. Blocks are chained
 * through their first word: at exhaustion a side array could not be allocated either. */
#ifndef FG_TEST_OOM_FILL_H
#define FG_TEST_OOM_FILL_H

#include <malloc.h>

#include "check.h"
#include "testutil.h"

/* The limit sits this far above VmSize: two 33 MiB blocks fit in it, seven of 9 MiB, about 18
 * segments of small blocks; small enough that touching a fill of every class stays quick. */
#define OF_HEADROOM_MIB 72

/* The size classes, read from the allocator itself (no second copy of its rule): each
 * distinct usable size of requests 8 B .. 512 KiB, the largest class. Listed by main before
 * any limit; the children inherit the list. */
#define OF_CLASSES_MAX 256
static size_t of_classes[OF_CLASSES_MAX];
static int of_class_count;
static inline void of_list_classes(void) {
  size_t last = 0;
  for (size_t n = 8; n <= (512u << 10) && of_class_count < OF_CLASSES_MAX; n += 8) {
    void *p = malloc(n);
    size_t u = malloc_usable_size(p);
    free(p);
    if (u != last) of_classes[of_class_count++] = last = u;
  }
  malloc_trim(0); /* the segments the listing mapped would otherwise fill a child's headroom */
}

/* Large blocks (above the last class): just above it, one that takes several segments' worth
 * of address space, and one bigger than a quarter of the headroom. */
#define OF_LARGES 3
static const size_t of_large_sizes[OF_LARGES] = {600u << 10, 9u << 20, 33u << 20};

/* Children killed by a signal (a crash, or the alarm of a hang), over all scenarios. */
static int of_crashed;

/* Run fn(arg) in a child; false (with how it ended) unless it exited 0. */
static inline bool of_in_child(void (*fn)(void *), void *arg, const char *label) {
  tu_child_t c;
  char how[64];
  if (!tu_run_child(fn, arg, 60, &c)) {
    check_note("%s: could not run the child", label);
    return false;
  }
  if (tu_child_exited_ok(&c)) return true;
  of_crashed += WIFSIGNALED(c.status);
  check_note("%s: child ended with %s%s%s", label, tu_child_how(&c, how, sizeof how),
             c.err_len ? "; stderr: " : "", c.err);
  return false;
}

/* Cap the address space at VmSize + headroom (the hard limit stays). False if refused. */
static inline bool of_limit(size_t headroom_mib) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_AS, &rl) != 0) return false;
  rl.rlim_cur = tu_vmsize() + headroom_mib * TU_MIB;
  return setrlimit(RLIMIT_AS, &rl) == 0;
}

/* The tag a block carries in its second and last bytes, from its index in the fill. */
static inline unsigned char of_tag(long i) { return (unsigned char)(i * 131 + 7); }

/* Write into a block: the tag all through its first and last 4 KiB (all of a small block),
 * so each block is really usable without touching every page of a 33 MiB one. */
static inline void of_write(void *p, size_t n, long i) {
  unsigned char *b = (unsigned char *)p;
  size_t head = n < 4096 ? n : 4096;
  memset(b, of_tag(i), head);
  if (n > head) memset(b + n - 4096, of_tag(i), 4096);
}
/* True when the block still holds what of_write put there (past the chain link). */
static inline bool of_intact(const void *p, size_t n, long i) {
  const unsigned char *b = (const unsigned char *)p;
  return n <= sizeof(void *) || (b[sizeof(void *)] == of_tag(i) && b[n - 1] == of_tag(i));
}

/* A fill: its blocks chained newest first, and how it ended. */
typedef struct of_fill_s {
  void *head;
  size_t size;
  long count;
  int err;      /* errno right after the call that returned NULL */
  bool refused; /* the allocator returned NULL (the cap was not reached) */
} of_fill_t;

/* Allocation through whichever API a test exercises: NULL when it refused. */
typedef void *(*of_alloc_fn)(size_t size);
typedef void (*of_free_fn)(void *p);

/* Allocate blocks of `size` until `alloc` returns NULL, at most twice what the headroom holds
 * (a limit that does not bite is then a failure, not a hang). Each block is written. */
static inline of_fill_t of_fill(of_alloc_fn alloc, size_t size) {
  of_fill_t f;
  memset(&f, 0, sizeof f);
  f.size = size;
  long cap = (long)(2 * OF_HEADROOM_MIB * TU_MIB / size) + 64;
  for (long i = 0; i < cap; i++) {
    errno = 0;
    void *p = alloc(tu_size(size));
    if (p == NULL) {
      f.err = errno;
      f.refused = true;
      return f;
    }
    of_write(p, size, f.count);
    memcpy(p, &f.head, sizeof f.head);
    f.head = p;
    f.count++;
  }
  return f;
}

static inline double of_mib(const of_fill_t *f) {
  return (double)f->size * (double)f->count / (double)TU_MIB;
}

/* Free every block of a fill, newest first; returns how many had lost what was written. */
static inline long of_release(of_fill_t *f, of_free_fn release) {
  long bad = 0;
  for (long i = f->count - 1; f->head != NULL; i--) {
    void *next;
    memcpy(&next, f->head, sizeof next);
    if (!of_intact(f->head, f->size, i)) bad++;
    release(f->head);
    f->head = next;
  }
  return bad;
}

/* A size in words for check lines: "104 B", "48 KiB", "9 MiB". */
static inline const char *of_name(size_t n, char *buf, size_t len) {
  if (n >= TU_MIB && n % TU_MIB == 0)
    snprintf(buf, len, "%zu MiB", n / TU_MIB);
  else if (n >= 1024 && n % 1024 == 0)
    snprintf(buf, len, "%zu KiB", n / 1024);
  else
    snprintf(buf, len, "%zu B", n);
  return buf;
}

/* fn(&size) in a child for every class, then for every large size; the failures of each. */
static inline void of_each_size(void (*fn)(void *), int *class_failed, int *large_failed) {
  char label[64], name[32];
  *class_failed = *large_failed = 0;
  for (int c = 0; c < of_class_count; c++) {
    snprintf(label, sizeof label, "class %d (%s)", c, of_name(of_classes[c], name, sizeof name));
    *class_failed += !of_in_child(fn, &of_classes[c], label);
  }
  for (int i = 0; i < OF_LARGES; i++) {
    snprintf(label, sizeof label, "large %s", of_name(of_large_sizes[i], name, sizeof name));
    *large_failed += !of_in_child(fn, (void *)&of_large_sizes[i], label);
  }
}

#endif /* FG_TEST_OOM_FILL_H */
