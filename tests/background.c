/* background.c — frugal starts its own threads (the purger, the control channel) from the
 * slow paths of allocation only, never from a free. glibc calls free while it holds locks that
 * pthread_create takes (a dead thread's TLS is freed under its thread-stack lock), and a
 * purger started from such a free waited on that lock for ever (D-Bus's test-refs under the
 * ledger). This test plays glibc: it interposes pthread_create and frees while it holds a
 * lock of its own that a pthread_create must not find held; with the lock held, a thread
 * created is the deadlock that would have been.
 *   - a fresh process: a large free (which always wakes the purger) under the lock starts
 *     nothing; the next allocation starts the purger (a fresh 4 MiB: growth wants it too);
 *     (small blocks too, by the thousand, whose emptied pages wake it as well);
 *   - a fork child of a process whose purger runs: the same, for the child's own purger
 *     (run again with FRUGAL_CONTROL=1: the channel, started by the constructor and in a fork
 *     child by its first allocation, is there all along). */
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "testutil.h"

static pthread_mutex_t glibc_lock = PTHREAD_MUTEX_INITIALIZER; /* what glibc would hold */
static atomic_int created, created_locked;

int pthread_create(pthread_t *t, const pthread_attr_t *attr, void *(*fn)(void *), void *arg) {
  static int (*real)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);
  if (real == NULL) *(void **)&real = dlsym(RTLD_NEXT, "pthread_create");
  if (pthread_mutex_trylock(&glibc_lock) == 0) {
    pthread_mutex_unlock(&glibc_lock);
  } else {
    atomic_fetch_add(&created_locked, 1); /* under glibc's own lock: would wait for ever */
  }
  atomic_fetch_add(&created, 1);
  return real(t, attr, fn, arg);
}

/* frugal's threads start detached and asynchronously: wait a little for the count. */
static int threads_settled(int want) {
  int n = tu_threads();
  for (int i = 0; i < 200 && n != want; i++) {
    usleep(5000);
    n = tu_threads();
  }
  return n;
}

static bool control_on(void) {
  const char *c = getenv("FRUGAL_CONTROL");
  return c != NULL && strcmp(c, "1") == 0;
}
static int own_threads(void) { return 1 + control_on(); } /* the purger, and the channel if asked for */

/* The case itself, in a process where no thread of frugal's runs yet: it has cached nothing
 * and grown by less than a MiB (either would want the purger at once). */
static void free_locked_then_allocate(const char *where) {
  enum { N = 2000 };
  static void *blocks[N];
  void *big = tu_ptr(malloc(768 << 10)); /* a large block (above 512 KiB): its free always wakes */
  for (int i = 0; i < N; i++) blocks[i] = tu_ptr(malloc(16 + (size_t)(i % 16) * 16));
  /* the channel, asked for, runs already: the constructor starts it, and a fork child's first
   * allocation (the blocks above) */
  int before = tu_threads(), want = 1 + control_on();
  CHECKF(before == want, "%s: before the free, no purger thread runs (%d threads, want %d)", where, before, want);
  pthread_mutex_lock(&glibc_lock);
  free(big);
  for (int i = 0; i < N; i++) free(blocks[i]);
  pthread_mutex_unlock(&glibc_lock);
  CHECKF(atomic_load(&created_locked) == 0, "%s: 768 KiB and %d small blocks freed under the lock: %d thread started there",
         where, N, atomic_load(&created_locked));
  free(tu_ptr(malloc(4 * TU_MIB))); /* an allocation's slow path: the wanted threads start */
  int after = threads_settled(1 + own_threads());
  CHECKF(after == 1 + own_threads() && atomic_load(&created_locked) == 0,
         "%s: the next allocation started them: %d threads (want %d)", where, after, 1 + own_threads());
}

static bool exited_ok(pid_t pid) {
  int status = 0;
  return pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

int main(int argc, char **argv) {
  if (argc > 1) { /* a fresh process: the case named */
    if (strcmp(argv[1], "fresh") == 0) free_locked_then_allocate("fresh process");
    if (strcmp(argv[1], "fork") == 0) {
      free(tu_ptr(malloc(4 * TU_MIB))); /* cached: the parent's purger is wanted ... */
      free(tu_ptr(malloc(4 * TU_MIB))); /* ... and started by this allocation */
      int parent = threads_settled(1 + own_threads());
      CHECKF(parent == 1 + own_threads(), "fork: the parent runs its threads (%d)", parent);
      fflush(stdout);
      pid_t pid = fork();
      if (pid == 0) {
        check_passed = check_failed = 0;
        free_locked_then_allocate("fork child");
        _exit(check_failed != 0);
      }
      CHECK("fork: the child passed its checks (above)", exited_ok(pid));
    }
    return check_finish(argv[1]);
  }
  static const char *cases[] = {"fresh", "fork"};
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
      alarm(30); /* a hang ends as SIGALRM (the lock above is only tried: none is expected) */
      execl("/proc/self/exe", "background", cases[i], (char *)NULL);
      _exit(127);
    }
    CHECKF(exited_ok(pid), "case %s: its process passed its checks (above)", cases[i]);
  }
  return check_finish("background");
}
