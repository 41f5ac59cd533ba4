/* stats.c — the ledger: what frugal's policy does, seen from inside. Process-wide counters
 * (OS calls, caches) are always kept, on slow paths. The per-class ledger (blocks and bytes
 * requested vs handed out, the size histogram, leaks) runs only when FRUGAL_STATS,
 * FRUGAL_STATS_FILE or FRUGAL_LEAKS asks for it: then every entry point takes its one
 * `_fg_hooked` branch into here; off, the fast paths pay that branch and nothing else.
 * Each thread counts into its own heap's ledger with plain stores; readers merge. */
#define _GNU_SOURCE
#include "internal.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <sys/resource.h>
#include <unistd.h>

_Atomic(uint64_t) _fg_counters[FG_C_COUNT];

static bool leaks_on;
static uint64_t sample_ms; /* peak sampling (and timeline) period */
static bool timeline_on;
static _Atomic(uint64_t) next_sample_at;
static fg_ledger_t orphan_ledger;                              /* frees by threads that never allocated */
static pthread_mutex_t stats_lock = PTHREAD_MUTEX_INITIALIZER; /* peaks, timeline, reports */
static uint64_t peak_blocks[FG_STATS_CLASSES], peak_requested, peak_handed;
static fg_stats_sample_t timeline[FG_STATS_TIMELINE_MAX];
static size_t timeline_len;
static uint64_t start_ms;

/* ---- histogram buckets: 0, then one per size class, the classes' formula continued ------- */

/* A request's bucket is its size class + 1 (the class formula continues past the largest
 * class): the inline ledger path counts it from the page's class without recomputing. */
static size_t bucket_of(size_t size) {
  if (size == 0) return 0;
  size_t b = _fg_class_of(size) + 1;
  return b < FG_STATS_HIST_BUCKETS ? b : FG_STATS_HIST_BUCKETS - 1;
}

fg_export size_t fg_stats_bucket_lo(size_t i) {
  return i == 0 ? 0 : i == 1 ? 1 : _fg_class_size(i - 2) + 1;
}

/* ---- where a block's numbers live ---------------------------------------------------------- */

typedef struct block_loc_s {
  size_t row;     /* size class, or FG_CLASS_COUNT for large */
  size_t handed;  /* bytes handed out */
  uint32_t *slot; /* small: the page's requested-size entry */
  fg_segment_t *large;
} block_loc_t;

static bool locate(const void *p, block_loc_t *loc, bool create) {
  fg_segment_t *s = _fg_segment_of(p);
  if (!_fg_segmap_contains(s) || s->cookie != ((uintptr_t)s ^ _fg_secret)) return false;
  loc->slot = NULL;
  loc->large = NULL;
  if (s->kind == FG_SEG_LARGE) {
    loc->row = FG_CLASS_COUNT;
    loc->handed = s->mapped - s->large_offset - _fg_secure_guard();
    loc->large = s;
    return true;
  }
  fg_page_t *page = _fg_page_of(s, p);
  loc->slot = _fg_page_requested_slot(page, p, create);
  loc->row = page->class_idx;
  loc->handed = page->block_size;
  return loc->slot != NULL;
}

/* The calling thread's ledger; NULL means "count into the shared orphan ledger". */
static fg_ledger_t *thread_ledger(void) {
  fg_heap_t *heap = _fg_heap();
  return heap != &_fg_heap_empty ? &heap->ledger : NULL;
}

/* Add n to a counter: owner-only in a thread's ledger, atomically in the orphan ledger of
 * threads without a heap (l == NULL). */
static inline void add(fg_ledger_t *l, _Atomic(uint64_t) *counter, uint64_t n) {
  if (fg_likely(l != NULL))
    _fg_bump(counter, n);
  else
    atomic_fetch_add_explicit(counter, n, memory_order_relaxed);
}

/* One row's counters, and for an allocation its histogram bucket. What the merge derives is
 * not stored: small rows' handed-out bytes, and the bucket of a small request, class + 1
 * (another bucket is counted with a correction of -1 at class + 1; see merge_ledger). */
static void count(fg_ledger_t *l, size_t row, int f0, uint64_t v0, uint64_t v1, size_t bucket) {
  fg_ledger_t *to = l != NULL ? l : &orphan_ledger;
  add(l, &to->classes[row][f0], 1);
  add(l, &to->classes[row][f0 + 1], v0);
  if (row == FG_CLASS_COUNT) add(l, &to->classes[row][f0 + 2], v1);
  if (bucket == SIZE_MAX || (row < FG_CLASS_COUNT && bucket == row + 1)) return;
  add(l, &to->histogram[bucket], 1);
  if (row < FG_CLASS_COUNT) add(l, &to->histogram[row + 1], (uint64_t)-1);
}

/* ---- leaks: a call stack per live block ------------------------------------------------------ */

#define LEAK_FRAMES 16
typedef struct leak_entry_s {
  uintptr_t addr; /* 0: empty, 1: deleted */
  uint64_t size;
  uint32_t stack;
} leak_entry_t;
typedef struct stack_entry_s {
  uint64_t hash;
  uint32_t depth;
  void *pc[LEAK_FRAMES];
} stack_entry_t;

