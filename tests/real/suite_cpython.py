"""CPython's own regression tests (Debian's libpython3.11-testsuite), run by regrtest.

Run by the system interpreter, /usr/bin/python3 (3.11), whose tests the package ships; not a
pyenv or venv python, whose stdlib may not match. One regrtest per mode runs the whole slice
with -j2: each test module in a worker process of its own, so a module that crashes or hangs
takes only its own result with it.

PYTHONMALLOC=malloc in every column (glibc's too): by default CPython serves every object of
up to 512 bytes from its own arenas (which it maps with mmap, not malloc), so frugal would see
only big objects and the C libraries' allocations. With it, every object, frame and buffer is
a malloc/free, across threads and forks, which is what the check is for; the glibc baseline
runs the same way, so the comparison stays like for like.

Per-module timeouts: regrtest's --timeout arms faulthandler in each worker, which on expiry
prints every thread's Python stack and exits the worker; the stack names the test method that
hung (parse_hang). regrtest itself kills a worker at 1.5x the timeout, and the harness kills
the whole run (and every process it left) at the mode's overall bound.
"""
import os
import re
import shutil
import subprocess

import procs

NAME = "cpython"
PYTHON = "/usr/bin/python3"
PACKAGE = "libpython3.11-testsuite"
# See modes.py: with PYTHONMALLOC=malloc, N=1000 guarded ~45,000 blocks over 8 core modules,
# N=50 only ~6,000 (the 256 slots fill with long-lived objects early).
GUARD_EVERY = 1000
# Resources: everything but what needs the network, a display, sound, a terminal, multi-GB
# files on disk (largefile) or downloaded time zone data.
RESOURCES = "all,-network,-urlfetch,-gui,-audio,-curses,-largefile,-tzdata"
# test_bigmem sizes its data to this bound (and skips what needs more); 2 workers x 2 GiB fits
# the 24 GiB machine with room for whoever else runs on it.
MEMLIMIT = "2G"
# The whole run (regrtest, its two workers and everything they start) is killed when its
# processes hold more than this together (procs.run): bigmem's tests at -M 2G hold ~2-5 GiB.
RSS_LIMIT = 12 << 30

# The slice, slowest first so that -j2 packs them well (durations: glibc, this 2-core VM).
# Why each is here: threads, fork, subprocess, multiprocessing, concurrent.futures, ctypes,
# tracemalloc's allocator hooks, big data, and the core types that allocate the most.
# Left out: test_capi (Debian's package does not ship it), test_socket (on this VM it blocks
# in accept() under glibc too until its timeout: 15 minutes for nothing in each column).
FULL = [
    "test_multiprocessing_forkserver",  # processes, queues, shared memory, managers
    "test_concurrent_futures",  # process and thread pools; workers killed on purpose
    "test_asyncio",             # event loops, threads, subprocesses, sockets
    "test_io",                  # buffered I/O from threads, big buffers, signals mid-write
    "test_subprocess",          # fork/exec, pipes, pass_fds, process groups
    "test_signal",              # handlers, signals mid-allocation, pthread_kill
    "test_threading",           # threads, fork from a thread, a main thread that ends first
    "test_os",                  # fork, exec, environ, file descriptors
    "test_bigmem",              # strings, bytes, lists and dicts of GiB size (-M)
    "test_faulthandler",        # SIGSEGV, SIGABRT, SIGFPE on purpose: signals frugal must pass on
    "test_decimal",
    "test_pickle",
    "test_tarfile",
    "test_zipfile",
    "test_unicode",
    "test_re",
    "test_ssl",                 # OpenSSL: a C library that allocates a lot, over local sockets
    "test_tracemalloc",         # hooks every allocation
    "test_ctypes",              # C calls, callbacks from C threads
    "test_sys",
    "test_thread",
    "test_threadsignals",
    "test_threading_local",
    "test_queue",
    "test_threadedtempfile",
    "test_fork1",
    "test_wait4",
    "test_posix",
    "test_pty",
    "test_popen",
    "test_gc",
    "test_weakref",
    "test_finalization",
    "test_xml_etree_c",         # expat and C element trees
    "test_pyexpat",
    "test_datetime",
    "test_json",
    "test_dict",
    "test_list",
    "test_set",
    "test_tuple",
    "test_bytes",
    "test_array",
    "test_memoryview",
    "test_buffer",
    "test_deque",
    "test_collections",
    "test_itertools",
    "test_functools",
    "test_ordered_dict",
    "test_sort",
    "test_heapq",
    "test_struct",
    "test_long",
    "test_float",
    "test_codecs",
    "test_csv",
    "test_marshal",
    "test_zlib",
    "test_bz2",
    "test_lzma",
    "test_gzip",
    "test_hashlib",
    "test_hmac",
    "test_mmap",
    "test_select",
    "test_selectors",
]

