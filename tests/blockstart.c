/* blockstart.c — the "is this a live block start?" test that free() and fg_is_owned share
 * (one multiply by the page's magic number and one compare, see internal.h's
 * _fg_block_carved), swept over every size class: around each of 40 blocks of a class, every
 * byte offset (for blocks up to 1 KiB; beyond, a 1/256 step plus each word next to every
 * block start) from one block before to two after must be owned exactly when it is the start
 * of a block still live. That covers interior and misaligned pointers, pointers before a
 * page's first block (the segment header: negative offsets), carved-but-free blocks, and
 * carved-but-never-handed-out and not-yet-carved room at a page's end. A fresh thread does
 * the work, so no block of another owner shares its pages. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include "check.h"
#include "frugal.h"

#define BLOCKS 40
#define MAX_CLASS ((size_t)512 << 10)

typedef struct {
  long probes, wrong, classes;
  size_t largest;
  uintptr_t first_wrong;
  size_t first_wrong_class;
} tally_t;

static int live_index(uint8_t *const *live, int n, uintptr_t q) {
  for (int i = 0; i < n; i++)
    if ((uintptr_t)live[i] == q) return i;
  return -1;
}

static void probe(tally_t *t, uint8_t *const *live, int n, uintptr_t q, size_t bsize) {
  bool expect = live_index(live, n, q) >= 0;
  t->probes++;
  if (fg_is_owned((const void *)q) != expect && t->wrong++ == 0) {
    t->first_wrong = q;
    t->first_wrong_class = bsize;
  }
}

static void sweep_class(tally_t *t, size_t bsize) {
  uint8_t *blocks[BLOCKS], *live[BLOCKS];
  int n = 0;
  for (int i = 0; i < BLOCKS; i++) blocks[i] = fg_malloc(bsize);
  for (int i = 0; i < BLOCKS; i++) { /* every third one freed: carved, on a free list */
    if (i % 3 == 2)
      fg_free(blocks[i]);
    else
      live[n++] = blocks[i];
  }
  size_t step = bsize <= 1024 ? 1 : bsize / 256;
  for (int i = 0; i < BLOCKS; i++) {
    uintptr_t b = (uintptr_t)blocks[i];
    for (uintptr_t q = b - bsize; q < b + 2 * bsize; q += step) probe(t, live, n, q, bsize);
    for (int k = -2; k <= 2; k++) {
      probe(t, live, n, b + (uintptr_t)(k * 8), bsize);
      probe(t, live, n, b + bsize + (uintptr_t)(k * 8), bsize);
    }
  }
  for (int i = 0; i < n; i++) fg_free(live[i]);
  t->classes++;
  t->largest = bsize;
}

static void *sweep_all(void *arg) {
  tally_t *t = arg;
  size_t prev = 0;
  for (size_t n = 1; n <= MAX_CLASS; n++) { /* each class once, at its block size */
    void *p = fg_malloc(n);
    size_t usable = fg_usable_size(p);
    fg_free(p);
    if (usable == prev) continue;
    prev = usable;
    sweep_class(t, usable);
    if (usable > n) n = usable;
  }
  return NULL;
}

int main(void) {
  tally_t t = {0};
  pthread_t th;
  if (pthread_create(&th, NULL, sweep_all, &t) != 0) return 1;
  pthread_join(th, NULL);
  check_note("%ld classes, %ld pointers probed", t.classes, t.probes);
  if (t.wrong)
    check_note("first wrong: %#lx near blocks of %zu bytes", (unsigned long)t.first_wrong,
               t.first_wrong_class);
  CHECKF(t.classes >= 100 && t.largest == MAX_CLASS, "every class was swept (%ld, the largest %zu B)",
         t.classes, t.largest);
  CHECKF(t.wrong == 0, "fg_is_owned is true exactly at live block starts (%ld of %ld wrong)", t.wrong,
         t.probes);
  return check_finish("blockstart");
}
