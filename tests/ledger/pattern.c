/* pattern.c — a program whose allocations are known to the byte, for the ledger's exact-number
 * test: 1,000 blocks of 100 B live at exit, 10 blocks of 1 MiB allocated and freed, 3 blocks
 * of 40 B leaked. check_pattern.py compares the ledger JSON written at exit against it.
 *
 *   pattern single   DIR   the pattern on the main thread
 *   pattern threads  DIR   the same pattern spread over 4 threads: the 1 MiB blocks are
 *                          allocated by one thread and freed by another
 *   pattern churn    DIR   threads, plus 2,000 blocks of 200 B allocated by one thread and
 *                          freed by another (small cross-thread frees), a known extra
 *   pattern mixed    DIR   every entry point (malloc, calloc, realloc, the aligned forms,
 *                          malloc(0), large blocks), a size of its own each; a third of each
 *                          kind freed. ctest runs it plain, under FRUGAL_SECURE and under
 *                          FRUGAL_LEAKS: the ledger takes another path in each
 *   pattern xthread  DIR   the mixed kinds allocated by one thread, all freed by others: half
 *                          while the owner lives, half after it exited
 *   pattern edge     DIR   10 large blocks of 512 KiB + 1 and 576 KiB, just past the largest
 *                          class, in the bucket whose index is the large row's + 1; half freed
 *   pattern timeline DIR   100 blocks of 64 B live, then malloc/free pairs of 64 B for 400 ms,
 *                          which never leave the inline fast path: the timeline
 *                          (FRUGAL_STATS_INTERVAL_MS) must still be sampled all along
 *
 * Into DIR it writes what the program itself saw: inside.json (fg_stats_json after the
 * pattern), get.json (fg_stats_get's numbers after the pattern), baseline.json (fg_stats_get
 * before the pattern: what libc allocated on its own, e.g. thread-local storage for new
 * threads, or dlopen loading libunwind for FRUGAL_LEAKS) and expect.json (the usable sizes of
 * the large blocks, the mixed kinds as made and freed, the timeline's pair count). Nothing
 * here may allocate behind the pattern's back: no stdio streams, only snprintf into static
 * buffers and write(2). */
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "frugal-stats.h"
#include "frugal.h"

#define SMALL_COUNT 1000
#define SMALL_SIZE 100
#define LARGE_COUNT 10
#define LARGE_SIZE (1u << 20)
#define LEAK_COUNT 3
#define LEAK_SIZE 40
#define CHURN_COUNT 2000
#define CHURN_SIZE 200
#define THREADS 4

static void *small[SMALL_COUNT];
static void *leaked[LEAK_COUNT];
static void *large[LARGE_COUNT];
static size_t large_usable[LARGE_COUNT];
static void *churn[CHURN_COUNT];
static fg_stats_t stats; /* ~12 KiB: not on a thread's stack */
static char text[1 << 20];
static const char *dir;

static void die(const char *what) {
  write(2, "pattern: ", 9);
  write(2, what, strlen(what));
  write(2, "\n", 1);
  exit(2);
}

static void write_file(const char *name, const char *data, size_t len) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) die("cannot open an output file");
  while (len > 0) {
    ssize_t n = write(fd, data, len);
    if (n <= 0) die("cannot write an output file");
    data += n;
    len -= (size_t)n;
  }
  close(fd);
}

/* fg_stats_get's numbers as JSON: totals, live and the rows with traffic, named like the
 * ledger file's own keys so the checker compares them field by field. */
