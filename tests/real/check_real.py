#!/usr/bin/python3
"""make check-real: real programs' own test suites, under glibc and under frugal.

    tests/real/check_real.py --lib build/libfrugal.so [--size quick|full] [--out out/check-real]

For each suite (CPython's regression tests; the installed tests of GLib, gdk-pixbuf, D-Bus
and its debug build, glib-networking, libsoup and Pango; NumPy's tests): the slice runs once
under glibc (no preload), then once per frugal mode (modes.py); every test that passed under
glibc must pass in every frugal mode. Exit status 1 when one does not (or when a suite or mode
could not run at all), 0 otherwise. The last line printed is "check-real: N passed, M failed,
K skipped", counting (test, frugal mode) comparisons.

Sizes:
  full   every suite's whole slice in all four frugal modes: about 1-1.5 h on this 2-core VM
         (CPython's 67 modules ~8-15 min a mode; GLib's 286 programs ~3 min a mode; NumPy's
         148 files ~1.5 min a mode).
  quick  what CI runs: 5.3 min measured with every test passing (glibc baseline included,
         machine load 10), 7.7 min with a library under which tests hung in two modes (each
         hang costs its 90 s timeout). A shorter slice of each
         suite (the suites' QUICK lists) under glibc and in plain and secure mode, and a
         subset of it (QUICK_SUBSET: fork, threads, subprocess, the allocation-heaviest) with
         the ledger on and with dense guards; shorter per-test timeouts.

The glibc baseline is cached in <out>/baseline-<suite>-<size>.json, keyed by machine, kernel,
core count, the suite's package version and the harness's own choices for it, so a rerun on
the same machine only runs the frugal modes (--refresh-baseline runs it again). A test that
fails under frugal but passed in the baseline is run once more, alone, in the frugal mode it
failed in and under glibc: if glibc fails it too, the machine is to blame (load, timing) and
the cell is marked flaky (and listed) instead of counted. One that the mode passes when run
alone again, glibc passing too, is INTERMITTENT: listed on a line of its own and counted in
the last line, and a failure in full runs (--strict).
"""
import argparse
import datetime
import hashlib
import json
import os
import shutil
import signal
import sys
import time
import types

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import modes
import procs
import report
import suite_cpython
from suite_numpy import NUMPY
from suite_installed import DBUS, DBUS_DEBUG, GDK_PIXBUF, GLIB, GLIB_NETWORKING, LIBSOUP, PANGO

SUITES = {"cpython": suite_cpython, "glib": GLIB, "gdk-pixbuf": GDK_PIXBUF, "dbus": DBUS,
          "dbus-debug": DBUS_DEBUG, "glib-networking": GLIB_NETWORKING, "libsoup": LIBSOUP,
          "pango": PANGO, "numpy": NUMPY}

# Per-test timeouts and per-(suite, mode) bounds, in seconds. A timeout is a few times the
# slowest test's glibc time on this 2-core VM when it is busy (load 7-12): CPython's slowest
# quick module (test_concurrent_futures, trimmed) ~25 s, full: test_concurrent_futures 163 s,
# test_asyncio 111 s, test_multiprocessing_forkserver 85 s; GLib's slowest ~20-40 s. regrtest
# itself kills a worker at 1.5x its timeout. A bound is the whole slice's glibc time x 3-5.
# The quick numbers keep CI's run near 5 minutes, and under 8 when a test hangs in every
# mode: a hang costs its timeout, not the bound.
LIMITS = {
    "quick": {"cpython": (90, 240), "glib": (60, 150), "gdk-pixbuf": (60, 90),
              "dbus": (60, 90), "dbus-debug": (60, 90), "glib-networking": (60, 90),
              "libsoup": (60, 150), "pango": (60, 60), "numpy": (120, 240)},
    "full": {"cpython": (450, 3600), "glib": (300, 1500), "gdk-pixbuf": (300, 600),
             "dbus": (300, 900), "dbus-debug": (300, 900), "glib-networking": (300, 600),
             "libsoup": (300, 600), "pango": (300, 300), "numpy": (300, 900)},
}


