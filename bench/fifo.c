/* fifo — seed 2 ("small allocations and heap fragmentation"), docs/lab.md experiment 2.
 * Pushes blocks of one size until T bytes are live, then pops them all in FIFO order, R rounds
 * in one process, timing each round: the seed's long-run test for slowdowns and cliffs.
 * The queue is intrusive (each block's first 8 bytes link to the next one), so the workload
 * owns no memory besides the blocks and even T = 8 GiB of 16-byte blocks needs no side array. */
#include <getopt.h>

#include "lab.h"

typedef struct block_s {
  struct block_s *next;
} block_t;

/* The stamp written into a block's last 8 bytes and checked when it is popped. */
static inline uint64_t stamp_of(uint64_t round, uint64_t i) {
  return (round << 40) ^ i ^ 0x9e3779b97f4a7c15ull;
}

static void usage(void) {
  fprintf(stderr, "usage: fifo --size BYTES [--total BYTES] [--rounds R]\n");
  exit(2);
}

static char out_buf[1 << 14];

int main(int argc, char **argv) {
  uint64_t size = 0, total = 128ull << 20, rounds = 4;
  static const struct option opts[] = {{"size", required_argument, 0, 's'},
                                       {"total", required_argument, 0, 't'},
                                       {"rounds", required_argument, 0, 'r'},
                                       {0, 0, 0, 0}};
  int ch;
  while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (ch) {
    case 's': size = lab_parse_size("--size", optarg); break;
    case 't': total = lab_parse_size("--total", optarg); break;
    case 'r': rounds = lab_parse_size("--rounds", optarg); break;
    default: usage();
    }
  }
  if (size < 16 || total < size || rounds == 0) usage();
  setvbuf(stdout, out_buf, _IOFBF, sizeof out_buf);

  const uint64_t count = total / size;
  uint64_t rss_start = lab_rss_bytes();
  uint64_t bad = 0;
  for (uint64_t r = 0; r < rounds; r++) {
    block_t *head = NULL, *tail = NULL;
    uint64_t flt0 = lab_minflt();
    uint64_t t0 = lab_now_ns();
    for (uint64_t i = 0; i < count; i++) {
      block_t *b = malloc(size);
      if (b == NULL) {
        fprintf(stderr, "fifo: out of memory after %llu blocks\n", (unsigned long long)i);
        return 1;
      }
      b->next = NULL;
      memcpy((char *)b + size - 8, &(uint64_t){stamp_of(r, i)}, 8);
      if (tail)
        tail->next = b;
      else
        head = b;
      tail = b;
    }
    uint64_t t1 = lab_now_ns();
    uint64_t rss_full = lab_rss_bytes();
    uint64_t t2 = lab_now_ns();
    for (uint64_t i = 0; head; i++) {
      block_t *next = head->next;
      uint64_t s;
      memcpy(&s, (char *)head + size - 8, 8);
      bad += s != stamp_of(r, i);
      free(head);
      head = next;
    }
    uint64_t t3 = lab_now_ns();
    uint64_t ns = (t1 - t0) + (t3 - t2);
    printf("{\"round\":%llu,\"size\":%llu,\"blocks\":%llu,\"push_ns\":%llu,\"pop_ns\":%llu,"
           "\"ns_per_block\":%.3f,\"rss_full\":%llu,\"minflt\":%llu}\n",
           (unsigned long long)r, (unsigned long long)size, (unsigned long long)count,
           (unsigned long long)(t1 - t0), (unsigned long long)(t3 - t2),
           (double)ns / (double)count, (unsigned long long)rss_full,
           (unsigned long long)(lab_minflt() - flt0));
    fflush(stdout);
  }
  uint64_t rss_after_pop = lab_rss_bytes();
  char trim[128];
  uint64_t t0 = lab_now_ns();
  lab_trim(trim, sizeof trim);
  uint64_t trim_ns = lab_now_ns() - t0;
  printf("{\"final\":true,\"size\":%llu,\"rounds\":%llu,\"bad_stamps\":%llu,\"rss_start\":%llu,"
         "\"rss_after_pop\":%llu,\"rss_after_trim\":%llu,\"trim\":\"%s\",\"trim_ns\":%llu}\n",
         (unsigned long long)size, (unsigned long long)rounds, (unsigned long long)bad,
         (unsigned long long)rss_start, (unsigned long long)rss_after_pop,
         (unsigned long long)lab_rss_bytes(), trim, (unsigned long long)trim_ns);
  return bad ? 1 : 0;
}
