/* stats_report.c — the ledger's reports, cold code: the text report, the JSON file (schema
 * python/frugal/ledger.schema.json), the leak sites and the at-exit writer. stats.c counts and
 * merges; this file only reads snapshots of it. */
#define _GNU_SOURCE
#include "internal.h"

#include <errno.h>

#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <sys/socket.h>
#include <unistd.h>

static fg_rare bool leaks_on(void) { return _fg_option(FG_OPTION_LEAKS) != 0; }

/* ---- one formatter for the text report and the JSON ---------------------------------------- */

fg_rare void _fg_w_flush(fg_writer_t *w) {
  if (w->fd < 0 || w->len == 0) return;
  size_t off = 0;
  int saved = errno;
  bool sock = true; /* a peer that left must not raise SIGPIPE (the control channel's clients) */
  while (off < w->len) {
    ssize_t n = sock ? send(w->fd, w->buf + off, w->len - off, MSG_NOSIGNAL) : -1;
    if (n < 0 && sock && errno == ENOTSOCK) sock = false;
    if (!sock) n = write(w->fd, w->buf + off, w->len - off);
    if (n <= 0) break;
    off += (size_t)n;
  }
  w->len = 0;
  errno = saved;
}

fg_rare void _fg_w_printf(fg_writer_t *w, const char *fmt, ...) {
  char tmp[512];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  size_t len = (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1;
  if (w->fd >= 0 && w->len + len > w->size) _fg_w_flush(w);
  if (w->len < w->size) memcpy(w->buf + w->len, tmp, w->len + len <= w->size ? len : w->size - w->len);
  w->len += len;
}

/* JSON string: escapes quotes, backslashes and control characters. */
fg_rare void _fg_w_jstr(fg_writer_t *w, const char *s) {
  _fg_w_printf(w, "\"");
  for (; s != NULL && *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\')
      _fg_w_printf(w, "\\%c", c);
    else if (c < 0x20)
      _fg_w_printf(w, "\\u%04x", c);
    else
      _fg_w_printf(w, "%c", c);
  }
  _fg_w_printf(w, "\"");
}

/* A stack's frames as a JSON array, leaf first: module, offset in it, dynamic symbol. */
fg_rare void _fg_w_frames(fg_writer_t *w, uint32_t stack) {
  fg_frame_t frames[FG_STACK_FRAMES];
  size_t nf = _fg_stack_frames(stack, frames);
  _fg_w_printf(w, "[");
  for (size_t f = 0; f < nf; f++) {
    _fg_w_printf(w, "%s{\"module\":", f ? "," : "");
    _fg_w_jstr(w, frames[f].module);
    _fg_w_printf(w, ",\"offset\":%lu,\"symbol\":", (unsigned long)frames[f].offset);
    if (frames[f].symbol != NULL)
      _fg_w_jstr(w, frames[f].symbol);
    else
      _fg_w_printf(w, "null");
    _fg_w_printf(w, "}");
  }
  _fg_w_printf(w, "]");
}

typedef struct advice_s {
  uint64_t p50, p90, p99;
  size_t waste[5], churn[5];
  size_t nwaste, nchurn;
} advice_t;

static fg_rare uint64_t quantile_size(const fg_stats_t *st, uint64_t total, double q) {
  uint64_t need = (uint64_t)((double)total * q + 0.5), cum = 0;
  for (size_t b = 0; b < FG_STATS_HIST_BUCKETS; b++) {
    cum += st->histogram[b];
    if (cum >= need && cum > 0)
      return b + 1 < FG_STATS_HIST_BUCKETS ? fg_stats_bucket_lo(b + 1) - 1 : SIZE_MAX;
  }
  return 0;
}

static fg_rare void top5(const fg_stats_t *st, uint64_t (*key)(const fg_stats_class_t *), size_t *out, size_t *n) {
  *n = 0;
  for (size_t k = 0; k < 5; k++) {
    size_t best = SIZE_MAX;
    for (size_t r = 0; r < FG_STATS_CLASSES; r++) {
      bool taken = false;
      for (size_t j = 0; j < *n; j++) taken |= out[j] == r;
      if (taken || key(&st->classes[r]) == 0) continue;
      if (best == SIZE_MAX || key(&st->classes[r]) > key(&st->classes[best])) best = r;
    }
    if (best == SIZE_MAX) break;
    out[(*n)++] = best;
  }
}
static fg_rare uint64_t waste_key(const fg_stats_class_t *c) { return c->bytes_handed_out - c->bytes_requested; }
static fg_rare uint64_t churn_key(const fg_stats_class_t *c) { return c->frees; }

static fg_rare void advise(const fg_stats_t *st, uint64_t allocations, advice_t *a) {
  a->p50 = quantile_size(st, allocations, 0.50);
  a->p90 = quantile_size(st, allocations, 0.90);
  a->p99 = quantile_size(st, allocations, 0.99);
  top5(st, waste_key, a->waste, &a->nwaste);
  top5(st, churn_key, a->churn, &a->nchurn);
}

typedef struct totals_s {
  uint64_t allocations, frees, requested, handed, live_blocks, live_requested, live_handed;
} totals_t;

static fg_rare totals_t totals_of(const fg_stats_t *st) {
  totals_t t = {0};
  for (size_t r = 0; r < FG_STATS_CLASSES; r++) {
    const fg_stats_class_t *c = &st->classes[r];
    t.allocations += c->allocations;
    t.frees += c->frees;
    t.requested += c->bytes_requested;
    t.handed += c->bytes_handed_out;
    t.live_blocks += c->allocations - c->frees;
    t.live_requested += c->bytes_requested - c->freed_requested;
    t.live_handed += c->bytes_handed_out - c->freed_handed_out;
  }
  return t;
}

static fg_rare double pct(uint64_t a, uint64_t b) { return b == 0 ? 100.0 : 100.0 * (double)a / (double)b; }

#define LEAK_TOP 20

static fg_rare void write_json(fg_writer_t *w, const fg_stats_t *st) {
  totals_t t = totals_of(st);
  advice_t a;
  advise(st, t.allocations, &a);
  _fg_w_printf(w, "{\"schema\":\"frugal-ledger/1\",\"version\":\"%s\",\"pid\":%d,\"ledger\":%s,", FRUGAL_VERSION,
           (int)getpid(), st->ledger_on ? "true" : "false");
  _fg_w_printf(w,
           "\"options\":{\"decay_ms\":%ld,\"large_cache_mb\":%ld,\"segment_cache_mb\":%ld,"
           "\"stats_interval_ms\":%ld,\"leaks\":%s},",
           _fg_option(FG_OPTION_DECAY_MS), _fg_option(FG_OPTION_LARGE_CACHE_MB),
           _fg_option(FG_OPTION_SEGMENT_CACHE_MB), _fg_option(FG_OPTION_STATS_INTERVAL_MS),
           leaks_on() ? "true" : "false");
  _fg_w_printf(w,
           "\"totals\":{\"allocations\":%lu,\"frees\":%lu,\"bytes_requested\":%lu,"
           "\"bytes_handed_out\":%lu,\"efficiency\":%.4f},",
           t.allocations, t.frees, t.requested, t.handed,
           t.handed ? (double)t.requested / (double)t.handed : 1.0);
  _fg_w_printf(w,
           "\"live\":{\"blocks\":%lu,\"bytes_requested\":%lu,\"bytes_handed_out\":%lu,"
           "\"peak_bytes_requested\":%lu,\"peak_bytes_handed_out\":%lu},",
           t.live_blocks, t.live_requested, t.live_handed, st->peak_live_requested, st->peak_live_handed_out);
  _fg_w_printf(w, "\"classes\":[");
  bool first = true;
  for (size_t r = 0; r < FG_STATS_CLASSES; r++) {
    const fg_stats_class_t *c = &st->classes[r];
    if (c->allocations == 0 && c->frees == 0) continue;
    _fg_w_printf(w, "%s{\"class\":%zu,\"block_size\":%lu,\"large\":%s", first ? "" : ",", r, c->block_size,
             r == FG_CLASS_COUNT ? "true" : "false");
#define FG_X(name, help) _fg_w_printf(w, ",\"" #name "\":%lu", c->name);
    FG_STATS_CLASS_FIELDS(FG_X)
#undef FG_X
    _fg_w_printf(w,
             ",\"live_blocks\":%lu,\"peak_live_blocks\":%lu,\"live_bytes_requested\":%lu,"
             "\"live_bytes_handed_out\":%lu}",
             c->allocations - c->frees, c->peak_live_blocks, c->bytes_requested - c->freed_requested,
             c->bytes_handed_out - c->freed_handed_out);
    first = false;
  }
  _fg_w_printf(w, "],\"histogram\":[");
  first = true;
  for (size_t b = 0; b < FG_STATS_HIST_BUCKETS; b++) {
    if (st->histogram[b] == 0) continue;
    uint64_t hi = b + 1 < FG_STATS_HIST_BUCKETS ? fg_stats_bucket_lo(b + 1) - 1 : SIZE_MAX;
    _fg_w_printf(w, "%s{\"lo\":%zu,\"hi\":%lu,\"count\":%lu}", first ? "" : ",", fg_stats_bucket_lo(b), hi,
             st->histogram[b]);
    first = false;
  }
  _fg_w_printf(w, "],\"advice\":{\"p50_size\":%lu,\"p90_size\":%lu,\"p99_size\":%lu,\"waste_classes\":[", a.p50,
           a.p90, a.p99);
  for (size_t i = 0; i < a.nwaste; i++) _fg_w_printf(w, "%s%zu", i ? "," : "", a.waste[i]);
  _fg_w_printf(w, "],\"churn_classes\":[");
  for (size_t i = 0; i < a.nchurn; i++) _fg_w_printf(w, "%s%zu", i ? "," : "", a.churn[i]);
  _fg_w_printf(w, "]},\"counters\":{");
#define FG_X(name, help)                                              \
  _fg_w_printf(w, "%s\"" #name "\":%lu", first ? "" : ",", st->name); \
  first = false;
  first = true;
  FG_STATS_GLOBAL_FIELDS(FG_X)
  _fg_w_printf(w, "},\"held\":{");
  first = true;
  FG_STATS_HELD_FIELDS(FG_X)
#undef FG_X
  _fg_w_printf(w,
           "},\"process\":{\"rss\":%lu,\"peak_rss\":%lu,\"minor_faults\":%lu,\"major_faults\":%lu,"
           "\"user_us\":%lu,\"sys_us\":%lu},",
           st->rss, st->peak_rss, st->minor_faults, st->major_faults, st->user_us, st->sys_us);
  _fg_w_printf(w, "\"timeline\":[");
  fg_stats_sample_t *tl = _fg_os_alloc_aligned(FG_STATS_TIMELINE_MAX * sizeof *tl, FG_OS_PAGE);
  size_t tl_len = tl != NULL ? _fg_stats_timeline(tl) : 0;
  for (size_t i = 0; i < tl_len; i++)
    _fg_w_printf(w,
                 "%s{\"t_ms\":%lu,\"live_bytes_requested\":%lu,\"live_bytes_handed_out\":%lu,\"rss\":%lu,"
                 "\"held_bytes\":%lu}",
                 i ? "," : "", tl[i].t_ms, tl[i].live_requested, tl[i].live_handed_out, tl[i].rss, tl[i].held);
  if (tl != NULL) _fg_os_free(tl, FG_STATS_TIMELINE_MAX * sizeof *tl);
  _fg_w_printf(w, "],\"leaks\":");
  if (!leaks_on()) {
    _fg_w_printf(w, "null}\n");
    return;
  }
  fg_site_t sites[LEAK_TOP];
  uint64_t lbytes, lcount;
  size_t n = _fg_leak_sites(sites, LEAK_TOP, &lbytes, &lcount);
  _fg_w_printf(w, "{\"blocks\":%lu,\"bytes\":%lu,\"sites\":[", lcount, lbytes);
  for (size_t i = 0; i < n; i++) {
    _fg_w_printf(w, "%s{\"bytes\":%lu,\"count\":%lu,\"frames\":", i ? "," : "", sites[i].bytes, sites[i].count);
    _fg_w_frames(w, sites[i].stack);
    _fg_w_printf(w, "}");
  }
  _fg_w_printf(w, "]}}\n");
}

static fg_rare const char *human(uint64_t n, char *buf, size_t size) {
  const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = (double)n;
  int u = 0;
  while (v >= 1024 && u < 4) v /= 1024, u++;
  snprintf(buf, size, u == 0 ? "%.0f %s" : "%.1f %s", v, unit[u]);
  return buf;
}

static fg_rare void write_leaks_text(fg_writer_t *w) {
  fg_site_t sites[LEAK_TOP];
  uint64_t lbytes, lcount;
  size_t n = _fg_leak_sites(sites, LEAK_TOP, &lbytes, &lcount);
  char h[32];
  _fg_w_printf(w, "frugal: leaks: %lu blocks, %s live at exit, top %zu call sites by bytes\n", lcount,
           human(lbytes, h, sizeof h), n);
  for (size_t i = 0; i < n; i++) {
    _fg_w_printf(w, "  #%zu  %s in %lu blocks\n", i + 1, human(sites[i].bytes, h, sizeof h), sites[i].count);
    fg_frame_t frames[FG_STACK_FRAMES];
    size_t nf = _fg_stack_frames(sites[i].stack, frames);
    for (size_t f = 0; f < nf && f < 8; f++)
      _fg_w_printf(w, "      %s (%s+0x%lx)\n", frames[f].symbol ? frames[f].symbol : "??", frames[f].module,
               (unsigned long)frames[f].offset);
  }
}

/* One counter a line: its name, its value (in KiB, MiB... for a count of bytes), its help. */
static fg_rare void write_counter(fg_writer_t *w, const char *name, uint64_t value, const char *help) {
  char v[32];
  size_t n = strlen(name);
  bool bytes = n > 6 && strcmp(name + n - 6, "_bytes") == 0;
  if (!bytes) snprintf(v, sizeof v, "%lu", value);
  _fg_w_printf(w, "    %-28s %12s  %s\n", name, bytes ? human(value, v, sizeof v) : v, help);
}

static fg_rare void write_text(fg_writer_t *w, const fg_stats_t *st) {
  totals_t t = totals_of(st);
  char a1[32], a2[32], a3[32];
  _fg_w_printf(w, "frugal: ledger of pid %d (frugal %s)\n", (int)getpid(), FRUGAL_VERSION);
  if (st->ledger_on) {
    _fg_w_printf(w, "  blocks: %lu allocated, %lu freed, %lu live\n", t.allocations, t.frees, t.live_blocks);
    _fg_w_printf(w, "  requested %s, handed out %s: %.1f %% used (seed 1's efficiency)\n",
             human(t.requested, a1, sizeof a1), human(t.handed, a2, sizeof a2), pct(t.requested, t.handed));
    _fg_w_printf(w, "  live: requested %s in blocks of %s (%.1f %% used); peak handed out %s\n",
             human(t.live_requested, a1, sizeof a1), human(t.live_handed, a2, sizeof a2),
             pct(t.live_requested, t.live_handed), human(st->peak_live_handed_out, a3, sizeof a3));
    advice_t a;
    advise(st, t.allocations, &a);
    _fg_w_printf(w, "  sizes: 50 %% of allocations <= %lu B, 90 %% <= %lu B, 99 %% <= %lu B\n", a.p50, a.p90,
             a.p99);
    _fg_w_printf(w, "  %-10s %12s %12s %10s %12s %12s %7s\n", "class", "allocs", "frees", "live", "requested",
             "handed out", "% used");
    for (size_t r = 0; r < FG_STATS_CLASSES; r++) {
      const fg_stats_class_t *c = &st->classes[r];
      if (c->allocations == 0) continue;
      char name[24];
      if (r == FG_CLASS_COUNT)
        snprintf(name, sizeof name, "large");
      else
        snprintf(name, sizeof name, "%lu", c->block_size);
      _fg_w_printf(w, "  %-10s %12lu %12lu %10lu %12s %12s %6.1f\n", name, c->allocations, c->frees,
               c->allocations - c->frees, human(c->bytes_requested, a1, sizeof a1),
               human(c->bytes_handed_out, a2, sizeof a2), pct(c->bytes_requested, c->bytes_handed_out));
    }
  } else {
    _fg_w_printf(w, "  (ledger off: set FRUGAL_STATS=1 for per-class counts)\n");
  }
  /* Every counter of the lists, with its help: a counter added there shows up here. */
  _fg_w_printf(w, "  counters (process-wide):\n");
#define FG_X(name, help) write_counter(w, #name, st->name, help);
  FG_STATS_GLOBAL_FIELDS(FG_X)
  _fg_w_printf(w, "  held for reuse now:\n");
  FG_STATS_HELD_FIELDS(FG_X)
#undef FG_X
  _fg_w_printf(w, "  process: RSS %s now, %s peak; %lu minor faults, %lu major; user %.3f s, sys %.3f s\n",
               human(st->rss, a1, sizeof a1), human(st->peak_rss, a2, sizeof a2), st->minor_faults,
               st->major_faults, (double)st->user_us / 1e6, (double)st->sys_us / 1e6);
  if (leaks_on()) write_leaks_text(w);
}

fg_export fg_rare size_t fg_stats_json(char *buf, size_t size) {
  fg_stats_t *st = _fg_stats_snapshot();
  if (st == NULL) return 0;
  fg_writer_t w = {buf, size > 0 ? size - 1 : 0, 0, -1};
  write_json(&w, st);
  if (size > 0) buf[w.len < size ? w.len : size - 1] = '\0';
  _fg_stats_snapshot_free(st);
  return w.len;
}

static fg_rare void report_to_fd(int fd, bool json) {
  fg_stats_t *st = _fg_stats_snapshot();
  char *buf = _fg_os_alloc_aligned(1 << 16, FG_OS_PAGE);
  if (st != NULL && buf != NULL) {
    fg_writer_t w = {buf, 1 << 16, 0, fd};
    if (json)
      write_json(&w, st);
    else
      write_text(&w, st);
    _fg_w_flush(&w);
  }
  if (buf != NULL) _fg_os_free(buf, 1 << 16);
  _fg_stats_snapshot_free(st);
}

fg_rare void _fg_stats_json_to(int fd) { report_to_fd(fd, true); }

fg_export fg_rare bool fg_stats_write(const char *path) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  report_to_fd(fd, true);
  return close(fd) == 0;
}

fg_export fg_rare void fg_stats_print(void) { report_to_fd(2, false); }

/* FRUGAL_STATS_FILE with "%p" in it names one file per process (a shell script's children
 * would otherwise overwrite each other's ledger, the last to exit winning). */
fg_rare void _fg_expand_pid(const char *path, char *out, size_t size) {
  size_t n = 0;
  for (const char *c = path; *c && n + 24 < size; c++) {
    if (c[0] == '%' && c[1] == 'p') {
      n += (size_t)snprintf(out + n, size - n, "%d", (int)getpid());
      c++;
    } else {
      out[n++] = *c;
    }
  }
  out[n] = '\0';
}

static fg_rare void report_at_exit(void) {
  _fg_own_begin(); /* frees during the report must not touch the leak table's lock order */
  const char *file = fg_option_get_string(FG_OPTION_STATS_FILE);
  if (file != NULL) {
    char path[4096];
    _fg_expand_pid(file, path, sizeof path);
    if (!fg_stats_write(path)) _fg_warning("cannot write FRUGAL_STATS_FILE: ", path);
  }
  if (_fg_option(FG_OPTION_STATS) != 0)
    fg_stats_print();
  else if (leaks_on() && file == NULL) { /* with a file, the leaks are in it */
    char *buf = _fg_os_alloc_aligned(1 << 16, FG_OS_PAGE);
    if (buf != NULL) {
      fg_writer_t w = {buf, 1 << 16, 0, 2};
      write_leaks_text(&w);
      _fg_w_flush(&w);
      _fg_os_free(buf, 1 << 16);
    }
  }
}

/* At exit (this library is finalized after the program's own destructors). The test stays
 * out of the rare code: a process without the ledger must not map its pages in to learn that. */
__attribute__((destructor)) static void stats_at_exit(void) {
  if (_fg_ledger_active()) report_at_exit();
}
