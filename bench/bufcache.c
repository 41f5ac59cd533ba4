/* bufcache — seed 1 ("a cache with a bad policy is a memory leak"), docs/lab.md experiment 1.
 * Replays the seed's random process exactly (glibc rand(), never seeded, in the seed's call
 * order) through one of the seed's buffer-cache policies in front of malloc, and prints the
 * seed's "% used" figure every 100 steps as one JSON object per sample. */
#include <getopt.h>
#include <malloc.h>
#include <stdbool.h>
#include <sys/mman.h>

#include "lab.h"

/* The seed's size process: 100 B doubled while rand()%4==0, as long as it is below 1 MiB. */
#define SEED_MIN_SIZE 100u
#define SEED_MAX_SIZE (1024u * 1024u)
/* The seed's fix caches only buffers of at most 200 B ("three quarters of the allocations
 * are in the 100-200 byte range"); the buckets policy uses the same cutoff. */
#define CUTOFF 200u
#define BUCKET_WIDTH 100u
#define NBUCKETS (CUTOFF / BUCKET_WIDTH)
#define MAX_KEEP 10

typedef enum { POLICY_NONE, POLICY_KEEP_BIGGEST, POLICY_CUTOFF, POLICY_BUCKETS } policy_kind_t;

/* One cached buffer: the pointer and its usable size (the seed suggests remembering it). */
typedef struct {
  void *p;
  size_t size;
} slot_t;

typedef struct {
  policy_kind_t kind;
  int capacity;           /* keep-biggest-N: N */
  int count;              /* entries in use (keep-biggest) */
  slot_t slots[MAX_KEEP]; /* keep-biggest entries, cutoff's one slot, or one per bucket */
} cache_t;

static void *cache_get(cache_t *c, size_t cb) {
  switch (c->kind) {
  case POLICY_NONE:
    break;
  case POLICY_KEEP_BIGGEST:
    /* Satisfy from the cache if any entry is big enough; newest first. */
    for (int i = c->count - 1; i >= 0; i--) {
      if (c->slots[i].size >= cb) {
        void *p = c->slots[i].p;
        c->slots[i] = c->slots[c->count - 1];
        c->count--;
        return p;
      }
    }
    break;
  case POLICY_CUTOFF:
    if (c->slots[0].p && c->slots[0].size >= cb) {
      void *p = c->slots[0].p;
      c->slots[0].p = NULL;
      return p;
    }
    break;
  case POLICY_BUCKETS:
    /* A cached buffer is used only if it wastes at most one bucket width on this request. */
    for (unsigned b = 0; b < NBUCKETS; b++) {
      slot_t *s = &c->slots[b];
      if (s->p && s->size >= cb && s->size - cb <= BUCKET_WIDTH) {
        void *p = s->p;
        s->p = NULL;
        return p;
      }
    }
    break;
  }
  return malloc(cb);
}

static void cache_put(cache_t *c, void *p) {
  size_t size = malloc_usable_size(p);
  switch (c->kind) {
  case POLICY_NONE:
    break;
  case POLICY_KEEP_BIGGEST: {
    /* The seed's flawed design: keep the bigger buffer, free the smallest one. */
    if (c->count < c->capacity) {
      c->slots[c->count++] = (slot_t){p, size};
      return;
    }
    int smallest = 0;
    for (int i = 1; i < c->count; i++)
      if (c->slots[i].size < c->slots[smallest].size) smallest = i;
    if (size > c->slots[smallest].size) {
      free(c->slots[smallest].p);
      c->slots[smallest] = (slot_t){p, size};
      return;
    }
    break;
  }
  case POLICY_CUTOFF:
    /* The seed's fix, verbatim: keep it only if the slot is empty and it is small. */
    if (c->slots[0].p == NULL && size <= CUTOFF) {
      c->slots[0] = (slot_t){p, size};
      return;
    }
    break;
  case POLICY_BUCKETS:
    /* One slot per 100-byte bucket; when the slot is full the newest buffer is freed. */
    if (size <= CUTOFF) {
      slot_t *s = &c->slots[(size - 1) / BUCKET_WIDTH];
      if (s->p == NULL) {
        *s = (slot_t){p, size};
        return;
      }
    }
    break;
  }
  free(p);
}

static void cache_stats(const cache_t *c, size_t *blocks, size_t *bytes) {
  *blocks = 0;
  *bytes = 0;
  for (int i = 0; i < MAX_KEEP; i++) {
    if (c->slots[i].p && (c->kind != POLICY_KEEP_BIGGEST || i < c->count)) {
      (*blocks)++;
      *bytes += c->slots[i].size;
    }
  }
}

