/* stress.c — the threaded stress test: 8 worker threads allocate, free, realloc, calloc and
 * align blocks of mixed sizes (bytes to MiB), hand blocks to each other through a shared
 * queue (so frees and reallocs cross threads), exit and get replaced as the run goes on (so
 * pages of dead threads get adopted), and take signals mid-operation. Beside them a producer
 * hands whole batches of one size to a consumer and sleeps up to 12 ms meanwhile, so that pages
 * it filled come back both while it is away (given back by the consumer's frees) and while it
 * allocates again (taken back by it). Every block carries a
 * pattern derived from its address, size and the run's seed, checked before it is freed or
 * resized.
 * Uses only the libc names, so the same source runs linked with frugal or under LD_PRELOAD.
 * Usage: stress [SECONDS [SEED]]; SECONDS defaults to $FRUGAL_STRESS_SECONDS, then 30. */
#include <malloc.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "testutil.h"

#define WORKERS 8
#define SLOTS 512           /* live blocks a worker keeps at most */
#define QUEUE_CAP 4096      /* blocks in flight between threads */
#define LEAVE_BEHIND 48     /* blocks a finishing worker leaves in the queue for others */
#define MIN_STEPS 10000     /* a worker's life, in operations: short enough that hundreds */
#define MAX_STEPS 60000     /* of threads come and go in a 10 s run */

typedef struct block_s {
  unsigned char *p;
  size_t n;
} block_t;

static uint64_t run_seed;
static atomic_int stop;
static atomic_long n_ops, n_cross, n_corrupt, n_nonzero, n_misaligned, n_null, n_short;
static atomic_long n_signals;

/* Signals land in the middle of malloc and free (RELIABILITY.md, "Faults"): the handler does
 * not allocate, but the interrupted allocation must still leave the heap intact. */
static void on_signal(int sig) {
  (void)sig;
  atomic_fetch_add_explicit(&n_signals, 1, memory_order_relaxed);
}

/* ---- the pattern: derived from address, size and seed, so a block handed to another
 * thread is checkable there with no side table. ---- */
static uint64_t block_key(const void *p, size_t n) {
  return tu_mix((uint64_t)(uintptr_t)p ^ tu_mix(n) ^ run_seed);
}
static void block_fill(block_t b) { tu_fill(b.p, b.n, block_key(b.p, b.n)); }
static void block_check(block_t b, size_t prefix, const char *when) {
  long bad = tu_verify(b.p, prefix, block_key(b.p, b.n));
  if (bad >= 0 && atomic_fetch_add(&n_corrupt, 1) < 10)
    printf("#    corrupt block %p size %zu at byte %ld (%s)\n", (void *)b.p, b.n, bad, when);
}
static void block_release(block_t b) {
  block_check(b, b.n, "before free");
  free(b.p);
}

/* ---- the exchange queue: a mutex-protected ring; the lock is the test's, not the
 * allocator's, and is held only around the copy of one entry. ---- */
static pthread_mutex_t q_lock = PTHREAD_MUTEX_INITIALIZER;
static block_t q_ring[QUEUE_CAP];
static size_t q_head, q_len;

static int queue_push(block_t b) {
  int ok = 0;
  pthread_mutex_lock(&q_lock);
  if (q_len < QUEUE_CAP) {
    q_ring[(q_head + q_len++) % QUEUE_CAP] = b;
    ok = 1;
  }
  pthread_mutex_unlock(&q_lock);
  return ok;
}
static int queue_pop(block_t *b) {
  int ok = 0;
  pthread_mutex_lock(&q_lock);
  if (q_len > 0) {
    *b = q_ring[q_head];
    q_head = (q_head + 1) % QUEUE_CAP;
    q_len--;
    ok = 1;
  }
  pthread_mutex_unlock(&q_lock);
  return ok;
}