def log(msg):
    print(msg, flush=True)


def baseline_key(suite, limits):
    """What a cached glibc result depends on: the machine, the tests' and interpreter's
    versions, and the harness's own choices for the suite (its source: slices, ignored
    classes, options; its timeouts). Any change runs the baseline again."""
    try:
        with open("/etc/machine-id") as f:
            machine = f.read().strip()
    except OSError:
        machine = os.uname().nodename
    module = suite if isinstance(suite, types.ModuleType) else sys.modules[type(suite).__module__]
    with open(module.__file__, "rb") as f:
        harness = hashlib.sha1(f.read()).hexdigest()[:12]
    return {"machine": machine, "version": suite.version(), "cores": os.cpu_count(),
            "kernel": os.uname().release, "harness": harness, "limits": list(limits)}


def load_baseline(path, key):
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, ValueError):
        return {}
    return doc.get("results", {}) if doc.get("key") == key else {}


def save_baseline(path, key, results):
    with open(path, "w") as f:
        json.dump({"key": key, "saved": datetime.datetime.now().isoformat(timespec="seconds"),
                   "results": results}, f, indent=1)


def run_suite(name, suite, args, out, doc):
    """Baseline, then each frugal mode, for one suite; fills doc['suites'][name]."""
    sdoc = doc["suites"][name] = {"about": getattr(suite, "why", "") or (suite.__doc__ or "")
                                  .strip().split("\n")[0], "runs": {}, "tests": {}}
    why = suite.available()
    if why:
        sdoc["unavailable"] = why
        log(f"{name}: NOT RUN: {why}")
        return False
    sdoc["version"] = suite.version()
    tests = suite.slice_for(args.size)
    if args.only:
        tests = [t for t in tests if t in args.only]
    subset = [t for t in getattr(suite, "QUICK_SUBSET", tests) if t in tests]
    timeout, bound = LIMITS[args.size][name]
    opts = suite.run_options(args.size)
    sdir = os.path.join(out, name)
    os.makedirs(sdir, exist_ok=True)
    rows = sdoc["tests"] = {t: {} for t in tests}

    # The baseline: cached per machine; only what the cache lacks is run.
    bpath = os.path.join(out, f"baseline-{name}-{args.size}.json")
    key = baseline_key(suite, (timeout, bound))
    cached = {} if args.refresh_baseline else load_baseline(bpath, key)
    missing = [t for t in tests if t not in cached]
    if "glibc" in args.modes and missing:
        log(f"{name} glibc: {len(missing)} tests (baseline), timeout {timeout} s, bound {bound} s")
        res, info = suite.run(missing, modes.mode_env("glibc", args.lib, 0), sdir, "glibc",
                              timeout, bound, log, **opts)
        sdoc["runs"]["glibc"] = info
        cached.update({t: r for t, r in res.items() if r["status"] != "notrun"})
        save_baseline(bpath, key, cached)
        log(f"{name} glibc: {summary_of(res)} in {info['duration']:.0f} s")
    elif "glibc" in args.modes:
        sdoc["runs"]["glibc"] = {"duration": 0, "cached": True}
        log(f"{name} glibc: baseline from {bpath}")
    for t in tests:
        if t in cached:
            rows[t]["glibc"] = cached[t]

    for mode in args.modes:
        if mode == "glibc":
            continue
        run_tests = subset if (args.size == "quick" and mode in ("ledger", "guards")) else tests
        ledger_dir = os.path.join(sdir, f"ledgers-{mode}")
        if mode == "ledger":
            shutil.rmtree(ledger_dir, ignore_errors=True)
            os.makedirs(ledger_dir)
        env = modes.mode_env(mode, args.lib, suite.GUARD_EVERY, ledger_dir)
        doc["mode_env"].setdefault(mode, " ".join(
            f"{k}={v}" for k, v in env.items() if k.startswith("FRUGAL_")).replace(
                ledger_dir, "<suite>/ledgers-ledger") or "(none)")
        if mode == "guards":
            doc["mode_env"][mode] = "FRUGAL_GUARD_EVERY=" + ", ".join(
                f"{SUITES[n].GUARD_EVERY} ({n})" for n in args.suites)
        log(f"{name} {mode}: {len(run_tests)} tests, timeout {timeout} s, bound {bound} s")
        res, info = suite.run(run_tests, env, sdir, mode, timeout, bound, log, **opts)
        if mode == "ledger":
            info["ledgers"] = modes.check_ledgers(ledger_dir)
            shutil.rmtree(ledger_dir, ignore_errors=True)
        sdoc["runs"][mode] = info
        for t, r in res.items():
            rows[t][mode] = r
        extra = f", {len(info['strays'])} stray processes" if info.get("strays") else ""
        log(f"{name} {mode}: {summary_of(res)} in {info['duration']:.0f} s{extra}")

    # A frugal failure of a test glibc passed: once more under glibc, alone, to tell this
    # machine's flakiness from frugal's doing (as many as the run's rerun budget allows).
    suspects = sorted({t for t, row in rows.items()
                       if row.get("glibc", {}).get("status") == "pass"
                       and any(row.get(m, {}).get("status") in report.BAD
                               for m in modes.FRUGAL_MODES)})
    for t in suspects:
        if args.reruns_left <= 0:
            log(f"{name}: rerun budget spent, {t} not rerun")
            continue
        args.reruns_left -= 1
        # Once more in each frugal mode it failed in, alone: a pass then is this machine's
        # timing (judged flaky, and said so), not frugal's doing.
        for m in modes.FRUGAL_MODES:
            cell = rows[t].get(m, {})
            if cell.get("status") not in report.BAD:
                continue
            ldir = os.path.join(sdir, "ledgers-rerun")
            os.makedirs(ldir, exist_ok=True)
            r = suite.rerun(t, modes.mode_env(m, args.lib, suite.GUARD_EVERY, ldir), sdir, f"{m}-rerun", timeout,
                            **opts)
            shutil.rmtree(ldir, ignore_errors=True)
            log(f"{name} {m} rerun of {t}: {r['status']}")
            cell["rerun"] = {"status": r["status"]}
        r = suite.rerun(t, modes.mode_env("glibc", args.lib, 0), sdir, "glibc-rerun", timeout,
                        **opts)
        log(f"{name} glibc rerun of {t}: {r['status']}")
        for m in modes.FRUGAL_MODES:
            if m in rows[t]:
                rows[t][m]["glibc_rerun"] = {"status": r["status"]}
    return True


