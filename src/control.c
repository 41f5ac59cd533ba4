/* control.c — the control channel: while the ledger or the profile is on (FRUGAL_CONTROL), a
 * thread of frugal's answers requests on a UNIX socket, so that a program that never ends (a
 * server, a daemon) can be looked into while it runs (`frugal snapshot`, `frugal top`). The
 * thread sleeps in poll, answers one request a connection from memory of its own (never the
 * program's heaps: the program's threads never wait on it), takes no signal, refuses peers of
 * another user, and ends with the program's last thread, as the purger does. */
#define _GNU_SOURCE
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

enum { OFF, NOT_STARTED, WANTED, STARTING, RUNNING }; /* as the purger's (purger.c) */
static _Atomic int state = OFF;
static int wake_fds[2] = {-1, -1}; /* written when the program's threads end (_fg_control_threads_ended) */
static int listen_fd = -1;
static char sock_path[sizeof(((struct sockaddr_un *)0)->sun_path)];
static char sock_dir[sizeof sock_path - 24]; /* chosen at start: the environment may be rewritten later */
static pid_t sock_pid; /* whose socket sock_path is: a fork child leaves its parent's alone */

/* Periodic snapshots (FRUGAL_SNAPSHOT_EVERY_S): written by this thread into
 * <dir>/snapshots/<pid>-<unix time>/, dir being FRUGAL_PROFILE's (else FRUGAL_STATS_FILE's
 * directory), the last FRUGAL_SNAPSHOT_KEEP of them kept: the hour before a crash or an OOM
 * kill stays on disk for `frugal diff`. */
static char snap_dir[3800]; /* room left in a PATH_MAX for what goes under it */
static uint64_t snap_every_ms, snap_due;

/* A client gets this long to send its request: one that connects and says nothing does not
 * hold the channel. */
#define REQUEST_MS 1000
#define SEND_MS 2000

/* The directory only this user can enter: $XDG_RUNTIME_DIR/frugal, else /tmp/frugal-<uid>.
 * Made 0700, and refused unless it is a directory of ours that no one else may enter: a
 * directory or a link planted there by another user would hand them the socket. The client
 * (python/frugal/control.py) derives the same path. */
