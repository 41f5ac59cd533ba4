/* sample.c — the allocation sampler, and the heap profile drawn from it. Allocations count
 * bytes down (their size plus FG_SAMPLE_CHARGE): malloc's fast path in the page it pops from,
 * in blocks, with the add that marks the block in use (internal.h's _fg_page_charge); every
 * other allocation in its thread's heap. When a count goes below zero the allocation is a
 * trip: either a profile sample, served as a large block whose header records it, so that
 * free() finds it on the large path it already takes and the fast free path pays nothing, or
 * a candidate for a guarded slot (guard.c). */
#define _GNU_SOURCE
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

/* Far enough from zero that no program counts it down: the countdown of a heap that does
 * not sample. */
#define NEVER (INT64_MAX / 2)
/* With the ledger on, the countdown also says when to look at the clock for the ledger's
 * peaks and timeline (stats.c): at each trip, and every LEDGER_TRIP bytes counted when
 * nothing else trips (every 340 allocations of 128 B, 820 of 16), but a page's blocks at
 * least LEDGER_TRIP_BLOCKS apart: by bytes alone, a malloc/free loop of 16 KiB looked every
 * 4th allocation (ledger on over off, pinned, 9 runs: 1.80 x; 1.41 x with a look every 64;
 * 4 KiB 1.53 -> 1.34). (An event byte of the ledger's own, added to on every counted
 * allocation, costs 5 % of the lab's 128 B batches.) */
#define LEDGER_TRIP ((int64_t)64 << 10)
#define LEDGER_TRIP_BLOCKS 64
static bool ledger_trips;

static double mean_bytes; /* FRUGAL_SAMPLE_BYTES; 0: off */
static bool profile_on;   /* FRUGAL_PROFILE: samples record their stacks */
static bool guard_on, guard_all; /* FRUGAL_GUARD_EVERY > 0; == 1 */
/* Trips come at rate 1 / trip_mean per byte counted: the profile's rate plus the guard's.
 * Each trip is a profile sample with probability sample_share, else a guard candidate:
 * splitting a Poisson process so keeps both parts Poisson and independent. */
static double trip_mean, sample_share;

/* Per stack (indexed by stack id), the estimates: bytes and blocks allocated over the run,
 * live now, and live at the last snapshot of the peak. */
typedef struct site_est_s {
  double alloc_bytes, alloc_count, live_bytes, live_count, peak_bytes, peak_count;
  uint64_t samples;
} site_est_t;

static pthread_mutex_t sample_lock = PTHREAD_MUTEX_INITIALIZER;
static site_est_t *sites;
static size_t sites_cap;
static double live_total, peak_total, alloc_total;
static uint64_t samples_total;

/* No libm: frugal is preloaded into programs that may not link it. exp(-x) for x >= 0 and
 * -ln(u) for 0 < u <= 1, both to about 1e-10, which is far below the sampling noise. */
static double exp_neg(double x) {
  if (x > 700) return 0;
  int k = (int)(x / 0.6931471805599453 + 0.5);
  double r = x - k * 0.6931471805599453, term = 1, sum = 1; /* |r| <= ln2 / 2 */
  for (int i = 1; i < 14; i++) sum += (term *= -r / i);
  union {
    double d;
    uint64_t u;
  } two = {.u = (uint64_t)(1023 - k) << 52}; /* 2^-k; k < 1023 as x <= 700 */
  return sum * two.d;
}
static double neg_ln(double u) {
  union {
    double d;
    uint64_t u;
  } v = {.d = u};
  int e = (int)((v.u >> 52) & 0x7ff) - 1023;
  v.u = (v.u & ~((uint64_t)0x7ff << 52)) | ((uint64_t)1023 << 52); /* mantissa in [1, 2) */
  double z = (v.d - 1) / (v.d + 1), z2 = z * z, term = z, sum = 0; /* ln m = 2 atanh z */
  for (int i = 1; i < 30; i += 2, term *= z2) sum += term / i;
  return -(2 * sum + e * 0.6931471805599453);
}

/* A block of s bytes is sampled with probability (1 - exp(-(s + charge) / trip_mean)) *
 * sample_share (with guarded sampling off, 1 - exp(-(s + charge) / T)): s over it is an
 * unbiased estimate of the block's bytes, and 1 over it of its count. */
