/* lifetime.c — frugal is invisible when nothing is wrong (RELIABILITY.md): its background
 * thread never keeps a process alive, never stands between a signal and the program, and a
 * signal frugal does not own does what it would do without frugal. Each case runs in a child
 * that a watchdog kills after a deadline (a hung child is the failure these cases look for:
 * an alarm cannot end it when the only thread left blocks every signal):
 *   - main() ends with pthread_exit after a worker that allocates: the process ends, exit 0,
 *     also at nice 19;
 *   - the same with a last worker that never allocates;
 *   - a thread forks, and the child's only thread returns: the child ends (CPython's
 *     test_threading hung on it);
 *   - SIGTERM reaches a program whose main thread has ended;
 *   - a daemon forks twice and setsids; posix_spawn and vfork + exec; a program that forbids
 *     itself new threads (seccomp) after start: all run and end as under glibc;
 *   - raise(SIGSEGV) and kill -SEGV end the program by SIGSEGV (guarded sampling's handler
 *     is installed), an ignored SIGSEGV stays ignored, a real fault still kills;
 *   - threads come and go by the hundred while the purger has little to do (decay 4 ms):
 *     glibc frees a dead thread's TLS while it holds the lock pthread_create takes, and a
 *     purger started from that free waited on it for ever. */
#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "testutil.h"

extern char **environ;

#define DEADLINE_S 10.0

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

/* Memory that goes to a cache when freed: the purger thread has something to give back. */
static void cache_something(void) {
  char *big = tu_ptr(malloc(8 * TU_MIB));
  memset(big, 1, 8 * TU_MIB);
  free(big);
  for (int i = 0; i < 2000; i++) free(tu_ptr(malloc(100 + (size_t)i)));
}

/* Runs fn in a child; waits up to DEADLINE_S, then kills it. `on_start` (if any) runs in the
 * parent with the child's pid, e.g. to signal it. Returns the wait status, or -1 if the
 * child had to be killed (hung), and the seconds it took in *took. */
static int run_deadline(void (*fn)(void), void (*on_start)(pid_t), double *took) {
  fflush(stdout);
  double t0 = tu_now();
  pid_t pid = fork();
  if (pid == 0) {
    struct rlimit nocore = {0, 0};
    setrlimit(RLIMIT_CORE, &nocore);
    fn();
    exit(0);
  }
  if (pid < 0) return -2;
  if (on_start != NULL) on_start(pid);
  int status;
  for (;;) {
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) break;
    if (r < 0 && errno != EINTR) return -2;
    if (tu_now() - t0 > DEADLINE_S) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      *took = tu_now() - t0;
      return -1;
    }
    sleep_ms(2);
  }
  *took = tu_now() - t0;
  return status;
}

static const char *how(int status, char *buf, size_t len) {
  if (status == -1) return "hung: killed after the deadline";
  tu_child_t c = {.status = status};
  return tu_child_how(&c, buf, len);
}

static bool exited_ok(int status) { return status >= 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0; }
static bool died_of(int status, int sig) { return status >= 0 && WIFSIGNALED(status) && WTERMSIG(status) == sig; }

/* ---- the program's last thread ends: the process ends -------------------------------------- */

static void *worker_allocating(void *arg) {
  (void)arg;
  sleep_ms(100); /* main has ended by now */
  cache_something();
  return NULL;
}
static void main_exits_first(void) {
  cache_something();
  pthread_t t;
  pthread_create(&t, NULL, worker_allocating, NULL);
  pthread_exit(NULL);
}

static void *worker_quiet(void *arg) {
  (void)arg;
  sleep_ms(200);
  return NULL;
}
static void last_thread_never_allocates(void) {
  cache_something();
  pthread_t t;
  pthread_create(&t, NULL, worker_quiet, NULL);
  pthread_exit(NULL);
}

/* main_exits_first under `nice`: how the program ended is read from /proc/self/stat, whose field 19,
 * beside the thread count, is the nice value. */