static bool socket_dir(char *out, size_t size) {
  if (out[0] != '\0') return true; /* chosen already */
  const char *xdg = NULL;
  for (char **e = environ; e != NULL && *e != NULL; e++)
    if (strncmp(*e, "XDG_RUNTIME_DIR=/", 17) == 0) xdg = *e + 16;
  int n = xdg != NULL ? snprintf(out, size, "%s/frugal", xdg) : snprintf(out, size, "/tmp/frugal-%u", (unsigned)geteuid());
  if (n <= 0 || (size_t)n >= size) return false;
  mkdir(out, 0700);
  struct stat st;
  if (lstat(out, &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == geteuid() && (st.st_mode & 077) == 0) return true;
  out[0] = '\0';
  return false;
}

/* Calls fn(dir_fd, name, arg) for each entry of the directory open at fd, from its start.
 * getdents64 rather than opendir, which allocates. */
static void each_entry(int fd, void (*fn)(int fd, const char *name, void *arg), void *arg) {
  char buf[4096];
  long n;
  lseek(fd, 0, SEEK_SET);
  while ((n = syscall(SYS_getdents64, fd, buf, sizeof buf)) > 0) {
    for (long off = 0; off < n;) {
      struct {
        uint64_t ino;
        int64_t off;
        unsigned short reclen;
        unsigned char type;
        char name[];
      } *d = (void *)(buf + off);
      off += d->reclen;
      fn(fd, d->name, arg);
    }
  }
}

/* Sockets left by processes that are gone (a kill -9 runs no exit handler): any
 * "<pid>.sock" whose process does not exist. */
static void unlink_if_stale(int fd, const char *name, void *arg) {
  (void)arg;
  char *end;
  long pid = strtol(name, &end, 10);
  if (pid <= 0 || strcmp(end, ".sock") != 0 || pid == getpid()) return;
  if (kill((pid_t)pid, 0) != 0 && errno == ESRCH) unlinkat(fd, name, 0);
}
static void clean_stale(const char *dir) {
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  each_entry(fd, unlink_if_stale, NULL);
  close(fd);
}

static int listen_socket(void) {
  if (!socket_dir(sock_dir, sizeof sock_dir)) return -1;
  clean_stale(sock_dir);
  struct sockaddr_un addr = {.sun_family = AF_UNIX};
  snprintf(addr.sun_path, sizeof addr.sun_path, "%s/%d.sock", sock_dir, (int)getpid());
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  unlink(addr.sun_path); /* a socket of an earlier process with our pid */
  if (bind(fd, (struct sockaddr *)&addr, sizeof addr) != 0 || listen(fd, 8) != 0) {
    close(fd);
    return -1;
  }
  memcpy(sock_path, addr.sun_path, sizeof sock_path);
  sock_pid = getpid();
  chmod(sock_path, 0600);
  return fd;
}

static void send_text(int fd, const char *s) {
  fg_writer_t w = {(char *)s, 0, 0, fd};
  w.len = w.size = strlen(s);
  _fg_w_flush(&w);
}

/* One request, one answer, then the connection closes. The request is read first, even
 * from a peer about to be refused: its client then reads the answer rather than a reset. */
static void answer(int fd) {
  /* A client that stops reading holds the channel SEND_MS at most (then its answer is cut). */
  struct timeval send_timeout = {SEND_MS / 1000, 0};
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &send_timeout, sizeof send_timeout);
  char req[64];
  size_t got = 0;
  uint64_t deadline = _fg_clock_ms() + REQUEST_MS;
  while (got < sizeof req - 1 && memchr(req, '\n', got) == NULL) {
    uint64_t now = _fg_clock_ms();
    struct pollfd p = {fd, POLLIN, 0};
    if (now >= deadline || poll(&p, 1, (int)(deadline - now)) <= 0) return; /* nothing said in time */
    ssize_t n = read(fd, req + got, sizeof req - 1 - got);
    if (n <= 0) return;
    got += (size_t)n;
  }
  req[got] = '\0';
  req[strcspn(req, "\r\n")] = '\0';
  struct ucred cred;
  socklen_t len = sizeof cred;
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 || cred.uid != geteuid()) {
    send_text(fd, "{\"error\":\"refused: another user\"}\n");
  } else if (strcmp(req, "ledger") == 0) {
    _fg_stats_json_to(fd);
  } else if (strcmp(req, "profile") == 0) {
    if (!_fg_profile_json_to(fd)) send_text(fd, "{\"error\":\"no profile: FRUGAL_PROFILE is not set\"}\n");
  } else if (strcmp(req, "options") == 0) {
    _fg_options_json_to(fd);
  } else if (strcmp(req, "collect") == 0) {
    char out[96];
    snprintf(out, sizeof out, "{\"returned_bytes\":%lu}\n", (unsigned long)_fg_collect_now());
    send_text(fd, out);
  } else {
    send_text(fd, "{\"error\":\"unknown request: one of ledger, profile, options, collect\"}\n");
  }
}

static bool write_file(const char *dir, const char *name, bool (*body)(int fd)) {
  char path[sizeof snap_dir + 128];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return false;
  bool ok = body(fd);
  return close(fd) == 0 && ok;
}
static bool ledger_body(int fd) {
  _fg_stats_json_to(fd);
  return true;
}

/* Removes <snapshots>/<name>/ and what is in it (files only). */
static void remove_snapshot(int at, const char *name) {
  int fd = openat(at, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    unlinkat(fd, "ledger.json", 0);
    unlinkat(fd, "profile.json", 0);
    close(fd);
  }
  unlinkat(at, name, AT_REMOVEDIR);
}

/* Keeps this process's newest `keep` snapshots (their names sort by time: same pid, same
 * number of digits for centuries). */