# The short slice CI runs: threads (and the fork-from-a-thread tests that hang when a child's
# last thread ends with frugal's purger still alive), fork, subprocess, concurrent.futures (its
# workers crash on purpose), faulthandler's deliberate faults, ctypes and the core types.
# ~80 s of tests under glibc on this VM (load 7-10), ~45 s a mode at -j2. multiprocessing,
# asyncio, signals, bigmem, io and the rest only in the full run.
QUICK = [
    "test_concurrent_futures",
    "test_subprocess",
    "test_faulthandler",
    "test_threading",
    "test_pickle",
    "test_os",
    "test_ctypes",
    "test_unicode",
    "test_re",
    "test_thread",
    "test_fork1",
    "test_gc",
    "test_json",
    "test_dict",
    "test_list",
    "test_set",
    "test_zlib",
    "test_hashlib",
]
# ... less these test classes, the slowest (glibc, loaded VM) and the most repetitive: they
# are --ignore patterns for regrtest (matched against each part of a test's id). What stays
# of test_concurrent_futures (~27 s of its 144): the fork and forkserver pools' deadlock tests
# (workers that crash on purpose, with SIGSEGV among others), the fork pool's executor and
# shutdown tests, the thread pool's, and the futures themselves.
QUICK_IGNORE = [
    "ProcessPoolSpawn*",            # test_concurrent_futures: spawn pools (~40 s)
    "*WaitTest", "*WaitTests",      # test_concurrent_futures: wait() with sleeps (~70 s)
    "*AsCompletedTest",             # test_concurrent_futures (~17 s)
    "ProcessPoolForkserverProcessPool*",  # test_concurrent_futures (~12 s)
    "ProcessTestCase",              # test_subprocess: the portable cases (~8 s); the POSIX
    "ProcessTestCaseNoPoll",        # ones stay; and the same again without poll (~7 s)
]

# In the quick run, the ledger and guards modes run this subset only (see check_real.py):
# fork with threads, subprocess, ctypes and the allocation-heaviest core types. test_threading
# and test_concurrent_futures stay with plain and secure: a hang there costs a timeout.
QUICK_SUBSET = [
    "test_subprocess",
    "test_fork1",
    "test_thread",
    "test_ctypes",
    "test_pickle",
    "test_json",
    "test_dict",
    "test_gc",
]


def available():
    """None when the suite can run here, else why not."""
    if not os.path.exists(PYTHON):
        return f"{PYTHON} is missing"
    probe = subprocess.run([PYTHON, "-c", "import test.libregrtest, test.test_dict"],
                           capture_output=True, text=True, check=False)
    if probe.returncode != 0:
        return f"{PACKAGE} is not installed (apt-get install {PACKAGE})"
    return None


def version():
    """What the baseline depends on: the interpreter and the tests' package."""
    v = subprocess.run(["dpkg-query", "-W", "-f=${Version}", PACKAGE],
                       capture_output=True, text=True, check=False).stdout.strip()
    py = subprocess.run([PYTHON, "-VV"], capture_output=True, text=True,
                        check=False).stdout.strip()
    return f"{py}; {PACKAGE} {v}"


def slice_for(size):
    return list(FULL if size == "full" else QUICK)


def run_options(size):
    """Extra arguments to run() and rerun() for a size: the quick run's ignored classes."""
    return {"ignore": QUICK_IGNORE if size == "quick" else ()}


# "0:01:02 load avg: 3.05 [ 4/59/1] test_x failed (2 errors)" -- regrtest's line per module.
PROGRESS = re.compile(
    r"^(?:\d+:\d\d:\d\d )?(?:load avg: [\d.]+ )?\[\s*\d+/\d+(?:/\d+)?\] (test\S*) (.*)$")