static pthread_mutex_t leak_lock = PTHREAD_MUTEX_INITIALIZER;
static leak_entry_t *leak_table;
static size_t leak_cap, leak_used;
static stack_entry_t *stack_table;
static uint32_t *stack_index; /* open addressing over stack_table, entries are index + 1 */
static size_t stack_cap, stack_count;
static __thread bool in_capture __attribute__((tls_model("initial-exec")));
/* libunwind's unw_backtrace, loaded by _fg_stats_start when leaks are asked for: the
 * library is not a dependency of every program frugal is preloaded into. */
static int (*backtrace_fn)(void **frames, int max);

static uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdu;
  x ^= x >> 33;
  return x;
}

static void *table_alloc(size_t bytes) { return _fg_os_alloc_aligned(bytes, FG_OS_PAGE); }

static bool leak_grow(void) {
  size_t cap = leak_cap == 0 ? 4096 : leak_cap * 2;
  leak_entry_t *t = table_alloc(cap * sizeof *t);
  if (t == NULL) return false;
  leak_used = 0;
  for (size_t i = 0; i < leak_cap; i++) {
    if (leak_table[i].addr <= 1) continue;
    size_t j = mix(leak_table[i].addr) & (cap - 1);
    while (t[j].addr != 0) j = (j + 1) & (cap - 1);
    t[j] = leak_table[i];
    leak_used++;
  }
  if (leak_table != NULL) _fg_os_free(leak_table, leak_cap * sizeof *t);
  leak_table = t;
  leak_cap = cap;
  return true;
}

static bool stack_grow(void) {
  size_t cap = stack_cap == 0 ? 1024 : stack_cap * 2;
  stack_entry_t *t = table_alloc(cap * sizeof *t);
  uint32_t *index = table_alloc(cap * 2 * sizeof *index);
  if (t == NULL || index == NULL) return false;
  if (stack_table != NULL) {
    memcpy(t, stack_table, stack_count * sizeof *t);
    _fg_os_free(stack_table, stack_cap * sizeof *t);
    _fg_os_free(stack_index, stack_cap * 2 * sizeof *index);
  }
  for (size_t i = 0; i < stack_count; i++) {
    size_t j = t[i].hash & (cap * 2 - 1);
    while (index[j] != 0) j = (j + 1) & (cap * 2 - 1);
    index[j] = (uint32_t)i + 1;
  }
  stack_table = t;
  stack_index = index;
  stack_cap = cap;
  return true;
}

static uint32_t stack_intern(void **pc, uint32_t depth) {
  uint64_t h = depth;
  for (uint32_t i = 0; i < depth; i++) h = mix(h ^ (uint64_t)(uintptr_t)pc[i]);
  if (stack_count + 1 > stack_cap && !stack_grow()) return UINT32_MAX;
  size_t mask = stack_cap * 2 - 1;
  for (size_t j = h & mask;; j = (j + 1) & mask) {
    uint32_t e = stack_index[j];
    if (e == 0) {
      stack_entry_t *st = &stack_table[stack_count];
      st->hash = h;
      st->depth = depth;
      memcpy(st->pc, pc, depth * sizeof *pc);
      stack_index[j] = (uint32_t)++stack_count;
      return (uint32_t)stack_count - 1;
    }
    stack_entry_t *st = &stack_table[e - 1];
    if (st->hash == h && st->depth == depth && memcmp(st->pc, pc, depth * sizeof *pc) == 0) return e - 1;
  }
}

/* libunwind's unw_backtrace walks the stack without malloc on x86-64; the guard keeps any
 * allocation it might still make from recording (and unwinding) itself. */
static void leak_record(void *p, size_t size) {
  if (in_capture || backtrace_fn == NULL) return;
  in_capture = true;
  void *pc[LEAK_FRAMES + 4];
  int depth = backtrace_fn(pc, LEAK_FRAMES + 4);
  int skip = depth > 2 ? 2 : 0; /* leak_record and _fg_ledger_alloc */
  pthread_mutex_lock(&leak_lock);
  uint32_t stack =
      stack_intern(pc + skip, (uint32_t)(depth - skip > LEAK_FRAMES ? LEAK_FRAMES : depth - skip));
  if ((leak_used + 1) * 10 > leak_cap * 6 && !leak_grow()) stack = UINT32_MAX;
  if (stack != UINT32_MAX) {
    size_t mask = leak_cap - 1, j = mix((uintptr_t)p) & mask;
    while (leak_table[j].addr > 1 && leak_table[j].addr != (uintptr_t)p) j = (j + 1) & mask;
    if (leak_table[j].addr == 0) leak_used++;
    leak_table[j] = (leak_entry_t){(uintptr_t)p, size, stack};
  }
  pthread_mutex_unlock(&leak_lock);
  in_capture = false;
}

