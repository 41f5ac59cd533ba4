/* control.c — the control channel (control.c in src/): a program with the ledger on answers
 * on its socket while it runs, whatever it is doing, and nothing about the channel can hurt
 * it. Each server is a child started with its own XDG_RUNTIME_DIR (the socket's directory):
 *   - idle in sleep(), it answers ledger, options and collect requests with its own pid;
 *   - while 8 threads allocate and free, 20 ledgers in a row have counts that add up;
 *   - clients that say nothing, say garbage, or leave mid-answer do not hurt it;
 *   - a forked child answers on a socket of its own, the parent on its own;
 *   - a peer of another uid is refused (as root: the directory opened to it for the test);
 *   - a socket left by a dead process is cleaned up by the next server;
 *   - the socket is gone after exit, and FRUGAL_CONTROL=0 makes none;
 *   - FRUGAL_SNAPSHOT_EVERY_S writes snapshots, the newest FRUGAL_SNAPSHOT_KEEP kept. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "testutil.h"

static char dir[48];      /* XDG_RUNTIME_DIR for the servers */
static char sockdir[80]; /* dir/frugal */

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

static void sock_of(pid_t pid, char *out, size_t size) { snprintf(out, size, "%s/%d.sock", sockdir, (int)pid); }

static bool exists(const char *path) {
  struct stat st;
  return stat(path, &st) == 0;
}

static bool wait_for(const char *path, bool present, double seconds) {
  double t0 = tu_now();
  while (exists(path) != present && tu_now() - t0 < seconds) sleep_ms(5);
  return exists(path) == present;
}

/* Sends `req` (may be NULL: say nothing) to pid's socket; reads the answer into out. */
static bool ask(pid_t pid, const char *req, char *out, size_t size) {
  struct sockaddr_un addr = {.sun_family = AF_UNIX};
  sock_of(pid, addr.sun_path, sizeof addr.sun_path);
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  out[0] = '\0';
  if (fd < 0 || connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
    if (fd >= 0) close(fd);
    return false;
  }
  if (req != NULL && send(fd, req, strlen(req), MSG_NOSIGNAL) < 0) {
    close(fd);
    return false;
  }
  size_t got = 0;
  ssize_t n;
  while (got < size - 1 && (n = read(fd, out + got, size - 1 - got)) > 0) got += (size_t)n;
  out[got] = '\0';
  close(fd);
  return got > 0;
}

/* The number after "key": in a JSON text (first occurrence after `after`, if given). */
static long long json_num(const char *text, const char *after, const char *key) {
  const char *s = after != NULL ? strstr(text, after) : text;
  char pat[64];
  snprintf(pat, sizeof pat, "\"%s\":", key);
  s = s != NULL ? strstr(s, pat) : NULL;
  return s != NULL ? strtoll(s + strlen(pat), NULL, 10) : -1;
}

/* ---- the servers ---------------------------------------------------------------------------- */

static void build_and_cache(void) {
  void *keep[2000];
  for (int i = 0; i < 2000; i++) keep[i] = tu_ptr(malloc(32 + (size_t)(i % 500)));
  for (int i = 0; i < 2000; i += 2) free(keep[i]);
  char *big = tu_ptr(malloc(4 << 20));
  memset(big, 1, 4 << 20);
  free(big);
}

/* A server's way to stop: SIGTERM, then a normal exit (exit handlers remove the socket). */
static volatile sig_atomic_t terminated;
static void on_term(int sig) { terminated = sig; }
static int serve_until_term(void) {
  signal(SIGTERM, on_term);
  while (!terminated) pause();
  return 0;
}

static int serve_idle(void) {
  build_and_cache();
  return serve_until_term();
}

static _Atomic int stop;
static void *churn(void *arg) {
  uint64_t seed = (uintptr_t)arg;
  void *slots[256] = {0};
  while (!stop) {
    seed = seed * 6364136223846793005u + 1442695040888963407u;
    unsigned i = (unsigned)(seed >> 40) % 256;
    free(slots[i]);
    slots[i] = malloc(16 + (seed >> 20) % 3000);
  }
  for (int i = 0; i < 256; i++) free(slots[i]);
  return NULL;
}
static int serve_busy(void) {
  pthread_t t[8];
  for (uintptr_t i = 0; i < 8; i++) pthread_create(&t[i], NULL, churn, (void *)(i + 1));
  serve_until_term();
  stop = 1;
  for (int i = 0; i < 8; i++) pthread_join(t[i], NULL);
  return 0;
}

