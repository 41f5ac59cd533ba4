/* pair.c — the fast path's workloads for the instruction budget, after a warm-up, so that
 * the difference between two N is the N operations alone:
 *   pair N SIZE    N malloc/free pairs of one small size, each free emptying the page (a
 *                  lone page stays: the path of a loop of one block);
 *   held N SIZE    the same with another block of the page live, so that no free empties
 *                  it: the fast paths of programs that keep blocks;
 *   list N SIZE    a linked list of N blocks built, then freed from its head: each freed
 *                  block's first word points at a live neighbour in its own segment, which
 *                  free()'s double-free test must not mistake for a free-list link (a page
 *                  walk each time would cost thousands of instructions per free);
 *   sized N SIZE   N malloc/free_sized pairs (C23's sized free, as C++ sized delete), held;
 *   new N SIZE     N operator new / sized operator delete pairs, held: the way every C++14
 *                  program compiled by gcc allocates;
 *   usable N SIZE  N malloc_usable_size calls on one live block;
 *   aligned N SIZE N aligned_alloc/free pairs at an alignment of SIZE, held (C++17's aligned
 *                  new, SIMD buffers);
 *   memalign N SIZE the same with posix_memalign;
 *   thread N SIZE  N threads started and joined one after another, each allocating and
 *                  freeing 4 blocks of SIZE: a thread's first malloc (its heap and first
 *                  page, or its adopted heap) and its exit (heap abandoned), pthread's own work
 *                  included (glibc's malloc: about 4,300 instructions a thread).
 * free_sized and the C++ operators are looked up at run time: glibc 2.36 has no free_sized,
 * and this program is C so that it loads no C++ runtime. */
#include <dlfcn.h>
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct node_s {
  struct node_s *next;
} node_t;

static void *lookup(const char *name) {
  void *f = dlsym(RTLD_DEFAULT, name);
  if (f == NULL) {
    fprintf(stderr, "pair: %s not found (run it with the allocator preloaded)\n", name);
    exit(2);
  }
  return f;
}

typedef void *(*alloc_t)(size_t);
typedef void (*free_sized_t)(void *, size_t);

static void sized_pairs(long n, size_t size, alloc_t alloc, free_sized_t release) {
  for (long i = 0; i < n; i++) {
    void *volatile p = alloc(size);
    release(p, size);
  }
}

static void *thread_body(void *arg) {
  size_t size = *(const size_t *)arg;
  void *volatile p[4];
  for (int i = 0; i < 4; i++) p[i] = malloc(size);
  for (int i = 0; i < 4; i++) free(p[i]);
  return NULL;
}

int main(int argc, char **argv) {
  long n = argc > 1 ? atol(argv[1]) : 100000;
  size_t size = argc > 2 ? (size_t)atol(argv[2]) : 32;
  const char *mode = argc > 3 ? argv[3] : "pair";
  void *volatile sink;
  for (int i = 0; i < 1000; i++) {
    sink = malloc(size);
    free(sink);
  }
  if (strcmp(mode, "list") == 0) {
    node_t *head = NULL;
    for (long i = 0; i < n; i++) {
      node_t *node = malloc(size);
      node->next = head;
      head = node;
    }
    while (head != NULL) {
      node_t *next = head->next;
      free(head);
      head = next;
    }
    return 0;
  }
  void *held = strcmp(mode, "pair") == 0 ? NULL : malloc(size);
  if (strcmp(mode, "sized") == 0) {
    sized_pairs(n, size, malloc, (free_sized_t)lookup("free_sized"));
    return 0;
  }
  if (strcmp(mode, "new") == 0) {
    sized_pairs(n, size, (alloc_t)lookup("_Znwm"), (free_sized_t)lookup("_ZdlPvm"));
    return 0;
  }
  if (strcmp(mode, "thread") == 0) {
    for (long i = 0; i < n; i++) {
      pthread_t t;
      if (pthread_create(&t, NULL, thread_body, &size) != 0 || pthread_join(t, NULL) != 0) return 1;
    }
    return 0;
  }
  if (strcmp(mode, "aligned") == 0 || strcmp(mode, "memalign") == 0) {
    for (long i = 0; i < n; i++) {
      void *q = NULL;
      if (mode[0] == 'a') q = aligned_alloc(size, size);
      else if (posix_memalign(&q, size, size) != 0) return 1;
      sink = q;
      free(q);
    }
    free(held);
    return 0;
  }
  if (strcmp(mode, "usable") == 0) {
    size_t volatile total = 0;
    for (long i = 0; i < n; i++) total += malloc_usable_size(held);
    return 0;
  }
  for (long i = 0; i < n; i++) {
    sink = malloc(size);
    free(sink);
  }
  free(held);
  (void)sink;
  return 0;
}
