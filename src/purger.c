/* purger.c — the background purger: decay passes run on the slow paths of the threads that
 * cache memory, so a thread that sleeps, or only runs fast paths, would keep its caches for
 * ever; this thread runs the same expiry over every heap and cache while the program is quiet.
 * It is started once a process (once in a fork child), parks while nothing is left to give
 * back, and never lives longer than the program's own threads: a process ends when its last
 * thread does, whatever frugal has cached. */
#define _GNU_SOURCE
#include "internal.h"

#include <pthread.h>
#include <time.h>

/* NOT_STARTED: no thread; a cache, or a heap that grew by a MiB, makes it WANTED, and the
 * slow path of an allocation starts it (_fg_background_start: the growth's own allocation, so
 * that a program that allocates, frees and sleeps has it). Never from a free: glibc frees a
 * dead thread's TLS while it holds its thread-stack lock, and pthread_create takes that lock
 * — a purger started there waited for ever. Once started it stays (parked), so one start a
 * process is all it costs, and a small program that caches nothing never pays it. */
enum { OFF, NOT_STARTED, WANTED, STARTING, RUNNING };
static _Atomic int state = OFF; /* OFF until the constructor enables it: no thread at bootstrap */
static _Atomic bool dirty;       /* something was cached since the pass began */
static _Atomic bool parked;      /* asleep until something is cached: a waker must signal */
static _Atomic bool ended;       /* the last program thread with a heap has exited */
static pthread_mutex_t nap_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t nap_cond;  /* on CLOCK_MONOTONIC: something cached, or threads ended */

_Atomic bool _fg_start_wanted; /* a background thread is WANTED: one load on the slow paths */

static __thread bool is_purger; /* its own passes cache things too: no need to wake itself */

/* Wait until `ms` have passed or threads ended (_fg_purger_threads_ended). */
static void nap(uint64_t ms) {
  struct timespec at;
  clock_gettime(CLOCK_MONOTONIC, &at);
  at.tv_sec += (time_t)(ms / 1000);
  at.tv_nsec += (long)(ms % 1000) * 1000000L;
  if (at.tv_nsec >= 1000000000L) at.tv_sec++, at.tv_nsec -= 1000000000L;
  pthread_mutex_lock(&nap_lock);
  while (!atomic_load(&ended) && pthread_cond_timedwait(&nap_cond, &nap_lock, &at) == 0) {
  }
  pthread_mutex_unlock(&nap_lock);
}

/* Asleep until something is cached or threads end. A waker stores `dirty` and then loads
 * `parked`; this stores `parked` and then loads `dirty` (all sequentially consistent): one of
 * the two sees the other, so a cache never finds the purger parked without waking it. */
static void park(void) {
  pthread_mutex_lock(&nap_lock);
  atomic_store(&parked, true);
  while (!atomic_load(&ended) && !atomic_load(&dirty)) pthread_cond_wait(&nap_cond, &nap_lock);
  atomic_store(&parked, false);
  pthread_mutex_unlock(&nap_lock);
}

/* A pass, then a nap of a quarter of the decay time (so what expires is given back within
 * 1.25 x the decay time); parked while nothing is left to expire, until the next cache. A
 * program that caches and takes back all the time keeps it napping, never spinning. Started,
 * it naps before its pass too: what was cached just now expires a decay time later at the
 * earliest. When the program's threads end, it polls for the last of them to be gone (1, 2,
 * 4 ... ms: an exiting thread runs its TLS destructors, frugal's among them, before it is
 * gone; never parked while no thread owns a heap, for a thread that never allocated may be
 * the last) and then ends itself, so that glibc ends the process (exit(0), as it does when
 * the last thread ends): the program's end is never frugal's to delay. */
