/* oom_recover.c — out of memory recovers (RELIABILITY.md, "Faults"; issue 10, item 4). Under
 * RLIMIT_AS set OF_HEADROOM_MIB above VmSize, each scenario in a child of its own so neither the
 * limit nor the heap's state reaches the next: for every size class and three large sizes,
 * blocks until malloc returns NULL with ENOMEM, all freed, then the same request, a block of
 * each large size and one of every class must succeed: before it returns NULL, frugal has to
 * give back what its caches hold. Then a fill of large blocks freed and refilled with small
 * ones, the reverse, a dead thread's blocks freed by another, and the issue's own case: 9 MiB
 * blocks until NULL, freed, one again. */
#include <pthread.h>

#include "check.h"
#include "oom_fill.h"

static void *c_malloc(size_t n) { return malloc(n); }
static void c_free(void *p) { free(p); }

/* One block of `size`, written and freed: true if malloc gave it. */
static bool one_block(size_t size) {
  void *p = malloc(tu_size(size));
  if (p == NULL) return false;
  of_write(p, size, 1);
  free(p);
  return true;
}

/* Append a size to a list of refused ones (for the check line). */
static void note_refused(char *list, size_t len, int *count, size_t size) {
  char name[32];
  size_t used = strlen(list);
  if (++*count <= 6) snprintf(list + used, len - used, " %s", of_name(size, name, sizeof name));
}

/* A child's checks are its own: it counts from zero and its exit status says how they went. */
static void child_begin(void) { check_passed = check_failed = 0; }
static void child_end(const char *what) { _exit(check_finish(what)); }

/* After a fill was freed: every large size, then every class, one block at a time. The large
 * sizes go first: a class that needs a fresh segment makes the small path give back all the
 * heap holds, after which a large block would succeed whether or not its own path recovers. */
static void check_others(const char *after) {
  char refused[160] = "";
  int n = 0;
  for (int i = 0; i < OF_LARGES; i++)
    if (!one_block(of_large_sizes[i])) note_refused(refused, sizeof refused, &n, of_large_sizes[i]);
  CHECKF(n == 0, "%s: then one block each of 600 KiB, 9 MiB and 33 MiB succeeds%s%s", after,
         n ? "; refused:" : "", refused);
  refused[0] = '\0';
  n = 0;
  for (size_t c = 0; c < (size_t)of_class_count; c++)
    if (!one_block(of_classes[c])) note_refused(refused, sizeof refused, &n, of_classes[c]);
  CHECKF(n == 0, "%s: then one block of each of the %d classes succeeds%s%s (%d refused)", after, of_class_count,
         n ? "; refused:" : "", refused, n);
}

/* Blocks of one size until NULL, all freed; the same request again, then every other size. */
static void fill_and_recover(void *arg) {
  size_t size = *(const size_t *)arg;
  char name[32], what[64];
  of_name(size, name, sizeof name);
  child_begin();
  if (!of_limit(OF_HEADROOM_MIB)) _exit(90);
  of_fill_t f = of_fill(c_malloc, size);
  CHECKF(f.refused && f.err == ENOMEM && f.count > 0,
         "%s: %ld blocks (%.1f MiB) until malloc returned NULL, errno %d (ENOMEM %d)", name, f.count,
         of_mib(&f), f.err, ENOMEM);
  long bad = of_release(&f, c_free);
  CHECKF(bad == 0, "%s: every block kept what was written into it; all freed", name);
  CHECKF(one_block(size), "%s: after freeing them, malloc(%s) succeeds again", name, name);
  snprintf(what, sizeof what, "%s freed", name);
  check_others(what);
  snprintf(what, sizeof what, "oom_recover (%s child)", name);
  child_end(what);
}

/* Memory filled by one size, freed, must hold about as much of another: at least 3/4 of the
 * headroom (a fresh process fills 60 of 64 MiB with 64 B blocks, 63 with 9 MiB ones). */
typedef struct pair_s {
  size_t first, then;
} pair_t;

static void refill(void *arg) {
  const pair_t *pr = (const pair_t *)arg;
  char a[32], b[32], what[96];
  of_name(pr->first, a, sizeof a);
  of_name(pr->then, b, sizeof b);
  child_begin();
  if (!of_limit(OF_HEADROOM_MIB)) _exit(90);
  of_fill_t f = of_fill(c_malloc, pr->first);
  long bad = of_release(&f, c_free);
  CHECKF(f.refused && f.err == ENOMEM && bad == 0,
         "%s then %s: %.1f MiB of %s blocks until NULL + ENOMEM, freed",
         a, b, of_mib(&f), a);
  of_fill_t g = of_fill(c_malloc, pr->then);
  bad = of_release(&g, c_free);
  double floor_mib = OF_HEADROOM_MIB * 0.75;
  CHECKF(g.refused && g.err == ENOMEM && bad == 0 && of_mib(&g) >= floor_mib,
         "%s then %s: %s blocks fill %.1f MiB (%ld blocks) of the %d MiB headroom, at least %.0f", a, b, b,
         of_mib(&g), g.count, OF_HEADROOM_MIB, floor_mib);
  of_fill_t h = of_fill(c_malloc, pr->first);
  bad = of_release(&h, c_free);
  CHECKF(h.refused && bad == 0 && of_mib(&h) >= floor_mib,
         "%s then %s: and %s blocks fill %.1f MiB again (%ld blocks; first time %ld)", a, b, a, of_mib(&h),
         h.count, f.count);
  snprintf(what, sizeof what, "oom_recover (%s then %s child)", a, b);
  child_end(what);
}

