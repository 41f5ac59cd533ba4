"""The allocator modes a suite runs in, and a check that each one is really in force.

glibc is the baseline: the same tests with no preload, on the same machine, so that a test
which fails for reasons of its own (running as root, no network, a slow machine) is not
blamed on frugal. The frugal modes are those RELIABILITY.md names:
  plain   no FRUGAL_ variable: what a user gets (guarded sampling on at its default rate)
  secure  FRUGAL_SECURE=1: encoded free lists, canaries, fill checks, guard pages
  ledger  FRUGAL_STATS_FILE=<dir>/ledger-%p.json: every allocation counted, and a JSON
          ledger written by every process at exit (fork children and exec'd programs too).
          A file per process rather than /dev/null, so the check can see that the ledger
          was on and that what each process wrote at exit parses.
  guards  FRUGAL_GUARD_EVERY=N: dense guarded sampling (the ledger and secure mode turn
          guards off, so this mode sets nothing else). N is per suite (see each suite's
          GUARD_EVERY): frugal has 256 guard slots, and a guarded block that stays live keeps
          its slot, so a very small N fills the slots with a program's first long-lived
          blocks and then guards almost nothing more, while each guard costs a mapping
          and a page fault (9-14 us). Measured with strace (mprotect calls, one per guard):
          CPython (PYTHONMALLOC=malloc, 8 core-type modules in one process) gets ~6,000
          guards at N=50 or 100, ~20,000 at 500, ~45,000 at 1000, ~26,000 at 2000; GLib's
          test programs are short and allocate less, so there N=50 gives the most (gvariant
          alone: 130,000 guards at N=50, 16,000 at 200, 3,800 at 1000), and N=1 makes
          gvariant crawl (minutes) for little more.
"""
import glob
import json
import os
import subprocess
import tempfile

ALL_MODES = ["glibc", "plain", "secure", "ledger", "guards"]
FRUGAL_MODES = ALL_MODES[1:]


def clean_env():
    """The caller's environment without any allocator setting: every mode starts from this,
    so the glibc column is really glibc and a FRUGAL_ variable set by whoever runs the
    check cannot leak into a mode that does not name it."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("FRUGAL_") and k not in ("LD_PRELOAD", "PYTHONMALLOC")}
    return env


def mode_env(mode, lib, guard_every, ledger_dir=None):
    """The environment for one mode. ledger_dir: where the ledger mode's files go."""
    env = clean_env()
    if mode == "glibc":
        return env
    env["LD_PRELOAD"] = lib
    if mode == "secure":
        env["FRUGAL_SECURE"] = "1"
    elif mode == "ledger":
        env["FRUGAL_STATS_FILE"] = os.path.join(ledger_dir, "ledger-%p.json")
    elif mode == "guards":
        env["FRUGAL_GUARD_EVERY"] = str(guard_every)
    elif mode != "plain":
        raise ValueError(f"unknown mode {mode}")
    return env


def preflight(mode, lib, guard_every):
    """Check that the mode does what it says before hours go into it: libfrugal is mapped in
    a child (or is not, for glibc), frugal prints no warning about its options, and in ledger
    mode the child writes a ledger that parses. Returns an error string or None."""
    with tempfile.TemporaryDirectory(prefix="check-real-pre-") as d:
        env = mode_env(mode, lib, guard_every, ledger_dir=d)
        probe = "import sys; sys.stdout.write(open('/proc/self/maps').read())"
        p = subprocess.run(["/usr/bin/python3", "-c", probe], env=env,
                           capture_output=True, text=True, timeout=60, check=False)
        if p.returncode != 0:
            return f"probe exited {p.returncode}: {p.stderr.strip()[:300]}"
        mapped = "libfrugal" in p.stdout
        if mode == "glibc" and mapped:
            return "libfrugal is mapped with no preload"
        if mode != "glibc" and not mapped:
            return f"libfrugal is not mapped (LD_PRELOAD={lib})"
        if "frugal:" in p.stderr:
            return "frugal printed: " + p.stderr.strip()[:300]
        if mode == "ledger":
            files = glob.glob(os.path.join(d, "ledger-*.json"))
            if not files:
                return "no ledger file written"
            with open(files[0]) as f:
                if not json.load(f).get("ledger"):
                    return "ledger file does not say ledger: true"
    return None


def check_ledgers(ledger_dir):
    """Count the ledger files a run left and how many of them parse; then delete them (a
    CPython run leaves thousands, ~25 KB each). A process killed by a signal (a timeout,
    a test that crashes a child on purpose) writes none, so only bad files are a finding."""
    files = glob.glob(os.path.join(ledger_dir, "ledger-*.json"))
    bad = []
    for path in files:
        try:
            with open(path) as f:
                doc = json.load(f)
            if doc.get("ledger") is not True:
                bad.append(os.path.basename(path) + ": ledger is not true")
        except (OSError, ValueError) as e:
            bad.append(f"{os.path.basename(path)}: {e}")
        finally:
            try:
                os.unlink(path)
            except OSError:
                pass
    return {"files": len(files), "bad": bad[:20], "bad_count": len(bad)}
