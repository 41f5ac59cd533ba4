/* fg_names.h — force-included (-include) into a test that uses the libc allocation names, to
 * send those calls to frugal's fg_ twins instead. For the TSan build: TSan's runtime calls
 * malloc while it initialises, before a TSan-instrumented allocator could run, so the libc
 * names stay TSan's and the test drives an instrumented, statically linked frugal by its own
 * names; TSan then sees every access and atomic inside frugal. The system headers come first,
 * so their prototypes are declared under the real names before the macros exist. */
#ifndef FG_TEST_FG_NAMES_H
#define FG_TEST_FG_NAMES_H

#include <malloc.h>
#include <stdlib.h>

#include "frugal.h"

#define malloc fg_malloc
#define calloc fg_calloc
#define realloc fg_realloc
#define reallocarray fg_reallocarray
#define free fg_free
#define aligned_alloc fg_aligned_alloc
#define posix_memalign fg_posix_memalign
#define memalign fg_memalign
#define valloc fg_valloc
#define pvalloc fg_pvalloc
#define malloc_usable_size fg_usable_size

#endif /* FG_TEST_FG_NAMES_H */
