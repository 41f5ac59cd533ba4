/* threads — seed 4 ("thread caching vs a global heap"), docs/lab.md experiment 4: N threads share
 * the work of X allocations, in the seed's shapes (batches, its locked designs, a cross-thread
 * queue) and in shapes where blocks die on threads other than their owner's. */
#include <getopt.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/syscall.h>

#include "lab.h"

#define MAX_THREADS 1024
#define MAX_BATCH 4096
/* The pooled X allocator's array: 64 heaps indexed by thread id, as the seed describes. */
#define NHEAPS 64

typedef enum {
  V_MALLOC, V_GLOBAL_MUTEX, V_MUTEX_ARRAY, V_CROSS, /* the seed's shapes */
  V_STORM, V_BURSTS, V_TAKEOVER, V_REMOTE           /* blocks dying on other threads */
} variant_t;
static const char *const variant_names[] = {"malloc", "global-mutex", "mutex-array", "cross",
                                            "storm",  "bursts",       "takeover",    "remote"};

typedef struct {
  variant_t variant;
  uint64_t size;
  uint64_t batch;
  uint64_t threads;
  /* --max-ms: an allocator 10x slower than the best would stretch the lab by as much; its run
   * stops here and reports the work done, from which the lab extrapolates its time. */
  uint64_t deadline_ns;
  pthread_barrier_t start;
} run_t;

static run_t run;

/* ---- the seed's X allocator: the allocator under test behind one global mutex ---- */
static pthread_mutex_t global_lock = PTHREAD_MUTEX_INITIALIZER;

/* ---- the seed's pooled X allocator: one heap (lock + free list) per thread id ---- */
typedef struct pool_block_s {
  struct pool_block_s *next;
} pool_block_t;

typedef struct {
  pthread_mutex_t lock;
  pool_block_t *free_list;
  char pad[64]; /* keep neighbouring heaps' locks on different cache lines */
} pool_heap_t;

static pool_heap_t heaps[NHEAPS];

static pool_heap_t *my_heap(void) { return &heaps[(unsigned long)syscall(SYS_gettid) % NHEAPS]; }

static void *obj_alloc(pool_heap_t *h) {
  void *p;
  switch (run.variant) {
  case V_GLOBAL_MUTEX:
    pthread_mutex_lock(&global_lock);
    p = malloc(run.size);
    pthread_mutex_unlock(&global_lock);
    return p;
  case V_MUTEX_ARRAY:
    pthread_mutex_lock(&h->lock);
    p = h->free_list;
    if (p)
      h->free_list = h->free_list->next;
    else
      p = malloc(run.size);
    pthread_mutex_unlock(&h->lock);
    return p;
  default:
    return malloc(run.size);
  }
}

static void obj_free(pool_heap_t *h, void *p) {
  switch (run.variant) {
  case V_GLOBAL_MUTEX:
    pthread_mutex_lock(&global_lock);
    free(p);
    pthread_mutex_unlock(&global_lock);
    return;
  case V_MUTEX_ARRAY:
    pthread_mutex_lock(&h->lock);
    ((pool_block_t *)p)->next = h->free_list;
    h->free_list = p;
    pthread_mutex_unlock(&h->lock);
    return;
  default:
    free(p);
  }
}

/* "Writing" an object: its first and last 8 bytes, so the cost measured is the allocator's,
 * not memory bandwidth (a 1 MiB memset would drown it). */
static inline void obj_write(void *p, uint64_t v) {
  memcpy(p, &v, 8);
  memcpy((char *)p + run.size - 8, &v, 8);
}

static inline int obj_check(const void *p, uint64_t v) {
  uint64_t a, b;
  memcpy(&a, p, 8);
  memcpy(&b, (const char *)p + run.size - 8, 8);
  return a != v || b != v;
}

/* One cache line each: workers[] is an array, and neighbours sharing a line would make every
 * core's write to its own entry a miss on the others' (false sharing), a cost of the
 * harness rather than of the allocator. The loops also count in locals. */
typedef struct {
  uint64_t objects; /* this thread's share of X */
  uint64_t done;    /* allocations made (consumers: blocks freed) */
  uint64_t bad;
  uint64_t index;
  pthread_t tid;
} __attribute__((aligned(64))) worker_t;