static void main_exits_first_niced(void) {
  errno = 0;
  if (nice(19) == -1 && errno != 0) _exit(4);
  main_exits_first();
}

/* CPython's test_main_thread_after_fork_from_nonmain_thread: a thread forks; in the child,
 * that thread (the only one) allocates and returns from its function. */
static void *forking_thread(void *arg) {
  (void)arg;
  cache_something();
  pid_t pid = fork();
  if (pid == 0) {
    cache_something();
    return NULL; /* the child's last thread ends: exit(0) */
  }
  int status = -1;
  double t0 = tu_now();
  while (waitpid(pid, &status, WNOHANG) == 0 && tu_now() - t0 < DEADLINE_S - 2) sleep_ms(2);
  if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
    kill(pid, SIGKILL);
    _exit(3);
  }
  return NULL;
}
static void fork_from_thread(void) {
  pthread_t t;
  pthread_create(&t, NULL, forking_thread, NULL);
  pthread_join(t, NULL);
}

/* ---- signals reach the program ---------------------------------------------------------------- */

static void *sleeper(void *arg) {
  (void)arg;
  cache_something();
  for (;;) pause();
  return NULL;
}
static void main_gone_worker_waits(void) {
  cache_something();
  pthread_t t;
  pthread_create(&t, NULL, sleeper, NULL);
  pthread_exit(NULL);
}
static void send_term_later(pid_t pid) {
  sleep_ms(300);
  kill(pid, SIGTERM);
}

static void raise_segv(void) {
  cache_something();
  raise(SIGSEGV);
  sleep_ms(500);
  exit(7); /* survived */
}
static void wait_for_signal(void) {
  cache_something();
  sleep_ms(3000);
  exit(7);
}
static void send_segv_later(pid_t pid) {
  sleep_ms(200);
  kill(pid, SIGSEGV);
}
static void ignored_segv(void) {
  signal(SIGSEGV, SIG_IGN);
  cache_something();
  raise(SIGSEGV); /* ignored, as without frugal */
  kill(getpid(), SIGSEGV);
}
static void real_fault(void) {
  cache_something();
  char *p = mmap(NULL, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  *(volatile char *)p = 1;
  exit(7);
}
static void real_fault_ignored(void) { /* the kernel forces the default action on a fault */
  signal(SIGSEGV, SIG_IGN);
  real_fault();
}

/* ---- programs that fork, spawn, or sandbox themselves ------------------------------------------ */

static void daemonize(void) {
  int fds[2];
  if (pipe(fds) != 0) exit(5);
  cache_something();
  pid_t first = fork();
  if (first == 0) {
    setsid();
    cache_something();
    if (fork() != 0) _exit(0); /* the intermediate process leaves at once */
    cache_something();
    char *p = tu_ptr(malloc(1000));
    memset(p, 'd', 1000);
    if (write(fds[1], p, 1) != 1) exit(6);
    free(p);
    exit(0);
  }
  close(fds[1]);
  int status;
  waitpid(first, &status, 0);
  char c = 0;
  ssize_t n = read(fds[0], &c, 1); /* the daemon's byte, or end of file if it died */
  if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0) || n != 1 || c != 'd') exit(4);
}

static void spawn_and_vfork(void) {
  cache_something();
  char *argv[] = {"true", NULL};
  pid_t pid;
  int status;
  if (posix_spawnp(&pid, "true", NULL, NULL, argv, environ) != 0) exit(4);
  waitpid(pid, &status, 0);
  if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0)) exit(5);
  pid = vfork();
  if (pid == 0) {
    execvp("true", argv);
    _exit(127);
  }
  waitpid(pid, &status, 0);
  if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0)) exit(6);
  cache_something();
}

/* The program forbids itself new threads (clone and clone3 fail with EPERM), then caches
 * memory: frugal's thread cannot start, and nothing else changes. */