static int serve_forking(void) {
  build_and_cache();
  pid_t pid = fork();
  if (pid == 0) {
    build_and_cache(); /* the child caches: its channel starts */
    return serve_until_term();
  }
  char path[160];
  snprintf(path, sizeof path, "%s/forked", getenv("XDG_RUNTIME_DIR"));
  FILE *f = fopen(path, "w");
  if (f != NULL) {
    fprintf(f, "%d\n", (int)pid);
    fclose(f);
  }
  return serve_until_term();
}

/* ---- the test ---------------------------------------------------------------------------------- */

static pid_t start_server(const char *argv0, const char *mode, const char *control) {
  pid_t pid = fork();
  if (pid == 0) {
    setenv("XDG_RUNTIME_DIR", dir, 1);
    setenv("FRUGAL_DECAY_MS", "60000", 1); /* what `collect` gives back is still cached */
    setenv("FRUGAL_STATS_FILE", "/dev/null", 1);
    setenv("FRUGAL_CONTROL", control != NULL ? control : "1", 1);
    execl("/proc/self/exe", argv0, mode, (char *)NULL);
    _exit(127);
  }
  return pid;
}

static int stop_server(pid_t pid) {
  int status = 0;
  kill(pid, SIGTERM);
  waitpid(pid, &status, 0);
  return status;
}

static void idle_and_bad_clients(const char *argv0) {
  pid_t pid = start_server(argv0, "idle", NULL);
  char path[160], buf[1 << 16];
  sock_of(pid, path, sizeof path);
  CHECK("a program with FRUGAL_CONTROL=1 makes its socket", wait_for(path, true, 5));
  struct stat st = {0}, dst = {0};
  bool stated = stat(path, &st) == 0 && stat(sockdir, &dst) == 0;
  CHECKF(stated && (st.st_mode & 0777) == 0600 && (dst.st_mode & 0777) == 0700, "socket mode %o, directory mode %o",
         (unsigned)(st.st_mode & 0777), (unsigned)(dst.st_mode & 0777));
  sleep_ms(300); /* asleep now */
  char pidkey[32];
  snprintf(pidkey, sizeof pidkey, "\"pid\":%d", (int)pid);
  CHECK("asleep in sleep(), it answers `ledger` with its own ledger",
        ask(pid, "ledger\n", buf, sizeof buf) && strstr(buf, "\"schema\":\"frugal-ledger/1\"") != NULL &&
            strstr(buf, pidkey) != NULL && json_num(buf, "\"live\"", "blocks") >= 1000);
  CHECK("`options` names FRUGAL_DECAY_MS with its value",
        ask(pid, "options\n", buf, sizeof buf) && strstr(buf, "\"name\":\"FRUGAL_DECAY_MS\",\"value\":60000") != NULL);
  CHECK("`collect` gives the cached 4 MiB block back and says so",
        ask(pid, "collect\n", buf, sizeof buf) && json_num(buf, NULL, "returned_bytes") >= (4 << 20));
  CHECK("`profile` without a profile: an error, in JSON",
        ask(pid, "profile\n", buf, sizeof buf) && strstr(buf, "{\"error\":") == buf);
  CHECK("garbage: an error, in JSON", ask(pid, "give me everything\n", buf, sizeof buf) && strstr(buf, "{\"error\":") == buf);
  double t0 = tu_now();
  bool silent = !ask(pid, NULL, buf, sizeof buf);
  CHECKF(silent && tu_now() - t0 < 3, "a client that says nothing is dropped (after %.2f s)", tu_now() - t0);
  /* Leaves mid-answer: connects, asks for the ledger, closes before reading. */
  for (int i = 0; i < 20; i++) {
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    memcpy(addr.sun_path, path, strlen(path) + 1);
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    if (connect(fd, (struct sockaddr *)&addr, sizeof addr) == 0 && write(fd, "ledger\n", 7) < 0) check_note("write failed");
    close(fd);
  }
  CHECK("after 20 clients that left mid-answer, it still answers",
        ask(pid, "ledger\n", buf, sizeof buf) && strstr(buf, pidkey) != NULL);
  int status = stop_server(pid);
  CHECK("...and lives on until SIGTERM ends it", WIFEXITED(status) && WEXITSTATUS(status) == 0);
  CHECK("the socket is gone after the process", wait_for(path, false, 5));
}

