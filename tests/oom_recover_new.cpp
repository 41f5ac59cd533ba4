// oom_recover_new.cpp — the C++ side of oom_recover.c (issue 10, item 4): under RLIMIT_AS, a
// child per scenario, new until it throws std::bad_alloc, everything deleted, then new must
// succeed again: new[] for every class and the large sizes (followed by every other size),
// aligned new and nothrow new (nullptr, then a block); a new-handler that frees a reserve must
// turn the failing new into a success without a throw, whichever sizes the reserve and the
// request are; and a std::vector grown until bad_alloc, once released, can be grown as far again.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

#include "check.h"
#include "oom_fill.h"

namespace {

long throws;       // std::bad_alloc caught by the wrappers below
long other_throws; // anything else they caught (a failure)

// new char[n] as an of_alloc_fn: nullptr when it threw.
void *array_new(size_t n) {
  try {
    return new char[n];
  } catch (const std::bad_alloc &) {
    throws++;
  } catch (...) {
    other_throws++;
  }
  return nullptr;
}
void array_delete(void *p) { delete[] static_cast<char *>(p); }

const std::align_val_t PAGE_ALIGN{4096};
void *aligned_new(size_t n) {
  try {
    return ::operator new(n, PAGE_ALIGN);
  } catch (const std::bad_alloc &) {
    throws++;
  } catch (...) {
    other_throws++;
  }
  return nullptr;
}
void aligned_delete(void *p) { ::operator delete(p, PAGE_ALIGN); }

void *nothrow_new(size_t n) { return new (std::nothrow) char[n]; }

// One block of `size` from new[], written and deleted: true if new did not throw.
bool one_block(size_t size) {
  void *p = array_new(tu_size(size));
  if (p == nullptr) return false;
  of_write(p, size, 1);
  array_delete(p);
  return true;
}

void note_refused(char *list, size_t len, int *count, size_t size) {
  char name[32];
  size_t used = std::strlen(list);
  if (++*count <= 6) std::snprintf(list + used, len - used, " %s", of_name(size, name, sizeof name));
}

void child_begin() {
  check_passed = check_failed = 0;
  throws = other_throws = 0;
}
[[noreturn]] void child_end(const char *what) {
  std::fflush(stdout);
  _exit(check_finish(what));
}

// As oom_recover.c: the large sizes first, then every class (see there why in that order).
void check_others(const char *after) {
  char refused[160] = "";
  int n = 0;
  for (size_t size : of_large_sizes)
    if (!one_block(size)) note_refused(refused, sizeof refused, &n, size);
  CHECKF(n == 0, "%s: then new char[] of 600 KiB, 9 MiB and 33 MiB succeeds%s%s", after, n ? "; threw:" : "",
         refused);
  refused[0] = '\0';
  n = 0;
  for (size_t c = 0; c < (size_t)of_class_count; c++)
    if (!one_block(of_classes[c])) note_refused(refused, sizeof refused, &n, of_classes[c]);
  CHECKF(n == 0, "%s: then new char[] of each of the %d classes succeeds%s%s (%d threw)", after, of_class_count,
         n ? "; threw:" : "", refused, n);
}

// new char[size] until std::bad_alloc, all deleted; the same new again, then every other size.
void fill_and_recover(void *arg) {
  size_t size = *static_cast<const size_t *>(arg);
  char name[32], what[64];
  of_name(size, name, sizeof name);
  child_begin();
  if (!of_limit(OF_HEADROOM_MIB)) _exit(90);
  of_fill_t f = of_fill(array_new, size);
  CHECKF(f.refused && throws == 1 && other_throws == 0 && f.count > 0,
         "%s: %ld x new char[] (%.1f MiB) until it threw std::bad_alloc", name, f.count, of_mib(&f));
  long bad = of_release(&f, array_delete);
  CHECKF(bad == 0, "%s: every block kept what was written into it; all deleted", name);
  CHECKF(one_block(size), "%s: after delete[] of them all, new char[%zu] succeeds again", name, size);
  std::snprintf(what, sizeof what, "%s deleted", name);
  check_others(what);
  std::snprintf(what, sizeof what, "oom_recover_new (%s child)", name);
  child_end(what);
}

// The other forms of new: aligned (4096) until bad_alloc, nothrow until nullptr; then again.
struct form {
  const char *name;
  of_alloc_fn alloc;
  of_free_fn release;
  bool throwing;
  size_t size;
};

void form_recovers(void *arg) {
  const form *fm = static_cast<const form *>(arg);
  char name[32];
  of_name(fm->size, name, sizeof name);
  child_begin();
  if (!of_limit(OF_HEADROOM_MIB)) _exit(90);
  of_fill_t f = of_fill(fm->alloc, fm->size);
  long bad = of_release(&f, fm->release);
  CHECKF(f.refused && f.count > 0 && bad == 0 && other_throws == 0 && throws == (fm->throwing ? 1 : 0),
         "%s of %s: %ld blocks until it %s; all deleted, contents intact", fm->name, name, f.count,
         fm->throwing ? "threw std::bad_alloc" : "returned nullptr");
  void *p = fm->alloc(tu_size(fm->size));
  CHECKF(p != nullptr && (!fm->throwing || reinterpret_cast<uintptr_t>(p) % 4096 == 0),
         "%s of %s: after deleting them, succeeds again%s", fm->name, name, fm->throwing ? ", aligned" : "");
  if (p != nullptr) fm->release(p);
  child_end("oom_recover_new (forms child)");
}

// A reserve held, memory filled until new throws, then a new-handler that frees the reserve:
// the next new must come back with a block, not throw (the handler frees, frugal retries).
struct reserve_case {
  size_t reserve, request;
};
of_fill_t reserve_fill;
int handler_calls;
void free_reserve() {
  handler_calls++;
  of_release(&reserve_fill, array_delete);
  std::set_new_handler(nullptr); // a second call means the freed memory was not found
}

void handler_recovers(void *arg) {
  const reserve_case *rc = static_cast<const reserve_case *>(arg);
  char r[32], q[32];
  of_name(rc->reserve, r, sizeof r);
  of_name(rc->request, q, sizeof q);
  child_begin();
  if (!of_limit(OF_HEADROOM_MIB)) _exit(90);
  // The reserve: a third of the headroom, more than any one request here needs.
  reserve_fill = of_fill_t{};
  reserve_fill.size = rc->reserve;
  for (size_t got = 0; got < OF_HEADROOM_MIB * TU_MIB / 3; got += rc->reserve) {
    void *p = array_new(rc->reserve);
    if (p == nullptr) break;
    of_write(p, rc->reserve, reserve_fill.count++);
    std::memcpy(p, &reserve_fill.head, sizeof reserve_fill.head);
    reserve_fill.head = p;
  }
  of_fill_t f = of_fill(array_new, rc->request);
  CHECKF(f.refused && throws == 1 && reserve_fill.count > 0,
         "reserve of %ld x %s held; %ld x new char[%s] until std::bad_alloc", reserve_fill.count, r, f.count,
         q);
  handler_calls = 0;
  std::set_new_handler(free_reserve);
  void *p = array_new(rc->request);
  CHECKF(p != nullptr && handler_calls == 1 && throws == 1,
         "%s request, %s reserve: a new-handler that deletes the reserve makes the next new succeed "
         "(handler ran %d times, %s)",
         q, r, handler_calls, p != nullptr ? "new returned a block" : "new threw");
  std::set_new_handler(nullptr);
  if (p != nullptr) array_delete(p);
  of_release(&reserve_fill, array_delete);
  of_release(&f, array_delete);
  child_end("oom_recover_new (new-handler child)");
}

// A vector of 8-byte elements grown until its reallocation throws; released, a new vector
// must take the capacity the first one reached, and grow to where the first one failed.
void vector_recovers(void *) {
  child_begin();
  if (!of_limit(OF_HEADROOM_MIB)) _exit(90);
  size_t reached = 0;
  bool threw = false;
  {
    std::vector<uint64_t> v;
    try {
      for (uint64_t i = 0;; i++) v.push_back(i);
    } catch (const std::bad_alloc &) {
      threw = true;
    }
    reached = v.capacity();
    bool intact = true;
    for (size_t i = 0; i < v.size(); i += 4096) intact = intact && v[i] == i;
    CHECKF(threw && intact && reached > 0,
           "std::vector<uint64_t>: push_back until std::bad_alloc at capacity %zu (%.1f MiB), contents kept",
           reached, reached * 8.0 / TU_MIB);
  }
  bool ok = true;
  try {
    std::vector<uint64_t> w;
    w.reserve(reached);
    w.assign(reached, 7);
    ok = w.size() == reached && w[reached - 1] == 7;
  } catch (const std::bad_alloc &) {
    ok = false;
  }
  CHECKF(ok, "std::vector<uint64_t>: after the first is destroyed, reserve(%zu) and fill succeed", reached);
  child_end("oom_recover_new (vector child)");
}


}  // namespace