static double probability(size_t s) {
  return (guard_all ? 1 : 1 - exp_neg((double)(s + FG_SAMPLE_CHARGE) / trip_mean)) * sample_share;
}

static double uniform(fg_heap_t *heap) { /* [0, 1), xorshift64* (its state never 0) */
  uint64_t x = heap->sample_rng;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  heap->sample_rng = x;
  return (double)((x * 0x2545f4914f6cdd1du) >> 11) * 0x1.0p-53;
}

/* An exponentially distributed interval of mean trip_mean: the gaps between the trip points
 * of a Poisson process, so each byte counted is as likely to trip as any, whatever came
 * before. */
static int64_t draw(fg_heap_t *heap) {
  if (guard_all) return 0; /* the next allocation trips again */
  double u = uniform(heap) + 0x1.0p-54; /* (0, 1) */
  double gap = trip_mean * neg_ln(u);
  return gap < (double)NEVER ? (int64_t)gap : NEVER;
}

void _fg_sample_init(void) {
  mean_bytes = (double)_fg_option(FG_OPTION_SAMPLE_BYTES);
  long every = _fg_option(FG_OPTION_GUARD_EVERY);
  /* Leak stacks and secure mode hook every call and must see every block as their own. */
  profile_on = !_fg_hooked_all() && !_fg_secure_on() && mean_bytes > 0 && fg_option_get_string(FG_OPTION_PROFILE) != NULL;
  /* Nor with the ledger on: its exact per-class counts would see guarded blocks as large. */
  guard_on = !_fg_hooked() && every > 0;
  guard_all = guard_on && every == 1;
  double rate = (profile_on ? 1 / mean_bytes : 0) + (guard_on ? 1.0 / ((double)every * FG_SAMPLE_CHARGE) : 0);
  trip_mean = rate > 0 ? 1 / rate : 0;
  sample_share = profile_on ? 1 / mean_bytes / rate : 0;
  ledger_trips = _fg_ledger_active();
}

void _fg_sample_start(void) {
  if (profile_on && !_fg_stacks_load("FRUGAL_PROFILE")) profile_on = false;
  /* Guards take their stacks by frame pointers (stacks.c): no libunwind to load. */
  if (guard_on) _fg_guard_start();
}

static fg_rare bool sites_grow(size_t need) {
  size_t cap = sites_cap == 0 ? 1024 : sites_cap;
  while (cap <= need) cap *= 2;
  site_est_t *t = _fg_os_alloc_aligned(cap * sizeof *t, FG_OS_PAGE);
  if (t == NULL) return false;
  if (sites != NULL) {
    memcpy(t, sites, sites_cap * sizeof *t);
    _fg_os_free(sites, sites_cap * sizeof *t);
  }
  sites = t;
  sites_cap = cap;
  return true;
}

/* The peak's per-stack picture is copied when the live estimate passes the last copy by
 * 1/64: a few hundred copies over any run, and the peak read at most 1.6 % low. */
static fg_rare void peak_update(bool at_exit) {
  if (live_total <= peak_total * (at_exit ? 1 : 1 + 1.0 / 64)) return;
  for (size_t i = 0; i < sites_cap; i++) {
    sites[i].peak_bytes = sites[i].live_bytes;
    sites[i].peak_count = sites[i].live_count;
  }
  peak_total = live_total;
}

/* A sampled block of `size` bytes, which was sampled with probability p. */
static fg_noinline fg_rare void record(fg_segment_t *s, size_t size, double p) {
  uint32_t stack = _fg_stack_capture(2); /* record and its caller (frugal's other frames are left out when shown) */
  double w = (double)size / p;
  pthread_mutex_lock(&sample_lock);
  if (stack != FG_NO_STACK && (stack < sites_cap || sites_grow(stack))) {
    site_est_t *e = &sites[stack];
    e->alloc_bytes += w;
    e->alloc_count += 1 / p;
    e->live_bytes += w;
    e->live_count += 1 / p;
    e->samples++;
    s->sample_stack = stack;
    s->sample_size = size;
    s->sample_p = p;
    s->sampled = 1;
    live_total += w;
    alloc_total += w;
    samples_total++;
    peak_update(false);
  }
  pthread_mutex_unlock(&sample_lock);
}