typedef struct snapshots_s {
  char prefix[24], oldest[64];
  long count;
} snapshots_t;
static void count_snapshot(int fd, const char *name, void *arg) {
  (void)fd;
  snapshots_t *s = arg;
  if (strncmp(name, s->prefix, strlen(s->prefix)) != 0 || strlen(name) >= sizeof s->oldest || strchr(name, '.') != NULL)
    return; /* not ours, or one being written (.tmp) */
  s->count++;
  if (s->oldest[0] == '\0' || strcmp(name, s->oldest) < 0) memcpy(s->oldest, name, strlen(name) + 1);
}
static void prune(const char *root, long keep) {
  int fd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  snapshots_t s;
  snprintf(s.prefix, sizeof s.prefix, "%d-", (int)getpid());
  for (;;) { /* one pass per snapshot over the limit: usually one */
    s.count = 0;
    s.oldest[0] = '\0';
    each_entry(fd, count_snapshot, &s);
    if (s.count <= keep) break;
    remove_snapshot(fd, s.oldest);
  }
  close(fd);
}

/* One snapshot: written in a directory of its own under a temporary name, then renamed, so a
 * reader never finds half of one. */
static void snapshot(void) {
  char root[sizeof snap_dir + 16], final[sizeof root + 40], tmp[sizeof final + 8];
  snprintf(root, sizeof root, "%s/snapshots", snap_dir);
  mkdir(snap_dir, 0755);
  mkdir(root, 0755);
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  snprintf(final, sizeof final, "%s/%d-%010ld", root, (int)getpid(), (long)now.tv_sec);
  snprintf(tmp, sizeof tmp, "%s.tmp", final);
  if (mkdir(tmp, 0755) != 0 && errno != EEXIST) return;
  bool ok = write_file(tmp, "ledger.json", ledger_body);
  if (fg_option_get_string(FG_OPTION_PROFILE) != NULL) ok &= write_file(tmp, "profile.json", _fg_profile_json_to);
  if (ok && rename(tmp, final) == 0) {
    prune(root, _fg_option(FG_OPTION_SNAPSHOT_KEEP));
  } else {
    int at = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (at >= 0) remove_snapshot(at, strrchr(tmp, '/') + 1), close(at);
  }
}

/* poll's timeout: the polls for the program's end, or the next snapshot, whichever is first. */
static int timeout_ms(int poll_ms) {
  if (snap_every_ms == 0) return poll_ms;
  uint64_t now = _fg_clock_ms();
  int until = snap_due > now ? (int)(snap_due - now) : 0;
  return poll_ms >= 0 && poll_ms < until ? poll_ms : until;
}

/* Waits for a connection, or for the program's threads to end; then, as the purger does,
 * polls until no thread of the program is left (1, 2, 4 ... ms) and ends, taking its socket
 * with it. */
static void *control_main(void *arg) {
  (void)arg;
  _fg_own_begin();
  int poll_ms = -1;
  for (;;) {
    struct pollfd p[2] = {{listen_fd, POLLIN, 0}, {wake_fds[0], POLLIN, 0}};
    int n = poll(p, 2, timeout_ms(poll_ms));
    if (n < 0 && errno != EINTR) break;
    if ((p[0].revents | p[1].revents) & POLLNVAL) break; /* the program closed them: end, not spin */
    if (snap_every_ms != 0 && _fg_clock_ms() >= snap_due) {
      snapshot();
      snap_due = _fg_clock_ms() + snap_every_ms;
    }
    if (p[1].revents & POLLIN) {
      char sink[64];
      while (read(wake_fds[0], sink, sizeof sink) > 0) {
      }
      poll_ms = 1;
    }
    if (poll_ms > 0) {
      if (_fg_program_ended()) break;
      poll_ms = _fg_heaps_owned() != 0 ? -1 : poll_ms < 256 ? poll_ms * 2 : 256; /* while none owns one */
    }
    if (p[0].revents & POLLIN) {
      int fd = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC);
      if (fd >= 0) {
        answer(fd);
        close(fd);
      } else if (errno == EBADF || errno == ENOTSOCK || errno == EINVAL) {
        break; /* its descriptor now holds something of the program's */
      }
    }
  }
  unlink(sock_path);
  close(listen_fd);
  listen_fd = -1;
  atomic_store(&state, NOT_STARTED);
  return NULL;
}