static void busy(const char *argv0) {
  pid_t pid = start_server(argv0, "busy", NULL);
  char path[160];
  static char buf[1 << 17];
  sock_of(pid, path, sizeof path);
  wait_for(path, true, 5);
  int good = 0;
  long long last = 0;
  for (int i = 0; i < 20; i++) {
    sleep_ms(20);
    if (!ask(pid, "ledger\n", buf, sizeof buf)) continue;
    long long allocs = json_num(buf, "\"totals\"", "allocations"), frees = json_num(buf, "\"totals\"", "frees");
    long long live = json_num(buf, "\"live\"", "blocks");
    if (allocs > last && allocs >= frees && live == allocs - frees && live <= 8 * 256 + 64) good++;
    last = allocs;
  }
  CHECKF(good == 20, "while 8 threads allocate and free, 20 ledgers in a row add up and grow (%d did)", good);
  stop_server(pid);
}

static void forked(const char *argv0) {
  pid_t pid = start_server(argv0, "forking", NULL);
  char path[160], buf[1 << 16], forked_path[160];
  snprintf(forked_path, sizeof forked_path, "%s/forked", dir);
  wait_for(forked_path, true, 5);
  sleep_ms(50);
  pid_t child = 0;
  FILE *f = fopen(forked_path, "r");
  if (f != NULL && fscanf(f, "%d", &child) != 1) child = 0;
  if (f != NULL) fclose(f);
  sock_of(child, path, sizeof path);
  char key[32], ckey[32];
  snprintf(key, sizeof key, "\"pid\":%d", (int)pid);
  snprintf(ckey, sizeof ckey, "\"pid\":%d", (int)child);
  CHECK("a forked child answers on a socket of its own, with its pid",
        child > 0 && wait_for(path, true, 5) && ask(child, "ledger\n", buf, sizeof buf) && strstr(buf, ckey) != NULL);
  CHECK("...and the parent on its own", ask(pid, "ledger\n", buf, sizeof buf) && strstr(buf, key) != NULL);
  if (child > 0) kill(child, SIGTERM);
  stop_server(pid);
  CHECK("both sockets are gone after both processes", wait_for(path, false, 5));
  unlink(forked_path);
}

static void other_uid(const char *argv0) {
  if (geteuid() != 0) {
    check_note("not root: the other-uid case needs a second uid");
    return;
  }
  pid_t pid = start_server(argv0, "idle", NULL);
  char path[160], buf[4096];
  sock_of(pid, path, sizeof path);
  wait_for(path, true, 5);
  /* Open the way for the test only: frugal checks the peer itself, not only the directory. */
  chmod(dir, 0755);
  chmod(sockdir, 0755);
  chmod(path, 0666);
  int fds[2];
  if (pipe(fds) != 0) return;
  pid_t peer = fork();
  if (peer == 0) {
    close(fds[0]);
    if (setgid(65534) != 0 || setuid(65534) != 0) _exit(3);
    bool got = ask(pid, "ledger\n", buf, sizeof buf);
    if (write(fds[1], got ? buf : "(nothing)", got ? strlen(buf) : 9) < 0) _exit(4);
    _exit(0);
  }
  close(fds[1]);
  ssize_t n = read(fds[0], buf, sizeof buf - 1);
  buf[n > 0 ? n : 0] = '\0';
  close(fds[0]);
  int peer_status = 0;
  waitpid(peer, &peer_status, 0);
  if (buf[0] == '\0') check_note("the peer ended with status 0x%x and said nothing", peer_status);
  chmod(dir, 0700);
  chmod(sockdir, 0700);
  CHECKF(strstr(buf, "refused") != NULL && strstr(buf, "frugal-ledger") == NULL, "a peer of another uid is refused (%s)",
         buf);
  stop_server(pid);
}

