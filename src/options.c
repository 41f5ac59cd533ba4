/* options.c — the one table of frugal's options. Each row: the environment name, default,
 * range and one line of help; `fg_options_print` (and `frugal --help-env`) print the table.
 * Read once, at process start, with no allocation: unknown FRUGAL_* names and bad values
 * get a one-line warning and the default. */
#include "internal.h"

#include <errno.h>
#include <stdlib.h>

typedef struct option_row_s {
  const char *name;
  long def, min, max;
  bool is_string;
  const char *help;
} option_row_t;

/* Defaults: decay 1000 ms keeps a buffer reused once a second (seed 3's hot loops) and
 * still returns memory within a second or two of disuse. The caches' byte bounds are a
 * safety net; decay is what bounds how long memory is held. With a 64 MiB segment cache the
 * lab's 1 GiB FIFO (seed 2) re-faulted every round (24 ns per 32 B block against 11 ns for
 * mimalloc, which keeps its pages): a round's memory must survive until the next round. */
static const option_row_t rows[FG_OPTION_COUNT] = {
    [FG_OPTION_VERBOSE] = {"FRUGAL_VERBOSE", 0, 0, 2, false, "events on stderr: 1 rare ones (out-of-memory retries, full caches), 2 also every give-back"},
    [FG_OPTION_DECAY_MS] = {"FRUGAL_DECAY_MS", 1000, 0, 3600000, false,
                            "ms a free page, segment or large block stays before it returns to the OS"},
    [FG_OPTION_LARGE_CACHE_MB] = {"FRUGAL_LARGE_CACHE_MB", 1024, 0, 1 << 20, false,
                                  "MiB of freed large blocks (> 512 KiB) kept for reuse"},
    [FG_OPTION_SEGMENT_CACHE_MB] = {"FRUGAL_SEGMENT_CACHE_MB", 1024, 0, 1 << 20, false,
                                    "MiB of empty 4 MiB segments kept for reuse"},
    [FG_OPTION_STATS] = {"FRUGAL_STATS", 0, 0, 1, false, "1: ledger on, printed on stderr at exit"},
    [FG_OPTION_STATS_FILE] = {"FRUGAL_STATS_FILE", 0, 0, 0, true,
                              "path: ledger on, written there as JSON at exit"},
    [FG_OPTION_STATS_INTERVAL_MS] = {"FRUGAL_STATS_INTERVAL_MS", 0, 0, 3600000, false,
                                     "ms between timeline samples in the JSON (0: no timeline)"},
    [FG_OPTION_LEAKS] = {"FRUGAL_LEAKS", 0, 0, 1, false,
                         "1: ledger on, a call stack per block, live blocks by call site at exit"},
    [FG_OPTION_SECURE] =
        {"FRUGAL_SECURE", 0, 0, 1, false,
         "1: hardened: canary after each block, freed blocks filled and checked, guard pages, "
         "shuffled allocation order"},
    [FG_OPTION_PURGE_THREAD] = {"FRUGAL_PURGE_THREAD", 1, 0, 1, false,
                                "1: a background thread gives cached memory back while the program is quiet"},
    /* 1 MiB: tcmalloc's and jemalloc's profilers sample at 2 MiB and 512 KiB; at 1 MiB a
     * program allocating 1 GB/s takes about 1000 samples a second (measured cost: README). */
    [FG_OPTION_SAMPLE_BYTES] = {"FRUGAL_SAMPLE_BYTES", 1 << 20, 0, (long)1 << 40, false,
                                "mean bytes allocated between two sampled allocations (0: no sampling)"},
    [FG_OPTION_PROFILE] = {"FRUGAL_PROFILE", 0, 0, 0, true,
                           "directory (%p = pid): heap profile from the samples written there at exit"},
    /* Off by default: at one in 100,000 the lab's threads cells took up to 1.75x the time
     * (2 threads, 1 KiB: 0.11 -> 0.19 s; every guard is mmap + mprotect, which take the
     * process's mm lock the other thread's faults wait on) and 2-3 MiB more RSS (quarantined
     * slots stay resident; libunwind's first stack costs 0.3 MiB). */
    [FG_OPTION_GUARD_EVERY] = {"FRUGAL_GUARD_EVERY", 0, 0, 1L << 30, false,
                               "about one allocation (<= 4 KiB) in N ends against a guard page, and stays out of "
                               "reach a while after free (0: off; 1: every one)"},
};

