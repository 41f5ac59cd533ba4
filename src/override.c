/* override.c — the libc names. Linking libfrugal (or LD_PRELOAD-ing it) makes these the
 * process's malloc family; each is a tail call to its fg_ twin (bound inside the library
 * by -Bsymbolic-functions, so no PLT hop). In the shared library the hottest (malloc, calloc,
 * realloc, free, cfree, free_sized, malloc_usable_size) are their twins themselves: FG_ALIAS
 * beside each twin, in alloc.c and free.c. */
#define _GNU_SOURCE
#include "internal.h"

#include <malloc.h>
#include <stdlib.h>

#ifdef FG_OVERRIDE_HOT /* the archive's: see FG_ALIAS */
fg_export void *malloc(size_t n) { return fg_malloc(n); }
fg_export void free(void *p) { fg_free(p); }
fg_export void *calloc(size_t n, size_t s) { return fg_calloc(n, s); }
fg_export void *realloc(void *p, size_t n) { return fg_realloc(p, n); }
fg_export size_t malloc_usable_size(void *p) { return fg_usable_size(p); }
fg_export void free_sized(void *p, size_t n) { fg_free_sized(p, n); }
fg_export void cfree(void *p) { fg_free(p); }
#endif
fg_export void *reallocarray(void *p, size_t n, size_t s) { return fg_reallocarray(p, n, s); }
fg_export void *memalign(size_t a, size_t n) { return fg_memalign(a, n); }
fg_export void *aligned_alloc(size_t a, size_t n) { return fg_aligned_alloc(a, n); }
fg_export int posix_memalign(void **out, size_t a, size_t n) { return fg_posix_memalign(out, a, n); }
fg_export void *valloc(size_t n) { return fg_valloc(n); }
fg_export void *pvalloc(size_t n) { return fg_pvalloc(n); }
fg_export void free_aligned_sized(void *p, size_t a, size_t n) { fg_free_aligned_sized(p, a, n); }

/* glibc: returns 1 if memory was released; frugal gives back everything free. */
fg_export int malloc_trim(size_t pad) {
  (void)pad;
  fg_collect(true);
  return 1;
}