/* ---- the thread shapes where blocks die on threads other than their owner's ----
 * Every shape does `objects` allocations in all (its work, the same under every allocator),
 * draws sizes from a seeded per-thread generator, and tags each block: its size in the second
 * word (the first is a link where a block travels in a list) and, in the last, the size keyed;
 * the two must still agree when the block is freed. */

/* A tagged block holds a link, its size and the keyed size: 24 bytes at least. */
#define TAG_MIN 24
#define TAG_KEY 0x5A5A0F0F3C3CA5A5ull

/* Mostly small (24 B up to --size), one in 32 from 10 to 1000 times larger: the storm's mix. */
static inline size_t storm_size(uint64_t *s) {
  size_t small = TAG_MIN + lab_rnd_next(s) % (run.size - TAG_MIN + 1);
  if (lab_rnd_next(s) % 32 == 0) small *= 10 + lab_rnd_next(s) % 991;
  return small;
}

/* Uniform from 24 B to twice --size: the mixes of bursts, takeover and remote. */
static inline size_t mix_size(uint64_t *s) {
  return TAG_MIN + lab_rnd_next(s) % (2 * run.size - TAG_MIN + 1);
}

static inline void *tagged_alloc(size_t n) {
  uint64_t *p = malloc(n);
  if (!p) abort();
  uint64_t keyed = n ^ TAG_KEY;
  p[1] = n;
  memcpy((char *)p + n - 8, &keyed, 8);
  return p;
}

/* Frees a tagged block; 1 when its tags disagree (handed out twice, or written over). */
static inline uint64_t tagged_free(void *p) {
  uint64_t n = ((uint64_t *)p)[1], keyed = 0;
  if (n >= TAG_MIN && n <= (1ull << 32)) memcpy(&keyed, (char *)p + n - 8, 8);
  free(p);
  return keyed != (n ^ TAG_KEY);
}

static inline bool past_deadline(void) { return run.deadline_ns && lab_now_ns() >= run.deadline_ns; }

/* ---- what the workload itself holds between threads ----
 * Bytes of blocks one thread handed to another (a mailbox, the queue) and that one has not
 * freed yet, and the most of them at once, reported as held_peak: no allocator can give them
 * back, so peak RSS minus held_peak is the allocator's own part. In the remote shape the
 * mailboxes are unbounded, and what piles up is the bytes a thread mails while the thread it
 * mails to is off the CPU: 3.8 to 50 MiB between identical runs, under every
 * allocator. Counted once a batch (after its mailing, after a drain), not once a block: two
 * atomics per 1,000 allocations. So it is a near figure both ways: it misses at most a batch's
 * mail a thread, and while a pile is being freed it still counts all of it, though the freed
 * part may be handed out again (in 2-thread runs it read up to 5.5 MiB over the peak RSS). */
static _Atomic(int64_t) held_now, held_peak;

static void held_add(int64_t bytes) {
  int64_t now = atomic_fetch_add(&held_now, bytes) + bytes, peak = atomic_load(&held_peak);
  while (now > peak && !atomic_compare_exchange_weak(&held_peak, &peak, now)) {
  }
}

/* ---- storm: rounds of short-lived threads swapping blocks through a shared table ---- */
#define STORM_SLOTS 1000 /* the table of atomic slots the threads swap blocks through */
#define STORM_LOCAL 64   /* blocks a storm thread holds at once */
static _Atomic(void *) storm_table[STORM_SLOTS];

typedef struct {
  uint64_t round, index, ops, done, bad;
} storm_arg_t;

