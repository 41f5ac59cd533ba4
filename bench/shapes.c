/* shapes — program shapes where other allocators were found faster than frugal, each written
 * from a description of the program's allocations (docs/lab.md, "shapes"): `--shape NAME` picks
 * one, the options size it, and it prints one JSON record of the work done and the time taken.
 * Shapes that run for a fixed time (--ms) count their work; the others time a fixed amount. */
#include <getopt.h>
#include <pthread.h>
#include <stdatomic.h>

#include "lab.h"

#define MAX_THREADS 256

/* What a run is asked for: the shape's table row below, then the options over it. */
typedef struct {
  uint64_t work;    /* fixed-work shapes: rounds, steps or nodes, in the shape's unit */
  uint64_t ms;      /* fixed-time shapes: how long the threads run */
  uint64_t threads; /* threads working at once */
  uint64_t min_size, max_size;
  uint64_t slots;   /* blocks each thread holds (working-set, server) */
  uint64_t gen_ops; /* server: the replacements one generation of threads makes */
  uint64_t depth;   /* trees: the deepest tree a thread builds */
} params_t;

static params_t P;

/* One per cache line: neighbours' counters on one line would cost every write a miss on the
 * others' (false sharing), a cost of the harness rather than of the allocator. */
typedef struct {
  uint64_t index, done, bad;
  pthread_t tid;
} __attribute__((aligned(64))) worker_t;

static worker_t workers[MAX_THREADS];
static pthread_barrier_t start;
static _Atomic(int) stop; /* fixed-time shapes: set when the time is up */

static inline bool stopped(void) { return atomic_load_explicit(&stop, memory_order_relaxed); }

/* A size from min to max, uniform. */
static inline size_t uniform_size(uint64_t *s) {
  return P.min_size + lab_rnd_next(s) % (P.max_size - P.min_size + 1);
}

/* ---- blocks that say when they were written over ----
 * Each block's first and last bytes hold a mark derived from its size, kept beside it; a block
 * whose marks changed before its free (the allocator's own data written into it, or a block of
 * another size handed out over it) counts as bad, and the run then exits 1. */
typedef struct {
  unsigned char *p;
  uint64_t size;
} held_t;

static inline unsigned char mark_of(uint64_t n) { return (unsigned char)(n * 0x9Du + 0x3Bu); }

static inline bool marks_ok(const unsigned char *p, uint64_t n) {
  return p[0] == mark_of(n) && p[n - 1] == mark_of(n);
}

/* `fill`: every byte written, as a program filling its structures does; else the two marks
 * only, so that the cost measured is the allocator's rather than memory bandwidth. */
static inline void held_new(held_t *h, uint64_t n, bool fill) {
  h->p = malloc(n);
  if (!h->p) abort();
  h->size = n;
  if (fill) memset(h->p, mark_of(n), n);
  else h->p[0] = h->p[n - 1] = mark_of(n);
}

static inline uint64_t held_drop(held_t *h) {
  uint64_t bad = !marks_ok(h->p, h->size);
  free(h->p);
  h->p = NULL;
  return bad;
}

/* Starts n threads on fn, each given its worker_t, releases them together behind a barrier
 * (their set-up is not timed) and returns how long they worked: until the last one ended, or,
 * with --ms, until they were told to stop (the little they do after it is not counted). */
static uint64_t run_team(void *(*fn)(void *), uint64_t n) {
  pthread_barrier_init(&start, NULL, (unsigned)n + 1);
  for (uint64_t i = 0; i < n; i++) {
    workers[i].index = i;
    if (pthread_create(&workers[i].tid, NULL, fn, &workers[i]) != 0) abort();
  }
  pthread_barrier_wait(&start);
  uint64_t t0 = lab_now_ns(), t1 = 0;
  if (P.ms) {
    struct timespec left = {(time_t)(P.ms / 1000), (long)(P.ms % 1000) * 1000000L};
    while (nanosleep(&left, &left) != 0 && errno == EINTR) {
    }
    atomic_store(&stop, 1);
    t1 = lab_now_ns();
  }
  for (uint64_t i = 0; i < n; i++) pthread_join(workers[i].tid, NULL);
  pthread_barrier_destroy(&start);
  return (P.ms ? t1 : lab_now_ns()) - t0;
}