# A heartbeat ("0:00:35 load avg: 10.30 running: test_x (33.8 sec)") or the closing summary:
# either ends the output block that follows a progress line.
BLOCK_END = re.compile(r"^(\d+:\d\d:\d\d (load avg: [\d.]+ )?running: |== Tests result|Total duration)")


def status_of(rest, block):
    """regrtest's verdict text (and the module's output) -> our status."""
    if rest.startswith("passed"):
        return "pass"
    if rest.startswith(("skipped", "ran no tests")):
        return "skip"
    if rest.startswith("failed (env changed)"):
        return "env"
    if rest.startswith("timed out"):
        return "timeout"
    if rest.startswith("crashed") and any(l.startswith("Timeout (") for l in block):
        return "timeout"  # faulthandler's --timeout fired and exited the worker
    return "fail"  # failed (...), crashed, interrupted, uncaught exception


FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<fn>\S+)')


def parse_hang(block):
    """From faulthandler's dump, the test method that hung (or the setUp/tearDown, or the
    test module's own helper it was in) and the call it was waiting in."""
    for i, line in enumerate(block):
        if not line.startswith(("Thread 0x", "Current thread 0x")):
            continue
        frames = []
        for l in block[i + 1:]:
            m = FRAME.match(l)
            if not m:
                break
            frames.append(m)
        in_tests = [m for m in frames if os.path.basename(m["file"]).startswith("test_")]
        pick = next((m for m in in_tests if m["fn"].startswith("test")), None) or \
            (in_tests[0] if in_tests else None)
        if pick:
            top = frames[0]
            return (f"hung in {pick['fn']} ({os.path.basename(pick['file'])}:{pick['line']}), "
                    f"waiting in {top['fn']} ({os.path.basename(top['file'])}:{top['line']})")
    return "hung (faulthandler's dump names no frame in a test file)"


FAILED_TEST = re.compile(r"^(FAIL|ERROR|UNEXPECTED SUCCESS): (\S+) \((\S+)\)")


def parse_failures(block):
    """'ERROR: test_x (test.test_y.Class.test_x)' headers from -W's verbose output, each with
    its traceback's last line (the exception), plus frugal's own report lines if any."""
    out = []
    for i, line in enumerate(block):
        m = FAILED_TEST.match(line)
        if not m:
            continue
        exc = ""
        for l in block[i + 1:i + 400]:
            if l.startswith(("=====", "-----")) and exc:
                break
            if l.startswith("-----"):
                continue
            if l.strip() and not l.startswith((" ", "Traceback", "=====")):
                exc = l.strip()
        out.append(f"{m[1]} {m[3]}: {exc[:160]}")
    for line in block:
        if line.startswith("frugal:") or "Fatal Python error" in line:
            out.append(line.strip()[:200])
    if out:
        return out
    # No unittest report: the module failed as a whole (an import error, a worker that died).
    for line in block:
        m = re.match(r"^test \S+ (?:failed|crashed) -- (.*)", line)
        if m and not m[1].startswith("Traceback"):
            out.append(m[1][:200])
    exc = [l.strip() for l in block if re.match(r"^[A-Za-z_.]*(Error|Exception|Exit)\b", l)]
    crash = [l.strip() for l in block if "Exit code" in l]
    return out + exc[-1:] + crash[:1]


DURATION = re.compile(r"\((?:(\d+) hour )?(?:(\d+) min)? ?(?:([\d.]+) sec)?\)$")


def duration_of(verdict):
    """regrtest appends a module's time when it is 30 s or more: "passed (1 min 3 sec)".
    None for a shorter one (under 30 s)."""
    m = DURATION.search(verdict)
    if not m or not any(m.groups()):
        return None
    h, mi, sec = (float(g) if g else 0.0 for g in m.groups())
    return h * 3600 + mi * 60 + sec


