/* init.c — process and thread events: the first-use bootstrap (which may run before any
 * constructor, from a dlsym or another library's constructor, so it allocates nothing and
 * takes no lock that malloc could need), the fork handlers that keep every lock consistent
 * in the child, and the one place that prints misuse and aborts. */
#define _GNU_SOURCE
#include "internal.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

uintptr_t _fg_secret;
unsigned _fg_mode;
__thread bool _fg_own __attribute__((tls_model("initial-exec")));
static _Atomic int init_state; /* 0: not started, 1: running, 2: done */

fg_rare void _fg_write_stderr(const char *s) {
  size_t n = strlen(s);
  while (n > 0) {
    ssize_t w = write(2, s, n);
    if (w <= 0) return;
    s += w;
    n -= (size_t)w;
  }
}

fg_rare void _fg_warning(const char *msg, const char *detail) {
  char line[512];
  size_t n = 0;
  for (const char *parts[] = {"frugal: warning: ", msg, detail, NULL}, **q = parts; *q; q++)
    for (const char *c = *q; *c && n < sizeof line - 2; c++) line[n++] = *c;
  line[n++] = '\n';
  line[n] = '\0';
  _fg_write_stderr(line);
}

/* "frugal: event: <msg>[<bytes> bytes]"; no allocation. */
static fg_noinline fg_rare void event_write(const char *msg, uint64_t bytes, bool with_bytes) {
  char line[256], digits[24];
  size_t n = 0, d = 0;
  do digits[d++] = (char)('0' + bytes % 10); while ((bytes /= 10) != 0);
  for (const char *c = "frugal: event: "; *c; c++) line[n++] = *c;
  for (const char *c = msg; *c && n < sizeof line - 40; c++) line[n++] = *c;
  if (with_bytes) {
    while (d > 0) line[n++] = digits[--d];
    for (const char *c = " bytes"; *c; c++) line[n++] = *c;
  }
  line[n++] = '\n';
  line[n] = '\0';
  _fg_write_stderr(line);
}

/* The level test stays out of the rare code: slow paths that a quiet process runs call here. */
static inline void event_line(int level, const char *msg, uint64_t bytes, bool with_bytes) {
  if (_fg_option(FG_OPTION_VERBOSE) >= level) event_write(msg, bytes, with_bytes);
}

void _fg_event(int level, const char *msg) { event_line(level, msg, 0, false); }

/* The end of a _fg_returning_for scope: what it gave back (os.c counts it), one event at
 * FRUGAL_VERBOSE=2, and the reason of the enclosing scope back. */
void _fg_returning_end(uint8_t was) {
  static const char *const gave[] = {
      [FG_BY_DECAY] = "decay pass gave back ", [FG_BY_IDLE] = "purger thread gave back ",
      [FG_BY_OOM] = "out of memory: caches gave back ", [FG_BY_COLLECT] = "fg_collect gave back ",
      [FG_BY_GROWTH] = "as the heap grew, idle memory gave back "}; /* takeovers: too many to tell */
  if (_fg_returned_bytes != 0 && _fg_returning < sizeof gave / sizeof gave[0] && gave[_fg_returning] != NULL)
    event_line(2, gave[_fg_returning], _fg_returned_bytes, true);
  _fg_returned_bytes = 0;
  _fg_returning = was;
}

/* One line, "frugal: <what> at 0x...", then abort: never a silent corruption. */
fg_rare void _fg_misuse(const char *what, const void *p) {
  char line[160];
  size_t n = 0;
  for (const char *c = "frugal: "; *c; c++) line[n++] = *c;
  for (const char *c = what; *c && n < 100; c++) line[n++] = *c;
  for (const char *c = " at 0x"; *c; c++) line[n++] = *c;
  uintptr_t v = (uintptr_t)p;
  int digits = 1;
  while (digits < 16 && (v >> (4 * digits)) != 0) digits++;
  for (int i = digits - 1; i >= 0; i--) line[n++] = "0123456789abcdef"[(v >> (4 * i)) & 15];
  line[n++] = '\n';
  line[n] = '\0';
  _fg_write_stderr(line);
  abort();
}

/* The ledger counts inline in fg_malloc and fg_free unless secure mode or leak stacks need
 * every call: see hooks.c for where each mode sends a call. */
static unsigned mode_from_options(void) {
  bool leaks = _fg_option(FG_OPTION_LEAKS) != 0;
  unsigned mode = _fg_option(FG_OPTION_SECURE) != 0 ? FG_MODE_SECURE : 0;
  if (leaks || _fg_option(FG_OPTION_STATS) != 0 || _fg_option(FG_OPTION_STATS_FILE) != 0) mode |= FG_MODE_LEDGER;
  if (mode == FG_MODE_LEDGER && !leaks) mode |= FG_MODE_LEDGER_FAST;
  if (mode == FG_MODE_SECURE) mode |= FG_MODE_SECURE_FAST;
  if (mode != 0) mode |= FG_MODE_HOOKED;
  if ((mode & FG_MODE_HOOKED) && !(mode & (FG_MODE_LEDGER_FAST | FG_MODE_SECURE_FAST))) mode |= FG_MODE_HOOKED_ALL;
  return mode;
}