static void *storm_main(void *arg) {
  storm_arg_t *a = arg;
  uint64_t s = lab_rnd_seed(a->round, a->index), bad = 0;
  void *mine[STORM_LOCAL];
  int n = 0;
  uint64_t op = 0;
  for (; op < a->ops; op++) {
    if (op % 256 == 0 && past_deadline()) break; /* a round may be long: a probe's is */
    uint64_t r = lab_rnd_next(&s) % 8;
    if (n < STORM_LOCAL && (r < 4 || n == 0)) {
      mine[n++] = tagged_alloc(storm_size(&s));
    } else if (r < 7) { /* free a random block of ours: some came from other threads */
      int k = (int)(lab_rnd_next(&s) % (uint64_t)n);
      bad += tagged_free(mine[k]);
      mine[k] = mine[--n];
    } else { /* swap one of ours for what the table holds: it may outlive this thread */
      int k = (int)(lab_rnd_next(&s) % (uint64_t)n);
      void *got = atomic_exchange(&storm_table[lab_rnd_next(&s) % STORM_SLOTS], mine[k]);
      if (got) mine[k] = got;
      else mine[k] = mine[--n];
    }
  }
  /* Leaving: half of what is left goes to the table, to be freed after this thread is gone. */
  for (int k = 0; k < n; k++) {
    void *p = mine[k];
    if (k % 2 == 0) p = atomic_exchange(&storm_table[lab_rnd_next(&s) % STORM_SLOTS], p);
    if (p) bad += tagged_free(p);
  }
  a->done = op;
  a->bad = bad;
  return NULL;
}

/* Allocations in all: each op allocates at most once, so ops bound them from above; the
 * count reported as done is the ops run. */
static uint64_t run_storm(uint64_t nthreads, uint64_t objects, uint64_t rounds, uint64_t *bad) {
  storm_arg_t args[MAX_THREADS];
  pthread_t tids[MAX_THREADS];
  uint64_t per = objects / (rounds * nthreads) + 1, done = 0;
  for (uint64_t r = 0; r < rounds && !past_deadline(); r++) {
    for (uint64_t i = 0; i < nthreads; i++) {
      args[i] = (storm_arg_t){.round = r, .index = i, .ops = per};
      if (pthread_create(&tids[i], NULL, storm_main, &args[i]) != 0) abort();
    }
    for (uint64_t i = 0; i < nthreads; i++) {
      pthread_join(tids[i], NULL);
      done += args[i].done;
      *bad += args[i].bad;
    }
  }
  for (int k = 0; k < STORM_SLOTS; k++) {
    void *p = atomic_exchange(&storm_table[k], NULL);
    if (p) *bad += tagged_free(p);
  }
  return done;
}

/* ---- takeover: each generation of threads frees the blocks the dead one left, and leaves
 * its own for the next: server-like churn where work arrays pass to new threads ---- */
#define TAKEOVER_SET 1000 /* blocks a thread leaves behind */
static void *takeover_sets[MAX_THREADS][TAKEOVER_SET];

typedef struct {
  uint64_t gen, index, done, bad;
} takeover_arg_t;

static void *takeover_main(void *arg) {
  takeover_arg_t *a = arg;
  uint64_t s = lab_rnd_seed(a->gen, a->index), bad = 0;
  void **set = takeover_sets[a->index];
  for (int k = 0; k < TAKEOVER_SET; k++) {
    if (set[k]) bad += tagged_free(set[k]);
    set[k] = tagged_alloc(mix_size(&s));
  }
  a->done = TAKEOVER_SET;
  a->bad = bad;
  return NULL;
}

static uint64_t run_takeover(uint64_t nthreads, uint64_t objects, uint64_t *bad) {
  takeover_arg_t args[MAX_THREADS];
  pthread_t tids[MAX_THREADS];
  uint64_t gens = objects / (nthreads * TAKEOVER_SET) + 1, done = 0;
  for (uint64_t g = 0; g < gens && !past_deadline(); g++) {
    for (uint64_t i = 0; i < nthreads; i++) {
      args[i] = (takeover_arg_t){.gen = g, .index = (i + g) % nthreads}; /* another thread's set */
      if (pthread_create(&tids[i], NULL, takeover_main, &args[i]) != 0) abort();
    }
    for (uint64_t i = 0; i < nthreads; i++) {
      pthread_join(tids[i], NULL);
      done += args[i].done;
      *bad += args[i].bad;
    }
  }
  for (uint64_t i = 0; i < nthreads; i++)
    for (int k = 0; k < TAKEOVER_SET; k++)
      if (takeover_sets[i][k]) *bad += tagged_free(takeover_sets[i][k]);
  return done;
}