static void team_totals(uint64_t n, uint64_t *done, uint64_t *bad) {
  for (uint64_t i = 0; i < n; i++) {
    *done += workers[i].done;
    *bad += workers[i].bad;
  }
}

/* ---- fill-drain: N blocks of one size allocated and filled, the first half freed in order,
 * the second in reverse; N cycles through FILL_COUNTS round by round, the size is drawn per
 * round. Half the rounds run in the main thread, then the other half in a second thread,
 * which starts on an allocator the main thread has warmed. ---- */
static const uint64_t FILL_COUNTS[] = {25, 100, 400, 1600};
#define FILL_KINDS (sizeof FILL_COUNTS / sizeof FILL_COUNTS[0])
#define FILL_MAX 1600

static uint64_t fill_round(held_t *blocks, uint64_t n, uint64_t size) {
  uint64_t bad = 0;
  for (uint64_t i = 0; i < n; i++) held_new(&blocks[i], size, true);
  for (uint64_t i = 0; i < n / 2; i++) bad += held_drop(&blocks[i]);
  for (uint64_t i = n; i-- > n / 2;) bad += held_drop(&blocks[i]);
  return bad;
}

/* Both threads draw the same sizes: the second does what the first did. */
static void fill_rounds(worker_t *w, uint64_t rounds) {
  held_t blocks[FILL_MAX];
  uint64_t s = lab_rnd_seed(0, 1);
  for (uint64_t r = 0; r < rounds; r++) w->bad += fill_round(blocks, FILL_COUNTS[r % FILL_KINDS], uniform_size(&s));
  w->done = rounds;
}

static void *fill_second(void *arg) {
  pthread_barrier_wait(&start);
  fill_rounds(arg, P.work / 2);
  return NULL;
}

/* The record's extra fields: each thread's part of the time. */
static char extra[128];

static uint64_t run_fill_drain(uint64_t *done, uint64_t *bad) {
  worker_t first_part = {0};
  uint64_t t0 = lab_now_ns();
  fill_rounds(&first_part, P.work - P.work / 2);
  uint64_t first = lab_now_ns() - t0, second = run_team(fill_second, 1);
  team_totals(1, done, bad);
  *done += first_part.done;
  *bad += first_part.bad;
  snprintf(extra, sizeof extra, ",\"first_ns\":%llu,\"second_ns\":%llu", (unsigned long long)first,
           (unsigned long long)second);
  return first + second;
}

/* ---- minimizer: one thread, small structures (8-200 B, most small) with mixed lifetimes, as
 * a logic minimizer's sets and cubes. Each step allocates one to three temporaries, replaces
 * one block held in a slot (one time in REALLOC_EVERY by resizing it, as a set grows), and
 * frees the temporaries, newest first. The slot is picked from three tiers whose sizes and
 * shares of the picks set the lifetimes: a hot block lives about 20 steps, a warm one about
 * 1,000, a cold one about 80,000. ---- */
#define REALLOC_EVERY 16
#define TEMPS_MAX 3

typedef struct {
  held_t *slots;
  uint64_t count;
  uint64_t share; /* of 100 picks */
} tier_t;

static held_t hot[16], warm[256], cold[4096];
static tier_t tiers[] = {{hot, 16, 70}, {warm, 256, 25}, {cold, 4096, 5}};

/* Skewed to small sizes (the smaller of two uniform draws), as a minimizer's structures are. */
static inline size_t small_size(uint64_t *s) {
  uint64_t a = lab_rnd_next(s), b = lab_rnd_next(s), span = P.max_size - P.min_size + 1;
  return P.min_size + (a % span < b % span ? a % span : b % span);
}

static held_t *pick_slot(uint64_t *s) {
  uint64_t r = lab_rnd_next(s) % 100;
  tier_t *t = tiers;
  while (r >= t->share) r -= (t++)->share;
  return &t->slots[lab_rnd_next(s) % t->count];
}

