/* bigbuf — seed 3 ("hidden costs of large allocations"), docs/lab.md experiment 3.
 * Loops malloc(B) / use / free(B) K times and times each part from inside, counting the page
 * faults each iteration takes; the runner adds the outside view (user, sys, faults) that the
 * seed says naive timers miss. Optionally it then idles like a program waiting for work and
 * reports how much memory the allocator gave back to the OS by itself and after a trim. */
#include <getopt.h>

#include "lab.h"

#define PAGE 4096u

typedef enum { V_UNTOUCHED, V_TOUCHED, V_FILLED, V_REUSE } variant_t;

static void touch_pages(char *p, size_t size, unsigned char v) {
  for (size_t off = 0; off < size; off += PAGE) p[off] = (char)v;
}

/* frugal's decay time when it is the preloaded allocator, through its public option API
 * (FG_OPTION_DECAY_MS is the second entry of fg_option_t in frugal.h); -1 otherwise. */
static long frugal_decay_ms(void) {
  long (*get)(int) = (long (*)(int))dlsym(RTLD_DEFAULT, "fg_option_get");
  return get ? get(1) : -1;
}

static void usage(void) {
  fprintf(stderr, "usage: bigbuf --size BYTES --variant untouched|touched|filled|reuse "
                  "[--iters K] [--wait-ms MS] | --print-decay\n");
  exit(2);
}

static char out_buf[1 << 14];

int main(int argc, char **argv) {
  uint64_t size = 8ull << 20, iters = 10, wait_ms = 0;
  const char *vname = "touched";
  static const struct option opts[] = {{"size", required_argument, 0, 's'},
                                       {"variant", required_argument, 0, 'v'},
                                       {"iters", required_argument, 0, 'k'},
                                       {"wait-ms", required_argument, 0, 'w'},
                                       {"print-decay", no_argument, 0, 'd'},
                                       {0, 0, 0, 0}};
  int ch;
  while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (ch) {
    case 's': size = lab_parse_size("--size", optarg); break;
    case 'v': vname = optarg; break;
    case 'k': iters = lab_parse_size("--iters", optarg); break;
    case 'w': wait_ms = lab_parse_size("--wait-ms", optarg); break;
    case 'd': printf("{\"decay_ms\":%ld}\n", frugal_decay_ms()); return 0;
    default: usage();
    }
  }
  variant_t variant;
  if (strcmp(vname, "untouched") == 0) variant = V_UNTOUCHED;
  else if (strcmp(vname, "touched") == 0) variant = V_TOUCHED;
  else if (strcmp(vname, "filled") == 0) variant = V_FILLED;
  else if (strcmp(vname, "reuse") == 0) variant = V_REUSE;
  else usage();
  if (size == 0 || iters == 0) usage();
  setvbuf(stdout, out_buf, _IOFBF, sizeof out_buf);

  uint64_t rss_start = lab_rss_bytes();
  char *kept = NULL;
  uint64_t setup_ns = 0;
  if (variant == V_REUSE) { /* the lower bound: one block, allocated once */
    uint64_t t0 = lab_now_ns();
    kept = malloc(size);
    setup_ns = lab_now_ns() - t0;
    if (!kept) return 1;
  }
  uint64_t loop0 = lab_now_ns();
  for (uint64_t i = 0; i < iters; i++) {
    uint64_t f0 = lab_minflt();
    uint64_t t0 = lab_now_ns();
    char *p = variant == V_REUSE ? kept : malloc(size);
    uint64_t t1 = lab_now_ns();
    if (!p) {
      fprintf(stderr, "bigbuf: out of memory\n");
      return 1;
    }
    switch (variant) {
    case V_UNTOUCHED: break;
    case V_TOUCHED:
    case V_REUSE: touch_pages(p, size, (unsigned char)(i + 1)); break;
    case V_FILLED: memset(p, (int)(i + 1), size); break;
    }
    lab_escape(p);
    uint64_t t2 = lab_now_ns();
    if (variant != V_REUSE) free(p);
    uint64_t t3 = lab_now_ns();
    uint64_t f1 = lab_minflt();
    if (variant == V_REUSE) t1 = t0, t3 = t2; /* no allocation inside the loop */
    printf("{\"iter\":%llu,\"alloc_ns\":%llu,\"touch_ns\":%llu,\"free_ns\":%llu,\"minflt\":%llu}\n",
           (unsigned long long)i, (unsigned long long)(t1 - t0), (unsigned long long)(t2 - t1),
           (unsigned long long)(t3 - t2), (unsigned long long)(f1 - f0));
  }
  uint64_t loop_ns = lab_now_ns() - loop0;
  free(kept);
  uint64_t rss_after_loop = lab_rss_bytes();
  uint64_t rss_after_wait = rss_after_loop, rss_after_trim = 0;
  char trim[128] = "";
  if (wait_ms) {
    lab_idle(wait_ms);
    rss_after_wait = lab_rss_bytes();
  }
  lab_trim(trim, sizeof trim);
  rss_after_trim = lab_rss_bytes();
  printf("{\"final\":true,\"size\":%llu,\"variant\":\"%s\",\"iters\":%llu,\"loop_ns\":%llu,"
         "\"setup_ns\":%llu,\"wait_ms\":%llu,\"rss_start\":%llu,\"rss_after_loop\":%llu,"
         "\"rss_after_wait\":%llu,\"rss_after_trim\":%llu,\"trim\":\"%s\"}\n",
         (unsigned long long)size, vname, (unsigned long long)iters, (unsigned long long)loop_ns,
         (unsigned long long)setup_ns, (unsigned long long)wait_ms,
         (unsigned long long)rss_start, (unsigned long long)rss_after_loop,
         (unsigned long long)rss_after_wait, (unsigned long long)rss_after_trim, trim);
  return 0;
}