/* fork: every lock of the sampler, the stack table and the guarded slots, in the order
 * record and the profile writer take them. */
void _fg_sample_lock_all(bool lock) {
  if (lock) {
    pthread_mutex_lock(&sample_lock);
    _fg_stacks_lock(true);
    _fg_guard_lock(true);
  } else {
    _fg_guard_lock(false);
    _fg_stacks_lock(false);
    pthread_mutex_unlock(&sample_lock);
  }
}

fg_rare void _fg_sample_free(fg_segment_t *s) {
  pthread_mutex_lock(&sample_lock);
  if (s->sampled) {
    double w = (double)s->sample_size / s->sample_p;
    site_est_t *e = &sites[s->sample_stack];
    e->live_bytes -= w;
    e->live_count -= 1 / s->sample_p;
    live_total -= w;
    s->sampled = 0;
  }
  pthread_mutex_unlock(&sample_lock);
}

/* A heap's random stream, seeded from the process's random secret, not a getrandom call per
 * thread: with guards on by default every thread trips once, and the lab's thread storm
 * starts 800. */
static void seed(fg_heap_t *heap) {
  static _Atomic(uint64_t) streams;
  uint64_t n = atomic_fetch_add_explicit(&streams, 1, memory_order_relaxed);
  heap->sample_rng = _fg_mix(_fg_secret ^ (n * 0x9e3779b97f4a7c15u)) | 1;
}

static void *trip(fg_heap_t *heap, size_t size, size_t charged, size_t align, bool zero);

/* The countdown of this thread's heap went below zero with an allocation of `size`: decide
 * whether the allocation is a sample, and set the countdown for after it. A sample is served
 * here as a large block (NULL: take the plain path). */
void *_fg_sample_alloc(size_t size, size_t align, bool zero) {
  fg_heap_t *heap = _fg_heap();
  /* A thread's first allocation trips (the empty heap's countdown is 0): with sampling on it
   * gets its heap here, so that its first block is as likely to be sampled or guarded as
   * any (FRUGAL_GUARD_EVERY=1 guards it too). */
  if (heap == &_fg_heap_empty && trip_mean != 0 && _fg_heap_init_thread() != NULL) heap = _fg_heap();
  /* A heap's first trip starts its countdown (sample_left begins at 0), it ends no period. */
  if (ledger_trips && heap->sample_rng != 0) _fg_ledger_sample();
  if (heap == &_fg_heap_empty || trip_mean == 0) { /* not yet a heap of its own, or off */
    bool counts = ledger_trips && heap != &_fg_heap_empty;
    heap->sample_left = counts ? LEDGER_TRIP : NEVER;
    if (counts) heap->sample_rng = 1; /* counting down: no stream drawn from with the sampler off */
    return NULL;
  }
  if (heap->sample_rng == 0) { /* the thread's first trip: start its countdown from here */
    seed(heap);
    int64_t left = draw(heap) - (int64_t)(size + FG_SAMPLE_CHARGE);
    heap->sample_left = left;
    if (left >= 0) return NULL;
  }
  heap->sample_left = draw(heap);
  return trip(heap, size, size, align, zero);
}

/* A page's countdown, in blocks: each block malloc's fast path hands out counts its block
 * size and the charge, so that a draw of bytes, as the heap's, is a number of blocks (a
 * geometric draw, with the chance of each block tripping what it would be by bytes). At most
 * FG_LEFT_SPAN - 1 (the ledger's pages keep theirs in a range below zero: internal.h),
 * running out of which draws again: the gaps have no memory, a longer one is a run of these. */
static void page_left_set(fg_heap_t *heap, fg_page_t *page) {
  int64_t bytes, least = 0;
  if (trip_mean == 0 || heap == &_fg_heap_empty) {
    bytes = ledger_trips ? LEDGER_TRIP : NEVER;
    least = LEDGER_TRIP_BLOCKS;
  } else {
    if (heap->sample_rng == 0) seed(heap);
    bytes = draw(heap);
  }
  int64_t left = bytes / (int64_t)(page->block_size + FG_SAMPLE_CHARGE);
  if (left < least) left = least;
  page->sample_clamped = left >= FG_LEFT_SPAN;
  if (left >= FG_LEFT_SPAN) left = FG_LEFT_SPAN - 1;
  page->sample_left = (int32_t)left + ((page->used & FG_USED_LEDGER) ? FG_LEFT_LEDGER : 0);
}

