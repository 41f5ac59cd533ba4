// cxx_ops.cpp — the C++ operator new/delete forms behind plain C functions (see cxx_ops.h).
// Throwing forms turn std::bad_alloc into NULL so C callers can check the result.
#include "cxx_ops.h"

#include <new>

extern "C" {

void *cxx_new(size_t size) {
  try {
    return ::operator new(size);
  } catch (const std::bad_alloc &) {
    return nullptr;
  }
}
void cxx_delete(void *p) { ::operator delete(p); }
void cxx_delete_sized(void *p, size_t size) { ::operator delete(p, size); }

void *cxx_new_array(size_t size) {
  try {
    return ::operator new[](size);
  } catch (const std::bad_alloc &) {
    return nullptr;
  }
}
void cxx_delete_array_sized(void *p, size_t size) { ::operator delete[](p, size); }

void *cxx_new_aligned(size_t size, size_t align) {
  try {
    return ::operator new(size, std::align_val_t(align));
  } catch (const std::bad_alloc &) {
    return nullptr;
  }
}
void cxx_delete_aligned_sized(void *p, size_t size, size_t align) {
  ::operator delete(p, size, std::align_val_t(align));
}

void *cxx_new_array_aligned(size_t size, size_t align) {
  try {
    return ::operator new[](size, std::align_val_t(align));
  } catch (const std::bad_alloc &) {
    return nullptr;
  }
}
void cxx_delete_array_aligned(void *p, size_t align) {
  ::operator delete[](p, std::align_val_t(align));
}

void *cxx_new_aligned_nothrow(size_t size, size_t align) {
  return ::operator new(size, std::align_val_t(align), std::nothrow);
}
void cxx_delete_aligned(void *p, size_t align) { ::operator delete(p, std::align_val_t(align)); }
}
