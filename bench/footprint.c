/* footprint — docs/lab.md experiment 5: what an allocator holds while a program runs and after it
 * goes quiet. Two modes; the lab samples the RSS from outside, this program says how many bytes
 * it really holds (live_bytes) so that the RSS can be judged against it.
 *   bigrand: N live big blocks, each replaced in turn by a random size, every page touched
 *            (where a cache of big blocks that fit no request maps more beside them).
 *   idle:    build a working set (small objects of mixed sizes, a loop over big blocks), drop all
 *            of it but its oldest part, then idle like a program waiting for work. */
#include <getopt.h>
#include <sys/mman.h>

#include "lab.h"

#define PAGE 4096u

/* Deterministic sizes with no libc state: splitmix64. */
static uint64_t rng_state;
static uint64_t rng_next(void) {
  uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static void touch_pages(char *p, size_t size, unsigned char v) {
  for (size_t off = 0; off < size; off += PAGE) p[off] = (char)v;
  p[size - 1] = (char)v;
}

static void *must_malloc(size_t size) {
  void *p = malloc(size);
  if (!p) {
    fprintf(stderr, "footprint: out of memory (%zu bytes)\n", size);
    exit(1);
  }
  return p;
}

typedef struct {
  uint64_t live, big_min, big_max, replacements, big, big_iters, small, keep, wait_ms;
} params_t;

#define MAX_LIVE 1024u

static void run_bigrand(const params_t *p) {
  static char *block[MAX_LIVE];
  static uint64_t size[MAX_LIVE];
  uint64_t live_bytes = 0, peak_live = 0, span = p->big_max - p->big_min + 1;
  uint64_t t0 = lab_now_ns();
  for (uint64_t r = 0; r < p->live + p->replacements; r++) {
    uint64_t slot = r < p->live ? r : rng_next() % p->live;
    if (block[slot]) { /* free the old, then malloc the new: the allocator may reuse it */
      free(block[slot]);
      live_bytes -= size[slot];
    }
    size[slot] = p->big_min + rng_next() % span;
    block[slot] = must_malloc(size[slot]);
    touch_pages(block[slot], size[slot], (unsigned char)r);
    live_bytes += size[slot];
    if (live_bytes > peak_live) peak_live = live_bytes;
  }
  uint64_t loop_ns = lab_now_ns() - t0;
  printf("{\"final\":true,\"mode\":\"bigrand\",\"replacements\":%llu,\"loop_ns\":%llu,"
         "\"live_bytes\":%llu,\"peak_live\":%llu,\"rss_end\":%llu}\n",
         (unsigned long long)p->replacements, (unsigned long long)loop_ns,
         (unsigned long long)live_bytes, (unsigned long long)peak_live,
         (unsigned long long)lab_rss_bytes());
  for (uint64_t i = 0; i < p->live; i++) free(block[i]);
}

/* 16 B to 4 KiB, each power-of-two band as likely as the next: most objects are small, most
 * bytes are in the bigger ones, as in a program's heap. */
static size_t small_size(void) {
  unsigned band = 4 + (unsigned)(rng_next() % 8);
  return ((size_t)1 << band) + (size_t)(rng_next() % ((size_t)1 << band));
}

static void run_idle(const params_t *p) {
  /* The objects' addresses live outside the allocator (mmap), so that only the experiment's
   * own blocks are on its heap. At least 16 bytes each: a bound on how many there can be. */
  size_t cap = (size_t)(p->small / 16 + 1), table_bytes = cap * sizeof(char *);
  char **obj = mmap(NULL, table_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (obj == MAP_FAILED) {
    perror("footprint: mmap");
    exit(1);
  }
  size_t n = 0, kept = 0;
  uint64_t bytes = 0, live_bytes = 0, t0 = lab_now_ns();
  while (bytes < p->small && n < cap) { /* build: the oldest `keep` bytes stay */
    size_t s = small_size();
    obj[n] = must_malloc(s);
    memset(obj[n], (int)(n & 0xff), s);
    bytes += s;
    if (live_bytes < p->keep) live_bytes += s, kept = n + 1;
    n++;
  }
  for (uint64_t i = 0; i < p->big_iters; i++) { /* with the small objects live */
    char *b = must_malloc(p->big);
    touch_pages(b, p->big, (unsigned char)(i + 1));
    lab_escape(b);
    free(b);
  }
  uint64_t rss_built = lab_rss_bytes();
  for (size_t i = kept; i < n; i++) free(obj[i]); /* drop */
  uint64_t build_ns = lab_now_ns() - t0, rss_dropped = lab_rss_bytes();
  lab_idle(p->wait_ms);
  uint64_t rss_idle = lab_rss_bytes();
  printf("{\"final\":true,\"mode\":\"idle\",\"objects\":%zu,\"kept\":%zu,\"small_bytes\":%llu,"
         "\"live_bytes\":%llu,\"build_ns\":%llu,\"wait_ms\":%llu,\"rss_built\":%llu,"
         "\"rss_after_drop\":%llu,\"rss_after_idle\":%llu}\n",
         n, kept, (unsigned long long)bytes, (unsigned long long)live_bytes,
         (unsigned long long)build_ns, (unsigned long long)p->wait_ms,
         (unsigned long long)rss_built, (unsigned long long)rss_dropped,
         (unsigned long long)rss_idle);
  for (size_t i = 0; i < kept; i++) free(obj[i]);
  munmap(obj, table_bytes);
}

static void usage(void) {
  fprintf(stderr,
          "usage: footprint --mode bigrand [--live N] [--min BYTES] [--max BYTES] [--replacements R]\n"
          "       footprint --mode idle [--big BYTES] [--big-iters K] [--small BYTES] [--keep BYTES]"
          " [--wait-ms MS]\n"
          "       (both: [--seed S])\n");
  exit(2);
}

static char out_buf[1 << 12];

int main(int argc, char **argv) {
  params_t p = {.live = 16, .big_min = 5ull << 20, .big_max = 25ull << 20, .replacements = 600,
                .big = 128ull << 20, .big_iters = 4, .small = 64ull << 20, .keep = 1ull << 20,
                .wait_ms = 2000};
  const char *mode = NULL;
  rng_state = 20261122;
  static const struct option opts[] = {
      {"mode", required_argument, 0, 'm'},         {"live", required_argument, 0, 'n'},
      {"min", required_argument, 0, 'a'},          {"max", required_argument, 0, 'b'},
      {"replacements", required_argument, 0, 'r'}, {"big", required_argument, 0, 'B'},
      {"big-iters", required_argument, 0, 'k'},    {"small", required_argument, 0, 's'},
      {"keep", required_argument, 0, 'K'},         {"wait-ms", required_argument, 0, 'w'},
      {"seed", required_argument, 0, 'S'},         {0, 0, 0, 0}};
  int ch;
  while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (ch) {
    case 'm': mode = optarg; break;
    case 'n': p.live = lab_parse_size("--live", optarg); break;
    case 'a': p.big_min = lab_parse_size("--min", optarg); break;
    case 'b': p.big_max = lab_parse_size("--max", optarg); break;
    case 'r': p.replacements = lab_parse_size("--replacements", optarg); break;
    case 'B': p.big = lab_parse_size("--big", optarg); break;
    case 'k': p.big_iters = lab_parse_size("--big-iters", optarg); break;
    case 's': p.small = lab_parse_size("--small", optarg); break;
    case 'K': p.keep = lab_parse_size("--keep", optarg); break;
    case 'w': p.wait_ms = lab_parse_size("--wait-ms", optarg); break;
    case 'S': rng_state = lab_parse_size("--seed", optarg); break;
    default: usage();
    }
  }
  setvbuf(stdout, out_buf, _IOFBF, sizeof out_buf);
  if (mode && strcmp(mode, "bigrand") == 0) {
    if (p.live == 0 || p.live > MAX_LIVE || p.big_min == 0 || p.big_max < p.big_min) usage();
    run_bigrand(&p);
  } else if (mode && strcmp(mode, "idle") == 0) {
    if (p.big == 0 || p.keep > p.small) usage();
    run_idle(&p);
  } else {
    usage();
  }
  return 0;
}
