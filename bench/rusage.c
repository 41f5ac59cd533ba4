/* rusage — runs one workload and writes what wait4 saw of it (wall, user, sys, peak RSS,
 * faults, status) as one JSON object to a file. The lab's runner starts workloads through it
 * because a child forked from a big process (the Python runner) inherits that process's peak
 * RSS in ru_maxrss; forked from this small program, the peak RSS is the workload's own. The
 * allocator is preloaded into the workload only (--preload), never into this launcher. */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double tv_s(struct timeval tv) { return (double)tv.tv_sec + (double)tv.tv_usec / 1e6; }

int main(int argc, char **argv) {
  const char *out = NULL, *preload = NULL;
  int i = 1;
  for (; i < argc; i++) {
    if (strcmp(argv[i], "--out") == 0 && i + 1 < argc) {
      out = argv[++i];
    } else if (strcmp(argv[i], "--preload") == 0 && i + 1 < argc) {
      preload = argv[++i];
    } else if (strcmp(argv[i], "--") == 0) {
      i++;
      break;
    } else {
      break;
    }
  }
  if (!out || i >= argc) {
    fprintf(stderr, "usage: rusage --out FILE [--preload LIB] -- PROGRAM [ARGS...]\n");
    return 125;
  }
  double t0 = now_s();
  pid_t pid = fork();
  if (pid < 0) {
    perror("rusage: fork");
    return 125;
  }
  if (pid == 0) {
    if (preload && *preload) setenv("LD_PRELOAD", preload, 1);
    else unsetenv("LD_PRELOAD");
    execv(argv[i], &argv[i]);
    perror("rusage: exec");
    _exit(127);
  }
  int status = 0;
  struct rusage ru;
  while (wait4(pid, &status, 0, &ru) < 0) {
    /* EINTR only: nothing else can fail for our own child */
  }
  double wall = now_s() - t0;
  FILE *f = fopen(out, "w");
  if (!f) {
    perror("rusage: output file");
    return 125;
  }
  fprintf(f,
          "{\"wall\":%.6f,\"user\":%.6f,\"sys\":%.6f,\"maxrss\":%ld,\"minflt\":%ld,\"majflt\":%ld,"
          "\"exit_code\":%d,\"signal\":%d}\n",
          wall, tv_s(ru.ru_utime), tv_s(ru.ru_stime), ru.ru_maxrss * 1024L, ru.ru_minflt,
          ru.ru_majflt, WIFEXITED(status) ? WEXITSTATUS(status) : -1,
          WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  fclose(f);
  return 0;
}
