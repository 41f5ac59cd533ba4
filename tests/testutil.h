/* testutil.h — helpers the allocator tests share: a seeded generator, the seeded block
 * pattern, values the compiler cannot see through, /proc memory figures, the test duration
 * parameter and a child-process runner that captures stderr and the way the child ended. */
#ifndef FG_TEST_UTIL_H
#define FG_TEST_UTIL_H

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---- values hidden from the optimiser ---------------------------------------------------
 * Bad-input and misuse tests pass sizes and pointers the compiler would warn about or fold
 * (malloc(SIZE_MAX), free of a stack address, use after free); routing them through an empty
 * asm makes them opaque, so the call really happens at run time. */
static inline size_t tu_size(size_t v) {
  __asm__ volatile("" : "+r"(v));
  return v;
}
static inline void *tu_ptr(void *v) {
  __asm__ volatile("" : "+r"(v));
  return v;
}

/* Run an allocation call with errno cleared: true when it returned NULL and set errno to
 * err. A block returned by mistake is freed, so a failing check does not also leak. */
#define TU_FAILS_WITH(err, call)                                                            \
  __extension__({                                                                           \
    errno = 0;                                                                              \
    void *tu_p_ = (void *)(call);                                                           \
    int tu_ok_ = tu_p_ == NULL && errno == (err);                                           \
    free(tu_p_);                                                                            \
    tu_ok_;                                                                                 \
  })

/* ---- deterministic generator (splitmix64) ----------------------------------------------- */
static inline uint64_t tu_mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
typedef struct tu_rng_s {
  uint64_t state;
} tu_rng_t;
static inline uint64_t tu_next(tu_rng_t *r) {
  r->state += 0x9E3779B97F4A7C15ull;
  return tu_mix(r->state);
}
/* Uniform in [lo, hi]. */
static inline size_t tu_range(tu_rng_t *r, size_t lo, size_t hi) {
  return lo + (size_t)(tu_next(r) % (uint64_t)(hi - lo + 1));
}

/* A size distribution: band i is chosen with probability weight_i / sum of weights and
 * gives a size uniform in [lo, hi]. */
typedef struct tu_band_s {
  unsigned weight;
  size_t lo, hi;
} tu_band_t;
static inline size_t tu_pick_size(tu_rng_t *r, const tu_band_t *bands, size_t nbands) {
  uint64_t total = 0;
  for (size_t i = 0; i < nbands; i++)
    total += bands[i].weight;
  uint64_t k = tu_next(r) % total;
  for (size_t i = 0; i < nbands; i++) {
    if (k < bands[i].weight)
      return tu_range(r, bands[i].lo, bands[i].hi);
    k -= bands[i].weight;
  }
  return bands[nbands - 1].lo;
}

/* ---- seeded block pattern ----------------------------------------------------------------
 * Word i of a block filled with key k is k + i*golden, so every word differs: a block copied
 * to the wrong offset, truncated, or overwritten by a neighbour is caught, not just a block
 * that was zeroed. The bytes after the last whole word take the next word's low bytes. */
static inline uint64_t tu_word(uint64_t key, size_t i) {
  return key + (uint64_t)i * 0x9E3779B97F4A7C15ull;
}
static inline void tu_fill(void *p, size_t n, uint64_t key) {
  unsigned char *b = (unsigned char *)p;
  size_t words = n / 8;
  for (size_t i = 0; i < words; i++) {
    uint64_t w = tu_word(key, i);
    memcpy(b + i * 8, &w, 8);
  }
  uint64_t last = tu_word(key, words);
  memcpy(b + words * 8, &last, n % 8);
}
/* Offset of the first byte in [0, n) that differs from the pattern, or -1 when intact. */
static inline long tu_verify(const void *p, size_t n, uint64_t key) {
  const unsigned char *b = (const unsigned char *)p;
  size_t words = n / 8;
  for (size_t i = 0; i < words; i++) {
    uint64_t w = tu_word(key, i);
    if (memcmp(b + i * 8, &w, 8) != 0) {
      for (size_t j = 0; j < 8; j++)
        if (b[i * 8 + j] != ((const unsigned char *)&w)[j])
          return (long)(i * 8 + j);
    }
  }
  uint64_t last = tu_word(key, words);
  for (size_t j = 0; j < n % 8; j++)
    if (b[words * 8 + j] != ((const unsigned char *)&last)[j])
      return (long)(words * 8 + j);
  return -1;
}
/* True when all n bytes at p are zero. */
static inline bool tu_is_zero(const void *p, size_t n) {
  const unsigned char *b = (const unsigned char *)p;
  for (size_t i = 0; i < n; i++)
    if (b[i])
      return false;
  return true;
}

