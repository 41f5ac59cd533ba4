/* proctitle.c — option strings survive a program that writes over its environment's memory,
 * as redis, postgres and nginx do to set their process title (RELIABILITY.md, "Environment
 * and options"): the ledger file and the profile are written at exit where FRUGAL_STATS_FILE
 * and FRUGAL_PROFILE said when the program started, and no "cannot write" warning appears. */
#include <fcntl.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "testutil.h"

extern char **environ;

/* The child: every environment string blanked in place, then some allocations. */
static int child(void) {
  for (char **e = environ; *e != NULL; e++) memset(*e, 'x', strlen(*e));
  for (int i = 0; i < 1000; i++) free(tu_ptr(malloc(64 + (size_t)i)));
  char *keep = tu_ptr(malloc(3 << 20));
  memset(keep, 1, 3 << 20);
  free(keep);
  return 0;
}

static size_t file_size(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 ? (size_t)st.st_size : 0;
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "child") == 0) return child();
  char dir[] = "/tmp/frugal-proctitle-XXXXXX";
  if (mkdtemp(dir) == NULL) return 1;
  char stats[256], profile[256], env_stats[300], env_profile[300], err[256];
  snprintf(stats, sizeof stats, "%s/ledger.json", dir);
  snprintf(profile, sizeof profile, "%s/profile", dir);
  snprintf(err, sizeof err, "%s/stderr", dir);
  snprintf(env_stats, sizeof env_stats, "FRUGAL_STATS_FILE=%s", stats);
  snprintf(env_profile, sizeof env_profile, "FRUGAL_PROFILE=%s", profile);

  char *args[] = {argv[0], "child", NULL};
  char *env[] = {env_stats, NULL};
  char *env2[] = {env_profile, "FRUGAL_SAMPLE_BYTES=4096", NULL};
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 2, err, O_WRONLY | O_CREAT | O_APPEND, 0644);
  pid_t pid;
  int status = -1;
  bool ran = posix_spawn(&pid, argv[0], &fa, NULL, args, env) == 0 && waitpid(pid, &status, 0) == pid;
  CHECK("the child that blanks its environment ran and exited 0", ran && WIFEXITED(status) && WEXITSTATUS(status) == 0);
  CHECKF(file_size(stats) > 0, "FRUGAL_STATS_FILE written where it said at start (%zu bytes)", file_size(stats));

  ran = posix_spawn(&pid, argv[0], &fa, NULL, args, env2) == 0 && waitpid(pid, &status, 0) == pid;
  char json[300];
  snprintf(json, sizeof json, "%s/profile.json", profile);
  CHECK("the profiled child ran and exited 0", ran && WIFEXITED(status) && WEXITSTATUS(status) == 0);
  CHECKF(file_size(json) > 0, "FRUGAL_PROFILE written where it said at start (%zu bytes)", file_size(json));

  char text[4096] = "";
  FILE *f = fopen(err, "r");
  size_t n = f != NULL ? fread(text, 1, sizeof text - 1, f) : 0;
  text[n] = '\0';
  if (f != NULL) fclose(f);
  CHECKF(strstr(text, "cannot write") == NULL, "no \"cannot write\" warning (stderr: %s)", n ? text : "empty");
  posix_spawn_file_actions_destroy(&fa);
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd) != 0) check_note("could not remove %s", dir);
  return check_finish("proctitle");
}