/* The socket, then the thread (init.c's _fg_thread_start). */
static fg_noinline fg_rare void start(void) {
  if (wake_fds[0] < 0 && pipe2(wake_fds, O_CLOEXEC | O_NONBLOCK) != 0) wake_fds[0] = wake_fds[1] = -1;
  listen_fd = wake_fds[0] >= 0 ? listen_socket() : -1;
  if (listen_fd < 0) {
    atomic_store(&state, OFF);
    _fg_warning("control channel off: ", "no socket directory of this user's own (XDG_RUNTIME_DIR or /tmp)");
    return;
  }
  int err = _fg_thread_start(control_main);
  if (err != 0) {
    unlink(sock_path);
    close(listen_fd);
    listen_fd = -1;
  }
  atomic_store(&state, err == 0 ? RUNNING : OFF);
}

/* From the paths that cache memory (the purger's wake), frees among them: a fork child, or a
 * program whose channel ended with its threads and then went on, wants its socket again; the
 * next allocation's slow path starts it (_fg_background_start, never from a free). One load. */
void _fg_control_poke(void) {
  int s = atomic_load_explicit(&state, memory_order_relaxed);
  if (s == NOT_STARTED && atomic_compare_exchange_strong(&state, &s, WANTED)) atomic_store(&_fg_start_wanted, true);
}

void _fg_control_start_wanted(void) {
  int s = WANTED;
  if (atomic_compare_exchange_strong(&state, &s, STARTING)) start();
}

bool _fg_control_running(void) { return atomic_load(&state) >= STARTING; }

void _fg_control_threads_ended(void) {
  if (wake_fds[1] >= 0 && atomic_load(&state) == RUNNING && write(wake_fds[1], "", 1) < 0) {
  }
}

/* Where snapshots go: FRUGAL_PROFILE's directory, else FRUGAL_STATS_FILE's ("%p": the pid). */
static void snapshots_enable(void) {
  const char *profile = fg_option_get_string(FG_OPTION_PROFILE), *file = fg_option_get_string(FG_OPTION_STATS_FILE);
  snap_every_ms = (uint64_t)_fg_option(FG_OPTION_SNAPSHOT_EVERY_S) * 1000;
  if (snap_every_ms == 0) return;
  if (profile != NULL) {
    _fg_expand_pid(profile, snap_dir, sizeof snap_dir);
  } else if (file != NULL && strrchr(file, '/') != NULL && strncmp(file, "/dev/", 5) != 0) {
    _fg_expand_pid(file, snap_dir, sizeof snap_dir);
    *strrchr(snap_dir, '/') = '\0';
  } else if (file != NULL && strncmp(file, "/dev/", 5) != 0) {
    snprintf(snap_dir, sizeof snap_dir, ".");
  } else {
    snap_every_ms = 0;
    _fg_warning("FRUGAL_SNAPSHOT_EVERY_S ignored: ", "no directory (set FRUGAL_PROFILE or FRUGAL_STATS_FILE)");
    return;
  }
  snap_due = _fg_clock_ms() + snap_every_ms;
}

/* From the constructor: with FRUGAL_CONTROL=1, or periodic snapshots. Off by default, even
 * with the ledger or a profile on: its socket and pipe are descriptors the program did not
 * open, and programs that check theirs (D-Bus's own tests, in a fork child that got a channel
 * of its own) failed on them. */
void _fg_control_enable(void) {
  snapshots_enable();
  if (_fg_option(FG_OPTION_CONTROL) == 0 && snap_every_ms == 0) return;
  socket_dir(sock_dir, sizeof sock_dir);
  atomic_store(&state, WANTED);
  _fg_control_start_wanted(); /* the constructor is a safe place to start a thread */
}

/* Fork: the child has no control thread and must not answer on its parent's socket; it gets
 * one of its own at its first allocation's slow path (_fg_background_start), which a child
 * that only execs never reaches. Runs after the purger's (init.c), which clears the flag. */
void _fg_control_after_fork_child(void) {
  if (atomic_load(&state) == OFF) return;
  if (listen_fd >= 0) close(listen_fd);
  listen_fd = -1;
  if (wake_fds[0] >= 0) close(wake_fds[0]), close(wake_fds[1]);
  wake_fds[0] = wake_fds[1] = -1;
  atomic_store(&state, WANTED);
  atomic_store(&_fg_start_wanted, true);
}

/* The socket goes with the process (the thread may not get to it: exit() does not wait). */
__attribute__((destructor)) static void control_at_exit(void) {
  if (sock_pid == getpid() && sock_path[0] != '\0') unlink(sock_path);
}
