/* stats.c — the ledger's counting (reports: stats_report.c). Process-wide counters are always
 * kept, on slow paths; the per-class ledger only when the mode has FG_MODE_LEDGER, each thread
 * counting into its own heap's ledger with plain stores, merged by readers. */
#define _GNU_SOURCE
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <sys/resource.h>
#include <unistd.h>

_Atomic(uint64_t) _fg_counters[FG_C_COUNT];

static bool leaks_on;
static uint64_t sample_ms; /* peak sampling (and timeline) period */
static bool timeline_on;
static _Atomic(uint64_t) next_sample_at;
static fg_big_zeros fg_ledger_t orphan_ledger;                 /* frees by threads that never allocated */
static pthread_mutex_t stats_lock = PTHREAD_MUTEX_INITIALIZER; /* peaks, timeline, reports */
static fg_big_zeros uint64_t peak_blocks[FG_STATS_CLASSES];
static uint64_t peak_requested, peak_handed;
static fg_big_zeros fg_stats_sample_t timeline[FG_STATS_TIMELINE_MAX];
static size_t timeline_len;
static uint64_t start_ms;

/* ---- histogram buckets: 0, then one per size class, the classes' formula continued ------- */

/* A request's bucket is its size class + 1 (the class formula continues past the largest
 * class): the inline ledger path counts it from the page's class without recomputing. */
static fg_rare size_t bucket_of(size_t size) {
  if (size == 0) return 0;
  size_t b = _fg_class_of(size) + 1;
  return b < FG_STATS_HIST_BUCKETS ? b : FG_STATS_HIST_BUCKETS - 1;
}

fg_export fg_rare size_t fg_stats_bucket_lo(size_t i) {
  return i == 0 ? 0 : i == 1 ? 1 : _fg_class_formula(i - 2) + 1;
}

/* ---- where a block's numbers live ---------------------------------------------------------- */

typedef struct block_loc_s {
  size_t row;     /* size class, or FG_CLASS_COUNT for large */
  size_t handed;  /* bytes handed out */
  uint32_t *slot; /* small: the page's requested-size entry */
  fg_segment_t *large;
} block_loc_t;