static void write_get(const char *name) {
  fg_stats_get(&stats);
  size_t n = 0;
  uint64_t allocs = 0, frees = 0, req = 0, handed = 0, live_req = 0, live_handed = 0;
  n += (size_t)snprintf(text + n, sizeof text - n, "{\"ledger\":%s,\"classes\":[",
                        stats.ledger_on ? "true" : "false");
  bool first = true;
  for (size_t r = 0; r < FG_STATS_CLASSES; r++) {
    const fg_stats_class_t *c = &stats.classes[r];
    allocs += c->allocations;
    frees += c->frees;
    req += c->bytes_requested;
    handed += c->bytes_handed_out;
    live_req += c->bytes_requested - c->freed_requested;
    live_handed += c->bytes_handed_out - c->freed_handed_out;
    if (c->allocations == 0 && c->frees == 0) continue;
    n += (size_t)snprintf(text + n, sizeof text - n,
                          "%s{\"class\":%zu,\"block_size\":%lu,\"allocations\":%lu,\"frees\":%lu,"
                          "\"bytes_requested\":%lu,\"bytes_handed_out\":%lu,\"freed_requested\":%lu,"
                          "\"freed_handed_out\":%lu}",
                          first ? "" : ",", r, (unsigned long)c->block_size, (unsigned long)c->allocations,
                          (unsigned long)c->frees, (unsigned long)c->bytes_requested,
                          (unsigned long)c->bytes_handed_out, (unsigned long)c->freed_requested,
                          (unsigned long)c->freed_handed_out);
    first = false;
  }
  /* The raw buckets, bounds from fg_stats_bucket_lo: the checker holds both to the schema. */
  n += (size_t)snprintf(text + n, sizeof text - n, "],\"histogram\":[");
  first = true;
  for (size_t b = 0; b < FG_STATS_HIST_BUCKETS; b++) {
    if (stats.histogram[b] == 0) continue;
    n += (size_t)snprintf(text + n, sizeof text - n, "%s{\"bucket\":%zu,\"lo\":%zu,\"count\":%lu}",
                          first ? "" : ",", b, fg_stats_bucket_lo(b), (unsigned long)stats.histogram[b]);
    first = false;
  }
  n += (size_t)snprintf(
      text + n, sizeof text - n,
      "],\"totals\":{\"allocations\":%lu,\"frees\":%lu,\"bytes_requested\":%lu,"
      "\"bytes_handed_out\":%lu},\"live\":{\"bytes_requested\":%lu,\"bytes_handed_out\":%lu}}\n",
      (unsigned long)allocs, (unsigned long)frees, (unsigned long)req, (unsigned long)handed,
      (unsigned long)live_req, (unsigned long)live_handed);
  if (n >= sizeof text) die("get.json does not fit");
  write_file(name, text, n);
}

/* ---- the pattern, on one thread ----------------------------------------------------------- */

static void pattern_single(void) {
  for (int i = 0; i < SMALL_COUNT; i++)
    if ((small[i] = malloc(SMALL_SIZE)) == NULL) die("malloc(100) failed");
  for (int i = 0; i < LARGE_COUNT; i++) {
    if ((large[i] = malloc(LARGE_SIZE)) == NULL) die("malloc(1 MiB) failed");
    large_usable[i] = fg_usable_size(large[i]);
    memset(large[i], i, 4096);
    free(large[i]);
  }
  for (int i = 0; i < LEAK_COUNT; i++)
    if ((leaked[i] = malloc(LEAK_SIZE)) == NULL) die("malloc(40) failed");
}

/* ---- the same pattern over threads --------------------------------------------------------- */

static pthread_barrier_t phase;
static bool with_churn;

/* Thread t allocates its quarter of the 100 B blocks. Thread 0 allocates every 1 MiB block and
 * thread 1 frees them; thread 2 leaks the 40 B blocks; with churn, thread 3 allocates the 200 B
 * blocks and thread 0 frees them. Barriers order each hand-over. */
static void *worker(void *arg) {
  int t = (int)(intptr_t)arg;
  pthread_barrier_wait(&phase); /* every thread exists before the baseline is read */
  pthread_barrier_wait(&phase); /* baseline read */
  for (int i = t; i < SMALL_COUNT; i += THREADS)
    if ((small[i] = malloc(SMALL_SIZE)) == NULL) die("malloc(100) failed");
  if (t == 0)
    for (int i = 0; i < LARGE_COUNT; i++) {
      if ((large[i] = malloc(LARGE_SIZE)) == NULL) die("malloc(1 MiB) failed");
      large_usable[i] = fg_usable_size(large[i]);
      memset(large[i], i, 4096);
    }
  if (t == 2)
    for (int i = 0; i < LEAK_COUNT; i++)
      if ((leaked[i] = malloc(LEAK_SIZE)) == NULL) die("malloc(40) failed");
  if (t == 3 && with_churn)
    for (int i = 0; i < CHURN_COUNT; i++)
      if ((churn[i] = malloc(CHURN_SIZE)) == NULL) die("malloc(200) failed");
  pthread_barrier_wait(&phase);
  if (t == 1)
    for (int i = 0; i < LARGE_COUNT; i++) free(large[i]);
  if (t == 0 && with_churn)
    for (int i = 0; i < CHURN_COUNT; i++) free(churn[i]);
  pthread_barrier_wait(&phase);
  return NULL;
}

static pthread_t threads[THREADS];

/* The threads exist, parked, before the baseline is read. */
static void threads_start(void) {
  pthread_barrier_init(&phase, NULL, THREADS + 1);
  for (int t = 0; t < THREADS; t++)
    if (pthread_create(&threads[t], NULL, worker, (void *)(intptr_t)t) != 0) die("pthread_create failed");
  pthread_barrier_wait(&phase);
}

