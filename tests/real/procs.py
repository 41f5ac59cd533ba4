"""Running a suite's programs with a deadline, and leaving nothing behind.

A test that hangs under frugal must never hang the check, and a process that a test leaves
running (the pthread_exit bug of issue 26 leaves exactly such a process: a child whose only
thread has ended but which never exits) must neither outlive the check nor go unnoticed.

Every process a run starts carries CHECK_REAL_TOKEN=<token> in its environment, and its
children inherit it. When the run ends (or its deadline passes) we look through /proc for
processes that still carry the token: those are reported as strays and killed with SIGKILL
(frugal's purger blocks every other signal, so SIGTERM may not end a hung one). The process
group alone would miss children that called setsid() (daemons, regrtest's own workers, which
run in sessions of their own). A test that clears its children's environment escapes the
sweep, but then the process group kill still gets it unless it also setsid()s.
"""
import os
import signal
import subprocess
import threading
import time
import uuid

TOKEN_VAR = "CHECK_REAL_TOKEN"
# Tokens of the runs in progress (run() may be called from several threads at once): what
# kill_active() takes down when the check itself is stopped.
_active = set()
_active_lock = threading.Lock()
_stopping = False  # set by kill_active(): no run starts after it


def new_token(label=""):
    """A fresh token; the label only makes a stray's environment readable."""
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in label)
    return f"{safe}-{uuid.uuid4().hex[:12]}" if safe else uuid.uuid4().hex


