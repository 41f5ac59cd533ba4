/* pattern.c — a program whose allocations are known to the byte, for the ledger's exact-number
 * test: 1,000 blocks of 100 B live at exit, 10 blocks of 1 MiB allocated and freed, 3 blocks
 * of 40 B leaked. check_pattern.py compares the ledger JSON written at exit against it.
 *
 *   pattern single  DIR    the pattern on the main thread
 *   pattern threads DIR    the same pattern spread over 4 threads: the 1 MiB blocks are
 *                          allocated by one thread and freed by another
 *   pattern churn   DIR    threads, plus 2,000 blocks of 200 B allocated by one thread and
 *                          freed by another (small cross-thread frees), a known extra
 *
 * Into DIR it writes what the program itself saw: inside.json (fg_stats_json after the
 * pattern), get.json (fg_stats_get's numbers after the pattern), baseline.json (fg_stats_get
 * before the pattern: what libc allocated on its own, e.g. thread-local storage for new
 * threads) and expect.json (the usable sizes of the 1 MiB blocks). Nothing here may allocate
 * behind the pattern's back: no stdio streams, only snprintf into static buffers and write(2). */
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
  n += (size_t)snprintf(text + n, sizeof text - n, "{\"ledger\":%s,\"classes\":[", stats.ledger_on ? "true" : "false");
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
  n += (size_t)snprintf(text + n, sizeof text - n,
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

static void pattern_threads(pthread_t *threads) {
  pthread_barrier_init(&phase, NULL, THREADS + 1);
  for (int t = 0; t < THREADS; t++)
    if (pthread_create(&threads[t], NULL, worker, (void *)(intptr_t)t) != 0) die("pthread_create failed");
  pthread_barrier_wait(&phase);
}

int main(int argc, char **argv) {
  if (argc != 3) die("usage: pattern single|threads|churn DIR");
  dir = argv[2];
  bool threaded = strcmp(argv[1], "single") != 0;
  with_churn = strcmp(argv[1], "churn") == 0;
  if (threaded && !with_churn && strcmp(argv[1], "threads") != 0) die("unknown mode");

  pthread_t threads[THREADS];
  if (threaded) pattern_threads(threads); /* threads exist, parked before the pattern */
  write_get("baseline.json");
  if (threaded) {
    pthread_barrier_wait(&phase); /* go */
    pthread_barrier_wait(&phase); /* allocated */
    pthread_barrier_wait(&phase); /* freed across threads */
    for (int t = 0; t < THREADS; t++) pthread_join(threads[t], NULL);
  } else {
    pattern_single();
  }

  write_get("get.json");
  size_t need = fg_stats_json(text, sizeof text);
  if (need >= sizeof text) die("fg_stats_json: the ledger does not fit the buffer");
  write_file("inside.json", text, need);

  size_t n = (size_t)snprintf(text, sizeof text, "{\"mode\":\"%s\",\"pid\":%d,\"large_usable\":[", argv[1],
                              (int)getpid());
  for (int i = 0; i < LARGE_COUNT; i++)
    n += (size_t)snprintf(text + n, sizeof text - n, "%s%zu", i ? "," : "", large_usable[i]);
  n += (size_t)snprintf(text + n, sizeof text - n, "]}\n");
  write_file("expect.json", text, n);
  return 0; /* the 100 B and 40 B blocks stay live: the ledger file is written after this */
}