static fg_rare bool locate(const void *p, block_loc_t *loc, bool create) {
  fg_segment_t *s = _fg_segment_of(p);
  if (!_fg_segment_valid(s)) return false;
  loc->slot = NULL;
  loc->large = NULL;
  if (s->kind == FG_SEG_LARGE) { /* a profile sample of a small request: its class's row */
    bool small = s->sampled && s->sample_size <= FG_CLASS_MAX;
    loc->row = small ? _fg_class_of(s->sample_size) : FG_CLASS_COUNT;
    loc->handed = small ? _fg_class_size(loc->row) : s->mapped - s->large_offset - _fg_secure_guard();
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
static fg_rare fg_ledger_t *thread_ledger(void) {
  fg_heap_t *heap = _fg_heap();
  return heap != &_fg_heap_empty ? _fg_heap_ledger(heap) : NULL;
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
static fg_rare void count(fg_ledger_t *l, size_t row, int f0, uint64_t v0, uint64_t v1, size_t bucket) {
  fg_ledger_t *to = l != NULL ? l : &orphan_ledger;
  add(l, &to->classes[row][f0], 1);
  add(l, &to->classes[row][f0 + 1], v0);
  if (row == FG_CLASS_COUNT) add(l, &to->classes[row][f0 + 2], v1);
  if (bucket == SIZE_MAX || (row < FG_CLASS_COUNT && bucket == row + 1)) return;
  add(l, &to->histogram[bucket], 1);
  if (row < FG_CLASS_COUNT) add(l, &to->histogram[row + 1], (uint64_t)-1);
}

/* ---- leaks: a call stack per live block ------------------------------------------------------ */

typedef struct leak_entry_s {
  uintptr_t addr; /* 0: empty, 1: deleted */
  uint64_t size;
  uint32_t stack;
} leak_entry_t;

static pthread_mutex_t leak_lock = PTHREAD_MUTEX_INITIALIZER;
static leak_entry_t *leak_table;
static size_t leak_cap, leak_used;

static fg_rare bool leak_grow(void) {
  size_t cap = leak_cap == 0 ? 4096 : leak_cap * 2;
  leak_entry_t *t = _fg_os_alloc_aligned(cap * sizeof *t, FG_OS_PAGE);
  if (t == NULL) return false;
  leak_used = 0;
  for (size_t i = 0; i < leak_cap; i++) {
    if (leak_table[i].addr <= 1) continue;
    size_t j = _fg_mix(leak_table[i].addr) & (cap - 1);
    while (t[j].addr != 0) j = (j + 1) & (cap - 1);
    t[j] = leak_table[i];
    leak_used++;
  }
  if (leak_table != NULL) _fg_os_free(leak_table, leak_cap * sizeof *t);
  leak_table = t;
  leak_cap = cap;
  return true;
}

static fg_rare void leak_record(void *p, size_t size) {
  uint32_t stack = _fg_stack_capture(2); /* leak_record and _fg_ledger_alloc */
  if (stack == FG_NO_STACK) return;
  pthread_mutex_lock(&leak_lock);
  if ((leak_used + 1) * 10 <= leak_cap * 6 || leak_grow()) {
    size_t mask = leak_cap - 1, j = _fg_mix((uintptr_t)p) & mask;
    while (leak_table[j].addr > 1 && leak_table[j].addr != (uintptr_t)p) j = (j + 1) & mask;
    if (leak_table[j].addr == 0) leak_used++;
    leak_table[j] = (leak_entry_t){(uintptr_t)p, size, stack};
  }
  pthread_mutex_unlock(&leak_lock);
}

static fg_rare void leak_forget(void *p) {
  pthread_mutex_lock(&leak_lock);
  if (leak_cap != 0) {
    size_t mask = leak_cap - 1;
    for (size_t j = _fg_mix((uintptr_t)p) & mask; leak_table[j].addr != 0; j = (j + 1) & mask) {
      if (leak_table[j].addr == (uintptr_t)p) {
        leak_table[j].addr = 1;
        break;
      }
    }
  }
  pthread_mutex_unlock(&leak_lock);
}

fg_rare size_t _fg_leak_sites(fg_site_t *out, size_t max, uint64_t *total_bytes, uint64_t *total_count) {
  *total_bytes = *total_count = 0;
  size_t n = 0, stacks = _fg_stack_count();
  pthread_mutex_lock(&leak_lock);
  fg_site_t *acc = stacks > 0 ? _fg_os_alloc_aligned(stacks * sizeof *acc, FG_OS_PAGE) : NULL;
  if (acc != NULL) {
    for (size_t i = 0; i < leak_cap; i++) {
      if (leak_table[i].addr <= 1 || leak_table[i].stack >= stacks) continue;
      acc[leak_table[i].stack].bytes += leak_table[i].size;
      acc[leak_table[i].stack].count++;
      *total_bytes += leak_table[i].size;
      (*total_count)++;
    }
    for (n = 0; n < max; n++) {
      size_t best = SIZE_MAX;
      for (size_t s = 0; s < stacks; s++)
        if (acc[s].count > 0 && (best == SIZE_MAX || acc[s].bytes > acc[best].bytes)) best = s;
      if (best == SIZE_MAX) break;
      out[n] = (fg_site_t){acc[best].bytes, acc[best].count, (uint32_t)best};
      acc[best].count = 0;
    }
    _fg_os_free(acc, stacks * sizeof *acc);
  }
  pthread_mutex_unlock(&leak_lock);
  return n;
}

/* ---- recording ---------------------------------------------------------------------------------- */

/* The field list keeps each pair of counters in this order, so one helper counts both ends. */
_Static_assert(
    FG_F_bytes_requested == FG_F_allocations + 1 && FG_F_bytes_handed_out == FG_F_allocations + 2 &&
        FG_F_freed_requested == FG_F_frees + 1 && FG_F_freed_handed_out == FG_F_frees + 2,
    "frugal-stats.h: keep allocations/bytes_requested/bytes_handed_out and frees/freed_* adjacent");

fg_rare void _fg_ledger_alloc(void *p, size_t size) {
  block_loc_t loc;
  if (!locate(p, &loc, true)) return;
  /* The unwinder's own allocations while it captures a stack (glibc's TLS block for
   * libunwind, once per thread) are frugal's doing, not the program's: left unknown, they
   * are counted at neither end. */
  size_t stored = _fg_own_doing() ? 0 : size + 1;
  if (loc.slot != NULL)
    *loc.slot = (uint32_t)stored;
  else
    loc.large->large_requested = stored;
  if (stored == 0) return;
  fg_ledger_t *l = thread_ledger();
  count(l, loc.row, FG_F_allocations, size, loc.handed, bucket_of(size));
  if (leaks_on) leak_record(p, size);
}

fg_rare void *_fg_ledger_rebucket(const fg_page_t *page, size_t size, void *b) {
  size_t bucket = bucket_of(size), own = (size_t)page->class_idx + 1u;
  if (bucket != own) {
    fg_ledger_t *l = _fg_heap_ledger(page->heap);
    _fg_bump(&l->histogram[bucket], 1);
    _fg_bump(&l->histogram[own], (uint64_t)-1);
  }
  return b;
}

fg_rare size_t _fg_ledger_free(void *p) {
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

static fg_rare void merge_ledger(fg_stats_t *out, fg_ledger_t *l) {
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

static fg_rare void merge_heap(fg_heap_t *heap, void *arg) {
  fg_stats_t *out = arg;
#define FG_X(name, help) out->name += atomic_load_explicit(&heap->counts[FG_C_##name], memory_order_relaxed);
  FG_STATS_GLOBAL_FIELDS(FG_X)
#undef FG_X
  if (_fg_ledger_active()) merge_ledger(out, _fg_heap_ledger(heap));
}

static fg_rare uint64_t read_rss(void) {
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

/* The peak resident size of this process image: /proc/self/status's VmHWM. getrusage's
 * ru_maxrss carries the peak of the image before an exec (a program started by python3 showed
 * python's 37.6 MiB beside its own 3.3). */
static fg_rare uint64_t read_hwm(void) {
  char buf[2048];
  int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return 0;
  buf[n] = '\0';
  const char *c = strstr(buf, "VmHWM:");
  if (c == NULL) return 0;
  uint64_t kb = 0;
  for (c += 6; *c == ' ' || *c == '\t'; c++) {
  }
  for (; *c >= '0' && *c <= '9'; c++) kb = kb * 10 + (uint64_t)(*c - '0');
  return kb * 1024;
}

static fg_rare void live_totals(const fg_stats_t *st, uint64_t *req, uint64_t *handed) {
  *req = *handed = 0;
  for (size_t r = 0; r < FG_STATS_CLASSES; r++) {
    *req += st->classes[r].bytes_requested - st->classes[r].freed_requested;
    *handed += st->classes[r].bytes_handed_out - st->classes[r].freed_handed_out;
  }
}

fg_export fg_rare void fg_stats_get(fg_stats_t *out) {
  int saved = errno;
  memset(out, 0, sizeof *out);
  out->ledger_on = _fg_ledger_active();
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
  out->peak_rss = read_hwm();
  if (out->peak_rss < out->rss) out->peak_rss = out->rss;
  out->minor_faults = (uint64_t)ru.ru_minflt;
  out->major_faults = (uint64_t)ru.ru_majflt;
  out->user_us = (uint64_t)ru.ru_utime.tv_sec * 1000000 + (uint64_t)ru.ru_utime.tv_usec;
  out->sys_us = (uint64_t)ru.ru_stime.tv_sec * 1000000 + (uint64_t)ru.ru_stime.tv_usec;
  errno = saved;
}

/* A snapshot big enough to hold fg_stats_t lives outside any thread's stack. */
fg_rare fg_stats_t *_fg_stats_snapshot(void) {
  fg_stats_t *st = _fg_os_alloc_aligned(sizeof *st, FG_OS_PAGE);
  if (st != NULL) fg_stats_get(st);
  return st;
}
fg_rare void _fg_stats_snapshot_free(fg_stats_t *st) {
  if (st != NULL) _fg_os_free(st, sizeof *st);
}

/* Peaks (and the timeline, when asked) are sampled every sample_ms by whichever thread's
 * sampler countdown trips first after the period (sample.c): no background thread. */
fg_rare void _fg_ledger_sample(void) {
  uint64_t now = _fg_clock_ms(), due = atomic_load_explicit(&next_sample_at, memory_order_relaxed);
  if (now < due || !atomic_compare_exchange_strong(&next_sample_at, &due, now + sample_ms)) return;
  fg_stats_t *st = _fg_stats_snapshot();
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
    uint64_t held = st->large_cache_bytes + st->kept_page_bytes + st->free_page_bytes + st->segment_cache_bytes;
    timeline[timeline_len++] = (fg_stats_sample_t){now - start_ms, req, handed, st->rss, held};
    pthread_mutex_unlock(&stats_lock);
  }
  _fg_stats_snapshot_free(st);
}

/* From the library constructor, not from inside the first malloc: dlopen allocates. Blocks
 * allocated before it (by other constructors) have no stack and are not in the leak report. */
void _fg_stats_start(void) {
  if (leaks_on) _fg_stacks_load("FRUGAL_LEAKS");
}

void _fg_stats_init(void) {
  leaks_on = _fg_option(FG_OPTION_LEAKS) != 0;
  long interval = _fg_option(FG_OPTION_STATS_INTERVAL_MS);
  timeline_on = interval > 0;
  sample_ms = interval > 0 ? (uint64_t)interval : 100;
  start_ms = _fg_clock_ms();
}


fg_rare size_t _fg_stats_timeline(fg_stats_sample_t *out) {
  pthread_mutex_lock(&stats_lock);
  size_t n = timeline_len;
  memcpy(out, timeline, n * sizeof *out);
  pthread_mutex_unlock(&stats_lock);
  return n;
}