/* ---- one worker ---- */
/* Mostly small, some medium, a few large (from the OS / the large cache), in 1/10000ths. */
static const tu_band_t stress_sizes[] = {{8800, 0, 512},
                                         {1100, 513, 64 << 10},
                                         {90, (64 << 10) + 1, 1 << 20},
                                         {10, (1 << 20) + 1, 6 << 20}};
static size_t pick_size(tu_rng_t *r) { return tu_pick_size(r, stress_sizes, 4); }
static size_t pick_align(tu_rng_t *r) {
  uint64_t k = tu_next(r) % 100;
  if (k < 90)
    return (size_t)16 << tu_range(r, 0, 8); /* 16 .. 4096 */
  if (k < 99)
    return (size_t)8192 << tu_range(r, 0, 3); /* 8 .. 64 KiB */
  return (size_t)2 << 20;
}

/* Allocate a fresh block by one of five routes; NULL only on failure (counted). */
static block_t fresh_block(tu_rng_t *r) {
  block_t b = {NULL, pick_size(r)};
  uint64_t how = tu_next(r) % 100;
  if (how < 65) {
    b.p = (unsigned char *)malloc(b.n);
  } else if (how < 80) {
    b.p = (unsigned char *)calloc(1, b.n);
    if (b.p && !tu_is_zero(b.p, b.n) && atomic_fetch_add(&n_nonzero, 1) < 10)
      printf("#    calloc(1, %zu) returned non-zero memory at %p\n", b.n, (void *)b.p);
  } else if (how < 95) {
    size_t a = pick_align(r);
    void *p = NULL;
    if (how < 88)
      p = aligned_alloc(a, b.n);
    else if (posix_memalign(&p, a, b.n) != 0)
      p = NULL;
    if (p && (uintptr_t)p % a != 0 && atomic_fetch_add(&n_misaligned, 1) < 10)
      printf("#    %p is not aligned to %zu\n", p, a);
    b.p = (unsigned char *)p;
  } else {
    b.p = (unsigned char *)realloc(NULL, b.n);
  }
  if (!b.p) {
    if (atomic_fetch_add(&n_null, 1) < 10)
      printf("#    allocation of %zu bytes returned NULL\n", b.n);
    return b;
  }
  if (malloc_usable_size(b.p) < b.n && atomic_fetch_add(&n_short, 1) < 10)
    printf("#    usable size %zu below request %zu\n", malloc_usable_size(b.p), b.n);
  block_fill(b);
  return b;
}

/* Resize a block, checking the kept prefix and re-stamping the pattern for its new place. */
static block_t resize_block(tu_rng_t *r, block_t b) {
  block_check(b, b.n, "before realloc");
  size_t n = tu_next(r) % 4 == 0 ? pick_size(r) : b.n / 2 + tu_range(r, 1, b.n + 64);
  if (n == 0)
    n = 1; /* realloc(p, 0) frees p: not a resize */
  unsigned char *q = (unsigned char *)realloc(b.p, n);
  if (!q) {
    if (atomic_fetch_add(&n_null, 1) < 10)
      printf("#    realloc to %zu bytes returned NULL\n", n);
    return b;
  }
  size_t keep = n < b.n ? n : b.n;
  long bad = tu_verify(q, keep, block_key(b.p, b.n));
  if (bad >= 0 && atomic_fetch_add(&n_corrupt, 1) < 10)
    printf("#    realloc %zu -> %zu lost byte %ld\n", b.n, n, bad);
  block_t nb = {q, n};
  block_fill(nb);
  return nb;
}

typedef struct worker_s {
  pthread_t thread;
  uint64_t seed;
  atomic_int done;
} worker_t;