static void sandboxed(void) {
  struct sock_filter code[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_clone, 2, 0),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 435 /* clone3 */, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
  };
  struct sock_fprog prog = {sizeof code / sizeof *code, code};
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) exit(4);
  for (int i = 0; i < 3; i++) cache_something();
  pthread_t t;
  if (pthread_create(&t, NULL, worker_quiet, NULL) == 0) exit(5); /* the sandbox holds */
}

/* ---- threads come and go: frugal starts no thread from a free ------------------------------ */

static void *churn_worker(void *arg) {
  (void)arg;
  for (int i = 0; i < 64; i++) free(tu_ptr(malloc(32 + (size_t)i * 24)));
  free(tu_ptr(malloc(100 << 10)));
  return NULL;
}

/* Batches of 8 threads with 8 MiB stacks: 64 MiB is past glibc's 40 MiB stack cache, so each
 * batch's joins free cached stacks, and their TLS through free, under its stack lock. Two
 * such loops at once for 2 s, the purger's decay 4 ms: its passes run out of work often. */
static void *churn_loop(void *arg) {
  (void)arg;
  double t0 = tu_now();
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 8 * TU_MIB);
  while (tu_now() - t0 < 2.0) {
    pthread_t t[8];
    int n = 0;
    for (int i = 0; i < 8; i++) n += pthread_create(&t[n], &attr, churn_worker, NULL) == 0;
    for (int i = 0; i < n; i++) pthread_join(t[i], NULL);
  }
  pthread_attr_destroy(&attr);
  return NULL;
}
static void churn_run(void) {
  pthread_t t[2];
  for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, churn_loop, NULL);
  for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
}
static void churn(void) { /* options are read at start: a fresh process with a short decay */
  setenv("FRUGAL_DECAY_MS", "4", 1);
  execl("/proc/self/exe", "lifetime", "churn", (char *)NULL);
  _exit(127);
}

typedef struct case_s {
  const char *name;
  void (*run)(void);
  void (*on_start)(pid_t);
  int signal; /* 0: must exit 0; else must die of it */
} case_t;

static const case_t cases[] = {
    {"main() calls pthread_exit, its worker allocates and returns: the process ends", main_exits_first, NULL, 0},
    {"main() calls pthread_exit, its last worker never allocates: the process ends", last_thread_never_allocates,
     NULL, 0},
    {"main() calls pthread_exit at nice 19, its worker allocates and returns: the process ends",
     main_exits_first_niced, NULL, 0},
    {"a thread forks; the child's only thread returns: the child ends", fork_from_thread, NULL, 0},
    {"SIGTERM reaches a program whose main thread has ended", main_gone_worker_waits, send_term_later, SIGTERM},
    {"raise(SIGSEGV) kills the program", raise_segv, NULL, SIGSEGV},
    {"kill -SEGV from another process kills the program", wait_for_signal, send_segv_later, SIGSEGV},
    {"an ignored SIGSEGV sent by raise or kill stays ignored", ignored_segv, NULL, 0},
    {"a real fault kills the program by SIGSEGV", real_fault, NULL, SIGSEGV},
    {"a real fault kills the program even with SIGSEGV ignored", real_fault_ignored, NULL, SIGSEGV},
    {"a daemon forks twice and setsids: it runs and ends", daemonize, NULL, 0},
    {"posix_spawn and vfork + exec run and are waited for", spawn_and_vfork, NULL, 0},
    {"a program that forbids itself new threads runs on", sandboxed, NULL, 0},
    {"threads come and go while the purger idles: no deadlock with glibc's stack lock", churn, NULL, 0},
};

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "churn") == 0) {
    churn_run();
    return 0;
  }
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    const case_t *c = &cases[i];
    double took = 0;
    char buf[96];
    int status = run_deadline(c->run, c->on_start, &took);
    bool ok = c->signal == 0 ? exited_ok(status) : died_of(status, c->signal);
    CHECKF(ok, "%s (%s, %.2f s)", c->name, how(status, buf, sizeof buf), took);
  }
  return check_finish("lifetime");
}