long _fg_option_values[FG_OPTION_COUNT];
static const char *option_strings[FG_OPTION_COUNT];

/* Variables of frugal's tools (tests, CLI), not allocator options: no warning. */
static const char *const tool_prefixes[] = {"FRUGAL_BUILD", "FRUGAL_STRESS_", "FRUGAL_TEST_", NULL};

extern char **environ;

static bool parse(const char *text, long *out) {
  char *end;
  errno = 0;
  long v = strtol(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0') return false;
  *out = v;
  return true;
}

static int find_row(const char *name, size_t len) {
  for (int i = 0; i < FG_OPTION_COUNT; i++)
    if (strlen(rows[i].name) == len && strncmp(rows[i].name, name, len) == 0) return i;
  return -1;
}

static bool is_tool_variable(const char *name) {
  for (const char *const *t = tool_prefixes; *t != NULL; t++)
    if (strncmp(name, *t, strlen(*t)) == 0) return true;
  return false;
}

void _fg_options_init(void) {
  int saved = errno;
  for (int i = 0; i < FG_OPTION_COUNT; i++) _fg_option_values[i] = rows[i].def;
  for (char **env = environ; env != NULL && *env != NULL; env++) {
    if (strncmp(*env, "FRUGAL_", 7) != 0) continue;
    const char *eq = strchr(*env, '=');
    if (eq == NULL) continue;
    int row = find_row(*env, (size_t)(eq - *env));
    if (row < 0) {
      if (!is_tool_variable(*env)) _fg_warning("unknown option ignored: ", *env);
      continue;
    }
    if (rows[row].is_string) {
      option_strings[row] = eq[1] != '\0' ? eq + 1 : NULL;
      _fg_option_values[row] = option_strings[row] != NULL;
      continue;
    }
    long v;
    if (!parse(eq + 1, &v) || v < rows[row].min || v > rows[row].max) {
      _fg_warning("bad value, using the default: ", *env);
      continue;
    }
    _fg_option_values[row] = v;
  }
  errno = saved;
}

fg_export long fg_option_get(fg_option_t o) {
  return (unsigned)o < FG_OPTION_COUNT ? _fg_option_values[o] : 0;
}

fg_export const char *fg_option_get_string(fg_option_t o) {
  return (unsigned)o < FG_OPTION_COUNT ? option_strings[o] : NULL;
}

fg_export void fg_option_set(fg_option_t o, long v) {
  if ((unsigned)o >= FG_OPTION_COUNT || rows[o].is_string) return;
  if (v < rows[o].min) v = rows[o].min;
  if (v > rows[o].max) v = rows[o].max;
  _fg_option_values[o] = v;
}

static void put_long(char *buf, size_t *n, long v) {
  char tmp[24];
  int k = 0;
  unsigned long u = v < 0 ? (unsigned long)-v : (unsigned long)v;
  do tmp[k++] = (char)('0' + u % 10);
  while ((u /= 10) != 0 && k < 23);
  if (v < 0) buf[(*n)++] = '-';
  while (k > 0) buf[(*n)++] = tmp[--k];
}

fg_export void fg_options_print(void) {
  for (int i = 0; i < FG_OPTION_COUNT; i++) {
    char line[256];
    size_t n = 0, len = strlen(rows[i].name);
    memcpy(line, rows[i].name, len);
    n += len;
    line[n++] = '=';
    if (rows[i].is_string) {
      const char *v = option_strings[i] != NULL ? option_strings[i] : "";
      size_t vl = strlen(v) < 80 ? strlen(v) : 80;
      memcpy(line + n, v, vl);
      n += vl;
    } else {
      put_long(line, &n, _fg_option_values[i]);
    }
    memcpy(line + n, " (default ", 10);
    n += 10;
    put_long(line, &n, rows[i].def);
    memcpy(line + n, "): ", 3);
    n += 3;
    len = strlen(rows[i].help);
    if (len > sizeof line - n - 2) len = sizeof line - n - 2;
    memcpy(line + n, rows[i].help, len);
    n += len;
    line[n++] = '\n';
    line[n] = '\0';
    _fg_write_stderr(line);
  }
}