/* A thread fills memory with 64 B blocks and exits; the main thread frees them all (into the
 * dead thread's abandoned heap). That memory must serve the main thread's large blocks, then
 * its small ones: frugal has to collect abandoned heaps before it gives up. */
static void *fill_thread(void *arg) {
  *(of_fill_t *)arg = of_fill(c_malloc, 64);
  return NULL;
}

static void other_thread(void *arg) {
  (void)arg;
  child_begin();
  if (!of_limit(OF_HEADROOM_MIB)) _exit(90);
  of_fill_t f;
  pthread_t t;
  if (pthread_create(&t, NULL, fill_thread, &f) != 0 || pthread_join(t, NULL) != 0) _exit(92);
  long bad = of_release(&f, c_free);
  CHECKF(f.refused && f.err == ENOMEM && bad == 0,
         "other thread: %.1f MiB of 64 B blocks until NULL + ENOMEM; the thread exited; main freed them all",
         of_mib(&f));
  check_others("other thread's blocks freed");
  of_fill_t g = of_fill(c_malloc, 9 * TU_MIB);
  of_release(&g, c_free);
  double floor_mib = OF_HEADROOM_MIB * 0.75;
  CHECKF(g.refused && of_mib(&g) >= floor_mib, "other thread: then 9 MiB blocks fill %.1f MiB, at least %.0f",
         of_mib(&g), floor_mib);
  child_end("oom_recover (other thread child)");
}

/* Issue 10's row as written: under RLIMIT_AS, 9 MiB blocks until NULL, free them all, one
 * again (glibc and mimalloc give it). At a few heights; and a second fill gets as many. */
static void issue_case(void *arg) {
  size_t headroom = *(const size_t *)arg;
  const size_t nine = 9 * TU_MIB;
  child_begin();
  if (!of_limit(headroom)) _exit(90);
  of_fill_t f = of_fill(c_malloc, nine);
  of_release(&f, c_free);
  CHECKF(f.refused && f.err == ENOMEM && f.count > 0,
         "VmSize + %zu MiB: %ld blocks of 9 MiB until NULL + ENOMEM", headroom, f.count);
  void *p = malloc(tu_size(nine));
  if (p != NULL) of_write(p, nine, 1);
  CHECKF(p != NULL, "VmSize + %zu MiB: all freed, malloc(9 MiB) succeeds again", headroom);
  free(p);
  of_fill_t g = of_fill(c_malloc, nine);
  of_release(&g, c_free);
  CHECKF(g.count >= f.count, "VmSize + %zu MiB: 9 MiB blocks until NULL again: %ld (first time %ld)",
         headroom, g.count, f.count);
  child_end("oom_recover (issue 10 child)");
}


int main(void) {
  double t0 = tu_now();
  of_list_classes();
  check_note("RLIMIT_AS = VmSize + %d MiB, set in a child per scenario", OF_HEADROOM_MIB);

  int failed, large_failed;
  of_each_size(fill_and_recover, &failed, &large_failed);
  CHECKF(failed == 0,
         "every class: fill until NULL, free, then the same size, the large sizes and every class "
         "succeed (%d of %d classes failed)", failed, of_class_count);
  CHECKF(large_failed == 0,
         "large sizes: fill until NULL, free, then the same size, the large sizes and every class "
         "succeed (%d of %d sizes failed)", large_failed, OF_LARGES);

  static const pair_t pairs[] = {
      {9u << 20, 64},         {64, 9u << 20}, {600u << 10, 48u << 10},
      {48u << 10, 600u << 10}, {33u << 20, 8}, {8, 33u << 20}};
  const int npairs = (int)(sizeof pairs / sizeof pairs[0]);
  failed = 0;
  for (int i = 0; i < npairs; i++) failed += !of_in_child(refill, (void *)&pairs[i], "mixed");
  CHECKF(failed == 0,
         "mixed: memory one size filled, once freed, holds as much of another (%d of %d pairs failed)",
         failed, npairs);

  CHECK("blocks of a thread that exited, freed by another: large and small blocks succeed after",
        of_in_child(other_thread, NULL, "other thread"));

  static const size_t heights[] = {32, 72, 256};
  failed = 0;
  for (int i = 0; i < 3; i++) failed += !of_in_child(issue_case, (void *)&heights[i], "issue 10 case");
  CHECKF(failed == 0, "issue 10: 9 MiB blocks until NULL, all freed, one again (%d of 3 heights failed)",
         failed);
  CHECKF(of_crashed == 0, "no child was killed by a signal: no crash and no hang under exhaustion (%d were)",
         of_crashed);

  check_note("%.1f s", tu_now() - t0);
  return check_finish("oom_recover");
}
