#!/usr/bin/env python3
"""Fast-path instruction budget (STYLE.md): count, with callgrind, the instructions of
frugal's fast paths and compare them with the checked-in budget. Instruction counts are
exact and repeatable, unlike times, so this can be a test. Each workload (pair.c) runs twice,
with N and 2N operations; the difference is N operations alone, warm-up and start-up gone.
Budget lines (budget.txt):
  MODE SIZE LIMIT            instructions per operation of pair.c's MODE, loop included
                             (a bare `SIZE LIMIT` is a malloc/free pair);
  call FUNC MODE SIZE LIMIT  instructions per call of FUNC (callgrind's mangled name, the
                             calls it makes included) in that workload; where FUNC shares its
                             address with other names (free is fg_free: FG_ALIAS), callgrind
                             reports it under one of them, found in the library's symbols.
D1 misses per call (callgrind's cache simulation) are printed beside, not checked: in a
loop of one block they are 0, and percall.py shows them for real programs.
Usage: budget.py PAIR_BINARY LIBFRUGAL BUDGET_FILE"""
import collections
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import percall  # noqa: E402

N = 100000
COUNT = {"thread": 200}  # operations per run where N would be slow
WHAT = {"pair": "malloc+free pair", "held": "malloc+free pair, page kept in use", "list": "linked-list node built and freed",
        "sized": "malloc+free_sized pair", "new": "operator new+sized delete pair",
        "usable": "malloc_usable_size call", "thread": "thread started, run and joined",
        "aligned": "aligned_alloc+free pair at its size's alignment", "memalign": "posix_memalign+free pair at its size's alignment"}


def profile(binary: str, lib: str, n: int, size: int, mode: str) -> tuple:
    """(total events, {function: percall.Fn}) of one run. A mode ending in +ledger runs with
    the ledger on (FRUGAL_STATS=1: the inline ledger's paths)."""
    env = dict(os.environ, LD_PRELOAD=lib)
    for k in [k for k in env if k.startswith("FRUGAL_")]:
        del env[k]
    mode, ledger = mode.removesuffix(LEDGER), mode.endswith(LEDGER)
    if ledger:
        env["FRUGAL_STATS"] = "1"
        # The ledger samples its peaks every 100 ms of the clock (stats.c): how many samples
        # fall in a run depends on the machine's speed, not on the code. One sample an hour
        # leaves the first, which both runs have.
        env["FRUGAL_STATS_INTERVAL_MS"] = "3600000"
    env["FRUGAL_PURGE_THREAD"] = "0"  # its passes depend on the clock, not on the workload
    # A guarded allocation (one in 500,000 by default) costs thousands of instructions and
    # falls in the measured window or not: the fast path is counted without them (their cost
    # is measured on its own, README "Guarded sampling").
    env["FRUGAL_GUARD_EVERY"] = "0"
    with tempfile.TemporaryDirectory() as d:
        out = f"{d}/cg.out"
        percall.callgrind([binary, str(n), str(size), mode], env, out, ["--demangle=no"])
        events, fns = percall.parse(out)
    total = {}
    for f in fns.values():
        for e, v in zip(events, f.self_cost):
            total[e] = total.get(e, 0) + v
    return total, events, fns


LEDGER = "+ledger"


def aliases(lib: str) -> dict:
    """{name: every exported name at its address} for the library's functions."""
    at = collections.defaultdict(list)
    out = subprocess.run(["nm", "-D", "--defined-only", lib], capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        words = line.split()
        if len(words) == 3 and words[1] in "Tt":
            at[words[0]].append(words[2].split("@")[0])
    return {name: names for names in at.values() for name in names}


def main() -> int:
    binary, lib, budget_file = sys.argv[1:4]
    ops, calls = {}, {}
    for line in open(budget_file):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        if words[0] == "call":
            calls[(words[1], words[2], int(words[3]))] = int(words[4])
        else:
            mode = words[0] if len(words) == 3 else "pair"
            ops[(mode, int(words[-2]))] = int(words[-1])
    runs = {}
    for mode, size in sorted(set(ops) | {(m, s) for _, m, s in calls}):
        n = COUNT.get(mode, N)
        runs[(mode, size)] = (profile(binary, lib, n, size, mode), profile(binary, lib, 2 * n, size, mode))
    failed = 0
    for (mode, size), limit in sorted(ops.items()):
        (a, _, _), (b, _, _) = runs[(mode, size)]
        n = COUNT.get(mode, N)
        per = (b["Ir"] - a["Ir"]) / n
        d1 = (b["D1mr"] + b["D1mw"] - a["D1mr"] - a["D1mw"]) / n
        ok = per <= limit
        failed += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {mode} {size} B: {per:.1f} instructions per {WHAT[mode.removesuffix(LEDGER)]} "
              f"(loop included{', ledger on' if mode.endswith(LEDGER) else ''}), budget {limit}; D1 misses {d1:.3f}")
    same = aliases(lib)
    for (fn, mode, size), limit in sorted(calls.items()):
        (_, ev, fa), (_, _, fb) = runs[(mode, size)]
        seen = next((name for name in same.get(fn, [fn]) if name in fb), fn)
        ia, ib = percall.inclusive(ev, fa.get(seen)), percall.inclusive(ev, fb.get(seen))
        n = (ib["calls"] - ia["calls"]) or 1
        per = (ib["Ir"] - ia["Ir"]) / n
        d1 = (ib["D1mr"] + ib["D1mw"] - ia["D1mr"] - ia["D1mw"]) / n
        ok = ib["calls"] - ia["calls"] >= COUNT.get(mode, N) and per <= limit
        failed += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {fn} in {mode} {size} B: {per:.1f} instructions per call "
              f"({ib['calls'] - ia['calls']} calls more), budget {limit}; D1 misses {d1:.3f}")
    print(f"budget: {len(ops) + len(calls)} checks, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
