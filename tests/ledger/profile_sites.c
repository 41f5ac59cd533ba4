/* profile_sites.c — allocation sites with known byte totals, for the heap profile's test
 * (python/tests/test_profile.py): the sampled estimates of `frugal run --profile` must come
 * within 10 % of what this program allocates and of what `frugal run --leaks` counts live.
 *   site_small  64 MiB in 256 B blocks, every 4th kept: 16 MiB live at exit
 *   site_mixed  48 MiB in blocks of 16 ... 2032 B, every other kept: 24 MiB live at exit
 *   site_large  40 blocks of 1 MiB, 10 kept: 10 MiB live at exit
 *   site_burst  32 MiB in 4 KiB blocks, all live at once, then freed: part of the peak only
 * The peak (82 MiB) is while site_burst holds its blocks; 50 MiB stay live at exit. */
#include <stdlib.h>
#include <string.h>

#define MIB ((size_t)1 << 20)

void *volatile kept[65536 + 24576 + 10];
static size_t nkept;
static void *burst[32 * MIB / 4096];

__attribute__((noinline)) void site_small(void) {
  for (size_t i = 0; i < 64 * MIB / 256; i++) {
    char *p = malloc(256);
    p[0] = 1;
    if (i % 4 == 0) kept[nkept++] = p;
    else free(p);
  }
}

__attribute__((noinline)) void site_mixed(void) {
  for (size_t i = 0; i < 48 * MIB / 1024; i++) {
    size_t size = 16 + (i % 127) * 16; /* 16 ... 2032, 1024 on average */
    char *p = malloc(size);
    p[0] = 1;
    if (i % 2 == 0) kept[nkept++] = p;
    else free(p);
  }
}

__attribute__((noinline)) void site_large(void) {
  for (size_t i = 0; i < 40; i++) {
    char *p = malloc(MIB);
    p[0] = 1;
    if (i % 4 == 0) kept[nkept++] = p;
    else free(p);
  }
}

__attribute__((noinline)) void site_burst(void) {
  for (size_t i = 0; i < sizeof burst / sizeof *burst; i++) {
    burst[i] = malloc(4096);
    memset(burst[i], 1, 64);
  }
}

int main(void) {
  site_small();
  site_mixed();
  site_large();
  site_burst();
  for (size_t i = 0; i < sizeof burst / sizeof *burst; i++) free(burst[i]);
  return 0;
}