void _fg_sample_page_init(fg_page_t *page) {
  if (page->used & FG_USED_SECURE) {
    page->sample_left = FG_LEFT_SECURE;
    page->sample_clamped = 0;
  } else {
    page_left_set(page->heap, page);
  }
}

void *_fg_sample_page(fg_page_t *page, size_t size, size_t align) {
  fg_heap_t *heap = page->heap;
  bool tripped = !page->sample_clamped;
  page_left_set(heap, page);
  if (!tripped) return NULL;
  if (ledger_trips) _fg_ledger_sample();
  return trip_mean != 0 ? trip(heap, size, page->block_size, align, false) : NULL;
}

/* A trip: a profile sample, a guarded block, or nothing (NULL: the plain block). `charged`:
 * the bytes the countdown counted for it (less FG_SAMPLE_CHARGE), the request's or its
 * block's (a page's countdown counts blocks: _fg_sample_page). */
static void *trip(fg_heap_t *heap, size_t size, size_t charged, size_t align, bool zero) {
  if (_fg_own_doing() || size > FG_MAX_ALLOC || align > FG_LARGE_ALIGN_MAX) return NULL;
  bool sample = sample_share >= 1 || (sample_share > 0 && uniform(heap) < sample_share);
  if (!sample) { /* a guard candidate: small blocks of malloc's own alignment only */
    if (!guard_on || size > FG_OS_PAGE || align > 8) return NULL;
    /* The countdown trips about (size + 64) / trip_mean of the time; kept with probability
     * 64 / (size + 64), every allocation up to a page is guarded once in N, whatever its
     * size. (Without this a 1 KiB block was guarded 17 times as often as a 16-byte one: the
     * lab's threads cells guarded one 1 KiB allocation in 5,900 at N = 100,000.) */
    if (!guard_all && uniform(heap) * (double)(charged + FG_SAMPLE_CHARGE) >= FG_SAMPLE_CHARGE) return NULL;
    return _fg_guard_alloc(size, zero);
  }
  int saved = errno;
  /* Room for the request's class: its usable size, as the plain path's block (large.c). */
  void *p = _fg_large_alloc(size <= FG_CLASS_MAX ? _fg_class_size(_fg_class_of(size)) : size, align, zero);
  if (p == NULL) { /* the plain path may still find room, and must not see our ENOMEM */
    errno = saved;
    return NULL;
  }
  record(_fg_segment_of(p), size, probability(charged));
  if (_fg_hooked()) _fg_hook_alloc(p, size); /* the ledger counts it too */
  return p;
}

/* ---- the profile, written at exit ------------------------------------------------------------ */

/* The frames of a stack as the folded format wants them: root first, `;` between. */
static fg_rare void write_folded_stack(fg_writer_t *w, uint32_t stack) {
  fg_frame_t frames[FG_STACK_FRAMES];
  size_t n = _fg_stack_frames(stack, frames);
  for (size_t i = n; i-- > 0;) {
    const char *mod = strrchr(frames[i].module, '/');
    if (frames[i].symbol != NULL)
      _fg_w_printf(w, "%s%s", i + 1 < n ? ";" : "", frames[i].symbol);
    else
      _fg_w_printf(w, "%s%s+0x%lx", i + 1 < n ? ";" : "", mod != NULL ? mod + 1 : frames[i].module,
                   (unsigned long)frames[i].offset);
  }
  if (n == 0) _fg_w_printf(w, "?");
}

typedef enum { BY_ALLOC, BY_LIVE, BY_PEAK } which_t;

static fg_rare double site_bytes(const site_est_t *e, which_t which) {
  return which == BY_ALLOC ? e->alloc_bytes : which == BY_LIVE ? e->live_bytes : e->peak_bytes;
}

static fg_rare bool write_file(const char *dir, const char *name, void (*body)(fg_writer_t *, which_t), which_t which) {
  char path[4200];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  char *buf = _fg_os_alloc_aligned(1 << 16, FG_OS_PAGE);
  if (buf != NULL) {
    fg_writer_t w = {buf, 1 << 16, 0, fd};
    body(&w, which);
    _fg_w_flush(&w);
    _fg_os_free(buf, 1 << 16);
  }
  return close(fd) == 0 && buf != NULL;
}