def _describe(pid):
    """One line about a process: pid, state, thread count, command line."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = " ".join(f.read().replace(b"\0", b" ").decode(errors="replace").split())
        state = threads = "?"
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("State:"):
                    state = line.split()[1]
                elif line.startswith("Threads:"):
                    threads = line.split()[1]
        if not cmd:  # a zombie leader has no cmdline; its name is still known
            with open(f"/proc/{pid}/comm") as f:
                cmd = f"[{f.read().strip()}]"
        return f"pid {pid} state {state} threads {threads}: {cmd[:200]}"
    except OSError:
        return f"pid {pid} (gone)"


def find_strays(token):
    """Pids of live processes whose environment carries this token."""
    needle = f"{TOKEN_VAR}={token}\0".encode()
    me = os.getpid()
    pids = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        if needle in _environ(name):
            pids.append(int(name))
    return pids


def _environ(pid):
    """A process's environment block, b"" when it has none (kernel thread, gone, zombie).

    When the main thread has ended but others run on (the very state of a process that
    main's pthread_exit left alive), /proc/PID/environ fails with ESRCH: the leader has
    dropped its memory map. The live threads still have it, so ask them.
    """
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return f.read()
    except OSError:
        pass
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return b""
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/environ", "rb") as f:
                return f.read()
        except OSError:
            continue
    return b""


def kill_strays(token, grace=0.0):
    """SIGKILL every process still carrying the token; return a line about each.

    grace: seconds to let processes that are merely finishing (a resource tracker, a
    dbus-daemon told to quit) end on their own before they count as strays.
    """
    deadline = time.monotonic() + grace
    pids = find_strays(token)
    while pids and time.monotonic() < deadline:
        time.sleep(0.2)
        pids = find_strays(token)
    # A zombie whose threads have all ended has no environment left: what is found is alive.
    described = [_describe(p) for p in pids]
    for p in pids:
        try:
            os.kill(p, signal.SIGKILL)
        except OSError:
            pass
    return described


def rss_of(pids):
    """Resident bytes of these processes, summed (shared pages counted in each)."""
    total = 0
    for p in pids:
        try:
            with open(f"/proc/{p}/statm") as f:
                total += int(f.read().split()[1]) * PAGE
        except (OSError, IndexError, ValueError):
            pass
    return total


PAGE = os.sysconf("SC_PAGE_SIZE")


def kill_active():
    """Kill every process of every run in progress. For the check's own SIGTERM or ^C: the
    exception reaches only the main thread, and runs in other threads would go on."""
    global _stopping
    with _active_lock:
        _stopping = True
        tokens = list(_active)
    for token in tokens:
        kill_strays(token)


class Result:
    def __init__(self, returncode, timed_out, duration, strays, peak_rss, rss_exceeded):
        self.returncode = returncode  # None when killed (deadline or memory)
        self.timed_out = timed_out
        self.duration = duration
        self.strays = strays  # lines from kill_strays()
        self.peak_rss = peak_rss  # the most its processes held together (sampled)
        self.rss_exceeded = rss_exceeded  # killed for holding more than rss_limit


def run(cmd, env, timeout, log_path, cwd=None, token=None, on_line=None, stray_grace=2.0,
        rss_limit=None):
    """Run cmd with its output (stdout and stderr together) in log_path.

    The program runs in a session of its own so the whole group can be killed at the
    deadline. Output goes to a file, not a pipe: a stray that keeps a pipe open would block
    a reader forever; the file is tailed instead, and on_line(line) is called for each
    complete line as it appears (for progress and for naming what hangs).

    rss_limit: bytes. Ten times a second the resident memory of the processes carrying the
    token is summed; past the limit they are all killed. This machine is shared (24 GiB): one
    allocator bug that makes a test touch memory glibc only maps (gdk-pixbuf's pixbuf-fail
    reached 12.5 GiB under frugal and was OOM-killed, glibc: 10 MiB) must fail that test, not
    bring the kernel's OOM killer down on whoever else runs here. No rlimit instead: a limit
    on mappings would change which path the allocator takes (mmap failing) under test.
    """
    token = token or new_token()
    env = dict(env)
    env[TOKEN_VAR] = token
    start = time.monotonic()
    with _active_lock:
        if _stopping:
            raise SystemExit("check-real is stopping")
        with open(log_path, "wb") as out:
            proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdin=subprocess.DEVNULL,
                                    stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        _active.add(token)
    pos, partial = 0, b""

    def pump():
        nonlocal pos, partial
        if on_line is None:
            return
        with open(log_path, "rb") as f:
            f.seek(pos)
            chunk = f.read()
        pos += len(chunk)
        partial += chunk
        *lines, partial = partial.split(b"\n")
        for line in lines:
            on_line(line.decode(errors="replace"))

    try:
        outcome = _watch(proc, token, timeout, rss_limit, start, pump)
    except BaseException:
        # The check itself is being stopped (SIGTERM, ^C): take the run down with it, or its
        # session (which our signal never reached) would run on without anyone watching.
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        kill_strays(token)
        raise
    finally:
        with _active_lock:
            _active.discard(token)
    timed_out, exceeded, peak = outcome
    pump()
    if partial and on_line:
        on_line(partial.decode(errors="replace"))
    duration = time.monotonic() - start
    killed = timed_out or exceeded
    strays = kill_strays(token, grace=0 if killed else stray_grace)
    return Result(None if killed else proc.returncode, timed_out, duration, strays, peak,
                  exceeded)


def _watch(proc, token, timeout, rss_limit, start, pump):
    """Wait for proc, pumping its output, sampling memory, killing it at the deadline or the
    memory limit. Returns (timed_out, exceeded, peak).

    Memory is sampled every 0.1 s over the processes known to carry the token (a memset of
    gigabytes takes a second, so a slower look would let a blow-up run far past the limit);
    the /proc-wide search for them, which costs more, runs every 2 s."""
    timed_out = exceeded = False
    peak = 0
    known = [proc.pid]
    next_scan = start + 2.0
    next_pump = start
    while True:
        try:
            proc.wait(timeout=0.1)
            break
        except subprocess.TimeoutExpired:
            pass
        now = time.monotonic()
        if now >= next_pump:
            next_pump = now + 0.5
            pump()
        if now >= next_scan:
            next_scan = now + 2.0
            known = find_strays(token)
        peak = max(peak, rss_of(known))
        exceeded = rss_limit is not None and peak > rss_limit
        if exceeded or now - start > timeout:
            timed_out = not exceeded
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                pass
            if exceeded:
                kill_strays(token)
            proc.wait()
            break
    return timed_out, exceeded, peak
