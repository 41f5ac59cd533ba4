/* purger.c — the background purger: decay passes run on the slow paths of the threads that
 * cache memory, so a thread that sleeps, or only runs fast paths, would keep its caches for
 * ever; this thread runs the same expiry over every heap and cache while the program is quiet.
 * It lives only while there is something to give back, and never longer than the program's
 * own threads: a process ends when its last thread does, whatever frugal has cached. */
#define _GNU_SOURCE
#include "internal.h"

#include <pthread.h>
#include <time.h>

/* NOT_STARTED: no thread; the next cache starts one. A thread that finds nothing left to
 * expire ends (back to NOT_STARTED) rather than parks: a parked thread is a thread glibc
 * counts, and a process whose main() ended with pthread_exit waited on it for ever. */
enum { OFF, NOT_STARTED, STARTING, RUNNING };
static _Atomic int state = OFF; /* OFF until the constructor enables it: no thread at bootstrap */
static _Atomic bool dirty;       /* something was cached since the pass began */
static _Atomic bool ended;       /* the last program thread with a heap has exited */
static pthread_mutex_t nap_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t nap_cond;  /* on CLOCK_MONOTONIC: signalled when threads end */

static __thread bool is_purger; /* its own passes cache things too: no need to wake itself */

/* Ends the thread unless something was cached since its pass began; true if it ends. A
 * waker that saw RUNNING set `dirty` before it looked at the state, so one of the two sees
 * the other (both orders are sequentially consistent): a cache is never left without a
 * thread that will expire it. */
static bool retire(bool force) {
  atomic_store(&state, NOT_STARTED);
  if (force || !atomic_load(&dirty)) return true;
  int not_started = NOT_STARTED; /* a cache came meanwhile: carry on, unless its waker started a new thread */
  return !atomic_compare_exchange_strong(&state, &not_started, RUNNING);
}

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

/* A pass, then a nap of a quarter of the decay time (so what expires is given back within
 * 1.25 x the decay time); the thread ends when nothing is left to expire. A program that
 * caches and takes back all the time keeps it napping, never spinning. Started, it naps
 * before its pass too: what was cached just now expires a decay time later at the earliest
 * (a pass at once found nothing to do, ended, and was started by the next cache: a storm of
 * threads, each caching its segment at exit for the next one to take, ran 11,630 passes for
 * 20,000 threads). When the program's threads end, it polls for the last of them to be gone
 * (1, 2, 4 ... ms: an exiting thread runs its TLS destructors, frugal's among them, before
 * it is gone) and then ends itself, so that glibc ends the process (exit(0), as it does when
 * the last thread ends): the program's end is never frugal's to delay. */
static void *purger_main(void *arg) {
  (void)arg;
  is_purger = true;
  uint64_t decay = (uint64_t)_fg_option(FG_OPTION_DECAY_MS), every = decay / 4 > 10 ? decay / 4 : 10;
  uint64_t pass_at = _fg_clock_ms() + every, poll = 0;
  for (;;) {
    if (atomic_exchange(&ended, false)) poll = 1;
    if (poll != 0 && _fg_program_ended() && retire(true)) return NULL;
    uint64_t now = _fg_clock_ms();
    if (now >= pass_at) {
      atomic_store(&dirty, false);
      bool left = _fg_heaps_purge(now);
      _fg_count(FG_C_purger_passes, 1);
      if (!left && retire(false)) return NULL;
      pass_at = now + every;
    }
    uint64_t wait = pass_at > now ? pass_at - now : 0;
    if (poll != 0) { /* still polling while no program thread owns a heap; else a pass's pace */
      if (wait > poll) wait = poll;
      poll = _fg_heaps_owned() != 0 ? 0 : poll < every ? poll * 2 : every; /* while none owns one */
    }
    nap(wait);
  }
}

/* A failed start is not retried on every call. */
static fg_noinline void start(void) {
  int err = _fg_thread_start(purger_main);
  atomic_store(&state, err == 0 ? RUNNING : OFF);
  if (err != 0) _fg_event(1, "purger thread not started: memory is given back on slow paths only");
}

/* Something was cached: the purger must see it. Called outside every frugal lock (starting
 * the thread allocates). One load on the common path. */
void _fg_purger_wake(void) {
  _fg_control_poke();
  int s = atomic_load_explicit(&state, memory_order_relaxed);
  if (s == RUNNING) {
    if (is_purger || atomic_load_explicit(&dirty, memory_order_relaxed)) return;
    atomic_store(&dirty, true);
    s = atomic_load(&state); /* see retire(): the thread may be ending */
  }
  if (s == NOT_STARTED && atomic_compare_exchange_strong(&state, &s, STARTING)) start();
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

/* Fork: the child has no purger thread; it starts one when it caches something. */
void _fg_purger_after_fork_child(void) {
  pthread_mutex_init(&nap_lock, NULL);
  init_cond();
  atomic_store(&dirty, false);
  atomic_store(&ended, false);
  if (atomic_load(&state) != OFF) atomic_store(&state, NOT_STARTED);
}
