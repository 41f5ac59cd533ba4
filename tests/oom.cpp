// oom.cpp — out of memory under RLIMIT_AS: in a child process whose address space is capped
// 256 MiB above what it uses, exhaust memory with large, medium and small blocks; every
// failure must be NULL + ENOMEM (C) or std::bad_alloc after the new-handler ran (C++), never a
// crash; once the blocks are freed, allocation works again. C++ so that new can be tested.
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <sys/resource.h>

#include "apis.h"
#include "check.h"
#include "testutil.h"

static const size_t HEADROOM = 256 * TU_MIB;

// Blocks of one phase form a singly linked list through their first word, so exhausting
// memory needs no side array (which could not be allocated either).
struct chain {
  void *head = nullptr;
  long count = 0;
};

// Allocate blocks of `size` until malloc fails (at most `cap`); true if the failure was
// NULL with errno ENOMEM. Each block is written at both ends so it is really usable.
static bool exhaust(chain &c, size_t size, long cap) {
  for (long i = 0; i < cap; i++) {
    errno = 0;
    void *p = malloc(tu_size(size));
    if (!p)
      return errno == ENOMEM;
    std::memcpy(p, &c.head, sizeof c.head);
    static_cast<unsigned char *>(p)[size - 1] = 1;
    c.head = p;
    c.count++;
  }
  check_note("%ld blocks of %zu bytes and still no failure", cap, size);
  return false;
}

static void release(chain &c) {
  while (c.head) {
    void *next;
    std::memcpy(&next, c.head, sizeof next);
    free(c.head);
    c.head = next;
  }
}

static int handler_calls;
static void new_handler() {
  handler_calls++;
  std::set_new_handler(nullptr); // next failure throws
}

// Every allocation route at exhaustion: NULL + ENOMEM, or bad_alloc for new.
static void at_exhaustion() {
  const size_t big = tu_size(8 * TU_MIB);
  CHECK("malloc(8 MiB) at exhaustion: NULL, ENOMEM", TU_FAILS_WITH(ENOMEM, malloc(big)));
  CHECK("calloc(1, 8 MiB) at exhaustion: NULL, ENOMEM", TU_FAILS_WITH(ENOMEM, calloc(1, big)));
  CHECK("calloc(4096, 4096) at exhaustion: NULL, ENOMEM",
        TU_FAILS_WITH(ENOMEM, calloc(tu_size(4096), tu_size(4096))));
  CHECK("aligned_alloc(4096, 8 MiB) at exhaustion: NULL, ENOMEM",
        TU_FAILS_WITH(ENOMEM, aligned_alloc(4096, big)));
  CHECK("aligned_alloc(2 MiB, 2 MiB) at exhaustion: NULL, ENOMEM",
        TU_FAILS_WITH(ENOMEM, aligned_alloc(tu_size(2 * TU_MIB), tu_size(2 * TU_MIB))));
  void *m = &handler_calls;
  int rc = posix_memalign(&m, 64, big);
  CHECK("posix_memalign(&m, 64, 8 MiB) at exhaustion: ENOMEM, *memptr untouched",
        rc == ENOMEM && m == &handler_calls);
  CHECK("fg_malloc(8 MiB) at exhaustion: NULL, ENOMEM", TU_FAILS_WITH(ENOMEM, fg_malloc(big)));

  bool threw = false;
  try {
    void *q = tu_ptr(::operator new(big));
    ::operator delete(q);
  } catch (const std::bad_alloc &) {
    threw = true;
  }
  CHECK("operator new(8 MiB) at exhaustion throws std::bad_alloc", threw);
  handler_calls = 0;
  std::set_new_handler(new_handler);
  threw = false;
  try {
    char *q = static_cast<char *>(tu_ptr(new char[big]));
    delete[] q;
  } catch (const std::bad_alloc &) {
    threw = true;
  }
  CHECK("new char[8 MiB] calls the new-handler, then throws std::bad_alloc",
        threw && handler_calls == 1);
  threw = false;
  try {
    void *q = tu_ptr(::operator new(big, std::align_val_t(4096)));
    ::operator delete(q, std::align_val_t(4096));
  } catch (const std::bad_alloc &) {
    threw = true;
  }
  CHECK("aligned operator new(8 MiB, 4096) at exhaustion throws std::bad_alloc", threw);
  void *nt = ::operator new(big, std::nothrow);
  CHECK("operator new(8 MiB, nothrow) at exhaustion returns nullptr", nt == nullptr);
}