/* FRUGAL_SNAPSHOT_EVERY_S=1, FRUGAL_SNAPSHOT_KEEP=2, the ledger file in dir: after 3.5 s,
 * dir/snapshots holds the server's 2 newest, each a ledger of its own pid. */
static void periodic(const char *argv0) {
  char file[96], root[96];
  snprintf(file, sizeof file, "FRUGAL_STATS_FILE=%s/ledger.json", dir);
  snprintf(root, sizeof root, "%s/snapshots", dir);
  pid_t pid = fork();
  if (pid == 0) {
    setenv("XDG_RUNTIME_DIR", dir, 1);
    putenv(file);
    setenv("FRUGAL_SNAPSHOT_EVERY_S", "1", 1);
    setenv("FRUGAL_SNAPSHOT_KEEP", "2", 1);
    execl("/proc/self/exe", argv0, "idle", (char *)NULL);
    _exit(127);
  }
  sleep_ms(3500);
  char prefix[24], key[32], cmd[256], names[4096] = "";
  snprintf(prefix, sizeof prefix, "%d-", (int)pid);
  snprintf(key, sizeof key, "\"pid\":%d", (int)pid);
  snprintf(cmd, sizeof cmd, "ls %s", root);
  FILE *ls = popen(cmd, "r");
  int count = 0, good = 0;
  char name[128];
  while (ls != NULL && fgets(name, sizeof name, ls) != NULL) {
    name[strcspn(name, "\n")] = '\0';
    if (strncmp(name, prefix, strlen(prefix)) != 0 || strchr(name, '.') != NULL) continue;
    count++;
    strncat(names, name, sizeof names - strlen(names) - 2);
    strcat(names, " ");
    char path[256], text[1 << 15] = "";
    snprintf(path, sizeof path, "%s/%s/ledger.json", root, name);
    FILE *f = fopen(path, "r");
    size_t n = f != NULL ? fread(text, 1, sizeof text - 1, f) : 0;
    text[n] = '\0';
    if (f != NULL) fclose(f);
    good += strstr(text, key) != NULL;
  }
  if (ls != NULL) pclose(ls);
  CHECKF(count == 2 && good == 2, "every second a snapshot, the newest 2 kept, each its ledger (%s)", names);
  stop_server(pid);
}

static void stale_and_off(const char *argv0) {
  pid_t dead = fork();
  if (dead == 0) _exit(0);
  waitpid(dead, NULL, 0);
  char stale[160], path[160], buf[256];
  sock_of(dead, stale, sizeof stale);
  FILE *f = fopen(stale, "w");
  if (f != NULL) fclose(f);
  pid_t pid = start_server(argv0, "idle", NULL);
  sock_of(pid, path, sizeof path);
  wait_for(path, true, 5);
  CHECK("a socket left by a dead process is cleaned up by the next server", !exists(stale));
  stop_server(pid);
  pid = start_server(argv0, "idle", "0");
  sock_of(pid, path, sizeof path);
  sleep_ms(500);
  CHECK("FRUGAL_CONTROL=0 (ledger on): no socket, nothing answers", !exists(path) && !ask(pid, "ledger\n", buf, sizeof buf));
  stop_server(pid);
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "idle") == 0) return serve_idle();
  if (argc > 1 && strcmp(argv[1], "busy") == 0) return serve_busy();
  if (argc > 1 && strcmp(argv[1], "forking") == 0) return serve_forking();
  snprintf(dir, sizeof dir, "/tmp/frugal-control-test-XXXXXX");
  if (mkdtemp(dir) == NULL) return 1;
  snprintf(sockdir, sizeof sockdir, "%s/frugal", dir);
  idle_and_bad_clients(argv[0]);
  busy(argv[0]);
  forked(argv[0]);
  other_uid(argv[0]);
  stale_and_off(argv[0]);
  periodic(argv[0]);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd) != 0) check_note("could not remove %s", dir);
  return check_finish("control");
}
