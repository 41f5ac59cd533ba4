/* sample.c — the sampler (issue 13): with FRUGAL_PROFILE set, about one allocation per
 * FRUGAL_SAMPLE_BYTES bytes is served as a large block of its own, right behind the header of
 * its 4 MiB segment (where no small block lies), and usable as the plain block would be (its
 * class size: a program behaves the same, sampled or not). Run as `test_sample on` with the
 * mean set to 64 KiB and as `test_sample off` with sampling off; ctest sets the environment. */
#include <malloc.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "frugal.h"

#define N 200000
#define MEAN 65536.0 /* FRUGAL_SAMPLE_BYTES in CMakeLists.txt */

static void *blocks[N];

/* A sampled block lies in the first page of its segment, behind the large block's header; a
 * small block lies past its segment's header and page table (8 KiB in). */
static int is_sampled(void *p, size_t size) { return ((uintptr_t)p & ((4u << 20) - 1)) < 4096 && size <= 8192; }

/* The class size malloc gives a plain block of `size` (the usable size a sample must show). */
static size_t plain_usable(size_t size) {
  void *blocks_of[64];
  size_t u = 0;
  for (int i = 0; i < 64; i++) {
    blocks_of[i] = malloc(size);
    if (!is_sampled(blocks_of[i], size)) u = malloc_usable_size(blocks_of[i]);
  }
  for (int i = 0; i < 64; i++) free(blocks_of[i]);
  return u;
}

/* n blocks of `size` from `how` (0 malloc, 1 calloc, 2 realloc from NULL then grown, 3
 * aligned_alloc at 64 B, 4 posix_memalign at 128 B): how many came out sampled; every block is
 * checked (zeroed when calloc'd, content kept by realloc, aligned as asked). */
static size_t run(size_t n, size_t size, int how) {
  size_t sampled = 0, bad = 0;
  for (size_t i = 0; i < n; i++) {
    unsigned char *p;
    if (how == 1) {
      p = calloc(1, size);
      for (size_t k = 0; k < size; k++) bad += p[k] != 0;
    } else if (how == 2) {
      p = realloc(NULL, size / 2);
      memset(p, 0x5a, size / 2);
      p = realloc(p, size);
      for (size_t k = 0; k < size / 2; k++) bad += p[k] != 0x5a;
    } else if (how == 3) {
      p = aligned_alloc(64, size);
      bad += ((uintptr_t)p & 63) != 0;
    } else if (how == 4) {
      void *q = NULL;
      bad += posix_memalign(&q, 128, size) != 0 || ((uintptr_t)q & 127) != 0;
      p = q;
    } else {
      p = malloc(size);
    }
    memset(p, (int)i, size);
    sampled += is_sampled(p, size);
    blocks[i] = p;
  }
  for (size_t i = 0; i < n; i++) free(blocks[i]);
  static const char *const names[] = {"malloc", "calloc", "realloc", "aligned_alloc", "posix_memalign"};
  CHECKF(bad == 0, "%s of %zu blocks of %zu B: contents and alignment as expected", names[how], n, size);
  return sampled;
}

int main(int argc, char **argv) {
  int on = argc > 1 && strcmp(argv[1], "on") == 0;
  struct {
    size_t size;
    int how;
  } cases[] = {{64, 0}, {24, 0}, {1000, 0}, {4096, 0}, {64, 1}, {256, 2}, {64, 3}, {256, 4}};
  for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
    size_t size = cases[c].size, n = size > 1024 ? N / 16 : N; /* 50 MB of 4 KiB blocks at once */
    size_t sampled = run(n, size, cases[c].how);
    /* A block of s bytes holds a sample point with probability 1 - exp(-(s + 64)/T) (each
     * allocation counts 64 bytes more: FG_SAMPLE_CHARGE), where malloc's fast path counts
     * its block's class size (its page counts blocks: sample.c) and the rest their request
     * (malloc's slow path, a block in 64 here, too). A realloc that grows a small block
     * moves it, into a sample of its own or out of one: the last call decides. Aligned calls of
     * a class the alignment divides take malloc's fast path and count as malloc. The count is
     * Poisson: 5 standard deviations either way. */
    double counted = cases[c].how == 0 || cases[c].how >= 3 ? (double)plain_usable(size) : (double)size;
    double expect = (double)n * (1 - exp(-(counted + 64) / MEAN)), sd = sqrt(expect);
    check_note("%zu B (way %d): %zu sampled, %.0f expected", size, cases[c].how, sampled, expect);
    if (on)
      CHECKF(fabs((double)sampled - expect) <= 5 * sd + 2, "%zu B blocks: %zu sampled, %.0f +- %.0f expected",
             size, sampled, expect, 5 * sd);
    else
      CHECKF(sampled == 0, "%zu B blocks: none sampled with FRUGAL_SAMPLE_BYTES=0", size);
  }
  /* A sampled block is a block like any other: aligned, writable to its end, freed once. */
  size_t seen = 0;
  for (size_t i = 0; i < N && seen < 32; i++) {
    char *p = malloc(48);
    if (is_sampled(p, 48)) {
      seen++;
      CHECKF(((uintptr_t)p & 15) == 0 && malloc_usable_size(p) == plain_usable(48),
             "sampled block %p aligned, usable as a plain block of 48 B (%zu)", (void *)p, malloc_usable_size(p));
      memset(p, 1, malloc_usable_size(p));
      fg_free_sized(p, 48); /* a sized free (C++'s sized delete) of a sample: its class size */
      continue;
    }
    free(p);
  }
  if (on) CHECK("sampled blocks were seen", seen > 0);
  /* Every byte of its usable size is the program's, sampled or not: sizes whose class ends
   * past the page their request ends in (sampled blocks are mapped for their class). */
  size_t sampled_big = 0;
  for (size_t size = 3000; size <= 8192; size += 61) { /* small classes: their blocks sit 8 KiB in */
    for (int k = 0; k < 16; k++) {
      char *p = malloc(size);
      sampled_big += is_sampled(p, 1);
      memset(p, 7, malloc_usable_size(p));
      free(p);
    }
  }
  CHECKF(on ? sampled_big > 0 : sampled_big == 0,
         "blocks of 3,000 B to 8 KiB written to their usable size (%zu of them sampled)", sampled_big);
  return check_finish(on ? "sample on" : "sample off");
}
