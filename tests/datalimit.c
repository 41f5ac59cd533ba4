/* datalimit.c — under a limit on the process's data (RLIMIT_DATA, which counts every private
 * writable mapping), a request the limit still has room for is served, as glibc serves it.
 * gdk-pixbuf's randomly-modified test sets 100 MiB; near it, frugal refused a block of 92,774
 * bytes because the segment it would have started was 4 MiB (8 to align it). The limit here is
 * what the process maps now plus 1 MiB: no new segment fits, blocks of a class whose segment
 * does not exist yet must come anyway, each in a mapping of its own size. */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "check.h"
#include "testutil.h"

/* VmData of /proc/self/status, in bytes: what RLIMIT_DATA is compared with. */
static size_t vm_data(void) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  size_t kib = 0;
  while (f != NULL && fgets(line, sizeof line, f) != NULL)
    if (sscanf(line, "VmData: %zu kB", &kib) == 1) break;
  if (f != NULL) fclose(f);
  return kib << 10;
}

int main(void) {
  void *warm = malloc(64); /* the thread's heap and its first segment, before the limit */
  free(tu_ptr(warm));
  size_t data = vm_data();
  CHECKF(data > 0, "VmData read from /proc/self/status: %zu KiB", data >> 10);
  struct rlimit lim = {data + ((size_t)1 << 20), data + ((size_t)1 << 20)};
  CHECK("RLIMIT_DATA set 1 MiB above VmData", setrlimit(RLIMIT_DATA, &lim) == 0);
  /* Sizes of the medium classes (no segment of theirs yet), gdk-pixbuf's among them. */
  const size_t sizes[] = {92774, 40000, 200000};
  void *p[3];
  for (int i = 0; i < 3; i++) {
    p[i] = malloc(tu_size(sizes[i]));
    CHECKF(p[i] != NULL, "malloc(%zu) under RLIMIT_DATA with 1 MiB of room: %p", sizes[i], p[i]);
    if (p[i] != NULL) {
      memset(p[i], 0x5a, sizes[i]);
      CHECKF(malloc_usable_size(p[i]) >= sizes[i], "its usable size, %zu, holds the request",
             malloc_usable_size(p[i]));
    }
  }
  for (int i = 0; i < 3; i++) {
    bool same = true;
    for (size_t j = 0; p[i] != NULL && j < sizes[i]; j++) same &= ((unsigned char *)p[i])[j] == 0x5a;
    CHECK("its bytes kept", same);
    free(p[i]);
  }
  void *again = malloc(tu_size(92774));
  CHECK("freed, the same request comes again", again != NULL);
  free(again);
  /* The other ways to allocate, at sizes of those classes: each must come as malloc's did. */
  unsigned char *z = calloc(tu_size(1), tu_size(60000));
  bool zero = z != NULL;
  for (size_t j = 0; z != NULL && j < 60000; j++) zero &= z[j] == 0;
  CHECKF(zero, "calloc(1, 60000): %p, every byte zero", (void *)z);
  free(z);
  unsigned char *r = realloc(NULL, tu_size(100000));
  CHECKF(r != NULL, "realloc(NULL, 100000): %p", (void *)r);
  if (r != NULL) {
    memset(r, 0x3c, 100000);
    unsigned char *grown = realloc(r, tu_size(300000));
    bool kept = grown != NULL;
    for (size_t j = 0; grown != NULL && j < 100000; j++) kept &= grown[j] == 0x3c;
    CHECKF(kept, "realloc to 300,000 bytes: %p, the first 100,000 kept", (void *)grown);
    free(grown != NULL ? grown : r);
  }
  const size_t aligns[] = {64, 256, 4096};
  const size_t asizes[] = {150000, 120000, 70000};
  for (int i = 0; i < 3; i++) {
    void *a = memalign(aligns[i], tu_size(asizes[i]));
    CHECKF(a != NULL && (uintptr_t)a % aligns[i] == 0, "memalign(%zu, %zu): %p", aligns[i], asizes[i], a);
    if (a != NULL) memset(a, 0x11, asizes[i]);
    free(a);
    void *b = NULL;
    int rc = posix_memalign(&b, aligns[i], tu_size(asizes[i]));
    CHECKF(rc == 0 && (uintptr_t)b % aligns[i] == 0, "posix_memalign(%zu, %zu): %d, %p", aligns[i],
           asizes[i], rc, b);
    free(rc == 0 ? b : NULL);
  }
  /* More than the room left is refused, with ENOMEM, as glibc refuses it. */
  errno = 0;
  void *big = malloc(tu_size((size_t)4 << 20));
  CHECKF(big == NULL && errno == ENOMEM, "4 MiB past the limit: NULL with ENOMEM (%p, errno %d)", big, errno);
  free(big);
  return check_finish("datalimit");
}
