/* purger.c — the background purger: decay passes run on the slow paths of the threads that
 * cache memory, so a thread that sleeps, or only runs fast paths, would keep its caches for
 * ever; this thread runs the same expiry over every heap and cache while the program is quiet. */
#define _GNU_SOURCE
#include "internal.h"

#include <pthread.h>
#include <signal.h>
#include <time.h>

enum { OFF, NOT_STARTED, STARTING, RUNNING, PARKED };
static _Atomic int state = OFF; /* OFF until the constructor enables it: no thread at bootstrap */
static _Atomic bool dirty;       /* something was cached since the pass began */
static pthread_mutex_t park_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t park_cond = PTHREAD_COND_INITIALIZER;

static void nap_ms(uint64_t ms) {
  struct timespec ts = {.tv_sec = (time_t)(ms / 1000), .tv_nsec = (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

static __thread bool is_purger; /* its own passes cache things too: no need to wake itself */

/* Park until woken, unless something was cached during the pass; true if it parked. */
static bool park(void) {
  pthread_mutex_lock(&park_lock);
  int running = RUNNING;
  bool parks = !atomic_load(&dirty) && atomic_compare_exchange_strong(&state, &running, PARKED);
  while (parks && atomic_load(&state) == PARKED) pthread_cond_wait(&park_cond, &park_lock);
  pthread_mutex_unlock(&park_lock);
  return parks;
}

/* A pass, then a nap of a quarter of the decay time (so what expires is given back within
 * 1.25 x the decay time), or parked when nothing is left to expire. A program that caches
 * and takes back all the time keeps it napping, never spinning. Woken, it naps before its
 * pass too: what was cached just now expires a decay time later at the earliest, and a
 * pass at once found nothing to do, parked, and was woken by the next cache: a storm of
 * threads, each caching its segment at exit for the next one to take, ran 11,630 passes
 * and as many wake-ups for 20,000 threads (the purger's CPU time was a fifth of the run's). */
static void *purger_main(void *arg) {
  (void)arg;
  is_purger = true;
  for (;;) {
    atomic_store(&dirty, false);
    bool left = _fg_heaps_purge(_fg_clock_ms());
    _fg_count(FG_C_purger_passes, 1);
    if (!left) park();
    uint64_t decay = (uint64_t)_fg_option(FG_OPTION_DECAY_MS);
    nap_ms(decay / 4 > 10 ? decay / 4 : 10);
  }
  return NULL;
}

/* Every signal blocked: the program's signals are for its own threads. A small stack: the
 * pass needs little, and the thread should cost the program next to nothing. */
static fg_noinline void start(void) {
  pthread_attr_t attr;
  sigset_t all, old;
  pthread_t t;
  sigfillset(&all);
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_attr_setstacksize(&attr, 64 * 1024);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  int err = pthread_create(&t, &attr, purger_main, NULL);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  pthread_attr_destroy(&attr);
  atomic_store(&state, err == 0 ? RUNNING : OFF); /* a failed start is not retried on every call */
  if (err != 0) _fg_event(1, "purger thread not started: memory is given back on slow paths only");
}

static fg_noinline void wake_parked(void) {
  pthread_mutex_lock(&park_lock);
  int parked = PARKED;
  if (atomic_compare_exchange_strong(&state, &parked, RUNNING)) pthread_cond_signal(&park_cond);
  pthread_mutex_unlock(&park_lock);
}

/* Something was cached: the purger must see it. Called outside every frugal lock (starting
 * the thread allocates). One load on the common path. */
void _fg_purger_wake(void) {
  int s = atomic_load_explicit(&state, memory_order_relaxed);
  if (s == RUNNING) {
    if (is_purger) return;
    if (!atomic_load_explicit(&dirty, memory_order_relaxed)) atomic_store_explicit(&dirty, true, memory_order_relaxed);
    return;
  }
  if (s == PARKED) {
    wake_parked();
  } else if (s == NOT_STARTED) {
    if (atomic_compare_exchange_strong(&state, &s, STARTING)) start();
  }
}

void _fg_purger_enable(void) {
  if (_fg_option(FG_OPTION_PURGE_THREAD)) atomic_store(&state, NOT_STARTED);
}

/* Fork: the child has no purger thread; it starts one when it caches something. */
void _fg_purger_after_fork_child(void) {
  pthread_mutex_init(&park_lock, NULL);
  pthread_cond_init(&park_cond, NULL);
  atomic_store(&dirty, false);
  if (atomic_load(&state) != OFF) atomic_store(&state, NOT_STARTED);
}