/* ---- process memory ----------------------------------------------------------------------
 * Read a "Name:   1234 kB" field of /proc/self/status with plain syscalls (no stdio, so no
 * allocation disturbs what is measured). Returns bytes, or 0 if the field is missing. */
static inline size_t tu_status_bytes(const char *field) {
  char buf[8192];
  int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return 0;
  ssize_t len = 0, got;
  while (len < (ssize_t)sizeof buf - 1 && (got = read(fd, buf + len, sizeof buf - 1 - len)) > 0)
    len += got;
  close(fd);
  buf[len > 0 ? len : 0] = '\0';
  size_t flen = strlen(field);
  for (char *line = buf; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
    if (strncmp(line, field, flen) == 0 && line[flen] == ':')
      return (size_t)strtoull(line + flen + 1, NULL, 10) * 1024u;
  }
  return 0;
}
/* Resident memory now (VmRSS) and address space in use (VmSize). */
static inline size_t tu_rss(void) { return tu_status_bytes("VmRSS"); }

/* The process's threads, frugal's own among them (/proc/self/task). */
static inline int tu_threads(void) {
  int n = 0;
  DIR *d = opendir("/proc/self/task");
  for (struct dirent *e; d != NULL && (e = readdir(d)) != NULL;) n += e->d_name[0] != '.';
  if (d != NULL) closedir(d);
  return n;
}
static inline size_t tu_vmsize(void) { return tu_status_bytes("VmSize"); }

#define TU_MIB ((size_t)1 << 20)

/* ---- time and duration parameter --------------------------------------------------------- */
static inline double tu_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
/* Test duration in seconds: argv[1] if given, else $FRUGAL_STRESS_SECONDS, else fallback. */
static inline double tu_seconds(int argc, char **argv, double fallback) {
  const char *s = argc > 1 ? argv[1] : getenv("FRUGAL_STRESS_SECONDS");
  if (s && *s) {
    char *end;
    double v = strtod(s, &end);
    if (*end == '\0' && v > 0)
      return v;
  }
  return fallback;
}

/* ---- child processes ----------------------------------------------------------------------
 * tu_run_child forks; the child sends its stderr into a pipe, arms an alarm (a deadlock ends
 * as SIGALRM instead of hanging the test), disables core files, runs fn and exits 0. The
 * parent collects stderr (up to TU_ERR_MAX bytes) and the wait status. */
#define TU_ERR_MAX 8192
typedef struct tu_child_s {
  int status;             /* as from waitpid */
  size_t err_len;         /* bytes of stderr kept */
  char err[TU_ERR_MAX];   /* the child's stderr, NUL-terminated */
} tu_child_t;

static inline bool tu_child_exited_ok(const tu_child_t *c) {
  return WIFEXITED(c->status) && WEXITSTATUS(c->status) == 0;
}
static inline bool tu_child_signalled(const tu_child_t *c, int sig) {
  return WIFSIGNALED(c->status) && WTERMSIG(c->status) == sig;
}

static inline bool tu_run_child(void (*fn)(void *), void *arg, unsigned timeout_s,
                                tu_child_t *out) {
  int fds[2];
  memset(out, 0, sizeof *out);
  if (pipe(fds) != 0)
    return false;
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return false;
  }
  if (pid == 0) {
    struct rlimit nocore = {0, 0};
    setrlimit(RLIMIT_CORE, &nocore);
    close(fds[0]);
    dup2(fds[1], STDERR_FILENO);
    close(fds[1]);
    signal(SIGALRM, SIG_DFL);
    alarm(timeout_s);
    fn(arg);
    _exit(0);
  }
  close(fds[1]);
  ssize_t got;
  while ((got = read(fds[0], out->err + out->err_len, TU_ERR_MAX - 1 - out->err_len)) != 0) {
    if (got < 0) {
      if (errno == EINTR)
        continue;
      break;
    }
    out->err_len += (size_t)got;
    if (out->err_len == TU_ERR_MAX - 1) {
      char sink[512];
      while (read(fds[0], sink, sizeof sink) > 0) {
      }
      break;
    }
  }
  out->err[out->err_len] = '\0';
  close(fds[0]);
  while (waitpid(pid, &out->status, 0) < 0)
    if (errno != EINTR)
      return false;
  return true;
}

/* A short description of how a child ended, for failure lines. */
static inline const char *tu_child_how(const tu_child_t *c, char *buf, size_t len) {
  if (WIFEXITED(c->status))
    snprintf(buf, len, "exit %d", WEXITSTATUS(c->status));
  else if (WIFSIGNALED(c->status))
    snprintf(buf, len, "signal %d (%s)", WTERMSIG(c->status), strsignal(WTERMSIG(c->status)));
  else
    snprintf(buf, len, "status 0x%x", c->status);
  return buf;
}

#endif /* FG_TEST_UTIL_H */
