/* threads — seed 4 ("thread caching vs a global heap"), LAB.md experiment 4.
 * N threads share the work of creating X objects of size S: each allocates a batch of 1,000,
 * writes them, frees them, and repeats. Over the allocator under test it can put the seed's
 * own designs: `global-mutex` (one lock around malloc/free, the "X allocator") and
 * `mutex-array` (a lock-protected heap per thread id, the "pooled X allocator"); and a
 * `cross` variant where producers allocate and consumers free (seed 2's concurrent queue). */
#include <getopt.h>
#include <pthread.h>
#include <sys/syscall.h>

#include "lab.h"

#define MAX_THREADS 1024
#define MAX_BATCH 4096
/* The pooled X allocator's array: 64 heaps indexed by thread id, as the seed describes. */
#define NHEAPS 64

typedef enum { V_MALLOC, V_GLOBAL_MUTEX, V_MUTEX_ARRAY, V_CROSS } variant_t;

typedef struct {
  variant_t variant;
  uint64_t size;
  uint64_t batch;
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
  uint64_t bad;
  pthread_t tid;
} __attribute__((aligned(64))) worker_t;

static void *worker_main(void *arg) {
  worker_t *w = arg;
  void *batch[MAX_BATCH];
  pthread_barrier_wait(&run.start);
  pool_heap_t *h = run.variant == V_MUTEX_ARRAY ? my_heap() : NULL;
  uint64_t bad = 0;
  for (uint64_t done = 0; done < w->objects;) {
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
  w->bad = bad;
  return NULL;
}

/* ---- cross-thread: a bounded queue of batches from producers to consumers ---- */
typedef struct {
  uint64_t n;
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
  pthread_barrier_wait(&run.start);
  for (uint64_t done = 0; done < w->objects;) {
    pthread_mutex_lock(&q.lock);
    while (q.nspare == 0) pthread_cond_wait(&q.changed, &q.lock);
    batch_t *b = q.spare[--q.nspare];
    pthread_mutex_unlock(&q.lock);
    b->n = w->objects - done < run.batch ? w->objects - done : run.batch;
    b->first = done;
    for (uint64_t i = 0; i < b->n; i++) {
      b->p[i] = malloc(run.size);
      if (!b->p[i]) abort();
      obj_write(b->p[i], done + i);
    }
    done += b->n;
    pthread_mutex_lock(&q.lock);
    q.full[(q.head + q.count++) % q.cap] = b;
    pthread_cond_broadcast(&q.changed);
    pthread_mutex_unlock(&q.lock);
  }
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
      bad += obj_check(b->p[i], b->first + i);
      free(b->p[i]);
    }
    w->bad += bad;
    w->objects += b->n;
    pthread_mutex_lock(&q.lock);
    q.spare[q.nspare++] = b;
    pthread_cond_broadcast(&q.changed);
    pthread_mutex_unlock(&q.lock);
  }
}

static void usage(void) {
  fprintf(stderr, "usage: threads --threads N --size BYTES --objects X "
                  "[--variant malloc|global-mutex|mutex-array|cross] [--batch 1000]\n");
  exit(2);
}

int main(int argc, char **argv) {
  uint64_t nthreads = 1, objects = 1000000;
  const char *vname = "malloc";
  run.size = 128;
  run.batch = 1000;
  static const struct option opts[] = {{"threads", required_argument, 0, 'n'},
                                       {"size", required_argument, 0, 's'},
                                       {"objects", required_argument, 0, 'x'},
                                       {"variant", required_argument, 0, 'v'},
                                       {"batch", required_argument, 0, 'b'},
                                       {0, 0, 0, 0}};
  int ch;
  while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (ch) {
    case 'n': nthreads = lab_parse_size("--threads", optarg); break;
    case 's': run.size = lab_parse_size("--size", optarg); break;
    case 'x': objects = lab_parse_size("--objects", optarg); break;
    case 'v': vname = optarg; break;
    case 'b': run.batch = lab_parse_size("--batch", optarg); break;
    default: usage();
    }
  }
  if (strcmp(vname, "malloc") == 0) run.variant = V_MALLOC;
  else if (strcmp(vname, "global-mutex") == 0) run.variant = V_GLOBAL_MUTEX;
  else if (strcmp(vname, "mutex-array") == 0) run.variant = V_MUTEX_ARRAY;
  else if (strcmp(vname, "cross") == 0) run.variant = V_CROSS;
  else usage();
  if (nthreads == 0 || nthreads > MAX_THREADS || run.size < 16 || run.batch == 0 ||
      run.batch > MAX_BATCH || (run.variant == V_CROSS && nthreads < 2))
    usage();
  for (int i = 0; i < NHEAPS; i++) pthread_mutex_init(&heaps[i].lock, NULL);

  /* Set-up allocations (thread records, queue rings) happen before the clock starts. */
  static worker_t workers[MAX_THREADS]; /* static: aligned to its lines, unlike calloc's */
  uint64_t producers = run.variant == V_CROSS ? nthreads / 2 : nthreads;
  if (run.variant == V_CROSS) {
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
    void *(*fn)(void *) = run.variant != V_CROSS ? worker_main
                          : i < producers        ? producer_main
                                                 : consumer_main;
    if (pthread_create(&workers[i].tid, NULL, fn, &workers[i]) != 0) {
      perror("pthread_create");
      return 1;
    }
  }
  pthread_barrier_wait(&run.start);
  uint64_t t0 = lab_now_ns();
  for (uint64_t i = 0; i < nthreads; i++) pthread_join(workers[i].tid, NULL);
  uint64_t t1 = lab_now_ns();

  uint64_t bad = 0, freed = 0;
  for (uint64_t i = 0; i < nthreads; i++) {
    bad += workers[i].bad;
    if (i >= producers) freed += workers[i].objects;
  }
  if (run.variant == V_CROSS && freed != objects) bad++;
  printf("{\"threads\":%llu,\"size\":%llu,\"objects\":%llu,\"variant\":\"%s\",\"wall_ns\":%llu,"
         "\"bad\":%llu,\"rss_end\":%llu}\n",
         (unsigned long long)nthreads, (unsigned long long)run.size,
         (unsigned long long)objects, vname, (unsigned long long)(t1 - t0),
         (unsigned long long)bad, (unsigned long long)lab_rss_bytes());
  return bad ? 1 : 0;
}
