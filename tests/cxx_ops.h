/* cxx_ops.h — C entry points to the C++ operator new/delete forms, so C tests (alignment
 * sweep, death tests) can drive them. Allocation failures come back as NULL. */
#ifndef FG_TEST_CXX_OPS_H
#define FG_TEST_CXX_OPS_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif
void *cxx_new(size_t size);                          /* operator new(size) */
void cxx_delete(void *p);                            /* operator delete(p) */
void cxx_delete_sized(void *p, size_t size);         /* operator delete(p, size) */
void *cxx_new_array(size_t size);                    /* operator new[](size) */
void cxx_delete_array_sized(void *p, size_t size);   /* operator delete[](p, size) */
void *cxx_new_aligned(size_t size, size_t align);    /* operator new(size, align_val_t) */
void cxx_delete_aligned_sized(void *p, size_t size, size_t align);
void *cxx_new_array_aligned(size_t size, size_t align); /* operator new[](size, align_val_t) */
void cxx_delete_array_aligned(void *p, size_t align);
void *cxx_new_aligned_nothrow(size_t size, size_t align); /* new(size, align, nothrow) */
void cxx_delete_aligned(void *p, size_t align);
#ifdef __cplusplus
}
#endif

#endif /* FG_TEST_CXX_OPS_H */
