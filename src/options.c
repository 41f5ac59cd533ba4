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

/* The rows come from frugal.h's FG_OPTIONS. Why the defaults are what they are:
 * - FRUGAL_DECAY_MS 1000: keeps a buffer reused once a second (seed 3's hot loops) and still
 *   returns memory within a second or two of disuse; the caches' byte bounds are a safety net.
 *   With a 64 MiB segment cache the lab's 1 GiB FIFO (seed 2) re-faulted every round (24 ns per
 *   32 B block against 11 ns for mimalloc): a round's memory must survive until the next one.
 * - FRUGAL_SAMPLE_BYTES 1 MiB: tcmalloc's and jemalloc's profilers sample at 2 MiB and 512 KiB;
 *   a program allocating 1 GB/s then takes about 1000 samples a second (cost: docs/profiles.md).
 * - FRUGAL_GUARD_EVERY 500,000: a guard costs 9-14 us, nearly all in the kernel (mprotect, a
 *   sealing mmap, the page's fault; 1 to 8 threads, perf stat) and next to nothing in user
 *   space (callgrind: +0.002 % on the lab's 128 B threads cell at one in 10^6). The lab's most
 *   allocation-heavy cell, 69M allocations in 0.30 s of CPU, then takes ~140 guards: 1.2-1.9 ms,
 *   0.4-0.6 %; one in 200,000 would be 1-1.6 %. tcmalloc guards one allocation per ~100 MiB. */
/* The help texts, read by fg_options_print only, with the rare code's data. */
#define FG_X(name, def, min, max, is_string, help) static const char help_##name[] fg_rare_data = help;
FG_OPTIONS(FG_X)
#undef FG_X

static const option_row_t rows[FG_OPTION_COUNT] = {
#define FG_X(name, def, min, max, is_string, help) [FG_OPTION_##name] = {"FRUGAL_" #name, def, min, max, is_string, help_##name},
    FG_OPTIONS(FG_X)
#undef FG_X
};

long _fg_option_values[FG_OPTION_COUNT];
static const char *option_strings[FG_OPTION_COUNT];
/* String values are copied here: programs that set their process title (redis, postgres,
 * nginx) write over their environment's memory, and the path a report is written to at exit
 * was gone by then. Static, as options are read before frugal may allocate: room for every
 * string option at PATH_MAX. */
static char string_store[2 * 4096];
static size_t string_used;

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
      size_t len = strlen(eq + 1);
      option_strings[row] = NULL;
      if (len > 0 && string_used + len + 1 <= sizeof string_store) {
        option_strings[row] = memcpy(string_store + string_used, eq + 1, len + 1);
        string_used += len + 1;
      } else if (len > 0) {
        _fg_warning("value too long, ignored: ", *env);
      }
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

fg_export fg_rare void fg_option_set(fg_option_t o, long v) {
  if ((unsigned)o >= FG_OPTION_COUNT || rows[o].is_string) return;
  if (v < rows[o].min) v = rows[o].min;
  if (v > rows[o].max) v = rows[o].max;
  _fg_option_values[o] = v;
}

/* The options in effect, as JSON: {"options":[{"name":..,"value":..,"default":..},..]}. */
fg_rare void _fg_options_json_to(int fd) {
  char buf[4096];
  fg_writer_t w = {buf, sizeof buf, 0, fd};
  _fg_w_printf(&w, "{\"options\":[");
  for (int i = 0; i < FG_OPTION_COUNT; i++) {
    _fg_w_printf(&w, "%s{\"name\":", i ? "," : "");
    _fg_w_jstr(&w, rows[i].name);
    _fg_w_printf(&w, ",\"value\":");
    if (rows[i].is_string) {
      if (option_strings[i] != NULL)
        _fg_w_jstr(&w, option_strings[i]);
      else
        _fg_w_printf(&w, "null");
    } else {
      _fg_w_printf(&w, "%ld", _fg_option_values[i]);
    }
    if (rows[i].is_string)
      _fg_w_printf(&w, ",\"default\":null}");
    else
      _fg_w_printf(&w, ",\"default\":%ld}", rows[i].def);
  }
  _fg_w_printf(&w, "]}\n");
  _fg_w_flush(&w);
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

fg_export fg_rare void fg_options_print(void) {
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