def parse_log(lines, tests):
    """regrtest's output -> {module: {status, detail, duration}} for every module reported."""
    results = {}
    current = None  # (name, rest, block lines)

    def close():
        if current:
            name, rest, block = current
            st = status_of(rest, block)
            detail = []
            verdict_duration = None
            if st == "timeout":
                detail.append(parse_hang(block))
                t = next((l for l in block if l.startswith("Timeout (")), "")
                m = re.match(r"Timeout \((\d+):(\d\d):(\d\d)\)", t)
                if m:  # the worker ran until faulthandler's timeout
                    h, mi, sec = map(int, m.groups())
                    verdict_duration = h * 3600 + mi * 60 + sec
            elif st in ("fail", "env"):
                detail = parse_failures(block) or [rest]
            elif st == "skip":
                detail = [l.split(" -- ", 1)[1] for l in block if " skipped -- " in l][:1]
            verdict = rest.split(" -- ")[0]
            results[name] = {"status": st, "detail": detail, "verdict": verdict,
                             "duration": verdict_duration or duration_of(verdict)}

    for line in lines:
        m = PROGRESS.match(line)
        if m and m[1] in tests:
            close()
            current = (m[1], m[2], [])
        elif BLOCK_END.match(line):
            close()
            current = None
        elif current:
            current[2].append(line)
    close()
    return results


def still_running(lines, tests, results):
    """The modules a run killed at its bound was still running: those regrtest last named
    as running ("running: test_x (5 min)") without a result since; failing that, the first
    two without a result (regrtest hands modules out in order to its two workers)."""
    pending = [t for t in tests if t not in results]
    for line in reversed(lines):
        if "running: " in line:
            names = [r.split(" (")[0].strip() for r in line.split("running: ", 1)[1].split(",")]
            named = [t for t in pending if t in names]
            if named:
                return named
            break
    return pending[:2]


def run(tests, env, outdir, label, timeout, bound, echo, ignore=()):
    """Run the slice once in one mode. env: the mode's environment. timeout: per module (s).
    bound: the whole run (s). ignore: regrtest --ignore patterns (QUICK_IGNORE).
    Returns ({module: result}, run info)."""
    env = dict(env)
    env["PYTHONMALLOC"] = "malloc"
    work = os.path.join(outdir, f"tmp-{label}")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    env["TMPDIR"] = work  # regrtest's and the tests' scratch files, removed afterwards
    log_path = os.path.join(outdir, f"{label}.log")
    cmd = [PYTHON, "-m", "test", "-j2", "-W", f"--timeout={timeout}", "-u", RESOURCES,
           "-M", MEMLIMIT]
    if ignore:
        ignore_file = os.path.join(outdir, "ignore.txt")
        with open(ignore_file, "w") as f:
            f.write("\n".join(ignore) + "\n")
        cmd += ["--ignorefile", ignore_file]
    cmd += tests
    lines = []

    def on_line(line):
        lines.append(line)
        m = PROGRESS.match(line)
        if m:
            echo(f"  {label}: {m[1]} {m[2].split(' -- ')[0]}")

    r = procs.run(cmd, env, bound, log_path, cwd=work, token=procs.new_token(label),
                  on_line=on_line, rss_limit=RSS_LIMIT, stray_grace=5.0)
    shutil.rmtree(work, ignore_errors=True)
    results = parse_log(lines, set(tests))
    if r.timed_out or r.rss_exceeded:
        hung = still_running(lines, tests, results)
        for t in tests:
            if t not in results:
                if t in hung and r.rss_exceeded:
                    results[t] = {"status": "fail", "verdict": "memory",
                                  "detail": [(f"running when the run's processes held "
                                              f"{r.peak_rss / 2**30:.1f} GiB: all killed")]}
                elif t in hung:
                    results[t] = {"status": "timeout", "verdict": "still running at the bound",
                                  "detail": [(f"still running when the whole run hit its "
                                              f"{bound:.0f} s bound")]}
                else:
                    results[t] = {"status": "notrun", "verdict": "not reached",
                                  "detail": ["not started before the run was killed"]}
    else:
        for t in tests:
            results.setdefault(t, {"status": "notrun", "verdict": "no result line",
                                   "detail": ["regrtest printed no result for it"]})
    info = {"duration": round(r.duration, 1), "returncode": r.returncode,
            "timed_out": r.timed_out, "rss_exceeded": r.rss_exceeded,
            "peak_rss_mib": r.peak_rss >> 20, "strays": r.strays, "log": log_path}
    return results, info


def rerun(test, env, outdir, label, timeout, ignore=()):
    """One module again, alone (in a worker still, so the timeout holds): used to tell a
    test that is flaky on this machine from one that frugal breaks."""
    results, _ = run([test], env, outdir, label, timeout, timeout * 2 + 60, lambda s: None,
                     ignore)
    return results[test]