/* Resizing keeps the old content: its first byte must still be the old mark. */
static uint64_t resize(held_t *h, uint64_t n) {
  uint64_t bad = h->p[0] != mark_of(h->size);
  h->p = realloc(h->p, n);
  if (!h->p) abort();
  h->size = n;
  memset(h->p, mark_of(n), n);
  return bad;
}

static uint64_t replace(held_t *h, uint64_t *s) {
  uint64_t n = small_size(s), bad = 0;
  if (h->p && lab_rnd_next(s) % REALLOC_EVERY == 0) return resize(h, n);
  if (h->p) bad = held_drop(h);
  held_new(h, n, true);
  return bad;
}

static uint64_t run_minimizer(uint64_t *done, uint64_t *bad) {
  uint64_t s = lab_rnd_seed(0, 2), t0 = lab_now_ns();
  held_t temps[TEMPS_MAX];
  for (uint64_t step = 0; step < P.work; step++) {
    uint64_t t = 1 + lab_rnd_next(&s) % TEMPS_MAX;
    for (uint64_t k = 0; k < t; k++) held_new(&temps[k], small_size(&s), true);
    *bad += replace(pick_slot(&s), &s);
    for (uint64_t k = t; k-- > 0;) *bad += held_drop(&temps[k]);
  }
  for (size_t i = 0; i < sizeof tiers / sizeof tiers[0]; i++)
    for (uint64_t k = 0; k < tiers[i].count; k++)
      if (tiers[i].slots[k].p) *bad += held_drop(&tiers[i].slots[k]);
  *done = P.work;
  return lab_now_ns() - t0;
}

/* ---- working-set: each thread holds --slots blocks and, until the time is up, frees a
 * random one and allocates a block of a random size in its place; counts the iterations. ---- */
static void fill_slots(held_t *set, uint64_t *s) {
  for (uint64_t k = 0; k < P.slots; k++) held_new(&set[k], uniform_size(s), false);
}

static uint64_t drop_slots(held_t *set) {
  uint64_t bad = 0;
  for (uint64_t k = 0; k < P.slots; k++)
    if (set[k].p) bad += held_drop(&set[k]);
  return bad;
}

/* One random replacement in `set`: the work unit of working-set and server. */
static inline uint64_t swap_one(held_t *set, uint64_t *s) {
  held_t *h = &set[lab_rnd_next(s) % P.slots];
  uint64_t bad = held_drop(h);
  held_new(h, uniform_size(s), false);
  return bad;
}

static void *working_set_main(void *arg) {
  worker_t *w = arg;
  uint64_t s = lab_rnd_seed(w->index, 3), done = 0, bad = 0;
  held_t *set = calloc(P.slots, sizeof *set);
  if (!set) abort();
  fill_slots(set, &s); /* a full working set from the first timed iteration */
  pthread_barrier_wait(&start);
  while (!stopped()) {
    bad += swap_one(set, &s);
    done++;
  }
  w->done = done;
  w->bad = bad + drop_slots(set);
  free(set);
  return NULL;
}

/* ---- server: --threads lines of thread generations, as a server whose worker threads come
 * and go. Each generation makes --gen-ops random replacements in the set of blocks it inherits
 * from the one before, so it frees most of what that generation left and some of its own, and
 * leaves the rest to the next. A line's own thread starts each generation and waits for it. ---- */
typedef struct {
  worker_t *w;
  held_t *set;
  uint64_t gen;
} generation_t;

static void *generation_main(void *arg) {
  generation_t *g = arg;
  uint64_t s = lab_rnd_seed(g->w->index, g->gen + 4), done = 0, bad = 0;
  while (done < P.gen_ops && !stopped()) {
    bad += swap_one(g->set, &s);
    done++;
  }
  g->w->done += done;
  g->w->bad += bad;
  return NULL;
}

static void *server_line(void *arg) {
  worker_t *w = arg;
  uint64_t s = lab_rnd_seed(w->index, 5);
  generation_t g = {w, calloc(P.slots, sizeof(held_t)), 0};
  if (!g.set) abort();
  fill_slots(g.set, &s);
  pthread_barrier_wait(&start);
  for (; !stopped(); g.gen++) {
    pthread_t tid;
    if (pthread_create(&tid, NULL, generation_main, &g) != 0) abort();
    pthread_join(tid, NULL);
  }
  w->bad += drop_slots(g.set);
  free(g.set);
  return NULL;
}