static void leak_forget(void *p) {
  pthread_mutex_lock(&leak_lock);
  if (leak_cap != 0) {
    size_t mask = leak_cap - 1;
    for (size_t j = mix((uintptr_t)p) & mask; leak_table[j].addr != 0; j = (j + 1) & mask) {
      if (leak_table[j].addr == (uintptr_t)p) {
        leak_table[j].addr = 1;
        break;
      }
    }
  }
  pthread_mutex_unlock(&leak_lock);
}

/* ---- recording ---------------------------------------------------------------------------------- */

/* The field list keeps each pair of counters in this order, so one helper counts both ends. */
_Static_assert(
    FG_F_bytes_requested == FG_F_allocations + 1 && FG_F_bytes_handed_out == FG_F_allocations + 2 &&
        FG_F_freed_requested == FG_F_frees + 1 && FG_F_freed_handed_out == FG_F_frees + 2,
    "frugal-stats.h: keep allocations/bytes_requested/bytes_handed_out and frees/freed_* adjacent");

void _fg_ledger_alloc(void *p, size_t size) {
  block_loc_t loc;
  if (!locate(p, &loc, true)) return;
  /* The unwinder's own allocations while it captures a stack (glibc's TLS block for
   * libunwind, once per thread) are frugal's doing, not the program's: left unknown, they
   * are counted at neither end. */
  size_t stored = in_capture ? 0 : size + 1;
  if (loc.slot != NULL)
    *loc.slot = (uint32_t)stored;
  else
    loc.large->large_requested = stored;
  if (stored == 0) return;
  fg_ledger_t *l = thread_ledger();
  count(l, loc.row, FG_F_allocations, size, loc.handed, bucket_of(size));
  if (leaks_on) leak_record(p, size);
  if (l != NULL && (++l->events & 63) == 0) _fg_ledger_sample();
}

size_t _fg_ledger_free(void *p) {
  block_loc_t loc;
  if (p == NULL || !locate(p, &loc, false)) return 0;
  size_t stored = loc.slot != NULL ? *loc.slot : loc.large->large_requested;
  if (stored == 0) return 0; /* handed out before the ledger started, or already freed */
  if (loc.slot != NULL)
    *loc.slot = 0;
  else
    loc.large->large_requested = 0;
  count(thread_ledger(), loc.row, FG_F_frees, stored - 1, loc.handed, SIZE_MAX);
  if (leaks_on) leak_forget(p);
  return stored - 1;
}

/* ---- merging -------------------------------------------------------------------------------------- */