static fg_rare void write_folded(fg_writer_t *w, which_t which) {
  for (size_t i = 0; i < sites_cap; i++) {
    double b = site_bytes(&sites[i], which);
    if (b < 0.5) continue;
    write_folded_stack(w, (uint32_t)i);
    _fg_w_printf(w, " %.0f\n", b);
  }
}

static fg_rare void write_json(fg_writer_t *w, which_t which) {
  (void)which;
  _fg_w_printf(w,
               "{\"schema\":\"frugal-profile/1\",\"version\":\"%s\",\"pid\":%d,\"sample_bytes\":%.0f,"
               "\"samples\":%lu,\"totals\":{\"alloc_bytes\":%.0f,\"live_bytes\":%.0f,\"peak_live_bytes\":%.0f},"
               "\"stacks\":[",
               FRUGAL_VERSION, (int)getpid(), mean_bytes, samples_total, alloc_total, live_total, peak_total);
  bool first = true;
  for (size_t i = 0; i < sites_cap; i++) {
    const site_est_t *e = &sites[i];
    if (e->samples == 0) continue;
    _fg_w_printf(w,
                 "%s{\"samples\":%lu,\"alloc_bytes\":%.0f,\"alloc_count\":%.1f,\"live_bytes\":%.0f,"
                 "\"live_count\":%.1f,\"peak_bytes\":%.0f,\"peak_count\":%.1f,\"frames\":",
                 first ? "" : ",", e->samples, e->alloc_bytes, e->alloc_count, e->live_bytes, e->live_count,
                 e->peak_bytes, e->peak_count);
    _fg_w_frames(w, (uint32_t)i);
    _fg_w_printf(w, "}");
    first = false;
  }
  _fg_w_printf(w, "]}\n");
}

/* The profile now, as profile.json holds it at exit (the control channel's `profile`). Made
 * whole in a mapping of its own under the lock, sent after it: a client that reads slowly
 * must not hold up the threads that sample. Twice the room until it fits. */
fg_rare bool _fg_profile_json_to(int fd) {
  if (!profile_on) return false;
  bool was = _fg_own_begin();
  size_t size = (size_t)1 << 16;
  for (;;) {
    char *buf = _fg_os_alloc_aligned(size, FG_OS_PAGE);
    if (buf == NULL) break;
    fg_writer_t w = {buf, size, 0, -1};
    pthread_mutex_lock(&sample_lock);
    peak_update(false);
    write_json(&w, BY_ALLOC);
    pthread_mutex_unlock(&sample_lock);
    bool whole = w.len < size;
    if (whole) {
      w.fd = fd;
      _fg_w_flush(&w);
    }
    _fg_os_free(buf, size);
    if (whole) break;
    size *= 2;
  }
  _fg_own_end(was);
  return true;
}

/* FRUGAL_PROFILE=DIR (%p: the pid): DIR/profile.json, and the folded stacks of bytes
 * allocated, live at exit and live at the peak, named by the dynamic symbols (`frugal run
 * --profile` names them again by file and line from the JSON). */
static fg_rare void profile_write(void) {
  bool was = _fg_own_begin();
  char dir[4096];
  _fg_expand_pid(fg_option_get_string(FG_OPTION_PROFILE), dir, sizeof dir);
  mkdir(dir, 0755);
  pthread_mutex_lock(&sample_lock);
  peak_update(true);
  bool ok = write_file(dir, "profile.json", write_json, BY_ALLOC) &&
            write_file(dir, "alloc.folded", write_folded, BY_ALLOC) &&
            write_file(dir, "live.folded", write_folded, BY_LIVE) &&
            write_file(dir, "peak.folded", write_folded, BY_PEAK);
  pthread_mutex_unlock(&sample_lock);
  if (!ok) _fg_warning("cannot write FRUGAL_PROFILE files in ", dir);
  _fg_own_end(was);
}

/* The test stays out of the rare code (see stats_report.c's stats_at_exit). */
__attribute__((destructor)) static void profile_at_exit(void) {
  if (profile_on) profile_write();
}