/* ---- trees: --threads threads each keep one tree of --depth alive while they build trees of
 * depths 4, 6, ... up to --depth, node by node (sizes from --min-size to --max-size), and free
 * each, walking it children first and checking every node, until they have allocated their
 * share of the nodes asked for. ---- */
#define TREE_MIN_DEPTH 4

typedef struct node_s {
  struct node_s *left, *right;
  uint64_t size; /* the node's own, for its marks */
} node_t;

static node_t *tree_build(uint64_t depth, uint64_t *s) {
  uint64_t n = uniform_size(s);
  node_t *t = malloc(n);
  if (!t) abort();
  t->size = n;
  ((unsigned char *)t)[n - 1] = mark_of(n);
  t->left = depth ? tree_build(depth - 1, s) : NULL;
  t->right = depth ? tree_build(depth - 1, s) : NULL;
  return t;
}

/* Frees the tree, children first; returns its nodes, and adds to *bad those with a changed mark. */
static uint64_t tree_free(node_t *t, uint64_t *bad) {
  if (!t) return 0;
  uint64_t nodes = 1 + tree_free(t->left, bad) + tree_free(t->right, bad);
  *bad += ((unsigned char *)t)[t->size - 1] != mark_of(t->size);
  free(t);
  return nodes;
}

static void *trees_main(void *arg) {
  worker_t *w = arg;
  uint64_t s = lab_rnd_seed(w->index, 6), share = P.work / P.threads + (w->index < P.work % P.threads);
  pthread_barrier_wait(&start);
  node_t *kept = tree_build(P.depth, &s);
  uint64_t done = (2ull << P.depth) - 1, bad = 0;
  for (uint64_t d = TREE_MIN_DEPTH; done < share; d = d + 2 > P.depth ? TREE_MIN_DEPTH : d + 2) {
    uint64_t built = (2ull << d) - 1, freed = tree_free(tree_build(d, &s), &bad);
    bad += freed != built;
    done += built;
  }
  tree_free(kept, &bad);
  w->done = done;
  w->bad = bad;
  return NULL;
}

static uint64_t run_working_set(uint64_t *done, uint64_t *bad) {
  uint64_t ns = run_team(working_set_main, P.threads);
  team_totals(P.threads, done, bad);
  return ns;
}

static uint64_t run_server(uint64_t *done, uint64_t *bad) {
  uint64_t ns = run_team(server_line, P.threads);
  team_totals(P.threads, done, bad);
  return ns;
}

static uint64_t run_trees(uint64_t *done, uint64_t *bad) {
  uint64_t ns = run_team(trees_main, P.threads);
  team_totals(P.threads, done, bad);
  return ns;
}

/* ---- the shapes: each one's unit of work and its defaults (the lab passes its own) ---- */
typedef struct {
  const char *name, *unit;
  uint64_t (*run)(uint64_t *done, uint64_t *bad); /* returns the nanoseconds worked */
  bool fixed_time; /* runs --ms and counts its work; else does --work and is timed */
  bool threaded;   /* takes --threads; else its threads are its own */
  uint64_t least_size;
  params_t defaults; /* a field left 0 is one the shape does not read */
} shape_t;

static const shape_t SHAPES[] = {
    {"fill-drain", "rounds", run_fill_drain, false, false, 1,
     {.work = 2000000, .threads = 1, .min_size = 16, .max_size = 64}},
    {"minimizer", "steps", run_minimizer, false, false, 1,
     {.work = 10000000, .threads = 1, .min_size = 8, .max_size = 200}},
    {"working-set", "iterations", run_working_set, true, true, 1,
     {.ms = 1000, .threads = 2, .min_size = 16, .max_size = 1024, .slots = 1000}},
    {"server", "replacements", run_server, true, true, 1,
     {.ms = 1000, .threads = 2, .min_size = 8, .max_size = 1000, .slots = 2000, .gen_ops = 10000}},
    {"trees", "nodes", run_trees, false, true, sizeof(node_t) + 1, /* a node's links, size and mark */
     {.work = 50000000, .threads = 8, .min_size = 32, .max_size = 64, .depth = 14}},
};
#define NSHAPES (sizeof SHAPES / sizeof SHAPES[0])

