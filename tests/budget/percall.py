#!/usr/bin/env python3
"""Instructions and D1 misses per call of the allocator's entry points in any program, from
one callgrind run with its cache simulation (the budget test's counter, and the tool behind
the per-call figures of issue #11: callgrind counts each call, cachegrind alone does not).
A tail jump (free_aligned_sized -> fg_free_aligned_sized) counts as a call of its target, as
callgrind records it; names at one address (free is fg_free itself) count under one of them.
Usage: percall.py [--lib LIB] [--match REGEX] -- PROGRAM ARGS"""
import argparse
import collections
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field

# The entry points of frugal, mimalloc, tcmalloc, jemalloc and glibc worth a row.
DEFAULT_MATCH = (r"^(fg_[a-z_]+|malloc|free|calloc|realloc|malloc_usable_size|malloc_size|"
                 r"mi_[a-z_]+|tc_[a-z_]+|je_[a-z_]+|operator new\(unsigned long\)|operator new\[\]\(unsigned long\)|"
                 r"operator delete\(void\*(, unsigned long)?\)|operator delete\[\]\(void\*(, unsigned long)?\))$")


@dataclass
class Fn:
    calls: int = 0
    self_cost: list = field(default_factory=list)   # per event
    incl_extra: list = field(default_factory=list)  # cost of the calls it makes


def _add(acc: list, values: list) -> None:
    if len(acc) < len(values):
        acc.extend([0] * (len(values) - len(acc)))
    for i, v in enumerate(values):
        acc[i] += v


def parse(path: str):
    """(events, {function: Fn}) from a callgrind out file (name compression resolved)."""
    names: dict = {}
    fns: dict = collections.defaultdict(Fn)
    events: list = []
    cur = callee = None
    after_calls = False

    def resolve(s: str) -> str:
        m = re.match(r"\((\d+)\)(?: (.*))?$", s)
        if not m:
            return s
        if m.group(2):
            names[m.group(1)] = m.group(2)
        return names.get(m.group(1), s)

    for line in open(path):
        line = line.rstrip("\n")
        if line.startswith("events:"):
            events = line.split()[1:]
        elif line.startswith("fn="):
            cur = resolve(line[3:])
        elif line.startswith("cfn="):
            callee = resolve(line[4:])
        elif line.startswith("calls="):
            fns[callee].calls += int(line[6:].split()[0])
            after_calls = True
        elif cur is not None and (line[:1].isdigit() or line[:1] in "+-*"):
            costs = [int(v) for v in line.split()[1:]]
            if after_calls:  # the inclusive cost of the call just named
                _add(fns[cur].incl_extra, costs)
                after_calls = False
            else:
                _add(fns[cur].self_cost, costs)
    return events, fns


def callgrind(cmd: list, env: dict, out: str, extra: tuple = ()) -> None:
    """Run cmd under callgrind with its cache simulation, the profile written to out."""
    subprocess.run(["valgrind", "--tool=callgrind", "--cache-sim=yes", f"--callgrind-out-file={out}", *extra, *cmd],
                   env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=True)


def inclusive(events: list, fn) -> dict:
    """A function's calls and its events with those of the calls it makes (all 0 if None)."""
    cost = dict.fromkeys(events, 0)
    if fn is not None:
        for acc in (fn.self_cost, fn.incl_extra):
            for e, v in zip(events, acc):
                cost[e] += v
    cost["calls"] = fn.calls if fn is not None else 0
    return cost


def per_call(events: list, fn: Fn) -> dict:
    """Inclusive instructions and D1 misses (read + write) per call."""
    c = inclusive(events, fn)
    n = max(c["calls"], 1)
    return {"calls": c["calls"], "Ir": c["Ir"] / n, "D1miss": (c["D1mr"] + c["D1mw"]) / n}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lib", help="LD_PRELOAD this library")
    ap.add_argument("--match", default=DEFAULT_MATCH, help="regex of function names to show")
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    cmd = a.cmd[1:] if a.cmd[:1] == ["--"] else a.cmd
    if not cmd:
        ap.error("no program")
    env = dict(os.environ)
    if a.lib:
        env["LD_PRELOAD"] = a.lib
    with tempfile.TemporaryDirectory() as d:
        callgrind(cmd, env, f"{d}/cg.out")
        events, fns = parse(f"{d}/cg.out")
    pat = re.compile(a.match)
    rows = [(name, per_call(events, f)) for name, f in fns.items() if pat.search(name) and f.calls]
    rows.sort(key=lambda r: -r[1]["calls"] * r[1]["Ir"])
    print(f"{'function':44s} {'calls':>11s} {'Ir/call':>8s} {'D1miss/call':>11s}")
    for name, r in rows:
        print(f"{name[:44]:44s} {r['calls']:11d} {r['Ir']:8.2f} {r['D1miss']:11.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
