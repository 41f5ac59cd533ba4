/* lab.h — small helpers shared by the seed lab's workloads (docs/lab.md): clocks, the process's
 * own RSS and fault counts, option parsing, a seeded generator, idling. Header-only and
 * allocation-free (but for lab_idle's tick, which is the point of it), so that the only mallocs
 * a workload makes are the ones its experiment is about. */
#ifndef FRUGAL_LAB_H
#define FRUGAL_LAB_H

#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
#include <stdbool.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Monotonic nanoseconds: the inside clock of every workload. */
static inline uint64_t lab_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Resident bytes now, from /proc/self/statm (read with plain syscalls: stdio would malloc). */
static inline uint64_t lab_rss_bytes(void) {
  char buf[128];
  uint64_t pages = 0;
  int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return 0;
  buf[n] = '\0';
  const char *s = buf;
  while (*s && *s != ' ') s++; /* skip the total size field */
  while (*s == ' ') s++;
  while (*s >= '0' && *s <= '9') pages = pages * 10 + (uint64_t)(*s++ - '0');
  return pages * (uint64_t)sysconf(_SC_PAGESIZE);
}

/* Minor page faults of this process so far (getrusage does not allocate). */
static inline uint64_t lab_minflt(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (uint64_t)ru.ru_minflt;
}

/* Parse a non-negative integer option value with an optional K/M/G (binary) suffix. */
static inline uint64_t lab_parse_size(const char *name, const char *text) {
  char *end = NULL;
  errno = 0;
  unsigned long long v = strtoull(text, &end, 10);
  if (errno || end == text) {
    fprintf(stderr, "bad value for %s: '%s'\n", name, text);
    exit(2);
  }
  switch (*end) {
  case 'k': case 'K': v <<= 10; end++; break;
  case 'm': case 'M': v <<= 20; end++; break;
  case 'g': case 'G': v <<= 30; end++; break;
  default: break;
  }
  if (*end != '\0') {
    fprintf(stderr, "bad value for %s: '%s'\n", name, text);
    exit(2);
  }
  return (uint64_t)v;
}

/* Give free memory back to the OS the way each allocator offers it: malloc_trim(0) (glibc, and
 * frugal, which overrides it with fg_collect), plus the own call of the allocator preloaded
 * when it has one, found with dlsym so the workload links against none of them. Writes the
 * names of the calls made into `used` (for the JSON record). */
static inline void lab_trim(char *used, size_t cap) {
  used[0] = '\0';
  malloc_trim(0);
  strncat(used, "malloc_trim", cap - strlen(used) - 1);
  void (*fg_collect)(bool) = (void (*)(bool))dlsym(RTLD_DEFAULT, "fg_collect");
  if (fg_collect) {
    fg_collect(true);
    strncat(used, "+fg_collect", cap - strlen(used) - 1);
  }
  int (*mallctl)(const char *, void *, size_t *, void *, size_t) =
      (int (*)(const char *, void *, size_t *, void *, size_t))dlsym(RTLD_DEFAULT, "mallctl");
  if (mallctl) { /* jemalloc: 4096 is MALLCTL_ARENAS_ALL */
    mallctl("arena.4096.purge", NULL, NULL, NULL, 0);
    strncat(used, "+mallctl(purge)", cap - strlen(used) - 1);
  }
  void (*tc_release)(void) = (void (*)(void))dlsym(RTLD_DEFAULT, "MallocExtension_ReleaseFreeMemory");
  if (tc_release) {
    tc_release();
    strncat(used, "+ReleaseFreeMemory", cap - strlen(used) - 1);
  }
  void (*mi_collect)(bool) = (void (*)(bool))dlsym(RTLD_DEFAULT, "mi_collect");
  if (mi_collect) {
    mi_collect(true);
    strncat(used, "+mi_collect", cap - strlen(used) - 1);
  }
}

/* xorshift64*: a few instructions per draw, so a workload's random choices cost little beside
 * malloc; seeded from two numbers (a thread's index, a round) so that every run draws alike. */
static inline uint64_t lab_rnd_next(uint64_t *s) {
  *s ^= *s >> 12;
  *s ^= *s << 25;
  *s ^= *s >> 27;
  return *s * 2685821657736338717ull;
}

static inline uint64_t lab_rnd_seed(uint64_t a, uint64_t b) {
  uint64_t s = (a + 1) * 0x9E3779B97F4A7C15ull ^ (b + 1) * 0xC2B2AE3D27D4EB4Full;
  return s ? s : 1;
}

/* Keep the compiler from proving a store or a block dead. */
static inline void lab_escape(void *p) { __asm__ volatile("" : : "g"(p) : "memory"); }

/* Stay nearly idle for `ms`, as a program waiting for work does (docs/lab.md): one small
 * malloc/free every 10 ms, so that an allocator's slow paths get a chance to run its decay. */
#define LAB_IDLE_TICK_NS 10000000ull
#define LAB_IDLE_BLOCK 64u
static inline void lab_idle(uint64_t ms) {
  uint64_t end = lab_now_ns() + ms * 1000000ull;
  while (lab_now_ns() < end) {
    char *q = (char *)malloc(LAB_IDLE_BLOCK);
    if (q) q[0] = 1;
    lab_escape(q);
    free(q);
    struct timespec ts = {0, (long)LAB_IDLE_TICK_NS};
    nanosleep(&ts, NULL);
  }
}

#ifdef __cplusplus
}
#endif

#endif
