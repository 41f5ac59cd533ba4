/* apis.h — the allocation API as a table of function pointers, once with frugal's fg_ names
 * and once with the libc names it overrides, so each conformance check is written once and
 * run through both. Only for tests linked with frugal. */
#ifndef FG_TEST_APIS_H
#define FG_TEST_APIS_H

#include <malloc.h>
#include <stdlib.h>

#include "frugal.h"

#ifdef __cplusplus
extern "C" {
#endif
/* C23 names glibc 2.36's headers do not declare yet; libfrugal exports them. */
void free_sized(void *p, size_t size);
void free_aligned_sized(void *p, size_t alignment, size_t size);
#ifdef __cplusplus
}
#endif

typedef struct api_s {
  const char *pfx; /* "" for the libc names, "fg_" for frugal's own */
  void *(*malloc)(size_t);
  void *(*calloc)(size_t, size_t);
  void *(*realloc)(void *, size_t);
  void *(*reallocarray)(void *, size_t, size_t);
  void (*free)(void *);
  void (*free_sized)(void *, size_t);
  void (*free_aligned_sized)(void *, size_t, size_t);
  void *(*aligned_alloc)(size_t, size_t);
  void *(*memalign)(size_t, size_t);
  int (*posix_memalign)(void **, size_t, size_t);
  void *(*valloc)(size_t);
  void *(*pvalloc)(size_t);
  size_t (*usable_size)(const void *);
} api_t;

/* malloc_usable_size takes a non-const pointer; this adapts it to the table's shape. */
static inline size_t api_libc_usable_size(const void *p) { return malloc_usable_size((void *)p); }

#define FG_TEST_UNUSED __attribute__((unused))
FG_TEST_UNUSED static const api_t api_libc = {
    "",         malloc,             calloc,        realloc,  reallocarray,   free,
    free_sized, free_aligned_sized, aligned_alloc, memalign, posix_memalign, valloc,
    pvalloc,    api_libc_usable_size};
FG_TEST_UNUSED static const api_t api_fg = {
    "fg_",         fg_malloc,             fg_calloc,        fg_realloc,
    fg_reallocarray, fg_free,             fg_free_sized,    fg_free_aligned_sized,
    fg_aligned_alloc, fg_memalign,        fg_posix_memalign, fg_valloc,
    fg_pvalloc,    fg_usable_size};
/* Both tables, for loops: for (int i = 0; i < 2; i++) run(api_all[i]); */
FG_TEST_UNUSED static const api_t *const api_all[2] = {&api_libc, &api_fg};

#endif /* FG_TEST_APIS_H */
