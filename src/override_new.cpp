// override_new.cpp — every C++ operator new/delete form on frugal. `new` follows the
// standard: on exhaustion call the new-handler and retry, or throw std::bad_alloc; the
// nothrow forms return nullptr instead. Sized deletes go to fg_free_sized, which checks the
// size (see README: a wrong size aborts, as jemalloc's checks do).
#include "frugal.h"

#include <cstddef>
#include <new>

#define FG_EXPORT __attribute__((visibility("default")))

namespace {

__attribute__((noinline)) void *new_retry(std::size_t n, std::size_t align) {
  for (;;) {
    std::new_handler handler = std::get_new_handler();
    if (handler == nullptr) throw std::bad_alloc();
    handler();
    void *p = align == 0 ? fg_malloc(n) : fg_aligned_alloc(align, n);
    if (p != nullptr) return p;
  }
}

inline void *new_impl(std::size_t n) {
  void *p = fg_malloc(n);
  return p != nullptr ? p : new_retry(n, 0);
}

inline void *new_aligned(std::size_t n, std::align_val_t a) {
  void *p = fg_aligned_alloc(static_cast<std::size_t>(a), n);
  return p != nullptr ? p : new_retry(n, static_cast<std::size_t>(a));
}

inline void *new_nothrow(std::size_t n, std::size_t align) noexcept {
  void *p = align == 0 ? fg_malloc(n) : fg_aligned_alloc(align, n);
  if (p != nullptr || std::get_new_handler() == nullptr) return p;
  try {
    return new_retry(n, align);
  } catch (...) {
    return nullptr;
  }
}

}  // namespace

FG_EXPORT void *operator new(std::size_t n) { return new_impl(n); }
FG_EXPORT void *operator new[](std::size_t n) { return new_impl(n); }
FG_EXPORT void *operator new(std::size_t n, const std::nothrow_t &) noexcept { return new_nothrow(n, 0); }
FG_EXPORT void *operator new[](std::size_t n, const std::nothrow_t &) noexcept { return new_nothrow(n, 0); }
FG_EXPORT void *operator new(std::size_t n, std::align_val_t a) { return new_aligned(n, a); }
FG_EXPORT void *operator new[](std::size_t n, std::align_val_t a) { return new_aligned(n, a); }
FG_EXPORT void *operator new(std::size_t n, std::align_val_t a, const std::nothrow_t &) noexcept {
  return new_nothrow(n, static_cast<std::size_t>(a));
}
FG_EXPORT void *operator new[](std::size_t n, std::align_val_t a, const std::nothrow_t &) noexcept {
  return new_nothrow(n, static_cast<std::size_t>(a));
}

FG_EXPORT void operator delete(void *p) noexcept { fg_free(p); }
FG_EXPORT void operator delete[](void *p) noexcept { fg_free(p); }
FG_EXPORT void operator delete(void *p, const std::nothrow_t &) noexcept { fg_free(p); }
FG_EXPORT void operator delete[](void *p, const std::nothrow_t &) noexcept { fg_free(p); }
FG_EXPORT void operator delete(void *p, std::size_t n) noexcept { fg_free_sized(p, n); }
FG_EXPORT void operator delete[](void *p, std::size_t n) noexcept { fg_free_sized(p, n); }
FG_EXPORT void operator delete(void *p, std::align_val_t) noexcept { fg_free(p); }
FG_EXPORT void operator delete[](void *p, std::align_val_t) noexcept { fg_free(p); }
FG_EXPORT void operator delete(void *p, std::align_val_t, const std::nothrow_t &) noexcept { fg_free(p); }
FG_EXPORT void operator delete[](void *p, std::align_val_t, const std::nothrow_t &) noexcept { fg_free(p); }
FG_EXPORT void operator delete(void *p, std::size_t n, std::align_val_t a) noexcept {
  fg_free_aligned_sized(p, static_cast<std::size_t>(a), n);
}
FG_EXPORT void operator delete[](void *p, std::size_t n, std::align_val_t a) noexcept {
  fg_free_aligned_sized(p, static_cast<std::size_t>(a), n);
}