static void churn_start(void) {
  with_churn = true;
  threads_start();
}

static void threads_run(void) {
  pthread_barrier_wait(&phase); /* go */
  pthread_barrier_wait(&phase); /* allocated */
  pthread_barrier_wait(&phase); /* freed across threads */
  for (int t = 0; t < THREADS; t++) pthread_join(threads[t], NULL);
}

/* ---- every entry point, mixed ------------------------------------------------------------- */

/* One kind per way into the ledger, each with a size in a histogram bucket of its own: the
 * inline fast path (malloc up to 1 KiB), the hooks (malloc(0), malloc above 1 KiB, calloc,
 * realloc, the aligned forms, large blocks), and requests whose bucket is not their block's
 * class + 1 (malloc(0), the aligned forms; malloc(128) and realloc(NULL, 16) too under
 * FRUGAL_SECURE, whose canary byte moves them up a class), which the ledger keeps as a
 * correction. check_pattern.py knows each kind's block size by its name. */
typedef enum { MALLOC, CALLOC, REALLOC, ALIGNED_ALLOC, POSIX_MEMALIGN, MEMALIGN } call_t;

typedef struct kind_s {
  call_t call;
  size_t align; /* the aligned forms */
  size_t from;  /* realloc: the block malloc'd first is this size (0: realloc(NULL, size)) */
  size_t size;  /* calloc: size / 10 elements of 10 B */
  int count;
} kind_t;

#define KIND_COUNT 100
#define KIND_LARGE_COUNT 6 /* 1 MiB blocks are mapped one by one: a few suffice */

static const kind_t kinds[] = {
    {MALLOC, 0, 0, 0, KIND_COUNT},
    {MALLOC, 0, 0, 100, KIND_COUNT},
    {MALLOC, 0, 0, 128, KIND_COUNT},
    {MALLOC, 0, 0, 5000, KIND_COUNT},
    {CALLOC, 0, 0, 90, KIND_COUNT},
    {REALLOC, 0, 0, 16, KIND_COUNT},
    {REALLOC, 0, 50, 300, KIND_COUNT},
    {ALIGNED_ALLOC, 64, 0, 72, KIND_COUNT},
    {ALIGNED_ALLOC, 4096, 0, 200, KIND_COUNT},
    {POSIX_MEMALIGN, 256, 0, 40, KIND_COUNT},
    {MEMALIGN, 128, 0, 24, KIND_COUNT},
    {MALLOC, 0, 0, 1 << 20, KIND_LARGE_COUNT},
};
#define KINDS (sizeof kinds / sizeof *kinds)

static void *kind_blocks[KINDS][KIND_COUNT];
static int kind_freed[KINDS];
/* fg_usable_size summed over a kind's blocks, and over those freed: what the large row hands
 * out (under FRUGAL_SECURE it answers the request instead, and the checker bounds the row). */
static size_t kind_usable[KINDS], kind_usable_freed[KINDS];
static bool kinds_made; /* expect.json lists the kinds only when they were made */

static void *kind_alloc(const kind_t *k) {
  void *p = NULL;
  switch (k->call) {
    case MALLOC:
      return malloc(k->size);
    case CALLOC:
      return calloc(k->size / 10, 10);
    case REALLOC:
      if (k->from != 0 && (p = malloc(k->from)) == NULL) return NULL;
      return realloc(p, k->size);
    case ALIGNED_ALLOC:
      return aligned_alloc(k->align, k->size);
    case POSIX_MEMALIGN:
      return posix_memalign(&p, k->align, k->size) == 0 ? p : NULL;
    case MEMALIGN:
      return memalign(k->align, k->size);
  }
  return NULL;
}

/* The kind as check_pattern.py names it, e.g. "aligned_alloc(64, 72)". */
static void kind_name(const kind_t *k, char *out, size_t size) {
  switch (k->call) {
    case MALLOC:
      snprintf(out, size, "malloc(%zu)", k->size);
      break;
    case CALLOC:
      snprintf(out, size, "calloc(%zu, 10)", k->size / 10);
      break;
    case REALLOC:
      if (k->from == 0)
        snprintf(out, size, "realloc(NULL, %zu)", k->size);
      else
        snprintf(out, size, "realloc(malloc(%zu), %zu)", k->from, k->size);
      break;
    case ALIGNED_ALLOC:
      snprintf(out, size, "aligned_alloc(%zu, %zu)", k->align, k->size);
      break;
    case POSIX_MEMALIGN:
      snprintf(out, size, "posix_memalign(%zu, %zu)", k->align, k->size);
      break;
    case MEMALIGN:
      snprintf(out, size, "memalign(%zu, %zu)", k->align, k->size);
      break;
  }
}