static bool parse_policy(const char *name, cache_t *c) {
  memset(c, 0, sizeof *c);
  if (strcmp(name, "none") == 0) {
    c->kind = POLICY_NONE;
  } else if (strcmp(name, "keep-biggest-1") == 0) {
    c->kind = POLICY_KEEP_BIGGEST;
    c->capacity = 1;
  } else if (strcmp(name, "keep-biggest-10") == 0) {
    c->kind = POLICY_KEEP_BIGGEST;
    c->capacity = 10;
  } else if (strcmp(name, "cutoff-200") == 0) {
    c->kind = POLICY_CUTOFF;
  } else if (strcmp(name, "buckets") == 0) {
    c->kind = POLICY_BUCKETS;
  } else {
    return false;
  }
  return true;
}

static void usage(void) {
  fprintf(stderr, "usage: bufcache [--policy none|keep-biggest-1|keep-biggest-10|cutoff-200|"
                  "buckets] [--steps N] [--every N] [--rss-every N]\n");
  exit(2);
}

static char out_buf[1 << 16]; /* stdout's buffer, static so printing never mallocs */

int main(int argc, char **argv) {
  const char *policy = "none";
  uint64_t steps = 2000000, every = 100, rss_every = 1000;
  static const struct option opts[] = {{"policy", required_argument, 0, 'p'},
                                       {"steps", required_argument, 0, 's'},
                                       {"every", required_argument, 0, 'e'},
                                       {"rss-every", required_argument, 0, 'r'},
                                       {0, 0, 0, 0}};
  int ch;
  while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (ch) {
    case 'p': policy = optarg; break;
    case 's': steps = lab_parse_size("--steps", optarg); break;
    case 'e': every = lab_parse_size("--every", optarg); break;
    case 'r': rss_every = lab_parse_size("--rss-every", optarg); break;
    default: usage();
    }
  }
  cache_t cache;
  if (!parse_policy(policy, &cache) || every == 0 || rss_every == 0) usage();
  setvbuf(stdout, out_buf, _IOFBF, sizeof out_buf);

  /* The live-block vector lives outside the allocator under test. */
  size_t vbytes = (size_t)(steps + 1) * sizeof(void *);
  void **v = mmap(NULL, vbytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (v == MAP_FAILED) {
    perror("mmap");
    return 1;
  }
  size_t n = 0;
  uint64_t needed = 0, handed = 0, peak_rss = 0;
  uint64_t rss_start = lab_rss_bytes();
  uint64_t t0 = lab_now_ns();
  for (uint64_t count = 0; count < steps; count++) {
    if (n == 0 || (rand() & 1)) { /* allocate */
      size_t cb = SEED_MIN_SIZE;
      while (cb < SEED_MAX_SIZE && !(rand() % 4)) cb *= 2;
      void *p = cache_get(&cache, cb);
      if (p) {
        *(size_t *)p = cb; /* the seed stores the requested size in the block */
        handed += malloc_usable_size(p);
        needed += cb;
        v[n++] = p;
      }
    } else { /* free a random live block */
      size_t victim = (size_t)rand() % n;
      handed -= malloc_usable_size(v[victim]);
      needed -= *(size_t *)v[victim];
      cache_put(&cache, v[victim]);
      v[victim] = v[n - 1];
      n--;
    }
    if (count % every == 0) {
      printf("{\"step\":%llu,\"live\":%zu,\"requested\":%llu,\"handed_out\":%llu,"
             "\"efficiency\":%.6f",
             (unsigned long long)count, n, (unsigned long long)needed,
             (unsigned long long)handed, handed ? (double)needed / (double)handed : 1.0);
      if (count % rss_every == 0) {
        uint64_t rss = lab_rss_bytes();
        if (rss > peak_rss) peak_rss = rss;
        printf(",\"rss\":%llu", (unsigned long long)rss);
      }
      fputs("}\n", stdout);
    }
  }
  uint64_t t1 = lab_now_ns();
  size_t cache_blocks, cache_bytes;
  cache_stats(&cache, &cache_blocks, &cache_bytes);
  printf("{\"final\":true,\"policy\":\"%s\",\"steps\":%llu,\"loop_ns\":%llu,\"live\":%zu,"
         "\"requested\":%llu,\"handed_out\":%llu,\"cache_blocks\":%zu,\"cache_bytes\":%zu,"
         "\"rss_start\":%llu,\"rss_end\":%llu,\"rss_peak_sampled\":%llu}\n",
         policy, (unsigned long long)steps, (unsigned long long)(t1 - t0), n,
         (unsigned long long)needed, (unsigned long long)handed, cache_blocks, cache_bytes,
         (unsigned long long)rss_start, (unsigned long long)lab_rss_bytes(),
         (unsigned long long)peak_rss);
  return 0;
}
