"""GNOME-style "installed tests": the test programs a Debian -tests package ships, each described
by a .test file in /usr/share/installed-tests/<suite>/ (Exec=, Type=, Output=TAP).

We run them ourselves rather than through gnome-desktop-testing-runner so that each test gets a
timeout of its own, a fresh working directory and HOME, a process sweep of its own (strays are
attributed to the test that left them), and a name for what hung: GLib's TAP output says
"ok N /path" after each test case, so a program killed at its timeout was in case N+1, which
the program's own -l lists.

Result per test program: pass (exit 0), skip (exit 77, or TAP with nothing but skips), timeout,
or fail (any other exit, a signal, or a stray process left behind).
"""
import configparser
import glob
import os
import shlex
import shutil
import subprocess
import threading
import time

import modes
import procs

ROOT = "/usr/share/installed-tests"
# A test program whose processes hold more than this is killed and fails (procs.run says why).
# The largest any of these suites' programs holds under glibc is ~0.3 GiB.
RSS_LIMIT = 4 << 30


class Suite:
    def __init__(self, name, dirname, package, guard_every, full, quick, quick_subset,
                 exclude=(), args=None, why=""):
        self.NAME = name
        self.dirname = dirname
        self.PACKAGE = package
        self.GUARD_EVERY = guard_every
        self.full = full          # None: every test the package installs (less exclude)
        self.quick = quick
        self.quick_subset = quick_subset
        self.exclude = set(exclude)
        self.args = args or {}   # test -> arguments added to its command line
        self.why = why

    # -- what there is --------------------------------------------------------------------
    def test_files(self):
        return {os.path.basename(p)[:-5]: p
                for p in sorted(glob.glob(os.path.join(ROOT, self.dirname, "*.test")))}

    def available(self):
        if not self.test_files():
            return f"no tests in {ROOT}/{self.dirname} (apt-get install {self.PACKAGE})"
        return None

    def version(self):
        return self.PACKAGE + " " + subprocess.run(
            ["dpkg-query", "-W", "-f=${Version}", self.PACKAGE],
            capture_output=True, text=True, check=False).stdout.strip()

    def slice_for(self, size):
        names = list(self.test_files())
        if size == "full" or self.quick is None:
            chosen = names if self.full is None else [n for n in self.full if n in names]
            chosen = [n for n in chosen if n not in self.exclude]
        else:
            chosen = [n for n in self.quick if n in names]
        self.QUICK_SUBSET = chosen if self.quick_subset is None else self.quick_subset
        return chosen

    def run_options(self, size):
        return {}

    def command(self, test):
        cp = configparser.ConfigParser(interpolation=None)
        cp.read(self.test_files()[test])
        return shlex.split(cp["Test"]["Exec"]) + list(self.args.get(test, ()))

    # -- running ----------------------------------------------------------------------------
    def run_one(self, test, env, outdir, label, timeout):
        """One test program in one mode -> its result."""
        work = os.path.join(outdir, f"tmp-{label}", test)
        shutil.rmtree(work, ignore_errors=True)
        os.makedirs(os.path.join(work, "home"))
        env = dict(env, TMPDIR=work, HOME=os.path.join(work, "home"))
        log_path = os.path.join(outdir, f"{label}.logs", test + ".log")
        os.makedirs(os.path.dirname(log_path), exist_ok=True)
        r = procs.run(self.command(test), env, timeout, log_path, cwd=work,
                      token=procs.new_token(f"{label}-{test}"), rss_limit=RSS_LIMIT)
        shutil.rmtree(work, ignore_errors=True)
        with open(log_path, errors="replace") as f:
            lines = f.read().splitlines()
        res = classify(r, lines)
        if res["status"] == "timeout" or r.rss_exceeded:
            res["detail"].insert(0, self.hung_case(test, lines, timeout, r.rss_exceeded))
        res["duration"] = round(r.duration, 2)
        res["peak_rss_mib"] = r.peak_rss >> 20
        return res

    def hung_case(self, test, lines, timeout, memory=False):
        """Name the case a program was in when it was killed (timeout or memory)."""
        last = 0
        for line in lines:
            if line.startswith(("ok ", "not ok ")):
                try:
                    last = int(line.split()[1 if line.startswith("ok") else 2])
                except (IndexError, ValueError):
                    pass
        cases = []
        # GLib test programs (they start by printing their random seed) list their cases
        # with -l, in the order they run them. Not asked of anything else: a script given -l
        # might just run its test again.
        if any(l.startswith("# random seed:") for l in lines[:5]):
            try:
                out = subprocess.run(self.command(test) + ["-l"], capture_output=True, text=True,
                                     timeout=30, env=modes.clean_env(), check=False).stdout
                cases = [c for c in out.splitlines() if c.startswith("/")]
            except (OSError, subprocess.TimeoutExpired):
                pass
        why = (f"held over {RSS_LIMIT >> 30} GiB" if memory else
               f"hung (no result after {timeout} s)")
        if last < len(cases):
            return f"{why} in case {last + 1} {cases[last]}"
        return f"{why} after case {last}"

    def run(self, tests, env, outdir, label, timeout, bound, echo):
        """Every test of the slice in one mode, two at a time. No new test starts once the
        bound has passed; one running then still ends at its own timeout."""
        results, lock, queue = {}, threading.Lock(), list(tests)
        start = time.monotonic()
        strays = []

        def worker():
            while True:
                with lock:
                    if not queue:
                        return
                    test = queue.pop(0)
                    if time.monotonic() - start > bound:
                        results[test] = {"status": "notrun", "verdict": "not reached",
                                         "detail": [f"not started before the {bound:.0f} s bound"]}
                        continue
                res = self.run_one(test, env, outdir, label, timeout)
                with lock:
                    results[test] = res
                    strays.extend(res.get("strays", []))
                if res["status"] not in ("pass", "skip"):
                    echo(f"  {label}: {test} {res['status']}: {'; '.join(res['detail'])[:160]}")

        # Daemon threads: if the check is stopped, its main thread kills their programs
        # (procs.kill_active) and exits without waiting for them.
        threads = [threading.Thread(target=worker, daemon=True) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        shutil.rmtree(os.path.join(outdir, f"tmp-{label}"), ignore_errors=True)
        info = {"duration": round(time.monotonic() - start, 1), "strays": strays,
                "log": os.path.join(outdir, f"{label}.logs")}
        return {t: results[t] for t in tests}, info

    def rerun(self, test, env, outdir, label, timeout):
        return self.run_one(test, env, outdir, label, timeout)


def classify(r, lines):
    """A finished (or killed) test program -> {status, verdict, detail, strays}."""
    notok = [l.strip() for l in lines if l.startswith("not ok ") and "# TODO" not in l]
    oks = [l for l in lines if l.startswith("ok ")]
    skipped_plan = any(l.startswith("1..0") for l in lines)
    extra = [l.strip()[:200] for l in lines
             if l.startswith(("Bail out!", "frugal:")) or ":ERROR:" in l or ":CRITICAL" in l]
    res = {"strays": r.strays, "detail": []}
    if r.rss_exceeded:
        res.update(status="fail", verdict="memory")
        res["detail"] += [f"its processes held {r.peak_rss / 2**30:.1f} GiB: killed"]
    elif r.timed_out:
        res.update(status="timeout", verdict="timed out")
        res["detail"] += notok[:3] + extra[:3]
    elif r.returncode == 77 or (r.returncode == 0 and (skipped_plan or (
            oks and all("# SKIP" in l for l in oks)))):
        res.update(status="skip", verdict="skipped")
        why = [l.split("# SKIP", 1)[1].strip() for l in lines if "# SKIP" in l]
        res["detail"] += [w for w in why if w][:1]
    elif r.returncode == 0 and not notok:
        res.update(status="pass", verdict="passed")
    else:
        rc = r.returncode
        how = f"killed by signal {-rc}" if rc is not None and rc < 0 else f"exit {rc}"
        res.update(status="fail", verdict=how)
        res["detail"] += [how] + notok[:5] + extra[:5]
    if r.strays and res["status"] in ("pass", "skip"):
        # A program that ends but leaves a process running (frugal's purger keeping a
        # child alive after its last thread ended) fails here even though its cases passed.
        res.update(status="fail", verdict="left processes running")
    if r.strays:
        res["detail"] += [f"left running: {s}" for s in r.strays[:3]]
    return res


GLIB = Suite(
    "glib", "glib", "libglib2.0-tests", guard_every=50,
    why="threads, thread pools, async queues, GSlice, GVariant, hash tables, main loops, "
        "GDBus with its own dbus-daemon, subprocesses; C, allocation-heavy",
    full=None,  # all ~280 test programs
    # "performance" is a benchmark of GObject's type system that runs for over 5 minutes
    # here and asserts nothing the others do not.
    exclude=["performance"],
    # ~40 s of tests under glibc: threads and their primitives, GSlice from threads, GVariant,
    # the containers, main loops and GTask across threads, spawning from threads, GDBus from
    # threads, regex (PCRE2). Left for the full run: the lock benchmarks (mutex, rec-mutex,
    # rwlock, 1bit-mutex: 11-22 s each, few allocations) and the other ~240.
    quick=["thread", "thread-pool", "asyncqueue", "cond", "once", "slice-concurrent", "slice",
           "gvariant", "hash", "array-test", "string", "list", "queue", "tree", "mainloop",
           "task", "cancellable", "gsubprocess", "spawn-multithreaded", "gdbus-proxy-threads",
           "regex", "keyfile", "bytes", "signals", "object", "contexts", "refcount",
           "converter-stream", "unix-streams", "io-channel"],
    quick_subset=["thread-pool", "asyncqueue", "slice-concurrent", "gvariant", "hash",
                  "mainloop", "task", "spawn-multithreaded", "regex"],
)

GDK_PIXBUF = Suite(
    "gdk-pixbuf", "gdk-pixbuf", "gdk-pixbuf-tests", guard_every=50,
    why="image decoders (PNG, JPEG, GIF, TIFF, BMP, ICO...) fed real and randomly corrupted "
        "files, scaling and compositing of big pixel buffers, decoding from several threads; C",
    # All of it (~12 s under glibc, 10 of them pixbuf-randomly-modified) in both sizes.
    full=None, exclude=[], quick=None,
    # pixbuf-randomly-modified corrupts its images from GLib's test seed, a new one each run,
    # and some corruptions make it fail under glibc too (3 runs of 150 here: a GdkPixbuf
    # critical, or a 110 MB allocation refused under its data limit; the same seed fails the
    # same way under glibc and frugal). One seed, with which it passes under glibc, makes
    # every mode decode the same 66 corrupted images.
    args={"pixbuf-randomly-modified": ["--seed=R02Sebb3a2c0f6bec61d467d50846b5f9330"]},
    quick_subset=["pixbuf-randomly-modified", "pixbuf-fail", "pixbuf-threads", "pixbuf-scale",
                  "pixbuf-jpeg"],
)

DBUS = Suite(
    "dbus", "dbus", "dbus-tests", guard_every=50,
    why="libdbus and dbus-daemon: message marshalling and parsing (also of corrupt messages), "
        "a daemon with many clients, fd passing, refcounts from several threads; C",
    # Full: all of it (~14 s under glibc): each test twice, with and without a daemon config
    # file. Quick: once (without).
    full=None, exclude=[],
    quick=["test-refs", "test-hash", "test-dbus-daemon", "test-dbus-daemon-eavesdrop",
           "test-relay", "test-corrupt", "test-message", "test-marshal", "test-fdpass",
           "test-loopback", "test-monitor", "test-server-oom", "test-misc-internals",
           "test-header-fields", "test-variant", "test-syntax", "test-shell", "test-printf",
           "test-containers", "test-dbus-daemon-fork.sh", "test-atomic", "test-userdb"],
    quick_subset=["test-refs", "test-hash", "test-dbus-daemon", "test-relay", "test-corrupt",
                  "test-message", "test-marshal", "test-fdpass", "test-loopback"],
)

DBUS_DEBUG = Suite(
    "dbus-debug", "dbus-debug-build", "dbus-tests", guard_every=50,
    why="the same tests against libdbus's debug build, whose internal tests also make malloc "
        "fail at each allocation in turn (out-of-memory paths); C",
    full=None, exclude=[],
    quick=["test-hash", "test-refs", "test-server-oom", "test-misc-internals", "test-relay",
           "test-dbus-daemon", "test-marshal"],
    quick_subset=["test-refs", "test-server-oom", "test-misc-internals"],
)

GLIB_NETWORKING = Suite(
    "glib-networking", "glib-networking", "glib-networking-tests", guard_every=50,
    why="TLS connections over GnuTLS between threads, certificates and their databases; C",
    full=None, exclude=[], quick=None, quick_subset=["connection-gnutls"],
)

LIBSOUP = Suite(
    "libsoup", "libsoup-3.0", "libsoup-3.0-tests", guard_every=50,
    why="an HTTP/1.1 and HTTP/2 client and server in one process: TLS, websockets, request "
        "bodies streamed, compressed and sniffed, cookies, caches, many connections, a client "
        "shared by threads; C over GLib",
    # Full: all of it (~45 s under glibc, most of it http2-body-stream-test and hsts-test)
    # but the 5 programs that start an Apache with the package's httpd.conf, which Debian 12's
    # Apache refuses (AuthDigestQop): they fail before a test case runs, under glibc too. And
    # three that fail now and then under glibc too: server-test and ssl-test hang (4 runs of
    # 40 and 2 of 30 in a series; under frugal 1 of 40 and 0 of 30), each time with its
    # client waiting for a response while the test's server thread waits on a condition of
    # its own, neither in the allocator (gdb, all threads); timeout-test, 2 runs of 15.
    full=None,
    exclude=["auth-test", "connection-test", "multithread-test", "proxy-test", "range-test",
             "server-test", "ssl-test", "timeout-test"],
    # http2-test's first case sends 100 requests on one HTTP/2 connection to a handler that
    # answers after a delay; now and then one of them never gets its answer and the case
    # fails after the session's 60 s I/O timeout ("Socket I/O timed out"), under glibc too:
    # whole program run 2 at a time beside 2 busy loops, glibc 1 of 70, frugal with dense
    # guards 2 of 70 (libsoup's own CI skips the case under ASan as flaky). The other 31
    # cases run.
    args={"http2-test": ["-s", "/http2/connections"]},
    # Quick: all but those and the two slowest (28 s of the 45; hsts-test mostly waits for
    # policies to expire).
    quick=["brotli-decompressor-test", "cache-test", "chunk-io-test", "coding-test",
           "context-test", "continue-test", "cookies-test", "date-test", "forms-test",
           "header-parsing-test", "hsts-db-test", "http2-test", "logger-test", "misc-test",
           "multipart-test", "no-ssl-test", "ntlm-test", "redirect-test", "request-body-test",
           "samesite-test", "server-auth-test", "session-test", "sniffing-test",
           "streaming-test", "tld-test", "unix-socket-test", "uri-parsing-test",
           "websocket-test"],
    quick_subset=["http2-test", "websocket-test", "server-auth-test", "context-test",
                  "session-test", "cache-test", "streaming-test"],
)

PANGO = Suite(
    "pango", "pango", "pango1.0-tests", guard_every=50,
    why="text layout: itemizing, breaking, shaping with HarfBuzz, font lookup and fallback "
        "through fontconfig, markup parsing, cairo rendering from several threads; C",
    # All of it in both sizes (~2 s under glibc; the layout tests skip without the fonts
    # they were written against).
    full=None, exclude=[], quick=None,
    quick_subset=["test-pangocairo-threads", "test-font", "testmisc", "markup-parse",
                  "test-itemize"],
)