static void *purger_main(void *arg) {
  (void)arg;
  is_purger = true;
  uint64_t decay = (uint64_t)_fg_option(FG_OPTION_DECAY_MS), every = decay / 4 > 10 ? decay / 4 : 10;
  uint64_t pass_at = _fg_clock_ms() + every, poll = 0;
  for (;;) {
    if (atomic_exchange(&ended, false)) poll = 1;
    if (poll != 0 && _fg_program_ended()) break;
    uint64_t now = _fg_clock_ms();
    bool left = true;
    if (now >= pass_at) {
      atomic_store(&dirty, false);
      left = _fg_heaps_purge(now);
      _fg_count(FG_C_purger_passes, 1);
      pass_at = now + every;
    }
    if (!left && poll == 0) {
      park();
      pass_at = _fg_clock_ms() + every; /* what woke it was cached just now: not due before */
      continue;
    }
    uint64_t wait = pass_at - now;
    if (poll != 0) { /* still polling while no program thread owns a heap; else a pass's pace */
      if (wait > poll) wait = poll;
      poll = _fg_heaps_owned() != 0 ? 0 : poll < every ? poll * 2 : every; /* while none owns one */
    }
    nap(wait);
  }
  atomic_store(&state, NOT_STARTED); /* a program that still runs (no /proc to tell) wants it again */
  return NULL;
}

/* A failed start is not retried on every call. */
static fg_noinline void start(void) {
  int err = _fg_thread_start(purger_main);
  atomic_store(&state, err == 0 ? RUNNING : OFF);
  if (err != 0) _fg_event(1, "purger thread not started: memory is given back on slow paths only");
}

/* Something was cached: the purger must see it. Called from frees too, outside every frugal
 * lock; never starts the thread (see WANTED). One load on the common path. */
void _fg_purger_wake(void) {
  _fg_control_poke();
  int s = atomic_load_explicit(&state, memory_order_relaxed);
  if (s == RUNNING) {
    if (is_purger || atomic_load_explicit(&dirty, memory_order_relaxed)) return;
    atomic_store(&dirty, true);
    if (atomic_load(&parked)) {
      pthread_mutex_lock(&nap_lock);
      pthread_cond_signal(&nap_cond);
      pthread_mutex_unlock(&nap_lock);
    }
  } else if (s == NOT_STARTED) {
    _fg_purger_grew();
  }
}

void _fg_purger_grew(void) {
  int s = NOT_STARTED;
  if (atomic_load_explicit(&state, memory_order_relaxed) == s && atomic_compare_exchange_strong(&state, &s, WANTED))
    atomic_store(&_fg_start_wanted, true);
}

/* From the slow paths of allocation (heap.c, large.c), where glibc holds none of the locks
 * pthread_create takes. */
void _fg_background_start_slow(void) {
  atomic_store(&_fg_start_wanted, false);
  int s = WANTED;
  if (atomic_compare_exchange_strong(&state, &s, STARTING)) start();
  _fg_control_start_wanted();
}

bool _fg_purger_running(void) { return atomic_load(&state) >= STARTING; }

/* The last thread with a heap exited (heap.c): the purger, if it runs, looks whether the
 * program is over. */
void _fg_purger_threads_ended(void) {
  pthread_mutex_lock(&nap_lock);
  atomic_store(&ended, true);
  pthread_cond_signal(&nap_cond);
  pthread_mutex_unlock(&nap_lock);
}

static void init_cond(void) {
  pthread_condattr_t attr;
  pthread_condattr_init(&attr);
  pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
  pthread_cond_init(&nap_cond, &attr);
  pthread_condattr_destroy(&attr);
}

void _fg_purger_enable(void) {
  init_cond();
  if (_fg_option(FG_OPTION_PURGE_THREAD)) atomic_store(&state, NOT_STARTED);
}

/* Fork: the child has no purger thread; it wants one when it caches something. */
void _fg_purger_after_fork_child(void) {
  pthread_mutex_init(&nap_lock, NULL);
  init_cond();
  atomic_store(&dirty, false);
  atomic_store(&parked, false);
  atomic_store(&ended, false);
  atomic_store(&_fg_start_wanted, false);
  if (atomic_load(&state) != OFF) atomic_store(&state, NOT_STARTED);
}