/* ---- remote: N threads alloc/free a mix; one free in ten goes to the next thread's mailbox
 * (a lock-free stack, emptied whole), the rest are local ---- */
#define REMOTE_EVERY 10 /* 10 % of frees remote */
typedef struct {
  _Atomic(void *) head;
  char pad[56]; /* one mailbox per cache line: pushes to neighbours do not falsely share */
} mailbox_t;
static mailbox_t mailboxes[MAX_THREADS];

static uint64_t drain(mailbox_t *m) {
  uint64_t bad = 0;
  int64_t bytes = 0;
  for (void *p = atomic_exchange(&m->head, NULL); p;) {
    void *next = *(void **)p;
    bytes += (int64_t)((uint64_t *)p)[1]; /* its size tag, read before the free */
    bad += tagged_free(p);
    p = next;
  }
  if (bytes) held_add(-bytes);
  return bad;
}

static void *remote_main(void *arg) {
  worker_t *w = arg;
  uint64_t s = lab_rnd_seed(w->index, 7), bad = 0;
  mailbox_t *next = &mailboxes[(w->index + 1) % run.threads];
  void *batch[MAX_BATCH];
  pthread_barrier_wait(&run.start);
  uint64_t done = 0;
  while (done < w->objects && !past_deadline()) {
    uint64_t n = w->objects - done < run.batch ? w->objects - done : run.batch;
    for (uint64_t i = 0; i < n; i++) batch[i] = tagged_alloc(mix_size(&s));
    int64_t mailed = 0;
    for (uint64_t i = 0; i < n; i++) {
      if (lab_rnd_next(&s) % REMOTE_EVERY == 0) {
        mailed += (int64_t)((uint64_t *)batch[i])[1];
        void *old = atomic_load(&next->head);
        do *(void **)batch[i] = old;
        while (!atomic_compare_exchange_weak(&next->head, &old, batch[i]));
      } else {
        bad += tagged_free(batch[i]);
      }
    }
    held_add(mailed);
    bad += drain(&mailboxes[w->index]);
    done += n;
  }
  w->done = done;
  w->bad = bad;
  return NULL;
}


static void *worker_main(void *arg) {
  worker_t *w = arg;
  void *batch[MAX_BATCH];
  pthread_barrier_wait(&run.start);
  pool_heap_t *h = run.variant == V_MUTEX_ARRAY ? my_heap() : NULL;
  uint64_t bad = 0, done = 0;
  while (done < w->objects && !past_deadline()) {
    uint64_t n = w->objects - done < run.batch ? w->objects - done : run.batch;
    for (uint64_t i = 0; i < n; i++) {
      batch[i] = obj_alloc(h);
      if (!batch[i]) abort();
      obj_write(batch[i], done + i);
    }
    for (uint64_t i = 0; i < n; i++) {
      bad += obj_check(batch[i], done + i);
      obj_free(h, batch[i]);
    }
    done += n;
  }
  w->done = done;
  w->bad = bad;
  return NULL;
}

/* ---- cross-thread: a bounded queue of batches from producers to consumers; `bursts` makes
 * each batch a random number of blocks of random sizes ---- */
typedef struct {
  uint64_t n;
  int64_t bytes;  /* what its blocks were asked for (held_add) */
  uint64_t first; /* the value written into the batch's first object */
  void *p[MAX_BATCH];
} batch_t;

static struct {
  pthread_mutex_t lock;
  pthread_cond_t changed;
  batch_t **full; /* ring of filled batches */
  size_t cap, head, count;
  batch_t **spare; /* stack of empty batches */
  size_t nspare;
  int producers_left;
} q = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, NULL, 0, 0, 0, NULL, 0, 0};