static void usage(void) {
  fprintf(stderr, "usage: shapes --shape fill-drain|minimizer|working-set|server|trees [--work N] [--ms MS] "
                  "[--threads N] [--min-size B] [--max-size B] [--slots N] [--gen-ops N] [--depth D]\n");
  exit(2);
}

/* An option's value; 0 is refused, since it stands for "not given" below. */
static uint64_t positive(const char *name, const char *text) {
  uint64_t v = lab_parse_size(name, text);
  if (v == 0) usage();
  return v;
}

static inline uint64_t given_or(uint64_t given, uint64_t fallback) { return given ? given : fallback; }

/* The options over the shape's defaults; anything a shape cannot run with is refused. */
static const shape_t *parse(int argc, char **argv) {
  static const struct option opts[] = {
      {"shape", required_argument, 0, 'S'},    {"work", required_argument, 0, 'w'},
      {"ms", required_argument, 0, 'm'},       {"threads", required_argument, 0, 'n'},
      {"min-size", required_argument, 0, 'a'}, {"max-size", required_argument, 0, 'b'},
      {"slots", required_argument, 0, 'k'},    {"gen-ops", required_argument, 0, 'g'},
      {"depth", required_argument, 0, 'd'},    {0, 0, 0, 0}};
  const char *name = NULL;
  params_t o = {0}; /* options given; 0 leaves the default */
  int ch;
  while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (ch) {
    case 'S': name = optarg; break;
    case 'w': o.work = positive("--work", optarg); break;
    case 'm': o.ms = positive("--ms", optarg); break;
    case 'n': o.threads = positive("--threads", optarg); break;
    case 'a': o.min_size = positive("--min-size", optarg); break;
    case 'b': o.max_size = positive("--max-size", optarg); break;
    case 'k': o.slots = positive("--slots", optarg); break;
    case 'g': o.gen_ops = positive("--gen-ops", optarg); break;
    case 'd': o.depth = positive("--depth", optarg); break;
    default: usage();
    }
  }
  const shape_t *sh = SHAPES;
  while (name && sh < SHAPES + NSHAPES && strcmp(name, sh->name) != 0) sh++;
  if (!name || sh == SHAPES + NSHAPES || optind != argc) usage();
  const params_t *d = &sh->defaults;
  P = (params_t){.work = sh->fixed_time ? 0 : given_or(o.work, d->work),
                 .ms = sh->fixed_time ? given_or(o.ms, d->ms) : 0,
                 .threads = given_or(o.threads, d->threads),
                 .min_size = given_or(o.min_size, d->min_size),
                 .max_size = given_or(o.max_size, d->max_size),
                 .slots = given_or(o.slots, d->slots),
                 .gen_ops = given_or(o.gen_ops, d->gen_ops),
                 .depth = given_or(o.depth, d->depth)};
  /* Depth 24 at most: such a tree is 32 M nodes, 1 GiB of 32-byte ones, and a thread holds two. */
  if (P.threads > MAX_THREADS || (!sh->threaded && P.threads != 1) || P.min_size < sh->least_size ||
      P.max_size < P.min_size || (d->depth && (P.depth < TREE_MIN_DEPTH || P.depth > 24)))
    usage();
  return sh;
}

int main(int argc, char **argv) {
  const shape_t *sh = parse(argc, argv);
  uint64_t done = 0, bad = 0, ns = sh->run(&done, &bad);
  printf("{\"shape\":\"%s\",\"unit\":\"%s\",\"threads\":%llu,\"work\":%llu,\"ms\":%llu,\"done\":%llu,"
         "\"wall_ns\":%llu,\"bad\":%llu,\"rss_end\":%llu%s,\"final\":true}\n",
         sh->name, sh->unit, (unsigned long long)P.threads, (unsigned long long)P.work,
         (unsigned long long)P.ms, (unsigned long long)done, (unsigned long long)ns, (unsigned long long)bad,
         (unsigned long long)lab_rss_bytes(), extra);
  return bad ? 1 : 0;
}