int main() {
  double t0 = tu_now();
  of_list_classes();
  check_note("RLIMIT_AS = VmSize + %d MiB, set in a child per scenario", OF_HEADROOM_MIB);

  int failed, large_failed;
  of_each_size(fill_and_recover, &failed, &large_failed);
  CHECKF(failed == 0, "every class: new[] until bad_alloc, delete[], then the same size, the large sizes "
         "and every class succeed (%d of %d classes failed)", failed, of_class_count);
  CHECKF(large_failed == 0, "large sizes: new[] until bad_alloc, delete[], then the same size, the large sizes "
         "and every class succeed (%d of %d sizes failed)", large_failed, OF_LARGES);

  static const form forms[] = {
      {"operator new(n, align_val_t(4096))", aligned_new, aligned_delete, true, 64},
      {"operator new(n, align_val_t(4096))", aligned_new, aligned_delete, true, 48u << 10},
      {"operator new(n, align_val_t(4096))", aligned_new, aligned_delete, true, 9u << 20},
      {"new (nothrow) char[n]", nothrow_new, array_delete, false, 64},
      {"new (nothrow) char[n]", nothrow_new, array_delete, false, 9u << 20},
  };
  failed = 0;
  for (const form &fm : forms) failed += !of_in_child(form_recovers, const_cast<form *>(&fm), fm.name);
  CHECKF(failed == 0, "aligned and nothrow new: refused, then succeed once freed (%d of %zu failed)", failed,
         sizeof forms / sizeof forms[0]);

  static const reserve_case reserves[] = {
      {9u << 20, 64}, {64, 9u << 20}, {600u << 10, 48u << 10}, {48u << 10, 600u << 10}};
  failed = 0;
  for (const reserve_case &rc : reserves)
    failed += !of_in_child(handler_recovers, const_cast<reserve_case *>(&rc), "new-handler");
  CHECKF(failed == 0, "new-handler freeing a reserve: the failing new then succeeds (%d of %zu cases failed)",
         failed, sizeof reserves / sizeof reserves[0]);

  CHECK("std::vector grown until bad_alloc, released, grows as far again",
        of_in_child(vector_recovers, nullptr, "vector"));
  CHECKF(of_crashed == 0, "no child was killed by a signal: no crash and no hang under exhaustion (%d were)",
         of_crashed);

  check_note("%.1f s", tu_now() - t0);
  return check_finish("oom_recover_new");
}