static void merge_ledger(fg_stats_t *out, fg_ledger_t *l) {
  for (size_t r = 0; r < FG_STATS_CLASSES; r++) {
#define FG_X(name, help) \
  out->classes[r].name += atomic_load_explicit(&l->classes[r][FG_F_##name], memory_order_relaxed);
    FG_STATS_CLASS_FIELDS(FG_X)
#undef FG_X
  }
  for (size_t b = 0; b < FG_STATS_HIST_BUCKETS; b++)
    out->histogram[b] += atomic_load_explicit(&l->histogram[b], memory_order_relaxed);
  for (size_t r = 0; r < FG_CLASS_COUNT; r++) /* see count() */
    out->histogram[r + 1] += atomic_load_explicit(&l->classes[r][FG_F_allocations], memory_order_relaxed);
}

static void merge_heap(fg_heap_t *heap, void *arg) {
  fg_stats_t *out = arg;
#define FG_X(name, help) out->name += atomic_load_explicit(&heap->counts[FG_C_##name], memory_order_relaxed);
  FG_STATS_GLOBAL_FIELDS(FG_X)
#undef FG_X
  if (_fg_ledger_active) merge_ledger(out, &heap->ledger);
}

static uint64_t read_rss(void) {
  char buf[128];
  int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return 0;
  buf[n] = '\0';
  const char *c = buf;
  while (*c && *c != ' ') c++; /* skip size; the second field is resident pages */
  uint64_t pages = 0;
  for (c++; *c >= '0' && *c <= '9'; c++) pages = pages * 10 + (uint64_t)(*c - '0');
  return pages * (uint64_t)sysconf(_SC_PAGESIZE);
}

static void live_totals(const fg_stats_t *st, uint64_t *req, uint64_t *handed) {
  *req = *handed = 0;
  for (size_t r = 0; r < FG_STATS_CLASSES; r++) {
    *req += st->classes[r].bytes_requested - st->classes[r].freed_requested;
    *handed += st->classes[r].bytes_handed_out - st->classes[r].freed_handed_out;
  }
}

fg_export void fg_stats_get(fg_stats_t *out) {
  int saved = errno;
  memset(out, 0, sizeof *out);
  out->ledger_on = _fg_ledger_active;
#define FG_X(name, help) out->name = atomic_load_explicit(&_fg_counters[FG_C_##name], memory_order_relaxed);
  FG_STATS_GLOBAL_FIELDS(FG_X)
#undef FG_X
  _fg_heaps_foreach(merge_heap, out);
  _fg_heaps_held(out);
  merge_ledger(out, &orphan_ledger);
  for (size_t r = 0; r < FG_CLASS_COUNT; r++) { /* every block of a class has its size */
    fg_stats_class_t *c = &out->classes[r];
    c->block_size = _fg_class_size(r);
    c->bytes_handed_out = c->allocations * c->block_size;
    c->freed_handed_out = c->frees * c->block_size;
  }
  uint64_t req, handed;
  live_totals(out, &req, &handed);
  pthread_mutex_lock(&stats_lock);
  for (size_t r = 0; r < FG_STATS_CLASSES; r++) {
    fg_stats_class_t *c = &out->classes[r];
    uint64_t live = c->allocations - c->frees;
    if (live > peak_blocks[r]) peak_blocks[r] = live;
    c->peak_live_blocks = peak_blocks[r];
  }
  if (req > peak_requested) peak_requested = req;
  if (handed > peak_handed) peak_handed = handed;
  out->peak_live_requested = peak_requested;
  out->peak_live_handed_out = peak_handed;
  pthread_mutex_unlock(&stats_lock);
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  out->rss = read_rss();
  out->peak_rss = (uint64_t)ru.ru_maxrss * 1024;
  out->minor_faults = (uint64_t)ru.ru_minflt;
  out->major_faults = (uint64_t)ru.ru_majflt;
  out->user_us = (uint64_t)ru.ru_utime.tv_sec * 1000000 + (uint64_t)ru.ru_utime.tv_usec;
  out->sys_us = (uint64_t)ru.ru_stime.tv_sec * 1000000 + (uint64_t)ru.ru_stime.tv_usec;
  errno = saved;
}

/* A snapshot big enough to hold fg_stats_t lives outside any thread's stack. */
static fg_stats_t *snapshot_new(void) {
  fg_stats_t *st = _fg_os_alloc_aligned(sizeof *st, FG_OS_PAGE);
  if (st != NULL) fg_stats_get(st);
  return st;
}
static void snapshot_free(fg_stats_t *st) {
  if (st != NULL) _fg_os_free(st, sizeof *st);
}

/* Peaks (and the timeline, when asked) are sampled every sample_ms by whichever thread's
 * ledger event comes first after the period: no background thread. */
void _fg_ledger_sample(void) {
  uint64_t now = _fg_clock_ms(), due = atomic_load_explicit(&next_sample_at, memory_order_relaxed);
  if (now < due || !atomic_compare_exchange_strong(&next_sample_at, &due, now + sample_ms)) return;
  fg_stats_t *st = snapshot_new();
  if (st == NULL) return;
  if (timeline_on) {
    uint64_t req, handed;
    live_totals(st, &req, &handed);
    pthread_mutex_lock(&stats_lock);
    if (timeline_len == FG_STATS_TIMELINE_MAX) { /* keep every other sample, sample half as often */
      for (size_t i = 0; i < FG_STATS_TIMELINE_MAX / 2; i++) timeline[i] = timeline[2 * i];
      timeline_len = FG_STATS_TIMELINE_MAX / 2;
      sample_ms *= 2;
    }
    timeline[timeline_len++] = (fg_stats_sample_t){now - start_ms, req, handed, st->rss};
    pthread_mutex_unlock(&stats_lock);
  }
  snapshot_free(st);
}

/* ---- writing: one formatter for the text report and the JSON --------------------------------- */

typedef struct writer_s {
  char *buf;
  size_t size, len;
  int fd; /* >= 0: flush to it when the buffer fills */
} writer_t;

static void w_flush(writer_t *w) {
  if (w->fd < 0 || w->len == 0) return;
  size_t off = 0;
  while (off < w->len) {
    ssize_t n = write(w->fd, w->buf + off, w->len - off);
    if (n <= 0) break;
    off += (size_t)n;
  }
  w->len = 0;
}

__attribute__((format(printf, 2, 3))) static void w_printf(writer_t *w, const char *fmt, ...) {
  char tmp[512];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  size_t len = (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1;
  if (w->fd >= 0 && w->len + len > w->size) w_flush(w);
  if (w->len < w->size) memcpy(w->buf + w->len, tmp, w->len + len <= w->size ? len : w->size - w->len);
  w->len += len;
}

/* JSON string: escapes quotes, backslashes and control characters. */
static void w_jstr(writer_t *w, const char *s) {
  w_printf(w, "\"");
  for (; s != NULL && *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\')
      w_printf(w, "\\%c", c);
    else if (c < 0x20)
      w_printf(w, "\\u%04x", c);
    else
      w_printf(w, "%c", c);
  }
  w_printf(w, "\"");
}

typedef struct advice_s {
  uint64_t p50, p90, p99;
  size_t waste[5], churn[5];
  size_t nwaste, nchurn;
} advice_t;

static uint64_t quantile_size(const fg_stats_t *st, uint64_t total, double q) {
  uint64_t need = (uint64_t)((double)total * q + 0.5), cum = 0;
  for (size_t b = 0; b < FG_STATS_HIST_BUCKETS; b++) {
    cum += st->histogram[b];
    if (cum >= need && cum > 0)
      return b + 1 < FG_STATS_HIST_BUCKETS ? fg_stats_bucket_lo(b + 1) - 1 : SIZE_MAX;
  }
  return 0;
}

static void top5(const fg_stats_t *st, uint64_t (*key)(const fg_stats_class_t *), size_t *out, size_t *n) {
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
static uint64_t waste_key(const fg_stats_class_t *c) { return c->bytes_handed_out - c->bytes_requested; }
static uint64_t churn_key(const fg_stats_class_t *c) { return c->frees; }

static void advise(const fg_stats_t *st, uint64_t allocations, advice_t *a) {
  a->p50 = quantile_size(st, allocations, 0.50);
  a->p90 = quantile_size(st, allocations, 0.90);
  a->p99 = quantile_size(st, allocations, 0.99);
  top5(st, waste_key, a->waste, &a->nwaste);
  top5(st, churn_key, a->churn, &a->nchurn);
}

typedef struct totals_s {
  uint64_t allocations, frees, requested, handed, live_blocks, live_requested, live_handed;
} totals_t;

static totals_t totals_of(const fg_stats_t *st) {
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

static double pct(uint64_t a, uint64_t b) { return b == 0 ? 100.0 : 100.0 * (double)a / (double)b; }

/* Symbol of a return address: the module, its offset there, and the dynamic symbol. */
typedef struct frame_sym_s {
  const char *module, *symbol;
  uintptr_t offset;
  bool ours;
} frame_sym_t;

static void *self_base;

static frame_sym_t symbolize(void *pc) {
  frame_sym_t f = {"?", NULL, (uintptr_t)pc, false};
  Dl_info info;
  if (dladdr(pc, &info) != 0) {
    f.module = info.dli_fname != NULL ? info.dli_fname : "?";
    f.offset = (uintptr_t)pc - (uintptr_t)info.dli_fbase;
    f.symbol = info.dli_sname;
    f.ours = info.dli_fbase == self_base;
  }
  return f;
}

typedef struct site_s {
  uint64_t bytes, count;
  uint32_t stack;
} site_t;

/* Live blocks grouped by call site, the top `max` by bytes; returns how many. */
static size_t leak_sites(site_t *out, size_t max, uint64_t *total_bytes, uint64_t *total_count) {
  *total_bytes = *total_count = 0;
  size_t n = 0;
  pthread_mutex_lock(&leak_lock);
  site_t *acc = stack_count > 0 ? table_alloc(stack_count * sizeof *acc) : NULL;
  if (acc != NULL) {
    for (size_t i = 0; i < leak_cap; i++) {
      if (leak_table[i].addr <= 1) continue;
      acc[leak_table[i].stack].bytes += leak_table[i].size;
      acc[leak_table[i].stack].count++;
      *total_bytes += leak_table[i].size;
      (*total_count)++;
    }
    for (n = 0; n < max; n++) {
      size_t best = SIZE_MAX;
      for (size_t s = 0; s < stack_count; s++)
        if (acc[s].count > 0 && (best == SIZE_MAX || acc[s].bytes > acc[best].bytes)) best = s;
      if (best == SIZE_MAX) break;
      out[n] = (site_t){acc[best].bytes, acc[best].count, (uint32_t)best};
      acc[best].count = 0;
    }
    _fg_os_free(acc, stack_count * sizeof *acc);
  }
  pthread_mutex_unlock(&leak_lock);
  return n;
}

/* Frames of a site, without frugal's own (the allocator entry points). */
static size_t site_frames(uint32_t stack, frame_sym_t *out) {
  size_t n = 0;
  Dl_info info;
  if (self_base == NULL && dladdr((void *)fg_stats_print, &info) != 0) self_base = info.dli_fbase;
  pthread_mutex_lock(&leak_lock);
  const stack_entry_t *st = &stack_table[stack];
  for (uint32_t i = 0; i < st->depth; i++) {
    frame_sym_t f = symbolize(st->pc[i]);
    if (f.ours && n == 0) continue;
    out[n++] = f;
  }
  pthread_mutex_unlock(&leak_lock);
  return n;
}

#define LEAK_TOP 20

static void write_json(writer_t *w, const fg_stats_t *st) {
  totals_t t = totals_of(st);
  advice_t a;
  advise(st, t.allocations, &a);
  w_printf(w, "{\"schema\":\"frugal-ledger/1\",\"version\":\"%s\",\"pid\":%d,\"ledger\":%s,", FRUGAL_VERSION,
           (int)getpid(), st->ledger_on ? "true" : "false");
  w_printf(w,
           "\"options\":{\"decay_ms\":%ld,\"large_cache_mb\":%ld,\"segment_cache_mb\":%ld,"
           "\"stats_interval_ms\":%ld,\"leaks\":%s},",
           _fg_option(FG_OPTION_DECAY_MS), _fg_option(FG_OPTION_LARGE_CACHE_MB),
           _fg_option(FG_OPTION_SEGMENT_CACHE_MB), _fg_option(FG_OPTION_STATS_INTERVAL_MS),
           leaks_on ? "true" : "false");
  w_printf(w,
           "\"totals\":{\"allocations\":%lu,\"frees\":%lu,\"bytes_requested\":%lu,"
           "\"bytes_handed_out\":%lu,\"efficiency\":%.4f},",
           t.allocations, t.frees, t.requested, t.handed,
           t.handed ? (double)t.requested / (double)t.handed : 1.0);
  w_printf(w,
           "\"live\":{\"blocks\":%lu,\"bytes_requested\":%lu,\"bytes_handed_out\":%lu,"
           "\"peak_bytes_requested\":%lu,\"peak_bytes_handed_out\":%lu},",
           t.live_blocks, t.live_requested, t.live_handed, st->peak_live_requested, st->peak_live_handed_out);
  w_printf(w, "\"classes\":[");
  bool first = true;
  for (size_t r = 0; r < FG_STATS_CLASSES; r++) {
    const fg_stats_class_t *c = &st->classes[r];
    if (c->allocations == 0 && c->frees == 0) continue;
    w_printf(w, "%s{\"class\":%zu,\"block_size\":%lu,\"large\":%s", first ? "" : ",", r, c->block_size,
             r == FG_CLASS_COUNT ? "true" : "false");
#define FG_X(name, help) w_printf(w, ",\"" #name "\":%lu", c->name);
    FG_STATS_CLASS_FIELDS(FG_X)
#undef FG_X
    w_printf(w,
             ",\"live_blocks\":%lu,\"peak_live_blocks\":%lu,\"live_bytes_requested\":%lu,"
             "\"live_bytes_handed_out\":%lu}",
             c->allocations - c->frees, c->peak_live_blocks, c->bytes_requested - c->freed_requested,
             c->bytes_handed_out - c->freed_handed_out);
    first = false;
  }
  w_printf(w, "],\"histogram\":[");
  first = true;
  for (size_t b = 0; b < FG_STATS_HIST_BUCKETS; b++) {
    if (st->histogram[b] == 0) continue;
    uint64_t hi = b + 1 < FG_STATS_HIST_BUCKETS ? fg_stats_bucket_lo(b + 1) - 1 : SIZE_MAX;
    w_printf(w, "%s{\"lo\":%zu,\"hi\":%lu,\"count\":%lu}", first ? "" : ",", fg_stats_bucket_lo(b), hi,
             st->histogram[b]);
    first = false;
  }
  w_printf(w, "],\"advice\":{\"p50_size\":%lu,\"p90_size\":%lu,\"p99_size\":%lu,\"waste_classes\":[", a.p50,
           a.p90, a.p99);
  for (size_t i = 0; i < a.nwaste; i++) w_printf(w, "%s%zu", i ? "," : "", a.waste[i]);
  w_printf(w, "],\"churn_classes\":[");
  for (size_t i = 0; i < a.nchurn; i++) w_printf(w, "%s%zu", i ? "," : "", a.churn[i]);
  w_printf(w, "]},\"counters\":{");
  first = true;
#define FG_X(name, help)                                          \
  w_printf(w, "%s\"" #name "\":%lu", first ? "" : ",", st->name); \
  first = false;
  FG_STATS_GLOBAL_FIELDS(FG_X)
#undef FG_X
  w_printf(w, "},\"held\":{");
  first = true;
#define FG_X(name, help)                                          \
  w_printf(w, "%s\"" #name "\":%lu", first ? "" : ",", st->name); \
  first = false;
  FG_STATS_HELD_FIELDS(FG_X)
#undef FG_X
  w_printf(w,
           "},\"process\":{\"rss\":%lu,\"peak_rss\":%lu,\"minor_faults\":%lu,\"major_faults\":%lu,"
           "\"user_us\":%lu,\"sys_us\":%lu},",
           st->rss, st->peak_rss, st->minor_faults, st->major_faults, st->user_us, st->sys_us);
  w_printf(w, "\"timeline\":[");
  pthread_mutex_lock(&stats_lock);
  for (size_t i = 0; i < timeline_len; i++)
    w_printf(w, "%s{\"t_ms\":%lu,\"live_bytes_requested\":%lu,\"live_bytes_handed_out\":%lu,\"rss\":%lu}",
             i ? "," : "", timeline[i].t_ms, timeline[i].live_requested, timeline[i].live_handed_out,
             timeline[i].rss);
  pthread_mutex_unlock(&stats_lock);
  w_printf(w, "],\"leaks\":");
  if (!leaks_on) {
    w_printf(w, "null}\n");
    return;
  }
  site_t sites[LEAK_TOP];
  uint64_t lbytes, lcount;
  size_t n = leak_sites(sites, LEAK_TOP, &lbytes, &lcount);
  w_printf(w, "{\"blocks\":%lu,\"bytes\":%lu,\"sites\":[", lcount, lbytes);
  for (size_t i = 0; i < n; i++) {
    w_printf(w, "%s{\"bytes\":%lu,\"count\":%lu,\"frames\":[", i ? "," : "", sites[i].bytes, sites[i].count);
    frame_sym_t frames[LEAK_FRAMES];
    size_t nf = site_frames(sites[i].stack, frames);
    for (size_t f = 0; f < nf; f++) {
      w_printf(w, "%s{\"module\":", f ? "," : "");
      w_jstr(w, frames[f].module);
      w_printf(w, ",\"offset\":%lu,\"symbol\":", (unsigned long)frames[f].offset);
      if (frames[f].symbol != NULL)
        w_jstr(w, frames[f].symbol);
      else
        w_printf(w, "null");
      w_printf(w, "}");
    }
    w_printf(w, "]}");
  }
  w_printf(w, "]}}\n");
}

static const char *human(uint64_t n, char *buf, size_t size) {
  const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = (double)n;
  int u = 0;
  while (v >= 1024 && u < 4) v /= 1024, u++;
  snprintf(buf, size, u == 0 ? "%.0f %s" : "%.1f %s", v, unit[u]);
  return buf;
}

static void write_leaks_text(writer_t *w) {
  site_t sites[LEAK_TOP];
  uint64_t lbytes, lcount;
  size_t n = leak_sites(sites, LEAK_TOP, &lbytes, &lcount);
  char h[32];
  w_printf(w, "frugal: leaks: %lu blocks, %s live at exit, top %zu call sites by bytes\n", lcount,
           human(lbytes, h, sizeof h), n);
  for (size_t i = 0; i < n; i++) {
    w_printf(w, "  #%zu  %s in %lu blocks\n", i + 1, human(sites[i].bytes, h, sizeof h), sites[i].count);
    frame_sym_t frames[LEAK_FRAMES];
    size_t nf = site_frames(sites[i].stack, frames);
    for (size_t f = 0; f < nf && f < 8; f++)
      w_printf(w, "      %s (%s+0x%lx)\n", frames[f].symbol ? frames[f].symbol : "??", frames[f].module,
               (unsigned long)frames[f].offset);
  }
}

static void write_text(writer_t *w, const fg_stats_t *st) {
  totals_t t = totals_of(st);
  char a1[32], a2[32], a3[32], a4[32], a5[32], a6[32];
  w_printf(w, "frugal: ledger of pid %d (frugal %s)\n", (int)getpid(), FRUGAL_VERSION);
  if (st->ledger_on) {
    w_printf(w, "  blocks: %lu allocated, %lu freed, %lu live\n", t.allocations, t.frees, t.live_blocks);
    w_printf(w, "  requested %s, handed out %s: %.1f %% used (seed 1's efficiency)\n",
             human(t.requested, a1, sizeof a1), human(t.handed, a2, sizeof a2), pct(t.requested, t.handed));
    w_printf(w, "  live: requested %s in blocks of %s (%.1f %% used); peak handed out %s\n",
             human(t.live_requested, a1, sizeof a1), human(t.live_handed, a2, sizeof a2),
             pct(t.live_requested, t.live_handed), human(st->peak_live_handed_out, a3, sizeof a3));
    advice_t a;
    advise(st, t.allocations, &a);
    w_printf(w, "  sizes: 50 %% of allocations <= %lu B, 90 %% <= %lu B, 99 %% <= %lu B\n", a.p50, a.p90,
             a.p99);
    w_printf(w, "  %-10s %12s %12s %10s %12s %12s %7s\n", "class", "allocs", "frees", "live", "requested",
             "handed out", "% used");
    for (size_t r = 0; r < FG_STATS_CLASSES; r++) {
      const fg_stats_class_t *c = &st->classes[r];
      if (c->allocations == 0) continue;
      char name[24];
      if (r == FG_CLASS_COUNT)
        snprintf(name, sizeof name, "large");
      else
        snprintf(name, sizeof name, "%lu", c->block_size);
      w_printf(w, "  %-10s %12lu %12lu %10lu %12s %12s %6.1f\n", name, c->allocations, c->frees,
               c->allocations - c->frees, human(c->bytes_requested, a1, sizeof a1),
               human(c->bytes_handed_out, a2, sizeof a2), pct(c->bytes_requested, c->bytes_handed_out));
    }
  } else {
    w_printf(w, "  (ledger off: set FRUGAL_STATS=1 for per-class counts)\n");
  }
  w_printf(w, "  thread cache: %lu misses (page refills); %lu pages started, %lu released\n", st->slow_allocs,
           st->pages_new, st->pages_released);
  w_printf(w, "  large cache: %lu hits (%lu reshaped), %lu misses, %lu evictions, %lu decays\n", st->large_cache_hits, st->large_cache_reshapes,
           st->large_cache_misses, st->large_cache_evictions, st->large_cache_decays);
  w_printf(w, "  segment cache: %lu hits, %lu misses, %lu evictions, %lu decays\n", st->segment_cache_hits,
           st->segment_cache_misses, st->segment_cache_evictions, st->segment_cache_decays);
  w_printf(w, "  held for reuse: large cache %s, kept pages %s, free pages %s (+ %s given back), segment cache %s (+ %s given back)\n",
           human(st->large_cache_bytes, a1, sizeof a1), human(st->kept_page_bytes, a2, sizeof a2),
           human(st->free_page_bytes, a3, sizeof a3), human(st->free_page_returned_bytes, a4, sizeof a4),
           human(st->segment_cache_bytes, a5, sizeof a5), human(st->segment_cache_returned_bytes, a6, sizeof a6));
  w_printf(w, "  given back: %s by decay passes, %s by the purger thread (%lu passes), %s out of memory, %s by fg_collect, %s as pages grew\n",
           human(st->returned_decay_bytes, a1, sizeof a1), human(st->returned_idle_bytes, a2, sizeof a2),
           st->purger_passes, human(st->returned_oom_bytes, a3, sizeof a3), human(st->returned_collect_bytes, a4, sizeof a4),
           human(st->returned_growth_bytes, a5, sizeof a5));
  w_printf(w, "  OS: mmap %lu (%s), munmap %lu (%s), madvise %lu (%s), mremap %lu\n", st->mmap_calls,
           human(st->mmap_bytes, a1, sizeof a1), st->munmap_calls, human(st->munmap_bytes, a2, sizeof a2),
           st->madvise_calls, human(st->madvise_bytes, a3, sizeof a3), st->mremap_calls);
  w_printf(
      w,
      "  hidden costs: fresh pages %s small + %s large (each 4 KiB a fault + zeroing); process: %lu minor "
      "faults, sys %.3f s\n",
      human(st->fresh_bytes, a1, sizeof a1), human(st->fresh_large_bytes, a2, sizeof a2), st->minor_faults,
      (double)st->sys_us / 1e6);
  w_printf(w, "  RSS: %s now, %s peak\n", human(st->rss, a1, sizeof a1), human(st->peak_rss, a2, sizeof a2));
  if (leaks_on) write_leaks_text(w);
}

fg_export size_t fg_stats_json(char *buf, size_t size) {
  fg_stats_t *st = snapshot_new();
  if (st == NULL) return 0;
  writer_t w = {buf, size > 0 ? size - 1 : 0, 0, -1};
  write_json(&w, st);
  if (size > 0) buf[w.len < size ? w.len : size - 1] = '\0';
  snapshot_free(st);
  return w.len;
}

static void report_to_fd(int fd, bool json) {
  fg_stats_t *st = snapshot_new();
  char *buf = table_alloc(1 << 16);
  if (st != NULL && buf != NULL) {
    writer_t w = {buf, 1 << 16, 0, fd};
    if (json)
      write_json(&w, st);
    else
      write_text(&w, st);
    w_flush(&w);
  }
  if (buf != NULL) _fg_os_free(buf, 1 << 16);
  snapshot_free(st);
}

fg_export bool fg_stats_write(const char *path) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  report_to_fd(fd, true);
  return close(fd) == 0;
}

fg_export void fg_stats_print(void) { report_to_fd(2, false); }

bool _fg_ledger_active, _fg_ledger_fast;

/* From the library constructor, not from inside the first malloc: dlopen allocates. Blocks
 * allocated before it (by other constructors) have no stack and are not in the leak report. */
void _fg_stats_start(void) {
  if (!leaks_on) return;
  in_capture = true;
  void *lib = dlopen("libunwind.so.8", RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) lib = dlopen("libunwind.so", RTLD_NOW | RTLD_LOCAL);
  void *fn = lib != NULL ? dlsym(lib, "unw_backtrace") : NULL;
  in_capture = false;
  if (fn == NULL) {
    _fg_warning("FRUGAL_LEAKS: libunwind not found (apt-get install libunwind8): ", "no call stacks");
    return;
  }
  memcpy(&backtrace_fn, &fn, sizeof fn);
}

void _fg_stats_init(void) {
  leaks_on = _fg_option(FG_OPTION_LEAKS) != 0;
  _fg_ledger_active = leaks_on || _fg_option(FG_OPTION_STATS) != 0 || _fg_option(FG_OPTION_STATS_FILE) != 0;
  _fg_ledger_fast = _fg_ledger_active && !leaks_on && !_fg_secure_on; /* secure_init ran */
  long interval = _fg_option(FG_OPTION_STATS_INTERVAL_MS);
  timeline_on = interval > 0;
  sample_ms = interval > 0 ? (uint64_t)interval : 100;
  start_ms = _fg_clock_ms();
}

/* At exit (this library is finalized after the program's own destructors). */
/* FRUGAL_STATS_FILE with "%p" in it names one file per process (a shell script's children
 * would otherwise overwrite each other's ledger, the last to exit winning). */
static void expand_pid(const char *path, char *out, size_t size) {
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

__attribute__((destructor)) static void stats_at_exit(void) {
  if (!_fg_ledger_active) return;
  in_capture = true; /* frees during the report must not touch the leak table's lock order */
  const char *file = fg_option_get_string(FG_OPTION_STATS_FILE);
  if (file != NULL) {
    char path[4096];
    expand_pid(file, path, sizeof path);
    if (!fg_stats_write(path)) _fg_warning("cannot write FRUGAL_STATS_FILE: ", path);
  }
  if (_fg_option(FG_OPTION_STATS) != 0)
    fg_stats_print();
  else if (leaks_on && file == NULL) { /* with a file, the leaks are in it */
    char *buf = table_alloc(1 << 16);
    if (buf != NULL) {
      writer_t w = {buf, 1 << 16, 0, 2};
      write_leaks_text(&w);
      w_flush(&w);
      _fg_os_free(buf, 1 << 16);
    }
  }
}