/* Idempotent; nothing in it allocates, so it cannot re-enter itself. A second thread
 * arriving meanwhile waits the few microseconds it takes. */
void _fg_process_init(void) {
  int expected = 0;
  if (atomic_load_explicit(&init_state, memory_order_acquire) == 2) return;
  if (!atomic_compare_exchange_strong(&init_state, &expected, 1)) {
    while (atomic_load_explicit(&init_state, memory_order_acquire) != 2) {
    }
    return;
  }
  _fg_secret = _fg_os_random() | 1;
  _fg_options_init();
  _fg_mode = mode_from_options();
  _fg_secure_init();
  _fg_stats_init();
  _fg_sample_init();
  atomic_store_explicit(&init_state, 2, memory_order_release);
}

/* A thread of frugal's own (the purger, the control channel): detached, a small stack (its
 * work needs little, and it should cost the program next to nothing), every signal blocked
 * (the program's signals are for its own threads), and glibc's structures for it (its TLS
 * vector, through calloc) frugal's doing, which the ledger leaves out. 0 or an errno. */
int _fg_thread_start(void *(*main_fn)(void *)) {
  pthread_attr_t attr;
  sigset_t all, old;
  pthread_t t;
  sigfillset(&all);
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_attr_setstacksize(&attr, 64 * 1024);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  bool was = _fg_own_begin();
  int err = pthread_create(&t, &attr, main_fn, NULL);
  _fg_own_end(was);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  pthread_attr_destroy(&attr);
  return err;
}

/* ---- the program's end --------------------------------------------------------------------- */

/* Nothing of the program runs any more: no thread frugal knows of owns a heap, and the
 * kernel counts no thread but the caller beside a main thread that ended with pthread_exit
 * (a zombie until the process ends) and frugal's other background thread. /proc/self/stat
 * has both: the main thread's state (field 3) and the number of threads (field 20).
 * Unreadable (no /proc, a sandbox): taken as ended, so the caller ends; the next cache
 * wants it again if anyone still runs. */
bool _fg_program_ended(void) {
  if (_fg_heaps_owned() != 0) return false;
  char buf[512];
  int fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return true;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return true;
  buf[n] = '\0';
  const char *p = strrchr(buf, ')'); /* the command name may hold spaces and parentheses */
  if (p == NULL || p[1] != ' ') return true;
  char main_state = p[2];
  /* p at ')', the end of field 2: each step lands on the space before the next field, so
   * the 18th is the one before field 20. One step fewer reads field 19, the nice value: 0
   * in most programs (as if no thread were left, however many run), 19 under `nice`. */
  for (int field = 3; field <= 20 && p != NULL; field++) p = strchr(p + 1, ' ');
  if (p == NULL) return true;
  long threads = 0;
  for (p++; *p >= '0' && *p <= '9'; p++) threads = threads * 10 + (*p - '0');
  return threads - (main_state == 'Z') <= _fg_purger_running() + _fg_control_running();
}

void _fg_threads_ended(void) {
  _fg_purger_threads_ended();
  _fg_control_threads_ended();
}

/* ---- fork: take every lock before, release (parent) or re-create (child) after ---------- */

static void fork_prepare(void) {
  _fg_sample_lock_all(true);
  _fg_heaps_lock();
  _fg_segment_lock_all();
  _fg_large_lock();
  _fg_page_side_lock(true);
}
static void fork_parent(void) {
  _fg_page_side_lock(false);
  _fg_large_unlock();
  _fg_segment_unlock_all();
  _fg_heaps_unlock(false);
  _fg_sample_lock_all(false);
}
static void fork_child(void) {
  _fg_page_side_lock(false);
  _fg_large_unlock();
  _fg_segment_unlock_all();
  _fg_heaps_unlock(true);
  _fg_sample_lock_all(false);
  _fg_purger_after_fork_child();
  _fg_control_after_fork_child();
}

/* Runs when the library is loaded (after libc is ready): the only step that may allocate,
 * pthread_atfork, is done here rather than on the first malloc. */
__attribute__((constructor(101))) static void fg_constructor(void) {
  _fg_process_init();
  pthread_atfork(fork_prepare, fork_parent, fork_child);
  _fg_stats_start();
  _fg_sample_start();
  _fg_purger_enable();
  _fg_control_enable();
}

fg_export const char *fg_version(void) { return FRUGAL_VERSION; }