static void *producer_main(void *arg) {
  worker_t *w = arg;
  uint64_t s = lab_rnd_seed(w->index, 3), done = 0;
  pthread_barrier_wait(&run.start);
  while (done < w->objects && !past_deadline()) {
    pthread_mutex_lock(&q.lock);
    while (q.nspare == 0) pthread_cond_wait(&q.changed, &q.lock);
    batch_t *b = q.spare[--q.nspare];
    pthread_mutex_unlock(&q.lock);
    uint64_t want = run.variant == V_BURSTS ? 1 + lab_rnd_next(&s) % run.batch : run.batch;
    b->n = w->objects - done < want ? w->objects - done : want;
    b->first = done;
    b->bytes = run.variant == V_BURSTS ? 0 : (int64_t)(b->n * run.size);
    for (uint64_t i = 0; i < b->n; i++) {
      if (run.variant == V_BURSTS) {
        size_t size = mix_size(&s);
        b->bytes += (int64_t)size;
        b->p[i] = tagged_alloc(size);
        continue;
      }
      b->p[i] = malloc(run.size);
      if (!b->p[i]) abort();
      obj_write(b->p[i], done + i);
    }
    done += b->n;
    held_add(b->bytes);
    pthread_mutex_lock(&q.lock);
    q.full[(q.head + q.count++) % q.cap] = b;
    pthread_cond_broadcast(&q.changed);
    pthread_mutex_unlock(&q.lock);
  }
  w->done = done;
  pthread_mutex_lock(&q.lock);
  q.producers_left--;
  pthread_cond_broadcast(&q.changed);
  pthread_mutex_unlock(&q.lock);
  return NULL;
}

static void *consumer_main(void *arg) {
  worker_t *w = arg;
  pthread_barrier_wait(&run.start);
  for (;;) {
    pthread_mutex_lock(&q.lock);
    while (q.count == 0 && q.producers_left > 0) pthread_cond_wait(&q.changed, &q.lock);
    if (q.count == 0) {
      pthread_mutex_unlock(&q.lock);
      return NULL;
    }
    batch_t *b = q.full[q.head];
    q.head = (q.head + 1) % q.cap;
    q.count--;
    pthread_mutex_unlock(&q.lock);
    uint64_t bad = 0;
    for (uint64_t i = 0; i < b->n; i++) {
      if (run.variant == V_BURSTS) {
        bad += tagged_free(b->p[i]);
        continue;
      }
      bad += obj_check(b->p[i], b->first + i);
      free(b->p[i]);
    }
    held_add(-b->bytes);
    w->bad += bad;
    w->done += b->n;
    pthread_mutex_lock(&q.lock);
    q.spare[q.nspare++] = b;
    pthread_cond_broadcast(&q.changed);
    pthread_mutex_unlock(&q.lock);
  }
}

static void usage(void) {
  fprintf(stderr, "usage: threads --threads N --size BYTES --objects X [--variant malloc|global-mutex|"
                  "mutex-array|cross|storm|bursts|takeover|remote] [--batch 1000] [--rounds 400] "
                  "[--max-ms MS]\n");
  exit(2);
}

static bool queued(variant_t v) { return v == V_CROSS || v == V_BURSTS; }

/* The shapes that start all their threads once, behind a barrier; storm and takeover start
 * theirs round after round, and that is part of what they time. */
static uint64_t run_pooled(uint64_t nthreads, uint64_t objects, uint64_t max_ms, uint64_t *t0, uint64_t *bad) {
  static worker_t workers[MAX_THREADS]; /* static: aligned to its lines, unlike calloc's */
  uint64_t producers = queued(run.variant) ? nthreads / 2 : nthreads;
  if (queued(run.variant)) {
    q.cap = 2 * (size_t)nthreads; /* batches in flight: bounded, so memory stays bounded */
    q.full = calloc(q.cap, sizeof *q.full);
    q.spare = calloc(q.cap, sizeof *q.spare);
    for (size_t i = 0; i < q.cap; i++) q.spare[q.nspare++] = calloc(1, sizeof(batch_t));
    q.producers_left = (int)producers;
  }
  for (uint64_t i = 0; i < producers; i++)
    workers[i].objects = objects / producers + (i < objects % producers);
  pthread_barrier_init(&run.start, NULL, (unsigned)nthreads + 1);
  for (uint64_t i = 0; i < nthreads; i++) {
    workers[i].index = i;
    void *(*fn)(void *) = run.variant == V_REMOTE ? remote_main
                          : !queued(run.variant)  ? worker_main
                          : i < producers         ? producer_main
                                                  : consumer_main;
    if (pthread_create(&workers[i].tid, NULL, fn, &workers[i]) != 0) abort();
  }
  *t0 = lab_now_ns(); /* the set-up above (thread records, queue rings) is not timed */
  run.deadline_ns = max_ms ? *t0 + max_ms * 1000000ull : 0;
  pthread_barrier_wait(&run.start);
  for (uint64_t i = 0; i < nthreads; i++) pthread_join(workers[i].tid, NULL);
  uint64_t made = 0, freed = 0;
  for (uint64_t i = 0; i < nthreads; i++) {
    *bad += workers[i].bad;
    if (i < producers) made += workers[i].done;
    else freed += workers[i].done;
  }
  if (run.variant == V_REMOTE) /* what was mailed to a thread after its last look */
    for (uint64_t i = 0; i < nthreads; i++) *bad += drain(&mailboxes[i]);
  if (queued(run.variant) && freed != made) (*bad)++;
  return made;
}