static void *worker_main(void *arg) {
  worker_t *w = (worker_t *)arg;
  tu_rng_t r = {w->seed};
  /* The first call frees a block from the queue, often one a dead worker left: the thread
   * then takes that worker's heap (frugal's heap.c, _fg_heap_adopt) while others free into it. */
  block_t first;
  if (queue_pop(&first)) block_release(first);
  block_t *slots = (block_t *)calloc(SLOTS, sizeof *slots);
  long steps = (long)tu_range(&r, MIN_STEPS, MAX_STEPS), ops = 0, cross = 0;
  for (long s = 0; s < steps && !atomic_load_explicit(&stop, memory_order_relaxed); s++) {
    block_t *slot = &slots[tu_next(&r) % SLOTS];
    uint64_t op = tu_next(&r) % 100;
    ops++;
    if (op < 40) { /* allocate into the slot */
      if (slot->p)
        block_release(*slot);
      *slot = fresh_block(&r);
    } else if (op < 68) { /* free */
      if (slot->p)
        block_release(*slot);
      slot->p = NULL;
    } else if (op < 78) { /* realloc, possibly of a block another thread allocated */
      if (slot->p)
        *slot = resize_block(&r, *slot);
    } else if (op < 89) { /* hand to another thread */
      if (slot->p && !queue_push(*slot))
        block_release(*slot);
      slot->p = NULL;
    } else { /* take from another thread: free it there, or keep it */
      block_t b;
      if (queue_pop(&b)) {
        cross++;
        if (op < 95) {
          block_release(b);
        } else {
          if (slot->p)
            block_release(*slot);
          *slot = b;
        }
      }
    }
  }
  /* Leave a few blocks behind for the others (they outlive this thread's heap), free the
   * rest here. */
  int left = 0;
  for (size_t i = 0; i < SLOTS; i++) {
    if (!slots[i].p)
      continue;
    if (left < LEAVE_BEHIND && queue_push(slots[i]))
      left++;
    else
      block_release(slots[i]);
  }
  free(slots);
  atomic_fetch_add(&n_ops, ops);
  atomic_fetch_add(&n_cross, cross);
  atomic_store(&w->done, 1);
  return NULL;
}

/* ---- the hand-off pair: a batch at a time, the producer away for a while after each ---- */
#define HANDOFF_BATCH 1024
static block_t handoff[HANDOFF_BATCH];
static atomic_int handoff_ready; /* 1: the batch is the consumer's */
static atomic_long n_handed;
static atomic_int producer_done;

static void *handoff_producer(void *arg) {
  (void)arg;
  tu_rng_t r = {tu_mix(run_seed ^ 0x4a4e)};
  while (!atomic_load(&stop)) {
    size_t n = (size_t)64 << tu_next(&r) % 5; /* 64 B to 1 KiB: whole pages of one class */
    for (int i = 0; i < HANDOFF_BATCH; i++) {
      handoff[i] = (block_t){(unsigned char *)malloc(n), n};
      if (handoff[i].p == NULL) {
        atomic_fetch_add(&n_null, 1);
        handoff[i].n = 0;
        continue;
      }
      block_fill(handoff[i]);
    }
    atomic_store_explicit(&handoff_ready, 1, memory_order_release);
    struct timespec away = {0, (long)(tu_next(&r) % 12000) * 1000};
    nanosleep(&away, NULL);
    for (int i = 0; i < 64; i++) block_release(fresh_block(&r)); /* back, while the frees go on */
    while (atomic_load_explicit(&handoff_ready, memory_order_acquire) && !atomic_load(&stop)) sched_yield();
  }
  atomic_store(&producer_done, 1); /* a batch still ready is the consumer's to free */
  return NULL;
}

static void *handoff_consumer(void *arg) {
  (void)arg;
  tu_rng_t r = {tu_mix(run_seed ^ 0x434f)};
  for (;;) {
    if (!atomic_load_explicit(&handoff_ready, memory_order_acquire)) {
      if (atomic_load(&producer_done)) return NULL;
      sched_yield();
      continue;
    }
    for (int i = 0; i < HANDOFF_BATCH; i++) {
      if (i == HANDOFF_BATCH / 2) { /* half now, half later: some pages are woken first */
        struct timespec pause = {0, (long)(tu_next(&r) % 4000) * 1000};
        nanosleep(&pause, NULL);
      }
      if (handoff[i].p != NULL) block_release(handoff[i]);
    }
    atomic_fetch_add(&n_handed, HANDOFF_BATCH);
    atomic_store_explicit(&handoff_ready, 0, memory_order_release);
  }
}