static void oom_child(void *) {
  size_t limit = tu_vmsize() + HEADROOM;
  struct rlimit rl = {limit, limit};
  if (setrlimit(RLIMIT_AS, &rl) != 0)
    _exit(90);
  check_note("RLIMIT_AS set to %.0f MiB (VmSize + 256 MiB)", limit / 1048576.0);

  CHECK("malloc(512 MiB) beyond the limit: NULL, ENOMEM",
        TU_FAILS_WITH(ENOMEM, malloc(tu_size(512 * TU_MIB))));

  // A small block made before exhaustion, to realloc when nothing is left.
  unsigned char *keep = static_cast<unsigned char *>(malloc(100));
  tu_fill(keep, 100, 5);

  chain large, medium, small;
  CHECK("1 MiB blocks until failure: NULL, ENOMEM", exhaust(large, TU_MIB, 4096));
  CHECK("16 KiB blocks until failure: NULL, ENOMEM", exhaust(medium, 16 << 10, 1 << 20));
  CHECK("64 B blocks until failure: NULL, ENOMEM", exhaust(small, 64, 16 << 20));
  check_note("exhausted with %ld x 1 MiB, %ld x 16 KiB, %ld x 64 B", large.count, medium.count,
             small.count);
  CHECK("a useful amount (>= 128 MiB of 1 MiB blocks) was allocated before failing",
        large.count >= 128);

  at_exhaustion();
  errno = 0;
  void *r = realloc(keep, tu_size(8 * TU_MIB));
  int e = errno;
  CHECK("realloc(p, 8 MiB) at exhaustion: NULL, ENOMEM, p intact",
        r == nullptr && e == ENOMEM && tu_verify(keep, 100, 5) < 0);

  // Recovery: free everything, then allocate again (no fg_collect: freeing must suffice).
  release(small);
  release(medium);
  release(large);
  free(r ? r : keep);
  void *again = malloc(TU_MIB);
  CHECK("after freeing: malloc(1 MiB) works again", again != nullptr);
  free(again);
  void *big = malloc(64 * TU_MIB);
  if (big)
    std::memset(big, 1, 64 * TU_MIB);
  CHECK("after freeing: malloc(64 MiB) works again and is writable", big != nullptr);
  free(big);
  bool ok = true;
  try {
    char *q = static_cast<char *>(tu_ptr(new char[32 * TU_MIB]));
    q[0] = q[32 * TU_MIB - 1] = 1;
    delete[] q;
  } catch (const std::bad_alloc &) {
    ok = false;
  }
  CHECK("after freeing: new char[32 MiB] works again", ok);
  chain again_small;
  bool small_ok = true;
  for (int i = 0; i < 100000 && small_ok; i++) {
    void *q = malloc(64);
    if (!q) {
      small_ok = false;
      break;
    }
    std::memcpy(q, &again_small.head, sizeof again_small.head);
    again_small.head = q;
  }
  release(again_small);
  CHECK("after freeing: 100,000 malloc(64) work again", small_ok);
  fg_collect(true);
  void *biggest = malloc(160 * TU_MIB);
  CHECK("after fg_collect(true): malloc(160 MiB) of the 256 MiB headroom works",
        biggest != nullptr);
  free(biggest);
  std::fflush(stdout);
  _exit(check_finish("oom (child)"));
}

int main() {
  tu_child_t c;
  char how[64];
  bool ran = tu_run_child(oom_child, nullptr, 60, &c);
  CHECK("the RLIMIT_AS child ran", ran);
  if (!tu_child_exited_ok(&c))
    check_note("child ended with %s; stderr: %s", tu_child_how(&c, how, sizeof how), c.err);
  CHECK("the child was not killed by a signal (no crash under exhaustion)", !WIFSIGNALED(c.status));
  CHECK("the child exited 0 (all its checks passed)", tu_child_exited_ok(&c));
  return check_finish("oom");
}