int main(int argc, char **argv) {
  uint64_t nthreads = 1, objects = 1000000, rounds = 400, max_ms = 0;
  const char *vname = "malloc";
  run.size = 128;
  run.batch = 1000;
  static const struct option opts[] = {{"threads", required_argument, 0, 'n'},
                                       {"size", required_argument, 0, 's'},
                                       {"objects", required_argument, 0, 'x'},
                                       {"variant", required_argument, 0, 'v'},
                                       {"batch", required_argument, 0, 'b'},
                                       {"rounds", required_argument, 0, 'r'},
                                       {"max-ms", required_argument, 0, 'm'},
                                       {0, 0, 0, 0}};
  int ch;
  while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (ch) {
    case 'n': nthreads = lab_parse_size("--threads", optarg); break;
    case 's': run.size = lab_parse_size("--size", optarg); break;
    case 'x': objects = lab_parse_size("--objects", optarg); break;
    case 'v': vname = optarg; break;
    case 'b': run.batch = lab_parse_size("--batch", optarg); break;
    case 'r': rounds = lab_parse_size("--rounds", optarg); break;
    case 'm': max_ms = lab_parse_size("--max-ms", optarg); break;
    default: usage();
    }
  }
  size_t nvariants = sizeof variant_names / sizeof variant_names[0], v = 0;
  while (v < nvariants && strcmp(vname, variant_names[v]) != 0) v++;
  if (v == nvariants) usage();
  run.variant = (variant_t)v;
  run.threads = nthreads;
  if (nthreads == 0 || nthreads > MAX_THREADS || run.size < 16 || run.batch == 0 ||
      run.batch > MAX_BATCH || rounds == 0 || (queued(run.variant) && nthreads < 2) ||
      (run.variant >= V_STORM && run.size < TAG_MIN))
    usage();
  for (int i = 0; i < NHEAPS; i++) pthread_mutex_init(&heaps[i].lock, NULL);

  uint64_t bad = 0, done;
  uint64_t t0 = lab_now_ns();
  run.deadline_ns = max_ms ? t0 + max_ms * 1000000ull : 0;
  if (run.variant == V_STORM) done = run_storm(nthreads, objects, rounds, &bad);
  else if (run.variant == V_TAKEOVER) done = run_takeover(nthreads, objects, &bad);
  else done = run_pooled(nthreads, objects, max_ms, &t0, &bad);
  uint64_t t1 = lab_now_ns();
  printf("{\"threads\":%llu,\"size\":%llu,\"objects\":%llu,\"variant\":\"%s\",\"wall_ns\":%llu,"
         "\"done\":%llu,\"stopped\":%s,\"max_ms\":%llu,\"bad\":%llu,\"rss_end\":%llu,\"held_peak\":%lld}\n",
         (unsigned long long)nthreads, (unsigned long long)run.size, (unsigned long long)objects, vname,
         (unsigned long long)(t1 - t0), (unsigned long long)done, done < objects ? "true" : "false",
         (unsigned long long)max_ms, (unsigned long long)bad, (unsigned long long)lab_rss_bytes(),
         (long long)atomic_load(&held_peak));
  return bad ? 1 : 0;
}