def summary_of(res):
    counts = {}
    for r in res.values():
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    return ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", default="build/libfrugal.so", help="the libfrugal.so to preload")
    ap.add_argument("--size", choices=["quick", "full"], default="quick")
    ap.add_argument("--out", default="out/check-real")
    ap.add_argument("--suites", default=",".join(SUITES),
                    help="comma-separated, from: " + ", ".join(SUITES))
    ap.add_argument("--modes", default=",".join(modes.ALL_MODES),
                    help="comma-separated, from: " + ", ".join(modes.ALL_MODES))
    ap.add_argument("--refresh-baseline", action="store_true",
                    help="run the glibc baseline again instead of using the cached one")
    ap.add_argument("--only", default="",
                    help="comma-separated test names: run only these (of the chosen slice)")
    ap.add_argument("--strict", action=argparse.BooleanOptionalAction, default=None,
                    help="count intermittent cells (failed, passed when run alone) as failed; "
                         "the default in full runs, not in quick ones")
    args = ap.parse_args()
    if args.strict is None:
        args.strict = args.size == "full"
    args.only = {t for t in args.only.split(",") if t}
    args.lib = os.path.abspath(args.lib)
    args.suites = [s for s in args.suites.split(",") if s]
    args.modes = [m for m in args.modes.split(",") if m]
    for s in args.suites:
        if s not in SUITES:
            ap.error(f"unknown suite {s}")
    for m in args.modes:
        if m not in modes.ALL_MODES:
            ap.error(f"unknown mode {m}")
    if "glibc" not in args.modes:
        args.modes.insert(0, "glibc")  # the baseline is what everything is judged against
    if not os.path.exists(args.lib):
        log(f"check-real: {args.lib} does not exist (make build first)")
        log("check-real: 0 passed, 1 failed")
        return 1
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    start = time.monotonic()
    # Reruns for a few failing tests only: a healthy run with a flaky failure or two gets
    # them, however slow the machine (a deadline in seconds did not: a CI machine twice as
    # slow as this one reached libsoup after it); one where frugal fails everywhere does not
    # spend minutes confirming each failure (a rerun costs up to a timeout per mode).
    args.reruns_left = 3 if args.size == "quick" else 12

    doc = {"lib": args.lib, "size": args.size, "suites": {}, "mode_env": {},
           "started": datetime.datetime.now().isoformat(timespec="seconds")}
    problems = []
    for mode in args.modes:
        err = modes.preflight(mode, args.lib, 1000)
        if err:
            problems.append(f"mode {mode}: {err}")
            log(f"check-real: mode {mode} is not in force: {err}")
    if problems:
        log("check-real: 0 passed, 1 failed")
        return 1
    log(f"check-real ({args.size}): {args.lib}; modes {', '.join(args.modes)}; "
        f"suites {', '.join(args.suites)}; output in {out}")

    # SIGTERM (a CI timeout, someone stopping the check) ends the run like ^C: the test run
    # in progress is killed with everything it started (procs.run), and what was done so far
    # is still judged and written.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    # A check started in the background by a non-interactive shell inherits SIGINT ignored,
    # and an ignored signal stays ignored across exec: test_threading's interrupt_main tests
    # would then fail under glibc and frugal alike. A handler of our own is reset to the
    # default in every program we start.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        for name in args.suites:
            if not run_suite(name, SUITES[name], args, out, doc):
                problems.append(f"suite {name} did not run: {doc['suites'][name]['unavailable']}")
    except (KeyboardInterrupt, SystemExit):
        procs.kill_active()
        problems.append("interrupted: the results cover only what had finished")
        log("check-real: interrupted")

    passed, failed, skipped, regs, inter = report.judge(doc["suites"])
    failed += len(problems) + (len(inter) if args.strict else 0)
    doc["duration"] = time.monotonic() - start
    doc["problems"] = problems
    cell_list = lambda cells: [{"suite": s, "test": t, "mode": m, "status": c["status"],
                                "detail": c.get("detail", [])} for s, t, m, c in cells]
    doc["regressions"] = cell_list(regs)
    doc["intermittent"] = cell_list(inter)
    doc["summary"] = f"{passed} passed, {failed} failed, {skipped} skipped, {len(inter)} intermittent"
    report.write(doc, out)

    log("")
    log(report.console_table(doc))
    log("")
    for p in problems:
        log(f"PROBLEM: {p}")
    for s, t, m, c in regs:
        log(f"REGRESSION {s} {t} [{m}] {c['status']}: " + "; ".join(c.get("detail", []))[:300])
    for s, t, m, c in inter:
        log(f"INTERMITTENT {s} {t} [{m}] {c['status']}, then passed alone"
            + (" (counted as failed: --strict)" if args.strict else "") + ": "
            + "; ".join(c.get("detail", []))[:300])
    log(f"results: {out}/results.md, {out}/results.json ({doc['duration']:.0f} s)")
    log(f"check-real: {doc['summary']}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