static int start_worker(worker_t *w, uint64_t seed) {
  w->seed = seed;
  atomic_store(&w->done, 0);
  return pthread_create(&w->thread, NULL, worker_main, w) == 0;
}

int main(int argc, char **argv) {
  double seconds = tu_seconds(argc, argv, 30);
  run_seed = argc > 2 ? strtoull(argv[2], NULL, 0) : 0xF00D5EEDull;
  check_note("%d workers, %.0f s, seed %#llx", WORKERS, seconds, (unsigned long long)run_seed);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sa.sa_flags = SA_RESTART;
  sigaction(SIGUSR1, &sa, NULL);
  tu_rng_t main_rng = {run_seed};
  static worker_t workers[WORKERS];
  long started = 0, joined = 0, create_failed = 0;
  uint64_t generation[WORKERS] = {0};
  for (int i = 0; i < WORKERS; i++) {
    if (start_worker(&workers[i], tu_mix(run_seed ^ ((uint64_t)i << 40))))
      started++;
    else
      create_failed++;
  }
  pthread_t producer, consumer;
  if (pthread_create(&producer, NULL, handoff_producer, NULL) != 0 ||
      pthread_create(&consumer, NULL, handoff_consumer, NULL) != 0)
    create_failed++;
  double t0 = tu_now();
  struct timespec nap = {0, 2 * 1000 * 1000};
  while (tu_now() - t0 < seconds && create_failed == 0) {
    for (int i = 0; i < WORKERS; i++) {
      if (!atomic_load(&workers[i].done))
        continue;
      pthread_join(workers[i].thread, NULL);
      joined++;
      generation[i]++;
      if (start_worker(&workers[i], tu_mix(run_seed ^ ((uint64_t)i << 40) ^ generation[i])))
        started++;
      else
        create_failed++;
    }
    /* Interrupt a worker mid-operation every round; a finished, unjoined one is fine too. */
    if (create_failed == 0)
      pthread_kill(workers[tu_next(&main_rng) % WORKERS].thread, SIGUSR1);
    nanosleep(&nap, NULL);
  }
  atomic_store(&stop, 1);
  if (create_failed == 0) {
    pthread_join(producer, NULL);
    pthread_join(consumer, NULL);
  }
  for (int i = 0; i < WORKERS; i++) {
    pthread_join(workers[i].thread, NULL);
    joined++;
  }
  block_t b;
  long drained = 0;
  while (queue_pop(&b)) {
    block_release(b);
    drained++;
  }
  check_note("%ld operations, %ld cross-thread hand-overs, %ld blocks handed over in batches, %ld "
             "threads started, %ld signals taken, %ld blocks drained at the end, %.1f s",
             atomic_load(&n_ops), atomic_load(&n_cross), atomic_load(&n_handed), started,
             atomic_load(&n_signals), drained, tu_now() - t0);
  CHECK("every block kept its seeded pattern until freed or resized", atomic_load(&n_corrupt) == 0);
  CHECK("calloc returned zeroed memory every time", atomic_load(&n_nonzero) == 0);
  CHECK("aligned_alloc / posix_memalign blocks were aligned", atomic_load(&n_misaligned) == 0);
  CHECK("no allocation returned NULL", atomic_load(&n_null) == 0);
  CHECK("malloc_usable_size >= request for every block", atomic_load(&n_short) == 0);
  CHECK("every pthread_create succeeded", create_failed == 0);
  CHECK("threads were created and joined while it ran (more than the first 8)",
        started > WORKERS && joined == started);
  CHECK("blocks crossed threads", atomic_load(&n_cross) > 0);
  CHECK("the producer's batches were freed by the consumer", atomic_load(&n_handed) > 0);
  CHECK("workers took signals in the middle of their allocations", atomic_load(&n_signals) > 0);
  return check_finish("stress");
}
