/* ops — single operations of the malloc family, each timed in a loop of its own for a fixed
 * time (docs/lab.md, the ops experiment): the costs a program's allocations are made of, one
 * at a time, where a stall on one path (a store the next load must wait for) shows whole and
 * no mix of other work hides it. Each run does one operation at one size:
 *   pair      malloc, write a byte, free: one block, over and over
 *   replace   16 blocks held; free the oldest, malloc its successor, write a byte
 *   mixed     1,024 blocks held of random sizes from 16 B to --size; replace a random one
 *   usable    malloc_usable_size of one of 16 blocks held
 *   calloc    calloc, check the first and last byte are 0, write one, free
 *   realloc   a block grown from 16 B to --size by doubling reallocs, then freed (one op:
 *             the whole growth)
 *   aligned   aligned_alloc(--align, --size), free
 *   memalign  posix_memalign(--align, --size), free
 * --ops: how many (whole batches of 1,024). Prints one JSON record: ops done, wall time, ns per op, and `bad`, the operations whose
 * result was wrong (a calloc not zeroed, a usable size short, a block misaligned, a realloc
 * that lost its contents). */
#include "lab.h"

#include <stdbool.h>

#define HOLD 16        /* replace and usable */
#define MIXED 1024     /* mixed */
#define BATCH 1024     /* ops a batch: the operation's loop, picked once */
#define MIN_SIZE 16    /* mixed's smallest; realloc's start */

typedef struct {
  const char *op;
  size_t size, align;
  uint64_t ops;
} params_t;

static void usage(void) {
  fprintf(stderr, "usage: ops --op pair|replace|mixed|usable|calloc|realloc|aligned|memalign "
                  "[--size B] [--align B] [--ops N]\n");
  exit(2);
}

static void *must(void *p) {
  if (p == NULL) {
    fprintf(stderr, "ops: out of memory\n");
    exit(1);
  }
  return p;
}

/* One batch of each operation; returns the wrong results it saw. `s`: the generator's state;
 * `held`: the blocks an operation keeps between batches. */
static uint64_t batch(const params_t *P, void **held, uint64_t *s, uint64_t *turn) {
  uint64_t bad = 0;
  size_t size = P->size;
  if (strcmp(P->op, "pair") == 0) {
    for (int i = 0; i < BATCH; i++) {
      char *p = must(malloc(size));
      p[0] = (char)i;
      lab_escape(p);
      free(p);
    }
  } else if (strcmp(P->op, "replace") == 0) {
    for (int i = 0; i < BATCH; i++) {
      size_t k = (*turn)++ % HOLD;
      free(held[k]);
      char *p = must(malloc(size));
      p[0] = (char)i;
      held[k] = p;
    }
  } else if (strcmp(P->op, "mixed") == 0) {
    for (int i = 0; i < BATCH; i++) {
      uint64_t r = lab_rnd_next(s);
      size_t k = r % MIXED, n = MIN_SIZE + (r >> 32) % (size - MIN_SIZE + 1);
      free(held[k]);
      char *p = must(malloc(n));
      p[0] = (char)i;
      held[k] = p;
    }
  } else if (strcmp(P->op, "usable") == 0) {
    for (int i = 0; i < BATCH; i++) bad += malloc_usable_size(held[i % HOLD]) < size;
  } else if (strcmp(P->op, "calloc") == 0) {
    for (int i = 0; i < BATCH; i++) {
      char *p = must(calloc(1, size));
      bad += (p[0] | p[size - 1]) != 0;
      p[0] = 1; /* a block used again must be zeroed again */
      lab_escape(p);
      free(p);
    }
  } else if (strcmp(P->op, "realloc") == 0) {
    for (int i = 0; i < BATCH; i++) {
      char *p = must(malloc(MIN_SIZE));
      p[0] = (char)i;
      for (size_t n = 2 * MIN_SIZE; n <= size; n *= 2) {
        p = must(realloc(p, n));
        p[n - 1] = 1;
      }
      bad += p[0] != (char)i;
      free(p);
    }
  } else if (strcmp(P->op, "aligned") == 0 || strcmp(P->op, "memalign") == 0) {
    bool posix = P->op[0] == 'm';
    for (int i = 0; i < BATCH; i++) {
      void *p = NULL;
      if (posix) {
        if (posix_memalign(&p, P->align, size) != 0) p = NULL;
      } else {
        p = aligned_alloc(P->align, size);
      }
      char *c = must(p);
      c[0] = (char)i;
      bad += ((uintptr_t)c & (P->align - 1)) != 0;
      free(c);
    }
  } else {
    usage();
  }
  return bad;
}

int main(int argc, char **argv) {
  params_t P = {.op = NULL, .size = 64, .align = 64, .ops = 10000000};
  for (int i = 1; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "--op") == 0) P.op = argv[i + 1];
    else if (strcmp(argv[i], "--size") == 0) P.size = lab_parse_size("--size", argv[i + 1]);
    else if (strcmp(argv[i], "--align") == 0) P.align = lab_parse_size("--align", argv[i + 1]);
    else if (strcmp(argv[i], "--ops") == 0) P.ops = lab_parse_size("--ops", argv[i + 1]);
    else usage();
  }
  if (argc % 2 == 0 || P.op == NULL || P.size < MIN_SIZE || P.align == 0 || (P.align & (P.align - 1)) != 0)
    usage();
  if (strcmp(P.op, "aligned") == 0 && P.size % P.align != 0) usage(); /* C11's rule for aligned_alloc */

  void *held[MIXED] = {0};
  uint64_t s = lab_rnd_seed(7, 0), turn = 0, bad = 0, done = 0;
  size_t hold = strcmp(P.op, "mixed") == 0 ? MIXED : HOLD;
  for (size_t k = 0; k < hold; k++) held[k] = must(malloc(strcmp(P.op, "mixed") == 0 ? MIN_SIZE : P.size));

  batch(&P, held, &s, &turn); /* warm: the first batch finds the allocator cold */
  uint64_t start = lab_now_ns();
  for (; done < P.ops; done += BATCH) bad += batch(&P, held, &s, &turn);
  uint64_t wall = lab_now_ns() - start;

  for (size_t k = 0; k < hold; k++) free(held[k]);
  printf("{\"op\":\"%s\",\"size\":%zu,\"align\":%zu,\"done\":%llu,\"wall_ns\":%llu,"
         "\"ns_per_op\":%.3f,\"bad\":%llu,\"final\":true}\n",
         P.op, P.size, P.align, (unsigned long long)done, (unsigned long long)wall,
         (double)wall / (double)done, (unsigned long long)bad);
  return bad != 0;
}
