/* override_new.c — the C++ operator new/delete forms, written in C under their mangled names
 * so that libfrugal does not load libstdc++ into every process it is preloaded into (1.5 MiB
 * of RSS); the C++ runtime is reached through weak references, resolved when a program has it.
 * new(size_t), new[](size_t) and their nothrow forms are in alloc.c, on malloc's fast path;
 * their way out when no memory is found is here. */
#include "internal.h"

#include <stdlib.h>

typedef void (*fg_new_handler_t)(void);
/* std::get_new_handler() and std::__throw_bad_alloc(), from libstdc++ when it is loaded. */
extern fg_new_handler_t _ZSt15get_new_handlerv(void) __attribute__((weak));
extern void _ZSt17__throw_bad_allocv(void) __attribute__((weak, noreturn));

static fg_new_handler_t current_handler(void) {
  return _ZSt15get_new_handlerv != NULL ? _ZSt15get_new_handlerv() : NULL;
}

/* No memory: `new` calls the new-handler and retries, then throws std::bad_alloc; the nothrow
 * forms return NULL. A new-handler that throws out of a nothrow new propagates its exception
 * (the C++ library's own nothrow new would catch it). Sized deletes go to fg_free_sized, which
 * checks the size (docs/api.md: a wrong size aborts). */
static fg_noinline fg_cold fg_rare void *new_failed(size_t n, size_t align, bool nothrow) {
  for (;;) {
    fg_new_handler_t handler = current_handler();
    if (handler == NULL) break;
    handler();
    void *p = align == 0 ? fg_malloc(n) : fg_aligned_alloc(align, n);
    if (p != NULL) return p;
  }
  if (nothrow) return NULL;
  if (_ZSt17__throw_bad_allocv != NULL) _ZSt17__throw_bad_allocv();
  _fg_write_stderr("frugal: out of memory in operator new, and no C++ runtime to throw std::bad_alloc\n");
  abort();
}

void *_fg_new_failed(size_t n) { return new_failed(n, 0, false); }
void *_fg_new_nothrow_failed(size_t n) { return new_failed(n, 0, true); }
static inline void *new_aligned(size_t n, size_t align, bool nothrow) {
  void *p = fg_aligned_alloc(align, n);
  return fg_likely(p != NULL) ? p : new_failed(n, align, nothrow);
}

/* operator new's align_val_t forms. new(size_t), new[](size_t) and their nothrow forms are
 * in alloc.c, on malloc's fast path. */
fg_export void *_ZnwmSt11align_val_t(size_t n, size_t a) { return new_aligned(n, a, false); }
fg_export void *_ZnamSt11align_val_t(size_t n, size_t a) { return new_aligned(n, a, false); }
fg_export void *_ZnwmSt11align_val_tRKSt9nothrow_t(size_t n, size_t a, const void *tag) {
  (void)tag;
  return new_aligned(n, a, true);
}
fg_export void *_ZnamSt11align_val_tRKSt9nothrow_t(size_t n, size_t a, const void *tag) {
  (void)tag;
  return new_aligned(n, a, true);
}

/* operator delete(void*), delete[](void*) and their (void*, size_t) forms: in the shared
 * library fg_free and fg_free_sized themselves (free.c's FG_ALIAS). */
#ifdef FG_OVERRIDE_HOT
fg_export void _ZdlPv(void *p) { fg_free(p); }
fg_export void _ZdaPv(void *p) { fg_free(p); }
fg_export void _ZdlPvm(void *p, size_t n) { fg_free_sized(p, n); }
fg_export void _ZdaPvm(void *p, size_t n) { fg_free_sized(p, n); }
#endif
/* Their nothrow and aligned forms. */
fg_export void _ZdlPvRKSt9nothrow_t(void *p, const void *tag) {
  (void)tag;
  fg_free(p);
}
fg_export void _ZdaPvRKSt9nothrow_t(void *p, const void *tag) {
  (void)tag;
  fg_free(p);
}
fg_export void _ZdlPvSt11align_val_t(void *p, size_t a) {
  (void)a;
  fg_free(p);
}
fg_export void _ZdaPvSt11align_val_t(void *p, size_t a) {
  (void)a;
  fg_free(p);
}
fg_export void _ZdlPvSt11align_val_tRKSt9nothrow_t(void *p, size_t a, const void *tag) {
  (void)a, (void)tag;
  fg_free(p);
}
fg_export void _ZdaPvSt11align_val_tRKSt9nothrow_t(void *p, size_t a, const void *tag) {
  (void)a, (void)tag;
  fg_free(p);
}
fg_export void _ZdlPvmSt11align_val_t(void *p, size_t n, size_t a) { fg_free_aligned_sized(p, a, n); }
fg_export void _ZdaPvmSt11align_val_t(void *p, size_t n, size_t a) { fg_free_aligned_sized(p, a, n); }