/* Kinds interleaved, one block of each in turn, so no class's blocks sit alone in a run. */
static void kinds_alloc(void) {
  kinds_made = true;
  for (int i = 0; i < KIND_COUNT; i++)
    for (size_t k = 0; k < KINDS; k++) {
      if (i >= kinds[k].count) continue;
      void *p = kind_alloc(&kinds[k]);
      size_t align = kinds[k].align != 0 ? kinds[k].align : 8;
      if (p == NULL || (uintptr_t)p % align != 0) die("a mixed allocation failed or is misaligned");
      kind_blocks[k][i] = p;
      kind_usable[k] += fg_usable_size(p);
    }
}

/* Free part `part` of `parts` equal parts of each kind's blocks. */
static void kinds_free(int part, int parts) {
  for (size_t k = 0; k < KINDS; k++)
    for (int i = kinds[k].count * part / parts; i < kinds[k].count * (part + 1) / parts; i++) {
      kind_usable_freed[k] += fg_usable_size(kind_blocks[k][i]);
      free(kind_blocks[k][i]);
      kind_freed[k]++;
    }
}

/* A third of each kind freed by its owner; the rest stays live to the end. */
static void pattern_mixed(void) {
  kinds_alloc();
  kinds_free(0, 3);
}

/* ---- the mixed kinds across threads ------------------------------------------------------- */

static pthread_barrier_t handover; /* main, owner and freer */
static pthread_t owner, freer;

/* The owner allocates every kind, then exits while half of its blocks are still live. */
static void *xthread_owner(void *arg) {
  (void)arg;
  pthread_barrier_wait(&handover); /* every thread exists before the baseline is read */
  pthread_barrier_wait(&handover); /* baseline read */
  kinds_alloc();
  pthread_barrier_wait(&handover); /* allocated */
  pthread_barrier_wait(&handover); /* first half freed */
  return NULL;
}

/* The freer allocates nothing itself: its frees go the remote way into pages of a live owner,
 * and count in the ledger kept for threads that have no heap. */
static void *xthread_freer(void *arg) {
  (void)arg;
  pthread_barrier_wait(&handover);
  pthread_barrier_wait(&handover);
  pthread_barrier_wait(&handover);
  kinds_free(0, 2);
  pthread_barrier_wait(&handover);
  return NULL;
}

static void xthread_start(void) {
  pthread_barrier_init(&handover, NULL, 3);
  if (pthread_create(&owner, NULL, xthread_owner, NULL) != 0 ||
      pthread_create(&freer, NULL, xthread_freer, NULL) != 0)
    die("pthread_create failed");
  pthread_barrier_wait(&handover);
}

/* The second half is freed by the main thread after the owner exited: into pages of an
 * abandoned heap. */
static void xthread_run(void) {
  pthread_barrier_wait(&handover); /* go */
  pthread_barrier_wait(&handover); /* allocated */
  pthread_barrier_wait(&handover); /* first half freed */
  pthread_join(owner, NULL);
  pthread_join(freer, NULL);
  kinds_free(1, 2);
}

/* ---- the timeline, sampled from a loop on the inline fast path ---------------------------- */

#define TIMELINE_LIVE 100
#define TIMELINE_SIZE 64
#define TIMELINE_MS 400 /* 20 periods of the 20 ms ctest asks for */

static void *timeline_live[TIMELINE_LIVE];
static uint64_t timeline_pairs;

/* The loop's own CPU time, not the wall clock: on a loaded machine (ctest -j2 beside the stress
 * test) the thread sat out 300 ms of its 400 and the timeline had 6 samples where the check
 * wants 8. Counted in CPU time, the loop runs its 20 periods whatever the wait between. */
static uint64_t cpu_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return (uint64_t)t.tv_sec * 1000 + (uint64_t)t.tv_nsec / 1000000;
}

/* The live blocks keep their page in use, so each pair pops from and pushes to the page the
 * direct table points at: only the inline ledger count runs, and it alone must tick the
 * sampler. A large block freed first stays in the large cache for the decay time (1 s, more
 * than the loop): every sample must count it as held. */
