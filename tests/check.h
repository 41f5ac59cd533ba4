/* check.h — the tests' harness: CHECK(name, expr) prints one "ok" or "FAIL" line per check
 * and counts failures; check_finish() turns the count into the exit status ctest reads.
 * Header-only and free of allocation, so it works the same linked with frugal or preloaded. */
#ifndef FG_TEST_CHECK_H
#define FG_TEST_CHECK_H

#include <stdarg.h>
#include <stdio.h>

/* One copy per test binary: every test is a single translation unit plus helpers that do
 * not check anything themselves. */
static int check_passed;
static int check_failed;

#if defined(__GNUC__)
#define CHECK_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define CHECK_PRINTF(f, a)
#endif

/* Record one check. `what` says in words what was checked; `expr`, file and line say where. */
static inline int check_record(int ok, const char *expr, const char *file, int line,
                               const char *what) {
  if (ok) {
    check_passed++;
    printf("ok   %s\n", what);
  } else {
    check_failed++;
    printf("FAIL %s    [%s:%d: %s]\n", what, file, line, expr);
  }
  fflush(stdout);
  return ok;
}

/* Same, with the description built printf-style (for checks made inside sweeps). */
CHECK_PRINTF(5, 6)
static inline int check_recordf(int ok, const char *expr, const char *file, int line,
                                const char *fmt, ...) {
  char what[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  return check_record(ok, expr, file, line, what);
}

/* CHECK("malloc(0) is not NULL", p != NULL); evaluates to the truth of expr. */
#define CHECK(name, expr) check_record((expr) ? 1 : 0, #expr, __FILE__, __LINE__, (name))
/* CHECKF(expr, "aligned_alloc(%zu, %zu) aligned", a, n); */
#define CHECKF(expr, ...) check_recordf((expr) ? 1 : 0, #expr, __FILE__, __LINE__, __VA_ARGS__)

/* An information line (not a check): parameters, seeds, measured figures. */
CHECK_PRINTF(1, 2)
static inline void check_note(const char *fmt, ...) {
  va_list ap;
  printf("#    ");
  va_start(ap, fmt);
  vprintf(fmt, ap);
  va_end(ap);
  printf("\n");
  fflush(stdout);
}

/* Print the tally and return main's exit status. A test that checked nothing fails too. */
static inline int check_finish(const char *test) {
  printf("%s: %d checks, %d failed\n", test, check_passed + check_failed, check_failed);
  fflush(stdout);
  if (check_passed + check_failed == 0) {
    printf("FAIL %s made no checks\n", test);
    return 1;
  }
  return check_failed ? 1 : 0;
}

#endif /* FG_TEST_CHECK_H */
