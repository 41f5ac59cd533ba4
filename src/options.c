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
  const char *help;
} option_row_t;

/* Defaults: decay 1000 ms keeps a buffer reused once a second (seed 3's hot loops) and
 * still returns memory within a second or two of disuse; large cache 256 MiB holds the
 * lab's biggest hot buffer (128 MiB) twice; segment cache 64 MiB is 16 empty segments. */
static const option_row_t rows[FG_OPTION_COUNT] = {
    [FG_OPTION_VERBOSE] = {"FRUGAL_VERBOSE", 0, 0, 2, "print warnings (1) and events (2) on stderr"},
    [FG_OPTION_DECAY_MS] = {"FRUGAL_DECAY_MS", 1000, 0, 3600000,
                            "ms a free page, segment or large block stays before it returns to the OS"},
    [FG_OPTION_LARGE_CACHE_MB] = {"FRUGAL_LARGE_CACHE_MB", 256, 0, 1 << 20,
                                  "MiB of freed large blocks (> 512 KiB) kept for reuse"},
    [FG_OPTION_SEGMENT_CACHE_MB] = {"FRUGAL_SEGMENT_CACHE_MB", 64, 0, 1 << 20,
                                    "MiB of empty 4 MiB segments kept for reuse"},
};

long _fg_option_values[FG_OPTION_COUNT] = {
    [FG_OPTION_VERBOSE] = 0,
    [FG_OPTION_DECAY_MS] = 1000,
    [FG_OPTION_LARGE_CACHE_MB] = 256,
    [FG_OPTION_SEGMENT_CACHE_MB] = 64,
};

extern char **environ;

static bool parse(const char *text, long *out) {
  char *end;
  errno = 0;
  long v = strtol(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0') return false;
  *out = v;
  return true;
}

void _fg_options_init(void) {
  int saved = errno;
  for (int i = 0; i < FG_OPTION_COUNT; i++) _fg_option_values[i] = rows[i].def;
  for (char **env = environ; env != NULL && *env != NULL; env++) {
    if (strncmp(*env, "FRUGAL_", 7) != 0) continue;
    const char *eq = strchr(*env, '=');
    if (eq == NULL) continue;
    size_t len = (size_t)(eq - *env);
    int found = -1;
    for (int i = 0; i < FG_OPTION_COUNT; i++)
      if (strlen(rows[i].name) == len && strncmp(rows[i].name, *env, len) == 0) found = i;
    if (found < 0) {
      /* Names the ledger and the tools use are not allocator options: pass silently. */
      if (strncmp(*env, "FRUGAL_STATS", 12) != 0 && strncmp(*env, "FRUGAL_LEAKS", 12) != 0 &&
          strncmp(*env, "FRUGAL_BUILD", 12) != 0 && strncmp(*env, "FRUGAL_STRESS", 13) != 0 &&
          strncmp(*env, "FRUGAL_SECURE", 13) != 0)
        _fg_warning("unknown option ignored: ", *env);
      continue;
    }
    long v;
    if (!parse(eq + 1, &v) || v < rows[found].min || v > rows[found].max) {
      _fg_warning("bad value, using the default: ", *env);
      continue;
    }
    _fg_option_values[found] = v;
  }
  errno = saved;
}

fg_export long fg_option_get(fg_option_t o) {
  return (unsigned)o < FG_OPTION_COUNT ? _fg_option_values[o] : 0;
}

fg_export void fg_option_set(fg_option_t o, long v) {
  if ((unsigned)o >= FG_OPTION_COUNT) return;
  if (v < rows[o].min) v = rows[o].min;
  if (v > rows[o].max) v = rows[o].max;
  _fg_option_values[o] = v;
}

static void put_long(char *buf, size_t *n, long v) {
  char tmp[24];
  int k = 0;
  unsigned long u = v < 0 ? (unsigned long)-v : (unsigned long)v;
  do tmp[k++] = (char)('0' + u % 10); while ((u /= 10) != 0 && k < 23);
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
    put_long(line, &n, _fg_option_values[i]);
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