#define TIMELINE_CACHED ((size_t)1 << 20)
static void pattern_timeline(void) {
  char *cached = malloc(TIMELINE_CACHED);
  if (cached == NULL) die("malloc(1 MiB) failed");
  memset(cached, 1, TIMELINE_CACHED);
  large_usable[0] = fg_usable_size(cached); /* the checker's expected large row */
  free(cached);
  for (int i = 0; i < TIMELINE_LIVE; i++)
    if ((timeline_live[i] = malloc(TIMELINE_SIZE)) == NULL) die("malloc(64) failed");
  uint64_t end = cpu_ms() + TIMELINE_MS;
  do {
    for (int i = 0; i < 1024; i++) {
      void *p = malloc(TIMELINE_SIZE);
      if (p == NULL) die("malloc(64) failed");
      free(p);
    }
    timeline_pairs += 1024;
  } while (cpu_ms() < end);
}

/* ---- just past the largest class ---------------------------------------------------------- */

/* Large blocks whose histogram bucket (512 KiB + 1 to 576 KiB) has the large row's index + 1,
 * as a class's own bucket has the class's: a class's count there is derived on merging, but a
 * large row's must still be stored. Half of them freed. */
#define EDGE_LO ((512u << 10) + 1)
#define EDGE_HI (576u << 10)

static void pattern_edge(void) {
  for (int i = 0; i < LARGE_COUNT; i++) {
    if ((large[i] = malloc(i % 2 ? EDGE_HI : EDGE_LO)) == NULL) die("malloc(512 KiB + 1) failed");
    large_usable[i] = fg_usable_size(large[i]);
  }
  for (int i = 0; i < LARGE_COUNT / 2; i++) free(large[i]);
}

/* ---- what the checker needs besides the ledger -------------------------------------------- */

static void write_expect(const char *mode) {
  size_t n =
      (size_t)snprintf(text, sizeof text, "{\"mode\":\"%s\",\"pid\":%d,\"secure\":%s,\"large_usable\":[",
                       mode, (int)getpid(), fg_option_get(FG_OPTION_SECURE) ? "true" : "false");
  for (int i = 0; i < LARGE_COUNT; i++)
    n += (size_t)snprintf(text + n, sizeof text - n, "%s%zu", i ? "," : "", large_usable[i]);
  n += (size_t)snprintf(text + n, sizeof text - n, "],\"pairs\":%lu,\"kinds\":[",
                        (unsigned long)timeline_pairs);
  for (size_t k = 0; kinds_made && k < KINDS; k++) {
    char name[64];
    kind_name(&kinds[k], name, sizeof name);
    n += (size_t)snprintf(
        text + n, sizeof text - n,
        "%s{\"name\":\"%s\",\"size\":%zu,\"from\":%zu,\"count\":%d,\"freed\":%d,\"usable\":%zu,"
        "\"usable_freed\":%zu}",
        k ? "," : "", name, kinds[k].size, kinds[k].from, kinds[k].count, kind_freed[k], kind_usable[k],
        kind_usable_freed[k]);
  }
  n += (size_t)snprintf(text + n, sizeof text - n, "]}\n");
  if (n >= sizeof text) die("expect.json does not fit");
  write_file("expect.json", text, n);
}

typedef struct pattern_mode_s {
  const char *name;
  void (*start)(void); /* before the baseline: the threads it must already count */
  void (*run)(void);
} pattern_mode_t;

static const pattern_mode_t modes[] = {
    {"single", NULL, pattern_single},
    {"threads", threads_start, threads_run},
    {"churn", churn_start, threads_run},
    {"mixed", NULL, pattern_mixed},
    {"xthread", xthread_start, xthread_run},
    {"timeline", NULL, pattern_timeline},
    {"edge", NULL, pattern_edge},
};

int main(int argc, char **argv) {
  if (argc != 3) die("usage: pattern single|threads|churn|mixed|xthread|timeline|edge DIR");
  dir = argv[2];
  const pattern_mode_t *mode = NULL;
  for (size_t i = 0; i < sizeof modes / sizeof *modes; i++)
    if (strcmp(argv[1], modes[i].name) == 0) mode = &modes[i];
  if (mode == NULL) die("unknown mode");

  /* The first stack FRUGAL_LEAKS captures in a thread makes glibc allocate libunwind's
   * thread-local block (16 B, which the ledger counts): before the baseline, not in the pattern. */
  if (fg_option_get(FG_OPTION_LEAKS)) free(malloc(1));
  if (mode->start != NULL) mode->start();
  write_get("baseline.json");
  mode->run();

  write_get("get.json");
  size_t need = fg_stats_json(text, sizeof text);
  if (need >= sizeof text) die("fg_stats_json: the ledger does not fit the buffer");
  write_file("inside.json", text, need);
  write_expect(argv[1]);
  return 0; /* live blocks stay live: the ledger file is written after this */
}
